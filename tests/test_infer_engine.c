/* The inference engine (libpxcore/infer/infer_int.h) on compact models of
 * resnet20, resnet18 and resnet50 (bottleneck), their coupled channels
 * projected at keep 0.5 as H-SADMM does, with random BN parameters and
 * statistics: the oneDNN path (BN folded, ReLU and residual adds fused,
 * NHWC, chunks smaller than the input) gives the plain reference loops'
 * logits, and both give the dense masked model's logits through the
 * training engine; a compact plan that keeps constant channels (the
 * strategies' evaluation) and one that folds them (export) agree. Repeated
 * runs and reloads allocate nothing. The calibration net (BN in training
 * mode) moves the running statistics as the training engine does. bf16
 * nets (unchecked and checked) against f32 and the reference. */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "export/compact_int.h"
#include "infer/infer_int.h"
#include "infer/p2conv.h"
#include "prunex/export.h"
#include "prunex/prune.h"
#include "px_test_util.h"

static uint64_t rng = 12345;

static double unif(void) {
  rng = rng * 6364136223846793005ull + 1442695040888963407ull;
  return (double)(rng >> 11) * 0x1.0p-53;
}

/* A dense model with random BN values and coupled channels projected. */
static px_model_t *pruned_model(px_ops_t *ops, const char *arch, int in_c, int hw, int batch) {
  px_model_config_t c = {arch, in_c, 10, batch, hw, hw, NULL, 0, PX_PRECISION_FP32, NULL};
  px_model_t *m;
  assert_int_equal(px_model_create(ops, &c, &m), PX_OK);
  assert_int_equal(px_model_init_params(m, 7), PX_OK);
  for (int i = 0; i < px_model_num_buffers(m); i++) {
    const px_model_buffer_t *b = px_model_buffer(m, i);
    float *v = b->value->data;
    for (size_t j = 0; j < px_tensor_numel(b->value); j++)
      v[j] = strstr(b->name, "running_var") ? (float)(0.5 + unif()) : (float)(0.2 * (unif() - 0.5));
  }
  for (int i = 0; i < px_model_num_params(m); i++) {
    const px_model_param_t *p = px_model_param(m, i);
    if (p->kind == PX_WEIGHT_BN_SCALE || p->kind == PX_WEIGHT_BN_SHIFT) {
      float *v = p->value->data;
      for (size_t j = 0; j < px_tensor_numel(p->value); j++)
        v[j] = p->kind == PX_WEIGHT_BN_SCALE ? (float)(0.5 + unif()) : (float)(0.4 * (unif() - 0.5));
    }
    int j = px_model_channel_consumer(m, i);
    if (j < 0) continue;
    px_tensor_t *tp = p->value, *tc = px_model_param(m, j)->value;
    px_conv_shape_t sp = {(int32_t)tp->dims[0], (int32_t)tp->dims[1], (int32_t)tp->dims[2],
                          (int32_t)tp->dims[3]};
    px_conv_shape_t sc = {(int32_t)tc->dims[0], (int32_t)tc->dims[1], (int32_t)tc->dims[2],
                          (int32_t)tc->dims[3]};
    uint8_t fm[2048], cm[2048];
    memset(fm, 1, sizeof fm);
    assert_int_equal(px_prune_project_coupled(tp->data, sp, tc->data, sc, 0.5, fm, cm, NULL, 0),
                     PX_OK);
  }
  return m;
}

static double max_rel_diff(const float *a, const float *b, size_t n) {
  double scale = 1e-3, d = 0;
  for (size_t i = 0; i < n; i++) scale = fmax(scale, fabs((double)b[i]));
  for (size_t i = 0; i < n; i++) d = fmax(d, fabs((double)a[i] - (double)b[i]));
  return d / scale;
}

