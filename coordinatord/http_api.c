/* The JSON the dashboard (and anyone else) reads over HTTP: jobs, one job,
 * its iterations and per-layer figures, nodes. Runs on the HTTP thread with
 * its own read-only SQLite connection (http.h).
 *
 * Conventions: every listing is paged, `limit` (1..a per-endpoint maximum)
 * and an opaque `cursor` taken from the previous page's `next_cursor`
 * (null on the last page); each page is one indexed range scan, so a
 * request costs time linear in its page. Values that were not measured
 * (an iteration without a test evaluation, a job not yet finished) are
 * null, never -1. Times are Unix milliseconds. Metrics are rank 0's
 * reports, the only rank that reports to the coordinator. */
#include <assert.h>
#include <errno.h>
#include <limits.h>
#include <sqlite3.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "coord.h"
#include "http.h"
#include "prunex/strategy.h"

static const char *http_job_state(int s) {
  switch (s) {
  case JS_PENDING: return "PENDING";
  case JS_SCHEDULED: return "SCHEDULED";
  case JS_RUNNING: return "RUNNING";
  case JS_SUCCEEDED: return "SUCCEEDED";
  case JS_FAILED: return "FAILED";
  case JS_CANCELLED: return "CANCELLED";
  case JS_TIMEOUT: return "TIMEOUT";
  default: return "UNSPECIFIED";
  }
}

static const char *http_node_state(int s) {
  switch (s) {
  case NS_READY: return "READY";
  case NS_BUSY: return "BUSY";
  case NS_LOST: return "LOST";
  default: return "UNSPECIFIED";
  }
}

static const char *http_strategy(int s) {
  const px_strategy_info_t *i = px_strategy_info((px_strategy_kind_t)s);
  return i ? i->name : NULL;
}

