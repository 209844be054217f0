/* The scheduler's view of the database: the snapshot the policy
 * decides over (sched.h), the reasons it writes, and the state-change hook
 * that charges users' decayed usage and keeps the per-job accounting row
 * (acct, kept past the job's retention) in step. Its queries are
 * db/sched.c's; nothing else in the coordinator writes these tables. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "coord.h"
#include "db/membership.h"
#include "db/sched.h"
#include "prunex/check.h"

/* ---- usage and accounting on state changes ---------------------------------- */

/* Adds node_seconds to the user's decayed usage, as of now. */
static px_status_t coord_sched_charge(coord_t *c, const char *user, double node_seconds,
                                      int64_t now) {
  double usage = 0;
  int64_t then = now;
  int found = 0;
  PX_CHECK(coord_db_sched_usage_get(c, user, &found, &usage, &then));
  usage = coord_sched_decay(usage, then, now, c->cfg.sched.half_life_s) + node_seconds;
  return coord_db_sched_usage_put(c, user, usage, now);
}

px_status_t coord_sched_state_changed(coord_t *c, const char *job_id, int from, int to,
                                      const char *reason, int64_t now) {
  PX_CHECK(coord_queue_job_changed(c, job_id, to)); /* the pending jobs in memory */
  if (coord_job_active(from) && !coord_job_active(to)) {
    /* a preemption's stop is over with the attempt (preempt.c) */
    PX_CHECK(coord_db_sched_pstop_drop(c, job_id));
    /* an attempt ended: its node-seconds go to the user and the record */
    char owner[COORD_NAME_MAX + 32];
    double ns = 0;
    int found = 0;
    PX_CHECK(coord_db_sched_attempt(c, job_id, now, &found, owner, sizeof owner, &ns));
    if (found) {
      PX_CHECK(coord_sched_charge(c, owner, ns, now));
      PX_CHECK(coord_db_sched_acct_charge(c, job_id, ns));
    }
  }
  PX_CHECK(coord_db_sched_acct_state(c, job_id, to, now, reason));
  /* a new attempt: its own time limit, no stop asked */
  if (to == JS_SCHEDULED) PX_CHECK(coord_db_sched_stop_clear(c, job_id));
  return PX_OK;
}

const char *coord_stop_reason_name(int kind) {
  return kind == COORD_STOP_PREEMPTED ? "preempted" : "time_limit";
}

px_status_t coord_sched_set_reason(coord_t *c, const char *job_id, const char *reason) {
  PX_CHECK(coord_db_sched_set_reason(c, job_id, reason));
  coord_queue_set_reason(c, job_id, reason);
  return PX_OK;
}

/* ---- held jobs and dependencies --------------------------------------------------- */

/* Why the job of entry e is no candidate into *why (arena a; NULL: it is
 * one): held (first), or waiting for its dependencies; *never 1 when one of
 * them can never be met (an `ok` one on a job that ended otherwise). */
static px_status_t coord_sched_blocked(coord_t *c, coord_arena_t *a, const coord_queue_entry_t *e,
                                       char **why, int *never) {
  char buf[400] = "";
  *why = NULL;
  *never = 0;
  if (e->held_by[0]) {
    snprintf(buf, sizeof buf, e->held_admin ? "held by admin %s (only an admin may release it)"
                                            : "held by %s (pxctl release lets it run)",
             e->held_by);
  } else {
    int waiting = 0;
    for (const char *p = e->depends; *p && !*never;) {
      const char *nl = strchr(p, '\n');
      size_t n = nl ? (size_t)(nl - p) : strlen(p);
      char id[96] = "";
      const char *colon = memchr(p, ':', n);
      size_t idn = colon ? (size_t)(colon - p) : n;
      snprintf(id, sizeof id, "%.*s", (int)(idn < sizeof id ? idn : sizeof id - 1), p);
      int ok = !colon || strncmp(colon + 1, "any", 3) != 0;
      p = nl ? nl + 1 : p + n;
      int found = 0, state = 0;
      PX_CHECK(coord_db_sched_dep_state(c, id, &found, &state));
      if (!found || (coord_job_terminal(state) && ok && state != JS_SUCCEEDED)) {
        if (!ok) continue; /* any: an unknown job counts as ended */
        *never = 1;
        snprintf(buf, sizeof buf,
                 "dependency never satisfied: %s %s%s (after %s:ok needs it to succeed)", id,
                 found ? "ended " : "is unknown", found ? px_rpc_job_state_name(state) : "", id);
      } else if (!coord_job_terminal(state) && waiting++ == 0) {
        snprintf(buf, sizeof buf, "dependency: waiting for %s to %s", id, ok ? "succeed" : "end");
      }
    }
    if (!*never && waiting > 1) {
      size_t used = strlen(buf);
      snprintf(buf + used, sizeof buf - used, " and %d more job%s", waiting - 1,
               waiting == 2 ? "" : "s");
    }
  }
  if (buf[0] && !(*why = coord_strdup(a, buf))) return PX_ERR_NOMEM;
  return PX_OK;
}

/* An elastic job with nodes in cooldown (membership.c) waits while the
 * alive nodes of P devices left to it are fewer than it needs: *why says
 * which nodes and for how long (arena a), else NULL. bl: every job's
 * cooldowns now (few rows: nodes lost twice within the window). */
