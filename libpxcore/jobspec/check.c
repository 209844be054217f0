/* The checks of a whole job spec (px__js_check, px_jobspec_validate): the
 * cross-field rules, an imported model's file, the data set, pruning,
 * communication, notification and the sweep, the same for a parsed file and
 * for a spec that came over the wire; and the data check pxctl runs before
 * it submits. Single fields are checked by the schema (schema.c). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "jobspec/jobspec_int.h"
#include "prunex/arch.h"
#include "prunex/image.h"
#include "prunex/jobspec.h"
#include "prunex/strategy_table.h"
#include "px_check.h"

/* The first known position among fields a, b (-1: none), else a's section. */
static const px__js_mark_t *px__js_mark(const px__js_where_t *w, int a, int b) {
  if (!w) return NULL;
  if (a >= 0 && w->field[a].line) return &w->field[a];
  if (b >= 0 && w->field[b].line) return &w->field[b];
  if (a >= 0 && px__js_fields[a].section != PX__JS_TOP && w->section[px__js_fields[a].section].line)
    return &w->section[px__js_fields[a].section];
  return NULL;
}

/* Image channels of the data sets (synthetic is 3x32x32 like cifar10; a
 * folder has the channels it asks for). */
static int px__js_channels(const Prunex__V1__DatasetSpec *d) {
  if (!strcmp(d->name, "folder")) return d->channels;
  return !strcmp(d->name, "fashion-mnist") ? 1 : 3;
}

/* "" (not given) or 64 lowercase hex digits. */
static int px__js_sha256_ok(const char *s) {
  if (!s || !s[0]) return 1;
  size_t n = strspn(s, "0123456789abcdef");
  return n == 64 && !s[n];
}

/* An imported model: name "onnx" with an absolute model.onnx, and where the
 * file is at hand (a spec parsed from a file, on the submitter's machine)
 * the file itself is read and checked, so that an operator the import does
 * not take is refused at submission with the node and the file, not by the
 * workers. The data set's channels and classes must match the graph. */
static px_status_t px__js_check_onnx(const Prunex__V1__JobSpec *spec, px__js_where_t *w) {
  const Prunex__V1__ModelSpec *m = spec->model;
  int fo = px__js_find("model.onnx"), fn = px__js_find("model.name");
  int has = m->onnx && m->onnx[0], named = !strcmp(m->name, "onnx");
  if (!has && m->onnx_sha256 && m->onnx_sha256[0])
    return px__js_fail(PX_ERR_INVALID, w, px__js_mark(w, px__js_find("model.onnx_sha256"), -1),
                       "model.onnx_sha256: given without model.onnx (it is the ONNX file's "
                       "SHA-256)");
  if (has != named)
    return px__js_fail(PX_ERR_INVALID, w, px__js_mark(w, has ? fn : fo, has ? fo : fn),
                       has ? "model.name: '%s' with model.onnx set (leave the name out or write "
                             "onnx)"
                           : "model.name: '%s' needs model.onnx, the path of the ONNX file",
                       m->name);
  if (!has) return PX_OK;
  if (m->onnx[0] != '/' || strlen(m->onnx) > 4000 || strstr(m->onnx, "/../"))
    return px__js_fail(PX_ERR_INVALID, w, px__js_mark(w, fo, -1),
                       "model.onnx: '%.80s' must be an absolute path without '..' of at most "
                       "4000 bytes", m->onnx);
  int fs = px__js_find("model.onnx_sha256");
  if (!px__js_sha256_ok(m->onnx_sha256))
    return px__js_fail(PX_ERR_INVALID, w, px__js_mark(w, fs, -1),
                       "model.onnx_sha256: '%.80s' is not a SHA-256 (64 lowercase hex digits; "
                       "leave it out and pxctl computes it from the file)", m->onnx_sha256);
  if (!w->file) return PX_OK;
  px_model_onnx_info_t info;
  if (px_model_onnx_check(m->onnx, &info) != PX_OK) {
    char why[480];
    snprintf(why, sizeof why, "%s", px_last_error());
    return px__js_fail(PX_ERR_INVALID, w, px__js_mark(w, fo, -1), "model.onnx: %s", why);
  }
  if (m->onnx_sha256 && m->onnx_sha256[0] && strcmp(m->onnx_sha256, info.sha256))
    return px__js_fail(PX_ERR_INVALID, w, px__js_mark(w, fs, fo),
                       "model.onnx_sha256: %s has SHA-256 %s, not the %.64s the spec gives "
                       "(leave the field out to train the file as it is)",
                       m->onnx, info.sha256, m->onnx_sha256);
  memcpy(w->onnx_sha256, info.sha256, sizeof w->onnx_sha256);
  int chans = px__js_channels(spec->dataset);
  /* a folder's classes are known only where its files are (pxctl's
   * px_jobspec_check_data, the workers); its images are image_size a side
   * (the graph's own when the spec leaves it out: parse.c), the other data
   * sets' 32 */
  int folder = !strcmp(spec->dataset->name, "folder");
  int side = folder ? spec->dataset->image_size : 32;
  if (info.in_channels != chans || (!folder && info.num_classes != 10) || info.height != side ||
      info.width != side)
    return px__js_fail(PX_ERR_INVALID, w, px__js_mark(w, fo, px__js_find("dataset.name")),
                       "model.onnx: %s takes %dx%dx%d inputs and gives %d logits; data set %s "
                       "is %dx%dx%d%s",
                       m->onnx, info.in_channels, info.height, info.width, info.num_classes,
                       spec->dataset->name, chans, side, side,
                       folder ? " (dataset.image_size, dataset.channels)" : " with 10 classes");
  return PX_OK;
}

