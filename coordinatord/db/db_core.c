/* Helpers of the coordinator's data layer (db_core.h). */
#include <stdio.h>

#include "db_core.h"

#include "prunex/check.h"

px_status_t coord_db_collect(coord_arena_t *a, px_store_stmt_t *st, char ***ids, size_t *n) {
  size_t cap = *n;
  px_status_t rc;
  while ((rc = px_store_step(st)) == 1) {
    char **slot = coord_push(a, (void **)ids, n, &cap, sizeof(char *));
    if (!slot || !(*slot = coord_strdup(a, px_store_column_text(st, 0)))) {
      px_store_reset(st);
      return PX_ERR_NOMEM;
    }
  }
  if (rc < 0) px_store_reset(st);
  return rc < 0 ? rc : PX_OK;
}

px_status_t coord_db_ids(coord_t *c, coord_arena_t *a, const char *sql, const char *key,
                         char ***ids, size_t *n) {
  px_store_stmt_t *st;
  PX_CHECK(px_store_stmt(c->db, sql, &st));
  PX_CHECK(px_store_bind_text(st, 1, key));
  return coord_db_collect(a, st, ids, n);
}

px_status_t coord_db_run_key(coord_t *c, const char *sql, const char *key) {
  px_store_stmt_t *st;
  PX_CHECK(px_store_stmt(c->db, sql, &st));
  PX_CHECK(px_store_bind_text(st, 1, key));
  return px_store_run(st);
}

px_status_t coord_db_text(coord_t *c, const char *sql, const char *key, char *out, size_t cap,
                          int *found) {
  px_store_stmt_t *st;
  PX_CHECK(px_store_stmt(c->db, sql, &st));
  PX_CHECK(px_store_bind_text(st, 1, key));
  px_status_t rc = px_store_step(st);
  if (rc < 0) return rc;
  *found = rc == 1;
  if (rc == 1) snprintf(out, cap, "%s", px_store_column_text(st, 0));
  px_store_reset(st);
  return PX_OK;
}

px_status_t coord_db_event(coord_t *c, int node, const char *id, int64_t now, int from, int to,
                           const char *reason) {
  px_store_stmt_t *st;
  PX_CHECK(px_store_stmt(c->db,
                         node ? "INSERT INTO node_events (node_id, time_unix_ms, from_state,"
                                " to_state, reason) VALUES (?1, ?2, ?3, ?4, ?5)"
                              : "INSERT INTO job_events (job_id, time_unix_ms, from_state,"
                                " to_state, reason) VALUES (?1, ?2, ?3, ?4, ?5)",
                         &st));
  PX_CHECK(px_store_bind_args(st, PX_STORE_ARGS(PX_ARG_TEXT(id), PX_ARG_INT(now), PX_ARG_INT(from),
                                                PX_ARG_INT(to), PX_ARG_TEXT(reason))));
  return px_store_run(st);
}

px_status_t coord_db_query_only(coord_t *c) {
  return px_store_exec(c->db, "PRAGMA query_only = ON");
}
