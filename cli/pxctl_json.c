/* The JSON behind every `--json` of pxctl: compact documents, one per
 * command, built as json-c trees and written by prunex/json.h (the same
 * number form, UTF-8 rule and escaping as pxcoordd's HTTP API), because
 * job names, reasons and log text come from users and other processes.
 * Protobuf messages are written generically from their descriptors, so the
 * keys are the proto field names, spelled once in proto/prunex.proto.
 * `--field NAME` reads a field back out of the tree for scripts (the bash
 * completion, the Slurm script) instead of their grepping JSON. */
#include <ctype.h>
#include <inttypes.h>
#include <json-c/json.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "prunex/json.h"
#include "prunex/jobspec.h"
#include "prunex/text.h"
#include "pxctl.h"

static const char *pxctl_json_field_name;

void pxctl_json_set_field(const char *name) { pxctl_json_field_name = name; }

void pxctl_json_init(pxctl_json_t *j, FILE *f) {
  memset(j, 0, sizeof *j);
  j->f = f;
}

/* Puts v where the document is: under the pending key of the open object,
 * at the end of the open array, or as the root. Takes v (NULL: null). */
static void pxctl__json_add(pxctl_json_t *j, struct json_object *v) {
  if (j->depth == 0) {
    json_object_put(j->root);
    j->root = v;
    return;
  }
  struct json_object *top = j->depth <= PXCTL_JSON_MAX_DEPTH ? j->stack[j->depth - 1] : NULL;
  if (!top) { /* deeper than the stack, or a container that could not be made */
    json_object_put(v);
    return;
  }
  if (json_object_is_type(top, json_type_array)) json_object_array_add(top, v);
  else json_object_object_add(top, j->key, v);
  j->key[0] = '\0';
}

/* Opens container c: it goes where a value would (the tree owns it) and
 * the next values go into it. One that has no place (too deep, its parent
 * dropped) is freed, and what would go into it with it. */
static void pxctl__json_open(pxctl_json_t *j, struct json_object *c) {
  int parent = j->depth == 0 ||
               (j->depth <= PXCTL_JSON_MAX_DEPTH && j->stack[j->depth - 1]);
  if (j->depth < PXCTL_JSON_MAX_DEPTH) j->stack[j->depth] = parent ? c : NULL;
  pxctl__json_add(j, c);
  j->depth++;
}

static void pxctl__json_close(pxctl_json_t *j) {
  if (j->depth > 0) j->depth--;
}

void pxctl_json_begin_object(pxctl_json_t *j) { pxctl__json_open(j, json_object_new_object()); }
void pxctl_json_end_object(pxctl_json_t *j) { pxctl__json_close(j); }
void pxctl_json_begin_array(pxctl_json_t *j) { pxctl__json_open(j, json_object_new_array()); }
void pxctl_json_end_array(pxctl_json_t *j) { pxctl__json_close(j); }

void pxctl_json_key(pxctl_json_t *j, const char *key) {
  snprintf(j->key, sizeof j->key, "%s", key);
}

void pxctl_json_string_n(pxctl_json_t *j, const char *s, size_t n) {
  pxctl__json_add(j, px_json_string(s, n));
}

void pxctl_json_string(pxctl_json_t *j, const char *s) {
  pxctl__json_add(j, s ? px_json_string(s, strlen(s)) : NULL);
}

void pxctl_json_int(pxctl_json_t *j, int64_t v) { pxctl__json_add(j, json_object_new_int64(v)); }

void pxctl_json_uint(pxctl_json_t *j, uint64_t v) {
  pxctl__json_add(j, json_object_new_uint64(v));
}

void pxctl_json_double(pxctl_json_t *j, double v) { pxctl__json_add(j, px_json_double(v)); }

void pxctl_json_bool(pxctl_json_t *j, int v) { pxctl__json_add(j, json_object_new_boolean(v)); }

void pxctl_json_null(pxctl_json_t *j) { pxctl__json_add(j, NULL); }

/* One line of --field output for value v. */
static void pxctl__json_field_line(FILE *f, struct json_object *v) {
  if (json_object_is_type(v, json_type_string)) fputs(json_object_get_string(v), f);
  else if (v) fputs(json_object_to_json_string_ext(v, JSON_C_TO_STRING_PLAIN), f);
  fputc('\n', f);
}

/* The listing of a document: itself when an array, else its object's
 * first array member; NULL when it has none. */
static struct json_object *pxctl__json_listing(struct json_object *root) {
  if (json_object_is_type(root, json_type_array)) return root;
  if (!json_object_is_type(root, json_type_object)) return NULL;
  json_object_object_foreach(root, k, m) {
    (void)k;
    if (json_object_is_type(m, json_type_array)) return m;
  }
  return NULL;
}

