/* Batch normalisation on the oneDNN backend: training forward (output,
 * batch statistics, PyTorch running-statistics update with the unbiased
 * variance), inference forward and backward against the reference, with
 * and without the fused ReLU, on plain and blocked inputs; gradients against
 * central finite differences; and train/eval semantics (train updates the
 * running statistics, eval uses them and leaves them alone). */
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
#include "px_test_util.h"

#include "ops_test_util.h"

/* One BN layer with all its tensors, host copies of the inputs. */
typedef struct {
  px_ops_t *ops;
  px_batchnorm_t *bn;
  px_batchnorm_params_t p;
  int64_t n, c, h, w;
  px_tensor_t x, y, mean, var, ws, scale, shift, rmean, rvar, dy, dx, dscale, dshift;
  float *hx, *hscale, *hshift, *hrmean, *hrvar, *hdy;
} bn_fixture_t;

static void fixture_init(bn_fixture_t *f, int blocked, int64_t n, int64_t c, int64_t h, int64_t w,
                         int relu, uint64_t seed) {
  memset(f, 0, sizeof *f);
  f->ops = new_ops();
  f->n = n; f->c = c; f->h = h; f->w = w;
  f->p = (px_batchnorm_params_t){.eps = 1e-5f, .momentum = 0.1f, .fuse_relu = relu};
  px_test_rng_t rng;
  px_test_rng_seed(&rng, seed);
  px_tensor_t xs, cs, wss;
  input_spec(f->ops, blocked, n, c, h, w, &xs);
  assert_ok(px_batchnorm_create(f->ops, &xs, &f->p, &f->bn));
  px_batchnorm_c_spec(f->bn, &cs);
  px_batchnorm_ws_spec(f->bn, &wss);
  assert_true(relu ? wss.nbytes > 0 : wss.nbytes == 0);
  const size_t nx = px_tensor_numel(&xs), nc = (size_t)c;
  /* inputs away from zero mean and unit variance, so the statistics matter */
  f->hx = rand_host(&rng, nx, 2.0f, 0.5f);
  f->hscale = rand_host(&rng, nc, 0.5f, 1.0f);
  f->hshift = rand_host(&rng, nc, 0.5f, 0.0f);
  f->hrmean = rand_host(&rng, nc, 0.1f, 0.0f);
  f->hrvar = rand_host(&rng, nc, 0.1f, 1.0f);
  f->hdy = rand_host(&rng, nx, 1.0f, 0.0f);
  make_tensor(&f->x, &xs, f->hx);
  make_tensor(&f->y, &xs, NULL);
  make_tensor(&f->dy, &xs, f->hdy);
  make_tensor(&f->dx, &xs, NULL);
  make_tensor(&f->mean, &cs, NULL);
  make_tensor(&f->var, &cs, NULL);
  make_tensor(&f->scale, &cs, f->hscale);
  make_tensor(&f->shift, &cs, f->hshift);
  make_tensor(&f->rmean, &cs, f->hrmean);
  make_tensor(&f->rvar, &cs, f->hrvar);
  make_tensor(&f->dscale, &cs, NULL);
  make_tensor(&f->dshift, &cs, NULL);
  make_tensor(&f->ws, &wss, NULL);
}

static void fixture_fini(bn_fixture_t *f) {
  px_tensor_t *all[] = {&f->x, &f->y, &f->mean, &f->var, &f->ws, &f->scale, &f->shift,
                        &f->rmean, &f->rvar, &f->dy, &f->dx, &f->dscale, &f->dshift};
  for (size_t i = 0; i < sizeof all / sizeof *all; i++) px_tensor_release(all[i]);
  free(f->hx); free(f->hscale); free(f->hshift); free(f->hrmean); free(f->hrvar); free(f->hdy);
  px_batchnorm_destroy(f->bn);
  px_ops_destroy(f->ops);
}

static px_tensor_t *ws_arg(bn_fixture_t *f) { return f->ws.nbytes ? &f->ws : NULL; }

static px_status_t train(bn_fixture_t *f) {
  return px_batchnorm_forward_train(f->bn, &f->y, &f->mean, &f->var, ws_arg(f), &f->x, &f->scale,
                                    &f->shift, &f->rmean, &f->rvar);
}

