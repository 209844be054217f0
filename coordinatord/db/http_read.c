/* The HTTP side's queries (http_read.h): the field tables of the JSON API's
 * objects and the SELECTs made from them, and /metrics' counts and per-job
 * samples. Runs on the HTTP thread with its own read-only store. */
#include <assert.h>
#include <stdio.h>
#include <string.h>

#include "http_read.h"

#include "../coord.h"
#include "prunex/check.h"
#include "prunex/text.h"

#define HTTP_NFIELDS(t) ((int)(sizeof(t) / sizeof((t)[0])))

/* A job, as /api/v1/jobs lists it. */
static const coord_hfield_t http_job_fields[] = {
    {NULL, "j.id", HF_HIDDEN, 0},
    {"job_id", "j.job_id", HF_TEXT, 0},
    {"name", "j.name", HF_TEXT, 0},
    /* who submitted it ("" without tokens) */
    {"owner", "j.owner", HF_TEXT, 0},
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
    /* the attempt running now (1 before any restart) */
    {"attempt", "j.attempt", HF_INT, 0},
    /* "" while the checkpoints are usable */
    {"checkpoint_problem", "j.checkpoint_problem", HF_TEXT, 0},
    /* the membership epoch in force in the current attempt and its node
     * count (null before the job is placed) */
    {"membership_epoch",
     "(SELECT epoch FROM job_epochs e WHERE e.job_id = j.job_id AND e.attempt = j.attempt"
     " ORDER BY e.epoch DESC LIMIT 1)", HF_INT_POS, 0},
    {"member_nodes",
     "(SELECT length(node_ids) - length(replace(node_ids, char(10), '')) + 1 FROM job_epochs e"
     " WHERE e.job_id = j.job_id AND e.attempt = j.attempt ORDER BY e.epoch DESC LIMIT 1)",
     HF_INT_POS, 0},
};

/* /api/v1/jobs/JOB adds the totals over rank 0's iterations. */
static const coord_hfield_t http_job_total_fields[] = {
    {"iterations", "(SELECT count(*) FROM iterations i WHERE i.job_id = j.job_id AND i.rank = 0)",
     HF_INT, 0},
    {"bytes_inter",
     "(SELECT total(bytes_inter) FROM iterations i WHERE i.job_id = j.job_id AND i.rank = 0)",
     HF_INT, 0},
    {"bytes_intra",
     "(SELECT total(bytes_intra) FROM iterations i WHERE i.job_id = j.job_id AND i.rank = 0)",
     HF_INT, 0},
};

