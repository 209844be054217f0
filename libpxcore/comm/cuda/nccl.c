/* The NCCL backend of the data plane: one NCCL communicator per group, for
 * collectives on device memory. Compiled only with the CUDA backend
 * (nccl_stub.c stands in otherwise).
 *
 * Communicators are created non-blocking (config.blocking = 0) and every
 * wait polls with a deadline: initialisation until the state leaves
 * ncclInProgress, collectives with cudaStreamQuery plus
 * ncclCommGetAsyncError; on a timeout or an asynchronous error the
 * communicator is aborted (ncclCommAbort), so no call can hang on a dead
 * peer. The CUDA device is set on every call because operations may run on
 * the communicator's progress thread.
 *
 * Ordering. The buffers are written by work queued on other streams (the
 * training ops' streams, which are blocking streams, and copies on the
 * legacy default stream), while NCCL runs on a non-blocking stream of its
 * own that is ordered with none of them. Each collective therefore first
 * records an event on the legacy default stream, which completes only after
 * all earlier work of the device's blocking streams, and makes the NCCL
 * stream wait for it: the collective starts after whatever produced its
 * input, with no host synchronisation. The host waits for its end. */
#include <cuda_runtime.h>
/* nccl.h declares a few functions as f() instead of f(void) */
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wstrict-prototypes"
#include <nccl.h>
#pragma GCC diagnostic pop
#include <sched.h>
#include <string.h>
#include <time.h>

#include "comm/comm_int.h"
#include "px_clock.h"
#include "px_cuda_int.h"
#include "prunex/comm_internal.h"

struct px__nccl {
  ncclComm_t comm;     /* NULL once aborted */
  cudaStream_t stream;
  cudaEvent_t queued;  /* recorded on the legacy default stream before each collective */
  int device;
  int rank, size;
};

int px__nccl_built(void) { return 1; }

static px_status_t px__nccl_error(ncclResult_t r, const char *what) {
  return px_set_error(PX_ERR_BACKEND, "%s: %s", what, ncclGetErrorString(r));
}

static px_status_t px__cuda_error(cudaError_t e, const char *what) {
  return px__cuda_to_status(e, what);
}

static void px__nccl_abort(px__nccl_t *n) {
  if (n->comm) ncclCommAbort(n->comm);
  n->comm = NULL;
}

/* Polls the communicator's state until it is no longer in progress. */
static px_status_t px__nccl_settle(px__nccl_t *n, ncclResult_t r, const char *what,
                                   double deadline) {
  while (r == ncclInProgress) {
    if (px__now_ms() > deadline) {
      px__nccl_abort(n);
      return px_set_error(PX_ERR_TIMEOUT, "%s: NCCL still in progress at the deadline", what);
    }
    sched_yield();
    ncclResult_t q = ncclCommGetAsyncError(n->comm, &r);
    if (q != ncclSuccess) r = q;
  }
  if (r != ncclSuccess) {
    px_status_t st = px__nccl_error(r, what);
    px__nccl_abort(n);
    return st;
  }
  return PX_OK;
}

/* Waits for the stream, watching for asynchronous NCCL errors. */
static px_status_t px__nccl_sync(px__nccl_t *n, const char *what, double deadline) {
  for (;;) {
    cudaError_t e = cudaStreamQuery(n->stream);
    if (e == cudaSuccess) return PX_OK;
    if (e != cudaErrorNotReady) return px__cuda_error(e, what);
    ncclResult_t ar = ncclSuccess;
    ncclCommGetAsyncError(n->comm, &ar);
    if (ar != ncclSuccess && ar != ncclInProgress) {
      px_status_t st = px__nccl_error(ar, what);
      px__nccl_abort(n);
      return st == PX_ERR_BACKEND ? PX_ERR_PEER : st;
    }
    if (px__now_ms() > deadline) {
      px__nccl_abort(n);
      return px_set_error(PX_ERR_TIMEOUT, "%s: not complete after the deadline (peer dead or stuck)",
                          what);
    }
    sched_yield();
  }
}

static px_status_t px__nccl_ready(px__nccl_t *n, const char *what) {
  if (!n->comm) return px_set_error(PX_ERR_STATE, "%s: the NCCL communicator was aborted", what);
  cudaError_t e = cudaSetDevice(n->device);
  if (e != cudaSuccess) return px__cuda_error(e, "cudaSetDevice");
  e = cudaEventRecord(n->queued, cudaStreamLegacy);
  if (e == cudaSuccess) e = cudaStreamWaitEvent(n->stream, n->queued, 0);
  if (e != cudaSuccess) return px__cuda_error(e, "ordering the collective after earlier work");
  return PX_OK;
}

