/* Batch normalisation on CUDA with PyTorch semantics (ops.h): cuDNN's
 * spatial batch norm for the training forward and the backward, our own
 * kernels for the rest.
 *
 * Training forward: cudnnBatchNormalizationForwardTraining writes y, the
 * batch mean (straight into the caller's mean) and 1/sqrt(var + eps) into an
 * op buffer; a small per-channel kernel turns the latter back into the
 * biased variance the caller keeps, and updates the caller's running
 * statistics with ops.h's rule (unbiased variance, momentum): cuDNN's own
 * running statistics go to op-owned buffers with an averaging factor of 0,
 * so the result does not depend on how cuDNN defines them. With fuse_relu a
 * second kernel applies ReLU in place and writes the mask (1 byte per
 * element, the workspace of ops.h) for the backward.
 *
 * Backward: the mask turns dL/dy into dL/d(bn output) in the context's
 * shared workspace (also used when dx aliases dy: cuDNN is not promised to
 * work in place); 1/sqrt(var + eps) is recomputed from the caller's var, and
 * cudnnBatchNormalizationBackward gives dx, dscale and dshift. The backward
 * thus depends only on its arguments, as the contract says.
 *
 * Inference is one elementwise kernel with the running statistics (and the
 * ReLU when fused).
 *
 * Channels-last (NHWC, f32 or bf16) runs on our own kernels instead, as
 * PyTorch's channels-last batch norm does: cuDNN's legacy spatial batch norm
 * reads NHWC with a stride of C per value (it made ResNet-50 training 5x
 * slower), and its bf16 backward lost a tenth of the gradient's accuracy.
 * They make the fewest passes over the activation-sized tensors: the
 * training forward reads x for the sums and reads x and writes y once more
 * (the ReLU fused), the backward reads dy and x once for both sums (ReLU
 * recomputed) and once more to write dx; between them one small
 * per-channel kernel (statistics, or the backward's coefficients). The
 * activation is [N*H*W rows][C]: a thread owns a fixed group of channels
 * (8 bf16 or 4 f32 in one 16-byte load and store when C is a multiple of
 * that and every base pointer is 16-byte aligned, checked per call; else 1)
 * and walks rows with a stride, so its channels' parameters stay in
 * registers and no index is divided; the grid comes from the shape and the
 * device's SM count (px__bn_geom in px_cuda_index.h, tested on the CPU).
 * Per-channel sums are deterministic: each thread adds its rows in f32,
 * the block adds its thread rows in order in f64 and writes one partial
 * sum per block row (part), and the per-channel kernel adds the block rows
 * in a fixed order (16 lanes in order, then the lanes in order), in f64.
 * No atomics, so the result is the same on every run (the vector and the
 * scalar path add in different orders: the same pointers give the same
 * bits). The statistics, scale, shift and every sum are f32/f64 whatever
 * the activations' type; bf16 values are converted exactly to f32 and
 * rounded to nearest even on the way out. A fused ReLU keeps no mask: the
 * backward recomputes the pre-activation from x and the statistics with
 * the forward's exact operations (rounded, no contraction; invstd from var
 * by the same expression), so it takes the same decisions, and nothing as
 * large as the activation is stored beside it. */
#include <math.h>
#include <string.h>

#include "nn/cuda/px_cuda_index.h"
#include "nn/cuda/px_cuda_ops_int.h"
#include "prunex/ops_internal.h"

typedef struct px__cuda_batchnorm {
  px__ops_head_t head; /* first: the dispatcher reads it */
  px__cuda_ops_t *ops;
  px_batchnorm_params_t p;
  int64_t count;       /* N*H*W: values per channel */
  int64_t c, hw;       /* channels, H*W */
  int nhwc, bf16;      /* the activations' format */
  px_tensor_t x_spec;  /* [N, C, H, W]; y, dx, dy share it */
  px_tensor_t c_spec;  /* [C] */
  px_tensor_t ws_spec; /* u8 [N*C*H*W] ReLU mask with fuse_relu, else nbytes 0 */
  cudnnTensorDescriptor_t x_desc, bn_desc;
  float *buf;          /* device [4][C]: save_invstd, bwd_invstd, cudnn_rm, cudnn_rv;
                          NHWC: [4][C] invstd, k1, k2, k3 (the backward's coefficients) */
  double *part;        /* NHWC: device [groups][2][C] per-block-row partial sums */
  int64_t groups;      /* NHWC: the most block rows a reduction can have (part's rows) */
  int sms;             /* NHWC: the device's multiprocessors (the grids' size) */
  int trained;         /* a training forward has run (px_batchnorm_recompute) */
} px__cuda_batchnorm_t;

static px__cuda_batchnorm_t *px__op(px_batchnorm_t *op) { return (px__cuda_batchnorm_t *)op; }
static const px__cuda_batchnorm_t *px__cop(const px_batchnorm_t *op) {
  return (const px__cuda_batchnorm_t *)op;
}

/* ---- kernels ------------------------------------------------------------------------ */

/* var = 1/invstd^2 - eps (the biased batch variance) and the running
 * statistics update of ops.h, one thread per channel. */
__global__ static void px__bn_stats_kernel(float *__restrict__ var, float *__restrict__ rm,
                                           float *__restrict__ rv, const float *__restrict__ mean,
                                           const float *__restrict__ invstd, int64_t c, float eps,
                                           float m, float unbias) {
  int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
  if (i >= c) return;
  double is = (double)invstd[i];
  double v = 1.0 / (is * is) - (double)eps;
  const float bv = v > 0.0 ? (float)v : 0.0f;
  var[i] = bv;
  rm[i] = (1.0f - m) * rm[i] + m * mean[i];
  rv[i] = (1.0f - m) * rv[i] + m * bv * unbias;
}

__global__ static void px__bn_invstd_kernel(float *__restrict__ invstd, const float *__restrict__ var,
                                            int64_t c, float eps) {
  int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
  if (i < c) invstd[i] = (float)(1.0 / sqrt((double)var[i] + (double)eps));
}

