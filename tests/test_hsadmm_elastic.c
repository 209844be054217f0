/* Elastic H-SADMM: real ranks (forked, UCX on
 * loopback) of 3 nodes x 2 run the toy problem of hsadmm_toy.h with
 * adaptive penalties; one node's two processes are SIGKILLed in the middle
 * of the run. The survivors must notice within the bound (opts.lost_ms,
 * plus slack for a loaded host), agree on who is left, rebuild the groups
 * over the two nodes left, run the broken round again from where it began
 * and finish the run: their consensus models equal bit for bit, the loss
 * over the survivors still falls, and no rank restarts or reloads. A shrink
 * by decision (3 -> 2 nodes, no failure) gives, round for round, the
 * consensus of a fresh 2-node run; stale or bad member lists are refused
 * and leave the communicator as it was. */
#include <math.h>
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cmocka.h>

#include "comm_harness.h"
#include "hsadmm_toy.h"
#include "prunex/comm_internal.h"
#include "prunex/hsadmm.h"
#include "prunex/hsadmm_internal.h"
#include "px_check.h"
#include "px_test_util.h"

enum { DW = 6 * 5 * 3 * 3, DD = 300, D = DW + DD }; /* conv [6, 5, 3, 3] and a dense tail */
#define LAMBDA 0.05
#define LOST_MS 1500   /* the bound: a few toy rounds on a loaded 2-core host */
#define SLACK_MS 1500  /* scheduling on that host */
enum { ROUNDS = 16, KILL_AT = 5, VICTIM_NODE = 2, P = 2, NODES = 3 };
/* shared: [0] death time (ms), [8 + r] detection latency of rank r (ms),
 * [16 + r] z hash, [24 + k] loss after round k (rank 0), [48 + r] the
 * rank's lost node as reported, [56 + r] agreement + rebuild time (ms),
 * [64 + r] pid, [72 + r] whether the lost rank was seen gone (1) or silent */
enum { SH_DEATH = 0, SH_LAT = 8, SH_Z = 16, SH_LOSS = 24, SH_LOST = 48, SH_RB = 56, SH_PID = 64,
       SH_GONE = 72 };

static double target(int r, int j) {
  return px_th_val(41, 0, (size_t)j) + 0.25 * px_th_val(42, r, (size_t)j);
}

/* Residual balancing, a pure function of the round's figures (any rank can
 * be rank 0 after a rebuild), and a freeze near the end. */
static px_status_t balance(void *ctx, const px_hsadmm_round_t *rd, px_hsadmm_decision_t *d) {
  (void)ctx;
  for (int i = 0; i < rd->nlayers; i++) {
    const px_admm_layer_report_t *L = &rd->layers[i];
    if (L->r_inter > 4 * L->s_inter && d->rho2[i] < 8) d->rho2[i] *= 2;
    else if (L->s_inter > 4 * L->r_inter && d->rho2[i] > 0.125) d->rho2[i] /= 2;
    if (L->r_intra > 4 * L->s_intra && d->rho1[i] < 8) d->rho1[i] *= 2;
  }
  if (rd->iteration == ROUNDS - 4) d->freeze = 1;
  return PX_OK;
}

static uint64_t z_fnv(px_hsadmm_t *h) {
  return px_test_fnv64(px_hsadmm_z(h, 0), DW * 4) ^ 31 * px_test_fnv64(px_hsadmm_z(h, 1), DD * 4);
}

/* sum over the ranks of 1/2 |z - a_id|^2 (id: the rank's identity in the
 * job, its first rank) */
static px_status_t loss_of(px_hsadmm_t *h, px_group_t *world, int id, double *loss) {
  double l = 0;
  for (int i = 0; i < 2; i++) {
    const float *z = px_hsadmm_z(h, i);
    size_t o = i ? DW : 0, n = i ? DD : DW;
    for (size_t j = 0; j < n; j++) {
      double e = z[j] - target(id, (int)(o + j));
      l += 0.5 * e * e;
    }
  }
  PX_CHECK(px_comm_allreduce(world, &l, &l, 1, PX_COMM_F64, PX_COMM_SUM));
  *loss = l;
  return PX_OK;
}

