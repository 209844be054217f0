/* Faults the coordinator handles on its own: a node whose agent went away
 * (its assignment stream closed and was not reopened within the grace), a
 * node of a running job that stopped heartbeating, and a placement whose
 * nodes never started their ranks. Each ends the current attempt of the job
 * it concerns with a reason that names the first cause (the node), gives the
 * node's ranks an exit record, releases the other nodes and tells them to
 * stop, so that `rank_exits` agrees with the job and nothing waits forever.
 *
 * Every fault, these and a failed or hung rank (jobs.c), goes through
 * coord_job_fault: while the job's spec.recovery.max_restarts allows, the
 * attempt is recorded (job_attempts) and the job queued again for its next
 * attempt, placed on the same nodes when they are alive and READY, else on
 * others; when no restart is left it FAILS with the cause.
 *
 * The list of gone agents lives in memory only: after a restart every node
 * is LOST until heard from anyway, and heartbeat ages count from the
 * restart at most, so a coordinator outage never fails a job by itself. */
#include <stdio.h>
#include <string.h>

#include "coord.h"
#include "prunex/check.h"

struct coord_gone {
  coord_gone_t *next;
  int64_t since_ms;
  char node_id[128];
};

static coord_gone_t **coord_gone_find(coord_t *c, const char *node_id) {
  for (coord_gone_t **p = &c->gone; *p; p = &(*p)->next)
    if (!strcmp((*p)->node_id, node_id)) return p;
  return NULL;
}

int coord_agent_is_gone(const coord_t *c, const char *node_id) {
  for (const coord_gone_t *g = c->gone; g; g = g->next)
    if (!strcmp(g->node_id, node_id)) return 1;
  return 0;
}

void coord_agent_gone(coord_t *c, const char *node_id) {
  if (c->stopping || coord_gone_find(c, node_id)) return;
  /* An agent that reconnected before its old stream was noticed closed
   * still has a stream open. */
  for (const coord_watch_t *w = c->node_watches; w; w = w->next)
    if (!strcmp(w->id, node_id)) return;
  coord_gone_t *g = px_calloc(1, sizeof *g, "coordd.gone");
  if (!g) return; /* the heartbeat timeout still catches the node */
  g->since_ms = coord_now_ms();
  snprintf(g->node_id, sizeof g->node_id, "%s", node_id);
  g->next = c->gone;
  c->gone = g;
  px_log(PX_LOG_INFO, "node %s: its agent closed the assignment stream", node_id);
}

void coord_agent_back(coord_t *c, const char *node_id) {
  coord_gone_t **p = coord_gone_find(c, node_id);
  if (!p) return;
  coord_gone_t *g = *p;
  *p = g->next;
  px_free(g);
}

void coord_recovery_stop(coord_t *c) {
  while (c->gone) coord_agent_back(c, c->gone->node_id);
}

/* Gives every rank of node_id in job_id that has no exit record one that
 * says why it ended. In a transaction. */
static px_status_t coord_record_node_ranks(coord_t *c, const char *job_id, const char *node_id,
                                           const char *reason) {
  px_store_stmt_t *st;
  PX_CHECK(px_store_stmt(c->db,
                         "INSERT OR IGNORE INTO rank_exits (job_id, rank, node_id, exit_code,"
                         " signal, reason, time_unix_ms)"
                         " SELECT r.job_id, r.rank, n.node_id, -1, 0, ?3, ?4 FROM job_ranks r"
                         " JOIN job_nodes n ON n.job_id = r.job_id AND n.node_index = r.node_index"
                         " WHERE r.job_id = ?1 AND n.node_id = ?2",
                         &st));
  PX_CHECK(px_store_bind_text(st, 1, job_id));
  PX_CHECK(px_store_bind_text(st, 2, node_id));
  PX_CHECK(px_store_bind_text(st, 3, reason));
  PX_CHECK(px_store_bind_int64(st, 4, coord_now_ms()));
  return px_store_run(st);
}

/* The node's display name ("name" or the id when unknown). */
static px_status_t coord_node_name(coord_t *c, const char *node_id, char *name, size_t cap) {
  px_store_stmt_t *st;
  PX_CHECK(px_store_stmt(c->db, "SELECT name FROM nodes WHERE node_id = ?1", &st));
  PX_CHECK(px_store_bind_text(st, 1, node_id));
  px_status_t rc = px_store_step(st);
  if (rc < 0) return rc;
  snprintf(name, cap, "%s", rc == 1 ? px_store_column_text(st, 0) : node_id);
  px_store_reset(st);
  return PX_OK;
}

