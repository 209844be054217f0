/* Elementwise ops on CUDA: ReLU forward/backward, the residual add (with
 * the ReLU that ends a ResNet block) and its gradient routing, and the
 * reorder op: a copy between tensors of one format, else the conversion
 * between formats (plain f32 NCHW and NHWC f32/bf16: the model's one
 * conversion of its input). One grid-stride kernel each, queued on the
 * context's stream; ReLU and add read and write f32 or bf16 alike (the
 * layout does not matter to them). */
#include <string.h>

#include "nn/cuda/px_cuda_ops_int.h"
#include "prunex/ops_internal.h"

/* ---- kernels ---------------------------------------------------------------------- */

#define PX__FOR_EACH(i, n)                                                        \
  for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < (n);      \
       i += (int64_t)gridDim.x * blockDim.x)

/* y may alias x */
template <typename T>
__global__ static void px__relu_kernel(T *y, const T *x, int64_t n) {
  PX__FOR_EACH(i, n) {
    const float v = px__ld(x + i);
    px__st(y + i, v > 0.0f ? v : 0.0f);
  }
}

/* dx = dy * (y > 0); dx may alias dy */
template <typename T>
__global__ static void px__relu_bwd_kernel(T *dx, const T *dy, const T *y, int64_t n) {
  PX__FOR_EACH(i, n) px__st(dx + i, px__ld(y + i) > 0.0f ? px__ld(dy + i) : 0.0f);
}

/* y = a + b (relu'd); y may alias a or b */
template <typename T>
__global__ static void px__add_kernel(T *y, const T *a, const T *b, int64_t n, int relu) {
  PX__FOR_EACH(i, n) {
    float v = px__ld(a + i) + px__ld(b + i);
    if (relu && !(v > 0.0f)) v = 0.0f;
    px__st(y + i, v);
  }
}

/* dst[logical (n, c, h, w)] = src[same], each side NCHW or NHWC: one thread
 * per destination element. */
template <typename TD, typename TS>
__global__ static void px__convert_kernel(TD *dst, const TS *src, int64_t n, int64_t c, int64_t hw,
                                          int dst_nhwc, int src_nhwc) {
  PX__FOR_EACH(i, n * c * hw) {
    int64_t b, ch, p;
    if (dst_nhwc) {
      ch = i % c;
      p = (i / c) % hw;
      b = i / (c * hw);
    } else {
      p = i % hw;
      ch = (i / hw) % c;
      b = i / (c * hw);
    }
    const int64_t j = src_nhwc ? (b * hw + p) * c + ch : (b * c + ch) * hw + p;
    px__st(dst + i, px__ld(src + j));
  }
}



/* ---- ReLU ------------------------------------------------------------------------- */

/* Launches dx = dy where y > 0 (else 0) over the elements of spec (f32 or
 * bf16) on the context's stream: the backward of ReLU and of add + ReLU. */
static void px__relu_bwd_launch(const px__cuda_ops_t *ops, const px_tensor_t *spec, void *dx,
                                const void *dy, const void *y) {
  const size_t n = px_tensor_numel(spec);
  if (spec->dtype == PX_DTYPE_BF16)
    px__relu_bwd_kernel<<<px__cuda_blocks(n), PX__CUDA_THREADS, 0, ops->stream>>>(
        (__nv_bfloat16 *)dx, (const __nv_bfloat16 *)dy, (const __nv_bfloat16 *)y, (int64_t)n);
  else
    px__relu_bwd_kernel<<<px__cuda_blocks(n), PX__CUDA_THREADS, 0, ops->stream>>>(
        (float *)dx, (const float *)dy, (const float *)y, (int64_t)n);
}

typedef struct px__cuda_relu {
  px__ops_head_t head; /* first: the dispatcher reads it */
  px__cuda_ops_t *ops;
  px_tensor_t x_spec;  /* any shape; y, dx, dy share it */
} px__cuda_relu_t;

extern "C" void px__cuda_relu_destroy(px_relu_t *o) {
  px__cuda_relu_t *op = (px__cuda_relu_t *)o;
  if (op) px__cuda_op_free(op->ops, op);
}

extern "C" px_status_t px__cuda_relu_create(px_ops_t *o, const px_tensor_t *x_spec,
                                            px_relu_t **out) {
  px__cuda_ops_t *ops = px__cuda_ctx(o);
  PX_REQUIRE(out != NULL, "px_relu_create: out is NULL");
  *out = NULL;
  PX_CHECK(px__cuda_check_act(ops, x_spec, 1, 4, "px_relu_create"));
  px__cuda_relu_t *op = (px__cuda_relu_t *)px__cuda_op_new(ops, sizeof *op, "cuda relu");
  if (!op) return PX_ERR_NOMEM;
  op->ops = ops;
  op->x_spec = px__ops_spec_copy(x_spec);
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
  if (op->x_spec.dtype == PX_DTYPE_BF16)
    px__relu_kernel<<<px__cuda_blocks(n), PX__CUDA_THREADS, 0, op->ops->stream>>>(
        (__nv_bfloat16 *)y->data, (const __nv_bfloat16 *)x->data, (int64_t)n);
  else
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
  px__relu_bwd_launch(op->ops, &op->x_spec, dx->data, dy->data, y->data);
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
  if (op) px__cuda_op_free(op->ops, op);
}

