/* The coordinator's SQL for iteration reports (reports.h). The columns of
 * both tables are the report tables' PX_REPORT_COORD fields; the keys
 * (job_id, iteration, rank) and has_phases are this file's. */
#include "reports.h"

#include <stdio.h>

#include "prunex/check.h"

#define ITER_WHERE PX_REPORT_COORD
#define LAYER_WHERE PX_REPORT_COORD

/* A row's keys, ?1 job_id, ?2 iteration, ?3 rank, as both tables have them. */
static px_status_t coord_db_report_keys(px_store_stmt_t *st,
                                        const Prunex__V1__IterationReport *r) {
  PX_CHECK(px_store_bind_args(st, PX_STORE_ARGS(PX_ARG_TEXT(r->job_id), PX_ARG_INT(r->iteration))));
  return px_store_bind_int64(st, 3, r->rank);
}

static px_status_t coord_db_layers_put(px_store_t *db, const Prunex__V1__IterationReport *r) {
  char sql[1200];
  px_store_stmt_t *st;
  if (!px_report_insert_sql(PX_REPORT_LAYER, LAYER_WHERE, "iteration_layers",
                            "job_id, iteration, rank", 3, sql, sizeof sql))
    return px_set_error(PX_ERR_INTERNAL, "iteration_layers: the INSERT is over %zu bytes",
                        sizeof sql);
  for (size_t i = 0; i < r->n_layers; i++) {
    PX_CHECK(px_store_stmt(db, sql, &st));
    PX_CHECK(coord_db_report_keys(st, r));
    PX_CHECK(px_report_bind(PX_REPORT_LAYER, LAYER_WHERE, st, 4, r->layers[i]));
    PX_CHECK(px_store_run(st));
  }
  return PX_OK;
}

px_status_t coord_db_reports_put(px_store_t *db, const Prunex__V1__IterationReport *r,
                                 int64_t now_ms) {
  px_store_stmt_t *st;
  /* one record per iteration: a repeated report replaces the earlier one,
   * whichever rank sent either (an elastic job's rank 0 may change) */
  static const char *const del[] = {
      "DELETE FROM iteration_layers WHERE job_id = ?1 AND iteration = ?2",
      "DELETE FROM iterations WHERE job_id = ?1 AND iteration = ?2"};
  for (int i = 0; i < 2; i++) {
    PX_CHECK(px_store_stmt(db, del[i], &st));
    PX_CHECK(px_store_bind_args(st, PX_STORE_ARGS(PX_ARG_TEXT(r->job_id),
                                                  PX_ARG_INT(r->iteration))));
    PX_CHECK(px_store_run(st));
  }
  char sql[1800];
  if (!px_report_insert_sql(PX_REPORT_ITERATION, ITER_WHERE, "iterations",
                            "job_id, iteration, rank, has_phases", 4, sql, sizeof sql))
    return px_set_error(PX_ERR_INTERNAL, "iterations: the INSERT is over %zu bytes", sizeof sql);
  Prunex__V1__IterationReport row = *r;
  if (!row.time_unix_ms) row.time_unix_ms = now_ms;
  PX_CHECK(px_store_stmt(db, sql, &st));
  PX_CHECK(coord_db_report_keys(st, r));
  PX_CHECK(px_store_bind_int64(st, 4, r->phases ? 1 : 0));
  PX_CHECK(px_report_bind(PX_REPORT_ITERATION, ITER_WHERE, st, 5, &row));
  PX_CHECK(px_store_run(st));
  return coord_db_layers_put(db, r);
}

