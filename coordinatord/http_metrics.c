/* GET /metrics: the coordinator in the Prometheus text format (version
 * 0.0.4). Families, each with HELP and TYPE and all its samples together:
 *
 *   prunex_coordinator_start_time_seconds, prunex_build_info
 *   prunex_nodes{state}, prunex_jobs{state}           gauges, every state listed
 *   prunex_rpc_requests_total{method}                 counter
 *   prunex_rpc_handler_seconds{method}                histogram of the handler's
 *                                                     time on the event loop
 *   per RUNNING job, and per job that ended in the last http_metrics_ended_s
 *   seconds with its final values (labels job_id, job_name, strategy: not
 *   `job`, which Prometheus sets to the scrape job), from rank 0's latest
 *   report:
 *   prunex_job_iteration, prunex_job_loss, prunex_job_train_accuracy,
 *   prunex_job_test_accuracy (the latest evaluated), prunex_job_density,
 *   prunex_job_mask_drift (bits of the latest iteration), prunex_job_mask_groups,
 *   prunex_job_rho{level="intra"|"inter"} (mean over layers of rho1 / rho2),
 *   prunex_job_phase_seconds{phase} (latest iteration), and counters summed
 *   over the job's iterations: prunex_job_inter_bytes_total,
 *   prunex_job_intra_bytes_total, prunex_job_inter_dense_bytes_total,
 *   prunex_job_phase_seconds_total{phase}; for an ended job also
 *   prunex_job_ended_time_seconds{state}; and the membership
 *   (db/epoch_rows.h): prunex_job_membership_epoch and
 *   prunex_job_member_nodes (the epoch in force), and the counter
 *   prunex_job_membership_changes_total{reason="lost"|"preempted"|"joined"|
 *   "other"} over all the job's attempts. A job's series thus end with its
 *   final values, scraped for http_metrics_ended_s (a scrape interval or
 *   more), and then go: Prometheus marks them stale (docs/metrics.md).
 *
 * The per-job families are the report tables' metric and total fields
 * (prunex/report.h): names, help, labels and the SQL that reads them come
 * from there (the queries are db/http_read.c's). A value that was not
 * measured is left out (no sample), never -1. Runs on the HTTP thread
 * (read-only SQLite connection; RPC counters are atomics). */
#include <assert.h>
#include <stdint.h>
#include <stdio.h>
#include <time.h>
#include <string.h>

#include "coord.h"
#include "db/epoch_rows.h"
#include "db/http_read.h"
#include "http.h"
#include "prunex/report.h"
#include "prunex/strategy.h"

#define HTTP_MAX_JOBS 256 /* jobs exported (running first); more are left out (and counted) */
#define HTTP_MAX_SAMPLES 48 /* samples per job: the report tables' metric and total fields */

/* The per-job samples, made from the report tables (prunex/report.h): the
 * latest value of each iteration field with a metric (rank 0's latest
 * iteration; an EVALUATED field's latest measured value), the mean over
 * layers of each layer field with a metric, and the sum over the job's
 * iterations of each field with a total. */
typedef enum { HS_LATEST, HS_LAYERS, HS_TOTAL } http_sample_kind_t;

typedef struct {
  const px_report_field_t *f;
  http_sample_kind_t kind;
} http_sample_t;

typedef struct {
  char job[128];
  char name[128];
  char strategy[16];
  int has_row;                /* at least one iteration reported */
  int state;                  /* JS_RUNNING, or the end state of a job that ended */
  int64_t finished_ms;        /* when it ended (Unix ms) */
  double v[HTTP_MAX_SAMPLES];
  int present[HTTP_MAX_SAMPLES];
  int epoch, members;         /* membership epoch in force, its nodes (0: not placed) */
  long long changes[COORD_EPOCH_NKINDS]; /* membership changes of every attempt, by kind */
} http_job_row_t;

