/* The hsadmm and hsadmm-flat strategies: the H-SADMM round of admm/hsadmm.c
 * over the CNN trainer (strategy.h describes both; they differ only in the
 * round's topology, so they share this file and have two table entries).
 *
 * Before the local phase the proximal targets z_i and u (and, once frozen,
 * the union masks) go to the SGD step; after it the round runs on theta;
 * the consensus z is what is evaluated and returned. On a staged run (a
 * device model, see strategy.c) theta crosses through the run's host mirror
 * and the proximal targets and masks through device buffers of this file. */
#include <string.h>

#include "admm/admm_int.h"
#include "admm/hsadmm_state.h"
#include "nn/px_train_int.h"
#include "prunex/cuda_kernels.h"
#include "prunex/hsadmm_internal.h"
#include "prunex/prune_internal.h"
#include "px_check.h"
#include "strategy/strategy_int.h"

typedef struct {
  px_hsadmm_t *h;
  px_hsadmm_param_t *hp;    /* [np] */
  px_hsadmm_round_t *round; /* of the current iteration */
  float *backup;            /* [numel] host model: theta while z is evaluated; staged: z on its
                               way to the device */
  double *layer_density;    /* [np] kept fraction of each tensor of z */
  /* staged runs */
  float *h_zu;              /* [2 numel] z and u of the local phase, host side */
  px_tensor_t d_zu;         /* [2 numel] the same on the model's device */
  uint8_t *h_mask;          /* [all masks] the frozen masks, host side */
  px_tensor_t d_mask;       /* the same on the model's device */
  px__strategy_run_t *run;  /* for the grad hook and the control adapter */
  /* the device-state round (cfg.hsadmm_state): theta, z and the duals stay
   * where the model is; the proximal targets are the state's own buffers */
  int dev;
  px_tensor_t d_backup;     /* [numel] theta while z is evaluated (a GPU model) */
  float *theta_backup;      /* d_backup's data, or backup on a CPU model */
  float prox_f;             /* the factor on the pull of this local phase (final_prox) */
} px__hsadmm_strategy_t;

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
  /* a depthwise conv between them, and the batch norms after it, lose
   * channel c with the group (px_model_channel_follower) */
  for (int i = 0; i < np; i++) {
    int k = px_model_channel_follower(m, i);
    const px_tensor_t *v = px_model_param(m, i)->value;
    int coupled = 0;
    for (int j = 0; j < np && k >= 0 && !coupled; j++)
      coupled = out[j].has_consumer && out[j].consumer == k;
    if (!coupled || px__skipped(skip_layers, nskip, out[i].name)) continue;
    out[i].prunable = out[i].has_consumer = out[i].follower = 1;
    out[i].consumer = k;
    out[i].shape = (px_conv_shape_t){(int32_t)v->dims[0], v->ndim == 4 ? (int32_t)v->dims[1] : 1,
                                     v->ndim == 4 ? (int32_t)v->dims[2] : 1,
                                     v->ndim == 4 ? (int32_t)v->dims[3] : 1};
  }
}

/* ---- after the freeze: training inside the masks ------------------------------------ */

/* Zeroes w (the model's memory) outside parameter i's mask; on a device
 * model w and the mask are device memory and the kernel is queued after the
 * backward pass (the ops streams are blocking streams, ordered with the
 * default stream), with no synchronisation. */
static px_status_t px__hsadmm_apply_mask(const px__hsadmm_strategy_t *s, int i, float *w) {
  const px__strategy_run_t *r = s->run;
  const px_prune_layout_t *L = px_sparsity_layout(px_hsadmm_sparsity(s->h), i);
  const uint8_t *mask =
      r->staged ? (const uint8_t *)s->d_mask.data + px_sparsity_mask_offset(px_hsadmm_sparsity(s->h), i)
                : px_hsadmm_mask(s->h, i);
  if (!r->cuda) {
    px_prune_layout_apply(L, w, mask);
    return PX_OK;
  }
  return px_cuda_prune_apply_layout(w, mask, L, NULL);
}

