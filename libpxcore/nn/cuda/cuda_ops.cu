/* The CUDA backend context (stream, cuDNN and cuBLAS handles, the shared
 * workspace, the pinned staging buffer of uploads, the loss result), the
 * status conversions at the CUDA / cuDNN / cuBLAS boundary and the helpers
 * every op file uses. See px_cuda_ops_int.h for the model of execution. */
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "nn/cuda/px_cuda_ops_int.h"
#include "prunex/cuda.h"
#include "tensor/px_tensor_int.h"

/* ---- status conversion ---------------------------------------------------------- */

static const char *px__base(const char *file) {
  const char *s = strrchr(file, '/');
  return s ? s + 1 : file;
}

px_status_t px__cuda_status(cudaError_t e, const char *call, const char *file, int line) {
  if (e == cudaSuccess) return PX_OK;
  char what[256];
  snprintf(what, sizeof what, "CUDA: %s failed (%s:%d)", call, px__base(file), line);
  return px__cuda_to_status(e, what);
}

px_status_t px__cudnn_status(cudnnStatus_t s, const char *call, const char *file, int line) {
  if (s == CUDNN_STATUS_SUCCESS) return PX_OK;
  px_status_t st = PX_ERR_BACKEND;
  if (s == CUDNN_STATUS_INTERNAL_ERROR_HOST_ALLOCATION_FAILED ||
      s == CUDNN_STATUS_INTERNAL_ERROR_DEVICE_ALLOCATION_FAILED)
    st = PX_ERR_NOMEM;
  return px_set_error(st, "cuDNN: %s failed (%s:%d): %s", call, px__base(file), line,
                      cudnnGetErrorString(s));
}

px_status_t px__cublas_status(cublasStatus_t s, const char *call, const char *file, int line) {
  if (s == CUBLAS_STATUS_SUCCESS) return PX_OK;
  const px__cublas_api_t *api = NULL;
  px__cublas_load(&api); /* already loaded: a handle exists */
  return px_set_error(s == CUBLAS_STATUS_ALLOC_FAILED ? PX_ERR_NOMEM : PX_ERR_BACKEND,
                      "cuBLAS: %s failed (%s:%d): %s", call, px__base(file), line,
                      api ? api->status_string(s) : "?");
}

/* ---- helpers ------------------------------------------------------------------------ */

px_status_t px__cuda_enter(px__cuda_ops_t *ops) {
  PX_CUDA(cudaSetDevice(ops->device.index));
  return PX_OK;
}

/* Grows a shared device buffer of the context to at least bytes (rounded
 * up to a MiB). */
static px_status_t px__reserve(px__cuda_ops_t *ops, void **buf, size_t *have, size_t bytes,
                               const char *name) {
  if (bytes <= *have) return PX_OK;
  const size_t mib = (size_t)1 << 20;
  size_t want = (bytes + mib - 1) / mib * mib;
  /* work queued earlier may still use the old block */
  PX_CUDA(cudaStreamSynchronize(ops->stream));
  px__cuda_mem_free(*buf);
  *buf = NULL;
  *have = 0;
  PX_CHECK(px__cuda_mem_alloc(ops->device.index, want, name, buf));
  *have = want;
  return PX_OK;
}

px_status_t px__cuda_reserve_ws(px__cuda_ops_t *ops, size_t bytes) {
  return px__reserve(ops, &ops->ws, &ops->ws_bytes, bytes, "ops workspace");
}

px_status_t px__cuda_reserve_wt(px__cuda_ops_t *ops, size_t bytes) {
  return px__reserve(ops, &ops->wt, &ops->wt_bytes, bytes, "conv weight copies");
}

px_status_t px__cuda_check_input(const px__cuda_ops_t *ops, const px_tensor_t *x, int min_ndim,
                                 int max_ndim, const char *what) {
  PX_REQUIRE(x != NULL, "%s: input spec is NULL", what);
  PX_REQUIRE(px_device_equal(x->device, ops->device), "%s: input is on another device", what);
  PX_REQUIRE(x->dtype == PX_DTYPE_F32, "%s: input must be f32", what);
  PX_REQUIRE(x->layout == NULL, "%s: CUDA inputs must be plain (layout %s)", what,
             px_layout_name(x->layout));
  PX_REQUIRE(x->ndim >= min_ndim && x->ndim <= max_ndim, "%s: input has %d dims, wants %d..%d",
             what, (int)x->ndim, min_ndim, max_ndim);
  return PX_OK;
}

