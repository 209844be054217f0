/* The UCX transfer layer of the host collectives: one UCP context, worker and
 * endpoint set per communicator, tagged sends and receives in transfer
 * slots, and the one progress loop of the data plane, which is where every
 * failure is noticed: an endpoint error (peer died), a receive whose length
 * or signature differs from ours (mismatched call), an abort notice from a
 * peer, or no progress for timeout_ms. The first failure breaks the
 * communicator: this rank tells every peer (an abort notice, so that they
 * fail now instead of at their own deadline), cancels what it had in flight
 * and never touches the network for collectives again.
 *
 * Addresses are exchanged through the rendezvous store: each rank puts its
 * worker address under "<prefix>/ucx/<rank>" and reads the others'.
 * Endpoints use UCP_ERR_HANDLING_MODE_PEER so that UCX reports dead peers. */
#include <sched.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "comm/comm_int.h"
#include "px_clock.h"

static px_status_t px__ucs_error(ucs_status_t s, const char *what) {
  return px_set_error(PX_ERR_BACKEND, "%s: %s", what, ucs_status_string(s));
}

/* ---- completion callbacks (run inside ucp_worker_progress) ---------------- */

static void px__send_cb(void *request, ucs_status_t status, void *user_data) {
  px__xfer_t *x = user_data;
  x->status = status;
  x->req = NULL;
  x->state = PX__XFER_DONE;
  x->c->completions++;
  ucp_request_free(request);
}

static void px__recv_cb(void *request, ucs_status_t status, const ucp_tag_recv_info_t *info,
                        void *user_data) {
  px__xfer_t *x = user_data;
  x->status = status;
  if (info) x->info = *info;
  x->req = NULL;
  x->state = PX__XFER_DONE;
  x->c->completions++;
  ucp_request_free(request);
}

static void px__ep_error_cb(void *arg, ucp_ep_h ep, ucs_status_t status) {
  px__peer_t *p = arg;
  (void)ep;
  if (!p->failed) {
    p->failed = 1;
    p->ep_status = status;
    p->c->peer_errors++;
  }
}

/* ---- slots ----------------------------------------------------------------- */

static int px__slot_get(px_comm_t *c) {
  if (c->xf_nfree == 0) return -1;
  int i = c->xf_free[--c->xf_nfree];
  px__xfer_t *x = &c->xf[i];
  x->state = PX__XFER_BUSY;
  x->req = NULL;
  x->status = UCS_OK;
  x->info.length = 0;
  x->info.sender_tag = 0;
  return i;
}

static void px__slot_put(px_comm_t *c, int i) {
  c->xf[i].state = PX__XFER_FREE;
  c->xf_free[c->xf_nfree++] = i;
}

static uint64_t px__mix(uint64_t x) {
  x ^= x >> 33;
  x *= 0xff51afd7ed558ccdull;
  x ^= x >> 33;
  x *= 0xc4ceb9fe1a85ec53ull;
  x ^= x >> 33;
  return x;
}

uint64_t px__hash3(uint64_t a, uint64_t b, uint64_t d) {
  return px__mix(a ^ px__mix(b ^ px__mix(d + 0x9E3779B97F4A7C15ull)));
}

void px__run_begin(px__coll_t *r, px_group_t *g, int kind, uint64_t a, uint64_t b, uint64_t d) {
  px_comm_t *c = g->c;
  r->c = c;
  r->g = g;
  uint64_t seq = g->seq++;
  r->tagbase = (PX__TAG_CLASS_DATA << PX__TAG_CLASS_SHIFT) |
               ((uint64_t)g->kind << PX__TAG_GROUP_SHIFT) | (seq << PX__TAG_SEQ_SHIFT);
  r->sig = px__hash3((uint64_t)kind, a, px__hash3(b, d, 0)) & PX__TAG_SIG_MASK;
  c->last_activity_ms = px__now_ms();
}

void *px__scratch(px_comm_t *c, size_t bytes) {
  if (bytes <= c->tmp_cap) return c->tmp;
  px_free(c->tmp);
  c->tmp = px_malloc_aligned(bytes, "comm.scratch");
  c->tmp_cap = c->tmp ? bytes : 0;
  return c->tmp;
}

/* ---- failure --------------------------------------------------------------- */