static int stop_not_kill; /* the case stops its victims (SIGSTOP) instead */

static void die(void) {
  px_th_shared[SH_DEATH] = px_th_now_ms();
  raise(stop_not_kill ? SIGSTOP : SIGKILL);
}

/* The round after the local phase: sync, decision, loss; die_between: this
 * rank dies after its sync, before the decision. */
static px_status_t round_sync(px_hsadmm_t *h, px_comm_t *comm, int id, double *loss,
                              int die_between) {
  px_hsadmm_round_t *rd;
  int stop;
  PX_CHECK(px_hsadmm_sync(h, &rd));
  if (die_between) die();
  PX_CHECK(px_hsadmm_decide(h, balance, NULL, &stop));
  return loss_of(h, px_comm_group(comm, PX_GROUP_WORLD), id, loss);
}

/* After a broken round: who is left, the rebuild, the rollback. 0: go on;
 * 2: this rank's node was left out (a rank of it died); 1: failure. */
static int recover(px_th_ctx_t *ctx, px_kv_t *kv, px_comm_t **comm, px_hsadmm_t *h, int *epoch) {
  int node = -1, gone = 0;
  int lost = px_comm_lost(*comm, &node, &gone);
  px_th_shared[SH_LOST + ctx->rank] = node;
  px_th_shared[SH_GONE + ctx->rank] = gone;
  if (lost < 0) PX_TH_FAIL("the broken communicator names no lost rank");
  double t0 = px_th_now_ms();
  int nodes[8], nn = 0;
  (*epoch)++;
  px_status_t st = px_comm_survivors(*comm, kv, *epoch, 2 * LOST_MS, nodes, 8, &nn);
  if (st == PX_ERR_STATE) { /* fenced: the epoch was formed while this rank was stopped */
    px_comm_destroy(*comm);
    *comm = NULL;
    return 2;
  }
  PX_TH_OK(st);
  st = px_comm_rebuild(*comm, nodes, nn, *epoch, kv, comm);
  if (st == PX_ERR_STATE && *comm == NULL) return 2;
  PX_TH_OK(st);
  PX_TH_OK(px_hsadmm_rebind(h, *comm, 1));
  px_th_shared[SH_RB + ctx->rank] = px_th_now_ms() - t0;
  return 0;
}

typedef struct {
  int kill[6];  /* 1: the rank is SIGKILLed in round KILL_AT */
  int after;    /* 0: before its sync, 1: after it, before the decision */
  int decision; /* no kill: node 2 leaves by decision before round KILL_AT's sync */
  int stop;     /* SIGSTOP instead, and rank 0 SIGCONTs them at its end */
} kill_case_t;

/* The decision run's boundary: node 2 leaves. 2: this rank was left out. */
static int leave_by_decision(px_th_ctx_t *ctx, px_kv_t *kv, px_comm_t **comm, px_hsadmm_t *h,
                             int *epoch) {
  int keep[2] = {0, 1};
  px_status_t st = px_comm_rebuild(*comm, keep, 2, ++*epoch, kv, comm);
  if (ctx->node_of[ctx->rank] == VICTIM_NODE) {
    PX_TH_CHECK(st == PX_ERR_STATE && *comm == NULL);
    return 2;
  }
  PX_TH_OK(st);
  PX_TH_OK(px_hsadmm_rebind(h, *comm, 0));
  return 0;
}

