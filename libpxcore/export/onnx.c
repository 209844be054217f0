/* ONNX export of a PruneX model (dense or compact), written with protobuf-c
 * from the onnx.proto that Debian's libonnx-dev ships (generated into the
 * build tree at build time; no C++, no ONNX runtime).
 *
 * The graph follows the model's nodes one to one: Conv (no bias), then
 * BatchNormalization (inference form, the model's epsilon) and a Relu where the
 * model fuses one, Add + Relu for the residual joins, GlobalAveragePool +
 * Flatten, and Gemm (transB) for the classifier. Weights are initializers
 * under the checkpoint's PyTorch names, as raw little-endian float32. Every
 * message is allocated from one list freed at the end, so the code builds
 * the tree without ownership bookkeeping.
 *
 * For a data set we know (Fashion-MNIST, CIFAR-10) the graph starts with the
 * training loader's preprocessing: Pad with 0 to the training size, then Sub
 * mean, Div std (the loader pads the bytes before normalising, so a padding
 * pixel reaches the model as -mean/std, -0.81 for Fashion-MNIST, not as 0).
 * The file then takes what every
 * user has, raw pixels in [0, 1] at the data set's own size, and cannot be
 * fed the way that silently costs accuracy (normalise, then pad with 0). */
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "nn/px_graph_ops.h"
#include "onnx.pb-c.h"
#include "prunex/data.h"
#include "prunex/export.h"
#include "prunex/text.h"
#include "px_check.h"

typedef struct {
  void **ptrs;
  int n, cap;
  int failed;
} px__pool_t;

static void *px__alloc(px__pool_t *p, size_t bytes) {
  if (p->failed) return NULL;
  if (p->n == p->cap) {
    int cap = p->cap ? 2 * p->cap : 256;
    void **np = px_realloc(p->ptrs, (size_t)cap * sizeof *np, "onnx.pool");
    if (!np) {
      p->failed = 1;
      return NULL;
    }
    p->ptrs = np;
    p->cap = cap;
  }
  void *v = px_calloc(1, bytes ? bytes : 1, "onnx.msg");
  if (!v) {
    p->failed = 1;
    return NULL;
  }
  p->ptrs[p->n++] = v;
  return v;
}

static char *px__str(px__pool_t *p, const char *s) {
  size_t n = strlen(s) + 1;
  char *d = px__alloc(p, n);
  if (d) memcpy(d, s, n);
  return d;
}

static void px__pool_free(px__pool_t *p) {
  for (int i = 0; i < p->n; i++) px_free(p->ptrs[i]);
  px_free(p->ptrs);
}

/* A growable array of message pointers inside the pool. */
typedef struct {
  void **v;
  size_t n, cap;
} px__vec_t;

static void px__push(px__pool_t *p, px__vec_t *vec, void *item) {
  if (!item) p->failed = 1;
  if (p->failed) return;
  if (vec->n == vec->cap) {
    size_t cap = vec->cap ? 2 * vec->cap : 64;
    void **nv = px__alloc(p, cap * sizeof *nv);
    if (!nv) return;
    if (vec->n) memcpy(nv, vec->v, vec->n * sizeof *nv);
    vec->v = nv;
    vec->cap = cap;
  }
  vec->v[vec->n++] = item;
}

/* An attribute of the given type (its value set by the caller), or NULL. */
static Onnx__AttributeProto *px__attr(px__pool_t *p, const char *name,
                                      Onnx__AttributeProto__AttributeType type) {
  Onnx__AttributeProto *a = px__alloc(p, sizeof *a);
  if (!a) return NULL;
  onnx__attribute_proto__init(a);
  a->name = px__str(p, name);
  a->has_type = 1;
  a->type = type;
  return a;
}

static Onnx__AttributeProto *px__attr_int(px__pool_t *p, const char *name, int64_t v) {
  Onnx__AttributeProto *a = px__attr(p, name, ONNX__ATTRIBUTE_PROTO__ATTRIBUTE_TYPE__INT);
  if (a) a->has_i = 1, a->i = v;
  return a;
}

static Onnx__AttributeProto *px__attr_float(px__pool_t *p, const char *name, float v) {
  Onnx__AttributeProto *a = px__attr(p, name, ONNX__ATTRIBUTE_PROTO__ATTRIBUTE_TYPE__FLOAT);
  if (a) a->has_f = 1, a->f = v;
  return a;
}

static Onnx__AttributeProto *px__attr_str(px__pool_t *p, const char *name, const char *v) {
  Onnx__AttributeProto *a = px__attr(p, name, ONNX__ATTRIBUTE_PROTO__ATTRIBUTE_TYPE__STRING);
  if (!a) return NULL;
  a->has_s = 1;
  a->s.data = (uint8_t *)px__str(p, v);
  a->s.len = strlen(v);
  return a;
}

static Onnx__AttributeProto *px__attr_ints(px__pool_t *p, const char *name, int n, int64_t v) {
  Onnx__AttributeProto *a = px__attr(p, name, ONNX__ATTRIBUTE_PROTO__ATTRIBUTE_TYPE__INTS);
  int64_t *ints = px__alloc(p, (size_t)n * sizeof *ints);
  if (!a || !ints) return NULL;
  for (int i = 0; i < n; i++) ints[i] = v;
  a->n_ints = (size_t)n;
  a->ints = ints;
  return a;
}

/* An INTS attribute of the n values v. */
static Onnx__AttributeProto *px__attr_list(px__pool_t *p, const char *name, int n,
                                           const int64_t *v) {
  Onnx__AttributeProto *a = px__attr_ints(p, name, n, 0);
  if (a) memcpy(a->ints, v, (size_t)n * sizeof *v);
  return a;
}

/* A node with up to 5 inputs and one output; attributes pushed after. */
static Onnx__NodeProto *px__node(px__pool_t *p, px__vec_t *nodes, const char *op, const char *name,
                                 const char *const *in, int nin, const char *out) {
  Onnx__NodeProto *n = px__alloc(p, sizeof *n);
  char **ins = px__alloc(p, (size_t)nin * sizeof *ins), **outs = px__alloc(p, sizeof *outs);
  if (!n || !ins || !outs) return NULL;
  onnx__node_proto__init(n);
  n->op_type = px__str(p, op);
  n->name = px__str(p, name);
  for (int i = 0; i < nin; i++) ins[i] = px__str(p, in[i]);
  outs[0] = px__str(p, out);
  n->n_input = (size_t)nin;
  n->input = ins;
  n->n_output = 1;
  n->output = outs;
  px__push(p, nodes, n);
  return n;
}

