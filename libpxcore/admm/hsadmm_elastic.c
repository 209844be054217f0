/* H-SADMM over a membership that shrinks: the copy of the
 * round's starting state that makes a round broken by a lost node
 * repeatable, and the rebinding of the handle to the rebuilt communicator.
 *
 * Why a copy: a collective broken by a dead peer completes on some ranks
 * and not on others (a leader whose part of the exchange finished computes
 * its new z, one next to it does not), so after a failure the survivors'
 * states differ by how far each got. Going back to the start of the sync
 * on every survivor and running it again over the rebuilt groups makes
 * them agree again, bit for bit, without a checkpoint: theta (the local
 * phase's result) is not changed by the sync, and everything the sync and
 * the decision change is in the copy. The copy costs six state-sized
 * copies per round (no allocation); the local phase it follows costs far
 * more. */
#include <string.h>

#include "admm/hsadmm_int.h"
#include "prunex/comm_internal.h"
#include "prunex/hsadmm_internal.h"
#include "px_check.h"

/* The families of the copy, in its order. */
static void px__hse_fams(px_hsadmm_t *h, float **f) {
  f[0] = h->st.u;
  f[1] = h->st.zi;
  f[2] = h->st.zi_prev;
  f[3] = h->st.v;
  f[4] = h->st.z;
  f[5] = h->st.z_prev;
}

static uint8_t **px__hse_masks(px_hsadmm_t *h, uint8_t **m) {
  m[0] = h->mask_node;
  m[1] = h->mask_union;
  m[2] = h->mask_prev;
  m[3] = h->mask_z;
  return m;
}

px_status_t px_hsadmm_set_elastic(px_hsadmm_t *h, int on) {
  PX_REQUIRE(!on || (!h->ov.enabled && !h->q.bits && !h->lc.on),
             "elastic H-SADMM: not with comm.overlap, comm.quantize or comm.compress");
  h->el.on = on ? 1 : 0;
  h->el.taken = 0;
  h->el.next_epoch = h->el.nnext = 0;
  if (!on || h->el.fam) return PX_OK;
  size_t mt = h->mtotal ? h->mtotal : 1;
  PX_CHECK(h->st.ops->alloc(6 * h->st.total * sizeof(float), "hsadmm.elastic",
                            (void **)&h->el.fam));
  h->el.masks = px_malloc(4 * mt, "hsadmm.elastic");
  h->el.rho = px_malloc(2 * (size_t)h->n * sizeof(double), "hsadmm.elastic");
  /* the decision carries a member list of up to the job's node count */
  h->el.cap = px_comm_nnodes(h->comm);
  h->el.next = px_malloc((size_t)h->el.cap * sizeof(int32_t), "hsadmm.elastic");
  double *buf = px_calloc(2 + 2 * (size_t)h->n + 2 + (size_t)h->el.cap, sizeof(double),
                          "hsadmm.decision");
  if (!h->el.masks || !h->el.rho || !h->el.next || !buf) {
    px_free(buf);
    return PX_ERR_NOMEM;
  }
  px_free(h->decision_buf);
  h->decision_buf = buf;
  return PX_OK;
}

px_status_t px_hsadmm_set_elastic_max(px_hsadmm_t *h, int max_nodes) {
  PX_REQUIRE(h && h->el.on, "px_hsadmm_set_elastic_max: the handle is not elastic");
  PX_REQUIRE(max_nodes >= 1 && max_nodes <= 4096, "elastic: max_nodes = %d: must be in 1..4096",
             max_nodes);
  if (max_nodes <= h->el.cap) return PX_OK;
  int32_t *next = px_malloc((size_t)max_nodes * sizeof(int32_t), "hsadmm.elastic");
  double *buf = px_calloc(2 + 2 * (size_t)h->n + 2 + (size_t)max_nodes, sizeof(double),
                          "hsadmm.decision");
  if (!next || !buf) {
    PX_FREE_ALL(next, buf);
    return PX_ERR_NOMEM;
  }
  PX_FREE_ALL(h->el.next, h->decision_buf);
  h->el.next = next;
  h->decision_buf = buf;
  h->el.cap = max_nodes;
  h->el.next_epoch = h->el.nnext = 0;
  return PX_OK;
}

