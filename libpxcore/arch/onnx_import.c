/* ONNX import: a CNN exported by PyTorch (or any tool writing opset 11-20)
 * lowered onto the model builder's layers, so that an imported network
 * trains, prunes, packs, checkpoints and exports through the same code as
 * the built-in ResNets.
 *
 * The file is untrusted. It is read whole (at most PX__ONNX_MAX_BYTES, and
 * with what unpacking it allocates, its initializers used or not, at most
 * the import's memory bound:
 * PX_ONNX_MAX_BYTES in the environment, PX__ONNX_IMPORT_BYTES by default),
 * unpacked with the protobuf-c code generated from Debian's onnx.proto (the
 * export's), and walked once in node order: every named tensor goes into an
 * open-addressing table (at most PX__ONNX_MAX_VALUES), every node checks its
 * operands' shapes against the table and adds its outputs, so the whole
 * check is linear in the file. A node that cannot be taken is refused with
 * the file, the node's name and its operator.
 *
 * What is taken today (the layer set of the built-in models and the graph
 * operators of nn/px_graph_ops.h): Conv (bias optional, groups dividing the
 * channels, so grouped and depthwise; any window: kernel (kernel_shape, when
 * given, the weight's), strides, dilations, pads or auto_pad (px__window)),
 * BatchNormalization
 * (epsilon 1e-12 to 0.1, any momentum), Relu (fused into a
 * BatchNormalization or an Add right before it whose output nothing else
 * reads, as the built-in models fuse it; otherwise a layer of its own),
 * LeakyRelu, Clip(0, 6) (ReLU6), Sigmoid, HardSigmoid (beta 0.5), HardSwish,
 * Tanh, Gelu (exact), PyTorch's SiLU and opset-13 Hardswish (Mul(x,
 * Sigmoid(x)), Mul(x, HardSigmoid(x)): one layer) and its exact GELU (Div by
 * sqrt 2, Erf, Add 1, Mul x, Mul 0.5: one layer), Mul, Add, Sub and Div of an
 * activation and a scalar constant, Add of two activations, Mul of a
 * map and a per-channel gate (squeeze-and-excitation), Concat on channels,
 * MaxPool and AveragePool (any window, ceil_mode, count_include_pad; a
 * zero Pad of H and W, with the Constant holding its sizes, folds into the
 * Conv or AveragePool after it: F.pad, and PyTorch's export of
 * count_include_pad),
 * GlobalAveragePool and ReduceMean over H and W (x.mean((2, 3))), Flatten,
 * Reshape, Squeeze and Unsqueeze that move no data ([N, C, 1, 1], [N, C, 1]
 * and [N, C] into one another), a Concat of one map (that map), the shape
 * subgraphs exporters write (Shape, Gather, Unsqueeze, Concat, Cast, Slice,
 * ConstantOfShape, Add, Sub, Mul, Div of shapes and constants), folded at
 * import into constants
 * (arch/onnx_shape.c: x.view(x.size(0), -1) is a Reshape by [N, -1]),
 * and Gemm or MatMul (+ Add of its bias) on the flattened features: the
 * classifier, or a chain of them with activations between (mobilenet_v3's
 * head), the last giving the logits; Dropout and Identity pass their input
 * through (an Identity of an initializer is that initializer: PyTorch's
 * exporter writes those for equal-valued BN parameters). ConvNeXt: a
 * Transpose of a map to NHWC and back moves no data (the value is marked
 * the NHWC view of its layer's NCHW output), LayerNormalization on its last
 * axis (or opset 13's ReduceMean, Sub, Pow, ReduceMean, Add, Sqrt, Div, Mul,
 * Add) is an LN layer over channels, a MatMul of the view by a Linear's
 * weight (+ Add of its bias) a 1 x 1 conv with bias, and a Mul by a [C, 1,
 * 1] initializer (layer scale) a depthwise 1 x 1 conv. */
#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include <openssl/evp.h>

#include "arch/px_layer_defs.h"
#include "arch/px_onnx_fold.h"
#include "arch/px_onnx_int.h"
#include "onnx.pb-c.h"
#include "prunex/arch.h"
#include "px_check.h"

/* PART: a step of PyTorch's exact GELU, x * (Erf(x / sqrt 2) + 1) * 0.5,
 * which becomes one GELU layer once its last Mul is read (see px__gelu_step). */
/* LNP: a step of a LayerNorm written out (opset 13's ReduceMean, Sub, Pow,
 * ReduceMean, Add eps, Sqrt, Div), which becomes one LN layer at its Div
 * (see px__ln_step). */
typedef enum { PX__V_FREE, PX__V_CONST, PX__V_ACT, PX__V_PART, PX__V_LNP } px__vkind_t;

typedef struct {
  const char *name;           /* points into the proto */
  px__vkind_t kind;
  const Onnx__TensorProto *t; /* CONST */
  int layer;                  /* ACT: producing layer, -1 the graph input */
  int c, h, w;                /* ACT: [N, c, h, w]; flat: c features, h = w = 0 */
  int uses;                   /* nodes reading it (and 1 for a graph output) */
  int pad;                    /* ACT: the zero padding a Pad added (top, left, bottom, right,
                                 a byte each from the low one: px__pads), for the Conv or
                                 AveragePool reading it; 0 none */
  int part;                   /* PART: 1 x / sqrt 2, 2 its Erf, 3 that + 1 (layer: x's), 4 x
                                 times that (layer: the GELU's, which the * 0.5 gives) */
  int sq;                     /* ACT: 1 for [N, c, 1] (a c x 1 x 1 map with one unit axis
                                 squeezed: only Squeeze, Unsqueeze, Reshape, Flatten read it) */
  int perm;                   /* ACT, PART, LNP: 1 for the NHWC view [N, h, w, c] of the layer's
                                 NCHW output (a Transpose(0, 2, 3, 1) that moves no data: only
                                 element-wise nodes, LayerNorm, MatMul and Transpose read it) */
  int tr;                     /* CONST: the transpose of the 2-D t (a Transpose(1, 0) of a
                                 Linear's weight: only a MatMul reads it) */
  float eps;                  /* LNP: the epsilon added (steps 5 and 6) */
  int flat;                   /* ACT: 1 for a C x H x W map (H * W > 1) flattened to [N, c]
                                 (c = C * H * W): only a Gemm, MatMul, activations, Dropout and
                                 Identity read it (the model keeps the map: an FC reads it whole) */
  int shuf;                   /* ACT: a channel shuffle's 5-D view of the layer's [N, c, h, w]
                                 output: g > 1 for [N, g, c / g, h, w] (only a Transpose (0, 2,
                                 1, 3, 4) reads it), -g for that transposed (only the Reshape
                                 back to [N, c, h, w] reads it, which makes the SHUFFLE layer) */
} px__value_t;

typedef struct {
  const char *file;
  px__value_t *v;
  int nv, cap;                /* cap: power of two, table of indices into v */
  int *slot;                  /* [cap] value index + 1, 0 empty */
  px__onnx_graph_t *g;
  int cap_layers;
} px__imp_t;

static const char *const px__onnx_ops =
    "Conv, BatchNormalization, Relu, LeakyRelu, Clip (as ReLU6), Sigmoid, HardSigmoid, "
    "HardSwish, Tanh, Gelu, Add, Mul (a per-channel gate; x times Sigmoid(x) or "
    "HardSigmoid(x)), Mul, Add, Sub, Div by a constant, Erf (in PyTorch's exact GELU), "
    "Concat (channels; of one input), MaxPool, AveragePool, GlobalAveragePool, ReduceMean "
    "(over H and W), Flatten, Reshape, Squeeze, Unsqueeze (moving no data), Gemm, MatMul (the "
    "classifier; a Linear on an NHWC view), Transpose (to NHWC and back; of a 2-D weight), "
    "LayerNormalization (and its steps Pow, Sqrt), Mul by a per-channel constant (layer "
    "scale), Dropout, Identity, Constant, Pad (before a Conv or an AveragePool), and on "
    "shapes and "
    "constants: Shape, Gather, Concat, Unsqueeze, Squeeze, Cast, Slice, ConstantOfShape, Add, "
    "Sub, Mul, Div; the channel shuffle (Reshape to [N, g, C/g, H, W], Transpose (0, 2, 1, 3, "
    "4), Reshape back), Split and Slice of a map's channels";

/* ---- the name table ----------------------------------------------------------- */

static uint64_t px__hash(const char *s) {
  uint64_t h = 1469598103934665603ull;
  for (; *s; s++) h = (h ^ (uint8_t)*s) * 1099511628211ull;
  return h;
}

static px__value_t *px__find(px__imp_t *im, const char *name) {
  if (!name || !name[0]) return NULL;
  for (uint64_t i = px__hash(name) & (uint64_t)(im->cap - 1);; i = (i + 1) & (uint64_t)(im->cap - 1)) {
    int s = im->slot[i];
    if (!s) return NULL;
    if (!strcmp(im->v[s - 1].name, name)) return &im->v[s - 1];
  }
}

static px_status_t px__define(px__imp_t *im, const char *name, px__value_t **out) {
  if (!name || !name[0] || strlen(name) > PX__ONNX_MAX_NAME)
    return px_set_error(PX_ERR_INVALID, "%s: a tensor name is empty or longer than %d bytes",
                        im->file, PX__ONNX_MAX_NAME);
  if (px__find(im, name))
    return px_set_error(PX_ERR_INVALID, "%s: tensor '%s' is defined twice", im->file, name);
  if (im->nv >= PX__ONNX_MAX_VALUES)
    return px_set_error(PX_ERR_INVALID, "%s: more than %d named tensors", im->file,
                        PX__ONNX_MAX_VALUES);
  uint64_t i = px__hash(name) & (uint64_t)(im->cap - 1);
  while (im->slot[i]) i = (i + 1) & (uint64_t)(im->cap - 1);
  im->slot[i] = im->nv + 1;
  px__value_t *v = &im->v[im->nv++];
  memset(v, 0, sizeof *v);
  v->name = name;
  *out = v;
  return PX_OK;
}

/* ---- helpers --------------------------------------------------------------------- */

#define PX__NODE_FAIL(im, n, ...) px__node_fail(im, n, __VA_ARGS__)

