/* The narrow 3x3 convolutions of the inference engine on the planar
 * layouts (libpxcore/infer/p2conv.h), bf16 (P2) and f32 (P1). The plain
 * references against our own loops over f32 NCHW data (for P2, inputs,
 * weights and residuals rounded to bf16 first, so that only the
 * accumulation and the final rounding can differ), on shapes with one
 * input channel, odd channel counts, several output blocks, rows that are
 * not whole 16-pixel chunks, one-row maps and several images, with every
 * combination of the residual sum and the two ReLUs; the layouts'
 * conversions round trip, the vectorised conversions to NHWC give the
 * values one at a time would, and those from NHWC the words the layouts'
 * definitions give (borders over garbage included) and back, writing
 * nothing outside their output;
 * outputs get zero borders over garbage; nothing is allocated. Then the
 * AVX-512 kernels against the references on the same cases (bf16: at most
 * one bf16 ulp apart; f32: to the bit), and the same on one thread or two
 * (skipped on a CPU without AVX512-BF16 or AVX512F, or with
 * PX_INFER_P2=0). */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "infer/p2conv.h"
#include "prunex/ops.h"
#include "prunex/px.h"
#include "px_test_util.h"

typedef struct {
  int ci, co, h, w;
  int32_t b;
} shape_t;

static const shape_t shapes[] = {
    {1, 15, 7, 5, 1},  {1, 1, 1, 16, 3},   {15, 8, 7, 17, 3}, {8, 15, 1, 32, 1},
    {3, 16, 7, 16, 3}, {16, 16, 7, 5, 1},  {5, 29, 7, 17, 1}, {15, 8, 32, 32, 2},
    {7, 1, 7, 32, 1},  {4, 12, 3, 33, 2},  {2, 3, 2, 1, 1},   {9, 32, 7, 16, 1},
};
#define NSHAPES ((int)(sizeof shapes / sizeof shapes[0]))

/* (sum, relu_mid, relu) */
static const int flag_sets[][3] = {{0, 0, 0}, {0, 0, 1}, {0, 1, 0},
                                   {1, 0, 0}, {1, 0, 1}, {1, 1, 1}};
#define NFLAGS ((int)(sizeof flag_sets / sizeof flag_sets[0]))

/* f rounded to bf16 (8 significant bits, ties to even), by frexp and rint
 * rather than on the bits as the library does; finite normal f. */
static float bf16_round(float f) {
  int e;
  const double m = frexp((double)f, &e);
  return (float)ldexp(rint(ldexp(m, 8)), e - 8);
}

static uint16_t bf16_bits(float f) {
  uint32_t b;
  f = bf16_round(f);
  memcpy(&b, &f, sizeof b);
  return (uint16_t)(b >> 16);
}

static float bf16_value(uint16_t h) {
  const uint32_t b = (uint32_t)h << 16;
  float f;
  memcpy(&f, &b, sizeof f);
  return f;
}

/* Steps between two bf16 values (+0 and -0 the same). */
static int bf16_ulps(uint16_t a, uint16_t b) {
  const int ka = a & 0x8000 ? -(int)(a & 0x7FFF) : (int)a;
  const int kb = b & 0x8000 ? -(int)(b & 0x7FFF) : (int)b;
  return abs(ka - kb);
}

/* One convolution's data as f32 NCHW values (on the bf16 grid for P2). */
typedef struct {
  shape_t s;
  int sum, relu_mid, relu;
  float *x;    /* [b][ci][h][w] */
  float *wf;   /* [co][ci][3][3] */
  float *bias; /* [co], any f32 */
  float *res;  /* [b][co][h][w] the residual (sum) */
} data_t;

/* The same convolution's P2 forms. */
typedef struct {
  data_t d;
  uint32_t *xp; /* P2 of x */
  uint32_t *wq; /* packed wf */
  uint32_t *y0; /* P2 of res (sum) or garbage: y's contents before a run */
  size_t ny;    /* words of y */
} case_t;

/* And its P1 forms. */
typedef struct {
  data_t d;
  float *xp; /* P1 of x */
  float *wq; /* packed wf */
  float *y0; /* P1 of res (sum) or garbage */
  size_t ny; /* floats of y */
} case1_t;

static float *normals(px_test_rng_t *r, size_t n, float scale, int round) {
  float *v = malloc(n * sizeof *v);
  assert_non_null(v);
  px_test_fill_normal(r, v, n);
  for (size_t i = 0; i < n; i++) v[i] = round ? bf16_round(v[i] * scale) : v[i] * scale;
  return v;
}

/* Random data (on the bf16 grid when round) for shape s and flags. */
static void data_make(data_t *d, const shape_t *s, const int *flags, px_test_rng_t *r, int round) {
  d->s = *s;
  d->sum = flags[0];
  d->relu_mid = flags[1];
  d->relu = flags[2];
  const size_t hw = (size_t)s->h * (size_t)s->w;
  d->x = normals(r, (size_t)s->b * (size_t)s->ci * hw, 1.0f, round);
  d->wf = normals(r, (size_t)s->co * (size_t)s->ci * 9, 0.3f, round);
  d->bias = normals(r, (size_t)s->co, 0.5f, 0);
  d->res = normals(r, (size_t)s->b * (size_t)s->co * hw, 1.0f, round);
}

static void data_free(data_t *d) {
  free(d->x);
  free(d->wf);
  free(d->bias);
  free(d->res);
}

