/* The control-plane client: channels, blocking unary calls and
 * server-streaming readers on the gRPC C core.
 *
 * Each unary call has its own pluck completion queue, so calls from many
 * threads on one channel never see each other's events. A stream has its
 * own next-type queue, which lets a read wait with a timeout and leave the
 * receive pending for the next read.
 *
 * Security: a channel speaks TLS when it has a CA file (the server's
 * certificate is verified against it, and its name against the target's
 * host) and sends its bearer token, if any, as `authorization: Bearer T`
 * initial metadata on every call. Defaults come from PRUNEX_CA and
 * PRUNEX_TOKEN so that every program and library user gets them alike. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <grpc/grpc_security.h>
#include <grpc/slice.h>
#include <grpc/support/alloc.h>

#include "px_check.h"
#include "px_rpc_int.h"

struct px_rpc_channel {
  grpc_channel *channel;
  char *target;
  int tls;
  grpc_metadata md[1];  /* the authorization entry; nmd 0 without a token */
  size_t nmd;
};

/* Records the local failure code and returns st (for failures that never
 * reached gRPC). */
static px_status_t px__local(px_status_t st) {
  px__rpc_set_last_code(PX_RPC_UNKNOWN);
  return st;
}

/* Maps a finished call's status, setting the last code and error. */
static px_status_t px__status(const char *method, grpc_status_code code, grpc_slice details,
                              const char *error_string) {
  px__rpc_set_last_code((px_rpc_code_t)code);
  if (code == GRPC_STATUS_OK) return PX_OK;
  int n = (int)GRPC_SLICE_LENGTH(details);
  const char *d = (const char *)GRPC_SLICE_START_PTR(details);
  if (n == 0 && error_string) {
    d = error_string;
    n = (int)strlen(error_string);
  }
  return px_set_error(px_rpc_code_status((px_rpc_code_t)code), "%s: %s%s%.*s", method,
                      px_rpc_code_name((px_rpc_code_t)code), n ? ": " : "", n, d);
}

/* Reads a CA bundle (PEM, at most 1 MiB) as a px_malloc'd string. */
static px_status_t px__read_ca(const char *path, char **out) {
  *out = NULL;
  FILE *f = fopen(path, "rb");
  if (!f) return px_set_error(PX_ERR_IO, "CA file %s: cannot open: %s", path, strerror(errno));
  char *buf = px_malloc((1 << 20) + 1, "rpc.channel.ca");
  if (!buf) {
    fclose(f);
    return PX_ERR_NOMEM;
  }
  size_t n = fread(buf, 1, 1 << 20, f);
  int err = ferror(f);
  fclose(f);
  buf[n] = '\0';
  if (err || n == 0 || !strstr(buf, "-----BEGIN CERTIFICATE-----")) {
    px_free(buf);
    return px_set_error(PX_ERR_INVALID, "CA file %s: %s", path,
                        err ? "read error" : "no PEM certificate in it");
  }
  *out = buf;
  return PX_OK;
}

px_status_t px_rpc_channel_create(const char *target, px_rpc_channel_t **out) {
  return px_rpc_channel_create_ex(target, NULL, out);
}

