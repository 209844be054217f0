/* The channels-last batch norm kernels of the CUDA engine (nn/cuda/cuda_bn.cu).
 *
 * CPU half (runs everywhere): the kernels' thread-to-(row, channel) map
 * (px__bn_geom in nn/cuda/px_cuda_index.h, the same code on the host)
 * covers every value exactly once and writes every per-block-row partial
 * sum exactly once, for vector and scalar widths, small and ResNet-50
 * shapes and several GPU sizes; ResNet-50's shapes at batch 128 get enough
 * blocks to fill an H100/H200 (132 SMs) and reads whole 128-byte lines,
 * with partial sums small beside the activation; the vector width needs C a
 * multiple of it and aligned tensors.
 * GPU half (skips without a GPU): training forward and backward in NHWC
 * f32 and bf16, ReLU fused or not, for C a multiple of the vector width
 * (64, 24, 256, 2048) and not (3, 6), large N*H*W and 7x7, and with
 * tensors 2 or 4 bytes off 16-byte alignment (the scalar path for a vector
 * C), against the CPU reference on the same (bf16-rounded) inputs; two
 * runs give the same bits (no atomics), and the backward in place (dx
 * aliasing dy) gives the out-of-place bits; px_batchnorm_recompute after
 * the backward gives the training forward's y bit for bit (on the CPU
 * reference too). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "nn/cuda/px_cuda_index.h"
#include "prunex/cuda.h"
#include "prunex/ops.h"
#include "prunex/ops_internal.h"
#include "px_test_util.h"

#include "ops_test_util.h"
#include "gpu_fmt_util.h"

#define REQUIRE_GPU()                                                \
  do {                                                               \
    if (!px_test_gpu_ready("GPU channels-last batch norm")) skip(); \
  } while (0)

/* ---- CPU half: the kernels' geometry ------------------------------------------------- */

/* Every thread of g's grid walks its rows and channels as the kernels do;
 * every value of rows x c is visited once, every block's partial-sum items
 * land once on part[by][k][c], and the grid is no larger than the rows need. */
static void check_geometry(const px__bn_geom_t *g) {
  assert_int_equal(g->tx * g->ty, PX__BN_THREADS);
  assert_true(g->tx >= 1 && g->tx <= 32 && (g->tx & (g->tx - 1)) == 0);
  assert_true(g->gx * g->tx >= g->cols && (g->gx - 1) * g->tx < g->cols);
  assert_true(g->gy >= 1 && g->gy <= 65535 && (g->gy - 1) * g->ty < g->rows);
  assert_int_equal(g->cols * g->vec, g->c);
  const size_t n = (size_t)(g->rows * g->c), np = (size_t)(g->gy * 2 * g->c);
  unsigned char *seen = calloc(n, 1), *part = calloc(np, 1);
  assert_true(seen && part);
  for (int64_t bx = 0; bx < g->gx; bx++)
    for (int64_t by = 0; by < g->gy; by++) {
      for (int ty = 0; ty < g->ty; ty++)
        for (int tx = 0; tx < g->tx; tx++) {
          const int64_t col = px__bn_col(g, bx, tx);
          if (col >= g->cols) continue;
          for (int64_t r = px__bn_row0(g, by, ty); r < g->rows; r += px__bn_step(g))
            for (int k = 0; k < g->vec; k++) seen[r * g->c + col * g->vec + k]++;
        }
      const int w = g->tx * g->vec;
      for (int item = 0; item < 2 * w; item++) {
        int k;
        int64_t ch;
        const int ok = px__bn_item(g, bx, item, &k, &ch);
        assert_int_equal(ok, ch < g->c);
        if (!ok) continue;
        /* the shared-memory slot it adds is thread column item % w / vec's */
        assert_int_equal(ch / g->vec, px__bn_col(g, bx, item % w / g->vec));
        assert_true(k == 0 || k == 1);
        part[(by * 2 + k) * g->c + ch]++;
      }
    }
  for (size_t i = 0; i < n; i++)
    if (seen[i] != 1) fail_msg("rows %lld c %lld vec %d: value %zu visited %d times",
                               (long long)g->rows, (long long)g->c, g->vec, i, seen[i]);
  for (size_t i = 0; i < np; i++)
    if (part[i] != 1) fail_msg("rows %lld c %lld vec %d: partial sum %zu written %d times",
                               (long long)g->rows, (long long)g->c, g->vec, i, part[i]);
  free(seen);
  free(part);
}

