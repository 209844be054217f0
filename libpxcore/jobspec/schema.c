/* The job spec schema: one table of every field with its default and legal
 * range, and the code that applies it to a prunex.v1.JobSpec: defaults,
 * single-field checks (the same for a parsed file and for a spec that came
 * over the wire; the cross-field ones are check.c's), filling proto zeros,
 * and freeing. The table
 * is the one place a new proto field needs a line; test_jobspec checks that
 * it and the proto agree. */
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "jobspec/jobspec_int.h"
#include "prunex/arch.h"
#include "prunex/image.h"
#include "prunex/jobspec.h"
#include "prunex/strategy_table.h"
#include "px_check.h"

/* ---- the table ------------------------------------------------------------ */

enum {
  S_MODEL, S_DATASET, S_CLUSTER, S_TRAIN, S_PRUNE, S_ADMM, S_COMM, S_RECOVERY, S_NOTIFY, S_ELASTIC
};

const px__js_section_t px__js_sections[] = {
    [S_MODEL] = {"model", &prunex__v1__model_spec__descriptor},
    [S_DATASET] = {"dataset", &prunex__v1__dataset_spec__descriptor},
    [S_CLUSTER] = {"cluster", &prunex__v1__cluster_spec__descriptor},
    [S_TRAIN] = {"train", &prunex__v1__train_spec__descriptor},
    [S_PRUNE] = {"prune", &prunex__v1__prune_spec__descriptor},
    [S_ADMM] = {"admm", &prunex__v1__admm_spec__descriptor},
    [S_COMM] = {"comm", &prunex__v1__comm_spec__descriptor},
    [S_RECOVERY] = {"recovery", &prunex__v1__recovery_spec__descriptor},
    [S_NOTIFY] = {"notify", &prunex__v1__notify_spec__descriptor},
    [S_ELASTIC] = {"elastic", &prunex__v1__elastic_spec__descriptor},
};
const int px__js_nsections = (int)(sizeof px__js_sections / sizeof px__js_sections[0]);

#define I32MAX 2147483647.0
#define INF INFINITY
#define LO_OPEN PX__JS_LO_OPEN
#define HI_OPEN PX__JS_HI_OPEN

/* Numbers and booleans: {section, key, kind, flags, lo, hi, choices, def}.
 * Strings: def_str. Keep in step with the schema comment in jobspec.h and
 * with examples/README.md. */
