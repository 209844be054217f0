/* Membership: who takes part in each round of a job's attempt. Every
 * placement starts epoch 1 with its nodes; an elastic job (spec.elastic)
 * that loses a member node while at least min_nodes would remain drops it
 * from its placement at once (its ranks get exit records, its workers a
 * CANCEL, the node is freed) and records the drop, and the next round
 * boundary (the next new decision of ReportIteration) makes it an epoch:
 * epoch + 1 with the nodes left, in force from the next iteration, carried
 * to the ranks in the decision. Below min_nodes the caller goes the way of
 * every other job (a restart from a checkpoint, or FAILED).
 *
 * Fencing: a rank of a node outside the placement, or one that says it is
 * in an epoch older than the one in force, is refused FAILED_PRECONDITION
 * naming the epoch (ReportIteration, KvPut, KvGet, ReportRankExit).
 *
 * Blacklisting: each loss of a node by an elastic job is counted per job;
 * the second within blacklist_window_ms keeps the node away from the job
 * for blacklist_cooldown_ms, doubled for each further loss (at most 64
 * times): the scheduler does not place the job's next attempt there.
 *
 * Everything runs in the caller's transaction and records what must follow
 * in its effects (effects.h). */
#include <stdio.h>
#include <string.h>

#include "db/db_core.h"
#include "db/membership.h"
#include "db/shrink.h"
#include "flow.h"

#include "prunex/check.h"

int coord_spec_elastic(const Prunex__V1__JobSpec *spec, int *min_nodes) {
  *min_nodes = 0;
  if (!spec || !spec->elastic || spec->elastic->min_nodes <= 0) return 0;
  *min_nodes = spec->elastic->min_nodes;
  return 1;
}

/* The placement now as an epoch's member lists (arena a); *count nodes. */
static px_status_t coord_members_now(coord_t *c, coord_arena_t *a, const char *job_id,
                                     coord_db_epoch_t *e, size_t *count) {
  char **ids = NULL;
  int *idx = NULL;
  size_t n = 0, cap = 1;
  PX_CHECK(coord_db_job_places(c, a, job_id, &ids, &idx, &n));
  for (size_t i = 0; i < n; i++) cap += strlen(ids[i]) + 1;
  e->node_ids = coord_alloc(a, cap);
  e->node_indexes = coord_alloc(a, 12 * n + 1);
  if (!e->node_ids || !e->node_indexes) return PX_ERR_NOMEM;
  size_t u = 0, v = 0;
  for (size_t i = 0; i < n; i++) {
    u += (size_t)snprintf(e->node_ids + u, cap - u, "%s%s", i ? "\n" : "", ids[i]);
    v += (size_t)snprintf(e->node_indexes + v, 12 * n + 1 - v, "%s%d", i ? "," : "", idx[i]);
  }
  *count = n;
  return PX_OK;
}

px_status_t coord_membership_start(coord_t *c, coord_arena_t *a, const char *job_id) {
  int attempt = 1, preemptions = 0;
  PX_CHECK(coord_db_job_attempts(c, job_id, &attempt, &preemptions));
  PX_CHECK(coord_db_epoch_drops_clear(c, job_id));
  coord_db_epoch_t e = {.attempt = attempt, .epoch = 1, .time_unix_ms = coord_now_ms()};
  size_t n = 0;
  PX_CHECK(coord_members_now(c, a, job_id, &e, &n));
  char reason[96];
  snprintf(reason, sizeof reason, "attempt %d placed on %zu node%s", attempt, n,
           n == 1 ? "" : "s");
  e.reason = reason;
  return coord_db_epoch_put(c, job_id, &e);
}