extern "C" px_status_t px__cuda_add_create(px_ops_t *o, const px_tensor_t *x_spec, int relu,
                                           px_add_t **out) {
  px__cuda_ops_t *ops = px__cuda_ctx(o);
  PX_REQUIRE(out != NULL, "px_add_create: out is NULL");
  *out = NULL;
  PX_CHECK(px__cuda_check_act(ops, x_spec, 1, 4, "px_add_create"));
  px__cuda_add_t *op = (px__cuda_add_t *)px__cuda_op_new(ops, sizeof *op, "cuda add");
  if (!op) return PX_ERR_NOMEM;
  op->ops = ops;
  op->relu = relu ? 1 : 0;
  op->x_spec = px__ops_spec_copy(x_spec);
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
  if (op->x_spec.dtype == PX_DTYPE_BF16)
    px__add_kernel<<<px__cuda_blocks(n), PX__CUDA_THREADS, 0, op->ops->stream>>>(
        (__nv_bfloat16 *)y->data, (const __nv_bfloat16 *)a->data, (const __nv_bfloat16 *)b->data,
        (int64_t)n, op->relu);
  else
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
  px__relu_bwd_launch(op->ops, &op->x_spec, g->data, dy->data, y->data);
  PX_CUDA_LAUNCHED("add backward");
  return PX_OK;
}

/* ---- reorder: a copy, or a conversion between formats ---------------------------------- */

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
  const int convert = src_spec->layout != dst_spec->layout || src_spec->dtype != dst_spec->dtype;
  if (convert) {
    PX_CHECK(px__cuda_check_act(ops, src_spec, 4, 4, "px_reorder_create (src)"));
    PX_CHECK(px__cuda_check_act(ops, dst_spec, 4, 4, "px_reorder_create (dst)"));
  } else if (src_spec->layout) {
    PX_CHECK(px__cuda_check_act(ops, src_spec, 4, 4, "px_reorder_create"));
  }
  PX_REQUIRE(src_spec->ndim == dst_spec->ndim, "px_reorder_create: src and dst differ in rank");
  for (int i = 0; i < src_spec->ndim; i++)
    PX_REQUIRE(src_spec->dims[i] == dst_spec->dims[i], "px_reorder_create: dims differ");
  px__cuda_reorder_t *r = (px__cuda_reorder_t *)px__cuda_op_new(ops, sizeof *r, "cuda reorder");
  if (!r) return PX_ERR_NOMEM;
  r->ops = ops;
  r->src_spec = px__ops_spec_copy(src_spec);
  r->dst_spec = px__ops_spec_copy(dst_spec);
  *out = (px_reorder_t *)r;
  return PX_OK;
}

extern "C" void px__cuda_reorder_destroy(px_reorder_t *o) {
  px__cuda_reorder_t *r = (px__cuda_reorder_t *)o;
  if (r) px__cuda_op_free(r->ops, r);
}

extern "C" px_status_t px__cuda_reorder_execute(px_reorder_t *o, px_tensor_t *dst,
                                                const px_tensor_t *src) {
  px__cuda_reorder_t *r = (px__cuda_reorder_t *)o;
  PX__CHECK(src, &r->src_spec, "reorder src");
  PX__CHECK(dst, &r->dst_spec, "reorder dst");
  const px_tensor_t *ss = &r->src_spec, *ds = &r->dst_spec;
  PX_CHECK(px__cuda_enter(r->ops));
  if (ss->layout == ds->layout && ss->dtype == ds->dtype) {
    if (dst->data == src->data) return PX_OK;
    PX_CUDA(cudaMemcpyAsync(dst->data, src->data, ss->nbytes, cudaMemcpyDeviceToDevice,
                            r->ops->stream));
    return PX_OK;
  }
  PX_REQUIRE(dst->data != src->data, "reorder: a format conversion cannot run in place");
  const int64_t n = ss->dims[0], c = ss->dims[1], hw = ss->dims[2] * ss->dims[3];
  const int dn = px__cuda_nhwc(ds), sn = px__cuda_nhwc(ss);
  const unsigned g = px__cuda_blocks((size_t)(n * c * hw));
  cudaStream_t st = r->ops->stream;
  const int db = ds->dtype == PX_DTYPE_BF16, sb = ss->dtype == PX_DTYPE_BF16;
  if (db && sb)
    px__convert_kernel<<<g, PX__CUDA_THREADS, 0, st>>>(
        (__nv_bfloat16 *)dst->data, (const __nv_bfloat16 *)src->data, n, c, hw, dn, sn);
  else if (db)
    px__convert_kernel<<<g, PX__CUDA_THREADS, 0, st>>>((__nv_bfloat16 *)dst->data,
                                                       (const float *)src->data, n, c, hw, dn, sn);
  else if (sb)
    px__convert_kernel<<<g, PX__CUDA_THREADS, 0, st>>>(
        (float *)dst->data, (const __nv_bfloat16 *)src->data, n, c, hw, dn, sn);
  else
    px__convert_kernel<<<g, PX__CUDA_THREADS, 0, st>>>((float *)dst->data,
                                                       (const float *)src->data, n, c, hw, dn, sn);
  PX_CUDA_LAUNCHED("reorder");
  return PX_OK;
}
