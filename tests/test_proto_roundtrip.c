/* Every message of proto/prunex.proto (package prunex.v1) survives the
 * protobuf-c wire format unchanged. The test works by reflection over the
 * ProtobufCMessageDescriptor of each message, so a field added later is covered
 * without touching this file; a message added later must be listed in
 * px_messages[], and a check against the .proto text fails until it is. For
 * each message it proves: a fully populated instance (every field set to a
 * non-default value, repeated fields with 2-3 elements, nested messages down
 * to PX_FILL_DEPTH) packs, unpacks to a deep-equal copy and re-packs to the
 * same bytes; a default instance packs to nothing and comes back equal; and a
 * packed buffer cut inside a field is rejected (NULL) rather than read past
 * its end. A self-test shows that the comparator notices a change in any
 * single field, so the equalities above can fail.
 *
 * Messages are built with plain malloc, not px_malloc, because
 * protobuf_c_message_free_unpacked(msg, NULL) frees them with the system
 * allocator, exactly as it frees what protobuf_c_message_unpack returns. */
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "prunex.pb-c.h"
#include "px_test_util.h"

/* Nesting levels that get populated: a message at depth PX_FILL_DEPTH - 1
 * leaves its message-typed fields empty, so recursive types stay finite. */
#define PX_FILL_DEPTH 4
/* Seeds per message for the populated round trip. */
#define PX_SEEDS 4
/* Buffers longer than this are cut at a stride rather than at every byte. */
#define PX_CUT_EVERY_BYTE_MAX 4096
#define PX_NAME_MAX 128
#define PX_NAMES_MAX 256

/* Every top-level message of prunex.proto, in the order of the file. */
static const ProtobufCMessageDescriptor *const px_messages[] = {
    &prunex__v1__model_spec__descriptor,
    &prunex__v1__dataset_spec__descriptor,
    &prunex__v1__cluster_spec__descriptor,
    &prunex__v1__train_spec__descriptor,
    &prunex__v1__prune_spec__descriptor,
    &prunex__v1__admm_spec__descriptor,
    &prunex__v1__comm_spec__descriptor,
    &prunex__v1__recovery_spec__descriptor,
    &prunex__v1__job_spec__descriptor,
    &prunex__v1__device__descriptor,
    &prunex__v1__node__descriptor,
    &prunex__v1__register_node_request__descriptor,
    &prunex__v1__register_node_response__descriptor,
    &prunex__v1__heartbeat_request__descriptor,
    &prunex__v1__heartbeat_response__descriptor,
    &prunex__v1__watch_assignments_request__descriptor,
    &prunex__v1__rank_assignment__descriptor,
    &prunex__v1__assignment__descriptor,
    &prunex__v1__kv_put_request__descriptor,
    &prunex__v1__kv_put_response__descriptor,
    &prunex__v1__kv_get_request__descriptor,
    &prunex__v1__kv_get_response__descriptor,
    &prunex__v1__layer_metrics__descriptor,
    &prunex__v1__phase_times__descriptor,
    &prunex__v1__iteration_report__descriptor,
    &prunex__v1__layer_penalty__descriptor,
    &prunex__v1__control_decision__descriptor,
    &prunex__v1__rank_exit__descriptor,
    &prunex__v1__rank_exit_response__descriptor,
    &prunex__v1__job_event__descriptor,
    &prunex__v1__job_summary__descriptor,
    &prunex__v1__job__descriptor,
    &prunex__v1__job_attempt__descriptor,
    &prunex__v1__elastic_spec__descriptor,
    &prunex__v1__membership_epoch__descriptor,
    &prunex__v1__blacklisted_node__descriptor,
    &prunex__v1__submit_job_request__descriptor,
    &prunex__v1__submit_job_response__descriptor,
    &prunex__v1__get_job_request__descriptor,
    &prunex__v1__list_jobs_request__descriptor,
    &prunex__v1__list_jobs_response__descriptor,
    &prunex__v1__delete_job_request__descriptor,
    &prunex__v1__delete_job_response__descriptor,
    &prunex__v1__cancel_job_request__descriptor,
    &prunex__v1__cancel_job_response__descriptor,
    &prunex__v1__list_nodes_request__descriptor,
    &prunex__v1__list_nodes_response__descriptor,
    &prunex__v1__get_iterations_request__descriptor,
    &prunex__v1__get_iterations_response__descriptor,
    &prunex__v1__watch_job_request__descriptor,
    &prunex__v1__job_update__descriptor,
    &prunex__v1__rank_log_chunk__descriptor,
    &prunex__v1__rank_log_chunk_response__descriptor,
    &prunex__v1__get_rank_log_request__descriptor,
    &prunex__v1__rank_log__descriptor,
    &prunex__v1__job_priority__descriptor,
    &prunex__v1__notify_spec__descriptor,
    &prunex__v1__sweep_axis__descriptor,
    &prunex__v1__acct_record__descriptor,
    &prunex__v1__acct_user_total__descriptor,
    &prunex__v1__get_accounting_request__descriptor,
    &prunex__v1__get_accounting_response__descriptor,
    &prunex__v1__job_dependency__descriptor,
    &prunex__v1__hold_job_request__descriptor,
    &prunex__v1__release_job_request__descriptor,
    &prunex__v1__update_job_request__descriptor,
};
#define PX_N_MESSAGES (sizeof px_messages / sizeof px_messages[0])

