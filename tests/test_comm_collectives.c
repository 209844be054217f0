/* Broadcast, allgather, allgatherv and barrier against a serial reference,
 * on every group of 2 to 8 forked ranks arranged as 1 to 4 nodes: every
 * root, sizes 0, 1, primes and multi-segment pipelines, in place and out of
 * place, both allgather algorithms, allgatherv with empty blocks, and a
 * barrier that really waits for the last rank. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "comm_harness.h"
#include "prunex/comm_internal.h"

#define NSIZES(a) ((int)(sizeof(a) / sizeof((a)[0])))

static const px_comm_dtype_t k_dtypes[] = {PX_COMM_F32, PX_COMM_F64, PX_COMM_U8};

static int check_bcast(px_th_ctx_t *ctx, px_group_t *g, const size_t *sizes, int nsizes) {
  (void)ctx;
  int n = px_group_size(g), me = px_group_rank(g);
  size_t maxn = 0;
  for (int s = 0; s < nsizes; s++)
    if (sizes[s] > maxn) maxn = sizes[s];
  char *buf = malloc(maxn * 8 + 8), *ref = malloc(maxn * 8 + 8);
  PX_TH_CHECK(buf && ref);
  for (int root = 0; root < n; root++) {
    for (int d = 0; d < 3; d++) {
      px_comm_dtype_t dt = k_dtypes[d];
      size_t esz = px_comm_dtype_size(dt);
      for (int s = 0; s < nsizes; s++) {
        size_t cnt = sizes[s];
        uint64_t seed = 131u * (uint64_t)root + 17u * (uint64_t)dt + cnt;
        px_th_fill(ref, cnt, dt, seed, px_group_world_rank(g, root), 0);
        if (me == root) memcpy(buf, ref, cnt * esz);
        else memset(buf, 0x5A, cnt * esz);
        buf[cnt * esz] = 0x11;
        px_status_t st = px_comm_broadcast(g, buf, cnt, dt, root);
        if (st != PX_OK)
          PX_TH_FAIL("broadcast kind %d root %d n %zu: %s", px_group_kind(g), root, cnt,
                     px_last_error());
        if (memcmp(buf, ref, cnt * esz) != 0)
          PX_TH_FAIL("broadcast kind %d root %d dt %d n %zu: wrong data", px_group_kind(g), root,
                     dt, cnt);
        PX_TH_CHECK(buf[cnt * esz] == 0x11);
      }
    }
  }
  free(buf);
  free(ref);
  return 0;
}

static int check_allgather(px_group_t *g, const size_t *sizes, int nsizes) {
  int n = px_group_size(g), me = px_group_rank(g);
  size_t maxn = 0;
  for (int s = 0; s < nsizes; s++)
    if (sizes[s] > maxn) maxn = sizes[s];
  char *send = malloc(maxn * 8 + 8), *recv = malloc(maxn * 8 * (size_t)n + 8),
       *ref = malloc(maxn * 8 * (size_t)n + 8);
  PX_TH_CHECK(send && recv && ref);
  for (int d = 0; d < 3; d++) {
    px_comm_dtype_t dt = k_dtypes[d];
    size_t esz = px_comm_dtype_size(dt);
    for (int s = 0; s < nsizes; s++) {
      size_t cnt = sizes[s], blk = cnt * esz;
      uint64_t seed = 977u * (uint64_t)dt + cnt;
      for (int k = 0; k < n; k++) px_th_fill(ref + k * blk, cnt, dt, seed, px_group_world_rank(g, k), 0);
      memset(recv, 0x3C, blk * (size_t)n + 1);
      int in_place = s & 1;
      if (in_place) memcpy(recv + me * blk, ref + me * blk, blk);
      else memcpy(send, ref + me * blk, blk);
      px_status_t st = px_comm_allgather(g, in_place ? recv + me * blk : send, recv, cnt, dt);
      if (st != PX_OK) PX_TH_FAIL("allgather n %zu: %s", cnt, px_last_error());
      if (memcmp(recv, ref, blk * (size_t)n) != 0)
        PX_TH_FAIL("allgather kind %d dt %d n %zu%s: wrong data", px_group_kind(g), dt, cnt,
                   in_place ? " in place" : "");
      PX_TH_CHECK(recv[blk * (size_t)n] == 0x3C);
    }
  }
  free(send);
  free(recv);
  free(ref);
  return 0;
}

/* counts patterns: all equal, some empty, all empty, one big */
static int check_allgatherv(px_group_t *g) {
  int n = px_group_size(g), me = px_group_rank(g);
  size_t counts[PX_TH_MAX_RANKS];
  for (int pat = 0; pat < 5; pat++) {
    size_t tot = 0;
    for (int k = 0; k < n; k++) {
      switch (pat) {
        case 0: counts[k] = 17; break;
        case 1: counts[k] = (k % 2) ? 0 : (size_t)(3 * k + 1); break;
        case 2: counts[k] = 0; break;
        case 3: counts[k] = k == n - 1 ? 300007 : (size_t)k; break;
        default: counts[k] = (size_t)(1 + 7919 * k); break;
      }
      tot += counts[k];
    }
    for (int d = 0; d < 3; d++) {
      px_comm_dtype_t dt = k_dtypes[d];
      size_t esz = px_comm_dtype_size(dt);
      char *send = malloc(counts[me] * esz + 1), *recv = malloc(tot * esz + 1),
           *ref = malloc(tot * esz + 1);
      PX_TH_CHECK(send && recv && ref);
      size_t off = 0;
      uint64_t seed = 4242u + (uint64_t)pat * 10 + (uint64_t)dt;
      for (int k = 0; k < n; k++) {
        px_th_fill(ref + off * esz, counts[k], dt, seed, px_group_world_rank(g, k), 0);
        if (k == me) memcpy(send, ref + off * esz, counts[k] * esz);
        off += counts[k];
      }
      memset(recv, 0x77, tot * esz + 1);
      px_status_t st = px_comm_allgatherv(g, send, recv, counts, dt);
      if (st != PX_OK) PX_TH_FAIL("allgatherv pattern %d: %s", pat, px_last_error());
      if (memcmp(recv, ref, tot * esz) != 0)
        PX_TH_FAIL("allgatherv kind %d pattern %d dt %d: wrong data", px_group_kind(g), pat, dt);
      PX_TH_CHECK((unsigned char)recv[tot * esz] == 0x77);
      free(send);
      free(recv);
      free(ref);
    }
  }
  return 0;
}

