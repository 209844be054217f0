/* DDP with the gradient allreduce started per bucket during the backward
 * pass: the model reports every parameter's gradient once per
 * step, last layer first; and a DDP run on 2 nodes x 2 real ranks (forked,
 * UCX on loopback) ends with the same model, bit for bit, with the overlap
 * as without it and as the staged path (which reduces after the step). */
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


static char dir[256];

static int setup(void **state) {
  (void)state;
  return px_test_fmnist_fixture(dir, sizeof dir, "px_ddp_overlap");
}

static int teardown(void **state) {
  (void)state;
  if (dir[0]) px_th_rmdir(dir);
  return 0;
}

static px_status_t trainer(int rank, int size, px_trainer_t **t) {
  px_train_config_t tc;
  px_test_rank_train_config(&tc, dir, rank, size);
  return px_trainer_create(&tc, t);
}

typedef struct {
  int calls[512];
  int order[512];
  int n;
} ready_log_t;

static px_status_t on_ready(void *ctx, px_model_t *m, int param) {
  (void)m;
  ready_log_t *l = ctx;
  if (param >= 0 && param < 512) l->calls[param]++;
  if (l->n < 512) l->order[l->n++] = param;
  return PX_OK;
}

static void test_model_reports_each_gradient_once_last_layer_first(void **state) {
  (void)state;
  if (!dir[0]) skip();
  px_trainer_t *t;
  assert_int_equal(trainer(0, 1, &t), PX_OK);
  px_model_t *m = px_trainer_model(t);
  int np = px_model_num_params(m);
  assert_true(np <= 512);
  static ready_log_t log;
  memset(&log, 0, sizeof log);
  px_model_set_grad_ready(m, on_ready, &log);
  px_epoch_stats_t es;
  assert_int_equal(px_trainer_steps(t, 2, &es), PX_OK);
  assert_int_equal(log.n, 2 * np);
  for (int i = 0; i < np; i++) assert_int_equal(log.calls[i], 2);
  /* the classifier's gradients come first, the stem's conv last */
  assert_true(log.order[0] >= np - 2);
  assert_int_equal(log.order[np - 1], 0);
  px_model_set_grad_ready(m, NULL, NULL);
  px_trainer_destroy(t);
}

typedef struct {
  int no_overlap;
  int stage_host;
  size_t bucket_bytes;
} scenario_t;

static int rank_main(px_th_ctx_t *ctx) {
  const scenario_t *sc = ctx->arg;
  px_trainer_t *t;
  PX_TH_OK(trainer(ctx->rank, ctx->size, &t));
  px_comm_t *comm;
  PX_TH_OK(px_th_comm(ctx, NULL, &comm));
  px_strategy_config_t cfg = {0};
  cfg.kind = PX_STRATEGY_DDP;
  cfg.iterations = 2;
  cfg.local_steps = 4;
  cfg.eval_every = 2;
  cfg.bucket_bytes = sc->bucket_bytes;
  cfg.ddp_no_overlap = sc->no_overlap;
  cfg.stage_host = sc->stage_host;
  px_strategy_result_t res;
  PX_TH_OK(px_strategy_run(t, comm, &cfg, NULL, NULL, &res));
  px_model_t *m = px_trainer_model(t);
  uint64_t mine = px_test_fnv64(px_model_flat_params(m)->data, px_model_numel(m) * 4);
  uint64_t all[PX_TH_MAX_RANKS];
  PX_TH_OK(px_comm_allgather(px_comm_group(comm, PX_GROUP_WORLD), &mine, all, 8, PX_COMM_U8));
  for (int r = 0; r < ctx->size; r++) PX_TH_CHECK(all[r] == mine);
  if (ctx->rank == 0) {
    px_th_shared[0] = (double)(mine >> 32);
    px_th_shared[1] = (double)(mine & 0xffffffffu);
    px_th_shared[2] = (double)res.bytes_inter;
  }
  px_comm_destroy(comm);
  px_trainer_destroy(t);
  return 0;
}

static void run(const scenario_t *sc, uint64_t *hash) {
  static int nodes[4] = {0, 0, 1, 1};
  assert_int_equal(px_th_run(4, nodes, rank_main, sc, 240), 0);
  *hash = ((uint64_t)px_th_shared[0] << 32) | (uint64_t)px_th_shared[1];
}

static void test_overlap_gives_the_same_model(void **state) {
  (void)state;
  if (!dir[0]) skip();
  /* 64 KiB buckets: ResNet-20's 1.1 MB of gradients in many buckets, most
   * of them started while the backward pass runs */
  scenario_t ovl = {0, 0, 64 << 10}, off = {1, 0, 64 << 10}, staged = {0, 1, 64 << 10};
  uint64_t a, b, c;
  run(&ovl, &a);
  run(&off, &b);
  run(&staged, &c);
  printf("final model hash: overlap %016llx, after the step %016llx, staged %016llx\n",
         (unsigned long long)a, (unsigned long long)b, (unsigned long long)c);
  assert_true(a == b);
  assert_true(a == c);
  /* the default buckets (1 MiB first, then 32 MiB) too */
  scenario_t d1 = {0, 0, 0}, d2 = {1, 0, 0};
  run(&d1, &a);
  run(&d2, &b);
  assert_true(a == b);
}

int main(int argc, char **argv) {
  px_th_init(argc, argv);
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_model_reports_each_gradient_once_last_layer_first),
      cmocka_unit_test(test_overlap_gives_the_same_model),
  };
  return cmocka_run_group_tests(tests, setup, teardown);
}