px_status_t px__cuda_spec(const px__cuda_ops_t *ops, px_dtype_t dt, int ndim, const int64_t *dims,
                          px_tensor_t *spec) {
  return px_tensor_init(spec, ops->device, dt, ndim, dims);
}

/* A 4-D cuDNN tensor descriptor of dims x in format f and type t. */
static px_status_t px__desc4(cudnnTensorDescriptor_t d, cudnnTensorFormat_t f, cudnnDataType_t t,
                             const int64_t *x) {
  PX_REQUIRE(x[0] <= INT_MAX && x[1] <= INT_MAX && x[2] <= INT_MAX && x[3] <= INT_MAX,
             "tensor [%lld, %lld, %lld, %lld] is too large for cuDNN", (long long)x[0],
             (long long)x[1], (long long)x[2], (long long)x[3]);
  PX_CUDNN(cudnnSetTensor4dDescriptor(d, f, t, (int)x[0], (int)x[1], (int)x[2], (int)x[3]));
  return PX_OK;
}

px_status_t px__cuda_tensor_desc(cudnnTensorDescriptor_t d, int64_t n, int64_t c, int64_t h,
                                 int64_t w) {
  const int64_t x[4] = {n, c, h, w};
  return px__desc4(d, CUDNN_TENSOR_NCHW, CUDNN_DATA_FLOAT, x);
}

/* ---- activation formats -------------------------------------------------------------- */

/* Host transposition between NCHW and NHWC of elements of `es` bytes. */
static void px__host_transpose(void *dst, const void *src, const int64_t *d, size_t es,
                               int to_nhwc) {
  const int64_t n = d[0], c = d[1], hw = d[2] * d[3];
  char *o = (char *)dst;
  const char *in = (const char *)src;
  for (int64_t b = 0; b < n; b++)
    for (int64_t ch = 0; ch < c; ch++)
      for (int64_t p = 0; p < hw; p++) {
        const int64_t nchw = (b * c + ch) * hw + p, nhwc = (b * hw + p) * c + ch;
        memcpy(o + (size_t)(to_nhwc ? nhwc : nchw) * es, in + (size_t)(to_nhwc ? nchw : nhwc) * es,
               es);
      }
}

static px_status_t px__nhwc_to_plain(const px_layout_t *l, void *dst_plain, const void *src) {
  void *tmp = px_malloc(l->nbytes, "nhwc download");
  if (!tmp) return PX_ERR_NOMEM;
  px_status_t st = px__cuda_mem_download(l->device.index, tmp, src, l->nbytes);
  if (st == PX_OK) px__host_transpose(dst_plain, tmp, l->dims, px_dtype_size(l->dtype), 0);
  px_free(tmp);
  return st;
}

static px_status_t px__nhwc_from_plain(const px_layout_t *l, void *dst, const void *src_plain) {
  void *tmp = px_malloc(l->nbytes, "nhwc upload");
  if (!tmp) return PX_ERR_NOMEM;
  px__host_transpose(tmp, src_plain, l->dims, px_dtype_size(l->dtype), 1);
  px_status_t st = px__cuda_mem_upload(l->device.index, dst, tmp, l->nbytes);
  px_free(tmp);
  return st;
}

static const px__layout_vtbl_t px__nhwc_vt = {px__nhwc_to_plain, px__nhwc_from_plain};

px_status_t px__cuda_nhwc_layout(px__cuda_ops_t *ops, px_dtype_t dt, const int64_t *dims,
                                 const px_layout_t **out) {
  *out = NULL;
  PX_REQUIRE(dt == PX_DTYPE_F32 || dt == PX_DTYPE_BF16, "NHWC layout: dtype %d is not f32 or bf16",
             (int)dt);
  for (px__cuda_layout_t *l = ops->layouts; l; l = l->next)
    if (l->base.dtype == dt && !memcmp(l->base.dims, dims, 4 * sizeof *dims)) {
      *out = &l->base;
      return PX_OK;
    }
  px__cuda_layout_t *l = (px__cuda_layout_t *)px_calloc(1, sizeof *l, "cuda nhwc layout");
  if (!l) return PX_ERR_NOMEM;
  l->base.vt = &px__nhwc_vt;
  l->base.device = ops->device;
  l->base.dtype = dt;
  l->base.ndim = 4;
  memcpy(l->base.dims, dims, 4 * sizeof *dims);
  l->base.nbytes = (size_t)(dims[0] * dims[1] * dims[2] * dims[3]) * px_dtype_size(dt);
  snprintf(l->base.name, sizeof l->base.name, "nhwc-%s", dt == PX_DTYPE_BF16 ? "bf16" : "f32");
  l->next = ops->layouts;
  ops->layouts = l;
  *out = &l->base;
  return PX_OK;
}

