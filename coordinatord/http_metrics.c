/* GET /metrics: the coordinator in the Prometheus text format (version
 * 0.0.4). Families, each with HELP and TYPE and all its samples together:
 *
 *   prunex_coordinator_start_time_seconds, prunex_build_info
 *   prunex_nodes{state}, prunex_jobs{state}           gauges, every state listed
 *   prunex_rpc_requests_total{method}                 counter
 *   prunex_rpc_handler_seconds{method}                histogram of the handler's
 *                                                     time on the event loop
 *   per RUNNING job (labels job_id, job_name, strategy: not `job`, which
 *   Prometheus sets to the scrape job), from rank 0's latest report:
 *   prunex_job_iteration, prunex_job_loss, prunex_job_train_accuracy,
 *   prunex_job_test_accuracy (the latest evaluated), prunex_job_density,
 *   prunex_job_mask_drift (bits of the latest iteration), prunex_job_mask_groups,
 *   prunex_job_rho{level="intra"|"inter"} (mean over layers of rho1 / rho2),
 *   prunex_job_phase_seconds{phase} (latest iteration), and counters summed
 *   over the job's iterations: prunex_job_inter_bytes_total,
 *   prunex_job_intra_bytes_total, prunex_job_inter_dense_bytes_total,
 *   prunex_job_phase_seconds_total{phase}.
 *
 * A value that was not measured is left out (no sample), never -1. Runs on
 * the HTTP thread (read-only SQLite connection; RPC counters are atomics). */
#include <sqlite3.h>
#include <stdio.h>
#include <string.h>

#include "coord.h"
#include "http.h"
#include "prunex/strategy.h"

#define HTTP_MAX_JOBS 256 /* running jobs exported; more are left out (and counted) */

enum {
  V_ITER, V_LOSS, V_TRAIN, V_TEST, V_DENSITY, V_DRIFT, V_BINTER, V_BINTRA, V_BDENSE,
  V_RHO1, V_RHO2, V_GROUPS, V_PH0 /* 6 latest phases */, V_PT0 = V_PH0 + 6 /* 6 phase totals */,
  V_N = V_PT0 + 6
};

typedef struct {
  char job[128];
  char name[128];
  char strategy[16];
  int has_row;                /* at least one iteration reported */
  double v[V_N];
  int present[V_N];
} http_job_row_t;

static const char *const http_phases[6] = {"local", "intra", "projection",
                                           "inter", "broadcast", "control"};

static void http_family(coord_hbuf_t *b, const char *name, const char *type, const char *help) {
  px_buf_printf(b, "# HELP %s %s\n# TYPE %s %s\n", name, help, name, type);
}

static void http_job_labels(coord_hbuf_t *b, const http_job_row_t *j) {
  px_buf_put(b, "job_id=\"", 8);
  coord_hb_plabel(b, j->job);
  px_buf_put(b, "\",job_name=\"", 12);
  coord_hb_plabel(b, j->name);
  px_buf_put(b, "\",strategy=\"", 12);
  coord_hb_plabel(b, j->strategy);
  px_buf_put(b, "\"", 1);
}

/* Counts of rows by state: 0, or -1 on a database error. */
static int http_state_counts(sqlite3 *db, const char *sql, long long *count, int n) {
  memset(count, 0, sizeof *count * (size_t)n);
  sqlite3_stmt *st = NULL;
  if (sqlite3_prepare_v2(db, sql, -1, &st, NULL) != SQLITE_OK) return -1;
  int rc;
  while ((rc = sqlite3_step(st)) == SQLITE_ROW) {
    int s = sqlite3_column_int(st, 0);
    if (s >= 0 && s < n) count[s] = sqlite3_column_int64(st, 1);
  }
  sqlite3_finalize(st);
  return rc == SQLITE_DONE ? 0 : -1;
}

