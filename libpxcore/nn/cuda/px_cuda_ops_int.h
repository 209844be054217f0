/* Internals of the CUDA op backend shared by the .cu files of nn/cuda/: the
 * context struct, status conversion at the CUDA / cuDNN / cuBLAS boundary,
 * and small helpers. C++ (nvcc) only; C sees nn/cuda/px_cuda_nn.h.
 *
 * Model of execution: one px_ops_t on CUDA holds one stream, one cuDNN and
 * one cuBLAS handle bound to that stream, and one device workspace shared by
 * every op of the context (grown while ops are created, to the largest any
 * of them asked for; ops run one at a time on the stream, so sharing is
 * safe). Calls check their arguments on the host, queue their kernels and
 * return: nothing allocates or synchronises in a forward or backward call.
 * The stream is a blocking stream (cudaStreamCreate), so the blocking copies
 * of tensor.c on the legacy default stream are ordered with it.
 *
 * Formats. Weights, gradients, statistics, FC inputs and logits are plain
 * NCHW (or [N, K]) f32 device memory (layout NULL). Activations of the
 * convolutional trunk may instead be channels-last: layout px__cuda_nhwc
 * (one interned layout object per shape and dtype, owned by the context;
 * the memory order is N, H, W, C) in f32 or bf16, what px_ops_act_format
 * hands the model. Convolution (grouped too), batch norm, ReLU, add,
 * windowed and global average pooling (the global one gives plain f32) and
 * the graph operators of imported networks (cuda_graph.cu) take all three
 * formats; the other ops take plain f32 only. */
#ifndef PX_CUDA_OPS_INT_H
#define PX_CUDA_OPS_INT_H

#include <cuda_bf16.h>
#include <cuda_runtime.h>
#include <cudnn.h>

#include "nn/cuda/px_cuda_blas.h"
#include "nn/cuda/px_cuda_nn.h"
#include "px_check.h"
#include "px_cuda_int.h"
#include "tensor/px_tensor_cuda.h"
#include "tensor/px_tensor_int.h"
#include "prunex/ops_internal.h"

/* Device result of px_softmax_ce, copied back to pinned host memory. */
typedef struct {
  double loss_sum;
  long long correct;
  int bad_label; /* index of the first sample with a label out of range, or -1 */
  int pad;
} px__cuda_loss_result_t;

typedef struct px__cuda_ops {
  px__ops_head_t head; /* first: the dispatcher reads it */
  px_device_t device;
  int nthreads;        /* as given; the GPU ignores it */
  int tf32;            /* TF32 allowed for ops created from now on */
  cudaStream_t stream;
  cudnnHandle_t cudnn;
  cublasHandle_t cublas;
  const px__cublas_api_t *blas; /* cuBLAS entry points (loaded with the first context) */
  void *ws;            /* shared device workspace */
  size_t ws_bytes;
  size_t ws_algo_limit; /* largest workspace a convolution algorithm may ask for */
  void *staging;       /* pinned host buffer of px__ops_upload */
  size_t staging_bytes;
  cudaEvent_t staging_done; /* recorded after the copies out of staging */
  int staging_pending;
  int benchmark;        /* pick convolution algorithms by timing them (cudnnFind) */
  int deterministic;    /* only deterministic algorithms, by heuristics (PX_CUDNN_DETERMINISTIC) */
  int find_runs;        /* timed searches per shape, least time kept (PX_CUDNN_FIND_RUNS, 2) */
  int nchw;             /* PX_CUDA_LAYOUT=nchw: fp32 activations stay plain NCHW */
  int graph_api;        /* PX_CUDNN_API=graph: convolutions on cuDNN's graph API */
  struct px__cuda_layout *layouts; /* interned NHWC layouts (cuda_ops.cu) */
  struct px__conv_algo_cache *algos; /* timed algorithms by convolution shape (cuda_conv.cu) */
  struct px__conv_plan *plans; /* graph-API plans by shape and direction (cuda_conv_graph.cu) */
  void *wt;             /* shared device buffer of the convolutions' KRSC weight copies */
  size_t wt_bytes;
  px__cuda_loss_result_t *dres; /* device */
  px__cuda_loss_result_t *hres; /* pinned host */
  int64_t live_ops;
  char desc[160];
} px__cuda_ops_t;

static inline px__cuda_ops_t *px__cuda_ctx(px_ops_t *ops) { return (px__cuda_ops_t *)ops; }
static inline const px__cuda_ops_t *px__cuda_cctx(const px_ops_t *ops) {
  return (const px__cuda_ops_t *)ops;
}

/* ---- status conversion (cuda_ops.cu) ------------------------------------------- */

px_status_t px__cuda_status(cudaError_t e, const char *call, const char *file, int line);
px_status_t px__cudnn_status(cudnnStatus_t s, const char *call, const char *file, int line);
px_status_t px__cublas_status(cublasStatus_t s, const char *call, const char *file, int line);

