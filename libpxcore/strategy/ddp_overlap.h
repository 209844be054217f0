/* DDP's gradient buckets (module-internal): the averaging of the
 * gradients starts per bucket during the backward pass, as soon as every
 * parameter of the bucket has its gradient, in reverse layer order, as
 * PyTorch DDP does.
 *
 * Buckets are runs of consecutive parameters taken from the last one
 * backwards: the first holds about 1 MiB (or bucket_bytes when smaller; the
 * reduction starts early, as with PyTorch's first bucket), the others about
 * bucket_bytes; each is one
 * contiguous range of the flat gradient vector and one non-blocking AVG
 * allreduce over the world. Without overlap (or on a staged model, whose
 * gradients reach the host only after the step) the same buckets are
 * reduced after the backward pass, in the same order: the values are the
 * same bits either way (every bucket sees the same algorithm and the same
 * element order), only the timing differs. Everything is allocated at
 * creation. */
#ifndef PX_STRATEGY_DDP_OVERLAP_H
#define PX_STRATEGY_DDP_OVERLAP_H

#include "prunex/comm.h"
#include "prunex/nn.h"

typedef struct px__ddp_buckets px__ddp_buckets_t;

/* Plans the buckets of m's parameters. overlap: install the model's
 * gradient-ready callback so that buckets start during the backward pass
 * (host models only). Caller owns *out (px__ddp_buckets_destroy). */
px_status_t px__ddp_buckets_create(px_model_t *m, px_group_t *world, size_t bucket_bytes,
                                   int overlap, px__ddp_buckets_t **out);

/* After the backward pass: starts the buckets not started yet (all of them
 * without overlap) on grads (the flat gradient vector, host memory: the
 * model's own when overlapping, else any copy of it), in bucket order, and
 * waits for all. Returns the first failure. */
px_status_t px__ddp_buckets_finish(px__ddp_buckets_t *b, float *grads);

/* Number of buckets, and how many buckets all steps so far started during
 * their backward pass. */
int px__ddp_buckets_count(const px__ddp_buckets_t *b);
int px__ddp_buckets_overlapped(const px__ddp_buckets_t *b);

/* Waits for what is still in flight, removes the callback, frees. NULL is a
 * no-op. */
void px__ddp_buckets_destroy(px__ddp_buckets_t *b);

#endif