static void px__node_attrs(px__pool_t *p, Onnx__NodeProto *n, px__vec_t *attrs) {
  if (!n || p->failed) return;
  n->n_attribute = attrs->n;
  n->attribute = (Onnx__AttributeProto **)attrs->v;
}

/* An initializer from host data (float32 or int64, little-endian). */
static void px__initializer_host(px__pool_t *p, px__vec_t *inits, const char *name, int32_t type,
                                 int nd, const int64_t *dims, const void *data, size_t bytes) {
  Onnx__TensorProto *tp = px__alloc(p, sizeof *tp);
  int64_t *dv = px__alloc(p, (size_t)nd * sizeof *dv);
  uint8_t *raw = px__alloc(p, bytes);
  if (!tp || !dv || !raw) return;
  memcpy(raw, data, bytes);
  memcpy(dv, dims, (size_t)nd * sizeof *dv);
  onnx__tensor_proto__init(tp);
  tp->n_dims = (size_t)nd;
  tp->dims = dv;
  tp->has_data_type = 1;
  tp->data_type = type;
  tp->name = px__str(p, name);
  tp->has_raw_data = 1;
  tp->raw_data.len = bytes;
  tp->raw_data.data = raw;
  px__push(p, inits, tp);
}

/* A float32 initializer holding tensor t (read back from its device). */
static px_status_t px__initializer(px__pool_t *p, px__vec_t *inits, const char *name,
                                   const px_tensor_t *t) {
  const size_t bytes = px_tensor_numel(t) * sizeof(float);
  void *host = px_malloc(bytes ? bytes : 1, "onnx initializer");
  if (!host) return PX_ERR_NOMEM;
  /* little-endian hosts only, as safetensors */
  px_status_t st = px_tensor_copy_to_host(t, host, bytes);
  if (st == PX_OK)
    px__initializer_host(p, inits, name, ONNX__TENSOR_PROTO__DATA_TYPE__FLOAT, t->ndim, t->dims,
                         host, bytes);
  px_free(host);
  PX_CHECK(st);
  return p->failed ? PX_ERR_NOMEM : PX_OK;
}

/* float32 tensor value info with dims (a negative dim is the symbol "N"). */
static Onnx__ValueInfoProto *px__value_info(px__pool_t *p, const char *name, int nd,
                                            const int64_t *dims) {
  Onnx__ValueInfoProto *vi = px__alloc(p, sizeof *vi);
  Onnx__TypeProto *tp = px__alloc(p, sizeof *tp);
  Onnx__TypeProto__Tensor *tt = px__alloc(p, sizeof *tt);
  Onnx__TensorShapeProto *sh = px__alloc(p, sizeof *sh);
  Onnx__TensorShapeProto__Dimension **dv = px__alloc(p, (size_t)nd * sizeof *dv);
  if (!vi || !tp || !tt || !sh || !dv) return NULL;
  onnx__value_info_proto__init(vi);
  onnx__type_proto__init(tp);
  onnx__type_proto__tensor__init(tt);
  onnx__tensor_shape_proto__init(sh);
  for (int d = 0; d < nd; d++) {
    Onnx__TensorShapeProto__Dimension *dim = px__alloc(p, sizeof *dim);
    if (!dim) return NULL;
    onnx__tensor_shape_proto__dimension__init(dim);
    if (dims[d] < 0) {
      dim->value_case = ONNX__TENSOR_SHAPE_PROTO__DIMENSION__VALUE_DIM_PARAM;
      dim->dim_param = px__str(p, "N");
    } else {
      dim->value_case = ONNX__TENSOR_SHAPE_PROTO__DIMENSION__VALUE_DIM_VALUE;
      dim->dim_value = dims[d];
    }
    dv[d] = dim;
  }
  sh->n_dim = (size_t)nd;
  sh->dim = dv;
  tt->has_elem_type = 1;
  tt->elem_type = ONNX__TENSOR_PROTO__DATA_TYPE__FLOAT;
  tt->shape = sh;
  tp->value_case = ONNX__TYPE_PROTO__VALUE_TENSOR_TYPE;
  tp->tensor_type = tt;
  vi->name = px__str(p, name);
  vi->type = tp;
  return vi;
}

static Onnx__StringStringEntryProto *px__kv(px__pool_t *p, const char *k, const char *v) {
  Onnx__StringStringEntryProto *e = px__alloc(p, sizeof *e);
  if (!e) return NULL;
  onnx__string_string_entry_proto__init(e);
  e->key = px__str(p, k);
  e->value = px__str(p, v);
  return e;
}

/* The training loader's preprocessing of a data set PruneX reads. */
typedef struct {
  const char *name;          /* as in a job spec's dataset.name */
  const char *title;
  int channels, height, width; /* the data set's own image size */
  const float *mean, *std;   /* per channel, pixel/255 units (prunex/data.h) */
  const char *channel_order;
  int num_classes;
  const char *classes;       /* label 0, 1, ... comma-separated */
  /* an image folder's (px_onnx_info_t): the file's strings, resize/crop; NULL/0 otherwise */
  const char *mean_s, *std_s;
  int resize, crop;
  float own_mean[3], own_std[3]; /* what mean/std point at for a folder */
} px__onnx_dataset_t;

static const px__onnx_dataset_t px__onnx_datasets[] = {
    {"fashion-mnist", "Fashion-MNIST", 1, 28, 28, px_fashion_mnist_mean, px_fashion_mnist_std,
     "grey", 10, "T-shirt/top,Trouser,Pullover,Dress,Coat,Sandal,Shirt,Sneaker,Bag,Ankle boot",
     NULL, NULL, 0, 0, {0}, {0}},
    {"cifar10", "CIFAR-10", 3, 32, 32, px_cifar10_mean, px_cifar10_std, "R,G,B", 10,
     "airplane,automobile,bird,cat,deer,dog,frog,horse,ship,truck", NULL, NULL, 0, 0, {0}, {0}},
};

/* n comma-separated floats of s (a file's "input_mean"/"input_std") into
 * v; 0, or -1 when s holds another count or a value that is not a finite
 * number (or, with positive, not > 0). */
static int px__parse_floats(const char *s, float *v, int n, int positive) {
  for (int i = 0; i < n; i++) {
    char *end;
    errno = 0;
    double x = strtod(s, &end);
    if (end == s || errno || !isfinite(x) || (positive && !(x > 0.0)) ||
        *end != (i + 1 < n ? ',' : '\0'))
      return -1;
    v[i] = (float)x;
    s = end + 1;
  }
  return 0;
}

/* Labels in an escaped comma-separated class list. */
static int px__count_classes(const char *s) {
  int n = 1;
  for (; *s; s++) {
    if (*s == '\\' && s[1]) s++;
    else if (*s == ',') n++;
  }
  return n;
}

