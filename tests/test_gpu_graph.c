/* Imported graphs on the CUDA engine: the graph operators of
 * nn/px_graph_ops.h (every activation, the squeeze-and-excitation Mul, Concat)
 * and windowed max / average pooling (ceil_mode, asymmetric padding and
 * dilation too), LayerNorm over channels, in every CUDA activation format.
 *
 * CPU half (runs everywhere): the index maps the CUDA kernels use
 * (nn/cuda/px_cuda_index.h, the same code on the host) against brute-force
 * enumeration; the ops-table entries on the CPU engine give exactly the
 * plain loops' bits (the model's CPU path is unchanged); bad arguments are
 * refused naming the op and the argument.
 * GPU half (skips without a GPU): each kernel against the CPU reference on
 * random data, in plain f32 NCHW, NHWC f32 and NHWC bf16 (inputs rounded to
 * bf16 first, bf16 tolerances), and grouped / depthwise convolutions on
 * cuDNN against oneDNN; then one training step of the imported
 * VGG-, MobileNet-, SE-ResNet-style and activations nets (tests/onnx_import_nets.py) on
 * CUDA (NHWC, NCHW and bf16) against the CPU engine. */
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

#include "arch/px_layer_defs.h"
#include "nn/cuda/px_cuda_index.h"
#include "nn/px_graph_ops.h"
#include "nn/px_ops_int.h"
#include "prunex/cuda.h"
#include "prunex/nn.h"
#include "prunex/ops.h"
#include "prunex/ops_internal.h"
#include "px_test_util.h"

#include "ops_test_util.h"
#include "gpu_fmt_util.h"

#define REQUIRE_GPU()                                            \
  do {                                                           \
    if (!px_test_gpu_ready("GPU graph-operator checks")) skip(); \
  } while (0)

/* ---- CPU half: the kernels' index maps ----------------------------------------------- */

static void index_maps_match_brute_force(void **state) {
  (void)state;
  const int64_t shapes[][3] = {{2, 3, 20}, {1, 7, 1}, {3, 1, 4}, {2, 5, 6}}; /* N, C, HW */
  for (size_t s = 0; s < sizeof shapes / sizeof shapes[0]; s++) {
    const int64_t nb = shapes[s][0], c = shapes[s][1], hw = shapes[s][2], total = nb * c * hw;
    for (int nhwc = 0; nhwc < 2; nhwc++) {
      unsigned char *seen = calloc((size_t)total, 1);
      assert_non_null(seen);
      for (int64_t n = 0; n < nb; n++)
        for (int64_t ch = 0; ch < c; ch++)
          for (int64_t p = 0; p < hw; p++) {
            const int64_t want = nhwc ? (n * hw + p) * c + ch : (n * c + ch) * hw + p;
            const int64_t i = px__act_at(n, ch, p, c, hw, nhwc);
            assert_int_equal(i, want);
            seen[i]++;
            int64_t n2, ch2, p2;
            px__act_split(i, c, hw, nhwc, &n2, &ch2, &p2);
            assert_int_equal(n2, n);
            assert_int_equal(ch2, ch);
            assert_int_equal(p2, p);
            assert_int_equal(px__act_row(i, c, hw, nhwc), n * c + ch);
          }
      for (int64_t i = 0; i < total; i++) assert_int_equal(seen[i], 1); /* a permutation */
      free(seen);
    }
  }
}

/* The pooling backward gathers from the outputs px__pool_covering names:
 * exactly those whose window holds the input, for every geometry the
 * create call accepts (padding below the kernel). */
static void pool_covering_matches_brute_force(void **state) {
  (void)state;
  int checked = 0;
  for (int k = 1; k <= 4; k++)
    for (int s = 1; s <= 3; s++)
      for (int p = 0; p < k; p++)
        for (int64_t in = 1; in <= 9; in++) {
          const int64_t span = in + 2 * p - k;
          if (span < 0) continue;
          const int64_t out = span / s + 1;
          for (int64_t i = 0; i < in; i++) {
            int64_t lo, hi, blo = -1, bhi = -2;
            px__pool_covering(i, k, s, p, out, &lo, &hi);
            for (int64_t o = 0; o < out; o++)
              if (o * s - p <= i && i <= o * s - p + k - 1) {
                if (blo < 0) blo = o;
                bhi = o;
              }
            if (blo < 0) {
              assert_true(lo > hi); /* no window covers it (stride above the kernel) */
            } else {
              assert_int_equal(lo, blo);
              assert_int_equal(hi, bhi);
            }
            checked++;
          }
        }
  assert_true(checked > 500);
}

/* ---- CPU half: the table entries on the CPU engine ---------------------------------- */

enum { N = 3, CA = 5, CB = 3, H = 6, W = 7 };

static void plain_tensor(px_tensor_t *t, int64_t n, int64_t c, int64_t h, int64_t w,
                         const float *host) {
  px_tensor_t s;
  assert_ok(px_tensor_init4(&s, px_device_cpu(), n, c, h, w));
  make_tensor(t, &s, host);
}

static void expect_bits(const char *what, const px_tensor_t *t, const float *want, size_t n) {
  if (memcmp(t->data, want, n * sizeof *want)) fail_msg("%s: not the plain loop's bits", what);
}

/* The random maps of the graph-operator checks (N x CA x H x W and N x CB x H x W), a gate, and
 * room for two results. */
typedef struct {
  size_t na, nb;
  float *x, *dy, *g, *b, *want, *want2;
} graph_data_t;

static void graph_data(graph_data_t *d, uint64_t seed) {
  px_test_rng_t rng;
  px_test_rng_seed(&rng, seed);
  d->na = (size_t)N * CA * H * W;
  d->nb = (size_t)N * CB * H * W;
  d->x = rand_host(&rng, d->na, 3.0f, 0.0f);
  d->dy = rand_host(&rng, d->na + d->nb, 1.0f, 0.0f);
  d->g = rand_host(&rng, (size_t)N * CA, 1.0f, 0.5f);
  d->b = rand_host(&rng, d->nb, 1.0f, 0.0f);
  d->want = malloc((d->na + d->nb) * sizeof *d->want);
  d->want2 = malloc((d->na + d->nb) * sizeof *d->want2);
  assert_non_null(d->want);
  assert_non_null(d->want2);
}

