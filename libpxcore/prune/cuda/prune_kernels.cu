/* Device twins of project.c and of pack.c's per-layer block (cuda_kernels.h),
 * and the small device-buffer helpers the tests use.
 *
 * Every kernel is deliberately plain, because a projection runs once per
 * outer iteration, not per step, and its choices must be exactly the CPU's:
 *   - group norms: one thread per group, summing in double in project.c's
 *     order with unfused operations, so the norms are the CPU's bit for bit;
 *   - selection: one thread per group counts the groups that precede it in
 *     the CPU's total order (norm descending, NaN last, index ascending);
 *   - masks, shrink and expand: one thread per element in grid-stride loops,
 *     copying values, so the results are the CPU's bit for bit. */
#include <cuda_runtime.h>
#include <math.h>
#include <stdio.h>
#include <stdint.h>

#include "prunex/cuda_kernels.h"
#include "prunex/prune_internal.h"
#include "prune/cuda/px_kernels_int.h"
#include "px_check.h"

/* ---- device buffers ------------------------------------------------------- */

extern "C" px_status_t px_cuda_kernels_alloc(size_t bytes, const char *name, void **dev) {
  PX_REQUIRE(dev != NULL, "px_cuda_kernels_alloc: NULL output");
  *dev = NULL;
  if (bytes == 0) return PX_OK;
  cudaError_t e = cudaMalloc(dev, bytes);
  if (e != cudaSuccess) {
    *dev = NULL;
    char what[160];
    snprintf(what, sizeof what, "cudaMalloc of %zu bytes (%s)", bytes, name ? name : "?");
    return px__cuda_to_status(e, what); /* clears the error: it must not stick */
  }
  return PX_OK;
}

extern "C" void px_cuda_kernels_free(void *dev) {
  if (dev) cudaFree(dev);
}

extern "C" px_status_t px_cuda_kernels_upload(void *dev, const void *host, size_t bytes) {
  if (bytes == 0) return PX_OK;
  PX_REQUIRE(dev && host, "px_cuda_kernels_upload: NULL buffer");
  PX__CUDA_TRY(cudaMemcpy(dev, host, bytes, cudaMemcpyHostToDevice));
  return PX_OK;
}

extern "C" px_status_t px_cuda_kernels_download(void *host, const void *dev, size_t bytes) {
  if (bytes == 0) return PX_OK;
  PX_REQUIRE(dev && host, "px_cuda_kernels_download: NULL buffer");
  PX__CUDA_TRY(cudaMemcpy(host, dev, bytes, cudaMemcpyDeviceToHost));
  return PX_OK;
}

extern "C" px_status_t px_cuda_kernels_sync(void *stream) {
  PX__CUDA_TRY(cudaStreamSynchronize(px__stream(stream)));
  PX__CUDA_TRY(cudaGetLastError());
  return PX_OK;
}

/* ---- group norms ------------------------------------------------------------
 * Grid-stride loops over groups; each thread owns whole groups. (double)x *
 * (double)x of a float is exact, and __dadd_rn keeps the compiler from
 * fusing, so each sum is the CPU's sequence of roundings. */

#define PX__GROUP_LOOP(g, count)                                            \
  for (size_t g = (size_t)blockIdx.x * blockDim.x + threadIdx.x; g < (count); \
       g += (size_t)gridDim.x * blockDim.x)

/* norms[o] = sum_i w[o][i]^2 over the row of c_in*kh*kw elements. */
__global__ static void px__filter_norms(double *norms, const float *w, size_t c_out,
                                        size_t row) {
  PX__GROUP_LOOP(o, c_out) {
    const float *p = w + o * row;
    double acc = 0.0;
    for (size_t i = 0; i < row; i++) {
      double x = (double)p[i];
      acc = __dadd_rn(acc, __dmul_rn(x, x));
    }
    norms[o] = acc;
  }
}

/* norms[c] = sum_o (sum_j w[o][c][j]^2): the inner sum per filter first, as
 * project.c adds it; add: onto norms[c] (a coupled group's producer norm). */
__global__ static void px__channel_norms(double *norms, const float *w, size_t c_out,
                                         size_t c_in, size_t khw, bool add) {
  size_t row = c_in * khw;
  PX__GROUP_LOOP(c, c_in) {
    double norm = add ? norms[c] : 0.0;
    for (size_t o = 0; o < c_out; o++) {
      const float *p = w + o * row + c * khw;
      double acc = 0.0;
      for (size_t j = 0; j < khw; j++) {
        double x = (double)p[j];
        acc = __dadd_rn(acc, __dmul_rn(x, x));
      }
      norm = __dadd_rn(norm, acc);
    }
    norms[c] = norm;
  }
}