/* An image folder's preprocessing from info (the model file's input
 * contract) into *d; NULL without one, NULL with *err set when it is
 * malformed or does not fit cfg's model. */
static const px__onnx_dataset_t *px__onnx_folder(const px_onnx_info_t *info,
                                                 const px_model_config_t *cfg,
                                                 px__onnx_dataset_t *d, px_status_t *err) {
  if (!info || !info->mean) return NULL;
  const char *src = info->source ? info->source : "the model file";
  int c = 0, h = 0, w = 0, used = 0;
  memset(d, 0, sizeof *d);
  if (!info->input_size || sscanf(info->input_size, "%dx%dx%d%n", &c, &h, &w, &used) != 3 ||
      info->input_size[used] || (c != 1 && c != 3) || h != w || h < 1 ||
      h > PX_IMAGE_MAX_SIZE || c != cfg->in_channels || h != cfg->height || w != cfg->width) {
    *err = px_set_error(PX_ERR_FORMAT,
                        "ONNX export: %s: metadata input_size '%s' is not the model's %d x %d x %d "
                        "(CxHxW, C 1 or 3, H == W)", src,
                        info->input_size ? info->input_size : "(none)", cfg->in_channels,
                        cfg->height, cfg->width);
    return NULL;
  }
  float mean[3], std[3];
  if (px__parse_floats(info->mean, mean, c, 0) ||
      px__parse_floats(info->std ? info->std : "", std, c, 1)) {
    *err = px_set_error(PX_ERR_FORMAT,
                        "ONNX export: %s: metadata input_mean '%s' / input_std '%s': expected %d "
                        "comma-separated finite numbers each, std > 0", src, info->mean,
                        info->std ? info->std : "(none)", c);
    return NULL;
  }
  *d = (px__onnx_dataset_t){"folder", "image folder", c, h, w, d->own_mean, d->own_std,
                            c == 1 ? "grey" : "R,G,B", 0, info->classes, info->mean, info->std,
                            info->resize > 0 ? info->resize : h, info->crop > 0 ? info->crop : h,
                            {0}, {0}};
  memcpy(d->own_mean, mean, sizeof mean);
  memcpy(d->own_std, std, sizeof std);
  if (info->classes) d->num_classes = px__count_classes(info->classes);
  return d;
}

/* The preprocessing the graph does for cfg's model trained on ds, or NULL
 * (*err set) when ds cannot feed it; NULL (no error) for a data set we do
 * not know (synthetic, unnamed: the input stays the normalised tensor). */
static const px__onnx_dataset_t *px__onnx_dataset(const char *ds, const px_model_config_t *cfg,
                                                  px_status_t *err) {
  *err = PX_OK;
  if (!ds) return NULL;
  for (size_t i = 0; i < sizeof px__onnx_datasets / sizeof px__onnx_datasets[0]; i++) {
    const px__onnx_dataset_t *d = &px__onnx_datasets[i];
    if (strcmp(ds, d->name)) continue;
    if (cfg->in_channels != d->channels || cfg->height < d->height || cfg->width < d->width ||
        (cfg->height - d->height) % 2 || (cfg->width - d->width) % 2 ||
        cfg->height - d->height != cfg->width - d->width) {
      *err = px_set_error(PX_ERR_INVALID,
                          "ONNX export: the model takes %d x %d x %d inputs, which %s's %d x %d x "
                          "%d images cannot be padded to (wrong data set for this model?)",
                          cfg->in_channels, cfg->height, cfg->width, ds, d->channels, d->height,
                          d->width);
      return NULL;
    }
    return d;
  }
  return NULL;
}

/* Pad (constant 0) to the model's size, Sub mean, Div std: "input" (raw
 * pixels in [0, 1] at the data set's size) -> "normalized". */
static void px__onnx_preprocess(px__pool_t *p, px__vec_t *nodes, px__vec_t *inits,
                                const px__onnx_dataset_t *d, const px_model_config_t *cfg) {
  int64_t pad = (cfg->height - d->height) / 2;
  const char *x = "input";
  if (pad > 0) {
    int64_t pads[8] = {0, 0, pad, pad, 0, 0, pad, pad}, pd[1] = {8};
    px__initializer_host(p, inits, "preprocess.pads", ONNX__TENSOR_PROTO__DATA_TYPE__INT64, 1,
                         pd, pads, sizeof pads);
    const char *ins[2] = {"input", "preprocess.pads"};
    Onnx__NodeProto *n = px__node(p, nodes, "Pad", "preprocess.pad", ins, 2, "padded");
    px__vec_t attrs = {0};
    px__push(p, &attrs, px__attr_str(p, "mode", "constant"));
    px__node_attrs(p, n, &attrs);
    x = "padded";
  }
  /* [C, 1, 1], broadcast from the right: OpenCV 4.6's dnn fails on batches over one with a
     [1, C, 1, 1] constant (shape_utils.hpp's total() asserts); ONNX Runtime takes both */
  int64_t cd[3] = {d->channels, 1, 1};
  px__initializer_host(p, inits, "preprocess.mean", ONNX__TENSOR_PROTO__DATA_TYPE__FLOAT, 3, cd,
                       d->mean, (size_t)d->channels * sizeof(float));
  px__initializer_host(p, inits, "preprocess.std", ONNX__TENSOR_PROTO__DATA_TYPE__FLOAT, 3, cd,
                       d->std, (size_t)d->channels * sizeof(float));
  const char *sub[2] = {x, "preprocess.mean"}, *div[2] = {"centred", "preprocess.std"};
  px__node(p, nodes, "Sub", "preprocess.sub_mean", sub, 2, "centred");
  px__node(p, nodes, "Div", "preprocess.div_std", div, 2, "normalized");
}

/* A squeeze-and-excitation's gate g [N, C, 1, 1] brought to the trunk's
 * h x w (Resize, nearest: every pixel the same) into "<out>_gate": OpenCV
 * 4.6's dnn runs a Mul of two computed tensors only when their shapes are
 * equal (it maps a broadcasting one onto its Scale layer, which asserts in
 * shape_utils' total() on a [N, C, 1, 1] scale). Returns the gate's name. */
