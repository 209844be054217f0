/* Convolution on the oneDNN backend: forward, backward-data and
 * backward-weights against the naive reference on random data (plain and
 * blocked inputs, stride 2, padding, 1x1 and 5x5 kernels, odd sizes and
 * channel counts, with and without bias, weights converted on one thread and
 * on all; Winograd where px__conv_wino picks it, at a looser tolerance), the
 * choice of Winograd, and the gradients against central finite differences
 * of the backend's own forward. */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE /* RTLD_DEFAULT */
#endif
#include <dlfcn.h>
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cmocka.h>
#include <dnnl_debug.h>

#include "nn/cpu/px_cpu_int.h"
#include "nn/cpu/px_ref.h"
#include "prunex/ops.h"
#include "prunex/ops_internal.h"
#include "px_test_util.h"

#include "ops_test_util.h"

/* ---- cases --------------------------------------------------------------------- */

typedef struct {
  int64_t n, c, h, w;
  int32_t c_out, k, stride, pad, bias;
  int blocked; /* input in the backend's blocked layout */
} conv_case_t;

static const conv_case_t cases[] = {
    {2, 3, 8, 8, 16, 3, 1, 1, 0, 0},   /* network input: plain, 3 channels */
    {2, 16, 9, 9, 32, 3, 2, 1, 0, 1},  /* stride 2 on an odd size */
    {2, 16, 8, 8, 32, 1, 2, 0, 0, 1},  /* 1x1 stride-2 shortcut */
    {3, 5, 7, 6, 7, 3, 1, 1, 1, 1},    /* odd channels (padded blocks), bias, non-square */
    {2, 32, 4, 4, 16, 1, 1, 0, 1, 0},  /* 1x1 on a plain input, bias */
    {1, 4, 11, 11, 8, 5, 2, 2, 0, 0},  /* 5x5 stride 2 padding 2 */
    {2, 16, 6, 6, 16, 3, 1, 0, 0, 1},  /* no padding */
    {1, 256, 3, 3, 256, 3, 1, 1, 0, 1}, /* 2.4 MB of weights: converted by every thread */
    {2, 32, 8, 8, 32, 3, 1, 1, 0, 1},  /* Winograd forward and backward data (AVX-512) */
    {2, 64, 6, 10, 64, 3, 1, 1, 1, 1}, /* Winograd for all three, bias, non-square */
    {32, 64, 7, 7, 64, 3, 1, 1, 0, 1}, /* Winograd at the quickstart's stage 3 (28x28 images) */
};

/* A case's window (set by run_window_case: any window; else c's square one). */
static const px_conv2d_params_t *window_of_case;

static px_conv2d_params_t params_of(const conv_case_t *c) {
  px_conv2d_params_t p = {.c_out = c->c_out, .kh = c->k, .kw = c->k, .stride_h = c->stride,
                          .stride_w = c->stride, .pad_h = c->pad, .pad_w = c->pad, .bias = c->bias};
  if (window_of_case) p = *window_of_case;
  return p;
}

static void ref_shape(const conv_case_t *c, px__ref_conv_t *s) {
  const px_conv2d_params_t p = params_of(c);
  memset(s, 0, sizeof *s);
  s->n = c->n; s->c_in = c->c; s->h = c->h; s->w = c->w;
  s->c_out = p.c_out; s->kh = p.kh; s->kw = p.kw;
  s->sh = p.stride_h; s->sw = p.stride_w; s->ph = p.pad_h; s->pw = p.pad_w;
  s->xb = p.pad_h_extra; s->xr = p.pad_w_extra; s->dilh = p.dil_h; s->dilw = p.dil_w;
  px__ref_conv_shape(s);
}

static void run_case(const conv_case_t *cc, uint64_t seed) {
  px_ops_t *ops = new_ops();
  px_test_rng_t rng;
  px_test_rng_seed(&rng, seed);
  px__ref_conv_t s;
  ref_shape(cc, &s);

  px_tensor_t xs, ys, ws, bs;
  input_spec(ops, cc->blocked, cc->n, cc->c, cc->h, cc->w, &xs);
  px_conv2d_params_t p = params_of(cc);
  px_conv2d_t *conv = NULL;
  assert_ok(px_conv2d_create(ops, &xs, &p, &conv));
  px_conv2d_y_spec(conv, &ys);
  px_conv2d_w_spec(conv, &ws);
  px_conv2d_b_spec(conv, &bs);
  assert_int_equal(ys.dims[2], s.oh);
  assert_int_equal(ys.dims[3], s.ow);
  assert_null(ws.layout); /* parameters stay plain */

  const size_t nx = px_tensor_numel(&xs), ny = px_tensor_numel(&ys), nw = px_tensor_numel(&ws);
  float *hx = rand_host(&rng, nx, 1.0f, 0.0f), *hw = rand_host(&rng, nw, 1.0f, 0.0f);
  float *hb = rand_host(&rng, (size_t)cc->c_out, 1.0f, 0.0f);
  float *hdy = rand_host(&rng, ny, 1.0f, 0.0f);
  px_tensor_t x, y, w, b, dy, dx, dw, db;
  make_tensor(&x, &xs, hx);
  make_tensor(&w, &ws, hw);
  make_tensor(&b, &bs, hb);
  make_tensor(&y, &ys, NULL);
  make_tensor(&dy, &ys, hdy);
  make_tensor(&dx, &xs, NULL);
  make_tensor(&dw, &ws, NULL);
  make_tensor(&db, &bs, NULL);

  float *ry = malloc(ny * sizeof *ry), *rdx = malloc(nx * sizeof *rdx);
  float *rdw = malloc(nw * sizeof *rdw), *rdb = malloc((size_t)cc->c_out * sizeof *rdb);
  px__ref_conv2d_forward(ry, hx, hw, cc->bias ? hb : NULL, &s);
  px__ref_conv2d_backward_data(rdx, hdy, hw, &s);
  px__ref_conv2d_backward_weights(rdw, cc->bias ? rdb : NULL, hx, hdy, &s);

  assert_ok(px_conv2d_forward(conv, &y, &x, &w, cc->bias ? &b : NULL));
  assert_ok(px_conv2d_backward_data(conv, &dx, &dy, &w));
  assert_ok(px_conv2d_backward_weights(conv, &dw, cc->bias ? &db : NULL, &x, &dy));
  float *gy = read_host(&y), *gdx = read_host(&dx), *gdw = read_host(&dw), *gdb = read_host(&db);
  /* Winograd's transforms round more than the direct sums: 1.5e-4 in case 7's forward (256
     channels in) */
  const double tol = px__cpu_ops_wino_pds(ops) > 0 ? 1e-3 : 1e-4;
  print_message("  %s: max relative error forward %.2g, backward data %.2g, weights %.2g\n",
                px__cpu_ops_wino_pds(ops) > 0 ? "Winograd" : "direct",
                px_test_max_rel_err(gy, ry, ny), px_test_max_rel_err(gdx, rdx, nx),
                px_test_max_rel_err(gdw, rdw, nw));
  expect_close("forward", gy, ry, ny, tol);
  expect_close("backward data", gdx, rdx, nx, tol);
  expect_close("backward weights", gdw, rdw, nw, tol);
  if (cc->bias) expect_close("backward bias", gdb, rdb, (size_t)cc->c_out, tol);

  free(hx); free(hw); free(hb); free(hdy); free(ry); free(rdx); free(rdw); free(rdb);
  free(gy); free(gdx); free(gdw); free(gdb);
  px_tensor_t *all[] = {&x, &y, &w, &b, &dy, &dx, &dw, &db};
  for (size_t i = 0; i < sizeof all / sizeof *all; i++) px_tensor_release(all[i]);
  px_conv2d_destroy(conv);
  px_ops_destroy(ops);
}

