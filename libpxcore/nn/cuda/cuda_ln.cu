/* LayerNorm over the channels of a map on CUDA (an imported ConvNeXt's):
 * the entries ln_forward and ln_backward of the ops table, with the
 * arithmetic of px__ln_forward / px__ln_backward (nn/cpu/cpu_graph.c, the
 * reference tests/test_gpu_graph.c compares these kernels with).
 *
 * Formats: plain f32 NCHW or channels-last (NHWC, f32 or bf16), arithmetic
 * in f32; scale, shift, their gradients and the per-pixel statistics f32.
 * One thread per pixel walks its C values (two passes for the variance, as
 * the CPU); the scale's and shift's gradients are one block per channel
 * whose threads sum fixed strided slices of the pixels and then a fixed
 * tree: the same sums in the same order every run, no atomics. Nothing
 * allocates; everything is queued on the context's stream. */
#include <math.h>

#include "nn/cuda/px_cuda_index.h"
#include "nn/cuda/px_cuda_ops_int.h"

enum { PX__LN_SUM_THREADS = 256 };

/* Pixel q = (n, p) of npix: its statistics, then y. */
template <typename T>
__global__ static void px__ln_fwd_kernel(T *y, float *mean, float *rstd, const T *x,
                                         const float *g, const float *b, int64_t npix, int64_t c,
                                         int64_t hw, int nhwc, float eps) {
  for (int64_t q = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; q < npix;
       q += (int64_t)gridDim.x * blockDim.x) {
    const int64_t n = q / hw, p = q % hw;
    float s = 0.0f, v = 0.0f;
    for (int64_t ch = 0; ch < c; ch++) s += px__ld(x + px__act_at(n, ch, p, c, hw, nhwc));
    s /= (float)c;
    for (int64_t ch = 0; ch < c; ch++) {
      const float d = px__ld(x + px__act_at(n, ch, p, c, hw, nhwc)) - s;
      v += d * d;
    }
    const float rs = 1.0f / sqrtf(v / (float)c + eps);
    mean[q] = s;
    rstd[q] = rs;
    for (int64_t ch = 0; ch < c; ch++) {
      const int64_t i = px__act_at(n, ch, p, c, hw, nhwc);
      px__st(y + i, (px__ld(x + i) - s) * rs * g[ch] + b[ch]);
    }
  }
}

/* dx of pixel q (see px__ln_backward). */
template <typename T>
__global__ static void px__ln_dx_kernel(T *dx, const T *dy, const T *x, const float *mean,
                                        const float *rstd, const float *g, int64_t npix,
                                        int64_t c, int64_t hw, int nhwc) {
  for (int64_t q = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; q < npix;
       q += (int64_t)gridDim.x * blockDim.x) {
    const int64_t n = q / hw, p = q % hw;
    const float mu = mean[q], rs = rstd[q];
    float s1 = 0.0f, s2 = 0.0f;
    for (int64_t ch = 0; ch < c; ch++) {
      const int64_t i = px__act_at(n, ch, p, c, hw, nhwc);
      const float e = px__ld(dy + i) * g[ch];
      s1 += e;
      s2 += e * (px__ld(x + i) - mu) * rs;
    }
    s1 /= (float)c;
    s2 /= (float)c;
    for (int64_t ch = 0; ch < c; ch++) {
      const int64_t i = px__act_at(n, ch, p, c, hw, nhwc);
      const float xh = (px__ld(x + i) - mu) * rs;
      px__st(dx + i, rs * (px__ld(dy + i) * g[ch] - s1 - xh * s2));
    }
  }
}

/* dg[ch], db[ch]: block ch sums dy * xh and dy over every pixel. */
template <typename T>
__global__ static void px__ln_dgb_kernel(float *dg, float *db, const T *dy, const T *x,
                                         const float *mean, const float *rstd, int64_t npix,
                                         int64_t c, int64_t hw, int nhwc) {
  __shared__ float pg[PX__LN_SUM_THREADS], pb[PX__LN_SUM_THREADS];
  const int64_t ch = blockIdx.x;
  float sg = 0.0f, sb = 0.0f;
  for (int64_t q = threadIdx.x; q < npix; q += PX__LN_SUM_THREADS) {
    const int64_t i = px__act_at(q / hw, ch, q % hw, c, hw, nhwc);
    const float d = px__ld(dy + i);
    sg += d * (px__ld(x + i) - mean[q]) * rstd[q];
    sb += d;
  }
  pg[threadIdx.x] = sg;
  pb[threadIdx.x] = sb;
  __syncthreads();
  for (int w = PX__LN_SUM_THREADS / 2; w > 0; w /= 2) {
    if (threadIdx.x < w) {
      pg[threadIdx.x] += pg[threadIdx.x + w];
      pb[threadIdx.x] += pb[threadIdx.x + w];
    }
    __syncthreads();
  }
  if (threadIdx.x == 0) {
    dg[ch] = pg[0];
    db[ch] = pb[0];
  }
}

