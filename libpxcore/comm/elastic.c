/* Elastic membership of the data plane: what a survivor learns of
 * a lost peer, the survivors' agreement on who is left when no coordinator
 * names the members, and the rebuild of the three groups over a subset of
 * the nodes at a round boundary.
 *
 * A rebuild is a new communicator: new UCX context, worker and endpoints,
 * addresses exchanged through the rendezvous store under the key prefix
 * base + "/e<epoch>", so nothing of the old one (its tags, its sequence
 * numbers, a message of a lost rank still in flight) can reach the new one.
 * The old communicator is waited for (its executor idle) and destroyed
 * first. The job's node ids are kept (a member list names the same nodes in
 * every epoch); ranks are renumbered densely in their old order, and each
 * keeps its old node's leader.
 *
 * Whole nodes only: a rank lost inside a node drops its node (the node's
 * other ranks are left out of the next epoch). H-SADMM needs the same
 * number of ranks on every node (its z_i update weighs P ranks per node),
 * and a node with a rank missing is usually a node whose agent or link is
 * in trouble anyway.
 *
 * Joining: a member list may name nodes the old communicator does not have
 * (a node that comes back, a spare). The kept ranks then number the new
 * world in node order (a kept node's ranks in their old order, a joining
 * node with as many ranks as every kept node has) and put that plan in the
 * store under base + "/e<epoch>/plan"; the joining ranks, which have no old
 * communicator, read it there (px_comm_join) and create theirs directly at
 * that epoch, under the same prefix. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "comm/comm_int.h"
#include "prunex/comm_internal.h"
#include "px_clock.h"

int px_comm_lost(const px_comm_t *c, int *node, int *gone) {
  int r = c->lost_rank;
  if (node) *node = r >= 0 ? c->node_of[r] : -1;
  if (gone) *gone = r >= 0 && c->lost_hard;
  return r;
}

int px_comm_epoch(const px_comm_t *c) { return c->epoch; }

int px_comm_lost_ms(const px_comm_t *c) { return c->lost_ms; }

int px_comm_prev_rank(const px_comm_t *c, int rank) {
  if (rank < 0 || rank >= c->size) return -1;
  return c->prev_rank ? c->prev_rank[rank] : rank;
}

int px_comm_node_of(const px_comm_t *c, int rank) {
  return rank >= 0 && rank < c->size ? c->node_of[rank] : -1;
}

/* ---- fencing ------------------------------------------------------------------ */

/* Whether epoch was formed already (its rank 0 puts "<base>/e<epoch>/formed"
 * once every member is in): a rank that gets here now came too late (it
 * was stopped, or cut off) and must not touch the new epoch. */
static px_status_t px__formed(px_kv_t *kv, const char *base, int epoch, int *formed) {
  char key[300];
  snprintf(key, sizeof key, "%s/e%d/formed", base, epoch);
  void *val = NULL;
  size_t len = 0;
  px_status_t st = px_kv_get(kv, key, 0, &val, &len);
  px_free(val);
  *formed = st == PX_OK;
  return st == PX_ERR_TIMEOUT ? PX_OK : st;
}

static px_status_t px__fenced(int rank, int node, int epoch) {
  return px_set_error(PX_ERR_STATE, "rank %d (node %d): epoch %d was formed without it (fenced)",
                      rank, node, epoch);
}

/* ---- the survivors' agreement ------------------------------------------------ */

enum { PX__SV_UNKNOWN = 0, PX__SV_ALIVE = 1 };

/* One look at rank r's alive key: marks it alive, and the node of the
 * rank it names as lost as suspect. */
static px_status_t px__sv_look(px_comm_t *c, px_kv_t *kv, int epoch, int r, uint8_t *state,
                               uint8_t *suspect) {
  char key[300];
  snprintf(key, sizeof key, "%s/alive/%d/%d", c->prefix, epoch, r);
  void *val = NULL;
  size_t len = 0;
  px_status_t st = px_kv_get(kv, key, 0, &val, &len);
  if (st == PX_ERR_TIMEOUT) return PX_OK;
  PX_CHECK(st);
  int32_t lost[2] = {-1, 0}; /* the rank it lost, whether gone for sure */
  if (len == sizeof lost) memcpy(lost, val, sizeof lost);
  px_free(val);
  state[r] = PX__SV_ALIVE;
  if (lost[0] >= 0 && lost[0] < c->size && lost[1]) suspect[c->node_of[lost[0]]] = 1;
  return PX_OK;
}

