/* The one argument contract of the layers with weights (nn/px_ops_int.h,
 * px__wlayer_t): convolution and fully connected refuse the same kinds of
 * bad call with the same status and a message naming the op, the direction
 * and the argument, and their spec queries (answered by the dispatcher from
 * the contract) describe the tensors the calls accept. On the CPU backend;
 * the CUDA backend runs the same checks (gpu_ops covers its numbers). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "prunex/ops.h"
#include "prunex/ops_internal.h"
#include "px_test_util.h"

#include "ops_test_util.h"

typedef struct {
  px_ops_t *ops;
  px_conv2d_t *conv; /* 3x3, no bias, on [2, 4, 6, 6] */
  px_fc_t *fc;       /* 5 outputs, no bias, on [2, 7] */
  px_tensor_t cx, cy, cw, cb; /* conv x, y, w and a bias-shaped tensor */
  px_tensor_t fx, fy, fw, fb; /* fc x, y, w and a bias-shaped tensor */
} fix_t;

static void expect_invalid(px_status_t st, const char *want) {
  assert_int_equal(st, PX_ERR_INVALID);
  if (!strstr(px_last_error(), want))
    fail_msg("message \"%s\" does not contain \"%s\"", px_last_error(), want);
}

static int setup(void **state) {
  fix_t *f = calloc(1, sizeof *f);
  assert_non_null(f);
  assert_ok(px_ops_create(px_device_cpu(), 1, &f->ops));
  px_tensor_t xs, ys, ws, bs;
  const int64_t cd[4] = {2, 4, 6, 6}, fd[2] = {2, 7};
  assert_ok(px_tensor_init(&xs, px_device_cpu(), PX_DTYPE_F32, 4, cd));
  px_conv2d_params_t cp = {.c_out = 3, .kh = 3, .kw = 3, .stride_h = 1, .stride_w = 1,
                           .pad_h = 1, .pad_w = 1, .bias = 0, .groups = 0};
  assert_ok(px_conv2d_create(f->ops, &xs, &cp, &f->conv));
  px_conv2d_y_spec(f->conv, &ys);
  px_conv2d_w_spec(f->conv, &ws);
  px_conv2d_b_spec(f->conv, &bs);
  assert_int_equal(ys.dims[1], 3);
  assert_int_equal(ys.dims[2], 6);
  assert_int_equal(ws.dims[0], 3);
  assert_int_equal(ws.dims[1], 4);
  assert_int_equal(bs.dims[0], 3);
  make_tensor(&f->cx, &xs, NULL);
  make_tensor(&f->cy, &ys, NULL);
  make_tensor(&f->cw, &ws, NULL);
  make_tensor(&f->cb, &bs, NULL);
  assert_ok(px_tensor_init(&xs, px_device_cpu(), PX_DTYPE_F32, 2, fd));
  px_fc_params_t fp = {5, 0};
  assert_ok(px_fc_create(f->ops, &xs, &fp, &f->fc));
  px_fc_y_spec(f->fc, &ys);
  px_fc_w_spec(f->fc, &ws);
  px_fc_b_spec(f->fc, &bs);
  assert_int_equal(ys.dims[0], 2);
  assert_int_equal(ys.dims[1], 5);
  assert_int_equal(ws.dims[1], 7);
  assert_int_equal(bs.dims[0], 5);
  make_tensor(&f->fx, &xs, NULL);
  make_tensor(&f->fy, &ys, NULL);
  make_tensor(&f->fw, &ws, NULL);
  make_tensor(&f->fb, &bs, NULL);
  *state = f;
  return 0;
}

static int teardown(void **state) {
  fix_t *f = *state;
  px_tensor_t *all[] = {&f->cx, &f->cy, &f->cw, &f->cb, &f->fx, &f->fy, &f->fw, &f->fb};
  for (size_t i = 0; i < sizeof all / sizeof *all; i++) px_tensor_release(all[i]);
  px_conv2d_destroy(f->conv);
  px_fc_destroy(f->fc);
  px_ops_destroy(f->ops);
  free(f);
  return 0;
}

static void well_formed_calls_pass(void **state) {
  fix_t *f = *state;
  assert_ok(px_conv2d_forward(f->conv, &f->cy, &f->cx, &f->cw, NULL));
  assert_ok(px_conv2d_backward_data(f->conv, &f->cx, &f->cy, &f->cw));
  assert_ok(px_conv2d_backward_weights(f->conv, &f->cw, NULL, &f->cx, &f->cy));
  assert_ok(px_fc_forward(f->fc, &f->fy, &f->fx, &f->fw, NULL));
  assert_ok(px_fc_backward_data(f->fc, &f->fx, &f->fy, &f->fw));
  assert_ok(px_fc_backward_weights(f->fc, &f->fw, NULL, &f->fx, &f->fy));
}

static void a_bias_to_a_layer_without_one_is_refused_alike(void **state) {
  fix_t *f = *state;
  expect_invalid(px_conv2d_forward(f->conv, &f->cy, &f->cx, &f->cw, &f->cb),
                 "conv2d forward: bias given to a conv without bias");
  expect_invalid(px_fc_forward(f->fc, &f->fy, &f->fx, &f->fw, &f->fb),
                 "fc forward: bias given to a layer without bias");
  expect_invalid(px_conv2d_backward_weights(f->conv, &f->cw, &f->cb, &f->cx, &f->cy),
                 "conv2d backward: bias gradient asked of a conv without bias");
  expect_invalid(px_fc_backward_weights(f->fc, &f->fw, &f->fb, &f->fx, &f->fy),
                 "fc backward: bias gradient asked of a layer without bias");
}

static void wrong_tensors_are_named_by_op_direction_and_argument(void **state) {
  fix_t *f = *state;
  /* the other layer's weights: a shape mismatch */
  expect_invalid(px_conv2d_forward(f->conv, &f->cy, &f->cx, &f->fw, NULL),
                 "conv2d forward w: tensor");
  expect_invalid(px_fc_backward_data(f->fc, &f->fx, &f->fy, &f->cw), "fc backward w: tensor");
  /* missing tensors and storage */
  expect_invalid(px_fc_forward(f->fc, NULL, &f->fx, &f->fw, NULL), "fc forward y is NULL");
  px_tensor_t bare = f->cx;
  bare.data = NULL;
  expect_invalid(px_conv2d_backward_data(f->conv, &bare, &f->cy, &f->cw),
                 "conv2d backward dx has no storage");
  expect_invalid(px_conv2d_backward_weights(f->conv, &f->cw, NULL, &f->cx, &f->cx),
                 "conv2d backward dy: tensor");
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test_setup_teardown(well_formed_calls_pass, setup, teardown),
      cmocka_unit_test_setup_teardown(a_bias_to_a_layer_without_one_is_refused_alike, setup,
                                      teardown),
      cmocka_unit_test_setup_teardown(wrong_tensors_are_named_by_op_direction_and_argument, setup,
                                      teardown),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
