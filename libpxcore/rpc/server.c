/* The daemons' gRPC server on a libuv loop (px_rpc_server.h).
 *
 * Threads: gRPC does its I/O only while a thread sits in
 * grpc_completion_queue_next, so one dedicated thread does nothing else; it
 * pushes each completion ({tag, success}) onto a mutex-protected list and
 * wakes the loop with uv_async_send, the only thread-safe libuv call (it
 * coalesces, so the loop drains the whole list each time). Everything else,
 * handlers included, runs on the loop thread.
 *
 * Each call has up to three batches in flight: RECV_CLOSE_ON_SERVER, posted
 * as soon as the call arrives so that a client leaving is noticed even while
 * the call is parked; one send (a stream message); and the final status
 * (with the last message and the initial metadata when they are still due,
 * so a unary reply is one batch). The call is freed when its owner has ended
 * it and no batch is in flight.
 *
 * Security: with a certificate and key the port speaks TLS (gRPC core's SSL
 * server credentials, no client certificates); each method may cap its
 * request size, checked before the request is unpacked; an authorize hook
 * sees every call before its handler and may end it. */
#include <assert.h>
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include <grpc/grpc_security.h>
#include <grpc/slice.h>
#include <grpc/support/alloc.h>

#include "px_check.h"
#include "px_rpc_int.h"
#include "prunex/rpc_server.h"

#define PX__SLOTS_PER_METHOD 4
#define PX__GENERIC_SLOTS 2

typedef enum { PX__T_REQUEST, PX__T_CLOSE, PX__T_SEND, PX__T_STATUS, PX__T_SHUTDOWN } px__tkind_t;

typedef struct {
  px__tkind_t kind;
  void *obj;
} px__tag_t;

typedef struct px__msg {
  grpc_byte_buffer *bb;
  struct px__msg *next;
} px__msg_t;

struct px_rpc_srv_call {
  px_rpc_server_t *srv;
  int method;                 /* index into srv->methods; -1: unregistered method */
  grpc_call *call;
  gpr_timespec deadline;
  grpc_metadata_array req_md;
  grpc_call_details details;  /* unregistered methods only */
  grpc_byte_buffer *payload;
  px__tag_t t_req, t_close, t_send, t_status;
  int close_cancelled;
  int closed, close_pending, send_pending, status_pending;
  int md_sent, broken, ended, status_queued, status_sent;
  grpc_status_code code;
  char *status_msg;
  grpc_slice status_slice;
  px__msg_t *q_head, *q_tail;
  grpc_byte_buffer *in_flight;
  void (*cancel_cb)(px_rpc_srv_call_t *, void *);
  void *cancel_arg;
};

typedef struct {
  void *tag;
  int success;
} px__event_t;

struct px_rpc_server {
  uv_loop_t *loop;
  grpc_server *server;
  grpc_completion_queue *cq;
  const px_rpc_method_t *methods;
  int nmethods;
  void **handles;
  void *data;
  int port;
  uv_thread_t thread;
  int thread_started;
  uv_async_t async;
  uv_mutex_t mu;
  px__event_t *events; /* guarded by mu */
  size_t nev, cap;
  int cq_done;         /* guarded by mu: the queue thread has exited */
  int shutting_down, finalized;
  px__tag_t t_shutdown;
  void (*done)(px_rpc_server_t *, void *);
  void *done_arg;
  int live_calls;
  int max_receive;
  px_rpc_authorize_fn authorize;
};

/* ---- the completion-queue thread ----------------------------------------- */

static void px__push(px_rpc_server_t *srv, void *tag, int success, int last) {
  uv_mutex_lock(&srv->mu);
  if (tag) {
    if (srv->nev == srv->cap) {
      size_t cap = srv->cap ? srv->cap * 2 : 64;
      /* On failure the completion is lost: logged, as the process can hardly
       * go on serving anyway. */
      px__event_t *e = px_realloc(srv->events, cap * sizeof *e, "rpc.server.events");
      if (!e) {
        uv_mutex_unlock(&srv->mu);
        px_log(PX_LOG_ERROR, "rpc server: out of memory queueing a completion");
        return;
      }
      srv->events = e;
      srv->cap = cap;
    }
    srv->events[srv->nev++] = (px__event_t){tag, success};
  }
  if (last) srv->cq_done = 1;
  uv_mutex_unlock(&srv->mu);
  uv_async_send(&srv->async);
}