/* The next epoch, from the attempt's drops (none: nothing). */
static px_status_t coord_membership_advance(coord_t *c, coord_arena_t *a, const char *job_id,
                                            int attempt, int iteration, int joins) {
  char **drops = NULL, **why = NULL;
  size_t nd = 0;
  PX_CHECK(coord_db_epoch_drops(c, a, job_id, attempt, &drops, &why, &nd));
  if (nd == 0 && !joins) return PX_OK;
  coord_db_epoch_t last, e = {.attempt = attempt, .from_iteration = iteration + 1,
                              .time_unix_ms = coord_now_ms()};
  int found = 0;
  PX_CHECK(coord_db_epoch_at(c, a, job_id, attempt, -1, &last, &found));
  e.epoch = found ? last.epoch + 1 : 1;
  size_t n = 0;
  PX_CHECK(coord_members_now(c, a, job_id, &e, &n));
  PX_CHECK(coord_db_epoch_without(a, &e, drops, nd, &n)); /* nodes given to a preemption */
  /* the same members: nothing dropped or joined (join.c), or a node given,
   * then lost */
  if (nd == 0 && !found) return PX_OK;
  if (found && !strcmp(e.node_ids, last.node_ids))
    return nd ? coord_db_epoch_drops_clear(c, job_id) : PX_OK;
  char reason[2048] = "";
  size_t used = 0;
  for (size_t i = 0; i < nd && used + 8 < sizeof reason; i++)
    used += (size_t)snprintf(reason + used, sizeof reason - used, "%s%s", i ? "; " : "", why[i]);
  if (nd == 0) snprintf(reason, sizeof reason, "nodes joined: placement indexes %s",
                        e.node_indexes);
  e.reason = reason;
  PX_CHECK(coord_db_epoch_put(c, job_id, &e));
  PX_CHECK(coord_db_epoch_drops_clear(c, job_id));
  px_log(PX_LOG_INFO, "job %s: membership epoch %d from iteration %d: %zu node%s (%s)", job_id,
         e.epoch, e.from_iteration, n, n == 1 ? "" : "s", reason);
  return PX_OK;
}

px_status_t coord_membership_decide(coord_t *c, coord_arena_t *a, const char *job_id,
                                    int iteration, int advance,
                                    Prunex__V1__ControlDecision *d) {
  int attempt = 1, preemptions = 0, found = 0;
  PX_CHECK(coord_db_job_attempts(c, job_id, &attempt, &preemptions));
  if (advance != COORD_ADVANCE_NONE)
    PX_CHECK(coord_membership_advance(c, a, job_id, attempt, iteration,
                                      advance == COORD_ADVANCE_ALL));
  coord_db_epoch_t e;
  PX_CHECK(coord_db_epoch_at(c, a, job_id, attempt, iteration + 1, &e, &found));
  d->membership_epoch = 0;
  d->n_member_node_ids = d->n_member_node_indexes = 0;
  d->membership_from_iteration = 0;
  if (!found) return PX_OK; /* placed by a pxcoordd that kept no epochs */
  size_t n = 0;
  PX_CHECK(coord_db_epoch_members(a, &e, &d->member_node_ids, &d->member_node_indexes, &n));
  d->n_member_node_ids = d->n_member_node_indexes = n;
  d->membership_epoch = e.epoch;
  d->membership_from_iteration = e.from_iteration;
  return PX_OK;
}

/* The members as "a, b" for a message (at most cap bytes). */
static void coord_epoch_names(const coord_db_epoch_t *e, char *out, size_t cap) {
  snprintf(out, cap, "%s", e->node_ids);
  for (char *p = out; *p; p++)
    if (*p == '\n') *p = ',';
}

