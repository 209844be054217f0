/* The decide-and-broadcast protocol of the control phase: rank 0 asks its
 * controller, everyone receives the same answer (admm_int.h). One place, so
 * that H-SADMM and the baseline strategies stop the same way when rank 0's
 * controller fails. */
#include "admm/admm_int.h"
#include "px_check.h"
#include "prunex/comm_internal.h"

px_status_t px__decide_broadcast(px_group_t *world, double *buf, size_t n,
                                 px__decide_fill_fn fill, void *ctx, int *stop) {
  if (px_group_rank(world) == 0) {
    px_status_t st = fill(ctx, buf);
    if (st < 0) {
      /* tell the others to stop rather than leave them waiting */
      buf[0] = -1;
      px_comm_broadcast(world, buf, n, PX_COMM_F64, 0);
      return st;
    }
  }
  PX_CHECK(px_comm_broadcast(world, buf, n, PX_COMM_F64, 0));
  if (buf[0] < 0) return px_set_error(PX_ERR_PEER, "rank 0's controller failed: stopping");
  *stop = buf[0] >= PX_HSADMM_SUSPEND ? PX_HSADMM_SUSPEND : buf[0] > 0 ? PX_HSADMM_STOP : 0;
  return PX_OK;
}
