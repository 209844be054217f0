/* The communicator: creation from the rank-to-node map (groups world, intra,
 * inter), argument checks, the executor that runs operations in call order
 * (blocking ones on the caller's thread, non-blocking ones on a progress
 * thread started on first use), the dispatch between the UCX algorithms and
 * NCCL, the bucketed list reduction, and the traffic counters.
 *
 * Executor rule: at any moment at most one thread drives the UCX worker
 * (exec_busy, under mu). A blocking call first waits until no non-blocking
 * operation is pending, then runs inline; the progress thread runs queued
 * operations one by one; px_comm_abort from another thread only raises a
 * flag unless the worker is idle. So the worker can be
 * UCS_THREAD_MODE_SERIALIZED and every rank executes its collectives in the
 * order they were called, which is what keeps the ranks' sequence numbers in
 * step. */
#include <stdio.h>
#include <string.h>

#include "comm/comm_int.h"
#include "prunex/comm_internal.h"
#include "prunex/kv_internal.h"

void px_comm_opts_default(px_comm_opts_t *o) {
  memset(o, 0, sizeof *o);
  o->timeout_ms = PX_COMM_DEFAULT_TIMEOUT_MS;
  o->bucket_bytes = PX_COMM_DEFAULT_BUCKET_BYTES;
  o->key_prefix = PX_COMM_DEFAULT_KEY_PREFIX;
}

int px_comm_nccl_built(void) { return px__nccl_built(); }

/* ---- groups ---------------------------------------------------------------- */

static px_status_t px__group_init(px_comm_t *c, px_group_kind_t kind, const int *members, int n) {
  px_group_t *g = &c->groups[kind];
  g->c = c;
  g->kind = kind;
  g->size = n;
  g->rank = -1;
  g->world = px_malloc((size_t)n * sizeof *g->world, "comm.group.world");
  g->blk_off = px_malloc(((size_t)n + 1) * sizeof *g->blk_off, "comm.group.off");
  g->blk_len = px_malloc((size_t)n * sizeof *g->blk_len, "comm.group.len");
  if (!g->world || !g->blk_off || !g->blk_len) return PX_ERR_NOMEM;
  for (int i = 0; i < n; i++) {
    g->world[i] = members[i];
    if (members[i] == c->rank) g->rank = i;
  }
  c->has_group[kind] = 1;
  return PX_OK;
}

static void px__group_fini(px_group_t *g) {
  if (g->nccl) px__nccl_destroy(g->nccl, atomic_load(&g->c->failed) != 0);
  g->nccl = NULL;
  px_free(g->world);
  px_free(g->blk_off);
  px_free(g->blk_len);
  g->world = NULL;
  g->blk_off = NULL;
  g->blk_len = NULL;
}

/* world, intra (ranks of my node) and, on leaders, inter (one leader per
 * node, in node-id order); c->leader_of keeps each node's leader */
static px_status_t px__groups_build(px_comm_t *c, const int *leader_of_node) {
  int n = c->size, span = c->node_span;
  int *members = px_malloc((size_t)n * sizeof *members, "comm.members");
  int *leader = px_malloc((size_t)span * sizeof *leader, "comm.leaders");
  c->leader_of = leader;
  px_status_t st = PX_OK;
  if (!members || !leader) {
    st = PX_ERR_NOMEM;
    goto out;
  }
  for (int i = 0; i < n; i++) members[i] = i;
  PX_CHECK_GOTO(px__group_init(c, PX_GROUP_WORLD, members, n), st, out);
  int m = 0;
  for (int i = 0; i < n; i++)
    if (c->node_of[i] == c->node) members[m++] = i;
  PX_CHECK_GOTO(px__group_init(c, PX_GROUP_INTRA, members, m), st, out);
  /* leader[id]: -1 for a node id nobody has, else its leader */
  for (int id = 0; id < span; id++) leader[id] = -1;
  for (int i = n - 1; i >= 0; i--) leader[c->node_of[i]] = i;
  c->nnodes = 0;
  m = 0;
  int i_lead = 0;
  for (int id = 0; id < span; id++) {
    if (leader[id] == -1) continue;
    c->nnodes++;
    if (leader_of_node) leader[id] = leader_of_node[id];
    if (leader[id] < 0 || leader[id] >= n || c->node_of[leader[id]] != id) {
      st = px_set_error(PX_ERR_INVALID, "leader_of_node[%d] = %d is not a rank of node %d", id,
                        leader[id], id);
      goto out;
    }
    members[m++] = leader[id];
    if (leader[id] == c->rank) i_lead = 1;
  }
  if (i_lead) PX_CHECK_GOTO(px__group_init(c, PX_GROUP_INTER, members, m), st, out);
out:
  px_free(members);
  return st;
}

