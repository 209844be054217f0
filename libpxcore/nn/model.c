/* ResNet-family models as a fixed graph of op objects.
 *
 * Building walks the architecture once: every layer becomes a node holding
 * its op (created for the exact input spec, so every primitive exists before
 * the first step), its output activation and its parameters. Then each
 * family is allocated in one arena. Training runs the nodes forward, the loss,
 * and the nodes backward in reverse; inference runs them forward with the
 * running statistics.
 *
 * Activation gradients. An ADD's inputs that feed nothing else take their
 * gradient straight from the ADD's output gradient (the same buffer: the
 * ADD's backward computes it in place), so residual blocks copy nothing. An
 * activation with two consumers (a block input feeding both the block and
 * its shortcut) gets the first gradient written in place and the second
 * added from a scratch buffer.
 *
 * Memory plan. The activations, their gradients and the scratch buffers
 * live in one arena, placed once at build time by their lifetimes in a step
 * (nn/mem_plan.c): an activation from its forward to the last backward that
 * reads it (a BN's output that only a residual add reads dies in the
 * forward; a conv's input once the conv's weight gradient is computed), a
 * gradient from the backward that first writes it to the one that reads it
 * last, so the backward pass writes gradients into the bytes of activations
 * that are done, as PyTorch's allocator frees them. PX_MEM_PLAN=separate
 * keeps the earlier plan (activations in their own arena, gradients coloured
 * onto equal-size buffers) for the tests and the bench to compare.
 *
 * Recomputation (PX_MEM_PLAN=recompute; the default for bf16 on CUDA, where
 * PyTorch's autocast peak is the bar). A BN's output that a backward reads
 * (the input of the conv after a BN and ReLU, for its weight gradient) is
 * not kept from the forward to the backward: its forward copy dies with its
 * last forward reader, and the backward makes it again from the BN's input
 * (which the BN's own backward keeps alive anyway) and the batch statistics,
 * bit for bit (px_batchnorm_recompute), into a second block that lives from
 * its first backward reader to its last. What the step keeps across the
 * loss is then the convs' outputs and the residual sums: for a ResNet, one
 * activation-sized tensor fewer per conv + BN + ReLU. It costs one
 * normalisation pass per such BN in the backward. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "nn/px_arch_int.h"
#include "nn/px_graph_ops.h"
#include "nn/px_mem_plan.h"
#include "nn/px_onnx_int.h"
#include "nn/px_ops_int.h"
#include "nn/px_train_int.h"
#include "prunex/nn.h"
#include "px_check.h"

/* ACT, MUL, CONCAT: the graph operators of imported networks (nn/px_graph_ops.h),
 * run through the ops context (px__ops_act_forward ...: nn/px_ops_int.h). */
typedef enum {
  PX__CONV, PX__BN, PX__ADD, PX__POOL, PX__FC, PX__REORDER, PX__ACT, PX__MUL, PX__CONCAT,
  PX__LN, /* LayerNorm over channels: w, b its scale and shift, mean / var its statistics
            (var: 1 / sqrt(var + eps)) per pixel [N * H * W] */
  PX__SHUFFLE, /* channel shuffle of `groups` (ShuffleNet's; px__ops_chan_forward) */
  PX__SLICE    /* channels [pad, pad + C_out) of the input (a Split's part) */
} px__node_kind_t;

typedef struct {
  px__node_kind_t kind;
  int in, in2, out;          /* activation indices (in2: ADD, MUL's gate, CONCAT's second) */
  int w, b;                  /* parameter indices, -1 if none (CONV: b its bias) */
  int rm, rv;                /* BN running-statistics buffer indices */
  int relu;                  /* BN / ADD: ReLU fused */
  int kernel, stride;        /* CONV: square kernel, stride (padding kernel / 2);
                                POOL: the same for a windowed pooling (0: global) */
  int pad;                   /* POOL: zero padding on each side (unused: see win) */
  px_window_t win;           /* CONV, windowed POOL: the whole window (px_model_node_t's) */
  px_pool_mode_t mode;       /* POOL with kernel > 0 */
  int groups;                /* CONV: 1 dense, > 1 grouped */
  px__act_t act;             /* ACT */
  float alpha;               /* ACT: LeakyReLU's slope */
  float eps, momentum;       /* BN: epsilon, PyTorch's momentum */
  px_conv2d_t *conv;
  px_batchnorm_t *bn;
  px_add_t *add;
  px_pool2d_t *pool;
  px_fc_t *fc;
  px_reorder_t *rf, *rb;     /* REORDER: forward (x -> y layout) and backward (y -> x) */
  px_tensor_t mean, var;     /* BN batch statistics [c] */
  px_tensor_t ws;            /* BN ReLU mask / pooling workspace; nbytes 0 if none */
} px__node_t;

struct px_model {
  px_model_config_t cfg;
  char arch[32];
  char *onnx;                /* the imported file's path (cfg.onnx points here), or NULL */
  px__onnx_graph_t *graph;   /* the imported graph (layers, initial weights), or NULL */
  int32_t *widths;           /* [nwidths] conv output widths of a compact model, or NULL */
  int nconv;                 /* convs built so far (index into widths) */
  px_ops_t *ops;
  int in_act;                /* the input images in the engine's format: act 0, or the
                                output of the conversion node that reads act 0 */

  px__node_t *nodes;         /* [nnodes], forward order */
  int nnodes, cap_nodes;
  px_tensor_t *acts;         /* [nacts]; act 0 is the input, the last the logits */
  int nacts, cap_acts;
  px_tensor_t *pvals, *pgrads;  /* [nparams] */
  char **pnames;
  px_weight_kind_t *pkinds;
  int nparams, cap_params;
  px_tensor_t *bufs;         /* [nbufs] BN running statistics */
  char **bnames;
  int nbufs, cap_bufs;

  px_model_param_t *params;  /* public views, built once the arrays are final */
  px_model_buffer_t *buffers;

  int *consumers;            /* [nacts] number of nodes reading each activation */
  int *producer;             /* [nacts] node writing it (-1 for the input) */
  int *last_use;             /* [nacts] last node reading it (nnodes for the logits) */
  int *alias;                /* [nacts] activation whose gradient buffer it shares, or itself */
  px_tensor_t *grads;        /* [nacts] activation gradients (views) */
  px_tensor_t *scratch;      /* [nacts] second-consumer gradient (views; multi-consumer only) */
  px_add_t **acc;            /* [nacts] accumulate op (multi-consumer only) */
  uint8_t *ready;            /* [nacts] gradient written in this backward pass */
  px_grad_ready_fn grad_ready; /* NULL: none (px_model_set_grad_ready) */
  void *grad_ready_ctx;

  px_tensor_t labels;        /* i32 [batch] */
  px_tensor_t *gbufs;        /* shared gradient buffers (u8 specs) */
  int ngbufs;
  int separate;              /* PX_MEM_PLAN=separate: the activations in their own arena and
                                the gradients in equal-size buffers (the plan before the
                                shared arena, kept for the tests and the bench to compare) */
  int recompute;             /* PX_MEM_PLAN=recompute: BN outputs made again in the backward */
  int *redo_at;              /* [nacts] a recomputed activation: the node before whose backward
                                it is made again (its last backward reader in forward order);
                                -1: kept from the forward */
  px_tensor_t *bacts;        /* [nacts] what the backward reads: a recomputed activation's
                                backward copy, else the activation itself */
  px_arena_t a_params, a_grads, a_bufs, a_acts, a_gacts;
  px_tensor_t flat_params, flat_grads, flat_bufs;
  size_t numel;
  float *host_x;             /* [batch * C * H * W] staging for short batches */
  float *host_logits;        /* [batch * classes] */
  char *dense_note;          /* px_model_left_dense's text ("" when none) */
};

