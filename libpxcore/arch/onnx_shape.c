/* Constant folding for the ONNX import (arch/onnx_import.c): the shape
 * subgraphs PyTorch's exporter writes for x.view(x.size(0), -1),
 * x.reshape(n, -1) and the like (Shape, Gather, Unsqueeze, Squeeze, Concat,
 * Cast, Slice, ConstantOfShape, and Add, Sub, Mul, Div of constants:
 * channels // groups) computed once, at import, into small new constants
 * (see nn/px_onnx_fold.h). Every folded tensor is bounded
 * (PX__ONNX_FOLD_NUMEL elements, PX__ONNX_FOLD_BYTES for all of one import)
 * and at most 4-D, so a hostile file cannot make folding allocate much.
 * Data are moved as elements of 4 (float32) or 8 (int64) bytes; only Cast
 * and the arithmetic read them as numbers. This file calls nothing of the
 * importer's: the importer hands it constants and turns its refusals into
 * node messages. */
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "arch/px_onnx_fold.h"
#include "prunex/px.h"
#include "px_check.h"

#define PX__F32 ONNX__TENSOR_PROTO__DATA_TYPE__FLOAT
#define PX__I64 ONNX__TENSOR_PROTO__DATA_TYPE__INT64

static px_status_t px__why(char *why, size_t cap, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
static px_status_t px__why(char *why, size_t cap, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(why, cap, fmt, ap);
  va_end(ap);
  return PX_ERR_INVALID;
}

static const Onnx__AttributeProto *px__attr(const Onnx__NodeProto *n, const char *name) {
  for (size_t i = 0; i < n->n_attribute; i++)
    if (n->attribute[i]->name && !strcmp(n->attribute[i]->name, name)) return n->attribute[i];
  return NULL;
}

static size_t px__esize(const Onnx__TensorProto *t) {
  return t->data_type == PX__F32 ? 4 : t->data_type == PX__I64 ? 8 : 0;
}

static size_t px__count(const Onnx__TensorProto *t) {
  size_t n = 1;
  for (size_t d = 0; d < t->n_dims; d++) n *= (size_t)t->dims[d];
  return n;
}

/* The element bytes of t (checked by the importer: the count its dims say). */
static const uint8_t *px__bytes(const Onnx__TensorProto *t) {
  if (t->has_raw_data) return t->raw_data.data;
  return t->data_type == PX__F32 ? (const uint8_t *)t->float_data : (const uint8_t *)t->int64_data;
}

int px__onnx_ints(const Onnx__TensorProto *t, int64_t *v, int cap) {
  size_t n = px__count(t);
  if (t->data_type != PX__I64 || n > (size_t)cap) return -1;
  if (n) memcpy(v, px__bytes(t), n * sizeof *v);
  return (int)n;
}

/* A new tensor of g: dtype, dims[ndims]; *data its zeroed elements. */
static px_status_t px__new(px__onnx_graph_t *g, int dtype, int ndims, const int64_t *dims,
                           char *why, size_t cap, Onnx__TensorProto **out, uint8_t **data) {
  size_t n = 1, es = dtype == PX__F32 ? 4 : 8;
  if (ndims > 4) return px__why(why, cap, "the result would have %d dimensions (at most 4)", ndims);
  for (int d = 0; d < ndims; d++) {
    if (dims[d] < 0 || dims[d] > PX__ONNX_FOLD_NUMEL || (n *= (size_t)dims[d]) > PX__ONNX_FOLD_NUMEL)
      return px__why(why, cap, "the result would have more than %d elements (what folding "
                     "at import takes)", PX__ONNX_FOLD_NUMEL);
  }
  size_t head = sizeof(px__onnx_fold_t) + sizeof(Onnx__TensorProto) + 4 * sizeof(int64_t);
  size_t bytes = head + n * es;
  if (g->fold_bytes + bytes > PX__ONNX_FOLD_BYTES)
    return px__why(why, cap, "the folded constants would take more than %u bytes",
                   PX__ONNX_FOLD_BYTES);
  px__onnx_fold_t *f = px_calloc(1, bytes, "onnx.fold");
  if (!f) return PX_ERR_NOMEM;
  f->next = g->folds;
  g->folds = f;
  g->fold_bytes += bytes;
  Onnx__TensorProto init = ONNX__TENSOR_PROTO__INIT, *t = (Onnx__TensorProto *)(f + 1);
  *t = init;
  t->has_data_type = 1;
  t->data_type = dtype;
  t->n_dims = (size_t)ndims;
  t->dims = (int64_t *)(t + 1);
  memcpy(t->dims, dims, (size_t)ndims * sizeof *dims);
  *data = (uint8_t *)(t->dims + 4);
  if (dtype == PX__F32) {
    t->n_float_data = n;
    t->float_data = (float *)*data;
  } else {
    t->n_int64_data = n;
    t->int64_data = (int64_t *)*data;
  }
  *out = t;
  return PX_OK;
}

/* An axis of a rank-r tensor (negative: from the end), or -1. */
static int px__axis(int64_t a, int r) {
  if (a < 0) a += r;
  return a >= 0 && a < r ? (int)a : -1;
}

/* The axes of n: input 1 (opset 13 and later) or the attribute (before);
 * the count (0: none given), -1 when not constant int64 or too many. */
static int px__axes(const Onnx__NodeProto *n, const Onnx__TensorProto *const *in, int64_t *ax) {
  if (n->n_input > 1 && n->input[1][0]) return in[1] ? px__onnx_ints(in[1], ax, 4) : -1;
  const Onnx__AttributeProto *a = px__attr(n, "axes");
  if (!a) return 0;
  if (a->n_ints > 4) return -1;
  memcpy(ax, a->ints, a->n_ints * sizeof *ax);
  return (int)a->n_ints;
}

static px_status_t px__copy_as(px__onnx_graph_t *g, const Onnx__TensorProto *x, int ndims,
                               const int64_t *dims, char *why, size_t cap,
                               const Onnx__TensorProto **out) {
  Onnx__TensorProto *t;
  uint8_t *d;
  PX_CHECK(px__new(g, x->data_type, ndims, dims, why, cap, &t, &d));
  memcpy(d, px__bytes(x), px__count(x) * px__esize(x));
  *out = t;
  return PX_OK;
}

/* Unsqueeze (unsq) or Squeeze: the same elements, other dims. */
static px_status_t px__squeeze(px__onnx_graph_t *g, const Onnx__NodeProto *n,
                               const Onnx__TensorProto *const *in, int unsq, char *why,
                               size_t cap, const Onnx__TensorProto **out) {
  int64_t ax[4], dims[4];
  int k = px__axes(n, in, ax), r = (int)in[0]->n_dims, ro = unsq ? r + k : r, m = 0;
  unsigned pick = 0;
  if (k < 0 || (unsq && (k == 0 || ro > 4)))
    return px__why(why, cap, "the axes must be a constant list of at most 4, within the rank");
  for (int i = 0; i < k; i++) {
    int a = px__axis(ax[i], ro);
    if (a < 0 || (pick >> a & 1) || (!unsq && in[0]->dims[a] != 1))
      return px__why(why, cap, "axis %lld is out of range, repeated or (Squeeze) not of size 1",
                     (long long)ax[i]);
    pick |= 1u << a;
  }
  for (int d = 0, s = 0; d < ro; d++) {
    if (unsq) dims[m++] = pick >> d & 1 ? 1 : in[0]->dims[s++];
    else if (k ? !(pick >> d & 1) : in[0]->dims[d] != 1) dims[m++] = in[0]->dims[d];
  }
  return px__copy_as(g, in[0], m, dims, why, cap, out);
}

/* Gather along axis of constant indices. */
static px_status_t px__gather(px__onnx_graph_t *g, const Onnx__NodeProto *n,
                              const Onnx__TensorProto *const *in, char *why, size_t cap,
                              const Onnx__TensorProto **out) {
  const Onnx__TensorProto *x = in[0];
  const Onnx__AttributeProto *aa = px__attr(n, "axis");
  int r = (int)x->n_dims, a = px__axis(aa && aa->has_i ? aa->i : 0, r);
  int64_t idx[64], dims[8];
  int ni = px__onnx_ints(in[1], idx, 64), m = 0;
  if (a < 0 || ni < 0)
    return px__why(why, cap, "only int64 indices (at most 64) along an axis of the data are taken");
  for (int d = 0; d < a; d++) dims[m++] = x->dims[d];
  for (size_t d = 0; d < in[1]->n_dims && m < 8; d++) dims[m++] = in[1]->dims[d];
  for (int d = a + 1; d < r && m < 8; d++) dims[m++] = x->dims[d];
  size_t outer = 1, inner = px__esize(x), D = (size_t)x->dims[a];
  for (int d = 0; d < a; d++) outer *= (size_t)x->dims[d];
  for (int d = a + 1; d < r; d++) inner *= (size_t)x->dims[d];
  for (int j = 0; j < ni; j++) {
    if (idx[j] < 0) idx[j] += (int64_t)D;
    if (idx[j] < 0 || idx[j] >= (int64_t)D)
      return px__why(why, cap, "index %d is out of range for a dimension of %zu", j, D);
  }
  Onnx__TensorProto *t;
  uint8_t *o;
  PX_CHECK(px__new(g, x->data_type, m, dims, why, cap, &t, &o));
  const uint8_t *src = px__bytes(x);
  for (size_t i = 0; i < outer; i++)
    for (int j = 0; j < ni; j++, o += inner)
      memcpy(o, src + (i * D + (size_t)idx[j]) * inner, inner);
  *out = t;
  return PX_OK;
}

/* Concat of constants of one type and rank along axis. */
static px_status_t px__concat(px__onnx_graph_t *g, const Onnx__NodeProto *n,
                              const Onnx__TensorProto *const *in, char *why, size_t cap,
                              const Onnx__TensorProto **out) {
  const Onnx__TensorProto *x = in[0];
  const Onnx__AttributeProto *aa = px__attr(n, "axis");
  int r = (int)x->n_dims, a = px__axis(aa && aa->has_i ? aa->i : 0, r);
  int64_t dims[4];
  if (a < 0) return px__why(why, cap, "the axis is out of range");
  memcpy(dims, x->dims, (size_t)r * sizeof *dims);
  dims[a] = 0;
  for (size_t i = 0; i < n->n_input; i++) {
    int ok = in[i] && in[i]->data_type == x->data_type && (int)in[i]->n_dims == r;
    for (int d = 0; ok && d < r; d++) ok = d == a || in[i]->dims[d] == x->dims[d];
    if (!ok) return px__why(why, cap, "input %zu differs in type, rank or a dimension", i);
    dims[a] += in[i]->dims[a];
  }
  size_t outer = 1, inner = px__esize(x);
  for (int d = 0; d < a; d++) outer *= (size_t)x->dims[d];
  for (int d = a + 1; d < r; d++) inner *= (size_t)x->dims[d];
  Onnx__TensorProto *t;
  uint8_t *o;
  PX_CHECK(px__new(g, x->data_type, r, dims, why, cap, &t, &o));
  for (size_t k = 0; k < outer; k++)
    for (size_t i = 0; i < n->n_input; i++) {
      size_t len = (size_t)in[i]->dims[a] * inner;
      memcpy(o, px__bytes(in[i]) + k * len, len);
      o += len;
    }
  *out = t;
  return PX_OK;
}

static px_status_t px__cast(px__onnx_graph_t *g, const Onnx__NodeProto *n,
                            const Onnx__TensorProto *x, char *why, size_t cap,
                            const Onnx__TensorProto **out) {
  const Onnx__AttributeProto *to = px__attr(n, "to");
  int64_t dt = to && to->has_i ? to->i : -1;
  if (dt != PX__F32 && dt != PX__I64)
    return px__why(why, cap, "only casts to float32 and int64 fold at import (to = %lld)",
                   (long long)dt);
  Onnx__TensorProto *t;
  uint8_t *o;
  PX_CHECK(px__new(g, (int)dt, (int)x->n_dims, x->dims, why, cap, &t, &o));
  const uint8_t *s = px__bytes(x);
  for (size_t i = 0, cnt = px__count(x); i < cnt; i++) {
    int64_t iv = 0;
    float fv = 0;
    if (x->data_type == PX__I64) memcpy(&iv, s + 8 * i, 8);
    else memcpy(&fv, s + 4 * i, 4);
    if (x->data_type == PX__I64 && iv == PX__ONNX_BATCH)
      return px__why(why, cap, "the value depends on the batch size, unknown at import");
    if (x->data_type == PX__F32 && dt == PX__I64 && !(fabsf(fv) < 9.2e18f))
      return px__why(why, cap, "%g is no int64", fv);
    if (dt == PX__F32) fv = x->data_type == PX__I64 ? (float)iv : fv;
    else iv = x->data_type == PX__F32 ? (int64_t)fv : iv;
    if (dt == PX__F32) memcpy(o + 4 * i, &fv, 4);
    else memcpy(o + 8 * i, &iv, 8);
  }
  *out = t;
  return PX_OK;
}

/* ONNX's clamping of one Slice axis of size dim: the start and the count. */
static int64_t px__slice_axis(int64_t dim, int64_t st, int64_t en, int64_t step, int64_t *start) {
  if (st < 0) st += dim;
  if (en < 0 && en != INT64_MIN) en += dim;
  if (step > 0) {
    st = st < 0 ? 0 : st > dim ? dim : st;
    en = en < 0 ? 0 : en > dim ? dim : en;
    *start = st;
    return en > st ? (en - st - 1) / step + 1 : 0;
  }
  st = st < 0 ? -1 : st > dim - 1 ? dim - 1 : st;
  en = en < -1 ? -1 : en > dim - 1 ? dim - 1 : en;
  *start = st;
  return st > en ? (st - en - 1) / -step + 1 : 0;
}

/* Slice (opset 10 and later: starts, ends, axes, steps as inputs; before:
 * attributes) of a constant of rank 1 to 4. */
static px_status_t px__slice(px__onnx_graph_t *g, const Onnx__NodeProto *n,
                             const Onnx__TensorProto *const *in, char *why, size_t cap,
                             const Onnx__TensorProto **out) {
  const Onnx__TensorProto *x = in[0];
  int r = (int)x->n_dims, k = -1;
  int64_t st[4], en[4], ax[4] = {0, 1, 2, 3}, sp[4] = {1, 1, 1, 1};
  int64_t b[4] = {0, 0, 0, 0}, step[4] = {1, 1, 1, 1}, dims[4], src[4] = {1, 1, 1, 1};
  if (n->n_input >= 3) {
    k = in[1] && in[2] ? px__onnx_ints(in[1], st, 4) : -1;
    if (k < 0 || px__onnx_ints(in[2], en, 4) != k ||
        (n->n_input > 3 && in[3] && px__onnx_ints(in[3], ax, 4) != k) ||
        (n->n_input > 4 && in[4] && px__onnx_ints(in[4], sp, 4) != k))
      k = -1;
  } else {
    const Onnx__AttributeProto *s = px__attr(n, "starts"), *e = px__attr(n, "ends");
    const Onnx__AttributeProto *a = px__attr(n, "axes");
    if (s && e && s->n_ints == e->n_ints && s->n_ints <= 4 && (!a || a->n_ints == s->n_ints)) {
      k = (int)s->n_ints;
      memcpy(st, s->ints, (size_t)k * sizeof *st);
      memcpy(en, e->ints, (size_t)k * sizeof *en);
      if (a) memcpy(ax, a->ints, (size_t)k * sizeof *ax);
    }
  }
  if (k < 0 || r < 1)
    return px__why(why, cap, "only constant int64 starts, ends, axes and steps (at most 4) fold");
  memcpy(dims, x->dims, (size_t)r * sizeof *dims);
  for (int i = 0; i < k; i++) {
    int a = px__axis(ax[i], r);
    /* INT64_MIN: the batch as a start, or an end with a positive step; ONNX's
     * "before the first" as the end of a negative step */
    if (a < 0 || sp[i] == 0 || sp[i] == INT64_MIN || st[i] == PX__ONNX_BATCH ||
        (en[i] == PX__ONNX_BATCH && sp[i] > 0))
      return px__why(why, cap, "axis %lld, its step or its bounds (the batch size, unknown at "
                     "import) are out of range", (long long)ax[i]);
    dims[a] = px__slice_axis(x->dims[a], st[i], en[i], sp[i], &b[a]);
    step[a] = sp[i];
  }
  for (int d = r - 2; d >= 0; d--) src[d] = src[d + 1] * x->dims[d + 1]; /* strides, elements */
  Onnx__TensorProto *t;
  uint8_t *o;
  PX_CHECK(px__new(g, x->data_type, r, dims, why, cap, &t, &o));
  size_t es = px__esize(x), cnt = px__count(t);
  const uint8_t *s = px__bytes(x);
  for (size_t i = 0; i < cnt; i++, o += es) { /* i's index, last axis fastest */
    size_t rest = i, off = 0;
    for (int d = r - 1; d >= 0; d--) {
      int64_t j = (int64_t)(rest % (size_t)dims[d]);
      rest /= (size_t)dims[d];
      off += (size_t)(b[d] + j * step[d]) * (size_t)src[d];
    }
    memcpy(o, s + off * es, es);
  }
  *out = t;
  return PX_OK;
}

/* ConstantOfShape: shape from a constant int64 1-D, filled by 'value'
 * (one float32 or int64; float 0 by default). */
static px_status_t px__const_of_shape(px__onnx_graph_t *g, const Onnx__NodeProto *n,
                                      const Onnx__TensorProto *x, char *why, size_t cap,
                                      const Onnx__TensorProto **out) {
  int64_t dims[4];
  int r = px__onnx_ints(x, dims, 4);
  const Onnx__AttributeProto *va = px__attr(n, "value");
  const Onnx__TensorProto *v = va ? va->t : NULL;
  if (r < 0 || x->n_dims != 1)
    return px__why(why, cap, "the shape must be a constant int64 vector of at most 4");
  for (int d = 0; d < r; d++)
    if (dims[d] == PX__ONNX_BATCH)
      return px__why(why, cap, "the shape depends on the batch size, unknown at import");
  if (v && (!px__esize(v) || px__count(v) != 1 || v->n_external_data ||
            (v->has_raw_data ? v->raw_data.len != px__esize(v)
                             : (v->data_type == PX__F32 ? v->n_float_data : v->n_int64_data) != 1)))
    return px__why(why, cap, "the value must be one float32 or int64");
  Onnx__TensorProto *t;
  uint8_t *o;
  PX_CHECK(px__new(g, v ? v->data_type : PX__F32, r, dims, why, cap, &t, &o));
  size_t es = v ? px__esize(v) : 4;
  for (size_t i = 0, cnt = px__count(t); v && i < cnt; i++) memcpy(o + i * es, px__bytes(v), es);
  *out = t;
  return PX_OK;
}

/* One element of Add, Sub, Mul or Div (op's first letter; Div of int64s
 * truncates, as ONNX's). 0 when it does not fold (the batch, a division by
 * zero, an overflow). */
static int px__arith1(char op, int dt, const uint8_t *a, const uint8_t *b, uint8_t *o) {
  if (dt == PX__F32) {
    float x, y, r;
    memcpy(&x, a, 4);
    memcpy(&y, b, 4);
    r = op == 'A' ? x + y : op == 'S' ? x - y : op == 'M' ? x * y : x / y;
    memcpy(o, &r, 4);
    return 1;
  }
  int64_t x, y, r;
  memcpy(&x, a, 8);
  memcpy(&y, b, 8);
  if (x == PX__ONNX_BATCH || y == PX__ONNX_BATCH || (op == 'D' && y == 0)) return 0;
  if (op == 'A' ? __builtin_add_overflow(x, y, &r)
      : op == 'S' ? __builtin_sub_overflow(x, y, &r)
      : op == 'M' ? __builtin_mul_overflow(x, y, &r) : (r = x / y, 0))
    return 0;
  memcpy(o, &r, 8);
  return 1;
}

/* Add, Sub, Mul, Div of two constants of one type: the same shape, or
 * either one element (shape arithmetic: channels // groups). */
static px_status_t px__arith(px__onnx_graph_t *g, const Onnx__NodeProto *n,
                             const Onnx__TensorProto *const *in, char *why, size_t cap,
                             const Onnx__TensorProto **out) {
  const Onnx__TensorProto *a = in[0], *b = in[1];
  size_t na = px__count(a), nb = px__count(b);
  int same = a->n_dims == b->n_dims;
  for (size_t d = 0; same && d < a->n_dims; d++) same = a->dims[d] == b->dims[d];
  if (a->data_type != b->data_type || !(same || na == 1 || nb == 1))
    return px__why(why, cap, "only constants of one type, of one shape or one a single value, "
                   "fold");
  const Onnx__TensorProto *big = nb == 1 ? a : b;
  Onnx__TensorProto *t;
  uint8_t *o;
  PX_CHECK(px__new(g, a->data_type, (int)big->n_dims, big->dims, why, cap, &t, &o));
  size_t es = px__esize(a), cnt = px__count(t);
  for (size_t i = 0; i < cnt; i++)
    if (!px__arith1(n->op_type[0], a->data_type, px__bytes(a) + (na == 1 ? 0 : i) * es,
                    px__bytes(b) + (nb == 1 ? 0 : i) * es, o + i * es))
      return px__why(why, cap, "element %zu does not fold (the batch size, unknown at import, "
                     "a division by zero or an overflow)", i);
  *out = t;
  return PX_OK;
}

px_status_t px__onnx_fold_dims(px__onnx_graph_t *g, const int64_t *dims, int count, char *why,
                               size_t cap, const Onnx__TensorProto **out) {
  Onnx__TensorProto *t = NULL;
  uint8_t *o = NULL;
  int64_t len = count;
  PX_CHECK(px__new(g, PX__I64, 1, &len, why, cap, &t, &o));
  memcpy(o, dims, (size_t)count * sizeof *dims);
  *out = t;
  return PX_OK;
}

px_status_t px__onnx_fold(px__onnx_graph_t *g, const Onnx__NodeProto *n,
                          const Onnx__TensorProto *const *in, char *why, size_t cap,
                          const Onnx__TensorProto **out) {
  const char *op = n->op_type;
  *out = NULL;
  if (n->n_input < 1 || !in[0]) return px__why(why, cap, "the data input is missing");
  for (size_t i = 0; i < n->n_input; i++)
    if (in[i] && !px__esize(in[i]))
      return px__why(why, cap, "input %zu is neither float32 nor int64", i);
  if (!strcmp(op, "Unsqueeze") || !strcmp(op, "Squeeze"))
    return px__squeeze(g, n, in, op[0] == 'U', why, cap, out);
  if (!strcmp(op, "Gather") && n->n_input == 2 && in[1]) return px__gather(g, n, in, why, cap, out);
  if (!strcmp(op, "Concat")) return px__concat(g, n, in, why, cap, out);
  if (!strcmp(op, "Cast")) return px__cast(g, n, in[0], why, cap, out);
  if (!strcmp(op, "Slice")) return px__slice(g, n, in, why, cap, out);
  if (!strcmp(op, "ConstantOfShape")) return px__const_of_shape(g, n, in[0], why, cap, out);
  if ((!strcmp(op, "Add") || !strcmp(op, "Sub") || !strcmp(op, "Mul") || !strcmp(op, "Div")) &&
      n->n_input == 2 && in[1])
    return px__arith(g, n, in, why, cap, out);
  return px__why(why, cap, "%s of these inputs does not fold at import", op);
}