int coord_membership_fence(coord_t *c, px_rpc_srv_call_t *call, const char *what,
                           const char *job_id, int rank, int iteration, int epoch) {
  coord_arena_t a;
  coord_arena_init(&a);
  int ok = 1, found = 0, attempt = 1, preemptions = 0, index = -1;
  char node[128] = "", members[512];
  coord_db_epoch_t e, last;
  px_status_t rc = coord_db_job_attempts(c, job_id, &attempt, &preemptions);
  if (rc == PX_OK) rc = coord_db_epoch_at(c, &a, job_id, attempt, -1, &last, &found);
  if (rc == PX_OK && found)
    rc = coord_db_epoch_at(c, &a, job_id, attempt, iteration < 0 ? -1 : iteration, &e, &found);
  if (rc == PX_OK && found && rank >= 0) {
    int known = 0;
    rc = coord_db_rank_place(c, job_id, rank, &known, &index, node, sizeof node);
    if (rc == PX_OK && !known) index = -1; /* not a rank of the job: the handler says so */
  }
  if (rc != PX_OK) {
    coord_fail_internal(c, call);
    coord_arena_free(&a);
    return 0;
  }
  if (found) coord_epoch_names(&e, members, sizeof members);
  if (!found) {
    /* no epochs: placed by an older pxcoordd, nothing to fence on */
  } else if (index >= 0 && (!node[0] || (!coord_db_epoch_has(&e, node) && iteration >= 0))) {
    /* (a placed node not yet in an epoch is joining: it meets the others
     * through the store before its epoch is made; join.c) */
    ok = 0;
    px_rpc_srv_finish(call, PX_RPC_FAILED_PRECONDITION,
                      "%s: rank %d of job %s is on node %d (%s), which is not a member of "
                      "membership epoch %d (members: %s)",
                      what, rank, job_id, index, node[0] ? node : "dropped", e.epoch, members);
  } else if (epoch > 0 && (epoch < e.epoch || epoch > last.epoch)) {
    ok = 0;
    px_rpc_srv_finish(call, PX_RPC_FAILED_PRECONDITION,
                      "%s: membership epoch %d is %s; job %s is in epoch %d (members: %s)", what,
                      epoch, epoch < e.epoch ? "over" : "unknown", job_id, e.epoch, members);
  }
  coord_arena_free(&a);
  return ok;
}

/* Counts a loss of node_id by the job: the second within the window puts
 * the node in cooldown, doubled for each further loss. */
static px_status_t coord_membership_count_loss(coord_t *c, coord_arena_t *a, const char *job_id,
                                               const char *node_id, const char *reason) {
  int64_t now = coord_now_ms();
  coord_db_blacklist_t b;
  int found = 0;
  PX_CHECK(coord_db_blacklist_get(c, a, job_id, node_id, &b, &found));
  int failures = found && now - b.last_unix_ms <= c->cfg.blacklist_window_ms ? b.failures + 1 : 1;
  b.node_id = (char *)node_id;
  b.failures = failures;
  b.last_unix_ms = now;
  b.until_unix_ms = 0;
  b.reason = (char *)reason;
  if (failures >= 2) {
    int shift = failures - 2 > 6 ? 6 : failures - 2;
    b.until_unix_ms = now + ((int64_t)c->cfg.blacklist_cooldown_ms << shift);
    if (!c->blacklist_wake_ms || b.until_unix_ms < c->blacklist_wake_ms)
      c->blacklist_wake_ms = b.until_unix_ms;
    px_log(PX_LOG_INFO, "job %s: node %s lost %d times within %d ms: not taken back for %lld ms",
           job_id, node_id, failures, c->cfg.blacklist_window_ms,
           (long long)(b.until_unix_ms - now));
  }
  return coord_db_blacklist_put(c, job_id, &b);
}

/* The node leaves the job's placement: its ranks' exit records, the drop,
 * the node freed (LOST when its agent has gone), its workers cancelled. */
static px_status_t coord_membership_drop(coord_t *c, coord_arena_t *a, const char *job_id,
                                         int attempt, const char *node_id, const char *reason,
                                         coord_effects_t *fx) {
  int64_t now = coord_now_ms();
  PX_CHECK(coord_db_rank_exits_for_node(c, job_id, node_id, reason, now));
  PX_CHECK(coord_db_epoch_drop_put(c, job_id, attempt, node_id, reason, now));
  PX_CHECK(coord_db_job_place_remove(c, job_id, node_id));
  coord_db_node_t node;
  int known = 0;
  PX_CHECK(coord_db_node_get(c, node_id, 0, &known, &node));
  if (known && node.state == NS_BUSY) {
    int gone = coord_agent_is_gone(c, node_id);
    char why[300];
    snprintf(why, sizeof why, "dropped from elastic job %s", job_id);
    PX_CHECK(coord_node_set_state(c, node_id, NS_BUSY, gone ? NS_LOST : NS_READY,
                                  gone ? "its agent disconnected" : why));
  }
  char **one = coord_alloc(a, sizeof *one);
  if (!one || !(one[0] = coord_strdup(a, node_id))) return PX_ERR_NOMEM;
  PX_CHECK(coord_fx_cancel_nodes(fx, job_id, attempt, one, 1));
  PX_CHECK(coord_fx_changed(fx, job_id));
  coord_fx_schedule(fx);
  px_log(PX_LOG_INFO, "job %s: node %s dropped at the next round boundary: %s", job_id, node_id,
         reason);
  return PX_OK;
}