static int rank_killed(px_th_ctx_t *ctx) {
  const kill_case_t *kc = ctx->arg;
  px_comm_opts_t o;
  px_comm_opts_default(&o);
  o.lost_ms = LOST_MS;
  o.timeout_ms = 20000;
  px_comm_t *comm;
  PX_TH_OK(px_th_comm(ctx, &o, &comm));
  px_kv_t *kv;
  PX_TH_OK(px_kv_open_dir(ctx->kvdir, &kv));
  static float theta[D]; /* every rank starts from zero */
  px_hsadmm_param_t params[2] = {
      {"w", theta, DW, 1, {6, 5, 3, 3}, 0, 0, 0},
      {"b", theta + DW, DD, 0, {0, 0, 0, 0}, 0, 0, 0},
  };
  px_hsadmm_config_t cfg = {0, 1.0, 0.5, LAMBDA, {1.0, 0.67, 1.0, 0, 0, 0}, 0};
  px_hsadmm_t *h;
  PX_TH_OK(px_hsadmm_create(comm, params, 2, &cfg, &h));
  PX_TH_OK(px_hsadmm_set_elastic(h, 1));
  int id = ctx->rank, epoch = 0, victim = kc->kill[ctx->rank];
  stop_not_kill = kc->stop;
  px_th_shared[SH_PID + ctx->rank] = getpid();
  for (int k = 0; k < ROUNDS; k++) {
    px_toy_local_solve(h, theta, DW, DD, target, id);
    if (victim && k == KILL_AT && !kc->after) die();
    int rc = 0;
    if (kc->decision && k == KILL_AT) rc = leave_by_decision(ctx, kv, &comm, h, &epoch);
    if (rc == 2) {
      px_hsadmm_destroy(h);
      px_kv_destroy(kv);
      return 42;
    }
    if (rc) return 1;
    double loss;
    px_status_t st = round_sync(h, comm, id, &loss, victim && k == KILL_AT && kc->after);
    if (st != PX_OK) {
      if (epoch > 0) PX_TH_FAIL("a second failure: %s", px_last_error());
      px_th_shared[SH_LAT + ctx->rank] = px_th_now_ms() - px_th_shared[SH_DEATH];
      rc = recover(ctx, kv, &comm, h, &epoch);
      if (rc == 2) { /* left out of epoch 1: leaves the job cleanly, no hang */
        px_hsadmm_destroy(h);
        px_kv_destroy(kv);
        return 42;
      }
      if (rc) return 1;
      PX_TH_OK(round_sync(h, comm, id, &loss, 0)); /* the broken round, over the survivors */
    }
    if (px_comm_rank(comm) == 0) px_th_shared[SH_LOSS + k] = loss;
  }
  PX_TH_CHECK(epoch == 1 && px_comm_size(comm) == 4 && px_comm_nnodes(comm) == 2);
  for (int r = 0; kc->stop && ctx->rank == 0 && r < 6; r++) /* wake them: they must be fenced */
    if (kc->kill[r]) kill((pid_t)px_th_shared[SH_PID + r], SIGCONT);
  PX_TH_CHECK(px_comm_prev_rank(comm, px_comm_rank(comm)) == ctx->rank);
  px_th_shared[SH_Z + ctx->rank] = (double)(z_fnv(h) >> 12);
  px_hsadmm_destroy(h);
  px_comm_destroy(comm);
  px_kv_destroy(kv);
  return 0;
}

/* Runs a case; answers rank 0's final z hash. */
static double run_kill(const kill_case_t *kc) {
  int nodes[6] = {0, 0, 1, 1, 2, 2}, codes[6];
  double t0 = px_th_now_ms();
  px_th_run_codes(6, nodes, rank_killed, kc, 90, codes);
  printf("run: %.0f ms\n", px_th_now_ms() - t0);
  for (int r = 0; r < 6; r++) {
    if (kc->kill[r]) { /* a stopped one, woken, found itself fenced and left */
      assert_int_equal(codes[r], kc->stop ? 42 : 128 + SIGKILL);
      continue;
    }
    if (kc->decision) {
      assert_int_equal(codes[r], nodes[r] == VICTIM_NODE ? 42 : 0);
      if (!codes[r]) assert_true(px_th_shared[SH_Z + r] == px_th_shared[SH_Z + 0]);
      continue;
    }
    printf("rank %d: detected node %.0f %s after %.0f ms (bound %d ms), agreed and rebuilt in "
           "%.0f ms\n", r, px_th_shared[SH_LOST + r], px_th_shared[SH_GONE + r] ? "gone" : "silent",
           px_th_shared[SH_LAT + r], LOST_MS, px_th_shared[SH_RB + r]);
    /* a dead process is named; a silent one may be named by a survivor that
     * waited on it, the others name whom they waited on */
    if (!kc->stop) assert_true(px_th_shared[SH_LOST + r] == VICTIM_NODE);
    assert_true(px_th_shared[SH_LAT + r] > 0 && px_th_shared[SH_LAT + r] < LOST_MS + SLACK_MS);
    if (nodes[r] == VICTIM_NODE) { /* the dead rank's node mate: left out, cleanly */
      assert_int_equal(codes[r], 42);
      continue;
    }
    assert_int_equal(codes[r], 0);
    assert_true(px_th_shared[SH_Z + r] == px_th_shared[SH_Z + 0]);
  }
  for (int k = 0; k < ROUNDS; k++) printf("round %2d: loss %.6f\n", k, px_th_shared[SH_LOSS + k]);
  /* falling before the loss (3 nodes' targets) and after it (2 nodes') */
  assert_true(px_th_shared[SH_LOSS + KILL_AT - 1] < px_th_shared[SH_LOSS + 0]);
  assert_true(px_th_shared[SH_LOSS + ROUNDS - 1] < px_th_shared[SH_LOSS + KILL_AT]);
  return px_th_shared[SH_Z + 0];
}

