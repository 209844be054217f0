/* Internals of the op API (ops.h) shared by the dispatcher (ops_dispatch.c),
 * the backends (nn/cpu for oneDNN, nn/cuda for cuDNN/cuBLAS) and the model.
 *
 * Dispatch. Every backend context (what a px_ops_t points to) and every op
 * object a backend creates (px_conv2d_t, px_batchnorm_t, ...) begins with a
 * px__ops_head_t: a pointer to its backend's function table. The public
 * functions of ops.h read that pointer and call through the table, so the
 * dispatcher never sees a backend's types and a backend that is not built
 * costs one stub (px__cuda_ops_create answering PX_ERR_NOT_BUILT): no object
 * of an unbuilt backend can exist, so none of its other functions is ever
 * reached. Each backend defines its own structs (struct px_ops and
 * struct px_conv2d ... for the CPU, struct px__cuda_* for CUDA) and converts
 * the public handle pointers to them; the handles themselves stay opaque. */
#ifndef PX_OPS_INT_H
#define PX_OPS_INT_H

#include "nn/px_graph_ops.h"
#include "prunex/ops.h"
#include "prunex/ops_internal.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Every entry point of a backend, once: X(return type, name, (parameters)),
 * each with the contract of the ops.h function px_<name> (the context ones:
 * px_ops_destroy ... and px__ops_upload). The function table below has one
 * field per entry, and each backend declares its px__<backend>_<name>
 * functions and fills its table from this list (see below), so adding an
 * operation is one line here, its ops.h function and its dispatcher. */
