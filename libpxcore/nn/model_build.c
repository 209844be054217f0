/* Building a model (nn/model_int.h): the layer functions, each making a
 * node with its op (created for the exact input spec, so every primitive
 * exists before the first step), its output activation and its
 * parameters, and the built-in ResNets from arch/arch.c's table. */
#include <stdio.h>
#include <string.h>

#include "nn/model_int.h"
#include "px_check.h"

/* ---- building ------------------------------------------------------------------ */

static px_status_t px__grow(void **arr, int *cap, int need, size_t elem, const char *name) {
  if (need <= *cap) return PX_OK;
  int ncap = *cap ? *cap * 2 : 32;
  while (ncap < need) ncap *= 2;
  void *p = px_realloc(*arr, (size_t)ncap * elem, name);
  if (!p) return PX_ERR_NOMEM;
  memset((char *)p + (size_t)*cap * elem, 0, (size_t)(ncap - *cap) * elem);
  *arr = p;
  *cap = ncap;
  return PX_OK;
}

/* *out = "prefix.suffix", px_malloc'd (a parameter's or buffer's name). */
static px_status_t px__dotted_name(const char *prefix, const char *suffix, char **out) {
  char name[160];
  snprintf(name, sizeof name, "%s.%s", prefix, suffix);
  return (*out = px__strdup(name, "model.name")) ? PX_OK : PX_ERR_NOMEM;
}

static px_status_t px__new_act(px_model_t *m, const px_tensor_t *spec, int *out) {
  PX_CHECK(px__grow((void **)&m->acts, &m->cap_acts, m->nacts + 1, sizeof *m->acts, "model.acts"));
  m->acts[m->nacts] = *spec;
  m->acts[m->nacts].data = NULL;
  m->acts[m->nacts].flags = 0;
  *out = m->nacts++;
  return PX_OK;
}

/* Parallel arrays that share one capacity (a parameter's value, gradient,
 * name and kind; a buffer's value and name). */
typedef struct {
  void **arr;
  size_t elem;
  const char *name;
} px__column_t;

static px_status_t px__grow_columns(const px__column_t *cols, int ncols, int *cap, int need) {
  int ncap = *cap;
  for (int i = 0; i < ncols; i++) {
    ncap = *cap;
    PX_CHECK(px__grow(cols[i].arr, &ncap, need, cols[i].elem, cols[i].name));
  }
  *cap = ncap;
  return PX_OK;
}

static px_status_t px__new_param(px_model_t *m, const px_tensor_t *spec, const char *prefix,
                                 const char *suffix, px_weight_kind_t kind, int *out) {
  const px__column_t cols[] = {
      {(void **)&m->pvals, sizeof *m->pvals, "model.pvals"},
      {(void **)&m->pgrads, sizeof *m->pgrads, "model.pgrads"},
      {(void **)&m->pnames, sizeof *m->pnames, "model.pnames"},
      {(void **)&m->pkinds, sizeof *m->pkinds, "model.pkinds"},
  };
  PX_CHECK(px__grow_columns(cols, 4, &m->cap_params, m->nparams + 1));
  PX_CHECK(px__dotted_name(prefix, suffix, &m->pnames[m->nparams]));
  m->pvals[m->nparams] = *spec;
  m->pgrads[m->nparams] = *spec;
  m->pkinds[m->nparams] = kind;
  *out = m->nparams++;
  return PX_OK;
}

static px_status_t px__new_buffer(px_model_t *m, const px_tensor_t *spec, const char *prefix,
                                  const char *suffix, int *out) {
  const px__column_t cols[] = {
      {(void **)&m->bufs, sizeof *m->bufs, "model.bufs"},
      {(void **)&m->bnames, sizeof *m->bnames, "model.bnames"},
  };
  PX_CHECK(px__grow_columns(cols, 2, &m->cap_bufs, m->nbufs + 1));
  PX_CHECK(px__dotted_name(prefix, suffix, &m->bnames[m->nbufs]));
  m->bufs[m->nbufs] = *spec;
  *out = m->nbufs++;
  return PX_OK;
}

