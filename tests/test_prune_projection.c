/* Projections onto the filter, channel and shape sparsity sets: each one is
 * the Frobenius-nearest point of its set (checked by brute force over every
 * support on small tensors), keeps exactly ceil(keep * count) groups, breaks
 * ties by the lowest index, and the composite applies filter, channel, shape
 * in that order; the coupled projection (a producer's filters with its
 * consumer's channels) is the nearest point of its set too. */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "prunex/prune.h"
#include "prunex/prune_internal.h"
#include "px_test_util.h"

enum { KIND_FILTER, KIND_CHANNEL, KIND_SHAPE };

/* Group id of element (o, c, j) for a projection kind. */
static size_t group_of(int kind, px_conv_shape_t s, size_t o, size_t c, size_t j) {
  size_t khw = (size_t)s.kh * s.kw;
  switch (kind) {
    case KIND_FILTER: return o;
    case KIND_CHANNEL: return c;
    default: return c * khw + j;
  }
}

static size_t num_groups(int kind, px_conv_shape_t s) {
  return kind == KIND_FILTER ? (size_t)s.c_out
         : kind == KIND_CHANNEL ? (size_t)s.c_in
                                : (size_t)s.c_in * s.kh * s.kw;
}

static px_status_t project(int kind, float *w, px_conv_shape_t s, double keep, uint8_t *mask) {
  switch (kind) {
    case KIND_FILTER: return px_prune_project_filter(w, s, keep, mask, NULL, 0);
    case KIND_CHANNEL: return px_prune_project_channel(w, s, keep, mask, NULL, 0);
    default: return px_prune_project_shape(w, s, keep, mask, NULL, 0);
  }
}

/* Squared distance between x and x restricted to the support `subset`
 * (bit g set: group g kept), computed element by element. */
static double dist_to_support(int kind, const float *x, px_conv_shape_t s, uint32_t subset) {
  size_t khw = (size_t)s.kh * s.kw;
  double d = 0;
  for (size_t o = 0; o < (size_t)s.c_out; o++)
    for (size_t c = 0; c < (size_t)s.c_in; c++)
      for (size_t j = 0; j < khw; j++) {
        double v = x[(o * s.c_in + c) * khw + j];
        if (!(subset >> group_of(kind, s, o, c, j) & 1u)) d += v * v;
      }
  return d;
}

static double sqdist(const float *a, const float *b, size_t n) {
  double d = 0;
  for (size_t i = 0; i < n; i++) d += ((double)a[i] - b[i]) * ((double)a[i] - b[i]);
  return d;
}

static void check_nearest(int kind, px_conv_shape_t s, uint64_t seed) {
  px_test_rng_t rng;
  px_test_rng_seed(&rng, seed);
  size_t n = px_conv_numel(s), G = num_groups(kind, s);
  assert_true(G <= 12);
  float *x = malloc(n * sizeof *x), *y = malloc(n * sizeof *y);
  uint8_t mask[64];
  px_test_fill_normal(&rng, x, n);
  for (size_t k = 0; k <= G; k++) {
    double keep = (double)k / (double)G;
    memcpy(y, x, n * sizeof *x);
    assert_int_equal(project(kind, y, s, keep, mask), PX_OK);
    /* brute force: the best support of at most k groups */
    double best = INFINITY;
    for (uint32_t sub = 0; sub < (1u << G); sub++)
      if ((size_t)__builtin_popcount(sub) <= k) {
        double d = dist_to_support(kind, x, s, sub);
        if (d < best) best = d;
      }
    double got = sqdist(x, y, n);
    assert_true(fabs(got - best) <= 1e-9 * (1.0 + best));
    /* y is x on the kept groups and zero elsewhere; exactly k groups kept */
    size_t kept = 0;
    for (size_t g = 0; g < G; g++) kept += mask[g];
    assert_int_equal(kept, k);
    size_t khw = (size_t)s.kh * s.kw;
    for (size_t o = 0; o < (size_t)s.c_out; o++)
      for (size_t c = 0; c < (size_t)s.c_in; c++)
        for (size_t j = 0; j < khw; j++) {
          size_t i = (o * s.c_in + c) * khw + j;
          assert_true(y[i] == (mask[group_of(kind, s, o, c, j)] ? x[i] : 0.0f));
        }
  }
  free(x);
  free(y);
}

static void test_filter_projection_is_nearest_point(void **state) {
  (void)state;
  check_nearest(KIND_FILTER, (px_conv_shape_t){6, 3, 2, 2}, 1);
  check_nearest(KIND_FILTER, (px_conv_shape_t){9, 2, 3, 3}, 2);
  check_nearest(KIND_FILTER, (px_conv_shape_t){1, 4, 1, 1}, 3);
}

