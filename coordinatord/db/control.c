/* The control policy's queries (db/control.h). */
#include "control.h"

#include "prunex/check.h"

px_status_t coord_db_control_decision(coord_t *c, coord_arena_t *a, const char *job_id,
                                      int iteration, Prunex__V1__ControlDecision **out) {
  px_store_stmt_t *st;
  *out = NULL;
  PX_CHECK(px_store_stmt(c->db,
                         iteration < 0 ? "SELECT decision FROM decisions WHERE job_id = ?1"
                                         " ORDER BY iteration DESC LIMIT 1"
                                       : "SELECT decision FROM decisions WHERE job_id = ?1"
                                         " AND iteration = ?2",
                         &st));
  PX_CHECK(px_store_bind_text(st, 1, job_id));
  if (iteration >= 0) PX_CHECK(px_store_bind_int64(st, 2, iteration));
  px_status_t rc = px_store_step(st);
  if (rc <= 0) return rc;
  size_t len = 0;
  const void *blob = px_store_column_blob(st, 0, &len);
  *out = (Prunex__V1__ControlDecision *)protobuf_c_message_unpack(
      &prunex__v1__control_decision__descriptor, &a->pb, len, blob);
  px_store_reset(st);
  if (!*out)
    return px_set_error(PX_ERR_FORMAT, "%s: job %s: stored decision %d does not unpack",
                        px_store_path(c->db), job_id, iteration);
  return PX_OK;
}

px_status_t coord_db_control_decision_put(coord_t *c, const char *job_id,
                                          const Prunex__V1__ControlDecision *d, int64_t now_ms) {
  size_t len = protobuf_c_message_get_packed_size(&d->base);
  uint8_t *blob = px_malloc(len ? len : 1, "coordd.decision");
  if (!blob) return PX_ERR_NOMEM;
  protobuf_c_message_pack(&d->base, blob);
  px_store_stmt_t *st;
  px_status_t rc = px_store_stmt(c->db,
                                 now_ms ? "INSERT OR REPLACE INTO decisions (job_id, iteration,"
                                          " decision, time_unix_ms) VALUES (?1, ?2, ?3, ?4)"
                                        : "UPDATE decisions SET decision = ?3 WHERE job_id = ?1"
                                          " AND iteration = ?2",
                                 &st);
  if (rc == PX_OK) rc = px_store_bind_text(st, 1, job_id);
  if (rc == PX_OK) rc = px_store_bind_int64(st, 2, d->iteration);
  if (rc == PX_OK) rc = px_store_bind_blob(st, 3, blob, len);
  if (rc == PX_OK && now_ms) rc = px_store_bind_int64(st, 4, now_ms);
  if (rc == PX_OK) rc = px_store_run(st);
  px_free(blob);
  return rc;
}

px_status_t coord_db_control_state(coord_t *c, const char *job_id, int *stable_iterations,
                                   int *frozen) {
  int found = 0;
  PX_CHECK(px_store_row(c->db,
                        "SELECT admm_stable_iterations, admm_frozen FROM jobs WHERE job_id = ?1",
                        PX_STORE_ARGS(PX_ARG_TEXT(job_id)),
                        PX_STORE_COLS(PX_COL_I32(stable_iterations), PX_COL_I32(frozen)),
                        &found));
  return found ? PX_OK : PX_ERR_INTERNAL;
}

px_status_t coord_db_control_state_put(coord_t *c, const char *job_id, int stable_iterations,
                                       int frozen, int iteration, const char *checkpoint_problem,
                                       int64_t now_ms) {
  return px_store_run_args(c->db,
                           "UPDATE jobs SET admm_stable_iterations = ?2, admm_frozen = ?3,"
                           " iteration = max(iteration, ?4), updated_unix_ms = ?5,"
                           " checkpoint_problem = ?6 WHERE job_id = ?1",
                           PX_STORE_ARGS(PX_ARG_TEXT(job_id), PX_ARG_INT(stable_iterations),
                                         PX_ARG_INT(frozen), PX_ARG_INT(iteration),
                                         PX_ARG_INT(now_ms), PX_ARG_TEXT(checkpoint_problem)));
}

px_status_t coord_db_control_penalty(coord_t *c, const char *job_id, int layer, double *rho1,
                                     double *rho2, int *found) {
  return px_store_row(c->db,
                      "SELECT rho1, rho2 FROM job_penalties WHERE job_id = ?1 AND layer = ?2",
                      PX_STORE_ARGS(PX_ARG_TEXT(job_id), PX_ARG_INT(layer)),
                      PX_STORE_COLS(PX_COL_REAL(rho1), PX_COL_REAL(rho2)), found);
}

px_status_t coord_db_control_penalty_put(coord_t *c, const char *job_id, int layer, double rho1,
                                         double rho2) {
  return px_store_run_args(c->db,
                           "INSERT OR REPLACE INTO job_penalties (job_id, layer, rho1, rho2)"
                           " VALUES (?1, ?2, ?3, ?4)",
                           PX_STORE_ARGS(PX_ARG_TEXT(job_id), PX_ARG_INT(layer), PX_ARG_REAL(rho1),
                                         PX_ARG_REAL(rho2)));
}

px_status_t coord_db_control_layers(coord_t *c, const char *job_id, int64_t *n) {
  *n = 0;
  return px_store_row(c->db, "SELECT count(*) FROM job_penalties WHERE job_id = ?1",
                      PX_STORE_ARGS(PX_ARG_TEXT(job_id)), PX_STORE_COLS(PX_COL_INT(n)), NULL);
}