const px__js_field_t px__js_fields[] = {
    {PX__JS_TOP, "name", PX__JS_STRING, PX__JS_NAME, 0, 0, NULL, 0, "job"},
    {PX__JS_TOP, "strategy", PX__JS_STRATEGY, PX__JS_REQUIRED, 0, 0, NULL,
     PRUNEX__V1__STRATEGY__STRATEGY_HSADMM, NULL},
    {PX__JS_TOP, "output_dir", PX__JS_STRING, 0, 0, 0, NULL, 0, ""},
    /* Scheduling: 100 is every user's default; the coordinator
     * lets users lower it and admins set any value in range. */
    {PX__JS_TOP, "priority", PX__JS_INT, 0, 1, 1000, NULL, 100, NULL},
    {PX__JS_TOP, "time_limit_s", PX__JS_INT, 0, 0, I32MAX, NULL, 0, NULL},

    {S_MODEL, "name", PX__JS_MODEL, PX__JS_REQUIRED, 0, 0, NULL, 0, "resnet20"},
    {S_MODEL, "in_channels", PX__JS_INT, 0, 0, I32MAX, NULL, 0, NULL},
    {S_MODEL, "num_classes", PX__JS_INT, PX__JS_ZERO_OK, 2, I32MAX, NULL, 0, NULL},
    {S_MODEL, "onnx", PX__JS_STRING, 0, 0, 0, NULL, 0, ""},
    {S_MODEL, "onnx_sha256", PX__JS_STRING, 0, 0, 0, NULL, 0, ""},

    {S_DATASET, "name", PX__JS_CHOICE, PX__JS_REQUIRED, 0, 0,
     "fashion-mnist|cifar10|synthetic|folder", 0, "fashion-mnist"},
    {S_DATASET, "path", PX__JS_STRING, 0, 0, 0, NULL, 0, ""},
    {S_DATASET, "augment", PX__JS_BOOL, 0, 0, 0, NULL, 1, NULL},
    {S_DATASET, "crop_padding", PX__JS_INT, 0, 0, 32, NULL, 4, NULL},
    {S_DATASET, "flip", PX__JS_BOOL, 0, 0, 0, NULL, 1, NULL},
    /* image folders: the stored size is bounded by PX_IMAGE_MAX_SIZE */
    {S_DATASET, "image_size", PX__JS_INT, 0, 8, PX_IMAGE_MAX_SIZE, NULL, 32, NULL},
    {S_DATASET, "channels", PX__JS_INT, 0, 1, 3, NULL, 3, NULL},
    {S_DATASET, "min_scale", PX__JS_DOUBLE, LO_OPEN, 0, 1, NULL, 0.35, NULL},
    {S_DATASET, "cache_dir", PX__JS_STRING, 0, 0, 0, NULL, 0, ""},
    /* a share, not a count; 0 is not a setting (a spec without the
     * field gets the default), a value below 1/N allows none of N */
    {S_DATASET, "max_skipped", PX__JS_DOUBLE, LO_OPEN, 0, 1, NULL, PX_FOLDER_MAX_SKIPPED, NULL},
    /* streamed image folders (data.h): 0 is the default budget (a quarter
     * of the memory) and the default thread count (the worker's compute
     * threads, at most 8); prefetch 2: one batch being decoded while one
     * waits, so a slow batch (large files) does not stall the step */
    {S_DATASET, "cache_budget_mb", PX__JS_INT, 0, 0, I32MAX, NULL, 0, NULL},
    {S_DATASET, "loader_threads", PX__JS_INT, 0, 0, 256, NULL, 0, NULL},
    {S_DATASET, "prefetch", PX__JS_INT, 0, 1, 16, NULL, 2, NULL},
    {S_DATASET, "train_samples", PX__JS_INT, PX__JS_DERIVED | PX__JS_ZERO_OK, 1, I32MAX, NULL, 0,
     NULL},

    {S_CLUSTER, "nodes", PX__JS_INT, PX__JS_REQUIRED, 1, I32MAX, NULL, 1, NULL},
    {S_CLUSTER, "workers_per_node", PX__JS_INT, PX__JS_REQUIRED, 1, 4096, NULL, 1, NULL},
    {S_CLUSTER, "device", PX__JS_CHOICE, 0, 0, 0, "auto|cpu|cuda", 0, "auto"},
    {S_CLUSTER, "threads_per_worker", PX__JS_INT, 0, 0, I32MAX, NULL, 0, NULL},

    {S_TRAIN, "epochs", PX__JS_INT, 0, 1, I32MAX, NULL, 1, NULL},
    {S_TRAIN, "batch_size", PX__JS_INT, 0, 1, I32MAX, NULL, 128, NULL},
    {S_TRAIN, "lr", PX__JS_DOUBLE, LO_OPEN, 0, INF, NULL, 0.1, NULL},
    {S_TRAIN, "momentum", PX__JS_DOUBLE, HI_OPEN, 0, 1, NULL, 0.9, NULL},
    {S_TRAIN, "nesterov", PX__JS_BOOL, 0, 0, 0, NULL, 0, NULL},
    {S_TRAIN, "weight_decay", PX__JS_DOUBLE, 0, 0, INF, NULL, 5e-4, NULL},
    {S_TRAIN, "local_epochs", PX__JS_INT, 0, 0, I32MAX, NULL, 1, NULL},
    {S_TRAIN, "local_steps", PX__JS_INT, 0, 0, I32MAX, NULL, 0, NULL},
    {S_TRAIN, "seed", PX__JS_INT, 0, 0, 18446744073709551615.0, NULL, 1, NULL}, /* uint64 */
    {S_TRAIN, "lr_schedule", PX__JS_CHOICE, 0, 0, 0, "constant|cosine|step", 0, "cosine"},
    {S_TRAIN, "eval_every", PX__JS_INT, 0, 1, I32MAX, NULL, 1, NULL},
    {S_TRAIN, "precision", PX__JS_CHOICE, 0, 0, 0, "fp32|bf16", 0, "fp32"},
    {S_TRAIN, "bn_calibration_batches", PX__JS_INT, 0, 1, 100000, NULL, 20, NULL},

    {S_PRUNE, "filter_keep", PX__JS_DOUBLE, LO_OPEN, 0, 1, NULL, 1.0, NULL},
    {S_PRUNE, "channel_keep", PX__JS_DOUBLE, LO_OPEN, 0, 1, NULL, 1.0, NULL},
    {S_PRUNE, "shape_keep", PX__JS_DOUBLE, LO_OPEN, 0, 1, NULL, 1.0, NULL},
    {S_PRUNE, "skip_layers", PX__JS_STRLIST, 0, 0, 0, NULL, 0, NULL},
    {S_PRUNE, "nm_n", PX__JS_INT, 0, 0, PX_PRUNE_NM_MAX, NULL, 0, NULL},
    {S_PRUNE, "nm_m", PX__JS_INT, 0, 0, PX_PRUNE_NM_MAX, NULL, 0, NULL},
    {S_PRUNE, "compact_training", PX__JS_BOOL, 0, 0, 0, NULL, 0, NULL},
    /* 0: channel_keep's (the fraction every conv kept before the field) */
    {S_PRUNE, "uncoupled_channel_keep", PX__JS_DOUBLE, 0, 0, 1, NULL, 0, NULL},
    /* 0: no budget (channel_keep as written) */
    {S_PRUNE, "mac_keep", PX__JS_DOUBLE, 0, 0, 1, NULL, 0, NULL},
    /* 0: the target keep from the first round */
    {S_PRUNE, "ramp_iterations", PX__JS_INT, 0, 0, I32MAX, NULL, 0, NULL},

    /* rho1 = rho2 = 1e-3: the proximal pull rho * (theta - z + u) then has
     * the size of the weight decay (5e-4 * theta) for CNN weights of the
     * usual scale, so it regularises gently at first instead of freezing the
     * local models onto an early, poor consensus; ADMM pruning work starts
     * there too (Zhang et al., ECCV 2018: rho 1e-3 and raised as training
     * goes). Residual balancing (mu 10, tau 2: Boyd 3.4.1's values) raises
     * it where the primal residual dominates, up to rho_max = 1e4, and the
     * tolerances are Boyd 3.3.1's usual eps_abs 1e-4, eps_rel 1e-3. */
    {S_ADMM, "rho1", PX__JS_DOUBLE, LO_OPEN, 0, INF, NULL, 1e-3, NULL},
    {S_ADMM, "rho2", PX__JS_DOUBLE, LO_OPEN, 0, INF, NULL, 1e-3, NULL},
    {S_ADMM, "max_iterations", PX__JS_INT, PX__JS_DERIVED, 1, I32MAX, NULL, 0, NULL},
    {S_ADMM, "adaptive_rho", PX__JS_BOOL, 0, 0, 0, NULL, 1, NULL},
    {S_ADMM, "mu", PX__JS_DOUBLE, LO_OPEN, 1, INF, NULL, 10, NULL},
    {S_ADMM, "tau", PX__JS_DOUBLE, LO_OPEN, 1, INF, NULL, 2, NULL},
    {S_ADMM, "rho_max", PX__JS_DOUBLE, LO_OPEN, 0, INF, NULL, 1e4, NULL},
    {S_ADMM, "freeze_on_stable", PX__JS_INT, 0, 0, I32MAX, NULL, 3, NULL},
    {S_ADMM, "freeze_iteration", PX__JS_INT, 0, 0, I32MAX, NULL, 0, NULL},
    {S_ADMM, "eps_abs", PX__JS_DOUBLE, 0, 0, INF, NULL, 1e-4, NULL},
    {S_ADMM, "eps_rel", PX__JS_DOUBLE, 0, 0, INF, NULL, 1e-3, NULL},
    /* Off: a job trains its whole budget (the residuals say the workers
     * agree, not that the model has learned what the budget allows); the
     * residual test freezes the masks and is reported. */
    {S_ADMM, "stop_on_converged", PX__JS_BOOL, 0, 0, 0, NULL, 0, NULL},
    /* rho1 grows by this factor each iteration until the masks freeze and
     * is back at its value without the ramp from then on (1: off). */
    {S_ADMM, "rho1_ramp", PX__JS_DOUBLE, 0, 1, 10, NULL, 1, NULL},
    /* After the freeze the local phases train the pruned network for
     * accuracy: the pull toward the consensus kept as it is, decayed
     * linearly to 0 at the last iteration, or released at once. */
    {S_ADMM, "final_prox", PX__JS_CHOICE, 0, 0, 0, "keep|decay|release", 0, "keep"},
    /* Where train.weight_decay acts: each local SGD step, as DDP's does
     * (measured best: docs/performance.md, "Accuracy over seeds"), or the
     * z update's lambda/2 ||z||^2 (the paper's form, whose dual leaves the
     * local models about lambda / N of decay). */
    {S_ADMM, "weight_decay_in", PX__JS_CHOICE, 0, 0, 0, "local|consensus", 0, "local"},

    /* Buckets are capped at 1 GiB so that element counts stay far inside the
     * int range of the collectives; 4-byte multiples keep f32 buckets whole. */
    {S_COMM, "bucket_bytes", PX__JS_SIZE, PX__JS_MULT4, 1, 1073741824.0, NULL, 33554432.0, NULL},
    {S_COMM, "timeout_ms", PX__JS_INT, 0, 1, I32MAX, NULL, 60000, NULL},
    {S_COMM, "backend", PX__JS_CHOICE, 0, 0, 0, "auto|ucx|nccl", 0, "auto"},
    {S_COMM, "topk_ratio", PX__JS_DOUBLE, LO_OPEN, 0, 1, NULL, 0.01, NULL},
    {S_COMM, "quantize", PX__JS_CHOICE, 0, 0, 0, "none|8|4", 0, "none"},
    {S_COMM, "overlap", PX__JS_BOOL, 0, 0, 0, NULL, 0, NULL},
    {S_COMM, "compress", PX__JS_CHOICE, 0, 0, 0, "none|lossless", 0, "none"},

    /* Faults: off by default; a restart without checkpoints
     * starts from iteration 0. 1000 restarts is far past any sane policy. */
    {S_RECOVERY, "checkpoint_every", PX__JS_INT, 0, 0, I32MAX, NULL, 0, NULL},
    {S_RECOVERY, "max_restarts", PX__JS_INT, 0, 0, 1000, NULL, 0, NULL},
    {S_RECOVERY, "keep", PX__JS_INT, 0, 1, 16, NULL, 2, NULL},
    {S_RECOVERY, "max_unprotected_iterations", PX__JS_INT, 0, 0, I32MAX, NULL, 0, NULL},

    /* Notifications: checked by px__js_check_notify. */
    {S_NOTIFY, "url", PX__JS_STRING, 0, 0, 0, NULL, 0, ""},
    {S_NOTIFY, "states", PX__JS_STRING, 0, 0, 0, NULL, 0, "end"},

    /* Elastic jobs (hsadmm): both 0, not elastic. max_nodes 0 with
     * min_nodes set is cluster.nodes (the job never grows); the rules
     * across fields are px__js_check_elastic's. */
    {S_ELASTIC, "min_nodes", PX__JS_INT, PX__JS_ZERO_OK, 1, I32MAX, NULL, 0, NULL},
    {S_ELASTIC, "max_nodes", PX__JS_INT, PX__JS_ZERO_OK, 1, I32MAX, NULL, 0, NULL},
};
const int px__js_nfields = (int)(sizeof px__js_fields / sizeof px__js_fields[0]);