/* y = relu(y) in place, mask = (y > 0). */
template <typename T>
__global__ static void px__bn_relu_mask_kernel(T *__restrict__ y, uint8_t *__restrict__ mask,
                                               int64_t n) {
  for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < n;
       i += (int64_t)gridDim.x * blockDim.x) {
    const float v = px__ld(y + i);
    const int pos = v > 0.0f;
    if (!pos) px__st(y + i, 0.0f);
    mask[i] = (uint8_t)pos;
  }
}

/* dz = mask ? dy : 0 (dz may alias dy). */
template <typename T>
__global__ static void px__bn_mask_grad_kernel(T *dz, const T *dy, const uint8_t *__restrict__ mask,
                                               int64_t n) {
  for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < n;
       i += (int64_t)gridDim.x * blockDim.x)
    px__st(dz + i, mask[i] ? px__ld(dy + i) : 0.0f);
}

/* nhwc: the channel is the fastest index, else (i / hw) % c. */
template <typename T>
__global__ static void px__bn_infer_kernel(T *y, const T *x, const float *__restrict__ scale,
                                           const float *__restrict__ shift,
                                           const float *__restrict__ rm,
                                           const float *__restrict__ rv, int64_t n, int64_t c,
                                           int64_t hw, int nhwc, float eps, int relu) {
  for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < n;
       i += (int64_t)gridDim.x * blockDim.x) {
    const int64_t ch = nhwc ? i % c : (i / hw) % c;
    const float inv = 1.0f / sqrtf(rv[ch] + eps);
    float v = scale[ch] * (px__ld(x + i) - rm[ch]) * inv + shift[ch];
    if (relu && !(v > 0.0f)) v = 0.0f;
    px__st(y + i, v);
  }
}

/* ---- channels-last kernels ---------------------------------------------------------- */

/* The mapping of threads to (rows, channels) is px_cuda_index.h's
 * px__bn_geom (checked on the CPU by tests/test_gpu_bn_nhwc.c). */

/* vec values of T, one 16-byte (or narrower) load or store. */
template <typename T, int V>
struct alignas(sizeof(T) * V) px__bn_pack {
  T v[V];
};

template <int V>
__device__ static inline void px__bn_ld(const float *p, float (&f)[V]) {
  const px__bn_pack<float, V> r = *reinterpret_cast<const px__bn_pack<float, V> *>(p);
#pragma unroll
  for (int k = 0; k < V; k++) f[k] = r.v[k];
}

template <int V>
__device__ static inline void px__bn_ld(const __nv_bfloat16 *p, float (&f)[V]) {
  const px__bn_pack<__nv_bfloat16, V> r =
      *reinterpret_cast<const px__bn_pack<__nv_bfloat16, V> *>(p);
#pragma unroll
  for (int k = 0; k < V; k++) f[k] = __bfloat162float(r.v[k]); /* exact */
}

template <int V>
__device__ static inline void px__bn_st(float *p, const float (&f)[V]) {
  px__bn_pack<float, V> r;
#pragma unroll
  for (int k = 0; k < V; k++) r.v[k] = f[k];
  *reinterpret_cast<px__bn_pack<float, V> *>(p) = r;
}

/* Rounded to nearest even as __float2bfloat16_rn, two values an instruction. */
template <int V>
__device__ static inline void px__bn_st(__nv_bfloat16 *p, const float (&f)[V]) {
  px__bn_pack<__nv_bfloat16, V> r;
  if (V == 1) {
    r.v[0] = __float2bfloat16_rn(f[0]);
  } else {
#pragma unroll
    for (int k = 0; k + 1 < V; k += 2) {
      const __nv_bfloat162 h = __floats2bfloat162_rn(f[k], f[k + 1]);
      r.v[k] = h.x;
      r.v[k + 1] = h.y;
    }
  }
  *reinterpret_cast<px__bn_pack<__nv_bfloat16, V> *>(p) = r;
}

/* V per-channel values from channel ch0. */
template <int V>
__device__ static inline void px__bn_ldc(float (&d)[V], const float *__restrict__ s, int64_t ch0) {
#pragma unroll
  for (int k = 0; k < V; k++) d[k] = s[ch0 + k];
}

/* 1/sqrt(var + eps) as every kernel here computes it (the forward's
 * statistics from the rounded var): the same bits in the backward. */
__device__ static inline float px__bn_invstd(float var, float eps) {
  return (float)(1.0 / sqrt((double)var + (double)eps));
}

/* The normalised, scaled and shifted value: the same rounding in the
 * forward and in the backward's ReLU decision. */
__device__ static inline float px__bn_pre(float x, float mean, float invstd, float scale,
                                          float shift) {
  return __fadd_rn(__fmul_rn(__fmul_rn(__fsub_rn(x, mean), invstd), scale), shift);
}

/* The per-channel values a thread keeps in registers: the mean, and with
 * the ReLU the forward's invstd, scale and shift (its decision). */
template <int V>
struct px__bn_chan {
  float mu[V], is[V], sc[V], sf[V];
};

template <int V>
__device__ static inline void px__bn_chan_load(px__bn_chan<V> *p, int relu, int64_t ch0,
                                               const float *__restrict__ mean,
                                               const float *__restrict__ var,
                                               const float *__restrict__ scale,
                                               const float *__restrict__ shift, float eps) {
  px__bn_ldc(p->mu, mean, ch0);
  if (!relu) return;
  px__bn_ldc(p->sc, scale, ch0);
  px__bn_ldc(p->sf, shift, ch0);
#pragma unroll
  for (int k = 0; k < V; k++) p->is[k] = px__bn_invstd(var[ch0 + k], eps);
}

/* dz = dy through the fused ReLU: 0 where the forward's output was not
 * positive. */
template <int V>
__device__ static inline float px__bn_dz(const px__bn_chan<V> &p, int relu, int k, float dy,
                                         float x) {
  return (relu && !(px__bn_pre(x, p.mu[k], p.is[k], p.sc[k], p.sf[k]) > 0.0f)) ? 0.0f : dy;
}

/* The block's per-thread sums s1, s2 (V channels each) added over its ty
 * thread rows in order, in f64, into part[blockIdx.y][0|1][c]. */
