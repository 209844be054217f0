/* Entry points of the CUDA op backend (the .cu files of nn/cuda), seen from C: the
 * function table px__cuda_backend (cuda_backend.c) is filled from these. Each
 * has the contract of the ops.h function of the same name without the
 * px__cuda_ prefix. Compiled only with CUDA; nn/nn_cuda_stub.c stands in for
 * px__cuda_ops_create otherwise. */
#ifndef PX_CUDA_NN_H
#define PX_CUDA_NN_H

#include "nn/px_ops_int.h"

#ifdef __cplusplus
extern "C" {
#endif

extern const px__ops_backend_t px__cuda_backend;

/* context (cuda_ops.cu) */
void px__cuda_ops_destroy(px_ops_t *ops);
px_device_t px__cuda_ops_device(const px_ops_t *ops);
int px__cuda_ops_threads(const px_ops_t *ops);
px_status_t px__cuda_ops_sync(px_ops_t *ops);
size_t px__cuda_ops_scratchpad_bytes(const px_ops_t *ops);
const char *px__cuda_ops_describe(const px_ops_t *ops);
px_status_t px__cuda_ops_set_tf32(px_ops_t *ops, int allow);
px_status_t px__cuda_ops_upload(px_ops_t *ops, int n, px_tensor_t *const *dst,
                                const void *const *src);

/* convolution (cuda_conv.cu) */
px_status_t px__cuda_conv2d_create(px_ops_t *ops, const px_tensor_t *x_spec,
                                   const px_conv2d_params_t *p, px_conv2d_t **out);
void px__cuda_conv2d_destroy(px_conv2d_t *op);
void px__cuda_conv2d_y_spec(const px_conv2d_t *op, px_tensor_t *spec);
void px__cuda_conv2d_w_spec(const px_conv2d_t *op, px_tensor_t *spec);
void px__cuda_conv2d_b_spec(const px_conv2d_t *op, px_tensor_t *spec);
px_status_t px__cuda_conv2d_forward(px_conv2d_t *op, px_tensor_t *y, const px_tensor_t *x,
                                    const px_tensor_t *w, const px_tensor_t *b);
px_status_t px__cuda_conv2d_backward_data(px_conv2d_t *op, px_tensor_t *dx, const px_tensor_t *dy,
                                          const px_tensor_t *w);
px_status_t px__cuda_conv2d_backward_weights(px_conv2d_t *op, px_tensor_t *dw, px_tensor_t *db,
                                             const px_tensor_t *x, const px_tensor_t *dy);

/* batch normalisation (cuda_bn.cu) */
px_status_t px__cuda_batchnorm_create(px_ops_t *ops, const px_tensor_t *x_spec,
                                      const px_batchnorm_params_t *p, px_batchnorm_t **out);
void px__cuda_batchnorm_destroy(px_batchnorm_t *op);
void px__cuda_batchnorm_y_spec(const px_batchnorm_t *op, px_tensor_t *spec);
void px__cuda_batchnorm_c_spec(const px_batchnorm_t *op, px_tensor_t *spec);
void px__cuda_batchnorm_ws_spec(const px_batchnorm_t *op, px_tensor_t *spec);
px_status_t px__cuda_batchnorm_forward_train(px_batchnorm_t *op, px_tensor_t *y, px_tensor_t *mean,
                                             px_tensor_t *var, px_tensor_t *ws,
                                             const px_tensor_t *x, const px_tensor_t *scale,
                                             const px_tensor_t *shift, px_tensor_t *running_mean,
                                             px_tensor_t *running_var);
px_status_t px__cuda_batchnorm_forward_infer(px_batchnorm_t *op, px_tensor_t *y,
                                             const px_tensor_t *x, const px_tensor_t *scale,
                                             const px_tensor_t *shift,
                                             const px_tensor_t *running_mean,
                                             const px_tensor_t *running_var);
px_status_t px__cuda_batchnorm_backward(px_batchnorm_t *op, px_tensor_t *dx, px_tensor_t *dscale,
                                        px_tensor_t *dshift, const px_tensor_t *dy,
                                        const px_tensor_t *x, const px_tensor_t *scale,
                                        const px_tensor_t *shift, const px_tensor_t *mean,
                                        const px_tensor_t *var, const px_tensor_t *ws);

/* ReLU and residual add (cuda_eltwise.cu) */
px_status_t px__cuda_relu_create(px_ops_t *ops, const px_tensor_t *x_spec, px_relu_t **out);
void px__cuda_relu_destroy(px_relu_t *op);
void px__cuda_relu_y_spec(const px_relu_t *op, px_tensor_t *spec);
px_status_t px__cuda_relu_forward(px_relu_t *op, px_tensor_t *y, const px_tensor_t *x);
px_status_t px__cuda_relu_backward(px_relu_t *op, px_tensor_t *dx, const px_tensor_t *dy,
                                   const px_tensor_t *y);
px_status_t px__cuda_add_create(px_ops_t *ops, const px_tensor_t *x_spec, int relu,
                                px_add_t **out);
void px__cuda_add_destroy(px_add_t *op);
void px__cuda_add_y_spec(const px_add_t *op, px_tensor_t *spec);
px_status_t px__cuda_add_forward(px_add_t *op, px_tensor_t *y, const px_tensor_t *a,
                                 const px_tensor_t *b);
px_status_t px__cuda_add_backward(px_add_t *op, px_tensor_t *g, const px_tensor_t *dy,
                                  const px_tensor_t *y);
px_status_t px__cuda_reorder_create(px_ops_t *ops, const px_tensor_t *dst_spec,
                                    const px_tensor_t *src_spec, px_reorder_t **out);
void px__cuda_reorder_destroy(px_reorder_t *op);
px_status_t px__cuda_reorder_execute(px_reorder_t *op, px_tensor_t *dst, const px_tensor_t *src);

/* pooling (cuda_pool.cu) */
px_status_t px__cuda_pool2d_create(px_ops_t *ops, const px_tensor_t *x_spec,
                                   const px_pool2d_params_t *p, px_pool2d_t **out);
px_status_t px__cuda_global_avgpool_create(px_ops_t *ops, const px_tensor_t *x_spec,
                                           px_pool2d_t **out);
void px__cuda_pool2d_destroy(px_pool2d_t *op);
void px__cuda_pool2d_y_spec(const px_pool2d_t *op, px_tensor_t *spec);
void px__cuda_pool2d_ws_spec(const px_pool2d_t *op, px_tensor_t *spec);
px_status_t px__cuda_pool2d_forward(px_pool2d_t *op, px_tensor_t *y, px_tensor_t *ws,
                                    const px_tensor_t *x);
px_status_t px__cuda_pool2d_backward(px_pool2d_t *op, px_tensor_t *dx, const px_tensor_t *dy,
                                     const px_tensor_t *ws);

/* fully connected (cuda_fc.cu) */
px_status_t px__cuda_fc_create(px_ops_t *ops, const px_tensor_t *x_spec, const px_fc_params_t *p,
                               px_fc_t **out);
void px__cuda_fc_destroy(px_fc_t *op);
void px__cuda_fc_y_spec(const px_fc_t *op, px_tensor_t *spec);
void px__cuda_fc_w_spec(const px_fc_t *op, px_tensor_t *spec);
void px__cuda_fc_b_spec(const px_fc_t *op, px_tensor_t *spec);
px_status_t px__cuda_fc_forward(px_fc_t *op, px_tensor_t *y, const px_tensor_t *x,
                                const px_tensor_t *w, const px_tensor_t *b);
px_status_t px__cuda_fc_backward_data(px_fc_t *op, px_tensor_t *dx, const px_tensor_t *dy,
                                      const px_tensor_t *w);
px_status_t px__cuda_fc_backward_weights(px_fc_t *op, px_tensor_t *dw, px_tensor_t *db,
                                         const px_tensor_t *x, const px_tensor_t *dy);

/* softmax cross-entropy (cuda_loss.cu) */
px_status_t px__cuda_softmax_ce(px_ops_t *ops, px_tensor_t *dlogits, float *loss, int64_t *correct,
                                const px_tensor_t *logits, const px_tensor_t *labels);

#ifdef __cplusplus
}
#endif
#endif
