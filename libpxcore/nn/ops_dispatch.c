/* The public functions of ops.h: each routes the call to the backend that
 * created the context or op object, through the function table every such
 * object starts with (nn/px_ops_int.h). px_ops_create picks the backend from
 * the device kind. Nothing here knows a backend's types. */
#include <assert.h>
#include <stdio.h>
#include <string.h>

#include "nn/px_ops_int.h"
#include "px_check.h"
#include "prunex/ops_internal.h"

/* The table of any context or op object (its first member). */
#define PX__BE(obj) (((const px__ops_head_t *)(const void *)(obj))->be)
/* The contract of a conv2d or fc object of any backend (px__wlayer_op_t). */
#define PX__WL(op) (&((const px__wlayer_op_t *)(const void *)(op))->wl)

px_status_t px_ops_create(px_device_t dev, int nthreads, px_ops_t **out) {
  PX_REQUIRE(out != NULL, "px_ops_create: out is NULL");
  *out = NULL;
  switch (dev.kind) {
    case PX_DEVICE_CPU: return px__cpu_ops_create(dev, nthreads, out);
    case PX_DEVICE_CUDA: return px__cuda_ops_create(dev, nthreads, out);
  }
  return px_set_error(PX_ERR_INVALID, "px_ops_create: unknown device kind %d", (int)dev.kind);
}

void px_ops_destroy(px_ops_t *ops) {
  if (ops) PX__BE(ops)->ops_destroy(ops);
}

px_device_t px_ops_device(const px_ops_t *ops) { return PX__BE(ops)->ops_device(ops); }
int px_ops_threads(const px_ops_t *ops) { return PX__BE(ops)->ops_threads(ops); }

px_status_t px_ops_sync(px_ops_t *ops) {
  PX_REQUIRE(ops != NULL, "px_ops_sync: ops context is NULL");
  return PX__BE(ops)->ops_sync(ops);
}

size_t px_ops_scratchpad_bytes(const px_ops_t *ops) {
  return PX__BE(ops)->ops_scratchpad_bytes(ops);
}

const char *px_ops_describe(const px_ops_t *ops) { return PX__BE(ops)->ops_describe(ops); }

px_status_t px_ops_act_format(px_ops_t *ops, px_precision_t precision, px_tensor_t *spec) {
  PX_REQUIRE(ops != NULL && spec != NULL, "px_ops_act_format: NULL argument");
  PX_REQUIRE(precision == PX_PRECISION_FP32 || precision == PX_PRECISION_BF16,
             "px_ops_act_format: unknown precision %d", (int)precision);
  PX_REQUIRE(spec->ndim == 4 && spec->dtype == PX_DTYPE_F32 && spec->layout == NULL,
             "px_ops_act_format: the spec must be a plain f32 4-D activation");
  return PX__BE(ops)->ops_act_format(ops, precision, spec);
}

px_status_t px_ops_set_tf32(px_ops_t *ops, int allow) {
  PX_REQUIRE(ops != NULL, "px_ops_set_tf32: ops context is NULL");
  return PX__BE(ops)->ops_set_tf32(ops, allow ? 1 : 0);
}

px_status_t px__ops_upload(px_ops_t *ops, int n, px_tensor_t *const *dst, const void *const *src) {
  PX_REQUIRE(ops != NULL, "upload: ops context is NULL");
  PX_REQUIRE(n >= 0 && (n == 0 || (dst && src)), "upload: bad arguments");
  return PX__BE(ops)->ops_upload(ops, n, dst, src);
}

int px__ops_channels_last(px_ops_t *ops, int on) {
  return ops ? PX__BE(ops)->ops_channels_last(ops, on < 0 ? -1 : on ? 1 : 0) : 0;
}

/* ---- creation: routed by the context ------------------------------------------ */

#define PX__REQUIRE_OPS(ops, out, what)                                       \
  do {                                                                        \
    PX_REQUIRE((out) != NULL, "%s: out is NULL", what);                       \
    *(out) = NULL;                                                            \
    PX_REQUIRE((ops) != NULL, "%s: ops context is NULL", what);               \
  } while (0)

