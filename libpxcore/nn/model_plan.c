/* The model's plan (nn/model_int.h): consumers, producers and gradient
 * aliases of the activations, and where the activations, their gradients
 * and the parameters live.
 *
 * Memory plan. The activations, their gradients and the scratch buffers
 * live in one arena, placed once at build time by their lifetimes in a step
 * (nn/mem_plan.c): an activation from its forward to the last backward that
 * reads it (a BN's output that only a residual add reads dies in the
 * forward; a conv's input once the conv's weight gradient is computed), a
 * gradient from the backward that first writes it to the one that reads it
 * last, so the backward pass writes gradients into the bytes of activations
 * that are done, as PyTorch's allocator frees them. PX_MEM_PLAN=separate
 * keeps the earlier plan (activations in their own arena, gradients coloured
 * onto equal-size buffers) for the tests and the bench to compare.
 *
 * Recomputation (PX_MEM_PLAN=recompute; the default for bf16 on CUDA, where
 * PyTorch's autocast peak is the bar). A BN's output that a backward reads
 * (the input of the conv after a BN and ReLU, for its weight gradient) is
 * not kept from the forward to the backward: its forward copy dies with its
 * last forward reader, and the backward makes it again from the BN's input
 * (which the BN's own backward keeps alive anyway) and the batch statistics,
 * bit for bit (px_batchnorm_recompute), into a second block that lives from
 * its first backward reader to its last. What the step keeps across the
 * loss is then the convs' outputs and the residual sums: for a ResNet, one
 * activation-sized tensor fewer per conv + BN + ReLU. It costs one
 * normalisation pass per such BN in the backward. */
#include <stdlib.h>
#include <string.h>

#include "nn/model_int.h"
#include "nn/px_mem_plan.h"
#include "px_check.h"

/* Whether input a of an ADD, an activation with other consumers (a residual
 * block's input), may share the ADD output's gradient buffer with the ADD's
 * other input b, a single-consumer activation made by a node other than an
 * ADD (the block's last BN), saving the copy of the gradient into a's own
 * buffer (px__route). The backward then writes the rest of a's gradient
 * (its other consumers' share, added in by px__settle) over the buffer
 * b's gradient lies in: that is safe when every other consumer of a comes
 * before b's producer in the forward, so that their backward runs after
 * b's producer has read its gradient, and after the ADD has routed it. */
static int px__stream_alias(const px_model_t *m, int add, int a, int b) {
  if (a < 1 || a == m->in_act || m->alias[a] != a || m->consumers[a] < 2 || b < 0 ||
      m->consumers[b] != 1 || m->producer[b] < 0 || m->nodes[m->producer[b]].kind == PX__ADD)
    return 0;
  for (int k = 0; k < m->nnodes; k++) {
    const px__node_t *c = &m->nodes[k];
    if ((c->in == a || c->in2 == a) && k != add && k >= m->producer[b]) return 0;
  }
  return 1;
}

/* Consumers, producers, gradient aliases and last uses of every activation. */
px_status_t px__analyse(px_model_t *m) {
  int n = m->nacts;
  m->consumers = px_calloc((size_t)n, sizeof(int), "model.consumers");
  m->producer = px_calloc((size_t)n, sizeof(int), "model.producer");
  m->last_use = px_calloc((size_t)n, sizeof(int), "model.last_use");
  m->alias = px_calloc((size_t)n, sizeof(int), "model.alias");
  m->ready = px_calloc((size_t)n, 1, "model.ready");
  m->grads = px_calloc((size_t)n, sizeof(px_tensor_t), "model.grads");
  m->scratch = px_calloc((size_t)n, sizeof(px_tensor_t), "model.scratch");
  m->acc = px_calloc((size_t)n, sizeof(px_add_t *), "model.acc");
  m->redo_at = px_malloc((size_t)n * sizeof(int), "model.redo_at");
  m->bacts = px_calloc((size_t)n, sizeof(px_tensor_t), "model.bacts");
  if (!m->consumers || !m->producer || !m->last_use || !m->alias || !m->ready || !m->grads ||
      !m->scratch || !m->acc || !m->redo_at || !m->bacts)
    return PX_ERR_NOMEM;
  for (int a = 0; a < n; a++) {
    m->producer[a] = -1;
    m->last_use[a] = -1;
    m->alias[a] = a;
    m->redo_at[a] = -1;
  }
  for (int k = 0; k < m->nnodes; k++) {
    const px__node_t *nd = &m->nodes[k];
    m->producer[nd->out] = k;
    m->consumers[nd->in]++;
    m->last_use[nd->in] = k;
    if (nd->in2 >= 0) {
      m->consumers[nd->in2]++;
      m->last_use[nd->in2] = k;
    }
  }
  m->last_use[n - 1] = m->nnodes; /* the logits are read by the loss */
  for (int k = 0; k < m->nnodes; k++) {
    const px__node_t *nd = &m->nodes[k];
    if (nd->kind != PX__ADD) continue;
    if (m->consumers[nd->in] == 1) m->alias[nd->in] = nd->out;
    if (m->consumers[nd->in2] == 1) m->alias[nd->in2] = nd->out;
    if (px__stream_alias(m, k, nd->in, nd->in2)) m->alias[nd->in] = nd->out;
    else if (px__stream_alias(m, k, nd->in2, nd->in)) m->alias[nd->in2] = nd->out;
  }
  return PX_OK;
}

