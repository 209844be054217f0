/* The CUDA kernels of cuda_kernels.h against their CPU references on random
 * data: group norms and selections bitwise equal to project.c's (ties, zero
 * groups, infinities and NaN included), projections and masks bitwise equal
 * to px_prune_project* and px_prune_apply_mask, shrink/expand bitwise equal
 * to a pack plan's buffer and expansion, the H-SADMM updates bitwise equal to
 * hsadmm.c's loops, squared norms close to the CPU's sums and bitwise
 * repeatable, Top-K exactly the k largest |e| with ties to the lower index
 * and its error feedback.
 *
 * Without CUDA compiled in, the stubs must answer PX_ERR_NOT_BUILT; with it,
 * argument errors are checked without touching a device. Every test that
 * needs a GPU skips, saying why, when there is none. */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "prunex/cuda.h"
#include "prunex/cuda_kernels.h"
#include "prunex/prune.h"
#include "prunex/prune_internal.h"
#include "px_test_util.h"

/* ---- harness ------------------------------------------------------------------ */

static int g_gpu = -1; /* 1: a device to run on */
static const char *g_why = "";

static int group_setup(void **state) {
  (void)state;
  int n = 0;
  if (!px_cuda_built()) {
    g_gpu = 0;
    g_why = "libpxcore built without CUDA";
  } else if (px_cuda_device_count(&n) != PX_OK || n == 0) {
    g_gpu = 0;
    g_why = "no CUDA device on this machine";
  } else {
    g_gpu = 1;
  }
  return 0;
}

#define NEED_GPU()                                              \
  do {                                                          \
    if (!g_gpu) {                                               \
      printf("%s: GPU kernel checks skipped\n", g_why);         \
      skip();                                                   \
    }                                                           \
  } while (0)

#define OK(call) assert_int_equal((call), PX_OK)

static void *dev_alloc(size_t bytes) {
  void *p = NULL;
  OK(px_cuda_kernels_alloc(bytes, "test", &p));
  return p;
}

static void *dev_from(const void *host, size_t bytes) {
  void *p = dev_alloc(bytes);
  OK(px_cuda_kernels_upload(p, host, bytes));
  return p;
}

/* Waits for the kernels (surfacing their faults) and copies back. */
static void dev_to(void *host, const void *dev, size_t bytes) {
  OK(px_cuda_kernels_sync(NULL));
  OK(px_cuda_kernels_download(host, dev, bytes));
}

/* Fails naming the first differing byte's element when a != b. */
static void assert_same_bits(const void *got, const void *want, size_t n, size_t elem,
                             const char *what) {
  const unsigned char *g = got, *w = want;
  for (size_t i = 0; i < n * elem; i++)
    if (g[i] != w[i]) fail_msg("%s: element %zu of %zu differs from the CPU's", what, i / elem, n);
}

/* Float results of the elementwise updates: bitwise where the host compiler
 * does not fuse multiply-adds (x86-64 without -mfma), as the kernels never
 * do; within rounding elsewhere. */
static void assert_floats_match(const float *got, const float *want, size_t n, const char *what) {
#ifdef __FP_FAST_FMAF
  double e = px_test_max_rel_err(got, want, n);
  if (e > 1e-6) fail_msg("%s: relative error %g", what, e);
#else
  for (size_t i = 0; i < n; i++)
    if (memcmp(&got[i], &want[i], sizeof(float)) != 0)
      fail_msg("%s: element %zu is %a, the CPU's %a", what, i, (double)got[i], (double)want[i]);
#endif
}

static float *host_normal(px_test_rng_t *r, size_t n, float scale) {
  float *x = malloc((n ? n : 1) * sizeof(float));
  px_test_fill_normal(r, x, n);
  for (size_t i = 0; i < n; i++) x[i] *= scale;
  return x;
}

static float *host_copy(const float *x, size_t n) {
  float *y = malloc((n ? n : 1) * sizeof(float));
  memcpy(y, x, n * sizeof(float));
  return y;
}

/* ---- CPU references that project.c and strategy/topk.c keep static ------------ */

/* project.c's group norms, same loops, same order. */
static void ref_norms(px_prune_group_t kind, const float *w, px_conv_shape_t s, double *norm) {
  size_t khw = (size_t)s.kh * s.kw, C = (size_t)s.c_in, row = C * khw;
  if (kind == PX_PRUNE_GROUP_FILTER) {
    for (size_t o = 0; o < (size_t)s.c_out; o++) {
      const float *p = w + o * row;
      double acc = 0.0;
      for (size_t i = 0; i < row; i++) acc += (double)p[i] * p[i];
      norm[o] = acc;
    }
  } else if (kind == PX_PRUNE_GROUP_CHANNEL) {
    for (size_t c = 0; c < C; c++) norm[c] = 0.0;
    for (size_t o = 0; o < (size_t)s.c_out; o++) {
      const float *p = w + o * row;
      for (size_t c = 0; c < C; c++) {
        double acc = 0.0;
        for (size_t j = 0; j < khw; j++) acc += (double)p[c * khw + j] * p[c * khw + j];
        norm[c] += acc;
      }
    }
  } else {
    for (size_t g = 0; g < row; g++) norm[g] = 0.0;
    for (size_t o = 0; o < (size_t)s.c_out; o++) {
      const float *p = w + o * row;
      for (size_t g = 0; g < row; g++) norm[g] += (double)p[g] * p[g];
    }
  }
}

/* project.c's total order: larger norm first, NaN after every number, then
 * lower index. */
static int rank_cmp(const void *pa, const void *pb, void *ctx) {
  const double *norm = ctx;
  int32_t a = *(const int32_t *)pa, b = *(const int32_t *)pb;
  double na = norm[a], nb = norm[b];
  int nan_a = isnan(na), nan_b = isnan(nb);
  if (nan_a != nan_b) return nan_a ? 1 : -1;
  if (!nan_a) {
    if (na > nb) return -1;
    if (na < nb) return 1;
  }
  return (a > b) - (a < b);
}

