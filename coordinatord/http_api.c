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
 * reports, the only rank that reports to the coordinator.
 *
 * Each object is described once, by a field table (JSON key, SQL
 * expression, how the value is read): the SELECT list is made from the
 * table and a row is read back by the same table, so a key can never be
 * paired with another key's column (a hand-counted column index once
 * shifted /api/v1/jobs/JOB's totals by one). Documents are json-c trees
 * written by prunex/json.h, as pxctl's --json. */
#include <assert.h>
#include <errno.h>
#include <json-c/json.h>
#include <limits.h>
#include <sqlite3.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "coord.h"
#include "http.h"
#include "prunex/json.h"
#include "prunex/report.h"
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

/* ---- documents ---------------------------------------------------------------- */

void coord_http_error_body(coord_hbuf_t *out, const char *msg) {
  struct json_object *o = json_object_new_object();
  json_object_object_add(o, "error", px_json_string(msg, strlen(msg)));
  px_json_put(out, o);
  px_buf_put(out, "\n", 1);
  json_object_put(o);
}

/* Writes doc (and frees it) as the response body: a 200. */
static int http_done(struct json_object *doc, coord_hbuf_t *out) {
  if (!doc) out->oom = 1;
  else px_json_put(out, doc);
  px_buf_put(out, "\n", 1);
  json_object_put(doc);
  return 200;
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
  coord_http_error_body(out, msg);
  return status;
}

static int http_db_fail(sqlite3 *db, coord_hbuf_t *out) {
  px_log(PX_LOG_WARN, "http: database: %s", sqlite3_errmsg(db));
  return http_fail(out, 500, "database: %s", sqlite3_errmsg(db));
}

/* ---- field tables ---------------------------------------------------------------- */

/* How a column becomes a value. Every kind is null for SQL NULL. */
typedef enum {
  HF_TEXT,        /* a string */
  HF_TEXT_SET,    /* a string, null when empty */
  HF_INT,         /* an integer */
  HF_INT_POS,     /* an integer, null unless > 0 */
  HF_INT_NN,      /* an integer, null when negative */
  HF_NUM,         /* a number (null when not finite) */
  HF_NUM_NN,      /* a number, null when negative (the "not measured" -1) */
  HF_BOOL,        /* true for nonzero */
  HF_JOB_STATE,   /* a JobState as its name */
  HF_NODE_STATE,  /* a NodeState as its name */
  HF_SPEC,        /* the JobSpec blob: strategy, model, dataset, max_iterations,
                     max_restarts */
  HF_GROUP,       /* a flag: when nonzero, the next `group` fields nested under
                     key, else null */
  HF_HIDDEN,      /* selected, not written (the paging cursor) */
} http_kind_t;

typedef struct {
  const char *key;
  const char *sql;
  http_kind_t kind;
  int group;      /* HF_GROUP: how many fields follow inside it */
} http_field_t;

#define HTTP_NFIELDS(t) ((int)(sizeof(t) / sizeof((t)[0])))

