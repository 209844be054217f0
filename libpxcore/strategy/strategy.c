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
 * runs it on a CPU model too, which is how the CPU tests check it. */
#include <math.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

#include "prunex/cuda_kernels.h"
#include "prunex/strategy.h"
#include "px_check.h"
#include "strategy/ddp_overlap.h"
#include "strategy/px_resume.h"

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
  float *backup;            /* [numel] host model: theta while z is evaluated; staged: z on its
                               way to the device */
  double *layer_density;    /* [np] kept fraction of each tensor of z */
  double *rho1, *rho2;      /* [np] decision arrays for ddp/topk */
  px__ddp_buckets_t *ddp;   /* ddp over host memory: gradient buckets (ddp_overlap.h) */
  /* top-k */
  float *err;               /* [numel] error feedback */
  uint32_t *idx;            /* [max tensor] selection workspace */
  uint8_t *sendbuf, *recvbuf;
  size_t kpairs;            /* pairs this rank sends per step */
  uint64_t rng;
  /* staged runs (device models; see the file comment) */
  int staged;
  int cuda;                 /* the model is on a CUDA device */
  int direct;               /* world collectives take the device buffers (NCCL) */
  float *h_theta;           /* [numel] host mirror of the parameters (H-SADMM's theta) */
  float *h_grad;            /* [numel] host mirror of the gradients (ddp, topk) */
  float *h_buf;             /* [BN statistics] host mirror */
  float *h_zu;              /* [2 numel] z and u of the local phase, host side */
  px_tensor_t d_zu;         /* [2 numel] the same on the model's device */
  uint8_t *h_mask;          /* [all masks] the frozen masks, host side */
  px_tensor_t d_mask;       /* the same on the model's device */
  size_t *moff;             /* [np] offset of parameter i's mask in d_mask */
  /* checkpoints (issue 14) */
  px_resume_t *rs;
  int64_t ck[8];            /* last iteration done, trainer position [3], bytes [3], stop */
  double ckf[2];            /* test loss, test accuracy */
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

/* ---- host mirrors of a device model ---------------------------------------------- */

static px_status_t px__down(const px_tensor_t *t, float *host) {
  return px_tensor_copy_to_host(t, host, px_tensor_plain_bytes(t));
}

static px_status_t px__up(const px_tensor_t *t, const float *host) {
  px_tensor_t v = *t; /* a view: the model's tensors are handed out const */
  return px_tensor_copy_from_host(&v, host, px_tensor_plain_bytes(t));
}

/* Averages a model tensor (plain f32) over the world, in place: directly on
 * a host model or when NCCL takes the device buffer, else through its host
 * mirror. list: the bucketed collective (gradients). */
static px_status_t px__world_average(px__run_t *r, const px_tensor_t *t, float *mirror,
                                     int list) {
  size_t n = px_tensor_numel(t);
  float *buf = r->staged && !r->direct ? mirror : t->data;
  if (buf == mirror) PX_CHECK(px__down(t, mirror));
  void *bufs[1] = {buf};
  PX_CHECK(list ? px_comm_allreduce_list(r->world, bufs, &n, 1, PX_COMM_F32, PX_COMM_AVG)
                : px_comm_allreduce(r->world, buf, buf, n, PX_COMM_F32, PX_COMM_AVG));
  return buf == mirror ? px__up(t, mirror) : PX_OK;
}

/* Rank 0's copy of a model tensor on every rank, the same way. */
static px_status_t px__world_broadcast(px__run_t *r, const px_tensor_t *t, float *mirror) {
  float *buf = r->staged && !r->direct ? mirror : t->data;
  if (buf == mirror) PX_CHECK(px__down(t, mirror));
  PX_CHECK(px_comm_broadcast(r->world, buf, px_tensor_numel(t), PX_COMM_F32, 0));
  return buf == mirror ? px__up(t, mirror) : PX_OK;
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
  if (!r->ddp) return px__world_average(r, g, r->h_grad, 1); /* NCCL on the device buffer */
  if (!r->staged) return px__ddp_buckets_finish(r->ddp, g->data);
  PX_CHECK(px__down(g, r->h_grad));
  PX_CHECK(px__ddp_buckets_finish(r->ddp, r->h_grad));
  return px__up(g, r->h_grad);
}

/* ---- H-SADMM after the freeze: training inside the masks ---------------------- */

/* Zeroes w (the model's memory) outside parameter i's mask; on a device
 * model w and the mask are device memory and the kernel is queued after the
 * backward pass (the ops streams are blocking streams, ordered with the
 * default stream), with no synchronisation. */
