/* Fully connected layer on cuBLAS. Our tensors are row-major and cuBLAS is
 * column-major: a row-major [r, c] matrix is the column-major [c, r] matrix
 * with leading dimension c, i.e. its transpose. So, with x [N, in],
 * w [out, in], y [N, out] row-major:
 *   y = x w^T        ->  y^T = w x^T:   sgemm(T, N, m=out, n=N, k=in,  A=w lda=in,  B=x ldb=in,   C=y ldc=out)
 *   dx = dy w        ->  dx^T = w^T dy^T: sgemm(N, N, m=in, n=N, k=out, A=w lda=in,  B=dy ldb=out, C=dx ldc=in)
 *   dw = dy^T x      ->  dw^T = x^T dy:   sgemm(N, T, m=in, n=out, k=N, A=x lda=in,  B=dy ldb=out, C=dw ldc=in)
 * The bias is added and reduced by two small kernels. A 4-D input
 * [N, C, H, W] is the same memory as [N, C*H*W]. */
#include <limits.h>
#include <stddef.h>
#include <string.h>

#include "nn/cuda/px_cuda_ops_int.h"
#include "prunex/ops_internal.h"

typedef struct px__cuda_fc {
  px__ops_head_t head; /* first, the contract second: the dispatcher reads both */
  px__wlayer_t wl;    /* x [N, C] or [N, C, H, W], y [N, out], w [out, in], b [out] */
  px__cuda_ops_t *ops;
  px_fc_params_t p;
  int tf32;
  int n, in, out;
} px__cuda_fc_t;
static_assert(offsetof(px__cuda_fc_t, wl) == offsetof(px__wlayer_op_t, wl),
              "the dispatcher reads the contract at px__wlayer_op_t's offset");

/* y[r, o] += b[o] */
__global__ static void px__fc_bias_kernel(float *__restrict__ y, const float *__restrict__ b,
                                          int64_t total, int out) {
  for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < total;
       i += (int64_t)gridDim.x * blockDim.x)
    y[i] += b[i % out];
}

/* db[o] = sum_r dy[r, o], one thread per output feature */
__global__ static void px__fc_bias_grad_kernel(float *__restrict__ db, const float *__restrict__ dy,
                                               int n, int out) {
  const int o = blockIdx.x * blockDim.x + threadIdx.x;
  if (o >= out) return;
  float s = 0.0f;
  for (int r = 0; r < n; r++) s += dy[(int64_t)r * out + o];
  db[o] = s;
}

extern "C" void px__cuda_fc_destroy(px_fc_t *o) {
  px__cuda_fc_t *op = (px__cuda_fc_t *)o;
  if (op) px__cuda_op_free(op->ops, op);
}

extern "C" px_status_t px__cuda_fc_create(px_ops_t *o, const px_tensor_t *x_spec,
                                          const px_fc_params_t *p, px_fc_t **out) {
  px__cuda_ops_t *ops = px__cuda_ctx(o);
  PX_REQUIRE(out && p, "px_fc_create: NULL argument");
  *out = NULL;
  PX_CHECK(px__cuda_check_input(ops, x_spec, 2, 4, "px_fc_create"));
  PX_REQUIRE(x_spec->ndim != 3, "px_fc_create: input must be [N, C] or [N, C, H, W]");
  PX_REQUIRE(p->out_features > 0, "px_fc_create: out_features %d", p->out_features);
  int64_t in = 1;
  for (int i = 1; i < x_spec->ndim; i++) in *= x_spec->dims[i];
  PX_REQUIRE(x_spec->dims[0] <= INT_MAX && in <= INT_MAX, "px_fc_create: input too large for cuBLAS");
  px_status_t st = PX_OK;
  px__cuda_fc_t *op = (px__cuda_fc_t *)px__cuda_op_new(ops, sizeof *op, "cuda fc");
  if (!op) return PX_ERR_NOMEM;
  op->ops = ops;
  op->p = *p;
  op->tf32 = ops->tf32;
  op->n = (int)x_spec->dims[0];
  op->in = (int)in;
  op->out = p->out_features;
  px__wlayer_init(&op->wl, "fc", "layer", p->bias, x_spec);
  {
    const int64_t yd[2] = {op->n, op->out}, wd[2] = {op->out, in}, bd[1] = {op->out};
    PX_CHECK_GOTO(px__cuda_spec(ops, PX_DTYPE_F32, 2, yd, &op->wl.y_spec), st, fail);
    PX_CHECK_GOTO(px__cuda_spec(ops, PX_DTYPE_F32, 2, wd, &op->wl.w_spec), st, fail);
    PX_CHECK_GOTO(px__cuda_spec(ops, PX_DTYPE_F32, 1, bd, &op->wl.b_spec), st, fail);
  }
  *out = (px_fc_t *)op;
  return PX_OK;
fail:
  px__cuda_fc_destroy((px_fc_t *)op);
  return st;
}

