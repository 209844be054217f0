/* safetensors checkpoints: an atomic writer and a validating reader.
 *
 * The header is parsed by a small strict JSON parser driven by the format's
 * schema (an object of tensor entries and an optional "__metadata__" object
 * of strings), so nothing the format does not allow gets through: no floats,
 * booleans or nulls, no unknown fields, no duplicate keys, no invalid UTF-8.
 * A file is checked completely at open, offsets against shapes and against
 * the file size included, so that a corrupt or hostile checkpoint fails there
 * with a message naming the file and the problem, never later as a short
 * read or an overrun. Data is read with pread, so one handle can serve
 * several threads. Strings are decoded in place inside the header buffer,
 * which the handle keeps: the names it hands out point into it. */
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

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
  char *header;              /* header bytes; the decoded strings live in it */
  px__st_entry_t *entries;   /* [n], in data order */
  px__st_entry_t **by_name;  /* [n], sorted by name for lookups */
  int n;
  px__st_kv_t *meta;         /* [nmeta], in file order */
  px__st_kv_t **meta_by_key; /* [nmeta], sorted by key */
  int nmeta;
};

/* ---- the JSON parser -------------------------------------------------------
 * Recursive descent over the header buffer, shaped by the schema: the top
 * object, tensor entries, the metadata object, integer arrays. */

typedef struct {
  const char *path;
  char *s;     /* header bytes, NUL-terminated */
  size_t len;
  size_t pos;
  px_safetensors_t *h;
  int cap_entries, cap_meta;
} px__js_t;

static px_status_t px__js_syntax(px__js_t *js, const char *what) {
  return px__st_fail(PX_ERR_FORMAT, js->path, "bad JSON in the header at byte %zu: %s", js->pos,
                     what);
}

static void px__js_ws(px__js_t *js) {
  while (js->pos < js->len) {
    char c = js->s[js->pos];
    if (c != ' ' && c != '\t' && c != '\n' && c != '\r') break;
    js->pos++;
  }
}

/* Next byte, or 0 at the end (a NUL inside the header is never valid). */
static char px__js_peek(const px__js_t *js) { return js->pos < js->len ? js->s[js->pos] : 0; }

static px_status_t px__js_expect(px__js_t *js, char c, const char *what) {
  if (px__js_peek(js) != c) return px__js_syntax(js, what);
  js->pos++;
  return PX_OK;
}

