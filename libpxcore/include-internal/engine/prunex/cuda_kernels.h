/* CUDA kernels of the pruning engine (prune.h) and of the H-SADMM and Top-K
 * strategies (hsadmm.h, strategy.h): group norms, exact top-alpha group
 * selection, masks, shrink/expand of a conv weight, the elementwise ADMM
 * updates, deterministic squared norms, and the Top-K sparsifier with error
 * feedback.
 *
 * Each launcher is the device twin of a CPU function and gives the same
 * result: bitwise where the CPU result is exactly defined (norm sums, masks,
 * projections, packing, elementwise float updates), and deterministic to the
 * bit from run to run where the CPU sums in another order (||a - b||^2).
 * The CPU code stays the reference; tests/test_gpu_kernels.c
 * checks every launcher against it.
 *
 * Conventions:
 *   - every pointer argument named for data (w, norms, mask, packed, u, ...)
 *     is device memory, unless a comment says "host";
 *   - `stream` is a cudaStream_t passed as void * so that this header needs no
 *     CUDA types; NULL is the default stream. Launchers only enqueue work:
 *     results are ready after a synchronisation of that stream, and a fault
 *     inside a kernel surfaces there (px_cuda_kernels_sync), not at the call;
 *   - outputs come first, then inputs, then sizes (llm.c's layer order),
 *     then workspace, then the stream;
 *   - a zero-sized call launches nothing and succeeds (px_cuda_admm_sqdiff
 *     still writes its 0);
 *   - argument errors give PX_ERR_INVALID, CUDA errors PX_ERR_BACKEND, each
 *     with a message (px_last_error). Nothing allocates device memory except
 *     px_cuda_kernels_alloc: workspaces are the caller's.
 *
 * A build without CUDA links stubs that answer PX_ERR_NOT_BUILT ("libpxcore
 * was built without CUDA"), so callers need no #ifdefs (px_cuda_built() in
 * cuda.h tells which build this is). */
#ifndef PRUNEX_CUDA_KERNELS_H
#define PRUNEX_CUDA_KERNELS_H

#include <stddef.h>
#include <stdint.h>

#include "prunex/prune.h"
#include "prunex/px.h"

