/* Device memory for CUDA tensors: a caching allocator over cudaMalloc, and
 * the blocking fills and copies tensor.c needs (see px_tensor_cuda.h).
 *
 * cudaMalloc and cudaFree are slow and cudaFree synchronises the device, so
 * freed blocks are kept on per-device free lists, one per size class, and
 * handed out again for requests of the same class; cudaMalloc runs only on a
 * miss. Size classes (tensor/px_mem_class.h) are 512 bytes and then four per
 * power of two up to 16 MiB, so a block wastes at most a quarter of its
 * size; larger blocks are whole 2 MiB units in one class, reused best fit. A
 * host-side table maps each live pointer to its block; every allocation is
 * counted (px_cuda_mem_stats), and each new peak records the live blocks by
 * name (px_cuda_mem_peak_uses). One mutex guards the lists and the counters;
 * CUDA calls run outside it.
 *
 * The cache is a device's only while something of it lives: when the last
 * live block of a device is freed (its models, ops contexts and strategy
 * buffers all destroyed), the device's cache goes back to the driver. A
 * process that tears down what it made thus ends with no device memory and
 * no block records (compute-sanitizer's leak check, the test harness's
 * px_malloc count), while a training run, whose arenas live throughout,
 * keeps every block it reuses. */
#include <cuda_runtime.h>
#include <pthread.h>
#include <stdint.h>
#include <string.h>

#include "prunex/cuda.h"
#include "px_check.h"
#include "px_cuda_int.h"
#include "tensor/px_mem_class.h"
#include "tensor/px_tensor_cuda.h"

enum { PX__MEM_MAX_DEVICES = 64, PX__MEM_BUCKETS = 1024, PX__MEM_PEAK_NAMES = 32 };

typedef struct px__cblock {
  void *ptr;
  size_t size;             /* the class size: what cudaMalloc was asked for */
  int device;
  const char *name;        /* of the last allocation that used the block */
  struct px__cblock *next; /* in a free list or a hash bucket */
} px__cblock_t;

static pthread_mutex_t px__mem_lock = PTHREAD_MUTEX_INITIALIZER;
static px__cblock_t *px__free_lists[PX__MEM_MAX_DEVICES][PX__MEM_CLASSES];
static px__cblock_t *px__live[PX__MEM_BUCKETS]; /* live blocks by pointer */
static int64_t px__live_blocks[PX__MEM_MAX_DEVICES]; /* live blocks per device */
static px_cuda_mem_stats_t px__stats;
/* the live blocks by name at the last peak (px_cuda_mem_peak_uses) */
static px_cuda_mem_use_t px__peak_uses[PX__MEM_PEAK_NAMES];
static int px__npeak_uses;

static px_status_t px__cuda_fail(cudaError_t e, const char *what) {
  return px__cuda_to_status(e, what);
}

/* Records the live blocks by name (the caller holds the lock and has just
 * set a new peak): one pass over the table, at an allocation, which a
 * training step makes none of. Up to PX__MEM_PEAK_NAMES names have an entry
 * each; from one more name on, the last entry becomes "(other names)" and
 * sums its own name's blocks and those of every name beyond. */
static void px__note_peak(void) {
  px_cuda_mem_use_t *const last = &px__peak_uses[PX__MEM_PEAK_NAMES - 1];
  int n = 0, merged = 0;
  for (int h = 0; h < PX__MEM_BUCKETS; h++)
    for (const px__cblock_t *b = px__live[h]; b; b = b->next) {
      px_cuda_mem_use_t *u = px__peak_uses;
      px_cuda_mem_use_t *const end = px__peak_uses + (merged ? n - 1 : n);
      while (u < end && strncmp(u->name, b->name, sizeof u->name - 1)) u++;
      if (u == end) {
        if (merged) {
          u = last;
        } else if (n < PX__MEM_PEAK_NAMES) {
          memset(u, 0, sizeof *u);
          strncpy(u->name, b->name, sizeof u->name - 1);
          n++;
        } else {
          strcpy(last->name, "(other names)");
          merged = 1;
          u = last;
        }
      }
      u->bytes += (int64_t)b->size;
      u->blocks++;
    }
  px__npeak_uses = n;
}

static size_t px__bucket(const void *p) { return ((uintptr_t)p >> 8) % PX__MEM_BUCKETS; }

/* Makes `device` current for the calling thread, remembering the previous
 * one in *prev (restored by px__leave) so that library calls do not move the
 * caller's current device. */
static px_status_t px__enter(int device, int *prev) {
  *prev = -1;
  if (device < 0 || device >= PX__MEM_MAX_DEVICES)
    return px_set_error(PX_ERR_INVALID, "CUDA device %d is out of range", device);
  cudaError_t e = cudaGetDevice(prev);
  if (e != cudaSuccess) {
    *prev = -1;
    return px__cuda_fail(e, "cudaGetDevice");
  }
  if (*prev == device) return PX_OK;
  e = cudaSetDevice(device);
  if (e != cudaSuccess) {
    *prev = -1;
    return px__cuda_fail(e, "cudaSetDevice");
  }
  return PX_OK;
}

