/* Device memory behind CUDA tensors, for tensor.c and the CUDA backend:
 * a caching allocator over cudaMalloc and blocking copies. Implemented in
 * tensor/cuda/cuda_mem.cu; tensor/tensor_cuda_stub.c answers
 * PX_ERR_NOT_BUILT in a build without CUDA.
 *
 * Ordering. The copies and fills run on the legacy default stream, which
 * waits for all earlier work of the device's blocking streams and is waited
 * for by their later work; the ops contexts create their streams blocking,
 * so a tensor operation here is ordered with the ops queued before and
 * after it without explicit synchronisation. */
#ifndef PX_TENSOR_CUDA_H
#define PX_TENSOR_CUDA_H

#include <stddef.h>

#include "prunex/px.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Allocates bytes (> 0) of device memory on CUDA device `device`, from the
 * cache when a free block of the same size class exists, else from
 * cudaMalloc (after emptying the cache of that device and retrying once
 * when the device is out of memory). The block is 256-byte aligned and NOT
 * zeroed. name is a static string kept for leak reports. Fails with
 * PX_ERR_NO_DEVICE, PX_ERR_NOMEM (naming the size and name), PX_ERR_BACKEND. */
px_status_t px__cuda_mem_alloc(int device, size_t bytes, const char *name, void **out);

/* Returns a block to the cache (NULL is a no-op). Waits for the device to
 * be idle first, so that no queued kernel still uses the block when it is
 * handed out again. Freeing a pointer the allocator did not return is a
 * bug: it is logged and ignored. */
void px__cuda_mem_free(void *p);

/* Blocking fills and copies of device memory on `device` (see Ordering). */
px_status_t px__cuda_mem_zero(int device, void *p, size_t bytes);
px_status_t px__cuda_mem_copy(int device, void *dst, const void *src, size_t bytes);
px_status_t px__cuda_mem_upload(int device, void *dst, const void *host, size_t bytes);
px_status_t px__cuda_mem_download(int device, void *host, const void *src, size_t bytes);

#ifdef __cplusplus
}
#endif
#endif