/* A field of H-SADMM's set under another strategy: refused, naming both. */
static px_status_t px__js_hsadmm_only(const Prunex__V1__JobSpec *spec, px__js_where_t *w,
                                      const char *field, const char *what, const char *off) {
  return px__js_fail(PX_ERR_INVALID, w,
                     px__js_mark(w, px__js_find(field), px__js_find("strategy")),
                     "%s: %s and has no meaning for strategy %s (use %s)", field, what,
                     px_jobspec_strategy_name(spec->strategy), off);
}

/* The prune section's cross-field rules: N:M is both numbers or neither;
 * compact training and the keep's ramp are H-SADMM's (the strategies with
 * frozen masks), the ramp without comm.overlap (whose exchange lands a
 * round late); a MAC budget chooses the channel keep, so the spec does not
 * give both. */
static px_status_t px__js_check_prune(const Prunex__V1__JobSpec *spec, px__js_where_t *w) {
  const Prunex__V1__PruneSpec *p = spec->prune;
  int hsadmm = spec->strategy == PRUNEX__V1__STRATEGY__STRATEGY_HSADMM ||
               spec->strategy == PRUNEX__V1__STRATEGY__STRATEGY_HSADMM_FLAT;
  if (p->compact_training && !hsadmm)
    return px__js_hsadmm_only(spec, w, "prune.compact_training",
                              "trains the compact model once H-SADMM's masks are frozen",
                              "false");
  if (p->ramp_iterations > 0 && !hsadmm)
    return px__js_hsadmm_only(spec, w, "prune.ramp_iterations", "ramps H-SADMM's projection",
                              "0");
  if (p->ramp_iterations > 0 && spec->comm->overlap)
    return px__js_fail(PX_ERR_INVALID, w,
                       px__js_mark(w, px__js_find("prune.ramp_iterations"),
                                   px__js_find("comm.overlap")),
                       "prune.ramp_iterations: %d needs comm.overlap false (an overlapped "
                       "exchange lands a round late, after the keep moved on)",
                       p->ramp_iterations);
  if (p->mac_keep > 0.0 && p->channel_keep < 1.0)
    return px__js_fail(PX_ERR_INVALID, w,
                       px__js_mark(w, px__js_find("prune.mac_keep"),
                                   px__js_find("prune.channel_keep")),
                       "prune.mac_keep: %g chooses the channel keep itself; leave out "
                       "prune.channel_keep (it is %g) or mac_keep",
                       p->mac_keep, p->channel_keep);
  /* the field named first is the one set alone, else nm_n (too large) */
  const char *field = p->nm_m == 0 ? "prune.nm_m" : "prune.nm_n";
  if ((p->nm_n == 0) != (p->nm_m == 0) || p->nm_n > p->nm_m)
    return px__js_fail(PX_ERR_INVALID, w,
                       px__js_mark(w, px__js_find("prune.nm_n"), px__js_find("prune.nm_m")),
                       "%s: N:M sparsity %d:%d needs 1 <= nm_n <= nm_m (both 0: off)", field,
                       p->nm_n, p->nm_m);
  return PX_OK;
}

