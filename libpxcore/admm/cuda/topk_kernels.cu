/* Device twin of strategy.c's Top-K sparsifier with error feedback
 * (cuda_kernels.h).
 *
 * Selection is a stable CUB radix sort of (key, index) pairs, where the key
 * is |e| mapped to an unsigned integer whose ascending order is |e|
 * descending with NaN last. Stability keeps equal keys in index order, so the
 * first k pairs are the k largest |e| with ties to the lower index: an exact,
 * deterministic choice, and one of the choices strategy.c's quickselect may
 * make.
 *
 * Workspace layout (each part 256-byte aligned), for n entries:
 *   keys_in[n] | keys_out[n] | idx_in[n] | idx_out[n]   uint32
 *   CUB temporary storage */
#include <cuda_runtime.h>
#include <limits.h>
#include <stdint.h>

#include <cub/device/device_radix_sort.cuh>

#include "prunex/cuda_kernels.h"
#include "prune/cuda/px_kernels_int.h"
#include "px_check.h"

#define PX__LOOP(i, n)                                                      \
  for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < (n);    \
       i += (size_t)gridDim.x * blockDim.x)

static_assert(sizeof(px_topk_pair_t) == 8, "the wire format is 8 bytes a pair");

static size_t px__align256(size_t x) { return (x + 255) & ~(size_t)255; }

/* Bytes of CUB's temporary storage for n items (a host-side query). */
static px_status_t px__sort_temp_bytes(size_t n, size_t *bytes) {
  size_t t = 0;
  PX__CUDA_TRY(cub::DeviceRadixSort::SortPairs(
      (void *)NULL, t, (const uint32_t *)NULL, (uint32_t *)NULL, (const uint32_t *)NULL,
      (uint32_t *)NULL, (int)n, 0, 32, (cudaStream_t)0));
  *bytes = t;
  return PX_OK;
}

extern "C" px_status_t px_cuda_topk_workspace_size(size_t n, size_t *bytes) {
  PX_REQUIRE(bytes != NULL, "top-k workspace: NULL output");
  *bytes = 0;
  PX_REQUIRE(n <= (size_t)INT_MAX, "top-k of %zu entries: at most %d", n, INT_MAX);
  if (n == 0) return PX_OK;
  size_t temp = 0;
  PX_CHECK(px__sort_temp_bytes(n, &temp));
  *bytes = 4 * px__align256(n * sizeof(uint32_t)) + px__align256(temp);
  return PX_OK;
}

/* keys[i]: ~(bits(|e[i]|) + 1), or ~0 for NaN. For non-negative floats the
 * bit pattern orders like the value (+inf is 0x7f800000, so +1 cannot
 * overflow); complementing turns the ascending sort into |e| descending. */
__global__ static void px__topk_keys(uint32_t *keys, uint32_t *idx, const float *e, size_t n) {
  PX__LOOP(i, n) {
    float a = fabsf(e[i]);
    uint32_t k = isnan(a) ? 0u : __float_as_uint(a) + 1u;
    keys[i] = ~k;
    idx[i] = (uint32_t)i;
  }
}

/* The first k sorted entries become pairs and leave the error feedback. The
 * indices are distinct, so no two threads touch the same e[q]. */
__global__ static void px__topk_emit(px_topk_pair_t *pairs, float *e, const uint32_t *order,
                                     size_t k) {
  PX__LOOP(r, k) {
    uint32_t q = order[r];
    px_topk_pair_t p;
    p.index = q;
    p.value = e[q];
    pairs[r] = p;
    e[q] = 0.0f;
  }
}

extern "C" px_status_t px_cuda_topk_select(px_topk_pair_t *pairs, float *e, size_t n, size_t k,
                                           void *ws, size_t ws_bytes, void *stream) {
  PX_REQUIRE(k <= n && n <= (size_t)INT_MAX, "top-k: %zu of %zu entries", k, n);
  if (k == 0) return PX_OK;
  PX_REQUIRE(pairs && e, "top-k: NULL buffer");
  size_t need = 0, temp = 0;
  PX_CHECK(px_cuda_topk_workspace_size(n, &need));
  PX_CHECK(px__sort_temp_bytes(n, &temp));
  PX_REQUIRE(ws && (uintptr_t)ws % 256 == 0 && ws_bytes >= need,
             "top-k workspace of %zu bytes at %p: need %zu, 256-aligned", ws_bytes, ws, need);
  size_t part = px__align256(n * sizeof(uint32_t));
  char *base = (char *)ws;
  uint32_t *keys_in = (uint32_t *)base, *keys_out = (uint32_t *)(base + part);
  uint32_t *idx_in = (uint32_t *)(base + 2 * part), *idx_out = (uint32_t *)(base + 3 * part);
  void *cub_temp = base + 4 * part;
  cudaStream_t st = px__stream(stream);

  px__topk_keys<<<px__blocks(n), PX__THREADS, 0, st>>>(keys_in, idx_in, e, n);
  PX__LAUNCHED("top-k keys");
  PX__CUDA_TRY(cub::DeviceRadixSort::SortPairs(cub_temp, temp, keys_in, keys_out, idx_in,
                                               idx_out, (int)n, 0, 32, st));
  px__topk_emit<<<px__blocks(k), PX__THREADS, 0, st>>>(pairs, e, idx_out, k);
  PX__LAUNCHED("top-k emit");
  return PX_OK;
}

/* grad[q] += value * scale, strategy.c's arithmetic; bad indices are counted. */
__global__ static void px__topk_scatter(float *grad, uint32_t *bad, const px_topk_pair_t *pairs,
                                        size_t k, size_t n, float scale) {
  PX__LOOP(r, k) {
    px_topk_pair_t p = pairs[r];
    if ((size_t)p.index >= n) {
      if (bad) atomicAdd(bad, 1u);
      continue;
    }
    grad[p.index] = __fadd_rn(grad[p.index], __fmul_rn(p.value, scale));
  }
}

extern "C" px_status_t px_cuda_topk_scatter_add(float *grad, uint32_t *bad,
                                                const px_topk_pair_t *pairs, size_t k, size_t n,
                                                float scale, void *stream) {
  if (k == 0) return PX_OK;
  PX_REQUIRE(pairs && (grad || n == 0), "top-k scatter: NULL buffer");
  px__topk_scatter<<<px__blocks(k), PX__THREADS, 0, px__stream(stream)>>>(grad, bad, pairs, k,
                                                                          n, scale);
  PX__LAUNCHED("top-k scatter");
  return PX_OK;
}
