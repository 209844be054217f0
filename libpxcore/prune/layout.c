/* The sparsity-set descriptor of one conv layer: the parts of its group
 * mask (filter, channel, shape, and the N:M element part when that set is
 * on), what an element's activity is, and the layout-driven forms of the
 * mask algebra; plus the N:M projection along input channels and its plain
 * reference, and the checks of a conv shape and of the keep fractions that
 * the projections (project.c) rely on.
 *
 * Filter, channel and shape parts are always present, in that order, so a
 * layer without N:M has the mask it has always had and every result on the
 * existing sets stays bit for bit the same. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "prune/prune_int.h"
#include "prunex/prune.h"
#include "prunex/prune_internal.h"
#include "px_check.h"

px_status_t px__nm_check(int32_t n, int32_t m) {
  PX_REQUIRE((n == 0 && m == 0) || (n >= 1 && n <= m && m <= PX_PRUNE_NM_MAX),
             "prune.nm_n = %d, prune.nm_m = %d: N:M needs 1 <= N <= M <= %d (0, 0: off)",
             (int)n, (int)m, PX_PRUNE_NM_MAX);
  return PX_OK;
}

size_t px_conv_numel(px_conv_shape_t s) {
  return (size_t)s.c_out * (size_t)s.c_in * (size_t)s.kh * (size_t)s.kw;
}

px_status_t px_conv_shape_validate(px_conv_shape_t s) {
  PX_REQUIRE(s.c_out > 0 && s.c_in > 0 && s.kh > 0 && s.kw > 0,
             "conv shape [%d, %d, %d, %d]: every dimension must be positive", s.c_out, s.c_in,
             s.kh, s.kw);
  return PX_OK;
}

px_status_t px__keep_check(const char *field, double keep) {
  PX_REQUIRE(keep >= 0.0 && keep <= 1.0, "prune.%s = %g: must be a fraction in [0, 1]", field,
             keep);
  return PX_OK;
}

double px_prune_uncoupled_keep(const px_prune_keep_t *keep) {
  return keep->uncoupled_keep > 0.0 ? keep->uncoupled_keep : keep->channel_keep;
}

static double px__ramped(double f, double left) {
  return f < 1.0 && f > 0.0 ? f + (1.0 - f) * left * left * left : f;
}

void px_prune_keep_ramp(const px_prune_keep_t *target, int t, int K, px_prune_keep_t *out) {
  *out = *target;
  if (K <= 0 || t >= K) return;
  double left = 1.0 - (double)(t < 0 ? 0 : t) / (double)K;
  out->filter_keep = px__ramped(target->filter_keep, left);
  out->channel_keep = px__ramped(target->channel_keep, left);
  out->shape_keep = px__ramped(target->shape_keep, left);
  out->uncoupled_keep = px__ramped(target->uncoupled_keep, left);
}

px_status_t px_prune_keep_validate(const px_prune_keep_t *keep) {
  PX_CHECK(px__keep_check("filter_keep", keep->filter_keep));
  PX_CHECK(px__keep_check("channel_keep", keep->channel_keep));
  PX_CHECK(px__keep_check("shape_keep", keep->shape_keep));
  PX_CHECK(px__keep_check("uncoupled_channel_keep", keep->uncoupled_keep));
  return px__nm_check(keep->nm_n, keep->nm_m);
}

void px__prune_layout_set(px_prune_layout_t *L, px_conv_shape_t s, int32_t nm_n, int32_t nm_m) {
  memset(L, 0, sizeof *L);
  L->shape = s;
  L->nm_n = nm_n;
  L->nm_m = nm_m;
  L->len[PX_PRUNE_PART_FILTER] = (size_t)s.c_out;
  L->len[PX_PRUNE_PART_CHANNEL] = (size_t)s.c_in;
  L->len[PX_PRUNE_PART_SHAPE] = (size_t)s.c_in * (size_t)s.kh * (size_t)s.kw;
  L->len[PX_PRUNE_PART_NM] = nm_m > 0 ? px_conv_numel(s) : 0;
  size_t off = 0;
  for (int p = 0; p < PX_PRUNE_NPARTS; p++) {
    L->off[p] = off;
    off += L->len[p];
  }
  L->size = off;
}

px_status_t px_prune_layout_init(px_prune_layout_t *L, px_conv_shape_t s,
                                 const px_prune_keep_t *keep) {
  PX_REQUIRE(L != NULL, "px_prune_layout_init: NULL layout");
  memset(L, 0, sizeof *L);
  PX_CHECK(px_conv_shape_validate(s));
  if (keep) PX_CHECK(px_prune_keep_validate(keep));
  px__prune_layout_set(L, s, keep ? keep->nm_n : 0, keep ? keep->nm_m : 0);
  return PX_OK;
}

uint8_t *px_prune_part(const px_prune_layout_t *L, const uint8_t *mask, px_prune_part_t p) {
  if (!mask || L->len[p] == 0) return NULL;
  return (uint8_t *)mask + L->off[p];
}

int px_prune_layout_per_element(const px_prune_layout_t *L) {
  return L->len[PX_PRUNE_PART_NM] > 0;
}

int px_prune_layout_active(const px_prune_layout_t *L, const uint8_t *mask, int32_t o,
                           size_t j) {
  size_t khw = (size_t)L->shape.kh * L->shape.kw, c = j / khw;
  if (!mask[L->off[PX_PRUNE_PART_FILTER] + (size_t)o]) return 0;
  if (!mask[L->off[PX_PRUNE_PART_CHANNEL] + c]) return 0;
  if (!mask[L->off[PX_PRUNE_PART_SHAPE] + j]) return 0;
  if (L->len[PX_PRUNE_PART_NM] &&
      !mask[L->off[PX_PRUNE_PART_NM] + (size_t)o * L->len[PX_PRUNE_PART_SHAPE] + j])
    return 0;
  return 1;
}

void px_prune_layout_apply(const px_prune_layout_t *L, float *w, const uint8_t *mask) {
  px_conv_shape_t s = L->shape;
  const uint8_t *mf = mask + L->off[PX_PRUNE_PART_FILTER];
  const uint8_t *mc = mask + L->off[PX_PRUNE_PART_CHANNEL];
  const uint8_t *ms = mask + L->off[PX_PRUNE_PART_SHAPE];
  const uint8_t *mn = px_prune_part(L, mask, PX_PRUNE_PART_NM);
  size_t khw = (size_t)s.kh * s.kw, row = (size_t)s.c_in * khw;
  for (size_t o = 0; o < (size_t)s.c_out; o++) {
    float *p = w + o * row;
    if (!mf[o]) {
      memset(p, 0, row * sizeof *p);
      continue;
    }
    for (size_t c = 0; c < (size_t)s.c_in; c++) {
      if (!mc[c]) {
        memset(p + c * khw, 0, khw * sizeof *p);
        continue;
      }
      for (size_t j = 0; j < khw; j++)
        if (!ms[c * khw + j] || (mn && !mn[o * row + c * khw + j])) p[c * khw + j] = 0.0f;
    }
  }
}

double px_prune_layout_density(const px_prune_layout_t *L, const uint8_t *mask) {
  px_conv_shape_t s = L->shape;
  const uint8_t *mf = mask + L->off[PX_PRUNE_PART_FILTER];
  const uint8_t *mc = mask + L->off[PX_PRUNE_PART_CHANNEL];
  const uint8_t *ms = mask + L->off[PX_PRUNE_PART_SHAPE];
  size_t khw = (size_t)s.kh * s.kw, filters = 0, inner = 0;
  if (px_prune_layout_per_element(L)) {
    size_t active = 0, row = (size_t)s.c_in * khw;
    for (int32_t o = 0; o < s.c_out; o++)
      for (size_t j = 0; j < row; j++) active += (size_t)px_prune_layout_active(L, mask, o, j);
    return (double)active / (double)px_conv_numel(s);
  }
  for (int32_t o = 0; o < s.c_out; o++) filters += mf[o] != 0;
  for (int32_t c = 0; c < s.c_in; c++) {
    if (!mc[c]) continue;
    for (size_t j = 0; j < khw; j++) inner += ms[c * khw + j] != 0;
  }
  return (double)(filters * inner) / (double)px_conv_numel(s);
}

void px_prune_layout_index_sets(const px_prune_layout_t *L, const uint8_t *mask,
                                int32_t *k_out, int32_t *n_out, int32_t *k_in, int32_t *n_in) {
  px_conv_shape_t s = L->shape;
  const uint8_t *mf = mask + L->off[PX_PRUNE_PART_FILTER];
  const uint8_t *mc = mask + L->off[PX_PRUNE_PART_CHANNEL];
  const uint8_t *ms = mask + L->off[PX_PRUNE_PART_SHAPE];
  size_t khw = (size_t)s.kh * s.kw;
  int32_t nin = 0, nout = 0;
  for (int32_t c = 0; c < s.c_in; c++) {
    if (!mc[c]) continue;
    int any = 0;
    for (size_t j = 0; j < khw && !any; j++) any = ms[c * khw + j] != 0;
    if (any) {
      if (k_in) k_in[nin] = c;
      nin++;
    }
  }
  /* A filter is active only if some channel is: otherwise nothing survives.
   * (An N:M part keeps at least one element of every block, so it empties no
   * filter that the other parts keep; it can empty a channel, which then
   * stays in k_in with no active element: a superset, which the per-element
   * packing of N:M layers does not read.) */
  if (nin > 0) {
    for (int32_t o = 0; o < s.c_out; o++) {
      if (!mf[o]) continue;
      if (k_out) k_out[nout] = o;
      nout++;
    }
  }
  if (nout == 0) nin = 0;
  *n_out = nout;
  *n_in = nin;
}

