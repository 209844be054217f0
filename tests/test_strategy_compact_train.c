/* Compact training after the freeze (prune.compact_training) on
 * ResNet-20 and a subset of Fashion-MNIST:
 * - a few SGD steps of the compact model (strategy/compact_train.c: built
 *   from a model with frozen masks keeping half of the input channels,
 *   gathered, stepped, scattered back) against the same steps of the masked
 *   dense model from the same start: the parameters and BN statistics the
 *   compact model holds differ from the dense ones by no more than the dense
 *   steps from a start moved by 3e-7 of itself (a few ulps) differ from
 *   them: the difference is rounding (the convolutions sum over fewer
 *   channels, in another order), which these early steps of a fresh net
 *   amplify a thousandfold in the second step; the entries it does not hold
 *   are untouched. Two steps (the second one reads the first's momentum):
 *   after a third, both differences are chaos, the comparison of two
 *   amplified rounding errors a coin flip (with the own batch norm, compact
 *   1.9e-3 against perturbed 1.6e-3 in the BN statistics after three steps;
 *   1.2e-7 against 7.2e-7 after two);
 * - H-SADMM on 2 nodes x 2 real ranks (forked processes, UCX on loopback)
 *   with compact training off and on: the same density and bytes (the masks
 *   and the exchange do not depend on how the local phase computes), the
 *   compact model built once (the log says so once per rank), and a final
 *   test accuracy within 5 points of the dense run's (two runs that differ
 *   by amplified rounding; at about 45% on 1,000 test images the binomial
 *   standard error of their difference is 2.2 points);
 * - the refusals: the staged path and the device-state round train dense,
 *   and say so in the log;
 * - the job-spec field prune.compact_training and its errors. */
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
#include "prunex/data.h"
#include "prunex/jobspec.h"
#include "prunex/jobspec_translate.h"
#include "prunex/strategy.h"
#include "px_test_util.h"
#include "strategy/strategy_int.h"

#define NTEST 1000
#define ITERATIONS 8
#define STEPS 2

static char dir[256];

static int setup(void **state) {
  (void)state;
  return px_test_fmnist_fixture_n(dir, sizeof dir, "px_ctrain", 1024, NTEST);
}

static int teardown(void **state) {
  (void)state;
  if (dir[0] && !getenv("PX_TEST_KEEP")) px_th_rmdir(dir);
  return 0;
}

/* ---- the steps, compact against masked dense ---- */

typedef struct {
  px__ctrain_t *ct;
  const float *keep; /* [numel] 0 outside the masks */
} hook_t;

/* the dense hook of hsadmm_ops.c, element-wise; the compact model's own */
static px_status_t mask_hook(void *ctx, px_model_t *m) {
  hook_t *h = ctx;
  if (px__ctrain_is(h->ct, m)) {
    px__ctrain_mask(h->ct);
    return PX_OK;
  }
  float *w = px_model_flat_params(m)->data, *g = px_model_flat_grads(m)->data;
  for (size_t j = 0; j < px_model_numel(m); j++)
    if (h->keep[j] == 0.0f) w[j] = g[j] = 0.0f;
  return PX_OK;
}

static const float *prox_z;

static void prox_of(void *ctx, int i, const float **z, const float **u, float *rho) {
  px__strategy_run_t *r = ctx;
  size_t off = (size_t)((const float *)px_model_param(r->m, i)->value->data -
                        (const float *)px_model_flat_params(r->m)->data);
  *z = prox_z + off;
  *u = NULL;
  *rho = 0.01f;
}

/* STEPS steps of the masked dense model (perturb: its parameters first
 * moved by up to 3e-7 of themselves); the parameters and BN statistics
 * after them into theta and buf; returns the mean loss. */
static double dense_s;