/* ---- faults: restart or fail ------------------------------------------------ */

/* Copies the first line of s, at most cap-1 bytes, into out. */
static void coord_first_line(const char *s, char *out, size_t cap) {
  size_t n = strcspn(s, "\n");
  if (n >= cap) n = cap - 1;
  memcpy(out, s, n);
  out[n] = '\0';
}

/* The attempt's nodes, in node order: into f->nodes (for the CANCEL of the
 * old attempt), lines[cap] ("ID\nID", for the record) and prefer[cap]
 * ("\nID\n-ID\n", the preference of the next placement: the node a
 * placement timed out on goes last, as "-ID"). */
static px_status_t coord_fault_nodes(coord_t *c, coord_arena_t *a, const char *job_id,
                                     const char *avoid_node, coord_fault_t *f, char *lines,
                                     char *prefer, size_t cap) {
  px_store_stmt_t *st;
  px_status_t rc;
  size_t fcap = 0, used = 1, pused = 1;
  char nodes[4096] = "\n";
  snprintf(prefer, cap, "\n");
  PX_CHECK(px_store_stmt(c->db, "SELECT node_id FROM job_nodes WHERE job_id = ?1"
                                " ORDER BY node_index", &st));
  PX_CHECK(px_store_bind_text(st, 1, job_id));
  while ((rc = px_store_step(st)) == 1) {
    const char *id = px_store_column_text(st, 0);
    char **slot = coord_push(a, (void **)&f->nodes, &f->nnodes, &fcap, sizeof(char *));
    if (!slot || !(*slot = coord_strdup(a, id))) {
      px_store_reset(st);
      return PX_ERR_NOMEM;
    }
    if (used + strlen(id) + 2 < sizeof nodes)
      used += (size_t)snprintf(nodes + used, sizeof nodes - used, "%s\n", id);
    int avoid = avoid_node && !strcmp(id, avoid_node);
    if (pused + strlen(id) + 3 < cap)
      pused += (size_t)snprintf(prefer + pused, cap - pused, "%s%s\n", avoid ? "-" : "", id);
  }
  if (rc < 0) return rc;
  snprintf(lines, cap, "%.*s", used > 2 ? (int)(used - 2) : 0, nodes + 1);
  if (pused <= 1) prefer[0] = '\0';
  return PX_OK;
}

/* Restart: the attempt's nodes released (a LOST node stays LOST, a gone
 * agent's node becomes LOST), its placement, rank secrets, exit records
 * and rendezvous keys dropped (a stale rank of the old attempt is refused
 * from now on), and the job queued again. Iteration rows and decisions
 * stay: the resumed attempt re-reports its iterations and gets the same
 * decisions back. */
static px_status_t coord_fault_restart(coord_t *c, const char *job_id, int state, int attempt,
                                       const char *reason, const char *prefer) {
  px_store_stmt_t *st;
  char why[300];
  snprintf(why, sizeof why, "job %s: attempt %d ended, queueing it again", job_id, attempt);
  PX_CHECK(coord_job_release_nodes(c, job_id, why));
  static const char *const drop[] = {
      "DELETE FROM rank_exits WHERE job_id = ?1",
      "DELETE FROM job_ranks WHERE job_id = ?1",
      "DELETE FROM job_nodes WHERE job_id = ?1",
      "DELETE FROM kv WHERE job_id = ?1",
      /* the new attempt's ranks may run elsewhere: their logs start anew
       * (an agent that runs a rank again appends to the same file) */
      "DELETE FROM rank_log_chunks WHERE job_id = ?1",
      "DELETE FROM rank_logs WHERE job_id = ?1",
  };
  for (size_t i = 0; i < sizeof drop / sizeof drop[0]; i++) {
    PX_CHECK(px_store_stmt(c->db, drop[i], &st));
    PX_CHECK(px_store_bind_text(st, 1, job_id));
    PX_CHECK(px_store_run(st));
  }
  PX_CHECK(px_store_stmt(c->db,
                         "UPDATE jobs SET attempt = ?2, prefer_nodes = ?3 WHERE job_id = ?1", &st));
  PX_CHECK(px_store_bind_text(st, 1, job_id));
  PX_CHECK(px_store_bind_int64(st, 2, attempt + 1));
  PX_CHECK(px_store_bind_text(st, 3, prefer));
  PX_CHECK(px_store_run(st));
  return coord_job_set_state(c, job_id, state, JS_PENDING, reason);
}