void px__suspect(px_comm_t *c, int r, int hard) {
  if (atomic_load(&c->failed) || r < 0 || r >= c->size) return;
  if (c->lost_rank >= 0 && (c->lost_hard || !hard)) return;
  c->lost_rank = r;
  c->lost_hard = hard ? 1 : 0;
}

/* Progresses until pred(c) is false or ms pass. */
static void px__drain_for(px_comm_t *c, double ms, int (*busy)(px_comm_t *)) {
  double end = px__now_ms() + ms;
  unsigned spins = 0;
  while (busy(c)) {
    if (ucp_worker_progress(c->worker) == 0) {
      if ((++spins & 63) == 0 && px__now_ms() > end) break;
      sched_yield();
    }
  }
}

static int px__any_busy_xfer(px_comm_t *c) {
  for (int i = 0; i < PX__XFER_MAX; i++)
    if (c->xf[i].state == PX__XFER_BUSY) return 1;
  return 0;
}

static int px__any_busy_abort(px_comm_t *c) {
  for (int p = 0; p < c->size; p++)
    if (c->abort_out[p].state == PX__XFER_BUSY) return 1;
  return 0;
}

static int px__abort_not_in(px_comm_t *c) {
  return c->abort_in.state == PX__XFER_BUSY;
}

/* Closes every endpoint at once (flush when healthy, force otherwise) and
 * progresses until the closes complete or ms pass; a close still running
 * then is left to UCX (released when it completes or with the worker). */
static void px__close_eps(px_comm_t *c, int force, double ms) {
  void **reqs = px_calloc((size_t)c->size, sizeof *reqs, "comm.close_reqs");
  for (int p = 0; p < c->size; p++) {
    if (!c->peers[p].ep) continue;
    ucp_request_param_t prm = {.op_attr_mask = UCP_OP_ATTR_FIELD_FLAGS,
                               .flags = force || c->peers[p].failed ? UCP_EP_CLOSE_FLAG_FORCE : 0};
    ucs_status_ptr_t sp = ucp_ep_close_nbx(c->peers[p].ep, &prm);
    c->peers[p].ep = NULL;
    if (sp == NULL || UCS_PTR_IS_ERR(sp)) continue;
    if (reqs) reqs[p] = sp;
    else ucp_request_free(sp);
  }
  double end = px__now_ms() + ms;
  for (int p = 0; reqs && p < c->size; p++) {
    while (reqs[p] && ucp_request_check_status(reqs[p]) == UCS_INPROGRESS) {
      if (ucp_worker_progress(c->worker) == 0) {
        if (px__now_ms() > end) break;
        sched_yield();
      }
    }
    if (reqs[p]) ucp_request_free(reqs[p]);
  }
  px_free(reqs);
}

static void px__tell_peers(px_comm_t *c, px_status_t st) {
  c->abort_out_msg.status = st;
  c->abort_out_msg.origin = c->rank;
  c->abort_out_msg.lost = c->lost_rank;
  c->abort_out_msg.lost_hard = c->lost_hard;
  uint64_t tag = (PX__TAG_CLASS_ABORT << PX__TAG_CLASS_SHIFT) |
                 ((uint64_t)(c->rank & 0xFFF) << PX__TAG_SRC_SHIFT);
  for (int p = 0; p < c->size; p++) {
    if (p == c->rank || !c->peers[p].ep || c->peers[p].failed) continue;
    px__xfer_t *x = &c->abort_out[p];
    x->c = c;
    x->state = PX__XFER_BUSY;
    ucp_request_param_t prm = {.op_attr_mask = UCP_OP_ATTR_FIELD_CALLBACK |
                                               UCP_OP_ATTR_FIELD_USER_DATA,
                               .cb.send = px__send_cb,
                               .user_data = x};
    ucs_status_ptr_t sp = ucp_tag_send_nbx(c->peers[p].ep, &c->abort_out_msg,
                                           sizeof c->abort_out_msg, tag, &prm);
    if (sp == NULL || UCS_PTR_IS_ERR(sp)) x->state = PX__XFER_DONE;
    else x->req = sp;
  }
  px__drain_for(c, 200.0, px__any_busy_abort);
}

