/* Pooling on the oneDNN backend: max (with its arg-max workspace), average
 * (padding counted and not) and global average, forward and backward
 * against the reference on plain and blocked inputs with odd sizes and
 * overlapping windows, and the input gradient against central finite
 * differences (max pooling on inputs with distinct values, so that no step
 * moves an arg-max). */
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

#include "ops_test_util.h"

/* Distinct values in random order, 0.05 apart: no ties in any window. */
static float *distinct_host(px_test_rng_t *rng, size_t n) {
  float *p = malloc(n * sizeof *p);
  assert_non_null(p);
  for (size_t i = 0; i < n; i++) p[i] = 0.05f * (float)i - 0.025f * (float)n;
  for (size_t i = n; i > 1; i--) {
    size_t j = (size_t)(px_test_rng_u64(rng) % i);
    float t = p[i - 1];
    p[i - 1] = p[j];
    p[j] = t;
  }
  return p;
}

typedef struct {
  int64_t n, c, h, w;
  px_pool_mode_t mode;
  int32_t k, stride, pad;
  int global; /* global average pooling (k, stride, pad unused) */
  int blocked;
  int fd;     /* also check against finite differences */
} pool_case_t;

static const pool_case_t cases[] = {
    {2, 16, 8, 8, PX_POOL_MAX, 2, 2, 0, 0, 1, 0},
    {2, 3, 9, 9, PX_POOL_MAX, 3, 2, 1, 0, 0, 0},            /* ResNet-18 stem pooling, plain */
    {2, 5, 7, 7, PX_POOL_MAX, 3, 2, 1, 0, 1, 1},            /* padded channels, overlapping */
    {2, 16, 6, 6, PX_POOL_AVG, 2, 2, 0, 0, 1, 0},
    {2, 3, 5, 5, PX_POOL_AVG, 3, 1, 1, 0, 0, 1},            /* padding counted */
    {2, 5, 7, 7, PX_POOL_AVG_EXCLUDE_PAD, 3, 2, 1, 0, 1, 1}, /* padding not counted */
    {4, 32, 4, 4, PX_POOL_AVG, 0, 0, 0, 1, 1, 0},           /* global, ResNet head */
    {2, 5, 3, 5, PX_POOL_AVG, 0, 0, 0, 1, 0, 1},            /* global, plain, non-square */
};

static double loss_of(px_pool2d_t *pool, px_tensor_t *y, px_tensor_t *ws, px_tensor_t *x,
                      const float *r) {
  assert_ok(px_pool2d_forward(pool, y, ws->nbytes ? ws : NULL, x));
  float *hy = read_host(y);
  double l = 0.0;
  for (size_t i = 0; i < px_tensor_numel(y); i++) l += (double)hy[i] * r[i];
  free(hy);
  return l;
}