#define PX__OPS_ENTRY_POINTS(X)  \
  X(void, ops_destroy, (px_ops_t *ops)) \
  X(px_device_t, ops_device, (const px_ops_t *ops)) \
  X(int, ops_threads, (const px_ops_t *ops)) \
  X(px_status_t, ops_sync, (px_ops_t *ops)) \
  X(size_t, ops_scratchpad_bytes, (const px_ops_t *ops)) \
  X(const char *, ops_describe, (const px_ops_t *ops)) \
  X(px_status_t, ops_set_tf32, (px_ops_t *ops, int allow)) \
  X(px_status_t, ops_act_format, (px_ops_t *ops, px_precision_t precision, px_tensor_t *spec)) \
  X(px_status_t, ops_upload, (px_ops_t *ops, int n, px_tensor_t *const *dst, const void *const *src)) \
  X(int, ops_channels_last, (px_ops_t *ops, int on)) \
  X(px_status_t, conv2d_create, (px_ops_t *ops, const px_tensor_t *x_spec, const px_conv2d_params_t *p, px_conv2d_t **out)) \
  X(void, conv2d_destroy, (px_conv2d_t *op)) \
  X(px_status_t, conv2d_forward, (px_conv2d_t *op, px_tensor_t *y, const px_tensor_t *x, const px_tensor_t *w, const px_tensor_t *b)) \
  X(px_status_t, conv2d_backward_data, (px_conv2d_t *op, px_tensor_t *dx, const px_tensor_t *dy, const px_tensor_t *w)) \
  X(px_status_t, conv2d_backward_weights, (px_conv2d_t *op, px_tensor_t *dw, px_tensor_t *db, const px_tensor_t *x, const px_tensor_t *dy)) \
  X(px_status_t, batchnorm_create, (px_ops_t *ops, const px_tensor_t *x_spec, const px_batchnorm_params_t *p, px_batchnorm_t **out)) \
  X(void, batchnorm_destroy, (px_batchnorm_t *op)) \
  X(void, batchnorm_y_spec, (const px_batchnorm_t *op, px_tensor_t *spec)) \
  X(void, batchnorm_c_spec, (const px_batchnorm_t *op, px_tensor_t *spec)) \
  X(void, batchnorm_ws_spec, (const px_batchnorm_t *op, px_tensor_t *spec)) \
  X(px_status_t, batchnorm_forward_train, (px_batchnorm_t *op, px_tensor_t *y, px_tensor_t *mean, px_tensor_t *var, px_tensor_t *ws, const px_tensor_t *x, const px_tensor_t *scale, const px_tensor_t *shift, px_tensor_t *running_mean, px_tensor_t *running_var)) \
  X(px_status_t, batchnorm_forward_infer, (px_batchnorm_t *op, px_tensor_t *y, const px_tensor_t *x, const px_tensor_t *scale, const px_tensor_t *shift, const px_tensor_t *running_mean, const px_tensor_t *running_var)) \
  X(int, batchnorm_can_recompute, (const px_batchnorm_t *op)) \
  X(void, batchnorm_set_momentum, (px_batchnorm_t *op, float momentum)) \
  X(px_status_t, batchnorm_recompute, (px_batchnorm_t *op, px_tensor_t *y, const px_tensor_t *x, const px_tensor_t *scale, const px_tensor_t *shift, const px_tensor_t *mean, const px_tensor_t *var)) \
  X(px_status_t, batchnorm_backward, (px_batchnorm_t *op, px_tensor_t *dx, px_tensor_t *dscale, px_tensor_t *dshift, const px_tensor_t *dy, const px_tensor_t *x, const px_tensor_t *scale, const px_tensor_t *shift, const px_tensor_t *mean, const px_tensor_t *var, const px_tensor_t *ws)) \
  X(px_status_t, relu_create, (px_ops_t *ops, const px_tensor_t *x_spec, px_relu_t **out)) \
  X(void, relu_destroy, (px_relu_t *op)) \
  X(void, relu_y_spec, (const px_relu_t *op, px_tensor_t *spec)) \
  X(px_status_t, relu_forward, (px_relu_t *op, px_tensor_t *y, const px_tensor_t *x)) \
  X(px_status_t, relu_backward, (px_relu_t *op, px_tensor_t *dx, const px_tensor_t *dy, const px_tensor_t *y)) \
  X(px_status_t, pool2d_create, (px_ops_t *ops, const px_tensor_t *x_spec, const px_pool2d_params_t *p, px_pool2d_t **out)) \
  X(px_status_t, global_avgpool_create, (px_ops_t *ops, const px_tensor_t *x_spec, px_pool2d_t **out)) \
  X(void, pool2d_destroy, (px_pool2d_t *op)) \
  X(void, pool2d_y_spec, (const px_pool2d_t *op, px_tensor_t *spec)) \
  X(void, pool2d_ws_spec, (const px_pool2d_t *op, px_tensor_t *spec)) \
  X(px_status_t, pool2d_forward, (px_pool2d_t *op, px_tensor_t *y, px_tensor_t *ws, const px_tensor_t *x)) \
  X(px_status_t, pool2d_backward, (px_pool2d_t *op, px_tensor_t *dx, const px_tensor_t *dy, const px_tensor_t *ws)) \
  X(px_status_t, fc_create, (px_ops_t *ops, const px_tensor_t *x_spec, const px_fc_params_t *p, px_fc_t **out)) \
  X(void, fc_destroy, (px_fc_t *op)) \
  X(px_status_t, fc_forward, (px_fc_t *op, px_tensor_t *y, const px_tensor_t *x, const px_tensor_t *w, const px_tensor_t *b)) \
  X(px_status_t, fc_backward_data, (px_fc_t *op, px_tensor_t *dx, const px_tensor_t *dy, const px_tensor_t *w)) \
  X(px_status_t, fc_backward_weights, (px_fc_t *op, px_tensor_t *dw, px_tensor_t *db, const px_tensor_t *x, const px_tensor_t *dy)) \
  X(px_status_t, add_create, (px_ops_t *ops, const px_tensor_t *x_spec, int relu, px_add_t **out)) \
  X(void, add_destroy, (px_add_t *op)) \
  X(void, add_y_spec, (const px_add_t *op, px_tensor_t *spec)) \
  X(px_status_t, add_forward, (px_add_t *op, px_tensor_t *y, const px_tensor_t *a, const px_tensor_t *b)) \
  X(px_status_t, add_backward, (px_add_t *op, px_tensor_t *g, const px_tensor_t *dy, const px_tensor_t *y)) \
  X(px_status_t, reorder_create, (px_ops_t *ops, const px_tensor_t *dst_spec, const px_tensor_t *src_spec, px_reorder_t **out)) \
  X(void, reorder_destroy, (px_reorder_t *op)) \
  X(px_status_t, reorder_execute, (px_reorder_t *op, px_tensor_t *dst, const px_tensor_t *src)) \
  X(px_status_t, softmax_ce, (px_ops_t *ops, px_tensor_t *dlogits, float *loss, int64_t *correct, const px_tensor_t *logits, const px_tensor_t *labels)) \
  X(px_status_t, act_forward, (px_ops_t *ops, px_tensor_t *y, const px_tensor_t *x, px__act_t act, float alpha)) \
  X(px_status_t, act_backward, (px_ops_t *ops, px_tensor_t *dx, const px_tensor_t *dy, const px_tensor_t *x, const px_tensor_t *y, px__act_t act, float alpha)) \
  X(px_status_t, mul_forward, (px_ops_t *ops, px_tensor_t *y, const px_tensor_t *x, const px_tensor_t *g)) \
  X(px_status_t, mul_backward, (px_ops_t *ops, px_tensor_t *dx, px_tensor_t *dg, const px_tensor_t *dy, const px_tensor_t *x, const px_tensor_t *g)) \
  X(px_status_t, concat_forward, (px_ops_t *ops, px_tensor_t *y, const px_tensor_t *a, const px_tensor_t *b)) \
  X(px_status_t, concat_backward, (px_ops_t *ops, px_tensor_t *da, px_tensor_t *db, const px_tensor_t *dy)) \
  X(px_status_t, ln_forward, (px_ops_t *ops, px_tensor_t *y, px_tensor_t *mean, px_tensor_t *rstd, const px_tensor_t *x, const px_tensor_t *g, const px_tensor_t *b, float eps)) \
  X(px_status_t, ln_backward, (px_ops_t *ops, px_tensor_t *dx, px_tensor_t *dg, px_tensor_t *db, const px_tensor_t *dy, const px_tensor_t *x, const px_tensor_t *mean, const px_tensor_t *rstd, const px_tensor_t *g)) \
  X(px_status_t, chan_forward, (px_ops_t *ops, px_tensor_t *y, const px_tensor_t *x, int groups, int start)) \
  X(px_status_t, chan_backward, (px_ops_t *ops, px_tensor_t *dx, const px_tensor_t *dy, int groups, int start))