px_status_t px__nccl_create(px_group_t *g, int device, px_kv_t *kv, const char *key,
                            int timeout_ms, px__nccl_t **out) {
  *out = NULL;
  cudaError_t e = cudaSetDevice(device);
  if (e != cudaSuccess) return px__cuda_error(e, "cudaSetDevice");
  ncclUniqueId id;
  if (g->rank == 0) {
    ncclResult_t r = ncclGetUniqueId(&id);
    if (r != ncclSuccess) return px__nccl_error(r, "ncclGetUniqueId");
    PX_CHECK(px_kv_put(kv, key, &id, sizeof id));
  } else {
    void *val = NULL;
    size_t len = 0;
    PX_CHECK(px_kv_get(kv, key, timeout_ms, &val, &len));
    if (len != sizeof id) {
      px_free(val);
      return px_set_error(PX_ERR_FORMAT, "NCCL unique id under '%s' has %zu bytes", key, len);
    }
    memcpy(&id, val, sizeof id);
    px_free(val);
  }
  px__nccl_t *n = px_calloc(1, sizeof *n, "comm.nccl");
  if (!n) return PX_ERR_NOMEM;
  n->device = device;
  n->rank = g->rank;
  n->size = g->size;
  ncclConfig_t cfg = NCCL_CONFIG_INITIALIZER;
  cfg.blocking = 0;
  double deadline = px__now_ms() + timeout_ms;
  ncclResult_t r = ncclCommInitRankConfig(&n->comm, g->size, id, g->rank, &cfg);
  if (r != ncclSuccess && r != ncclInProgress) {
    px_free(n);
    return px__nccl_error(r, "ncclCommInitRankConfig");
  }
  px_status_t st = px__nccl_settle(n, r, "ncclCommInitRankConfig", deadline);
  if (st < 0) {
    px_free(n);
    return st;
  }
  e = cudaStreamCreateWithFlags(&n->stream, cudaStreamNonBlocking);
  if (e == cudaSuccess) e = cudaEventCreateWithFlags(&n->queued, cudaEventDisableTiming);
  if (e != cudaSuccess) {
    st = px__cuda_error(e, "cudaStreamCreate");
    if (n->stream) cudaStreamDestroy(n->stream);
    px__nccl_abort(n);
    px_free(n);
    return st;
  }
  *out = n;
  return PX_OK;
}

void px__nccl_destroy(px__nccl_t *n, int abort) {
  if (!n) return;
  cudaSetDevice(n->device);
  if (n->comm) {
    if (abort) {
      px__nccl_abort(n);
    } else {
      ncclResult_t r = ncclCommFinalize(n->comm);
      if (px__nccl_settle(n, r, "ncclCommFinalize", px__now_ms() + 10000.0) == PX_OK) {
        ncclCommDestroy(n->comm);
        n->comm = NULL;
      }
    }
  }
  if (n->queued) cudaEventDestroy(n->queued);
  if (n->stream) cudaStreamDestroy(n->stream);
  px_free(n);
}

int px__nccl_is_device_ptr(const void *p) {
  if (!p) return 0;
  struct cudaPointerAttributes a;
  cudaError_t e = cudaPointerGetAttributes(&a, p);
  if (e != cudaSuccess) {
    cudaGetLastError();
    return 0;
  }
  return a.type == cudaMemoryTypeDevice || a.type == cudaMemoryTypeManaged;
}

static ncclDataType_t px__nccl_dtype(px_comm_dtype_t dt) {
  switch (dt) {
    case PX_COMM_F64: return ncclFloat64;
    case PX_COMM_U8: return ncclUint8;
    case PX_COMM_F32: break;
  }
  return ncclFloat32;
}

static ncclRedOp_t px__nccl_op(px_comm_op_t op) {
  switch (op) {
    case PX_COMM_AVG: return ncclAvg;
    case PX_COMM_MAX: return ncclMax;
    case PX_COMM_SUM: break;
  }
  return ncclSum;
}

px_status_t px__nccl_allreduce(px__nccl_t *n, const void *send, void *recv, size_t count,
                               px_comm_dtype_t dt, px_comm_op_t op, int timeout_ms) {
  PX_CHECK(px__nccl_ready(n, "ncclAllReduce"));
  double deadline = px__now_ms() + timeout_ms;
  ncclResult_t r = ncclAllReduce(send, recv, count, px__nccl_dtype(dt), px__nccl_op(op), n->comm,
                                 n->stream);
  PX_CHECK(px__nccl_settle(n, r, "ncclAllReduce", deadline));
  return px__nccl_sync(n, "ncclAllReduce", deadline);
}

px_status_t px__nccl_bcast(px__nccl_t *n, void *buf, size_t count, px_comm_dtype_t dt, int root,
                           int timeout_ms) {
  PX_CHECK(px__nccl_ready(n, "ncclBroadcast"));
  double deadline = px__now_ms() + timeout_ms;
  ncclResult_t r = ncclBroadcast(buf, buf, count, px__nccl_dtype(dt), root, n->comm, n->stream);
  PX_CHECK(px__nccl_settle(n, r, "ncclBroadcast", deadline));
  return px__nccl_sync(n, "ncclBroadcast", deadline);
}

/* One broadcast per rank inside a group call: NCCL's idiom for allgatherv. */
px_status_t px__nccl_allgatherv(px__nccl_t *n, const void *send, void *recv,
                                const size_t *counts, const size_t *offs, px_comm_dtype_t dt,
                                int timeout_ms) {
  PX_CHECK(px__nccl_ready(n, "ncclAllGatherv"));
  double deadline = px__now_ms() + timeout_ms;
  size_t esz = px_comm_dtype_size(dt);
  ncclResult_t r = ncclGroupStart();
  if (r != ncclSuccess) return px__nccl_error(r, "ncclGroupStart");
  for (int k = 0; k < n->size; k++) {
    char *dst = (char *)recv + offs[k] * esz;
    const void *src = k == n->rank ? send : dst;
    r = ncclBroadcast(src, dst, counts[k], px__nccl_dtype(dt), k, n->comm, n->stream);
    if (r != ncclSuccess && r != ncclInProgress) break;
  }
  ncclResult_t r2 = ncclGroupEnd();
  if (r == ncclSuccess || r == ncclInProgress) r = r2;
  PX_CHECK(px__nccl_settle(n, r, "ncclAllGatherv", deadline));
  return px__nccl_sync(n, "ncclAllGatherv", deadline);
}
