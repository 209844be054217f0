/* The final phase of H-SADMM (admm.final_prox) and the batch-norm
 * calibration's spec field, on ResNet-20 and a subset of Fashion-MNIST:
 * - the spec fields reach px_strategy_config_t, bad values are refused
 *   naming the field;
 * - H-SADMM on 2 nodes x 2 real ranks (forked processes, UCX on loopback),
 *   the masks frozen by iteration 2's decision, with the pull kept, decayed and
 *   released: it changes only what it should. The masks stay frozen (the
 *   density never moves after the freeze and the drift is 0), the exchange
 *   is the same compact one (the bytes of every iteration equal keep's),
 *   every rank ends with the same consensus, and the final model does
 *   differ from keep's (the knob acts on the local steps);
 * - admm.weight_decay_in: the weight decay in the z update instead of the
 *   local steps gives another model, and with no weight decay the two are
 *   the same bits (the field moves the regulariser, nothing else);
 * - prune.ramp_iterations: the keep falls from 1 to its target over the
 *   ramp, and the masks freeze no earlier than its end;
 * - one local step a round, nothing pruned, against DDP on the same data:
 *   a round's z is DDP's step less the share rho2 / (P rho1 + rho2) of it
 *   (the node consensus keeps that much of the last z), 0.05% with rho2 a
 *   thousandth of rho1 and 4.8% at rho1 / 10; after two rounds the lag
 *   carries on (examples/quickstart.yaml). */
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
#include "prunex/data.h"
#include "prunex/jobspec.h"
#include "prunex/jobspec_translate.h"
#include "prunex/strategy.h"
#include "px_test_util.h"

#define ITERATIONS 6
#define FREEZE 2
/* px_th_shared: [0..3] the ranks' final-model hashes, then per iteration
 * density, drift, inter bytes, intra bytes, frozen */
#define PER 5
#define AT(it, k) (8 + (it) * PER + (k))

static char dir[256];

static int setup(void **state) {
  (void)state;
  return px_test_fmnist_fixture_n(dir, sizeof dir, "px_final", 512, 500);
}

static int teardown(void **state) {
  (void)state;
  if (dir[0] && !getenv("PX_TEST_KEEP")) px_th_rmdir(dir);
  return 0;
}

static px_status_t control(void *ctx, const px_iteration_t *it, px_hsadmm_decision_t *d) {
  (void)ctx;
  d->freeze = it->iteration >= FREEZE;
  return PX_OK;
}

static px_status_t observe(void *ctx, const px_iteration_t *it) {
  if (*(const int *)ctx != 0) return PX_OK;
  int i = it->iteration;
  px_th_shared[AT(i, 0)] = it->density;
  px_th_shared[AT(i, 1)] = (double)it->mask_drift;
  px_th_shared[AT(i, 2)] = (double)it->bytes_inter;
  px_th_shared[AT(i, 3)] = (double)it->bytes_intra;
  px_th_shared[AT(i, 4)] = it->frozen;
  return PX_OK;
}

/* A run's recipe: admm.final_prox, admm.weight_decay_in, train.weight_decay,
 * prune.ramp_iterations. */
typedef struct {
  int final_prox, decay_consensus;
  double weight_decay;
  int iterations; /* 0: ITERATIONS */
  int keep_ramp;
} recipe_t;

static int rank_main(px_th_ctx_t *ctx) {
  const recipe_t *rc = ctx->arg;
  px_train_config_t tc;
  px_test_rank_train_config(&tc, dir, ctx->rank, ctx->size);
  tc.weight_decay = rc->weight_decay;
  px_trainer_t *t;
  PX_TH_OK(px_trainer_create(&tc, &t));
  px_comm_t *comm;
  PX_TH_OK(px_th_comm(ctx, NULL, &comm));
  px_strategy_config_t cfg = {0};
  cfg.kind = PX_STRATEGY_HSADMM;
  cfg.iterations = rc->iterations ? rc->iterations : ITERATIONS;
  cfg.local_steps = 2;
  cfg.rho1 = 0.05;
  cfg.rho2 = 0.01;
  cfg.keep = (px_prune_keep_t){1.0, 0.5, 1.0, 0, 0, 0};
  cfg.eval_every = ITERATIONS;
  cfg.calibrate_batches = 2;
  cfg.final_prox = rc->final_prox;
  cfg.decay_consensus = rc->decay_consensus;
  cfg.keep_ramp = rc->keep_ramp;
  cfg.observe = observe;
  cfg.observe_ctx = &ctx->rank;
  px_strategy_result_t res;
  PX_TH_OK(px_strategy_run(t, comm, &cfg, control, NULL, &res));
  px_model_t *m = px_trainer_model(t);
  px_th_shared[ctx->rank] =
      (double)(px_test_fnv64(px_model_flat_params(m)->data, px_model_numel(m) * 4) >> 12);
  px_comm_destroy(comm);
  px_trainer_destroy(t);
  return 0;
}