static int px__js_named(const char *v) { return v && v[0] && strcmp(v, "none"); }

static int px__js_quantized(const Prunex__V1__JobSpec *spec) {
  return px__js_named(spec->comm->quantize);
}

/* The comm section's cross-field rules: quantize, overlap and compress apply
 * to the node leaders' exchange of strategy hsadmm. */
static px_status_t px__js_check_comm(const Prunex__V1__JobSpec *spec, px__js_where_t *w) {
  int hs = spec->strategy == PRUNEX__V1__STRATEGY__STRATEGY_HSADMM;
  if (px__js_quantized(spec) && !hs)
    return px__js_fail(PX_ERR_INVALID, w,
                       px__js_mark(w, px__js_find("comm.quantize"), px__js_find("strategy")),
                       "comm.quantize: %s quantizes the node leaders' exchange of strategy hsadmm "
                       "and has no meaning for strategy %s (use none)",
                       spec->comm->quantize, px_jobspec_strategy_name(spec->strategy));
  if (spec->comm->overlap && (!hs || px__js_quantized(spec)))
    return px__js_fail(PX_ERR_INVALID, w,
                       px__js_mark(w, px__js_find("comm.overlap"),
                                   px__js_find(!hs ? "strategy" : "comm.quantize")),
                       "comm.overlap: overlaps the exact exchange of strategy hsadmm's node "
                       "leaders with the next local phase; strategy %s, comm.quantize %s",
                       px_jobspec_strategy_name(spec->strategy),
                       spec->comm->quantize ? spec->comm->quantize : "none");
  if (px__js_named(spec->comm->compress) && (!hs || px__js_quantized(spec) || spec->comm->overlap))
    return px__js_fail(PX_ERR_INVALID, w,
                       px__js_mark(w, px__js_find("comm.compress"),
                                   px__js_find(!hs                   ? "strategy"
                                               : spec->comm->overlap ? "comm.overlap"
                                                                     : "comm.quantize")),
                       "comm.compress: lossless codes the exact exchange of strategy hsadmm's "
                       "node leaders (comm.quantize none, comm.overlap false); strategy %s, "
                       "comm.quantize %s, comm.overlap %s",
                       px_jobspec_strategy_name(spec->strategy),
                       spec->comm->quantize ? spec->comm->quantize : "none",
                       spec->comm->overlap ? "true" : "false");
  return PX_OK;
}

int px_jobspec_notify_states(const char *on, unsigned *mask) { /* on: the states text */
  static const char *const names[] = {"", "pending", "scheduled", "running", "succeeded",
                                      "failed", "cancelled", "timeout"};
  *mask = 0;
  if (!on || !on[0]) on = "end";
  size_t len = strlen(on);
  if (len > 256) return -1;
  for (const char *p = on; *p;) {
    while (*p == ' ' || *p == ',') p++;
    const char *e = p;
    while (*e && *e != ',' && *e != ' ') e++;
    size_t n = (size_t)(e - p);
    if (!n) break;
    int found = 0;
    if (n == 3 && !strncmp(p, "end", 3)) {
      *mask |= (1u << 4) | (1u << 5) | (1u << 6) | (1u << 7);
      found = 1;
    }
    for (int s = 1; s < 8 && !found; s++)
      if (strlen(names[s]) == n && !strncmp(p, names[s], n)) {
        *mask |= 1u << s;
        found = 1;
      }
    if (!found) return (int)(p - on) + 1;
    p = e;
  }
  return 0;
}

