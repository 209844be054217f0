/* H-SADMM on convex least squares with M x P real ranks (forked processes,
 * UCX on loopback): without sparsity z converges to the centralised
 * solution, hierarchical and flat; all ranks hold bitwise-identical z after
 * every round; with sparsity z lies in the structured set and the masks
 * freeze once drift is zero; penalty changes rescale the scaled duals so the
 * unscaled ones are unchanged; the measured inter-node bytes equal the
 * packed sizes moved by the leaders; coupled channels take their producing
 * filters with them. */
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
#include "prunex/hsadmm.h"
#include "prunex/hsadmm_internal.h"
#include "px_test_util.h"

enum { D = 15, ROWS = 10, DW = 12 }; /* w: conv [4, 3, 1, 1] (12), b: dense (3) */
#define LAMBDA 0.1
#ifndef ROUNDS_CONV
#define ROUNDS_CONV 300
#endif
#ifndef ADAPT_CONV
#define ADAPT_CONV 1
#endif

/* Rank r's least-squares data. */
static void data(int r, double A[ROWS][D], double b[ROWS]) {
  for (int i = 0; i < ROWS; i++) {
    for (int k = 0; k < D; k++) A[i][k] = px_th_val(11, r, (size_t)(i * D + k)) / 4.0;
    b[i] = px_th_val(12, r, (size_t)i);
  }
}

/* Solves M x = y (n x n, Gaussian elimination with partial pivoting). */
static void solve(int n, double M[D][D], double *y, double *x) {
  double a[D][D + 1];
  for (int i = 0; i < n; i++) {
    for (int k = 0; k < n; k++) a[i][k] = M[i][k];
    a[i][n] = y[i];
  }
  for (int c = 0; c < n; c++) {
    int p = c;
    for (int i = c + 1; i < n; i++)
      if (fabs(a[i][c]) > fabs(a[p][c])) p = i;
    for (int k = 0; k <= n; k++) {
      double t = a[c][k];
      a[c][k] = a[p][k];
      a[p][k] = t;
    }
    for (int i = c + 1; i < n; i++) {
      double f = a[i][c] / a[c][c];
      for (int k = c; k <= n; k++) a[i][k] -= f * a[c][k];
    }
  }
  for (int i = n - 1; i >= 0; i--) {
    double s = a[i][n];
    for (int k = i + 1; k < n; k++) s -= a[i][k] * x[k];
    x[i] = s / a[i][i];
  }
}

/* z* = (sum A'A + lambda I)^-1 sum A'b over all ranks. */
static void centralised(int size, double *zstar) {
  double M[D][D] = {{0}}, y[D] = {0}, A[ROWS][D], b[ROWS];
  for (int r = 0; r < size; r++) {
    data(r, A, b);
    for (int i = 0; i < D; i++) {
      for (int k = 0; k < D; k++)
        for (int t = 0; t < ROWS; t++) M[i][k] += A[t][i] * A[t][k];
      for (int t = 0; t < ROWS; t++) y[i] += A[t][i] * b[t];
    }
  }
  for (int i = 0; i < D; i++) M[i][i] += LAMBDA;
  solve(D, M, y, zstar);
}

/* Local phase, solved exactly: argmin 1/2|A t - b|^2 + sum_k rho_k/2 (t_k - z_k + u_k)^2. */
static void local_solve(px_hsadmm_t *h, int r, float *theta) {
  double A[ROWS][D], b[ROWS], M[D][D] = {{0}}, y[D] = {0}, x[D];
  data(r, A, b);
  const float *z[2], *u[2];
  float rho[2];
  px_hsadmm_prox(h, 0, &z[0], &u[0], &rho[0]);
  px_hsadmm_prox(h, 1, &z[1], &u[1], &rho[1]);
  for (int i = 0; i < D; i++) {
    for (int k = 0; k < D; k++)
      for (int t = 0; t < ROWS; t++) M[i][k] += A[t][i] * A[t][k];
    for (int t = 0; t < ROWS; t++) y[i] += A[t][i] * b[t];
    int p = i < DW ? 0 : 1, j = i < DW ? i : i - DW;
    M[i][i] += rho[p];
    y[i] += rho[p] * ((double)z[p][j] - u[p][j]);
  }
  solve(D, M, y, x);
  for (int i = 0; i < D; i++) theta[i] = (float)x[i];
}

