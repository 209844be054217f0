/* The spec translated once: the check of a spec as a client submitted it
 * (what SubmitJob refuses, before any default is filled in), and the
 * configurations the programs build from a complete spec: the trainer's,
 * the strategy's, the data plane's and the coordinator's control policy.
 * The coordinator and the worker call these and keep no rules of their own;
 * the rules themselves are the schema table's (schema.c). This file needs
 * the engine's defaults, so it is the one file of jobspec/ outside the
 * client part (PX_ENGINE_FILES in libpxcore/CMakeLists.txt). */
#include <inttypes.h>
#include <stdio.h>
#include <string.h>

#include "jobspec/jobspec_int.h"
#include "prunex/jobspec.h"
#include "prunex/quantize.h"
#include "px_check.h"

/* ---- a submitted spec ------------------------------------------------------------- */

#define PX__JS_WIRE "spec."

/* The entries of a string list field: each valid UTF-8 text (the other
 * rules of lists are the schema's, checked on the completed copy). */
static px_status_t px__js_wire_list(const void *msg, int fi, const char *path) {
  const ProtobufCFieldDescriptor *fd = px__js_fd(fi);
  size_t n = *(const size_t *)((const char *)msg + fd->quantifier_offset);
  char *const *items = *(char *const *const *)((const char *)msg + fd->offset);
  for (size_t i = 0; i < n; i++)
    if (items[i] && !px_text_ok(items[i]))
      return px_set_error(PX_ERR_INVALID,
                          PX__JS_WIRE "%s[%zu]: not valid UTF-8 text (or holds control "
                                      "characters)",
                          path, i);
  return PX_OK;
}

/* One field as submitted: text is valid UTF-8, a required field is set,
 * and a value other than the proto zero (which takes the default) is legal
 * on its own. */
static px_status_t px__js_wire_field(const Prunex__V1__JobSpec *spec, int fi) {
  const px__js_field_t *f = &px__js_fields[fi];
  char path[64], exp[256], got[96];
  px__js_path(fi, path, sizeof path);
  const void *msg = px__js_msg(spec, fi);
  if (!msg) {
    if (!(f->flags & PX__JS_REQUIRED)) return PX_OK;
    return px_set_error(PX_ERR_INVALID, PX__JS_WIRE "%s: required (section %s is missing)", path,
                        px__js_sections[f->section].key);
  }
  if (f->kind == PX__JS_STRLIST) return px__js_wire_list(msg, fi, path);
  px__js_value_t v;
  px__js_get(msg, fi, &v);
  int text = f->kind == PX__JS_STRING || f->kind == PX__JS_CHOICE || f->kind == PX__JS_MODEL;
  if (text && v.s && !px_text_ok(v.s))
    return px_set_error(PX_ERR_INVALID,
                        PX__JS_WIRE "%s: not valid UTF-8 text (or holds control characters)",
                        path);
  if (px__js_is_zero(fi, &v)) {
    if (!(f->flags & PX__JS_REQUIRED)) return PX_OK; /* unset: the default */
    return px_set_error(PX_ERR_INVALID, PX__JS_WIRE "%s: required, expected %s", path,
                        px__js_expected(fi, exp, sizeof exp));
  }
  if (px__js_value_ok(fi, &v)) return PX_OK;
  px__js_show(fi, &v, got, sizeof got);
  return px_set_error(PX_ERR_INVALID, PX__JS_WIRE "%s: expected %s, got %s", path,
                      px__js_expected(fi, exp, sizeof exp), got);
}

/* The cross-field rules (and the derived defaults) on a completed copy:
 * the spec is stored as the client sent it. */
