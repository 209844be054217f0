/* Max, average and global average pooling on CUDA with our own kernels (the
 * semantics of ops.h, which cuDNN's pooling backward, needing x and y,
 * does not fit). Forward: one thread per output; max pooling records the
 * position of the first maximum of each window (int32 index into the input
 * plane, the workspace of ops.h). Backward: one thread per input that
 * gathers from the outputs whose windows cover it, so no atomics and no
 * zero-fill are needed and the sums are deterministic.
 *
 * Windows of any geometry the CPU engine takes (asymmetric and end padding,
 * ceil_mode, dilation for max pooling), sized by px__axis_out as there.
 * Windowed max and average pooling take plain f32 NCHW and channels-last
 * input (NHWC, f32 or bf16: px_cuda_ops_int.h; an imported VGG-style net's
 * MaxPool / AveragePool on the CUDA path's default format) and give their
 * output in the input's format; the arg-max index is the position in the
 * input plane (ih * W + iw) in either order, and the sums are in f32.
 * Global average pooling also takes channels-last input and gives plain
 * f32 [N, C, 1, 1], which is the same memory in either order; its kernels
 * read a channel's values with threads of neighbouring channels side by
 * side. */
#include <stdint.h>
#include <string.h>

#include "nn/cuda/px_cuda_index.h"
#include "nn/cuda/px_cuda_ops_int.h"
#include "nn/px_ops_int.h"
#include "prunex/ops_internal.h"

/* ph, pw: the top and left padding (where the windows start); the end
 * padding, ceil_mode and dilation size oh and ow (px__axis_out, as the CPU
 * engine). mode is what the windows divide by: PX_POOL_AVG whose ceil_mode
 * windows run past the end (no padding, else refused as on the CPU) divides
 * by the real inputs, as PX_POOL_AVG_EXCLUDE_PAD. */
typedef struct {
  int64_t n, c, h, w, oh, ow;
  int kh, kw, sh, sw, ph, pw, dh, dw;
  int mode; /* px_pool_mode_t */
} px__pool_geom_t;

typedef struct px__cuda_pool2d {
  px__ops_head_t head; /* first: the dispatcher reads it */
  px__cuda_ops_t *ops;
  px_pool2d_params_t p;
  px__pool_geom_t g;
  px_tensor_t x_spec;  /* [N, C, H, W] */
  px_tensor_t y_spec;  /* [N, C, OH, OW] */
  px_tensor_t ws_spec; /* u8 [4 * N*C*OH*OW] arg-max indices for max pooling, else nbytes 0 */
  int nhwc_gap;        /* global average pooling of an NHWC input */
} px__cuda_pool2d_t;

/* ---- kernels --------------------------------------------------------------------------- */

/* Number of real inputs in the window starting at (hs, ws). */
__device__ static int px__window_count(const px__pool_geom_t g, int64_t hs, int64_t ws) {
  int64_t h0 = hs > 0 ? hs : 0, w0 = ws > 0 ? ws : 0;
  int64_t h1 = hs + g.kh < g.h ? hs + g.kh : g.h, w1 = ws + g.kw < g.w ? ws + g.kw : g.w;
  return (int)((h1 - h0) * (w1 - w0));
}

__device__ static float px__divisor(const px__pool_geom_t g, int64_t hs, int64_t ws) {
  return g.mode == PX_POOL_AVG_EXCLUDE_PAD ? (float)px__window_count(g, hs, ws)
                                           : (float)(g.kh * g.kw);
}

/* Element (nc = n * C + c, spatial p) of an [N, C, plane] tensor in either
 * order, and the reverse (px_cuda_index.h). */
__device__ static inline int64_t px__pool_at(int64_t nc, int64_t p, int64_t c, int64_t plane,
                                             int nhwc) {
  return px__act_at(nc / c, nc % c, p, c, plane, nhwc);
}
__device__ static inline void px__pool_split(int64_t i, int64_t c, int64_t plane, int nhwc,
                                             int64_t *nc, int64_t *p) {
  int64_t n, ch;
  px__act_split(i, c, plane, nhwc, &n, &ch, p);
  *nc = n * c + ch;
}

