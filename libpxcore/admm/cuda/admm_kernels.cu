/* Device twins of hsadmm.c's elementwise updates and squared norms
 * (cuda_kernels.h).
 *
 * The updates use the _rn intrinsics, which nvcc never fuses into
 * multiply-adds, so each element goes through the same float roundings as
 * hsadmm.c's loop. The squared norms use a fixed grid and fixed reduction
 * trees, so a sum never depends on scheduling: the same inputs give the same
 * bits on every call and every device. */
#include <cuda_runtime.h>
#include <stdint.h>

#include "prunex/cuda_kernels.h"
#include "prune/cuda/px_kernels_int.h"
#include "px_check.h"

#define PX__LOOP(i, n)                                                      \
  for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < (n);    \
       i += (size_t)gridDim.x * blockDim.x)

/* ---- device buffers (hsadmm_state.c's CUDA table) ------------------------------- */

extern "C" px_status_t px_cuda_kernels_copy(void *dst, const void *src, size_t bytes,
                                            void *stream) {
  if (bytes == 0) return PX_OK;
  PX_REQUIRE(dst && src, "device copy: NULL buffer");
  PX__CUDA_TRY(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToDevice, px__stream(stream)));
  return PX_OK;
}

extern "C" px_status_t px_cuda_kernels_zero(void *dev, size_t bytes, void *stream) {
  if (bytes == 0) return PX_OK;
  PX_REQUIRE(dev != NULL, "device fill: NULL buffer");
  PX__CUDA_TRY(cudaMemsetAsync(dev, 0, bytes, px__stream(stream)));
  return PX_OK;
}

/* ---- elementwise ------------------------------------------------------------ */

__global__ static void px__add(float *out, const float *a, const float *b, size_t n) {
  PX__LOOP(i, n) out[i] = __fadd_rn(a[i], b[i]);
}

/* out = f * x (out may be x) */
__global__ static void px__scale(float *out, const float *x, float f, size_t n) {
  PX__LOOP(i, n) out[i] = __fmul_rn(f, x[i]);
}

/* x += a - b */
__global__ static void px__dual(float *x, const float *a, const float *b, size_t n) {
  PX__LOOP(i, n) x[i] = __fadd_rn(x[i], __fsub_rn(a[i], b[i]));
}

/* zi = ca * s + cb * (z - v), evaluated as hsadmm.c writes it */
__global__ static void px__zi(float *zi, const float *s, const float *z, const float *v, float ca,
                              float cb, size_t n) {
  PX__LOOP(i, n) zi[i] = __fadd_rn(__fmul_rn(ca, s[i]), __fmul_rn(cb, __fsub_rn(z[i], v[i])));
}

extern "C" px_status_t px_cuda_admm_add(float *out, const float *a, const float *b, size_t n,
                                        void *stream) {
  if (n == 0) return PX_OK;
  PX_REQUIRE(out && a && b, "admm add: NULL buffer");
  px__add<<<px__blocks(n), PX__THREADS, 0, px__stream(stream)>>>(out, a, b, n);
  PX__LAUNCHED("admm add");
  return PX_OK;
}

extern "C" px_status_t px_cuda_admm_scale(float *x, float f, size_t n, void *stream) {
  if (n == 0) return PX_OK;
  PX_REQUIRE(x != NULL, "admm scale: NULL buffer");
  px__scale<<<px__blocks(n), PX__THREADS, 0, px__stream(stream)>>>(x, x, f, n);
  PX__LAUNCHED("admm scale");
  return PX_OK;
}

extern "C" px_status_t px_cuda_admm_zi_update(float *zi, const float *s, const float *z,
                                              const float *v, double rho1, double rho2,
                                              double lambda, int num_nodes, int ranks_per_node,
                                              size_t n, void *stream) {
  PX_REQUIRE(rho1 > 0 && rho2 > 0 && lambda >= 0 && num_nodes > 0 && ranks_per_node > 0,
             "z_i update: rho1 %g, rho2 %g, lambda %g, %d nodes of %d ranks", rho1, rho2, lambda,
             num_nodes, ranks_per_node);
  if (n == 0) return PX_OK;
  PX_REQUIRE(zi && s && z && v, "z_i update: NULL buffer");
  /* the coefficients exactly as hsadmm.c computes them */
  double den = lambda / num_nodes + ranks_per_node * rho1 + rho2;
  float ca = (float)(rho1 / den), cb = (float)(rho2 / den);
  px__zi<<<px__blocks(n), PX__THREADS, 0, px__stream(stream)>>>(zi, s, z, v, ca, cb, n);
  PX__LAUNCHED("z_i update");
  return PX_OK;
}