px_status_t px_conv2d_create(px_ops_t *ops, const px_tensor_t *x_spec, const px_conv2d_params_t *p,
                             px_conv2d_t **out) {
  PX__REQUIRE_OPS(ops, out, "px_conv2d_create");
  return PX__BE(ops)->conv2d_create(ops, x_spec, p, out);
}

px_status_t px_batchnorm_create(px_ops_t *ops, const px_tensor_t *x_spec,
                                const px_batchnorm_params_t *p, px_batchnorm_t **out) {
  PX__REQUIRE_OPS(ops, out, "px_batchnorm_create");
  return PX__BE(ops)->batchnorm_create(ops, x_spec, p, out);
}

px_status_t px_relu_create(px_ops_t *ops, const px_tensor_t *x_spec, px_relu_t **out) {
  PX__REQUIRE_OPS(ops, out, "px_relu_create");
  return PX__BE(ops)->relu_create(ops, x_spec, out);
}

px_status_t px_pool2d_create(px_ops_t *ops, const px_tensor_t *x_spec, const px_pool2d_params_t *p,
                             px_pool2d_t **out) {
  PX__REQUIRE_OPS(ops, out, "px_pool2d_create");
  return PX__BE(ops)->pool2d_create(ops, x_spec, p, out);
}

px_status_t px_global_avgpool_create(px_ops_t *ops, const px_tensor_t *x_spec, px_pool2d_t **out) {
  PX__REQUIRE_OPS(ops, out, "px_global_avgpool_create");
  return PX__BE(ops)->global_avgpool_create(ops, x_spec, out);
}

px_status_t px_fc_create(px_ops_t *ops, const px_tensor_t *x_spec, const px_fc_params_t *p,
                         px_fc_t **out) {
  PX__REQUIRE_OPS(ops, out, "px_fc_create");
  return PX__BE(ops)->fc_create(ops, x_spec, p, out);
}

px_status_t px_add_create(px_ops_t *ops, const px_tensor_t *x_spec, int relu, px_add_t **out) {
  PX__REQUIRE_OPS(ops, out, "px_add_create");
  return PX__BE(ops)->add_create(ops, x_spec, relu, out);
}

px_status_t px_reorder_create(px_ops_t *ops, const px_tensor_t *dst_spec,
                              const px_tensor_t *src_spec, px_reorder_t **out) {
  PX__REQUIRE_OPS(ops, out, "px_reorder_create");
  return PX__BE(ops)->reorder_create(ops, dst_spec, src_spec, out);
}

/* The shapes softmax_ce accepts, checked here once for every backend: logits
 * plain f32 [N, K], labels plain i32 [N], dlogits (optional) like logits, all
 * with storage on the context's device. Label values are the backend's to
 * check (they may live on a GPU). */
static px_status_t px__softmax_ce_check(px_device_t dev, const px_tensor_t *dlogits,
                                        const px_tensor_t *logits, const px_tensor_t *labels) {
  PX_REQUIRE(logits && labels, "px_softmax_ce: NULL tensor");
  PX_REQUIRE(logits->data && labels->data, "px_softmax_ce: tensor without storage");
  PX_REQUIRE(px_device_equal(logits->device, dev) && px_device_equal(labels->device, dev),
             "px_softmax_ce: tensors on another device");
  PX_REQUIRE(logits->ndim == 2 && logits->dtype == PX_DTYPE_F32 && !logits->layout,
             "px_softmax_ce: logits must be plain f32 [N, K]");
  const int64_t n = logits->dims[0];
  PX_REQUIRE(labels->ndim == 1 && labels->dtype == PX_DTYPE_I32 && !labels->layout &&
                 labels->dims[0] == n,
             "px_softmax_ce: labels must be plain i32 [%lld]", (long long)n);
  if (dlogits)
    PX_REQUIRE(px_tensor_same_spec(dlogits, logits) && dlogits->data,
               "px_softmax_ce: dlogits must be like logits");
  return PX_OK;
}

px_status_t px_softmax_ce(px_ops_t *ops, px_tensor_t *dlogits, float *loss, int64_t *correct,
                          const px_tensor_t *logits, const px_tensor_t *labels) {
  PX_REQUIRE(ops != NULL, "px_softmax_ce: ops context is NULL");
  PX_CHECK(px__softmax_ce_check(PX__BE(ops)->ops_device(ops), dlogits, logits, labels));
  return PX__BE(ops)->softmax_ce(ops, dlogits, loss, correct, logits, labels);
}