/* The job's attempt now and how many attempts ended by preemption (they
 * use no restart of spec.recovery.max_restarts). */
static px_status_t coord_job_attempts(coord_t *c, const char *job_id, int *attempt,
                                      int *preemptions) {
  int64_t v[2] = {1, 0};
  int found;
  PX_CHECK(px_store_row_int64(c->db, "SELECT attempt, preemptions FROM jobs WHERE job_id = ?1",
                              job_id, v, 2, &found));
  *attempt = (int)v[0];
  *preemptions = (int)v[1];
  return PX_OK;
}

/* Records an attempt that ended (job_attempts). */
static px_status_t coord_attempt_record(coord_t *c, const char *job_id, int attempt,
                                        const char *cause, const char *lines) {
  px_store_stmt_t *st;
  PX_CHECK(px_store_stmt(c->db,
                         "INSERT OR REPLACE INTO job_attempts (job_id, attempt, cause, node_ids,"
                         " ended_unix_ms) VALUES (?1, ?2, ?3, ?4, ?5)",
                         &st));
  PX_CHECK(px_store_bind_text(st, 1, job_id));
  PX_CHECK(px_store_bind_int64(st, 2, attempt));
  PX_CHECK(px_store_bind_text(st, 3, cause));
  PX_CHECK(px_store_bind_text(st, 4, lines));
  PX_CHECK(px_store_bind_int64(st, 5, coord_now_ms()));
  return px_store_run(st);
}

px_status_t coord_job_preempt(coord_t *c, coord_arena_t *a, const char *job_id, int state,
                              const char *by, coord_fault_t *f) {
  memset(f, 0, sizeof *f);
  int attempt = 1, preemptions = 0;
  PX_CHECK(coord_job_attempts(c, job_id, &attempt, &preemptions));
  f->attempt = attempt;
  f->restarted = 1;
  char lines[4096], prefer[4096], cause[400], reason[600];
  PX_CHECK(coord_fault_nodes(c, a, job_id, NULL, f, lines, prefer, sizeof lines));
  snprintf(cause, sizeof cause, "preempted by %s", by);
  PX_CHECK(coord_attempt_record(c, job_id, attempt, cause, lines));
  px_store_stmt_t *st;
  PX_CHECK(px_store_stmt(c->db, "UPDATE jobs SET preemptions = preemptions + 1 WHERE job_id = ?1",
                         &st));
  PX_CHECK(px_store_bind_text(st, 1, job_id));
  PX_CHECK(px_store_run(st));
  snprintf(reason, sizeof reason,
           "attempt %d %s; queued again, it resumes from its newest checkpoint", attempt, cause);
  return coord_fault_restart(c, job_id, state, attempt, reason, prefer);
}

px_status_t coord_job_fault(coord_t *c, coord_arena_t *a, const char *job_id, int state,
                            const char *cause_in, const char *avoid_node, coord_fault_t *f) {
  memset(f, 0, sizeof *f);
  char cause[2048];
  px_utf8_clean(cause_in, cause, sizeof cause);
  int attempt = 1, preemptions = 0, found = 0, js = 0;
  Prunex__V1__JobSpec *spec = NULL;
  PX_CHECK(coord_job_lookup(c, a, job_id, &found, &js, &spec));
  if (!found) return px_set_error(PX_ERR_INTERNAL, "job %s: not found", job_id);
  PX_CHECK(coord_job_attempts(c, job_id, &attempt, &preemptions));
  int max_restarts = spec && spec->recovery ? spec->recovery->max_restarts : 0;
  if (max_restarts < 0) max_restarts = 0;
  f->attempt = attempt;
  char lines[4096], prefer[4096];
  PX_CHECK(coord_fault_nodes(c, a, job_id, avoid_node, f, lines, prefer, sizeof lines));
  /* Every attempt of a job that may restart is listed, the last too. */
  if (max_restarts > 0) PX_CHECK(coord_attempt_record(c, job_id, attempt, cause, lines));
  int faults = attempt - preemptions; /* attempts that ended in a fault, this one included */
  if (faults < 1 + max_restarts) {
    f->restarted = 1;
    char first[1600], reason[2000];
    coord_first_line(cause, first, sizeof first);
    snprintf(reason, sizeof reason, "attempt %d failed: %s; restart %d of %d", attempt, first,
             faults, max_restarts);
    return coord_fault_restart(c, job_id, state, attempt, reason, prefer);
  }
  /* No restart left: the job fails with this attempt's first cause. */
  char reason[2300];
  if (attempt > 1) snprintf(reason, sizeof reason, "failed after %d attempts: %s", attempt, cause);
  else snprintf(reason, sizeof reason, "%s", cause);
  PX_CHECK(coord_job_set_state(c, job_id, state, JS_FAILED, reason));
  char why[700];
  snprintf(why, sizeof why, "job %s failed", job_id);
  return coord_job_release_nodes(c, job_id, why);
}