#define PX__OPS_FIELD(ret, name, params) ret (*name) params;
typedef struct px__ops_backend {
  const char *name; /* "cpu", "cuda" */
  /* px_ops_create itself is chosen by device kind, not by table */
  PX__OPS_ENTRY_POINTS(PX__OPS_FIELD)
} px__ops_backend_t;
#undef PX__OPS_FIELD

/* Declarations of backend b's entry points px__<b>_<name>, and the
 * initialiser of its table (in C, for the designated initialisers):
 *   #define PX__CPU_DECL(ret, name, params) ret px__cpu_##name params;
 *   PX__OPS_ENTRY_POINTS(PX__CPU_DECL)
 *   #define PX__CPU_ENTRY(ret, name, params) .name = px__cpu_##name,
 *   const px__ops_backend_t px__cpu_backend = {.name = "cpu",
 *                                              PX__OPS_ENTRY_POINTS(PX__CPU_ENTRY)}; */

/* First member of every backend context and op object (see the file comment). */
typedef struct {
  const px__ops_backend_t *be;
} px__ops_head_t;

/* The backends' context constructors, picked by px_ops_create from the
 * device kind. px__cuda_ops_create answers PX_ERR_NOT_BUILT in a build
 * without CUDA (nn/nn_cuda_stub.c). */
px_status_t px__cpu_ops_create(px_device_t dev, int nthreads, px_ops_t **out);
px_status_t px__cuda_ops_create(px_device_t dev, int nthreads, px_ops_t **out);

/* Copies n (at most 8) plain host buffers into the tensors dst[0..n) of
 * ops' device (each src[i] holds px_tensor_plain_bytes(dst[i]) bytes; dst
 * must be plain on the GPU). On the CPU this is px_tensor_copy_from_host.
 * On CUDA ordinary memory goes through the context's pinned staging buffer
 * (grown on first use, then reused) and may be reused as soon as the call
 * returns; page-locked memory (px_cuda_host_alloc) is copied from where it
 * is and must stay unchanged until the stream has passed the copy, which
 * every caller of the model waits for (it reads back a loss, logits or
 * counts before it returns). Both are copied asynchronously on the context's
 * stream, ordered before the ops issued after it. This is how the model
 * feeds its input batches. */
px_status_t px__ops_upload(px_ops_t *ops, int n, px_tensor_t *const *dst, const void *const *src);