static const int nodes[4] = {0, 0, 1, 1};

/* One run: its per-iteration figures into fig, the final hash into *hash. */
static void run(recipe_t rc, double fig[ITERATIONS * PER], double *hash) {
  assert_int_equal(px_th_run(4, nodes, rank_main, &rc, 300), 0);
  for (int k = 1; k < 4; k++) assert_true(px_th_shared[k] == px_th_shared[0]);
  *hash = px_th_shared[0];
  for (int i = 0; i < ITERATIONS * PER; i++) fig[i] = px_th_shared[8 + i];
}

static void the_final_phase_changes_only_the_local_steps(void **state) {
  (void)state;
  if (!dir[0]) skip();
  static const char *const names[] = {"keep", "decay", "release"};
  double fig[3][ITERATIONS * PER], hash[3];
  for (int v = 0; v < 3; v++) run((recipe_t){v, 0, 5e-4, 0, 0}, fig[v], &hash[v]);
  for (int v = 0; v < 3; v++) {
    for (int i = 0; i < ITERATIONS; i++) {
      const double *f = &fig[v][i * PER];
      printf("%-7s it %d: density %.4f drift %.0f inter %.0f intra %.0f frozen %.0f\n", names[v],
             i, f[0], f[1], f[2], f[3], f[4]);
      if (i > FREEZE) { /* frozen by iteration FREEZE's decision, the masks stay */
        assert_true(f[4] == 1);
        assert_true(f[0] == fig[v][(FREEZE + 1) * PER]);
        assert_true(f[1] == 0);
      }
      for (int k = 0; k < PER; k++) /* the same round, the same compact exchange */
        assert_true(f[k] == fig[0][i * PER + k]);
    }
  }
  printf("final model hashes: keep %.0f, decay %.0f, release %.0f\n", hash[0], hash[1], hash[2]);
  assert_true(hash[1] != hash[0]);
  assert_true(hash[2] != hash[0]);
  assert_true(hash[2] != hash[1]);
}

static void weight_decay_in_moves_the_regulariser_only(void **state) {
  (void)state;
  if (!dir[0]) skip();
  /* the masks' freeze plays no part: 3 iterations, the freeze's first */
  double fig[ITERATIONS * PER], local, consensus, local0, consensus0;
  run((recipe_t){0, 0, 5e-4, FREEZE + 1, 0}, fig, &local);
  run((recipe_t){0, 1, 5e-4, FREEZE + 1, 0}, fig, &consensus);
  run((recipe_t){0, 0, 0, FREEZE + 1, 0}, fig, &local0);
  run((recipe_t){0, 1, 0, FREEZE + 1, 0}, fig, &consensus0);
  printf("final model hashes: local %.0f, consensus %.0f; no decay: %.0f, %.0f\n", local,
         consensus, local0, consensus0);
  assert_true(consensus != local);
  assert_true(local0 != local);
  assert_true(consensus0 == local0);
}

/* prune.ramp_iterations 4, the controller asking for the freeze from
 * iteration FREEZE (2) on: z's density falls from 1 at iteration 0 to the
 * target keep's at iteration 4 (what the run without a ramp has from the
 * first round: 16, 12, 9, 9, 8 of a stage-1 conv's 16 channels, 64, 46, 36,
 * 33, 32 of a stage-3 one), the masks freeze after iteration 4, not 2, and
 * the exchange shrinks with the keep. */