/* ---- a membership change carried by the decision ------------------------------- */

size_t px__hse_tail(const px_hsadmm_t *h) { return h->el.on ? 2 + (size_t)h->el.cap : 0; }

void px__hse_offer(px_hsadmm_t *h, px_hsadmm_decision_t *d) {
  d->epoch = d->nmembers = 0;
  d->members_cap = h->el.on ? h->el.cap : 0;
  d->members = h->el.on ? h->el.next : NULL;
}

px_status_t px__hse_pack(px_hsadmm_t *h, const px_hsadmm_decision_t *d, double *tail) {
  if (!h->el.on) {
    PX_REQUIRE(d->epoch == 0, "the controller changed the membership (epoch %d) of a job that "
               "is not elastic", (int)d->epoch);
    return PX_OK;
  }
  int epoch = d->epoch, n = d->nmembers;
  PX_REQUIRE(epoch == 0 || (epoch > px_comm_epoch(h->comm) && n >= 1 && n <= h->el.cap &&
                            d->members == h->el.next),
             "the controller's membership change: epoch %d (now %d) with %d member nodes (1..%d "
             "in the members array given)", epoch, px_comm_epoch(h->comm), n, h->el.cap);
  tail[0] = epoch;
  tail[1] = epoch ? n : 0;
  for (int i = 0; epoch && i < n; i++) tail[2 + i] = h->el.next[i];
  return PX_OK;
}

void px__hse_unpack(px_hsadmm_t *h, const double *tail) {
  if (!h->el.on) return;
  h->el.next_epoch = (int)tail[0];
  h->el.nnext = (int)tail[1];
  for (int i = 0; i < h->el.nnext; i++) h->el.next[i] = (int32_t)tail[2 + i];
}

int px_hsadmm_next_members(const px_hsadmm_t *h, const int32_t **nodes, int *n) {
  *nodes = h->el.next;
  *n = h->el.next_epoch ? h->el.nnext : 0;
  return h->el.next_epoch;
}

px_status_t px__hse_snapshot(px_hsadmm_t *h) {
  px__hsadmm_elastic_t *e = &h->el;
  float *f[6];
  uint8_t *m[4];
  px__hse_fams(h, f);
  size_t fb = h->st.total * sizeof(float);
  for (int k = 0; k < 6; k++) PX_CHECK(h->st.ops->copy(e->fam + k * h->st.total, f[k], fb));
  px__hse_masks(h, m);
  for (int k = 0; k < 4 && h->mtotal; k++) memcpy(e->masks + k * h->mtotal, m[k], h->mtotal);
  memcpy(e->rho, h->rho1, (size_t)h->n * sizeof(double));
  memcpy(e->rho + h->n, h->rho2, (size_t)h->n * sizeof(double));
  e->frozen = h->frozen;
  e->iteration = h->iteration;
  e->taken = 1;
  e->next_epoch = e->nnext = 0; /* a new round: no change named yet */
  return PX_OK;
}

/* The state back to the start of the round that failed. */
static px_status_t px__hse_restore(px_hsadmm_t *h) {
  px__hsadmm_elastic_t *e = &h->el;
  if (h->frozen && !e->frozen)
    return px_set_error(PX_ERR_STATE, "elastic H-SADMM: the broken round froze the masks on "
                        "this rank and not before it; restart from the checkpoint");
  float *f[6];
  uint8_t *m[4];
  px__hse_fams(h, f);
  size_t fb = h->st.total * sizeof(float);
  for (int k = 0; k < 6; k++) PX_CHECK(h->st.ops->copy(f[k], e->fam + k * h->st.total, fb));
  px__hse_masks(h, m);
  for (int k = 0; k < 4 && h->mtotal; k++) memcpy(m[k], e->masks + k * h->mtotal, h->mtotal);
  memcpy(h->rho1, e->rho, (size_t)h->n * sizeof(double));
  memcpy(h->rho2, e->rho + h->n, (size_t)h->n * sizeof(double));
  h->iteration = e->iteration;
  /* the plan's layout from the restored union (unless frozen, when it
   * cannot have changed) */
  if (h->mtotal && !h->frozen) PX_CHECK(px__hsadmm_set_masks(h));
  return PX_OK;
}