/* Appends a node (ops are stored at once so that destroy frees them). */
static px_status_t px__push(px_model_t *m, px__node_kind_t kind, int in, int in2, px__node_t **out) {
  PX_CHECK(px__grow((void **)&m->nodes, &m->cap_nodes, m->nnodes + 1, sizeof *m->nodes,
                    "model.nodes"));
  px__node_t *n = &m->nodes[m->nnodes++];
  memset(n, 0, sizeof *n);
  n->kind = kind;
  n->in = in;
  n->in2 = in2;
  n->out = n->w = n->b = n->rm = n->rv = -1;
  *out = n;
  return PX_OK;
}

static px_status_t px__reorder(px_model_t *m, int in, const px_tensor_t *spec, int *out);

/* A convolution; groups > 1 is grouped / depthwise, bias adds a [c_out]
 * bias parameter; kind is PX_WEIGHT_CONV, or PX_WEIGHT_CONV_FIXED for one
 * left out of pruning. */
px_status_t px__conv_win(px_model_t *m, int in, int c_out, const px_window_t *win,
                         int groups, int bias, px_weight_kind_t kind, const char *name,
                         int *out) {
  if (m->widths) { /* a compact model: the file's width replaces the dense one */
    if (m->nconv >= m->cfg.nwidths)
      return px_set_error(PX_ERR_INVALID, "model widths: %d given, but %s has more convolutions",
                          m->cfg.nwidths, m->arch);
    c_out = m->widths[m->nconv];
    if (c_out < 1)
      return px_set_error(PX_ERR_INVALID, "model widths: %s.weight has %d output channels",
                          name, c_out);
  }
  m->nconv++;
  const px_tensor_t *xa = &m->acts[in];
  if ((m->widths || m->graph) && px_ops_device(m->ops).kind == PX_DEVICE_CPU &&
      xa->layout != NULL && xa->nbytes != (size_t)px_tensor_numel(xa) * sizeof(float)) {
    px_tensor_t plain;
    PX_CHECK(
        px_tensor_init4(&plain, xa->device, xa->dims[0], xa->dims[1], xa->dims[2], xa->dims[3]));
    PX_CHECK(px__reorder(m, in, &plain, &in));
  }
  px__node_t *n;
  PX_CHECK(px__push(m, PX__CONV, in, -1, &n));
  n->kernel = win->kh;
  n->stride = win->stride_h;
  n->win = *win;
  n->groups = groups;
  px_conv2d_params_t p = {c_out,       win->kh,     win->kw,     win->stride_h,
                          win->stride_w, win->pad_t, win->pad_l, bias,
                          groups,      win->pad_b - win->pad_t,  win->pad_r - win->pad_l,
                          win->dil_h,  win->dil_w};
  PX_CHECK(px_conv2d_create(m->ops, &m->acts[in], &p, &n->conv));
  px_tensor_t ys, ws, bs;
  px_conv2d_y_spec(n->conv, &ys);
  px_conv2d_w_spec(n->conv, &ws);
  px_conv2d_b_spec(n->conv, &bs);
  int o, w, b = -1;
  PX_CHECK(px__new_act(m, &ys, &o));
  PX_CHECK(px__new_param(m, &ws, name, "weight", kind, &w));
  if (bias) PX_CHECK(px__new_param(m, &bs, name, "bias", PX_WEIGHT_CONV_BIAS, &b));
  n = &m->nodes[m->nnodes - 1]; /* arrays may have moved */
  n->out = o;
  n->w = w;
  n->b = b;
  *out = o;
  return PX_OK;
}

/* The built-in models' window: k x k, stride, padding k / 2 on every side. */
static px_window_t px__square(int k, int stride) {
  return (px_window_t){k, k, stride, stride, k / 2, k / 2, k / 2, k / 2, 1, 1, 0, 0};
}