static const ProtobufCServiceDescriptor *const px_services[] = {
    &prunex__v1__coordinator__descriptor,
    &prunex__v1__jobs__descriptor,
};
#define PX_N_SERVICES (sizeof px_services / sizeof px_services[0])

static bool in_message_table(const ProtobufCMessageDescriptor *desc) {
  for (size_t i = 0; i < PX_N_MESSAGES; i++)
    if (px_messages[i] == desc) return true;
  return false;
}

/* ---- the .proto text ------------------------------------------------------ */

/* Returns the whole file as a NUL-terminated malloc'd string; the caller
 * frees it. Fails the test when the file cannot be read. */
static char *read_text_file(const char *path) {
  FILE *f = fopen(path, "rb");
  if (f == NULL) fail_msg("cannot open %s", path);
  size_t cap = 4096, len = 0;
  char *text = malloc(cap);
  assert_non_null(text);
  for (;;) {
    if (cap - len < 1024) {
      cap *= 2;
      text = realloc(text, cap);
      assert_non_null(text);
    }
    size_t got = fread(text + len, 1, cap - len - 1, f);
    len += got;
    if (got == 0) break;
  }
  assert_int_equal(ferror(f), 0);
  fclose(f);
  text[len] = '\0';
  return text;
}

static bool is_ident_char(char c) {
  return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
         c == '_' || c == '.';
}

/* Collects the names of the top-level declarations `<keyword> Name` (keyword
 * "message" or "service") of a .proto text into names[cap], skipping comments,
 * quoted strings and everything inside braces (nested messages, fields). A
 * deliberately small scanner: it only needs to read prunex.proto's dialect. */
static size_t proto_top_level_names(const char *text, const char *keyword,
                                    char names[][PX_NAME_MAX], size_t cap) {
  size_t n = 0;
  int depth = 0;
  bool want_name = false;
  const char *p = text;
  while (*p) {
    if (p[0] == '/' && p[1] == '/') {
      while (*p && *p != '\n') p++;
    } else if (p[0] == '/' && p[1] == '*') {
      const char *end = strstr(p + 2, "*/");
      p = end ? end + 2 : p + strlen(p);
    } else if (*p == '"' || *p == '\'') {
      char quote = *p++;
      while (*p && *p != quote) p += (p[0] == '\\' && p[1]) ? 2 : 1;
      if (*p) p++;
    } else if (*p == '{') {
      depth++, p++;
      want_name = false;
    } else if (*p == '}') {
      depth--, p++;
    } else if (is_ident_char(*p)) {
      const char *start = p;
      while (is_ident_char(*p)) p++;
      size_t len = (size_t)(p - start);
      if (want_name) {
        assert_true(n < cap);
        assert_true(len < PX_NAME_MAX);
        memcpy(names[n], start, len);
        names[n][len] = '\0';
        n++;
        want_name = false;
      } else if (depth == 0 && len == strlen(keyword) && memcmp(start, keyword, len) == 0) {
        want_name = true;
      }
    } else {
      p++;
    }
  }
  return n;
}

static bool name_in(const char *name, char names[][PX_NAME_MAX], size_t n) {
  for (size_t i = 0; i < n; i++)
    if (strcmp(names[i], name) == 0) return true;
  return false;
}

/* ---- building populated messages ----------------------------------------- */

/* Bytes one element of a field of this type takes in a repeated array
 * (the same table as protobuf-c's sizeof_elt_in_repeated_array). */
static size_t value_size(ProtobufCType type) {
  switch (type) {
    case PROTOBUF_C_TYPE_INT32:
    case PROTOBUF_C_TYPE_SINT32:
    case PROTOBUF_C_TYPE_SFIXED32:
    case PROTOBUF_C_TYPE_UINT32:
    case PROTOBUF_C_TYPE_FIXED32:
    case PROTOBUF_C_TYPE_ENUM: return sizeof(uint32_t);
    case PROTOBUF_C_TYPE_INT64:
    case PROTOBUF_C_TYPE_SINT64:
    case PROTOBUF_C_TYPE_SFIXED64:
    case PROTOBUF_C_TYPE_UINT64:
    case PROTOBUF_C_TYPE_FIXED64: return sizeof(uint64_t);
    case PROTOBUF_C_TYPE_FLOAT: return sizeof(float);
    case PROTOBUF_C_TYPE_DOUBLE: return sizeof(double);
    case PROTOBUF_C_TYPE_BOOL: return sizeof(protobuf_c_boolean);
    case PROTOBUF_C_TYPE_STRING: return sizeof(char *);
    case PROTOBUF_C_TYPE_BYTES: return sizeof(ProtobufCBinaryData);
    case PROTOBUF_C_TYPE_MESSAGE: return sizeof(ProtobufCMessage *);
  }
  fail_msg("unknown protobuf-c type %d", (int)type);
  return 0;
}

static void *member_at(const ProtobufCMessage *m, unsigned offset) {
  return (char *)m + offset;
}

/* A non-zero value with 1 to 64 significant bits, so that varints of every
 * length (and, cast to signed, negative numbers) all occur. */
static uint64_t fill_bits(px_test_rng_t *rng) {
  unsigned width = 1 + (unsigned)(px_test_rng_u64(rng) % 64);
  uint64_t v = px_test_rng_u64(rng);
  if (width < 64) v &= (UINT64_C(1) << width) - 1;
  return v != 0 ? v : 1;
}