/* ---- N:M along input channels --------------------------------------------------------- */

/* The total order of the projections: larger magnitude first, NaN after
 * every number, then the lower channel. 1 when a ranks before b. */
static int px__nm_before(float va, size_t a, float vb, size_t b) {
  double na = (double)va * va, nb = (double)vb * vb;
  int nan_a = isnan(na), nan_b = isnan(nb);
  if (nan_a != nan_b) return nan_b;
  if (!nan_a && na != nb) return na > nb;
  return a < b;
}

static px_status_t px__nm_prepare(float *w, px_conv_shape_t s, int32_t n, int32_t m) {
  PX_REQUIRE(w != NULL, "N:M projection of a NULL tensor");
  PX_CHECK(px_conv_shape_validate(s));
  PX_CHECK(px__nm_check(n, m));
  PX_REQUIRE(m > 0, "N:M projection with M = 0");
  return PX_OK;
}

px_status_t px_prune_project_nm(float *w, px_conv_shape_t s, int32_t n, int32_t m,
                                uint8_t *mask_part) {
  PX_CHECK(px__nm_prepare(w, s, n, m));
  size_t khw = (size_t)s.kh * s.kw, C = (size_t)s.c_in, row = C * khw;
  for (size_t o = 0; o < (size_t)s.c_out; o++) {
    float *p = w + o * row;
    uint8_t *mk = mask_part ? mask_part + o * row : NULL;
    for (size_t b = 0; b < C; b += (size_t)m) {
      size_t e = b + (size_t)m < C ? b + (size_t)m : C;
      for (size_t j = 0; j < khw; j++) {
        /* an element stays when fewer than n of its block rank before it */
        uint8_t keep[PX_PRUNE_NM_MAX];
        for (size_t c = b; c < e; c++) {
          size_t better = 0;
          for (size_t d = b; d < e && better < (size_t)n; d++)
            better += d != c && px__nm_before(p[d * khw + j], d, p[c * khw + j], c);
          keep[c - b] = better < (size_t)n;
        }
        for (size_t c = b; c < e; c++) {
          if (!keep[c - b]) p[c * khw + j] = 0.0f;
          if (mk) mk[c * khw + j] = keep[c - b];
        }
      }
    }
  }
  return PX_OK;
}