int px_jobspec_notify_url_ok(const char *url) {
  size_t n = strlen(url);
  int ok = n == 0 || ((!strncmp(url, "http://", 7) || !strncmp(url, "https://", 8)) && n <= 1024);
  for (const char *p = url; ok && *p; p++) ok = (unsigned char)*p > ' ' && *p != 0x7f;
  return ok;
}

/* The notify section: an http(s) URL without blanks, and known states. */
static px_status_t px__js_check_notify(const Prunex__V1__JobSpec *spec, px__js_where_t *w) {
  const char *url = spec->notify->url ? spec->notify->url : "";
  if (!px_jobspec_notify_url_ok(url))
    return px__js_fail(PX_ERR_INVALID, w, px__js_mark(w, px__js_find("notify.url"), -1),
                       "notify.url: expected an http:// or https:// URL of at most 1024 bytes "
                       "without blanks, got '%.80s'",
                       url);
  unsigned mask;
  int bad = px_jobspec_notify_states(spec->notify->states, &mask);
  if (bad)
    return px__js_fail(PX_ERR_INVALID, w, px__js_mark(w, px__js_find("notify.states"), -1),
                       "notify.states: '%.80s': expected states separated by commas (pending, "
                       "scheduled, running, succeeded, failed, cancelled, timeout) or end, at most "
                       "256 bytes",
                       spec->notify->states);
  return PX_OK;
}

/* The elastic section: both 0 (not elastic), or min_nodes >= 1 with
 * min_nodes <= cluster.nodes <= max_nodes (max_nodes 0: cluster.nodes), and
 * strategy hsadmm, whose consensus is an average over the node leaders and
 * just as well one over the leaders left; the other strategies' world-wide
 * collectives have no round boundary to change their members at. */
static px_status_t px__js_check_elastic(const Prunex__V1__JobSpec *spec, px__js_where_t *w) {
  const Prunex__V1__ElasticSpec *e = spec->elastic;
  int fmin = px__js_find("elastic.min_nodes"), fmax = px__js_find("elastic.max_nodes");
  int fn = px__js_find("cluster.nodes");
  if (e->min_nodes == 0 && e->max_nodes == 0) return PX_OK;
  int nodes = spec->cluster->nodes;
  if (e->min_nodes == 0)
    return px__js_fail(PX_ERR_INVALID, w, px__js_mark(w, fmin, fmax),
                       "elastic.min_nodes: required with elastic.max_nodes (%d): the fewest "
                       "nodes the job goes on with, 1..cluster.nodes (%d)",
                       e->max_nodes, nodes);
  if (e->min_nodes > nodes)
    return px__js_fail(PX_ERR_INVALID, w, px__js_mark(w, fmin, fn),
                       "elastic.min_nodes: %d is more than cluster.nodes (%d), the nodes the job "
                       "starts on", e->min_nodes, nodes);
  if (e->max_nodes != 0 && e->max_nodes < nodes)
    return px__js_fail(PX_ERR_INVALID, w, px__js_mark(w, fmax, fn),
                       "elastic.max_nodes: %d is less than cluster.nodes (%d), the nodes the job "
                       "starts on (0: cluster.nodes)", e->max_nodes, nodes);
  if (spec->strategy != PRUNEX__V1__STRATEGY__STRATEGY_HSADMM)
    return px__js_fail(PX_ERR_INVALID, w, px__js_mark(w, fmin, px__js_find("strategy")),
                       "elastic.min_nodes: elastic jobs need strategy hsadmm (its consensus "
                       "averages over the node leaders left); strategy %s cannot change its "
                       "members (leave the elastic section out)",
                       px_jobspec_strategy_name(spec->strategy));
  return PX_OK;
}

