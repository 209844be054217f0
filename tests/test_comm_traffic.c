/* Traffic counters: after each collective the bytes a rank sent and
 * received, split by tier (peer on the same node: intra; else inter), equal
 * what the algorithm must move: 2(n-1)/n * B each way for the ring
 * allreduce, log2(n) * B for recursive doubling (plus the pairing steps of a
 * non-power-of-two size), B in and B per child out for the broadcast tree,
 * everything but the own block for allgather, nothing for a barrier. Over a
 * run, what all ranks sent equals what all ranks received. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "comm_harness.h"
#include "prunex/comm_internal.h"

typedef struct {
  uint64_t sent[2], recv[2];
} traffic_t;

static int tier(px_th_ctx_t *ctx, px_group_t *g, int grank) {
  return ctx->node_of[px_group_world_rank(g, grank)] == ctx->node_of[ctx->rank] ? 0 : 1;
}

static int expect_equal(px_comm_t *c, const traffic_t *want, const char *what) {
  px_comm_traffic_t t;
  px_comm_traffic(c, &t);
  for (int k = 0; k < 2; k++) {
    if (t.sent[k] != want->sent[k] || t.recv[k] != want->recv[k])
      PX_TH_FAIL("%s: %s sent %llu recv %llu, want sent %llu recv %llu", what,
                 k ? "inter" : "intra", (unsigned long long)t.sent[k],
                 (unsigned long long)t.recv[k], (unsigned long long)want->sent[k],
                 (unsigned long long)want->recv[k]);
  }
  /* keep the per-run totals for the conservation check in the parent */
  px_th_shared[2 * px_th_me] += (double)(t.sent[0] + t.sent[1]);
  px_th_shared[2 * px_th_me + 1] += (double)(t.recv[0] + t.recv[1]);
  px_comm_traffic_reset(c);
  return 0;
}

/* recursive doubling, per rank: the pairing step of the first 2*rem ranks,
 * log2(p2) exchanges, the result sent back */
static void expect_rd(px_th_ctx_t *ctx, px_group_t *g, uint64_t B, traffic_t *w) {
  int n = px_group_size(g), me = px_group_rank(g);
  int p2 = 1;
  while (p2 * 2 <= n) p2 *= 2;
  int rem = n - p2, nr;
  memset(w, 0, sizeof *w);
  if (me < 2 * rem) {
    if (me % 2 == 0) {
      w->sent[tier(ctx, g, me + 1)] += B;
      w->recv[tier(ctx, g, me + 1)] += B;
      return;
    }
    w->recv[tier(ctx, g, me - 1)] += B;
    w->sent[tier(ctx, g, me - 1)] += B;
    nr = me / 2;
  } else {
    nr = me - rem;
  }
  for (int mask = 1; mask < p2; mask <<= 1) {
    int pn = nr ^ mask, peer = pn < rem ? pn * 2 + 1 : pn + rem;
    w->sent[tier(ctx, g, peer)] += B;
    w->recv[tier(ctx, g, peer)] += B;
  }
}

/* ring: count split into n chunks as evenly as possible; 2(n-1) steps, the
 * chunk sent at step t is (me - t) mod n, the one received (me - t - 1) */
static void expect_ring(px_th_ctx_t *ctx, px_group_t *g, size_t count, size_t esz, int steps,
                        const size_t *len_in, traffic_t *w) {
  int n = px_group_size(g), me = px_group_rank(g);
  size_t len[PX_TH_MAX_RANKS];
  for (int k = 0; k < n; k++)
    len[k] = len_in ? len_in[k] : count / (size_t)n + ((size_t)k < count % (size_t)n);
  memset(w, 0, sizeof *w);
  int right = (me + 1) % n, left = (me - 1 + n) % n;
  for (int t = 0; t < steps; t++) {
    w->sent[tier(ctx, g, right)] += len[((me - t) % n + n) % n] * esz;
    w->recv[tier(ctx, g, left)] += len[((me - t - 1) % n + n) % n] * esz;
  }
}