static int http_add_samples(http_sample_t *s, int n, px_report_table_t t, http_sample_kind_t kind) {
  for (int i = 0; i < px_report_count(t); i++) {
    const px_report_field_t *f = px_report_field(t, i);
    if (!(kind == HS_TOTAL ? f->total : f->metric)) continue;
    assert(n < HTTP_MAX_SAMPLES);
    s[n++] = (http_sample_t){f, kind};
  }
  return n;
}

/* The samples, in the order of the exposition; returns their count. */
static int http_samples(http_sample_t *s) {
  int n = http_add_samples(s, 0, PX_REPORT_ITERATION, HS_LATEST);
  n = http_add_samples(s, n, PX_REPORT_LAYER, HS_LAYERS);
  return http_add_samples(s, n, PX_REPORT_ITERATION, HS_TOTAL);
}

/* What the data layer reads for each sample (db/http_read.h). */
static void http_sample_cols(const http_sample_t *s, int n, coord_db_sample_t *cols) {
  for (int k = 0; k < n; k++) {
    coord_sample_how_t how = COORD_SAMPLE_LATEST;
    if (s[k].kind == HS_TOTAL) how = COORD_SAMPLE_TOTAL;
    else if (s[k].kind == HS_LAYERS) how = COORD_SAMPLE_LAYER_MEAN;
    else if (s[k].f->where & PX_REPORT_EVALUATED) how = COORD_SAMPLE_LATEST_MEASURED;
    cols[k] = (coord_db_sample_t){s[k].f->name, how};
  }
}

static const char *http_sample_family(const http_sample_t *s, const char **type,
                                      const char **help) {
  *type = s->kind == HS_TOTAL ? "counter" : "gauge";
  *help = s->kind == HS_TOTAL ? s->f->total_help : s->f->metric_help;
  return s->kind == HS_TOTAL ? s->f->total : s->f->metric;
}

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

/* Whether sample k's value v (column not NULL) was measured. */
static int http_sample_present(const http_sample_t *s, double v, int has_phases) {
  if (s->kind != HS_LATEST) return 1;
  if (s->f->where & PX_REPORT_PHASE) return has_phases;
  return s->f->presence == PX_REPORT_ALWAYS || (s->f->presence == PX_REPORT_NONNEG && v >= 0) ||
         (s->f->presence == PX_REPORT_POSITIVE && v > 0);
}

/* The job's labels and values from the current row of st. */
static void http_job_read(px_store_stmt_t *st, const http_sample_t *s, int n, http_job_row_t *j) {
  memset(j, 0, sizeof *j);
  snprintf(j->job, sizeof j->job, "%s", px_store_column_text(st, 0));
  snprintf(j->name, sizeof j->name, "%s", px_store_column_text(st, 1));
  size_t blen;
  const void *blob = px_store_column_blob(st, 2, &blen);
  Prunex__V1__JobSpec *spec = blob ? prunex__v1__job_spec__unpack(NULL, blen, blob) : NULL;
  const px_strategy_info_t *si = spec ? px_strategy_info((px_strategy_kind_t)spec->strategy) : NULL;
  snprintf(j->strategy, sizeof j->strategy, "%s", si ? si->name : "");
  if (spec) prunex__v1__job_spec__free_unpacked(spec, NULL);
  j->state = (int)px_store_column_int64(st, 5 + n);
  j->finished_ms = px_store_column_int64(st, 6 + n);
  if (px_store_column_is_null(st, 3)) return; /* nothing reported yet */
  j->has_row = 1;
  int has_phases = (int)px_store_column_int64(st, 4);
  for (int k = 0; k < n; k++) {
    j->v[k] = px_store_column_double(st, 5 + k);
    j->present[k] = !px_store_column_is_null(st, 5 + k) &&
                    http_sample_present(&s[k], j->v[k], has_phases);
  }
}

typedef struct {
  const http_sample_t *s;
  int n;
  http_job_row_t *jobs;
  int njobs, dropped;
} http_jobs_t;

