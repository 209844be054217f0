/* The model's memory plan (nn/mem_plan.c, nn/model.c):
 * activations, their gradients and the scratch buffers share one arena by
 * their lifetimes in a training step. The placement never gives two blocks
 * alive at one step a common byte (random blocks, checked pair by pair),
 * and training does not change at all: ResNet-20, a compact ResNet-20 (its
 * first stage 8 wide, read through plain-layout copies) and imported ONNX
 * networks with fan-out (squeeze-and-excitation's Mul, MobileNet's residual
 * adds and Concat) train a few steps on Fashion-MNIST under the shared plan,
 * under PX_MEM_PLAN=recompute (the BN outputs made again in the backward)
 * and under PX_MEM_PLAN=separate (the earlier plan) to the same weights,
 * BN statistics and gradients, byte for byte; recomputation takes less
 * memory than the shared plan where the net has a BN output that a
 * backward reads; with bf16 convolutions on the CPU (skipped without
 * AVX512-BF16 or AMX) the two plans give the same bytes too, and bf16 on
 * the CPU keeps the shared plan by default. Prints the plans' bytes. The
 * batch norm's recomputation itself is checked against its training
 * forward, bit for bit, on every layout the CPU engine gives it
 * (test_ops_batchnorm). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "comm_harness.h"
#include "nn/px_mem_plan.h"
#include "prunex/data.h"
#include "prunex/nn.h"
#include "px_test_util.h"

#define NETS PX_SOURCE_DIR "/tests/onnx_import_nets.py"
#define STEPS 3 /* one for the compact model: its plain-layout convs are slow */

static char dir[256]; /* the Fashion-MNIST fixture; empty: not installed */

/* ---- the placement ---- */

static void check_disjoint(const px__mem_block_t *b, int n, size_t total) {
  for (int i = 0; i < n; i++) {
    assert_int_equal(b[i].offset % 64, 0);
    assert_true(b[i].offset + b[i].bytes <= total);
    for (int j = i + 1; j < n; j++) {
      if (!b[i].bytes || !b[j].bytes || b[i].hi < b[j].lo || b[j].hi < b[i].lo) continue;
      int apart = b[i].offset + b[i].bytes <= b[j].offset || b[j].offset + b[j].bytes <= b[i].offset;
      if (!apart) fail_msg("blocks %d and %d are alive together and overlap", i, j);
    }
  }
}

/* A chain of equal blocks, each alive with its neighbours only: the
 * first and the third share bytes, the second lies beside them. */
static void test_plan_chain_shares_bytes(void **state) {
  (void)state;
  px__mem_block_t b[4] = {{1000, 0, 1, 0}, {1000, 1, 2, 0}, {1000, 2, 3, 0}, {1000, 3, 4, 0}};
  size_t total;
  assert_int_equal(px__mem_plan(b, 4, 64, &total), PX_OK);
  check_disjoint(b, 4, total);
  assert_int_equal(total, 1024 + 1000);
  assert_int_equal(b[0].offset, b[2].offset);
  assert_int_equal(b[1].offset, b[3].offset);
}

/* Random lifetimes and sizes: never an overlap, and the arena at least the
 * largest sum alive at one step (the bound no placement beats). */
static void test_plan_random_blocks_disjoint(void **state) {
  (void)state;
  enum { N = 300, T = 120 };
  px__mem_block_t b[N];
  px_test_rng_t r;
  px_test_rng_seed(&r, 27);
  for (int round = 0; round < 5; round++) {
    for (int i = 0; i < N; i++) {
      int lo = (int)(px_test_rng_u64(&r) % T), len = (int)(px_test_rng_u64(&r) % 20);
      b[i] = (px__mem_block_t){(size_t)(px_test_rng_u64(&r) % 5000) * (i % 7 ? 64 : 1), lo,
                               lo + len, 0};
    }
    size_t total, live_max = 0;
    assert_int_equal(px__mem_plan(b, N, 64, &total), PX_OK);
    check_disjoint(b, N, total);
    for (int t = 0; t < T + 20; t++) {
      size_t live = 0;
      for (int i = 0; i < N; i++) live += b[i].lo <= t && t <= b[i].hi ? b[i].bytes : 0;
      if (live > live_max) live_max = live;
    }
    assert_int_equal(px__mem_plan_bound(b, N), live_max); /* step by step, as the plan logs it */
    print_message("round %d: arena %zu bytes, most alive at one step %zu (%.2fx)\n", round, total,
                  live_max, (double)total / (double)live_max);
    assert_true(total >= live_max);
  }
}