/* The dataset section's cross-field rules and the model's fit to it. */
static px_status_t px__js_check_dataset(const Prunex__V1__JobSpec *spec, px__js_where_t *w) {
  const char *ds = spec->dataset->name;
  if (!strcmp(ds, "cifar10") && (!spec->dataset->path || !spec->dataset->path[0]))
    return px__js_fail(PX_ERR_INVALID, w,
                       px__js_mark(w, px__js_find("dataset.path"), px__js_find("dataset.name")),
                       "dataset.path: cifar10 has no default location; set it to the directory "
                       "of the data set's .bin files on the workers");
  int folder = !strcmp(ds, "folder");
  if (folder && (!spec->dataset->path || !spec->dataset->path[0]))
    return px__js_fail(PX_ERR_INVALID, w,
                       px__js_mark(w, px__js_find("dataset.path"), px__js_find("dataset.name")),
                       "dataset.path: a folder data set needs the directory that holds its "
                       "train/ and val/ class directories");
  if (folder && spec->dataset->channels == 2)
    return px__js_fail(PX_ERR_INVALID, w, px__js_mark(w, px__js_find("dataset.channels"), -1),
                       "dataset.channels: 2: images are decoded to 1 (grey) or 3 (R, G, B) "
                       "channels");
  px_status_t ost = px__js_check_onnx(spec, w);
  if (ost != PX_OK) return ost;
  int chans = px__js_channels(spec->dataset);
  if (spec->model->in_channels != 0 && spec->model->in_channels != chans)
    return px__js_fail(PX_ERR_INVALID, w,
                       px__js_mark(w, px__js_find("model.in_channels"),
                                   px__js_find("dataset.name")),
                       "model.in_channels: %d, but data set %s has %d channel%s (0 takes it from "
                       "the data set)",
                       spec->model->in_channels, ds, chans, chans == 1 ? "" : "s");
  if (spec->model->num_classes != 0 && spec->model->num_classes != 10 && !folder)
    return px__js_fail(PX_ERR_INVALID, w,
                       px__js_mark(w, px__js_find("model.num_classes"),
                                   px__js_find("dataset.name")),
                       "model.num_classes: %d, but data set %s has 10 classes (0 takes it from "
                       "the data set)",
                       spec->model->num_classes, ds);
  return PX_OK;
}

