/* Preemption that shrinks (docs/operations.md): with `preemption = on`, the
 * first job in line waiting for nodes takes them from RUNNING elastic jobs
 * of a lower job priority above their elastic.min_nodes before it stops
 * any job (preempt.c): those jobs go on without the nodes.
 *
 * - Asked (coord_shrink_ask, from coord_preempt_step): the fewest victims
 *   needed, lowest priority first, each giving at most its nodes above
 *   min_nodes that fit the waiter, its highest node indexes first (rank 0's
 *   node stays). Each node taken is recorded as a drop of the victim
 *   (job_epoch_drops) while it stays in the placement, its reason "node N
 *   (ID) preempted by JOB (priority P)", and the victim has a preempt_stops
 *   row of kind COORD_PSTOP_SHRINK naming the waiter. Only when shrinking
 *   alone frees enough nodes; else the preemption that stops jobs is tried.
 * - The round boundary: the victim's next new decision makes the epoch
 *   without those nodes (membership.c: coord_db_epoch_without), in force
 *   from the next iteration; the ranks of the nodes left out stop there
 *   with stop reason "left" and exit 0 (pxworker's shrink by decision).
 * - Left: a rank of such a node (placed, not a member of the newest epoch)
 *   reporting its exit is not fenced (coord_shrink_rank_exit_ok); once
 *   every rank of the node has exited the node leaves the placement and is
 *   READY (coord_shrink_left), and once every node of the shrink has, the
 *   waiter is placed on them in the same transaction and the rows go.
 * - A victim that has not let its nodes go preemption_grace_s after being
 *   asked: the nodes already out of its epoch are freed and their workers
 *   told to stop; the drops whose boundary has not come are given up (the
 *   job keeps those nodes); the waiter is placed if it now fits, else the
 *   queue (and the next preemption pass) decide.
 *
 * Growing back needs joining (not built yet): coord_db_shrink_wanted_back
 * (db/shrink.h; Job.wanted_back, pxctl status) lists the nodes an elastic
 * job gave up to a preemption and does not hold now, for the scheduler to
 * offer it first when they free up. */
#include <stdio.h>
#include <string.h>

#include "shrink.h"

#include "db/db_core.h"
#include "db/shrink.h"

#include "prunex/check.h"

static int coord_shrink_in(char **ids, size_t n, const char *id) {
  for (size_t i = 0; i < n; i++)
    if (!strcmp(ids[i], id)) return 1;
  return 0;
}

/* ---- asking ---------------------------------------------------------------------- */

/* Of victim vic, up to `want` nodes above its min_nodes that fit per_node
 * devices, recorded as drops for waiter (by: "JOB (priority P)"); the
 * count into *took. With record 0 only counted. */
static px_status_t coord_shrink_take(coord_t *c, coord_arena_t *a, const coord_db_shrinkable_t *vic,
                                     int per_node, int want, const char *by, int record,
                                     int *took) {
  char **ids = NULL, **names = NULL;
  int *fits = NULL;
  size_t n = 0;
  *took = 0;
  PX_CHECK(coord_db_shrink_nodes(c, a, vic->job_id, per_node, &ids, &names, &fits, &n));
  int spare = (int)n - vic->min_nodes;
  int64_t now = coord_now_ms();
  for (size_t k = 0; k < n && spare > 0 && *took < want; k++) {
    if (!fits[k]) continue;
    spare--;
    (*took)++;
    if (!record) continue;
    char why[600];
    snprintf(why, sizeof why, "node %s (%s) preempted by %s", names[k], ids[k], by);
    PX_CHECK(coord_db_epoch_drop_put(c, vic->job_id, vic->attempt, ids[k], why, now));
    px_log(PX_LOG_INFO, "job %s (priority %d) gives node %s to %s at its next round boundary",
           vic->job_id, vic->priority, names[k], by);
  }
  return PX_OK;
}

