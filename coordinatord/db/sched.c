/* The scheduler's queries (db/sched.h). */
#include "sched.h" /* db/sched.h */

#include <stdio.h>
#include <string.h>

#include <sqlite3.h>

#include "db_core.h"
#include "prunex/check.h"

px_status_t coord_db_sched_pstop_add(coord_t *c, const char *job_id, const char *waiter,
                                     const char *by, int64_t now, int stopped) {
  return px_store_run_args(c->db,
                           "INSERT OR REPLACE INTO preempt_stops (job_id, waiter, asked_by,"
                           " asked_unix_ms, stopped) VALUES (?1, ?2, ?3, ?4, ?5)",
                           PX_STORE_ARGS(PX_ARG_TEXT(job_id), PX_ARG_TEXT(waiter), PX_ARG_TEXT(by),
                                         PX_ARG_INT(now), PX_ARG_INT(stopped)));
}

#define COORD_PSTOP_COLUMNS                                                              \
  "SELECT p.job_id, j.state, p.waiter, p.asked_by, p.asked_unix_ms, p.stopped,"         \
  " p.stop_iteration FROM preempt_stops p JOIN jobs j ON j.job_id = p.job_id"

/* The current row of a COORD_PSTOP_COLUMNS query into o (arena a). */
static px_status_t coord_db_pstop_fill(coord_arena_t *a, px_store_stmt_t *st, void *obj,
                                       void *arg) {
  (void)arg;
  coord_db_pstop_t *o = obj;
  o->job_id = coord_strdup(a, px_store_column_text(st, 0));
  o->state = (int)px_store_column_int64(st, 1);
  o->waiter = coord_strdup(a, px_store_column_text(st, 2));
  o->by = coord_strdup(a, px_store_column_text(st, 3));
  o->asked_ms = px_store_column_int64(st, 4);
  o->stopped = (int)px_store_column_int64(st, 5);
  o->stop_iteration = (int)px_store_column_int64(st, 6);
  if (o->job_id && o->waiter && o->by) return PX_OK;
  return px_set_error(PX_ERR_NOMEM, "preemption: out of memory");
}

/* The rows of a COORD_PSTOP_COLUMNS query (?1 = key when not NULL). */
static px_status_t coord_db_pstops_where(coord_t *c, coord_arena_t *a, const char *sql,
                                         const char *key, coord_db_pstop_t **out, size_t *n) {
  const px_store_arg_t arg[] = {PX_ARG_TEXT(key)};
  return coord_db_rows(c, a, sql, arg, key ? 1 : 0, sizeof **out, out, n, coord_db_pstop_fill,
                       NULL);
}

px_status_t coord_db_sched_pstops(coord_t *c, coord_arena_t *a, coord_db_pstop_t **out,
                                  size_t *n) {
  return coord_db_pstops_where(c, a, COORD_PSTOP_COLUMNS " ORDER BY p.asked_unix_ms, p.job_id",
                               NULL, out, n);
}

px_status_t coord_db_sched_pstop_get(coord_t *c, coord_arena_t *a, const char *job_id,
                                     coord_db_pstop_t *out, int *found) {
  memset(out, 0, sizeof *out);
  coord_db_pstop_t *all = NULL;
  size_t n = 0;
  PX_CHECK(coord_db_pstops_where(c, a, COORD_PSTOP_COLUMNS " WHERE p.job_id = ?1", job_id, &all,
                                 &n));
  *found = n > 0;
  if (n) *out = all[0];
  return PX_OK;
}

px_status_t coord_db_sched_pstop_stopped(coord_t *c, const char *job_id, int iteration) {
  return px_store_run_args(c->db,
                           "UPDATE preempt_stops SET stopped = ?2, stop_iteration = ?3"
                           " WHERE job_id = ?1",
                           PX_STORE_ARGS(PX_ARG_TEXT(job_id), PX_ARG_INT(COORD_PSTOP_STOPPED),
                                         PX_ARG_INT(iteration)));
}

px_status_t coord_db_sched_pstop_drop(coord_t *c, const char *job_id) {
  return coord_db_run_key(c, "DELETE FROM preempt_stops WHERE job_id = ?1", job_id);
}