typedef struct {
  int flat;
  double keep_channel;
  int rounds;
  int freeze_on_stable;
  int adaptive;
  int rescale_check;
} scenario_t;

/* Controller that changes nothing. */
static px_status_t keep_going(void *ctx, const px_hsadmm_round_t *round, px_hsadmm_decision_t *d) {
  (void)ctx;
  (void)round;
  (void)d;
  return PX_OK;
}

/* Controller for the rescale check: doubles rho1, halves rho2 every round. */
static px_status_t wobble(void *ctx, const px_hsadmm_round_t *round, px_hsadmm_decision_t *d) {
  (void)ctx;
  for (int i = 0; i < round->nlayers; i++) {
    d->rho1[i] *= 2.0;
    d->rho2[i] *= 0.5;
  }
  return PX_OK;
}

static int rank_main(px_th_ctx_t *ctx) {
  const scenario_t *sc = ctx->arg;
  px_comm_t *comm;
  PX_TH_OK(px_th_comm(ctx, NULL, &comm));
  float theta[D] = {0};
  for (int i = 0; i < D; i++) theta[i] = (float)px_th_val(3, ctx->rank, (size_t)i) / 8.0f;
  px_hsadmm_param_t params[2] = {
      {"w", theta, DW, sc->keep_channel < 1.0, {4, 3, 1, 1}, 0, 0, 0},
      {"b", theta + DW, D - DW, 0, {0, 0, 0, 0}, 0, 0, 0},
  };
  px_hsadmm_config_t cfg = {sc->flat, 1.0, 1.0, LAMBDA, {1.0, sc->keep_channel, 1.0, 0, 0, 0}, 0};
  px_hsadmm_t *h;
  PX_TH_OK(px_hsadmm_create(comm, params, 2, &cfg, &h));
  px_hsadmm_local_ctl_t ctl;
  px_admm_layer_decision_t scratch[2];
  px_admm_policy_defaults(&ctl.policy);
  ctl.policy.adaptive_rho = sc->adaptive;
  ctl.policy.freeze_on_stable = sc->freeze_on_stable;
  ctl.policy.max_iterations = sc->rounds;
  ctl.policy.eps_abs = ctl.policy.eps_rel = 0; /* run every round */
  memset(&ctl.state, 0, sizeof ctl.state);
  ctl.num_nodes = px_comm_nnodes(comm);
  ctl.workers_per_node = px_comm_size(comm) / px_comm_nnodes(comm);
  ctl.max_layers = 2;
  ctl.scratch = scratch;
  px_group_t *world = px_comm_group(comm, PX_GROUP_WORLD);
  int stop = 0, rounds = 0;
  int64_t last_drift = -1;
  while (!stop) {
    local_solve(h, ctx->rank, theta);
    px_hsadmm_round_t *rd;
    PX_TH_OK(px_hsadmm_sync(h, &rd));
    rounds++;
    last_drift = rd->mask_drift;
    /* bitwise-identical z on every rank */
    uint64_t mine[2] = {px_test_fnv64(px_hsadmm_z(h, 0), DW * 4),
                        px_test_fnv64(px_hsadmm_z(h, 1), (D - DW) * 4)};
    uint64_t all[2 * PX_TH_MAX_RANKS];
    PX_TH_OK(px_comm_allgather(world, mine, all, 16, PX_COMM_U8));
    for (int r = 0; r < ctx->size; r++)
      PX_TH_CHECK(all[2 * r] == mine[0] && all[2 * r + 1] == mine[1]);
    /* z lies in the structured set: at most ceil(keep * 3) channels nonzero */
    if (sc->keep_channel < 1.0) {
      const float *z = px_hsadmm_z(h, 0);
      int nz = 0;
      for (int c = 0; c < 3; c++) {
        int any = 0;
        for (int o = 0; o < 4; o++) any |= z[o * 3 + c] != 0.0f;
        nz += any;
      }
      PX_TH_CHECK(nz <= (int)px_prune_keep_count(sc->keep_channel, 3));
    }
    /* inter bytes: the leaders exchange the packed buffer (and, before the
     * freeze, the masks); with 2 nodes each leader sends and receives the
     * whole of each */
    if (!sc->flat && ctx->size == 4 && px_comm_nnodes(comm) == 2) {
      uint64_t mask_bytes = rd->frozen ? 0 : (sc->keep_channel < 1.0 ? 4 + 3 + 3 : 0);
      uint64_t want = 2 /* leaders */ * 2 /* sent + received */ * (rd->packed_bytes + mask_bytes);
      if (rd->bytes_inter != want)
        PX_TH_FAIL("round %d: inter bytes %llu, expected %llu (packed %llu)", rd->iteration,
                   (unsigned long long)rd->bytes_inter, (unsigned long long)want,
                   (unsigned long long)rd->packed_bytes);
      if (!rd->frozen && sc->keep_channel == 1.0) PX_TH_CHECK(rd->bytes_inter_dense == rd->bytes_inter);
    }
    if (sc->rescale_check) {
      const float *u, *v;
      double y_u[DW], y_v[DW];
      px_hsadmm_duals(h, 0, &u, &v);
      double r1 = px_hsadmm_rho1(h, 0), r2 = px_hsadmm_rho2(h, 0);
      for (int j = 0; j < DW; j++) {
        y_u[j] = r1 * u[j];
        y_v[j] = r2 * v[j];
      }
      PX_TH_OK(px_hsadmm_decide(h, wobble, NULL, &stop));
      PX_TH_CHECK(px_hsadmm_rho1(h, 0) == 2 * r1 && px_hsadmm_rho2(h, 0) == 0.5 * r2);
      px_hsadmm_duals(h, 0, &u, &v);
      for (int j = 0; j < DW; j++) {
        PX_TH_CHECK(fabs(px_hsadmm_rho1(h, 0) * u[j] - y_u[j]) <= 1e-6 * (1 + fabs(y_u[j])));
        PX_TH_CHECK(fabs(px_hsadmm_rho2(h, 0) * v[j] - y_v[j]) <= 1e-6 * (1 + fabs(y_v[j])));
      }
      stop = rounds >= 4;
      continue;
    }
    PX_TH_OK(px_hsadmm_decide(h, px_hsadmm_local_control, &ctl, &stop));
  }
  if (ctx->rank == 0) {
    double zstar[D], err = 0, nrm = 0;
    centralised(ctx->size, zstar);
    const float *zw = px_hsadmm_z(h, 0), *zb = px_hsadmm_z(h, 1);
    for (int i = 0; i < D; i++) {
      double zi = i < DW ? zw[i] : zb[i - DW];
      err += (zi - zstar[i]) * (zi - zstar[i]);
      nrm += zstar[i] * zstar[i];
    }
    px_th_shared[0] = sqrt(err / nrm);
    px_th_shared[1] = rounds;
    px_th_shared[2] = px_hsadmm_frozen(h);
    px_th_shared[3] = (double)last_drift;
  }
  px_hsadmm_destroy(h);
  px_comm_destroy(comm);
  return 0;
}

