/* Compact training after the freeze (prune.compact_training):
 * once H-SADMM's masks are frozen, about 60% of resnet20's channels are
 * zero and stay zero, so the local phase's convolutions on the masked dense
 * model are mostly wasted. This file builds once the compact twin of the
 * masked model (export/compact_int.h with fold = 0: pruned filters and
 * channels removed, constant channels kept, so every compact parameter and
 * BN statistic is one of the dense model's), and each local phase after the
 * freeze gathers into it the dense parameters, momentum, BN running
 * statistics and proximal targets (z_i, u), runs the trainer's steps on it
 * (px__trainer_use: the same data stream, learning rate and hook), and
 * scatters the parameters, momentum and statistics back. Everything after
 * the local phase (the round, evaluation, checkpoints) sees the dense model
 * as before. Batch norm in training mode normalises each channel on its
 * own, and a removed channel is read by no weight, so the compact steps are
 * the masked dense steps up to rounding (tests/test_strategy_compact_train.c
 * measures the difference).
 *
 * What the compact model lacks keeps its value in the dense model: weights
 * outside the masks (zero) and the filters, biases and BN parameters of
 * channels that no weight reads (they cannot change a prediction; with
 * dense training they would still follow the proximal pull). A kept channel
 * may still have masked weights in some reader, so the compact model has a
 * mask of its own (the dense masks gathered through the index map), applied
 * after every backward as the dense hook does.
 *
 * CPU host models only: a model on a GPU, the staged path, the device-state
 * round and comm.overlap (whose exchange reads the proximal targets during
 * the local phase) keep dense training; which form trains is logged once.
 * Nothing is allocated per iteration after the build. */
#include <stdlib.h>
#include <string.h>

#include "export/compact_int.h"
#include "nn/cpu/px_cpu_int.h"
#include "nn/px_train_int.h"
#include "px_check.h"
#include "strategy/strategy_int.h"

/* Layout and widths of the compact model. oneDNN 2.6's blocked layouts
 * (nChw16c, what it picks for f32) send a layer whose channel count is not
 * a multiple of 16 to its reference code (about 1.6 s a call for 8 channels
 * at batch 16), while channels-last (acdb) has jit kernels for any count:
 * at 8 channels, 32 x 32, batch 64, one thread, forward + backward data +
 * backward weights take 5.3 ms there against 12.7 ms for the 16 channels a
 * blocked layout would need (bench/train/px_bench_conv_layouts,
 * docs/performance.md). So
 * the compact model's convolutions write channels-last, and every group
 * is widened to 1, 2, 4, 8 or a multiple of 16 channels
 * (PX__COMPACT_ROUND_CL: the widths whose channels-last maps the batch norm
 * runs in vectors, nn/cpu/cpu_bn.c; at others it takes a channel at a time,
 * which made the local phases slower than dense). PX_COMPACT_CHANNELS=16 restores the
 * first version for comparison: blocked layouts, each group widened to a
 * multiple of 16 channels (the dropped channels that come back being read
 * by no weight). */
int px__ctrain_round(void) {
  const char *e = getenv("PX_COMPACT_CHANNELS");
  return e && strcmp(e, "16") == 0 ? 16 : PX__COMPACT_ROUND_CL;
}

struct px__ctrain {
  px__compact_t *plan;  /* analysis of the masked dense model at the build */
  px_model_t *cm;       /* the compact model, the trainer's batch */
  px_sgd_t *sgd;        /* its optimiser: the dense one's hyper-parameters */
  size_t cn, cb;        /* compact parameter elements, BN statistics */
  int64_t *pmap;        /* [cn] dense flat-parameter index of each compact one */
  int64_t *bmap;        /* [cb] the same for the BN statistics */
  size_t *coff;         /* [np + 1] compact flat offset of each parameter */
  int64_t *doff;        /* [np] dense flat offset of each parameter */
  int32_t *masked;      /* [nmasked] compact flat indices outside the masks */
  size_t nmasked;
  float *zu;            /* [2 cn] the proximal targets z and u, compact */
};

int px__ctrain_wanted(const px__strategy_run_t *r, int device_state) {
  if (!r->cfg->compact_local) return 0;
  const char *why = r->cuda ? "the model is on a GPU"
                    : r->staged ? "the staged path (stage_host)"
                    : device_state ? "the device-state round (hsadmm_state)"
                    : r->cfg->overlap ? "comm.overlap reads the proximal targets during it"
                                      : NULL;
  px_log(PX_LOG_INFO, "local phases after the freeze train: %s%s%s",
         why ? "the masked dense model (" : "the compact model", why ? why : "", why ? ")" : "");
  return why == NULL;
}