static void case_make(case_t *t, const shape_t *s, const int *flags, px_test_rng_t *r) {
  memset(t, 0, sizeof *t);
  data_make(&t->d, s, flags, r, 1);
  t->xp = malloc(px__p2_words(s->b, s->ci, s->h, s->w) * sizeof *t->xp);
  t->wq = malloc(px__p2_weight_words(s->ci, s->co) * sizeof *t->wq);
  t->ny = px__p2_words(s->b, s->co, s->h, s->w);
  t->y0 = malloc(t->ny * sizeof *t->y0);
  assert_true(t->xp && t->wq && t->y0);
  px__p2_from_nchw(t->d.x, s->b, s->b, s->ci, s->h, s->w, t->xp);
  px__p2_pack_weights(t->d.wf, s->ci, s->co, t->wq);
  if (t->d.sum) px__p2_from_nchw(t->d.res, s->b, s->b, s->co, s->h, s->w, t->y0);
  else
    for (size_t i = 0; i < t->ny; i++) t->y0[i] = (uint32_t)px_test_rng_u64(r) | 0x01010101u;
}

static void case_free(case_t *t) {
  data_free(&t->d);
  free(t->xp);
  free(t->wq);
  free(t->y0);
}

/* A fresh copy of the case's y and the parameters that run into it. */
static px__p2_conv_t case_conv(const case_t *t, uint32_t *y) {
  memcpy(y, t->y0, t->ny * sizeof *y);
  const data_t *d = &t->d;
  const px__p2_conv_t p = {t->xp, y,        t->wq,    d->bias, d->s.b,      d->s.ci,
                           d->s.co, d->s.h, d->s.w, d->sum,  d->relu_mid, d->relu};
  return p;
}

/* Garbage floats (any bits, NaNs included) for a y that sum does not read. */
static void fill_garbage(px_test_rng_t *r, float *y, size_t n) {
  for (size_t i = 0; i < n; i++) {
    const uint32_t b = (uint32_t)px_test_rng_u64(r) | 0x01010101u;
    memcpy(&y[i], &b, sizeof b);
  }
}

static void case1_make(case1_t *t, const shape_t *s, const int *flags, px_test_rng_t *r) {
  memset(t, 0, sizeof *t);
  data_make(&t->d, s, flags, r, 0);
  t->xp = malloc(px__p1_words(s->b, s->ci, s->h, s->w) * sizeof *t->xp);
  t->wq = malloc(px__p1_weight_words(s->ci, s->co) * sizeof *t->wq);
  t->ny = px__p1_words(s->b, s->co, s->h, s->w);
  t->y0 = malloc(t->ny * sizeof *t->y0);
  assert_true(t->xp && t->wq && t->y0);
  px__p1_from_nchw(t->d.x, s->b, s->b, s->ci, s->h, s->w, t->xp);
  px__p1_pack_weights(t->d.wf, s->ci, s->co, t->wq);
  if (t->d.sum) px__p1_from_nchw(t->d.res, s->b, s->b, s->co, s->h, s->w, t->y0);
  else fill_garbage(r, t->y0, t->ny);
}

static void case1_free(case1_t *t) {
  data_free(&t->d);
  free(t->xp);
  free(t->wq);
  free(t->y0);
}

static px__p1_conv_t case1_conv(const case1_t *t, float *y) {
  memcpy(y, t->y0, t->ny * sizeof *y);
  const data_t *d = &t->d;
  const px__p1_conv_t p = {t->xp, y,        t->wq,    d->bias, d->s.b,      d->s.ci,
                           d->s.co, d->s.h, d->s.w, d->sum,  d->relu_mid, d->relu};
  return p;
}

/* Every border word of every pair plane of a P2 activation is 0, and the
 * high half of the last pair when the channel count is odd. */
static void check_borders(const uint32_t *y, int32_t b, int c, int h, int w) {
  const int q = (c + 1) / 2;
  for (int64_t pl = 0; pl < (int64_t)b * q; pl++)
    for (int py = 0; py < h + 2; py++)
      for (int px = 0; px < w + 2; px++) {
        const uint32_t v = y[((size_t)pl * (size_t)(h + 2) + (size_t)py) * (size_t)(w + 2) +
                             (size_t)px];
        if (py == 0 || py == h + 1 || px == 0 || px == w + 1) assert_true(v == 0);
        else if (c % 2 && pl % q == q - 1) assert_true((v >> 16) == 0);
      }
}

/* Every border float of every plane of a P1 activation is +0. */
static void check_borders1(const float *y, int32_t b, int c, int h, int w) {
  for (int64_t pl = 0; pl < (int64_t)b * c; pl++)
    for (int py = 0; py < h + 2; py++)
      for (int px = 0; px < w + 2; px++) {
        uint32_t v;
        memcpy(&v, &y[((size_t)pl * (size_t)(h + 2) + (size_t)py) * (size_t)(w + 2) + (size_t)px],
               sizeof v);
        if (py == 0 || py == h + 1 || px == 0 || px == w + 1) assert_true(v == 0);
      }
}

/* The expected value of output (image n, channel o, pixel py, px), in
 * double, and the sum of the magnitudes that went into it. */
