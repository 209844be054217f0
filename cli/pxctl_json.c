/* The JSON emitter behind every `--json` of pxctl: compact documents, one
 * per command, with the escaping RFC 8259 asks for (quotes, backslashes,
 * control characters) and valid UTF-8 guaranteed, because job names,
 * reasons and log text come from users and other processes. Protobuf
 * messages are written generically from their descriptors so that the keys
 * are the proto field names and stay in step with proto/prunex.proto. */
#include <ctype.h>
#include <inttypes.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "prunex/jobspec.h"
#include "prunex/text.h"
#include "pxctl.h"

void pxctl_json_init(pxctl_json_t *j, FILE *f) {
  memset(j, 0, sizeof *j);
  j->f = f;
}

/* Writes the separator a new value needs at the current level. */
static void pxctl__json_value_start(pxctl_json_t *j) {
  if (j->after_key) {
    j->after_key = 0;
    return;
  }
  if (j->depth > 0 && j->count[j->depth - 1]++ > 0) fputc(',', j->f);
}

static void pxctl__json_open(pxctl_json_t *j, int c) {
  pxctl__json_value_start(j);
  fputc(c, j->f);
  if (j->depth < PXCTL_JSON_MAX_DEPTH) j->count[j->depth] = 0;
  j->depth++;
}

static void pxctl__json_close(pxctl_json_t *j, int c) {
  if (j->depth > 0) j->depth--;
  fputc(c, j->f);
}

void pxctl_json_begin_object(pxctl_json_t *j) { pxctl__json_open(j, '{'); }
void pxctl_json_end_object(pxctl_json_t *j) { pxctl__json_close(j, '}'); }
void pxctl_json_begin_array(pxctl_json_t *j) { pxctl__json_open(j, '['); }
void pxctl_json_end_array(pxctl_json_t *j) { pxctl__json_close(j, ']'); }

/* s[0..n) quoted (prunex/text.h's one JSON quoting), through one buffer
 * kept for the process (pxctl writes one document at a time, from one
 * thread), so a document of many strings allocates once. */
static void pxctl__json_raw_string(FILE *f, const char *s, size_t n) {
  static px_buf_t b;
  px_buf_reset(&b);
  px_buf_json_string(&b, s, n);
  if (!b.oom) fwrite(b.p, 1, b.len, f);
  else fputs("\"\"", f); /* out of memory: still a document */
}

void pxctl_json_key(pxctl_json_t *j, const char *key) {
  pxctl__json_value_start(j);
  pxctl__json_raw_string(j->f, key, strlen(key));
  fputc(':', j->f);
  j->after_key = 1;
}

void pxctl_json_string_n(pxctl_json_t *j, const char *s, size_t n) {
  pxctl__json_value_start(j);
  pxctl__json_raw_string(j->f, s, n);
}

void pxctl_json_string(pxctl_json_t *j, const char *s) {
  if (!s) {
    pxctl_json_null(j);
    return;
  }
  pxctl_json_string_n(j, s, strlen(s));
}

void pxctl_json_int(pxctl_json_t *j, int64_t v) {
  pxctl__json_value_start(j);
  fprintf(j->f, "%" PRId64, v);
}

void pxctl_json_uint(pxctl_json_t *j, uint64_t v) {
  pxctl__json_value_start(j);
  fprintf(j->f, "%" PRIu64, v);
}

/* Shortest %g form that reads back to the same double. */
void pxctl_json_double(pxctl_json_t *j, double v) {
  if (!isfinite(v)) {
    pxctl_json_null(j);
    return;
  }
  pxctl__json_value_start(j);
  char buf[64];
  for (int prec = 1; prec <= 17; prec++) {
    snprintf(buf, sizeof buf, "%.*g", prec, v);
    if (strtod(buf, NULL) == v) break;
  }
  /* JSON has no "inf" and %g never gives one here; it may give "1e+20",
   * which JSON accepts as it is. */
  fputs(buf, j->f);
}

void pxctl_json_bool(pxctl_json_t *j, int v) {
  pxctl__json_value_start(j);
  fputs(v ? "true" : "false", j->f);
}

