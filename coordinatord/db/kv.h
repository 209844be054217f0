/* The rendezvous key/value store's queries (kv.c; the coordinator's data layer). */
#ifndef PX_COORD_DB_KV_H
#define PX_COORD_DB_KV_H

#include "../coord.h"

/* The job's state (-1: no such job) and how many keys and value bytes it
 * holds. */
px_status_t coord_db_kv_usage(coord_t *c, const char *job_id, int *state, int64_t *keys,
                              int64_t *bytes);
/* Sets the job's key to value[0..len). */
px_status_t coord_db_kv_put(coord_t *c, const char *job_id, const char *key, const void *value,
                            size_t len, int64_t now);
/* The job's key: *found 0 when absent; else fn(ctx, value, len) is called
 * with the stored bytes, which last only for that call (no copy). */
typedef void (*coord_db_kv_value_fn)(void *ctx, const void *value, size_t len);
px_status_t coord_db_kv_get(coord_t *c, const char *job_id, const char *key,
                            coord_db_kv_value_fn fn, void *ctx, int *found);

#endif