static void check_arch(const char *arch, int in_c, int hw, int n) {
  px_ops_t *ops;
  assert_int_equal(px_ops_create(px_device_cpu(), 2, &ops), PX_OK);
  px_model_t *dense = pruned_model(ops, arch, in_c, hw, n);
  size_t per = (size_t)in_c * hw * hw;
  float *x = malloc((size_t)n * per * sizeof *x);
  float *want = malloc((size_t)n * 10 * sizeof *want), *got = malloc((size_t)n * 10 * sizeof *got),
        *ref = malloc((size_t)n * 10 * sizeof *ref);
  for (size_t i = 0; i < (size_t)n * per; i++) x[i] = (float)(2 * unif() - 1);
  assert_int_equal(px_model_logits(dense, x, n, want), PX_OK);
  for (int fold = 0; fold < 2; fold++) {
    px__compact_t *plan;
    px_model_t *cm;
    px__infer_t *net;
    assert_int_equal(px__compact_plan(dense, fold, &plan), PX_OK);
    assert_int_equal(px__compact_build(plan, dense, ops, n, &cm), PX_OK);
    /* chunks of 3: the last one short */
    assert_int_equal(px__infer_create(cm, 3, 0, PX__INFER_F32, &net), PX_OK);
    assert_int_equal(px__infer_load(net), PX_OK);
    assert_int_equal(px__infer_logits(net, x, n, got), PX_OK);
    assert_int_equal(px__infer_logits_ref(net, x, n, ref), PX_OK);
    double e_ref = max_rel_diff(got, ref, (size_t)n * 10);
    double e_dense = max_rel_diff(got, want, (size_t)n * 10);
    printf("%s fold %d: %zu -> %zu parameters, engine vs reference %.2e, vs dense %.2e\n", arch,
           fold, px_model_numel(dense), px_model_numel(cm), e_ref, e_dense);
    assert_true(px_model_numel(cm) < px_model_numel(dense));
    assert_true(e_ref < 1e-4);
    assert_true(e_dense < 1e-4);
    int64_t differ = 0;
    assert_int_equal(px__infer_compare(net, dense, x, n, &differ), PX_OK);
    assert_int_equal(differ, 0);
    /* refills and runs allocate nothing */
    px_mem_stats_t m0, m1;
    px_mem_stats(&m0);
    assert_int_equal(px__compact_update(plan, dense), PX_OK);
    assert_int_equal(px__compact_fill(plan, dense, cm), PX_OK);
    assert_int_equal(px__infer_load(net), PX_OK);
    assert_int_equal(px__infer_logits(net, x, n, got), PX_OK);
    px_mem_stats(&m1);
    assert_true(m1.allocs == m0.allocs);
    assert_true(max_rel_diff(got, ref, (size_t)n * 10) < 1e-4);
    px__infer_destroy(net);
    px_model_destroy(cm);
    px__compact_destroy(plan);
  }
  free(x);
  free(want);
  free(got);
  free(ref);
  px_model_destroy(dense);
  px_ops_destroy(ops);
}

static void resnet20_engine_matches_reference_and_dense(void **state) {
  (void)state;
  check_arch("resnet20", 1, 28, 8);
}

static void resnet18_engine_matches_reference_and_dense(void **state) {
  (void)state;
  check_arch("resnet18", 3, 16, 4);
}

static void resnet50_engine_matches_reference_and_dense(void **state) {
  (void)state;
  check_arch("resnet50", 3, 16, 4);
}

/* A labelled batch: loss and accuracy as px_model_eval_batch counts them. */
static void eval_matches_model_eval(void **state) {
  (void)state;
  px_ops_t *ops;
  assert_int_equal(px_ops_create(px_device_cpu(), 2, &ops), PX_OK);
  const int n = 8;
  px_model_t *dense = pruned_model(ops, "resnet20", 1, 28, n);
  float *x = malloc((size_t)n * 784 * sizeof *x);
  int32_t y[8];
  for (size_t i = 0; i < (size_t)n * 784; i++) x[i] = (float)(2 * unif() - 1);
  for (int i = 0; i < n; i++) y[i] = i % 10;
  double l0 = 0, l1 = 0;
  int64_t c0 = 0, c1 = 0;
  assert_int_equal(px_model_eval_batch(dense, x, y, n, &l0, &c0), PX_OK);
  px_model_t *cm;
  assert_int_equal(px_model_compact(dense, ops, n, &cm), PX_OK);
  px__infer_t *net;
  assert_int_equal(px__infer_create(cm, px__infer_cache_batch(cm, n), 0, PX__INFER_F32, &net), PX_OK);
  assert_int_equal(px__infer_load(net), PX_OK);
  assert_int_equal(px__infer_eval(net, x, y, n, &l1, &c1), PX_OK);
  printf("loss %.6f vs %.6f, correct %lld vs %lld\n", l0, l1, (long long)c0, (long long)c1);
  assert_true(fabs(l0 - l1) < 1e-4 * fmax(1, fabs(l0)));
  assert_int_equal(c0, c1);
  y[3] = 10;
  assert_int_equal(px__infer_eval(net, x, y, n, &l1, &c1), PX_ERR_INVALID);
  assert_non_null(strstr(px_last_error(), "label 10 of sample 3"));
  px__infer_destroy(net);
  px_model_destroy(cm);
  px_model_destroy(dense);
  px_ops_destroy(ops);
  free(x);
}