_Static_assert(sizeof px__js_fields / sizeof px__js_fields[0] <= PX__JS_MAX_FIELDS,
               "raise PX__JS_MAX_FIELDS");
_Static_assert(sizeof px__js_sections / sizeof px__js_sections[0] <= PX__JS_MAX_SECTIONS,
               "raise PX__JS_MAX_SECTIONS");

/* Strategy names come from the strategy table (strategy.h); its kinds are
 * the values of prunex.v1.Strategy. */
const char *px_jobspec_strategy_name(Prunex__V1__Strategy s) {
  const px_strategy_info_t *i = px_strategy_info((px_strategy_kind_t)s);
  return i ? i->name : "unspecified";
}

/* ---- lookups and access ---------------------------------------------------------- */

int px__js_section_find(const char *key) {
  for (int s = 0; s < px__js_nsections; s++)
    if (!strcmp(px__js_sections[s].key, key)) return s;
  return -1;
}

int px__js_find(const char *path) {
  const char *dot = strchr(path, '.');
  int sec = PX__JS_TOP;
  const char *key = path;
  if (dot) {
    char buf[32];
    size_t n = (size_t)(dot - path);
    if (n >= sizeof buf) return -1;
    memcpy(buf, path, n);
    buf[n] = '\0';
    sec = px__js_section_find(buf);
    if (sec < 0) return -1;
    key = dot + 1;
  }
  for (int i = 0; i < px__js_nfields; i++)
    if (px__js_fields[i].section == sec && !strcmp(px__js_fields[i].key, key)) return i;
  return -1;
}