px_status_t px__fail(px_comm_t *c, px_status_t st, const char *fmt, ...) {
  int prev = atomic_load(&c->failed);
  if (prev) return px_set_error(prev, "%s", c->failmsg);
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(c->failmsg, sizeof c->failmsg, fmt, ap);
  va_end(ap);
  atomic_store(&c->failed, st);
  px_log(PX_LOG_INFO, "rank %d: communicator broken: %s", c->rank, c->failmsg);

  px__tell_peers(c, st);
  /* Nothing may write into a caller's buffer once we return: cancel the
   * receives in flight, and if some were already matched (a rendezvous in
   * progress), close the endpoints, which purges them. */
  for (int i = 0; i < PX__XFER_MAX; i++) {
    px__xfer_t *x = &c->xf[i];
    if (x->state == PX__XFER_BUSY && x->is_recv && x->req) ucp_request_cancel(c->worker, x->req);
  }
  px__drain_for(c, 200.0, px__any_busy_xfer);
  if (px__any_busy_xfer(c)) {
    px__close_eps(c, 1, 200.0);
    px__drain_for(c, 1000.0, px__any_busy_xfer);
  }
  /* release the slots; any still busy stay out of circulation for good */
  c->xf_nfree = 0;
  for (int i = 0; i < PX__XFER_MAX; i++) {
    if (c->xf[i].state != PX__XFER_BUSY) px__slot_put(c, i);
  }
  return px_set_error(st, "%s", c->failmsg);
}

/* An abort notice arrived: fail with the sender's reason. A mismatch stays
 * a mismatch on every rank; anything else is, from here, a failed peer. */
static px_status_t px__on_abort_notice(px_comm_t *c) {
  int origin = c->abort_msg.origin;
  px_status_t st = c->abort_msg.status;
  if (c->abort_in.status != UCS_OK)
    return px__fail(c, PX_ERR_PEER, "abort notice receive failed: %s",
                    ucs_status_string(c->abort_in.status));
  if (st != PX_ERR_MISMATCH) st = PX_ERR_PEER;
  int lost = c->abort_msg.lost;
  px__suspect(c, lost, c->abort_msg.lost_hard);
  if (lost >= 0 && lost < c->size)
    return px__fail(c, st, "rank %d broke the communicator (%s): rank %d (node %d) lost", origin,
                    px_status_name(c->abort_msg.status), lost, c->node_of[lost]);
  return px__fail(c, st, "rank %d broke the communicator (%s)", origin,
                  px_status_name(c->abort_msg.status));
}

px_status_t px__check_health(px_comm_t *c) {
  int f = atomic_load(&c->failed);
  if (f) return px_set_error(f, "%s", c->failmsg);
  int a = atomic_load(&c->abort_req);
  if (a) return px__fail(c, a, "aborted by rank %d (px_comm_abort)", c->rank);
  if (c->abort_in.state == PX__XFER_DONE) return px__on_abort_notice(c);
  return PX_OK;
}

/* A peer we have a transfer in flight with reported an error. Give an abort
 * notice already on its way a moment to arrive, so that every rank reports
 * the original reason. */
static px_status_t px__check_peers(px_comm_t *c) {
  int bad = -1;
  for (int i = 0; i < PX__XFER_MAX && bad < 0; i++) {
    px__xfer_t *x = &c->xf[i];
    if (x->state == PX__XFER_BUSY && c->peers[x->peer].failed) bad = x->peer;
  }
  if (bad < 0) return PX_OK;
  px__drain_for(c, 20.0, px__abort_not_in);
  if (c->abort_in.state == PX__XFER_DONE) return px__on_abort_notice(c);
  px__suspect(c, bad, 1);
  return px__fail(c, PX_ERR_PEER, "rank %d (node %d) failed or left: %s", bad, c->node_of[bad],
                  ucs_status_string(c->peers[bad].ep_status));
}

static const char *px__group_name(px_group_kind_t k) {
  return k == PX_GROUP_WORLD ? "world" : k == PX_GROUP_INTRA ? "intra" : "inter";
}

/* ---- posting --------------------------------------------------------------- */

/* Records what a ucp_tag_*_nbx call returned for transfer x: done at once
 * (NULL), failed at once (an error pointer) or in flight (a request). */
static void px__xfer_posted(px_comm_t *c, px__xfer_t *x, ucs_status_ptr_t sp) {
  if (sp == NULL) {
    x->state = PX__XFER_DONE;
    c->completions++;
  } else if (UCS_PTR_IS_ERR(sp)) {
    x->state = PX__XFER_DONE;
    x->status = UCS_PTR_STATUS(sp);
  } else {
    x->req = sp;
  }
}