static void cpu_entries_give_the_plain_loops_bits(void **state) {
  (void)state;
  px_ops_t *ops = new_ops();
  graph_data_t d;
  graph_data(&d, 11);
  const size_t na = d.na, nb = d.nb;
  float *x = d.x, *dy = d.dy, *g = d.g, *b = d.b, *want = d.want, *want2 = d.want2;
  px_tensor_t tx, ty, tdy, tdx, tg, tdg, tb, tdb, tcat, tdcat;
  plain_tensor(&tx, N, CA, H, W, x);
  plain_tensor(&ty, N, CA, H, W, NULL);
  plain_tensor(&tdy, N, CA, H, W, dy);
  plain_tensor(&tdx, N, CA, H, W, NULL);
  plain_tensor(&tg, N, CA, 1, 1, g);
  plain_tensor(&tdg, N, CA, 1, 1, NULL);
  plain_tensor(&tb, N, CB, H, W, b);
  plain_tensor(&tdb, N, CB, H, W, NULL);
  plain_tensor(&tcat, N, CA + CB, H, W, NULL);
  plain_tensor(&tdcat, N, CA + CB, H, W, dy);
  for (int a = PX__ACT_RELU; a < PX__ACT_COUNT; a++) {
    assert_ok(px__ops_act_forward(ops, &ty, &tx, (px__act_t)a, 0.1f));
    px__act_forward(want, x, na, (px__act_t)a, 0.1f);
    expect_bits(px__act_onnx_name((px__act_t)a), &ty, want, na);
    assert_ok(px__ops_act_backward(ops, &tdx, &tdy, &tx, &ty, (px__act_t)a, 0.1f));
    px__act_backward(want2, dy, x, want, na, (px__act_t)a, 0.1f);
    expect_bits("activation backward", &tdx, want2, na);
  }
  assert_ok(px__ops_mul_forward(ops, &ty, &tx, &tg));
  px__mul_forward(want, x, g, (size_t)N * CA, (size_t)H * W);
  expect_bits("mul forward", &ty, want, na);
  assert_ok(px__ops_mul_backward(ops, &tdx, &tdg, &tdy, &tx, &tg));
  px__mul_backward(want, want2, dy, x, g, (size_t)N * CA, (size_t)H * W);
  expect_bits("mul backward dx", &tdx, want, na);
  expect_bits("mul backward dg", &tdg, want2, (size_t)N * CA);
  assert_ok(px__ops_concat_forward(ops, &tcat, &tx, &tb));
  px__concat_forward(want, x, b, N, CA, CB, (size_t)H * W);
  expect_bits("concat forward", &tcat, want, na + nb);
  assert_ok(px__ops_concat_backward(ops, &tdx, NULL, &tdcat)); /* one slice wanted */
  px__concat_backward(want, want2, dy, N, CA, CB, (size_t)H * W);
  expect_bits("concat backward da", &tdx, want, na);
  assert_ok(px__ops_concat_backward(ops, NULL, &tdb, &tdcat));
  expect_bits("concat backward db", &tdb, want2, nb);
  px_tensor_t *all[] = {&tx, &ty, &tdy, &tdx, &tg, &tdg, &tb, &tdb, &tcat, &tdcat};
  for (size_t i = 0; i < sizeof all / sizeof all[0]; i++) px_tensor_release(all[i]);
  free(x), free(dy), free(g), free(b), free(want), free(want2);
  px_ops_destroy(ops);
}

static void expect_refused(px_status_t st, const char *a, const char *b);

/* A channels-last map of plain host data (NULL: none), as the convolutions of a model built
 * channels-last write them (px__ops_channels_last). */
static void cl_tensor(px_ops_t *ops, px_tensor_t *t, int64_t n, int64_t c, int64_t h, int64_t w,
                      const float *host) {
  px_tensor_t s;
  assert_ok(px_tensor_init4(&s, px_device_cpu(), n, c, h, w));
  const int was = px__ops_channels_last(ops, 1);
  assert_ok(px_ops_act_format(ops, PX_PRECISION_FP32, &s));
  px__ops_channels_last(ops, was);
  assert_non_null(s.layout);
  assert_string_equal(px_layout_name(s.layout), "acdb");
  make_tensor(t, &s, host);
}

static void expect_cl_bits(const char *what, const px_tensor_t *t, const float *want) {
  float *got = read_host(t);
  const int same = !memcmp(got, want, px_tensor_plain_bytes(t));
  free(got);
  if (!same) fail_msg("%s: channels-last, not the plain loop's bits", what);
}

/* The Mul, Concat and channel selections on channels-last maps give the plain loops' bits
 * (the maps read back in NCHW), and refuse plain and channels-last maps mixed. */
