/* Failures of the data plane: a peer killed in the middle of collectives
 * gives an error on every surviving rank within the timeout (nothing
 * hangs); a peer that stalls gives PX_ERR_TIMEOUT; mismatched sizes, dtypes
 * or roots fail with PX_ERR_MISMATCH on every rank instead of being reduced;
 * a broken communicator fails every later call at once (blocking and
 * non-blocking) and is destroyed promptly; px_comm_abort stops the peers;
 * a rank that never shows up makes creation time out. */
#include <pthread.h>
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "comm_harness.h"
#include "prunex/comm_internal.h"

#define TIMEOUT_MS 3000
#define SLACK_MS 3000
#define SH_DEATH 0      /* shared: when the victim died (ms) */
#define SH_ERR 16       /* shared[SH_ERR + rank]: status seen by the rank */
#define SH_LATENCY 48   /* shared[SH_LATENCY + rank]: ms from the death to the error */

typedef struct {
  int victim;
  int kind;        /* group used: PX_GROUP_WORLD or PX_GROUP_INTER */
  size_t count;    /* elements per allreduce */
  int delay_ms;    /* the victim dies this long after the loop starts */
} kill_case_t;

static void *killer(void *arg) {
  const kill_case_t *kc = arg;
  struct timespec ts = {kc->delay_ms / 1000, (long)(kc->delay_ms % 1000) * 1000000L};
  nanosleep(&ts, NULL);
  px_th_shared[SH_DEATH] = px_th_now_ms();
  raise(SIGKILL);
  return NULL;
}

/* checks that a broken communicator answers at once, and dies quickly */
static int check_broken(px_comm_t *c, px_group_t *g, px_status_t st) {
  float x[4] = {0};
  double t0 = px_th_now_ms();
  PX_TH_CHECK(px_comm_allreduce(g, x, x, 4, PX_COMM_F32, PX_COMM_SUM) == st);
  PX_TH_CHECK(px_comm_barrier(g) == st);
  px_comm_req_t *req = NULL;
  PX_TH_CHECK(px_comm_iallreduce(g, x, x, 4, PX_COMM_F32, PX_COMM_SUM, &req) == PX_OK);
  PX_TH_CHECK(px_comm_wait(req) == st);
  PX_TH_CHECK(px_comm_status(c) == st);
  double t1 = px_th_now_ms();
  if (t1 - t0 > 200) PX_TH_FAIL("a broken communicator took %.0f ms to fail", t1 - t0);
  px_comm_destroy(c);
  double t2 = px_th_now_ms();
  if (t2 - t1 > 5000) PX_TH_FAIL("destroying a broken communicator took %.0f ms", t2 - t1);
  return 0;
}

static int rank_kill(px_th_ctx_t *ctx) {
  const kill_case_t *kc = ctx->arg;
  px_comm_opts_t o;
  px_comm_opts_default(&o);
  o.timeout_ms = TIMEOUT_MS;
  px_comm_t *c = NULL;
  PX_TH_OK(px_th_comm(ctx, &o, &c));
  px_group_t *g = px_comm_group(c, (px_group_kind_t)kc->kind);
  float *x = calloc(kc->count, sizeof *x);
  PX_TH_CHECK(x != NULL);
  /* a few good rounds first: the failure happens on a working communicator */
  for (int i = 0; i < 3; i++)
    if (g) PX_TH_OK(px_comm_allreduce(g, x, x, kc->count, PX_COMM_F32, PX_COMM_SUM));
  PX_TH_OK(px_comm_barrier(px_comm_group(c, PX_GROUP_WORLD)));
  if (ctx->rank == kc->victim) {
    pthread_t t;
    pthread_create(&t, NULL, killer, (void *)kc);
  }
  px_group_t *w = px_comm_group(c, PX_GROUP_WORLD);
  px_status_t st = PX_OK;
  double t_end = px_th_now_ms() + 60000;
  /* members of the group loop on it, the others on world barriers */
  while (px_th_now_ms() < t_end) {
    st = g ? px_comm_allreduce(g, x, x, kc->count, PX_COMM_F32, PX_COMM_SUM) : px_comm_barrier(w);
    if (st != PX_OK) break;
  }
  if (ctx->rank == kc->victim) {
    pause(); /* the killer thread ends us */
    return 3;
  }
  double now = px_th_now_ms();
  px_th_shared[SH_ERR + ctx->rank] = st;
  px_th_shared[SH_LATENCY + ctx->rank] = now - px_th_shared[SH_DEATH];
  if (st != PX_ERR_PEER && st != PX_ERR_TIMEOUT)
    PX_TH_FAIL("survivor got %s (%s), want PX_ERR_PEER or PX_ERR_TIMEOUT", px_status_name(st),
               px_last_error());
  if (px_th_shared[SH_DEATH] <= 0) PX_TH_FAIL("failed before the victim died: %s", px_last_error());
  if (now - px_th_shared[SH_DEATH] > TIMEOUT_MS + SLACK_MS)
    PX_TH_FAIL("error came %.0f ms after the death (timeout %d ms)", now - px_th_shared[SH_DEATH],
               TIMEOUT_MS);
  free(x);
  return check_broken(c, g ? g : w, st);
}

