/* The per-iteration training strategies: H-SADMM (hierarchical and flat)
 * over the CNN trainer, and the two baselines of the field, DDP and Top-K,
 * run by the same engine so they compare like for like.
 *
 * Every iteration has the same fenced phases as DESIGN.md section 4:
 * local (steps of SGD; for DDP and Top-K the gradient exchange happens inside,
 * in the trainer's gradient hook), synchronisation (H-SADMM only), evaluation
 * of the consensus model (every eval_every iterations, all ranks sharing the
 * test set), and control (rank 0 reports and decides; the decision is
 * broadcast). Everything per iteration works in buffers allocated before the
 * first one. */
#include <math.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

#include "prunex/strategy.h"
#include "px_check.h"

const char *px_strategy_name(px_strategy_kind_t k) {
  switch (k) {
    case PX_STRATEGY_HSADMM: return "hsadmm";
    case PX_STRATEGY_HSADMM_FLAT: return "hsadmm-flat";
    case PX_STRATEGY_DDP: return "ddp";
    case PX_STRATEGY_TOPK: return "topk";
  }
  return "unknown";
}

typedef struct {
  px_trainer_t *t;
  px_model_t *m;
  px_sgd_t *sgd;
  px_comm_t *comm;
  px_group_t *world;
  const px_strategy_config_t *cfg;
  int np;
  const char **names;       /* [np] */
  size_t numel;
  int hs;                   /* hsadmm or flat */
  px_hsadmm_t *h;
  px_hsadmm_param_t *hp;    /* [np] */
  float *backup;            /* [numel] theta while z is evaluated */
  double *layer_density;    /* [np] kept fraction of each tensor of z */
  double *rho1, *rho2;      /* [np] decision arrays for ddp/topk */
  /* top-k */
  float *err;               /* [numel] error feedback */
  uint32_t *idx;            /* [max tensor] selection workspace */
  uint8_t *sendbuf, *recvbuf;
  size_t kpairs;            /* pairs this rank sends per step */
  uint64_t rng;
  /* the iteration being reported, for the H-SADMM control adapter */
  px_iteration_t it;
  px_strategy_control_fn control;
  void *ctx;
} px__run_t;