static px_status_t px__conv_g(px_model_t *m, int in, int c_out, int k, int stride, int groups,
                              int bias, px_weight_kind_t kind, const char *name, int *out) {
  const px_window_t win = px__square(k, stride);
  return px__conv_win(m, in, c_out, &win, groups, bias, kind, name, out);
}

static px_status_t px__conv(px_model_t *m, int in, int c_out, int k, int stride, const char *name,
                            int *out) {
  return px__conv_g(m, in, c_out, k, stride, 1, 0, PX_WEIGHT_CONV, name, out);
}

/* A batch norm of epsilon eps whose running statistics move by PyTorch's
 * momentum (an imported layer's; px__bn: PyTorch's defaults, 1e-5 and 0.1,
 * the built-in models'). */
px_status_t px__bn_as(px_model_t *m, int in, int relu, float eps, float momentum,
                      const char *name, int *out) {
  px__node_t *n;
  PX_CHECK(px__push(m, PX__BN, in, -1, &n));
  n->relu = relu;
  n->eps = eps;
  n->momentum = momentum;
  px_batchnorm_params_t p = {eps, momentum, relu};
  PX_CHECK(px_batchnorm_create(m->ops, &m->acts[in], &p, &n->bn));
  px_tensor_t ys, cs;
  px_batchnorm_y_spec(n->bn, &ys);
  px_batchnorm_c_spec(n->bn, &cs);
  px_batchnorm_ws_spec(n->bn, &n->ws);
  n->mean = cs;
  n->var = cs;
  int o, w, b, rm, rv;
  PX_CHECK(px__new_act(m, &ys, &o));
  PX_CHECK(px__new_param(m, &cs, name, "weight", PX_WEIGHT_BN_SCALE, &w));
  PX_CHECK(px__new_param(m, &cs, name, "bias", PX_WEIGHT_BN_SHIFT, &b));
  PX_CHECK(px__new_buffer(m, &cs, name, "running_mean", &rm));
  PX_CHECK(px__new_buffer(m, &cs, name, "running_var", &rv));
  n = &m->nodes[m->nnodes - 1];
  n->out = o;
  n->w = w;
  n->b = b;
  n->rm = rm;
  n->rv = rv;
  *out = o;
  return PX_OK;
}

static px_status_t px__bn(px_model_t *m, int in, int relu, const char *name, int *out) {
  return px__bn_as(m, in, relu, 1e-5f, 0.1f, name, out);
}

/* A layout conversion of activation in to spec's layout (same shape): a
 * compact model's widths can make the backend pick different layouts for
 * the two branches of a residual add, and a channel count that is not a
 * multiple of the backend's block (16 on AVX-512) read in a blocked layout,
 * padded to the block, sends oneDNN to its reference convolution (40x
 * slower): such convs read a plain copy, which its direct kernels take.
 * Channels-last maps (a compact training model's, a bf16 model's) are not
 * padded and go to oneDNN's jit kernels as they are. */
static px_status_t px__reorder(px_model_t *m, int in, const px_tensor_t *spec, int *out) {
  px__node_t *n;
  PX_CHECK(px__push(m, PX__REORDER, in, -1, &n));
  px_tensor_t ys = *spec;
  ys.data = NULL;
  PX_CHECK(px_reorder_create(m->ops, &ys, &m->acts[in], &n->rf));
  PX_CHECK(px_reorder_create(m->ops, &m->acts[in], &ys, &n->rb));
  int o;
  PX_CHECK(px__new_act(m, &ys, &o));
  m->nodes[m->nnodes - 1].out = o;
  *out = o;
  return PX_OK;
}

/* Activation a in plain f32 NCHW (what the graph operators read): a itself,
 * or a conversion of it. */
