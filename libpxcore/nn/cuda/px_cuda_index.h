/* Index maps of the CUDA graph-operator and pooling kernels
 * (nn/cuda/cuda_graph.cu, cuda_pool.cu), in plain C so that the same code
 * runs in the kernels and on the host: tests/test_gpu_graph.c checks them
 * on the CPU against brute-force enumeration on every machine, GPU or not.
 *
 * An activation is an [N, C, HW] tensor (HW = H * W, spatial position p =
 * h * W + w) stored in NCHW order or channels-last (NHWC, nhwc != 0). */
#ifndef PX_CUDA_INDEX_H
#define PX_CUDA_INDEX_H

#include <stdint.h>

#ifdef __CUDACC__
#define PX__HD __host__ __device__ static inline
#else
#define PX__HD static inline
#endif

/* The storage offset of element (n, ch, p). */
PX__HD int64_t px__act_at(int64_t n, int64_t ch, int64_t p, int64_t c, int64_t hw, int nhwc) {
  return nhwc ? (n * hw + p) * c + ch : (n * c + ch) * hw + p;
}

/* The (n, ch, p) of storage offset i: the inverse of px__act_at. */
PX__HD void px__act_split(int64_t i, int64_t c, int64_t hw, int nhwc, int64_t *n, int64_t *ch,
                          int64_t *p) {
  if (nhwc) {
    *ch = i % c;
    *p = (i / c) % hw;
  } else {
    *p = i % hw;
    *ch = (i / hw) % c;
  }
  *n = i / (c * hw);
}

/* The (n, ch) row of offset i as n * C + ch: the index of a per-channel
 * gate [N, C, 1, 1] (the same memory in either order). */
PX__HD int64_t px__act_row(int64_t i, int64_t c, int64_t hw, int nhwc) {
  return nhwc ? (i / (hw * c)) * c + i % c : i / hw;
}

/* First and last output index (inclusive) along one axis whose pooling
 * window (kernel k, stride s, padding p) covers input index i:
 * o*s - p <= i <= o*s - p + k - 1, 0 <= o < out. lo > hi when none. */
PX__HD void px__pool_covering(int64_t i, int k, int s, int p, int64_t out, int64_t *lo,
                              int64_t *hi) {
  *lo = i + p < k ? 0 : (i + p - k) / s + 1;
  const int64_t h = (i + p) / s;
  *hi = h < out - 1 ? h : out - 1;
}

#endif