static void forward_and_backward_match_reference(void **state) {
  (void)state;
  for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
    print_message("case %zu: x [%lld,%lld,%lld,%lld] %s, %d filters %dx%d stride %d pad %d%s\n", i,
                  (long long)cases[i].n, (long long)cases[i].c, (long long)cases[i].h,
                  (long long)cases[i].w, cases[i].blocked ? "blocked" : "plain", cases[i].c_out,
                  cases[i].k, cases[i].k, cases[i].stride, cases[i].pad,
                  cases[i].bias ? " bias" : "");
    run_case(&cases[i], 100 + i);
  }
}

/* Windows beyond k x k with padding k / 2: 1x7 and 7x1
 * (inception), 4x4 stride 4 and 2x2 stride 2 (patchify), asymmetric
 * padding (SAME_UPPER's and SAME_LOWER's odd unit), dilation 2 and 3 x 2,
 * against the reference, plain and blocked. */
static void windows_match_reference(void **state) {
  (void)state;
  static const struct {
    conv_case_t shape; /* n, c, h, w, bias, blocked (the window below) */
    px_conv2d_params_t p;
  } wc[] = {
      {{2, 16, 9, 9, 0, 0, 0, 0, 0, 1},
       {.c_out = 16, .kh = 1, .kw = 7, .stride_h = 1, .stride_w = 1, .pad_w = 3}},
      {{2, 16, 9, 8, 0, 0, 0, 0, 1, 1},
       {.c_out = 16, .kh = 7, .kw = 1, .stride_h = 1, .stride_w = 1, .pad_h = 3, .bias = 1}},
      {{2, 3, 16, 12, 0, 0, 0, 0, 1, 0},
       {.c_out = 16, .kh = 4, .kw = 4, .stride_h = 4, .stride_w = 4, .bias = 1}},
      {{2, 16, 8, 9, 0, 0, 0, 0, 0, 1},
       {.c_out = 32, .kh = 2, .kw = 2, .stride_h = 2, .stride_w = 2}},
      {{2, 16, 8, 7, 0, 0, 0, 0, 0, 1},
       {.c_out = 16, .kh = 2, .kw = 3, .stride_h = 1, .stride_w = 2, .pad_h = 0, .pad_w = 1,
        .pad_h_extra = 1, .pad_w_extra = -1}},
      {{1, 5, 9, 9, 0, 0, 0, 0, 0, 0},
       {.c_out = 7, .kh = 3, .kw = 3, .stride_h = 2, .stride_w = 2, .pad_h = 0, .pad_w = 0,
        .pad_h_extra = 1, .pad_w_extra = 1}},
      {{2, 16, 9, 9, 0, 0, 0, 0, 0, 1},
       {.c_out = 16, .kh = 3, .kw = 3, .stride_h = 1, .stride_w = 1, .pad_h = 2, .pad_w = 2,
        .dil_h = 2, .dil_w = 2}},
      {{2, 5, 10, 9, 0, 0, 0, 0, 1, 0},
       {.c_out = 8, .kh = 3, .kw = 2, .stride_h = 2, .stride_w = 1, .pad_h = 1, .pad_w = 0,
        .pad_h_extra = 2, .dil_h = 3, .dil_w = 2, .bias = 1}},
  };
  for (size_t i = 0; i < sizeof wc / sizeof *wc; i++) {
    const px_conv2d_params_t *p = &wc[i].p;
    print_message("window %zu: x %lldx%lld %s, kernel %dx%d stride %dx%d pad %d,%d (%+d,%+d) "
                  "dilation %dx%d\n", i, (long long)wc[i].shape.h, (long long)wc[i].shape.w,
                  wc[i].shape.blocked ? "blocked" : "plain", p->kh, p->kw, p->stride_h,
                  p->stride_w, p->pad_h, p->pad_w, p->pad_h_extra, p->pad_w_extra, p->dil_h,
                  p->dil_w);
    conv_case_t cc = wc[i].shape;
    cc.c_out = p->c_out;
    cc.bias = p->bias;
    window_of_case = p;
    run_case(&cc, 500 + i);
    window_of_case = NULL;
  }
}

