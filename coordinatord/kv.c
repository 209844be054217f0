/* Job-scoped rendezvous: KvPut stores a key (and answers every KvGet parked
 * on it), KvGet answers at once when the key exists and otherwise parks the
 * call with a timer for its wait. Parked calls cost no thread and block
 * nothing: the loop goes on serving. */
#include <stdio.h>
#include <string.h>

#include "coord.h"
#include "flow.h"
#include "db/kv.h"
#include "prunex/kv.h"
#include "prunex/kv_internal.h"
#include "prunex/check.h"

struct coord_kv_wait {
  uv_timer_t timer;          /* first: the close callback frees the struct */
  coord_kv_wait_t *next;
  coord_t *c;
  px_rpc_srv_call_t *call;   /* NULL once answered */
  char job_id[128];
  char key[256];
};

static void coord_kv_wait_free(uv_handle_t *h) { px_free(h); }

static void coord_kv_wait_unlink(coord_t *c, coord_kv_wait_t *w) {
  for (coord_kv_wait_t **p = &c->kv_waits; *p; p = &(*p)->next) {
    if (*p == w) {
      *p = w->next;
      break;
    }
  }
  uv_timer_stop(&w->timer);
  uv_close((uv_handle_t *)&w->timer, coord_kv_wait_free);
}

static void coord_kv_wait_timeout(uv_timer_t *t) {
  coord_kv_wait_t *w = (coord_kv_wait_t *)t;
  Prunex__V1__KvGetResponse resp = PRUNEX__V1__KV_GET_RESPONSE__INIT;
  resp.found = 0;
  px_rpc_srv_call_t *call = w->call;
  w->call = NULL;
  coord_kv_wait_unlink(w->c, w);
  px_rpc_srv_reply(call, &resp.base);
}

static void coord_kv_wait_cancelled(px_rpc_srv_call_t *call, void *arg) {
  coord_kv_wait_t *w = arg;
  w->call = NULL;
  coord_kv_wait_unlink(w->c, w);
  px_rpc_srv_finish(call, PX_RPC_CANCELLED, "wait cancelled");
}

void coord_kv_cancel_all(coord_t *c) {
  while (c->kv_waits) {
    coord_kv_wait_t *w = c->kv_waits;
    px_rpc_srv_call_t *call = w->call;
    w->call = NULL;
    coord_kv_wait_unlink(c, w);
    if (call) px_rpc_srv_finish(call, PX_RPC_UNAVAILABLE, "coordinator shutting down");
  }
}

/* Checks job_id and key; answers the call and returns 0 when they are bad
 * or the job is unknown. */
static int coord_kv_check(coord_t *c, px_rpc_srv_call_t *call, const char *job_id,
                          const char *key) {
  if (!job_id[0] || strlen(job_id) >= sizeof ((coord_kv_wait_t *)0)->job_id) {
    px_rpc_srv_finish(call, PX_RPC_INVALID_ARGUMENT, "job_id: %s",
                      job_id[0] ? "too long" : "required");
    return 0;
  }
  if (px_kv_key_validate(key) != PX_OK) {
    px_rpc_srv_finish(call, PX_RPC_INVALID_ARGUMENT, "key: %s", px_last_error());
    return 0;
  }
  coord_arena_t a;
  coord_arena_init(&a);
  int found = 0;
  px_status_t rc = coord_job_lookup(c, &a, job_id, &found, NULL, NULL);
  coord_arena_free(&a);
  if (rc != PX_OK) {
    coord_fail_internal(c, call);
    return 0;
  }
  if (!found) {
    px_rpc_srv_finish(call, PX_RPC_NOT_FOUND, "job %s not found", job_id);
    return 0;
  }
  return 1;
}

/* Bounds of a job's rendezvous store: what the data plane
 * exchanges is a few small entries per rank. */
#define COORD_KV_MAX_VALUE (256 << 10)
#define COORD_KV_MAX_KEYS 16384
#define COORD_KV_MAX_BYTES (32 << 20)

/* Refuses a put into a job that is not live, or past the job's bounds;
 * answers the call and returns 0 then. */
static int coord_kv_put_allowed(coord_t *c, px_rpc_srv_call_t *call,
                                const Prunex__V1__KvPutRequest *r) {
  if (r->value.len > COORD_KV_MAX_VALUE) {
    px_rpc_srv_finish(call, PX_RPC_RESOURCE_EXHAUSTED,
                      "value of %zu bytes for key %s: the limit is %d bytes", r->value.len,
                      r->key, COORD_KV_MAX_VALUE);
    return 0;
  }
  int state;
  int64_t keys, bytes;
  if (coord_db_kv_usage(c, r->job_id, &state, &keys, &bytes) != PX_OK) {
    coord_fail_internal(c, call);
    return 0;
  }
  if (coord_job_terminal(state)) {
    px_rpc_srv_finish(call, PX_RPC_FAILED_PRECONDITION, "job %s has finished (%s): no KvPut",
                      r->job_id, px_rpc_job_state_name(state));
    return 0;
  }
  if (keys >= COORD_KV_MAX_KEYS || bytes + (int64_t)r->value.len > COORD_KV_MAX_BYTES) {
    px_rpc_srv_finish(call, PX_RPC_RESOURCE_EXHAUSTED,
                      "job %s holds %lld keys of %lld bytes: the limits are %d keys and %d bytes",
                      r->job_id, (long long)keys, (long long)bytes, COORD_KV_MAX_KEYS,
                      COORD_KV_MAX_BYTES);
    return 0;
  }
  return 1;
}