static px_status_t coord_sched_cooldown(const coord_t *c, coord_arena_t *a,
                                        const coord_queue_entry_t *e,
                                        const coord_db_blacklist_t *bl, size_t nbl,
                                        const coord_db_sched_node_t *nodes, size_t nn,
                                        int64_t now, char **why) {
  *why = NULL;
  size_t first = 0;
  while (first < nbl && strcmp(bl[first].job_id, e->job_id) != 0) first++;
  if (first == nbl) return PX_OK;
  int avail = 0;
  for (size_t i = 0; i < nn; i++) {
    if (nodes[i].devices < e->per_node || coord_agent_is_gone(c, nodes[i].node_id)) continue;
    int out = 0;
    for (size_t k = first; k < nbl && !strcmp(bl[k].job_id, e->job_id) && !out; k++)
      out = !strcmp(bl[k].node_id, nodes[i].node_id);
    avail += !out;
  }
  if (avail >= e->nodes) return PX_OK;
  char buf[700];
  size_t used = (size_t)snprintf(buf, sizeof buf, "waiting for nodes: needs %d, %d left to it; ",
                                 e->nodes, avail);
  for (size_t k = first; k < nbl && !strcmp(bl[k].job_id, e->job_id) && used + 8 < sizeof buf;
       k++)
    used += (size_t)snprintf(buf + used, sizeof buf - used,
                             "%snode %s not taken back for %lld s (lost %d times: %.160s)",
                             k > first ? "; " : "", bl[k].name,
                             (long long)((bl[k].until_unix_ms - now + 999) / 1000),
                             bl[k].failures, bl[k].reason);
  *why = coord_strdup(a, buf);
  return *why ? PX_OK : PX_ERR_NOMEM;
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
  size_t ucap = 0, ncap = 0, n = 0;
  /* alive nodes: free now, or busy until their job's time limit */
  coord_db_sched_node_t *nodes = NULL;
  PX_CHECK(coord_db_sched_nodes(c, a, &nodes, &n));
  size_t nnodes = n, nbl = 0;
  coord_db_blacklist_t *bl = NULL; /* elastic jobs' nodes in cooldown */
  PX_CHECK(coord_db_blacklist_all(c, a, now, &bl, &nbl));
  for (size_t i = 0; i < n; i++) {
    if (coord_agent_is_gone(c, nodes[i].node_id)) continue;
    coord_sched_node_t *o = coord_push(a, (void **)&v->s.nodes, &v->s.nnodes, &ncap, sizeof *o);
    if (!o) goto nomem;
    o->devices = nodes[i].devices;
    int64_t since = nodes[i].since_ms, limit = nodes[i].limit_ms;
    if (nodes[i].state == NS_READY) o->free_at_ms = 0;
    else o->free_at_ms = since > 0 && limit > 0 ? since + limit : COORD_SCHED_NEVER;
  }
  /* users' decayed usage, then their running jobs' node-seconds so far */
  coord_db_sched_use_t *use = NULL;
  PX_CHECK(coord_db_sched_usages(c, a, &use, &n));
  for (size_t i = 0; i < n; i++) {
    int u = coord_sched_user_index(a, v, &ucap, use[i].user);
    if (u < 0) goto nomem;
    v->s.users[u].usage =
        coord_sched_decay(use[i].value, use[i].ms, now, c->cfg.sched.half_life_s);
  }
  PX_CHECK(coord_db_sched_running(c, a, &use, &n));
  for (size_t i = 0; i < n; i++) {
    int u = coord_sched_user_index(a, v, &ucap, use[i].user);
    if (u < 0) goto nomem;
    int64_t since = use[i].ms;
    v->s.users[u].running_nodes += (int)use[i].value;
    if (since > 0 && now > since) v->s.users[u].usage += use[i].value * (double)(now - since) / 1e3;
  }
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
  v->blocked = coord_alloc(a, (nq + 1) * sizeof *v->blocked);
  v->never = coord_alloc(a, (nq + 1) * sizeof *v->never);
  if (!v->s.jobs || !v->job_ids || !v->prefer || !v->rowids || !v->reasons || !v->blocked ||
      !v->never)
    return PX_ERR_NOMEM;
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
    PX_CHECK(coord_sched_blocked(c, a, e, &v->blocked[i], &v->never[i]));
    if (!v->blocked[i] && nbl > 0)
      PX_CHECK(coord_sched_cooldown(c, a, e, bl, nbl, nodes, nnodes, now, &v->blocked[i]));
    j->blocked = v->blocked[i] != NULL;
  }
  v->s.njobs = nq;
  v->s.order = coord_alloc(a, (v->s.njobs + 1) * sizeof *v->s.order);
  v->s.until = coord_alloc(a, (v->s.nnodes + 1) * sizeof *v->s.until);
  v->s.user_nodes = coord_alloc(a, (v->s.nusers + 1) * sizeof *v->s.user_nodes);
  if (!v->s.order || !v->s.until || !v->s.user_nodes) return PX_ERR_NOMEM;
  coord_sched_decide(&c->cfg.sched, &v->s);
  return PX_OK;
nomem:
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