static void px__cq_thread(void *arg) {
  px_rpc_server_t *srv = arg;
  for (;;) {
    grpc_event ev = grpc_completion_queue_next(srv->cq, gpr_inf_future(GPR_CLOCK_MONOTONIC), NULL);
    if (ev.type == GRPC_QUEUE_SHUTDOWN) break;
    if (ev.type == GRPC_OP_COMPLETE) px__push(srv, ev.tag, ev.success, 0);
  }
  px__push(srv, NULL, 0, 1);
}

/* ---- calls ----------------------------------------------------------------- */

static px_status_t px__post(px_rpc_server_t *srv, int method) {
  px_rpc_srv_call_t *c = px_calloc(1, sizeof *c, "rpc.server.call");
  if (!c) return PX_ERR_NOMEM;
  c->srv = srv;
  c->method = method;
  c->t_req = (px__tag_t){PX__T_REQUEST, c};
  c->t_close = (px__tag_t){PX__T_CLOSE, c};
  c->t_send = (px__tag_t){PX__T_SEND, c};
  c->t_status = (px__tag_t){PX__T_STATUS, c};
  c->status_slice = grpc_empty_slice();
  grpc_metadata_array_init(&c->req_md);
  grpc_call_details_init(&c->details);
  grpc_call_error err;
  if (method >= 0)
    err = grpc_server_request_registered_call(srv->server, srv->handles[method], &c->call,
                                              &c->deadline, &c->req_md, &c->payload, srv->cq,
                                              srv->cq, &c->t_req);
  else
    err = grpc_server_request_call(srv->server, &c->call, &c->details, &c->req_md, srv->cq,
                                   srv->cq, &c->t_req);
  if (err != GRPC_CALL_OK) {
    grpc_metadata_array_destroy(&c->req_md);
    grpc_call_details_destroy(&c->details);
    px_free(c);
    return px_set_error(PX_ERR_BACKEND, "rpc server: cannot request a call: %s",
                        grpc_call_error_to_string(err));
  }
  srv->live_calls++;
  return PX_OK;
}

static void px__call_free(px_rpc_srv_call_t *c) {
  px__msg_t *m = c->q_head;
  while (m) {
    px__msg_t *next = m->next;
    grpc_byte_buffer_destroy(m->bb);
    px_free(m);
    m = next;
  }
  if (c->in_flight) grpc_byte_buffer_destroy(c->in_flight);
  if (c->payload) grpc_byte_buffer_destroy(c->payload);
  if (c->call) grpc_call_unref(c->call);
  grpc_metadata_array_destroy(&c->req_md);
  grpc_call_details_destroy(&c->details);
  grpc_slice_unref(c->status_slice);
  px_free(c->status_msg);
  c->srv->live_calls--;
  px_free(c);
}

static void px__maybe_free(px_rpc_srv_call_t *c) {
  if (c->ended && c->status_sent && !c->close_pending && !c->send_pending && !c->status_pending &&
      !c->q_head)
    px__call_free(c);
}

static void px__drop_queue(px_rpc_srv_call_t *c) {
  while (c->q_head) {
    px__msg_t *m = c->q_head;
    c->q_head = m->next;
    grpc_byte_buffer_destroy(m->bb);
    px_free(m);
  }
  c->q_tail = NULL;
}

/* Starts the next batch if none is in flight: the next queued message, and
 * with the last one the status when it is due. Never frees the call: the
 * callers end with px__maybe_free, once. */