extern "C" px_status_t px_cuda_admm_z_flat(float *z, const float *s, double rho1, double lambda,
                                           int num_ranks, size_t n, void *stream) {
  PX_REQUIRE(rho1 > 0 && lambda >= 0 && num_ranks > 0, "flat z update: rho1 %g, lambda %g, %d ranks",
             rho1, lambda, num_ranks);
  if (n == 0) return PX_OK;
  PX_REQUIRE(z && s, "flat z update: NULL buffer");
  float scale = (float)(rho1 / (lambda + num_ranks * rho1));
  px__scale<<<px__blocks(n), PX__THREADS, 0, px__stream(stream)>>>(z, s, scale, n);
  PX__LAUNCHED("flat z update");
  return PX_OK;
}

extern "C" px_status_t px_cuda_admm_dual_update(float *x, const float *a, const float *b,
                                                size_t n, void *stream) {
  if (n == 0) return PX_OK;
  PX_REQUIRE(x && a && b, "dual update: NULL buffer");
  px__dual<<<px__blocks(n), PX__THREADS, 0, px__stream(stream)>>>(x, a, b, n);
  PX__LAUNCHED("dual update");
  return PX_OK;
}

extern "C" px_status_t px_cuda_admm_rescale(float *x, double rho_old, double rho_new, size_t n,
                                            void *stream) {
  PX_REQUIRE(rho_old > 0 && rho_new > 0, "dual rescale from rho %g to %g: both must be > 0",
             rho_old, rho_new);
  return px_cuda_admm_scale(x, (float)(rho_old / rho_new), n, stream);
}

/* ---- squared norms ------------------------------------------------------------
 * Pass 1: PX__SQ_BLOCKS blocks; thread t of block b sums elements
 * b*THREADS + t + k*(BLOCKS*THREADS) in increasing k, then the block reduces
 * its threads' sums by a fixed tree. Pass 2: one block reduces the block sums
 * by the same tree. Nothing depends on timing or on the device. */

#define PX__SQ_BLOCKS 256
static_assert(PX__SQ_BLOCKS == PX__THREADS, "pass 2 gives each block sum one thread");
static_assert(PX_CUDA_SQDIFF_WS_BYTES == PX__SQ_BLOCKS * sizeof(double),
              "cuda_kernels.h's workspace size matches the grid");
static_assert((PX__THREADS & (PX__THREADS - 1)) == 0, "tree reduction needs a power of two");

/* Sums sh[0..PX__THREADS) into sh[0]; every thread of the block calls it. */
__device__ static void px__tree_sum(double *sh) {
  for (unsigned w = PX__THREADS / 2; w > 0; w >>= 1) {
    if (threadIdx.x < w) sh[threadIdx.x] = __dadd_rn(sh[threadIdx.x], sh[threadIdx.x + w]);
    __syncthreads();
  }
}

__global__ static void px__sqdiff_partial(double *partial, const float *a, const float *b,
                                          size_t n) {
  __shared__ double sh[PX__THREADS];
  double acc = 0.0;
  for (size_t i = (size_t)blockIdx.x * PX__THREADS + threadIdx.x; i < n;
       i += (size_t)PX__SQ_BLOCKS * PX__THREADS) {
    double d = b ? __dsub_rn((double)a[i], (double)b[i]) : (double)a[i];
    acc = __dadd_rn(acc, __dmul_rn(d, d));
  }
  sh[threadIdx.x] = acc;
  __syncthreads();
  px__tree_sum(sh);
  if (threadIdx.x == 0) partial[blockIdx.x] = sh[0];
}

__global__ static void px__sum_partials(double *out, const double *partial) {
  __shared__ double sh[PX__THREADS];
  sh[threadIdx.x] = partial[threadIdx.x];
  __syncthreads();
  px__tree_sum(sh);
  if (threadIdx.x == 0) *out = sh[0];
}

extern "C" px_status_t px_cuda_admm_sqdiff(double *out, const float *a, const float *b,
                                           size_t n, void *ws, size_t ws_bytes, void *stream) {
  PX_REQUIRE(out != NULL, "squared norm: NULL output");
  cudaStream_t st = px__stream(stream);
  if (n == 0) {
    PX__CUDA_TRY(cudaMemsetAsync(out, 0, sizeof(double), st)); /* +0.0 */
    return PX_OK;
  }
  PX_REQUIRE(a != NULL, "squared norm: NULL input");
  PX_REQUIRE(ws && (uintptr_t)ws % sizeof(double) == 0 && ws_bytes >= PX_CUDA_SQDIFF_WS_BYTES,
             "squared norm workspace of %zu bytes at %p: need %zu, 8-aligned", ws_bytes, ws,
             PX_CUDA_SQDIFF_WS_BYTES);
  double *partial = (double *)ws;
  px__sqdiff_partial<<<PX__SQ_BLOCKS, PX__THREADS, 0, st>>>(partial, a, b, n);
  PX__LAUNCHED("squared norm (pass 1)");
  px__sum_partials<<<1, PX__THREADS, 0, st>>>(out, partial);
  PX__LAUNCHED("squared norm (pass 2)");
  return PX_OK;
}
