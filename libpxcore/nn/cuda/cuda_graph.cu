/* The graph operators of imported networks on CUDA (nn/px_graph_ops.h has
 * their CPU code, the reference these kernels are tested against by
 * tests/test_gpu_graph.c): standalone activations (ReLU, LeakyReLU, ReLU6,
 * sigmoid, hard sigmoid, hard swish, SiLU, GELU, tanh), the squeeze-and-excitation product of a map and a per-channel
 * gate, and the concatenation of two maps on channels; forward and
 * backward, the entries act_forward ... concat_backward of the ops table.
 *
 * Formats: plain f32 NCHW or channels-last (NHWC, f32 or bf16:
 * px_cuda_ops_int.h), arithmetic in f32. The gate [N, C, 1, 1] is the same
 * memory in either order, f32 or the map's dtype. Every kernel writes each
 * output element from one thread, so no atomics and no zero-fill; the
 * gate's gradient is one block per (n, c) whose threads sum fixed strided
 * slices and then a fixed tree: the same sums, in the same order, every
 * run. Nothing allocates; everything is queued on the context's stream. */
#include <math.h>

#include "nn/cuda/px_cuda_index.h"
#include "nn/cuda/px_cuda_ops_int.h"

#define PX__FOR_EACH(i, n)                                                   \
  for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < (n); \
       i += (int64_t)gridDim.x * blockDim.x)

/* ---- activations -------------------------------------------------------------------- */

/* The arithmetic of px__act_forward / px__act_backward, one element
 * (nn/cpu/cpu_graph.c: the same expressions, PyTorch's values at the kinks). */
/* The hard sigmoid's argument alpha x + 1/2 rounded twice, as the CPU
 * computes it: a fused multiply-add moves it off 0 at x = -3 (alpha 1/6
 * rounded), and HardSwish's gradient there from -dy/2 to 0. */
__device__ static inline float px__hsig_t(float x, float alpha) {
  return __fadd_rn(__fmul_rn(alpha, x), 0.5f);
}

__device__ static inline float px__hsig_f(float x, float alpha) {
  const float t = px__hsig_t(x, alpha);
  return t < 0.0f ? 0.0f : t > 1.0f ? 1.0f : t;
}

__device__ static inline float px__act_f(float x, int act, float alpha) {
  switch (act) {
    case PX__ACT_RELU: return x > 0.0f ? x : 0.0f;
    case PX__ACT_LEAKY: return x > 0.0f ? x : alpha * x;
    case PX__ACT_RELU6: return x < 0.0f ? 0.0f : x > 6.0f ? 6.0f : x;
    case PX__ACT_HSIGMOID: return px__hsig_f(x, alpha);
    case PX__ACT_HSWISH: return x * px__hsig_f(x, alpha);
    case PX__ACT_SILU: return x / (1.0f + expf(-x));
    case PX__ACT_GELU: return 0.5f * x * (1.0f + erff(x * 0.70710678118654752440f));
    case PX__ACT_TANH: return tanhf(x);
    case PX__ACT_SCALE: return alpha * x;
    case PX__ACT_SHIFT: return x + alpha;
    default: return 1.0f / (1.0f + expf(-x));
  }
}

__device__ static inline float px__act_df(float dy, float x, float y, int act, float alpha) {
  const float t = px__hsig_t(x, alpha);
  switch (act) {
    case PX__ACT_RELU: return x > 0.0f ? dy : 0.0f;
    case PX__ACT_LEAKY: return x > 0.0f ? dy : alpha * dy;
    case PX__ACT_RELU6: return x > 0.0f && x < 6.0f ? dy : 0.0f;
    case PX__ACT_HSIGMOID: return t > 0.0f && t < 1.0f ? dy * alpha : 0.0f;
    case PX__ACT_HSWISH: return t < 0.0f ? 0.0f : t <= 1.0f ? dy * (2.0f * alpha * x + 0.5f) : dy;
    case PX__ACT_SILU: {
      const float s = 1.0f / (1.0f + expf(-x));
      return dy * s * (1.0f + x * (1.0f - s));
    }
    case PX__ACT_GELU:
      return dy * (0.5f * (1.0f + erff(x * 0.70710678118654752440f)) +
                   x * 0.39894228040143267794f * expf(-0.5f * x * x));
    case PX__ACT_TANH: return dy * (1.0f - y * y);
    case PX__ACT_SCALE: return alpha * dy;
    case PX__ACT_SHIFT: return dy;
    default: return dy * y * (1.0f - y);
  }
}