/* ---- architectures: the table is nn/arch.c (px_arch_int.h) -------------------- */

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
static px_status_t px__conv_win(px_model_t *m, int in, int c_out, const px_window_t *win,
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
static px_status_t px__bn_as(px_model_t *m, int in, int relu, float eps, float momentum,
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
static px_status_t px__plain(px_model_t *m, int a, int *out) {
  *out = a;
  if (px_tensor_is_plain(&m->acts[a])) return PX_OK;
  px_tensor_t plain;
  const px_tensor_t *t = &m->acts[a];
  PX_CHECK(px_tensor_init4(&plain, t->device, t->dims[0], t->dims[1], t->dims[2], t->dims[3]));
  return px__reorder(m, a, &plain, out);
}

static int px__on_cpu(const px_model_t *m) { return px_ops_device(m->ops).kind == PX_DEVICE_CPU; }

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
 * output are plain f32. On CUDA a Mul keeps its map's format (the gate
 * [N, C, 1, 1] is the same memory in either order) and a Concat joins two
 * maps in the engine's format. */
static px_status_t px__graph_node(px_model_t *m, px__node_kind_t kind, int in, int in2, int c_out,
                                  int *out) {
  px_tensor_t ys;
  if (px__on_cpu(m)) {
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
static px_status_t px__act_node(px_model_t *m, int in, px__act_t act, float alpha, int *out) {
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
static px_status_t px__ln_node(px_model_t *m, int in, float eps, const char *name, int *out) {
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
static px_status_t px__chan_node(px_model_t *m, const px__onnx_layer_t *L, int in, int *out) {
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

static px_status_t px__add(px_model_t *m, int a, int b, int relu, int *out) {
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
static px_status_t px__pool(px_model_t *m, int in, px_pool_mode_t mode, const px_window_t *win,
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

static px_status_t px__gap(px_model_t *m, int in, int *out) {
  return px__pool(m, in, PX_POOL_AVG, NULL, out);
}

static px_status_t px__fc(px_model_t *m, int in, int classes, const char *name, int *out) {
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
static px_status_t px__input(px_model_t *m, int *h) {
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

/* Parameter i takes the name the file gives it (a layer scale's
 * "features.1.layer_scale", which is no module's ".weight"). */
static px_status_t px__rename(px_model_t *m, int i, const char *name) {
  char *nm = px__strdup(name, "model.name");
  if (!nm) return PX_ERR_NOMEM;
  px_free(m->pnames[i]);
  m->pnames[i] = nm;
  return PX_OK;
}

/* An imported graph (nn/onnx_import.c) through the same layer functions as
 * the built-in architectures: the layers map one to one onto nodes. */
static px_status_t px__build_onnx(px_model_t *m) {
  const px__onnx_graph_t *g = m->graph;
  int *act = px_malloc((size_t)g->nlayers * sizeof *act, "model.onnx_acts");
  if (!act) return PX_ERR_NOMEM;
  px_status_t st = PX_OK;
  int x;
  PX_CHECK_GOTO(px__input(m, &x), st, done);
  for (int k = 0; k < g->nlayers; k++) {
    const px__onnx_layer_t *L = &g->layers[k];
    int in = L->in < 0 ? x : act[L->in], in2 = L->in2 < 0 ? x : act[L->in2];
    switch (L->kind) {
      case PX__OL_CONV: {
        /* grouped convs and those on a 1 x 1 map (squeeze-and-excitation)
         * stay dense: see PX_WEIGHT_CONV_FIXED */
        int fixed = L->groups > 1 || L->logits || m->acts[in].dims[2] * m->acts[in].dims[3] == 1;
        /* a compact depthwise conv keeps one group per kept channel */
        int groups = m->widths && L->groups > 1 && L->groups == L->c_out ? (int)m->acts[in].dims[1]
                                                                          : L->groups;
        PX_CHECK_GOTO(px__conv_win(m, in, L->c_out, &L->win, groups,
                                 L->b.n > 0, fixed ? PX_WEIGHT_CONV_FIXED : PX_WEIGHT_CONV,
                                 L->prefix, &act[k]),
                      st, done);
        if (L->wname) PX_CHECK_GOTO(px__rename(m, m->nodes[m->nnodes - 1].w, L->wname), st, done);
        break;
      }
      case PX__OL_ACT:
        PX_CHECK_GOTO(px__act_node(m, in, (px__act_t)L->act, L->alpha, &act[k]), st, done);
        break;
      case PX__OL_MUL: /* (a compact model's channels are its inputs') */
        PX_CHECK_GOTO(px__graph_node(m, PX__MUL, in, in2, (int)m->acts[in].dims[1], &act[k]), st,
                      done);
        break;
      case PX__OL_CONCAT:
        PX_CHECK_GOTO(px__graph_node(m, PX__CONCAT, in, in2,
                                     (int)(m->acts[in].dims[1] + m->acts[in2].dims[1]), &act[k]),
                      st, done);
        break;
      case PX__OL_BN:
        PX_CHECK_GOTO(px__bn_as(m, in, L->relu, L->eps, L->momentum, L->prefix, &act[k]), st,
                      done);
        break;
      case PX__OL_ADD:
        PX_CHECK_GOTO(px__add(m, in, in2, L->relu, &act[k]), st, done);
        break;
      case PX__OL_LN:
        PX_CHECK_GOTO(px__ln_node(m, in, L->eps, L->prefix, &act[k]), st, done);
        break;
      case PX__OL_SHUFFLE:
      case PX__OL_SLICE:
        PX_CHECK_GOTO(px__chan_node(m, L, in, &act[k]), st, done);
        break;
      case PX__OL_GAP: PX_CHECK_GOTO(px__gap(m, in, &act[k]), st, done); break;
      case PX__OL_MAXPOOL:
      case PX__OL_AVGPOOL:
        PX_CHECK_GOTO(px__pool(m, in, L->kind == PX__OL_MAXPOOL ? PX_POOL_MAX : PX_POOL_AVG,
                               &L->win, &act[k]),
                      st, done);
        break;
      case PX__OL_FC:
        /* the last gives the logits (px__open_onnx checked its classes); one
         * before it, features for the next (kept whole by compaction) */
        PX_CHECK_GOTO(px__fc(m, in, L->c_out, L->prefix, &act[k]), st, done);
        break;
    }
  }
  /* a classifier of convolutions ends in a global pooling: its map, plain
   * [N, classes, 1, 1], is the logits (px__logits_2d) */
  if (g->layers[g->nlayers - 1].kind != PX__OL_FC)
    PX_CHECK_GOTO(px__plain(m, act[g->nlayers - 1], &x), st, done);
done:
  px_free(act);
  return st;
}

/* Reads cfg->onnx into m->graph and checks it against the configuration. */
static px_status_t px__open_onnx(px_model_t *m, const px_model_config_t *cfg,
                                 const char *sha256) {
  if (!(m->onnx = px__strdup(cfg->onnx, "model.onnx"))) return PX_ERR_NOMEM;
  m->cfg.onnx = m->onnx;
  snprintf(m->arch, sizeof m->arch, "onnx");
  PX_CHECK(px__onnx_load(m->onnx, sha256, &m->graph));
  const px__onnx_graph_t *g = m->graph;
  if (g->in_c != cfg->in_channels || g->in_h != cfg->height || g->in_w != cfg->width)
    return px_set_error(PX_ERR_INVALID, "%s: the graph takes %dx%dx%d inputs, the data are "
                        "%dx%dx%d (channels x height x width)", m->onnx, g->in_c, g->in_h, g->in_w,
                        cfg->in_channels, cfg->height, cfg->width);
  if (g->classes != cfg->num_classes)
    return px_set_error(PX_ERR_INVALID, "%s: the graph gives %d logits, the data set has %d "
                        "classes", m->onnx, g->classes, cfg->num_classes);
  return PX_OK;
}

static px_status_t px__build(px_model_t *m, const px__arch_t *a) {
  if (m->graph) return px__build_onnx(m);
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

/* Whether input a of an ADD, an activation with other consumers (a residual
 * block's input), may share the ADD output's gradient buffer with the ADD's
 * other input b, a single-consumer activation made by a node other than an
 * ADD (the block's last BN), saving the copy of the gradient into a's own
 * buffer (px__route). The backward then writes the rest of a's gradient
 * (its other consumers' share, added in by px__settle) over the buffer
 * b's gradient lies in: that is safe when every other consumer of a comes
 * before b's producer in the forward, so that their backward runs after
 * b's producer has read its gradient, and after the ADD has routed it. */
static int px__stream_alias(const px_model_t *m, int add, int a, int b) {
  if (a < 1 || a == m->in_act || m->alias[a] != a || m->consumers[a] < 2 || b < 0 ||
      m->consumers[b] != 1 || m->producer[b] < 0 || m->nodes[m->producer[b]].kind == PX__ADD)
    return 0;
  for (int k = 0; k < m->nnodes; k++) {
    const px__node_t *c = &m->nodes[k];
    if ((c->in == a || c->in2 == a) && k != add && k >= m->producer[b]) return 0;
  }
  return 1;
}

/* Consumers, producers, gradient aliases and last uses of every activation. */
static px_status_t px__analyse(px_model_t *m) {
  int n = m->nacts;
  m->consumers = px_calloc((size_t)n, sizeof(int), "model.consumers");
  m->producer = px_calloc((size_t)n, sizeof(int), "model.producer");
  m->last_use = px_calloc((size_t)n, sizeof(int), "model.last_use");
  m->alias = px_calloc((size_t)n, sizeof(int), "model.alias");
  m->ready = px_calloc((size_t)n, 1, "model.ready");
  m->grads = px_calloc((size_t)n, sizeof(px_tensor_t), "model.grads");
  m->scratch = px_calloc((size_t)n, sizeof(px_tensor_t), "model.scratch");
  m->acc = px_calloc((size_t)n, sizeof(px_add_t *), "model.acc");
  m->redo_at = px_malloc((size_t)n * sizeof(int), "model.redo_at");
  m->bacts = px_calloc((size_t)n, sizeof(px_tensor_t), "model.bacts");
  if (!m->consumers || !m->producer || !m->last_use || !m->alias || !m->ready || !m->grads ||
      !m->scratch || !m->acc || !m->redo_at || !m->bacts)
    return PX_ERR_NOMEM;
  for (int a = 0; a < n; a++) {
    m->producer[a] = -1;
    m->last_use[a] = -1;
    m->alias[a] = a;
    m->redo_at[a] = -1;
  }
  for (int k = 0; k < m->nnodes; k++) {
    const px__node_t *nd = &m->nodes[k];
    m->producer[nd->out] = k;
    m->consumers[nd->in]++;
    m->last_use[nd->in] = k;
    if (nd->in2 >= 0) {
      m->consumers[nd->in2]++;
      m->last_use[nd->in2] = k;
    }
  }
  m->last_use[n - 1] = m->nnodes; /* the logits are read by the loss */
  for (int k = 0; k < m->nnodes; k++) {
    const px__node_t *nd = &m->nodes[k];
    if (nd->kind != PX__ADD) continue;
    if (m->consumers[nd->in] == 1) m->alias[nd->in] = nd->out;
    if (m->consumers[nd->in2] == 1) m->alias[nd->in2] = nd->out;
    if (px__stream_alias(m, k, nd->in, nd->in2)) m->alias[nd->in] = nd->out;
    else if (px__stream_alias(m, k, nd->in2, nd->in)) m->alias[nd->in2] = nd->out;
  }
  return PX_OK;
}

static int px__root(const px_model_t *m, int a) {
  while (m->alias[a] != a) a = m->alias[a];
  return a;
}

/* Points activation a's gradient at g and, for a multi-consumer activation,
 * its second-consumer scratch at scratch (with the op that adds it in). */
static px_status_t px__bind_grad(px_model_t *m, int a, void *g, void *scratch) {
  m->grads[a] = m->acts[a];
  m->grads[a].data = g;
  m->grads[a].flags = 0;
  if (m->consumers[a] < 2) return PX_OK;
  m->scratch[a] = m->acts[a];
  m->scratch[a].data = scratch;
  m->scratch[a].flags = 0;
  return px_add_create(m->ops, &m->acts[a], 0, &m->acc[a]);
}

/* Allocates the nb gradient buffers (one arena) and points every
 * activation's gradient at its slot's buffer, and the scratch of a
 * multi-consumer activation a at buffer scratch_buf[a]. */
static px_status_t px__bind_grads(px_model_t *m, int nb, const size_t *buf_bytes,
                                  const int *slot_buf, const int *scratch_buf) {
  int n = m->nacts;
  px_status_t st = PX_OK;
  m->gbufs = px_calloc((size_t)nb, sizeof(px_tensor_t), "model.gbufs");
  px_tensor_t **ptrs = px_malloc((size_t)(nb ? nb : 1) * sizeof *ptrs, "model.plan");
  if (!m->gbufs || !ptrs) {
    px_free(ptrs);
    return PX_ERR_NOMEM;
  }
  m->ngbufs = nb;
  for (int b = 0; b < nb; b++) {
    int64_t d = (int64_t)buf_bytes[b];
    PX_CHECK_GOTO(px_tensor_init(&m->gbufs[b], px_ops_device(m->ops), PX_DTYPE_U8, 1, &d), st,
                  done);
    ptrs[b] = &m->gbufs[b];
  }
  PX_CHECK_GOTO(px_arena_alloc(&m->a_gacts, px_ops_device(m->ops), ptrs, (size_t)nb, 64,
                               "model.activation_grads"),
                st, done);
  for (int a = 1; a < n; a++)
    PX_CHECK_GOTO(px__bind_grad(m, a, m->gbufs[slot_buf[px__root(m, a)]].data,
                                m->consumers[a] >= 2 ? m->gbufs[scratch_buf[a]].data : NULL),
                  st, done);
done:
  px_free(ptrs);
  return st;
}

/* Interval colouring of the gradient slots onto shared buffers of equal
 * size, plus one scratch buffer per size for second consumers. */
static px_status_t px__plan_grads(px_model_t *m) {
  int n = m->nacts;
  int *lo = px_malloc((size_t)n * sizeof(int), "model.plan"), *hi = px_malloc((size_t)n * sizeof(int), "model.plan");
  int *slot_buf = px_malloc((size_t)n * sizeof(int), "model.plan");
  int *order = px_malloc((size_t)n * sizeof(int), "model.plan");
  int *buf_free_at = px_malloc((size_t)(2 * n) * sizeof(int), "model.plan");
  size_t *buf_bytes = px_malloc((size_t)(2 * n) * sizeof(size_t), "model.plan");
  px_status_t st = PX_OK;
  if (!lo || !hi || !slot_buf || !order || !buf_free_at || !buf_bytes) {
    st = PX_ERR_NOMEM;
    goto done;
  }
  for (int a = 0; a < n; a++) {
    lo[a] = m->nnodes + 1;
    hi[a] = -1;
    slot_buf[a] = -1;
  }
  /* a slot (root) lives from the first backward node that writes it (the
   * highest last use among its members) down to the last that reads it (the
   * lowest producer among its members) */
  for (int a = 1; a < n; a++) {
    int r = px__root(m, a);
    if (m->producer[a] < lo[r]) lo[r] = m->producer[a];
    if (m->last_use[a] > hi[r]) hi[r] = m->last_use[a];
  }
  int nslots = 0;
  for (int a = 1; a < n; a++)
    if (px__root(m, a) == a) order[nslots++] = a;
  /* by decreasing hi: the order in which the backward pass opens them */
  for (int i = 1; i < nslots; i++)
    for (int j = i; j > 0 && hi[order[j]] > hi[order[j - 1]]; j--) {
      int t = order[j];
      order[j] = order[j - 1];
      order[j - 1] = t;
    }
  int nb = 0;
  for (int i = 0; i < nslots; i++) {
    int s = order[i];
    size_t bytes = m->acts[s].nbytes;
    int pick = -1;
    for (int b = 0; b < nb && pick < 0; b++)
      if (buf_bytes[b] == bytes && buf_free_at[b] > hi[s]) pick = b;
    if (pick < 0) {
      pick = nb++;
      buf_bytes[pick] = bytes;
    }
    buf_free_at[pick] = lo[s];
    slot_buf[s] = pick;
  }
  /* scratch: one buffer per size among multi-consumer activations */
  int nscratch_first = nb;
  for (int a = 1; a < n; a++) {
    if (m->consumers[a] < 2) continue;
    int pick = -1;
    for (int b = nscratch_first; b < nb && pick < 0; b++)
      if (buf_bytes[b] == m->acts[a].nbytes) pick = b;
    if (pick < 0) {
      pick = nb++;
      buf_bytes[pick] = m->acts[a].nbytes;
    }
    order[a] = pick; /* reuse: scratch buffer of a */
  }
  st = px__bind_grads(m, nb, buf_bytes, slot_buf, order);
done:
  PX_FREE_ALL(lo, hi, slot_buf, order, buf_free_at, buf_bytes);
  return st;
}

/* ---- the shared memory plan ------------------------------------------------------ *
 * Steps of a training step: forward node k runs at step k, the loss at
 * nnodes, backward node k at 2 * nnodes - k. */

/* The activations node n's backward reads (out[0..return)): the input of a
 * weight layer (its weight gradient) and of a BN, both maps of a MUL, the
 * output of an ADD (its fused ReLU's mask) and an ACT's input and output.
 * A POOL reads its workspace, a REORDER and a CONCAT only gradients. */
static int px__backward_reads(const px__node_t *n, int out[2]) {
  switch (n->kind) {
    case PX__CONV:
    case PX__FC:
    case PX__BN:
    case PX__LN:
      out[0] = n->in;
      return 1;
    case PX__ADD:
      out[0] = n->out;
      return 1;
    case PX__ACT:
      out[0] = n->in;
      out[1] = n->out;
      return 2;
    case PX__MUL:
      out[0] = n->in;
      out[1] = n->in2;
      return 2;
    case PX__POOL:
    case PX__REORDER:
    case PX__CONCAT:
    case PX__SHUFFLE:
    case PX__SLICE:
      break;
  }
  return 0;
}

static void px__widen(px__mem_block_t *b, int t) {
  if (t < b->lo) b->lo = t;
  if (t > b->hi) b->hi = t;
}

/* Lifetimes: act[a] from its producer's forward to its last read (forward,
 * loss or backward); the gradient slot of root r (px__root) from the
 * backward of its members' last consumer (the first to write it) to that
 * of their first producer (the last to read it); the scratch of a
 * multi-consumer activation over the backward of all its consumers. */
static void px__lifetimes(const px_model_t *m, px__mem_block_t *act, px__mem_block_t *slot,
                          px__mem_block_t *scr) {
  const int n = m->nacts, N = m->nnodes;
  for (int a = 0; a < n; a++) {
    int p = m->producer[a] >= 0 ? m->producer[a] : 0;
    act[a] = (px__mem_block_t){m->acts[a].nbytes, p, p, 0};
    slot[a] = scr[a] = (px__mem_block_t){0, 2 * N + 1, -1, 0};
  }
  px__widen(&act[n - 1], N); /* the logits: read by the loss */
  for (int k = 0; k < N; k++) {
    const px__node_t *nd = &m->nodes[k];
    int reads[2], nr = px__backward_reads(nd, reads);
    px__widen(&act[nd->in], k);
    if (nd->in2 >= 0) px__widen(&act[nd->in2], k);
    for (int i = 0; i < nr; i++) px__widen(&act[reads[i]], 2 * N - k);
    if (m->consumers[nd->in] >= 2) px__widen(&scr[nd->in], 2 * N - k);
    if (nd->in2 >= 0 && m->consumers[nd->in2] >= 2) px__widen(&scr[nd->in2], 2 * N - k);
  }
  for (int a = 1; a < n; a++) {
    px__mem_block_t *s = &slot[px__root(m, a)];
    s->bytes = m->acts[px__root(m, a)].nbytes;
    if (m->last_use[a] >= 0) px__widen(s, 2 * N - m->last_use[a]);
    if (m->producer[a] >= 0) px__widen(s, 2 * N - m->producer[a]);
    if (m->consumers[a] >= 2) scr[a].bytes = m->acts[a].nbytes;
  }
}

/* With recomputation: which activations the backward makes again
 * (m->redo_at) and their two blocks, act[a] cut back to the forward (the
 * producer to the last forward reader) and redo[a] over the backward
 * readers. A BN's output qualifies when a backward reads it, its BN can
 * recompute it exactly, and the BN's input is kept (the recomputation
 * reads it: it is alive until the BN's own backward, after every backward
 * reader of the output). redo[a] is empty for the others. */
static void px__recompute_lifetimes(px_model_t *m, px__mem_block_t *act, px__mem_block_t *redo) {
  const int n = m->nacts, N = m->nnodes;
  /* redo[a] first spans the backward readers of every activation, as node
   * indices (lo the first in forward order, hi the last) */
  for (int a = 0; a < n; a++) redo[a] = (px__mem_block_t){0, N, -1, 0};
  if (m->recompute)
    for (int k = 0; k < N; k++) {
      int reads[2], nr = px__backward_reads(&m->nodes[k], reads);
      for (int i = 0; i < nr; i++) px__widen(&redo[reads[i]], k);
    }
  for (int a = 0; a < n; a++) {
    const int p = m->producer[a], first = redo[a].lo, last = redo[a].hi;
    redo[a] = (px__mem_block_t){0, 2 * N + 1, -1, 0};
    if (!m->recompute || a == 0 || a == n - 1 || last < 0 || p < 0 ||
        m->nodes[p].kind != PX__BN || m->redo_at[m->nodes[p].in] >= 0 ||
        !px_batchnorm_can_recompute(m->nodes[p].bn))
      continue;
    m->redo_at[a] = last;
    act[a] = (px__mem_block_t){m->acts[a].nbytes, p, m->last_use[a] > p ? m->last_use[a] : p, 0};
    redo[a] = (px__mem_block_t){m->acts[a].nbytes, 2 * N - last, 2 * N - first, 0};
  }
}

/* The activations, their gradients and the scratch in one arena, placed by
 * their lifetimes (nn/mem_plan.c). */
static px_status_t px__plan_shared(px_model_t *m) {
  const int n = m->nacts;
  px__mem_block_t *blk = px_malloc((size_t)(4 * n) * sizeof *blk, "model.plan");
  if (!blk) return PX_ERR_NOMEM;
  px__mem_block_t *act = blk, *slot = blk + n, *scr = blk + 2 * n, *redo = blk + 3 * n;
  px__lifetimes(m, act, slot, scr);
  px__recompute_lifetimes(m, act, redo);
  size_t total = 0;
  px_status_t st = px__mem_plan(blk, 4 * n, 64, &total);
  px_tensor_t whole, *pw = &whole;
  int64_t d = (int64_t)(total ? total : 1);
  if (st == PX_OK) st = px_tensor_init(&whole, px_ops_device(m->ops), PX_DTYPE_U8, 1, &d);
  if (st == PX_OK)
    st = px_arena_alloc(&m->a_gacts, px_ops_device(m->ops), &pw, 1, 64, "model.activation_memory");
  char *base = m->a_gacts.base;
  for (int a = 0; a < n && st == PX_OK; a++) {
    m->acts[a].data = base + act[a].offset;
    m->bacts[a] = m->acts[a];
    if (m->redo_at[a] >= 0) m->bacts[a].data = base + redo[a].offset;
    if (a >= 1)
      st = px__bind_grad(m, a, base + slot[px__root(m, a)].offset,
                         m->consumers[a] >= 2 ? base + scr[a].offset : NULL);
  }
  px_free(blk);
  return st;
}

static px_status_t px__plan_memory(px_model_t *m) {
  if (!m->separate) return px__plan_shared(m);
  PX_CHECK(px__plan_grads(m));
  memcpy(m->bacts, m->acts, (size_t)m->nacts * sizeof *m->bacts);
  return PX_OK;
}

/* PX_MEM_PLAN: "shared", "recompute" (shared, and the BN outputs made
 * again in the backward) or "separate"; unset or empty: recompute for bf16
 * on CUDA, shared otherwise. */
static px_status_t px__mem_plan_mode(px_model_t *m) {
  const char *e = getenv("PX_MEM_PLAN");
  if (!e || !*e) {
    m->recompute = m->cfg.precision == PX_PRECISION_BF16 && !px__on_cpu(m);
    return PX_OK;
  }
  m->separate = !strcmp(e, "separate");
  m->recompute = !strcmp(e, "recompute");
  if (!m->separate && !m->recompute && strcmp(e, "shared"))
    return px_set_error(PX_ERR_INVALID,
                        "PX_MEM_PLAN='%s': expected 'shared', 'recompute' or 'separate'", e);
  return PX_OK;
}

static px_status_t px__alloc_families(px_model_t *m) {
  px_device_t dev = px_ops_device(m->ops);
  int np = m->nparams;
  px_status_t st = PX_OK;
  size_t nlist = (size_t)(m->nacts + 3 * m->nnodes + 1 + np + m->nbufs);
  px_tensor_t **list = px_malloc(nlist * sizeof *list, "model.alloc");
  if (!list) return PX_ERR_NOMEM;
  for (int i = 0; i < np; i++) list[i] = &m->pvals[i];
  PX_CHECK_GOTO(px_arena_alloc(&m->a_params, dev, list, (size_t)np, 4, "model.params"), st, done);
  for (int i = 0; i < np; i++) list[i] = &m->pgrads[i];
  PX_CHECK_GOTO(px_arena_alloc(&m->a_grads, dev, list, (size_t)np, 4, "model.grads"), st, done);
  for (int i = 0; i < m->nbufs; i++) list[i] = &m->bufs[i];
  PX_CHECK_GOTO(px_arena_alloc(&m->a_bufs, dev, list, (size_t)m->nbufs, 4, "model.bn_running"),
                st, done);
  size_t k = 0;
  for (int a = 0; a < m->nacts && m->separate; a++) list[k++] = &m->acts[a];
  for (int i = 0; i < m->nnodes; i++) {
    px__node_t *nd = &m->nodes[i];
    if (nd->kind == PX__BN || nd->kind == PX__LN) {
      list[k++] = &nd->mean;
      list[k++] = &nd->var;
    }
    if ((nd->kind == PX__BN || nd->kind == PX__POOL) && nd->ws.nbytes > 0) list[k++] = &nd->ws;
  }
  int64_t b = m->cfg.batch;
  PX_CHECK_GOTO(px_tensor_init(&m->labels, dev, PX_DTYPE_I32, 1, &b), st, done);
  list[k++] = &m->labels;
  PX_CHECK_GOTO(px_arena_alloc(&m->a_acts, dev, list, k, 64, "model.activations"), st, done);

  m->numel = 0;
  for (int i = 0; i < np; i++) m->numel += px_tensor_numel(&m->pvals[i]);
  int64_t ne = (int64_t)m->numel;
  PX_CHECK_GOTO(px_tensor_init(&m->flat_params, dev, PX_DTYPE_F32, 1, &ne), st, done);
  m->flat_grads = m->flat_params;
  size_t nbuf = 0;
  for (int i = 0; i < m->nbufs; i++) nbuf += px_tensor_numel(&m->bufs[i]);
  int64_t nb64 = (int64_t)(nbuf ? nbuf : 1);
  PX_CHECK_GOTO(px_tensor_init(&m->flat_bufs, dev, PX_DTYPE_F32, 1, &nb64), st, done);
  m->flat_bufs.data = m->a_bufs.base;
  m->flat_params.data = m->a_params.base;
  m->flat_grads.data = m->a_grads.base;
  if (m->a_params.bytes < m->numel * sizeof(float)) {
    st = px_set_error(PX_ERR_INTERNAL, "parameter arena of %zu bytes for %zu floats",
                      m->a_params.bytes, m->numel);
    goto done;
  }
  size_t xin = (size_t)m->cfg.batch * m->cfg.in_channels * m->cfg.height * m->cfg.width;
  m->host_x = px_malloc(xin * sizeof(float), "model.host_x");
  m->host_logits = px_malloc((size_t)m->cfg.batch * m->cfg.num_classes * sizeof(float),
                             "model.host_logits");
  if (!m->host_x || !m->host_logits) st = PX_ERR_NOMEM;
done:
  px_free(list);
  return st;
}

static px_status_t px__publish(px_model_t *m) {
  m->params = px_calloc((size_t)m->nparams, sizeof *m->params, "model.param_views");
  m->buffers = px_calloc((size_t)(m->nbufs ? m->nbufs : 1), sizeof *m->buffers, "model.buffer_views");
  if (!m->params || !m->buffers) return PX_ERR_NOMEM;
  for (int i = 0; i < m->nparams; i++)
    m->params[i] = (px_model_param_t){m->pnames[i], m->pkinds[i], &m->pvals[i], &m->pgrads[i]};
  for (int i = 0; i < m->nbufs; i++) m->buffers[i] = (px_model_buffer_t){m->bnames[i], &m->bufs[i]};
  return PX_OK;
}

px_status_t px_model_create(px_ops_t *ops, const px_model_config_t *cfg, px_model_t **out) {
  return px__model_create_ex(ops, cfg, NULL, out);
}

/* The prunable convs whose output channels a channel shuffle or a channel
 * split reads (through batch norms, activations, concatenations and layout
 * conversions): compaction keeps all of them (export/compact.c), so their
 * filters are left dense as producers; m->dense_note names them and why. */
static px_status_t px__dense_note(px_model_t *m) {
  uint8_t *feeds = px_calloc((size_t)m->nacts, 1, "model.feeds");
  size_t cap = 1, len = 0;
  for (int k = 0; k < m->nnodes; k++) cap += m->nodes[k].kind == PX__CONV ? 256 : 0;
  m->dense_note = px_malloc(cap, "model.dense_note");
  if (!feeds || !m->dense_note) {
    px_free(feeds);
    return PX_ERR_NOMEM;
  }
  m->dense_note[0] = '\0';
  for (int k = m->nnodes - 1; k >= 0; k--) { /* readers before writers */
    const px__node_t *n = &m->nodes[k];
    if (n->kind == PX__SHUFFLE) feeds[n->in] |= 1;
    if (n->kind == PX__SLICE) feeds[n->in] |= 2;
    if (n->kind != PX__BN && n->kind != PX__ACT && n->kind != PX__CONCAT &&
        n->kind != PX__REORDER)
      continue;
    feeds[n->in] |= feeds[n->out];
    if (n->in2 >= 0) feeds[n->in2] |= feeds[n->out];
  }
  for (int k = 0; k < m->nnodes; k++) {
    const px__node_t *n = &m->nodes[k];
    if (n->kind != PX__CONV || m->pkinds[n->w] != PX_WEIGHT_CONV || !feeds[n->out]) continue;
    const char *nm = m->pnames[n->w], *dot = strrchr(nm, '.');
    len += (size_t)snprintf(m->dense_note + len, cap - len, "%s%.*s (feeds a channel %s)",
                            len ? ", " : "", (int)(dot ? dot - nm : 200), nm,
                            feeds[n->out] & 1 ? "shuffle" : "split");
    if (len >= cap) len = cap - 1;
  }
  px_free(feeds);
  return PX_OK;
}

const char *px_model_left_dense(const px_model_t *m) { return m->dense_note ? m->dense_note : ""; }

px_status_t px__model_create_ex(px_ops_t *ops, const px_model_config_t *cfg, const char *sha256,
                                px_model_t **out) {
  PX_REQUIRE(out != NULL && ops != NULL && cfg != NULL, "px_model_create: NULL argument");
  *out = NULL;
  const px__arch_t *a = cfg->onnx ? NULL : px__arch_find(cfg->arch);
  PX_REQUIRE(cfg->onnx || a != NULL, "model.name '%s' is not a known architecture (%s)",
             cfg->arch ? cfg->arch : "(null)", px_model_arch_list());
  PX_REQUIRE(cfg->in_channels >= 1, "model.in_channels = %d: must be >= 1", cfg->in_channels);
  PX_REQUIRE(cfg->num_classes >= 2, "model.num_classes = %d: must be >= 2", cfg->num_classes);
  PX_REQUIRE(cfg->batch >= 1, "batch size %d: must be >= 1", cfg->batch);
  int min_side = a ? 1 << (a->nstages - 1) : 1;
  PX_REQUIRE(cfg->height >= min_side && cfg->width >= min_side,
             "input %dx%d is too small for %s (needs at least %dx%d)", cfg->height, cfg->width,
             a ? a->name : cfg->onnx, min_side, min_side);
  px_model_t *m = px_calloc(1, sizeof *m, "model");
  if (!m) return PX_ERR_NOMEM;
  m->cfg = *cfg;
  snprintf(m->arch, sizeof m->arch, "%s", a ? a->name : "onnx");
  m->cfg.arch = m->arch;
  m->ops = ops;
  px_status_t st = px__mem_plan_mode(m);
  if (st != PX_OK) goto done;
  if (cfg->widths) {
    if (cfg->nwidths < 1) {
      st = px_set_error(PX_ERR_INVALID, "model widths: %d given", cfg->nwidths);
      goto done;
    }
    m->widths = px_malloc((size_t)cfg->nwidths * sizeof(int32_t), "model.widths");
    if (!m->widths) {
      st = PX_ERR_NOMEM;
      goto done;
    }
    memcpy(m->widths, cfg->widths, (size_t)cfg->nwidths * sizeof(int32_t));
    m->cfg.widths = m->widths;
  } else {
    m->cfg.nwidths = 0;
  }
  if (cfg->onnx) PX_CHECK_GOTO(px__open_onnx(m, cfg, sha256), st, done);
  PX_CHECK_GOTO(px__build(m, a), st, done);
  if (m->widths && m->nconv != m->cfg.nwidths) {
    st = px_set_error(PX_ERR_INVALID, "model widths: %d given, %s has %d convolutions",
                      m->cfg.nwidths, m->arch, m->nconv);
    goto done;
  }
  PX_CHECK_GOTO(px__analyse(m), st, done);
  PX_CHECK_GOTO(px__alloc_families(m), st, done);
  PX_CHECK_GOTO(px__plan_memory(m), st, done);
  PX_CHECK_GOTO(px__publish(m), st, done);
  PX_CHECK_GOTO(px__dense_note(m), st, done);
done:
  return PX_CREATED(st, m, out, px_model_destroy);
}

void px_model_destroy(px_model_t *m) {
  if (!m) return;
  for (int i = 0; i < m->nnodes; i++) {
    px__node_t *n = &m->nodes[i];
    if (n->conv) px_conv2d_destroy(n->conv);
    if (n->bn) px_batchnorm_destroy(n->bn);
    if (n->add) px_add_destroy(n->add);
    if (n->pool) px_pool2d_destroy(n->pool);
    if (n->fc) px_fc_destroy(n->fc);
    if (n->rf) px_reorder_destroy(n->rf);
    if (n->rb) px_reorder_destroy(n->rb);
  }
  for (int a = 0; a < m->nacts && m->acc; a++)
    if (m->acc[a]) px_add_destroy(m->acc[a]);
  for (int i = 0; i < m->nparams; i++) px_free(m->pnames[i]);
  for (int i = 0; i < m->nbufs; i++) px_free(m->bnames[i]);
  px__onnx_free(m->graph);
  px_free(m->onnx);
  px_arena_free(&m->a_params);
  px_arena_free(&m->a_grads);
  px_arena_free(&m->a_bufs);
  px_arena_free(&m->a_acts);
  px_arena_free(&m->a_gacts);
  PX_FREE_ALL(m->nodes, m->acts, m->pvals, m->pgrads, m->pnames, m->pkinds, m->bufs, m->bnames,
              m->params, m->buffers, m->consumers, m->producer, m->last_use, m->alias, m->grads,
              m->scratch, m->acc, m->ready, m->gbufs, m->host_x, m->host_logits, m->widths,
              m->redo_at, m->bacts, m->dense_note, m);
}

/* ---- accessors ------------------------------------------------------------------ */

const px_model_config_t *px_model_config(const px_model_t *m) { return &m->cfg; }
px_ops_t *px_model_ops(const px_model_t *m) { return m->ops; }
int px_model_num_params(const px_model_t *m) { return m->nparams; }

/* The one node reading activation a, or NULL when none or several do. */
static const px__node_t *px__sole_reader(const px_model_t *m, int a) {
  const px__node_t *r = NULL;
  for (int k = 0; k < m->nnodes; k++) {
    const px__node_t *n = &m->nodes[k];
    if (n->in != a && n->in2 != a) continue;
    if (r) return NULL;
    r = n;
  }
  return r;
}

/* A depthwise conv: output channel c reads input channel c alone. */
static int px__depthwise(const px_model_t *m, const px__node_t *n) {
  return n->kind == PX__CONV && n->groups > 1 && n->groups == (int)m->acts[n->in].dims[1] &&
         n->groups == (int)m->acts[n->out].dims[1];
}

int px_model_channel_consumer(const px_model_t *m, int i) {
  if (i < 0 || i >= m->nparams || m->pkinds[i] != PX_WEIGHT_CONV) return -1;
  for (int k = 0; k < m->nnodes; k++) {
    const px__node_t *n = &m->nodes[k];
    if (n->kind != PX__CONV || n->w != i) continue;
    /* conv -> BN (ReLU fused or not) -> conv, each the only reader; in an
     * imported graph, standalone activations, further BNs and depthwise
     * convs may come between: each passes channel c on as channel c */
    const px__node_t *bn = px__sole_reader(m, n->out);
    if (!bn || (bn->kind != PX__BN && bn->kind != PX__ACT)) return -1;
    /* an imported ConvNeXt's Linear pair (1 x 1 convs with bias, GELU
     * between): a pruned channel's bias makes a constant that only the
     * consumer's pruned input channel reads, so the pair couples without a
     * BN; a LayerNorm (statistics over all channels) ends every chain */
    const px__node_t *c = bn->kind == PX__BN ? px__sole_reader(m, bn->out) : bn;
    while (c && (c->kind == PX__ACT || c->kind == PX__BN || px__depthwise(m, c)))
      c = px__sole_reader(m, c->out);
    if (!c || c->kind != PX__CONV || m->pkinds[c->w] != PX_WEIGHT_CONV) return -1;
    return c->w;
  }
  return -1;
}

/* The node whose weight (CONV, BN scale) or bias (BN shift, CONV bias) is
 * parameter i, or NULL. */
static const px__node_t *px__param_node(const px_model_t *m, int i) {
  for (int k = 0; k < m->nnodes; k++)
    if ((m->nodes[k].w == i || m->nodes[k].b == i) &&
        (m->nodes[k].kind == PX__CONV || m->nodes[k].kind == PX__BN))
      return &m->nodes[k];
  return NULL;
}

int px_model_channel_follower(const px_model_t *m, int i) {
  if (i < 0 || i >= m->nparams) return -1;
  const px__node_t *n = px__param_node(m, i);
  if (!n || (n->kind != PX__BN && !px__depthwise(m, n))) return -1;
  /* back to the producing conv, each link read by the next node alone */
  int dw = px__depthwise(m, n);
  const px__node_t *p = n;
  do {
    if (m->consumers[p->in] != 1 || m->producer[p->in] < 0) return -1;
    p = &m->nodes[m->producer[p->in]];
    if (p->kind != PX__ACT && p->kind != PX__BN && p->kind != PX__CONV) return -1;
    dw |= px__depthwise(m, p);
  } while (p->kind != PX__CONV || px__depthwise(m, p));
  /* no depthwise conv before it: the producer's own batch norm, which
   * travels dense as the built-in models' do */
  if (!dw) return -1;
  return px_model_channel_consumer(m, p->w);
}
int px_model_num_nodes(const px_model_t *m) { return m->nnodes; }

int px_model_compactable(const px_model_t *m) {
  for (int k = 0; k < m->nnodes; k++) {
    const px__node_t *n = &m->nodes[k];
    if (n->kind == PX__ACT || n->kind == PX__MUL || n->kind == PX__CONCAT || n->kind == PX__LN ||
        n->kind == PX__SHUFFLE || n->kind == PX__SLICE)
      return 0;
    if (n->kind == PX__CONV && (n->groups > 1 || n->b >= 0)) return 0;
  }
  return 1;
}
int px_model_num_acts(const px_model_t *m) { return m->nacts; }
int px_model_act_channels(const px_model_t *m, int a) {
  return a >= 0 && a < m->nacts ? (int)m->acts[a].dims[1] : -1;
}
int px_model_act_area(const px_model_t *m, int a, int *h, int *w) {
  if (a < 0 || a >= m->nacts || m->acts[a].ndim != 4) return -1;
  *h = (int)m->acts[a].dims[2];
  *w = (int)m->acts[a].dims[3];
  return 0;
}

/* f as the shortest decimal of up to 7 digits that gives it back (1e-5f:
 * 1e-5), as PyTorch's epsilon is written; f itself when none does. */
static double px__decimal(float f) {
  char buf[32];
  for (int digits = 1; digits <= 7; digits++) {
    snprintf(buf, sizeof buf, "%.*g", digits, (double)f);
    double d = strtod(buf, NULL);
    if ((float)d == f) return d;
  }
  return (double)f;
}

px_status_t px_model_node(const px_model_t *m, int k, px_model_node_t *out) {
  PX_REQUIRE(k >= 0 && k < m->nnodes, "model node %d of %d", k, m->nnodes);
  const px__node_t *n = &m->nodes[k];
  static const px_node_kind_t kinds[] = {PX_NODE_CONV, PX_NODE_BN,      PX_NODE_ADD,
                                         PX_NODE_GAP,  PX_NODE_FC,      PX_NODE_REORDER,
                                         PX_NODE_ACT,  PX_NODE_MUL,     PX_NODE_CONCAT,
                                         PX_NODE_LN,   PX_NODE_SHUFFLE, PX_NODE_SLICE};
  px_node_kind_t kind = kinds[n->kind];
  if (n->kind == PX__POOL && n->kernel > 0)
    kind = n->mode == PX_POOL_MAX ? PX_NODE_MAXPOOL : PX_NODE_AVGPOOL;
  *out = (px_model_node_t){kind, n->in, n->in2, n->out, n->w, n->b, n->rm, n->rv,
                           n->relu, n->win.kh, n->win.stride_h,
                           n->kind == PX__SLICE ? n->pad : n->win.pad_t,
                           (int)m->acts[n->in].dims[1], (int)m->acts[n->out].dims[1],
                           n->kind == PX__CONV ? (n->groups > 1 ? n->groups : 1)
                           : n->kind == PX__SHUFFLE ? n->groups : 0, (int)n->act,
                           n->alpha, n->momentum,
                           n->kind == PX__BN || n->kind == PX__LN ? px__decimal(n->eps) : 0.0, n->win};
  return PX_OK;
}

const px_model_param_t *px_model_param(const px_model_t *m, int i) {
  return i >= 0 && i < m->nparams ? &m->params[i] : NULL;
}
int px_model_num_buffers(const px_model_t *m) { return m->nbufs; }
const px_model_buffer_t *px_model_buffer(const px_model_t *m, int i) {
  return i >= 0 && i < m->nbufs ? &m->buffers[i] : NULL;
}
size_t px_model_numel(const px_model_t *m) { return m->numel; }
const px_tensor_t *px_model_flat_params(const px_model_t *m) { return &m->flat_params; }
const px_tensor_t *px_model_flat_grads(const px_model_t *m) { return &m->flat_grads; }
const px_tensor_t *px_model_flat_buffers(const px_model_t *m) { return &m->flat_bufs; }
size_t px_model_memory_bytes(const px_model_t *m) {
  return m->a_params.bytes + m->a_grads.bytes + m->a_bufs.bytes + m->a_acts.bytes +
         m->a_gacts.bytes;
}
size_t px_model_activation_bytes(const px_model_t *m) { return m->a_acts.bytes + m->a_gacts.bytes; }

/* ---- initialisation ----------------------------------------------------------- */

typedef struct {
  uint64_t s;
} px__init_rng_t;

static uint64_t px__init_rng_next(px__init_rng_t *r) {
  uint64_t z = (r->s += 0x9E3779B97F4A7C15ull); /* splitmix64 */
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

static double px__init_rng_uniform(px__init_rng_t *r) { return (double)(px__init_rng_next(r) >> 11) * 0x1.0p-53; }

static double px__init_rng_normal(px__init_rng_t *r) {
  double u1 = px__init_rng_uniform(r), u2 = px__init_rng_uniform(r);
  if (u1 < 1e-300) u1 = 1e-300;
  return sqrt(-2.0 * log(u1)) * cos(6.283185307179586 * u2);
}

static px_status_t px__fill(px_tensor_t *t, float *tmp, size_t n) {
  return px_tensor_copy_from_host(t, tmp, n * sizeof(float));
}

/* a [rows, cols] in place to [cols, rows] (a MatMul's weight as Gemm's). */
static px_status_t px__transpose(float *a, int64_t rows, int64_t cols) {
  size_t n = (size_t)(rows * cols);
  float *t = px_malloc(n * sizeof *t, "model.transpose");
  if (!t) return PX_ERR_NOMEM;
  for (int64_t r = 0; r < rows; r++)
    for (int64_t c = 0; c < cols; c++) t[c * rows + r] = a[r * cols + c];
  memcpy(a, t, n * sizeof *t);
  px_free(t);
  return PX_OK;
}

/* An imported model starts from the file's weights: the layers hold them in
 * the order their nodes created parameters and buffers. */
static px_status_t px__init_onnx(px_model_t *m, float *tmp) {
  const px__onnx_graph_t *g = m->graph;
  int p = 0, b = 0;
  for (int k = 0; k < g->nlayers; k++) {
    const px__onnx_layer_t *L = &g->layers[k];
    const px__onnx_init_t *src[4] = {&L->w, &L->b, &L->rm, &L->rv};
    int np = L->kind == PX__OL_CONV ? 1 + (L->b.n > 0)
             : L->kind == PX__OL_BN || L->kind == PX__OL_FC || L->kind == PX__OL_LN ? 2
                                                                                    : 0;
    int nb = L->kind == PX__OL_BN ? 2 : 0;
    for (int i = 0; i < np + nb; i++) {
      px_tensor_t *t = i < np ? &m->pvals[p++] : &m->bufs[b++];
      size_t n = px_tensor_numel(t);
      if (src[i]->bytes && src[i]->n != n)
        return px_set_error(PX_ERR_INTERNAL, "%s: layer '%s' has %zu values for %zu", m->onnx,
                            L->node, src[i]->n, n);
      if (src[i]->bytes) memcpy(tmp, src[i]->bytes, n * sizeof *tmp);
      else memset(tmp, 0, n * sizeof *tmp);
      for (size_t j = 0; !src[i]->bytes && L->kind == PX__OL_LN && i == 0 && j < n; j++)
        tmp[j] = 1.0f; /* a LayerNorm without a scale: 1 */
      if (i == 0 && L->transposed) PX_CHECK(px__transpose(tmp, t->dims[1], t->dims[0]));
      PX_CHECK(px__fill(t, tmp, n));
    }
  }
  return PX_OK;
}

px_status_t px_model_init_params(px_model_t *m, uint64_t seed) {
  size_t maxn = 1;
  for (int i = 0; i < m->nparams; i++)
    if (px_tensor_numel(&m->pvals[i]) > maxn) maxn = px_tensor_numel(&m->pvals[i]);
  for (int i = 0; i < m->nbufs; i++)
    if (px_tensor_numel(&m->bufs[i]) > maxn) maxn = px_tensor_numel(&m->bufs[i]);
  float *tmp = px_malloc(maxn * sizeof(float), "model.init");
  if (!tmp) return PX_ERR_NOMEM;
  px_status_t st = PX_OK;
  if (m->graph && !m->widths) {
    PX_CHECK_GOTO(px__init_onnx(m, tmp), st, done);
    PX_CHECK_GOTO(px_tensor_zero(&m->flat_grads), st, done);
    goto done;
  }
  for (int i = 0; i < m->nparams; i++) {
    px_tensor_t *t = &m->pvals[i];
    size_t n = px_tensor_numel(t);
    /* each parameter draws from its own stream: adding a layer does not
     * change the others' initial values */
    px__init_rng_t r = {seed * 0x100000001B3ull + (uint64_t)i * 0x9E3779B97F4A7C15ull};
    switch (m->pkinds[i]) {
      case PX_WEIGHT_CONV:
      case PX_WEIGHT_CONV_FIXED: {
        double fan_out = (double)t->dims[0] * t->dims[2] * t->dims[3];
        double std = sqrt(2.0 / fan_out);
        for (size_t j = 0; j < n; j++) tmp[j] = (float)(std * px__init_rng_normal(&r));
        break;
      }
      case PX_WEIGHT_BN_SCALE:
      case PX_WEIGHT_LN_SCALE:
        for (size_t j = 0; j < n; j++) tmp[j] = 1.0f;
        break;
      case PX_WEIGHT_BN_SHIFT:
      case PX_WEIGHT_LN_SHIFT:
      case PX_WEIGHT_CONV_BIAS:
        for (size_t j = 0; j < n; j++) tmp[j] = 0.0f;
        break;
      case PX_WEIGHT_FC:
      case PX_WEIGHT_FC_BIAS: {
        const px_tensor_t *w = m->pkinds[i] == PX_WEIGHT_FC ? t : &m->pvals[i - 1];
        double bound = 1.0 / sqrt((double)w->dims[1]);
        for (size_t j = 0; j < n; j++) tmp[j] = (float)(bound * (2.0 * px__init_rng_uniform(&r) - 1.0));
        break;
      }
    }
    PX_CHECK_GOTO(px__fill(t, tmp, n), st, done);
  }
  for (int i = 0; i < m->nbufs; i++) {
    size_t n = px_tensor_numel(&m->bufs[i]);
    float v = strstr(m->bnames[i], "running_var") ? 1.0f : 0.0f;
    for (size_t j = 0; j < n; j++) tmp[j] = v;
    PX_CHECK_GOTO(px__fill(&m->bufs[i], tmp, n), st, done);
  }
  PX_CHECK_GOTO(px_tensor_zero(&m->flat_grads), st, done);
done:
  px_free(tmp);
  return st;
}

/* ---- forward / backward ----------------------------------------------------------- */

static px_tensor_t *px__ws(px__node_t *n) { return n->ws.nbytes > 0 ? &n->ws : NULL; }

/* The graph operators, on the model's engine. */
static px_status_t px__graph_forward(px_model_t *m, const px__node_t *n) {
  px_tensor_t *y = &m->acts[n->out];
  const px_tensor_t *x = &m->acts[n->in];
  if (n->kind == PX__ACT) return px__ops_act_forward(m->ops, y, x, n->act, n->alpha);
  if (n->kind == PX__MUL) return px__ops_mul_forward(m->ops, y, x, &m->acts[n->in2]);
  if (n->kind == PX__LN)
    return px__ops_ln_forward(m->ops, y, (px_tensor_t *)&n->mean, (px_tensor_t *)&n->var, x,
                              &m->pvals[n->w], &m->pvals[n->b], n->eps);
  if (n->kind == PX__SHUFFLE || n->kind == PX__SLICE)
    return px__ops_chan_forward(m->ops, y, x, n->groups, n->pad);
  return px__ops_concat_forward(m->ops, y, x, &m->acts[n->in2]);
}

static px_status_t px__forward(px_model_t *m, int train) {
  for (int k = 0; k < m->nnodes; k++) {
    px__node_t *n = &m->nodes[k];
    px_tensor_t *y = &m->acts[n->out];
    const px_tensor_t *x = &m->acts[n->in];
    switch (n->kind) {
      case PX__CONV:
        PX_CHECK(px_conv2d_forward(n->conv, y, x, &m->pvals[n->w],
                                   n->b >= 0 ? &m->pvals[n->b] : NULL));
        break;
      case PX__ACT:
      case PX__MUL:
      case PX__CONCAT:
      case PX__LN:
      case PX__SHUFFLE:
      case PX__SLICE:
        PX_CHECK(px__graph_forward(m, n));
        break;
      case PX__BN:
        if (train)
          PX_CHECK(px_batchnorm_forward_train(n->bn, y, &n->mean, &n->var, px__ws(n), x,
                                              &m->pvals[n->w], &m->pvals[n->b], &m->bufs[n->rm],
                                              &m->bufs[n->rv]));
        else
          PX_CHECK(px_batchnorm_forward_infer(n->bn, y, x, &m->pvals[n->w], &m->pvals[n->b],
                                              &m->bufs[n->rm], &m->bufs[n->rv]));
        break;
      case PX__ADD:
        PX_CHECK(px_add_forward(n->add, y, x, &m->acts[n->in2]));
        break;
      case PX__POOL:
        PX_CHECK(px_pool2d_forward(n->pool, y, px__ws(n), x));
        break;
      case PX__FC:
        PX_CHECK(px_fc_forward(n->fc, y, x, &m->pvals[n->w], &m->pvals[n->b]));
        break;
      case PX__REORDER:
        PX_CHECK(px_reorder_execute(n->rf, y, x));
        break;
    }
  }
  return PX_OK;
}

/* Where the gradient of activation a goes: its own buffer the first time in
 * a backward pass, the scratch buffer after (then px__settle adds it). */
static px_tensor_t *px__dx(px_model_t *m, int a) {
  if (!m->ready[a]) {
    m->ready[a] = 1;
    return &m->grads[a];
  }
  return &m->scratch[a];
}

static px_status_t px__settle(px_model_t *m, int a, const px_tensor_t *written) {
  if (written == &m->scratch[a])
    return px_add_forward(m->acc[a], &m->grads[a], &m->grads[a], &m->scratch[a]);
  return PX_OK;
}

/* Routes an ADD's gradient g to one of its inputs. */
static px_status_t px__route(px_model_t *m, int a, const px_tensor_t *g) {
  if (m->alias[a] != a) { /* shares g's buffer: already there */
    m->ready[a] = 1;
    return PX_OK;
  }
  if (!m->ready[a]) {
    m->ready[a] = 1;
    return px_tensor_copy(&m->grads[a], g);
  }
  return px_add_forward(m->acc[a], &m->grads[a], &m->grads[a], g);
}

/* Their backward: the gradients of both inputs (none for the images). */
static px_status_t px__graph_backward(px_model_t *m, const px__node_t *n) {
  const px_tensor_t *x = &m->bacts[n->in], *dy = &m->grads[n->out];
  int want1 = n->in != 0 && n->in != m->in_act, want2 = n->in2 > 0 && n->in2 != m->in_act;
  px_tensor_t *dx = want1 ? px__dx(m, n->in) : NULL;
  px_tensor_t *dx2 = want2 ? px__dx(m, n->in2) : NULL;
  if (n->kind == PX__ACT && dx)
    PX_CHECK(px__ops_act_backward(m->ops, dx, dy, x, &m->bacts[n->out], n->act, n->alpha));
  else if (n->kind == PX__MUL && (dx || dx2))
    PX_CHECK(px__ops_mul_backward(m->ops, dx, dx2, dy, x, &m->bacts[n->in2]));
  else if (n->kind == PX__CONCAT && (dx || dx2))
    PX_CHECK(px__ops_concat_backward(m->ops, dx, dx2, dy));
  else if ((n->kind == PX__SHUFFLE || n->kind == PX__SLICE) && dx)
    PX_CHECK(px__ops_chan_backward(m->ops, dx, dy, n->groups, n->pad));
  if (dx) PX_CHECK(px__settle(m, n->in, dx));
  if (dx2) PX_CHECK(px__settle(m, n->in2, dx2));
  return PX_OK;
}

/* Makes again the recomputed activations whose first backward reader is
 * node k (px__recompute_lifetimes), from their BN's input and statistics. */
static px_status_t px__recompute(px_model_t *m, int k) {
  int reads[2], nr = px__backward_reads(&m->nodes[k], reads);
  for (int i = 0; i < nr; i++) {
    const int a = reads[i];
    if (m->redo_at[a] != k) continue;
    px__node_t *bn = &m->nodes[m->producer[a]];
    PX_CHECK(px_batchnorm_recompute(bn->bn, &m->bacts[a], &m->bacts[bn->in], &m->pvals[bn->w],
                                    &m->pvals[bn->b], &bn->mean, &bn->var));
  }
  return PX_OK;
}

static px_status_t px__backward(px_model_t *m) {
  memset(m->ready, 0, (size_t)m->nacts);
  m->ready[m->nacts - 1] = 1; /* the logits' gradient comes from the loss */
  for (int k = m->nnodes - 1; k >= 0; k--) {
    px__node_t *n = &m->nodes[k];
    px_tensor_t *dy = &m->grads[n->out];
    PX_CHECK(px__recompute(m, k));
    const px_tensor_t *x = &m->bacts[n->in];
    if (n->kind == PX__ACT || n->kind == PX__MUL || n->kind == PX__CONCAT ||
        n->kind == PX__SHUFFLE || n->kind == PX__SLICE) {
      PX_CHECK(px__graph_backward(m, n));
      continue;
    }
    if (n->kind == PX__ADD) { /* routes its gradient rather than computing one */
      PX_CHECK(px_add_backward(n->add, dy, dy, &m->bacts[n->out]));
      PX_CHECK(px__route(m, n->in, dy));
      PX_CHECK(px__route(m, n->in2, dy));
      continue;
    }
    /* none for the input images, nor for their conversion */
    px_tensor_t *dx = n->in != 0 && n->in != m->in_act ? px__dx(m, n->in) : NULL;
    switch (n->kind) {
      case PX__CONV:
        PX_CHECK(px_conv2d_backward_weights(n->conv, &m->pgrads[n->w],
                                            n->b >= 0 ? &m->pgrads[n->b] : NULL, x, dy));
        if (dx) PX_CHECK(px_conv2d_backward_data(n->conv, dx, dy, &m->pvals[n->w]));
        break;
      case PX__LN:
        PX_CHECK(px__ops_ln_backward(m->ops, dx, &m->pgrads[n->w], &m->pgrads[n->b], dy, x,
                                     &n->mean, &n->var, &m->pvals[n->w]));
        break;
      case PX__BN:
        PX_CHECK(px_batchnorm_backward(n->bn, dx, &m->pgrads[n->w], &m->pgrads[n->b], dy, x,
                                       &m->pvals[n->w], &m->pvals[n->b], &n->mean, &n->var,
                                       px__ws(n)));
        break;
      case PX__ADD:
      case PX__ACT:
      case PX__MUL:
      case PX__CONCAT:
      case PX__SHUFFLE:
      case PX__SLICE:
        break;
      case PX__POOL:
        PX_CHECK(px_pool2d_backward(n->pool, dx, dy, px__ws(n)));
        break;
      case PX__FC:
        PX_CHECK(px_fc_backward_weights(n->fc, &m->pgrads[n->w], &m->pgrads[n->b], x, dy));
        PX_CHECK(px_fc_backward_data(n->fc, dx, dy, &m->pvals[n->w]));
        break;
      case PX__REORDER:
        if (dx) PX_CHECK(px_reorder_execute(n->rb, dx, dy));
        break;
    }
    if (dx) PX_CHECK(px__settle(m, n->in, dx));
    /* the node's parameter gradients are final: a data-parallel strategy
     * may start reducing them while the earlier layers run backward */
    if (m->grad_ready && n->w >= 0) PX_CHECK(m->grad_ready(m->grad_ready_ctx, m, n->w));
    if (m->grad_ready && n->b >= 0) PX_CHECK(m->grad_ready(m->grad_ready_ctx, m, n->b));
  }
  return PX_OK;
}

void px_model_set_grad_ready(px_model_t *m, px_grad_ready_fn fn, void *ctx) {
  m->grad_ready = fn;
  m->grad_ready_ctx = ctx;
}

/* The input batch (and the labels when y is not NULL) onto the model's
 * device: on the GPU through the ops context's pinned staging buffer, queued
 * before the forward pass. */
static px_status_t px__load_input(px_model_t *m, const float *x, const int32_t *y) {
  px_tensor_t *dst[2] = {&m->acts[0], &m->labels};
  const void *src[2] = {x, y};
  return px__ops_upload(m->ops, y ? 2 : 1, dst, src);
}

/* t, the logits, as the loss reads them: [N, classes] (a conv classifier's
 * pooled plain [N, classes, 1, 1] is the same memory). */
static px_tensor_t px__logits_2d(const px_tensor_t *t) {
  px_tensor_t v = *t;
  v.ndim = 2;
  v.dims[2] = v.dims[3] = 1;
  return v;
}

px_status_t px_model_train_step(px_model_t *m, const float *x, const int32_t *y, float *loss,
                                int64_t *correct) {
  PX_CHECK(px__load_input(m, x, y));
  PX_CHECK(px__forward(m, 1));
  int lg = m->nacts - 1;
  px_tensor_t z = px__logits_2d(&m->acts[lg]), dz = px__logits_2d(&m->grads[lg]);
  PX_CHECK(px_softmax_ce(m->ops, &dz, loss, correct, &z, &m->labels));
  return px__backward(m);
}

px_status_t px_model_forward_train(px_model_t *m, const float *x) {
  PX_CHECK(px__load_input(m, x, NULL));
  return px__forward(m, 1);
}

/* Inference forward of the first n (1..batch) samples of x, the rest of the
 * batch zero-filled in host_x; leaves the batch's logits in host_logits. */
static px_status_t px__infer_host(px_model_t *m, const float *x, int32_t n) {
  const int B = m->cfg.batch, K = m->cfg.num_classes;
  if (n < B) {
    size_t per = (size_t)m->cfg.in_channels * m->cfg.height * m->cfg.width;
    memcpy(m->host_x, x, (size_t)n * per * sizeof(float));
    memset(m->host_x + (size_t)n * per, 0, (size_t)(B - n) * per * sizeof(float));
    x = m->host_x;
  }
  PX_CHECK(px__load_input(m, x, NULL));
  PX_CHECK(px__forward(m, 0));
  return px_tensor_copy_to_host(&m->acts[m->nacts - 1], m->host_logits,
                                (size_t)B * K * sizeof(float));
}

px_status_t px_model_logits(px_model_t *m, const float *x, int32_t n, float *logits) {
  int B = m->cfg.batch, K = m->cfg.num_classes;
  PX_REQUIRE(n >= 1 && n <= B, "logits of %d samples (model batch %d)", n, B);
  PX_CHECK(px__infer_host(m, x, n));
  memcpy(logits, m->host_logits, (size_t)n * K * sizeof(float));
  return PX_OK;
}

px_status_t px_model_eval_batch(px_model_t *m, const float *x, const int32_t *y, int32_t n,
                                double *loss_sum, int64_t *correct) {
  int B = m->cfg.batch, K = m->cfg.num_classes;
  PX_REQUIRE(n >= 1 && n <= B, "evaluation batch of %d samples (model batch %d)", n, B);
  for (int i = 0; i < n; i++)
    PX_REQUIRE(y[i] >= 0 && y[i] < K, "label %d of sample %d is outside [0, %d)", y[i], i, K);
  PX_CHECK(px__infer_host(m, x, n));
  double ls = 0;
  int64_t ok = 0;
  for (int i = 0; i < n; i++) {
    const float *z = m->host_logits + (size_t)i * K;
    int best = 0;
    double mx = z[0];
    for (int k = 1; k < K; k++)
      if (z[k] > mx) {
        mx = z[k];
        best = k;
      }
    double se = 0;
    for (int k = 0; k < K; k++) se += exp((double)z[k] - mx);
    ls += mx + log(se) - z[y[i]];
    ok += best == y[i];
  }
  *loss_sum += ls;
  *correct += ok;
  return PX_OK;
}