static px_status_t px__js_wire_complete(const Prunex__V1__JobSpec *spec) {
  size_t n = protobuf_c_message_get_packed_size(&spec->base);
  uint8_t *buf = px_malloc(n ? n : 1, "jobspec.submitted_copy");
  if (!buf) return PX_ERR_NOMEM;
  protobuf_c_message_pack(&spec->base, buf);
  Prunex__V1__JobSpec *copy = prunex__v1__job_spec__unpack(NULL, n, buf);
  px_free(buf);
  /* protobuf-c unpacks some bytes (a field number 0 under a non-canonical
   * tag) whose repacked form it cannot read: such a spec could never be
   * stored and read back (the fuzz case of test_coord_recovery) */
  if (!copy)
    return px_set_error(PX_ERR_INVALID, "spec: cannot be read back once packed (a malformed "
                                        "message)");
  px_status_t st = px_jobspec_fill_defaults(copy);
  if (st == PX_OK) {
    px__js_where_t w;
    memset(&w, 0, sizeof w);
    w.prefix = PX__JS_WIRE;
    st = px__js_check(copy, &w);
  }
  px_jobspec_free(copy);
  return st;
}

px_status_t px_jobspec_check_submitted(const Prunex__V1__JobSpec *spec) {
  if (!spec) return px_set_error(PX_ERR_INVALID, "spec: required");
  for (int i = 0; i < px__js_nfields; i++) PX_CHECK(px__js_wire_field(spec, i));
  PX_CHECK(px__js_wire_complete(spec));
  px_admm_policy_t pol;
  px_jobspec_admm_policy(spec, &pol);
  if (px_admm_policy_validate(&pol) != PX_OK) {
    char why[512];
    snprintf(why, sizeof why, "%s", px_last_error());
    return px_set_error(PX_ERR_INVALID, PX__JS_WIRE "%s", why);
  }
  return PX_OK;
}

/* ---- configurations ---------------------------------------------------------------- */

void px_jobspec_admm_policy(const Prunex__V1__JobSpec *spec, px_admm_policy_t *p) {
  px_admm_policy_defaults(p);
  const Prunex__V1__AdmmSpec *a = spec ? spec->admm : NULL;
  if (!a) return;
  p->adaptive_rho = a->adaptive_rho ? 1 : 0;
  if (a->mu != 0.0) p->mu = a->mu;
  if (a->tau != 0.0) p->tau = a->tau;
  if (a->rho_max != 0.0) p->rho_max = a->rho_max;
  p->freeze_on_stable = a->freeze_on_stable; /* 0: never (proto) */
  p->freeze_iteration = a->freeze_iteration; /* 0: never (proto) */
  if (a->max_iterations != 0) p->max_iterations = a->max_iterations;
  if (a->eps_abs != 0.0) p->eps_abs = a->eps_abs;
  if (a->eps_rel != 0.0) p->eps_rel = a->eps_rel;
}

void px_jobspec_train_config(const Prunex__V1__JobSpec *s, px_train_config_t *c) {
  px_train_config_default(c);
  c->arch = s->model->name;
  c->onnx = s->model->onnx && s->model->onnx[0] ? s->model->onnx : NULL;
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
  c->skip_layers = (const char *const *)s->prune->skip_layers;
  c->nskip = (int32_t)s->prune->n_skip_layers;
  c->topk_ratio = s->comm->topk_ratio;
  c->bucket_bytes = (size_t)s->comm->bucket_bytes;
  c->quantize_bits = px_quant_bits_from_name(s->comm->quantize);
  if (c->quantize_bits < 0)
    return px_set_error(PX_ERR_INVALID, "comm.quantize = '%s': must be none, 8 or 4",
                        s->comm->quantize);
  c->seed = s->train->seed;
  c->overlap = s->comm->overlap ? 1 : 0;
  /* the last iteration is always tested; 0 is an unset field (1) */
  c->eval_every = s->train->eval_every > 0 ? s->train->eval_every : 1;
  if (s->recovery && s->recovery->checkpoint_every > 0) {
    c->checkpoint_every = s->recovery->checkpoint_every;
    c->checkpoint_keep = s->recovery->keep;
    c->checkpoint_max_unprotected = s->recovery->max_unprotected_iterations;
  }
  return PX_OK;
}

void px_jobspec_comm_opts(const Prunex__V1__JobSpec *s, px_comm_opts_t *o) {
  px_comm_opts_default(o);
  if (s->comm->timeout_ms > 0) o->timeout_ms = s->comm->timeout_ms;
  o->bucket_bytes = (size_t)s->comm->bucket_bytes;
}
