/* Stand-ins for the CUDA functions when libpxcore is built without CUDA:
 * each answers PX_ERR_NOT_BUILT so callers need no #ifdefs. */
#include "prunex/cuda.h"

int px_cuda_built(void) { return 0; }

px_status_t px_cuda_device_count(int *count) {
  *count = 0;
  return px_set_error(PX_ERR_NOT_BUILT, "libpxcore was built without CUDA (PX_WITH_CUDA=OFF)");
}

px_status_t px_cuda_device_info(int device, char *name, size_t name_len, uint64_t *memory_bytes) {
  (void)device; (void)name; (void)name_len; (void)memory_bytes;
  return px_set_error(PX_ERR_NOT_BUILT, "libpxcore was built without CUDA (PX_WITH_CUDA=OFF)");
}

px_status_t px_cuda_device_bus_id(int device, char *buf, size_t len) {
  (void)device;
  if (buf && len) buf[0] = '\0';
  return px_set_error(PX_ERR_NOT_BUILT, "libpxcore was built without CUDA (PX_WITH_CUDA=OFF)");
}

px_status_t px_cuda_selftest(int device) {
  (void)device;
  return px_set_error(PX_ERR_NOT_BUILT, "libpxcore was built without CUDA (PX_WITH_CUDA=OFF)");
}
