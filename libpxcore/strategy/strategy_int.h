/* Internal interface of strategy/: the operations every strategy implements
 * and the run state they share (like NCCL's transports: one table of
 * function pointers per strategy, and a loop that knows none of them).
 *
 * px_strategy_run (strategy.c) is the loop: set-up of what every strategy
 * needs (names, host mirrors of a device model), then per iteration
 *   before_local -> the trainer's local steps (the strategy's gradient hook
 *   runs inside) -> synchronise -> BN statistics and evaluation (of the
 *   consensus model when the strategy has one) -> the iteration's figures
 *   -> decide -> observe,
 * and at the end the final model. A strategy lives in its own file
 * (hsadmm_ops.c: hsadmm and hsadmm-flat; ddp.c; topk.c) and in the table of
 * strategy.c; its state is private (void *priv) beside the common run.
 *
 * Checkpoints (strategy/px_resume.h): with recovery.checkpoint_every
 * set, the loop lists its own scalars (iteration, data position, byte
 * counters, stop flag, last test figures) and asks the strategy for the
 * rest (resume_items: the model and momentum with the strategy's scope,
 * and its private state, e.g. H-SADMM's z, duals and masks); it resumes
 * from the newest checkpoint every rank holds before the first iteration
 * (resumed: the strategy restarts what was not restored) and saves one
 * after observe every checkpoint_every iterations and at the end.
 *
 * The ops are meant to grow: a per-bucket "gradient ready" hook (DDP
 * overlapping its allreduce with the backward pass) is a further member of
 * px__strategy_ops_t that a strategy may leave NULL; the loop calls what
 * is set. */
#ifndef PX_STRATEGY_INT_H
#define PX_STRATEGY_INT_H

#include <stddef.h>
#include <stdint.h>

#include "prunex/strategy.h"
#include "strategy/px_resume.h"

/* The loop's own checkpoint items: each struct is one tensor of the file
 * (I64 and F64), its fields in this order. */
typedef struct {
  int64_t iteration;        /* the last iteration done */
  int64_t position[3];      /* the trainer's data position (px_trainer_position) */
  int64_t bytes_intra;      /* the run's byte counters so far */
  int64_t bytes_inter;
  int64_t bytes_inter_dense;
  int64_t stopped;          /* the controller had stopped the run */
} px__run_scalars_t;
_Static_assert(sizeof(px__run_scalars_t) == 8 * sizeof(int64_t),
               "run.scalars is eight int64 in the checkpoint file");

typedef struct {
  double test_loss;         /* the last evaluation's (-1: none yet) */
  double test_accuracy;
} px__run_figures_t;

/* What every strategy shares for one run (the common part; each strategy
 * keeps its own state behind priv). */
typedef struct {
  px_trainer_t *t;
  px_model_t *m;
  px_sgd_t *sgd;
  px_comm_t *comm;
  px_group_t *world;
  const px_strategy_config_t *cfg;
  int np;                   /* parameter tensors */
  size_t numel;             /* parameter elements in all */
  size_t max_numel;         /* of the largest tensor */
  const char **names;       /* [np] */
  int64_t steps;            /* local steps per iteration */
  double *decision;         /* [1 + 2 np] broadcast buffer of the baselines' decision */
  /* staged runs (device models; see strategy.c) */
  int staged;
  int cuda;                 /* the model is on a CUDA device */
  int direct;               /* world collectives take the device buffers (NCCL) */
  float *h_theta;           /* [numel] host mirror of the parameters */
  float *h_buf;             /* [BN statistics] host mirror */
  /* checkpoints (NULL rs: none) */
  px__resume_t *rs;
  px__run_scalars_t ck;     /* the loop's own items, "run.scalars" */
  px__run_figures_t ckf;    /* and "run.figures" */
  char ck_problem[256];     /* px__resume_complete's, for px_iteration_t */
  /* the iteration being reported */
  px_iteration_t it;
  px_strategy_control_fn control;
  void *ctx;
  /* compact evaluation of the consensus (compact_eval.c) */
  int compact_eval;         /* 1: calibration and evaluation go through the compact model */
  struct px__ceval *ceval;  /* its state, created by the first evaluation */
  /* compact training after the freeze (compact_train.c; cfg.compact_local) */
  int compact_local;        /* 1: local phases after the freeze train the compact model */
  struct px__ctrain *ctrain; /* its state, built by the first frozen local phase */
  /* the iteration's traffic counters at its start (of r->comm) */
  uint64_t bytes0[2];
  px_strategy_result_t *res;
  /* elastic runs (elastic.c; cfg.elastic) */
  int elastic;
  float *el_theta;          /* [numel] the parameters as the local phase left them */
  float *el_buf;            /* [BN statistics] the same */
  int64_t el_pos[3];        /* the trainer's data position then */
  int *el_nodes;            /* [el_cap] a member list */
  int el_cap;               /* the most member nodes (cfg.elastic.max_nodes, the job's) */
  int joining;              /* this rank joins a running job (cfg.elastic.join_from) */
  int left;                 /* a decision left this rank's node out */
} px__strategy_run_t;