/* Grouped and depthwise convolutions: the reference runs group by group on
 * channel slices copied out of the whole tensors. */
typedef struct {
  conv_case_t c;
  int32_t groups;
} group_case_t;

static void slice_channels(float *dst, const float *src, int64_t n, int64_t c, int64_t hw,
                           int64_t c0, int64_t cg, int back) {
  for (int64_t i = 0; i < n; i++)
    for (int64_t k = 0; k < cg; k++) {
      float *a = dst + (i * cg + k) * hw;
      float *b = (float *)src + (i * c + c0 + k) * hw;
      if (back) memcpy(b, a, (size_t)hw * sizeof *a);
      else memcpy(a, b, (size_t)hw * sizeof *a);
    }
}

/* A grouped case's input layout instead of cc->blocked's (set by
 * grouped_convolutions_run_on_vector_kernels): 1 channels-last (acdb, what
 * a grouped convolution on oneDNN's channels-last kernels writes), 2 a
 * wide 1 x 1 convolution's blocked output (wide_blocked_spec). */
static int group_input_cl;

/* The spec of a blocked [n, c, h, w] input as a network gives it: the
 * output of a stem (3 x 3 on 3 plain channels, which oneDNN's first-layer
 * kernels write blocked on AVX2 too, where ops_test_util.h's 1 x 1 feeders
 * get plain outputs at these sizes); plain where oneDNN gives no blocked
 * one. */
static void wide_blocked_spec(px_ops_t *ops, int64_t n, int64_t c, int64_t h, int64_t w,
                              px_tensor_t *spec) {
  px_tensor_t src;
  assert_ok(px_tensor_init4(&src, px_device_cpu(), n, 3, h, w));
  px_conv2d_params_t p = {.c_out = (int32_t)c, .kh = 3, .kw = 3, .stride_h = 1, .stride_w = 1,
                          .pad_h = 1, .pad_w = 1};
  px_conv2d_t *feeder = NULL;
  assert_ok(px_conv2d_create(ops, &src, &p, &feeder));
  px_conv2d_y_spec(feeder, spec);
  px_conv2d_destroy(feeder);
}

/* The spec of a channels-last [n, c, h, w] input: the output of a grouped
 * convolution of 4-channel groups on a blocked input (ResNeXt's first
 * stage), which oneDNN 2.6 runs channels-last; plain on a CPU where it
 * does not. */
static void cl_input_spec(px_ops_t *ops, int64_t n, int64_t c, int64_t h, int64_t w,
                          px_tensor_t *spec) {
  px_tensor_t src;
  wide_blocked_spec(ops, n, 32, h, w, &src);
  px_conv2d_params_t p = {.c_out = (int32_t)c, .kh = 3, .kw = 3, .stride_h = 1, .stride_w = 1,
                          .pad_h = 1, .pad_w = 1, .groups = 8};
  px_conv2d_t *feeder = NULL;
  assert_ok(px_conv2d_create(ops, &src, &p, &feeder));
  px_conv2d_y_spec(feeder, spec);
  px_conv2d_destroy(feeder);
  print_message("channels-last input: %s\n", px_layout_name(spec->layout));
}

static void run_group_case(const group_case_t *gc, uint64_t seed) {
  const conv_case_t *cc = &gc->c;
  const int64_t g = gc->groups, cig = cc->c / g, cog = cc->c_out / g;
  px_ops_t *ops = new_ops();
  px_test_rng_t rng;
  px_test_rng_seed(&rng, seed);
  px_tensor_t xs, ys, ws;
  if (group_input_cl == 3) { /* the model's channels-last mode (px__ops_channels_last) */
    px__ops_channels_last(ops, 1);
    assert_ok(px_tensor_init4(&xs, px_device_cpu(), cc->n, cc->c, cc->h, cc->w));
    assert_ok(px_ops_act_format(ops, PX_PRECISION_FP32, &xs));
    assert_non_null(xs.layout); /* the mode's layout, or the case checks the plain kernels */
    assert_string_equal(px_layout_name(xs.layout), "acdb");
  } else if (group_input_cl == 1) cl_input_spec(ops, cc->n, cc->c, cc->h, cc->w, &xs);
  else if (group_input_cl == 2) wide_blocked_spec(ops, cc->n, cc->c, cc->h, cc->w, &xs);
  else input_spec(ops, cc->blocked, cc->n, cc->c, cc->h, cc->w, &xs);
  px_conv2d_params_t p = params_of(cc);
  p.groups = gc->groups;
  px_conv2d_t *conv = NULL;
  assert_ok(px_conv2d_create(ops, &xs, &p, &conv));
  px_conv2d_y_spec(conv, &ys);
  px_conv2d_w_spec(conv, &ws);
  assert_int_equal(ws.dims[1], cig);
  const size_t nx = px_tensor_numel(&xs), ny = px_tensor_numel(&ys), nw = px_tensor_numel(&ws);
  float *hx = rand_host(&rng, nx, 1.0f, 0.0f), *hw = rand_host(&rng, nw, 1.0f, 0.0f);
  float *hdy = rand_host(&rng, ny, 1.0f, 0.0f);
  px_tensor_t x, y, w, dy, dx, dw;
  make_tensor(&x, &xs, hx);
  make_tensor(&w, &ws, hw);
  make_tensor(&y, &ys, NULL);
  make_tensor(&dy, &ys, hdy);
  make_tensor(&dx, &xs, NULL);
  make_tensor(&dw, &ws, NULL);
  assert_ok(px_conv2d_forward(conv, &y, &x, &w, NULL));
  assert_ok(px_conv2d_backward_data(conv, &dx, &dy, &w));
  assert_ok(px_conv2d_backward_weights(conv, &dw, NULL, &x, &dy));
  float *gy = read_host(&y), *gdx = read_host(&dx), *gdw = read_host(&dw);

  conv_case_t one = *cc;
  one.c = cig;
  one.c_out = (int32_t)cog;
  px__ref_conv_t s;
  ref_shape(&one, &s);
  const int64_t ihw = cc->h * cc->w, ohw = s.oh * s.ow, wg = nw / g;
  float *xg = malloc((size_t)(cc->n * cig * ihw) * sizeof *xg);
  float *dyg = malloc((size_t)(cc->n * cog * ohw) * sizeof *dyg);
  float *yg = malloc((size_t)(cc->n * cog * ohw) * sizeof *yg);
  float *dxg = malloc((size_t)(cc->n * cig * ihw) * sizeof *dxg);
  float *ry = malloc(ny * sizeof *ry), *rdx = malloc(nx * sizeof *rdx), *rdw = malloc(nw * sizeof *rdw);
  for (int64_t k = 0; k < g; k++) {
    slice_channels(xg, hx, cc->n, cc->c, ihw, k * cig, cig, 0);
    slice_channels(dyg, hdy, cc->n, cc->c_out, ohw, k * cog, cog, 0);
    px__ref_conv2d_forward(yg, xg, hw + k * wg, NULL, &s);
    px__ref_conv2d_backward_data(dxg, dyg, hw + k * wg, &s);
    px__ref_conv2d_backward_weights(rdw + k * wg, NULL, xg, dyg, &s);
    slice_channels(yg, ry, cc->n, cc->c_out, ohw, k * cog, cog, 1);
    slice_channels(dxg, rdx, cc->n, cc->c, ihw, k * cig, cig, 1);
  }
  expect_close("grouped forward", gy, ry, ny, 1e-4);
  expect_close("grouped backward data", gdx, rdx, nx, 1e-4);
  expect_close("grouped backward weights", gdw, rdw, nw, 1e-4);
  free(xg); free(dyg); free(yg); free(dxg); free(ry); free(rdx); free(rdw);
  free(hx); free(hw); free(hdy); free(gy); free(gdx); free(gdw);
  px_tensor_t *all[] = {&x, &y, &w, &dy, &dx, &dw};
  for (size_t i = 0; i < sizeof all / sizeof *all; i++) px_tensor_release(all[i]);
  px_conv2d_destroy(conv);
  px_ops_destroy(ops);
}