/* on = 1: the f32 convolutions created from now on write channels-last
 * (NHWC) maps, and px_ops_act_format gives the model's input that layout;
 * on = 0: the backend's own choice again; on < 0: no change. Returns the
 * setting before the call. The CPU's choice is otherwise oneDNN's blocked layouts, which pad a
 * channel count that is not a multiple of its block to a whole one and have
 * no fast depthwise or narrow-group kernels on f32 plain maps
 * (model_onnx.c px__onnx_wants_cl); PX_CPU_CHANNELS_LAST=0 keeps it off.
 * CUDA's maps are NHWC already (px_ops_act_format): there the call does
 * nothing and returns 0. */
int px__ops_channels_last(px_ops_t *ops, int on);

/* The graph operators of imported networks (nn/px_graph_ops.h) on any
 * engine, with the arithmetic of the CPU functions there; the entries
 * act_forward ... concat_backward of the table. Internal, not in ops.h: only
 * the model calls them, on its own activations. Each checks its arguments
 * here (storage, the context's device, 4-D shapes that fit together, one
 * dtype where the op needs it) and the backend checks the formats it takes
 * (the CPU: plain f32 NCHW for Mul and Concat, any unpadded f32 layout for
 * the activations; CUDA: plain f32 or NHWC f32 / bf16, see
 * nn/cuda/cuda_graph.cu); PX_ERR_INVALID naming the op and the argument
 * otherwise. Nothing allocates; on CUDA the work is queued on the context's
 * stream.
 *   act:    y = act(x) (y like x); dx = dy * act'(x) (sigmoid reads y).
 *   mul:    y = x * g with x [N, C, H, W] and the gate g [N, C, 1, 1] (f32,
 *           or x's dtype); dx = dy * g, dg[n, c] = sum over H, W of dy * x
 *           (either NULL: not wanted).
 *   concat: y [N, Ca + Cb, H, W] = [a; b] on channels (a, b, y one format);
 *           da, db the two slices of dy (either NULL: not wanted). */
px_status_t px__ops_act_forward(px_ops_t *ops, px_tensor_t *y, const px_tensor_t *x, px__act_t act,
                                float alpha);
px_status_t px__ops_act_backward(px_ops_t *ops, px_tensor_t *dx, const px_tensor_t *dy,
                                 const px_tensor_t *x, const px_tensor_t *y, px__act_t act,
                                 float alpha);
px_status_t px__ops_mul_forward(px_ops_t *ops, px_tensor_t *y, const px_tensor_t *x,
                                const px_tensor_t *g);
px_status_t px__ops_mul_backward(px_ops_t *ops, px_tensor_t *dx, px_tensor_t *dg,
                                 const px_tensor_t *dy, const px_tensor_t *x, const px_tensor_t *g);
px_status_t px__ops_concat_forward(px_ops_t *ops, px_tensor_t *y, const px_tensor_t *a,
                                   const px_tensor_t *b);
px_status_t px__ops_concat_backward(px_ops_t *ops, px_tensor_t *da, px_tensor_t *db,
                                    const px_tensor_t *dy);

/* LayerNorm over the channels of a map x [N, C, H, W] (nn/px_graph_ops.h's
 * px__ln_forward on any engine): g, b the per-channel scale and shift [C]
 * (f32), mean and rstd f32 [N * H * W] written by the forward and read by
 * the backward; y, dy, dx like x. dx NULL: not wanted; dg, db overwritten.
 * The CPU takes plain f32 NCHW, CUDA plain f32 or NHWC f32 / bf16
 * (nn/cuda/cuda_ln.cu). */
px_status_t px__ops_ln_forward(px_ops_t *ops, px_tensor_t *y, px_tensor_t *mean, px_tensor_t *rstd,
                               const px_tensor_t *x, const px_tensor_t *g, const px_tensor_t *b,
                               float eps);
/* A channel selection (nn/px_graph_ops.h's px__chan_forward on any engine):
 * y [N, Cy, H, W] takes channel px__chan_src(j) of x [N, Cx, H, W] as its
 * channel j: groups > 1 is a channel shuffle (start 0, Cy == Cx, groups
 * dividing it), groups 1 the channels [start, start + Cy) (a Split's
 * part). The backward writes all of dx: dy's values where a channel was
 * taken, zero elsewhere. x, y one dtype and format (the CPU: plain f32;
 * CUDA: plain f32 or NHWC f32 / bf16). */
px_status_t px__ops_chan_forward(px_ops_t *ops, px_tensor_t *y, const px_tensor_t *x, int groups,
                                 int start);
px_status_t px__ops_chan_backward(px_ops_t *ops, px_tensor_t *dx, const px_tensor_t *dy, int groups,
                                  int start);