px_status_t coord_membership_lose(coord_t *c, coord_arena_t *a, const char *job_id, int state,
                                  const char *node_id, const char *reason, coord_effects_t *fx,
                                  int *dropped, char *note, size_t cap) {
  *dropped = 0;
  note[0] = '\0';
  int found = 0, js = 0, min_nodes = 0;
  Prunex__V1__JobSpec *spec = NULL;
  PX_CHECK(coord_job_lookup(c, a, job_id, &found, &js, &spec));
  if (!found || !coord_job_active(state) || !coord_spec_elastic(spec, &min_nodes)) return PX_OK;
  int attempt = 1, preemptions = 0;
  PX_CHECK(coord_db_job_attempts(c, job_id, &attempt, &preemptions));
  char **ids = NULL;
  int *idx = NULL;
  size_t n = 0, member = 0;
  PX_CHECK(coord_db_job_places(c, a, job_id, &ids, &idx, &n));
  for (size_t i = 0; i < n; i++) member |= !strcmp(ids[i], node_id);
  if (!member) {
    *dropped = 1; /* dropped before: nothing more to lose */
    return PX_OK;
  }
  /* nodes it gives to a preemption do not remain (shrink.c); losing one of
   * them takes nothing more, nor counts against the node */
  char **giving = NULL;
  size_t ng = 0, is_giving = 0;
  PX_CHECK(coord_db_shrink_giving(c, a, job_id, attempt, &giving, &ng));
  for (size_t i = 0; i < ng; i++) is_giving |= !strcmp(giving[i], node_id);
  if (!is_giving) PX_CHECK(coord_membership_count_loss(c, a, job_id, node_id, reason));
  int left = (int)(n - ng) - (is_giving ? 0 : 1);
  if (left < min_nodes) {
    snprintf(note, cap, " (elastic: %d node%s would remain, below min_nodes %d)", left,
             left == 1 ? "" : "s", min_nodes);
    px_log(PX_LOG_INFO, "job %s: losing node %s leaves %d node%s, below elastic.min_nodes %d: "
           "its attempt ends", job_id, node_id, left, left == 1 ? "" : "s", min_nodes);
    return PX_OK;
  }
  *dropped = 1;
  return coord_membership_drop(c, a, job_id, attempt, node_id, reason, fx);
}

px_status_t coord_membership_members(coord_t *c, const char *job_id, int *n) {
  coord_arena_t a;
  coord_arena_init(&a);
  char **ids = NULL;
  int *idx = NULL;
  size_t k = 0;
  px_status_t rc = coord_db_job_places(c, &a, job_id, &ids, &idx, &k);
  *n = (int)k;
  coord_arena_free(&a);
  return rc;
}

px_status_t coord_membership_blacklisted(coord_t *c, coord_arena_t *a, const char *job_id,
                                         char ***ids, size_t *n, char *why, size_t cap) {
  coord_db_blacklist_t *bl = NULL;
  int64_t now = coord_now_ms();
  PX_CHECK(coord_db_blacklist_active(c, a, job_id, now, &bl, n));
  why[0] = '\0';
  *ids = coord_alloc(a, (*n ? *n : 1) * sizeof **ids);
  if (!*ids) return PX_ERR_NOMEM;
  size_t used = 0;
  for (size_t i = 0; i < *n; i++) {
    (*ids)[i] = bl[i].node_id;
    if (used + 8 < cap)
      used += (size_t)snprintf(why + used, cap - used,
                               "%snode %s not taken back for %lld s (lost %d times: %.200s)",
                               i ? "; " : "", bl[i].name,
                               (long long)((bl[i].until_unix_ms - now + 999) / 1000),
                               bl[i].failures, bl[i].reason);
  }
  return PX_OK;
}