/* A non-zero value of the enum, taken from its descriptor. An enum whose only
 * value is 0 gets 1: proto3 enums are open, and 0 would not be sent. */
static int fill_enum(px_test_rng_t *rng, const ProtobufCEnumDescriptor *ed) {
  unsigned nonzero = 0;
  for (unsigned i = 0; i < ed->n_values; i++)
    if (ed->values[i].value != 0) nonzero++;
  if (nonzero == 0) return 1;
  unsigned pick = (unsigned)(px_test_rng_u64(rng) % nonzero);
  for (unsigned i = 0; i < ed->n_values; i++)
    if (ed->values[i].value != 0 && pick-- == 0) return ed->values[i].value;
  return 1;
}

static ProtobufCMessage *message_new_empty(const ProtobufCMessageDescriptor *desc) {
  assert_int_equal(desc->magic, PROTOBUF_C__MESSAGE_DESCRIPTOR_MAGIC);
  ProtobufCMessage *m = malloc(desc->sizeof_message);
  assert_non_null(m);
  protobuf_c_message_init(desc, m);
  return m;
}

static void fill_message(px_test_rng_t *rng, ProtobufCMessage *m, int depth);

/* Writes one non-default value of field fd's type at p (a struct member or
 * an element of a repeated array). A message value is NULL at the depth
 * limit; callers keep repeated messages empty there instead. */
static void fill_value(px_test_rng_t *rng, const ProtobufCFieldDescriptor *fd, void *p,
                       int depth) {
  uint64_t bits = fill_bits(rng);
  switch (fd->type) {
    case PROTOBUF_C_TYPE_INT32:
    case PROTOBUF_C_TYPE_SINT32:
    case PROTOBUF_C_TYPE_SFIXED32: {
      int32_t v = (int32_t)(uint32_t)bits;
      *(int32_t *)p = v != 0 ? v : -1;
      break;
    }
    case PROTOBUF_C_TYPE_UINT32:
    case PROTOBUF_C_TYPE_FIXED32: {
      uint32_t v = (uint32_t)bits;
      *(uint32_t *)p = v != 0 ? v : 1;
      break;
    }
    case PROTOBUF_C_TYPE_INT64:
    case PROTOBUF_C_TYPE_SINT64:
    case PROTOBUF_C_TYPE_SFIXED64: *(int64_t *)p = (int64_t)bits; break;
    case PROTOBUF_C_TYPE_UINT64:
    case PROTOBUF_C_TYPE_FIXED64: *(uint64_t *)p = bits; break;
    case PROTOBUF_C_TYPE_FLOAT: {
      float v = (float)((double)(int64_t)bits / 1024.0);
      *(float *)p = v != 0.0f ? v : 1.5f;
      break;
    }
    case PROTOBUF_C_TYPE_DOUBLE: {
      double v = (double)(int64_t)bits / 1024.0;
      *(double *)p = v != 0.0 ? v : 1.5;
      break;
    }
    case PROTOBUF_C_TYPE_BOOL: *(protobuf_c_boolean *)p = 1; break;
    case PROTOBUF_C_TYPE_ENUM: *(int *)p = fill_enum(rng, fd->descriptor); break;
    case PROTOBUF_C_TYPE_STRING: {
      /* Up to 160 bytes: lengths on both sides of the one-byte varint limit. */
      size_t len = 1 + (size_t)(bits % 160);
      char *s = malloc(len + 1);
      assert_non_null(s);
      for (size_t i = 0; i < len; i++) s[i] = (char)(0x20 + px_test_rng_u64(rng) % 95);
      s[len] = '\0';
      *(char **)p = s;
      break;
    }
    case PROTOBUF_C_TYPE_BYTES: {
      ProtobufCBinaryData *bd = p;
      bd->len = 1 + (size_t)(bits % 160);
      bd->data = malloc(bd->len);
      assert_non_null(bd->data);
      for (size_t i = 0; i < bd->len; i++) bd->data[i] = (uint8_t)px_test_rng_u64(rng);
      break;
    }
    case PROTOBUF_C_TYPE_MESSAGE: {
      ProtobufCMessage *child = NULL;
      if (depth + 1 < PX_FILL_DEPTH) {
        child = message_new_empty(fd->descriptor);
        fill_message(rng, child, depth + 1);
      }
      *(ProtobufCMessage **)p = child;
      break;
    }
  }
}

/* Whether field f is the member of its oneof chosen by pick: each oneof gets
 * exactly one member set, which one varying with the seed. */
static bool oneof_chosen(const ProtobufCMessageDescriptor *desc, unsigned f, uint64_t pick) {
  unsigned pos = 0, count = 0;
  for (unsigned j = 0; j < desc->n_fields; j++) {
    const ProtobufCFieldDescriptor *o = &desc->fields[j];
    if (!(o->flags & PROTOBUF_C_FIELD_FLAG_ONEOF) ||
        o->quantifier_offset != desc->fields[f].quantifier_offset)
      continue;
    if (j == f) pos = count;
    count++;
  }
  return pos == (unsigned)((pick + desc->fields[f].quantifier_offset) % count);
}