static void cpu_entries_take_channels_last_maps(void **state) {
  (void)state;
  px_ops_t *ops = new_ops();
  graph_data_t d;
  graph_data(&d, 12);
  float *x = d.x, *dy = d.dy, *g = d.g, *b = d.b, *want = d.want, *want2 = d.want2;
  px_tensor_t tx, ty, tdy, tdx, tg, tdg, tb, tdb, tcat, tdcat, plain;
  cl_tensor(ops, &tx, N, CA, H, W, x);
  cl_tensor(ops, &ty, N, CA, H, W, NULL);
  cl_tensor(ops, &tdy, N, CA, H, W, dy);
  cl_tensor(ops, &tdx, N, CA, H, W, NULL);
  plain_tensor(&tg, N, CA, 1, 1, g);
  plain_tensor(&tdg, N, CA, 1, 1, NULL);
  cl_tensor(ops, &tb, N, CB, H, W, b);
  cl_tensor(ops, &tdb, N, CB, H, W, NULL);
  cl_tensor(ops, &tcat, N, CA + CB, H, W, NULL);
  cl_tensor(ops, &tdcat, N, CA + CB, H, W, dy);
  plain_tensor(&plain, N, CA, H, W, x);
  assert_ok(px__ops_mul_forward(ops, &ty, &tx, &tg));
  px__mul_forward(want, x, g, (size_t)N * CA, (size_t)H * W);
  expect_cl_bits("mul forward", &ty, want);
  assert_ok(px__ops_mul_backward(ops, &tdx, &tdg, &tdy, &tx, &tg));
  px__mul_backward(want, want2, dy, x, g, (size_t)N * CA, (size_t)H * W);
  expect_cl_bits("mul backward dx", &tdx, want);
  expect_bits("mul backward dg", &tdg, want2, (size_t)N * CA);
  assert_ok(px__ops_concat_forward(ops, &tcat, &tx, &tb));
  px__concat_forward(want, x, b, N, CA, CB, (size_t)H * W);
  expect_cl_bits("concat forward", &tcat, want);
  assert_ok(px__ops_concat_backward(ops, &tdx, &tdb, &tdcat));
  px__concat_backward(want, want2, dy, N, CA, CB, (size_t)H * W);
  expect_cl_bits("concat backward da", &tdx, want);
  expect_cl_bits("concat backward db", &tdb, want2);
  /* a Split's part (channels 1..3 of 5) and a shuffle of the 8 concatenated channels */
  px_tensor_t part, shuf, dshuf;
  cl_tensor(ops, &part, N, CB, H, W, NULL);
  assert_ok(px__ops_chan_forward(ops, &part, &tx, 1, 1));
  px__chan_forward(want, x, N, CA, CB, (size_t)H * W, 1, 1);
  expect_cl_bits("slice forward", &part, want);
  assert_ok(px__ops_chan_backward(ops, &tdx, &part, 1, 1));
  px__chan_backward(want2, want, N, CA, CB, (size_t)H * W, 1, 1);
  expect_cl_bits("slice backward", &tdx, want2);
  cl_tensor(ops, &shuf, N, CA + CB, H, W, NULL);
  cl_tensor(ops, &dshuf, N, CA + CB, H, W, NULL);
  assert_ok(px__ops_chan_forward(ops, &shuf, &tdcat, 2, 0));
  px__chan_forward(want, dy, N, CA + CB, CA + CB, (size_t)H * W, 2, 0);
  expect_cl_bits("shuffle forward", &shuf, want);
  assert_ok(px__ops_chan_backward(ops, &dshuf, &shuf, 2, 0));
  px__chan_backward(want2, want, N, CA + CB, CA + CB, (size_t)H * W, 2, 0);
  expect_cl_bits("shuffle backward", &dshuf, want2);
  expect_refused(px__ops_mul_forward(ops, &ty, &plain, &tg), "mul forward", "match");
  px_tensor_t *all[] = {&tx, &ty, &tdy, &tdx, &tg, &tdg, &tb, &tdb, &tcat, &tdcat, &plain,
                        &part, &shuf, &dshuf};
  for (size_t i = 0; i < sizeof all / sizeof all[0]; i++) px_tensor_release(all[i]);
  free(x), free(dy), free(g), free(b), free(want), free(want2);
  px_ops_destroy(ops);
}

static void expect_refused(px_status_t st, const char *a, const char *b) {
  assert_int_equal(st, PX_ERR_INVALID);
  const char *e = px_last_error();
  if (!strstr(e, a) || !strstr(e, b)) fail_msg("message '%s' does not name '%s' and '%s'", e, a, b);
}

static void bad_arguments_are_refused_naming_the_op(void **state) {
  (void)state;
  px_ops_t *ops = new_ops();
  px_tensor_t x, y, g, wide, cat, blocked;
  plain_tensor(&x, N, CA, H, W, NULL);
  plain_tensor(&y, N, CA, H, W, NULL);
  plain_tensor(&g, N, CA, H, 1, NULL); /* not [N, C, 1, 1] */
  plain_tensor(&wide, N, CB, H + 1, W, NULL);
  plain_tensor(&cat, N, CA + CB, H, W, NULL);
  expect_refused(px__ops_mul_forward(ops, &y, &x, &g), "mul forward g", "per-channel gate");
  expect_refused(px__ops_mul_backward(ops, NULL, NULL, &y, &x, &g), "mul backward g", "gate");
  expect_refused(px__ops_concat_forward(ops, &cat, &x, &wide), "concat forward", "on channels");
  expect_refused(px__ops_concat_backward(ops, NULL, NULL, &cat), "concat backward", "neither");
  expect_refused(px__ops_act_forward(ops, &y, &x, (px__act_t)PX__ACT_COUNT, 0.0f),
                 "activation forward", "unknown activation");
  expect_refused(px__ops_act_forward(ops, &cat, &x, PX__ACT_RELU, 0.0f), "activation forward y",
                 "does not match");
  expect_refused(px__ops_act_forward(ops, &y, NULL, PX__ACT_RELU, 0.0f), "activation forward x",
                 "NULL");
  /* the CPU engine's Mul reads plain NCHW or channels-last: a blocked map is refused, not
     misread */
  px_tensor_t bs, stem_in;
  assert_ok(px_tensor_init4(&stem_in, px_device_cpu(), N, 3, H, W));
  px_conv2d_params_t stem = {.c_out = 16, .kh = 3, .kw = 3, .stride_h = 1, .stride_w = 1,
                             .pad_h = 1, .pad_w = 1};
  px_conv2d_t *feeder = NULL; /* a stem: oneDNN's first-layer kernels write blocked maps */
  assert_ok(px_conv2d_create(ops, &stem_in, &stem, &feeder));
  px_conv2d_y_spec(feeder, &bs);
  px_conv2d_destroy(feeder);
  const int is_blocked = bs.layout && strcmp(px_layout_name(bs.layout), "acdb") != 0;
  print_message("the stem writes %s\n", px_layout_name(bs.layout));
  make_tensor(&blocked, &bs, NULL);
  px_tensor_t g16;
  plain_tensor(&g16, N, 16, 1, 1, NULL);
  if (is_blocked)
    expect_refused(px__ops_mul_forward(ops, &blocked, &blocked, &g16), "mul forward x",
                   "plain f32 NCHW");
  px_tensor_t *all[] = {&x, &y, &g, &wide, &cat, &blocked, &g16};
  for (size_t i = 0; i < sizeof all / sizeof all[0]; i++) px_tensor_release(all[i]);
  px_ops_destroy(ops);
}

/* ---- GPU half: helpers --------------------------------------------------------------- */

/* ---- GPU half: kernels against the CPU reference ---------------------------------------- */