static void geometry_covers_every_value_once(void **state) {
  (void)state;
  const int64_t shapes[][2] = {{1, 1},    {1, 3},     {7, 3},    {49, 24},  {300, 24}, {98, 6},
                               {2, 64},   {1000, 64}, {37, 136}, {49, 2048}, {3, 40},  {5000, 8},
                               {6272, 2048}, {25088, 512}};
  const int64_t sms[] = {1, 16, 132};
  for (size_t s = 0; s < sizeof shapes / sizeof shapes[0]; s++)
    for (int esize = 2; esize <= 4; esize += 2)
      for (int aligned = 0; aligned < 2; aligned++)
        for (size_t m = 0; m < sizeof sms / sizeof sms[0]; m++)
          for (int per_sm = PX__BN_SUM_PER_SM; per_sm <= PX__BN_EW_PER_SM; per_sm += 4) {
            const int vec = px__bn_vec(shapes[s][1], esize, aligned);
            const px__bn_geom_t g =
                px__bn_geom(shapes[s][0], shapes[s][1], vec, esize, sms[m] * per_sm);
            check_geometry(&g);
          }
}

/* ResNet-50 at batch 128: every batch norm's grid fills 132 SMs (4 blocks
 * an SM for the sums, 8 for the element-wise passes) with whole lines a
 * row and the partial sums at most an eighth of a pass over the
 * activation, and the largest (128x56x56 rows of 64 channels) is walked
 * once. */
static void resnet50_shapes_fill_the_gpu(void **state) {
  (void)state;
  const int64_t shapes[][2] = {{128 * 112 * 112, 64}, {128 * 56 * 56, 64}, {128 * 56 * 56, 256},
                               {128 * 28 * 28, 128},  {128 * 28 * 28, 512}, {128 * 14 * 14, 256},
                               {128 * 14 * 14, 1024}, {128 * 7 * 7, 512},   {128 * 7 * 7, 2048}};
  for (size_t s = 0; s < sizeof shapes / sizeof shapes[0]; s++)
    for (int esize = 2; esize <= 4; esize += 2)
      for (int per_sm = PX__BN_SUM_PER_SM; per_sm <= PX__BN_EW_PER_SM; per_sm += 4) {
        const int vec = px__bn_vec(shapes[s][1], esize, 1);
        assert_int_equal(vec, 16 / esize);
        const px__bn_geom_t g = px__bn_geom(shapes[s][0], shapes[s][1], vec, esize, 132 * per_sm);
        assert_true(g.gx * g.gy >= 132 * per_sm);
        assert_true(g.tx * g.vec * esize >= 128 || g.tx >= g.cols); /* whole 128-byte lines */
        /* the reductions' partial sums (gy x 2 f64 a channel): at most an
         * eighth of one pass over the activation */
        if (per_sm == PX__BN_SUM_PER_SM) assert_true(g.gy * 2 * 8 * 8 <= g.rows * esize);
      }
  const px__bn_geom_t big = px__bn_geom(128 * 56 * 56, 64, 8, 2, 132 * PX__BN_EW_PER_SM);
  check_geometry(&big);
}

static void vector_width_needs_a_multiple_and_alignment(void **state) {
  (void)state;
  assert_int_equal(px__bn_vec(64, 2, 1), 8);
  assert_int_equal(px__bn_vec(24, 2, 1), 8);
  assert_int_equal(px__bn_vec(64, 2, 0), 1);
  assert_int_equal(px__bn_vec(12, 2, 1), 1);
  assert_int_equal(px__bn_vec(3, 2, 1), 1);
  assert_int_equal(px__bn_vec(12, 4, 1), 4);
  assert_int_equal(px__bn_vec(6, 4, 1), 1);
  assert_int_equal(px__bn_vec(2048, 4, 0), 1);
}