px_status_t px__plain(px_model_t *m, int a, int *out) {
  *out = a;
  if (px_tensor_is_plain(&m->acts[a])) return PX_OK;
  px_tensor_t plain;
  const px_tensor_t *t = &m->acts[a];
  PX_CHECK(px_tensor_init4(&plain, t->device, t->dims[0], t->dims[1], t->dims[2], t->dims[3]));
  return px__reorder(m, a, &plain, out);
}

int px__on_cpu(const px_model_t *m) { return px_ops_device(m->ops).kind == PX_DEVICE_CPU; }

/* Activation a in the engine's activation format (px_ops_act_format: on
 * CUDA NHWC f32 / bf16, or plain f32 with PX_CUDA_LAYOUT=nchw): a itself,
 * or a conversion of it. */
static px_status_t px__engine_format(px_model_t *m, int a, int *out) {
  const px_tensor_t *t = &m->acts[a];
  px_tensor_t fmt;
  PX_CHECK(px_tensor_init4(&fmt, t->device, t->dims[0], t->dims[1], t->dims[2], t->dims[3]));
  PX_CHECK(px_ops_act_format(m->ops, (px_precision_t)m->cfg.precision, &fmt));
  *out = a;
  if (px_tensor_same_spec(t, &fmt)) return PX_OK;
  return px__reorder(m, a, &fmt, out);
}

/* A graph operator's node (MUL, CONCAT; ACT on the CPU's padded layouts),
 * giving an [N, c_out, H, W] output of in's size. On the CPU its inputs and
 * output are plain f32, or channels-last in a model built so
 * (px__ops_channels_last: all but ACT and LN). On CUDA a Mul keeps its map's format (the gate
 * [N, C, 1, 1] is the same memory in either order) and a Concat joins two
 * maps in the engine's format. */
px_status_t px__graph_node(px_model_t *m, px__node_kind_t kind, int in, int in2, int c_out,
                           int *out) {
  px_tensor_t ys;
  if (px__on_cpu(m) && kind != PX__ACT && kind != PX__LN && px__ops_channels_last(m->ops, -1) > 0) {
    /* a channels-last model's (px__ops_channels_last): its maps as the
       convolutions write them, a Mul's gate plain */
    PX_CHECK(px__engine_format(m, in, &in));
    if (in2 >= 0)
      PX_CHECK(kind == PX__MUL ? px__plain(m, in2, &in2) : px__engine_format(m, in2, &in2));
    const px_tensor_t *x = &m->acts[in];
    PX_CHECK(px_tensor_init4(&ys, x->device, x->dims[0], c_out, x->dims[2], x->dims[3]));
    PX_CHECK(px_ops_act_format(m->ops, (px_precision_t)m->cfg.precision, &ys));
  } else if (px__on_cpu(m)) {
    PX_CHECK(px__plain(m, in, &in));
    if (in2 >= 0) PX_CHECK(px__plain(m, in2, &in2));
    const px_tensor_t *x = &m->acts[in];
    PX_CHECK(px_tensor_init4(&ys, x->device, x->dims[0], c_out, x->dims[2], x->dims[3]));
  } else if (kind == PX__MUL) {
    ys = m->acts[in];
  } else {
    PX_CHECK(px__engine_format(m, in, &in));
    if (in2 >= 0) PX_CHECK(px__engine_format(m, in2, &in2));
    const px_tensor_t *x = &m->acts[in];
    PX_CHECK(px_tensor_init4(&ys, x->device, x->dims[0], c_out, x->dims[2], x->dims[3]));
    PX_CHECK(px_ops_act_format(m->ops, (px_precision_t)m->cfg.precision, &ys));
  }
  px__node_t *n;
  PX_CHECK(px__push(m, kind, in, in2, &n));
  int o;
  PX_CHECK(px__new_act(m, &ys, &o));
  m->nodes[m->nnodes - 1].out = o;
  *out = o;
  return PX_OK;
}

/* An activation is element-wise: it keeps its input's format (no
 * conversion; on CUDA any of its formats; the features [N, F] between two
 * FC layers as they are) unless a CPU layout pads the channels, where f(0)
 * would not be 0 for every activation. */
