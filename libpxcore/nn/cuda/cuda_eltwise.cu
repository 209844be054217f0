/* Elementwise ops on CUDA: ReLU forward/backward, the residual add (with
 * the ReLU that ends a ResNet block) and its gradient routing, and the
 * reorder op, which on the GPU is a copy (every CUDA tensor is plain). One
 * grid-stride kernel each, queued on the context's stream. */
#include <string.h>

#include "nn/cuda/px_cuda_ops_int.h"

/* ---- kernels ---------------------------------------------------------------------- */

#define PX__FOR_EACH(i, n)                                                        \
  for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < (n);      \
       i += (int64_t)gridDim.x * blockDim.x)

/* y may alias x */
__global__ static void px__relu_kernel(float *y, const float *x, int64_t n) {
  PX__FOR_EACH(i, n) {
    const float v = x[i];
    y[i] = v > 0.0f ? v : 0.0f;
  }
}

/* dx = dy * (y > 0); dx may alias dy */
__global__ static void px__relu_bwd_kernel(float *dx, const float *dy, const float *y, int64_t n) {
  PX__FOR_EACH(i, n) dx[i] = y[i] > 0.0f ? dy[i] : 0.0f;
}

/* y = a + b (relu'd); y may alias a or b */
__global__ static void px__add_kernel(float *y, const float *a, const float *b, int64_t n,
                                      int relu) {
  PX__FOR_EACH(i, n) {
    float v = a[i] + b[i];
    if (relu && !(v > 0.0f)) v = 0.0f;
    y[i] = v;
  }
}

/* ---- ReLU ------------------------------------------------------------------------- */

typedef struct px__cuda_relu {
  px__ops_head_t head; /* first: the dispatcher reads it */
  px__cuda_ops_t *ops;
  px_tensor_t x_spec;  /* any shape; y, dx, dy share it */
} px__cuda_relu_t;

extern "C" void px__cuda_relu_destroy(px_relu_t *o) {
  px__cuda_relu_t *op = (px__cuda_relu_t *)o;
  if (!op) return;
  if (op->ops) px__cuda_op_died(op->ops);
  px_free(op);
}

extern "C" px_status_t px__cuda_relu_create(px_ops_t *o, const px_tensor_t *x_spec,
                                            px_relu_t **out) {
  px__cuda_ops_t *ops = px__cuda_ctx(o);
  PX_REQUIRE(out != NULL, "px_relu_create: out is NULL");
  *out = NULL;
  PX_CHECK(px__cuda_check_input(ops, x_spec, 1, 4, "px_relu_create"));
  px__cuda_relu_t *op = (px__cuda_relu_t *)px_calloc(1, sizeof *op, "cuda relu");
  if (!op) return PX_ERR_NOMEM;
  op->head.be = &px__cuda_backend;
  op->ops = ops;
  px__cuda_op_born(ops);
  op->x_spec = px__cuda_spec_copy(x_spec);
  *out = (px_relu_t *)op;
  return PX_OK;
}

extern "C" void px__cuda_relu_y_spec(const px_relu_t *op, px_tensor_t *spec) {
  *spec = ((const px__cuda_relu_t *)op)->x_spec;
}

extern "C" px_status_t px__cuda_relu_forward(px_relu_t *o, px_tensor_t *y, const px_tensor_t *x) {
  px__cuda_relu_t *op = (px__cuda_relu_t *)o;
  PX__CHECK(x, &op->x_spec, "relu forward x");
  PX__CHECK(y, &op->x_spec, "relu forward y");
  PX_CHECK(px__cuda_enter(op->ops));
  const size_t n = px_tensor_numel(&op->x_spec);
  px__relu_kernel<<<px__cuda_blocks(n), PX__CUDA_THREADS, 0, op->ops->stream>>>(
      (float *)y->data, (const float *)x->data, (int64_t)n);
  PX_CUDA_LAUNCHED("relu forward");
  return PX_OK;
}

extern "C" px_status_t px__cuda_relu_backward(px_relu_t *o, px_tensor_t *dx, const px_tensor_t *dy,
                                              const px_tensor_t *y) {
  px__cuda_relu_t *op = (px__cuda_relu_t *)o;
  PX__CHECK(y, &op->x_spec, "relu backward y");
  PX__CHECK(dy, &op->x_spec, "relu backward dy");
  PX__CHECK(dx, &op->x_spec, "relu backward dx");
  PX_CHECK(px__cuda_enter(op->ops));
  const size_t n = px_tensor_numel(&op->x_spec);
  px__relu_bwd_kernel<<<px__cuda_blocks(n), PX__CUDA_THREADS, 0, op->ops->stream>>>(
      (float *)dx->data, (const float *)dy->data, (const float *)y->data, (int64_t)n);
  PX_CUDA_LAUNCHED("relu backward");
  return PX_OK;
}

/* ---- residual add ------------------------------------------------------------------- */

typedef struct px__cuda_add {
  px__ops_head_t head; /* first: the dispatcher reads it */
  px__cuda_ops_t *ops;
  int relu;
  px_tensor_t x_spec;  /* a, b, y, dy, g */
} px__cuda_add_t;

extern "C" void px__cuda_add_destroy(px_add_t *o) {
  px__cuda_add_t *op = (px__cuda_add_t *)o;
  if (!op) return;
  if (op->ops) px__cuda_op_died(op->ops);
  px_free(op);
}