static void grouped_and_depthwise_match_reference(void **state) {
  (void)state;
  static const group_case_t gcases[] = {
      {{8, 128, 20, 12, 128, 3, 1, 1, 0, 1}, 128}, /* MobileNetV2's depthwise at 40x24 / 2 */
      {{8, 128, 20, 12, 128, 3, 1, 1, 0, 0}, 128}, /* the same on a plain input */
      {{2, 32, 9, 9, 32, 3, 2, 1, 0, 1}, 32},      /* depthwise, stride 2, odd size */
      {{2, 16, 9, 9, 32, 3, 2, 1, 0, 1}, 4},       /* grouped, 4 in and 8 out per group */
      {{2, 128, 8, 8, 128, 3, 1, 1, 0, 1}, 32},    /* ResNeXt's 4-channel groups */
      {{2, 128, 8, 8, 128, 3, 1, 1, 0, 0}, 32},    /* the same on a plain input */
      {{2, 64, 9, 9, 64, 3, 2, 1, 0, 1}, 8},       /* 8 per group, stride 2 */
      {{4, 80, 2, 2, 80, 3, 1, 1, 0, 1}, 10},      /* RegNetY's 8-channel groups on 2 x 2 */
  };
  for (size_t i = 0; i < sizeof gcases / sizeof *gcases; i++) {
    print_message("group case %zu: %d groups, x [%lld,%lld,%lld,%lld]\n", i, gcases[i].groups,
                  (long long)gcases[i].c.n, (long long)gcases[i].c.c, (long long)gcases[i].c.h,
                  (long long)gcases[i].c.w);
    run_group_case(&gcases[i], 300 + i);
  }
}

static void channels_last_models_match_reference(void **state) {
  (void)state;
  static const group_case_t gcases[] = {
      {{2, 96, 4, 4, 576, 1, 1, 0, 0, 0}, 1},   /* MobileNetV2 features.13: expand */
      {{2, 576, 4, 4, 576, 3, 1, 1, 0, 0}, 576}, /* its depthwise */
      {{2, 576, 4, 4, 96, 1, 1, 0, 0, 0}, 1},   /* its projection */
      {{2, 24, 16, 16, 144, 1, 1, 0, 0, 0}, 1},
      {{2, 144, 16, 16, 144, 3, 2, 1, 0, 0}, 144},
  };
  group_input_cl = 3;
  for (size_t i = 0; i < sizeof gcases / sizeof *gcases; i++) {
    print_message("channels-last case %zu\n", i);
    run_group_case(&gcases[i], 400 + i);
  }
  group_input_cl = 0;
}

/* Grouped convolutions (not depthwise) as ResNeXt and RegNetY have them, on
 * blocked, plain and channels-last inputs, and a dense 1 x 1 convolution
 * after a channels-last one: on AVX2, none of their primitives is oneDNN's
 * reference code (a blocked input that its vector kernels do not take is
 * converted to channels-last), and each matches the reference. */
