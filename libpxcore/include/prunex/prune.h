/* PruneX structured-pruning engine (DESIGN.md section 4).
 *
 * Projections of conv weights onto structured-sparsity sets, the group masks
 * they produce, and the shrink/expand plan that packs the surviving slices of
 * many layers into contiguous dense buffers (no indices on the wire) and
 * unpacks them into zero-filled full tensors.
 *
 * Everything here works on host memory through plain pointers and shapes, so
 * that a device implementation can take the same descriptors. A conv weight is
 * W[c_out][c_in][kh][kw], row-major, float32.
 *
 * Group mask of a conv layer: one byte per group, 0 (pruned) or 1 (kept),
 * laid out as
 *     filter[c_out] | channel[c_in] | shape[c_in * kh * kw]
 * Element (o, c, h, w) is active iff filter[o] & channel[c] & shape[c,h,w].
 * A projection whose keep fraction is 1 keeps every group of its kind, so its
 * part of the mask is all ones. Masks of several nodes combine by a bytewise
 * OR (MAX), which is how they are reduced across node leaders. */
#ifndef PRUNEX_PRUNE_H
#define PRUNEX_PRUNE_H

#include <stddef.h>
#include <stdint.h>

#include "prunex/px.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct {
  int32_t c_out, c_in, kh, kw;
} px_conv_shape_t;

/* Fractions of groups kept per projection, each in [0, 1]. */
typedef struct {
  double filter_keep;   /* groups W[o,:,:,:] */
  double channel_keep;  /* groups W[:,c,:,:] */
  double shape_keep;    /* groups W[:,c,h,w] */
} px_prune_keep_t;

/* Number of elements of a conv weight. */
PX_API size_t px_conv_numel(px_conv_shape_t s);

/* Bytes of a conv layer's group mask: c_out + c_in + c_in*kh*kw. */
PX_API size_t px_prune_mask_size(px_conv_shape_t s);

/* Groups kept out of `count` for a keep fraction: ceil(keep * count), where a
 * product within 1e-9 of an integer counts as that integer (so 0.3 * 10 keeps
 * 3, not 4, despite binary rounding); a positive keep keeps at least one
 * group. keep is clamped to [0, 1]. */
PX_API size_t px_prune_keep_count(double keep, size_t count);

/* PX_OK if every fraction is in [0, 1]; else PX_ERR_INVALID naming the field. */
PX_API px_status_t px_prune_keep_validate(const px_prune_keep_t *keep);

/* PX_OK if every dimension is positive; else PX_ERR_INVALID. */
PX_API px_status_t px_conv_shape_validate(px_conv_shape_t s);

/* Scratch bytes the projections need for a layer of this shape. */
PX_API size_t px_prune_workspace_size(px_conv_shape_t s);

/* Single projections, in place. Each keeps the alpha groups of largest
 * Frobenius norm (ties broken by the lowest group index, so every rank that
 * holds the same tensor decides identically; NaN norms rank lowest), zeroes
 * the rest, and writes its part of the group mask to `mask_part` (c_out,
 * c_in or c_in*kh*kw bytes; may be NULL). `ws` is scratch of at least
 * px_prune_workspace_size(s) bytes, or NULL to allocate it for the call.
 * Fail with PX_ERR_INVALID on a bad shape or fraction, PX_ERR_NOMEM. */
PX_API px_status_t px_prune_project_filter(float *w, px_conv_shape_t s, double keep,
                                           uint8_t *mask_part, void *ws, size_t ws_bytes);
PX_API px_status_t px_prune_project_channel(float *w, px_conv_shape_t s, double keep,
                                            uint8_t *mask_part, void *ws, size_t ws_bytes);
PX_API px_status_t px_prune_project_shape(float *w, px_conv_shape_t s, double keep,
                                          uint8_t *mask_part, void *ws, size_t ws_bytes);