static double dense_steps(px_trainer_t *t, px__strategy_run_t *r, float *perturb, float *theta,
                          float *buf) {
  px_model_t *m = r->m;
  for (size_t j = 0; perturb && j < r->numel; j++)
    perturb[j] *= 1.0f + 1e-7f * (float)((int)(j % 7) - 3);
  for (int i = 0; i < r->np; i++) {
    const float *z, *u;
    float rho;
    prox_of(r, i, &z, &u, &rho);
    assert_int_equal(px_sgd_set_prox(r->sgd, i, z, u, rho), PX_OK);
  }
  px_epoch_stats_t es;
  assert_int_equal(px_trainer_steps(t, STEPS, &es), PX_OK);
  dense_s = es.seconds;
  memcpy(theta, px_model_flat_params(m)->data, r->numel * sizeof *theta);
  memcpy(buf, px_model_flat_buffers(m)->data,
         px_tensor_numel(px_model_flat_buffers(m)) * sizeof *buf);
  for (int i = 0; i < r->np; i++) px_sgd_set_prox(r->sgd, i, NULL, NULL, 0.0f);
  return es.loss;
}

/* The start: parameters, BN statistics, zero momentum, the data position. */
static void restore(px_trainer_t *t, const float *theta0, const float *buf0, size_t nb,
                    const int64_t pos[3]) {
  px_model_t *m = px_trainer_model(t);
  memcpy(px_model_flat_params(m)->data, theta0, px_model_numel(m) * sizeof(float));
  memcpy(px_model_flat_buffers(m)->data, buf0, nb * sizeof(float));
  for (int i = 0; i < px_model_num_params(m); i++) {
    px_tensor_t *mom = px_sgd_momentum(px_trainer_sgd(t), i);
    memset(mom->data, 0, px_tensor_plain_bytes(mom));
  }
  assert_int_equal(px_trainer_set_position(t, pos), PX_OK);
}