/* A ResNet-20 for 4 images of 1x32x32 built with PX_MEM_PLAN=plan. */
static px_status_t small_resnet20(const char *plan, px_ops_t *ops, px_model_t **m) {
  setenv("PX_MEM_PLAN", plan, 1);
  px_model_config_t mc = {"resnet20", 1, 10, 4, 32, 32, NULL, 0, PX_PRECISION_FP32, NULL};
  *m = NULL;
  px_status_t st = px_model_create(ops, &mc, m);
  unsetenv("PX_MEM_PLAN");
  return st;
}

static void test_plan_env_refused(void **state) {
  (void)state;
  px_ops_t *ops;
  px_model_t *m;
  assert_int_equal(px_ops_create(px_device_cpu(), 1, &ops), PX_OK);
  assert_int_equal(small_resnet20("lifo", ops, &m), PX_ERR_INVALID);
  assert_null(m);
  assert_non_null(strstr(px_last_error(), "PX_MEM_PLAN='lifo'"));
  px_ops_destroy(ops);
}

/* ---- training, both plans ---- */

typedef struct {
  size_t act_bytes, numel, nbuf;
  float *params, *grads, *bufs;
  float loss;
} run_t;

static float *to_host(const px_tensor_t *t, size_t n) {
  float *h = malloc(n * sizeof *h);
  assert_non_null(h);
  assert_int_equal(px_tensor_copy_to_host(t, h, n * sizeof *h), PX_OK);
  return h;
}

/* STEPS steps (1 with widths) of the trainer on the fixture under plan (a
 * PX_MEM_PLAN value): arch, or the ONNX file onnx, with widths when not NULL. */
static run_t train(const char *plan, const char *arch, const char *onnx, const int32_t *widths,
                   int nwidths) {
  const int steps = widths ? 1 : STEPS;
  setenv("PX_MEM_PLAN", plan, 1);
  px_train_config_t tc;
  px_test_rank_train_config(&tc, dir, 0, 1);
  tc.arch = arch;
  tc.onnx = onnx;
  tc.widths = widths;
  tc.nwidths = nwidths;
  px_trainer_t *t = NULL;
  if (px_trainer_create(&tc, &t) != PX_OK) fail_msg("trainer: %s", px_last_error());
  px_epoch_stats_t es;
  assert_int_equal(px_trainer_steps(t, steps, &es), PX_OK);
  px_model_t *m = px_trainer_model(t);
  run_t r = {px_model_activation_bytes(m), px_model_numel(m), 0, NULL, NULL, NULL, 0};
  r.nbuf = px_tensor_numel(px_model_flat_buffers(m));
  r.params = to_host(px_model_flat_params(m), r.numel);
  r.grads = to_host(px_model_flat_grads(m), r.numel);
  r.bufs = to_host(px_model_flat_buffers(m), r.nbuf);
  r.loss = (float)es.loss;
  px_trainer_destroy(t);
  unsetenv("PX_MEM_PLAN");
  return r;
}

static void assert_same_run(const run_t *a, const run_t *b) {
  assert_int_equal(a->numel, b->numel);
  assert_int_equal(a->nbuf, b->nbuf);
  assert_memory_equal(a->params, b->params, a->numel * sizeof(float));
  assert_memory_equal(a->grads, b->grads, a->numel * sizeof(float));
  assert_memory_equal(a->bufs, b->bufs, a->nbuf * sizeof(float));
}