px_status_t coord_db_sched_stop_kind(coord_t *c, const char *job_id, int *kind) {
  int64_t v[2] = {0, 0};
  PX_CHECK(px_store_row(c->db,
                        "SELECT j.stop_requested_unix_ms > 0, EXISTS (SELECT 1 FROM"
                        " preempt_stops p WHERE p.job_id = j.job_id AND p.stopped = ?2)"
                        " FROM jobs j WHERE j.job_id = ?1",
                        PX_STORE_ARGS(PX_ARG_TEXT(job_id), PX_ARG_INT(COORD_PSTOP_ASKED)),
                        PX_STORE_COLS(PX_COL_INT(&v[0]), PX_COL_INT(&v[1])), NULL));
  *kind = v[0] ? COORD_STOP_TIME_LIMIT : v[1] ? COORD_STOP_PREEMPTED : COORD_STOP_NONE;
  return PX_OK;
}

/* ---- submissions, notifications, time limits ---------------------------------- */

px_status_t coord_db_sched_job_new(coord_t *c, const char *job_id, const char *owner,
                                   const char *name, int nodes, int per_node, int priority,
                                   int64_t time_limit_ms, const char *notify_url,
                                   unsigned notify_mask, int64_t now) {
  PX_CHECK(px_store_run_args(c->db,
                             "UPDATE jobs SET priority = ?2, time_limit_ms = ?3, notify_url = ?4,"
                             " notify_mask = ?5 WHERE job_id = ?1",
                             PX_STORE_ARGS(PX_ARG_TEXT(job_id), PX_ARG_INT(priority),
                                           PX_ARG_INT(time_limit_ms), PX_ARG_TEXT(notify_url),
                                           PX_ARG_INT(notify_mask))));
  return px_store_run_args(c->db,
                           "INSERT INTO acct (id, job_id, owner, name, num_nodes, devices,"
                           " submit_unix_ms, state)"
                           " SELECT id, job_id, ?2, ?3, ?4, ?5, ?6, ?7 FROM jobs WHERE job_id = ?1",
                           PX_STORE_ARGS(PX_ARG_TEXT(job_id), PX_ARG_TEXT(owner), PX_ARG_TEXT(name),
                                         PX_ARG_INT(nodes), PX_ARG_INT((int64_t)nodes * per_node),
                                         PX_ARG_INT(now), PX_ARG_INT(JS_PENDING)));
}

px_status_t coord_db_sched_unfinished_jobs(coord_t *c, const char *owner, int64_t *n) {
  *n = 0;
  return px_store_row(c->db,
                      "SELECT count(*) FROM jobs WHERE owner = ?1 AND state IN (?2, ?3, ?4)",
                      PX_STORE_ARGS(PX_ARG_TEXT(owner), PX_ARG_INT(JS_PENDING),
                                    PX_ARG_INT(JS_SCHEDULED), PX_ARG_INT(JS_RUNNING)),
                      PX_STORE_COLS(PX_COL_INT(n)), NULL);
}

px_status_t coord_db_sched_notify_due(coord_t *c, const char *job_id, coord_sched_notify_t *out) {
  memset(out, 0, sizeof *out);
  int64_t mask = 0, notified = 0;
  int found = 0;
  PX_CHECK(px_store_row(c->db,
                        "SELECT state, notify_url, notify_mask, notified_state FROM jobs"
                        " WHERE job_id = ?1",
                        PX_STORE_ARGS(PX_ARG_TEXT(job_id)),
                        PX_STORE_COLS(PX_COL_I32(&out->state), PX_COL_TEXT(out->url, sizeof out->url),
                                      PX_COL_INT(&mask), PX_COL_INT(&notified)),
                        &found));
  out->mask = (unsigned)mask;
  out->due = found && notified != out->state;
  return PX_OK;
}

px_status_t coord_db_sched_notify_done(coord_t *c, const char *job_id, int state) {
  return px_store_run_args(c->db, "UPDATE jobs SET notified_state = ?2 WHERE job_id = ?1",
                           PX_STORE_ARGS(PX_ARG_TEXT(job_id), PX_ARG_INT(state)));
}

