/* The sweeps' queries (db/sweep.h). */
#include <stdio.h>
#include <string.h>

#include "sweep.h" /* db/sweep.h */
#include "prunex/check.h"

px_status_t coord_db_sweep_new(coord_t *c, const char *owner, const char *name,
                            const char *spec_yaml, int64_t njobs, int64_t now, char *sweep_id,
                            size_t cap) {
  px_store_stmt_t *st;
  PX_CHECK(px_store_stmt(c->db,
                         "INSERT INTO sweeps (sweep_id, owner, name, spec_yaml, jobs,"
                         " created_unix_ms) VALUES ('new', ?1, ?2, ?3, ?4, ?5)",
                         &st));
  PX_CHECK(px_store_bind_args(st, PX_STORE_ARGS(PX_ARG_TEXT(owner), PX_ARG_TEXT(name),
                                                PX_ARG_TEXT(spec_yaml), PX_ARG_INT(njobs),
                                                PX_ARG_INT(now))));
  PX_CHECK(px_store_run(st));
  int64_t id = px_store_last_insert_id(c->db);
  snprintf(sweep_id, cap, COORD_SWEEP_PREFIX "%06lld", (long long)id);
  PX_CHECK(px_store_stmt(c->db, "UPDATE sweeps SET sweep_id = ?2 WHERE id = ?1", &st));
  PX_CHECK(px_store_bind_args(st, PX_STORE_ARGS(PX_ARG_INT(id), PX_ARG_TEXT(sweep_id))));
  return px_store_run(st);
}

px_status_t coord_db_sweep_job_set(coord_t *c, const char *job_id, const char *sweep_id,
                                const char *point) {
  px_store_stmt_t *st;
  PX_CHECK(px_store_stmt(c->db, "UPDATE jobs SET sweep_id = ?2, sweep_point = ?3 WHERE job_id = ?1",
                         &st));
  PX_CHECK(px_store_bind_args(st, PX_STORE_ARGS(PX_ARG_TEXT(job_id), PX_ARG_TEXT(sweep_id),
                                                PX_ARG_TEXT(point))));
  return px_store_run(st);
}

px_status_t coord_db_sweep_owner(coord_t *c, const char *sweep_id, int *found, char *owner,
                              size_t cap) {
  px_store_stmt_t *st;
  PX_CHECK(px_store_stmt(c->db, "SELECT owner FROM sweeps WHERE sweep_id = ?1", &st));
  PX_CHECK(px_store_bind_text(st, 1, sweep_id));
  px_status_t rc = px_store_step(st);
  if (rc < 0) return rc;
  *found = rc == 1;
  snprintf(owner, cap, "%s", rc == 1 ? px_store_column_text(st, 0) : "");
  if (rc == 1) px_store_reset(st);
  return PX_OK;
}

px_status_t coord_db_sweep_unfinished(coord_t *c, coord_arena_t *a, const char *sweep_id,
                                   coord_db_sweep_job_t **out, size_t *n) {
  px_store_stmt_t *st;
  size_t cap = 0;
  *out = NULL;
  *n = 0;
  PX_CHECK(px_store_stmt(c->db,
                         "SELECT job_id, state FROM jobs WHERE sweep_id = ?1"
                         " AND state IN (?2, ?3, ?4) ORDER BY id",
                         &st));
  PX_CHECK(px_store_bind_args(st, PX_STORE_ARGS(PX_ARG_TEXT(sweep_id), PX_ARG_INT(JS_PENDING),
                                                PX_ARG_INT(JS_SCHEDULED), PX_ARG_INT(JS_RUNNING))));
  px_status_t rc;
  while ((rc = px_store_step(st)) == 1) {
    coord_db_sweep_job_t *j = coord_push(a, (void **)out, n, &cap, sizeof *j);
    if (!j || !(j->job_id = coord_strdup(a, px_store_column_text(st, 0)))) {
      px_store_reset(st);
      return PX_ERR_NOMEM;
    }
    j->state = (int)px_store_column_int64(st, 1);
  }
  return rc < 0 ? rc : PX_OK;
}