static void ref_select(const double *norm, size_t G, size_t alpha, uint8_t *keep) {
  int32_t *idx = malloc(G * sizeof *idx);
  for (size_t i = 0; i < G; i++) idx[i] = (int32_t)i;
  qsort_r(idx, G, sizeof *idx, rank_cmp, (void *)norm);
  memset(keep, 0, G);
  for (size_t i = 0; i < alpha && i < G; i++) keep[idx[i]] = 1;
  free(idx);
}

static px_status_t cpu_project(px_prune_group_t kind, float *w, px_conv_shape_t s, double keep,
                               uint8_t *mask_part) {
  switch (kind) {
    case PX_PRUNE_GROUP_FILTER: return px_prune_project_filter(w, s, keep, mask_part, NULL, 0);
    case PX_PRUNE_GROUP_CHANNEL: return px_prune_project_channel(w, s, keep, mask_part, NULL, 0);
    case PX_PRUNE_GROUP_SHAPE: break;
  }
  return px_prune_project_shape(w, s, keep, mask_part, NULL, 0);
}

static const px_prune_group_t KINDS[] = {PX_PRUNE_GROUP_FILTER, PX_PRUNE_GROUP_CHANNEL,
                                         PX_PRUNE_GROUP_SHAPE};
static const char *const KIND_NAMES[] = {"filter", "channel", "shape"};

/* ---- no device needed ----------------------------------------------------------- */

/* A build without CUDA answers PX_ERR_NOT_BUILT everywhere; a CUDA build
 * refuses bad arguments before it touches a device. */
static void test_stubs_and_argument_errors(void **state) {
  (void)state;
  px_conv_shape_t s = {4, 3, 3, 3}, bad = {4, 0, 3, 3};
  px_prune_keep_t keep = {0.5, 0.5, 0.5, 0, 0, 0};
  float f = 0;
  uint8_t m[64];
  double d;
  if (!px_cuda_built()) {
    void *p = &f;
    size_t bytes = 1;
    assert_int_equal(px_cuda_kernels_alloc(16, "x", &p), PX_ERR_NOT_BUILT);
    assert_null(p);
    assert_non_null(strstr(px_last_error(), "without CUDA"));
    assert_int_equal(px_cuda_kernels_upload(&f, &f, 4), PX_ERR_NOT_BUILT);
    assert_int_equal(px_cuda_kernels_download(&f, &f, 4), PX_ERR_NOT_BUILT);
    assert_int_equal(px_cuda_kernels_sync(NULL), PX_ERR_NOT_BUILT);
    px_cuda_kernels_free(NULL);
    assert_int_equal(px_cuda_prune_group_norms(&d, &f, s, PX_PRUNE_GROUP_FILTER, NULL),
                     PX_ERR_NOT_BUILT);
    assert_int_equal(px_cuda_prune_select(m, &d, 1, 1, NULL), PX_ERR_NOT_BUILT);
    assert_int_equal(px_cuda_prune_apply_mask(&f, m, m, m, s, NULL), PX_ERR_NOT_BUILT);
    px_prune_layout_t L;
    assert_int_equal(px_prune_layout_init(&L, s, NULL), PX_OK);
    assert_int_equal(px_cuda_prune_apply_layout(&f, m, &L, NULL), PX_ERR_NOT_BUILT);
    assert_int_equal(px_cuda_prune_project_group(&f, m, s, PX_PRUNE_GROUP_SHAPE, 0.5, &d, 8, NULL),
                     PX_ERR_NOT_BUILT);
    assert_int_equal(px_cuda_prune_project(&f, m, s, &keep, &d, 8, NULL), PX_ERR_NOT_BUILT);
    int32_t k = 0;
    assert_int_equal(px_cuda_pack_shrink(&f, &f, &k, 1, &k, 1, s, NULL), PX_ERR_NOT_BUILT);
    assert_int_equal(px_cuda_pack_expand(&f, &f, &k, 1, &k, 1, NULL, s, NULL), PX_ERR_NOT_BUILT);
    assert_int_equal(px_cuda_admm_add(&f, &f, &f, 1, NULL), PX_ERR_NOT_BUILT);
    assert_int_equal(px_cuda_admm_scale(&f, 2.0f, 1, NULL), PX_ERR_NOT_BUILT);
    assert_int_equal(px_cuda_admm_zi_update(&f, &f, &f, &f, 1, 1, 0, 1, 1, 1, NULL),
                     PX_ERR_NOT_BUILT);
    assert_int_equal(px_cuda_admm_z_flat(&f, &f, 1, 0, 1, 1, NULL), PX_ERR_NOT_BUILT);
    assert_int_equal(px_cuda_admm_dual_update(&f, &f, &f, 1, NULL), PX_ERR_NOT_BUILT);
    assert_int_equal(px_cuda_admm_rescale(&f, 1, 2, 1, NULL), PX_ERR_NOT_BUILT);
    assert_int_equal(px_cuda_admm_sqdiff(&d, &f, NULL, 1, &d, 8, NULL), PX_ERR_NOT_BUILT);
    assert_int_equal(px_cuda_topk_workspace_size(10, &bytes), PX_ERR_NOT_BUILT);
    assert_int_equal(bytes, 0);
    px_topk_pair_t pair;
    assert_int_equal(px_cuda_topk_select(&pair, &f, 1, 1, &d, 8, NULL), PX_ERR_NOT_BUILT);
    assert_int_equal(px_cuda_topk_scatter_add(&f, NULL, &pair, 1, 1, 1.0f, NULL),
                     PX_ERR_NOT_BUILT);
    assert_non_null(strstr(px_last_error(), "without CUDA"));
    return;
  }
  /* bad shapes, fractions, index sets, penalties and sizes: PX_ERR_INVALID */
  assert_int_equal(px_cuda_prune_group_norms(&d, &f, bad, PX_PRUNE_GROUP_FILTER, NULL),
                   PX_ERR_INVALID);
  assert_int_equal(px_cuda_prune_group_norms(&d, &f, s, (px_prune_group_t)7, NULL),
                   PX_ERR_INVALID);
  assert_int_equal(px_cuda_prune_project_group(&f, m, s, PX_PRUNE_GROUP_FILTER, 1.5, &d, 8, NULL),
                   PX_ERR_INVALID);
  assert_int_equal(px_cuda_prune_project_group(&f, NULL, s, PX_PRUNE_GROUP_FILTER, 0.5, &d, 8,
                                               NULL),
                   PX_ERR_INVALID);
  /* 4 filters need 32 bytes of norms */
  assert_int_equal(px_cuda_prune_project_group(&f, m, s, PX_PRUNE_GROUP_FILTER, 0.5, &d, 8, NULL),
                   PX_ERR_INVALID);
  assert_non_null(strstr(px_last_error(), "workspace"));
  keep.channel_keep = -0.1;
  assert_int_equal(px_cuda_prune_project(&f, m, s, &keep, &d, 8, NULL), PX_ERR_INVALID);
  int32_t k = 0;
  assert_int_equal(px_cuda_pack_shrink(&f, &f, &k, 5, &k, 1, s, NULL), PX_ERR_INVALID);
  assert_int_equal(px_cuda_pack_expand(&f, &f, NULL, 1, &k, 1, NULL, s, NULL), PX_ERR_INVALID);
  assert_int_equal(px_cuda_admm_zi_update(&f, &f, &f, &f, 0, 1, 0, 1, 1, 1, NULL), PX_ERR_INVALID);
  assert_int_equal(px_cuda_admm_zi_update(&f, &f, &f, &f, 1, 1, 0, 0, 1, 1, NULL), PX_ERR_INVALID);
  assert_int_equal(px_cuda_admm_z_flat(&f, &f, 1, -1, 1, 1, NULL), PX_ERR_INVALID);
  assert_int_equal(px_cuda_admm_rescale(&f, 1, 0, 1, NULL), PX_ERR_INVALID);
  assert_int_equal(px_cuda_admm_sqdiff(NULL, &f, NULL, 1, &d, 8, NULL), PX_ERR_INVALID);
  assert_int_equal(px_cuda_admm_sqdiff(&d, &f, NULL, 1, &d, 8, NULL), PX_ERR_INVALID);
  px_topk_pair_t pair;
  assert_int_equal(px_cuda_topk_select(&pair, &f, 1, 2, &d, 8, NULL), PX_ERR_INVALID);
  /* zero-sized work succeeds without launching anything */
  OK(px_cuda_admm_add(NULL, NULL, NULL, 0, NULL));
  OK(px_cuda_admm_dual_update(NULL, NULL, NULL, 0, NULL));
  OK(px_cuda_prune_select(NULL, NULL, 0, 0, NULL));
  OK(px_cuda_topk_select(NULL, NULL, 0, 0, NULL, 0, NULL));
  OK(px_cuda_topk_scatter_add(NULL, NULL, NULL, 0, 0, 1.0f, NULL));
  OK(px_cuda_pack_shrink(NULL, NULL, NULL, 0, NULL, 0, s, NULL));
}

