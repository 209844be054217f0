/* The spec translated once: the configurations the programs build from a
 * complete spec: the trainer's, the strategy's and the data plane's (the
 * coordinator's control policy and the check of a spec as submitted are
 * jobspec/submitted.c's, spec-layer code: a sweep's points are checked
 * while parsing). The coordinator and the worker call these and keep no
 * rules of their own; the rules themselves are the schema table's
 * (jobspec/schema.c). Here, in the distributed layer, rather than in
 * jobspec/: it needs the trainer's and the data plane's defaults
 * (px_train_config_default, px_comm_opts_default). */
#include <inttypes.h>
#include <stdio.h>
#include <string.h>

#include "jobspec/jobspec_int.h"
#include "prunex/jobspec.h"
#include "prunex/jobspec_translate.h"
#include "prunex/quantize.h"
#include "px_check.h"

/* ---- configurations ---------------------------------------------------------------- */

void px_jobspec_train_config(const Prunex__V1__JobSpec *s, px_train_config_t *c) {
  px_train_config_default(c);
  c->arch = s->model->name;
  c->onnx = s->model->onnx && s->model->onnx[0] ? s->model->onnx : NULL;
  c->onnx_sha256 = c->onnx && s->model->onnx_sha256 ? s->model->onnx_sha256 : NULL;
  c->dataset = s->dataset->name;
  c->data_dir = s->dataset->path[0] ? s->dataset->path : NULL;
  c->batch = s->train->batch_size;
  c->epochs = s->train->epochs;
  c->lr = s->train->lr;
  c->momentum = s->train->momentum;
  c->weight_decay = s->train->weight_decay;
  c->nesterov = s->train->nesterov ? 1 : 0;
  c->lr_schedule = s->train->lr_schedule;
  c->precision = s->train->precision && !strcmp(s->train->precision, "bf16") ? PX_PRECISION_BF16
                                                                            : PX_PRECISION_FP32;
  c->seed = s->train->seed;
  c->augment = s->dataset->augment ? 1 : 0;
  c->image_size = s->dataset->image_size;
  c->image_channels = s->dataset->channels;
  c->min_scale = (float)s->dataset->min_scale;
  c->cache_dir = s->dataset->cache_dir && s->dataset->cache_dir[0] ? s->dataset->cache_dir : NULL;
  c->max_skipped = s->dataset->max_skipped; /* 0 (an older client's spec): the default */
  c->cache_budget = (int64_t)s->dataset->cache_budget_mb << 20;
  c->loader_threads = s->dataset->loader_threads;
  c->loader_prefetch = s->dataset->prefetch; /* 0 (an older client's spec): the default */
  if (s->cluster->threads_per_worker > 0) c->threads = s->cluster->threads_per_worker;
}

px_status_t px_jobspec_strategy_config(const Prunex__V1__JobSpec *s, int64_t steps_per_epoch,
                                       px_strategy_config_t *c) {
  memset(c, 0, sizeof *c);
  c->kind = (px_strategy_kind_t)s->strategy;
  c->iterations = s->admm->max_iterations;
  int64_t steps = s->train->local_steps;
  if (steps <= 0 && s->train->local_epochs > 0)
    steps = (int64_t)s->train->local_epochs * steps_per_epoch;
  if (steps > INT32_MAX)
    return px_set_error(PX_ERR_INVALID, "train.local_epochs: %" PRId64 " steps per iteration",
                        steps);
  c->local_steps = (int32_t)(steps > 0 ? steps : 0);
  c->rho1 = s->admm->rho1;
  c->rho2 = s->admm->rho2;
  c->keep.filter_keep = s->prune->filter_keep;
  c->keep.channel_keep = s->prune->channel_keep;
  c->keep.shape_keep = s->prune->shape_keep;
  c->keep.nm_n = s->prune->nm_n;
  c->keep.nm_m = s->prune->nm_m;
  c->keep.uncoupled_keep = s->prune->uncoupled_channel_keep;
  c->mac_keep = s->prune->mac_keep;
  c->keep_ramp = s->prune->ramp_iterations;
  c->skip_layers = (const char *const *)s->prune->skip_layers;
  c->nskip = (int32_t)s->prune->n_skip_layers;
  c->compact_local = s->prune->compact_training ? 1 : 0;
  c->topk_ratio = s->comm->topk_ratio;
  c->bucket_bytes = (size_t)s->comm->bucket_bytes;
  c->quantize_bits = px_quant_bits_from_name(s->comm->quantize);
  if (c->quantize_bits < 0)
    return px_set_error(PX_ERR_INVALID, "comm.quantize = '%s': must be none, 8 or 4",
                        s->comm->quantize);
  c->seed = s->train->seed;
  c->overlap = s->comm->overlap ? 1 : 0;
  const char *cm = s->comm->compress;
  c->compress = !cm || !cm[0] || !strcmp(cm, "none") ? 0 : !strcmp(cm, "lossless") ? 1 : -1;
  if (c->compress < 0)
    return px_set_error(PX_ERR_INVALID, "comm.compress = '%s': must be none or lossless", cm);
  c->calibrate_batches = s->train->bn_calibration_batches; /* 0 (an older client's): 20 */
  const char *fp = s->admm->final_prox;
  c->final_prox = !fp || !fp[0] || !strcmp(fp, "keep") ? 0 : !strcmp(fp, "decay") ? 1
                  : !strcmp(fp, "release") ? 2 : -1;
  if (c->final_prox < 0)
    return px_set_error(PX_ERR_INVALID, "admm.final_prox = '%s': must be keep, decay or release",
                        fp);
  const char *wd = s->admm->weight_decay_in;
  c->decay_consensus = !wd || !wd[0] || !strcmp(wd, "local") ? 0 : !strcmp(wd, "consensus") ? 1 : -1;
  if (c->decay_consensus < 0)
    return px_set_error(PX_ERR_INVALID, "admm.weight_decay_in = '%s': must be local or consensus",
                        wd);
  /* the last iteration is always tested; 0 is an unset field (1) */
  c->eval_every = s->train->eval_every > 0 ? s->train->eval_every : 1;
  if (s->recovery && s->recovery->checkpoint_every > 0) {
    c->checkpoint_every = s->recovery->checkpoint_every;
    c->checkpoint_keep = s->recovery->keep;
    c->checkpoint_max_unprotected = s->recovery->max_unprotected_iterations;
  }
  /* elastic: the caller adds the store (kv) and the members callback */
  if (s->elastic && s->elastic->min_nodes > 0) {
    c->elastic.on = 1;
    c->elastic.min_nodes = s->elastic->min_nodes;
  }
  return PX_OK;
}

void px_jobspec_comm_opts(const Prunex__V1__JobSpec *s, px_comm_opts_t *o) {
  px_comm_opts_default(o);
  if (s->comm->timeout_ms > 0) o->timeout_ms = s->comm->timeout_ms;
  o->bucket_bytes = (size_t)s->comm->bucket_bytes;
  /* elastic: a peer lost after half the collective timeout (keepalive
   * lost_ms / 8), well before the timeout would fail the attempt */
  if (s->elastic && s->elastic->min_nodes > 0) o->lost_ms = o->timeout_ms / 2;
}
