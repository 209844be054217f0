/* Compact evaluation of a pruned consensus model: H-SADMM's z,
 * loaded into the trainer's dense-shaped model, is evaluated through its
 * compact twin (export/compact_int.h: pruned filters and channels removed)
 * run by the inference engine (infer/infer_int.h: BN folded, ReLU and
 * residual adds fused, forward-inference primitives, cache-sized chunks),
 * and the BN statistics that precede an evaluation are re-estimated by the
 * same engine's calibration net (the compact convolutions, BN in training
 * mode) on the training batches the dense calibration would have taken. Both give the dense model's predictions up to rounding.
 *
 * The compact model and its net are built when the pattern of kept
 * channels changes (every evaluation while the masks move, never after
 * they freeze) and otherwise refilled from the dense model without
 * allocating. The compact plan keeps constant channels (zero filters whose
 * batch norm has a non-zero shift) rather than folding them, so that every
 * compact BN statistic is one of the dense model's: the calibrated
 * statistics go back into the dense model, are averaged over the ranks
 * there (the same collective, the same bytes as before), and come back.
 * The statistics of the dense model's dead channels (read by no weight)
 * are left as they were; they cannot change a prediction.
 *
 * CPU models only: a model on a GPU keeps the dense evaluation. Every graph
 * the inference engine takes (px__infer_takes: the built-in layer set and
 * the imported graphs' operators) evaluates compact; which form evaluates is
 * logged once per run, and each build of the compact model with its size. */
#include <string.h>

#include "export/compact_int.h"
#include "infer/infer_int.h"
#include "px_check.h"
#include "strategy/strategy_int.h"

struct px__ceval {
  px__compact_t *plan;  /* analysis of the dense model, refreshed per evaluation */
  uint8_t *pattern;     /* kept channels of every group the models were built for */
  size_t npattern;
  px_model_t *cm;       /* the compact model (the values the nets read; batch 1) */
  px__infer_t *net;     /* the inference net over cm's values */
  px__infer_t *cal;     /* the calibration net (training-mode BN), the trainer's batch */
  int64_t builds;
};

int px__ceval_wanted(const px__strategy_run_t *r, int has_consensus) {
  if (!has_consensus) return 0;
  const char *why = r->cuda ? "the model is on a GPU"
                    : r->cfg->eval_dense ? "eval_dense is set"
                    : !px__infer_takes(r->m) ? "the inference engine does not take its graph"
                                             : NULL;
  px_log(PX_LOG_INFO, "evaluation of the consensus model: %s%s%s", why ? "dense (" : "compact",
         why ? why : "", why ? ")" : "");
  return why == NULL;
}

void px__ceval_destroy(px__ceval_t *ce) {
  if (!ce) return;
  px__infer_destroy(ce->net);
  px__infer_destroy(ce->cal);
  px_model_destroy(ce->cm);
  px__compact_destroy(ce->plan);
  px_free(ce->pattern);
  px_free(ce);
}

int64_t px__ceval_builds(const px__ceval_t *ce) { return ce ? ce->builds : 0; }

/* Writes the plan's keep masks of every channel group into buf (NULL:
 * counts); returns the bytes. */
static size_t px__pattern(const px__compact_t *c, const px_model_t *m, uint8_t *buf) {
  size_t n = 0;
  for (int a = 0; a < c->na; a++) {
    if (c->group[a] != a) continue;
    size_t ch = (size_t)px_model_act_channels(m, a);
    if (buf) memcpy(buf + n, c->live[a], ch);
    n += ch;
  }
  return n;
}

/* The compact model of the dense model's current values: analysed, then
 * refilled, or rebuilt when the kept channels changed. */