/* every rank leaves the barrier after the last one entered it */
static int check_barrier(px_th_ctx_t *ctx, px_group_t *g) {
  int n = px_group_size(g), me = px_group_rank(g);
  for (int rep = 0; rep < 3; rep++) {
    int late = rep % n;
    if (me == late) {
      struct timespec ts = {0, 150 * 1000000};
      nanosleep(&ts, NULL);
      px_th_shared[100 + rep] = px_th_now_ms();
    }
    PX_TH_OK(px_comm_barrier(g));
    double out = px_th_now_ms();
    (void)ctx;
    /* the late rank wrote its entry time before entering */
    PX_TH_CHECK(px_th_shared[100 + rep] > 0 && out >= px_th_shared[100 + rep]);
    PX_TH_OK(px_comm_barrier(g)); /* nobody reuses the slot too early */
    if (me == 0) px_th_shared[100 + rep] = 0;
    PX_TH_OK(px_comm_barrier(g));
  }
  return 0;
}

typedef struct {
  px_comm_algo_t allgather_algo;
  int groups_mask;
  int barrier;
} coll_case_t;

static int rank_main(px_th_ctx_t *ctx) {
  const coll_case_t *cc = ctx->arg;
  static const size_t bsizes[] = {0, 1, 3, 13, 1021, 65537, 1572869};
  static const size_t gsizes[] = {0, 1, 2, 7, 251, 4099, 40009};
  px_comm_opts_t o;
  px_comm_opts_default(&o);
  o.timeout_ms = 30000;
  o.allgather_algo = cc->allgather_algo;
  px_comm_t *c = NULL;
  PX_TH_OK(px_th_comm(ctx, &o, &c));
  for (int k = 0; k < 3; k++) {
    if (!(cc->groups_mask & (1 << k))) continue;
    px_group_t *g = px_comm_group(c, (px_group_kind_t)k);
    if (!g) continue;
    if (check_bcast(ctx, g, bsizes, NSIZES(bsizes))) return 1;
    if (check_allgather(g, gsizes, NSIZES(gsizes))) return 1;
    if (check_allgatherv(g)) return 1;
  }
  /* the world barrier, only where the harness's shared slots make sense */
  if (cc->barrier && check_barrier(ctx, px_comm_group(c, PX_GROUP_WORLD))) return 1;
  px_comm_destroy(c);
  return 0;
}

static void run(int size, const int *nodes, px_comm_algo_t algo, int groups, int barrier) {
  coll_case_t cc = {algo, groups, barrier};
  assert_int_equal(px_th_run(size, nodes, rank_main, &cc, 240), 0);
}

static void test_collectives_2_ranks_1_node(void **state) {
  (void)state;
  const int nodes[] = {0, 0};
  run(2, nodes, PX_COMM_ALGO_AUTO, 7, 1);
}

static void test_collectives_3_ranks_3_nodes(void **state) {
  (void)state;
  const int nodes[] = {0, 1, 2};
  run(3, nodes, PX_COMM_ALGO_AUTO, 7, 1);
}

static void test_collectives_4_ranks_2_nodes_ring_allgather(void **state) {
  (void)state;
  const int nodes[] = {0, 0, 1, 1};
  run(4, nodes, PX_COMM_ALGO_RING, 7, 0);
}

static void test_collectives_5_ranks_2_nodes_direct_allgather(void **state) {
  (void)state;
  const int nodes[] = {1, 0, 1, 0, 1};
  run(5, nodes, PX_COMM_ALGO_DIRECT, 7, 1);
}

static void test_collectives_8_ranks_4_nodes(void **state) {
  (void)state;
  const int nodes[] = {0, 0, 1, 1, 2, 2, 3, 3};
  run(8, nodes, PX_COMM_ALGO_AUTO, 1 | 4, 1);
}

int main(int argc, char **argv) {
  px_th_init(argc, argv);
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_collectives_2_ranks_1_node),
      cmocka_unit_test(test_collectives_3_ranks_3_nodes),
      cmocka_unit_test(test_collectives_4_ranks_2_nodes_ring_allgather),
      cmocka_unit_test(test_collectives_5_ranks_2_nodes_direct_allgather),
      cmocka_unit_test(test_collectives_8_ranks_4_nodes),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
