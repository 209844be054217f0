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
 * expression, how the value is read; db/http_read.h, where the queries
 * are): the SELECT list is made from the table and a row is read back here
 * by the same table, so a key can never be paired with another key's
 * column (a hand-counted column index once shifted /api/v1/jobs/JOB's
 * totals by one). Documents are json-c trees written by prunex/json.h, as
 * pxctl's --json. */
#include <assert.h>
#include <errno.h>
#include <json-c/json.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "coord.h"
#include "db/epoch_rows.h"
#include "db/http_read.h"
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

static int http_db_fail(coord_hbuf_t *out) {
  px_log(PX_LOG_WARN, "http: database: %s", px_last_error());
  return http_fail(out, 500, "database: %s", px_last_error());
}

/* ---- field tables (db/http_read.h) ------------------------------------------------ */

typedef coord_hfield_t http_field_t;

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

/* The column of key in t (an assert: the tables are ours). */
static int http_col(const http_field_t *t, int n, const char *key) {
  for (int i = 0; i < n; i++)
    if ((t[i].key && !strcmp(t[i].key, key)) || !strcmp(t[i].sql, key)) return i;
  assert(!"key not in the field table");
  return 0;
}

/* The spec's fields of a job (null without a readable spec). */
static void http_spec_json(struct json_object *o, const void *blob, size_t blen) {
  Prunex__V1__JobSpec *spec = NULL;
  if (blob && blen > 0) spec = prunex__v1__job_spec__unpack(NULL, blen, blob);
  const char *strategy = spec ? http_strategy(spec->strategy) : NULL;
  const char *model = spec && spec->model ? spec->model->name : NULL;
  const char *dataset = spec && spec->dataset ? spec->dataset->name : NULL;
  int maxit = spec && spec->admm ? spec->admm->max_iterations : 0;
  json_object_object_add(o, "strategy", strategy ? json_object_new_string(strategy) : NULL);
  json_object_object_add(o, "model", model ? px_json_string(model, strlen(model)) : NULL);
  json_object_object_add(o, "dataset", dataset ? px_json_string(dataset, strlen(dataset)) : NULL);
  json_object_object_add(o, "max_iterations", maxit > 0 ? json_object_new_int(maxit) : NULL);
  /* how many restarts the spec allows */
  json_object_object_add(o, "max_restarts", json_object_new_int(
                                                spec && spec->recovery ? spec->recovery->max_restarts : 0));
  if (spec) prunex__v1__job_spec__free_unpacked(spec, NULL);
}

/* Column c of st as field f says; NULL for null. Reads the column only in
 * the form the kind needs (no text made of a number). */
static struct json_object *http_value(px_store_stmt_t *st, int c, const http_field_t *f) {
  if (px_store_column_is_null(st, c)) return NULL;
  const char *t;
  int64_t i;
  double d;
  switch (f->kind) {
  case HF_TEXT:
  case HF_TEXT_SET:
    t = px_store_column_text(st, c);
    i = (int64_t)px_store_column_bytes(st, c);
    return f->kind == HF_TEXT || i > 0 ? px_json_string(t, (size_t)i) : NULL;
  case HF_INT:
  case HF_INT_POS:
  case HF_INT_NN:
  case HF_BOOL:
  case HF_JOB_STATE:
  case HF_NODE_STATE:
    i = px_store_column_int64(st, c);
    if (f->kind == HF_BOOL) return json_object_new_boolean(i != 0);
    if (f->kind == HF_JOB_STATE) return json_object_new_string(http_job_state((int)i));
    if (f->kind == HF_NODE_STATE) return json_object_new_string(http_node_state((int)i));
    if ((f->kind == HF_INT_POS && i <= 0) || (f->kind == HF_INT_NN && i < 0)) return NULL;
    return json_object_new_int64(i);
  case HF_NUM:
  case HF_NUM_NN:
    d = px_store_column_double(st, c);
    return f->kind == HF_NUM || d >= 0 ? px_json_double(d) : NULL;
  default: return NULL;
  }
}

/* Adds the fields of t (n of them), read from the columns from `first` on,
 * to o. */