#ifdef __cplusplus
extern "C" {
#endif

/* ---- device buffers ------------------------------------------------------
 * Small helpers for tests, benchmarks and the device table of H-SADMM's
 * state (admm/hsadmm_state.c), C code that does not link the CUDA runtime
 * itself. The model's tensors are allocated through the tensor module. */

/* Allocates `bytes` of device memory on the current device into *dev (NULL
 * for 0 bytes). `name` appears in the error message. The caller owns *dev and
 * frees it with px_cuda_kernels_free. Fails with PX_ERR_BACKEND (no device,
 * out of memory). */
px_status_t px_cuda_kernels_alloc(size_t bytes, const char *name, void **dev);
/* Frees a buffer of px_cuda_kernels_alloc; NULL is a no-op. Synchronises the
 * device (cudaFree does). */
void px_cuda_kernels_free(void *dev);
/* Blocking copies between host and device memory. */
px_status_t px_cuda_kernels_upload(void *dev, const void *host, size_t bytes);
px_status_t px_cuda_kernels_download(void *host, const void *dev, size_t bytes);
/* Queues a device-to-device copy of `bytes` (the buffers may not overlap)
 * or a fill with zero bytes on `stream` (NULL: the default stream). */
px_status_t px_cuda_kernels_copy(void *dst, const void *src, size_t bytes, void *stream);
px_status_t px_cuda_kernels_zero(void *dev, size_t bytes, void *stream);
/* Waits for `stream` (NULL: the default stream) and reports any error a
 * kernel raised on the device since the last check. */
px_status_t px_cuda_kernels_sync(void *stream);

/* ---- projections (prune.h) ----------------------------------------------- */

typedef enum {
  PX_PRUNE_GROUP_FILTER = 0,  /* W[o,:,:,:], c_out groups */
  PX_PRUNE_GROUP_CHANNEL = 1, /* W[:,c,:,:], c_in groups */
  PX_PRUNE_GROUP_SHAPE = 2,   /* W[:,c,h,w], c_in*kh*kw groups */
} px_prune_group_t;

/* Number of groups of a kind (0 for an unknown kind). */
static inline size_t px_prune_group_count(px_conv_shape_t s, px_prune_group_t kind) {
  switch (kind) {
    case PX_PRUNE_GROUP_FILTER: return (size_t)s.c_out;
    case PX_PRUNE_GROUP_CHANNEL: return (size_t)s.c_in;
    case PX_PRUNE_GROUP_SHAPE: return (size_t)s.c_in * (size_t)s.kh * (size_t)s.kw;
  }
  return 0;
}

/* Squared Frobenius norm of every group of `kind` of the conv weight
 * w[c_out][c_in][kh][kw]: norms[px_prune_group_count(s, kind)], in double,
 * summed in exactly the order of project.c (one thread per group), so the
 * norms are bitwise the CPU projection's and so are the choices made from
 * them. */
px_status_t px_cuda_prune_group_norms(double *norms, const float *w, px_conv_shape_t s,
                                             px_prune_group_t kind, void *stream);

/* norms[c] += sum over the filters o, in index order, of ||w[o, c, :, :]||^2
 * (each filter's sum first), onto what norms[c_in] holds: project.c's
 * px__add_channel_norms, bit for bit. A coupled group's norm is its
 * producer's filter norm plus its consumer's channel sums
 * (px_prune_project_coupled): px_cuda_prune_group_norms of the producer's
 * filters, then this over the consumer. */
px_status_t px_cuda_prune_channel_norms_add(double *norms, const float *w,
                                                   px_conv_shape_t s, void *stream);

/* keep[g] = 1 for the `alpha` best of `ngroups` norms and 0 for the others,
 * best meaning larger norm first, NaN after every number, then lower index:
 * the total order of the CPU projection, so the result is exactly its choice
 * for the same norms (alpha >= ngroups keeps all, 0 none). Rank counting: a
 * group is kept when fewer than alpha groups precede it; O(ngroups^2) work,
 * meant for the group counts of conv layers (up to a few thousand). */
px_status_t px_cuda_prune_select(uint8_t *keep, const double *norms, size_t ngroups,
                                        size_t alpha, void *stream);

/* Zeroes every element of w outside the active set of a group mask, given as
 * its three parts (prune.h layout): filter[c_out], channel[c_in] and
 * shape[c_in*kh*kw], each nonzero for kept; a NULL part keeps all its groups.
 * With the parts of one mask this is px_prune_apply_mask (the projection once
 * masks are frozen). */
px_status_t px_cuda_prune_apply_mask(float *w, const uint8_t *filter, const uint8_t *channel,
                                            const uint8_t *shape, px_conv_shape_t s, void *stream);

/* px_prune_layout_apply on a device tensor and a device mask laid out by L
 * (a host descriptor): the parts of px_cuda_prune_apply_mask, then the N:M
 * element part when L has one. */
px_status_t px_cuda_prune_apply_layout(float *w, const uint8_t *mask,
                                              const px_prune_layout_t *L, void *stream);

/* One projection in place, the twin of px_prune_project_filter / _channel /
 * _shape: norms, selection of px_prune_keep_count(keep, groups) groups, and
 * zeroing of the others. Writes the decision to mask_part (the kind's part of
 * the group mask, required). ws is device scratch of at least
 * px_prune_workspace_size(s) bytes. Fails with PX_ERR_INVALID on a bad shape,
 * fraction or buffer. */
px_status_t px_cuda_prune_project_group(float *w, uint8_t *mask_part, px_conv_shape_t s,
                                               px_prune_group_t kind, double keep, void *ws,
                                               size_t ws_bytes, void *stream);

/* Composite projection in place, the twin of px_prune_project: filter, then
 * channel, then shape, each on the result of the one before; writes the whole
 * group mask (px_prune_mask_size(s) bytes, required). ws as above. */
px_status_t px_cuda_prune_project(float *w, uint8_t *mask, px_conv_shape_t s,
                                         const px_prune_keep_t *keep, void *ws, size_t ws_bytes,
                                         void *stream);

/* ---- shrink / expand of one conv weight (pack.c) ---------------------------
 * The packed block of a conv parameter is W[K_out][K_in][kh][kw]:
 *     packed[((r * n_in) + i) * kh*kw + j] = w[(k_out[r] * c_in + k_in[i]) * kh*kw + j]
 * with k_out[n_out] and k_in[n_in] the index sets of the layer's mask
 * (px_prune_index_sets or px_pack_param_sets, ascending, copied to the device
 * as int32). Shape-pruned positions inside the block travel as they are.
 * This is exactly the block pack.c writes for the layer; in a plan's packed
 * stream the block of parameter i starts at the sum, over the parameters
 * before it, of n_out*n_in*kh*kw (conv) or numel (dense, which travel whole:
 * a plain device copy). */

/* Gathers the block: packed[n_out * n_in * kh * kw]. */
px_status_t px_cuda_pack_shrink(float *packed, const float *w, const int32_t *k_out,
                                       int32_t n_out, const int32_t *k_in, int32_t n_in,
                                       px_conv_shape_t s, void *stream);

/* Writes the whole tensor w: the block's elements at their places, except
 * those whose shape group is pruned (shape_mask[c*kh*kw + j] == 0; NULL keeps
 * all), and zero everywhere else, as px_pack_expand does. */
px_status_t px_cuda_pack_expand(float *w, const float *packed, const int32_t *k_out,
                                       int32_t n_out, const int32_t *k_in, int32_t n_in,
                                       const uint8_t *shape_mask, px_conv_shape_t s, void *stream);

/* ---- H-SADMM elementwise updates (hsadmm.c) --------------------------------
 * Over flat float buffers of n elements; each output may alias its inputs.
 * The float arithmetic is hsadmm.c's, operation for operation and without
 * fused multiply-adds, so results are bitwise the CPU's (when the host
 * compiler does not fuse either, as on x86-64). */

/* out = a + b: theta + u before the intra sum, z_i + v before packing, and
 * the Top-K error feedback e += g. */
px_status_t px_cuda_admm_add(float *out, const float *a, const float *b, size_t n,
                                    void *stream);

/* x *= f: the mean of the packed sum (f = 1.0f / M). */
px_status_t px_cuda_admm_scale(float *x, float f, size_t n, void *stream);

/* The exact z_i update (step 2 of docs/architecture.md, "H-SADMM (one outer
 * iteration)"), before projection:
 *     den = lambda / M + P * rho1 + rho2   (double)
 *     zi  = (float)(rho1 / den) * s + (float)(rho2 / den) * (z - v)
 * s is the intra-node sum of theta + u, z the global consensus, v the inter
 * dual; M nodes (num_nodes), P ranks per node. */
px_status_t px_cuda_admm_zi_update(float *zi, const float *s, const float *z, const float *v,
                                          double rho1, double rho2, double lambda, int num_nodes,
                                          int ranks_per_node, size_t n, void *stream);

/* Flat ablation: z = (float)(rho1 / (lambda + N * rho1)) * s, N ranks. */
px_status_t px_cuda_admm_z_flat(float *z, const float *s, double rho1, double lambda,
                                       int num_ranks, size_t n, void *stream);

/* Scaled-dual update x += a - b: u += theta - z_i (intra), v += z_i - z
 * (inter). */
px_status_t px_cuda_admm_dual_update(float *x, const float *a, const float *b, size_t n,
                                            void *stream);

/* Rescale of a scaled dual when its penalty changes, so that rho * x is
 * unchanged: x *= (float)(rho_old / rho_new). Both must be > 0. */
px_status_t px_cuda_admm_rescale(float *x, double rho_old, double rho_new, size_t n,
                                        void *stream);

/* Device workspace (bytes) of px_cuda_admm_sqdiff: one double per block of
 * its fixed grid. */
#define PX_CUDA_SQDIFF_WS_BYTES ((size_t)256 * sizeof(double))

/* *out = ||a - b||^2 (b NULL: ||a||^2), accumulated in double as hsadmm.c
 * does. A fixed grid, each thread summing a fixed strided slice, then two
 * fixed tree reductions: repeated calls give bitwise-identical results on any
 * device, which differ from the CPU's sequential sum only by rounding. out is
 * one device double; ws has PX_CUDA_SQDIFF_WS_BYTES. */
px_status_t px_cuda_admm_sqdiff(double *out, const float *a, const float *b, size_t n,
                                       void *ws, size_t ws_bytes, void *stream);

/* ---- Top-K with error feedback (strategy/topk.c) -------------------------
 * Per tensor and step: e += g (px_cuda_admm_add), select the k entries of
 * largest |e| with k = px_prune_keep_count(ratio, n), send them as pairs and
 * zero them in e (what stays is fed back next step); the receiver adds
 * value / N of every rank's pairs into a zeroed gradient. */

/* One pair of the wire format: 8 bytes, index then value, as strategy/topk.c
 * writes them on a little-endian host. */
typedef struct {
  uint32_t index;
  float value;
} px_topk_pair_t;

/* Device workspace (bytes) px_cuda_topk_select needs for a tensor of n
 * entries; the need grows with n, so size one workspace for the largest
 * tensor. Asks CUB, so it needs a device: PX_ERR_BACKEND without one. */
px_status_t px_cuda_topk_workspace_size(size_t n, size_t *bytes);

/* Writes pairs[k] for the k entries of e[n] of largest |e| and zeroes them
 * in e. Ties in |e| go to the lower index and NaN ranks below every number
 * (strategy/topk.c leaves both unspecified); the pairs come in that order (|e|
 * descending, index ascending), so the choice and the wire bytes are
 * deterministic. k <= n <= INT32_MAX; ws is 256-byte aligned (as
 * px_cuda_kernels_alloc returns it). A stable CUB radix sort on
 * order-preserving keys. */
px_status_t px_cuda_topk_select(px_topk_pair_t *pairs, float *e, size_t n, size_t k,
                                       void *ws, size_t ws_bytes, void *stream);

/* grad[q] += value * scale for each of one rank's k pairs (scale = 1.0f / N),
 * in strategy/topk.c's float arithmetic; call it once per source rank, in rank
 * order, for the CPU's result. The indices of one call must be distinct (as
 * px_cuda_topk_select makes them). Pairs with index >= n are skipped and
 * counted into *bad (a device uint32, may be NULL) for the caller to turn
 * into PX_ERR_PEER after its next sync. */
px_status_t px_cuda_topk_scatter_add(float *grad, uint32_t *bad, const px_topk_pair_t *pairs,
                                            size_t k, size_t n, float scale, void *stream);

#ifdef __cplusplus
}
#endif
#endif