/* The caller's rank in job_id when its rank secret says (tokens), else -1:
 * only then is the rank's node fenced, the epoch it says always. */
static int coord_kv_rank(const coord_t *c, const char *job_id) {
  return c->who.role == COORD_ROLE_RANK && !strcmp(c->who.job_id, job_id) ? c->who.rank : -1;
}

void coord_rpc_kv_put(px_rpc_srv_call_t *call, const ProtobufCMessage *msg, void *data) {
  coord_t *c = data;
  const Prunex__V1__KvPutRequest *r = (const Prunex__V1__KvPutRequest *)msg;
  if (!coord_kv_check(c, call, r->job_id, r->key)) return;
  if (!coord_kv_put_allowed(c, call, r)) return;
  if (!coord_membership_fence(c, call, "KvPut", r->job_id, coord_kv_rank(c, r->job_id), -1,
                              r->membership_epoch))
    return;
  if (coord_db_kv_put(c, r->job_id, r->key, r->value.data, r->value.len, coord_now_ms()) !=
      PX_OK) {
    coord_fail_internal(c, call);
    return;
  }
  px_log(PX_LOG_DEBUG, "job %s: kv put %s (%zu bytes)", r->job_id, r->key, r->value.len);
  Prunex__V1__KvPutResponse resp = PRUNEX__V1__KV_PUT_RESPONSE__INIT;
  px_rpc_srv_reply(call, &resp.base);

  Prunex__V1__KvGetResponse got = PRUNEX__V1__KV_GET_RESPONSE__INIT;
  got.found = 1;
  got.value = r->value;
  coord_kv_wait_t *w = c->kv_waits, *next;
  for (; w; w = next) {
    next = w->next;
    if (strcmp(w->job_id, r->job_id) != 0 || strcmp(w->key, r->key) != 0) continue;
    px_rpc_srv_call_t *waiting = w->call;
    w->call = NULL;
    coord_kv_wait_unlink(c, w);
    px_rpc_srv_reply(waiting, &got.base);
  }
}

/* Answers a KvGet with the stored value (packed before the row moves). */
static void coord_kv_reply_value(void *ctx, const void *value, size_t len) {
  Prunex__V1__KvGetResponse resp = PRUNEX__V1__KV_GET_RESPONSE__INIT;
  resp.found = 1;
  resp.value.data = (uint8_t *)value;
  resp.value.len = len;
  px_rpc_srv_reply((px_rpc_srv_call_t *)ctx, &resp.base);
}

void coord_rpc_kv_get(px_rpc_srv_call_t *call, const ProtobufCMessage *msg, void *data) {
  coord_t *c = data;
  const Prunex__V1__KvGetRequest *r = (const Prunex__V1__KvGetRequest *)msg;
  if (!coord_kv_check(c, call, r->job_id, r->key)) return;
  if (!coord_membership_fence(c, call, "KvGet", r->job_id, coord_kv_rank(c, r->job_id), -1,
                              r->membership_epoch))
    return;
  if (r->wait_ms < 0) {
    px_rpc_srv_finish(call, PX_RPC_INVALID_ARGUMENT, "wait_ms = %d: must be >= 0", r->wait_ms);
    return;
  }
  int found = 0;
  if (coord_db_kv_get(c, r->job_id, r->key, coord_kv_reply_value, call, &found) != PX_OK) {
    coord_fail_internal(c, call);
    return;
  }
  if (found) return; /* answered */
  if (r->wait_ms == 0 || c->stopping) {
    Prunex__V1__KvGetResponse resp = PRUNEX__V1__KV_GET_RESPONSE__INIT;
    px_rpc_srv_reply(call, &resp.base);
    return;
  }
  coord_kv_wait_t *w = px_calloc(1, sizeof *w, "coordd.kv_wait");
  if (!w) {
    px_rpc_srv_finish(call, PX_RPC_RESOURCE_EXHAUSTED, "out of memory");
    return;
  }
  w->c = c;
  w->call = call;
  snprintf(w->job_id, sizeof w->job_id, "%s", r->job_id);
  snprintf(w->key, sizeof w->key, "%s", r->key);
  uv_timer_init(c->loop, &w->timer);
  uv_timer_start(&w->timer, coord_kv_wait_timeout, (uint64_t)r->wait_ms, 0);
  w->next = c->kv_waits;
  c->kv_waits = w;
  px_rpc_srv_on_cancel(call, coord_kv_wait_cancelled, w);
}