/* ---- projections ----------------------------------------------------------------- */

static const px_conv_shape_t SHAPES[] = {
    {24, 20, 3, 3}, {7, 5, 1, 1}, {16, 3, 5, 5}, {3, 64, 3, 3}, {1, 1, 1, 1}, {512, 256, 3, 3},
};
#define NSHAPES (sizeof SHAPES / sizeof SHAPES[0])

/* Norms of every kind are the CPU's bit for bit (so are choices made from
 * them), zero groups included. */
static void test_group_norms_equal_cpu(void **state) {
  (void)state;
  NEED_GPU();
  px_test_rng_t rng;
  px_test_rng_seed(&rng, 11);
  for (size_t t = 0; t < NSHAPES; t++) {
    px_conv_shape_t s = SHAPES[t];
    size_t n = px_conv_numel(s), row = n / (size_t)s.c_out;
    float *w = host_normal(&rng, n, 0.1f);
    memset(w, 0, row * sizeof(float)); /* a zero filter */
    float *dw = dev_from(w, n * sizeof(float));
    for (int k = 0; k < 3; k++) {
      size_t G = px_prune_group_count(s, KINDS[k]);
      double *want = malloc(G * sizeof(double)), *got = malloc(G * sizeof(double));
      double *dn = dev_alloc(G * sizeof(double));
      ref_norms(KINDS[k], w, s, want);
      OK(px_cuda_prune_group_norms(dn, dw, s, KINDS[k], NULL));
      dev_to(got, dn, G * sizeof(double));
      assert_same_bits(got, want, G, sizeof(double), KIND_NAMES[k]);
      px_cuda_kernels_free(dn);
      free(want);
      free(got);
    }
    px_cuda_kernels_free(dw);
    free(w);
  }
}

/* Rank-counting selection keeps exactly the CPU's choice on norms full of
 * ties, zeros of both signs, infinities and NaN, for every alpha. */