static int http_fail(coord_hbuf_t *out, int status, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
static int http_fail(coord_hbuf_t *out, int status, const char *fmt, ...) {
  char msg[512];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(msg, sizeof msg, fmt, ap);
  va_end(ap);
  px_buf_free(out);
  px_buf_put(out, "{\"error\":", 9);
  coord_hb_jstr(out, msg);
  px_buf_put(out, "}\n", 2);
  return status;
}

static int http_db_fail(sqlite3 *db, coord_hbuf_t *out) {
  px_log(PX_LOG_WARN, "http: database: %s", sqlite3_errmsg(db));
  return http_fail(out, 500, "database: %s", sqlite3_errmsg(db));
}

/* A decimal integer in [lo, hi]; 0 on success. */
static int http_parse_int(const char *s, long long lo, long long hi, long long *out) {
  if (!s || !*s || strlen(s) > 20) return -1;
  char *end = NULL;
  errno = 0;
  long long v = strtoll(s, &end, 10);
  if (errno || *end || v < lo || v > hi) return -1;
  *out = v;
  return 0;
}

/* The page size: limit or def, at most max. 0, or an error status. */
static int http_limit(const coord_http_page_t *pg, int def, int max, int *out,
                      coord_hbuf_t *b) {
  long long v = def;
  if (pg->limit && http_parse_int(pg->limit, 1, max, &v) != 0)
    return http_fail(b, 400, "limit = '%.40s': expected an integer in 1..%d", pg->limit, max);
  *out = (int)v;
  return 0;
}

/* Finds a job by id, or by name when exactly one job has it; writes the id.
 * 0, or an error status with its body. */
static int http_resolve_job(sqlite3 *db, const char *ref, char *job_id, size_t cap,
                            coord_hbuf_t *out) {
  sqlite3_stmt *st = NULL;
  if (sqlite3_prepare_v2(db,
                         "SELECT job_id FROM jobs WHERE job_id = ?1 UNION ALL"
                         " SELECT job_id FROM (SELECT job_id FROM jobs WHERE name = ?1"
                         " AND NOT EXISTS (SELECT 1 FROM jobs WHERE job_id = ?1) LIMIT 2)",
                         -1, &st, NULL) != SQLITE_OK)
    return http_db_fail(db, out);
  sqlite3_bind_text(st, 1, ref, -1, SQLITE_TRANSIENT);
  int n = 0, rc;
  while ((rc = sqlite3_step(st)) == SQLITE_ROW) {
    if (n == 0) snprintf(job_id, cap, "%s", (const char *)sqlite3_column_text(st, 0));
    n++;
  }
  sqlite3_finalize(st);
  if (rc != SQLITE_DONE) return http_db_fail(db, out);
  if (n == 0) return http_fail(out, 404, "job '%.100s' not found (neither an id nor a name)", ref);
  if (n > 1)
    return http_fail(out, 409, "several jobs are named '%.100s': use the job id", ref);
  return 0;
}

/* ---- jobs --------------------------------------------------------------------- */

#define HTTP_JOB_COLUMNS                                                                       \
  "j.id, j.job_id, j.name, j.state, j.reason, j.spec, j.num_nodes, j.workers_per_node,"       \
  " j.created_unix_ms, j.updated_unix_ms, j.scheduled_unix_ms, j.finished_unix_ms,"           \
  " j.iteration,"                                                                             \
  " (SELECT max(time_unix_ms) FROM job_events e WHERE e.job_id = j.job_id),"                  \
  " (SELECT test_accuracy FROM iterations i WHERE i.job_id = j.job_id AND i.rank = 0"         \
  "   AND i.test_accuracy >= 0 ORDER BY iteration DESC LIMIT 1),"                              \
  " (SELECT density FROM iterations i WHERE i.job_id = j.job_id AND i.rank = 0"               \
  "   ORDER BY iteration DESC LIMIT 1), j.attempt, j.checkpoint_problem"
/* How many columns HTTP_JOB_COLUMNS has: a query that adds its own reads them
 * from this index on (reading them from a hard-coded 16 once shifted the
 * totals of /api/v1/jobs/JOB by one column). */
#define HTTP_JOB_NCOLS 18

/* One job object from a row of HTTP_JOB_COLUMNS. */
static void http_job_json(sqlite3_stmt *st, coord_hbuf_t *b) {
  Prunex__V1__JobSpec *spec = NULL;
  const void *blob = sqlite3_column_blob(st, 5);
  int blen = sqlite3_column_bytes(st, 5);
  if (blob && blen > 0) spec = prunex__v1__job_spec__unpack(NULL, (size_t)blen, blob);
  px_buf_put(b, "{\"job_id\":", 10);
  coord_hb_jstr(b, (const char *)sqlite3_column_text(st, 1));
  px_buf_put(b, ",\"name\":", 8);
  coord_hb_jstr(b, (const char *)sqlite3_column_text(st, 2));
  px_buf_put(b, ",\"state\":", 9);
  coord_hb_jstr(b, http_job_state(sqlite3_column_int(st, 3)));
  px_buf_put(b, ",\"reason\":", 10);
  coord_hb_jstr(b, (const char *)sqlite3_column_text(st, 4));
  px_buf_put(b, ",\"strategy\":", 12);
  coord_hb_jstr(b, spec ? http_strategy(spec->strategy) : NULL);
  px_buf_put(b, ",\"model\":", 9);
  coord_hb_jstr(b, spec && spec->model ? spec->model->name : NULL);
  px_buf_put(b, ",\"dataset\":", 11);
  coord_hb_jstr(b, spec && spec->dataset ? spec->dataset->name : NULL);
  int maxit = spec && spec->admm ? spec->admm->max_iterations : 0;
  px_buf_printf(b, ",\"nodes\":%d,\"workers_per_node\":%d,\"max_iterations\":",
                  sqlite3_column_int(st, 6), sqlite3_column_int(st, 7));
  coord_hb_jnum(b, maxit, maxit > 0);
  px_buf_printf(b, ",\"created_unix_ms\":%lld,\"updated_unix_ms\":%lld",
                  (long long)sqlite3_column_int64(st, 8), (long long)sqlite3_column_int64(st, 9));
  int64_t sched = sqlite3_column_int64(st, 10), fin = sqlite3_column_int64(st, 11);
  int64_t it = sqlite3_column_int64(st, 12);
  px_buf_put(b, ",\"scheduled_unix_ms\":", 21);
  coord_hb_jnum(b, (double)sched, sched > 0);
  px_buf_put(b, ",\"finished_unix_ms\":", 20);
  coord_hb_jnum(b, (double)fin, fin > 0);
  px_buf_put(b, ",\"state_since_unix_ms\":", 23);
  coord_hb_jnum(b, (double)sqlite3_column_int64(st, 13), sqlite3_column_type(st, 13) != SQLITE_NULL);
  px_buf_put(b, ",\"iteration\":", 13);
  coord_hb_jnum(b, (double)it, it >= 0);
  px_buf_put(b, ",\"test_accuracy\":", 17);
  coord_hb_jnum(b, sqlite3_column_double(st, 14), sqlite3_column_type(st, 14) != SQLITE_NULL);
  px_buf_put(b, ",\"density\":", 11);
  coord_hb_jnum(b, sqlite3_column_double(st, 15), sqlite3_column_type(st, 15) != SQLITE_NULL);
  /* the attempt running now (issue 14: 1 before any restart) and how many
   * the spec allows */
  px_buf_printf(b, ",\"attempt\":%d,\"max_restarts\":%d", sqlite3_column_int(st, 16),
                  spec && spec->recovery ? spec->recovery->max_restarts : 0);
  /* "" while the checkpoints are usable (issue 26) */
  px_buf_put(b, ",\"checkpoint_problem\":", 22);
  coord_hb_jstr(b, (const char *)sqlite3_column_text(st, 17));
  px_buf_put(b, "}", 1);
  if (spec) prunex__v1__job_spec__free_unpacked(spec, NULL);
}

int coord_http_jobs(sqlite3 *db, const coord_http_page_t *pg, coord_hbuf_t *out) {
  int limit = 0, rc;
  if ((rc = http_limit(pg, 100, 1000, &limit, out))) return rc;
  long long cursor = LLONG_MAX;
  if (pg->cursor && http_parse_int(pg->cursor, 1, LLONG_MAX, &cursor) != 0)
    return http_fail(out, 400, "cursor = '%.40s': expected a next_cursor of this listing",
                     pg->cursor);
  sqlite3_stmt *st = NULL;
  if (sqlite3_prepare_v2(db,
                         "SELECT " HTTP_JOB_COLUMNS
                         " FROM jobs j WHERE j.id < ?1 ORDER BY j.id DESC LIMIT ?2",
                         -1, &st, NULL) != SQLITE_OK)
    return http_db_fail(db, out);
  sqlite3_bind_int64(st, 1, cursor);
  sqlite3_bind_int(st, 2, limit + 1);
  px_buf_put(out, "{\"jobs\":[", 9);
  int n = 0;
  long long last = 0, more = 0;
  while ((rc = sqlite3_step(st)) == SQLITE_ROW) {
    if (n == limit) {
      more = 1;
      break;
    }
    if (n++) px_buf_put(out, ",", 1);
    http_job_json(st, out);
    last = sqlite3_column_int64(st, 0);
  }
  sqlite3_finalize(st);
  if (rc != SQLITE_ROW && rc != SQLITE_DONE) return http_db_fail(db, out);
  px_buf_put(out, "],\"next_cursor\":", 16);
  if (more) px_buf_printf(out, "\"%lld\"}\n", last);
  else px_buf_put(out, "null}\n", 6);
  return 200;
}

int coord_http_job(sqlite3 *db, const char *ref, coord_hbuf_t *out) {
  char job[160];
  int rc = http_resolve_job(db, ref, job, sizeof job, out);
  if (rc) return rc;
  sqlite3_stmt *st = NULL;
  if (sqlite3_prepare_v2(db,
                         "SELECT " HTTP_JOB_COLUMNS
                         ", (SELECT count(*) FROM iterations i WHERE i.job_id = j.job_id"
                         "   AND i.rank = 0),"
                         " (SELECT total(bytes_inter) FROM iterations i WHERE i.job_id = j.job_id"
                         "   AND i.rank = 0),"
                         " (SELECT total(bytes_intra) FROM iterations i WHERE i.job_id = j.job_id"
                         "   AND i.rank = 0)"
                         " FROM jobs j WHERE j.job_id = ?1",
                         -1, &st, NULL) != SQLITE_OK)
    return http_db_fail(db, out);
  sqlite3_bind_text(st, 1, job, -1, SQLITE_TRANSIENT);
  rc = sqlite3_step(st);
  if (rc != SQLITE_ROW) {
    sqlite3_finalize(st);
    return rc == SQLITE_DONE ? http_fail(out, 404, "job %s not found", job)
                             : http_db_fail(db, out);
  }
  http_job_json(st, out);
  if (!out->oom) out->len--; /* reopen the object */
  assert(sqlite3_column_count(st) == HTTP_JOB_NCOLS + 3);
  px_buf_printf(out, ",\"iterations\":%lld,\"bytes_inter\":%.0f,\"bytes_intra\":%.0f}\n",
                  (long long)sqlite3_column_int64(st, HTTP_JOB_NCOLS),
                  sqlite3_column_double(st, HTTP_JOB_NCOLS + 1),
                  sqlite3_column_double(st, HTTP_JOB_NCOLS + 2));
  sqlite3_finalize(st);
  return 200;
}

/* ---- iterations and layers ---------------------------------------------------- */

int coord_http_iterations(sqlite3 *db, const char *ref, const coord_http_page_t *pg,
                          coord_hbuf_t *out) {
  int limit = 0, rc;
  if ((rc = http_limit(pg, 1000, 10000, &limit, out))) return rc;
  long long cursor = -1;
  if (pg->cursor && http_parse_int(pg->cursor, 0, INT_MAX, &cursor) != 0)
    return http_fail(out, 400, "cursor = '%.40s': expected a next_cursor of this listing",
                     pg->cursor);
  char job[160];
  if ((rc = http_resolve_job(db, ref, job, sizeof job, out))) return rc;
  sqlite3_stmt *st = NULL;
  if (sqlite3_prepare_v2(db,
                         "SELECT iteration, time_unix_ms, epoch, loss, train_accuracy,"
                         " test_accuracy, density, mask_drift, frozen, bytes_intra, bytes_inter,"
                         " bytes_inter_dense, has_phases, local_s, intra_s, projection_s,"
                         " inter_s, broadcast_s, control_s, mask_groups FROM iterations"
                         " WHERE job_id = ?1 AND rank = 0 AND iteration > ?2"
                         " ORDER BY iteration LIMIT ?3",
                         -1, &st, NULL) != SQLITE_OK)
    return http_db_fail(db, out);
  sqlite3_bind_text(st, 1, job, -1, SQLITE_TRANSIENT);
  sqlite3_bind_int64(st, 2, cursor);
  sqlite3_bind_int(st, 3, limit + 1);
  px_buf_put(out, "{\"job_id\":", 10);
  coord_hb_jstr(out, job);
  px_buf_put(out, ",\"iterations\":[", 15);
  int n = 0, more = 0;
  long long last = 0;
  static const char *const phases[] = {"local_s", "intra_s", "projection_s",
                                       "inter_s", "broadcast_s", "control_s"};
  while ((rc = sqlite3_step(st)) == SQLITE_ROW) {
    if (n == limit) {
      more = 1;
      break;
    }
    if (n++) px_buf_put(out, ",", 1);
    last = sqlite3_column_int64(st, 0);
    double loss = sqlite3_column_double(st, 3), tra = sqlite3_column_double(st, 4),
           tea = sqlite3_column_double(st, 5);
    px_buf_printf(out, "{\"iteration\":%lld,\"time_unix_ms\":%lld,\"epoch\":", last,
                    (long long)sqlite3_column_int64(st, 1));
    coord_hb_jnum(out, sqlite3_column_double(st, 2), 1);
    px_buf_put(out, ",\"loss\":", 8);
    coord_hb_jnum(out, loss, loss >= 0);
    px_buf_put(out, ",\"train_accuracy\":", 18);
    coord_hb_jnum(out, tra, tra >= 0);
    px_buf_put(out, ",\"test_accuracy\":", 17);
    coord_hb_jnum(out, tea, tea >= 0);
    px_buf_put(out, ",\"density\":", 11);
    coord_hb_jnum(out, sqlite3_column_double(st, 6), 1);
    int64_t groups = sqlite3_column_int64(st, 19);
    px_buf_put(out, ",\"mask_groups\":", 15);
    coord_hb_jnum(out, (double)groups, groups > 0);
    px_buf_printf(out,
                    ",\"mask_drift\":%lld,\"frozen\":%s,\"bytes_intra\":%lld,\"bytes_inter\":%lld,"
                    "\"bytes_inter_dense\":%lld,\"phases\":",
                    (long long)sqlite3_column_int64(st, 7),
                    sqlite3_column_int(st, 8) ? "true" : "false",
                    (long long)sqlite3_column_int64(st, 9), (long long)sqlite3_column_int64(st, 10),
                    (long long)sqlite3_column_int64(st, 11));
    if (!sqlite3_column_int(st, 12)) {
      px_buf_put(out, "null}", 5);
      continue;
    }
    for (int k = 0; k < 6; k++) {
      px_buf_printf(out, "%s\"%s\":", k ? "," : "{", phases[k]);
      coord_hb_jnum(out, sqlite3_column_double(st, 13 + k), 1);
    }
    px_buf_put(out, "}}", 2);
  }
  sqlite3_finalize(st);
  if (rc != SQLITE_ROW && rc != SQLITE_DONE) return http_db_fail(db, out);
  px_buf_put(out, "],\"next_cursor\":", 16);
  if (more) px_buf_printf(out, "\"%lld\"}\n", last);
  else px_buf_put(out, "null}\n", 6);
  return 200;
}

int coord_http_layers(sqlite3 *db, const char *ref, const coord_http_page_t *pg,
                      coord_hbuf_t *out) {
  int limit = 0, rc;
  if ((rc = http_limit(pg, 5000, 50000, &limit, out))) return rc;
  long long ci = -1, cl = -1;
  if (pg->cursor) {
    char tmp[48];
    snprintf(tmp, sizeof tmp, "%s", pg->cursor);
    char *colon = strchr(tmp, ':');
    if (strlen(pg->cursor) >= sizeof tmp || !colon)
      return http_fail(out, 400, "cursor = '%.40s': expected a next_cursor of this listing",
                       pg->cursor);
    *colon = '\0';
    if (http_parse_int(tmp, 0, INT_MAX, &ci) != 0 || http_parse_int(colon + 1, 0, INT_MAX, &cl))
      return http_fail(out, 400, "cursor = '%.40s': expected a next_cursor of this listing",
                       pg->cursor);
  }
  char job[160];
  if ((rc = http_resolve_job(db, ref, job, sizeof job, out))) return rc;
  sqlite3_stmt *st = NULL;
  if (sqlite3_prepare_v2(db,
                         "SELECT iteration, layer, name, r_intra, s_intra, r_inter, s_inter,"
                         " rho1, rho2, density, numel FROM iteration_layers"
                         " WHERE job_id = ?1 AND iteration >= ?2 AND rank = 0"
                         " AND (iteration > ?2 OR layer > ?3)"
                         " ORDER BY iteration, layer LIMIT ?4",
                         -1, &st, NULL) != SQLITE_OK)
    return http_db_fail(db, out);
  sqlite3_bind_text(st, 1, job, -1, SQLITE_TRANSIENT);
  sqlite3_bind_int64(st, 2, ci);
  sqlite3_bind_int64(st, 3, cl);
  sqlite3_bind_int(st, 4, limit + 1);
  px_buf_put(out, "{\"job_id\":", 10);
  coord_hb_jstr(out, job);
  px_buf_put(out, ",\"layers\":[", 11);
  int n = 0, more = 0;
  long long li = 0, ll = 0;
  static const char *const cols[] = {"r_intra", "s_intra", "r_inter", "s_inter",
                                     "rho1",    "rho2",    "density"};
  while ((rc = sqlite3_step(st)) == SQLITE_ROW) {
    if (n == limit) {
      more = 1;
      break;
    }
    if (n++) px_buf_put(out, ",", 1);
    li = sqlite3_column_int64(st, 0);
    ll = sqlite3_column_int64(st, 1);
    px_buf_printf(out, "{\"iteration\":%lld,\"layer\":%lld,\"name\":", li, ll);
    coord_hb_jstr(out, (const char *)sqlite3_column_text(st, 2));
    for (int k = 0; k < 7; k++) {
      px_buf_printf(out, ",\"%s\":", cols[k]);
      coord_hb_jnum(out, sqlite3_column_double(st, 3 + k), 1);
    }
    px_buf_printf(out, ",\"numel\":%lld}", (long long)sqlite3_column_int64(st, 10));
  }
  sqlite3_finalize(st);
  if (rc != SQLITE_ROW && rc != SQLITE_DONE) return http_db_fail(db, out);
  px_buf_put(out, "],\"next_cursor\":", 16);
  if (more) px_buf_printf(out, "\"%lld:%lld\"}\n", li, ll);
  else px_buf_put(out, "null}\n", 6);
  return 200;
}

/* ---- nodes -------------------------------------------------------------------- */

int coord_http_nodes(sqlite3 *db, const coord_http_page_t *pg, coord_hbuf_t *out) {
  int limit = 0, rc;
  if ((rc = http_limit(pg, 100, 1000, &limit, out))) return rc;
  long long cursor = 0;
  if (pg->cursor && http_parse_int(pg->cursor, 0, LLONG_MAX, &cursor) != 0)
    return http_fail(out, 400, "cursor = '%.40s': expected a next_cursor of this listing",
                     pg->cursor);
  sqlite3_stmt *st = NULL;
  if (sqlite3_prepare_v2(db,
                         "SELECT n.id, n.node_id, n.name, n.hostname, n.state, n.job_id,"
                         " n.registered_unix_ms, n.last_heartbeat_unix_ms,"
                         " (SELECT count(*) FROM node_devices d WHERE d.node_id = n.node_id)"
                         " FROM nodes n WHERE n.id > ?1 ORDER BY n.id LIMIT ?2",
                         -1, &st, NULL) != SQLITE_OK)
    return http_db_fail(db, out);
  sqlite3_bind_int64(st, 1, cursor);
  sqlite3_bind_int(st, 2, limit + 1);
  px_buf_put(out, "{\"nodes\":[", 10);
  int n = 0, more = 0;
  long long last = 0;
  while ((rc = sqlite3_step(st)) == SQLITE_ROW) {
    if (n == limit) {
      more = 1;
      break;
    }
    if (n++) px_buf_put(out, ",", 1);
    last = sqlite3_column_int64(st, 0);
    const char *job = (const char *)sqlite3_column_text(st, 5);
    px_buf_put(out, "{\"node_id\":", 11);
    coord_hb_jstr(out, (const char *)sqlite3_column_text(st, 1));
    px_buf_put(out, ",\"name\":", 8);
    coord_hb_jstr(out, (const char *)sqlite3_column_text(st, 2));
    px_buf_put(out, ",\"hostname\":", 12);
    coord_hb_jstr(out, (const char *)sqlite3_column_text(st, 3));
    px_buf_put(out, ",\"state\":", 9);
    coord_hb_jstr(out, http_node_state(sqlite3_column_int(st, 4)));
    px_buf_put(out, ",\"job_id\":", 10);
    coord_hb_jstr(out, job && job[0] ? job : NULL);
    px_buf_printf(out,
                    ",\"devices\":%d,\"registered_unix_ms\":%lld,\"last_heartbeat_unix_ms\":%lld}",
                    sqlite3_column_int(st, 8), (long long)sqlite3_column_int64(st, 6),
                    (long long)sqlite3_column_int64(st, 7));
  }
  sqlite3_finalize(st);
  if (rc != SQLITE_ROW && rc != SQLITE_DONE) return http_db_fail(db, out);
  px_buf_put(out, "],\"next_cursor\":", 16);
  if (more) px_buf_printf(out, "\"%lld\"}\n", last);
  else px_buf_put(out, "null}\n", 6);
  return 200;
}