static px_status_t coord_db_overdue_fill(coord_arena_t *a, px_store_stmt_t *st, void *obj,
                                         void *arg) {
  (void)arg;
  coord_sched_overdue_t *o = obj;
  if (!(o->job_id = coord_strdup(a, px_store_column_text(st, 0))))
    return px_set_error(PX_ERR_NOMEM, "time limits: out of memory");
  o->state = (int)px_store_column_int64(st, 1);
  o->time_limit_ms = px_store_column_int64(st, 2);
  o->stop_requested_ms = px_store_column_int64(st, 3);
  return PX_OK;
}

px_status_t coord_db_sched_overdue(coord_t *c, coord_arena_t *a, int64_t now,
                                   coord_sched_overdue_t **out, size_t *n) {
  return coord_db_rows(c, a,
                       "SELECT job_id, state, time_limit_ms, stop_requested_unix_ms FROM jobs"
                       " WHERE state IN (?1, ?2) AND time_limit_ms > 0"
                       " AND scheduled_unix_ms + time_limit_ms <= ?3 ORDER BY id",
                       PX_STORE_ARGS(PX_ARG_INT(JS_SCHEDULED), PX_ARG_INT(JS_RUNNING),
                                     PX_ARG_INT(now)),
                       sizeof **out, out, n, coord_db_overdue_fill, NULL);
}

px_status_t coord_db_sched_request_stop(coord_t *c, const char *job_id, int64_t now) {
  return px_store_run_args(c->db,
                           "UPDATE jobs SET stop_requested_unix_ms = ?2 WHERE job_id = ?1"
                           " AND stop_requested_unix_ms = 0",
                           PX_STORE_ARGS(PX_ARG_TEXT(job_id), PX_ARG_INT(now)));
}

/* ---- preemption --------------------------------------------------------------- */

static px_status_t coord_db_victim_fill(coord_arena_t *a, px_store_stmt_t *st, void *obj,
                                        void *arg) {
  (void)arg;
  coord_sched_victim_t *v = obj;
  /* only jobs that checkpoint: the others would lose their work */
  size_t len = 0;
  const void *blob = px_store_column_blob(st, 3, &len);
  Prunex__V1__JobSpec *spec = (Prunex__V1__JobSpec *)protobuf_c_message_unpack(
      &prunex__v1__job_spec__descriptor, &a->pb, len, blob);
  if (!spec || !spec->recovery || spec->recovery->checkpoint_every <= 0) return 1;
  /* comm.overlap exchanges across rounds: a stop where no checkpoint was
   * planned would change its arithmetic, so its attempt is cancelled */
  v->graceful = !(spec->comm && spec->comm->overlap);
  if (!(v->job_id = coord_strdup(a, px_store_column_text(st, 0)))) return PX_ERR_NOMEM;
  v->state = (int)px_store_column_int64(st, 1);
  v->priority = (int)px_store_column_int64(st, 2);
  v->fitting_nodes = (int)px_store_column_int64(st, 4);
  return PX_OK;
}

px_status_t coord_db_sched_preemptible(coord_t *c, coord_arena_t *a, int below, int per_node,
                                       coord_sched_victim_t **out, size_t *n) {
  return coord_db_rows(c, a,
                       "SELECT j.job_id, j.state, j.priority, j.spec, (SELECT count(*) FROM"
                       " job_nodes jn WHERE jn.job_id = j.job_id AND (SELECT count(*) FROM"
                       " node_devices d WHERE d.node_id = jn.node_id) >= ?4) FROM jobs j"
                       " WHERE j.state IN (?1, ?2) AND j.priority < ?3"
                       " ORDER BY j.priority, j.scheduled_unix_ms DESC, j.id DESC",
                       PX_STORE_ARGS(PX_ARG_INT(JS_SCHEDULED), PX_ARG_INT(JS_RUNNING),
                                     PX_ARG_INT(below), PX_ARG_INT(per_node)),
                       sizeof **out, out, n, coord_db_victim_fill, NULL);
}

/* ---- accounting ----------------------------------------------------------------- */

/* The filters and the running-attempt terms of both accounting queries:
 * ?1 user, ?2 since, ?3 state, ?4 ?5 the active states, ?6 now. */