/* ---- op objects: routed by the object ------------------------------------------ */

void px_conv2d_destroy(px_conv2d_t *op) {
  if (op) PX__BE(op)->conv2d_destroy(op);
}
void px_conv2d_y_spec(const px_conv2d_t *op, px_tensor_t *spec) { *spec = PX__WL(op)->y_spec; }
void px_conv2d_w_spec(const px_conv2d_t *op, px_tensor_t *spec) { *spec = PX__WL(op)->w_spec; }
void px_conv2d_b_spec(const px_conv2d_t *op, px_tensor_t *spec) { *spec = PX__WL(op)->b_spec; }

px_status_t px_conv2d_forward(px_conv2d_t *op, px_tensor_t *y, const px_tensor_t *x,
                              const px_tensor_t *w, const px_tensor_t *b) {
  assert(op);
  return PX__BE(op)->conv2d_forward(op, y, x, w, b);
}

px_status_t px_conv2d_backward_data(px_conv2d_t *op, px_tensor_t *dx, const px_tensor_t *dy,
                                    const px_tensor_t *w) {
  assert(op);
  return PX__BE(op)->conv2d_backward_data(op, dx, dy, w);
}

px_status_t px_conv2d_backward_weights(px_conv2d_t *op, px_tensor_t *dw, px_tensor_t *db,
                                       const px_tensor_t *x, const px_tensor_t *dy) {
  assert(op);
  return PX__BE(op)->conv2d_backward_weights(op, dw, db, x, dy);
}

void px_batchnorm_destroy(px_batchnorm_t *op) {
  if (op) PX__BE(op)->batchnorm_destroy(op);
}
void px_batchnorm_y_spec(const px_batchnorm_t *op, px_tensor_t *spec) {
  PX__BE(op)->batchnorm_y_spec(op, spec);
}
void px_batchnorm_c_spec(const px_batchnorm_t *op, px_tensor_t *spec) {
  PX__BE(op)->batchnorm_c_spec(op, spec);
}
void px_batchnorm_ws_spec(const px_batchnorm_t *op, px_tensor_t *spec) {
  PX__BE(op)->batchnorm_ws_spec(op, spec);
}

px_status_t px_batchnorm_forward_train(px_batchnorm_t *op, px_tensor_t *y, px_tensor_t *mean,
                                       px_tensor_t *var, px_tensor_t *ws, const px_tensor_t *x,
                                       const px_tensor_t *scale, const px_tensor_t *shift,
                                       px_tensor_t *running_mean, px_tensor_t *running_var) {
  assert(op);
  return PX__BE(op)->batchnorm_forward_train(op, y, mean, var, ws, x, scale, shift, running_mean,
                                             running_var);
}

px_status_t px_batchnorm_forward_infer(px_batchnorm_t *op, px_tensor_t *y, const px_tensor_t *x,
                                       const px_tensor_t *scale, const px_tensor_t *shift,
                                       const px_tensor_t *running_mean,
                                       const px_tensor_t *running_var) {
  assert(op);
  return PX__BE(op)->batchnorm_forward_infer(op, y, x, scale, shift, running_mean, running_var);
}

void px_batchnorm_set_momentum(px_batchnorm_t *op, float momentum) {
  if (op && momentum >= 0.0f && momentum <= 1.0f) PX__BE(op)->batchnorm_set_momentum(op, momentum);
}

int px_batchnorm_can_recompute(const px_batchnorm_t *op) {
  return op && PX__BE(op)->batchnorm_can_recompute(op);
}

px_status_t px_batchnorm_recompute(px_batchnorm_t *op, px_tensor_t *y, const px_tensor_t *x,
                                   const px_tensor_t *scale, const px_tensor_t *shift,
                                   const px_tensor_t *mean, const px_tensor_t *var) {
  assert(op);
  PX_REQUIRE(PX__BE(op)->batchnorm_can_recompute(op),
             "px_batchnorm_recompute: this %s batch norm cannot recompute its output exactly",
             PX__BE(op)->name);
  return PX__BE(op)->batchnorm_recompute(op, y, x, scale, shift, mean, var);
}

