/* The CUDA engine's activation formats against its plain f32 NCHW path:
 * channels-last (NHWC) f32 and bf16 activations (px_ops_act_format).
 *
 * CPU half (runs everywhere): the plain C references this file compares
 * with: bf16 round-to-nearest-even of f32 and the NCHW <-> NHWC index maps,
 * checked on values whose answers are known.
 * GPU half (skips without a GPU): on random data, the format conversion
 * (reorder) is exact for f32 and equals the reference rounding for bf16,
 * and survives the host round trip of px_tensor_copy_to/from_host; the
 * convolution (forward, backward data, backward weights, which converts the
 * OIHW weights at its one conversion point), batch norm with ReLU, residual
 * add and global average pooling in NHWC f32 match the NCHW ops to f32
 * tolerances (TF32 off), and in bf16 to bf16 tolerances; a ResNet-20 step in
 * NHWC f32 gives the NCHW step's loss and weight gradients, a bf16 step the
 * same loss to bf16 accuracy, and bf16 training lowers the loss. */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "prunex/cuda.h"
#include "prunex/data.h"
#include "prunex/nn.h"
#include "prunex/ops.h"
#include "prunex/ops_internal.h"
#include "px_test_util.h"

#include "ops_test_util.h"

#define REQUIRE_GPU()                                           \
  do {                                                          \
    if (!px_test_gpu_ready("GPU activation-format checks")) skip(); \
  } while (0)

/* ---- plain references ----------------------------------------------------------- */

/* f32 -> bf16 bits, round to nearest even (NaN kept quiet). */
static uint16_t ref_bf16(float f) {
  uint32_t u;
  memcpy(&u, &f, 4);
  if ((u & 0x7fffffffu) > 0x7f800000u) return (uint16_t)((u >> 16) | 0x40);
  u += 0x7fffu + ((u >> 16) & 1u);
  return (uint16_t)(u >> 16);
}

static float ref_bf16_value(float f) {
  uint32_t u = (uint32_t)ref_bf16(f) << 16;
  float r;
  memcpy(&r, &u, 4);
  return r;
}

static size_t nchw_index(const int64_t *d, int64_t n, int64_t c, int64_t h, int64_t w) {
  return (size_t)(((n * d[1] + c) * d[2] + h) * d[3] + w);
}

static size_t nhwc_index(const int64_t *d, int64_t n, int64_t c, int64_t h, int64_t w) {
  return (size_t)(((n * d[2] + h) * d[3] + w) * d[1] + c);
}

static void bf16_reference_rounds_to_nearest_even(void **state) {
  (void)state;
  assert_int_equal(ref_bf16(1.0f), 0x3f80);
  assert_true(ref_bf16_value(1.0f + 0x1p-8f) == 1.0f);                 /* a tie: to even */
  assert_true(ref_bf16_value(1.0f + 0x1p-7f + 0x1p-8f) == 1.0f + 0x1p-6f); /* a tie: up to even */
  assert_true(ref_bf16_value(1.0f + 0x1p-8f + 0x1p-12f) == 1.0f + 0x1p-7f); /* above half */
  assert_true(ref_bf16_value(-2.5f) == -2.5f);
  float nan = NAN;
  assert_true(isnan(ref_bf16_value(nan)));
  /* the relative error of any rounding is at most half an ulp: 2^-8 */
  px_test_rng_t rng;
  px_test_rng_seed(&rng, 3);
  for (int i = 0; i < 10000; i++) {
    float v = (float)(px_test_rng_normal(&rng) * 100.0);
    if (v == 0.0f) continue;
    assert_true(fabsf(ref_bf16_value(v) - v) <= fabsf(v) * 0x1p-8f);
  }
}

