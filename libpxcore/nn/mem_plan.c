/* The model's memory plan: the activations, their gradients and the
 * second-consumer scratch of one training step are blocks with a lifetime
 * (the steps of the forward pass, the loss and the backward pass in which
 * they hold a value), and one arena holds them all. A block whose lifetime
 * is over (an activation once the last backward that reads it has run, an
 * activation gradient once the backward of its producer has read it) gives
 * its bytes to the blocks that start later, as PyTorch's allocator does by
 * freeing. The placement is the classic greedy one for offline interval
 * allocation (largest first, lowest fitting offset): not optimal, but
 * close to the largest sum of the sizes alive at one step on ResNets, and
 * it is computed once, when the model is built. */
#include <stdint.h>
#include <stdlib.h>

#include "nn/px_mem_plan.h"
#include "prunex/px.h"
#include "px_check.h"

typedef struct {
  size_t a, b; /* sort key: bytes (decreasing) and index, or offset and end */
} px__mem_key_t;

static int px__mem_by_size(const void *p, const void *q) {
  const px__mem_key_t *x = p, *y = q;
  if (x->a != y->a) return x->a > y->a ? -1 : 1;
  return x->b < y->b ? -1 : x->b > y->b;
}

static int px__mem_by_offset(const void *p, const void *q) {
  const px__mem_key_t *x = p, *y = q;
  if (x->a != y->a) return x->a < y->a ? -1 : 1;
  return x->b < y->b ? -1 : x->b > y->b;
}

/* The lowest multiple of align at or after which bytes fit between the
 * busy ranges busy[0..nbusy) (sorted by start). */
static size_t px__mem_fit(const px__mem_key_t *busy, int nbusy, size_t bytes, size_t align) {
  size_t at = 0;
  for (int i = 0; i < nbusy; i++) {
    if (busy[i].a >= at + bytes) break; /* the gap before busy[i] holds it */
    if (busy[i].b > at) at = (busy[i].b + align - 1) & ~(align - 1);
  }
  return at;
}

size_t px__mem_plan_bound(const px__mem_block_t *blocks, int n) {
  size_t most = 0;
  for (int i = 0; i < n; i++) { /* the most alive is reached where some block starts */
    size_t live = 0;
    for (int j = 0; j < n; j++)
      if (blocks[j].lo <= blocks[i].lo && blocks[i].lo <= blocks[j].hi) live += blocks[j].bytes;
    if (live > most) most = live;
  }
  return most;
}

px_status_t px__mem_plan(px__mem_block_t *blocks, int n, size_t align, size_t *total) {
  *total = 0;
  if (n <= 0) return PX_OK;
  px__mem_key_t *order = px_malloc((size_t)n * sizeof *order, "model.mem_plan");
  px__mem_key_t *busy = px_malloc((size_t)n * sizeof *busy, "model.mem_plan");
  uint8_t *placed = px_calloc((size_t)n, 1, "model.mem_plan");
  if (!order || !busy || !placed) {
    PX_FREE_ALL(order, busy, placed);
    return PX_ERR_NOMEM;
  }
  for (int i = 0; i < n; i++) order[i] = (px__mem_key_t){blocks[i].bytes, (size_t)i};
  qsort(order, (size_t)n, sizeof *order, px__mem_by_size);
  size_t end = 0;
  for (int k = 0; k < n; k++) {
    px__mem_block_t *b = &blocks[order[k].b];
    int nbusy = 0;
    for (int j = 0; j < n && b->bytes > 0; j++) {
      const px__mem_block_t *o = &blocks[j];
      if (placed[j] && o->bytes > 0 && o->lo <= b->hi && b->lo <= o->hi)
        busy[nbusy++] = (px__mem_key_t){o->offset, o->offset + o->bytes};
    }
    qsort(busy, (size_t)nbusy, sizeof *busy, px__mem_by_offset);
    b->offset = b->bytes > 0 ? px__mem_fit(busy, nbusy, b->bytes, align) : 0;
    placed[order[k].b] = 1;
    if (b->offset + b->bytes > end) end = b->offset + b->bytes;
  }
  *total = end;
  PX_FREE_ALL(order, busy, placed);
  px_log(PX_LOG_INFO, "memory plan: %d blocks in %zu bytes; %zu alive at the busiest step", n, end,
         px__mem_plan_bound(blocks, n));
  return PX_OK;
}