px_status_t px__act_node(px_model_t *m, int in, px__act_t act, float alpha, int *out) {
  const px_tensor_t *x = &m->acts[in];
  if (px__on_cpu(m) && x->ndim == 4 &&
      (px_tensor_is_plain(x) || x->nbytes != px_tensor_numel(x) * sizeof(float))) {
    PX_CHECK(px__graph_node(m, PX__ACT, in, -1, (int)x->dims[1], out));
  } else {
    px__node_t *n;
    PX_CHECK(px__push(m, PX__ACT, in, -1, &n));
    px_tensor_t ys = m->acts[in];
    PX_CHECK(px__new_act(m, &ys, out));
    m->nodes[m->nnodes - 1].out = *out;
  }
  m->nodes[m->nnodes - 1].act = act;
  m->nodes[m->nnodes - 1].alpha = alpha;
  return PX_OK;
}

/* A LayerNorm over the channels of in (an imported ConvNeXt's): on the CPU
 * plain f32 NCHW, on CUDA the engine's format; its scale and shift
 * parameters [C] are name.weight and name.bias. */
px_status_t px__ln_node(px_model_t *m, int in, float eps, const char *name, int *out) {
  PX_CHECK(px__graph_node(m, PX__LN, in, -1, (int)m->acts[in].dims[1], out));
  px__node_t *n = &m->nodes[m->nnodes - 1];
  const px_tensor_t *x = &m->acts[n->in];
  int64_t c = x->dims[1], npix = x->dims[0] * x->dims[2] * x->dims[3];
  px_tensor_t cs;
  PX_CHECK(px_tensor_init(&cs, x->device, PX_DTYPE_F32, 1, &c));
  PX_CHECK(px_tensor_init(&n->mean, x->device, PX_DTYPE_F32, 1, &npix));
  n->var = n->mean;
  n->eps = eps;
  int w, b;
  PX_CHECK(px__new_param(m, &cs, name, "weight", PX_WEIGHT_LN_SCALE, &w));
  PX_CHECK(px__new_param(m, &cs, name, "bias", PX_WEIGHT_LN_SHIFT, &b));
  n = &m->nodes[m->nnodes - 1];
  n->w = w;
  n->b = b;
  return PX_OK;
}

/* A channel shuffle or slice (an imported ShuffleNet's) of in; a compact
 * model's keep every channel there (compaction leaves them dense). */
px_status_t px__chan_node(px_model_t *m, const px__onnx_layer_t *L, int in, int *out) {
  const int shuffle = L->kind == PX__OL_SHUFFLE;
  if ((int)m->acts[in].dims[1] < (shuffle ? L->c_out : L->start + L->c_out))
    return px_set_error(PX_ERR_INVALID, "%s: node '%s' (%s) reads %lld channels, fewer than it "
                        "takes", m->onnx, L->node, L->op, (long long)m->acts[in].dims[1]);
  PX_CHECK(px__graph_node(m, shuffle ? PX__SHUFFLE : PX__SLICE, in, -1, L->c_out, out));
  px__node_t *n = &m->nodes[m->nnodes - 1];
  n->groups = shuffle ? L->groups : 1;
  n->pad = shuffle ? 0 : L->start;
  return PX_OK;
}