static void run_kill(int size, const int *nodes, const kill_case_t *kc) {
  int codes[PX_TH_MAX_RANKS];
  px_th_run_codes(size, nodes, rank_kill, kc, 120, codes);
  for (int r = 0; r < size; r++) {
    if (r == kc->victim) {
      assert_int_equal(codes[r], 128 + SIGKILL);
      continue;
    }
    if (codes[r] != 0) fprintf(stderr, "rank %d exited with %d\n", r, codes[r]);
    assert_int_equal(codes[r], 0);
    printf("rank %d: %s after %.0f ms\n", r, px_status_name((px_status_t)px_th_shared[SH_ERR + r]),
           px_th_shared[SH_LATENCY + r]);
  }
}

static void test_killed_peer_small_messages_4_ranks(void **state) {
  (void)state;
  const int nodes[] = {0, 0, 1, 1};
  kill_case_t kc = {2, PX_GROUP_WORLD, 16, 50};
  run_kill(4, nodes, &kc);
}

static void test_killed_peer_mid_ring_5_ranks(void **state) {
  (void)state;
  const int nodes[] = {0, 0, 1, 1, 2};
  kill_case_t kc = {1, PX_GROUP_WORLD, 1 << 20, 120};
  run_kill(5, nodes, &kc);
}

static void test_killed_leader_8_ranks_inter_group(void **state) {
  (void)state;
  const int nodes[] = {0, 0, 1, 1, 2, 2, 3, 3};
  kill_case_t kc = {4, PX_GROUP_INTER, 50000, 80};
  run_kill(8, nodes, &kc);
}

/* ---- a stalled (alive but silent) peer ------------------------------------ */

static int rank_stall(px_th_ctx_t *ctx) {
  px_comm_opts_t o;
  px_comm_opts_default(&o);
  o.timeout_ms = 1500;
  px_comm_t *c = NULL;
  PX_TH_OK(px_th_comm(ctx, &o, &c));
  px_group_t *w = px_comm_group(c, PX_GROUP_WORLD);
  double x[8] = {1};
  PX_TH_OK(px_comm_allreduce(w, x, x, 8, PX_COMM_F64, PX_COMM_SUM));
  if (ctx->rank == 3) {
    struct timespec ts = {4, 0};
    nanosleep(&ts, NULL);
    /* the others gave up meanwhile and told us */
    double t0 = px_th_now_ms();
    px_status_t st = px_comm_allreduce(w, x, x, 8, PX_COMM_F64, PX_COMM_SUM);
    /* its own part may have completed from messages that were waiting for
     * it; then the next call must fail */
    if (st == PX_OK) st = px_comm_barrier(w);
    if (st != PX_ERR_PEER) PX_TH_FAIL("late rank got %s, want PX_ERR_PEER", px_status_name(st));
    PX_TH_CHECK(px_th_now_ms() - t0 < 1000);
    px_comm_destroy(c);
    return 0;
  }
  double t0 = px_th_now_ms();
  px_status_t st = px_comm_allreduce(w, x, x, 8, PX_COMM_F64, PX_COMM_SUM);
  double dt = px_th_now_ms() - t0;
  if (st != PX_ERR_TIMEOUT && st != PX_ERR_PEER)
    PX_TH_FAIL("got %s, want PX_ERR_TIMEOUT or PX_ERR_PEER", px_status_name(st));
  if (dt < 1000 || dt > 1500 + SLACK_MS) PX_TH_FAIL("failed after %.0f ms (timeout 1500)", dt);
  return check_broken(c, w, st);
}

static void test_stalled_peer_times_out(void **state) {
  (void)state;
  const int nodes[] = {0, 0, 1, 1};
  assert_int_equal(px_th_run(4, nodes, rank_stall, NULL, 60), 0);
}

/* ---- mismatched calls ------------------------------------------------------ */

typedef enum {
  MM_COUNT_SMALL,
  MM_COUNT_LARGE,
  MM_DTYPE,
  MM_OP,
  MM_BCAST_ROOT,
  MM_BCAST_COUNT,
  MM_ALLGATHER_COUNT,
  MM_ALLGATHERV_COUNTS,
  MM_LIST,
  MM_CASES
} mm_case_t;