/* Forward (dy NULL): out = act(x); backward: out = dy * act'(x) (sigmoid
 * and tanh read y). */
template <typename T>
__global__ static void px__act_kernel(T *out, const T *dy, const T *x, const T *y, int64_t n,
                                      int act, float alpha) {
  PX__FOR_EACH(i, n) {
    const float v = px__ld(x + i);
    px__st(out + i, dy ? px__act_df(px__ld(dy + i), v, px__ld(y + i), act, alpha)
                       : px__act_f(v, act, alpha));
  }
}

/* ---- squeeze-and-excitation product -------------------------------------------------- */

/* y = x * g[row]; with dy for x: dx = dy * g[row]. */
template <typename T, typename G>
__global__ static void px__mul_kernel(T *y, const T *x, const G *g, int64_t n, int64_t c,
                                      int64_t hw, int nhwc) {
  PX__FOR_EACH(i, n) px__st(y + i, px__ld(x + i) * px__ld(g + px__act_row(i, c, hw, nhwc)));
}

enum { PX__SUM_THREADS = 256 };

/* dg[r] = sum over the hw elements of row r = (n, c) of dy * x: block r. */
template <typename T, typename G>
__global__ static void px__mul_dg_kernel(G *dg, const T *dy, const T *x, int64_t c, int64_t hw,
                                         int nhwc) {
  __shared__ float part[PX__SUM_THREADS];
  const int64_t r = blockIdx.x, b = r / c, ch = r % c;
  /* element p of the row: NCHW contiguous, NHWC c apart */
  const int64_t base = px__act_at(b, ch, 0, c, hw, nhwc), step = nhwc ? c : 1;
  float s = 0.0f;
  for (int64_t p = threadIdx.x; p < hw; p += PX__SUM_THREADS)
    s += px__ld(dy + base + p * step) * px__ld(x + base + p * step);
  part[threadIdx.x] = s;
  __syncthreads();
  for (int w = PX__SUM_THREADS / 2; w > 0; w /= 2) {
    if (threadIdx.x < w) part[threadIdx.x] += part[threadIdx.x + w];
    __syncthreads();
  }
  if (threadIdx.x == 0) px__st(dg + r, part[0]);
}

/* ---- concatenation on channels ---------------------------------------------------------- */

/* fwd: y[i] = a or b at the same (n, channel, p); else the gradients
 * back: da, db (either NULL) from dy. One thread per element of y / dy
 * (total of them). */
template <typename T>
__global__ static void px__concat_kernel(T *y, T *a, T *b, int64_t total, int64_t ca, int64_t cb,
                                         int64_t hw, int nhwc, int fwd) {
  const int64_t c = ca + cb;
  PX__FOR_EACH(i, total) {
    int64_t n, ch, p;
    px__act_split(i, c, hw, nhwc, &n, &ch, &p);
    T *src = ch < ca ? a : b;
    if (!src) continue;
    const int64_t j =
        ch < ca ? px__act_at(n, ch, p, ca, hw, nhwc) : px__act_at(n, ch - ca, p, cb, hw, nhwc);
    if (fwd) y[i] = src[j];
    else src[j] = y[i];
  }
}

/* ---- the entries of the ops table --------------------------------------------------------- */