static void test_select_equals_cpu_order(void **state) {
  (void)state;
  NEED_GPU();
  const double pool[] = {0.0, -0.0, 1.0, 2.5, 2.5, 1e-300, 7.0, INFINITY, NAN, 3.25, 1.0};
  const size_t npool = sizeof pool / sizeof pool[0];
  px_test_rng_t rng;
  px_test_rng_seed(&rng, 12);
  const size_t sizes[] = {1, 2, 17, 300, 2304};
  for (size_t t = 0; t < sizeof sizes / sizeof sizes[0]; t++) {
    size_t G = sizes[t];
    double *norm = malloc(G * sizeof(double));
    for (size_t i = 0; i < G; i++) norm[i] = pool[px_test_rng_u64(&rng) % npool];
    double *dn = dev_from(norm, G * sizeof(double));
    uint8_t *dk = dev_alloc(G);
    uint8_t *want = malloc(G), *got = malloc(G);
    const size_t alphas[] = {0, 1, 2, G / 3, G / 2, G > 1 ? G - 1 : 0, G, G + 5};
    for (size_t a = 0; a < sizeof alphas / sizeof alphas[0]; a++) {
      ref_select(norm, G, alphas[a], want);
      OK(px_cuda_prune_select(dk, dn, G, alphas[a], NULL));
      dev_to(got, dk, G);
      assert_same_bits(got, want, G, 1, "selection");
    }
    px_cuda_kernels_free(dn);
    px_cuda_kernels_free(dk);
    free(norm);
    free(want);
    free(got);
  }
}

/* Single projections equal px_prune_project_filter/_channel/_shape, masks
 * and tensors, on weights of a few dyadic values (so that many groups tie
 * exactly) with a NaN in one element. */
static void test_single_projections_equal_cpu(void **state) {
  (void)state;
  NEED_GPU();
  px_test_rng_t rng;
  px_test_rng_seed(&rng, 13);
  const px_conv_shape_t shapes[] = {{12, 6, 3, 3}, {9, 10, 1, 1}, {5, 4, 2, 3}};
  const double keeps[] = {0.0, 0.2, 0.5, 0.75, 1.0};
  for (size_t t = 0; t < sizeof shapes / sizeof shapes[0]; t++) {
    px_conv_shape_t s = shapes[t];
    size_t n = px_conv_numel(s);
    float *w = malloc(n * sizeof(float));
    for (size_t i = 0; i < n; i++) w[i] = (float)((int)(px_test_rng_u64(&rng) % 5) - 2) / 8.0f;
    w[n / 2 + 1] = NAN;
    float *dw = dev_alloc(n * sizeof(float)), *got = malloc(n * sizeof(float));
    void *ws = dev_alloc(px_prune_workspace_size(s));
    for (int k = 0; k < 3; k++) {
      size_t G = px_prune_group_count(s, KINDS[k]);
      uint8_t *dm = dev_alloc(G), *want_m = malloc(G), *got_m = malloc(G);
      for (size_t q = 0; q < sizeof keeps / sizeof keeps[0]; q++) {
        float *want = host_copy(w, n);
        OK(cpu_project(KINDS[k], want, s, keeps[q], want_m));
        OK(px_cuda_kernels_upload(dw, w, n * sizeof(float)));
        OK(px_cuda_prune_project_group(dw, dm, s, KINDS[k], keeps[q], ws,
                                       px_prune_workspace_size(s), NULL));
        dev_to(got, dw, n * sizeof(float));
        dev_to(got_m, dm, G);
        assert_same_bits(got_m, want_m, G, 1, KIND_NAMES[k]);
        assert_same_bits(got, want, n, sizeof(float), KIND_NAMES[k]);
        free(want);
      }
      px_cuda_kernels_free(dm);
      free(want_m);
      free(got_m);
    }
    px_cuda_kernels_free(ws);
    px_cuda_kernels_free(dw);
    free(w);
    free(got);
  }
}

/* The composite equals px_prune_project on Gaussian weights, layers up to a
 * ResNet's largest, and two runs give the same bits. */
static void test_composite_projection_equals_cpu(void **state) {
  (void)state;
  NEED_GPU();
  px_test_rng_t rng;
  px_test_rng_seed(&rng, 14);
  const px_prune_keep_t keeps[] = {
      {0.5, 0.5, 0.5, 0, 0, 0}, {0.3, 0.8, 0.6, 0, 0, 0}, {1, 1, 0.25, 0, 0, 0}, {1, 1, 1, 0, 0, 0}};
  for (size_t t = 0; t < NSHAPES; t++) {
    px_conv_shape_t s = SHAPES[t];
    size_t n = px_conv_numel(s), M = px_prune_mask_size(s), wsb = px_prune_workspace_size(s);
    float *w = host_normal(&rng, n, 0.05f), *got = malloc(n * sizeof(float));
    float *dw = dev_alloc(n * sizeof(float));
    uint8_t *dm = dev_alloc(M), *want_m = malloc(M), *got_m = malloc(M), *again_m = malloc(M);
    void *ws = dev_alloc(wsb);
    for (size_t q = 0; q < sizeof keeps / sizeof keeps[0]; q++) {
      float *want = host_copy(w, n);
      OK(px_prune_project(want, s, &keeps[q], want_m, NULL, 0));
      for (int run = 0; run < 2; run++) {
        OK(px_cuda_kernels_upload(dw, w, n * sizeof(float)));
        OK(px_cuda_prune_project(dw, dm, s, &keeps[q], ws, wsb, NULL));
        dev_to(run ? again_m : got_m, dm, M);
      }
      dev_to(got, dw, n * sizeof(float));
      assert_same_bits(got_m, want_m, M, 1, "composite mask");
      assert_same_bits(again_m, got_m, M, 1, "composite mask, second run");
      assert_same_bits(got, want, n, sizeof(float), "composite projection");
      free(want);
    }
    px_cuda_kernels_free(ws);
    px_cuda_kernels_free(dm);
    px_cuda_kernels_free(dw);
    free(w);
    free(got);
    free(want_m);
    free(got_m);
    free(again_m);
  }
}