/* norms[g] = sum_o w[o][g]^2, g = (c, h, w) flattened. */
__global__ static void px__shape_norms(double *norms, const float *w, size_t c_out, size_t row) {
  PX__GROUP_LOOP(g, row) {
    double norm = 0.0;
    for (size_t o = 0; o < c_out; o++) {
      double x = (double)w[o * row + g];
      norm = __dadd_rn(norm, __dmul_rn(x, x));
    }
    norms[g] = norm;
  }
}

extern "C" px_status_t px_cuda_prune_group_norms(double *norms, const float *w,
                                                 px_conv_shape_t s, px_prune_group_t kind,
                                                 void *stream) {
  PX_CHECK(px_conv_shape_validate(s));
  size_t G = px_prune_group_count(s, kind);
  PX_REQUIRE(G > 0, "group norms: unknown group kind %d", (int)kind);
  PX_REQUIRE(norms && w, "group norms: NULL buffer");
  size_t khw = (size_t)s.kh * s.kw, c_in = (size_t)s.c_in, c_out = (size_t)s.c_out;
  cudaStream_t st = px__stream(stream);
  switch (kind) {
    case PX_PRUNE_GROUP_FILTER:
      px__filter_norms<<<px__blocks(G), PX__THREADS, 0, st>>>(norms, w, c_out, c_in * khw);
      break;
    case PX_PRUNE_GROUP_CHANNEL:
      px__channel_norms<<<px__blocks(G), PX__THREADS, 0, st>>>(norms, w, c_out, c_in, khw,
                                                                false);
      break;
    case PX_PRUNE_GROUP_SHAPE:
      px__shape_norms<<<px__blocks(G), PX__THREADS, 0, st>>>(norms, w, c_out, c_in * khw);
      break;
  }
  PX__LAUNCHED("group norms");
  return PX_OK;
}

extern "C" px_status_t px_cuda_prune_channel_norms_add(double *norms, const float *w,
                                                       px_conv_shape_t s, void *stream) {
  PX_CHECK(px_conv_shape_validate(s));
  PX_REQUIRE(norms && w, "channel norms: NULL buffer");
  size_t c_in = (size_t)s.c_in;
  px__channel_norms<<<px__blocks(c_in), PX__THREADS, 0, px__stream(stream)>>>(
      norms, w, (size_t)s.c_out, c_in, (size_t)s.kh * s.kw, true);
  PX__LAUNCHED("channel norms");
  return PX_OK;
}

/* ---- selection ---------------------------------------------------------------
 * Group j precedes group i in project.c's order (px__rank_cmp) when: j is a
 * number and i is NaN; or both are numbers and norm j > norm i; or they tie
 * (equal numbers, or both NaN) and j < i. The order is total, so the ranks
 * are a permutation of 0..G-1 and "rank < alpha" keeps exactly the first
 * alpha groups of the CPU's sorted list. */
__global__ static void px__select_rank(uint8_t *keep, const double *norms, size_t G,
                                       size_t alpha) {
  PX__GROUP_LOOP(i, G) {
    double ni = norms[i];
    bool nan_i = isnan(ni);
    size_t rank = 0;
    for (size_t j = 0; j < G && rank < alpha; j++) {
      double nj = norms[j];
      bool nan_j = isnan(nj);
      bool before;
      if (nan_i != nan_j) before = nan_i;
      else if (!nan_i && nj != ni) before = nj > ni;
      else before = j < i;
      rank += before;
    }
    keep[i] = rank < alpha ? 1 : 0;
  }
}

extern "C" px_status_t px_cuda_prune_select(uint8_t *keep, const double *norms, size_t ngroups,
                                            size_t alpha, void *stream) {
  if (ngroups == 0) return PX_OK;
  PX_REQUIRE(keep && norms, "group selection: NULL buffer");
  cudaStream_t st = px__stream(stream);
  if (alpha >= ngroups) { /* everything kept: the CPU does not rank either */
    PX__CUDA_TRY(cudaMemsetAsync(keep, 1, ngroups, st));
    return PX_OK;
  }
  px__select_rank<<<px__blocks(ngroups), PX__THREADS, 0, st>>>(keep, norms, ngroups, alpha);
  PX__LAUNCHED("group selection");
  return PX_OK;
}

/* ---- masks -------------------------------------------------------------------- */

__global__ static void px__apply_mask(float *w, const uint8_t *mf, const uint8_t *mc,
                                      const uint8_t *ms, size_t numel, size_t row, size_t khw) {
  PX__GROUP_LOOP(idx, numel) {
    size_t o = idx / row, g = idx % row, c = g / khw;
    bool active = (!mf || mf[o]) && (!mc || mc[c]) && (!ms || ms[g]);
    if (!active) w[idx] = 0.0f;
  }
}