static int http_load_jobs(sqlite3 *db, http_job_row_t *jobs, int *njobs, int *dropped) {
  *njobs = 0;
  *dropped = 0;
  sqlite3_stmt *st = NULL;
  if (sqlite3_prepare_v2(
          db,
          "SELECT j.job_id, j.name, j.spec,"
          " i.iteration, i.loss, i.train_accuracy, i.density, i.mask_drift, i.has_phases,"
          " i.local_s, i.intra_s, i.projection_s, i.inter_s, i.broadcast_s, i.control_s,"
          " i.mask_groups,"
          " (SELECT test_accuracy FROM iterations t WHERE t.job_id = j.job_id AND t.rank = 0"
          "   AND t.test_accuracy >= 0 ORDER BY iteration DESC LIMIT 1),"
          " (SELECT avg(rho1) FROM iteration_layers l WHERE l.job_id = j.job_id AND l.rank = 0"
          "   AND l.iteration = i.iteration),"
          " (SELECT avg(rho2) FROM iteration_layers l WHERE l.job_id = j.job_id AND l.rank = 0"
          "   AND l.iteration = i.iteration),"
          " s.binter, s.bintra, s.bdense, s.l, s.it, s.pr, s.ie, s.br, s.co"
          " FROM jobs j"
          " LEFT JOIN iterations i ON i.job_id = j.job_id AND i.rank = 0"
          "   AND i.iteration = (SELECT max(iteration) FROM iterations m"
          "                      WHERE m.job_id = j.job_id AND m.rank = 0)"
          " LEFT JOIN (SELECT job_id, total(bytes_inter) AS binter, total(bytes_intra) AS bintra,"
          "   total(bytes_inter_dense) AS bdense, total(local_s) AS l, total(intra_s) AS it,"
          "   total(projection_s) AS pr, total(inter_s) AS ie, total(broadcast_s) AS br,"
          "   total(control_s) AS co FROM iterations WHERE rank = 0 AND job_id IN"
          "   (SELECT job_id FROM jobs WHERE state = ?1) GROUP BY job_id) s"
          "   ON s.job_id = j.job_id"
          " WHERE j.state = ?1 ORDER BY j.id",
          -1, &st, NULL) != SQLITE_OK)
    return -1;
  sqlite3_bind_int(st, 1, JS_RUNNING);
  int rc;
  while ((rc = sqlite3_step(st)) == SQLITE_ROW) {
    if (*njobs == HTTP_MAX_JOBS) {
      (*dropped)++;
      continue;
    }
    http_job_row_t *j = &jobs[(*njobs)++];
    memset(j, 0, sizeof *j);
    snprintf(j->job, sizeof j->job, "%s", (const char *)sqlite3_column_text(st, 0));
    snprintf(j->name, sizeof j->name, "%s", (const char *)sqlite3_column_text(st, 1));
    const void *blob = sqlite3_column_blob(st, 2);
    int blen = sqlite3_column_bytes(st, 2);
    Prunex__V1__JobSpec *spec =
        blob && blen > 0 ? prunex__v1__job_spec__unpack(NULL, (size_t)blen, blob) : NULL;
    const px_strategy_info_t *si =
        spec ? px_strategy_info((px_strategy_kind_t)spec->strategy) : NULL;
    snprintf(j->strategy, sizeof j->strategy, "%s", si ? si->name : "");
    if (spec) prunex__v1__job_spec__free_unpacked(spec, NULL);
    if (sqlite3_column_type(st, 3) == SQLITE_NULL) continue; /* nothing reported yet */
    j->has_row = 1;
#define SETV(k, col, cond)                          \
  do {                                              \
    j->v[k] = sqlite3_column_double(st, col);       \
    j->present[k] = sqlite3_column_type(st, col) != SQLITE_NULL && (cond); \
  } while (0)
    SETV(V_ITER, 3, 1);
    SETV(V_LOSS, 4, j->v[V_LOSS] >= 0);
    SETV(V_TRAIN, 5, j->v[V_TRAIN] >= 0);
    SETV(V_DENSITY, 6, 1);
    SETV(V_DRIFT, 7, 1);
    int has_phases = sqlite3_column_int(st, 8);
    for (int k = 0; k < 6; k++) SETV(V_PH0 + k, 9 + k, has_phases);
    SETV(V_GROUPS, 15, j->v[V_GROUPS] > 0);
    SETV(V_TEST, 16, 1);
    SETV(V_RHO1, 17, 1);
    SETV(V_RHO2, 18, 1);
    SETV(V_BINTER, 19, 1);
    SETV(V_BINTRA, 20, 1);
    SETV(V_BDENSE, 21, 1);
    for (int k = 0; k < 6; k++) SETV(V_PT0 + k, 22 + k, 1);
#undef SETV
  }
  sqlite3_finalize(st);
  return rc == SQLITE_DONE ? 0 : -1;
}

/* One gauge or counter family over the running jobs (value k). */
static void http_job_family(coord_hbuf_t *b, const http_job_row_t *jobs, int n, int k,
                            const char *name, const char *type, const char *help) {
  http_family(b, name, type, help);
  for (int i = 0; i < n; i++) {
    if (!jobs[i].has_row || !jobs[i].present[k]) continue;
    px_buf_printf(b, "%s{", name);
    http_job_labels(b, &jobs[i]);
    px_buf_put(b, "} ", 2);
    coord_hb_pnum(b, jobs[i].v[k]);
    px_buf_put(b, "\n", 1);
  }
}

