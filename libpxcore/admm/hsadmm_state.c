/* The state ops tables of hsadmm_state.h and the round's phases over them.
 *
 * The host table is the CPU reference: its loops are the ones hsadmm.c ran
 * inline before the table existed, operation for operation, so the CPU
 * path gives the same bits as it always did. The CUDA table is thin: each
 * entry is a launcher of prunex/cuda_kernels.h on the default stream (the
 * launchers answer PX_ERR_NOT_BUILT in a build without CUDA, so this file
 * needs no #ifdef). */
#include <string.h>

#include "admm/hsadmm_state.h"
#include "prunex/cuda_kernels.h"
#include "prunex/prune_internal.h"
#include "px_check.h"

/* ---- the host table: hsadmm.c's loops ----------------------------------------------- */

static px_status_t px__h_alloc(size_t bytes, const char *name, void **out) {
  *out = NULL;
  if (!bytes) return PX_OK;
  *out = px_calloc(1, bytes, name);
  return *out ? PX_OK : PX_ERR_NOMEM;
}

static void px__h_release(void *p) { px_free(p); }

static px_status_t px__h_copy(void *dst, const void *src, size_t bytes) {
  if (bytes && dst != src) memmove(dst, src, bytes);
  return PX_OK;
}

static px_status_t px__h_zero(void *dst, size_t bytes) {
  if (bytes) memset(dst, 0, bytes);
  return PX_OK;
}

static px_status_t px__h_sync(void) { return PX_OK; }

static px_status_t px__h_add(float *out, const float *a, const float *b, size_t n) {
  for (size_t j = 0; j < n; j++) out[j] = a[j] + b[j];
  return PX_OK;
}

static px_status_t px__h_scale(float *x, float f, size_t n) {
  for (size_t j = 0; j < n; j++) x[j] *= f;
  return PX_OK;
}

static px_status_t px__h_zi_update(float *zi, const float *s, const float *z, const float *v,
                                   double rho1, double rho2, double lambda, int num_nodes,
                                   int ranks_per_node, size_t n) {
  double den = lambda / num_nodes + ranks_per_node * rho1 + rho2;
  float a = (float)(rho1 / den), b = (float)(rho2 / den);
  for (size_t j = 0; j < n; j++) zi[j] = a * s[j] + b * (z[j] - v[j]);
  return PX_OK;
}

static px_status_t px__h_z_flat(float *z, const float *s, double rho1, double lambda,
                                int num_ranks, size_t n) {
  float scale = (float)(rho1 / (lambda + num_ranks * rho1));
  for (size_t j = 0; j < n; j++) z[j] = scale * s[j];
  return PX_OK;
}

static px_status_t px__h_dual(float *x, const float *a, const float *b, size_t n) {
  for (size_t j = 0; j < n; j++) x[j] += a[j] - b[j];
  return PX_OK;
}

static px_status_t px__h_rescale(float *x, double rho_old, double rho_new, size_t n) {
  return px__h_scale(x, (float)(rho_old / rho_new), n);
}

static px_status_t px__h_sqdiff(double *out, const float *a, const float *b, size_t n,
                                void *ws) {
  (void)ws;
  double acc = 0;
  if (!b) {
    for (size_t j = 0; j < n; j++) acc += (double)a[j] * a[j];
  } else {
    for (size_t j = 0; j < n; j++) {
      double d = (double)a[j] - b[j];
      acc += d * d;
    }
  }
  *out = acc;
  return PX_OK;
}

/* The block gather of px_cuda_pack_shrink: what pack.c packs for the layer
 * (its copied and shape-masked runs of the kept filters' kept channels). */
