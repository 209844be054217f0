/* The model's memory plan (nn/mem_plan.c): blocks with a lifetime, placed
 * in one arena so that blocks alive at the same time never share a byte. */
#ifndef PX_NN_MEM_PLAN_H
#define PX_NN_MEM_PLAN_H

#include <stddef.h>

#include "prunex/px.h"

typedef struct {
  size_t bytes;  /* size; 0: placed at offset 0, shares nothing */
  int lo, hi;    /* alive at every step t with lo <= t <= hi (both ends included) */
  size_t offset; /* out: where it starts, a multiple of the plan's alignment */
} px__mem_block_t;

/* Places blocks[0..n) (writes each offset) and writes the arena's size to
 * *total: two blocks whose lifetimes share a step get disjoint byte ranges.
 * Greedy: by decreasing size (then index), each at the lowest aligned
 * offset free of the blocks already placed that share a step with it.
 * Deterministic; O(n^2 log n) time, O(n) memory. align is a power of two.
 * Fails only when out of memory (nothing written then). */
px_status_t px__mem_plan(px__mem_block_t *blocks, int n, size_t align, size_t *total);

/* The most bytes alive at one step: what no placement goes below (the plan
 * logs it beside the arena's size at PX_LOG_LEVEL=info). */
size_t px__mem_plan_bound(const px__mem_block_t *blocks, int n);

#endif