/* Applying a mask (bytes 0, 1 and 2: nonzero keeps) equals
 * px_prune_apply_mask; NULL parts keep everything. */
static void test_apply_mask_equals_cpu(void **state) {
  (void)state;
  NEED_GPU();
  px_test_rng_t rng;
  px_test_rng_seed(&rng, 15);
  for (size_t t = 0; t < NSHAPES; t++) {
    px_conv_shape_t s = SHAPES[t];
    size_t n = px_conv_numel(s), M = px_prune_mask_size(s);
    float *w = host_normal(&rng, n, 1.0f), *want = host_copy(w, n), *got = malloc(n * 4);
    uint8_t *mask = malloc(M);
    for (size_t i = 0; i < M; i++) {
      uint64_t r = px_test_rng_u64(&rng) % 10;
      mask[i] = r < 3 ? 0 : r < 8 ? 1 : 2;
    }
    px_prune_apply_mask(want, s, mask);
    float *dw = dev_from(w, n * sizeof(float));
    uint8_t *dm = dev_from(mask, M);
    OK(px_cuda_prune_apply_mask(dw, dm, dm + s.c_out, dm + s.c_out + s.c_in, s, NULL));
    dev_to(got, dw, n * sizeof(float));
    assert_same_bits(got, want, n, sizeof(float), "apply mask");
    /* only the shape part: the CPU with all-ones filter and channel parts */
    memcpy(want, w, n * sizeof(float));
    memset(mask, 1, (size_t)s.c_out + (size_t)s.c_in);
    px_prune_apply_mask(want, s, mask);
    OK(px_cuda_kernels_upload(dw, w, n * sizeof(float)));
    OK(px_cuda_prune_apply_mask(dw, NULL, NULL, dm + s.c_out + s.c_in, s, NULL));
    dev_to(got, dw, n * sizeof(float));
    assert_same_bits(got, want, n, sizeof(float), "apply shape mask");
    px_cuda_kernels_free(dw);
    px_cuda_kernels_free(dm);
    free(w);
    free(want);
    free(got);
    free(mask);
  }
}

/* Applying a mask through its layout, N:M part included (2:4 and 1:3 masks
 * from the CPU projection, then random bytes), equals px_prune_layout_apply. */
static void test_apply_layout_equals_cpu(void **state) {
  (void)state;
  NEED_GPU();
  px_test_rng_t rng;
  px_test_rng_seed(&rng, 25);
  for (size_t t = 0; t < NSHAPES; t++) {
    px_conv_shape_t s = SHAPES[t];
    px_prune_keep_t k = {0.75, 0.75, 0.75, t % 2 ? 1 : 2, t % 2 ? 3 : 4, 0};
    px_prune_layout_t L;
    OK(px_prune_layout_init(&L, s, &k));
    size_t n = px_conv_numel(s);
    float *w = host_normal(&rng, n, 1.0f), *want = host_copy(w, n), *got = malloc(n * 4);
    uint8_t *mask = malloc(L.size);
    OK(px_prune_layout_project(&L, want, &k, mask, NULL, 0)); /* want: w masked */
    for (int round = 0; round < 2; round++) {
      if (round == 1) { /* random bytes, nonzero keeps */
        for (size_t i = 0; i < L.size; i++) mask[i] = (uint8_t)(px_test_rng_u64(&rng) % 3);
        memcpy(want, w, n * sizeof(float));
        px_prune_layout_apply(&L, want, mask);
      }
      float *dw = dev_from(w, n * sizeof(float));
      uint8_t *dm = dev_from(mask, L.size);
      OK(px_cuda_prune_apply_layout(dw, dm, &L, NULL));
      dev_to(got, dw, n * sizeof(float));
      assert_same_bits(got, want, n, sizeof(float), "apply layout");
      px_cuda_kernels_free(dw);
      px_cuda_kernels_free(dm);
    }
    free(w);
    free(want);
    free(got);
    free(mask);
  }
}

/* ---- shrink / expand -------------------------------------------------------------- */

/* Per-layer shrink into a plan-ordered device buffer equals the plan's packed
 * buffer, and expand equals px_pack_expand: a pruned conv, a dense tensor, a
 * lightly pruned 1x1 conv and a conv with every filter pruned. */