/* ---- GPU half ------------------------------------------------------------------------- */

typedef struct {
  float *y, *mean, *var, *rm, *rv, *dx, *dscale, *dshift;
} bn_res_t;

enum { BN_OUTS = 8 };

static float **res_fields(bn_res_t *r) { return (float **)r; }

static void free_res(bn_res_t *r) {
  for (int i = 0; i < BN_OUTS; i++) free(res_fields(r)[i]);
}

typedef struct {
  int64_t n, c, h, w;
  int relu;
} bn_case_t;

/* The host inputs of a case: x, dy (NCHW), scale, shift, running mean and var. */
typedef struct {
  float *x, *dy, *sc, *sf, *rm, *rv;
} bn_in_t;

/* A CPU or GPU tensor of spec with host data h (NULL: uninitialised); on
 * the GPU `skew` bytes past a 16-byte aligned address (0: as allocated). */
static void bn_tensor(px_ops_t *ops, px_tensor_t *t, const px_tensor_t *spec,
                      const float *h, size_t skew, px_tensor_t *hold) {
  if (!ops || !spec->layout || !skew) {
    memset(hold, 0, sizeof *hold);
    if (ops && spec->layout) dev_tensor(ops, t, spec, h);
    else make_tensor(t, spec, h);
    return;
  }
  /* hold owns the memory; t is a view skew bytes into it */
  px_tensor_t big = *spec;
  big.nbytes += 16;
  dev_tensor(ops, hold, &big, NULL);
  px_tensor_t tmp;
  dev_tensor(ops, &tmp, spec, h);
  *t = *spec;
  t->data = (char *)hold->data + skew;
  t->flags = 0;
  assert_ok(px_tensor_copy(t, &tmp));
  px_tensor_release(&tmp);
}

static px_tensor_t act_spec(px_ops_t *ops, int gpu, fmt_t f, const bn_case_t *k) {
  if (gpu) return spec_in(ops, f, k->n, k->c, k->h, k->w);
  px_tensor_t s;
  assert_ok(px_tensor_init4(&s, px_device_cpu(), k->n, k->c, k->h, k->w));
  return s;
}

/* One training forward and backward of case k (on the GPU in format f,
 * activations `skew` bytes off alignment; in_place: dx is dy), outputs as
 * plain NCHW host values. */
