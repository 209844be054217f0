/* How an attempt of a job ends. Releasing its nodes (back to READY, or
 * LOST when their agent has gone), and every fault, a failed or hung rank
 * (jobs.c), a lost node or a placement that timed out (recovery.c), goes
 * through coord_job_fault: while the job's spec.recovery.max_restarts
 * allows, the attempt is recorded (job_attempts) and the job queued again
 * for its next attempt, placed on the same nodes when they are alive and
 * READY, else on others; when no restart is left it FAILS with the cause.
 * Preemption (coord_job_preempt) ends an attempt the same way without
 * using a restart, and so does a fault whose cause is a node that cannot
 * be reached while the job is being preempted (coord_job_fault_unreachable:
 * the preemption would have ended the attempt anyway).
 *
 * Everything here runs inside the caller's transaction and only writes
 * rows (db/); what must follow the commit the caller records in its
 * effects (coord_fx_fault, effects.h). */
#include <stdio.h>
#include <string.h>

#include "db/control.h"
#include "db/db_core.h"
#include "db/sched.h"
#include "flow.h"

#include "prunex/check.h"

px_status_t coord_job_release_nodes(coord_t *c, const char *job_id, const char *reason) {
  coord_arena_t a;
  coord_arena_init(&a);
  char **ids = NULL;
  int *states = NULL;
  size_t n = 0;
  px_status_t rc;
  PX_CHECK_GOTO(coord_db_job_nodes_held(c, &a, job_id, &ids, &states, &n), rc, out);
  PX_CHECK_GOTO(coord_db_job_nodes_unlink(c, job_id), rc, out);
  /* A node whose agent has gone is never offered again as READY. */
  for (size_t i = 0; i < n; i++) {
    if (states[i] != NS_BUSY) continue;
    int gone = coord_agent_is_gone(c, ids[i]);
    PX_CHECK_GOTO(coord_node_set_state(c, ids[i], NS_BUSY, gone ? NS_LOST : NS_READY,
                                       gone ? "its agent disconnected" : reason),
                  rc, out);
  }
  rc = PX_OK;
out:
  coord_arena_free(&a);
  return rc;
}

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
  size_t used = 1, pused = 1;
  char nodes[4096] = "\n";
  snprintf(prefer, cap, "\n");
  PX_CHECK(coord_db_job_node_ids(c, a, job_id, &f->nodes, &f->nnodes));
  for (size_t i = 0; i < f->nnodes; i++) {
    const char *id = f->nodes[i];
    if (used + strlen(id) + 2 < sizeof nodes)
      used += (size_t)snprintf(nodes + used, sizeof nodes - used, "%s\n", id);
    int avoid = avoid_node && !strcmp(id, avoid_node);
    if (pused + strlen(id) + 3 < cap)
      pused += (size_t)snprintf(prefer + pused, cap - pused, "%s%s\n", avoid ? "-" : "", id);
  }
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
  char why[300];
  snprintf(why, sizeof why, "job %s: attempt %d ended, queueing it again", job_id, attempt);
  PX_CHECK(coord_job_release_nodes(c, job_id, why));
  PX_CHECK(coord_db_job_requeue(c, job_id, attempt + 1, prefer));
  return coord_job_set_state(c, job_id, state, JS_PENDING, reason);
}

/* The stop a preemption put in the job's last stored decision, cleared:
 * a replay of that iteration (after a later fault) goes on. */
static px_status_t coord_preempt_clear_stop(coord_t *c, coord_arena_t *a, const char *job_id) {
  Prunex__V1__ControlDecision *d = NULL;
  PX_CHECK(coord_db_control_decision(c, a, job_id, -1, &d));
  if (!d || !d->stop || strcmp(d->stop_reason, "preempted") != 0) return PX_OK;
  d->stop = 0;
  d->stop_reason = (char *)"";
  return coord_db_control_decision_put(c, job_id, d, 0);
}