static const char *px__onnx_se_gate(px__pool_t *p, px__vec_t *nodes, px__vec_t *inits, int k,
                                    const char *g, int h, int w, const char *out) {
  char nm[48], sc[48], roi[48], *name = px__alloc(p, 96);
  if (!name) return g;
  snprintf(name, 96, "%s_gate", out);
  snprintf(nm, sizeof nm, "mul%d.expand", k);
  snprintf(sc, sizeof sc, "mul%d.scales", k);
  snprintf(roi, sizeof roi, "mul%d.roi", k);
  const float scales[4] = {1.0f, 1.0f, (float)h, (float)w};
  const int64_t four = 4, zero = 0;
  px__initializer_host(p, inits, sc, ONNX__TENSOR_PROTO__DATA_TYPE__FLOAT, 1, &four, scales,
                       sizeof scales);
  px__initializer_host(p, inits, roi, ONNX__TENSOR_PROTO__DATA_TYPE__FLOAT, 1, &zero, scales, 0);
  const char *ins[3] = {g, roi, sc};
  Onnx__NodeProto *node = px__node(p, nodes, "Resize", nm, ins, 3, name);
  px__vec_t attrs = {0};
  px__push(p, &attrs, px__attr_str(p, "mode", "nearest"));
  px__node_attrs(p, node, &attrs);
  return name;
}

/* A float scalar initializer [1] named "<nm>.<what>". Returns its name (pool-owned). */
static const char *px__onnx_scalar(px__pool_t *p, px__vec_t *inits, const char *nm,
                                   const char *what, float v) {
  char name[64];
  const int64_t one = 1;
  snprintf(name, sizeof name, "%s.%s", nm, what);
  px__initializer_host(p, inits, name, ONNX__TENSOR_PROTO__DATA_TYPE__FLOAT, 1, &one, &v,
                       sizeof v);
  return px__str(p, name);
}

/* One node op(a[, b]) named "<nm>.<suffix>" (nm itself when suffix is NULL)
 * writing out. */
static Onnx__NodeProto *px__onnx_step(px__pool_t *p, px__vec_t *nodes, const char *op,
                                      const char *nm, const char *suffix, const char *a,
                                      const char *b, const char *out) {
  char name[64];
  if (suffix) snprintf(name, sizeof name, "%s.%s", nm, suffix);
  else snprintf(name, sizeof name, "%s", nm);
  const char *ins[2] = {a, b};
  return px__node(p, nodes, op, name, ins, b ? 2 : 1, out);
}

/* An ACT node in opset 13's operators, as PyTorch exports each: ReLU6 is
 * Relu(x) - Relu(x - 6) (opset 13's Clip takes its bounds as inputs, which
 * OpenCV 4.6's dnn does not read); the hard swish x * HardSigmoid(x) (the
 * HardSwish operator is opset 14's); SiLU x * Sigmoid(x); GELU
 * (x * (Erf(x / sqrt 2) + 1)) * 0.5; SCALE and SHIFT a Mul and an Add of a
 * constant. */
static void px__onnx_act(px__pool_t *p, px__vec_t *nodes, px__vec_t *inits,
                         const px_model_node_t *n, int k, const char *in, const char *out) {
  char nm[32], t[4][80];
  snprintf(nm, sizeof nm, "act%d", k);
  for (int i = 0; i < 4; i++) snprintf(t[i], sizeof t[i], "%s_t%d", out, i);
  px__vec_t attrs = {0};
  Onnx__NodeProto *node;
  switch (n->act) {
    case PX__ACT_RELU6:
      px__onnx_step(p, nodes, "Relu", nm, NULL, in, NULL, t[0]);
      px__onnx_step(p, nodes, "Sub", nm, "sub6", in, px__onnx_scalar(p, inits, nm, "six", 6.0f),
                    t[1]);
      px__onnx_step(p, nodes, "Relu", nm, "relu_hi", t[1], NULL, t[2]);
      px__onnx_step(p, nodes, "Sub", nm, "clip", t[0], t[2], out);
      return;
    case PX__ACT_HSIGMOID:
    case PX__ACT_HSWISH:
      node = px__onnx_step(p, nodes, "HardSigmoid", nm, NULL, in, NULL,
                           n->act == PX__ACT_HSWISH ? t[0] : out);
      px__push(p, &attrs, px__attr_float(p, "alpha", n->alpha));
      px__push(p, &attrs, px__attr_float(p, "beta", 0.5f));
      px__node_attrs(p, node, &attrs);
      if (n->act == PX__ACT_HSWISH) px__onnx_step(p, nodes, "Mul", nm, "mul", in, t[0], out);
      return;
    case PX__ACT_SILU:
      px__onnx_step(p, nodes, "Sigmoid", nm, NULL, in, NULL, t[0]);
      px__onnx_step(p, nodes, "Mul", nm, "mul", in, t[0], out);
      return;
    case PX__ACT_GELU:
      px__onnx_step(p, nodes, "Div", nm, NULL, in,
                    px__onnx_scalar(p, inits, nm, "sqrt2", 1.41421356237309504880f), t[0]);
      px__onnx_step(p, nodes, "Erf", nm, "erf", t[0], NULL, t[1]);
      px__onnx_step(p, nodes, "Add", nm, "add1", t[1], px__onnx_scalar(p, inits, nm, "one", 1.0f),
                    t[2]);
      px__onnx_step(p, nodes, "Mul", nm, "mul", in, t[2], t[3]);
      px__onnx_step(p, nodes, "Mul", nm, "half", t[3], px__onnx_scalar(p, inits, nm, "half", 0.5f),
                    out);
      return;
    case PX__ACT_SCALE:
    case PX__ACT_SHIFT:
      px__onnx_step(p, nodes, n->act == PX__ACT_SCALE ? "Mul" : "Add", nm, NULL, in,
                    px__onnx_scalar(p, inits, nm, "c", n->alpha), out);
      return;
    default: break;
  }
  static const char *const ops[PX__ACT_COUNT] = {
      [PX__ACT_RELU] = "Relu", [PX__ACT_LEAKY] = "LeakyRelu", [PX__ACT_SIGMOID] = "Sigmoid",
      [PX__ACT_TANH] = "Tanh"};
  const char *op = n->act >= 0 && n->act < PX__ACT_COUNT && ops[n->act] ? ops[n->act] : "Relu";
  node = px__onnx_step(p, nodes, op, nm, NULL, in, NULL, out);
  if (n->act == PX__ACT_LEAKY) px__push(p, &attrs, px__attr_float(p, "alpha", n->alpha));
  px__node_attrs(p, node, &attrs);
}