/* c[m x n] = op_a(a) op_b(b) (column-major f32, k the inner dimension) on
 * the context's (shared) cuBLAS handle, in the op's math mode: the one
 * product of each of forward, backward-data and backward-weights. */
static px_status_t px__fc_gemm(px__cuda_fc_t *op, cublasOperation_t ta, cublasOperation_t tb, int m,
                               int n, int k, const void *a, int lda, const void *b, int ldb,
                               void *c, int ldc) {
  PX_CHECK(px__cuda_enter(op->ops));
  PX_CUBLAS(op->ops->blas->set_math_mode(op->ops->cublas,
                              op->tf32 ? CUBLAS_TF32_TENSOR_OP_MATH : CUBLAS_DEFAULT_MATH));
  const float one = 1.0f, zero = 0.0f;
  PX_CUBLAS(op->ops->blas->sgemm(op->ops->cublas, ta, tb, m, n, k, &one, (const float *)a, lda,
                                 (const float *)b, ldb, &zero, (float *)c, ldc));
  return PX_OK;
}

extern "C" px_status_t px__cuda_fc_forward(px_fc_t *o, px_tensor_t *y, const px_tensor_t *x,
                                           const px_tensor_t *w, const px_tensor_t *b) {
  px__cuda_fc_t *op = (px__cuda_fc_t *)o;
  PX_CHECK(px__wlayer_check_forward(&op->wl, y, x, w, b));
  PX_CHECK(px__fc_gemm(op, CUBLAS_OP_T, CUBLAS_OP_N, op->out, op->n, op->in, w->data, op->in,
                       x->data, op->in, y->data, op->out));
  if (b) {
    const size_t total = (size_t)op->n * op->out;
    px__fc_bias_kernel<<<px__cuda_blocks(total), PX__CUDA_THREADS, 0, op->ops->stream>>>(
        (float *)y->data, (const float *)b->data, (int64_t)total, op->out);
    PX_CUDA_LAUNCHED("fc bias");
  }
  return PX_OK;
}

extern "C" px_status_t px__cuda_fc_backward_data(px_fc_t *o, px_tensor_t *dx, const px_tensor_t *dy,
                                                 const px_tensor_t *w) {
  px__cuda_fc_t *op = (px__cuda_fc_t *)o;
  PX_CHECK(px__wlayer_check_backward_data(&op->wl, dx, dy, w));
  PX_CHECK(px__fc_gemm(op, CUBLAS_OP_N, CUBLAS_OP_N, op->in, op->n, op->out, w->data, op->in,
                       dy->data, op->out, dx->data, op->in));
  return PX_OK;
}

extern "C" px_status_t px__cuda_fc_backward_weights(px_fc_t *o, px_tensor_t *dw, px_tensor_t *db,
                                                    const px_tensor_t *x, const px_tensor_t *dy) {
  px__cuda_fc_t *op = (px__cuda_fc_t *)o;
  PX_CHECK(px__wlayer_check_backward_weights(&op->wl, dw, db, x, dy));
  PX_CHECK(px__fc_gemm(op, CUBLAS_OP_N, CUBLAS_OP_T, op->in, op->out, op->n, x->data, op->in,
                       dy->data, op->out, dw->data, op->in));
  if (db) {
    px__fc_bias_grad_kernel<<<px__cuda_blocks((size_t)op->out), PX__CUDA_THREADS, 0,
                              op->ops->stream>>>((float *)db->data, (const float *)dy->data, op->n,
                                                 op->out);
    PX_CUDA_LAUNCHED("fc bias gradient");
  }
  return PX_OK;
}
