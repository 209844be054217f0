/* The rendezvous store backed by the coordinator (px_kv_open_coordinator):
 * put is a KvPut, get a KvGet that the coordinator parks until the key
 * arrives or the wait ends. While the coordinator is unreachable (it is
 * restarting, say) both retry, so a short outage does not break a job's
 * start-up. */
#include <string.h>
#include <time.h>

#include "px_check.h"
#include "px_rpc_int.h"

#define PX__KV_PUT_RETRY_MS 10000
#define PX__KV_RETRY_SLEEP_MS 200

typedef struct {
  px_rpc_channel_t *ch;
  char *job_id;
} px__kv_coord_t;

static int64_t px__now_ms(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

static void px__sleep_ms(int64_t ms) {
  struct timespec ts = {(time_t)(ms / 1000), (long)(ms % 1000) * 1000000L};
  nanosleep(&ts, NULL);
}

static px_status_t px__kv_coord_put(void *ctx, const char *key, const void *val, size_t len) {
  px__kv_coord_t *k = ctx;
  Prunex__V1__KvPutRequest req = PRUNEX__V1__KV_PUT_REQUEST__INIT;
  req.job_id = k->job_id;
  req.key = (char *)key;
  req.value.data = (uint8_t *)val;
  req.value.len = len;
  int64_t end = px__now_ms() + PX__KV_PUT_RETRY_MS;
  for (;;) {
    px_status_t st = px_rpc_kv_put(k->ch, &req, 0);
    if (st == PX_OK || px_rpc_last_code() != PX_RPC_UNAVAILABLE || px__now_ms() >= end) return st;
    px__sleep_ms(PX__KV_RETRY_SLEEP_MS);
  }
}

static px_status_t px__kv_coord_get(void *ctx, const char *key, int wait_ms, void **val,
                                    size_t *len) {
  px__kv_coord_t *k = ctx;
  int64_t end = px__now_ms() + wait_ms;
  for (;;) {
    int64_t left = end - px__now_ms();
    Prunex__V1__KvGetRequest req = PRUNEX__V1__KV_GET_REQUEST__INIT;
    req.job_id = k->job_id;
    req.key = (char *)key;
    req.wait_ms = left > 0 ? (int32_t)left : 0;
    Prunex__V1__KvGetResponse *resp = NULL;
    px_status_t st = px_rpc_kv_get(k->ch, &req, 0, &resp);
    if (st == PX_OK) {
      if (!resp->found) {
        px_rpc_message_free(resp);
        break;
      }
      st = PX_OK;
      if (resp->value.len > 0) {
        *val = px_malloc(resp->value.len, "kv.coordinator.value");
        if (!*val) st = PX_ERR_NOMEM;
        else memcpy(*val, resp->value.data, resp->value.len);
      }
      if (st == PX_OK) *len = resp->value.len;
      px_rpc_message_free(resp);
      return st;
    }
    if (px_rpc_last_code() != PX_RPC_UNAVAILABLE || px__now_ms() >= end) return st;
    px__sleep_ms(PX__KV_RETRY_SLEEP_MS);
  }
  return px_set_error(PX_ERR_TIMEOUT, "rendezvous key '%s' of job %s did not appear within %d ms",
                      key, k->job_id, wait_ms);
}

static void px__kv_coord_destroy(void *ctx) {
  px__kv_coord_t *k = ctx;
  if (!k) return;
  px_rpc_channel_destroy(k->ch);
  px_free(k->job_id);
  px_free(k);
}

px_status_t px_kv_open_coordinator(const char *target, const char *job_id, px_kv_t **out) {
  static const px_kv_ops_t ops = {px__kv_coord_put, px__kv_coord_get, px__kv_coord_destroy};
  *out = NULL;
  PX_REQUIRE(job_id && job_id[0], "rendezvous store: empty job id");
  px__kv_coord_t *k = px_calloc(1, sizeof *k, "kv.coordinator");
  if (!k) return PX_ERR_NOMEM;
  size_t n = strlen(job_id) + 1;
  k->job_id = px_malloc(n, "kv.coordinator.job");
  if (!k->job_id) {
    px_free(k);
    return PX_ERR_NOMEM;
  }
  memcpy(k->job_id, job_id, n);
  px_status_t st = px_rpc_channel_create(target, &k->ch);
  if (st != PX_OK) {
    px__kv_coord_destroy(k);
    return st;
  }
  return px_kv_create(&ops, k, out);
}