extern "C" px_status_t px__cuda_add_create(px_ops_t *o, const px_tensor_t *x_spec, int relu,
                                           px_add_t **out) {
  px__cuda_ops_t *ops = px__cuda_ctx(o);
  PX_REQUIRE(out != NULL, "px_add_create: out is NULL");
  *out = NULL;
  PX_CHECK(px__cuda_check_input(ops, x_spec, 1, 4, "px_add_create"));
  px__cuda_add_t *op = (px__cuda_add_t *)px_calloc(1, sizeof *op, "cuda add");
  if (!op) return PX_ERR_NOMEM;
  op->head.be = &px__cuda_backend;
  op->ops = ops;
  px__cuda_op_born(ops);
  op->relu = relu ? 1 : 0;
  op->x_spec = px__cuda_spec_copy(x_spec);
  *out = (px_add_t *)op;
  return PX_OK;
}

extern "C" void px__cuda_add_y_spec(const px_add_t *op, px_tensor_t *spec) {
  *spec = ((const px__cuda_add_t *)op)->x_spec;
}

extern "C" px_status_t px__cuda_add_forward(px_add_t *o, px_tensor_t *y, const px_tensor_t *a,
                                            const px_tensor_t *b) {
  px__cuda_add_t *op = (px__cuda_add_t *)o;
  PX__CHECK(a, &op->x_spec, "add forward a");
  PX__CHECK(b, &op->x_spec, "add forward b");
  PX__CHECK(y, &op->x_spec, "add forward y");
  PX_CHECK(px__cuda_enter(op->ops));
  const size_t n = px_tensor_numel(&op->x_spec);
  px__add_kernel<<<px__cuda_blocks(n), PX__CUDA_THREADS, 0, op->ops->stream>>>(
      (float *)y->data, (const float *)a->data, (const float *)b->data, (int64_t)n, op->relu);
  PX_CUDA_LAUNCHED("add forward");
  return PX_OK;
}

extern "C" px_status_t px__cuda_add_backward(px_add_t *o, px_tensor_t *g, const px_tensor_t *dy,
                                             const px_tensor_t *y) {
  px__cuda_add_t *op = (px__cuda_add_t *)o;
  PX__CHECK(dy, &op->x_spec, "add backward dy");
  PX__CHECK(g, &op->x_spec, "add backward g");
  PX_CHECK(px__cuda_enter(op->ops));
  if (!op->relu) {
    if (g->data != dy->data)
      PX_CUDA(cudaMemcpyAsync(g->data, dy->data, op->x_spec.nbytes, cudaMemcpyDeviceToDevice,
                              op->ops->stream));
    return PX_OK;
  }
  PX__CHECK(y, &op->x_spec, "add backward y");
  const size_t n = px_tensor_numel(&op->x_spec);
  px__relu_bwd_kernel<<<px__cuda_blocks(n), PX__CUDA_THREADS, 0, op->ops->stream>>>(
      (float *)g->data, (const float *)dy->data, (const float *)y->data, (int64_t)n);
  PX_CUDA_LAUNCHED("add backward");
  return PX_OK;
}

/* ---- reorder: a copy between plain tensors ----------------------------------------------- */

typedef struct px__cuda_reorder {
  px__ops_head_t head; /* first: the dispatcher reads it */
  px__cuda_ops_t *ops;
  px_tensor_t src_spec, dst_spec;
} px__cuda_reorder_t;

extern "C" px_status_t px__cuda_reorder_create(px_ops_t *o, const px_tensor_t *dst_spec,
                                               const px_tensor_t *src_spec, px_reorder_t **out) {
  px__cuda_ops_t *ops = px__cuda_ctx(o);
  PX_REQUIRE(out && dst_spec && src_spec, "px_reorder_create: NULL argument");
  *out = NULL;
  PX_REQUIRE(px_device_equal(src_spec->device, ops->device) &&
                 px_device_equal(dst_spec->device, ops->device),
             "px_reorder_create: tensors are on another device than the ops");
  PX_REQUIRE(src_spec->layout == NULL && dst_spec->layout == NULL,
             "px_reorder_create: CUDA tensors must be plain");
  PX_REQUIRE(src_spec->dtype == dst_spec->dtype && src_spec->ndim == dst_spec->ndim,
             "px_reorder_create: src and dst differ in dtype or rank");
  for (int i = 0; i < src_spec->ndim; i++)
    PX_REQUIRE(src_spec->dims[i] == dst_spec->dims[i], "px_reorder_create: dims differ");
  px__cuda_reorder_t *r = (px__cuda_reorder_t *)px_calloc(1, sizeof *r, "cuda reorder");
  if (!r) return PX_ERR_NOMEM;
  r->head.be = &px__cuda_backend;
  r->ops = ops;
  px__cuda_op_born(ops);
  r->src_spec = px__cuda_spec_copy(src_spec);
  r->dst_spec = px__cuda_spec_copy(dst_spec);
  *out = (px_reorder_t *)r;
  return PX_OK;
}

extern "C" void px__cuda_reorder_destroy(px_reorder_t *o) {
  px__cuda_reorder_t *r = (px__cuda_reorder_t *)o;
  if (!r) return;
  if (r->ops) px__cuda_op_died(r->ops);
  px_free(r);
}

extern "C" px_status_t px__cuda_reorder_execute(px_reorder_t *o, px_tensor_t *dst,
                                                const px_tensor_t *src) {
  px__cuda_reorder_t *r = (px__cuda_reorder_t *)o;
  PX__CHECK(src, &r->src_spec, "reorder src");
  PX__CHECK(dst, &r->dst_spec, "reorder dst");
  if (dst->data == src->data) return PX_OK;
  PX_CHECK(px__cuda_enter(r->ops));
  PX_CUDA(cudaMemcpyAsync(dst->data, src->data, px_tensor_plain_bytes(&r->src_spec),
                          cudaMemcpyDeviceToDevice, r->ops->stream));
  return PX_OK;
}
