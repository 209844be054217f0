/* The methods pxcoordd serves: every RPC of prunex.v1.Coordinator and
 * prunex.v1.Jobs, with the request type each one unpacks, and their
 * statistics for /metrics. The server is given coord_methods, whose every
 * entry is coord_rpc_timed: it counts the call and times the real handler
 * (coord_handlers) on the loop thread into atomics, which the HTTP thread
 * reads (http.h). */
#include <string.h>
#include <time.h>

#include "coord.h"
#include "http.h"

/* path, request type, kind, handler, short name, biggest request accepted
 * (checked before unpacking: a report with a few hundred layers is tens of
 * KB, a spec_yaml at most 1 MiB) */
#define COORD_METHOD_LIST(X)                                                                  \
  X(PX_RPC_REGISTER_NODE, register_node_request, UNARY, coord_rpc_register_node,             \
    "RegisterNode", 64 << 10)                                                                 \
  X(PX_RPC_HEARTBEAT, heartbeat_request, UNARY, coord_rpc_heartbeat, "Heartbeat", 64 << 10)   \
  X(PX_RPC_WATCH_ASSIGNMENTS, watch_assignments_request, SERVER_STREAM,                       \
    coord_rpc_watch_assignments, "WatchAssignments", 4 << 10)                                 \
  X(PX_RPC_KV_PUT, kv_put_request, UNARY, coord_rpc_kv_put, "KvPut", (256 << 10) + (4 << 10)) \
  X(PX_RPC_KV_GET, kv_get_request, UNARY, coord_rpc_kv_get, "KvGet", 4 << 10)                 \
  X(PX_RPC_REPORT_ITERATION, iteration_report, UNARY, coord_rpc_report_iteration,             \
    "ReportIteration", 1 << 20)                                                               \
  X(PX_RPC_REPORT_RANK_EXIT, rank_exit, UNARY, coord_rpc_report_rank_exit, "ReportRankExit",  \
    16 << 10)                                                                                 \
  X(PX_RPC_SUBMIT_JOB, submit_job_request, UNARY, coord_rpc_submit_job, "SubmitJob",          \
    (1 << 20) + (256 << 10))                                                                  \
  X(PX_RPC_GET_JOB, get_job_request, UNARY, coord_rpc_get_job, "GetJob", 4 << 10)             \
  X(PX_RPC_LIST_JOBS, list_jobs_request, UNARY, coord_rpc_list_jobs, "ListJobs", 4 << 10)     \
  X(PX_RPC_CANCEL_JOB, cancel_job_request, UNARY, coord_rpc_cancel_job, "CancelJob", 8 << 10) \
  X(PX_RPC_LIST_NODES, list_nodes_request, UNARY, coord_rpc_list_nodes, "ListNodes", 4 << 10) \
  X(PX_RPC_GET_ITERATIONS, get_iterations_request, UNARY, coord_rpc_get_iterations,           \
    "GetIterations", 4 << 10)                                                                 \
  X(PX_RPC_WATCH_JOB, watch_job_request, SERVER_STREAM, coord_rpc_watch_job, "WatchJob",      \
    4 << 10)                                                                                  \
  X(PX_RPC_DELETE_JOB, delete_job_request, UNARY, coord_rpc_delete_job, "DeleteJob", 4 << 10) \
  X(PX_RPC_APPEND_RANK_LOG, rank_log_chunk, UNARY, coord_rpc_append_rank_log, "AppendRankLog", \
    (256 << 10) + (4 << 10))                                                                  \
  X(PX_RPC_GET_RANK_LOG, get_rank_log_request, UNARY, coord_rpc_get_rank_log, "GetRankLog",   \
    4 << 10)                                                                                  \
  X(PX_RPC_GET_ACCOUNTING, get_accounting_request, UNARY, coord_rpc_get_accounting,           \
    "GetAccounting", 4 << 10)                                                                 \
  X(PX_RPC_HOLD_JOB, hold_job_request, UNARY, coord_rpc_hold_job, "HoldJob", 4 << 10)         \
  X(PX_RPC_RELEASE_JOB, release_job_request, UNARY, coord_rpc_release_job, "ReleaseJob",      \
    4 << 10)                                                                                  \
  X(PX_RPC_UPDATE_JOB, update_job_request, UNARY, coord_rpc_update_job, "UpdateJob", 4 << 10)

static void coord_rpc_timed(px_rpc_srv_call_t *call, const ProtobufCMessage *req, void *data);

#define COORD_REAL(path, type, kind, fn, name, max) \
  {path, &prunex__v1__##type##__descriptor, PX_RPC_METHOD_##kind, fn, max},
#define COORD_TIMED(path, type, kind, fn, name, max) \
  {path, &prunex__v1__##type##__descriptor, PX_RPC_METHOD_##kind, coord_rpc_timed, max},
#define COORD_STAT(path, type, kind, fn, name, max) {name, 0, 0, {0}},

static const px_rpc_method_t coord_handlers[] = {COORD_METHOD_LIST(COORD_REAL)};
const px_rpc_method_t coord_methods[] = {COORD_METHOD_LIST(COORD_TIMED)};
const int coord_nmethods = (int)(sizeof coord_methods / sizeof coord_methods[0]);
coord_rpc_stat_t coord_rpc_stats[] = {COORD_METHOD_LIST(COORD_STAT)};
const int coord_rpc_nstats = (int)(sizeof coord_rpc_stats / sizeof coord_rpc_stats[0]);

const double coord_rpc_bucket_le[COORD_RPC_NBUCKETS] = {
    0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5};

static int64_t coord_mono_ns(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

/* Every method's entry point: finds the method by its path (at most 20
 * short strcmps), runs its handler and records the time it took. The path
 * is matched before the handler runs: the call may be gone when it
 * returns. */
static void coord_rpc_timed(px_rpc_srv_call_t *call, const ProtobufCMessage *req, void *data) {
  const char *path = px_rpc_srv_method(call);
  int m = 0;
  while (m < coord_nmethods && strcmp(coord_handlers[m].path, path) != 0) m++;
  if (m == coord_nmethods) { /* cannot happen: the server routes registered paths only */
    px_rpc_srv_finish(call, PX_RPC_UNIMPLEMENTED, "%s: unknown method", path);
    return;
  }
  int64_t t0 = coord_mono_ns();
  coord_handlers[m].handler(call, req, data);
  int64_t dt = coord_mono_ns() - t0;
  coord_rpc_stat_t *s = &coord_rpc_stats[m];
  double secs = (double)dt / 1e9;
  int k = 0;
  while (k < COORD_RPC_NBUCKETS && secs > coord_rpc_bucket_le[k]) k++;
  atomic_fetch_add_explicit(&s->bucket[k], 1, memory_order_relaxed);
  atomic_fetch_add_explicit(&s->nanos, (uint64_t)(dt > 0 ? dt : 0), memory_order_relaxed);
  atomic_fetch_add_explicit(&s->calls, 1, memory_order_relaxed);
}

void coord_fail_internal(coord_t *c, px_rpc_srv_call_t *call) {
  /* a full disk (or quota) is the operator's to fix, not a bug */
  int full = px_store_full(c->db);
  px_store_rollback(c->db);
  px_log(PX_LOG_ERROR, "%s: %s", px_rpc_srv_method(call), px_last_error());
  if (full)
    px_rpc_srv_finish(call, PX_RPC_RESOURCE_EXHAUSTED,
                      "the coordinator's disk is full (nothing was changed; free space on the "
                      "database's file system and retry): %s",
                      px_last_error());
  else
    px_rpc_srv_finish(call, PX_RPC_INTERNAL, "%s", px_last_error());
}