/* Sets every field of the freshly initialised m to a non-default value. */
static void fill_message(px_test_rng_t *rng, ProtobufCMessage *m, int depth) {
  const ProtobufCMessageDescriptor *desc = m->descriptor;
  uint64_t oneof_pick = px_test_rng_u64(rng);
  for (unsigned f = 0; f < desc->n_fields; f++) {
    const ProtobufCFieldDescriptor *fd = &desc->fields[f];
    void *member = member_at(m, fd->offset);
    if (fd->flags & PROTOBUF_C_FIELD_FLAG_ONEOF) {
      if (!oneof_chosen(desc, f, oneof_pick)) continue;
      fill_value(rng, fd, member, depth);
      *(uint32_t *)member_at(m, fd->quantifier_offset) = fd->id;
    } else if (fd->label == PROTOBUF_C_LABEL_REPEATED) {
      size_t n = 2 + (size_t)(px_test_rng_u64(rng) % 2);
      if (fd->type == PROTOBUF_C_TYPE_MESSAGE && depth + 1 >= PX_FILL_DEPTH) n = 0;
      size_t size = value_size(fd->type);
      char *array = NULL;
      if (n > 0) {
        array = calloc(n, size);
        assert_non_null(array);
      }
      for (size_t i = 0; i < n; i++) fill_value(rng, fd, array + i * size, depth);
      *(size_t *)member_at(m, fd->quantifier_offset) = n;
      *(void **)member = array;
    } else {
      fill_value(rng, fd, member, depth);
      /* proto2-style optional scalars are sent only with their has_ flag. */
      if (fd->label == PROTOBUF_C_LABEL_OPTIONAL && fd->type != PROTOBUF_C_TYPE_STRING &&
          fd->type != PROTOBUF_C_TYPE_MESSAGE)
        *(protobuf_c_boolean *)member_at(m, fd->quantifier_offset) = 1;
    }
  }
}

/* A fully populated message of type desc; the same seed gives an equal
 * message. Freed with protobuf_c_message_free_unpacked(m, NULL). */
static ProtobufCMessage *message_new_populated(const ProtobufCMessageDescriptor *desc,
                                               uint64_t seed) {
  px_test_rng_t rng;
  px_test_rng_seed(&rng, seed);
  ProtobufCMessage *m = message_new_empty(desc);
  fill_message(&rng, m, 0);
  return m;
}

static uint64_t message_seed(size_t index, unsigned round) {
  return 0x5052554E45ull + 1000003ull * index + 7919ull * round;
}

/* ---- deep equality ------------------------------------------------------- */

static bool messages_equal(const ProtobufCMessage *a, const ProtobufCMessage *b, bool report);

static bool values_equal(const ProtobufCFieldDescriptor *fd, const void *a, const void *b,
                         bool report) {
  switch (fd->type) {
    case PROTOBUF_C_TYPE_INT32:
    case PROTOBUF_C_TYPE_SINT32:
    case PROTOBUF_C_TYPE_SFIXED32:
    case PROTOBUF_C_TYPE_UINT32:
    case PROTOBUF_C_TYPE_FIXED32:
    case PROTOBUF_C_TYPE_INT64:
    case PROTOBUF_C_TYPE_SINT64:
    case PROTOBUF_C_TYPE_SFIXED64:
    case PROTOBUF_C_TYPE_UINT64:
    case PROTOBUF_C_TYPE_FIXED64:
    case PROTOBUF_C_TYPE_FLOAT:  /* bit for bit: the wire format is exact */
    case PROTOBUF_C_TYPE_DOUBLE:
    case PROTOBUF_C_TYPE_BOOL:
    case PROTOBUF_C_TYPE_ENUM: return memcmp(a, b, value_size(fd->type)) == 0;
    case PROTOBUF_C_TYPE_STRING: {
      /* protobuf-c leaves an absent string either NULL or the empty default. */
      const char *sa = *(char *const *)a, *sb = *(char *const *)b;
      return strcmp(sa ? sa : "", sb ? sb : "") == 0;
    }
    case PROTOBUF_C_TYPE_BYTES: {
      const ProtobufCBinaryData *da = a, *db = b;
      return da->len == db->len && (da->len == 0 || memcmp(da->data, db->data, da->len) == 0);
    }
    case PROTOBUF_C_TYPE_MESSAGE: {
      /* NULL and an empty message differ on the wire (absent vs. tag + 0). */
      const ProtobufCMessage *ma = *(ProtobufCMessage *const *)a;
      const ProtobufCMessage *mb = *(ProtobufCMessage *const *)b;
      if (ma == NULL || mb == NULL) return ma == mb;
      return messages_equal(ma, mb, report);
    }
  }
  fail_msg("unknown protobuf-c type %d", (int)fd->type);
  return false;
}

