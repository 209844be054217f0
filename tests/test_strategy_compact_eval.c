/* Compact evaluation of the consensus model end to end: H-SADMM
 * on 2 nodes x 2 real ranks (forked processes, UCX on loopback) training
 * ResNet-20 on a subset of Fashion-MNIST with 2,000 test images, once
 * evaluating the dense-shaped consensus through the training engine
 * (eval_dense, as before) and once through its compact model on the
 * inference engine. The training is the same bit for bit (iterations,
 * density, intra- and inter-node bytes, the final weights); the compact
 * model is built only while the masks move; and on the final model the
 * compact and the dense predictions disagree on at most 1 of the 2,000
 * test images (the 5 in 10,000), which the test prints, with the
 * precision the engine chose (bf16 convolutions where the CPU has AMX, the
 * close calls rerun in f32, their count printed). */
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
#include "export/compact_int.h"
#include "infer/infer_int.h"
#include "prunex/data.h"
#include "prunex/strategy.h"
#include "px_test_util.h"

#define NTEST 2000
#define ITERATIONS 6

static char dir[256];

static int setup(void **state) {
  (void)state;
  return px_test_fmnist_fixture_n(dir, sizeof dir, "px_ceval", 1024, NTEST);
}

static int teardown(void **state) {
  (void)state;
  if (dir[0]) px_th_rmdir(dir);
  return 0;
}

/* rank 0's controller: fixed penalties, the masks frozen from iteration 2 */
static px_status_t control(void *ctx, const px_iteration_t *it, px_hsadmm_decision_t *d) {
  (void)ctx;
  d->freeze = it->iteration >= 2;
  return PX_OK;
}

typedef struct {
  px_model_t *dense;
  px__infer_t *net;
  int64_t differ, seen;
} compare_t;

/* px_trainer_evaluate_with's evaluator: counts the disagreements */
static px_status_t compare_batch(void *ctx, const float *x, const int32_t *y, int32_t n,
                                 double *loss_sum, int64_t *correct) {
  (void)y;
  (void)loss_sum;
  (void)correct;
  compare_t *c = ctx;
  c->seen += n;
  return px__infer_compare(c->net, c->dense, x, n, &c->differ);
}

