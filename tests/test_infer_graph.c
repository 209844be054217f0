/* Compact evaluation of imported graphs: the five nets
 * PyTorch exports (tests/onnx_import_nets.py: a VGG-style net with max and
 * average pooling, a MobileNetV2-style net with depthwise convolutions,
 * ReLU6 and a Concat head, a ResNet with squeeze-and-excitation, a
 * LeakyReLU stem and biased 1x1 convolutions on the pooled map) and the
 * activations net (Hardswish, SiLU, GELU, Tanh, Hardsigmoid) and
 * the arithmetic by constants (scalars) and batch norms of other epsilons
 * and momenta (bn_eps) and mobilenet_v3's two-Linear classifier (fc_chain), their
 * channels pruned as H-SADMM projects them (channel keep 0.5, the coupled
 * groups from the graph), compacted and run by the inference engine.
 *
 * f32: the engine's logits equal its own plain reference loops' and the
 * dense masked model's through the training engine within 1e-4 of the
 * largest logit (the bound test_onnx_import holds the training engine to
 * against PyTorch: both sides are f32, differing only in summation order
 * and the batch norm folded into the weights), on random inputs and on 500
 * Fashion-MNIST test images, and predict the same class for all of them but
 * at most 1. bf16 (where the CPU has AMX): unchecked bf16 logits within 5%
 * of the largest (an 8-bit mantissa rounds each of about ten layers' inputs
 * and weights by up to 2^-9), and the checked net (close calls rerun in
 * f32) disagrees with the dense model on at most 2 of the 550 images. The
 * calibration net (batch norms in training mode) moves the kept channels'
 * running statistics as a training-mode forward of the dense model does.
 *
 * End to end: H-SADMM on 2 nodes (forked ranks, UCX on loopback) trains the
 * imported MobileNet and SE-ResNet on a Fashion-MNIST subset, once with
 * eval_dense and once evaluating through the compact model: the same
 * training bit for bit, the compact model built (0 builds with eval_dense),
 * and test accuracies within 1 of 500 images (the 5 in 10,000,
 * rounded up). Skips without python3-torch or the data set. */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "comm_harness.h"
#include "export/compact_int.h"
#include "infer/infer_int.h"
#include "prunex/data.h"
#include "prunex/hsadmm.h"
#include "prunex/prune.h"
#include "prunex/strategy.h"
#include "px_check.h"
#include "px_test_util.h"

#define NTEST 500 /* Fashion-MNIST test images */
#define NRAND 50  /* random inputs */
#define B 50      /* the dense model's batch */
#define ITERATIONS 4

static char dir[256];
static int have_data;

/* Exports the nets (one Python start) and writes the data subset. */
static int setup(void **state) {
  (void)state;
  dir[0] = 0;
  if (!px_test_python_has("torch, onnx")) return 0;
  snprintf(dir, sizeof dir, "/tmp/px_infer_graph_XXXXXX");
  if (!mkdtemp(dir)) return -1;
  char cmd[1024];
  snprintf(cmd, sizeof cmd, "-c \"import sys; sys.path.insert(0, '%s/tests'); import onnx_import_nets as n\n"
              "for k in ('vgg', 'mobilenet', 'seresnet', 'acts', 'scalars', 'bn_eps',\n"
              "          'fc_chain', 'squeeze'):\n"
              "    n.export(n.build(k, 1, 10), '%s/' + k + '.onnx', 1, 32, 32)\" >/dev/null",
           PX_SOURCE_DIR, dir);
  if (px_test_py(cmd) != 0) return -1;
  have_data = px_test_write_fmnist_subset(dir, 1024, NTEST) == 1;
  return 0;
}

static int teardown(void **state) {
  (void)state;
  if (dir[0]) px_th_rmdir(dir);
  return 0;
}

static void onnx_path(const char *net, char *path, size_t len) {
  snprintf(path, len, "%s/%s.onnx", dir, net);
}

static px_model_t *import(px_ops_t *ops, const char *net, int batch) {
  char path[320];
  onnx_path(net, path, sizeof path);
  px_model_config_t cfg = {"", 1, 10, batch, 32, 32, NULL, 0, PX_PRECISION_FP32, path};
  px_model_t *m = NULL;
  if (px_model_create(ops, &cfg, &m) != PX_OK) fail_msg("import %s: %s", path, px_last_error());
  assert_int_equal(px_model_init_params(m, 1), PX_OK);
  return m;
}