/* A transfer slot for bytes to (is_recv 0: an endpoint is needed) or from
 * world rank wp: its index, or a failure when the peer is gone or no slot is
 * free. */
static int px__xfer_new(px_comm_t *c, int wp, int is_recv, size_t bytes) {
  px__peer_t *peer = &c->peers[wp];
  if (peer->failed || (!is_recv && !peer->ep)) {
    px__suspect(c, wp, 1);
    return px__fail(c, PX_ERR_PEER, "rank %d (node %d) failed or left: %s", wp, c->node_of[wp],
                    ucs_status_string(peer->ep_status));
  }
  int i = px__slot_get(c);
  if (i < 0) return px__fail(c, PX_ERR_INTERNAL, "out of transfer slots");
  px__xfer_t *x = &c->xf[i];
  x->is_recv = is_recv;
  x->peer = wp;
  x->expect = bytes;
  return i;
}

int px__send(px__coll_t *r, int gpeer, const void *buf, size_t bytes, uint32_t step) {
  px_comm_t *c = r->c;
  px_group_t *g = r->g;
  int wp = g->world[gpeer];
  px__peer_t *peer = &c->peers[wp];
  int i = px__xfer_new(c, wp, 0, bytes);
  if (i < 0) return i;
  px__xfer_t *x = &c->xf[i];
  uint64_t tag = r->tagbase | ((uint64_t)step << PX__TAG_STEP_SHIFT) |
                 ((uint64_t)g->rank << PX__TAG_SRC_SHIFT) | r->sig;
  ucp_request_param_t prm = {.op_attr_mask = UCP_OP_ATTR_FIELD_CALLBACK | UCP_OP_ATTR_FIELD_USER_DATA,
                             .cb.send = px__send_cb,
                             .user_data = x};
  ucs_status_ptr_t sp = ucp_tag_send_nbx(peer->ep, bytes ? buf : (const void *)&c->abort_msg,
                                         bytes, tag, &prm);
  atomic_fetch_add_explicit(&c->sent[px__tier(c, wp)], bytes, memory_order_relaxed);
  px__xfer_posted(c, x, sp);
  return i;
}

int px__recv(px__coll_t *r, int gpeer, void *buf, size_t bytes, uint32_t step) {
  px_comm_t *c = r->c;
  px_group_t *g = r->g;
  int wp = g->world[gpeer];
  int i = px__xfer_new(c, wp, 1, bytes);
  if (i < 0) return i;
  px__xfer_t *x = &c->xf[i];
  x->expect_src = gpeer;
  uint64_t tag = r->tagbase | ((uint64_t)step << PX__TAG_STEP_SHIFT);
  ucp_request_param_t prm = {.op_attr_mask = UCP_OP_ATTR_FIELD_CALLBACK |
                                             UCP_OP_ATTR_FIELD_USER_DATA |
                                             UCP_OP_ATTR_FLAG_NO_IMM_CMPL,
                             .cb.recv = px__recv_cb,
                             .user_data = x};
  ucs_status_ptr_t sp = ucp_tag_recv_nbx(c->worker, bytes ? buf : (void *)&c->abort_out_msg,
                                         bytes, tag, PX__TAG_MATCH_MASK, &prm);
  px__xfer_posted(c, x, sp);
  return i;
}

/* ---- waiting --------------------------------------------------------------- */

/* The progress loop: polls the worker, yields the CPU after a few idle polls
 * (ranks may outnumber cores: the peer we wait for may need this core), and
 * after PX__SPIN_MS without any event sleeps PX__SLEEP_NS at a time, so that
 * a long wait (a straggler, a big transfer on a loaded host) leaves the CPU
 * to whoever does the work. Fails on an abort notice, an endpoint error of a
 * peer we wait on, or timeout_ms without any completion. */
#define PX__IDLE_YIELD 4
#define PX__SPIN_MS 0.1
#define PX__SLEEP_NS 20000L

/* Nothing from peer for limit_ms: with an elastic bound it is lost (its
 * process may be alive but stopped: it is fenced from here). */