/* what a loss must end as: node 2 left by decision at round KILL_AT's boundary */
static double reference_z(void) {
  static double z = -1;
  static const kill_case_t by_decision = {{0}, 0, 1, 0};
  if (z < 0) z = run_kill(&by_decision);
  return z;
}

static void test_killed_node_is_dropped_and_the_survivors_finish(void **state) {
  (void)state;
  static const kill_case_t whole = {{0, 0, 0, 0, 1, 1}, 0, 0, 0};
  double ref = reference_z();
  assert_true(run_kill(&whole) == ref);
}

/* one rank of node 2 dies: its node mate is left out with it (whole nodes) */
static void test_killed_rank_drops_its_node(void **state) {
  (void)state;
  static const kill_case_t one = {{0, 0, 0, 0, 0, 1}, 0, 0, 0};
  double ref = reference_z();
  assert_true(run_kill(&one) == ref);
}

/* node 2 dies after the round's sync completed everywhere, in the decision:
 * the survivors go back to the round's start and end as the others do */
static void test_killed_in_the_decision_rolls_the_round_back(void **state) {
  (void)state;
  static const kill_case_t late = {{0, 0, 0, 0, 1, 1}, 1, 0, 0};
  double ref = reference_z();
  assert_true(run_kill(&late) == ref);
}

/* node 2 stops (SIGSTOP): silent for lost_ms, it is dropped like a dead one;
 * woken after the survivors rebuilt, it finds the epoch formed without it
 * and leaves, and the survivors' consensus is untouched */
static void test_stopped_node_is_dropped_and_fenced(void **state) {
  (void)state;
  static const kill_case_t stopped = {{0, 0, 0, 0, 1, 1}, 0, 0, 1};
  double ref = reference_z();
  assert_true(run_kill(&stopped) == ref);
}

/* A toy rank of these tests: its communicator, the store, the conv and
 * dense parameters over theta, the config, the handle (elastic: with the
 * elastic copy). */
static float theta[D];
static px_hsadmm_param_t params[2] = {
    {"w", theta, DW, 1, {6, 5, 3, 3}, 0, 0, 0},
    {"b", theta + DW, DD, 0, {0, 0, 0, 0}, 0, 0, 0},
};
static px_hsadmm_config_t cfg = {0, 1.0, 0.5, LAMBDA, {1.0, 0.67, 1.0, 0, 0, 0}, 0};

static int toy_rank(px_th_ctx_t *ctx, int elastic, px_comm_t **comm, px_kv_t **kv,
                    px_hsadmm_t **h) {
  PX_TH_OK(px_th_comm(ctx, NULL, comm));
  PX_TH_OK(px_kv_open_dir(ctx->kvdir, kv));
  PX_TH_OK(px_hsadmm_create(*comm, params, 2, &cfg, h));
  if (elastic) PX_TH_OK(px_hsadmm_set_elastic(*h, 1));
  return 0;
}

/* ---- a shrink by decision equals a fresh run over the nodes left ------------------ */

enum { SHRINK_ROUNDS = 6 };

