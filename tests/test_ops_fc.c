/* Fully connected layer on the oneDNN backend: forward, backward-data and
 * backward-weights (with and without bias) against the reference for a plain
 * [N, C] input, the blocked [N, C, 1, 1] output of global average pooling and
 * a blocked [N, C, H, W] input (flattened in (c, h, w) order whatever the
 * layout), and all gradients against central finite differences. */
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

typedef struct {
  int ndim; /* 2: [n, c]; 4: [n, c, h, w] */
  int64_t n, c, h, w;
  int32_t out, bias;
  int blocked;
  int fd;
} fc_case_t;

static const fc_case_t cases[] = {
    {2, 8, 64, 1, 1, 10, 1, 0, 0},  /* plain [N, C], the CIFAR head size */
    {4, 6, 32, 1, 1, 10, 1, 1, 0},  /* blocked pooled features */
    {4, 3, 5, 3, 2, 7, 0, 1, 1},    /* blocked [N, C, H, W], padded channels, no bias */
    {2, 3, 13, 1, 1, 5, 1, 0, 1},   /* odd plain sizes */
};

typedef struct {
  px_fc_t *fc;
  px_tensor_t *y, *x, *w, *b;
  const float *r;
} fd_ctx_t;

static double loss_of(const fd_ctx_t *c) {
  assert_ok(px_fc_forward(c->fc, c->y, c->x, c->w, c->b));
  float *hy = read_host(c->y);
  double l = 0.0;
  for (size_t i = 0; i < px_tensor_numel(c->y); i++) l += (double)hy[i] * c->r[i];
  free(hy);
  return l;
}

static void check_fd(const char *what, const fd_ctx_t *c, px_tensor_t *t, float *h, const float *g) {
  const float eps = 0.25f; /* the layer is linear in each argument */
  const size_t n = px_tensor_numel(t);
  double worst = 0.0;
  for (size_t i = 0; i < n; i++) {
    float keep = h[i];
    h[i] = keep + eps;
    assert_ok(px_tensor_copy_from_host(t, h, n * 4));
    double lp = loss_of(c);
    h[i] = keep - eps;
    assert_ok(px_tensor_copy_from_host(t, h, n * 4));
    double lm = loss_of(c);
    h[i] = keep;
    double fd = (lp - lm) / (2.0 * eps);
    double e = fabs(fd - g[i]) / fmax(1.0, fabs(fd));
    if (e > worst) worst = e;
  }
  assert_ok(px_tensor_copy_from_host(t, h, n * 4));
  print_message("  %s finite-difference max relative error %g\n", what, worst);
  if (worst > 1e-3) fail_msg("%s differs from finite differences (%g)", what, worst);
}