px_status_t px_rpc_channel_create_ex(const char *target, const px_rpc_channel_options_t *opt,
                                     px_rpc_channel_t **out) {
  *out = NULL;
  const char *ca = opt && opt->ca_file ? opt->ca_file : getenv("PRUNEX_CA");
  const char *token = opt && opt->token ? opt->token : getenv("PRUNEX_TOKEN");
  if (token && !token[0]) token = NULL;
  if (ca && !ca[0]) ca = NULL;
  if (token) {
    size_t tn = strlen(token);
    if (tn > 4096) return px__local(px_set_error(PX_ERR_INVALID, "rpc: the token is over 4096 bytes"));
    for (size_t i = 0; i < tn; i++)
      if ((unsigned char)token[i] <= ' ' || (unsigned char)token[i] >= 0x7f)
        return px__local(px_set_error(PX_ERR_INVALID,
                                      "rpc: the token has a character that is not printable "
                                      "ASCII (at byte %zu)", i));
  }
  if (!target || !target[0]) return px__local(px_set_error(PX_ERR_INVALID, "rpc: empty target"));
  const char *colon = strrchr(target, ':');
  if (!colon || colon == target || !colon[1])
    return px__local(
        px_set_error(PX_ERR_INVALID, "rpc: target '%s' is not HOST:PORT", target));
  px_rpc_channel_t *ch = px_calloc(1, sizeof *ch, "rpc.channel");
  if (!ch) return px__local(PX_ERR_NOMEM);
  ch->target = px__strdup(target, "rpc.channel.target");
  if (!ch->target) {
    px_free(ch);
    return px__local(PX_ERR_NOMEM);
  }
  char *ca_pem = NULL;
  if (ca) {
    px_status_t st = px__read_ca(ca, &ca_pem);
    if (st != PX_OK) {
      px_free(ch->target);
      px_free(ch);
      return px__local(st);
    }
  }
  px__rpc_grpc_ref();
  if (token) {
    char *v = px_malloc(strlen(token) + 8, "rpc.channel.token");
    if (v) {
      memcpy(v, "Bearer ", 7);
      memcpy(v + 7, token, strlen(token) + 1);
      ch->md[0].key = grpc_slice_from_static_string("authorization");
      ch->md[0].value = grpc_slice_from_copied_string(v);
      ch->nmd = 1;
      memset(v, 0, strlen(v));
      px_free(v);
    }
  }
  grpc_arg args[2];
  args[0].type = GRPC_ARG_INTEGER;
  args[0].key = (char *)GRPC_ARG_MAX_RECEIVE_MESSAGE_LENGTH;
  args[0].value.integer = PX_RPC_MAX_MESSAGE;
  args[1].type = GRPC_ARG_INTEGER;
  args[1].key = (char *)GRPC_ARG_MAX_SEND_MESSAGE_LENGTH;
  args[1].value.integer = PX_RPC_MAX_MESSAGE;
  grpc_channel_args cargs = {2, args};
  grpc_channel_credentials *creds =
      ca_pem ? grpc_ssl_credentials_create(ca_pem, NULL, NULL, NULL)
             : grpc_insecure_credentials_create();
  ch->tls = ca_pem != NULL;
  px_free(ca_pem);
  ch->channel = creds ? grpc_channel_create(target, creds, &cargs) : NULL;
  if (creds) grpc_channel_credentials_release(creds);
  if (!ch->channel) {
    if (ch->nmd) grpc_slice_unref(ch->md[0].value);
    px__rpc_grpc_unref();
    px_free(ch->target);
    px_free(ch);
    return px__local(px_set_error(PX_ERR_BACKEND, "rpc: cannot create a channel to %s", target));
  }
  px__rpc_set_last_code(PX_RPC_OK);
  *out = ch;
  return PX_OK;
}

void px_rpc_channel_destroy(px_rpc_channel_t *ch) {
  if (!ch) return;
  grpc_channel_destroy(ch->channel);
  if (ch->nmd) grpc_slice_unref(ch->md[0].value);
  px_free(ch->target);
  px_free(ch);
  px__rpc_grpc_unref();
}

const char *px_rpc_channel_target(const px_rpc_channel_t *ch) { return ch->target; }

px_status_t px_rpc_channel_wait_ready(px_rpc_channel_t *ch, int timeout_ms) {
  gpr_timespec deadline = px__rpc_deadline(timeout_ms);
  grpc_completion_queue *cq = grpc_completion_queue_create_for_next(NULL);
  px_status_t st = PX_ERR_TIMEOUT;
  for (;;) {
    grpc_connectivity_state s = grpc_channel_check_connectivity_state(ch->channel, 1);
    if (s == GRPC_CHANNEL_READY) {
      st = PX_OK;
      break;
    }
    if (gpr_time_cmp(gpr_now(GPR_CLOCK_MONOTONIC), deadline) >= 0) break;
    grpc_channel_watch_connectivity_state(ch->channel, s, deadline, cq, NULL);
    grpc_event ev = grpc_completion_queue_next(cq, gpr_inf_future(GPR_CLOCK_MONOTONIC), NULL);
    if (ev.type != GRPC_OP_COMPLETE || !ev.success) {
      /* Timed out: check once more, the state may have moved meanwhile. */
      if (grpc_channel_check_connectivity_state(ch->channel, 0) == GRPC_CHANNEL_READY) st = PX_OK;
      break;
    }
  }
  grpc_completion_queue_shutdown(cq);
  while (grpc_completion_queue_next(cq, gpr_inf_future(GPR_CLOCK_MONOTONIC), NULL).type !=
         GRPC_QUEUE_SHUTDOWN) {
  }
  grpc_completion_queue_destroy(cq);
  if (st != PX_OK)
    return px_set_error(PX_ERR_TIMEOUT, "rpc: %s not reachable within %d ms", ch->target,
                        timeout_ms);
  return PX_OK;
}

/* ---- unary calls --------------------------------------------------------- */