static px_status_t px__h_shrink(float *packed, const float *w, const px__hss_block_t *b) {
  if (!b->conv) return px__h_copy(packed, w, b->numel * sizeof(float));
  size_t khw = (size_t)b->shape.kh * b->shape.kw, c_in = (size_t)b->shape.c_in;
  for (int32_t r = 0; r < b->n_out; r++)
    for (int32_t i = 0; i < b->n_in; i++)
      memcpy(packed + ((size_t)r * b->n_in + i) * khw,
             w + ((size_t)b->k_out[r] * c_in + (size_t)b->k_in[i]) * khw, khw * sizeof(float));
  return PX_OK;
}

/* Its scatter: zeros, then the block's elements except the shape-pruned. */
static px_status_t px__h_expand(float *w, const float *packed, const px__hss_block_t *b) {
  if (!b->conv) return px__h_copy(w, packed, b->numel * sizeof(float));
  size_t khw = (size_t)b->shape.kh * b->shape.kw, c_in = (size_t)b->shape.c_in;
  memset(w, 0, b->numel * sizeof(float));
  for (int32_t r = 0; r < b->n_out; r++)
    for (int32_t i = 0; i < b->n_in; i++) {
      size_t c = (size_t)b->k_in[i];
      const float *src = packed + ((size_t)r * b->n_in + i) * khw;
      float *dst = w + ((size_t)b->k_out[r] * c_in + c) * khw;
      for (size_t j = 0; j < khw; j++)
        if (!b->shape_mask || b->shape_mask[c * khw + j]) dst[j] = src[j];
    }
  return PX_OK;
}

/* project.c's group norms, summed in its order. */
static px_status_t px__h_norms(double *norm, const float *w, px_conv_shape_t s,
                               px_prune_group_t kind, int add) {
  size_t khw = (size_t)s.kh * s.kw, C = (size_t)s.c_in, row = C * khw, O = (size_t)s.c_out;
  if (kind == PX_PRUNE_GROUP_FILTER) {
    for (size_t o = 0; o < O; o++) {
      const float *p = w + o * row;
      double acc = 0.0;
      for (size_t i = 0; i < row; i++) acc += (double)p[i] * p[i];
      norm[o] = acc;
    }
  } else if (kind == PX_PRUNE_GROUP_CHANNEL) {
    if (!add) memset(norm, 0, C * sizeof *norm);
    for (size_t o = 0; o < O; o++)
      for (size_t c = 0; c < C; c++) {
        const float *p = w + o * row + c * khw;
        double acc = 0.0;
        for (size_t j = 0; j < khw; j++) acc += (double)p[j] * p[j];
        norm[c] += acc;
      }
  } else {
    memset(norm, 0, row * sizeof *norm);
    for (size_t o = 0; o < O; o++)
      for (size_t g = 0; g < row; g++) norm[g] += (double)w[o * row + g] * w[o * row + g];
  }
  return PX_OK;
}

/* px_cuda_prune_apply_mask's rule: an element survives when every given
 * part keeps its group. */
static px_status_t px__h_apply(float *w, const uint8_t *mf, const uint8_t *mc, const uint8_t *ms,
                               px_conv_shape_t s) {
  size_t khw = (size_t)s.kh * s.kw, C = (size_t)s.c_in, row = C * khw;
  for (size_t o = 0; o < (size_t)s.c_out; o++) {
    float *p = w + o * row;
    if (mf && !mf[o]) {
      memset(p, 0, row * sizeof *p);
      continue;
    }
    for (size_t c = 0; c < C; c++) {
      if (mc && !mc[c]) {
        memset(p + c * khw, 0, khw * sizeof *p);
        continue;
      }
      for (size_t j = 0; ms && j < khw; j++)
        if (!ms[c * khw + j]) p[c * khw + j] = 0.0f;
    }
  }
  return PX_OK;
}

static px_status_t px__h_apply_layout(float *w, const uint8_t *mask, const px_prune_layout_t *L) {
  px_prune_layout_apply(L, w, mask);
  return PX_OK;
}