static void nchw_and_nhwc_index_maps_are_inverse_permutations(void **state) {
  (void)state;
  const int64_t d[4] = {2, 3, 4, 5};
  const size_t total = 2 * 3 * 4 * 5;
  unsigned char *seen = calloc(total, 1);
  assert_non_null(seen);
  for (int64_t n = 0; n < d[0]; n++)
    for (int64_t c = 0; c < d[1]; c++)
      for (int64_t h = 0; h < d[2]; h++)
        for (int64_t w = 0; w < d[3]; w++) {
          size_t j = nhwc_index(d, n, c, h, w);
          assert_true(j < total);
          seen[j]++;
        }
  for (size_t i = 0; i < total; i++) assert_int_equal(seen[i], 1);
  /* the channel is the fastest index of NHWC */
  assert_int_equal(nhwc_index(d, 0, 1, 0, 0), 1);
  assert_int_equal(nhwc_index(d, 0, 0, 0, 1), 3);
  assert_int_equal(nchw_index(d, 0, 0, 0, 1), 1);
  free(seen);
}

/* ---- GPU helpers ------------------------------------------------------------------- */

static px_ops_t *gpu_ops(void) {
  px_ops_t *ops = NULL;
  assert_ok(px_ops_create(px_device_cuda(0), 0, &ops));
  assert_ok(px_ops_set_tf32(ops, 0));
  return ops;
}

/* The spec of a plain f32 activation, and of the same in a format. */
static px_tensor_t plain4(int64_t n, int64_t c, int64_t h, int64_t w) {
  px_tensor_t s;
  assert_ok(px_tensor_init4(&s, px_device_cuda(0), n, c, h, w));
  return s;
}

static px_tensor_t format_of(px_ops_t *ops, const px_tensor_t *plain, px_precision_t prec) {
  px_tensor_t s = *plain;
  s.data = NULL;
  s.flags = 0;
  assert_ok(px_ops_act_format(ops, prec, &s));
  assert_non_null(s.layout); /* CUDA computes channels-last */
  return s;
}

/* max |a - b| / max |b| */
static double rel_to_max(const float *a, const float *b, size_t n) {
  double num = 0, den = 1e-30;
  for (size_t i = 0; i < n; i++) {
    double e = fabs((double)a[i] - b[i]);
    if (e > num) num = e;
    if (fabs((double)b[i]) > den) den = fabs((double)b[i]);
  }
  return num / den;
}

static void expect_rel(const char *what, const float *got, const float *want, size_t n,
                       double tol) {
  double e = rel_to_max(got, want, n);
  printf("%s: max error %.3g of the largest value\n", what, e);
  if (!(e <= tol)) fail_msg("%s: error %g > %g", what, e, tol);
}

/* ---- format conversion ------------------------------------------------------------- */

static void conversion_is_exact_in_f32_and_rounds_to_nearest_in_bf16(void **state) {
  (void)state;
  REQUIRE_GPU();
  px_ops_t *ops = gpu_ops();
  px_tensor_t p = plain4(3, 5, 4, 6);
  const size_t n = px_tensor_numel(&p);
  px_test_rng_t rng;
  px_test_rng_seed(&rng, 11);
  float *h = rand_host(&rng, n, 4.0f, -2.0f);
  for (int prec = 0; prec < 2; prec++) {
    px_tensor_t f = format_of(ops, &p, (px_precision_t)prec), t;
    assert_int_equal(f.dtype, prec ? PX_DTYPE_BF16 : PX_DTYPE_F32);
    from_plain_host(ops, &t, &f, h);
    /* px_tensor_copy_to_host gives plain NCHW order (of the tensor's dtype) */
    void *raw = malloc(f.nbytes);
    assert_non_null(raw);
    assert_ok(px_ops_sync(ops));
    assert_ok(px_tensor_copy_to_host(&t, raw, px_tensor_plain_bytes(&t))); /* layout to plain */
    float *back = to_plain_host(ops, &t);
    for (int64_t b = 0; b < p.dims[0]; b++)
      for (int64_t c = 0; c < p.dims[1]; c++)
        for (int64_t y = 0; y < p.dims[2]; y++)
          for (int64_t x = 0; x < p.dims[3]; x++) {
            size_t i = nchw_index(p.dims, b, c, y, x);
            float want = prec ? ref_bf16_value(h[i]) : h[i];
            assert_true(back[i] == want);
            if (prec)
              assert_int_equal(((uint16_t *)raw)[i], ref_bf16(h[i]));
            else
              assert_true(((float *)raw)[i] == h[i]);
          }
    /* and px_tensor_copy_from_host converts plain order into the layout */
    assert_ok(px_tensor_copy_from_host(&t, raw, px_tensor_plain_bytes(&t)));
    float *again = to_plain_host(ops, &t);
    assert_memory_equal(again, back, n * sizeof(float));
    free(again);
    free(back);
    free(raw);
    px_tensor_release(&t);
  }
  free(h);
  px_ops_destroy(ops);
}

