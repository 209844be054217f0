/* A gRPC server on a libuv loop, for the daemons (pxcoordd): registers the
 * methods, runs the completion queue on its own thread and hands every
 * completion to the loop thread through a uv_async_t (a 1.51 completion
 * queue has no file descriptor to poll). Handlers run on the loop thread, one
 * at a time, and may keep a call open (a parked KvGet, a watch stream) for as
 * long as they like without blocking the loop.
 *
 * Call lifetime: a handler receives a px_rpc_srv_call_t and must end it
 * exactly once with px_rpc_srv_reply (unary success) or px_rpc_srv_finish
 * (a status; for streams after its messages); the call pointer is invalid to
 * the handler from then on. A call kept open must have a cancel callback
 * (px_rpc_srv_on_cancel): it runs when the client leaves, its deadline passes
 * or the server shuts down, and must end the call (px_rpc_srv_finish is then
 * a no-op on the wire).
 *
 * Internal, for pxcoordd (which links the static pxcore_internal); it uses
 * libuv types, so a program using it needs libuv's headers. */
#ifndef PX_RPC_SERVER_H
#define PX_RPC_SERVER_H

#include <stdint.h>
#include <uv.h>

#include "prunex/rpc.h"

typedef struct px_rpc_server px_rpc_server_t;
typedef struct px_rpc_srv_call px_rpc_srv_call_t;

typedef enum { PX_RPC_METHOD_UNARY = 0, PX_RPC_METHOD_SERVER_STREAM = 1 } px_rpc_method_kind_t;

/* req is the unpacked request, owned by the server: it is freed when the
 * handler returns, so copy what must outlive the handler. Requests that do
 * not unpack are answered INVALID_ARGUMENT before any handler runs. */
typedef void (*px_rpc_handler_fn)(px_rpc_srv_call_t *call, const ProtobufCMessage *req,
                                  void *data);

typedef struct {
  const char *path;                         /* "/prunex.v1.Jobs/SubmitJob" */
  const ProtobufCMessageDescriptor *request;
  px_rpc_method_kind_t kind;
  px_rpc_handler_fn handler;
  int max_request;  /* biggest request accepted, bytes; 0: the server's limit.
                     * Bigger ones are answered RESOURCE_EXHAUSTED unread. */
} px_rpc_method_t;

/* Runs on the loop thread for every call before its handler, after the
 * request unpacked: returns 1 to let the handler run, or 0 after ending the
 * call itself (px_rpc_srv_finish with UNAUTHENTICATED, PERMISSION_DENIED...). */
typedef int (*px_rpc_authorize_fn)(px_rpc_srv_call_t *call, const ProtobufCMessage *req,
                                   void *data);

/* Optional settings of px_rpc_server_create_ex; zero means the default. */
typedef struct {
  const char *tls_cert_file;   /* PEM certificate chain; with tls_key_file: TLS, else plain text */
  const char *tls_key_file;    /* PEM private key */
  int max_receive;             /* biggest message accepted, bytes (default PX_RPC_MAX_MESSAGE) */
  px_rpc_authorize_fn authorize;
} px_rpc_server_options_t;

/* Creates the server, binds listen ("HOST:PORT"; port 0 picks a free one;
 * no SO_REUSEPORT, so a busy port is an error) and starts serving on loop.
 * methods must outlive the server; data is passed to every handler.
 * Unregistered methods are answered UNIMPLEMENTED. Fails with PX_ERR_IO when
 * the address cannot be bound; on failure the server's memory is released
 * by a handle close callback, so run the loop once before closing it. */
px_status_t px_rpc_server_create(uv_loop_t *loop, const char *listen,
                                        const px_rpc_method_t *methods, int nmethods, void *data,
                                        px_rpc_server_t **out);

/* The same with options (opt may be NULL). A certificate or key that cannot
 * be read or used fails with PX_ERR_IO or PX_ERR_INVALID naming the file. */
px_status_t px_rpc_server_create_ex(uv_loop_t *loop, const char *listen,
                                           const px_rpc_method_t *methods, int nmethods, void *data,
                                           const px_rpc_server_options_t *opt,
                                           px_rpc_server_t **out);

/* The bound port. */
int px_rpc_server_port(const px_rpc_server_t *srv);

/* Stops accepting calls, cancels the open ones (their cancel callbacks
 * run) and, once gRPC has released everything, calls done on the loop
 * thread; done may call px_rpc_server_destroy. */
void px_rpc_server_shutdown(px_rpc_server_t *srv, void (*done)(px_rpc_server_t *, void *),
                                   void *arg);

/* Frees a server whose shutdown has completed. */
void px_rpc_server_destroy(px_rpc_server_t *srv);

/* ---- calls (loop thread only) ------------------------------------------- */

/* Method path of the call. */
const char *px_rpc_srv_method(const px_rpc_srv_call_t *call);

/* Milliseconds until the client's deadline (INT64_MAX when it has none). */
int64_t px_rpc_srv_remaining_ms(const px_rpc_srv_call_t *call);

/* Copies the value of the request's metadata entry key (lower case, e.g.
 * "authorization") into buf, NUL-terminated: its length, or -1 when the
 * entry is absent or does not fit in cap. */
int px_rpc_srv_metadata(const px_rpc_srv_call_t *call, const char *key, char *buf,
                               size_t cap);

/* Ends a unary call with msg and status OK. */
px_status_t px_rpc_srv_reply(px_rpc_srv_call_t *call, const ProtobufCMessage *msg);

/* Queues one message of a server stream (packed now: msg may be freed at
 * once). Messages go out in order, one at a time. PX_ERR_PEER when the
 * client has left (the call stays valid and must still be ended). */
px_status_t px_rpc_srv_send(px_rpc_srv_call_t *call, const ProtobufCMessage *msg);

/* Ends the call with a status (after the queued messages of a stream).
 * Logged at debug level. */
px_status_t px_rpc_srv_finish(px_rpc_srv_call_t *call, px_rpc_code_t code, const char *fmt,
                                     ...) __attribute__((format(printf, 3, 4)));

/* Registers the callback for a call kept open past its handler. */
void px_rpc_srv_on_cancel(px_rpc_srv_call_t *call, void (*cb)(px_rpc_srv_call_t *, void *),
                                 void *arg);

#endif