/* H-SADMM's projection of m's parameters (channel keep 0.5, the coupled
 * groups and their followers from the graph). */
static void prune(px_model_t *m) {
  int np = px_model_num_params(m);
  px_hsadmm_param_t *hp = calloc((size_t)np, sizeof *hp);
  px_sparsity_param_t *sp = calloc((size_t)np, sizeof *sp);
  size_t *off = calloc((size_t)np, sizeof *off);
  px_strategy_hsadmm_params(m, NULL, 0, hp);
  float *base = px_model_flat_params(m)->data;
  for (int i = 0; i < np; i++) {
    off[i] = (size_t)((float *)px_model_param(m, i)->value->data - base);
    sp[i] = (px_sparsity_param_t){hp[i].prunable, hp[i].shape,
                                  hp[i].has_consumer ? hp[i].consumer : -1, hp[i].follower};
  }
  px_prune_keep_t keep = {1.0, 0.5, 1.0, 0, 0, 0};
  px_sparsity_t *set;
  assert_int_equal(px_sparsity_create(sp, NULL, np, &keep, &set), PX_OK);
  uint8_t *masks = calloc(px_sparsity_mask_bytes(set) + 1, 1);
  assert_int_equal(px_sparsity_project(set, base, off, masks), PX_OK);
  px_sparsity_destroy(set);
  free(masks);
  free(off);
  free(sp);
  free(hp);
}

/* NRAND random inputs, then the first NTEST test images as the training
 * loader feeds them (padded to 32 x 32, normalised): [NRAND + NTEST][1024]. */
static float *inputs(void) {
  float *x = malloc((size_t)(NRAND + NTEST) * 1024 * sizeof *x);
  px_test_rng_t r;
  px_test_rng_seed(&r, 5);
  px_test_fill_normal(&r, x, (size_t)NRAND * 1024);
  px_dataset_t *ds;
  assert_int_equal(px_dataset_load_fashion_mnist(dir, PX_SPLIT_TEST, &ds), PX_OK);
  const px_dataset_info_t *info = px_dataset_info(ds);
  assert_int_equal(info->height * info->width, 1024);
  uint32_t idx[NTEST];
  int32_t y[NTEST];
  for (int i = 0; i < NTEST; i++) idx[i] = (uint32_t)i;
  assert_int_equal(px_data_fill_batch(ds, idx, NTEST, NULL, info->mean, info->std, 0, 0,
                                      x + (size_t)NRAND * 1024, y),
                   PX_OK);
  px_dataset_destroy(ds);
  return x;
}

static int argmax10(const float *z) {
  int b = 0;
  for (int j = 1; j < 10; j++)
    if (z[j] > z[b]) b = j;
  return b;
}

/* Largest difference relative to b's largest magnitude, and the rows whose
 * predicted classes differ. */
static double rel_err(const float *a, const float *b, int n, int *flips) {
  double scale = 1e-3, d = 0;
  *flips = 0;
  for (size_t i = 0; i < (size_t)n * 10; i++) scale = fmax(scale, fabs((double)b[i]));
  for (size_t i = 0; i < (size_t)n * 10; i++) d = fmax(d, fabs((double)a[i] - (double)b[i]));
  for (int i = 0; i < n; i++) *flips += argmax10(a + i * 10) != argmax10(b + i * 10);
  return d / scale;
}

/* The dense model's logits of all inputs, B at a time. */
static void dense_logits(px_model_t *m, const float *x, int n, float *z) {
  for (int i = 0; i < n; i += B)
    assert_int_equal(px_model_logits(m, x + (size_t)i * 1024, n - i < B ? n - i : B, z + i * 10),
                     PX_OK);
}

/* The calibration net moves the compact model's running statistics as a
 * training-mode forward of the dense model moves the kept channels'. */