static void run(int size, const int *nodes, const scenario_t *sc) {
  int bad = px_th_run(size, nodes, rank_main, sc, 120);
  assert_int_equal(bad, 0);
}

static void test_converges_to_centralised_solution(void **state) {
  (void)state;
  scenario_t sc = {0, 1.0, ROUNDS_CONV, 0, ADAPT_CONV, 0};
  int two_by_two[4] = {0, 0, 1, 1}, one_node[3] = {0, 0, 0}, three_nodes[3] = {0, 1, 2};
  run(4, two_by_two, &sc);
  printf("2 nodes x 2: relative error %.2e after %.0f rounds\n", px_th_shared[0], px_th_shared[1]);
  assert_true(px_th_shared[0] < 1e-4);
  run(3, one_node, &sc);
  printf("1 node x 3: relative error %.2e\n", px_th_shared[0]);
  assert_true(px_th_shared[0] < 1e-4);
  run(3, three_nodes, &sc);
  printf("3 nodes x 1: relative error %.2e\n", px_th_shared[0]);
  assert_true(px_th_shared[0] < 1e-4);
}

static void test_flat_converges_to_centralised_solution(void **state) {
  (void)state;
  scenario_t sc = {1, 1.0, 300, 0, 1, 0};
  int nodes[4] = {0, 0, 1, 1};
  run(4, nodes, &sc);
  printf("flat, 4 ranks: relative error %.2e\n", px_th_shared[0]);
  assert_true(px_th_shared[0] < 1e-4);
}

