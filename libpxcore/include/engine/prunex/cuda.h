/* CUDA device discovery. Compiled for real when the CUDA backend is built
 * (PX_WITH_CUDA), otherwise every call answers PX_ERR_NOT_BUILT: callers
 * never need #ifdefs (the one switch lives in the build). */
#ifndef PRUNEX_CUDA_H
#define PRUNEX_CUDA_H

#include <stddef.h>
#include <stdint.h>

#include "prunex/px.h"

#ifdef __cplusplus
extern "C" {
#endif

/* 1 when libpxcore was built with the CUDA backend. */
PX_API int px_cuda_built(void);

/* Number of usable CUDA devices in *count. A build without CUDA fails with
 * PX_ERR_NOT_BUILT; a machine without a driver or GPU gives PX_OK and 0. */
PX_API px_status_t px_cuda_device_count(int *count);

/* Name and total memory of a device. PX_ERR_INVALID for a bad index. */
PX_API px_status_t px_cuda_device_info(int device, char *name, size_t name_len,
                                       uint64_t *memory_bytes);

/* The PCI bus id of a device ("0000:65:00.0"), NUL-terminated in buf[len]
 * (13 bytes suffice; a longer id is cut). With the host name it tells whether
 * two processes drive the same GPU. PX_ERR_INVALID for a bad index. */
PX_API px_status_t px_cuda_device_bus_id(int device, char *buf, size_t len);

/* Runs a tiny kernel on the device and checks its result: proves that the
 * device, the driver and our compiled code agree. */
PX_API px_status_t px_cuda_selftest(int device);

/* ---- device memory accounting ---------------------------------------------
 * CUDA tensors and arenas get their memory from a caching allocator: freed
 * blocks stay on per-device free lists by size class and are reused, and
 * cudaMalloc runs only when no cached block fits. When the last live block
 * of a device is freed, that device's cache goes back to the driver, so a
 * process that destroys what it created holds no device memory. These
 * report and release that memory; without CUDA they report zeros and do
 * nothing. */

typedef struct {
  uint64_t allocs;        /* allocations served */
  uint64_t frees;
  uint64_t device_allocs; /* cudaMalloc calls (cache misses) */
  uint64_t cache_hits;    /* allocations served from the cache */
  int64_t live_bytes;     /* bytes handed out and not freed (size-class rounded) */
  int64_t cached_bytes;   /* bytes held in the free lists */
  int64_t peak_bytes;     /* largest live_bytes so far */
} px_cuda_mem_stats_t;

/* Process-wide counters (a consistent snapshot). */
PX_API void px_cuda_mem_stats(px_cuda_mem_stats_t *out);

/* What peak_bytes was made of: the blocks live at that moment, by the name
 * they were allocated under ("model.activation_memory", "model.params",
 * "conv workspace", ...), in their block sizes. */
typedef struct {
  char name[48];
  int64_t bytes;
  int blocks;
} px_cuda_mem_use_t;

/* Writes up to n of them into out, largest first (more names than n: the
 * last entry sums the rest, named "(other names)"); returns how many were
 * written, 0 without CUDA or before any allocation. */
PX_API int px_cuda_mem_peak_uses(px_cuda_mem_use_t *out, int n);

/* Returns every cached block to the driver (cudaFree). Live blocks are not
 * touched. Fails only on a CUDA error. */
PX_API px_status_t px_cuda_mem_trim(void);

/* ---- page-locked host memory -----------------------------------------------
 * Host buffers a GPU copies from directly: an input batch in such memory goes
 * to the device by DMA, without the copy into the engine's staging buffer
 * that ordinary memory takes (154 MB a step for ResNet-50 at 224 x 224, batch
 * 256). px_cuda_host_alloc gives `bytes` of page-locked memory, registered
 * with the context of `device` (the one that will copy from it: no context
 * is made on another GPU) and usable by every context, or ordinary
 * 64-byte aligned memory where none can be had (a build or a machine without
 * CUDA, the driver's limit reached); NULL only when neither can.
 * px_cuda_host_free takes either (NULL: nothing); px_cuda_host_pinned says
 * which p is. */
PX_API void *px_cuda_host_alloc(int device, size_t bytes);
PX_API void px_cuda_host_free(void *p);
PX_API int px_cuda_host_pinned(const void *p);

#ifdef __cplusplus
}
#endif
#endif