static void compact_steps_match_masked_dense(void **state) {
  (void)state;
  if (!dir[0]) skip();
  px_train_config_t tc;
  px_test_rank_train_config(&tc, dir, 0, 1);
  tc.weight_decay = 0; /* what H-SADMM's local steps use */
  px_trainer_t *t;
  assert_int_equal(px_trainer_create(&tc, &t), PX_OK);
  px_model_t *m = px_trainer_model(t);
  size_t n = px_model_numel(m), nb = px_tensor_numel(px_model_flat_buffers(m));
  float *keep = malloc(n * sizeof *keep), *theta0 = malloc(n * sizeof *theta0);
  float *buf0 = malloc(nb * sizeof *buf0), *dense = malloc(n * sizeof *dense);
  float *dbuf = malloc(nb * sizeof *dbuf), *pdense = malloc(n * sizeof *pdense);
  float *pbuf = malloc(nb * sizeof *pbuf);
  assert_non_null(keep && theta0 && buf0 && dense && dbuf && pdense && pbuf);
  /* frozen masks keeping the even input channels of every conv but the stem */
  size_t off = 0;
  for (int i = 0; i < px_model_num_params(m); off += px_tensor_numel(px_model_param(m, i)->value), i++) {
    const px_tensor_t *v = px_model_param(m, i)->value;
    int conv = px_model_param(m, i)->kind == PX_WEIGHT_CONV && v->dims[1] > 3;
    size_t kk = conv ? (size_t)(v->dims[2] * v->dims[3]) : 1;
    for (size_t j = 0; j < px_tensor_numel(v); j++)
      keep[off + j] = conv && (j / kk) % (size_t)v->dims[1] % 2 ? 0.0f : 1.0f;
  }
  float *w = px_model_flat_params(m)->data;
  for (size_t j = 0; j < n; j++) w[j] *= keep[j];
  memcpy(theta0, w, n * sizeof *theta0);
  memcpy(buf0, px_model_flat_buffers(m)->data, nb * sizeof *buf0);
  prox_z = theta0;
  int64_t pos[3];
  px_trainer_position(t, pos);
  px_strategy_config_t cfg = {0};
  px__strategy_run_t r = {.t = t, .m = m, .sgd = px_trainer_sgd(t), .cfg = &cfg,
                          .np = px_model_num_params(m), .numel = n};
  hook_t h = {NULL, keep};
  px_trainer_set_grad_hook(t, mask_hook, &h);

  /* the masked dense model, from the start and from the start with every
   * parameter moved by up to 3e-7 of itself (a few rounding steps): how far
   * rounding alone carries these steps */
  double dense_loss = dense_steps(t, &r, NULL, dense, dbuf);
  restore(t, theta0, buf0, nb, pos);
  double pert_loss = dense_steps(t, &r, w, pdense, pbuf);
  /* which dense entries the compact model holds (the plan of the start) */
  restore(t, theta0, buf0, nb, pos);
  px__compact_t *plan;
  px_model_t *cm;
  assert_int_equal(px__compact_plan(m, 0, &plan), PX_OK);
  plan->round = px__ctrain_round(); /* as compact_train.c widens it */
  assert_int_equal(px__compact_update(plan, m), PX_OK);
  assert_int_equal(px__compact_build(plan, m, px_model_ops(m), 1, &cm), PX_OK);
  size_t cn = px_model_numel(cm), cb = px_tensor_numel(px_model_flat_buffers(cm));
  int64_t *pmap = malloc(cn * sizeof *pmap), *bmap = malloc(cb * sizeof *bmap);
  assert_int_equal(px__compact_index(plan, m, cm, pmap, bmap), PX_OK);

  /* the compact model from the same start, scattered back */
  assert_int_equal(px__ctrain_build(&r, keep, &h.ct), PX_OK);
  assert_true((int64_t)cn == px__ctrain_numel(h.ct));
  px_epoch_stats_t es;
  assert_int_equal(px__ctrain_enter(h.ct, &r, prox_of, &r), PX_OK);
  assert_int_equal(px_trainer_steps(t, STEPS, &es), PX_OK);
  double compact_s = es.seconds;
  px__ctrain_leave(h.ct, &r);
  char *held = calloc(n, 1);
  double dmax = 0, pmax = 0, moved = 0, bmax = 0, pbmax = 0;
  for (size_t j = 0; j < cn; j++) {
    size_t d = (size_t)pmap[j];
    held[d] = 1;
    dmax = fmax(dmax, fabs((double)w[d] - dense[d]));
    pmax = fmax(pmax, fabs((double)pdense[d] - dense[d]));
    moved = fmax(moved, fabs((double)dense[d] - theta0[d]));
  }
  const float *cbuf = px_model_flat_buffers(m)->data;
  for (size_t j = 0; j < cb; j++) {
    bmax = fmax(bmax, fabs((double)cbuf[bmap[j]] - dbuf[bmap[j]]));
    pbmax = fmax(pbmax, fabs((double)pbuf[bmap[j]] - dbuf[bmap[j]]));
  }
  size_t untouched = 0, others = 0;
  for (size_t j = 0; j < n; j++)
    if (!held[j]) others++, untouched += w[j] == theta0[j];
  printf("compact model: %zu of %zu parameters; %d steps in %.2f s (dense %.2f s): loss %.7f "
         "(dense %.7f, perturbed dense %.7f)\n", cn, n, STEPS, compact_s, dense_s, es.loss,
         dense_loss, pert_loss);
  printf("parameters: max |compact - dense| %.3g, |perturbed - dense| %.3g; the steps moved "
         "them up to %.3g\n", dmax, pmax, moved);
  printf("BN statistics: max |compact - dense| %.3g, |perturbed - dense| %.3g\n", bmax, pbmax);
  /* within what a few ulps at the start become in these steps (the early
   * steps of a fresh net at lr 0.05 amplify rounding quickly: see the top) */
  assert_true(cn < n * 3 / 4);
  assert_true(moved > 0);
  assert_true(dmax <= pmax);
  assert_true(bmax <= pbmax + 1e-6);
  assert_true(untouched == others);
  assert_true(fabs(es.loss - dense_loss) <= 1e-4 * dense_loss);
  free(held);
  free(pmap);
  free(bmap);
  px_model_destroy(cm);
  px__compact_destroy(plan);
  px_trainer_set_grad_hook(t, NULL, NULL);
  px__ctrain_destroy(h.ct);
  free(keep), free(theta0), free(buf0), free(dense), free(dbuf), free(pdense), free(pbuf);
  px_trainer_destroy(t);
}