static px_status_t mismatched_call(px_group_t *g, int odd, mm_case_t mc, void *buf) {
  size_t counts[PX_TH_MAX_RANKS];
  switch (mc) {
    case MM_COUNT_SMALL:
      return px_comm_allreduce(g, buf, buf, odd ? 11 : 10, PX_COMM_F32, PX_COMM_SUM);
    case MM_COUNT_LARGE:
      return px_comm_allreduce(g, buf, buf, odd ? 300001 : 300000, PX_COMM_F32, PX_COMM_SUM);
    case MM_DTYPE: /* same bytes, different type */
      return px_comm_allreduce(g, buf, buf, odd ? 400 : 100, odd ? PX_COMM_U8 : PX_COMM_F32,
                               PX_COMM_MAX);
    case MM_OP:
      return px_comm_allreduce(g, buf, buf, 64, PX_COMM_F32, odd ? PX_COMM_MAX : PX_COMM_SUM);
    case MM_BCAST_ROOT:
      return px_comm_broadcast(g, buf, 1000, PX_COMM_F32, odd ? 1 : 0);
    case MM_BCAST_COUNT:
      return px_comm_broadcast(g, buf, odd ? 1000 : 999, PX_COMM_F32, 0);
    case MM_ALLGATHER_COUNT:
      return px_comm_allgather(g, buf, (char *)buf + (8 << 20), odd ? 5 : 6, PX_COMM_F64);
    case MM_ALLGATHERV_COUNTS:
      for (int k = 0; k < px_group_size(g); k++) counts[k] = (size_t)(k + (odd && k == 0));
      counts[px_group_rank(g)] = (size_t)px_group_rank(g) + (odd && px_group_rank(g) == 0);
      return px_comm_allgatherv(g, buf, (char *)buf + (8 << 20), counts, PX_COMM_F32);
    case MM_LIST: {
      size_t cnt[3] = {100, odd ? 7 : 8, 50};
      void *bufs[3] = {buf, (char *)buf + 4096, (char *)buf + 8192};
      return px_comm_allreduce_list(g, bufs, cnt, 3, PX_COMM_F32, PX_COMM_SUM);
    }
    default:
      return PX_ERR_INTERNAL;
  }
}

static int rank_mismatch(px_th_ctx_t *ctx) {
  char *buf = calloc(16 << 20, 1);
  PX_TH_CHECK(buf != NULL);
  for (int mc = 0; mc < MM_CASES; mc++) {
    px_comm_opts_t o;
    px_comm_opts_default(&o);
    o.timeout_ms = 10000;
    px_comm_t *c = NULL;
    px_status_t cst = px_th_comm(ctx, &o, &c);
    /* a rank still finishing creation may already get the others' abort
     * notice for the mismatched call: it sees the mismatch there */
    if (cst == PX_ERR_MISMATCH) continue;
    if (cst != PX_OK) PX_TH_FAIL("case %d: create: %s", mc, px_last_error());
    px_group_t *w = px_comm_group(c, PX_GROUP_WORLD);
    int odd = ctx->rank == ctx->size - 1; /* one rank disagrees */
    double t0 = px_th_now_ms();
    px_status_t st = mismatched_call(w, odd, (mm_case_t)mc, buf);
    /* broadcast: ranks that never talk to the odd one may finish; they
     * learn of the failure at their next call */
    if (st == PX_OK && (mc == MM_BCAST_ROOT || mc == MM_BCAST_COUNT))
      st = px_comm_barrier(w);
    if (st != PX_ERR_MISMATCH)
      PX_TH_FAIL("case %d: got %s (%s), want PX_ERR_MISMATCH", mc, px_status_name(st),
                 px_last_error());
    if (px_th_now_ms() - t0 > 5000) PX_TH_FAIL("case %d: mismatch took %.0f ms", mc, px_th_now_ms() - t0);
    px_comm_destroy(c);
  }
  free(buf);
  return 0;
}

static void test_mismatch_fails_on_every_rank(void **state) {
  (void)state;
  const int nodes[] = {0, 0, 1, 1};
  assert_int_equal(px_th_run(4, nodes, rank_mismatch, NULL, 120), 0);
}

static void test_mismatch_fails_on_every_rank_5_ranks(void **state) {
  (void)state;
  const int nodes[] = {0, 1, 2, 0, 1};
  assert_int_equal(px_th_run(5, nodes, rank_mismatch, NULL, 120), 0);
}

/* ---- abort ----------------------------------------------------------------- */