static void grouped_convolutions_run_on_vector_kernels(void **state) {
  (void)state;
  static const group_case_t gcases[] = {
      {{4, 128, 16, 16, 128, 3, 1, 1, 0, 1}, 32}, /* ResNeXt stage 1 at 64 x 64 */
      {{4, 256, 8, 8, 256, 3, 2, 1, 0, 1}, 32},   /* stage 2's first, stride 2 */
      {{4, 48, 16, 16, 48, 3, 2, 1, 0, 1}, 6},    /* RegNetY's first */
      {{4, 440, 2, 2, 440, 3, 1, 1, 0, 1}, 55},   /* RegNetY's last at 64 x 64 */
      {{4, 128, 16, 16, 128, 3, 1, 1, 0, 0}, 32}, /* plain input */
      {{4, 64, 8, 8, 64, 1, 1, 0, 0, 0}, 1},      /* dense 1 x 1 (channels-last input below) */
  };
  /* asserted where it was measured (AVX2 without AVX-512); printed elsewhere */
  const dnnl_cpu_isa_t isa = dnnl_get_effective_cpu_isa();
  const int avx2 = isa == dnnl_cpu_isa_avx2;
  for (int cl = 0; cl < 2; cl++)
    for (size_t i = 0; i < sizeof gcases / sizeof *gcases; i++) {
      const group_case_t *gc = &gcases[i];
      if (!cl && gc->groups == 1) continue;
      px_ops_t *ops = new_ops();
      px_tensor_t xs;
      const int how = cl ? 1 : gc->c.blocked ? 2 : 0;
      if (how == 1) cl_input_spec(ops, gc->c.n, gc->c.c, gc->c.h, gc->c.w, &xs);
      else if (how == 2) wide_blocked_spec(ops, gc->c.n, gc->c.c, gc->c.h, gc->c.w, &xs);
      else input_spec(ops, 0, gc->c.n, gc->c.c, gc->c.h, gc->c.w, &xs);
      const int before = px__cpu_ops_ref_pds(ops);
      px_conv2d_params_t p = params_of(&gc->c);
      p.groups = gc->groups;
      px_conv2d_t *conv = NULL;
      assert_ok(px_conv2d_create(ops, &xs, &p, &conv));
      px_tensor_t ys;
      px_conv2d_y_spec(conv, &ys);
      const int refs = px__cpu_ops_ref_pds(ops) - before;
      print_message("%d groups, C %lld, %lldx%lld, %s input -> %s: %d reference primitives "
                    "(ISA %s)\n", gc->groups, (long long)gc->c.c, (long long)gc->c.h,
                    (long long)gc->c.w, px_layout_name(xs.layout), px_layout_name(ys.layout),
                    refs, dnnl_cpu_isa2str(isa));
      if (avx2) assert_int_equal(refs, 0);
      px_conv2d_destroy(conv);
      px_ops_destroy(ops);
      group_input_cl = how;
      run_group_case(gc, 700 + i);
      group_input_cl = 0;
    }
}

/* A one-channel network input (Fashion-MNIST's stem): oneDNN 2.6 on AVX2
 * has no blocked kernel for its weight gradient (its reference code took
 * 300-600 ms a batch of 32, two thirds of a ResNet-20 step); the plain
 * source is channels-last as well, and channels-last it has vector kernels
 * for all three. Numerics against the reference as every case. */
static void one_channel_stem_runs_on_vector_kernels(void **state) {
  (void)state;
  static const group_case_t stem = {{4, 1, 28, 28, 16, 3, 1, 1, 0, 0}, 1};
  const dnnl_cpu_isa_t isa = dnnl_get_effective_cpu_isa();
  px_ops_t *ops = new_ops();
  px_tensor_t xs, ys;
  input_spec(ops, 0, stem.c.n, stem.c.c, stem.c.h, stem.c.w, &xs);
  px_conv2d_params_t p = params_of(&stem.c);
  px_conv2d_t *conv = NULL;
  assert_ok(px_conv2d_create(ops, &xs, &p, &conv));
  px_conv2d_y_spec(conv, &ys);
  const int refs = px__cpu_ops_ref_pds(ops);
  print_message("1 channel, 28x28, %s input -> %s: %d reference primitives (ISA %s)\n",
                px_layout_name(xs.layout), px_layout_name(ys.layout), refs, dnnl_cpu_isa2str(isa));
  if (isa == dnnl_cpu_isa_avx2) assert_int_equal(refs, 0);
  px_conv2d_destroy(conv);
  px_ops_destroy(ops);
  run_group_case(&stem, 800);
}

/* A compact model's narrow layer: a conv reading 2 or 3 plain channels (a
 * 2-channel conv1's output) under a 16-channel blocked output gradient.
 * oneDNN 2.6 has only reference code for its backward data in x's layout
 * (3.5 s a batch of 256 at 32 x 32, 700 times the layer's other kernels, a
 * ResNet-20 of 2-channel blocks trained for hours); the input gradient goes
 * through a layout oneDNN has vector kernels for (aBcd16b on AVX-512) and is
 * converted back (px__conv_dx_fallback). No reference primitive asserted
 * where measured (AVX-512); the numbers against the reference everywhere
 * (run_case). */
static void narrow_inputs_run_backward_data_on_vector_kernels(void **state) {
  (void)state;
  const dnnl_cpu_isa_t isa = dnnl_get_effective_cpu_isa();
  for (int64_t c = 2; c <= 3; c++) {
    px_ops_t *ops = new_ops();
    px_tensor_t xs;
    input_spec(ops, 0, 4, c, 16, 16, &xs);
    const conv_case_t cc = {4, c, 16, 16, 16, 3, 1, 1, 0, 0};
    px_conv2d_params_t p = params_of(&cc);
    px_conv2d_t *conv = NULL;
    assert_ok(px_conv2d_create(ops, &xs, &p, &conv));
    const int refs = px__cpu_ops_ref_pds(ops), refs_d = px__cpu_ops_ref_bwd_d_pds(ops);
    print_message("%lld plain channels: %d reference primitives, %d backward data (ISA %s)\n",
                  (long long)c, refs, refs_d, dnnl_cpu_isa2str(isa));
    if (isa == dnnl_cpu_isa_avx512_core || isa == dnnl_cpu_isa_avx512_core_bf16 ||
        isa == dnnl_cpu_isa_avx512_core_vnni)
      assert_int_equal(refs + refs_d, 0);
    px_conv2d_destroy(conv);
    px_ops_destroy(ops);
    run_case(&cc, 900 + (uint64_t)c);
  }
}