px_status_t px__js_check(const Prunex__V1__JobSpec *spec, px__js_where_t *w) {
  char path[64], exp[256], got[96];
  for (int s = 0; s < px__js_nsections; s++) {
    void **slot = px__js_section_slot(spec, s);
    if (!slot || !*slot)
      return px__js_fail(PX_ERR_INVALID, w, NULL, "section '%s' is missing",
                         px__js_sections[s].key);
  }
  for (int i = 0; i < px__js_nfields; i++) {
    const void *msg = px__js_msg(spec, i);
    if (px__js_fields[i].kind == PX__JS_STRLIST) {
      const ProtobufCFieldDescriptor *fd = px__js_fd(i);
      size_t n = *(const size_t *)((const char *)msg + fd->quantifier_offset);
      char *const *items = *(char *const *const *)((const char *)msg + fd->offset);
      char why[160];
      int bad = px__js_list_bad(items, n, why, sizeof why);
      if (bad >= 0)
        return px__js_fail(PX_ERR_INVALID, w, px__js_mark(w, i, -1), "%s[%d]: %s",
                           px__js_path(i, path, sizeof path), bad, why);
      continue;
    }
    px__js_value_t v;
    px__js_get(msg, i, &v);
    if (!px__js_value_ok(i, &v)) {
      px__js_show(i, &v, got, sizeof got);
      return px__js_fail(PX_ERR_INVALID, w, px__js_mark(w, i, -1), "%s: expected %s, got %s",
                         px__js_path(i, path, sizeof path), px__js_expected(i, exp, sizeof exp),
                         got);
    }
  }

  const Prunex__V1__TrainSpec *t = spec->train;
  const Prunex__V1__ClusterSpec *c = spec->cluster;
  const px_strategy_info_t *si = px_strategy_info((px_strategy_kind_t)spec->strategy);
  int admm = si && si->admm;
  int f_le = px__js_find("train.local_epochs"), f_ls = px__js_find("train.local_steps");
  if (admm && t->local_epochs == 0 && t->local_steps == 0)
    return px__js_fail(PX_ERR_INVALID, w, px__js_mark(w, f_le, f_ls),
                       "train.local_epochs: local_epochs and local_steps are both 0, but strategy "
                       "%s needs one of them > 0 to define an outer iteration",
                       px_jobspec_strategy_name(spec->strategy));
  if (admm && t->local_steps == 0 && t->local_epochs > t->epochs)
    return px__js_fail(PX_ERR_INVALID, w, px__js_mark(w, f_le, px__js_find("train.epochs")),
                       "train.local_epochs: %d local epochs per outer iteration exceed "
                       "train.epochs (%d), the whole budget",
                       t->local_epochs, t->epochs);
  if (t->nesterov && t->momentum == 0.0)
    return px__js_fail(PX_ERR_INVALID, w,
                       px__js_mark(w, px__js_find("train.nesterov"), px__js_find("train.momentum")),
                       "train.nesterov: Nesterov momentum needs train.momentum > 0");
  if ((int64_t)c->nodes * c->workers_per_node > (1 << 20))
    return px__js_fail(PX_ERR_INVALID, w,
                       px__js_mark(w, px__js_find("cluster.workers_per_node"),
                                   px__js_find("cluster.nodes")),
                       "cluster.workers_per_node: %d nodes x %d workers is more than 1048576 ranks",
                       c->nodes, c->workers_per_node);
  if (!strcmp(spec->comm->backend, "nccl") && !strcmp(c->device, "cpu"))
    return px__js_fail(PX_ERR_INVALID, w,
                       px__js_mark(w, px__js_find("comm.backend"), px__js_find("cluster.device")),
                       "comm.backend: nccl moves device memory and needs cluster.device cuda or "
                       "auto, got cpu");
  px_status_t cst = px__js_check_comm(spec, w);
  if (cst == PX_OK) cst = px__js_check_notify(spec, w);
  if (cst == PX_OK) cst = px__js_check_elastic(spec, w);
  if (cst == PX_OK) cst = px__js_check_sweep(spec, w, NULL);
  if (cst != PX_OK) return cst;
  const Prunex__V1__AdmmSpec *a = spec->admm;
  if (a->rho_max < a->rho1 || a->rho_max < a->rho2)
    return px__js_fail(PX_ERR_INVALID, w,
                       px__js_mark(w, px__js_find("admm.rho_max"),
                                   px__js_find(a->rho_max < a->rho1 ? "admm.rho1" : "admm.rho2")),
                       "admm.rho_max: %g is below the initial penalty admm.%s (%g)", a->rho_max,
                       a->rho_max < a->rho1 ? "rho1" : "rho2",
                       a->rho_max < a->rho1 ? a->rho1 : a->rho2);
  px_status_t dst = px__js_check_dataset(spec, w);
  if (dst != PX_OK) return dst;
  return px__js_check_prune(spec, w);
}

px_status_t px_jobspec_validate(const Prunex__V1__JobSpec *spec) {
  PX_REQUIRE(spec, "px_jobspec_validate: NULL spec");
  px__js_where_t w;
  memset(&w, 0, sizeof w);
  return px__js_check(spec, &w);
}

/* The image folder a spec names, checked on this machine (pxctl, before it
 * submits): kept here, in the spec layer (pxctl links it), rather than
 * with the configurations of strategy/jobspec_translate.c. */
px_status_t px_jobspec_check_data(const Prunex__V1__JobSpec *spec) {
  PX_REQUIRE(spec && spec->dataset && spec->model, "px_jobspec_check_data: incomplete spec");
  if (strcmp(spec->dataset->name, "folder") != 0) return PX_OK;
  int32_t classes = 0;
  PX_CHECK(px_folder_check(spec->dataset->path, &classes, NULL));
  if (spec->model->num_classes != 0 && spec->model->num_classes != classes)
    return px_set_error(PX_ERR_INVALID, "spec.model.num_classes: %d, but the image folder "
                        "%s has %d classes (0 takes it from the data set)",
                        spec->model->num_classes, spec->dataset->path, classes);
  return PX_OK;
}