px_status_t px_batchnorm_backward(px_batchnorm_t *op, px_tensor_t *dx, px_tensor_t *dscale,
                                  px_tensor_t *dshift, const px_tensor_t *dy, const px_tensor_t *x,
                                  const px_tensor_t *scale, const px_tensor_t *shift,
                                  const px_tensor_t *mean, const px_tensor_t *var,
                                  const px_tensor_t *ws) {
  assert(op);
  return PX__BE(op)->batchnorm_backward(op, dx, dscale, dshift, dy, x, scale, shift, mean, var, ws);
}

void px_relu_destroy(px_relu_t *op) {
  if (op) PX__BE(op)->relu_destroy(op);
}
void px_relu_y_spec(const px_relu_t *op, px_tensor_t *spec) { PX__BE(op)->relu_y_spec(op, spec); }

px_status_t px_relu_forward(px_relu_t *op, px_tensor_t *y, const px_tensor_t *x) {
  assert(op);
  return PX__BE(op)->relu_forward(op, y, x);
}

px_status_t px_relu_backward(px_relu_t *op, px_tensor_t *dx, const px_tensor_t *dy,
                             const px_tensor_t *y) {
  assert(op);
  return PX__BE(op)->relu_backward(op, dx, dy, y);
}

void px_pool2d_destroy(px_pool2d_t *op) {
  if (op) PX__BE(op)->pool2d_destroy(op);
}
void px_pool2d_y_spec(const px_pool2d_t *op, px_tensor_t *spec) { PX__BE(op)->pool2d_y_spec(op, spec); }
void px_pool2d_ws_spec(const px_pool2d_t *op, px_tensor_t *spec) {
  PX__BE(op)->pool2d_ws_spec(op, spec);
}

px_status_t px_pool2d_forward(px_pool2d_t *op, px_tensor_t *y, px_tensor_t *ws,
                              const px_tensor_t *x) {
  assert(op);
  return PX__BE(op)->pool2d_forward(op, y, ws, x);
}

px_status_t px_pool2d_backward(px_pool2d_t *op, px_tensor_t *dx, const px_tensor_t *dy,
                               const px_tensor_t *ws) {
  assert(op);
  return PX__BE(op)->pool2d_backward(op, dx, dy, ws);
}

void px_fc_destroy(px_fc_t *op) {
  if (op) PX__BE(op)->fc_destroy(op);
}
void px_fc_y_spec(const px_fc_t *op, px_tensor_t *spec) { *spec = PX__WL(op)->y_spec; }
void px_fc_w_spec(const px_fc_t *op, px_tensor_t *spec) { *spec = PX__WL(op)->w_spec; }
void px_fc_b_spec(const px_fc_t *op, px_tensor_t *spec) { *spec = PX__WL(op)->b_spec; }

px_status_t px_fc_forward(px_fc_t *op, px_tensor_t *y, const px_tensor_t *x, const px_tensor_t *w,
                          const px_tensor_t *b) {
  assert(op);
  return PX__BE(op)->fc_forward(op, y, x, w, b);
}

px_status_t px_fc_backward_data(px_fc_t *op, px_tensor_t *dx, const px_tensor_t *dy,
                                const px_tensor_t *w) {
  assert(op);
  return PX__BE(op)->fc_backward_data(op, dx, dy, w);
}

px_status_t px_fc_backward_weights(px_fc_t *op, px_tensor_t *dw, px_tensor_t *db,
                                   const px_tensor_t *x, const px_tensor_t *dy) {
  assert(op);
  return PX__BE(op)->fc_backward_weights(op, dw, db, x, dy);
}

void px_add_destroy(px_add_t *op) {
  if (op) PX__BE(op)->add_destroy(op);
}
void px_add_y_spec(const px_add_t *op, px_tensor_t *spec) { PX__BE(op)->add_y_spec(op, spec); }

px_status_t px_add_forward(px_add_t *op, px_tensor_t *y, const px_tensor_t *a,
                           const px_tensor_t *b) {
  assert(op);
  return PX__BE(op)->add_forward(op, y, a, b);
}

