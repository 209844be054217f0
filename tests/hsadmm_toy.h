/* The toy H-SADMM problem of the exchange tests (test_hsadmm_overlap,
 * test_hsadmm_code, test_comm_quantize): two parameter tensors, a weight of
 * dw elements and a dense tail of dd, and rank r's local problem
 * 1/2 |t - a_r|^2 with a_r = target(r, j), solved exactly from the
 * proximal targets each round. */
#ifndef PX_HSADMM_TOY_H
#define PX_HSADMM_TOY_H

#include <stddef.h>
#include <stdint.h>

#include "prunex/hsadmm.h"
#include "prunex/hsadmm_internal.h"
#include "px_test_util.h"

typedef double (*px_toy_target_fn)(int rank, int j);

/* theta = argmin 1/2 |t - a|^2 + rho/2 |t - z_i + u|^2, tensor by tensor. */
static inline void px_toy_local_solve(px_hsadmm_t *h, float *theta, size_t dw, size_t dd,
                                      px_toy_target_fn target, int rank) {
  for (int i = 0; i < 2; i++) {
    const float *z, *u;
    float rho;
    px_hsadmm_prox(h, i, &z, &u, &rho);
    size_t o = i ? dw : 0, n = i ? dd : dw;
    for (size_t j = 0; j < n; j++)
      theta[o + j] =
          (float)((target(rank, (int)(o + j)) + rho * ((double)z[j] - u[j])) / (1.0 + rho));
  }
}

/* FNV of z, z_i, u and v, folded to 52 bits so that a double holds it. */
static inline double px_toy_state_hash(px_hsadmm_t *h, size_t dw, size_t dd) {
  uint64_t x = 0;
  for (int i = 0; i < 2; i++) {
    size_t n = i ? dd : dw;
    const float *u, *v, *zi, *uu;
    float rho;
    px_hsadmm_duals(h, i, &u, &v);
    px_hsadmm_prox(h, i, &zi, &uu, &rho);
    x = x * 31 + px_test_fnv64(px_hsadmm_z(h, i), n * 4);
    x = x * 31 + px_test_fnv64(zi, n * 4);
    x = x * 31 + px_test_fnv64(u, n * 4);
    if (v) x = x * 31 + px_test_fnv64(v, n * 4);
  }
  return (double)(x >> 12);
}

#endif
