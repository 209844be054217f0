/* comm.quantize: the leaders exchange z_i in 8 or 4 bits.
 *
 * Every leader packs the previous z (bit-identical on all of them) into
 * q.ref and the tracked sum of v_i into q.vp, then its own z_i + error
 * feedback - z, encodes that (the buffer keeps the quantization error),
 * allgathers the payloads and decodes every leader's payload into the same
 * place of q.sum, summing in node order, so that every leader obtains the
 * same bits (px__hsq_take_sum makes z of them). The rounding is keyed by
 * the seed, the iteration, this rank and the bucket: a rerun gives the same
 * payloads.
 *
 * Why v_i stays home: z = mean(z_i + v_i) = (sum z_i + sum v_i) / M, and
 * sum v_i moves by sum z_i - M z each round, which every leader knows once
 * it has sum z_i; so the leaders exchange only z_i (its change from z) and
 * track sum v_i themselves (q.vsum). The scaled dual v_i is large where
 * rho2 is small and does not shrink as the consensus settles, while
 * z_i - z does: without v_i in it the payload's range, and so the rounding
 * noise of z, falls as the run converges. With error feedback the tracked
 * sum differs from the true one by at most the leaders' current rounding
 * errors (the sum of what was sent telescopes). */
#include <string.h>

#include "admm/hsadmm_int.h"
#include "prunex/comm_internal.h"
#include "prunex/hsadmm_internal.h"
#include "prunex/prune_internal.h"
#include "prunex/quantize.h"
#include "px_check.h"

void px__hsq_free(px_hsadmm_t *h) {
  px__hsadmm_quant_t *q = &h->q;
  PX_FREE_ALL(q->err, q->sum, q->ref, q->vsum, q->vp, (void *)q->err_ptrs, (void *)q->ref_ptrs,
              (void *)q->vs_ptrs, q->send, q->recv);
  int bits = q->bits;
  uint64_t seed = q->seed;
  memset(q, 0, sizeof *q);
  q->bits = bits;
  q->seed = seed;
}

/* The leaders' buffers, sized for the largest bucket: all of the model
 * before the first mask, never more later. */
static px_status_t px__hsq_alloc(px_hsadmm_t *h) {
  px__hsadmm_quant_t *q = &h->q;
  size_t bf = (h->cfg.bucket_bytes ? h->cfg.bucket_bytes : PX_PACK_DEFAULT_BUCKET_BYTES) / 4;
  if (bf > h->st.total) bf = h->st.total;
  size_t stride = px_quant_bytes(8, bf); /* the wider of the two */
  q->err = px_calloc(h->st.total, sizeof(float), "hsadmm.quant_error");
  q->sum = px_calloc(h->st.total, sizeof(float), "hsadmm.quant_sum");
  q->ref = px_calloc(h->st.total, sizeof(float), "hsadmm.quant_ref");
  q->vsum = px_calloc(h->st.total, sizeof(float), "hsadmm.quant_vsum");
  q->vp = px_calloc(h->st.total, sizeof(float), "hsadmm.quant_vsum_packed");
  q->err_ptrs = px_calloc((size_t)h->n, sizeof(float *), "hsadmm.ptrs");
  q->ref_ptrs = px_calloc((size_t)h->n, sizeof(float *), "hsadmm.ptrs");
  q->vs_ptrs = px_calloc((size_t)h->n, sizeof(float *), "hsadmm.ptrs");
  q->send = px_malloc(stride, "hsadmm.quant_send");
  q->recv = px_malloc(stride * (size_t)h->M, "hsadmm.quant_recv");
  if (!q->err || !q->sum || !q->ref || !q->vsum || !q->vp || !q->err_ptrs || !q->ref_ptrs ||
      !q->vs_ptrs || !q->send || !q->recv) {
    px__hsq_free(h);
    return PX_ERR_NOMEM;
  }
  for (int i = 0; i < h->n; i++) {
    q->err_ptrs[i] = q->err + h->st.off[i];
    q->ref_ptrs[i] = h->st.z + h->st.off[i]; /* z is not written until the exchange lands */
    q->vs_ptrs[i] = q->vsum + h->st.off[i];
  }
  return PX_OK;
}

