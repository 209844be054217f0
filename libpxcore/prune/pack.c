/* Shrink/expand: packing the active slices of a model's parameters into
 * contiguous buckets and unpacking them into zero-filled full tensors.
 *
 * The full parameters, laid end to end in plan order, form the "stream"; the
 * packed buffer is the "packed stream". A conv parameter is a sequence of
 * c_out rows of c_in*kh*kw floats; every kept filter's row follows the same
 * template of runs (the channel and shape masks do not depend on the filter),
 * so a layer's layout is its K_out list plus one row template, and a dense
 * parameter is a single kept row made of one run. Shrink and expand walk an
 * interval of the stream and copy run by run, which makes whole-model and
 * per-bucket work the same code.
 *
 * A layer whose mask layout is per element (N:M: the kept elements of a row
 * differ from filter to filter) has no row template: it keeps one activity
 * byte per element and the packed offset of every row, and packs exactly
 * the active elements of each kept filter in row order. Both sides hold the
 * same union mask, so the packed stream still needs no index.
 *
 * Every array a layout needs is sized for the worst case (everything kept)
 * when the plan is created, except the packed buffer and the bucket table,
 * which only grow; after the freeze nothing changes, so shrink and expand
 * never allocate. */
#include <string.h>

#include "prunex/prune.h"
#include "prunex/prune_internal.h"
#include "px_check.h"

/* Kinds of run in a kept row. */
enum {
  PX__RUN_COPY = 0,   /* packed and active: shrink copies, expand copies back */
  PX__RUN_MASKED = 1, /* packed but shape-pruned: shrink copies, expand zeroes */
  PX__RUN_ZERO = 2,   /* channel not in K_in: not packed, expand zeroes */
};

typedef struct {
  uint32_t off;    /* start within the row */
  uint32_t len;
  uint32_t pk;     /* start within the packed row (packed runs only) */
  uint32_t kind;
} px__pack_run_t;

typedef struct {
  px_param_desc_t desc;
  size_t nrows;        /* c_out for conv, 1 for dense */
  size_t row_len;      /* c_in*kh*kw for conv, numel for dense */
  size_t numel;
  size_t stream_off;   /* first element in the stream */
  size_t packed_off;   /* first element in the packed stream */
  size_t packed_row;   /* floats of one kept row in the packed stream */
  size_t packed_len;   /* n_out * packed_row */
  int32_t n_out, n_in;
  int32_t *k_out;      /* [c_out] */
  int32_t *k_in;       /* [c_in] */
  int32_t *out_rank;   /* [nrows]: position in k_out, or -1 */
  px__pack_run_t *runs;     /* [row_len] capacity */
  int32_t nruns;
  px_prune_layout_t layout; /* conv: the mask layout */
  uint8_t *act;             /* per-element layouts: [numel] 1 for an active element */
  size_t *row_pk;           /* per-element layouts: [nrows + 1] packed offset of each row */
} px__layer_t;

struct px_pack_plan {
  px__layer_t *layers;
  int nlayers;
  size_t bucket_bytes;
  size_t stream_len;       /* total elements of all parameters */
  size_t packed_len;       /* total packed floats */
  float *buf;
  size_t buf_cap;          /* floats */
  size_t *bucket_start;    /* [nbuckets + 1] stream positions */
  size_t bucket_cap;
  int nbuckets;
  int frozen;
};

/* Largest integer a run field may hold; rows longer than this are refused. */
#define PX__RUN_MAX 0xFFFFFFFFu

static px_status_t px__layer_conv(px__layer_t *L, const px_prune_layout_t *layout);

