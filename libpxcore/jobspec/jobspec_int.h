/* Internals of the job spec module shared by its files: the schema table
 * that drives parsing, defaults, checks and the YAML writer, and the error
 * helpers. Values live in the generated protobuf-c structs; the table names
 * each field by its proto name, and the field descriptors of protobuf-c give
 * its type and offset, so the YAML keys can never drift from the proto. */
#ifndef PX_JOBSPEC_INT_H
#define PX_JOBSPEC_INT_H

#include <stddef.h>
#include <stdint.h>

#include "prunex.pb-c.h"
#include "prunex/px.h"
#include "prunex/text.h"

typedef enum {
  PX__JS_INT,      /* int32 / int64 / uint64 number, range lo..hi */
  PX__JS_SIZE,     /* int64 byte count, accepts units (32MiB) */
  PX__JS_DOUBLE,   /* double, range lo..hi */
  PX__JS_BOOL,
  PX__JS_STRING,   /* free text */
  PX__JS_CHOICE,   /* string, one of choices */
  PX__JS_MODEL,    /* string, px_model_arch_known */
  PX__JS_STRATEGY, /* the Strategy enum, by px_jobspec_strategy_name */
  PX__JS_STRLIST,  /* repeated string */
} px__js_kind_t;

enum {
  PX__JS_LO_OPEN = 1u << 0,  /* lo itself excluded */
  PX__JS_HI_OPEN = 1u << 1,  /* hi itself excluded */
  PX__JS_ZERO_OK = 1u << 2,  /* 0 allowed besides lo..hi */
  PX__JS_NAME = 1u << 3,     /* STRING: non-empty, no '/' */
  PX__JS_MULT4 = 1u << 4,    /* SIZE: a multiple of 4 */
  PX__JS_DERIVED = 1u << 5,  /* default computed from other fields */
  PX__JS_REQUIRED = 1u << 6, /* a submitted spec must set it: its proto zero is refused,
                                not defaulted (px_jobspec_check_submitted) */
};

#define PX__JS_TOP (-1)

typedef struct {
  int section;              /* index into px__js_sections, or PX__JS_TOP */
  const char *key;          /* the proto field name, which is the YAML key */
  px__js_kind_t kind;
  unsigned flags;
  double lo, hi;            /* INT, SIZE, DOUBLE */
  const char *choices;      /* CHOICE: "auto|cpu|cuda" */
  double def;               /* default of numbers and booleans */
  const char *def_str;      /* default of strings (CHOICE, MODEL, STRING) */
} px__js_field_t;

typedef struct {
  const char *key;          /* JobSpec field holding the section */
  const ProtobufCMessageDescriptor *desc;
} px__js_section_t;

#define PX__JS_MAX_FIELDS 96
#define PX__JS_MAX_SECTIONS 12

extern const px__js_section_t px__js_sections[];
extern const int px__js_nsections;
extern const px__js_field_t px__js_fields[];  /* grouped by section, in YAML order */
extern const int px__js_nfields;

/* Where each key of a parsed spec stood (line 0: not in the file). */
typedef struct {
  size_t line, col;         /* 1-based */
} px__js_mark_t;

typedef struct {
  const char *file;         /* NULL: a spec from the wire ("job spec") */
  const char *prefix;       /* file NULL: what messages start with (NULL: "job spec: ") */
  px__js_mark_t field[PX__JS_MAX_FIELDS];
  px__js_mark_t section[PX__JS_MAX_SECTIONS];
  px__js_mark_t sweep[16];  /* each sweep axis's key (PX_JOBSPEC_SWEEP_AXES) */
  px__js_mark_t sweep_key;  /* `sweep:` itself */
  char onnx_sha256[65];     /* model.onnx's SHA-256 where the check read the file, else "" */
} px__js_where_t;

/* A field's value, whatever its kind. */
typedef struct {
  int64_t i;
  uint64_t u;               /* uint64 fields (seed) */
  double d;
  const char *s;
  int is_unsigned;
} px__js_value_t;

/* Index of field "section.key" (or "key" at top level); -1 if none. */
int px__js_find(const char *path);
int px__js_section_find(const char *key);

