/* The node-local metrics file: open with retries (the workers of a node open
 * it at the same moment), and the inserts pxworker makes. See metrics.h. */
#include "metrics.h"

#include <stdio.h>
#include <string.h>

#include "metrics_schema.h"
#include "prunex/check.h"
#include "prunex/report.h"
#include "util.h"

struct pxa_metrics {
  px_store_t *db;
};

px_status_t pxa_metrics_open(const char *path, pxa_metrics_t **out) {
  *out = NULL;
  px_store_options_t opt = {
      .schema = PXA_METRICS_SCHEMA,
      .migrations = pxa_metrics_migrations,
      .nmigrations = PXA_METRICS_NMIGRATIONS,
      .busy_timeout_ms = 10000,
      .quick_check = 0,
      .create = 1,
  };
  px_store_t *db = NULL;
  px_status_t st = PX_OK;
  /* Two processes that find the file new both try to create the schema
   * (px_store_open reads the version before it takes the write lock); the
   * loser fails ("table already exists") and finds it complete on a retry.
   * A file that is not ours (PX_ERR_FORMAT) fails the same way every time. */
  for (int attempt = 0; attempt < 12; attempt++) {
    st = px_store_open(path, &opt, &db);
    if (st == PX_OK || st == PX_ERR_NOMEM || st == PX_ERR_FORMAT) break;
    pxa_sleep_ms(50 + 25 * attempt);
  }
  if (st != PX_OK) return st;
  pxa_metrics_t *m = px_calloc(1, sizeof *m, "agent.metrics");
  if (!m) {
    px_store_close(db);
    return PX_ERR_NOMEM;
  }
  m->db = db;
  *out = m;
  return PX_OK;
}

void pxa_metrics_close(pxa_metrics_t *m) {
  if (!m) return;
  px_store_close(m->db);
  px_free(m);
}

px_store_t *pxa_metrics_store(pxa_metrics_t *m) { return m->db; }

px_status_t pxa_metrics_run_start(pxa_metrics_t *m, const pxa_run_info_t *in) {
  px_store_stmt_t *st;
  PX_CHECK(px_store_stmt(m->db,
                         "INSERT OR REPLACE INTO runs (job_id, rank, local_rank, node_index,"
                         " world_size, num_nodes, strategy, model, dataset, pid, started_unix_ms)"
                         " VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11)",
                         &st));
  PX_CHECK(px_store_bind_text(st, 1, in->job_id));
  PX_CHECK(px_store_bind_int64(st, 2, in->rank));
  PX_CHECK(px_store_bind_int64(st, 3, in->local_rank));
  PX_CHECK(px_store_bind_int64(st, 4, in->node_index));
  PX_CHECK(px_store_bind_int64(st, 5, in->world_size));
  PX_CHECK(px_store_bind_int64(st, 6, in->num_nodes));
  PX_CHECK(px_store_bind_text(st, 7, in->strategy ? in->strategy : ""));
  PX_CHECK(px_store_bind_text(st, 8, in->model ? in->model : ""));
  PX_CHECK(px_store_bind_text(st, 9, in->dataset ? in->dataset : ""));
  PX_CHECK(px_store_bind_int64(st, 10, in->pid));
  PX_CHECK(px_store_bind_int64(st, 11, pxa_unix_ms()));
  return px_store_run(st);
}

px_status_t pxa_metrics_model_path(pxa_metrics_t *m, const char *job_id, int rank, char *buf,
                                   size_t cap) {
  px_store_stmt_t *st;
  buf[0] = '\0';
  PX_CHECK(px_store_stmt(m->db, "SELECT model_path FROM runs WHERE job_id = ?1 AND rank = ?2",
                         &st));
  PX_CHECK(px_store_bind_text(st, 1, job_id));
  PX_CHECK(px_store_bind_int64(st, 2, rank));
  if (px_store_step(st) == 1) snprintf(buf, cap, "%s", px_store_column_text(st, 0));
  px_store_reset(st);
  return PX_OK;
}