typedef struct {
  px_strategy_kind_t kind;  /* its entry of the table of strategies (policy/strategy_info.c) */
  /* Allocates the private state, installs the trainer's hooks and brings
   * every rank to the same starting model. On failure *priv may be set and
   * is destroyed. */
  px_status_t (*create)(px__strategy_run_t *r, void **priv);
  /* Before the local steps of iteration it (NULL: nothing). */
  px_status_t (*before_local)(px__strategy_run_t *r, void *priv, int it);
  /* After them, inside the local phase (NULL: nothing). */
  px_status_t (*after_local)(px__strategy_run_t *r, void *priv);
  /* After the local steps: the synchronisation; fills r->it's phase times,
   * density, masks and layer reports (NULL: density 1, nothing else). */
  px_status_t (*synchronise)(px__strategy_run_t *r, void *priv);
  /* The consensus model into the trainer's model (backup: keep the local
   * model for restore_local), and back. NULL: the model is the consensus
   * (its BN statistics are then averaged, not re-estimated). */
  px_status_t (*load_consensus)(px__strategy_run_t *r, void *priv, int backup);
  px_status_t (*restore_local)(px__strategy_run_t *r, void *priv);
  /* Inter-node bytes of this iteration with dense exchanges (r->it holds
   * the measured figures). */
  uint64_t (*dense_inter)(const px__strategy_run_t *r, void *priv);
  /* Control: rank 0 reports r->it and decides; everyone applies. */
  px_status_t (*decide)(px__strategy_run_t *r, void *priv, int *stop);
  /* Lists the state a checkpoint holds beyond the loop's own: the model
   * and momentum (px__strategy_resume_model, with the scope the strategy
   * gives them) and the private state. */
  px_status_t (*resume_items)(px__strategy_run_t *r, void *priv, px__resume_t *rs);
  /* After a checkpoint was loaded: restarts the NODE / RANK state that was
   * not restored (node_fresh, rank_fresh) from the global state (NULL:
   * nothing to do). */
  px_status_t (*resumed)(px__strategy_run_t *r, void *priv, int node_fresh, int rank_fresh);
  /* Frees priv and removes the hooks (priv may be NULL). */
  void (*destroy)(px__strategy_run_t *r, void *priv);
  /* Elastic runs (NULL: the strategy cannot run elastic). After a rebuild:
   * the strategy's state runs on r->comm from here on; rollback: back to
   * the start of the round that failed, which runs again. */
  px_status_t (*rebind)(px__strategy_run_t *r, void *priv, int rollback);
  /* The membership change the last decision named: its epoch (0: none)
   * and nodes[*n]. */
  int (*next_members)(px__strategy_run_t *r, void *priv, const int32_t **nodes, int *n);
  /* Nodes joined at a boundary (collective over r->comm's world): rank
   * root (a kept rank) sends the strategy's state; a joining rank (r->joining)
   * takes it and loads its model from it; the kept ranks keep theirs. */
  px_status_t (*join)(px__strategy_run_t *r, void *priv, int root);
} px__strategy_ops_t;

extern const px__strategy_ops_t px__strategy_hsadmm_ops;
extern const px__strategy_ops_t px__strategy_hsadmm_flat_ops;
extern const px__strategy_ops_t px__strategy_ddp_ops;
extern const px__strategy_ops_t px__strategy_topk_ops;
/* The operations of kind k, NULL when the engine has none (every entry of
 * the table of strategies has some: test_strategy checks it). */
const px__strategy_ops_t *px__strategy_ops(px_strategy_kind_t k);

/* ---- compact evaluation (compact_eval.c) ---- */

typedef struct px__ceval px__ceval_t;
/* Whether a run evaluates its consensus (has_consensus: the strategy has
 * one) through the compact model: CPU models, unless eval_dense. */
int px__ceval_wanted(const px__strategy_run_t *r, int has_consensus);
/* Re-estimates the BN statistics of the consensus now in r->m from n
 * training batches through its compact model (the trainer's data stream
 * advances as px_trainer_calibrate_bn's), and writes those of the kept
 * channels into r->m. Builds the compact model when its channels changed. */
px_status_t px__ceval_calibrate(px__strategy_run_t *r, int64_t n);
/* This rank's shard of the test set through the compact model of r->m. */
px_status_t px__ceval_evaluate(px__strategy_run_t *r, px_eval_stats_t *e);
/* Times the compact model was built (0 for NULL). */
int64_t px__ceval_builds(const px__ceval_t *ce);
void px__ceval_destroy(px__ceval_t *ce);

/* ---- compact training after the freeze (compact_train.c) ---- */

typedef struct px__ctrain px__ctrain_t;
/* Whether a run with cfg.compact_local trains its local phases compact
 * once frozen (CPU host models without comm.overlap; device_state: the
 * strategy runs the device-state round); logs which form trains. */
int px__ctrain_wanted(const px__strategy_run_t *r, int device_state);
/* The channel multiple every group of the compact model keeps: 1 (exact widths,
 * channels-last layers), or 16 with PX_COMPACT_CHANNELS=16 (blocked layouts). */
