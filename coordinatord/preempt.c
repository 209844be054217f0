/* Preemption: with `preemption = on` in the config, the first
 * job in line that waits for nodes (the policy's COORD_WAIT_NODES) may take
 * the nodes of running jobs of a lower job priority (spec.priority) that
 * checkpoint; jobs without checkpoints are never preempted. The fewest
 * victims needed are chosen, lowest priority first and the latest started
 * first (the least work to redo).
 *
 * It is graceful, as a time limit is: each victim is asked to stop (a row
 * in preempt_stops, db/sched.h), and rank 0's next report is answered
 * stop, "preempted". The decision is broadcast to every rank, so all stop
 * after the same iteration: they write a checkpoint of it (one that the
 * run resumes from, not a "stopped" one) and exit with code 0. The job is
 * then held on its nodes (coord_preempt_hold, from ReportRankExit) until
 * every victim has stopped, so that no other job can take the nodes in
 * between; then, in one transaction, the victims are queued again
 * (coord_job_preempt: the same nodes preferred, stored decisions kept, no
 * restart used) and the waiting job is placed on the nodes freed, so that
 * the victims cannot take them back. A victim resumes later from the
 * checkpoint it wrote at the stop and ends bit for bit as an uninterrupted
 * run (the stop is cleared from its stored decision, so that a later
 * replay of that iteration goes on).
 *
 * A victim that has not stopped preemption_grace_s after being asked (a
 * stalled rank, a long iteration, replayed iterations that get stored
 * decisions) is preempted hard: its attempt is cancelled and it resumes
 * from the newest checkpoint its ranks hold, redoing the iterations after
 * it with the decisions stored for them (the restart path's guarantee).
 * A victim with comm.overlap is never asked: a stop where no checkpoint
 * was planned would change its exchange's arithmetic, so its attempt is
 * cancelled as soon as the other victims have stopped. A victim whose node
 * cannot be reached meanwhile (lost, its agent gone) is queued again at
 * once, as preempted too: it uses no restart (attempt.c). One
 * preemption is under way at a time. Before any job is stopped, RUNNING
 * elastic jobs of a lower priority are asked to give the nodes needed above
 * their min_nodes and go on without them (shrink.c), when that is enough. */
#include <stdio.h>
#include <string.h>

#include "db/control.h"
#include "db/sched.h"
#include "flow.h"
#include "shrink.h"
#include "prunex/check.h"

/* The first job in line waiting for nodes, or -1. */
static long coord_preempt_waiter(const coord_sched_view_t *v) {
  for (size_t r = 0; r < v->s.njobs; r++) {
    size_t i = v->s.order[r];
    if (v->s.jobs[i].wait == COORD_WAIT_NODES) return (long)i;
  }
  return -1;
}

/* In a transaction: asks enough victims for job i of v to stop. *done 0
 * when there are not enough (the caller rolls back). */
static px_status_t coord_preempt_ask(coord_t *c, coord_arena_t *a, const coord_sched_view_t *v,
                                     size_t i, int *done) {
  const coord_sched_job_t *j = &v->s.jobs[i];
  *done = 0;
  int alive = 0;
  char **nodes = NULL, **names = NULL;
  size_t ready = 0;
  PX_CHECK(coord_fitting_nodes(c, a, j->per_node, j->nodes, v->prefer[i], &alive, &nodes, &names,
                               &ready));
  int need = j->nodes - (int)ready;
  if (need <= 0 || alive < j->nodes) return PX_OK;
  coord_sched_victim_t *vic = NULL;
  size_t nv = 0, take = 0;
  PX_CHECK(coord_db_sched_preemptible(c, a, j->priority, j->per_node, &vic, &nv));
  int freed = 0;
  while (take < nv && freed < need) freed += vic[take++].fitting_nodes;
  if (freed < need) return PX_OK;
  char by[160];
  snprintf(by, sizeof by, "%s (priority %d)", v->job_ids[i], j->priority);
  int64_t now = coord_now_ms();
  for (size_t k = 0; k < take; k++) {
    int how = vic[k].graceful ? COORD_PSTOP_ASKED : COORD_PSTOP_CANCEL;
    PX_CHECK(coord_db_sched_pstop_add(c, vic[k].job_id, v->job_ids[i], by, now, how));
    px_log(PX_LOG_INFO, "job %s (priority %d) is preempted by %s: %s", vic[k].job_id,
           vic[k].priority, by,
           vic[k].graceful ? "its ranks are asked to stop at a checkpoint"
                           : "comm.overlap: its attempt is cancelled once the others stopped");
  }
  *done = 1;
  return PX_OK;
}

/* In a transaction: the victims s[0..n) queued again (their old attempts'
 * nodes told to stop first), and the job they were preempted for placed on
 * the nodes freed if it still waits; what must follow into fx. */
