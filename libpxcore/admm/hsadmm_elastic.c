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
  if (!on || h->el.fam) return PX_OK;
  size_t mt = h->mtotal ? h->mtotal : 1;
  PX_CHECK(h->st.ops->alloc(6 * h->st.total * sizeof(float), "hsadmm.elastic",
                            (void **)&h->el.fam));
  h->el.masks = px_malloc(4 * mt, "hsadmm.elastic");
  h->el.rho = px_malloc(2 * (size_t)h->n * sizeof(double), "hsadmm.elastic");
  return h->el.masks && h->el.rho ? PX_OK : PX_ERR_NOMEM;
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
  h->comm = comm;
  h->world = world;
  h->intra = intra;
  h->inter = px_comm_group(comm, PX_GROUP_INTER);
  h->N = N;
  h->P = P;
  h->M = M;
  return PX_OK;
}

void px__hse_free(px_hsadmm_t *h) {
  if (h->el.fam) h->st.ops->release(h->el.fam);
  PX_FREE_ALL(h->el.masks, h->el.rho);
  memset(&h->el, 0, sizeof h->el);
}