static double expected(const data_t *t, int32_t n, int o, int py, int px, double *mag) {
  const shape_t *s = &t->s;
  double acc = 0, m = 0;
  for (int c = 0; c < s->ci; c++)
    for (int ky = 0; ky < 3; ky++)
      for (int kx = 0; kx < 3; kx++) {
        const int iy = py + ky - 1, ix = px + kx - 1;
        if (iy < 0 || iy >= s->h || ix < 0 || ix >= s->w) continue;
        const size_t xi = (((size_t)n * (size_t)s->ci + (size_t)c) * (size_t)s->h +
                           (size_t)iy) * (size_t)s->w + (size_t)ix;
        const size_t wi = (((size_t)o * (size_t)s->ci + (size_t)c) * 3 + (size_t)ky) * 3 +
                          (size_t)kx;
        const double v = (double)t->x[xi] * (double)t->wf[wi];
        acc += v;
        m += fabs(v);
      }
  double v = acc + (double)t->bias[o];
  m += fabs((double)t->bias[o]);
  if (t->relu_mid) v = fmax(v, 0.0);
  if (t->sum) {
    const double r = (double)t->res[(((size_t)n * (size_t)s->co + (size_t)o) * (size_t)s->h +
                                     (size_t)py) * (size_t)s->w + (size_t)px];
    v += r;
    m += fabs(r);
  }
  if (t->relu) v = fmax(v, 0.0);
  *mag = m;
  return v;
}

/* y (a run of the case) against our loops: within half a bf16 ulp of the
 * exact value (2^-8 relative, the final rounding) plus 2^-16 of the
 * magnitudes summed (f32 accumulation), zero borders. */
static void check_against_loops(const case_t *t, const uint32_t *y) {
  const data_t *d = &t->d;
  const shape_t *s = &d->s;
  const size_t n = (size_t)s->b * (size_t)s->h * (size_t)s->w * (size_t)s->co;
  uint16_t *got = malloc(n * sizeof *got);
  assert_non_null(got);
  px__p2_to_nhwc(y, s->b, s->co, s->h, s->w, got);
  for (int32_t b = 0; b < s->b; b++)
    for (int py = 0; py < s->h; py++)
      for (int px = 0; px < s->w; px++)
        for (int o = 0; o < s->co; o++) {
          double mag;
          const double e = expected(d, b, o, py, px, &mag);
          const double g = (double)bf16_value(
              got[(((size_t)b * (size_t)s->h + (size_t)py) * (size_t)s->w + (size_t)px) *
                      (size_t)s->co + (size_t)o]);
          if (fabs(g - e) > 0x1p-8 * fabs(e) + 0x1p-16 * mag) {
            print_error("ci %d co %d h %d w %d b %d flags %d%d%d: [%d][%d][%d][%d] %g, want %g\n",
                        s->ci, s->co, s->h, s->w, s->b, d->sum, d->relu_mid, d->relu, b, o, py,
                        px, g, e);
            fail();
          }
        }
  check_borders(y, s->b, s->co, s->h, s->w);
  free(got);
}

/* The same for P1: within 2^-16 of the magnitudes summed (f32 sums of at
 * most 9 * 32 + 2 terms, in another order than our double one) and 2^-23
 * of the value (its rounding to f32). */
static void check_against_loops1(const case1_t *t, const float *y) {
  const data_t *d = &t->d;
  const shape_t *s = &d->s;
  const size_t n = (size_t)s->b * (size_t)s->h * (size_t)s->w * (size_t)s->co;
  float *got = malloc(n * sizeof *got);
  assert_non_null(got);
  px__p1_to_nhwc(y, s->b, s->co, s->h, s->w, got);
  for (int32_t b = 0; b < s->b; b++)
    for (int py = 0; py < s->h; py++)
      for (int px = 0; px < s->w; px++)
        for (int o = 0; o < s->co; o++) {
          double mag;
          const double e = expected(d, b, o, py, px, &mag);
          const double g = (double)got[(((size_t)b * (size_t)s->h + (size_t)py) * (size_t)s->w +
                                        (size_t)px) * (size_t)s->co + (size_t)o];
          if (!(fabs(g - e) <= 0x1p-23 * fabs(e) + 0x1p-16 * mag)) {
            print_error("ci %d co %d h %d w %d b %d flags %d%d%d: [%d][%d][%d][%d] %.9g, want %.9g\n",
                        s->ci, s->co, s->h, s->w, s->b, d->sum, d->relu_mid, d->relu, b, o, py,
                        px, g, e);
            fail();
          }
        }
  check_borders1(y, s->b, s->co, s->h, s->w);
  free(got);
}

static void reference_matches_loops(void **state) {
  (void)state;
  px_test_rng_t r;
  px_test_rng_seed(&r, 11);
  for (int i = 0; i < NSHAPES; i++)
    for (int f = 0; f < NFLAGS; f++) {
      case_t t;
      case_make(&t, &shapes[i], flag_sets[f], &r);
      uint32_t *y = malloc(t.ny * sizeof *y);
      assert_non_null(y);
      const px__p2_conv_t p = case_conv(&t, y);
      px_mem_stats_t m0, m1;
      px_mem_stats(&m0);
      px__p2_conv3x3_ref(&p);
      px_mem_stats(&m1);
      assert_true(m1.allocs == m0.allocs);
      check_against_loops(&t, y);
      free(y);
      case_free(&t);
    }
}

/* NCHW f32 into P2 and P2 into NHWC bf16: each value's bf16 (ties to
 * even: 1 + 2^-8 rounds down, 1 + 3 * 2^-8 up) in its place, borders and
 * the images past n zero; sizes as documented. */
