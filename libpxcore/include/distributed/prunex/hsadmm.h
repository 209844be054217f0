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
  /* Elastic runs (px_hsadmm_set_elastic): a membership change at this
   * round boundary (the coordinator shrinking the job). epoch > 0 names the
   * new membership epoch and members[0..nmembers) its nodes, which every
   * rank then gets with the decision; preset to 0 (no change). members has
   * room for members_cap nodes (the handle's node count; 0 and NULL when
   * the handle is not elastic, where a change is refused). */
  int32_t epoch;
  int32_t nmembers;
  int32_t members_cap;
  int32_t *members;
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
/* Kept fraction of parameter i's elements in z's masks (the union once
 * frozen); 1 for a parameter that is not prunable. */
PX_API double px_hsadmm_density(const px_hsadmm_t *h, int i);
/* The sparsity set of the parameters (borrowed): the layout and offset of
 * every mask that px_hsadmm_mask returns. */
PX_API const px_sparsity_t *px_hsadmm_sparsity(const px_hsadmm_t *h);

/* An in-process controller running px_admm_decide with the given policy
 * (ctx is a px_hsadmm_local_ctl_t). */
typedef struct {
  px_admm_policy_t policy;
  px_admm_policy_state_t state;
  int num_nodes, workers_per_node;
  int max_layers;
  px_admm_layer_decision_t *scratch; /* [max_layers], caller-allocated */
} px_hsadmm_local_ctl_t;

#ifdef __cplusplus
}
#endif
#endif
