/* The topk strategy: each rank sends the top `topk_ratio` gradient entries
 * of every tensor by magnitude (index + value pairs, one allgather per step,
 * in the trainer's gradient hook) and keeps the rest as error feedback for
 * later steps; the averaged sparse gradient replaces the dense one. */
#include <math.h>
#include <string.h>

#include "px_check.h"
#include "strategy/strategy_int.h"
#include "prunex/comm_internal.h"

typedef struct {
  px__strategy_run_t *run;
  float *err;               /* [numel] error feedback */
  uint32_t *idx;            /* [max tensor] selection workspace */
  uint8_t *sendbuf, *recvbuf;
  size_t kpairs;            /* pairs this rank sends per step */
  uint64_t rng;
  float *h_grad;            /* [numel] host mirror of the gradients (staged runs) */
} px__topk_strategy_t;

/* Moves the k entries of largest |e| to the front of idx[0..n) (quickselect
 * with a pseudo-random pivot; the order within the front is unspecified). */
static void px__topk_select(const float *e, uint32_t *idx, size_t n, size_t k, uint64_t *rng) {
  size_t lo = 0, hi = n; /* the k-th largest lies in idx[lo..hi) */
  while (hi - lo > 1 && k > lo && k < hi) {
    *rng = *rng * 6364136223846793005ull + 1442695040888963407ull;
    size_t p = lo + (size_t)((*rng >> 33) % (hi - lo));
    float pv = fabsf(e[idx[p]]);
    /* three-way partition: > pv | == pv | < pv */
    size_t a = lo, b = lo, c = hi;
    while (b < c) {
      float v = fabsf(e[idx[b]]);
      if (v > pv) {
        uint32_t t = idx[a]; idx[a] = idx[b]; idx[b] = t;
        a++;
        b++;
      } else if (v < pv) {
        c--;
        uint32_t t = idx[b]; idx[b] = idx[c]; idx[c] = t;
      } else {
        b++;
      }
    }
    if (k <= a) hi = a;
    else if (k <= c) return; /* the boundary falls among equals */
    else lo = c;
  }
}

/* This rank's selection: error feedback plus the gradient, the top k of
 * each tensor into the send buffer as (index, value) pairs. */
static void px__topk_pack(px__topk_strategy_t *s, px_model_t *m, const float *grad) {
  const px__strategy_run_t *r = s->run;
  uint8_t *out = s->sendbuf;
  size_t off = 0;
  for (int i = 0; i < r->np; i++) {
    size_t n = px_tensor_numel(px_model_param(m, i)->value);
    size_t k = px_prune_keep_count(r->cfg->topk_ratio, n);
    float *e = s->err + off;
    const float *g = grad + off;
    for (size_t j = 0; j < n; j++) e[j] += g[j];
    for (size_t j = 0; j < n; j++) s->idx[j] = (uint32_t)j;
    px__topk_select(e, s->idx, n, k, &s->rng);
    for (size_t j = 0; j < k; j++) {
      uint32_t q = s->idx[j];
      float v = e[q];
      memcpy(out, &q, 4);
      memcpy(out + 4, &v, 4);
      out += 8;
      e[q] = 0.0f; /* sent: what remains is the error fed back next step */
    }
    off += n;
  }
}

/* The averaged sparse gradient of all ranks into grad (zeroed first). */
static px_status_t px__topk_unpack(px__topk_strategy_t *s, px_model_t *m, float *grad) {
  const px__strategy_run_t *r = s->run;
  size_t bytes = s->kpairs * 8;
  memset(grad, 0, r->numel * sizeof(float));
  int N = px_group_size(r->world);
  float inv = 1.0f / (float)N;
  for (int src = 0; src < N; src++) {
    const uint8_t *in = s->recvbuf + (size_t)src * bytes;
    size_t poff = 0;
    for (int i = 0; i < r->np; i++) {
      size_t n = px_tensor_numel(px_model_param(m, i)->value);
      size_t k = px_prune_keep_count(r->cfg->topk_ratio, n);
      for (size_t j = 0; j < k; j++, in += 8) {
        uint32_t q;
        float v;
        memcpy(&q, in, 4);
        memcpy(&v, in + 4, 4);
        if (q >= n) return px_set_error(PX_ERR_PEER, "rank %d sent index %u for %s (%zu entries)",
                                        src, q, r->names[i], n);
        grad[poff + q] += v * inv;
      }
      poff += n;
    }
  }
  return PX_OK;
}

