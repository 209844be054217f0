/* Training on the GPU: a model's training step (loss, every gradient, the
 * BN running statistics, evaluation) on CUDA against the same model on the
 * CPU engine; the fused CUDA SGD step (momentum, Nesterov, weight decay, the
 * ADMM proximal term) against the CPU optimiser; a short pxtrain-like run on
 * synthetic data whose loss falls and whose first steps match the CPU's;
 * the recomputing memory plan (PX_MEM_PLAN=recompute, the default in bf16)
 * trains in f32 and bf16 to the shared plan's bits in less memory;
 * pxtrain's --device option. Without CUDA or without a GPU the GPU checks
 * skip with a message, and what must then be refused is checked. */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>

#include <cmocka.h>

#include "prunex/cuda.h"
#include "prunex/nn.h"
#include "px_test_util.h"

#define assert_ok(call)                                                                     \
  do {                                                                                      \
    px_status_t st_ = (call);                                                               \
    if (st_ != PX_OK) fail_msg("%s: %s (%s)", #call, px_status_name(st_), px_last_error()); \
  } while (0)

static int gpu_ready(void) { return px_test_gpu_ready("GPU training checks"); }

#define REQUIRE_GPU()         \
  do {                        \
    if (!gpu_ready()) skip(); \
  } while (0)

static float *host_copy(const px_tensor_t *t) {
  float *p = malloc(px_tensor_plain_bytes(t));
  assert_non_null(p);
  assert_ok(px_tensor_copy_to_host(t, p, px_tensor_plain_bytes(t)));
  return p;
}

static void expect_l2(const char *what, const px_tensor_t *gpu, const px_tensor_t *cpu, double tol) {
  assert_int_equal(px_tensor_numel(gpu), px_tensor_numel(cpu));
  float *g = host_copy(gpu), *c = host_copy(cpu);
  double e = px_test_rel_l2(g, c, px_tensor_numel(cpu));
  if (!(e <= tol)) fail_msg("%s: GPU vs CPU relative L2 error %g > %g", what, e, tol);
  free(g);
  free(c);
}

static void expect_close(const char *what, const px_tensor_t *gpu, const px_tensor_t *cpu,
                         double tol) {
  float *g = host_copy(gpu), *c = host_copy(cpu);
  double e = px_test_max_rel_err(g, c, px_tensor_numel(cpu));
  if (!(e <= tol)) fail_msg("%s: GPU vs CPU max relative error %g > %g", what, e, tol);
  free(g);
  free(c);
}

/* A CPU and a GPU model of one architecture, initialised alike. */
typedef struct {
  px_ops_t *ops[2];
  px_model_t *m[2];
} models_t;

static void models_init(models_t *mm, const px_model_config_t *mc, uint64_t seed) {
  assert_ok(px_ops_create(px_device_cpu(), 2, &mm->ops[0]));
  assert_ok(px_ops_create(px_device_cuda(0), 0, &mm->ops[1]));
  assert_ok(px_ops_set_tf32(mm->ops[1], 0));
  for (int d = 0; d < 2; d++) {
    assert_ok(px_model_create(mm->ops[d], mc, &mm->m[d]));
    assert_ok(px_model_init_params(mm->m[d], seed));
  }
  assert_int_equal(px_model_numel(mm->m[0]), px_model_numel(mm->m[1]));
  assert_int_equal(px_model_flat_params(mm->m[1])->device.kind, PX_DEVICE_CUDA);
}

static void models_fini(models_t *mm) {
  for (int d = 1; d >= 0; d--) {
    px_model_destroy(mm->m[d]);
    px_ops_destroy(mm->ops[d]);
  }
}

/* ---- refusal ------------------------------------------------------------------------ */

static void trainer_on_cuda_is_refused_cleanly_when_absent(void **state) {
  (void)state;
  px_train_config_t c;
  px_train_config_default(&c);
  assert_int_equal(c.device.kind, PX_DEVICE_CPU);
  c.dataset = "synthetic";
  c.batch = 8;
  int n = 0;
  px_status_t st = px_cuda_device_count(&n);
  c.device = px_device_cuda(st == PX_OK ? n : 0); /* never exists */
  px_trainer_t *t = NULL;
  px_status_t r = px_trainer_create(&c, &t);
  assert_null(t);
  assert_int_equal(r, px_cuda_built() ? PX_ERR_NO_DEVICE : PX_ERR_NOT_BUILT);
}

static void pxtrain_device_option(void **state) {
  (void)state;
  char cmd[512], out[8192];
  const char *bin = PX_BINARY_DIR "/cli/pxtrain";
  snprintf(cmd, sizeof cmd, "%s --device tpu 2>&1", bin);
  assert_int_equal(px_test_capture(cmd, out, sizeof out), 2);
  assert_non_null(strstr(out, "--device"));
  snprintf(cmd, sizeof cmd, "%s --device cuda:x 2>&1", bin);
  assert_int_equal(px_test_capture(cmd, out, sizeof out), 2);
  snprintf(cmd, sizeof cmd,
           "%s --device auto --bench --model resnet20 --batch 8 --steps 2 --warmup 1 --threads 2 2>&1",
           bin);
  assert_int_equal(px_test_capture(cmd, out, sizeof out), 0);
  assert_non_null(strstr(out, "RESULT images_per_sec "));
  snprintf(cmd, sizeof cmd, "%s --device cuda --bench --model resnet20 --batch 8 --steps 2 2>&1",
           bin);
  int rc = px_test_capture(cmd, out, sizeof out);
  if (!gpu_ready()) {
    assert_int_equal(rc, 1);
    assert_non_null(strstr(out, px_cuda_built() ? "no CUDA device" : "without CUDA"));
    return; /* the refusal is what there is to check here */
  }
  assert_int_equal(rc, 0);
  assert_non_null(strstr(out, "cuDNN"));
  assert_non_null(strstr(out, "RESULT images_per_sec "));
  assert_non_null(strstr(out, "RESULT gpu_peak_mb "));
}

/* ---- one training step against the CPU ------------------------------------------------ */

static void model_step_matches_cpu(void **state) {
  (void)state;
  REQUIRE_GPU();
  px_model_config_t mc = {"resnet20", 3, 10, 8, 16, 16, NULL, 0, PX_PRECISION_FP32, NULL};
  models_t mm;
  models_init(&mm, &mc, 7);
  px_test_rng_t rng;
  px_test_rng_seed(&rng, 17);
  const size_t nx = (size_t)mc.batch * 3 * 16 * 16;
  float *x = malloc(nx * sizeof *x);
  int32_t y[8];
  assert_non_null(x);
  px_test_fill_normal(&rng, x, nx);
  for (int i = 0; i < mc.batch; i++) y[i] = (int32_t)(px_test_rng_u64(&rng) % 10);

  float loss[2];
  int64_t correct[2];
  px_sgd_t *sgd[2];
  px_sgd_config_t sc = {0.1, 0.9, 5e-4, 0};
  for (int d = 0; d < 2; d++) {
    assert_ok(px_model_train_step(mm.m[d], x, y, &loss[d], &correct[d]));
    assert_ok(px_sgd_create(mm.m[d], &sc, &sgd[d]));
  }
  printf("loss cpu %.6f gpu %.6f, correct %lld / %lld\n", loss[0], loss[1], (long long)correct[0],
         (long long)correct[1]);
  assert_true(fabs((double)loss[1] - loss[0]) <= 1e-4 * fabs((double)loss[0]));
  assert_int_equal(correct[1], correct[0]);
  expect_l2("all gradients", px_model_flat_grads(mm.m[1]), px_model_flat_grads(mm.m[0]), 1e-3);
  for (int i = 0; i < px_model_num_params(mm.m[0]); i++) {
    char what[160];
    snprintf(what, sizeof what, "gradient of %s", px_model_param(mm.m[0], i)->name);
    expect_l2(what, px_model_param(mm.m[1], i)->grad, px_model_param(mm.m[0], i)->grad, 1e-2);
  }
  expect_l2("BN running statistics", px_model_flat_buffers(mm.m[1]), px_model_flat_buffers(mm.m[0]),
            1e-5);

  for (int d = 0; d < 2; d++) assert_ok(px_sgd_step(sgd[d]));
  expect_l2("parameters after a step", px_model_flat_params(mm.m[1]),
            px_model_flat_params(mm.m[0]), 1e-5);

  /* evaluation of a short batch (zero-padded), then recalibration of BN */
  double ls[2] = {0, 0};
  int64_t ok[2] = {0, 0};
  for (int d = 0; d < 2; d++) assert_ok(px_model_eval_batch(mm.m[d], x, y, 5, &ls[d], &ok[d]));
  assert_true(fabs(ls[1] - ls[0]) <= 1e-3 * fabs(ls[0]) + 1e-5);
  assert_int_equal(ok[1], ok[0]);
  for (int d = 0; d < 2; d++) assert_ok(px_model_forward_train(mm.m[d], x));
  expect_l2("BN statistics after recalibration", px_model_flat_buffers(mm.m[1]),
            px_model_flat_buffers(mm.m[0]), 1e-4);

  for (int d = 0; d < 2; d++) px_sgd_destroy(sgd[d]);
  free(x);
  models_fini(&mm);
}

/* ---- the recomputing memory plan ------------------------------------------------------------ */

typedef struct {
  float *v[3]; /* flat parameters, gradients, BN buffers */
  size_t n[3];
  size_t bytes; /* px_model_activation_bytes */
} plan_run_t;

/* A GPU model of mc built under PX_MEM_PLAN=plan (NULL: unset), trained
 * three SGD steps on x, y with cuDNN's deterministic algorithms (chosen by
 * its heuristics, so that two models pick alike). */
static plan_run_t plan_run(const char *plan, const px_model_config_t *mc, const float *x,
                           const int32_t *y) {
  if (plan) setenv("PX_MEM_PLAN", plan, 1);
  else unsetenv("PX_MEM_PLAN");
  setenv("PX_CUDNN_DETERMINISTIC", "1", 1);
  px_ops_t *ops;
  px_model_t *m;
  px_sgd_t *sgd;
  px_sgd_config_t sc = {0.1, 0.9, 5e-4, 0};
  assert_ok(px_ops_create(px_device_cuda(0), 0, &ops));
  assert_ok(px_ops_set_tf32(ops, 0));
  assert_ok(px_model_create(ops, mc, &m));
  unsetenv("PX_MEM_PLAN");
  unsetenv("PX_CUDNN_DETERMINISTIC");
  assert_ok(px_model_init_params(m, 5));
  assert_ok(px_sgd_create(m, &sc, &sgd));
  for (int s = 0; s < 3; s++) {
    float loss;
    int64_t correct;
    assert_ok(px_model_train_step(m, x, y, &loss, &correct));
    assert_ok(px_sgd_step(sgd));
  }
  assert_ok(px_ops_sync(ops));
  const px_tensor_t *t[3] = {px_model_flat_params(m), px_model_flat_grads(m),
                             px_model_flat_buffers(m)};
  plan_run_t r = {{NULL, NULL, NULL}, {0, 0, 0}, px_model_activation_bytes(m)};
  for (int i = 0; i < 3; i++) {
    r.v[i] = host_copy(t[i]);
    r.n[i] = px_tensor_numel(t[i]);
  }
  px_sgd_destroy(sgd);
  px_model_destroy(m);
  px_ops_destroy(ops);
  return r;
}

/* A batch in page-locked memory (px_cuda_host_alloc, the trainer's loader
 * on a GPU) is copied by DMA, not through the staging buffer: the step's
 * loss and gradients are the same bits as from ordinary memory. */
static void pinned_batch_trains_the_same_bits(void **state) {
  (void)state;
  REQUIRE_GPU();
  px_model_config_t mc = {"resnet20", 3, 10, 8, 16, 16, NULL, 0, PX_PRECISION_FP32, NULL};
  px_ops_t *ops = NULL;
  px_model_t *m = NULL;
  assert_ok(px_ops_create(px_device_cuda(0), 0, &ops));
  assert_ok(px_model_create(ops, &mc, &m));
  px_test_rng_t rng;
  px_test_rng_seed(&rng, 23);
  const size_t nx = (size_t)mc.batch * 3 * 16 * 16;
  float *x = malloc(nx * sizeof *x), *xp = px_cuda_host_alloc(0, nx * sizeof *x);
  int32_t y[8];
  assert_non_null(x);
  assert_non_null(xp);
  assert_true(px_cuda_host_pinned(xp));
  px_test_fill_normal(&rng, x, nx);
  memcpy(xp, x, nx * sizeof *x);
  for (int i = 0; i < mc.batch; i++) y[i] = (int32_t)(px_test_rng_u64(&rng) % 10);
  float loss[2];
  int64_t correct[2];
  float *g[2];
  for (int k = 0; k < 2; k++) {
    assert_ok(px_model_init_params(m, 5));
    assert_ok(px_model_train_step(m, k ? xp : x, y, &loss[k], &correct[k]));
    g[k] = host_copy(px_model_flat_grads(m));
  }
  printf("loss from ordinary memory %.7f, from page-locked %.7f\n", loss[0], loss[1]);
  assert_true(loss[0] == loss[1]);
  assert_int_equal(correct[0], correct[1]);
  assert_memory_equal(g[0], g[1], px_model_numel(m) * sizeof(float));
  free(g[0]);
  free(g[1]);
  free(x);
  px_cuda_host_free(xp);
  px_model_destroy(m);
  px_ops_destroy(ops);
}

static void recompute_plan_trains_like_shared(void **state) {
  (void)state;
  REQUIRE_GPU();
  px_test_rng_t rng;
  px_test_rng_seed(&rng, 29);
  enum { B = 8, H = 16 };
  float x[B * 3 * H * H];
  int32_t y[B];
  px_test_fill_normal(&rng, x, sizeof x / sizeof *x);
  for (int i = 0; i < B; i++) y[i] = (int32_t)(px_test_rng_u64(&rng) % 10);
  for (int prec = PX_PRECISION_FP32; prec <= PX_PRECISION_BF16; prec++) {
    px_model_config_t mc = {"resnet20", 3, 10, B, H, H, NULL, 0, prec, NULL};
    plan_run_t a = plan_run("shared", &mc, x, y), b = plan_run("recompute", &mc, x, y);
    plan_run_t d = plan_run(NULL, &mc, x, y);
    printf("%s: working memory %zu bytes shared, %zu recompute, %zu by default\n",
           prec == PX_PRECISION_BF16 ? "bf16" : "fp32", a.bytes, b.bytes, d.bytes);
    assert_true(b.bytes < a.bytes);
    assert_int_equal(d.bytes, prec == PX_PRECISION_BF16 ? b.bytes : a.bytes);
    static const char *const what[3] = {"parameters", "gradients", "BN buffers"};
    for (int i = 0; i < 3; i++) {
      assert_int_equal(a.n[i], b.n[i]);
      if (memcmp(a.v[i], b.v[i], a.n[i] * sizeof(float)) != 0)
        fail_msg("%s: the recomputing plan's %s differ from the shared plan's",
                 prec == PX_PRECISION_BF16 ? "bf16" : "fp32", what[i]);
    }
    for (int i = 0; i < 3; i++) free(a.v[i]), free(b.v[i]), free(d.v[i]);
  }
}

/* ---- the fused SGD step against the CPU optimiser ------------------------------------------ */

static void sgd_step_matches_cpu(void **state) {
  (void)state;
  REQUIRE_GPU();
  px_model_config_t mc = {"resnet20", 3, 10, 2, 8, 8, NULL, 0, PX_PRECISION_FP32, NULL};
  for (int nesterov = 0; nesterov <= 1; nesterov++) {
    models_t mm;
    models_init(&mm, &mc, 3);
    px_test_rng_t rng;
    px_test_rng_seed(&rng, 40 + (uint64_t)nesterov);
    const size_t n = px_model_numel(mm.m[0]);
    float *w = malloc(n * sizeof *w), *g = malloc(n * sizeof *g);
    assert_non_null(w);
    assert_non_null(g);
    px_test_fill_normal(&rng, w, n);
    px_test_fill_normal(&rng, g, n);
    px_sgd_config_t sc = {0.05, 0.9, 5e-4, nesterov};
    px_sgd_t *sgd[2];
    for (int d = 0; d < 2; d++) {
      px_tensor_t p = *px_model_flat_params(mm.m[d]), q = *px_model_flat_grads(mm.m[d]);
      assert_ok(px_tensor_copy_from_host(&p, w, n * sizeof *w));
      assert_ok(px_tensor_copy_from_host(&q, g, n * sizeof *g));
      assert_ok(px_sgd_create(mm.m[d], &sc, &sgd[d]));
    }
    /* proximal terms on two parameters: z and u on the CPU, their copies on
     * the GPU; parameter 5 without u */
    const int prox_idx[2] = {0, 5};
    px_tensor_t zt[2], ut;
    float *hz[2], *hu;
    for (int k = 0; k < 2; k++) {
      const px_tensor_t *v = px_model_param(mm.m[1], prox_idx[k])->value;
      size_t pn = px_tensor_numel(v);
      hz[k] = malloc(pn * sizeof(float));
      assert_non_null(hz[k]);
      px_test_fill_normal(&rng, hz[k], pn);
      zt[k] = *v;
      zt[k].data = NULL;
      zt[k].flags = 0;
      assert_ok(px_tensor_alloc(&zt[k], "z"));
      assert_ok(px_tensor_copy_from_host(&zt[k], hz[k], pn * sizeof(float)));
    }
    {
      const px_tensor_t *v = px_model_param(mm.m[1], prox_idx[0])->value;
      size_t pn = px_tensor_numel(v);
      hu = malloc(pn * sizeof(float));
      assert_non_null(hu);
      px_test_fill_normal(&rng, hu, pn);
      ut = zt[0];
      ut.data = NULL;
      ut.flags = 0;
      assert_ok(px_tensor_alloc(&ut, "u"));
      assert_ok(px_tensor_copy_from_host(&ut, hu, pn * sizeof(float)));
    }
    assert_ok(px_sgd_set_prox(sgd[0], prox_idx[0], hz[0], hu, 0.5f));
    assert_ok(px_sgd_set_prox(sgd[0], prox_idx[1], hz[1], NULL, 0.25f));
    assert_ok(px_sgd_set_prox(sgd[1], prox_idx[0], zt[0].data, ut.data, 0.5f));
    assert_ok(px_sgd_set_prox(sgd[1], prox_idx[1], zt[1].data, NULL, 0.25f));
    /* a host pointer for a GPU model is refused */
    assert_int_equal(px_sgd_set_prox(sgd[1], 1, hz[1], NULL, 0.1f), PX_ERR_INVALID);

    for (int step = 0; step < 3; step++)
      for (int d = 0; d < 2; d++) assert_ok(px_sgd_step(sgd[d]));
    /* the proximal terms off again, with another learning rate */
    for (int d = 0; d < 2; d++) {
      assert_ok(px_sgd_set_prox(sgd[d], prox_idx[0], NULL, NULL, 0.0f));
      px_sgd_set_lr(sgd[d], 0.01);
      assert_ok(px_sgd_step(sgd[d]));
    }
    expect_close("parameters", px_model_flat_params(mm.m[1]), px_model_flat_params(mm.m[0]), 1e-5);
    for (int i = 0; i < px_model_num_params(mm.m[0]); i++)
      expect_close("momentum", px_sgd_momentum(sgd[1], i), px_sgd_momentum(sgd[0], i), 1e-5);

    for (int d = 0; d < 2; d++) px_sgd_destroy(sgd[d]);
    for (int k = 0; k < 2; k++) {
      px_tensor_release(&zt[k]);
      free(hz[k]);
    }
    px_tensor_release(&ut);
    free(hu);
    free(w);
    free(g);
    models_fini(&mm);
  }
}

/* ---- the training loop --------------------------------------------------------------------- */

static px_train_config_t synthetic_config(px_device_t dev) {
  px_train_config_t c;
  px_train_config_default(&c);
  c.arch = "resnet20";
  c.dataset = "synthetic";
  c.synthetic_samples = 64;
  c.batch = 32;
  c.threads = 2;
  c.epochs = 20;
  c.lr = 0.05;
  c.lr_schedule = "constant";
  c.augment = 0;
  c.device = dev;
  return c;
}

static void trainer_first_steps_match_cpu(void **state) {
  (void)state;
  REQUIRE_GPU();
  setenv("PX_CUDA_TF32", "0", 1); /* f32 on the GPU, to compare with the CPU */
  px_train_config_t cc = synthetic_config(px_device_cpu()), gc = synthetic_config(px_device_cuda(0));
  px_trainer_t *tc, *tg;
  assert_ok(px_trainer_create(&cc, &tc));
  assert_ok(px_trainer_create(&gc, &tg));
  unsetenv("PX_CUDA_TF32");
  for (int s = 0; s < 3; s++) {
    px_epoch_stats_t a, b;
    assert_ok(px_trainer_steps(tc, 1, &a));
    assert_ok(px_trainer_steps(tg, 1, &b));
    printf("step %d: loss cpu %.6f gpu %.6f\n", s, a.loss, b.loss);
    assert_true(fabs(b.loss - a.loss) <= 1e-3 * fabs(a.loss));
  }
  px_trainer_destroy(tg);
  px_trainer_destroy(tc);
}

static void trainer_loss_falls_on_gpu(void **state) {
  (void)state;
  REQUIRE_GPU();
  px_train_config_t c = synthetic_config(px_device_cuda(0)); /* TF32 allowed: the default */
  px_trainer_t *t;
  assert_ok(px_trainer_create(&c, &t));
  assert_int_equal(px_trainer_steps_per_epoch(t), 2);
  enum { E = 20 }; /* on the CPU the loss falls from 2.37 to 0.11 by epoch 11 (64 samples) */
  double loss[E];
  for (int e = 0; e < E; e++) {
    px_epoch_stats_t st;
    assert_ok(px_trainer_epoch(t, e, NULL, NULL, &st));
    assert_int_equal(st.steps, 2);
    loss[e] = st.loss;
  }
  double best_late = loss[E - 1];
  for (int e = E - 5; e < E; e++)
    if (loss[e] < best_late) best_late = loss[e];
  printf("training loss on the GPU: epoch 1 %.3f, epoch 10 %.3f, best of the last 5 %.3f\n",
         loss[0], loss[9], best_late);
  assert_true(best_late < 0.5 * loss[0]);
  px_eval_stats_t ev;
  assert_ok(px_trainer_evaluate(t, &ev));
  assert_int_equal(ev.samples, c.batch);
  assert_true(isfinite(ev.loss));
  px_trainer_destroy(t);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(trainer_on_cuda_is_refused_cleanly_when_absent),
      cmocka_unit_test(pxtrain_device_option),
      cmocka_unit_test(model_step_matches_cpu),
      cmocka_unit_test(pinned_batch_trains_the_same_bits),
      cmocka_unit_test(recompute_plan_trains_like_shared),
      cmocka_unit_test(sgd_step_matches_cpu),
      cmocka_unit_test(trainer_first_steps_match_cpu),
      cmocka_unit_test(trainer_loss_falls_on_gpu),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