const px__hss_ops_t px__hss_host_ops = {
    .name = "host", .device = 0,
    .alloc = px__h_alloc, .release = px__h_release, .copy = px__h_copy, .zero = px__h_zero,
    .upload = px__h_copy, .download = px__h_copy, .sync = px__h_sync,
    .add = px__h_add, .scale = px__h_scale, .zi_update = px__h_zi_update,
    .z_flat = px__h_z_flat, .dual = px__h_dual, .rescale = px__h_rescale,
    .sqdiff = px__h_sqdiff, .shrink = px__h_shrink, .expand = px__h_expand,
    .norms = px__h_norms, .apply = px__h_apply, .apply_layout = px__h_apply_layout,
};

/* ---- the CUDA table: cuda_kernels.h on the default stream --------------------------- */

static px_status_t px__d_alloc(size_t bytes, const char *name, void **out) {
  PX_CHECK(px_cuda_kernels_alloc(bytes, name, out));
  return px_cuda_kernels_zero(*out, bytes, NULL);
}

static px_status_t px__d_copy(void *dst, const void *src, size_t bytes) {
  return px_cuda_kernels_copy(dst, src, bytes, NULL);
}

static px_status_t px__d_zero(void *dst, size_t bytes) {
  return px_cuda_kernels_zero(dst, bytes, NULL);
}

static px_status_t px__d_sync(void) { return px_cuda_kernels_sync(NULL); }

static px_status_t px__d_add(float *out, const float *a, const float *b, size_t n) {
  return px_cuda_admm_add(out, a, b, n, NULL);
}

static px_status_t px__d_scale(float *x, float f, size_t n) {
  return px_cuda_admm_scale(x, f, n, NULL);
}

static px_status_t px__d_zi_update(float *zi, const float *s, const float *z, const float *v,
                                   double rho1, double rho2, double lambda, int num_nodes,
                                   int ranks_per_node, size_t n) {
  return px_cuda_admm_zi_update(zi, s, z, v, rho1, rho2, lambda, num_nodes, ranks_per_node, n,
                                NULL);
}

static px_status_t px__d_z_flat(float *z, const float *s, double rho1, double lambda,
                                int num_ranks, size_t n) {
  return px_cuda_admm_z_flat(z, s, rho1, lambda, num_ranks, n, NULL);
}

static px_status_t px__d_dual(float *x, const float *a, const float *b, size_t n) {
  return px_cuda_admm_dual_update(x, a, b, n, NULL);
}

static px_status_t px__d_rescale(float *x, double rho_old, double rho_new, size_t n) {
  return px_cuda_admm_rescale(x, rho_old, rho_new, n, NULL);
}

static px_status_t px__d_sqdiff(double *out, const float *a, const float *b, size_t n,
                                void *ws) {
  return px_cuda_admm_sqdiff(out, a, b, n, ws, PX_CUDA_SQDIFF_WS_BYTES, NULL);
}

static px_status_t px__d_shrink(float *packed, const float *w, const px__hss_block_t *b) {
  if (!b->conv) return px_cuda_kernels_copy(packed, w, b->numel * sizeof(float), NULL);
  return px_cuda_pack_shrink(packed, w, b->k_out, b->n_out, b->k_in, b->n_in, b->shape, NULL);
}

static px_status_t px__d_expand(float *w, const float *packed, const px__hss_block_t *b) {
  if (!b->conv) return px_cuda_kernels_copy(w, packed, b->numel * sizeof(float), NULL);
  return px_cuda_pack_expand(w, packed, b->k_out, b->n_out, b->k_in, b->n_in, b->shape_mask,
                             b->shape, NULL);
}

static px_status_t px__d_norms(double *norms, const float *w, px_conv_shape_t s,
                               px_prune_group_t kind, int add) {
  if (kind == PX_PRUNE_GROUP_CHANNEL && add)
    return px_cuda_prune_channel_norms_add(norms, w, s, NULL);
  return px_cuda_prune_group_norms(norms, w, s, kind, NULL);
}