/* One thread per output; T f32 or bf16 (NHWC), arithmetic in f32. */
template <typename T>
__global__ static void px__pool_fwd_kernel(T *__restrict__ y, int32_t *__restrict__ argmax,
                                           const T *__restrict__ x, const px__pool_geom_t g,
                                           int nhwc) {
  const int64_t total = g.n * g.c * g.oh * g.ow;
  for (int64_t o = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; o < total;
       o += (int64_t)gridDim.x * blockDim.x) {
    int64_t nc, op;
    px__pool_split(o, g.c, g.oh * g.ow, nhwc, &nc, &op);
    const int64_t ow = op % g.ow, oh = op / g.ow;
    const int64_t hs = oh * g.sh - g.ph, ws = ow * g.sw - g.pw;
    if (g.mode == PX_POOL_MAX) {
      float best = 0.0f;
      int32_t arg = -1;
      for (int i = 0; i < g.kh; i++) {
        const int64_t ih = hs + (int64_t)i * g.dh;
        if (ih < 0 || ih >= g.h) continue;
        for (int j = 0; j < g.kw; j++) {
          const int64_t iw = ws + (int64_t)j * g.dw;
          if (iw < 0 || iw >= g.w) continue;
          const float v = px__ld(x + px__pool_at(nc, ih * g.w + iw, g.c, g.h * g.w, nhwc));
          if (arg < 0 || v > best) { /* strict: the first maximum wins */
            best = v;
            arg = (int32_t)(ih * g.w + iw);
          }
        }
      }
      px__st(y + o, best);
      argmax[o] = arg;
    } else {
      float sum = 0.0f;
      for (int i = 0; i < g.kh; i++) {
        const int64_t ih = hs + i;
        if (ih < 0 || ih >= g.h) continue;
        for (int j = 0; j < g.kw; j++) {
          const int64_t iw = ws + j;
          if (iw >= 0 && iw < g.w)
            sum += px__ld(x + px__pool_at(nc, ih * g.w + iw, g.c, g.h * g.w, nhwc));
        }
      }
      px__st(y + o, sum / px__divisor(g, hs, ws));
    }
  }
}

template <typename T>
__global__ static void px__pool_bwd_kernel(T *__restrict__ dx, const T *__restrict__ dy,
                                           const int32_t *__restrict__ argmax,
                                           const px__pool_geom_t g, int nhwc) {
  const int64_t total = g.n * g.c * g.h * g.w;
  for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < total;
       i += (int64_t)gridDim.x * blockDim.x) {
    int64_t nc, ip;
    px__pool_split(i, g.c, g.h * g.w, nhwc, &nc, &ip);
    const int64_t iw = ip % g.w, ih = ip / g.w;
    int64_t oh0, oh1, ow0, ow1; /* the windows' dilated extents: max pooling's arg-max picks */
    px__pool_covering(ih, g.dh * (g.kh - 1) + 1, g.sh, g.ph, g.oh, &oh0, &oh1);
    px__pool_covering(iw, g.dw * (g.kw - 1) + 1, g.sw, g.pw, g.ow, &ow0, &ow1);
    const int32_t me = (int32_t)ip;
    float sum = 0.0f;
    for (int64_t oh = oh0; oh <= oh1; oh++)
      for (int64_t ow = ow0; ow <= ow1; ow++) {
        const int64_t o = px__pool_at(nc, oh * g.ow + ow, g.c, g.oh * g.ow, nhwc);
        if (g.mode == PX_POOL_MAX) {
          if (argmax[o] == me) sum += px__ld(dy + o);
        } else {
          sum += px__ld(dy + o) / px__divisor(g, oh * g.sh - g.ph, ow * g.sw - g.pw);
        }
      }
    px__st(dx + i, sum);
  }
}

/* Global average of NHWC x: y[n][c] = mean over p of x[n][p][c]. */
template <typename T>
__global__ static void px__gap_nhwc_fwd(float *__restrict__ y, const T *__restrict__ x, int64_t n,
                                        int64_t c, int64_t hw) {
  for (int64_t o = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; o < n * c;
       o += (int64_t)gridDim.x * blockDim.x) {
    const int64_t ch = o % c, b = o / c;
    const T *in = x + b * hw * c + ch;
    float sum = 0.0f;
    for (int64_t p = 0; p < hw; p++) sum += px__ld(in + p * c);
    y[o] = sum / (float)hw;
  }
}

template <typename T>
__global__ static void px__gap_nhwc_bwd(T *__restrict__ dx, const float *__restrict__ dy, int64_t n,
                                        int64_t c, int64_t hw) {
  for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < n * hw * c;
       i += (int64_t)gridDim.x * blockDim.x) {
    const int64_t ch = i % c, b = i / (hw * c);
    px__st(dx + i, dy[b * c + ch] / (float)hw);
  }
}

/* ---- op -------------------------------------------------------------------------------- */

extern "C" void px__cuda_pool2d_destroy(px_pool2d_t *o) {
  px__cuda_pool2d_t *op = (px__cuda_pool2d_t *)o;
  if (op) px__cuda_op_free(op->ops, op);
}