static px_status_t px__hsadmm_masked_hook(void *ctx, px_model_t *m) {
  px__hsadmm_strategy_t *s = ctx;
  if (!px_hsadmm_frozen(s->h)) return PX_OK;
  if (px__ctrain_is(s->run->ctrain, m)) { /* the compact model (compact_train.c) */
    px__ctrain_mask(s->run->ctrain);
    return PX_OK;
  }
  for (int i = 0; i < s->run->np; i++) {
    if (!s->hp[i].prunable) continue;
    const px_model_param_t *p = px_model_param(m, i);
    PX_CHECK(px__hsadmm_apply_mask(s, i, p->value->data));
    PX_CHECK(px__hsadmm_apply_mask(s, i, p->grad->data));
  }
  return PX_OK;
}

/* ---- the consensus model --------------------------------------------------------------- */

/* Copies z into the model's parameters. A host model saves theta first
 * when backup is set; a staged one has theta in its mirror since the round
 * (restore_local puts either back). */
static px_status_t px__hsadmm_load_z(px__strategy_run_t *r, void *priv, int backup) {
  px__hsadmm_strategy_t *s = priv;
  const px_tensor_t *flat = px_model_flat_params(r->m);
  size_t nb = r->numel * sizeof(float);
  if (s->dev) { /* the families are laid out like the flat parameters */
    if (backup) PX_CHECK(px__hsadmm_state_copy(s->h, s->theta_backup, flat->data, nb));
    return px__hsadmm_state_copy(s->h, flat->data, px_hsadmm_z(s->h, 0), nb);
  }
  float *dst = r->staged ? s->backup : flat->data;
  if (px_hsadmm_pending(s->h)) PX_CHECK(px_hsadmm_overlap_drain(s->h)); /* comm.overlap */
  if (backup && !r->staged) memcpy(s->backup, dst, r->numel * sizeof(float));
  size_t off = 0;
  for (int i = 0; i < r->np; i++) {
    memcpy(dst + off, px_hsadmm_z(s->h, i), s->hp[i].numel * sizeof(float));
    off += s->hp[i].numel;
  }
  return r->staged ? px__strategy_up(flat, dst) : PX_OK;
}

static px_status_t px__hsadmm_restore_theta(px__strategy_run_t *r, void *priv) {
  px__hsadmm_strategy_t *s = priv;
  const px_tensor_t *flat = px_model_flat_params(r->m);
  if (s->dev)
    return px__hsadmm_state_copy(s->h, flat->data, s->theta_backup, r->numel * sizeof(float));
  if (r->staged) return px__strategy_up(flat, r->h_theta);
  memcpy(flat->data, s->backup, r->numel * sizeof(float));
  return PX_OK;
}

/* The factor on the proximal pull of iteration it's local steps
 * (cfg.final_prox): 1 until the masks freeze. Depends only on it and the
 * frozen state, so a resumed run gets the same. */
static float px__hsadmm_prox_factor(const px__strategy_run_t *r, const px__hsadmm_strategy_t *s,
                                    int it) {
  const px_strategy_config_t *c = r->cfg;
  if (!c->final_prox || !px_hsadmm_frozen(s->h)) return 1.0f;
  if (c->final_prox == 2 || c->iterations <= 1) return 0.0f;
  return 1.0f - (float)it / (float)(c->iterations - 1);
}

/* ---- the round ------------------------------------------------------------------------- */

/* The frozen union masks to the device buffer the mask kernel reads. */
static px_status_t px__hsadmm_masks_up(px__strategy_run_t *r, px__hsadmm_strategy_t *s) {
  const px_sparsity_t *sp = px_hsadmm_sparsity(s->h);
  for (int i = 0; i < r->np; i++)
    if (s->hp[i].prunable)
      memcpy(s->h_mask + px_sparsity_mask_offset(sp, i), px_hsadmm_mask(s->h, i),
             px_sparsity_layout(sp, i)->size);
  return px_tensor_copy_from_host(&s->d_mask, s->h_mask, px_tensor_plain_bytes(&s->d_mask));
}

/* comm.overlap: the previous round's exchange goes out as this local phase
 * begins (theta has read z already); this round's sync exchanges at once
 * where z will be read: an evaluated, checkpointed or last round. */