void px__ctrain_destroy(px__ctrain_t *ct) {
  if (!ct) return;
  px_sgd_destroy(ct->sgd);
  px_model_destroy(ct->cm);
  px__compact_destroy(ct->plan);
  PX_FREE_ALL(ct->pmap, ct->bmap, ct->coff, ct->doff, ct->masked, ct->zu, ct);
}

/* The per-parameter offsets, the compact mask (entries whose dense source
 * keep says is masked) and the proximal buffers, once cm and the maps are
 * there. */
static px_status_t px__ctrain_tables(px__ctrain_t *ct, const px__strategy_run_t *r,
                                     const float *keep) {
  int np = r->np;
  ct->coff = px_malloc((size_t)(np + 1) * sizeof *ct->coff, "ctrain.coff");
  ct->doff = px_malloc((size_t)np * sizeof *ct->doff, "ctrain.doff");
  ct->zu = px_malloc(2 * ct->cn * sizeof *ct->zu, "ctrain.zu");
  if (!ct->coff || !ct->doff || !ct->zu) return PX_ERR_NOMEM;
  ct->coff[0] = 0;
  int64_t d = 0;
  for (int i = 0; i < np; i++) {
    ct->coff[i + 1] = ct->coff[i] + px_tensor_numel(px_model_param(ct->cm, i)->value);
    ct->doff[i] = d;
    d += (int64_t)px_tensor_numel(px_model_param(r->m, i)->value);
  }
  ct->nmasked = 0;
  for (size_t j = 0; j < ct->cn; j++) ct->nmasked += keep[ct->pmap[j]] == 0.0f;
  ct->masked = px_malloc((ct->nmasked ? ct->nmasked : 1) * sizeof *ct->masked, "ctrain.masked");
  if (!ct->masked) return PX_ERR_NOMEM;
  size_t k = 0;
  for (size_t j = 0; j < ct->cn; j++)
    if (keep[ct->pmap[j]] == 0.0f) ct->masked[k++] = (int32_t)j;
  return PX_OK;
}

/* PX_ERR_STATE when some group of the plan keeps a width the rounding could
 * not reach (a concatenation ties it): slower layers than the dense ones. */
static px_status_t px__ctrain_widths_ok(const px__compact_t *c, const px_model_t *m) {
  for (int a = 0; a < c->na; a++) {
    if (c->group[a] != a) continue;
    int ch = px_model_act_channels(m, a), n = 0;
    for (int i = 0; i < ch; i++) n += c->live[a][i];
    if (n != ch && n != px__compact_round_width(n, c->round))
      return px_set_error(PX_ERR_STATE,
                          "a channel group keeps %d of %d channels, not a width the fast "
                          "kernels take (a concatenation ties its width)", n, ch);
  }
  return PX_OK;
}

px_status_t px__ctrain_build(px__strategy_run_t *r, const float *keep, px__ctrain_t **out) {
  *out = NULL;
  px__ctrain_t *ct = px_calloc(1, sizeof *ct, "ctrain");
  if (!ct) return PX_ERR_NOMEM;
  px_status_t st;
  PX_CHECK_GOTO(px__compact_plan(r->m, 0, &ct->plan), st, fail);
  ct->plan->round = px__ctrain_round();
  PX_CHECK_GOTO(px__compact_update(ct->plan, r->m), st, fail);
  PX_CHECK_GOTO(px__ctrain_widths_ok(ct->plan, r->m), st, fail);
  px_ops_t *ops = px_model_ops(r->m);
  ops->conv_nhwc = ct->plan->round == PX__COMPACT_ROUND_CL; /* px__ctrain_wanted: a CPU model */
  st = px__compact_build(ct->plan, r->m, ops, px_model_config(r->m)->batch, &ct->cm);
  ops->conv_nhwc = 0;
  PX_CHECK_GOTO(st, st, fail);
  ct->cn = px_model_numel(ct->cm);
  ct->cb = px_tensor_numel(px_model_flat_buffers(ct->cm));
  ct->pmap = px_malloc((ct->cn ? ct->cn : 1) * sizeof *ct->pmap, "ctrain.pmap");
  ct->bmap = px_malloc((ct->cb ? ct->cb : 1) * sizeof *ct->bmap, "ctrain.bmap");
  if (!ct->pmap || !ct->bmap) {
    st = PX_ERR_NOMEM;
    goto fail;
  }
  PX_CHECK_GOTO(px__compact_index(ct->plan, r->m, ct->cm, ct->pmap, ct->bmap), st, fail);
  px_sgd_config_t sc;
  px__trainer_sgd_config(r->t, &sc);
  sc.weight_decay = px_sgd_weight_decay(r->sgd); /* 0 when H-SADMM moved it into z */
  PX_CHECK_GOTO(px_sgd_create(ct->cm, &sc, &ct->sgd), st, fail);
  PX_CHECK_GOTO(px__ctrain_tables(ct, r, keep), st, fail);
  px_log(PX_LOG_INFO,
         "compact training model: %zu of %zu parameters, %zu BN statistics of %zu, %zu entries "
         "masked inside kept channels",
         ct->cn, r->numel, ct->cb, px_tensor_numel(px_model_flat_buffers(r->m)), ct->nmasked);
  *out = ct;
  return PX_OK;
fail:
  px__ctrain_destroy(ct);
  return st;
}