static void run_case(int blocked, int64_t n, int64_t c, int64_t h, int64_t w, int relu, uint64_t seed) {
  bn_fixture_t f;
  fixture_init(&f, blocked, n, c, h, w, relu, seed);
  const size_t nx = (size_t)(n * c * h * w), nc = (size_t)c;
  float *ry = malloc(nx * 4), *rmean = malloc(nc * 4), *rvar = malloc(nc * 4);
  float *rrm = malloc(nc * 4), *rrv = malloc(nc * 4), *rdx = malloc(nx * 4);
  float *rdscale = malloc(nc * 4), *rdshift = malloc(nc * 4), *riy = malloc(nx * 4);
  memcpy(rrm, f.hrmean, nc * 4);
  memcpy(rrv, f.hrvar, nc * 4);
  px__ref_batchnorm_forward_train(ry, rmean, rvar, f.hx, f.hscale, f.hshift, rrm, rrv, n, c, h, w,
                                  f.p.eps, f.p.momentum, relu);
  px__ref_batchnorm_backward(rdx, rdscale, rdshift, f.hdy, f.hx, f.hscale, f.hshift, rmean, rvar, n,
                             c, h, w, f.p.eps, relu);
  px__ref_batchnorm_forward_infer(riy, f.hx, f.hscale, f.hshift, rrm, rrv, n, c, h, w, f.p.eps,
                                  relu);

  assert_ok(train(&f));
  assert_ok(px_batchnorm_backward(f.bn, &f.dx, &f.dscale, &f.dshift, &f.dy, &f.x, &f.scale,
                                         &f.shift, &f.mean, &f.var, ws_arg(&f)));
  float *gy = read_host(&f.y), *gmean = read_host(&f.mean), *gvar = read_host(&f.var);
  float *grm = read_host(&f.rmean), *grv = read_host(&f.rvar), *gdx = read_host(&f.dx);
  float *gdscale = read_host(&f.dscale), *gdshift = read_host(&f.dshift);
  expect_close("train y", gy, ry, nx, 1e-4);
  expect_close("batch mean", gmean, rmean, nc, 1e-5);
  expect_close("batch var", gvar, rvar, nc, 1e-4);
  expect_close("running mean", grm, rrm, nc, 1e-5);
  expect_close("running var", grv, rrv, nc, 1e-5);
  expect_close("dx", gdx, rdx, nx, 1e-3);
  expect_close("dscale", gdscale, rdscale, nc, 1e-3);
  expect_close("dshift", gdshift, rdshift, nc, 1e-3);

  /* inference with the updated running statistics */
  assert_ok(px_batchnorm_forward_infer(f.bn, &f.y, &f.x, &f.scale, &f.shift, &f.rmean, &f.rvar));
  float *giy = read_host(&f.y);
  expect_close("infer y", giy, riy, nx, 1e-4);

  free(ry); free(rmean); free(rvar); free(rrm); free(rrv); free(rdx); free(rdscale); free(rdshift);
  free(riy); free(gy); free(gmean); free(gvar); free(grm); free(grv); free(gdx); free(gdscale);
  free(gdshift); free(giy);
  fixture_fini(&f);
}

static void forward_and_backward_match_reference(void **state) {
  (void)state;
  run_case(0, 4, 3, 5, 5, 0, 1);   /* plain, 3 channels */
  run_case(1, 4, 16, 6, 6, 0, 2);  /* blocked, one full block */
  run_case(1, 3, 21, 5, 7, 0, 3);  /* blocked, padded channels, odd sizes */
  run_case(0, 4, 3, 5, 5, 1, 4);   /* fused ReLU, plain */
  run_case(1, 2, 32, 4, 4, 1, 5);  /* fused ReLU, blocked */
  run_case(1, 3, 21, 5, 7, 1, 6);  /* fused ReLU, padded channels */
  run_case(1, 16, 32, 24, 20, 1, 7); /* 2 MiB: the threads share the work */
  run_case(0, 16, 32, 24, 20, 0, 8);
  run_case(1, 32, 16, 28, 28, 1, 9);
  run_case(1, 32, 64, 7, 7, 1, 10);
  run_case(1, 32, 32, 14, 14, 0, 11);
}

static double loss_of(bn_fixture_t *f, const float *r) {
  /* restore the running stats so that every evaluation is the same function */
  assert_ok(px_tensor_copy_from_host(&f->rmean, f->hrmean, (size_t)f->c * 4));
  assert_ok(px_tensor_copy_from_host(&f->rvar, f->hrvar, (size_t)f->c * 4));
  assert_ok(train(f));
  float *hy = read_host(&f->y);
  double l = 0.0;
  for (size_t i = 0; i < px_tensor_numel(&f->y); i++) l += (double)hy[i] * r[i];
  free(hy);
  return l;
}

static void check_fd(const char *what, bn_fixture_t *f, px_tensor_t *t, float *h, const float *g,
                     const float *r, double eps) {
  double worst = 0.0;
  const size_t n = px_tensor_numel(t);
  for (size_t i = 0; i < n; i++) {
    float keep = h[i];
    h[i] = (float)(keep + eps);
    double up = (double)h[i] - keep;
    assert_ok(px_tensor_copy_from_host(t, h, n * 4));
    double lp = loss_of(f, r);
    h[i] = (float)(keep - eps);
    double down = keep - (double)h[i];
    assert_ok(px_tensor_copy_from_host(t, h, n * 4));
    double lm = loss_of(f, r);
    h[i] = keep;
    double fd = (lp - lm) / (up + down);
    double e = fabs(fd - g[i]) / fmax(1.0, fabs(fd));
    if (e > worst) worst = e;
  }
  assert_ok(px_tensor_copy_from_host(t, h, n * 4));
  print_message("%s: finite-difference max relative error %g\n", what, worst);
  if (worst > 5e-3) fail_msg("%s: gradient differs from finite differences (%g)", what, worst);
}

