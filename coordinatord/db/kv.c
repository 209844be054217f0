/* The rendezvous key/value store's queries (db/kv.h). */
#include "kv.h" /* db/kv.h */

#include "prunex/check.h"

px_status_t coord_db_kv_usage(coord_t *c, const char *job_id, int *state, int64_t *keys,
                              int64_t *bytes) {
  *state = -1;
  *keys = *bytes = 0;
  return px_store_row(c->db,
                      "SELECT j.state, (SELECT count(*) FROM kv k WHERE k.job_id = j.job_id),"
                      " (SELECT coalesce(sum(length(k.value)), 0) FROM kv k"
                      " WHERE k.job_id = j.job_id) FROM jobs j WHERE j.job_id = ?1",
                      PX_STORE_ARGS(PX_ARG_TEXT(job_id)),
                      PX_STORE_COLS(PX_COL_I32(state), PX_COL_INT(keys), PX_COL_INT(bytes)), NULL);
}

px_status_t coord_db_kv_put(coord_t *c, const char *job_id, const char *key, const void *value,
                            size_t len, int64_t now) {
  px_store_stmt_t *st;
  PX_CHECK(px_store_stmt(c->db,
                         "INSERT OR REPLACE INTO kv (job_id, key, value, updated_unix_ms)"
                         " VALUES (?1, ?2, ?3, ?4)",
                         &st));
  PX_CHECK(px_store_bind_args(st, PX_STORE_ARGS(PX_ARG_TEXT(job_id), PX_ARG_TEXT(key))));
  PX_CHECK(px_store_bind_blob(st, 3, value, len));
  PX_CHECK(px_store_bind_int64(st, 4, now));
  return px_store_run(st);
}

px_status_t coord_db_kv_get(coord_t *c, const char *job_id, const char *key,
                            coord_db_kv_value_fn fn, void *ctx, int *found) {
  px_store_stmt_t *st;
  *found = 0;
  PX_CHECK(px_store_stmt(c->db, "SELECT value FROM kv WHERE job_id = ?1 AND key = ?2", &st));
  PX_CHECK(px_store_bind_args(st, PX_STORE_ARGS(PX_ARG_TEXT(job_id), PX_ARG_TEXT(key))));
  px_status_t rc = px_store_step(st);
  if (rc <= 0) return rc;
  size_t len = 0;
  const void *v = px_store_column_blob(st, 0, &len);
  *found = 1;
  fn(ctx, v, len);
  px_store_reset(st);
  return PX_OK;
}
