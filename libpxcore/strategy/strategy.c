/* The loop of the per-iteration training strategies and the table of
 * strategies: H-SADMM (hierarchical and flat) over the CNN trainer, and the
 * two baselines of the field, DDP and Top-K, run by the same engine so they
 * compare like for like. Each strategy is a table of operations in its own
 * file (strategy_int.h); this file knows none of them.
 *
 * Every iteration has the same fenced phases (docs/architecture.md,
 * "H-SADMM (one outer iteration)"):
 * local (steps of SGD; for DDP and Top-K the gradient exchange happens inside,
 * in the trainer's gradient hook), synchronisation (H-SADMM only), evaluation
 * of the consensus model (every eval_every iterations, all ranks sharing the
 * test set), and control (rank 0 reports and decides; the decision is
 * broadcast). Everything per iteration works in buffers allocated before the
 * first one.
 *
 * Device models. A model on a GPU keeps its parameters, gradients and BN
 * statistics in device memory, while H-SADMM's state (z, the duals, the
 * masks), the Top-K selection and the UCX collectives work on host memory.
 * Such a run is "staged": each tensor the host side needs crosses once per
 * use through a host mirror allocated at set-up (theta down before the
 * round, z up at the start of the local phase, the proximal z and u and the
 * frozen masks up into device buffers that the fused SGD kernel and the
 * mask kernel read), and the local steps themselves stay on the device.
 * Collectives over a model tensor (DDP's gradients, the BN statistics, the
 * initial broadcast) take the device buffer directly when the world group
 * runs NCCL, and go through the mirror otherwise (UCX cannot read device
 * memory; several ranks on one GPU cannot use NCCL). The staged path does
 * the same arithmetic as the host one, so px_strategy_config_t.stage_host
 * runs it on a CPU model too, which is how the CPU tests check it. The
 * mirrors every strategy needs (parameters, BN statistics) are set up here;
 * a strategy's own (gradients, proximal targets, masks) in its file. */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "admm/admm_int.h"
#include "nn/px_train_int.h"
#include "px_check.h"
#include "px_clock.h"
#include "strategy/px_resume.h"
#include "strategy/strategy_int.h"
#include "prunex/comm_internal.h"

/* ---- the table ----------------------------------------------------------------------- */

static const px__strategy_ops_t *const px__strategies[] = {
    &px__strategy_hsadmm_ops,
    &px__strategy_hsadmm_flat_ops,
    &px__strategy_ddp_ops,
    &px__strategy_topk_ops,
};
#define PX__NSTRATEGIES ((int)(sizeof px__strategies / sizeof px__strategies[0]))

/* The operations of a kind (its names and description: policy/strategy_info.c), or
 * NULL when the engine has none. */
const px__strategy_ops_t *px__strategy_ops(px_strategy_kind_t k) {
  for (int i = 0; i < PX__NSTRATEGIES; i++)
    if (px__strategies[i]->kind == k) return px__strategies[i];
  return NULL;
}

/* ---- helpers ----------------------------------------------------------------------- */

px_status_t px__strategy_down(const px_tensor_t *t, float *host) {
  return px_tensor_copy_to_host(t, host, px_tensor_plain_bytes(t));
}

px_status_t px__strategy_up(const px_tensor_t *t, const float *host) {
  px_tensor_t v = *t; /* a view: the model's tensors are handed out const */
  return px_tensor_copy_from_host(&v, host, px_tensor_plain_bytes(t));
}

px_status_t px__strategy_world_average(px__strategy_run_t *r, const px_tensor_t *t,
                                       float *mirror, int list) {
  size_t n = px_tensor_numel(t);
  float *buf = r->staged && !r->direct ? mirror : t->data;
  if (buf == mirror) PX_CHECK(px__strategy_down(t, mirror));
  void *bufs[1] = {buf};
  PX_CHECK(list ? px_comm_allreduce_list(r->world, bufs, &n, 1, PX_COMM_F32, PX_COMM_AVG)
                : px_comm_allreduce(r->world, buf, buf, n, PX_COMM_F32, PX_COMM_AVG));
  return buf == mirror ? px__strategy_up(t, mirror) : PX_OK;
}

px_status_t px__strategy_world_broadcast(px__strategy_run_t *r, const px_tensor_t *t,
                                         float *mirror) {
  float *buf = r->staged && !r->direct ? mirror : t->data;
  if (buf == mirror) PX_CHECK(px__strategy_down(t, mirror));
  PX_CHECK(px_comm_broadcast(r->world, buf, px_tensor_numel(t), PX_COMM_F32, 0));
  return buf == mirror ? px__strategy_up(t, mirror) : PX_OK;
}