static void act_kernels(px_ops_t *ops, fmt_t f, px_test_rng_t *rng) {
  const size_t n = (size_t)N * CA * H * W;
  float *x = rand_host(rng, n, 4.0f, 1.0f), *dy = rand_host(rng, n, 1.0f, 0.0f);
  float *want = malloc(n * sizeof *want);
  assert_non_null(want);
  round_if(f, x, n);
  round_if(f, dy, n);
  const px_tensor_t s = spec_in(ops, f, N, CA, H, W);
  px_tensor_t tx, ty, tdy, tdx;
  dev_tensor(ops, &tx, &s, x);
  dev_tensor(ops, &ty, &s, NULL);
  dev_tensor(ops, &tdy, &s, dy);
  dev_tensor(ops, &tdx, &s, NULL);
  for (int a = PX__ACT_RELU; a < PX__ACT_COUNT; a++) {
    char what[64];
    assert_ok(px__ops_act_forward(ops, &ty, &tx, (px__act_t)a, 0.1f));
    float *y = host_of(ops, &ty);
    px__act_forward(want, x, n, (px__act_t)a, 0.1f);
    snprintf(what, sizeof what, "%s forward", px__act_onnx_name((px__act_t)a));
    expect_rel(what, f, y, want, n, tol_of(f, 1e-6));
    /* the backward of the GPU's own y (sigmoid and tanh read it) */
    assert_ok(px__ops_act_backward(ops, &tdx, &tdy, &tx, &ty, (px__act_t)a, 0.1f));
    float *dx = host_of(ops, &tdx);
    px__act_backward(want, dy, x, y, n, (px__act_t)a, 0.1f);
    snprintf(what, sizeof what, "%s backward", px__act_onnx_name((px__act_t)a));
    expect_rel(what, f, dx, want, n, tol_of(f, 1e-6));
    free(y);
    free(dx);
  }
  px_tensor_release(&tx), px_tensor_release(&ty), px_tensor_release(&tdy), px_tensor_release(&tdx);
  free(x), free(dy), free(want);
}

/* The gate plain f32 (what a 1x1 conv on the pooled map gives) or, when
 * gate_like, in the map's format. */
static void mul_kernels(px_ops_t *ops, fmt_t f, int gate_like, px_test_rng_t *rng) {
  const size_t n = (size_t)N * CA * H * W, nc = (size_t)N * CA, hw = (size_t)H * W;
  float *x = rand_host(rng, n, 1.0f, 0.0f), *dy = rand_host(rng, n, 1.0f, 0.0f);
  float *g = rand_host(rng, nc, 0.5f, 0.5f);
  float *want = malloc(n * sizeof *want), *wdg = malloc(nc * sizeof *wdg);
  assert_non_null(want);
  assert_non_null(wdg);
  round_if(f, x, n), round_if(f, dy, n);
  if (gate_like) round_if(f, g, nc);
  const px_tensor_t s = spec_in(ops, f, N, CA, H, W);
  px_tensor_t gs;
  if (gate_like) gs = spec_in(ops, f, N, CA, 1, 1);
  else assert_ok(px_tensor_init4(&gs, px_device_cuda(0), N, CA, 1, 1));
  px_tensor_t tx, ty, tdy, tdx, tg, tdg;
  dev_tensor(ops, &tx, &s, x), dev_tensor(ops, &ty, &s, NULL), dev_tensor(ops, &tdy, &s, dy);
  dev_tensor(ops, &tdx, &s, NULL), dev_tensor(ops, &tg, &gs, g), dev_tensor(ops, &tdg, &gs, NULL);
  assert_ok(px__ops_mul_forward(ops, &ty, &tx, &tg));
  float *y = host_of(ops, &ty);
  px__mul_forward(want, x, g, nc, hw);
  expect_rel(gate_like ? "mul forward (gate like the map)" : "mul forward", f, y, want, n,
             tol_of(f, 1e-6));
  assert_ok(px__ops_mul_backward(ops, &tdx, &tdg, &tdy, &tx, &tg));
  float *dx = host_of(ops, &tdx), *dg = host_of(ops, &tdg);
  px__mul_backward(want, wdg, dy, x, g, nc, hw);
  expect_rel("mul backward dx", f, dx, want, n, tol_of(f, 1e-6));
  expect_rel("mul backward dg", f, dg, wdg, nc, tol_of(f, 1e-5));
  /* the gate's gradient alone, as the model asks when the map is the input */
  assert_ok(px__ops_mul_backward(ops, NULL, &tdg, &tdy, &tx, &tg));
  float *dg2 = host_of(ops, &tdg);
  if (memcmp(dg, dg2, nc * sizeof *dg)) fail_msg("mul dg: not the same bits twice (determinism)");
  px_tensor_t *all[] = {&tx, &ty, &tdy, &tdx, &tg, &tdg};
  for (size_t i = 0; i < 6; i++) px_tensor_release(all[i]);
  free(x), free(dy), free(g), free(want), free(wdg), free(y), free(dx), free(dg), free(dg2);
}

static void concat_kernels(px_ops_t *ops, fmt_t f, px_test_rng_t *rng) {
  const size_t na = (size_t)N * CA * H * W, nb = (size_t)N * CB * H * W, hw = (size_t)H * W;
  float *a = rand_host(rng, na, 1.0f, 0.0f), *b = rand_host(rng, nb, 1.0f, 0.0f);
  float *dy = rand_host(rng, na + nb, 1.0f, 0.0f);
  float *want = malloc((na + nb) * sizeof *want), *want2 = malloc(nb * sizeof *want2);
  assert_non_null(want);
  assert_non_null(want2);
  round_if(f, a, na), round_if(f, b, nb), round_if(f, dy, na + nb);
  const px_tensor_t sa = spec_in(ops, f, N, CA, H, W), sb = spec_in(ops, f, N, CB, H, W);
  const px_tensor_t sy = spec_in(ops, f, N, CA + CB, H, W);
  px_tensor_t ta, tb, ty, tdy, tda, tdb;
  dev_tensor(ops, &ta, &sa, a), dev_tensor(ops, &tb, &sb, b), dev_tensor(ops, &ty, &sy, NULL);
  dev_tensor(ops, &tdy, &sy, dy), dev_tensor(ops, &tda, &sa, NULL), dev_tensor(ops, &tdb, &sb, NULL);
  assert_ok(px__ops_concat_forward(ops, &ty, &ta, &tb));
  float *y = host_of(ops, &ty);
  px__concat_forward(want, a, b, N, CA, CB, hw);
  expect_rel("concat forward", f, y, want, na + nb, 0.0); /* a copy: exact */
  assert_ok(px__ops_concat_backward(ops, &tda, &tdb, &tdy));
  float *da = host_of(ops, &tda), *db = host_of(ops, &tdb);
  px__concat_backward(want, want2, dy, N, CA, CB, hw);
  expect_rel("concat backward da", f, da, want, na, 0.0);
  expect_rel("concat backward db", f, db, want2, nb, 0.0);
  px_tensor_t *all[] = {&ta, &tb, &ty, &tdy, &tda, &tdb};
  for (size_t i = 0; i < 6; i++) px_tensor_release(all[i]);
  free(a), free(b), free(dy), free(want), free(want2), free(y), free(da), free(db);
}

