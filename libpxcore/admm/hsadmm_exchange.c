/* H-SADMM's exchange (step 4 of docs/architecture.md, "H-SADMM (one outer
 * iteration)"): the leaders' sum of the packed buckets, exact or quantized
 * (hsadmm_quant.c) or coded (hsadmm_code.c), and z from it, projected and
 * broadcast in the node; with the collectives over state memory and the
 * projection of a family that the core (hsadmm.c) shares. Below both the
 * core and the overlapped exchange (hsadmm_overlap.c), which run it now or
 * during the next local phase. */
#include <string.h>

#include "admm/admm_int.h"
#include "admm/hsadmm_int.h"
#include "prunex/comm_internal.h"
#include "prunex/hsadmm_internal.h"
#include "prunex/prune_internal.h"
#include "px_check.h"
#include "px_clock.h"

/* ---- collectives over state memory ------------------------------------------------- */

/* Whether group g reads buf (n floats of state memory) itself: host state,
 * or a device buffer and NCCL. */
static int px__state_direct(const px_hsadmm_t *h, px_group_t *g) {
  return !h->st.ops->device || px_group_nccl(g);
}

/* SUM or AVG of n floats of state memory over g, in place, through the host
 * stage where g cannot read them (nothing moves for a group of one). */
px_status_t px__hsadmm_state_allreduce(px_hsadmm_t *h, px_group_t *g, float *buf, size_t n,
                                       px_comm_op_t op) {
  if (px__state_direct(h, g)) return px_comm_allreduce(g, buf, buf, n, PX_COMM_F32, op);
  if (px_group_size(g) == 1) return PX_OK;
  PX_CHECK(h->st.ops->download(h->stage, buf, n * sizeof(float)));
  PX_CHECK(px_comm_allreduce(g, h->stage, h->stage, n, PX_COMM_F32, op));
  return h->st.ops->upload(buf, h->stage, n * sizeof(float));
}

/* Rank 0's n floats of state memory on every rank of g. */
static px_status_t px__state_broadcast(px_hsadmm_t *h, px_group_t *g, float *buf, size_t n) {
  if (px__state_direct(h, g)) return px_comm_broadcast(g, buf, n, PX_COMM_F32, 0);
  if (px_group_size(g) == 1) return PX_OK;
  if (px_group_rank(g) == 0) PX_CHECK(h->st.ops->download(h->stage, buf, n * sizeof(float)));
  PX_CHECK(px_comm_broadcast(g, h->stage, n, PX_COMM_F32, 0));
  return px_group_rank(g) == 0 ? PX_OK : h->st.ops->upload(buf, h->stage, n * sizeof(float));
}

/* The plan's layout from the union masks (and its copy on the device
 * state). */
px_status_t px__hsadmm_set_masks(px_hsadmm_t *h) {
  PX_CHECK(px_pack_plan_set_masks(h->plan, h->mask_ptrs));
  return h->dev ? px__hss_pack_set(&h->dv, &h->st, h->plan, h->sp, h->mask_union) : PX_OK;
}


/* Projects the prunable tensors of a state family (zi or z) onto the
 * structured set, writing their group masks into mask (mask_node or mask_z),
 * or applies the frozen union mask. Deterministic: the same input gives the
 * same output and masks on every rank. */
px_status_t px__hsadmm_project(px_hsadmm_t *h, float *fam, uint8_t *mask) {
  if (h->dev)
    return h->frozen ? px__hss_apply(&h->st, &h->dv, h->sp, fam)
                     : px__hss_project(&h->st, &h->dv, h->sp, fam, mask);
  if (!h->frozen) return px_sparsity_project(h->sp, fam, h->st.off, mask);
  px_sparsity_apply(h->sp, fam, h->st.off, h->mask_union);
  return PX_OK;
}

/* s = SUM over group g of (theta + u). */
/* 4, the exchange itself (leaders), blocking: the f32 SUM of every packed
 * bucket, or the quantized exchange. *bytes: what it moved. */