static px_status_t px__node_fail(px__imp_t *im, const Onnx__NodeProto *n, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
static px_status_t px__node_fail(px__imp_t *im, const Onnx__NodeProto *n, const char *fmt, ...) {
  char why[320];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(why, sizeof why, fmt, ap);
  va_end(ap);
  return px_set_error(PX_ERR_INVALID, "%s: node '%s' (%s): %s", im->file,
                      n->name && n->name[0] ? n->name : "(unnamed)",
                      n->op_type ? n->op_type : "?", why);
}

static const Onnx__AttributeProto *px__attr(const Onnx__NodeProto *n, const char *name) {
  for (size_t i = 0; i < n->n_attribute; i++)
    if (n->attribute[i]->name && !strcmp(n->attribute[i]->name, name)) return n->attribute[i];
  return NULL;
}

static int64_t px__attr_i(const Onnx__NodeProto *n, const char *name, int64_t def) {
  const Onnx__AttributeProto *a = px__attr(n, name);
  return a && a->has_i ? a->i : def;
}

static float px__attr_f(const Onnx__NodeProto *n, const char *name, float def) {
  const Onnx__AttributeProto *a = px__attr(n, name);
  return a && a->has_f ? a->f : def;
}

/* 1 if attribute name is absent or every one of its ints equals v. */
static int px__ints_all(const Onnx__NodeProto *n, const char *name, int64_t v) {
  const Onnx__AttributeProto *a = px__attr(n, name);
  if (!a) return 1;
  for (size_t i = 0; i < a->n_ints; i++)
    if (a->ints[i] != v) return 0;
  return 1;
}

/* An attribute's ints as "[a, b, ...]" (at most 8 of them) into buf. */
static const char *px__ints_text(const Onnx__AttributeProto *a, char *buf, size_t cap) {
  snprintf(buf, cap, "[");
  for (size_t i = 0; i < a->n_ints && i < 8; i++)
    snprintf(buf + strlen(buf), cap - strlen(buf), "%s%lld", i ? ", " : "",
             (long long)a->ints[i]);
  snprintf(buf + strlen(buf), cap - strlen(buf), "%s]", a->n_ints > 8 ? ", ..." : "");
  return buf;
}

static size_t px__numel(const Onnx__TensorProto *t) {
  size_t n = 1;
  for (size_t i = 0; i < t->n_dims; i++) n *= (size_t)t->dims[i];
  return n;
}

/* The operand i of n: a value defined before n (ONNX orders nodes
 * topologically), or NULL for a missing optional one. */
static px_status_t px__in(px__imp_t *im, const Onnx__NodeProto *n, size_t i, int required,
                          px__value_t **out) {
  *out = NULL;
  if (i >= n->n_input || !n->input[i][0]) {
    if (required) return PX__NODE_FAIL(im, n, "input %zu is missing", i);
    return PX_OK;
  }
  px__value_t *v = px__find(im, n->input[i]);
  if (!v || v->kind == PX__V_FREE) return PX__NODE_FAIL(im, n, "input '%s' is not defined before the node", n->input[i]);
  *out = v;
  return PX_OK;
}

static px_status_t px__gelu_div(px__imp_t *im, const Onnx__NodeProto *n, px__value_t *v);

/* Whether an operator may read an NHWC view (px__value_t.perm): the
 * element-wise ones, and those that know the view (px__op_transpose,
 * px__op_ln, the LayerNorm steps, px__op_matmul). */
static int px__perm_reader(const char *op) {
  static const char *const ok[] = {"Relu", "LeakyRelu", "Clip", "Sigmoid", "HardSigmoid",
                                   "HardSwish", "Tanh", "Gelu", "Div", "Mul", "Add", "Sub",
                                   "Transpose", "LayerNormalization", "MatMul"};
  for (size_t i = 0; i < sizeof ok / sizeof ok[0]; i++)
    if (!strcmp(op, ok[i])) return 1;
  return 0;
}

/* Whether an operator may read a flattened map (px__value_t.flat): the
 * classifier's and the activations and scalar arithmetic between its
 * layers. */
static int px__flat_reader(const char *op) {
  static const char *const ok[] = {"Gemm", "MatMul", "Relu", "LeakyRelu", "Clip", "Sigmoid",
                                   "HardSigmoid", "HardSwish", "Tanh", "Gelu", "Div", "Mul",
                                   "Add", "Sub", "Shape"};
  for (size_t i = 0; i < sizeof ok / sizeof ok[0]; i++)
    if (!strcmp(op, ok[i])) return 1;
  return 0;
}

static px_status_t px__act_in(px__imp_t *im, const Onnx__NodeProto *n, size_t i, int spatial,
                              px__value_t **out) {
  PX_CHECK(px__in(im, n, i, 1, out));
  if ((*out)->kind == PX__V_PART && (*out)->part == 1) PX_CHECK(px__gelu_div(im, n, *out));
  if ((*out)->kind == PX__V_PART)
    return PX__NODE_FAIL(im, n, "input '%s' is a step of an exact GELU (x * (Erf(x / sqrt 2) + "
                                "1) * 0.5) that the node does not continue", n->input[i]);
  if ((*out)->kind == PX__V_LNP)
    return PX__NODE_FAIL(im, n, "input '%s' is a step of a LayerNorm (ReduceMean, Sub, Pow, "
                                "ReduceMean, Add, Sqrt, Div) that the node does not continue",
                         n->input[i]);
  if ((*out)->kind != PX__V_ACT)
    return PX__NODE_FAIL(im, n, "input '%s' must be an activation, not a constant", n->input[i]);
  if ((*out)->perm && !px__perm_reader(n->op_type))
    return PX__NODE_FAIL(im, n, "input '%s' is the NHWC view of a map (after a Transpose to "
                                "[N, H, W, C]): only element-wise nodes, LayerNormalization, "
                                "MatMul and a Transpose back read it", n->input[i]);
  if ((*out)->shuf)
    return PX__NODE_FAIL(im, n, "input '%s' is a channel shuffle's 5-D view of a map: only a "
                                "Transpose (0, 2, 1, 3, 4) and the Reshape back to [N, C, H, W] "
                                "may read it", n->input[i]);
  if ((*out)->flat && !px__flat_reader(n->op_type))
    return PX__NODE_FAIL(im, n, "input '%s' is a map flattened to [N, %d] for the classifier: "
                                "only a Gemm, MatMul or an activation may read it", n->input[i],
                         (*out)->c);
  if ((*out)->sq)
    return PX__NODE_FAIL(im, n, "input '%s' is 3-D [N, %d, 1]: only a Squeeze, Unsqueeze, "
                                "Reshape or Flatten may read it", n->input[i], (*out)->c);
  if (spatial && (*out)->h == 0)
    return PX__NODE_FAIL(im, n, "input '%s' must be 4-D [N, C, H, W]", n->input[i]);
  if ((*out)->pad && strcmp(n->op_type, "AveragePool") && strcmp(n->op_type, "Conv"))
    return PX__NODE_FAIL(im, n, "input '%s' is padded by a Pad: only a Conv or an AveragePool "
                                "may read a padded activation", n->input[i]);
  return PX_OK;
}

/* A float constant of the given shape (ndims dims; -1 matches any). */
static px_status_t px__const_in(px__imp_t *im, const Onnx__NodeProto *n, size_t i, int ndims,
                                const int64_t *dims, px__onnx_init_t *out) {
  px__value_t *v;
  PX_CHECK(px__in(im, n, i, 1, &v));
  if (v->kind != PX__V_CONST)
    return PX__NODE_FAIL(im, n, "input '%s' must be an initializer (a trained weight)",
                         n->input[i]);
  const Onnx__TensorProto *t = v->t;
  if (v->tr)
    return PX__NODE_FAIL(im, n, "input '%s' is a transposed initializer: only a MatMul may "
                                "read it", n->input[i]);
  if (t->data_type != ONNX__TENSOR_PROTO__DATA_TYPE__FLOAT)
    return PX__NODE_FAIL(im, n, "initializer '%s' is not float32", n->input[i]);
  int ok = (int)t->n_dims == ndims;
  for (int d = 0; ok && d < ndims; d++) ok = dims[d] < 0 || t->dims[d] == dims[d];
  if (!ok) {
    char want[96] = "", got[96] = "";
    for (int d = 0; d < ndims; d++)
      snprintf(want + strlen(want), sizeof want - strlen(want), "%s%lld", d ? "x" : "",
               (long long)dims[d]);
    for (size_t d = 0; d < t->n_dims && d < 6; d++)
      snprintf(got + strlen(got), sizeof got - strlen(got), "%s%lld", d ? "x" : "",
               (long long)t->dims[d]);
    return PX__NODE_FAIL(im, n, "initializer '%s' has shape [%s], expected [%s]", n->input[i],
                         got, want);
  }
  out->n = px__numel(t);
  out->bytes = t->has_raw_data ? t->raw_data.data : (const uint8_t *)t->float_data;
  return PX_OK;
}

static px_status_t px__new_layer(px__imp_t *im, const Onnx__NodeProto *n, px__onnx_kind_t kind,
                                 px__onnx_layer_t **out) {
  px__onnx_graph_t *g = im->g;
  if (g->nlayers == im->cap_layers) {
    int cap = im->cap_layers ? 2 * im->cap_layers : 64;
    void *p = px_realloc(g->layers, (size_t)cap * sizeof *g->layers, "onnx.layers");
    if (!p) return PX_ERR_NOMEM;
    g->layers = p;
    im->cap_layers = cap;
  }
  px__onnx_layer_t *L = &g->layers[g->nlayers++];
  memset(L, 0, sizeof *L);
  L->kind = kind;
  L->in = L->in2 = -1;
  L->node = n->name ? n->name : "";
  L->op = n->op_type;
  L->groups = 1;
  *out = L;
  return PX_OK;
}

/* The output value of n (its first output), an activation of layer. */
static px_status_t px__out(px__imp_t *im, const Onnx__NodeProto *n, int layer, int c, int h,
                           int w) {
  if (n->n_output < 1) return PX__NODE_FAIL(im, n, "the node has no output");
  px__value_t *v = px__find(im, n->output[0]);
  *v = (px__value_t){v->name, PX__V_ACT, NULL, layer, c, h, w, v->uses, 0, 0, 0, 0, 0, 0, 0, 0};
  return PX_OK;
}

/* Parameter names from the weight's initializer name: "layer1.0.conv1.weight"
 * gives "layer1.0.conv1" (what PyTorch's state_dict calls the module). */
static void px__prefix(px__onnx_layer_t *L, const char *wname, int k) {
  size_t n = strlen(wname);
  if (n > 7 && !strcmp(wname + n - 7, ".weight")) n -= 7;
  if (n == 0 || n > PX__ONNX_MAX_NAME) {
    snprintf(L->prefix, sizeof L->prefix, "node%d", k);
    return;
  }
  memcpy(L->prefix, wname, n);
  L->prefix[n] = '\0';
}

/* ---- operators ----------------------------------------------------------------------- */

static px_status_t px__op_fold(px__imp_t *im, const Onnx__NodeProto *n);
static px_status_t px__op_pass(px__imp_t *im, const Onnx__NodeProto *n);
static px_status_t px__ln_step(px__imp_t *im, const Onnx__NodeProto *n, int *done);
static px_status_t px__ln_affine(px__imp_t *im, const Onnx__NodeProto *n, int *done);
static px_status_t px__layer_scale(px__imp_t *im, const Onnx__NodeProto *n, int *done);
static px_status_t px__matmul_nhwc(px__imp_t *im, const Onnx__NodeProto *n, px__value_t *x);
static px_status_t px__shuffle_reshape(px__imp_t *im, const Onnx__NodeProto *n, int *done);
static px_status_t px__shuffle_transpose(px__imp_t *im, const Onnx__NodeProto *n, int *done);

/* Whether n has two inputs, both constants (Add, Sub, Mul, Div of shapes:
 * folded). */
static int px__both_const(px__imp_t *im, const Onnx__NodeProto *n) {
  px__value_t *a, *b;
  return n->n_input == 2 && (a = px__find(im, n->input[0])) && (b = px__find(im, n->input[1])) &&
         a->kind == PX__V_CONST && b->kind == PX__V_CONST;
}

/* ---- windows (Conv, MaxPool, AveragePool) --------------------------------------------- */

/* Attribute name's two ints into v (both def when absent); 0 when it is not
 * two ints in [lo, hi]. */
static int px__pair(const Onnx__NodeProto *n, const char *name, int64_t def, int64_t lo,
                    int64_t hi, int64_t v[2]) {
  const Onnx__AttributeProto *a = px__attr(n, name);
  v[0] = v[1] = def;
  if (!a) return 1;
  if (a->n_ints != 2) return 0;
  v[0] = a->ints[0];
  v[1] = a->ints[1];
  return v[0] >= lo && v[0] <= hi && v[1] >= lo && v[1] <= hi;
}

/* n's auto_pad: 0 NOTSET (or none), 1 VALID, 2 SAME_UPPER, 3 SAME_LOWER, -1 another. */
static int px__auto_pad(const Onnx__NodeProto *n) {
  static const char *const names[] = {"NOTSET", "VALID", "SAME_UPPER", "SAME_LOWER"};
  const Onnx__AttributeProto *a = px__attr(n, "auto_pad");
  if (!a || !a->has_s || !a->s.len) return 0;
  for (int i = 0; i < 4; i++)
    if (a->s.len == strlen(names[i]) && !memcmp(a->s.data, names[i], a->s.len)) return i;
  return -1;
}

/* SAME_UPPER / SAME_LOWER (lower) on one axis: the padding that makes the
 * output ceil(in / s), its odd unit at the end (UPPER) or the start. */
static void px__same(int64_t in, int64_t k, int64_t s, int64_t d, int lower, int *p0, int *p1) {
  const int64_t out = (in + s - 1) / s;
  int64_t total = (out - 1) * s + d * (k - 1) + 1 - in;
  if (total < 0) total = 0;
  *p0 = (int)(lower ? (total + 1) / 2 : total / 2);
  *p1 = (int)(total - *p0);
}

/* The window of Conv or pool n (kernel kh x kw) on x: strides, dilations,
 * pads or auto_pad (resolved to pads), ceil_mode, and the zeros of a Pad
 * before it added to the pads; *oh, *ow its output size. Refused naming
 * the attribute. */
static px_status_t px__window(px__imp_t *im, const Onnx__NodeProto *n, const px__value_t *x,
                              int64_t kh, int64_t kw, px_window_t *w, int *oh, int *ow) {
  int64_t s[2], d[2], p[4] = {0, 0, 0, 0};
  char v[160];
  const Onnx__AttributeProto *pa = px__attr(n, "pads");
  if (!px__pair(n, "strides", 1, 1, 64, s) || !px__pair(n, "dilations", 1, 1, 64, d))
    return PX__NODE_FAIL(im, n, "strides and dilations: two of 1 to 64 each are supported");
  if (pa && pa->n_ints != 4)
    return PX__NODE_FAIL(im, n, "pads %s: four (top, left, bottom, right) are supported",
                         px__ints_text(pa, v, sizeof v));
  for (int i = 0; pa && i < 4; i++) {
    p[i] = pa->ints[i];
    if (p[i] < 0 || p[i] > 64)
      return PX__NODE_FAIL(im, n, "pads %s: 0 to 64 on a side are supported",
                           px__ints_text(pa, v, sizeof v));
  }
  const int ap = px__auto_pad(n);
  const int64_t ceil = px__attr_i(n, "ceil_mode", 0);
  if (ap < 0 || (ap > 0 && (p[0] || p[1] || p[2] || p[3])))
    return PX__NODE_FAIL(im, n, "auto_pad must be NOTSET, VALID, SAME_UPPER or SAME_LOWER, and "
                                "NOTSET when pads are given");
  if (ceil != 0 && ceil != 1) return PX__NODE_FAIL(im, n, "ceil_mode must be 0 or 1");
  *w = (px_window_t){(int)kh, (int)kw, (int)s[0], (int)s[1], (int)p[0], (int)p[1], (int)p[2],
                     (int)p[3], (int)d[0], (int)d[1], (int)ceil, 0};
  if (ap >= 2) {
    px__same(x->h, kh, s[0], d[0], ap == 3, &w->pad_t, &w->pad_b);
    px__same(x->w, kw, s[1], d[1], ap == 3, &w->pad_l, &w->pad_r);
  }
  if (x->pad) { /* a Pad's zeros (px__op_pad) */
    w->pad_t += x->pad & 255;
    w->pad_l += x->pad >> 8 & 255;
    w->pad_b += x->pad >> 16 & 255;
    w->pad_r += x->pad >> 24 & 255;
  }
  const px__axis_t ah = {x->h, kh, s[0], w->pad_t, w->pad_b, d[0], (int)ceil};
  const px__axis_t aw = {x->w, kw, s[1], w->pad_l, w->pad_r, d[1], (int)ceil};
  const int64_t h = px__axis_out(&ah), wd = px__axis_out(&aw);
  if (h < 1 || wd < 1) return PX__NODE_FAIL(im, n, "the output is empty");
  *oh = (int)h;
  *ow = (int)wd;
  return PX_OK;
}

static px_status_t px__op_conv(px__imp_t *im, const Onnx__NodeProto *n) {
  px__value_t *x;
  PX_CHECK(px__act_in(im, n, 0, 1, &x));
  int64_t grp = px__attr_i(n, "group", 1);
  if (grp < 1 || grp > x->c || x->c % grp != 0)
    return PX__NODE_FAIL(im, n, "group = %lld does not divide the %d input channels",
                         (long long)grp, x->c);
  px__value_t *wv;
  PX_CHECK(px__in(im, n, 1, 1, &wv));
  if (wv->kind != PX__V_CONST || wv->t->n_dims != 4)
    return PX__NODE_FAIL(im, n, "the weight '%s' must be a 4-D initializer", n->input[1]);
  int64_t co = wv->t->dims[0], kh = wv->t->dims[2], kw = wv->t->dims[3];
  if (kh < 1 || kh > 32 || kw < 1 || kw > 32 || co < 1 || co > 65536)
    return PX__NODE_FAIL(im, n, "a %lldx%lld kernel of %lld filters: kernels of 1 to 32 a side "
                                "and 1 to 65536 filters are supported", (long long)kh,
                         (long long)kw, (long long)co);
  px_window_t win;
  int oh, ow;
  PX_CHECK(px__window(im, n, x, kh, kw, &win, &oh, &ow));
  /* The layer takes its window from the weight; a kernel_shape that says
   * otherwise (or is out of range) describes another network: refused. */
  const Onnx__AttributeProto *ks = px__attr(n, "kernel_shape");
  if (ks && (ks->n_ints != 2 || ks->ints[0] != kh || ks->ints[1] != kw)) {
    char v[160];
    return PX__NODE_FAIL(im, n, "kernel_shape %s is not the %lldx%lld window of the weight '%s'",
                         px__ints_text(ks, v, sizeof v), (long long)kh, (long long)kw,
                         n->input[1]);
  }
  if (co % grp != 0)
    return PX__NODE_FAIL(im, n, "group = %lld does not divide the %lld filters", (long long)grp,
                         (long long)co);
  int64_t dims[4] = {co, x->c / grp, kh, kw}, bd[1] = {co};
  px__onnx_layer_t *L;
  PX_CHECK(px__new_layer(im, n, PX__OL_CONV, &L));
  PX_CHECK(px__const_in(im, n, 1, 4, dims, &L->w));
  if (n->n_input > 2 && n->input[2][0]) PX_CHECK(px__const_in(im, n, 2, 1, bd, &L->b));
  L->groups = (int)grp;
  L->in = x->layer;
  L->c_out = (int)co;
  L->win = win;
  px__prefix(L, n->input[1], im->g->nlayers - 1);
  im->g->nconv++;
  return px__out(im, n, im->g->nlayers - 1, (int)co, oh, ow);
}

static px_status_t px__op_bn(px__imp_t *im, const Onnx__NodeProto *n) {
  px__value_t *x;
  PX_CHECK(px__act_in(im, n, 0, 1, &x));
  if (px__attr_i(n, "training_mode", 0) != 0 || n->n_output > 1)
    return PX__NODE_FAIL(im, n, "a training-mode BatchNormalization is not supported: export "
                                "the model in eval mode");
  /* ONNX's momentum is PyTorch's 1 - momentum: PyTorch's own value back
   * (to 1e-6, so that 0.9 gives PyTorch's 0.1f exactly) */
  float eps = px__attr_f(n, "epsilon", 1e-5f), om = px__attr_f(n, "momentum", 0.9f);
  if (!(eps >= 1e-12f && eps <= 0.1f))
    return PX__NODE_FAIL(im, n, "epsilon = %g: 1e-12 to 0.1 is supported", eps);
  if (!(om >= 0.0f && om <= 1.0f))
    return PX__NODE_FAIL(im, n, "momentum = %g: 0 to 1 is supported", om);
  px__onnx_layer_t *L;
  PX_CHECK(px__new_layer(im, n, PX__OL_BN, &L));
  int64_t dims[1] = {x->c};
  PX_CHECK(px__const_in(im, n, 1, 1, dims, &L->w));
  PX_CHECK(px__const_in(im, n, 2, 1, dims, &L->b));
  PX_CHECK(px__const_in(im, n, 3, 1, dims, &L->rm));
  PX_CHECK(px__const_in(im, n, 4, 1, dims, &L->rv));
  L->in = x->layer;
  L->c_out = x->c;
  L->eps = eps;
  L->momentum = (float)(round((1.0 - (double)om) * 1e6) / 1e6);
  px__prefix(L, n->input[1], im->g->nlayers - 1);
  return px__out(im, n, im->g->nlayers - 1, x->c, x->h, x->w);
}

/* A standalone activation layer of the graph operators (nn/px_graph_ops.h)
 * on input i of n. */
static px_status_t px__act_of(px__imp_t *im, const Onnx__NodeProto *n, size_t i, px__act_t a,
                              float alpha) {
  px__value_t *x;
  PX_CHECK(px__act_in(im, n, i, 0, &x)); /* a map, or features [N, F] (between FC layers) */
  px__onnx_layer_t *L;
  PX_CHECK(px__new_layer(im, n, PX__OL_ACT, &L));
  L->in = x->layer;
  L->c_out = x->c;
  L->act = (int)a;
  L->alpha = alpha;
  if (x->layer < 0) return PX__NODE_FAIL(im, n, "an activation of the graph input is not supported");
  const int flat = x->flat;
  PX_CHECK(px__out(im, n, im->g->nlayers - 1, x->c, x->h, x->w));
  px__find(im, n->output[0])->flat = flat;
  return PX_OK;
}

static px_status_t px__act(px__imp_t *im, const Onnx__NodeProto *n, px__act_t a, float alpha) {
  return px__act_of(im, n, 0, a, alpha);
}

static px_status_t px__op_relu(px__imp_t *im, const Onnx__NodeProto *n) {
  px__value_t *x;
  PX_CHECK(px__act_in(im, n, 0, 0, &x));
  px__onnx_layer_t *L = x->layer >= 0 ? &im->g->layers[x->layer] : NULL;
  if (!L || (L->kind != PX__OL_BN && L->kind != PX__OL_ADD) || L->relu || x->uses != 1)
    return px__act(im, n, PX__ACT_RELU, 0.0f); /* nothing to fuse into: a layer of its own */
  L->relu = 1;
  const int flat = x->flat;
  PX_CHECK(px__out(im, n, x->layer, x->c, x->h, x->w));
  px__find(im, n->output[0])->flat = flat;
  return PX_OK;
}

/* A float scalar from an initializer or a Constant (Clip's bounds). */
static int px__scalar(px__imp_t *im, const Onnx__NodeProto *n, size_t i, float *out) {
  px__value_t *v;
  if (px__in(im, n, i, 0, &v) < 0 || !v) return 0;
  const Onnx__TensorProto *t = v->kind == PX__V_CONST ? v->t : NULL;
  if (!t || t->data_type != ONNX__TENSOR_PROTO__DATA_TYPE__FLOAT || px__numel(t) != 1) return 0;
  memcpy(out, t->has_raw_data ? (const void *)t->raw_data.data : (const void *)t->float_data,
         sizeof *out);
  return 1;
}

static px_status_t px__op_leaky(px__imp_t *im, const Onnx__NodeProto *n) {
  float alpha = px__attr_f(n, "alpha", 0.01f);
  if (!(alpha >= 0.0f && alpha < 1.0f))
    return PX__NODE_FAIL(im, n, "alpha = %g: a slope in [0, 1) is supported", alpha);
  return px__act(im, n, PX__ACT_LEAKY, alpha);
}

static px_status_t px__op_sigmoid(px__imp_t *im, const Onnx__NodeProto *n) {
  return px__act(im, n, PX__ACT_SIGMOID, 0.0f);
}

/* Clip(0, 6): ReLU6 (MobileNetV2's activation); bounds from inputs (opset
 * 11 and later) or attributes (older exporters). */
static px_status_t px__op_clip(px__imp_t *im, const Onnx__NodeProto *n) {
  float lo = px__attr_f(n, "min", -INFINITY), hi = px__attr_f(n, "max", INFINITY);
  int ok = 1;
  if (n->n_input > 1 && n->input[1][0]) ok = px__scalar(im, n, 1, &lo);
  if (ok && n->n_input > 2 && n->input[2][0]) ok = px__scalar(im, n, 2, &hi);
  if (!ok || lo != 0.0f || hi != 6.0f)
    return PX__NODE_FAIL(im, n, "only Clip(min 0, max 6) (ReLU6) with constant float bounds is "
                                "supported; this one clips to [%g, %g]", lo, hi);
  return px__act(im, n, PX__ACT_RELU6, 0.0f);
}

static px_status_t px__op_tanh(px__imp_t *im, const Onnx__NodeProto *n) {
  return px__act(im, n, PX__ACT_TANH, 0.0f);
}

/* HardSigmoid max(0, min(1, alpha x + beta)) with beta 0.5 (ONNX's default;
 * PyTorch's Hardsigmoid is alpha 1/6). */
static px_status_t px__op_hardsigmoid(px__imp_t *im, const Onnx__NodeProto *n) {
  float alpha = px__attr_f(n, "alpha", 0.2f), beta = px__attr_f(n, "beta", 0.5f);
  if (beta != 0.5f || !(alpha > 0.0f && alpha <= 100.0f))
    return PX__NODE_FAIL(im, n, "alpha = %g, beta = %g: beta 0.5 and a slope alpha in (0, 100] "
                                "are supported", alpha, beta);
  return px__act(im, n, PX__ACT_HSIGMOID, alpha);
}

/* HardSwish (opset 14): x * HardSigmoid(x) with alpha 1/6. */
static px_status_t px__op_hardswish(px__imp_t *im, const Onnx__NodeProto *n) {
  return px__act(im, n, PX__ACT_HSWISH, 1.0f / 6.0f);
}

/* Gelu (opset 20): the exact form only. */
static px_status_t px__op_gelu(px__imp_t *im, const Onnx__NodeProto *n) {
  const Onnx__AttributeProto *ap = px__attr(n, "approximate");
  if (ap && ap->has_s && !(ap->s.len == 4 && !memcmp(ap->s.data, "none", 4)))
    return PX__NODE_FAIL(im, n, "approximate = '%.*s': only the exact GELU ('none') is supported",
                         (int)(ap->s.len < 16 ? ap->s.len : 16), (const char *)ap->s.data);
  return px__act(im, n, PX__ACT_GELU, 0.0f);
}

/* Mul(x, Sigmoid(x)) or Mul(x, HardSigmoid(x, alpha, 0.5)), in either order, where the
 * sigmoid's output is read by this Mul alone: the sigmoid's layer becomes a
 * SiLU or hard swish (how PyTorch exports SiLU, and Hardswish at opset 13).
 * *done = 0 when n is another Mul. */
static px_status_t px__swish(px__imp_t *im, const Onnx__NodeProto *n, int *done) {
  px__value_t *v[2];
  *done = 0;
  if (n->n_input != 2) return PX_OK;
  PX_CHECK(px__in(im, n, 0, 1, &v[0]));
  PX_CHECK(px__in(im, n, 1, 1, &v[1]));
  for (int i = 0; i < 2; i++) {
    const px__value_t *x = v[i], *s = v[1 - i];
    if (x->kind != PX__V_ACT || s->kind != PX__V_ACT || x->pad || s->layer < 0 ||
        s->uses != 1 || x->c != s->c || x->h != s->h || x->w != s->w)
      continue;
    px__onnx_layer_t *L = &im->g->layers[s->layer];
    if (L->kind != PX__OL_ACT || L->in != x->layer ||
        (L->act != PX__ACT_SIGMOID && L->act != PX__ACT_HSIGMOID))
      continue;
    L->act = L->act == PX__ACT_SIGMOID ? PX__ACT_SILU : PX__ACT_HSWISH; /* the same slope */
    *done = 1;
    return px__out(im, n, s->layer, s->c, s->h, s->w);
  }
  return PX_OK;
}

/* Whether input i of n is a float scalar constant within tol of want. */
static int px__scalar_is(px__imp_t *im, const Onnx__NodeProto *n, size_t i, float want,
                         float tol) {
  float v;
  return px__scalar(im, n, i, &v) && fabsf(v - want) <= tol;
}

/* The output of n as step `part` of a GELU (see px__value_t). */
static px_status_t px__part_out(px__imp_t *im, const Onnx__NodeProto *n, const px__value_t *x,
                                int layer, int part) {
  PX_CHECK(px__out(im, n, layer, x->c, x->h, x->w));
  px__value_t *v = px__find(im, n->output[0]);
  v->kind = PX__V_PART;
  v->part = part;
  return PX_OK;
}

/* PyTorch's exact GELU (opsets below 20): Div(x, sqrt 2) -> Erf -> Add 1
 * -> Mul x -> Mul 0.5, each step's output read by the next alone (any other
 * reader is refused: px__act_in). The steps after the Div: Erf, Add and the
 * two Muls (*done = 0 when n, an Add or Mul, is none of them); the Mul by x
 * makes the GELU layer and the Mul by 0.5 gives its output. */
static px_status_t px__gelu_step(px__imp_t *im, const Onnx__NodeProto *n, int *done) {
  px__value_t *v[2] = {NULL, NULL};
  *done = 0;
  if (n->n_input != 2) return PX_OK;
  PX_CHECK(px__in(im, n, 0, 1, &v[0]));
  PX_CHECK(px__in(im, n, 1, 1, &v[1]));
  for (size_t i = 0; i < 2; i++) {
    const px__value_t *p = v[i], *o = v[1 - i];
    if (p->kind != PX__V_PART || p->part == 1) continue; /* x / sqrt 2 read otherwise: px__act_in */
    *done = 1;
    const int add = !strcmp(n->op_type, "Add");
    if (add && p->part == 2 && px__scalar_is(im, n, 1 - i, 1.0f, 0.0f))
      return px__part_out(im, n, p, p->layer, 3);
    if (!add && p->part == 3 && o->kind == PX__V_ACT && o->layer == p->layer && !o->pad &&
        o->c == p->c && o->h == p->h && o->w == p->w) {
      PX_CHECK(px__act_of(im, n, 1 - i, PX__ACT_GELU, 0.0f));
      return px__part_out(im, n, p, im->g->nlayers - 1, 4);
    }
    if (!add && p->part == 4 && px__scalar_is(im, n, 1 - i, 0.5f, 0.0f))
      return px__out(im, n, p->layer, p->c, p->h, p->w);
    return PX__NODE_FAIL(im, n, "input '%s' is a step of an exact GELU (x * (Erf(x / sqrt 2) + "
                                "1) * 0.5) that the node does not continue", n->input[i]);
  }
  return PX_OK;
}

/* An ACT layer reading the layer that last wrote n's output (a second step
 * of one node). */
static px_status_t px__act_more(px__imp_t *im, const Onnx__NodeProto *n, px__act_t a, float alpha) {
  const px__value_t *v = px__find(im, n->output[0]);
  const int prev = v->layer, c = v->c, h = v->h, w = v->w;
  px__onnx_layer_t *L;
  PX_CHECK(px__new_layer(im, n, PX__OL_ACT, &L));
  L->in = prev;
  L->c_out = c;
  L->act = (int)a;
  L->alpha = alpha;
  return px__out(im, n, im->g->nlayers - 1, c, h, w);
}

/* x / sqrt 2 that a node other than an Erf reads: a SCALE layer after all
 * (v becomes its output). */
static px_status_t px__gelu_div(px__imp_t *im, const Onnx__NodeProto *n, px__value_t *v) {
  px__onnx_layer_t *L;
  const int in = v->layer;
  PX_CHECK(px__new_layer(im, n, PX__OL_ACT, &L));
  L->in = in;
  L->c_out = v->c;
  L->act = PX__ACT_SCALE;
  L->alpha = 0.70710678118654752440f;
  v->kind = PX__V_ACT;
  v->layer = im->g->nlayers - 1;
  v->part = 0;
  return PX_OK;
}

/* Mul, Add, Sub or Div of a 4-D activation x and a float scalar constant c
 * (either order; Div: x / c only): one SCALE or SHIFT layer, two for c - x.
 * *done = 0 when neither input is such a constant. */
static px_status_t px__by_const(px__imp_t *im, const Onnx__NodeProto *n, int *done) {
  float c;
  *done = 0;
  if (n->n_input != 2) return PX_OK;
  const size_t ci = px__scalar(im, n, 1, &c) ? 1 : px__scalar(im, n, 0, &c) ? 0 : 2;
  if (ci == 2) return PX_OK;
  *done = 1;
  const size_t xi = 1 - ci;
  const char *op = n->op_type;
  if (!strcmp(op, "Mul")) return px__act_of(im, n, xi, PX__ACT_SCALE, c);
  if (!strcmp(op, "Add")) return px__act_of(im, n, xi, PX__ACT_SHIFT, c);
  if (!strcmp(op, "Div")) {
    if (ci == 0 || !isfinite(1.0f / c))
      return PX__NODE_FAIL(im, n, "only the division of an activation by a non-zero constant "
                                  "is supported");
    return px__act_of(im, n, xi, PX__ACT_SCALE, 1.0f / c);
  }
  if (ci == 1) return px__act_of(im, n, xi, PX__ACT_SHIFT, -c); /* x - c */
  PX_CHECK(px__act_of(im, n, xi, PX__ACT_SCALE, -1.0f));       /* c - x: -x, then + c */
  return px__act_more(im, n, PX__ACT_SHIFT, c);
}

/* Div(x, sqrt 2): the first step of an exact GELU (px__gelu_step); any
 * other Div by a constant: px__by_const. */
static px_status_t px__op_div(px__imp_t *im, const Onnx__NodeProto *n) {
  if (px__both_const(im, n)) return px__op_fold(im, n);
  px__value_t *x;
  int done;
  PX_CHECK(px__ln_step(im, n, &done));
  if (done) return PX_OK;
  if (n->n_input == 2 && px__scalar_is(im, n, 1, 1.41421356f, 1e-6f)) {
    PX_CHECK(px__act_in(im, n, 0, 1, &x));
    if (x->layer >= 0) return px__part_out(im, n, x, x->layer, 1);
  }
  PX_CHECK(px__by_const(im, n, &done));
  if (done) return PX_OK;
  return PX__NODE_FAIL(im, n, "only the division of a computed activation by a constant is "
                              "supported");
}

static px_status_t px__op_sub(px__imp_t *im, const Onnx__NodeProto *n) {
  if (px__both_const(im, n)) return px__op_fold(im, n);
  int done;
  PX_CHECK(px__ln_step(im, n, &done));
  if (done) return PX_OK;
  PX_CHECK(px__by_const(im, n, &done));
  if (done) return PX_OK;
  return PX__NODE_FAIL(im, n, "only the subtraction of a constant from an activation, or of an "
                              "activation from a constant, is supported");
}

static px_status_t px__op_erf(px__imp_t *im, const Onnx__NodeProto *n) {
  px__value_t *p;
  PX_CHECK(px__in(im, n, 0, 1, &p));
  if (p->kind != PX__V_PART || p->part != 1)
    return PX__NODE_FAIL(im, n, "only the Erf of x / sqrt 2 in an exact GELU "
                                "(x * (Erf(x / sqrt 2) + 1) * 0.5) is supported");
  return px__part_out(im, n, p, p->layer, 2);
}

/* A layer reading a and b, shaped like a (ADD, MUL). */
static px_status_t px__two_in(px__imp_t *im, const Onnx__NodeProto *n, px__onnx_kind_t kind,
                              const px__value_t *a, const px__value_t *b) {
  px__onnx_layer_t *L;
  PX_CHECK(px__new_layer(im, n, kind, &L));
  L->in = a->layer;
  L->in2 = b->layer;
  L->c_out = a->c;
  return px__out(im, n, im->g->nlayers - 1, a->c, a->h, a->w);
}

/* MatMul + Add of a constant [classes]: the classifier's bias (how a
 * MatMul-exported linear layer carries it). */
static px_status_t px__fold_bias(px__imp_t *im, const Onnx__NodeProto *n, int *done) {
  px__value_t *a, *b;
  *done = 0;
  PX_CHECK(px__in(im, n, 0, 1, &a));
  PX_CHECK(px__in(im, n, 1, 1, &b));
  if (a->kind == PX__V_CONST) {
    px__value_t *t = a;
    a = b;
    b = t;
  }
  if (b->kind != PX__V_CONST || a->kind != PX__V_ACT || a->h != 0) return PX_OK;
  px__onnx_layer_t *L = a->layer >= 0 ? &im->g->layers[a->layer] : NULL;
  if (!L || L->kind != PX__OL_FC || !L->transposed || L->b.bytes || a->uses != 1)
    return PX__NODE_FAIL(im, n, "an Add of a constant is supported only as the bias of a final "
                                "MatMul whose output nothing else reads");
  int64_t bd[1] = {L->c_out};
  PX_CHECK(px__const_in(im, n, strcmp(n->input[0], b->name) ? 1 : 0, 1, bd, &L->b));
  *done = 1;
  return px__out(im, n, a->layer, a->c, 0, 0);
}

static px_status_t px__op_add(px__imp_t *im, const Onnx__NodeProto *n) {
  if (px__both_const(im, n)) return px__op_fold(im, n);
  px__value_t *a, *b;
  int folded;
  PX_CHECK(px__ln_step(im, n, &folded));
  if (!folded) PX_CHECK(px__ln_affine(im, n, &folded));
  if (!folded) PX_CHECK(px__gelu_step(im, n, &folded));
  if (folded) return PX_OK;
  PX_CHECK(px__fold_bias(im, n, &folded));
  if (!folded) PX_CHECK(px__by_const(im, n, &folded));
  if (folded) return PX_OK;
  PX_CHECK(px__act_in(im, n, 0, 1, &a));
  PX_CHECK(px__act_in(im, n, 1, 1, &b));
  if (a->c != b->c || a->h != b->h || a->w != b->w)
    return PX__NODE_FAIL(im, n, "the inputs have shapes [%d, %d, %d] and [%d, %d, %d]", a->c, a->h,
                         a->w, b->c, b->h, b->w);
  if (a->layer < 0 || b->layer < 0 || a->layer == b->layer)
    return PX__NODE_FAIL(im, n, "an Add must join two different computed activations");
  if (a->perm != b->perm)
    return PX__NODE_FAIL(im, n, "an Add joins an NHWC view and an NCHW map");
  return px__two_in(im, n, PX__OL_ADD, a, b);
}

/* Mul of a map [C, H, W] and a per-channel gate [C, 1, 1] (the
 * squeeze-and-excitation product), in either order. */
static px_status_t px__op_mul(px__imp_t *im, const Onnx__NodeProto *n) {
  if (px__both_const(im, n)) return px__op_fold(im, n);
  px__value_t *a, *b;
  int fused;
  PX_CHECK(px__ln_affine(im, n, &fused));
  if (!fused) PX_CHECK(px__layer_scale(im, n, &fused));
  if (fused) return PX_OK;
  PX_CHECK(px__gelu_step(im, n, &fused));
  if (!fused) PX_CHECK(px__swish(im, n, &fused));
  if (!fused) PX_CHECK(px__by_const(im, n, &fused));
  if (fused) return PX_OK;
  PX_CHECK(px__act_in(im, n, 0, 1, &a));
  PX_CHECK(px__act_in(im, n, 1, 1, &b));
  if (a->h == 1 && a->w == 1 && (b->h != 1 || b->w != 1)) {
    px__value_t *t = a;
    a = b;
    b = t;
  }
  if (a->c != b->c || b->h != 1 || b->w != 1 || a->layer < 0 || b->layer < 0 ||
      a->layer == b->layer || a->perm || b->perm)
    return PX__NODE_FAIL(im, n, "only a map [N, C, H, W] times a per-channel gate [N, C, 1, 1] "
                                "of two computed activations (squeeze-and-excitation) is "
                                "supported; the inputs are [%d, %d, %d] and [%d, %d, %d]",
                         a->c, a->h, a->w, b->c, b->h, b->w);
  return px__two_in(im, n, PX__OL_MUL, a, b);
}

/* Concat on channels of 2 to 64 maps of one size: a chain of two-way
 * concatenations (the same values; the model has a two-input node); of one
 * map (densenet's torch.cat([x], 1)), that map; of constants, folded. */
static px_status_t px__op_concat(px__imp_t *im, const Onnx__NodeProto *n) {
  px__value_t *a;
  PX_CHECK(px__in(im, n, 0, 1, &a));
  if (a->kind == PX__V_CONST) return px__op_fold(im, n);
  int64_t axis = px__attr_i(n, "axis", 0);
  if (axis != 1 && axis != -3)
    return PX__NODE_FAIL(im, n, "axis = %lld: only the channel axis (1) is supported",
                         (long long)axis);
  if (n->n_input < 1 || n->n_input > 64)
    return PX__NODE_FAIL(im, n, "%zu inputs: 1 to 64 are supported", n->n_input);
  px__value_t *b;
  PX_CHECK(px__act_in(im, n, 0, 1, &a));
  if (n->n_input == 1) return px__op_pass(im, n);
  int layer = a->layer, c = a->c, h = a->h, w = a->w;
  for (size_t i = 1; i < n->n_input; i++) {
    PX_CHECK(px__act_in(im, n, i, 1, &b));
    if (b->h != h || b->w != w || layer < 0 || b->layer < 0 || b->layer == layer ||
        c + b->c > 65536)
      return PX__NODE_FAIL(im, n, "input %zu ('%s') is [%d, %d, %d]: the inputs must be "
                                  "distinct computed maps of %d x %d", i, n->input[i], b->c, b->h,
                           b->w, h, w);
    px__onnx_layer_t *L;
    PX_CHECK(px__new_layer(im, n, PX__OL_CONCAT, &L));
    L->in = layer;
    L->in2 = b->layer;
    c += b->c;
    L->c_out = c;
    layer = im->g->nlayers - 1;
  }
  return px__out(im, n, layer, c, h, w);
}

/* MatMul of the flattened features [N, F] by a constant [F, K]: the
 * classifier, as a Gemm with the weight transposed (its bias, if any, is
 * the Add that follows). */
static px_status_t px__op_matmul(px__imp_t *im, const Onnx__NodeProto *n) {
  px__value_t *x, *wv;
  PX_CHECK(px__act_in(im, n, 0, 0, &x));
  if (x->perm) return px__matmul_nhwc(im, n, x);
  PX_CHECK(px__in(im, n, 1, 1, &wv));
  const int tr = wv->kind == PX__V_CONST && wv->tr; /* a Linear's [K, F] itself */
  if (x->h != 0 || wv->kind != PX__V_CONST || wv->t->n_dims != 2 || wv->t->dims[1 - tr] < 1 ||
      wv->t->dims[1 - tr] > 1000000)
    return PX__NODE_FAIL(im, n, "only a final 2-D product of the flattened features [N, F] and "
                                "a constant weight [F, K] is supported");
  int64_t wd[2] = {x->c, wv->t->dims[1 - tr]};
  px__onnx_layer_t *L;
  PX_CHECK(px__new_layer(im, n, PX__OL_FC, &L));
  if (tr) {
    L->w.n = px__numel(wv->t);
    L->w.bytes = wv->t->has_raw_data ? wv->t->raw_data.data : (const uint8_t *)wv->t->float_data;
    if (wv->t->dims[1] != x->c || wv->t->data_type != ONNX__TENSOR_PROTO__DATA_TYPE__FLOAT)
      return PX__NODE_FAIL(im, n, "the weight is not a float [K, %d]", x->c);
  } else {
    PX_CHECK(px__const_in(im, n, 1, 2, wd, &L->w));
  }
  L->in = x->layer;
  L->c_out = (int)wd[1];
  L->transposed = !tr;
  px__prefix(L, n->input[1], im->g->nlayers - 1);
  return px__out(im, n, im->g->nlayers - 1, (int)wd[1], 0, 0);
}

static px_status_t px__op_gap(px__imp_t *im, const Onnx__NodeProto *n) {
  px__value_t *x;
  PX_CHECK(px__act_in(im, n, 0, 1, &x));
  px__onnx_layer_t *L;
  PX_CHECK(px__new_layer(im, n, PX__OL_GAP, &L));
  L->in = x->layer;
  L->c_out = x->c;
  return px__out(im, n, im->g->nlayers - 1, x->c, 1, 1);
}

/* MaxPool / AveragePool: any window (px__window), floor or ceil rounding;
 * AveragePool without dilation, counting its padding or not
 * (count_include_pad), and counting the zeros of a Pad before it (PyTorch's
 * export of count_include_pad = 1) with its own padding, if any, counted
 * too. */
static px_status_t px__op_pool(px__imp_t *im, const Onnx__NodeProto *n) {
  px__value_t *x;
  PX_CHECK(px__act_in(im, n, 0, 1, &x));
  int max = !strcmp(n->op_type, "MaxPool");
  const Onnx__AttributeProto *ks = px__attr(n, "kernel_shape");
  if (!ks || ks->n_ints != 2 || ks->ints[0] < 1 || ks->ints[0] > 32 || ks->ints[1] < 1 ||
      ks->ints[1] > 32) {
    char v[160];
    return PX__NODE_FAIL(im, n, "kernel_shape %s: a 2-D window of 1 to 32 a side is supported",
                         ks ? px__ints_text(ks, v, sizeof v) : "missing");
  }
  if (px__attr_i(n, "storage_order", 0) != 0 || n->n_output > 1)
    return PX__NODE_FAIL(im, n, "storage_order and the Indices output are not supported");
  if (!max && !px__ints_all(n, "dilations", 1))
    return PX__NODE_FAIL(im, n, "a dilated AveragePool is not supported");
  int64_t cip = max ? 0 : px__attr_i(n, "count_include_pad", 0);
  if (cip != 0 && cip != 1)
    return PX__NODE_FAIL(im, n, "count_include_pad = %lld: 0 or 1", (long long)cip);
  const int own = !px__ints_all(n, "pads", 0) || px__auto_pad(n) >= 2;
  if (x->pad && own && !cip)
    return PX__NODE_FAIL(im, n, "an AveragePool with pads of its own that does not count them "
                                "(count_include_pad = 0) after a Pad is not supported");
  px_window_t win;
  int oh, ow;
  PX_CHECK(px__window(im, n, x, ks->ints[0], ks->ints[1], &win, &oh, &ow));
  if (win.pad_t >= win.kh || win.pad_b >= win.kh || win.pad_l >= win.kw || win.pad_r >= win.kw)
    return PX__NODE_FAIL(im, n, "padding (%d, %d, %d, %d) not smaller than the %dx%d window",
                         win.pad_t, win.pad_l, win.pad_b, win.pad_r, win.kh, win.kw);
  win.exclude_pad = !max && !cip && !x->pad;
  px__onnx_layer_t *L;
  PX_CHECK(px__new_layer(im, n, max ? PX__OL_MAXPOOL : PX__OL_AVGPOOL, &L));
  L->in = x->layer;
  L->c_out = x->c;
  L->win = win;
  return px__out(im, n, im->g->nlayers - 1, x->c, oh, ow);
}

static px_status_t px__check_init(px__imp_t *im, const Onnx__TensorProto *t);

/* Constant: a tensor in the node (PyTorch writes a Pad's sizes so). */
static px_status_t px__op_constant(px__imp_t *im, const Onnx__NodeProto *n) {
  const Onnx__AttributeProto *a = px__attr(n, "value");
  if (!a || !a->t || n->n_attribute != 1 || n->n_output != 1)
    return PX__NODE_FAIL(im, n, "only a Constant holding one tensor ('value') is supported");
  PX_CHECK(px__check_init(im, a->t));
  px__value_t *v = px__find(im, n->output[0]);
  v->kind = PX__V_CONST;
  v->t = a->t;
  return PX_OK;
}

/* Pad by zeros on H and W only (0 to 64 on a side): PyTorch's export of a
 * padded average pooling (count_include_pad) or of F.pad before a conv;
 * the AveragePool or Conv reading it takes the padding over (px__window). */
static px_status_t px__op_pad(px__imp_t *im, const Onnx__NodeProto *n) {
  px__value_t *x, *pv, *cv;
  PX_CHECK(px__act_in(im, n, 0, 1, &x));
  PX_CHECK(px__in(im, n, 1, 1, &pv));
  PX_CHECK(px__in(im, n, 2, 0, &cv));
  const Onnx__AttributeProto *mode = px__attr(n, "mode");
  const Onnx__TensorProto *t = pv->kind == PX__V_CONST ? pv->t : NULL;
  int64_t pads[8] = {0};
  int ok = t && t->data_type == ONNX__TENSOR_PROTO__DATA_TYPE__INT64 && px__numel(t) == 8 &&
           (n->n_input < 4 || !n->input[3][0]) && /* opset 18's axes: not taken */
           !(mode && mode->has_s && mode->s.len && !(mode->s.len == 8 &&
                                                    !memcmp(mode->s.data, "constant", 8)));
  if (ok && t->has_raw_data) memcpy(pads, t->raw_data.data, sizeof pads);
  else if (ok) memcpy(pads, t->int64_data, sizeof pads);
  ok = ok && !pads[0] && !pads[1] && !pads[4] && !pads[5] && !x->pad;
  for (int i = 2; i < 8; i++) ok = ok && (i == 4 || i == 5 || (pads[i] >= 0 && pads[i] <= 64));
  if (ok && cv) { /* the padding value must be 0 */
    float z = 1.0f;
    const Onnx__TensorProto *c = cv->kind == PX__V_CONST ? cv->t : NULL;
    if (c && c->data_type == ONNX__TENSOR_PROTO__DATA_TYPE__FLOAT && px__numel(c) == 1)
      memcpy(&z, c->has_raw_data ? (const void *)c->raw_data.data : (const void *)c->float_data,
             sizeof z);
    ok = z == 0.0f;
  }
  if (!ok)
    return PX__NODE_FAIL(im, n, "only a constant zero Pad of H and W (0 to 64 on a side) before "
                                "a Conv or an AveragePool is supported");
  px__value_t *v = px__find(im, n->output[0]);
  /* ONNX's order is begins then ends: [.., .., t, l, .., .., b, r] */
  const int packed = (int)(pads[2] | pads[3] << 8 | pads[6] << 16 | pads[7] << 24);
  *v = (px__value_t){v->name, PX__V_ACT, NULL, x->layer, x->c, x->h, x->w, v->uses, packed, 0,
                     0, 0, 0, 0, 0, 0};
  return PX_OK;
}

/* ---- shapes: folded constants, reshapes that move no data ---------------------- */

/* n's output is the constant t a fold gave (st PX_OK); a fold's refusal
 * (PX_ERR_INVALID, why) names the node. */
static px_status_t px__folded(px__imp_t *im, const Onnx__NodeProto *n, px_status_t st,
                              const char *why, const Onnx__TensorProto *t) {
  if (st == PX_ERR_INVALID) return PX__NODE_FAIL(im, n, "%s", why);
  PX_CHECK(st);
  px__value_t *v = px__find(im, n->output[0]);
  v->kind = PX__V_CONST;
  v->t = t;
  return PX_OK;
}

/* A node computing on constants (Shape's, Gather's, ...): folded now into a
 * constant (arch/onnx_shape.c). An input that is an activation's data (not
 * its shape) is refused. */
static px_status_t px__op_fold(px__imp_t *im, const Onnx__NodeProto *n) {
  const Onnx__TensorProto *in[64] = {NULL}, *t = NULL;
  char why[200];
  if (n->n_input > 64) return PX__NODE_FAIL(im, n, "more than 64 inputs");
  for (size_t i = 0; i < n->n_input; i++) {
    px__value_t *v;
    PX_CHECK(px__in(im, n, i, i == 0, &v));
    if (v && v->tr)
      return PX__NODE_FAIL(im, n, "input '%s' is a transposed initializer: only a MatMul may "
                                  "read it", n->input[i]);
    if (v && v->kind != PX__V_CONST)
      return PX__NODE_FAIL(im, n, "input '%s' is an activation: a value computed from a "
                                  "tensor's data is not taken (only shapes and constants fold "
                                  "at import)", n->input[i]);
    in[i] = v ? v->t : NULL;
  }
  px_status_t st = px__onnx_fold(im->g, n, in, why, sizeof why, &t);
  return px__folded(im, n, st, why, t);
}

/* The dims of activation x after the batch ([c], [c, 1] or [c, h, w]);
 * the count. */
static int px__act_dims(const px__value_t *x, int64_t *d) {
  d[0] = x->c;
  if (x->h == 0) return 1;
  if (x->sq) {
    d[1] = 1;
    return 2;
  }
  d[1] = x->h;
  d[2] = x->w;
  return 3;
}

/* Shape: the dims of an activation (the batch as PX__ONNX_BATCH) or a
 * constant, from start to end (opset 15). */
static px_status_t px__op_shape(px__imp_t *im, const Onnx__NodeProto *n) {
  px__value_t *x;
  int64_t d[5] = {PX__ONNX_BATCH};
  char why[200];
  int r;
  PX_CHECK(px__in(im, n, 0, 1, &x));
  if (x->kind == PX__V_CONST) {
    r = (int)x->t->n_dims;
    memcpy(d, x->t->dims, (size_t)r * sizeof *d);
  } else {
    if (x->kind != PX__V_ACT || !x->sq) PX_CHECK(px__act_in(im, n, 0, 0, &x));
    r = 1 + px__act_dims(x, d + 1);
  }
  int64_t b = px__attr_i(n, "start", 0), e = px__attr_i(n, "end", r);
  b = b < 0 ? b + r : b;
  e = e < 0 ? e + r : e;
  b = b < 0 ? 0 : b > r ? r : b;
  e = e < b ? b : e > r ? r : e;
  const Onnx__TensorProto *t = NULL;
  px_status_t st = px__onnx_fold_dims(im->g, d + b, (int)(e - b), why, sizeof why, &t);
  return px__folded(im, n, st, why, t);
}

/* Whether layer's output is an FC layer's features [N, F] (through
 * activations): the model holds them 2-D, which only activations and
 * another FC read. */
static int px__fc_features(const px__imp_t *im, int layer) {
  while (layer >= 0 && im->g->layers[layer].kind == PX__OL_ACT) layer = im->g->layers[layer].in;
  return layer >= 0 && im->g->layers[layer].kind == PX__OL_FC;
}

/* x as [N, od[0 .. k-1]]: the same layer's output when that moves no data:
 * [N, C, 1, 1], [N, C, 1] and [N, C] into one another (or the same shape). */
static px_status_t px__reshaped(px__imp_t *im, const Onnx__NodeProto *n, const px__value_t *x,
                                const int64_t *od, int k) {
  if (k > 1 && px__fc_features(im, x->layer))
    return PX__NODE_FAIL(im, n, "the features of a Gemm or MatMul are read only by activations "
                                "and another Gemm or MatMul, not as a map (a squeeze-and-"
                                "excitation of Linear layers is not supported)");
  int64_t d[3], e = 1;
  int r = px__act_dims(x, d), unit = x->h == 0 || (x->h == 1 && x->w == 1);
  for (int i = 0; i < r; i++) e *= d[i];
  int same = k == r;
  for (int i = 0; same && i < k; i++) same = od[i] == d[i];
  int ok = same || (unit && od[0] == e && (k == 1 || (k == 2 && od[1] == 1) ||
                                           (k == 3 && od[1] == 1 && od[2] == 1)));
  /* a C x H x W map flattened for the classifier (VGG's 512 x 7 x 7): the
   * FC layer reads the map itself, its weight's columns in NCHW order, as
   * PyTorch flattens */
  if (!ok && !unit && k == 1 && od[0] == e && x->layer >= 0 && !x->perm && !x->pad) {
    PX_CHECK(px__out(im, n, x->layer, (int)e, 0, 0));
    px__find(im, n->output[0])->flat = 1;
    return PX_OK;
  }
  if (!ok && !unit && k == 1 && od[0] == e)
    return PX__NODE_FAIL(im, n, "only a computed map (not the graph input, an NHWC view or a "
                                "padded one) can be flattened for the classifier; this one is "
                                "%d x %d x %d", x->c, x->h, x->w);
  if (!ok)
    return PX__NODE_FAIL(im, n, "only reshapes that move no data ([N, C, 1, 1], [N, C, 1] and "
                                "[N, C] into one another) are supported; this one makes a "
                                "%d-D [N, %lld, ...] of [N, %d, ...]", k + 1, (long long)od[0],
                         x->c);
  if (same) return px__op_pass(im, n);
  PX_CHECK(px__out(im, n, x->layer, (int)e, k == 1 ? 0 : 1, k == 1 ? 0 : 1));
  px__find(im, n->output[0])->sq = k == 2;
  return PX_OK;
}

/* The activation input of a Squeeze, Unsqueeze, Reshape or Flatten (which
 * may be 3-D) and its full dims ([N, ...], N as PX__ONNX_BATCH); the rank. */
static px_status_t px__reshape_in(px__imp_t *im, const Onnx__NodeProto *n, px__value_t **x,
                                  int64_t *d, int *r) {
  PX_CHECK(px__in(im, n, 0, 1, x));
  if ((*x)->kind != PX__V_ACT || !(*x)->sq) PX_CHECK(px__act_in(im, n, 0, 0, x));
  d[0] = PX__ONNX_BATCH;
  *r = 1 + px__act_dims(*x, d + 1);
  return PX_OK;
}

/* Squeeze / Unsqueeze: of a constant, folded; of an activation, a reshape
 * that moves no data (the batch axis stays). */
static px_status_t px__op_squeeze(px__imp_t *im, const Onnx__NodeProto *n) {
  px__value_t *x, *av = NULL;
  int64_t d[4], ax[4], od[8];
  int r, k = 0, unsq = n->op_type[0] == 'U';
  PX_CHECK(px__in(im, n, 0, 1, &x));
  if (x->kind == PX__V_CONST) return px__op_fold(im, n);
  PX_CHECK(px__reshape_in(im, n, &x, d, &r));
  const Onnx__AttributeProto *aa = px__attr(n, "axes");
  if (n->n_input > 1 && n->input[1][0]) {
    PX_CHECK(px__in(im, n, 1, 1, &av));
    k = av->kind == PX__V_CONST ? px__onnx_ints(av->t, ax, 4) : -1;
  } else if (aa) {
    k = aa->n_ints <= 4 ? (int)aa->n_ints : -1;
    if (k > 0) memcpy(ax, aa->ints, (size_t)k * sizeof *ax);
  }
  int ro = unsq ? r + k : r, m = 0;
  unsigned pick = 0;
  for (int i = 0; i < k; i++) {
    int64_t a = ax[i] < 0 ? ax[i] + ro : ax[i];
    if (a < 1 || a >= ro || (pick >> a & 1) || (!unsq && d[a] != 1)) k = -1;
    else pick |= 1u << a;
  }
  if (k < 0 || (unsq && k == 0) || ro > 4)
    return PX__NODE_FAIL(im, n, "the axes must be constant, distinct, not the batch axis and "
                                "(Squeeze) of size 1, for a result of at most 4 dimensions");
  for (int a = 1, s = 1; a < ro; a++) {
    if (unsq) od[m++] = pick >> a & 1 ? 1 : d[s++];
    else if (k ? !(pick >> a & 1) : d[a] != 1) od[m++] = d[a];
  }
  return px__reshaped(im, n, x, od, m);
}

/* Flatten (axis 1) or Reshape by a constant shape (folded: x.view(x.size(0),
 * -1)'s [N, -1]): the batch first, 0 copying a dimension, -1 the rest. */
static px_status_t px__op_flatten(px__imp_t *im, const Onnx__NodeProto *n) {
  px__value_t *x, *s;
  int64_t d[4], sh[5], e = 1;
  int r, k, done;
  PX_CHECK(px__shuffle_reshape(im, n, &done));
  if (done) return PX_OK;
  PX_CHECK(px__reshape_in(im, n, &x, d, &r));
  for (int i = 1; i < r; i++) e *= d[i];
  if (!strcmp(n->op_type, "Flatten")) {
    int64_t axis = px__attr_i(n, "axis", 1);
    if (axis != 1 && axis != 1 - r)
      return PX__NODE_FAIL(im, n, "only axis = 1 (to [N, C*H*W]) is supported");
    return px__reshaped(im, n, x, &e, 1);
  }
  PX_CHECK(px__in(im, n, 1, 1, &s));
  k = s->kind == PX__V_CONST ? px__onnx_ints(s->t, sh, 5) : -1;
  int infer = -1, ok = k >= 2 && px__attr_i(n, "allowzero", 0) == 0 &&
                       (sh[0] == PX__ONNX_BATCH || sh[0] == 0 || sh[0] == -1);
  int64_t known = 1;
  for (int i = 1; ok && i < k; i++) {
    if (sh[i] == 0 && i < r) sh[i] = d[i];
    if (sh[i] == -1 && infer < 0 && sh[0] != -1) infer = i;
    else if (sh[i] >= 1 && sh[i] <= e) known *= sh[i];
    else ok = 0;
  }
  if (ok && infer > 0) {
    ok = e % known == 0;
    sh[infer] = e / known;
  }
  if (!ok || known * (infer > 0 ? sh[infer] : 1) != e)
    return PX__NODE_FAIL(im, n, "only a Reshape to [N, ...] by a constant shape (the batch, "
                                "or 0 or -1 for it, first), keeping the %lld values of a "
                                "sample, is supported", (long long)e);
  return px__reshaped(im, n, x, sh + 1, k - 1);
}

/* ReduceMean over H and W (axes [2, 3] or [-2, -1]: an attribute, or
 * opset 18's input): a global average pooling, [N, C, 1, 1] or (keepdims
 * 0) [N, C]. */
static px_status_t px__op_reducemean(px__imp_t *im, const Onnx__NodeProto *n) {
  px__value_t *x, *av;
  int64_t ax[4];
  int k = -1, done;
  PX_CHECK(px__ln_step(im, n, &done));
  if (done) return PX_OK;
  PX_CHECK(px__act_in(im, n, 0, 1, &x));
  const Onnx__AttributeProto *aa = px__attr(n, "axes");
  if (n->n_input > 1 && n->input[1][0]) {
    PX_CHECK(px__in(im, n, 1, 1, &av));
    k = av->kind == PX__V_CONST ? px__onnx_ints(av->t, ax, 4) : -1;
  } else if (aa && aa->n_ints <= 4) {
    k = (int)aa->n_ints;
    memcpy(ax, aa->ints, (size_t)k * sizeof *ax);
  }
  if (x->perm)
    return PX__NODE_FAIL(im, n, "a mean of an NHWC view is taken only over its last axis, as "
                                "a LayerNorm's first step");
  unsigned pick = 0;
  for (int i = 0; i < k; i++) pick |= ax[i] >= -4 && ax[i] <= 3 ? 1u << ((ax[i] + 4) & 3) : 16u;
  int64_t keep = px__attr_i(n, "keepdims", 1);
  if (k != 2 || pick != 12u || (keep != 0 && keep != 1))
    return PX__NODE_FAIL(im, n, "only the mean over H and W (axes [2, 3] or [-2, -1], a global "
                                "average pooling) is supported");
  px__onnx_layer_t *L;
  PX_CHECK(px__new_layer(im, n, PX__OL_GAP, &L));
  L->in = x->layer;
  L->c_out = x->c;
  return px__out(im, n, im->g->nlayers - 1, x->c, (int)keep, (int)keep);
}

static px_status_t px__op_gemm(px__imp_t *im, const Onnx__NodeProto *n) {
  px__value_t *x;
  PX_CHECK(px__act_in(im, n, 0, 0, &x));
  if (x->h != 0) return PX__NODE_FAIL(im, n, "the input must be flattened to [N, features]");
  if (px__attr_i(n, "transA", 0) != 0 || px__attr_i(n, "transB", 0) != 1 ||
      px__attr_f(n, "alpha", 1.0f) != 1.0f || px__attr_f(n, "beta", 1.0f) != 1.0f)
    return PX__NODE_FAIL(im, n, "only Y = A * B^T + C (transB = 1, alpha = beta = 1, as "
                                "torch.nn.Linear exports) is supported");
  px__value_t *wv;
  PX_CHECK(px__in(im, n, 1, 1, &wv));
  if (wv->kind != PX__V_CONST || wv->t->n_dims != 2 || wv->t->dims[0] < 1 ||
      wv->t->dims[0] > 1000000)
    return PX__NODE_FAIL(im, n, "the weight '%s' must be a 2-D initializer", n->input[1]);
  int64_t wd[2] = {wv->t->dims[0], x->c}, bd[1] = {wv->t->dims[0]};
  px__onnx_layer_t *L;
  PX_CHECK(px__new_layer(im, n, PX__OL_FC, &L));
  PX_CHECK(px__const_in(im, n, 1, 2, wd, &L->w));
  if (n->n_input > 2 && n->input[2][0]) PX_CHECK(px__const_in(im, n, 2, 1, bd, &L->b));
  L->in = x->layer;
  L->c_out = (int)wd[0];
  px__prefix(L, n->input[1], im->g->nlayers - 1);
  return px__out(im, n, im->g->nlayers - 1, (int)wd[0], 0, 0);
}

/* Identity / Dropout: the output is the input (an initializer stays one). */
static px_status_t px__op_pass(px__imp_t *im, const Onnx__NodeProto *n) {
  px__value_t *x;
  PX_CHECK(px__in(im, n, 0, 1, &x));
  if (n->n_output < 1) return PX__NODE_FAIL(im, n, "the node has no output");
  px__value_t *v = px__find(im, n->output[0]);
  *v = (px__value_t){v->name, x->kind, x->t, x->layer, x->c, x->h, x->w, v->uses, x->pad,
                     x->part, x->sq, x->perm, x->tr, x->eps, x->flat, 0};
  return PX_OK;
}

/* ---- ConvNeXt: NHWC views, LayerNorm, Linear on the last axis, layer scale -------- */

/* Transpose: of a map, to its NHWC view (perm [0, 2, 3, 1]) or back ([0, 3,
 * 1, 2]), moving no data (the layer's output stays NCHW; px__value_t.perm
 * says how the file sees it); of a 2-D initializer ([1, 0]: a Linear's
 * weight as PyTorch's MatMul reads it), a transposed view of it. */
static px_status_t px__op_transpose(px__imp_t *im, const Onnx__NodeProto *n) {
  px__value_t *x;
  int done;
  PX_CHECK(px__shuffle_transpose(im, n, &done));
  if (done) return PX_OK;
  const Onnx__AttributeProto *pa = px__attr(n, "perm");
  int64_t pm[4] = {-1, -1, -1, -1};
  int np = pa && pa->n_ints <= 4 ? (int)pa->n_ints : -1;
  for (int i = 0; i < np; i++) pm[i] = pa->ints[i];
  PX_CHECK(px__in(im, n, 0, 1, &x));
  px__value_t *v = px__find(im, n->output[0]);
  if (x->kind == PX__V_CONST) {
    if (x->t->n_dims != 2 || np != 2 || pm[0] != 1 || pm[1] != 0)
      return PX__NODE_FAIL(im, n, "only the transpose [1, 0] of a 2-D initializer is supported");
    *v = (px__value_t){v->name, PX__V_CONST, x->t, -1, 0, 0, 0, v->uses, 0, 0, 0, 0, !x->tr, 0, 0, 0};
    return PX_OK;
  }
  PX_CHECK(px__act_in(im, n, 0, 1, &x));
  const int to_nhwc = np == 4 && pm[0] == 0 && pm[1] == 2 && pm[2] == 3 && pm[3] == 1;
  const int to_nchw = np == 4 && pm[0] == 0 && pm[1] == 3 && pm[2] == 1 && pm[3] == 2;
  if (!(to_nhwc && !x->perm) && !(to_nchw && x->perm))
    return PX__NODE_FAIL(im, n, "only a map's Transpose to NHWC (perm [0, 2, 3, 1]) and back "
                                "([0, 3, 1, 2]) is supported (this input is %s)",
                         x->perm ? "an NHWC view" : "NCHW");
  PX_CHECK(px__out(im, n, x->layer, x->c, x->h, x->w));
  v->perm = to_nhwc;
  return PX_OK;
}

/* A LayerNorm layer over the channels of x (an NHWC view, normalised on its
 * last axis), its output the value of n. */
static px_status_t px__ln_layer(px__imp_t *im, const Onnx__NodeProto *n, const px__value_t *x,
                                float eps, px__onnx_layer_t **out) {
  if (!(eps > 0.0f && eps <= 0.1f))
    return PX__NODE_FAIL(im, n, "epsilon = %g: (0, 0.1] is supported", eps);
  if (!x->perm || x->h == 0)
    return PX__NODE_FAIL(im, n, "only a LayerNorm over the channels of a map (its last axis "
                                "after a Transpose to NHWC, as torchvision's ConvNeXt) is "
                                "supported");
  PX_CHECK(px__new_layer(im, n, PX__OL_LN, out));
  (*out)->in = x->layer;
  (*out)->c_out = x->c;
  (*out)->eps = eps;
  snprintf((*out)->prefix, sizeof (*out)->prefix, "node%d", im->g->nlayers - 1);
  return px__out(im, n, im->g->nlayers - 1, x->c, x->h, x->w);
}

/* LayerNormalization (opset 17) on the last axis of an NHWC view. */
static px_status_t px__op_ln(px__imp_t *im, const Onnx__NodeProto *n) {
  px__value_t *x;
  PX_CHECK(px__act_in(im, n, 0, 1, &x));
  int64_t axis = px__attr_i(n, "axis", -1);
  for (size_t o = 1; o < n->n_output; o++) {
    px__value_t *st = n->output[o][0] ? px__find(im, n->output[o]) : NULL;
    if (st && st->uses)
      return PX__NODE_FAIL(im, n, "its mean and inverse deviation outputs are not supported");
  }
  if (axis != -1 && axis != 3)
    return PX__NODE_FAIL(im, n, "axis = %lld: only the last axis (-1) is supported",
                         (long long)axis);
  px__onnx_layer_t *L;
  PX_CHECK(px__ln_layer(im, n, x, px__attr_f(n, "epsilon", 1e-5f), &L));
  int64_t cd[1] = {x->c};
  PX_CHECK(px__const_in(im, n, 1, 1, cd, &L->w));
  if (n->n_input > 2 && n->input[2][0]) PX_CHECK(px__const_in(im, n, 2, 1, cd, &L->b));
  px__prefix(L, n->input[1], im->g->nlayers - 1);
  return PX_OK;
}

/* The output of n as LayerNorm step `part` of x's layer (see px__ln_step). */
static px_status_t px__ln_part(px__imp_t *im, const Onnx__NodeProto *n, const px__value_t *x,
                               int part, float eps) {
  PX_CHECK(px__out(im, n, x->layer, x->c, x->h, x->w));
  px__value_t *v = px__find(im, n->output[0]);
  v->kind = PX__V_LNP;
  v->part = part;
  v->perm = x->perm;
  v->eps = eps;
  return PX_OK;
}

/* Whether ReduceMean n takes the last axis of an NHWC view (keepdims 1). */
static int px__last_axis_mean(px__imp_t *im, const Onnx__NodeProto *n) {
  const Onnx__AttributeProto *aa = px__attr(n, "axes");
  px__value_t *av;
  int64_t ax[2];
  int k = -1;
  if (n->n_input > 1 && n->input[1][0]) {
    k = px__in(im, n, 1, 1, &av) == PX_OK && av->kind == PX__V_CONST ? px__onnx_ints(av->t, ax, 2)
                                                                      : -1;
  } else if (aa && aa->n_ints == 1) {
    k = 1;
    ax[0] = aa->ints[0];
  }
  return k == 1 && (ax[0] == -1 || ax[0] == 3) && px__attr_i(n, "keepdims", 1) == 1;
}

/* LayerNorm as opset 13 writes it, on the NHWC view x: m = ReduceMean(x)
 * (1), d = Sub(x, m) (2), Pow(d, 2) (3), ReduceMean (4), Add eps (5), Sqrt
 * (6), Div(d, that): the LN layer (without scale and shift: the Mul and Add
 * of px__ln_affine give them). *done = 0 when n is no such step. */
static px_status_t px__ln_step(px__imp_t *im, const Onnx__NodeProto *n, int *done) {
  px__value_t *a = NULL, *b = NULL;
  *done = 0;
  const char *op = n->op_type;
  PX_CHECK(px__in(im, n, 0, 1, &a));
  if (n->n_input > 1) PX_CHECK(px__in(im, n, 1, 0, &b));
  const int lnp_a = a->kind == PX__V_LNP, lnp_b = b && b->kind == PX__V_LNP;
  float c;
  if (!strcmp(op, "ReduceMean") && px__last_axis_mean(im, n) &&
      ((a->kind == PX__V_ACT && a->perm && !a->pad && a->h) || (lnp_a && a->part == 3))) {
    *done = 1;
    return px__ln_part(im, n, a, lnp_a ? 4 : 1, 0.0f);
  }
  if (!lnp_a && !lnp_b) return PX_OK;
  *done = 1;
  if (!strcmp(op, "Sub") && lnp_b && b->part == 1 && a->kind == PX__V_ACT && a->perm &&
      a->layer == b->layer)
    return px__ln_part(im, n, a, 2, 0.0f);
  if (!strcmp(op, "Pow") && lnp_a && a->part == 2 && px__scalar_is(im, n, 1, 2.0f, 0.0f))
    return px__ln_part(im, n, a, 3, 0.0f);
  if (!strcmp(op, "Add") && lnp_a && a->part == 4 && px__scalar(im, n, 1, &c))
    return px__ln_part(im, n, a, 5, c);
  if (!strcmp(op, "Sqrt") && lnp_a && a->part == 5) return px__ln_part(im, n, a, 6, a->eps);
  if (!strcmp(op, "Div") && lnp_a && lnp_b && a->part == 2 && b->part == 6 &&
      a->layer == b->layer) {
    px__value_t x = *a;
    x.kind = PX__V_ACT;
    px__onnx_layer_t *L;
    return px__ln_layer(im, n, &x, b->eps, &L);
  }
  return PX__NODE_FAIL(im, n, "an input is a step of a LayerNorm (ReduceMean, Sub, Pow 2, "
                              "ReduceMean, Add eps, Sqrt, Div) that the node does not continue");
}

/* Which input of n (0 or 1) is a float initializer, -1 if neither. */
static int px__init_side(px__imp_t *im, const Onnx__NodeProto *n, px__value_t **k,
                         px__value_t **x) {
  px__value_t *v[2];
  if (n->n_input != 2 || px__in(im, n, 0, 1, &v[0]) < 0 || px__in(im, n, 1, 1, &v[1]) < 0)
    return -1;
  for (int i = 0; i < 2; i++)
    if (v[i]->kind == PX__V_CONST && !v[i]->tr && v[1 - i]->kind == PX__V_ACT) {
      *k = v[i];
      *x = v[1 - i];
      return i;
    }
  return -1;
}

/* Mul of a LayerNorm's output by a [C] initializer (its scale) or Add of one
 * (its shift), the output read by this node alone; Add of a [K]
 * initializer to a MatMul's 1 x 1 conv on an NHWC view (its bias). *done =
 * 0 when n is none of them. */
static px_status_t px__ln_affine(px__imp_t *im, const Onnx__NodeProto *n, int *done) {
  px__value_t *k, *x;
  *done = 0;
  const int ki = px__init_side(im, n, &k, &x);
  if (ki < 0 || x->layer < 0 || x->uses != 1 || !x->perm || k->t->n_dims != 1) return PX_OK;
  px__onnx_layer_t *L = &im->g->layers[x->layer];
  const int mul = !strcmp(n->op_type, "Mul");
  int64_t cd[1] = {x->c};
  px__onnx_init_t *dst = NULL;
  if (L->kind == PX__OL_LN) dst = mul && !L->w.bytes && !L->b.bytes ? &L->w : !mul && !L->b.bytes ? &L->b : NULL;
  else if (!mul && L->kind == PX__OL_CONV && L->win.kh == 1 && L->win.kw == 1 && L->groups == 1 && !L->b.bytes)
    dst = &L->b;
  if (!dst) return PX_OK;
  PX_CHECK(px__const_in(im, n, (size_t)ki, 1, cd, dst));
  if (L->kind == PX__OL_LN && mul) px__prefix(L, k->name, x->layer);
  *done = 1;
  return px__out(im, n, x->layer, x->c, x->h, x->w);
}

/* Mul of a map by a per-channel initializer ([C, 1, 1], [1, C, 1, 1]; [C]
 * on an NHWC view): ConvNeXt's layer scale, a trainable per-channel scale,
 * built as a depthwise 1 x 1 conv whose weight keeps the file's name. *done
 * = 0 when n is none. */
static px_status_t px__layer_scale(px__imp_t *im, const Onnx__NodeProto *n, int *done) {
  px__value_t *k, *x;
  *done = 0;
  const int ki = px__init_side(im, n, &k, &x);
  if (ki < 0 || x->h == 0 || x->sq || x->pad) return PX_OK;
  const Onnx__TensorProto *t = k->t;
  const int nd = (int)t->n_dims, lead = nd == 4;
  int ok = px__numel(t) == (size_t)x->c && x->c > 1;
  if (x->perm) ok = ok && nd == 1;
  else ok = ok && (nd == 3 || nd == 4) && t->dims[lead] == x->c;
  if (!ok) return PX_OK;
  int64_t dims[4] = {lead ? 1 : x->c, lead ? x->c : 1, 1, 1};
  px__onnx_layer_t *L;
  PX_CHECK(px__new_layer(im, n, PX__OL_CONV, &L));
  PX_CHECK(px__const_in(im, n, (size_t)ki, nd, dims, &L->w));
  L->in = x->layer;
  L->c_out = x->c;
  L->groups = x->c;
  L->win = (px_window_t){1, 1, 1, 1, 0, 0, 0, 0, 1, 1, 0, 0}; /* 1 x 1 */
  L->wname = k->name;
  px__prefix(L, k->name, im->g->nlayers - 1);
  im->g->nconv++;
  *done = 1;
  return px__out(im, n, im->g->nlayers - 1, x->c, x->h, x->w);
}

/* MatMul of an NHWC view [N, H, W, C] by a Linear's weight ([C, K], or the
 * transposed view of its [K, C]): a 1 x 1 conv with K filters (its bias the
 * Add after: px__ln_affine), the output an NHWC view again. */
static px_status_t px__matmul_nhwc(px__imp_t *im, const Onnx__NodeProto *n, px__value_t *x) {
  px__value_t *wv;
  PX_CHECK(px__in(im, n, 1, 1, &wv));
  const Onnx__TensorProto *t = wv->kind == PX__V_CONST ? wv->t : NULL;
  if (!t || t->n_dims != 2 || t->data_type != ONNX__TENSOR_PROTO__DATA_TYPE__FLOAT ||
      t->dims[wv->tr ? 1 : 0] != x->c || t->dims[wv->tr ? 0 : 1] < 1 ||
      t->dims[wv->tr ? 0 : 1] > 65536)
    return PX__NODE_FAIL(im, n, "only the product of an NHWC view [N, H, W, %d] and a constant "
                                "weight [%d, K] (a Linear on the channels) is supported", x->c,
                         x->c);
  px__onnx_layer_t *L;
  PX_CHECK(px__new_layer(im, n, PX__OL_CONV, &L));
  L->w.n = px__numel(t);
  L->w.bytes = t->has_raw_data ? t->raw_data.data : (const uint8_t *)t->float_data;
  L->transposed = !wv->tr;
  L->in = x->layer;
  L->c_out = (int)t->dims[wv->tr ? 0 : 1];
  L->win = (px_window_t){1, 1, 1, 1, 0, 0, 0, 0, 1, 1, 0, 0}; /* 1 x 1 */
  px__prefix(L, t->name ? t->name : "", im->g->nlayers - 1);
  im->g->nconv++;
  return px__out(im, n, im->g->nlayers - 1, L->c_out, x->h, x->w);
}

/* The output of a node that computes element-wise (every one but a
 * Transpose, which sets its own) is an NHWC view when an input is. */
static void px__perm_out(px__imp_t *im, const Onnx__NodeProto *n) {
  px__value_t *o = px__find(im, n->output[0]);
  if (!strcmp(n->op_type, "Transpose") || !o ||
      (o->kind != PX__V_ACT && o->kind != PX__V_PART && o->kind != PX__V_LNP))
    return;
  int p = 0;
  for (size_t i = 0; i < n->n_input; i++) {
    const px__value_t *v = px__find(im, n->input[i]);
    if (v && v->kind != PX__V_CONST && v->kind != PX__V_FREE) p |= v->perm;
  }
  o->perm = p;
}


/* ---- ShuffleNet: the channel shuffle, channel splits ------------------------------ */

/* A map value that a shuffle or a split may read: computed, NCHW, unpadded. */
static int px__plain_map(const px__value_t *x) {
  return x->kind == PX__V_ACT && x->layer >= 0 && x->h > 0 && !x->perm && !x->pad && !x->sq &&
         !x->flat;
}

/* dim as a Reshape's shape gives it: the value, or -1 (inferred, *infer
 * counts it); 0 copies the input's dimension i, which the caller passes as
 * copy. */
static int64_t px__shape_dim(int64_t v, int64_t copy, int *infer) {
  if (v == -1) {
    (*infer)++;
    return -1;
  }
  return v == 0 ? copy : v;
}

/* The channel shuffle as PyTorch writes it (ShuffleNetV2's channel_shuffle):
 * Reshape [N, C, H, W] -> [N, g, C / g, H, W], Transpose (0, 2, 1, 3, 4),
 * Reshape back to [N, C, H, W] (shapes folded from Shape, Gather, Div,
 * Unsqueeze, Concat). The first Reshape and the Transpose mark the value
 * (px__value_t.shuf, moving no data); the last makes a SHUFFLE layer, a
 * channel permutation: output channel i * g + j is input channel j * (C /
 * g) + i. *done = 0 when n is no such Reshape. */
static px_status_t px__shuffle_reshape(px__imp_t *im, const Onnx__NodeProto *n, int *done) {
  px__value_t *x, *s;
  int64_t sh[6];
  *done = 0;
  PX_CHECK(px__in(im, n, 0, 1, &x));
  if (n->n_input < 2 || x->kind != PX__V_ACT) return PX_OK;
  PX_CHECK(px__in(im, n, 1, 1, &s));
  const int k = s->kind == PX__V_CONST ? px__onnx_ints(s->t, sh, 6) : -1;
  const int batch = k >= 1 && (sh[0] == PX__ONNX_BATCH || sh[0] == 0);
  int inf = 0;
  if (!x->shuf && k == 5 && batch && px__plain_map(x)) {
    int64_t g = px__shape_dim(sh[1], x->c, &inf), cg = px__shape_dim(sh[2], x->h, &inf);
    if (sh[3] != x->h || sh[4] != x->w || inf > 1) return PX_OK;
    if (g == -1 && cg > 0 && x->c % cg == 0) g = x->c / cg;
    if (cg == -1 && g > 0 && x->c % g == 0) cg = x->c / g;
    if (g < 2 || cg < 1 || g * cg != x->c) return PX_OK;
    PX_CHECK(px__out(im, n, x->layer, x->c, x->h, x->w));
    px__find(im, n->output[0])->shuf = (int)g;
    *done = 1;
    return PX_OK;
  }
  if (!x->shuf) return PX_OK;
  *done = 1;
  const int g = x->shuf < 0 ? -x->shuf : x->shuf;
  int ok = k == 4 && batch && (sh[1] == x->c || sh[1] == -1) && sh[2] == x->h && sh[3] == x->w;
  if (!ok)
    return PX__NODE_FAIL(im, n, "a channel shuffle's 5-D view [N, %d, %d, %d, %d] must be "
                                "reshaped back to [N, %d, %d, %d]", x->shuf < 0 ? x->c / g : g,
                         x->shuf < 0 ? g : x->c / g, x->h, x->w, x->c, x->h, x->w);
  if (x->shuf > 0) return px__out(im, n, x->layer, x->c, x->h, x->w); /* not transposed: as it was */
  px__onnx_layer_t *L;
  const int in = x->layer, c = x->c, h = x->h, w = x->w;
  PX_CHECK(px__new_layer(im, n, PX__OL_SHUFFLE, &L));
  L->in = in;
  L->c_out = c;
  L->groups = g;
  return px__out(im, n, im->g->nlayers - 1, c, h, w);
}

/* Transpose (0, 2, 1, 3, 4) of a shuffle's [N, g, C / g, H, W] view. */
static px_status_t px__shuffle_transpose(px__imp_t *im, const Onnx__NodeProto *n, int *done) {
  px__value_t *x;
  *done = 0;
  PX_CHECK(px__in(im, n, 0, 1, &x));
  if (x->kind != PX__V_ACT || !x->shuf) return PX_OK;
  *done = 1;
  const Onnx__AttributeProto *pa = px__attr(n, "perm");
  static const int64_t want[5] = {0, 2, 1, 3, 4};
  int ok = x->shuf > 0 && pa && pa->n_ints == 5;
  for (int i = 0; ok && i < 5; i++) ok = pa->ints[i] == want[i];
  if (!ok)
    return PX__NODE_FAIL(im, n, "only the transpose (0, 2, 1, 3, 4) of a channel shuffle's 5-D "
                                "view (once) is supported");
  const int g = x->shuf;
  PX_CHECK(px__out(im, n, x->layer, x->c, x->h, x->w));
  px__find(im, n->output[0])->shuf = -g;
  return PX_OK;
}

/* Output o of n: channels [start, start + count) of the map x, a SLICE
 * layer (the identity when it takes them all). */
static px_status_t px__slice_out(px__imp_t *im, const Onnx__NodeProto *n, size_t o,
                                 const px__value_t *x, int64_t start, int64_t count) {
  px__value_t *v = n->output[o][0] ? px__find(im, n->output[o]) : NULL;
  if (!v) return PX_OK;
  const int in = x->layer, h = x->h, w = x->w, uses = v->uses;
  if (start == 0 && count == x->c) {
    *v = (px__value_t){v->name, PX__V_ACT, NULL, in, x->c, h, w, uses, 0, 0, 0, 0, 0, 0, 0, 0};
    return PX_OK;
  }
  px__onnx_layer_t *L;
  PX_CHECK(px__new_layer(im, n, PX__OL_SLICE, &L));
  L->in = in;
  L->c_out = (int)count;
  L->start = (int)start;
  *v = (px__value_t){v->name, PX__V_ACT, NULL, im->g->nlayers - 1, (int)count, h, w, uses, 0, 0,
                     0, 0, 0, 0, 0, 0};
  return PX_OK;
}

/* The channel axis of n (axis attribute, default def): 1 or -3 on a map. */
static int px__channel_axis(const Onnx__NodeProto *n, int64_t def) {
  const int64_t a = px__attr_i(n, "axis", def);
  return a == 1 || a == -3;
}

/* Split of a map on channels (x.chunk(2, dim=1), torch.split): sizes from
 * the 'split' input (opset 13) or attribute (11), or equal parts (opset
 * 18's num_outputs, or none given): one SLICE layer per output. */
static px_status_t px__op_split(px__imp_t *im, const Onnx__NodeProto *n) {
  px__value_t *x, *sv = NULL;
  int64_t sz[64];
  PX_CHECK(px__act_in(im, n, 0, 1, &x));
  const int no = (int)n->n_output;
  int k = -1;
  const Onnx__AttributeProto *sa = px__attr(n, "split");
  if (n->n_input > 1 && n->input[1][0]) {
    PX_CHECK(px__in(im, n, 1, 1, &sv));
    k = sv->kind == PX__V_CONST ? px__onnx_ints(sv->t, sz, 64) : -1;
  } else if (sa && sa->n_ints <= 64) {
    k = (int)sa->n_ints;
    memcpy(sz, sa->ints, (size_t)k * sizeof *sz);
  } else if (no >= 1 && no <= 64 && x->c % no == 0) {
    k = no;
    for (int i = 0; i < k; i++) sz[i] = x->c / no;
  }
  int64_t sum = 0;
  for (int i = 0; i < k; i++) sum += sz[i] >= 1 ? sz[i] : x->c + 1;
  if (!px__channel_axis(n, 0) || k != no || sum != x->c || !px__plain_map(x))
    return PX__NODE_FAIL(im, n, "only a Split of a computed map on channels (axis 1) into parts "
                                "of known sizes is supported");
  for (int i = 0, start = 0; i < k; start += (int)sz[i], i++)
    PX_CHECK(px__slice_out(im, n, (size_t)i, x, start, sz[i]));
  return PX_OK;
}

/* Slice of a map: channels [start, end) with step 1 on axis 1 (x[:, :c],
 * x[:, c:], as opset 13's chunk writes it) is a SLICE layer; of a constant,
 * folded (px__op_fold, which refuses any other activation). */
static px_status_t px__op_slice(px__imp_t *im, const Onnx__NodeProto *n) {
  px__value_t *x, *v[5] = {NULL, NULL, NULL, NULL, NULL};
  PX_CHECK(px__in(im, n, 0, 1, &x));
  if (x->kind != PX__V_ACT || x->h == 0 || x->sq || x->flat) return px__op_fold(im, n);
  int64_t st = 0, en = 0, ax = 0, sp = 1;
  int ok = n->n_input >= 3 && n->n_input <= 5;
  for (size_t i = 1; ok && i < n->n_input; i++) {
    PX_CHECK(px__in(im, n, i, i < 3, &v[i]));
    int64_t *dst = i == 1 ? &st : i == 2 ? &en : i == 3 ? &ax : &sp;
    ok = !v[i] || (v[i]->kind == PX__V_CONST && px__onnx_ints(v[i]->t, dst, 1) == 1);
  }
  ok = ok && (ax == 1 || ax == -3) && sp == 1;
  if (ok) {
    PX_CHECK(px__act_in(im, n, 0, 1, &x));
    st = st < 0 ? st + x->c : st > x->c ? x->c : st;
    en = en < 0 ? en + x->c : en > x->c ? x->c : en;
    ok = st >= 0 && en > st && px__plain_map(x);
  }
  if (!ok)
    return PX__NODE_FAIL(im, n, "only a Slice of a computed map's channels (axis 1, constant "
                                "bounds, step 1) is supported, or of constants");
  return px__slice_out(im, n, 0, x, st, en - st);
}

/* ---- the graph ------------------------------------------------------------------------ */

typedef px_status_t (*px__op_fn)(px__imp_t *, const Onnx__NodeProto *);

/* Pow and Sqrt: steps of a written-out LayerNorm only. */
static px_status_t px__op_lnstep(px__imp_t *im, const Onnx__NodeProto *n) {
  int done;
  PX_CHECK(px__ln_step(im, n, &done));
  if (done) return PX_OK;
  return PX__NODE_FAIL(im, n, "only as a step of a LayerNorm (Pow(x - mean, 2), Sqrt(var + "
                              "eps)) is it supported");
}

static const struct {
  const char *op;
  px__op_fn fn;
} px__op_table[] = {
    {"Conv", px__op_conv},       {"BatchNormalization", px__op_bn},
    {"Relu", px__op_relu},       {"Add", px__op_add},
    {"GlobalAveragePool", px__op_gap}, {"Flatten", px__op_flatten},
    {"Reshape", px__op_flatten}, {"Gemm", px__op_gemm},
    {"Dropout", px__op_pass},    {"Identity", px__op_pass},
    {"MaxPool", px__op_pool},    {"AveragePool", px__op_pool},
    {"Constant", px__op_constant}, {"Pad", px__op_pad},
    {"LeakyRelu", px__op_leaky}, {"Clip", px__op_clip},
    {"Sigmoid", px__op_sigmoid}, {"Mul", px__op_mul},
    {"Concat", px__op_concat},   {"MatMul", px__op_matmul},
    {"Tanh", px__op_tanh},       {"HardSigmoid", px__op_hardsigmoid},
    {"HardSwish", px__op_hardswish}, {"Gelu", px__op_gelu},
    {"Div", px__op_div},         {"Erf", px__op_erf},
    {"Sub", px__op_sub},         {"ReduceMean", px__op_reducemean},
    {"Shape", px__op_shape},     {"Gather", px__op_fold},
    {"Squeeze", px__op_squeeze}, {"Unsqueeze", px__op_squeeze},
    {"Cast", px__op_fold},       {"Slice", px__op_slice},
    {"Split", px__op_split},
    {"ConstantOfShape", px__op_fold},
    {"Transpose", px__op_transpose}, {"LayerNormalization", px__op_ln},
    {"Pow", px__op_lnstep},      {"Sqrt", px__op_lnstep},
};

static px_status_t px__node(px__imp_t *im, const Onnx__NodeProto *n) {
  if (n->domain && n->domain[0] && strcmp(n->domain, "ai.onnx"))
    return PX__NODE_FAIL(im, n, "operator domain '%s' is not supported", n->domain);
  /* every operator's first output is its result; the names pass defined it */
  if (n->n_output < 1 || !n->output[0][0] || !px__find(im, n->output[0]))
    return PX__NODE_FAIL(im, n, "the node has no (named) output");
  for (size_t i = 0; i < sizeof px__op_table / sizeof px__op_table[0]; i++)
    if (n->op_type && !strcmp(n->op_type, px__op_table[i].op)) {
      PX_CHECK(px__op_table[i].fn(im, n));
      px__perm_out(im, n);
      return PX_OK;
    }
  return PX__NODE_FAIL(im, n, "operator %s is not supported (supported: %s)",
                       n->op_type ? n->op_type : "(none)", px__onnx_ops);
}

/* An initializer's data are checked here, once: float32 (or int64 for a
 * Reshape's shape), no external data, the byte count the dims promise. */
static px_status_t px__check_init(px__imp_t *im, const Onnx__TensorProto *t) {
  const char *nm = t->name ? t->name : "";
  size_t numel = 1;
  if (t->n_dims > 4)
    return px_set_error(PX_ERR_INVALID, "%s: initializer '%s' has %zu dimensions (at most 4)",
                        im->file, nm, t->n_dims);
  for (size_t d = 0; d < t->n_dims; d++) {
    if (t->dims[d] < 0 || t->dims[d] > (int64_t)PX__ONNX_MAX_NUMEL ||
        (numel *= (size_t)t->dims[d]) > PX__ONNX_MAX_NUMEL)
      return px_set_error(PX_ERR_INVALID, "%s: initializer '%s' has more than %u elements",
                          im->file, nm, PX__ONNX_MAX_NUMEL);
  }
  if (t->data_location == ONNX__TENSOR_PROTO__DATA_LOCATION__EXTERNAL || t->n_external_data)
    return px_set_error(PX_ERR_INVALID, "%s: initializer '%s' keeps its data in an external file "
                        "(export the model with its weights inside)", im->file, nm);
  size_t esz = t->data_type == ONNX__TENSOR_PROTO__DATA_TYPE__FLOAT   ? 4
               : t->data_type == ONNX__TENSOR_PROTO__DATA_TYPE__INT64 ? 8
                                                                       : 0;
  if (!esz)
    return px_set_error(PX_ERR_INVALID, "%s: initializer '%s' has data type %d (float32 "
                        "weights and int64 shapes are supported)", im->file, nm, t->data_type);
  size_t have = t->has_raw_data ? t->raw_data.len / esz
                : esz == 4      ? t->n_float_data
                                : t->n_int64_data;
  if ((t->has_raw_data && t->raw_data.len != numel * esz) || have != numel)
    return px_set_error(PX_ERR_INVALID, "%s: initializer '%s' holds %zu values for %zu elements",
                        im->file, nm, have, numel);
  return PX_OK;
}

static int px__dim(const Onnx__ValueInfoProto *vi, size_t d) {
  const Onnx__TypeProto *ty = vi->type;
  if (!ty || ty->value_case != ONNX__TYPE_PROTO__VALUE_TENSOR_TYPE || !ty->tensor_type ||
      !ty->tensor_type->shape || d >= ty->tensor_type->shape->n_dim)
    return -1;
  const Onnx__TensorShapeProto__Dimension *dm = ty->tensor_type->shape->dim[d];
  if (dm->value_case != ONNX__TENSOR_SHAPE_PROTO__DIMENSION__VALUE_DIM_VALUE) return 0;
  return dm->dim_value >= 1 && dm->dim_value <= 65536 ? (int)dm->dim_value : -1;
}

static px_status_t px__opset(px__imp_t *im, const Onnx__ModelProto *mp) {
  for (size_t i = 0; i < mp->n_opset_import; i++) {
    const Onnx__OperatorSetIdProto *o = mp->opset_import[i];
    if (o->domain && o->domain[0] && strcmp(o->domain, "ai.onnx")) continue;
    if (o->version < 11 || o->version > 20)
      return px_set_error(PX_ERR_INVALID, "%s: opset %lld: opsets 11 to 20 are supported",
                          im->file, (long long)o->version);
    return PX_OK;
  }
  return px_set_error(PX_ERR_INVALID, "%s: no opset of the default ONNX domain", im->file);
}

/* Every name (initializers, the one input, node outputs) into the table,
 * and the number of readers of each. */
static px_status_t px__names(px__imp_t *im, const Onnx__GraphProto *gp) {
  px__value_t *v;
  for (size_t i = 0; i < gp->n_initializer; i++) {
    PX_CHECK(px__check_init(im, gp->initializer[i]));
    PX_CHECK(px__define(im, gp->initializer[i]->name, &v));
    v->kind = PX__V_CONST;
    v->t = gp->initializer[i];
  }
  const Onnx__ValueInfoProto *in = NULL;
  for (size_t i = 0; i < gp->n_input; i++) {
    if (px__find(im, gp->input[i]->name)) continue; /* an initializer listed as an input */
    if (in)
      return px_set_error(PX_ERR_INVALID, "%s: the graph has more than one input ('%s', '%s')",
                          im->file, in->name, gp->input[i]->name);
    in = gp->input[i];
  }
  if (!in) return px_set_error(PX_ERR_INVALID, "%s: the graph has no input", im->file);
  px__onnx_graph_t *g = im->g;
  g->in_c = px__dim(in, 1);
  g->in_h = px__dim(in, 2);
  g->in_w = px__dim(in, 3);
  if (px__dim(in, 4) != -1 || g->in_c < 1 || g->in_h < 1 || g->in_w < 1)
    return px_set_error(PX_ERR_INVALID, "%s: input '%s' must be 4-D [N, C, H, W] with fixed C, "
                        "H and W", im->file, in->name);
  PX_CHECK(px__define(im, in->name, &v));
  *v = (px__value_t){in->name, PX__V_ACT, NULL, -1, g->in_c, g->in_h, g->in_w, 0, 0, 0, 0, 0, 0,
                     0, 0, 0};
  for (size_t k = 0; k < gp->n_node; k++)
    for (size_t o = 0; o < gp->node[k]->n_output; o++)
      if (gp->node[k]->output[o][0]) PX_CHECK(px__define(im, gp->node[k]->output[o], &v));
  for (size_t k = 0; k < gp->n_node; k++)
    for (size_t i = 0; i < gp->node[k]->n_input; i++)
      if ((v = px__find(im, gp->node[k]->input[i]))) v->uses++;
  for (size_t i = 0; i < gp->n_output; i++)
    if ((v = px__find(im, gp->output[i]->name))) v->uses++;
  return PX_OK;
}

/* The layers of g reading layer k's output. */
static int px__readers(const px__onnx_graph_t *g, int k) {
  int r = 0;
  for (int i = 0; i < g->nlayers; i++) r += (g->layers[i].in == k) + (g->layers[i].in2 == k);
  return r;
}

/* A classifier of convolutions (SqueezeNet's Conv, ReLU, global average
 * pooling, Flatten): the graph's output out is the last layer, a GAP
 * flattened to [N, classes], of a conv's output through standalone
 * activations, each link read by the next alone. Marks that conv's
 * filters as the classes (left out of pruning, as a final Gemm is) and
 * returns 1; 0 when out is not such an output. */
static int px__conv_classifier(px__onnx_graph_t *g, const px__value_t *out) {
  int k = g->nlayers - 1;
  if (k < 1 || out->kind != PX__V_ACT || out->layer != k || out->h != 0 || out->sq ||
      out->perm || out->flat || g->layers[k].kind != PX__OL_GAP)
    return 0;
  int c = g->layers[k].in;
  while (c >= 0 && g->layers[c].kind == PX__OL_ACT && px__readers(g, c) == 1)
    c = g->layers[c].in;
  if (c < 0 || g->layers[c].kind != PX__OL_CONV || g->layers[c].groups != 1 ||
      px__readers(g, c) != 1)
    return 0;
  g->layers[c].logits = 1;
  return 1;
}

static px_status_t px__lower(px__imp_t *im, const Onnx__ModelProto *mp) {
  const Onnx__GraphProto *gp = mp->graph;
  PX_CHECK(px__opset(im, mp));
  if (!gp) return px_set_error(PX_ERR_INVALID, "%s: the model has no graph", im->file);
  if (gp->n_node < 1 || gp->n_node > PX__ONNX_MAX_NODES)
    return px_set_error(PX_ERR_INVALID, "%s: %zu nodes (1 to %d are accepted)", im->file,
                        gp->n_node, PX__ONNX_MAX_NODES);
  size_t names = gp->n_initializer + gp->n_input;
  for (size_t k = 0; k < gp->n_node; k++) names += gp->node[k]->n_output;
  if (names > PX__ONNX_MAX_VALUES)
    return px_set_error(PX_ERR_INVALID, "%s: more than %d named tensors", im->file,
                        PX__ONNX_MAX_VALUES);
  for (im->cap = 64; im->cap < 2 * (int)names; im->cap *= 2) {}
  im->slot = px_calloc((size_t)im->cap, sizeof *im->slot, "onnx.names");
  im->v = px_calloc(names + 1, sizeof *im->v, "onnx.values");
  if (!im->slot || !im->v) return PX_ERR_NOMEM;
  PX_CHECK(px__names(im, gp));
  for (size_t k = 0; k < gp->n_node; k++) PX_CHECK(px__node(im, gp->node[k]));
  px__onnx_graph_t *g = im->g;
  px__value_t *out = gp->n_output == 1 ? px__find(im, gp->output[0]->name) : NULL;
  const px__onnx_layer_t *last = g->nlayers ? &g->layers[g->nlayers - 1] : NULL;
  if (!out || !last ||
      ((last->kind != PX__OL_FC || out->kind != PX__V_ACT || out->layer != g->nlayers - 1) &&
       !px__conv_classifier(g, out))) {
    const Onnx__NodeProto *src = NULL; /* the node giving the (first) output */
    for (size_t k = 0; gp->n_output && k < gp->n_node; k++)
      if (gp->node[k]->n_output && !strcmp(gp->node[k]->output[0], gp->output[0]->name))
        src = gp->node[k];
    if (!src || gp->n_output != 1)
      return px_set_error(PX_ERR_INVALID, "%s: the graph must have one output, the logits of a "
                          "final Gemm (the classifier); it has %zu", im->file, gp->n_output);
    return PX__NODE_FAIL(im, src, "the graph's output must be the logits of a final Gemm or "
                                  "MatMul (the classifier), or a classifier of convolutions "
                                  "(SqueezeNet's: a Conv, activations, a global average pooling "
                                  "flattened to [N, classes], each read by the next alone), not "
                                  "this node's");
  }
  g->classes = last->c_out;
  return PX_OK;
}

/* The bound on the memory an import takes (the file, then the parsed
 * initializers beside it): PX_ONNX_MAX_BYTES, bytes with an optional K, M
 * or G (KiB, MiB, GiB), or PX__ONNX_IMPORT_BYTES. PX_ERR_INVALID for a
 * value that is not one. */
static px_status_t px__import_bound(const char *path, uint64_t *out) {
  *out = PX__ONNX_IMPORT_BYTES;
  const char *e = getenv("PX_ONNX_MAX_BYTES");
  if (!e || !e[0]) return PX_OK;
  char *end = NULL;
  errno = 0;
  unsigned long long v = e[0] >= '0' && e[0] <= '9' ? strtoull(e, &end, 10) : 0;
  int shift = !end ? -1 : !end[0] ? 0 : !strcmp(end, "K") ? 10 : !strcmp(end, "M") ? 20
              : !strcmp(end, "G") ? 30 : -1;
  if (errno || v == 0 || shift < 0 || v > (UINT64_MAX >> shift))
    return px_set_error(PX_ERR_INVALID, "%s: PX_ONNX_MAX_BYTES = '%.40s': expected a positive "
                        "number of bytes, optionally with K, M or G (KiB, MiB, GiB)", path, e);
  *out = (uint64_t)v << shift;
  return PX_OK;
}

/* protobuf-c's allocations, through px_malloc. While a file is unpacked,
 * data is its budget: what the import bound leaves beside the file. The
 * parse is counted, not the initializers alone (every one, used or not, is
 * parsed and held), since a hostile file's can take several times its size
 * (packed one-byte varints become 8 bytes each); over the budget the unpack
 * fails and the import says why. */
typedef struct {
  uint64_t left;
  int over;
} px__pb_budget_t;

static void *px__pb_malloc(void *data, size_t size) {
  px__pb_budget_t *b = data;
  if (b && size > b->left) {
    b->over = 1;
    return NULL;
  }
  if (b) b->left -= size;
  return px_malloc(size ? size : 1, "onnx.proto");
}

static void px__pb_free(void *data, void *p) {
  (void)data;
  px_free(p);
}

static ProtobufCAllocator px__pb_alloc = {px__pb_malloc, px__pb_free, NULL};

/* The file's bytes, unpacked within the import bound. */
static px_status_t px__unpack(const char *path, const uint8_t *buf, size_t len,
                              Onnx__ModelProto **out) {
  uint64_t bound;
  PX_CHECK(px__import_bound(path, &bound));
  px__pb_budget_t b = {bound - len, 0}; /* the file is within the bound (px__read_file) */
  ProtobufCAllocator a = {px__pb_malloc, px__pb_free, &b};
  *out = onnx__model_proto__unpack(&a, len, buf);
  if (*out) return PX_OK;
  if (b.over)
    return px_set_error(PX_ERR_INVALID, "%s: the import takes more than PX_ONNX_MAX_BYTES = "
                        "%llu bytes (the file's %zu and, parsed, its tensors, initializers used "
                        "or not)", path, (unsigned long long)bound, len);
  return px_set_error(PX_ERR_INVALID, "%s: not an ONNX model (the protobuf does not parse)", path);
}

static px_status_t px__read_file(const char *path, uint8_t **buf, size_t *len) {
  FILE *f = fopen(path, "rb");
  if (!f) return px_set_error(PX_ERR_IO, "%s: %s", path, strerror(errno));
  struct stat sb;
  if (fstat(fileno(f), &sb) != 0 || !S_ISREG(sb.st_mode) || sb.st_size < 1 ||
      (uint64_t)sb.st_size > PX__ONNX_MAX_BYTES) {
    fclose(f);
    return px_set_error(PX_ERR_IO, "%s: not a regular file of 1 byte to %u MiB", path,
                        PX__ONNX_MAX_BYTES >> 20);
  }
  uint64_t bound;
  px_status_t st = px__import_bound(path, &bound);
  if (st == PX_OK && (uint64_t)sb.st_size > bound)
    st = px_set_error(PX_ERR_INVALID, "%s: the file alone holds %lld bytes, more than "
                      "PX_ONNX_MAX_BYTES = %llu", path, (long long)sb.st_size,
                      (unsigned long long)bound);
  if (st != PX_OK) {
    fclose(f);
    return st;
  }
  *len = (size_t)sb.st_size;
  *buf = px_malloc(*len, "onnx.file");
  if (!*buf) {
    fclose(f);
    return PX_ERR_NOMEM;
  }
  size_t got = fread(*buf, 1, *len, f);
  fclose(f);
  if (got != *len) {
    px_free(*buf);
    return px_set_error(PX_ERR_IO, "%s: short read", path);
  }
  return PX_OK;
}

/* The SHA-256 of the bytes read, as 64 lowercase hex digits, checked
 * against want (NULL or "": anything). */
static px_status_t px__digest(const char *path, const uint8_t *buf, size_t len, const char *want,
                              char hex[65]) {
  unsigned char d[32];
  unsigned int n = 0;
  if (!EVP_Digest(buf, len, d, &n, EVP_sha256(), NULL) || n != sizeof d)
    return px_set_error(PX_ERR_INTERNAL, "%s: SHA-256 failed (OpenSSL)", path);
  for (int i = 0; i < 32; i++) snprintf(hex + 2 * i, 3, "%02x", d[i]);
  if (want && want[0] && strcmp(want, hex))
    return px_set_error(PX_ERR_INVALID, "%s changed since the job was submitted (SHA-256 "
                        "%.12s... then, %.12s... now): nothing trained; submit the job again "
                        "to train the file as it is now", path, want, hex);
  return PX_OK;
}

px_status_t px__onnx_load(const char *path, const char *sha256, px__onnx_graph_t **out) {
  PX_REQUIRE(path && path[0] && out, "px__onnx_load: no file");
  *out = NULL;
  uint8_t *buf = NULL;
  size_t len = 0;
  char hex[65] = "";
  PX_CHECK(px__read_file(path, &buf, &len));
  Onnx__ModelProto *mp = NULL;
  px_status_t st = sha256 ? px__digest(path, buf, len, sha256, hex) : PX_OK;
  if (st == PX_OK) st = px__unpack(path, buf, len, &mp);
  px_free(buf);
  if (st != PX_OK) return st;
  px__imp_t im = {path, NULL, 0, 0, NULL, NULL, 0};
  im.g = px_calloc(1, sizeof *im.g, "onnx.graph");
  if (!im.g) {
    onnx__model_proto__free_unpacked(mp, &px__pb_alloc);
    return PX_ERR_NOMEM;
  }
  im.g->proto = mp;
  memcpy(im.g->sha256, hex, sizeof hex);
  st = px__lower(&im, mp);
  PX_FREE_ALL(im.slot, im.v);
  if (st < 0) {
    px__onnx_free(im.g);
    return st;
  }
  *out = im.g;
  return PX_OK;
}

void px__onnx_free(px__onnx_graph_t *g) {
  if (!g) return;
  if (g->proto) onnx__model_proto__free_unpacked(g->proto, &px__pb_alloc);
  while (g->folds) {
    px__onnx_fold_t *f = g->folds;
    g->folds = f->next;
    px_free(f);
  }
  PX_FREE_ALL(g->layers, g);
}

px_status_t px_model_onnx_check(const char *path, px_model_onnx_info_t *info) {
  PX_REQUIRE(path && path[0], "model.onnx: no file given");
  px__onnx_graph_t *g;
  PX_CHECK(px__onnx_load(path, info ? "" : NULL, &g)); /* "": the sum, unchecked */
  if (info) {
    *info = (px_model_onnx_info_t){g->in_c, g->in_h, g->in_w, g->classes, g->nconv, g->nlayers,
                                   ""};
    memcpy(info->sha256, g->sha256, sizeof info->sha256);
  }
  px__onnx_free(g);
  return PX_OK;
}
