/* The graph operators an imported network needs beyond the built-in ResNets'
 * layer set (nn/cpu/cpu_graph.c): standalone activations (ReLU, LeakyReLU,
 * ReLU6, sigmoid, hard sigmoid, hard swish, SiLU, GELU, tanh), the
 * squeeze-and-excitation product of a map and a
 * per-channel gate, the concatenation of two maps on channels and the
 * LayerNorm over channels.
 *
 * These are the CPU engine's code, on plain f32 NCHW host arrays (the model
 * converts a blocked input to plain first); each is a plain loop, its own
 * reference. The model calls them through the ops table (px__ops_act_forward
 * ... in nn/px_ops_int.h), whose CUDA entries are the kernels of
 * nn/cuda/cuda_graph.cu (NHWC or NCHW, f32 or bf16), tested against these. */
#ifndef PX_GRAPH_OPS_H
#define PX_GRAPH_OPS_H

#include <stddef.h>

#include "arch/px_layer_defs.h"

#ifdef __cplusplus
extern "C" {
#endif

/* The activation's name as ONNX spells it ("Relu", "LeakyRelu", "Clip", "Sigmoid",
 * "HardSigmoid", "HardSwish", "Silu" (Mul(x, Sigmoid(x))), "Gelu", "Tanh", "Mul", "Add"). */
const char *px__act_onnx_name(px__act_t a);

/* y[i] = act(x[i]) for i < n (alpha: LeakyReLU's negative slope, the hard
 * sigmoid's and hard swish's slope, SCALE's factor, SHIFT's constant). */
void px__act_forward(float *y, const float *x, size_t n, px__act_t a, float alpha);
/* dx[i] = dy[i] * act'(x[i]) (sigmoid and tanh read y = act(x) instead of x).
 * At the kinks the derivative is PyTorch's: ReLU6 and the hard sigmoid 0 at
 * their bounds, the hard swish the inner slope 2 alpha x + 0.5 at both. */
void px__act_backward(float *dx, const float *dy, const float *x, const float *y, size_t n,
                      px__act_t a, float alpha);

/* y[nc, i] = x[nc, i] * g[nc] for nc < nc_total (N * C rows) and i < hw. */
void px__mul_forward(float *y, const float *x, const float *g, size_t nc, size_t hw);
/* dx = dy * g (NULL: not wanted), dg[nc] = sum_i dy[nc, i] * x[nc, i] (NULL: not wanted). */
void px__mul_backward(float *dx, float *dg, const float *dy, const float *x, const float *g,
                      size_t nc, size_t hw);

/* The same on channels-last maps [n, hw, c] (x, y, dx, dy), the gate g
 * [n, c]: dg[n, c] sums over the pixels in the same order, in double. */
void px__mul_forward_cl(float *y, const float *x, const float *g, size_t n, size_t c, size_t hw);
void px__mul_backward_cl(float *dx, float *dg, const float *dy, const float *x, const float *g,
                         size_t n, size_t c, size_t hw);

/* y[n] = [a[n]; b[n]] for n < batch: a holds ca, b cb channels of hw values. */
void px__concat_forward(float *y, const float *a, const float *b, size_t batch, size_t ca,
                        size_t cb, size_t hw);
/* da, db (NULL: not wanted) the two slices of dy. */
void px__concat_backward(float *da, float *db, const float *dy, size_t batch, size_t ca, size_t cb,
                         size_t hw);

/* LayerNorm over the channels of a map (ConvNeXt's, torchvision's
 * LayerNorm2d: a LayerNorm on the last axis of the NHWC view) on plain NCHW:
 * for sample n and pixel p, mu and the biased variance of the c values
 * x[n, :, p], rstd = 1 / sqrt(var + eps), y = (x - mu) * rstd * g[ch] +
 * b[ch]. mean and rstd [batch * hw] keep mu and rstd for the backward. */
void px__ln_forward(float *y, float *mean, float *rstd, const float *x, const float *g,
                    const float *b, size_t batch, size_t c, size_t hw, float eps);
/* With xh = (x - mu) * rstd and e = dy * g: dx = rstd * (e - mean_c(e) - xh
 * * mean_c(e * xh)) (dx NULL: not wanted), dg[ch] = sum over n, p of dy *
 * xh, db[ch] = sum of dy (overwritten). */
void px__ln_backward(float *dx, float *dg, float *db, const float *dy, const float *x,
                     const float *mean, const float *rstd, const float *g, size_t batch, size_t c,
                     size_t hw);

/* A channel selection of x [batch, cx, hw] into y [batch, cy, hw]: y's
 * channel j is x's px__chan_src(j, cy, groups, start). groups > 1: the
 * channel shuffle (ShuffleNet's view [g, C / g], transposed: start 0, cy ==
 * cx); groups 1: channels [start, start + cy) (a Split's part). */
static inline size_t px__chan_src(size_t j, size_t cy, size_t groups, size_t start) {
  return groups > 1 ? (j % groups) * (cy / groups) + j / groups : start + j;
}
void px__chan_forward(float *y, const float *x, size_t batch, size_t cx, size_t cy, size_t hw,
                      size_t groups, size_t start);
/* dx [batch, cx, hw] whole: dy's channel j at px__chan_src(j), zero in the
 * channels no output took. A channels-last map [n, hw, c] is batch n * hw
 * of hw 1 to these two and to the concatenation's. */
void px__chan_backward(float *dx, const float *dy, size_t batch, size_t cx, size_t cy, size_t hw,
                       size_t groups, size_t start);

#ifdef __cplusplus
}
#endif
#endif
