/* The host collective algorithms, written on the tagged sends and receives
 * of ucx.c:
 *
 *   allreduce, small   recursive doubling; with a non-power-of-two size the
 *                      first 2*rem ranks pair up (even sends to odd) before,
 *                      and get the result back after (MPICH's scheme)
 *   allreduce, large   ring reduce-scatter + ring allgather, each chunk cut
 *                      into segments that flow through the ring as soon as
 *                      they are reduced (a pipeline, not step by step)
 *   allgather(v)       the same ring without the reduction, or, for small
 *                      totals, every rank sending its block to every other
 *   broadcast          pipelined binary tree: each segment is forwarded to
 *                      the children as soon as it arrives
 *   barrier            dissemination (ceil(log2 n) rounds of empty messages)
 *
 * Every element of a reduction is combined in one fixed order (recursive
 * doubling: lower rank's operand first on both sides; ring: along the ring,
 * then the finished chunk is copied to everyone), so all ranks get
 * bit-identical results. Receives go straight into
 * the caller's buffer wherever no reduction is needed; the reduction steps
 * use a small window of segment buffers kept by the communicator. */
#include <string.h>

#include "comm/comm_int.h"
#include "prunex/comm_internal.h"

#define PX__SMALL_BYTES_DEFAULT ((size_t)32 << 10)
#define PX__RING_SEG_BYTES ((size_t)256 << 10)
#define PX__RING_WINDOW 4
#define PX__RING_MAX_SEG 128
#define PX__BCAST_SEG_BYTES ((size_t)256 << 10)
#define PX__BCAST_WINDOW 16
#define PX__SEND_FIFO 280

static size_t px__small_bytes(const px_comm_t *c) {
  return c->small_bytes ? c->small_bytes : PX__SMALL_BYTES_DEFAULT;
}

static void *px__need_scratch(px_comm_t *c, size_t bytes, px_status_t *st) {
  void *p = px__scratch(c, bytes ? bytes : 1);
  *st = p ? PX_OK : px__fail(c, PX_ERR_NOMEM, "no memory for %zu bytes of scratch", bytes);
  return p;
}

/* A bounded FIFO of sends in flight: pushing into a full one waits for the
 * oldest first. */
typedef struct {
  int slot[PX__SEND_FIFO];
  int head, n;
} px__fifo_t;

static px_status_t px__fifo_push(px__coll_t *r, px__fifo_t *f, int slot) {
  if (slot < 0) return slot;
  if (f->n == PX__SEND_FIFO) {
    PX_CHECK(px__wait(r, f->slot[f->head]));
    f->head = (f->head + 1) % PX__SEND_FIFO;
    f->n--;
  }
  f->slot[(f->head + f->n) % PX__SEND_FIFO] = slot;
  f->n++;
  return PX_OK;
}

static px_status_t px__fifo_drain(px__coll_t *r, px__fifo_t *f) {
  while (f->n > 0) {
    PX_CHECK(px__wait(r, f->slot[f->head]));
    f->head = (f->head + 1) % PX__SEND_FIFO;
    f->n--;
  }
  return PX_OK;
}

/* ---- recursive doubling ---------------------------------------------------- */

