/* Plain C reference implementations of every layer op of ops.h (the reference
 * beside every optimised kernel): naive loops over plain row-major (NCHW /
 * OIHW) host arrays, with double accumulators, written for obviousness rather
 * than speed. The tests compare the oneDNN backend (and later the CUDA one)
 * against these on random data. Semantics match ops.h exactly; the functions
 * cannot fail (callers pass consistent shapes) and allocate nothing. */
#ifndef PX_REF_H
#define PX_REF_H

#include <stddef.h>
#include <stdint.h>

/* Convolution geometry; oh/ow are derived by px__ref_conv_shape. ph, pw:
 * top and left padding; xb, xr: bottom (right) padding minus top (left),
 * as px_conv2d_params_t's pad_h_extra; dilh, dilw: dilation (0 or 1: none). */
typedef struct {
  int64_t n, c_in, h, w;
  int64_t c_out, kh, kw;
  int64_t sh, sw, ph, pw;
  int64_t oh, ow;
  int64_t xb, xr, dilh, dilw;
} px__ref_conv_t;

void px__ref_conv_shape(px__ref_conv_t *s);

/* y[n, c_out, oh, ow] = b + conv(x, w); b may be NULL. */
void px__ref_conv2d_forward(float *y, const float *x, const float *w, const float *b,
                            const px__ref_conv_t *s);
void px__ref_conv2d_backward_data(float *dx, const float *dy, const float *w,
                                  const px__ref_conv_t *s);
/* db may be NULL. */
void px__ref_conv2d_backward_weights(float *dw, float *db, const float *x, const float *dy,
                                     const px__ref_conv_t *s);

/* Batch norm over [n, c, h, w]; relu applies ReLU to the output. mean/var
 * receive the batch mean and biased variance; running stats are updated with
 * PyTorch's rule (unbiased variance). */
void px__ref_batchnorm_forward_train(float *y, float *mean, float *var, const float *x,
                                     const float *scale, const float *shift, float *running_mean,
                                     float *running_var, int64_t n, int64_t c, int64_t h, int64_t w,
                                     float eps, float momentum, int relu);
void px__ref_batchnorm_forward_infer(float *y, const float *x, const float *scale,
                                     const float *shift, const float *running_mean,
                                     const float *running_var, int64_t n, int64_t c, int64_t h,
                                     int64_t w, float eps, int relu);
/* dy is the gradient of the (ReLU'd when relu) output; mean/var are the
 * forward's batch statistics. */
void px__ref_batchnorm_backward(float *dx, float *dscale, float *dshift, const float *dy,
                                const float *x, const float *scale, const float *shift,
                                const float *mean, const float *var, int64_t n, int64_t c,
                                int64_t h, int64_t w, float eps, int relu);

void px__ref_relu_forward(float *y, const float *x, size_t count);
/* dx = dy * (y > 0). */
void px__ref_relu_backward(float *dx, const float *dy, const float *y, size_t count);

/* Pooling geometry; mode is a px_pool_mode_t; oh/ow from px__ref_pool_shape;
 * xb, xr, dilh, dilw as px__ref_conv_t's, ceil as px_pool2d_params_t's
 * ceil_mode (PyTorch's rule). PX_POOL_AVG divides by the window's positions
 * inside [-ph, h + ph + xb) x [-pw, w + pw + xr). */
typedef struct {
  int mode;
  int64_t n, c, h, w;
  int64_t kh, kw, sh, sw, ph, pw;
  int64_t oh, ow;
  int64_t xb, xr, dilh, dilw;
  int ceil;
} px__ref_pool_t;

void px__ref_pool_shape(px__ref_pool_t *s);
void px__ref_pool2d_forward(float *y, const float *x, const px__ref_pool_t *s);
/* Max pooling routes each dy to the first maximum of its window in x. */
void px__ref_pool2d_backward(float *dx, const float *dy, const float *x, const px__ref_pool_t *s);

/* y[n, out] = x[n, in] . w[out, in]^T + b; b may be NULL. */
void px__ref_fc_forward(float *y, const float *x, const float *w, const float *b, int64_t n,
                        int64_t in, int64_t out);
void px__ref_fc_backward_data(float *dx, const float *dy, const float *w, int64_t n, int64_t in,
                              int64_t out);
/* db may be NULL. */
void px__ref_fc_backward_weights(float *dw, float *db, const float *x, const float *dy, int64_t n,
                                 int64_t in, int64_t out);

/* y = a + b, ReLU'd when relu. */
void px__ref_add(float *y, const float *a, const float *b, size_t count, int relu);

/* Mean softmax cross-entropy, its gradient (dlogits may be NULL) and the
 * number of correct arg-max predictions. */
void px__ref_softmax_ce(float *dlogits, double *loss, int64_t *correct, const float *logits,
                        const int32_t *labels, int64_t n, int64_t k);

#endif