static void the_keep_ramp_falls_to_the_target_then_freezes(void **state) {
  (void)state;
  if (!dir[0]) skip();
  double ramp[ITERATIONS * PER], base[ITERATIONS * PER], h_ramp, h_base;
  run((recipe_t){0, 0, 5e-4, 0, 4}, ramp, &h_ramp);
  run((recipe_t){0, 0, 5e-4, 0, 0}, base, &h_base);
  for (int i = 0; i < ITERATIONS; i++) {
    const double *f = &ramp[i * PER];
    printf("ramp 4 it %d: density %.4f inter %.0f frozen %.0f (no ramp: %.4f, %.0f, %.0f)\n", i,
           f[0], f[2], f[4], base[i * PER], base[i * PER + 2], base[i * PER + 4]);
    if (i > 0 && i <= 4) {
      assert_true(f[0] < ramp[(i - 1) * PER]);     /* the keep falls */
      assert_true(f[2] < ramp[(i - 1) * PER + 2]); /* and so do the exchange's bytes */
    }
    assert_true(f[4] == (i > 4)); /* frozen after iteration 4's decision */
    assert_true(base[i * PER + 4] == (i > FREEZE));
  }
  assert_true(ramp[0] == 1.0);
  assert_true(ramp[4 * PER] == base[0]); /* the target keep's counts */
  assert_true(h_ramp != h_base);
}

static void the_spec_fields_reach_the_strategy(void **state) {
  (void)state;
  static const struct {
    const char *yaml;
    int final_prox, calibrate, decay_consensus;
  } ok[] = {
      {"strategy: hsadmm\n", 0, 20, 0},
      {"strategy: hsadmm\nadmm: {final_prox: decay}\ntrain: {bn_calibration_batches: 5}\n", 1, 5,
       0},
      {"strategy: hsadmm\nadmm: {final_prox: release, weight_decay_in: consensus}\n", 2, 20, 1},
      {"strategy: hsadmm\nadmm: {final_prox: keep, weight_decay_in: local}\n", 0, 20, 0},
  };
  for (size_t k = 0; k < sizeof ok / sizeof ok[0]; k++) {
    Prunex__V1__JobSpec *spec = NULL;
    assert_int_equal(px_jobspec_parse_string(ok[k].yaml, strlen(ok[k].yaml), "t.yaml", &spec),
                     PX_OK);
    px_strategy_config_t c;
    assert_int_equal(px_jobspec_strategy_config(spec, 10, &c), PX_OK);
    assert_int_equal(c.final_prox, ok[k].final_prox);
    assert_int_equal(c.calibrate_batches, ok[k].calibrate);
    assert_int_equal(c.decay_consensus, ok[k].decay_consensus);
    px_jobspec_free(spec);
  }
  assert_true(px_test_spec_outcome("strategy: hsadmm\nadmm: {final_prox: sometimes}\n",
                                   "admm.final_prox"));
  assert_true(px_test_spec_outcome("strategy: hsadmm\nadmm: {weight_decay_in: z}\n",
                                   "admm.weight_decay_in"));
  assert_true(px_test_spec_outcome("strategy: hsadmm\ntrain: {bn_calibration_batches: 0}\n",
                                   "train.bn_calibration_batches"));
}

/* ---- one local step a round against DDP ----------------------------------------------- */

typedef struct {
  px_strategy_kind_t kind;
  double rho2;
  int rounds;
  char out[320]; /* rank 0 writes its final parameters here; DDP's run also the start,
                    to out.init */
} one_step_t;

static int write_floats(const char *path, const float *v, size_t n) {
  FILE *f = fopen(path, "wb");
  int ok = f && fwrite(v, sizeof *v, n, f) == n;
  if (f && fclose(f)) ok = 0;
  return ok;
}

static int rank_one_step(px_th_ctx_t *ctx) {
  const one_step_t *os = ctx->arg;
  px_train_config_t tc;
  px_test_rank_train_config(&tc, dir, ctx->rank, ctx->size);
  tc.seed = 1; /* as a job's ranks: one model (H-SADMM's z starts as the ranks' mean) */
  px_trainer_t *t;
  PX_TH_OK(px_trainer_create(&tc, &t));
  px_comm_t *comm;
  PX_TH_OK(px_th_comm(ctx, NULL, &comm));
  px_model_t *m = px_trainer_model(t);
  size_t n = (size_t)px_model_numel(m);
  if (ctx->rank == 0 && os->kind == PX_STRATEGY_DDP) {
    char init[340];
    snprintf(init, sizeof init, "%s.init", os->out);
    PX_TH_CHECK(write_floats(init, px_model_flat_params(m)->data, n));
  }
  px_strategy_config_t cfg = {0};
  cfg.kind = os->kind;
  cfg.iterations = os->rounds;
  cfg.local_steps = 1;
  cfg.rho1 = 0.01;
  cfg.rho2 = os->rho2;
  cfg.keep = (px_prune_keep_t){1.0, 1.0, 1.0, 0, 0, 0};
  cfg.eval_every = os->rounds;
  cfg.calibrate_batches = 2;
  px_strategy_result_t res;
  PX_TH_OK(px_strategy_run(t, comm, &cfg, control, NULL, &res));
  if (ctx->rank == 0) PX_TH_CHECK(write_floats(os->out, px_model_flat_params(m)->data, n));
  px_comm_destroy(comm);
  px_trainer_destroy(t);
  return 0;
}