static px_status_t px__hsadmm_overlap_begin(px__strategy_run_t *r, px__hsadmm_strategy_t *s,
                                            int it) {
  const px_strategy_config_t *c = r->cfg;
  if (!c->overlap) return PX_OK;
  int drain = it == c->iterations - 1 || (c->eval_every > 0 && (it + 1) % c->eval_every == 0) ||
              (c->checkpoint_every > 0 && (it + 1) % c->checkpoint_every == 0);
  px_hsadmm_set_drain(s->h, drain);
  return px_hsadmm_overlap_start(s->h);
}

/* Before the local phase: the proximal targets z_i and u (copied to the
 * device of a staged model), the masks once frozen, and the start from the
 * global consensus: it is what all ranks share, so the nodes cannot drift
 * apart between the rounds, whatever rho2 is (the proximal target stays
 * z_i - u). */
/* The device-state round's local phase: the state's own z_i (or z) and u
 * are the proximal targets, the restart copies z where the model is. */
static px_status_t px__hsadmm_before_local_dev(px__strategy_run_t *r, px__hsadmm_strategy_t *s,
                                               int it) {
  float f = px__hsadmm_prox_factor(r, s, it);
  for (int i = 0; i < r->np; i++) {
    const float *z, *u;
    float rho;
    px_hsadmm_prox(s->h, i, &z, &u, &rho);
    PX_CHECK(px_sgd_set_prox(r->sgd, i, z, u, rho * f));
  }
  if (!r->cfg->keep_local && it > 0) PX_CHECK(px__hsadmm_load_z(r, s, 0));
  if (!r->staged || !px_hsadmm_frozen(s->h)) return PX_OK;
  return px__hsadmm_masks_up(r, s);
}

/* ---- compact training after the freeze (compact_train.c) ------------------------------ */

static void px__hsadmm_prox_of(void *ctx, int i, const float **z, const float **u, float *rho) {
  const px__hsadmm_strategy_t *s = ctx;
  px_hsadmm_prox(s->h, i, z, u, rho);
  *rho *= s->prox_f;
}

/* The first local phase after the freeze builds the compact model from the
 * masked dense model (keep: the masks as 0/1 values, in the backup buffer
 * the evaluation uses later); a graph compaction cannot follow trains dense
 * (logged). Every such phase then runs on the compact model. */
static px_status_t px__hsadmm_compact_enter(px__strategy_run_t *r, px__hsadmm_strategy_t *s) {
  if (!r->compact_local || !px_hsadmm_frozen(s->h)) return PX_OK;
  if (!r->ctrain) {
    float *theta = px_model_flat_params(r->m)->data, *keep = s->backup;
    for (size_t j = 0; j < r->numel; j++) keep[j] = 1.0f;
    size_t off = 0;
    for (int i = 0; i < r->np; off += s->hp[i].numel, i++) {
      if (!s->hp[i].prunable) continue;
      PX_CHECK(px__hsadmm_apply_mask(s, i, theta + off));
      PX_CHECK(px__hsadmm_apply_mask(s, i, keep + off));
    }
    px_status_t st = px__ctrain_build(r, keep, &r->ctrain);
    if (st == PX_ERR_NOMEM) return st;
    if (st < 0) {
      px_log(PX_LOG_WARN, "local phases train the masked dense model: compact model: %s",
             px_last_error());
      r->compact_local = 0;
      return PX_OK;
    }
  }
  return px__ctrain_enter(r->ctrain, r, px__hsadmm_prox_of, s);
}

static px_status_t px__hsadmm_after_local(px__strategy_run_t *r, void *priv) {
  (void)priv;
  if (r->compact_local && r->ctrain) px__ctrain_leave(r->ctrain, r);
  return PX_OK;
}

