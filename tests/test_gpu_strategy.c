/* The strategies on models that train on a GPU: 2 nodes x 2 real ranks
 * (forked processes) share GPU 0, so NCCL cannot run and the data plane is
 * UCX through the host mirrors of the staged path (strategy.c). Each run
 * finishes on every rank with the same final model (bitwise, read back from
 * the device), H-SADMM keeps about half the channels and sends fewer
 * inter-node bytes than dense synchronisation, and the masked local steps
 * after the freeze keep pruned groups at zero on the device. H-SADMM runs its
 * device-state round there (z, z_i, u, v on the GPU, pack/expand and the
 * projection on the device, only the packed buffer through the host), and
 * gives the same final model, bit for bit, as the staged host round
 * (hsadmm_state 1; the controller here reads no residual, the one figure
 * the two sum in another order). The comparison runs the job twice, so the
 * convolutions take cuDNN's deterministic algorithms (PX_CUDNN_DETERMINISTIC:
 * the timed ones vary from run to run, and some add with atomics).
 *
 * Skips, saying why, without CUDA or a GPU (px_test_gpu_ready probes in a
 * child process: CUDA does not survive fork, and the ranks are forked). */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cmocka.h>

#include "comm_harness.h"
#include "prunex/comm_internal.h"
#include "prunex/cuda.h"
#include "prunex/strategy.h"
#include "px_test_util.h"

#define FMNIST "/usr/share/datasets/fashion-mnist"

static char dir[256];
static int setup(void **state) {
  (void)state;
  return px_test_fmnist_fixture(dir, sizeof dir, "px_gpu_strategy");
}

static int teardown(void **state) {
  (void)state;
  if (dir[0]) px_th_rmdir(dir);
  return 0;
}

typedef struct {
  px_strategy_kind_t kind;
  double channel_keep;
  int iterations;
  int freeze_at; /* > 0: the controller freezes the masks at this iteration */
  int hsadmm_state; /* px_strategy_config_t.hsadmm_state */
  double mac_keep;  /* px_strategy_config_t.mac_keep (0: channel_keep as given) */
} scenario_t;

static px_status_t control(void *ctx, const px_iteration_t *it, px_hsadmm_decision_t *d) {
  const scenario_t *sc = ctx;
  d->freeze = sc->freeze_at > 0 && it->iteration >= sc->freeze_at;
  px_th_shared[5] += it->frozen;
  return PX_OK;
}

/* Zero groups of the final model's pruned conv weights, counted on the
 * host copy: every filter with mask 0 must be exactly zero. */
static int pruned_filters_are_zero(px_model_t *m, const float *w) {
  size_t off = 0;
  int zero_filters = 0;
  for (int i = 0; i < px_model_num_params(m); i++) {
    const px_model_param_t *p = px_model_param(m, i);
    size_t n = px_tensor_numel(p->value);
    if (p->kind == PX_WEIGHT_CONV) {
      size_t per = n / (size_t)p->value->dims[0];
      for (int64_t o = 0; o < p->value->dims[0]; o++) {
        int all = 1;
        for (size_t j = 0; j < per && all; j++) all = w[off + (size_t)o * per + j] == 0.0f;
        zero_filters += all;
      }
    }
    off += n;
  }
  return zero_filters;
}

/* A MAC budget on the device model: the keep and count the CPU model of
 * the same graph gives (test_mac_budget: 0.46875 and 19,653,248 at half
 * of resnet20 on 1 x 32 x 32), and the final model's coupled producers
 * keep that many nonzero filters. */
