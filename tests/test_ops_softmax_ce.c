/* Softmax cross-entropy: mean loss, dlogits and the correct count against a
 * double-precision reference, dlogits against central finite differences of
 * the loss, stability for huge logits, evaluation without gradients and the
 * label range check. */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "nn/cpu/px_ref.h"
#include "prunex/ops.h"
#include "prunex/ops_internal.h"
#include "px_test_util.h"

#define assert_ok(call)                                                                   \
  do {                                                                                    \
    px_status_t st_ = (call);                                                             \
    if (st_ != PX_OK) fail_msg("%s: %s (%s)", #call, px_status_name(st_), px_last_error()); \
  } while (0)

typedef struct {
  px_ops_t *ops;
  int64_t n, k;
  px_tensor_t logits, dlogits, labels;
  float *hl;
  int32_t *hlab;
} ce_fixture_t;

static void fixture_init(ce_fixture_t *f, int64_t n, int64_t k, float scale, uint64_t seed) {
  memset(f, 0, sizeof *f);
  assert_ok(px_ops_create(px_device_cpu(), 2, &f->ops));
  f->n = n;
  f->k = k;
  px_test_rng_t rng;
  px_test_rng_seed(&rng, seed);
  const int64_t ld[2] = {n, k}, bd[1] = {n};
  assert_ok(px_tensor_init(&f->logits, px_device_cpu(), PX_DTYPE_F32, 2, ld));
  assert_ok(px_tensor_init(&f->dlogits, px_device_cpu(), PX_DTYPE_F32, 2, ld));
  assert_ok(px_tensor_init(&f->labels, px_device_cpu(), PX_DTYPE_I32, 1, bd));
  assert_ok(px_tensor_alloc(&f->logits, "logits"));
  assert_ok(px_tensor_alloc(&f->dlogits, "dlogits"));
  assert_ok(px_tensor_alloc(&f->labels, "labels"));
  f->hl = malloc((size_t)(n * k) * 4);
  f->hlab = malloc((size_t)n * 4);
  px_test_fill_normal(&rng, f->hl, (size_t)(n * k));
  for (int64_t i = 0; i < n * k; i++) f->hl[i] *= scale;
  for (int64_t i = 0; i < n; i++) f->hlab[i] = (int32_t)(px_test_rng_u64(&rng) % (uint64_t)k);
  assert_ok(px_tensor_copy_from_host(&f->logits, f->hl, (size_t)(n * k) * 4));
  assert_ok(px_tensor_copy_from_host(&f->labels, f->hlab, (size_t)n * 4));
}

static void fixture_fini(ce_fixture_t *f) {
  px_tensor_release(&f->logits);
  px_tensor_release(&f->dlogits);
  px_tensor_release(&f->labels);
  free(f->hl);
  free(f->hlab);
  px_ops_destroy(f->ops);
}

static void loss_grad_and_accuracy_match_reference(void **state) {
  (void)state;
  ce_fixture_t f;
  fixture_init(&f, 128, 10, 3.0f, 800);
  float loss;
  int64_t correct;
  assert_ok(px_softmax_ce(f.ops, &f.dlogits, &loss, &correct, &f.logits, &f.labels));
  double rloss;
  int64_t rcorrect;
  float *rd = malloc((size_t)(f.n * f.k) * 4);
  px__ref_softmax_ce(rd, &rloss, &rcorrect, f.hl, f.hlab, f.n, f.k);
  assert_float_equal(loss, rloss, 1e-5 * fmax(1.0, rloss));
  assert_int_equal(correct, rcorrect);
  assert_true(correct > 0 && correct < f.n);
  assert_true(px_test_max_rel_err(f.dlogits.data, rd, (size_t)(f.n * f.k)) < 1e-6);
  /* each row of dlogits sums to zero */
  const float *d = f.dlogits.data;
  for (int64_t i = 0; i < f.n; i++) {
    double s = 0.0;
    for (int64_t j = 0; j < f.k; j++) s += d[i * f.k + j];
    assert_true(fabs(s) < 1e-7);
  }
  free(rd);
  fixture_fini(&f);
}

static void dlogits_match_finite_differences(void **state) {
  (void)state;
  ce_fixture_t f;
  fixture_init(&f, 6, 7, 1.0f, 801);
  float loss;
  assert_ok(px_softmax_ce(f.ops, &f.dlogits, &loss, NULL, &f.logits, &f.labels));
  const float *g = f.dlogits.data;
  const double eps = 1e-2;
  double worst = 0.0;
  for (int64_t i = 0; i < f.n * f.k; i++) {
    float keep = f.hl[i];
    double l[2];
    for (int s = 0; s < 2; s++) {
      f.hl[i] = (float)(keep + (s ? -eps : eps));
      assert_ok(px_tensor_copy_from_host(&f.logits, f.hl, (size_t)(f.n * f.k) * 4));
      float lv;
      assert_ok(px_softmax_ce(f.ops, NULL, &lv, NULL, &f.logits, &f.labels));
      l[s] = lv;
    }
    f.hl[i] = keep;
    double fd = (l[0] - l[1]) / (2 * eps);
    double e = fabs(fd - g[i]);
    if (e > worst) worst = e;
  }
  print_message("dlogits: finite-difference max absolute error %g\n", worst);
  assert_true(worst < 1e-4);
  fixture_fini(&f);
}

static void huge_logits_stay_finite(void **state) {
  (void)state;
  ce_fixture_t f;
  fixture_init(&f, 16, 10, 1e4f, 802);
  float loss;
  int64_t correct;
  assert_ok(px_softmax_ce(f.ops, &f.dlogits, &loss, &correct, &f.logits, &f.labels));
  assert_true(isfinite(loss));
  const float *d = f.dlogits.data;
  for (int64_t i = 0; i < f.n * f.k; i++) assert_true(isfinite(d[i]));
  double rloss;
  int64_t rc;
  px__ref_softmax_ce(NULL, &rloss, &rc, f.hl, f.hlab, f.n, f.k);
  assert_float_equal(loss, rloss, 1e-5 * rloss);
  fixture_fini(&f);
}

static void bad_labels_are_refused(void **state) {
  (void)state;
  ce_fixture_t f;
  fixture_init(&f, 4, 3, 1.0f, 803);
  f.hlab[2] = 3;
  assert_ok(px_tensor_copy_from_host(&f.labels, f.hlab, 16));
  float loss;
  assert_int_equal(px_softmax_ce(f.ops, &f.dlogits, &loss, NULL, &f.logits, &f.labels),
                   PX_ERR_INVALID);
  f.hlab[2] = -1;
  assert_ok(px_tensor_copy_from_host(&f.labels, f.hlab, 16));
  assert_int_equal(px_softmax_ce(f.ops, &f.dlogits, &loss, NULL, &f.logits, &f.labels),
                   PX_ERR_INVALID);
  /* labels of the wrong type */
  assert_int_equal(px_softmax_ce(f.ops, &f.dlogits, &loss, NULL, &f.logits, &f.logits),
                   PX_ERR_INVALID);
  fixture_fini(&f);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(loss_grad_and_accuracy_match_reference),
      cmocka_unit_test(dlogits_match_finite_differences),
      cmocka_unit_test(huge_logits_stay_finite),
      cmocka_unit_test(bad_labels_are_refused),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
