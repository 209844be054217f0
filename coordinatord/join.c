/* Joining: an elastic job that runs on fewer nodes than its
 * elastic.max_nodes (cluster.nodes when not given larger; it dropped some,
 * membership.c, or was placed on cluster.nodes of more) takes a node at its
 * next round boundary: a node that came back (its agent registered again,
 * or blacklist_cooldown_ms after the job lost it) or any other READY node
 * that fits it, not in the job's cooldown. Past cluster.nodes the node's
 * index, ranks and world size number on (its workers' --num-nodes is the
 * placement's highest index + 1).
 *
 * The scheduler's pass calls coord_membership_grow after it has placed the
 * pending jobs (priority rule: a waiting job gets a free node before a
 * running elastic job grows; running jobs grow oldest first, one node per
 * job per pass). The node takes the lowest free placement index, its ranks
 * the numbers index * P + local rank, as coord_place gives them; its agent
 * gets the job's START (for that node only) with join_epoch, the epoch the
 * next round boundary makes with it (membership.c: a placement that grew
 * becomes the next epoch at the next new decision, as a drop does). Its
 * workers meet the others through the store in that epoch (pxworker's
 * --join-epoch, px_comm_join) and take the state from a kept rank.
 *
 * One change per epoch: a job with a drop or a join not yet made an epoch
 * is left for a later pass. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "db/db_core.h"
#include "db/membership.h"
#include "flow.h"

#include "prunex/check.h"

/* The lowest placement index of 0..M-1 the job's placement does not use;
 * *n_now: the nodes placed (-1 index when none is free). */
static px_status_t coord_join_index(coord_t *c, coord_arena_t *a, const char *job_id, int M,
                                    int *idx, size_t *n_now) {
  char **ids = NULL;
  int *used = NULL;
  PX_CHECK(coord_db_job_places(c, a, job_id, &ids, &used, n_now));
  *idx = -1;
  for (int i = 0; i < M && *idx < 0; i++) {
    int taken = 0;
    for (size_t k = 0; k < *n_now && !taken; k++) taken = used[k] == i;
    if (!taken) *idx = i;
  }
  return PX_OK;
}

/* Whether the job's last epoch is its placement now, with no drop waiting:
 * nothing pending, so a node may join. */
static px_status_t coord_join_settled(coord_t *c, coord_arena_t *a, const char *job_id,
                                      size_t n_now, int *settled, int *epoch) {
  int attempt = 1, preemptions = 0, found = 0;
  PX_CHECK(coord_db_job_attempts(c, job_id, &attempt, &preemptions));
  char **drops = NULL, **why = NULL;
  size_t nd = 0;
  PX_CHECK(coord_db_epoch_drops(c, a, job_id, attempt, &drops, &why, &nd));
  coord_db_epoch_t last;
  PX_CHECK(coord_db_epoch_at(c, a, job_id, attempt, -1, &last, &found));
  size_t members = 0;
  for (const char *p = found ? last.node_indexes : ""; *p; p++) members += *p == ',';
  if (found && last.node_indexes[0]) members++;
  *settled = found && nd == 0 && members == n_now;
  *epoch = found ? last.epoch : 0;
  return PX_OK;
}

/* Whether the job may take node_id: not one it lost, or one that came
 * back since (its agent registered again) or was away for the cooldown
 * (blacklist_cooldown_ms; a longer one for a node lost twice is the
 * blacklist's). A node whose worker just died, its agent still there, is
 * not taken straight back. */
static px_status_t coord_join_welcome(coord_t *c, coord_arena_t *a, const char *job_id,
                                      const char *node_id, int *ok) {
  coord_db_blacklist_t b;
  int found = 0;
  PX_CHECK(coord_db_blacklist_get(c, a, job_id, node_id, &b, &found));
  *ok = !found || coord_now_ms() - b.last_unix_ms >= c->cfg.blacklist_cooldown_ms;
  if (!*ok) PX_CHECK(coord_db_node_back_since(c, node_id, b.last_unix_ms, ok));
  return PX_OK;
}

/* A READY node with P devices for the job, not in its cooldown (NULL: none). */
static px_status_t coord_join_pick(coord_t *c, coord_arena_t *a, const char *job_id, int P,
                                   char **node, char **name) {
  char **black = NULL, **ids = NULL, **names = NULL, why[512];
  int *states = NULL;
  size_t nb = 0, n = 0;
  *node = *name = NULL;
  PX_CHECK(coord_membership_blacklisted(c, a, job_id, &black, &nb, why, sizeof why));
  PX_CHECK(coord_db_nodes_fitting(c, a, NS_READY, NS_READY, P, "", &ids, &names, &states, &n));
  for (size_t i = 0; i < n && !*node; i++) {
    int out = states[i] != NS_READY || coord_agent_is_gone(c, ids[i]);
    for (size_t b = 0; b < nb && !out; b++) out = !strcmp(ids[i], black[b]);
    int ok = 0;
    if (!out) PX_CHECK(coord_join_welcome(c, a, job_id, ids[i], &ok));
    if (!ok) continue;
    *node = ids[i];
    *name = names[i];
  }
  return PX_OK;
}

/* The job's ranks on node_id as placement index idx (coord_place's layout
 * for one node), the node BUSY. */