/* ---- create / destroy ------------------------------------------------------ */

px_status_t px_comm_create(int rank, int world_size, const int *node_of_rank, px_kv_t *kv,
                           const px_comm_opts_t *opts, px_comm_t **out) {
  PX_REQUIRE(out != NULL, "px_comm_create: out is NULL");
  *out = NULL;
  PX_REQUIRE(world_size >= 1 && world_size <= PX__MAX_RANKS,
             "px_comm_create: world size %d outside 1..%d", world_size, PX__MAX_RANKS);
  PX_REQUIRE(node_of_rank != NULL, "px_comm_create: node map is NULL");
  for (int i = 0; i < world_size; i++)
    PX_REQUIRE(node_of_rank[i] >= 0 && node_of_rank[i] < world_size,
               "px_comm_create: node id %d of rank %d outside 0..%d", node_of_rank[i], i,
               world_size - 1);
  return px__comm_create(rank, world_size, node_of_rank, kv, opts, out);
}

/* The options with defaults where opts leaves them unset. */
static void px__opts_resolve(const px_comm_opts_t *opts, px_comm_opts_t *o) {
  px_comm_opts_default(o);
  if (!opts) return;
  if (opts->timeout_ms > 0) o->timeout_ms = opts->timeout_ms;
  if (opts->bucket_bytes > 0) o->bucket_bytes = opts->bucket_bytes;
  if (opts->key_prefix) o->key_prefix = opts->key_prefix;
  o->leader_of_node = opts->leader_of_node;
  o->nccl = opts->nccl;
  o->cuda_device = opts->cuda_device;
  o->allreduce_algo = opts->allreduce_algo;
  o->allgather_algo = opts->allgather_algo;
  o->small_bytes = opts->small_bytes;
  o->lost_ms = opts->lost_ms;
}