static void test_channel_projection_is_nearest_point(void **state) {
  (void)state;
  check_nearest(KIND_CHANNEL, (px_conv_shape_t){4, 6, 2, 2}, 4);
  check_nearest(KIND_CHANNEL, (px_conv_shape_t){3, 10, 1, 1}, 5);
  check_nearest(KIND_CHANNEL, (px_conv_shape_t){2, 5, 3, 3}, 6);
}

static void test_shape_projection_is_nearest_point(void **state) {
  (void)state;
  check_nearest(KIND_SHAPE, (px_conv_shape_t){3, 2, 2, 2}, 7);
  check_nearest(KIND_SHAPE, (px_conv_shape_t){5, 1, 3, 3}, 8);
  check_nearest(KIND_SHAPE, (px_conv_shape_t){2, 12, 1, 1}, 9);
}

/* The coupled projection of a producer A [C, Ci, kh, kw] and a consumer B
 * [Co, C, kh', kw'] is the nearest point of the set where A's filter c and
 * B's channel c are zero together for all but at most k channels c. */
static void check_coupled_nearest(px_conv_shape_t sa, px_conv_shape_t sb, uint64_t seed) {
  px_test_rng_t rng;
  px_test_rng_seed(&rng, seed);
  size_t na = px_conv_numel(sa), nb = px_conv_numel(sb), C = (size_t)sb.c_in;
  assert_true(C <= 12 && (size_t)sa.c_out == C);
  float *a = malloc(na * sizeof *a), *b = malloc(nb * sizeof *b);
  float *a2 = malloc(na * sizeof *a), *b2 = malloc(nb * sizeof *b);
  px_test_fill_normal(&rng, a, na);
  px_test_fill_normal(&rng, b, nb);
  size_t arow = na / C, khw = (size_t)sb.kh * sb.kw;
  for (size_t k = 0; k <= C; k++) {
    double keep = (double)k / (double)C;
    memcpy(a2, a, na * sizeof *a);
    memcpy(b2, b, nb * sizeof *b);
    uint8_t fmask[16], cmask[16];
    memset(fmask, 1, sizeof fmask);
    assert_int_equal(px_prune_project_coupled(a2, sa, b2, sb, keep, fmask, cmask, NULL, 0), PX_OK);
    double best = INFINITY;
    for (uint32_t sub = 0; sub < (1u << C); sub++) {
      if ((size_t)__builtin_popcount(sub) > k) continue;
      double d = 0;
      for (size_t c = 0; c < C; c++) {
        if (sub >> c & 1u) continue;
        for (size_t i = 0; i < arow; i++) d += (double)a[c * arow + i] * a[c * arow + i];
        for (size_t o = 0; o < (size_t)sb.c_out; o++)
          for (size_t j = 0; j < khw; j++) {
            double v = b[(o * C + c) * khw + j];
            d += v * v;
          }
      }
      if (d < best) best = d;
    }
    double got = sqdist(a, a2, na) + sqdist(b, b2, nb);
    assert_true(fabs(got - best) <= 1e-9 * (1.0 + best));
    size_t kept = 0;
    for (size_t c = 0; c < C; c++) {
      kept += cmask[c];
      assert_int_equal(fmask[c], cmask[c]); /* the filter goes with its channel */
      for (size_t i = 0; i < arow; i++)
        assert_true(a2[c * arow + i] == (cmask[c] ? a[c * arow + i] : 0.0f));
      for (size_t o = 0; o < (size_t)sb.c_out; o++)
        for (size_t j = 0; j < khw; j++) {
          size_t i = (o * C + c) * khw + j;
          assert_true(b2[i] == (cmask[c] ? b[i] : 0.0f));
        }
    }
    assert_int_equal(kept, k);
  }
  free(a);
  free(b);
  free(a2);
  free(b2);
}

static void test_coupled_projection_is_nearest_point(void **state) {
  (void)state;
  check_coupled_nearest((px_conv_shape_t){6, 3, 3, 3}, (px_conv_shape_t){4, 6, 3, 3}, 21);
  check_coupled_nearest((px_conv_shape_t){8, 5, 1, 1}, (px_conv_shape_t){3, 8, 3, 3}, 22);
  check_coupled_nearest((px_conv_shape_t){1, 2, 1, 1}, (px_conv_shape_t){2, 1, 1, 1}, 23);
}