#define COORD_ACCT_NODE_SECONDS                                                   \
  "a.node_seconds + CASE WHEN j.state IN (?4, ?5) AND j.scheduled_unix_ms > 0"  \
  " THEN a.num_nodes * max(0, ?6 - j.scheduled_unix_ms) / 1000.0 ELSE 0 END"
#define COORD_ACCT_WHERE                                                          \
  " FROM acct a LEFT JOIN jobs j ON j.id = a.id"                                  \
  " WHERE (?1 = '' OR a.owner = ?1) AND a.submit_unix_ms >= ?2"                   \
  " AND (?3 = 0 OR a.state = ?3)"

static px_status_t coord_db_acct_bind(px_store_stmt_t *st, const char *user, int64_t since,
                                      int state, int64_t now) {
  PX_CHECK(px_store_bind_args(st, PX_STORE_ARGS(PX_ARG_TEXT(user), PX_ARG_INT(since),
                                                PX_ARG_INT(state), PX_ARG_INT(JS_SCHEDULED),
                                                PX_ARG_INT(JS_RUNNING))));
  return px_store_bind_int64(st, 6, now);
}

px_status_t coord_db_sched_acct(coord_t *c, coord_arena_t *a, const char *user, int64_t since,
                                int state, int limit, Prunex__V1__GetAccountingResponse *out) {
  if (limit <= 0) limit = COORD_ACCT_DEFAULT;
  if (limit > COORD_ACCT_MAX) limit = COORD_ACCT_MAX;
  int64_t now = coord_now_ms();
  px_store_stmt_t *st;
  px_status_t rc;
  size_t cap = 0;
  /* a running attempt counts up to now, so that totals are current */
  PX_CHECK(px_store_stmt(c->db,
                         "SELECT a.job_id, a.owner, a.name, a.num_nodes, a.devices,"
                         " a.submit_unix_ms, a.start_unix_ms, a.end_unix_ms, "
                         COORD_ACCT_NODE_SECONDS ", a.state, a.reason, a.attempts"
                         COORD_ACCT_WHERE " ORDER BY a.id DESC LIMIT ?7",
                         &st));
  PX_CHECK(coord_db_acct_bind(st, user, since, state, now));
  PX_CHECK(px_store_bind_int64(st, 7, (int64_t)limit + 1));
  while ((rc = px_store_step(st)) == 1) {
    if (out->n_records == (size_t)limit) {
      out->truncated = 1;
      px_store_reset(st);
      break;
    }
    Prunex__V1__AcctRecord **slot =
        coord_push(a, (void **)&out->records, &out->n_records, &cap, sizeof *slot);
    Prunex__V1__AcctRecord *r = slot ? coord_alloc(a, sizeof *r) : NULL;
    if (!r) goto nomem;
    prunex__v1__acct_record__init(r);
    *slot = r;
    if (!(r->job_id = coord_strdup(a, px_store_column_text(st, 0))) ||
        !(r->owner = coord_strdup(a, px_store_column_text(st, 1))) ||
        !(r->name = coord_strdup(a, px_store_column_text(st, 2))) ||
        !(r->reason = coord_strdup(a, px_store_column_text(st, 10))))
      goto nomem;
    r->num_nodes = (int32_t)px_store_column_int64(st, 3);
    r->devices = (int32_t)px_store_column_int64(st, 4);
    r->submit_unix_ms = px_store_column_int64(st, 5);
    r->start_unix_ms = px_store_column_int64(st, 6);
    r->end_unix_ms = px_store_column_int64(st, 7);
    r->node_seconds = px_store_column_double(st, 8);
    r->state = (Prunex__V1__JobState)px_store_column_int64(st, 9);
    r->attempts = (int32_t)px_store_column_int64(st, 11);
  }
  if (rc < 0) return rc;
  /* totals over every matching record, not only the page */
  cap = 0;
  PX_CHECK(px_store_stmt(c->db,
                         "SELECT a.owner, count(*), sum(" COORD_ACCT_NODE_SECONDS ")"
                         COORD_ACCT_WHERE " GROUP BY a.owner ORDER BY a.owner",
                         &st));
  PX_CHECK(coord_db_acct_bind(st, user, since, state, now));
  while ((rc = px_store_step(st)) == 1) {
    Prunex__V1__AcctUserTotal **slot =
        coord_push(a, (void **)&out->totals, &out->n_totals, &cap, sizeof *slot);
    Prunex__V1__AcctUserTotal *t = slot ? coord_alloc(a, sizeof *t) : NULL;
    if (!t) goto nomem;
    prunex__v1__acct_user_total__init(t);
    *slot = t;
    if (!(t->user = coord_strdup(a, px_store_column_text(st, 0)))) goto nomem;
    t->jobs = px_store_column_int64(st, 1);
    t->node_seconds = px_store_column_double(st, 2);
  }
  return rc < 0 ? rc : PX_OK;
nomem:
  px_store_reset(st);
  return px_set_error(PX_ERR_NOMEM, "accounting: out of memory");
}