static void layout_round_trips(void **state) {
  (void)state;
  const int c = 5, h = 3, w = 4;
  const int32_t n = 2, batch = 3;
  const size_t per = (size_t)c * (size_t)h * (size_t)w, words = px__p2_words(batch, c, h, w);
  assert_int_equal(words, (size_t)batch * 3 * 5 * 6);
  assert_int_equal(px__p2_weight_words(5, 7), 3 * 9 * 7);
  assert_int_equal(px__p2_weight_words(1, 1), 9);
  px_test_rng_t r;
  px_test_rng_seed(&r, 5);
  float *x = normals(&r, n * per, 3.0f, 0);
  x[0] = 1.0f + 0x1p-8f;
  x[1] = 1.0f + 3 * 0x1p-8f;
  x[2] = -0.0f;
  uint32_t *p = malloc(words * sizeof *p);
  uint16_t *back = malloc((size_t)batch * per * sizeof *back);
  assert_true(p && back);
  memset(p, 0xA5, words * sizeof *p);
  px__p2_from_nchw(x, n, batch, c, h, w, p);
  check_borders(p, batch, c, h, w);
  for (size_t i = (size_t)n * 3 * 5 * 6; i < words; i++) assert_true(p[i] == 0);
  px__p2_to_nhwc(p, batch, c, h, w, back);
  assert_int_equal(back[0], 0x3F80);
  assert_int_equal(back[1 * c], 0x3F82); /* x[1] is pixel (0, 1) of channel 0 */
  assert_int_equal(back[2 * c], 0x8000);
  for (int32_t b = 0; b < batch; b++)
    for (int ch = 0; ch < c; ch++)
      for (int i = 0; i < h * w; i++) {
        const uint16_t want = b < n ? bf16_bits(x[((size_t)b * (size_t)c + (size_t)ch) *
                                                     (size_t)(h * w) + (size_t)i])
                                    : 0;
        assert_int_equal(back[((size_t)b * (size_t)(h * w) + (size_t)i) * (size_t)c + (size_t)ch],
                         want);
      }
  free(x);
  free(p);
  free(back);
}

/* The packed weights: pair (2q low, 2q + 1 high, 0 past c_in) of tap t of
 * output o at (q * 9 + t) * c_out + o. */
static void weights_pack_in_pairs(void **state) {
  (void)state;
  const int ci = 3, co = 2;
  px_test_rng_t r;
  px_test_rng_seed(&r, 9);
  float *wf = normals(&r, (size_t)co * ci * 9, 1.0f, 0);
  uint32_t wq[2 * 9 * 2];
  px__p2_pack_weights(wf, ci, co, wq);
  for (int q = 0; q < 2; q++)
    for (int t = 0; t < 9; t++)
      for (int o = 0; o < co; o++) {
        const uint32_t v = wq[(q * 9 + t) * co + o];
        assert_int_equal(v & 0xFFFF, bf16_bits(wf[(o * ci + 2 * q) * 9 + t]));
        assert_int_equal(v >> 16, 2 * q + 1 < ci ? bf16_bits(wf[(o * ci + 2 * q + 1) * 9 + t]) : 0);
      }
  free(wf);
}

/* The kernel against the reference, word by word (borders too), on every
 * case: at most one bf16 ulp apart (the same accumulation order; the
 * instruction flushes denormals), nothing allocated. */
static void kernel_matches_reference(void **state) {
  (void)state;
  if (!px__p2_available()) {
    printf("no AVX512-BF16 here (or PX_INFER_P2=0): kernel test skipped\n");
    skip();
  }
  px_test_rng_t r;
  px_test_rng_seed(&r, 23);
  int64_t exact = 0, total = 0;
  for (int i = 0; i < NSHAPES; i++)
    for (int f = 0; f < NFLAGS; f++) {
      case_t t;
      case_make(&t, &shapes[i], flag_sets[f], &r);
      uint32_t *yk = malloc(t.ny * sizeof *yk), *yr = malloc(t.ny * sizeof *yr);
      assert_true(yk && yr);
      const px__p2_conv_t pk = case_conv(&t, yk), pr = case_conv(&t, yr);
      px_mem_stats_t m0, m1;
      px_mem_stats(&m0);
      px__p2_conv3x3(&pk);
      px__p2_conv3x3_ref(&pr);
      px_mem_stats(&m1);
      assert_true(m1.allocs == m0.allocs);
      for (size_t j = 0; j < t.ny; j++) {
        const int d0 = bf16_ulps((uint16_t)yk[j], (uint16_t)yr[j]);
        const int d1 = bf16_ulps((uint16_t)(yk[j] >> 16), (uint16_t)(yr[j] >> 16));
        if (d0 > 1 || d1 > 1) {
          print_error("shape %d flags %d: word %zu is %08x, the reference's %08x\n", i, f, j,
                      yk[j], yr[j]);
          fail();
        }
        exact += yk[j] == yr[j];
        total++;
      }
      check_borders(yk, t.d.s.b, t.d.s.co, t.d.s.h, t.d.s.w);
      free(yk);
      free(yr);
      case_free(&t);
    }
  printf("kernel: %lld of %lld words exactly the reference's\n", (long long)exact,
         (long long)total);
  /* Another order of the f32 sums would still round to the same bf16 but
   * within 2^-16 or so of a rounding boundary: a word in a hundred off by
   * an ulp is a bug, not rounding (the same order gives all of them here). */
  assert_true(exact * 100 >= total * 99);
}