/* ---- ops in each format against plain NCHW f32 ------------------------------------ */

typedef struct {
  float *y, *dx, *dw;
} conv_out_t;

static conv_out_t run_conv(px_ops_t *ops, const px_tensor_t *x_spec, const float *hx,
                           const float *hw, const float *hdy, int stride, int k) {
  px_conv2d_params_t cp = {24, k, k, stride, stride, k / 2, k / 2, 0, 1, 0, 0, 0, 0};
  px_conv2d_t *conv = NULL;
  assert_ok(px_conv2d_create(ops, x_spec, &cp, &conv));
  px_tensor_t ys, ws, x, y, w, dy, dx, dw;
  px_conv2d_y_spec(conv, &ys);
  px_conv2d_w_spec(conv, &ws);
  assert_null(ws.layout); /* the weights stay plain OIHW f32 */
  assert_int_equal(ws.dtype, PX_DTYPE_F32);
  assert_true(ys.layout == NULL || x_spec->layout != NULL);
  if (x_spec->layout) {
    from_plain_host(ops, &x, x_spec, hx);
    from_plain_host(ops, &dy, &ys, hdy);
  } else {
    make_tensor(&x, x_spec, hx);
    make_tensor(&dy, &ys, hdy);
  }
  make_tensor(&w, &ws, hw);
  alloc_like(&y, &ys);
  alloc_like(&dx, x_spec);
  alloc_like(&dw, &ws);
  assert_ok(px_conv2d_forward(conv, &y, &x, &w, NULL));
  assert_ok(px_conv2d_backward_data(conv, &dx, &dy, &w));
  assert_ok(px_conv2d_backward_weights(conv, &dw, NULL, &x, &dy));
  conv_out_t o = {to_plain_host(ops, &y), to_plain_host(ops, &dx), read_host(&dw)};
  px_tensor_t *all[] = {&x, &y, &w, &dy, &dx, &dw};
  for (size_t i = 0; i < sizeof all / sizeof *all; i++) px_tensor_release(all[i]);
  px_conv2d_destroy(conv);
  return o;
}

static void free_conv(conv_out_t *o) {
  free(o->y);
  free(o->dx);
  free(o->dw);
}

static void conv_in_nhwc_matches_nchw_in_f32_and_in_bf16(void **state) {
  (void)state;
  REQUIRE_GPU();
  px_ops_t *ops = gpu_ops();
  const int shapes[][4] = {{3, 1}, {3, 2}, {1, 1}, {1, 2}}; /* kernel, stride */
  for (size_t s = 0; s < sizeof shapes / sizeof *shapes; s++) {
    const int k = shapes[s][0], stride = shapes[s][1];
    px_tensor_t p = plain4(4, 16, 8, 8);
    const int64_t oh = (8 + 2 * (k / 2) - k) / stride + 1;
    px_test_rng_t rng;
    px_test_rng_seed(&rng, 21 + s);
    float *hx = rand_host(&rng, px_tensor_numel(&p), 2.0f, -1.0f);
    float *hw = rand_host(&rng, (size_t)24 * 16 * k * k, 0.5f, -0.25f);
    float *hdy = rand_host(&rng, (size_t)4 * 24 * oh * oh, 2.0f, -1.0f);
    conv_out_t ref = run_conv(ops, &p, hx, hw, hdy, stride, k);
    px_tensor_t f32 = format_of(ops, &p, PX_PRECISION_FP32);
    conv_out_t a = run_conv(ops, &f32, hx, hw, hdy, stride, k);
    expect_rel("conv nhwc f32 y", a.y, ref.y, (size_t)4 * 24 * oh * oh, 1e-5);
    expect_rel("conv nhwc f32 dx", a.dx, ref.dx, px_tensor_numel(&p), 1e-5);
    expect_rel("conv nhwc f32 dw", a.dw, ref.dw, (size_t)24 * 16 * k * k, 1e-5);
    px_tensor_t bf = format_of(ops, &p, PX_PRECISION_BF16);
    conv_out_t b = run_conv(ops, &bf, hx, hw, hdy, stride, k);
    /* inputs rounded to 8 bits of mantissa, outputs too, sums in f32 */
    expect_rel("conv nhwc bf16 y", b.y, ref.y, (size_t)4 * 24 * oh * oh, 2e-2);
    expect_rel("conv nhwc bf16 dx", b.dx, ref.dx, px_tensor_numel(&p), 2e-2);
    expect_rel("conv nhwc bf16 dw", b.dw, ref.dw, (size_t)24 * 16 * k * k, 2e-2);
    free_conv(&ref);
    free_conv(&a);
    free_conv(&b);
    free(hx);
    free(hw);
    free(hdy);
  }
  px_ops_destroy(ops);
}

