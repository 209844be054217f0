/* Typed wrappers over px_rpc_call / px_rpc_stream_start, one per RPC of
 * prunex.v1, so that callers never spell a method path or a descriptor. */
#include <limits.h>

#include "px_check.h"
#include "px_rpc_int.h"

#define PX__UNARY(fn, path, ReqT, RespT, resp_desc)                                      \
  px_status_t fn(px_rpc_channel_t *ch, const ReqT *req, int deadline_ms, RespT **out) {  \
    return px_rpc_call(ch, path, &req->base, &resp_desc, deadline_ms,                    \
                       (ProtobufCMessage **)out);                                        \
  }

PX__UNARY(px_rpc_register_node, PX_RPC_REGISTER_NODE, Prunex__V1__RegisterNodeRequest,
          Prunex__V1__RegisterNodeResponse, prunex__v1__register_node_response__descriptor)
PX__UNARY(px_rpc_heartbeat, PX_RPC_HEARTBEAT, Prunex__V1__HeartbeatRequest,
          Prunex__V1__HeartbeatResponse, prunex__v1__heartbeat_response__descriptor)
PX__UNARY(px_rpc_report_iteration, PX_RPC_REPORT_ITERATION, Prunex__V1__IterationReport,
          Prunex__V1__ControlDecision, prunex__v1__control_decision__descriptor)
PX__UNARY(px_rpc_submit_job, PX_RPC_SUBMIT_JOB, Prunex__V1__SubmitJobRequest,
          Prunex__V1__SubmitJobResponse, prunex__v1__submit_job_response__descriptor)
PX__UNARY(px_rpc_list_jobs, PX_RPC_LIST_JOBS, Prunex__V1__ListJobsRequest,
          Prunex__V1__ListJobsResponse, prunex__v1__list_jobs_response__descriptor)
PX__UNARY(px_rpc_list_nodes, PX_RPC_LIST_NODES, Prunex__V1__ListNodesRequest,
          Prunex__V1__ListNodesResponse, prunex__v1__list_nodes_response__descriptor)
PX__UNARY(px_rpc_get_iterations, PX_RPC_GET_ITERATIONS, Prunex__V1__GetIterationsRequest,
          Prunex__V1__GetIterationsResponse, prunex__v1__get_iterations_response__descriptor)
PX__UNARY(px_rpc_append_rank_log, PX_RPC_APPEND_RANK_LOG, Prunex__V1__RankLogChunk,
          Prunex__V1__RankLogChunkResponse, prunex__v1__rank_log_chunk_response__descriptor)
PX__UNARY(px_rpc_get_rank_log, PX_RPC_GET_RANK_LOG, Prunex__V1__GetRankLogRequest,
          Prunex__V1__RankLog, prunex__v1__rank_log__descriptor)
PX__UNARY(px_rpc_get_accounting, PX_RPC_GET_ACCOUNTING, Prunex__V1__GetAccountingRequest,
          Prunex__V1__GetAccountingResponse, prunex__v1__get_accounting_response__descriptor)
PX__UNARY(px_rpc_hold_job, PX_RPC_HOLD_JOB, Prunex__V1__HoldJobRequest, Prunex__V1__Job,
          prunex__v1__job__descriptor)
PX__UNARY(px_rpc_release_job, PX_RPC_RELEASE_JOB, Prunex__V1__ReleaseJobRequest, Prunex__V1__Job,
          prunex__v1__job__descriptor)
PX__UNARY(px_rpc_update_job, PX_RPC_UPDATE_JOB, Prunex__V1__UpdateJobRequest, Prunex__V1__Job,
          prunex__v1__job__descriptor)

px_status_t px_rpc_kv_put(px_rpc_channel_t *ch, const Prunex__V1__KvPutRequest *req,
                          int deadline_ms) {
  ProtobufCMessage *resp = NULL;
  PX_CHECK(px_rpc_call(ch, PX_RPC_KV_PUT, &req->base, &prunex__v1__kv_put_response__descriptor,
                       deadline_ms, &resp));
  px_rpc_message_free(resp);
  return PX_OK;
}