px_status_t px__add(px_model_t *m, int a, int b, int relu, int *out) {
  if (m->acts[a].dims[1] != m->acts[b].dims[1])
    return px_set_error(PX_ERR_INVALID,
                        "model widths: a residual add (after %s) joins %lld and %lld channels",
                        m->pnames[m->nparams - 1], (long long)m->acts[a].dims[1],
                        (long long)m->acts[b].dims[1]);
  /* (a built-in model too: the CPU engine runs a convolution channels-last
   * where its blocked layout has only reference code, e.g. on 2 x 2 maps) */
  if (!px_tensor_same_spec(&m->acts[a], &m->acts[b])) PX_CHECK(px__reorder(m, b, &m->acts[a], &b));
  if (!px_tensor_same_spec(&m->acts[a], &m->acts[b]))
    return px_set_error(PX_ERR_INTERNAL,
                        "residual add: the branches have different layouts (%s vs %s)",
                        px_layout_name(m->acts[a].layout), px_layout_name(m->acts[b].layout));
  px__node_t *n;
  PX_CHECK(px__push(m, PX__ADD, a, b, &n));
  n->relu = relu;
  PX_CHECK(px_add_create(m->ops, &m->acts[a], relu, &n->add));
  px_tensor_t ys;
  px_add_y_spec(n->add, &ys);
  int o;
  PX_CHECK(px__new_act(m, &ys, &o));
  m->nodes[m->nnodes - 1].out = o;
  *out = o;
  return PX_OK;
}

/* A pooling node: global average (win NULL) or a window (an imported
 * graph's MaxPool / AveragePool; AVG: win->exclude_pad says which). */
px_status_t px__pool(px_model_t *m, int in, px_pool_mode_t mode, const px_window_t *win,
                     int *out) {
  px__node_t *n;
  PX_CHECK(px__push(m, PX__POOL, in, -1, &n));
  const px_window_t none = {0};
  if (!win) win = &none;
  n->kernel = win->kh;
  n->stride = win->stride_h;
  n->pad = win->pad_t;
  n->win = *win;
  n->mode = mode;
  px_pool2d_params_t p = {mode == PX_POOL_AVG && win->exclude_pad ? PX_POOL_AVG_EXCLUDE_PAD : mode,
                          win->kh, win->kw, win->stride_h, win->stride_w, win->pad_t, win->pad_l,
                          win->pad_b - win->pad_t, win->pad_r - win->pad_l, win->ceil_mode,
                          win->dil_h, win->dil_w};
  if (!win->kh) PX_CHECK(px_global_avgpool_create(m->ops, &m->acts[in], &n->pool));
  else PX_CHECK(px_pool2d_create(m->ops, &m->acts[in], &p, &n->pool));
  px_tensor_t ys;
  px_pool2d_y_spec(n->pool, &ys);
  px_pool2d_ws_spec(n->pool, &n->ws);
  int o;
  PX_CHECK(px__new_act(m, &ys, &o));
  m->nodes[m->nnodes - 1].out = o;
  *out = o;
  return PX_OK;
}

px_status_t px__gap(px_model_t *m, int in, int *out) {
  return px__pool(m, in, PX_POOL_AVG, NULL, out);
}

px_status_t px__fc(px_model_t *m, int in, int classes, const char *name, int *out) {
  /* CUDA's FC reads plain f32 (an imported graph may flatten a windowed
   * pooling's NHWC map, whose order is not the flattened NCHW one) */
  if (!px__on_cpu(m)) PX_CHECK(px__plain(m, in, &in));
  px__node_t *n;
  PX_CHECK(px__push(m, PX__FC, in, -1, &n));
  px_fc_params_t p = {classes, 1};
  PX_CHECK(px_fc_create(m->ops, &m->acts[in], &p, &n->fc));
  px_tensor_t ys, ws, bs;
  px_fc_y_spec(n->fc, &ys);
  px_fc_w_spec(n->fc, &ws);
  px_fc_b_spec(n->fc, &bs);
  int o, w, b;
  PX_CHECK(px__new_act(m, &ys, &o));
  PX_CHECK(px__new_param(m, &ws, name, "weight", PX_WEIGHT_FC, &w));
  PX_CHECK(px__new_param(m, &bs, name, "bias", PX_WEIGHT_FC_BIAS, &b));
  n = &m->nodes[m->nnodes - 1];
  n->out = o;
  n->w = w;
  n->b = b;
  *out = o;
  return PX_OK;
}