typedef struct {
  float *y, *dx, *dscale, *dshift, *rm, *infer, *add, *gap, *dgap;
} bn_out_t;

/* BN (ReLU fused) train forward + backward + inference, then add(y, y)
 * with ReLU and global average pooling of y with its backward. */
static bn_out_t run_bn(px_ops_t *ops, const px_tensor_t *xs, const float *hx, const float *hdy,
                       const float *hg, int relu) {
  const int64_t c = xs->dims[1];
  px_batchnorm_params_t bp = {1e-5f, 0.1f, relu};
  px_batchnorm_t *bn = NULL;
  assert_ok(px_batchnorm_create(ops, xs, &bp, &bn));
  px_tensor_t ys, cs, wss;
  px_batchnorm_y_spec(bn, &ys);
  px_batchnorm_c_spec(bn, &cs);
  px_batchnorm_ws_spec(bn, &wss);
  assert_true(px_tensor_same_spec(&ys, xs));
  px_tensor_t x, y, dy, dx, ws, mean, var, sc, sh, rm, rv, dsc, dsh, yi;
  if (xs->layout) {
    from_plain_host(ops, &x, xs, hx);
    from_plain_host(ops, &dy, xs, hdy);
  } else {
    make_tensor(&x, xs, hx);
    make_tensor(&dy, xs, hdy);
  }
  float *one = malloc((size_t)c * sizeof *one), *half = malloc((size_t)c * sizeof *half);
  for (int64_t i = 0; i < c; i++) {
    one[i] = 1.0f + 0.1f * (float)i;
    half[i] = 0.1f * (float)(i % 3);
  }
  make_tensor(&sc, &cs, one);
  make_tensor(&sh, &cs, half);
  alloc_like(&rm, &cs);
  make_tensor(&rv, &cs, one);
  alloc_like(&mean, &cs);
  alloc_like(&var, &cs);
  alloc_like(&dsc, &cs);
  alloc_like(&dsh, &cs);
  alloc_like(&y, &ys);
  alloc_like(&yi, &ys);
  alloc_like(&dx, xs);
  /* NHWC keeps no ReLU mask (the backward recomputes it) */
  assert_true(xs->layout == NULL || !relu || wss.nbytes == 0);
  px_tensor_t *wsp = NULL;
  memset(&ws, 0, sizeof ws);
  if (wss.nbytes) {
    alloc_like(&ws, &wss);
    wsp = &ws;
  }
  assert_ok(px_batchnorm_forward_train(bn, &y, &mean, &var, wsp, &x, &sc, &sh, &rm, &rv));
  assert_ok(px_batchnorm_backward(bn, &dx, &dsc, &dsh, &dy, &x, &sc, &sh, &mean, &var, wsp));
  assert_ok(px_batchnorm_forward_infer(bn, &yi, &x, &sc, &sh, &rm, &rv));
  bn_out_t o = {to_plain_host(ops, &y), to_plain_host(ops, &dx), read_host(&dsc), read_host(&dsh),
                read_host(&rm), to_plain_host(ops, &yi), NULL, NULL, NULL};
  /* add with ReLU */
  px_add_t *add = NULL;
  px_tensor_t s;
  assert_ok(px_add_create(ops, xs, 1, &add));
  alloc_like(&s, xs);
  assert_ok(px_add_forward(add, &s, &y, &yi));
  o.add = to_plain_host(ops, &s);
  /* global average pooling, plain f32 out */
  px_pool2d_t *gap = NULL;
  px_tensor_t gs, g, dg, dgx;
  assert_ok(px_global_avgpool_create(ops, xs, &gap));
  px_pool2d_y_spec(gap, &gs);
  assert_null(gs.layout);
  assert_int_equal(gs.dtype, PX_DTYPE_F32);
  alloc_like(&g, &gs);
  make_tensor(&dg, &gs, hg);
  alloc_like(&dgx, xs);
  assert_ok(px_pool2d_forward(gap, &g, NULL, &y));
  assert_ok(px_pool2d_backward(gap, &dgx, &dg, NULL));
  o.gap = read_host(&g);
  o.dgap = to_plain_host(ops, &dgx);
  px_tensor_t *all[] = {&x, &y, &dy, &dx, &mean, &var, &sc, &sh, &rm, &rv, &dsc, &dsh, &yi,
                        &s, &g, &dg, &dgx};
  if (wsp) px_tensor_release(wsp);
  for (size_t i = 0; i < sizeof all / sizeof *all; i++) px_tensor_release(all[i]);
  px_pool2d_destroy(gap);
  px_add_destroy(add);
  px_batchnorm_destroy(bn);
  free(one);
  free(half);
  return o;
}