static px_status_t http_job_row(void *arg, px_store_stmt_t *st) {
  http_jobs_t *r = arg;
  if (r->njobs == HTTP_MAX_JOBS) r->dropped++;
  else http_job_read(st, r->s, r->n, &r->jobs[r->njobs++]);
  return PX_OK;
}

/* The running jobs, and those that ended at or after ended_since_ms. */
static px_status_t http_load_jobs(px_store_t *db, int64_t ended_since_ms, http_jobs_t *r) {
  coord_db_sample_t cols[HTTP_MAX_SAMPLES];
  http_sample_cols(r->s, r->n, cols);
  return coord_db_http_job_samples(db, JS_RUNNING, ended_since_ms, cols, r->n, http_job_row, r);
}

/* The label value of each job state, as prunex_jobs{state} spells it. */
static const struct {
  int s;
  const char *n;
} http_job_states[] = {{JS_PENDING, "pending"},     {JS_SCHEDULED, "scheduled"},
                       {JS_RUNNING, "running"},     {JS_SUCCEEDED, "succeeded"},
                       {JS_FAILED, "failed"},       {JS_CANCELLED, "cancelled"},
                       {JS_TIMEOUT, "timeout"}};
#define HTTP_NSTATES (sizeof http_job_states / sizeof http_job_states[0])

