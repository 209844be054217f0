/* The graph operators of imported networks on the CPU (see nn/px_graph_ops.h):
 * element-wise loops over plain f32 NCHW arrays. They are small next to the
 * convolutions around them (one pass over an activation), so plain loops the
 * compiler vectorises are the implementation and the reference at once. */
#include <math.h>
#include <string.h>

#include "nn/px_graph_ops.h"

const char *px__act_onnx_name(px__act_t a) {
  switch (a) {
    case PX__ACT_RELU: return "Relu";
    case PX__ACT_LEAKY: return "LeakyRelu";
    case PX__ACT_RELU6: return "Clip";
    case PX__ACT_SIGMOID: return "Sigmoid";
  }
  return "?";
}

void px__act_forward(float *y, const float *x, size_t n, px__act_t a, float alpha) {
  switch (a) {
    case PX__ACT_RELU:
      for (size_t i = 0; i < n; i++) y[i] = x[i] > 0.0f ? x[i] : 0.0f;
      break;
    case PX__ACT_LEAKY:
      for (size_t i = 0; i < n; i++) y[i] = x[i] > 0.0f ? x[i] : alpha * x[i];
      break;
    case PX__ACT_RELU6:
      for (size_t i = 0; i < n; i++) y[i] = x[i] < 0.0f ? 0.0f : x[i] > 6.0f ? 6.0f : x[i];
      break;
    case PX__ACT_SIGMOID:
      for (size_t i = 0; i < n; i++) y[i] = 1.0f / (1.0f + expf(-x[i]));
      break;
  }
}

void px__act_backward(float *dx, const float *dy, const float *x, const float *y, size_t n,
                      px__act_t a, float alpha) {
  switch (a) {
    case PX__ACT_RELU:
      for (size_t i = 0; i < n; i++) dx[i] = x[i] > 0.0f ? dy[i] : 0.0f;
      break;
    case PX__ACT_LEAKY:
      for (size_t i = 0; i < n; i++) dx[i] = x[i] > 0.0f ? dy[i] : alpha * dy[i];
      break;
    case PX__ACT_RELU6: /* PyTorch's hardtanh backward: 0 at and outside the bounds */
      for (size_t i = 0; i < n; i++) dx[i] = x[i] > 0.0f && x[i] < 6.0f ? dy[i] : 0.0f;
      break;
    case PX__ACT_SIGMOID:
      for (size_t i = 0; i < n; i++) dx[i] = dy[i] * y[i] * (1.0f - y[i]);
      break;
  }
}

void px__mul_forward(float *y, const float *x, const float *g, size_t nc, size_t hw) {
  for (size_t r = 0; r < nc; r++) {
    const float s = g[r];
    const float *xr = x + r * hw;
    float *yr = y + r * hw;
    for (size_t i = 0; i < hw; i++) yr[i] = xr[i] * s;
  }
}

void px__mul_backward(float *dx, float *dg, const float *dy, const float *x, const float *g,
                      size_t nc, size_t hw) {
  for (size_t r = 0; r < nc; r++) {
    const float *dyr = dy + r * hw, *xr = x + r * hw;
    if (dg) {
      double s = 0.0;
      for (size_t i = 0; i < hw; i++) s += (double)dyr[i] * xr[i];
      dg[r] = (float)s;
    }
    if (dx) {
      float *dxr = dx + r * hw;
      const float s = g[r];
      for (size_t i = 0; i < hw; i++) dxr[i] = dyr[i] * s;
    }
  }
}

void px__concat_forward(float *y, const float *a, const float *b, size_t batch, size_t ca,
                        size_t cb, size_t hw) {
  size_t na = ca * hw, nb = cb * hw;
  for (size_t n = 0; n < batch; n++) {
    memcpy(y + n * (na + nb), a + n * na, na * sizeof *y);
    memcpy(y + n * (na + nb) + na, b + n * nb, nb * sizeof *y);
  }
}

void px__concat_backward(float *da, float *db, const float *dy, size_t batch, size_t ca, size_t cb,
                         size_t hw) {
  size_t na = ca * hw, nb = cb * hw;
  for (size_t n = 0; n < batch; n++) {
    if (da) memcpy(da + n * na, dy + n * (na + nb), na * sizeof *da);
    if (db) memcpy(db + n * nb, dy + n * (na + nb) + na, nb * sizeof *db);
  }
}