px_status_t px__cuda_spec_like(px__cuda_ops_t *ops, const px_tensor_t *like, const int64_t *dims,
                               px_tensor_t *spec) {
  PX_CHECK(px_tensor_init(spec, ops->device, like->dtype, 4, dims));
  if (!px__cuda_nhwc(like)) return PX_OK;
  const px_layout_t *l;
  PX_CHECK(px__cuda_nhwc_layout(ops, like->dtype, dims, &l));
  spec->layout = l;
  spec->nbytes = l->nbytes;
  return PX_OK;
}

px_status_t px__cuda_check_act(const px__cuda_ops_t *ops, const px_tensor_t *x, int min_ndim,
                               int max_ndim, const char *what) {
  PX_REQUIRE(x != NULL, "%s: input spec is NULL", what);
  if (x->layout == NULL) return px__cuda_check_input(ops, x, min_ndim, max_ndim, what);
  PX_REQUIRE(px_device_equal(x->device, ops->device) && px_device_equal(x->layout->device, ops->device),
             "%s: input is on another device", what);
  PX_REQUIRE(x->layout->vt == &px__nhwc_vt, "%s: layout %s is not one of the CUDA engine's", what,
             px_layout_name(x->layout));
  PX_REQUIRE(x->ndim == 4 && (x->dtype == PX_DTYPE_F32 || x->dtype == PX_DTYPE_BF16),
             "%s: an NHWC input must be a 4-D f32 or bf16 tensor", what);
  return PX_OK;
}

px_status_t px__cuda_act_desc(cudnnTensorDescriptor_t d, const px_tensor_t *spec) {
  return px__desc4(d, px__cuda_nhwc(spec) ? CUDNN_TENSOR_NHWC : CUDNN_TENSOR_NCHW,
                   px__cudnn_dtype(spec), spec->dims);
}

extern "C" px_status_t px__cuda_ops_act_format(px_ops_t *o, px_precision_t precision,
                                               px_tensor_t *spec) {
  px__cuda_ops_t *ops = px__cuda_ctx(o);
  PX_REQUIRE(px_device_equal(spec->device, ops->device), "px_ops_act_format: spec on another device");
  if (precision == PX_PRECISION_FP32 && ops->nchw) return PX_OK;
  const px_layout_t *l;
  const px_dtype_t dt = precision == PX_PRECISION_BF16 ? PX_DTYPE_BF16 : PX_DTYPE_F32;
  PX_CHECK(px__cuda_nhwc_layout(ops, dt, spec->dims, &l));
  spec->dtype = dt;
  spec->layout = l;
  spec->nbytes = l->nbytes;
  return PX_OK;
}

void px__cuda_op_born(px__cuda_ops_t *ops) { ops->live_ops++; }

void px__cuda_op_free(px__cuda_ops_t *ops, void *op) {
  if (ops) ops->live_ops--;
  px_free(op);
}

void *px__cuda_op_new(px__cuda_ops_t *ops, size_t size, const char *name) {
  px__ops_head_t *head = (px__ops_head_t *)px_calloc(1, size, name);
  if (!head) return NULL;
  head->be = &px__cuda_backend;
  px__cuda_op_born(ops);
  return head;
}

/* ---- context ------------------------------------------------------------------------ */

static void px__describe(px__cuda_ops_t *ops) {
  char name[128] = "?";
  px_cuda_device_info(ops->device.index, name, sizeof name, NULL);
  size_t v = cudnnGetVersion();
  int blas = 0;
  ops->blas->get_version(ops->cublas, &blas);
  snprintf(ops->desc, sizeof ops->desc,
           "cuDNN %zu.%zu.%zu, cuBLAS %d.%d (cuda:%d %s, TF32 %s, %s, algorithms %s%s)", v / 10000,
           (v % 10000) / 100, v % 100, blas / 10000, (blas % 10000) / 100, (int)ops->device.index,
           name, ops->tf32 ? "on" : "off", ops->nchw ? "NCHW" : "NHWC",
           ops->benchmark ? "timed" : ops->deterministic ? "deterministic" : "by heuristics",
           ops->graph_api ? ", graph API" : "");
}