px_status_t pxa_metrics_run_end(pxa_metrics_t *m, const char *job_id, int rank,
                                const pxa_run_end_t *e) {
  px_store_stmt_t *st;
  PX_CHECK(px_store_stmt(m->db,
                         "UPDATE runs SET finished_unix_ms = ?3, status = ?4, error = ?5,"
                         " iterations = ?6, test_accuracy = ?7, test_loss = ?8, density = ?9,"
                         " seconds = ?10, sent_intra = ?11, recv_intra = ?12, sent_inter = ?13,"
                         " recv_inter = ?14, model_path = ?15 WHERE job_id = ?1 AND rank = ?2",
                         &st));
  PX_CHECK(px_store_bind_text(st, 1, job_id));
  PX_CHECK(px_store_bind_int64(st, 2, rank));
  PX_CHECK(px_store_bind_int64(st, 3, pxa_unix_ms()));
  PX_CHECK(px_store_bind_text(st, 4, e->status));
  PX_CHECK(px_store_bind_text(st, 5, e->error ? e->error : ""));
  PX_CHECK(px_store_bind_int64(st, 6, e->iterations));
  PX_CHECK(px_store_bind_double(st, 7, e->test_accuracy));
  PX_CHECK(px_store_bind_double(st, 8, e->test_loss));
  PX_CHECK(px_store_bind_double(st, 9, e->density));
  PX_CHECK(px_store_bind_double(st, 10, e->seconds));
  PX_CHECK(px_store_bind_int64(st, 11, (int64_t)e->sent_intra));
  PX_CHECK(px_store_bind_int64(st, 12, (int64_t)e->recv_intra));
  PX_CHECK(px_store_bind_int64(st, 13, (int64_t)e->sent_inter));
  PX_CHECK(px_store_bind_int64(st, 14, (int64_t)e->recv_inter));
  PX_CHECK(px_store_bind_text(st, 15, e->model_path ? e->model_path : ""));
  return px_store_run(st);
}

static px_status_t pxa__record(pxa_metrics_t *m, int rank, const Prunex__V1__IterationReport *r,
                               double test_loss, uint64_t rank_intra, uint64_t rank_inter) {
  px_store_stmt_t *st;
  PX_CHECK(px_store_stmt(m->db,
                         "DELETE FROM iteration_layers WHERE job_id = ?1 AND rank = ?2"
                         " AND iteration = ?3",
                         &st));
  PX_CHECK(px_store_bind_text(st, 1, r->job_id));
  PX_CHECK(px_store_bind_int64(st, 2, rank));
  PX_CHECK(px_store_bind_int64(st, 3, r->iteration));
  PX_CHECK(px_store_run(st));
  /* the report's columns (the table's PX_REPORT_AGENT fields), then this
   * file's own: where the row came from, the test loss (not in the report)
   * and the rank's own traffic */
  char sql[1800];
  if (!px_report_insert_sql(PX_REPORT_ITERATION, PX_REPORT_AGENT, "iterations",
                            "job_id, rank, iteration, source, test_loss, rank_bytes_intra,"
                            " rank_bytes_inter",
                            7, sql, sizeof sql))
    return px_set_error(PX_ERR_INTERNAL, "iterations: the INSERT is over %zu bytes", sizeof sql);
  Prunex__V1__IterationReport row = *r;
  if (!row.time_unix_ms) row.time_unix_ms = pxa_unix_ms();
  PX_CHECK(px_store_stmt(m->db, sql, &st));
  PX_CHECK(px_store_bind_text(st, 1, r->job_id));
  PX_CHECK(px_store_bind_int64(st, 2, rank));
  PX_CHECK(px_store_bind_int64(st, 3, r->iteration));
  PX_CHECK(px_store_bind_text(st, 4, "local"));
  PX_CHECK(px_store_bind_double(st, 5, test_loss));
  PX_CHECK(px_store_bind_int64(st, 6, (int64_t)rank_intra));
  PX_CHECK(px_store_bind_int64(st, 7, (int64_t)rank_inter));
  PX_CHECK(px_report_bind(PX_REPORT_ITERATION, PX_REPORT_AGENT, st, 8, &row));
  PX_CHECK(px_store_run(st));
  if (!px_report_insert_sql(PX_REPORT_LAYER, PX_REPORT_AGENT, "iteration_layers",
                            "job_id, rank, iteration", 3, sql, sizeof sql))
    return px_set_error(PX_ERR_INTERNAL, "iteration_layers: the INSERT is over %zu bytes",
                        sizeof sql);
  for (size_t i = 0; i < r->n_layers; i++) {
    PX_CHECK(px_store_stmt(m->db, sql, &st));
    PX_CHECK(px_store_bind_text(st, 1, r->job_id));
    PX_CHECK(px_store_bind_int64(st, 2, rank));
    PX_CHECK(px_store_bind_int64(st, 3, r->iteration));
    PX_CHECK(px_report_bind(PX_REPORT_LAYER, PX_REPORT_AGENT, st, 4, r->layers[i]));
    PX_CHECK(px_store_run(st));
  }
  return PX_OK;
}

px_status_t pxa_metrics_record(pxa_metrics_t *m, int rank, const Prunex__V1__IterationReport *r,
                               double test_loss, uint64_t rank_bytes_intra,
                               uint64_t rank_bytes_inter) {
  PX_CHECK(px_store_begin(m->db));
  px_status_t st = pxa__record(m, rank, r, test_loss, rank_bytes_intra, rank_bytes_inter);
  if (st == PX_OK) st = px_store_commit(m->db);
  if (st != PX_OK) px_store_rollback(m->db);
  return st;
}
