/* comm.compress lossless: the leaders' exact exchange delta-coded without
 * loss (prunex/lossless.h, px_hsadmm_set_compress).
 *
 * Every leader keeps, in parameter layout, the last payload of every leader
 * (its own included) as it was decoded: the histories. This round's payload
 * of leader r is coded against history r packed with this round's plan,
 * which every leader has (the masks are the union, the same everywhere), so
 * the sender and every receiver pack the same reference, whether or not the
 * masks moved since. After the exchange each leader's decoded payload is
 * expanded into its history with the same plan, so the histories stay the
 * same on every leader, zeros outside the active elements included. */
#include <string.h>

#include "admm/hsadmm_int.h"
#include "px_check.h"
#include "prunex/comm_internal.h"
#include "prunex/hsadmm_internal.h"
#include "prunex/prune_internal.h"

void px__hsc_free(px_hsadmm_t *h) {
  px__hsadmm_code_t *c = &h->lc;
  px_lossless_destroy(c->lc);
  PX_FREE_ALL(c->hist, (void *)c->hptrs, c->cur, c->acc, c->send, c->recv, c->counts);
  memset(c, 0, sizeof *c);
  c->scale = 1.0;
}

static px_status_t px__hsc_alloc(px_hsadmm_t *h) {
  px__hsadmm_code_t *c = &h->lc;
  size_t total = h->st.total, bound = px_lossless_bound(total), M = (size_t)h->M;
  PX_CHECK(px_lossless_create(total, &c->lc));
  c->hist = px_calloc(M * total, sizeof(float), "hsadmm.code_history");
  c->hptrs = px_calloc((size_t)h->n, sizeof(float *), "hsadmm.ptrs");
  c->cur = px_malloc(total * sizeof(float), "hsadmm.code_payload");
  c->acc = px_malloc(total * sizeof(float), "hsadmm.code_sum");
  c->send = px_malloc(bound, "hsadmm.code_send");
  c->recv = px_malloc(M * bound, "hsadmm.code_recv");
  c->counts = px_calloc(M, sizeof(size_t), "hsadmm.code_counts");
  if (!c->hist || !c->hptrs || !c->cur || !c->acc || !c->send || !c->recv || !c->counts) {
    px__hsc_free(h);
    return PX_ERR_NOMEM;
  }
  return PX_OK;
}

px_status_t px_hsadmm_set_compress(px_hsadmm_t *h, int lossless) {
  PX_REQUIRE(!lossless || (!h->cfg.flat && !h->q.bits && !h->ov.enabled),
             "comm.compress: lossless codes the exact hierarchical exchange (strategy hsadmm, "
             "comm.quantize none, comm.overlap false) only");
  PX_REQUIRE(!lossless || !h->dev, "comm.compress: not with H-SADMM's device state");
  PX_REQUIRE(!lossless || !h->el.on, "comm.compress: not with an elastic job");
  if (h->iteration > 0)
    return px_set_error(PX_ERR_STATE, "comm.compress: set before the first round");
  if (!lossless) {
    px__hsc_free(h);
    return PX_OK;
  }
  h->lc.on = 1;
  if (!h->inter || h->lc.lc) return PX_OK;
  /* a leader sends its payload to M - 1 leaders where a ring allreduce
   * sends 2 (M - 1) / M of the floats: coding pays while a payload keeps
   * under 2 / M of them */
  if (h->M > 2 && px_group_rank(h->inter) == 0)
    px_log(PX_LOG_WARN,
           "comm.compress: lossless with %d nodes: each coded payload goes to %d leaders, so "
           "it saves bytes only while it keeps under %.0f%% of the floats (about 64%% on the "
           "quickstart's exchange)",
           h->M, h->M - 1, 200.0 / h->M);
  return px__hsc_alloc(h);
}

/* The tensors of history r, for packing and unpacking. */
static float **px__hsc_history(px_hsadmm_t *h, int r) {
  px__hsadmm_code_t *c = &h->lc;
  for (int i = 0; i < h->n; i++) c->hptrs[i] = c->hist + (size_t)r * h->st.total + h->st.off[i];
  return c->hptrs;
}

/* History r packed with this round's plan, into the plan's buffer. */
static void px__hsc_pack_history(px_hsadmm_t *h, int r) {
  px_pack_shrink(h->plan, (const float *const *)px__hsc_history(h, r));
}

/* Every leader's payload decoded (this one's copied), kept, and summed in
 * node order into acc. */
static px_status_t px__hsc_take(px_hsadmm_t *h, float *buf, size_t nf, uint32_t tag) {
  px__hsadmm_code_t *c = &h->lc;
  int me = px_group_rank(h->inter);
  size_t off = 0;
  for (int r = 0; r < h->M; off += c->counts[r], r++) {
    if (r == me) {
      memcpy(buf, c->cur, nf * sizeof(float));
    } else {
      px__hsc_pack_history(h, r);
      px_status_t st = px_lossless_decode(c->lc, c->recv + off, c->counts[r], buf, nf, tag, buf);
      if (st != PX_OK)
        return px_set_error(st,
                            "comm.compress: the payload of node %d's leader (world rank %d): %s",
                            r, px_group_world_rank(h->inter, r), px_last_error());
    }
    px_pack_expand(h->plan, px__hsc_history(h, r)); /* the payload, kept */
    if (r == 0) {
      memcpy(c->acc, buf, nf * sizeof(float));
    } else {
      for (size_t j = 0; j < nf; j++) c->acc[j] += buf[j];
    }
  }
  return PX_OK;
}

px_status_t px__hsc_exchange(px_hsadmm_t *h) {
  px__hsadmm_code_t *c = &h->lc;
  float *buf = px_pack_buffer(h->plan);
  size_t nf = px_pack_packed_floats(h->plan), bound = px_lossless_bound(nf);
  uint32_t tag = (uint32_t)h->iteration;
  memcpy(c->cur, buf, nf * sizeof(float));
  px__hsc_pack_history(h, px_group_rank(h->inter));
  size_t len;
  PX_CHECK(px_lossless_encode(c->lc, c->cur, buf, nf, tag, c->send, bound, &len));
  size_t coded = 0;
  PX_CHECK(px_comm_allgather(h->inter, &len, c->counts, sizeof len, PX_COMM_U8));
  for (int r = 0; r < h->M; r++) {
    if (c->counts[r] > bound)
      return px_set_error(PX_ERR_FORMAT,
                          "comm.compress: node %d's leader (world rank %d) announces a payload "
                          "of %zu bytes; %zu floats code into at most %zu",
                          r, px_group_world_rank(h->inter, r), c->counts[r], nf, bound);
    coded += c->counts[r];
  }
  PX_CHECK(px_comm_allgatherv(h->inter, c->send, c->recv, c->counts, PX_COMM_U8));
  PX_CHECK(px__hsc_take(h, buf, nf, tag));
  memcpy(buf, c->acc, nf * sizeof(float));
  /* the same on every leader: the f32 payloads over what moved (the
   * lengths too), which is exact for two leaders */
  c->scale = (double)h->M * (double)nf * sizeof(float) / (double)(coded + h->M * sizeof len);
  return PX_OK;
}

void px__hsc_resumed(px_hsadmm_t *h) {
  if (h->lc.hist) memset(h->lc.hist, 0, (size_t)h->M * h->st.total * sizeof(float));
}
