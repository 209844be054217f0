/* comm.compress lossless: the leaders' exact exchange of H-SADMM coded
 * against each leader's last payload (lossless.h, hsadmm_code.c). With real
 * ranks (forked, UCX on loopback):
 *   - 2 nodes x 2: every rank ends bit for bit where the plain exchange
 *     ends, through the rounds where the masks move, a freeze and the rounds
 *     after it, while the leaders move fewer bytes; the dense-equivalent
 *     traffic stays what the plain exchange reports;
 *   - 3 nodes x 1: every rank holds the same z after every round, and z is
 *     the plain run's up to the order of the sum;
 *   - compress with quantize, overlap, flat mode or after a round is
 *     refused, and so are quantize and overlap after it; the job spec takes
 *     comm.compress for strategy hsadmm only. */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "comm_harness.h"
#include "hsadmm_toy.h"
#include "prunex/comm_internal.h"
#include "prunex/hsadmm.h"
#include "prunex/hsadmm_internal.h"
#include "prunex/jobspec.h"
#include "px_test_util.h"

enum { DW = 6 * 5 * 3 * 3, DD = 700, D = DW + DD }; /* conv [6, 5, 3, 3] and a dense tail */
#define LAMBDA 0.1
enum { ROUNDS = 12, FREEZE_AT = 5 };
/* px_th_shared: [0, 16) state hashes per rank, 16 inter bytes, 17 dense
 * inter bytes, 18 differing-z rounds, [64, 64 + D) rank 0's final z */
enum { SH_BYTES = 16, SH_DENSE = 17, SH_DIFFER = 18, SH_Z = 64 };

static double target(int r, int j) {
  return px_th_val(41, 0, (size_t)j) + 0.05 * px_th_val(42, r, (size_t)j);
}

static px_status_t freeze_once(void *ctx, const px_hsadmm_round_t *round, px_hsadmm_decision_t *d) {
  (void)ctx;
  if (round->iteration == FREEZE_AT) d->freeze = 1;
  return PX_OK;
}

static uint64_t z_fnv(px_hsadmm_t *h) {
  return px_test_fnv64(px_hsadmm_z(h, 0), DW * 4) ^ px_test_fnv64(px_hsadmm_z(h, 1), DD * 4);
}

static int rank_main(px_th_ctx_t *ctx) {
  const int *lossless = ctx->arg;
  px_comm_t *comm;
  PX_TH_OK(px_th_comm(ctx, NULL, &comm));
  static float theta[D];
  for (int j = 0; j < D; j++) theta[j] = (float)target(ctx->rank, j);
  px_hsadmm_param_t params[2] = {
      {"w", theta, DW, 1, {6, 5, 3, 3}, 0, 0, 0},
      {"b", theta + DW, DD, 0, {0, 0, 0, 0}, 0, 0, 0},
  };
  px_hsadmm_config_t cfg = {0, 1.0, 0.5, LAMBDA, {1.0, 0.6, 1.0, 0, 0, 0}, 1024};
  px_hsadmm_t *h;
  PX_TH_OK(px_hsadmm_create(comm, params, 2, &cfg, &h));
  PX_TH_OK(px_hsadmm_set_compress(h, *lossless));
  px_group_t *world = px_comm_group(comm, PX_GROUP_WORLD);
  double bytes = 0, dense = 0;
  for (int k = 0; k < ROUNDS; k++) {
    px_toy_local_solve(h, theta, DW, DD, target, ctx->rank);
    px_hsadmm_round_t *rd;
    PX_TH_OK(px_hsadmm_sync(h, &rd));
    bytes += (double)rd->bytes_inter;
    dense += (double)rd->bytes_inter_dense;
    uint64_t mine = z_fnv(h), all[PX_TH_MAX_RANKS];
    PX_TH_OK(px_comm_allgather(world, &mine, all, 8, PX_COMM_U8));
    for (int r = 0; r < ctx->size; r++)
      if (all[r] != mine) px_th_shared[SH_DIFFER] += 1;
    int stop;
    PX_TH_OK(px_hsadmm_decide(h, freeze_once, NULL, &stop));
    PX_TH_CHECK(!stop);
  }
  PX_TH_CHECK(px_hsadmm_frozen(h));
  px_th_shared[ctx->rank] = px_toy_state_hash(h, DW, DD);
  if (ctx->rank == 0) {
    px_th_shared[SH_BYTES] = bytes;
    px_th_shared[SH_DENSE] = dense;
    for (int i = 0; i < 2; i++)
      for (int j = 0; j < (i ? DD : DW); j++)
        px_th_shared[SH_Z + (i ? DW : 0) + j] = px_hsadmm_z(h, i)[j];
  }
  px_hsadmm_destroy(h);
  px_comm_destroy(comm);
  return 0;
}

typedef struct {
  double hash[PX_TH_MAX_RANKS], bytes, dense, differ, z[D];
} outcome_t;

static void run(int size, const int *node_of, int lossless, outcome_t *o) {
  assert_int_equal(px_th_run(size, node_of, rank_main, &lossless, 240), 0);
  for (int r = 0; r < size; r++) o->hash[r] = px_th_shared[r];
  o->bytes = px_th_shared[SH_BYTES];
  o->dense = px_th_shared[SH_DENSE];
  o->differ = px_th_shared[SH_DIFFER];
  for (int j = 0; j < D; j++) o->z[j] = px_th_shared[SH_Z + j];
}