px_status_t px__ops_ln_backward(px_ops_t *ops, px_tensor_t *dx, px_tensor_t *dg, px_tensor_t *db,
                                const px_tensor_t *dy, const px_tensor_t *x,
                                const px_tensor_t *mean, const px_tensor_t *rstd,
                                const px_tensor_t *g);

/* Checks that t matches spec (device, dtype, dims, layout) and has storage
 * of at least spec->nbytes; PX_ERR_INVALID naming `what` otherwise. Shared
 * by backends that have no check of their own. */
px_status_t px__ops_check_tensor(const px_tensor_t *t, const px_tensor_t *spec, const char *what);
/* px__ops_check_tensor with the subject in two words, "op arg" (arg may be
 * NULL), joined only when the check fails (nn/ops_check.c). */
px_status_t px__ops_check_as(const px_tensor_t *t, const px_tensor_t *spec, const char *op,
                             const char *arg);

/* A copy of spec without storage or ownership flags: what an op keeps of the
 * input spec it was created for. */
static inline px_tensor_t px__ops_spec_copy(const px_tensor_t *spec) {
  px_tensor_t s = *spec;
  s.data = NULL;
  s.flags = 0;
  return s;
}

/* The argument contract of a layer with weights (px_conv2d_t, px_fc_t) in
 * either backend: the specs the op was created with and whether it has a
 * bias. Each backend's op embeds one and checks every call with the three
 * functions below before it reaches its primitives, so both layers refuse
 * the same calls with the same messages on the CPU and on CUDA. */
typedef struct {
  const char *name;   /* "conv2d", "fc": first word of every message */
  const char *noun;   /* "conv", "layer": what the messages call a layer without bias */
  int bias;           /* the op adds b / computes db */
  px_tensor_t x_spec; /* input, in the layout the op was created for */
  px_tensor_t y_spec; /* output, in the backend's layout */
  px_tensor_t w_spec; /* plain f32 weights */
  px_tensor_t b_spec; /* [out] plain f32 */
} px__wlayer_t;

/* How every backend lays out its px_conv2d_t and px_fc_t objects: the head,
 * then the contract, so that the dispatcher answers px_conv2d_y_spec and the
 * other spec queries of these layers itself (each backend checks the offset
 * at compile time). */
typedef struct {
  px__ops_head_t head;
  px__wlayer_t wl;
} px__wlayer_op_t;

/* Sets name, noun and bias and keeps a copy of the input spec (no storage);
 * the backend fills y_spec, w_spec and b_spec. */
static inline void px__wlayer_init(px__wlayer_t *l, const char *name, const char *noun, int bias,
                                   const px_tensor_t *x_spec) {
  l->name = name;
  l->noun = noun;
  l->bias = bias;
  l->x_spec = px__ops_spec_copy(x_spec);
}

/* Each returns PX_OK, or PX_ERR_INVALID naming the op, the direction and the
 * argument ("conv2d forward w: ..."); b / db must be NULL exactly when the
 * layer has no bias. They allocate nothing. */
px_status_t px__wlayer_check_forward(const px__wlayer_t *l, const px_tensor_t *y,
                                     const px_tensor_t *x, const px_tensor_t *w,
                                     const px_tensor_t *b);
px_status_t px__wlayer_check_backward_data(const px__wlayer_t *l, const px_tensor_t *dx,
                                           const px_tensor_t *dy, const px_tensor_t *w);
px_status_t px__wlayer_check_backward_weights(const px__wlayer_t *l, const px_tensor_t *dw,
                                              const px_tensor_t *db, const px_tensor_t *x,
                                              const px_tensor_t *dy);

/* PX_CUDNN_API's value (NULL: unset): *graph = 1 for unset, empty or
 * "graph" (the default), 0 for "legacy"; anything else fails with
 * PX_ERR_INVALID naming the variable and the values it takes (cudnn_api.c,
 * in every build). */
px_status_t px__cudnn_api_parse(const char *value, int *graph);

/* The axes (height, width) of pooling window p on x_spec [N, C, H, W] after
 * the checks both engines make (ops_dispatch.c): PX_ERR_INVALID naming the
 * parameters when they are bad. Each engine sizes its output by
 * px__axis_out of them. */
px_status_t px__pool_axes(const px_tensor_t *x_spec, const px_pool2d_params_t *p, px__axis_t *ah,
                          px__axis_t *aw);

#ifdef __cplusplus
}
#endif
#endif
