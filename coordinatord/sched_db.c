/* The scheduler's and the accounting's SQL (issue 31), as named query
 * functions with job states bound as parameters: the snapshot the policy
 * decides over (sched.h), the reasons it writes, users' decayed usage, the
 * per-job accounting row (acct) kept past the job's retention, and the
 * accounting query behind `pxctl acct`. Nothing else in the coordinator
 * writes these tables. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "coord.h"
#include "prunex/check.h"

/* ---- usage and accounting on state changes ---------------------------------- */

/* Adds node_seconds to the user's decayed usage, as of now. */
static px_status_t coord_sched_charge(coord_t *c, const char *user, double node_seconds,
                                      int64_t now) {
  px_store_stmt_t *st;
  double usage = 0;
  int64_t then = now;
  PX_CHECK(px_store_stmt(c->db, "SELECT usage, updated_unix_ms FROM sched_usage WHERE user = ?1",
                         &st));
  PX_CHECK(px_store_bind_text(st, 1, user));
  px_status_t rc = px_store_step(st);
  if (rc < 0) return rc;
  if (rc == 1) {
    usage = px_store_column_double(st, 0);
    then = px_store_column_int64(st, 1);
    px_store_reset(st);
  }
  usage = coord_sched_decay(usage, then, now, c->cfg.sched.half_life_s) + node_seconds;
  PX_CHECK(px_store_stmt(c->db,
                         "INSERT OR REPLACE INTO sched_usage (user, usage, updated_unix_ms)"
                         " VALUES (?1, ?2, ?3)",
                         &st));
  PX_CHECK(px_store_bind_text(st, 1, user));
  PX_CHECK(px_store_bind_double(st, 2, usage));
  PX_CHECK(px_store_bind_int64(st, 3, now));
  return px_store_run(st);
}

px_status_t coord_sched_job_new(coord_t *c, const char *job_id, const char *owner,
                                const char *name, int nodes, int per_node, int priority,
                                int64_t time_limit_ms, const char *notify_url,
                                unsigned notify_mask, int64_t now) {
  px_store_stmt_t *st;
  PX_CHECK(px_store_stmt(c->db,
                         "UPDATE jobs SET priority = ?2, time_limit_ms = ?3, notify_url = ?4,"
                         " notify_mask = ?5 WHERE job_id = ?1",
                         &st));
  PX_CHECK(px_store_bind_text(st, 1, job_id));
  PX_CHECK(px_store_bind_int64(st, 2, priority));
  PX_CHECK(px_store_bind_int64(st, 3, time_limit_ms));
  PX_CHECK(px_store_bind_text(st, 4, notify_url));
  PX_CHECK(px_store_bind_int64(st, 5, notify_mask));
  PX_CHECK(px_store_run(st));
  PX_CHECK(px_store_stmt(c->db,
                         "INSERT INTO acct (id, job_id, owner, name, num_nodes, devices,"
                         " submit_unix_ms, state)"
                         " SELECT id, job_id, ?2, ?3, ?4, ?5, ?6, ?7 FROM jobs WHERE job_id = ?1",
                         &st));
  PX_CHECK(px_store_bind_text(st, 1, job_id));
  PX_CHECK(px_store_bind_text(st, 2, owner));
  PX_CHECK(px_store_bind_text(st, 3, name));
  PX_CHECK(px_store_bind_int64(st, 4, nodes));
  PX_CHECK(px_store_bind_int64(st, 5, (int64_t)nodes * per_node));
  PX_CHECK(px_store_bind_int64(st, 6, now));
  PX_CHECK(px_store_bind_int64(st, 7, JS_PENDING));
  return px_store_run(st);
}

px_status_t coord_sched_unfinished_jobs(coord_t *c, const char *owner, int64_t *n) {
  px_store_stmt_t *st;
  PX_CHECK(px_store_stmt(c->db,
                         "SELECT count(*) FROM jobs WHERE owner = ?1 AND state IN (?2, ?3, ?4)",
                         &st));
  PX_CHECK(px_store_bind_text(st, 1, owner));
  PX_CHECK(px_store_bind_int64(st, 2, JS_PENDING));
  PX_CHECK(px_store_bind_int64(st, 3, JS_SCHEDULED));
  PX_CHECK(px_store_bind_int64(st, 4, JS_RUNNING));
  px_status_t rc = px_store_step(st);
  if (rc < 0) return rc;
  *n = px_store_column_int64(st, 0);
  px_store_reset(st);
  return PX_OK;
}