static px_status_t px__hsadmm_before_local(px__strategy_run_t *r, void *priv, int it) {
  px__hsadmm_strategy_t *s = priv;
  if (s->dev) return px__hsadmm_before_local_dev(r, s, it);
  const px_tensor_t *flat = px_model_flat_params(r->m);
  int restart = !r->cfg->keep_local && it > 0;
  float *theta = r->staged ? r->h_theta : flat->data;
  float *dz = s->d_zu.data, *du = dz ? dz + r->numel : NULL;
  float f = s->prox_f = px__hsadmm_prox_factor(r, s, it);
  size_t off = 0;
  for (int i = 0; i < r->np; i++) {
    size_t n = s->hp[i].numel;
    const float *z, *u;
    float rho;
    px_hsadmm_prox(s->h, i, &z, &u, &rho);
    if (r->staged) {
      memcpy(s->h_zu + off, z, n * sizeof(float));
      if (u) memcpy(s->h_zu + r->numel + off, u, n * sizeof(float));
      else memset(s->h_zu + r->numel + off, 0, n * sizeof(float));
      z = dz + off;
      u = du + off;
    }
    PX_CHECK(px_sgd_set_prox(r->sgd, i, z, u, rho * f));
    if (restart) px_hsadmm_restart_point(s->h, i, theta + off);
    off += n;
  }
  if (!r->staged) {
    PX_CHECK(px__hsadmm_overlap_begin(r, s, it));
    return px__hsadmm_compact_enter(r, s);
  }
  PX_CHECK(px_tensor_copy_from_host(&s->d_zu, s->h_zu, 2 * r->numel * sizeof(float)));
  if (restart) PX_CHECK(px__strategy_up(flat, r->h_theta));
  if (!px_hsadmm_frozen(s->h)) return PX_OK;
  return px__hsadmm_masks_up(r, s);
}

static px_status_t px__hsadmm_synchronise(px__strategy_run_t *r, void *priv) {
  px__hsadmm_strategy_t *s = priv;
  if (r->staged && !s->dev) PX_CHECK(px__strategy_down(px_model_flat_params(r->m), r->h_theta));
  PX_CHECK(px_hsadmm_sync(s->h, &s->round));
  const px_hsadmm_round_t *round = s->round;
  r->it.intra_s = round->intra_s;
  r->it.projection_s = round->projection_s;
  r->it.inter_s = round->inter_s;
  r->it.broadcast_s = round->broadcast_s;
  r->it.density = round->density;
  r->it.mask_drift = round->mask_drift;
  r->it.mask_groups = round->mask_groups;
  r->it.frozen = round->frozen;
  r->it.layers = round->layers; /* the same on every rank after the sync */
  r->it.nlayers = round->nlayers;
  for (int i = 0; i < r->np; i++) s->layer_density[i] = px_hsadmm_density(s->h, i);
  r->it.layer_density = s->layer_density;
  return PX_OK;
}

/* The value exchange as measured, plus what dense buffers would have added
 * to the round's inter phase. */
static uint64_t px__hsadmm_dense_inter(const px__strategy_run_t *r, void *priv) {
  const px__hsadmm_strategy_t *s = priv;
  return s->round->bytes_inter_dense + (r->it.bytes_inter - s->round->bytes_inter);
}

/* Adapter from the H-SADMM round to the strategy's iteration record. */
static px_status_t px__hsadmm_control(void *ctx, const px_hsadmm_round_t *round,
                                      px_hsadmm_decision_t *d) {
  px__strategy_run_t *r = ctx;
  (void)round; /* its figures are in r->it already */
  return r->control(r->ctx, &r->it, d);
}

static px_status_t px__hsadmm_decide(px__strategy_run_t *r, void *priv, int *stop) {
  px__hsadmm_strategy_t *s = priv;
  return px_hsadmm_decide(s->h, px__hsadmm_control, r, stop);
}

/* ---- checkpoints ---------------------------------------------------------------------- */

/* Each rank's local model, momentum and dual are its own; z, the node
 * consensus and the masks are listed by admm/hsadmm.c. */
_Static_assert((int)PX__ITEM_GLOBAL == (int)PX_RS_GLOBAL && (int)PX__ITEM_NODE == (int)PX_RS_NODE &&
                   (int)PX__ITEM_RANK == (int)PX_RS_RANK,
               "admm_int.h's item scopes are px_resume's");