px_status_t coord_shrink_ask(coord_t *c, coord_arena_t *a, const coord_sched_view_t *v, size_t i,
                             int *done) {
  const coord_sched_job_t *j = &v->s.jobs[i];
  *done = 0;
  int alive = 0;
  char **nodes = NULL, **names = NULL;
  size_t ready = 0;
  PX_CHECK(coord_fitting_nodes(c, a, j->per_node, j->nodes, v->prefer[i], &alive, &nodes, &names,
                               &ready));
  int need = j->nodes - (int)ready;
  if (need <= 0 || alive < j->nodes) return PX_OK;
  coord_db_shrinkable_t *vic = NULL;
  size_t nv = 0, take = 0;
  PX_CHECK(coord_db_shrinkable(c, a, j->priority, &vic, &nv));
  char by[160];
  snprintf(by, sizeof by, "%s (priority %d)", v->job_ids[i], j->priority);
  int freed = 0;
  for (; take < nv && freed < need; take++) {
    int took = 0;
    PX_CHECK(coord_shrink_take(c, a, &vic[take], j->per_node, need - freed, by, 0, &took));
    freed += took;
  }
  if (freed < need) return PX_OK; /* shrinking alone is not enough */
  freed = 0;
  int64_t now = coord_now_ms();
  for (size_t k = 0; k < take; k++) {
    int took = 0;
    PX_CHECK(coord_shrink_take(c, a, &vic[k], j->per_node, need - freed, by, 1, &took));
    freed += took;
    if (took)
      PX_CHECK(coord_db_sched_pstop_add(c, vic[k].job_id, v->job_ids[i], by, now,
                                        COORD_PSTOP_SHRINK));
  }
  *done = 1;
  return PX_OK;
}

/* ---- leaving --------------------------------------------------------------------- */

/* The job's placed nodes that are not members of its newest epoch (asked
 * to leave, the boundary passed), in arena a. */
static px_status_t coord_shrink_leaving(coord_t *c, coord_arena_t *a, const char *job_id,
                                        char ***out, size_t *n) {
  int attempt = 1, preemptions = 0, found = 0;
  PX_CHECK(coord_db_job_attempts(c, job_id, &attempt, &preemptions));
  coord_db_epoch_t e;
  PX_CHECK(coord_db_epoch_at(c, a, job_id, attempt, -1, &e, &found));
  char **ids = NULL;
  int *idx = NULL;
  size_t np = 0, cap = 0;
  *out = NULL;
  *n = 0;
  if (!found) return PX_OK;
  PX_CHECK(coord_db_job_places(c, a, job_id, &ids, &idx, &np));
  for (size_t i = 0; i < np; i++) {
    if (coord_db_epoch_has(&e, ids[i])) continue;
    char **slot = coord_push(a, (void **)out, n, &cap, sizeof *slot);
    if (!slot) return PX_ERR_NOMEM;
    *slot = ids[i];
  }
  return PX_OK;
}

/* The node leaves the job's placement and is free (LOST when its agent
 * has gone); with cancel its workers are told to stop. */
static px_status_t coord_shrink_free(coord_t *c, coord_arena_t *a, const char *job_id,
                                     const char *node_id, const char *why, int cancel,
                                     coord_effects_t *fx) {
  PX_CHECK(coord_db_job_place_remove(c, job_id, node_id));
  coord_db_node_t node;
  int known = 0;
  PX_CHECK(coord_db_node_get(c, node_id, 0, &known, &node));
  if (known && node.state == NS_BUSY) {
    int gone = coord_agent_is_gone(c, node_id);
    PX_CHECK(coord_node_set_state(c, node_id, NS_BUSY, gone ? NS_LOST : NS_READY,
                                  gone ? "its agent disconnected" : why));
  }
  if (cancel) {
    int attempt = 1, preemptions = 0;
    PX_CHECK(coord_db_job_attempts(c, job_id, &attempt, &preemptions));
    char **one = coord_alloc(a, sizeof *one);
    if (!one || !(one[0] = coord_strdup(a, node_id))) return PX_ERR_NOMEM;
    PX_CHECK(coord_fx_cancel_nodes(fx, job_id, attempt, one, 1));
  }
  px_log(PX_LOG_INFO, "job %s: node %s left: %s", job_id, node_id, why);
  return coord_fx_changed(fx, job_id);
}

/* How many nodes the shrink's victims s[0..n) still hold that they give. */
static px_status_t coord_shrink_pending(coord_t *c, coord_arena_t *a, const coord_db_pstop_t *s,
                                        size_t n, size_t *pending) {
  *pending = 0;
  for (size_t k = 0; k < n; k++) {
    char **ids = NULL;
    size_t nd = 0, nl = 0;
    PX_CHECK(coord_db_shrink_pending_drops(c, a, s[k].job_id, &ids, &nd));
    PX_CHECK(coord_shrink_leaving(c, a, s[k].job_id, &ids, &nl));
    *pending += nd + nl;
  }
  return PX_OK;
}

/* Ends the shrink s[0..n): the waiter placed on the ready nodes if it
 * still waits and fits, the rows gone, a scheduler pass. */