/* An imported graph's operators (ACT, MUL, CONCAT) as ONNX nodes. */
static void px__onnx_graph_op(px__pool_t *p, px__vec_t *nodes, px__vec_t *inits,
                              const px_model_t *m, const px_model_node_t *n, int k, const char *in,
                              const char *out) {
  char nm[32], in2[32];
  snprintf(in2, sizeof in2, "t%d", n->in2);
  int h, w, gh, gw;
  if (n->kind == PX_NODE_MUL && px_model_act_area(m, n->in, &h, &w) == 0 &&
      px_model_act_area(m, n->in2, &gh, &gw) == 0 && gh * gw == 1 && h * w > 1) {
    const char *ins[2] = {in, px__onnx_se_gate(p, nodes, inits, k, in2, h, w, out)};
    snprintf(nm, sizeof nm, "mul%d", k);
    px__node(p, nodes, "Mul", nm, ins, 2, out);
    return;
  }
  if (n->kind == PX_NODE_MUL || n->kind == PX_NODE_CONCAT) {
    const char *ins[2] = {in, in2};
    snprintf(nm, sizeof nm, "%s%d", n->kind == PX_NODE_MUL ? "mul" : "concat", k);
    Onnx__NodeProto *node =
        px__node(p, nodes, n->kind == PX_NODE_MUL ? "Mul" : "Concat", nm, ins, 2, out);
    px__vec_t attrs = {0};
    if (n->kind == PX_NODE_CONCAT) px__push(p, &attrs, px__attr_int(p, "axis", 1));
    px__node_attrs(p, node, &attrs);
    return;
  }
  px__onnx_act(p, nodes, inits, n, k, in, out);
}

/* A LayerNorm over channels as PyTorch writes torchvision's LayerNorm2d at
 * opset 13 (the export's; LayerNormalization is opset 17's): Transpose to
 * NHWC, ReduceMean, Sub, Pow 2, ReduceMean, Add eps, Sqrt, Div, Mul by the
 * scale, Add the shift, Transpose back. */
static void px__onnx_ln(px__pool_t *p, px__vec_t *nodes, px__vec_t *inits, const px_model_t *m,
                        const px_model_node_t *n, int k, const char *in, const char *out) {
  char nm[32], t[10][80];
  snprintf(nm, sizeof nm, "ln%d", k);
  for (int i = 0; i < 10; i++) snprintf(t[i], sizeof t[i], "%s_ln%d", out, i);
  static const int64_t to_nhwc[4] = {0, 2, 3, 1}, to_nchw[4] = {0, 3, 1, 2}, last = -1;
  const int64_t *perm[2] = {to_nhwc, to_nchw};
  const char *io[2][2] = {{in, t[0]}, {t[9], out}};
  Onnx__NodeProto *tn[2];
  for (int i = 0; i < 2; i++) { /* the first now, the second last */
    tn[i] = px__onnx_step(p, i ? &(px__vec_t){0} : nodes, "Transpose", nm, i ? "back" : "nhwc",
                          io[i][0], NULL, io[i][1]);
    Onnx__AttributeProto *a = px__attr_ints(p, "perm", 4, 0);
    if (a) memcpy(a->ints, perm[i], 4 * sizeof *a->ints);
    px__vec_t attrs = {0};
    px__push(p, &attrs, a);
    px__node_attrs(p, tn[i], &attrs);
  }
  for (int i = 0; i < 2; i++) { /* mean, x - mean, its square, their mean */
    Onnx__NodeProto *node = px__onnx_step(p, nodes, "ReduceMean", nm, i ? "var" : "mean",
                                          i ? t[3] : t[0], NULL, i ? t[4] : t[1]);
    px__vec_t attrs = {0};
    px__push(p, &attrs, px__attr_ints(p, "axes", 1, last));
    px__node_attrs(p, node, &attrs);
    if (i) break;
    px__onnx_step(p, nodes, "Sub", nm, "sub", t[0], t[1], t[2]);
    px__onnx_step(p, nodes, "Pow", nm, "pow", t[2], px__onnx_scalar(p, inits, nm, "two", 2.0f),
                  t[3]);
  }
  px__onnx_step(p, nodes, "Add", nm, "eps", t[4],
                px__onnx_scalar(p, inits, nm, "epsilon", (float)n->eps), t[5]);
  px__onnx_step(p, nodes, "Sqrt", nm, "sqrt", t[5], NULL, t[6]);
  px__onnx_step(p, nodes, "Div", nm, "div", t[2], t[6], t[7]);
  px__onnx_step(p, nodes, "Mul", nm, "scale", t[7], px_model_param(m, n->w)->name, t[8]);
  px__onnx_step(p, nodes, "Add", nm, "shift", t[8], px_model_param(m, n->b)->name, t[9]);
  if (tn[1]) px__push(p, nodes, tn[1]);
}

/* Whether activation a is the logits or becomes them through layout
 * changes alone (a conv classifier's pooled map, SqueezeNet's). */
static int px__onnx_is_logits(const px_model_t *m, int a) {
  px_model_node_t r;
  for (int j = 0; j < px_model_num_nodes(m); j++)
    if (px_model_node(m, j, &r) == PX_OK && r.kind == PX_NODE_REORDER && r.in == a) a = r.out;
  return a == px_model_num_acts(m) - 1;
}

/* Global average pooling: flattened when the classifier reads it or it
 * gives the logits, 4-D otherwise (a squeeze-and-excitation's squeeze). */
static void px__onnx_gap(px__pool_t *p, px__vec_t *nodes, const px_model_t *m,
                         const px_model_node_t *n, int k, const char *in, const char *out) {
  int flat = px__onnx_is_logits(m, n->out);
  px_model_node_t r;
  for (int j = k + 1; j < px_model_num_nodes(m); j++)
    if (px_model_node(m, j, &r) == PX_OK && r.kind == PX_NODE_FC && r.in == n->out) flat = 1;
  const char *ins[1] = {in};
  char nm[32], pre[80];
  snprintf(nm, sizeof nm, "avgpool%d", k);
  snprintf(pre, sizeof pre, "%s_pre", out);
  px__node(p, nodes, "GlobalAveragePool", flat ? "avgpool" : nm, ins, 1, flat ? pre : out);
  if (!flat) return;
  const char *f[1] = {pre};
  Onnx__NodeProto *node = px__node(p, nodes, "Flatten", "flatten", f, 1, out);
  px__vec_t attrs = {0};
  px__push(p, &attrs, px__attr_int(p, "axis", 1));
  px__node_attrs(p, node, &attrs);
}

/* The window attributes of a Conv, MaxPool or AveragePool node n:
 * kernel_shape, strides, pads (ONNX's order: begins, then ends) and, for a
 * conv or where not 1, dilations. A pooling's ceil_mode rounding is written
 * as the end padding it amounts to (ceil_mode 0: every runtime reads that
 * alike); returns 1 when there was some. */
