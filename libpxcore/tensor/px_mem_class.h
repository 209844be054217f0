/* Size classes of the CUDA caching allocator (tensor/cuda/cuda_mem.cu), in
 * host code that every build compiles, so the CPU half of test_gpu_ops
 * checks them on any machine.
 *
 * Requests up to PX__MEM_LARGE (16 MiB): 512 bytes, then four classes per
 * power of two (2^k times 1.25, 1.5, 1.75, 2), so a block wastes at most a
 * quarter of its size, and a freed block serves any request of its class.
 * Larger requests (a model's arenas: hundreds of MB, where the classes added
 * about 213 MB to ResNet-50's bf16 peak by arithmetic on the CPU plan's
 * sizes) are whole 2 MiB units, PyTorch's
 * rounding of large blocks, all in one class PX__MEM_LARGE_CLASS whose
 * cached blocks are reused best fit, and only by a request they exceed by
 * at most an eighth (px__mem_large_fits): a block wastes at most 2 MiB
 * when made and an eighth when reused. */
#ifndef PX_MEM_CLASS_H
#define PX_MEM_CLASS_H

#include <stddef.h>

enum { PX__MEM_CLASSES = 256, PX__MEM_LARGE_CLASS = PX__MEM_CLASSES - 1 };

#define PX__MEM_LARGE ((size_t)16 << 20)
#define PX__MEM_LARGE_UNIT ((size_t)2 << 20)

/* The size a block for an n-byte request has (n > 0), and its class in *cls. */
static inline size_t px__mem_class_of(size_t n, int *cls) {
  if (n <= 512) {
    *cls = 0;
    return 512;
  }
  if (n > PX__MEM_LARGE) {
    *cls = PX__MEM_LARGE_CLASS;
    return (n + PX__MEM_LARGE_UNIT - 1) / PX__MEM_LARGE_UNIT * PX__MEM_LARGE_UNIT;
  }
  int k = 63 - __builtin_clzll((unsigned long long)(n - 1)); /* 2^k < n <= 2^(k+1) */
  size_t base = (size_t)1 << k, step = base / 4;
  size_t q = (n - base + step - 1) / step; /* 1..4 */
  *cls = 4 * k + (int)q;
  return base + q * step;
}

/* Whether a cached large block of `have` bytes may serve a request whose
 * block size (px__mem_class_of) is `want`. */
static inline int px__mem_large_fits(size_t have, size_t want) {
  return have >= want && have - want <= want / 8;
}

#endif