/* Composite projection: filter, then channel, then shape, each on the result
 * of the one before. Writes the whole group mask (px_prune_mask_size bytes)
 * when mask is not NULL. */
PX_API px_status_t px_prune_project(float *w, px_conv_shape_t s, const px_prune_keep_t *keep,
                                    uint8_t *mask, void *ws, size_t ws_bytes);

/* Coupled channel projection for a producer conv whose output channels only
 * a consumer conv reads (through batch norm / ReLU; see
 * px_model_channel_consumer): channel c of the consumer and filter c of the
 * producer form one group, of squared norm ||consumer[:,c,:,:]||^2 +
 * ||producer[c,:,:,:]||^2. Keeps the alpha = px_prune_keep_count(keep, C)
 * best groups (ties by the lowest index, NaN lowest), zeroes both halves of
 * the others, writes the consumer's channel mask part (c_in bytes) and clears
 * the pruned filters in the producer's filter mask part (c_out bytes; filters
 * it already pruned stay pruned). Pruning filter c is free once channel c is
 * gone: what it computes is read by nobody, which is what makes the producer's
 * packed block (K_out x K_in) shrink too. Fails with PX_ERR_INVALID when
 * producer c_out != consumer c_in, or on a bad shape or fraction; ws as for
 * the other projections, sized for the consumer. */
PX_API px_status_t px_prune_project_coupled(float *producer, px_conv_shape_t sp, float *consumer,
                                            px_conv_shape_t sc, double keep,
                                            uint8_t *producer_filter, uint8_t *consumer_channel,
                                            void *ws, size_t ws_bytes);

/* Zeroes every element of w outside the mask's active set (the projection
 * used once masks are frozen). */
PX_API void px_prune_apply_mask(float *w, px_conv_shape_t s, const uint8_t *mask);

/* dst[i] = max(dst[i], src[i]): the union of two group masks. */
PX_API void px_prune_mask_union(uint8_t *dst, const uint8_t *src, size_t n);

/* Number of group bits that differ between two masks (bytes compared as
 * booleans). */
PX_API size_t px_prune_mask_drift(const uint8_t *a, const uint8_t *b, size_t n);

/* Sets every byte of a layer's mask to 1 (nothing pruned). */
PX_API void px_prune_mask_fill(uint8_t *mask, px_conv_shape_t s);

/* Index sets of a mask: K_out, the filters with any active element, and
 * K_in, the input channels with any active element, both ascending.
 * k_out needs c_out slots and k_in c_in slots; either may be NULL when only
 * the counts are wanted. */
PX_API void px_prune_index_sets(const uint8_t *mask, px_conv_shape_t s, int32_t *k_out,
                                int32_t *n_out, int32_t *k_in, int32_t *n_in);

/* Fraction of the layer's elements that the mask keeps active. */
PX_API double px_prune_mask_density(const uint8_t *mask, px_conv_shape_t s);

/* ---- shrink / expand ----------------------------------------------------
 * A pack plan describes a model's parameter list. For every conv parameter it
 * packs the dense block W[K_out][K_in][kh][kw] (shape-pruned positions inside
 * the block travel as they are and are zeroed on expand); dense parameters
 * (batch norm, fully connected, unpruned convs) travel whole. The packed
 * stream is the concatenation of the parameters' packed blocks in order,
 * split into buckets of at most bucket_bytes each (a block may span
 * buckets). The plan owns the packed buffer.
 *
 * Before the freeze, set_masks may change the layout (and may allocate);
 * after px_pack_plan_freeze the layout is fixed and shrink/expand allocate
 * nothing. */

typedef enum {
  PX_PARAM_DENSE = 0, /* sent whole */
  PX_PARAM_CONV = 1,  /* compacted by its group mask */
} px_param_kind_t;

typedef struct {
  const char *name;       /* borrowed, used in error messages; may be NULL */
  px_param_kind_t kind;
  px_conv_shape_t shape;  /* PX_PARAM_CONV */
  size_t numel;           /* PX_PARAM_DENSE (ignored for CONV) */
} px_param_desc_t;