const char *px__js_path(int fi, char *buf, size_t cap) {
  const px__js_field_t *f = &px__js_fields[fi];
  if (f->section == PX__JS_TOP) snprintf(buf, cap, "%s", f->key);
  else snprintf(buf, cap, "%s.%s", px__js_sections[f->section].key, f->key);
  return buf;
}

const ProtobufCFieldDescriptor *px__js_fd(int fi) {
  const px__js_field_t *f = &px__js_fields[fi];
  const ProtobufCMessageDescriptor *d = f->section == PX__JS_TOP
                                            ? &prunex__v1__job_spec__descriptor
                                            : px__js_sections[f->section].desc;
  return protobuf_c_message_descriptor_get_field_by_name(d, f->key);
}

void **px__js_section_slot(const Prunex__V1__JobSpec *spec, int s) {
  const ProtobufCFieldDescriptor *fd =
      protobuf_c_message_descriptor_get_field_by_name(&prunex__v1__job_spec__descriptor,
                                                      px__js_sections[s].key);
  return fd ? (void **)((char *)spec + fd->offset) : NULL;
}

void *px__js_msg(const Prunex__V1__JobSpec *spec, int fi) {
  int s = px__js_fields[fi].section;
  if (s == PX__JS_TOP) return (void *)spec;
  void **slot = px__js_section_slot(spec, s);
  return slot ? *slot : NULL;
}