typedef struct {
  int shrink; /* 1: start on 3 nodes and drop node 0 before round 0 */
} shrink_case_t;

/* Bad lists are refused and leave the communicator usable. */
static int refuse_bad_lists(px_comm_t *comm, px_kv_t *kv) {
  px_comm_t *out = comm;
  int stale[2] = {1, 2}, twice[2] = {1, 1}, unknown[2] = {1, 7};
  PX_TH_CHECK(px_comm_rebuild(comm, stale, 2, 0, kv, &out) == PX_ERR_INVALID && out == comm);
  PX_TH_CHECK(px_comm_rebuild(comm, twice, 2, 1, kv, &out) == PX_ERR_INVALID && out == comm);
  PX_TH_CHECK(px_comm_rebuild(comm, unknown, 2, 1, kv, &out) == PX_ERR_INVALID && out == comm);
  PX_TH_OK(px_comm_barrier(px_comm_group(comm, PX_GROUP_WORLD)));
  return 0;
}

static int rank_shrink(px_th_ctx_t *ctx) {
  const shrink_case_t *sc = ctx->arg;
  px_comm_t *comm;
  px_kv_t *kv;
  px_hsadmm_t *h;
  if (toy_rank(ctx, 0, &comm, &kv, &h)) return 1;
  int id = ctx->rank; /* identity: the rank in the 3-node job */
  if (sc->shrink) {
    if (refuse_bad_lists(comm, kv)) return 1;
    int keep[2] = {2, 1};
    px_status_t st = px_comm_rebuild(comm, keep, 2, 1, kv, &comm);
    if (ctx->node_of[ctx->rank] == 0) { /* left out: leaves cleanly */
      PX_TH_CHECK(st == PX_ERR_STATE && comm == NULL);
      px_hsadmm_destroy(h);
      px_kv_destroy(kv);
      return 0;
    }
    PX_TH_OK(st);
    PX_TH_CHECK(px_comm_node(comm) == ctx->node_of[ctx->rank] && px_comm_epoch(comm) == 1);
    PX_TH_CHECK(px_comm_prev_rank(comm, px_comm_rank(comm)) == ctx->rank);
    PX_TH_OK(px_hsadmm_rebind(h, comm, 0));
  } else {
    id = ctx->rank + P; /* the fresh 2-node run plays the 3-node job's nodes 1 and 2 */
  }
  for (int k = 0; k < SHRINK_ROUNDS; k++) {
    px_toy_local_solve(h, theta, DW, DD, target, id);
    double loss;
    PX_TH_OK(round_sync(h, comm, id, &loss, 0));
    px_th_shared[8 * px_comm_rank(comm) + k] = (double)(z_fnv(h) >> 12);
  }
  px_th_shared[40 + px_comm_rank(comm)] = px_toy_state_hash(h, DW, DD);
  px_hsadmm_destroy(h);
  px_comm_destroy(comm);
  px_kv_destroy(kv);
  return 0;
}

static void test_shrink_by_decision_equals_a_fresh_run(void **state) {
  (void)state;
  double shrunk[4][SHRINK_ROUNDS], fresh[4][SHRINK_ROUNDS], sh_state[4], fr_state[4];
  int three[6] = {0, 0, 1, 1, 2, 2}, two[4] = {0, 0, 1, 1};
  static const shrink_case_t on = {1}, off = {0};
  double t0 = px_th_now_ms();
  assert_int_equal(px_th_run(6, three, rank_shrink, &on, 60), 0);
  for (int r = 0; r < 4; r++) {
    sh_state[r] = px_th_shared[40 + r];
    for (int k = 0; k < SHRINK_ROUNDS; k++) shrunk[r][k] = px_th_shared[8 * r + k];
  }
  assert_int_equal(px_th_run(4, two, rank_shrink, &off, 60), 0);
  printf("both runs: %.0f ms\n", px_th_now_ms() - t0);
  for (int r = 0; r < 4; r++) {
    fr_state[r] = px_th_shared[40 + r];
    for (int k = 0; k < SHRINK_ROUNDS; k++) fresh[r][k] = px_th_shared[8 * r + k];
  }
  for (int r = 0; r < 4; r++) {
    for (int k = 0; k < SHRINK_ROUNDS; k++) {
      assert_true(shrunk[r][k] == fresh[r][k]);
      assert_true(shrunk[r][k] == shrunk[0][k]);
    }
    printf("rank %d: state hash shrunk %.0f, fresh %.0f\n", r, sh_state[r], fr_state[r]);
    assert_true(sh_state[r] == fr_state[r]);
  }
}

