/* The graph operators of imported networks on the CPU (see nn/px_graph_ops.h):
 * element-wise loops over plain f32 NCHW arrays. They are small next to the
 * convolutions around them (one pass over an activation), so plain loops the
 * compiler vectorises are the implementation and the reference at once. */
#include <math.h>
#include <string.h>

#include "nn/cpu/px_cpu_int.h"
#include "nn/px_graph_ops.h"

#define PX__SQRT1_2 0.70710678118654752440f
#define PX__INV_SQRT_2PI 0.39894228040143267794f

/* The hard sigmoid clamp(alpha x + 0.5, 0, 1), and the derivatives of it and
 * of the hard swish x * hsig(x) times dy, with PyTorch's values at the kinks
 * (hardsigmoid_backward: 0 at the bounds; hardswish_backward: the inner
 * slope at both). */
static inline float px__hsig(float x, float alpha) {
  const float t = alpha * x + 0.5f;
  return t < 0.0f ? 0.0f : t > 1.0f ? 1.0f : t;
}

static inline float px__dhsig(float dy, float x, float alpha) {
  const float t = alpha * x + 0.5f;
  return t > 0.0f && t < 1.0f ? dy * alpha : 0.0f;
}

static inline float px__dhswish(float dy, float x, float alpha) {
  const float t = alpha * x + 0.5f;
  return t < 0.0f ? 0.0f : t <= 1.0f ? dy * (2.0f * alpha * x + 0.5f) : dy;
}

const char *px__act_onnx_name(px__act_t a) {
  switch (a) {
    case PX__ACT_RELU: return "Relu";
    case PX__ACT_LEAKY: return "LeakyRelu";
    case PX__ACT_RELU6: return "Clip";
    case PX__ACT_SIGMOID: return "Sigmoid";
    case PX__ACT_HSIGMOID: return "HardSigmoid";
    case PX__ACT_HSWISH: return "HardSwish";
    case PX__ACT_SILU: return "Silu";
    case PX__ACT_GELU: return "Gelu";
    case PX__ACT_TANH: return "Tanh";
    case PX__ACT_SCALE: return "Mul";
    case PX__ACT_SHIFT: return "Add";
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
    case PX__ACT_HSIGMOID:
      for (size_t i = 0; i < n; i++) y[i] = px__hsig(x[i], alpha);
      break;
    case PX__ACT_HSWISH:
      for (size_t i = 0; i < n; i++) y[i] = x[i] * px__hsig(x[i], alpha);
      break;
    case PX__ACT_SILU:
      for (size_t i = 0; i < n; i++) y[i] = x[i] / (1.0f + expf(-x[i]));
      break;
    case PX__ACT_GELU:
      for (size_t i = 0; i < n; i++) y[i] = 0.5f * x[i] * (1.0f + erff(x[i] * PX__SQRT1_2));
      break;
    case PX__ACT_TANH:
      for (size_t i = 0; i < n; i++) y[i] = tanhf(x[i]);
      break;
    case PX__ACT_SCALE:
      for (size_t i = 0; i < n; i++) y[i] = alpha * x[i];
      break;
    case PX__ACT_SHIFT:
      for (size_t i = 0; i < n; i++) y[i] = x[i] + alpha;
      break;
  }
}