void coord_attempt_cancel(coord_t *c, const char *job_id, const coord_fault_t *f) {
  /* The old attempt's nodes stop it: its placement is gone, so the CANCEL
   * is built here, naming the attempt. */
  Prunex__V1__Assignment as = PRUNEX__V1__ASSIGNMENT__INIT;
  as.job_id = (char *)job_id;
  as.action = PRUNEX__V1__ASSIGNMENT_ACTION__ASSIGNMENT_ACTION_CANCEL;
  as.coordinator = c->advertise;
  as.attempt = f->attempt;
  for (size_t i = 0; i < f->nnodes; i++) coord_send_to_node(c, f->nodes[i], &as);
}

void coord_after_fault(coord_t *c, const char *job_id, const coord_fault_t *f) {
  if (f->restarted) {
    coord_attempt_cancel(c, job_id, f);
  } else {
    coord_push_assignments(c, job_id, PRUNEX__V1__ASSIGNMENT_ACTION__ASSIGNMENT_ACTION_CANCEL);
  }
  coord_job_changed(c, job_id, NULL);
  coord_schedule(c);
}

/* Ends the active job's attempt because of node_id: its ranks get exit
 * records, then the job restarts or fails (coord_job_fault). In a
 * transaction. */
static px_status_t coord_fail_for_node(coord_t *c, coord_arena_t *a, const char *job_id,
                                       int state, const char *node_id, const char *reason,
                                       coord_fault_t *f) {
  PX_CHECK(coord_record_node_ranks(c, job_id, node_id, reason));
  return coord_job_fault(c, a, job_id, state, reason, node_id, f);
}

px_status_t coord_node_lost(coord_t *c, const char *node_id, const char *why) {
  px_store_stmt_t *st;
  px_status_t rc;
  char job_id[128] = "", name[256] = "";
  int state = 0, job_state = 0, failed = 0;
  coord_arena_t a;
  coord_arena_init(&a);
  coord_fault_t f;
  PX_CHECK_GOTO(px_store_begin(c->db), rc, out);
  PX_CHECK_GOTO(px_store_stmt(c->db, "SELECT state, job_id, name FROM nodes WHERE node_id = ?1", &st),
                rc, fail);
  PX_CHECK_GOTO(px_store_bind_text(st, 1, node_id), rc, fail);
  if ((rc = px_store_step(st)) < 0) goto fail;
  if (rc == 0) {
    px_store_rollback(c->db);
    coord_agent_back(c, node_id);
    rc = PX_OK;
    goto out;
  }
  state = (int)px_store_column_int64(st, 0);
  snprintf(job_id, sizeof job_id, "%s", px_store_column_text(st, 1));
  snprintf(name, sizeof name, "%s", px_store_column_text(st, 2));
  px_store_reset(st);
  PX_CHECK_GOTO(coord_node_set_state(c, node_id, state, NS_LOST, why), rc, fail);
  if (job_id[0]) {
    int64_t js = 0;
    int found;
    PX_CHECK_GOTO(px_store_row_int64(c->db, "SELECT state FROM jobs WHERE job_id = ?1", job_id,
                                     &js, 1, &found),
                  rc, fail);
    job_state = (int)js;
    if (coord_job_active(job_state)) {
      char reason[640];
      snprintf(reason, sizeof reason, "node %s (%s) lost: %s", name, node_id, why);
      PX_CHECK_GOTO(coord_fail_for_node(c, &a, job_id, job_state, node_id, reason, &f), rc, fail);
      failed = 1;
    } else {
      PX_CHECK_GOTO(px_store_stmt(c->db, "UPDATE nodes SET job_id = '' WHERE node_id = ?1", &st),
                    rc, fail);
      PX_CHECK_GOTO(px_store_bind_text(st, 1, node_id), rc, fail);
      PX_CHECK_GOTO(px_store_run(st), rc, fail);
    }
  }
  PX_CHECK_GOTO(px_store_commit(c->db), rc, fail);
  coord_agent_back(c, node_id);
  if (failed) coord_after_fault(c, job_id, &f);
  else coord_schedule(c);
  rc = PX_OK;
  goto out;
fail:
  px_store_rollback(c->db);
  if (rc >= 0) rc = PX_ERR_INTERNAL;
out:
  coord_arena_free(&a);
  return rc;
}