static px_status_t px__allreduce_rd(px__coll_t *r, const void *send, void *recv, size_t count,
                                    px_comm_dtype_t dt, px_comm_op_t op) {
  px_comm_t *c = r->c;
  int n = r->g->size, me = r->g->rank;
  size_t bytes = count * px_comm_dtype_size(dt);
  px_status_t st;
  void *tmp = px__need_scratch(c, bytes, &st);
  PX_CHECK(st);
  int p2 = 1, logp2 = 0;
  while (p2 * 2 <= n) {
    p2 *= 2;
    logp2++;
  }
  int rem = n - p2;
  uint32_t final_step = (uint32_t)logp2 + 1;
  const void *cur = send;
  int nr;
  if (me < 2 * rem) {
    if ((me & 1) == 0) {
      PX_CHECK(px__wait(r, px__send(r, me + 1, send, bytes, 0)));
      nr = -1;
    } else {
      PX_CHECK(px__wait(r, px__recv(r, me - 1, tmp, bytes, 0)));
      px__reduce(recv, tmp, cur, count, dt, op);
      cur = recv;
      nr = me / 2;
    }
  } else {
    nr = me - rem;
  }
  if (nr >= 0) {
    uint32_t step = 1;
    for (int mask = 1; mask < p2; mask <<= 1, step++) {
      int pn = nr ^ mask;
      int peer = pn < rem ? pn * 2 + 1 : pn + rem;
      int sl[2];
      sl[0] = px__recv(r, peer, tmp, bytes, step);
      if (sl[0] < 0) return sl[0];
      sl[1] = px__send(r, peer, cur, bytes, step);
      if (sl[1] < 0) return sl[1];
      PX_CHECK(px__waitall(r, sl, 2));
      if (peer < me) px__reduce(recv, tmp, cur, count, dt, op);
      else px__reduce(recv, cur, tmp, count, dt, op);
      cur = recv;
    }
    if (op == PX_COMM_AVG) px__avg_finish(recv, count, dt, n);
  }
  if (me < 2 * rem) {
    if (me & 1) PX_CHECK(px__wait(r, px__send(r, me - 1, recv, bytes, final_step)));
    else PX_CHECK(px__wait(r, px__recv(r, me + 1, recv, bytes, final_step)));
  }
  return PX_OK;
}

/* ---- the ring -------------------------------------------------------------- */

/* T steps; at step t rank me sends chunk (me - t) mod n to the right and
 * receives chunk (me - t - 1) mod n from the left; the chunk received at step
 * t is the one sent at step t + 1. The first reduce_steps steps reduce what
 * arrives with the own contribution (reduce-scatter: rank me ends owning
 * chunk me + 1); the rest only forward (allgather). Chunks are cut into nseg
 * segments of segl elements, and message (t, j) has step tag t * nseg + j. */
typedef struct {
  const void *send;
  void *recv;
  const size_t *off, *len; /* [n] chunk offsets and lengths, elements */
  int reduce_steps;
  px_comm_dtype_t dt;
  px_comm_op_t op;
} px__ring_t;

typedef struct {
  size_t esz, segl;
  int nseg, w;
  char *tmp;
} px__ring_geom_t;

static void px__seg(const px__ring_t *rg, const px__ring_geom_t *ge, int k, int j, size_t *lo,
                    size_t *nel) {
  size_t a = (size_t)j * ge->segl;
  if (a > rg->len[k]) a = rg->len[k];
  size_t b = a + ge->segl;
  if (b > rg->len[k]) b = rg->len[k];
  *lo = rg->off[k] + a;
  *nel = b - a;
}

static int px__ring_post_recv(px__coll_t *r, const px__ring_t *rg, const px__ring_geom_t *ge,
                              int q) {
  int n = r->g->size, me = r->g->rank;
  int t = q / ge->nseg, j = q % ge->nseg;
  int k = ((me - t - 1) % n + n) % n;
  size_t lo, nel;
  px__seg(rg, ge, k, j, &lo, &nel);
  void *dst = t < rg->reduce_steps ? ge->tmp + (size_t)(q % ge->w) * ge->segl * ge->esz
                                   : (char *)rg->recv + lo * ge->esz;
  return px__recv(r, (me - 1 + n) % n, dst, nel * ge->esz, (uint32_t)q);
}

