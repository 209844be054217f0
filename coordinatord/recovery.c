/* Faults the coordinator finds on its own, from the heartbeat sweep (a
 * timer on the loop): nodes silent past the heartbeat timeout, a node whose
 * agent went away (its assignment stream closed and was not reopened within
 * the grace: gone.c), a node of a running job that stopped heartbeating,
 * and a placement whose nodes never started their ranks; then the time
 * limits (jobs.c). Each fault ends the current attempt of the job it
 * concerns with a reason that names the first cause (the node), gives the
 * node's ranks an exit record, releases the other nodes and tells them to
 * stop (attempt.c, then coord_commit), so that `rank_exits` agrees with the
 * job and nothing waits forever.
 *
 * Heartbeat ages count from this process's start at most, so a coordinator
 * outage never fails a job by itself. */
#include <stdio.h>
#include <string.h>

#include "db/db_core.h"
#include "db/membership.h"
#include "flow.h"
#include "rollcall.h"

#include "prunex/check.h"

/* Marks the node LOST in the open transaction and, when it holds an active
 * job, ends the job's attempt (recorded in fx); else lets go of the job it
 * names and asks for a scheduler pass. *known 0 when there is no such
 * node. */
static px_status_t coord_node_lost_tx(coord_t *c, coord_arena_t *a, const char *node_id,
                                      const char *why, coord_effects_t *fx, int *known) {
  coord_db_node_t node;
  PX_CHECK(coord_db_node_get(c, node_id, 0, known, &node));
  if (!*known) return PX_OK;
  PX_CHECK(coord_node_set_state(c, node_id, node.state, NS_LOST, why));
  coord_fx_schedule(fx);
  if (!node.job_id[0]) return PX_OK;
  int found, job_state = 0;
  PX_CHECK(coord_db_job_state(c, node.job_id, &found, &job_state));
  if (!coord_job_active(job_state)) return coord_db_node_set_job(c, node_id, "");
  char reason[640];
  coord_fault_t f;
  snprintf(reason, sizeof reason, "node %s (%s) lost: %s", node.name, node_id, why);
  /* an elastic job with enough nodes left goes on without it */
  int dropped = 0;
  char note[128];
  PX_CHECK(coord_membership_lose(c, a, node.job_id, job_state, node_id, reason, fx, &dropped,
                                 note, sizeof note));
  if (dropped) return PX_OK;
  size_t used = strlen(reason);
  snprintf(reason + used, sizeof reason - used, "%s", note);
  PX_CHECK(coord_job_fault_node(c, a, node.job_id, job_state, node_id, reason, &f));
  return coord_fx_fault(fx, node.job_id, &f);
}

px_status_t coord_node_lost(coord_t *c, const char *node_id, const char *why) {
  coord_arena_t a;
  coord_arena_init(&a);
  coord_effects_t fx;
  coord_effects_init(&fx, &a);
  int known = 0;
  px_status_t rc = px_store_begin(c->db);
  if (rc == PX_OK) rc = coord_node_lost_tx(c, &a, node_id, why, &fx, &known);
  rc = coord_commit_if(c, rc, known, &fx); /* an unknown node: nothing to keep */
  if (rc == PX_OK) coord_agent_back(c, node_id);
  coord_arena_free(&a);
  return rc;
}