px_status_t px__comm_create(int rank, int world_size, const int *node_of_rank, px_kv_t *kv,
                            const px_comm_opts_t *opts, px_comm_t **out) {
  PX_REQUIRE(out != NULL, "px_comm_create: out is NULL");
  *out = NULL;
  PX_REQUIRE(world_size >= 1 && world_size <= PX__MAX_RANKS,
             "px_comm_create: world size %d outside 1..%d", world_size, PX__MAX_RANKS);
  PX_REQUIRE(rank >= 0 && rank < world_size, "px_comm_create: rank %d outside 0..%d", rank,
             world_size - 1);
  PX_REQUIRE(node_of_rank != NULL && kv != NULL, "px_comm_create: node map or kv store is NULL");
  int span = 0;
  for (int i = 0; i < world_size; i++) {
    PX_REQUIRE(node_of_rank[i] >= 0 && node_of_rank[i] < PX__MAX_RANKS,
               "px_comm_create: node id %d of rank %d outside 0..%d", node_of_rank[i], i,
               PX__MAX_RANKS - 1);
    if (node_of_rank[i] + 1 > span) span = node_of_rank[i] + 1;
  }
  px_comm_opts_t o;
  px__opts_resolve(opts, &o);
  PX_REQUIRE(o.lost_ms >= 0, "px_comm_create: lost_ms %d is negative", o.lost_ms);
  PX_REQUIRE(o.timeout_ms > 0, "px_comm_create: timeout %d ms", o.timeout_ms);
  PX_REQUIRE(strlen(o.key_prefix) < 200, "px_comm_create: key prefix too long");
  char probe[256];
  snprintf(probe, sizeof probe, "%s/ucx/%d", o.key_prefix, world_size);
  PX_CHECK(px_kv_key_validate(probe));
  if (o.nccl && !px__nccl_built())
    return px_set_error(PX_ERR_NOT_BUILT,
                        "px_comm_create: NCCL requested but libpxcore was built without CUDA");

  px_status_t st = PX_OK;
  px_comm_t *c = px_calloc(1, sizeof *c, "comm");
  if (!c) return PX_ERR_NOMEM;
  c->rank = rank;
  c->size = world_size;
  c->node_span = span;
  c->timeout_ms = o.timeout_ms;
  c->lost_ms = o.lost_ms;
  c->lost_rank = -1;
  snprintf(c->prefix, sizeof c->prefix, "%s", o.key_prefix);
  snprintf(c->base, sizeof c->base, "%s", o.key_prefix);
  c->bucket_bytes = o.bucket_bytes;
  c->allreduce_algo = o.allreduce_algo;
  c->allgather_algo = o.allgather_algo;
  c->small_bytes = o.small_bytes;
  c->use_nccl = o.nccl;
  c->cuda_device = o.cuda_device;
  pthread_mutex_init(&c->mu, NULL);
  pthread_cond_init(&c->cv, NULL);
  c->node_of = px_malloc((size_t)world_size * sizeof *c->node_of, "comm.node_of");
  if (!c->node_of) {
    st = PX_ERR_NOMEM;
    goto fail;
  }
  memcpy(c->node_of, node_of_rank, (size_t)world_size * sizeof *c->node_of);
  c->node = node_of_rank[rank];
  PX_CHECK_GOTO(px__groups_build(c, o.leader_of_node), st, fail);
  PX_CHECK_GOTO(px__ucx_init(c, kv, o.key_prefix), st, fail);
  /* every rank is reachable before anyone proceeds */
  PX_CHECK_GOTO(px__barrier(&c->groups[PX_GROUP_WORLD]), st, fail);
  if (o.nccl) {
    char key[256];
    for (int k = 0; k < 3; k++) {
      if (!c->has_group[k] || c->groups[k].rank < 0) continue;
      if (k == PX_GROUP_WORLD) snprintf(key, sizeof key, "%s/nccl/world", o.key_prefix);
      else if (k == PX_GROUP_INTRA) snprintf(key, sizeof key, "%s/nccl/intra/%d", o.key_prefix, c->node);
      else snprintf(key, sizeof key, "%s/nccl/inter", o.key_prefix);
      PX_CHECK_GOTO(px__nccl_create(&c->groups[k], o.cuda_device, kv, key, o.timeout_ms,
                                    &c->groups[k].nccl),
                    st, fail);
    }
  }
  *out = c;
  return PX_OK;
fail: {
  char msg[512];
  snprintf(msg, sizeof msg, "%s", px_last_error());
  if (!atomic_load(&c->failed)) atomic_store(&c->failed, st);
  px_comm_destroy(c);
  return px_set_error(st, "%s", msg);
}
}

void px_comm_destroy(px_comm_t *c) {
  if (!c) return;
  pthread_mutex_lock(&c->mu);
  while (c->pending > 0 || c->exec_busy) pthread_cond_wait(&c->cv, &c->mu);
  c->stop = 1;
  pthread_cond_broadcast(&c->cv);
  pthread_mutex_unlock(&c->mu);
  if (c->thread_started) pthread_join(c->thread, NULL);
  for (int k = 0; k < 3; k++)
    if (c->has_group[k]) px__group_fini(&c->groups[k]);
  px__ucx_fini(c);
  while (c->all_reqs) {
    px_comm_req_t *q = c->all_reqs;
    c->all_reqs = q->all_next;
    px_free(q);
  }
  px_free(c->tmp);
  px_free(c->bucket);
  PX_FREE_ALL(c->node_of, c->leader_of, c->prev_rank);
  pthread_mutex_destroy(&c->mu);
  pthread_cond_destroy(&c->cv);
  px_free(c);
}

void px_comm_abort(px_comm_t *c, px_status_t st) {
  if (!c) return;
  if (st >= 0) st = PX_ERR_PEER;
  pthread_mutex_lock(&c->mu);
  int expected = 0;
  atomic_compare_exchange_strong(&c->abort_req, &expected, st);
  /* idle: break it here; otherwise whoever drives the worker notices */
  int idle = c->pending == 0 && !c->exec_busy;
  if (idle) c->exec_busy = 1;
  pthread_mutex_unlock(&c->mu);
  if (!idle) return;
  (void)px__check_health(c);
  pthread_mutex_lock(&c->mu);
  c->exec_busy = 0;
  pthread_cond_broadcast(&c->cv);
  pthread_mutex_unlock(&c->mu);
}