static int budget_kept(px_model_t *m, const float *w, double mac_keep) {
  int np = px_model_num_params(m), ok = 1;
  px_hsadmm_param_t *hp = calloc((size_t)np, sizeof *hp);
  px_strategy_hsadmm_params(m, NULL, 0, hp);
  double keep = 0, cpu_keep = 0;
  uint64_t macs = 0, cpu_macs = 0;
  ok &= px_strategy_mac_keep(m, hp, mac_keep, &keep, &macs) == PX_OK;
  px_ops_t *ops;
  px_model_t *cm;
  px_model_config_t cfg = *px_model_config(m);
  ok &= px_ops_create(px_device_cpu(), 1, &ops) == PX_OK && px_model_create(ops, &cfg, &cm) == PX_OK;
  if (ok) {
    px_hsadmm_param_t *cp = calloc((size_t)np, sizeof *cp);
    px_strategy_hsadmm_params(cm, NULL, 0, cp);
    ok &= px_strategy_mac_keep(cm, cp, mac_keep, &cpu_keep, &cpu_macs) == PX_OK;
    free(cp);
    px_model_destroy(cm);
    px_ops_destroy(ops);
  }
  printf("mac_keep %g on the device model: keep %.6g, %llu MACs (CPU model: %.6g, %llu)\n",
         mac_keep, keep, (unsigned long long)macs, cpu_keep, (unsigned long long)cpu_macs);
  ok &= keep == cpu_keep && macs == cpu_macs && macs <= mac_keep * (double)px_model_macs(m);
  size_t off = 0;
  for (int i = 0; i < np; i++) {
    const px_tensor_t *v = px_model_param(m, i)->value;
    if (hp[i].prunable && hp[i].has_consumer && !hp[i].follower) {
      size_t per = px_tensor_numel(v) / (size_t)v->dims[0], kept = 0;
      for (int64_t o = 0; o < v->dims[0]; o++) {
        int any = 0;
        for (size_t j = 0; j < per && !any; j++) any = w[off + (size_t)o * per + j] != 0.0f;
        kept += (size_t)any;
      }
      ok &= kept == px_prune_keep_count(keep, (size_t)v->dims[0]);
    }
    off += px_tensor_numel(v);
  }
  free(hp);
  return ok;
}

static int rank_main(px_th_ctx_t *ctx) {
  const scenario_t *sc = ctx->arg;
  px_train_config_t tc;
  px_test_rank_train_config(&tc, dir, ctx->rank, ctx->size);
  tc.device = px_device_cuda(0);
  px_trainer_t *t;
  PX_TH_OK(px_trainer_create(&tc, &t));
  px_comm_t *comm;
  PX_TH_OK(px_th_comm(ctx, NULL, &comm));
  PX_TH_CHECK(!px_group_nccl(px_comm_group(comm, PX_GROUP_WORLD)));
  px_strategy_config_t cfg = {0};
  cfg.kind = sc->kind;
  cfg.iterations = sc->iterations;
  cfg.local_steps = 3;
  cfg.rho1 = cfg.rho2 = 1e-2;
  cfg.keep = (px_prune_keep_t){1.0, sc->channel_keep, 1.0, 0, 0, 0};
  cfg.topk_ratio = 0.01;
  cfg.eval_every = 1;
  cfg.hsadmm_state = sc->hsadmm_state;
  cfg.mac_keep = sc->mac_keep;
  px_strategy_result_t res;
  PX_TH_OK(px_strategy_run(t, comm, &cfg, control, (void *)sc, &res));
  PX_TH_CHECK(res.iterations == sc->iterations);
  PX_TH_CHECK(res.test_accuracy >= 0 && res.test_accuracy <= 1);
  px_model_t *m = px_trainer_model(t);
  size_t numel = px_model_numel(m);
  float *w = malloc(numel * sizeof(float));
  PX_TH_CHECK(w != NULL);
  PX_TH_OK(px_tensor_copy_to_host(px_model_flat_params(m), w, numel * sizeof(float)));
  for (size_t i = 0; i < numel; i++) PX_TH_CHECK(isfinite(w[i]));
  uint64_t mine[2] = {px_test_fnv64(w, numel * 4),
                      px_test_fnv64(&res.test_accuracy, sizeof(double))};
  uint64_t all[2 * PX_TH_MAX_RANKS];
  PX_TH_OK(px_comm_allgather(px_comm_group(comm, PX_GROUP_WORLD), mine, all, 16, PX_COMM_U8));
  for (int r = 0; r < ctx->size; r++)
    PX_TH_CHECK(all[2 * r] == mine[0] && all[2 * r + 1] == mine[1]);
  if (ctx->rank == 0) {
    px_th_shared[0] = res.density;
    px_th_shared[1] = (double)res.bytes_inter;
    px_th_shared[2] = (double)res.bytes_inter_dense;
    px_th_shared[3] = res.test_accuracy;
    px_th_shared[4] = pruned_filters_are_zero(m, w);
    px_th_shared[6] = (double)(mine[0] >> 32);
    px_th_shared[7] = (double)(mine[0] & 0xffffffffu);
    if (sc->mac_keep > 0) PX_TH_CHECK(budget_kept(m, w, sc->mac_keep));
  }
  free(w);
  px_comm_destroy(comm);
  px_trainer_destroy(t);
  return 0;
}