void px__js_get(const void *msg, int fi, px__js_value_t *v) {
  const ProtobufCFieldDescriptor *fd = px__js_fd(fi);
  memset(v, 0, sizeof *v);
  if (!fd || !msg) return;
  const char *p = (const char *)msg + fd->offset;
  switch (fd->type) {
    case PROTOBUF_C_TYPE_INT32: v->i = *(const int32_t *)p; break;
    case PROTOBUF_C_TYPE_INT64: v->i = *(const int64_t *)p; break;
    case PROTOBUF_C_TYPE_UINT64:
      v->u = *(const uint64_t *)p;
      v->is_unsigned = 1;
      break;
    case PROTOBUF_C_TYPE_DOUBLE: v->d = *(const double *)p; break;
    case PROTOBUF_C_TYPE_BOOL: v->i = *(const protobuf_c_boolean *)p ? 1 : 0; break;
    case PROTOBUF_C_TYPE_ENUM: v->i = *(const int *)p; break;
    case PROTOBUF_C_TYPE_STRING:
      if (fd->label != PROTOBUF_C_LABEL_REPEATED) v->s = *(char *const *)p;
      break;
    default: break;
  }
  if (fd->type == PROTOBUF_C_TYPE_STRING && !v->s) v->s = "";
}

char *px__js_strndup(const char *s, size_t n) {
  /* Message memory comes from malloc, protobuf-c's default allocator, so
   * that one free function serves parsed specs and unpacked ones. */
  char *d = malloc(n + 1);
  if (!d) return NULL;
  memcpy(d, s, n);
  d[n] = '\0';
  return d;
}

static void px__js_free_string(char *s) {
  if (s && s != (char *)protobuf_c_empty_string) free(s);
}

px_status_t px__js_set(void *msg, int fi, const px__js_value_t *v) {
  const ProtobufCFieldDescriptor *fd = px__js_fd(fi);
  if (!fd || !msg) return px_set_error(PX_ERR_INTERNAL, "job spec: field %s is not in the proto",
                                       px__js_fields[fi].key);
  char *p = (char *)msg + fd->offset;
  switch (fd->type) {
    case PROTOBUF_C_TYPE_INT32: *(int32_t *)p = (int32_t)v->i; break;
    case PROTOBUF_C_TYPE_INT64: *(int64_t *)p = v->i; break;
    case PROTOBUF_C_TYPE_UINT64: *(uint64_t *)p = v->is_unsigned ? v->u : (uint64_t)v->i; break;
    case PROTOBUF_C_TYPE_DOUBLE: *(double *)p = v->d; break;
    case PROTOBUF_C_TYPE_BOOL: *(protobuf_c_boolean *)p = v->i ? 1 : 0; break;
    case PROTOBUF_C_TYPE_ENUM: *(int *)p = (int)v->i; break;
    case PROTOBUF_C_TYPE_STRING: {
      const char *s = v->s ? v->s : "";
      char *d = px__js_strndup(s, strlen(s));
      if (!d) return px_set_error(PX_ERR_NOMEM, "job spec: out of memory");
      px__js_free_string(*(char **)p);
      *(char **)p = d;
      break;
    }
    default:
      return px_set_error(PX_ERR_INTERNAL, "job spec: field %s has an unexpected type",
                          px__js_fields[fi].key);
  }
  return PX_OK;
}

