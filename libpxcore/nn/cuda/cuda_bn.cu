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
 * Per-channel sums run in two deterministic passes: blocks of 32 channels x
 * 8 rows accumulate f32 partial sums over a fixed set of rows each (neighbour
 * threads read neighbour channels: coalesced), write them per block row as
 * f64, and one thread per channel adds the block rows in order, in f64. No
 * atomics, so the result is the same on every run. The statistics, scale,
 * shift and every sum are f32/f64 whatever the activations' type. A fused
 * ReLU keeps no mask: the backward recomputes the pre-activation from x
 * and the statistics with the forward's exact operations (rounded, no
 * contraction), so it takes the same decisions, and nothing as large as
 * the activation is stored beside it. */
#include <math.h>
#include <string.h>

#include "nn/cuda/px_cuda_ops_int.h"

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
  int groups;          /* NHWC: block rows of the reductions */
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

enum { PX__BN_TX = 32, PX__BN_TY = 8 };

/* The normalised, scaled and shifted value: the same rounding in the
 * forward and in the backward's ReLU decision. */
__device__ static inline float px__bn_pre(float x, float mean, float invstd, float scale,
                                          float shift) {
  return __fadd_rn(__fmul_rn(__fmul_rn(__fsub_rn(x, mean), invstd), scale), shift);
}

/* The ReLU's pass-through in the backward: with relu, dz = dy where the
 * forward's output was positive, else 0. */
__device__ static inline float px__bn_dz(float dy, float x, int relu, float mean, float invstd,
                                         float scale, float shift) {
  return (relu && !(px__bn_pre(x, mean, invstd, scale, shift) > 0.0f)) ? 0.0f : dy;
}

/* Partial sums over rows of [rows][c]: with dy == NULL s1 = sum x, s2 =
 * sum x^2; else (the backward) with dz = dy through the fused ReLU (relu,
 * with the forward's invstd, scale, shift), s1 = sum dz, s2 = sum dz *
 * (x - mean). part[blockIdx.y][0|1][c]. */
template <typename T>
__global__ static void px__bn_nhwc_partial(double *__restrict__ part, const T *__restrict__ x,
                                           const T *__restrict__ dy, int relu,
                                           const float *__restrict__ mean,
                                           const float *__restrict__ invstd,
                                           const float *__restrict__ scale,
                                           const float *__restrict__ shift, int64_t rows,
                                           int64_t c) {
  __shared__ float sh1[PX__BN_TY][PX__BN_TX], sh2[PX__BN_TY][PX__BN_TX];
  const int64_t ch = (int64_t)blockIdx.x * PX__BN_TX + threadIdx.x;
  float s1 = 0.0f, s2 = 0.0f;
  if (ch < c) {
    const float mu = dy ? mean[ch] : 0.0f;
    const float is = dy && relu ? invstd[ch] : 0.0f, sc = dy && relu ? scale[ch] : 0.0f;
    const float sf = dy && relu ? shift[ch] : 0.0f;
    for (int64_t r = (int64_t)blockIdx.y * PX__BN_TY + threadIdx.y; r < rows;
         r += (int64_t)gridDim.y * PX__BN_TY) {
      const int64_t i = r * c + ch;
      const float v = px__ld(x + i);
      if (!dy) {
        s1 += v;
        s2 += v * v;
      } else {
        const float g = px__bn_dz(px__ld(dy + i), v, relu, mu, is, sc, sf);
        s1 += g;
        s2 += g * (v - mu);
      }
    }
  }
  sh1[threadIdx.y][threadIdx.x] = s1;
  sh2[threadIdx.y][threadIdx.x] = s2;
  __syncthreads();
  if (threadIdx.y == 0 && ch < c) {
    double a = 0.0, b = 0.0;
    for (int k = 0; k < PX__BN_TY; k++) {
      a += (double)sh1[k][threadIdx.x];
      b += (double)sh2[k][threadIdx.x];
    }
    part[((int64_t)blockIdx.y * 2 + 0) * c + ch] = a;
    part[((int64_t)blockIdx.y * 2 + 1) * c + ch] = b;
  }
}

/* Channel ch's two sums: the block rows' partial sums added in order. */
__device__ static void px__bn_nhwc_total(const double *__restrict__ part, int groups, int64_t c,
                                         int64_t ch, double *s1, double *s2) {
  double a = 0.0, b = 0.0;
  for (int g = 0; g < groups; g++) {
    a += part[((int64_t)g * 2 + 0) * c + ch];
    b += part[((int64_t)g * 2 + 1) * c + ch];
  }
  *s1 = a;
  *s2 = b;
}

/* Forward statistics from the partial sums, one thread per channel: mean,
 * biased var, invstd, and the running statistics of ops.h. */
