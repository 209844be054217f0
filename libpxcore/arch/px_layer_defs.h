/* What a layer is, shared by the ONNX reader (arch/onnx_import.c) and the
 * engine's operators (nn/px_graph_ops.h, nn/px_ops_int.h): the activations
 * (px__act_t), which the reader names in the layers it hands over and the
 * operators run, and the size rule of a window's axis, by which both size
 * a convolution's or a pooling's output. Apart so that the reader,
 * spec-layer code, needs no engine header. */
#ifndef PX_LAYER_DEFS_H
#define PX_LAYER_DEFS_H

#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* The activations; alpha is the one parameter of those that have one.
 *   HSIGMOID: clamp(alpha * x + 0.5, 0, 1) (ONNX HardSigmoid with beta 0.5;
 *             PyTorch's Hardsigmoid is alpha = 1/6);
 *   HSWISH:   x * HSIGMOID(x) (ONNX HardSwish and PyTorch's Hardswish: 1/6);
 *   SILU:     x * sigmoid(x) (PyTorch's SiLU, exported as Mul(x, Sigmoid(x)));
 *   GELU:     x * Phi(x) = 0.5 x (1 + erf(x / sqrt 2)) (the exact form);
 *   SCALE:    alpha * x, SHIFT: x + alpha (a Mul, Div, Add or Sub by a constant). */
typedef enum {
  PX__ACT_RELU = 0, PX__ACT_LEAKY = 1, PX__ACT_RELU6 = 2, PX__ACT_SIGMOID = 3,
  PX__ACT_HSIGMOID = 4, PX__ACT_HSWISH = 5, PX__ACT_SILU = 6, PX__ACT_GELU = 7, PX__ACT_TANH = 8,
  PX__ACT_SCALE = 9, PX__ACT_SHIFT = 10
} px__act_t;
#define PX__ACT_COUNT 11

/* One axis of a window (convolution, pooling): input size, kernel, stride,
 * begin and end padding, dilation, ceil rounding (PyTorch's rule: up, less
 * one when the last window would start at or past in + pad0). Both engines'
 * ops size their outputs so. */
typedef struct {
  int64_t in, k, s, p0, p1, d;
  int ceil;
} px__axis_t;

/* The output size of axis a, <= 0 when the padded input is smaller than the
 * dilated window. */
static inline int64_t px__axis_out(const px__axis_t *a) {
  const int64_t span = a->in + a->p0 + a->p1 - (a->d * (a->k - 1) + 1);
  if (span < 0) return 0;
  int64_t o = (a->ceil ? (span + a->s - 1) / a->s : span / a->s) + 1;
  if (a->ceil && (o - 1) * a->s >= a->in + a->p0) o--;
  return o;
}

/* How far out's last window runs past the end padding (ceil rounding), >= 0:
 * what a backend that pads explicitly adds to the end padding. */
static inline int64_t px__axis_overrun(const px__axis_t *a, int64_t out) {
  const int64_t r = (out - 1) * a->s + a->d * (a->k - 1) + 1 - (a->in + a->p0 + a->p1);
  return r > 0 ? r : 0;
}

#ifdef __cplusplus
}
#endif
#endif