static float *read_floats(const char *path, size_t *n) {
  size_t bytes = 0;
  float *v = (float *)px_test_read_file(path, &bytes);
  *n = bytes / sizeof(float);
  return v;
}

/* ||a - b|| */
static double distance(const float *a, const float *b, size_t n) {
  double s = 0;
  for (size_t i = 0; i < n; i++) s += ((double)a[i] - b[i]) * ((double)a[i] - b[i]);
  return sqrt(s);
}

/* rounds of DDP and of H-SADMM at rho2 = rho1 / 1000 and rho1 / 10 from one
 * start: how far each H-SADMM model is from DDP's, as a share of how far
 * DDP's moved */
static void one_step_runs(int rounds, double off[2]) {
  const struct {
    px_strategy_kind_t kind;
    double rho2;
  } runs[3] = {{PX_STRATEGY_DDP, 0}, {PX_STRATEGY_HSADMM, 1e-5}, {PX_STRATEGY_HSADMM, 1e-3}};
  float *w[3] = {0}, *init = NULL;
  size_t n[3], n0 = 0;
  for (int k = 0; k < 3; k++) {
    one_step_t os = {runs[k].kind, runs[k].rho2, rounds, {0}};
    snprintf(os.out, sizeof os.out, "%s/one-step-%d.f32", dir, k);
    assert_int_equal(px_th_run(4, nodes, rank_one_step, &os, 300), 0);
    w[k] = read_floats(os.out, &n[k]);
    assert_non_null(w[k]);
  }
  char p[340];
  snprintf(p, sizeof p, "%s/one-step-0.f32.init", dir); /* DDP's run wrote the start */
  init = read_floats(p, &n0);
  assert_non_null(init);
  assert_true(n0 > 0 && n[0] == n0 && n[1] == n0 && n[2] == n0);
  double moved = distance(w[0], init, n0);
  assert_true(moved > 0);
  off[0] = distance(w[1], w[0], n0) / moved;
  off[1] = distance(w[2], w[0], n0) / moved;
  printf("%d round(s): DDP moved %.4g; H-SADMM's z is %.3g of that from DDP's model at rho2 = "
         "rho1 / 1000, %.3g at rho1 / 10\n",
         rounds, moved, off[0], off[1]);
  for (int k = 0; k < 3; k++) free(w[k]);
  free(init);
}

static void one_local_step_follows_ddp_when_rho2_is_small(void **state) {
  (void)state;
  if (!dir[0]) skip();
  /* P = 2 ranks a node, rho1 = 0.01 */
  const double lag[2] = {1e-5 / (2 * 0.01 + 1e-5), 1e-3 / (2 * 0.01 + 1e-3)};
  double off[2];
  one_step_runs(1, off);
  for (int k = 0; k < 2; k++) assert_true(fabs(off[k] - lag[k]) < 0.05 * lag[k]);
  one_step_runs(2, off);
  assert_true(off[0] < 0.02);
  assert_true(off[1] > 5 * off[0]);
}

int main(void) {
  if (getenv("PX_TEST_FILTER")) cmocka_set_test_filter(getenv("PX_TEST_FILTER"));
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(the_spec_fields_reach_the_strategy),
      cmocka_unit_test(the_final_phase_changes_only_the_local_steps),
      cmocka_unit_test(weight_decay_in_moves_the_regulariser_only),
      cmocka_unit_test(the_keep_ramp_falls_to_the_target_then_freezes),
      cmocka_unit_test(one_local_step_follows_ddp_when_rho2_is_small),
  };
  return cmocka_run_group_tests(tests, setup, teardown);
}