static px_status_t px__d_apply(float *w, const uint8_t *mf, const uint8_t *mc, const uint8_t *ms,
                               px_conv_shape_t s) {
  return px_cuda_prune_apply_mask(w, mf, mc, ms, s, NULL);
}

static px_status_t px__d_apply_layout(float *w, const uint8_t *mask, const px_prune_layout_t *L) {
  return px_cuda_prune_apply_layout(w, mask, L, NULL);
}

const px__hss_ops_t px__hss_cuda_ops = {
    .name = "cuda", .device = 1,
    .alloc = px__d_alloc, .release = px_cuda_kernels_free, .copy = px__d_copy,
    .zero = px__d_zero, .upload = px_cuda_kernels_upload, .download = px_cuda_kernels_download,
    .sync = px__d_sync, .add = px__d_add, .scale = px__d_scale, .zi_update = px__d_zi_update,
    .z_flat = px__d_z_flat, .dual = px__d_dual, .rescale = px__d_rescale,
    .sqdiff = px__d_sqdiff, .shrink = px__d_shrink, .expand = px__d_expand,
    .norms = px__d_norms, .apply = px__d_apply, .apply_layout = px__d_apply_layout,
};

/* ---- the state ------------------------------------------------------------------------ */

px_status_t px__hss_create(px__hss_t *st, const px__hss_ops_t *ops, int n, const size_t *numel) {
  memset(st, 0, sizeof *st);
  st->ops = ops;
  st->n = n;
  st->off = px_malloc((size_t)n * sizeof *st->off, "hsadmm.off");
  st->numel = px_malloc((size_t)n * sizeof *st->numel, "hsadmm.numel");
  if (!st->off || !st->numel) return PX_ERR_NOMEM;
  for (int i = 0; i < n; i++) {
    st->off[i] = st->total;
    st->numel[i] = numel[i];
    st->total += numel[i];
  }
  float **fam[] = {&st->u, &st->zi, &st->zi_prev, &st->v, &st->z, &st->z_prev, &st->s};
  for (size_t f = 0; f < sizeof fam / sizeof fam[0]; f++)
    PX_CHECK(ops->alloc(st->total * sizeof(float), "hsadmm.state", (void **)fam[f]));
  PX_CHECK(ops->alloc((size_t)n * PX__NSUMS * sizeof(double), "hsadmm.sums",
                      (void **)&st->dsums));
  if (ops->device) PX_CHECK(ops->alloc(PX_CUDA_SQDIFF_WS_BYTES, "hsadmm.sqdiff_ws", &st->ws));
  return PX_OK;
}

void px__hss_free(px__hss_t *st) {
  if (!st->ops) return;
  void *bufs[] = {st->u, st->zi, st->zi_prev, st->v, st->z, st->z_prev, st->s, st->dsums,
                  st->ws};
  for (size_t b = 0; b < sizeof bufs / sizeof bufs[0]; b++) st->ops->release(bufs[b]);
  PX_FREE_ALL(st->off, st->numel);
  memset(st, 0, sizeof *st);
}

px_status_t px__hss_copy(const px__hss_t *st, float *dst, const float *src) {
  return st->ops->copy(dst, src, st->total * sizeof(float));
}

/* ---- the round's phases -------------------------------------------------------------- */

px_status_t px__hss_theta_u(px__hss_t *st, const float *const *theta) {
  for (int i = 0; i < st->n; i++) {
    size_t o = st->off[i];
    PX_CHECK(st->ops->add(st->s + o, theta[i], st->u + o, st->numel[i]));
  }
  return PX_OK;
}

px_status_t px__hss_zi(px__hss_t *st, const double *rho1, const double *rho2, double lambda,
                       int num_nodes, int ranks_per_node) {
  PX_CHECK(px__hss_copy(st, st->zi_prev, st->zi));
  for (int i = 0; i < st->n; i++) {
    size_t o = st->off[i];
    PX_CHECK(st->ops->zi_update(st->zi + o, st->s + o, st->z + o, st->v + o, rho1[i], rho2[i],
                                lambda, num_nodes, ranks_per_node, st->numel[i]));
  }
  return PX_OK;
}