/* The coordinator itself: start time, version, nodes and jobs by state. */
static void http_metrics_service(coord_hbuf_t *out, int64_t started_unix_ms, const long long *ns,
                                 const long long *js) {
  http_family(out, "prunex_coordinator_start_time_seconds", "gauge",
              "Unix time at which this pxcoordd started.");
  px_buf_printf(out, "prunex_coordinator_start_time_seconds %.3f\n",
                  (double)started_unix_ms / 1000.0);
  http_family(out, "prunex_build_info", "gauge", "Always 1; the version label says which pxcoordd.");
  px_buf_put(out, "prunex_build_info{version=\"", 27);
  coord_hb_plabel(out, px_version());
  px_buf_put(out, "\"} 1\n", 5);

  http_family(out, "prunex_nodes", "gauge", "Nodes known to the coordinator, by state.");
  static const struct { int s; const char *n; } nst[] = {
      {NS_READY, "ready"}, {NS_BUSY, "busy"}, {NS_LOST, "lost"}};
  for (size_t i = 0; i < 3; i++)
    px_buf_printf(out, "prunex_nodes{state=\"%s\"} %lld\n", nst[i].n, ns[nst[i].s]);
  http_family(out, "prunex_jobs", "gauge", "Jobs known to the coordinator, by state.");
  static const struct { int s; const char *n; } jst[] = {
      {JS_PENDING, "pending"},     {JS_SCHEDULED, "scheduled"}, {JS_RUNNING, "running"},
      {JS_SUCCEEDED, "succeeded"}, {JS_FAILED, "failed"},       {JS_CANCELLED, "cancelled"},
      {JS_TIMEOUT, "timeout"}};
  for (size_t i = 0; i < sizeof jst / sizeof jst[0]; i++)
    px_buf_printf(out, "prunex_jobs{state=\"%s\"} %lld\n", jst[i].n, js[jst[i].s]);
}

/* The gRPC calls handled, and the handlers' time on the loop (a histogram). */
static void http_metrics_rpc(coord_hbuf_t *out) {
  http_family(out, "prunex_rpc_requests_total", "counter",
              "gRPC calls handled by the coordinator since it started, by method.");
  for (int m = 0; m < coord_rpc_nstats; m++)
    px_buf_printf(out, "prunex_rpc_requests_total{method=\"%s\"} %llu\n", coord_rpc_stats[m].name,
                    (unsigned long long)atomic_load(&coord_rpc_stats[m].calls));
  http_family(out, "prunex_rpc_handler_seconds", "histogram",
              "Time the handler of a gRPC call ran on the coordinator's event loop, by method "
              "(streams and parked KvGets: until the handler returned).");
  for (int m = 0; m < coord_rpc_nstats; m++) {
    const coord_rpc_stat_t *s = &coord_rpc_stats[m];
    unsigned long long cum = 0;
    for (int k = 0; k <= COORD_RPC_NBUCKETS; k++) {
      cum += (unsigned long long)atomic_load(&s->bucket[k]);
      if (k < COORD_RPC_NBUCKETS)
        px_buf_printf(out, "prunex_rpc_handler_seconds_bucket{method=\"%s\",le=\"%g\"} %llu\n",
                        s->name, coord_rpc_bucket_le[k], cum);
      else
        px_buf_printf(out, "prunex_rpc_handler_seconds_bucket{method=\"%s\",le=\"+Inf\"} %llu\n",
                        s->name, cum);
    }
    px_buf_printf(out, "prunex_rpc_handler_seconds_sum{method=\"%s\"} %.9f\n", s->name,
                    (double)atomic_load(&s->nanos) / 1e9);
    px_buf_printf(out, "prunex_rpc_handler_seconds_count{method=\"%s\"} %llu\n", s->name, cum);
  }

}