/* Whether a rank not yet seen is still worth waiting for: its node is not
 * suspect (ranks of a node whose rank is gone for sure are looked at but
 * not waited for; a silent rank's node is waited for: the silent one may
 * be a survivor that was itself waiting). */
static int px__sv_waiting(const px_comm_t *c, const uint8_t *state, const uint8_t *suspect) {
  for (int r = 0; r < c->size; r++)
    if (state[r] == PX__SV_UNKNOWN && !suspect[c->node_of[r]]) return 1;
  return 0;
}

static px_status_t px__sv_collect(px_comm_t *c, px_kv_t *kv, int epoch, int wait_ms,
                                  uint8_t *state, uint8_t *suspect) {
  double end = px__now_ms() + wait_ms;
  state[c->rank] = PX__SV_ALIVE;
  if (c->lost_rank >= 0 && c->lost_hard) suspect[c->node_of[c->lost_rank]] = 1;
  for (;;) {
    for (int r = 0; r < c->size; r++)
      if (state[r] == PX__SV_UNKNOWN) PX_CHECK(px__sv_look(c, kv, epoch, r, state, suspect));
    if (!px__sv_waiting(c, state, suspect) || px__now_ms() >= end) return PX_OK;
    struct timespec ts = {0, 2000000L};
    nanosleep(&ts, NULL);
  }
}

px_status_t px_comm_survivors(px_comm_t *c, px_kv_t *kv, int epoch, int wait_ms, int *nodes,
                              int cap, int *n) {
  PX_REQUIRE(c && kv && nodes && n, "px_comm_survivors: NULL argument");
  PX_REQUIRE(wait_ms >= 0, "px_comm_survivors: wait %d ms", wait_ms);
  PX_REQUIRE(epoch > c->epoch, "px_comm_survivors: epoch %d is not after the communicator's %d",
             epoch, c->epoch);
  *n = 0;
  int formed;
  PX_CHECK(px__formed(kv, c->base, epoch, &formed));
  if (formed) return px__fenced(c->rank, c->node, epoch);
  char key[300];
  snprintf(key, sizeof key, "%s/alive/%d/%d", c->prefix, epoch, c->rank);
  int32_t mine[2] = {c->lost_rank, c->lost_hard};
  PX_CHECK(px_kv_put(kv, key, mine, sizeof mine));
  uint8_t *state = px_calloc((size_t)c->size, 1, "comm.survivors");
  uint8_t *suspect = px_calloc((size_t)c->node_span, 1, "comm.survivors");
  px_status_t st = PX_ERR_NOMEM;
  if (state && suspect) st = px__sv_collect(c, kv, epoch, wait_ms, state, suspect);
  /* a node is kept when every rank of it answered */
  uint8_t *dropped = suspect; /* reused */
  if (st == PX_OK) {
    memset(dropped, 0, (size_t)c->node_span);
    for (int r = 0; r < c->size; r++)
      if (state[r] != PX__SV_ALIVE) dropped[c->node_of[r]] = 1;
    for (int id = 0; id < c->node_span && st == PX_OK; id++) {
      if (c->leader_of[id] < 0 || dropped[id]) continue;
      if (*n >= cap)
        st = px_set_error(PX_ERR_INVALID, "px_comm_survivors: more than %d nodes left", cap);
      else nodes[(*n)++] = id;
    }
  }
  PX_FREE_ALL(state, suspect);
  return st;
}

/* ---- rebuild ------------------------------------------------------------------ */

static int px__int_cmp(const void *a, const void *b) {
  int x = *(const int *)a, y = *(const int *)b;
  return (x > y) - (x < y);
}

/* The new world from old and the sorted member nodes: node_of[n],
 * prev[n], leader[old span] (leader per node id, in new ranks), *me (this
 * rank's new rank, -1 when its node is out), *n. */