static void test_sparse_consensus_stays_in_set_and_freezes(void **state) {
  (void)state;
  scenario_t sc = {0, 0.6, 40, 2, 1, 0};
  int nodes[4] = {0, 0, 1, 1};
  run(4, nodes, &sc);
  assert_true(px_th_shared[2] == 1.0); /* frozen */
  assert_true(px_th_shared[3] == 0.0); /* drift 0 at the end */
  scenario_t flat = {1, 0.6, 40, 2, 1, 0};
  run(4, nodes, &flat);
  assert_true(px_th_shared[2] == 1.0);
}

static void test_rho_change_keeps_unscaled_duals(void **state) {
  (void)state;
  scenario_t sc = {0, 1.0, 100, 0, 0, 1};
  int nodes[4] = {0, 0, 1, 1};
  run(4, nodes, &sc);
}

/* Two coupled convs, A [6, 4, 1, 1] whose output only B [5, 6, 1, 1] reads,
 * and a dense tail. Each rank perturbs its model differently every round, so
 * the nodes choose different channels and the union does the coupling's
 * work: A's filter mask equals B's channel mask, z is zero on both halves of
 * every pruned group, and the leaders move exactly the packed blocks. */
enum { CA = 24, CB = 30, CD = 3, CN = CA + CB + CD };

/* A rank's coupled pair: its model, the three parameters over it and the
 * configuration (channel keep 0.5); coupled_create makes the handle. */
typedef struct {
  float theta[CN];
  px_hsadmm_param_t params[3];
  px_hsadmm_config_t cfg;
} coupled_t;

static px_status_t coupled_create(coupled_t *c, px_comm_t *comm, px_hsadmm_t **h) {
  for (int i = 0; i < CN; i++) c->theta[i] = (float)px_th_val(7, 0, (size_t)i);
  const px_hsadmm_param_t params[3] = {
      {"a", c->theta, CA, 1, {6, 4, 1, 1}, 1, 1, 0},
      {"b", c->theta + CA, CB, 1, {5, 6, 1, 1}, 0, 0, 0},
      {"t", c->theta + CA + CB, CD, 0, {0, 0, 0, 0}, 0, 0, 0},
  };
  memcpy(c->params, params, sizeof params);
  c->cfg = (px_hsadmm_config_t){0, 1.0, 1.0, 0.0, {1.0, 0.5, 1.0, 0, 0, 0}, 0};
  return px_hsadmm_create(comm, c->params, 3, &c->cfg, h);
}

