/* Helpers of the CUDA tests that run a kernel in each activation format
 * (plain NCHW f32, NHWC f32, NHWC bf16) against the CPU reference: a
 * context per format, device tensors filled from and read back to plain
 * NCHW host data, bf16 rounding on the host and an error relative to the
 * largest value. Include after "ops_test_util.h". */
#ifndef PX_GPU_FMT_UTIL_H
#define PX_GPU_FMT_UTIL_H

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "prunex/cuda.h"
#include "prunex/ops.h"
#include "prunex/ops_internal.h"

typedef enum { FMT_NCHW = 0, FMT_NHWC = 1, FMT_BF16 = 2 } fmt_t;
static const char *const fmt_name[] __attribute__((unused)) = {"nchw f32", "nhwc f32", "nhwc bf16"};

/* A CUDA context whose fp32 activations are NCHW (fmt FMT_NCHW) or NHWC. */
PX_OPS_TEST_HELPER px_ops_t *gpu_ops(fmt_t f) {
  if (f == FMT_NCHW) setenv("PX_CUDA_LAYOUT", "nchw", 1);
  else unsetenv("PX_CUDA_LAYOUT");
  px_ops_t *ops = NULL;
  assert_ok(px_ops_create(px_device_cuda(0), 0, &ops));
  unsetenv("PX_CUDA_LAYOUT");
  assert_ok(px_ops_set_tf32(ops, 0));
  return ops;
}

PX_OPS_TEST_HELPER px_precision_t prec_of(fmt_t f) {
  return f == FMT_BF16 ? PX_PRECISION_BF16 : PX_PRECISION_FP32;
}

/* f32 rounded to bf16 (nearest even), as the engine's conversion does. */
PX_OPS_TEST_HELPER float bf16_value(float f) {
  uint32_t u;
  memcpy(&u, &f, 4);
  u += 0x7fffu + ((u >> 16) & 1u);
  u &= 0xffff0000u;
  memcpy(&f, &u, 4);
  return f;
}

PX_OPS_TEST_HELPER void round_if(fmt_t f, float *p, size_t n) {
  if (f == FMT_BF16)
    for (size_t i = 0; i < n; i++) p[i] = bf16_value(p[i]);
}

/* The spec of dims in fmt (plain f32 for FMT_NCHW on a context made by gpu_ops). */
PX_OPS_TEST_HELPER px_tensor_t spec_in(px_ops_t *ops, fmt_t f, int64_t n, int64_t c, int64_t h,
                                       int64_t w) {
  px_tensor_t s;
  assert_ok(px_tensor_init4(&s, px_device_cuda(0), n, c, h, w));
  assert_ok(px_ops_act_format(ops, prec_of(f), &s));
  assert_true((s.layout != NULL) == (f != FMT_NCHW));
  return s;
}

/* A device tensor of spec holding plain NCHW host data h (NULL: uninitialised),
 * converted on the GPU. */
PX_OPS_TEST_HELPER void dev_tensor(px_ops_t *ops, px_tensor_t *t, const px_tensor_t *spec,
                                   const float *h) {
  *t = *spec;
  t->data = NULL;
  t->flags = 0;
  assert_ok(px_tensor_alloc(t, "test"));
  if (!h) return;
  px_tensor_t plain;
  assert_ok(px_tensor_init4(&plain, px_device_cuda(0), spec->dims[0], spec->dims[1],
                            spec->dims[2], spec->dims[3]));
  make_tensor(&plain, &plain, h);
  px_reorder_t *r = NULL;
  assert_ok(px_reorder_create(ops, t, &plain, &r));
  assert_ok(px_reorder_execute(r, t, &plain));
  assert_ok(px_ops_sync(ops));
  px_reorder_destroy(r);
  px_tensor_release(&plain);
}

/* t (any CUDA format) as plain NCHW f32 host values (malloc'd). */
PX_OPS_TEST_HELPER float *host_of(px_ops_t *ops, const px_tensor_t *t) {
  px_tensor_t plain;
  assert_ok(px_tensor_init4(&plain, px_device_cuda(0), t->dims[0], t->dims[1], t->dims[2],
                            t->dims[3]));
  assert_ok(px_tensor_alloc(&plain, "plain copy"));
  px_reorder_t *r = NULL;
  assert_ok(px_reorder_create(ops, &plain, t, &r));
  assert_ok(px_reorder_execute(r, &plain, t));
  assert_ok(px_ops_sync(ops));
  float *h = read_host(&plain);
  px_reorder_destroy(r);
  px_tensor_release(&plain);
  return h;
}

/* max |got - want| / max |want| */
PX_OPS_TEST_HELPER void expect_rel(const char *what, fmt_t f, const float *got, const float *want,
                                   size_t n, double tol) {
  double num = 0, den = 1e-30;
  for (size_t i = 0; i < n; i++) {
    num = fmax(num, fabs((double)got[i] - want[i]));
    den = fmax(den, fabs((double)want[i]));
  }
  printf("%s (%s): max error %.3g of the largest value\n", what, fmt_name[f], num / den);
  if (!(num / den <= tol)) fail_msg("%s (%s): error %g > %g", what, fmt_name[f], num / den, tol);
}

/* Tolerances: f32 kernels do the CPU's arithmetic (a sum's order aside);
 * bf16 rounds every stored value to 8 bits (2^-9 relative) and sums of
 * products of rounded values. */
PX_OPS_TEST_HELPER double tol_of(fmt_t f, double f32) { return f == FMT_BF16 ? 1e-2 : f32; }

#endif