/* torchvision's BasicBlock / Bottleneck, with a 1x1 conv + BN shortcut when
 * the shape changes (which is also what gives ResNet-20 its 272,474
 * parameters). */
/* prefix.conv<i> (k x k, c_out filters) on in, then prefix.bn<i> (with a
 * ReLU when relu): one stage of a residual block. */
static px_status_t px__conv_bn(px_model_t *m, const char *prefix, int i, int in, int c_out, int k,
                               int stride, int relu, int *out) {
  char nm[128];
  int h;
  snprintf(nm, sizeof nm, "%s.conv%d", prefix, i);
  PX_CHECK(px__conv(m, in, c_out, k, stride, nm, &h));
  snprintf(nm, sizeof nm, "%s.bn%d", prefix, i);
  return px__bn(m, h, relu, nm, out);
}

static px_status_t px__block(px_model_t *m, const px__arch_t *a, int in, int in_c, int planes,
                             int stride, const char *prefix, int *out, int *out_c) {
  char nm[128];
  int h, main_out, sc = in, c_out;
  if (!a->bottleneck) {
    c_out = planes;
    PX_CHECK(px__conv_bn(m, prefix, 1, in, planes, 3, stride, 1, &h));
    PX_CHECK(px__conv_bn(m, prefix, 2, h, planes, 3, 1, 0, &main_out));
  } else {
    int width = planes * a->width_factor;
    c_out = planes * 4;
    PX_CHECK(px__conv_bn(m, prefix, 1, in, width, 1, 1, 1, &h));
    PX_CHECK(px__conv_bn(m, prefix, 2, h, width, 3, stride, 1, &h));
    PX_CHECK(px__conv_bn(m, prefix, 3, h, c_out, 1, 1, 0, &main_out));
  }
  if (stride != 1 || in_c != c_out) {
    snprintf(nm, sizeof nm, "%s.downsample.0", prefix);
    PX_CHECK(px__conv(m, in, c_out, 1, stride, nm, &sc));
    snprintf(nm, sizeof nm, "%s.downsample.1", prefix);
    PX_CHECK(px__bn(m, sc, 0, nm, &sc));
  }
  PX_CHECK(px__add(m, main_out, sc, 1, out));
  *out_c = c_out;
  return PX_OK;
}

/* The input act and its conversion to the engine's format (CUDA: NHWC, f32
 * or bf16), done once by the first node. */
px_status_t px__input(px_model_t *m, int *h) {
  px_tensor_t x;
  PX_CHECK(px_tensor_init4(&x, px_ops_device(m->ops), m->cfg.batch, m->cfg.in_channels,
                           m->cfg.height, m->cfg.width));
  PX_CHECK(px__new_act(m, &x, h));
  px_tensor_t fmt = x;
  PX_CHECK(px_ops_act_format(m->ops, (px_precision_t)m->cfg.precision, &fmt));
  if (fmt.layout != x.layout || fmt.dtype != x.dtype) PX_CHECK(px__reorder(m, *h, &fmt, h));
  m->in_act = *h;
  return PX_OK;
}

px_status_t px__build(px_model_t *m, const px__arch_t *a) {
  int h, c = a->base;
  PX_CHECK(px__input(m, &h));
  PX_CHECK(px__conv(m, h, a->base, 3, 1, "conv1", &h));
  PX_CHECK(px__bn(m, h, 1, "bn1", &h));
  for (int s = 0; s < a->nstages; s++) {
    int planes = a->base << s;
    for (int b = 0; b < a->blocks[s]; b++) {
      char prefix[64];
      snprintf(prefix, sizeof prefix, "layer%d.%d", s + 1, b);
      PX_CHECK(px__block(m, a, h, c, planes, (s > 0 && b == 0) ? 2 : 1, prefix, &h, &c));
    }
  }
  PX_CHECK(px__gap(m, h, &h));
  PX_CHECK(px__fc(m, h, m->cfg.num_classes, "fc", &h));
  return PX_OK;
}
