/* Batch normalisation on the oneDNN backend: training forward (output,
 * batch statistics, PyTorch running-statistics update with the unbiased
 * variance), inference forward and backward against the reference, with
 * and without the fused ReLU, on plain and blocked inputs; one training
 * step at resnet20's shapes against float64; the recomputation of the
 * training forward's output (px_batchnorm_recompute: the same bits after
 * a backward and an inference, nothing else touched, refused before any
 * training forward); gradients against
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

#include "nn/cpu/px_cpu_int.h"
#include "nn/cpu/px_ref.h"
#include "prunex/ops.h"
#include "prunex/ops_internal.h"
#include "px_test_util.h"

#include "ops_test_util.h"

static int fixture_threads = 2; /* the ops' thread count */

/* One BN layer with all its tensors, host copies of the inputs. */
typedef struct {
  px_ops_t *ops;
  px_batchnorm_t *bn;
  px_batchnorm_params_t p;
  int64_t n, c, h, w;
  px_tensor_t x, y, mean, var, ws, scale, shift, rmean, rvar, dy, dx, dscale, dshift;
  float *hx, *hscale, *hshift, *hrmean, *hrvar, *hdy;
} bn_fixture_t;

/* layout 2: the channels-last (acdb) map a compact training model's convolutions write
 * (ops->conv_nhwc, strategy/compact_train.c); 0 plain, 1 blocked */
static void layout_spec(px_ops_t *ops, int layout, int64_t n, int64_t c, int64_t h, int64_t w,
                        px_tensor_t *spec) {
  ops->conv_nhwc = layout == 2;
  input_spec(ops, layout != 0, n, c, h, w, spec);
  ops->conv_nhwc = 0;
  assert_true(layout != 2 || strcmp(spec->layout->name, "acdb") == 0);
}

static void fixture_init(bn_fixture_t *f, int blocked, int64_t n, int64_t c, int64_t h, int64_t w,
                         int relu, uint64_t seed) {
  memset(f, 0, sizeof *f);
  assert_ok(px_ops_create(px_device_cpu(), fixture_threads, &f->ops));
  f->n = n; f->c = c; f->h = h; f->w = w;
  f->p = (px_batchnorm_params_t){.eps = 1e-5f, .momentum = 0.1f, .fuse_relu = relu};
  px_test_rng_t rng;
  px_test_rng_seed(&rng, seed);
  px_tensor_t xs, cs, wss;
  layout_spec(f->ops, blocked, n, c, h, w, &xs);
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

  assert_true(px_batchnorm_can_recompute(f.bn));
  assert_int_equal(px_batchnorm_recompute(f.bn, &f.dx, &f.x, &f.scale, &f.shift, &f.mean, &f.var),
                   PX_ERR_STATE);
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

  /* the training forward's y once more, after the backward and the inference */
  assert_ok(px_batchnorm_recompute(f.bn, &f.dx, &f.x, &f.scale, &f.shift, &f.mean, &f.var));
  float *ay = read_host(&f.dx), *arm = read_host(&f.rmean), *arv = read_host(&f.rvar);
  assert_memory_equal(ay, gy, nx * sizeof(float));
  assert_memory_equal(arm, grm, nc * sizeof(float));
  assert_memory_equal(arv, grv, nc * sizeof(float));
  free(ay); free(arm); free(arv);

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
  run_case(1, 16, 32, 24, 20, 1, 7); /* larger maps; the 1.6 MB ones run on both threads */
  run_case(0, 16, 32, 24, 20, 0, 8);
  /* channels-last: 32 channels (a task per image and 16 channels, a vector per pixel), 8 (a
     task per image, one run), 21 (a task per image, rows of 21 channels in vectors, the last
     partial), 1 */
  run_case(2, 4, 32, 5, 7, 0, 9);
  run_case(2, 4, 32, 5, 7, 1, 10);
  run_case(2, 3, 8, 6, 5, 1, 11);
  run_case(2, 3, 8, 6, 5, 0, 12);
  run_case(2, 3, 21, 5, 7, 1, 13);
  run_case(2, 16, 64, 12, 10, 1, 14); /* 1.2 MB: on both threads */
  run_case(2, 2, 576, 4, 4, 0, 15); /* MobileNetV2 features.13 (4 x 4 maps, 2 images) */
  run_case(2, 3, 40, 9, 9, 1, 16);  /* EfficientNet-B0's 40: two whole vectors and a half, ReLU */
  run_case(2, 5, 116, 8, 8, 0, 17); /* ShuffleNetV2's 116, on both threads */
  run_case(1, 32, 16, 28, 28, 1, 9);
  run_case(1, 32, 64, 7, 7, 1, 10);
  run_case(1, 32, 32, 14, 14, 0, 11);
}