static void free_bn(bn_out_t *o) {
  float *all[] = {o->y, o->dx, o->dscale, o->dshift, o->rm, o->infer, o->add, o->gap, o->dgap};
  for (size_t i = 0; i < sizeof all / sizeof *all; i++) free(all[i]);
}

/* ||a - b|| / ||b|| */
/* With the ReLU fused, bf16 rounding of x moves a few pre-activations across
 * zero, and each such element passes (or stops) its whole dL/dy: the
 * element-wise maximum error is then of the order of dy itself, so with the
 * ReLU the bf16 gradients are held to a relative L2 error; without it, to
 * the element-wise bound of bf16 rounding. */
static void bn_add_and_pooling_in_nhwc_match_nchw(void **state) {
  (void)state;
  REQUIRE_GPU();
  px_ops_t *ops = gpu_ops();
  px_tensor_t p = plain4(8, 16, 6, 6);
  const size_t n = px_tensor_numel(&p), c = 16;
  px_test_rng_t rng;
  px_test_rng_seed(&rng, 31);
  float *hx = rand_host(&rng, n, 4.0f, -1.5f);
  float *hdy = rand_host(&rng, n, 2.0f, -1.0f);
  float *hg = rand_host(&rng, 8 * c, 2.0f, -1.0f);
  for (int relu = 0; relu < 2; relu++) {
    bn_out_t ref = run_bn(ops, &p, hx, hdy, hg, relu);
    for (int prec = 0; prec < 2; prec++) {
      px_tensor_t f = format_of(ops, &p, (px_precision_t)prec);
      bn_out_t a = run_bn(ops, &f, hx, hdy, hg, relu);
      /* f32: our NHWC kernels against cuDNN's NCHW batch norm */
      const double tol = prec ? 3e-2 : 1e-4;
      printf("-- %s, relu %d\n", prec ? "bf16" : "f32", relu);
      expect_rel("bn y", a.y, ref.y, n, tol);
      if (prec && relu) {
        double e = px_test_rel_l2(a.dx, ref.dx, n);
        printf("bn dx: relative L2 error %.3g\n", e);
        assert_true(e < 0.1);
      } else {
        expect_rel("bn dx", a.dx, ref.dx, n, tol);
      }
      expect_rel("bn dscale", a.dscale, ref.dscale, c, prec && relu ? 0.1 : tol);
      expect_rel("bn dshift", a.dshift, ref.dshift, c, prec && relu ? 0.1 : tol);
      expect_rel("bn running mean", a.rm, ref.rm, c, tol);
      expect_rel("bn inference", a.infer, ref.infer, n, tol);
      expect_rel("add relu", a.add, ref.add, n, tol);
      expect_rel("global average pooling", a.gap, ref.gap, 8 * c, tol);
      expect_rel("global average pooling backward", a.dgap, ref.dgap, n, tol);
      free_bn(&a);
    }
    free_bn(&ref);
  }
  free(hx);
  free(hdy);
  free(hg);
  px_ops_destroy(ops);
}