static int rank_abort(px_th_ctx_t *ctx) {
  px_comm_opts_t o;
  px_comm_opts_default(&o);
  o.timeout_ms = 20000;
  px_comm_t *c = NULL;
  PX_TH_OK(px_th_comm(ctx, &o, &c));
  px_group_t *w = px_comm_group(c, PX_GROUP_WORLD);
  PX_TH_OK(px_comm_barrier(w));
  double t0 = px_th_now_ms();
  if (ctx->rank == 0) {
    struct timespec ts = {0, 200 * 1000000};
    nanosleep(&ts, NULL);
    px_comm_abort(c, PX_ERR_PEER);
    PX_TH_CHECK(px_comm_status(c) == PX_ERR_PEER);
    PX_TH_CHECK(px_comm_barrier(w) == PX_ERR_PEER);
    px_comm_destroy(c);
    return 0;
  }
  px_status_t st = px_comm_barrier(w); /* rank 0 never enters: it aborts */
  if (st != PX_ERR_PEER) PX_TH_FAIL("got %s, want PX_ERR_PEER", px_status_name(st));
  if (px_th_now_ms() - t0 > 5000) PX_TH_FAIL("abort took %.0f ms to arrive", px_th_now_ms() - t0);
  return check_broken(c, w, st);
}

static void test_abort_stops_every_peer(void **state) {
  (void)state;
  const int nodes[] = {0, 0, 1};
  assert_int_equal(px_th_run(3, nodes, rank_abort, NULL, 60), 0);
}

/* px_comm_abort from a second thread unblocks the caller stuck in a call */
static void *abort_later(void *arg) {
  struct timespec ts = {0, 200 * 1000000};
  nanosleep(&ts, NULL);
  px_comm_abort(arg, PX_ERR_TIMEOUT);
  return NULL;
}

static int rank_abort_thread(px_th_ctx_t *ctx) {
  px_comm_opts_t o;
  px_comm_opts_default(&o);
  o.timeout_ms = 20000;
  px_comm_t *c = NULL;
  PX_TH_OK(px_th_comm(ctx, &o, &c));
  px_group_t *w = px_comm_group(c, PX_GROUP_WORLD);
  PX_TH_OK(px_comm_barrier(w));
  double t0 = px_th_now_ms();
  if (ctx->rank == 0) {
    pthread_t t;
    pthread_create(&t, NULL, abort_later, c);
    px_status_t st = px_comm_barrier(w); /* the others come only after 1 s */
    pthread_join(t, NULL);
    if (st != PX_ERR_TIMEOUT) PX_TH_FAIL("got %s, want PX_ERR_TIMEOUT", px_status_name(st));
    double dt = px_th_now_ms() - t0;
    if (dt < 150 || dt > 900) PX_TH_FAIL("the blocked call returned after %.0f ms", dt);
    return check_broken(c, w, st);
  }
  struct timespec ts = {1, 0};
  nanosleep(&ts, NULL);
  px_status_t st = px_comm_barrier(w);
  if (st != PX_ERR_PEER) PX_TH_FAIL("got %s, want PX_ERR_PEER", px_status_name(st));
  return check_broken(c, w, st);
}

static void test_abort_from_another_thread_unblocks_the_caller(void **state) {
  (void)state;
  const int nodes[] = {0, 1, 1};
  assert_int_equal(px_th_run(3, nodes, rank_abort_thread, NULL, 60), 0);
}

/* ---- a rank that never comes ------------------------------------------------ */

static int rank_missing(px_th_ctx_t *ctx) {
  if (ctx->rank == 2) return 0;
  px_comm_opts_t o;
  px_comm_opts_default(&o);
  o.timeout_ms = 1000;
  px_comm_t *c = NULL;
  double t0 = px_th_now_ms();
  px_status_t st = px_th_comm(ctx, &o, &c);
  double dt = px_th_now_ms() - t0;
  if (st != PX_ERR_TIMEOUT) PX_TH_FAIL("create got %s, want PX_ERR_TIMEOUT", px_status_name(st));
  PX_TH_CHECK(c == NULL);
  if (dt > 1000 + SLACK_MS) PX_TH_FAIL("create gave up after %.0f ms", dt);
  return 0;
}

static void test_create_times_out_without_all_ranks(void **state) {
  (void)state;
  const int nodes[] = {0, 0, 0};
  assert_int_equal(px_th_run(3, nodes, rank_missing, NULL, 60), 0);
}

int main(int argc, char **argv) {
  px_th_init(argc, argv);
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_killed_peer_small_messages_4_ranks),
      cmocka_unit_test(test_killed_peer_mid_ring_5_ranks),
      cmocka_unit_test(test_killed_leader_8_ranks_inter_group),
      cmocka_unit_test(test_stalled_peer_times_out),
      cmocka_unit_test(test_mismatch_fails_on_every_rank),
      cmocka_unit_test(test_mismatch_fails_on_every_rank_5_ranks),
      cmocka_unit_test(test_abort_stops_every_peer),
      cmocka_unit_test(test_abort_from_another_thread_unblocks_the_caller),
      cmocka_unit_test(test_create_times_out_without_all_ranks),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