/* The usage error of a --field no object has: names the ones there are. */
static void pxctl__json_no_field(struct json_object *obj, const char *name) {
  px_buf_t have = {0};
  if (json_object_is_type(obj, json_type_object)) {
    json_object_object_foreach(obj, k, m) {
      (void)m;
      px_buf_printf(&have, "%s%s", have.len ? ", " : "", k);
    }
  }
  fprintf(stderr, "pxctl: --field %s: no such field in this output%s%s%s\n", name,
          have.len ? " (fields: " : "", have.len ? have.p : "", have.len ? ")" : "");
  px_buf_free(&have);
}

/* --field: NAME of the one object, or of each object of the listing.
 * 0, or PXCTL_EXIT_USAGE when some object lacks NAME. */
static int pxctl__json_print_field(FILE *f, struct json_object *root, const char *name) {
  struct json_object *list = pxctl__json_listing(root), *v = NULL;
  if (!list || json_object_object_get_ex(root, name, NULL)) {
    if (!json_object_object_get_ex(root, name, &v)) {
      pxctl__json_no_field(root, name);
      return PXCTL_EXIT_USAGE;
    }
    pxctl__json_field_line(f, v);
    return 0;
  }
  size_t n = json_object_array_length(list);
  for (size_t i = 0; i < n; i++) {
    struct json_object *e = json_object_array_get_idx(list, i);
    if (!json_object_object_get_ex(e, name, NULL)) {
      pxctl__json_no_field(e, name);
      return PXCTL_EXIT_USAGE;
    }
  }
  for (size_t i = 0; i < n; i++) {
    json_object_object_get_ex(json_object_array_get_idx(list, i), name, &v);
    pxctl__json_field_line(f, v);
  }
  return 0;
}

void pxctl_json_finish(pxctl_json_t *j) {
  if (pxctl_json_field_name) {
    if (pxctl__json_print_field(j->f, j->root, pxctl_json_field_name)) {
      json_object_put(j->root);
      exit(PXCTL_EXIT_USAGE); /* a program's usage error, as pxctl.c's */
    }
  } else {
    px_buf_t b = {0};
    px_json_put(&b, j->root);
    if (!b.oom && b.p) fwrite(b.p, 1, b.len, j->f);
    else fputs("null", j->f); /* out of memory: still a document */
    fputc('\n', j->f);
    px_buf_free(&b);
  }
  fflush(j->f);
  pxctl_json_discard(j);
}

void pxctl_json_discard(pxctl_json_t *j) {
  json_object_put(j->root);
  j->root = NULL;
  j->depth = 0;
}

/* ---- protobuf-c messages ------------------------------------------------ */

static void pxctl__json_base64(pxctl_json_t *j, const uint8_t *p, size_t n) {
  static const char tab[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
  px_buf_t b = {0};
  for (size_t i = 0; i < n; i += 3) {
    uint32_t v = (uint32_t)p[i] << 16;
    if (i + 1 < n) v |= (uint32_t)p[i + 1] << 8;
    if (i + 2 < n) v |= p[i + 2];
    char q[4] = {tab[(v >> 18) & 63], tab[(v >> 12) & 63], i + 1 < n ? tab[(v >> 6) & 63] : '=',
                 i + 2 < n ? tab[v & 63] : '='};
    px_buf_put(&b, q, 4);
  }
  pxctl_json_string_n(j, b.p ? b.p : "", b.len);
  px_buf_free(&b);
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

/* ---- key and value in one call --------------------------------------------- */

/* One definition for the five kinds of value. */
#define PXCTL_JSON_KV(kind, type)                                              \
  void pxctl_json_kv_##kind(pxctl_json_t *j, const char *key, type v) {        \
    pxctl_json_key(j, key);                                                    \
    pxctl_json_##kind(j, v);                                                   \
  }
PXCTL_JSON_KV(string, const char *)
PXCTL_JSON_KV(int, int64_t)
PXCTL_JSON_KV(uint, uint64_t)
PXCTL_JSON_KV(double, double)
PXCTL_JSON_KV(bool, int)

void pxctl_json_kv_strings(pxctl_json_t *j, const char *key, char *const *items, size_t n) {
  pxctl_json_key(j, key);
  pxctl_json_begin_array(j);
  for (size_t i = 0; i < n; i++) pxctl_json_string(j, items[i]);
  pxctl_json_end_array(j);
}

void pxctl_json_print_message(const ProtobufCMessage *m) {
  pxctl_json_t j;
  pxctl_json_init(&j, stdout);
  pxctl_json_message(&j, m);
  pxctl_json_finish(&j);
}

void pxctl_json_print_job(const Prunex__V1__Job *job) {
  pxctl_json_t j;
  pxctl_json_init(&j, stdout);
  pxctl_json_job(&j, job);
  pxctl_json_finish(&j);
}
