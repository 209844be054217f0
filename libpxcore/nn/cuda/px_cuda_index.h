/* Index maps of the CUDA graph-operator, pooling and channels-last batch
 * norm kernels (nn/cuda/cuda_graph.cu, cuda_pool.cu, cuda_bn.cu), in plain C
 * so that the same code runs in the kernels and on the host:
 * tests/test_gpu_graph.c and tests/test_gpu_bn_nhwc.c check them on the CPU
 * against brute-force enumeration on every machine, GPU or not.
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

/* ---- channels-last batch norm (cuda_bn.cu) ---------------------------------------------
 * The activation is [rows][c] (rows = N*H*W, the channel fastest). A thread
 * owns `vec` neighbouring channels (one 16-byte load of 8 bf16 or 4 f32 when
 * vec > 1: c a multiple of vec and every base pointer 16-byte aligned), one
 * "column" col of the cols = c / vec, and walks the rows r0, r0 + step, ...:
 * its channels' parameters stay in registers and no index is divided. A
 * block is tx columns x ty rows of threads (tx a power of two, 32 at most),
 * the grid gx column
 * blocks x gy row blocks; gy is also the number of per-block-row partial
 * sums the reductions add in order. */
enum { PX__BN_THREADS = 256 };

/* The blocks the kernels aim at, per SM: the reductions 4 (a thread adds
 * a few dozen rows in f32 before the f64 block sums, and the partial sums
 * stay small), the element-wise passes 8 (a full SM's threads). */
enum { PX__BN_SUM_PER_SM = 4, PX__BN_EW_PER_SM = 8 };

typedef struct px__bn_geom {
  int64_t rows, c, cols; /* rows x c values, cols = c / vec thread columns */
  int64_t gx, gy;        /* grid: column blocks, row blocks */
  int vec, tx, ty;       /* channels a thread, block: tx columns x ty rows */
} px__bn_geom_t;

/* The channels a thread loads at once: 16 / elem_size when c is a multiple
 * of it and the tensors are 16-byte aligned (aligned != 0), else 1. */
PX__HD int px__bn_vec(int64_t c, int elem_size, int aligned) {
  const int v = 16 / elem_size;
  return aligned && c % v == 0 ? v : 1;
}

/* The geometry of rows x c with vec channels a thread (vec divides c) of
 * esize bytes each, aiming at about `blocks` blocks: the fewest thread
 * columns a block that still read a whole 128-byte line of a row (so that
 * wide C makes column blocks rather than row blocks: the reductions' partial
 * sums are gy x 2 x c f64), enough row blocks to fill the GPU, never more
 * than the rows need, at most 65535 (CUDA's limit on gridDim.y). */
PX__HD px__bn_geom_t px__bn_geom(int64_t rows, int64_t c, int vec, int esize, int64_t blocks) {
  px__bn_geom_t g;
  g.rows = rows;
  g.c = c;
  g.vec = vec;
  g.cols = c / vec;
  int line = 128 / (vec * esize);
  if (line > 32) line = 32;
  g.tx = 1;
  while (g.tx < line && g.tx < g.cols) g.tx *= 2;
  g.ty = PX__BN_THREADS / g.tx;
  g.gx = (g.cols + g.tx - 1) / g.tx;
  int64_t gy = (blocks + g.gx - 1) / g.gx;
  const int64_t most = (rows + g.ty - 1) / g.ty;
  if (gy > most) gy = most;
  if (gy > 65535) gy = 65535;
  g.gy = gy < 1 ? 1 : gy;
  return g;
}

/* Thread (tx, ty) of block (bx, by): its column (none when >= cols), first
 * row and row step. */
PX__HD int64_t px__bn_col(const px__bn_geom_t *g, int64_t bx, int tx) { return bx * g->tx + tx; }
PX__HD int64_t px__bn_row0(const px__bn_geom_t *g, int64_t by, int ty) { return by * g->ty + ty; }
PX__HD int64_t px__bn_step(const px__bn_geom_t *g) { return g->gy * g->ty; }

/* A block's partial sums: its tx * vec channels x 2 sums are `items`,
 * spread over the block's threads; item -> (sum k, channel ch). 0 when ch
 * is past c (a column past cols). */
PX__HD int px__bn_item(const px__bn_geom_t *g, int64_t bx, int item, int *k, int64_t *ch) {
  const int w = g->tx * g->vec;
  *k = item / w;
  *ch = bx * w + item % w;
  return *ch < g->c;
}

#endif