/* The calibration net (BN in training mode) moves the compact model's
 * running statistics as a training-mode forward of the dense model moves
 * the kept channels' ones. */
static void calibration_matches_training_forward(void **state) {
  (void)state;
  px_ops_t *ops;
  assert_int_equal(px_ops_create(px_device_cpu(), 2, &ops), PX_OK);
  const int n = 6;
  px_model_t *dense = pruned_model(ops, "resnet20", 1, 28, n);
  float *x = malloc((size_t)n * 784 * sizeof *x);
  for (size_t i = 0; i < (size_t)n * 784; i++) x[i] = (float)(2 * unif() - 1);
  px__compact_t *plan;
  px_model_t *cm, *cm2;
  px__infer_t *cal, *net, *cal2;
  assert_int_equal(px__compact_plan(dense, 0, &plan), PX_OK);
  assert_int_equal(px__compact_build(plan, dense, ops, 1, &cm), PX_OK);
  assert_int_equal(px__compact_build(plan, dense, ops, 1, &cm2), PX_OK);
  assert_int_equal(px__infer_create(cm, n, 1, PX__INFER_F32, &cal), PX_OK);
  /* the plain loops oneDNN's slow shapes (odd channel counts) run on */
  assert_int_equal(px__infer_create(cm2, n, 2, PX__INFER_F32, &cal2), PX_OK);
  assert_int_equal(px__infer_create(cm, 4, 0, PX__INFER_F32, &net), PX_OK);
  assert_int_equal(px__infer_calibrate(net, x), PX_ERR_INVALID);
  assert_int_equal(px__infer_load(cal), PX_OK);
  assert_int_equal(px__infer_load(cal2), PX_OK);
  for (int r = 0; r < 2; r++) {
    assert_int_equal(px_model_forward_train(dense, x), PX_OK);
    assert_int_equal(px__infer_calibrate(cal, x), PX_OK);
    assert_int_equal(px__infer_calibrate(cal2, x), PX_OK);
  }
  int32_t idx[64];
  double worst = 0;
  int nbn = 0;
  for (int k = 0; k < plan->nn; k++) {
    const px_model_node_t *bn = &plan->nodes[k];
    if (bn->kind != PX_NODE_BN) continue;
    nbn++;
    int nk = px__compact_kept(plan, dense, bn->out, idx);
    for (int t = 0; t < 2; t++) {
      int b = t ? bn->rv : bn->rm;
      const float *c = px_model_buffer(cm, b)->value->data, *d = px_model_buffer(dense, b)->value->data;
      const float *c2 = px_model_buffer(cm2, b)->value->data;
      for (int i = 0; i < nk; i++) {
        double s = fmax(1e-2, fabs((double)d[idx[i]]));
        worst = fmax(worst, fabs((double)c[i] - d[idx[i]]) / s);
        worst = fmax(worst, fabs((double)c2[i] - d[idx[i]]) / s);
      }
    }
  }
  printf("%d batch norms: running statistics within %.2e (relative)\n", nbn, worst);
  assert_true(nbn == 21 && worst < 1e-4);
  /* the inference net then reads the calibrated statistics */
  float *a = malloc((size_t)n * 10 * sizeof *a), *b = malloc((size_t)n * 10 * sizeof *b);
  assert_int_equal(px_model_logits(dense, x, n, a), PX_OK);
  assert_int_equal(px__infer_load(net), PX_OK);
  assert_int_equal(px__infer_logits(net, x, n, b), PX_OK);
  assert_true(max_rel_diff(b, a, (size_t)n * 10) < 1e-4);
  free(a);
  free(b);
  free(x);
  px__infer_destroy(cal);
  px__infer_destroy(cal2);
  px__infer_destroy(net);
  px_model_destroy(cm);
  px_model_destroy(cm2);
  px__compact_destroy(plan);
  px_model_destroy(dense);
  px_ops_destroy(ops);
}