static void test_coupled_projection_keeps_pruned_filters_and_checks_shapes(void **state) {
  (void)state;
  px_conv_shape_t sa = {4, 2, 1, 1}, sb = {3, 4, 1, 1};
  float a[8], b[12];
  for (int i = 0; i < 8; i++) a[i] = 1.0f;
  for (int i = 0; i < 12; i++) b[i] = 1.0f;
  /* every group ties: the lowest indices win */
  uint8_t fmask[4] = {1, 0, 1, 1}, cmask[4];
  assert_int_equal(px_prune_project_coupled(a, sa, b, sb, 0.5, fmask, cmask, NULL, 0), PX_OK);
  const uint8_t want_c[4] = {1, 1, 0, 0}, want_f[4] = {1, 0, 0, 0};
  assert_memory_equal(cmask, want_c, 4);
  assert_memory_equal(fmask, want_f, 4); /* filter 1 was pruned before and stays so */
  px_conv_shape_t bad = {3, 5, 1, 1};
  assert_int_equal(px_prune_project_coupled(a, sa, b, bad, 0.5, fmask, cmask, NULL, 0),
                   PX_ERR_INVALID);
  assert_int_equal(px_prune_project_coupled(a, sa, b, sb, 1.5, fmask, cmask, NULL, 0),
                   PX_ERR_INVALID);
  assert_int_equal(px_prune_project_coupled(a, sa, b, sb, 0.5, NULL, cmask, NULL, 0),
                   PX_ERR_INVALID);
}

static void test_keep_counts_are_exact(void **state) {
  (void)state;
  struct { double keep; size_t count, want; } cases[] = {
      {0.5, 16, 8},   {0.3, 10, 3},    {0.7, 10, 7},    {0.1, 10, 1},   {0.25, 64, 16},
      {0.5, 3, 2},    {1.0 / 3, 3, 1}, {0.33, 3, 1},    {0.0, 10, 0},   {1.0, 10, 10},
      {0.01, 64, 1},  {0.9, 512, 461}, {0.6, 5, 3},     {0.2, 5, 1},    {0.5, 1, 1},
      {1e-12, 7, 1},  {0.999, 7, 7},   {0.3f, 10, 4},  /* 0.3f is 0.3000000119: 4 */
  };
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++)
    assert_int_equal(px_prune_keep_count(cases[i].keep, cases[i].count), cases[i].want);

  /* on real-sized layers the projections keep exactly that many groups */
  px_test_rng_t rng;
  px_test_rng_seed(&rng, 11);
  px_conv_shape_t s = {64, 32, 3, 3};
  size_t n = px_conv_numel(s);
  float *w = malloc(n * sizeof *w);
  uint8_t *mask = malloc(px_prune_mask_size(s));
  double keeps[] = {0.1, 0.25, 0.3, 0.5, 0.7, 0.9};
  for (size_t i = 0; i < sizeof keeps / sizeof keeps[0]; i++) {
    px_test_fill_normal(&rng, w, n);
    px_prune_keep_t k = {keeps[i], keeps[i], keeps[i], 0, 0, 0};
    assert_int_equal(px_prune_project(w, s, &k, mask, NULL, 0), PX_OK);
    size_t f = 0, c = 0, g = 0;
    for (int o = 0; o < s.c_out; o++) f += mask[o];
    for (int ci = 0; ci < s.c_in; ci++) c += mask[s.c_out + ci];
    for (int j = 0; j < s.c_in * 9; j++) g += mask[s.c_out + s.c_in + j];
    assert_int_equal(f, px_prune_keep_count(keeps[i], 64));
    assert_int_equal(c, px_prune_keep_count(keeps[i], 32));
    assert_int_equal(g, px_prune_keep_count(keeps[i], 32 * 9));
  }
  free(w);
  free(mask);
}

static void test_ties_keep_lowest_index(void **state) {
  (void)state;
  /* every filter has the same norm (values are a signed permutation) */
  px_conv_shape_t s = {8, 2, 1, 2};
  float w[8 * 4];
  for (int o = 0; o < 8; o++) {
    float v[4] = {1, -2, 2, 1};
    for (int i = 0; i < 4; i++) w[o * 4 + i] = v[(i + o) % 4] * (o % 2 ? -1.0f : 1.0f);
  }
  uint8_t m1[8], m2[8];
  float a[32], b[32];
  memcpy(a, w, sizeof w);
  memcpy(b, w, sizeof w);
  assert_int_equal(px_prune_project_filter(a, s, 0.5, m1, NULL, 0), PX_OK);
  assert_int_equal(px_prune_project_filter(b, s, 0.5, m2, NULL, 0), PX_OK);
  for (int o = 0; o < 8; o++) assert_int_equal(m1[o], o < 4);
  assert_memory_equal(m1, m2, sizeof m1);
  assert_memory_equal(a, b, sizeof a);

  /* channels tied with one strictly larger: the larger first, then lowest */
  px_conv_shape_t s2 = {1, 5, 1, 1};
  float c[5] = {1, 1, -3, 1, 1};
  uint8_t mc[5];
  assert_int_equal(px_prune_project_channel(c, s2, 0.6, mc, NULL, 0), PX_OK);
  uint8_t want[5] = {1, 1, 1, 0, 0};
  assert_memory_equal(mc, want, 5);
}