px_status_t px_pack_plan_create(const px_param_desc_t *params, int nparams,
                                size_t bucket_bytes, px_pack_plan_t **out) {
  PX_REQUIRE(out != NULL, "px_pack_plan_create: NULL output");
  *out = NULL;
  PX_REQUIRE(nparams >= 0 && (nparams == 0 || params != NULL), "pack plan: bad parameter list");
  if (bucket_bytes == 0) bucket_bytes = PX_PACK_DEFAULT_BUCKET_BYTES;
  PX_REQUIRE(bucket_bytes % sizeof(float) == 0,
             "pack plan: bucket size %zu bytes is not a multiple of 4", bucket_bytes);
  for (int i = 0; i < nparams; i++) {
    const px_param_desc_t *d = &params[i];
    const char *nm = d->name ? d->name : "?";
    if (d->kind == PX_PARAM_CONV) {
      if (px_conv_shape_validate(d->shape) < 0)
        return px_set_error(PX_ERR_INVALID, "pack plan: parameter %d (%s): %s", i, nm,
                            px_last_error());
      PX_REQUIRE((size_t)d->shape.c_in * d->shape.kh * d->shape.kw <= PX__RUN_MAX,
                 "pack plan: parameter %d (%s): filter too large", i, nm);
    } else {
      PX_REQUIRE(d->kind == PX_PARAM_DENSE, "pack plan: parameter %d (%s): unknown kind %d", i,
                 nm, (int)d->kind);
      PX_REQUIRE(d->numel > 0 && d->numel <= PX__RUN_MAX,
                 "pack plan: parameter %d (%s): dense size %zu out of range", i, nm, d->numel);
    }
  }

  px_pack_plan_t *p = px_calloc(1, sizeof *p, "pack.plan");
  if (!p) return PX_ERR_NOMEM;
  p->bucket_bytes = bucket_bytes;
  p->nlayers = nparams;
  px_status_t st = PX_OK;
  if (nparams > 0) {
    p->layers = px_calloc((size_t)nparams, sizeof *p->layers, "pack.layers");
    if (!p->layers) {
      st = PX_ERR_NOMEM;
      goto done;
    }
  }
  size_t off = 0;
  for (int i = 0; i < nparams; i++) {
    px__layer_t *L = &p->layers[i];
    L->desc = params[i];
    L->desc.layout = NULL; /* copied into L->layout */
    if (L->desc.kind == PX_PARAM_CONV) {
      PX_CHECK_GOTO(px__layer_conv(L, params[i].layout), st, done);
    } else {
      L->nrows = 1;
      L->row_len = L->desc.numel;
    }
    L->numel = L->nrows * L->row_len;
    L->stream_off = off;
    off += L->numel;
    L->out_rank = px_malloc(L->nrows * sizeof(int32_t), "pack.out_rank");
    size_t run_cap = L->desc.kind == PX_PARAM_CONV ? L->row_len : 1;
    L->runs = px_malloc(run_cap * sizeof(px__pack_run_t), "pack.runs");
    if (!L->out_rank || !L->runs ||
        (L->desc.kind == PX_PARAM_CONV && (!L->k_out || !L->k_in))) {
      st = PX_ERR_NOMEM;
      goto done;
    }
  }
  p->stream_len = off;
  PX_CHECK_GOTO(px_pack_plan_set_masks(p, NULL), st, done);
done:
  return PX_CREATED(st, p, out, px_pack_plan_destroy);
}

/* A conv layer's mask layout and index arrays (and the element arrays of a
 * per-element layout). */
static px_status_t px__layer_conv(px__layer_t *L, const px_prune_layout_t *layout) {
  px_conv_shape_t s = L->desc.shape;
  if (layout) {
    PX_REQUIRE(!memcmp(&layout->shape, &s, sizeof s), "pack plan: %s: layout of another shape",
               L->desc.name ? L->desc.name : "?");
    L->layout = *layout;
  } else {
    PX_CHECK(px_prune_layout_init(&L->layout, s, NULL));
  }
  L->nrows = (size_t)s.c_out;
  L->row_len = (size_t)s.c_in * s.kh * s.kw;
  L->k_out = px_malloc((size_t)s.c_out * sizeof(int32_t), "pack.k_out");
  L->k_in = px_malloc((size_t)s.c_in * sizeof(int32_t), "pack.k_in");
  if (!L->k_out || !L->k_in) return PX_ERR_NOMEM;
  if (!px_prune_layout_per_element(&L->layout)) return PX_OK;
  L->act = px_malloc(px_conv_numel(s), "pack.active");
  L->row_pk = px_malloc((L->nrows + 1) * sizeof *L->row_pk, "pack.row_offsets");
  return L->act && L->row_pk ? PX_OK : PX_ERR_NOMEM;
}