extern "C" px_status_t px_cuda_prune_apply_mask(float *w, const uint8_t *filter,
                                                const uint8_t *channel, const uint8_t *shape,
                                                px_conv_shape_t s, void *stream) {
  PX_CHECK(px_conv_shape_validate(s));
  PX_REQUIRE(w != NULL, "apply mask: NULL tensor");
  if (!filter && !channel && !shape) return PX_OK;
  size_t numel = px_conv_numel(s), khw = (size_t)s.kh * s.kw;
  px__apply_mask<<<px__blocks(numel), PX__THREADS, 0, px__stream(stream)>>>(
      w, filter, channel, shape, numel, (size_t)s.c_in * khw, khw);
  PX__LAUNCHED("apply mask");
  return PX_OK;
}

/* w[i] = 0 where the element mask is 0 (the N:M part, laid out like w). */
__global__ static void px__apply_elements(float *w, const uint8_t *elem, size_t numel) {
  PX__GROUP_LOOP(i, numel) {
    if (!elem[i]) w[i] = 0.0f;
  }
}

extern "C" px_status_t px_cuda_prune_apply_layout(float *w, const uint8_t *mask,
                                                  const px_prune_layout_t *L, void *stream) {
  PX_REQUIRE(L != NULL && mask != NULL, "apply layout: NULL mask or layout");
  PX_CHECK(px_cuda_prune_apply_mask(w, px_prune_part(L, mask, PX_PRUNE_PART_FILTER),
                                    px_prune_part(L, mask, PX_PRUNE_PART_CHANNEL),
                                    px_prune_part(L, mask, PX_PRUNE_PART_SHAPE), L->shape,
                                    stream));
  const uint8_t *elem = px_prune_part(L, mask, PX_PRUNE_PART_NM);
  if (!elem) return PX_OK;
  size_t numel = px_conv_numel(L->shape);
  px__apply_elements<<<px__blocks(numel), PX__THREADS, 0, px__stream(stream)>>>(w, elem, numel);
  PX__LAUNCHED("apply N:M mask");
  return PX_OK;
}

/* ---- projections ------------------------------------------------------------------ */

extern "C" px_status_t px_cuda_prune_project_group(float *w, uint8_t *mask_part,
                                                   px_conv_shape_t s, px_prune_group_t kind,
                                                   double keep, void *ws, size_t ws_bytes,
                                                   void *stream) {
  PX_CHECK(px_conv_shape_validate(s));
  PX_REQUIRE(keep >= 0.0 && keep <= 1.0, "prune keep = %g: must be a fraction in [0, 1]", keep);
  size_t G = px_prune_group_count(s, kind);
  PX_REQUIRE(G > 0, "projection: unknown group kind %d", (int)kind);
  PX_REQUIRE(w && mask_part, "projection: NULL tensor or mask");
  PX_REQUIRE(ws && (uintptr_t)ws % sizeof(double) == 0 && ws_bytes >= G * sizeof(double),
             "projection workspace of %zu bytes at %p: need %zu, 8-aligned", ws_bytes, ws,
             G * sizeof(double));
  double *norms = (double *)ws;
  size_t alpha = px_prune_keep_count(keep, G);
  if (alpha < G) PX_CHECK(px_cuda_prune_group_norms(norms, w, s, kind, stream));
  PX_CHECK(px_cuda_prune_select(mask_part, norms, G, alpha, stream));
  if (alpha >= G) return PX_OK; /* nothing to zero */
  return px_cuda_prune_apply_mask(w, kind == PX_PRUNE_GROUP_FILTER ? mask_part : NULL,
                                  kind == PX_PRUNE_GROUP_CHANNEL ? mask_part : NULL,
                                  kind == PX_PRUNE_GROUP_SHAPE ? mask_part : NULL, s, stream);
}