px_status_t px__strategy_start_baseline(px__strategy_run_t *r, float **grad_mirror) {
  *grad_mirror = NULL;
  if (r->staged) {
    *grad_mirror = px_malloc(r->numel * sizeof(float), "strategy.grad_mirror");
    if (!*grad_mirror) return PX_ERR_NOMEM;
  }
  /* the same initial model everywhere */
  return px__strategy_world_broadcast(r, px_model_flat_params(r->m), r->h_theta);
}

/* Rank 0: the controller's decision for a strategy without penalties
 * (the penalty arrays it sees are zeros). */
static px_status_t px__strategy_fill_plain(void *ctx, double *buf) {
  px__strategy_run_t *r = ctx;
  buf[0] = 0;
  if (!r->control) return PX_OK;
  /* penalty arrays the controller may write into and ignore */
  px_hsadmm_decision_t d = {buf + 1, buf + 1 + r->np, 0, 0, "", 0, 0, 0, NULL};
  PX_CHECK(r->control(r->ctx, &r->it, &d));
  buf[0] = px__decide_stop_code(d.stop);
  return PX_OK;
}

px_status_t px__strategy_decide_plain(px__strategy_run_t *r, void *priv, int *stop) {
  (void)priv;
  /* only the stop flag travels */
  return px__decide_broadcast(r->world, r->decision, 1, px__strategy_fill_plain, r, stop);
}

/* Loss and accuracy of the current model over the whole test set (every
 * rank evaluates its shard). */
static px_status_t px__strategy_evaluate(px__strategy_run_t *r, double *loss, double *acc) {
  px_eval_stats_t e;
  PX_CHECK(r->compact_eval ? px__ceval_evaluate(r, &e) : px_trainer_evaluate(r->t, &e));
  double v[3] = {e.loss * (double)e.samples, e.accuracy * (double)e.samples, (double)e.samples};
  PX_CHECK(px_comm_allreduce(r->world, v, v, 3, PX_COMM_F64, PX_COMM_SUM));
  *loss = v[2] > 0 ? v[0] / v[2] : 0;
  *acc = v[2] > 0 ? v[1] / v[2] : 0;
  return PX_OK;
}

static px_status_t px__strategy_average_bn(px__strategy_run_t *r) {
  if (px_model_num_buffers(r->m) == 0) return PX_OK;
  return px__strategy_world_average(r, px_model_flat_buffers(r->m), r->h_buf, 0);
}

/* BN statistics for the weights now in the model (a consensus model):
 * forward passes on training batches, then the average over ranks. */
static px_status_t px__strategy_calibrate(px__strategy_run_t *r) {
  int32_t n = r->cfg->calibrate_batches == 0 ? 20 : r->cfg->calibrate_batches;
  if (n < 0) return PX_OK;
  PX_CHECK(r->compact_eval ? px__ceval_calibrate(r, n) : px_trainer_calibrate_bn(r->t, n));
  return px__strategy_average_bn(r);
}

/* Evaluates the consensus model of a strategy that has one (loaded, BN
 * statistics re-estimated, the local model put back), else the model. */
static px_status_t px__strategy_evaluate_consensus(px__strategy_run_t *r,
                                                   const px__strategy_ops_t *ops, void *priv,
                                                   double *loss, double *acc) {
  if (!ops->load_consensus) return px__strategy_evaluate(r, loss, acc);
  px_status_t est = ops->load_consensus(r, priv, 1);
  if (est == PX_OK) est = px__strategy_calibrate(r);
  if (est == PX_OK) est = px__strategy_evaluate(r, loss, acc);
  px_status_t rst = ops->restore_local(r, priv);
  return est == PX_OK ? rst : est;
}

/* ---- set-up of what every strategy shares -------------------------------------------- */