static void free_run(run_t *r) { free(r->params), free(r->grads), free(r->bufs); }

/* Every net here has BN outputs a backward reads (a conv's or a ReLU6's
 * input), so recomputing them must take less memory than the shared plan. */
static void same_training(const char *what, const char *arch, const char *onnx,
                          const int32_t *widths, int nwidths) {
  if (!dir[0]) skip();
  run_t a = train("separate", arch, onnx, widths, nwidths);
  run_t b = train("shared", arch, onnx, widths, nwidths);
  run_t c = train("recompute", arch, onnx, widths, nwidths);
  print_message("%s: %d step(s), working memory %.2f MB separate, %.2f MB shared (%.1f%% less), "
                "%.2f MB recompute (%.1f%% less than shared); loss %.6f\n",
                what, widths ? 1 : STEPS, a.act_bytes / 1e6, b.act_bytes / 1e6,
                100.0 * (1.0 - (double)b.act_bytes / (double)a.act_bytes), c.act_bytes / 1e6,
                100.0 * (1.0 - (double)c.act_bytes / (double)b.act_bytes), b.loss);
  assert_same_run(&a, &b);
  assert_same_run(&a, &c);
  assert_true(b.act_bytes < a.act_bytes);
  assert_true(c.act_bytes < b.act_bytes);
  free_run(&a);
  free_run(&b);
  free_run(&c);
}

static void test_resnet20_same_weights(void **state) {
  (void)state;
  same_training("resnet20", "resnet20", NULL, NULL, 0);
}

/* Half the widths: the stem and first stage 8 wide, not a multiple of 16,
 * so the CPU engine's convs read plain copies (REORDER nodes) of the
 * blocked activations. */
static void test_compact_resnet20_same_weights(void **state) {
  (void)state;
  int32_t w[32];
  int n = 0;
  px_ops_t *ops;
  px_model_t *m;
  assert_int_equal(px_ops_create(px_device_cpu(), 1, &ops), PX_OK);
  assert_int_equal(small_resnet20("separate", ops, &m), PX_OK);
  for (int i = 0; i < px_model_num_params(m) && n < 32; i++)
    if (px_model_param(m, i)->kind == PX_WEIGHT_CONV)
      w[n++] = (int32_t)px_model_param(m, i)->value->dims[0] / 2;
  px_model_destroy(m);
  px_ops_destroy(ops);
  same_training("resnet20 at half width", "resnet20", NULL, w, n);
}

/* PyTorch's net exported to ONNX for 1x32x32 inputs (Fashion-MNIST padded, as the trainer reads it), into path[cap]. */
static int export_net(const char *net, char *path, size_t cap) {
  if (!dir[0] || !px_test_python_has("torch, onnx, numpy")) return 0;
  snprintf(path, cap, "%s/%s.onnx", dir, net);
  char cmd[1024];
  snprintf(cmd, sizeof cmd, "%s export %s %s 1 32 32 10 >/dev/null", NETS, net, path);
  assert_int_equal(px_test_py(cmd), 0);
  return 1;
}

static void test_onnx_seresnet_same_weights(void **state) {
  (void)state;
  char path[512];
  if (!export_net("seresnet", path, sizeof path)) skip();
  same_training("onnx seresnet", "", path, NULL, 0);
}

static void test_onnx_mobilenet_same_weights(void **state) {
  (void)state;
  char path[512];
  if (!export_net("mobilenet", path, sizeof path)) skip();
  same_training("onnx mobilenet", "", path, NULL, 0);
}

/* bf16 on the CPU engine (its convolutions in bf16, where the CPU has
 * AVX512-BF16 or AMX): ResNet-20 trains two steps on synthetic images to
 * the same bytes under the shared and the recomputing plan, and bf16 on the
 * CPU keeps the shared plan by default (recomputation is the default for
 * bf16 on CUDA only). 0 when this CPU has no bf16 instructions. */
