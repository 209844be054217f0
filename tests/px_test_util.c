/* Shared test helpers: reproducible random numbers and float comparison. */
#include "px_test_util.h"

#include <math.h>

void px_test_rng_seed(px_test_rng_t *r, uint64_t seed) {
  r->s = seed ? seed : 0x9E3779B97F4A7C15ull;
}

uint64_t px_test_rng_u64(px_test_rng_t *r) {
  r->s ^= r->s >> 12;
  r->s ^= r->s << 25;
  r->s ^= r->s >> 27;
  return r->s * 0x2545F4914F6CDD1Dull;
}

double px_test_rng_uniform(px_test_rng_t *r) {
  return (double)(px_test_rng_u64(r) >> 11) * (1.0 / 9007199254740992.0);
}

double px_test_rng_normal(px_test_rng_t *r) {
  double u1 = px_test_rng_uniform(r), u2 = px_test_rng_uniform(r);
  if (u1 < 1e-300) u1 = 1e-300;
  return sqrt(-2.0 * log(u1)) * cos(6.283185307179586 * u2);
}

void px_test_fill_normal(px_test_rng_t *r, float *x, size_t n) {
  for (size_t i = 0; i < n; i++) x[i] = (float)px_test_rng_normal(r);
}

double px_test_max_rel_err(const float *a, const float *b, size_t n) {
  double worst = 0.0;
  for (size_t i = 0; i < n; i++) {
    double d = fabs((double)a[i] - (double)b[i]);
    double m = fabs((double)b[i]);
    double e = d / (m > 1.0 ? m : 1.0);
    if (e > worst || isnan(e)) worst = isnan(e) ? INFINITY : e;
  }
  return worst;
}