static void test_nan_groups_rank_lowest(void **state) {
  (void)state;
  px_conv_shape_t s = {4, 1, 1, 1};
  float w[4] = {NAN, 0.5f, 0.0f, 2.0f};
  uint8_t m[4];
  assert_int_equal(px_prune_project_filter(w, s, 0.75, m, NULL, 0), PX_OK);
  uint8_t want[4] = {0, 1, 1, 1};
  assert_memory_equal(m, want, 4);
  assert_true(w[0] == 0.0f);
}

static void test_composite_is_filter_then_channel_then_shape(void **state) {
  (void)state;
  px_test_rng_t rng;
  px_test_rng_seed(&rng, 21);
  px_conv_shape_t s = {16, 12, 3, 3};
  size_t n = px_conv_numel(s), ms = px_prune_mask_size(s);
  float *x = malloc(n * sizeof *x), *a = malloc(n * sizeof *a), *b = malloc(n * sizeof *b);
  uint8_t *mask = malloc(ms), *mb = malloc(ms);
  void *ws = malloc(px_prune_workspace_size(s));
  px_test_fill_normal(&rng, x, n);
  px_prune_keep_t k = {0.75, 0.5, 0.6, 0, 0, 0};
  memcpy(a, x, n * sizeof *x);
  memcpy(b, x, n * sizeof *x);
  assert_int_equal(px_prune_project(a, s, &k, mask, ws, px_prune_workspace_size(s)), PX_OK);
  assert_int_equal(px_prune_project_filter(b, s, k.filter_keep, mb, NULL, 0), PX_OK);
  assert_int_equal(px_prune_project_channel(b, s, k.channel_keep, mb + 16, NULL, 0), PX_OK);
  assert_int_equal(px_prune_project_shape(b, s, k.shape_keep, mb + 28, NULL, 0), PX_OK);
  assert_memory_equal(a, b, n * sizeof *a);
  assert_memory_equal(mask, mb, ms);
  /* the result lies in the intersection: its nonzero groups fit every budget */
  size_t khw = 9, nz_f = 0, nz_c = 0, nz_g = 0;
  for (size_t o = 0; o < 16; o++) {
    int any = 0;
    for (size_t i = 0; i < 12 * khw; i++) any |= a[o * 12 * khw + i] != 0;
    nz_f += any;
  }
  for (size_t c = 0; c < 12; c++) {
    int any = 0;
    for (size_t o = 0; o < 16; o++)
      for (size_t j = 0; j < khw; j++) any |= a[(o * 12 + c) * khw + j] != 0;
    nz_c += any;
  }
  for (size_t g = 0; g < 12 * khw; g++) {
    int any = 0;
    for (size_t o = 0; o < 16; o++) any |= a[o * 12 * khw + g] != 0;
    nz_g += any;
  }
  assert_true(nz_f <= 12 && nz_c <= 6 && nz_g <= px_prune_keep_count(0.6, 108));
  /* the element mask of the group mask is exactly the support kept */
  memcpy(b, x, n * sizeof *x);
  px_prune_apply_mask(b, s, mask);
  assert_memory_equal(a, b, n * sizeof *a);
  /* a projection with every keep at 1 changes nothing and keeps every group */
  px_prune_keep_t all = {1, 1, 1, 0, 0, 0};
  memcpy(a, x, n * sizeof *x);
  assert_int_equal(px_prune_project(a, s, &all, mask, NULL, 0), PX_OK);
  assert_memory_equal(a, x, n * sizeof *a);
  for (size_t i = 0; i < ms; i++) assert_int_equal(mask[i], 1);
  free(x); free(a); free(b); free(mask); free(mb); free(ws);
}

