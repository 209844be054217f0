/* The part of prunex/prune.h internal to libpxcore, its programs and its tests
 * (not installed, not exported: docs/architecture.md, "libpxcore"). */
#ifndef PRUNEX_PRUNE_INTERNAL_H
#define PRUNEX_PRUNE_INTERNAL_H

#include "prunex/prune.h"

#ifdef __cplusplus
extern "C" {
#endif

/* PX_OK if every dimension is positive; else PX_ERR_INVALID. */
px_status_t px_conv_shape_validate(px_conv_shape_t s);

/* The choice every projection makes from its group norms: keep[g] = 1 for
 * the alpha best of ngroups norms (larger first, NaN after every number,
 * then lower index: a total order, so every rank holding the same norms
 * chooses the same groups), 0 for the others; alpha >= ngroups keeps all
 * and 0 none without reading the norms. idx is scratch of ngroups int32.
 * H-SADMM's device projection (admm/) computes the norms on the device and
 * decides here, on the host. */
void px_prune_select_groups(const double *norms, size_t ngroups, size_t alpha,
                            int32_t *idx, uint8_t *keep);

/* The layout of a layer of shape s under keep (NULL: filter, channel and
 * shape only). Fails with PX_ERR_INVALID on a bad shape or keep. */
px_status_t px_prune_layout_init(px_prune_layout_t *L, px_conv_shape_t s,
                                 const px_prune_keep_t *keep);

/* Part p of mask (borrowed, inside mask), or NULL when the set is off. */
uint8_t *px_prune_part(const px_prune_layout_t *L, const uint8_t *mask, px_prune_part_t p);

/* 1 when some part is finer than a filter x channel product, so that the
 * active elements of a row differ from filter to filter (N:M): such a layer
 * packs element by element (see the pack plan). */
int px_prune_layout_per_element(const px_prune_layout_t *L);

/* Whether element j (= c*kh*kw + h*kw + w) of filter o is active. */
int px_prune_layout_active(const px_prune_layout_t *L, const uint8_t *mask, int32_t o,
                           size_t j);

/* Layout form of px_prune_apply_mask below (which uses the layout without
 * N:M). */
void px_prune_layout_apply(const px_prune_layout_t *L, float *w, const uint8_t *mask);
double px_prune_layout_density(const px_prune_layout_t *L, const uint8_t *mask);
void px_prune_layout_index_sets(const px_prune_layout_t *L, const uint8_t *mask,
                                int32_t *k_out, int32_t *n_out, int32_t *k_in,
                                int32_t *n_in);

/* Composite projection in the layout's order: filter, channel, shape, then
 * N:M, each on the result of the one before; writes the whole mask
 * (L->size bytes) when mask is not NULL. ws as for px_prune_project. */
px_status_t px_prune_layout_project(const px_prune_layout_t *L, float *w,
                                    const px_prune_keep_t *keep, uint8_t *mask, void *ws,
                                    size_t ws_bytes);

/* The same, written as plainly as possible (sort each block): the reference
 * that tests compare px_prune_project_nm with. */
px_status_t px_prune_project_nm_ref(float *w, px_conv_shape_t s, int32_t n, int32_t m,
                                    uint8_t *mask_part);

/* What px_sparsity_project's order reads, for a twin of it elsewhere (H-SADMM's
 * device projection): parameter i as given (borrowed), 1 when i is the
 * consumer of a coupled group (its channels are chosen with its producer's
 * filters), and the keep fractions (borrowed). */
const px_sparsity_param_t *px_sparsity_param(const px_sparsity_t *sp, int i);
int px_sparsity_is_consumer(const px_sparsity_t *sp, int i);
const px_prune_keep_t *px_sparsity_keep(const px_sparsity_t *sp);
/* A follower's mask in masks from its group's choice (the consumer's
 * channel part as its filter part, everything else kept); the tensor is
 * left to the caller. */
void px_sparsity_follower_mask(const px_sparsity_t *sp, int i, uint8_t *masks);

/* Zeroes every element of w outside the mask's active set (the projection
 * used once masks are frozen). */
void px_prune_apply_mask(float *w, px_conv_shape_t s, const uint8_t *mask);

/* dst[i] = max(dst[i], src[i]): the union of two group masks. */
void px_prune_mask_union(uint8_t *dst, const uint8_t *src, size_t n);

/* Number of group bits that differ between two masks (bytes compared as
 * booleans). */
size_t px_prune_mask_drift(const uint8_t *a, const uint8_t *b, size_t n);

/* Sets every byte of a layer's mask to 1 (nothing pruned). */
void px_prune_mask_fill(uint8_t *mask, px_conv_shape_t s);

/* Index sets of a mask: K_out, the filters with any active element, and
 * K_in, the input channels with any active element, both ascending.
 * k_out needs c_out slots and k_in c_in slots; either may be NULL when only
 * the counts are wanted. */
void px_prune_index_sets(const uint8_t *mask, px_conv_shape_t s, int32_t *k_out,
                         int32_t *n_out, int32_t *k_in, int32_t *n_in);

/* Creates a plan for nparams parameters with every group kept. bucket_bytes
 * of 0 means PX_PACK_DEFAULT_BUCKET_BYTES; otherwise it must be a positive
 * multiple of 4. The descriptors are copied (names are borrowed and must
 * outlive the plan). The caller owns *out and frees it with
 * px_pack_plan_destroy. Fails with PX_ERR_INVALID or PX_ERR_NOMEM. */
px_status_t px_pack_plan_create(const px_param_desc_t *params, int nparams,
                                size_t bucket_bytes, px_pack_plan_t **out);
void px_pack_plan_destroy(px_pack_plan_t *plan);

/* Sets the layout from one group mask per parameter (masks[i] is read for conv
 * parameters, ignored for dense ones and may be NULL there). The masks are
 * read, not kept. Fails with PX_ERR_STATE once frozen, PX_ERR_INVALID on a
 * NULL conv mask, PX_ERR_NOMEM. */
px_status_t px_pack_plan_set_masks(px_pack_plan_t *plan, const uint8_t *const *masks);

/* Fixes the layout. Idempotent. */
void px_pack_plan_freeze(px_pack_plan_t *plan);
int px_pack_plan_is_frozen(const px_pack_plan_t *plan);

int px_pack_plan_num_params(const px_pack_plan_t *plan);
/* Floats / bytes in the packed stream (what crosses the inter-node link). */
size_t px_pack_packed_floats(const px_pack_plan_t *plan);
size_t px_pack_packed_bytes(const px_pack_plan_t *plan);
/* Bytes of all parameters in full (what dense synchronisation sends). */
size_t px_pack_dense_bytes(const px_pack_plan_t *plan);
size_t px_pack_bucket_bytes(const px_pack_plan_t *plan);

/* Buckets of the current layout: 0 when nothing is packed. */
int px_pack_num_buckets(const px_pack_plan_t *plan);
/* Pointer to bucket b's floats inside the plan's buffer, and their count.
 * Valid until the next set_masks or destroy. */
float *px_pack_bucket(px_pack_plan_t *plan, int b, size_t *nfloats);
/* The whole packed buffer (all buckets, contiguous). */
float *px_pack_buffer(px_pack_plan_t *plan);

/* Index sets of parameter i in the current layout (borrowed, valid until the
 * next set_masks). Dense parameters report n_out = n_in = 0. */
void px_pack_param_sets(const px_pack_plan_t *plan, int i, const int32_t **k_out,
                        int32_t *n_out, const int32_t **k_in, int32_t *n_in);

/* Where parameter i's block sits in the packed buffer of the current layout:
 * its first float and its float count (borrowed figures, valid until the
 * next set_masks). Returns 1 when the parameter packs element by element
 * (N:M), whose block is not the K_out x K_in x kh x kw gather of
 * cuda_kernels.h's px_cuda_pack_shrink, else 0 (conv and dense). */
int px_pack_param_block(const px_pack_plan_t *plan, int i, size_t *packed_off,
                        size_t *packed_len);

/* Packs params (one full tensor per parameter, in plan order) into the
 * buffer. */
void px_pack_shrink(px_pack_plan_t *plan, const float *const *params);
/* Unpacks the buffer into the full tensors, writing zeros everywhere outside
 * the active elements. */
void px_pack_expand(const px_pack_plan_t *plan, float *const *params);

/* The same for one bucket, so that packing, reducing and unpacking can be
 * pipelined. Expanding every bucket writes every element of every parameter
 * exactly once (zero regions belong to the bucket of the next packed element).
 * Fail with PX_ERR_INVALID on a bad bucket index. */
px_status_t px_pack_shrink_bucket(px_pack_plan_t *plan, int b, const float *const *params);
px_status_t px_pack_expand_bucket(const px_pack_plan_t *plan, int b, float *const *params);

#ifdef __cplusplus
}
#endif

#endif