/* pc's shape and layout with pc's window or, when gp is given, gp's. */
static void run_case(const pool_case_t *pc, const px_pool2d_params_t *gp, uint64_t seed) {
  px_ops_t *ops = new_ops();
  px_test_rng_t rng;
  px_test_rng_seed(&rng, seed);
  px_pool2d_params_t p = {pc->mode, pc->k, pc->k, pc->stride, pc->stride, pc->pad, pc->pad,
                          0, 0, 0, 0, 0};
  if (gp) p = *gp;
  px__ref_pool_t s = {.mode = p.mode, .n = pc->n, .c = pc->c, .h = pc->h, .w = pc->w,
                      .kh = pc->global ? pc->h : p.kh, .kw = pc->global ? pc->w : p.kw,
                      .sh = pc->global ? 1 : p.stride_h, .sw = pc->global ? 1 : p.stride_w,
                      .ph = pc->global ? 0 : p.pad_h, .pw = pc->global ? 0 : p.pad_w,
                      .xb = p.pad_h_extra, .xr = p.pad_w_extra, .dilh = p.dil_h,
                      .dilw = p.dil_w, .ceil = p.ceil_mode};
  px__ref_pool_shape(&s);

  px_tensor_t xs, ys, wss;
  input_spec(ops, pc->blocked, pc->n, pc->c, pc->h, pc->w, &xs);
  px_pool2d_t *pool = NULL;
  if (pc->global) {
    assert_ok(px_global_avgpool_create(ops, &xs, &pool));
  } else {
    assert_ok(px_pool2d_create(ops, &xs, &p, &pool));
  }
  px_pool2d_y_spec(pool, &ys);
  px_pool2d_ws_spec(pool, &wss);
  assert_int_equal(ys.dims[2], s.oh);
  assert_int_equal(ys.dims[3], s.ow);
  assert_true(p.mode == PX_POOL_MAX ? wss.nbytes > 0 : wss.nbytes == 0);

  const size_t nx = px_tensor_numel(&xs), ny = px_tensor_numel(&ys);
  float *hx = distinct_host(&rng, nx), *hdy = rand_host(&rng, ny, 1.0f, 0.0f);
  px_tensor_t x, y, ws, dy, dx;
  make_tensor(&x, &xs, hx);
  make_tensor(&y, &ys, NULL);
  make_tensor(&ws, &wss, NULL);
  make_tensor(&dy, &ys, hdy);
  make_tensor(&dx, &xs, NULL);
  px_tensor_t *wsp = wss.nbytes ? &ws : NULL;

  float *ry = malloc(ny * 4), *rdx = malloc(nx * 4);
  px__ref_pool2d_forward(ry, hx, &s);
  px__ref_pool2d_backward(rdx, hdy, hx, &s);
  assert_ok(px_pool2d_forward(pool, &y, wsp, &x));
  assert_ok(px_pool2d_backward(pool, &dx, &dy, wsp));
  float *gy = read_host(&y), *gdx = read_host(&dx);
  expect_close("forward", gy, ry, ny, 1e-5);
  expect_close("backward", gdx, rdx, nx, 1e-5);

  if (pc->fd) {
    const double eps = 1e-2; /* < half the gap between distinct inputs */
    double worst = 0.0;
    for (size_t i = 0; i < nx; i++) {
      float keep = hx[i];
      hx[i] = keep + (float)eps;
      assert_ok(px_tensor_copy_from_host(&x, hx, nx * 4));
      double lp = loss_of(pool, &y, &ws, &x, hdy);
      hx[i] = keep - (float)eps;
      assert_ok(px_tensor_copy_from_host(&x, hx, nx * 4));
      double lm = loss_of(pool, &y, &ws, &x, hdy);
      hx[i] = keep;
      double fd = (lp - lm) / (2 * eps);
      double e = fabs(fd - gdx[i]) / fmax(1.0, fabs(fd));
      if (e > worst) worst = e;
    }
    print_message("  dx finite-difference max relative error %g\n", worst);
    if (worst > 2e-3) fail_msg("pooling gradient differs from finite differences (%g)", worst);
  }

  free(hx); free(hdy); free(ry); free(rdx); free(gy); free(gdx);
  px_tensor_t *all[] = {&x, &y, &ws, &dy, &dx};
  for (size_t i = 0; i < sizeof all / sizeof *all; i++) px_tensor_release(all[i]);
  px_pool2d_destroy(pool);
  px_ops_destroy(ops);
}

static void forward_and_backward_match_reference_and_fd(void **state) {
  (void)state;
  static const char *modes[] = {"max", "avg", "avg-exclude-pad"};
  for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
    const pool_case_t *pc = &cases[i];
    print_message("case %zu: %s%s pooling of [%lld,%lld,%lld,%lld] %s, kernel %d stride %d pad %d\n",
                  i, pc->global ? "global " : "", modes[pc->mode], (long long)pc->n,
                  (long long)pc->c, (long long)pc->h, (long long)pc->w,
                  pc->blocked ? "blocked" : "plain", pc->k, pc->stride, pc->pad);
    run_case(pc, NULL, 300 + i);
  }
}

/* Windows beyond the square, symmetric ones: non-square
 * kernels and strides, asymmetric padding, dilation, PyTorch's ceil_mode
 * (squeezenet's 3x3 stride 2 on 14 and 13, googlenet's stride-1 3x3 pad
 * 1), average pooling with ceil_mode counting its padding where no window
 * runs past it, and not counting it where one does; plain and blocked. */