template <int V>
__device__ static void px__bn_block_sums(double *__restrict__ part, const float (&s1)[V],
                                         const float (&s2)[V], const px__bn_geom_t &g) {
  __shared__ float sh[2 * PX__BN_THREADS * V];
  const int w = g.tx * V;
#pragma unroll
  for (int k = 0; k < V; k++) {
    sh[(0 * g.ty + threadIdx.y) * w + threadIdx.x * V + k] = s1[k];
    sh[(1 * g.ty + threadIdx.y) * w + threadIdx.x * V + k] = s2[k];
  }
  __syncthreads();
  for (int item = threadIdx.y * g.tx + threadIdx.x; item < 2 * w; item += PX__BN_THREADS) {
    int k;
    int64_t ch;
    if (!px__bn_item(&g, blockIdx.x, item, &k, &ch)) continue;
    double a = 0.0;
    for (int y = 0; y < g.ty; y++) a += (double)sh[(k * g.ty + y) * w + item % w];
    part[((int64_t)blockIdx.y * 2 + k) * g.c + ch] = a;
  }
}

/* Partial sums over rows of [rows][c] in one pass: with dy == NULL s1 =
 * sum x, s2 = sum x^2; else (the backward) with dz = dy through the fused
 * ReLU, s1 = sum dz, s2 = sum dz * (x - mean). Each thread adds its rows in
 * f32, then px__bn_block_sums. */
template <typename T, int V>
__global__ static void __launch_bounds__(PX__BN_THREADS)
    px__bn_nhwc_partial(double *__restrict__ part, const T *__restrict__ x,
                        const T *__restrict__ dy, int relu, const float *__restrict__ mean,
                        const float *__restrict__ var, const float *__restrict__ scale,
                        const float *__restrict__ shift, float eps, px__bn_geom_t g) {
  float s1[V], s2[V];
#pragma unroll
  for (int k = 0; k < V; k++) s1[k] = s2[k] = 0.0f;
  const int64_t col = px__bn_col(&g, blockIdx.x, threadIdx.x);
  if (col < g.cols) {
    const int64_t ch0 = col * V, step = px__bn_step(&g) * g.c;
    px__bn_chan<V> p;
    if (dy) px__bn_chan_load(&p, relu, ch0, mean, var, scale, shift, eps);
    const T *xp = x + px__bn_row0(&g, blockIdx.y, threadIdx.y) * g.c + ch0, *end = x + g.rows * g.c;
    const T *dp = dy ? dy + (xp - x) : NULL;
#pragma unroll 2
    for (; xp < end; xp += step) {
      float xv[V];
      px__bn_ld(xp, xv);
      if (!dy) {
#pragma unroll
        for (int k = 0; k < V; k++) {
          s1[k] += xv[k];
          s2[k] += xv[k] * xv[k];
        }
        continue;
      }
      float d[V];
      px__bn_ld(dp, d);
      dp += step;
#pragma unroll
      for (int k = 0; k < V; k++) {
        const float gz = px__bn_dz(p, relu, k, d[k], xv[k]);
        s1[k] += gz;
        s2[k] += gz * (xv[k] - p.mu[k]);
      }
    }
  }
  px__bn_block_sums(part, s1, s2, g);
}

/* Channel ch's two sums: the block rows' partial sums added in a fixed
 * order, in f64. All threads of a (32, PX__BN_LANES) block call it (it
 * synchronises); lane y adds groups y, y + LANES, ... in order, then
 * thread row 0 adds the lanes in order: the result is the same on every
 * run, and a channel's groups are read by 32 threads at once. */
enum { PX__BN_LANES = 16 };

__device__ static void px__bn_nhwc_total(const double *__restrict__ part, int64_t groups,
                                         int64_t c, int64_t ch, double *s1, double *s2) {
  __shared__ double sh[2][PX__BN_LANES][32];
  double a = 0.0, b = 0.0;
  if (ch < c)
#pragma unroll 8 /* 16 loads in flight: the loop is latency-bound */
    for (int64_t g = threadIdx.y; g < groups; g += PX__BN_LANES) {
      a += part[(g * 2 + 0) * c + ch];
      b += part[(g * 2 + 1) * c + ch];
    }
  sh[0][threadIdx.y][threadIdx.x] = a;
  sh[1][threadIdx.y][threadIdx.x] = b;
  __syncthreads();
  a = b = 0.0;
  for (int l = 0; l < PX__BN_LANES; l++) {
    a += sh[0][l][threadIdx.x];
    b += sh[1][l][threadIdx.x];
  }
  *s1 = a;
  *s2 = b;
}

/* Forward statistics from the partial sums, one channel a block column:
 * mean, biased var, invstd, and the running statistics of ops.h. */
__global__ static void __launch_bounds__(32 * PX__BN_LANES)
    px__bn_nhwc_stats(float *__restrict__ mean, float *__restrict__ var,
                      float *__restrict__ invstd, float *__restrict__ rm, float *__restrict__ rv,
                      const double *__restrict__ part, int64_t groups, int64_t c, int64_t count,
                      float eps, float momentum) {
  const int64_t ch = (int64_t)blockIdx.x * 32 + threadIdx.x;
  double s1, s2;
  px__bn_nhwc_total(part, groups, c, ch, &s1, &s2);
  if (threadIdx.y != 0 || ch >= c) return;
  const double mu = s1 / (double)count;
  double v = s2 / (double)count - mu * mu;
  if (v < 0.0) v = 0.0;
  mean[ch] = (float)mu;
  var[ch] = (float)v;
  invstd[ch] = px__bn_invstd((float)v, eps); /* from the rounded var, as the backward */
  const double unbias = (double)count / (double)(count - 1);
  rm[ch] = (1.0f - momentum) * rm[ch] + momentum * (float)mu;
  rv[ch] = (1.0f - momentum) * rv[ch] + momentum * (float)(v * unbias);
}

/* Backward coefficients: dshift = sum dz, dscale = invstd * sum dz (x -
 * mean), and dx = k1 (dz - k2 - (x - mean) k3). */