/* A 1-D f32 device vector of spec holding h (NULL: uninitialised), and one read back. */
static void vec_dev(px_tensor_t *t, const px_tensor_t *spec, const float *h) {
  *t = *spec;
  assert_ok(px_tensor_alloc(t, "test vector"));
  if (h) assert_ok(px_tensor_copy_from_host(t, h, px_tensor_numel(t) * sizeof *h));
}

static float *vec_host(px_ops_t *ops, const px_tensor_t *t) {
  assert_ok(px_ops_sync(ops));
  float *h = malloc(px_tensor_numel(t) * sizeof *h);
  assert_non_null(h);
  assert_ok(px_tensor_copy_to_host(t, h, px_tensor_numel(t) * sizeof *h));
  return h;
}

/* LayerNorm over channels (nn/cuda/cuda_ln.cu) against px__ln_forward /
 * px__ln_backward; the scale's and shift's gradients twice, bit for bit. */
static void ln_kernels(px_ops_t *ops, fmt_t f, px_test_rng_t *rng) {
  const size_t n = (size_t)N * CA * H * W, npix = (size_t)N * H * W;
  float *x = rand_host(rng, n, 2.0f, 0.5f), *dy = rand_host(rng, n, 1.0f, 0.0f);
  float *g = rand_host(rng, CA, 0.5f, 1.0f), *b = rand_host(rng, CA, 0.5f, 0.0f);
  float *want = malloc(n * sizeof *want), *mu = malloc(npix * sizeof *mu);
  float *rs = malloc(npix * sizeof *rs), *wdg = malloc(CA * sizeof *wdg);
  float *wdb = malloc(CA * sizeof *wdb);
  assert_true(want && mu && rs && wdg && wdb);
  round_if(f, x, n), round_if(f, dy, n);
  const px_tensor_t s = spec_in(ops, f, N, CA, H, W);
  px_tensor_t cs, ps, tx, ty, tdy, tdx, tg, tb, tdg, tdb, tm, tr;
  const int64_t c = CA, np = (int64_t)npix;
  assert_ok(px_tensor_init(&cs, px_device_cuda(0), PX_DTYPE_F32, 1, &c));
  assert_ok(px_tensor_init(&ps, px_device_cuda(0), PX_DTYPE_F32, 1, &np));
  dev_tensor(ops, &tx, &s, x), dev_tensor(ops, &ty, &s, NULL), dev_tensor(ops, &tdy, &s, dy);
  dev_tensor(ops, &tdx, &s, NULL), vec_dev(&tg, &cs, g), vec_dev(&tb, &cs, b);
  vec_dev(&tdg, &cs, NULL), vec_dev(&tdb, &cs, NULL), vec_dev(&tm, &ps, NULL);
  vec_dev(&tr, &ps, NULL);
  assert_ok(px__ops_ln_forward(ops, &ty, &tm, &tr, &tx, &tg, &tb, 1e-6f));
  float *y = host_of(ops, &ty);
  px__ln_forward(want, mu, rs, x, g, b, N, CA, (size_t)H * W, 1e-6f);
  expect_rel("layernorm forward", f, y, want, n, tol_of(f, 1e-5));
  assert_ok(px__ops_ln_backward(ops, &tdx, &tdg, &tdb, &tdy, &tx, &tm, &tr, &tg));
  float *dx = host_of(ops, &tdx), *dg = vec_host(ops, &tdg), *db = vec_host(ops, &tdb);
  px__ln_backward(want, wdg, wdb, dy, x, mu, rs, g, N, CA, (size_t)H * W);
  expect_rel("layernorm backward dx", f, dx, want, n, tol_of(f, 1e-5));
  expect_rel("layernorm backward dg", FMT_NCHW, dg, wdg, CA, 1e-5);
  expect_rel("layernorm backward db", FMT_NCHW, db, wdb, CA, 1e-5);
  assert_ok(px__ops_ln_backward(ops, NULL, &tdg, &tdb, &tdy, &tx, &tm, &tr, &tg));
  float *dg2 = vec_host(ops, &tdg);
  if (memcmp(dg, dg2, CA * sizeof *dg)) fail_msg("layernorm dg: not the same bits twice");
  px_tensor_t *all[] = {&tx, &ty, &tdy, &tdx, &tg, &tb, &tdg, &tdb, &tm, &tr};
  for (size_t i = 0; i < 10; i++) px_tensor_release(all[i]);
  free(x), free(dy), free(g), free(b), free(want), free(mu), free(rs), free(wdg), free(wdb);
  free(y), free(dx), free(dg), free(db), free(dg2);
}

/* One pooling, forward and backward, on the GPU in format f and on the CPU
 * engine (oneDNN) on the same values: distinct within every plane (so that
 * max pooling has one arg-max, also in bf16: multiples of 1/8 below 16). */