void px_pack_plan_destroy(px_pack_plan_t *p) {
  if (!p) return;
  for (int i = 0; i < p->nlayers && p->layers; i++) {
    px__layer_t *L = &p->layers[i];
    PX_FREE_ALL(L->k_out, L->k_in, L->out_rank, L->runs, L->act, L->row_pk);
  }
  PX_FREE_ALL(p->layers, p->buf, p->bucket_start, p);
}

/* A per-element layer's activity and row offsets, after its index sets:
 * the kept filters pack their active elements, the others nothing. */
static void px__layer_layout_elements(px__layer_t *L, const uint8_t *mask) {
  size_t pk = 0;
  for (size_t o = 0; o < L->nrows; o++) {
    uint8_t *a = L->act + o * L->row_len;
    L->row_pk[o] = pk;
    if (L->out_rank[o] < 0) {
      memset(a, 0, L->row_len);
      continue;
    }
    for (size_t j = 0; j < L->row_len; j++) {
      a[j] = (uint8_t)(!mask || px_prune_layout_active(&L->layout, mask, (int32_t)o, j));
      pk += a[j];
    }
  }
  L->row_pk[L->nrows] = pk;
  L->nruns = 0;
  L->packed_row = 0; /* rows differ: row_pk says where each starts */
  L->packed_len = pk;
}

/* Builds a layer's index sets and row template from its mask (NULL: all
 * kept). */
static void px__layer_layout(px__layer_t *L, const uint8_t *mask) {
  if (L->desc.kind == PX_PARAM_DENSE) {
    L->n_out = L->n_in = 0;
    L->out_rank[0] = 0;
    L->runs[0] = (px__pack_run_t){0, (uint32_t)L->row_len, 0, PX__RUN_COPY};
    L->nruns = 1;
    L->packed_row = L->row_len;
    L->packed_len = L->row_len;
    return;
  }
  px_conv_shape_t s = L->desc.shape;
  size_t khw = (size_t)s.kh * s.kw;
  if (mask) {
    px_prune_layout_index_sets(&L->layout, mask, L->k_out, &L->n_out, L->k_in, &L->n_in);
  } else {
    L->n_out = s.c_out;
    L->n_in = s.c_in;
    for (int32_t o = 0; o < s.c_out; o++) L->k_out[o] = o;
    for (int32_t c = 0; c < s.c_in; c++) L->k_in[c] = c;
  }
  for (size_t o = 0; o < L->nrows; o++) L->out_rank[o] = -1;
  for (int32_t r = 0; r < L->n_out; r++) L->out_rank[L->k_out[r]] = r;
  if (L->act) {
    px__layer_layout_elements(L, mask);
    return;
  }

  /* Row template: walk the channels, marking each element as copied, masked
   * (in K_in but shape-pruned) or zero (channel not in K_in); merge equal
   * neighbours into runs. */
  const uint8_t *ms = px_prune_part(&L->layout, mask, PX_PRUNE_PART_SHAPE);
  int32_t nr = 0, next_in = 0;
  uint32_t pk = 0;
  for (int32_t c = 0; c < s.c_in; c++) {
    int in_k = next_in < L->n_in && L->k_in[next_in] == c;
    if (in_k) next_in++;
    for (size_t j = 0; j < khw; j++) {
      uint32_t kind = !in_k ? PX__RUN_ZERO
                      : (ms && !ms[c * khw + j]) ? PX__RUN_MASKED
                                                 : PX__RUN_COPY;
      uint32_t at = (uint32_t)(c * khw + j);
      if (nr > 0 && L->runs[nr - 1].kind == kind) {
        L->runs[nr - 1].len++;
      } else {
        L->runs[nr++] = (px__pack_run_t){at, 1, pk, kind};
      }
      if (kind != PX__RUN_ZERO) pk++;
    }
  }
  L->nruns = nr;
  L->packed_row = L->n_out > 0 ? pk : 0;
  L->packed_len = (size_t)L->n_out * L->packed_row;
}