/* ---- a drop does not move the consensus by the lost node's dual -------------------- */

enum { RECENTER_AFTER = 6 };
/* shared (this test): [r] max |z - mean of the members' z_i| over the dense
 * tail after the first round without node 2, [8 + r] max |v| there before it */

/* 3 nodes x 2 run RECENTER_AFTER rounds (their targets differ: the node
 * duals are far from zero), node 2 leaves by decision, and the members run
 * one more round. Its z must be the mean of the members' z_i in the
 * unprojected tail: the members' duals re-centred, not z moved by minus
 * the lost dual over the two. Flat (arg 1): z = rho1 sum(theta) / (lambda +
 * N rho1) over the members' ranks, their u re-centred. */
static int rank_recenter(px_th_ctx_t *ctx) {
  int flat = *(const int *)ctx->arg;
  cfg.flat = flat; /* one process per rank */
  px_comm_t *comm;
  px_kv_t *kv;
  px_hsadmm_t *h;
  if (toy_rank(ctx, 1, &comm, &kv, &h)) return 1;
  double loss;
  for (int k = 0; k < RECENTER_AFTER; k++) {
    px_toy_local_solve(h, theta, DW, DD, target, ctx->rank);
    PX_TH_OK(round_sync(h, comm, ctx->rank, &loss, 0));
  }
  const float *u, *v, *zi, *uu;
  float rho;
  px_hsadmm_duals(h, 1, &u, &v);
  double vmax = 0;
  for (int j = 0; j < DD; j++) vmax = fmax(vmax, fabs(flat ? u[j] : v[j]));
  px_th_shared[8 + ctx->rank] = vmax;
  int keep[2] = {0, 1};
  px_status_t st = px_comm_rebuild(comm, keep, 2, 1, kv, &comm);
  if (ctx->node_of[ctx->rank] == 2) { /* left out */
    PX_TH_CHECK(st == PX_ERR_STATE && comm == NULL);
    px_hsadmm_destroy(h);
    px_kv_destroy(kv);
    return 0;
  }
  PX_TH_OK(st);
  PX_TH_OK(px_hsadmm_rebind(h, comm, 0));
  px_toy_local_solve(h, theta, DW, DD, target, ctx->rank);
  double rho1 = px_hsadmm_rho1(h, 1); /* the sync's (the decision after it may change it) */
  static float mean[DD];
  memcpy(mean, theta + DW, sizeof mean);
  PX_TH_OK(round_sync(h, comm, ctx->rank, &loss, 0));
  if (!flat) {
    px_hsadmm_prox(h, 1, &zi, &uu, &rho);
    memcpy(mean, zi, sizeof mean);
  }
  px_group_t *world = px_comm_group(comm, PX_GROUP_WORLD);
  PX_TH_OK(px_comm_allreduce(world, mean, mean, DD, PX_COMM_F32, PX_COMM_SUM));
  int N = px_group_size(world);
  double f = flat ? rho1 / (LAMBDA + N * rho1) : 1.0 / N;
  const float *z = px_hsadmm_z(h, 1);
  double d = 0;
  for (int j = 0; j < DD; j++) d = fmax(d, fabs(z[j] - f * mean[j]));
  px_th_shared[px_comm_rank(comm)] = d;
  px_hsadmm_destroy(h);
  px_comm_destroy(comm);
  px_kv_destroy(kv);
  return 0;
}