int px_comm_rank(const px_comm_t *c) { return c->rank; }
int px_comm_size(const px_comm_t *c) { return c->size; }
int px_comm_node(const px_comm_t *c) { return c->node; }
int px_comm_nnodes(const px_comm_t *c) { return c->nnodes; }
px_status_t px_comm_status(const px_comm_t *c) {
  return atomic_load(&((px_comm_t *)c)->failed);
}

px_group_t *px_comm_group(px_comm_t *c, px_group_kind_t kind) {
  if (!c || (int)kind < 0 || kind > PX_GROUP_INTER || !c->has_group[kind]) return NULL;
  return &c->groups[kind];
}

px_group_kind_t px_group_kind(const px_group_t *g) { return g->kind; }
int px_group_rank(const px_group_t *g) { return g->rank; }
int px_group_size(const px_group_t *g) { return g->size; }
int px_group_nccl(const px_group_t *g) { return g && g->nccl; }
int px_group_world_rank(const px_group_t *g, int i) {
  return i >= 0 && i < g->size ? g->world[i] : -1;
}

/* ---- traffic --------------------------------------------------------------- */

void px_comm_traffic(const px_comm_t *c, px_comm_traffic_t *out) {
  px_comm_t *m = (px_comm_t *)c;
  for (int t = 0; t < 2; t++) {
    out->sent[t] = atomic_load(&m->sent[t]);
    out->recv[t] = atomic_load(&m->recvd[t]);
  }
}

uint64_t px_comm_tier_bytes(const px_comm_t *c, px_comm_tier_t tier) {
  px_comm_t *m = (px_comm_t *)c;
  return atomic_load(&m->sent[tier]) + atomic_load(&m->recvd[tier]);
}

void px_comm_traffic_reset(px_comm_t *c) {
  for (int t = 0; t < 2; t++) {
    atomic_store(&c->sent[t], 0);
    atomic_store(&c->recvd[t], 0);
  }
}

/* NCCL reports no wire bytes: count what its ring moves per rank, with the
 * ring in group-rank order (send to the right, receive from the left). */
static void px__nccl_account(px_group_t *g, uint64_t sent, uint64_t recvd) {
  px_comm_t *c = g->c;
  if (g->size < 2) return;
  int right = g->world[(g->rank + 1) % g->size];
  int left = g->world[(g->rank - 1 + g->size) % g->size];
  atomic_fetch_add(&c->sent[px__tier(c, right)], sent);
  atomic_fetch_add(&c->recvd[px__tier(c, left)], recvd);
}

/* ---- execution ------------------------------------------------------------- */

static px_status_t px__nccl_failed(px_comm_t *c, px_status_t st) {
  char msg[256];
  snprintf(msg, sizeof msg, "%s", px_last_error());
  return px__fail(c, st, "NCCL: %s", msg);
}

static px_status_t px__allreduce_any(px_group_t *g, const void *send, void *recv, size_t count,
                                     px_comm_dtype_t dt, px_comm_op_t op) {
  px_comm_t *c = g->c;
  if (g->nccl && (px__nccl_is_device_ptr(recv) || px__nccl_is_device_ptr(send))) {
    PX_CHECK(px__agree(g, PX__OP_ALLREDUCE, count, (uint64_t)dt, (uint64_t)op));
    px_status_t st = px__nccl_allreduce(g->nccl, send, recv, count, dt, op, c->timeout_ms);
    if (st < 0) return px__nccl_failed(c, st);
    uint64_t n = (uint64_t)g->size, b = count * px_comm_dtype_size(dt);
    uint64_t v = 2 * (n - 1) * b / n;
    px__nccl_account(g, v, v);
    return PX_OK;
  }
  return px__allreduce(g, send, recv, count, dt, op);
}

static void *px__bucket(px_comm_t *c, size_t bytes) {
  if (bytes <= c->bucket_cap) return c->bucket;
  px_free(c->bucket);
  c->bucket = px_malloc_aligned(bytes, "comm.bucket");
  c->bucket_cap = c->bucket ? bytes : 0;
  return c->bucket;
}