static bool field_equal(const ProtobufCFieldDescriptor *fd, const ProtobufCMessage *a,
                        const ProtobufCMessage *b, bool report) {
  const void *va = member_at(a, fd->offset), *vb = member_at(b, fd->offset);
  if (fd->flags & PROTOBUF_C_FIELD_FLAG_ONEOF) {
    uint32_t ca = *(const uint32_t *)member_at(a, fd->quantifier_offset);
    uint32_t cb = *(const uint32_t *)member_at(b, fd->quantifier_offset);
    if (ca != cb) return false;
    return ca != fd->id || values_equal(fd, va, vb, report);
  }
  if (fd->label == PROTOBUF_C_LABEL_REPEATED) {
    size_t na = *(const size_t *)member_at(a, fd->quantifier_offset);
    size_t nb = *(const size_t *)member_at(b, fd->quantifier_offset);
    if (na != nb) return false;
    const char *xa = *(char *const *)va, *xb = *(char *const *)vb;
    size_t size = value_size(fd->type);
    for (size_t i = 0; i < na; i++)
      if (!values_equal(fd, xa + i * size, xb + i * size, report)) return false;
    return true;
  }
  if (fd->label == PROTOBUF_C_LABEL_OPTIONAL && fd->type != PROTOBUF_C_TYPE_STRING &&
      fd->type != PROTOBUF_C_TYPE_MESSAGE) {
    protobuf_c_boolean ha = *(const protobuf_c_boolean *)member_at(a, fd->quantifier_offset);
    protobuf_c_boolean hb = *(const protobuf_c_boolean *)member_at(b, fd->quantifier_offset);
    if (!ha != !hb) return false;
    if (!ha) return true;
  }
  return values_equal(fd, va, vb, report);
}

/* Field-by-field, recursive comparison of two messages, unknown fields
 * included. With report set, prints the path of a difference, innermost
 * first. */
static bool messages_equal(const ProtobufCMessage *a, const ProtobufCMessage *b, bool report) {
  if (a->descriptor != b->descriptor) {
    if (report) print_message("  type %s vs %s\n", a->descriptor->name, b->descriptor->name);
    return false;
  }
  const ProtobufCMessageDescriptor *desc = a->descriptor;
  for (unsigned f = 0; f < desc->n_fields; f++) {
    if (!field_equal(&desc->fields[f], a, b, report)) {
      if (report) print_message("  differs at %s.%s\n", desc->name, desc->fields[f].name);
      return false;
    }
  }
  if (a->n_unknown_fields != b->n_unknown_fields) {
    if (report) print_message("  %s: unknown field counts differ\n", desc->name);
    return false;
  }
  for (unsigned i = 0; i < a->n_unknown_fields; i++) {
    const ProtobufCMessageUnknownField *ua = &a->unknown_fields[i], *ub = &b->unknown_fields[i];
    if (ua->tag != ub->tag || ua->wire_type != ub->wire_type || ua->len != ub->len ||
        (ua->len > 0 && memcmp(ua->data, ub->data, ua->len) != 0)) {
      if (report) print_message("  %s: unknown field %u differs\n", desc->name, i);
      return false;
    }
  }
  return true;
}

/* ---- changing one field (comparator self-test) ---------------------------- */

static bool mutate_field(const ProtobufCFieldDescriptor *fd, ProtobufCMessage *m);

/* Changes the value at p in place, keeping the message valid and freeable.
 * Returns false when there is nothing to change (an absent message, an empty
 * string). */
static bool mutate_value(const ProtobufCFieldDescriptor *fd, void *p) {
  switch (fd->type) {
    case PROTOBUF_C_TYPE_INT32:
    case PROTOBUF_C_TYPE_SINT32:
    case PROTOBUF_C_TYPE_SFIXED32:
    case PROTOBUF_C_TYPE_UINT32:
    case PROTOBUF_C_TYPE_FIXED32:
    case PROTOBUF_C_TYPE_FLOAT:
    case PROTOBUF_C_TYPE_ENUM: {
      uint32_t v;
      memcpy(&v, p, sizeof v);
      v ^= 1;
      memcpy(p, &v, sizeof v);
      return true;
    }
    case PROTOBUF_C_TYPE_INT64:
    case PROTOBUF_C_TYPE_SINT64:
    case PROTOBUF_C_TYPE_SFIXED64:
    case PROTOBUF_C_TYPE_UINT64:
    case PROTOBUF_C_TYPE_FIXED64:
    case PROTOBUF_C_TYPE_DOUBLE: {
      uint64_t v;
      memcpy(&v, p, sizeof v);
      v ^= 1;
      memcpy(p, &v, sizeof v);
      return true;
    }
    case PROTOBUF_C_TYPE_BOOL: {
      protobuf_c_boolean *b = p;
      *b = !*b;
      return true;
    }
    case PROTOBUF_C_TYPE_STRING: {
      char *s = *(char **)p;
      if (s == NULL || s[0] == '\0') return false;  /* may be the shared "" */
      s[0] ^= 1;  /* printable ASCII stays non-NUL */
      return true;
    }
    case PROTOBUF_C_TYPE_BYTES: {
      ProtobufCBinaryData *bd = p;
      if (bd->len == 0) return false;
      bd->data[0] ^= 1;
      return true;
    }
    case PROTOBUF_C_TYPE_MESSAGE: {
      ProtobufCMessage *sub = *(ProtobufCMessage **)p;
      if (sub == NULL) return false;
      for (unsigned f = 0; f < sub->descriptor->n_fields; f++)
        if (mutate_field(&sub->descriptor->fields[f], sub)) return true;
      return false;
    }
  }
  return false;
}

/* Changes field fd of m (the last element of a repeated field). */
static bool mutate_field(const ProtobufCFieldDescriptor *fd, ProtobufCMessage *m) {
  void *member = member_at(m, fd->offset);
  if ((fd->flags & PROTOBUF_C_FIELD_FLAG_ONEOF) &&
      *(uint32_t *)member_at(m, fd->quantifier_offset) != fd->id)
    return false;
  if (fd->label == PROTOBUF_C_LABEL_REPEATED) {
    size_t n = *(size_t *)member_at(m, fd->quantifier_offset);
    if (n == 0) return false;
    return mutate_value(fd, *(char **)member + (n - 1) * value_size(fd->type));
  }
  return mutate_value(fd, member);
}