/* ---- legal values ------------------------------------------------------------- */

static int px__js_in_choices(const char *choices, const char *s) {
  size_t n = strlen(s);
  const char *p = choices;
  while (*p) {
    const char *bar = strchr(p, '|');
    size_t len = bar ? (size_t)(bar - p) : strlen(p);
    if (len == n && !strncmp(p, s, n)) return 1;
    if (!bar) break;
    p = bar + 1;
  }
  return 0;
}

int px__js_value_ok(int fi, const px__js_value_t *v) {
  const px__js_field_t *f = &px__js_fields[fi];
  switch (f->kind) {
    case PX__JS_INT:
      if (v->is_unsigned) return 1;
      if ((f->flags & PX__JS_ZERO_OK) && v->i == 0) return 1;
      return (double)v->i >= f->lo && (double)v->i <= f->hi;
    case PX__JS_SIZE:
      if ((double)v->i < f->lo || (double)v->i > f->hi) return 0;
      return !(f->flags & PX__JS_MULT4) || v->i % 4 == 0;
    case PX__JS_DOUBLE: {
      double d = v->d;
      if (!isfinite(d)) return 0;
      if ((f->flags & LO_OPEN) ? !(d > f->lo) : !(d >= f->lo)) return 0;
      if ((f->flags & HI_OPEN) ? !(d < f->hi) : !(d <= f->hi)) return 0;
      return 1;
    }
    case PX__JS_BOOL: return 1;
    case PX__JS_STRING:
      if (!v->s || !px_text_ok(v->s)) return 0;
      if (f->flags & PX__JS_NAME) {
        size_t n = strlen(v->s);
        return n >= 1 && n <= 128 && !strchr(v->s, '/');
      }
      return 1;
    case PX__JS_CHOICE: return v->s && px__js_in_choices(f->choices, v->s);
    case PX__JS_MODEL: return v->s && v->s[0] && (px_model_arch_known(v->s) || !strcmp(v->s, "onnx"));
    case PX__JS_STRATEGY: return px_strategy_info((px_strategy_kind_t)v->i) != NULL;
    case PX__JS_STRLIST: return 1;
  }
  return 0;
}