__global__ static void px__bn_nhwc_stats(float *__restrict__ mean, float *__restrict__ var,
                                         float *__restrict__ invstd, float *__restrict__ rm,
                                         float *__restrict__ rv, const double *__restrict__ part,
                                         int groups, int64_t c, int64_t count, float eps,
                                         float momentum) {
  const int64_t ch = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
  if (ch >= c) return;
  double s1, s2;
  px__bn_nhwc_total(part, groups, c, ch, &s1, &s2);
  const double mu = s1 / (double)count;
  double v = s2 / (double)count - mu * mu;
  if (v < 0.0) v = 0.0;
  mean[ch] = (float)mu;
  var[ch] = (float)v;
  /* from the rounded var, as the backward computes it */
  invstd[ch] = (float)(1.0 / sqrt((double)(float)v + (double)eps));
  const double unbias = (double)count / (double)(count - 1);
  rm[ch] = (1.0f - momentum) * rm[ch] + momentum * (float)mu;
  rv[ch] = (1.0f - momentum) * rv[ch] + momentum * (float)(v * unbias);
}

/* invstd of the backward: from var as the forward's statistics kernel. */
__global__ static void px__bn_nhwc_invstd(float *__restrict__ invstd, const float *__restrict__ var,
                                          int64_t c, float eps) {
  const int64_t ch = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
  if (ch < c) invstd[ch] = (float)(1.0 / sqrt((double)var[ch] + (double)eps));
}

/* Backward coefficients, one thread per channel: dshift = sum dz, dscale =
 * invstd * sum dz (x - mean), and dx = k1 (dz - k2 - (x - mean) k3). */
__global__ static void px__bn_nhwc_bwd_coef(float *__restrict__ dscale, float *__restrict__ dshift,
                                            float *__restrict__ k1, float *__restrict__ k2,
                                            float *__restrict__ k3, const float *__restrict__ var,
                                            const float *__restrict__ scale,
                                            const double *__restrict__ part, int groups,
                                            int64_t c, int64_t count, float eps) {
  const int64_t ch = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
  if (ch >= c) return;
  double s1, s2;
  px__bn_nhwc_total(part, groups, c, ch, &s1, &s2);
  const double is = 1.0 / sqrt((double)var[ch] + (double)eps);
  dshift[ch] = (float)s1;
  dscale[ch] = (float)(s2 * is);
  k1[ch] = (float)((double)scale[ch] * is);
  k2[ch] = (float)(s1 / (double)count);
  k3[ch] = (float)(is * is * s2 / (double)count);
}

/* y = (x - mean) invstd scale + shift, ReLU'd when fused. */
template <typename T>
__global__ static void px__bn_nhwc_apply(T *y, const T *x, const float *__restrict__ mean,
                                         const float *__restrict__ invstd,
                                         const float *__restrict__ scale,
                                         const float *__restrict__ shift, int64_t n, int64_t c,
                                         int relu) {
  for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < n;
       i += (int64_t)gridDim.x * blockDim.x) {
    const int64_t ch = i % c;
    float v = px__bn_pre(px__ld(x + i), mean[ch], invstd[ch], scale[ch], shift[ch]);
    if (relu && !(v > 0.0f)) v = 0.0f;
    px__st(y + i, v);
  }
}

/* dx = k1 (dz - k2 - (x - mean) k3), dz = dy through the fused ReLU; dx
 * may alias dy. */
template <typename T>
__global__ static void px__bn_nhwc_dx(T *dx, const T *dy, const T *__restrict__ x, int relu,
                                      const float *__restrict__ mean,
                                      const float *__restrict__ invstd,
                                      const float *__restrict__ scale,
                                      const float *__restrict__ shift, const float *__restrict__ k1,
                                      const float *__restrict__ k2, const float *__restrict__ k3,
                                      int64_t n, int64_t c) {
  for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < n;
       i += (int64_t)gridDim.x * blockDim.x) {
    const int64_t ch = i % c;
    const float xv = px__ld(x + i);
    const float g = px__bn_dz(px__ld(dy + i), xv, relu, mean[ch], invstd[ch], scale[ch], shift[ch]);
    px__st(dx + i, k1[ch] * (g - k2[ch] - (xv - mean[ch]) * k3[ch]));
  }
}