static bn_res_t run_case(px_ops_t *ops, int gpu, fmt_t f, const bn_case_t *k, const bn_in_t *in,
                         size_t skew, int in_place) {
  const px_tensor_t xs = act_spec(ops, gpu, f, k);
  px_batchnorm_params_t prm = {1e-5f, 0.1f, k->relu};
  px_batchnorm_t *op = NULL;
  assert_ok(px_batchnorm_create(ops, &xs, &prm, &op));
  px_tensor_t ys, cs, wss;
  px_batchnorm_y_spec(op, &ys);
  px_batchnorm_c_spec(op, &cs);
  px_batchnorm_ws_spec(op, &wss);
  px_ops_t *g = gpu ? ops : NULL;
  px_tensor_t x, y, dy, dx, hold[4], mean, var, sc, sf, rm, rv, dsc, dsh, ws;
  bn_tensor(g, &x, &xs, in->x, skew, &hold[0]);
  bn_tensor(g, &y, &ys, NULL, skew, &hold[1]);
  bn_tensor(g, &dy, &ys, in->dy, skew, &hold[2]);
  bn_tensor(g, &dx, &xs, NULL, skew, &hold[3]);
  make_tensor(&mean, &cs, NULL);
  make_tensor(&var, &cs, NULL);
  make_tensor(&sc, &cs, in->sc);
  make_tensor(&sf, &cs, in->sf);
  make_tensor(&rm, &cs, in->rm);
  make_tensor(&rv, &cs, in->rv);
  make_tensor(&dsc, &cs, NULL);
  make_tensor(&dsh, &cs, NULL);
  make_tensor(&ws, &wss, NULL);
  px_tensor_t *wsp = wss.nbytes ? &ws : NULL, *dxp = in_place ? &dy : &dx;
  assert_ok(px_batchnorm_forward_train(op, &y, &mean, &var, wsp, &x, &sc, &sf, &rm, &rv));
  assert_ok(px_batchnorm_backward(op, dxp, &dsc, &dsh, &dy, &x, &sc, &sf, &mean, &var, wsp));
  assert_ok(px_ops_sync(ops));
  bn_res_t r = {gpu ? host_of(ops, &y) : read_host(&y), read_host(&mean), read_host(&var),
                read_host(&rm), read_host(&rv), gpu ? host_of(ops, dxp) : read_host(dxp),
                read_host(&dsc), read_host(&dsh)};
  /* the training forward's y again (the model's recomputation), after the backward */
  assert_true(px_batchnorm_can_recompute(op));
  assert_ok(px_batchnorm_recompute(op, &dx, &x, &sc, &sf, &mean, &var));
  assert_ok(px_ops_sync(ops));
  float *again = gpu ? host_of(ops, &dx) : read_host(&dx);
  if (memcmp(again, r.y, px_tensor_numel(&xs) * sizeof(float)) != 0)
    fail_msg("batch norm recompute: y differs from the training forward's (n %lld c %lld relu %d)",
             (long long)k->n, (long long)k->c, k->relu);
  free(again);
  px_tensor_t *all[] = {&x,  &y,  &dy,  &dx,  &mean, &var, &sc, &sf, &rm, &rv,
                        &dsc, &dsh, &ws, &hold[0], &hold[1], &hold[2], &hold[3]};
  for (size_t i = 0; i < sizeof all / sizeof all[0]; i++) px_tensor_release(all[i]);
  px_batchnorm_destroy(op);
  return r;
}

/* GPU results a against the CPU reference: the tolerances of test_gpu_ops
 * (f32) and test_gpu_graph (bf16), each error relative to the largest
 * value; with the ReLU, dx by its relative L2 error (a pre-activation
 * within rounding of 0 may take the other side and pass, or stop, its
 * whole dy). */
static void expect_like_cpu(fmt_t f, const bn_case_t *k, bn_res_t *a, bn_res_t *ref) {
  const size_t n = (size_t)(k->n * k->c * k->h * k->w), c = (size_t)k->c;
  expect_rel("bn y", f, a->y, ref->y, n, tol_of(f, 2e-4));
  expect_rel("bn mean", f, a->mean, ref->mean, c, tol_of(f, 1e-5));
  expect_rel("bn var", f, a->var, ref->var, c, tol_of(f, 2e-4));
  expect_rel("bn running mean", f, a->rm, ref->rm, c, tol_of(f, 1e-5));
  expect_rel("bn running var", f, a->rv, ref->rv, c, tol_of(f, 2e-5));
  expect_rel("bn dscale", f, a->dscale, ref->dscale, c, tol_of(f, 2e-3));
  expect_rel("bn dshift", f, a->dshift, ref->dshift, c, tol_of(f, 2e-3));
  if (!k->relu) {
    expect_rel("bn dx", f, a->dx, ref->dx, n, tol_of(f, 2e-3));
    return;
  }
  const double e = px_test_rel_l2(a->dx, ref->dx, n), tol = f == FMT_BF16 ? 2e-2 : 2e-3;
  printf("bn dx (%s, relu): relative L2 error %.3g\n", fmt_name[f], e);
  if (!(e <= tol)) fail_msg("bn dx (%s, relu): relative L2 error %g > %g", fmt_name[f], e, tol);
}

static void expect_same_bits(const char *what, const bn_case_t *k, bn_res_t *a, bn_res_t *b,
                             int only_dx) {
  const size_t n = (size_t)(k->n * k->c * k->h * k->w), c = (size_t)k->c;
  for (int i = only_dx ? 5 : 0; i < (only_dx ? 6 : BN_OUTS); i++) {
    const size_t len = (i == 0 || i == 5 ? n : c) * sizeof(float);
    if (memcmp(res_fields(a)[i], res_fields(b)[i], len) != 0)
      fail_msg("%s: output %d differs (n %lld c %lld relu %d)", what, i, (long long)k->n,
               (long long)k->c, k->relu);
  }
}