px_status_t px__hss_z_flat(px__hss_t *st, const double *rho1, double lambda, int num_ranks) {
  PX_CHECK(px__hss_copy(st, st->z_prev, st->z));
  for (int i = 0; i < st->n; i++) {
    size_t o = st->off[i];
    PX_CHECK(st->ops->z_flat(st->z + o, st->s + o, rho1[i], lambda, num_ranks, st->numel[i]));
  }
  return PX_OK;
}

px_status_t px__hss_scale(const px__hss_t *st, float *x, float f, size_t n) {
  return st->ops->scale(x, f, n);
}

px_status_t px__hss_pack_source(px__hss_t *st) {
  return st->ops->add(st->s, st->zi, st->v, st->total);
}

px_status_t px__hss_dual_v(px__hss_t *st) {
  return st->ops->dual(st->v, st->zi, st->z, st->total);
}

/* Tensor i's raw sums into its block of dsums (u updated on the way). */
static px_status_t px__hss_layer_sums(px__hss_t *st, int i, const float *th, int flat,
                                      int leader) {
  const px__hss_ops_t *ops = st->ops;
  size_t o = st->off[i], n = st->numel[i];
  const float *target = (flat ? st->z : st->zi) + o;
  const float *prev = (flat ? st->z_prev : st->zi_prev) + o;
  double *S = st->dsums + (size_t)i * PX__NSUMS;
  void *ws = st->ws;
  PX_CHECK(ops->sqdiff(S + PX__R_INTRA, th, target, n, ws));
  PX_CHECK(ops->dual(st->u + o, th, target, n));
  PX_CHECK(ops->sqdiff(S + PX__S_INTRA, target, prev, n, ws));
  PX_CHECK(ops->sqdiff(S + PX__THETA, th, NULL, n, ws));
  PX_CHECK(ops->sqdiff(S + PX__U_SQ, st->u + o, NULL, n, ws));
  if (!leader) return PX_OK;
  PX_CHECK(ops->sqdiff(S + PX__R_INTER, st->zi + o, st->z + o, n, ws));
  PX_CHECK(ops->sqdiff(S + PX__S_INTER, st->z + o, st->z_prev + o, n, ws));
  PX_CHECK(ops->sqdiff(S + PX__ZI_SQ, st->zi + o, NULL, n, ws));
  PX_CHECK(ops->sqdiff(S + PX__Z_SQ, st->z + o, NULL, n, ws));
  return ops->sqdiff(S + PX__V_SQ, st->v + o, NULL, n, ws);
}

px_status_t px__hss_residuals(px__hss_t *st, const float *const *theta, int flat, int leader,
                              const double *rho1, const double *rho2, double *sums) {
  size_t nb = (size_t)st->n * PX__NSUMS * sizeof(double);
  PX_CHECK(st->ops->zero(st->dsums, nb));
  for (int i = 0; i < st->n; i++) PX_CHECK(px__hss_layer_sums(st, i, theta[i], flat, leader));
  PX_CHECK(st->ops->download(sums, st->dsums, nb)); /* waits for the queue */
  PX_CHECK(st->ops->sync());
  for (int i = 0; i < st->n; i++) { /* the penalties' factors, as the round always applied them */
    double *S = sums + (size_t)i * PX__NSUMS;
    S[PX__S_INTRA] = rho1[i] * rho1[i] * S[PX__S_INTRA];
    if (leader) S[PX__S_INTER] = rho2[i] * rho2[i] * S[PX__S_INTER];
  }
  return PX_OK;
}

px_status_t px__hss_rescale(const px__hss_t *st, float *x, int i, double rho_old,
                            double rho_new) {
  return st->ops->rescale(x + st->off[i], rho_old, rho_new, st->numel[i]);
}