static const char *http_state_name(int s) {
  for (size_t i = 0; i < HTTP_NSTATES; i++)
    if (http_job_states[i].s == s) return http_job_states[i].n;
  return "unknown";
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
  for (size_t i = 0; i < HTTP_NSTATES; i++)
    px_buf_printf(out, "prunex_jobs{state=\"%s\"} %lld\n", http_job_states[i].n,
                  js[http_job_states[i].s]);
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

/* The running jobs' figures (at most HTTP_MAX_JOBS): one family per
 * metric name of the samples, each sample labelled by the job and the
 * field's own label. */
static void http_metrics_jobs(coord_hbuf_t *out, const http_sample_t *s, int n,
                              const http_job_row_t *jobs, int njobs, int dropped) {
  http_family(out, "prunex_running_jobs_not_exported", "gauge",
              "Jobs (running, or just ended) left out of the per-job families (beyond 256).");
  px_buf_printf(out, "prunex_running_jobs_not_exported %d\n", dropped);
  http_family(out, "prunex_job_ended_time_seconds", "gauge",
              "Unix time at which the job ended; its series carry their final values for "
              "http_metrics_ended_s after that, then go.");
  for (int i = 0; i < njobs; i++) {
    if (jobs[i].state == JS_RUNNING) continue;
    px_buf_printf(out, "prunex_job_ended_time_seconds{");
    http_job_labels(out, &jobs[i]);
    px_buf_printf(out, ",state=\"%s\"} %.3f\n", http_state_name(jobs[i].state),
                  (double)jobs[i].finished_ms / 1000.0);
  }
  for (int k = 0; k < n;) {
    const char *type, *help, *name = http_sample_family(&s[k], &type, &help), *t2, *h2;
    int end = k + 1;
    while (end < n && !strcmp(http_sample_family(&s[end], &t2, &h2), name)) end++;
    http_family(out, name, type, help);
    for (int i = 0; i < njobs; i++)
      for (int m = k; m < end; m++) {
        if (!jobs[i].has_row || !jobs[i].present[m]) continue;
        px_buf_printf(out, "%s{", name);
        http_job_labels(out, &jobs[i]);
        if (s[m].f->metric_label) px_buf_printf(out, ",%s", s[m].f->metric_label);
        px_buf_put(out, "} ", 2);
        coord_hb_pnum(out, jobs[i].v[m]);
        px_buf_put(out, "\n", 1);
      }
    k = end;
  }
}

/* The jobs' membership (db/epoch_rows.h): the newest attempt's epoch in
 * force and its node count, and the changes of every attempt by kind. */
static px_status_t http_load_membership(px_store_t *db, http_job_row_t *jobs, int njobs) {
  px_status_t rc = PX_OK;
  for (int i = 0; rc == PX_OK && i < njobs; i++) {
    coord_arena_t a;
    coord_arena_init(&a);
    coord_epoch_row_t *rows = NULL;
    size_t n = 0;
    rc = coord_db_epoch_rows(db, &a, jobs[i].job, 0, 0, &rows, &n);
    for (size_t k = 0; rc == PX_OK && k < n; k++) jobs[i].changes[rows[k].kind]++;
    if (rc == PX_OK && n > 0) {
      jobs[i].epoch = rows[n - 1].epoch;
      jobs[i].members = (int)rows[n - 1].n;
    }
    coord_arena_free(&a);
  }
  return rc;
}

/* Membership families: the epoch in force, its nodes, and a counter of the
 * changes by kind (reason: lost, preempted, joined, other: a bounded set,
 * every one written, 0 included; an attempt's placement is no change). */
static void http_metrics_membership(coord_hbuf_t *out, const http_job_row_t *jobs, int njobs) {
  static const struct {
    const char *name, *help;
  } g[2] = {{"prunex_job_membership_epoch",
             "Membership epoch in force in the job's current attempt (1 at its placement, one "
             "more at each change at a round boundary)."},
            {"prunex_job_member_nodes", "Member nodes of the job's membership epoch in force."}};
  for (int f = 0; f < 2; f++) {
    http_family(out, g[f].name, "gauge", g[f].help);
    for (int i = 0; i < njobs; i++) {
      if (!jobs[i].epoch) continue;
      px_buf_printf(out, "%s{", g[f].name);
      http_job_labels(out, &jobs[i]);
      px_buf_printf(out, "} %d\n", f ? jobs[i].members : jobs[i].epoch);
    }
  }
  http_family(out, "prunex_job_membership_changes_total", "counter",
              "Membership changes of the job (a node lost, preempted away, joined), over all "
              "its attempts, by kind.");
  for (int i = 0; i < njobs; i++)
    for (int k = COORD_EPOCH_LOST; jobs[i].epoch && k < COORD_EPOCH_NKINDS; k++) {
      px_buf_printf(out, "prunex_job_membership_changes_total{");
      http_job_labels(out, &jobs[i]);
      px_buf_printf(out, ",reason=\"%s\"} %lld\n", coord_epoch_kind_name(k), jobs[i].changes[k]);
    }
}

int coord_http_metrics(px_store_t *db, int64_t started_unix_ms, int ended_s, coord_hbuf_t *out) {
  static http_job_row_t jobs[HTTP_MAX_JOBS]; /* HTTP thread only: one request at a time */
  http_sample_t s[HTTP_MAX_SAMPLES];
  http_jobs_t r = {s, http_samples(s), jobs, 0, 0};
  long long ns[8], js[8];
  struct timespec now;
  clock_gettime(CLOCK_REALTIME, &now);
  int64_t since = ended_s > 0 ? (int64_t)now.tv_sec * 1000 + now.tv_nsec / 1000000 -
                                    (int64_t)ended_s * 1000
                              : INT64_MAX;
  /* One read transaction, so that every figure comes from the same snapshot. */
  px_status_t rc = coord_db_http_snapshot_begin(db);
  if (rc == PX_OK) rc = coord_db_http_state_counts(db, 1, ns, 8);
  if (rc == PX_OK) rc = coord_db_http_state_counts(db, 0, js, 8);
  if (rc == PX_OK) rc = http_load_jobs(db, since, &r);
  if (rc == PX_OK) rc = http_load_membership(db, jobs, r.njobs);
  coord_db_http_snapshot_end(db);
  if (rc != PX_OK) {
    px_buf_printf(out, "# database error: %s\n", px_last_error());
    return 500;
  }
  http_metrics_service(out, started_unix_ms, ns, js);
  http_metrics_rpc(out);
  http_metrics_jobs(out, s, r.n, jobs, r.njobs, r.dropped);
  http_metrics_membership(out, jobs, r.njobs);
  return 200;
}