/* Runs of small tensors are packed into the bucket and reduced together; a
 * tensor alone in its run, or larger than a bucket, is reduced in place
 * (slice by slice). Device tensors go to NCCL one by one. Every rank builds
 * the same plan from the same counts. */
static px_status_t px__allreduce_list(px_group_t *g, void *const *bufs, const size_t *counts,
                                      int n, px_comm_dtype_t dt, px_comm_op_t op) {
  px_comm_t *c = g->c;
  size_t esz = px_comm_dtype_size(dt);
  size_t cap = c->bucket_bytes / esz;
  if (cap == 0) cap = 1;
  int device = 0;
  for (int i = 0; i < n && g->nccl; i++)
    if (counts[i]) {
      device = px__nccl_is_device_ptr(bufs[i]);
      break;
    }
  int i = 0;
  while (i < n) {
    if (counts[i] == 0) {
      i++;
      continue;
    }
    if (device || counts[i] >= cap) {
      char *p = bufs[i];
      for (size_t off = 0; off < counts[i]; off += cap) {
        size_t len = counts[i] - off < cap ? counts[i] - off : cap;
        PX_CHECK(px__allreduce_any(g, p + off * esz, p + off * esz, len, dt, op));
      }
      i++;
      continue;
    }
    int j = i;
    size_t tot = 0;
    while (j < n && counts[j] < cap && tot + counts[j] <= cap) tot += counts[j++];
    int nonzero = 0, last = i;
    for (int k = i; k < j; k++)
      if (counts[k]) {
        nonzero++;
        last = k;
      }
    if (nonzero == 1) {
      PX_CHECK(px__allreduce_any(g, bufs[last], bufs[last], counts[last], dt, op));
    } else {
      char *b = px__bucket(c, cap * esz);
      if (!b) return px__fail(c, PX_ERR_NOMEM, "no memory for the %zu-byte bucket", cap * esz);
      size_t o = 0;
      for (int k = i; k < j; k++) {
        if (counts[k]) memcpy(b + o * esz, bufs[k], counts[k] * esz);
        o += counts[k];
      }
      PX_CHECK(px__allreduce(g, b, b, tot, dt, op));
      o = 0;
      for (int k = i; k < j; k++) {
        if (counts[k]) memcpy(bufs[k], b + o * esz, counts[k] * esz);
        o += counts[k];
      }
    }
    i = j;
  }
  return PX_OK;
}

static px_status_t px__exec_op(px_comm_t *c, const px__op_t *o) {
  PX_CHECK(px__check_health(c));
  px_group_t *g = o->g;
  size_t esz = px_comm_dtype_size(o->dt);
  px_status_t st;
  switch (o->kind) {
    case PX__OP_ALLREDUCE:
      return px__allreduce_any(g, o->send, o->recv, o->count, o->dt, o->op);
    case PX__OP_BCAST:
      if (g->nccl && px__nccl_is_device_ptr(o->recv)) {
        PX_CHECK(px__agree(g, PX__OP_BCAST, o->count, (uint64_t)o->dt, (uint64_t)o->root));
        st = px__nccl_bcast(g->nccl, o->recv, o->count, o->dt, o->root, c->timeout_ms);
        if (st < 0) return px__nccl_failed(c, st);
        uint64_t b = o->count * esz;
        /* NCCL's ring broadcast: all but the root receive, all but the last send */
        int last = (o->root - 1 + g->size) % g->size;
        px__nccl_account(g, g->rank == last ? 0 : b, g->rank == o->root ? 0 : b);
        return PX_OK;
      }
      return px__bcast(g, o->recv, o->count, o->dt, o->root);
    case PX__OP_ALLGATHER:
    case PX__OP_ALLGATHERV: {
      int is_v = o->kind == PX__OP_ALLGATHERV;
      if (g->nccl && px__nccl_is_device_ptr(o->recv)) {
        uint64_t h = o->count, tot = 0;
        for (int k = 0; k < g->size; k++) {
          g->blk_len[k] = is_v ? o->counts[k] : o->count;
          g->blk_off[k] = tot;
          tot += g->blk_len[k];
          if (is_v) h = px__hash3(h, g->blk_len[k], (uint64_t)k);
        }
        PX_CHECK(px__agree(g, o->kind, h, (uint64_t)o->dt, 0));
        st = px__nccl_allgatherv(g->nccl, o->send, o->recv, g->blk_len, g->blk_off, o->dt,
                                 c->timeout_ms);
        if (st < 0) return px__nccl_failed(c, st);
        uint64_t right_blk = g->blk_len[(g->rank + 1) % g->size] * esz;
        px__nccl_account(g, (tot * esz) - right_blk, (tot - g->blk_len[g->rank]) * esz);
        return PX_OK;
      }
      return px__allgatherv(g, o->send, o->recv, o->counts, o->count, o->dt, is_v);
    }
    case PX__OP_BARRIER:
      return px__barrier(g);
    case PX__OP_LIST:
      return px__allreduce_list(g, o->bufs, o->counts, o->nbufs, o->dt, o->op);
  }
  return px_set_error(PX_ERR_INTERNAL, "unknown operation %d", o->kind);
}