static px_status_t px__ring(px__coll_t *r, const px__ring_t *rg) {
  px_comm_t *c = r->c;
  int n = r->g->size, me = r->g->rank;
  int right = (me + 1) % n;
  int T = rg->reduce_steps + n - 1;
  px__ring_geom_t ge;
  ge.esz = px_comm_dtype_size(rg->dt);
  size_t maxlen = 0;
  for (int k = 0; k < n; k++)
    if (rg->len[k] > maxlen) maxlen = rg->len[k];
  size_t seg_el = PX__RING_SEG_BYTES / ge.esz;
  size_t nseg = maxlen ? (maxlen + seg_el - 1) / seg_el : 1;
  size_t cap = (PX__MAX_STEPS - 1) / (size_t)T;
  if (cap > PX__RING_MAX_SEG) cap = PX__RING_MAX_SEG;
  if (nseg > cap) nseg = cap;
  ge.nseg = (int)nseg;
  ge.segl = maxlen ? (maxlen + nseg - 1) / nseg : 0;
  int Q = T * ge.nseg;
  ge.w = Q < PX__RING_WINDOW ? Q : PX__RING_WINDOW;
  ge.tmp = NULL;
  if (rg->reduce_steps > 0) {
    px_status_t st;
    ge.tmp = px__need_scratch(c, (size_t)ge.w * ge.segl * ge.esz, &st);
    PX_CHECK(st);
  }

  px__fifo_t sends = {.head = 0, .n = 0};
  int rq[PX__RING_WINDOW];
  /* step 0: the own chunk, from the caller's send buffer */
  for (int j = 0; j < ge.nseg; j++) {
    size_t lo, nel;
    px__seg(rg, &ge, me, j, &lo, &nel);
    PX_CHECK(px__fifo_push(r, &sends, px__send(r, right, (const char *)rg->send + lo * ge.esz,
                                               nel * ge.esz, (uint32_t)j)));
  }
  for (int q = 0; q < ge.w; q++) {
    rq[q] = px__ring_post_recv(r, rg, &ge, q);
    if (rq[q] < 0) return rq[q];
  }
  for (int q = 0; q < Q; q++) {
    int t = q / ge.nseg, j = q % ge.nseg;
    int k = ((me - t - 1) % n + n) % n;
    size_t lo, nel;
    px__seg(rg, &ge, k, j, &lo, &nel);
    PX_CHECK(px__wait(r, rq[q % ge.w]));
    char *dst = (char *)rg->recv + lo * ge.esz;
    if (t < rg->reduce_steps) {
      const char *in = ge.tmp + (size_t)(q % ge.w) * ge.segl * ge.esz;
      px__reduce(dst, in, (const char *)rg->send + lo * ge.esz, nel, rg->dt, rg->op);
      if (t == rg->reduce_steps - 1 && rg->op == PX_COMM_AVG) px__avg_finish(dst, nel, rg->dt, n);
    }
    if (q + ge.w < Q) {
      rq[q % ge.w] = px__ring_post_recv(r, rg, &ge, q + ge.w);
      if (rq[q % ge.w] < 0) return rq[q % ge.w];
    }
    if (t + 1 < T)
      PX_CHECK(px__fifo_push(r, &sends,
                             px__send(r, right, dst, nel * ge.esz, (uint32_t)(q + ge.nseg))));
  }
  return px__fifo_drain(r, &sends);
}

px_status_t px__allreduce(px_group_t *g, const void *send, void *recv, size_t count,
                          px_comm_dtype_t dt, px_comm_op_t op) {
  px_comm_t *c = g->c;
  size_t bytes = count * px_comm_dtype_size(dt);
  px__coll_t r;
  px__run_begin(&r, g, PX__OP_ALLREDUCE, count, (uint64_t)dt, (uint64_t)op);
  int n = g->size;
  if (n == 1) {
    if (send != recv && bytes) memcpy(recv, send, bytes);
    return PX_OK;
  }
  px_comm_algo_t algo = c->allreduce_algo;
  if (algo != PX_COMM_ALGO_RD && algo != PX_COMM_ALGO_RING)
    algo = (bytes <= px__small_bytes(c) || count < (size_t)n) ? PX_COMM_ALGO_RD : PX_COMM_ALGO_RING;
  if (algo == PX_COMM_ALGO_RD) return px__allreduce_rd(&r, send, recv, count, dt, op);
  size_t base = count / (size_t)n, extra = count % (size_t)n;
  for (int k = 0; k < n; k++) {
    g->blk_len[k] = base + ((size_t)k < extra);
    g->blk_off[k] = (size_t)k * base + ((size_t)k < extra ? (size_t)k : extra);
  }
  px__ring_t rg = {.send = send, .recv = recv, .off = g->blk_off, .len = g->blk_len,
                   .reduce_steps = n - 1, .dt = dt, .op = op};
  return px__ring(&r, &rg);
}