/* Names, the decision buffer, and the mirrors of a staged run. */
static px_status_t px__strategy_setup(px__strategy_run_t *r) {
  r->np = px_model_num_params(r->m);
  r->numel = px_model_numel(r->m);
  r->names = px_calloc((size_t)r->np, sizeof *r->names, "strategy.names");
  r->decision = px_calloc(1 + 2 * (size_t)r->np, sizeof(double), "strategy.decision");
  if (!r->names || !r->decision) return PX_ERR_NOMEM;
  r->max_numel = 1;
  for (int i = 0; i < r->np; i++) {
    const px_model_param_t *p = px_model_param(r->m, i);
    r->names[i] = p->name;
    if (px_tensor_numel(p->value) > r->max_numel) r->max_numel = px_tensor_numel(p->value);
  }
  r->cuda = px_model_flat_params(r->m)->device.kind == PX_DEVICE_CUDA;
  r->staged = r->cuda || r->cfg->stage_host;
  if (!r->staged) return PX_OK;
  r->direct = r->cuda && px_group_nccl(r->world);
  r->h_theta = px_malloc(r->numel * sizeof(float), "strategy.theta_mirror");
  size_t nbuf = px_tensor_numel(px_model_flat_buffers(r->m));
  r->h_buf = px_malloc((nbuf ? nbuf : 1) * sizeof(float), "strategy.bn_mirror");
  if (!r->h_theta || !r->h_buf) return PX_ERR_NOMEM;
  return px__strategy_down(px_model_flat_params(r->m), r->h_theta);
}

static void px__strategy_teardown(px__strategy_run_t *r) {
  px__ceval_destroy(r->ceval);
  px__ctrain_destroy(r->ctrain);
  PX_FREE_ALL(r->names, r->decision, r->h_theta, r->h_buf);
}

/* ---- the loop ----------------------------------------------------------------------- */

/* The local phase of iteration it (r->it is reset for the iteration). */
static px_status_t px__strategy_local(px__strategy_run_t *r, const px__strategy_ops_t *ops,
                                      void *priv, int it, px_epoch_stats_t *es) {
  memset(&r->it, 0, sizeof r->it);
  r->it.iteration = it;
  r->it.layer_names = r->names;
  r->it.checkpoint_complete = -1;
  r->it.checkpoint_problem = "";
  r->it.lost_node = -1;
  if (r->rs) {
    r->it.checkpoint_complete = px__resume_complete(r->rs, r->ck_problem, sizeof r->ck_problem);
    r->it.checkpoint_problem = r->ck_problem;
  }
  r->bytes0[0] = px_comm_tier_bytes(r->comm, PX_TIER_INTRA);
  r->bytes0[1] = px_comm_tier_bytes(r->comm, PX_TIER_INTER);
  double t0 = px__now();
  if (ops->before_local) PX_CHECK(ops->before_local(r, priv, it));
  PX_CHECK(px_trainer_steps(r->t, r->steps, es));
  if (ops->after_local) PX_CHECK(ops->after_local(r, priv));
  r->it.local_s = px__now() - t0;
  r->it.epoch = px__trainer_epochs(r->t);
  return PX_OK;
}

/* The iteration's figures, summed over ranks. */
static px_status_t px__strategy_figures(px__strategy_run_t *r, const px__strategy_ops_t *ops,
                                        void *priv, const px_epoch_stats_t *es) {
  double v[4] = {es->loss, es->accuracy,
                 (double)(px_comm_tier_bytes(r->comm, PX_TIER_INTRA) - r->bytes0[0]),
                 (double)(px_comm_tier_bytes(r->comm, PX_TIER_INTER) - r->bytes0[1])};
  r->it.rank_bytes_intra = (uint64_t)v[2];
  r->it.rank_bytes_inter = (uint64_t)v[3];
  PX_CHECK(px_comm_allreduce(r->world, v, v, 4, PX_COMM_F64, PX_COMM_SUM));
  int N = px_group_size(r->world);
  r->it.loss = v[0] / N;
  r->it.train_accuracy = v[1] / N;
  r->it.bytes_intra = (uint64_t)v[2];
  r->it.bytes_inter = (uint64_t)v[3];
  r->it.bytes_inter_dense = ops->dense_inter(r, priv);
  return PX_OK;
}

/* The round after the local phase: synchronisation, evaluation, figures,
 * control, then the result and the observer. Nothing of res changes before
 * the decision is in, so that an elastic run can run a broken round again.
 * Sets *stop when the controller ends the run. */