px_status_t px_rpc_kv_get(px_rpc_channel_t *ch, const Prunex__V1__KvGetRequest *req,
                          int deadline_ms, Prunex__V1__KvGetResponse **out) {
  int64_t d = deadline_ms > 0 ? deadline_ms : PX_RPC_DEFAULT_DEADLINE_MS;
  if (req->wait_ms > 0) d += req->wait_ms;
  if (d > INT_MAX) d = INT_MAX;
  return px_rpc_call(ch, PX_RPC_KV_GET, &req->base, &prunex__v1__kv_get_response__descriptor,
                     (int)d, (ProtobufCMessage **)out);
}

px_status_t px_rpc_report_rank_exit(px_rpc_channel_t *ch, const Prunex__V1__RankExit *req,
                                    int deadline_ms) {
  ProtobufCMessage *resp = NULL;
  PX_CHECK(px_rpc_call(ch, PX_RPC_REPORT_RANK_EXIT, &req->base,
                       &prunex__v1__rank_exit_response__descriptor, deadline_ms, &resp));
  px_rpc_message_free(resp);
  return PX_OK;
}

px_status_t px_rpc_get_job(px_rpc_channel_t *ch, const char *job_id, int deadline_ms,
                           Prunex__V1__Job **out) {
  return px_rpc_get_job_ex(ch, job_id, 0, deadline_ms, out);
}

px_status_t px_rpc_get_job_ex(px_rpc_channel_t *ch, const char *job_id, int with_spec_yaml,
                              int deadline_ms, Prunex__V1__Job **out) {
  Prunex__V1__GetJobRequest req = PRUNEX__V1__GET_JOB_REQUEST__INIT;
  req.job_id = (char *)job_id;
  req.include_spec_yaml = with_spec_yaml ? 1 : 0;
  return px_rpc_call(ch, PX_RPC_GET_JOB, &req.base, &prunex__v1__job__descriptor, deadline_ms,
                     (ProtobufCMessage **)out);
}

px_status_t px_rpc_cancel_job(px_rpc_channel_t *ch, const char *job_id, const char *reason,
                              int deadline_ms, Prunex__V1__CancelJobResponse **out) {
  Prunex__V1__CancelJobRequest req = PRUNEX__V1__CANCEL_JOB_REQUEST__INIT;
  req.job_id = (char *)job_id;
  req.reason = (char *)(reason ? reason : "");
  return px_rpc_call(ch, PX_RPC_CANCEL_JOB, &req.base,
                     &prunex__v1__cancel_job_response__descriptor, deadline_ms,
                     (ProtobufCMessage **)out);
}

px_status_t px_rpc_delete_job(px_rpc_channel_t *ch, const char *job_id, int deadline_ms) {
  Prunex__V1__DeleteJobRequest req = PRUNEX__V1__DELETE_JOB_REQUEST__INIT;
  req.job_id = (char *)job_id;
  ProtobufCMessage *resp = NULL;
  PX_CHECK(px_rpc_call(ch, PX_RPC_DELETE_JOB, &req.base,
                       &prunex__v1__delete_job_response__descriptor, deadline_ms, &resp));
  px_rpc_message_free(resp);
  return PX_OK;
}

px_status_t px_rpc_watch_assignments(px_rpc_channel_t *ch, const char *node_id,
                                     px_rpc_stream_t **out) {
  Prunex__V1__WatchAssignmentsRequest req = PRUNEX__V1__WATCH_ASSIGNMENTS_REQUEST__INIT;
  req.node_id = (char *)node_id;
  return px_rpc_stream_start(ch, PX_RPC_WATCH_ASSIGNMENTS, &req.base,
                             &prunex__v1__assignment__descriptor, out);
}

px_status_t px_rpc_read_assignment(px_rpc_stream_t *s, int timeout_ms,
                                   Prunex__V1__Assignment **out) {
  return px_rpc_stream_read(s, timeout_ms, (ProtobufCMessage **)out);
}

px_status_t px_rpc_watch_job(px_rpc_channel_t *ch, const char *job_id, px_rpc_stream_t **out) {
  Prunex__V1__WatchJobRequest req = PRUNEX__V1__WATCH_JOB_REQUEST__INIT;
  req.job_id = (char *)job_id;
  return px_rpc_stream_start(ch, PX_RPC_WATCH_JOB, &req.base, &prunex__v1__job_update__descriptor,
                             out);
}

px_status_t px_rpc_read_job_update(px_rpc_stream_t *s, int timeout_ms,
                                   Prunex__V1__JobUpdate **out) {
  return px_rpc_stream_read(s, timeout_ms, (ProtobufCMessage **)out);
}
