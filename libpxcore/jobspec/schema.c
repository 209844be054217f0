/* The job spec schema: one table of every field with its default and legal
 * range, and the code that applies it to a prunex.v1.JobSpec: defaults,
 * single-field and cross-field checks (the same for a parsed file and for a
 * spec that came over the wire), filling proto zeros, and freeing. The table
 * is the one place a new proto field needs a line; test_jobspec checks that
 * it and the proto agree. */
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "jobspec/jobspec_int.h"
#include "prunex/data.h"
#include "prunex/jobspec.h"
#include "prunex/nn.h"
#include "prunex/strategy.h"
#include "px_check.h"

/* ---- the table ------------------------------------------------------------ */

enum { S_MODEL, S_DATASET, S_CLUSTER, S_TRAIN, S_PRUNE, S_ADMM, S_COMM, S_RECOVERY, S_NOTIFY };

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
    /* After the freeze the local phases train the pruned network for
     * accuracy: the pull toward the consensus kept as it is, decayed
     * linearly to 0 at the last iteration, or released at once. */
    {S_ADMM, "final_prox", PX__JS_CHOICE, 0, 0, 0, "keep|decay|release", 0, "keep"},

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

static void **px__js_section_slot(const Prunex__V1__JobSpec *spec, int s) {
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

/* ---- checks ------------------------------------------------------------------------- */

/* The first known position among fields a, b (-1: none), else a's section. */
static const px__js_mark_t *px__js_mark(const px__js_where_t *w, int a, int b) {
  if (!w) return NULL;
  if (a >= 0 && w->field[a].line) return &w->field[a];
  if (b >= 0 && w->field[b].line) return &w->field[b];
  if (a >= 0 && px__js_fields[a].section != PX__JS_TOP && w->section[px__js_fields[a].section].line)
    return &w->section[px__js_fields[a].section];
  return NULL;
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

/* The prune section's cross-field rules: N:M is both numbers or neither;
 * compact training is H-SADMM's (the strategies with frozen masks). */
static px_status_t px__js_check_prune(const Prunex__V1__JobSpec *spec, px__js_where_t *w) {
  const Prunex__V1__PruneSpec *p = spec->prune;
  if (p->compact_training && spec->strategy != PRUNEX__V1__STRATEGY__STRATEGY_HSADMM &&
      spec->strategy != PRUNEX__V1__STRATEGY__STRATEGY_HSADMM_FLAT)
    return px__js_fail(PX_ERR_INVALID, w,
                       px__js_mark(w, px__js_find("prune.compact_training"),
                                   px__js_find("strategy")),
                       "prune.compact_training: trains the compact model once H-SADMM's masks "
                       "are frozen and has no meaning for strategy %s (use false)",
                       px_jobspec_strategy_name(spec->strategy));
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
 * submits): kept here, in the client part, rather than with the
 * configurations of translate.c. */
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