/* c[j] = d[map[j] - base] for j in [0, n). */
static void px__gather(float *c, const float *d, const int64_t *map, int64_t base, size_t n) {
  for (size_t j = 0; j < n; j++) c[j] = d[map[j] - base];
}

/* Parameters, momentum and BN statistics from the dense model into the
 * compact one (scatter 0) or back (1). */
static void px__ctrain_move(px__ctrain_t *ct, px__strategy_run_t *r, int scatter) {
  float *c[2] = {px_model_flat_params(ct->cm)->data, px_model_flat_buffers(ct->cm)->data};
  float *d[2] = {px_model_flat_params(r->m)->data, px_model_flat_buffers(r->m)->data};
  const int64_t *map[2] = {ct->pmap, ct->bmap};
  size_t n[2] = {ct->cn, ct->cb};
  for (int f = 0; f < 2 + r->np; f++) {
    const int64_t *mp = f < 2 ? map[f] : ct->pmap + ct->coff[f - 2];
    int64_t base = f < 2 ? 0 : ct->doff[f - 2];
    size_t len = f < 2 ? n[f] : ct->coff[f - 1] - ct->coff[f - 2];
    float *cv = f < 2 ? c[f] : px_sgd_momentum(ct->sgd, f - 2)->data;
    float *dv = f < 2 ? d[f] : px_sgd_momentum(r->sgd, f - 2)->data;
    if (!scatter) {
      px__gather(cv, dv, mp, base, len);
      continue;
    }
    for (size_t j = 0; j < len; j++) dv[mp[j] - base] = cv[j];
  }
}

px_status_t px__ctrain_enter(px__ctrain_t *ct, px__strategy_run_t *r, px__ctrain_prox_fn prox,
                             void *ctx) {
  px__ctrain_move(ct, r, 0);
  float *cz = ct->zu, *cu = ct->zu + ct->cn;
  for (int i = 0; i < r->np; i++) {
    const float *z, *u;
    float rho;
    prox(ctx, i, &z, &u, &rho);
    size_t o = ct->coff[i], n = ct->coff[i + 1] - o;
    px__gather(cz + o, z, ct->pmap + o, ct->doff[i], n);
    if (u) px__gather(cu + o, u, ct->pmap + o, ct->doff[i], n);
    PX_CHECK(px_sgd_set_prox(ct->sgd, i, cz + o, u ? cu + o : NULL, rho));
  }
  px__trainer_use(r->t, ct->cm, ct->sgd);
  return PX_OK;
}

void px__ctrain_leave(px__ctrain_t *ct, px__strategy_run_t *r) {
  px__trainer_use(r->t, NULL, NULL);
  px__ctrain_move(ct, r, 1);
}

int px__ctrain_is(const px__ctrain_t *ct, const px_model_t *m) { return ct && m == ct->cm; }

void px__ctrain_mask(const px__ctrain_t *ct) {
  float *w = px_model_flat_params(ct->cm)->data, *g = px_model_flat_grads(ct->cm)->data;
  for (size_t k = 0; k < ct->nmasked; k++) w[ct->masked[k]] = g[ct->masked[k]] = 0.0f;
}

int64_t px__ctrain_numel(const px__ctrain_t *ct) { return ct ? (int64_t)ct->cn : 0; }