/* Two threads give the words one does (each image is one thread's). */
static void kernel_results_do_not_depend_on_threads(void **state) {
  (void)state;
  if (!px__p2_available()) {
    printf("no AVX512-BF16 here (or PX_INFER_P2=0): kernel test skipped\n");
    skip();
  }
  px_test_rng_t r;
  px_test_rng_seed(&r, 31);
  const shape_t s = {15, 8, 32, 32, 4};
  case_t t;
  case_make(&t, &s, flag_sets[5], &r);
  uint32_t *y1 = malloc(t.ny * sizeof *y1), *y2 = malloc(t.ny * sizeof *y2);
  assert_true(y1 && y2);
  const px__p2_conv_t p1 = case_conv(&t, y1), p2 = case_conv(&t, y2);
  px_ops_t *ops1, *ops2;
  assert_int_equal(px_ops_create(px_device_cpu(), 1, &ops1), PX_OK); /* one OpenMP thread */
  px__p2_conv3x3(&p1);
  assert_int_equal(px_ops_create(px_device_cpu(), 2, &ops2), PX_OK); /* two */
  px__p2_conv3x3(&p2);
  assert_memory_equal(y1, y2, t.ny * sizeof *y1);
  px_ops_destroy(ops2);
  px_ops_destroy(ops1);
  free(y1);
  free(y2);
  case_free(&t);
}

/* ---- P1 (f32) ---------------------------------------------------------------- */

static void p1_reference_matches_loops(void **state) {
  (void)state;
  px_test_rng_t r;
  px_test_rng_seed(&r, 41);
  for (int i = 0; i < NSHAPES; i++)
    for (int f = 0; f < NFLAGS; f++) {
      case1_t t;
      case1_make(&t, &shapes[i], flag_sets[f], &r);
      float *y = malloc(t.ny * sizeof *y);
      assert_non_null(y);
      const px__p1_conv_t p = case1_conv(&t, y);
      px_mem_stats_t m0, m1;
      px_mem_stats(&m0);
      px__p1_conv3x3_ref(&p);
      px_mem_stats(&m1);
      assert_true(m1.allocs == m0.allocs);
      check_against_loops1(&t, y);
      free(y);
      case1_free(&t);
    }
}

/* NCHW f32 into P1 and P1 into NHWC: each value in its place, to the bit
 * (-0 and a denormal included), borders and the images past n zero over
 * garbage; sizes as documented. */
static void p1_layout_round_trips(void **state) {
  (void)state;
  const int c = 5, h = 3, w = 4;
  const int32_t n = 2, batch = 3;
  const size_t per = (size_t)c * (size_t)h * (size_t)w, words = px__p1_words(batch, c, h, w);
  assert_int_equal(words, (size_t)batch * 5 * 5 * 6);
  assert_int_equal(px__p1_weight_words(5, 7), 5 * 9 * 7);
  assert_int_equal(px__p1_weight_words(1, 1), 9);
  px_test_rng_t r;
  px_test_rng_seed(&r, 43);
  float *x = normals(&r, n * per, 3.0f, 0);
  x[1] = -0.0f;
  x[2] = 0x1p-140f;
  float *p = malloc(words * sizeof *p), *back = malloc((size_t)batch * per * sizeof *back);
  assert_true(p && back);
  fill_garbage(&r, p, words);
  px__p1_from_nchw(x, n, batch, c, h, w, p);
  check_borders1(p, batch, c, h, w);
  for (size_t i = (size_t)n * 5 * 5 * 6; i < words; i++) assert_true(p[i] == 0.0f);
  px__p1_to_nhwc(p, batch, c, h, w, back);
  for (int32_t b = 0; b < batch; b++)
    for (int ch = 0; ch < c; ch++)
      for (int i = 0; i < h * w; i++) {
        const float want =
            b < n ? x[((size_t)b * (size_t)c + (size_t)ch) * (size_t)(h * w) + (size_t)i] : 0.0f;
        assert_memory_equal(
            &back[((size_t)b * (size_t)(h * w) + (size_t)i) * (size_t)c + (size_t)ch], &want,
            sizeof want);
      }
  free(x);
  free(p);
  free(back);
}

/* The packed f32 weights: tap t of input c of output o at (c * 9 + t) *
 * c_out + o. */
static void p1_weights_pack(void **state) {
  (void)state;
  const int ci = 3, co = 2;
  px_test_rng_t r;
  px_test_rng_seed(&r, 47);
  float *wf = normals(&r, (size_t)co * ci * 9, 1.0f, 0);
  float wq[3 * 9 * 2];
  px__p1_pack_weights(wf, ci, co, wq);
  for (int c = 0; c < ci; c++)
    for (int t = 0; t < 9; t++)
      for (int o = 0; o < co; o++) assert_true(wq[(c * 9 + t) * co + o] == wf[(o * ci + c) * 9 + t]);
  free(wf);
}

/* The f32 kernel against the reference, to the bit (the same FMAs in the
 * same order), borders too, on every case; nothing allocated. */
static void p1_kernel_matches_reference(void **state) {
  (void)state;
  if (!px__p1_available()) {
    printf("no AVX512F here (or PX_INFER_P2=0): kernel test skipped\n");
    skip();
  }
  px_test_rng_t r;
  px_test_rng_seed(&r, 53);
  for (int i = 0; i < NSHAPES; i++)
    for (int f = 0; f < NFLAGS; f++) {
      case1_t t;
      case1_make(&t, &shapes[i], flag_sets[f], &r);
      float *yk = malloc(t.ny * sizeof *yk), *yr = malloc(t.ny * sizeof *yr);
      assert_true(yk && yr);
      const px__p1_conv_t pk = case1_conv(&t, yk), pr = case1_conv(&t, yr);
      px_mem_stats_t m0, m1;
      px_mem_stats(&m0);
      px__p1_conv3x3(&pk);
      px__p1_conv3x3_ref(&pr);
      px_mem_stats(&m1);
      assert_true(m1.allocs == m0.allocs);
      if (memcmp(yk, yr, t.ny * sizeof *yk) != 0) {
        for (size_t j = 0; j < t.ny; j++)
          if (memcmp(&yk[j], &yr[j], sizeof *yk) != 0) {
            print_error("shape %d flags %d: float %zu is %.9g, the reference's %.9g\n", i, f, j,
                        (double)yk[j], (double)yr[j]);
            break;
          }
        fail();
      }
      check_borders1(yk, t.d.s.b, t.d.s.co, t.d.s.h, t.d.s.w);
      free(yk);
      free(yr);
      case1_free(&t);
    }
}