static void px__pump(px_rpc_srv_call_t *c) {
  if (c->send_pending || c->status_pending) return;
  if (c->broken || c->closed) {
    px__drop_queue(c);
    if (c->status_queued) c->status_sent = 1; /* nobody to tell */
    return;
  }
  if (!c->q_head && !(c->status_queued && !c->status_sent)) return;
  grpc_op ops[3];
  memset(ops, 0, sizeof ops);
  size_t n = 0;
  if (!c->md_sent) {
    ops[n++].op = GRPC_OP_SEND_INITIAL_METADATA;
    c->md_sent = 1;
  }
  if (c->q_head) {
    px__msg_t *m = c->q_head;
    c->q_head = m->next;
    if (!c->q_head) c->q_tail = NULL;
    c->in_flight = m->bb;
    px_free(m);
    ops[n].op = GRPC_OP_SEND_MESSAGE;
    ops[n++].data.send_message.send_message = c->in_flight;
  }
  int with_status = c->status_queued && !c->q_head;
  if (with_status) {
    ops[n].op = GRPC_OP_SEND_STATUS_FROM_SERVER;
    ops[n].data.send_status_from_server.status = c->code;
    ops[n++].data.send_status_from_server.status_details =
        c->status_msg ? &c->status_slice : NULL;
    c->status_sent = 1;
  }
  px__tag_t *tag = with_status ? &c->t_status : &c->t_send;
  grpc_call_error err = grpc_call_start_batch(c->call, ops, n, tag, NULL);
  if (err != GRPC_CALL_OK) {
    px_log(PX_LOG_WARN, "rpc %s: cannot send: %s", px_rpc_srv_method(c),
           grpc_call_error_to_string(err));
    if (c->in_flight) grpc_byte_buffer_destroy(c->in_flight);
    c->in_flight = NULL;
    c->broken = 1;
    px__pump(c);
    return;
  }
  if (with_status) c->status_pending = 1;
  else c->send_pending = 1;
}

const char *px_rpc_srv_method(const px_rpc_srv_call_t *c) {
  return c->method >= 0 ? c->srv->methods[c->method].path : "(unregistered method)";
}

int64_t px_rpc_srv_remaining_ms(const px_rpc_srv_call_t *c) {
  if (c->method < 0) return INT64_MAX;
  gpr_timespec d = gpr_convert_clock_type(c->deadline, GPR_CLOCK_MONOTONIC);
  if (gpr_time_cmp(d, gpr_inf_future(GPR_CLOCK_MONOTONIC)) >= 0) return INT64_MAX;
  gpr_timespec left = gpr_time_sub(d, gpr_now(GPR_CLOCK_MONOTONIC));
  int64_t ms = (int64_t)left.tv_sec * 1000 + left.tv_nsec / 1000000;
  return ms;
}

/* Packs msg onto the call's send queue (nothing is sent yet). */
static px_status_t px__enqueue(px_rpc_srv_call_t *c, const ProtobufCMessage *msg) {
  px__msg_t *m = px_malloc(sizeof *m, "rpc.server.msg");
  if (!m) return PX_ERR_NOMEM;
  m->bb = px__rpc_pack(msg);
  if (!m->bb) {
    px_free(m);
    return PX_ERR_INTERNAL;
  }
  m->next = NULL;
  if (c->q_tail) c->q_tail->next = m;
  else c->q_head = m;
  c->q_tail = m;
  return PX_OK;
}

px_status_t px_rpc_srv_send(px_rpc_srv_call_t *c, const ProtobufCMessage *msg) {
  assert(!c->ended);
  if (c->broken || c->closed) return px_set_error(PX_ERR_PEER, "%s: the client has left",
                                                  px_rpc_srv_method(c));
  px_status_t st = px__enqueue(c, msg);
  if (st == PX_OK) px__pump(c); /* not ended: nothing to free yet */
  return st;
}

static px_status_t px__end(px_rpc_srv_call_t *c, px_rpc_code_t code, const char *msg) {
  assert(!c->ended);
  c->ended = 1;
  c->status_queued = 1;
  c->code = (grpc_status_code)code;
  if (msg && msg[0]) {
    c->status_msg = px__strdup(msg, "rpc.server.status");
    if (c->status_msg) c->status_slice = grpc_slice_from_copied_string(msg);
  }
  px__pump(c);
  px__maybe_free(c);
  return PX_OK;
}