static void check_calibration(px_model_t *dense, px__compact_t *plan, const float *x) {
  px_model_t *cm;
  px__infer_t *cal;
  assert_int_equal(px__compact_build(plan, dense, px_model_ops(dense), 1, &cm), PX_OK);
  assert_int_equal(px__infer_create(cm, B, 1, PX__INFER_F32, &cal), PX_OK);
  assert_int_equal(px__infer_load(cal), PX_OK);
  assert_int_equal(px_model_forward_train(dense, x), PX_OK);
  assert_int_equal(px__infer_calibrate(cal, x), PX_OK);
  int32_t idx[256];
  double worst = 0;
  for (int k = 0; k < plan->nn; k++) {
    const px_model_node_t *bn = &plan->nodes[k];
    if (bn->kind != PX_NODE_BN) continue;
    int nk = px__compact_kept(plan, dense, bn->out, idx);
    const float *dv = px_model_buffer(dense, bn->rv)->value->data;
    for (int t = 0; t < 2; t++) {
      int b = t ? bn->rv : bn->rm;
      const float *c = px_model_buffer(cm, b)->value->data, *d = px_model_buffer(dense, b)->value->data;
      /* a mean against the channel's spread (means near 0 cancel), a variance against itself */
      for (int i = 0; i < nk; i++) {
        double s = t ? fabs((double)d[idx[i]]) : sqrt(fabs((double)dv[idx[i]]));
        worst = fmax(worst, fabs((double)c[i] - d[idx[i]]) / fmax(1e-2, s));
      }
    }
  }
  printf("  calibration: running statistics within %.2e of the training engine's (means "
         "against the spread, variances relative)\n", worst);
  assert_true(worst < 1e-4);
  px__infer_destroy(cal);
  px_model_destroy(cm);
}

static void check_net(const char *net) {
  if (!dir[0] || !have_data) skip();
  px_ops_t *ops;
  assert_int_equal(px_ops_create(px_device_cpu(), 1, &ops), PX_OK);
  px_model_t *dense = import(ops, net, B);
  prune(dense);
  const int n = NRAND + NTEST;
  float *x = inputs(), *z[5];
  for (int i = 0; i < 5; i++) z[i] = malloc((size_t)n * 10 * sizeof(float));
  dense_logits(dense, x, n, z[0]);
  px__compact_t *plan;
  px_model_t *cm;
  assert_int_equal(px__compact_plan(dense, 0, &plan), PX_OK);
  assert_int_equal(px__compact_build(plan, dense, ops, 1, &cm), PX_OK);
  assert_true(px__infer_takes(cm));
  px__infer_t *f32, *raw = NULL, *chk = NULL;
  assert_int_equal(px__infer_create(cm, px__infer_cache_batch(cm, B), 0, PX__INFER_F32, &f32),
                   PX_OK);
  assert_int_equal(px__infer_load(f32), PX_OK);
  assert_int_equal(px__infer_logits(f32, x, n, z[1]), PX_OK);
  assert_int_equal(px__infer_logits_ref(f32, x, NRAND, z[2]), PX_OK);
  int fr, fd, fd_rand;
  double e_ref = rel_err(z[1], z[2], NRAND, &fr), e_rand = rel_err(z[1], z[0], NRAND, &fd_rand);
  double e_dense = rel_err(z[1], z[0], n, &fd);
  printf("%s: %zu -> %zu parameters; f32 engine vs reference %.2e, vs dense %.2e (random) "
         "%.2e (all), predictions differ on %d of %d\n",
         net, px_model_numel(dense), px_model_numel(cm), e_ref, e_rand, e_dense, fd, n);
  assert_true(px_model_numel(cm) < px_model_numel(dense));
  assert_true(e_ref < 1e-4 && fr == 0);
  assert_true(e_dense < 1e-4 && fd <= 1);
  /* refills and runs allocate nothing */
  px_mem_stats_t m0, m1;
  px_mem_stats(&m0);
  assert_int_equal(px__compact_update(plan, dense), PX_OK);
  assert_int_equal(px__compact_fill(plan, dense, cm), PX_OK);
  assert_int_equal(px__infer_load(f32), PX_OK);
  assert_int_equal(px__infer_logits(f32, x, B, z[2]), PX_OK);
  px_mem_stats(&m1);
  assert_true(m1.allocs == m0.allocs);
  if (px__infer_create(cm, B, 0, PX__INFER_BF16_RAW, &raw) != PX_OK) {
    printf("  no bf16 convolution here (%s)\n", px_last_error());
  } else {
    assert_int_equal(px__infer_create(cm, B, 0, PX__INFER_BF16, &chk), PX_OK);
    assert_int_equal(px__infer_load(raw), PX_OK);
    assert_int_equal(px__infer_load(chk), PX_OK);
    assert_int_equal(px__infer_logits(raw, x, n, z[3]), PX_OK);
    assert_int_equal(px__infer_logits(chk, x, n, z[4]), PX_OK);
    int fraw, fchk;
    double e_raw = rel_err(z[3], z[0], n, &fraw), e_chk = rel_err(z[4], z[0], n, &fchk);
    printf("  bf16: unchecked vs dense %.2e (%d predictions differ), checked %.2e (%d differ, "
           "%lld rerun in f32)\n",
           e_raw, fraw, e_chk, fchk, (long long)px__infer_rechecked(chk));
    assert_true(e_raw > 1e-6 && e_raw < 0.05);
    assert_true(fchk <= 2);
  }
  check_calibration(dense, plan, x + (size_t)NRAND * 1024);
  px__infer_destroy(raw);
  px__infer_destroy(chk);
  px__infer_destroy(f32);
  px_model_destroy(cm);
  px__compact_destroy(plan);
  for (int i = 0; i < 5; i++) free(z[i]);
  free(x);
  px_model_destroy(dense);
  px_ops_destroy(ops);
}