int px__ctrain_round(void);
/* Builds the compact model of r->m, whose weights are inside the frozen
 * masks, with its maps, mask, optimiser and proximal buffers; keep [numel]
 * is 0 where the dense masks are. Caller owns *out (px__ctrain_destroy). */
px_status_t px__ctrain_build(px__strategy_run_t *r, const float *keep, px__ctrain_t **out);
void px__ctrain_destroy(px__ctrain_t *ct);
/* The proximal targets of dense parameter i (u may be NULL). */
typedef void (*px__ctrain_prox_fn)(void *ctx, int i, const float **z, const float **u,
                                   float *rho);
/* Before a local phase: the dense parameters, momentum, BN statistics and
 * proximal targets into the compact model, which the trainer steps next. */
px_status_t px__ctrain_enter(px__ctrain_t *ct, px__strategy_run_t *r, px__ctrain_prox_fn prox,
                             void *ctx);
/* After it: the trainer's own model again, and the compact parameters,
 * momentum and BN statistics back into the dense model. */
void px__ctrain_leave(px__ctrain_t *ct, px__strategy_run_t *r);
/* Whether m is ct's compact model (ct may be NULL). */
int px__ctrain_is(const px__ctrain_t *ct, const px_model_t *m);
/* Zeroes the compact weights and gradients outside the masks. */
void px__ctrain_mask(const px__ctrain_t *ct);
/* Parameter elements of the compact model (0 for NULL). */
int64_t px__ctrain_numel(const px__ctrain_t *ct);

/* ---- elastic runs (elastic.c) ---- */

/* Checks an elastic configuration against the strategy and the
 * communicator and allocates the copies (nothing when cfg.elastic is off). */
px_status_t px__elastic_setup(px__strategy_run_t *r, const px__strategy_ops_t *ops);
void px__elastic_teardown(px__strategy_run_t *r);
/* After the local phase: the parameters, BN statistics and data position
 * that a broken round is run again from. */
px_status_t px__elastic_save(px__strategy_run_t *r);
/* A round of iteration it failed with st: PX_OK when the run goes on (the
 * model back to the local phase's result, the members agreed, the
 * communicator rebuilt and the strategy rolled back: run the round again),
 * else the status the run fails with (st itself when the run is not
 * elastic or st is not a lost peer). */
px_status_t px__elastic_recover(px__strategy_run_t *r, const px__strategy_ops_t *ops, void *priv,
                                px_status_t st, int it);
/* After iteration it's decision and checkpoint: the membership change the
 * decision named, if any (no rollback). Sets r->left when this rank's node
 * is not a member. */
px_status_t px__elastic_follow(px__strategy_run_t *r, const px__strategy_ops_t *ops, void *priv,
                               int it);
/* A joining rank (r->joining), after the strategy's create: meets the kept
 * ranks' px__elastic_follow at their boundary (the same agreement) and
 * takes the state from one of them; *first: the iteration it joins before
 * (-1: the kept ranks' boundary, set here; else checked against it). */
px_status_t px__elastic_enter(px__strategy_run_t *r, const px__strategy_ops_t *ops, void *priv,
                              int *first);

/* ---- helpers of strategy.c the strategies share ---- */

/* A model tensor to its host mirror and back (staged runs). */
px_status_t px__strategy_down(const px_tensor_t *t, float *host);
px_status_t px__strategy_up(const px_tensor_t *t, const float *host);

/* Averages a model tensor (plain f32) over the world in place, directly
 * (host model, or NCCL on the device buffer) or through mirror. list: the
 * bucketed collective (gradients). */
px_status_t px__strategy_world_average(px__strategy_run_t *r, const px_tensor_t *t,
                                       float *mirror, int list);
/* Rank 0's copy of a model tensor on every rank, the same way. */
px_status_t px__strategy_world_broadcast(px__strategy_run_t *r, const px_tensor_t *t,
                                         float *mirror);
/* The start of a baseline (ddp, topk): rank 0's model on every rank, and
 * on a staged run a host mirror of the gradients in *grad_mirror (NULL
 * otherwise; the caller frees it). */
px_status_t px__strategy_start_baseline(px__strategy_run_t *r, float **grad_mirror);
/* Lists the model's parameters and the SGD momentum with `scope` (RANK:
 * each rank's own, GLOBAL: the same on every rank) and the BN statistics
 * (GLOBAL: averaged every iteration) for a checkpoint. */
px_status_t px__strategy_resume_model(px__strategy_run_t *r, px__resume_t *rs, px_rs_scope_t scope);
/* resume_items of a baseline whose model is the same on every rank. */
px_status_t px__strategy_resume_global(px__strategy_run_t *r, void *priv, px__resume_t *rs);
/* The decision of a strategy without penalties (ddp, topk): rank 0's
 * controller sees r->it and may stop the run. */
px_status_t px__strategy_decide_plain(px__strategy_run_t *r, void *priv, int *stop);

#endif
