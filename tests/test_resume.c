/* Checkpoints and resumption on 2 nodes x 2 real ranks (forked
 * processes, UCX on loopback), ResNet-20 on a subset of Fashion-MNIST:
 * - a run that dies after its checkpoint of iteration 2 (every rank exits
 *   at once, as kill -9 of the whole attempt would leave it) and is run
 *   again resumes from that checkpoint and ends with the same final model,
 *   bit for bit, as the same run uninterrupted: H-SADMM, DDP and Top-K,
 *   and H-SADMM whose leaders code their exchange without loss
 *   (comm.compress, against the uninterrupted run without it);
 * - a truncated newest checkpoint on one rank is named and skipped: every
 *   rank resumes from the previous one, still bit for bit;
 * - a node whose checkpoints are gone (a new node in a lost one's place)
 *   gets the global state from the others and restarts its own duals: the
 *   run resumes (after iteration 2, not from 0) and finishes with every rank
 *   agreeing bit for bit; when such a rank then cannot write, the problem
 *   says it holds no file of the newest complete checkpoint;
 * The checkpoint files' checksum and formats are test_resume_format's. */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cmocka.h>

#include "comm_harness.h"
#include "prunex/comm_internal.h"
#include "prunex/data.h"
#include "prunex/strategy.h"
#include "px_test_util.h"
#include "strategy/px_resume.h"


static char dir[256];

static int setup(void **state) {
  (void)state;
  return px_test_fmnist_fixture(dir, sizeof dir, "px_resume");
}

static int teardown(void **state) {
  (void)state;
  if (dir[0]) px_th_rmdir(dir);
  return 0;
}

typedef struct {
  px_strategy_kind_t kind;
  const char *tag;  /* checkpoint directories: <dir>/<tag>/node<N> */
  int die_after;    /* > 0: every rank exits after this iteration's checkpoint */
  int compress;     /* px_strategy_config_t.compress */
} scenario_t;

#define ITERS 4

/* rank 0's controller: freeze once the masks stop moving */
static px_status_t control(void *ctx, const px_iteration_t *it, px_hsadmm_decision_t *d) {
  (void)ctx;
  d->freeze = it->mask_drift == 0 && it->iteration > 0;
  return PX_OK;
}

static int nodes[4] = {0, 0, 1, 1};

/* The trainer, communicator and strategy configuration of a rank of the
 * scenario (the same for the interrupted and the resumed runs). */
static void rank_setup(px_th_ctx_t *ctx, const scenario_t *sc, px_trainer_t **t, px_comm_t **comm,
                       px_strategy_config_t *cfg, char *ck, size_t cap) {
  px_train_config_t tc;
  px_test_rank_train_config(&tc, dir, ctx->rank, ctx->size);
  tc.augment = 1; /* the augmentation draws must resume where they were too */
  *t = NULL;
  *comm = NULL;
  if (px_trainer_create(&tc, t) != PX_OK || px_th_comm(ctx, NULL, comm) != PX_OK) return;
  snprintf(ck, cap, "%s/%s/node%d", dir, sc->tag, nodes[ctx->rank]);
  memset(cfg, 0, sizeof *cfg);
  cfg->kind = sc->kind;
  cfg->iterations = ITERS;
  cfg->local_steps = 3;
  cfg->rho1 = cfg->rho2 = 1e-2;
  cfg->keep = (px_prune_keep_t){1.0, sc->kind == PX_STRATEGY_HSADMM ? 0.5 : 1.0, 1.0, 0, 0, 0};
  cfg->topk_ratio = 0.05;
  cfg->eval_every = 2;
  cfg->checkpoint_dir = ck;
  cfg->checkpoint_every = 1;
  cfg->checkpoint_keep = 2;
  cfg->compress = sc->compress;
}