/* ---- a model step in each format ----------------------------------------------------- */

/* `steps` ResNet-20 training steps (batch 16, synthetic data, seed 1, SGD
 * after each) on a fresh context; nchw: PX_CUDA_LAYOUT=nchw for the
 * context. */
static px_test_steps_t model_step(int nchw, px_precision_t prec, int steps) {
  if (nchw)
    setenv("PX_CUDA_LAYOUT", "nchw", 1);
  else
    unsetenv("PX_CUDA_LAYOUT");
  px_ops_t *ops = gpu_ops();
  unsetenv("PX_CUDA_LAYOUT");
  px_test_steps_t r;
  assert_int_equal(px_test_resnet20_steps(ops, 16, prec, steps, &r), 0);
  px_ops_destroy(ops);
  return r;
}

static void resnet20_step_in_nhwc_and_bf16_matches_nchw(void **state) {
  (void)state;
  REQUIRE_GPU();
  px_test_steps_t ref = model_step(1, PX_PRECISION_FP32, 1);
  px_test_steps_t a = model_step(0, PX_PRECISION_FP32, 1);
  px_test_steps_t b = model_step(0, PX_PRECISION_BF16, 1);
  printf("loss nchw %.6f, nhwc %.6f, bf16 %.6f\n", ref.first, a.first, b.first);
  assert_true(fabsf(a.first - ref.first) <= 1e-4f * fabsf(ref.first));
  assert_true(fabsf(b.first - ref.first) <= 2e-2f * fabsf(ref.first));
  double dot = 0, nb = 0, nr = 0;
  for (size_t i = 0; i < ref.numel; i++) {
    dot += (double)b.grads[i] * ref.grads[i];
    nb += (double)b.grads[i] * b.grads[i];
    nr += (double)ref.grads[i] * ref.grads[i];
  }
  const double e32 = px_test_rel_l2(a.grads, ref.grads, ref.numel), e16 = px_test_rel_l2(b.grads, ref.grads, ref.numel);
  const double cosine = dot / sqrt(nb * nr);
  printf("weight gradients: nhwc relative L2 error %.3g; bf16 %.3g, cosine %.4f\n", e32, e16, cosine);
  assert_true(e32 < 1e-3);
  /* bf16 flips ReLUs near zero in every layer (see the batch-norm check):
   * on the H200 one step from initialisation gave 0.27 (PyTorch's autocast
   * against its fp32: bench/gpu/torch_grad_check.py); the direction must hold */
  assert_true(e16 < 0.5);
  assert_true(cosine > 0.9);
  free(ref.grads);
  free(a.grads);
  free(b.grads);
}

static void bf16_training_lowers_the_loss(void **state) {
  (void)state;
  REQUIRE_GPU();
  px_test_steps_t b = model_step(0, PX_PRECISION_BF16, 40);
  assert_true(b.last < b.first - 0.3f); /* the loss fell by more than 0.3 */
  free(b.grads);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(bf16_reference_rounds_to_nearest_even),
      cmocka_unit_test(nchw_and_nhwc_index_maps_are_inverse_permutations),
      cmocka_unit_test(conversion_is_exact_in_f32_and_rounds_to_nearest_in_bf16),
      cmocka_unit_test(conv_in_nhwc_matches_nchw_in_f32_and_in_bf16),
      cmocka_unit_test(bn_add_and_pooling_in_nhwc_match_nchw),
      cmocka_unit_test(resnet20_step_in_nhwc_and_bf16_matches_nchw),
      cmocka_unit_test(bf16_training_lowers_the_loss),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