static void test_a_drop_recentres_the_node_duals(void **state) {
  (void)state;
  int three[6] = {0, 0, 1, 1, 2, 2};
  for (int flat = 0; flat < 2; flat++) {
    assert_int_equal(px_th_run(6, three, rank_recenter, &flat, 60), 0);
    for (int r = 0; r < 4; r++) {
      printf("%s: member rank %d: |z - the members' mean| %.3g (duals up to %.3g before the "
             "drop)\n", flat ? "flat" : "hierarchical", r, px_th_shared[r], px_th_shared[8 + r]);
      assert_true(px_th_shared[8 + r] > 0.05); /* a drop without re-centring would show */
      assert_true(px_th_shared[r] < 1e-5);
    }
  }
}

/* ---- a node joins at a boundary --------------------------------------------------- */

enum { JOIN_BEFORE = 4, JOIN_ROUNDS = 8 };
/* shared (this test): [r] z hash after the join, [8 + r] masks and penalties hash,
 * [16 + r] 1: the joiner's z_i equals z and its duals are zero, [24 + r] round number of
 * the first round after the join, [32 + r] final z hash, [40 + k] loss after round k */

/* Residual balancing as above, and the freeze before the join (the joiner
 * must take the frozen masks). */
static px_status_t balance_early(void *ctx, const px_hsadmm_round_t *rd,
                                 px_hsadmm_decision_t *d) {
  PX_CHECK(balance(ctx, rd, d));
  d->freeze = rd->iteration >= JOIN_BEFORE - 2;
  return PX_OK;
}

/* The masks' densities, the penalties and the freeze flag, hashed. */
static double masks_rho_hash(px_hsadmm_t *h) {
  double v[7] = {px_hsadmm_density(h, 0), px_hsadmm_density(h, 1), px_hsadmm_rho1(h, 0),
                 px_hsadmm_rho1(h, 1), px_hsadmm_rho2(h, 0), px_hsadmm_rho2(h, 1),
                 px_hsadmm_frozen(h)};
  return (double)(px_test_fnv64(v, sizeof v) >> 12);
}

/* A joining rank's own state: z_i = z, u = v = 0. */
static int fresh_state(px_hsadmm_t *h) {
  for (int i = 0; i < 2; i++) {
    const float *z = px_hsadmm_z(h, i), *zi, *u, *v, *uu;
    float rho;
    px_hsadmm_prox(h, i, &zi, &uu, &rho);
    px_hsadmm_duals(h, i, &u, &v);
    for (size_t j = 0; j < (size_t)(i ? DD : DW); j++)
      if (zi[j] != z[j] || u[j] != 0 || v[j] != 0) return 0;
  }
  return 1;
}

/* The handle of this rank at the join: the kept ranks rebuild over the
 * three nodes and rebind theirs; node 2's ranks (left out at the start)
 * meet them through px_comm_join with a new handle (toy_rank's
 * parameters). */
static int join_epoch(px_th_ctx_t *ctx, px_kv_t *kv, px_comm_t **comm, px_hsadmm_t **h) {
  int all[3] = {2, 0, 1};
  if (ctx->node_of[ctx->rank] != VICTIM_NODE) {
    PX_TH_OK(px_comm_rebuild_join(*comm, all, 3, 2, kv, comm));
    PX_TH_OK(px_hsadmm_rebind(*h, *comm, 0));
    PX_TH_OK(px_hsadmm_join(*h, 0, 0));
    return 0;
  }
  px_comm_opts_t o;
  px_comm_opts_default(&o);
  o.key_prefix = "test/c0"; /* the job's first prefix (px_th_comm's) */
  PX_TH_OK(px_comm_join(kv, &o, VICTIM_NODE, ctx->rank - 2 * P, 2, 30000, comm));
  PX_TH_CHECK(px_comm_rank(*comm) == ctx->rank && px_comm_epoch(*comm) == 2);
  PX_TH_CHECK(px_comm_prev_rank(*comm, ctx->rank) == -1 && px_comm_prev_rank(*comm, 1) == 1);
  PX_TH_OK(px_hsadmm_create_joining(*comm, params, 2, &cfg, h));
  PX_TH_OK(px_hsadmm_set_elastic(*h, 1));
  PX_TH_OK(px_hsadmm_join(*h, 0, 1));
  px_th_shared[16 + ctx->rank] = fresh_state(*h);
  return 0;
}