__global__ static void __launch_bounds__(32 * PX__BN_LANES)
    px__bn_nhwc_bwd_coef(float *__restrict__ dscale, float *__restrict__ dshift,
                         float *__restrict__ k1, float *__restrict__ k2, float *__restrict__ k3,
                         const float *__restrict__ var, const float *__restrict__ scale,
                         const double *__restrict__ part, int64_t groups, int64_t c,
                         int64_t count, float eps) {
  const int64_t ch = (int64_t)blockIdx.x * 32 + threadIdx.x;
  double s1, s2;
  px__bn_nhwc_total(part, groups, c, ch, &s1, &s2);
  if (threadIdx.y != 0 || ch >= c) return;
  const double is = 1.0 / sqrt((double)var[ch] + (double)eps);
  dshift[ch] = (float)s1;
  dscale[ch] = (float)(s2 * is);
  k1[ch] = (float)((double)scale[ch] * is);
  k2[ch] = (float)(s1 / (double)count);
  k3[ch] = (float)(is * is * s2 / (double)count);
}

/* y = (x - mean) invstd scale + shift, ReLU'd when fused; y may be x. Two
 * rows an iteration, both loaded before either is stored, so that a
 * thread has two loads in flight (and y == x stays correct). */
template <typename T, int V>
__global__ static void __launch_bounds__(PX__BN_THREADS)
    px__bn_nhwc_apply(T *y, const T *x, const float *__restrict__ mean,
                      const float *__restrict__ invstd, const float *__restrict__ scale,
                      const float *__restrict__ shift, int relu, px__bn_geom_t g) {
  const int64_t col = px__bn_col(&g, blockIdx.x, threadIdx.x);
  if (col >= g.cols) return;
  const int64_t ch0 = col * V, step = px__bn_step(&g);
  float mu[V], is[V], sc[V], sf[V];
  px__bn_ldc(mu, mean, ch0);
  px__bn_ldc(is, invstd, ch0);
  px__bn_ldc(sc, scale, ch0);
  px__bn_ldc(sf, shift, ch0);
  for (int64_t r = px__bn_row0(&g, blockIdx.y, threadIdx.y); r < g.rows; r += 2 * step) {
    const int two = r + step < g.rows;
    float v[2][V];
    px__bn_ld(x + r * g.c + ch0, v[0]);
    if (two) px__bn_ld(x + (r + step) * g.c + ch0, v[1]);
#pragma unroll
    for (int u = 0; u < 2; u++)
#pragma unroll
      for (int k = 0; k < V; k++) {
        const float o = px__bn_pre(v[u][k], mu[k], is[k], sc[k], sf[k]);
        v[u][k] = relu && !(o > 0.0f) ? 0.0f : o;
      }
    px__bn_st(y + r * g.c + ch0, v[0]);
    if (two) px__bn_st(y + (r + step) * g.c + ch0, v[1]);
  }
}

/* dx = k1 (dz - k2 - (x - mean) k3), dz = dy through the fused ReLU; dx
 * may alias dy. Two rows an iteration, as px__bn_nhwc_apply. */
template <typename T, int V>
__global__ static void __launch_bounds__(PX__BN_THREADS)
    px__bn_nhwc_dx(T *dx, const T *dy, const T *__restrict__ x, int relu,
                   const float *__restrict__ mean, const float *__restrict__ var,
                   const float *__restrict__ scale, const float *__restrict__ shift,
                   const float *__restrict__ k1, const float *__restrict__ k2,
                   const float *__restrict__ k3, float eps, px__bn_geom_t g) {
  const int64_t col = px__bn_col(&g, blockIdx.x, threadIdx.x);
  if (col >= g.cols) return;
  const int64_t ch0 = col * V, step = px__bn_step(&g);
  px__bn_chan<V> p;
  px__bn_chan_load(&p, relu, ch0, mean, var, scale, shift, eps);
  float a[V], b[V], e[V];
  px__bn_ldc(a, k1, ch0);
  px__bn_ldc(b, k2, ch0);
  px__bn_ldc(e, k3, ch0);
  for (int64_t r = px__bn_row0(&g, blockIdx.y, threadIdx.y); r < g.rows; r += 2 * step) {
    const int two = r + step < g.rows;
    float xv[2][V], d[2][V];
    px__bn_ld(x + r * g.c + ch0, xv[0]);
    px__bn_ld(dy + r * g.c + ch0, d[0]);
    if (two) {
      px__bn_ld(x + (r + step) * g.c + ch0, xv[1]);
      px__bn_ld(dy + (r + step) * g.c + ch0, d[1]);
    }
#pragma unroll
    for (int u = 0; u < 2; u++)
#pragma unroll
      for (int k = 0; k < V; k++) {
        const float gz = px__bn_dz(p, relu, k, d[u][k], xv[u][k]);
        d[u][k] = a[k] * (gz - b[k] - (xv[u][k] - p.mu[k]) * e[k]);
      }
    px__bn_st(dx + r * g.c + ch0, d[0]);
    if (two) px__bn_st(dx + (r + step) * g.c + ch0, d[1]);
  }
}

/* ---- channels-last launches ----------------------------------------------------------- */

static px__bn_geom_t px__bn_geom_of(const px__cuda_batchnorm_t *op, int vec, int per_sm) {
  return px__bn_geom(op->count, op->c, vec, op->bf16 ? 2 : 4, (int64_t)op->sms * per_sm);
}

/* Whether 16-byte vector loads and stores fit every base pointer (NULL fits). */
static int px__bn_aligned(const void *a, const void *b, const void *c) {
  return (((uintptr_t)a | (uintptr_t)b | (uintptr_t)c) & 15u) == 0;
}

static dim3 px__bn_grid(const px__bn_geom_t &g) { return dim3((unsigned)g.gx, (unsigned)g.gy); }
static dim3 px__bn_block(const px__bn_geom_t &g) { return dim3((unsigned)g.tx, (unsigned)g.ty); }
static unsigned px__bn_chan_grid(int64_t c) { return (unsigned)((c + 31) / 32); }

