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

void px__mul_forward_cl(float *y, const float *x, const float *g, size_t n, size_t c, size_t hw) {
  for (size_t i = 0; i < n; i++)
    for (size_t p = 0; p < hw; p++) {
      const float *xr = x + (i * hw + p) * c, *gr = g + i * c;
      float *yr = y + (i * hw + p) * c;
      for (size_t k = 0; k < c; k++) yr[k] = xr[k] * gr[k];
    }
}

void px__mul_backward_cl(float *dx, float *dg, const float *dy, const float *x, const float *g,
                         size_t n, size_t c, size_t hw) {
  if (dg)
    for (size_t i = 0; i < n; i++)
      for (size_t k = 0; k < c; k++) {
        double s = 0.0;
        for (size_t p = 0; p < hw; p++) s += (double)dy[(i * hw + p) * c + k] * x[(i * hw + p) * c + k];
        dg[i * c + k] = (float)s;
      }
  if (dx) px__mul_forward_cl(dx, dy, g, n, c, hw);
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
  for (size_t n = 0; n < batch; n++) {
    if (groups == 1) { /* one run of channels */
      memcpy(y + n * cy * hw, x + (n * cx + start) * hw, cy * hw * sizeof *y);
      continue;
    }
    for (size_t j = 0; j < cy; j++) {
      const size_t src = (n * cx + px__chan_src(j, cy, groups, start)) * hw;
      if (hw == 1) y[n * cy + j] = x[src]; /* a channels-last row */
      else memcpy(y + (n * cy + j) * hw, x + src, hw * sizeof *y);
    }
  }
}