/* Runs an operation; a peer's abort notice that arrived while it ran fails
 * it even if this rank's part completed, so that ranks agree as far as they
 * can on which call failed. */
static px_status_t px__exec(px_comm_t *c, const px__op_t *o) {
  PX_CHECK(px__exec_op(c, o));
  return px__check_health(c);
}

static px_status_t px__run_blocking(px_comm_t *c, const px__op_t *o) {
  pthread_mutex_lock(&c->mu);
  while (c->pending > 0 || c->exec_busy) pthread_cond_wait(&c->cv, &c->mu);
  c->exec_busy = 1;
  pthread_mutex_unlock(&c->mu);
  px_status_t st = px__exec(c, o);
  pthread_mutex_lock(&c->mu);
  c->exec_busy = 0;
  pthread_cond_broadcast(&c->cv);
  pthread_mutex_unlock(&c->mu);
  return st;
}

static void *px__progress_thread(void *arg) {
  px_comm_t *c = arg;
  pthread_mutex_lock(&c->mu);
  for (;;) {
    while ((!c->qhead || c->exec_busy) && !c->stop) pthread_cond_wait(&c->cv, &c->mu);
    if (!c->qhead) break;
    while (c->exec_busy) pthread_cond_wait(&c->cv, &c->mu);
    px_comm_req_t *q = c->qhead;
    c->qhead = q->next;
    if (!c->qhead) c->qtail = NULL;
    c->exec_busy = 1;
    pthread_mutex_unlock(&c->mu);
    px_status_t st = px__exec(c, &q->op);
    if (st < 0) snprintf(q->errmsg, sizeof q->errmsg, "%s", px_last_error());
    pthread_mutex_lock(&c->mu);
    q->status = st;
    q->done = 1;
    c->pending--;
    c->exec_busy = 0;
    pthread_cond_broadcast(&c->cv);
  }
  pthread_mutex_unlock(&c->mu);
  return NULL;
}

static px_status_t px__submit(px_comm_t *c, const px__op_t *o, px_comm_req_t **out) {
  pthread_mutex_lock(&c->mu);
  px_comm_req_t *q = c->free_reqs;
  if (q) c->free_reqs = q->next;
  pthread_mutex_unlock(&c->mu);
  if (!q) {
    q = px_malloc(sizeof *q, "comm.request");
    if (!q) return PX_ERR_NOMEM;
    pthread_mutex_lock(&c->mu);
    q->all_next = c->all_reqs;
    c->all_reqs = q;
    pthread_mutex_unlock(&c->mu);
  }
  q->op = *o;
  q->c = c;
  q->status = PX_OK;
  q->done = 0;
  q->next = NULL;
  q->errmsg[0] = '\0';
  pthread_mutex_lock(&c->mu);
  if (!c->thread_started) {
    if (pthread_create(&c->thread, NULL, px__progress_thread, c) != 0) {
      q->next = c->free_reqs;
      c->free_reqs = q;
      pthread_mutex_unlock(&c->mu);
      return px_set_error(PX_ERR_INTERNAL, "cannot start the communicator's progress thread");
    }
    c->thread_started = 1;
  }
  if (c->qtail) c->qtail->next = q;
  else c->qhead = q;
  c->qtail = q;
  c->pending++;
  pthread_cond_broadcast(&c->cv);
  pthread_mutex_unlock(&c->mu);
  *out = q;
  return PX_OK;
}

