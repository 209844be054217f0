/* Allreduce against a serial reference: every op (sum, avg, max), dtype
 * (f32, f64, u8) and group (world, intra, inter) on 2 to 8 forked ranks
 * arranged as 1 to 4 nodes, for sizes 0, 1, primes, both sides of the
 * small/large switch and larger; both algorithms forced on sizes they would
 * not get by default (ring with fewer elements than ranks, recursive doubling
 * on megabytes); u8 max as the OR of 0/1 masks; and results that are
 * bit-identical on every rank for arbitrary floats. The test data are exact
 * in floating point (multiples of 1/1024), so results are compared bit for
 * bit with the reference. */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "comm_harness.h"
#include "px_test_util.h"
#include "prunex/comm_internal.h"

typedef struct {
  px_comm_algo_t algo;
  const size_t *sizes;
  int nsizes;
  int groups_mask;  /* bit k: group kind k */
  int dtypes_mask;  /* bit dt */
  int ops_mask;     /* bit op */
} ar_case_t;

static const px_comm_dtype_t k_dtypes[] = {PX_COMM_F32, PX_COMM_F64, PX_COMM_U8};
static const px_comm_op_t k_ops[] = {PX_COMM_SUM, PX_COMM_AVG, PX_COMM_MAX};

/* reference: element-wise op over the group's members, in group order */
static void reference(void *out, size_t count, px_comm_dtype_t dt, px_comm_op_t op, uint64_t seed,
                      const px_group_t *g) {
  int n = px_group_size(g);
  for (size_t i = 0; i < count; i++) {
    if (dt == PX_COMM_U8) {
      uint8_t acc = 0;
      for (int k = 0; k < n; k++) {
        int wr = px_group_world_rank(g, k);
        uint8_t v = op == PX_COMM_MAX ? (uint8_t)(px_th_u8(seed, wr, i) % 7 == 0) : px_th_u8(seed, wr, i);
        if (op == PX_COMM_MAX) acc = (uint8_t)(acc | v); /* max of 0/1 masks = OR */
        else acc = (uint8_t)(acc + v);
      }
      ((uint8_t *)out)[i] = acc;
    } else {
      double acc = op == PX_COMM_MAX ? -INFINITY : 0.0;
      for (int k = 0; k < n; k++) {
        double v = px_th_val(seed, px_group_world_rank(g, k), i);
        acc = op == PX_COMM_MAX ? (v > acc ? v : acc) : acc + v;
      }
      if (dt == PX_COMM_F32) {
        float f = (float)acc;
        if (op == PX_COMM_AVG) f = f / (float)n;
        ((float *)out)[i] = f;
      } else {
        if (op == PX_COMM_AVG) acc = acc / (double)n;
        ((double *)out)[i] = acc;
      }
    }
  }
}

static int run_case(px_th_ctx_t *ctx, px_comm_t *c, const ar_case_t *ac) {
  size_t maxn = 0;
  for (int s = 0; s < ac->nsizes; s++)
    if (ac->sizes[s] > maxn) maxn = ac->sizes[s];
  size_t cap = (maxn + 1) * 8;
  char *send = malloc(cap), *recv = malloc(cap), *ref = malloc(cap);
  PX_TH_CHECK(send && recv && ref);
  for (int k = 0; k < 3; k++) {
    if (!(ac->groups_mask & (1 << k))) continue;
    px_group_t *g = px_comm_group(c, (px_group_kind_t)k);
    if (!g) continue; /* not a leader: no inter group */
    for (int d = 0; d < 3; d++) {
      px_comm_dtype_t dt = k_dtypes[d];
      if (!(ac->dtypes_mask & (1 << dt))) continue;
      for (int o = 0; o < 3; o++) {
        px_comm_op_t op = k_ops[o];
        if (!(ac->ops_mask & (1 << op))) continue;
        if (op == PX_COMM_AVG && dt == PX_COMM_U8) continue;
        for (int s = 0; s < ac->nsizes; s++) {
          size_t n = ac->sizes[s], esz = px_comm_dtype_size(dt);
          uint64_t seed = 1000003u * (uint64_t)k + 7919u * (uint64_t)dt + 31u * (uint64_t)op + n;
          px_th_fill(send, n, dt, seed, ctx->rank, op == PX_COMM_MAX);
          memset(recv, 0xA5, n * esz + 8);
          int in_place = s & 1;
          if (in_place) memcpy(recv, send, n * esz);
          px_status_t st = px_comm_allreduce(g, in_place ? recv : send, recv, n, dt, op);
          if (st != PX_OK)
            PX_TH_FAIL("allreduce group %d dt %d op %d n %zu: %s: %s", k, dt, op, n,
                       px_status_name(st), px_last_error());
          reference(ref, n, dt, op, seed, g);
          if (memcmp(recv, ref, n * esz) != 0) {
            size_t bad = 0;
            while (bad < n * esz && recv[bad] == ref[bad]) bad++;
            PX_TH_FAIL("allreduce group %d dt %d op %d n %zu%s: wrong result at byte %zu", k, dt,
                       op, n, in_place ? " in place" : "", bad);
          }
          PX_TH_CHECK((unsigned char)recv[n * esz] == 0xA5); /* nothing written past the end */
        }
      }
    }
  }
  free(send);
  free(recv);
  free(ref);
  return 0;
}