static const coord_hfield_t http_node_fields[] = {
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

const coord_hfield_t *coord_db_http_fields(coord_http_obj_t obj, int *n) {
  switch (obj) {
  case COORD_HTTP_JOB: *n = HTTP_NFIELDS(http_job_fields); return http_job_fields;
  case COORD_HTTP_JOB_TOTALS: *n = HTTP_NFIELDS(http_job_total_fields); return http_job_total_fields;
  default: *n = HTTP_NFIELDS(http_node_fields); return http_node_fields;
  }
}

static coord_hf_kind_t http_report_kind(const px_report_field_t *f) {
  static const coord_hf_kind_t ints[3] = {HF_INT, HF_INT_NN, HF_INT_POS};
  switch (f->type) {
  case PX_REPORT_TEXT: return HF_TEXT;
  case PX_REPORT_BOOL: return HF_BOOL;
  case PX_REPORT_F64:
    assert(f->presence != PX_REPORT_POSITIVE);
    return f->presence == PX_REPORT_NONNEG ? HF_NUM_NN : HF_NUM;
  default: return ints[f->presence];
  }
}

int coord_db_http_report_fields(px_report_table_t t, coord_hfield_t *out) {
  int n = 0, group = -1;
  if (t == PX_REPORT_LAYER) out[n++] = (coord_hfield_t){"iteration", "iteration", HF_INT, 0};
  for (int i = 0; i < px_report_count(t); i++) {
    const px_report_field_t *f = px_report_field(t, i);
    if (!(f->where & PX_REPORT_JSON)) continue;
    if ((f->where & PX_REPORT_PHASE) && group < 0) {
      group = n;
      out[n++] = (coord_hfield_t){"phases", "has_phases", HF_GROUP, 0};
    }
    assert(n < COORD_HTTP_REPORT_MAX - 1);
    out[n++] = (coord_hfield_t){f->name, f->name, http_report_kind(f), 0};
    if (f->where & PX_REPORT_PHASE) out[group].group++;
  }
  return n;
}

px_status_t coord_db_http_open(const char *db_path, px_store_t **out) {
  px_store_options_t opt = coord_db_options(1, 0, 2000);
  return px_store_open(db_path, &opt, out);
}

/* ---- the JSON API ---------------------------------------------------------------- */

/* "SELECT <the tables' expressions> <rest>", then each row to fn. */
static px_status_t http_select_each(px_store_t *db, const coord_hfield_t *a, int na,
                                    const coord_hfield_t *b, int nb, const char *rest,
                                    const px_store_arg_t *args, size_t nargs, px_store_row_fn fn,
                                    void *arg) {
  px_buf_t sql = {0};
  px_buf_put(&sql, "SELECT ", 7);
  for (int i = 0; i < na + nb; i++)
    px_buf_printf(&sql, "%s%s", i ? ", " : "", i < na ? a[i].sql : b[i - na].sql);
  px_buf_printf(&sql, " %s", rest);
  px_status_t rc = sql.oom ? px_set_error(PX_ERR_NOMEM, "http: no memory for a query")
                           : px_store_each(db, sql.p, args, nargs, fn, arg);
  px_buf_free(&sql);
  return rc;
}

typedef struct {
  char *id;
  size_t cap;
  int n;
} http_first_t;

static px_status_t http_first_id(void *arg, px_store_stmt_t *st) {
  http_first_t *r = arg;
  if (r->n++ == 0) snprintf(r->id, r->cap, "%s", px_store_column_text(st, 0));
  return PX_OK;
}

px_status_t coord_db_http_resolve_job(px_store_t *db, const char *ref, char *job_id, size_t cap,
                                      int *count) {
  http_first_t r = {job_id, cap, 0};
  PX_CHECK(px_store_each(db,
                         "SELECT job_id FROM jobs WHERE job_id = ?1 UNION ALL"
                         " SELECT job_id FROM (SELECT job_id FROM jobs WHERE name = ?1"
                         " AND NOT EXISTS (SELECT 1 FROM jobs WHERE job_id = ?1) LIMIT 2)",
                         PX_STORE_ARGS(PX_ARG_TEXT(ref)), http_first_id, &r));
  *count = r.n;
  return PX_OK;
}

px_status_t coord_db_http_jobs(px_store_t *db, int64_t before, int limit, px_store_row_fn fn,
                               void *arg) {
  return http_select_each(db, http_job_fields, HTTP_NFIELDS(http_job_fields), NULL, 0,
                          "FROM jobs j WHERE j.id < ?1 ORDER BY j.id DESC LIMIT ?2",
                          PX_STORE_ARGS(PX_ARG_INT(before), PX_ARG_INT(limit)), fn, arg);
}

px_status_t coord_db_http_nodes(px_store_t *db, int64_t after, int limit, px_store_row_fn fn,
                                void *arg) {
  return http_select_each(db, http_node_fields, HTTP_NFIELDS(http_node_fields), NULL, 0,
                          "FROM nodes n WHERE n.id > ?1 ORDER BY n.id LIMIT ?2",
                          PX_STORE_ARGS(PX_ARG_INT(after), PX_ARG_INT(limit)), fn, arg);
}

px_status_t coord_db_http_job(px_store_t *db, const char *job_id, px_store_row_fn fn, void *arg) {
  return http_select_each(db, http_job_fields, HTTP_NFIELDS(http_job_fields),
                          http_job_total_fields, HTTP_NFIELDS(http_job_total_fields),
                          "FROM jobs j WHERE j.job_id = ?1", PX_STORE_ARGS(PX_ARG_TEXT(job_id)),
                          fn, arg);
}

px_status_t coord_db_http_iterations(px_store_t *db, const coord_hfield_t *t, int n,
                                     const char *job_id, int64_t after, int limit,
                                     px_store_row_fn fn, void *arg) {
  return http_select_each(db, t, n, NULL, 0,
                          "FROM iterations WHERE job_id = ?1 AND rank = 0 AND iteration > ?2"
                          " ORDER BY iteration LIMIT ?3",
                          PX_STORE_ARGS(PX_ARG_TEXT(job_id), PX_ARG_INT(after), PX_ARG_INT(limit)),
                          fn, arg);
}

px_status_t coord_db_http_layers(px_store_t *db, const coord_hfield_t *t, int n,
                                 const char *job_id, int64_t iteration, int64_t layer, int limit,
                                 px_store_row_fn fn, void *arg) {
  return http_select_each(db, t, n, NULL, 0,
                          "FROM iteration_layers WHERE job_id = ?1 AND iteration >= ?2 AND rank = 0"
                          " AND (iteration > ?2 OR layer > ?3) ORDER BY iteration, layer LIMIT ?4",
                          PX_STORE_ARGS(PX_ARG_TEXT(job_id), PX_ARG_INT(iteration),
                                        PX_ARG_INT(layer), PX_ARG_INT(limit)),
                          fn, arg);
}

/* ---- /metrics -------------------------------------------------------------------- */

px_status_t coord_db_http_snapshot_begin(px_store_t *db) { return px_store_exec(db, "BEGIN"); }

void coord_db_http_snapshot_end(px_store_t *db) { px_store_rollback(db); }

typedef struct {
  long long *count;
  int n;
} http_counts_t;

static px_status_t http_count_row(void *arg, px_store_stmt_t *st) {
  http_counts_t *r = arg;
  int64_t s = px_store_column_int64(st, 0);
  if (s >= 0 && s < r->n) r->count[s] = px_store_column_int64(st, 1);
  return PX_OK;
}

px_status_t coord_db_http_state_counts(px_store_t *db, int nodes, long long *count, int n) {
  memset(count, 0, sizeof *count * (size_t)n);
  http_counts_t r = {count, n};
  return px_store_each(db,
                       nodes ? "SELECT state, count(*) FROM nodes GROUP BY state"
                             : "SELECT state, count(*) FROM jobs GROUP BY state",
                       NULL, 0, http_count_row, &r);
}

/* The jobs in state ?1, or in an end state since ?2 (Unix ms). */
#define HTTP_JOBS_WHERE                                                                    \
  "(j.state = ?1 OR (j.finished_unix_ms >= ?2 AND j.state IN (?3, ?4, ?5, ?6)))"

/* The SELECT of the jobs of HTTP_JOBS_WHERE and their samples' values. */
static void http_samples_sql(px_buf_t *q, const coord_db_sample_t *s, int n) {
  px_buf_puts(q, "SELECT j.job_id, j.name, j.spec, i.iteration, i.has_phases");
  for (int k = 0; k < n; k++) {
    const char *c = s[k].column;
    if (s[k].how == COORD_SAMPLE_TOTAL) px_buf_printf(q, ", s.t%d", k);
    else if (s[k].how == COORD_SAMPLE_LAYER_MEAN)
      px_buf_printf(q, ", (SELECT avg(%s) FROM iteration_layers l WHERE l.job_id = j.job_id"
                       " AND l.rank = 0 AND l.iteration = i.iteration)", c);
    else if (s[k].how == COORD_SAMPLE_LATEST_MEASURED)
      px_buf_printf(q, ", (SELECT %s FROM iterations t WHERE t.job_id = j.job_id AND t.rank = 0"
                       " AND t.%s >= 0 ORDER BY iteration DESC LIMIT 1)", c, c);
    else px_buf_printf(q, ", i.%s", c);
  }
  px_buf_puts(q, ", j.state, j.finished_unix_ms");
  px_buf_puts(q, " FROM jobs j LEFT JOIN iterations i ON i.job_id = j.job_id AND i.rank = 0"
                 " AND i.iteration = (SELECT max(iteration) FROM iterations m"
                 " WHERE m.job_id = j.job_id AND m.rank = 0) LEFT JOIN (SELECT job_id");
  for (int k = 0; k < n; k++)
    if (s[k].how == COORD_SAMPLE_TOTAL) px_buf_printf(q, ", total(%s) AS t%d", s[k].column, k);
  px_buf_puts(q, " FROM iterations WHERE rank = 0 AND job_id IN (SELECT job_id FROM jobs j"
                 " WHERE " HTTP_JOBS_WHERE ") GROUP BY job_id) s ON s.job_id = j.job_id"
                 " WHERE " HTTP_JOBS_WHERE " ORDER BY j.state <> ?1, j.id");
}

px_status_t coord_db_http_job_samples(px_store_t *db, int state, int64_t ended_since_ms,
                                      const coord_db_sample_t *s, int n, px_store_row_fn fn,
                                      void *arg) {
  px_buf_t q = {0};
  http_samples_sql(&q, s, n);
  px_status_t rc = q.oom ? px_set_error(PX_ERR_NOMEM, "http: no memory for a query")
                         : px_store_each(db, q.p,
                                         PX_STORE_ARGS(PX_ARG_INT(state), PX_ARG_INT(ended_since_ms),
                                                       PX_ARG_INT(JS_SUCCEEDED), PX_ARG_INT(JS_FAILED),
                                                       PX_ARG_INT(JS_CANCELLED), PX_ARG_INT(JS_TIMEOUT)),
                                         fn, arg);
  px_buf_free(&q);
  return rc;
}