static void gradients_match_finite_differences(void **state) {
  (void)state;
  bn_fixture_t f;
  fixture_init(&f, 1, 3, 5, 3, 3, 0, 11); /* blocked, 5 channels padded to a block */
  /* dL/dy = r = hdy */
  assert_ok(train(&f));
  assert_ok(px_batchnorm_backward(f.bn, &f.dx, &f.dscale, &f.dshift, &f.dy, &f.x, &f.scale,
                                         &f.shift, &f.mean, &f.var, NULL));
  float *gdx = read_host(&f.dx), *gdscale = read_host(&f.dscale), *gdshift = read_host(&f.dshift);
  check_fd("dx", &f, &f.x, f.hx, gdx, f.hdy, 1e-2);
  check_fd("dscale", &f, &f.scale, f.hscale, gdscale, f.hdy, 1e-2);
  check_fd("dshift", &f, &f.shift, f.hshift, gdshift, f.hdy, 1e-2);
  free(gdx); free(gdscale); free(gdshift);
  fixture_fini(&f);
}

/* With the fused ReLU the loss has kinks; a small step keeps every output on
 * its side of zero for these inputs, so the differences are still exact. */
static void fused_relu_gradients_match_finite_differences(void **state) {
  (void)state;
  bn_fixture_t f;
  fixture_init(&f, 1, 4, 3, 3, 2, 1, 12);
  assert_ok(train(&f));
  assert_ok(px_batchnorm_backward(f.bn, &f.dx, &f.dscale, &f.dshift, &f.dy, &f.x, &f.scale,
                                  &f.shift, &f.mean, &f.var, &f.ws));
  float *gdx = read_host(&f.dx), *gdscale = read_host(&f.dscale), *gdshift = read_host(&f.dshift);
  check_fd("dx (relu)", &f, &f.x, f.hx, gdx, f.hdy, 1e-3);
  check_fd("dscale (relu)", &f, &f.scale, f.hscale, gdscale, f.hdy, 1e-3);
  check_fd("dshift (relu)", &f, &f.shift, f.hshift, gdshift, f.hdy, 1e-3);
  free(gdx); free(gdscale); free(gdshift);
  fixture_fini(&f);
}

static void train_updates_running_stats_and_eval_uses_them(void **state) {
  (void)state;
  bn_fixture_t f;
  fixture_init(&f, 1, 8, 16, 4, 4, 0, 21);
  const int64_t c = f.c, m = f.n * f.h * f.w;
  /* start from PyTorch's initial state: running mean 0, variance 1 */
  float *zeros = calloc((size_t)c, 4), *ones = malloc((size_t)c * 4);
  for (int64_t i = 0; i < c; i++) ones[i] = 1.0f;
  assert_ok(px_tensor_copy_from_host(&f.rmean, zeros, (size_t)c * 4));
  assert_ok(px_tensor_copy_from_host(&f.rvar, ones, (size_t)c * 4));

  assert_ok(train(&f));
  float *bm = read_host(&f.mean), *bv = read_host(&f.var), *rm = read_host(&f.rmean),
        *rv = read_host(&f.rvar), *ytrain = read_host(&f.y);
  for (int64_t i = 0; i < c; i++) {
    assert_float_equal(rm[i], 0.1 * bm[i], 1e-6);
    /* unbiased: var * m / (m - 1) */
    assert_float_equal(rv[i], 0.9 + 0.1 * bv[i] * (double)m / (double)(m - 1), 1e-5);
  }
  /* eval: normalises with the running stats, so it differs from train... */
  assert_ok(px_batchnorm_forward_infer(f.bn, &f.y, &f.x, &f.scale, &f.shift, &f.rmean, &f.rvar));
  float *yeval = read_host(&f.y);
  assert_true(px_test_max_rel_err(yeval, ytrain, px_tensor_numel(&f.y)) > 0.1);
  /* ...and leaves the running stats alone */
  float *rm2 = read_host(&f.rmean), *rv2 = read_host(&f.rvar);
  assert_memory_equal(rm, rm2, (size_t)c * 4);
  assert_memory_equal(rv, rv2, (size_t)c * 4);
  /* many train steps on the same batch converge the running stats to it */
  for (int k = 0; k < 200; k++) assert_ok(train(&f));
  float *rm3 = read_host(&f.rmean), *rv3 = read_host(&f.rvar);
  for (int64_t i = 0; i < c; i++) {
    assert_float_equal(rm3[i], bm[i], 1e-4);
    assert_float_equal(rv3[i], bv[i] * (double)m / (double)(m - 1), 1e-3);
  }
  /* training needs two values per channel */
  bn_fixture_t g;
  fixture_init(&g, 0, 1, 4, 1, 1, 0, 22);
  assert_int_equal(train(&g), PX_ERR_INVALID);
  fixture_fini(&g);

  free(zeros); free(ones); free(bm); free(bv); free(rm); free(rv); free(ytrain); free(yeval);
  free(rm2); free(rv2); free(rm3); free(rv3);
  fixture_fini(&f);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(forward_and_backward_match_reference),
      cmocka_unit_test(gradients_match_finite_differences),
      cmocka_unit_test(fused_relu_gradients_match_finite_differences),
      cmocka_unit_test(train_updates_running_stats_and_eval_uses_them),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