static px_status_t px__hsadmm_resume_items(px__strategy_run_t *r, void *priv, px__resume_t *rs) {
  px__hsadmm_strategy_t *s = priv;
  PX_CHECK(px__strategy_resume_model(r, rs, PX_RS_RANK));
  px__state_item_t items[PX__HSADMM_MAX_ITEMS];
  int n = px__hsadmm_state_items(s->h, items);
  for (int i = 0; i < n; i++)
    PX_CHECK(px__resume_add(rs, items[i].name, (px_rs_scope_t)items[i].scope, items[i].dtype,
                            items[i].data, items[i].bytes));
  return PX_OK;
}

static px_status_t px__hsadmm_resumed(px__strategy_run_t *r, void *priv, int node_fresh,
                                      int rank_fresh) {
  px__hsadmm_strategy_t *s = priv;
  PX_CHECK(px__hsadmm_state_resumed(s->h, node_fresh, rank_fresh));
  if (rank_fresh) PX_CHECK(px__hsadmm_load_z(r, s, 0)); /* theta = z, momentum 0 */
  return PX_OK;
}

/* ---- set-up ------------------------------------------------------------------------------ */

/* A device buffer of n elements on the model's device. */
static px_status_t px__hsadmm_device_buffer(px__strategy_run_t *r, px_tensor_t *t,
                                            px_dtype_t dt, size_t n, const char *name) {
  int64_t dims[1] = {(int64_t)(n ? n : 1)};
  PX_CHECK(px_tensor_init(t, px_model_flat_params(r->m)->device, dt, 1, dims));
  return px_tensor_alloc(t, name);
}

/* The proximal-target and mask buffers of a staged run (after the H-SADMM
 * state: the masks are laid out as its sparsity set says). */
static px_status_t px__hsadmm_setup_staging(px__strategy_run_t *r, px__hsadmm_strategy_t *s) {
  if (s->dev) { /* the proximal targets are the state's: only theta's backup */
    PX_CHECK(px__hsadmm_device_buffer(r, &s->d_backup, PX_DTYPE_F32, r->numel,
                                      "strategy.theta_backup"));
    s->theta_backup = s->d_backup.data;
  } else {
    s->h_zu = px_malloc(2 * r->numel * sizeof(float), "strategy.prox_mirror");
    if (!s->h_zu) return PX_ERR_NOMEM;
    PX_CHECK(px__hsadmm_device_buffer(r, &s->d_zu, PX_DTYPE_F32, 2 * r->numel, "strategy.prox"));
  }
  const px_sparsity_t *sp = px_hsadmm_sparsity(s->h);
  size_t mbytes = px_sparsity_mask_bytes(sp);
  s->h_mask = px_calloc(mbytes ? mbytes : 1, 1, "strategy.mask_mirror");
  if (!s->h_mask) return PX_ERR_NOMEM;
  return px__hsadmm_device_buffer(r, &s->d_mask, PX_DTYPE_U8, mbytes, "strategy.masks");
}

/* The table of the device-state round for this run, or NULL for the host
 * state (cfg.hsadmm_state). */
static px_status_t px__hsadmm_state_ops(const px__strategy_run_t *r, const px__hss_ops_t **ops) {
  const px_strategy_config_t *c = r->cfg;
  *ops = NULL;
  PX_REQUIRE(c->hsadmm_state >= 0 && c->hsadmm_state <= 2,
             "strategy: hsadmm_state = %d: must be 0 (auto), 1 (host) or 2 (host buffers "
             "through the device-state path)", (int)c->hsadmm_state);
  /* what the device-state round does not do: those runs keep the host state */
  int host_only = c->quantize_bits || c->overlap || c->compress || c->keep.nm_n ||
                  (c->checkpoint_every > 0 && c->checkpoint_dir);
  if (c->hsadmm_state == 2) {
    PX_REQUIRE(!r->staged && !host_only,
               "strategy: hsadmm_state = 2 runs on a CPU model without stage_host, "
               "comm.quantize, comm.overlap, comm.compress, checkpoints or N:M masks");
    *ops = &px__hss_host_ops;
  } else if (c->hsadmm_state == 0 && r->cuda && !host_only &&
             px_tensor_is_plain(px_model_flat_params(r->m))) { /* OIHW fp32, as z is */
    *ops = &px__hss_cuda_ops;
  }
  return PX_OK;
}