static void pool_kernel(px_ops_t *ops, px_ops_t *cpu, fmt_t f, const px_pool2d_params_t *p,
                        px_test_rng_t *rng) {
  const int64_t c = 4, h = 9, w = 8;
  const size_t n = (size_t)N * c * h * w;
  float *x = malloc(n * sizeof *x);
  assert_non_null(x);
  const uint64_t off = px_test_rng_u64(rng) % 251;
  for (size_t i = 0; i < n; i++) x[i] = (float)((int64_t)((i * 138 + off) % 251) - 125) / 8.0f;
  px_tensor_t cs, cy, cws, cx, cdx, cdy, ys, wss;
  assert_ok(px_tensor_init4(&cs, px_device_cpu(), N, c, h, w));
  px_pool2d_t *cp = NULL, *gp = NULL;
  assert_ok(px_pool2d_create(cpu, &cs, p, &cp));
  make_tensor(&cx, &cs, x);
  make_tensor(&cdx, &cs, NULL);
  px_pool2d_y_spec(cp, &ys);
  px_pool2d_ws_spec(cp, &wss);
  make_tensor(&cy, &ys, NULL);
  make_tensor(&cws, &wss, NULL);
  assert_ok(px_pool2d_forward(cp, &cy, wss.nbytes ? &cws : NULL, &cx));
  const size_t ny = px_tensor_numel(&ys);
  float *dy = rand_host(rng, ny, 1.0f, 0.0f);
  round_if(f, dy, ny);
  make_tensor(&cdy, &ys, dy);
  assert_ok(px_pool2d_backward(cp, &cdx, &cdy, wss.nbytes ? &cws : NULL));
  float *want_y = read_host(&cy), *want_dx = read_host(&cdx);

  const px_tensor_t gs = spec_in(ops, f, N, c, h, w);
  assert_ok(px_pool2d_create(ops, &gs, p, &gp));
  px_tensor_t gys, gwss, gx, gy, gws, gdx, gdy;
  px_pool2d_y_spec(gp, &gys);
  px_pool2d_ws_spec(gp, &gwss);
  assert_true(gys.dtype == gs.dtype && (gys.layout != NULL) == (gs.layout != NULL));
  dev_tensor(ops, &gx, &gs, x), dev_tensor(ops, &gdx, &gs, NULL);
  dev_tensor(ops, &gy, &gys, NULL), dev_tensor(ops, &gdy, &gys, dy);
  memset(&gws, 0, sizeof gws);
  if (gwss.nbytes) dev_tensor(ops, &gws, &gwss, NULL);
  assert_ok(px_pool2d_forward(gp, &gy, gwss.nbytes ? &gws : NULL, &gx));
  assert_ok(px_pool2d_backward(gp, &gdx, &gdy, gwss.nbytes ? &gws : NULL));
  float *y = host_of(ops, &gy), *dx = host_of(ops, &gdx);
  const char *mode = p->mode == PX_POOL_MAX ? "max pool" : "average pool";
  char geo[96], what[128];
  snprintf(geo, sizeof geo, "%s %dx%d/%dx%d pad %dx%d%+d%+d%s dil %d", mode, p->kh, p->kw,
           p->stride_h, p->stride_w, p->pad_h, p->pad_w, p->pad_h_extra, p->pad_w_extra,
           p->ceil_mode ? " ceil" : "", p->dil_h);
  assert_int_equal(px_tensor_numel(&gys), ny); /* the CPU engine's output size */
  snprintf(what, sizeof what, "%s forward", geo);
  expect_rel(what, f, y, want_y, ny, tol_of(f, 1e-6));
  snprintf(what, sizeof what, "%s backward", geo);
  expect_rel(what, f, dx, want_dx, n, tol_of(f, 1e-6));
  px_tensor_t *all[] = {&cx, &cy, &cws, &cdx, &cdy, &gx, &gy, &gdx, &gdy, &gws};
  for (size_t i = 0; i < sizeof all / sizeof all[0]; i++)
    if (all[i]->data) px_tensor_release(all[i]);
  px_pool2d_destroy(cp);
  px_pool2d_destroy(gp);
  free(x), free(dy), free(want_y), free(want_dx), free(y), free(dx);
}

/* A grouped convolution (depthwise when groups = channels) on cuDNN
 * against oneDNN: forward, backward data, backward weights. */
static void grouped_conv(px_ops_t *ops, px_ops_t *cpu, fmt_t f, int groups, px_test_rng_t *rng) {
  const int64_t c = 8, h = 9, w = 7;
  const px_conv2d_params_t p = {.c_out = 8, .kh = 3, .kw = 3, .stride_h = 2, .stride_w = 2,
                                .pad_h = 1, .pad_w = 1, .groups = groups};
  px_tensor_t cs, ys, ws;
  assert_ok(px_tensor_init4(&cs, px_device_cpu(), N, c, h, w));
  px_conv2d_t *cc = NULL, *gc = NULL;
  assert_ok(px_conv2d_create(cpu, &cs, &p, &cc));
  px_conv2d_y_spec(cc, &ys);
  px_conv2d_w_spec(cc, &ws);
  assert_int_equal(ws.dims[1], c / groups);
  const size_t nx = px_tensor_numel(&cs), ny = px_tensor_numel(&ys), nw = px_tensor_numel(&ws);
  float *x = rand_host(rng, nx, 1.0f, 0.0f), *dy = rand_host(rng, ny, 1.0f, 0.0f);
  float *wt = rand_host(rng, nw, 0.3f, 0.0f);
  round_if(f, x, nx), round_if(f, dy, ny), round_if(f, wt, nw);
  px_tensor_t cx, cy, cw, cdx, cdy, cdw;
  make_tensor(&cx, &cs, x), make_tensor(&cy, &ys, NULL), make_tensor(&cw, &ws, wt);
  make_tensor(&cdx, &cs, NULL), make_tensor(&cdy, &ys, dy), make_tensor(&cdw, &ws, NULL);
  assert_ok(px_conv2d_forward(cc, &cy, &cx, &cw, NULL));
  assert_ok(px_conv2d_backward_data(cc, &cdx, &cdy, &cw));
  assert_ok(px_conv2d_backward_weights(cc, &cdw, NULL, &cx, &cdy));
  float *want_y = read_host(&cy), *want_dx = read_host(&cdx), *want_dw = read_host(&cdw);

  const px_tensor_t gs = spec_in(ops, f, N, c, h, w);
  assert_ok(px_conv2d_create(ops, &gs, &p, &gc));
  px_tensor_t gys, gws, gx, gy, gw, gdx, gdy, gdw;
  px_conv2d_y_spec(gc, &gys);
  px_conv2d_w_spec(gc, &gws);
  assert_int_equal(gws.dims[1], c / groups);
  dev_tensor(ops, &gx, &gs, x), dev_tensor(ops, &gdx, &gs, NULL);
  dev_tensor(ops, &gy, &gys, NULL), dev_tensor(ops, &gdy, &gys, dy);
  make_tensor(&gw, &gws, wt), make_tensor(&gdw, &gws, NULL);
  assert_ok(px_conv2d_forward(gc, &gy, &gx, &gw, NULL));
  assert_ok(px_conv2d_backward_data(gc, &gdx, &gdy, &gw));
  assert_ok(px_conv2d_backward_weights(gc, &gdw, NULL, &gx, &gdy));
  float *y = host_of(ops, &gy), *dx = host_of(ops, &gdx), *dw = read_host(&gdw);
  char what[64];
  snprintf(what, sizeof what, "conv groups %d forward", groups);
  expect_rel(what, f, y, want_y, ny, f == FMT_BF16 ? 2e-2 : 1e-5);
  snprintf(what, sizeof what, "conv groups %d backward data", groups);
  expect_rel(what, f, dx, want_dx, nx, f == FMT_BF16 ? 2e-2 : 1e-5);
  snprintf(what, sizeof what, "conv groups %d backward weights", groups);
  expect_rel(what, f, dw, want_dw, nw, f == FMT_BF16 ? 2e-2 : 1e-5);
  px_tensor_t *all[] = {&cx, &cy, &cw, &cdx, &cdy, &cdw, &gx, &gy, &gw, &gdx, &gdy, &gdw};
  for (size_t i = 0; i < sizeof all / sizeof all[0]; i++) px_tensor_release(all[i]);
  px_conv2d_destroy(cc);
  px_conv2d_destroy(gc);
  free(x), free(dy), free(wt), free(want_y), free(want_dx), free(want_dw), free(y), free(dx),
      free(dw);
}

