/* Helpers shared by the op tests (tests/test_ops_*.c): a CPU backend, input
 * specs plain or in the backend's blocked layout, random host data, tensors
 * filled from and read back to host memory, and a relative-error check.
 * Include after <cmocka.h>. */
#ifndef PX_OPS_TEST_UTIL_H
#define PX_OPS_TEST_UTIL_H

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

#include "prunex/ops.h"
#include "prunex/ops_internal.h"
#include "px_test_util.h"

/* Not every test file uses every helper. */
#define PX_OPS_TEST_HELPER static __attribute__((unused))

#define assert_ok(call)                                                                     \
  do {                                                                                      \
    px_status_t st_ = (call);                                                               \
    if (st_ != PX_OK) fail_msg("%s: %s (%s)", #call, px_status_name(st_), px_last_error()); \
  } while (0)

PX_OPS_TEST_HELPER px_ops_t *new_ops(void) {
  px_ops_t *ops = NULL;
  assert_ok(px_ops_create(px_device_cpu(), 2, &ops));
  return ops;
}

/* The spec of an [n, c, h, w] input: plain, or (blocked) in the layout the
 * backend's convolution gives its output. Returns 1 when that layout is
 * not plain; 0 when the backend keeps plain maps on this CPU (oneDNN
 * without AVX-512 gives some of these small shapes plain outputs), in
 * which case spec is plain and a blocked case checks what a plain one does. */
PX_OPS_TEST_HELPER int input_spec(px_ops_t *ops, int blocked, int64_t n, int64_t c, int64_t h,
                                  int64_t w, px_tensor_t *spec) {
  if (blocked) {
    static const int64_t feed_c[] = {8, 16, 32};
    for (size_t i = 0; i < sizeof feed_c / sizeof feed_c[0]; i++) {
      px_tensor_t src;
      assert_ok(px_tensor_init4(&src, px_device_cpu(), n, feed_c[i], h, w));
      px_conv2d_params_t p = {.c_out = (int32_t)c, .kh = 1, .kw = 1, .stride_h = 1,
                              .stride_w = 1};
      px_conv2d_t *feeder = NULL;
      assert_ok(px_conv2d_create(ops, &src, &p, &feeder));
      px_conv2d_y_spec(feeder, spec);
      px_conv2d_destroy(feeder);
      if (spec->layout) return 1;
    }
    static int said;
    if (!said++) printf("note: the convolution keeps plain maps on this CPU: blocked cases run plain\n");
  }
  assert_ok(px_tensor_init4(spec, px_device_cpu(), n, c, h, w));
  return 0;
}

PX_OPS_TEST_HELPER float *rand_host(px_test_rng_t *rng, size_t n, float scale, float offset) {
  float *p = malloc(n * sizeof *p);
  assert_non_null(p);
  px_test_fill_normal(rng, p, n);
  for (size_t i = 0; i < n; i++) p[i] = p[i] * scale + offset;
  return p;
}

PX_OPS_TEST_HELPER void make_tensor(px_tensor_t *t, const px_tensor_t *spec, const float *host) {
  *t = *spec;
  t->data = NULL;
  t->flags = 0;
  if (t->nbytes == 0) return; /* no storage: a workspace the op does not need */
  assert_ok(px_tensor_alloc(t, "test"));
  if (host) assert_ok(px_tensor_copy_from_host(t, host, px_tensor_plain_bytes(t)));
}

PX_OPS_TEST_HELPER float *read_host(const px_tensor_t *t) {
  float *p = malloc(px_tensor_plain_bytes(t));
  assert_non_null(p);
  assert_ok(px_tensor_copy_to_host(t, p, px_tensor_plain_bytes(t)));
  return p;
}

PX_OPS_TEST_HELPER void alloc_like(px_tensor_t *t, const px_tensor_t *spec) {
  *t = *spec;
  t->data = NULL;
  t->flags = 0;
  assert_ok(px_tensor_alloc(t, "test"));
}

/* t (any format of a 4-D activation) converted, on its device, to a plain
 * f32 host copy (the caller frees it). */
PX_OPS_TEST_HELPER float *to_plain_host(px_ops_t *ops, const px_tensor_t *t) {
  px_tensor_t plain;
  assert_ok(px_tensor_init4(&plain, t->device, t->dims[0], t->dims[1], t->dims[2], t->dims[3]));
  assert_ok(px_tensor_alloc(&plain, "plain copy"));
  px_reorder_t *r = NULL;
  assert_ok(px_reorder_create(ops, &plain, t, &r));
  assert_ok(px_reorder_execute(r, &plain, t));
  float *h = read_host(&plain);
  px_reorder_destroy(r);
  px_tensor_release(&plain);
  return h;
}

/* A tensor of spec `fmt` (a 4-D activation format) holding host data h
 * (plain NCHW f32), converted on fmt's device. */
PX_OPS_TEST_HELPER void from_plain_host(px_ops_t *ops, px_tensor_t *t, const px_tensor_t *fmt,
                                        const float *h) {
  px_tensor_t plain;
  assert_ok(px_tensor_init4(&plain, fmt->device, fmt->dims[0], fmt->dims[1], fmt->dims[2],
                            fmt->dims[3]));
  make_tensor(&plain, &plain, h);
  alloc_like(t, fmt);
  px_reorder_t *r = NULL;
  assert_ok(px_reorder_create(ops, t, &plain, &r));
  assert_ok(px_reorder_execute(r, t, &plain));
  px_reorder_destroy(r);
  px_tensor_release(&plain);
}

PX_OPS_TEST_HELPER void expect_close(const char *what, const float *got, const float *want,
                                     size_t n, double tol) {
  double err = px_test_max_rel_err(got, want, n);
  if (err > tol) fail_msg("%s: max relative error %g > %g", what, err, tol);
}

#endif