/* A job, as /api/v1/jobs lists it. */
static const http_field_t http_job_fields[] = {
    {NULL, "j.id", HF_HIDDEN, 0},
    {"job_id", "j.job_id", HF_TEXT, 0},
    {"name", "j.name", HF_TEXT, 0},
    {"state", "j.state", HF_JOB_STATE, 0},
    {"reason", "j.reason", HF_TEXT, 0},
    {"spec", "j.spec", HF_SPEC, 0},
    {"nodes", "j.num_nodes", HF_INT, 0},
    {"workers_per_node", "j.workers_per_node", HF_INT, 0},
    {"created_unix_ms", "j.created_unix_ms", HF_INT, 0},
    {"updated_unix_ms", "j.updated_unix_ms", HF_INT, 0},
    {"scheduled_unix_ms", "j.scheduled_unix_ms", HF_INT_POS, 0},
    {"finished_unix_ms", "j.finished_unix_ms", HF_INT_POS, 0},
    {"state_since_unix_ms",
     "(SELECT max(time_unix_ms) FROM job_events e WHERE e.job_id = j.job_id)", HF_INT, 0},
    {"iteration", "j.iteration", HF_INT_NN, 0},
    {"test_accuracy",
     "(SELECT test_accuracy FROM iterations i WHERE i.job_id = j.job_id AND i.rank = 0"
     " AND i.test_accuracy >= 0 ORDER BY iteration DESC LIMIT 1)", HF_NUM, 0},
    {"density",
     "(SELECT density FROM iterations i WHERE i.job_id = j.job_id AND i.rank = 0"
     " ORDER BY iteration DESC LIMIT 1)", HF_NUM, 0},
    /* the attempt running now (issue 14: 1 before any restart) */
    {"attempt", "j.attempt", HF_INT, 0},
    /* "" while the checkpoints are usable (issue 26) */
    {"checkpoint_problem", "j.checkpoint_problem", HF_TEXT, 0},
};

/* /api/v1/jobs/JOB adds the totals over rank 0's iterations. */
static const http_field_t http_job_total_fields[] = {
    {"iterations", "(SELECT count(*) FROM iterations i WHERE i.job_id = j.job_id AND i.rank = 0)",
     HF_INT, 0},
    {"bytes_inter",
     "(SELECT total(bytes_inter) FROM iterations i WHERE i.job_id = j.job_id AND i.rank = 0)",
     HF_INT, 0},
    {"bytes_intra",
     "(SELECT total(bytes_intra) FROM iterations i WHERE i.job_id = j.job_id AND i.rank = 0)",
     HF_INT, 0},
};

static const http_field_t http_node_fields[] = {
    {NULL, "n.id", HF_HIDDEN, 0},
    {"node_id", "n.node_id", HF_TEXT, 0},
    {"name", "n.name", HF_TEXT, 0},
    {"hostname", "n.hostname", HF_TEXT, 0},
    {"state", "n.state", HF_NODE_STATE, 0},
    {"job_id", "n.job_id", HF_TEXT_SET, 0},
    {"devices", "(SELECT count(*) FROM node_devices d WHERE d.node_id = n.node_id)", HF_INT, 0},
    {"registered_unix_ms", "n.registered_unix_ms", HF_INT, 0},
    {"last_heartbeat_unix_ms", "n.last_heartbeat_unix_ms", HF_INT, 0},
};

/* The iteration and layer objects are the report tables' PX_REPORT_JSON
 * fields (prunex/report.h), the column named as the key; a layer starts
 * with its iteration, and an iteration's phase times nest under "phases"
 * (null for a report without them). */
#define HTTP_REPORT_MAX 48

static http_kind_t http_report_kind(const px_report_field_t *f) {
  static const http_kind_t ints[3] = {HF_INT, HF_INT_NN, HF_INT_POS};
  switch (f->type) {
  case PX_REPORT_TEXT: return HF_TEXT;
  case PX_REPORT_BOOL: return HF_BOOL;
  case PX_REPORT_F64:
    assert(f->presence != PX_REPORT_POSITIVE);
    return f->presence == PX_REPORT_NONNEG ? HF_NUM_NN : HF_NUM;
  default: return ints[f->presence];
  }
}

/* Fills out[] (HTTP_REPORT_MAX entries) from table t; returns the count. */
static int http_report_fields(px_report_table_t t, http_field_t *out) {
  int n = 0, group = -1;
  if (t == PX_REPORT_LAYER) out[n++] = (http_field_t){"iteration", "iteration", HF_INT, 0};
  for (int i = 0; i < px_report_count(t); i++) {
    const px_report_field_t *f = px_report_field(t, i);
    if (!(f->where & PX_REPORT_JSON)) continue;
    if ((f->where & PX_REPORT_PHASE) && group < 0) {
      group = n;
      out[n++] = (http_field_t){"phases", "has_phases", HF_GROUP, 0};
    }
    assert(n < HTTP_REPORT_MAX - 1);
    out[n++] = (http_field_t){f->name, f->name, http_report_kind(f), 0};
    if (f->where & PX_REPORT_PHASE) out[group].group++;
  }
  return n;
}