static int bf16_run(const char *plan, const float *x, const int32_t *y, run_t *r) {
  if (plan) setenv("PX_MEM_PLAN", plan, 1);
  px_ops_t *ops;
  px_model_t *m = NULL;
  assert_int_equal(px_ops_create(px_device_cpu(), 1, &ops), PX_OK);
  px_model_config_t mc = {"resnet20", 3, 10, 8, 16, 16, NULL, 0, PX_PRECISION_BF16, NULL};
  px_status_t st = px_model_create(ops, &mc, &m);
  unsetenv("PX_MEM_PLAN");
  if (st != PX_OK) { /* no bf16 instructions on this CPU */
    print_message("bf16 on this CPU: %s\n", px_last_error());
    assert_int_equal(st, PX_ERR_INVALID);
    px_ops_destroy(ops);
    return 0;
  }
  px_sgd_t *sgd;
  px_sgd_config_t sc = {0.1, 0.9, 5e-4, 0};
  float loss = 0;
  assert_int_equal(px_model_init_params(m, 3), PX_OK);
  assert_int_equal(px_sgd_create(m, &sc, &sgd), PX_OK);
  for (int s = 0; s < 2; s++) {
    int64_t correct;
    assert_int_equal(px_model_train_step(m, x, y, &loss, &correct), PX_OK);
    assert_int_equal(px_sgd_step(sgd), PX_OK);
  }
  *r = (run_t){px_model_activation_bytes(m), px_model_numel(m), 0, NULL, NULL, NULL, loss};
  r->nbuf = px_tensor_numel(px_model_flat_buffers(m));
  r->params = to_host(px_model_flat_params(m), r->numel);
  r->grads = to_host(px_model_flat_grads(m), r->numel);
  r->bufs = to_host(px_model_flat_buffers(m), r->nbuf);
  px_sgd_destroy(sgd);
  px_model_destroy(m);
  px_ops_destroy(ops);
  return 1;
}

static void test_bf16_cpu_recompute_same_weights(void **state) {
  (void)state;
  enum { B = 8 };
  float *x = malloc((size_t)B * 3 * 16 * 16 * sizeof *x);
  int32_t y[B];
  assert_non_null(x);
  px_synth_config_t syn;
  px_synth_config_default(&syn);
  syn.height = syn.width = 16;
  assert_int_equal(px_synth_batch(&syn, 0, B, x, y), PX_OK);
  run_t a, b, d;
  if (!bf16_run("shared", x, y, &a)) {
    free(x);
    skip();
  }
  assert_true(bf16_run("recompute", x, y, &b));
  assert_true(bf16_run(NULL, x, y, &d));
  print_message("bf16 on the CPU: working memory %zu bytes shared, %zu recompute, %zu by default\n",
                a.act_bytes, b.act_bytes, d.act_bytes);
  assert_true(b.act_bytes < a.act_bytes);
  assert_int_equal(d.act_bytes, a.act_bytes);
  assert_same_run(&a, &b);
  free_run(&a);
  free_run(&b);
  free_run(&d);
  free(x);
}

static int setup(void **state) {
  (void)state;
  return px_test_fmnist_fixture_n(dir, sizeof dir, "px_mem_plan", 64, 16);
}

static int teardown(void **state) {
  (void)state;
  if (dir[0] && !getenv("PX_TEST_KEEP")) px_th_rmdir(dir);
  return 0;
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_plan_chain_shares_bytes),
      cmocka_unit_test(test_plan_random_blocks_disjoint),
      cmocka_unit_test(test_plan_env_refused),
      cmocka_unit_test(test_resnet20_same_weights),
      cmocka_unit_test(test_compact_resnet20_same_weights),
      cmocka_unit_test(test_onnx_seresnet_same_weights),
      cmocka_unit_test(test_onnx_mobilenet_same_weights),
      cmocka_unit_test(test_bf16_cpu_recompute_same_weights),
  };
  return cmocka_run_group_tests(tests, setup, teardown);
}
