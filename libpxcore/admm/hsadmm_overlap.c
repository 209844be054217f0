/* comm.overlap: the leaders' exact exchange of round k runs while
 * the workers train round k+1.
 *
 * The exchange is packed by round k's sync and deferred (IDLE -> PACKED),
 * started when the local phase of round k+1 begins (px_hsadmm_overlap_start,
 * after every collective of round k: PACKED -> IN_FLIGHT) on the
 * communicator's progress thread, and lands at the start of round k+1's
 * sync (px__hso_land: -> IDLE), which needs its z. Round k+1's local phase
 * therefore starts from z^(k-1) + z_i^k - z_i^(k-1) instead of z^k
 * (px_hsadmm_restart_point; its proximal targets z_i^k and u^k are exact),
 * and round k's inter residuals are reported with z^(k-1). A round that is
 * evaluated, checkpointed or last, and a decision that stops, freezes or
 * changes rho, drain the exchange first, so z is never stale where it is
 * read or rescaled. */
#include <string.h>

#include "admm/hsadmm_int.h"
#include "px_check.h"
#include "prunex/comm_internal.h"
#include "prunex/hsadmm_internal.h"
#include "prunex/prune_internal.h"

px_status_t px__hso_land(px_hsadmm_t *h, uint64_t *bytes) {
  px__hsadmm_overlap_t *ov = &h->ov;
  if (ov->state == PX__OV_IDLE) return PX_OK;
  px_status_t st = PX_OK;
  if (ov->state == PX__OV_PACKED) {
    st = px__hsadmm_exchange(h, bytes);
  } else {
    for (int b = 0; b < ov->nreqs; b++) {
      px_status_t w = px_comm_wait(ov->reqs[b]);
      ov->reqs[b] = NULL;
      if (st == PX_OK) st = w;
    }
    ov->nreqs = 0;
    if (h->inter) *bytes = px__hsadmm_bytes(h) - ov->bytes0;
  }
  ov->state = PX__OV_IDLE;
  PX_CHECK(st);
  return px__hsadmm_finish(h);
}

int px__hso_defer(px_hsadmm_t *h) {
  if (!h->ov.enabled || h->ov.drain) return 0;
  h->ov.state = PX__OV_PACKED;
  return 1;
}

void px__hso_free(px_hsadmm_t *h) {
  px__hsadmm_overlap_t *ov = &h->ov;
  for (int b = 0; b < ov->nreqs; b++) (void)px_comm_wait(ov->reqs[b]); /* an aborted run */
  ov->nreqs = 0;
  px_free((void *)ov->reqs);
  ov->reqs = NULL;
}

px_status_t px_hsadmm_set_overlap(px_hsadmm_t *h, int on) {
  PX_REQUIRE(!on || (!h->cfg.flat && !h->q.bits && !h->lc.on),
             "comm.overlap: applies to the exact hierarchical exchange (strategy hsadmm, "
             "comm.quantize none, comm.compress none) only");
  PX_REQUIRE(!on || !h->dev, "comm.overlap: not with H-SADMM's device state");
  PX_REQUIRE(!on || !h->el.on, "comm.overlap: not with an elastic job");
  if (h->iteration > 0) return px_set_error(PX_ERR_STATE, "comm.overlap: set before the first round");
  h->ov.enabled = on ? 1 : 0;
  if (!on || h->ov.reqs) return PX_OK;
  size_t bb = h->cfg.bucket_bytes ? h->cfg.bucket_bytes : PX_PACK_DEFAULT_BUCKET_BYTES;
  h->ov.maxreqs = (int)((h->st.total * sizeof(float) + bb - 1) / bb) + 1;
  h->ov.reqs = px_calloc((size_t)h->ov.maxreqs, sizeof *h->ov.reqs, "hsadmm.overlap_reqs");
  return h->ov.reqs ? PX_OK : PX_ERR_NOMEM;
}

void px_hsadmm_set_drain(px_hsadmm_t *h, int drain) { h->ov.drain = drain ? 1 : 0; }

int px_hsadmm_pending(const px_hsadmm_t *h) { return h->ov.state != PX__OV_IDLE; }

px_status_t px_hsadmm_overlap_start(px_hsadmm_t *h) {
  px__hsadmm_overlap_t *ov = &h->ov;
  if (ov->state != PX__OV_PACKED) return PX_OK;
  ov->state = PX__OV_IN_FLIGHT;
  if (!h->inter) return PX_OK;
  ov->bytes0 = px__hsadmm_bytes(h);
  int nb = px_pack_num_buckets(h->plan);
  PX_REQUIRE(nb <= ov->maxreqs, "comm.overlap: %d buckets, room for %d", nb, ov->maxreqs);
  for (int b = 0; b < nb; b++) {
    size_t nf;
    float *buf = px_pack_bucket(h->plan, b, &nf);
    px_status_t st = px_comm_iallreduce(h->inter, buf, buf, nf, PX_COMM_F32, PX_COMM_SUM,
                                        &ov->reqs[b]);
    if (st != PX_OK) return st; /* the requests started are waited for when it lands */
    ov->nreqs = b + 1;
  }
  return PX_OK;
}

void px_hsadmm_restart_point(const px_hsadmm_t *h, int i, float *dst) {
  size_t o = h->st.off[i], n = h->params[i].numel;
  if (h->ov.state == PX__OV_IDLE) {
    memcpy(dst, h->st.z + o, n * sizeof(float));
    return;
  }
  /* z^(k-1) + (z_i^k - z_i^(k-1)): the old consensus moved by this node's
   * last step. Restarting from z^(k-1) alone would drop the last local phase
   * every round (two interleaved chains, each trained every other round). */
  const float *z = h->st.z + o, *zi = h->st.zi + o, *zp = h->st.zi_prev + o;
  for (size_t j = 0; j < n; j++) dst[j] = z[j] + (zi[j] - zp[j]);
}

px_status_t px_hsadmm_overlap_drain(px_hsadmm_t *h) {
  uint64_t bytes = 0;
  return px__hso_land(h, &bytes);
}