/* Launches the partial-sum pass on op's geometry (dy NULL: the forward's). */
template <typename T>
static px_status_t px__bn_nhwc_sums(const px__cuda_batchnorm_t *op, const void *x, const void *dy,
                                    const float *mean, const float *invstd, const float *scale,
                                    const float *shift) {
  const dim3 grid((unsigned)((op->c + PX__BN_TX - 1) / PX__BN_TX), (unsigned)op->groups);
  const dim3 block(PX__BN_TX, PX__BN_TY);
  px__bn_nhwc_partial<T><<<grid, block, 0, op->ops->stream>>>(
      op->part, (const T *)x, (const T *)dy, op->p.fuse_relu, mean, invstd, scale, shift,
      op->count, op->c);
  PX_CUDA_LAUNCHED("batchnorm sums");
  return PX_OK;
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
    /* about 4 blocks per SM of a large GPU, at least 8 rows a block row */
    const int64_t cblocks = (op->c + PX__BN_TX - 1) / PX__BN_TX;
    int64_t g = (528 + cblocks - 1) / cblocks, most = (op->count + PX__BN_TY - 1) / PX__BN_TY;
    if (g > most) g = most;
    if (g > 1024) g = 1024;
    op->groups = (int)(g < 1 ? 1 : g);
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
  if (op->nhwc) {
    if (op->bf16)
      PX_CHECK(px__bn_nhwc_sums<__nv_bfloat16>(op, x->data, NULL, NULL, NULL, NULL, NULL));
    else
      PX_CHECK(px__bn_nhwc_sums<float>(op, x->data, NULL, NULL, NULL, NULL, NULL));
    px__bn_nhwc_stats<<<px__cuda_blocks((size_t)op->c), PX__CUDA_THREADS, 0, ops->stream>>>(
        (float *)mean->data, (float *)var->data, save_invstd, (float *)running_mean->data,
        (float *)running_var->data, op->part, op->groups, op->c, op->count, op->p.eps,
        op->p.momentum);
    PX_CUDA_LAUNCHED("batchnorm statistics");
    const size_t n = px_tensor_numel(&op->x_spec);
    if (op->bf16)
      px__bn_nhwc_apply<<<px__cuda_blocks(n), PX__CUDA_THREADS, 0, ops->stream>>>(
          (__nv_bfloat16 *)y->data, (const __nv_bfloat16 *)x->data, (const float *)mean->data,
          save_invstd, (const float *)scale->data, (const float *)shift->data, (int64_t)n, op->c,
          op->p.fuse_relu);
    else
      px__bn_nhwc_apply<<<px__cuda_blocks(n), PX__CUDA_THREADS, 0, ops->stream>>>(
          (float *)y->data, (const float *)x->data, (const float *)mean->data, save_invstd,
          (const float *)scale->data, (const float *)shift->data, (int64_t)n, op->c,
          op->p.fuse_relu);
    PX_CUDA_LAUNCHED("batchnorm normalise");
    return PX_OK;
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
    float *is = op->buf, *k1 = op->buf + op->c, *k2 = op->buf + 2 * op->c, *k3 = op->buf + 3 * op->c;
    const float *mu = (const float *)mean->data, *sc = (const float *)scale->data;
    const float *sf = (const float *)shift->data;
    px__bn_nhwc_invstd<<<px__cuda_blocks((size_t)op->c), PX__CUDA_THREADS, 0, ops->stream>>>(
        is, (const float *)var->data, op->c, op->p.eps);
    PX_CUDA_LAUNCHED("batchnorm inverse std");
    if (op->bf16)
      PX_CHECK(px__bn_nhwc_sums<__nv_bfloat16>(op, x->data, dy->data, mu, is, sc, sf));
    else
      PX_CHECK(px__bn_nhwc_sums<float>(op, x->data, dy->data, mu, is, sc, sf));
    px__bn_nhwc_bwd_coef<<<px__cuda_blocks((size_t)op->c), PX__CUDA_THREADS, 0, ops->stream>>>(
        (float *)dscale->data, (float *)dshift->data, k1, k2, k3, (const float *)var->data,
        (const float *)scale->data, op->part, op->groups, op->c, op->count, op->p.eps);
    PX_CUDA_LAUNCHED("batchnorm backward coefficients");
    const int relu = op->p.fuse_relu;
    if (op->bf16)
      px__bn_nhwc_dx<<<px__cuda_blocks(n), PX__CUDA_THREADS, 0, ops->stream>>>(
          (__nv_bfloat16 *)dx->data, (const __nv_bfloat16 *)dy->data,
          (const __nv_bfloat16 *)x->data, relu, mu, is, sc, sf, k1, k2, k3, (int64_t)n, op->c);
    else
      px__bn_nhwc_dx<<<px__cuda_blocks(n), PX__CUDA_THREADS, 0, ops->stream>>>(
          (float *)dx->data, (const float *)dy->data, (const float *)x->data, relu, mu, is, sc, sf,
          k1, k2, k3, (int64_t)n, op->c);
    PX_CUDA_LAUNCHED("batchnorm backward");
    return PX_OK;
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
