/* Distributed training strategies (docs/architecture.md, "What it is" and
 * "H-SADMM (one outer iteration)"): one worker process per rank runs
 * px_strategy_run over its trainer (nn.h) and its communicator (comm.h).
 *
 *   hsadmm       local steps with the ADMM proximal term, then the H-SADMM
 *                round of hsadmm.h (intra SUM, projection, MAX of masks and
 *                packed SUM between node leaders, broadcast), BN running
 *                statistics averaged, and rank 0's controller decision.
 *                Once the masks freeze, the local models train inside them
 *                (masked weights and gradients stay zero), the masked
 *                retraining of ADMM pruning. The consensus model z is
 *                evaluated and returned with BN statistics re-estimated for
 *                its own weights (calibrate_batches forward passes, averaged
 *                over ranks): the local models' statistics do not fit a
 *                model whose pruned channels they never saw;
 *   hsadmm-flat  the same with one consensus group over all ranks;
 *   ddp          dense synchronous SGD: the gradients are averaged over all
 *                ranks every step, in buckets of consecutive parameters
 *                from the last layer backwards, each bucket's allreduce
 *                started during the backward pass as soon as its gradients
 *                are ready (PyTorch DDP's overlap; ddp_no_overlap turns it
 *                off, with the same result);
 *   topk         each rank sends the top `topk_ratio` gradient entries of
 *                every tensor by magnitude (values + indices, allgather) and
 *                keeps the rest as error feedback for later steps.
 *
 * An "iteration" is one H-SADMM round; for ddp and topk it is a block of
 * `local_steps` steps (an epoch when 0), so every strategy reports the same
 * record through the controller. */
#ifndef PRUNEX_STRATEGY_H
#define PRUNEX_STRATEGY_H

#include <stddef.h>
#include <stdint.h>

#include "prunex/comm.h"
#include "prunex/hsadmm.h"
#include "prunex/nn.h"
#include "prunex/px.h"
#include "prunex/strategy_table.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Every rank's observer: called on every rank after each iteration, once the
 * control decision is applied, with the iteration's figures (the job's,
 * identical on every rank, plus this rank's own traffic and phase times).
 * An error stops the run on this rank (the others then fail at their next
 * collective). */
typedef px_status_t (*px_strategy_observe_fn)(void *ctx, const px_iteration_t *it);

/* Elastic runs: the member nodes of membership epoch `epoch` after this
 * rank's communicator lost a peer of node lost_node (gone: its process is
 * known dead, else it was only silent) in a round, into nodes[0..*n) (cap:
 * room; the job's node ids, as px_comm_create's node_of_rank gives them).
 * Called on every surviving rank; every member must be given the same list
 * (e.g. the coordinator's for that epoch). A list without this rank's node
 * makes the rank leave (px_strategy_run fails with PX_ERR_STATE). */
typedef px_status_t (*px_strategy_members_fn)(void *ctx, int epoch, int lost_node, int gone,
                                              int *nodes, int cap, int *n);

/* Elastic runs (hsadmm and hsadmm-flat with the exact exchange: not with
 * comm.overlap, quantize or compress). The communicator must have been
 * created with px_comm_opts_t.lost_ms (the bound for a lost peer, a few
 * times a normal round). A round that fails because a node was lost
 * (PX_ERR_PEER) is run again over the nodes left: what the broken round
 * loaded is undone (the model back to the local phase's result, the BN
 * statistics and the data position as they were, H-SADMM's state back to
 * the round's start), the members are agreed, the communicator rebuilt
 * over them (px_comm_rebuild) and the round run again; the training and
 * test shards are spread over the new world (px_trainer_reshard). A
 * controller's decision may shrink the job the same way at a round
 * boundary (px_hsadmm_decision_t.epoch and members), with nothing undone.
 * A decision may also name nodes the communicator does not have (a node
 * that comes back, a spare, up to max_nodes): the kept ranks rebuild over
 * them (px_comm_rebuild), the joining ranks meet them in that epoch
 * (px_comm_join, then px_strategy_run with join_from), and a kept rank
 * sends them the state; nothing changes on the kept ranks.
 * The rebuilt communicator replaces the caller's (which it destroys):
 * px_strategy_result_t.comm. */