static px_status_t px__silent(px_comm_t *c, int peer, int limit_ms) {
  if (c->lost_ms > 0 && limit_ms == c->lost_ms) {
    px__suspect(c, peer, 0);
    return px__fail(c, PX_ERR_PEER, "rank %d: rank %d (node %d) silent for %d ms: lost", c->rank,
                    peer, c->node_of[peer], limit_ms);
  }
  return px__fail(c, PX_ERR_TIMEOUT,
                  "rank %d: no progress from peer rank %d for %d ms (peer dead or stuck)", c->rank,
                  peer, limit_ms);
}

static px_status_t px__progress_until_done(px_comm_t *c, px__xfer_t *x) {
  int limit_ms = c->lost_ms > 0 && c->lost_ms < c->timeout_ms ? c->lost_ms : c->timeout_ms;
  unsigned idle = 0, iter = 0;
  uint64_t seen = c->completions;
  double idle_since = 0;
  while (x->state == PX__XFER_BUSY) {
    unsigned n = ucp_worker_progress(c->worker);
    if (x->state != PX__XFER_BUSY) break;
    if (c->abort_in.state == PX__XFER_DONE) return px__on_abort_notice(c);
    if (c->peer_errors) PX_CHECK(px__check_peers(c));
    if (n) idle = 0;
    else idle++;
    double now = 0;
    if ((++iter & 31) == 0 || idle > 64) {
      now = px__now_ms();
      if (c->completions != seen) {
        seen = c->completions;
        c->last_activity_ms = now;
      } else if (now - c->last_activity_ms > (double)limit_ms) {
        return px__silent(c, x->peer, limit_ms);
      }
      int a = atomic_load_explicit(&c->abort_req, memory_order_relaxed);
      if (a) return px__fail(c, a, "aborted by rank %d (px_comm_abort)", c->rank);
    }
    if (idle <= PX__IDLE_YIELD) continue;
    if (idle == 65) idle_since = now;
    if (idle > 65 && now - idle_since > PX__SPIN_MS) {
      struct timespec ts = {0, PX__SLEEP_NS};
      nanosleep(&ts, NULL);
    } else {
      sched_yield();
    }
  }
  return PX_OK;
}

static px_status_t px__finish(px__coll_t *r, int slot) {
  px_comm_t *c = r->c;
  px__xfer_t *x = &c->xf[slot];
  if (x->status != UCS_OK) {
    int peer = x->peer;
    ucs_status_t s = x->status;
    if (s == UCS_ERR_MESSAGE_TRUNCATED)
      return px__fail(c, PX_ERR_MISMATCH,
                      "rank %d sent more than the %zu bytes this rank %d expected: the ranks "
                      "called the collective with different sizes",
                      peer, x->expect, c->rank);
    /* a peer that broke the communicator tells us why before it closes;
     * give that notice a moment to arrive so every rank reports the cause */
    px__drain_for(c, 50.0, px__abort_not_in);
    if (c->abort_in.state == PX__XFER_DONE) return px__on_abort_notice(c);
    px__suspect(c, peer, 1);
    return px__fail(c, PX_ERR_PEER, "transfer with rank %d (node %d) failed: %s", peer,
                    c->node_of[peer], ucs_status_string(s));
  }
  if (x->is_recv) {
    int src = (int)((x->info.sender_tag & PX__TAG_SRC_MASK) >> PX__TAG_SRC_SHIFT);
    int sig_ok = (x->info.sender_tag & PX__TAG_SIG_MASK) == r->sig;
    if (!sig_ok || src != x->expect_src || x->info.length != x->expect) {
      int from = src < r->g->size ? r->g->world[src] : -1;
      size_t got = x->info.length, want = x->expect;
      return px__fail(c, PX_ERR_MISMATCH,
                      "rank %d and rank %d called a collective of the %s group with different "
                      "%s (%zu bytes received, %zu expected)",
                      from, c->rank, px__group_name(r->g->kind),
                      sig_ok ? "sizes" : "arguments (kind, op, dtype, count or root)", got, want);
    }
    atomic_fetch_add_explicit(&c->recvd[px__tier(c, x->peer)], x->info.length,
                              memory_order_relaxed);
  }
  px__slot_put(c, slot);
  return PX_OK;
}

px_status_t px__wait(px__coll_t *r, int slot) {
  px_comm_t *c = r->c;
  if (slot < 0) return slot;
  PX_CHECK(px__progress_until_done(c, &c->xf[slot]));
  return px__finish(r, slot);
}