/* L = sum(y .* r) in double, from the backend's forward. */
static double loss_of(px_conv2d_t *conv, px_tensor_t *y, px_tensor_t *x, px_tensor_t *w,
                      px_tensor_t *b, const float *r) {
  assert_ok(px_conv2d_forward(conv, y, x, w, b));
  float *hy = read_host(y);
  double l = 0.0;
  for (size_t i = 0; i < px_tensor_numel(y); i++) l += (double)hy[i] * r[i];
  free(hy);
  return l;
}

/* Central differences of L along every element of host array h (which is
 * copied into t before each evaluation), compared with the analytic g. */
static void check_fd(const char *what, px_conv2d_t *conv, px_tensor_t *t, float *h, const float *g,
                     px_tensor_t *y, px_tensor_t *x, px_tensor_t *w, px_tensor_t *b, const float *r) {
  const float eps = 0.25f; /* the conv is linear: any step is exact up to rounding */
  double worst = 0.0;
  for (size_t i = 0; i < px_tensor_numel(t); i++) {
    float keep = h[i];
    h[i] = keep + eps;
    assert_ok(px_tensor_copy_from_host(t, h, px_tensor_plain_bytes(t)));
    double lp = loss_of(conv, y, x, w, b, r);
    h[i] = keep - eps;
    assert_ok(px_tensor_copy_from_host(t, h, px_tensor_plain_bytes(t)));
    double lm = loss_of(conv, y, x, w, b, r);
    h[i] = keep;
    double fd = (lp - lm) / (2.0 * eps);
    double e = fabs(fd - g[i]) / fmax(1.0, fabs(fd));
    if (e > worst) worst = e;
  }
  assert_ok(px_tensor_copy_from_host(t, h, px_tensor_plain_bytes(t)));
  print_message("%s: finite-difference max relative error %g\n", what, worst);
  if (worst > 1e-3) fail_msg("%s: gradient differs from finite differences (%g)", what, worst);
}

static void gradients_match_finite_differences(void **state) {
  (void)state;
  px_ops_t *ops = new_ops();
  px_test_rng_t rng;
  px_test_rng_seed(&rng, 42);
  const conv_case_t cc = {2, 3, 5, 5, 4, 3, 2, 1, 1, 1}; /* blocked 3-channel input, padded */
  px_tensor_t xs, ys, ws, bs;
  input_spec(ops, cc.blocked, cc.n, cc.c, cc.h, cc.w, &xs);
  px_conv2d_params_t p = params_of(&cc);
  px_conv2d_t *conv = NULL;
  assert_ok(px_conv2d_create(ops, &xs, &p, &conv));
  px_conv2d_y_spec(conv, &ys);
  px_conv2d_w_spec(conv, &ws);
  px_conv2d_b_spec(conv, &bs);
  const size_t ny = px_tensor_numel(&ys);
  float *hx = rand_host(&rng, px_tensor_numel(&xs), 1.0f, 0.0f);
  float *hw = rand_host(&rng, px_tensor_numel(&ws), 1.0f, 0.0f);
  float *hb = rand_host(&rng, px_tensor_numel(&bs), 1.0f, 0.0f), *r = rand_host(&rng, ny, 1.0f, 0.0f);
  px_tensor_t x, y, w, b, dy, dx, dw, db;
  make_tensor(&x, &xs, hx);
  make_tensor(&w, &ws, hw);
  make_tensor(&b, &bs, hb);
  make_tensor(&y, &ys, NULL);
  make_tensor(&dy, &ys, r); /* dL/dy = r */
  make_tensor(&dx, &xs, NULL);
  make_tensor(&dw, &ws, NULL);
  make_tensor(&db, &bs, NULL);
  assert_ok(px_conv2d_backward_data(conv, &dx, &dy, &w));
  assert_ok(px_conv2d_backward_weights(conv, &dw, &db, &x, &dy));
  float *gdx = read_host(&dx), *gdw = read_host(&dw), *gdb = read_host(&db);
  check_fd("dx", conv, &x, hx, gdx, &y, &x, &w, &b, r);
  check_fd("dw", conv, &w, hw, gdw, &y, &x, &w, &b, r);
  check_fd("db", conv, &b, hb, gdb, &y, &x, &w, &b, r);
  free(hx); free(hw); free(hb); free(r); free(gdx); free(gdw); free(gdb);
  px_tensor_t *all[] = {&x, &y, &w, &b, &dy, &dx, &dw, &db};
  for (size_t i = 0; i < sizeof all / sizeof *all; i++) px_tensor_release(all[i]);
  px_conv2d_destroy(conv);
  px_ops_destroy(ops);
}

/* OpenMP's thread count as oneDNN will read it for the next primitive. */
static int omp_threads(void) {
  int (*get)(void) = (int (*)(void))dlsym(RTLD_DEFAULT, "omp_get_max_threads");
  assert_non_null(get);
  return get();
}

/* Weights under PX__SERIAL_BYTES are converted on the calling thread alone:
 * the context's two threads must be back for the convolution itself and
 * every op after it, whichever path each conversion took. */