/* Two threads give the floats one does. */
static void p1_kernel_results_do_not_depend_on_threads(void **state) {
  (void)state;
  if (!px__p1_available()) {
    printf("no AVX512F here (or PX_INFER_P2=0): kernel test skipped\n");
    skip();
  }
  px_test_rng_t r;
  px_test_rng_seed(&r, 59);
  const shape_t s = {8, 15, 32, 32, 4};
  case1_t t;
  case1_make(&t, &s, flag_sets[5], &r);
  float *y1 = malloc(t.ny * sizeof *y1), *y2 = malloc(t.ny * sizeof *y2);
  assert_true(y1 && y2);
  const px__p1_conv_t p1 = case1_conv(&t, y1), p2 = case1_conv(&t, y2);
  px_ops_t *ops1, *ops2;
  assert_int_equal(px_ops_create(px_device_cpu(), 1, &ops1), PX_OK);
  px__p1_conv3x3(&p1);
  assert_int_equal(px_ops_create(px_device_cpu(), 2, &ops2), PX_OK);
  px__p1_conv3x3(&p2);
  assert_memory_equal(y1, y2, t.ny * sizeof *y1);
  px_ops_destroy(ops2);
  px_ops_destroy(ops1);
  free(y1);
  free(y2);
  case1_free(&t);
}

/* ---- conversions to NHWC ---------------------------------------------------- */

/* px__p2_to_nhwc as it was before it was vectorised: one value at a time. */
static void p2_to_nhwc_scalar(const uint32_t *x, int32_t batch, int c, int h, int w, uint16_t *y) {
  const int qn = (c + 1) / 2;
  const size_t pitch = (size_t)w + 2, plane = (size_t)(h + 2) * pitch;
  for (int32_t b = 0; b < batch; b++)
    for (int q = 0; q < qn; q++) {
      const uint32_t *pl = x + ((size_t)b * (size_t)qn + (size_t)q) * plane;
      for (int py = 0; py < h; py++)
        for (int px = 0; px < w; px++) {
          const uint32_t v = pl[(size_t)(py + 1) * pitch + (size_t)px + 1];
          uint16_t *o = y + (((size_t)b * (size_t)h + (size_t)py) * (size_t)w + (size_t)px) *
                                (size_t)c + (size_t)(2 * q);
          o[0] = (uint16_t)(v & 0xFFFFu);
          if (2 * q + 1 < c) o[1] = (uint16_t)(v >> 16);
        }
    }
}

/* Channel counts on both sides of the 16 channels (8 pairs, 8 floats) the
 * vector code moves at a time, and widths on both sides of its 16 pixels. */
static const int nhwc_c[] = {1, 2, 3, 7, 8, 9, 15, 16, 17, 31, 33, 40};
static const int nhwc_w[] = {1, 5, 15, 16, 17, 32, 33};
#define NHWC_GUARD 64 /* elements of canary either side of the output */

/* px__p2_to_nhwc gives the old loop's values over activations of random
 * words (borders too: they must not be read), and writes nothing outside
 * its output (canaries either side). */
static void p2_to_nhwc_matches_scalar(void **state) {
  (void)state;
  px_test_rng_t r;
  px_test_rng_seed(&r, 61);
  for (size_t ic = 0; ic < sizeof nhwc_c / sizeof *nhwc_c; ic++)
    for (size_t iw = 0; iw < sizeof nhwc_w / sizeof *nhwc_w; iw++) {
      const int c = nhwc_c[ic], w = nhwc_w[iw], h = 1 + (int)(iw % 3);
      const int32_t b = 1 + (int32_t)(ic % 3);
      const size_t nx = px__p2_words(b, c, h, w), ny = (size_t)b * (size_t)(c * h * w);
      uint32_t *x = malloc(nx * sizeof *x);
      uint16_t *got = malloc((ny + 2 * NHWC_GUARD) * sizeof *got), *want = malloc(ny * sizeof *want);
      assert_true(x && got && want);
      for (size_t i = 0; i < nx; i++) x[i] = (uint32_t)px_test_rng_u64(&r);
      memset(got, 0xA5, (ny + 2 * NHWC_GUARD) * sizeof *got);
      px__p2_to_nhwc(x, b, c, h, w, got + NHWC_GUARD);
      p2_to_nhwc_scalar(x, b, c, h, w, want);
      if (memcmp(got + NHWC_GUARD, want, ny * sizeof *want) != 0) {
        print_error("c %d h %d w %d b %d: not the scalar loop's values\n", c, h, w, (int)b);
        fail();
      }
      for (size_t i = 0; i < NHWC_GUARD; i++)
        assert_true(got[i] == 0xA5A5 && got[NHWC_GUARD + ny + i] == 0xA5A5);
      free(x);
      free(got);
      free(want);
    }
}