static px_status_t coord_shrink_finish(coord_t *c, coord_arena_t *a, coord_effects_t *fx,
                                       const coord_db_pstop_t *s, size_t n) {
  for (size_t k = 0; k < n; k++) PX_CHECK(coord_db_sched_pstop_drop(c, s[k].job_id));
  const char *placed = NULL;
  PX_CHECK(coord_preempt_place_waiter(c, a, fx, s[0].waiter, &placed));
  coord_fx_schedule(fx);
  px_log(PX_LOG_INFO, "preemption for %s: %zu elastic job%s shrank, %s", s[0].waiter, n,
         n == 1 ? "" : "s", placed ? "it starts on the nodes they gave" : "it no longer waits");
  return PX_OK;
}

px_status_t coord_shrink_progress(coord_t *c, coord_arena_t *a, coord_effects_t *fx,
                                  const coord_db_pstop_t *s, size_t n, int *commit,
                                  int *gave_up) {
  size_t pending = 0;
  *gave_up = 0;
  PX_CHECK(coord_shrink_pending(c, a, s, n, &pending));
  int64_t now = coord_now_ms(), grace = c->cfg.sched.preempt_grace_s * 1000;
  if (pending > 0 && now - s[0].asked_ms < grace) return PX_OK;
  for (size_t k = 0; pending > 0 && k < n; k++) {
    char **ids = NULL, why[400];
    size_t nl = 0, nd = 0;
    PX_CHECK(coord_db_shrink_pending_drops(c, a, s[k].job_id, &ids, &nd));
    *gave_up |= nd > 0;
    snprintf(why, sizeof why, "job %s did not let it go within %lld s of a preemption by %s",
             s[k].job_id, (long long)c->cfg.sched.preempt_grace_s, s[k].by);
    PX_CHECK(coord_shrink_leaving(c, a, s[k].job_id, &ids, &nl));
    for (size_t i = 0; i < nl; i++) PX_CHECK(coord_shrink_free(c, a, s[k].job_id, ids[i], why, 1, fx));
    PX_CHECK(coord_db_shrink_drops_revert(c, s[k].job_id)); /* no boundary came: kept */
  }
  *commit = 1;
  return coord_shrink_finish(c, a, fx, s, n);
}

int coord_shrink_rank_exit_ok(coord_t *c, const Prunex__V1__RankExit *r) {
  coord_arena_t a;
  coord_arena_init(&a);
  coord_db_pstop_t s;
  int found = 0, index = -1, leaving = 0;
  char node[128] = "";
  px_status_t rc = coord_db_sched_pstop_get(c, &a, r->job_id, &s, &found);
  if (rc == PX_OK && found && s.stopped == COORD_PSTOP_SHRINK)
    rc = coord_db_rank_place(c, r->job_id, r->rank, &found, &index, node, sizeof node);
  else found = 0;
  char **ids = NULL;
  size_t nl = 0;
  if (rc == PX_OK && found && node[0]) rc = coord_shrink_leaving(c, &a, r->job_id, &ids, &nl);
  leaving = rc == PX_OK && node[0] && coord_shrink_in(ids, nl, node);
  coord_arena_free(&a);
  return leaving;
}

px_status_t coord_shrink_left(coord_t *c, coord_arena_t *a, const Prunex__V1__RankExit *r,
                              coord_effects_t *fx) {
  int found = 0, state = 0, index = -1;
  char node[128] = "";
  PX_CHECK(coord_db_job_state(c, r->job_id, &found, &state));
  if (!found || !coord_job_active(state)) return PX_OK; /* it ended with that exit */
  PX_CHECK(coord_db_rank_place(c, r->job_id, r->rank, &found, &index, node, sizeof node));
  coord_db_pstop_t s;
  int pfound = 0;
  PX_CHECK(coord_db_sched_pstop_get(c, a, r->job_id, &s, &pfound));
  if (!found || !node[0] || !pfound) return PX_OK;
  int64_t ranks = 0, exited = 0;
  PX_CHECK(coord_db_shrink_node_exits(c, r->job_id, node, &ranks, &exited));
  if (exited < ranks) return PX_OK; /* the node's other ranks are still leaving */
  char why[400];
  snprintf(why, sizeof why, "left elastic job %s (preempted by %s)", r->job_id, s.by);
  PX_CHECK(coord_shrink_free(c, a, r->job_id, node, why, 0, fx));
  /* the shrink under way, every victim's row */
  coord_db_pstop_t *all = NULL;
  size_t n = 0, pending = 0;
  PX_CHECK(coord_db_sched_pstops(c, a, &all, &n));
  if (n == 0 || all[0].stopped != COORD_PSTOP_SHRINK) return PX_OK;
  PX_CHECK(coord_shrink_pending(c, a, all, n, &pending));
  return pending ? PX_OK : coord_shrink_finish(c, a, fx, all, n);
}