extern "C" px_status_t px__cuda_pool2d_create(px_ops_t *o, const px_tensor_t *x_spec,
                                              const px_pool2d_params_t *p, px_pool2d_t **out) {
  px__cuda_ops_t *ops = px__cuda_ctx(o);
  PX_REQUIRE(out && p, "px_pool2d_create: NULL argument");
  *out = NULL;
  PX_CHECK(px__cuda_check_act(ops, x_spec, 4, 4, "px_pool2d_create"));
  px__axis_t ah, aw; /* the CPU engine's checks and sizes */
  PX_CHECK(px__pool_axes(x_spec, p, &ah, &aw));
  PX_REQUIRE(p->mode == PX_POOL_MAX || p->mode == PX_POOL_AVG || p->mode == PX_POOL_AVG_EXCLUDE_PAD,
             "px_pool2d_create: unknown mode %d", (int)p->mode);
  px__pool_geom_t g;
  memset(&g, 0, sizeof g);
  g.n = x_spec->dims[0];
  g.c = x_spec->dims[1];
  g.h = x_spec->dims[2];
  g.w = x_spec->dims[3];
  g.oh = px__axis_out(&ah);
  g.ow = px__axis_out(&aw);
  PX_REQUIRE(g.oh > 0 && g.ow > 0, "px_pool2d_create: kernel larger than the padded input");
  PX_REQUIRE(g.h * g.w <= INT32_MAX, "px_pool2d_create: input plane too large");
  const int over = px__axis_overrun(&ah, g.oh) > 0 || px__axis_overrun(&aw, g.ow) > 0;
  PX_REQUIRE(!(over && p->mode == PX_POOL_AVG && (p->pad_h || p->pad_w || ah.p1 || aw.p1)),
             "px_pool2d_create: an average pooling counting its padding whose ceil_mode windows "
             "run past the padding is not supported on the CUDA engine");
  g.kh = p->kh;
  g.kw = p->kw;
  g.sh = p->stride_h;
  g.sw = p->stride_w;
  g.ph = p->pad_h;
  g.pw = p->pad_w;
  g.dh = (int)ah.d;
  g.dw = (int)aw.d;
  g.mode = over && p->mode == PX_POOL_AVG ? (int)PX_POOL_AVG_EXCLUDE_PAD : (int)p->mode;

  px_status_t st = PX_OK;
  px__cuda_pool2d_t *op = (px__cuda_pool2d_t *)px__cuda_op_new(ops, sizeof *op, "cuda pool2d");
  if (!op) return PX_ERR_NOMEM;
  op->ops = ops;
  op->p = *p;
  op->g = g;
  op->x_spec = px__ops_spec_copy(x_spec);
  {
    const int64_t yd[4] = {g.n, g.c, g.oh, g.ow};
    const int64_t wd[1] = {p->mode == PX_POOL_MAX ? 4 * g.n * g.c * g.oh * g.ow : 1};
    PX_CHECK_GOTO(px__cuda_spec_like(ops, x_spec, yd, &op->y_spec), st, fail);
    PX_CHECK_GOTO(px__cuda_spec(ops, PX_DTYPE_U8, 1, wd, &op->ws_spec), st, fail);
    if (p->mode != PX_POOL_MAX) op->ws_spec.nbytes = 0;
  }
  *out = (px_pool2d_t *)op;
  return PX_OK;
fail:
  px__cuda_pool2d_destroy((px_pool2d_t *)op);
  return st;
}

extern "C" px_status_t px__cuda_global_avgpool_create(px_ops_t *o, const px_tensor_t *x_spec,
                                                      px_pool2d_t **out) {
  PX_REQUIRE(out != NULL, "px_global_avgpool_create: out is NULL");
  *out = NULL;
  px__cuda_ops_t *ops = px__cuda_ctx(o);
  PX_CHECK(px__cuda_check_act(ops, x_spec, 4, 4, "px_global_avgpool_create"));
  PX_REQUIRE(x_spec->dims[2] <= INT32_MAX && x_spec->dims[3] <= INT32_MAX,
             "px_global_avgpool_create: input plane too large");
  px_pool2d_params_t p = {PX_POOL_AVG, (int32_t)x_spec->dims[2], (int32_t)x_spec->dims[3], 1, 1,
                          0, 0, 0, 0, 0, 0, 0};
  if (!px__cuda_nhwc(x_spec)) return px__cuda_pool2d_create(o, x_spec, &p, out);
  /* channels-last: the geometry of a plain one, the input's own spec kept */
  px_tensor_t plain;
  PX_CHECK(px_tensor_init4(&plain, ops->device, x_spec->dims[0], x_spec->dims[1], x_spec->dims[2],
                           x_spec->dims[3]));
  PX_CHECK(px__cuda_pool2d_create(o, &plain, &p, out));
  px__cuda_pool2d_t *op = (px__cuda_pool2d_t *)*out;
  op->x_spec = px__ops_spec_copy(x_spec);
  op->nhwc_gap = 1;
  return PX_OK;
}