static int px__window_attrs(px__pool_t *p, px__vec_t *attrs, const px_model_t *m,
                            const px_model_node_t *n, int dilations) {
  const px_window_t *w = &n->win;
  int h, wd, oh, ow;
  px_model_act_area(m, n->in, &h, &wd);
  px_model_act_area(m, n->out, &oh, &ow);
  int64_t xb = (int64_t)(oh - 1) * w->stride_h + (int64_t)w->dil_h * (w->kh - 1) + 1 -
               (h + w->pad_t + w->pad_b);
  int64_t xr = (int64_t)(ow - 1) * w->stride_w + (int64_t)w->dil_w * (w->kw - 1) + 1 -
               (wd + w->pad_l + w->pad_r);
  xb = n->kind != PX_NODE_CONV && xb > 0 ? xb : 0;
  xr = n->kind != PX_NODE_CONV && xr > 0 ? xr : 0;
  const int64_t k[2] = {w->kh, w->kw}, s[2] = {w->stride_h, w->stride_w};
  const int64_t pads[4] = {w->pad_t, w->pad_l, w->pad_b + xb, w->pad_r + xr};
  const int64_t d[2] = {w->dil_h, w->dil_w};
  px__push(p, attrs, px__attr_list(p, "kernel_shape", 2, k));
  px__push(p, attrs, px__attr_list(p, "strides", 2, s));
  px__push(p, attrs, px__attr_list(p, "pads", 4, pads));
  if (dilations && (n->kind == PX_NODE_CONV || d[0] != 1 || d[1] != 1))
    px__push(p, attrs, px__attr_list(p, "dilations", 2, d));
  return xb > 0 || xr > 0;
}

/* The input of FC node n (node k) as a Gemm reads it: in, or a map that no
 * global pooling flattened (a conv's 1 x 1, ...) flattened into flat. */
static const char *px__fc_flat(px__pool_t *p, px__vec_t *nodes, const px_model_t *m,
                               const px_model_node_t *n, int k, const char *in, const char *flat) {
  int h = 0, w = 0, gap = 0;
  px_model_node_t r;
  for (int j = 0; j < k; j++)
    if (px_model_node(m, j, &r) == PX_OK && r.out == n->in) gap = r.kind == PX_NODE_GAP;
  if (px_model_act_area(m, n->in, &h, &w) != 0 || gap) return in;
  const char *f[1] = {in};
  Onnx__NodeProto *node = px__node(p, nodes, "Flatten", flat, f, 1, flat);
  px__vec_t attrs = {0};
  px__push(p, &attrs, px__attr_int(p, "axis", 1));
  px__node_attrs(p, node, &attrs);
  return flat;
}

/* An int64 initializer [n] named "<nm>.<what>"; its name. */
static const char *px__onnx_ints(px__pool_t *p, px__vec_t *inits, const char *nm,
                                 const char *what, int n, const int64_t *v) {
  char name[80];
  const int64_t dims[1] = {n};
  snprintf(name, sizeof name, "%s.%s", nm, what);
  px__initializer_host(p, inits, name, ONNX__TENSOR_PROTO__DATA_TYPE__INT64, 1, dims, v,
                       (size_t)n * sizeof *v);
  return px__str(p, name);
}

/* A channel shuffle as PyTorch writes it (Reshape to [N, g, C / g, H, W],
 * Transpose (0, 2, 1, 3, 4), Reshape back), or a slice of channels (Slice
 * on axis 1). */
static void px__onnx_chan(px__pool_t *p, px__vec_t *nodes, px__vec_t *inits, const px_model_t *m,
                          const px_model_node_t *n, int k, const char *in, const char *out) {
  char nm[32], t[2][80];
  int h = 1, w = 1;
  px_model_act_area(m, n->in, &h, &w);
  if (n->kind == PX_NODE_SLICE) {
    snprintf(nm, sizeof nm, "slice%d", k);
    const int64_t st[1] = {n->pad}, en[1] = {n->pad + n->c_out}, ax[1] = {1};
    const char *ins[4] = {in, px__onnx_ints(p, inits, nm, "starts", 1, st),
                          px__onnx_ints(p, inits, nm, "ends", 1, en),
                          px__onnx_ints(p, inits, nm, "axes", 1, ax)};
    px__node(p, nodes, "Slice", nm, ins, 4, out);
    return;
  }
  snprintf(nm, sizeof nm, "shuffle%d", k);
  for (int i = 0; i < 2; i++) snprintf(t[i], sizeof t[i], "%s_shuffle%d", out, i);
  const int64_t g = n->groups, view[5] = {0, g, n->c_in / g, h, w}, back[4] = {0, n->c_out, h, w};
  px__onnx_step(p, nodes, "Reshape", nm, "view", in, px__onnx_ints(p, inits, nm, "view", 5, view),
                t[0]);
  Onnx__NodeProto *tn = px__onnx_step(p, nodes, "Transpose", nm, "transpose", t[0], NULL, t[1]);
  static const int64_t perm[5] = {0, 2, 1, 3, 4};
  Onnx__AttributeProto *a = px__attr_ints(p, "perm", 5, 0);
  if (a) memcpy(a->ints, perm, sizeof perm);
  px__vec_t attrs = {0};
  px__push(p, &attrs, a);
  px__node_attrs(p, tn, &attrs);
  px__onnx_step(p, nodes, "Reshape", nm, "back", t[1], px__onnx_ints(p, inits, nm, "back", 4, back),
                out);
}

/* Node k of the model as ONNX nodes (a BN or an add with a fused ReLU
 * gives two); allocation failures show in p->failed. */