px_status_t px_add_backward(px_add_t *op, px_tensor_t *g, const px_tensor_t *dy,
                            const px_tensor_t *y) {
  assert(op);
  return PX__BE(op)->add_backward(op, g, dy, y);
}

void px_reorder_destroy(px_reorder_t *op) {
  if (op) PX__BE(op)->reorder_destroy(op);
}

px_status_t px_reorder_execute(px_reorder_t *op, px_tensor_t *dst, const px_tensor_t *src) {
  assert(op);
  return PX__BE(op)->reorder_execute(op, dst, src);
}

/* ---- the graph operators of imported networks: routed by the context ------------ */

/* t present, with storage, 4-D, on ops' device. */
static px_status_t px__graph_arg(const px_ops_t *ops, const px_tensor_t *t, const char *op,
                                 const char *arg) {
  if (!t) return px_set_error(PX_ERR_INVALID, "%s %s is NULL", op, arg);
  if (!t->data) return px_set_error(PX_ERR_INVALID, "%s %s has no storage", op, arg);
  if (!px_device_equal(t->device, PX__BE(ops)->ops_device(ops)))
    return px_set_error(PX_ERR_INVALID, "%s %s is on another device than the ops context", op, arg);
  if (t->ndim != 4)
    return px_set_error(PX_ERR_INVALID, "%s %s: a 4-D [N, C, H, W] tensor is needed, not %d-D", op,
                        arg, t->ndim);
  return PX_OK;
}

/* An activation's input: a map as px__graph_arg, or the features [N, F]
 * between two FC layers (element-wise either way). */
static px_status_t px__act_arg(const px_ops_t *ops, const px_tensor_t *t, const char *op) {
  if (t && t->ndim == 2 && t->data && px_device_equal(t->device, PX__BE(ops)->ops_device(ops)))
    return PX_OK;
  return px__graph_arg(ops, t, op, "x");
}

static px_status_t px__act_check(const px_ops_t *ops, px__act_t act, const char *op) {
  PX_REQUIRE(ops != NULL, "%s: ops context is NULL", op);
  PX_REQUIRE((int)act >= 0 && (int)act < PX__ACT_COUNT, "%s: unknown activation %d", op,
             (int)act);
  return PX_OK;
}

px_status_t px__ops_act_forward(px_ops_t *ops, px_tensor_t *y, const px_tensor_t *x, px__act_t act,
                                float alpha) {
  PX_CHECK(px__act_check(ops, act, "activation forward"));
  PX_CHECK(px__act_arg(ops, x, "activation forward"));
  PX_CHECK(px__ops_check_as(y, x, "activation forward", "y"));
  return PX__BE(ops)->act_forward(ops, y, x, act, alpha);
}

px_status_t px__ops_act_backward(px_ops_t *ops, px_tensor_t *dx, const px_tensor_t *dy,
                                 const px_tensor_t *x, const px_tensor_t *y, px__act_t act,
                                 float alpha) {
  PX_CHECK(px__act_check(ops, act, "activation backward"));
  PX_CHECK(px__act_arg(ops, x, "activation backward"));
  PX_CHECK(px__ops_check_as(y, x, "activation backward", "y"));
  PX_CHECK(px__ops_check_as(dy, x, "activation backward", "dy"));
  PX_CHECK(px__ops_check_as(dx, x, "activation backward", "dx"));
  return PX__BE(ops)->act_backward(ops, dx, dy, x, y, act, alpha);
}

/* The gate of x: [N, C, 1, 1], f32 or x's dtype. */
static px_status_t px__gate_check(const px_ops_t *ops, const px_tensor_t *g, const px_tensor_t *x,
                                  const char *op, const char *arg) {
  PX_CHECK(px__graph_arg(ops, g, op, arg));
  if (g->dims[0] != x->dims[0] || g->dims[1] != x->dims[1] || g->dims[2] != 1 || g->dims[3] != 1)
    return px_set_error(PX_ERR_INVALID, "%s %s: a per-channel gate [%lld, %lld, 1, 1] is needed, "
                        "not [%lld, %lld, %lld, %lld]", op, arg, (long long)x->dims[0],
                        (long long)x->dims[1], (long long)g->dims[0], (long long)g->dims[1],
                        (long long)g->dims[2], (long long)g->dims[3]);
  if (g->dtype != PX_DTYPE_F32 && g->dtype != x->dtype)
    return px_set_error(PX_ERR_INVALID, "%s %s: the gate's dtype %d is neither f32 nor the map's",
                        op, arg, (int)g->dtype);
  return PX_OK;
}

