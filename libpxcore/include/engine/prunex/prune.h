/* PruneX structured-pruning engine (docs/architecture.md, "Pruning engine
 * (`prune/`)").
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
 * laid out as a px_prune_layout_t says (the one place that knows it):
 *     filter[c_out] | channel[c_in] | shape[c_in * kh * kw] [| nm[c_out * c_in * kh * kw]]
 * Element (o, c, h, w) is active iff filter[o] & channel[c] & shape[c,h,w]
 * (& nm[o,c,h,w] when the N:M set is on). A projection whose keep fraction
 * is 1 keeps every group of its kind, so its part of the mask is all ones.
 * Masks of several nodes combine by a bytewise OR (MAX), which is how they
 * are reduced across node leaders. */
#ifndef PRUNEX_PRUNE_H
#define PRUNEX_PRUNE_H

#include <stddef.h>
#include <stdint.h>

#include "prunex/arch.h"
#include "prunex/px.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct {
  int32_t c_out, c_in, kh, kw;
} px_conv_shape_t;

/* Fractions of groups kept per projection, each in [0, 1], and the N:M
 * set: of every M consecutive input channels of one filter at one kernel
 * position, W[o, bM..bM+M-1, h, w], at most N stay (the last block of a
 * c_in that M does not divide keeps min(N, its length)); nm_n = nm_m = 0 is
 * off, else 1 <= nm_n <= nm_m <= PX_PRUNE_NM_MAX. */
typedef struct {
  double filter_keep;   /* groups W[o,:,:,:] */
  double channel_keep;  /* groups W[:,c,:,:] */
  double shape_keep;    /* groups W[:,c,h,w] */
  int32_t nm_n, nm_m;   /* N:M along input channels; 0, 0: off */
  /* groups W[:,c,:,:] of a conv whose input channels are not coupled with a
   * producer's filters (px_sparsity_param_t.consumer): 0 is channel_keep's */
  double uncoupled_keep;
} px_prune_keep_t;

/* The channel keep of an uncoupled conv: keep->uncoupled_keep, or
 * keep->channel_keep where that is 0. */
PX_API double px_prune_uncoupled_keep(const px_prune_keep_t *keep);

/* The keep fractions of round t of a gradual ramp over K rounds
 * (prune.ramp_iterations; Zhu & Gupta's cubic schedule): each fraction f of
 * target below 1 is f + (1 - f) (1 - t / K)^3, 1 at round 0 and f from
 * round K on; an uncoupled_keep of 0 stays 0 (channel_keep's ramp). N:M is
 * target's. K <= 0 or t >= K: target itself. */
PX_API void px_prune_keep_ramp(const px_prune_keep_t *target, int t, int K, px_prune_keep_t *out);

/* PX_PRUNE_NM_MAX, the largest M: arch.h (a job spec is checked against it). */

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
 * when mask is not NULL. keep's N:M is not applied here (its mask part is
 * not in this layout): px_prune_layout_project does all the sets. */
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

/* ---- the sparsity-set descriptor ----------------------------------------
 * A layout names the parts of one conv layer's group mask: where each set's
 * groups sit and how many there are. Every user of a mask (projection,
 * masking, packing, H-SADMM, the strategies' device mirrors) asks the layout
 * instead of computing offsets, so a new set adds a part here and nothing
 * outside prune/ (and the job spec) changes. A set that is off has no part
 * (len 0), except filter, channel and shape, which are always present (all
 * ones when their keep is 1) so that their masks keep the layout they have
 * always had. */

typedef enum {
  PX_PRUNE_PART_FILTER = 0,  /* [c_out]              groups W[o,:,:,:] */
  PX_PRUNE_PART_CHANNEL = 1, /* [c_in]               groups W[:,c,:,:] */
  PX_PRUNE_PART_SHAPE = 2,   /* [c_in*kh*kw]         groups W[:,c,h,w] */
  PX_PRUNE_PART_NM = 3,      /* [c_out*c_in*kh*kw]   elements, N:M along c_in */
  PX_PRUNE_NPARTS = 4,
} px_prune_part_t;

typedef struct {
  px_conv_shape_t shape;
  int32_t nm_n, nm_m;            /* 0, 0: no N:M part */
  size_t off[PX_PRUNE_NPARTS];   /* byte offset of each part in the mask */
  size_t len[PX_PRUNE_NPARTS];   /* bytes of each part; 0: the set is off */
  size_t size;                   /* bytes of the whole mask */
} px_prune_layout_t;

/* N:M projection along input channels, in place: in every block
 * W[o, bM..min(bM+M, c_in)-1, h, w] keeps the min(N, block length) elements
 * of largest magnitude (ties by the lowest channel, NaN lowest), zeroes the
 * rest and writes the element mask (c_out*c_in*kh*kw bytes, laid out like
 * w; may be NULL). Needs no workspace. Fails with PX_ERR_INVALID on a bad
 * shape or n, m. */