/* The four ops that open every call: the channel's metadata, the request
 * (req_bb, still owned by the caller), the half-close and the server's
 * initial metadata into init_md. ops[4..n) are zeroed for the caller. */
static void px__open_ops(grpc_op *ops, size_t n, px_rpc_channel_t *ch,
                         grpc_byte_buffer *req_bb, grpc_metadata_array *init_md) {
  memset(ops, 0, n * sizeof *ops);
  ops[0].op = GRPC_OP_SEND_INITIAL_METADATA;
  ops[0].data.send_initial_metadata.count = ch->nmd;
  ops[0].data.send_initial_metadata.metadata = ch->nmd ? ch->md : NULL;
  ops[1].op = GRPC_OP_SEND_MESSAGE;
  ops[1].data.send_message.send_message = req_bb;
  ops[2].op = GRPC_OP_SEND_CLOSE_FROM_CLIENT;
  ops[3].op = GRPC_OP_RECV_INITIAL_METADATA;
  ops[3].data.recv_initial_metadata.recv_initial_metadata = init_md;
}

/* The op that receives the call's final status into the given places. */
static void px__status_op(grpc_op *op, grpc_metadata_array *trail_md, grpc_status_code *code,
                          grpc_slice *details, const char **error_string) {
  op->op = GRPC_OP_RECV_STATUS_ON_CLIENT;
  op->data.recv_status_on_client.trailing_metadata = trail_md;
  op->data.recv_status_on_client.status = code;
  op->data.recv_status_on_client.status_details = details;
  op->data.recv_status_on_client.error_string = error_string;
}

/* One unary call with the request already in a byte buffer (taken over and
 * destroyed). On success *resp_bb is the reply (caller destroys it). */
static px_status_t px__unary(px_rpc_channel_t *ch, const char *method, grpc_byte_buffer *req_bb,
                             int deadline_ms, grpc_byte_buffer **resp_bb) {
  *resp_bb = NULL;
  if (deadline_ms <= 0) deadline_ms = PX_RPC_DEFAULT_DEADLINE_MS;
  grpc_completion_queue *cq = grpc_completion_queue_create_for_pluck(NULL);
  grpc_slice mslice = grpc_slice_from_copied_string(method);
  grpc_call *call = grpc_channel_create_call(ch->channel, NULL, GRPC_PROPAGATE_DEFAULTS, cq,
                                             mslice, NULL, px__rpc_deadline(deadline_ms), NULL);
  grpc_slice_unref(mslice);

  grpc_metadata_array init_md, trail_md;
  grpc_metadata_array_init(&init_md);
  grpc_metadata_array_init(&trail_md);
  grpc_status_code code = GRPC_STATUS_UNKNOWN;
  grpc_slice details = grpc_empty_slice();
  const char *error_string = NULL;
  grpc_byte_buffer *reply = NULL;

  grpc_op ops[6];
  px__open_ops(ops, 6, ch, req_bb, &init_md);
  ops[4].op = GRPC_OP_RECV_MESSAGE;
  ops[4].data.recv_message.recv_message = &reply;
  px__status_op(&ops[5], &trail_md, &code, &details, &error_string);

  px_status_t st;
  void *tag = &ops[0];
  grpc_call_error err = grpc_call_start_batch(call, ops, 6, tag, NULL);
  if (err != GRPC_CALL_OK) {
    st = px__local(px_set_error(PX_ERR_BACKEND, "%s: cannot start the call: %s", method,
                                grpc_call_error_to_string(err)));
  } else {
    grpc_completion_queue_pluck(cq, tag, gpr_inf_future(GPR_CLOCK_MONOTONIC), NULL);
    st = px__status(method, code, details, error_string);
    if (st == PX_OK) {
      *resp_bb = reply;
      reply = NULL;
    }
  }
  if (reply) grpc_byte_buffer_destroy(reply);
  grpc_byte_buffer_destroy(req_bb);
  grpc_slice_unref(details);
  if (error_string) gpr_free((void *)error_string);
  grpc_metadata_array_destroy(&init_md);
  grpc_metadata_array_destroy(&trail_md);
  grpc_call_unref(call);
  grpc_completion_queue_shutdown(cq);
  grpc_completion_queue_destroy(cq);
  return st;
}