px_status_t px__ops_mul_forward(px_ops_t *ops, px_tensor_t *y, const px_tensor_t *x,
                                const px_tensor_t *g) {
  PX_REQUIRE(ops != NULL, "mul forward: ops context is NULL");
  PX_CHECK(px__graph_arg(ops, x, "mul forward", "x"));
  PX_CHECK(px__gate_check(ops, g, x, "mul forward", "g"));
  PX_CHECK(px__ops_check_as(y, x, "mul forward", "y"));
  return PX__BE(ops)->mul_forward(ops, y, x, g);
}

px_status_t px__ops_mul_backward(px_ops_t *ops, px_tensor_t *dx, px_tensor_t *dg,
                                 const px_tensor_t *dy, const px_tensor_t *x,
                                 const px_tensor_t *g) {
  PX_REQUIRE(ops != NULL, "mul backward: ops context is NULL");
  PX_CHECK(px__graph_arg(ops, x, "mul backward", "x"));
  PX_CHECK(px__gate_check(ops, g, x, "mul backward", "g"));
  PX_CHECK(px__ops_check_as(dy, x, "mul backward", "dy"));
  if (dx) PX_CHECK(px__ops_check_as(dx, x, "mul backward", "dx"));
  if (dg) PX_CHECK(px__ops_check_as(dg, g, "mul backward", "dg"));
  return PX__BE(ops)->mul_backward(ops, dx, dg, dy, x, g);
}

/* y [N, Ca + Cb, H, W] of a [N, Ca, H, W] and b [N, Cb, H, W], one dtype,
 * all plain or none. */
static px_status_t px__concat_check(const px_ops_t *ops, const px_tensor_t *y,
                                    const px_tensor_t *a, const px_tensor_t *b, const char *op,
                                    const char *an, const char *bn) {
  PX_CHECK(px__graph_arg(ops, y, op, "y"));
  PX_CHECK(px__graph_arg(ops, a, op, an));
  PX_CHECK(px__graph_arg(ops, b, op, bn));
  const int64_t *yd = y->dims, *ad = a->dims, *bd = b->dims;
  if (ad[0] != yd[0] || bd[0] != yd[0] || ad[2] != yd[2] || bd[2] != yd[2] || ad[3] != yd[3] ||
      bd[3] != yd[3] || ad[1] + bd[1] != yd[1])
    return px_set_error(PX_ERR_INVALID, "%s: [%lld, %lld, %lld, %lld] and [%lld, %lld, %lld, "
                        "%lld] do not join into [%lld, %lld, %lld, %lld] on channels", op,
                        (long long)ad[0], (long long)ad[1], (long long)ad[2], (long long)ad[3],
                        (long long)bd[0], (long long)bd[1], (long long)bd[2], (long long)bd[3],
                        (long long)yd[0], (long long)yd[1], (long long)yd[2], (long long)yd[3]);
  if (a->dtype != y->dtype || b->dtype != y->dtype ||
      px_tensor_is_plain(a) != px_tensor_is_plain(y) ||
      px_tensor_is_plain(b) != px_tensor_is_plain(y))
    return px_set_error(PX_ERR_INVALID, "%s: %s, %s and the output differ in dtype or layout", op,
                        an, bn);
  return PX_OK;
}

px_status_t px__ops_concat_forward(px_ops_t *ops, px_tensor_t *y, const px_tensor_t *a,
                                   const px_tensor_t *b) {
  PX_REQUIRE(ops != NULL, "concat forward: ops context is NULL");
  PX_CHECK(px__concat_check(ops, y, a, b, "concat forward", "a", "b"));
  return PX__BE(ops)->concat_forward(ops, y, a, b);
}