static void px__rebuild_map(const px_comm_t *old, const int *sorted, int nn, int *node_of,
                            int *prev, int *leader, int *me, int *n) {
  *n = 0;
  *me = -1;
  for (int id = 0; id < old->node_span; id++) leader[id] = -1;
  for (int r = 0; r < old->size; r++) {
    int id = old->node_of[r];
    if (!bsearch(&id, sorted, (size_t)nn, sizeof *sorted, px__int_cmp)) continue;
    if (r == old->rank) *me = *n;
    if (old->leader_of[id] == r) leader[id] = *n;
    node_of[*n] = id;
    prev[(*n)++] = r;
  }
}

/* The member list: node ids without repeats, sorted into sorted[nn]; *joining:
 * how many are not nodes of old (they join with old's ranks per node,
 * which must then be the same on every node: *per). */
static px_status_t px__rebuild_check(const px_comm_t *old, const int *nodes, int nn, int epoch,
                                     int join, int *sorted, int *joining, int *per) {
  PX_REQUIRE(epoch > old->epoch,
             "px_comm_rebuild: epoch %d is not after the communicator's epoch %d (stale decision)",
             epoch, old->epoch);
  memcpy(sorted, nodes, (size_t)nn * sizeof *sorted);
  qsort(sorted, (size_t)nn, sizeof *sorted, px__int_cmp);
  *joining = 0;
  *per = old->size / old->nnodes;
  for (int i = 0; i < nn; i++) {
    int id = sorted[i];
    PX_REQUIRE(id >= 0 && id < PX__MAX_RANKS, "px_comm_rebuild: node id %d of the member list "
               "outside 0..%d", id, PX__MAX_RANKS - 1);
    PX_REQUIRE(i == 0 || sorted[i - 1] != id, "px_comm_rebuild: node %d listed twice", id);
    int known = id < old->node_span && old->leader_of[id] >= 0;
    PX_REQUIRE(known || join, "px_comm_rebuild: node %d of the member list is not a node of "
               "epoch %d", id, old->epoch);
    *joining += !known;
  }
  if (!*joining) return PX_OK;
  int *count = px_calloc((size_t)old->node_span, sizeof *count, "comm.rebuild");
  if (!count) return PX_ERR_NOMEM;
  for (int r = 0; r < old->size; r++) count[old->node_of[r]]++;
  int uneven = -1;
  for (int id = 0; id < old->node_span && uneven < 0; id++)
    if (old->leader_of[id] >= 0 && count[id] != *per) uneven = id;
  int has = uneven >= 0 ? count[uneven] : 0;
  px_free(count);
  PX_REQUIRE(uneven < 0 && *per * old->nnodes == old->size,
             "px_comm_rebuild: %d nodes join epoch %d, but the nodes of epoch %d have different "
             "rank counts (node %d: %d, %d on average): a joining node's ranks are not known",
             *joining, epoch, old->epoch, uneven, has, *per);
  return PX_OK;
}

/* The new world when nodes join (sorted[nn], per ranks on each): ranks in
 * node order, a kept node's ranks in their old order, a joining node's
 * ranks new (prev -1, the first one its leader); leader[span] as in
 * px__rebuild_map. */
static void px__rebuild_map_join(const px_comm_t *old, const int *sorted, int nn, int per,
                                 int span, int *node_of, int *prev, int *leader, int *me,
                                 int *n) {
  *n = 0;
  *me = -1;
  for (int id = 0; id < span; id++) leader[id] = -1;
  for (int i = 0; i < nn; i++) {
    int id = sorted[i];
    if (id < old->node_span && old->leader_of[id] >= 0) {
      for (int r = 0; r < old->size; r++) {
        if (old->node_of[r] != id) continue;
        if (r == old->rank) *me = *n;
        if (old->leader_of[id] == r) leader[id] = *n;
        node_of[*n] = id;
        prev[(*n)++] = r;
      }
      continue;
    }
    leader[id] = *n;
    for (int k = 0; k < per; k++) {
      node_of[*n] = id;
      prev[(*n)++] = -1;
    }
  }
}

/* The new world as a joining rank reads it: the plan of an epoch that
 * nodes join, put by every kept rank under "<base>/e<epoch>/plan":
 * int32 n, nn, span, then node_of[n], prev[n], sorted[nn], leader[span]. */