/* ---- usage and the accounting row on state changes ---------------------------- */

px_status_t coord_db_sched_usage_get(coord_t *c, const char *user, int *found, double *usage,
                                     int64_t *updated_ms) {
  return px_store_row(c->db, "SELECT usage, updated_unix_ms FROM sched_usage WHERE user = ?1",
                      PX_STORE_ARGS(PX_ARG_TEXT(user)),
                      PX_STORE_COLS(PX_COL_REAL(usage), PX_COL_INT(updated_ms)), found);
}

px_status_t coord_db_sched_usage_put(coord_t *c, const char *user, double usage, int64_t now) {
  return px_store_run_args(c->db,
                           "INSERT OR REPLACE INTO sched_usage (user, usage, updated_unix_ms)"
                           " VALUES (?1, ?2, ?3)",
                           PX_STORE_ARGS(PX_ARG_TEXT(user), PX_ARG_REAL(usage), PX_ARG_INT(now)));
}

px_status_t coord_db_sched_attempt(coord_t *c, const char *job_id, int64_t now, int *found,
                                   char *owner, size_t cap, double *node_seconds) {
  int64_t nodes = 0, since = 0;
  *node_seconds = 0;
  PX_CHECK(px_store_row(c->db,
                        "SELECT owner, num_nodes, scheduled_unix_ms FROM jobs WHERE job_id = ?1",
                        PX_STORE_ARGS(PX_ARG_TEXT(job_id)),
                        PX_STORE_COLS(PX_COL_TEXT(owner, cap), PX_COL_INT(&nodes),
                                      PX_COL_INT(&since)),
                        found));
  if (!*found || since <= 0 || now <= since) return PX_OK;
  /* an elastic attempt's epochs: from each one's time, its member nodes */
  coord_arena_t a;
  coord_arena_init(&a);
  int64_t *at = NULL, *count = NULL;
  size_t n = 0;
  px_status_t st = coord_db_list(
      c, &a,
      "SELECT e.time_unix_ms, length(e.node_ids) - length(replace(e.node_ids, char(10), '')) + 1"
      " FROM job_epochs e JOIN jobs j ON j.job_id = e.job_id AND j.attempt = e.attempt"
      " WHERE e.job_id = ?1 ORDER BY e.epoch",
      PX_STORE_ARGS(PX_ARG_TEXT(job_id)),
      COORD_LIST_COLS(COORD_LIST_INT(&at), COORD_LIST_INT(&count)), &n);
  int64_t t = since;
  double ns = 0;
  for (size_t i = 0; st == PX_OK && i < n; i++) {
    int64_t from = at[i] < since ? since : at[i] > now ? now : at[i];
    ns += (double)nodes * (double)(from - t);
    t = from;
    nodes = count[i];
  }
  coord_arena_free(&a);
  *node_seconds = (ns + (double)nodes * (double)(now - t)) / 1000.0;
  return st;
}

px_status_t coord_db_sched_acct_charge(coord_t *c, const char *job_id, double node_seconds) {
  return px_store_run_args(c->db,
                           "UPDATE acct SET node_seconds = node_seconds + ?2 WHERE job_id = ?1",
                           PX_STORE_ARGS(PX_ARG_TEXT(job_id), PX_ARG_REAL(node_seconds)));
}