px_status_t coord_sched_state_changed(coord_t *c, const char *job_id, int from, int to,
                                      const char *reason, int64_t now) {
  px_store_stmt_t *st;
  PX_CHECK(coord_queue_job_changed(c, job_id, to)); /* the pending jobs in memory */
  if (coord_job_active(from) && !coord_job_active(to)) {
    /* an attempt ended: its node-seconds go to the user and the record */
    PX_CHECK(px_store_stmt(c->db,
                           "SELECT owner, num_nodes, scheduled_unix_ms FROM jobs WHERE job_id = ?1",
                           &st));
    PX_CHECK(px_store_bind_text(st, 1, job_id));
    px_status_t rc = px_store_step(st);
    if (rc < 0) return rc;
    if (rc == 1) {
      char owner[COORD_NAME_MAX + 32];
      snprintf(owner, sizeof owner, "%s", px_store_column_text(st, 0));
      int64_t nodes = px_store_column_int64(st, 1), since = px_store_column_int64(st, 2);
      px_store_reset(st);
      double ns = since > 0 && now > since ? (double)nodes * (double)(now - since) / 1000.0 : 0;
      PX_CHECK(coord_sched_charge(c, owner, ns, now));
      PX_CHECK(px_store_stmt(c->db,
                             "UPDATE acct SET node_seconds = node_seconds + ?2 WHERE job_id = ?1",
                             &st));
      PX_CHECK(px_store_bind_text(st, 1, job_id));
      PX_CHECK(px_store_bind_double(st, 2, ns));
      PX_CHECK(px_store_run(st));
    }
  }
  PX_CHECK(px_store_stmt(c->db,
                         "UPDATE acct SET state = ?2,"
                         " start_unix_ms = CASE WHEN ?2 = ?4 AND start_unix_ms = 0 THEN ?3"
                         "   ELSE start_unix_ms END,"
                         " attempts = attempts + (?2 = ?4),"
                         " end_unix_ms = CASE WHEN ?2 IN (?5, ?6, ?7, ?9) THEN ?3"
                         "   ELSE end_unix_ms END,"
                         " reason = CASE WHEN ?2 IN (?5, ?6, ?7, ?9) THEN ?8 ELSE reason END"
                         " WHERE job_id = ?1",
                         &st));
  PX_CHECK(px_store_bind_text(st, 1, job_id));
  PX_CHECK(px_store_bind_int64(st, 2, to));
  PX_CHECK(px_store_bind_int64(st, 3, now));
  PX_CHECK(px_store_bind_int64(st, 4, JS_SCHEDULED));
  PX_CHECK(px_store_bind_int64(st, 5, JS_SUCCEEDED));
  PX_CHECK(px_store_bind_int64(st, 6, JS_FAILED));
  PX_CHECK(px_store_bind_int64(st, 7, JS_CANCELLED));
  PX_CHECK(px_store_bind_int64(st, 9, JS_TIMEOUT));
  char brief[256]; /* the record keeps the reason's start: rows stay compact */
  px_utf8_clean(reason, brief, sizeof brief);
  PX_CHECK(px_store_bind_text(st, 8, brief));
  PX_CHECK(px_store_run(st));
  if (to == JS_SCHEDULED) { /* a new attempt: its own time limit, no stop asked */
    PX_CHECK(px_store_stmt(c->db, "UPDATE jobs SET stop_requested_unix_ms = 0 WHERE job_id = ?1",
                           &st));
    PX_CHECK(px_store_bind_text(st, 1, job_id));
    PX_CHECK(px_store_run(st));
  }
  return PX_OK;
}

/* ---- notifications ---------------------------------------------------------------- */

px_status_t coord_sched_notify_due(coord_t *c, const char *job_id, coord_sched_notify_t *out) {
  memset(out, 0, sizeof *out);
  px_store_stmt_t *st;
  PX_CHECK(px_store_stmt(c->db,
                         "SELECT state, notify_url, notify_mask, notified_state FROM jobs"
                         " WHERE job_id = ?1",
                         &st));
  PX_CHECK(px_store_bind_text(st, 1, job_id));
  px_status_t rc = px_store_step(st);
  if (rc <= 0) return rc;
  out->state = (int)px_store_column_int64(st, 0);
  snprintf(out->url, sizeof out->url, "%s", px_store_column_text(st, 1));
  out->mask = (unsigned)px_store_column_int64(st, 2);
  out->due = px_store_column_int64(st, 3) != out->state;
  px_store_reset(st);
  return PX_OK;
}

px_status_t coord_sched_notify_done(coord_t *c, const char *job_id, int state) {
  px_store_stmt_t *st;
  PX_CHECK(px_store_stmt(c->db, "UPDATE jobs SET notified_state = ?2 WHERE job_id = ?1", &st));
  PX_CHECK(px_store_bind_text(st, 1, job_id));
  PX_CHECK(px_store_bind_int64(st, 2, state));
  return px_store_run(st);
}