static int coupled_rank(px_th_ctx_t *ctx) {
  px_comm_t *comm;
  PX_TH_OK(px_th_comm(ctx, NULL, &comm));
  coupled_t cp;
  float *theta = cp.theta;
  px_hsadmm_param_t *params = cp.params;
  px_hsadmm_t *h;
  PX_TH_OK(coupled_create(&cp, comm, &h));
  for (int round = 0; round < 4; round++) {
    for (int i = 0; i < CN; i++) theta[i] += (float)px_th_val(11 + (uint64_t)round, ctx->rank, (size_t)i);
    px_hsadmm_round_t *rd;
    PX_TH_OK(px_hsadmm_sync(h, &rd));
    const uint8_t *ma = px_hsadmm_mask(h, 0), *mb = px_hsadmm_mask(h, 1);
    const float *za = px_hsadmm_z(h, 0), *zb = px_hsadmm_z(h, 1);
    int kout_a = 0, kin_a = 0, kin_b = 0, nz_b = 0;
    for (int c = 0; c < 6; c++) {
      PX_TH_CHECK(ma[c] == mb[5 + c]); /* A's filter c goes with B's channel c */
      kout_a += ma[c];
      kin_b += mb[5 + c];
      int any = 0;
      for (int o = 0; o < 5; o++) any |= zb[o * 6 + c] != 0.0f;
      for (int i = 0; i < 4; i++) any |= za[c * 4 + i] != 0.0f;
      if (!mb[5 + c]) PX_TH_CHECK(!any);
      nz_b += any;
    }
    for (int c = 0; c < 4; c++) kin_a += ma[6 + c];
    PX_TH_CHECK(nz_b <= 3); /* z itself is in the set, whatever the union holds */
    PX_TH_CHECK(kin_b >= 3 && kin_a >= 2);
    uint64_t packed = 4u * (uint64_t)(kout_a * kin_a + 5 * kin_b + CD);
    PX_TH_CHECK(rd->packed_bytes == packed);
    uint64_t masks = rd->frozen ? 0 : px_prune_mask_size(params[0].shape) +
                                          px_prune_mask_size(params[1].shape);
    PX_TH_CHECK(rd->bytes_inter == 2u * 2u * (packed + masks));
    int stop;
    PX_TH_OK(px_hsadmm_decide(h, keep_going, NULL, &stop));
  }
  px_hsadmm_destroy(h);
  /* a consumer whose channels do not match the producer's filters */
  params[0].consumer = 2;
  PX_TH_CHECK(px_hsadmm_create(comm, params, 3, &cp.cfg, &h) == PX_ERR_INVALID);
  params[0].consumer = 1;
  params[1].shape.c_in = 5;
  PX_TH_CHECK(px_hsadmm_create(comm, params, 3, &cp.cfg, &h) == PX_ERR_INVALID);
  px_comm_destroy(comm);
  return 0;
}

static void test_coupled_channels_take_their_filters(void **state) {
  (void)state;
  int nodes[4] = {0, 0, 1, 1};
  assert_int_equal(px_th_run(4, nodes, coupled_rank, NULL, 120), 0);
}

/* The same two coupled convs, the masks frozen after the second round,
 * when the nodes' choices differ and their union keeps more than half of
 * A's 6 filters: the frozen masks keep that union, or with the exact
 * freeze (prune.mac_keep) z's own 3, which the budget was counted for. */
static px_status_t freeze_now(void *ctx, const px_hsadmm_round_t *round,
                              px_hsadmm_decision_t *d) {
  (void)ctx;
  (void)round;
  d->freeze = 1;
  return PX_OK;
}

/* A coupled rank's round: its model moved by the round's own noise, then
 * the sync. */
static px_status_t coupled_round(px_hsadmm_t *h, float *theta, int round, int rank) {
  for (int i = 0; i < CN; i++) theta[i] += (float)px_th_val(11 + (uint64_t)round, rank, (size_t)i);
  px_hsadmm_round_t *rd;
  return px_hsadmm_sync(h, &rd);
}

/* Whether z holds any of A's filter c (its 4 weights). */
static int a_filter_in_z(const px_hsadmm_t *h, int c) {
  const float *za = px_hsadmm_z(h, 0);
  int any = 0;
  for (int i = 0; i < 4; i++) any |= za[c * 4 + i] != 0.0f;
  return any;
}

/* A rank's test on the coupled pair: coupled_main makes the rank's
 * communicator and handle, runs the body and destroys both; run_coupled runs
 * it on 2 nodes x 2 ranks. */
typedef int (*coupled_body_t)(px_th_ctx_t *ctx, px_hsadmm_t *h, float *theta, const void *arg);
typedef struct {
  coupled_body_t body;
  const void *arg;
} coupled_job_t;

static int coupled_main(px_th_ctx_t *ctx) {
  const coupled_job_t *job = ctx->arg;
  px_comm_t *comm;
  PX_TH_OK(px_th_comm(ctx, NULL, &comm));
  coupled_t cp;
  px_hsadmm_t *h;
  PX_TH_OK(coupled_create(&cp, comm, &h));
  int rc = job->body(ctx, h, cp.theta, job->arg);
  px_hsadmm_destroy(h);
  px_comm_destroy(comm);
  return rc;
}

static int run_coupled(coupled_body_t body, const void *arg) {
  static const int nodes[4] = {0, 0, 1, 1};
  const coupled_job_t job = {body, arg};
  return px_th_run(4, nodes, coupled_main, &job, 120);
}