px_status_t px_comm_test(px_comm_req_t *req, int *done) {
  PX_REQUIRE(req != NULL && done != NULL, "px_comm_test: NULL argument");
  px_comm_t *c = req->c;
  pthread_mutex_lock(&c->mu);
  *done = req->done;
  pthread_mutex_unlock(&c->mu);
  return PX_OK;
}

px_status_t px_comm_wait(px_comm_req_t *req) {
  PX_REQUIRE(req != NULL, "px_comm_wait: NULL request");
  px_comm_t *c = req->c;
  char msg[256];
  pthread_mutex_lock(&c->mu);
  while (!req->done) pthread_cond_wait(&c->cv, &c->mu);
  px_status_t st = req->status;
  if (st < 0) memcpy(msg, req->errmsg, sizeof msg);
  req->next = c->free_reqs;
  c->free_reqs = req;
  pthread_mutex_unlock(&c->mu);
  if (st < 0) return px_set_error(st, "%s", msg);
  return PX_OK;
}

/* ---- argument checks and public entry points ------------------------------- */

static px_status_t px__validate(const px__op_t *o) {
  PX_REQUIRE(o->g != NULL, "collective on a NULL group (is this rank a member?)");
  PX_REQUIRE(o->dt == PX_COMM_F32 || o->dt == PX_COMM_F64 || o->dt == PX_COMM_U8,
             "unknown dtype %d", (int)o->dt);
  PX_REQUIRE(o->count <= SIZE_MAX / 16, "count %zu too large", o->count);
  const px_group_t *g = o->g;
  switch (o->kind) {
    case PX__OP_ALLREDUCE:
    case PX__OP_LIST:
      PX_REQUIRE(o->op == PX_COMM_SUM || o->op == PX_COMM_AVG || o->op == PX_COMM_MAX,
                 "unknown reduction %d", (int)o->op);
      PX_REQUIRE(!(o->op == PX_COMM_AVG && o->dt == PX_COMM_U8),
                 "average of u8 is not supported (use sum or max)");
      if (o->kind == PX__OP_ALLREDUCE) {
        PX_REQUIRE(o->count == 0 || (o->send && o->recv), "allreduce: NULL buffer");
      } else {
        PX_REQUIRE(o->nbufs >= 0, "allreduce_list: negative tensor count");
        PX_REQUIRE(o->nbufs == 0 || (o->bufs && o->counts), "allreduce_list: NULL array");
        for (int i = 0; i < o->nbufs; i++) {
          PX_REQUIRE(o->counts[i] == 0 || o->bufs[i], "allreduce_list: tensor %d is NULL", i);
          PX_REQUIRE(o->counts[i] <= SIZE_MAX / 16, "allreduce_list: tensor %d too large", i);
        }
      }
      break;
    case PX__OP_BCAST:
      PX_REQUIRE(o->root >= 0 && o->root < g->size, "broadcast: root %d outside 0..%d", o->root,
                 g->size - 1);
      PX_REQUIRE(o->count == 0 || o->recv, "broadcast: NULL buffer");
      break;
    case PX__OP_ALLGATHER:
      PX_REQUIRE(o->count == 0 || (o->send && o->recv), "allgather: NULL buffer");
      break;
    case PX__OP_ALLGATHERV: {
      PX_REQUIRE(o->counts != NULL, "allgatherv: NULL counts");
      size_t tot = 0;
      for (int k = 0; k < g->size; k++) {
        PX_REQUIRE(o->counts[k] <= SIZE_MAX / 16 - tot, "allgatherv: counts too large");
        tot += o->counts[k];
      }
      PX_REQUIRE(o->counts[g->rank] == 0 || o->send, "allgatherv: NULL send buffer");
      PX_REQUIRE(tot == 0 || o->recv, "allgatherv: NULL receive buffer");
      break;
    }
    default:
      break;
  }
  return PX_OK;
}

static px_status_t px__blocking(const px__op_t *o) {
  PX_CHECK(px__validate(o));
  return px__run_blocking(o->g->c, o);
}

static px_status_t px__nonblocking(const px__op_t *o, px_comm_req_t **req) {
  PX_REQUIRE(req != NULL, "non-blocking collective: NULL request pointer");
  *req = NULL;
  PX_CHECK(px__validate(o));
  return px__submit(o->g->c, o, req);
}