static void windows_match_reference_and_fd(void **state) {
  (void)state;
  static const struct {
    pool_case_t shape; /* n, c, h, w, blocked, fd (the window below) */
    px_pool2d_params_t p;
  } wc[] = {
      {{2, 16, 14, 14, PX_POOL_MAX, 0, 0, 0, 0, 1, 0},
       {.mode = PX_POOL_MAX, .kh = 3, .kw = 3, .stride_h = 2, .stride_w = 2, .ceil_mode = 1}},
      {{2, 5, 13, 9, PX_POOL_MAX, 0, 0, 0, 0, 0, 1},
       {.mode = PX_POOL_MAX, .kh = 3, .kw = 2, .stride_h = 2, .stride_w = 3, .ceil_mode = 1}},
      {{2, 16, 7, 7, PX_POOL_MAX, 0, 0, 0, 0, 1, 1},
       {.mode = PX_POOL_MAX, .kh = 3, .kw = 3, .stride_h = 1, .stride_w = 1, .pad_h = 1,
        .pad_w = 1, .ceil_mode = 1}},
      {{2, 5, 9, 8, PX_POOL_MAX, 0, 0, 0, 0, 0, 1},
       {.mode = PX_POOL_MAX, .kh = 3, .kw = 3, .stride_h = 1, .stride_w = 2, .pad_h = 0,
        .pad_w = 1, .pad_h_extra = 1, .pad_w_extra = -1, .dil_h = 2, .dil_w = 1}},
      {{2, 5, 9, 9, PX_POOL_AVG, 0, 0, 0, 0, 0, 1},
       {.mode = PX_POOL_AVG, .kh = 3, .kw = 3, .stride_h = 2, .stride_w = 2, .pad_h = 1,
        .pad_w = 1, .ceil_mode = 1}},
      {{2, 16, 7, 7, PX_POOL_AVG, 0, 0, 0, 0, 1, 1},
       {.mode = PX_POOL_AVG, .kh = 2, .kw = 2, .stride_h = 2, .stride_w = 2, .ceil_mode = 1}},
      {{2, 5, 8, 7, PX_POOL_AVG_EXCLUDE_PAD, 0, 0, 0, 0, 1, 1},
       {.mode = PX_POOL_AVG_EXCLUDE_PAD, .kh = 3, .kw = 3, .stride_h = 2, .stride_w = 2,
        .pad_h = 1, .pad_w = 1, .ceil_mode = 1}},
      {{2, 5, 6, 7, PX_POOL_AVG, 0, 0, 0, 0, 0, 1},
       {.mode = PX_POOL_AVG, .kh = 2, .kw = 3, .stride_h = 1, .stride_w = 2, .pad_h = 0,
        .pad_w = 1, .pad_h_extra = 1, .pad_w_extra = 0}},
  };
  for (size_t i = 0; i < sizeof wc / sizeof *wc; i++) {
    const px_pool2d_params_t *p = &wc[i].p;
    print_message("window %zu: mode %d on %lldx%lld, kernel %dx%d stride %dx%d pad %d,%d "
                  "(+%d,%+d) dilation %d ceil %d\n", i, (int)p->mode, (long long)wc[i].shape.h,
                  (long long)wc[i].shape.w, p->kh, p->kw, p->stride_h, p->stride_w, p->pad_h,
                  p->pad_w, p->pad_h_extra, p->pad_w_extra, p->dil_h, p->ceil_mode);
    run_case(&wc[i].shape, p, 400 + i);
  }
}

static void bad_parameters_are_refused(void **state) {
  (void)state;
  px_ops_t *ops = new_ops();
  px_tensor_t xs;
  assert_ok(px_tensor_init4(&xs, px_device_cpu(), 1, 3, 4, 4));
  px_pool2d_t *pool = NULL;
  px_pool2d_params_t p = {PX_POOL_MAX, 5, 5, 1, 1, 0, 0, 0, 0, 0, 0, 0}; /* kernel larger than the input */
  assert_int_equal(px_pool2d_create(ops, &xs, &p, &pool), PX_ERR_INVALID);
  p = (px_pool2d_params_t){(px_pool_mode_t)7, 2, 2, 2, 2, 0, 0, 0, 0, 0, 0, 0};
  assert_int_equal(px_pool2d_create(ops, &xs, &p, &pool), PX_ERR_INVALID);
  p = (px_pool2d_params_t){PX_POOL_MAX, 2, 2, 2, 2, 2, 0, 0, 0, 0, 0, 0}; /* padding as large as the kernel */
  assert_int_equal(px_pool2d_create(ops, &xs, &p, &pool), PX_ERR_INVALID);
  /* an average counting its padding whose ceil_mode window runs past it: not oneDNN's */
  p = (px_pool2d_params_t){.mode = PX_POOL_AVG, .kh = 3, .kw = 3, .stride_h = 2, .stride_w = 2,
                           .pad_h = 1, .pad_w = 1, .ceil_mode = 1};
  assert_int_equal(px_pool2d_create(ops, &xs, &p, &pool), PX_ERR_INVALID);
  p = (px_pool2d_params_t){.mode = PX_POOL_AVG, .kh = 2, .kw = 2, .stride_h = 1, .stride_w = 1,
                           .dil_h = 2}; /* a dilated average */
  assert_int_equal(px_pool2d_create(ops, &xs, &p, &pool), PX_ERR_INVALID);
  assert_null(pool);
  px_ops_destroy(ops);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(forward_and_backward_match_reference_and_fd),
      cmocka_unit_test(windows_match_reference_and_fd),
      cmocka_unit_test(bad_parameters_are_refused),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