static void serial_weight_conversions_keep_the_thread_count(void **state) {
  (void)state;
  const conv_case_t small = {2, 16, 8, 8, 16, 3, 1, 1, 0, 1}, large = cases[7];
  const conv_case_t *cc[2] = {&small, &large};
  px_ops_t *ops = new_ops();
  for (int i = 0; i < 2; i++) {
    px_tensor_t xs, ys, ws;
    input_spec(ops, cc[i]->blocked, cc[i]->n, cc[i]->c, cc[i]->h, cc[i]->w, &xs);
    px_conv2d_params_t p = params_of(cc[i]);
    px_conv2d_t *conv = NULL;
    assert_ok(px_conv2d_create(ops, &xs, &p, &conv));
    px_conv2d_y_spec(conv, &ys);
    px_conv2d_w_spec(conv, &ws);
    px_tensor_t x, y, w, dy, dx, dw;
    make_tensor(&x, &xs, NULL);
    make_tensor(&w, &ws, NULL);
    make_tensor(&y, &ys, NULL);
    make_tensor(&dy, &ys, NULL);
    make_tensor(&dx, &xs, NULL);
    make_tensor(&dw, &ws, NULL);
    assert_ok(px_conv2d_forward(conv, &y, &x, &w, NULL));
    assert_int_equal(omp_threads(), 2);
    assert_ok(px_conv2d_backward_data(conv, &dx, &dy, &w));
    assert_int_equal(omp_threads(), 2);
    assert_ok(px_conv2d_backward_weights(conv, &dw, NULL, &x, &dy));
    assert_int_equal(omp_threads(), 2);
    px_tensor_t *all[] = {&x, &y, &w, &dy, &dx, &dw};
    for (size_t k = 0; k < sizeof all / sizeof *all; k++) px_tensor_release(all[k]);
    px_conv2d_destroy(conv);
  }
  px_ops_destroy(ops);
}

/* Which convolutions go to oneDNN's Winograd kernels (px__conv_wino): on a
 * CPU with AVX-512, forward and backward data from 32 channels in and out,
 * backward weights from 64, 3x3 stride 1 only; none with PX_CPU_WINOGRAD=0,
 * nor where oneDNN 2.6 has no f32 Winograd (without AVX-512, or on an AMD
 * processor); a value other than 0 or 1 is refused. The results against the reference:
 * cases 8 to 10 of run_case. */
static int wino_count(int64_t c, int32_t c_out, int32_t stride) {
  px_ops_t *ops = new_ops();
  px_tensor_t xs;
  input_spec(ops, 1, 2, c, 8, 8, &xs);
  px_conv2d_params_t p = {.c_out = c_out, .kh = 3, .kw = 3, .stride_h = stride,
                          .stride_w = stride, .pad_h = 1, .pad_w = 1};
  px_conv2d_t *conv = NULL;
  assert_ok(px_conv2d_create(ops, &xs, &p, &conv));
  int n = px__cpu_ops_wino_pds(ops);
  px_conv2d_destroy(conv);
  px_ops_destroy(ops);
  return n;
}

/* Whether oneDNN itself has a Winograd forward kernel on this CPU for the
 * input wino_count(64, 64, 1) makes, in the layout the engine gives it: its
 * jit_wino_4x3 needs AVX-512 and a blocked layout (on the Zen 5 VM,
 * 2026-11-30, the engine's maps are channels-last there and none is had). */
static int dnnl_has_winograd(void) {
  px_ops_t *ops = new_ops();
  px_tensor_t xs;
  input_spec(ops, 1, 2, 64, 8, 8, &xs);
  dnnl_memory_desc_t x, w, y;
  dnnl_dims_t wd = {64, 64, 3, 3}, st = {1, 1}, pad = {1, 1};
  dnnl_convolution_desc_t cd;
  dnnl_primitive_desc_t pd = NULL;
  int ok = px__cpu_md_of(ops, &xs, &x) == PX_OK &&
           dnnl_memory_desc_init_by_tag(&w, 4, wd, dnnl_f32, dnnl_format_tag_any) == dnnl_success &&
           dnnl_memory_desc_init_by_tag(&y, 4, x.dims, dnnl_f32, dnnl_format_tag_any) ==
               dnnl_success &&
           dnnl_convolution_forward_desc_init(&cd, dnnl_forward_training,
                                              dnnl_convolution_winograd, &x, &w, NULL, &y, st,
                                              pad, pad) == dnnl_success &&
           dnnl_primitive_desc_create(&pd, &cd, NULL, ops->engine, NULL) == dnnl_success;
  if (pd) dnnl_primitive_desc_destroy(pd);
  px_ops_destroy(ops);
  return ok;
}

static void winograd_where_it_is_faster(void **state) {
  (void)state;
  const dnnl_cpu_isa_t isa = dnnl_get_effective_cpu_isa();
  const char *env = getenv("PX_CPU_WINOGRAD"); /* =0 by hand: the direct kernels' errors */
  const int avx512 = (isa & dnnl_cpu_isa_avx512_core) == dnnl_cpu_isa_avx512_core;
  const int has = avx512 && dnnl_has_winograd();
  const int on = has && !(env && !strcmp(env, "0"));
  if (!has) print_message("%s: oneDNN has no Winograd kernels here, none expected\n",
                          dnnl_cpu_isa2str(isa));
  assert_int_equal(wino_count(64, 64, 1), on ? 3 : 0);
  assert_int_equal(wino_count(32, 32, 1), on ? 2 : 0);
  assert_int_equal(wino_count(64, 32, 1), on ? 2 : 0);
  assert_int_equal(wino_count(16, 16, 1), 0);
  assert_int_equal(wino_count(64, 64, 2), 0);
  setenv("PX_CPU_WINOGRAD", "0", 1);
  assert_int_equal(wino_count(64, 64, 1), 0);
  setenv("PX_CPU_WINOGRAD", "no", 1); /* neither 0 nor 1: refused, naming the variable */
  px_ops_t *ops = NULL;
  assert_int_equal(px_ops_create(px_device_cpu(), 2, &ops), PX_ERR_INVALID);
  assert_null(ops);
  assert_non_null(strstr(px_last_error(), "PX_CPU_WINOGRAD='no'"));
  if (env) setenv("PX_CPU_WINOGRAD", "0", 1);
  else unsetenv("PX_CPU_WINOGRAD");
}

/* stderr's bytes since mark (a temporary file stands in for it). */
static size_t stderr_since(FILE *f, long mark, char *buf, size_t cap) {
  fflush(stderr);
  fseek(f, mark, SEEK_SET);
  size_t n = fread(buf, 1, cap - 1, f);
  buf[n] = '\0';
  return n;
}