typedef struct {
  int32_t on;                /* 1: elastic */
  int32_t min_nodes;         /* fewer nodes left: the run fails as without elastic, naming
                                the lost node (the job restarts from its checkpoint); 0: 1 */
  int32_t wait_ms;           /* px_comm_survivors' wait for the others' answers (members
                                NULL); 0: twice the communicator's lost_ms */
  px_kv_t *kv;               /* the rendezvous store the communicator was created with:
                                the rebuilt one exchanges its addresses there (borrowed) */
  px_strategy_members_fn members; /* NULL: the survivors agree among themselves through kv
                                (px_comm_survivors) */
  void *members_ctx;
  int32_t max_nodes;         /* the most member nodes a decision may name (nodes join up to
                                it); 0: the communicator's node count. The same on every rank */
  int32_t join_from;         /* > 0: this rank joins a running job before iteration join_from
                                (-1: before the iteration the kept ranks are at, as they say):
                                comm is px_comm_join's (epoch and members of the decision that
                                let it in), and a kept rank sends it the state (z, masks,
                                penalties, round, BN statistics, data position) */
  int32_t epoch_offset;      /* added to the communicator's epoch in the run's log lines, so
                                they number epochs as the caller does (pxworker: 1, the
                                coordinator's membership epochs); 0: the communicator's */
} px_strategy_elastic_t;

