/* Stand-ins for the NCCL backend when libpxcore is built without CUDA: the
 * communicator refuses opts.nccl = 1 with PX_ERR_NOT_BUILT and never sees a
 * device pointer, so only creation can reach these. */
#include "comm/comm_int.h"

#define PX__NO_NCCL "libpxcore was built without CUDA (PX_WITH_CUDA=OFF): no NCCL backend"

int px__nccl_built(void) { return 0; }

px_status_t px__nccl_create(px_group_t *g, int device, px_kv_t *kv, const char *key,
                            int timeout_ms, px__nccl_t **out) {
  (void)g; (void)device; (void)kv; (void)key; (void)timeout_ms;
  *out = NULL;
  return px_set_error(PX_ERR_NOT_BUILT, PX__NO_NCCL);
}

void px__nccl_destroy(px__nccl_t *n, int abort) { (void)n; (void)abort; }

int px__nccl_is_device_ptr(const void *p) { (void)p; return 0; }

px_status_t px__nccl_allreduce(px__nccl_t *n, const void *send, void *recv, size_t count,
                               px_comm_dtype_t dt, px_comm_op_t op, int timeout_ms) {
  (void)n; (void)send; (void)recv; (void)count; (void)dt; (void)op; (void)timeout_ms;
  return px_set_error(PX_ERR_NOT_BUILT, PX__NO_NCCL);
}

px_status_t px__nccl_bcast(px__nccl_t *n, void *buf, size_t count, px_comm_dtype_t dt, int root,
                           int timeout_ms) {
  (void)n; (void)buf; (void)count; (void)dt; (void)root; (void)timeout_ms;
  return px_set_error(PX_ERR_NOT_BUILT, PX__NO_NCCL);
}

px_status_t px__nccl_allgatherv(px__nccl_t *n, const void *send, void *recv,
                                const size_t *counts, const size_t *offs, px_comm_dtype_t dt,
                                int timeout_ms) {
  (void)n; (void)send; (void)recv; (void)counts; (void)offs; (void)dt; (void)timeout_ms;
  return px_set_error(PX_ERR_NOT_BUILT, PX__NO_NCCL);
}