static int exact_freeze_rank(px_th_ctx_t *ctx, px_hsadmm_t *h, float *theta, const void *arg) {
  const int *exact = arg;
  px_hsadmm_set_exact_freeze(h, *exact);
  int at_freeze = 0;
  for (int round = 0; round < 4; round++) {
    PX_TH_OK(coupled_round(h, theta, round, ctx->rank));
    const uint8_t *ma = px_hsadmm_mask(h, 0), *mb = px_hsadmm_mask(h, 1);
    int kept = 0, nz = 0;
    for (int c = 0; c < 6; c++) {
      PX_TH_CHECK(ma[c] == mb[5 + c]);
      kept += ma[c];
      int any = a_filter_in_z(h, c);
      if (!ma[c]) PX_TH_CHECK(!any);
      nz += any;
    }
    /* z is projected until the freeze; after it, masked by the frozen masks */
    PX_TH_CHECK(nz <= (round >= 2 && !*exact ? at_freeze : 3));
    if (round == 1) at_freeze = kept;
    if (round >= 2) PX_TH_CHECK(px_hsadmm_frozen(h) && kept == (*exact ? 3 : at_freeze));
    int stop;
    PX_TH_OK(px_hsadmm_decide(h, round == 1 ? freeze_now : keep_going, NULL, &stop));
  }
  if (ctx->rank == 0) px_th_shared[0] = at_freeze;
  return 0;
}

static void test_exact_freeze_keeps_z_own_groups(void **state) {
  (void)state;
  for (int exact = 0; exact <= 1; exact++) {
    assert_int_equal(run_coupled(exact_freeze_rank, &exact), 0);
    print_message("exact freeze %d: the union held %.0f of 6 filters at the freeze\n", exact,
                  px_th_shared[0]);
    assert_true(px_th_shared[0] > 3); /* the nodes disagreed: the union held more */
  }
}

/* prune.ramp_iterations: the coupled pair at channel keep 0.5 with a ramp
 * of 4 rounds, a controller asking for the freeze every round. Round t's z
 * keeps exactly ceil((0.5 + 0.5 (1 - t/4)^3) 6) of A's filters (6, 5, 4, 4,
 * then 3), and the masks freeze after round 4, the first projected with the
 * target keep, not before (then z keeps the union of the nodes' choices,
 * 3 or more). */
static int ramp_rank(px_th_ctx_t *ctx, px_hsadmm_t *h, float *theta, const void *arg) {
  (void)arg;
  PX_TH_CHECK(px_hsadmm_set_keep_ramp(h, -1) == PX_ERR_INVALID);
  PX_TH_OK(px_hsadmm_set_keep_ramp(h, 4));
  const int want[6] = {6, 5, 4, 4, 3, 3};
  for (int round = 0; round < 6; round++) {
    PX_TH_OK(coupled_round(h, theta, round, ctx->rank));
    int nz = 0;
    for (int c = 0; c < 6; c++) nz += a_filter_in_z(h, c);
    /* once frozen, z keeps the union of the nodes' masks (at least z's own) */
    if (round <= 4 ? nz != want[round] : nz < want[round])
      PX_TH_FAIL("round %d: z keeps %d of A's 6 filters, want %d", round, nz, want[round]);
    int stop;
    PX_TH_OK(px_hsadmm_decide(h, freeze_now, NULL, &stop));
    PX_TH_CHECK(px_hsadmm_frozen(h) == (round >= 4));
  }
  return 0;
}

static void test_keep_ramp_falls_to_the_target_then_freezes(void **state) {
  (void)state;
  assert_int_equal(run_coupled(ramp_rank, NULL), 0);
}

int main(int argc, char **argv) {
  px_th_init(argc, argv);
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_converges_to_centralised_solution),
      cmocka_unit_test(test_flat_converges_to_centralised_solution),
      cmocka_unit_test(test_sparse_consensus_stays_in_set_and_freezes),
      cmocka_unit_test(test_rho_change_keeps_unscaled_duals),
      cmocka_unit_test(test_coupled_channels_take_their_filters),
      cmocka_unit_test(test_exact_freeze_keeps_z_own_groups),
      cmocka_unit_test(test_keep_ramp_falls_to_the_target_then_freezes),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
