/* Rendezvous key/value store, scoped to one job: how ranks exchange the
 * addresses and ids their collectives need (UCX worker addresses, NCCL
 * unique ids) before any data-plane link exists.
 *
 * One interface, several stores behind it: the coordinator's KvPut/KvGet RPCs
 * (production, libpxcore/rpc) and a shared directory (tests and single-host
 * runs, px_kv_open_dir). Callers see only px_kv_t. */
#ifndef PRUNEX_KV_H
#define PRUNEX_KV_H

#include <stddef.h>

#include "prunex/px.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct px_kv px_kv_t;

/* What a store implements. get waits up to wait_ms for the key to appear
 * and answers PX_ERR_TIMEOUT if it does not; on success *val is allocated
 * with px_malloc and owned by the caller (px_free). Implementations must be
 * callable from any thread, one call at a time per handle. */
typedef struct {
  px_status_t (*put)(void *ctx, const char *key, const void *val, size_t len);
  px_status_t (*get)(void *ctx, const char *key, int wait_ms, void **val, size_t *len);
  void (*destroy)(void *ctx);
} px_kv_ops_t;

/* Wraps a store. The handle owns ctx from then on (ops->destroy frees it).
 * Fails with PX_ERR_NOMEM (then ctx is destroyed too). */
PX_API px_status_t px_kv_create(const px_kv_ops_t *ops, void *ctx, px_kv_t **out);
PX_API void px_kv_destroy(px_kv_t *kv);

/* Keys are non-empty strings of at most 255 bytes of [A-Za-z0-9._:/-].
 * Putting an existing key replaces its value. */
PX_API px_status_t px_kv_put(px_kv_t *kv, const char *key, const void *val, size_t len);
PX_API px_status_t px_kv_get(px_kv_t *kv, const char *key, int wait_ms, void **val, size_t *len);

/* A store in a directory shared by the ranks (same host or shared file
 * system): each key is one file, written atomically (temp file + rename);
 * get polls until the deadline. The directory is created if missing. */
PX_API px_status_t px_kv_open_dir(const char *dir, px_kv_t **out);

#ifdef __cplusplus
}
#endif
#endif