static int px__root(const px_model_t *m, int a) {
  while (m->alias[a] != a) a = m->alias[a];
  return a;
}

/* Points activation a's gradient at g and, for a multi-consumer activation,
 * its second-consumer scratch at scratch (with the op that adds it in). */
static px_status_t px__bind_grad(px_model_t *m, int a, void *g, void *scratch) {
  m->grads[a] = m->acts[a];
  m->grads[a].data = g;
  m->grads[a].flags = 0;
  if (m->consumers[a] < 2) return PX_OK;
  m->scratch[a] = m->acts[a];
  m->scratch[a].data = scratch;
  m->scratch[a].flags = 0;
  return px_add_create(m->ops, &m->acts[a], 0, &m->acc[a]);
}

/* Allocates the nb gradient buffers (one arena) and points every
 * activation's gradient at its slot's buffer, and the scratch of a
 * multi-consumer activation a at buffer scratch_buf[a]. */
static px_status_t px__bind_grads(px_model_t *m, int nb, const size_t *buf_bytes,
                                  const int *slot_buf, const int *scratch_buf) {
  int n = m->nacts;
  px_status_t st = PX_OK;
  m->gbufs = px_calloc((size_t)nb, sizeof(px_tensor_t), "model.gbufs");
  px_tensor_t **ptrs = px_malloc((size_t)(nb ? nb : 1) * sizeof *ptrs, "model.plan");
  if (!m->gbufs || !ptrs) {
    px_free(ptrs);
    return PX_ERR_NOMEM;
  }
  m->ngbufs = nb;
  for (int b = 0; b < nb; b++) {
    int64_t d = (int64_t)buf_bytes[b];
    PX_CHECK_GOTO(px_tensor_init(&m->gbufs[b], px_ops_device(m->ops), PX_DTYPE_U8, 1, &d), st,
                  done);
    ptrs[b] = &m->gbufs[b];
  }
  PX_CHECK_GOTO(px_arena_alloc(&m->a_gacts, px_ops_device(m->ops), ptrs, (size_t)nb, 64,
                               "model.activation_grads"),
                st, done);
  for (int a = 1; a < n; a++)
    PX_CHECK_GOTO(px__bind_grad(m, a, m->gbufs[slot_buf[px__root(m, a)]].data,
                                m->consumers[a] >= 2 ? m->gbufs[scratch_buf[a]].data : NULL),
                  st, done);
done:
  px_free(ptrs);
  return st;
}

/* Interval colouring of the gradient slots onto shared buffers of equal
 * size, plus one scratch buffer per size for second consumers. */