px_status_t px_rpc_srv_reply(px_rpc_srv_call_t *c, const ProtobufCMessage *msg) {
  if (c->broken || c->closed) return px__end(c, PX_RPC_CANCELLED, NULL);
  /* Queued, not sent: the message goes out with the status, one batch. */
  px_status_t st = px__enqueue(c, msg);
  if (st != PX_OK) {
    px__end(c, PX_RPC_INTERNAL, "cannot encode the reply");
    return st;
  }
  return px__end(c, PX_RPC_OK, NULL);
}

px_status_t px_rpc_srv_finish(px_rpc_srv_call_t *c, px_rpc_code_t code, const char *fmt, ...) {
  char msg[512] = "";
  if (fmt) {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
  }
  if (code != PX_RPC_OK)
    px_log(PX_LOG_DEBUG, "rpc %s -> %s: %s", px_rpc_srv_method(c), px_rpc_code_name(code), msg);
  return px__end(c, code, msg);
}

int px_rpc_srv_metadata(const px_rpc_srv_call_t *c, const char *key, char *buf, size_t cap) {
  size_t klen = strlen(key);
  for (size_t i = 0; i < c->req_md.count; i++) {
    const grpc_metadata *md = &c->req_md.metadata[i];
    if (GRPC_SLICE_LENGTH(md->key) != klen || memcmp(GRPC_SLICE_START_PTR(md->key), key, klen))
      continue;
    size_t n = GRPC_SLICE_LENGTH(md->value);
    if (n + 1 > cap) return -1;
    memcpy(buf, GRPC_SLICE_START_PTR(md->value), n);
    buf[n] = '\0';
    return (int)n;
  }
  return -1;
}

void px_rpc_srv_on_cancel(px_rpc_srv_call_t *c, void (*cb)(px_rpc_srv_call_t *, void *),
                          void *arg) {
  c->cancel_cb = cb;
  c->cancel_arg = arg;
}

/* ---- dispatch ---------------------------------------------------------------- */

static void px__on_request(px_rpc_server_t *srv, px_rpc_srv_call_t *c, int success) {
  if (!success) { /* the server is shutting down: the slot was never used */
    c->ended = c->status_sent = 1;
    px__call_free(c);
    return;
  }
  if (!srv->shutting_down && px__post(srv, c->method) != PX_OK)
    px_log(PX_LOG_ERROR, "%s", px_last_error());

  grpc_op op;
  memset(&op, 0, sizeof op);
  op.op = GRPC_OP_RECV_CLOSE_ON_SERVER;
  op.data.recv_close_on_server.cancelled = &c->close_cancelled;
  if (grpc_call_start_batch(c->call, &op, 1, &c->t_close, NULL) == GRPC_CALL_OK)
    c->close_pending = 1;

  if (srv->shutting_down) {
    /* Matched before the shutdown began: a handler could park it past the
     * cancellation of all calls, and the shutdown would never end. */
    px_rpc_srv_finish(c, PX_RPC_UNAVAILABLE, "server shutting down");
    return;
  }
  if (c->method < 0) {
    char *m = grpc_slice_to_c_string(c->details.method);
    px_rpc_srv_finish(c, PX_RPC_UNIMPLEMENTED, "method %s is not implemented by this server", m);
    gpr_free(m);
    return;
  }
  const px_rpc_method_t *m = &srv->methods[c->method];
  size_t limit = (size_t)(m->max_request > 0 ? m->max_request : srv->max_receive);
  size_t got = c->payload ? grpc_byte_buffer_length(c->payload) : 0;
  if (got > limit) {
    grpc_byte_buffer_destroy(c->payload);
    c->payload = NULL;
    px_rpc_srv_finish(c, PX_RPC_RESOURCE_EXHAUSTED,
                      "%s request of %zu bytes is over this method's limit of %zu bytes",
                      m->request->name, got, limit);
    return;
  }
  ProtobufCMessage *req = c->payload ? px__rpc_unpack(m->request, c->payload) : NULL;
  if (c->payload) grpc_byte_buffer_destroy(c->payload);
  c->payload = NULL;
  if (!req) {
    px_rpc_srv_finish(c, PX_RPC_INVALID_ARGUMENT, "malformed %s request", m->request->name);
    return;
  }
  if (!srv->authorize || srv->authorize(c, req, srv->data)) m->handler(c, req, srv->data);
  protobuf_c_message_free_unpacked(req, NULL);
}