/* The pooling windows the GPU half compares (pool_kernel's 9 x 8 input). */
static const px_pool2d_params_t POOLS[] = {
    {PX_POOL_MAX, 2, 2, 2, 2, 0, 0, 0, 0, 0, 0, 0},
    {PX_POOL_MAX, 3, 3, 2, 2, 1, 1, 0, 0, 0, 0, 0},
    {PX_POOL_AVG, 2, 2, 2, 2, 0, 0, 0, 0, 0, 0, 0},
    {PX_POOL_AVG, 3, 3, 2, 2, 1, 1, 0, 0, 0, 0, 0},
    {PX_POOL_AVG_EXCLUDE_PAD, 3, 3, 1, 1, 1, 1, 0, 0, 0, 0, 0},
    /* ceil_mode (SqueezeNet's, GoogLeNet's): the last windows run past the input */
    {PX_POOL_MAX, 3, 3, 2, 2, 0, 0, 0, 0, 1, 0, 0},
    {PX_POOL_AVG, 3, 3, 2, 2, 0, 0, 0, 0, 1, 0, 0},
    {PX_POOL_AVG_EXCLUDE_PAD, 2, 2, 2, 2, 1, 1, 0, 0, 1, 0, 0},
    /* asymmetric padding, a non-square window, dilation */
    {PX_POOL_MAX, 2, 3, 1, 2, 0, 1, 1, 0, 0, 0, 0},
    {PX_POOL_AVG, 2, 3, 1, 2, 0, 1, 1, 0, 0, 0, 0},
    {PX_POOL_MAX, 3, 3, 1, 1, 1, 1, 0, 0, 0, 2, 2}};

/* CPU half: the CPU engine takes every window of POOLS, and its output is
 * what px__axis_out says (the size the CUDA engine gives them). */
static void pool_windows_are_the_cpu_engines(void **state) {
  (void)state;
  px_ops_t *cpu = new_ops();
  px_tensor_t xs, ys;
  assert_ok(px_tensor_init4(&xs, px_device_cpu(), 2, 4, 9, 8));
  for (size_t i = 0; i < sizeof POOLS / sizeof POOLS[0]; i++) {
    const px_pool2d_params_t *p = &POOLS[i];
    px_pool2d_t *op = NULL;
    if (px_pool2d_create(cpu, &xs, p, &op) != PX_OK) fail_msg("pool %zu: %s", i, px_last_error());
    px_pool2d_y_spec(op, &ys);
    const px__axis_t ah = {9, p->kh, p->stride_h, p->pad_h, p->pad_h + p->pad_h_extra,
                           p->dil_h > 1 ? p->dil_h : 1, p->ceil_mode};
    const px__axis_t aw = {8, p->kw, p->stride_w, p->pad_w, p->pad_w + p->pad_w_extra,
                           p->dil_w > 1 ? p->dil_w : 1, p->ceil_mode};
    assert_int_equal(ys.dims[2], px__axis_out(&ah));
    assert_int_equal(ys.dims[3], px__axis_out(&aw));
    px_pool2d_destroy(op);
  }
  px_ops_destroy(cpu);
}

static void graph_kernels_match_the_cpu_reference(void **state) {
  (void)state;
  REQUIRE_GPU();
  px_ops_t *cpu = new_ops();
  px_test_rng_t rng;
  px_test_rng_seed(&rng, 5);

  for (int f = FMT_NCHW; f <= FMT_BF16; f++) {
    px_ops_t *ops = gpu_ops((fmt_t)f);
    act_kernels(ops, (fmt_t)f, &rng);
    mul_kernels(ops, (fmt_t)f, 0, &rng);
    if (f != FMT_NCHW) mul_kernels(ops, (fmt_t)f, 1, &rng);
    concat_kernels(ops, (fmt_t)f, &rng);
    ln_kernels(ops, (fmt_t)f, &rng);
    for (size_t i = 0; i < sizeof POOLS / sizeof POOLS[0]; i++)
      pool_kernel(ops, cpu, (fmt_t)f, &POOLS[i], &rng);
    grouped_conv(ops, cpu, (fmt_t)f, 2, &rng);
    grouped_conv(ops, cpu, (fmt_t)f, 8, &rng); /* depthwise */
    px_ops_destroy(ops);
  }
  px_ops_destroy(cpu);
}

/* ---- GPU half: imported nets train a step on CUDA like on the CPU -------------------------- */

#define NETS PX_SOURCE_DIR "/tests/onnx_import_nets.py"
enum { BATCH = 8, IC = 3, HW = 16, K = 10 };