static void test_shrink_expand_equal_pack_plan(void **state) {
  (void)state;
  NEED_GPU();
  px_test_rng_t rng;
  px_test_rng_seed(&rng, 16);
  const px_param_desc_t desc[] = {
      {"conv_a", PX_PARAM_CONV, {16, 8, 3, 3}, 0, NULL},
      {"bn", PX_PARAM_DENSE, {0, 0, 0, 0}, 37, NULL},
      {"conv_b", PX_PARAM_CONV, {10, 12, 1, 1}, 0, NULL},
      {"conv_c", PX_PARAM_CONV, {6, 4, 3, 3}, 0, NULL},
  };
  const px_prune_keep_t keeps[] = {
      {0.5, 0.75, 0.5, 0, 0, 0}, {1, 1, 1, 0, 0, 0}, {0.6, 0.5, 1, 0, 0, 0}, {0, 1, 1, 0, 0, 0}};
  enum { NP = 4 };
  float *x[NP], *y[NP];
  uint8_t *mask[NP] = {NULL};
  size_t numel[NP];
  for (int i = 0; i < NP; i++) {
    numel[i] = desc[i].kind == PX_PARAM_CONV ? px_conv_numel(desc[i].shape) : desc[i].numel;
    x[i] = host_normal(&rng, numel[i], 1.0f);
    y[i] = malloc(numel[i] * sizeof(float));
    if (desc[i].kind == PX_PARAM_CONV) {
      mask[i] = malloc(px_prune_mask_size(desc[i].shape));
      float *tmp = host_copy(x[i], numel[i]); /* x stays dense: masked positions carry values */
      OK(px_prune_project(tmp, desc[i].shape, &keeps[i], mask[i], NULL, 0));
      free(tmp);
    }
  }
  px_pack_plan_t *plan = NULL;
  OK(px_pack_plan_create(desc, NP, 0, &plan));
  OK(px_pack_plan_set_masks(plan, (const uint8_t *const *)mask));
  px_pack_shrink(plan, (const float *const *)x);
  size_t packed = px_pack_packed_floats(plan);
  float *dpacked = dev_alloc(packed * sizeof(float)), *got = malloc(packed * sizeof(float));

  size_t off = 0;
  for (int i = 0; i < NP; i++) {
    if (desc[i].kind == PX_PARAM_DENSE) { /* travels whole: a plain copy */
      OK(px_cuda_kernels_upload(dpacked + off, x[i], numel[i] * sizeof(float)));
      off += numel[i];
      continue;
    }
    px_conv_shape_t s = desc[i].shape;
    const int32_t *ko, *ki;
    int32_t no, ni;
    px_pack_param_sets(plan, i, &ko, &no, &ki, &ni);
    int32_t *dko = no ? dev_from(ko, no * sizeof(int32_t)) : NULL;
    int32_t *dki = ni ? dev_from(ki, ni * sizeof(int32_t)) : NULL;
    float *dx = dev_from(x[i], numel[i] * sizeof(float));
    OK(px_cuda_pack_shrink(dpacked + off, dx, dko, no, dki, ni, s, NULL));
    /* expand into a tensor of garbage: every element must be written */
    float *garbage = malloc(numel[i] * sizeof(float));
    for (size_t j = 0; j < numel[i]; j++) garbage[j] = NAN;
    OK(px_cuda_kernels_upload(dx, garbage, numel[i] * sizeof(float)));
    uint8_t *dmask = dev_from(mask[i], px_prune_mask_size(s));
    OK(px_cuda_pack_expand(dx, dpacked + off, dko, no, dki, ni, dmask + s.c_out + s.c_in, s,
                           NULL));
    dev_to(y[i], dx, numel[i] * sizeof(float));
    off += (size_t)no * (size_t)ni * (size_t)s.kh * (size_t)s.kw;
    px_cuda_kernels_free(dmask);
    px_cuda_kernels_free(dx);
    px_cuda_kernels_free(dko);
    px_cuda_kernels_free(dki);
    free(garbage);
  }
  assert_int_equal(off, packed);
  dev_to(got, dpacked, packed * sizeof(float));
  assert_same_bits(got, px_pack_buffer(plan), packed, sizeof(float), "packed stream");

  float *want[NP];
  for (int i = 0; i < NP; i++) {
    want[i] = malloc(numel[i] * sizeof(float));
    for (size_t j = 0; j < numel[i]; j++) want[i][j] = NAN;
  }
  px_pack_expand(plan, want);
  for (int i = 0; i < NP; i++)
    if (desc[i].kind == PX_PARAM_CONV)
      assert_same_bits(y[i], want[i], numel[i], sizeof(float), desc[i].name);
  /* the all-pruned conv expands to zeros */
  int32_t no, ni;
  px_pack_param_sets(plan, 3, NULL, &no, NULL, &ni);
  assert_int_equal(no, 0);
  for (size_t j = 0; j < numel[3]; j++) assert_true(y[3][j] == 0.0f && !signbit(y[3][j]));

  px_pack_plan_destroy(plan);
  px_cuda_kernels_free(dpacked);
  free(got);
  for (int i = 0; i < NP; i++) {
    free(x[i]);
    free(y[i]);
    free(want[i]);
    free(mask[i]);
  }
}

/* ---- H-SADMM updates ---------------------------------------------------------------- */

/* Every elementwise update equals hsadmm.c's loop (written out here as it is
 * there), in place where hsadmm.c updates in place; sizes beyond one grid of
 * blocks exercise the grid-stride loops. */