static void px__dispatch(px_rpc_server_t *srv, px__tag_t *tag, int success) {
  if (tag->kind == PX__T_SHUTDOWN) {
    grpc_server_destroy(srv->server);
    srv->server = NULL;
    grpc_completion_queue_shutdown(srv->cq);
    return;
  }
  px_rpc_srv_call_t *c = tag->obj;
  switch (tag->kind) {
    case PX__T_REQUEST:
      px__on_request(srv, c, success);
      break;
    case PX__T_CLOSE:
      c->close_pending = 0;
      c->closed = 1;
      if (!c->ended) {
        if (c->cancel_cb) c->cancel_cb(c, c->cancel_arg);
        else px_log(PX_LOG_WARN, "rpc %s: client left a call with no cancel callback",
                    px_rpc_srv_method(c));
        /* The callback ended the call (and may have freed it). */
        break;
      }
      px__pump(c);
      px__maybe_free(c);
      break;
    case PX__T_SEND:
    case PX__T_STATUS:
      if (tag->kind == PX__T_SEND) c->send_pending = 0;
      else c->status_pending = 0;
      if (c->in_flight) grpc_byte_buffer_destroy(c->in_flight);
      c->in_flight = NULL;
      if (!success) c->broken = 1;
      px__pump(c);
      px__maybe_free(c);
      break;
    default:
      break;
  }
}

static void px__async_closed(uv_handle_t *h) {
  px_rpc_server_t *srv = h->data;
  if (srv->done) srv->done(srv, srv->done_arg);
}

static void px__on_async(uv_async_t *a) {
  px_rpc_server_t *srv = a->data;
  uv_mutex_lock(&srv->mu);
  px__event_t *ev = srv->events;
  size_t nev = srv->nev;
  int done = srv->cq_done;
  srv->events = NULL;
  srv->nev = srv->cap = 0;
  uv_mutex_unlock(&srv->mu);
  for (size_t i = 0; i < nev; i++) px__dispatch(srv, ev[i].tag, ev[i].success);
  px_free(ev);
  if (done && !srv->finalized) {
    srv->finalized = 1;
    uv_thread_join(&srv->thread);
    srv->thread_started = 0;
    grpc_completion_queue_destroy(srv->cq);
    srv->cq = NULL;
    if (srv->live_calls)
      px_log(PX_LOG_WARN, "rpc server: %d calls still allocated at shutdown", srv->live_calls);
    uv_close((uv_handle_t *)&srv->async, px__async_closed);
  }
}

/* ---- server ----------------------------------------------------------------- */

static void px__free_on_close(uv_handle_t *h) {
  px_rpc_server_t *srv = h->data;
  uv_mutex_destroy(&srv->mu);
  px_free(srv->handles);
  px_free(srv);
}

/* Reads a whole PEM file (at most 1 MiB) as a NUL-terminated px_malloc'd
 * string. */