static px_status_t px__topk_hook(void *ctx, px_model_t *m) {
  px__topk_strategy_t *s = ctx;
  const px__strategy_run_t *r = s->run;
  const px_tensor_t *flat = px_model_flat_grads(m);
  float *grad = r->staged ? s->h_grad : flat->data;
  if (r->staged) PX_CHECK(px__strategy_down(flat, grad));
  px__topk_pack(s, m, grad);
  PX_CHECK(px_comm_allgather(r->world, s->sendbuf, s->recvbuf, s->kpairs * 8, PX_COMM_U8));
  PX_CHECK(px__topk_unpack(s, m, grad));
  return r->staged ? px__strategy_up(flat, grad) : PX_OK;
}

static px_status_t px__topk_create(px__strategy_run_t *r, void **priv) {
  const px_strategy_config_t *c = r->cfg;
  PX_REQUIRE(c->topk_ratio > 0 && c->topk_ratio <= 1, "comm.topk_ratio = %g: must be in (0, 1]",
             c->topk_ratio);
  px__topk_strategy_t *s = px_calloc(1, sizeof *s, "strategy.topk");
  if (!s) return PX_ERR_NOMEM;
  *priv = s;
  s->run = r;
  PX_CHECK(px__strategy_start_baseline(r, &s->h_grad));
  for (int i = 0; i < r->np; i++)
    s->kpairs += px_prune_keep_count(c->topk_ratio, px_tensor_numel(px_model_param(r->m, i)->value));
  int N = px_group_size(r->world);
  s->err = px_calloc(r->numel, sizeof(float), "topk.error_feedback");
  s->idx = px_malloc(r->max_numel * sizeof(uint32_t), "topk.select");
  s->sendbuf = px_malloc(s->kpairs * 8, "topk.send");
  s->recvbuf = px_malloc(s->kpairs * 8 * (size_t)N, "topk.recv");
  if (!s->err || !s->idx || !s->sendbuf || !s->recvbuf) return PX_ERR_NOMEM;
  s->rng = 0x9E3779B97F4A7C15ull ^ (uint64_t)px_comm_rank(r->comm);
  px_trainer_set_grad_hook(r->t, px__topk_hook, s);
  return PX_OK;
}

/* Bytes a dense ring allreduce of the gradients would move between nodes,
 * summed over ranks, for the iteration's steps: the ring through the ranks
 * (node by node) crosses M node boundaries, and each edge carries
 * 2 (N - 1) / N of the buffer each way. */
static uint64_t px__topk_dense_inter(const px__strategy_run_t *r, void *priv) {
  (void)priv;
  int N = px_group_size(r->world), M = px_comm_nnodes(r->comm);
  if (M < 2) return 0;
  double per = 2.0 * M * 2.0 * (N - 1) / N * (double)r->numel * sizeof(float);
  return (uint64_t)llround(per * (double)r->steps);
}

/* The model and momentum are the same on every rank (one averaged
 * update); the residuals and the selection's generator are each rank's. */
static px_status_t px__topk_resume_items(px__strategy_run_t *r, void *priv, px__resume_t *rs) {
  px__topk_strategy_t *s = priv;
  PX_CHECK(px__strategy_resume_model(r, rs, PX_RS_GLOBAL));
  PX_CHECK(
      px__resume_add(rs, "topk.residual", PX_RS_RANK, PX_ST_F32, s->err, r->numel * sizeof(float)));
  return px__resume_add(rs, "topk.rng", PX_RS_RANK, PX_ST_U64, &s->rng, sizeof s->rng);
}

static void px__topk_destroy(px__strategy_run_t *r, void *priv) {
  px__topk_strategy_t *s = priv;
  px_trainer_set_grad_hook(r->t, NULL, NULL);
  if (!s) return;
  PX_FREE_ALL(s->err, s->idx, s->sendbuf, s->recvbuf, s->h_grad, s);
}

const px__strategy_ops_t px__strategy_topk_ops = {
    .kind = PX_STRATEGY_TOPK, /* names: policy/strategy_info.c */
    .create = px__topk_create,
    .dense_inter = px__topk_dense_inter,
    .decide = px__strategy_decide_plain,
    .resume_items = px__topk_resume_items,
    .destroy = px__topk_destroy,
};