uint64_t px__hsadmm_bytes(const px_hsadmm_t *h) {
  return px_comm_tier_bytes(h->comm, PX_TIER_INTER) + px_comm_tier_bytes(h->comm, PX_TIER_INTRA);
}

px_status_t px__hsadmm_exchange(px_hsadmm_t *h, uint64_t *bytes) {
  *bytes = 0;
  if (!h->inter) return PX_OK;
  uint64_t before = px__hsadmm_bytes(h);
  px_status_t st = PX_OK;
  if (h->lc.on) { /* the whole packed buffer, coded (hsadmm_code.c) */
    st = px__hsc_exchange(h);
    *bytes = px__hsadmm_bytes(h) - before;
    return st;
  }
  for (int b = 0; b < px_pack_num_buckets(h->plan) && st == PX_OK; b++) {
    size_t nf;
    float *buf = px_pack_bucket(h->plan, b, &nf);
    if (h->dev && px_group_nccl(h->inter)) /* the same bucket of the device's packed buffer */
      buf = h->dv.packed + (buf - px_pack_buffer(h->plan));
    if (h->q.bits) st = px__hsq_bucket(h, b, buf, nf);
    else st = px_comm_allreduce(h->inter, buf, buf, nf, PX_COMM_F32, PX_COMM_SUM);
  }
  *bytes = px__hsadmm_bytes(h) - before;
  return st;
}

/* The device-state half of z from the summed buckets: up to the state
 * unless NCCL summed them there, the mean, and the expansion into z. */
static px_status_t px__hsadmm_dev_unpack(px_hsadmm_t *h, float inv) {
  size_t nf = px_pack_packed_floats(h->plan);
  if (!px_group_nccl(h->inter))
    PX_CHECK(h->st.ops->upload(h->dv.packed, px_pack_buffer(h->plan), nf * sizeof(float)));
  PX_CHECK(px__hss_scale(&h->st, h->dv.packed, inv, nf));
  return px__hss_expand(&h->st, &h->dv, h->st.z);
}

/* 4, second half: z from the summed buckets (leaders), projected when the
 * masks were not frozen at packing; z and the masks to the node; 5 (first
 * part): v_i += z_i - z on every rank of the node (same inputs, same
 * result). z_prev keeps the z it replaces. */
px_status_t px__hsadmm_finish(px_hsadmm_t *h) {
  double t3 = px__now();
  PX_CHECK(px__hss_copy(&h->st, h->st.z_prev, h->st.z));
  if (h->inter) {
    float inv = 1.0f / (float)h->M;
    float *buf = px_pack_buffer(h->plan);
    size_t nf = px_pack_packed_floats(h->plan);
    if (h->dev) {
      PX_CHECK(px__hsadmm_dev_unpack(h, inv));
    } else if (h->q.bits) {
      px__hsq_take_sum(h);
      px_pack_expand(h->plan, h->dst_ptrs);
    } else {
      PX_CHECK(px__hss_scale(&h->st, buf, inv, nf));
      px_pack_expand(h->plan, h->dst_ptrs);
    }
    /* z is the projection of the mean onto S: the union of the node masks
     * can hold more groups than S allows while the nodes disagree. The
     * mean is bit-identical on every leader, so is the projection. */
    if (h->project_z) PX_CHECK(px__hsadmm_project(h, h->st.z, h->mask_z));
    if (h->q.bits) px__hsq_track_vsum(h); /* sum v_i += sum z_i - M z */
  }
  PX_CHECK(px__state_broadcast(h, h->intra, h->st.z, h->st.total));
  if (h->project_z) {
    PX_CHECK(px_comm_broadcast(h->intra, h->mask_union, h->mtotal, PX_COMM_U8, 0));
    PX_CHECK(px_comm_broadcast(h->intra, h->mask_z, h->mtotal, PX_COMM_U8, 0));
    if (!h->inter) PX_CHECK(px__hsadmm_set_masks(h));
  }
  PX_CHECK(px__hss_dual_v(&h->st));
  h->round.broadcast_s = px__now() - t3;
  return PX_OK;
}
