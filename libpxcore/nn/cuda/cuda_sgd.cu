/* The fused SGD step on CUDA (px_sgd_cuda.h): every parameter of the model
 * in one kernel launch. The work is cut into chunks of at most
 * PX__SGD_CHUNK elements of one parameter; block b updates chunk b, reading
 * its parameter's pointers and proximal term from a small table. Both tables
 * live on the device: the chunks never change, the parameter table is sent
 * again (from pinned memory, asynchronously, on the ops stream) only after a
 * proximal term changed. The arithmetic is optim.c's, in the same order:
 *   d = g + wd*w (+ rho*(w - z + u));  b = momentum*buf + d;  buf = b;
 *   w = w - lr*(nesterov ? d + momentum*b : b)                            */
#include <stdint.h>
#include <string.h>

#include "nn/cuda/px_cuda_ops_int.h"
#include "nn/px_sgd_cuda.h"

enum { PX__SGD_CHUNK = 4096, PX__SGD_THREADS = 256 };

typedef struct {
  float *w;
  const float *g;
  float *buf;
  const float *z, *u; /* z NULL: no proximal term; u NULL: taken as zero */
  float rho;
  int pad;
} px__sgd_param_t;

typedef struct {
  int param;
  int pad;
  long long begin, end; /* element range within the parameter */
} px__sgd_chunk_t;

struct px__cuda_sgd {
  px__cuda_ops_t *ops;
  int n, nchunks;
  px__sgd_param_t *hparams; /* pinned host [n] */
  px__sgd_param_t *dparams; /* device [n] */
  px__sgd_chunk_t *dchunks; /* device [nchunks] */
  cudaEvent_t sent;         /* recorded after the last copy of hparams */
  int dirty, sent_pending;
};

__global__ static void px__sgd_kernel(const px__sgd_param_t *__restrict__ params,
                                      const px__sgd_chunk_t *__restrict__ chunks, float lr,
                                      float mom, float wd, int nesterov) {
  const px__sgd_chunk_t c = chunks[blockIdx.x];
  const px__sgd_param_t p = params[c.param];
  for (long long j = c.begin + threadIdx.x; j < c.end; j += blockDim.x) {
    const float w = p.w[j];
    float d = p.g[j] + wd * w;
    if (p.z) d += p.rho * (w - p.z[j] + (p.u ? p.u[j] : 0.0f));
    const float b = mom * p.buf[j] + d;
    p.buf[j] = b;
    p.w[j] = w - lr * (nesterov ? d + mom * b : b);
  }
}

extern "C" void px__cuda_sgd_destroy(px__cuda_sgd_t *s) {
  if (!s) return;
  if (s->ops) {
    cudaSetDevice(s->ops->device.index);
    cudaStreamSynchronize(s->ops->stream);
  }
  if (s->sent) cudaEventDestroy(s->sent);
  if (s->hparams) cudaFreeHost(s->hparams);
  px__cuda_mem_free(s->dparams);
  px__cuda_mem_free(s->dchunks);
  px_free(s);
}