/* Training forward, NHWC, V channels a thread: the sums (one read of x),
 * the statistics, the normalisation with the fused ReLU (x read, y
 * written). The forward's invstd goes to op->buf. */
template <typename T, int V>
static px_status_t px__bn_nhwc_fwd(px__cuda_batchnorm_t *op, T *y, const T *x, float *mean,
                                   float *var, const float *scale, const float *shift, float *rm,
                                   float *rv) {
  const cudaStream_t s = op->ops->stream;
  const px__bn_geom_t gs = px__bn_geom_of(op, V, PX__BN_SUM_PER_SM);
  const px__bn_geom_t ge = px__bn_geom_of(op, V, PX__BN_EW_PER_SM);
  px__bn_nhwc_partial<T, V><<<px__bn_grid(gs), px__bn_block(gs), 0, s>>>(
      op->part, x, NULL, 0, NULL, NULL, NULL, NULL, 0.0f, gs);
  PX_CUDA_LAUNCHED("batchnorm sums");
  float *invstd = op->buf;
  px__bn_nhwc_stats<<<px__bn_chan_grid(op->c), dim3(32, PX__BN_LANES), 0, s>>>(
      mean, var, invstd, rm, rv, op->part, gs.gy, op->c, op->count, op->p.eps, op->p.momentum);
  PX_CUDA_LAUNCHED("batchnorm statistics");
  px__bn_nhwc_apply<T, V><<<px__bn_grid(ge), px__bn_block(ge), 0, s>>>(
      y, x, mean, invstd, scale, shift, op->p.fuse_relu, ge);
  PX_CUDA_LAUNCHED("batchnorm normalise");
  return PX_OK;
}

template <typename T>
static px_status_t px__bn_nhwc_forward(px__cuda_batchnorm_t *op, void *y, const void *x,
                                       float *mean, float *var, const float *scale,
                                       const float *shift, float *rm, float *rv) {
  enum { W = 16 / sizeof(T) };
  if (px__bn_vec(op->c, (int)sizeof(T), px__bn_aligned(y, x, NULL)) == W)
    return px__bn_nhwc_fwd<T, W>(op, (T *)y, (const T *)x, mean, var, scale, shift, rm, rv);
  return px__bn_nhwc_fwd<T, 1>(op, (T *)y, (const T *)x, mean, var, scale, shift, rm, rv);
}

/* The training forward's normalisation again (px_batchnorm_recompute):
 * invstd from var by the forward's expression into the forward's slot,
 * then the same apply kernel. The vector width may differ from the
 * forward's (it follows the pointers), which changes no bit: the apply is
 * element by element with the same rounded operations. */
template <typename T>
static px_status_t px__bn_nhwc_recompute(px__cuda_batchnorm_t *op, void *y, const void *x,
                                         const float *mean, const float *var, const float *scale,
                                         const float *shift) {
  enum { W = 16 / sizeof(T) };
  const cudaStream_t s = op->ops->stream;
  float *invstd = op->buf;
  px__bn_invstd_kernel<<<px__cuda_blocks((size_t)op->c), PX__CUDA_THREADS, 0, s>>>(
      invstd, var, op->c, op->p.eps);
  PX_CUDA_LAUNCHED("batchnorm recompute invstd");
  if (px__bn_vec(op->c, (int)sizeof(T), px__bn_aligned(y, x, NULL)) == W) {
    const px__bn_geom_t ge = px__bn_geom_of(op, W, PX__BN_EW_PER_SM);
    px__bn_nhwc_apply<T, W><<<px__bn_grid(ge), px__bn_block(ge), 0, s>>>(
        (T *)y, (const T *)x, mean, invstd, scale, shift, op->p.fuse_relu, ge);
  } else {
    const px__bn_geom_t ge = px__bn_geom_of(op, 1, PX__BN_EW_PER_SM);
    px__bn_nhwc_apply<T, 1><<<px__bn_grid(ge), px__bn_block(ge), 0, s>>>(
        (T *)y, (const T *)x, mean, invstd, scale, shift, op->p.fuse_relu, ge);
  }
  PX_CUDA_LAUNCHED("batchnorm recompute");
  return PX_OK;
}

/* Backward, NHWC, V channels a thread: both sums in one pass (dy and x
 * read once), the coefficients, dx (dy and x read, dx written). k1, k2,
 * k3 go to op->buf + C, 2C, 3C. */
template <typename T, int V>
static px_status_t px__bn_nhwc_bwd(px__cuda_batchnorm_t *op, T *dx, float *dscale, float *dshift,
                                   const T *dy, const T *x, const float *scale,
                                   const float *shift, const float *mean, const float *var) {
  const cudaStream_t s = op->ops->stream;
  const px__bn_geom_t gs = px__bn_geom_of(op, V, PX__BN_SUM_PER_SM);
  const px__bn_geom_t ge = px__bn_geom_of(op, V, PX__BN_EW_PER_SM);
  float *k1 = op->buf + op->c, *k2 = op->buf + 2 * op->c, *k3 = op->buf + 3 * op->c;
  const int relu = op->p.fuse_relu;
  const float eps = op->p.eps;
  px__bn_nhwc_partial<T, V><<<px__bn_grid(gs), px__bn_block(gs), 0, s>>>(
      op->part, x, dy, relu, mean, var, scale, shift, eps, gs);
  PX_CUDA_LAUNCHED("batchnorm backward sums");
  px__bn_nhwc_bwd_coef<<<px__bn_chan_grid(op->c), dim3(32, PX__BN_LANES), 0, s>>>(
      dscale, dshift, k1, k2, k3, var, scale, op->part, gs.gy, op->c, op->count, eps);
  PX_CUDA_LAUNCHED("batchnorm backward coefficients");
  px__bn_nhwc_dx<T, V><<<px__bn_grid(ge), px__bn_block(ge), 0, s>>>(
      dx, dy, x, relu, mean, var, scale, shift, k1, k2, k3, eps, ge);
  PX_CUDA_LAUNCHED("batchnorm backward");
  return PX_OK;
}

