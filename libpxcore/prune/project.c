/* Projections of conv weights onto the filter, channel and shape sparsity
 * sets (with a layout's N:M part: px_prune_layout_project), and the
 * group-mask algebra built on them (union, drift, index sets).
 *
 * Group norms are accumulated in double in a fixed order and groups are
 * ranked by (norm descending, index ascending) with a total order, so two
 * ranks holding the same tensor always make the same decision, ties
 * included. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "prune/prune_int.h"
#include "prunex/prune.h"
#include "prunex/prune_internal.h"
#include "px_check.h"

/* The filter | channel | shape layout of the classic mask functions, without
 * validation (they never validated their shape). */
static px_prune_layout_t px__classic(px_conv_shape_t s) {
  px_prune_layout_t L;
  px__prune_layout_set(&L, s, 0, 0);
  return L;
}

size_t px_prune_mask_size(px_conv_shape_t s) { return px__classic(s).size; }

size_t px_prune_keep_count(double keep, size_t count) {
  if (!(keep > 0.0)) return 0; /* also NaN */
  if (keep >= 1.0) return count;
  double x = keep * (double)count;
  double r = nearbyint(x);
  size_t k = fabs(x - r) <= 1e-9 * (count > 1 ? (double)count : 1.0) ? (size_t)r : (size_t)ceil(x);
  if (k == 0 && count > 0) k = 1; /* ceil of a positive product is at least 1 */
  return k > count ? count : k;
}

static size_t px__max_groups(px_conv_shape_t s) {
  size_t g = (size_t)s.c_out;
  size_t shape_groups = (size_t)s.c_in * (size_t)s.kh * (size_t)s.kw;
  return g > shape_groups ? g : shape_groups;
}

size_t px_prune_workspace_size(px_conv_shape_t s) {
  return px__max_groups(s) * (sizeof(double) + sizeof(int32_t));
}