px_status_t px__ops_concat_backward(px_ops_t *ops, px_tensor_t *da, px_tensor_t *db,
                                    const px_tensor_t *dy) {
  PX_REQUIRE(ops != NULL, "concat backward: ops context is NULL");
  PX_REQUIRE(da || db, "concat backward: neither da nor db is wanted");
  const px_tensor_t *a = da ? da : db, *b = db ? db : da;
  if (!da || !db) { /* one slice: it fits dy's batch, map and format */
    PX_CHECK(px__graph_arg(ops, dy, "concat backward", "dy"));
    PX_CHECK(px__graph_arg(ops, a, "concat backward", da ? "da" : "db"));
    const int64_t *yd = dy->dims, *xd = a->dims;
    PX_REQUIRE(xd[0] == yd[0] && xd[2] == yd[2] && xd[3] == yd[3] && xd[1] < yd[1] &&
                   a->dtype == dy->dtype && px_tensor_is_plain(a) == px_tensor_is_plain(dy),
               "concat backward: %s does not fit dy", da ? "da" : "db");
  } else {
    PX_CHECK(px__concat_check(ops, dy, a, b, "concat backward", "da", "db"));
  }
  return PX__BE(ops)->concat_backward(ops, da, db, dy);
}

/* A channel selection's y (or dy) [N, Cy, H, W] of x (or dx) [N, Cx, H, W]. */
static px_status_t px__chan_check(const px_ops_t *ops, const px_tensor_t *y, const px_tensor_t *x,
                                  int groups, int start, const char *op) {
  PX_REQUIRE(ops != NULL, "%s: ops context is NULL", op);
  PX_CHECK(px__graph_arg(ops, y, op, "y"));
  PX_CHECK(px__graph_arg(ops, x, op, "x"));
  const int64_t *yd = y->dims, *xd = x->dims;
  int ok = yd[0] == xd[0] && yd[2] == xd[2] && yd[3] == xd[3] && groups >= 1 && start >= 0;
  if (groups > 1) ok = ok && start == 0 && yd[1] == xd[1] && xd[1] % groups == 0;
  else ok = ok && start + yd[1] <= xd[1];
  if (!ok)
    return px_set_error(PX_ERR_INVALID, "%s: [%lld, %lld, %lld, %lld] is no channel %s of [%lld, "
                        "%lld, %lld, %lld] (groups %d, start %d)", op, (long long)yd[0],
                        (long long)yd[1], (long long)yd[2], (long long)yd[3],
                        groups > 1 ? "shuffle" : "slice", (long long)xd[0], (long long)xd[1],
                        (long long)xd[2], (long long)xd[3], groups, start);
  if (x->dtype != y->dtype || px_tensor_is_plain(x) != px_tensor_is_plain(y))
    return px_set_error(PX_ERR_INVALID, "%s: the input and output differ in dtype or layout", op);
  return PX_OK;
}

px_status_t px__ops_chan_forward(px_ops_t *ops, px_tensor_t *y, const px_tensor_t *x, int groups,
                                 int start) {
  PX_CHECK(px__chan_check(ops, y, x, groups, start, "channel selection forward"));
  return PX__BE(ops)->chan_forward(ops, y, x, groups, start);
}

px_status_t px__ops_chan_backward(px_ops_t *ops, px_tensor_t *dx, const px_tensor_t *dy, int groups,
                                  int start) {
  PX_CHECK(px__chan_check(ops, dy, dx, groups, start, "channel selection backward"));
  return PX__BE(ops)->chan_backward(ops, dx, dy, groups, start);
}

/* A LayerNorm's vector argument: f32, [want] values, with storage on ops' device. */
static px_status_t px__ln_vec(const px_ops_t *ops, const px_tensor_t *t, int64_t want,
                              const char *op, const char *arg) {
  if (!t || !t->data) return px_set_error(PX_ERR_INVALID, "%s %s is NULL or has no storage", op, arg);
  if (!px_device_equal(t->device, PX__BE(ops)->ops_device(ops)))
    return px_set_error(PX_ERR_INVALID, "%s %s is on another device than the ops context", op, arg);
  if (t->dtype != PX_DTYPE_F32 || (int64_t)px_tensor_numel(t) != want ||
      t->nbytes < (size_t)want * sizeof(float))
    return px_set_error(PX_ERR_INVALID, "%s %s: f32 with %lld values is needed", op, arg,
                        (long long)want);
  return PX_OK;
}

