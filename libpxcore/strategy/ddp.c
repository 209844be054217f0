/* The ddp strategy: dense synchronous SGD, the gradients averaged over all
 * ranks every step in buckets of consecutive parameters from the last layer
 * backwards (ddp_overlap.c): on a host model each bucket's allreduce starts
 * during the backward pass as soon as its gradients are ready, as PyTorch
 * DDP does, and the trainer's gradient hook waits for them. An iteration is
 * a block of local steps, reported like an H-SADMM round. On a staged run
 * (strategy.c) the gradients cross through a host mirror and the same
 * buckets are reduced after the backward pass, unless NCCL takes the device
 * buffer. */
#include "px_check.h"
#include "strategy/ddp_overlap.h"
#include "strategy/strategy_int.h"

typedef struct {
  px__strategy_run_t *run;
  float *h_grad; /* [numel] host mirror of the gradients (staged runs) */
  px__ddp_buckets_t *buckets; /* NULL when NCCL reduces the device buffer */
} px__ddp_strategy_t;

static px_status_t px__ddp_hook(void *ctx, px_model_t *m) {
  px__ddp_strategy_t *s = ctx;
  const px_tensor_t *g = px_model_flat_grads(m);
  if (!s->buckets) return px__strategy_world_average(s->run, g, s->h_grad, 1);
  if (!s->run->staged) return px__ddp_buckets_finish(s->buckets, g->data);
  PX_CHECK(px__strategy_down(g, s->h_grad));
  PX_CHECK(px__ddp_buckets_finish(s->buckets, s->h_grad));
  return px__strategy_up(g, s->h_grad);
}

static px_status_t px__ddp_create(px__strategy_run_t *r, void **priv) {
  px__ddp_strategy_t *s = px_calloc(1, sizeof *s, "strategy.ddp");
  if (!s) return PX_ERR_NOMEM;
  *priv = s;
  s->run = r;
  PX_CHECK(px__strategy_start_baseline(r, &s->h_grad));
  if (!r->direct)
    PX_CHECK(px__ddp_buckets_create(r->m, r->world, r->cfg->bucket_bytes,
                                    !r->staged && !r->cfg->ddp_no_overlap, &s->buckets));
  px_trainer_set_grad_hook(r->t, px__ddp_hook, s);
  return PX_OK;
}

/* DDP's exchange is the dense one. */
static uint64_t px__ddp_dense_inter(const px__strategy_run_t *r, void *priv) {
  (void)priv;
  return r->it.bytes_inter;
}

static void px__ddp_destroy(px__strategy_run_t *r, void *priv) {
  px__ddp_strategy_t *s = priv;
  px_trainer_set_grad_hook(r->t, NULL, NULL);
  if (!s) return;
  px__ddp_buckets_destroy(s->buckets);
  px_free(s->h_grad);
  px_free(s);
}

const px__strategy_ops_t px__strategy_ddp_ops = {
    .kind = PX_STRATEGY_DDP, /* names: policy/strategy_info.c */
    .create = px__ddp_create,
    .dense_inter = px__ddp_dense_inter,
    .decide = px__strategy_decide_plain,
    .resume_items = px__strategy_resume_global,
    .destroy = px__ddp_destroy,
};