#define PX_CUDA(call)                                                                      \
  do {                                                                                     \
    cudaError_t px__e = (call);                                                            \
    if (px__e != cudaSuccess) return px__cuda_status(px__e, #call, __FILE__, __LINE__);     \
  } while (0)
#define PX_CUDNN(call)                                                                     \
  do {                                                                                     \
    cudnnStatus_t px__s = (call);                                                          \
    if (px__s != CUDNN_STATUS_SUCCESS) return px__cudnn_status(px__s, #call, __FILE__, __LINE__); \
  } while (0)
#define PX_CUBLAS(call)                                                                    \
  do {                                                                                     \
    cublasStatus_t px__s = (call);                                                         \
    if (px__s != CUBLAS_STATUS_SUCCESS)                                                    \
      return px__cublas_status(px__s, #call, __FILE__, __LINE__);                          \
  } while (0)
#define PX_CUDA_GOTO(call, st, label) \
  PX_CHECK_GOTO(px__cuda_status((call), #call, __FILE__, __LINE__), st, label)
#define PX_CUDNN_GOTO(call, st, label) \
  PX_CHECK_GOTO(px__cudnn_status((call), #call, __FILE__, __LINE__), st, label)
#define PX_CUBLAS_GOTO(call, st, label) \
  PX_CHECK_GOTO(px__cublas_status((call), #call, __FILE__, __LINE__), st, label)

/* After a kernel launch: reports a bad launch configuration (asynchronous
 * faults surface at the next synchronising call). */
#define PX_CUDA_LAUNCHED(what) PX_CUDA(cudaGetLastError())

/* ---- helpers (cuda_ops.cu) ---------------------------------------------------- */

/* ---- activation formats (cuda_ops.cu) ----------------------------------------------- */

/* An NHWC layout object: base first (tensor.c reads it). */
typedef struct px__cuda_layout {
  struct px_layout base;
  struct px__cuda_layout *next;
} px__cuda_layout_t;

/* 1 if spec is channels-last (any CUDA layout is NHWC). */
static inline int px__cuda_nhwc(const px_tensor_t *spec) { return spec->layout != NULL; }

/* The interned NHWC layout of a 4-D shape in dtype dt (f32 or bf16). */
px_status_t px__cuda_nhwc_layout(px__cuda_ops_t *ops, px_dtype_t dt, const int64_t *dims,
                                 const px_layout_t **out);

/* A spec of dims in the format of `like` (layout and dtype; plain f32 when
 * like is plain f32): for an op's output of another shape than its input. */
px_status_t px__cuda_spec_like(px__cuda_ops_t *ops, const px_tensor_t *like, const int64_t *dims,
                               px_tensor_t *spec);

/* Validates the input spec of an op that takes every activation format:
 * this context's device, 4-D (or [min, max] dims for plain f32), plain f32
 * or NHWC f32/bf16. */
px_status_t px__cuda_check_act(const px__cuda_ops_t *ops, const px_tensor_t *x, int min_ndim,
                               int max_ndim, const char *what);

/* cuDNN data type and format of an activation spec. */
static inline cudnnDataType_t px__cudnn_dtype(const px_tensor_t *spec) {
  return spec->dtype == PX_DTYPE_BF16 ? CUDNN_DATA_BFLOAT16 : CUDNN_DATA_FLOAT;
}

/* Tensor descriptor of a 4-D activation spec in its format. */
px_status_t px__cuda_act_desc(cudnnTensorDescriptor_t d, const px_tensor_t *spec);

/* Element access for the kernels that take f32 and bf16 alike. */
__device__ static inline float px__ld(const float *p) { return *p; }
__device__ static inline float px__ld(const __nv_bfloat16 *p) { return __bfloat162float(*p); }
__device__ static inline void px__st(float *p, float v) { *p = v; }
__device__ static inline void px__st(__nv_bfloat16 *p, float v) { *p = __float2bfloat16_rn(v); }

/* Frees the context's timed-algorithm cache (cuda_conv.cu). */
void px__cuda_conv_algo_cache_free(px__cuda_ops_t *ops);

/* ---- convolutions on cuDNN's graph (backend) API (cuda_conv_graph.cu) --------------- */

enum { PX__CONV_FWD = 0, PX__CONV_BWD_DATA = 1, PX__CONV_BWD_FILTER = 2, PX__CONV_DIRS = 3 };

/* What a graph-API plan is built for: the tensors as cuDNN sees them
 * (logical dims; the memory order is NCHW, or NHWC / KRSC when nhwc), in
 * bf16 or f32, with f32 accumulation. w[1] is C_in / groups: cuDNN reads
 * the group count from x[1] / w[1]. */
typedef struct px__conv_shape {
  int64_t x[4];      /* N, C_in, H, W */
  int64_t w[4];      /* C_out, C_in / groups, KH, KW */
  int64_t y[4];      /* N, C_out, OH, OW */
  int64_t stride[2], pad[2];
  int nhwc, bf16, tf32;
} px__conv_shape_t;

/* One direction of one convolution: the context's plan (borrowed: the
 * context owns it) and the variant pack of the pointers it last ran with
 * (owned; rebuilt only when they change, so steady-state steps, whose
 * buffers stay put, allocate nothing). */
typedef struct px__conv_graph_call {
  const struct px__conv_plan *plan;
  size_t ws;                      /* workspace bytes the plan needs */
  cudnnBackendDescriptor_t pack;  /* NULL until the first run */
  void *ptr[4];                   /* x (or dx), w (or dw), y (or dy), workspace of pack */
} px__conv_graph_call_t;

/* Plans the three directions of shape s (the context's plans for a shape
 * planned before, else built, chosen as the context says and remembered)
 * into calls, which must be zeroed. Fails with PX_ERR_BACKEND naming the
 * direction when no engine of cuDNN's heuristics is usable, PX_ERR_NOMEM.
 * On failure calls may hold plans (borrowed): release them as usual. */
px_status_t px__cuda_conv_graph_plan(px__cuda_ops_t *ops, const px__conv_shape_t *s,
                                     px__conv_graph_call_t *calls);

/* Queues one direction on the context's stream: x, w, y are the device
 * pointers of the direction's x (dx), w (dw) and y (dy), the workspace the
 * context's shared one (grown to calls' ws at creation). PX_ERR_INVALID for
 * a pointer without the alignment the plan was built for (x, y and NHWC
 * weights 16 bytes, NCHW weights 4), PX_ERR_BACKEND when cuDNN fails. */
px_status_t px__cuda_conv_graph_run(px__cuda_ops_t *ops, px__conv_graph_call_t *c, const void *x,
                                    const void *w, const void *y);

/* Frees the variant packs of calls[0..PX__CONV_DIRS) (the plans stay the context's). */
void px__cuda_conv_graph_release(px__conv_graph_call_t *calls);

/* Frees the context's graph-API plans (cuda_conv_graph.cu). */
void px__cuda_conv_plan_cache_free(px__cuda_ops_t *ops);

/* Grows the shared weight-copy buffer to at least bytes (op creation only). */
px_status_t px__cuda_reserve_wt(px__cuda_ops_t *ops, size_t bytes);

/* Makes the context's device current for the calling thread. */
px_status_t px__cuda_enter(px__cuda_ops_t *ops);

/* Grows the shared workspace to at least bytes (op creation only: waits for
 * the stream before replacing the block). */
px_status_t px__cuda_reserve_ws(px__cuda_ops_t *ops, size_t bytes);

/* Validates an input spec for op creation: this context's device, f32,
 * plain, ndim in [min, max]. */
px_status_t px__cuda_check_input(const px__cuda_ops_t *ops, const px_tensor_t *x, int min_ndim,
                                 int max_ndim, const char *what);

/* A plain spec of dims on the context's device. */
px_status_t px__cuda_spec(const px__cuda_ops_t *ops, px_dtype_t dt, int ndim, const int64_t *dims,
                          px_tensor_t *spec);

/* NCHW f32 tensor descriptor of a 4-D shape (PX_ERR_INVALID when a dim
 * does not fit an int). */
px_status_t px__cuda_tensor_desc(cudnnTensorDescriptor_t d, int64_t n, int64_t c, int64_t h,
                                 int64_t w);

void px__cuda_op_born(px__cuda_ops_t *ops);
/* A zeroed op object of size bytes whose first member is a px__ops_head_t,
 * bound to the CUDA backend and registered with ops (px__cuda_op_born); the
 * caller sets its ops pointer and frees it with px__cuda_op_free. NULL when
 * out of memory (nothing registered). */
void *px__cuda_op_new(px__cuda_ops_t *ops, size_t size, const char *name);
/* The last step of every op's destroy: unregisters op from ops (NULL: the
 * op was never bound to it) and frees it. */
void px__cuda_op_free(px__cuda_ops_t *ops, void *op);

/* Launch geometry for n elements, one per thread, grid-stride beyond. */
enum { PX__CUDA_THREADS = 256 };
static inline unsigned px__cuda_blocks(size_t n) {
  size_t b = (n + PX__CUDA_THREADS - 1) / PX__CUDA_THREADS;
  if (b < 1) b = 1;
  if (b > 65535u * 16u) b = 65535u * 16u;
  return (unsigned)b;
}

#define PX__CHECK(t, spec, what) PX_CHECK(px__ops_check_tensor((t), (spec), (what)))

#endif