static int px__env_int(const char *name, int dflt) {
  const char *s = getenv(name);
  if (!s || !*s) return dflt;
  char *end;
  long v = strtol(s, &end, 10);
  return (*end || v < 0 || v > INT_MAX) ? dflt : (int)v;
}

extern "C" px_status_t px__cuda_ops_create(px_device_t dev, int nthreads, px_ops_t **out) {
  *out = NULL;
  PX_REQUIRE(dev.kind == PX_DEVICE_CUDA, "px_ops_create: device kind %d is not CUDA", (int)dev.kind);
  int count = 0;
  PX_CHECK(px_cuda_device_count(&count));
  if (count == 0) return px_set_error(PX_ERR_NO_DEVICE, "px_ops_create: no CUDA device on this machine");
  if (dev.index < 0 || dev.index >= count)
    return px_set_error(PX_ERR_NO_DEVICE, "px_ops_create: CUDA device %d does not exist (%d present)",
                        (int)dev.index, count);
  px__cuda_ops_t *ops = (px__cuda_ops_t *)px_calloc(1, sizeof *ops, "cuda ops");
  if (!ops) return PX_ERR_NOMEM;
  ops->head.be = &px__cuda_backend;
  ops->device = dev;
  ops->nthreads = nthreads;
  ops->tf32 = px__env_int("PX_CUDA_TF32", 1) != 0;
  ops->ws_algo_limit = (size_t)px__env_int("PX_CUDNN_WORKSPACE_MB", 1024) << 20;
  /* deterministic: only algorithms cuDNN marks deterministic, chosen by its
   * heuristics (timing can pick another algorithm on another run), so two
   * runs of the same job give the same bits (PyTorch's
   * cudnn.deterministic); the engine's own kernels are deterministic */
  ops->deterministic = px__env_int("PX_CUDNN_DETERMINISTIC", 0) != 0;
  ops->benchmark = !ops->deterministic && px__env_int("PX_CUDNN_BENCHMARK", 1) != 0;
  ops->find_runs = px__env_int("PX_CUDNN_FIND_RUNS", 2);
  if (ops->find_runs < 1 || ops->find_runs > 5) ops->find_runs = 2;
  {
    const char *l = getenv("PX_CUDA_LAYOUT");
    ops->nchw = l && !strcmp(l, "nchw");
  }
  px_status_t st = PX_OK;
  /* convolutions on cuDNN's graph API (the default) or its legacy API */
  PX_CHECK_GOTO(px__cudnn_api_parse(getenv("PX_CUDNN_API"), &ops->graph_api), st, fail);
  PX_CHECK_GOTO(px__cuda_enter(ops), st, fail);
  PX_CUDA_GOTO(cudaStreamCreate(&ops->stream), st, fail); /* blocking: see the header */
  PX_CUDA_GOTO(cudaEventCreateWithFlags(&ops->staging_done, cudaEventDisableTiming), st, fail);
  PX_CUDNN_GOTO(cudnnCreate(&ops->cudnn), st, fail);
  PX_CUDNN_GOTO(cudnnSetStream(ops->cudnn, ops->stream), st, fail);
  PX_CHECK_GOTO(px__cublas_load(&ops->blas), st, fail);
  PX_CUBLAS_GOTO(ops->blas->create(&ops->cublas), st, fail);
  PX_CUBLAS_GOTO(ops->blas->set_stream(ops->cublas, ops->stream), st, fail);
  PX_CHECK_GOTO(px__cuda_mem_alloc(dev.index, sizeof *ops->dres, "softmax_ce result",
                                   (void **)&ops->dres),
                st, fail);
  PX_CUDA_GOTO(cudaHostAlloc((void **)&ops->hres, sizeof *ops->hres, cudaHostAllocDefault), st,
               fail);
  px__describe(ops);
  *out = (px_ops_t *)ops;
  return PX_OK;
fail:
  px__cuda_ops_destroy((px_ops_t *)ops);
  return st;
}