px_status_t px_rpc_call(px_rpc_channel_t *ch, const char *method, const ProtobufCMessage *req,
                        const ProtobufCMessageDescriptor *resp_desc, int deadline_ms,
                        ProtobufCMessage **resp) {
  *resp = NULL;
  grpc_byte_buffer *req_bb = px__rpc_pack(req);
  if (!req_bb) return px__local(PX_ERR_INTERNAL);
  grpc_byte_buffer *resp_bb = NULL;
  PX_CHECK(px__unary(ch, method, req_bb, deadline_ms, &resp_bb));
  /* An empty reply is a valid message (all fields default). */
  *resp = px__rpc_unpack(resp_desc, resp_bb);
  grpc_byte_buffer_destroy(resp_bb);
  if (!*resp) {
    px__rpc_set_last_code(PX_RPC_INTERNAL);
    return px_set_error(PX_ERR_FORMAT, "%s: the reply is not a valid %s", method,
                        resp_desc->name);
  }
  return PX_OK;
}

px_status_t px_rpc_call_raw(px_rpc_channel_t *ch, const char *method, const void *req,
                            size_t req_len, int deadline_ms, void **resp, size_t *resp_len) {
  *resp = NULL;
  *resp_len = 0;
  grpc_slice slice = grpc_slice_from_copied_buffer((const char *)req, req_len);
  grpc_byte_buffer *req_bb = grpc_raw_byte_buffer_create(&slice, 1);
  grpc_slice_unref(slice);
  grpc_byte_buffer *resp_bb = NULL;
  PX_CHECK(px__unary(ch, method, req_bb, deadline_ms, &resp_bb));
  px_status_t st = px__rpc_bytes(resp_bb, resp, resp_len);
  grpc_byte_buffer_destroy(resp_bb);
  return st;
}

/* ---- server streams ------------------------------------------------------ */

enum { PX__TAG_START = 1, PX__TAG_STATUS = 2, PX__TAG_RECV = 3 };
#define PX__TAG(t) ((void *)(intptr_t)(t))

struct px_rpc_stream {
  grpc_call *call;
  grpc_completion_queue *cq;
  const ProtobufCMessageDescriptor *desc;
  char *method;
  grpc_metadata_array init_md, trail_md;
  grpc_status_code code;
  grpc_slice details;
  const char *error_string;
  grpc_byte_buffer *recv;
  int start_pending, status_pending, recv_pending;
  int ended;            /* the receive side saw the end of the stream */
  px_status_t end_status;
  char end_error[384];  /* the end's message, repeated on later reads */
};

static void px__stream_event(px_rpc_stream_t *s, grpc_event ev) {
  intptr_t t = (intptr_t)ev.tag;
  if (t == PX__TAG_START) s->start_pending = 0;
  else if (t == PX__TAG_STATUS) s->status_pending = 0;
  else if (t == PX__TAG_RECV) s->recv_pending = 0;
}

px_status_t px_rpc_stream_start(px_rpc_channel_t *ch, const char *method,
                                const ProtobufCMessage *req,
                                const ProtobufCMessageDescriptor *resp_desc,
                                px_rpc_stream_t **out) {
  *out = NULL;
  px_rpc_stream_t *s = px_calloc(1, sizeof *s, "rpc.stream");
  if (!s) return px__local(PX_ERR_NOMEM);
  s->method = px__strdup(method, "rpc.stream.method");
  grpc_byte_buffer *req_bb = s->method ? px__rpc_pack(req) : NULL;
  if (!req_bb) {
    px_status_t st = s->method ? PX_ERR_INTERNAL : PX_ERR_NOMEM;
    px_free(s->method);
    px_free(s);
    return px__local(st);
  }
  s->desc = resp_desc;
  s->cq = grpc_completion_queue_create_for_next(NULL);
  grpc_slice mslice = grpc_slice_from_copied_string(method);
  s->call = grpc_channel_create_call(ch->channel, NULL, GRPC_PROPAGATE_DEFAULTS, s->cq, mslice,
                                     NULL, gpr_inf_future(GPR_CLOCK_MONOTONIC), NULL);
  grpc_slice_unref(mslice);
  grpc_metadata_array_init(&s->init_md);
  grpc_metadata_array_init(&s->trail_md);
  s->details = grpc_empty_slice();

  grpc_op ops[4];
  px__open_ops(ops, 4, ch, req_bb, &s->init_md);
  grpc_call_error err = grpc_call_start_batch(s->call, ops, 4, PX__TAG(PX__TAG_START), NULL);
  grpc_byte_buffer_destroy(req_bb); /* the batch holds its own reference */
  if (err == GRPC_CALL_OK) {
    s->start_pending = 1;
    memset(ops, 0, sizeof ops);
    px__status_op(&ops[0], &s->trail_md, &s->code, &s->details, &s->error_string);
    err = grpc_call_start_batch(s->call, ops, 1, PX__TAG(PX__TAG_STATUS), NULL);
    if (err == GRPC_CALL_OK) s->status_pending = 1;
  }
  if (err != GRPC_CALL_OK) {
    px_set_error(PX_ERR_BACKEND, "%s: cannot start the stream: %s", method,
                 grpc_call_error_to_string(err));
    px_rpc_stream_destroy(s);
    return px__local(PX_ERR_BACKEND);
  }
  px__rpc_set_last_code(PX_RPC_OK);
  *out = s;
  return PX_OK;
}