/* The same for px__p1_to_nhwc, against the layout's definition. */
static void p1_to_nhwc_matches_layout(void **state) {
  (void)state;
  px_test_rng_t r;
  px_test_rng_seed(&r, 67);
  for (size_t ic = 0; ic < sizeof nhwc_c / sizeof *nhwc_c; ic++)
    for (size_t iw = 0; iw < sizeof nhwc_w / sizeof *nhwc_w; iw++) {
      const int c = nhwc_c[ic], w = nhwc_w[iw], h = 1 + (int)(iw % 3);
      const int32_t b = 1 + (int32_t)(ic % 3);
      const size_t nx = px__p1_words(b, c, h, w), ny = (size_t)b * (size_t)(c * h * w);
      float *x = malloc(nx * sizeof *x), *got = malloc((ny + 2 * NHWC_GUARD) * sizeof *got);
      assert_true(x && got);
      fill_garbage(&r, x, nx);
      memset(got, 0xA5, (ny + 2 * NHWC_GUARD) * sizeof *got);
      px__p1_to_nhwc(x, b, c, h, w, got + NHWC_GUARD);
      for (int32_t n = 0; n < b; n++)
        for (int ch = 0; ch < c; ch++)
          for (int py = 0; py < h; py++)
            for (int px = 0; px < w; px++) {
              const float *e = &x[(((size_t)n * (size_t)c + (size_t)ch) * (size_t)(h + 2) +
                                   (size_t)(py + 1)) * (size_t)(w + 2) + (size_t)(px + 1)];
              const float *g = &got[NHWC_GUARD + (((size_t)n * (size_t)h + (size_t)py) *
                                                  (size_t)w + (size_t)px) * (size_t)c +
                                    (size_t)ch];
              if (memcmp(e, g, sizeof *e) != 0) {
                print_error("c %d h %d w %d b %d: [%d][%d][%d][%d] differs\n", c, h, w, (int)b,
                            (int)n, py, px, ch);
                fail();
              }
            }
      const uint32_t canary = 0xA5A5A5A5u;
      for (size_t i = 0; i < NHWC_GUARD; i++) {
        assert_memory_equal(&got[i], &canary, sizeof canary);
        assert_memory_equal(&got[NHWC_GUARD + ny + i], &canary, sizeof canary);
      }
      free(x);
      free(got);
    }
}

/* ---- conversions from NHWC ---------------------------------------------------- */

/* Every channel count from 1 to 40 (one to three groups of the 16
 * channels, 8 pairs or 8 floats, the vector code moves at a time, odd and
 * even) by every width from 1 to 33 (one to three chunks of 16 pixels,
 * whole or not); 1 to 3 rows and images. */
#define FROM_C 40
#define FROM_W 33

/* px__p2_from_nhwc's definition, one word at a time, borders included. */
static void p2_from_nhwc_scalar(const uint16_t *x, int32_t batch, int c, int h, int w,
                                uint32_t *y) {
  const int qn = (c + 1) / 2;
  for (int32_t b = 0; b < batch; b++)
    for (int q = 0; q < qn; q++)
      for (int py = 0; py < h + 2; py++)
        for (int px = 0; px < w + 2; px++) {
          uint32_t v = 0;
          if (py >= 1 && py <= h && px >= 1 && px <= w) {
            const uint16_t *e = x + (((size_t)b * (size_t)h + (size_t)(py - 1)) * (size_t)w +
                                     (size_t)(px - 1)) * (size_t)c + (size_t)(2 * q);
            v = (uint32_t)e[0] | (2 * q + 1 < c ? (uint32_t)e[1] << 16 : 0);
          }
          y[(((size_t)b * (size_t)qn + (size_t)q) * (size_t)(h + 2) + (size_t)py) *
                (size_t)(w + 2) + (size_t)px] = v;
        }
}

/* The same for px__p1_from_nhwc. */
static void p1_from_nhwc_scalar(const float *x, int32_t batch, int c, int h, int w, float *y) {
  for (int32_t b = 0; b < batch; b++)
    for (int ch = 0; ch < c; ch++)
      for (int py = 0; py < h + 2; py++)
        for (int px = 0; px < w + 2; px++) {
          float v = 0.0f;
          if (py >= 1 && py <= h && px >= 1 && px <= w)
            v = x[(((size_t)b * (size_t)h + (size_t)(py - 1)) * (size_t)w + (size_t)(px - 1)) *
                      (size_t)c + (size_t)ch];
          y[(((size_t)b * (size_t)c + (size_t)ch) * (size_t)(h + 2) + (size_t)py) *
                (size_t)(w + 2) + (size_t)px] = v;
        }
}

static void note_path(int vector, const char *what) {
  if (!vector) printf("no %s here (or PX_INFER_P2=0): only the scalar conversion tested\n", what);
}

/* px__p2_from_nhwc gives the definition's words over outputs of garbage
 * (no zero half anywhere: borders and the high half of an odd count's last
 * pair must be written), writes nothing outside its output (canaries
 * either side), and px__p2_to_nhwc takes the words back to the NHWC values
 * (any bits). */