px_status_t px_hsadmm_rebind(px_hsadmm_t *h, px_comm_t *comm, int rollback) {
  PX_REQUIRE(h && comm, "px_hsadmm_rebind: NULL argument");
  PX_REQUIRE(!rollback || (h->el.on && h->el.taken),
             "px_hsadmm_rebind: a rollback needs px_hsadmm_set_elastic before the round");
  px_group_t *world = px_comm_group(comm, PX_GROUP_WORLD);
  px_group_t *intra = px_comm_group(comm, PX_GROUP_INTRA);
  int N = px_group_size(world), P = px_group_size(intra), M = px_comm_nnodes(comm);
  PX_REQUIRE(h->cfg.flat || P * M == N,
             "H-SADMM needs the same number of ranks on every node (%d ranks on %d nodes, %d "
             "here)", N, M, P);
  PX_REQUIRE(h->cfg.flat || P == h->P,
             "elastic H-SADMM: %d ranks on this node, %d before (whole nodes only)", P, h->P);
  if (rollback) PX_CHECK(px__hse_restore(h));
  /* a node of the old membership is not in the new one (a kept rank has a
   * previous rank; the nodes joining now have none) */
  int kept = 0;
  for (int k = 0; k < N; k++) kept += px_comm_prev_rank(comm, k) >= 0;
  if (kept < h->N) h->el.recenter = 1;
  h->el.next_epoch = h->el.nnext = 0;
  h->comm = comm;
  h->world = world;
  h->intra = intra;
  h->inter = px_comm_group(comm, PX_GROUP_INTER);
  h->N = N;
  h->P = P;
  h->M = M;
  return PX_OK;
}

/* The node duals v_i re-centred over the members: v_i -= mean(v). Consensus
 * ADMM's duals average zero over the nodes in every element z keeps (z is
 * the projected mean of z_i + v_i); once a node is dropped, the members'
 * mean is minus the lost dual over the members, and z would move by that
 * in the first round without it: a jump the training then works off for
 * rounds (bench/elastic: the loss of the round after a drop went 1.13 ->
 * 1.38 and the final accuracy lost 1.25-1.7 points). Every rank of a node
 * holds the same v, so the mean over the world's ranks is the mean over
 * the nodes. Flat (one level over the ranks): the ranks' u the same way.
 * Collective over the world, at the start of a sync (st.s, the round's
 * scratch, holds the mean). */
px_status_t px__hse_recenter(px_hsadmm_t *h) {
  if (!h->el.recenter) return PX_OK;
  size_t n = h->st.total;
  float *mean = h->dev ? h->stage : h->st.s, *dual = h->cfg.flat ? h->st.u : h->st.v;
  if (h->dev) PX_CHECK(h->st.ops->download(mean, dual, n * sizeof(float)));
  else memcpy(mean, dual, n * sizeof(float));
  PX_CHECK(px_comm_allreduce(h->world, mean, mean, n, PX_COMM_F32, PX_COMM_SUM));
  if (h->dev) PX_CHECK(h->st.ops->upload(h->st.s, mean, n * sizeof(float)));
  PX_CHECK(h->st.ops->scale(h->st.s, -1.0f / (float)h->N, n));
  PX_CHECK(h->st.ops->add(dual, dual, h->st.s, n));
  h->el.recenter = 0;
  return PX_OK;
}

/* ---- joining ------------------------------------------------------------------ */