/* "fields": what each key of the listing's objects is (the n fields of t,
 * read from table rt): key, label, unit, the object it nests in
 * ("phases"), and plot: true for the layer figures drawn per layer; the
 * dashboard takes its per-layer charts and its legends from it. */
static struct json_object *http_report_doc(px_report_table_t rt, const http_field_t *t, int n) {
  struct json_object *arr = json_object_new_array();
  const char *in = NULL;
  for (int i = 0; i < n; i++) {
    if (t[i].kind == HF_GROUP) {
      in = t[i].key;
      continue;
    }
    const px_report_field_t *f = px_report_find(rt, t[i].key);
    if (!f) f = px_report_find(PX_REPORT_ITERATION, t[i].key); /* a layer's iteration */
    struct json_object *o = json_object_new_object();
    json_object_object_add(o, "key", json_object_new_string(f->name));
    json_object_object_add(o, "label", json_object_new_string(f->label));
    json_object_object_add(o, "unit", json_object_new_string(f->unit));
    if (in && (f->where & PX_REPORT_PHASE))
      json_object_object_add(o, "in", json_object_new_string(in));
    if (f->where & PX_REPORT_PLOT)
      json_object_object_add(o, "plot", json_object_new_boolean(1));
    json_object_array_add(arr, o);
  }
  return arr;
}

/* "SELECT <the tables' expressions> <rest>" into sql (NUL-terminated). */
static void http_select(px_buf_t *sql, const http_field_t *a, int na, const http_field_t *b,
                        int nb, const char *rest) {
  px_buf_put(sql, "SELECT ", 7);
  for (int i = 0; i < na + nb; i++)
    px_buf_printf(sql, "%s%s", i ? ", " : "", i < na ? a[i].sql : b[i - na].sql);
  px_buf_printf(sql, " %s", rest);
}

/* The column of key in t (an assert: the tables are ours). */
static int http_col(const http_field_t *t, int n, const char *key) {
  for (int i = 0; i < n; i++)
    if ((t[i].key && !strcmp(t[i].key, key)) || !strcmp(t[i].sql, key)) return i;
  assert(!"key not in the field table");
  return 0;
}

/* The spec's fields of a job (null without a readable spec). */
static void http_spec_json(struct json_object *o, const void *blob, int blen) {
  Prunex__V1__JobSpec *spec = NULL;
  if (blob && blen > 0) spec = prunex__v1__job_spec__unpack(NULL, (size_t)blen, blob);
  const char *strategy = spec ? http_strategy(spec->strategy) : NULL;
  const char *model = spec && spec->model ? spec->model->name : NULL;
  const char *dataset = spec && spec->dataset ? spec->dataset->name : NULL;
  int maxit = spec && spec->admm ? spec->admm->max_iterations : 0;
  json_object_object_add(o, "strategy", strategy ? json_object_new_string(strategy) : NULL);
  json_object_object_add(o, "model", model ? px_json_string(model, strlen(model)) : NULL);
  json_object_object_add(o, "dataset", dataset ? px_json_string(dataset, strlen(dataset)) : NULL);
  json_object_object_add(o, "max_iterations", maxit > 0 ? json_object_new_int(maxit) : NULL);
  /* how many restarts the spec allows (issue 14) */
  json_object_object_add(o, "max_restarts", json_object_new_int(
                                                spec && spec->recovery ? spec->recovery->max_restarts : 0));
  if (spec) prunex__v1__job_spec__free_unpacked(spec, NULL);
}

/* Column c of st as field f says; NULL for null. Reads the column only in
 * the form the kind needs (no text made of a number). */