/* ---- time limits ---------------------------------------------------------------- */

px_status_t coord_sched_overdue(coord_t *c, coord_arena_t *a, int64_t now,
                                coord_sched_overdue_t **out, size_t *n) {
  px_store_stmt_t *st;
  size_t cap = 0;
  *out = NULL;
  *n = 0;
  PX_CHECK(px_store_stmt(c->db,
                         "SELECT job_id, state, time_limit_ms, stop_requested_unix_ms FROM jobs"
                         " WHERE state IN (?1, ?2) AND time_limit_ms > 0"
                         " AND scheduled_unix_ms + time_limit_ms <= ?3 ORDER BY id",
                         &st));
  PX_CHECK(px_store_bind_int64(st, 1, JS_SCHEDULED));
  PX_CHECK(px_store_bind_int64(st, 2, JS_RUNNING));
  PX_CHECK(px_store_bind_int64(st, 3, now));
  px_status_t rc;
  while ((rc = px_store_step(st)) == 1) {
    coord_sched_overdue_t *o = coord_push(a, (void **)out, n, &cap, sizeof *o);
    if (!o || !(o->job_id = coord_strdup(a, px_store_column_text(st, 0)))) {
      px_store_reset(st);
      return px_set_error(PX_ERR_NOMEM, "time limits: out of memory");
    }
    o->state = (int)px_store_column_int64(st, 1);
    o->time_limit_ms = px_store_column_int64(st, 2);
    o->stop_requested_ms = px_store_column_int64(st, 3);
  }
  return rc < 0 ? rc : PX_OK;
}

px_status_t coord_sched_request_stop(coord_t *c, const char *job_id, int64_t now) {
  px_store_stmt_t *st;
  PX_CHECK(px_store_stmt(c->db,
                         "UPDATE jobs SET stop_requested_unix_ms = ?2 WHERE job_id = ?1"
                         " AND stop_requested_unix_ms = 0",
                         &st));
  PX_CHECK(px_store_bind_text(st, 1, job_id));
  PX_CHECK(px_store_bind_int64(st, 2, now));
  return px_store_run(st);
}

px_status_t coord_sched_stop_requested(coord_t *c, const char *job_id, int *yes) {
  int64_t ms = 0;
  int found;
  PX_CHECK(px_store_row_int64(c->db, "SELECT stop_requested_unix_ms FROM jobs WHERE job_id = ?1",
                              job_id, &ms, 1, &found));
  *yes = ms > 0;
  return PX_OK;
}

px_status_t coord_sched_set_reason(coord_t *c, const char *job_id, const char *reason) {
  px_store_stmt_t *st;
  PX_CHECK(px_store_stmt(c->db,
                         "UPDATE jobs SET reason = ?2 WHERE job_id = ?1 AND state = ?3 AND"
                         " reason != ?2",
                         &st));
  PX_CHECK(px_store_bind_text(st, 1, job_id));
  PX_CHECK(px_store_bind_text(st, 2, reason));
  PX_CHECK(px_store_bind_int64(st, 3, JS_PENDING));
  PX_CHECK(px_store_run(st));
  coord_queue_set_reason(c, job_id, reason);
  return PX_OK;
}

/* ---- the snapshot ---------------------------------------------------------------- */

/* The index of user name in v's users, added when new; -1 on NOMEM. */
static int coord_sched_user_index(coord_arena_t *a, coord_sched_view_t *v, size_t *cap,
                                  const char *name) {
  for (size_t i = 0; i < v->s.nusers; i++)
    if (!strcmp(v->s.users[i].name, name)) return (int)i;
  coord_sched_user_t *u = coord_push(a, (void **)&v->s.users, &v->s.nusers, cap, sizeof *u);
  if (!u || !(u->name = coord_strdup(a, name))) return -1;
  return (int)(v->s.nusers - 1);
}

