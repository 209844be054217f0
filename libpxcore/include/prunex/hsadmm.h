/* H-SADMM consensus (docs/architecture.md, "H-SADMM (one outer iteration)"):
 * the synchronisation phases of one outer iteration, on a rank's list of parameter tensors.
 *
 * The core is generic: it owns the ADMM state (scaled intra dual u, node
 * consensus z_i, scaled inter dual v, global consensus z, and the previous
 * z_i and z for the dual residuals) for any list of f32 parameter tensors, so
 * the same code runs a CNN (strategy.h drives it from the trainer) and the
 * convex problems the tests solve exactly. A round is:
 *
 *   local     the caller runs its local steps on
 *             f(theta) + rho1/2 ||theta - z_i + u||^2, using px_hsadmm_prox
 *             (the SGD hook: grad += rho1 * (theta - z_i + u));
 *   sync      px_hsadmm_sync: intra SUM of theta + u, the exact z_i update,
 *             projection, MAX of the masks and the packed SUM between node
 *             leaders, v update, broadcast of z and the masks, u update,
 *             residuals (one small world allreduce);
 *   decide    px_hsadmm_decide: rank 0 asks the controller (the coordinator,
 *             or an in-process px_admm_decide) and broadcasts its decision;
 *             every rank applies it (penalties with rescaled duals, freeze).
 *
 * Flat mode is the paper's ablation: one consensus group (all ranks), dense
 * buffers, projection after aggregation; there is no z_i or v.
 *
 * Every decision all ranks share is made identically: projections are
 * deterministic (prune.h), masks are OR-ed by a MAX allreduce, and the
 * controller's decision is made by rank 0 and broadcast. */
#ifndef PRUNEX_HSADMM_H
#define PRUNEX_HSADMM_H

#include <stddef.h>
#include <stdint.h>

#include "prunex/admm.h"
#include "prunex/comm.h"
#include "prunex/prune.h"
#include "prunex/px.h"