static const bn_case_t bn_cases[] = {
    {4, 64, 5, 5, 0},   {4, 64, 5, 5, 1},    /* C a multiple of 8: vectors */
    {2, 24, 3, 7, 0},   {2, 24, 3, 7, 1},    /* 3 bf16 / 6 f32 vector columns */
    {8, 3, 3, 3, 1},    {3, 6, 4, 4, 0},     /* the scalar path */
    {16, 64, 56, 56, 1},                     /* 50176 rows: the grids fill the GPU */
    {4, 2048, 7, 7, 1}, {8, 256, 7, 7, 0},   /* 7x7: the grids as small as the rows */
};

static bn_in_t make_inputs(const bn_case_t *k, fmt_t f, uint64_t seed) {
  px_test_rng_t rng;
  px_test_rng_seed(&rng, seed);
  const size_t n = (size_t)(k->n * k->c * k->h * k->w), c = (size_t)k->c;
  bn_in_t in = {rand_host(&rng, n, 2.0f, 0.5f), rand_host(&rng, n, 1.0f, 0.0f),
                rand_host(&rng, c, 0.5f, 1.0f), rand_host(&rng, c, 0.5f, 0.0f),
                rand_host(&rng, c, 0.1f, 0.0f), rand_host(&rng, c, 0.1f, 1.0f)};
  round_if(f, in.x, n); /* the CPU sees the values the GPU holds */
  round_if(f, in.dy, n);
  return in;
}

static void nhwc_batch_norm_matches_cpu_and_repeats_bit_for_bit(void **state) {
  (void)state;
  REQUIRE_GPU();
  px_ops_t *cpu = new_ops();
  for (int fi = FMT_NHWC; fi <= FMT_BF16; fi++) {
    const fmt_t f = (fmt_t)fi;
    px_ops_t *gpu = gpu_ops(f);
    for (size_t i = 0; i < sizeof bn_cases / sizeof bn_cases[0]; i++) {
      const bn_case_t *k = &bn_cases[i];
      printf("-- %s: %lld x %lld x %lld x %lld, relu %d\n", fmt_name[f], (long long)k->n,
             (long long)k->c, (long long)k->h, (long long)k->w, k->relu);
      bn_in_t in = make_inputs(k, f, 100 + i);
      bn_res_t ref = run_case(cpu, 0, FMT_NCHW, k, &in, 0, 0);
      bn_res_t a = run_case(gpu, 1, f, k, &in, 0, 0), b = run_case(gpu, 1, f, k, &in, 0, 0);
      expect_like_cpu(f, k, &a, &ref);
      expect_same_bits("two runs", k, &a, &b, 0);
      bn_res_t ip = run_case(gpu, 1, f, k, &in, 0, 1);
      expect_same_bits("dx in place", k, &ip, &a, 1);
      /* off 16-byte alignment: the scalar path, whatever C */
      bn_res_t s = run_case(gpu, 1, f, k, &in, f == FMT_BF16 ? 2 : 4, 0);
      expect_like_cpu(f, k, &s, &ref);
      bn_res_t *all[] = {&ref, &a, &b, &ip, &s};
      for (size_t j = 0; j < sizeof all / sizeof all[0]; j++) free_res(all[j]);
      float *ins[] = {in.x, in.dy, in.sc, in.sf, in.rm, in.rv};
      for (size_t j = 0; j < sizeof ins / sizeof ins[0]; j++) free(ins[j]);
    }
    px_ops_destroy(gpu);
  }
  px_ops_destroy(cpu);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(geometry_covers_every_value_once),
      cmocka_unit_test(resnet50_shapes_fill_the_gpu),
      cmocka_unit_test(vector_width_needs_a_multiple_and_alignment),
      cmocka_unit_test(nhwc_batch_norm_matches_cpu_and_repeats_bit_for_bit),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
