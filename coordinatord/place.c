/* Placement: a job's ranks laid out on the nodes chosen for it, and the
 * scheduler's pass that chooses them (the policy is sched.h's; what the
 * pass decided is committed and sent by coord_schedule, effects.c). */
#include <stdio.h>
#include <string.h>
#include <time.h>

#include "db/db_core.h"
#include "flow.h"

#include "prunex/check.h"

/* Places the job on the given nodes: ranks node by node, a leader per node
 * (local rank 0 unless its device is unhealthy), nodes BUSY, job SCHEDULED.
 * In a transaction. */
px_status_t coord_place(coord_t *c, const char *job_id, int P, char **nodes, char **names,
                        int M) {
  char reason[512];
  int used = snprintf(reason, sizeof reason, "placed on %d node%s:", M, M == 1 ? "" : "s");
  for (int i = 0; i < M; i++) {
    int dev[4096], healthy[4096], n = 0;
    if (P > 4096) return px_set_error(PX_ERR_INVALID, "job %s: %d workers per node", job_id, P);
    PX_CHECK(coord_db_node_devices_first(c, nodes[i], P, dev, healthy, &n));
    if (n < P) return px_set_error(PX_ERR_INTERNAL, "node %s has %d devices, needs %d", nodes[i], n, P);
    int leader = 0;
    while (leader < P && !healthy[leader]) leader++;
    if (leader == P) leader = 0; /* none healthy: rank 0 leads, the job will tell */
    for (int j = 0; j < P; j++) {
      char salt[33], hash[65];
      PX_CHECK(coord_rank_secret_new(c, salt, hash));
      coord_db_rank_t r = {.rank = i * P + j, .node_index = i, .local_rank = j,
                           .device_index = dev[j], .is_leader = j == leader, .salt = salt,
                           .hash = hash};
      PX_CHECK(coord_db_rank_insert(c, job_id, &r));
    }
    PX_CHECK(coord_db_job_node_insert(c, job_id, i, nodes[i], i * P + leader));
    PX_CHECK(coord_db_node_set_job(c, nodes[i], job_id));
    char why[192];
    snprintf(why, sizeof why, "runs job %s as node %d of %d", job_id, i, M);
    PX_CHECK(coord_node_set_state(c, nodes[i], NS_READY, NS_BUSY, why));
    if (used < (int)sizeof reason)
      used += snprintf(reason + used, sizeof reason - (size_t)used, " %s", names[i]);
  }
  PX_CHECK(coord_job_set_state(c, job_id, JS_PENDING, JS_SCHEDULED, reason));
  coord_arena_t a;
  coord_arena_init(&a);
  px_status_t rc = coord_membership_start(c, &a, job_id); /* epoch 1: these nodes */
  coord_arena_free(&a);
  return rc;
}

/* Counts the nodes that could ever take a job of P devices per node now
 * (registered, not LOST, agent connected: *alive) and lists the READY ones
 * among them, up to M (*ready): first those named in prefer ('\n' around
 * each id: a restarted job's previous nodes), then the others, last those
 * named "-ID" in prefer (the node its placement timed out on), each group
 * in registration order. */
px_status_t coord_fitting_nodes(coord_t *c, coord_arena_t *a, int P, int M, const char *prefer,
                                int *alive, char ***nodes, char ***names, size_t *ready) {
  char **ids = NULL, **nm = NULL;
  int *states = NULL;
  size_t n = 0;
  *alive = 0;
  *ready = 0;
  PX_CHECK(coord_db_nodes_fitting(c, a, NS_READY, NS_BUSY, P, prefer, &ids, &nm, &states, &n));
  size_t k = 0;
  for (size_t i = 0; i < n; i++) {
    if (coord_agent_is_gone(c, ids[i])) continue;
    (*alive)++;
    if (states[i] != NS_READY || (int)k >= M) continue;
    ids[k] = ids[i];
    nm[k] = nm[i];
    k++;
  }
  *nodes = ids;
  *names = nm;
  *ready = k;
  return PX_OK;
}

static double coord_clock_ms(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec * 1e3 + (double)ts.tv_nsec / 1e6;
}

/* Each waiting job's reason says why it waits (rewritten only when it
 * changed): held and dependency waits say so (sched_view.c); a job whose
 * dependency can never be met is CANCELLED with that reason, as Slurm's
 * kill_invalid_depend does (recorded in fx; *cancelled counts them: the
 * jobs that wait for it may now never start either). */
static px_status_t coord_schedule_reasons(coord_t *c, const coord_sched_view_t *v,
                                          coord_effects_t *fx, int *cancelled) {
  for (size_t i = 0; i < v->s.njobs; i++) {
    const coord_sched_job_t *j = &v->s.jobs[i];
    if (j->start) continue;
    if (v->never[i]) {
      PX_CHECK(coord_job_set_state(c, v->job_ids[i], JS_PENDING, JS_CANCELLED, v->blocked[i]));
      PX_CHECK(coord_fx_changed(fx, v->job_ids[i]));
      (*cancelled)++;
      px_log(PX_LOG_INFO, "job %s cancelled: %s", v->job_ids[i], v->blocked[i]);
      continue;
    }
    char why[400];
    if (v->blocked[i]) snprintf(why, sizeof why, "%s", v->blocked[i]);
    else coord_sched_reason(j, 0, why, sizeof why);
    if (strcmp(why, v->reasons[i]) != 0) PX_CHECK(coord_sched_set_reason(c, v->job_ids[i], why));
  }
  return PX_OK;
}

