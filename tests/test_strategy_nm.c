/* H-SADMM with the N:M set (2:4 along input channels) end to end: 2 nodes
 * x 2 real ranks (forked processes, UCX on loopback) train ResNet-20 on a
 * subset of Fashion-MNIST for a few rounds, the masks freeze half way. Every
 * rank ends with the same model; its loss goes down; every conv weight of
 * the consensus model keeps at most 2 of every 4 input channels at each
 * filter and kernel position, before and after the freeze; the packed
 * exchange sends less than dense buffers would; and the staged path (host
 * mirror and device mask buffers, forced on the CPU) gives the same model
 * bit for bit. */
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
#include "prunex/comm_internal.h"
#include "prunex/data.h"
#include "prunex/strategy.h"
#include "px_test_util.h"

#define ITERATIONS 4
#define FREEZE_AT 2

static char dir[256];

static int setup(void **state) {
  (void)state;
  return px_test_fmnist_fixture(dir, sizeof dir, "px_strategy_nm");
}

static int teardown(void **state) {
  (void)state;
  if (dir[0]) px_th_rmdir(dir);
  return 0;
}

/* Largest count of nonzeros in a block W[o, 4b..4b+3, h, w] over the conv
 * weights of the model. */
static int worst_block(px_model_t *m) {
  int worst = 0;
  for (int i = 0; i < px_model_num_params(m); i++) {
    const px_model_param_t *p = px_model_param(m, i);
    if (p->kind != PX_WEIGHT_CONV) continue;
    const float *w = p->value->data;
    int64_t co = p->value->dims[0], ci = p->value->dims[1];
    int64_t khw = p->value->dims[2] * p->value->dims[3];
    for (int64_t o = 0; o < co; o++)
      for (int64_t j = 0; j < khw; j++)
        for (int64_t b = 0; b < ci; b += 4) {
          int cnt = 0;
          for (int64_t c = b; c < b + 4 && c < ci; c++) cnt += w[(o * ci + c) * khw + j] != 0.0f;
          if (cnt > worst) worst = cnt;
        }
  }
  return worst;
}

/* rank 0's controller: fixed penalties, the freeze at FREEZE_AT */
static px_status_t control(void *ctx, const px_iteration_t *it, px_hsadmm_decision_t *d) {
  (void)ctx;
  d->freeze = it->iteration >= FREEZE_AT;
  px_th_shared[6] += it->frozen;
  return PX_OK;
}

/* rank 0 keeps the training loss of the first and the last round */
static px_status_t observe(void *ctx, const px_iteration_t *it) {
  if (*(const int *)ctx != 0) return PX_OK;
  if (it->iteration == 0) px_th_shared[7] = it->loss;
  px_th_shared[8] = it->loss;
  return PX_OK;
}

static int rank_main(px_th_ctx_t *ctx) {
  const int *stage_host = ctx->arg;
  px_train_config_t tc;
  px_test_rank_train_config(&tc, dir, ctx->rank, ctx->size);
  px_trainer_t *t;
  PX_TH_OK(px_trainer_create(&tc, &t));
  px_comm_t *comm;
  PX_TH_OK(px_th_comm(ctx, NULL, &comm));
  px_strategy_config_t cfg = {0};
  cfg.kind = PX_STRATEGY_HSADMM;
  cfg.iterations = ITERATIONS;
  cfg.stage_host = *stage_host;
  cfg.local_steps = 4;
  cfg.rho1 = cfg.rho2 = 1e-2;
  cfg.keep = (px_prune_keep_t){1.0, 1.0, 1.0, 2, 4, 0};
  cfg.eval_every = 1;
  cfg.observe = observe;
  cfg.observe_ctx = &ctx->rank;
  px_strategy_result_t res;
  PX_TH_OK(px_strategy_run(t, comm, &cfg, control, NULL, &res));
  PX_TH_CHECK(res.iterations == ITERATIONS);
  px_model_t *m = px_trainer_model(t);
  uint64_t mine = px_test_fnv64(px_model_flat_params(m)->data, px_model_numel(m) * 4);
  uint64_t all[PX_TH_MAX_RANKS];
  PX_TH_OK(px_comm_allgather(px_comm_group(comm, PX_GROUP_WORLD), &mine, all, 8, PX_COMM_U8));
  for (int r = 0; r < ctx->size; r++) PX_TH_CHECK(all[r] == mine);
  if (ctx->rank == 0) {
    px_th_shared[0] = res.density;
    px_th_shared[1] = (double)res.bytes_inter;
    px_th_shared[2] = (double)res.bytes_inter_dense;
    px_th_shared[3] = res.test_accuracy;
    px_th_shared[4] = (double)(mine >> 32);
    px_th_shared[5] = (double)(mine & 0xffffffffu);
    px_th_shared[9] = worst_block(m);
  }
  px_comm_destroy(comm);
  px_trainer_destroy(t);
  return 0;
}

static int nodes[4] = {0, 0, 1, 1};

static void run(int stage_host, double out[10]) {
  assert_int_equal(px_th_run(4, nodes, rank_main, &stage_host, 240), 0);
  for (int i = 0; i < 10; i++) out[i] = px_th_shared[i];
  printf("hsadmm 2:4%s: density %.3f, inter bytes %.0f (dense %.0f), loss %.3f -> %.3f, "
         "test accuracy %.3f, largest block %g\n",
         stage_host ? " (staged)" : "", out[0], out[1], out[2], out[7], out[8], out[3], out[9]);
}

static void test_hsadmm_nm_trains_within_the_set(void **state) {
  (void)state;
  if (!dir[0]) skip();
  double host[10], staged[10];
  run(0, host);
  assert_true(host[9] >= 1 && host[9] <= 2);          /* 2:4 in every conv block */
  assert_true(host[0] > 0.45 && host[0] < 0.6);       /* half of every conv but the c_in 1 stem */
  assert_true(host[6] == ITERATIONS - FREEZE_AT - 1); /* frozen rounds were run */
  assert_true(host[1] > 0 && host[1] < 0.8 * host[2]);
  assert_true(isfinite(host[8]) && host[8] < host[7]);
  assert_true(host[3] >= 0 && host[3] <= 1);
  run(1, staged);
  assert_true(staged[4] == host[4] && staged[5] == host[5]); /* the same model, bit for bit */
  assert_true(staged[9] <= 2);
}

int main(int argc, char **argv) {
  px_th_init(argc, argv);
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_hsadmm_nm_trains_within_the_set),
  };
  return cmocka_run_group_tests(tests, setup, teardown);
}
