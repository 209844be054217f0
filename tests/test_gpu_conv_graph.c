/* The CUDA engine's convolution on cuDNN's graph API (the default;
 * libpxcore/nn/cuda/cuda_conv_graph.cu) against its legacy-API path
 * (PX_CUDNN_API=legacy) and the CPU engine.
 *
 * CPU half (runs everywhere): PX_CUDNN_API's parsing (px__cudnn_api_parse):
 * unset, empty and "graph" give the graph API, "legacy" the legacy API,
 * anything else a clear error naming the variable.
 * GPU half (skips without a GPU): on random data, in plain NCHW f32, NHWC
 * f32 and NHWC bf16, for 3x3 stride 1 and 2, 1x1, 7x7 stride 2 over 3 input
 * channels and a depthwise 3x3, the forward, backward-data and
 * backward-filter results of the graph API match the legacy API's and the
 * CPU engine's (relative L2 1e-5 in f32 with TF32 off; bf16 to the bf16
 * tolerance of test_gpu_precision); a context says which API it uses and
 * refuses a bad PX_CUDNN_API; with PX_CUDNN_DETERMINISTIC=1 two graph-API
 * contexts give the same bits; and one ResNet-20 training step on the
 * graph API gives the legacy step's loss and weight gradients (NCHW and
 * NHWC f32 to f32 accuracy, NHWC bf16 to bf16 accuracy). */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "nn/px_ops_int.h"
#include "prunex/cuda.h"
#include "prunex/nn.h"
#include "prunex/ops.h"
#include "prunex/ops_internal.h"
#include "px_test_util.h"

#include "ops_test_util.h"

#define REQUIRE_GPU()                                                   \
  do {                                                                  \
    if (!px_test_gpu_ready("cuDNN graph-API convolution checks")) skip(); \
  } while (0)

/* ---- CPU half: the switch ----------------------------------------------------------- */

static void cudnn_api_switch_parses_legacy_graph_and_refuses_the_rest(void **state) {
  (void)state;
  int graph = -1;
  assert_ok(px__cudnn_api_parse(NULL, &graph));
  assert_int_equal(graph, 1);
  graph = -1;
  assert_ok(px__cudnn_api_parse("", &graph));
  assert_int_equal(graph, 1);
  assert_ok(px__cudnn_api_parse("legacy", &graph));
  assert_int_equal(graph, 0);
  assert_ok(px__cudnn_api_parse("graph", &graph));
  assert_int_equal(graph, 1);
  const char *bad[] = {"Graph", "backend", "graph ", "1",
                       "a-very-long-value-that-goes-on-and-on-and-on-well-past-forty-chars"};
  for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
    graph = -1;
    assert_int_equal(px__cudnn_api_parse(bad[i], &graph), PX_ERR_INVALID);
    assert_int_equal(graph, 0);
    printf("%s\n", px_last_error());
    assert_non_null(strstr(px_last_error(), "PX_CUDNN_API"));
    assert_non_null(strstr(px_last_error(), "legacy"));
    assert_true(strlen(px_last_error()) < 160); /* a long value is cut */
  }
}

/* ---- GPU helpers ---------------------------------------------------------------------- */

/* A CUDA context on PX_CUDNN_API=api (NULL: unset), TF32 off. */
static px_ops_t *gpu_ops(const char *api) {
  if (api)
    setenv("PX_CUDNN_API", api, 1);
  else
    unsetenv("PX_CUDNN_API");
  px_ops_t *ops = NULL;
  px_status_t st = px_ops_create(px_device_cuda(0), 0, &ops);
  unsetenv("PX_CUDNN_API");
  assert_ok(st);
  assert_ok(px_ops_set_tf32(ops, 0));
  return ops;
}

/* t of spec `spec` holding plain NCHW f32 host data h: copied for a plain
 * f32 (or CPU) spec, converted on the device for a CUDA activation format. */