template <typename T>
static px_status_t px__bn_nhwc_backward(px__cuda_batchnorm_t *op, void *dx, float *dscale,
                                        float *dshift, const void *dy, const void *x,
                                        const float *scale, const float *shift, const float *mean,
                                        const float *var) {
  enum { W = 16 / sizeof(T) };
  if (px__bn_vec(op->c, (int)sizeof(T), px__bn_aligned(dx, dy, x)) == W)
    return px__bn_nhwc_bwd<T, W>(op, (T *)dx, dscale, dshift, (const T *)dy, (const T *)x, scale,
                                 shift, mean, var);
  return px__bn_nhwc_bwd<T, 1>(op, (T *)dx, dscale, dshift, (const T *)dy, (const T *)x, scale,
                               shift, mean, var);
}

/* ---- op ------------------------------------------------------------------------------ */

extern "C" void px__cuda_batchnorm_destroy(px_batchnorm_t *o) {
  px__cuda_batchnorm_t *op = px__op(o);
  if (!op) return;
  if (op->x_desc) cudnnDestroyTensorDescriptor(op->x_desc);
  if (op->bn_desc) cudnnDestroyTensorDescriptor(op->bn_desc);
  px__cuda_mem_free(op->buf);
  px__cuda_mem_free(op->part);
  px__cuda_op_free(op->ops, op);
}

extern "C" px_status_t px__cuda_batchnorm_create(px_ops_t *o, const px_tensor_t *x_spec,
                                                 const px_batchnorm_params_t *p,
                                                 px_batchnorm_t **out) {
  px__cuda_ops_t *ops = px__cuda_ctx(o);
  PX_REQUIRE(out && p, "px_batchnorm_create: NULL argument");
  *out = NULL;
  PX_CHECK(px__cuda_check_act(ops, x_spec, 4, 4, "px_batchnorm_create"));
  PX_REQUIRE(p->eps > 0.0f && p->momentum >= 0.0f && p->momentum <= 1.0f,
             "px_batchnorm_create: eps %g must be > 0 and momentum %g in [0, 1]", (double)p->eps,
             (double)p->momentum);
  PX_CHECK(px__cuda_enter(ops));
  px_status_t st = PX_OK;
  px__cuda_batchnorm_t *op = (px__cuda_batchnorm_t *)px__cuda_op_new(ops, sizeof *op, "cuda batchnorm");
  if (!op) return PX_ERR_NOMEM;
  op->ops = ops;
  op->p = *p;
  op->c = x_spec->dims[1];
  op->hw = x_spec->dims[2] * x_spec->dims[3];
  op->count = x_spec->dims[0] * op->hw;
  op->nhwc = px__cuda_nhwc(x_spec);
  op->bf16 = x_spec->dtype == PX_DTYPE_BF16;
  op->x_spec = px__ops_spec_copy(x_spec);
  {
    const int64_t cd[1] = {op->c};
    const int64_t numel = (int64_t)px_tensor_numel(x_spec);
    const int64_t wd[1] = {p->fuse_relu ? numel : 1};
    PX_CHECK_GOTO(px__cuda_spec(ops, PX_DTYPE_F32, 1, cd, &op->c_spec), st, fail);
    PX_CHECK_GOTO(px__cuda_spec(ops, PX_DTYPE_U8, 1, wd, &op->ws_spec), st, fail);
    if (!p->fuse_relu || op->nhwc) op->ws_spec.nbytes = 0; /* NHWC recomputes the ReLU */
  }
  PX_CUDNN_GOTO(cudnnCreateTensorDescriptor(&op->x_desc), st, fail);
  PX_CUDNN_GOTO(cudnnCreateTensorDescriptor(&op->bn_desc), st, fail);
  PX_CHECK_GOTO(px__cuda_act_desc(op->x_desc, &op->x_spec), st, fail);
  PX_CUDNN_GOTO(cudnnDeriveBNTensorDescriptor(op->bn_desc, op->x_desc, CUDNN_BATCHNORM_SPATIAL), st,
                fail);
  {
    const size_t bytes = 4 * (size_t)op->c * sizeof(float);
    PX_CHECK_GOTO(px__cuda_mem_alloc(ops->device.index, bytes, "batchnorm statistics",
                                     (void **)&op->buf),
                  st, fail);
    PX_CHECK_GOTO(px__cuda_mem_zero(ops->device.index, op->buf, bytes), st, fail);
  }
  if (op->nhwc) {
    /* part holds the partial sums of either vector width (chosen per call
     * from the pointers' alignment) */
    PX_CUDA_GOTO(cudaDeviceGetAttribute(&op->sms, cudaDevAttrMultiProcessorCount,
                                        ops->device.index),
                 st, fail);
    const int esize = op->bf16 ? 2 : 4, vec = px__bn_vec(op->c, esize, 1);
    op->groups = px__bn_geom_of(op, 1, PX__BN_SUM_PER_SM).gy;
    const int64_t gv = px__bn_geom_of(op, vec, PX__BN_SUM_PER_SM).gy;
    if (gv > op->groups) op->groups = gv;
    PX_CHECK_GOTO(px__cuda_mem_alloc(ops->device.index,
                                     (size_t)op->groups * 2 * (size_t)op->c * sizeof(double),
                                     "batchnorm partial sums", (void **)&op->part),
                  st, fail);
  }
  /* the backward's dL/d(bn output) (or a copy of an aliased dy); NHWC needs none */
  if (!op->nhwc) PX_CHECK_GOTO(px__cuda_reserve_ws(ops, op->x_spec.nbytes), st, fail);
  *out = (px_batchnorm_t *)op;
  return PX_OK;
fail:
  px__cuda_batchnorm_destroy((px_batchnorm_t *)op);
  return st;
}

extern "C" void px__cuda_batchnorm_y_spec(const px_batchnorm_t *op, px_tensor_t *spec) {
  *spec = px__cop(op)->x_spec;
}
extern "C" void px__cuda_batchnorm_c_spec(const px_batchnorm_t *op, px_tensor_t *spec) {
  *spec = px__cop(op)->c_spec;
}
extern "C" void px__cuda_batchnorm_ws_spec(const px_batchnorm_t *op, px_tensor_t *spec) {
  *spec = px__cop(op)->ws_spec;
}

