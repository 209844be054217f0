/* The authorisation's queries (db/auth.h). */
#include "auth.h" /* db/auth.h */

#include <stdio.h>

#include "db_core.h"
#include "prunex/check.h"

static px_status_t coord_db_clear_fill(coord_arena_t *a, px_store_stmt_t *st, void *obj,
                                       void *arg) {
  (void)arg;
  coord_db_auth_clear_t *r = obj;
  r->job_id = coord_strdup(a, px_store_column_text(st, 0));
  r->rank = px_store_column_int64(st, 1);
  r->secret = coord_strdup(a, px_store_column_text(st, 2));
  r->state = (int)px_store_column_int64(st, 3);
  return r->job_id && r->secret ? PX_OK : PX_ERR_NOMEM;
}

px_status_t coord_db_auth_clear_secrets(coord_t *c, coord_arena_t *a, coord_db_auth_clear_t **out,
                                        size_t *n) {
  return coord_db_rows(c, a,
                       "SELECT r.job_id, r.rank, r.secret, j.state FROM job_ranks r"
                       " JOIN jobs j ON j.job_id = r.job_id WHERE r.secret != ''",
                       NULL, 0, sizeof **out, out, n, coord_db_clear_fill, NULL);
}

px_status_t coord_db_auth_secret_hash_set(coord_t *c, const char *job_id, int64_t rank,
                                          const char *hash, int keep_clear) {
  return px_store_run_args(c->db,
                           "UPDATE job_ranks SET secret_hash = ?1,"
                           " secret = CASE WHEN ?4 THEN secret ELSE '' END"
                           " WHERE job_id = ?2 AND rank = ?3",
                           PX_STORE_ARGS(PX_ARG_TEXT(hash), PX_ARG_TEXT(job_id), PX_ARG_INT(rank),
                                         PX_ARG_INT(keep_clear)));
}

px_status_t coord_db_auth_secure_delete(coord_t *c, int on) {
  return px_store_exec(c->db, on ? "PRAGMA secure_delete = ON" : "PRAGMA secure_delete = OFF");
}

px_status_t coord_db_auth_rank_by_secret(coord_t *c, const char *hash, int *found, char *job_id,
                                         size_t job_cap, int *rank, char *node_id,
                                         size_t node_cap) {
  return px_store_row(c->db,
                      "SELECT r.job_id, r.rank, n.node_id FROM job_ranks r"
                      " JOIN job_nodes n ON n.job_id = r.job_id"
                      " AND n.node_index = r.node_index WHERE r.secret_hash = ?1",
                      PX_STORE_ARGS(PX_ARG_TEXT(hash)),
                      PX_STORE_COLS(PX_COL_TEXT(job_id, job_cap), PX_COL_I32(rank),
                                    PX_COL_TEXT(node_id, node_cap)),
                      found);
}

px_status_t coord_db_auth_job(coord_t *c, const char *job_id, int *found, int *state,
                              int *attempt) {
  int64_t v[2] = {-1, 0};
  PX_CHECK(px_store_row_int64(c->db, "SELECT state, attempt FROM jobs WHERE job_id = ?1", job_id,
                              v, 2, found));
  *state = *found ? (int)v[0] : -1;
  *attempt = (int)v[1];
  return PX_OK;
}

px_status_t coord_db_auth_node_name(coord_t *c, const char *node_id, char *name, size_t cap) {
  name[0] = '\0';
  return px_store_row(c->db, "SELECT name FROM nodes WHERE node_id = ?1",
                      PX_STORE_ARGS(PX_ARG_TEXT(node_id)), PX_STORE_COLS(PX_COL_TEXT(name, cap)),
                      NULL);
}

px_status_t coord_db_auth_node_holds(coord_t *c, const char *name, const char *job_id, int rank,
                                     int *holds) {
  return px_store_row(c->db,
                      "SELECT 1 FROM job_ranks r JOIN job_nodes n ON n.job_id = r.job_id"
                      " AND n.node_index = r.node_index JOIN nodes d ON d.node_id = n.node_id"
                      " WHERE r.job_id = ?1 AND r.rank = ?2 AND d.name = ?3",
                      PX_STORE_ARGS(PX_ARG_TEXT(job_id), PX_ARG_INT(rank), PX_ARG_TEXT(name)),
                      PX_STORE_COLS(PX_COL_SKIP), holds);
}