/* A convolution on oneDNN's reference code (case 3's odd widths in blocked
 * layouts, kept there with PX_CPU_CHANNELS_LAST=0) is counted when created
 * but warned of only when it runs: a model built only to be exported or
 * counted, as pxctl's summary does, says nothing. */
static void reference_code_is_warned_of_when_it_runs(void **state) {
  (void)state;
  const conv_case_t *cc = &cases[3];
  FILE *f = tmpfile();
  assert_non_null(f);
  fflush(stderr);
  const px_log_level_t level = px_log_get_level(); /* ctest runs at PX_LOG_LEVEL=error */
  px_log_set_level(PX_LOG_WARN);
  int saved = dup(2);
  assert_true(saved >= 0 && dup2(fileno(f), 2) == 2);
  setenv("PX_CPU_CHANNELS_LAST", "0", 1);
  px_ops_t *ops = new_ops();
  unsetenv("PX_CPU_CHANNELS_LAST");
  px_tensor_t xs, ys, ws, bs;
  if (!input_spec(ops, cc->blocked, cc->n, cc->c, cc->h, cc->w, &xs)) {
    dup2(saved, 2);
    close(saved);
    fclose(f);
    px_log_set_level(level);
    px_ops_destroy(ops);
    print_message("no blocked layouts on this CPU: no reference code to warn of\n");
    skip();
  }
  px_conv2d_params_t p = params_of(cc);
  px_conv2d_t *conv = NULL;
  assert_ok(px_conv2d_create(ops, &xs, &p, &conv));
  char buf[4096];
  size_t created = stderr_since(f, 0, buf, sizeof buf);
  const int refs = px__cpu_ops_ref_pds(ops);
  px_conv2d_y_spec(conv, &ys);
  px_conv2d_w_spec(conv, &ws);
  px_conv2d_b_spec(conv, &bs);
  px_tensor_t x, y, w, b;
  make_tensor(&x, &xs, NULL);
  make_tensor(&y, &ys, NULL);
  make_tensor(&w, &ws, NULL);
  make_tensor(&b, &bs, NULL);
  assert_ok(px_conv2d_forward(conv, &y, &x, &w, &b));
  assert_ok(px_conv2d_forward(conv, &y, &x, &w, &b));
  stderr_since(f, (long)created, buf, sizeof buf);
  dup2(saved, 2);
  close(saved);
  fclose(f);
  px_log_set_level(level);
  print_message("reference primitives %d; stderr after the runs: %s", refs, buf);
  assert_true(refs > 0);
  assert_int_equal(created, 0);
  const char *hit = strstr(buf, "reference code");
  assert_non_null(hit);
  assert_null(strstr(hit + 1, "reference code")); /* once per context */
  px_tensor_t *all[] = {&x, &y, &w, &b};
  for (size_t i = 0; i < sizeof all / sizeof *all; i++) px_tensor_release(all[i]);
  px_conv2d_destroy(conv);
  px_ops_destroy(ops);
}

static void mismatched_tensors_are_refused(void **state) {
  (void)state;
  px_ops_t *ops = new_ops();
  px_tensor_t xs, ys, ws, wrong;
  const int blocked = input_spec(ops, 1, 2, 16, 8, 8, &xs);
  px_conv2d_params_t p = {.c_out = 16, .kh = 3, .kw = 3, .stride_h = 1, .stride_w = 1, .pad_h = 1,
                          .pad_w = 1};
  px_conv2d_t *conv = NULL;
  assert_ok(px_conv2d_create(ops, &xs, &p, &conv));
  px_conv2d_y_spec(conv, &ys);
  px_conv2d_w_spec(conv, &ws);
  px_tensor_t x, y, w, xp;
  make_tensor(&x, &xs, NULL);
  make_tensor(&y, &ys, NULL);
  make_tensor(&w, &ws, NULL);
  /* same shape, plain layout: not what the op was created for */
  assert_ok(px_tensor_init4(&wrong, px_device_cpu(), 2, 16, 8, 8));
  make_tensor(&xp, &wrong, NULL);
  if (blocked) assert_int_equal(px_conv2d_forward(conv, &y, &xp, &w, NULL), PX_ERR_INVALID);
  assert_int_equal(px_conv2d_forward(conv, &y, &x, &w, &w), PX_ERR_INVALID); /* bias on no-bias conv */
  assert_ok(px_conv2d_forward(conv, &y, &x, &w, NULL));
  /* bad parameters */
  px_conv2d_t *bad = NULL;
  px_conv2d_params_t q = p;
  q.stride_h = 0;
  assert_int_equal(px_conv2d_create(ops, &xs, &q, &bad), PX_ERR_INVALID);
  q = p;
  q.kh = 11;
  q.pad_h = 0;
  assert_int_equal(px_conv2d_create(ops, &xs, &q, &bad), PX_ERR_INVALID);
  assert_null(bad);
  px_tensor_release(&x);
  px_tensor_release(&y);
  px_tensor_release(&w);
  px_tensor_release(&xp);
  px_conv2d_destroy(conv);
  px_ops_destroy(ops);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(forward_and_backward_match_reference),
      cmocka_unit_test(windows_match_reference),
      cmocka_unit_test(grouped_and_depthwise_match_reference),
      cmocka_unit_test(channels_last_models_match_reference),
      cmocka_unit_test(grouped_convolutions_run_on_vector_kernels),
      cmocka_unit_test(gradients_match_finite_differences),
      cmocka_unit_test(serial_weight_conversions_keep_the_thread_count),
      cmocka_unit_test(winograd_where_it_is_faster),
      cmocka_unit_test(one_channel_stem_runs_on_vector_kernels),
      cmocka_unit_test(narrow_inputs_run_backward_data_on_vector_kernels),
      cmocka_unit_test(reference_code_is_warned_of_when_it_runs),
      cmocka_unit_test(mismatched_tensors_are_refused),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