static int rank_main(px_th_ctx_t *ctx) {
  const scenario_t *sc = ctx->arg;
  px_trainer_t *t;
  px_comm_t *comm;
  px_strategy_config_t cfg;
  char ck[512];
  rank_setup(ctx, sc, &t, &comm, &cfg, ck, sizeof ck);
  PX_TH_CHECK(t && comm);
  px_strategy_result_t res;
  PX_TH_OK(px_strategy_run(t, comm, &cfg, control, NULL, &res));
  PX_TH_CHECK(res.iterations == ITERS);
  px_model_t *m = px_trainer_model(t);
  uint64_t mine[2] = {px_test_fnv64(px_model_flat_params(m)->data, px_model_numel(m) * 4),
                      px_test_fnv64(&res.test_accuracy, sizeof(double))};
  uint64_t all[2 * PX_TH_MAX_RANKS];
  PX_TH_OK(px_comm_allgather(px_comm_group(comm, PX_GROUP_WORLD), mine, all, 16, PX_COMM_U8));
  for (int r = 0; r < ctx->size; r++) PX_TH_CHECK(all[2 * r] == mine[0] && all[2 * r + 1] == mine[1]);
  if (ctx->rank == 0) {
    px_th_shared[0] = (double)(mine[0] >> 32);
    px_th_shared[1] = (double)(mine[0] & 0xffffffffu);
    px_th_shared[2] = res.test_accuracy;
    px_th_shared[3] = res.resumed_from;
    px_th_shared[4] = res.checkpoints;
    px_th_shared[5] = res.checkpoint_complete;
    px_th_shared[6] = strstr(res.checkpoint_problem, "rank 3: ") != NULL;
    px_th_shared[7] = strstr(res.checkpoint_problem,
                             "(rank 3 holds no file of iteration 2; its newest: none)") != NULL;
    if (res.checkpoint_problem[0]) printf("checkpoint problem: %s\n", res.checkpoint_problem);
  }
  px_comm_destroy(comm);
  px_trainer_destroy(t);
  return 0;
}

/* The interrupted run: the checkpoints of iterations 0, 1 and 2 written, then
 * every rank gone (exit status 0 from inside the observer, nothing freed,
 * as after kill -9). */
static void ckpt_path(const char *tag, int node, int iteration, int rank, char *buf, size_t cap);

static px_status_t die_observe(void *ctx, const px_iteration_t *it) {
  const scenario_t *sc = ctx;
  /* the checkpoint of iteration k is taken after its observer and written
   * in the background: leave at the observer of k + 1 once it is on disk
   * (a kill before that loses it, and the one before is used: the
   * truncated-file test covers that) */
  if (it->iteration == (int)px_th_shared[40] + 1) {
    char p[600];
    ckpt_path(sc->tag, nodes[px_th_me], sc->die_after, px_th_me, p, sizeof p);
    for (int i = 0; i < 2000 && access(p, R_OK) != 0; i++) usleep(10000);
    fflush(stdout);
    fflush(stderr);
    _exit(0);
  }
  return PX_OK;
}

static int die_main(px_th_ctx_t *ctx) {
  const scenario_t *sc = ctx->arg;
  px_trainer_t *t;
  px_comm_t *comm;
  px_strategy_config_t cfg;
  char ck[512];
  rank_setup(ctx, sc, &t, &comm, &cfg, ck, sizeof ck);
  PX_TH_CHECK(t && comm);
  cfg.observe = die_observe;
  cfg.observe_ctx = (void *)sc;
  px_th_shared[40] = sc->die_after;
  px_strategy_result_t res;
  px_strategy_run(t, comm, &cfg, control, NULL, &res);
  return 1; /* never here */
}

static void run(const scenario_t *sc, double out[5]) {
  assert_int_equal(px_th_run(4, nodes, rank_main, sc, 300), 0);
  for (int i = 0; i < 5; i++) out[i] = px_th_shared[i];
  printf("%s/%s: test accuracy %.4f, resumed after iteration %.0f, %.0f checkpoints\n",
         px_strategy_name(sc->kind), sc->tag, out[2], out[3], out[4]);
}

static void die(const scenario_t *sc) {
  int codes[4];
  px_th_run_codes(4, nodes, die_main, sc, 300, codes);
  for (int r = 0; r < 4; r++) assert_int_equal(codes[r], 0);
}

static void ckpt_path(const char *tag, int node, int iteration, int rank, char *buf, size_t cap) {
  snprintf(buf, cap, "%s/%s/node%d/ckpt-%08d-r%d.safetensors", dir, tag, node, iteration, rank);
}

/* The uninterrupted run of a strategy, run once per kind and kept: what
 * it ends with does not depend on its checkpoint directory (tag), and the
 * tests of one kind compare against the same figures. */
static void run_reference(px_strategy_kind_t kind, const char *tag, double out[5]) {
  static double kept[8][5];
  static int have[8];
  int k = (int)kind;
  if (k >= 0 && k < 8 && have[k]) {
    for (int i = 0; i < 5; i++) out[i] = kept[k][i];
    printf("%s/%s: the uninterrupted run's figures (run once)\n", px_strategy_name(kind), tag);
    return;
  }
  scenario_t ref = {kind, tag, 0, 0};
  run(&ref, out);
  if (k >= 0 && k < 8) {
    for (int i = 0; i < 5; i++) kept[k][i] = out[i];
    have[k] = 1;
  }
}

/* Uninterrupted, then killed after iteration 2 and run again: the same
 * final model, resumed after iteration 2. compress: the interrupted and
 * resumed runs code the leaders' exchange without loss (their histories
 * restart at zero on the resume), the uninterrupted one does not. */