/* The formats these kernels take: plain f32 or NHWC f32 / bf16. */
static px_status_t px__graph_format(const px_tensor_t *t, const char *op, const char *arg) {
  const int ok = t->layout ? (t->dtype == PX_DTYPE_F32 || t->dtype == PX_DTYPE_BF16)
                           : t->dtype == PX_DTYPE_F32;
  if (!ok)
    return px_set_error(PX_ERR_INVALID, "%s %s: CUDA takes plain f32 or NHWC f32 / bf16 "
                        "activations", op, arg);
  return PX_OK;
}

static inline int px__bf16(const px_tensor_t *t) { return t->dtype == PX_DTYPE_BF16; }

/* The activation's one launch (see px__act_kernel). */
static px_status_t px__act_run(px_ops_t *o, void *out, const void *dy, const px_tensor_t *x,
                               const void *y, px__act_t act, float alpha, const char *what) {
  px__cuda_ops_t *ops = px__cuda_ctx(o);
  PX_CHECK(px__graph_format(x, what, "x"));
  PX_CHECK(px__cuda_enter(ops));
  const size_t n = px_tensor_numel(x);
  typedef __nv_bfloat16 bf;
  if (px__bf16(x))
    px__act_kernel<<<px__cuda_blocks(n), PX__CUDA_THREADS, 0, ops->stream>>>(
        (bf *)out, (const bf *)dy, (const bf *)x->data, (const bf *)y, (int64_t)n, (int)act, alpha);
  else
    px__act_kernel<<<px__cuda_blocks(n), PX__CUDA_THREADS, 0, ops->stream>>>(
        (float *)out, (const float *)dy, (const float *)x->data, (const float *)y, (int64_t)n,
        (int)act, alpha);
  PX_CUDA_LAUNCHED(what);
  return PX_OK;
}

extern "C" px_status_t px__cuda_act_forward(px_ops_t *o, px_tensor_t *y, const px_tensor_t *x,
                                            px__act_t act, float alpha) {
  return px__act_run(o, y->data, NULL, x, NULL, act, alpha, "activation forward");
}

extern "C" px_status_t px__cuda_act_backward(px_ops_t *o, px_tensor_t *dx, const px_tensor_t *dy,
                                             const px_tensor_t *x, const px_tensor_t *y,
                                             px__act_t act, float alpha) {
  return px__act_run(o, dx->data, dy->data, x, y->data, act, alpha, "activation backward");
}

/* y = x * g over the shape of x (one launch, in the dtypes of x and g). */
template <typename T>
static void px__mul_launch(const px__cuda_ops_t *ops, void *y, const void *x, const px_tensor_t *g,
                           const px_tensor_t *xs) {
  const size_t n = px_tensor_numel(xs);
  const int64_t c = xs->dims[1], hw = xs->dims[2] * xs->dims[3];
  const int nhwc = px__cuda_nhwc(xs);
  if (px__bf16(g))
    px__mul_kernel<<<px__cuda_blocks(n), PX__CUDA_THREADS, 0, ops->stream>>>(
        (T *)y, (const T *)x, (const __nv_bfloat16 *)g->data, (int64_t)n, c, hw, nhwc);
  else
    px__mul_kernel<<<px__cuda_blocks(n), PX__CUDA_THREADS, 0, ops->stream>>>(
        (T *)y, (const T *)x, (const float *)g->data, (int64_t)n, c, hw, nhwc);
}

template <typename T>
static void px__mul_dg_launch(const px__cuda_ops_t *ops, px_tensor_t *dg, const void *dy,
                              const void *x, const px_tensor_t *xs) {
  const int64_t rows = xs->dims[0] * xs->dims[1], c = xs->dims[1], hw = xs->dims[2] * xs->dims[3];
  const int nhwc = px__cuda_nhwc(xs);
  if (px__bf16(dg))
    px__mul_dg_kernel<<<(unsigned)rows, PX__SUM_THREADS, 0, ops->stream>>>(
        (__nv_bfloat16 *)dg->data, (const T *)dy, (const T *)x, c, hw, nhwc);
  else
    px__mul_dg_kernel<<<(unsigned)rows, PX__SUM_THREADS, 0, ops->stream>>>(
        (float *)dg->data, (const T *)dy, (const T *)x, c, hw, nhwc);
}