/* SCHEDULED jobs with a node that has not started its ranks in time. */
static px_status_t coord_placement_sweep(coord_t *c, int64_t now) {
  coord_arena_t a;
  coord_arena_init(&a);
  char **ids = NULL;
  size_t n = 0;
  px_status_t rc;
  PX_CHECK_GOTO(coord_db_placements_overdue(c, &a, JS_SCHEDULED,
                                            now - c->cfg.placement_timeout_ms, c->started_ms,
                                            &ids, &n),
                rc, out);
  for (size_t i = 0; i < n; i++) {
    const char *job = ids[2 * i], *node = ids[2 * i + 1];
    if (i > 0 && !strcmp(job, ids[2 * (i - 1)])) continue; /* first node named */
    char name[256], reason[640];
    PX_CHECK_GOTO(coord_db_node_name(c, node, name, sizeof name), rc, out);
    snprintf(reason, sizeof reason,
             "placement timed out: node %s (%s) did not start its ranks within %d ms", name, node,
             c->cfg.placement_timeout_ms);
    coord_effects_t fx;
    coord_effects_init(&fx, &a);
    coord_fault_t f;
    PX_CHECK_GOTO(px_store_begin(c->db), rc, out);
    rc = coord_job_fault_node(c, &a, job, JS_SCHEDULED, node, reason, &f);
    if (rc == PX_OK) rc = coord_fx_fault(&fx, job, &f);
    rc = coord_commit_if(c, rc, 1, &fx);
    if (rc != PX_OK) goto out;
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
  size_t n = 0;
  /* Agents gone past their grace. */
  px_status_t rc = coord_agents_gone_before(c, &a, now - c->cfg.agent_grace_ms, &ids, &n);
  for (size_t i = 0; rc == PX_OK && i < n; i++) {
    int64_t since = coord_agent_gone_since(c, ids[i]);
    char why[256];
    snprintf(why, sizeof why,
             "its agent closed the assignment stream %lld ms ago and did not come back"
             " (grace %d ms)",
             (long long)(now - (since ? since : now)), c->cfg.agent_grace_ms);
    rc = coord_node_lost(c, ids[i], why);
  }
  /* Nodes holding an active job that stopped heartbeating (ages count from
   * this process's start at most: an outage of the coordinator is not the
   * node's fault). */
  ids = NULL;
  n = 0;
  if (rc == PX_OK)
    rc = coord_db_nodes_holding_silent(c, &a, JS_SCHEDULED, JS_RUNNING,
                                       now - c->cfg.heartbeat_timeout_ms, c->started_ms, &ids,
                                       &n);
  for (size_t i = 0; rc == PX_OK && i < n; i++) {
    char why[160];
    snprintf(why, sizeof why, "no heartbeat for more than %d ms", c->cfg.heartbeat_timeout_ms);
    rc = coord_node_lost(c, ids[i], why);
  }
  if (rc == PX_OK) rc = coord_placement_sweep(c, now);
  if (rc != PX_OK) px_log(PX_LOG_ERROR, "recovery sweep: %s", px_last_error());
  coord_arena_free(&a);
}

/* ---- the heartbeat sweep ------------------------------------------------------ */

/* Marks LOST, in one transaction, every node not LOST that has not
 * heartbeated since `before`, saying why (why NULL: how long it has been
 * silent against the timeout). */
static px_status_t coord_nodes_mark_lost(coord_t *c, int64_t before, const char *why) {
  coord_arena_t a;
  coord_arena_init(&a);
  coord_effects_t fx; /* nothing follows: a silent node of an active job is recovery's */
  coord_effects_init(&fx, &a);
  char **ids = NULL;
  int *states = NULL;
  int64_t *last = NULL;
  size_t n = 0;
  int64_t now = coord_now_ms();
  px_status_t rc = coord_db_nodes_silent(c, &a, NS_LOST, before, &ids, &states, &last, &n);
  if (rc == PX_OK && n > 0 && (rc = px_store_begin(c->db)) == PX_OK) {
    for (size_t i = 0; rc == PX_OK && i < n; i++) {
      char reason[128];
      if (!why)
        snprintf(reason, sizeof reason, "no heartbeat for %lld ms (timeout %d ms)",
                 (long long)(now - last[i]), c->cfg.heartbeat_timeout_ms);
      rc = coord_node_set_state(c, ids[i], states[i], NS_LOST, why ? why : reason);
    }
    rc = coord_commit_if(c, rc, 1, &fx);
  }
  coord_arena_free(&a);
  return rc;
}

/* When a node's cooldown for an elastic job has ended (membership.c), a
 * scheduler pass: the job may take the node back. */
static void coord_blacklist_wake(coord_t *c) {
  int64_t now = coord_now_ms();
  if (!c->blacklist_wake_ms || now < c->blacklist_wake_ms) return;
  int64_t next = 0;
  if (coord_db_blacklist_next_end(c, now, &next) != PX_OK)
    px_log(PX_LOG_ERROR, "blacklist: %s", px_last_error());
  c->blacklist_wake_ms = next;
  coord_schedule(c);
}

static void coord_sweep(uv_timer_t *t) {
  coord_t *c = t->data;
  if (coord_nodes_mark_lost(c, coord_now_ms() - c->cfg.heartbeat_timeout_ms, NULL) != PX_OK)
    px_log(PX_LOG_ERROR, "heartbeat sweep: %s", px_last_error());
  coord_recovery_sweep(c);
  coord_time_limit_sweep(c);
  coord_preempt_pass(c, 0);
  coord_blacklist_wake(c);
}

px_status_t coord_nodes_start(coord_t *c) {
  /* Nobody has heartbeated this process yet: every node is LOST until it
   * heartbeats or registers again. */
  PX_CHECK(coord_nodes_mark_lost(c, INT64_MAX, "coordinator restarted"));
  /* cooldowns that end after a restart still wake the scheduler */
  PX_CHECK(coord_db_blacklist_next_end(c, coord_now_ms(), &c->blacklist_wake_ms));
  int64_t every = c->cfg.heartbeat_timeout_ms / 5;
  if (every < 10) every = 10;
  if (every > 1000) every = 1000;
  uv_timer_init(c->loop, &c->sweep);
  c->sweep.data = c;
  uv_timer_start(&c->sweep, coord_sweep, (uint64_t)every, (uint64_t)every);
  return PX_OK;
}

void coord_nodes_stop(coord_t *c) {
  coord_agents_forget(c);
  coord_rollcalls_forget(c);
  uv_timer_stop(&c->sweep);
  uv_close((uv_handle_t *)&c->sweep, NULL);
}