typedef struct {
  const ar_case_t *cases;
  int ncases;
} ar_plan_t;

static int rank_main(px_th_ctx_t *ctx) {
  const ar_plan_t *plan = ctx->arg;
  for (int i = 0; i < plan->ncases; i++) {
    px_comm_opts_t o;
    px_comm_opts_default(&o);
    o.timeout_ms = 30000;
    o.allreduce_algo = plan->cases[i].algo;
    px_comm_t *c = NULL;
    PX_TH_OK(px_th_comm(ctx, &o, &c));
    int rc = run_case(ctx, c, &plan->cases[i]);
    px_comm_destroy(c);
    if (rc) return rc;
  }
  return 0;
}

/* sizes: empty, tiny, primes, both sides of the 32 KiB switch (8192 f32 /
 * 4096 f64 / 32768 u8), and larger */
static const size_t k_sizes[] = {0, 1, 2, 3, 7, 13, 127, 1021, 4093, 4099, 8191, 8192, 8209, 32771, 65537};
static const size_t k_small_sizes[] = {0, 1, 2, 3, 5, 7, 11, 13, 127, 1021};
static const size_t k_large_sizes[] = {262147, 1048583};

#define NSIZES(a) ((int)(sizeof(a) / sizeof((a)[0])))

static void run_plan(int size, const int *node_of, const ar_case_t *cases, int ncases) {
  ar_plan_t plan = {cases, ncases};
  assert_int_equal(px_th_run(size, node_of, rank_main, &plan, 240), 0);
}

static const ar_case_t k_full[] = {
    {PX_COMM_ALGO_AUTO, k_sizes, NSIZES(k_sizes), 7, 7, 7},
};

static void test_allreduce_2_ranks_1_node(void **state) {
  (void)state;
  const int nodes[] = {0, 0};
  run_plan(2, nodes, k_full, 1);
}

static void test_allreduce_3_ranks_3_nodes(void **state) {
  (void)state;
  const int nodes[] = {0, 1, 2};
  run_plan(3, nodes, k_full, 1);
}

static void test_allreduce_4_ranks_2_nodes(void **state) {
  (void)state;
  const int nodes[] = {0, 0, 1, 1};
  run_plan(4, nodes, k_full, 1);
}

static void test_allreduce_5_ranks_interleaved_nodes(void **state) {
  (void)state;
  const int nodes[] = {0, 1, 0, 1, 0};
  run_plan(5, nodes, k_full, 1);
}

static void test_allreduce_8_ranks_4_nodes(void **state) {
  (void)state;
  const int nodes[] = {0, 0, 1, 1, 2, 2, 3, 3};
  run_plan(8, nodes, k_full, 1);
}

/* the ring with fewer elements than ranks (empty chunks) and recursive
 * doubling on megabytes, on a non-power-of-two world */