static px_status_t px__plan_put(px_kv_t *kv, const char *base, int epoch, int n, int nn,
                                int span, const int *node_of, const int *prev,
                                const int *sorted, const int *leader) {
  size_t words = 3 + 2 * (size_t)n + (size_t)nn + (size_t)span;
  int32_t *p = px_malloc(words * sizeof *p, "comm.plan");
  if (!p) return PX_ERR_NOMEM;
  size_t k = 0;
  p[k++] = n;
  p[k++] = nn;
  p[k++] = span;
  for (int i = 0; i < n; i++) p[k++] = node_of[i];
  for (int i = 0; i < n; i++) p[k++] = prev[i];
  for (int i = 0; i < nn; i++) p[k++] = sorted[i];
  for (int i = 0; i < span; i++) p[k++] = leader[i];
  char key[300];
  snprintf(key, sizeof key, "%s/e%d/plan", base, epoch);
  px_status_t st = px_kv_put(kv, key, p, words * sizeof *p);
  px_free(p);
  return st;
}

/* The options of the rebuilt communicator: old's, with the new prefix and
 * leaders. */
static void px__rebuild_opts(const px_comm_t *old, int epoch, const int *leader, char *prefix,
                             size_t cap, px_comm_opts_t *o) {
  px_comm_opts_default(o);
  o->timeout_ms = old->timeout_ms;
  o->bucket_bytes = old->bucket_bytes;
  o->allreduce_algo = old->allreduce_algo;
  o->allgather_algo = old->allgather_algo;
  o->small_bytes = old->small_bytes;
  o->nccl = old->use_nccl;
  o->cuda_device = old->cuda_device;
  o->lost_ms = old->lost_ms;
  o->leader_of_node = leader;
  snprintf(prefix, cap, "%s/e%d", old->base, epoch);
  o->key_prefix = prefix;
}

/* Every member built the same list: a mismatch fails every rank. */
static px_status_t px__rebuild_agree(px_comm_t *c, const int *sorted, int nn, int epoch) {
  uint64_t h = 0x243F6A8885A308D3ull;
  for (int i = 0; i < nn; i++) h = px__hash3(h, (uint64_t)sorted[i], (uint64_t)i);
  px_status_t st = px__agree(&c->groups[PX_GROUP_WORLD], 0x7E, h, (uint64_t)epoch, (uint64_t)nn);
  if (st == PX_ERR_MISMATCH)
    return px_set_error(st, "px_comm_rebuild: the ranks of epoch %d were given different member "
                        "lists (%d nodes here)", epoch, nn);
  return st;
}

/* Creates the new communicator (old already destroyed) and checks that
 * every member was given the same list. */
static px_status_t px__rebuild_create(int me, int n, const int *node_of, px_kv_t *kv,
                                      const px_comm_opts_t *o, const char *base, int epoch,
                                      const int *sorted, int nn, int **prev, px_comm_t **out) {
  px_comm_t *c = NULL;
  PX_CHECK(px__comm_create(me, n, node_of, kv, o, &c));
  c->epoch = epoch;
  snprintf(c->base, sizeof c->base, "%s", base);
  c->prev_rank = *prev;
  *prev = NULL;
  px_status_t st = px__rebuild_agree(c, sorted, nn, epoch);
  if (st == PX_OK && c->rank == 0) { /* fences whoever comes later */
    char key[300];
    snprintf(key, sizeof key, "%s/e%d/formed", base, epoch);
    st = px_kv_put(kv, key, sorted, (size_t)nn * sizeof *sorted);
  }
  if (st == PX_OK) st = px__barrier(&c->groups[PX_GROUP_WORLD]);
  if (st < 0) {
    px_comm_destroy(c);
    return st;
  }
  *out = c;
  return PX_OK;
}

/* The new world over sorted[nn] (nodes joining: node order, the plan put
 * for the joining ranks; none: old order); the arrays sized by the caller. */
static px_status_t px__rebuild_world(const px_comm_t *old, px_kv_t *kv, int epoch,
                                     const int *sorted, int nn, int joining, int per, int span,
                                     int *node_of, int *prev, int *leader, int *me, int *n) {
  if (!joining) {
    px__rebuild_map(old, sorted, nn, node_of, prev, leader, me, n);
    return PX_OK;
  }
  px__rebuild_map_join(old, sorted, nn, per, span, node_of, prev, leader, me, n);
  if (*me < 0) return PX_OK; /* left out: it does not speak for the epoch */
  return px__plan_put(kv, old->base, epoch, *n, nn, span, node_of, prev, sorted, leader);
}