/* Position in a per-element layer of its packed element rel. */
static size_t px__element_pos(const px__layer_t *L, size_t rel) {
  size_t lo = 0, hi = L->nrows - 1;
  while (lo < hi) { /* last row starting at or before rel */
    size_t mid = (lo + hi + 1) / 2;
    if (L->row_pk[mid] <= rel) lo = mid; else hi = mid - 1;
  }
  const uint8_t *a = L->act + lo * L->row_len;
  size_t left = rel - L->row_pk[lo];
  for (size_t j = 0; j < L->row_len; j++)
    if (a[j] && left-- == 0) return lo * L->row_len + j;
  return 0; /* unreachable: the row holds row_pk[lo + 1] - row_pk[lo] active elements */
}

/* Stream position of packed element q (q < packed_len). */
static size_t px__stream_pos(const px_pack_plan_t *p, size_t q) {
  int lo = 0, hi = p->nlayers - 1;
  while (lo < hi) { /* last layer whose packed_off <= q with packed elements */
    int mid = (lo + hi + 1) / 2;
    if (p->layers[mid].packed_off <= q) lo = mid; else hi = mid - 1;
  }
  while (p->layers[lo].packed_len == 0 || q >= p->layers[lo].packed_off + p->layers[lo].packed_len)
    lo--; /* empty layers share their packed_off with the next one */
  const px__layer_t *L = &p->layers[lo];
  size_t rel = q - L->packed_off;
  if (L->act) return L->stream_off + px__element_pos(L, rel);
  size_t rank = rel / L->packed_row, w = rel % L->packed_row;
  size_t row = L->desc.kind == PX_PARAM_CONV ? (size_t)L->k_out[rank] : 0;
  for (int32_t r = 0; r < L->nruns; r++) {
    const px__pack_run_t *R = &L->runs[r];
    if (R->kind != PX__RUN_ZERO && w >= R->pk && w < (size_t)R->pk + R->len)
      return L->stream_off + row * L->row_len + R->off + (w - R->pk);
  }
  return L->stream_off; /* unreachable: every packed element lies in a run */
}

px_status_t px_pack_plan_set_masks(px_pack_plan_t *p, const uint8_t *const *masks) {
  PX_REQUIRE(p != NULL, "px_pack_plan_set_masks: NULL plan");
  if (p->frozen) return px_set_error(PX_ERR_STATE, "pack plan is frozen: masks can no longer change");
  if (masks) {
    for (int i = 0; i < p->nlayers; i++)
      if (p->layers[i].desc.kind == PX_PARAM_CONV && !masks[i])
        return px_set_error(PX_ERR_INVALID, "pack plan: no mask for conv parameter %d (%s)", i,
                            p->layers[i].desc.name ? p->layers[i].desc.name : "?");
  }
  size_t off = 0;
  for (int i = 0; i < p->nlayers; i++) {
    px__layer_t *L = &p->layers[i];
    px__layer_layout(L, masks ? masks[i] : NULL);
    L->packed_off = off;
    off += L->packed_len;
  }
  p->packed_len = off;

  if (off > p->buf_cap) {
    float *nb = px_malloc_aligned(off * sizeof(float), "pack.buffer");
    if (!nb) return PX_ERR_NOMEM;
    px_free(p->buf);
    p->buf = nb;
    p->buf_cap = off;
  }
  size_t bf = p->bucket_bytes / sizeof(float);
  size_t nb = (off + bf - 1) / bf;
  if (nb + 1 > p->bucket_cap) {
    size_t *t = px_malloc((nb + 1) * sizeof *t, "pack.buckets");
    if (!t) return PX_ERR_NOMEM;
    px_free(p->bucket_start);
    p->bucket_start = t;
    p->bucket_cap = nb + 1;
  }
  /* Bucket b covers the stream from just after the last packed element of
   * bucket b-1 to just after its own last one, so the zeros between packed
   * elements belong to the bucket of the next packed element. */
  p->nbuckets = (int)nb;
  p->bucket_start[0] = 0;
  for (size_t b = 1; b < nb; b++) p->bucket_start[b] = px__stream_pos(p, b * bf - 1) + 1;
  p->bucket_start[nb] = p->stream_len;
  return PX_OK;
}