#define PX_PACK_DEFAULT_BUCKET_BYTES ((size_t)32 << 20)

typedef struct px_pack_plan px_pack_plan_t;

/* Creates a plan for nparams parameters with every group kept. bucket_bytes
 * of 0 means PX_PACK_DEFAULT_BUCKET_BYTES; otherwise it must be a positive
 * multiple of 4. The descriptors are copied (names are borrowed and must
 * outlive the plan). The caller owns *out and frees it with
 * px_pack_plan_destroy. Fails with PX_ERR_INVALID or PX_ERR_NOMEM. */
PX_API px_status_t px_pack_plan_create(const px_param_desc_t *params, int nparams,
                                       size_t bucket_bytes, px_pack_plan_t **out);
PX_API void px_pack_plan_destroy(px_pack_plan_t *plan);

/* Sets the layout from one group mask per parameter (masks[i] is read for conv
 * parameters, ignored for dense ones and may be NULL there). The masks are
 * read, not kept. Fails with PX_ERR_STATE once frozen, PX_ERR_INVALID on a
 * NULL conv mask, PX_ERR_NOMEM. */
PX_API px_status_t px_pack_plan_set_masks(px_pack_plan_t *plan, const uint8_t *const *masks);

/* Fixes the layout. Idempotent. */
PX_API void px_pack_plan_freeze(px_pack_plan_t *plan);
PX_API int px_pack_plan_is_frozen(const px_pack_plan_t *plan);

PX_API int px_pack_plan_num_params(const px_pack_plan_t *plan);
/* Floats / bytes in the packed stream (what crosses the inter-node link). */
PX_API size_t px_pack_packed_floats(const px_pack_plan_t *plan);
PX_API size_t px_pack_packed_bytes(const px_pack_plan_t *plan);
/* Bytes of all parameters in full (what dense synchronisation sends). */
PX_API size_t px_pack_dense_bytes(const px_pack_plan_t *plan);
PX_API size_t px_pack_bucket_bytes(const px_pack_plan_t *plan);

/* Buckets of the current layout: 0 when nothing is packed. */
PX_API int px_pack_num_buckets(const px_pack_plan_t *plan);
/* Pointer to bucket b's floats inside the plan's buffer, and their count.
 * Valid until the next set_masks or destroy. */
PX_API float *px_pack_bucket(px_pack_plan_t *plan, int b, size_t *nfloats);
/* The whole packed buffer (all buckets, contiguous). */
PX_API float *px_pack_buffer(px_pack_plan_t *plan);

/* Index sets of parameter i in the current layout (borrowed, valid until the
 * next set_masks). Dense parameters report n_out = n_in = 0. */
PX_API void px_pack_param_sets(const px_pack_plan_t *plan, int i, const int32_t **k_out,
                               int32_t *n_out, const int32_t **k_in, int32_t *n_in);

/* Packs params (one full tensor per parameter, in plan order) into the
 * buffer. */
PX_API void px_pack_shrink(px_pack_plan_t *plan, const float *const *params);
/* Unpacks the buffer into the full tensors, writing zeros everywhere outside
 * the active elements. */
PX_API void px_pack_expand(const px_pack_plan_t *plan, float *const *params);

/* The same for one bucket, so that packing, reducing and unpacking can be
 * pipelined. Expanding every bucket writes every element of every parameter
 * exactly once (zero regions belong to the bucket of the next packed element).
 * Fail with PX_ERR_INVALID on a bad bucket index. */
PX_API px_status_t px_pack_shrink_bucket(px_pack_plan_t *plan, int b, const float *const *params);
PX_API px_status_t px_pack_expand_bucket(const px_pack_plan_t *plan, int b, float *const *params);

#ifdef __cplusplus
}
#endif
#endif
