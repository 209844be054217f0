/* H-SADMM's state families and the arithmetic of a round on them, written
 * once for host and device memory (issue 27, item 6).
 *
 * The families (u, z_i and z_i's previous value, v, z and its previous
 * value, s) and the per-layer residual sums live where a "state ops" table
 * says: px__hss_host_ops keeps them in host memory and runs hsadmm.c's
 * loops (the CPU reference, bit for bit what the round always computed);
 * px__hss_cuda_ops keeps them in device memory and runs the launchers of
 * prunex/cuda_kernels.h (each the bitwise twin of a loop here, except the
 * squared norms, which are deterministic but summed in another order). The
 * phase functions px__hss_* below are the round's elementwise phases and
 * its residuals; hsadmm.c calls them with the host table, and
 * tests/test_gpu_round.c runs them with both tables on the same random data.
 *
 * Everything a round allocates is allocated by px__hss_create: the phases
 * allocate nothing. Nothing here is seen outside admm/ (and the tests). */
#ifndef PX_HSADMM_STATE_H
#define PX_HSADMM_STATE_H

#include <stddef.h>
#include <stdint.h>

#include "prunex/px.h"

/* Per-layer sums of the residual allreduce, in this order. */
enum {
  PX__R_INTRA, PX__S_INTRA, PX__THETA, PX__U_SQ,               /* every rank: N blocks */
  PX__R_INTER, PX__S_INTER, PX__ZI_SQ, PX__Z_SQ, PX__V_SQ,     /* leaders: M blocks */
  PX__NSUMS
};

/* Where the state lives and how its arithmetic runs. Every buffer argument
 * is memory of the table's side ("state memory"), except `host`. The
 * arithmetic is that of cuda_kernels.h's launchers of the same names; a
 * launch may be asynchronous: results are ready after sync (download
 * waits too). */
typedef struct {
  const char *name;   /* "host" or "cuda" */
  int device;         /* 1: state memory is device memory */
  /* zeroed state memory, freed by release (NULL for 0 bytes) */
  px_status_t (*alloc)(size_t bytes, const char *name, void **out);
  void (*release)(void *p);
  px_status_t (*copy)(void *dst, const void *src, size_t bytes);
  px_status_t (*zero)(void *dst, size_t bytes);
  px_status_t (*upload)(void *dst, const void *host, size_t bytes);
  px_status_t (*download)(void *host, const void *src, size_t bytes);
  px_status_t (*sync)(void);
  px_status_t (*add)(float *out, const float *a, const float *b, size_t n);
  px_status_t (*scale)(float *x, float f, size_t n);
  px_status_t (*zi_update)(float *zi, const float *s, const float *z, const float *v,
                           double rho1, double rho2, double lambda, int num_nodes,
                           int ranks_per_node, size_t n);
  px_status_t (*z_flat)(float *z, const float *s, double rho1, double lambda, int num_ranks,
                        size_t n);
  px_status_t (*dual)(float *x, const float *a, const float *b, size_t n);
  px_status_t (*rescale)(float *x, double rho_old, double rho_new, size_t n);
  /* *out = ||a - b||^2 (b NULL: ||a||^2) in double; out is state memory, ws
   * the state's scratch */
  px_status_t (*sqdiff)(double *out, const float *a, const float *b, size_t n, void *ws);
} px__hss_ops_t;

extern const px__hss_ops_t px__hss_host_ops;
extern const px__hss_ops_t px__hss_cuda_ops;

typedef struct {
  const px__hss_ops_t *ops;
  int n;                /* tensors */
  size_t *off;          /* [n] host: offset of each tensor in the families */
  size_t *numel;        /* [n] host */
  size_t total;
  float *u, *zi, *zi_prev, *v, *z, *z_prev, *s; /* [total] each, state memory */
  double *dsums;        /* [n * PX__NSUMS] state memory: the round's raw sums */
  void *ws;             /* scratch of the squared norms, state memory (device only) */
} px__hss_t;

/* Lays out n tensors of numel[i] elements and allocates every family
 * (zeroed) with ops. On failure st holds what was allocated: px__hss_free
 * frees it. PX_ERR_NOT_BUILT for the CUDA table in a build without CUDA. */
px_status_t px__hss_create(px__hss_t *st, const px__hss_ops_t *ops, int n, const size_t *numel);
void px__hss_free(px__hss_t *st);

/* dst = src, both families of st (total floats). */
px_status_t px__hss_copy(const px__hss_t *st, float *dst, const float *src);

/* s = theta + u per tensor (theta[i]: tensor i in state memory), before
 * the intra sum. */
px_status_t px__hss_theta_u(px__hss_t *st, const float *const *theta);

/* z_i_prev = z_i; z_i = (rho1 s + rho2 (z - v)) / (lambda/M + P rho1 +
 * rho2) per tensor (DESIGN.md section 4, step 2), before the projection. */
px_status_t px__hss_zi(px__hss_t *st, const double *rho1, const double *rho2, double lambda,
                       int num_nodes, int ranks_per_node);

/* Flat ablation: z_prev = z; z = rho1 s / (lambda + N rho1) per tensor. */
px_status_t px__hss_z_flat(px__hss_t *st, const double *rho1, double lambda, int num_ranks);

/* x *= f over n floats of state memory (the mean of the packed sum). */
px_status_t px__hss_scale(const px__hss_t *st, float *x, float f, size_t n);

/* s = z_i + v: what a leader packs for the exact exchange. */
px_status_t px__hss_pack_source(px__hss_t *st);

/* v += z_i - z (step 5, inter dual). */
px_status_t px__hss_dual_v(px__hss_t *st);

/* Step 5 on every rank and the round's residual sums: u += theta - target
 * (target z_i, or z for the flat ablation), and into sums[n * PX__NSUMS]
 * (host) each layer's ||theta - target||^2, rho1^2 ||target -
 * target_prev||^2, ||theta||^2, ||u||^2 and, on a leader, ||z_i - z||^2,
 * rho2^2 ||z - z_prev||^2, ||z_i||^2, ||z||^2, ||v||^2 (0 elsewhere).
 * Waits for the state's arithmetic (the sums come back to the host). */
px_status_t px__hss_residuals(px__hss_t *st, const float *const *theta, int flat, int leader,
                              const double *rho1, const double *rho2, double *sums);

/* Scaled dual of tensor i after its penalty changed (x is u or v). */
px_status_t px__hss_rescale(const px__hss_t *st, float *x, int i, double rho_old,
                            double rho_new);

#endif