px_status_t coord_db_sched_acct_state(coord_t *c, const char *job_id, int to, int64_t now,
                                      const char *reason) {
  char brief[256]; /* the record keeps the reason's start: rows stay compact */
  px_utf8_clean(reason, brief, sizeof brief);
  if (strlen(brief) >= sizeof brief - 4 && strlen(reason) > strlen(brief)) {
    /* cut at a word, never in one: "... the start of the reason..." */
    char *sp = strrchr(brief, ' ');
    size_t at = sp && sp > brief + 128 ? (size_t)(sp - brief) : sizeof brief - 4;
    while (at > 0 && ((unsigned char)brief[at] & 0xC0) == 0x80) at--; /* not in a character */
    snprintf(brief + at, sizeof brief - at, "...");
  }
  return px_store_run_args(c->db,
                           "UPDATE acct SET state = ?2,"
                           " start_unix_ms = CASE WHEN ?2 = ?4 AND start_unix_ms = 0 THEN ?3"
                           "   ELSE start_unix_ms END,"
                           " attempts = attempts + (?2 = ?4),"
                           " end_unix_ms = CASE WHEN ?2 IN (?5, ?6, ?7, ?9) THEN ?3"
                           "   ELSE end_unix_ms END,"
                           " reason = CASE WHEN ?2 IN (?5, ?6, ?7, ?9) THEN ?8 ELSE reason END"
                           " WHERE job_id = ?1",
                           PX_STORE_ARGS(PX_ARG_TEXT(job_id), PX_ARG_INT(to), PX_ARG_INT(now),
                                         PX_ARG_INT(JS_SCHEDULED), PX_ARG_INT(JS_SUCCEEDED),
                                         PX_ARG_INT(JS_FAILED), PX_ARG_INT(JS_CANCELLED),
                                         PX_ARG_TEXT(brief), PX_ARG_INT(JS_TIMEOUT)));
}

px_status_t coord_db_sched_stop_clear(coord_t *c, const char *job_id) {
  return coord_db_run_key(c, "UPDATE jobs SET stop_requested_unix_ms = 0 WHERE job_id = ?1",
                          job_id);
}

px_status_t coord_db_sched_set_reason(coord_t *c, const char *job_id, const char *reason) {
  return px_store_run_args(c->db,
                           "UPDATE jobs SET reason = ?2 WHERE job_id = ?1 AND state = ?3 AND"
                           " reason != ?2",
                           PX_STORE_ARGS(PX_ARG_TEXT(job_id), PX_ARG_TEXT(reason),
                                         PX_ARG_INT(JS_PENDING)));
}

/* ---- the snapshot's rows ---------------------------------------------------------- */

static px_status_t coord_db_snode_fill(coord_arena_t *a, px_store_stmt_t *st, void *obj,
                                       void *arg) {
  (void)arg;
  coord_db_sched_node_t *o = obj;
  if (!(o->node_id = coord_strdup(a, px_store_column_text(st, 0))))
    return px_set_error(PX_ERR_NOMEM, "scheduler: out of memory for the snapshot");
  o->state = (int)px_store_column_int64(st, 1);
  o->devices = (int)px_store_column_int64(st, 2);
  o->since_ms = px_store_column_int64(st, 3);
  o->limit_ms = px_store_column_int64(st, 4);
  return PX_OK;
}

px_status_t coord_db_sched_nodes(coord_t *c, coord_arena_t *a, coord_db_sched_node_t **out,
                                 size_t *n) {
  return coord_db_rows(c, a,
                       "SELECT n.node_id, n.state,"
                       " (SELECT count(*) FROM node_devices d WHERE d.node_id = n.node_id),"
                       " coalesce(j.scheduled_unix_ms, 0), coalesce(j.time_limit_ms, 0)"
                       " FROM nodes n LEFT JOIN jobs j ON j.job_id = n.job_id"
                       " AND j.state IN (?3, ?4)"
                       " WHERE n.state IN (?1, ?2) ORDER BY n.id",
                       PX_STORE_ARGS(PX_ARG_INT(NS_READY), PX_ARG_INT(NS_BUSY),
                                     PX_ARG_INT(JS_SCHEDULED), PX_ARG_INT(JS_RUNNING)),
                       sizeof **out, out, n, coord_db_snode_fill, NULL);
}

