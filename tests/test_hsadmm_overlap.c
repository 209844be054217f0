/* comm.overlap: the leaders' exchange of an H-SADMM round sent
 * while the next local phase runs. With real ranks (forked, UCX on
 * loopback, 2 nodes x 2): a round's sync leaves the exchange pending and z
 * unchanged; the next sync takes it first; every rank holds
 * bitwise-identical z whenever it is taken; and since a local phase that
 * reads only its proximal targets (z_i and u, exact under overlap) sees the
 * same inputs, the whole run ends bit for bit where the run without overlap
 * ends, across a freeze, a drained round in the middle and the last round.
 * The job spec accepts comm.overlap only for the exact exchange of hsadmm. */
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
enum { ROUNDS = 14, FREEZE_AT = 5, DRAIN_AT = 8 };

typedef struct {
  int overlap;
  double z_plain[ROUNDS]; /* overlapped run: z after each round of the plain run */
} scenario_t;

static double target(int r, int j) {
  return px_th_val(31, 0, (size_t)j) + 0.05 * px_th_val(32, r, (size_t)j);
}

/* Freezes the masks after round FREEZE_AT, changes nothing else. */
static px_status_t freeze_once(void *ctx, const px_hsadmm_round_t *round, px_hsadmm_decision_t *d) {
  (void)ctx;
  if (round->iteration == FREEZE_AT) d->freeze = 1;
  return PX_OK;
}

static double z_hash(px_hsadmm_t *h) {
  return (double)((px_test_fnv64(px_hsadmm_z(h, 0), DW * 4) ^ px_test_fnv64(px_hsadmm_z(h, 1), DD * 4)) >> 12);
}

static int z_equal_everywhere(px_hsadmm_t *h, px_group_t *world, int size) {
  uint64_t mine = px_test_fnv64(px_hsadmm_z(h, 0), DW * 4) ^ px_test_fnv64(px_hsadmm_z(h, 1), DD * 4);
  uint64_t all[PX_TH_MAX_RANKS];
  if (px_comm_allgather(world, &mine, all, 8, PX_COMM_U8) != PX_OK) return 0;
  for (int r = 0; r < size; r++)
    if (all[r] != mine) return 0;
  return 1;
}

static int rank_main(px_th_ctx_t *ctx) {
  const scenario_t *sc = ctx->arg;
  px_comm_t *comm;
  PX_TH_OK(px_th_comm(ctx, NULL, &comm));
  static float theta[D];
  for (int j = 0; j < D; j++) theta[j] = (float)target(ctx->rank, j);
  px_hsadmm_param_t params[2] = {
      {"w", theta, DW, 1, {6, 5, 3, 3}, 0, 0, 0},
      {"b", theta + DW, DD, 0, {0, 0, 0, 0}, 0, 0, 0},
  };
  /* small buckets: the exchange has several requests in flight */
  px_hsadmm_config_t cfg = {0, 1.0, 0.5, LAMBDA, {1.0, 0.6, 1.0, 0, 0, 0}, 1024};
  px_hsadmm_t *h;
  PX_TH_OK(px_hsadmm_create(comm, params, 2, &cfg, &h));
  PX_TH_OK(px_hsadmm_set_overlap(h, sc->overlap));
  px_group_t *world = px_comm_group(comm, PX_GROUP_WORLD);
  for (int k = 0; k < ROUNDS; k++) {
    /* the local phase begins: the previous exchange goes out */
    px_hsadmm_set_drain(h, k == DRAIN_AT || k == ROUNDS - 1);
    PX_TH_OK(px_hsadmm_overlap_start(h));
    /* exact local solve from the proximal targets only */
    px_toy_local_solve(h, theta, DW, DD, target, ctx->rank);
    px_hsadmm_round_t *rd;
    PX_TH_OK(px_hsadmm_sync(h, &rd));
    int deferred = sc->overlap && k != DRAIN_AT && k != ROUNDS - 1;
    PX_TH_CHECK(px_hsadmm_pending(h) == deferred);
    /* z: the previous round's while this round's exchange is pending */
    if (!sc->overlap) px_th_shared[8 + k] = z_hash(h);
    else if (!deferred) PX_TH_CHECK(z_hash(h) == sc->z_plain[k]);
    else if (k > 0) PX_TH_CHECK(z_hash(h) == sc->z_plain[k - 1]);
    PX_TH_CHECK(z_equal_everywhere(h, world, ctx->size));
    int stop;
    PX_TH_OK(px_hsadmm_decide(h, freeze_once, NULL, &stop));
    PX_TH_CHECK(!stop);
  }
  PX_TH_CHECK(!px_hsadmm_pending(h));
  PX_TH_CHECK(px_hsadmm_frozen(h));
  px_th_shared[ctx->rank] = px_toy_state_hash(h, DW, DD);
  px_hsadmm_destroy(h);
  px_comm_destroy(comm);
  return 0;
}

