/* What both halves of the rpc module need: status code names and mapping,
 * protobuf-c <-> gRPC byte buffers, deadlines, the gRPC library reference. */
#include <string.h>

#include <grpc/byte_buffer_reader.h>
#include <grpc/slice.h>

#include "px_check.h"
#include "px_rpc_int.h"

static _Thread_local px_rpc_code_t px__last_code = PX_RPC_OK;

px_rpc_code_t px_rpc_last_code(void) { return px__last_code; }

int px_rpc_last_retryable(void) {
  px_rpc_code_t c = px__last_code;
  return c == PX_RPC_UNAVAILABLE || c == PX_RPC_DEADLINE_EXCEEDED || c == PX_RPC_CANCELLED ||
         c == PX_RPC_INTERNAL || c == PX_RPC_RESOURCE_EXHAUSTED;
}
void px__rpc_set_last_code(px_rpc_code_t code) { px__last_code = code; }

const char *px_rpc_code_name(px_rpc_code_t code) {
  static const char *names[] = {
      "OK",        "CANCELLED",          "UNKNOWN",          "INVALID_ARGUMENT",
      "DEADLINE_EXCEEDED", "NOT_FOUND",  "ALREADY_EXISTS",   "PERMISSION_DENIED",
      "RESOURCE_EXHAUSTED", "FAILED_PRECONDITION", "ABORTED", "OUT_OF_RANGE",
      "UNIMPLEMENTED", "INTERNAL",       "UNAVAILABLE",      "DATA_LOSS",
      "UNAUTHENTICATED",
  };
  if ((int)code < 0 || (size_t)code >= sizeof names / sizeof names[0]) return "UNKNOWN_CODE";
  return names[code];
}

px_status_t px_rpc_code_status(px_rpc_code_t code) {
  switch (code) {
    case PX_RPC_OK: return PX_OK;
    case PX_RPC_INVALID_ARGUMENT:
    case PX_RPC_OUT_OF_RANGE:
    case PX_RPC_NOT_FOUND:
    case PX_RPC_ALREADY_EXISTS: return PX_ERR_INVALID;
    case PX_RPC_DEADLINE_EXCEEDED: return PX_ERR_TIMEOUT;
    case PX_RPC_FAILED_PRECONDITION:
    case PX_RPC_ABORTED: return PX_ERR_STATE;
    case PX_RPC_UNAVAILABLE:
    case PX_RPC_CANCELLED: return PX_ERR_PEER;
    case PX_RPC_UNIMPLEMENTED: return PX_ERR_NOT_BUILT;
    default: return PX_ERR_BACKEND;
  }
}

void px_rpc_message_free(void *msg) {
  if (msg) protobuf_c_message_free_unpacked((ProtobufCMessage *)msg, NULL);
}

const char *px_rpc_job_state_name(Prunex__V1__JobState s) {
  static const char *names[] = {"UNSPECIFIED", "PENDING",   "SCHEDULED", "RUNNING",
                                "SUCCEEDED",   "FAILED",    "CANCELLED", "TIMEOUT"};
  return (int)s >= 0 && (size_t)s < sizeof names / sizeof names[0] ? names[s] : "?";
}

const char *px_rpc_node_state_name(Prunex__V1__NodeState s) {
  static const char *names[] = {"UNSPECIFIED", "READY", "BUSY", "LOST"};
  return (int)s >= 0 && (size_t)s < sizeof names / sizeof names[0] ? names[s] : "?";
}

grpc_byte_buffer *px__rpc_pack(const ProtobufCMessage *msg) {
  size_t n = protobuf_c_message_get_packed_size(msg);
  grpc_slice slice = grpc_slice_malloc(n);
  size_t w = protobuf_c_message_pack(msg, GRPC_SLICE_START_PTR(slice));
  if (w != n) {
    grpc_slice_unref(slice);
    px_set_error(PX_ERR_INTERNAL, "packing %s: %zu bytes written, %zu expected",
                 msg->descriptor->name, w, n);
    return NULL;
  }
  grpc_byte_buffer *bb = grpc_raw_byte_buffer_create(&slice, 1);
  grpc_slice_unref(slice);
  return bb;
}

px_status_t px__rpc_bytes(grpc_byte_buffer *bb, void **data, size_t *len) {
  *data = NULL;
  *len = 0;
  if (!bb) return PX_OK;
  grpc_byte_buffer_reader reader;
  if (!grpc_byte_buffer_reader_init(&reader, bb))
    return px_set_error(PX_ERR_FORMAT, "cannot read a gRPC message (bad compression?)");
  grpc_slice all = grpc_byte_buffer_reader_readall(&reader);
  grpc_byte_buffer_reader_destroy(&reader);
  size_t n = GRPC_SLICE_LENGTH(all);
  if (n > 0) {
    *data = px_malloc(n, "rpc.bytes");
    if (!*data) {
      grpc_slice_unref(all);
      return PX_ERR_NOMEM;
    }
    memcpy(*data, GRPC_SLICE_START_PTR(all), n);
  }
  *len = n;
  grpc_slice_unref(all);
  return PX_OK;
}

ProtobufCMessage *px__rpc_unpack(const ProtobufCMessageDescriptor *desc, grpc_byte_buffer *bb) {
  if (!bb) return NULL;
  grpc_byte_buffer_reader reader;
  if (!grpc_byte_buffer_reader_init(&reader, bb)) return NULL;
  grpc_slice all = grpc_byte_buffer_reader_readall(&reader);
  grpc_byte_buffer_reader_destroy(&reader);
  ProtobufCMessage *msg =
      protobuf_c_message_unpack(desc, NULL, GRPC_SLICE_LENGTH(all), GRPC_SLICE_START_PTR(all));
  grpc_slice_unref(all);
  return msg;
}

gpr_timespec px__rpc_deadline(int64_t ms) {
  if (ms < 0) return gpr_inf_future(GPR_CLOCK_MONOTONIC);
  return gpr_time_add(gpr_now(GPR_CLOCK_MONOTONIC), gpr_time_from_millis(ms, GPR_TIMESPAN));
}

void px__rpc_grpc_ref(void) { grpc_init(); }
void px__rpc_grpc_unref(void) { grpc_shutdown(); }