static px_status_t px__onnx_node(px__pool_t *p, px__vec_t *nodes, px__vec_t *inits,
                                 const px_model_t *m, int k, const char *input) {
  int na = px_model_num_acts(m);
  char names[2][64], nm[96];
  px_model_node_t n;
  PX_CHECK(px_model_node(m, k, &n));
  /* activation a is `input` (a = 0), "logits" or "t<a>" */
  const char *in = n.in == 0 ? input : (snprintf(names[0], 64, "t%d", n.in), names[0]);
  char out[64];
  if (n.out == na - 1) snprintf(out, sizeof out, "logits");
  else snprintf(out, sizeof out, "t%d", n.out);
  const char *pn = n.w >= 0 ? px_model_param(m, n.w)->name : "";
  snprintf(nm, sizeof nm, "%.*s", (int)(strrchr(pn, '.') ? strrchr(pn, '.') - pn : 0), pn);
  px__vec_t attrs = {0};
  Onnx__NodeProto *node = NULL;
  char pre[80];
  snprintf(pre, sizeof pre, "%s_pre", out);
  switch (n.kind) {
    case PX_NODE_CONV: {
      const char *ins[3] = {in, pn, n.b >= 0 ? px_model_param(m, n.b)->name : ""};
      node = px__node(p, nodes, "Conv", nm, ins, n.b >= 0 ? 3 : 2, out);
      px__window_attrs(p, &attrs, m, &n, 1);
      px__push(p, &attrs, px__attr_int(p, "group", n.groups > 1 ? n.groups : 1));
      px__node_attrs(p, node, &attrs);
      break;
    }
    case PX_NODE_BN: {
      const char *ins[5] = {in, pn, px_model_param(m, n.b)->name,
                            px_model_buffer(m, n.rm)->name, px_model_buffer(m, n.rv)->name};
      node = px__node(p, nodes, "BatchNormalization", nm, ins, 5, n.relu ? pre : out);
      px__push(p, &attrs, px__attr_float(p, "epsilon", (float)n.eps));
      px__push(p, &attrs, px__attr_float(p, "momentum", (float)(1.0 - (double)n.momentum)));
      px__node_attrs(p, node, &attrs);
      if (n.relu) {
        const char *r[1] = {pre};
        snprintf(nm + strlen(nm), sizeof nm - strlen(nm), ".relu");
        px__node(p, nodes, "Relu", nm, r, 1, out);
      }
      break;
    }
    case PX_NODE_ADD: {
      snprintf(names[1], 64, "t%d", n.in2);
      const char *ins[2] = {in, names[1]};
      snprintf(nm, sizeof nm, "add%d", k);
      px__node(p, nodes, "Add", nm, ins, 2, n.relu ? pre : out);
      if (n.relu) {
        const char *r[1] = {pre};
        snprintf(nm, sizeof nm, "add%d.relu", k);
        px__node(p, nodes, "Relu", nm, r, 1, out);
      }
      break;
    }
    case PX_NODE_GAP:
      px__onnx_gap(p, nodes, m, &n, k, in, out);
      break;
    case PX_NODE_MAXPOOL:
    case PX_NODE_AVGPOOL: { /* an imported graph's pooling */
      const char *ins[1] = {in};
      snprintf(nm, sizeof nm, "pool%d", k);
      node = px__node(p, nodes, n.kind == PX_NODE_MAXPOOL ? "MaxPool" : "AveragePool", nm, ins, 1,
                      out);
      const int over = px__window_attrs(p, &attrs, m, &n, n.kind == PX_NODE_MAXPOOL);
      /* an average over windows that run past the end (ceil_mode) of an unpadded input
         counts its real inputs (the engine's rule): ONNX's count_include_pad = 0 */
      if (n.kind == PX_NODE_AVGPOOL)
        px__push(p, &attrs, px__attr_int(p, "count_include_pad", !n.win.exclude_pad && !over));
      px__node_attrs(p, node, &attrs);
      break;
    }
    case PX_NODE_REORDER: { /* a memory layout change: nothing in ONNX */
      const char *ins[1] = {in};
      snprintf(nm, sizeof nm, "layout%d", k);
      px__node(p, nodes, "Identity", nm, ins, 1, out);
      break;
    }
    case PX_NODE_ACT:
    case PX_NODE_MUL:
    case PX_NODE_CONCAT:
      px__onnx_graph_op(p, nodes, inits, m, &n, k, in, out);
      break;
    case PX_NODE_LN:
      px__onnx_ln(p, nodes, inits, m, &n, k, in, out);
      break;
    case PX_NODE_SHUFFLE:
    case PX_NODE_SLICE:
      px__onnx_chan(p, nodes, inits, m, &n, k, in, out);
      break;
    case PX_NODE_FC: {
      snprintf(names[1], 64, "%.40s_flat", out);
      const char *ins[3] = {px__fc_flat(p, nodes, m, &n, k, in, names[1]), pn,
                            px_model_param(m, n.b)->name};
      node = px__node(p, nodes, "Gemm", nm, ins, 3, out);
      px__push(p, &attrs, px__attr_int(p, "transB", 1));
      px__node_attrs(p, node, &attrs);
      break;
    }
  }
  return PX_OK;
}

/* The metadata that says what the model's input and output are: a sentence
 * (prunex.input) and the same as fields a program can read. Returns the
 * sentence (in the pool), which the graph input's doc_string repeats for
 * viewers that show no metadata. */
static const char *px__onnx_metadata(px__pool_t *p, px__vec_t *meta,
                                     const px_model_config_t *cfg, const px_onnx_info_t *info,
                                     const px__onnx_dataset_t *d) {
  char input_desc[1024], v[128];
  const char *ds = info && info->dataset ? info->dataset : NULL;
  if (d) {
    int pad = (cfg->height - d->height) / 2;
    size_t n = 0;
    for (int c = 0; c < d->channels; c++)
      n += (size_t)snprintf(v + n, sizeof v - n, "%s%.4f", c ? "," : "", (double)d->mean[c]);
    char stds[128];
    n = 0;
    for (int c = 0; c < d->channels; c++)
      n += (size_t)snprintf(stds + n, sizeof stds - n, "%s%.4f", c ? "," : "", (double)d->std[c]);
    if (d->mean_s) { /* a folder's: the file's exact figures */
      snprintf(v, sizeof v, "%s", d->mean_s);
      snprintf(stds, sizeof stds, "%s", d->std_s);
    }
    if (d->resize)
      snprintf(input_desc, sizeof input_desc,
               "float32 N x %d x %d x %d (NCHW, channels %s): an image scaled so that its shorter "
               "side is %d pixels (area averaging when shrinking, bilinear when enlarging), its "
               "centre %d x %d cut out, as raw pixels in [0, 1] (the bytes / 255), not "
               "normalised. The graph normalises every pixel as (x - mean) / std with the "
               "training images' mean %s, std %s, exactly as PruneX's training loader does",
               d->channels, d->height, d->width, d->channel_order, d->resize, d->crop, d->crop, v,
               stds);
    else
      snprintf(input_desc, sizeof input_desc,
               "float32 N x %d x %d x %d (NCHW, channels %s): raw %s pixels in [0, 1] (the image "
               "bytes / 255), not normalised, not padded. The graph pads them with 0 to %d x %d "
               "(%d pixels each side) and then normalises every pixel, padding included, as "
               "(x - mean) / std with mean %s, std %s, exactly as PruneX's training loader does",
               d->channels, d->height, d->width, d->channel_order, d->title, cfg->height,
               cfg->width, pad, v, stds);
    px__push(p, meta, px__kv(p, "prunex.preprocessing", "in-graph: pad, then (x - mean) / std"));
    px__push(p, meta, px__kv(p, "prunex.input_range", "0,1"));
    px__push(p, meta, px__kv(p, "prunex.mean", v));
    px__push(p, meta, px__kv(p, "prunex.std", stds));
    px__push(p, meta, px__kv(p, "prunex.channel_order", d->channel_order));
    snprintf(v, sizeof v, "%d", pad);
    px__push(p, meta, px__kv(p, "prunex.pad", v));
    snprintf(v, sizeof v, "%dx%dx%d", d->channels, d->height, d->width);
    px__push(p, meta, px__kv(p, "prunex.input_size", v));
    if (cfg->num_classes == d->num_classes)
      px__push(p, meta, px__kv(p, "prunex.classes", d->classes));
    if (d->resize) {
      snprintf(v, sizeof v, "%d", d->resize);
      px__push(p, meta, px__kv(p, "prunex.resize", v));
      snprintf(v, sizeof v, "%d", d->crop);
      px__push(p, meta, px__kv(p, "prunex.crop", v));
    }
  } else {
    snprintf(input_desc, sizeof input_desc,
             "float32 N x %d x %d x %d, normalised per channel as (x/255 - mean)/std with the "
             "data set's mean and std, as PruneX's training loader does (data set: %s; no "
             "preprocessing in the graph)",
             cfg->in_channels, cfg->height, cfg->width, ds ? ds : "unknown");
    px__push(p, meta, px__kv(p, "prunex.preprocessing", "none: the input is normalised"));
    snprintf(v, sizeof v, "%dx%dx%d", cfg->in_channels, cfg->height, cfg->width);
    px__push(p, meta, px__kv(p, "prunex.input_size", v));
  }
  Onnx__StringStringEntryProto *input_kv = px__kv(p, "prunex.input", input_desc);
  px__push(p, meta, input_kv);
  px__push(p, meta, px__kv(p, "prunex.input_layout", "NCHW"));
  px__push(p, meta, px__kv(p, "prunex.output",
                             "float32 N x classes: logits (no softmax); the class is the argmax"));
  px__push(p, meta, px__kv(p, "prunex.arch", cfg->arch));
  px__push(p, meta, px__kv(p, "prunex.model", cfg->widths ? "compact" : "dense"));
  if (ds) px__push(p, meta, px__kv(p, "prunex.dataset", ds));
  if (info && info->source) px__push(p, meta, px__kv(p, "prunex.source", info->source));
  px__push(p, meta, px__kv(p, "prunex.version", px_version()));
  return input_kv ? input_kv->value : NULL;
}