extern "C" px_status_t px__cuda_sgd_create(px_ops_t *o, int n, float *const *w, float *const *g,
                                           float *const *buf, const size_t *numel,
                                           px__cuda_sgd_t **out) {
  *out = NULL;
  px__cuda_ops_t *ops = px__cuda_ctx(o);
  PX_REQUIRE(n >= 0, "SGD for %d parameters", n);
  PX_CHECK(px__cuda_enter(ops));
  px_status_t st = PX_OK;
  px__sgd_chunk_t *hchunks = NULL;
  px__cuda_sgd_t *s = (px__cuda_sgd_t *)px_calloc(1, sizeof *s, "cuda sgd");
  if (!s) return PX_ERR_NOMEM;
  s->ops = ops;
  s->n = n;
  PX_CUDA_GOTO(cudaEventCreateWithFlags(&s->sent, cudaEventDisableTiming), st, fail);
  if (n == 0) {
    *out = s;
    return PX_OK;
  }
  PX_CUDA_GOTO(cudaHostAlloc((void **)&s->hparams, (size_t)n * sizeof *s->hparams,
                             cudaHostAllocDefault),
               st, fail);
  {
    size_t nchunks = 0;
    for (int i = 0; i < n; i++) nchunks += (numel[i] + PX__SGD_CHUNK - 1) / PX__SGD_CHUNK;
    if (nchunks > (size_t)INT32_MAX) {
      st = px_set_error(PX_ERR_INVALID, "SGD: %zu chunks of parameters", nchunks);
      goto fail;
    }
    s->nchunks = (int)nchunks;
  }
  hchunks = (px__sgd_chunk_t *)px_malloc((size_t)(s->nchunks ? s->nchunks : 1) * sizeof *hchunks,
                                         "cuda sgd chunks");
  if (!hchunks) {
    st = PX_ERR_NOMEM;
    goto fail;
  }
  {
    int k = 0;
    for (int i = 0; i < n; i++) {
      s->hparams[i].w = w[i];
      s->hparams[i].g = g[i];
      s->hparams[i].buf = buf[i];
      s->hparams[i].z = s->hparams[i].u = NULL;
      s->hparams[i].rho = 0.0f;
      s->hparams[i].pad = 0;
      for (size_t b = 0; b < numel[i]; b += PX__SGD_CHUNK) {
        hchunks[k].param = i;
        hchunks[k].pad = 0;
        hchunks[k].begin = (long long)b;
        hchunks[k].end = (long long)(b + PX__SGD_CHUNK < numel[i] ? b + PX__SGD_CHUNK : numel[i]);
        k++;
      }
    }
  }
  PX_CHECK_GOTO(px__cuda_mem_alloc(ops->device.index, (size_t)n * sizeof *s->dparams,
                                   "sgd parameter table", (void **)&s->dparams),
                st, fail);
  if (s->nchunks > 0) {
    const size_t bytes = (size_t)s->nchunks * sizeof *s->dchunks;
    PX_CHECK_GOTO(px__cuda_mem_alloc(ops->device.index, bytes, "sgd chunk table",
                                     (void **)&s->dchunks),
                  st, fail);
    PX_CHECK_GOTO(px__cuda_mem_upload(ops->device.index, s->dchunks, hchunks, bytes), st, fail);
  }
  px_free(hchunks);
  s->dirty = 1;
  *out = s;
  return PX_OK;
fail:
  px_free(hchunks);
  px__cuda_sgd_destroy(s);
  return st;
}

/* PX_OK when p is device memory of the optimiser's device. */
static px_status_t px__check_device_ptr(const px__cuda_sgd_t *s, const void *p, const char *what,
                                        int i) {
  cudaPointerAttributes a;
  memset(&a, 0, sizeof a);
  cudaError_t e = cudaPointerGetAttributes(&a, p);
  if (e != cudaSuccess) {
    cudaGetLastError();
    return px_set_error(PX_ERR_INVALID, "proximal term of parameter %d: %s is not CUDA memory", i,
                        what);
  }
  if (!((a.type == cudaMemoryTypeDevice && a.device == s->ops->device.index) ||
        a.type == cudaMemoryTypeManaged))
    return px_set_error(PX_ERR_INVALID,
                        "proximal term of parameter %d: %s is not device memory of cuda:%d "
                        "(on CUDA, z and u must be device arrays)",
                        i, what, (int)s->ops->device.index);
  return PX_OK;
}

extern "C" px_status_t px__cuda_sgd_set_prox(px__cuda_sgd_t *s, int i, const float *z,
                                             const float *u, float rho) {
  PX_REQUIRE(i >= 0 && i < s->n, "proximal term for parameter %d of %d", i, s->n);
  if (rho > 0.0f) {
    PX_CHECK(px__cuda_enter(s->ops));
    PX_CHECK(px__check_device_ptr(s, z, "z", i));
    if (u) PX_CHECK(px__check_device_ptr(s, u, "u", i));
  }
  if (s->sent_pending) { /* the last copy out of hparams may not have run yet */
    PX_CHECK(px__cuda_enter(s->ops));
    PX_CUDA(cudaEventSynchronize(s->sent));
    s->sent_pending = 0;
  }
  s->hparams[i].z = rho > 0.0f ? z : NULL;
  s->hparams[i].u = rho > 0.0f ? u : NULL;
  s->hparams[i].rho = rho;
  s->dirty = 1;
  return PX_OK;
}

extern "C" px_status_t px__cuda_sgd_step(px__cuda_sgd_t *s, float lr, float momentum,
                                         float weight_decay, int nesterov) {
  if (s->nchunks == 0) return PX_OK;
  px__cuda_ops_t *ops = s->ops;
  PX_CHECK(px__cuda_enter(ops));
  if (s->dirty) {
    PX_CUDA(cudaMemcpyAsync(s->dparams, s->hparams, (size_t)s->n * sizeof *s->hparams,
                            cudaMemcpyHostToDevice, ops->stream));
    PX_CUDA(cudaEventRecord(s->sent, ops->stream));
    s->sent_pending = 1;
    s->dirty = 0;
  }
  px__sgd_kernel<<<(unsigned)s->nchunks, PX__SGD_THREADS, 0, ops->stream>>>(
      s->dparams, s->dchunks, lr, momentum, weight_decay, nesterov ? 1 : 0);
  PX_CUDA_LAUNCHED("sgd step");
  return PX_OK;
}