/* ---- H-SADMM runs ---- */

typedef struct {
  int compact, stage_host, hsadmm_state, iterations;
  const char *tag;
} run_t;

/* rank 0's controller: fixed penalties, the masks frozen from iteration 2 */
static px_status_t control(void *ctx, const px_iteration_t *it, px_hsadmm_decision_t *d) {
  (void)ctx;
  d->freeze = it->iteration >= 2;
  return PX_OK;
}

static px_status_t observe(void *ctx, const px_iteration_t *it) {
  *(double *)ctx += it->local_s;
  return PX_OK;
}

static int rank_main(px_th_ctx_t *ctx) {
  const run_t *run = ctx->arg;
  char log[320];
  snprintf(log, sizeof log, "%s/%s.%d.log", dir, run->tag, ctx->rank);
  PX_TH_CHECK(freopen(log, "w", stderr) != NULL);
  px_log_set_level(PX_LOG_INFO);
  px_train_config_t tc;
  px_test_rank_train_config(&tc, dir, ctx->rank, ctx->size);
  px_trainer_t *t;
  PX_TH_OK(px_trainer_create(&tc, &t));
  px_comm_t *comm;
  PX_TH_OK(px_th_comm(ctx, NULL, &comm));
  double local_s = 0;
  px_strategy_config_t cfg = {0};
  cfg.kind = PX_STRATEGY_HSADMM;
  cfg.iterations = run->iterations;
  cfg.local_steps = 6;
  cfg.rho1 = cfg.rho2 = 1e-2;
  cfg.keep = (px_prune_keep_t){1.0, 0.5, 1.0, 0, 0, 0};
  cfg.eval_every = run->iterations;
  cfg.calibrate_batches = 8;
  cfg.compact_local = run->compact;
  cfg.stage_host = run->stage_host;
  cfg.hsadmm_state = run->hsadmm_state;
  cfg.observe = observe;
  cfg.observe_ctx = &local_s;
  px_strategy_result_t res;
  PX_TH_OK(px_strategy_run(t, comm, &cfg, control, NULL, &res));
  /* the final model is the consensus z, the same on every rank */
  px_model_t *m = px_trainer_model(t);
  px_th_shared[8 + ctx->rank] =
      (double)(px_test_fnv64(px_model_flat_params(m)->data, px_model_numel(m) * 4) >> 12);
  if (ctx->rank == 0) {
    px_th_shared[0] = res.density;
    px_th_shared[1] = (double)res.bytes_inter;
    px_th_shared[2] = (double)res.bytes_intra;
    px_th_shared[3] = res.test_accuracy;
    px_th_shared[4] = res.iterations;
    px_th_shared[5] = (double)res.compact_train_numel;
    px_th_shared[6] = local_s;
  }
  px_comm_destroy(comm);
  px_trainer_destroy(t);
  return 0;
}

/* Lines of rank 0's log of run tag that contain needle. */
static int log_count(const char *tag, const char *needle) {
  char path[320], line[1024];
  snprintf(path, sizeof path, "%s/%s.0.log", dir, tag);
  FILE *f = fopen(path, "r");
  if (!f) return -1;
  int n = 0;
  while (fgets(line, sizeof line, f)) n += strstr(line, needle) != NULL;
  fclose(f);
  return n;
}

static int nodes[4] = {0, 0, 1, 1};