void px_pack_plan_freeze(px_pack_plan_t *p) { p->frozen = 1; }
int px_pack_plan_is_frozen(const px_pack_plan_t *p) { return p->frozen; }
int px_pack_plan_num_params(const px_pack_plan_t *p) { return p->nlayers; }
size_t px_pack_packed_floats(const px_pack_plan_t *p) { return p->packed_len; }
size_t px_pack_packed_bytes(const px_pack_plan_t *p) { return p->packed_len * sizeof(float); }
size_t px_pack_dense_bytes(const px_pack_plan_t *p) { return p->stream_len * sizeof(float); }
size_t px_pack_bucket_bytes(const px_pack_plan_t *p) { return p->bucket_bytes; }
int px_pack_num_buckets(const px_pack_plan_t *p) { return p->nbuckets; }
float *px_pack_buffer(px_pack_plan_t *p) { return p->buf; }

float *px_pack_bucket(px_pack_plan_t *p, int b, size_t *nfloats) {
  if (b < 0 || b >= p->nbuckets) {
    if (nfloats) *nfloats = 0;
    return NULL;
  }
  size_t bf = p->bucket_bytes / sizeof(float), lo = (size_t)b * bf;
  size_t hi = lo + bf < p->packed_len ? lo + bf : p->packed_len;
  if (nfloats) *nfloats = hi - lo;
  return p->buf + lo;
}

void px_pack_param_sets(const px_pack_plan_t *p, int i, const int32_t **k_out, int32_t *n_out,
                        const int32_t **k_in, int32_t *n_in) {
  const px__layer_t *L = &p->layers[i];
  if (k_out) *k_out = L->k_out;
  if (k_in) *k_in = L->k_in;
  if (n_out) *n_out = L->n_out;
  if (n_in) *n_in = L->n_in;
}

int px_pack_param_block(const px_pack_plan_t *p, int i, size_t *packed_off,
                        size_t *packed_len) {
  const px__layer_t *L = &p->layers[i];
  if (packed_off) *packed_off = L->packed_off;
  if (packed_len) *packed_len = L->packed_len;
  return L->act != NULL;
}

enum { PX__SHRINK, PX__EXPAND };

/* px__walk over the elements [lo, lend) of a per-element layer. */
static void px__walk_elements(const px__layer_t *L, size_t lo, size_t lend, int op,
                              float *buf, const float *in, float *out) {
  for (size_t row = lo / L->row_len; row * L->row_len < lend; row++) {
    size_t rs = row * L->row_len;
    size_t a = lo > rs ? lo - rs : 0;
    size_t b = lend - rs < L->row_len ? lend - rs : L->row_len;
    const uint8_t *act = L->act + rs;
    float *pk = buf + L->packed_off + L->row_pk[row];
    size_t q = 0;
    for (size_t j = 0; j < a; j++) q += act[j];
    for (size_t j = a; j < b; j++) {
      if (!act[j]) {
        if (op == PX__EXPAND) out[rs + j] = 0.0f;
        continue;
      }
      if (op == PX__SHRINK) pk[q] = in[rs + j];
      else out[rs + j] = pk[q];
      q++;
    }
  }
}