static px_status_t px__apply_mask(const px__run_t *r, int i, float *w) {
  px_conv_shape_t s = r->hp[i].shape;
  const uint8_t *mask =
      r->staged ? (const uint8_t *)r->d_mask.data + r->moff[i] : px_hsadmm_mask(r->h, i);
  if (!r->cuda) {
    px_prune_apply_mask(w, s, mask);
    return PX_OK;
  }
  return px_cuda_prune_apply_mask(w, mask, mask + s.c_out, mask + s.c_out + s.c_in, s, NULL);
}

static px_status_t px__masked_hook(void *ctx, px_model_t *m) {
  px__run_t *r = ctx;
  if (!px_hsadmm_frozen(r->h)) return PX_OK;
  for (int i = 0; i < r->np; i++) {
    if (!r->hp[i].prunable) continue;
    const px_model_param_t *p = px_model_param(m, i);
    PX_CHECK(px__apply_mask(r, i, p->value->data));
    PX_CHECK(px__apply_mask(r, i, p->grad->data));
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
  const px_tensor_t *flat = px_model_flat_grads(m);
  float *grad = r->staged ? r->h_grad : flat->data;
  if (r->staged) PX_CHECK(px__down(flat, grad));
  uint8_t *out = r->sendbuf;
  size_t off = 0;
  for (int i = 0; i < r->np; i++) {
    const px_model_param_t *p = px_model_param(m, i);
    size_t n = px_tensor_numel(p->value);
    size_t k = px_prune_keep_count(r->cfg->topk_ratio, n);
    float *e = r->err + off;
    const float *g = grad + off;
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
  return r->staged ? px__up(flat, grad) : PX_OK;
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

static px_status_t px__average_bn(px__run_t *r) {
  if (px_model_num_buffers(r->m) == 0) return PX_OK;
  return px__world_average(r, px_model_flat_buffers(r->m), r->h_buf, 0);
}

/* BN statistics for the weights now in the model (z): forward passes on
 * training batches, then the average over ranks. */
static px_status_t px__calibrate(px__run_t *r) {
  int32_t n = r->cfg->calibrate_batches == 0 ? 20 : r->cfg->calibrate_batches;
  if (n < 0) return PX_OK;
  PX_CHECK(px_trainer_calibrate_bn(r->t, n));
  return px__average_bn(r);
}

/* Copies z into the model's parameters. A host model saves theta first
 * when backup is set; a staged one has theta in its mirror since the round
 * (px__restore_theta puts either back). */
static px_status_t px__load_z(px__run_t *r, int backup) {
  const px_tensor_t *flat = px_model_flat_params(r->m);
  float *dst = r->staged ? r->backup : flat->data;
  if (backup && !r->staged) memcpy(r->backup, dst, r->numel * sizeof(float));
  size_t off = 0;
  for (int i = 0; i < r->np; i++) {
    memcpy(dst + off, px_hsadmm_z(r->h, i), r->hp[i].numel * sizeof(float));
    off += r->hp[i].numel;
  }
  return r->staged ? px__up(flat, dst) : PX_OK;
}

static px_status_t px__restore_theta(px__run_t *r) {
  const px_tensor_t *flat = px_model_flat_params(r->m);
  if (r->staged) return px__up(flat, r->h_theta);
  memcpy(flat->data, r->backup, r->numel * sizeof(float));
  return PX_OK;
}

/* Before the local phase of H-SADMM: the proximal targets z_i and u (copied
 * to the device of a staged model), the masks once frozen, and the start
 * from the global consensus: it is what all ranks share, so the nodes cannot
 * drift apart between the rounds, whatever rho2 is (the proximal target
 * stays z_i - u). */
static px_status_t px__local_start(px__run_t *r, int it) {
  const px_tensor_t *flat = px_model_flat_params(r->m);
  int restart = !r->cfg->keep_local && it > 0;
  float *theta = r->staged ? r->h_theta : flat->data;
  float *dz = r->d_zu.data, *du = dz ? dz + r->numel : NULL;
  size_t off = 0;
  for (int i = 0; i < r->np; i++) {
    size_t n = r->hp[i].numel;
    const float *z, *u;
    float rho;
    px_hsadmm_prox(r->h, i, &z, &u, &rho);
    if (r->staged) {
      memcpy(r->h_zu + off, z, n * sizeof(float));
      if (u) memcpy(r->h_zu + r->numel + off, u, n * sizeof(float));
      else memset(r->h_zu + r->numel + off, 0, n * sizeof(float));
      z = dz + off;
      u = du + off;
    }
    PX_CHECK(px_sgd_set_prox(r->sgd, i, z, u, rho));
    if (restart) memcpy(theta + off, px_hsadmm_z(r->h, i), n * sizeof(float));
    off += n;
  }
  if (!r->staged) return PX_OK;
  PX_CHECK(px_tensor_copy_from_host(&r->d_zu, r->h_zu, 2 * r->numel * sizeof(float)));
  if (restart) PX_CHECK(px__up(flat, r->h_theta));
  if (!px_hsadmm_frozen(r->h)) return PX_OK;
  for (int i = 0; i < r->np; i++) /* the union masks, for the mask kernel */
    if (r->hp[i].prunable)
      memcpy(r->h_mask + r->moff[i], px_hsadmm_mask(r->h, i), px_prune_mask_size(r->hp[i].shape));
  return px_tensor_copy_from_host(&r->d_mask, r->h_mask, px_tensor_plain_bytes(&r->d_mask));
}

/* Adapter from the H-SADMM round to the strategy's iteration record. */
static px_status_t px__hs_control(void *ctx, const px_hsadmm_round_t *round,
                                  px_hsadmm_decision_t *d) {
  px__run_t *r = ctx;
  (void)round; /* its figures are in r->it already */
  return r->control(r->ctx, &r->it, d);
}

/* A device buffer of n elements on the model's device. */
static px_status_t px__device_buffer(px__run_t *r, px_tensor_t *t, px_dtype_t dt, size_t n,
                                     const char *name) {
  int64_t dims[1] = {(int64_t)(n ? n : 1)};
  PX_CHECK(px_tensor_init(t, px_model_flat_params(r->m)->device, dt, 1, dims));
  return px_tensor_alloc(t, name);
}

/* The host mirrors and device buffers of a staged run. */
static px_status_t px__setup_staging(px__run_t *r) {
  const px_strategy_config_t *c = r->cfg;
  r->cuda = px_model_flat_params(r->m)->device.kind == PX_DEVICE_CUDA;
  r->staged = r->cuda || c->stage_host;
  if (!r->staged) return PX_OK;
  r->direct = r->cuda && px_group_nccl(r->world);
  r->h_theta = px_malloc(r->numel * sizeof(float), "strategy.theta_mirror");
  size_t nbuf = px_tensor_numel(px_model_flat_buffers(r->m));
  r->h_buf = px_malloc((nbuf ? nbuf : 1) * sizeof(float), "strategy.bn_mirror");
  if (!r->h_theta || !r->h_buf) return PX_ERR_NOMEM;
  PX_CHECK(px__down(px_model_flat_params(r->m), r->h_theta));
  if (!r->hs) {
    r->h_grad = px_malloc(r->numel * sizeof(float), "strategy.grad_mirror");
    return r->h_grad ? PX_OK : PX_ERR_NOMEM;
  }
  r->h_zu = px_malloc(2 * r->numel * sizeof(float), "strategy.prox_mirror");
  r->moff = px_calloc((size_t)r->np, sizeof *r->moff, "strategy.mask_offsets");
  if (!r->h_zu || !r->moff) return PX_ERR_NOMEM;
  PX_CHECK(px__device_buffer(r, &r->d_zu, PX_DTYPE_F32, 2 * r->numel, "strategy.prox"));
  size_t mbytes = 0;
  for (int i = 0; i < r->np; i++) {
    r->moff[i] = mbytes;
    if (r->hp[i].prunable) mbytes += px_prune_mask_size(r->hp[i].shape);
  }
  r->h_mask = px_calloc(mbytes ? mbytes : 1, 1, "strategy.mask_mirror");
  if (!r->h_mask) return PX_ERR_NOMEM;
  return px__device_buffer(r, &r->d_mask, PX_DTYPE_U8, mbytes, "strategy.masks");
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
    PX_CHECK(px__setup_staging(r));
    size_t off = 0;
    for (int i = 0; r->staged && i < r->np; off += r->hp[i].numel, i++)
      r->hp[i].theta = r->h_theta + off; /* H-SADMM reads theta from the mirror */
    /* the regulariser moves from the local steps into the z update (the
     * global problem's lambda/2 ||z||^2), so it is not applied twice */
    double lambda = px_sgd_weight_decay(r->sgd);
    px_sgd_set_weight_decay(r->sgd, 0.0);
    px_hsadmm_config_t hc = {c->kind == PX_STRATEGY_HSADMM_FLAT, c->rho1, c->rho2, lambda, c->keep,
                             c->bucket_bytes};
    PX_CHECK(px_hsadmm_create(r->comm, r->hp, r->np, &hc, &r->h));
    PX_CHECK(px_hsadmm_set_quantize(r->h, c->quantize_bits, c->seed));
    /* every rank starts from the consensus */
    PX_CHECK(px__load_z(r, 0));
    px_trainer_set_grad_hook(r->t, px__masked_hook, r);
  } else if (c->kind == PX_STRATEGY_DDP) {
    /* the same initial model everywhere */
    PX_CHECK(px__setup_staging(r));
    PX_CHECK(px__world_broadcast(r, px_model_flat_params(r->m), r->h_theta));
    if (!r->direct)
      PX_CHECK(px__ddp_buckets_create(r->m, r->world, c->bucket_bytes,
                                      !r->staged && !c->ddp_no_overlap, &r->ddp));
    px_trainer_set_grad_hook(r->t, px__ddp_hook, r);
  } else {
    PX_REQUIRE(c->topk_ratio > 0 && c->topk_ratio <= 1, "comm.topk_ratio = %g: must be in (0, 1]",
               c->topk_ratio);
    PX_CHECK(px__setup_staging(r));
    PX_CHECK(px__world_broadcast(r, px_model_flat_params(r->m), r->h_theta));
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

/* ---- checkpoints (issue 14) ------------------------------------------------------- */

/* Lists the run's state for px_resume. H-SADMM's local models, momentum
 * and duals are each rank's own; the baselines' model and momentum are the
 * same on every rank (one averaged update), Top-K's residuals are not. */
static px_status_t px__resume_setup(px__run_t *r) {
  const px_strategy_config_t *c = r->cfg;
  PX_CHECK(px_resume_create(r->comm, c->checkpoint_dir, c->checkpoint_keep ? c->checkpoint_keep : 2,
                            &r->rs));
  px_rs_scope_t model = r->hs ? PX_RS_RANK : PX_RS_GLOBAL;
  PX_CHECK(px_resume_add(r->rs, "run.scalars", PX_RS_GLOBAL, PX_ST_I64, r->ck, sizeof r->ck));
  PX_CHECK(px_resume_add(r->rs, "run.figures", PX_RS_GLOBAL, PX_ST_F64, r->ckf, sizeof r->ckf));
  PX_CHECK(px_resume_add_tensor(r->rs, "model.params", model,
                                (px_tensor_t *)px_model_flat_params(r->m)));
  if (px_model_num_buffers(r->m) > 0) /* averaged over the ranks every iteration */
    PX_CHECK(px_resume_add_tensor(r->rs, "model.buffers", PX_RS_GLOBAL,
                                  (px_tensor_t *)px_model_flat_buffers(r->m)));
  for (int i = 0; i < r->np; i++) {
    char name[96];
    snprintf(name, sizeof name, "sgd.momentum.%d", i);
    px_tensor_t *mom = px_sgd_momentum(r->sgd, i);
    if (mom && px_tensor_plain_bytes(mom) > 0) PX_CHECK(px_resume_add_tensor(r->rs, name, model, mom));
  }
  if (r->hs) PX_CHECK(px_hsadmm_resume_items(r->h, r->rs));
  if (r->err) {
    PX_CHECK(px_resume_add(r->rs, "topk.residual", PX_RS_RANK, PX_ST_F32, r->err,
                           r->numel * sizeof(float)));
    PX_CHECK(px_resume_add(r->rs, "topk.rng", PX_RS_RANK, PX_ST_U64, &r->rng, sizeof r->rng));
  }
  return PX_OK;
}

/* Resumes from the newest checkpoint every rank can read; *first: the
 * iteration to run next. */
static px_status_t px__resume(px__run_t *r, px_strategy_result_t *res, int *first) {
  int R, node_fresh, rank_fresh;
  *first = 0;
  res->resumed_from = -1;
  PX_CHECK(px_resume_load(r->rs, &R, &node_fresh, &rank_fresh));
  if (R < 0) return PX_OK;
  if (r->hs) {
    PX_CHECK(px_hsadmm_resumed(r->h, node_fresh, rank_fresh));
    if (rank_fresh) PX_CHECK(px__load_z(r, 0)); /* theta = z, momentum 0 */
  }
  PX_CHECK(px_trainer_set_position(r->t, r->ck + 1));
  res->bytes_intra = (uint64_t)r->ck[4];
  res->bytes_inter = (uint64_t)r->ck[5];
  res->bytes_inter_dense = (uint64_t)r->ck[6];
  res->resumed_from = R;
  res->iterations = R + 1;
  *first = r->ck[7] ? r->cfg->iterations : R + 1; /* the controller had stopped it */
  return PX_OK;
}

static px_status_t px__checkpoint(px__run_t *r, int it, int stop, px_strategy_result_t *res,
                                  double loss, double acc) {
  r->ck[0] = it;
  r->ck[7] = stop;
  px_trainer_position(r->t, r->ck + 1);
  r->ck[4] = (int64_t)res->bytes_intra;
  r->ck[5] = (int64_t)res->bytes_inter;
  r->ck[6] = (int64_t)res->bytes_inter_dense;
  r->ckf[0] = loss;
  r->ckf[1] = acc;
  uint64_t bytes;
  double s;
  PX_CHECK(px_resume_save(r->rs, it, &bytes, &s));
  res->checkpoints++;
  res->checkpoint_seconds += s;
  res->checkpoint_bytes = bytes;
  px_log(PX_LOG_INFO, "checkpoint of iteration %d: %.1f MB, training held %.1f ms", it,
         (double)bytes / 1e6, s * 1e3);
  return PX_OK;
}

static void px__teardown(px__run_t *r) {
  px_resume_destroy(r->rs);
  px_trainer_set_grad_hook(r->t, NULL, NULL);
  px__ddp_buckets_destroy(r->ddp);
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
  px_free(r->h_theta);
  px_free(r->h_grad);
  px_free(r->h_buf);
  px_free(r->h_zu);
  px_free(r->h_mask);
  px_free(r->moff);
  px_tensor_release(&r->d_zu);
  px_tensor_release(&r->d_mask);
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
  double t_start = px__now(), test_loss = -1, test_acc = -1;
  r.ckf[0] = r.ckf[1] = -1;
  PX_CHECK_GOTO(px__setup(&r), st, done);
  int first = 0;
  res->resumed_from = -1;
  if (cfg->checkpoint_every > 0 && cfg->checkpoint_dir) {
    PX_CHECK_GOTO(px__resume_setup(&r), st, done);
    PX_CHECK_GOTO(px__resume(&r, res, &first), st, done);
    test_loss = r.ckf[0];
    test_acc = r.ckf[1];
  }
  int64_t steps = cfg->local_steps ? cfg->local_steps : px_trainer_steps_per_epoch(trainer);
  px_trainer_set_schedule_steps(trainer, steps * cfg->iterations);
  int stop = 0, it;
  for (it = first; it < cfg->iterations && !stop; it++) {
    int last = it == cfg->iterations - 1;
    memset(&r.it, 0, sizeof r.it);
    r.it.iteration = it;
    r.it.layer_names = r.names;
    uint64_t intra0 = px__traffic(comm, PX_TIER_INTRA), inter0 = px__traffic(comm, PX_TIER_INTER);

    /* ---- local phase ---- */
    double t0 = px__now();
    if (r.hs) PX_CHECK_GOTO(px__local_start(&r, it), st, done);
    px_epoch_stats_t es;
    PX_CHECK_GOTO(px_trainer_steps(trainer, steps, &es), st, done);
    r.it.local_s = px__now() - t0;
    r.it.epoch = (double)px_trainer_global_step(trainer) / (double)px_trainer_steps_per_epoch(trainer);

    /* ---- synchronisation (H-SADMM) ---- */
    px_hsadmm_round_t *round = NULL;
    if (r.hs) {
      if (r.staged) PX_CHECK_GOTO(px__down(px_model_flat_params(r.m), r.h_theta), st, done);
      PX_CHECK_GOTO(px_hsadmm_sync(r.h, &round), st, done);
      r.it.intra_s = round->intra_s;
      r.it.projection_s = round->projection_s;
      r.it.inter_s = round->inter_s;
      r.it.broadcast_s = round->broadcast_s;
      r.it.density = round->density;
      r.it.mask_drift = round->mask_drift;
      r.it.mask_groups = round->mask_groups;
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
      if (r.hs) est = px__load_z(&r, 1);
      if (r.hs && est == PX_OK) est = px__calibrate(&r);
      if (est == PX_OK) est = px__evaluate(&r, &test_loss, &test_acc);
      if (r.hs) {
        px_status_t rst = px__restore_theta(&r);
        if (est == PX_OK) est = rst;
      }
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
    if (r.rs && ((it + 1) % cfg->checkpoint_every == 0 || last || stop))
      PX_CHECK_GOTO(px__checkpoint(&r, it, stop, res, test_loss, test_acc), st, done);
  }
  if (r.rs) { /* the last checkpoint lands on every rank before the run ends */
    double s;
    PX_CHECK_GOTO(px_resume_finish(r.rs, &s), st, done);
    res->checkpoint_seconds += s;
  }
  /* the final model: z with BN statistics of its own (already there when
   * the last iteration evaluated it) */
  if (r.hs) PX_CHECK_GOTO(px__load_z(&r, 0), st, done);
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