static int argmax10(const float *z) {
  int b = 0;
  for (int j = 1; j < 10; j++)
    if (z[j] > z[b]) b = j;
  return b;
}

/* bf16 convolutions on random images of a random resnet20 and
 * resnet18: unchecked bf16 logits within a few per cent of the plain
 * reference's and of f32's; the checked net (close calls rerun in f32)
 * predicts every sample as f32 and the reference do, keeps bf16's logits
 * where the margin is clear and f32's where it is not, and allocates
 * nothing per run. Where this oneDNN has no bf16 convolution the test says
 * so and checks that AUTO then picks f32. */
static void check_bf16(const char *arch, int in_c, int hw, int n) {
  px_ops_t *ops;
  assert_int_equal(px_ops_create(px_device_cpu(), 1, &ops), PX_OK);
  px_model_t *dense = pruned_model(ops, arch, in_c, hw, n);
  px_model_t *cm;
  assert_int_equal(px_model_compact(dense, ops, n, &cm), PX_OK);
  size_t per = (size_t)in_c * hw * hw, nz = (size_t)n * 10;
  float *x = malloc((size_t)n * per * sizeof *x), *z[4];
  for (int i = 0; i < 4; i++) z[i] = malloc(nz * sizeof(float));
  for (size_t i = 0; i < (size_t)n * per; i++) x[i] = (float)(2 * unif() - 1);
  px__infer_t *f32, *raw, *chk, *aut;
  assert_int_equal(px__infer_create(cm, 8, 0, PX__INFER_AUTO, &aut), PX_OK);
  if (px__infer_create(cm, 8, 0, PX__INFER_BF16_RAW, &raw) != PX_OK) {
    printf("%s: no bf16 convolution here (%s); AUTO gives %s\n", arch, px_last_error(),
           px__infer_is_bf16(aut) ? "bf16" : "f32");
    assert_false(px__infer_is_bf16(aut));
    goto out;
  }
  assert_int_equal(px__infer_is_bf16(aut), px__infer_bf16_fast());
  assert_int_equal(px__infer_create(cm, 8, 0, PX__INFER_F32, &f32), PX_OK);
  assert_int_equal(px__infer_create(cm, 8, 0, PX__INFER_BF16, &chk), PX_OK);
  assert_true(px__infer_is_bf16(raw) && px__infer_is_bf16(chk) && !px__infer_is_bf16(f32));
  px__infer_t *nets[3] = {f32, raw, chk};
  for (int i = 0; i < 3; i++) {
    assert_int_equal(px__infer_load(nets[i]), PX_OK);
    assert_int_equal(px__infer_logits(nets[i], x, n, z[i]), PX_OK);
  }
  assert_int_equal(px__infer_logits_ref(raw, x, n, z[3]), PX_OK);
  double e_raw = max_rel_diff(z[1], z[3], nz), e_f32 = max_rel_diff(z[0], z[3], nz);
  int flips = 0, wrong = 0, kept = 0;
  for (int i = 0; i < n; i++) {
    int want = argmax10(z[3] + i * 10);
    flips += argmax10(z[1] + i * 10) != want;
    wrong += argmax10(z[2] + i * 10) != want || argmax10(z[0] + i * 10) != want;
    /* a checked row is bf16's (clear margin) or f32's (rerun) */
    int as_raw = !memcmp(z[2] + i * 10, z[1] + i * 10, 10 * sizeof(float));
    kept += as_raw;
    assert_true(as_raw || max_rel_diff(z[2] + i * 10, z[0] + i * 10, 10) < 1e-5);
  }
  int64_t rerun = px__infer_rechecked(chk);
  int np2, nconv = px__infer_convs(raw, &np2);
  printf("%s: bf16 vs reference %.2e, f32 vs reference %.2e; unchecked bf16 flips %d of %d "
         "predictions, checked %d (%lld rerun in f32, %d kept bf16); %d of %d convolutions on "
         "the planar kernel\n",
         arch, e_raw, e_f32, flips, n, wrong, (long long)rerun, kept, np2, nconv);
  /* resnet20's 28 x 28 stage: its narrow 3 x 3 convolutions take the kernel where it runs */
  int np1;
  px__infer_convs(f32, &np1);
  if (!strcmp(arch, "resnet20")) { /* stage 1 (7); at 32 x 32 stage 2's 16-wide maps too (5,
                                        through PLIN steps) */
    const int want = hw >= 32 ? 12 : 7;
    assert_true(px__p2_available() ? np2 >= want : np2 == 0);
    assert_true(px__p1_available() ? np1 >= want : np1 == 0);
  }
  /* px__infer_eval scores the clear calls at once and the close ones when a
   * batch of them is gathered or at the end (n = 0): the same sums as the
   * checked logits give; nothing else runs on the net while some wait */
  int32_t *y = malloc((size_t)n * sizeof *y);
  double l_want = 0, l_got = 0;
  int64_t c_want = 0, c_got = 0;
  for (int i = 0; i < n; i++) {
    const float *zi = z[2] + i * 10;
    y[i] = i % 10;
    double mx = zi[argmax10(zi)], se = 0;
    for (int k = 0; k < 10; k++) se += exp((double)zi[k] - mx);
    l_want += mx + log(se) - zi[y[i]];
    c_want += argmax10(zi) == y[i];
  }
  int64_t before = px__infer_rechecked(chk);
  for (int done = 0; done < n; done += 5)
    assert_int_equal(px__infer_eval(chk, x + (size_t)done * per, y + done, n - done < 5 ? n - done : 5,
                                    &l_got, &c_got), PX_OK);
  int64_t waiting = rerun - (px__infer_rechecked(chk) - before);
  if (waiting > 0) assert_int_equal(px__infer_logits(chk, x, 1, z[2]), PX_ERR_INVALID);
  assert_int_equal(px__infer_eval(chk, NULL, NULL, 0, &l_got, &c_got), PX_OK);
  assert_int_equal(px__infer_rechecked(chk) - before, rerun);
  assert_int_equal(c_got, c_want);
  assert_true(fabs(l_got - l_want) < 1e-9 * n + 1e-6 * fabs(l_want));
  free(y);
  assert_true(e_f32 < 1e-4);
  assert_true(e_raw > 1e-6 && e_raw < 0.05); /* bf16 really ran, within its precision */
  assert_int_equal(wrong, 0);
  assert_int_equal(rerun + kept, n);
  px_mem_stats_t m0, m1;
  px_mem_stats(&m0);
  assert_int_equal(px__infer_load(chk), PX_OK);
  assert_int_equal(px__infer_logits(chk, x, n, z[2]), PX_OK);
  px_mem_stats(&m1);
  assert_true(m1.allocs == m0.allocs);
  for (int i = 0; i < 3; i++) px__infer_destroy(nets[i]);
out:
  px__infer_destroy(aut);
  for (int i = 0; i < 4; i++) free(z[i]);
  free(x);
  px_model_destroy(cm);
  px_model_destroy(dense);
  px_ops_destroy(ops);
}

static void bf16_matches_f32_and_reference(void **state) {
  (void)state;
  check_bf16("resnet20", 1, 28, 96);
  check_bf16("resnet20", 1, 32, 48);
  check_bf16("resnet18", 3, 16, 24);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(resnet20_engine_matches_reference_and_dense),
      cmocka_unit_test(resnet18_engine_matches_reference_and_dense),
      cmocka_unit_test(resnet50_engine_matches_reference_and_dense),
      cmocka_unit_test(eval_matches_model_eval),
      cmocka_unit_test(calibration_matches_training_forward),
      cmocka_unit_test(bf16_matches_f32_and_reference),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