static px_status_t coord_db_layers_get(px_store_t *db, coord_arena_t *a,
                                       Prunex__V1__IterationReport *it) {
  px_store_stmt_t *st;
  px_status_t rc;
  char cols[512], sql[800];
  snprintf(sql, sizeof sql,
           "SELECT %s FROM iteration_layers WHERE job_id = ?1 AND iteration = ?2 AND rank = ?3"
           " ORDER BY layer",
           px_report_columns(PX_REPORT_LAYER, LAYER_WHERE, NULL, cols, sizeof cols));
  PX_CHECK(px_store_stmt(db, sql, &st));
  PX_CHECK(coord_db_report_keys(st, it));
  size_t cap = 0;
  while ((rc = px_store_step(st)) == 1) {
    Prunex__V1__LayerMetrics **slot =
        coord_push(a, (void **)&it->layers, &it->n_layers, &cap, sizeof *it->layers);
    Prunex__V1__LayerMetrics *L = coord_alloc(a, sizeof *L);
    if (L) {
      *L = (Prunex__V1__LayerMetrics)PRUNEX__V1__LAYER_METRICS__INIT;
      px_report_read(PX_REPORT_LAYER, LAYER_WHERE, st, 0, L, NULL);
      L->name = coord_strdup(a, L->name); /* the row's text lasts until the next step */
    }
    if (!slot || !L || !L->name) {
      px_store_reset(st);
      return PX_ERR_NOMEM;
    }
    *slot = L;
  }
  return rc < 0 ? rc : PX_OK;
}

/* The current row of st (has_phases, then the table's columns) as a new
 * report of job_id in a; NULL when out of memory. */
static Prunex__V1__IterationReport *coord_db_report_row(px_store_stmt_t *st, coord_arena_t *a,
                                                        char *job_id) {
  Prunex__V1__IterationReport *it = coord_alloc(a, sizeof *it);
  Prunex__V1__PhaseTimes *ph = coord_alloc(a, sizeof *ph);
  if (!it || !ph) return NULL;
  *it = (Prunex__V1__IterationReport)PRUNEX__V1__ITERATION_REPORT__INIT;
  *ph = (Prunex__V1__PhaseTimes)PRUNEX__V1__PHASE_TIMES__INIT;
  it->job_id = job_id;
  it->iteration = (int32_t)px_store_column_int64(st, 0);
  it->rank = (int32_t)px_store_column_int64(st, 1);
  if (px_store_column_int64(st, 2)) it->phases = ph;
  px_report_read(PX_REPORT_ITERATION, ITER_WHERE, st, 3, it, it->phases);
  return it;
}

px_status_t coord_db_reports_list(px_store_t *db, coord_arena_t *a, const char *job_id, int from,
                                  int limit, int include_layers,
                                  Prunex__V1__GetIterationsResponse *resp) {
  char cols[1024], sql[1600];
  snprintf(sql, sizeof sql,
           "SELECT iteration, rank, has_phases, %s FROM iterations WHERE job_id = ?1"
           " AND iteration >= ?2 ORDER BY iteration, rank LIMIT ?3",
           px_report_columns(PX_REPORT_ITERATION, ITER_WHERE, NULL, cols, sizeof cols));
  px_store_stmt_t *st;
  px_status_t rc;
  PX_CHECK(px_store_stmt(db, sql, &st));
  PX_CHECK(px_store_bind_args(st, PX_STORE_ARGS(PX_ARG_TEXT(job_id), PX_ARG_INT(from),
                                                PX_ARG_INT(limit > 0 ? limit : -1))));
  char *id = coord_strdup(a, job_id);
  size_t cap = 0;
  while ((rc = px_store_step(st)) == 1) {
    Prunex__V1__IterationReport **slot = coord_push(
        a, (void **)&resp->iterations, &resp->n_iterations, &cap, sizeof *resp->iterations);
    Prunex__V1__IterationReport *it = id && slot ? coord_db_report_row(st, a, id) : NULL;
    if (!it) {
      px_store_reset(st);
      return PX_ERR_NOMEM;
    }
    *slot = it;
  }
  if (rc < 0) return rc;
  for (size_t i = 0; include_layers && i < resp->n_iterations; i++)
    PX_CHECK(coord_db_layers_get(db, a, resp->iterations[i]));
  return PX_OK;
}
