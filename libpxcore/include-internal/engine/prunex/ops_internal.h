/* The part of prunex/ops.h internal to libpxcore, its programs and its tests
 * (not installed, not exported: docs/architecture.md, "libpxcore"). */
#ifndef PRUNEX_OPS_INTERNAL_H
#define PRUNEX_OPS_INTERNAL_H

#include "prunex/ops.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Creates a convolution for input x_spec [N, C_in, H, W] f32 (any layout
 * from this context). Caller owns *out. Fails with PX_ERR_INVALID (bad
 * params, empty output), PX_ERR_BACKEND, PX_ERR_NOMEM. */
px_status_t px_conv2d_create(px_ops_t *ops, const px_tensor_t *x_spec,
                             const px_conv2d_params_t *p, px_conv2d_t **out);
void px_conv2d_destroy(px_conv2d_t *op);

/* Specs (no storage): y [N, C_out, OH, OW] in the backend's layout; w plain
 * [C_out, C_in / groups, KH, KW]; b plain [C_out]. */
void px_conv2d_y_spec(const px_conv2d_t *op, px_tensor_t *spec);
void px_conv2d_w_spec(const px_conv2d_t *op, px_tensor_t *spec);
void px_conv2d_b_spec(const px_conv2d_t *op, px_tensor_t *spec);

/* y = conv(x, w) (+ b). b must be NULL iff the op has no bias. */
px_status_t px_conv2d_forward(px_conv2d_t *op, px_tensor_t *y, const px_tensor_t *x,
                              const px_tensor_t *w, const px_tensor_t *b);
/* dx = dL/dx from dy (spec of y) and w. */
px_status_t px_conv2d_backward_data(px_conv2d_t *op, px_tensor_t *dx, const px_tensor_t *dy,
                                    const px_tensor_t *w);
/* dw (plain, spec of w) and db (spec of b, NULL iff no bias) from x and dy. */
px_status_t px_conv2d_backward_weights(px_conv2d_t *op, px_tensor_t *dw, px_tensor_t *db,
                                       const px_tensor_t *x, const px_tensor_t *dy);

/* Creates a batch norm for x_spec [N, C, H, W] f32 (any layout). Caller owns
 * *out. Fails with PX_ERR_INVALID, PX_ERR_BACKEND, PX_ERR_NOMEM. */
px_status_t px_batchnorm_create(px_ops_t *ops, const px_tensor_t *x_spec,
                                const px_batchnorm_params_t *p, px_batchnorm_t **out);
void px_batchnorm_destroy(px_batchnorm_t *op);

/* Specs: y like x; per-channel tensors (scale, shift, running and batch
 * statistics) plain f32 [C]; workspace u8 [bytes] that carries the ReLU mask
 * from forward to backward (nbytes 0 when fuse_relu is off, and then
 * ws may be NULL in the calls). */
void px_batchnorm_y_spec(const px_batchnorm_t *op, px_tensor_t *spec);
void px_batchnorm_c_spec(const px_batchnorm_t *op, px_tensor_t *spec);
void px_batchnorm_ws_spec(const px_batchnorm_t *op, px_tensor_t *spec);

/* Training forward: y, the batch statistics mean/var (biased variance, kept
 * for the backward) and the workspace; updates running_mean/running_var in
 * place. Fails with PX_ERR_INVALID when N*H*W < 2 (no unbiased variance). */
px_status_t px_batchnorm_forward_train(px_batchnorm_t *op, px_tensor_t *y, px_tensor_t *mean,
                                       px_tensor_t *var, px_tensor_t *ws,
                                       const px_tensor_t *x, const px_tensor_t *scale,
                                       const px_tensor_t *shift, px_tensor_t *running_mean,
                                       px_tensor_t *running_var);
/* Inference forward with the running statistics (nothing is updated). */
px_status_t px_batchnorm_forward_infer(px_batchnorm_t *op, px_tensor_t *y,
                                       const px_tensor_t *x, const px_tensor_t *scale,
                                       const px_tensor_t *shift,
                                       const px_tensor_t *running_mean,
                                       const px_tensor_t *running_var);
/* The training forward's y once more, bit for bit, from the same x, scale
 * and shift and the mean/var that forward wrote (the running statistics
 * are not touched, no mask is written): what lets a model drop y after its
 * forward readers and make it again for its backward readers (the memory
 * plan's recomputation, nn/model.c). Only after a training forward of this
 * op (PX_ERR_STATE before), and only where px_batchnorm_can_recompute says
 * so (PX_ERR_INVALID elsewhere): the CPU engine (it keeps the forward's
 * coefficients) and CUDA's channels-last kernels (the forward's arithmetic
 * from the rounded var); not cuDNN's NCHW batch norm, whose training
 * forward no other call reproduces exactly. */
int px_batchnorm_can_recompute(const px_batchnorm_t *op);
/* The momentum the training forwards from now on move the running
 * statistics by (in [0, 1]; the op's params.momentum until then): the
 * calibration's cumulative average (nn/train.c). */
void px_batchnorm_set_momentum(px_batchnorm_t *op, float momentum);
px_status_t px_batchnorm_recompute(px_batchnorm_t *op, px_tensor_t *y, const px_tensor_t *x,
                                   const px_tensor_t *scale, const px_tensor_t *shift,
                                   const px_tensor_t *mean, const px_tensor_t *var);
/* Backward of the training forward: dx, dscale, dshift from dy, x, the
 * parameters of the forward and the mean/var/ws it saved. dx may alias dy. */