#define PX__OP_ALLREDUCE_INIT(g_, s_, r_, n_, dt_, op_) \
  {.kind = PX__OP_ALLREDUCE, .g = (g_), .send = (s_), .recv = (r_), .count = (n_), .dt = (dt_), .op = (op_)}

px_status_t px_comm_allreduce(px_group_t *g, const void *send, void *recv, size_t count,
                              px_comm_dtype_t dt, px_comm_op_t op) {
  px__op_t o = PX__OP_ALLREDUCE_INIT(g, send, recv, count, dt, op);
  return px__blocking(&o);
}

px_status_t px_comm_iallreduce(px_group_t *g, const void *send, void *recv, size_t count,
                               px_comm_dtype_t dt, px_comm_op_t op, px_comm_req_t **req) {
  px__op_t o = PX__OP_ALLREDUCE_INIT(g, send, recv, count, dt, op);
  return px__nonblocking(&o, req);
}

px_status_t px_comm_broadcast(px_group_t *g, void *buf, size_t count, px_comm_dtype_t dt,
                              int root) {
  px__op_t o = {.kind = PX__OP_BCAST, .g = g, .recv = buf, .count = count, .dt = dt, .root = root};
  return px__blocking(&o);
}

px_status_t px_comm_ibroadcast(px_group_t *g, void *buf, size_t count, px_comm_dtype_t dt,
                               int root, px_comm_req_t **req) {
  px__op_t o = {.kind = PX__OP_BCAST, .g = g, .recv = buf, .count = count, .dt = dt, .root = root};
  return px__nonblocking(&o, req);
}

px_status_t px_comm_allgather(px_group_t *g, const void *send, void *recv, size_t count,
                              px_comm_dtype_t dt) {
  px__op_t o = {.kind = PX__OP_ALLGATHER, .g = g, .send = send, .recv = recv, .count = count, .dt = dt};
  return px__blocking(&o);
}

px_status_t px_comm_iallgather(px_group_t *g, const void *send, void *recv, size_t count,
                               px_comm_dtype_t dt, px_comm_req_t **req) {
  px__op_t o = {.kind = PX__OP_ALLGATHER, .g = g, .send = send, .recv = recv, .count = count, .dt = dt};
  return px__nonblocking(&o, req);
}

px_status_t px_comm_allgatherv(px_group_t *g, const void *send, void *recv, const size_t *counts,
                               px_comm_dtype_t dt) {
  px__op_t o = {.kind = PX__OP_ALLGATHERV, .g = g, .send = send, .recv = recv, .counts = counts, .dt = dt};
  return px__blocking(&o);
}

px_status_t px_comm_iallgatherv(px_group_t *g, const void *send, void *recv,
                                const size_t *counts, px_comm_dtype_t dt, px_comm_req_t **req) {
  px__op_t o = {.kind = PX__OP_ALLGATHERV, .g = g, .send = send, .recv = recv, .counts = counts, .dt = dt};
  return px__nonblocking(&o, req);
}

px_status_t px_comm_barrier(px_group_t *g) {
  px__op_t o = {.kind = PX__OP_BARRIER, .g = g, .dt = PX_COMM_U8};
  return px__blocking(&o);
}

px_status_t px_comm_ibarrier(px_group_t *g, px_comm_req_t **req) {
  px__op_t o = {.kind = PX__OP_BARRIER, .g = g, .dt = PX_COMM_U8};
  return px__nonblocking(&o, req);
}

px_status_t px_comm_allreduce_list(px_group_t *g, void *const *bufs, const size_t *counts, int n,
                                   px_comm_dtype_t dt, px_comm_op_t op) {
  px__op_t o = {.kind = PX__OP_LIST, .g = g, .bufs = bufs, .counts = counts, .nbufs = n, .dt = dt, .op = op};
  return px__blocking(&o);
}

px_status_t px_comm_iallreduce_list(px_group_t *g, void *const *bufs, const size_t *counts,
                                    int n, px_comm_dtype_t dt, px_comm_op_t op,
                                    px_comm_req_t **req) {
  px__op_t o = {.kind = PX__OP_LIST, .g = g, .bufs = bufs, .counts = counts, .nbufs = n, .dt = dt, .op = op};
  return px__nonblocking(&o, req);
}