static void p2_from_nhwc_matches_scalar(void **state) {
  (void)state;
  note_path(px__p2_available(), "AVX512-BF16");
  px_test_rng_t r;
  px_test_rng_seed(&r, 71);
  for (int c = 1; c <= FROM_C; c++)
    for (int w = 1; w <= FROM_W; w++) {
      const int h = 1 + w % 3;
      const int32_t b = 1 + c % 3;
      const size_t nx = (size_t)b * (size_t)(c * h * w), ny = px__p2_words(b, c, h, w);
      uint16_t *x = malloc(nx * sizeof *x), *back = malloc(nx * sizeof *back);
      uint32_t *got = malloc((ny + 2 * NHWC_GUARD) * sizeof *got);
      uint32_t *want = malloc(ny * sizeof *want);
      assert_true(x && back && got && want);
      for (size_t i = 0; i < nx; i++) x[i] = (uint16_t)px_test_rng_u64(&r);
      for (size_t i = 0; i < ny + 2 * NHWC_GUARD; i++) {
        const int canary = i < NHWC_GUARD || i >= NHWC_GUARD + ny;
        got[i] = canary ? 0xA5A5A5A5u : (uint32_t)px_test_rng_u64(&r) | 0x01010101u;
      }
      px__p2_from_nhwc(x, b, c, h, w, got + NHWC_GUARD);
      p2_from_nhwc_scalar(x, b, c, h, w, want);
      if (memcmp(got + NHWC_GUARD, want, ny * sizeof *want) != 0) {
        for (size_t i = 0; i < ny; i++)
          if (got[NHWC_GUARD + i] != want[i]) {
            print_error("c %d h %d w %d b %d: word %zu is %08x, want %08x\n", c, h, w, (int)b, i,
                        got[NHWC_GUARD + i], want[i]);
            break;
          }
        fail();
      }
      check_borders(got + NHWC_GUARD, b, c, h, w);
      for (size_t i = 0; i < NHWC_GUARD; i++)
        assert_true(got[i] == 0xA5A5A5A5u && got[NHWC_GUARD + ny + i] == 0xA5A5A5A5u);
      px__p2_to_nhwc(got + NHWC_GUARD, b, c, h, w, back);
      assert_memory_equal(back, x, nx * sizeof *x);
      free(x);
      free(back);
      free(got);
      free(want);
    }
}

/* The same for px__p1_from_nhwc, to the bit (the inputs are garbage: NaNs,
 * -0 and denormals among them). */
static void p1_from_nhwc_matches_scalar(void **state) {
  (void)state;
  note_path(px__p1_available(), "AVX512F");
  px_test_rng_t r;
  px_test_rng_seed(&r, 73);
  for (int c = 1; c <= FROM_C; c++)
    for (int w = 1; w <= FROM_W; w++) {
      const int h = 1 + w % 3;
      const int32_t b = 1 + c % 3;
      const size_t nx = (size_t)b * (size_t)(c * h * w), ny = px__p1_words(b, c, h, w);
      float *x = malloc(nx * sizeof *x), *back = malloc(nx * sizeof *back);
      float *got = malloc((ny + 2 * NHWC_GUARD) * sizeof *got);
      float *want = malloc(ny * sizeof *want);
      assert_true(x && back && got && want);
      fill_garbage(&r, x, nx);
      memset(got, 0xA5, NHWC_GUARD * sizeof *got);
      fill_garbage(&r, got + NHWC_GUARD, ny);
      memset(got + NHWC_GUARD + ny, 0xA5, NHWC_GUARD * sizeof *got);
      px__p1_from_nhwc(x, b, c, h, w, got + NHWC_GUARD);
      p1_from_nhwc_scalar(x, b, c, h, w, want);
      if (memcmp(got + NHWC_GUARD, want, ny * sizeof *want) != 0) {
        for (size_t i = 0; i < ny; i++)
          if (memcmp(&got[NHWC_GUARD + i], &want[i], sizeof *want) != 0) {
            print_error("c %d h %d w %d b %d: float %zu differs\n", c, h, w, (int)b, i);
            break;
          }
        fail();
      }
      check_borders1(got + NHWC_GUARD, b, c, h, w);
      const uint32_t canary = 0xA5A5A5A5u;
      for (size_t i = 0; i < NHWC_GUARD; i++) {
        assert_memory_equal(&got[i], &canary, sizeof canary);
        assert_memory_equal(&got[NHWC_GUARD + ny + i], &canary, sizeof canary);
      }
      px__p1_to_nhwc(got + NHWC_GUARD, b, c, h, w, back);
      assert_memory_equal(back, x, nx * sizeof *x);
      free(x);
      free(back);
      free(got);
      free(want);
    }
}

/* The cases run on one OpenMP thread: dozens of small parallel regions
 * took seconds, not a tenth of one, on a loaded two-core machine (the
 * runtime's threads spin at each region's end). */
static int one_thread(void **state) {
  px_ops_t *ops;
  if (px_ops_create(px_device_cpu(), 1, &ops) != PX_OK) return -1;
  *state = ops;
  return 0;
}

static int one_thread_done(void **state) {
  px_ops_destroy(*state);
  return 0;
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(layout_round_trips),
      cmocka_unit_test(weights_pack_in_pairs),
      cmocka_unit_test(reference_matches_loops),
      cmocka_unit_test(kernel_matches_reference),
      cmocka_unit_test(kernel_results_do_not_depend_on_threads),
      cmocka_unit_test(p2_to_nhwc_matches_scalar),
      cmocka_unit_test(p1_layout_round_trips),
      cmocka_unit_test(p1_weights_pack),
      cmocka_unit_test(p1_reference_matches_loops),
      cmocka_unit_test(p1_kernel_matches_reference),
      cmocka_unit_test(p1_kernel_results_do_not_depend_on_threads),
      cmocka_unit_test(p1_to_nhwc_matches_layout),
      cmocka_unit_test(p2_from_nhwc_matches_scalar),
      cmocka_unit_test(p1_from_nhwc_matches_scalar),
  };
  return cmocka_run_group_tests(tests, one_thread, one_thread_done);
}