static px_status_t px__read_pem(const char *path, const char *what, char **out) {
  *out = NULL;
  FILE *f = fopen(path, "rb");
  if (!f) return px_set_error(PX_ERR_IO, "%s %s: cannot open: %s", what, path, strerror(errno));
  char *buf = px_malloc((1 << 20) + 1, "rpc.server.pem");
  if (!buf) {
    fclose(f);
    return PX_ERR_NOMEM;
  }
  size_t n = fread(buf, 1, 1 << 20, f);
  int big = n == (1 << 20) && fgetc(f) != EOF;
  int err = ferror(f);
  fclose(f);
  buf[n] = '\0';
  if (err || big || n == 0 || !strstr(buf, "-----BEGIN ")) {
    px_free(buf);
    return px_set_error(PX_ERR_INVALID, "%s %s: %s", what, path,
                        err ? "read error" : big ? "bigger than 1 MiB" : "not a PEM file");
  }
  *out = buf;
  return PX_OK;
}

static grpc_server_credentials *px__server_creds(const px_rpc_server_options_t *opt,
                                                 px_status_t *st) {
  *st = PX_OK;
  if (!opt || (!opt->tls_cert_file && !opt->tls_key_file))
    return grpc_insecure_server_credentials_create();
  if (!opt->tls_cert_file || !opt->tls_key_file) {
    *st = px_set_error(PX_ERR_INVALID, "rpc server: TLS needs both a certificate and a key");
    return NULL;
  }
  char *cert = NULL, *key = NULL;
  *st = px__read_pem(opt->tls_cert_file, "TLS certificate", &cert);
  if (*st == PX_OK) *st = px__read_pem(opt->tls_key_file, "TLS key", &key);
  grpc_server_credentials *creds = NULL;
  if (*st == PX_OK) {
    grpc_ssl_pem_key_cert_pair pair = {key, cert};
    creds = grpc_ssl_server_credentials_create_ex(NULL, &pair, 1,
                                                  GRPC_SSL_DONT_REQUEST_CLIENT_CERTIFICATE, NULL);
    if (!creds)
      *st = px_set_error(PX_ERR_INVALID, "TLS certificate %s / key %s: not usable together",
                         opt->tls_cert_file, opt->tls_key_file);
  }
  if (key) {
    memset(key, 0, strlen(key));
    px_free(key);
  }
  px_free(cert);
  return creds;
}

px_status_t px_rpc_server_create(uv_loop_t *loop, const char *listen,
                                 const px_rpc_method_t *methods, int nmethods, void *data,
                                 px_rpc_server_t **out) {
  return px_rpc_server_create_ex(loop, listen, methods, nmethods, data, NULL, out);
}