typedef struct {
  float v;
  size_t c;
} px__nm_item_t;

static int px__nm_cmp(const void *pa, const void *pb) {
  const px__nm_item_t *a = pa, *b = pb;
  return px__nm_before(a->v, a->c, b->v, b->c) ? -1 : 1;
}

px_status_t px_prune_project_nm_ref(float *w, px_conv_shape_t s, int32_t n, int32_t m,
                                    uint8_t *mask_part) {
  PX_CHECK(px__nm_prepare(w, s, n, m));
  size_t khw = (size_t)s.kh * s.kw, C = (size_t)s.c_in, row = C * khw;
  px__nm_item_t items[PX_PRUNE_NM_MAX];
  for (size_t o = 0; o < (size_t)s.c_out; o++) {
    for (size_t j = 0; j < khw; j++) {
      for (size_t b = 0; b < C; b += (size_t)m) {
        size_t len = b + (size_t)m < C ? (size_t)m : C - b;
        for (size_t i = 0; i < len; i++) items[i] = (px__nm_item_t){w[o * row + (b + i) * khw + j], b + i};
        qsort(items, len, sizeof items[0], px__nm_cmp);
        for (size_t i = 0; i < len; i++) {
          size_t at = o * row + items[i].c * khw + j;
          int kept = i < (size_t)n;
          if (!kept) w[at] = 0.0f;
          if (mask_part) mask_part[at] = (uint8_t)kept;
        }
      }
    }
  }
  return PX_OK;
}