static px_status_t px__plan_grads(px_model_t *m) {
  int n = m->nacts;
  int *lo = px_malloc((size_t)n * sizeof(int), "model.plan"), *hi = px_malloc((size_t)n * sizeof(int), "model.plan");
  int *slot_buf = px_malloc((size_t)n * sizeof(int), "model.plan");
  int *order = px_malloc((size_t)n * sizeof(int), "model.plan");
  int *buf_free_at = px_malloc((size_t)(2 * n) * sizeof(int), "model.plan");
  size_t *buf_bytes = px_malloc((size_t)(2 * n) * sizeof(size_t), "model.plan");
  px_status_t st = PX_OK;
  if (!lo || !hi || !slot_buf || !order || !buf_free_at || !buf_bytes) {
    st = PX_ERR_NOMEM;
    goto done;
  }
  for (int a = 0; a < n; a++) {
    lo[a] = m->nnodes + 1;
    hi[a] = -1;
    slot_buf[a] = -1;
  }
  /* a slot (root) lives from the first backward node that writes it (the
   * highest last use among its members) down to the last that reads it (the
   * lowest producer among its members) */
  for (int a = 1; a < n; a++) {
    int r = px__root(m, a);
    if (m->producer[a] < lo[r]) lo[r] = m->producer[a];
    if (m->last_use[a] > hi[r]) hi[r] = m->last_use[a];
  }
  int nslots = 0;
  for (int a = 1; a < n; a++)
    if (px__root(m, a) == a) order[nslots++] = a;
  /* by decreasing hi: the order in which the backward pass opens them */
  for (int i = 1; i < nslots; i++)
    for (int j = i; j > 0 && hi[order[j]] > hi[order[j - 1]]; j--) {
      int t = order[j];
      order[j] = order[j - 1];
      order[j - 1] = t;
    }
  int nb = 0;
  for (int i = 0; i < nslots; i++) {
    int s = order[i];
    size_t bytes = m->acts[s].nbytes;
    int pick = -1;
    for (int b = 0; b < nb && pick < 0; b++)
      if (buf_bytes[b] == bytes && buf_free_at[b] > hi[s]) pick = b;
    if (pick < 0) {
      pick = nb++;
      buf_bytes[pick] = bytes;
    }
    buf_free_at[pick] = lo[s];
    slot_buf[s] = pick;
  }
  /* scratch: one buffer per size among multi-consumer activations */
  int nscratch_first = nb;
  for (int a = 1; a < n; a++) {
    if (m->consumers[a] < 2) continue;
    int pick = -1;
    for (int b = nscratch_first; b < nb && pick < 0; b++)
      if (buf_bytes[b] == m->acts[a].nbytes) pick = b;
    if (pick < 0) {
      pick = nb++;
      buf_bytes[pick] = m->acts[a].nbytes;
    }
    order[a] = pick; /* reuse: scratch buffer of a */
  }
  st = px__bind_grads(m, nb, buf_bytes, slot_buf, order);
done:
  PX_FREE_ALL(lo, hi, slot_buf, order, buf_free_at, buf_bytes);
  return st;
}

/* ---- the shared memory plan ------------------------------------------------------ *
 * Steps of a training step: forward node k runs at step k, the loss at
 * nnodes, backward node k at 2 * nnodes - k. */

/* The activations node n's backward reads (out[0..return)): the input of a
 * weight layer (its weight gradient) and of a BN, both maps of a MUL, the
 * output of an ADD (its fused ReLU's mask) and an ACT's input and output.
 * A POOL reads its workspace, a REORDER and a CONCAT only gradients. */
int px__backward_reads(const px__node_t *n, int out[2]) {
  switch (n->kind) {
    case PX__CONV:
    case PX__FC:
    case PX__BN:
    case PX__LN:
      out[0] = n->in;
      return 1;
    case PX__ADD:
      out[0] = n->out;
      return 1;
    case PX__ACT:
      out[0] = n->in;
      out[1] = n->out;
      return 2;
    case PX__MUL:
      out[0] = n->in;
      out[1] = n->in2;
      return 2;
    case PX__POOL:
    case PX__REORDER:
    case PX__CONCAT:
    case PX__SHUFFLE:
    case PX__SLICE:
      break;
  }
  return 0;
}

static void px__widen(px__mem_block_t *b, int t) {
  if (t < b->lo) b->lo = t;
  if (t > b->hi) b->hi = t;
}

/* Lifetimes: act[a] from its producer's forward to its last read (forward,
 * loss or backward); the gradient slot of root r (px__root) from the
 * backward of its members' last consumer (the first to write it) to that
 * of their first producer (the last to read it); the scratch of a
 * multi-consumer activation over the backward of all its consumers. */
static void px__lifetimes(const px_model_t *m, px__mem_block_t *act, px__mem_block_t *slot,
                          px__mem_block_t *scr) {
  const int n = m->nacts, N = m->nnodes;
  for (int a = 0; a < n; a++) {
    int p = m->producer[a] >= 0 ? m->producer[a] : 0;
    act[a] = (px__mem_block_t){m->acts[a].nbytes, p, p, 0};
    slot[a] = scr[a] = (px__mem_block_t){0, 2 * N + 1, -1, 0};
  }
  px__widen(&act[n - 1], N); /* the logits: read by the loss */
  for (int k = 0; k < N; k++) {
    const px__node_t *nd = &m->nodes[k];
    int reads[2], nr = px__backward_reads(nd, reads);
    px__widen(&act[nd->in], k);
    if (nd->in2 >= 0) px__widen(&act[nd->in2], k);
    for (int i = 0; i < nr; i++) px__widen(&act[reads[i]], 2 * N - k);
    if (m->consumers[nd->in] >= 2) px__widen(&scr[nd->in], 2 * N - k);
    if (nd->in2 >= 0 && m->consumers[nd->in2] >= 2) px__widen(&scr[nd->in2], 2 * N - k);
  }
  for (int a = 1; a < n; a++) {
    px__mem_block_t *s = &slot[px__root(m, a)];
    s->bytes = m->acts[px__root(m, a)].nbytes;
    if (m->last_use[a] >= 0) px__widen(s, 2 * N - m->last_use[a]);
    if (m->producer[a] >= 0) px__widen(s, 2 * N - m->producer[a]);
    if (m->consumers[a] >= 2) scr[a].bytes = m->acts[a].nbytes;
  }
}