int coord_blame_gone_node(coord_t *c, const char *job_id, const char *reporter, char *reason,
                          size_t cap) {
  if (!c->gone) return 0;
  px_store_stmt_t *st;
  px_status_t rc;
  char node_id[128] = "";
  PX_CHECK(px_store_stmt(c->db, "SELECT node_id FROM job_nodes WHERE job_id = ?1 ORDER BY node_index",
                         &st));
  PX_CHECK(px_store_bind_text(st, 1, job_id));
  while ((rc = px_store_step(st)) == 1) {
    const char *id = px_store_column_text(st, 0);
    if (strcmp(id, reporter) != 0 && coord_agent_is_gone(c, id)) {
      snprintf(node_id, sizeof node_id, "%s", px_store_column_text(st, 0));
      px_store_reset(st);
      break;
    }
  }
  if (rc < 0) return rc;
  if (!node_id[0]) return 0;
  int64_t since = 0;
  for (const coord_gone_t *g = c->gone; g; g = g->next)
    if (!strcmp(g->node_id, node_id)) since = g->since_ms;
  char name[256];
  PX_CHECK(coord_node_name(c, node_id, name, sizeof name));
  snprintf(reason, cap, "node %s (%s) lost: its agent disconnected %lld ms before the job's ranks"
           " failed", name, node_id, (long long)(coord_now_ms() - since));
  PX_CHECK(coord_record_node_ranks(c, job_id, node_id, reason));
  int64_t state = NS_LOST;
  int found;
  PX_CHECK(px_store_row_int64(c->db, "SELECT state FROM nodes WHERE node_id = ?1", node_id, &state,
                              1, &found));
  PX_CHECK(coord_node_set_state(c, node_id, (int)state, NS_LOST, "its agent disconnected"));
  return 1;
}

/* Copies the ids the statement yields (column 0) into the arena. */
static px_status_t coord_collect(coord_arena_t *a, px_store_stmt_t *st, char ***ids, size_t *n) {
  size_t cap = 0;
  px_status_t rc;
  while ((rc = px_store_step(st)) == 1) {
    char **slot = coord_push(a, (void **)ids, n, &cap, sizeof(char *));
    if (!slot || !(*slot = coord_strdup(a, px_store_column_text(st, 0)))) {
      px_store_reset(st);
      return PX_ERR_NOMEM;
    }
  }
  return rc < 0 ? rc : PX_OK;
}

