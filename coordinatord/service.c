/* The methods pxcoordd serves: every RPC of prunex.v1.Coordinator and
 * prunex.v1.Jobs, with the request type each one unpacks and the biggest
 * request each accepts (checked before unpacking: a report with a few
 * hundred layers is tens of KB, a spec_yaml at most 1 MiB). */
#include "coord.h"

const px_rpc_method_t coord_methods[] = {
    {PX_RPC_REGISTER_NODE, &prunex__v1__register_node_request__descriptor, PX_RPC_METHOD_UNARY,
     coord_rpc_register_node, 64 << 10},
    {PX_RPC_HEARTBEAT, &prunex__v1__heartbeat_request__descriptor, PX_RPC_METHOD_UNARY,
     coord_rpc_heartbeat, 64 << 10},
    {PX_RPC_WATCH_ASSIGNMENTS, &prunex__v1__watch_assignments_request__descriptor,
     PX_RPC_METHOD_SERVER_STREAM, coord_rpc_watch_assignments, 4 << 10},
    {PX_RPC_KV_PUT, &prunex__v1__kv_put_request__descriptor, PX_RPC_METHOD_UNARY,
     coord_rpc_kv_put, (256 << 10) + (4 << 10)},
    {PX_RPC_KV_GET, &prunex__v1__kv_get_request__descriptor, PX_RPC_METHOD_UNARY,
     coord_rpc_kv_get, 4 << 10},
    {PX_RPC_REPORT_ITERATION, &prunex__v1__iteration_report__descriptor, PX_RPC_METHOD_UNARY,
     coord_rpc_report_iteration, 1 << 20},
    {PX_RPC_REPORT_RANK_EXIT, &prunex__v1__rank_exit__descriptor, PX_RPC_METHOD_UNARY,
     coord_rpc_report_rank_exit, 16 << 10},
    {PX_RPC_SUBMIT_JOB, &prunex__v1__submit_job_request__descriptor, PX_RPC_METHOD_UNARY,
     coord_rpc_submit_job, (1 << 20) + (256 << 10)},
    {PX_RPC_GET_JOB, &prunex__v1__get_job_request__descriptor, PX_RPC_METHOD_UNARY,
     coord_rpc_get_job, 4 << 10},
    {PX_RPC_LIST_JOBS, &prunex__v1__list_jobs_request__descriptor, PX_RPC_METHOD_UNARY,
     coord_rpc_list_jobs, 4 << 10},
    {PX_RPC_CANCEL_JOB, &prunex__v1__cancel_job_request__descriptor, PX_RPC_METHOD_UNARY,
     coord_rpc_cancel_job, 8 << 10},
    {PX_RPC_LIST_NODES, &prunex__v1__list_nodes_request__descriptor, PX_RPC_METHOD_UNARY,
     coord_rpc_list_nodes, 4 << 10},
    {PX_RPC_GET_ITERATIONS, &prunex__v1__get_iterations_request__descriptor, PX_RPC_METHOD_UNARY,
     coord_rpc_get_iterations, 4 << 10},
    {PX_RPC_WATCH_JOB, &prunex__v1__watch_job_request__descriptor, PX_RPC_METHOD_SERVER_STREAM,
     coord_rpc_watch_job, 4 << 10},
    {PX_RPC_DELETE_JOB, &prunex__v1__delete_job_request__descriptor, PX_RPC_METHOD_UNARY,
     coord_rpc_delete_job, 4 << 10},
    {PX_RPC_APPEND_RANK_LOG, &prunex__v1__rank_log_chunk__descriptor, PX_RPC_METHOD_UNARY,
     coord_rpc_append_rank_log, (256 << 10) + (4 << 10)},
    {PX_RPC_GET_RANK_LOG, &prunex__v1__get_rank_log_request__descriptor, PX_RPC_METHOD_UNARY,
     coord_rpc_get_rank_log, 4 << 10},
};
const int coord_nmethods = (int)(sizeof coord_methods / sizeof coord_methods[0]);

void coord_fail_internal(coord_t *c, px_rpc_srv_call_t *call) {
  px_store_rollback(c->db);
  px_log(PX_LOG_ERROR, "%s: %s", px_rpc_srv_method(call), px_last_error());
  px_rpc_srv_finish(call, PX_RPC_INTERNAL, "%s", px_last_error());
}