px_status_t px_onnx_save(const px_model_t *m, const char *path, const px_onnx_info_t *info) {
  PX_REQUIRE(m && path && path[0], "px_onnx_save: bad argument");
  px__pool_t p = {0};
  px_status_t st = PX_OK;
  px__vec_t nodes = {0}, inits = {0}, meta = {0};
  uint8_t *buf = NULL;
  const px_model_config_t *cfg = px_model_config(m);
  int nn = px_model_num_nodes(m);
  px__onnx_dataset_t folder;
  const px__onnx_dataset_t *d = px__onnx_folder(info, cfg, &folder, &st);
  if (!d && st == PX_OK) d = px__onnx_dataset(info ? info->dataset : NULL, cfg, &st);
  if (st < 0) return st;
  if (d) px__onnx_preprocess(&p, &nodes, &inits, d, cfg);
  for (int i = 0; i < px_model_num_params(m); i++)
    PX_CHECK_GOTO(px__initializer(&p, &inits, px_model_param(m, i)->name,
                                  px_model_param(m, i)->value), st, done);
  for (int i = 0; i < px_model_num_buffers(m); i++)
    PX_CHECK_GOTO(px__initializer(&p, &inits, px_model_buffer(m, i)->name,
                                  px_model_buffer(m, i)->value), st, done);
  for (int k = 0; k < nn; k++) {
    PX_CHECK_GOTO(px__onnx_node(&p, &nodes, &inits, m, k, d ? "normalized" : "input"), st, done);
    if (p.failed) {
      st = PX_ERR_NOMEM;
      goto done;
    }
  }
  int64_t in_dims[4] = {-1, cfg->in_channels, d ? d->height : cfg->height,
                        d ? d->width : cfg->width};
  int64_t out_dims[2] = {-1, cfg->num_classes};
  Onnx__ValueInfoProto *vin = px__value_info(&p, "input", 4, in_dims);
  Onnx__ValueInfoProto *vout = px__value_info(&p, "logits", 2, out_dims);
  Onnx__ValueInfoProto **vins = px__alloc(&p, sizeof *vins), **vouts = px__alloc(&p, sizeof *vouts);
  Onnx__GraphProto *g = px__alloc(&p, sizeof *g);
  Onnx__ModelProto *model = px__alloc(&p, sizeof *model);
  Onnx__OperatorSetIdProto *ops = px__alloc(&p, sizeof *ops);
  Onnx__OperatorSetIdProto **opsv = px__alloc(&p, sizeof *opsv);
  if (p.failed || !vin || !vout) {
    st = PX_ERR_NOMEM;
    goto done;
  }
  vins[0] = vin;
  vouts[0] = vout;
  onnx__graph_proto__init(g);
  g->name = px__str(&p, cfg->arch);
  g->n_node = nodes.n;
  g->node = (Onnx__NodeProto **)nodes.v;
  g->n_initializer = inits.n;
  g->initializer = (Onnx__TensorProto **)inits.v;
  g->n_input = 1;
  g->input = vins;
  g->n_output = 1;
  g->output = vouts;
  onnx__operator_set_id_proto__init(ops);
  ops->domain = px__str(&p, "");
  ops->has_version = 1;
  ops->version = 13;
  opsv[0] = ops;
  onnx__model_proto__init(model);
  model->has_ir_version = 1;
  model->ir_version = 7; /* the IR of opset 13 (ONNX 1.8) */
  model->n_opset_import = 1;
  model->opset_import = opsv;
  model->producer_name = px__str(&p, "prunex");
  model->producer_version = px__str(&p, px_version());
  model->graph = g;
  vin->doc_string = (char *)px__onnx_metadata(&p, &meta, cfg, info, d);
  if (p.failed) {
    st = PX_ERR_NOMEM;
    goto done;
  }
  model->n_metadata_props = meta.n;
  model->metadata_props = (Onnx__StringStringEntryProto **)meta.v;
  size_t len = onnx__model_proto__get_packed_size(model);
  buf = px_malloc(len ? len : 1, "onnx.buf");
  if (!buf) {
    st = PX_ERR_NOMEM;
    goto done;
  }
  onnx__model_proto__pack(model, buf);
  st = px_file_write_atomic(path, buf, len, 0666, 0);
done:
  px_free(buf);
  px__pool_free(&p);
  return st;
}