void pxctl_json_null(pxctl_json_t *j) {
  pxctl__json_value_start(j);
  fputs("null", j->f);
}

void pxctl_json_finish(pxctl_json_t *j) {
  fputc('\n', j->f);
  fflush(j->f);
}

/* ---- protobuf-c messages ------------------------------------------------ */

static void pxctl__json_base64(pxctl_json_t *j, const uint8_t *p, size_t n) {
  static const char tab[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
  pxctl__json_value_start(j);
  fputc('"', j->f);
  for (size_t i = 0; i < n; i += 3) {
    uint32_t v = (uint32_t)p[i] << 16;
    if (i + 1 < n) v |= (uint32_t)p[i + 1] << 8;
    if (i + 2 < n) v |= p[i + 2];
    fputc(tab[(v >> 18) & 63], j->f);
    fputc(tab[(v >> 12) & 63], j->f);
    fputc(i + 1 < n ? tab[(v >> 6) & 63] : '=', j->f);
    fputc(i + 2 < n ? tab[v & 63] : '=', j->f);
  }
  fputc('"', j->f);
}

/* Enum value names carry the type as a prefix (JobState: JOB_STATE_RUNNING);
 * the JSON drops it. */
static void pxctl__json_enum(pxctl_json_t *j, const ProtobufCEnumDescriptor *d, int v) {
  if (d == &prunex__v1__strategy__descriptor) {
    pxctl_json_string(j, px_jobspec_strategy_name((Prunex__V1__Strategy)v));
    return;
  }
  const ProtobufCEnumValue *ev = protobuf_c_enum_descriptor_get_value(d, v);
  if (!ev) {
    pxctl_json_int(j, v);
    return;
  }
  char prefix[128];
  size_t n = 0;
  for (const char *s = d->short_name; *s && n + 3 < sizeof prefix; s++) {
    if (isupper((unsigned char)*s) && s != d->short_name) prefix[n++] = '_';
    prefix[n++] = (char)toupper((unsigned char)*s);
  }
  prefix[n++] = '_';
  prefix[n] = '\0';
  const char *name = ev->name;
  if (!strncmp(name, prefix, n) && name[n]) name += n;
  pxctl_json_string(j, name);
}

static size_t pxctl__json_elem_size(ProtobufCType t) {
  switch (t) {
    case PROTOBUF_C_TYPE_INT64:
    case PROTOBUF_C_TYPE_SINT64:
    case PROTOBUF_C_TYPE_SFIXED64:
    case PROTOBUF_C_TYPE_UINT64:
    case PROTOBUF_C_TYPE_FIXED64:
    case PROTOBUF_C_TYPE_DOUBLE: return 8;
    case PROTOBUF_C_TYPE_STRING: return sizeof(char *);
    case PROTOBUF_C_TYPE_BYTES: return sizeof(ProtobufCBinaryData);
    case PROTOBUF_C_TYPE_MESSAGE: return sizeof(ProtobufCMessage *);
    case PROTOBUF_C_TYPE_BOOL: return sizeof(protobuf_c_boolean);
    default: return 4;
  }
}

static void pxctl__json_scalar(pxctl_json_t *j, const ProtobufCFieldDescriptor *fd,
                               const void *p) {
  switch (fd->type) {
    case PROTOBUF_C_TYPE_INT32:
    case PROTOBUF_C_TYPE_SINT32:
    case PROTOBUF_C_TYPE_SFIXED32: pxctl_json_int(j, *(const int32_t *)p); break;
    case PROTOBUF_C_TYPE_UINT32:
    case PROTOBUF_C_TYPE_FIXED32: pxctl_json_uint(j, *(const uint32_t *)p); break;
    case PROTOBUF_C_TYPE_INT64:
    case PROTOBUF_C_TYPE_SINT64:
    case PROTOBUF_C_TYPE_SFIXED64: pxctl_json_int(j, *(const int64_t *)p); break;
    case PROTOBUF_C_TYPE_UINT64:
    case PROTOBUF_C_TYPE_FIXED64: pxctl_json_uint(j, *(const uint64_t *)p); break;
    case PROTOBUF_C_TYPE_FLOAT: pxctl_json_double(j, *(const float *)p); break;
    case PROTOBUF_C_TYPE_DOUBLE: pxctl_json_double(j, *(const double *)p); break;
    case PROTOBUF_C_TYPE_BOOL: pxctl_json_bool(j, *(const protobuf_c_boolean *)p); break;
    case PROTOBUF_C_TYPE_ENUM: pxctl__json_enum(j, fd->descriptor, *(const int *)p); break;
    case PROTOBUF_C_TYPE_STRING: {
      const char *s = *(char *const *)p;
      pxctl_json_string(j, s ? s : "");
      break;
    }
    case PROTOBUF_C_TYPE_BYTES: {
      const ProtobufCBinaryData *b = p;
      pxctl__json_base64(j, b->data, b->len);
      break;
    }
    case PROTOBUF_C_TYPE_MESSAGE: pxctl_json_message(j, *(ProtobufCMessage *const *)p); break;
  }
}

/* Fields where the proto says "negative: not measured" (an iteration
 * without a test evaluation, a layer that is not pruned) or "empty: none"
 * (a summary's model_path before there is a model): JSON says null. */
static int pxctl__json_unmeasured(const ProtobufCFieldDescriptor *fd, const void *p) {
  static const char *const names[] = {"test_accuracy", "train_accuracy", "loss", "test_loss",
                                      "density"};
  if (fd->type == PROTOBUF_C_TYPE_STRING && !strcmp(fd->name, "model_path")) {
    const char *s = *(char *const *)p;
    return !s || !s[0];
  }
  if (fd->type != PROTOBUF_C_TYPE_DOUBLE || *(const double *)p >= 0) return 0;
  for (size_t i = 0; i < sizeof names / sizeof names[0]; i++)
    if (!strcmp(fd->name, names[i])) return 1;
  return 0;
}

void pxctl_json_message(pxctl_json_t *j, const ProtobufCMessage *m) {
  if (!m) {
    pxctl_json_null(j);
    return;
  }
  const ProtobufCMessageDescriptor *d = m->descriptor;
  const char *base = (const char *)m;
  pxctl_json_begin_object(j);
  for (unsigned i = 0; i < d->n_fields; i++) {
    const ProtobufCFieldDescriptor *fd = &d->fields[i];
    pxctl_json_key(j, fd->name);
    if (fd->label == PROTOBUF_C_LABEL_REPEATED) {
      size_t n = *(const size_t *)(base + fd->quantifier_offset);
      const char *arr = *(char *const *)(base + fd->offset);
      size_t sz = pxctl__json_elem_size(fd->type);
      pxctl_json_begin_array(j);
      for (size_t k = 0; k < n && arr; k++) pxctl__json_scalar(j, fd, arr + k * sz);
      pxctl_json_end_array(j);
    } else if (pxctl__json_unmeasured(fd, base + fd->offset)) {
      pxctl_json_null(j);
    } else {
      pxctl__json_scalar(j, fd, base + fd->offset);
    }
  }
  pxctl_json_end_object(j);
}

void pxctl_json_job(pxctl_json_t *j, const Prunex__V1__Job *job) {
  if (!job) {
    pxctl_json_null(j);
    return;
  }
  char *canonical = NULL;
  Prunex__V1__Job copy = *job;
  /* A job without iterations (cancelled while pending, failed at start)
   * measured no density: the coordinator's 0 is proto3's default, not a
   * figure, so it is written as null, as test_accuracy already is. */
  Prunex__V1__JobSummary sum;
  if (job->summary && job->summary->iterations == 0) {
    sum = *job->summary;
    sum.density = -1.0;
    copy.summary = &sum;
  }
  if ((!job->spec_yaml || !job->spec_yaml[0]) && job->spec &&
      px_jobspec_to_yaml(job->spec, &canonical) == PX_OK)
    copy.spec_yaml = canonical;
  pxctl_json_message(j, &copy.base);
  px_free(canonical);
}