static int px__js_hex4(const char *p, unsigned *out) {
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

/* Parses a string at pos and decodes it in place: the decoded bytes and a
 * NUL are written from the opening quote on, which never overtakes the
 * reading position (every escape is longer than what it decodes to). *out
 * points into the header buffer. */
static px_status_t px__js_string(px__js_t *js, const char **out) {
  if (px__js_peek(js) != '"') return px__js_syntax(js, "expected a string");
  char *w = js->s + js->pos;
  char *start = w;
  js->pos++;
  for (;;) {
    if (js->pos >= js->len) return px__js_syntax(js, "unterminated string");
    unsigned char c = (unsigned char)js->s[js->pos];
    if (c == '"') {
      js->pos++;
      break;
    }
    if (c < 0x20) return px__js_syntax(js, "control character in a string");
    if (c >= 0x80) {
      size_t n = px_utf8_seq(js->s + js->pos, js->len - js->pos);
      if (n == 0) return px__js_syntax(js, "invalid UTF-8 in a string");
      memmove(w, js->s + js->pos, n);
      w += n;
      js->pos += n;
      continue;
    }
    if (c != '\\') {
      *w++ = (char)c;
      js->pos++;
      continue;
    }
    if (js->pos + 1 >= js->len) return px__js_syntax(js, "unterminated string");
    char e = js->s[js->pos + 1];
    js->pos += 2;
    switch (e) {
      case '"': *w++ = '"'; break;
      case '\\': *w++ = '\\'; break;
      case '/': *w++ = '/'; break;
      case 'b': *w++ = '\b'; break;
      case 'f': *w++ = '\f'; break;
      case 'n': *w++ = '\n'; break;
      case 'r': *w++ = '\r'; break;
      case 't': *w++ = '\t'; break;
      case 'u': {
        unsigned cp;
        if (js->len - js->pos < 4 || px__js_hex4(js->s + js->pos, &cp) != 0) {
          return px__js_syntax(js, "bad \\u escape");
        }
        js->pos += 4;
        if (cp >= 0xDC00 && cp <= 0xDFFF) return px__js_syntax(js, "lone low surrogate");
        if (cp >= 0xD800 && cp <= 0xDBFF) {
          unsigned lo;
          if (js->len - js->pos < 6 || js->s[js->pos] != '\\' || js->s[js->pos + 1] != 'u' ||
              px__js_hex4(js->s + js->pos + 2, &lo) != 0 || lo < 0xDC00 || lo > 0xDFFF) {
            return px__js_syntax(js, "high surrogate not followed by a low one");
          }
          js->pos += 6;
          cp = 0x10000 + ((cp - 0xD800) << 10) + (lo - 0xDC00);
        }
        if (cp == 0) return px__js_syntax(js, "\\u0000 in a string (names cannot hold NUL)");
        if (cp < 0x80) {
          *w++ = (char)cp;
        } else if (cp < 0x800) {
          *w++ = (char)(0xC0 | (cp >> 6));
          *w++ = (char)(0x80 | (cp & 0x3F));
        } else if (cp < 0x10000) {
          *w++ = (char)(0xE0 | (cp >> 12));
          *w++ = (char)(0x80 | ((cp >> 6) & 0x3F));
          *w++ = (char)(0x80 | (cp & 0x3F));
        } else {
          *w++ = (char)(0xF0 | (cp >> 18));
          *w++ = (char)(0x80 | ((cp >> 12) & 0x3F));
          *w++ = (char)(0x80 | ((cp >> 6) & 0x3F));
          *w++ = (char)(0x80 | (cp & 0x3F));
        }
        break;
      }
      default:
        js->pos -= 2;
        return px__js_syntax(js, "bad escape in a string");
    }
  }
  *w = '\0';
  *out = start;
  return PX_OK;
}

/* An integer: -?(0|[1-9][0-9]*), no fraction or exponent, within int64. */
static px_status_t px__js_int(px__js_t *js, int64_t *out) {
  int neg = 0;
  if (px__js_peek(js) == '-') {
    neg = 1;
    js->pos++;
  }
  char c = px__js_peek(js);
  if (c < '0' || c > '9') return px__js_syntax(js, "expected an integer");
  if (c == '0' && js->pos + 1 < js->len && js->s[js->pos + 1] >= '0' && js->s[js->pos + 1] <= '9') {
    return px__js_syntax(js, "integer with a leading zero");
  }
  uint64_t v = 0;
  while ((c = px__js_peek(js)) >= '0' && c <= '9') {
    if (v > ((uint64_t)INT64_MAX - (uint64_t)(c - '0')) / 10) {
      return px__js_syntax(js, "integer out of range");
    }
    v = v * 10 + (uint64_t)(c - '0');
    js->pos++;
  }
  if (c == '.' || c == 'e' || c == 'E') return px__js_syntax(js, "numbers must be integers");
  *out = neg ? -(int64_t)v : (int64_t)v;
  return PX_OK;
}

/* The items of the array or object whose opening bracket js has just
 * consumed, up to and including close: item(js, ctx) is called with js at
 * each item and consumes it; bad_sep is the complaint when neither ',' nor
 * close follows one. Every list of the header is read through here. */
typedef px_status_t (*px__js_item_fn)(px__js_t *js, void *ctx);
static px_status_t px__js_list(px__js_t *js, char close, const char *bad_sep,
                               px__js_item_fn item, void *ctx) {
  px__js_ws(js);
  if (px__js_peek(js) == close) {
    js->pos++;
    return PX_OK;
  }
  for (;;) {
    px__js_ws(js);
    PX_CHECK(item(js, ctx));
    px__js_ws(js);
    if (px__js_peek(js) == close) {
      js->pos++;
      return PX_OK;
    }
    PX_CHECK(px__js_expect(js, ',', bad_sep));
  }
}

/* An integer array being read (px__js_int_array). */
typedef struct {
  int64_t *vals;
  int max, *count;
  const char *tensor, *what; /* name it in messages */
} px__js_ints_t;

static px_status_t px__js_int_item(px__js_t *js, void *ctx) {
  px__js_ints_t *a = ctx;
  int64_t v = 0;
  PX_CHECK(px__js_int(js, &v));
  if (*a->count == a->max) {
    return px__st_fail(PX_ERR_FORMAT, js->path, "tensor '%s': %s has more than %d elements",
                       a->tensor, a->what, a->max);
  }
  a->vals[(*a->count)++] = v;
  return PX_OK;
}

/* [int, int, ...] with at most max elements; what names it in messages. */
static px_status_t px__js_int_array(px__js_t *js, int64_t *vals, int max, int *count,
                                    const char *tensor, const char *what) {
  if (px__js_peek(js) != '[') {
    return px__st_fail(PX_ERR_FORMAT, js->path, "tensor '%s': %s is not an array of integers",
                       tensor, what);
  }
  js->pos++;
  *count = 0;
  px__js_ints_t a = {vals, max, count, tensor, what};
  return px__js_list(js, ']', "expected ',' or ']' in an array", px__js_int_item, &a);
}

/* Parses the members of the object whose '{' js has just consumed, up to and
 * including its '}': member(js, key, ctx) is called with js at each value
 * and consumes it. Every object of the header is read through here. */
typedef px_status_t (*px__js_member_fn)(px__js_t *js, const char *key, void *ctx);
typedef struct {
  px__js_member_fn member;
  void *ctx;
} px__js_object_t;

static px_status_t px__js_member_item(px__js_t *js, void *ctx) {
  px__js_object_t *o = ctx;
  const char *key;
  PX_CHECK(px__js_string(js, &key));
  px__js_ws(js);
  PX_CHECK(px__js_expect(js, ':', "expected ':' after a key"));
  px__js_ws(js);
  return o->member(js, key, o->ctx);
}

static px_status_t px__js_members(px__js_t *js, px__js_member_fn member, void *ctx) {
  px__js_object_t o = {member, ctx};
  return px__js_list(js, '}', "expected ',' or '}' in an object", px__js_member_item, &o);
}

enum { PX__F_DTYPE = 1, PX__F_SHAPE = 2, PX__F_OFFSETS = 4 };

/* The tensor entry being read, for px__js_tensor_field. */
typedef struct {
  px__st_entry_t *e;
  const char *name;
  unsigned seen; /* PX__F_* read so far */
} px__js_tensor_t;

static px_status_t px__js_tensor_field(px__js_t *js, const char *key, void *ctx) {
  px__js_tensor_t *t = ctx;
  px__st_entry_t *e = t->e;
  const char *name = t->name;
  unsigned f = strcmp(key, "dtype") == 0          ? PX__F_DTYPE
               : strcmp(key, "shape") == 0        ? PX__F_SHAPE
               : strcmp(key, "data_offsets") == 0 ? PX__F_OFFSETS
                                                  : 0;
  if (!f) {
    return px__st_fail(PX_ERR_FORMAT, js->path, "tensor '%s': unknown field '%s'", name, key);
  }
  if (t->seen & f) {
    return px__st_fail(PX_ERR_FORMAT, js->path, "tensor '%s': duplicate field '%s'", name, key);
  }
  t->seen |= f;
  if (f == PX__F_DTYPE) {
    if (px__js_peek(js) != '"') {
      return px__st_fail(PX_ERR_FORMAT, js->path, "tensor '%s': dtype is not a string", name);
    }
    const char *dt;
    PX_CHECK(px__js_string(js, &dt));
    int k = 0;
    while (k < PX_ST_DTYPE_COUNT && strcmp(px__st_dtypes[k].name, dt) != 0) k++;
    if (k == PX_ST_DTYPE_COUNT) {
      return px__st_fail(PX_ERR_FORMAT, js->path, "tensor '%s': unknown dtype '%s'", name, dt);
    }
    e->dtype = (px_st_dtype_t)k;
  } else if (f == PX__F_SHAPE) {
    PX_CHECK(px__js_int_array(js, e->shape, PX_ST_MAX_DIMS, &e->ndim, name, "shape"));
    for (int d = 0; d < e->ndim; d++) {
      if (e->shape[d] < 0) {
        return px__st_fail(PX_ERR_FORMAT, js->path,
                           "tensor '%s': shape has a negative dimension %" PRId64, name,
                           e->shape[d]);
      }
    }
  } else {
    int64_t off[2];
    int cnt;
    PX_CHECK(px__js_int_array(js, off, 2, &cnt, name, "data_offsets"));
    if (cnt != 2 || off[0] < 0 || off[1] < 0) {
      return px__st_fail(PX_ERR_FORMAT, js->path,
                         "tensor '%s': data_offsets must be two non-negative integers", name);
    }
    e->begin = (uint64_t)off[0];
    e->end = (uint64_t)off[1];
  }
  return PX_OK;
}

/* Room in *arr (of *cap elements of elem bytes, first the first capacity)
 * for element n: doubles it when full; too_many is the complaint past 2^28. */
static px_status_t px__js_grow(px__js_t *js, void **arr, int n, int *cap, int first, size_t elem,
                               const char *name, const char *too_many) {
  if (n < *cap) return PX_OK;
  if (n > (1 << 28)) return px__st_fail(PX_ERR_FORMAT, js->path, "%s", too_many);
  int ncap = *cap ? 2 * *cap : first;
  void *p = px_realloc(*arr, (size_t)ncap * elem, name);
  if (!p) return PX_ERR_NOMEM;
  *arr = p;
  *cap = ncap;
  return PX_OK;
}

static px_status_t px__js_tensor(px__js_t *js, const char *name) {
  px_safetensors_t *h = js->h;
  if (px__js_peek(js) != '{') {
    return px__st_fail(PX_ERR_FORMAT, js->path, "tensor '%s': entry is not an object", name);
  }
  js->pos++;
  PX_CHECK(px__js_grow(js, (void **)&h->entries, h->n, &js->cap_entries, 16, sizeof *h->entries,
                       "safetensors.entries", "too many tensors"));
  px__js_tensor_t t = {.e = &h->entries[h->n], .name = name, .seen = 0};
  memset(t.e, 0, sizeof *t.e);
  t.e->name = name;
  PX_CHECK(px__js_members(js, px__js_tensor_field, &t));
  static const char *const field_names[] = {"dtype", "shape", "data_offsets"};
  for (int k = 0; k < 3; k++) {
    if (!(t.seen & (1u << k))) {
      return px__st_fail(PX_ERR_FORMAT, js->path, "tensor '%s': missing field '%s'", name,
                         field_names[k]);
    }
  }
  h->n++;
  return PX_OK;
}

static px_status_t px__js_meta_pair(px__js_t *js, const char *key, void *ctx) {
  px_safetensors_t *h = js->h;
  const char *value;
  if (px__js_peek(js) != '"') {
    return px__st_fail(PX_ERR_FORMAT, js->path, "%s: value of '%s' is not a string",
                       PX__ST_META_KEY, key);
  }
  PX_CHECK(px__js_string(js, &value));
  PX_CHECK(px__js_grow(js, (void **)&h->meta, h->nmeta, &js->cap_meta, 8, sizeof *h->meta,
                       "safetensors.meta", "too much metadata"));
  h->meta[h->nmeta].key = key;
  h->meta[h->nmeta].value = value;
  h->nmeta++;
  return PX_OK;
}

static px_status_t px__js_metadata(px__js_t *js) {
  if (px__js_peek(js) != '{') {
    return px__st_fail(PX_ERR_FORMAT, js->path, "%s is not an object", PX__ST_META_KEY);
  }
  js->pos++;
  return px__js_members(js, px__js_meta_pair, NULL);
}

/* A member of the header: the metadata object (once) or a tensor entry. */
static px_status_t px__js_header_member(px__js_t *js, const char *key, void *ctx) {
  int *seen_meta = ctx;
  if (strcmp(key, PX__ST_META_KEY) != 0) return px__js_tensor(js, key);
  if (*seen_meta) return px__st_fail(PX_ERR_FORMAT, js->path, "duplicate key '%s'", PX__ST_META_KEY);
  *seen_meta = 1;
  return px__js_metadata(js);
}

static px_status_t px__js_header(px__js_t *js) {
  if (js->len == 0) return px__st_fail(PX_ERR_FORMAT, js->path, "header is empty");
  /* The reference reader insists on '{' as the very first byte. */
  if (js->s[0] != '{') return px__js_syntax(js, "header does not start with '{'");
  js->pos = 1;
  int seen_meta = 0;
  PX_CHECK(px__js_members(js, px__js_header_member, &seen_meta));
  px__js_ws(js);
  if (js->pos != js->len) return px__js_syntax(js, "unexpected bytes after the header object");
  return PX_OK;
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

  px__js_t js = {.path = path, .s = h->header, .len = (size_t)hlen, .h = h};
  PX_CHECK_GOTO(px__js_header(&js), st, done);
  PX_CHECK_GOTO(px__st_validate(h), st, done);
done:
  return PX_CREATED(st, h, out, px_safetensors_close);
}

void px_safetensors_close(px_safetensors_t *st) {
  if (!st) return;
  if (st->fd >= 0) close(st->fd);
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
