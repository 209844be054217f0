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
 * ReLU when fused). */
#include <math.h>
#include <string.h>

#include "nn/cuda/px_cuda_ops_int.h"

typedef struct px__cuda_batchnorm {
  px__ops_head_t head; /* first: the dispatcher reads it */
  px__cuda_ops_t *ops;
  px_batchnorm_params_t p;
  int64_t count;       /* N*H*W: values per channel */
  int64_t c, hw;       /* channels, H*W */
  px_tensor_t x_spec;  /* [N, C, H, W]; y, dx, dy share it */
  px_tensor_t c_spec;  /* [C] */
  px_tensor_t ws_spec; /* u8 [N*C*H*W] ReLU mask with fuse_relu, else nbytes 0 */
  cudnnTensorDescriptor_t x_desc, bn_desc;
  float *buf;          /* device [4][C]: save_invstd, bwd_invstd, cudnn_rm, cudnn_rv */
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
__global__ static void px__bn_relu_mask_kernel(float *__restrict__ y, uint8_t *__restrict__ mask,
                                               int64_t n) {
  for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < n;
       i += (int64_t)gridDim.x * blockDim.x) {
    const float v = y[i];
    const int pos = v > 0.0f;
    y[i] = pos ? v : 0.0f;
    mask[i] = (uint8_t)pos;
  }
}

/* dz = mask ? dy : 0 (dz may alias dy). */
__global__ static void px__bn_mask_grad_kernel(float *dz, const float *dy,
                                               const uint8_t *__restrict__ mask, int64_t n) {
  for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < n;
       i += (int64_t)gridDim.x * blockDim.x)
    dz[i] = mask[i] ? dy[i] : 0.0f;
}

__global__ static void px__bn_infer_kernel(float *y, const float *x, const float *__restrict__ scale,
                                           const float *__restrict__ shift,
                                           const float *__restrict__ rm,
                                           const float *__restrict__ rv, int64_t n, int64_t c,
                                           int64_t hw, float eps, int relu) {
  for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < n;
       i += (int64_t)gridDim.x * blockDim.x) {
    const int64_t ch = (i / hw) % c;
    const float inv = 1.0f / sqrtf(rv[ch] + eps);
    float v = scale[ch] * (x[i] - rm[ch]) * inv + shift[ch];
    if (relu && !(v > 0.0f)) v = 0.0f;
    y[i] = v;
  }
}

/* ---- op ------------------------------------------------------------------------------ */

extern "C" void px__cuda_batchnorm_destroy(px_batchnorm_t *o) {
  px__cuda_batchnorm_t *op = px__op(o);
  if (!op) return;
  if (op->x_desc) cudnnDestroyTensorDescriptor(op->x_desc);
  if (op->bn_desc) cudnnDestroyTensorDescriptor(op->bn_desc);
  px__cuda_mem_free(op->buf);
  if (op->ops) px__cuda_op_died(op->ops);
  px_free(op);
}

extern "C" px_status_t px__cuda_batchnorm_create(px_ops_t *o, const px_tensor_t *x_spec,
                                                 const px_batchnorm_params_t *p,
                                                 px_batchnorm_t **out) {
  px__cuda_ops_t *ops = px__cuda_ctx(o);
  PX_REQUIRE(out && p, "px_batchnorm_create: NULL argument");
  *out = NULL;
  PX_CHECK(px__cuda_check_input(ops, x_spec, 4, 4, "px_batchnorm_create"));
  PX_REQUIRE(p->eps > 0.0f && p->momentum >= 0.0f && p->momentum <= 1.0f,
             "px_batchnorm_create: eps %g must be > 0 and momentum %g in [0, 1]", (double)p->eps,
             (double)p->momentum);
  PX_CHECK(px__cuda_enter(ops));
  px_status_t st = PX_OK;
  px__cuda_batchnorm_t *op = (px__cuda_batchnorm_t *)px_calloc(1, sizeof *op, "cuda batchnorm");
  if (!op) return PX_ERR_NOMEM;
  op->head.be = &px__cuda_backend;
  op->ops = ops;
  px__cuda_op_born(ops);
  op->p = *p;
  op->c = x_spec->dims[1];
  op->hw = x_spec->dims[2] * x_spec->dims[3];
  op->count = x_spec->dims[0] * op->hw;
  op->x_spec = px__cuda_spec_copy(x_spec);
  {
    const int64_t cd[1] = {op->c};
    const int64_t numel = (int64_t)px_tensor_numel(x_spec);
    const int64_t wd[1] = {p->fuse_relu ? numel : 1};
    PX_CHECK_GOTO(px__cuda_spec(ops, PX_DTYPE_F32, 1, cd, &op->c_spec), st, fail);
    PX_CHECK_GOTO(px__cuda_spec(ops, PX_DTYPE_U8, 1, wd, &op->ws_spec), st, fail);
    if (!p->fuse_relu) op->ws_spec.nbytes = 0;
  }
  PX_CUDNN_GOTO(cudnnCreateTensorDescriptor(&op->x_desc), st, fail);
  PX_CUDNN_GOTO(cudnnCreateTensorDescriptor(&op->bn_desc), st, fail);
  PX_CHECK_GOTO(px__cuda_tensor_desc(op->x_desc, x_spec->dims[0], op->c, x_spec->dims[2],
                                     x_spec->dims[3]),
                st, fail);
  PX_CUDNN_GOTO(cudnnDeriveBNTensorDescriptor(op->bn_desc, op->x_desc, CUDNN_BATCHNORM_SPATIAL), st,
                fail);
  {
    const size_t bytes = 4 * (size_t)op->c * sizeof(float);
    PX_CHECK_GOTO(px__cuda_mem_alloc(ops->device.index, bytes, "batchnorm statistics",
                                     (void **)&op->buf),
                  st, fail);
    PX_CHECK_GOTO(px__cuda_mem_zero(ops->device.index, op->buf, bytes), st, fail);
  }
  /* the backward's dL/d(bn output) (or a copy of an aliased dy) */
  PX_CHECK_GOTO(px__cuda_reserve_ws(ops, op->x_spec.nbytes), st, fail);
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
  px__bn_infer_kernel<<<px__cuda_blocks(n), PX__CUDA_THREADS, 0, ops->stream>>>(
      (float *)y->data, (const float *)x->data, (const float *)scale->data,
      (const float *)shift->data, (const float *)running_mean->data,
      (const float *)running_var->data, (int64_t)n, op->c, op->hw, op->p.eps, op->p.fuse_relu);
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
  px__bn_invstd_kernel<<<px__cuda_blocks((size_t)op->c), PX__CUDA_THREADS, 0, ops->stream>>>(
      bwd_invstd, (const float *)var->data, op->c, op->p.eps);
  PX_CUDA_LAUNCHED("batchnorm inverse std");
  const void *dz = dy->data;
  if (op->p.fuse_relu) {
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