/* ---- packing helpers ------------------------------------------------------ */

/* Packs m into a malloc'd buffer of exactly its packed size; the caller
 * frees it. */
static uint8_t *pack_message(const ProtobufCMessage *m, size_t *len) {
  *len = protobuf_c_message_get_packed_size(m);
  uint8_t *buf = malloc(*len > 0 ? *len : 1);
  assert_non_null(buf);
  assert_int_equal(protobuf_c_message_pack(m, buf), *len);
  return buf;
}

/* A copy of data[len] in a block of exactly len bytes, so that AddressSanitizer
 * reports any read past the end of the input. */
static uint8_t *exact_copy(const uint8_t *data, size_t len) {
  uint8_t *copy = malloc(len > 0 ? len : 1);
  assert_non_null(copy);
  if (len > 0) memcpy(copy, data, len);
  return copy;
}

static bool read_varint(const uint8_t *buf, size_t len, size_t *pos, uint64_t *v) {
  *v = 0;
  for (unsigned shift = 0; shift < 64 && *pos < len; shift += 7) {
    uint8_t byte = buf[(*pos)++];
    *v |= (uint64_t)(byte & 0x7f) << shift;
    if (!(byte & 0x80)) return true;
  }
  return false;
}

/* Marks in ends[0..len] the offsets at which a top-level record of the
 * packed buf[len] ends (offset 0 included), read from the wire format itself:
 * a cut there leaves a shorter but valid message; anywhere else it must not. */
static void record_ends(const uint8_t *buf, size_t len, bool *ends) {
  size_t pos = 0;
  ends[0] = true;
  while (pos < len) {
    uint64_t tag, n;
    assert_true(read_varint(buf, len, &pos, &tag));
    switch (tag & 7) {
      case 0: assert_true(read_varint(buf, len, &pos, &n)); break;
      case 1: pos += 8; break;
      case 2:
        assert_true(read_varint(buf, len, &pos, &n));
        assert_true(n <= len - pos);
        pos += (size_t)n;
        break;
      case 5: pos += 4; break;
      default: fail_msg("wire type %u at offset %zu", (unsigned)(tag & 7), pos);
    }
    assert_true(pos <= len);
    ends[pos] = true;
  }
}

/* ---- tests ---------------------------------------------------------------- */

/* The scanner that the completeness check relies on finds top-level
 * declarations and nothing in comments, strings or message bodies. */
static void test_proto_scanner_finds_top_level_declarations(void **state) {
  (void)state;
  static const char text[] =
      "// message InComment {}\n"
      "syntax = \"proto3\"; option x = \"message InString\";\n"
      "message A { message Nested {} int32 message = 1; }\n"
      "/* message InBlock {} */ service S { rpc Get(A) returns (A); }\n"
      "message C{}\n";
  char names[8][PX_NAME_MAX];
  assert_int_equal(proto_top_level_names(text, "message", names, 8), 2);
  assert_string_equal(names[0], "A");
  assert_string_equal(names[1], "C");
  assert_int_equal(proto_top_level_names(text, "service", names, 8), 1);
  assert_string_equal(names[0], "S");
}

/* px_messages[] holds exactly the top-level messages of prunex.proto, each
 * under its own name, and every message a field refers to. */
static void test_every_proto_message_has_descriptor(void **state) {
  (void)state;
  char *text = read_text_file(PX_SOURCE_DIR "/proto/prunex.proto");
  static char names[PX_NAMES_MAX][PX_NAME_MAX];
  size_t n = proto_top_level_names(text, "message", names, PX_NAMES_MAX);
  free(text);

  for (size_t i = 0; i < n; i++) {
    bool found = false;
    for (size_t j = 0; j < PX_N_MESSAGES; j++)
      if (strcmp(px_messages[j]->short_name, names[i]) == 0) found = true;
    if (!found) fail_msg("message %s of prunex.proto is missing from px_messages[]", names[i]);
  }
  for (size_t j = 0; j < PX_N_MESSAGES; j++) {
    const ProtobufCMessageDescriptor *desc = px_messages[j];
    char full[PX_NAME_MAX + 16];
    assert_int_equal(desc->magic, PROTOBUF_C__MESSAGE_DESCRIPTOR_MAGIC);
    assert_string_equal(desc->package_name, "prunex.v1");
    snprintf(full, sizeof full, "prunex.v1.%s", desc->short_name);
    assert_string_equal(desc->name, full);
    if (!name_in(desc->short_name, names, n))
      fail_msg("px_messages[%zu] (%s) is not a message of prunex.proto", j, desc->name);
    for (size_t k = 0; k < j; k++) assert_ptr_not_equal(px_messages[k], desc);
    for (unsigned f = 0; f < desc->n_fields; f++) {
      const ProtobufCFieldDescriptor *fd = &desc->fields[f];
      if (fd->type == PROTOBUF_C_TYPE_MESSAGE && !in_message_table(fd->descriptor))
        fail_msg("%s.%s has type %s, missing from px_messages[]", desc->name, fd->name,
                 ((const ProtobufCMessageDescriptor *)fd->descriptor)->name);
    }
  }
  assert_int_equal(n, PX_N_MESSAGES);
}