static void test_bad_arguments_are_rejected(void **state) {
  (void)state;
  float w[4] = {1, 2, 3, 4};
  uint8_t m[16];
  px_prune_keep_t bad = {0.5, 1.5, 1.0, 0, 0, 0};
  assert_int_equal(px_prune_project(w, (px_conv_shape_t){2, 2, 1, 1}, &bad, m, NULL, 0),
                   PX_ERR_INVALID);
  assert_non_null(strstr(px_last_error(), "channel_keep"));
  assert_int_equal(px_prune_project_filter(w, (px_conv_shape_t){0, 2, 1, 1}, 0.5, m, NULL, 0),
                   PX_ERR_INVALID);
  assert_int_equal(px_prune_project_filter(w, (px_conv_shape_t){2, 2, 1, 1}, -0.1, m, NULL, 0),
                   PX_ERR_INVALID);
  char small[4];
  assert_int_equal(px_prune_project_filter(w, (px_conv_shape_t){2, 2, 1, 1}, 0.5, m, small,
                                           sizeof small),
                   PX_ERR_INVALID);
  assert_non_null(strstr(px_last_error(), "workspace"));
}

static void test_projection_with_workspace_allocates_nothing(void **state) {
  (void)state;
  px_test_rng_t rng;
  px_test_rng_seed(&rng, 5);
  px_conv_shape_t s = {32, 16, 3, 3};
  size_t n = px_conv_numel(s);
  float *w = malloc(n * sizeof *w);
  uint8_t *mask = malloc(px_prune_mask_size(s));
  size_t wsb = px_prune_workspace_size(s);
  void *ws = malloc(wsb);
  px_prune_keep_t k = {0.5, 0.5, 0.8, 0, 0, 0};
  px_mem_stats_t before, after;
  px_mem_stats(&before);
  for (int it = 0; it < 20; it++) {
    px_test_fill_normal(&rng, w, n);
    assert_int_equal(px_prune_project(w, s, &k, mask, ws, wsb), PX_OK);
  }
  px_mem_stats(&after);
  assert_int_equal(after.allocs, before.allocs);
  free(w); free(mask); free(ws);
}

/* prune.ramp_iterations' schedule: every fraction below 1 falls from 1 at
 * round 0 to the target at round K along f + (1 - f)(1 - t/K)^3; 1, 0 (the
 * uncoupled keep's "channel_keep's") and N:M stay as they are. */
static void test_keep_ramp_is_cubic_from_one_to_the_target(void **state) {
  (void)state;
  const px_prune_keep_t target = {0.5, 0.25, 1.0, 2, 4, 0.0};
  px_prune_keep_t k;
  px_prune_keep_ramp(&target, 0, 8, &k);
  assert_true(k.filter_keep == 1.0 && k.channel_keep == 1.0 && k.shape_keep == 1.0);
  assert_true(k.uncoupled_keep == 0.0 && k.nm_n == 2 && k.nm_m == 4);
  px_prune_keep_ramp(&target, 4, 8, &k);
  assert_true(fabs(k.filter_keep - 0.5625) < 1e-12 && fabs(k.channel_keep - 0.34375) < 1e-12);
  double last = 1.0;
  for (int t = 0; t <= 10; t++) {
    px_prune_keep_ramp(&target, t, 8, &k);
    assert_true(k.channel_keep <= last && k.channel_keep >= 0.25);
    last = k.channel_keep;
    if (t >= 8) assert_memory_equal(&k, &target, sizeof k);
  }
  const px_prune_keep_t unc = {1.0, 0.5, 1.0, 0, 0, 0.6};
  px_prune_keep_ramp(&unc, 1, 2, &k);
  assert_true(fabs(k.uncoupled_keep - 0.65) < 1e-12 && k.filter_keep == 1.0);
  px_prune_keep_ramp(&unc, 0, 0, &k); /* no ramp */
  assert_memory_equal(&k, &unc, sizeof k);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_filter_projection_is_nearest_point),
      cmocka_unit_test(test_channel_projection_is_nearest_point),
      cmocka_unit_test(test_shape_projection_is_nearest_point),
      cmocka_unit_test(test_coupled_projection_is_nearest_point),
      cmocka_unit_test(test_coupled_projection_keeps_pruned_filters_and_checks_shapes),
      cmocka_unit_test(test_keep_counts_are_exact),
      cmocka_unit_test(test_ties_keep_lowest_index),
      cmocka_unit_test(test_nan_groups_rank_lowest),
      cmocka_unit_test(test_composite_is_filter_then_channel_then_shape),
      cmocka_unit_test(test_bad_arguments_are_rejected),
      cmocka_unit_test(test_projection_with_workspace_allocates_nothing),
      cmocka_unit_test(test_keep_ramp_is_cubic_from_one_to_the_target),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