extern "C" px_status_t px_cuda_prune_project(float *w, uint8_t *mask, px_conv_shape_t s,
                                             const px_prune_keep_t *keep, void *ws,
                                             size_t ws_bytes, void *stream) {
  PX_REQUIRE(keep != NULL, "projection without keep fractions");
  PX_CHECK(px_conv_shape_validate(s));
  PX_CHECK(px_prune_keep_validate(keep));
  PX_REQUIRE(mask != NULL, "projection: NULL mask");
  px_prune_layout_t L; /* filter | channel | shape: the twin of px_prune_project */
  PX_CHECK(px_prune_layout_init(&L, s, NULL));
  uint8_t *mf = px_prune_part(&L, mask, PX_PRUNE_PART_FILTER);
  uint8_t *mc = px_prune_part(&L, mask, PX_PRUNE_PART_CHANNEL);
  uint8_t *ms = px_prune_part(&L, mask, PX_PRUNE_PART_SHAPE);
  PX_CHECK(px_cuda_prune_project_group(w, mf, s, PX_PRUNE_GROUP_FILTER, keep->filter_keep, ws,
                                       ws_bytes, stream));
  PX_CHECK(px_cuda_prune_project_group(w, mc, s, PX_PRUNE_GROUP_CHANNEL, keep->channel_keep, ws,
                                       ws_bytes, stream));
  PX_CHECK(px_cuda_prune_project_group(w, ms, s, PX_PRUNE_GROUP_SHAPE, keep->shape_keep, ws,
                                       ws_bytes, stream));
  return PX_OK;
}

/* ---- shrink / expand ----------------------------------------------------------------
 * One thread per element of the packed block; its place in the full tensor
 * follows from the block index (r, i, j). */

__global__ static void px__shrink(float *packed, const float *w, const int32_t *k_out,
                                  const int32_t *k_in, size_t n_in, size_t c_in, size_t khw,
                                  size_t total) {
  PX__GROUP_LOOP(idx, total) {
    size_t j = idx % khw, t = idx / khw, i = t % n_in, r = t / n_in;
    packed[idx] = w[((size_t)k_out[r] * c_in + (size_t)k_in[i]) * khw + j];
  }
}

__global__ static void px__expand(float *w, const float *packed, const int32_t *k_out,
                                  const int32_t *k_in, const uint8_t *shape_mask, size_t n_in,
                                  size_t c_in, size_t khw, size_t total) {
  PX__GROUP_LOOP(idx, total) {
    size_t j = idx % khw, t = idx / khw, i = t % n_in, r = t / n_in;
    size_t c = (size_t)k_in[i];
    if (shape_mask && !shape_mask[c * khw + j]) continue; /* stays zero */
    w[((size_t)k_out[r] * c_in + c) * khw + j] = packed[idx];
  }
}

static px_status_t px__pack_check(const int32_t *k_out, int32_t n_out, const int32_t *k_in,
                                  int32_t n_in, px_conv_shape_t s) {
  PX_CHECK(px_conv_shape_validate(s));
  PX_REQUIRE(n_out >= 0 && n_out <= s.c_out && n_in >= 0 && n_in <= s.c_in,
             "pack: %d filters and %d channels kept of [%d, %d]", n_out, n_in, s.c_out, s.c_in);
  PX_REQUIRE((n_out == 0 || k_out) && (n_in == 0 || k_in), "pack: NULL index set");
  return PX_OK;
}

extern "C" px_status_t px_cuda_pack_shrink(float *packed, const float *w, const int32_t *k_out,
                                           int32_t n_out, const int32_t *k_in, int32_t n_in,
                                           px_conv_shape_t s, void *stream) {
  PX_CHECK(px__pack_check(k_out, n_out, k_in, n_in, s));
  size_t khw = (size_t)s.kh * s.kw, total = (size_t)n_out * (size_t)n_in * khw;
  if (total == 0) return PX_OK;
  PX_REQUIRE(packed && w, "pack shrink: NULL buffer");
  px__shrink<<<px__blocks(total), PX__THREADS, 0, px__stream(stream)>>>(
      packed, w, k_out, k_in, (size_t)n_in, (size_t)s.c_in, khw, total);
  PX__LAUNCHED("pack shrink");
  return PX_OK;
}

extern "C" px_status_t px_cuda_pack_expand(float *w, const float *packed, const int32_t *k_out,
                                           int32_t n_out, const int32_t *k_in, int32_t n_in,
                                           const uint8_t *shape_mask, px_conv_shape_t s,
                                           void *stream) {
  PX_CHECK(px__pack_check(k_out, n_out, k_in, n_in, s));
  size_t khw = (size_t)s.kh * s.kw, total = (size_t)n_out * (size_t)n_in * khw;
  PX_REQUIRE(w && (total == 0 || packed), "pack expand: NULL buffer");
  cudaStream_t st = px__stream(stream);
  /* all-zero bits are +0.0f: what pack.c writes outside the active set */
  PX__CUDA_TRY(cudaMemsetAsync(w, 0, px_conv_numel(s) * sizeof(float), st));
  if (total == 0) return PX_OK;
  px__expand<<<px__blocks(total), PX__THREADS, 0, st>>>(w, packed, k_out, k_in, shape_mask,
                                                         (size_t)n_in, (size_t)s.c_in, khw,
                                                         total);
  PX__LAUNCHED("pack expand");
  return PX_OK;
}