px_status_t px_rpc_server_create_ex(uv_loop_t *loop, const char *listen,
                                    const px_rpc_method_t *methods, int nmethods, void *data,
                                    const px_rpc_server_options_t *opt, px_rpc_server_t **out) {
  *out = NULL;
  PX_REQUIRE(listen && listen[0], "rpc server: empty listen address");
  px_status_t cst = PX_OK;
  grpc_server_credentials *creds = px__server_creds(opt, &cst);
  if (!creds) return cst;
  px_rpc_server_t *srv = px_calloc(1, sizeof *srv, "rpc.server");
  if (!srv) {
    grpc_server_credentials_release(creds);
    return PX_ERR_NOMEM;
  }
  srv->handles = px_calloc((size_t)(nmethods > 0 ? nmethods : 1), sizeof(void *),
                           "rpc.server.handles");
  if (!srv->handles) {
    grpc_server_credentials_release(creds);
    px_free(srv);
    return PX_ERR_NOMEM;
  }
  srv->loop = loop;
  srv->methods = methods;
  srv->nmethods = nmethods;
  srv->data = data;
  srv->t_shutdown = (px__tag_t){PX__T_SHUTDOWN, srv};
  srv->max_receive = opt && opt->max_receive > 0 ? opt->max_receive : PX_RPC_MAX_MESSAGE;
  srv->authorize = opt ? opt->authorize : NULL;
  /* The loop side first: from here on every failure releases through the
   * async handle's close callback (memory is freed when the loop next runs). */
  uv_mutex_init(&srv->mu);
  uv_async_init(loop, &srv->async, px__on_async);
  srv->async.data = srv;
  px__rpc_grpc_ref();

  grpc_arg args[3];
  args[0].type = GRPC_ARG_INTEGER;
  args[0].key = (char *)GRPC_ARG_MAX_RECEIVE_MESSAGE_LENGTH;
  args[0].value.integer = srv->max_receive;
  args[1].type = GRPC_ARG_INTEGER;
  args[1].key = (char *)GRPC_ARG_MAX_SEND_MESSAGE_LENGTH;
  args[1].value.integer = PX_RPC_MAX_MESSAGE;
  /* gRPC sets SO_REUSEPORT by default, which would let a second daemon
   * bind the same port and share the traffic: one server per address. */
  args[2].type = GRPC_ARG_INTEGER;
  args[2].key = (char *)GRPC_ARG_ALLOW_REUSEPORT;
  args[2].value.integer = 0;
  grpc_channel_args cargs = {3, args};
  srv->cq = grpc_completion_queue_create_for_next(NULL);
  srv->server = grpc_server_create(&cargs, NULL);
  grpc_server_register_completion_queue(srv->server, srv->cq, NULL);
  px_status_t st = PX_OK;
  for (int i = 0; i < nmethods; i++) {
    srv->handles[i] = grpc_server_register_method(srv->server, methods[i].path, NULL,
                                                  GRPC_SRM_PAYLOAD_READ_INITIAL_BYTE_BUFFER, 0);
    if (!srv->handles[i]) {
      st = px_set_error(PX_ERR_INVALID, "rpc server: cannot register %s", methods[i].path);
      grpc_server_credentials_release(creds);
      goto fail;
    }
  }
  srv->port = grpc_server_add_http2_port(srv->server, listen, creds);
  grpc_server_credentials_release(creds);
  if (srv->port <= 0) {
    st = px_set_error(PX_ERR_IO, "cannot listen on %s (address in use, or not an address of "
                      "this host?)", listen);
    goto fail;
  }
  grpc_server_start(srv->server);
  if (uv_thread_create(&srv->thread, px__cq_thread, srv) != 0) {
    /* No slot is posted yet, so the shutdown tag is the only event. */
    grpc_server_shutdown_and_notify(srv->server, srv->cq, &srv->t_shutdown);
    grpc_completion_queue_next(srv->cq, gpr_inf_future(GPR_CLOCK_MONOTONIC), NULL);
    st = px_set_error(PX_ERR_INTERNAL, "rpc server: cannot start the completion-queue thread");
    goto fail;
  }
  srv->thread_started = 1;
  for (int i = -1; i < nmethods; i++)
    for (int k = 0; k < (i < 0 ? PX__GENERIC_SLOTS : PX__SLOTS_PER_METHOD); k++)
      if (px__post(srv, i) != PX_OK) px_log(PX_LOG_ERROR, "%s", px_last_error());
  *out = srv;
  return PX_OK;

fail:
  grpc_server_destroy(srv->server);
  grpc_completion_queue_shutdown(srv->cq);
  while (grpc_completion_queue_next(srv->cq, gpr_inf_future(GPR_CLOCK_MONOTONIC), NULL).type !=
         GRPC_QUEUE_SHUTDOWN) {
  }
  grpc_completion_queue_destroy(srv->cq);
  px__rpc_grpc_unref();
  uv_close((uv_handle_t *)&srv->async, px__free_on_close);
  return st;
}

int px_rpc_server_port(const px_rpc_server_t *srv) { return srv->port; }

void px_rpc_server_shutdown(px_rpc_server_t *srv, void (*done)(px_rpc_server_t *, void *),
                            void *arg) {
  if (srv->shutting_down) return;
  srv->shutting_down = 1;
  srv->done = done;
  srv->done_arg = arg;
  grpc_server_shutdown_and_notify(srv->server, srv->cq, &srv->t_shutdown);
  grpc_server_cancel_all_calls(srv->server);
}

void px_rpc_server_destroy(px_rpc_server_t *srv) {
  if (!srv) return;
  assert(srv->finalized);
  px_free(srv->events);
  uv_mutex_destroy(&srv->mu);
  px_free(srv->handles);
  px_free(srv);
  px__rpc_grpc_unref();
}
