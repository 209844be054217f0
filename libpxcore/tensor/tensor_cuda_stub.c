/* Stand-ins for tensor/cuda/ in a build without CUDA: device memory cannot
 * be had, so every call answers PX_ERR_NOT_BUILT (and the accounting reports
 * zeros). No CUDA pointer can exist, so freeing one is a no-op. */
#include <string.h>

#include "prunex/cuda.h"
#include "tensor/px_tensor_cuda.h"

static px_status_t px__not_built(const char *what) {
  return px_set_error(PX_ERR_NOT_BUILT, "%s: libpxcore was built without CUDA (PX_WITH_CUDA=OFF)",
                      what);
}

px_status_t px__cuda_mem_alloc(int device, size_t bytes, const char *name, void **out) {
  (void)device; (void)bytes; (void)name;
  *out = NULL;
  return px__not_built("CUDA tensor allocation");
}

void px__cuda_mem_free(void *p) { (void)p; }

px_status_t px__cuda_mem_zero(int device, void *p, size_t bytes) {
  (void)device; (void)p; (void)bytes;
  return px__not_built("CUDA tensor fill");
}

px_status_t px__cuda_mem_copy(int device, void *dst, const void *src, size_t bytes) {
  (void)device; (void)dst; (void)src; (void)bytes;
  return px__not_built("CUDA tensor copy");
}

px_status_t px__cuda_mem_upload(int device, void *dst, const void *host, size_t bytes) {
  (void)device; (void)dst; (void)host; (void)bytes;
  return px__not_built("CUDA tensor copy");
}

px_status_t px__cuda_mem_download(int device, void *host, const void *src, size_t bytes) {
  (void)device; (void)host; (void)src; (void)bytes;
  return px__not_built("CUDA tensor copy");
}

void px_cuda_mem_stats(px_cuda_mem_stats_t *out) { memset(out, 0, sizeof *out); }

int px_cuda_mem_peak_uses(px_cuda_mem_use_t *out, int n) {
  (void)out;
  (void)n;
  return 0;
}

px_status_t px_cuda_mem_trim(void) { return PX_OK; }

void *px_cuda_host_alloc(int device, size_t bytes) {
  (void)device;
  return px_malloc_aligned(bytes, "pageable host buffer");
}

void px_cuda_host_free(void *p) { px_free(p); }

int px_cuda_host_pinned(const void *p) {
  (void)p;
  return 0;
}