static void test_two_nodes_end_bitwise_where_the_plain_run_does(void **state) {
  (void)state;
  static outcome_t plain, coded;
  int two_by_two[4] = {0, 0, 1, 1};
  run(4, two_by_two, 0, &plain);
  run(4, two_by_two, 1, &coded);
  for (int r = 0; r < 4; r++) {
    printf("rank %d: state hash plain %.0f, coded %.0f\n", r, plain.hash[r], coded.hash[r]);
    assert_true(plain.hash[r] == coded.hash[r]);
  }
  printf("inter bytes: plain %.0f, coded %.0f (%.1f%%); dense-equivalent %.0f and %.0f\n",
         plain.bytes, coded.bytes, 100.0 * coded.bytes / plain.bytes, plain.dense, coded.dense);
  assert_true(plain.differ == 0 && coded.differ == 0);
  assert_true(coded.bytes < 0.9 * plain.bytes);
  /* the payload lengths (8 bytes a leader a round) are counted as coded too */
  assert_true(fabs(coded.dense - plain.dense) < 1e-3 * plain.dense);
}

static void test_three_nodes_agree_and_match_the_plain_sum(void **state) {
  (void)state;
  static outcome_t plain, coded;
  int three[3] = {0, 1, 2};
  run(3, three, 0, &plain);
  run(3, three, 1, &coded);
  assert_true(plain.differ == 0 && coded.differ == 0);
  double worst = 0;
  for (int j = 0; j < D; j++) {
    double d = fabs(plain.z[j] - coded.z[j]) / (fabs(plain.z[j]) + 1e-3);
    if (d > worst) worst = d;
  }
  printf("3 nodes: largest relative difference of z from the plain run %.3g; inter bytes "
         "%.1f%% of the plain run's\n", worst, 100.0 * coded.bytes / plain.bytes);
  assert_true(worst < 1e-4);
}

/* compress with the quantized, overlapped or flat exchange or after a
 * round, and quantize or overlap after compress, are refused */
static int refuse_main(px_th_ctx_t *ctx) {
  px_comm_t *comm;
  PX_TH_OK(px_th_comm(ctx, NULL, &comm));
  static float theta[D];
  px_hsadmm_param_t params[1] = {{"b", theta, DD, 0, {0, 0, 0, 0}, 0, 0, 0}};
  for (int mode = 0; mode < 5; mode++) {
    px_hsadmm_config_t cfg = {mode == 2, 1.0, 1.0, LAMBDA, {1.0, 1.0, 1.0, 0, 0, 0}, 0};
    px_hsadmm_t *h;
    PX_TH_OK(px_hsadmm_create(comm, params, 1, &cfg, &h));
    if (mode == 0) PX_TH_OK(px_hsadmm_set_quantize(h, 8, 1));
    if (mode == 1) PX_TH_OK(px_hsadmm_set_overlap(h, 1));
    if (mode <= 2) PX_TH_CHECK(px_hsadmm_set_compress(h, 1) == PX_ERR_INVALID);
    if (mode == 3) {
      PX_TH_OK(px_hsadmm_set_compress(h, 1));
      PX_TH_CHECK(px_hsadmm_set_quantize(h, 8, 1) == PX_ERR_INVALID);
      PX_TH_CHECK(px_hsadmm_set_overlap(h, 1) == PX_ERR_INVALID);
    }
    if (mode == 4) {
      px_hsadmm_round_t *rd;
      PX_TH_OK(px_hsadmm_sync(h, &rd));
      PX_TH_CHECK(px_hsadmm_set_compress(h, 1) == PX_ERR_STATE);
    }
    px_hsadmm_destroy(h);
  }
  px_comm_destroy(comm);
  return 0;
}

static void test_refusals(void **state) {
  (void)state;
  int two[2] = {0, 1};
  assert_int_equal(px_th_run(2, two, refuse_main, NULL, 60), 0);
}

/* The job spec: each case's text and the field its error names (NULL: valid). */
static void test_jobspec_field(void **state) {
  (void)state;
  static const char *const cases[][2] = {
      {"strategy: hsadmm\ncomm:\n  compress: lossless\n", NULL},
      {"strategy: hsadmm\ncomm:\n  compress: none\n", NULL},
      {"strategy: ddp\ncomm:\n  compress: none\n", NULL},
      {"strategy: ddp\ncomm:\n  compress: lossless\n", "comm.compress"},
      {"strategy: hsadmm-flat\ncomm:\n  compress: lossless\n", "comm.compress"},
      {"strategy: hsadmm\ncomm:\n  compress: lossless\n  quantize: 8\n", "comm.compress"},
      {"strategy: hsadmm\ncomm:\n  compress: lossless\n  overlap: true\n", "comm.compress"},
      {"strategy: hsadmm\ncomm:\n  compress: zstd\n", "comm.compress"},
  };
  for (size_t k = 0; k < sizeof cases / sizeof cases[0]; k++)
    if (!px_test_spec_outcome(cases[k][0], cases[k][1])) fail_msg("case %zu: %s", k, cases[k][0]);
}

int main(int argc, char **argv) {
  px_th_init(argc, argv);
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_two_nodes_end_bitwise_where_the_plain_run_does),
      cmocka_unit_test(test_three_nodes_agree_and_match_the_plain_sum),
      cmocka_unit_test(test_refusals),
      cmocka_unit_test(test_jobspec_field),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
