/* Internal pieces of admm/ that strategy/ shares: the decide-and-broadcast
 * protocol of the control phase (DESIGN.md section 4, step 6), written once
 * for H-SADMM (px_hsadmm_decide) and the baselines (strategy.c), and the
 * clock and traffic readings both take their phase figures with. */
#ifndef PX_ADMM_INT_H
#define PX_ADMM_INT_H

#include <stddef.h>
#include <stdint.h>
#include <time.h>

#include "prunex/comm.h"
#include "prunex/px.h"

/* Monotonic seconds, for the phase times of H-SADMM and the strategies. */
static inline double px__admm_now(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* Bytes this rank sent and received so far on one tier of comm. */
static inline uint64_t px__admm_traffic(px_comm_t *c, int tier) {
  px_comm_traffic_t t;
  px_comm_traffic(c, &t);
  return t.sent[tier] + t.recv[tier];
}

/* Rank 0's side of a decision: fills buf[1..n) and sets buf[0] to 1 (stop)
 * or 0 (go on). An error is broadcast as buf[0] = -1 so that the other
 * ranks stop rather than wait. */
typedef px_status_t (*px__decide_fill_fn)(void *ctx, double *buf);

/* Rank 0 calls fill, then buf[0..n) is broadcast over world (rank 0's
 * decision on every rank). *stop is set from buf[0]. Fails on every rank
 * when rank 0's fill failed (rank 0 with fill's error, the others with
 * PX_ERR_PEER) or the data plane failed. */
px_status_t px__decide_broadcast(px_group_t *world, double *buf, size_t n,
                                 px__decide_fill_fn fill, void *ctx, int *stop);

#endif