/* The nodes coord_fitting_nodes picks for a job, less those the job does
 * not take back now (an elastic job's blacklist, membership.c): *ready
 * of them, at most M; why names the left-out nodes ("" : none). */
static px_status_t coord_fitting_for_job(coord_t *c, coord_arena_t *a, const char *job_id,
                                         int P, int M, const char *prefer, char ***nodes,
                                         char ***names, size_t *ready, char *why, size_t cap) {
  char **black = NULL;
  size_t nb = 0;
  int alive = 0;
  PX_CHECK(coord_membership_blacklisted(c, a, job_id, &black, &nb, why, cap));
  PX_CHECK(coord_fitting_nodes(c, a, P, M + (int)nb, prefer, &alive, nodes, names, ready));
  size_t k = 0;
  for (size_t i = 0; i < *ready; i++) {
    int out = 0;
    for (size_t b = 0; b < nb && !out; b++) out = !strcmp((*nodes)[i], black[b]);
    if (out || (int)k >= M) continue;
    (*nodes)[k] = (*nodes)[i];
    (*names)[k] = (*names)[i];
    k++;
  }
  *ready = k;
  return PX_OK;
}

/* The policy (sched.h) orders the pending jobs over a snapshot and says
 * which start now; the jobs to start are placed in the policy's order, on
 * the nodes coord_fitting_nodes picks (a restarted job's previous nodes
 * first). A job the policy started that finds too few nodes after all (the
 * snapshot's node counts against the preferences) ends the pass: the next
 * event schedules again. */
px_status_t coord_schedule_pass(coord_t *c, coord_arena_t *a, coord_effects_t *fx, int *again) {
  coord_sched_view_t v;
  size_t nplaced = 0;
  int cancelled = 0;
  *again = 0;
  double t0 = coord_clock_ms();
  PX_CHECK(coord_sched_view(c, a, &v));
  double t1 = coord_clock_ms();
  PX_CHECK(px_store_begin(c->db));
  px_status_t rc = coord_schedule_reasons(c, &v, fx, &cancelled);
  for (size_t r = 0; rc == PX_OK && r < v.s.njobs; r++) {
    size_t i = v.s.order[r];
    const coord_sched_job_t *j = &v.s.jobs[i];
    if (!j->start) continue;
    char **nodes = NULL, **names = NULL, why[600];
    size_t ready = 0;
    rc = coord_fitting_for_job(c, a, v.job_ids[i], j->per_node, j->nodes, v.prefer[i], &nodes,
                               &names, &ready, why, sizeof why);
    if (rc == PX_OK && (int)ready < j->nodes && why[0]) {
      /* its blacklist keeps it waiting; the jobs behind it may go */
      char reason[700];
      snprintf(reason, sizeof reason, "waiting for nodes: %s", why);
      if (strcmp(reason, v.reasons[i]) != 0) rc = coord_sched_set_reason(c, v.job_ids[i], reason);
      continue;
    }
    if (rc != PX_OK || (int)ready < j->nodes) break;
    rc = coord_place(c, v.job_ids[i], j->per_node, nodes, names, j->nodes);
    if (rc == PX_OK)
      rc = coord_fx_push(fx, v.job_ids[i], PRUNEX__V1__ASSIGNMENT_ACTION__ASSIGNMENT_ACTION_START);
    if (rc == PX_OK) rc = coord_fx_changed(fx, v.job_ids[i]);
    if (rc == PX_OK) nplaced++;
    if (rc == PX_OK && j->backfill)
      px_log(PX_LOG_INFO, "job %s backfilled: its time limit ends before the first waiting"
             " job can start", v.job_ids[i]);
  }
  int grown = 0; /* the pending jobs first: then running elastic jobs grow (join.c) */
  if (rc == PX_OK) rc = coord_membership_grow(c, a, fx, (int)(v.s.njobs - nplaced), &grown);
  if (rc != PX_OK) {
    px_store_rollback(c->db);
    coord_effects_clear(fx);
    nplaced = 0;
  }
  *again = rc == PX_OK && cancelled > 0;
  /* bench/sched reads these lines for the decision latency of a pass */
  px_log(PX_LOG_DEBUG, "scheduler pass: %zu pending, %zu nodes, %zu started in %.2f ms"
         " (snapshot and policy %.2f ms)", v.s.njobs, v.s.nnodes, nplaced,
         coord_clock_ms() - t0, t1 - t0);
  return rc;
}

px_status_t coord_preempt_place_waiter(coord_t *c, coord_arena_t *a, coord_effects_t *fx,
                                       const char *waiter, const char **placed) {
  *placed = NULL;
  coord_sched_view_t v;
  PX_CHECK(coord_sched_view(c, a, &v));
  for (size_t i = 0; i < v.s.njobs; i++) {
    if (strcmp(v.job_ids[i], waiter) != 0) continue;
    const coord_sched_job_t *j = &v.s.jobs[i];
    int alive = 0;
    char **nodes = NULL, **names = NULL;
    size_t ready = 0;
    PX_CHECK(coord_fitting_nodes(c, a, j->per_node, j->nodes, v.prefer[i], &alive, &nodes,
                                 &names, &ready));
    if ((int)ready < j->nodes) break; /* a node went away meanwhile: the queue decides */
    PX_CHECK(coord_place(c, v.job_ids[i], j->per_node, nodes, names, j->nodes));
    PX_CHECK(coord_fx_push(fx, v.job_ids[i],
                           PRUNEX__V1__ASSIGNMENT_ACTION__ASSIGNMENT_ACTION_START));
    PX_CHECK(coord_fx_changed(fx, v.job_ids[i]));
    *placed = v.job_ids[i];
    break;
  }
  return PX_OK;
}