static void resume_matches(px_strategy_kind_t kind, const char *tag, int compress) {
  if (!dir[0]) skip();
  char ref_tag[64];
  snprintf(ref_tag, sizeof ref_tag, "%s-ref", tag);
  double a[5], b[5];
  run_reference(kind, ref_tag, a);
  assert_true(a[3] == -1); /* nothing to resume from */
  assert_true(a[4] == ITERS);
  scenario_t sc = {kind, tag, 2, compress};
  die(&sc);
  char p[600];
  ckpt_path(tag, 1, 2, 2, p, sizeof p);
  assert_int_equal(access(p, R_OK), 0);
  ckpt_path(tag, 1, 3, 2, p, sizeof p);
  assert_int_not_equal(access(p, R_OK), 0);
  run(&sc, b);
  assert_true(b[3] == 2);
  assert_true(b[0] == a[0] && b[1] == a[1] && b[2] == a[2]);
}

static void test_hsadmm_resumes_bitwise(void **state) {
  (void)state;
  resume_matches(PX_STRATEGY_HSADMM, "hs", 0);
}

static void test_hsadmm_lossless_resumes_bitwise(void **state) {
  (void)state;
  resume_matches(PX_STRATEGY_HSADMM, "hsll", 1);
}

static void test_ddp_resumes_bitwise(void **state) {
  (void)state;
  resume_matches(PX_STRATEGY_DDP, "ddp", 0);
}

static void test_topk_resumes_bitwise(void **state) {
  (void)state;
  resume_matches(PX_STRATEGY_TOPK, "topk", 0);
}

/* Truncated newest checkpoint of rank 1: every rank resumes after iteration
 * 1 instead, and the run still ends where the uninterrupted one does. */
static void test_truncated_checkpoint_uses_previous(void **state) {
  (void)state;
  if (!dir[0]) skip();
  double a[5], b[5];
  run_reference(PX_STRATEGY_HSADMM, "tr-ref", a);
  scenario_t sc = {PX_STRATEGY_HSADMM, "tr", 2, 0};
  die(&sc);
  char p[600];
  ckpt_path("tr", 0, 2, 1, p, sizeof p);
  struct stat sb;
  assert_int_equal(stat(p, &sb), 0);
  assert_int_equal(truncate(p, sb.st_size / 2), 0);
  run(&sc, b);
  assert_true(b[3] == 1);
  assert_true(b[0] == a[0] && b[1] == a[1] && b[2] == a[2]);
}

/* Node 1's checkpoints gone: it takes z, masks, penalties and position from
 * node 0 and restarts its duals; the run resumes after iteration 2 and
 * its ranks agree (checked in rank_main). */
static void test_new_node_resumes_from_shared_state(void **state) {
  (void)state;
  if (!dir[0]) skip();
  scenario_t sc = {PX_STRATEGY_HSADMM, "nn", 2, 0};
  die(&sc);
  char p[600];
  for (int it = 0; it <= 2; it++)
    for (int r = 2; r < 4; r++) {
      ckpt_path("nn", 1, it, r, p, sizeof p);
      assert_true(unlink(p) == 0 || (it == 0 && errno == ENOENT));
    }
  double b[5];
  run(&sc, b);
  assert_true(b[3] == 2);
  assert_true(b[2] >= 0 && b[2] <= 1); /* evaluated; its accuracy cost is measured by bench/recovery */
}

/* Node 1's checkpoints gone (a new node in a lost one's place), and rank 3
 * on it cannot write the checkpoint of iteration 3 (its name taken by a
 * directory): the newest checkpoint every rank holds stays iteration 2,
 * and the problem says that rank 3 holds no file of it, and none at all,
 * instead of leaving it to be read as rank 3's. */
static void test_a_new_nodes_rank_that_cannot_write_says_what_it_holds(void **state) {
  (void)state;
  if (!dir[0]) skip();
  scenario_t sc = {PX_STRATEGY_HSADMM, "nnw", 2, 0};
  die(&sc);
  char p[600];
  for (int it = 0; it <= 2; it++)
    for (int r = 2; r < 4; r++) {
      ckpt_path("nnw", 1, it, r, p, sizeof p);
      assert_true(unlink(p) == 0 || (it == 0 && errno == ENOENT));
    }
  ckpt_path("nnw", 1, 3, 3, p, sizeof p);
  assert_int_equal(mkdir(p, 0755), 0);
  double b[5];
  run(&sc, b);
  assert_true(b[3] == 2);
  assert_true(px_th_shared[5] == 2);
  assert_true(px_th_shared[6] == 1);
  assert_true(px_th_shared[7] == 1);
}

