/* safetensors checkpoints: an atomic writer and a validating reader.
 *
 * The header is read by json-c (px_json_parse) after a linear pass that
 * refuses what json-c would let through (duplicate keys, invalid UTF-8 and
 * the rest: see "the header" below), and the tree is then checked against
 * the format's schema (an object of tensor entries and an optional
 * "__metadata__" object of strings), so nothing the format does not allow
 * gets through: no floats, booleans or nulls, no unknown fields, no
 * duplicate keys, no invalid UTF-8.
 * A file is checked completely at open, offsets against shapes and against
 * the file size included, so that a corrupt or hostile checkpoint fails there
 * with a message naming the file and the problem, never later as a short
 * read or an overrun. Data is read with pread, so one handle can serve
 * several threads. The handle keeps the header's json-c tree: the names
 * and metadata it hands out point into it. */
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <json-c/json.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "prunex/json.h"
#include "prunex/safetensors.h"
#include "prunex/text.h"
#include "px_check.h"

/* Data is written and read as it lies in memory. */
#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ != __ORDER_LITTLE_ENDIAN__
#error "safetensors.c assumes a little-endian host"
#endif

#define PX__ST_META_KEY "__metadata__"
#define PX__ST_IO_CHUNK ((size_t)1 << 30) /* largest single read/write call */

static const struct {
  const char *name;
  size_t size;
} px__st_dtypes[PX_ST_DTYPE_COUNT] = {
    [PX_ST_F32] = {"F32", 4},         [PX_ST_F64] = {"F64", 8},
    [PX_ST_I32] = {"I32", 4},         [PX_ST_I64] = {"I64", 8},
    [PX_ST_U8] = {"U8", 1},           [PX_ST_I8] = {"I8", 1},
    [PX_ST_I16] = {"I16", 2},         [PX_ST_U16] = {"U16", 2},
    [PX_ST_U32] = {"U32", 4},         [PX_ST_U64] = {"U64", 8},
    [PX_ST_F16] = {"F16", 2},         [PX_ST_BF16] = {"BF16", 2},
    [PX_ST_BOOL] = {"BOOL", 1},       [PX_ST_F8_E4M3] = {"F8_E4M3", 1},
    [PX_ST_F8_E5M2] = {"F8_E5M2", 1},
};

const char *px_st_dtype_name(px_st_dtype_t dtype) {
  if ((int)dtype < 0 || dtype >= PX_ST_DTYPE_COUNT) return "?";
  return px__st_dtypes[dtype].name;
}

size_t px_st_dtype_size(px_st_dtype_t dtype) {
  if ((int)dtype < 0 || dtype >= PX_ST_DTYPE_COUNT) return 0;
  return px__st_dtypes[dtype].size;
}