static int rank_traffic(px_th_ctx_t *ctx) {
  int grp_kinds = *(const int *)ctx->arg;
  for (int algo = 1; algo <= 2; algo++) {
    px_comm_opts_t o;
    px_comm_opts_default(&o);
    o.allreduce_algo = (px_comm_algo_t)algo; /* RD, then RING */
    o.allgather_algo = algo == 1 ? PX_COMM_ALGO_DIRECT : PX_COMM_ALGO_RING;
    px_comm_t *c = NULL;
    PX_TH_OK(px_th_comm(ctx, &o, &c));
    px_comm_traffic_reset(c);
    for (int k = 0; k < 3; k++) {
      if (!(grp_kinds & (1 << k))) continue;
      px_group_t *g = px_comm_group(c, (px_group_kind_t)k);
      if (!g) continue;
      int n = px_group_size(g), me = px_group_rank(g);
      static const size_t counts[] = {0, 1, 12, 1000, 100003};
      char *buf = calloc(100003 * PX_TH_MAX_RANKS, 8);
      PX_TH_CHECK(buf != NULL);
      traffic_t w;
      for (int s = 0; s < 5; s++) {
        size_t cnt = counts[s];
        for (int d = 0; d < 3; d++) {
          px_comm_dtype_t dt = (px_comm_dtype_t)d;
          size_t esz = px_comm_dtype_size(dt);
          char what[96];
          snprintf(what, sizeof what, "allreduce algo %d group %d count %zu dt %d", algo, k, cnt, d);
          PX_TH_OK(px_comm_allreduce(g, buf, buf, cnt, dt, PX_COMM_MAX));
          if (n == 1) memset(&w, 0, sizeof w);
          else if (algo == 1) expect_rd(ctx, g, cnt * esz, &w);
          else expect_ring(ctx, g, cnt, esz, 2 * (n - 1), NULL, &w);
          if (expect_equal(c, &w, what)) return 1;
          /* the textbook figure when the count divides evenly */
          if (algo == 2 && n > 1 && cnt % (size_t)n == 0) {
            uint64_t want = 2 * (uint64_t)(n - 1) * cnt * esz / (uint64_t)n;
            PX_TH_CHECK(w.sent[0] + w.sent[1] == want && w.recv[0] + w.recv[1] == want);
          }
        }
        /* broadcast from the last rank: parent in, children out */
        int root = n - 1, vr = (me - root + n) % n;
        memset(&w, 0, sizeof w);
        uint64_t B = cnt * 4;
        if (vr) w.recv[tier(ctx, g, ((vr - 1) / 2 + root) % n)] += B;
        for (int ch = 1; ch <= 2; ch++)
          if (2 * vr + ch < n) w.sent[tier(ctx, g, (2 * vr + ch + root) % n)] += B;
        PX_TH_OK(px_comm_broadcast(g, buf, cnt, PX_COMM_F32, root));
        if (expect_equal(c, &w, "broadcast")) return 1;
        /* allgather: the others' blocks in; own block out n-1 times (direct) or
         * the ring's forwarding */
        PX_TH_OK(px_comm_allgather(g, buf, buf + (size_t)n * cnt * 8, cnt, PX_COMM_F64));
        memset(&w, 0, sizeof w);
        if (algo == 1) {
          for (int p = 0; p < n; p++) {
            if (p == me) continue;
            w.sent[tier(ctx, g, p)] += cnt * 8;
            w.recv[tier(ctx, g, p)] += cnt * 8;
          }
        } else if (n > 1) {
          size_t len[PX_TH_MAX_RANKS];
          for (int p = 0; p < n; p++) len[p] = cnt;
          expect_ring(ctx, g, 0, 8, n - 1, len, &w);
        }
        if (expect_equal(c, &w, "allgather")) return 1;
      }
      /* allgatherv with uneven blocks, through the ring */
      if (algo == 2 && n > 1) {
        size_t len[PX_TH_MAX_RANKS];
        for (int p = 0; p < n; p++) len[p] = (size_t)(1000 * p + 3);
        PX_TH_OK(px_comm_allgatherv(g, buf, buf + 1000000, len, PX_COMM_U8));
        expect_ring(ctx, g, 0, 1, n - 1, len, &w);
        uint64_t tot = 0;
        for (int p = 0; p < n; p++) tot += len[p];
        PX_TH_CHECK(w.recv[0] + w.recv[1] == tot - len[me]);
        if (expect_equal(c, &w, "allgatherv")) return 1;
      }
      PX_TH_OK(px_comm_barrier(g));
      memset(&w, 0, sizeof w);
      if (expect_equal(c, &w, "barrier")) return 1;
      free(buf);
    }
    px_comm_destroy(c);
  }
  return 0;
}

static void run(int size, const int *nodes, int kinds) {
  assert_int_equal(px_th_run(size, nodes, rank_traffic, &kinds, 120), 0);
  double sent = 0, recv = 0;
  for (int r = 0; r < size; r++) {
    sent += px_th_shared[2 * r];
    recv += px_th_shared[2 * r + 1];
  }
  assert_true(sent > 0);
  assert_true(sent == recv); /* every byte sent was received by someone */
}

static void test_traffic_4_ranks_2_nodes(void **state) {
  (void)state;
  const int nodes[] = {0, 0, 1, 1};
  run(4, nodes, 7);
}

static void test_traffic_6_ranks_3_nodes_non_power_of_two(void **state) {
  (void)state;
  const int nodes[] = {0, 1, 2, 0, 1, 2};
  run(6, nodes, 7);
}

static void test_traffic_8_ranks_4_nodes(void **state) {
  (void)state;
  const int nodes[] = {0, 0, 1, 1, 2, 2, 3, 3};
  run(8, nodes, 1 | 4);
}

int main(int argc, char **argv) {
  px_th_init(argc, argv);
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_traffic_4_ranks_2_nodes),
      cmocka_unit_test(test_traffic_6_ranks_3_nodes_non_power_of_two),
      cmocka_unit_test(test_traffic_8_ranks_4_nodes),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