static int have_torch(void) { return px_test_python_has("torch, onnx, numpy"); }

typedef struct {
  float loss;
  float logits[BATCH * K];
  float *grads; /* flat, [numel] */
  size_t numel;
} step_t;

/* One training step of the imported net in dir on ops. */
static step_t net_step(px_ops_t *ops, const char *dir, px_precision_t prec, const float *x,
                       const int32_t *y) {
  char path[512];
  snprintf(path, sizeof path, "%s/model.onnx", dir);
  px_model_config_t cfg = {"", IC, K, BATCH, HW, HW, NULL, 0, prec, path};
  px_model_t *m = NULL;
  if (px_model_create(ops, &cfg, &m) != PX_OK) fail_msg("import %s: %s", path, px_last_error());
  assert_ok(px_model_init_params(m, 1));
  step_t s;
  assert_ok(px_model_logits(m, x, BATCH, s.logits));
  int64_t correct;
  assert_ok(px_model_train_step(m, x, y, &s.loss, &correct));
  s.numel = px_model_numel(m);
  s.grads = malloc(s.numel * sizeof *s.grads);
  assert_non_null(s.grads);
  assert_ok(px_tensor_copy_to_host(px_model_flat_grads(m), s.grads, s.numel * sizeof *s.grads));
  px_model_destroy(m);
  return s;
}

static void check_net_on_cuda(const char *net) {
  char dir[64] = "/tmp/px_gpu_graph_XXXXXX", cmd[1024];
  assert_non_null(mkdtemp(dir));
  snprintf(cmd, sizeof cmd, "%s reference %s %s %d %d %d %d %d >/dev/null", NETS, net, dir,
           BATCH, IC, HW, HW, K);
  assert_int_equal(px_test_py(cmd), 0);
  float *x = malloc((size_t)BATCH * IC * HW * HW * sizeof *x);
  int32_t y[BATCH];
  assert_non_null(x);
  const size_t xbytes = (size_t)BATCH * IC * HW * HW * sizeof *x;
  assert_int_equal(px_test_read_bytes(dir, "x.f32", x, xbytes), xbytes);
  assert_int_equal(px_test_read_bytes(dir, "y.i32", y, sizeof y), sizeof y);
  px_ops_t *cpu = new_ops();
  step_t ref = net_step(cpu, dir, PX_PRECISION_FP32, x, y);
  for (int f = FMT_NCHW; f <= FMT_BF16; f++) {
    px_ops_t *ops = gpu_ops((fmt_t)f);
    step_t s = net_step(ops, dir, prec_of((fmt_t)f), x, y);
    assert_int_equal(s.numel, ref.numel);
    const double el = px_test_rel_l2(s.logits, ref.logits, BATCH * K), eg = px_test_rel_l2(s.grads, ref.grads, ref.numel);
    printf("%s on CUDA (%s): loss %.6f (CPU %.6f), logits rel L2 %.3g, gradients rel L2 %.3g\n",
           net, fmt_name[f], s.loss, ref.loss, el, eg);
    if (f == FMT_BF16) { /* bf16 flips activations near their kinks: the direction must hold */
      assert_true(fabsf(s.loss - ref.loss) <= 3e-2f * fabsf(ref.loss));
      assert_true(el < 5e-2);
      assert_true(eg < 0.5);
    } else { /* TF32 off: f32 arithmetic in another order */
      assert_true(fabsf(s.loss - ref.loss) <= 1e-4f * fabsf(ref.loss));
      assert_true(el < 1e-4);
      assert_true(eg < 1e-3);
    }
    free(s.grads);
    px_ops_destroy(ops);
  }
  free(ref.grads);
  px_ops_destroy(cpu);
  free(x);
  snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
  assert_int_equal(system(cmd), 0);
}

/* Max and average pooling, global pooling, dropout. */
static void vgg_trains_a_step_on_cuda_like_the_cpu(void **state) {
  (void)state;
  REQUIRE_GPU();
  if (!have_torch()) skip();
  check_net_on_cuda("vgg");
}

/* Depthwise (grouped) convolutions, ReLU6 as Clip, Concat. */
static void mobilenet_trains_a_step_on_cuda_like_the_cpu(void **state) {
  (void)state;
  REQUIRE_GPU();
  if (!have_torch()) skip();
  check_net_on_cuda("mobilenet");
}

/* Sigmoid, the squeeze-and-excitation Mul, LeakyReLU, convolutions with bias
 * on the pooled map, a MatMul classifier. */
static void seresnet_trains_a_step_on_cuda_like_the_cpu(void **state) {
  (void)state;
  REQUIRE_GPU();
  if (!have_torch()) skip();
  check_net_on_cuda("seresnet");
}

/* Hardswish, SiLU, the exact GELU, Tanh, Hardsigmoid and a
 * Hardsigmoid-gated squeeze-and-excitation. */
static void acts_trains_a_step_on_cuda_like_the_cpu(void **state) {
  (void)state;
  REQUIRE_GPU();
  if (!have_torch()) skip();
  check_net_on_cuda("acts");
}

/* ConvNeXt's LayerNorms, NHWC views, 1 x 1 convs with bias and layer scale. */
static void convnext_trains_a_step_on_cuda_like_the_cpu(void **state) {
  (void)state;
  REQUIRE_GPU();
  if (!have_torch()) skip();
  check_net_on_cuda("convnext");
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(index_maps_match_brute_force),
      cmocka_unit_test(pool_covering_matches_brute_force),
      cmocka_unit_test(cpu_entries_give_the_plain_loops_bits),
      cmocka_unit_test(bad_arguments_are_refused_naming_the_op),
      cmocka_unit_test(cpu_entries_take_channels_last_maps),
      cmocka_unit_test(pool_windows_are_the_cpu_engines),
      cmocka_unit_test(graph_kernels_match_the_cpu_reference),
      cmocka_unit_test(vgg_trains_a_step_on_cuda_like_the_cpu),
      cmocka_unit_test(mobilenet_trains_a_step_on_cuda_like_the_cpu),
      cmocka_unit_test(seresnet_trains_a_step_on_cuda_like_the_cpu),
      cmocka_unit_test(acts_trains_a_step_on_cuda_like_the_cpu),
      cmocka_unit_test(convnext_trains_a_step_on_cuda_like_the_cpu),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