static px_status_t px__rebuild(px_comm_t *old, const int *nodes, int nnodes, int epoch,
                               px_kv_t *kv, int join, px_comm_t **out) {
  PX_REQUIRE(out != NULL && old != NULL && kv != NULL, "px_comm_rebuild: NULL argument");
  PX_REQUIRE(nodes != NULL && nnodes >= 1 && nnodes <= PX__MAX_RANKS,
             "px_comm_rebuild: %d member nodes", nnodes);
  px_status_t st = PX_OK;
  int span = old->node_span;
  for (int i = 0; i < nnodes; i++)
    if (nodes[i] >= span && nodes[i] < PX__MAX_RANKS) span = nodes[i] + 1;
  size_t cap = (size_t)old->size * (1 + (size_t)nnodes); /* ranks, with joining nodes */
  int *sorted = px_malloc((size_t)nnodes * sizeof *sorted, "comm.rebuild");
  int *node_of = px_malloc(cap * sizeof *node_of, "comm.rebuild");
  int *prev = px_malloc(cap * sizeof *prev, "comm.rebuild");
  int *leader = px_malloc((size_t)span * sizeof *leader, "comm.rebuild");
  if (!sorted || !node_of || !prev || !leader) {
    st = PX_ERR_NOMEM;
    goto out;
  }
  /* a bad or stale list leaves old as it was */
  int joining = 0, per = 0;
  PX_CHECK_GOTO(px__rebuild_check(old, nodes, nnodes, epoch, join, sorted, &joining, &per), st,
                out);
  int formed;
  PX_CHECK_GOTO(px__formed(kv, old->base, epoch, &formed), st, out);
  int me = -1, n = 0;
  if (!formed)
    PX_CHECK_GOTO(px__rebuild_world(old, kv, epoch, sorted, nnodes, joining, per, span, node_of,
                                    prev, leader, &me, &n), st, out);
  char prefix[256], base[208];
  px_comm_opts_t o;
  px__rebuild_opts(old, epoch, leader, prefix, sizeof prefix, &o);
  snprintf(base, sizeof base, "%s", old->base);
  int old_rank = old->rank, old_node = old->node;
  *out = NULL; /* may be where old was: px_comm_rebuild(c, ..., &c) */
  /* from here old is gone, with nothing of it in flight */
  px_comm_destroy(old);
  if (formed)
    st = px__fenced(old_rank, old_node, epoch);
  else if (me < 0)
    st = px_set_error(PX_ERR_STATE, "rank %d: its node %d is not a member of epoch %d", old_rank,
                      old_node, epoch);
  else
    st = px__rebuild_create(me, n, node_of, kv, &o, base, epoch, sorted, nnodes, &prev, out);
out:
  PX_FREE_ALL(sorted, node_of, prev, leader);
  return st;
}

px_status_t px_comm_rebuild(px_comm_t *old, const int *nodes, int nnodes, int epoch, px_kv_t *kv,
                            px_comm_t **out) {
  return px__rebuild(old, nodes, nnodes, epoch, kv, 0, out);
}

px_status_t px_comm_rebuild_join(px_comm_t *old, const int *nodes, int nnodes, int epoch,
                                 px_kv_t *kv, px_comm_t **out) {
  return px__rebuild(old, nodes, nnodes, epoch, kv, 1, out);
}

/* ---- joining ------------------------------------------------------------------ */

/* The plan of epoch (px__plan_put) for up to wait_ms: the kept ranks put
 * it when they reach the boundary. */