void px__act_backward(float *dx, const float *dy, const float *x, const float *y, size_t n,
                      px__act_t a, float alpha) {
  switch (a) {
    case PX__ACT_RELU:
      /* dy read whatever x is: a conditional load keeps the loop scalar */
      for (size_t i = 0; i < n; i++) {
        const float d = dy[i];
        dx[i] = x[i] > 0.0f ? d : 0.0f;
      }
      break;
    case PX__ACT_LEAKY:
      for (size_t i = 0; i < n; i++) {
        const float d = dy[i];
        dx[i] = x[i] > 0.0f ? d : alpha * d;
      }
      break;
    case PX__ACT_RELU6: /* PyTorch's hardtanh backward: 0 at and outside the bounds */
      for (size_t i = 0; i < n; i++) {
        const float d = dy[i];
        dx[i] = x[i] > 0.0f && x[i] < 6.0f ? d : 0.0f;
      }
      break;
    case PX__ACT_SIGMOID:
      for (size_t i = 0; i < n; i++) dx[i] = dy[i] * y[i] * (1.0f - y[i]);
      break;
    case PX__ACT_HSIGMOID:
      for (size_t i = 0; i < n; i++) dx[i] = px__dhsig(dy[i], x[i], alpha);
      break;
    case PX__ACT_HSWISH:
      for (size_t i = 0; i < n; i++) dx[i] = px__dhswish(dy[i], x[i], alpha);
      break;
    case PX__ACT_SILU:
      for (size_t i = 0; i < n; i++) {
        const float s = 1.0f / (1.0f + expf(-x[i]));
        dx[i] = dy[i] * s * (1.0f + x[i] * (1.0f - s));
      }
      break;
    case PX__ACT_GELU:
      for (size_t i = 0; i < n; i++)
        dx[i] = dy[i] * (0.5f * (1.0f + erff(x[i] * PX__SQRT1_2)) +
                         x[i] * PX__INV_SQRT_2PI * expf(-0.5f * x[i] * x[i]));
      break;
    case PX__ACT_TANH:
      for (size_t i = 0; i < n; i++) dx[i] = dy[i] * (1.0f - y[i] * y[i]);
      break;
    case PX__ACT_SCALE:
      for (size_t i = 0; i < n; i++) dx[i] = alpha * dy[i];
      break;
    case PX__ACT_SHIFT:
      for (size_t i = 0; i < n; i++) dx[i] = dy[i];
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

void px__chan_forward(float *y, const float *x, size_t batch, size_t cx, size_t cy, size_t hw,
                      size_t groups, size_t start) {
  for (size_t n = 0; n < batch; n++)
    for (size_t j = 0; j < cy; j++)
      memcpy(y + (n * cy + j) * hw, x + (n * cx + px__chan_src(j, cy, groups, start)) * hw,
             hw * sizeof *y);
}

void px__chan_backward(float *dx, const float *dy, size_t batch, size_t cx, size_t cy, size_t hw,
                       size_t groups, size_t start) {
  if (groups == 1 && cy < cx) memset(dx, 0, batch * cx * hw * sizeof *dx);
  for (size_t n = 0; n < batch; n++)
    for (size_t j = 0; j < cy; j++)
      memcpy(dx + (n * cx + px__chan_src(j, cy, groups, start)) * hw, dy + (n * cy + j) * hw,
             hw * sizeof *dx);
}

/* ---- the CPU engine's entries of the ops table (nn/px_ops_int.h) ------------------
 * The model's calls on the CPU: the functions above on the tensors' host
 * arrays, with the formats they take checked (the dispatcher has checked
 * the shapes). */

/* An activation's input: f32 in a layout without padding (plain or blocked:
 * the activation is element-wise, but f(0) is not 0 for every kind). */
static px_status_t px__cpu_act_format(const px_tensor_t *x, const char *op) {
  if (x->dtype != PX_DTYPE_F32 || x->nbytes != px_tensor_numel(x) * sizeof(float))
    return px_set_error(PX_ERR_INVALID, "%s: the CPU engine takes f32 activations without "
                        "padded channels", op);
  return PX_OK;
}

static px_status_t px__cpu_plain_f32(const px_tensor_t *t, const char *op, const char *arg) {
  if (t && (t->dtype != PX_DTYPE_F32 || !px_tensor_is_plain(t)))
    return px_set_error(PX_ERR_INVALID, "%s %s: the CPU engine takes plain f32 NCHW here", op, arg);
  return PX_OK;
}

px_status_t px__cpu_act_forward(px_ops_t *ops, px_tensor_t *y, const px_tensor_t *x, px__act_t act,
                                float alpha) {
  (void)ops;
  PX_CHECK(px__cpu_act_format(x, "activation forward"));
  px__act_forward(y->data, x->data, px_tensor_numel(x), act, alpha);
  return PX_OK;
}

px_status_t px__cpu_act_backward(px_ops_t *ops, px_tensor_t *dx, const px_tensor_t *dy,
                                 const px_tensor_t *x, const px_tensor_t *y, px__act_t act,
                                 float alpha) {
  (void)ops;
  PX_CHECK(px__cpu_act_format(x, "activation backward"));
  px__act_backward(dx->data, dy->data, x->data, y->data, px_tensor_numel(x), act, alpha);
  return PX_OK;
}

px_status_t px__cpu_mul_forward(px_ops_t *ops, px_tensor_t *y, const px_tensor_t *x,
                                const px_tensor_t *g) {
  (void)ops;
  PX_CHECK(px__cpu_plain_f32(x, "mul forward", "x"));
  PX_CHECK(px__cpu_plain_f32(g, "mul forward", "g"));
  px__mul_forward(y->data, x->data, g->data, (size_t)(x->dims[0] * x->dims[1]),
                  (size_t)(x->dims[2] * x->dims[3]));
  return PX_OK;
}

px_status_t px__cpu_mul_backward(px_ops_t *ops, px_tensor_t *dx, px_tensor_t *dg,
                                 const px_tensor_t *dy, const px_tensor_t *x, const px_tensor_t *g) {
  (void)ops;
  PX_CHECK(px__cpu_plain_f32(x, "mul backward", "x"));
  PX_CHECK(px__cpu_plain_f32(g, "mul backward", "g"));
  px__mul_backward(dx ? dx->data : NULL, dg ? dg->data : NULL, dy->data, x->data, g->data,
                   (size_t)(x->dims[0] * x->dims[1]), (size_t)(x->dims[2] * x->dims[3]));
  return PX_OK;
}

px_status_t px__cpu_concat_forward(px_ops_t *ops, px_tensor_t *y, const px_tensor_t *a,
                                   const px_tensor_t *b) {
  (void)ops;
  PX_CHECK(px__cpu_plain_f32(y, "concat forward", "y"));
  px__concat_forward(y->data, a->data, b->data, (size_t)y->dims[0], (size_t)a->dims[1],
                     (size_t)b->dims[1], (size_t)(y->dims[2] * y->dims[3]));
  return PX_OK;
}

px_status_t px__cpu_concat_backward(px_ops_t *ops, px_tensor_t *da, px_tensor_t *db,
                                    const px_tensor_t *dy) {
  (void)ops;
  PX_CHECK(px__cpu_plain_f32(dy, "concat backward", "dy"));
  const int64_t ca = da ? da->dims[1] : dy->dims[1] - db->dims[1];
  px__concat_backward(da ? da->data : NULL, db ? db->data : NULL, dy->data, (size_t)dy->dims[0],
                      (size_t)ca, (size_t)(dy->dims[1] - ca), (size_t)(dy->dims[2] * dy->dims[3]));
  return PX_OK;
}

px_status_t px__cpu_chan_forward(px_ops_t *ops, px_tensor_t *y, const px_tensor_t *x, int groups,
                                 int start) {
  (void)ops;
  PX_CHECK(px__cpu_plain_f32(x, "channel selection forward", "x"));
  px__chan_forward(y->data, x->data, (size_t)x->dims[0], (size_t)x->dims[1], (size_t)y->dims[1],
                   (size_t)(x->dims[2] * x->dims[3]), (size_t)groups, (size_t)start);
  return PX_OK;
}

px_status_t px__cpu_chan_backward(px_ops_t *ops, px_tensor_t *dx, const px_tensor_t *dy, int groups,
                                  int start) {
  (void)ops;
  PX_CHECK(px__cpu_plain_f32(dy, "channel selection backward", "dy"));
  px__chan_backward(dx->data, dy->data, (size_t)dx->dims[0], (size_t)dx->dims[1],
                    (size_t)dy->dims[1], (size_t)(dx->dims[2] * dx->dims[3]), (size_t)groups,
                    (size_t)start);
  return PX_OK;
}

/* ---- LayerNorm over channels ------------------------------------------------------
 * Channels outermost, pixels innermost (unit stride: vectorised), in blocks
 * of PX__LN_BLOCK pixels whose sums stay on the stack; two passes for the
 * variance (about the mean), as PyTorch's CPU kernel. */
#define PX__LN_BLOCK 256

void px__ln_forward(float *y, float *mean, float *rstd, const float *x, const float *g,
                    const float *b, size_t batch, size_t c, size_t hw, float eps) {
  for (size_t n = 0; n < batch; n++) {
    const float *xn = x + n * c * hw;
    float *yn = y + n * c * hw, *mu = mean + n * hw, *rs = rstd + n * hw;
    for (size_t p0 = 0; p0 < hw; p0 += PX__LN_BLOCK) {
      const size_t np = hw - p0 < PX__LN_BLOCK ? hw - p0 : PX__LN_BLOCK;
      float s[PX__LN_BLOCK], v[PX__LN_BLOCK];
      for (size_t p = 0; p < np; p++) s[p] = v[p] = 0.0f;
      for (size_t ch = 0; ch < c; ch++)
        for (size_t p = 0; p < np; p++) s[p] += xn[ch * hw + p0 + p];
      for (size_t p = 0; p < np; p++) s[p] /= (float)c;
      for (size_t ch = 0; ch < c; ch++)
        for (size_t p = 0; p < np; p++) {
          const float d = xn[ch * hw + p0 + p] - s[p];
          v[p] += d * d;
        }
      for (size_t p = 0; p < np; p++) {
        mu[p0 + p] = s[p];
        rs[p0 + p] = v[p] = 1.0f / sqrtf(v[p] / (float)c + eps);
      }
      for (size_t ch = 0; ch < c; ch++)
        for (size_t p = 0; p < np; p++)
          yn[ch * hw + p0 + p] = (xn[ch * hw + p0 + p] - s[p]) * v[p] * g[ch] + b[ch];
    }
  }
}

void px__ln_backward(float *dx, float *dg, float *db, const float *dy, const float *x,
                     const float *mean, const float *rstd, const float *g, size_t batch, size_t c,
                     size_t hw) {
  for (size_t ch = 0; ch < c; ch++) dg[ch] = db[ch] = 0.0f;
  for (size_t n = 0; n < batch; n++) {
    const float *xn = x + n * c * hw, *dyn = dy + n * c * hw, *mu = mean + n * hw;
    const float *rs = rstd + n * hw;
    for (size_t p0 = 0; p0 < hw; p0 += PX__LN_BLOCK) {
      const size_t np = hw - p0 < PX__LN_BLOCK ? hw - p0 : PX__LN_BLOCK;
      float s1[PX__LN_BLOCK], s2[PX__LN_BLOCK];
      for (size_t p = 0; p < np; p++) s1[p] = s2[p] = 0.0f;
      for (size_t ch = 0; ch < c; ch++) {
        float sg = 0.0f, sb = 0.0f;
        for (size_t p = 0; p < np; p++) {
          const size_t i = ch * hw + p0 + p;
          const float xh = (xn[i] - mu[p0 + p]) * rs[p0 + p], e = dyn[i] * g[ch];
          s1[p] += e;
          s2[p] += e * xh;
          sg += dyn[i] * xh;
          sb += dyn[i];
        }
        dg[ch] += sg;
        db[ch] += sb;
      }
      if (!dx) continue;
      float *dxn = dx + n * c * hw;
      for (size_t p = 0; p < np; p++) {
        s1[p] /= (float)c;
        s2[p] /= (float)c;
      }
      for (size_t ch = 0; ch < c; ch++)
        for (size_t p = 0; p < np; p++) {
          const size_t i = ch * hw + p0 + p;
          const float xh = (xn[i] - mu[p0 + p]) * rs[p0 + p];
          dxn[i] = rs[p0 + p] * (dyn[i] * g[ch] - s1[p] - xh * s2[p]);
        }
    }
  }
}

px_status_t px__cpu_ln_forward(px_ops_t *ops, px_tensor_t *y, px_tensor_t *mean, px_tensor_t *rstd,
                               const px_tensor_t *x, const px_tensor_t *g, const px_tensor_t *b,
                               float eps) {
  (void)ops;
  PX_CHECK(px__cpu_plain_f32(x, "layernorm forward", "x"));
  PX_CHECK(px__cpu_plain_f32(y, "layernorm forward", "y"));
  px__ln_forward(y->data, mean->data, rstd->data, x->data, g->data, b->data, (size_t)x->dims[0],
                 (size_t)x->dims[1], (size_t)(x->dims[2] * x->dims[3]), eps);
  return PX_OK;
}

px_status_t px__cpu_ln_backward(px_ops_t *ops, px_tensor_t *dx, px_tensor_t *dg, px_tensor_t *db,
                                const px_tensor_t *dy, const px_tensor_t *x,
                                const px_tensor_t *mean, const px_tensor_t *rstd,
                                const px_tensor_t *g) {
  (void)ops;
  PX_CHECK(px__cpu_plain_f32(x, "layernorm backward", "x"));
  PX_CHECK(px__cpu_plain_f32(dy, "layernorm backward", "dy"));
  px__ln_backward(dx ? dx->data : NULL, dg->data, db->data, dy->data, x->data, mean->data,
                  rstd->data, g->data, (size_t)x->dims[0], (size_t)x->dims[1],
                  (size_t)(x->dims[2] * x->dims[3]));
  return PX_OK;
}