/* With recomputation: which activations the backward makes again
 * (m->redo_at) and their two blocks, act[a] cut back to the forward (the
 * producer to the last forward reader) and redo[a] over the backward
 * readers. A BN's output qualifies when a backward reads it, its BN can
 * recompute it exactly, and the BN's input is kept (the recomputation
 * reads it: it is alive until the BN's own backward, after every backward
 * reader of the output). redo[a] is empty for the others. */
static void px__recompute_lifetimes(px_model_t *m, px__mem_block_t *act, px__mem_block_t *redo) {
  const int n = m->nacts, N = m->nnodes;
  /* redo[a] first spans the backward readers of every activation, as node
   * indices (lo the first in forward order, hi the last) */
  for (int a = 0; a < n; a++) redo[a] = (px__mem_block_t){0, N, -1, 0};
  if (m->recompute)
    for (int k = 0; k < N; k++) {
      int reads[2], nr = px__backward_reads(&m->nodes[k], reads);
      for (int i = 0; i < nr; i++) px__widen(&redo[reads[i]], k);
    }
  for (int a = 0; a < n; a++) {
    const int p = m->producer[a], first = redo[a].lo, last = redo[a].hi;
    redo[a] = (px__mem_block_t){0, 2 * N + 1, -1, 0};
    if (!m->recompute || a == 0 || a == n - 1 || last < 0 || p < 0 ||
        m->nodes[p].kind != PX__BN || m->redo_at[m->nodes[p].in] >= 0 ||
        !px_batchnorm_can_recompute(m->nodes[p].bn))
      continue;
    m->redo_at[a] = last;
    act[a] = (px__mem_block_t){m->acts[a].nbytes, p, m->last_use[a] > p ? m->last_use[a] : p, 0};
    redo[a] = (px__mem_block_t){m->acts[a].nbytes, 2 * N - last, 2 * N - first, 0};
  }
}

/* The activations, their gradients and the scratch in one arena, placed by
 * their lifetimes (nn/mem_plan.c). */
static px_status_t px__plan_shared(px_model_t *m) {
  const int n = m->nacts;
  px__mem_block_t *blk = px_malloc((size_t)(4 * n) * sizeof *blk, "model.plan");
  if (!blk) return PX_ERR_NOMEM;
  px__mem_block_t *act = blk, *slot = blk + n, *scr = blk + 2 * n, *redo = blk + 3 * n;
  px__lifetimes(m, act, slot, scr);
  px__recompute_lifetimes(m, act, redo);
  size_t total = 0;
  px_status_t st = px__mem_plan(blk, 4 * n, 64, &total);
  px_tensor_t whole, *pw = &whole;
  int64_t d = (int64_t)(total ? total : 1);
  if (st == PX_OK) st = px_tensor_init(&whole, px_ops_device(m->ops), PX_DTYPE_U8, 1, &d);
  if (st == PX_OK)
    st = px_arena_alloc(&m->a_gacts, px_ops_device(m->ops), &pw, 1, 64, "model.activation_memory");
  char *base = m->a_gacts.base;
  for (int a = 0; a < n && st == PX_OK; a++) {
    m->acts[a].data = base + act[a].offset;
    m->bacts[a] = m->acts[a];
    if (m->redo_at[a] >= 0) m->bacts[a].data = base + redo[a].offset;
    if (a >= 1)
      st = px__bind_grad(m, a, base + slot[px__root(m, a)].offset,
                         m->consumers[a] >= 2 ? base + scr[a].offset : NULL);
  }
  px_free(blk);
  return st;
}

px_status_t px__plan_memory(px_model_t *m) {
  if (!m->separate) return px__plan_shared(m);
  PX_CHECK(px__plan_grads(m));
  memcpy(m->bacts, m->acts, (size_t)m->nacts * sizeof *m->bacts);
  return PX_OK;
}