static px_status_t px__strategy_round(px__strategy_run_t *r, const px__strategy_ops_t *ops,
                                      void *priv, int it, const px_epoch_stats_t *es,
                                      px_strategy_result_t *res, int *stop) {
  const px_strategy_config_t *cfg = r->cfg;
  int last = it == cfg->iterations - 1;
  r->it.member_epoch = px_comm_epoch(r->comm);
  r->it.member_nodes = px_comm_nnodes(r->comm);

  /* ---- synchronisation ---- */
  r->it.density = 1.0;
  if (ops->synchronise) PX_CHECK(ops->synchronise(r, priv));
  int evaluate = last || (cfg->eval_every > 0 && (it + 1) % cfg->eval_every == 0);
  /* a consensus model gets its BN statistics re-estimated before it is
   * evaluated (and averages those), so averaging the local models' ones
   * would be undone */
  if (!(ops->load_consensus && evaluate && cfg->calibrate_batches >= 0))
    PX_CHECK(px__strategy_average_bn(r));

  /* ---- evaluation of the consensus model ---- */
  r->it.test_accuracy = -1;
  r->it.test_loss = -1;
  if (evaluate)
    PX_CHECK(px__strategy_evaluate_consensus(r, ops, priv, &r->it.test_loss,
                                             &r->it.test_accuracy));

  /* ---- figures of the iteration, summed over ranks ---- */
  PX_CHECK(px__strategy_figures(r, ops, priv, es));
  r->it.last = last;

  /* ---- control: rank 0 decides, everyone applies ---- */
  double t1 = px__now();
  PX_CHECK(ops->decide(r, priv, stop));
  r->it.control_s = px__now() - t1;
  if (evaluate) {
    res->test_accuracy = r->it.test_accuracy;
    res->test_loss = r->it.test_loss;
  }
  res->bytes_intra += r->it.bytes_intra;
  res->bytes_inter += r->it.bytes_inter;
  res->bytes_inter_dense += r->it.bytes_inter_dense;
  res->iterations = it + 1;
  res->density = r->it.density;
  if (cfg->observe) PX_CHECK(cfg->observe(cfg->observe_ctx, &r->it));
  return PX_OK;
}

/* The final model: the consensus (with BN statistics of its own, already
 * there when the last iteration evaluated it), evaluated now when the
 * controller stopped the run before an evaluation. */
static px_status_t px__strategy_finish(px__strategy_run_t *r, const px__strategy_ops_t *ops,
                                       void *priv, px_strategy_result_t *res) {
  if (ops->load_consensus) PX_CHECK(ops->load_consensus(r, priv, 0));
  if (res->test_accuracy < 0 || (r->it.test_accuracy < 0 && res->iterations > 0)) {
    if (ops->load_consensus) PX_CHECK(px__strategy_calibrate(r));
    PX_CHECK(px__strategy_evaluate(r, &res->test_loss, &res->test_accuracy));
  }
  return PX_OK;
}

/* ---- checkpoints ------------------------------------------------------------------ */

px_status_t px__strategy_resume_model(px__strategy_run_t *r, px__resume_t *rs,
                                      px_rs_scope_t scope) {
  PX_CHECK(
      px__resume_add_tensor(rs, "model.params", scope, (px_tensor_t *)px_model_flat_params(r->m)));
  if (px_model_num_buffers(r->m) > 0) /* averaged over the ranks every iteration */
    PX_CHECK(px__resume_add_tensor(rs, "model.buffers", PX_RS_GLOBAL,
                                   (px_tensor_t *)px_model_flat_buffers(r->m)));
  for (int i = 0; i < r->np; i++) {
    char name[96];
    snprintf(name, sizeof name, "sgd.momentum.%d", i);
    px_tensor_t *mom = px_sgd_momentum(r->sgd, i);
    if (mom && px_tensor_plain_bytes(mom) > 0)
      PX_CHECK(px__resume_add_tensor(rs, name, scope, mom));
  }
  return PX_OK;
}

px_status_t px__strategy_resume_global(px__strategy_run_t *r, void *priv, px__resume_t *rs) {
  (void)priv;
  return px__strategy_resume_model(r, rs, PX_RS_GLOBAL);
}

/* Lists the run's state for px_resume: the loop's scalars and figures
 * here, the model, momentum and private state by the strategy. */
static px_status_t px__strategy_resume_setup(px__strategy_run_t *r, const px__strategy_ops_t *ops,
                                             void *priv) {
  const px_strategy_config_t *c = r->cfg;
  PX_CHECK(px__resume_create(r->comm, c->checkpoint_dir,
                             c->checkpoint_keep ? c->checkpoint_keep : 2, &r->rs));
  PX_CHECK(px__resume_add(r->rs, "run.scalars", PX_RS_GLOBAL, PX_ST_I64, &r->ck, sizeof r->ck));
  PX_CHECK(px__resume_add(r->rs, "run.figures", PX_RS_GLOBAL, PX_ST_F64, &r->ckf, sizeof r->ckf));
  return ops->resume_items(r, priv, r->rs);
}

