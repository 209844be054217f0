/* The queries of the job queue (jobs.c, submit.c): a submission's rows, the
 * listing, ownership, the retention's choice, rank exits. */
#include <stdio.h>
#include <string.h>

#include "db_core.h"

#include "prunex/check.h"

px_status_t coord_db_job_insert(coord_t *c, const Prunex__V1__JobSpec *spec,
                                const char *spec_yaml, const char *owner, int state, int64_t now,
                                char *job_id, size_t cap) {
  size_t len = protobuf_c_message_get_packed_size(&spec->base);
  uint8_t *blob = px_malloc(len ? len : 1, "coordd.spec");
  if (!blob) return PX_ERR_NOMEM;
  protobuf_c_message_pack(&spec->base, blob);
  px_store_stmt_t *st;
  px_status_t rc;
  PX_CHECK_GOTO(px_store_stmt(c->db,
                              "INSERT INTO jobs (job_id, name, state, spec, spec_yaml, num_nodes,"
                              " workers_per_node, created_unix_ms, updated_unix_ms, owner)"
                              " VALUES ('new', ?1, ?2, ?4, '', ?5, ?6, ?7, ?7, ?3)",
                              &st),
                rc, out);
  /* the YAML is in job_spec_yaml (schema v3) */
  PX_CHECK_GOTO(px_store_bind_args(st, PX_STORE_ARGS(PX_ARG_TEXT(spec->name), PX_ARG_INT(state),
                                                     PX_ARG_TEXT(owner))),
                rc, out);
  PX_CHECK_GOTO(px_store_bind_blob(st, 4, blob, len), rc, out);
  PX_CHECK_GOTO(px_store_bind_int64(st, 5, spec->cluster->nodes), rc, out);
  PX_CHECK_GOTO(px_store_bind_int64(st, 6, spec->cluster->workers_per_node), rc, out);
  PX_CHECK_GOTO(px_store_bind_int64(st, 7, now), rc, out);
  PX_CHECK_GOTO(px_store_run(st), rc, out);
  int64_t id = px_store_last_insert_id(c->db);
  snprintf(job_id, cap, "job-%06lld", (long long)id);
  PX_CHECK_GOTO(px_store_run_args(c->db, "UPDATE jobs SET job_id = ?2 WHERE id = ?1",
                                  PX_STORE_ARGS(PX_ARG_INT(id), PX_ARG_TEXT(job_id))),
                rc, out);
  if (spec_yaml[0])
    PX_CHECK_GOTO(px_store_run_args(c->db,
                                    "INSERT INTO job_spec_yaml (job_id, spec_yaml) VALUES (?1, ?2)",
                                    PX_STORE_ARGS(PX_ARG_TEXT(job_id), PX_ARG_TEXT(spec_yaml))),
                  rc, out);
  rc = PX_OK;
out:
  px_free(blob);
  return rc;
}

px_status_t coord_db_job_owner(coord_t *c, const char *job_id, int *found, char *owner,
                               size_t cap, int *state) {
  return px_store_row(c->db, "SELECT owner, state FROM jobs WHERE job_id = ?1",
                      PX_STORE_ARGS(PX_ARG_TEXT(job_id)),
                      PX_STORE_COLS(PX_COL_TEXT(owner, cap), PX_COL_I32(state)), found);
}

px_status_t coord_db_job_ranks_info(coord_t *c, const char *job_id, int *found, int *state,
                                    int *nranks, int *attempt) {
  int64_t v[3] = {0, 0, 0};
  PX_CHECK(px_store_row_int64(c->db,
                              /* ranks past num_nodes x P: an elastic job grown */
                              "SELECT state, max(num_nodes * workers_per_node, coalesce((SELECT"
                              " max(rank) + 1 FROM job_ranks r WHERE r.job_id = jobs.job_id), 0)),"
                              " attempt FROM jobs WHERE job_id = ?1",
                              job_id, v, 3, found));
  *state = (int)v[0];
  *nranks = (int)v[1];
  *attempt = (int)v[2];
  return PX_OK;
}

px_status_t coord_db_jobs_page(coord_t *c, coord_arena_t *a, int state, const char *sweep_id,
                               const char *owner, int64_t before, int limit, char ***ids,
                               int64_t **rowids, size_t *n) {
  return coord_db_list(c, a,
                       "SELECT job_id, id FROM jobs WHERE (?1 = 0 OR state = ?1)"
                       " AND (?3 = 0 OR id < ?3) AND (?4 = '' OR sweep_id = ?4)"
                       " AND (?5 IS NULL OR owner = ?5)"
                       " ORDER BY id DESC LIMIT ?2",
                       PX_STORE_ARGS(PX_ARG_INT(state), PX_ARG_INT(limit), PX_ARG_INT(before),
                                     PX_ARG_TEXT(sweep_id), PX_ARG_TEXT(owner)),
                       COORD_LIST_COLS(COORD_LIST_TEXT(ids), COORD_LIST_INT(rowids)), n);
}

px_status_t coord_db_jobs_expired(coord_t *c, coord_arena_t *a, int64_t cutoff, int limit,
                                  char ***ids, size_t *n) {
  return coord_db_list(c, a,
                       "SELECT job_id FROM jobs WHERE finished_unix_ms > 0 AND"
                       " finished_unix_ms < ?1 AND state IN (?3, ?4, ?5, ?6)"
                       " ORDER BY finished_unix_ms LIMIT ?2",
                       PX_STORE_ARGS(PX_ARG_INT(cutoff), PX_ARG_INT(limit),
                                     PX_ARG_INT(JS_SUCCEEDED), PX_ARG_INT(JS_FAILED),
                                     PX_ARG_INT(JS_CANCELLED), PX_ARG_INT(JS_TIMEOUT)),
                       COORD_LIST_COLS(COORD_LIST_TEXT(ids)), n);
}

px_status_t coord_db_rank_exit_put(coord_t *c, const Prunex__V1__RankExit *r,
                                   const char *reason, const char *model_path, int64_t now) {
  return px_store_run_args(c->db,
                           "INSERT OR REPLACE INTO rank_exits (job_id, rank, node_id, exit_code,"
                           " signal, reason, time_unix_ms, model_path)"
                           " VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8)",
                           PX_STORE_ARGS(PX_ARG_TEXT(r->job_id), PX_ARG_INT(r->rank),
                                         PX_ARG_TEXT(r->node_id), PX_ARG_INT(r->exit_code),
                                         PX_ARG_INT(r->signal), PX_ARG_TEXT(reason),
                                         PX_ARG_INT(now), PX_ARG_TEXT(model_path)));
}

px_status_t coord_db_rank_exits_ok(coord_t *c, const char *job_id, int64_t *n, char *note,
                                   size_t cap) {
  int found;
  *n = 0;
  note[0] = '\0';
  PX_CHECK(px_store_row_int64(c->db,
                              "SELECT count(*) FROM rank_exits WHERE job_id = ?1 AND exit_code = 0"
                              " AND signal = 0",
                              job_id, n, 1, &found));
  return coord_db_text(c,
                       "SELECT reason FROM rank_exits WHERE job_id = ?1 AND exit_code = 0"
                       " AND signal = 0 AND reason != '' ORDER BY rank LIMIT 1",
                       job_id, note, cap, &found);
}
