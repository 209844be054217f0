/* The sweeps' queries (db/sweep.h). */
#include <stdio.h>
#include <string.h>

#include "sweep.h" /* db/sweep.h */
#include "db_core.h"
#include "prunex/check.h"

px_status_t coord_db_sweep_new(coord_t *c, const char *owner, const char *name,
                            const char *spec_yaml, int64_t njobs, int64_t now, char *sweep_id,
                            size_t cap) {
  PX_CHECK(px_store_run_args(c->db,
                             "INSERT INTO sweeps (sweep_id, owner, name, spec_yaml, jobs,"
                             " created_unix_ms) VALUES ('new', ?1, ?2, ?3, ?4, ?5)",
                             PX_STORE_ARGS(PX_ARG_TEXT(owner), PX_ARG_TEXT(name),
                                           PX_ARG_TEXT(spec_yaml), PX_ARG_INT(njobs),
                                           PX_ARG_INT(now))));
  int64_t id = px_store_last_insert_id(c->db);
  snprintf(sweep_id, cap, COORD_SWEEP_PREFIX "%06lld", (long long)id);
  return px_store_run_args(c->db, "UPDATE sweeps SET sweep_id = ?2 WHERE id = ?1",
                           PX_STORE_ARGS(PX_ARG_INT(id), PX_ARG_TEXT(sweep_id)));
}

px_status_t coord_db_sweep_job_set(coord_t *c, const char *job_id, const char *sweep_id,
                                const char *point) {
  return px_store_run_args(c->db,
                           "UPDATE jobs SET sweep_id = ?2, sweep_point = ?3 WHERE job_id = ?1",
                           PX_STORE_ARGS(PX_ARG_TEXT(job_id), PX_ARG_TEXT(sweep_id),
                                         PX_ARG_TEXT(point)));
}

px_status_t coord_db_sweep_owner(coord_t *c, const char *sweep_id, int *found, char *owner,
                              size_t cap) {
  owner[0] = '\0';
  return coord_db_text(c, "SELECT owner FROM sweeps WHERE sweep_id = ?1", sweep_id, owner, cap,
                       found);
}

static px_status_t coord_db_sweep_job_fill(coord_arena_t *a, px_store_stmt_t *st, void *obj,
                                           void *arg) {
  (void)arg;
  coord_db_sweep_job_t *j = obj;
  j->job_id = coord_strdup(a, px_store_column_text(st, 0));
  j->state = (int)px_store_column_int64(st, 1);
  return j->job_id ? PX_OK : PX_ERR_NOMEM;
}

px_status_t coord_db_sweep_unfinished(coord_t *c, coord_arena_t *a, const char *sweep_id,
                                   coord_db_sweep_job_t **out, size_t *n) {
  return coord_db_rows(c, a,
                       "SELECT job_id, state FROM jobs WHERE sweep_id = ?1"
                       " AND state IN (?2, ?3, ?4) ORDER BY id",
                       PX_STORE_ARGS(PX_ARG_TEXT(sweep_id), PX_ARG_INT(JS_PENDING),
                                     PX_ARG_INT(JS_SCHEDULED), PX_ARG_INT(JS_RUNNING)),
                       sizeof **out, out, n, coord_db_sweep_job_fill, NULL);
}