/* Resumes from the newest checkpoint every rank can read; *first: the
 * iteration to run next. */
static px_status_t px__strategy_resume(px__strategy_run_t *r, const px__strategy_ops_t *ops,
                                       void *priv, px_strategy_result_t *res, int *first) {
  int R, node_fresh, rank_fresh;
  *first = 0;
  res->resumed_from = -1;
  PX_CHECK(px__resume_load(r->rs, &R, &node_fresh, &rank_fresh));
  if (R < 0) return PX_OK;
  if (ops->resumed) PX_CHECK(ops->resumed(r, priv, node_fresh, rank_fresh));
  PX_CHECK(px_trainer_set_position(r->t, r->ck.position));
  res->bytes_intra = (uint64_t)r->ck.bytes_intra;
  res->bytes_inter = (uint64_t)r->ck.bytes_inter;
  res->bytes_inter_dense = (uint64_t)r->ck.bytes_inter_dense;
  res->test_loss = r->ckf.test_loss;
  res->test_accuracy = r->ckf.test_accuracy;
  res->resumed_from = R;
  res->iterations = R + 1;
  *first = r->ck.stopped ? r->cfg->iterations : R + 1; /* the controller had stopped it */
  return PX_OK;
}

static px_status_t px__strategy_checkpoint(px__strategy_run_t *r, int it, int stop,
                                           px_strategy_result_t *res) {
  r->ck.iteration = it;
  r->ck.stopped = stop;
  px_trainer_position(r->t, r->ck.position);
  r->ck.bytes_intra = (int64_t)res->bytes_intra;
  r->ck.bytes_inter = (int64_t)res->bytes_inter;
  r->ck.bytes_inter_dense = (int64_t)res->bytes_inter_dense;
  r->ckf.test_loss = res->test_loss;
  r->ckf.test_accuracy = res->test_accuracy;
  uint64_t bytes;
  double s;
  PX_CHECK(px__resume_save(r->rs, it, &bytes, &s));
  res->checkpoints++;
  /* the save settled the previous one on every rank: all agree on this */
  int max = r->cfg->checkpoint_max_unprotected;
  char problem[256];
  int complete = px__resume_complete(r->rs, problem, sizeof problem);
  if (max > 0 && problem[0] && it - complete > max) {
    char since[32];
    snprintf(since, sizeof since, "iteration %d", complete);
    return px_set_error(PX_ERR_IO,
                        "no usable checkpoint since %s, %d iterations ago "
                        "(recovery.max_unprotected_iterations = %d): %s",
                        complete >= 0 ? since : "the start", it - complete, max, problem);
  }
  res->checkpoint_seconds += s;
  res->checkpoint_bytes = bytes;
  px_log(PX_LOG_INFO, "checkpoint of iteration %d: %.1f MB, training held %.1f ms", it,
         (double)bytes / 1e6, s * 1e3);
  return PX_OK;
}

/* One iteration: the local phase, then its round and checkpoint. In an
 * elastic run a round broken by a lost node runs again over the nodes left
 * (what it changed of the result undone first), and a membership change
 * the decision named follows. */
static px_status_t px__strategy_iteration(px__strategy_run_t *r, const px__strategy_ops_t *ops,
                                          void *priv, int it, int *stop) {
  const px_strategy_config_t *cfg = r->cfg;
  px_strategy_result_t *res = r->res;
  px_epoch_stats_t es;
  PX_CHECK(px__strategy_local(r, ops, priv, it, &es));
  if (r->elastic) PX_CHECK(px__elastic_save(r));
  px_strategy_result_t res0 = *res;
  for (;;) {
    px_status_t st = px__strategy_round(r, ops, priv, it, &es, res, stop);
    /* a suspended run (preemption) resumes after this checkpoint: it is
     * not marked stopped */
    if (st == PX_OK && r->rs &&
        ((it + 1) % cfg->checkpoint_every == 0 || it == cfg->iterations - 1 || *stop))
      st = px__strategy_checkpoint(r, it, *stop == PX_HSADMM_STOP, res);
    if (st == PX_OK) break;
    if (r->elastic) *res = res0;
    PX_CHECK(px__elastic_recover(r, ops, priv, st, it));
  }
  return r->elastic && !*stop ? px__elastic_follow(r, ops, priv, it) : PX_OK;
}