px_status_t coord_sched_view(coord_t *c, coord_arena_t *a, coord_sched_view_t *v) {
  memset(v, 0, sizeof *v);
  int64_t now = coord_now_ms();
  v->s.now_ms = now;
  size_t ucap = 0, ncap = 0;
  px_store_stmt_t *st;
  px_status_t rc;
  /* alive nodes: free now, or busy until their job's time limit */
  PX_CHECK(px_store_stmt(c->db,
                         "SELECT n.node_id, n.state,"
                         " (SELECT count(*) FROM node_devices d WHERE d.node_id = n.node_id),"
                         " coalesce(j.scheduled_unix_ms, 0), coalesce(j.time_limit_ms, 0)"
                         " FROM nodes n LEFT JOIN jobs j ON j.job_id = n.job_id"
                         " AND j.state IN (?3, ?4)"
                         " WHERE n.state IN (?1, ?2) ORDER BY n.id",
                         &st));
  PX_CHECK(px_store_bind_int64(st, 1, NS_READY));
  PX_CHECK(px_store_bind_int64(st, 2, NS_BUSY));
  PX_CHECK(px_store_bind_int64(st, 3, JS_SCHEDULED));
  PX_CHECK(px_store_bind_int64(st, 4, JS_RUNNING));
  while ((rc = px_store_step(st)) == 1) {
    if (coord_agent_is_gone(c, px_store_column_text(st, 0))) continue;
    coord_sched_node_t *n = coord_push(a, (void **)&v->s.nodes, &v->s.nnodes, &ncap, sizeof *n);
    if (!n) goto nomem;
    n->devices = (int)px_store_column_int64(st, 2);
    int64_t since = px_store_column_int64(st, 3), limit = px_store_column_int64(st, 4);
    if (px_store_column_int64(st, 1) == NS_READY) n->free_at_ms = 0;
    else n->free_at_ms = since > 0 && limit > 0 ? since + limit : COORD_SCHED_NEVER;
  }
  if (rc < 0) return rc;
  /* users' decayed usage, then their running jobs' node-seconds so far */
  PX_CHECK(px_store_stmt(c->db, "SELECT user, usage, updated_unix_ms FROM sched_usage", &st));
  while ((rc = px_store_step(st)) == 1) {
    int u = coord_sched_user_index(a, v, &ucap, px_store_column_text(st, 0));
    if (u < 0) goto nomem;
    v->s.users[u].usage = coord_sched_decay(px_store_column_double(st, 1),
                                            px_store_column_int64(st, 2), now,
                                            c->cfg.sched.half_life_s);
  }
  if (rc < 0) return rc;
  PX_CHECK(px_store_stmt(c->db,
                         "SELECT owner, num_nodes, scheduled_unix_ms FROM jobs"
                         " WHERE state IN (?1, ?2)",
                         &st));
  PX_CHECK(px_store_bind_int64(st, 1, JS_SCHEDULED));
  PX_CHECK(px_store_bind_int64(st, 2, JS_RUNNING));
  while ((rc = px_store_step(st)) == 1) {
    int u = coord_sched_user_index(a, v, &ucap, px_store_column_text(st, 0));
    if (u < 0) goto nomem;
    int64_t nodes = px_store_column_int64(st, 1), since = px_store_column_int64(st, 2);
    v->s.users[u].running_nodes += (int)nodes;
    if (since > 0 && now > since) v->s.users[u].usage += (double)nodes * (double)(now - since) / 1e3;
  }
  if (rc < 0) return rc;
  /* the configured users hold their shares even while idle */
  for (int i = 0; i < c->cfg.sched.nusers; i++)
    if (coord_sched_user_index(a, v, &ucap, c->cfg.sched.users[i].name) < 0) goto nomem;
  /* the pending jobs: from memory (sched_queue.c), copied into the arena
   * (placing a job changes the queue while the pass still reads the view) */
  const coord_queue_entry_t *q = NULL;
  size_t nq = 0;
  PX_CHECK(coord_queue_sync(c, &q, &nq));
  v->s.jobs = coord_alloc(a, (nq + 1) * sizeof *v->s.jobs);
  v->job_ids = coord_alloc(a, (nq + 1) * sizeof *v->job_ids);
  v->prefer = coord_alloc(a, (nq + 1) * sizeof *v->prefer);
  v->rowids = coord_alloc(a, (nq + 1) * sizeof *v->rowids);
  v->reasons = coord_alloc(a, (nq + 1) * sizeof *v->reasons);
  if (!v->s.jobs || !v->job_ids || !v->prefer || !v->rowids || !v->reasons) return PX_ERR_NOMEM;
  for (size_t i = 0; i < nq; i++) {
    const coord_queue_entry_t *e = &q[i];
    coord_sched_job_t *j = &v->s.jobs[i];
    int u = coord_sched_user_index(a, v, &ucap, e->owner);
    if (u < 0 || !(v->job_ids[i] = coord_strdup(a, e->job_id)) ||
        !(v->prefer[i] = coord_strdup(a, e->prefer)) ||
        !(v->reasons[i] = coord_strdup(a, e->reason)))
      return px_set_error(PX_ERR_NOMEM, "scheduler: out of memory for the snapshot");
    v->rowids[i] = e->rowid;
    j->user = u;
    j->nodes = e->nodes;
    j->per_node = e->per_node;
    j->priority = e->priority;
    j->submit_ms = e->submit_ms;
    j->time_limit_ms = e->time_limit_ms;
  }
  v->s.njobs = nq;
  v->s.order = coord_alloc(a, (v->s.njobs + 1) * sizeof *v->s.order);
  v->s.until = coord_alloc(a, (v->s.nnodes + 1) * sizeof *v->s.until);
  v->s.user_nodes = coord_alloc(a, (v->s.nusers + 1) * sizeof *v->s.user_nodes);
  if (!v->s.order || !v->s.until || !v->s.user_nodes) return PX_ERR_NOMEM;
  coord_sched_decide(&c->cfg.sched, &v->s);
  return PX_OK;
nomem:
  px_store_reset(st);
  return px_set_error(PX_ERR_NOMEM, "scheduler: out of memory for the snapshot");
}