static void test_admm_updates_equal_cpu(void **state) {
  (void)state;
  NEED_GPU();
  px_test_rng_t rng;
  px_test_rng_seed(&rng, 17);
  const size_t n = 1500007;
  const double rho1 = 0.37, rho2 = 1.9, lambda = 5e-4;
  const int M = 3, P = 4;
  float *s = host_normal(&rng, n, 4.0f), *z = host_normal(&rng, n, 1.0f);
  float *v = host_normal(&rng, n, 0.1f), *th = host_normal(&rng, n, 1.0f);
  float *u = host_normal(&rng, n, 0.1f);
  float *want = malloc(n * sizeof(float)), *got = malloc(n * sizeof(float));
  float *ds = dev_from(s, n * 4), *dz = dev_from(z, n * 4), *dv = dev_from(v, n * 4);
  float *dth = dev_from(th, n * 4), *du = dev_from(u, n * 4), *dout = dev_alloc(n * 4);

  /* z~_i = (rho1 s + rho2 (z - v)) / (lambda/M + P rho1 + rho2) */
  double den = lambda / M + P * rho1 + rho2;
  float a = (float)(rho1 / den), b = (float)(rho2 / den);
  for (size_t j = 0; j < n; j++) want[j] = a * s[j] + b * (z[j] - v[j]);
  OK(px_cuda_admm_zi_update(dout, ds, dz, dv, rho1, rho2, lambda, M, P, n, NULL));
  dev_to(got, dout, n * 4);
  assert_floats_match(got, want, n, "z_i update");

  /* flat: z = rho1 / (lambda + N rho1) * s */
  float scale = (float)(rho1 / (lambda + M * P * rho1));
  for (size_t j = 0; j < n; j++) want[j] = scale * s[j];
  OK(px_cuda_admm_z_flat(dout, ds, rho1, lambda, M * P, n, NULL));
  dev_to(got, dout, n * 4);
  assert_floats_match(got, want, n, "flat z update");

  /* theta + u, then in place: e += g */
  for (size_t j = 0; j < n; j++) want[j] = th[j] + u[j];
  OK(px_cuda_admm_add(dout, dth, du, n, NULL));
  dev_to(got, dout, n * 4);
  assert_floats_match(got, want, n, "add");
  for (size_t j = 0; j < n; j++) want[j] += s[j];
  OK(px_cuda_admm_add(dout, dout, ds, n, NULL));
  dev_to(got, dout, n * 4);
  assert_floats_match(got, want, n, "add in place");

  /* u += theta - z_i */
  for (size_t j = 0; j < n; j++) want[j] = u[j];
  for (size_t j = 0; j < n; j++) want[j] += th[j] - z[j];
  OK(px_cuda_admm_dual_update(du, dth, dz, n, NULL));
  dev_to(got, du, n * 4);
  assert_floats_match(got, want, n, "dual update");

  /* u *= rho_old / rho_new, then buf *= 1/M */
  float f = (float)(rho1 / 0.74);
  for (size_t j = 0; j < n; j++) want[j] *= f;
  OK(px_cuda_admm_rescale(du, rho1, 0.74, n, NULL));
  dev_to(got, du, n * 4);
  assert_floats_match(got, want, n, "dual rescale");
  float inv = 1.0f / (float)M;
  for (size_t j = 0; j < n; j++) want[j] *= inv;
  OK(px_cuda_admm_scale(du, inv, n, NULL));
  dev_to(got, du, n * 4);
  assert_floats_match(got, want, n, "scale");

  px_cuda_kernels_free(ds);
  px_cuda_kernels_free(dz);
  px_cuda_kernels_free(dv);
  px_cuda_kernels_free(dth);
  px_cuda_kernels_free(du);
  px_cuda_kernels_free(dout);
  free(s);
  free(z);
  free(v);
  free(th);
  free(u);
  free(want);
  free(got);
}

/* ||a - b||^2 and ||a||^2 are within rounding of hsadmm.c's sequential sums
 * and bitwise equal from one call to the next; an empty sum is +0. */
static void test_sqdiff_close_and_repeatable(void **state) {
  (void)state;
  NEED_GPU();
  px_test_rng_t rng;
  px_test_rng_seed(&rng, 18);
  const size_t sizes[] = {0, 1, 255, 65537, 3000017};
  void *ws = dev_alloc(PX_CUDA_SQDIFF_WS_BYTES);
  double *dout = dev_alloc(4 * sizeof(double));
  for (size_t t = 0; t < sizeof sizes / sizeof sizes[0]; t++) {
    size_t n = sizes[t];
    float *a = host_normal(&rng, n, 1.0f), *b = host_normal(&rng, n, 1.0f);
    float *da = dev_from(a, n * 4), *db = dev_from(b, n * 4);
    double want_d = 0, want_a = 0;
    for (size_t j = 0; j < n; j++) {
      double d = (double)a[j] - b[j];
      want_d += d * d;
      want_a += (double)a[j] * a[j];
    }
    OK(px_cuda_admm_sqdiff(dout + 0, da, db, n, ws, PX_CUDA_SQDIFF_WS_BYTES, NULL));
    OK(px_cuda_admm_sqdiff(dout + 1, da, NULL, n, ws, PX_CUDA_SQDIFF_WS_BYTES, NULL));
    OK(px_cuda_admm_sqdiff(dout + 2, da, db, n, ws, PX_CUDA_SQDIFF_WS_BYTES, NULL));
    OK(px_cuda_admm_sqdiff(dout + 3, da, NULL, n, ws, PX_CUDA_SQDIFF_WS_BYTES, NULL));
    double got[4];
    dev_to(got, dout, sizeof got);
    /* positive terms: the two orders differ by at most n ulps, in practice far less */
    assert_true(fabs(got[0] - want_d) <= 1e-9 * want_d);
    assert_true(fabs(got[1] - want_a) <= 1e-9 * want_a);
    assert_same_bits(&got[2], &got[0], 1, sizeof(double), "repeated ||a-b||^2");
    assert_same_bits(&got[3], &got[1], 1, sizeof(double), "repeated ||a||^2");
    if (n == 0) assert_true(got[0] == 0.0 && !signbit(got[0]));
    px_cuda_kernels_free(da);
    px_cuda_kernels_free(db);
    free(a);
    free(b);
  }
  px_cuda_kernels_free(ws);
  px_cuda_kernels_free(dout);
}

/* ---- Top-K ------------------------------------------------------------------------- */

/* |e| descending, NaN last, index ascending. */
static int topk_cmp(const void *pa, const void *pb, void *ctx) {
  const float *e = ctx;
  uint32_t a = *(const uint32_t *)pa, b = *(const uint32_t *)pb;
  float va = fabsf(e[a]), vb = fabsf(e[b]);
  int nan_a = isnan(va), nan_b = isnan(vb);
  if (nan_a != nan_b) return nan_a ? 1 : -1;
  if (!nan_a) {
    if (va > vb) return -1;
    if (va < vb) return 1;
  }
  return (a > b) - (a < b);
}

/* One selection of k of n quantised entries (many ties) with a NaN, an
 * infinity and negative zeros: the pairs, their order, and the error feedback
 * left in e are exactly the reference's, twice over. */