px_status_t px_hsadmm_set_quantize(px_hsadmm_t *h, int bits, uint64_t seed) {
  PX_REQUIRE(bits == 0 || px_quant_bits_ok(bits), "comm.quantize = %d: must be none, 8 or 4",
             bits);
  PX_REQUIRE(bits == 0 || !h->cfg.flat,
             "comm.quantize = %d: applies to the hierarchical exchange (strategy hsadmm) only",
             bits);
  PX_REQUIRE(bits == 0 || !h->dev, "comm.quantize = %d: not with H-SADMM's device state",
             bits);
  PX_REQUIRE(bits == 0 || !h->el.on, "comm.quantize = %d: not with an elastic job", bits);
  PX_REQUIRE(bits == 0 || !h->lc.on, "comm.quantize = %d: not with comm.compress lossless",
             bits);
  if (h->iteration > 0)
    return px_set_error(PX_ERR_STATE, "comm.quantize: set before the first round");
  h->q.bits = bits;
  h->q.seed = seed;
  if (!bits || !h->inter || h->q.err) return PX_OK;
  return px__hsq_alloc(h);
}

px_status_t px__hsq_bucket(px_hsadmm_t *h, int b, float *buf, size_t nf) {
  px__hsadmm_quant_t *q = &h->q;
  size_t o = (size_t)(buf - px_pack_buffer(h->plan));
  PX_CHECK(px_pack_shrink_bucket(h->plan, b, (const float *const *)q->ref_ptrs));
  memcpy(q->ref + o, buf, nf * sizeof(float));
  PX_CHECK(px_pack_shrink_bucket(h->plan, b, (const float *const *)q->vs_ptrs));
  memcpy(q->vp + o, buf, nf * sizeof(float));
  PX_CHECK(px_pack_shrink_bucket(h->plan, b, (const float *const *)h->src_ptrs));
  size_t qb = px_quant_bytes(q->bits, nf);
  uint64_t key = px_quant_key(q->seed, (uint64_t)h->iteration,
                              (uint64_t)px_group_rank(h->world), (uint64_t)b);
  px_quant_encode(buf, nf, q->bits, key, q->send);
  /* every leader packs the same layout, so qb is the same on all of them */
  PX_CHECK(px_comm_allgather(h->inter, q->send, q->recv, qb, PX_COMM_U8));
  float *acc = q->sum + o;
  memset(acc, 0, nf * sizeof(float));
  for (int r = 0; r < h->M; r++) px_quant_decode_add(q->recv + (size_t)r * qb, nf, q->bits, acc);
  return PX_OK;
}

void px__hsq_source(px_hsadmm_t *h) {
  const float *zi = h->st.zi, *z = h->st.z, *err = h->q.err;
  for (size_t j = 0; j < h->st.total; j++) h->st.s[j] = zi[j] + err[j] - z[j];
}

void px__hsq_take_sum(px_hsadmm_t *h) {
  px__hsadmm_quant_t *q = &h->q;
  /* the buffer holds the quantization errors: keep them for the next round
   * (pruned positions drop theirs) */
  px_pack_expand(h->plan, q->err_ptrs);
  /* sum z_i: the decoded payloads plus M times the previous z, into s
   * (parameter layout, zero where pruned); then the mean with the tracked
   * sum of v_i into the plan's buffer */
  float *buf = px_pack_buffer(h->plan);
  size_t nf = px_pack_packed_floats(h->plan);
  float M = (float)h->M, inv = 1.0f / M;
  for (size_t j = 0; j < nf; j++) buf[j] = M * q->ref[j] + q->sum[j];
  px_pack_expand(h->plan, h->src_ptrs);
  for (size_t j = 0; j < nf; j++) buf[j] = (buf[j] + q->vp[j]) * inv;
}

void px__hsq_track_vsum(px_hsadmm_t *h) {
  for (size_t j = 0; j < h->st.total; j++) h->q.vsum[j] += h->st.s[j] - (float)h->M * h->st.z[j];
}

uint64_t px__hsq_payload_bytes(const px_hsadmm_t *h) {
  /* every rank has the plan's layout (the same masks), so every rank
   * computes it alike */
  uint64_t bytes = 0;
  for (int b = 0; b < px_pack_num_buckets(h->plan); b++) {
    size_t nf;
    (void)px_pack_bucket(h->plan, b, &nf);
    bytes += px_quant_bytes(h->q.bits, nf);
  }
  return bytes;
}

/* A node or leader that resumes without state would break the tracked sum,
 * so then every node restarts its inter dual, and the leaders the sum, at
 * zero. */
px_status_t px__hsq_resumed(px_hsadmm_t *h, int fresh) {
  double f = fresh ? 1.0 : 0.0;
  PX_CHECK(px_comm_allreduce(h->world, &f, &f, 1, PX_COMM_F64, PX_COMM_MAX));
  if (f == 0.0) return PX_OK;
  memset(h->st.v, 0, h->st.total * sizeof(float));
  if (h->q.vsum) memset(h->q.vsum, 0, h->st.total * sizeof(float));
  return PX_OK;
}