/* "path: message", so that every error names the file. */
static px_status_t px__st_fail(px_status_t st, const char *path, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

static px_status_t px__st_fail(px_status_t st, const char *path, const char *fmt, ...) {
  char msg[448];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(msg, sizeof msg, fmt, ap);
  va_end(ap);
  return px_set_error(st, "%s: %s", path, msg);
}

/* "[10, 2]" into buf (truncated with "..." when it does not fit). */
static const char *px__st_shape_str(char *buf, size_t cap, int ndim, const int64_t *shape) {
  size_t len = 0;
  len += (size_t)snprintf(buf, cap, "[");
  for (int i = 0; i < ndim && len < cap; i++) {
    len += (size_t)snprintf(buf + len, cap - len, "%s%" PRId64, i ? ", " : "", shape[i]);
  }
  if (len < cap) len += (size_t)snprintf(buf + len, cap - len, "]");
  if (len >= cap && cap >= 4) memcpy(buf + cap - 4, "...", 4);
  return buf;
}

/* Byte size of a shape: 0 ok, -1 a negative dimension, -2 overflow. A zero
 * dimension makes the tensor empty whatever the others are. */
static int px__st_nbytes(px_st_dtype_t dtype, int ndim, const int64_t *shape, uint64_t *out) {
  uint64_t n = px__st_dtypes[dtype].size;
  int empty = 0;
  for (int i = 0; i < ndim; i++) {
    if (shape[i] < 0) return -1;
    if (shape[i] == 0) empty = 1;
  }
  if (empty) {
    *out = 0;
    return 0;
  }
  for (int i = 0; i < ndim; i++) {
    if (__builtin_mul_overflow(n, (uint64_t)shape[i], &n)) return -2;
  }
  if (n > (uint64_t)INT64_MAX) return -2;
  *out = n;
  return 0;
}

/* ======================================================================
 * Writer
 * ====================================================================== */

static void px__st_put_u64(px_buf_t *b, uint64_t v) {
  char tmp[24];
  int n = snprintf(tmp, sizeof tmp, "%" PRIu64, v);
  px_buf_put(b, tmp, (size_t)n);
}

typedef struct {
  const px_st_tensor_t *t;
  uint64_t nbytes;
} px__st_out_t;

static int px__st_cmp_out_name(const void *a, const void *b) {
  return strcmp(((const px__st_out_t *)a)->t->name, ((const px__st_out_t *)b)->t->name);
}

/* Largest element first, then by name: the reference writer's order, which
 * keeps every tensor's data aligned to its element size. */
static int px__st_cmp_out_layout(const void *a, const void *b) {
  const px__st_out_t *x = a, *y = b;
  size_t sx = px__st_dtypes[x->t->dtype].size, sy = px__st_dtypes[y->t->dtype].size;
  if (sx != sy) return sx > sy ? -1 : 1;
  return strcmp(x->t->name, y->t->name);
}

static int px__st_cmp_str(const void *a, const void *b) {
  return strcmp(*(const char *const *)a, *(const char *const *)b);
}

/* Checks one tensor of a caller's table; sets *nbytes. */
static px_status_t px__st_check_tensor(const char *path, const char *op, const px_st_tensor_t *t,
                                       int i, int need_data, uint64_t *nbytes) {
  if (!t->name) return px__st_fail(PX_ERR_INVALID, path, "%s: tensor %d has no name", op, i);
  if (!px_utf8_valid(t->name, strlen(t->name))) {
    return px__st_fail(PX_ERR_INVALID, path, "%s: tensor %d: name is not valid UTF-8", op, i);
  }
  if (strcmp(t->name, PX__ST_META_KEY) == 0) {
    return px__st_fail(PX_ERR_INVALID, path, "%s: tensor %d: the name '%s' is reserved", op, i,
                       PX__ST_META_KEY);
  }
  if ((int)t->dtype < 0 || t->dtype >= PX_ST_DTYPE_COUNT) {
    return px__st_fail(PX_ERR_INVALID, path, "%s: tensor '%s': bad dtype %d", op, t->name,
                       (int)t->dtype);
  }
  if (t->ndim < 0 || t->ndim > PX_ST_MAX_DIMS) {
    return px__st_fail(PX_ERR_INVALID, path, "%s: tensor '%s': ndim %d is not in 0..%d", op,
                       t->name, t->ndim, PX_ST_MAX_DIMS);
  }
  int r = px__st_nbytes(t->dtype, t->ndim, t->shape, nbytes);
  if (r != 0) {
    char sh[160];
    return px__st_fail(PX_ERR_INVALID, path, "%s: tensor '%s': shape %s %s", op, t->name,
                       px__st_shape_str(sh, sizeof sh, t->ndim, t->shape),
                       r == -1 ? "has a negative dimension" : "is too large");
  }
  if (*nbytes > 0 && need_data && !(need_data == 1 ? t->data != NULL : t->dst != NULL)) {
    return px__st_fail(PX_ERR_INVALID, path, "%s: tensor '%s': NULL %s pointer", op, t->name,
                       need_data == 1 ? "data" : "dst");
  }
  return PX_OK;
}

/* Checks the table and sorts it into file order in *outs (caller frees). */
static px_status_t px__st_plan(const char *path, const px_st_tensor_t *tensors, int n,
                               const char *const *meta_kv, int nmeta, px__st_out_t **outs) {
  px_status_t st = PX_OK;
  const char **keys = NULL;
  px__st_out_t *o = px_malloc(((size_t)n + 1) * sizeof *o, "safetensors.plan");
  if (!o) return PX_ERR_NOMEM;
  for (int i = 0; i < n; i++) {
    o[i].t = &tensors[i];
    PX_CHECK_GOTO(px__st_check_tensor(path, "save", &tensors[i], i, 1, &o[i].nbytes), st, fail);
  }
  qsort(o, (size_t)n, sizeof *o, px__st_cmp_out_name);
  for (int i = 1; i < n; i++) {
    if (strcmp(o[i - 1].t->name, o[i].t->name) == 0) {
      st = px__st_fail(PX_ERR_INVALID, path, "save: duplicate tensor name '%s'", o[i].t->name);
      goto fail;
    }
  }
  qsort(o, (size_t)n, sizeof *o, px__st_cmp_out_layout);

  keys = px_malloc(((size_t)nmeta + 1) * sizeof *keys, "safetensors.plan");
  if (!keys) {
    st = PX_ERR_NOMEM;
    goto fail;
  }
  for (int i = 0; i < nmeta; i++) {
    const char *k = meta_kv[2 * i], *v = meta_kv[2 * i + 1];
    if (!k || !v) {
      st = px__st_fail(PX_ERR_INVALID, path, "save: metadata pair %d has a NULL %s", i,
                       k ? "value" : "key");
      goto fail;
    }
    if (!px_utf8_valid(k, strlen(k)) || !px_utf8_valid(v, strlen(v))) {
      st = px__st_fail(PX_ERR_INVALID, path, "save: metadata pair %d is not valid UTF-8", i);
      goto fail;
    }
    keys[i] = k;
  }
  qsort(keys, (size_t)nmeta, sizeof *keys, px__st_cmp_str);
  for (int i = 1; i < nmeta; i++) {
    if (strcmp(keys[i - 1], keys[i]) == 0) {
      st = px__st_fail(PX_ERR_INVALID, path, "save: duplicate metadata key '%s'", keys[i]);
      goto fail;
    }
  }
  px_free(keys);
  *outs = o;
  return PX_OK;
fail:
  px_free(keys);
  px_free(o);
  return st;
}

/* The header JSON, padded with spaces to a multiple of 8 bytes. */
static px_status_t px__st_header(const char *path, const px__st_out_t *o, int n,
                                 const char *const *meta_kv, int nmeta, px_buf_t *b) {
  px_buf_put(b, "{", 1);
  if (nmeta > 0) {
    px_buf_puts(b, "\"" PX__ST_META_KEY "\":{");
    for (int i = 0; i < nmeta; i++) {
      if (i) px_buf_put(b, ",", 1);
      px_buf_json_string(b, meta_kv[2 * i], strlen(meta_kv[2 * i]));
      px_buf_put(b, ":", 1);
      px_buf_json_string(b, meta_kv[2 * i + 1], strlen(meta_kv[2 * i + 1]));
    }
    px_buf_put(b, "}", 1);
  }
  uint64_t off = 0;
  for (int i = 0; i < n; i++) {
    const px_st_tensor_t *t = o[i].t;
    if (i || nmeta > 0) px_buf_put(b, ",", 1);
    px_buf_json_string(b, t->name, strlen(t->name));
    px_buf_puts(b, ":{\"dtype\":\"");
    px_buf_puts(b, px__st_dtypes[t->dtype].name);
    px_buf_puts(b, "\",\"shape\":[");
    for (int d = 0; d < t->ndim; d++) {
      if (d) px_buf_put(b, ",", 1);
      px__st_put_u64(b, (uint64_t)t->shape[d]);
    }
    px_buf_puts(b, "],\"data_offsets\":[");
    px__st_put_u64(b, off);
    px_buf_put(b, ",", 1);
    if (__builtin_add_overflow(off, o[i].nbytes, &off) || off > (uint64_t)INT64_MAX) {
      return px__st_fail(PX_ERR_INVALID, path, "save: total data size overflows");
    }
    px__st_put_u64(b, off);
    px_buf_puts(b, "]}");
  }
  px_buf_put(b, "}", 1);
  while (!b->oom && b->len % 8 != 0) px_buf_put(b, " ", 1);
  if (b->oom) return PX_ERR_NOMEM;
  if (b->len > PX_ST_MAX_HEADER) {
    return px__st_fail(PX_ERR_INVALID, path, "save: header of %zu bytes exceeds the %u-byte limit",
                       b->len, PX_ST_MAX_HEADER);
  }
  return PX_OK;
}

px_status_t px_safetensors_save(const char *path, const px_st_tensor_t *tensors, int n,
                                const char *const *meta_kv, int nmeta) {
  PX_REQUIRE(path != NULL && path[0] != '\0', "px_safetensors_save: no path");
  PX_REQUIRE(n >= 0 && (n == 0 || tensors != NULL), "%s: save: bad tensor table (n = %d)", path,
             n);
  PX_REQUIRE(nmeta >= 0 && (nmeta == 0 || meta_kv != NULL), "%s: save: bad metadata (nmeta = %d)",
             path, nmeta);

  px_status_t st = PX_OK;
  px__st_out_t *o = NULL;
  px_buf_t hdr = {0};
  px_atomic_file_t f;
  PX_CHECK(px__st_plan(path, tensors, n, meta_kv, nmeta, &o));
  PX_CHECK_GOTO(px__st_header(path, o, n, meta_kv, nmeta, &hdr), st, out);
  PX_CHECK_GOTO(px_atomic_file_open(&f, path, 0666, 0), st, out);
  uint8_t size_le[8];
  for (int i = 0; i < 8; i++) size_le[i] = (uint8_t)((uint64_t)hdr.len >> (8 * i));
  (void)px_atomic_file_write(&f, size_le, 8);
  (void)px_atomic_file_write(&f, hdr.p, hdr.len);
  for (int i = 0; i < n; i++) (void)px_atomic_file_write(&f, o[i].t->data, (size_t)o[i].nbytes);
  st = px_atomic_file_commit(&f); /* reports the first failed write */
out:
  px_buf_free(&hdr);
  px_free(o);
  return st;
}

/* ======================================================================
 * Reader
 * ====================================================================== */

typedef struct {
  const char *name;
  px_st_dtype_t dtype;
  int ndim;
  int64_t shape[PX_ST_MAX_DIMS];
  uint64_t begin, end; /* data_offsets, relative to the data section */
} px__st_entry_t;

typedef struct {
  const char *key, *value;
} px__st_kv_t;

struct px_safetensors {
  char *path;                /* copy, for messages */
  int fd;
  uint64_t data_start;       /* 8 + header size */
  uint64_t data_len;         /* file size - data_start */
  char *header;              /* header bytes */
  struct json_object *root;  /* the header's tree: the names and values point into it */
  px__st_entry_t *entries;   /* [n], in data order */
  px__st_entry_t **by_name;  /* [n], sorted by name for lookups */
  int n;
  px__st_kv_t *meta;         /* [nmeta], in file order */
  px__st_kv_t **meta_by_key; /* [nmeta], sorted by key */
  int nmeta;
};

/* ---- the header -------------------------------------------------------------
 * json-c reads the JSON (px_json_parse: bounded in size and nesting, linear
 * time). A pass over the bytes first refuses what json-c lets through and a
 * checkpoint must not: control bytes, invalid UTF-8 (json-c takes overlong
 * forms and encoded surrogates), lone surrogates (json-c makes them U+FFFD),
 * \u0000 (names are C strings; json-c cuts a key there), single-quoted
 * strings and integers with a leading zero; and it counts the keys of every
 * object, since json-c keeps the last of two equal keys without a word,
 * where two readers of a checkpoint must never disagree on a tensor. The
 * tree is then walked by the schema: the top object, tensor entries, the
 * metadata object, integer arrays. */

#define PX__ST_DEPTH 64 /* px_json_parse's nesting bound */

typedef struct {
  const char *path;
  const char *s; /* header bytes */
  size_t len;
  int *keys;     /* [nobj] keys of each object, in the order of their '{' */
  size_t *at;    /* [nobj] the offset of that '{' */
  int nobj, cap;
} px__hd_t;

static px_status_t px__hd_syntax(const px__hd_t *hd, size_t pos, const char *what) {
  return px__st_fail(PX_ERR_FORMAT, hd->path, "bad JSON in the header at byte %zu: %s", pos,
                     what);
}

static int px__hd_hex4(const char *p, unsigned *out) {
  unsigned v = 0;
  for (int i = 0; i < 4; i++) {
    char c = p[i];
    v <<= 4;
    if (c >= '0' && c <= '9') v |= (unsigned)(c - '0');
    else if (c >= 'a' && c <= 'f') v |= (unsigned)(c - 'a' + 10);
    else if (c >= 'A' && c <= 'F') v |= (unsigned)(c - 'A' + 10);
    else return -1;
  }
  *out = v;
  return 0;
}

/* A \u escape at s[*pos] (the backslash): a surrogate only as a pair, no NUL. */
static px_status_t px__hd_unicode(const px__hd_t *hd, size_t *pos) {
  size_t p = *pos;
  unsigned cp, lo;
  if (hd->len - p < 6 || px__hd_hex4(hd->s + p + 2, &cp) != 0)
    return px__hd_syntax(hd, p, "bad \\u escape");
  p += 6;
  if (cp >= 0xDC00 && cp <= 0xDFFF) return px__hd_syntax(hd, *pos, "lone low surrogate");
  if (cp >= 0xD800 && cp <= 0xDBFF) {
    if (hd->len - p < 6 || hd->s[p] != '\\' || hd->s[p + 1] != 'u' ||
        px__hd_hex4(hd->s + p + 2, &lo) != 0 || lo < 0xDC00 || lo > 0xDFFF)
      return px__hd_syntax(hd, *pos, "high surrogate not followed by a low one");
    p += 6;
  }
  if (cp == 0) return px__hd_syntax(hd, *pos, "\\u0000 in a string (names cannot hold NUL)");
  *pos = p;
  return PX_OK;
}

/* The string whose opening quote is at *pos; *pos ends past its closing one. */
static px_status_t px__hd_string(const px__hd_t *hd, size_t *pos) {
  size_t p = *pos + 1;
  for (;;) {
    if (p >= hd->len) return px__hd_syntax(hd, *pos, "unterminated string");
    unsigned char c = (unsigned char)hd->s[p];
    if (c == '"') break;
    if (c < 0x20) return px__hd_syntax(hd, p, "control character in a string");
    if (c >= 0x80) {
      size_t n = px_utf8_seq(hd->s + p, hd->len - p);
      if (n == 0) return px__hd_syntax(hd, p, "invalid UTF-8 in a string");
      p += n;
    } else if (c != '\\') {
      p++;
    } else if (p + 1 < hd->len && hd->s[p + 1] == 'u') {
      PX_CHECK(px__hd_unicode(hd, &p));
    } else {
      if (p + 1 >= hd->len) return px__hd_syntax(hd, *pos, "unterminated string");
      if (!strchr("\"\\/bfnrt", hd->s[p + 1]) || !hd->s[p + 1])
        return px__hd_syntax(hd, p, "bad escape in a string");
      p += 2;
    }
  }
  *pos = p + 1;
  return PX_OK;
}

/* Whether s[p] (outside strings) is the first digit of a number's integer
 * part: no digit, point or exponent before it, or a minus sign that
 * follows none. */
static int px__hd_lead(const char *s, size_t p) {
  if (p > 0 && s[p - 1] == '-') p--;
  return p == 0 || !strchr("0123456789.eE+-", s[p - 1]) || !s[p - 1];
}

/* Room for one more object in hd->keys and hd->at. */
static px_status_t px__hd_grow(px__hd_t *hd) {
  if (hd->nobj < hd->cap) return PX_OK;
  int ncap = hd->cap ? 2 * hd->cap : 64;
  int *k = px_realloc(hd->keys, (size_t)ncap * sizeof *k, "safetensors.keys");
  if (!k) return PX_ERR_NOMEM;
  hd->keys = k;
  size_t *a = px_realloc(hd->at, (size_t)ncap * sizeof *a, "safetensors.keys");
  if (!a) return PX_ERR_NOMEM;
  hd->at = a;
  hd->cap = ncap;
  return PX_OK;
}

/* The pass before json-c (the comment above): strings checked, keys
 * counted; the structure is json-c's to judge. */
static px_status_t px__hd_scan(px__hd_t *hd) {
  int stack[PX__ST_DEPTH + 1], depth = 0; /* an object's index, -1 for an array */
  const char *s = hd->s;
  for (size_t p = 0; p < hd->len;) {
    char c = s[p];
    if (c == '"') {
      PX_CHECK(px__hd_string(hd, &p));
      size_t q = p;
      while (q < hd->len && strchr(" \t\r\n", s[q]) && s[q]) q++;
      if (q < hd->len && s[q] == ':' && depth > 0 && stack[depth - 1] >= 0)
        hd->keys[stack[depth - 1]]++;
      continue;
    }
    if (c == '\'') return px__hd_syntax(hd, p, "single-quoted string");
    if (c == '\0') return px__hd_syntax(hd, p, "NUL byte"); /* px_json_parse skips trailing ones */
    if (c == '0' && p + 1 < hd->len && s[p + 1] >= '0' && s[p + 1] <= '9' && px__hd_lead(s, p))
      return px__hd_syntax(hd, p, "integer with a leading zero");
    if (c == '{' || c == '[') {
      if (depth == PX__ST_DEPTH) return px__hd_syntax(hd, p, "nested more than 64 deep");
      stack[depth++] = -1;
      if (c == '{') {
        PX_CHECK(px__hd_grow(hd));
        hd->keys[hd->nobj] = 0;
        hd->at[hd->nobj] = p;
        stack[depth - 1] = hd->nobj++;
      }
    } else if ((c == '}' || c == ']') && depth > 0) {
      depth--;
    }
    p++;
  }
  return PX_OK;
}

/* The first key of object k (its '{' at hd->at[k]) that an earlier key of
 * it equals once decoded, into *dup (owned by *seen, a json-c object that
 * the caller puts). */
static px_status_t px__hd_dup_key(const px__hd_t *hd, int k, struct json_object **seen,
                                  const char **dup) {
  *dup = NULL;
  if (!(*seen = json_object_new_object())) return PX_ERR_NOMEM;
  int depth = 0;
  for (size_t p = hd->at[k]; p < hd->len && !*dup;) {
    char c = hd->s[p];
    if (c != '"') {
      depth += c == '{' || c == '[' ? 1 : c == '}' || c == ']' ? -1 : 0;
      if (depth == 0) break;
      p++;
      continue;
    }
    size_t start = p;
    PX_CHECK(px__hd_string(hd, &p));
    size_t q = p;
    while (q < hd->len && strchr(" \t\r\n", hd->s[q]) && hd->s[q]) q++;
    if (depth != 1 || q >= hd->len || hd->s[q] != ':') continue;
    struct json_object *key = NULL;
    PX_CHECK(px_json_parse(hd->s + start, p - start, p - start, &key));
    const char *name = json_object_get_string(key);
    if (json_object_object_get_ex(*seen, name, NULL)) *dup = name;
    int rc = json_object_object_add(*seen, name, key); /* keeps the decoded name alive */
    if (rc != 0) return PX_ERR_NOMEM;
  }
  return PX_OK;
}

/* The message for a duplicate key dup in object k, which is the top object
 * (owner NULL) or the value of the top object's member owner. */
static px_status_t px__hd_dup_fail(const px__hd_t *hd, int k, const char *owner,
                                   const char *dup) {
  const char *path = hd->path;
  if (k == 0 && !strcmp(dup, PX__ST_META_KEY))
    return px__st_fail(PX_ERR_FORMAT, path, "duplicate key '%s'", PX__ST_META_KEY);
  if (k == 0) return px__st_fail(PX_ERR_FORMAT, path, "duplicate tensor name '%s'", dup);
  if (owner && !strcmp(owner, PX__ST_META_KEY))
    return px__st_fail(PX_ERR_FORMAT, path, "duplicate %s key '%s'", PX__ST_META_KEY, dup);
  if (owner)
    return px__st_fail(PX_ERR_FORMAT, path, "tensor '%s': duplicate field '%s'", owner, dup);
  return px__st_fail(PX_ERR_FORMAT, path, "duplicate key '%s' in the object at byte %zu", dup,
                     hd->at[k]);
}

/* Objects of o's tree in the order of their '{' (json-c keeps members in
 * file order), each against the keys the scan counted: the first with
 * fewer members than keys holds a duplicate. *next: o's index. */
static px_status_t px__hd_unique(const px__hd_t *hd, struct json_object *o, const char *owner,
                                 int *next) {
  if (json_object_is_type(o, json_type_array)) {
    size_t n = json_object_array_length(o);
    for (size_t i = 0; i < n; i++)
      PX_CHECK(px__hd_unique(hd, json_object_array_get_idx(o, i), NULL, next));
    return PX_OK;
  }
  if (!json_object_is_type(o, json_type_object)) return PX_OK;
  int k = (*next)++;
  if (k >= hd->nobj)
    return px_set_error(PX_ERR_INTERNAL, "%s: header objects miscounted", hd->path);
  if (json_object_object_length(o) != hd->keys[k]) {
    struct json_object *seen = NULL;
    const char *dup = NULL;
    px_status_t st = px__hd_dup_key(hd, k, &seen, &dup);
    if (st == PX_OK)
      st = dup ? px__hd_dup_fail(hd, k, owner, dup)
               : px_set_error(PX_ERR_INTERNAL, "%s: header keys miscounted", hd->path);
    json_object_put(seen);
    return st;
  }
  json_object_object_foreach(o, key, val) {
    PX_CHECK(px__hd_unique(hd, val, k == 0 ? key : NULL, next));
  }
  return PX_OK;
}

/* Element i of integer array a of tensor name (what: "shape", ...). */
static px_status_t px__hd_int(const char *path, struct json_object *a, size_t i, const char *name,
                              const char *what, int64_t *out) {
  struct json_object *v = json_object_array_get_idx(a, i);
  if (json_object_is_type(v, json_type_double))
    return px__st_fail(PX_ERR_FORMAT, path, "tensor '%s': %s: numbers must be integers", name,
                       what);
  if (!json_object_is_type(v, json_type_int))
    return px__st_fail(PX_ERR_FORMAT, path, "tensor '%s': %s: expected an integer, got %s", name,
                       what, json_type_to_name(json_object_get_type(v)));
  *out = json_object_get_int64(v);
  if (*out == INT64_MIN || (*out == INT64_MAX && json_object_get_uint64(v) > (uint64_t)INT64_MAX))
    return px__st_fail(PX_ERR_FORMAT, path, "tensor '%s': %s: integer out of range", name, what);
  return PX_OK;
}

/* [int, int, ...] with at most max elements into vals[*count]. */
static px_status_t px__hd_ints(const char *path, struct json_object *a, int64_t *vals, int max,
                               int *count, const char *name, const char *what) {
  if (!json_object_is_type(a, json_type_array))
    return px__st_fail(PX_ERR_FORMAT, path, "tensor '%s': %s is not an array of integers", name,
                       what);
  size_t n = json_object_array_length(a);
  if (n > (size_t)max)
    return px__st_fail(PX_ERR_FORMAT, path, "tensor '%s': %s has more than %d elements", name,
                       what, max);
  for (size_t i = 0; i < n; i++) PX_CHECK(px__hd_int(path, a, i, name, what, &vals[i]));
  *count = (int)n;
  return PX_OK;
}

enum { PX__F_DTYPE = 1, PX__F_SHAPE = 2, PX__F_OFFSETS = 4 };

/* Field key (value v) of tensor entry e; *seen: the PX__F_* read so far. */
static px_status_t px__hd_field(const char *path, px__st_entry_t *e, const char *key,
                                struct json_object *v, unsigned *seen) {
  const char *name = e->name;
  unsigned f = strcmp(key, "dtype") == 0          ? PX__F_DTYPE
               : strcmp(key, "shape") == 0        ? PX__F_SHAPE
               : strcmp(key, "data_offsets") == 0 ? PX__F_OFFSETS
                                                  : 0;
  if (!f) return px__st_fail(PX_ERR_FORMAT, path, "tensor '%s': unknown field '%s'", name, key);
  *seen |= f;
  if (f == PX__F_DTYPE) {
    if (!json_object_is_type(v, json_type_string))
      return px__st_fail(PX_ERR_FORMAT, path, "tensor '%s': dtype is not a string", name);
    const char *dt = json_object_get_string(v);
    int k = 0;
    while (k < PX_ST_DTYPE_COUNT && strcmp(px__st_dtypes[k].name, dt) != 0) k++;
    if (k == PX_ST_DTYPE_COUNT)
      return px__st_fail(PX_ERR_FORMAT, path, "tensor '%s': unknown dtype '%s'", name, dt);
    e->dtype = (px_st_dtype_t)k;
  } else if (f == PX__F_SHAPE) {
    PX_CHECK(px__hd_ints(path, v, e->shape, PX_ST_MAX_DIMS, &e->ndim, name, "shape"));
    for (int d = 0; d < e->ndim; d++)
      if (e->shape[d] < 0)
        return px__st_fail(PX_ERR_FORMAT, path,
                           "tensor '%s': shape has a negative dimension %" PRId64, name,
                           e->shape[d]);
  } else {
    int64_t off[2];
    int cnt;
    PX_CHECK(px__hd_ints(path, v, off, 2, &cnt, name, "data_offsets"));
    if (cnt != 2 || off[0] < 0 || off[1] < 0)
      return px__st_fail(PX_ERR_FORMAT, path,
                         "tensor '%s': data_offsets must be two non-negative integers", name);
    e->begin = (uint64_t)off[0];
    e->end = (uint64_t)off[1];
  }
  return PX_OK;
}

/* Tensor entry name (value v) into h->entries[h->n]. */
static px_status_t px__hd_tensor(px_safetensors_t *h, const char *name, struct json_object *v) {
  if (!json_object_is_type(v, json_type_object))
    return px__st_fail(PX_ERR_FORMAT, h->path, "tensor '%s': entry is not an object", name);
  px__st_entry_t *e = &h->entries[h->n];
  memset(e, 0, sizeof *e);
  e->name = name;
  unsigned seen = 0;
  json_object_object_foreach(v, key, fv) {
    PX_CHECK(px__hd_field(h->path, e, key, fv, &seen));
  }
  static const char *const field_names[] = {"dtype", "shape", "data_offsets"};
  for (int k = 0; k < 3; k++)
    if (!(seen & (1u << k)))
      return px__st_fail(PX_ERR_FORMAT, h->path, "tensor '%s': missing field '%s'", name,
                         field_names[k]);
  h->n++;
  return PX_OK;
}

/* The metadata object v into h->meta, in file order. */
static px_status_t px__hd_metadata(px_safetensors_t *h, struct json_object *v) {
  if (!json_object_is_type(v, json_type_object))
    return px__st_fail(PX_ERR_FORMAT, h->path, "%s is not an object", PX__ST_META_KEY);
  h->meta = px_malloc(((size_t)json_object_object_length(v) + 1) * sizeof *h->meta,
                      "safetensors.meta");
  if (!h->meta) return PX_ERR_NOMEM;
  json_object_object_foreach(v, key, val) {
    if (!json_object_is_type(val, json_type_string))
      return px__st_fail(PX_ERR_FORMAT, h->path, "%s: value of '%s' is not a string",
                         PX__ST_META_KEY, key);
    h->meta[h->nmeta].key = key;
    h->meta[h->nmeta].value = json_object_get_string(val);
    h->nmeta++;
  }
  return PX_OK;
}

/* The json-c tree of the header (h->root) by the schema. */
static px_status_t px__hd_schema(px_safetensors_t *h) {
  struct json_object *root = h->root;
  if (!json_object_is_type(root, json_type_object))
    return px__st_fail(PX_ERR_FORMAT, h->path, "the header is not a JSON object");
  size_t n = (size_t)json_object_object_length(root);
  h->entries = px_malloc((n + 1) * sizeof *h->entries, "safetensors.entries");
  if (!h->entries) return PX_ERR_NOMEM;
  json_object_object_foreach(root, key, val) {
    if (strcmp(key, PX__ST_META_KEY) == 0) PX_CHECK(px__hd_metadata(h, val));
    else PX_CHECK(px__hd_tensor(h, key, val));
  }
  return PX_OK;
}

/* Reads the header bytes s[0..len) into h (h->root keeps the tree its
 * names and values point into). */
static px_status_t px__hd_read(px_safetensors_t *h, const char *s, size_t len) {
  if (len == 0) return px__st_fail(PX_ERR_FORMAT, h->path, "header is empty");
  px__hd_t hd = {.path = h->path, .s = s, .len = len};
  /* The reference reader insists on '{' as the very first byte. */
  if (s[0] != '{') return px__hd_syntax(&hd, 0, "header does not start with '{'");
  px_status_t st = px__hd_scan(&hd);
  if (st == PX_OK && px_json_parse(s, len, PX_ST_MAX_HEADER, &h->root) != PX_OK) {
    char why[256];
    snprintf(why, sizeof why, "%s", px_last_error());
    st = px__st_fail(PX_ERR_FORMAT, h->path, "bad JSON in the header: %s", why);
  }
  int next = 0;
  if (st == PX_OK) st = px__hd_unique(&hd, h->root, NULL, &next);
  if (st == PX_OK) st = px__hd_schema(h);
  px_free(hd.keys);
  px_free(hd.at);
  return st;
}

/* ---- validation of what the header says ------------------------------------- */

static int px__st_cmp_entry_name(const void *a, const void *b) {
  return strcmp((*(px__st_entry_t *const *)a)->name, (*(px__st_entry_t *const *)b)->name);
}

static int px__st_cmp_entry_offset(const void *a, const void *b) {
  const px__st_entry_t *x = a, *y = b;
  if (x->begin != y->begin) return x->begin < y->begin ? -1 : 1;
  if (x->end != y->end) return x->end < y->end ? -1 : 1;
  return strcmp(x->name, y->name);
}

static int px__st_cmp_kv(const void *a, const void *b) {
  return strcmp((*(px__st_kv_t *const *)a)->key, (*(px__st_kv_t *const *)b)->key);
}

/* *out = [n + 1] pointers to the n elements of elem bytes at arr, sorted by
 * cmp (which compares two such pointers); *dup = the first sorted position
 * equal to the one before it, -1 when all differ. *out is px_malloc'd. */
static px_status_t px__st_index(void *arr, int n, size_t elem,
                                int (*cmp)(const void *, const void *), void ***out, int *dup) {
  void **idx = px_malloc(((size_t)n + 1) * sizeof *idx, "safetensors.index");
  if (!idx) return PX_ERR_NOMEM;
  for (int i = 0; i < n; i++) idx[i] = (char *)arr + (size_t)i * elem;
  qsort(idx, (size_t)n, sizeof *idx, cmp);
  *out = idx;
  *dup = -1;
  for (int i = 1; i < n && *dup < 0; i++)
    if (cmp(&idx[i - 1], &idx[i]) == 0) *dup = i;
  return PX_OK;
}

static px_status_t px__st_validate(px_safetensors_t *h) {
  const char *path = h->path;
  char sh[160];
  for (int i = 0; i < h->n; i++) {
    const px__st_entry_t *e = &h->entries[i];
    uint64_t nbytes;
    if (px__st_nbytes(e->dtype, e->ndim, e->shape, &nbytes) != 0) {
      return px__st_fail(PX_ERR_FORMAT, path, "tensor '%s': shape %s of %s is too large", e->name,
                         px__st_shape_str(sh, sizeof sh, e->ndim, e->shape),
                         px__st_dtypes[e->dtype].name);
    }
    if (e->begin > e->end) {
      return px__st_fail(PX_ERR_FORMAT, path,
                         "tensor '%s': data_offsets [%" PRIu64 ", %" PRIu64 "] are reversed",
                         e->name, e->begin, e->end);
    }
    if (e->end > h->data_len) {
      return px__st_fail(PX_ERR_FORMAT, path,
                         "tensor '%s': data_offsets [%" PRIu64 ", %" PRIu64
                         "] run past the end of the file (%" PRIu64
                         " data bytes): truncated file?",
                         e->name, e->begin, e->end, h->data_len);
    }
    if (e->end - e->begin != nbytes) {
      return px__st_fail(PX_ERR_FORMAT, path,
                         "tensor '%s': data_offsets [%" PRIu64 ", %" PRIu64
                         "] do not match shape %s of %s (%" PRIu64 " bytes)",
                         e->name, e->begin, e->end,
                         px__st_shape_str(sh, sizeof sh, e->ndim, e->shape),
                         px__st_dtypes[e->dtype].name, nbytes);
    }
  }

  /* Entries in data order; the by-name index points into the final array. */
  if (h->n > 1) qsort(h->entries, (size_t)h->n, sizeof *h->entries, px__st_cmp_entry_offset);
  void **idx;
  int dup;
  PX_CHECK(px__st_index(h->entries, h->n, sizeof *h->entries, px__st_cmp_entry_name, &idx, &dup));
  h->by_name = (px__st_entry_t **)idx;
  if (dup >= 0)
    return px__st_fail(PX_ERR_FORMAT, path, "duplicate tensor name '%s'", h->by_name[dup]->name);
  PX_CHECK(px__st_index(h->meta, h->nmeta, sizeof *h->meta, px__st_cmp_kv, &idx, &dup));
  h->meta_by_key = (px__st_kv_t **)idx;
  if (dup >= 0) {
    return px__st_fail(PX_ERR_FORMAT, path, "duplicate %s key '%s'", PX__ST_META_KEY,
                       h->meta_by_key[dup]->key);
  }

  uint64_t expect = 0;
  for (int i = 0; i < h->n; i++) {
    const px__st_entry_t *e = &h->entries[i];
    if (e->begin < expect) {
      const px__st_entry_t *prev = &h->entries[i - 1];
      return px__st_fail(PX_ERR_FORMAT, path,
                         "tensor '%s': data_offsets [%" PRIu64 ", %" PRIu64
                         "] overlap tensor '%s' [%" PRIu64 ", %" PRIu64 "]",
                         e->name, e->begin, e->end, prev->name, prev->begin, prev->end);
    }
    if (e->begin > expect) {
      return px__st_fail(PX_ERR_FORMAT, path,
                         "tensor '%s': data_offsets [%" PRIu64 ", %" PRIu64
                         "] leave a gap of %" PRIu64 " bytes before them",
                         e->name, e->begin, e->end, e->begin - expect);
    }
    expect = e->end;
  }
  if (expect != h->data_len) {
    return px__st_fail(PX_ERR_FORMAT, path,
                       "%" PRIu64 " bytes after the last tensor's data (the tensors cover %" PRIu64
                       " of %" PRIu64 " data bytes)",
                       h->data_len - expect, expect, h->data_len);
  }
  return PX_OK;
}

/* Reads exactly len bytes at off; a short read is a file that ends early. */
static px_status_t px__st_pread_all(const px_safetensors_t *h, void *buf, size_t len, uint64_t off,
                                    const char *what) {
  char *p = buf;
  while (len > 0) {
    size_t chunk = len < PX__ST_IO_CHUNK ? len : PX__ST_IO_CHUNK;
    ssize_t r = pread(h->fd, p, chunk, (off_t)off);
    if (r < 0) {
      if (errno == EINTR) continue;
      return px__st_fail(PX_ERR_IO, h->path, "read error in %s: %s", what, strerror(errno));
    }
    if (r == 0) {
      return px__st_fail(PX_ERR_FORMAT, h->path, "file ends at byte %" PRIu64 " inside %s", off,
                         what);
    }
    p += r;
    len -= (size_t)r;
    off += (uint64_t)r;
  }
  return PX_OK;
}

px_status_t px_safetensors_open(const char *path, px_safetensors_t **out) {
  PX_REQUIRE(out != NULL, "px_safetensors_open: NULL out");
  *out = NULL;
  PX_REQUIRE(path != NULL && path[0] != '\0', "px_safetensors_open: no path");
  px_status_t st = PX_OK;
  px_safetensors_t *h = px_calloc(1, sizeof *h, "safetensors.handle");
  if (!h) return PX_ERR_NOMEM;
  h->fd = -1;
  size_t plen = strlen(path);
  h->path = px_malloc(plen + 1, "safetensors.path");
  if (!h->path) {
    st = PX_ERR_NOMEM;
    goto done;
  }
  memcpy(h->path, path, plen + 1);

  h->fd = open(path, O_RDONLY | O_CLOEXEC);
  if (h->fd < 0) {
    st = px__st_fail(PX_ERR_IO, path, "cannot open: %s", strerror(errno));
    goto done;
  }
  struct stat sb;
  if (fstat(h->fd, &sb) != 0) {
    st = px__st_fail(PX_ERR_IO, path, "cannot stat: %s", strerror(errno));
    goto done;
  }
  if (!S_ISREG(sb.st_mode)) {
    st = px__st_fail(PX_ERR_IO, path, "not a regular file");
    goto done;
  }
  uint64_t fsize = (uint64_t)sb.st_size;
  if (fsize < 8) {
    st = px__st_fail(PX_ERR_FORMAT, path,
                     "file is %" PRIu64 " bytes, too short for the 8-byte header size: truncated",
                     fsize);
    goto done;
  }
  uint8_t size_le[8];
  PX_CHECK_GOTO(px__st_pread_all(h, size_le, 8, 0, "the header size"), st, done);
  uint64_t hlen = 0;
  for (int i = 0; i < 8; i++) hlen |= (uint64_t)size_le[i] << (8 * i);
  if (hlen > PX_ST_MAX_HEADER) {
    st = px__st_fail(PX_ERR_FORMAT, path, "header size %" PRIu64 " exceeds the %u-byte limit",
                     hlen, PX_ST_MAX_HEADER);
    goto done;
  }
  if (hlen > fsize - 8) {
    st = px__st_fail(PX_ERR_FORMAT, path,
                     "header size %" PRIu64 " is larger than the %" PRIu64
                     " bytes after it: truncated or not a safetensors file",
                     hlen, fsize - 8);
    goto done;
  }
  h->data_start = 8 + hlen;
  h->data_len = fsize - h->data_start;
  h->header = px_malloc((size_t)hlen + 1, "safetensors.header");
  if (!h->header) {
    st = PX_ERR_NOMEM;
    goto done;
  }
  PX_CHECK_GOTO(px__st_pread_all(h, h->header, (size_t)hlen, 8, "the header"), st, done);
  h->header[hlen] = '\0';

  PX_CHECK_GOTO(px__hd_read(h, h->header, (size_t)hlen), st, done);
  PX_CHECK_GOTO(px__st_validate(h), st, done);
done:
  return PX_CREATED(st, h, out, px_safetensors_close);
}

void px_safetensors_close(px_safetensors_t *st) {
  if (!st) return;
  if (st->fd >= 0) close(st->fd);
  json_object_put(st->root);
  PX_FREE_ALL(st->meta_by_key, st->meta, st->by_name, st->entries, st->header, st->path, st);
}

int px_safetensors_count(const px_safetensors_t *st) { return st ? st->n : 0; }

const char *px_safetensors_name(const px_safetensors_t *st, int i) {
  if (!st || i < 0 || i >= st->n) return NULL;
  return st->entries[i].name;
}

static const px__st_entry_t *px__st_lookup(const px_safetensors_t *h, const char *name) {
  px__st_entry_t key = {.name = name};
  px__st_entry_t *kp = &key;
  px__st_entry_t **hit =
      bsearch(&kp, h->by_name, (size_t)h->n, sizeof *h->by_name, px__st_cmp_entry_name);
  return hit ? *hit : NULL;
}

static void px__st_fill_info(const px_safetensors_t *h, const px__st_entry_t *e,
                             px_st_info_t *info) {
  memset(info, 0, sizeof *info);
  info->name = e->name;
  info->dtype = e->dtype;
  info->ndim = e->ndim;
  memcpy(info->shape, e->shape, sizeof info->shape);
  info->nbytes = e->end - e->begin;
  info->file_offset = h->data_start + e->begin;
}

px_status_t px_safetensors_find(const px_safetensors_t *st, const char *name, px_st_info_t *info) {
  PX_REQUIRE(st != NULL && name != NULL && info != NULL, "px_safetensors_find: NULL argument");
  const px__st_entry_t *e = px__st_lookup(st, name);
  if (!e) return px__st_fail(PX_ERR_INVALID, st->path, "no tensor named '%s'", name);
  px__st_fill_info(st, e, info);
  return PX_OK;
}

px_status_t px_safetensors_read(const px_safetensors_t *st, const char *name, void *dst,
                                size_t bytes) {
  PX_REQUIRE(st != NULL && name != NULL, "px_safetensors_read: NULL argument");
  const px__st_entry_t *e = px__st_lookup(st, name);
  if (!e) return px__st_fail(PX_ERR_INVALID, st->path, "no tensor named '%s'", name);
  uint64_t nbytes = e->end - e->begin;
  if (bytes != nbytes) {
    return px__st_fail(PX_ERR_INVALID, st->path,
                       "tensor '%s' is %" PRIu64 " bytes, the buffer is %zu bytes", name, nbytes,
                       bytes);
  }
  if (nbytes == 0) return PX_OK;
  if (!dst) return px__st_fail(PX_ERR_INVALID, st->path, "tensor '%s': NULL buffer", name);
  char what[320];
  snprintf(what, sizeof what, "the data of tensor '%s'", name);
  return px__st_pread_all(st, dst, (size_t)nbytes, st->data_start + e->begin, what);
}

const char *px_safetensors_meta(const px_safetensors_t *st, const char *key) {
  if (!st || !key) return NULL;
  px__st_kv_t k = {.key = key};
  px__st_kv_t *kp = &k;
  px__st_kv_t **hit =
      bsearch(&kp, st->meta_by_key, (size_t)st->nmeta, sizeof *st->meta_by_key, px__st_cmp_kv);
  return hit ? (*hit)->value : NULL;
}

int px_safetensors_meta_count(const px_safetensors_t *st) { return st ? st->nmeta : 0; }

void px_safetensors_meta_at(const px_safetensors_t *st, int i, const char **key,
                            const char **value) {
  const px__st_kv_t *kv = st && i >= 0 && i < st->nmeta ? &st->meta[i] : NULL;
  if (key) *key = kv ? kv->key : NULL;
  if (value) *value = kv ? kv->value : NULL;
}

/* ---- load_into ----------------------------------------------------------------- */

static px_status_t px__st_match(const px_safetensors_t *h, const px_st_tensor_t *t,
                                const px__st_entry_t *e) {
  char a[160], b[160];
  if (!e) {
    return px__st_fail(PX_ERR_MISMATCH, h->path, "tensor '%s' (%s %s) is missing from the file",
                       t->name, px__st_dtypes[t->dtype].name,
                       px__st_shape_str(a, sizeof a, t->ndim, t->shape));
  }
  if (e->dtype != t->dtype) {
    return px__st_fail(PX_ERR_MISMATCH, h->path, "tensor '%s' is %s in the file, expected %s",
                       t->name, px__st_dtypes[e->dtype].name, px__st_dtypes[t->dtype].name);
  }
  int same = e->ndim == t->ndim;
  for (int d = 0; same && d < e->ndim; d++) same = e->shape[d] == t->shape[d];
  if (!same) {
    return px__st_fail(PX_ERR_MISMATCH, h->path,
                       "tensor '%s' has shape %s in the file, expected %s", t->name,
                       px__st_shape_str(a, sizeof a, e->ndim, e->shape),
                       px__st_shape_str(b, sizeof b, t->ndim, t->shape));
  }
  return PX_OK;
}

px_status_t px_safetensors_load_into(const char *path, const px_st_tensor_t *tensors, int n,
                                     int strict) {
  PX_REQUIRE(path != NULL && path[0] != '\0', "px_safetensors_load_into: no path");
  PX_REQUIRE(n >= 0 && (n == 0 || tensors != NULL), "%s: load: bad tensor table (n = %d)", path,
             n);
  px_status_t st = PX_OK;
  px_safetensors_t *h = NULL;
  const px__st_entry_t **hits = NULL;
  char *used = NULL;
  const char **names = px_malloc(((size_t)n + 1) * sizeof *names, "safetensors.load");
  if (!names) return PX_ERR_NOMEM;
  for (int i = 0; i < n; i++) {
    uint64_t nbytes;
    PX_CHECK_GOTO(px__st_check_tensor(path, "load", &tensors[i], i, 2, &nbytes), st, out);
    names[i] = tensors[i].name;
  }
  qsort(names, (size_t)n, sizeof *names, px__st_cmp_str);
  for (int i = 1; i < n; i++) {
    if (strcmp(names[i - 1], names[i]) == 0) {
      st = px__st_fail(PX_ERR_INVALID, path, "load: duplicate tensor name '%s' in the list",
                       names[i]);
      goto out;
    }
  }

  PX_CHECK_GOTO(px_safetensors_open(path, &h), st, out);
  hits = px_malloc(((size_t)n + 1) * sizeof *hits, "safetensors.load");
  used = px_calloc((size_t)h->n + 1, 1, "safetensors.load");
  if (!hits || !used) {
    st = PX_ERR_NOMEM;
    goto out;
  }
  for (int i = 0; i < n; i++) {
    hits[i] = px__st_lookup(h, tensors[i].name);
    PX_CHECK_GOTO(px__st_match(h, &tensors[i], hits[i]), st, out);
    used[hits[i] - h->entries] = 1;
  }
  if (strict) {
    int extra = 0, first = -1;
    for (int i = 0; i < h->n; i++) {
      if (!used[i]) {
        if (first < 0) first = i;
        extra++;
      }
    }
    if (extra) {
      st = px__st_fail(PX_ERR_MISMATCH, path,
                       "tensor '%s' in the file is not in the list (strict load; %d unexpected "
                       "tensor%s)",
                       h->entries[first].name, extra, extra == 1 ? "" : "s");
      goto out;
    }
  }
  for (int i = 0; i < n; i++) {
    const px__st_entry_t *e = hits[i];
    PX_CHECK_GOTO(px_safetensors_read(h, e->name, tensors[i].dst, (size_t)(e->end - e->begin)), st,
                  out);
  }
out:
  px_free(used);
  px_free(hits);
  px_safetensors_close(h);
  px_free(names);
  return st;
}