/* root's n floats of state family f to the world: a joining rank takes
 * them into f, the others into scratch (they hold the same already). */
static px_status_t px__hse_send_fam(px_hsadmm_t *h, float *f, int root, int joining) {
  size_t n = h->st.total;
  int me = px_group_rank(h->world);
  float *buf = h->dev ? h->stage : me == root || joining ? f : h->el.fam;
  if (h->dev && me == root) PX_CHECK(h->st.ops->download(buf, f, n * sizeof(float)));
  PX_CHECK(px_comm_broadcast(h->world, buf, n, PX_COMM_F32, root));
  return h->dev && joining ? h->st.ops->upload(f, buf, n * sizeof(float)) : PX_OK;
}

/* The rest of a joining rank's state from what it was sent: its node's
 * consensus restarts at z, its duals at zero, as a node without state does
 * after a checkpoint (px__hsadmm_state_resumed). */
static px_status_t px__hse_fresh(px_hsadmm_t *h) {
  size_t fb = h->st.total * sizeof(float);
  PX_CHECK(h->st.ops->copy(h->st.zi, h->st.z, fb));
  PX_CHECK(h->st.ops->copy(h->st.zi_prev, h->st.z, fb));
  PX_CHECK(h->st.ops->zero(h->st.v, fb));
  PX_CHECK(h->st.ops->zero(h->st.u, fb));
  if (h->mtotal) memcpy(h->mask_node, h->mask_union, h->mtotal);
  if (h->mtotal) PX_CHECK(px__hsadmm_set_masks(h));
  if (h->frozen) px_pack_plan_freeze(h->plan);
  return PX_OK;
}

px_status_t px_hsadmm_join(px_hsadmm_t *h, int root, int joining) {
  PX_REQUIRE(h && h->el.on, "px_hsadmm_join: the handle is not elastic (px_hsadmm_set_elastic)");
  PX_REQUIRE(root >= 0 && root < h->N, "px_hsadmm_join: root %d of %d ranks", root, h->N);
  int me = px_group_rank(h->world);
  PX_REQUIRE(!(joining && me == root), "px_hsadmm_join: the root (rank %d) is a joining rank",
             root);
  PX_CHECK(px__hse_send_fam(h, h->st.z, root, joining));
  PX_CHECK(px__hse_send_fam(h, h->st.z_prev, root, joining));
  uint8_t *m[4], *scratch = h->el.masks;
  px__hse_masks(h, m);
  for (int k = 1; k < 4 && h->mtotal; k++) /* union, prev, z: the node's is the union */
    PX_CHECK(px_comm_broadcast(h->world, joining || me == root ? m[k] : scratch, h->mtotal,
                               PX_COMM_U8, root));
  double *rho = h->el.rho, sc[3] = {h->frozen, h->iteration, h->el.recenter};
  if (me == root) {
    memcpy(rho, h->rho1, (size_t)h->n * sizeof(double));
    memcpy(rho + h->n, h->rho2, (size_t)h->n * sizeof(double));
  }
  PX_CHECK(px_comm_broadcast(h->world, rho, 2 * (size_t)h->n, PX_COMM_F64, root));
  PX_CHECK(px_comm_broadcast(h->world, sc, 3, PX_COMM_F64, root));
  h->el.taken = 0; /* the copy was scratch: nothing to roll back to */
  if (!joining) return PX_OK;
  memcpy(h->rho1, rho, (size_t)h->n * sizeof(double));
  memcpy(h->rho2, rho + h->n, (size_t)h->n * sizeof(double));
  h->frozen = (int)sc[0];
  h->iteration = (int)sc[1];
  h->el.recenter = (int)sc[2]; /* a node was dropped as this one joined */
  return px__hse_fresh(h);
}

void px__hse_free(px_hsadmm_t *h) {
  if (h->el.fam) h->st.ops->release(h->el.fam);
  PX_FREE_ALL(h->el.masks, h->el.rho, h->el.next);
  memset(&h->el, 0, sizeof h->el);
}