/* Copies between the tensors and the packed buffer for the stream interval
 * [s, e): shrink reads params and writes buf, expand the reverse (and writes
 * zeros to every element of the interval that is not active). */
static void px__walk(const px_pack_plan_t *p, size_t s, size_t e, int op, float *buf,
                     const float *const *src, float *const *dst) {
  if (s >= e) return;
  int li = 0, hi = p->nlayers - 1;
  while (li < hi) { /* layer holding stream position s */
    int mid = (li + hi + 1) / 2;
    if (p->layers[mid].stream_off <= s) li = mid; else hi = mid - 1;
  }
  for (; li < p->nlayers && s < e; li++) {
    const px__layer_t *L = &p->layers[li];
    size_t lo = s - L->stream_off;
    size_t lend = L->numel < e - L->stream_off ? L->numel : e - L->stream_off;
    const float *in = op == PX__SHRINK ? src[li] : NULL;
    float *out = op == PX__EXPAND ? dst[li] : NULL;
    if (L->act) {
      px__walk_elements(L, lo, lend, op, buf, in, out);
      s = L->stream_off + L->numel;
      continue;
    }
    for (size_t row = lo / L->row_len; row * L->row_len < lend; row++) {
      size_t rs = row * L->row_len;
      size_t a = lo > rs ? lo - rs : 0;
      size_t b = lend - rs < L->row_len ? lend - rs : L->row_len;
      int32_t rank = L->out_rank[row];
      if (rank < 0) {
        if (out) memset(out + rs + a, 0, (b - a) * sizeof(float));
        continue;
      }
      float *pk = buf + L->packed_off + (size_t)rank * L->packed_row;
      int32_t r = 0;
      if (a > 0) { /* first run that ends after a */
        int32_t rlo = 0, rhi = L->nruns - 1;
        while (rlo < rhi) {
          int32_t mid = (rlo + rhi + 1) / 2;
          if (L->runs[mid].off <= a) rlo = mid; else rhi = mid - 1;
        }
        r = rlo;
      }
      for (; r < L->nruns && L->runs[r].off < b; r++) {
        const px__pack_run_t *R = &L->runs[r];
        size_t x = a > R->off ? a : R->off;
        size_t y = b < (size_t)R->off + R->len ? b : (size_t)R->off + R->len;
        size_t n = y - x;
        if (op == PX__SHRINK) {
          if (R->kind != PX__RUN_ZERO)
            memcpy(pk + R->pk + (x - R->off), in + rs + x, n * sizeof(float));
        } else if (R->kind == PX__RUN_COPY) {
          memcpy(out + rs + x, pk + R->pk + (x - R->off), n * sizeof(float));
        } else {
          memset(out + rs + x, 0, n * sizeof(float));
        }
      }
    }
    s = L->stream_off + L->numel;
  }
}

void px_pack_shrink(px_pack_plan_t *p, const float *const *params) {
  px__walk(p, 0, p->stream_len, PX__SHRINK, p->buf, params, NULL);
}

void px_pack_expand(const px_pack_plan_t *p, float *const *params) {
  px__walk(p, 0, p->stream_len, PX__EXPAND, p->buf, NULL, params);
}

px_status_t px_pack_shrink_bucket(px_pack_plan_t *p, int b, const float *const *params) {
  PX_REQUIRE(b >= 0 && b < p->nbuckets, "pack plan: bucket %d out of range [0, %d)", b,
             p->nbuckets);
  px__walk(p, p->bucket_start[b], p->bucket_start[b + 1], PX__SHRINK, p->buf, params, NULL);
  return PX_OK;
}

px_status_t px_pack_expand_bucket(const px_pack_plan_t *p, int b, float *const *params) {
  PX_REQUIRE(b >= 0 && b < p->nbuckets, "pack plan: bucket %d out of range [0, %d)", b,
             p->nbuckets);
  px__walk(p, p->bucket_start[b], p->bucket_start[b + 1], PX__EXPAND, p->buf, NULL, params);
  return PX_OK;
}