const coord_sched_job_t *coord_sched_view_find(const coord_sched_view_t *v, int64_t rowid) {
  size_t lo = 0, hi = v->s.njobs;
  while (lo < hi) { /* rowids ascend (ORDER BY id) */
    size_t mid = lo + (hi - lo) / 2;
    if (v->rowids[mid] < rowid) lo = mid + 1;
    else hi = mid;
  }
  return lo < v->s.njobs && v->rowids[lo] == rowid ? &v->s.jobs[lo] : NULL;
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

static px_status_t coord_acct_bind(px_store_stmt_t *st, const char *user, int64_t since,
                                   int state, int64_t now) {
  PX_CHECK(px_store_bind_text(st, 1, user));
  PX_CHECK(px_store_bind_int64(st, 2, since));
  PX_CHECK(px_store_bind_int64(st, 3, state));
  PX_CHECK(px_store_bind_int64(st, 4, JS_SCHEDULED));
  PX_CHECK(px_store_bind_int64(st, 5, JS_RUNNING));
  return px_store_bind_int64(st, 6, now);
}

px_status_t coord_acct_query(coord_t *c, coord_arena_t *a, const char *user, int64_t since,
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
  PX_CHECK(coord_acct_bind(st, user, since, state, now));
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
  PX_CHECK(coord_acct_bind(st, user, since, state, now));
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

/* ---- preemption --------------------------------------------------------------- */

px_status_t coord_sched_preemptible(coord_t *c, coord_arena_t *a, int below, int per_node,
                                    coord_sched_victim_t **out, size_t *n) {
  px_store_stmt_t *st;
  size_t cap = 0;
  *out = NULL;
  *n = 0;
  PX_CHECK(px_store_stmt(c->db,
                         "SELECT j.job_id, j.state, j.priority, j.spec, (SELECT count(*) FROM"
                         " job_nodes jn WHERE jn.job_id = j.job_id AND (SELECT count(*) FROM"
                         " node_devices d WHERE d.node_id = jn.node_id) >= ?4) FROM jobs j"
                         " WHERE j.state IN (?1, ?2) AND j.priority < ?3"
                         " ORDER BY j.priority, j.scheduled_unix_ms DESC, j.id DESC",
                         &st));
  PX_CHECK(px_store_bind_int64(st, 1, JS_SCHEDULED));
  PX_CHECK(px_store_bind_int64(st, 2, JS_RUNNING));
  PX_CHECK(px_store_bind_int64(st, 3, below));
  PX_CHECK(px_store_bind_int64(st, 4, per_node));
  px_status_t rc;
  while ((rc = px_store_step(st)) == 1) {
    /* only jobs that checkpoint: the others would lose their work */
    size_t len = 0;
    const void *blob = px_store_column_blob(st, 3, &len);
    Prunex__V1__JobSpec *spec = (Prunex__V1__JobSpec *)protobuf_c_message_unpack(
        &prunex__v1__job_spec__descriptor, &a->pb, len, blob);
    if (!spec || !spec->recovery || spec->recovery->checkpoint_every <= 0) continue;
    coord_sched_victim_t *v = coord_push(a, (void **)out, n, &cap, sizeof *v);
    if (!v || !(v->job_id = coord_strdup(a, px_store_column_text(st, 0)))) {
      px_store_reset(st);
      return PX_ERR_NOMEM;
    }
    v->state = (int)px_store_column_int64(st, 1);
    v->priority = (int)px_store_column_int64(st, 2);
    v->fitting_nodes = (int)px_store_column_int64(st, 4);
  }
  return rc < 0 ? rc : PX_OK;
}
