/* Internals shared by the rpc module's client and server halves: byte
 * buffer <-> protobuf-c message conversion, deadlines, and the per-thread
 * last status code. Not installed. */
#ifndef PX_RPC_INT_H
#define PX_RPC_INT_H

#include <grpc/byte_buffer.h>
#include <grpc/grpc.h>
#include <grpc/support/time.h>

#include "prunex/rpc.h"

/* Biggest message either side accepts (gRPC's default is 4 MiB). */
#define PX_RPC_MAX_MESSAGE (64 << 20)

/* Packs msg into a new byte buffer (caller destroys it); NULL on failure
 * with the last error set. */
grpc_byte_buffer *px__rpc_pack(const ProtobufCMessage *msg);

/* Copies a byte buffer out as one contiguous px_malloc'd block (NULL with
 * *len 0 for an empty buffer). PX_ERR_NOMEM on failure. */
px_status_t px__rpc_bytes(grpc_byte_buffer *bb, void **data, size_t *len);

/* Unpacks a byte buffer as desc (protobuf-c default allocator). NULL when
 * the bytes are not a valid message (or bb is NULL). */
ProtobufCMessage *px__rpc_unpack(const ProtobufCMessageDescriptor *desc, grpc_byte_buffer *bb);

/* Absolute monotonic deadline ms from now; < 0 gives infinity. */
gpr_timespec px__rpc_deadline(int64_t ms);

void px__rpc_set_last_code(px_rpc_code_t code);

/* grpc_init/grpc_shutdown, counted, so that every user of the module can
 * hold gRPC up for as long as it needs it. */
void px__rpc_grpc_ref(void);
void px__rpc_grpc_unref(void);

#endif