static px_status_t px__check_ws(const px__cuda_batchnorm_t *op, const px_tensor_t *ws,
                                const char *what) {
  if (op->ws_spec.nbytes == 0) return PX_OK;
  return px__ops_check_tensor(ws, &op->ws_spec, what);
}

extern "C" px_status_t px__cuda_batchnorm_forward_train(px_batchnorm_t *o, px_tensor_t *y,
                                                        px_tensor_t *mean, px_tensor_t *var,
                                                        px_tensor_t *ws, const px_tensor_t *x,
                                                        const px_tensor_t *scale,
                                                        const px_tensor_t *shift,
                                                        px_tensor_t *running_mean,
                                                        px_tensor_t *running_var) {
  px__cuda_batchnorm_t *op = px__op(o);
  PX__CHECK(x, &op->x_spec, "batchnorm forward x");
  PX__CHECK(y, &op->x_spec, "batchnorm forward y");
  PX__CHECK(mean, &op->c_spec, "batchnorm forward mean");
  PX__CHECK(var, &op->c_spec, "batchnorm forward var");
  PX_CHECK(px__check_ws(op, ws, "batchnorm forward ws"));
  PX__CHECK(scale, &op->c_spec, "batchnorm forward scale");
  PX__CHECK(shift, &op->c_spec, "batchnorm forward shift");
  PX__CHECK(running_mean, &op->c_spec, "batchnorm forward running_mean");
  PX__CHECK(running_var, &op->c_spec, "batchnorm forward running_var");
  PX_REQUIRE(op->count >= 2, "batchnorm forward: %lld values per channel, training needs 2 or more",
             (long long)op->count);
  px__cuda_ops_t *ops = op->ops;
  float *save_invstd = op->buf, *cudnn_rm = op->buf + 2 * op->c, *cudnn_rv = op->buf + 3 * op->c;
  const float one = 1.0f, zero = 0.0f;
  PX_CHECK(px__cuda_enter(ops));
  op->trained = 1;
  if (op->nhwc) {
    float *mu = (float *)mean->data, *v = (float *)var->data;
    float *rm = (float *)running_mean->data, *rv = (float *)running_var->data;
    const float *sc = (const float *)scale->data, *sf = (const float *)shift->data;
    if (op->bf16)
      return px__bn_nhwc_forward<__nv_bfloat16>(op, y->data, x->data, mu, v, sc, sf, rm, rv);
    return px__bn_nhwc_forward<float>(op, y->data, x->data, mu, v, sc, sf, rm, rv);
  }
  PX_CUDNN(cudnnBatchNormalizationForwardTraining(
      ops->cudnn, CUDNN_BATCHNORM_SPATIAL, &one, &zero, op->x_desc, x->data, op->x_desc, y->data,
      op->bn_desc, scale->data, shift->data, 0.0 /* cuDNN's running stats stay as they are */,
      cudnn_rm, cudnn_rv, (double)op->p.eps, mean->data, save_invstd));
  const float unbias = (float)((double)op->count / (double)(op->count - 1));
  px__bn_stats_kernel<<<px__cuda_blocks((size_t)op->c), PX__CUDA_THREADS, 0, ops->stream>>>(
      (float *)var->data, (float *)running_mean->data, (float *)running_var->data,
      (const float *)mean->data, save_invstd, op->c, op->p.eps, op->p.momentum, unbias);
  PX_CUDA_LAUNCHED("batchnorm statistics");
  if (op->p.fuse_relu) {
    const size_t n = px_tensor_numel(&op->x_spec);
    if (op->bf16)
      px__bn_relu_mask_kernel<<<px__cuda_blocks(n), PX__CUDA_THREADS, 0, ops->stream>>>(
          (__nv_bfloat16 *)y->data, (uint8_t *)ws->data, (int64_t)n);
    else
      px__bn_relu_mask_kernel<<<px__cuda_blocks(n), PX__CUDA_THREADS, 0, ops->stream>>>(
          (float *)y->data, (uint8_t *)ws->data, (int64_t)n);
    PX_CUDA_LAUNCHED("batchnorm relu");
  }
  return PX_OK;
}

extern "C" px_status_t px__cuda_batchnorm_forward_infer(px_batchnorm_t *o, px_tensor_t *y,
                                                        const px_tensor_t *x,
                                                        const px_tensor_t *scale,
                                                        const px_tensor_t *shift,
                                                        const px_tensor_t *running_mean,
                                                        const px_tensor_t *running_var) {
  px__cuda_batchnorm_t *op = px__op(o);
  PX__CHECK(x, &op->x_spec, "batchnorm infer x");
  PX__CHECK(y, &op->x_spec, "batchnorm infer y");
  PX__CHECK(scale, &op->c_spec, "batchnorm infer scale");
  PX__CHECK(shift, &op->c_spec, "batchnorm infer shift");
  PX__CHECK(running_mean, &op->c_spec, "batchnorm infer running_mean");
  PX__CHECK(running_var, &op->c_spec, "batchnorm infer running_var");
  px__cuda_ops_t *ops = op->ops;
  PX_CHECK(px__cuda_enter(ops));
  const size_t n = px_tensor_numel(&op->x_spec);
  if (op->bf16)
    px__bn_infer_kernel<<<px__cuda_blocks(n), PX__CUDA_THREADS, 0, ops->stream>>>(
        (__nv_bfloat16 *)y->data, (const __nv_bfloat16 *)x->data, (const float *)scale->data,
        (const float *)shift->data, (const float *)running_mean->data,
        (const float *)running_var->data, (int64_t)n, op->c, op->hw, op->nhwc, op->p.eps,
        op->p.fuse_relu);
  else
    px__bn_infer_kernel<<<px__cuda_blocks(n), PX__CUDA_THREADS, 0, ops->stream>>>(
        (float *)y->data, (const float *)x->data, (const float *)scale->data,
        (const float *)shift->data, (const float *)running_mean->data,
        (const float *)running_var->data, (int64_t)n, op->c, op->hw, op->nhwc, op->p.eps,
        op->p.fuse_relu);
  PX_CUDA_LAUNCHED("batchnorm inference");
  return PX_OK;
}