static void px__js_append(char *buf, size_t cap, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
static void px__js_append(char *buf, size_t cap, const char *fmt, ...) {
  size_t n = strlen(buf);
  if (n + 1 >= cap) return;
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(buf + n, cap - n, fmt, ap);
  va_end(ap);
}

/* "a, b, c" from "a|b|c" or "a b c". */
static void px__js_list(char *buf, size_t cap, const char *items, char sep) {
  for (const char *p = items; *p; p++) {
    if (*p == sep) px__js_append(buf, cap, ", ");
    else px__js_append(buf, cap, "%c", *p);
  }
}

const char *px__js_expected(int fi, char *buf, size_t cap) {
  const px__js_field_t *f = &px__js_fields[fi];
  buf[0] = '\0';
  switch (f->kind) {
    case PX__JS_INT: {
      const ProtobufCFieldDescriptor *fd = px__js_fd(fi);
      if (fd && fd->type == PROTOBUF_C_TYPE_UINT64) {
        px__js_append(buf, cap, "an integer in [0, 18446744073709551615]");
        break;
      }
      if (f->flags & PX__JS_ZERO_OK) px__js_append(buf, cap, "0 or ");
      if (f->hi >= I32MAX) {
        if (f->lo == 1 && !(f->flags & PX__JS_ZERO_OK))
          px__js_append(buf, cap, "a positive integer");
        else px__js_append(buf, cap, "an integer >= %.0f", f->lo);
      } else {
        px__js_append(buf, cap, "an integer in [%.0f, %.0f]", f->lo, f->hi);
      }
      break;
    }
    case PX__JS_SIZE:
      px__js_append(buf, cap,
                    "a size in bytes that is a positive multiple of 4, at most 1 GiB "
                    "(e.g. 33554432, 32MiB, 4KB)");
      break;
    case PX__JS_DOUBLE:
      if (isinf(f->hi)) {
        px__js_append(buf, cap, "a number %s %g", (f->flags & LO_OPEN) ? ">" : ">=", f->lo);
      } else {
        px__js_append(buf, cap, "a number in %c%g, %g%c", (f->flags & LO_OPEN) ? '(' : '[', f->lo,
                      f->hi, (f->flags & HI_OPEN) ? ')' : ']');
      }
      break;
    case PX__JS_BOOL: px__js_append(buf, cap, "true or false"); break;
    case PX__JS_STRING:
      if (f->flags & PX__JS_NAME)
        px__js_append(buf, cap, "a name of 1 to 128 bytes without '/' or control characters");
      else
        px__js_append(buf, cap, "a string without control characters");
      break;
    case PX__JS_CHOICE:
      px__js_append(buf, cap, "one of ");
      px__js_list(buf, cap, f->choices, '|');
      break;
    case PX__JS_MODEL:
      px__js_append(buf, cap, "one of ");
      px__js_list(buf, cap, px_model_arch_list(), ' ');
      px__js_append(buf, cap, ", onnx (with model.onnx)");
      break;
    case PX__JS_STRATEGY: {
      char names[128];
      px__js_append(buf, cap, "one of %s", px_strategy_names(names, sizeof names, ", "));
      break;
    }
    case PX__JS_STRLIST: px__js_append(buf, cap, "a list of parameter names"); break;
  }
  return buf;
}

/* ---- errors ----------------------------------------------------------------------- */

px_status_t px__js_fail(px_status_t st, const px__js_where_t *w, const px__js_mark_t *mark,
                        const char *fmt, ...) {
  char msg[512];
  int n;
  if (!w || !w->file)
    n = snprintf(msg, sizeof msg, "%s", w && w->prefix ? w->prefix : "job spec: ");
  else if (mark && mark->line)
    n = snprintf(msg, sizeof msg, "%s:%zu:%zu: ", w->file, mark->line, mark->col);
  else n = snprintf(msg, sizeof msg, "%s: ", w->file);
  if (n < 0 || (size_t)n >= sizeof msg) n = 0;
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(msg + n, sizeof msg - (size_t)n, fmt, ap);
  va_end(ap);
  return px_set_error(st, "%s", msg);
}

int px__js_distance(const char *a, const char *b) {
  enum { CAP = 64 };
  size_t n = strlen(a), m = strlen(b);
  if (n >= CAP || m >= CAP) return CAP;
  int d[CAP + 1][CAP + 1];
  for (size_t i = 0; i <= n; i++) d[i][0] = (int)i;
  for (size_t j = 0; j <= m; j++) d[0][j] = (int)j;
  for (size_t i = 1; i <= n; i++) {
    for (size_t j = 1; j <= m; j++) {
      int cost = a[i - 1] != b[j - 1];
      int best = d[i - 1][j] + 1;
      if (d[i][j - 1] + 1 < best) best = d[i][j - 1] + 1;
      if (d[i - 1][j - 1] + cost < best) best = d[i - 1][j - 1] + cost;
      if (i > 1 && j > 1 && a[i - 1] == b[j - 2] && a[i - 2] == b[j - 1] &&
          d[i - 2][j - 2] + 1 < best)
        best = d[i - 2][j - 2] + 1;
      d[i][j] = best;
    }
  }
  return d[n][m];
}

/* ---- defaults --------------------------------------------------------------------- */

static px_status_t px__js_set_default(void *msg, int fi) {
  const px__js_field_t *f = &px__js_fields[fi];
  px__js_value_t v = {0};
  switch (f->kind) {
    case PX__JS_STRLIST: return PX_OK; /* empty list */
    case PX__JS_STRING:
    case PX__JS_CHOICE:
    case PX__JS_MODEL: v.s = f->def_str ? f->def_str : ""; break;
    case PX__JS_DOUBLE: v.d = f->def; break;
    default: v.i = (int64_t)f->def; break;
  }
  if (f->flags & PX__JS_DERIVED) v.i = 0; /* filled once the rest is known */
  return px__js_set(msg, fi, &v);
}

static px_status_t px__js_new_section(Prunex__V1__JobSpec *spec, int s) {
  const ProtobufCMessageDescriptor *d = px__js_sections[s].desc;
  void **slot = px__js_section_slot(spec, s);
  if (!slot) return px_set_error(PX_ERR_INTERNAL, "job spec: section %s is not in the proto",
                                 px__js_sections[s].key);
  ProtobufCMessage *m = calloc(1, d->sizeof_message);
  if (!m) return px_set_error(PX_ERR_NOMEM, "job spec: out of memory");
  d->message_init(m);
  *slot = m;
  for (int i = 0; i < px__js_nfields; i++)
    if (px__js_fields[i].section == s) PX_CHECK(px__js_set_default(m, i));
  return PX_OK;
}

px_status_t px__js_new_default(Prunex__V1__JobSpec **out) {
  *out = NULL;
  Prunex__V1__JobSpec *spec = calloc(1, sizeof *spec);
  if (!spec) return px_set_error(PX_ERR_NOMEM, "job spec: out of memory");
  prunex__v1__job_spec__init(spec);
  px_status_t st = PX_OK;
  for (int i = 0; i < px__js_nfields && st == PX_OK; i++)
    if (px__js_fields[i].section == PX__JS_TOP) st = px__js_set_default(spec, i);
  for (int s = 0; s < px__js_nsections && st == PX_OK; s++) st = px__js_new_section(spec, s);
  if (st != PX_OK) {
    px_jobspec_free(spec);
    return st;
  }
  *out = spec;
  return PX_OK;
}

int px__js_is_zero(int fi, const px__js_value_t *v) {
  switch (px__js_fields[fi].kind) {
    case PX__JS_DOUBLE: return v->d == 0.0;
    case PX__JS_STRING:
    case PX__JS_CHOICE:
    case PX__JS_MODEL: return !v->s || !v->s[0];
    case PX__JS_STRLIST: return 0;
    default: return v->is_unsigned ? v->u == 0 : v->i == 0;
  }
}

px_status_t px_jobspec_fill_defaults(Prunex__V1__JobSpec *spec) {
  PX_REQUIRE(spec, "px_jobspec_fill_defaults: NULL spec");
  for (int s = 0; s < px__js_nsections; s++) {
    void **slot = px__js_section_slot(spec, s);
    if (slot && !*slot) PX_CHECK(px__js_new_section(spec, s));
  }
  int mi = px__js_find("admm.max_iterations");
  for (int i = 0; i < px__js_nfields; i++) {
    if (i == mi) continue;
    void *msg = px__js_msg(spec, i);
    px__js_value_t v;
    px__js_get(msg, i, &v);
    if (px__js_is_zero(i, &v) && !px__js_value_ok(i, &v)) PX_CHECK(px__js_set_default(msg, i));
  }
  /* both zero is never a setting (the outer iteration would be undefined):
   * a client that set neither gets the parser's defaults */
  if (spec->train->local_epochs == 0 && spec->train->local_steps == 0)
    spec->train->local_epochs = (int32_t)px__js_fields[px__js_find("train.local_epochs")].def;
  if (spec->admm->max_iterations == 0 &&
      !(spec->admm->max_iterations = px__js_derive_max_iterations(spec)))
    return px__js_underived(spec, "job spec: ");
  return PX_OK;
}

void px_jobspec_free(Prunex__V1__JobSpec *spec) {
  if (spec) protobuf_c_message_free_unpacked(&spec->base, NULL);
}

void px__js_show(int fi, const px__js_value_t *v, char *buf, size_t cap) {
  switch (px__js_fields[fi].kind) {
    case PX__JS_DOUBLE: snprintf(buf, cap, "%g", v->d); break;
    case PX__JS_STRING:
    case PX__JS_CHOICE:
    case PX__JS_MODEL: snprintf(buf, cap, "'%.60s'", v->s ? v->s : ""); break;
    default:
      if (v->is_unsigned) snprintf(buf, cap, "%llu", (unsigned long long)v->u);
      else snprintf(buf, cap, "%lld", (long long)v->i);
  }
}

int px__js_list_bad(char *const *items, size_t n, char *why, size_t cap) {
  for (size_t i = 0; i < n; i++) {
    const char *s = items[i] ? items[i] : "";
    if (!s[0] || !px_text_ok(s)) {
      snprintf(why, cap, "expected a parameter name (e.g. conv1.weight), got '%.60s'", s);
      return (int)i;
    }
    for (size_t j = 0; j < i; j++) {
      if (items[j] && !strcmp(items[j], s)) {
        snprintf(why, cap, "'%.60s' is listed twice (also item %zu)", s, j);
        return (int)i;
      }
    }
  }
  return -1;
}