static struct json_object *http_value(sqlite3_stmt *st, int c, const http_field_t *f) {
  if (sqlite3_column_type(st, c) == SQLITE_NULL) return NULL;
  const char *t;
  int64_t i;
  double d;
  switch (f->kind) {
  case HF_TEXT:
  case HF_TEXT_SET:
    t = (const char *)sqlite3_column_text(st, c);
    i = sqlite3_column_bytes(st, c);
    return f->kind == HF_TEXT || i > 0 ? px_json_string(t, (size_t)i) : NULL;
  case HF_INT:
  case HF_INT_POS:
  case HF_INT_NN:
  case HF_BOOL:
  case HF_JOB_STATE:
  case HF_NODE_STATE:
    i = sqlite3_column_int64(st, c);
    if (f->kind == HF_BOOL) return json_object_new_boolean(i != 0);
    if (f->kind == HF_JOB_STATE) return json_object_new_string(http_job_state((int)i));
    if (f->kind == HF_NODE_STATE) return json_object_new_string(http_node_state((int)i));
    if ((f->kind == HF_INT_POS && i <= 0) || (f->kind == HF_INT_NN && i < 0)) return NULL;
    return json_object_new_int64(i);
  case HF_NUM:
  case HF_NUM_NN:
    d = sqlite3_column_double(st, c);
    return f->kind == HF_NUM || d >= 0 ? px_json_double(d) : NULL;
  default: return NULL;
  }
}

/* Adds the fields of t (n of them), read from the columns from `first` on,
 * to o. */
static void http_row(sqlite3_stmt *st, int first, const http_field_t *t, int n,
                     struct json_object *o) {
  for (int k = 0; k < n; k++) {
    const http_field_t *f = &t[k];
    int c = first + k;
    if (f->kind == HF_HIDDEN) continue;
    if (f->kind == HF_SPEC) {
      http_spec_json(o, sqlite3_column_blob(st, c), sqlite3_column_bytes(st, c));
    } else if (f->kind == HF_GROUP) {
      struct json_object *g = NULL;
      if (sqlite3_column_int(st, c)) {
        g = json_object_new_object();
        http_row(st, c + 1, f + 1, f->group, g);
      }
      json_object_object_add(o, f->key, g);
      k += f->group;
    } else {
      json_object_object_add(o, f->key, http_value(st, c, f));
    }
  }
}

/* One page of a listing: the rows of st (its SELECT made by http_select
 * from t, asking for limit + 1 rows) as objects under `key` of a new
 * document, next_cursor from cursor() of the last row written when there
 * were more. The document, or NULL on a database error (st finalised either
 * way). */
typedef void (*http_cursor_fn)(sqlite3_stmt *st, const http_field_t *t, int n, char *buf,
                               size_t cap);

static struct json_object *http_page(sqlite3_stmt *st, const http_field_t *t, int n, int limit,
                                     const char *key, http_cursor_fn cursor) {
  struct json_object *doc = json_object_new_object(), *arr = json_object_new_array();
  json_object_object_add(doc, key, arr);
  char next[64] = "";
  int count = 0, more = 0, rc;
  while ((rc = sqlite3_step(st)) == SQLITE_ROW) {
    if (count++ == limit) {
      more = 1;
      break;
    }
    struct json_object *o = json_object_new_object();
    http_row(st, 0, t, n, o);
    json_object_array_add(arr, o);
    cursor(st, t, n, next, sizeof next);
  }
  sqlite3_finalize(st);
  if (rc != SQLITE_ROW && rc != SQLITE_DONE) {
    json_object_put(doc);
    return NULL;
  }
  json_object_object_add(doc, "next_cursor", more ? json_object_new_string(next) : NULL);
  return doc;
}

static void http_cursor_id(sqlite3_stmt *st, const http_field_t *t, int n, char *buf,
                           size_t cap) {
  (void)t, (void)n;
  snprintf(buf, cap, "%lld", (long long)sqlite3_column_int64(st, 0));
}