/* Both services of prunex.proto have descriptors, and every method's request
 * and response type is in px_messages[]. */
static void test_every_service_method_has_descriptors(void **state) {
  (void)state;
  char *text = read_text_file(PX_SOURCE_DIR "/proto/prunex.proto");
  static char names[PX_NAMES_MAX][PX_NAME_MAX];
  size_t n = proto_top_level_names(text, "service", names, PX_NAMES_MAX);
  free(text);

  assert_int_equal(n, PX_N_SERVICES);
  for (size_t s = 0; s < PX_N_SERVICES; s++) {
    const ProtobufCServiceDescriptor *sd = px_services[s];
    assert_int_equal(sd->magic, PROTOBUF_C__SERVICE_DESCRIPTOR_MAGIC);
    if (!name_in(sd->short_name, names, n))
      fail_msg("service %s is not in prunex.proto", sd->name);
    assert_true(sd->n_methods > 0);
    for (unsigned i = 0; i < sd->n_methods; i++) {
      const ProtobufCMethodDescriptor *md = &sd->methods[i];
      if (!in_message_table(md->input))
        fail_msg("%s.%s: request %s missing from px_messages[]", sd->name, md->name,
                 md->input->name);
      if (!in_message_table(md->output))
        fail_msg("%s.%s: response %s missing from px_messages[]", sd->name, md->name,
                 md->output->name);
    }
  }
}

/* The builder sets every field (each oneof: its chosen member) to a value
 * other than the default, so a field dropped on the wire cannot go unseen;
 * and it is deterministic, so two messages from one seed compare equal. */
static void test_populated_messages_set_every_field(void **state) {
  (void)state;
  for (size_t i = 0; i < PX_N_MESSAGES; i++) {
    const ProtobufCMessageDescriptor *desc = px_messages[i];
    ProtobufCMessage *m = message_new_populated(desc, message_seed(i, 0));
    ProtobufCMessage *same = message_new_populated(desc, message_seed(i, 0));
    ProtobufCMessage *empty = message_new_empty(desc);
    assert_true(messages_equal(m, same, true));
    for (unsigned f = 0; f < desc->n_fields; f++) {
      const ProtobufCFieldDescriptor *fd = &desc->fields[f];
      if ((fd->flags & PROTOBUF_C_FIELD_FLAG_ONEOF) &&
          *(uint32_t *)member_at(m, fd->quantifier_offset) != fd->id)
        continue;
      if (field_equal(fd, m, empty, false))
        fail_msg("%s.%s was left at its default", desc->name, fd->name);
    }
    protobuf_c_message_free_unpacked(m, NULL);
    protobuf_c_message_free_unpacked(same, NULL);
    protobuf_c_message_free_unpacked(empty, NULL);
  }
}

/* pack -> unpack gives a deep-equal message, and packing that gives the same
 * bytes, for every message and several seeds. */
static void test_populated_messages_roundtrip(void **state) {
  (void)state;
  for (size_t i = 0; i < PX_N_MESSAGES; i++) {
    const ProtobufCMessageDescriptor *desc = px_messages[i];
    for (unsigned round = 0; round < PX_SEEDS; round++) {
      ProtobufCMessage *m = message_new_populated(desc, message_seed(i, round));
      size_t len, len2;
      uint8_t *buf = pack_message(m, &len);
      if (desc->n_fields > 0) assert_true(len > 1);

      ProtobufCMessage *back = protobuf_c_message_unpack(desc, NULL, len, buf);
      if (back == NULL) fail_msg("%s (seed round %u): unpack failed", desc->name, round);
      if (!messages_equal(m, back, true))
        fail_msg("%s (seed round %u): unpacked message differs", desc->name, round);
      assert_int_equal(back->n_unknown_fields, 0);

      uint8_t *buf2 = pack_message(back, &len2);
      assert_int_equal(len2, len);
      assert_memory_equal(buf2, buf, len);

      free(buf2);
      free(buf);
      protobuf_c_message_free_unpacked(back, NULL);
      protobuf_c_message_free_unpacked(m, NULL);
    }
  }
}

/* A message left at its defaults costs no bytes in proto3 and unpacks (from
 * zero bytes) to a message equal to the default one. */
static void test_empty_messages_roundtrip(void **state) {
  (void)state;
  for (size_t i = 0; i < PX_N_MESSAGES; i++) {
    const ProtobufCMessageDescriptor *desc = px_messages[i];
    ProtobufCMessage *m = message_new_empty(desc);
    size_t len, len2;
    uint8_t *buf = pack_message(m, &len);
    if (len != 0) fail_msg("default %s packs to %zu bytes, not 0", desc->name, len);

    ProtobufCMessage *back = protobuf_c_message_unpack(desc, NULL, len, buf);
    if (back == NULL) fail_msg("%s: unpack of the empty message failed", desc->name);
    if (!messages_equal(m, back, true)) fail_msg("%s: empty message differs", desc->name);
    uint8_t *buf2 = pack_message(back, &len2);
    assert_int_equal(len2, 0);

    free(buf2);
    free(buf);
    protobuf_c_message_free_unpacked(back, NULL);
    protobuf_c_message_free_unpacked(m, NULL);
  }
}