extern "C" void px__cuda_batchnorm_set_momentum(px_batchnorm_t *o, float momentum) {
  px__op(o)->p.momentum = momentum;
}

extern "C" int px__cuda_batchnorm_can_recompute(const px_batchnorm_t *o) {
  return px__cop(o)->nhwc;
}

extern "C" px_status_t px__cuda_batchnorm_recompute(px_batchnorm_t *o, px_tensor_t *y,
                                                    const px_tensor_t *x, const px_tensor_t *scale,
                                                    const px_tensor_t *shift,
                                                    const px_tensor_t *mean,
                                                    const px_tensor_t *var) {
  px__cuda_batchnorm_t *op = px__op(o);
  PX__CHECK(x, &op->x_spec, "batchnorm recompute x");
  PX__CHECK(y, &op->x_spec, "batchnorm recompute y");
  PX__CHECK(scale, &op->c_spec, "batchnorm recompute scale");
  PX__CHECK(shift, &op->c_spec, "batchnorm recompute shift");
  PX__CHECK(mean, &op->c_spec, "batchnorm recompute mean");
  PX__CHECK(var, &op->c_spec, "batchnorm recompute var");
  /* NCHW (cuDNN's batch norm) never gets here: px_batchnorm_recompute asks
   * px__cuda_batchnorm_can_recompute first */
  if (!op->trained)
    return px_set_error(PX_ERR_STATE, "batchnorm recompute: no training forward has run");
  PX_CHECK(px__cuda_enter(op->ops));
  const float *mu = (const float *)mean->data, *v = (const float *)var->data;
  const float *sc = (const float *)scale->data, *sf = (const float *)shift->data;
  if (op->bf16) return px__bn_nhwc_recompute<__nv_bfloat16>(op, y->data, x->data, mu, v, sc, sf);
  return px__bn_nhwc_recompute<float>(op, y->data, x->data, mu, v, sc, sf);
}

extern "C" px_status_t px__cuda_batchnorm_backward(px_batchnorm_t *o, px_tensor_t *dx,
                                                   px_tensor_t *dscale, px_tensor_t *dshift,
                                                   const px_tensor_t *dy, const px_tensor_t *x,
                                                   const px_tensor_t *scale,
                                                   const px_tensor_t *shift,
                                                   const px_tensor_t *mean, const px_tensor_t *var,
                                                   const px_tensor_t *ws) {
  px__cuda_batchnorm_t *op = px__op(o);
  PX__CHECK(dy, &op->x_spec, "batchnorm backward dy");
  PX__CHECK(x, &op->x_spec, "batchnorm backward x");
  PX__CHECK(dx, &op->x_spec, "batchnorm backward dx");
  PX__CHECK(scale, &op->c_spec, "batchnorm backward scale");
  PX__CHECK(shift, &op->c_spec, "batchnorm backward shift");
  PX__CHECK(mean, &op->c_spec, "batchnorm backward mean");
  PX__CHECK(var, &op->c_spec, "batchnorm backward var");
  PX__CHECK(dscale, &op->c_spec, "batchnorm backward dscale");
  PX__CHECK(dshift, &op->c_spec, "batchnorm backward dshift");
  PX_CHECK(px__check_ws(op, ws, "batchnorm backward ws"));
  px__cuda_ops_t *ops = op->ops;
  float *bwd_invstd = op->buf + op->c;
  const size_t n = px_tensor_numel(&op->x_spec);
  PX_CHECK(px__cuda_enter(ops));
  if (op->nhwc) {
    float *dsc = (float *)dscale->data, *dsh = (float *)dshift->data;
    const float *sc = (const float *)scale->data, *sf = (const float *)shift->data;
    const float *mu = (const float *)mean->data, *v = (const float *)var->data;
    if (op->bf16)
      return px__bn_nhwc_backward<__nv_bfloat16>(op, dx->data, dsc, dsh, dy->data, x->data, sc, sf,
                                                 mu, v);
    return px__bn_nhwc_backward<float>(op, dx->data, dsc, dsh, dy->data, x->data, sc, sf, mu, v);
  }
  px__bn_invstd_kernel<<<px__cuda_blocks((size_t)op->c), PX__CUDA_THREADS, 0, ops->stream>>>(
      bwd_invstd, (const float *)var->data, op->c, op->p.eps);
  PX_CUDA_LAUNCHED("batchnorm inverse std");
  const void *dz = dy->data;
  if (op->p.fuse_relu) {
    if (op->bf16)
      px__bn_mask_grad_kernel<<<px__cuda_blocks(n), PX__CUDA_THREADS, 0, ops->stream>>>(
          (__nv_bfloat16 *)ops->ws, (const __nv_bfloat16 *)dy->data, (const uint8_t *)ws->data,
          (int64_t)n);
    else
      px__bn_mask_grad_kernel<<<px__cuda_blocks(n), PX__CUDA_THREADS, 0, ops->stream>>>(
          (float *)ops->ws, (const float *)dy->data, (const uint8_t *)ws->data, (int64_t)n);
    PX_CUDA_LAUNCHED("batchnorm relu backward");
    dz = ops->ws;
  } else if (dx->data == dy->data) {
    PX_CUDA(cudaMemcpyAsync(ops->ws, dy->data, op->x_spec.nbytes, cudaMemcpyDeviceToDevice,
                            ops->stream));
    dz = ops->ws;
  }
  const float one = 1.0f, zero = 0.0f;
  PX_CUDNN(cudnnBatchNormalizationBackward(ops->cudnn, CUDNN_BATCHNORM_SPATIAL, &one, &zero, &one,
                                           &zero, op->x_desc, x->data, op->x_desc, dz, op->x_desc,
                                           dx->data, op->bn_desc, scale->data, dscale->data,
                                           dshift->data, (double)op->p.eps, mean->data,
                                           bwd_invstd));
  return PX_OK;
}