static void http_row(px_store_stmt_t *st, int first, const http_field_t *t, int n,
                     struct json_object *o) {
  for (int k = 0; k < n; k++) {
    const http_field_t *f = &t[k];
    int c = first + k;
    if (f->kind == HF_HIDDEN) continue;
    if (f->kind == HF_SPEC) {
      size_t len;
      const void *blob = px_store_column_blob(st, c, &len);
      http_spec_json(o, blob, len);
    } else if (f->kind == HF_GROUP) {
      struct json_object *g = NULL;
      if (px_store_column_int64(st, c)) {
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

/* One page of a listing: the rows (the query asked for limit + 1) as
 * objects in arr, next from cursor() of the last row written, more set
 * when a row beyond the page came. */
typedef void (*http_cursor_fn)(px_store_stmt_t *st, const http_field_t *t, int n, char *buf,
                               size_t cap);

typedef struct {
  const http_field_t *t, *t2;
  int n, n2, limit, count, more;
  struct json_object *arr, *one; /* a listing's array, or the one object */
  http_cursor_fn cursor;
  char next[64];
} http_page_t;

static px_status_t http_page_row(void *arg, px_store_stmt_t *st) {
  http_page_t *p = arg;
  if (!p->arr) { /* one object: its fields, then the second table's */
    http_row(st, 0, p->t, p->n, p->one);
    http_row(st, p->n, p->t2, p->n2, p->one);
    p->count++;
    return 1;
  }
  if (p->count++ == p->limit) {
    p->more = 1;
    return 1;
  }
  struct json_object *o = json_object_new_object();
  http_row(st, 0, p->t, p->n, o);
  json_object_array_add(p->arr, o);
  p->cursor(st, p->t, p->n, p->next, sizeof p->next);
  return PX_OK;
}

/* The page as a new document: the array under key, then next_cursor. */
static struct json_object *http_page_doc(http_page_t *p, const char *key) {
  struct json_object *doc = json_object_new_object();
  json_object_object_add(doc, key, p->arr);
  json_object_object_add(doc, "next_cursor", p->more ? json_object_new_string(p->next) : NULL);
  return doc;
}

static void http_cursor_id(px_store_stmt_t *st, const http_field_t *t, int n, char *buf,
                           size_t cap) {
  (void)t, (void)n;
  snprintf(buf, cap, "%lld", (long long)px_store_column_int64(st, 0));
}

static void http_cursor_iteration(px_store_stmt_t *st, const http_field_t *t, int n, char *buf,
                                  size_t cap) {
  snprintf(buf, cap, "%lld", (long long)px_store_column_int64(st, http_col(t, n, "iteration")));
}

static void http_cursor_layer(px_store_stmt_t *st, const http_field_t *t, int n, char *buf,
                              size_t cap) {
  snprintf(buf, cap, "%lld:%lld",
           (long long)px_store_column_int64(st, http_col(t, n, "iteration")),
           (long long)px_store_column_int64(st, http_col(t, n, "layer")));
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
static int http_resolve_job(px_store_t *db, const char *ref, char *job_id, size_t cap,
                            coord_hbuf_t *out) {
  int n = 0;
  if (coord_db_http_resolve_job(db, ref, job_id, cap, &n) != PX_OK) return http_db_fail(out);
  if (n == 0) return http_fail(out, 404, "job '%.100s' not found (neither an id nor a name)", ref);
  if (n > 1)
    return http_fail(out, 409, "several jobs are named '%.100s': use the job id", ref);
  return 0;
}


/* ---- jobs --------------------------------------------------------------------- */

#define HTTP_BAD_CURSOR "cursor = '%.40s': expected a next_cursor of this listing"

/* A listing of obj paged by row id (the hidden first column): the rows
 * after the cursor (first: none given; lo: the least cursor accepted), as
 * coord_db_http_jobs / _nodes (list) order them. */
typedef px_status_t (*http_list_fn)(px_store_t *db, int64_t cursor, int limit, px_store_row_fn fn,
                                    void *arg);

static int http_list(px_store_t *db, const coord_http_page_t *pg, long long lo, long long first,
                     coord_http_obj_t obj, http_list_fn list, const char *key,
                     coord_hbuf_t *out) {
  int limit = 0, rc;
  if ((rc = http_limit(pg, 100, 1000, &limit, out))) return rc;
  long long cursor = first;
  if (pg->cursor && http_parse_int(pg->cursor, lo, LLONG_MAX, &cursor) != 0)
    return http_fail(out, 400, HTTP_BAD_CURSOR, pg->cursor);
  http_page_t p = {.limit = limit, .arr = json_object_new_array(), .cursor = http_cursor_id};
  p.t = coord_db_http_fields(obj, &p.n);
  if (list(db, cursor, limit + 1, http_page_row, &p) != PX_OK) {
    json_object_put(p.arr);
    return http_db_fail(out);
  }
  return http_done(http_page_doc(&p, key), out);
}

int coord_http_jobs(px_store_t *db, const coord_http_page_t *pg, coord_hbuf_t *out) {
  return http_list(db, pg, 1, LLONG_MAX, COORD_HTTP_JOB, coord_db_http_jobs, "jobs", out);
}

static struct json_object *http_names(char **v, size_t n) {
  struct json_object *arr = json_object_new_array();
  for (size_t i = 0; i < n; i++) json_object_array_add(arr, px_json_string(v[i], strlen(v[i])));
  return arr;
}

/* "memberships": the job's membership epochs of every attempt, by attempt
 * then epoch (db/epoch_rows.h): the members by name, the nodes in and out
 * against the epoch before, the kind of change and why. The dashboard
 * marks each change (kind other than "placed") on its accuracy charts. */
static px_status_t http_memberships(px_store_t *db, const char *job, struct json_object *o) {
  coord_arena_t a;
  coord_arena_init(&a);
  coord_epoch_row_t *rows = NULL;
  size_t n = 0;
  px_status_t rc = coord_db_epoch_rows(db, &a, job, 0, 1, &rows, &n);
  struct json_object *arr = json_object_new_array();
  for (size_t i = 0; rc == PX_OK && i < n; i++) {
    const coord_epoch_row_t *r = &rows[i];
    struct json_object *e = json_object_new_object();
    json_object_object_add(e, "attempt", json_object_new_int(r->attempt));
    json_object_object_add(e, "epoch", json_object_new_int(r->epoch));
    json_object_object_add(e, "from_iteration", json_object_new_int(r->from_iteration));
    json_object_object_add(e, "kind", json_object_new_string(coord_epoch_kind_name(r->kind)));
    json_object_object_add(e, "nodes", http_names(r->names, r->n));
    json_object_object_add(e, "nodes_in", http_names(r->in, r->n_in));
    json_object_object_add(e, "nodes_out", http_names(r->out, r->n_out));
    json_object_object_add(e, "reason", px_json_string(r->reason, strlen(r->reason)));
    json_object_object_add(e, "time_unix_ms", json_object_new_int64(r->time_unix_ms));
    json_object_array_add(arr, e);
  }
  json_object_object_add(o, "memberships", arr);
  coord_arena_free(&a);
  return rc;
}

int coord_http_job(px_store_t *db, const char *ref, coord_hbuf_t *out) {
  char job[160];
  int rc = http_resolve_job(db, ref, job, sizeof job, out);
  if (rc) return rc;
  http_page_t p = {.one = json_object_new_object()};
  p.t = coord_db_http_fields(COORD_HTTP_JOB, &p.n);
  p.t2 = coord_db_http_fields(COORD_HTTP_JOB_TOTALS, &p.n2);
  px_status_t st = coord_db_http_job(db, job, http_page_row, &p);
  if (st == PX_OK && p.count) st = http_memberships(db, job, p.one);
  if (st != PX_OK || !p.count) {
    json_object_put(p.one);
    return st != PX_OK ? http_db_fail(out) : http_fail(out, 404, "job %s not found", job);
  }
  return http_done(p.one, out);
}

/* ---- iterations and layers ---------------------------------------------------- */

/* A page of a job's report rows: the job resolved, the rows after the
 * cursor c (an iteration, or an iteration and a layer) read by table rt's
 * fields, the page under key beside "job_id". */
static int http_job_page(px_store_t *db, const char *ref, px_report_table_t rt,
                         const long long *c, int limit, const char *key, coord_hbuf_t *out) {
  char job[160];
  int rc = http_resolve_job(db, ref, job, sizeof job, out);
  if (rc) return rc;
  http_field_t t[COORD_HTTP_REPORT_MAX];
  int n = coord_db_http_report_fields(rt, t);
  http_page_t p = {.t = t, .n = n, .limit = limit, .arr = json_object_new_array()};
  px_status_t st;
  if (rt == PX_REPORT_LAYER) {
    p.cursor = http_cursor_layer;
    st = coord_db_http_layers(db, t, n, job, c[0], c[1], limit + 1, http_page_row, &p);
  } else {
    p.cursor = http_cursor_iteration;
    st = coord_db_http_iterations(db, t, n, job, c[0], limit + 1, http_page_row, &p);
  }
  if (st != PX_OK) {
    json_object_put(p.arr);
    return http_db_fail(out);
  }
  struct json_object *doc = json_object_new_object();
  json_object_object_add(doc, "job_id", px_json_string(job, strlen(job)));
  json_object_object_add(doc, key, p.arr);
  json_object_object_add(doc, "next_cursor", p.more ? json_object_new_string(p.next) : NULL);
  json_object_object_add(doc, "fields", http_report_doc(rt, t, n));
  return http_done(doc, out);
}

int coord_http_iterations(px_store_t *db, const char *ref, const coord_http_page_t *pg,
                          coord_hbuf_t *out) {
  int limit = 0, rc;
  if ((rc = http_limit(pg, 1000, 10000, &limit, out))) return rc;
  long long cursor = -1;
  if (pg->cursor && http_parse_int(pg->cursor, 0, INT_MAX, &cursor) != 0)
    return http_fail(out, 400, HTTP_BAD_CURSOR, pg->cursor);
  return http_job_page(db, ref, PX_REPORT_ITERATION, &cursor, limit, "iterations", out);
}

int coord_http_layers(px_store_t *db, const char *ref, const coord_http_page_t *pg,
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
  return http_job_page(db, ref, PX_REPORT_LAYER, c, limit, "layers", out);
}

/* ---- nodes -------------------------------------------------------------------- */

int coord_http_nodes(px_store_t *db, const coord_http_page_t *pg, coord_hbuf_t *out) {
  return http_list(db, pg, 0, 0, COORD_HTTP_NODE, coord_db_http_nodes, "nodes", out);
}