static void http_cursor_iteration(sqlite3_stmt *st, const http_field_t *t, int n, char *buf,
                                  size_t cap) {
  snprintf(buf, cap, "%lld", (long long)sqlite3_column_int64(st, http_col(t, n, "iteration")));
}

static void http_cursor_layer(sqlite3_stmt *st, const http_field_t *t, int n, char *buf,
                              size_t cap) {
  snprintf(buf, cap, "%lld:%lld",
           (long long)sqlite3_column_int64(st, http_col(t, n, "iteration")),
           (long long)sqlite3_column_int64(st, http_col(t, n, "layer")));
}

/* Prepares the SELECT of t (and t2) followed by rest; NULL on failure. */
static sqlite3_stmt *http_prepare(sqlite3 *db, const http_field_t *t, int n,
                                  const http_field_t *t2, int n2, const char *rest) {
  px_buf_t sql = {0};
  http_select(&sql, t, n, t2, n2, rest);
  sqlite3_stmt *st = NULL;
  if (sql.oom || sqlite3_prepare_v2(db, sql.p, -1, &st, NULL) != SQLITE_OK) st = NULL;
  px_buf_free(&sql);
  return st;
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

#define HTTP_BAD_CURSOR "cursor = '%.40s': expected a next_cursor of this listing"

/* A listing paged by row id (the hidden first column): the rows after the
 * cursor (first: none given; lo: the least cursor accepted) in the order
 * rest says. */
static int http_list(sqlite3 *db, const coord_http_page_t *pg, long long lo, long long first,
                     const http_field_t *t, int n, const char *rest, const char *key,
                     coord_hbuf_t *out) {
  int limit = 0, rc;
  if ((rc = http_limit(pg, 100, 1000, &limit, out))) return rc;
  long long cursor = first;
  if (pg->cursor && http_parse_int(pg->cursor, lo, LLONG_MAX, &cursor) != 0)
    return http_fail(out, 400, HTTP_BAD_CURSOR, pg->cursor);
  sqlite3_stmt *st = http_prepare(db, t, n, NULL, 0, rest);
  if (!st) return http_db_fail(db, out);
  sqlite3_bind_int64(st, 1, cursor);
  sqlite3_bind_int(st, 2, limit + 1);
  struct json_object *doc = http_page(st, t, n, limit, key, http_cursor_id);
  return doc ? http_done(doc, out) : http_db_fail(db, out);
}

int coord_http_jobs(sqlite3 *db, const coord_http_page_t *pg, coord_hbuf_t *out) {
  return http_list(db, pg, 1, LLONG_MAX, http_job_fields, HTTP_NFIELDS(http_job_fields),
                   "FROM jobs j WHERE j.id < ?1 ORDER BY j.id DESC LIMIT ?2", "jobs", out);
}

int coord_http_job(sqlite3 *db, const char *ref, coord_hbuf_t *out) {
  char job[160];
  int rc = http_resolve_job(db, ref, job, sizeof job, out);
  if (rc) return rc;
  const int n = HTTP_NFIELDS(http_job_fields), n2 = HTTP_NFIELDS(http_job_total_fields);
  sqlite3_stmt *st = http_prepare(db, http_job_fields, n, http_job_total_fields, n2,
                                  "FROM jobs j WHERE j.job_id = ?1");
  if (!st) return http_db_fail(db, out);
  sqlite3_bind_text(st, 1, job, -1, SQLITE_TRANSIENT);
  rc = sqlite3_step(st);
  if (rc != SQLITE_ROW) {
    sqlite3_finalize(st);
    return rc == SQLITE_DONE ? http_fail(out, 404, "job %s not found", job)
                             : http_db_fail(db, out);
  }
  struct json_object *doc = json_object_new_object();
  http_row(st, 0, http_job_fields, n, doc);
  http_row(st, n, http_job_total_fields, n2, doc);
  sqlite3_finalize(st);
  return http_done(doc, out);
}

/* ---- iterations and layers ---------------------------------------------------- */

/* A page of a job's rows: the job resolved, st prepared from t with `rest`
 * (?1 the job id, then the caller's binds, the limit last), the page under
 * key beside "job_id". */
static int http_job_page(sqlite3 *db, const char *ref, px_report_table_t rt, const char *rest,
                         const long long *binds, int nbinds, int limit, const char *key,
                         http_cursor_fn cursor, coord_hbuf_t *out) {
  char job[160];
  int rc = http_resolve_job(db, ref, job, sizeof job, out);
  if (rc) return rc;
  http_field_t t[HTTP_REPORT_MAX];
  int n = http_report_fields(rt, t);
  sqlite3_stmt *st = http_prepare(db, t, n, NULL, 0, rest);
  if (!st) return http_db_fail(db, out);
  sqlite3_bind_text(st, 1, job, -1, SQLITE_TRANSIENT);
  for (int i = 0; i < nbinds; i++) sqlite3_bind_int64(st, 2 + i, binds[i]);
  sqlite3_bind_int(st, 2 + nbinds, limit + 1);
  struct json_object *page = http_page(st, t, n, limit, key, cursor);
  if (!page) return http_db_fail(db, out);
  struct json_object *doc = json_object_new_object();
  json_object_object_add(doc, "job_id", px_json_string(job, strlen(job)));
  json_object_object_foreach(page, k, v) json_object_object_add(doc, k, json_object_get(v));
  json_object_put(page);
  json_object_object_add(doc, "fields", http_report_doc(rt, t, n));
  return http_done(doc, out);
}

int coord_http_iterations(sqlite3 *db, const char *ref, const coord_http_page_t *pg,
                          coord_hbuf_t *out) {
  int limit = 0, rc;
  if ((rc = http_limit(pg, 1000, 10000, &limit, out))) return rc;
  long long cursor = -1;
  if (pg->cursor && http_parse_int(pg->cursor, 0, INT_MAX, &cursor) != 0)
    return http_fail(out, 400, HTTP_BAD_CURSOR, pg->cursor);
  return http_job_page(db, ref, PX_REPORT_ITERATION,
                       "FROM iterations WHERE job_id = ?1 AND rank = 0 AND iteration > ?2"
                       " ORDER BY iteration LIMIT ?3",
                       &cursor, 1, limit, "iterations", http_cursor_iteration, out);
}

int coord_http_layers(sqlite3 *db, const char *ref, const coord_http_page_t *pg,
                      coord_hbuf_t *out) {
  int limit = 0, rc;
  if ((rc = http_limit(pg, 5000, 50000, &limit, out))) return rc;
  long long c[2] = {-1, -1};
  if (pg->cursor) {
    char tmp[48];
    snprintf(tmp, sizeof tmp, "%s", pg->cursor);
    char *colon = strchr(tmp, ':');
    if (strlen(pg->cursor) >= sizeof tmp || !colon)
      return http_fail(out, 400, HTTP_BAD_CURSOR, pg->cursor);
    *colon = '\0';
    if (http_parse_int(tmp, 0, INT_MAX, &c[0]) != 0 ||
        http_parse_int(colon + 1, 0, INT_MAX, &c[1]) != 0)
      return http_fail(out, 400, HTTP_BAD_CURSOR, pg->cursor);
  }
  return http_job_page(db, ref, PX_REPORT_LAYER,
                       "FROM iteration_layers WHERE job_id = ?1 AND iteration >= ?2 AND rank = 0"
                       " AND (iteration > ?2 OR layer > ?3) ORDER BY iteration, layer LIMIT ?4",
                       c, 2, limit, "layers", http_cursor_layer, out);
}

/* ---- nodes -------------------------------------------------------------------- */

int coord_http_nodes(sqlite3 *db, const coord_http_page_t *pg, coord_hbuf_t *out) {
  return http_list(db, pg, 0, 0, http_node_fields, HTTP_NFIELDS(http_node_fields),
                   "FROM nodes n WHERE n.id > ?1 ORDER BY n.id LIMIT ?2", "nodes", out);
}