typedef struct {
  px_strategy_kind_t kind;
  int32_t iterations;       /* outer iterations to run at most (the controller may stop sooner) */
  int32_t local_steps;      /* optimiser steps per iteration; 0: one epoch */
  double rho1, rho2;        /* initial penalties (hsadmm) */
  px_prune_keep_t keep;     /* structured set of conv weights (hsadmm) */
  double mac_keep;          /* hsadmm: > 0: keep.channel_keep is the largest whose model keeps
                               at most this fraction of the dense MACs (px_strategy_mac_keep),
                               and keep.uncoupled_keep 0 means 1 */
  int32_t keep_ramp;        /* hsadmm: > 0: the keep falls from 1 to `keep` over these outer
                               iterations, the masks freezing no earlier (prune.ramp_iterations) */
  const char *const *skip_layers; /* parameter names never pruned (borrowed) */
  int32_t nskip;
  double topk_ratio;        /* topk: fraction of each tensor's entries sent (0, 1] */
  size_t bucket_bytes;      /* 0: 32 MiB */
  int32_t quantize_bits;    /* hsadmm: 0 (exact), 8 or 4: the leaders' exchange quantized
                               (px_hsadmm_config_t.quantize_bits) */
  uint64_t seed;            /* keys the quantizer's stochastic rounding */
  int32_t eval_every;       /* evaluate the consensus model every k iterations (0: last only) */
  int32_t keep_local;       /* hsadmm: 1 = each local phase starts from the previous local
                                model; 0 (default) = from the global consensus z (the local
                                subproblem is the same; a few SGD steps approximate its
                                solution far better from a shared point, and neither ranks
                                nor nodes can drift apart between the rounds) */
  int32_t calibrate_batches; /* hsadmm: training batches that re-estimate the BN statistics
                                of z before it is evaluated or returned (0: 20; < 0: none) */
  int32_t stage_host;       /* 1: run the staged path of device models (host mirrors and
                               device buffers, see strategy.c) on a CPU model too; it gives
                               the same results, and is how tests check that path */
  int32_t ddp_no_overlap;   /* ddp: 1 = reduce the gradient buckets after the backward pass
                               instead of during it (the same bits; for comparisons) */
  int32_t overlap;          /* hsadmm (exact exchange, host model): 1 = the leaders' exchange
                               of a round runs during the next local phase, which starts from
                               the z of the round before plus the node's last step
                               (px_hsadmm_restart_point); 0: off */
  int32_t compress;         /* hsadmm (exact exchange, host state): 1 = the leaders' payloads
                               delta-coded without loss (px_hsadmm_set_compress); 0: off */
  px_strategy_observe_fn observe; /* NULL: none */
  void *observe_ctx;
  /* Checkpoints: with checkpoint_every > 0 every rank writes its
   * whole state under checkpoint_dir (shared by the ranks of a node) after
   * every checkpoint_every-th iteration and the last one, keeping the
   * newest checkpoint_keep (0: 2), and a run first resumes from the newest
   * checkpoint every rank can read there (see strategy/px_resume.h). */
  const char *checkpoint_dir;
  int32_t checkpoint_every;
  int32_t checkpoint_keep;
  /* > 0: the run fails (PX_ERR_IO, naming the rank and its error) once the
   * newest checkpoint every rank holds is more than this many iterations
   * behind, instead of running on unprotected. */
  int32_t checkpoint_max_unprotected;
  /* hsadmm: 1 = calibrate and evaluate the consensus as the dense-shaped
   * model through the training engine (the older,
   * slower way, kept for comparisons); 0 (default) = through its compact model on the
   * inference engine (CPU models; a model on a GPU always takes the dense
   * path). The predictions are the same up to rounding. */
  int32_t eval_dense;
  /* hsadmm: where the round's state (z, z_i, u, v, the packed buffer) lives.
   * 0 (default): on the model's GPU when the model is on one and the run
   * allows it (no comm.quantize, comm.overlap, checkpoints or N:M masks:
   * those keep the host state), so that only packed buffers cross to the
   * host; else the host. 1: the host (the staged path of device models).
   * 2: the device-state code path on a CPU model, with host buffers: the
   * same results as the host state (how tests check that path). */
  int32_t hsadmm_state;
  /* hsadmm (prune.compact_training): 1 = once the masks are frozen, each
   * local phase trains the compact model (pruned channels removed) and
   * writes it back into the dense model; CPU host models only, others train
   * dense (logged). Channels the compact model drops stop moving. 0: off. */
  int32_t compact_local;
  /* hsadmm: the proximal pull of the local steps once the masks are frozen
   * (the final phase, which trains the pruned network for accuracy; the
   * round and its exchange are unchanged): 0 kept, 1 decayed linearly with
   * the run (rho times 1 - it / (iterations - 1)), 2 released (rho 0). */
  int32_t final_prox;
  /* hsadmm: where the optimizer's weight decay acts: 0 each local SGD step
   * (as DDP's; the z update has no regulariser), 1 the z update's
   * lambda/2 ||z||^2 (the paper's form; the local steps have none). */
  int32_t decay_consensus;
  px_strategy_elastic_t elastic; /* elastic runs (above); zeroed: off */
} px_strategy_config_t;

/* Rank 0's controller: reports the iteration (to the coordinator, say) and
 * fills the decision: penalties (hsadmm; arrays of nlayers preset to the
 * current ones), freeze, stop. */
typedef px_status_t (*px_strategy_control_fn)(void *ctx, const px_iteration_t *it,
                                              px_hsadmm_decision_t *d);