/* state: the net's name (cmocka's prestate) */
static void compact_engine_matches_dense(void **state) { check_net(*state); }

/* ---- end to end --------------------------------------------------------------------- */

typedef struct {
  const char *net;
  int eval_dense;
} job_t;

static px_status_t control(void *ctx, const px_iteration_t *it, px_hsadmm_decision_t *d) {
  (void)ctx;
  d->freeze = it->iteration >= 2;
  return PX_OK;
}

/* The final model's predictions image by image: the compact form (the
 * precision the evaluation picks) against the dense training engine. */
typedef struct {
  px__infer_t *net;
  px_model_t *dense;
  float z[2][16 * 10];
  int64_t differ, seen, classes[10];
} compare_t;

static px_status_t compare_batch(void *ctx, const float *x, const int32_t *y, int32_t n,
                                 double *loss_sum, int64_t *correct) {
  (void)y;
  (void)loss_sum;
  (void)correct;
  compare_t *c = ctx;
  if (!n) return PX_OK; /* the end of the test set */
  PX_REQUIRE(n <= 16, "compare_batch: %d images, room for 16", (int)n);
  PX_CHECK(px__infer_logits(c->net, x, n, c->z[0]));
  PX_CHECK(px_model_logits(c->dense, x, n, c->z[1]));
  for (int i = 0; i < n; i++) {
    int a = argmax10(c->z[0] + i * 10);
    c->differ += a != argmax10(c->z[1] + i * 10);
    c->classes[a]++;
  }
  c->seen += n;
  return PX_OK;
}

/* Rank 0's final model on the whole test set (a world of 1): the images
 * whose predictions differ and the classes predicted, into px_th_shared. */
static int compare_final(const px_train_config_t *tc, px_model_t *m) {
  px_train_config_t one = *tc;
  one.rank = 0;
  one.world_size = 1;
  px_trainer_t *t1;
  PX_TH_OK(px_trainer_create(&one, &t1));
  px_model_t *d1 = px_trainer_model(t1);
  memcpy(px_model_flat_params(d1)->data, px_model_flat_params(m)->data,
         px_model_numel(m) * sizeof(float));
  memcpy(px_model_flat_buffers(d1)->data, px_model_flat_buffers(m)->data,
         px_tensor_numel(px_model_flat_buffers(m)) * sizeof(float));
  px__compact_t *plan;
  px_model_t *cm;
  compare_t *c = calloc(1, sizeof *c);
  c->dense = d1;
  PX_TH_OK(px__compact_plan(d1, 0, &plan));
  PX_TH_OK(px__compact_build(plan, d1, px_model_ops(d1), 1, &cm));
  PX_TH_OK(px__infer_create(cm, one.batch, 0, PX__INFER_AUTO, &c->net));
  PX_TH_OK(px__infer_load(c->net));
  px_eval_stats_t es;
  PX_TH_OK(px_trainer_evaluate_with(t1, compare_batch, c, &es));
  px_th_shared[7] = (double)c->differ;
  px_th_shared[8] = (double)c->seen;
  for (int k = 0; k < 10; k++) px_th_shared[9] += c->classes[k] > 0;
  px_th_shared[10] = px__infer_is_bf16(c->net);
  px__infer_destroy(c->net);
  free(c);
  px_model_destroy(cm);
  px__compact_destroy(plan);
  px_trainer_destroy(t1);
  return 0;
}