/* "train.batch_size" into buf. */
const char *px__js_path(int fi, char *buf, size_t cap);

/* The protobuf-c descriptor of a field (NULL only if the table and the
 * proto disagree, which test_jobspec checks). */
const ProtobufCFieldDescriptor *px__js_fd(int fi);

/* Where spec keeps the pointer to section s's message (NULL: not in the proto). */
void **px__js_section_slot(const Prunex__V1__JobSpec *spec, int s);

/* The message holding field fi in spec (NULL when its section is absent). */
void *px__js_msg(const Prunex__V1__JobSpec *spec, int fi);

void px__js_get(const void *msg, int fi, px__js_value_t *v);
/* Sets a scalar field; strings are copied with malloc. PX_ERR_NOMEM. */
px_status_t px__js_set(void *msg, int fi, const px__js_value_t *v);

/* "a positive integer", "one of auto, cpu, cuda", ... */
const char *px__js_expected(int fi, char *buf, size_t cap);

/* 1 when v is a legal value of field fi on its own. */
int px__js_value_ok(int fi, const px__js_value_t *v);

/* A new spec with every section present and every default applied, except
 * the derived ones (max_iterations is 0). Caller frees with px_jobspec_free. */
px_status_t px__js_new_default(Prunex__V1__JobSpec **out);

/* Default of a derived field (admm.max_iterations) from the rest of spec. */
/* read_data != 0 (a spec file read by a client, on a machine that should see
 * the data): an image folder's training files are counted; 0 (a spec that
 * came over the wire): nothing on disk is read. */
int32_t px__js_derive_max_iterations(const Prunex__V1__JobSpec *spec);
/* The training images of the data set spec names, counted from its files
 * where they are (0: not here, or synthetic). */
int64_t px__js_count_train(const Prunex__V1__JobSpec *spec);
/* PX_ERR_INVALID: a folder's budget that cannot be derived (message
 * prefixed with prefix, e.g. "job spec: "). */
px_status_t px__js_underived(const Prunex__V1__JobSpec *spec, const char *prefix);

/* Parses text as a value of field fi into v (strings point into text):
 * 1 when it is a legal value; else 0 with " (did you mean 'x'?)" or "" in
 * hint (hcap may be 0). */
int px__js_scalar(int fi, const char *text, px__js_value_t *v, char *hint, size_t hcap);

/* " (did you mean 'x'?)" into buf for the word of words (separated by sep)
 * closest to typed, or "" when none is close (scalar.c). */
void px__js_suggest_word(const char *typed, const char *words, char sep, char *buf, size_t cap);

/* 1 when field fi may be swept (numbers and enums). */
int px__js_sweepable(int fi);

/* The rules of spec->sweep (sweep.c), positions from w->sweep; *count the
 * combinations (may be NULL). */
px_status_t px__js_check_sweep(const Prunex__V1__JobSpec *spec, const px__js_where_t *w,
                               size_t *count);

/* All checks; positions from w (w->file NULL for the wire). */
px_status_t px__js_check(const Prunex__V1__JobSpec *spec, px__js_where_t *w);

/* Formats "PREFIX: " from w and mark (file:line:col, file, or "job spec")
 * then the message, and sets it as the last error with status st. */
px_status_t px__js_fail(px_status_t st, const px__js_where_t *w, const px__js_mark_t *mark,
                        const char *fmt, ...) __attribute__((format(printf, 4, 5)));

/* 1 when v is field fi's proto zero (unset on the wire). */
int px__js_is_zero(int fi, const px__js_value_t *v);

/* v as a message shows it: a number, or a quoted string cut at 60 bytes. */
void px__js_show(int fi, const px__js_value_t *v, char *buf, size_t cap);

/* Optimal string alignment distance (edits and adjacent swaps), capped. */
int px__js_distance(const char *a, const char *b);

/* malloc'd copy of n bytes of s plus a NUL (protobuf-c's allocator). */
char *px__js_strndup(const char *s, size_t n);

/* Entries of skip_layers: each a non-empty name, none twice. Returns the
 * index of the first bad one (-1: all good) and why in why[cap]. */
int px__js_list_bad(char *const *items, size_t n, char *why, size_t cap);

#endif