static void run_case(const fc_case_t *fcase, uint64_t seed) {
  px_ops_t *ops = new_ops();
  px_test_rng_t rng;
  px_test_rng_seed(&rng, seed);
  px_tensor_t xs, ys, ws, bs;
  if (fcase->ndim == 2) {
    const int64_t d[2] = {fcase->n, fcase->c};
    assert_ok(px_tensor_init(&xs, px_device_cpu(), PX_DTYPE_F32, 2, d));
  } else if (fcase->blocked && fcase->h == 1 && fcase->w == 1) {
    /* the real producer: global average pooling of a blocked activation */
    px_tensor_t act;
    input_spec(ops, 1, fcase->n, fcase->c, 4, 4, &act);
    px_pool2d_t *gap = NULL;
    assert_ok(px_global_avgpool_create(ops, &act, &gap));
    px_pool2d_y_spec(gap, &xs);
    px_pool2d_destroy(gap);
  } else {
    input_spec(ops, fcase->blocked, fcase->n, fcase->c, fcase->h, fcase->w, &xs);
  }
  print_message("  input layout %s\n", px_layout_name(xs.layout));
  px_fc_params_t p = {fcase->out, fcase->bias};
  px_fc_t *fc = NULL;
  assert_ok(px_fc_create(ops, &xs, &p, &fc));
  px_fc_y_spec(fc, &ys);
  px_fc_w_spec(fc, &ws);
  px_fc_b_spec(fc, &bs);
  const int64_t in = fcase->c * fcase->h * fcase->w;
  assert_int_equal(ws.dims[1], in);
  assert_null(ys.layout);

  const size_t nx = px_tensor_numel(&xs), ny = px_tensor_numel(&ys), nw = px_tensor_numel(&ws);
  const size_t nb = (size_t)fcase->out;
  float *hx = rand_host(&rng, nx, 1, 0), *hw = rand_host(&rng, nw, 1, 0), *hb = rand_host(&rng, nb, 1, 0);
  float *hdy = rand_host(&rng, ny, 1, 0);
  px_tensor_t x, y, w, b, dy, dx, dw, db;
  make_tensor(&x, &xs, hx);
  make_tensor(&w, &ws, hw);
  make_tensor(&b, &bs, hb);
  make_tensor(&y, &ys, NULL);
  make_tensor(&dy, &ys, hdy);
  make_tensor(&dx, &xs, NULL);
  make_tensor(&dw, &ws, NULL);
  make_tensor(&db, &bs, NULL);
  px_tensor_t *bp = fcase->bias ? &b : NULL, *dbp = fcase->bias ? &db : NULL;

  float *ry = malloc(ny * 4), *rdx = malloc(nx * 4), *rdw = malloc(nw * 4), *rdb = malloc(nb * 4);
  px__ref_fc_forward(ry, hx, hw, fcase->bias ? hb : NULL, fcase->n, in, fcase->out);
  px__ref_fc_backward_data(rdx, hdy, hw, fcase->n, in, fcase->out);
  px__ref_fc_backward_weights(rdw, fcase->bias ? rdb : NULL, hx, hdy, fcase->n, in, fcase->out);
  assert_ok(px_fc_forward(fc, &y, &x, &w, bp));
  assert_ok(px_fc_backward_data(fc, &dx, &dy, &w));
  assert_ok(px_fc_backward_weights(fc, &dw, dbp, &x, &dy));
  float *gy = read_host(&y), *gdx = read_host(&dx), *gdw = read_host(&dw), *gdb = read_host(&db);
  expect_close("forward", gy, ry, ny, 1e-4);
  expect_close("backward data", gdx, rdx, nx, 1e-4);
  expect_close("backward weights", gdw, rdw, nw, 1e-4);
  if (fcase->bias) expect_close("backward bias", gdb, rdb, nb, 1e-4);

  if (fcase->fd) {
    fd_ctx_t c = {fc, &y, &x, &w, bp, hdy};
    check_fd("dx", &c, &x, hx, gdx);
    check_fd("dw", &c, &w, hw, gdw);
    if (fcase->bias) check_fd("db", &c, &b, hb, gdb);
  }

  free(hx); free(hw); free(hb); free(hdy); free(ry); free(rdx); free(rdw); free(rdb);
  free(gy); free(gdx); free(gdw); free(gdb);
  px_tensor_t *all[] = {&x, &y, &w, &b, &dy, &dx, &dw, &db};
  for (size_t i = 0; i < sizeof all / sizeof *all; i++) px_tensor_release(all[i]);
  px_fc_destroy(fc);
  px_ops_destroy(ops);
}

static void forward_and_backward_match_reference_and_fd(void **state) {
  (void)state;
  for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
    const fc_case_t *c = &cases[i];
    print_message("case %zu: x [%lld,%lld,%lld,%lld] (%dd, %s) -> %d%s\n", i, (long long)c->n,
                  (long long)c->c, (long long)c->h, (long long)c->w, c->ndim,
                  c->blocked ? "blocked" : "plain", c->out, c->bias ? " bias" : "");
    run_case(c, 500 + i);
  }
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(forward_and_backward_match_reference_and_fd),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