/* The end of a run: the last checkpoint settled on every rank, the final
 * model (a rank a decision left out keeps the last consensus it took part
 * in, with no collective), the result's summary. */
static px_status_t px__strategy_end(px__strategy_run_t *r, const px__strategy_ops_t *ops,
                                    void *priv, int stop) {
  px_strategy_result_t *res = r->res;
  if (r->left) {
    if (ops->load_consensus) PX_CHECK(ops->load_consensus(r, priv, 0));
  } else {
    if (r->rs) { /* the last checkpoint lands on every rank before the run ends */
      double s;
      PX_CHECK(px__resume_finish(r->rs, &s));
      res->checkpoint_seconds += s;
      res->checkpoint_complete = px__resume_complete(r->rs, res->checkpoint_problem,
                                                     sizeof res->checkpoint_problem);
    }
    PX_CHECK(px__strategy_finish(r, ops, priv, res));
  }
  res->compact_builds = (int32_t)px__ceval_builds(r->ceval);
  res->compact_train_numel = px__ctrain_numel(r->ctrain);
  snprintf(res->stop_reason, sizeof res->stop_reason, "%s",
           r->left                    ? "left"
           : stop == PX_HSADMM_SUSPEND ? "suspended"
           : stop                      ? "controller"
                                       : "iterations");
  return PX_OK;
}

px_status_t px_strategy_run(px_trainer_t *trainer, px_comm_t *comm,
                            const px_strategy_config_t *cfg, px_strategy_control_fn control,
                            void *ctx, px_strategy_result_t *res) {
  memset(res, 0, sizeof *res);
  res->comm = comm; /* whatever happens: what the caller destroys */
  const px__strategy_ops_t *ops = px__strategy_ops(cfg->kind);
  if (!ops) {
    char names[128];
    return px_set_error(PX_ERR_INVALID, "strategy %d is not one of %s", (int)cfg->kind,
                        px_strategy_names(names, sizeof names, ", "));
  }
  PX_REQUIRE(cfg->iterations >= 1, "strategy: %d iterations", cfg->iterations);
  PX_REQUIRE(cfg->local_steps >= 0, "strategy: %d local steps", cfg->local_steps);
  px__strategy_run_t r;
  memset(&r, 0, sizeof r);
  r.res = res;
  r.t = trainer;
  r.m = px_trainer_model(trainer);
  r.sgd = px_trainer_sgd(trainer);
  r.comm = comm;
  r.world = px_comm_group(comm, PX_GROUP_WORLD);
  r.cfg = cfg;
  r.control = control;
  r.ctx = ctx;
  void *priv = NULL;
  px_status_t st;
  double t_start = px__now();
  PX_CHECK_GOTO(px__strategy_setup(&r), st, done);
  PX_CHECK_GOTO(px__elastic_setup(&r, ops), st, done);
  PX_CHECK_GOTO(ops->create(&r, &priv), st, done);
  r.compact_eval = px__ceval_wanted(&r, ops->load_consensus != NULL);
  res->test_accuracy = res->test_loss = -1;
  r.ckf.test_loss = r.ckf.test_accuracy = -1;
  res->resumed_from = -1;
  res->checkpoint_complete = -1;
  int first = 0;
  if (cfg->checkpoint_every > 0 && cfg->checkpoint_dir) {
    PX_CHECK_GOTO(px__strategy_resume_setup(&r, ops, priv), st, done);
    if (!r.joining) /* a joining rank takes the running job's state instead */
      PX_CHECK_GOTO(px__strategy_resume(&r, ops, priv, res, &first), st, done);
  }
  r.steps = cfg->local_steps ? cfg->local_steps : px_trainer_steps_per_epoch(trainer);
  if (r.joining) {
    first = cfg->elastic.join_from;
    PX_CHECK_GOTO(px__elastic_enter(&r, ops, priv, &first), st, done);
  }
  px_trainer_set_schedule_steps(trainer, r.steps * cfg->iterations);
  int stop = 0;
  for (int it = first; it < cfg->iterations && !stop && !r.left; it++)
    PX_CHECK_GOTO(px__strategy_iteration(&r, ops, priv, it, &stop), st, done);
  PX_CHECK_GOTO(px__strategy_end(&r, ops, priv, stop), st, done);
  res->seconds = px__now() - t_start;
  st = PX_OK;
done:
  px__resume_destroy(r.rs); /* first: its writer thread reads the strategy's buffers */
  ops->destroy(&r, priv);
  px__elastic_teardown(&r);
  px__strategy_teardown(&r);
  return st;
}