extern "C" px_status_t px__cuda_mul_forward(px_ops_t *o, px_tensor_t *y, const px_tensor_t *x,
                                            const px_tensor_t *g) {
  px__cuda_ops_t *ops = px__cuda_ctx(o);
  PX_CHECK(px__graph_format(x, "mul forward", "x"));
  PX_CHECK(px__graph_format(g, "mul forward", "g"));
  PX_CHECK(px__cuda_enter(ops));
  if (px__bf16(x)) px__mul_launch<__nv_bfloat16>(ops, y->data, x->data, g, x);
  else px__mul_launch<float>(ops, y->data, x->data, g, x);
  PX_CUDA_LAUNCHED("mul forward");
  return PX_OK;
}

extern "C" px_status_t px__cuda_mul_backward(px_ops_t *o, px_tensor_t *dx, px_tensor_t *dg,
                                             const px_tensor_t *dy, const px_tensor_t *x,
                                             const px_tensor_t *g) {
  px__cuda_ops_t *ops = px__cuda_ctx(o);
  PX_CHECK(px__graph_format(x, "mul backward", "x"));
  PX_CHECK(px__graph_format(g, "mul backward", "g"));
  PX_REQUIRE(x->dims[0] * x->dims[1] <= INT32_MAX, "mul backward: too many channels");
  PX_CHECK(px__cuda_enter(ops));
  /* the gate's gradient first: dx may share dy's buffer */
  if (dg) {
    if (px__bf16(x)) px__mul_dg_launch<__nv_bfloat16>(ops, dg, dy->data, x->data, x);
    else px__mul_dg_launch<float>(ops, dg, dy->data, x->data, x);
    PX_CUDA_LAUNCHED("mul backward (gate)");
  }
  if (dx) {
    if (px__bf16(x)) px__mul_launch<__nv_bfloat16>(ops, dx->data, dy->data, g, x);
    else px__mul_launch<float>(ops, dx->data, dy->data, g, x);
    PX_CUDA_LAUNCHED("mul backward (map)");
  }
  return PX_OK;
}

/* The concatenation's one launch, forward or backward. */
static px_status_t px__concat_run(px__cuda_ops_t *ops, const px_tensor_t *y, void *a, void *b,
                                  int64_t ca, int fwd) {
  PX_CHECK(px__graph_format(y, fwd ? "concat forward" : "concat backward", fwd ? "y" : "dy"));
  PX_CHECK(px__cuda_enter(ops));
  const int64_t total = (int64_t)px_tensor_numel(y), hw = y->dims[2] * y->dims[3];
  const int64_t cb = y->dims[1] - ca;
  const int nhwc = px__cuda_nhwc(y);
  const unsigned blocks = px__cuda_blocks((size_t)total);
  if (px__bf16(y))
    px__concat_kernel<<<blocks, PX__CUDA_THREADS, 0, ops->stream>>>(
        (__nv_bfloat16 *)y->data, (__nv_bfloat16 *)a, (__nv_bfloat16 *)b, total, ca, cb, hw, nhwc,
        fwd);
  else
    px__concat_kernel<<<blocks, PX__CUDA_THREADS, 0, ops->stream>>>(
        (float *)y->data, (float *)a, (float *)b, total, ca, cb, hw, nhwc, fwd);
  PX_CUDA_LAUNCHED(fwd ? "concat forward" : "concat backward");
  return PX_OK;
}