/* ---- against float64 at resnet20's shapes ------------------------------------
 * The whole training step of one layer (forward with the fused ReLU, batch
 * statistics, backward) in double on the plain NCHW host copies, the
 * precision PyTorch's float64 step has (the yardstick of the gradient tables
 * in docs/performance.md). */
typedef struct {
  double *y, *mean, *var, *dx, *dscale, *dshift;
} bn_f64_t;

static void f64_step(bn_f64_t *r, const bn_fixture_t *f) {
  const int64_t n = f->n, c = f->c, hw = f->h * f->w;
  const double cnt = (double)(n * hw);
  for (int64_t ch = 0; ch < c; ch++) {
    double s = 0.0, q = 0.0, sg = 0.0, sgx = 0.0;
    for (int64_t i = 0; i < n; i++)
      for (int64_t p = 0; p < hw; p++) s += f->hx[(i * c + ch) * hw + p];
    const double mu = s / cnt;
    for (int64_t i = 0; i < n; i++)
      for (int64_t p = 0; p < hw; p++) {
        const double d = f->hx[(i * c + ch) * hw + p] - mu;
        q += d * d;
      }
    const double var = q / cnt, rstd = 1.0 / sqrt(var + (double)f->p.eps);
    const double a = (double)f->hscale[ch] * rstd;
    for (int64_t i = 0; i < n; i++)
      for (int64_t p = 0; p < hw; p++) {
        const int64_t k = (i * c + ch) * hw + p;
        const double v = (f->hx[k] - mu) * a + f->hshift[ch];
        r->y[k] = f->p.fuse_relu && v <= 0.0 ? 0.0 : v;
        const double g = f->p.fuse_relu && v <= 0.0 ? 0.0 : f->hdy[k];
        sg += g;
        sgx += g * (f->hx[k] - mu);
      }
    for (int64_t i = 0; i < n; i++)
      for (int64_t p = 0; p < hw; p++) {
        const int64_t k = (i * c + ch) * hw + p;
        const double g = f->p.fuse_relu && r->y[k] <= 0.0 ? 0.0 : f->hdy[k];
        r->dx[k] = (g - sg / cnt - (f->hx[k] - mu) * rstd * rstd * sgx / cnt) * a;
      }
    r->mean[ch] = mu;
    r->var[ch] = var;
    r->dscale[ch] = sgx * rstd;
    r->dshift[ch] = sg;
  }
}

/* The largest |got - want| over the largest |want|: the measure the
 * gradient tables of docs/performance.md use. */
static double f64_dist(const char *what, const float *got, const double *want, size_t n) {
  double d = 0.0, m = 0.0;
  for (size_t i = 0; i < n; i++) {
    d = fmax(d, fabs((double)got[i] - want[i]));
    m = fmax(m, fabs(want[i]));
  }
  const double e = m > 0.0 ? d / m : d;
  print_message("  %-6s %.2e\n", what, e);
  return e;
}

/* One training step on threads threads on inputs moved by offset; returns the
 * host copies of y and dx (the caller frees them) after checking every output
 * within tol of float64. */