static int nodes[4] = {0, 0, 1, 1};

static void run(const scenario_t *sc) {
  if (!px_test_gpu_ready("GPU strategy checks")) skip();
  if (!dir[0]) {
    printf("%s is not installed: skipped\n", FMNIST);
    skip();
  }
  assert_int_equal(px_th_run(4, nodes, rank_main, sc, 300), 0);
  printf("%s on the GPU: density %.3f, inter bytes %.0f (dense %.0f), test accuracy %.3f, "
         "%.0f zero filters, %.0f frozen rounds\n",
         px_strategy_name(sc->kind), px_th_shared[0], px_th_shared[1], px_th_shared[2],
         px_th_shared[3], px_th_shared[4], px_th_shared[5]);
}

static void test_hsadmm_on_the_gpu(void **state) {
  (void)state;
  scenario_t sc = {PX_STRATEGY_HSADMM, 0.5, 4, 1, 0, 0};
  run(&sc);
  assert_true(px_th_shared[0] > 0.3 && px_th_shared[0] < 0.6);
  assert_true(px_th_shared[1] > 0 && px_th_shared[1] < 0.75 * px_th_shared[2]);
  /* coupled channel pruning removes filters of the producers */
  assert_true(px_th_shared[4] > 0);
  assert_true(px_th_shared[5] >= 2);
}

/* The device-state round against the staged host round: the same final
 * model, accuracy, density and bytes, through pruning and frozen rounds. */
static void test_device_state_matches_host_state(void **state) {
  (void)state;
  scenario_t sc = {PX_STRATEGY_HSADMM, 0.5, 3, 1, 1, 0};
  run(&sc);
  double host[8];
  memcpy(host, (const void *)px_th_shared, sizeof host);
  sc.hsadmm_state = 0;
  run(&sc);
  for (int i = 0; i < 8; i++)
    if (px_th_shared[i] != host[i])
      fail_msg("figure %d: device state %.17g, host state %.17g", i, px_th_shared[i], host[i]);
}

/* prune.mac_keep on the device: the budget's keep is the CPU graph's, and
 * the device-state projection keeps that many channels per group. */
static void test_a_mac_budget_on_the_gpu(void **state) {
  (void)state;
  scenario_t sc = {PX_STRATEGY_HSADMM, 1.0, 3, 1, 1, 0.5};
  run(&sc);
  assert_true(px_th_shared[4] > 0); /* the producers' pruned filters */
}

static void test_ddp_on_the_gpu(void **state) {
  (void)state;
  scenario_t sc = {PX_STRATEGY_DDP, 1.0, 2, 0, 0, 0};
  run(&sc);
  assert_true(px_th_shared[1] > 0 && px_th_shared[1] == px_th_shared[2]);
}

static void test_topk_on_the_gpu(void **state) {
  (void)state;
  scenario_t sc = {PX_STRATEGY_TOPK, 1.0, 2, 0, 0, 0};
  run(&sc);
  assert_true(px_th_shared[1] > 0 && px_th_shared[1] < 0.2 * px_th_shared[2]);
}

int main(int argc, char **argv) {
  /* before any rank is forked or any CUDA context made: two runs, the same bits */
  setenv("PX_CUDNN_DETERMINISTIC", "1", 1);
  px_th_init(argc, argv);
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_hsadmm_on_the_gpu),
      cmocka_unit_test(test_device_state_matches_host_state),
      cmocka_unit_test(test_a_mac_budget_on_the_gpu),
      cmocka_unit_test(test_ddp_on_the_gpu),
      cmocka_unit_test(test_topk_on_the_gpu),
  };
  return cmocka_run_group_tests(tests, setup, teardown);
}