/* ---- allgather(v) ---------------------------------------------------------- */

static px_status_t px__allgather_direct(px__coll_t *r, const void *send, void *recv,
                                        const size_t *off, const size_t *len, size_t esz) {
  int n = r->g->size, me = r->g->rank;
  px__fifo_t f = {.head = 0, .n = 0};
  for (int k = 1; k < n; k++) {
    int from = (me - k + n) % n;
    PX_CHECK(px__fifo_push(r, &f, px__recv(r, from, (char *)recv + off[from] * esz,
                                           len[from] * esz, (uint32_t)from)));
  }
  /* the step is the sender's rank: one message per step and receiver */
  for (int k = 1; k < n; k++)
    PX_CHECK(px__fifo_push(r, &f, px__send(r, (me + k) % n, send, len[me] * esz, (uint32_t)me)));
  return px__fifo_drain(r, &f);
}

px_status_t px__allgatherv(px_group_t *g, const void *send, void *recv, const size_t *counts,
                           size_t equal_count, px_comm_dtype_t dt, int is_v) {
  px_comm_t *c = g->c;
  int n = g->size, me = g->rank;
  size_t esz = px_comm_dtype_size(dt);
  uint64_t h = equal_count;
  size_t total = 0;
  for (int k = 0; k < n; k++) {
    g->blk_len[k] = is_v ? counts[k] : equal_count;
    g->blk_off[k] = total;
    total += g->blk_len[k];
    if (is_v) h = px__hash3(h, counts[k], (uint64_t)k);
  }
  g->blk_off[n] = total;
  px__coll_t r;
  px__run_begin(&r, g, is_v ? PX__OP_ALLGATHERV : PX__OP_ALLGATHER, h, (uint64_t)dt, 0);
  char *mine = (char *)recv + g->blk_off[me] * esz;
  if (g->blk_len[me] && (const char *)send != mine) memcpy(mine, send, g->blk_len[me] * esz);
  if (n == 1) return PX_OK;
  px_comm_algo_t algo = c->allgather_algo;
  if (algo != PX_COMM_ALGO_DIRECT && algo != PX_COMM_ALGO_RING)
    algo = (total * esz <= px__small_bytes(c) && n <= 64) ? PX_COMM_ALGO_DIRECT : PX_COMM_ALGO_RING;
  if (algo == PX_COMM_ALGO_DIRECT && n <= 64)
    return px__allgather_direct(&r, send, recv, g->blk_off, g->blk_len, esz);
  /* the own block is already in place in recv: step 0 sends it from there */
  px__ring_t rg = {.send = recv, .recv = recv, .off = g->blk_off, .len = g->blk_len,
                   .reduce_steps = 0, .dt = dt, .op = PX_COMM_SUM};
  return px__ring(&r, &rg);
}

/* ---- broadcast ------------------------------------------------------------- */