static void put(px_ops_t *ops, px_tensor_t *t, const px_tensor_t *spec, const float *h) {
  if (spec->device.kind == PX_DEVICE_CUDA && spec->layout)
    from_plain_host(ops, t, spec, h);
  else
    make_tensor(t, spec, h);
}

/* t as plain NCHW f32 host data (the caller frees it). */
static float *get(px_ops_t *ops, const px_tensor_t *t) {
  return t->device.kind == PX_DEVICE_CUDA && t->layout ? to_plain_host(ops, t) : read_host(t);
}

typedef struct {
  int64_t c, hw;         /* input channels, height = width (batch 4) */
  int32_t c_out, k, stride, groups;
} shape_t;

typedef struct {
  float *y, *dx, *dw;
  size_t ny, nx, nw;
} conv_out_t;

static void free_out(conv_out_t *o) {
  free(o->y);
  free(o->dx);
  free(o->dw);
}

/* Forward, backward data and backward weights of shape sh on ops, the
 * input in format prec (-1: plain f32 NCHW), on host data hx, hw, hdy. */
static conv_out_t run_conv(px_ops_t *ops, const shape_t *sh, int prec, const float *hx,
                           const float *hw, const float *hdy) {
  px_tensor_t xs;
  assert_ok(px_tensor_init4(&xs, px_ops_device(ops), 4, sh->c, sh->hw, sh->hw));
  if (prec >= 0) assert_ok(px_ops_act_format(ops, (px_precision_t)prec, &xs));
  px_conv2d_params_t cp = {sh->c_out, sh->k, sh->k, sh->stride, sh->stride, sh->k / 2, sh->k / 2,
                           0, sh->groups, 0, 0, 0, 0};
  px_conv2d_t *conv = NULL;
  assert_ok(px_conv2d_create(ops, &xs, &cp, &conv));
  px_tensor_t ys, wsp, x, y, w, dy, dx, dw;
  px_conv2d_y_spec(conv, &ys);
  px_conv2d_w_spec(conv, &wsp);
  put(ops, &x, &xs, hx);
  put(ops, &dy, &ys, hdy);
  make_tensor(&w, &wsp, hw);
  alloc_like(&y, &ys);
  alloc_like(&dx, &xs);
  alloc_like(&dw, &wsp);
  /* twice: the second run reuses the variant packs built by the first */
  for (int r = 0; r < 2; r++) {
    assert_ok(px_conv2d_forward(conv, &y, &x, &w, NULL));
    assert_ok(px_conv2d_backward_data(conv, &dx, &dy, &w));
    assert_ok(px_conv2d_backward_weights(conv, &dw, NULL, &x, &dy));
  }
  assert_ok(px_ops_sync(ops));
  conv_out_t o = {get(ops, &y), get(ops, &dx), read_host(&dw), px_tensor_numel(&ys),
                  px_tensor_numel(&xs), px_tensor_numel(&wsp)};
  px_tensor_t *all[] = {&x, &y, &w, &dy, &dx, &dw};
  for (size_t i = 0; i < sizeof all / sizeof *all; i++) px_tensor_release(all[i]);
  px_conv2d_destroy(conv);
  return o;
}

static void expect_l2(const char *what, const char *dir, const float *got, const float *want,
                      size_t n, double tol) {
  const double e = px_test_rel_l2(got, want, n);
  printf("  %s %s: relative L2 %.3g\n", what, dir, e);
  if (!(e <= tol)) fail_msg("%s %s: relative L2 %g > %g", what, dir, e, tol);
}

static void expect_outs(const char *what, const conv_out_t *a, const conv_out_t *b, double tol) {
  assert_true(a->ny == b->ny && a->nx == b->nx && a->nw == b->nw);
  expect_l2(what, "y", a->y, b->y, a->ny, tol);
  expect_l2(what, "dx", a->dx, b->dx, a->nx, tol);
  expect_l2(what, "dw", a->dw, b->dw, a->nw, tol);
}