extern "C" void px__cuda_ops_destroy(px_ops_t *o) {
  px__cuda_ops_t *ops = px__cuda_ctx(o);
  if (!ops) return;
  if (ops->live_ops != 0)
    px_log(PX_LOG_WARN, "px_ops_destroy: %lld op objects were not destroyed first",
           (long long)ops->live_ops);
  cudaSetDevice(ops->device.index);
  if (ops->stream) cudaStreamSynchronize(ops->stream);
  px__cuda_mem_free(ops->ws);
  px__cuda_mem_free(ops->wt);
  px__cuda_mem_free(ops->dres);
  while (ops->layouts) {
    px__cuda_layout_t *l = ops->layouts;
    ops->layouts = l->next;
    px_free(l);
  }
  px__cuda_conv_algo_cache_free(ops);
  px__cuda_conv_plan_cache_free(ops);
  if (ops->hres) cudaFreeHost(ops->hres);
  if (ops->staging) cudaFreeHost(ops->staging);
  if (ops->cublas) ops->blas->destroy(ops->cublas);
  if (ops->cudnn) cudnnDestroy(ops->cudnn);
  if (ops->staging_done) cudaEventDestroy(ops->staging_done);
  if (ops->stream) cudaStreamDestroy(ops->stream);
  px_free(ops);
}

extern "C" px_device_t px__cuda_ops_device(const px_ops_t *ops) { return px__cuda_cctx(ops)->device; }
extern "C" int px__cuda_ops_threads(const px_ops_t *ops) { return px__cuda_cctx(ops)->nthreads; }
extern "C" size_t px__cuda_ops_scratchpad_bytes(const px_ops_t *ops) {
  return px__cuda_cctx(ops)->ws_bytes;
}
extern "C" const char *px__cuda_ops_describe(const px_ops_t *ops) { return px__cuda_cctx(ops)->desc; }

extern "C" px_status_t px__cuda_ops_sync(px_ops_t *o) {
  px__cuda_ops_t *ops = px__cuda_ctx(o);
  PX_CHECK(px__cuda_enter(ops));
  PX_CUDA(cudaStreamSynchronize(ops->stream));
  return PX_OK;
}

extern "C" px_status_t px__cuda_ops_set_tf32(px_ops_t *o, int allow) {
  px__cuda_ops_t *ops = px__cuda_ctx(o);
  ops->tf32 = allow ? 1 : 0;
  px__describe(ops);
  return PX_OK;
}

extern "C" int px__cuda_ops_channels_last(px_ops_t *o, int on) {
  (void)o;
  (void)on;
  return 0;
}

enum { PX__UPLOAD_MAX = 8 };

extern "C" px_status_t px__cuda_ops_upload(px_ops_t *o, int n, px_tensor_t *const *dst,
                                           const void *const *src) {
  px__cuda_ops_t *ops = px__cuda_ctx(o);
  const size_t align = 256;
  size_t total = 0;
  int direct[PX__UPLOAD_MAX]; /* page-locked sources: copied from where they are */
  PX_REQUIRE(n >= 0 && n <= PX__UPLOAD_MAX, "upload: %d tensors (at most %d)", n, PX__UPLOAD_MAX);
  PX_CHECK(px__cuda_enter(ops));
  for (int i = 0; i < n; i++) {
    const px_tensor_t *t = dst[i];
    PX_REQUIRE(t && t->data && src[i], "upload: tensor %d or its host data is missing", i);
    PX_REQUIRE(px_device_equal(t->device, ops->device) && t->layout == NULL,
               "upload: tensor %d is not a plain tensor of this device", i);
    direct[i] = px_cuda_host_pinned(src[i]);
    if (direct[i])
      PX_CUDA(cudaMemcpyAsync(t->data, src[i], px_tensor_plain_bytes(t), cudaMemcpyHostToDevice,
                              ops->stream));
    else total += (px_tensor_plain_bytes(t) + align - 1) / align * align;
  }
  if (total == 0) return PX_OK;
  if (ops->staging_pending) { /* the previous upload's copies may still read staging */
    PX_CUDA(cudaEventSynchronize(ops->staging_done));
    ops->staging_pending = 0;
  }
  if (total > ops->staging_bytes) { /* first use, or a larger batch: grow once */
    if (ops->staging) cudaFreeHost(ops->staging);
    ops->staging = NULL;
    ops->staging_bytes = 0;
    PX_CUDA(cudaHostAlloc(&ops->staging, total, cudaHostAllocDefault));
    ops->staging_bytes = total;
  }
  size_t off = 0;
  for (int i = 0; i < n; i++) {
    if (direct[i]) continue;
    const size_t bytes = px_tensor_plain_bytes(dst[i]);
    char *stage = (char *)ops->staging + off;
    memcpy(stage, src[i], bytes);
    PX_CUDA(cudaMemcpyAsync(dst[i]->data, stage, bytes, cudaMemcpyHostToDevice, ops->stream));
    off += (bytes + align - 1) / align * align;
  }
  PX_CUDA(cudaEventRecord(ops->staging_done, ops->stream));
  ops->staging_pending = 1;
  return PX_OK;
}