static px_status_t coord_db_use_fill(coord_arena_t *a, px_store_stmt_t *st, void *obj,
                                     void *arg) {
  (void)arg;
  coord_db_sched_use_t *o = obj;
  if (!(o->user = coord_strdup(a, px_store_column_text(st, 0))))
    return px_set_error(PX_ERR_NOMEM, "scheduler: out of memory for the snapshot");
  o->value = px_store_column_double(st, 1);
  o->ms = px_store_column_int64(st, 2);
  return PX_OK;
}

/* The rows of sql (no parameters but ?1, ?2 the active states when
 * active): text, integer, then a number, as coord_db_sched_use_t. */
static px_status_t coord_db_sched_uses(coord_t *c, coord_arena_t *a, const char *sql, int active,
                                       coord_db_sched_use_t **out, size_t *n) {
  const px_store_arg_t states[] = {PX_ARG_INT(JS_SCHEDULED), PX_ARG_INT(JS_RUNNING)};
  return coord_db_rows(c, a, sql, states, active ? 2 : 0, sizeof **out, out, n,
                       coord_db_use_fill, NULL);
}

px_status_t coord_db_sched_usages(coord_t *c, coord_arena_t *a, coord_db_sched_use_t **out,
                                  size_t *n) {
  return coord_db_sched_uses(c, a, "SELECT user, usage, updated_unix_ms FROM sched_usage", 0, out,
                             n);
}

px_status_t coord_db_sched_running(coord_t *c, coord_arena_t *a, coord_db_sched_use_t **out,
                                   size_t *n) {
  return coord_db_sched_uses(c, a,
                             /* the nodes it holds: fewer once an elastic job
                              * dropped some, more once it grew past num_nodes */
                             "SELECT owner, coalesce(nullif((SELECT count(*) FROM job_nodes n"
                             " WHERE n.job_id = jobs.job_id), 0), num_nodes), scheduled_unix_ms"
                             " FROM jobs WHERE state IN (?1, ?2)",
                             1, out, n);
}

/* ---- the pending jobs (sched_queue.c) ------------------------------------------ */

#define COORD_QUEUE_COLUMNS                                                              \
  "id, job_id, owner, num_nodes, workers_per_node, priority, created_unix_ms,"           \
  " time_limit_ms, prefer_nodes, reason, held_by, held_admin, depends"

static char *coord_db_dup(const char *s) {
  size_t n = strlen(s);
  char *d = px_malloc(n + 1, "coordd.queue_text");
  if (d) memcpy(d, s, n + 1);
  return d;
}

/* Fills e from a row of COORD_QUEUE_COLUMNS (its texts px_malloc'd). */
static px_status_t coord_db_queue_read(px_store_stmt_t *st, coord_queue_entry_t *e) {
  memset(e, 0, sizeof *e);
  e->rowid = px_store_column_int64(st, 0);
  snprintf(e->job_id, sizeof e->job_id, "%s", px_store_column_text(st, 1));
  snprintf(e->owner, sizeof e->owner, "%s", px_store_column_text(st, 2));
  e->nodes = (int)px_store_column_int64(st, 3);
  e->per_node = (int)px_store_column_int64(st, 4);
  e->priority = (int)px_store_column_int64(st, 5);
  e->submit_ms = px_store_column_int64(st, 6);
  e->time_limit_ms = px_store_column_int64(st, 7);
  e->prefer = coord_db_dup(px_store_column_text(st, 8));
  e->reason = coord_db_dup(px_store_column_text(st, 9));
  snprintf(e->held_by, sizeof e->held_by, "%s", px_store_column_text(st, 10));
  e->held_admin = px_store_column_int64(st, 11) != 0;
  e->depends = coord_db_dup(px_store_column_text(st, 12));
  if (e->prefer && e->reason && e->depends) return PX_OK;
  px_free(e->prefer);
  px_free(e->reason);
  px_free(e->depends);
  return PX_ERR_NOMEM;
}