/* ---- GPU half ------------------------------------------------------------------------- */

static const shape_t shapes[] = {
    {16, 8, 24, 3, 1, 1},  /* 3x3 stride 1 */
    {16, 8, 24, 3, 2, 1},  /* 3x3 stride 2 */
    {16, 8, 32, 1, 1, 1},  /* 1x1 */
    {3, 16, 16, 7, 2, 1},  /* the stem: 7x7 stride 2 over 3 channels */
    {16, 8, 16, 3, 1, 16}, /* depthwise 3x3 */
};

static void graph_api_matches_legacy_and_cpu_in_every_format(void **state) {
  (void)state;
  REQUIRE_GPU();
  px_ops_t *legacy = gpu_ops("legacy"), *graph = gpu_ops(NULL), *cpu = new_ops();
  assert_null(strstr(px_ops_describe(legacy), "graph API"));
  assert_non_null(strstr(px_ops_describe(graph), "graph API")); /* the default */
  for (size_t s = 0; s < sizeof shapes / sizeof *shapes; s++) {
    const shape_t *sh = &shapes[s];
    const int64_t oh = (sh->hw + 2 * (sh->k / 2) - sh->k) / sh->stride + 1;
    px_test_rng_t rng;
    px_test_rng_seed(&rng, 40 + s);
    float *hx = rand_host(&rng, (size_t)4 * sh->c * sh->hw * sh->hw, 2.0f, -0.5f);
    float *hw = rand_host(&rng, (size_t)sh->c_out * (sh->c / sh->groups) * sh->k * sh->k, 0.3f, 0);
    float *hdy = rand_host(&rng, (size_t)4 * sh->c_out * oh * oh, 1.0f, 0.0f);
    conv_out_t ref = run_conv(cpu, sh, -1, hx, hw, hdy);
    for (int prec = -1; prec <= (int)PX_PRECISION_BF16; prec++) {
      const char *fmt = prec < 0 ? "nchw f32" : prec == PX_PRECISION_FP32 ? "nhwc f32" : "nhwc bf16";
      printf("shape %zu (c %lld, k %d, stride %d, groups %d), %s\n", s, (long long)sh->c, sh->k,
             sh->stride, sh->groups, fmt);
      conv_out_t g = run_conv(graph, sh, prec, hx, hw, hdy);
      conv_out_t l = run_conv(legacy, sh, prec, hx, hw, hdy);
      /* bf16: inputs and outputs rounded to 8 bits, sums in f32 (test_gpu_precision's bound,
       * there as a maximum error, here in L2) */
      const double tol = prec == PX_PRECISION_BF16 ? 2e-2 : 1e-5;
      expect_outs("graph vs legacy", &g, &l, tol);
      expect_outs("graph vs cpu", &g, &ref, tol);
      free_out(&g);
      free_out(&l);
    }
    free_out(&ref);
    free(hx);
    free(hw);
    free(hdy);
  }
  px_ops_destroy(cpu);
  px_ops_destroy(graph);
  px_ops_destroy(legacy);
}

static void bad_cudnn_api_fails_the_context_with_its_name(void **state) {
  (void)state;
  REQUIRE_GPU();
  setenv("PX_CUDNN_API", "backend", 1);
  px_ops_t *ops = NULL;
  px_status_t st = px_ops_create(px_device_cuda(0), 0, &ops);
  unsetenv("PX_CUDNN_API");
  assert_int_equal(st, PX_ERR_INVALID);
  assert_null(ops);
  assert_non_null(strstr(px_last_error(), "PX_CUDNN_API"));
}

