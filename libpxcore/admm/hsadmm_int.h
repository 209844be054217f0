/* H-SADMM's four rooms and the handle they share.
 *
 *   hsadmm.c          the core: state families, masks, the round (intra
 *                     sum and node consensus, the duals, residuals), the
 *                     decision, the checkpoint items;
 *   hsadmm_exchange.c the leaders' packed exchange and z from it (projected,
 *                     broadcast in the node), for the core and the overlap;
 *   hsadmm_quant.c    comm.quantize: the leaders' 4/8-bit exchange of z_i
 *                     with error feedback and the tracked sum of v_i;
 *   hsadmm_overlap.c  comm.overlap: the exact exchange of round k in flight
 *                     during the local phase of round k+1;
 *   hsadmm_code.c     comm.compress: the exact exchange delta-coded without
 *                     loss (lossless.h).
 *
 * The core calls the rooms through the px__hsq_*, px__hso_* and px__hsc_* functions
 * below; the exchange itself (px__hsadmm_exchange, px__hsadmm_finish,
 * px__hsadmm_bytes) is hsadmm_exchange.c's, below the core and the
 * overlapped room, which both run it. Nothing here is seen outside admm/. */
#ifndef PX_HSADMM_INT_H
#define PX_HSADMM_INT_H

#include <stddef.h>
#include <stdint.h>

#include "admm/hsadmm_state.h"
#include "prunex/hsadmm.h"
#include "prunex/hsadmm_internal.h"
#include "prunex/lossless.h"

/* comm.quantize, on the leaders (every pointer NULL elsewhere and with
 * bits 0). Buffers of `total` floats are laid out like the parameters
 * ("parameter layout") or like the pack plan's buffer ("packed layout"). */
typedef struct {
  int bits;             /* 0: exact exchange */
  uint64_t seed;
  float *err;           /* [total] error feedback, parameter layout */
  float *sum;           /* [total] decoded sum of the leaders' payloads, packed layout */
  float *ref;           /* [total] the previous z, packed layout: payloads are differences
                           from it, which shrink as the consensus settles */
  float *vsum;          /* [total] sum over nodes of v_i as the leaders track it,
                           parameter layout, the same on every leader */
  float *vp;            /* [total] vsum packed, packed layout */
  float **err_ptrs;     /* [n] tensors of err, for unpacking */
  float **ref_ptrs;     /* [n] tensors of z (the previous one while exchanging), for packing */
  float **vs_ptrs;      /* [n] tensors of vsum, for packing */
  uint8_t *send;        /* [px_quant_bytes(largest bucket)] this leader's payload */
  uint8_t *recv;        /* [M * that] every leader's payload, in node order */
} px__hsadmm_quant_t;

/* comm.compress lossless, on the leaders (every pointer NULL elsewhere and
 * when off). */
typedef struct {
  int on;
  px_lossless_t *lc;
  float *hist;          /* [M * total] each leader's last payload as decoded, parameter
                           layout, leader r at r * total: the same on every leader */
  float **hptrs;        /* [n] tensors of one leader's history (re-pointed per leader) */
  float *cur;           /* [total] this leader's packed payload of the round */
  float *acc;           /* [total] the sum in node order, packed layout */
  uint8_t *send;        /* [px_lossless_bound(total)] */
  uint8_t *recv;        /* [M * that] */
  size_t *counts;       /* [M] payload bytes of each leader (allgathered, the
                           allgatherv's counts; every leader has the same size_t) */
  double scale;         /* the last exchange: raw f32 bytes over coded bytes (1 when off) */
} px__hsadmm_code_t;

/* Where the exchange of comm.overlap stands. */
typedef enum {
  PX__OV_IDLE = 0,      /* nothing waiting: z is the last sync's */
  PX__OV_PACKED,        /* the last sync packed its exchange and deferred it */
  PX__OV_IN_FLIGHT,     /* ... and the exchange was started (px_hsadmm_overlap_start) */
} px__overlap_state_t;