/* The running jobs' latest figures (at most HTTP_MAX_JOBS). */
static void http_metrics_jobs(coord_hbuf_t *out, const http_job_row_t *jobs, int njobs,
                              int dropped) {
  http_family(out, "prunex_running_jobs_not_exported", "gauge",
              "Running jobs left out of the per-job families (more than 256 run).");
  px_buf_printf(out, "prunex_running_jobs_not_exported %d\n", dropped);
  http_job_family(out, jobs, njobs, V_ITER, "prunex_job_iteration", "gauge",
                  "Latest iteration reported by a running job (counted from 0).");
  http_job_family(out, jobs, njobs, V_LOSS, "prunex_job_loss", "gauge",
                  "Mean training loss of the job's latest iteration.");
  http_job_family(out, jobs, njobs, V_TRAIN, "prunex_job_train_accuracy", "gauge",
                  "Training accuracy (0..1) of the job's latest iteration.");
  http_job_family(out, jobs, njobs, V_TEST, "prunex_job_test_accuracy", "gauge",
                  "Test accuracy (0..1) of the consensus model at its latest evaluation.");
  http_job_family(out, jobs, njobs, V_DENSITY, "prunex_job_density", "gauge",
                  "Kept fraction of the prunable weights at the latest iteration.");
  http_job_family(out, jobs, njobs, V_DRIFT, "prunex_job_mask_drift", "gauge",
                  "Group-mask bits that changed in the latest iteration.");
  http_job_family(out, jobs, njobs, V_GROUPS, "prunex_job_mask_groups", "gauge",
                  "Group-mask bits in all (the drift is out of these).");
  http_family(out, "prunex_job_rho", "gauge",
              "Mean over layers of the ADMM penalty in force at the latest iteration, per "
              "consensus level (intra: rho1, inter: rho2).");
  for (int i = 0; i < njobs; i++)
    for (int lv = 0; lv < 2; lv++) {
      if (!jobs[i].has_row || !jobs[i].present[V_RHO1 + lv]) continue;
      px_buf_put(out, "prunex_job_rho{", 15);
      http_job_labels(out, &jobs[i]);
      px_buf_printf(out, ",level=\"%s\"} ", lv ? "inter" : "intra");
      coord_hb_pnum(out, jobs[i].v[V_RHO1 + lv]);
      px_buf_put(out, "\n", 1);
    }
  http_job_family(out, jobs, njobs, V_BINTER, "prunex_job_inter_bytes_total", "counter",
                  "Inter-node bytes (sent plus received, all ranks) of the job so far.");
  http_job_family(out, jobs, njobs, V_BDENSE, "prunex_job_inter_dense_bytes_total", "counter",
                  "Inter-node bytes the job would have moved with dense buffers.");
  http_job_family(out, jobs, njobs, V_BINTRA, "prunex_job_intra_bytes_total", "counter",
                  "Intra-node bytes (sent plus received, all ranks) of the job so far.");
  for (int tot = 0; tot < 2; tot++) {
    const char *name = tot ? "prunex_job_phase_seconds_total" : "prunex_job_phase_seconds";
    http_family(out, name, tot ? "counter" : "gauge",
                tot ? "Rank 0's time in each phase, summed over the job's iterations."
                    : "Rank 0's time in each phase of the latest iteration.");
    for (int i = 0; i < njobs; i++)
      for (int p = 0; p < 6; p++) {
        int k = (tot ? V_PT0 : V_PH0) + p;
        if (!jobs[i].has_row || !jobs[i].present[k]) continue;
        px_buf_printf(out, "%s{", name);
        http_job_labels(out, &jobs[i]);
        px_buf_printf(out, ",phase=\"%s\"} ", http_phases[p]);
        coord_hb_pnum(out, jobs[i].v[k]);
        px_buf_put(out, "\n", 1);
      }
  }
}

int coord_http_metrics(sqlite3 *db, int64_t started_unix_ms, coord_hbuf_t *out) {
  static http_job_row_t jobs[HTTP_MAX_JOBS]; /* HTTP thread only: one request at a time */
  long long ns[8], js[8];
  int njobs = 0, dropped = 0;
  /* One read transaction, so that every figure comes from the same snapshot. */
  sqlite3_exec(db, "BEGIN", NULL, NULL, NULL);
  int bad = http_state_counts(db, "SELECT state, count(*) FROM nodes GROUP BY state", ns, 8) ||
            http_state_counts(db, "SELECT state, count(*) FROM jobs GROUP BY state", js, 8) ||
            http_load_jobs(db, jobs, &njobs, &dropped);
  if (bad) {
    px_buf_printf(out, "# database error: %s\n", sqlite3_errmsg(db));
    sqlite3_exec(db, "ROLLBACK", NULL, NULL, NULL);
    return 500;
  }
  sqlite3_exec(db, "COMMIT", NULL, NULL, NULL);
  http_metrics_service(out, started_unix_ms, ns, js);
  http_metrics_rpc(out);
  http_metrics_jobs(out, jobs, njobs, dropped);
  return 200;
}