static int rank_main(px_th_ctx_t *ctx) {
  const job_t *job = ctx->arg;
  char path[320];
  onnx_path(job->net, path, sizeof path);
  px_train_config_t tc;
  px_test_rank_train_config(&tc, dir, ctx->rank, ctx->size);
  tc.onnx = path;
  tc.lr = 0.1;
  px_trainer_t *t;
  PX_TH_OK(px_trainer_create(&tc, &t));
  px_comm_t *comm;
  PX_TH_OK(px_th_comm(ctx, NULL, &comm));
  px_strategy_config_t cfg = {0};
  cfg.kind = PX_STRATEGY_HSADMM;
  cfg.iterations = ITERATIONS;
  cfg.local_steps = 8;
  cfg.rho1 = cfg.rho2 = 1e-2;
  cfg.keep = (px_prune_keep_t){1.0, 0.5, 1.0, 0, 0, 0};
  cfg.eval_every = ITERATIONS;
  cfg.calibrate_batches = 4;
  cfg.eval_dense = job->eval_dense;
  px_strategy_result_t res;
  PX_TH_OK(px_strategy_run(t, comm, &cfg, control, NULL, &res));
  if (ctx->rank == 0) {
    px_model_t *m = px_trainer_model(t);
    uint64_t h = px_test_fnv64(px_model_flat_params(m)->data, px_model_numel(m) * 4);
    px_th_shared[0] = res.density;
    px_th_shared[1] = (double)res.bytes_inter;
    px_th_shared[2] = res.test_accuracy;
    px_th_shared[3] = (double)(h >> 32);
    px_th_shared[4] = (double)(h & 0xffffffffu);
    px_th_shared[5] = res.compact_builds;
    px_th_shared[6] = res.iterations;
    if (!job->eval_dense && compare_final(&tc, m) != 0) return 1;
  }
  px_comm_destroy(comm);
  px_trainer_destroy(t);
  return 0;
}

static int nodes[2] = {0, 1};

static void check_job(const char *net) {
  if (!dir[0] || !have_data) skip();
  double r[2][11];
  for (int k = 0; k < 2; k++) {
    job_t job = {net, k == 0};
    assert_int_equal(px_th_run(2, nodes, rank_main, &job, 240), 0);
    for (int i = 0; i < 11; i++) r[k][i] = px_th_shared[i];
    printf("%s, %s evaluation: density %.4f, inter-node %.0f bytes, accuracy %.4f on %d test "
           "images, %g compact builds\n",
           net, k == 0 ? "dense" : "compact", r[k][0], r[k][1], r[k][2], NTEST, r[k][5]);
  }
  for (int i = 0; i < 2; i++) assert_true(r[i][6] == ITERATIONS);
  /* the training path is untouched */
  assert_true(r[0][0] == r[1][0] && r[0][1] == r[1][1]);
  assert_true(r[0][3] == r[1][3] && r[0][4] == r[1][4]);
  assert_true(r[0][5] == 0 && r[1][5] >= 1);
  assert_true(fabs(r[0][2] - r[1][2]) <= 1.0 / NTEST + 1e-9);
  printf("%s, final model: compact (%s) and dense predictions differ on %.0f of %.0f test images "
         "(%.0f classes predicted)\n",
         net, r[1][10] ? "bf16, close calls in f32" : "f32", r[1][7], r[1][8], r[1][9]);
  assert_true(r[1][8] == NTEST && r[1][7] <= 1);
  assert_true(r[1][9] >= 3); /* not a constant prediction: the comparison means something */
}

static void job_evaluates_compact_as_dense(void **state) { check_job(*state); }

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test_prestate(compact_engine_matches_dense, (void *)"vgg"),
      cmocka_unit_test_prestate(compact_engine_matches_dense, (void *)"mobilenet"),
      cmocka_unit_test_prestate(compact_engine_matches_dense, (void *)"seresnet"),
      cmocka_unit_test_prestate(compact_engine_matches_dense, (void *)"acts"),
      cmocka_unit_test_prestate(compact_engine_matches_dense, (void *)"scalars"),
      cmocka_unit_test_prestate(compact_engine_matches_dense, (void *)"bn_eps"),
      cmocka_unit_test_prestate(compact_engine_matches_dense, (void *)"fc_chain"),
      cmocka_unit_test_prestate(compact_engine_matches_dense, (void *)"squeeze"),
      cmocka_unit_test_prestate(job_evaluates_compact_as_dense, (void *)"mobilenet"),
      cmocka_unit_test_prestate(job_evaluates_compact_as_dense, (void *)"seresnet"),
  };
  if (getenv("PX_TEST_FILTER")) cmocka_set_test_filter(getenv("PX_TEST_FILTER"));
  return cmocka_run_group_tests(tests, setup, teardown);
}