px_status_t coord_db_sched_pending(coord_t *c, coord_db_queue_fn fn, void *ctx) {
  px_store_stmt_t *st;
  px_status_t rc;
  PX_CHECK(px_store_stmt(c->db,
                         "SELECT " COORD_QUEUE_COLUMNS " FROM jobs WHERE state = ?1 ORDER BY id",
                         &st));
  PX_CHECK(px_store_bind_int64(st, 1, JS_PENDING));
  while ((rc = px_store_step(st)) == 1) {
    coord_queue_entry_t e;
    if ((rc = coord_db_queue_read(st, &e)) != PX_OK || (rc = fn(ctx, &e)) != PX_OK) {
      px_store_reset(st);
      return rc;
    }
  }
  return rc < 0 ? rc : PX_OK;
}

px_status_t coord_db_sched_queue_entry(coord_t *c, const char *job_id, coord_queue_entry_t *e,
                                       int *found) {
  px_store_stmt_t *st;
  *found = 0;
  PX_CHECK(px_store_stmt(c->db, "SELECT " COORD_QUEUE_COLUMNS " FROM jobs WHERE job_id = ?1",
                         &st));
  PX_CHECK(px_store_bind_text(st, 1, job_id));
  px_status_t rc = px_store_step(st);
  if (rc <= 0) return rc;
  rc = coord_db_queue_read(st, e);
  px_store_reset(st);
  *found = rc == PX_OK;
  return rc;
}

void coord_db_sched_on_rollback(coord_t *c, void (*fn)(void *), void *arg) {
  sqlite3_rollback_hook(px_store_sqlite(c->db), fn, arg);
}

/* ---- queue controls --------------------------------------------------------------- */

px_status_t coord_db_sched_dep_state(coord_t *c, const char *job_id, int *found, int *state) {
  int64_t v = 0;
  PX_CHECK(px_store_row(c->db, "SELECT state FROM acct WHERE job_id = ?1",
                        PX_STORE_ARGS(PX_ARG_TEXT(job_id)), PX_STORE_COLS(PX_COL_INT(&v)),
                        found));
  *state = (int)v;
  return PX_OK;
}

px_status_t coord_db_sched_hold(coord_t *c, const char *job_id, const char *held_by, int admin) {
  return px_store_run_args(c->db, "UPDATE jobs SET held_by = ?2, held_admin = ?3 WHERE job_id = ?1",
                           PX_STORE_ARGS(PX_ARG_TEXT(job_id), PX_ARG_TEXT(held_by),
                                         PX_ARG_INT(admin ? 1 : 0)));
}

px_status_t coord_db_sched_controls(coord_t *c, const char *job_id, coord_db_controls_t *out) {
  memset(out, 0, sizeof *out);
  int found = 0;
  PX_CHECK(px_store_row(c->db,
                        "SELECT held_by, held_admin, priority, time_limit_ms FROM jobs"
                        " WHERE job_id = ?1",
                        PX_STORE_ARGS(PX_ARG_TEXT(job_id)),
                        PX_STORE_COLS(PX_COL_TEXT(out->held_by, sizeof out->held_by),
                                      PX_COL_INT(&out->held_admin), PX_COL_INT(&out->priority),
                                      PX_COL_INT(&out->time_limit_ms)),
                        &found));
  out->found = found;
  return PX_OK;
}

px_status_t coord_db_sched_update(coord_t *c, const char *job_id, int priority,
                                  int64_t time_limit_ms) {
  return px_store_run_args(c->db,
                           "UPDATE jobs SET priority = CASE WHEN ?2 > 0 THEN ?2 ELSE priority END,"
                           " time_limit_ms = CASE WHEN ?3 > 0 THEN ?3 ELSE time_limit_ms END"
                           " WHERE job_id = ?1",
                           PX_STORE_ARGS(PX_ARG_TEXT(job_id), PX_ARG_INT(priority),
                                         PX_ARG_INT(time_limit_ms)));
}

px_status_t coord_db_sched_set_depends(coord_t *c, const char *job_id, const char *depends) {
  return px_store_run_args(c->db, "UPDATE jobs SET depends = ?2 WHERE job_id = ?1",
                           PX_STORE_ARGS(PX_ARG_TEXT(job_id), PX_ARG_TEXT(depends)));
}