/* Plain f32 or NHWC f32 / bf16. */
static px_status_t px__ln_format(const px_tensor_t *t, const char *op) {
  const int ok = t->layout ? (t->dtype == PX_DTYPE_F32 || t->dtype == PX_DTYPE_BF16)
                           : t->dtype == PX_DTYPE_F32;
  if (!ok)
    return px_set_error(PX_ERR_INVALID, "%s: CUDA takes plain f32 or NHWC f32 / bf16 maps", op);
  return PX_OK;
}

extern "C" px_status_t px__cuda_ln_forward(px_ops_t *o, px_tensor_t *y, px_tensor_t *mean,
                                           px_tensor_t *rstd, const px_tensor_t *x,
                                           const px_tensor_t *g, const px_tensor_t *b,
                                           float eps) {
  px__cuda_ops_t *ops = px__cuda_ctx(o);
  PX_CHECK(px__ln_format(x, "layernorm forward"));
  PX_CHECK(px__cuda_enter(ops));
  const int64_t c = x->dims[1], hw = x->dims[2] * x->dims[3], npix = x->dims[0] * hw;
  const int nhwc = px__cuda_nhwc(x);
  const unsigned blocks = px__cuda_blocks((size_t)npix);
  if (x->dtype == PX_DTYPE_BF16)
    px__ln_fwd_kernel<<<blocks, PX__CUDA_THREADS, 0, ops->stream>>>(
        (__nv_bfloat16 *)y->data, (float *)mean->data, (float *)rstd->data,
        (const __nv_bfloat16 *)x->data, (const float *)g->data, (const float *)b->data, npix, c,
        hw, nhwc, eps);
  else
    px__ln_fwd_kernel<<<blocks, PX__CUDA_THREADS, 0, ops->stream>>>(
        (float *)y->data, (float *)mean->data, (float *)rstd->data, (const float *)x->data,
        (const float *)g->data, (const float *)b->data, npix, c, hw, nhwc, eps);
  PX_CUDA_LAUNCHED("layernorm forward");
  return PX_OK;
}

template <typename T>
static void px__ln_bwd_launch(const px__cuda_ops_t *ops, px_tensor_t *dx, px_tensor_t *dg,
                              px_tensor_t *db, const px_tensor_t *dy, const px_tensor_t *x,
                              const px_tensor_t *mean, const px_tensor_t *rstd,
                              const px_tensor_t *g) {
  const int64_t c = x->dims[1], hw = x->dims[2] * x->dims[3], npix = x->dims[0] * hw;
  const int nhwc = px__cuda_nhwc(x);
  /* the parameters' gradients first: dx may share dy's buffer */
  px__ln_dgb_kernel<<<(unsigned)c, PX__LN_SUM_THREADS, 0, ops->stream>>>(
      (float *)dg->data, (float *)db->data, (const T *)dy->data, (const T *)x->data,
      (const float *)mean->data, (const float *)rstd->data, npix, c, hw, nhwc);
  if (dx)
    px__ln_dx_kernel<<<px__cuda_blocks((size_t)npix), PX__CUDA_THREADS, 0, ops->stream>>>(
        (T *)dx->data, (const T *)dy->data, (const T *)x->data, (const float *)mean->data,
        (const float *)rstd->data, (const float *)g->data, npix, c, hw, nhwc);
}

extern "C" px_status_t px__cuda_ln_backward(px_ops_t *o, px_tensor_t *dx, px_tensor_t *dg,
                                            px_tensor_t *db, const px_tensor_t *dy,
                                            const px_tensor_t *x, const px_tensor_t *mean,
                                            const px_tensor_t *rstd, const px_tensor_t *g) {
  px__cuda_ops_t *ops = px__cuda_ctx(o);
  PX_CHECK(px__ln_format(x, "layernorm backward"));
  PX_REQUIRE(x->dims[1] <= INT32_MAX, "layernorm backward: too many channels");
  PX_CHECK(px__cuda_enter(ops));
  if (x->dtype == PX_DTYPE_BF16)
    px__ln_bwd_launch<__nv_bfloat16>(ops, dx, dg, db, dy, x, mean, rstd, g);
  else
    px__ln_bwd_launch<float>(ops, dx, dg, db, dy, x, mean, rstd, g);
  PX_CUDA_LAUNCHED("layernorm backward");
  return PX_OK;
}