/* Says in the job log when the model has FC layers besides the classifier
 * (an imported head such as mobilenet_v3's Linear, Hardswish, Linear): no
 * FC layer is pruned, so the hidden ones stay dense with it. */
static void px__hsadmm_log_fc(const px_model_t *m) {
  int nfc = 0;
  for (int i = 0; i < px_model_num_params(m); i++)
    nfc += px_model_param(m, i)->kind == PX_WEIGHT_FC;
  if (nfc > 1)
    px_log(PX_LOG_INFO, "%d FC (Linear) layers in the classifier: FC layers are not pruned, "
           "all %d stay dense", nfc, nfc);
}

/* prune.mac_keep: the channel keep that meets the budget, the same on
 * every rank (px_strategy_mac_keep reads the graph alone). The uncoupled
 * convs keep their inputs unless the spec says otherwise: then the count
 * is the compact model's, where their own pruning would leave it a loose
 * bound (the channels another reader keeps stay). */
static px_status_t px__hsadmm_mac_budget(const px__strategy_run_t *r,
                                         const px__hsadmm_strategy_t *s, px_prune_keep_t *keep) {
  uint64_t macs = 0, dense = px_model_macs(r->m);
  if (keep->uncoupled_keep == 0.0) keep->uncoupled_keep = 1.0;
  PX_CHECK(px_strategy_mac_keep(r->m, s->hp, r->cfg->mac_keep, &keep->channel_keep, &macs));
  if (px_comm_rank(r->comm) == 0)
    px_log(PX_LOG_INFO, "prune.mac_keep %g: channel keep %.6g, %.2f M of the dense %.2f M "
           "multiply-accumulates per image (%.1f%%)", r->cfg->mac_keep, keep->channel_keep,
           (double)macs / 1e6, (double)dense / 1e6, 100.0 * (double)macs / (double)dense);
  return PX_OK;
}

static px_status_t px__hsadmm_create(px__strategy_run_t *r, void **priv) {
  const px_strategy_config_t *c = r->cfg;
  px__hsadmm_strategy_t *s = px_calloc(1, sizeof *s, "strategy.hsadmm");
  if (!s) return PX_ERR_NOMEM;
  *priv = s;
  s->run = r;
  s->hp = px_calloc((size_t)r->np, sizeof *s->hp, "strategy.hsadmm_params");
  s->backup = px_malloc(r->numel * sizeof(float), "strategy.backup");
  s->layer_density = px_calloc((size_t)r->np, sizeof(double), "strategy.density");
  if (!s->hp || !s->backup || !s->layer_density) return PX_ERR_NOMEM;
  px_strategy_hsadmm_params(r->m, c->skip_layers, c->nskip, s->hp);
  px__hsadmm_log_fc(r->m);
  const px__hss_ops_t *ops;
  PX_CHECK(px__hsadmm_state_ops(r, &ops));
  s->dev = ops != NULL;
  r->compact_local = px__ctrain_wanted(r, s->dev);
  s->theta_backup = s->backup;
  size_t off = 0;
  for (int i = 0; r->staged && !s->dev && i < r->np; off += s->hp[i].numel, i++)
    s->hp[i].theta = r->h_theta + off; /* H-SADMM reads theta from the mirror */
  /* the regulariser acts once: in the local steps (as DDP's; lambda 0
   * here), or moved into the z update (the global problem's lambda/2
   * ||z||^2: its dual leaves the local models about lambda / N of decay,
   * 0.47 points less accurate over three seeds of the quickstart) */
  double lambda = 0.0;
  if (c->decay_consensus) {
    lambda = px_sgd_weight_decay(r->sgd);
    px_sgd_set_weight_decay(r->sgd, 0.0);
  }
  px_hsadmm_config_t hc = {c->kind == PX_STRATEGY_HSADMM_FLAT, c->rho1, c->rho2, lambda, c->keep,
                           c->bucket_bytes};
  if (c->mac_keep > 0.0) PX_CHECK(px__hsadmm_mac_budget(r, s, &hc.keep));
  PX_CHECK(px__hsadmm_create_joining(r->comm, s->hp, r->np, &hc, ops, r->joining, &s->h));
  if (r->staged) PX_CHECK(px__hsadmm_setup_staging(r, s));
  PX_CHECK(px_hsadmm_set_quantize(s->h, c->quantize_bits, c->seed));
  PX_REQUIRE(!c->overlap || !r->staged, "comm.overlap: host models only");
  PX_CHECK(px_hsadmm_set_overlap(s->h, c->overlap));
  PX_CHECK(px_hsadmm_set_compress(s->h, c->compress));
  PX_CHECK(px_hsadmm_set_keep_ramp(s->h, c->keep_ramp));
  px_hsadmm_set_exact_freeze(s->h, c->mac_keep > 0.0);
  PX_CHECK(px_hsadmm_set_elastic(s->h, r->elastic));
  if (r->elastic) PX_CHECK(px_hsadmm_set_elastic_max(s->h, r->el_cap));
  /* every rank starts from the consensus */
  PX_CHECK(px__hsadmm_load_z(r, s, 0));
  px_trainer_set_grad_hook(r->t, px__hsadmm_masked_hook, s);
  return PX_OK;
}