/* PX_MEM_PLAN: "shared", "recompute" (shared, and the BN outputs made
 * again in the backward) or "separate"; unset or empty: recompute for bf16
 * on CUDA, shared otherwise. */
px_status_t px__mem_plan_mode(px_model_t *m) {
  const char *e = getenv("PX_MEM_PLAN");
  if (!e || !*e) {
    m->recompute = m->cfg.precision == PX_PRECISION_BF16 && !px__on_cpu(m);
    return PX_OK;
  }
  m->separate = !strcmp(e, "separate");
  m->recompute = !strcmp(e, "recompute");
  if (!m->separate && !m->recompute && strcmp(e, "shared"))
    return px_set_error(PX_ERR_INVALID,
                        "PX_MEM_PLAN='%s': expected 'shared', 'recompute' or 'separate'", e);
  return PX_OK;
}

px_status_t px__alloc_families(px_model_t *m) {
  px_device_t dev = px_ops_device(m->ops);
  int np = m->nparams;
  px_status_t st = PX_OK;
  size_t nlist = (size_t)(m->nacts + 3 * m->nnodes + 1 + np + m->nbufs);
  px_tensor_t **list = px_malloc(nlist * sizeof *list, "model.alloc");
  if (!list) return PX_ERR_NOMEM;
  for (int i = 0; i < np; i++) list[i] = &m->pvals[i];
  PX_CHECK_GOTO(px_arena_alloc(&m->a_params, dev, list, (size_t)np, 4, "model.params"), st, done);
  for (int i = 0; i < np; i++) list[i] = &m->pgrads[i];
  PX_CHECK_GOTO(px_arena_alloc(&m->a_grads, dev, list, (size_t)np, 4, "model.grads"), st, done);
  for (int i = 0; i < m->nbufs; i++) list[i] = &m->bufs[i];
  PX_CHECK_GOTO(px_arena_alloc(&m->a_bufs, dev, list, (size_t)m->nbufs, 4, "model.bn_running"),
                st, done);
  size_t k = 0;
  for (int a = 0; a < m->nacts && m->separate; a++) list[k++] = &m->acts[a];
  for (int i = 0; i < m->nnodes; i++) {
    px__node_t *nd = &m->nodes[i];
    if (nd->kind == PX__BN || nd->kind == PX__LN) {
      list[k++] = &nd->mean;
      list[k++] = &nd->var;
    }
    if ((nd->kind == PX__BN || nd->kind == PX__POOL) && nd->ws.nbytes > 0) list[k++] = &nd->ws;
  }
  int64_t b = m->cfg.batch;
  PX_CHECK_GOTO(px_tensor_init(&m->labels, dev, PX_DTYPE_I32, 1, &b), st, done);
  list[k++] = &m->labels;
  PX_CHECK_GOTO(px_arena_alloc(&m->a_acts, dev, list, k, 64, "model.activations"), st, done);

  m->numel = 0;
  for (int i = 0; i < np; i++) m->numel += px_tensor_numel(&m->pvals[i]);
  int64_t ne = (int64_t)m->numel;
  PX_CHECK_GOTO(px_tensor_init(&m->flat_params, dev, PX_DTYPE_F32, 1, &ne), st, done);
  m->flat_grads = m->flat_params;
  size_t nbuf = 0;
  for (int i = 0; i < m->nbufs; i++) nbuf += px_tensor_numel(&m->bufs[i]);
  int64_t nb64 = (int64_t)(nbuf ? nbuf : 1);
  PX_CHECK_GOTO(px_tensor_init(&m->flat_bufs, dev, PX_DTYPE_F32, 1, &nb64), st, done);
  m->flat_bufs.data = m->a_bufs.base;
  m->flat_params.data = m->a_params.base;
  m->flat_grads.data = m->a_grads.base;
  if (m->a_params.bytes < m->numel * sizeof(float)) {
    st = px_set_error(PX_ERR_INTERNAL, "parameter arena of %zu bytes for %zu floats",
                      m->a_params.bytes, m->numel);
    goto done;
  }
  size_t xin = (size_t)m->cfg.batch * m->cfg.in_channels * m->cfg.height * m->cfg.width;
  m->host_x = px_malloc(xin * sizeof(float), "model.host_x");
  m->host_logits = px_malloc((size_t)m->cfg.batch * m->cfg.num_classes * sizeof(float),
                             "model.host_logits");
  if (!m->host_x || !m->host_logits) st = PX_ERR_NOMEM;
done:
  px_free(list);
  return st;
}