#ifdef __cplusplus
extern "C" {
#endif

/* One parameter tensor of this rank (host f32, borrowed). A prunable tensor
 * is a conv weight projected onto the structured set, or a follower of one
 * coupled group. */
typedef struct {
  const char *name;
  float *theta;
  size_t numel;
  int prunable;
  px_conv_shape_t shape;  /* prunable only */
  /* prunable only: when has_consumer, parameter `consumer` (prunable, c_in ==
   * this c_out) is the only reader of this conv's output channels, and its
   * channel groups are projected together with this conv's filters
   * (px_prune_project_coupled): a pruned channel takes its producing filter
   * with it. A parameter is the consumer of at most one producer. */
  int has_consumer;
  int32_t consumer;
  /* prunable only: 1 for a follower (px_sparsity_param_t): a depthwise conv
   * or batch norm ([c, 1, 1, 1]) between a coupled producer and its consumer
   * `consumer` (has_consumer set), masked and packed with that group */
  int follower;
} px_hsadmm_param_t;

typedef struct {
  int flat;               /* 1: one consensus level over all ranks */
  double rho1, rho2;      /* initial penalties (every tensor) */
  double lambda;          /* weight decay of the global problem (z update) */
  px_prune_keep_t keep;   /* structured set of prunable tensors */
  size_t bucket_bytes;    /* inter-node buckets; 0: 32 MiB */
} px_hsadmm_config_t;

/* Figures of one round, the same on every rank after px_hsadmm_sync. */
typedef struct {
  int iteration;
  int nlayers;
  px_admm_layer_report_t *layers; /* [nlayers], owned by the handle */
  int64_t mask_drift;     /* group bits changed in the union mask since the last round */
  int64_t mask_groups;    /* group bits of the union mask in all (drift is out of these) */
  double density;         /* kept fraction of the prunable elements of z */
  uint64_t bytes_intra;   /* sent + received by all ranks in this sync, per tier */
  uint64_t bytes_inter;
  uint64_t bytes_inter_dense; /* what the inter phase would have moved with dense buffers */
  uint64_t packed_bytes;  /* bytes of the packed buffer reduced between leaders (the
                             quantized payload of one leader when quantize_bits is set) */
  uint64_t dense_bytes;   /* bytes of all parameters */
  double intra_s, projection_s, inter_s, broadcast_s; /* phase times on this rank */
  int frozen;
} px_hsadmm_round_t;

/* px_hsadmm_decision_t.stop: go on, end the run, or end it after a
 * checkpoint that the run resumes from when started again (preemption,
 * the same state as any periodic checkpoint, not "stopped"). */
enum { PX_HSADMM_GO = 0, PX_HSADMM_STOP = 1, PX_HSADMM_SUSPEND = 2 };

/* The decision rank 0 obtains from its controller. */
typedef struct {
  double *rho1, *rho2;    /* [nlayers] next penalties */
  int freeze;
  int stop;               /* PX_HSADMM_GO, _STOP or _SUSPEND */
  char reason[64];
} px_hsadmm_decision_t;

/* Rank 0's controller: from the round's figures, fill the decision (rho
 * arrays are preallocated with the current penalties). */
typedef px_status_t (*px_hsadmm_control_fn)(void *ctx, const px_hsadmm_round_t *round,
                                            px_hsadmm_decision_t *decision);

typedef struct px_hsadmm px_hsadmm_t;

/* Creates the state on every rank of comm (collective only in the sense
 * that all ranks must use the same parameter list and config). z, z_i start
 * at the mean of the ranks' initial theta (one world allreduce), u and v at
 * zero. params are borrowed for the handle's life. Caller owns *out. */
PX_API px_status_t px_hsadmm_create(px_comm_t *comm, const px_hsadmm_param_t *params, int nparams,
                                    const px_hsadmm_config_t *cfg, px_hsadmm_t **out);
PX_API void px_hsadmm_destroy(px_hsadmm_t *h);

/* comm.quantize: with bits 8 or 4, each leader sends its packed z_i (its
 * change from z, with error feedback; the leaders track the sum of the v_i
 * themselves, so v_i is not sent) as block-scaled integers with stochastic rounding and error feedback
 * (quantize.h) in an allgather of bytes over the leaders, instead of the
 * f32 allreduce, and every leader decodes and sums the payloads in node
 * order, so z stays bit-identical on every rank; intra-node exchanges and
 * masks stay exact. seed keys the rounding (with the iteration, the rank and
 * the bucket), so a rerun sends the same bytes. bits 0 is the exact
 * exchange. Call on every rank before the first px_hsadmm_sync (it
 * allocates the buffers then; syncs allocate nothing). Fails with
 * PX_ERR_INVALID for other widths or in flat mode, PX_ERR_STATE after a
 * sync, PX_ERR_NOMEM. */
PX_API px_status_t px_hsadmm_set_quantize(px_hsadmm_t *h, int bits, uint64_t seed);

/* comm.compress lossless (strategy hsadmm, exact exchange, host state):
 * each leader codes its packed z_i + v_i against its own payload of the
 * round before, as every leader holds it (lossless.h), and the leaders
 * allgather the payloads instead of the f32 allreduce; every leader decodes
 * each payload against its copy of that leader's last one and sums them in
 * node order. The same floats arrive, so with two nodes z is bit for bit
 * what the plain exchange gives (the sum of two is the same in any order);
 * with more, the order of the sum may differ from the allreduce's, the same
 * on every leader. Each leader keeps every leader's last payload in
 * parameter layout (M * total floats); they restart at zero on a resume,
 * on every leader alike. A payload that does not decode to its sender's
 * floats (a checksum in it) fails the round with PX_ERR_FORMAT naming the
 * sending node. Call on every rank before the first px_hsadmm_sync (it
 * allocates then; syncs allocate nothing). Fails with PX_ERR_INVALID in
 * flat, quantized or overlapped mode or with the device state,
 * PX_ERR_STATE after a sync, PX_ERR_NOMEM. */
PX_API px_status_t px_hsadmm_set_compress(px_hsadmm_t *h, int lossless);

/* comm.overlap (strategy hsadmm, exact exchange only): the leaders' exchange
 * of a round is packed by px_hsadmm_sync but sent by px_hsadmm_overlap_start,
 * which the caller calls on every rank when the next local phase begins
 * (after the round's last collective); it then runs on the communicator's
 * progress thread while the workers train, and the next px_hsadmm_sync
 * takes its z first. This changes the math in one place: the next local
 * phase starts from the z of the round before moved by the node's last step
 * (px_hsadmm_restart_point; the proximal targets
 * z_i and u are exact); the round's inter residuals are reported with that
 * z too. px_hsadmm_set_drain(h, 1) before a sync makes that round exchange
 * at once (a round that is evaluated, checkpointed or last: z is read);
 * px_hsadmm_decide drains itself before a stop, a freeze or a change of rho;
 * px_hsadmm_overlap_drain takes a pending z at once (collective over the
 * node). Set on every rank before the first sync. Fails with PX_ERR_INVALID
 * in flat or quantized mode, PX_ERR_STATE after a sync, PX_ERR_NOMEM. */
PX_API px_status_t px_hsadmm_set_overlap(px_hsadmm_t *h, int on);
PX_API void px_hsadmm_set_drain(px_hsadmm_t *h, int drain);
PX_API px_status_t px_hsadmm_overlap_start(px_hsadmm_t *h);
PX_API px_status_t px_hsadmm_overlap_drain(px_hsadmm_t *h);
/* Where parameter i's next local phase starts (numel floats into dst): z;
 * while an exchange is pending, z^(k-1) + z_i^k - z_i^(k-1), the last z
 * moved by this node's latest step (the same on every rank of a node). */
PX_API void px_hsadmm_restart_point(const px_hsadmm_t *h, int i, float *dst);
/* 1 while a round's exchange is packed or in flight and its z not taken. */
PX_API int px_hsadmm_pending(const px_hsadmm_t *h);

/* The proximal target of parameter i for the local phase: z_i (z in flat
 * mode), u and the current rho1. Pointers stay valid for the handle's life. */
PX_API void px_hsadmm_prox(const px_hsadmm_t *h, int i, const float **z, const float **u,
                           float *rho1);

/* Phases 2-5 of the round. Fails with the data plane's error (every rank
 * fails within the communicator's timeout when a peer dies). */
PX_API px_status_t px_hsadmm_sync(px_hsadmm_t *h, px_hsadmm_round_t **round);

/* Phase 6: rank 0 calls control (which may be NULL on other ranks), the
 * decision is broadcast and applied on every rank. *stop tells whether to end. */
PX_API px_status_t px_hsadmm_decide(px_hsadmm_t *h, px_hsadmm_control_fn control, void *ctx,
                                    int *stop);

/* The global consensus z of parameter i (what the job's model is), the
 * union group mask of prunable parameter i (NULL otherwise), and whether the
 * masks are frozen. */
PX_API const float *px_hsadmm_z(const px_hsadmm_t *h, int i);
PX_API const uint8_t *px_hsadmm_mask(const px_hsadmm_t *h, int i);
PX_API int px_hsadmm_frozen(const px_hsadmm_t *h);
/* Kept fraction of parameter i's elements in z's masks (the union once
 * frozen); 1 for a parameter that is not prunable. */
PX_API double px_hsadmm_density(const px_hsadmm_t *h, int i);
/* The sparsity set of the parameters (borrowed): the layout and offset of
 * every mask that px_hsadmm_mask returns. */
PX_API const px_sparsity_t *px_hsadmm_sparsity(const px_hsadmm_t *h);
PX_API double px_hsadmm_rho1(const px_hsadmm_t *h, int i);
/* The scaled duals of parameter i: u (this rank) and v (this node). */
PX_API void px_hsadmm_duals(const px_hsadmm_t *h, int i, const float **u, const float **v);
PX_API double px_hsadmm_rho2(const px_hsadmm_t *h, int i);

/* An in-process controller running px_admm_decide with the given policy
 * (ctx is a px_hsadmm_local_ctl_t). */
typedef struct {
  px_admm_policy_t policy;
  px_admm_policy_state_t state;
  int num_nodes, workers_per_node;
  int max_layers;
  px_admm_layer_decision_t *scratch; /* [max_layers], caller-allocated */
} px_hsadmm_local_ctl_t;

PX_API px_status_t px_hsadmm_local_control(void *ctx, const px_hsadmm_round_t *round,
                                           px_hsadmm_decision_t *decision);

#ifdef __cplusplus
}
#endif
#endif