px_status_t px__waitall(px__coll_t *r, const int *slots, int n) {
  for (int i = 0; i < n; i++) PX_CHECK(px__wait(r, slots[i]));
  return PX_OK;
}

/* ---- set-up and tear-down -------------------------------------------------- */

static px_status_t px__post_abort_recv(px_comm_t *c) {
  px__xfer_t *x = &c->abort_in;
  x->c = c;
  x->state = PX__XFER_BUSY;
  x->is_recv = 1;
  ucp_request_param_t prm = {.op_attr_mask = UCP_OP_ATTR_FIELD_CALLBACK |
                                             UCP_OP_ATTR_FIELD_USER_DATA |
                                             UCP_OP_ATTR_FIELD_RECV_INFO,
                             .cb.recv = px__recv_cb,
                             .user_data = x,
                             .recv_info.tag_info = &x->info};
  ucs_status_ptr_t sp =
      ucp_tag_recv_nbx(c->worker, &c->abort_msg, sizeof c->abort_msg,
                       PX__TAG_CLASS_ABORT << PX__TAG_CLASS_SHIFT, PX__TAG_CLASS_MASK, &prm);
  if (UCS_PTR_IS_ERR(sp)) return px__ucs_error(UCS_PTR_STATUS(sp), "ucp_tag_recv_nbx (abort)");
  if (sp == NULL) x->state = PX__XFER_DONE;
  else x->req = sp;
  return PX_OK;
}

/* UCX's configuration (the environment's), with our defaults where the
 * user set none. The caller releases *out. */
static px_status_t px__ucx_read_config(const px_comm_t *c, ucp_config_t **out) {
  ucs_status_t s = ucp_config_read(NULL, NULL, out);
  if (s != UCS_OK) return px__ucs_error(s, "ucp_config_read");
  /* UCX's shared-memory transports (posix, sysv) support peer failure
   * handling only when asked (their ERROR_HANDLING option); without it,
   * UCP_ERR_HANDLING_MODE_PEER leaves UCX nothing but TCP over loopback
   * within a host. A setting of the user's in the environment wins. */
  if (!getenv("UCX_POSIX_ERROR_HANDLING") && !getenv("UCX_SYSV_ERROR_HANDLING") &&
      !getenv("UCX_MM_ERROR_HANDLING")) {
    s = ucp_config_modify(*out, "MM_ERROR_HANDLING", "y");
    if (s != UCS_OK)
      px_log(PX_LOG_DEBUG, "ucp_config_modify(MM_ERROR_HANDLING): %s", ucs_status_string(s));
  }
  /* keepalive is how UCX notices a dead peer over shared memory: check
   * several times per timeout period (default interval: 20 s) */
  if (!getenv("UCX_KEEPALIVE_INTERVAL")) {
    int ka = (c->lost_ms > 0 && c->lost_ms < c->timeout_ms ? c->lost_ms : c->timeout_ms) / 8;
    if (ka < 100) ka = 100;
    if (ka > 20000) ka = 20000;
    char val[32];
    snprintf(val, sizeof val, "%dms", ka);
    s = ucp_config_modify(*out, "KEEPALIVE_INTERVAL", val);
    if (s != UCS_OK)
      px_log(PX_LOG_DEBUG, "ucp_config_modify(KEEPALIVE_INTERVAL): %s", ucs_status_string(s));
  }
  /* Shared memory with peer failure handling has no zero-copy path, so a
   * rendezvous only adds a round trip: send up to 64 KiB eagerly (all of
   * recursive doubling by default) */
  if (!getenv("UCX_RNDV_THRESH")) {
    s = ucp_config_modify(*out, "RNDV_THRESH", "64k");
    if (s != UCS_OK)
      px_log(PX_LOG_DEBUG, "ucp_config_modify(RNDV_THRESH): %s", ucs_status_string(s));
  }
  return PX_OK;
}