static px_status_t coord_join_place(coord_t *c, const char *job_id, int P, int idx, int M,
                                    const char *node_id) {
  int dev[4096], healthy[4096], n = 0;
  PX_REQUIRE(P >= 1 && P <= 4096, "job %s: %d workers per node", job_id, P);
  PX_CHECK(coord_db_node_devices_first(c, node_id, P, dev, healthy, &n));
  if (n < P) return px_set_error(PX_ERR_INTERNAL, "node %s has %d devices, needs %d", node_id, n, P);
  int leader = 0;
  while (leader < P && !healthy[leader]) leader++;
  if (leader == P) leader = 0;
  PX_CHECK(coord_db_place_clear_index(c, job_id, idx, P));
  for (int j = 0; j < P; j++) {
    char salt[33], hash[65];
    PX_CHECK(coord_rank_secret_new(c, salt, hash));
    coord_db_rank_t r = {.rank = idx * P + j, .node_index = idx, .local_rank = j,
                         .device_index = dev[j], .is_leader = j == leader, .salt = salt,
                         .hash = hash};
    PX_CHECK(coord_db_rank_insert(c, job_id, &r));
  }
  PX_CHECK(coord_db_job_node_insert(c, job_id, idx, node_id, idx * P + leader));
  PX_CHECK(coord_db_node_set_job(c, node_id, job_id));
  char why[192];
  snprintf(why, sizeof why, "joins running job %s as node %d of %d", job_id, idx, M);
  return coord_node_set_state(c, node_id, NS_READY, NS_BUSY, why);
}

/* One job: a node joins it when it is elastic, settled and a node fits. */
static px_status_t coord_join_job(coord_t *c, coord_arena_t *a, coord_effects_t *fx,
                                  const char *job_id, int M, int P, int waiting, int *grown) {
  int found = 0, js = 0, min_nodes = 0, idx, settled, epoch;
  Prunex__V1__JobSpec *spec = NULL;
  PX_CHECK(coord_job_lookup(c, a, job_id, &found, &js, &spec));
  if (!found || js != JS_RUNNING || !coord_spec_elastic(spec, &min_nodes)) return PX_OK;
  /* past cluster.nodes only while no job waits: a waiting job gets the
   * nodes an elastic job would merely gain */
  if (!waiting && spec->elastic->max_nodes > M) M = spec->elastic->max_nodes;
  size_t n_now = 0;
  PX_CHECK(coord_join_index(c, a, job_id, M, &idx, &n_now));
  if (idx < 0) return PX_OK;
  PX_CHECK(coord_join_settled(c, a, job_id, n_now, &settled, &epoch));
  if (!settled) return PX_OK;
  char *node = NULL, *name = NULL;
  PX_CHECK(coord_join_pick(c, a, job_id, P, &node, &name));
  if (!node) return PX_OK;
  PX_CHECK(coord_join_place(c, job_id, P, idx, M, node));
  char **one = coord_alloc(a, sizeof *one);
  if (!one || !(one[0] = coord_strdup(a, node))) return PX_ERR_NOMEM;
  PX_CHECK(coord_fx_start_nodes(fx, job_id, epoch + 1, one, 1));
  PX_CHECK(coord_fx_changed(fx, job_id));
  (*grown)++;
  px_log(PX_LOG_INFO, "job %s: node %s joins as node %d of %d at the next round boundary "
         "(membership epoch %d)", job_id, name, idx, M, epoch + 1);
  return PX_OK;
}

px_status_t coord_membership_join_epoch(coord_t *c, coord_arena_t *a, const char *job_id,
                                        int node_index, int *epoch) {
  int attempt = 1, preemptions = 0, found = 0;
  *epoch = 0;
  PX_CHECK(coord_db_job_attempts(c, job_id, &attempt, &preemptions));
  coord_db_epoch_t last;
  PX_CHECK(coord_db_epoch_at(c, a, job_id, attempt, -1, &last, &found));
  if (!found) return PX_OK;
  for (const char *p = last.node_indexes; p && *p;) {
    char *end;
    long v = strtol(p, &end, 10);
    if (end == p) break;
    if (v == node_index) return PX_OK; /* a member already */
    p = *end == ',' ? end + 1 : end;
  }
  *epoch = last.epoch + 1;
  return PX_OK;
}

px_status_t coord_membership_grow(coord_t *c, coord_arena_t *a, coord_effects_t *fx, int waiting,
                                  int *grown) {
  char **ids = NULL, **ready = NULL, **names = NULL;
  int *nodes = NULL, *per = NULL, *states = NULL;
  size_t n = 0, nready = 0;
  *grown = 0;
  /* no READY node: nothing can join (and no running job's spec is read) */
  PX_CHECK(coord_db_nodes_fitting(c, a, NS_READY, NS_READY, 1, "", &ready, &names, &states,
                                  &nready));
  if (nready == 0) return PX_OK;
  PX_CHECK(coord_db_jobs_short(c, a, !waiting, &ids, &nodes, &per, &n));
  for (size_t i = 0; i < n; i++)
    PX_CHECK(coord_join_job(c, a, fx, ids[i], nodes[i], per[i], waiting, grown));
  return PX_OK;
}