typedef struct {
  int enabled;          /* px_hsadmm_set_overlap */
  int drain;            /* the next sync exchanges at once (px_hsadmm_set_drain) */
  px__overlap_state_t state;
  px_comm_req_t **reqs; /* [maxreqs] one request per bucket in flight */
  int nreqs, maxreqs;
  uint64_t bytes0;      /* the traffic counters when it started */
} px__hsadmm_overlap_t;

/* Elastic runs (hsadmm_elastic.c): the state at the start of the round, so
 * that a round broken by a lost node is run again over the survivors. */
typedef struct {
  int on;
  int taken;            /* fam & co hold the start of the current round */
  int recenter;         /* nodes were dropped: the node duals re-centred at the next sync */
  float *fam;           /* [6 * total] state memory: u, zi, zi_prev, v, z, z_prev */
  uint8_t *masks;       /* [4 * mtotal] node, union, prev, z */
  double *rho;          /* [2 n] rho1, then rho2 */
  int frozen, iteration;
  /* the membership change the last decision named (epoch 0: none) */
  int cap;              /* member nodes the decision carries at most */
  int next_epoch, nnext;
  int32_t *next;        /* [cap] its nodes (the controller writes here on rank 0) */
} px__hsadmm_elastic_t;

struct px_hsadmm {
  px_comm_t *comm;
  px_group_t *world, *intra, *inter; /* inter NULL off the leaders */
  px_hsadmm_config_t cfg;
  px_hsadmm_param_t *params;
  int n;
  px__hss_t st;         /* the state families, their layout and the round's arithmetic
                           (hsadmm_state.h; the host table unless dev) */
  const float **theta;  /* [n] params[i].theta */
  double *rho1, *rho2;  /* [n] */
  int M, P, N;          /* nodes, ranks per node, ranks */
  /* masks: prunable tensors only, one contiguous byte buffer each, laid out
   * by the sparsity set (px_sparsity_mask_offset gives where) */
  px_sparsity_t *sp;
  size_t mtotal;
  uint8_t *mask_node, *mask_union, *mask_prev;
  uint8_t *mask_z;      /* groups kept in z (the union once frozen) */
  const uint8_t **mask_ptrs; /* [n] into mask_union, NULL for dense tensors */
  px_pack_plan_t *plan;
  int frozen;
  int iteration;
  int keep_ramp;        /* prune.ramp_iterations: the keep falls to cfg.keep over these rounds */
  int project_z;        /* the exchange packed last projects its z (masks not frozen then) */
  double *sums;         /* [n * NSUMS + 4] */
  px_admm_layer_report_t *layers;
  px_hsadmm_round_t round;
  double *decision_buf; /* [2 + 2n] */
  float **src_ptrs;     /* [n] tensors of s, for packing */
  float **dst_ptrs;     /* [n] tensors of z, for unpacking */
  px__hsadmm_quant_t q;
  px__hsadmm_overlap_t ov;
  px__hsadmm_code_t lc;
  px__hsadmm_elastic_t el;
  /* the device-state round (px__hsadmm_create_on with a table): st lives
   * where its table says, theta is read there, and pack/expand and the
   * projection run there too (hsadmm_dev.c); the host keeps the masks, the
   * pack plan's layout and its packed buffer for the exchange */
  int dev;
  px__hss_dev_t dv;     /* dev: the blocks, the state's masks, the packed buffer */
  float *stage;         /* dev: [total] host staging of the intra collectives on
                           state memory where the group cannot read it (UCX) */
};

/* ---- the exchange, for the core and the rooms (hsadmm_exchange.c) ---- */

/* Bytes this rank moved on both tiers so far. */
uint64_t px__hsadmm_bytes(const px_hsadmm_t *h);
/* The leaders' blocking exchange of every packed bucket (exact or
 * quantized); *bytes: what it moved. */
px_status_t px__hsadmm_exchange(px_hsadmm_t *h, uint64_t *bytes);
/* z from the exchanged buckets, projected when project_z; z and the masks
 * to the node; v_i += z_i - z. */
