/* DDP's gradient buckets, reduced during the backward pass (ddp_overlap.h). */
#include <string.h>

#include "prunex/comm_internal.h"
#include "prunex/nn.h"
#include "px_check.h"
#include "strategy/ddp_overlap.h"

#define PX__FIRST_BUCKET_BYTES ((size_t)1 << 20)

struct px__ddp_buckets {
  px_model_t *m;
  px_group_t *world;
  int np, nb;
  int *bucket_of;        /* [np] bucket of each parameter */
  size_t *lo, *n;        /* [nb] range of each bucket in the flat gradients (floats) */
  int *count;            /* [nb] parameters of each bucket */
  int *pending;          /* [nb] parameters still without their gradient this step */
  px_comm_req_t **req;   /* [nb] NULL: not started this step */
  float *grads;          /* the model's flat gradients (overlap) */
  int overlap, overlapped;
  px_status_t failed;    /* the first failure of a start during the backward pass */
};

static px_status_t px__start(px__ddp_buckets_t *b, int k, float *grads) {
  return px_comm_iallreduce(b->world, grads + b->lo[k], grads + b->lo[k], b->n[k], PX_COMM_F32,
                            PX_COMM_AVG, &b->req[k]);
}

static px_status_t px__ready(void *ctx, px_model_t *m, int param) {
  (void)m;
  px__ddp_buckets_t *b = ctx;
  int k = b->bucket_of[param];
  if (--b->pending[k] > 0) return PX_OK;
  px_status_t st = px__start(b, k, b->grads);
  if (st < 0 && b->failed == PX_OK) b->failed = st;
  if (st == PX_OK) b->overlapped++;
  return st;
}

px_status_t px__ddp_buckets_create(px_model_t *m, px_group_t *world, size_t bucket_bytes,
                                   int overlap, px__ddp_buckets_t **out) {
  *out = NULL;
  if (bucket_bytes == 0) bucket_bytes = PX_COMM_DEFAULT_BUCKET_BYTES;
  px__ddp_buckets_t *b = px_calloc(1, sizeof *b, "ddp.buckets");
  if (!b) return PX_ERR_NOMEM;
  b->m = m;
  b->world = world;
  b->np = px_model_num_params(m);
  b->bucket_of = px_calloc((size_t)b->np, sizeof(int), "ddp.buckets");
  b->lo = px_calloc((size_t)b->np, sizeof(size_t), "ddp.buckets");
  b->n = px_calloc((size_t)b->np, sizeof(size_t), "ddp.buckets");
  b->count = px_calloc((size_t)b->np, sizeof(int), "ddp.buckets");
  b->pending = px_calloc((size_t)b->np, sizeof(int), "ddp.buckets");
  b->req = px_calloc((size_t)b->np, sizeof *b->req, "ddp.buckets");
  if (!b->bucket_of || !b->lo || !b->n || !b->count || !b->pending || !b->req) {
    px__ddp_buckets_destroy(b);
    return PX_ERR_NOMEM;
  }
  /* offsets of the parameters in the flat vector */
  const float *flat = px_model_flat_grads(m)->data;
  size_t end = px_model_numel(m), bytes = 0;
  size_t cap = bucket_bytes < PX__FIRST_BUCKET_BYTES ? bucket_bytes : PX__FIRST_BUCKET_BYTES;
  int k = 0;
  for (int i = b->np - 1; i >= 0; i--) {
    size_t n = px_tensor_numel(px_model_param(m, i)->value);
    if (bytes > 0 && bytes + n * sizeof(float) > cap) { /* close bucket k */
      k++;
      bytes = 0;
      cap = bucket_bytes;
    }
    end -= n;
    if ((const float *)px_model_param(m, i)->grad->data != flat + end) {
      px__ddp_buckets_destroy(b);
      return px_set_error(PX_ERR_INTERNAL, "ddp buckets: gradient of %s is not at its place in "
                          "the flat vector", px_model_param(m, i)->name);
    }
    b->bucket_of[i] = k;
    b->lo[k] = end; /* the lowest parameter of the bucket so far */
    b->n[k] += n;
    b->count[k]++;
    bytes += n * sizeof(float);
  }
  b->nb = k + 1;
  memcpy(b->pending, b->count, (size_t)b->nb * sizeof(int));
  b->overlap = overlap;
  if (overlap) {
    b->grads = px_model_flat_grads(m)->data;
    px_model_set_grad_ready(m, px__ready, b);
  }
  *out = b;
  return PX_OK;
}

px_status_t px__ddp_buckets_finish(px__ddp_buckets_t *b, float *grads) {
  px_status_t st = b->failed;
  b->failed = PX_OK;
  for (int k = 0; k < b->nb && st == PX_OK; k++)
    if (!b->req[k]) st = px__start(b, k, grads);
  for (int k = 0; k < b->nb; k++) {
    if (!b->req[k]) continue;
    px_status_t w = px_comm_wait(b->req[k]);
    b->req[k] = NULL;
    if (st == PX_OK) st = w;
  }
  memcpy(b->pending, b->count, (size_t)b->nb * sizeof(int));
  return st;
}

int px__ddp_buckets_count(const px__ddp_buckets_t *b) { return b->nb; }
int px__ddp_buckets_overlapped(const px__ddp_buckets_t *b) { return b->overlapped; }

void px__ddp_buckets_destroy(px__ddp_buckets_t *b) {
  if (!b) return;
  if (b->overlap) px_model_set_grad_ready(b->m, NULL, NULL);
  for (int k = 0; b->req && k < b->nb; k++)
    if (b->req[k]) (void)px_comm_wait(b->req[k]);
  PX_FREE_ALL(b->bucket_of, b->lo, b->n, b->count, b->pending, b->req, b);
}