px_status_t px_batchnorm_backward(px_batchnorm_t *op, px_tensor_t *dx, px_tensor_t *dscale,
                                  px_tensor_t *dshift, const px_tensor_t *dy,
                                  const px_tensor_t *x, const px_tensor_t *scale,
                                  const px_tensor_t *shift, const px_tensor_t *mean,
                                  const px_tensor_t *var, const px_tensor_t *ws);

/* Creates a ReLU for x_spec (any shape and layout). Caller owns *out. */
px_status_t px_relu_create(px_ops_t *ops, const px_tensor_t *x_spec, px_relu_t **out);
void px_relu_destroy(px_relu_t *op);
void px_relu_y_spec(const px_relu_t *op, px_tensor_t *spec); /* like x */

/* y = max(x, 0); y may alias x. */
px_status_t px_relu_forward(px_relu_t *op, px_tensor_t *y, const px_tensor_t *x);
/* dx = dy * (y > 0), from the forward's output; dx may alias dy. */
px_status_t px_relu_backward(px_relu_t *op, px_tensor_t *dx, const px_tensor_t *dy,
                             const px_tensor_t *y);

/* Creates a pooling for x_spec [N, C, H, W] f32 (any layout). Caller owns *out. */
px_status_t px_pool2d_create(px_ops_t *ops, const px_tensor_t *x_spec,
                             const px_pool2d_params_t *p, px_pool2d_t **out);
/* Global average pooling: [N, C, H, W] -> [N, C, 1, 1] (a pool2d with an
 * H x W kernel; same forward/backward/destroy functions). */
px_status_t px_global_avgpool_create(px_ops_t *ops, const px_tensor_t *x_spec,
                                     px_pool2d_t **out);
void px_pool2d_destroy(px_pool2d_t *op);

/* Specs: y [N, C, OH, OW] in the backend's layout; ws u8 [bytes] holding
 * the arg-max positions of max pooling from forward to backward (nbytes 0
 * for average pooling, and then ws may be NULL). */
void px_pool2d_y_spec(const px_pool2d_t *op, px_tensor_t *spec);
void px_pool2d_ws_spec(const px_pool2d_t *op, px_tensor_t *spec);

px_status_t px_pool2d_forward(px_pool2d_t *op, px_tensor_t *y, px_tensor_t *ws,
                              const px_tensor_t *x);
/* dx from dy (and, for max pooling, the forward's ws). */
px_status_t px_pool2d_backward(px_pool2d_t *op, px_tensor_t *dx, const px_tensor_t *dy,
                               const px_tensor_t *ws);

px_status_t px_fc_create(px_ops_t *ops, const px_tensor_t *x_spec, const px_fc_params_t *p,
                         px_fc_t **out);
void px_fc_destroy(px_fc_t *op);

/* Specs: y plain [N, out_features]; w plain [out_features, C*H*W]; b plain
 * [out_features]. */
void px_fc_y_spec(const px_fc_t *op, px_tensor_t *spec);
void px_fc_w_spec(const px_fc_t *op, px_tensor_t *spec);
void px_fc_b_spec(const px_fc_t *op, px_tensor_t *spec);

px_status_t px_fc_forward(px_fc_t *op, px_tensor_t *y, const px_tensor_t *x,
                          const px_tensor_t *w, const px_tensor_t *b);
px_status_t px_fc_backward_data(px_fc_t *op, px_tensor_t *dx, const px_tensor_t *dy,
                                const px_tensor_t *w);
px_status_t px_fc_backward_weights(px_fc_t *op, px_tensor_t *dw, px_tensor_t *db,
                                   const px_tensor_t *x, const px_tensor_t *dy);

/* Creates an add for two tensors of spec x_spec (any shape and layout). */
px_status_t px_add_create(px_ops_t *ops, const px_tensor_t *x_spec, int relu,
                          px_add_t **out);
void px_add_destroy(px_add_t *op);
void px_add_y_spec(const px_add_t *op, px_tensor_t *spec); /* like x */

/* y = a + b (relu'd when created so); y may alias a or b. */
px_status_t px_add_forward(px_add_t *op, px_tensor_t *y, const px_tensor_t *a,
                           const px_tensor_t *b);
/* g = dy * (y > 0) with relu, else g = dy (a copy unless g aliases dy). The
 * gradient of both a and b is g. g may alias dy. */
px_status_t px_add_backward(px_add_t *op, px_tensor_t *g, const px_tensor_t *dy,
                            const px_tensor_t *y);

/* Creates a conversion from src_spec's layout to dst_spec's (same device,
 * dtype and dims), for the rare place where a producer's and a consumer's
 * layouts differ on a hot path. Caller owns *out. */
px_status_t px_reorder_create(px_ops_t *ops, const px_tensor_t *dst_spec,
                              const px_tensor_t *src_spec, px_reorder_t **out);
void px_reorder_destroy(px_reorder_t *op);
px_status_t px_reorder_execute(px_reorder_t *op, px_tensor_t *dst, const px_tensor_t *src);

/* ---- softmax cross-entropy ------------------------------------------------------------
 * For logits [N, K] plain f32 and labels [N] i32 in [0, K):
 *   loss = mean_n ( logsumexp(logits[n]) - logits[n, labels[n]] )
 *   dlogits[n, k] = (softmax(logits[n])[k] - [k == labels[n]]) / N
 *   correct = #{n : argmax_k logits[n, k] == labels[n]} (first max wins).
 * dlogits may be NULL (evaluation). loss and correct are host outputs (this
 * call waits for the device). Fails with PX_ERR_INVALID on a label out of
 * range. No allocation. */
px_status_t px_softmax_ce(px_ops_t *ops, px_tensor_t *dlogits, float *loss, int64_t *correct,
                          const px_tensor_t *logits, const px_tensor_t *labels);

#ifdef __cplusplus
}
#endif

#endif