/* SCHEDULED jobs with a node that has not started its ranks in time. */
static px_status_t coord_placement_sweep(coord_t *c, int64_t now) {
  coord_arena_t a;
  coord_arena_init(&a);
  char **ids = NULL;
  size_t n = 0;
  px_store_stmt_t *st;
  px_status_t rc;
  PX_CHECK_GOTO(px_store_stmt(c->db,
                              "SELECT j.job_id, n.node_id FROM jobs j JOIN job_nodes n"
                              " ON n.job_id = j.job_id WHERE j.state = 2 AND n.started_unix_ms = 0"
                              " AND max(j.scheduled_unix_ms, ?2) < ?1 ORDER BY j.id, n.node_index",
                              &st),
                rc, out);
  PX_CHECK_GOTO(px_store_bind_int64(st, 1, now - c->cfg.placement_timeout_ms), rc, out);
  PX_CHECK_GOTO(px_store_bind_int64(st, 2, c->started_ms), rc, out);
  {
    size_t cap = 0;
    while ((rc = px_store_step(st)) == 1) {
      char **slot = coord_push(&a, (void **)&ids, &n, &cap, 2 * sizeof(char *));
      if (!slot || !(slot[0] = coord_strdup(&a, px_store_column_text(st, 0))) ||
          !(slot[1] = coord_strdup(&a, px_store_column_text(st, 1)))) {
        px_store_reset(st);
        rc = PX_ERR_NOMEM;
        goto out;
      }
    }
    if (rc < 0) goto out;
  }
  for (size_t i = 0; i < n; i++) {
    const char *job = ids[2 * i], *node = ids[2 * i + 1];
    if (i > 0 && !strcmp(job, ids[2 * (i - 1)])) continue; /* first node named */
    char name[256], reason[640];
    PX_CHECK_GOTO(coord_node_name(c, node, name, sizeof name), rc, out);
    snprintf(reason, sizeof reason,
             "placement timed out: node %s (%s) did not start its ranks within %d ms", name, node,
             c->cfg.placement_timeout_ms);
    PX_CHECK_GOTO(px_store_begin(c->db), rc, out);
    coord_fault_t f;
    rc = coord_fail_for_node(c, &a, job, JS_SCHEDULED, node, reason, &f);
    if (rc == PX_OK) rc = px_store_commit(c->db);
    if (rc != PX_OK) {
      px_store_rollback(c->db);
      goto out;
    }
    coord_after_fault(c, job, &f);
  }
  rc = PX_OK;
out:
  coord_arena_free(&a);
  return rc;
}

void coord_recovery_sweep(coord_t *c) {
  int64_t now = coord_now_ms();
  coord_arena_t a;
  coord_arena_init(&a);
  char **ids = NULL;
  size_t n = 0, cap = 0;
  px_status_t rc = PX_OK;
  /* Agents gone past their grace. */
  for (const coord_gone_t *g = c->gone; g && rc == PX_OK; g = g->next) {
    if (now - g->since_ms < c->cfg.agent_grace_ms) continue;
    char **slot = coord_push(&a, (void **)&ids, &n, &cap, sizeof(char *));
    rc = slot && (*slot = coord_strdup(&a, g->node_id)) ? PX_OK : PX_ERR_NOMEM;
  }
  for (size_t i = 0; rc == PX_OK && i < n; i++) {
    int64_t since = now;
    for (const coord_gone_t *g = c->gone; g; g = g->next)
      if (!strcmp(g->node_id, ids[i])) since = g->since_ms;
    char why[256];
    snprintf(why, sizeof why,
             "its agent closed the assignment stream %lld ms ago and did not come back"
             " (grace %d ms)",
             (long long)(now - since), c->cfg.agent_grace_ms);
    rc = coord_node_lost(c, ids[i], why);
  }
  /* Nodes holding an active job that stopped heartbeating (ages count from
   * this process's start at most: an outage of the coordinator is not the
   * node's fault). */
  px_store_stmt_t *st;
  ids = NULL;
  n = 0;
  if (rc == PX_OK)
    rc = px_store_stmt(c->db,
                       "SELECT n.node_id FROM nodes n JOIN jobs j ON j.job_id = n.job_id"
                       " WHERE n.job_id != '' AND j.state IN (2, 3)"
                       " AND max(n.last_heartbeat_unix_ms, ?2) < ?1 ORDER BY n.id",
                       &st);
  if (rc == PX_OK) rc = px_store_bind_int64(st, 1, now - c->cfg.heartbeat_timeout_ms);
  if (rc == PX_OK) rc = px_store_bind_int64(st, 2, c->started_ms);
  if (rc == PX_OK) rc = coord_collect(&a, st, &ids, &n);
  for (size_t i = 0; rc == PX_OK && i < n; i++) {
    char why[160];
    snprintf(why, sizeof why, "no heartbeat for more than %d ms", c->cfg.heartbeat_timeout_ms);
    rc = coord_node_lost(c, ids[i], why);
  }
  if (rc == PX_OK) rc = coord_placement_sweep(c, now);
  if (rc != PX_OK) px_log(PX_LOG_ERROR, "recovery sweep: %s", px_last_error());
  coord_arena_free(&a);
}
