/* Shared by the CUDA launchers of prune/cuda and admm/cuda (CUDA C++ only):
 * conversion of CUDA errors to the library's status at the boundary, and the
 * launch geometry every elementwise kernel uses. */
#ifndef PX_KERNELS_INT_H
#define PX_KERNELS_INT_H

#include <cuda_runtime.h>

#include "prunex/px.h"
#include "px_cuda_int.h"

/* Threads per block of every kernel here. Reductions depend on it being a
 * power of two. */
#define PX__THREADS 256

/* Cap on the blocks of a grid-stride launch: enough to fill an H100/H200
 * several times over; larger tensors loop. */
#define PX__MAX_BLOCKS 4096

static inline px_status_t px__cuda_status(cudaError_t e, const char *what) {
  return px__cuda_to_status(e, what);
}

/* Returns the call's status (px__cuda_to_status) from the enclosing function when a CUDA
 * call fails. */
#define PX__CUDA_TRY(call)                                   \
  do {                                                       \
    cudaError_t px__e = (call);                              \
    if (px__e != cudaSuccess) return px__cuda_status(px__e, #call); \
  } while (0)

/* After a launch: configuration errors show here; faults inside the kernel
 * show at the next synchronisation. */
#define PX__LAUNCHED(what)                                   \
  do {                                                       \
    cudaError_t px__e = cudaGetLastError();                  \
    if (px__e != cudaSuccess) return px__cuda_status(px__e, what " launch"); \
  } while (0)

/* Blocks of PX__THREADS for n items in a grid-stride loop. n > 0. */
static inline unsigned px__blocks(size_t n) {
  size_t b = (n + PX__THREADS - 1) / PX__THREADS;
  return (unsigned)(b < PX__MAX_BLOCKS ? b : PX__MAX_BLOCKS);
}

static inline cudaStream_t px__stream(void *stream) { return (cudaStream_t)stream; }

#endif