void px__chan_backward(float *dx, const float *dy, size_t batch, size_t cx, size_t cy, size_t hw,
                       size_t groups, size_t start) {
  if (groups == 1 && cy < cx) memset(dx, 0, batch * cx * hw * sizeof *dx);
  for (size_t n = 0; n < batch; n++) {
    if (groups == 1) {
      memcpy(dx + (n * cx + start) * hw, dy + n * cy * hw, cy * hw * sizeof *dx);
      continue;
    }
    for (size_t j = 0; j < cy; j++) {
      const size_t dst = (n * cx + px__chan_src(j, cy, groups, start)) * hw;
      if (hw == 1) dx[dst] = dy[n * cy + j];
      else memcpy(dx + dst, dy + (n * cy + j) * hw, hw * sizeof *dx);
    }
  }
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

/* Whether t is an f32 channels-last map (acdb, unpadded: what the
 * convolutions write in px__ops_channels_last's mode). */
static int px__cpu_is_cl(px_ops_t *ops, const px_tensor_t *t) {
  dnnl_memory_desc_t md;
  if (!t->layout || t->ndim != 4 || t->dtype != PX_DTYPE_F32 || px__cpu_md_of(ops, t, &md) < 0)
    return 0;
  const dnnl_blocking_desc_t *b = &md.format_desc.blocking;
  const int64_t *d = md.dims;
  return md.format_kind == dnnl_blocked && b->inner_nblks == 0 && md.offset0 == 0 &&
         md.padded_dims[1] == d[1] && b->strides[1] == 1 && b->strides[3] == d[1] &&
         b->strides[2] == d[1] * d[3] && b->strides[0] == d[1] * d[2] * d[3];
}

/* The maps of a graph operator (NULL ones skipped): 0 when all are plain
 * f32 NCHW, 1 when all are channels-last; anything else is refused. */
static px_status_t px__cpu_maps_format(px_ops_t *ops, const char *op, int n,
                                       const px_tensor_t *const *t, const char *const *names,
                                       int *cl) {
  int plain = 0, last = 0;
  for (int i = 0; i < n; i++) {
    if (!t[i]) continue;
    if (px__cpu_is_cl(ops, t[i])) last++;
    else if (t[i]->dtype == PX_DTYPE_F32 && px_tensor_is_plain(t[i])) plain++;
    else return px_set_error(PX_ERR_INVALID, "%s %s: the CPU engine takes plain f32 NCHW or "
                             "channels-last maps here, not %s", op, names[i],
                             px_layout_name(t[i]->layout));
  }
  if (plain && last)
    return px_set_error(PX_ERR_INVALID, "%s: plain and channels-last maps mixed", op);
  *cl = last > 0;
  return PX_OK;
}

/* A gate [N, C, 1, 1]: plain (or channels-last, the same bytes). */
static px_status_t px__cpu_gate(px_ops_t *ops, const px_tensor_t *g, const char *op) {
  if (g->dtype == PX_DTYPE_F32 && (px_tensor_is_plain(g) || px__cpu_is_cl(ops, g))) return PX_OK;
  return px_set_error(PX_ERR_INVALID, "%s g: the CPU engine takes a plain f32 gate here", op);
}

px_status_t px__cpu_mul_forward(px_ops_t *ops, px_tensor_t *y, const px_tensor_t *x,
                                const px_tensor_t *g) {
  int cl;
  const px_tensor_t *maps[] = {x, y};
  const char *names[] = {"x", "y"};
  PX_CHECK(px__cpu_maps_format(ops, "mul forward", 2, maps, names, &cl));
  PX_CHECK(px__cpu_gate(ops, g, "mul forward"));
  const size_t n = (size_t)x->dims[0], c = (size_t)x->dims[1];
  const size_t hw = (size_t)(x->dims[2] * x->dims[3]);
  if (cl) px__mul_forward_cl(y->data, x->data, g->data, n, c, hw);
  else px__mul_forward(y->data, x->data, g->data, n * c, hw);
  return PX_OK;
}

px_status_t px__cpu_mul_backward(px_ops_t *ops, px_tensor_t *dx, px_tensor_t *dg,
                                 const px_tensor_t *dy, const px_tensor_t *x, const px_tensor_t *g) {
  int cl;
  const px_tensor_t *maps[] = {x, dy, dx};
  const char *names[] = {"x", "dy", "dx"};
  PX_CHECK(px__cpu_maps_format(ops, "mul backward", 3, maps, names, &cl));
  PX_CHECK(px__cpu_gate(ops, g, "mul backward"));
  if (dg) PX_CHECK(px__cpu_gate(ops, dg, "mul backward"));
  const size_t n = (size_t)x->dims[0], c = (size_t)x->dims[1];
  const size_t hw = (size_t)(x->dims[2] * x->dims[3]);
  float *dxp = dx ? dx->data : NULL, *dgp = dg ? dg->data : NULL;
  if (cl) px__mul_backward_cl(dxp, dgp, dy->data, x->data, g->data, n, c, hw);
  else px__mul_backward(dxp, dgp, dy->data, x->data, g->data, n * c, hw);
  return PX_OK;
}

/* A map's rows for the concatenation and channel selections: batch and
 * pixels per channel run (channels-last: every pixel a row of one value). */
static void px__cpu_rows(const px_tensor_t *t, int cl, size_t *batch, size_t *hw) {
  const size_t n = (size_t)t->dims[0], p = (size_t)(t->dims[2] * t->dims[3]);
  *batch = cl ? n * p : n;
  *hw = cl ? 1 : p;
}

px_status_t px__cpu_concat_forward(px_ops_t *ops, px_tensor_t *y, const px_tensor_t *a,
                                   const px_tensor_t *b) {
  int cl;
  size_t batch, hw;
  const px_tensor_t *maps[] = {y, a, b};
  const char *names[] = {"y", "a", "b"};
  PX_CHECK(px__cpu_maps_format(ops, "concat forward", 3, maps, names, &cl));
  px__cpu_rows(y, cl, &batch, &hw);
  px__concat_forward(y->data, a->data, b->data, batch, (size_t)a->dims[1], (size_t)b->dims[1], hw);
  return PX_OK;
}

px_status_t px__cpu_concat_backward(px_ops_t *ops, px_tensor_t *da, px_tensor_t *db,
                                    const px_tensor_t *dy) {
  int cl;
  size_t batch, hw;
  const px_tensor_t *maps[] = {dy, da, db};
  const char *names[] = {"dy", "da", "db"};
  PX_CHECK(px__cpu_maps_format(ops, "concat backward", 3, maps, names, &cl));
  px__cpu_rows(dy, cl, &batch, &hw);
  const int64_t ca = da ? da->dims[1] : dy->dims[1] - db->dims[1];
  px__concat_backward(da ? da->data : NULL, db ? db->data : NULL, dy->data, batch, (size_t)ca,
                      (size_t)(dy->dims[1] - ca), hw);
  return PX_OK;
}

px_status_t px__cpu_chan_forward(px_ops_t *ops, px_tensor_t *y, const px_tensor_t *x, int groups,
                                 int start) {
  int cl;
  size_t batch, hw;
  const px_tensor_t *maps[] = {x, y};
  const char *names[] = {"x", "y"};
  PX_CHECK(px__cpu_maps_format(ops, "channel selection forward", 2, maps, names, &cl));
  px__cpu_rows(x, cl, &batch, &hw);
  px__chan_forward(y->data, x->data, batch, (size_t)x->dims[1], (size_t)y->dims[1], hw,
                   (size_t)groups, (size_t)start);
  return PX_OK;
}

px_status_t px__cpu_chan_backward(px_ops_t *ops, px_tensor_t *dx, const px_tensor_t *dy, int groups,
                                  int start) {
  int cl;
  size_t batch, hw;
  const px_tensor_t *maps[] = {dy, dx};
  const char *names[] = {"dy", "dx"};
  PX_CHECK(px__cpu_maps_format(ops, "channel selection backward", 2, maps, names, &cl));
  px__cpu_rows(dx, cl, &batch, &hw);
  px__chan_backward(dx->data, dy->data, batch, (size_t)dx->dims[1], (size_t)dy->dims[1], hw,
                    (size_t)groups, (size_t)start);
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