static px_status_t px__plan_get(px_kv_t *kv, const char *base, int epoch, int wait_ms,
                                int32_t **plan, size_t *words) {
  char key[300];
  snprintf(key, sizeof key, "%s/e%d/plan", base, epoch);
  double end = px__now_ms() + wait_ms;
  void *val = NULL;
  size_t len = 0;
  px_status_t st;
  for (;;) { /* in slices: the store's own wait may be shorter than ours */
    int left = (int)(end - px__now_ms());
    st = px_kv_get(kv, key, left < 1000 ? (left > 0 ? left : 0) : 1000, &val, &len);
    if (st != PX_ERR_TIMEOUT || px__now_ms() >= end) break;
  }
  if (st == PX_ERR_TIMEOUT)
    return px_set_error(st, "joining epoch %d: its members did not reach the boundary within "
                        "%d ms (no %s)", epoch, wait_ms, key);
  PX_CHECK(st);
  int32_t *p = val;
  *words = len / sizeof *p;
  size_t need = *words >= 3 ? 3 + 2 * (size_t)p[0] + (size_t)p[1] + (size_t)p[2] : 0;
  if (*words < 3 || p[0] < 1 || p[0] > PX__MAX_RANKS || p[1] < 1 || p[2] < 1 ||
      p[2] > PX__MAX_RANKS || need != *words) {
    px_free(val);
    return px_set_error(PX_ERR_FORMAT, "joining epoch %d: %s holds %zu bytes, not a plan",
                        epoch, key, len);
  }
  *plan = p;
  return PX_OK;
}

/* This rank's place in the plan: the local-th rank of node (which must be
 * one of the joining ranks). */
static px_status_t px__plan_find(const int32_t *p, int node, int local, int epoch, int *me) {
  int n = p[0], k = 0;
  const int32_t *node_of = p + 3, *prev = p + 3 + n;
  *me = -1;
  for (int r = 0; r < n && *me < 0; r++)
    if (node_of[r] == node && k++ == local) *me = r;
  if (*me < 0)
    return px_set_error(PX_ERR_STATE, "joining epoch %d: node %d has no rank %d in it (%d "
                        "ranks of it)", epoch, node, local, k);
  if (prev[*me] >= 0)
    return px_set_error(PX_ERR_STATE, "joining epoch %d: node %d was a member before it (its "
                        "rank %d is kept, not joining)", epoch, node, local);
  return PX_OK;
}

px_status_t px_comm_join(px_kv_t *kv, const px_comm_opts_t *opts, int node, int local, int epoch,
                         int wait_ms, px_comm_t **out) {
  PX_REQUIRE(kv && opts && out, "px_comm_join: NULL argument");
  PX_REQUIRE(node >= 0 && local >= 0 && epoch >= 1 && wait_ms >= 0,
             "px_comm_join: node %d, local rank %d, epoch %d, wait %d ms", node, local, epoch,
             wait_ms);
  *out = NULL;
  px_comm_opts_t o = *opts;
  const char *base = o.key_prefix ? o.key_prefix : "px";
  PX_REQUIRE(strlen(base) < 200, "px_comm_join: key prefix too long");
  int formed;
  PX_CHECK(px__formed(kv, base, epoch, &formed));
  if (formed)
    return px_set_error(PX_ERR_STATE, "node %d: epoch %d was formed without it (fenced: it came "
                        "too late to join)", node, epoch);
  int32_t *p = NULL;
  size_t words;
  PX_CHECK(px__plan_get(kv, base, epoch, wait_ms, &p, &words));
  int me, n = p[0], nn = p[1], span = p[2];
  px_status_t st = px__plan_find(p, node, local, epoch, &me);
  int *node_of = px_malloc((size_t)n * sizeof *node_of, "comm.join");
  int *prev = px_malloc((size_t)n * sizeof *prev, "comm.join");
  int *sorted = px_malloc((size_t)nn * sizeof *sorted, "comm.join");
  int *leader = px_malloc((size_t)span * sizeof *leader, "comm.join");
  if (st == PX_OK && (!node_of || !prev || !sorted || !leader)) st = PX_ERR_NOMEM;
  if (st == PX_OK) {
    for (int i = 0; i < n; i++) node_of[i] = p[3 + i], prev[i] = p[3 + n + i];
    for (int i = 0; i < nn; i++) sorted[i] = p[3 + 2 * n + i];
    for (int i = 0; i < span; i++) leader[i] = p[3 + 2 * n + nn + i];
    char prefix[256], b[208];
    snprintf(b, sizeof b, "%s", base);
    snprintf(prefix, sizeof prefix, "%s/e%d", b, epoch);
    o.key_prefix = prefix;
    o.leader_of_node = leader;
    st = px__rebuild_create(me, n, node_of, kv, &o, b, epoch, sorted, nn, &prev, out);
  }
  PX_FREE_ALL(p, node_of, prev, sorted, leader);
  return st;
}