static void run(const scenario_t *sc, double *hashes, double *z_per_round) {
  int two_by_two[4] = {0, 0, 1, 1};
  assert_int_equal(px_th_run(4, two_by_two, rank_main, sc, 240), 0);
  for (int r = 0; r < 4; r++) hashes[r] = px_th_shared[r];
  for (int k = 0; z_per_round && k < ROUNDS; k++) z_per_round[k] = px_th_shared[8 + k];
}

static void test_overlapped_run_ends_bitwise_where_the_plain_one_does(void **state) {
  (void)state;
  double plain[4], over[4];
  static scenario_t off = {0, {0}}, on = {1, {0}};
  run(&off, plain, on.z_plain);
  run(&on, over, NULL);
  for (int r = 0; r < 4; r++) {
    printf("rank %d: state hash plain %.0f, overlapped %.0f\n", r, plain[r], over[r]);
    assert_true(plain[r] == over[r]);
  }
}

/* overlap with a quantized or a flat exchange is refused before any round */
static int refuse_main(px_th_ctx_t *ctx) {
  px_comm_t *comm;
  PX_TH_OK(px_th_comm(ctx, NULL, &comm));
  static float theta[D];
  px_hsadmm_param_t params[1] = {{"b", theta, DD, 0, {0, 0, 0, 0}, 0, 0, 0}};
  for (int flat = 0; flat < 2; flat++) {
    px_hsadmm_config_t cfg = {flat, 1.0, 1.0, LAMBDA, {1.0, 1.0, 1.0, 0, 0, 0}, 0};
    px_hsadmm_t *h;
    PX_TH_OK(px_hsadmm_create(comm, params, 1, &cfg, &h));
    if (!flat) PX_TH_OK(px_hsadmm_set_quantize(h, 8, 1));
    PX_TH_CHECK(px_hsadmm_set_overlap(h, 1) == PX_ERR_INVALID);
    PX_TH_OK(px_hsadmm_set_overlap(h, 0));
    px_hsadmm_destroy(h);
  }
  px_comm_destroy(comm);
  return 0;
}

static void test_rejects_quantized_or_flat(void **state) {
  (void)state;
  int two[2] = {0, 1};
  assert_int_equal(px_th_run(2, two, refuse_main, NULL, 60), 0);
}

static void test_jobspec_field(void **state) {
  (void)state;
  assert_true(px_test_spec_outcome("strategy: hsadmm\ncomm:\n  overlap: true\n", NULL));
  assert_true(px_test_spec_outcome("strategy: hsadmm\ncomm:\n  overlap: false\n", NULL));
  assert_true(px_test_spec_outcome("strategy: ddp\ncomm:\n  overlap: false\n", NULL));
  assert_true(px_test_spec_outcome("strategy: ddp\ncomm:\n  overlap: true\n", "comm.overlap"));
  assert_true(
      px_test_spec_outcome("strategy: hsadmm-flat\ncomm:\n  overlap: true\n", "comm.overlap"));
  assert_true(px_test_spec_outcome("strategy: hsadmm\ncomm:\n  overlap: true\n  quantize: 8\n",
                                   "comm.overlap"));
  assert_true(px_test_spec_outcome("strategy: hsadmm\ncomm:\n  overlap: maybe\n", "comm.overlap"));
}

int main(int argc, char **argv) {
  px_th_init(argc, argv);
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_overlapped_run_ends_bitwise_where_the_plain_one_does),
      cmocka_unit_test(test_rejects_quantized_or_flat),
      cmocka_unit_test(test_jobspec_field),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