extern "C" void px__cuda_pool2d_y_spec(const px_pool2d_t *op, px_tensor_t *spec) {
  *spec = ((const px__cuda_pool2d_t *)op)->y_spec;
}
extern "C" void px__cuda_pool2d_ws_spec(const px_pool2d_t *op, px_tensor_t *spec) {
  *spec = ((const px__cuda_pool2d_t *)op)->ws_spec;
}

extern "C" px_status_t px__cuda_pool2d_forward(px_pool2d_t *o, px_tensor_t *y, px_tensor_t *ws,
                                               const px_tensor_t *x) {
  px__cuda_pool2d_t *op = (px__cuda_pool2d_t *)o;
  PX__CHECK(x, &op->x_spec, "pool2d forward x");
  PX__CHECK(y, &op->y_spec, "pool2d forward y");
  if (op->ws_spec.nbytes) PX__CHECK(ws, &op->ws_spec, "pool2d forward ws");
  PX_CHECK(px__cuda_enter(op->ops));
  const size_t n = px_tensor_numel(&op->y_spec);
  if (op->nhwc_gap) {
    const int64_t hw = op->g.h * op->g.w;
    if (op->x_spec.dtype == PX_DTYPE_BF16)
      px__gap_nhwc_fwd<<<px__cuda_blocks(n), PX__CUDA_THREADS, 0, op->ops->stream>>>(
          (float *)y->data, (const __nv_bfloat16 *)x->data, op->g.n, op->g.c, hw);
    else
      px__gap_nhwc_fwd<<<px__cuda_blocks(n), PX__CUDA_THREADS, 0, op->ops->stream>>>(
          (float *)y->data, (const float *)x->data, op->g.n, op->g.c, hw);
    PX_CUDA_LAUNCHED("global average pooling forward");
    return PX_OK;
  }
  int32_t *arg = op->ws_spec.nbytes ? (int32_t *)ws->data : NULL;
  const int nhwc = px__cuda_nhwc(&op->x_spec);
  if (op->x_spec.dtype == PX_DTYPE_BF16)
    px__pool_fwd_kernel<<<px__cuda_blocks(n), PX__CUDA_THREADS, 0, op->ops->stream>>>(
        (__nv_bfloat16 *)y->data, arg, (const __nv_bfloat16 *)x->data, op->g, nhwc);
  else
    px__pool_fwd_kernel<<<px__cuda_blocks(n), PX__CUDA_THREADS, 0, op->ops->stream>>>(
        (float *)y->data, arg, (const float *)x->data, op->g, nhwc);
  PX_CUDA_LAUNCHED("pooling forward");
  return PX_OK;
}

extern "C" px_status_t px__cuda_pool2d_backward(px_pool2d_t *o, px_tensor_t *dx,
                                                const px_tensor_t *dy, const px_tensor_t *ws) {
  px__cuda_pool2d_t *op = (px__cuda_pool2d_t *)o;
  PX__CHECK(dy, &op->y_spec, "pool2d backward dy");
  PX__CHECK(dx, &op->x_spec, "pool2d backward dx");
  if (op->ws_spec.nbytes) PX__CHECK(ws, &op->ws_spec, "pool2d backward ws");
  PX_CHECK(px__cuda_enter(op->ops));
  const size_t n = px_tensor_numel(&op->x_spec);
  if (op->nhwc_gap) {
    const int64_t hw = op->g.h * op->g.w;
    if (op->x_spec.dtype == PX_DTYPE_BF16)
      px__gap_nhwc_bwd<<<px__cuda_blocks(n), PX__CUDA_THREADS, 0, op->ops->stream>>>(
          (__nv_bfloat16 *)dx->data, (const float *)dy->data, op->g.n, op->g.c, hw);
    else
      px__gap_nhwc_bwd<<<px__cuda_blocks(n), PX__CUDA_THREADS, 0, op->ops->stream>>>(
          (float *)dx->data, (const float *)dy->data, op->g.n, op->g.c, hw);
    PX_CUDA_LAUNCHED("global average pooling backward");
    return PX_OK;
  }
  const int32_t *arg = op->ws_spec.nbytes ? (const int32_t *)ws->data : NULL;
  const int nhwc = px__cuda_nhwc(&op->x_spec);
  if (op->x_spec.dtype == PX_DTYPE_BF16)
    px__pool_bwd_kernel<<<px__cuda_blocks(n), PX__CUDA_THREADS, 0, op->ops->stream>>>(
        (__nv_bfloat16 *)dx->data, (const __nv_bfloat16 *)dy->data, arg, op->g, nhwc);
  else
    px__pool_bwd_kernel<<<px__cuda_blocks(n), PX__CUDA_THREADS, 0, op->ops->stream>>>(
        (float *)dx->data, (const float *)dy->data, arg, op->g, nhwc);
  PX_CUDA_LAUNCHED("pooling backward");
  return PX_OK;
}