static px_status_t px__ceval_sync(px__strategy_run_t *r) {
  px__ceval_t *ce = r->ceval;
  if (!ce) {
    ce = r->ceval = px_calloc(1, sizeof *ce, "ceval");
    if (!ce) return PX_ERR_NOMEM;
  }
  if (!ce->plan) {
    PX_CHECK(px__compact_plan(r->m, 0, &ce->plan));
    ce->npattern = px__pattern(ce->plan, r->m, NULL);
    ce->pattern = px_calloc(ce->npattern ? ce->npattern : 1, 1, "ceval.pattern");
    if (!ce->pattern) return PX_ERR_NOMEM;
  } else {
    PX_CHECK(px__compact_update(ce->plan, r->m));
  }
  int same = ce->cm != NULL;
  size_t off = 0;
  for (int a = 0; a < ce->plan->na && same; a++) {
    if (ce->plan->group[a] != a) continue;
    size_t ch = (size_t)px_model_act_channels(r->m, a);
    same = !memcmp(ce->pattern + off, ce->plan->live[a], ch);
    off += ch;
  }
  if (same) return px__compact_fill(ce->plan, r->m, ce->cm);
  px__infer_destroy(ce->net);
  px__infer_destroy(ce->cal);
  px_model_destroy(ce->cm);
  ce->net = ce->cal = NULL;
  ce->cm = NULL;
  const px_model_config_t *cfg = px_model_config(r->m);
  PX_CHECK(px__compact_build(ce->plan, r->m, px_model_ops(r->m), 1, &ce->cm));
  /* bf16 nets evaluate whole batches (measured faster than cache-sized
   * chunks, docs/performance.md); f32 ones the largest chunk the L2 holds */
  int32_t chunk = px__infer_bf16_fast() ? cfg->batch : px__infer_cache_batch(ce->cm, cfg->batch);
  PX_CHECK(px__infer_create(ce->cm, chunk, 0, PX__INFER_AUTO, &ce->net));
  PX_CHECK(px__infer_create(ce->cm, cfg->batch, 1, PX__INFER_F32, &ce->cal));
  px__pattern(ce->plan, r->m, ce->pattern);
  ce->builds++;
  px_log(PX_LOG_INFO, "compact evaluation model %lld: %zu of %zu parameters, %s convolutions",
         (long long)ce->builds, px_model_numel(ce->cm), px_model_numel(r->m),
         px__infer_is_bf16(ce->net) ? "bf16" : "f32");
  return PX_OK;
}

static px_status_t px__ceval_train_batch(void *ctx, const float *x) {
  return px__infer_calibrate(ctx, x);
}

static void px__ceval_momentum(void *ctx, float momentum) {
  px__infer_calib_momentum(ctx, momentum);
}

px_status_t px__ceval_calibrate(px__strategy_run_t *r, int64_t n) {
  PX_CHECK(px__ceval_sync(r));
  px__ceval_t *ce = r->ceval;
  PX_CHECK(px__infer_load(ce->cal));
  PX_CHECK(px_trainer_calibrate_with(r->t, px__ceval_train_batch, px__ceval_momentum, ce->cal, n));
  /* the kept channels' statistics back into the dense model */
  int32_t *idx = ce->plan->ko;
  for (int k = 0; k < ce->plan->nn; k++) {
    const px_model_node_t *bn = &ce->plan->nodes[k];
    if (bn->kind != PX_NODE_BN) continue;
    int nk = px__compact_kept(ce->plan, r->m, bn->out, idx);
    for (int t = 0; t < 2; t++) {
      int b = t ? bn->rv : bn->rm;
      const float *src = px_model_buffer(ce->cm, b)->value->data; /* CPU models */
      float *dst = px_model_buffer(r->m, b)->value->data;
      for (int i = 0; i < nk; i++) dst[idx[i]] = src[i];
    }
  }
  return PX_OK;
}

static px_status_t px__ceval_batch(void *ctx, const float *x, const int32_t *y, int32_t n,
                                   double *loss_sum, int64_t *correct) {
  return px__infer_eval(ctx, x, y, n, loss_sum, correct);
}

px_status_t px__ceval_evaluate(px__strategy_run_t *r, px_eval_stats_t *e) {
  PX_CHECK(px__ceval_sync(r));
  PX_CHECK(px__infer_load(r->ceval->net));
  return px_trainer_evaluate_with(r->t, px__ceval_batch, r->ceval->net, e);
}