extern "C" px_status_t px__cuda_concat_forward(px_ops_t *o, px_tensor_t *y, const px_tensor_t *a,
                                               const px_tensor_t *b) {
  return px__concat_run(px__cuda_ctx(o), y, a->data, b->data, a->dims[1], 1);
}

extern "C" px_status_t px__cuda_concat_backward(px_ops_t *o, px_tensor_t *da, px_tensor_t *db,
                                                const px_tensor_t *dy) {
  const int64_t ca = da ? da->dims[1] : dy->dims[1] - db->dims[1];
  return px__concat_run(px__cuda_ctx(o), dy, da ? da->data : NULL, db ? db->data : NULL, ca, 0);
}

/* ---- channel selection: ShuffleNet's shuffle and channel split --------------------------- */

/* fwd: y[n, j, p] = x[n, px__chan_src(j), p], one thread per element of y;
 * back: dx[n, c, p] = dy[n, j, p] for the j taking c, else 0, one thread per
 * element of dx (every element written once: no zero-fill, no atomics). */
template <typename T>
__global__ static void px__chan_kernel(T *y, const T *x, int64_t total, int64_t cx, int64_t cy,
                                       int64_t hw, int64_t groups, int64_t start, int nhwc,
                                       int fwd) {
  PX__FOR_EACH(i, total) {
    int64_t n, ch, p;
    if (fwd) {
      px__act_split(i, cy, hw, nhwc, &n, &ch, &p);
      const int64_t c = groups > 1 ? (ch % groups) * (cy / groups) + ch / groups : start + ch;
      y[i] = x[px__act_at(n, c, p, cx, hw, nhwc)];
      continue;
    }
    /* y is dx [N, cx], x is dy [N, cy]: the inverse map */
    px__act_split(i, cx, hw, nhwc, &n, &ch, &p);
    const int64_t per = cx / groups;
    const int64_t j = groups > 1 ? (ch % per) * groups + ch / per : ch - start;
    y[i] = j >= 0 && j < cy ? x[px__act_at(n, j, p, cy, hw, nhwc)] : (T)0.0f;
  }
}

static px_status_t px__chan_run(px__cuda_ops_t *ops, void *y, const void *x, const px_tensor_t *big,
                                int64_t cx, int64_t cy, int groups, int start, int fwd) {
  const char *op = fwd ? "channel selection forward" : "channel selection backward";
  PX_CHECK(px__graph_format(big, op, fwd ? "y" : "dx"));
  PX_CHECK(px__cuda_enter(ops));
  const int64_t total = (int64_t)px_tensor_numel(big), hw = big->dims[2] * big->dims[3];
  const int nhwc = px__cuda_nhwc(big);
  const unsigned blocks = px__cuda_blocks((size_t)total);
  if (px__bf16(big))
    px__chan_kernel<<<blocks, PX__CUDA_THREADS, 0, ops->stream>>>(
        (__nv_bfloat16 *)y, (const __nv_bfloat16 *)x, total, cx, cy, hw, groups, start, nhwc, fwd);
  else
    px__chan_kernel<<<blocks, PX__CUDA_THREADS, 0, ops->stream>>>(
        (float *)y, (const float *)x, total, cx, cy, hw, groups, start, nhwc, fwd);
  PX_CUDA_LAUNCHED(op);
  return PX_OK;
}

extern "C" px_status_t px__cuda_chan_forward(px_ops_t *o, px_tensor_t *y, const px_tensor_t *x,
                                             int groups, int start) {
  return px__chan_run(px__cuda_ctx(o), y->data, x->data, y, x->dims[1], y->dims[1], groups, start,
                      1);
}

extern "C" px_status_t px__cuda_chan_backward(px_ops_t *o, px_tensor_t *dx, const px_tensor_t *dy,
                                              int groups, int start) {
  return px__chan_run(px__cuda_ctx(o), dx->data, dy->data, dx, dx->dims[1], dy->dims[1], groups,
                      start, 0);
}