static void f64_case(int64_t n, int64_t c, int64_t hw, int threads, float offset, double tol,
                     float **y_out, float **dx_out) {
  bn_fixture_t f;
  fixture_threads = threads;
  fixture_init(&f, 1, n, c, hw, hw, 1, 40 + (uint64_t)c);
  fixture_threads = 2;
  const size_t nx = (size_t)(n * c * hw * hw), nc = (size_t)c;
  /* offset moves the mean: 8.0 makes it large against the spread, as after
   * block 2's depthwise conv in the MobileNet-style test net, where a one-pass
   * variance loses digits */
  for (size_t i = 0; i < nx; i++) f.hx[i] += offset;
  assert_ok(px_tensor_copy_from_host(&f.x, f.hx, nx * 4));
  bn_f64_t r = {malloc(nx * 8), malloc(nc * 8), malloc(nc * 8), malloc(nx * 8), malloc(nc * 8),
                malloc(nc * 8)};
  f64_step(&r, &f);
  assert_ok(train(&f));
  assert_ok(px_batchnorm_backward(f.bn, &f.dx, &f.dscale, &f.dshift, &f.dy, &f.x, &f.scale,
                                  &f.shift, &f.mean, &f.var, &f.ws));
  float *gy = read_host(&f.y), *gm = read_host(&f.mean), *gv = read_host(&f.var);
  float *gdx = read_host(&f.dx), *gds = read_host(&f.dscale), *gdb = read_host(&f.dshift);
  print_message("%lld x %lld x %lld x %lld, mean %.1f, %d threads, distance to float64:\n",
                (long long)n, (long long)c, (long long)hw, (long long)hw, 0.5 + offset, threads);
  assert_true(f64_dist("y", gy, r.y, nx) < tol);
  assert_true(f64_dist("mean", gm, r.mean, nc) < tol);
  assert_true(f64_dist("var", gv, r.var, nc) < tol);
  assert_true(f64_dist("dx", gdx, r.dx, nx) < tol);
  assert_true(f64_dist("dscale", gds, r.dscale, nc) < tol);
  assert_true(f64_dist("dshift", gdb, r.dshift, nc) < tol);
  *y_out = gy;
  *dx_out = gdx;
  free(gm); free(gv); free(gds); free(gdb);
  free(r.y); free(r.mean); free(r.var); free(r.dx); free(r.dscale); free(r.dshift);
  fixture_fini(&f);
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

/* resnet20's batch norms at batch 128 (Fashion-MNIST's 28 x 28 maps) on
 * inputs of standard deviation 2 and mean 0.5, then mean 8.5: every output
 * within 5e-7 of float64 (relative to the largest), on one thread and on two,
 * and one thread and two runs on two threads give the same bits (the partial
 * sums are added in a fixed order). oneDNN 2.6's batch norm was at most
 * 8.2e-6 off at mean 0.5 (dshift, 16 x 28 x 28, one thread) and 0.30 of the
 * largest dx at mean 8.5 (docs/performance.md); ours is at most 2.2e-7 off. */
static void matches_float64_at_resnet20_shapes(void **state) {
  (void)state;
  const int64_t shapes[3][2] = {{16, 28}, {32, 14}, {64, 7}};
  const float offsets[2] = {0.0f, 8.0f};
  for (int s = 0; s < 3; s++)
    for (int o = 0; o < 2; o++) {
      float *y[3], *dx[3];
      const int threads[3] = {1, 2, 2};
      for (int k = 0; k < 3; k++)
        f64_case(128, shapes[s][0], shapes[s][1], threads[k], offsets[o], 5e-7, &y[k], &dx[k]);
      const size_t nx = (size_t)(128 * shapes[s][0] * shapes[s][1] * shapes[s][1]);
      for (int k = 1; k < 3; k++) {
        assert_memory_equal(y[0], y[k], nx * 4);
        assert_memory_equal(dx[0], dx[k], nx * 4);
      }
      for (int k = 0; k < 3; k++) {
        free(y[k]);
        free(dx[k]);
      }
    }
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(forward_and_backward_match_reference),
      cmocka_unit_test(matches_float64_at_resnet20_shapes),
      cmocka_unit_test(gradients_match_finite_differences),
      cmocka_unit_test(fused_relu_gradients_match_finite_differences),
      cmocka_unit_test(train_updates_running_stats_and_eval_uses_them),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