static void test_allreduce_forced_algorithms_6_ranks(void **state) {
  (void)state;
  const int nodes[] = {0, 0, 0, 1, 2, 3};
  static const ar_case_t cases[] = {
      {PX_COMM_ALGO_RING, k_small_sizes, NSIZES(k_small_sizes), 7, 7, 7},
      {PX_COMM_ALGO_RD, k_large_sizes, NSIZES(k_large_sizes), 1, 1 << PX_COMM_F32, 7},
  };
  run_plan(6, nodes, cases, 2);
}

/* large messages through the pipelined ring: many segments per chunk */
static void test_allreduce_large_ring_7_ranks(void **state) {
  (void)state;
  const int nodes[] = {0, 0, 0, 0, 0, 0, 0};
  static const size_t sizes[] = {4194319};
  static const ar_case_t cases[] = {
      {PX_COMM_ALGO_AUTO, sizes, 1, 1, (1 << PX_COMM_F32) | (1 << PX_COMM_U8), 5},
  };
  run_plan(7, nodes, cases, 1);
}

/* arbitrary floats: close to the double-precision reference, and the same
 * bits on every rank (each element is reduced in one fixed order) */
static int rank_random(px_th_ctx_t *ctx) {
  static const size_t sizes[] = {5, 1000, 100003};
  for (int a = 0; a < 2; a++) {
    px_comm_opts_t o;
    px_comm_opts_default(&o);
    o.allreduce_algo = a ? PX_COMM_ALGO_RING : PX_COMM_ALGO_RD;
    px_comm_t *c = NULL;
    PX_TH_OK(px_th_comm(ctx, &o, &c));
    px_group_t *w = px_comm_group(c, PX_GROUP_WORLD);
    for (int s = 0; s < 3; s++) {
      size_t n = sizes[s];
      float *x = malloc(n * sizeof *x);
      PX_TH_CHECK(x != NULL);
      px_test_rng_t rng;
      px_test_rng_seed(&rng, 77 + (uint64_t)ctx->rank);
      px_test_fill_normal(&rng, x, n);
      PX_TH_OK(px_comm_allreduce(w, x, x, n, PX_COMM_F32, PX_COMM_SUM));
      for (size_t i = 0; i < n; i++) {
        double ref = 0;
        for (int r = 0; r < ctx->size; r++) {
          px_test_rng_t q;
          px_test_rng_seed(&q, 77 + (uint64_t)r);
          float v = 0;
          for (size_t j = 0; j <= i; j++) v = (float)px_test_rng_normal(&q);
          ref += v;
          if (i > 64) break; /* spot-check the first elements only (cost) */
        }
        if (i > 64) break;
        PX_TH_CHECK(fabs(x[i] - ref) <= 1e-5 * (1 + fabs(ref)));
      }
      uint64_t h = 1469598103934665603ull;
      for (size_t i = 0; i < n * sizeof *x; i++) h = (h ^ ((unsigned char *)x)[i]) * 1099511628211ull;
      uint64_t all[PX_TH_MAX_RANKS];
      PX_TH_OK(px_comm_allgather(w, &h, all, 8, PX_COMM_U8));
      for (int r = 0; r < ctx->size; r++) PX_TH_CHECK(all[r] == h);
      free(x);
    }
    px_comm_destroy(c);
  }
  return 0;
}

static void test_allreduce_bitwise_identical_on_all_ranks(void **state) {
  (void)state;
  const int nodes[] = {0, 0, 1, 1, 2};
  assert_int_equal(px_th_run(5, nodes, rank_random, NULL, 120), 0);
}

int main(int argc, char **argv) {
  px_th_init(argc, argv);
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_allreduce_2_ranks_1_node),
      cmocka_unit_test(test_allreduce_3_ranks_3_nodes),
      cmocka_unit_test(test_allreduce_4_ranks_2_nodes),
      cmocka_unit_test(test_allreduce_5_ranks_interleaved_nodes),
      cmocka_unit_test(test_allreduce_8_ranks_4_nodes),
      cmocka_unit_test(test_allreduce_forced_algorithms_6_ranks),
      cmocka_unit_test(test_allreduce_large_ring_7_ranks),
      cmocka_unit_test(test_allreduce_bitwise_identical_on_all_ranks),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