px_status_t px__hsadmm_finish(px_hsadmm_t *h);
/* SUM or AVG of n floats of state memory over g, in place, through the host
 * stage where g cannot read them (nothing moves for a group of one). */
px_status_t px__hsadmm_state_allreduce(px_hsadmm_t *h, px_group_t *g, float *buf, size_t n,
                                       px_comm_op_t op);
/* The plan's layout from the union masks (and its copy on the device state). */
px_status_t px__hsadmm_set_masks(px_hsadmm_t *h);
/* Projects the prunable tensors of a state family (zi or z) onto the
 * structured set, writing their group masks into mask (mask_node or
 * mask_z), or applies the frozen union mask; the same on every rank. */
px_status_t px__hsadmm_project(px_hsadmm_t *h, float *fam, uint8_t *mask);

/* ---- comm.quantize (hsadmm_quant.c) ---- */

/* The exchange of packed bucket b (leaders): buf[nf] is the bucket of the
 * plan's buffer, packed here; the decoded sum lands in q.sum. */
px_status_t px__hsq_bucket(px_hsadmm_t *h, int b, float *buf, size_t nf);
/* s = z_i + error feedback - z (leaders, before the exchange). */
void px__hsq_source(px_hsadmm_t *h);
/* After the exchange: the quantization errors kept, then the mean of
 * z_i + v_i in the plan's buffer (packed layout), sum z_i in s. */
void px__hsq_take_sum(px_hsadmm_t *h);
/* After z is final: sum v_i += sum z_i - M z. */
void px__hsq_track_vsum(px_hsadmm_t *h);
/* The payload one leader sends with the plan's current masks. */
uint64_t px__hsq_payload_bytes(const px_hsadmm_t *h);
/* A resumed run: restarts v (and the tracked sum) when some rank resumed
 * without state. Collective over the world. */
px_status_t px__hsq_resumed(px_hsadmm_t *h, int fresh);
void px__hsq_free(px_hsadmm_t *h);

/* ---- comm.compress (hsadmm_code.c) ---- */

/* The coded exchange of the whole packed buffer (leaders): the plan's
 * buffer holds this leader's payload and ends with the sum over leaders,
 * as the allreduce leaves it. */
px_status_t px__hsc_exchange(px_hsadmm_t *h);
/* A resumed run: every history restarts at zero (on every leader). */
void px__hsc_resumed(px_hsadmm_t *h);
void px__hsc_free(px_hsadmm_t *h);

/* ---- elastic runs (hsadmm_elastic.c) ---- */

/* At the start of a sync (elastic runs): the state into the copy. */
px_status_t px__hse_snapshot(px_hsadmm_t *h);
/* After a membership without some node of the one before: the node duals
 * re-centred over the members (hsadmm_elastic.c). Collective. */
px_status_t px__hse_recenter(px_hsadmm_t *h);
/* The decision's membership part: doubles it adds to the broadcast (0
 * unless elastic), rank 0's decision pointed at the member scratch, the
 * controller's change checked and written into tail, and read back from it
 * on every rank. */
size_t px__hse_tail(const px_hsadmm_t *h);
void px__hse_offer(px_hsadmm_t *h, px_hsadmm_decision_t *d);
px_status_t px__hse_pack(px_hsadmm_t *h, const px_hsadmm_decision_t *d, double *tail);
void px__hse_unpack(px_hsadmm_t *h, const double *tail);
void px__hse_free(px_hsadmm_t *h);

/* ---- comm.overlap (hsadmm_overlap.c) ---- */

/* The exchange deferred by the last sync, if any, lands (waited for, or
 * run now when never started); *bytes: what it moved. */
px_status_t px__hso_land(px_hsadmm_t *h, uint64_t *bytes);
/* Called by the sync after packing: 1 when this round's exchange is
 * deferred to the next local phase (state PACKED), 0 when the sync is to
 * exchange now. */
int px__hso_defer(px_hsadmm_t *h);
/* Waits for requests left by a failed run and frees the room. */
void px__hso_free(px_hsadmm_t *h);

#endif