static px_status_t coord_preempt_finish(coord_t *c, coord_arena_t *a, coord_effects_t *fx,
                                        const coord_db_pstop_t *s, size_t n, int late) {
  for (size_t k = 0; k < n; k++) {
    char by[400];
    if (s[k].stopped == COORD_PSTOP_STOPPED)
      snprintf(by, sizeof by, "%s; it stopped at its checkpoint of iteration %d", s[k].by,
               s[k].stop_iteration);
    else if (s[k].stopped == COORD_PSTOP_CANCEL)
      snprintf(by, sizeof by, "%s; cancelled (comm.overlap stops only at planned checkpoints)",
               s[k].by);
    else
      snprintf(by, sizeof by, "%s; it did not stop within %lld s of being asked, cancelled",
               s[k].by, (long long)c->cfg.sched.preempt_grace_s);
    coord_fault_t f; /* the stop leaves its stored decision there (attempt.c) */
    PX_CHECK(coord_job_preempt(c, a, s[k].job_id, s[k].state, by, &f));
    PX_CHECK(coord_fx_fault(fx, s[k].job_id, &f));
  }
  const char *placed = NULL;
  PX_CHECK(coord_preempt_place_waiter(c, a, fx, s[0].waiter, &placed));
  coord_fx_schedule(fx); /* nodes the waiting job did not need */
  px_log(PX_LOG_INFO, "preemption for %s: %zu jobs queued again%s, %s", s[0].waiter, n,
         late ? " (some did not stop in time)" : "",
         placed ? "it starts on their nodes" : "it no longer waits for them");
  return PX_OK;
}

/* In a transaction: ends the preemption under way (rows s[0..n)) when its
 * victims have all stopped or its grace is over (*commit 1). */
static px_status_t coord_preempt_progress(coord_t *c, coord_arena_t *a, coord_effects_t *fx,
                                          const coord_db_pstop_t *s, size_t n, int *commit) {
  int64_t now = coord_now_ms(), grace = c->cfg.sched.preempt_grace_s * 1000;
  int all = 1, late = 0;
  for (size_t k = 0; k < n; k++) {
    if (s[k].stopped != COORD_PSTOP_ASKED) continue;
    all = 0;
    if (now - s[k].asked_ms >= grace) late = 1;
  }
  if (!all && !late) return PX_OK;
  PX_CHECK(coord_preempt_finish(c, a, fx, s, n, late));
  *commit = 1;
  return PX_OK;
}

px_status_t coord_preempt_step(coord_t *c, coord_arena_t *a, coord_effects_t *fx, int ask,
                               int *commit, int *again) {
  *commit = *again = 0;
  coord_db_pstop_t *s = NULL;
  size_t n = 0;
  PX_CHECK(coord_db_sched_pstops(c, a, &s, &n));
  int gave_up = 0;
  if (n > 0 && s[0].stopped == COORD_PSTOP_SHRINK) /* elastic jobs giving nodes (shrink.c) */
    PX_CHECK(coord_shrink_progress(c, a, fx, s, n, commit, &gave_up));
  else if (n > 0) return coord_preempt_progress(c, a, fx, s, n, commit);
  if (n > 0 && !gave_up) return PX_OK;
  if (!ask && !gave_up) return PX_OK;
  coord_sched_view_t v;
  PX_CHECK(coord_sched_view(c, a, &v));
  long i = coord_preempt_waiter(&v);
  if (i < 0) return PX_OK;
  if (!gave_up) { /* elastic jobs shrink first; after one that did not, stop jobs */
    PX_CHECK(coord_shrink_ask(c, a, &v, (size_t)i, commit));
    if (*commit) return PX_OK;
  }
  int asked = 0;
  PX_CHECK(coord_preempt_ask(c, a, &v, (size_t)i, &asked));
  *again = asked; /* none to wait for (all cancelled): it ends at once */
  *commit |= asked;
  return PX_OK;
}

px_status_t coord_preempt_hold(coord_t *c, coord_arena_t *a, const char *job_id, int *held) {
  *held = 0;
  coord_db_pstop_t s;
  int found = 0;
  PX_CHECK(coord_db_sched_pstop_get(c, a, job_id, &s, &found));
  if (found && s.stopped == COORD_PSTOP_STOPPED) *held = 1; /* a repeated exit report */
  if (!found || s.stopped != COORD_PSTOP_ASKED) return PX_OK;
  Prunex__V1__ControlDecision *d = NULL;
  PX_CHECK(coord_db_control_decision(c, a, job_id, -1, &d));
  if (!d || !d->stop || strcmp(d->stop_reason, "preempted") != 0)
    return PX_OK; /* it ended on its own first */
  PX_CHECK(coord_db_sched_pstop_stopped(c, job_id, d->iteration));
  px_log(PX_LOG_INFO, "job %s stopped for %s at its checkpoint of iteration %d", job_id, s.by,
         d->iteration);
  *held = 1;
  return PX_OK;
}