/* 3 nodes x 2; node 2 is left out before round 0 and joins before round
 * JOIN_BEFORE; the kept ranks trained in between (penalties balanced, masks
 * frozen). */
static int rank_join(px_th_ctx_t *ctx) {
  px_comm_t *comm;
  px_kv_t *kv;
  px_hsadmm_t *h;
  if (toy_rank(ctx, 1, &comm, &kv, &h)) return 1;
  int keep[2] = {0, 1}, joiner = ctx->node_of[ctx->rank] == VICTIM_NODE;
  px_status_t st = px_comm_rebuild(comm, keep, 2, 1, kv, &comm);
  PX_TH_CHECK(joiner ? st == PX_ERR_STATE && comm == NULL : st == PX_OK);
  if (joiner) px_hsadmm_destroy(h);
  else PX_TH_OK(px_hsadmm_rebind(h, comm, 0));
  for (int k = 0; k < JOIN_ROUNDS; k++) {
    if (k == JOIN_BEFORE && join_epoch(ctx, kv, &comm, &h)) return 1;
    if (joiner && k < JOIN_BEFORE) continue;
    if (k == JOIN_BEFORE) {
      px_th_shared[ctx->rank] = (double)(z_fnv(h) >> 12);
      px_th_shared[8 + ctx->rank] = masks_rho_hash(h);
    }
    px_toy_local_solve(h, theta, DW, DD, target, ctx->rank);
    px_hsadmm_round_t *rd;
    int stop;
    double loss;
    PX_TH_OK(px_hsadmm_sync(h, &rd));
    if (k == JOIN_BEFORE) px_th_shared[24 + ctx->rank] = rd->iteration;
    PX_TH_OK(px_hsadmm_decide(h, balance_early, NULL, &stop));
    PX_TH_OK(loss_of(h, px_comm_group(comm, PX_GROUP_WORLD), ctx->rank, &loss));
    if (ctx->rank == 0) px_th_shared[40 + k] = loss;
  }
  px_th_shared[32 + ctx->rank] = (double)(z_fnv(h) >> 12);
  px_hsadmm_destroy(h);
  px_comm_destroy(comm);
  px_kv_destroy(kv);
  return 0;
}

/* Node 2's ranks take z, the frozen masks, the balanced penalties and the
 * round number from rank 0 exactly, start their node's consensus at z and
 * their duals at zero, and the six ranks then run on together: one
 * consensus, the loss over the three nodes' targets falling. */
static void test_joining_node_takes_the_state_and_runs_on(void **state) {
  (void)state;
  int nodes[6] = {0, 0, 1, 1, 2, 2};
  double t0 = px_th_now_ms();
  assert_int_equal(px_th_run(6, nodes, rank_join, NULL, 60), 0);
  printf("join run: %.0f ms\n", px_th_now_ms() - t0);
  for (int r = 0; r < 6; r++) {
    assert_true(px_th_shared[r] == px_th_shared[0]);
    assert_true(px_th_shared[8 + r] == px_th_shared[8]);
    assert_true(px_th_shared[24 + r] == px_th_shared[24]);
    assert_true(px_th_shared[32 + r] == px_th_shared[32]);
    if (nodes[r] == VICTIM_NODE) assert_true(px_th_shared[16 + r] == 1);
  }
  for (int k = JOIN_BEFORE; k < JOIN_ROUNDS; k++)
    printf("round %d: loss %.6f\n", k, px_th_shared[40 + k]);
  assert_true(px_th_shared[40 + JOIN_ROUNDS - 1] < px_th_shared[40 + JOIN_BEFORE]);
}

int main(int argc, char **argv) {
  px_th_init(argc, argv);
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_shrink_by_decision_equals_a_fresh_run),
      cmocka_unit_test(test_a_drop_recentres_the_node_duals),
      cmocka_unit_test(test_killed_node_is_dropped_and_the_survivors_finish),
      cmocka_unit_test(test_killed_rank_drops_its_node),
      cmocka_unit_test(test_killed_in_the_decision_rolls_the_round_back),
      cmocka_unit_test(test_stopped_node_is_dropped_and_fenced),
      cmocka_unit_test(test_joining_node_takes_the_state_and_runs_on),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
