/* Internals of compaction (compact.c) for the code that keeps a compact
 * twin of a training model up to date rather than exporting it once: the
 * strategies' compact evaluation (strategy/compact_eval.c).
 *
 * A plan is the analysis of a dense model: host copies of its values, the
 * channel groups and which channels of each stay. It is allocated once per
 * dense model (px__compact_plan) and refreshed from the model's current
 * values without allocating (px__compact_update); a compact model built
 * from it (px__compact_build) takes new values of the same pattern through
 * px__compact_fill. */
#ifndef PX_COMPACT_INT_H
#define PX_COMPACT_INT_H

#include <stdint.h>

#include "prunex/nn.h"

/* px__compact_t.round for channels-last layers (strategy/compact_train.c):
 * widths of 1, 2, 4 or 8 channels, or a multiple of 16, the channel counts
 * the CPU batch norm runs in vectors there (nn/cpu/cpu_bn.c). */
#define PX__COMPACT_ROUND_CL (-1)

typedef struct px__compact {
  int fold;                /* 1: fold constant channels into batch norms (export);
                              0: keep them, so the compact model's BN statistics map
                              one to one onto the dense model's kept channels */
  int round;               /* > 1: every group keeps a multiple of this many channels;
                              PX__COMPACT_ROUND_CL: 1, 2, 4, 8 or a multiple of 16
                              (px__compact_update widens it with dropped ones) */
  int nn, na, np, nb;
  px_model_node_t *nodes;  /* [nn] */
  float **pv;              /* [np] host copies of the parameters */
  float **bv;              /* [nb] host copies of the BN running statistics */
  int *group;              /* [na] channel group of each activation */
  uint8_t **live;          /* [na] per group root: keep mask over its channels (NULL elsewhere) */
  int32_t *ki, *ko;        /* [max channels] index scratch */
  float *tmp;              /* [largest parameter] value scratch */
  int32_t *src;            /* [largest parameter] dense-index scratch */
} px__compact_t;

/* The width a group keeping n channels is widened to under round (see
 * px__compact_t.round; at most the group's own width, which the caller caps). */
int px__compact_round_width(int n, int round);

/* Analyses dense (values copied to the host). Caller owns *out
 * (px__compact_destroy). PX_ERR_NOMEM, or a copy's error. */
px_status_t px__compact_plan(const px_model_t *dense, int fold, px__compact_t **out);
/* Re-reads dense's values (the same graph as the plan's) and redoes the
 * analysis; allocates nothing. */
px_status_t px__compact_update(px__compact_t *c, const px_model_t *dense);
void px__compact_destroy(px__compact_t *c);
/* The kept channels of activation a's group, ascending, into idx (room for
 * all of a's channels); returns their number (>= 1). */
int px__compact_kept(const px__compact_t *c, const px_model_t *dense, int a, int32_t *idx);
/* Creates the compact model of the plan on ops for batch samples and fills
 * it (px__compact_fill). Caller owns *out. */
px_status_t px__compact_build(px__compact_t *c, const px_model_t *dense, px_ops_t *ops,
                              int32_t batch, px_model_t **out);
/* Copies the plan's values of the kept channels into cm, a model built from
 * a plan with the same kept channels; allocates nothing. */
px_status_t px__compact_fill(px__compact_t *c, const px_model_t *dense, px_model_t *cm);
/* The index maps of a compact model cm built from the plan (CPU models:
 * plain flat families): pmap[j] is the dense flat-parameter index that
 * compact flat parameter j holds, bmap the same for the BN statistics
 * (px_model_flat_buffers); both sized by cm's families. The same traversal
 * as px__compact_fill. PX_ERR_STATE when an entry of cm has no
 * source (a graph with parameters compaction does not follow). */
px_status_t px__compact_index(px__compact_t *c, const px_model_t *dense, const px_model_t *cm,
                              int64_t *pmap, int64_t *bmap);

#endif