px_status_t px__bcast(px_group_t *g, void *buf, size_t count, px_comm_dtype_t dt, int root) {
  int n = g->size, me = g->rank;
  size_t esz = px_comm_dtype_size(dt), bytes = count * esz;
  px__coll_t r;
  px__run_begin(&r, g, PX__OP_BCAST, count, (uint64_t)dt, (uint64_t)root);
  if (n == 1) return PX_OK;
  int vr = (me - root + n) % n;
  int parent = vr ? ((vr - 1) / 2 + root) % n : -1;
  int kids[2], nk = 0;
  for (int i = 1; i <= 2; i++)
    if (2 * vr + i < n) kids[nk++] = (2 * vr + i + root) % n;
  size_t seg = PX__BCAST_SEG_BYTES / esz * esz;
  size_t nseg = bytes ? (bytes + seg - 1) / seg : 1;
  if (nseg > PX__MAX_STEPS - 1) {
    seg = (bytes + PX__MAX_STEPS - 2) / (PX__MAX_STEPS - 1);
    seg = (seg + esz - 1) / esz * esz;
    nseg = (bytes + seg - 1) / seg;
  }
  int w = nseg < PX__BCAST_WINDOW ? (int)nseg : PX__BCAST_WINDOW;
  int rq[PX__BCAST_WINDOW];
  px__fifo_t f = {.head = 0, .n = 0};
  char *p = buf;
  if (parent >= 0) {
    for (int j = 0; j < w; j++) {
      size_t lo = (size_t)j * seg, nb = bytes - lo < seg ? bytes - lo : seg;
      rq[j] = px__recv(&r, parent, p + lo, nb, (uint32_t)j);
      if (rq[j] < 0) return rq[j];
    }
  }
  for (size_t j = 0; j < nseg; j++) {
    size_t lo = j * seg, nb = bytes - lo < seg ? bytes - lo : seg;
    if (parent >= 0) {
      PX_CHECK(px__wait(&r, rq[j % (size_t)w]));
      size_t jn = j + (size_t)w;
      if (jn < nseg) {
        size_t lo2 = jn * seg, nb2 = bytes - lo2 < seg ? bytes - lo2 : seg;
        rq[j % (size_t)w] = px__recv(&r, parent, p + lo2, nb2, (uint32_t)jn);
        if (rq[j % (size_t)w] < 0) return rq[j % (size_t)w];
      }
    }
    for (int i = 0; i < nk; i++)
      PX_CHECK(px__fifo_push(&r, &f, px__send(&r, kids[i], p + lo, nb, (uint32_t)j)));
  }
  return px__fifo_drain(&r, &f);
}

/* ---- barrier --------------------------------------------------------------- */

px_status_t px__barrier(px_group_t *g) {
  int n = g->size, me = g->rank;
  px__coll_t r;
  px__run_begin(&r, g, PX__OP_BARRIER, 0, 0, 0);
  uint32_t step = 0;
  for (int k = 1; k < n; k <<= 1, step++) {
    int sl[2];
    sl[0] = px__recv(&r, (me - k + n) % n, NULL, 0, step);
    if (sl[0] < 0) return sl[0];
    sl[1] = px__send(&r, (me + k) % n, NULL, 0, step);
    if (sl[1] < 0) return sl[1];
    PX_CHECK(px__waitall(&r, sl, 2));
  }
  return PX_OK;
}

/* ---- agreement ------------------------------------------------------------- */

px_status_t px__agree(px_group_t *g, int kind, uint64_t a, uint64_t b, uint64_t d) {
  if (g->size == 1) return PX_OK;
  uint64_t h = px__hash3((uint64_t)kind, a, px__hash3(b, d, 0));
  uint8_t mine[16], all[16];
  for (int i = 0; i < 8; i++) {
    mine[i] = (uint8_t)(h >> (8 * i));
    mine[8 + i] = (uint8_t)~mine[i];
  }
  PX_CHECK(px__allreduce(g, mine, all, 16, PX_COMM_U8, PX_COMM_MAX));
  if (memcmp(mine, all, 16) != 0)
    return px__fail(g->c, PX_ERR_MISMATCH,
                    "ranks of a group called a device collective with different arguments "
                    "(kind, dtype, op, count or root)");
  return PX_OK;
}
