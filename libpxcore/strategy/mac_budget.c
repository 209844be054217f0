/* prune.mac_keep: a budget of multiply-accumulates per image instead of a
 * channel keep. The MACs a pruned model computes depend only on how many
 * channels each coupled group keeps (px_prune_keep_count of the keep), not
 * on which, so the largest keep within the budget follows from the graph
 * before training: every rank finds the same, and the masks H-SADMM
 * freezes then give a compact model within it. */
#include <stdlib.h>

#include "prunex/nn.h"
#include "prunex/prune.h"
#include "prunex/strategy.h"

/* Node by node, the channels each conv computes at `keep`: a depthwise
 * follower and a producer keep their group's count of outputs, a consumer
 * of inputs; -1 everywhere else (all). consumer[] marks the params that are
 * some producer's consumer. */
static void px__kept_channels(const px_model_t *m, const px_hsadmm_param_t *hp,
                              const uint8_t *consumer, double keep, int32_t *out, int32_t *in) {
  int n = px_model_num_nodes(m);
  for (int k = 0; k < n; k++) {
    px_model_node_t nd;
    out[k] = in[k] = -1;
    if (px_model_node(m, k, &nd) != PX_OK || nd.kind != PX_NODE_CONV || nd.w < 0) continue;
    const px_hsadmm_param_t *p = &hp[nd.w];
    if (!p->prunable) continue;
    if (p->has_consumer) out[k] = (int32_t)px_prune_keep_count(keep, (size_t)nd.c_out);
    if (consumer[nd.w] && !p->follower)
      in[k] = (int32_t)px_prune_keep_count(keep, (size_t)nd.c_in);
  }
}

static uint64_t px__macs_at(const px_model_t *m, const px_hsadmm_param_t *hp,
                            const uint8_t *consumer, double keep, int32_t *out, int32_t *in) {
  px__kept_channels(m, hp, consumer, keep, out, in);
  return px_model_macs_kept(m, out, in);
}

/* The scratch both functions need: consumer marks and the two arrays. */
typedef struct {
  uint8_t *consumer;
  int32_t *out, *in;
} px__mac_scratch_t;

static px_status_t px__mac_scratch(const px_model_t *m, const px_hsadmm_param_t *hp,
                                   px__mac_scratch_t *w) {
  int np = px_model_num_params(m), n = px_model_num_nodes(m);
  w->consumer = px_calloc((size_t)np + 1, 1, "strategy.mac_budget");
  w->out = px_calloc((size_t)n + 1, sizeof(int32_t), "strategy.mac_budget");
  w->in = px_calloc((size_t)n + 1, sizeof(int32_t), "strategy.mac_budget");
  if (!w->consumer || !w->out || !w->in) return PX_ERR_NOMEM;
  for (int i = 0; i < np; i++)
    if (hp[i].prunable && hp[i].has_consumer && !hp[i].follower && hp[i].consumer >= 0 &&
        hp[i].consumer < np)
      w->consumer[hp[i].consumer] = 1;
  return PX_OK;
}

static void px__mac_scratch_free(px__mac_scratch_t *w) {
  px_free(w->consumer);
  px_free(w->out);
  px_free(w->in);
}

uint64_t px_strategy_coupled_macs(const px_model_t *m, const px_hsadmm_param_t *hp,
                                  double keep) {
  px__mac_scratch_t w = {0};
  uint64_t macs = 0;
  if (px__mac_scratch(m, hp, &w) == PX_OK) macs = px__macs_at(m, hp, w.consumer, keep, w.out, w.in);
  px__mac_scratch_free(&w);
  return macs;
}

static int px__cmp_double(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return (x > y) - (x < y);
}

px_status_t px_strategy_mac_keep(const px_model_t *m, const px_hsadmm_param_t *hp,
                                 double mac_keep, double *channel_keep, uint64_t *macs) {
  if (!(mac_keep > 0.0 && mac_keep <= 1.0))
    return px_set_error(PX_ERR_INVALID, "prune.mac_keep: %g is not in (0, 1]", mac_keep);
  int np = px_model_num_params(m);
  uint64_t dense = px_model_macs(m);
  if (!dense)
    return px_set_error(PX_ERR_INVALID, "prune.mac_keep: the model's multiply-accumulates "
                        "cannot be counted");
  /* the keeps where some group's count steps: j / C, j = 1..C; and 1 */
  size_t nb = 1;
  for (int i = 0; i < np; i++)
    if (hp[i].prunable && hp[i].has_consumer && !hp[i].follower) nb += (size_t)hp[i].shape.c_out;
  px__mac_scratch_t w = {0};
  double *bp = px_malloc(nb * sizeof *bp, "strategy.mac_budget");
  px_status_t st = bp ? px__mac_scratch(m, hp, &w) : PX_ERR_NOMEM;
  if (st != PX_OK) goto done;
  size_t b = 0;
  for (int i = 0; i < np; i++)
    if (hp[i].prunable && hp[i].has_consumer && !hp[i].follower)
      for (int32_t j = 1; j <= hp[i].shape.c_out; j++)
        bp[b++] = (double)j / (double)hp[i].shape.c_out;
  bp[b++] = 1.0;
  qsort(bp, b, sizeof *bp, px__cmp_double);
  double budget = mac_keep * (double)dense;
  uint64_t least = px__macs_at(m, hp, w.consumer, bp[0], w.out, w.in);
  if ((double)least > budget) {
    st = px_set_error(PX_ERR_INVALID,
                      "prune.mac_keep: %g of the model's %llu multiply-accumulates per image is "
                      "less than the %llu (%.1f%%) it computes with %s; the rest are in layers "
                      "the channel keep does not prune (the stem, convs writing a residual "
                      "stream or a concatenation, the classifier, skip_layers)",
                      mac_keep, (unsigned long long)dense, (unsigned long long)least,
                      100.0 * (double)least / (double)dense,
                      b > 1 ? "one channel per coupled group" : "no coupled channels to prune");
    goto done;
  }
  /* the count grows with the keep: the last breakpoint within the budget */
  size_t lo = 0, hi = b - 1;
  uint64_t at = least;
  while (lo < hi) {
    size_t mid = lo + (hi - lo + 1) / 2;
    uint64_t c = px__macs_at(m, hp, w.consumer, bp[mid], w.out, w.in);
    if ((double)c <= budget) lo = mid, at = c;
    else hi = mid - 1;
  }
  *channel_keep = bp[lo];
  if (macs) *macs = at;
done:
  px__mac_scratch_free(&w);
  px_free(bp);
  return st;
}
