/* The rendezvous store handle: key checks and dispatch to the store behind
 * it (px_kv_ops_t), so callers never depend on which store they talk to. */
#include <string.h>

#include "prunex/kv.h"
#include "prunex/kv_internal.h"
#include "px_check.h"

struct px_kv {
  px_kv_ops_t ops;
  void *ctx;
};

px_status_t px_kv_create(const px_kv_ops_t *ops, void *ctx, px_kv_t **out) {
  *out = NULL;
  px_kv_t *kv = px_malloc(sizeof *kv, "kv.handle");
  if (!kv) {
    if (ops->destroy) ops->destroy(ctx);
    return PX_ERR_NOMEM;
  }
  kv->ops = *ops;
  kv->ctx = ctx;
  *out = kv;
  return PX_OK;
}

void px_kv_destroy(px_kv_t *kv) {
  if (!kv) return;
  if (kv->ops.destroy) kv->ops.destroy(kv->ctx);
  px_free(kv);
}

px_status_t px_kv_key_validate(const char *key) {
  PX_REQUIRE(key != NULL && key[0] != '\0', "rendezvous key is empty");
  size_t n = strlen(key);
  PX_REQUIRE(n <= 255, "rendezvous key '%.32s...' is longer than 255 bytes", key);
  for (size_t i = 0; i < n; i++) {
    char c = key[i];
    int ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
             c == '.' || c == '_' || c == ':' || c == '/' || c == '-';
    PX_REQUIRE(ok, "rendezvous key '%s' has a character outside [A-Za-z0-9._:/-] at %zu", key, i);
  }
  return PX_OK;
}

px_status_t px_kv_put(px_kv_t *kv, const char *key, const void *val, size_t len) {
  PX_CHECK(px_kv_key_validate(key));
  PX_REQUIRE(val != NULL || len == 0, "rendezvous put of '%s': NULL value", key);
  return kv->ops.put(kv->ctx, key, val, len);
}

px_status_t px_kv_get(px_kv_t *kv, const char *key, int wait_ms, void **val, size_t *len) {
  *val = NULL;
  *len = 0;
  PX_CHECK(px_kv_key_validate(key));
  PX_REQUIRE(wait_ms >= 0, "rendezvous get of '%s': negative wait %d ms", key, wait_ms);
  return kv->ops.get(kv->ctx, key, wait_ms, val, len);
}