/* Files of one rank in a checkpoint directory. */
static int count_rank_files(const char *tag, int node, int rank, int *has0) {
  int n = 0;
  *has0 = 0;
  for (int it = 0; it < ITERS; it++) {
    char p[600];
    ckpt_path(tag, node, it, rank, p, sizeof p);
    struct stat sb;
    if (stat(p, &sb) == 0 && S_ISREG(sb.st_mode)) {
      n++;
      if (it == 0) *has0 = 1;
    }
  }
  return n;
}

/* Run `name` (dir/name/node0, node1): rank 3, on node 1, finds the names of
 * its checkpoints after iteration 0 taken by directories, as good as a full
 * disk for a rename. */
static void take_rank3_checkpoint_names(const char *name) {
  char p[600];
  snprintf(p, sizeof p, "%s/%s", dir, name);
  assert_int_equal(mkdir(p, 0755), 0);
  snprintf(p, sizeof p, "%s/%s/node1", dir, name);
  assert_int_equal(mkdir(p, 0755), 0);
  for (int it = 1; it < ITERS; it++) {
    ckpt_path(name, 1, it, 3, p, sizeof p);
    assert_int_equal(mkdir(p, 0755), 0);
  }
}

/* Rank 3 cannot write any checkpoint after iteration 0 (its file names are
 * taken by directories, as good as a full disk for a rename): the run goes
 * on, the healthy ranks keep at most keep (2) files plus iteration 0, the
 * newest that every rank holds, instead of every one; and the result says
 * that nothing after iteration 0 is usable, naming rank 3. */
static void test_one_rank_that_cannot_write_bounds_the_others_files(void **state) {
  (void)state;
  if (!dir[0]) skip();
  take_rank3_checkpoint_names("full");
  scenario_t sc = {PX_STRATEGY_HSADMM, "full", 0, 0};
  double out[5];
  run(&sc, out);
  assert_true(px_th_shared[5] == 0);   /* the newest complete checkpoint */
  assert_true(px_th_shared[6] == 1);   /* the problem names rank 3 */
  for (int r = 0; r < 3; r++) {
    int has0 = 0, n = count_rank_files("full", r < 2 ? 0 : 1, r, &has0);
    if (n > 3 || !has0) fail_msg("rank %d holds %d checkpoint files (iteration 0: %d)", r, n, has0);
  }
}

/* The same blocked rank with recovery.max_unprotected_iterations = 1: at
 * the checkpoint of iteration 2 the newest complete one (0) is 2 behind,
 * and every rank fails the run with the same error, naming rank 3, rather
 * than run on unprotected. */
static int unprotected_main(px_th_ctx_t *ctx) {
  const scenario_t *sc = ctx->arg;
  px_trainer_t *t;
  px_comm_t *comm;
  px_strategy_config_t cfg;
  char ck[512];
  rank_setup(ctx, sc, &t, &comm, &cfg, ck, sizeof ck);
  PX_TH_CHECK(t && comm);
  cfg.checkpoint_max_unprotected = 1;
  px_strategy_result_t res;
  px_status_t st = px_strategy_run(t, comm, &cfg, control, NULL, &res);
  const char *msg = px_last_error();
  if (st != PX_ERR_IO || !strstr(msg, "no usable checkpoint since iteration 0") ||
      !strstr(msg, "rank 3: ") || !strstr(msg, "max_unprotected_iterations = 1")) {
    fprintf(stderr, "rank %d: status %d: %s\n", ctx->rank, st, msg);
    return 1;
  }
  px_comm_destroy(comm);
  px_trainer_destroy(t);
  return 0;
}

static void test_a_run_without_usable_checkpoints_can_be_told_to_fail(void **state) {
  (void)state;
  if (!dir[0]) skip();
  take_rank3_checkpoint_names("unprot");
  scenario_t sc = {PX_STRATEGY_HSADMM, "unprot", 0, 0};
  assert_int_equal(px_th_run(4, nodes, unprotected_main, &sc, 300), 0);
}

int main(int argc, char **argv) {
  px_th_init(argc, argv);
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_hsadmm_resumes_bitwise),
      cmocka_unit_test(test_hsadmm_lossless_resumes_bitwise),
      cmocka_unit_test(test_ddp_resumes_bitwise),
      cmocka_unit_test(test_topk_resumes_bitwise),
      cmocka_unit_test(test_truncated_checkpoint_uses_previous),
      cmocka_unit_test(test_new_node_resumes_from_shared_state),
      cmocka_unit_test(test_one_rank_that_cannot_write_bounds_the_others_files),
      cmocka_unit_test(test_a_new_nodes_rank_that_cannot_write_says_what_it_holds),
      cmocka_unit_test(test_a_run_without_usable_checkpoints_can_be_told_to_fail),
  };
  return cmocka_run_group_tests(tests, setup, teardown);
}