px_status_t px__ucx_init(px_comm_t *c, px_kv_t *kv, const char *prefix) {
  px_status_t st = PX_OK;
  c->xf = px_calloc(PX__XFER_MAX, sizeof *c->xf, "comm.xfers");
  c->xf_free = px_malloc(PX__XFER_MAX * sizeof *c->xf_free, "comm.xfer_free");
  c->peers = px_calloc((size_t)c->size, sizeof *c->peers, "comm.peers");
  c->abort_out = px_calloc((size_t)c->size, sizeof *c->abort_out, "comm.abort_out");
  if (!c->xf || !c->xf_free || !c->peers || !c->abort_out) return PX_ERR_NOMEM;
  for (int i = PX__XFER_MAX - 1; i >= 0; i--) {
    c->xf[i].c = c;
    c->xf_free[c->xf_nfree++] = i;
  }
  for (int p = 0; p < c->size; p++) {
    c->peers[p].c = c;
    c->peers[p].rank = p;
  }

  ucp_config_t *cfg = NULL;
  PX_CHECK(px__ucx_read_config(c, &cfg));
  ucs_status_t s;
  ucp_params_t prm = {.field_mask = UCP_PARAM_FIELD_FEATURES | UCP_PARAM_FIELD_MT_WORKERS_SHARED |
                                    UCP_PARAM_FIELD_ESTIMATED_NUM_EPS,
                      .features = UCP_FEATURE_TAG,
                      .mt_workers_shared = 0,
                      .estimated_num_eps = (size_t)c->size};
  s = ucp_init(&prm, cfg, &c->ctx);
  ucp_config_release(cfg);
  if (s != UCS_OK) {
    c->ctx = NULL;
    return px__ucs_error(s, "ucp_init");
  }
  ucp_worker_params_t wp = {.field_mask = UCP_WORKER_PARAM_FIELD_THREAD_MODE,
                            .thread_mode = UCS_THREAD_MODE_SERIALIZED};
  s = ucp_worker_create(c->ctx, &wp, &c->worker);
  if (s != UCS_OK) {
    c->worker = NULL;
    return px__ucs_error(s, "ucp_worker_create");
  }

  ucp_address_t *addr = NULL;
  size_t alen = 0;
  s = ucp_worker_get_address(c->worker, &addr, &alen);
  if (s != UCS_OK) return px__ucs_error(s, "ucp_worker_get_address");
  char key[300];
  snprintf(key, sizeof key, "%s/ucx/%d", prefix, c->rank);
  st = px_kv_put(kv, key, addr, alen);
  ucp_worker_release_address(c->worker, addr);
  PX_CHECK(st);

  for (int p = 0; p < c->size; p++) {
    if (p == c->rank) continue;
    void *val = NULL;
    size_t len = 0;
    snprintf(key, sizeof key, "%s/ucx/%d", prefix, p);
    st = px_kv_get(kv, key, c->timeout_ms, &val, &len);
    if (st < 0) {
      char why[256];
      snprintf(why, sizeof why, "%s", px_last_error());
      return px_set_error(st, "rank %d: no UCX address from rank %d (%s)", c->rank, p, why);
    }
    ucp_ep_params_t ep = {.field_mask = UCP_EP_PARAM_FIELD_REMOTE_ADDRESS |
                                        UCP_EP_PARAM_FIELD_ERR_HANDLING_MODE |
                                        UCP_EP_PARAM_FIELD_ERR_HANDLER,
                          .address = val,
                          .err_mode = UCP_ERR_HANDLING_MODE_PEER,
                          .err_handler = {.cb = px__ep_error_cb, .arg = &c->peers[p]}};
    s = ucp_ep_create(c->worker, &ep, &c->peers[p].ep);
    px_free(val);
    if (s != UCS_OK) {
      c->peers[p].ep = NULL;
      return px__ucs_error(s, "ucp_ep_create");
    }
  }
  return px__post_abort_recv(c);
}

void px__ucx_fini(px_comm_t *c) {
  if (c->worker) {
    int healthy = atomic_load(&c->failed) == 0;
    /* healthy: flush our last messages to the peers (they may still be
     * finishing the last collective), all endpoints at once and bounded;
     * broken: just let go */
    if (c->peers) px__close_eps(c, !healthy, 2000.0);
    if (c->abort_in.state == PX__XFER_BUSY && c->abort_in.req) {
      ucp_request_cancel(c->worker, c->abort_in.req);
      px__drain_for(c, 500.0, px__abort_not_in);
    }
    ucp_worker_destroy(c->worker);
    c->worker = NULL;
  }
  if (c->ctx) ucp_cleanup(c->ctx);
  c->ctx = NULL;
  PX_FREE_ALL(c->xf, c->xf_free, c->peers, c->abort_out);
  c->xf = NULL;
  c->xf_free = NULL;
  c->peers = NULL;
  c->abort_out = NULL;
}