static void px__leave(int device, int prev) {
  if (prev >= 0 && prev != device) cudaSetDevice(prev);
}

/* cudaFrees every cached block of device (the caller made it current). */
static void px__trim_device(int device) {
  pthread_mutex_lock(&px__mem_lock);
  px__cblock_t *all = NULL;
  for (int c = 0; c < PX__MEM_CLASSES; c++) {
    while (px__free_lists[device][c]) {
      px__cblock_t *b = px__free_lists[device][c];
      px__free_lists[device][c] = b->next;
      px__stats.cached_bytes -= (int64_t)b->size;
      b->next = all;
      all = b;
    }
  }
  pthread_mutex_unlock(&px__mem_lock);
  while (all) {
    px__cblock_t *b = all;
    all = b->next;
    cudaFree(b->ptr);
    px_free(b);
  }
}

extern "C" px_status_t px__cuda_mem_alloc(int device, size_t bytes, const char *name, void **out) {
  *out = NULL;
  PX_REQUIRE(bytes > 0, "CUDA allocation of 0 bytes (%s)", name ? name : "?");
  if (bytes > ((size_t)1 << 46))
    return px_set_error(PX_ERR_NOMEM, "CUDA allocation of %zu bytes for %s is too large", bytes,
                        name ? name : "?");
  int prev;
  PX_CHECK(px__enter(device, &prev));
  int cls;
  const size_t size = px__mem_class_of(bytes, &cls);

  pthread_mutex_lock(&px__mem_lock);
  px__cblock_t **link = &px__free_lists[device][cls];
  if (cls == PX__MEM_LARGE_CLASS) { /* best fit among the cached large blocks */
    px__cblock_t **best = NULL;
    for (px__cblock_t **l = link; *l; l = &(*l)->next)
      if (px__mem_large_fits((*l)->size, size) && (!best || (*l)->size < (*best)->size)) best = l;
    link = best;
  }
  px__cblock_t *b = link ? *link : NULL;
  if (b) {
    *link = b->next;
    px__stats.cached_bytes -= (int64_t)b->size;
    px__stats.cache_hits++;
  }
  pthread_mutex_unlock(&px__mem_lock);

  if (!b) {
    void *p = NULL;
    cudaError_t e = cudaMalloc(&p, size);
    if (e == cudaErrorMemoryAllocation) { /* give the cache back and try once more */
      cudaGetLastError();
      px__trim_device(device);
      e = cudaMalloc(&p, size);
    }
    if (e != cudaSuccess) {
      px_status_t st = px__cuda_fail(e, "cudaMalloc");
      px__leave(device, prev);
      if (st == PX_ERR_NOMEM)
        return px_set_error(PX_ERR_NOMEM, "CUDA device %d is out of memory allocating %zu bytes for %s",
                            device, size, name ? name : "?");
      return st;
    }
    b = (px__cblock_t *)px_malloc(sizeof *b, "cuda block");
    if (!b) {
      cudaFree(p);
      px__leave(device, prev);
      return PX_ERR_NOMEM;
    }
    b->ptr = p;
    b->size = size;
    b->device = device;
    pthread_mutex_lock(&px__mem_lock);
    px__stats.device_allocs++;
    pthread_mutex_unlock(&px__mem_lock);
  }
  px__leave(device, prev);

  b->name = name ? name : "cuda tensor";
  pthread_mutex_lock(&px__mem_lock);
  size_t h = px__bucket(b->ptr);
  b->next = px__live[h];
  px__live[h] = b;
  px__live_blocks[device]++;
  px__stats.allocs++;
  px__stats.live_bytes += (int64_t)b->size;
  if (px__stats.live_bytes > px__stats.peak_bytes) {
    px__stats.peak_bytes = px__stats.live_bytes;
    px__note_peak();
  }
  pthread_mutex_unlock(&px__mem_lock);
  *out = b->ptr;
  return PX_OK;
}

extern "C" void px__cuda_mem_free(void *p) {
  if (!p) return;
  pthread_mutex_lock(&px__mem_lock);
  px__cblock_t **link = &px__live[px__bucket(p)];
  while (*link && (*link)->ptr != p) link = &(*link)->next;
  px__cblock_t *b = *link;
  if (b) *link = b->next;
  pthread_mutex_unlock(&px__mem_lock);
  if (!b) {
    px_log(PX_LOG_ERROR, "px__cuda_mem_free: %p was not allocated by the CUDA allocator", p);
    return;
  }
  /* Kernels queued on any stream may still use the block: let them finish
   * before someone else can be handed it. Frees are rare (arenas live as
   * long as their model), so this costs nothing in a training step. */
  int prev;
  if (px__enter(b->device, &prev) == PX_OK) {
    cudaDeviceSynchronize();
    px__leave(b->device, prev);
  }
  int cls;
  px__mem_class_of(b->size, &cls);
  pthread_mutex_lock(&px__mem_lock);
  b->next = px__free_lists[b->device][cls];
  px__free_lists[b->device][cls] = b;
  px__stats.frees++;
  px__stats.live_bytes -= (int64_t)b->size;
  px__stats.cached_bytes += (int64_t)b->size;
  const int idle = --px__live_blocks[b->device] == 0;
  const int device = b->device;
  pthread_mutex_unlock(&px__mem_lock);
  if (idle && px__enter(device, &prev) == PX_OK) { /* nothing of the device lives: see above */
    px__trim_device(device);
    px__leave(device, prev);
  }
}