static void px__hsadmm_destroy(px__strategy_run_t *r, void *priv) {
  px__hsadmm_strategy_t *s = priv;
  px_trainer_set_grad_hook(r->t, NULL, NULL);
  /* the trainer's own model again (a local phase that failed); nothing is
   * scattered: the model holds the final consensus */
  px__trainer_use(r->t, NULL, NULL);
  for (int i = 0; r->sgd && i < r->np; i++) px_sgd_set_prox(r->sgd, i, NULL, NULL, 0.0f);
  if (!s) return;
  px_hsadmm_destroy(s->h);
  px_tensor_release(&s->d_zu);
  px_tensor_release(&s->d_backup);
  px_tensor_release(&s->d_mask);
  PX_FREE_ALL(s->hp, s->backup, s->layer_density, s->h_zu, s->h_mask, s);
}

/* ---- elastic runs ------------------------------------------------------------------ */

static px_status_t px__hsadmm_rebind(px__strategy_run_t *r, void *priv, int rollback) {
  px__hsadmm_strategy_t *s = priv;
  return px_hsadmm_rebind(s->h, r->comm, rollback);
}

static int px__hsadmm_next_members(px__strategy_run_t *r, void *priv, const int32_t **nodes,
                                   int *n) {
  (void)r;
  px__hsadmm_strategy_t *s = priv;
  return px_hsadmm_next_members(s->h, nodes, n);
}

/* A joining rank takes z & co from root and starts its model from z; the
 * kept ones keep theirs. */
static px_status_t px__hsadmm_join(px__strategy_run_t *r, void *priv, int root) {
  px__hsadmm_strategy_t *s = priv;
  PX_CHECK(px_hsadmm_join(s->h, root, r->joining));
  return r->joining ? px__hsadmm_load_z(r, s, 0) : PX_OK;
}

#define PX__HSADMM_OPS                                                                   \
  .create = px__hsadmm_create, .before_local = px__hsadmm_before_local,                  \
  .after_local = px__hsadmm_after_local,                                                 \
  .synchronise = px__hsadmm_synchronise, .load_consensus = px__hsadmm_load_z,            \
  .restore_local = px__hsadmm_restore_theta, .dense_inter = px__hsadmm_dense_inter,      \
  .decide = px__hsadmm_decide, .resume_items = px__hsadmm_resume_items,                 \
  .resumed = px__hsadmm_resumed, .destroy = px__hsadmm_destroy,                          \
  .rebind = px__hsadmm_rebind, .next_members = px__hsadmm_next_members,                 \
  .join = px__hsadmm_join

const px__strategy_ops_t px__strategy_hsadmm_ops = {
    .kind = PX_STRATEGY_HSADMM, /* names: policy/strategy_info.c */
    PX__HSADMM_OPS,
};

const px__strategy_ops_t px__strategy_hsadmm_flat_ops = {
    .kind = PX_STRATEGY_HSADMM_FLAT, /* names: policy/strategy_info.c */
    PX__HSADMM_OPS,
};