typedef struct {
  int32_t iterations;
  double test_accuracy, test_loss;
  double density;
  uint64_t bytes_intra, bytes_inter, bytes_inter_dense; /* whole run, all ranks */
  double seconds;
  char stop_reason[64];         /* "iterations", "controller", "suspended" (to resume) */
  int32_t resumed_from;         /* iteration the run resumed after; -1: started afresh */
  int32_t checkpoints;          /* checkpoints written */
  double checkpoint_seconds;    /* time spent writing them (this rank) */
  uint64_t checkpoint_bytes;    /* bytes of the last one (this rank) */
  int32_t checkpoint_complete;  /* newest iteration every rank's checkpoint holds; -1: none */
  char checkpoint_problem[256]; /* "" or why later checkpoints are unusable
                                   ("iteration N: rank R: ERROR", every rank) */
  int32_t compact_builds;       /* times the compact evaluation model was built (0: the
                                   dense evaluation ran) */
  int64_t compact_train_numel;  /* parameters of the compact model the local phases trained
                                   after the freeze (compact_local; 0: dense throughout) */
  /* Elastic runs. comm: the communicator the run ended on, set on success
   * and on failure: the caller's when the membership never changed, else
   * the rebuilt one (the caller's was destroyed; the caller owns this one
   * and destroys it), NULL when a rebuild failed or this rank left. */
  px_comm_t *comm;
  int32_t epoch;                /* membership epoch at the end (0: unchanged) */
  int32_t nodes;                /* member nodes at the end */
  int32_t nlost;                /* nodes dropped after a failure, ids in lost[] (the first 8) */
  int32_t lost[8];
  int32_t lost_at[8];           /* the iteration whose round each was lost in */
  int32_t shrinks;              /* membership changes by decision that dropped nodes */
  int32_t joins;                /* ... that let nodes join (a joining rank: 1, its own) */
  int32_t left;                 /* 1: a decision left this rank's node out: it stopped there
                                   (stop_reason "left"; its model is the last consensus) */
} px_strategy_result_t;

/* Fills out[0..px_model_num_params(m)) with H-SADMM's view of the model's
 * parameters: every conv weight not named in skip_layers is prunable ("conv1"
 * skips "conv1.weight"), and convs whose output channels only the next conv
 * reads are coupled to it (px_model_channel_consumer). theta points into the
 * model's parameters (host memory on a CPU model; px_strategy_run points it
 * at a host mirror for a model on a GPU). */
PX_API void px_strategy_hsadmm_params(px_model_t *m, const char *const *skip_layers, int nskip,
                                      px_hsadmm_param_t *out);

/* Multiply-accumulates per image (px_model_macs_kept) of m with every
 * coupled group of hp (px_strategy_hsadmm_params: a producer's filters, its
 * consumer's input channels and the depthwise convs between) at
 * px_prune_keep_count(keep, C) of its C channels and every other channel
 * kept: the compact model's count when the masks are frozen at that keep,
 * an upper bound where filter_keep or uncoupled convs' channel keeps leave
 * zeros that the compact model drops. 0 when the graph cannot be read. */
PX_API uint64_t px_strategy_coupled_macs(const px_model_t *m, const px_hsadmm_param_t *hp,
                                         double keep);

/* prune.mac_keep: *channel_keep = the largest keep j / C (of some coupled
 * group's C channels) whose px_strategy_coupled_macs is at most mac_keep
 * (in (0, 1]) times the dense model's, 1 when the whole model is within
 * it; *macs (may be NULL) gets that count. Depends on m's graph and hp
 * alone, so every rank chooses the same. PX_ERR_INVALID, naming
 * prune.mac_keep, when one channel per group is already over the budget. */
PX_API px_status_t px_strategy_mac_keep(const px_model_t *m, const px_hsadmm_param_t *hp,
                                        double mac_keep, double *channel_keep, uint64_t *macs);

/* Runs the strategy to the end on every rank of comm. Rank 0 calls control
 * after every iteration (other ranks may pass NULL, except in an elastic
 * run, where any rank may become rank 0) and its decision is
 * broadcast. At the end every rank holds the final model in its trainer's
 * model (for hsadmm: the global consensus z and the averaged BN statistics);
 * the result is the same on every rank. Fails with the data plane's error on
 * every rank when a peer dies, unless the run is elastic (cfg.elastic): then
 * see px_strategy_elastic_t, and result->comm for the communicator the
 * caller destroys. */
PX_API px_status_t px_strategy_run(px_trainer_t *trainer, px_comm_t *comm,
                                   const px_strategy_config_t *cfg, px_strategy_control_fn control,
                                   void *ctx, px_strategy_result_t *result);

#ifdef __cplusplus
}
#endif
#endif
