/* Control-plane client: the gRPC (C core) + protobuf-c glue that pxagent,
 * pxworker, pxctl and the tests use to talk to pxcoordd (proto/prunex.proto,
 * package prunex.v1, services Coordinator and Jobs).
 *
 * A channel (px_rpc_channel_t) is one HTTP/2 connection to HOST:PORT
 * (TLS when it has a CA file, plain text otherwise), shared by any number of
 * threads; a channel with a token sends it on every call. Unary calls block the calling
 * thread until the answer or the deadline; server-streaming calls
 * (WatchAssignments, WatchJob) return a stream handle read one message at a
 * time with a timeout. Every failure maps the gRPC status to a px_status_t
 * and sets the thread's last error to "METHOD: STATUS: details"; the gRPC
 * status code itself is px_rpc_last_code().
 *
 * Messages returned to the caller were unpacked by protobuf-c with its
 * default allocator: free them with px_rpc_message_free. */
#ifndef PRUNEX_RPC_H
#define PRUNEX_RPC_H

#include <stddef.h>

#include "prunex.pb-c.h"
#include "prunex/kv.h"
#include "prunex/px.h"

#ifdef __cplusplus
extern "C" {
#endif

/* gRPC status codes, with gRPC's numbers, so callers need no gRPC header. */
typedef enum {
  PX_RPC_OK = 0,
  PX_RPC_CANCELLED = 1,
  PX_RPC_UNKNOWN = 2,
  PX_RPC_INVALID_ARGUMENT = 3,
  PX_RPC_DEADLINE_EXCEEDED = 4,
  PX_RPC_NOT_FOUND = 5,
  PX_RPC_ALREADY_EXISTS = 6,
  PX_RPC_PERMISSION_DENIED = 7,
  PX_RPC_RESOURCE_EXHAUSTED = 8,
  PX_RPC_FAILED_PRECONDITION = 9,
  PX_RPC_ABORTED = 10,
  PX_RPC_OUT_OF_RANGE = 11,
  PX_RPC_UNIMPLEMENTED = 12,
  PX_RPC_INTERNAL = 13,
  PX_RPC_UNAVAILABLE = 14,
  PX_RPC_DATA_LOSS = 15,
  PX_RPC_UNAUTHENTICATED = 16,
} px_rpc_code_t;

/* "NOT_FOUND", ...; never NULL. */
const char *px_rpc_code_name(px_rpc_code_t code);

/* The px status a gRPC code maps to: INVALID_ARGUMENT, OUT_OF_RANGE,
 * NOT_FOUND, ALREADY_EXISTS -> PX_ERR_INVALID; DEADLINE_EXCEEDED ->
 * PX_ERR_TIMEOUT; FAILED_PRECONDITION, ABORTED -> PX_ERR_STATE; UNAVAILABLE,
 * CANCELLED -> PX_ERR_PEER; UNIMPLEMENTED -> PX_ERR_NOT_BUILT; others ->
 * PX_ERR_BACKEND. */
px_status_t px_rpc_code_status(px_rpc_code_t code);

/* Status code of the last call made on this thread: PX_RPC_OK after a
 * success, the server's (or gRPC's) code after a failed call, and
 * PX_RPC_UNKNOWN when the call failed locally before reaching gRPC. */
px_rpc_code_t px_rpc_last_code(void);

/* 1 when the last call on this thread failed in a way worth retrying: the
 * server was unreachable, restarting, slow or briefly unable to serve
 * (UNAVAILABLE, DEADLINE_EXCEEDED, CANCELLED, INTERNAL, RESOURCE_EXHAUSTED);
 * 0 after a success, a refusal, or a call that failed locally. */
int px_rpc_last_retryable(void);

/* Frees a message returned by this API; NULL is a no-op. */
void px_rpc_message_free(void *msg);

/* Default deadline of a unary call, used when deadline_ms <= 0. */
#define PX_RPC_DEFAULT_DEADLINE_MS 10000

/* Method paths: "/prunex.v1.<Service>/<Method>". */
#define PX_RPC_REGISTER_NODE "/prunex.v1.Coordinator/RegisterNode"
#define PX_RPC_HEARTBEAT "/prunex.v1.Coordinator/Heartbeat"
#define PX_RPC_WATCH_ASSIGNMENTS "/prunex.v1.Coordinator/WatchAssignments"
#define PX_RPC_KV_PUT "/prunex.v1.Coordinator/KvPut"
#define PX_RPC_KV_GET "/prunex.v1.Coordinator/KvGet"
#define PX_RPC_REPORT_ITERATION "/prunex.v1.Coordinator/ReportIteration"
#define PX_RPC_REPORT_RANK_EXIT "/prunex.v1.Coordinator/ReportRankExit"
#define PX_RPC_SUBMIT_JOB "/prunex.v1.Jobs/SubmitJob"
#define PX_RPC_GET_JOB "/prunex.v1.Jobs/GetJob"
#define PX_RPC_LIST_JOBS "/prunex.v1.Jobs/ListJobs"
#define PX_RPC_CANCEL_JOB "/prunex.v1.Jobs/CancelJob"
#define PX_RPC_LIST_NODES "/prunex.v1.Jobs/ListNodes"
#define PX_RPC_GET_ITERATIONS "/prunex.v1.Jobs/GetIterations"
#define PX_RPC_WATCH_JOB "/prunex.v1.Jobs/WatchJob"
#define PX_RPC_DELETE_JOB "/prunex.v1.Jobs/DeleteJob"
#define PX_RPC_APPEND_RANK_LOG "/prunex.v1.Coordinator/AppendRankLog"
#define PX_RPC_GET_RANK_LOG "/prunex.v1.Jobs/GetRankLog"
#define PX_RPC_GET_ACCOUNTING "/prunex.v1.Jobs/GetAccounting"
#define PX_RPC_HOLD_JOB "/prunex.v1.Jobs/HoldJob"
#define PX_RPC_RELEASE_JOB "/prunex.v1.Jobs/ReleaseJob"
#define PX_RPC_UPDATE_JOB "/prunex.v1.Jobs/UpdateJob"

/* ---- channel ---------------------------------------------------------- */

typedef struct px_rpc_channel px_rpc_channel_t;

/* Optional settings of a channel. NULL fields take the environment:
 *   ca_file  PEM CA bundle: the channel speaks TLS and verifies the server's
 *            certificate (and its name: the target's host) against it;
 *            NULL: $PRUNEX_CA; unset or "": plain text;
 *   token    bearer token sent as `authorization: Bearer TOKEN` on every
 *            call (printable ASCII, <= 4096 bytes); NULL: $PRUNEX_TOKEN;
 *            unset or "": none. */
typedef struct {
  const char *ca_file;
  const char *token;
} px_rpc_channel_options_t;

/* Creates a channel with options (opt may be NULL: all from the
 * environment). Fails with PX_ERR_IO / PX_ERR_INVALID when the CA file
 * cannot be read or holds no certificate, or the token is malformed. */
px_status_t px_rpc_channel_create_ex(const char *target, const px_rpc_channel_options_t *opt,
                                            px_rpc_channel_t **out);

/* Creates a channel to target ("HOST:PORT"; TLS and token from PRUNEX_CA and
 * PRUNEX_TOKEN, see px_rpc_channel_options_t). Connecting is lazy:
 * this does not fail when nobody listens (calls do, with UNAVAILABLE). The
 * caller owns *out (px_rpc_channel_destroy). Thread-safe once created. */
px_status_t px_rpc_channel_create(const char *target, px_rpc_channel_t **out);

/* Destroys the channel; streams opened on it must be destroyed first. */
void px_rpc_channel_destroy(px_rpc_channel_t *ch);

/* The target given at creation (owned by the channel). */
const char *px_rpc_channel_target(const px_rpc_channel_t *ch);

/* Waits up to timeout_ms for the channel to connect: PX_OK when connected,
 * PX_ERR_TIMEOUT otherwise. Calls do not need this; daemons use it to wait
 * for a coordinator that is starting. */
px_status_t px_rpc_channel_wait_ready(px_rpc_channel_t *ch, int timeout_ms);

/* ---- generic calls ---------------------------------------------------- */

/* Unary call of method with request req; on success *resp is the answer
 * unpacked as resp_desc (caller frees it, px_rpc_message_free). On failure
 * *resp is NULL, the status is mapped (px_rpc_code_status) and the message
 * names the method, the gRPC status and the server's details; a reply that
 * does not unpack as resp_desc is PX_ERR_FORMAT. */
px_status_t px_rpc_call(px_rpc_channel_t *ch, const char *method,
                               const ProtobufCMessage *req,
                               const ProtobufCMessageDescriptor *resp_desc, int deadline_ms,
                               ProtobufCMessage **resp);

/* The same with raw bytes on both sides (tests send malformed requests with
 * it). *resp is allocated with px_malloc (NULL when *resp_len is 0). */
px_status_t px_rpc_call_raw(px_rpc_channel_t *ch, const char *method, const void *req,
                                   size_t req_len, int deadline_ms, void **resp, size_t *resp_len);

/* ---- server streams --------------------------------------------------- */

typedef struct px_rpc_stream px_rpc_stream_t;

/* Starts a server-streaming call (no deadline: it lasts until the server
 * ends it or the caller cancels). The caller owns *out
 * (px_rpc_stream_destroy). A stream is read by one thread at a time. */
px_status_t px_rpc_stream_start(px_rpc_channel_t *ch, const char *method,
                                       const ProtobufCMessage *req,
                                       const ProtobufCMessageDescriptor *resp_desc,
                                       px_rpc_stream_t **out);

/* Waits up to timeout_ms (< 0: forever) for the next message:
 *   PX_OK, *msg set      a message (caller frees it, px_rpc_message_free);
 *   PX_OK, *msg NULL     the server ended the stream with status OK;
 *   PX_ERR_TIMEOUT       nothing arrived in time (the stream stays usable);
 *   other errors         the stream ended with that status (cancelled by
 *                        px_rpc_stream_cancel: PX_ERR_PEER, code CANCELLED).
 * After the end, further reads give the same end result. */
px_status_t px_rpc_stream_read(px_rpc_stream_t *s, int timeout_ms, ProtobufCMessage **msg);

/* Cancels the stream; a read blocked in another thread returns. Safe to
 * call from any thread while the stream exists. */
void px_rpc_stream_cancel(px_rpc_stream_t *s);

/* Cancels if needed and frees the stream. NULL is a no-op. */
void px_rpc_stream_destroy(px_rpc_stream_t *s);

/* ---- typed calls -------------------------------------------------------
 * One per RPC of prunex.v1. deadline_ms <= 0 takes the default. On success
 * the caller owns *out (px_rpc_message_free). */

/* Coordinator service (pxagent, pxworker). */
px_status_t px_rpc_register_node(px_rpc_channel_t *ch,
                                        const Prunex__V1__RegisterNodeRequest *req, int deadline_ms,
                                        Prunex__V1__RegisterNodeResponse **out);
px_status_t px_rpc_heartbeat(px_rpc_channel_t *ch, const Prunex__V1__HeartbeatRequest *req,
                                    int deadline_ms, Prunex__V1__HeartbeatResponse **out);
/* Opens the node's assignment stream; read it with px_rpc_read_assignment. */
px_status_t px_rpc_watch_assignments(px_rpc_channel_t *ch, const char *node_id,
                                            px_rpc_stream_t **out);
px_status_t px_rpc_read_assignment(px_rpc_stream_t *s, int timeout_ms,
                                          Prunex__V1__Assignment **out);
px_status_t px_rpc_kv_put(px_rpc_channel_t *ch, const Prunex__V1__KvPutRequest *req,
                                 int deadline_ms);
/* The call's deadline is req->wait_ms plus deadline_ms (or the default), so
 * that the server's wait ends first and answers found = false. */
px_status_t px_rpc_kv_get(px_rpc_channel_t *ch, const Prunex__V1__KvGetRequest *req,
                                 int deadline_ms, Prunex__V1__KvGetResponse **out);
px_status_t px_rpc_report_iteration(px_rpc_channel_t *ch,
                                           const Prunex__V1__IterationReport *req, int deadline_ms,
                                           Prunex__V1__ControlDecision **out);
px_status_t px_rpc_report_rank_exit(px_rpc_channel_t *ch, const Prunex__V1__RankExit *req,
                                           int deadline_ms);

/* Jobs service (pxctl). */
px_status_t px_rpc_submit_job(px_rpc_channel_t *ch, const Prunex__V1__SubmitJobRequest *req,
                                     int deadline_ms, Prunex__V1__SubmitJobResponse **out);
/* GetJob leaves Job.spec_yaml empty; _ex asks for it too. */
px_status_t px_rpc_get_job(px_rpc_channel_t *ch, const char *job_id, int deadline_ms,
                                  Prunex__V1__Job **out);
px_status_t px_rpc_get_job_ex(px_rpc_channel_t *ch, const char *job_id, int with_spec_yaml,
                                     int deadline_ms, Prunex__V1__Job **out);
px_status_t px_rpc_list_jobs(px_rpc_channel_t *ch, const Prunex__V1__ListJobsRequest *req,
                                    int deadline_ms, Prunex__V1__ListJobsResponse **out);
px_status_t px_rpc_cancel_job(px_rpc_channel_t *ch, const char *job_id, const char *reason,
                                     int deadline_ms, Prunex__V1__CancelJobResponse **out);
/* Removes a finished job and everything stored for it (owner or admin). */
px_status_t px_rpc_delete_job(px_rpc_channel_t *ch, const char *job_id, int deadline_ms);
px_status_t px_rpc_list_nodes(px_rpc_channel_t *ch, const Prunex__V1__ListNodesRequest *req,
                                     int deadline_ms, Prunex__V1__ListNodesResponse **out);
px_status_t px_rpc_get_iterations(px_rpc_channel_t *ch,
                                         const Prunex__V1__GetIterationsRequest *req,
                                         int deadline_ms, Prunex__V1__GetIterationsResponse **out);
/* Opens a job's update stream: the first message is the job as it is; the
 * stream ends (status OK) after the update that shows a terminal state. */
px_status_t px_rpc_watch_job(px_rpc_channel_t *ch, const char *job_id,
                                    px_rpc_stream_t **out);
px_status_t px_rpc_read_job_update(px_rpc_stream_t *s, int timeout_ms,
                                          Prunex__V1__JobUpdate **out);

/* Rank logs held by the coordinator: an agent uploads new bytes of a
 * rank's log (the answer says where the next chunk must start); pxctl reads
 * them back from any host. */
px_status_t px_rpc_append_rank_log(px_rpc_channel_t *ch, const Prunex__V1__RankLogChunk *req,
                                          int deadline_ms, Prunex__V1__RankLogChunkResponse **out);
px_status_t px_rpc_get_rank_log(px_rpc_channel_t *ch,
                                       const Prunex__V1__GetRankLogRequest *req, int deadline_ms,
                                       Prunex__V1__RankLog **out);
/* Accounting records and per-user totals (`pxctl acct`). */
px_status_t px_rpc_get_accounting(px_rpc_channel_t *ch,
                                         const Prunex__V1__GetAccountingRequest *req,
                                         int deadline_ms, Prunex__V1__GetAccountingResponse **out);
/* Queue controls (`pxctl hold`, `release`, `update`): the job as
 * it is afterwards into *out (px_rpc_message_free). Owner or admin. */
px_status_t px_rpc_hold_job(px_rpc_channel_t *ch, const Prunex__V1__HoldJobRequest *req,
                                   int deadline_ms, Prunex__V1__Job **out);
px_status_t px_rpc_release_job(px_rpc_channel_t *ch,
                                      const Prunex__V1__ReleaseJobRequest *req, int deadline_ms,
                                      Prunex__V1__Job **out);
px_status_t px_rpc_update_job(px_rpc_channel_t *ch, const Prunex__V1__UpdateJobRequest *req,
                                     int deadline_ms, Prunex__V1__Job **out);

/* Names of the enums as the proto spells them without the prefix
 * ("RUNNING", "READY", "START"); "?" for values outside the enum. */
const char *px_rpc_job_state_name(Prunex__V1__JobState s);
const char *px_rpc_node_state_name(Prunex__V1__NodeState s);

/* ---- rendezvous store --------------------------------------------------
 * A px_kv_t backed by the coordinator's KvPut/KvGet for job job_id at
 * target (HOST:PORT). get asks the coordinator to wait (it parks the call),
 * so waiting costs no polling; both retry while the coordinator is
 * unavailable (restarting), put for up to 10 s, get until its wait ends. */
px_status_t px_kv_open_coordinator(const char *target, const char *job_id, px_kv_t **out);

#ifdef __cplusplus
}
#endif
#endif