static void check_topk(px_test_rng_t *rng, size_t n, double ratio) {
  size_t k = px_prune_keep_count(ratio, n);
  float *e = malloc(n * sizeof(float));
  for (size_t j = 0; j < n; j++) e[j] = roundf((float)px_test_rng_normal(rng) * 8.0f) / 8.0f;
  e[n / 3] = NAN;
  e[n / 2] = -INFINITY;
  e[n - 1] = -0.0f;
  uint32_t *idx = malloc(n * sizeof(uint32_t));
  for (size_t j = 0; j < n; j++) idx[j] = (uint32_t)j;
  qsort_r(idx, n, sizeof *idx, topk_cmp, e);
  px_topk_pair_t *want = malloc((k ? k : 1) * sizeof *want), *got = malloc((k ? k : 1) * sizeof *got);
  float *want_e = host_copy(e, n), *got_e = malloc(n * sizeof(float));
  memset(want, 0, (k ? k : 1) * sizeof *want); /* padding-free, but keep memcmp honest */
  for (size_t r = 0; r < k; r++) {
    want[r].index = idx[r];
    want[r].value = e[idx[r]];
    want_e[idx[r]] = 0.0f;
  }
  /* what strategy/topk.c guarantees of any choice: no unselected number beats a
   * selected one */
  if (k > 0 && k < n && !isnan(e[idx[k]]))
    assert_true(fabsf(e[idx[k - 1]]) >= fabsf(e[idx[k]]));

  size_t wsb = 0;
  OK(px_cuda_topk_workspace_size(n, &wsb));
  void *ws = dev_alloc(wsb);
  px_topk_pair_t *dp = dev_alloc((k ? k : 1) * sizeof *dp);
  float *de = dev_alloc(n * sizeof(float));
  for (int run = 0; run < 2; run++) {
    OK(px_cuda_kernels_upload(de, e, n * sizeof(float)));
    OK(px_cuda_topk_select(dp, de, n, k, ws, wsb, NULL));
    dev_to(got, dp, k * sizeof *got);
    dev_to(got_e, de, n * sizeof(float));
    assert_same_bits(got, want, k, sizeof *got, "top-k pairs");
    assert_same_bits(got_e, want_e, n, sizeof(float), "top-k error feedback");
  }
  px_cuda_kernels_free(ws);
  px_cuda_kernels_free(dp);
  px_cuda_kernels_free(de);
  free(e);
  free(idx);
  free(want);
  free(got);
  free(want_e);
  free(got_e);
}

static void test_topk_select_exact(void **state) {
  (void)state;
  NEED_GPU();
  px_test_rng_t rng;
  px_test_rng_seed(&rng, 19);
  check_topk(&rng, 50000, 0.01);
  check_topk(&rng, 1000, 1.0);   /* everything, NaN last */
  check_topk(&rng, 7, 0.3);
  check_topk(&rng, 2000003, 0.001); /* beyond one grid */
}

/* Adding three ranks' pairs in rank order equals strategy/topk.c's loop; an index
 * out of range is skipped and counted. */
static void test_topk_scatter_add_equals_cpu(void **state) {
  (void)state;
  NEED_GPU();
  px_test_rng_t rng;
  px_test_rng_seed(&rng, 20);
  const size_t n = 20000, k = 3000;
  const int N = 3;
  float inv = 1.0f / (float)N;
  px_topk_pair_t *pairs = malloc((size_t)N * k * sizeof *pairs);
  uint32_t *perm = malloc(n * sizeof(uint32_t));
  for (int src = 0; src < N; src++) {
    for (size_t j = 0; j < n; j++) perm[j] = (uint32_t)j;
    for (size_t j = 0; j < k; j++) { /* k distinct indices */
      size_t q = j + px_test_rng_u64(&rng) % (n - j);
      uint32_t t = perm[j];
      perm[j] = perm[q];
      perm[q] = t;
      pairs[src * k + j].index = perm[j];
      pairs[src * k + j].value = (float)px_test_rng_normal(&rng);
    }
  }
  pairs[2 * k + 5].index = (uint32_t)n + 5; /* a bad peer's pair */
  float *want = calloc(n, sizeof(float)), *got = malloc(n * sizeof(float));
  for (int src = 0; src < N; src++)
    for (size_t j = 0; j < k; j++) {
      const px_topk_pair_t *p = &pairs[src * k + j];
      if (p->index < n) want[p->index] += p->value * inv;
    }
  float *zeros = calloc(n, sizeof(float));
  float *dg = dev_from(zeros, n * sizeof(float));
  uint32_t zero = 0, bad = 0;
  uint32_t *dbad = dev_from(&zero, sizeof zero);
  px_topk_pair_t *dpairs = dev_from(pairs, (size_t)N * k * sizeof *pairs);
  for (int src = 0; src < N; src++)
    OK(px_cuda_topk_scatter_add(dg, dbad, dpairs + (size_t)src * k, k, n, inv, NULL));
  dev_to(got, dg, n * sizeof(float));
  dev_to(&bad, dbad, sizeof bad);
  assert_floats_match(got, want, n, "top-k scatter add");
  assert_int_equal(bad, 1);
  px_cuda_kernels_free(dg);
  px_cuda_kernels_free(dbad);
  px_cuda_kernels_free(dpairs);
  free(pairs);
  free(perm);
  free(want);
  free(got);
  free(zeros);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_stubs_and_argument_errors),
      cmocka_unit_test(test_group_norms_equal_cpu),
      cmocka_unit_test(test_select_equals_cpu_order),
      cmocka_unit_test(test_single_projections_equal_cpu),
      cmocka_unit_test(test_composite_projection_equals_cpu),
      cmocka_unit_test(test_apply_mask_equals_cpu),
      cmocka_unit_test(test_apply_layout_equals_cpu),
      cmocka_unit_test(test_shrink_expand_equal_pack_plan),
      cmocka_unit_test(test_admm_updates_equal_cpu),
      cmocka_unit_test(test_sqdiff_close_and_repeatable),
      cmocka_unit_test(test_topk_select_exact),
      cmocka_unit_test(test_topk_scatter_add_equals_cpu),
  };
  return cmocka_run_group_tests(tests, group_setup, NULL);
}
