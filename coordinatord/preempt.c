/* Preemption (issue 31): with `preemption = on` in the config, the first
 * job in line that waits for nodes (the policy's COORD_WAIT_NODES) may take
 * the nodes of running jobs of a lower job priority (spec.priority) that
 * checkpoint; jobs without checkpoints are never preempted. The fewest
 * victims needed are chosen, lowest priority first and the latest started
 * first (the least work to redo). Each victim's attempt ends as a restart
 * does (coord_job_preempt: the same nodes preferred, stored decisions
 * kept) without using one of its restarts, and the waiting job is placed
 * on the nodes freed in the same transaction, so that no other job can
 * take them in between and the victim cannot take them back. The victim
 * resumes later from the newest checkpoint its ranks hold: the iterations
 * after it are run again and get the decisions stored for them, so the run
 * ends bit for bit as an uninterrupted one (the restart path's guarantee). */
#include <stdio.h>
#include <string.h>

#include "coord.h"
#include "prunex/check.h"

/* What one preemption did, for after the commit. */
typedef struct {
  char *waiter;
  coord_sched_victim_t *victims;
  coord_fault_t *faults;
  size_t nvictims;
} coord_preemption_t;

/* The first job in line waiting for nodes, or -1. */
static long coord_preempt_waiter(const coord_sched_view_t *v) {
  for (size_t r = 0; r < v->s.njobs; r++) {
    size_t i = v->s.order[r];
    if (v->s.jobs[i].wait == COORD_WAIT_NODES) return (long)i;
  }
  return -1;
}

/* In a transaction: preempts enough victims for job i of v and places it.
 * *done 0 when nothing could be done (the caller rolls back). */
static px_status_t coord_preempt_for(coord_t *c, coord_arena_t *a, const coord_sched_view_t *v,
                                     size_t i, coord_preemption_t *p, int *done) {
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
  PX_CHECK(coord_sched_preemptible(c, a, j->priority, j->per_node, &vic, &nv));
  int freed = 0;
  while (take < nv && freed < need) freed += vic[take++].fitting_nodes;
  if (freed < need) return PX_OK;
  p->faults = coord_alloc(a, take * sizeof *p->faults);
  if (!p->faults) return PX_ERR_NOMEM;
  char by[160];
  snprintf(by, sizeof by, "%s (priority %d)", v->job_ids[i], j->priority);
  for (size_t k = 0; k < take; k++) {
    PX_CHECK(coord_job_preempt(c, a, vic[k].job_id, vic[k].state, by, &p->faults[k]));
    px_log(PX_LOG_INFO, "job %s (priority %d) preempted by %s", vic[k].job_id, vic[k].priority,
           by);
  }
  p->victims = vic;
  p->nvictims = take;
  PX_CHECK(coord_fitting_nodes(c, a, j->per_node, j->nodes, v->prefer[i], &alive, &nodes, &names,
                               &ready));
  if ((int)ready < j->nodes) return PX_OK; /* a victim's node was not usable after all */
  PX_CHECK(coord_place(c, v->job_ids[i], j->per_node, nodes, names, j->nodes));
  p->waiter = v->job_ids[i];
  *done = 1;
  return PX_OK;
}

void coord_preempt_run(coord_t *c) {
  if (c->stopping) return;
  coord_arena_t a;
  coord_arena_init(&a);
  coord_sched_view_t v;
  coord_preemption_t p;
  memset(&p, 0, sizeof p);
  int done = 0;
  px_status_t rc = coord_sched_view(c, &a, &v);
  long i = rc == PX_OK ? coord_preempt_waiter(&v) : -1;
  if (i >= 0) {
    rc = px_store_begin(c->db);
    if (rc == PX_OK) rc = coord_preempt_for(c, &a, &v, (size_t)i, &p, &done);
    if (rc == PX_OK && done) rc = px_store_commit(c->db);
    if (rc != PX_OK || !done) px_store_rollback(c->db);
  }
  if (rc != PX_OK) px_log(PX_LOG_ERROR, "preemption: %s", px_last_error());
  if (rc == PX_OK && done) {
    /* the old attempts stop before the new job starts on their nodes */
    for (size_t k = 0; k < p.nvictims; k++) {
      coord_attempt_cancel(c, p.victims[k].job_id, &p.faults[k]);
      coord_job_changed(c, p.victims[k].job_id, NULL);
    }
    coord_push_assignments(c, p.waiter, PRUNEX__V1__ASSIGNMENT_ACTION__ASSIGNMENT_ACTION_START);
    coord_job_changed(c, p.waiter, NULL);
  }
  coord_arena_free(&a);
}