static int rank_main(px_th_ctx_t *ctx) {
  const int *eval_dense = ctx->arg;
  px_train_config_t tc;
  px_test_rank_train_config(&tc, dir, ctx->rank, ctx->size);
  px_trainer_t *t;
  PX_TH_OK(px_trainer_create(&tc, &t));
  px_comm_t *comm;
  PX_TH_OK(px_th_comm(ctx, NULL, &comm));
  px_strategy_config_t cfg = {0};
  cfg.kind = PX_STRATEGY_HSADMM;
  cfg.iterations = ITERATIONS;
  cfg.local_steps = 4;
  cfg.rho1 = cfg.rho2 = 1e-2;
  cfg.keep = (px_prune_keep_t){1.0, 0.5, 1.0, 0, 0, 0};
  cfg.eval_every = 2;
  cfg.calibrate_batches = 8;
  cfg.eval_dense = *eval_dense;
  px_strategy_result_t res;
  PX_TH_OK(px_strategy_run(t, comm, &cfg, control, NULL, &res));
  px_model_t *m = px_trainer_model(t);
  if (ctx->rank == 0) {
    px_th_shared[0] = res.density;
    px_th_shared[1] = (double)res.bytes_inter;
    px_th_shared[2] = (double)res.bytes_intra;
    px_th_shared[3] = res.test_accuracy;
    uint64_t h = px_test_fnv64(px_model_flat_params(m)->data, px_model_numel(m) * 4);
    px_th_shared[4] = (double)(h >> 32);
    px_th_shared[5] = (double)(h & 0xffffffffu);
    px_th_shared[6] = res.iterations;
    px_th_shared[7] = res.compact_builds;
    /* the final model (rank 0's test shard is the whole set: world size 1
     * for this count): compact against dense, image by image */
    px_train_config_t one = tc;
    one.rank = 0;
    one.world_size = 1;
    px_trainer_t *t1;
    PX_TH_OK(px_trainer_create(&one, &t1));
    px_model_t *d1 = px_trainer_model(t1);
    memcpy(px_model_flat_params(d1)->data, px_model_flat_params(m)->data,
           px_model_numel(m) * sizeof(float));
    memcpy(px_model_flat_buffers(d1)->data, px_model_flat_buffers(m)->data,
           px_tensor_numel(px_model_flat_buffers(m)) * sizeof(float));
    px__compact_t *plan;
    px_model_t *cm;
    compare_t c = {d1, NULL, 0, 0};
    PX_TH_OK(px__compact_plan(d1, 0, &plan));
    PX_TH_OK(px__compact_build(plan, d1, px_model_ops(d1), tc.batch, &cm));
    PX_TH_OK(px__infer_create(cm, px__infer_cache_batch(cm, tc.batch), 0, PX__INFER_AUTO, &c.net));
    PX_TH_OK(px__infer_load(c.net));
    px_eval_stats_t es;
    PX_TH_OK(px_trainer_evaluate_with(t1, compare_batch, &c, &es));
    px_th_shared[8] = (double)c.differ;
    px_th_shared[9] = (double)c.seen;
    px_th_shared[10] = px__infer_is_bf16(c.net);
    px_th_shared[11] = (double)px__infer_rechecked(c.net);
    px__infer_destroy(c.net);
    px_model_destroy(cm);
    px__compact_destroy(plan);
    px_trainer_destroy(t1);
  }
  px_comm_destroy(comm);
  px_trainer_destroy(t);
  return 0;
}

static int nodes[4] = {0, 0, 1, 1};

static void compact_evaluation_keeps_training_and_predictions(void **state) {
  (void)state;
  if (!dir[0]) skip();
  double dense[12], compact[12];
  int eval_dense = 1;
  assert_int_equal(px_th_run(4, nodes, rank_main, &eval_dense, 300), 0);
  for (int i = 0; i < 12; i++) dense[i] = px_th_shared[i];
  eval_dense = 0;
  assert_int_equal(px_th_run(4, nodes, rank_main, &eval_dense, 300), 0);
  for (int i = 0; i < 12; i++) compact[i] = px_th_shared[i];
  printf("dense evaluation:   density %.4f, inter %.0f, intra %.0f bytes, accuracy %.4f, %g builds\n",
         dense[0], dense[1], dense[2], dense[3], dense[7]);
  printf("compact evaluation: density %.4f, inter %.0f, intra %.0f bytes, accuracy %.4f, %g builds\n",
         compact[0], compact[1], compact[2], compact[3], compact[7]);
  printf("final model: compact (%s convolutions, %.0f images rerun in f32) and dense predictions "
         "differ on %.0f of %.0f test images\n",
         compact[10] ? "bf16" : "f32", compact[11], compact[8], compact[9]);
  /* the training path is untouched */
  assert_true(compact[6] == ITERATIONS && dense[6] == ITERATIONS);
  for (int i = 0; i < 3; i++) assert_true(compact[i] == dense[i]);
  assert_true(compact[4] == dense[4] && compact[5] == dense[5]);
  assert_true(compact[0] < 0.7);
  /* built while the masks move (iteration 1; 3 may still see the last
   * change), then reused: 3 evaluations and the final model */
  assert_true(dense[7] == 0);
  assert_true(compact[7] >= 1 && compact[7] <= 2);
  /* the same predictions */
  assert_true(compact[9] == NTEST);
  assert_true(compact[8] <= 1);
  assert_true(fabs(compact[3] - dense[3]) <= 2.0 / NTEST + 1e-12);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(compact_evaluation_keeps_training_and_predictions),
  };
  return cmocka_run_group_tests(tests, setup, teardown);
}