px_status_t coord_job_preempt(coord_t *c, coord_arena_t *a, const char *job_id, int state,
                              const char *by, coord_fault_t *f) {
  PX_CHECK(coord_preempt_clear_stop(c, a, job_id));
  memset(f, 0, sizeof *f);
  int attempt = 1, preemptions = 0;
  PX_CHECK(coord_db_job_attempts(c, job_id, &attempt, &preemptions));
  f->attempt = attempt;
  f->restarted = 1;
  char lines[4096], prefer[4096], cause[400], reason[600];
  PX_CHECK(coord_fault_nodes(c, a, job_id, NULL, f, lines, prefer, sizeof lines));
  snprintf(cause, sizeof cause, "preempted by %s", by);
  PX_CHECK(coord_db_attempt_put(c, job_id, attempt, cause, lines, coord_now_ms()));
  PX_CHECK(coord_db_job_preempted(c, job_id));
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
  PX_CHECK(coord_db_job_attempts(c, job_id, &attempt, &preemptions));
  int max_restarts = spec && spec->recovery ? spec->recovery->max_restarts : 0;
  if (max_restarts < 0) max_restarts = 0;
  f->attempt = attempt;
  char lines[4096], prefer[4096];
  PX_CHECK(coord_fault_nodes(c, a, job_id, avoid_node, f, lines, prefer, sizeof lines));
  /* Every attempt of a job that may restart is listed, the last too. */
  if (max_restarts > 0)
    PX_CHECK(coord_db_attempt_put(c, job_id, attempt, cause, lines, coord_now_ms()));
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

px_status_t coord_job_fault_unreachable(coord_t *c, coord_arena_t *a, const char *job_id,
                                        int state, const char *reason, const char *avoid_node,
                                        coord_fault_t *f) {
  coord_db_pstop_t s;
  int found = 0;
  PX_CHECK(coord_db_sched_pstop_get(c, a, job_id, &s, &found));
  /* an elastic job giving nodes (shrink.c) is not being stopped */
  if (!found || s.stopped == COORD_PSTOP_SHRINK)
    return coord_job_fault(c, a, job_id, state, reason, avoid_node, f);
  char by[1600];
  if (s.stopped == COORD_PSTOP_STOPPED)
    snprintf(by, sizeof by, "%s; it stopped at its checkpoint of iteration %d, then %s", s.by,
             s.stop_iteration, reason);
  else
    snprintf(by, sizeof by, "%s; before it stopped, %s", s.by, reason);
  px_log(PX_LOG_INFO, "job %s: a node cannot be reached while it is preempted: queued again "
         "as preempted, using no restart", job_id);
  return coord_job_preempt(c, a, job_id, state, by, f);
}

px_status_t coord_job_fault_node(coord_t *c, coord_arena_t *a, const char *job_id, int state,
                                 const char *node_id, const char *reason, coord_fault_t *f) {
  PX_CHECK(coord_db_rank_exits_for_node(c, job_id, node_id, reason, coord_now_ms()));
  return coord_job_fault_unreachable(c, a, job_id, state, reason, node_id, f);
}

int coord_blame_gone_node(coord_t *c, const char *job_id, const char *reporter, char *reason,
                          size_t cap) {
  if (!c->gone) return 0;
  coord_arena_t a;
  coord_arena_init(&a);
  char **ids = NULL, node_id[128] = "";
  size_t n = 0;
  px_status_t rc = coord_db_job_node_ids(c, &a, job_id, &ids, &n);
  for (size_t i = 0; rc == PX_OK && i < n && !node_id[0]; i++)
    if (strcmp(ids[i], reporter) != 0 && coord_agent_is_gone(c, ids[i]))
      snprintf(node_id, sizeof node_id, "%s", ids[i]);
  coord_arena_free(&a);
  if (rc != PX_OK) return rc;
  if (!node_id[0]) return 0;
  int64_t since = coord_agent_gone_since(c, node_id);
  coord_db_node_t node;
  int found;
  PX_CHECK(coord_db_node_get(c, node_id, 0, &found, &node));
  snprintf(reason, cap, "node %s (%s) lost: its agent disconnected %lld ms before the job's ranks"
           " failed", found ? node.name : node_id, node_id, (long long)(coord_now_ms() - since));
  PX_CHECK(coord_db_rank_exits_for_node(c, job_id, node_id, reason, coord_now_ms()));
  PX_CHECK(coord_node_set_state(c, node_id, found ? node.state : NS_LOST, NS_LOST,
                                "its agent disconnected"));
  return 1;
}