/* Unpacks the first cut bytes of the packed buf[len] from a block of exactly
 * that size. ends[] (from record_ends) says whether the cut falls between two
 * top-level fields: there the bytes are a valid, shorter message and must
 * unpack and re-pack to exactly the kept bytes; anywhere else unpack must
 * return NULL. Returns whether the cut was rejected. */
static bool check_cut(const ProtobufCMessageDescriptor *desc, const uint8_t *buf, size_t len,
                      const bool *ends, size_t cut) {
  uint8_t *part = exact_copy(buf, cut);
  ProtobufCMessage *back = protobuf_c_message_unpack(desc, NULL, cut, part);
  free(part);
  if (!ends[cut]) {
    if (back != NULL)
      fail_msg("%s: %zu of %zu bytes (inside a field) unpacked", desc->name, cut, len);
    return true;
  }
  if (back == NULL)
    fail_msg("%s: %zu of %zu bytes end a field but did not unpack", desc->name, cut, len);
  size_t len2;
  uint8_t *again = pack_message(back, &len2);
  assert_int_equal(len2, cut);
  assert_memory_equal(again, buf, cut);
  free(again);
  protobuf_c_message_free_unpacked(back, NULL);
  return false;
}

/* Unpacking a populated message's bytes cut short fails cleanly (NULL, no
 * read past the cut, nothing leaked) whenever the cut falls inside a field.
 * A cut between two top-level fields is still a valid, shorter message (the
 * wire format is not self-delimiting), so there the opposite is asserted.
 * Every cut length is tried (a stride of them through a long buffer), and
 * the half, which must be rejected unless a field happens to end there. */
static void test_truncated_input_is_rejected(void **state) {
  (void)state;
  size_t rejected = 0;
  for (size_t i = 0; i < PX_N_MESSAGES; i++) {
    const ProtobufCMessageDescriptor *desc = px_messages[i];
    ProtobufCMessage *m = message_new_populated(desc, message_seed(i, 0));
    size_t len;
    uint8_t *buf = pack_message(m, &len);
    protobuf_c_message_free_unpacked(m, NULL);
    if (len <= 1) {
      free(buf);
      continue;
    }
    bool *ends = calloc(len + 1, sizeof *ends);
    assert_non_null(ends);
    record_ends(buf, len, ends);
    assert_true(ends[len]);

    size_t stride = len <= PX_CUT_EVERY_BYTE_MAX ? 1 : len / 1021;
    for (size_t cut = 0; cut < len; cut += stride)
      if (check_cut(desc, buf, len, ends, cut)) rejected++;
    if (!check_cut(desc, buf, len, ends, len / 2)) assert_true(ends[len / 2]);
    free(ends);
    free(buf);
  }
  assert_true(rejected > 0);
}

/* The comparator used above notices a change in any one field, of every
 * type, at any depth: each field of each populated message is changed in an
 * otherwise equal copy, and the copy must compare unequal. */
static void test_comparator_detects_difference(void **state) {
  (void)state;
  size_t mutated = 0;
  for (size_t i = 0; i < PX_N_MESSAGES; i++) {
    const ProtobufCMessageDescriptor *desc = px_messages[i];
    ProtobufCMessage *m = message_new_populated(desc, message_seed(i, 1));
    for (unsigned f = 0; f < desc->n_fields; f++) {
      const ProtobufCFieldDescriptor *fd = &desc->fields[f];
      ProtobufCMessage *copy = message_new_populated(desc, message_seed(i, 1));
      assert_true(messages_equal(m, copy, true));
      if (mutate_field(fd, copy)) {
        mutated++;
        if (messages_equal(m, copy, false))
          fail_msg("changing %s.%s went unnoticed", desc->name, fd->name);
      } else if (!(fd->flags & PROTOBUF_C_FIELD_FLAG_ONEOF)) {
        fail_msg("%s.%s could not be changed", desc->name, fd->name);
      }
      protobuf_c_message_free_unpacked(copy, NULL);
    }
    protobuf_c_message_free_unpacked(m, NULL);
  }
  assert_true(mutated > 0);

  /* And a difference in a nested message's count is seen too. */
  ProtobufCMessage *a = message_new_populated(&prunex__v1__list_jobs_response__descriptor, 7);
  ProtobufCMessage *b = message_new_populated(&prunex__v1__list_jobs_response__descriptor, 7);
  Prunex__V1__ListJobsResponse *lb = (Prunex__V1__ListJobsResponse *)b;
  assert_true(lb->n_jobs >= 2);
  lb->n_jobs--;
  assert_false(messages_equal(a, b, false));
  lb->n_jobs++;
  assert_true(messages_equal(a, b, false));
  protobuf_c_message_free_unpacked(a, NULL);
  protobuf_c_message_free_unpacked(b, NULL);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_proto_scanner_finds_top_level_declarations),
      cmocka_unit_test(test_every_proto_message_has_descriptor),
      cmocka_unit_test(test_every_service_method_has_descriptors),
      cmocka_unit_test(test_populated_messages_set_every_field),
      cmocka_unit_test(test_populated_messages_roundtrip),
      cmocka_unit_test(test_empty_messages_roundtrip),
      cmocka_unit_test(test_truncated_input_is_rejected),
      cmocka_unit_test(test_comparator_detects_difference),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