/* Total order: larger norm first, NaN after every number, then lower index. */
static int px__rank_cmp(const void *pa, const void *pb, void *ctx) {
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

/* Marks in keep_out[ngroups] the `alpha` best groups by norm. */
void px_prune_select_groups(const double *norm, size_t ngroups, size_t alpha, int32_t *idx,
                            uint8_t *keep_out) {
  memset(keep_out, 0, ngroups);
  if (alpha >= ngroups) {
    memset(keep_out, 1, ngroups);
    return;
  }
  if (alpha == 0) return;
  for (size_t i = 0; i < ngroups; i++) idx[i] = (int32_t)i;
  qsort_r(idx, ngroups, sizeof *idx, px__rank_cmp, (void *)norm);
  for (size_t i = 0; i < alpha; i++) keep_out[idx[i]] = 1;
}

/* Scratch for one projection: norms[G] then idx[G] then, when the caller's
 * mask part is NULL, the decision bytes. */
typedef struct {
  double *norm;
  int32_t *idx;
  void *owned;
} px__ws_t;

static px_status_t px__ws_get(px_conv_shape_t s, void *ws, size_t ws_bytes, px__ws_t *out) {
  size_t need = px_prune_workspace_size(s);
  memset(out, 0, sizeof *out);
  if (!ws) {
    ws = out->owned = px_malloc(need, "prune.workspace");
    if (!ws) return PX_ERR_NOMEM;
  } else {
    PX_REQUIRE(ws_bytes >= need, "prune workspace of %zu bytes is too small: need %zu",
               ws_bytes, need);
  }
  out->norm = ws;
  out->idx = (int32_t *)((char *)ws + px__max_groups(s) * sizeof(double));
  return PX_OK;
}

/* Decision bytes live in a small stack buffer when the caller gives no mask
 * part; groups above this size require a mask part (callers always pass one
 * on real layers; tests pass NULL only on small tensors). */
#define PX__LOCAL_DECISIONS 4096

/* The checks and the workspace of a projection of kind ("filter", ...) that
 * decides groups groups: without mask_part they go to a local buffer of
 * PX__LOCAL_DECISIONS bytes, so more need the caller's mask. */
static px_status_t px__prepare(float *w, px_conv_shape_t s, double keep, const char *kind,
                               size_t groups, const uint8_t *mask_part, void *ws,
                               size_t ws_bytes, px__ws_t *out) {
  PX_REQUIRE(w != NULL, "projection of a NULL tensor");
  PX_CHECK(px_conv_shape_validate(s));
  PX_CHECK(px__keep_check("keep", keep));
  PX_REQUIRE(mask_part || groups <= PX__LOCAL_DECISIONS,
             "%s projection of %zu groups needs a mask buffer", kind, groups);
  return px__ws_get(s, ws, ws_bytes, out);
}

px_status_t px_prune_project_filter(float *w, px_conv_shape_t s, double keep,
                                    uint8_t *mask_part, void *ws, size_t ws_bytes) {
  size_t row = (size_t)s.c_in * s.kh * s.kw, G = (size_t)s.c_out;
  px__ws_t W;
  PX_CHECK(px__prepare(w, s, keep, "filter", G, mask_part, ws, ws_bytes, &W));
  uint8_t local[PX__LOCAL_DECISIONS];
  uint8_t *dec = mask_part ? mask_part : local;
  for (size_t o = 0; o < G; o++) {
    const float *p = w + o * row;
    double acc = 0.0;
    for (size_t i = 0; i < row; i++) acc += (double)p[i] * p[i];
    W.norm[o] = acc;
  }
  px_prune_select_groups(W.norm, G, px_prune_keep_count(keep, G), W.idx, dec);
  for (size_t o = 0; o < G; o++)
    if (!dec[o]) memset(w + o * row, 0, row * sizeof *w);
  px_free(W.owned);
  return PX_OK;
}

/* norm[c] += ||w[:, c, :, :]||^2 for every input channel c, summed filter
 * by filter in index order (the order the CUDA kernels reproduce). */
static void px__add_channel_norms(const float *w, px_conv_shape_t s, double *norm) {
  size_t khw = (size_t)s.kh * s.kw, C = (size_t)s.c_in, row = C * khw;
  for (size_t o = 0; o < (size_t)s.c_out; o++) {
    const float *p = w + o * row;
    for (size_t c = 0; c < C; c++) {
      double acc = 0.0;
      for (size_t j = 0; j < khw; j++) acc += (double)p[c * khw + j] * p[c * khw + j];
      norm[c] += acc;
    }
  }
}

px_status_t px_prune_project_channel(float *w, px_conv_shape_t s, double keep,
                                     uint8_t *mask_part, void *ws, size_t ws_bytes) {
  size_t khw = (size_t)s.kh * s.kw, C = (size_t)s.c_in, row = C * khw;
  px__ws_t W;
  PX_CHECK(px__prepare(w, s, keep, "channel", C, mask_part, ws, ws_bytes, &W));
  uint8_t local[PX__LOCAL_DECISIONS];
  uint8_t *dec = mask_part ? mask_part : local;
  for (size_t c = 0; c < C; c++) W.norm[c] = 0.0;
  px__add_channel_norms(w, s, W.norm);
  px_prune_select_groups(W.norm, C, px_prune_keep_count(keep, C), W.idx, dec);
  for (size_t o = 0; o < (size_t)s.c_out; o++)
    for (size_t c = 0; c < C; c++)
      if (!dec[c]) memset(w + o * row + c * khw, 0, khw * sizeof *w);
  px_free(W.owned);
  return PX_OK;
}

px_status_t px_prune_project_shape(float *w, px_conv_shape_t s, double keep,
                                   uint8_t *mask_part, void *ws, size_t ws_bytes) {
  size_t row = (size_t)s.c_in * s.kh * s.kw;
  px__ws_t W;
  PX_CHECK(px__prepare(w, s, keep, "shape", row, mask_part, ws, ws_bytes, &W));
  uint8_t local[PX__LOCAL_DECISIONS];
  uint8_t *dec = mask_part ? mask_part : local;
  for (size_t g = 0; g < row; g++) W.norm[g] = 0.0;
  for (size_t o = 0; o < (size_t)s.c_out; o++) {
    const float *p = w + o * row;
    for (size_t g = 0; g < row; g++) W.norm[g] += (double)p[g] * p[g];
  }
  px_prune_select_groups(W.norm, row, px_prune_keep_count(keep, row), W.idx, dec);
  for (size_t o = 0; o < (size_t)s.c_out; o++) {
    float *p = w + o * row;
    for (size_t g = 0; g < row; g++)
      if (!dec[g]) p[g] = 0.0f;
  }
  px_free(W.owned);
  return PX_OK;
}

px_status_t px_prune_project_coupled(float *producer, px_conv_shape_t sp, float *consumer,
                                     px_conv_shape_t sc, double keep, uint8_t *producer_filter,
                                     uint8_t *consumer_channel, void *ws, size_t ws_bytes) {
  PX_REQUIRE(producer && consumer, "coupled projection of a NULL tensor");
  PX_REQUIRE(producer_filter && consumer_channel, "coupled projection needs both mask parts");
  PX_CHECK(px_conv_shape_validate(sp));
  PX_CHECK(px_conv_shape_validate(sc));
  PX_REQUIRE(sp.c_out == sc.c_in,
             "coupled projection: the producer has %d filters, the consumer %d input channels",
             (int)sp.c_out, (int)sc.c_in);
  PX_CHECK(px__keep_check("keep", keep));
  px__ws_t W;
  PX_CHECK(px__ws_get(sc, ws, ws_bytes, &W));
  size_t C = (size_t)sc.c_in, khw = (size_t)sc.kh * sc.kw, row = C * khw;
  size_t prow = (size_t)sp.c_in * sp.kh * sp.kw;
  /* the group of channel c: consumer W[:, c, :, :] and producer W[c, :, :, :] */
  for (size_t c = 0; c < C; c++) {
    const float *p = producer + c * prow;
    double acc = 0.0;
    for (size_t i = 0; i < prow; i++) acc += (double)p[i] * p[i];
    W.norm[c] = acc;
  }
  px__add_channel_norms(consumer, sc, W.norm);
  px_prune_select_groups(W.norm, C, px_prune_keep_count(keep, C), W.idx, consumer_channel);
  for (size_t c = 0; c < C; c++) {
    if (consumer_channel[c]) continue;
    producer_filter[c] = 0;
    memset(producer + c * prow, 0, prow * sizeof *producer);
    for (size_t o = 0; o < (size_t)sc.c_out; o++)
      memset(consumer + o * row + c * khw, 0, khw * sizeof *consumer);
  }
  px_free(W.owned);
  return PX_OK;
}

px_status_t px_prune_project(float *w, px_conv_shape_t s, const px_prune_keep_t *keep,
                             uint8_t *mask, void *ws, size_t ws_bytes) {
  PX_REQUIRE(keep != NULL, "projection without keep fractions");
  PX_CHECK(px_conv_shape_validate(s));
  PX_CHECK(px_prune_keep_validate(keep));
  px__ws_t W;
  PX_CHECK(px__ws_get(s, ws, ws_bytes, &W));
  size_t need = px_prune_workspace_size(s);
  px_prune_layout_t L = px__classic(s);
  uint8_t *mf = px_prune_part(&L, mask, PX_PRUNE_PART_FILTER);
  uint8_t *mc = px_prune_part(&L, mask, PX_PRUNE_PART_CHANNEL);
  uint8_t *ms = px_prune_part(&L, mask, PX_PRUNE_PART_SHAPE);
  px_status_t st;
  PX_CHECK_GOTO(px_prune_project_filter(w, s, keep->filter_keep, mf, W.norm, need), st, done);
  PX_CHECK_GOTO(px_prune_project_channel(w, s, keep->channel_keep, mc, W.norm, need), st, done);
  PX_CHECK_GOTO(px_prune_project_shape(w, s, keep->shape_keep, ms, W.norm, need), st, done);
done:
  px_free(W.owned);
  return st;
}

px_status_t px_prune_layout_project(const px_prune_layout_t *L, float *w,
                                    const px_prune_keep_t *keep, uint8_t *mask, void *ws,
                                    size_t ws_bytes) {
  px_prune_keep_t k = *keep;
  k.nm_n = k.nm_m = 0; /* the structured parts first, as px_prune_project does them */
  PX_CHECK(px_prune_project(w, L->shape, &k, mask, ws, ws_bytes));
  if (!px_prune_layout_per_element(L)) return PX_OK;
  return px_prune_project_nm(w, L->shape, L->nm_n, L->nm_m,
                             px_prune_part(L, mask, PX_PRUNE_PART_NM));
}

void px_prune_apply_mask(float *w, px_conv_shape_t s, const uint8_t *mask) {
  px_prune_layout_t L = px__classic(s);
  px_prune_layout_apply(&L, w, mask);
}

void px_prune_mask_union(uint8_t *dst, const uint8_t *src, size_t n) {
  for (size_t i = 0; i < n; i++) dst[i] = dst[i] > src[i] ? dst[i] : src[i];
}

size_t px_prune_mask_drift(const uint8_t *a, const uint8_t *b, size_t n) {
  size_t d = 0;
  for (size_t i = 0; i < n; i++) d += (a[i] != 0) != (b[i] != 0);
  return d;
}

void px_prune_mask_fill(uint8_t *mask, px_conv_shape_t s) {
  memset(mask, 1, px_prune_mask_size(s));
}

void px_prune_index_sets(const uint8_t *mask, px_conv_shape_t s, int32_t *k_out,
                         int32_t *n_out, int32_t *k_in, int32_t *n_in) {
  px_prune_layout_t L = px__classic(s);
  px_prune_layout_index_sets(&L, mask, k_out, n_out, k_in, n_in);
}

double px_prune_mask_density(const uint8_t *mask, px_conv_shape_t s) {
  px_prune_layout_t L = px__classic(s);
  return px_prune_layout_density(&L, mask);
}