static void deterministic_graph_api_gives_the_same_bits_twice(void **state) {
  (void)state;
  REQUIRE_GPU();
  setenv("PX_CUDNN_DETERMINISTIC", "1", 1);
  px_ops_t *a = gpu_ops("graph"), *b = gpu_ops("graph");
  unsetenv("PX_CUDNN_DETERMINISTIC");
  const shape_t *sh = &shapes[0];
  px_test_rng_t rng;
  px_test_rng_seed(&rng, 60);
  float *hx = rand_host(&rng, (size_t)4 * 16 * 8 * 8, 2.0f, -0.5f);
  float *hw = rand_host(&rng, (size_t)24 * 16 * 9, 0.3f, 0);
  float *hdy = rand_host(&rng, (size_t)4 * 24 * 8 * 8, 1.0f, 0.0f);
  for (int prec = 0; prec <= (int)PX_PRECISION_BF16; prec++) {
    conv_out_t p = run_conv(a, sh, prec, hx, hw, hdy), q = run_conv(b, sh, prec, hx, hw, hdy);
    assert_memory_equal(p.y, q.y, p.ny * sizeof(float));
    assert_memory_equal(p.dx, q.dx, p.nx * sizeof(float));
    assert_memory_equal(p.dw, q.dw, p.nw * sizeof(float));
    free_out(&p);
    free_out(&q);
  }
  free(hx);
  free(hw);
  free(hdy);
  px_ops_destroy(a);
  px_ops_destroy(b);
}

/* One ResNet-20 step (batch 16, synthetic data) in precision prec on a
 * fresh context of PX_CUDNN_API=api; nchw: PX_CUDA_LAYOUT=nchw (the
 * convolutions then read the weights in the model's parameter arena, which
 * aligns them to 4 bytes only). */
static px_test_steps_t model_step(const char *api, px_precision_t prec, int nchw) {
  if (nchw) setenv("PX_CUDA_LAYOUT", "nchw", 1);
  px_ops_t *ops = gpu_ops(api);
  unsetenv("PX_CUDA_LAYOUT");
  px_test_steps_t r;
  assert_int_equal(px_test_resnet20_steps(ops, 16, prec, 1, &r), 0);
  px_ops_destroy(ops);
  return r;
}

static void resnet20_step_on_the_graph_api_matches_legacy(void **state) {
  (void)state;
  REQUIRE_GPU();
  /* nchw f32, nhwc f32, nhwc bf16 */
  for (int c = 0; c < 3; c++) {
    const int prec = c == 2 ? PX_PRECISION_BF16 : PX_PRECISION_FP32, nchw = c == 0;
    px_test_steps_t l = model_step("legacy", (px_precision_t)prec, nchw);
    px_test_steps_t g = model_step("graph", (px_precision_t)prec, nchw);
    assert_int_equal(g.numel, l.numel);
    const double e = px_test_rel_l2(g.grads, l.grads, l.numel);
    const double cosine = px_test_cosine(g.grads, l.grads, l.numel);
    printf("%s: loss legacy %.6f, graph %.6f; weight gradients relative L2 %.3g, cosine %.4f\n",
           nchw ? "nchw f32" : prec ? "nhwc bf16" : "nhwc f32", l.first, g.first, e, cosine);
    if (prec == PX_PRECISION_FP32) { /* test_gpu_precision's f32 bounds */
      assert_true(fabsf(g.first - l.first) <= 1e-4f * fabsf(l.first));
      assert_true(e < 1e-3);
    } else { /* its bf16 bounds: ReLUs near zero flip with the summation order */
      assert_true(fabsf(g.first - l.first) <= 2e-2f * fabsf(l.first));
      assert_true(e < 0.5);
      assert_true(cosine > 0.9);
    }
    free(l.grads);
    free(g.grads);
  }
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(cudnn_api_switch_parses_legacy_graph_and_refuses_the_rest),
      cmocka_unit_test(graph_api_matches_legacy_and_cpu_in_every_format),
      cmocka_unit_test(bad_cudnn_api_fails_the_context_with_its_name),
      cmocka_unit_test(deterministic_graph_api_gives_the_same_bits_twice),
      cmocka_unit_test(resnet20_step_on_the_graph_api_matches_legacy),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