PX_API px_status_t px_prune_project_nm(float *w, px_conv_shape_t s, int32_t n, int32_t m,
                                       uint8_t *mask_part);

/* ---- the sparsity set of a parameter list --------------------------------
 * One layout per prunable parameter, the offsets of their masks in one
 * contiguous buffer, the coupling of producer filters with consumer
 * channels, and the projection of the whole list in the fixed order: for
 * every layer filter, channel (consumers skip theirs), then the coupled
 * channel groups (followers take their group's mask), then shape, then N:M
 * (followers have neither). */

typedef struct {
  int prunable;            /* 0: dense, no mask */
  px_conv_shape_t shape;   /* prunable only */
  int32_t consumer;        /* prunable only: the parameter whose channels read this one's
                              filters alone (px_prune_project_coupled), or -1 */
  int follower;            /* 1: a tensor between a coupled producer and its consumer that
                              passes channel c on as channel c (a depthwise conv, a batch
                              norm's scale or shift, as [c, 1, 1, 1]): `consumer` names the
                              group's consumer, and this tensor's filter c is kept exactly
                              when that consumer keeps channel c; no projection of its own */
} px_sparsity_param_t;

typedef struct px_sparsity px_sparsity_t;

/* Copies the list. Fails with PX_ERR_INVALID on a bad keep, shape or
 * coupling (a consumer that is not a prunable conv with c_in equal to the
 * producer's c_out, or that has two producers; a follower whose consumer is
 * not a coupled consumer with c_in equal to the follower's c_out),
 * PX_ERR_NOMEM. The caller
 * owns *out. names (may be NULL) are used in error messages only. */
PX_API px_status_t px_sparsity_create(const px_sparsity_param_t *params, const char *const *names,
                                      int n, const px_prune_keep_t *keep, px_sparsity_t **out);
PX_API void px_sparsity_destroy(px_sparsity_t *sp);

/* Bytes of all masks together, and where parameter i's mask starts
 * (SIZE_MAX for a dense one). */
PX_API size_t px_sparsity_mask_bytes(const px_sparsity_t *sp);
PX_API size_t px_sparsity_mask_offset(const px_sparsity_t *sp, int i);
/* Layout of parameter i (borrowed), NULL for a dense one. */
PX_API const px_prune_layout_t *px_sparsity_layout(const px_sparsity_t *sp, int i);

/* Projects the prunable tensors, parameter i at base + off[i], writing
 * their masks into masks (px_sparsity_mask_bytes). Deterministic. Uses the
 * set's own workspace: not thread-safe on one set. Fails as the projections
 * do. */
PX_API px_status_t px_sparsity_project(px_sparsity_t *sp, float *base, const size_t *off,
                                       uint8_t *masks);
/* Zeroes the prunable tensors outside their masks (the frozen projection). */
PX_API void px_sparsity_apply(const px_sparsity_t *sp, float *base, const size_t *off,
                              const uint8_t *masks);
/* At the freeze: the union of the node masks may break a set whose rule is
 * per element (N:M: two nodes' 2:4 choices OR to 4:4), so its part of the
 * frozen mask becomes z's own projection (mask_z, the same on every rank);
 * the other parts keep the union, unless the set's rule spans the whole
 * model (px_sparsity_set_exact_freeze: a MAC budget, which the groups only
 * some node kept would exceed), when every part becomes z's. Returns 1 when
 * masks_union changed (its pack layout must be set again), 0 when nothing
 * did and no layer has an N:M part. */
PX_API int px_sparsity_freeze_masks(const px_sparsity_t *sp, uint8_t *masks_union,
                                    const uint8_t *masks_z);
/* Whether px_sparsity_freeze_masks takes all of z's masks (0 when made). */
PX_API void px_sparsity_set_exact_freeze(px_sparsity_t *sp, int on);

/* The fractions the next px_sparsity_project uses (a ramp's round,
 * px_prune_keep_ramp); N:M must stay the set's. PX_ERR_INVALID for a
 * fraction out of [0, 1] or another N:M. */
PX_API px_status_t px_sparsity_set_keep(px_sparsity_t *sp, const px_prune_keep_t *keep);

/* Kept fraction of parameter i's elements (1 for a dense one). */
PX_API double px_sparsity_density(const px_sparsity_t *sp, int i, const uint8_t *masks);

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
  /* PX_PARAM_CONV: the mask layout (copied), or NULL for filter | channel |
   * shape. A per-element layout (N:M) packs exactly the active elements of
   * each kept filter, in row order: the shared union mask says which, so
   * the wire still carries no index. */
  const px_prune_layout_t *layout;
} px_param_desc_t;

#define PX_PACK_DEFAULT_BUCKET_BYTES ((size_t)32 << 20)

typedef struct px_pack_plan px_pack_plan_t;

#ifdef __cplusplus
}
#endif
#endif