static double px__now(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static uint64_t px__traffic(px_comm_t *c, int tier) {
  px_comm_traffic_t t;
  px_comm_traffic(c, &t);
  return t.sent[tier] + t.recv[tier];
}

static int px__skipped(const char *const *skip_layers, int nskip, const char *name) {
  for (int i = 0; i < nskip; i++) {
    const char *s = skip_layers[i];
    size_t n = strlen(s);
    /* "conv1" skips "conv1.weight"; a full name skips itself */
    if (!strcmp(s, name) || (!strncmp(s, name, n) && !strcmp(name + n, ".weight"))) return 1;
  }
  return 0;
}

void px_strategy_hsadmm_params(px_model_t *m, const char *const *skip_layers, int nskip,
                               px_hsadmm_param_t *out) {
  int np = px_model_num_params(m);
  for (int i = 0; i < np; i++) {
    const px_model_param_t *p = px_model_param(m, i);
    px_hsadmm_param_t *q = &out[i];
    memset(q, 0, sizeof *q);
    q->name = p->name;
    q->theta = p->value->data;
    q->numel = px_tensor_numel(p->value);
    q->prunable = p->kind == PX_WEIGHT_CONV && !px__skipped(skip_layers, nskip, p->name);
    if (q->prunable)
      q->shape = (px_conv_shape_t){(int32_t)p->value->dims[0], (int32_t)p->value->dims[1],
                                   (int32_t)p->value->dims[2], (int32_t)p->value->dims[3]};
  }
  /* a conv whose output only the next conv reads loses a filter with each
   * channel pruned there (px_prune_project_coupled) */
  for (int i = 0; i < np; i++) {
    int k = px_model_channel_consumer(m, i);
    if (out[i].prunable && k >= 0 && out[k].prunable) {
      out[i].has_consumer = 1;
      out[i].consumer = k;
    }
  }
}

/* ---- DDP -------------------------------------------------------------------- */

static px_status_t px__ddp_hook(void *ctx, px_model_t *m) {
  px__run_t *r = ctx;
  const px_tensor_t *g = px_model_flat_grads(m);
  void *bufs[1] = {g->data};
  size_t counts[1] = {r->numel};
  return px_comm_allreduce_list(r->world, bufs, counts, 1, PX_COMM_F32, PX_COMM_AVG);
}

/* ---- H-SADMM after the freeze: training inside the masks ---------------------- */

static px_status_t px__masked_hook(void *ctx, px_model_t *m) {
  px__run_t *r = ctx;
  if (!px_hsadmm_frozen(r->h)) return PX_OK;
  for (int i = 0; i < r->np; i++) {
    if (!r->hp[i].prunable) continue;
    const uint8_t *mask = px_hsadmm_mask(r->h, i);
    const px_model_param_t *p = px_model_param(m, i);
    px_prune_apply_mask(p->value->data, r->hp[i].shape, mask);
    px_prune_apply_mask(p->grad->data, r->hp[i].shape, mask);
  }
  return PX_OK;
}

/* ---- Top-K -------------------------------------------------------------------- */

/* Moves the k entries of largest |e| to the front of idx[0..n) (quickselect
 * with a pseudo-random pivot; the order within the front is unspecified). */
static void px__select_topk(const float *e, uint32_t *idx, size_t n, size_t k, uint64_t *rng) {
  size_t lo = 0, hi = n; /* the k-th largest lies in idx[lo..hi) */
  while (hi - lo > 1 && k > lo && k < hi) {
    *rng = *rng * 6364136223846793005ull + 1442695040888963407ull;
    size_t p = lo + (size_t)((*rng >> 33) % (hi - lo));
    float pv = fabsf(e[idx[p]]);
    /* three-way partition: > pv | == pv | < pv */
    size_t a = lo, b = lo, c = hi;
    while (b < c) {
      float v = fabsf(e[idx[b]]);
      if (v > pv) {
        uint32_t t = idx[a]; idx[a] = idx[b]; idx[b] = t;
        a++;
        b++;
      } else if (v < pv) {
        c--;
        uint32_t t = idx[b]; idx[b] = idx[c]; idx[c] = t;
      } else {
        b++;
      }
    }
    if (k <= a) hi = a;
    else if (k <= c) return; /* the boundary falls among equals */
    else lo = c;
  }
}

static px_status_t px__topk_hook(void *ctx, px_model_t *m) {
  px__run_t *r = ctx;
  uint8_t *out = r->sendbuf;
  size_t off = 0;
  for (int i = 0; i < r->np; i++) {
    const px_model_param_t *p = px_model_param(m, i);
    size_t n = px_tensor_numel(p->value);
    size_t k = px_prune_keep_count(r->cfg->topk_ratio, n);
    float *e = r->err + off;
    const float *g = p->grad->data;
    for (size_t j = 0; j < n; j++) e[j] += g[j];
    for (size_t j = 0; j < n; j++) r->idx[j] = (uint32_t)j;
    px__select_topk(e, r->idx, n, k, &r->rng);
    for (size_t j = 0; j < k; j++) {
      uint32_t q = r->idx[j];
      float v = e[q];
      memcpy(out, &q, 4);
      memcpy(out + 4, &v, 4);
      out += 8;
      e[q] = 0.0f; /* sent: what remains is the error fed back next step */
    }
    off += n;
  }
  size_t bytes = r->kpairs * 8;
  PX_CHECK(px_comm_allgather(r->world, r->sendbuf, r->recvbuf, bytes, PX_COMM_U8));
  /* the averaged sparse gradient replaces the dense one */
  float *grad = px_model_flat_grads(m)->data;
  memset(grad, 0, r->numel * sizeof(float));
  int N = px_group_size(r->world);
  float inv = 1.0f / (float)N;
  for (int src = 0; src < N; src++) {
    const uint8_t *in = r->recvbuf + (size_t)src * bytes;
    size_t poff = 0;
    for (int i = 0; i < r->np; i++) {
      size_t n = px_tensor_numel(px_model_param(m, i)->value);
      size_t k = px_prune_keep_count(r->cfg->topk_ratio, n);
      for (size_t j = 0; j < k; j++, in += 8) {
        uint32_t q;
        float v;
        memcpy(&q, in, 4);
        memcpy(&v, in + 4, 4);
        if (q >= n) return px_set_error(PX_ERR_PEER, "rank %d sent index %u for %s (%zu entries)",
                                        src, q, r->names[i], n);
        grad[poff + q] += v * inv;
      }
      poff += n;
    }
  }
  return PX_OK;
}

/* ---- shared pieces ----------------------------------------------------------------- */

/* Loss and accuracy of the current model over the whole test set (every
 * rank evaluates its shard). */
static px_status_t px__evaluate(px__run_t *r, double *loss, double *acc) {
  px_eval_stats_t e;
  PX_CHECK(px_trainer_evaluate(r->t, &e));
  double v[3] = {e.loss * (double)e.samples, e.accuracy * (double)e.samples, (double)e.samples};
  PX_CHECK(px_comm_allreduce(r->world, v, v, 3, PX_COMM_F64, PX_COMM_SUM));
  *loss = v[2] > 0 ? v[0] / v[2] : 0;
  *acc = v[2] > 0 ? v[1] / v[2] : 0;
  return PX_OK;
}

/* BN statistics for the weights now in the model (z): forward passes on
 * training batches, then the average over ranks. */
static px_status_t px__calibrate(px__run_t *r) {
  int32_t n = r->cfg->calibrate_batches == 0 ? 20 : r->cfg->calibrate_batches;
  if (n < 0) return PX_OK;
  PX_CHECK(px_trainer_calibrate_bn(r->t, n));
  const px_tensor_t *b = px_model_flat_buffers(r->m);
  if (px_model_num_buffers(r->m) == 0) return PX_OK;
  return px_comm_allreduce(r->world, b->data, b->data, px_tensor_numel(b), PX_COMM_F32,
                           PX_COMM_AVG);
}

/* Copies z into the model's parameters (saving theta when backup). */
static void px__load_z(px__run_t *r, int backup) {
  float *theta = px_model_flat_params(r->m)->data;
  if (backup) memcpy(r->backup, theta, r->numel * sizeof(float));
  size_t off = 0;
  for (int i = 0; i < r->np; i++) {
    memcpy(theta + off, px_hsadmm_z(r->h, i), r->hp[i].numel * sizeof(float));
    off += r->hp[i].numel;
  }
}

static px_status_t px__average_bn(px__run_t *r) {
  const px_tensor_t *b = px_model_flat_buffers(r->m);
  if (px_model_num_buffers(r->m) == 0) return PX_OK;
  return px_comm_allreduce(r->world, b->data, b->data, px_tensor_numel(b), PX_COMM_F32,
                           PX_COMM_AVG);
}

/* Adapter from the H-SADMM round to the strategy's iteration record. */
static px_status_t px__hs_control(void *ctx, const px_hsadmm_round_t *round,
                                  px_hsadmm_decision_t *d) {
  px__run_t *r = ctx;
  (void)round; /* its figures are in r->it already */
  return r->control(r->ctx, &r->it, d);
}

static px_status_t px__setup(px__run_t *r) {
  r->np = px_model_num_params(r->m);
  r->numel = px_model_numel(r->m);
  r->names = px_calloc((size_t)r->np, sizeof *r->names, "strategy.names");
  r->rho1 = px_calloc((size_t)r->np, sizeof(double), "strategy.rho");
  r->rho2 = px_calloc((size_t)r->np, sizeof(double), "strategy.rho");
  if (!r->names || !r->rho1 || !r->rho2) return PX_ERR_NOMEM;
  size_t maxn = 1;
  for (int i = 0; i < r->np; i++) {
    const px_model_param_t *p = px_model_param(r->m, i);
    r->names[i] = p->name;
    if (px_tensor_numel(p->value) > maxn) maxn = px_tensor_numel(p->value);
  }
  const px_strategy_config_t *c = r->cfg;
  if (r->hs) {
    r->hp = px_calloc((size_t)r->np, sizeof *r->hp, "strategy.hsadmm_params");
    r->backup = px_malloc(r->numel * sizeof(float), "strategy.backup");
    r->layer_density = px_calloc((size_t)r->np, sizeof(double), "strategy.density");
    if (!r->hp || !r->backup || !r->layer_density) return PX_ERR_NOMEM;
    px_strategy_hsadmm_params(r->m, c->skip_layers, c->nskip, r->hp);
    /* the regulariser moves from the local steps into the z update (the
     * global problem's lambda/2 ||z||^2), so it is not applied twice */
    double lambda = px_sgd_weight_decay(r->sgd);
    px_sgd_set_weight_decay(r->sgd, 0.0);
    px_hsadmm_config_t hc = {c->kind == PX_STRATEGY_HSADMM_FLAT, c->rho1, c->rho2, lambda, c->keep,
                             c->bucket_bytes};
    PX_CHECK(px_hsadmm_create(r->comm, r->hp, r->np, &hc, &r->h));
    /* every rank starts from the consensus */
    px__load_z(r, 0);
    px_trainer_set_grad_hook(r->t, px__masked_hook, r);
  } else if (c->kind == PX_STRATEGY_DDP) {
    /* the same initial model everywhere */
    const px_tensor_t *w = px_model_flat_params(r->m);
    PX_CHECK(px_comm_broadcast(r->world, w->data, r->numel, PX_COMM_F32, 0));
    px_trainer_set_grad_hook(r->t, px__ddp_hook, r);
  } else {
    PX_REQUIRE(c->topk_ratio > 0 && c->topk_ratio <= 1, "comm.topk_ratio = %g: must be in (0, 1]",
               c->topk_ratio);
    const px_tensor_t *w = px_model_flat_params(r->m);
    PX_CHECK(px_comm_broadcast(r->world, w->data, r->numel, PX_COMM_F32, 0));
    r->kpairs = 0;
    for (int i = 0; i < r->np; i++)
      r->kpairs += px_prune_keep_count(c->topk_ratio, px_tensor_numel(px_model_param(r->m, i)->value));
    int N = px_group_size(r->world);
    r->err = px_calloc(r->numel, sizeof(float), "topk.error_feedback");
    r->idx = px_malloc(maxn * sizeof(uint32_t), "topk.select");
    r->sendbuf = px_malloc(r->kpairs * 8, "topk.send");
    r->recvbuf = px_malloc(r->kpairs * 8 * (size_t)N, "topk.recv");
    if (!r->err || !r->idx || !r->sendbuf || !r->recvbuf) return PX_ERR_NOMEM;
    r->rng = 0x9E3779B97F4A7C15ull ^ (uint64_t)px_comm_rank(r->comm);
    px_trainer_set_grad_hook(r->t, px__topk_hook, r);
  }
  return PX_OK;
}

static void px__teardown(px__run_t *r) {
  px_trainer_set_grad_hook(r->t, NULL, NULL);
  px_hsadmm_destroy(r->h);
  px_free(r->hp);
  px_free(r->backup);
  px_free(r->layer_density);
  px_free(r->names);
  px_free(r->rho1);
  px_free(r->rho2);
  px_free(r->err);
  px_free(r->idx);
  px_free(r->sendbuf);
  px_free(r->recvbuf);
}

/* Bytes a dense ring allreduce of the gradients would move between nodes,
 * summed over ranks, for `steps` steps: the ring through the ranks (node by
 * node) crosses M node boundaries, and each edge carries 2 (N - 1) / N of
 * the buffer each way. */
static uint64_t px__dense_ring_inter(const px__run_t *r, int64_t steps) {
  int N = px_group_size(r->world), M = px_comm_nnodes(r->comm);
  if (M < 2) return 0;
  double per = 2.0 * M * 2.0 * (N - 1) / N * (double)r->numel * sizeof(float);
  return (uint64_t)llround(per * (double)steps);
}

px_status_t px_strategy_run(px_trainer_t *trainer, px_comm_t *comm,
                            const px_strategy_config_t *cfg, px_strategy_control_fn control,
                            void *ctx, px_strategy_result_t *res) {
  memset(res, 0, sizeof *res);
  PX_REQUIRE(cfg->kind >= PX_STRATEGY_HSADMM && cfg->kind <= PX_STRATEGY_TOPK,
             "strategy %d is not hsadmm, hsadmm-flat, ddp or topk", (int)cfg->kind);
  PX_REQUIRE(cfg->iterations >= 1, "strategy: %d iterations", cfg->iterations);
  PX_REQUIRE(cfg->local_steps >= 0, "strategy: %d local steps", cfg->local_steps);
  px__run_t r;
  memset(&r, 0, sizeof r);
  r.t = trainer;
  r.m = px_trainer_model(trainer);
  r.sgd = px_trainer_sgd(trainer);
  r.comm = comm;
  r.world = px_comm_group(comm, PX_GROUP_WORLD);
  r.cfg = cfg;
  r.hs = cfg->kind == PX_STRATEGY_HSADMM || cfg->kind == PX_STRATEGY_HSADMM_FLAT;
  r.control = control;
  r.ctx = ctx;
  int rank0 = px_comm_rank(comm) == 0;
  px_status_t st;
  double t_start = px__now();
  PX_CHECK_GOTO(px__setup(&r), st, done);
  int64_t steps = cfg->local_steps ? cfg->local_steps : px_trainer_steps_per_epoch(trainer);
  px_trainer_set_schedule_steps(trainer, steps * cfg->iterations);
  double test_loss = -1, test_acc = -1;
  int stop = 0, it;
  for (it = 0; it < cfg->iterations && !stop; it++) {
    int last = it == cfg->iterations - 1;
    memset(&r.it, 0, sizeof r.it);
    r.it.iteration = it;
    r.it.layer_names = r.names;
    uint64_t intra0 = px__traffic(comm, PX_TIER_INTRA), inter0 = px__traffic(comm, PX_TIER_INTER);

    /* ---- local phase ---- */
    double t0 = px__now();
    if (r.hs) {
      float *theta = px_model_flat_params(r.m)->data;
      size_t off = 0;
      for (int i = 0; i < r.np; i++) {
        const float *z, *u;
        float rho;
        px_hsadmm_prox(r.h, i, &z, &u, &rho);
        PX_CHECK_GOTO(px_sgd_set_prox(r.sgd, i, z, u, rho), st, done);
        /* the local phase starts from the global consensus: it is what all
         * ranks share, so the nodes cannot drift apart between the rounds,
         * whatever rho2 is (the proximal target stays z_i - u) */
        if (!cfg->keep_local && it > 0)
          memcpy(theta + off, px_hsadmm_z(r.h, i), r.hp[i].numel * sizeof(float));
        off += r.hp[i].numel;
      }
    }
    px_epoch_stats_t es;
    PX_CHECK_GOTO(px_trainer_steps(trainer, steps, &es), st, done);
    r.it.local_s = px__now() - t0;
    r.it.epoch = (double)px_trainer_global_step(trainer) / (double)px_trainer_steps_per_epoch(trainer);

    /* ---- synchronisation (H-SADMM) ---- */
    px_hsadmm_round_t *round = NULL;
    if (r.hs) {
      PX_CHECK_GOTO(px_hsadmm_sync(r.h, &round), st, done);
      r.it.intra_s = round->intra_s;
      r.it.projection_s = round->projection_s;
      r.it.inter_s = round->inter_s;
      r.it.broadcast_s = round->broadcast_s;
      r.it.density = round->density;
      r.it.mask_drift = round->mask_drift;
      r.it.frozen = round->frozen;
      r.it.layers = round->layers; /* the same on every rank after the sync */
      r.it.nlayers = round->nlayers;
      for (int i = 0; i < r.np; i++) r.layer_density[i] = px_hsadmm_density(r.h, i);
      r.it.layer_density = r.layer_density;
    } else {
      r.it.density = 1.0;
    }
    int evaluate = last || (cfg->eval_every > 0 && (it + 1) % cfg->eval_every == 0);
    /* H-SADMM re-estimates the statistics for z before evaluating it (and
     * averages those), so averaging the local models' ones would be undone */
    if (!(r.hs && evaluate && cfg->calibrate_batches >= 0))
      PX_CHECK_GOTO(px__average_bn(&r), st, done);

    /* ---- evaluation of the consensus model ---- */
    r.it.test_accuracy = -1;
    r.it.test_loss = -1;
    if (evaluate) {
      px_status_t est = PX_OK;
      if (r.hs) {
        px__load_z(&r, 1);
        est = px__calibrate(&r);
      }
      if (est == PX_OK) est = px__evaluate(&r, &test_loss, &test_acc);
      if (r.hs) memcpy(px_model_flat_params(r.m)->data, r.backup, r.numel * sizeof(float));
      PX_CHECK_GOTO(est, st, done);
      r.it.test_accuracy = test_acc;
      r.it.test_loss = test_loss;
    }

    /* ---- figures of the iteration, summed over ranks ---- */
    double v[4] = {es.loss, es.accuracy, (double)(px__traffic(comm, PX_TIER_INTRA) - intra0),
                   (double)(px__traffic(comm, PX_TIER_INTER) - inter0)};
    r.it.rank_bytes_intra = (uint64_t)v[2];
    r.it.rank_bytes_inter = (uint64_t)v[3];
    PX_CHECK_GOTO(px_comm_allreduce(r.world, v, v, 4, PX_COMM_F64, PX_COMM_SUM), st, done);
    int N = px_group_size(r.world);
    r.it.loss = v[0] / N;
    r.it.train_accuracy = v[1] / N;
    r.it.bytes_intra = (uint64_t)v[2];
    r.it.bytes_inter = (uint64_t)v[3];
    if (r.hs)
      r.it.bytes_inter_dense = round->bytes_inter_dense + (r.it.bytes_inter - round->bytes_inter);
    else if (cfg->kind == PX_STRATEGY_DDP)
      r.it.bytes_inter_dense = r.it.bytes_inter;
    else
      r.it.bytes_inter_dense = px__dense_ring_inter(&r, steps);
    r.it.last = last;
    res->bytes_intra += r.it.bytes_intra;
    res->bytes_inter += r.it.bytes_inter;
    res->bytes_inter_dense += r.it.bytes_inter_dense;

    /* ---- control: rank 0 decides, everyone applies ---- */
    double t1 = px__now();
    if (r.hs) {
      PX_CHECK_GOTO(px_hsadmm_decide(r.h, px__hs_control, &r, &stop), st, done);
    } else {
      double flag = 0;
      if (rank0) {
        px_hsadmm_decision_t d = {r.rho1, r.rho2, 0, 0, ""};
        if (control) {
          px_status_t cst = control(ctx, &r.it, &d);
          flag = cst < 0 ? -1 : d.stop;
          if (cst < 0) {
            px_comm_broadcast(r.world, &flag, 1, PX_COMM_F64, 0);
            st = cst;
            goto done;
          }
        }
      }
      PX_CHECK_GOTO(px_comm_broadcast(r.world, &flag, 1, PX_COMM_F64, 0), st, done);
      if (flag < 0) {
        st = px_set_error(PX_ERR_PEER, "rank 0's controller failed: stopping");
        goto done;
      }
      stop = flag > 0;
    }
    r.it.control_s = px__now() - t1;
    res->iterations = it + 1;
    res->density = r.it.density;
    if (cfg->observe) PX_CHECK_GOTO(cfg->observe(cfg->observe_ctx, &r.it), st, done);
  }
  /* the final model: z with BN statistics of its own (already there when
   * the last iteration evaluated it) */
  if (r.hs) px__load_z(&r, 0);
  if (test_acc < 0 || (r.it.test_accuracy < 0 && res->iterations > 0)) {
    /* stopped early by the controller before an evaluation: evaluate now */
    if (r.hs) PX_CHECK_GOTO(px__calibrate(&r), st, done);
    PX_CHECK_GOTO(px__evaluate(&r, &test_loss, &test_acc), st, done);
  }
  res->test_accuracy = test_acc;
  res->test_loss = test_loss;
  res->seconds = px__now() - t_start;
  snprintf(res->stop_reason, sizeof res->stop_reason, "%s",
           stop ? "controller" : "iterations");
  st = PX_OK;
done:
  for (int i = 0; r.hs && r.sgd && i < r.np; i++) px_sgd_set_prox(r.sgd, i, NULL, NULL, 0.0f);
  px__teardown(&r);
  return st;
}