/* The stream has ended on the receive side: wait for the status and
 * remember what every later read answers. */
static px_status_t px__stream_end(px_rpc_stream_t *s) {
  while (s->status_pending)
    px__stream_event(s, grpc_completion_queue_next(s->cq, gpr_inf_future(GPR_CLOCK_MONOTONIC),
                                                   NULL));
  s->ended = 1;
  s->end_status = px__status(s->method, s->code, s->details, s->error_string);
  snprintf(s->end_error, sizeof s->end_error, "%s", s->end_status ? px_last_error() : "");
  return s->end_status;
}

px_status_t px_rpc_stream_read(px_rpc_stream_t *s, int timeout_ms, ProtobufCMessage **msg) {
  *msg = NULL;
  if (s->ended) {
    px__rpc_set_last_code((px_rpc_code_t)s->code);
    if (s->end_status) return px_set_error(s->end_status, "%s", s->end_error);
    return PX_OK;
  }
  if (!s->recv_pending) {
    grpc_op op;
    memset(&op, 0, sizeof op);
    op.op = GRPC_OP_RECV_MESSAGE;
    op.data.recv_message.recv_message = &s->recv;
    grpc_call_error err = grpc_call_start_batch(s->call, &op, 1, PX__TAG(PX__TAG_RECV), NULL);
    if (err != GRPC_CALL_OK)
      return px__local(px_set_error(PX_ERR_BACKEND, "%s: cannot read: %s", s->method,
                                    grpc_call_error_to_string(err)));
    s->recv_pending = 1;
  }
  gpr_timespec deadline = px__rpc_deadline(timeout_ms);
  while (s->recv_pending) {
    grpc_event ev = grpc_completion_queue_next(s->cq, deadline, NULL);
    if (ev.type == GRPC_QUEUE_TIMEOUT) {
      px__rpc_set_last_code(PX_RPC_DEADLINE_EXCEEDED);
      return px_set_error(PX_ERR_TIMEOUT, "%s: no message within %d ms", s->method, timeout_ms);
    }
    if (ev.type != GRPC_OP_COMPLETE) continue;
    px__stream_event(s, ev);
  }
  if (!s->recv) return px__stream_end(s);
  *msg = px__rpc_unpack(s->desc, s->recv);
  grpc_byte_buffer_destroy(s->recv);
  s->recv = NULL;
  if (!*msg) {
    px__rpc_set_last_code(PX_RPC_INTERNAL);
    return px_set_error(PX_ERR_FORMAT, "%s: a streamed message is not a valid %s", s->method,
                        s->desc->name);
  }
  px__rpc_set_last_code(PX_RPC_OK);
  return PX_OK;
}

void px_rpc_stream_cancel(px_rpc_stream_t *s) {
  if (s && s->call) grpc_call_cancel(s->call, NULL);
}

void px_rpc_stream_destroy(px_rpc_stream_t *s) {
  if (!s) return;
  if (s->call) {
    grpc_call_cancel(s->call, NULL);
    while (s->start_pending || s->status_pending || s->recv_pending)
      px__stream_event(s, grpc_completion_queue_next(s->cq, gpr_inf_future(GPR_CLOCK_MONOTONIC),
                                                     NULL));
    grpc_call_unref(s->call);
  }
  if (s->recv) grpc_byte_buffer_destroy(s->recv);
  grpc_metadata_array_destroy(&s->init_md);
  grpc_metadata_array_destroy(&s->trail_md);
  grpc_slice_unref(s->details);
  if (s->error_string) gpr_free((void *)s->error_string);
  if (s->cq) {
    grpc_completion_queue_shutdown(s->cq);
    while (grpc_completion_queue_next(s->cq, gpr_inf_future(GPR_CLOCK_MONOTONIC), NULL).type !=
           GRPC_QUEUE_SHUTDOWN) {
    }
    grpc_completion_queue_destroy(s->cq);
  }
  px_free(s->method);
  px_free(s);
}