static void hsadmm_trains_compact_after_the_freeze(void **state) {
  (void)state;
  if (!dir[0]) skip();
  double off[7], on[7];
  run_t run = {0, 0, 0, ITERATIONS, "off"};
  assert_int_equal(px_th_run(4, nodes, rank_main, &run, 300), 0);
  for (int i = 0; i < 7; i++) off[i] = px_th_shared[i];
  run = (run_t){1, 0, 0, ITERATIONS, "on"};
  assert_int_equal(px_th_run(4, nodes, rank_main, &run, 300), 0);
  for (int i = 0; i < 7; i++) on[i] = px_th_shared[i];
  printf("dense local phases:   density %.4f, inter %.0f, intra %.0f bytes, accuracy %.4f, "
         "local %.2f s\n", off[0], off[1], off[2], off[3], off[6]);
  printf("compact local phases: density %.4f, inter %.0f, intra %.0f bytes, accuracy %.4f, "
         "local %.2f s, %.0f compact parameters\n", on[0], on[1], on[2], on[3], on[6], on[5]);
  assert_true(off[4] == ITERATIONS && on[4] == ITERATIONS);
  for (int k = 1; k < 4; k++) assert_true(px_th_shared[8 + k] == px_th_shared[8]);
  for (int i = 0; i < 3; i++) assert_true(on[i] == off[i]);
  assert_true(off[5] == 0 && on[5] > 0);
  assert_true(fabs(on[3] - off[3]) <= 0.05);
  assert_int_equal(log_count("off", "compact training model:"), 0);
  assert_int_equal(log_count("on", "local phases after the freeze train: the compact model"), 1);
  assert_int_equal(log_count("on", "compact training model:"), 1);
}

static void refused_where_the_round_is_not_on_host_buffers(void **state) {
  (void)state;
  if (!dir[0]) skip();
  static const int one[1] = {0};
  run_t run = {1, 1, 0, 4, "staged"};
  assert_int_equal(px_th_run(1, one, rank_main, &run, 120), 0);
  assert_true(px_th_shared[5] == 0 && px_th_shared[4] == 4);
  assert_int_equal(log_count("staged", "train: the masked dense model (the staged path"), 1);
  run = (run_t){1, 0, 2, 4, "devstate"};
  assert_int_equal(px_th_run(1, one, rank_main, &run, 120), 0);
  assert_true(px_th_shared[5] == 0 && px_th_shared[4] == 4);
  assert_int_equal(log_count("devstate", "train: the masked dense model (the device-state"), 1);
}

/* prune.compact_training: a boolean of the hsadmm strategies, carried to
 * px_strategy_config_t.compact_local; other values and strategies are
 * refused, naming the field. */
static void the_spec_field_reaches_the_strategy(void **state) {
  (void)state;
  assert_true(px_test_spec_outcome("strategy: hsadmm\nprune:\n  compact_training: true\n", NULL));
  assert_true(px_test_spec_outcome("strategy: hsadmm-flat\nprune: {compact_training: true}\n",
                                   NULL));
  assert_true(px_test_spec_outcome("strategy: ddp\nprune:\n  compact_training: false\n", NULL));
  assert_true(px_test_spec_outcome("strategy: hsadmm\nprune:\n  compact_training: sometimes\n",
                                   "prune.compact_training"));
  assert_true(px_test_spec_outcome("strategy: ddp\nprune:\n  compact_training: true\n",
                                   "prune.compact_training: trains the compact model"));
  for (int on = 0; on < 2; on++) {
    const char *yaml = on ? "strategy: hsadmm\nprune:\n  compact_training: true\n"
                          : "strategy: hsadmm\n";
    Prunex__V1__JobSpec *spec = NULL;
    assert_int_equal(px_jobspec_parse_string(yaml, strlen(yaml), "t.yaml", &spec), PX_OK);
    px_strategy_config_t c;
    assert_int_equal(px_jobspec_strategy_config(spec, 10, &c), PX_OK);
    assert_int_equal(c.compact_local, on);
    px_jobspec_free(spec);
  }
}

int main(void) {
  if (getenv("CT_FILTER")) cmocka_set_test_filter(getenv("CT_FILTER"));
  if (getenv("PX_TEST_FILTER")) cmocka_set_test_filter(getenv("PX_TEST_FILTER"));
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(the_spec_field_reaches_the_strategy),
      cmocka_unit_test(compact_steps_match_masked_dense),
      cmocka_unit_test(hsadmm_trains_compact_after_the_freeze),
      cmocka_unit_test(refused_where_the_round_is_not_on_host_buffers),
  };
  return cmocka_run_group_tests(tests, setup, teardown);
}