/* x a map; g [C]; mean and rstd [N * H * W]. */
static px_status_t px__ln_check(const px_ops_t *ops, const px_tensor_t *x, const px_tensor_t *g,
                                const px_tensor_t *mean, const px_tensor_t *rstd, const char *op) {
  PX_REQUIRE(ops != NULL, "%s: ops context is NULL", op);
  PX_CHECK(px__graph_arg(ops, x, op, "x"));
  PX_CHECK(px__ln_vec(ops, g, x->dims[1], op, "g"));
  const int64_t npix = x->dims[0] * x->dims[2] * x->dims[3];
  PX_CHECK(px__ln_vec(ops, mean, npix, op, "mean"));
  return px__ln_vec(ops, rstd, npix, op, "rstd");
}

px_status_t px__ops_ln_forward(px_ops_t *ops, px_tensor_t *y, px_tensor_t *mean, px_tensor_t *rstd,
                               const px_tensor_t *x, const px_tensor_t *g, const px_tensor_t *b,
                               float eps) {
  PX_CHECK(px__ln_check(ops, x, g, mean, rstd, "layernorm forward"));
  PX_CHECK(px__ln_vec(ops, b, x->dims[1], "layernorm forward", "b"));
  PX_CHECK(px__ops_check_as(y, x, "layernorm forward", "y"));
  PX_REQUIRE(eps > 0.0f && eps <= 0.1f, "layernorm forward: eps %g out of (0, 0.1]", eps);
  return PX__BE(ops)->ln_forward(ops, y, mean, rstd, x, g, b, eps);
}

px_status_t px__ops_ln_backward(px_ops_t *ops, px_tensor_t *dx, px_tensor_t *dg, px_tensor_t *db,
                                const px_tensor_t *dy, const px_tensor_t *x,
                                const px_tensor_t *mean, const px_tensor_t *rstd,
                                const px_tensor_t *g) {
  PX_CHECK(px__ln_check(ops, x, g, mean, rstd, "layernorm backward"));
  PX_CHECK(px__ln_vec(ops, dg, x->dims[1], "layernorm backward", "dg"));
  PX_CHECK(px__ln_vec(ops, db, x->dims[1], "layernorm backward", "db"));
  PX_CHECK(px__ops_check_as(dy, x, "layernorm backward", "dy"));
  if (dx) PX_CHECK(px__ops_check_as(dx, x, "layernorm backward", "dx"));
  return PX__BE(ops)->ln_backward(ops, dx, dg, db, dy, x, mean, rstd, g);
}

px_status_t px__pool_axes(const px_tensor_t *x_spec, const px_pool2d_params_t *p, px__axis_t *ah,
                          px__axis_t *aw) {
  const int64_t pb = (int64_t)p->pad_h + p->pad_h_extra, pr = (int64_t)p->pad_w + p->pad_w_extra;
  const int64_t dh = p->dil_h > 1 ? p->dil_h : 1, dw = p->dil_w > 1 ? p->dil_w : 1;
  PX_REQUIRE(p->kh > 0 && p->kw > 0 && p->stride_h > 0 && p->stride_w > 0 && p->pad_h >= 0 &&
                 p->pad_w >= 0 && pb >= 0 && pr >= 0 && p->pad_h < p->kh && p->pad_w < p->kw &&
                 pb < p->kh && pr < p->kw && p->dil_h >= 0 && p->dil_w >= 0 &&
                 (p->mode == PX_POOL_MAX || (dh == 1 && dw == 1)),
             "px_pool2d_create: bad parameters (kernel %dx%d, stride %dx%d, pad %dx%d (+%dx%d at "
             "the end), dilation %dx%d, mode %d)", p->kh, p->kw, p->stride_h, p->stride_w,
             p->pad_h, p->pad_w, p->pad_h_extra, p->pad_w_extra, p->dil_h, p->dil_w, (int)p->mode);
  *ah = (px__axis_t){x_spec->dims[2], p->kh, p->stride_h, p->pad_h, pb, dh, p->ceil_mode != 0};
  *aw = (px__axis_t){x_spec->dims[3], p->kw, p->stride_w, p->pad_w, pr, dw, p->ceil_mode != 0};
  return PX_OK;
}