extern "C" px_status_t px__cuda_mem_zero(int device, void *p, size_t bytes) {
  int prev;
  PX_CHECK(px__enter(device, &prev));
  cudaError_t e = cudaMemset(p, 0, bytes);
  px__leave(device, prev);
  return e == cudaSuccess ? PX_OK : px__cuda_fail(e, "cudaMemset");
}

static px_status_t px__copy(int device, void *dst, const void *src, size_t bytes,
                            cudaMemcpyKind kind, const char *what) {
  int prev;
  PX_CHECK(px__enter(device, &prev));
  cudaError_t e = cudaMemcpy(dst, src, bytes, kind);
  px__leave(device, prev);
  return e == cudaSuccess ? PX_OK : px__cuda_fail(e, what);
}

extern "C" px_status_t px__cuda_mem_copy(int device, void *dst, const void *src, size_t bytes) {
  return px__copy(device, dst, src, bytes, cudaMemcpyDeviceToDevice, "cudaMemcpy (device to device)");
}

extern "C" px_status_t px__cuda_mem_upload(int device, void *dst, const void *host, size_t bytes) {
  return px__copy(device, dst, host, bytes, cudaMemcpyHostToDevice, "cudaMemcpy (host to device)");
}

extern "C" px_status_t px__cuda_mem_download(int device, void *host, const void *src, size_t bytes) {
  return px__copy(device, host, src, bytes, cudaMemcpyDeviceToHost, "cudaMemcpy (device to host)");
}

/* ---- public: accounting ------------------------------------------------------------- */

extern "C" void px_cuda_mem_stats(px_cuda_mem_stats_t *out) {
  pthread_mutex_lock(&px__mem_lock);
  *out = px__stats;
  pthread_mutex_unlock(&px__mem_lock);
}

extern "C" int px_cuda_mem_peak_uses(px_cuda_mem_use_t *out, int n) {
  if (!out || n <= 0) return 0;
  pthread_mutex_lock(&px__mem_lock);
  int k = px__npeak_uses;
  px_cuda_mem_use_t all[PX__MEM_PEAK_NAMES];
  memcpy(all, px__peak_uses, (size_t)k * sizeof *all);
  pthread_mutex_unlock(&px__mem_lock);
  /* largest first (insertion sort: 32 entries at most) */
  for (int i = 1; i < k; i++) {
    px_cuda_mem_use_t u = all[i];
    int j = i;
    for (; j > 0 && all[j - 1].bytes < u.bytes; j--) all[j] = all[j - 1];
    all[j] = u;
  }
  if (k > n) { /* the rest summed into the last entry */
    for (int i = n; i < k; i++) {
      all[n - 1].bytes += all[i].bytes;
      all[n - 1].blocks += all[i].blocks;
    }
    strcpy(all[n - 1].name, "(other names)");
    k = n;
  }
  memcpy(out, all, (size_t)k * sizeof *out);
  return k;
}

extern "C" px_status_t px_cuda_mem_trim(void) {
  for (int d = 0; d < PX__MEM_MAX_DEVICES; d++) {
    int any = 0;
    pthread_mutex_lock(&px__mem_lock);
    for (int c = 0; c < PX__MEM_CLASSES && !any; c++) any = px__free_lists[d][c] != NULL;
    pthread_mutex_unlock(&px__mem_lock);
    if (!any) continue;
    int prev;
    PX_CHECK(px__enter(d, &prev));
    px__trim_device(d);
    px__leave(d, prev);
  }
  return PX_OK;
}

extern "C" int px_cuda_host_pinned(const void *p) {
  cudaPointerAttributes a;
  if (!p || cudaPointerGetAttributes(&a, p) != cudaSuccess) {
    cudaGetLastError(); /* no driver or device: nothing is page-locked */
    return 0;
  }
  return a.type == cudaMemoryTypeHost;
}

extern "C" void *px_cuda_host_alloc(int device, size_t bytes) {
  void *p = NULL;
  int prev;
  if (bytes && px__enter(device, &prev) == PX_OK) {
    const cudaError_t e = cudaHostAlloc(&p, bytes, cudaHostAllocPortable);
    px__leave(device, prev);
    if (e == cudaSuccess) return p;
  }
  cudaGetLastError(); /* ordinary memory instead */
  return px_malloc_aligned(bytes, "pageable host buffer");
}

extern "C" void px_cuda_host_free(void *p) {
  if (!p) return;
  if (px_cuda_host_pinned(p)) cudaFreeHost(p);
  else px_free(p);
}
