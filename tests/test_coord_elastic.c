/* Elastic jobs in pxcoordd (membership.c): every placement starts
 * membership epoch 1 with its nodes and the round's decision carries the
 * epoch in force next; an elastic job that loses a node (its agent gone
 * past the grace, a worker dead) with min_nodes left goes on, the node
 * dropped at once and the epoch without it made at the next round boundary
 * only; a rank of the old epoch or of the dropped node is fenced
 * (FAILED_PRECONDITION naming the epoch) on ReportIteration, KvPut and
 * ReportRankExit; below min_nodes the job restarts as any other; a node
 * lost twice within the window is not taken back for the cooldown; and the
 * spec's elastic section is checked. Real pxcoordd on loopback with real
 * SQLite, agents and ranks played through the RPC API. */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>

#include <cmocka.h>

#include "prunex/jobspec.h"
#include "pxctl_harness.h"

#define JS(x) PRUNEX__V1__JOB_STATE__JOB_STATE_##x
#define NS(x) PRUNEX__V1__NODE_STATE__NODE_STATE_##x
#define START PRUNEX__V1__ASSIGNMENT_ACTION__ASSIGNMENT_ACTION_START
#define CANCEL PRUNEX__V1__ASSIGNMENT_ACTION__ASSIGNMENT_ACTION_CANCEL

typedef struct {
  pxt_coordd_t d;
  px_rpc_channel_t *ch;
} fixture_t;

static int setup(void **state) {
  fixture_t *f = calloc(1, sizeof *f);
  static const char *const extra[] = {"--agent-grace-ms", "300", "--placement-timeout-ms",
                                      "20000", "--blacklist-cooldown-ms", "1500", NULL};
  if (!f || pxt_coordd_setup(&f->d, extra) != 0) {
    free(f);
    return -1;
  }
  if (px_rpc_channel_create(f->d.target, &f->ch) != PX_OK) return -1;
  *state = f;
  return 0;
}

static int teardown(void **state) {
  fixture_t *f = *state;
  px_rpc_channel_destroy(f->ch);
  int rc = pxt_coordd_teardown(&f->d);
  free(f);
  return rc;
}

static int64_t wall_ms(void) {
  struct timespec ts;
  clock_gettime(CLOCK_REALTIME, &ts);
  return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

static Prunex__V1__Job *get_job(px_rpc_channel_t *ch, const char *job) {
  Prunex__V1__Job *j = NULL;
  assert_int_equal(px_rpc_get_job(ch, job, 0, &j), PX_OK);
  return j;
}

/* Registers nodes names[0..n) (one device each) and opens their assignment
 * streams, as their agents would. */
static void nodes_up(fixture_t *f, int n, const char *const *names, char ids[][64],
                     px_rpc_stream_t **streams) {
  for (int i = 0; i < n; i++)
    assert_int_equal(pxt_register(f->ch, names[i], 1, 0, ids[i], 64), PX_OK);
  for (int i = 0; i < n; i++)
    assert_int_equal(px_rpc_watch_assignments(f->ch, ids[i], &streams[i]), PX_OK);
}

/* Submits an hsadmm job of nodes x 1 worker, elastic down to min_nodes (0:
 * not elastic), with max_restarts. */
/* comm.timeout_ms of the jobs submit() makes (0: not said, 60 s) */
static int32_t spec_timeout_ms;

static void submit(fixture_t *f, int nodes, int min_nodes, int max_restarts, char *job,
                   size_t cap) {
  pxt_spec_t s;
  pxt_spec_init(&s, nodes, 1);
  Prunex__V1__CommSpec comm = PRUNEX__V1__COMM_SPEC__INIT;
  comm.timeout_ms = spec_timeout_ms;
  if (spec_timeout_ms) s.spec.comm = &comm;
  Prunex__V1__RecoverySpec rec = PRUNEX__V1__RECOVERY_SPEC__INIT;
  rec.max_restarts = max_restarts;
  s.spec.recovery = &rec;
  Prunex__V1__ElasticSpec el = PRUNEX__V1__ELASTIC_SPEC__INIT;
  el.min_nodes = min_nodes;
  if (min_nodes) s.spec.elastic = &el;
  assert_int_equal(pxt_submit(f->ch, &s, job, cap), PX_OK);
}

static void expect(px_rpc_stream_t *s, int action, int attempt, const char *job) {
  Prunex__V1__Assignment *a = pxt_next_assignment(s, 5000);
  assert_non_null(a);
  assert_string_equal(a->job_id, job);
  if ((int)a->action != action || a->attempt != attempt)
    fail_msg("assignment: action %d attempt %d, expected action %d attempt %d", (int)a->action,
             a->attempt, action, attempt);
  px_rpc_message_free(a);
}

/* ReportIteration of one layer by rank in epoch, a survivor's roll-call
 * repeat when roll_call: the px status, the decision into *out (may be
 * NULL: freed). */
static px_status_t report_as(fixture_t *f, const char *job, int rank, int iteration, int epoch,
                             int roll_call, Prunex__V1__ControlDecision **out) {
  Prunex__V1__LayerMetrics L = PRUNEX__V1__LAYER_METRICS__INIT, *lp = &L;
  L.name = "conv1.weight";
  L.r_intra = L.s_intra = L.r_inter = L.s_inter = 1.0;
  L.rho1 = L.rho2 = 1.0;
  L.density = 1.0;
  L.numel = 100;
  Prunex__V1__IterationReport r = PRUNEX__V1__ITERATION_REPORT__INIT;
  r.job_id = (char *)job;
  r.rank = rank;
  r.iteration = iteration;
  r.test_accuracy = -1;
  r.n_layers = 1;
  r.layers = &lp;
  r.membership_epoch = epoch;
  r.roll_call = roll_call;
  Prunex__V1__ControlDecision *d = NULL;
  px_status_t st = px_rpc_report_iteration(f->ch, &r, 0, &d);
  if (out) *out = d;
  else px_rpc_message_free(d);
  return st;
}

static px_status_t report(fixture_t *f, const char *job, int rank, int iteration, int epoch,
                          Prunex__V1__ControlDecision **out) {
  return report_as(f, job, rank, iteration, epoch, 0, out);
}

static px_status_t rank_exit(fixture_t *f, const char *job, const char *node, int rank,
                             int attempt, int code, int sig) {
  Prunex__V1__RankExit req = PRUNEX__V1__RANK_EXIT__INIT;
  req.job_id = (char *)job;
  req.node_id = (char *)node;
  req.rank = rank;
  req.attempt = attempt;
  req.exit_code = code;
  req.signal = sig;
  req.reason = sig ? "pxworker was killed by signal 9 (Killed)" : "pxworker exited";
  return px_rpc_report_rank_exit(f->ch, &req, 0);
}

static px_status_t kv_put(fixture_t *f, const char *job, int epoch) {
  Prunex__V1__KvPutRequest req = PRUNEX__V1__KV_PUT_REQUEST__INIT;
  req.job_id = (char *)job;
  req.key = "addr/0";
  req.value.data = (uint8_t *)"x";
  req.value.len = 1;
  req.membership_epoch = epoch;
  return px_rpc_kv_put(f->ch, &req, 0);
}

/* The call just made was refused FAILED_PRECONDITION with a message holding
 * both texts. */
static void expect_fenced(px_status_t st, const char *a, const char *b) {
  assert_int_equal(st, PX_ERR_STATE);
  assert_int_equal(px_rpc_last_code(), PX_RPC_FAILED_PRECONDITION);
  if (!strstr(px_last_error(), a) || !strstr(px_last_error(), b))
    fail_msg("refusal: %s (expected '%s' and '%s')", px_last_error(), a, b);
}

/* The decision's membership: epoch, from_iteration and the members as
 * their indexes, e.g. "0,2". */
static void expect_members(const Prunex__V1__ControlDecision *d, int epoch, int from,
                           const char *indexes, char ids[][64]) {
  char got[64] = "";
  size_t u = 0;
  for (size_t i = 0; i < d->n_member_node_indexes; i++)
    u += (size_t)snprintf(got + u, sizeof got - u, "%s%d", i ? "," : "",
                          d->member_node_indexes[i]);
  if (d->membership_epoch != epoch || d->membership_from_iteration != from || strcmp(got, indexes))
    fail_msg("decision of iteration %d: epoch %d from %d members %s; expected %d from %d %s",
             d->iteration, d->membership_epoch, d->membership_from_iteration, got, epoch, from,
             indexes);
  assert_int_equal(d->n_member_node_ids, d->n_member_node_indexes);
  for (size_t i = 0; i < d->n_member_node_ids; i++)
    assert_string_equal(d->member_node_ids[i], ids[d->member_node_indexes[i]]);
}

/* A 3-node elastic job (min 2) placed and in its first rounds. */
static void start_three(fixture_t *f, char ids[][64], px_rpc_stream_t **s, char *job,
                        size_t cap) {
  nodes_up(f, 3, (const char *const[]){"n1", "n2", "n3"}, ids, s);
  submit(f, 3, 2, 0, job, cap);
  for (int i = 0; i < 3; i++) expect(s[i], START, 1, job);
  Prunex__V1__ControlDecision *d = NULL;
  assert_int_equal(report(f, job, 0, 0, 1, &d), PX_OK);
  expect_members(d, 1, 0, "0,1,2", ids);
  px_rpc_message_free(d);
}

/* After n2 was lost: the job goes on, epoch 2 only from the next round
 * boundary, and the old epoch and the dropped node are fenced. */
static void check_dropped_n2(fixture_t *f, char ids[][64], const char *job, const char *cause) {
  Prunex__V1__Job *j = get_job(f->ch, job);
  if (j->state != JS(RUNNING) || j->attempt != 1 || j->n_attempts != 0)
    fail_msg("state %d attempt %d (%zu ended): %s", (int)j->state, j->attempt, j->n_attempts,
             j->reason);
  assert_int_equal(j->n_node_ids, 2);
  assert_string_equal(j->node_ids[0], ids[0]);
  assert_string_equal(j->node_ids[1], ids[2]);
  assert_int_equal(j->n_memberships, 1); /* no round boundary yet */
  px_rpc_message_free(j);
  /* a report of the round under way: epoch 1 is in force for it */
  Prunex__V1__ControlDecision *d = NULL;
  assert_int_equal(report(f, job, 0, 1, 1, &d), PX_OK);
  expect_members(d, 2, 2, "0,2", ids);
  px_rpc_message_free(d);
  assert_int_equal(report(f, job, 2, 1, 1, &d), PX_OK); /* another rank: the same */
  expect_members(d, 2, 2, "0,2", ids);
  px_rpc_message_free(d);
  j = get_job(f->ch, job);
  assert_int_equal(j->n_memberships, 2);
  assert_int_equal(j->memberships[1]->epoch, 2);
  assert_int_equal(j->memberships[1]->from_iteration, 2);
  assert_int_equal(j->memberships[1]->n_node_ids, 2);
  if (!strstr(j->memberships[1]->reason, "node n2") || !strstr(j->memberships[1]->reason, cause))
    fail_msg("epoch 2's reason: %s", j->memberships[1]->reason);
  px_rpc_message_free(j);
  /* fencing: the old epoch in the next round, the dropped node's rank */
  expect_fenced(report(f, job, 0, 2, 1, NULL), "epoch 1", "epoch 2");
  expect_fenced(report(f, job, 1, 1, 1, NULL), "rank 1", "not a member of membership epoch");
  expect_fenced(kv_put(f, job, 1), "membership epoch 1", "epoch 2");
  assert_int_equal(kv_put(f, job, 2), PX_OK);
  Prunex__V1__KvGetRequest get = PRUNEX__V1__KV_GET_REQUEST__INIT;
  Prunex__V1__KvGetResponse *got = NULL;
  get.job_id = (char *)job;
  get.key = "addr/0";
  get.membership_epoch = 1;
  expect_fenced(px_rpc_kv_get(f->ch, &get, 0, &got), "KvGet: membership epoch 1", "epoch 2");
  get.membership_epoch = 2;
  assert_int_equal(px_rpc_kv_get(f->ch, &get, 0, &got), PX_OK);
  assert_true(got->found);
  px_rpc_message_free(got);
  expect_fenced(rank_exit(f, job, ids[1], 1, 1, 0, 0), "rank 1", "epoch 2");
  assert_int_equal(report(f, job, 0, 2, 2, NULL), PX_OK);
  /* the members finish: the job succeeds, its dropped rank said why */
  assert_int_equal(rank_exit(f, job, ids[0], 0, 1, 0, 0), PX_OK);
  assert_int_equal(rank_exit(f, job, ids[2], 2, 1, 0, 0), PX_OK);
  j = get_job(f->ch, job);
  if (j->state != JS(SUCCEEDED) || !strstr(j->reason, "all 2 ranks exited with code 0"))
    fail_msg("state %d: %s", (int)j->state, j->reason);
  px_rpc_message_free(j);
}

static void test_agent_gone_drops_the_node_at_the_next_round(void **state) {
  fixture_t *f = *state;
  char ids[3][64], job[64];
  px_rpc_stream_t *s[3] = {NULL, NULL, NULL};
  start_three(f, ids, s, job, sizeof job);
  px_rpc_stream_destroy(s[1]); /* n2's agent is killed */
  assert_true(pxt_wait_node_state(f->ch, ids[1], NS(LOST), 5000));
  pxt_sleep_ms(100);
  check_dropped_n2(f, ids, job, "lost");
  /* what the operator sees */
  char env[128];
  snprintf(env, sizeof env, "PRUNEX_COORDINATOR=%s", f->d.target);
  const char *const envs[] = {env, NULL};
  static pxt_result_t r;
  const char *const st[] = {"status", job, NULL};
  assert_int_equal(pxt_pxctl(&r, f->d.dir, st, envs, 30000), 0);
  if (!strstr(r.out, "elastic    min 2, max 3 nodes") ||
      !strstr(r.out, "epoch 1    from iteration 0: 3 nodes (n1, n2, n3)") ||
      !strstr(r.out, "epoch 2    from iteration 2: 2 nodes (n1, n3), in force: node n2"))
    fail_msg("pxctl status:\n%s", r.out);
  px_rpc_stream_destroy(s[0]);
  px_rpc_stream_destroy(s[2]);
}

static void test_dead_worker_drops_its_node_and_the_attempt_goes_on(void **state) {
  fixture_t *f = *state;
  char ids[3][64], job[64];
  px_rpc_stream_t *s[3] = {NULL, NULL, NULL};
  start_three(f, ids, s, job, sizeof job);
  assert_int_equal(rank_exit(f, job, ids[1], 1, 1, 0, 9), PX_OK);
  expect(s[1], CANCEL, 1, job); /* its node's workers stop; the others run on */
  assert_int_equal(pxt_node_state(f->ch, ids[1]), NS(READY));
  check_dropped_n2(f, ids, job, "signal 9");
  /* no CANCEL reached the members until the end */
  Prunex__V1__Assignment *a = pxt_next_assignment(s[0], 200);
  if (a && (int)a->action == CANCEL) fail_msg("a member was cancelled");
  px_rpc_message_free(a);
  for (int i = 0; i < 3; i++) px_rpc_stream_destroy(s[i]);
}

/* A dropped node that comes back (its agent registers again) joins: the
 * scheduler places the job's rank 1 on it again (placement index 1), its
 * START says join_epoch 3, and the next round boundary makes epoch 3 with
 * the three nodes. Until then the joining rank cannot report a round of
 * epoch 2 (fenced), though its store calls go through (it meets the others
 * there); after it, it reports as a member, and the job succeeds with all
 * three ranks. A node whose worker just died, its agent still there, is
 * not taken straight back (test_dead_worker_... above). */
static void test_node_that_comes_back_joins_at_the_next_round(void **state) {
  fixture_t *f = *state;
  char ids[3][64], job[64], again[64];
  px_rpc_stream_t *s[3] = {NULL, NULL, NULL};
  start_three(f, ids, s, job, sizeof job);
  px_rpc_stream_destroy(s[1]); /* n2's agent is killed */
  assert_true(pxt_wait_node_state(f->ch, ids[1], NS(LOST), 5000));
  pxt_sleep_ms(100);
  Prunex__V1__ControlDecision *d = NULL;
  assert_int_equal(report(f, job, 0, 1, 1, &d), PX_OK);
  expect_members(d, 2, 2, "0,2", ids);
  px_rpc_message_free(d);
  /* its agent comes back */
  assert_int_equal(pxt_register(f->ch, "n2", 1, 0, again, sizeof again), PX_OK);
  assert_string_equal(again, ids[1]);
  assert_int_equal(px_rpc_watch_assignments(f->ch, ids[1], &s[1]), PX_OK);
  Prunex__V1__Assignment *a = pxt_next_assignment(s[1], 5000);
  assert_non_null(a);
  if ((int)a->action != START || a->attempt != 1 || a->join_epoch != 3 || a->node_index != 1 ||
      a->n_ranks != 1 || a->ranks[0]->rank != 1)
    fail_msg("assignment: action %d attempt %d join_epoch %d node %d (%zu ranks)",
             (int)a->action, a->attempt, a->join_epoch, a->node_index, a->n_ranks);
  px_rpc_message_free(a);
  Prunex__V1__Job *j = get_job(f->ch, job);
  assert_int_equal(j->n_node_ids, 3);
  assert_int_equal(j->n_memberships, 2); /* no boundary since */
  px_rpc_message_free(j);
  expect_fenced(report(f, job, 1, 2, 0, NULL), "rank 1", "not a member of membership epoch 2");
  assert_int_equal(kv_put(f, job, 0), PX_OK);
  /* the next round boundary */
  assert_int_equal(report(f, job, 0, 2, 2, &d), PX_OK);
  expect_members(d, 3, 3, "0,1,2", ids);
  px_rpc_message_free(d);
  j = get_job(f->ch, job);
  assert_int_equal(j->n_memberships, 3);
  if (!strstr(j->memberships[2]->reason, "nodes joined"))
    fail_msg("epoch 3's reason: %s", j->memberships[2]->reason);
  px_rpc_message_free(j);
  assert_int_equal(report(f, job, 1, 3, 3, NULL), PX_OK); /* a member now */
  for (int r = 0; r < 3; r++) assert_int_equal(rank_exit(f, job, ids[r], r, 1, 0, 0), PX_OK);
  j = get_job(f->ch, job);
  if (j->state != JS(SUCCEEDED) || !strstr(j->reason, "all 3 ranks exited with code 0"))
    fail_msg("state %d: %s", (int)j->state, j->reason);
  px_rpc_message_free(j);
  for (int i = 0; i < 3; i++) px_rpc_stream_destroy(s[i]);
}

/* What pxworker's members callback does after a lost peer broke round 3:
 * the survivors repeat their report of iteration 2 (decided before the
 * loss, the latest boundary). Once n2 is dropped the repeat makes epoch 2
 * from iteration 3 there and names it; a repeat of an older iteration
 * (two decisions follow it) makes none. Every repeat replaces the earlier
 * record: one row per iteration, whichever rank sent it. A spare node
 * joins as soon as that epoch is made. */
static void test_repeated_latest_report_names_the_next_epoch(void **state) {
  fixture_t *f = *state;
  char ids[3][64], job[64];
  px_rpc_stream_t *s[3] = {NULL, NULL, NULL};
  start_three(f, ids, s, job, sizeof job);
  char spare[64];
  px_rpc_stream_t *sp = NULL; /* a READY node the job may grow onto once it lost one */
  nodes_up(f, 1, (const char *const[]){"n4"}, &spare, &sp);
  Prunex__V1__ControlDecision *d = NULL;
  for (int it = 1; it <= 2; it++) {
    assert_int_equal(report(f, job, 0, it, 1, &d), PX_OK);
    expect_members(d, 1, 0, "0,1,2", ids);
    px_rpc_message_free(d);
  }
  assert_int_equal(report(f, job, 2, 2, 1, &d), PX_OK); /* nothing dropped yet: as before */
  expect_members(d, 1, 0, "0,1,2", ids);
  px_rpc_message_free(d);
  px_rpc_stream_destroy(s[1]); /* n2's agent is killed */
  assert_true(pxt_wait_node_state(f->ch, ids[1], NS(LOST), 5000));
  pxt_sleep_ms(100);
  assert_int_equal(report(f, job, 0, 0, 1, &d), PX_OK); /* older: no epoch made there */
  expect_members(d, 1, 0, "0,1,2", ids);
  px_rpc_message_free(d);
  for (int rank = 2; rank >= 0; rank -= 2) { /* both survivors; the first makes it */
    assert_int_equal(report(f, job, rank, 2, 1, &d), PX_OK);
    expect_members(d, 2, 3, "0,2", ids);
    px_rpc_message_free(d);
  }
  Prunex__V1__Job *j = get_job(f->ch, job);
  assert_int_equal(j->n_memberships, 2);
  assert_int_equal(j->memberships[1]->from_iteration, 3);
  px_rpc_message_free(j);
  /* the epoch the repeat made settles the job: the spare joins at once (no
   * other event runs the scheduler here), at placement index 1 */
  Prunex__V1__Assignment *a = pxt_next_assignment(sp, 3000);
  if (!a || (int)a->action != START || a->join_epoch != 3 || a->node_index != 1)
    fail_msg("the spare's assignment: %s", a ? "not a join of epoch 3 at index 1" : "none");
  px_rpc_message_free(a);
  snprintf(ids[1], sizeof ids[1], "%s", spare);
  /* the broken round, run again over epoch 2, by the new rank 0; the spare
   * is a member from the next one */
  assert_int_equal(report(f, job, 2, 3, 2, &d), PX_OK);
  expect_members(d, 3, 4, "0,1,2", ids);
  px_rpc_message_free(d);
  Prunex__V1__GetIterationsRequest q = PRUNEX__V1__GET_ITERATIONS_REQUEST__INIT;
  q.job_id = job;
  Prunex__V1__GetIterationsResponse *it = NULL;
  assert_int_equal(px_rpc_get_iterations(f->ch, &q, 0, &it), PX_OK);
  assert_int_equal((int)it->n_iterations, 4);
  for (int i = 0; i < 4; i++) assert_int_equal(it->iterations[i]->iteration, i);
  assert_int_equal(it->iterations[2]->rank, 0); /* the last repeat's */
  assert_int_equal(it->iterations[3]->rank, 2);
  px_rpc_message_free(it);
  px_rpc_stream_destroy(s[0]);
  px_rpc_stream_destroy(s[2]);
  px_rpc_stream_destroy(sp);
}

/* A node silent while its agent heartbeats (its worker stopped): the
 * survivors' roll call loses it a quarter of comm.timeout_ms after their
 * first answer; a call every member answers, or a plain repeat, loses
 * nothing. */
static void test_roll_call_loses_a_silent_node(void **state) {
  fixture_t *f = *state;
  char ids[3][64], job[64];
  px_rpc_stream_t *s[3] = {NULL, NULL, NULL};
  spec_timeout_ms = 2000; /* the call closes after 500 ms */
  start_three(f, ids, s, job, sizeof job);
  spec_timeout_ms = 0;
  Prunex__V1__ControlDecision *d = NULL;
  assert_int_equal(report(f, job, 0, 1, 1, NULL), PX_OK);
  for (int pass = 0; pass < 2; pass++) { /* every node answers: nobody is lost */
    for (int rank = 0; rank < 3; rank++) {
      assert_int_equal(report_as(f, job, rank, 1, 1, 1, &d), PX_OK);
      expect_members(d, 1, 0, "0,1,2", ids);
      px_rpc_message_free(d);
    }
    pxt_sleep_ms(600);
  }
  assert_int_equal(report(f, job, 0, 2, 1, NULL), PX_OK);
  assert_int_equal(report(f, job, 2, 2, 1, NULL), PX_OK); /* a plain repeat */
  pxt_sleep_ms(600);
  assert_int_equal(report(f, job, 2, 2, 1, &d), PX_OK);
  expect_members(d, 1, 0, "0,1,2", ids);
  px_rpc_message_free(d);
  /* n2's worker stopped: ranks 0 and 2 answer, rank 1 does not */
  int64_t t0 = wall_ms();
  assert_int_equal(report_as(f, job, 2, 2, 1, 1, &d), PX_OK);
  expect_members(d, 1, 0, "0,1,2", ids);
  px_rpc_message_free(d);
  assert_int_equal(report_as(f, job, 0, 2, 1, 1, &d), PX_OK);
  if (wall_ms() - t0 < 500) expect_members(d, 1, 0, "0,1,2", ids); /* not yet */
  px_rpc_message_free(d);
  pxt_sleep_ms(600);
  assert_int_equal(report_as(f, job, 0, 2, 1, 1, &d), PX_OK);
  expect_members(d, 2, 3, "0,2", ids);
  px_rpc_message_free(d);
  Prunex__V1__Job *j = get_job(f->ch, job);
  assert_int_equal(j->state, JS(RUNNING));
  assert_int_equal(j->n_memberships, 2);
  if (!strstr(j->memberships[1]->reason, "node n2 (") ||
      !strstr(j->memberships[1]->reason, ") silent") ||
      !strstr(j->memberships[1]->reason, "roll call after iteration 2"))
    fail_msg("epoch 2's reason: %s", j->memberships[1]->reason);
  px_rpc_message_free(j);
  /* the stopped worker resumes: fenced */
  expect_fenced(report(f, job, 1, 3, 1, NULL), "rank 1", "not a member of membership epoch");
  assert_int_equal(report(f, job, 0, 3, 2, NULL), PX_OK);
  assert_int_equal(rank_exit(f, job, ids[0], 0, 1, 0, 0), PX_OK);
  assert_int_equal(rank_exit(f, job, ids[2], 2, 1, 0, 0), PX_OK);
  j = get_job(f->ch, job);
  if (j->state != JS(SUCCEEDED) || j->n_attempts != 0)
    fail_msg("state %d (%zu attempts ended): %s", (int)j->state, j->n_attempts, j->reason);
  px_rpc_message_free(j);
  for (int i = 0; i < 3; i++) px_rpc_stream_destroy(s[i]);
}

/* Below min_nodes: today's restart; epoch 1 again for the new attempt. A
 * node lost twice within the window waits out the cooldown before the job
 * takes it back. */
static void test_below_min_restarts_and_a_twice_lost_node_cools_down(void **state) {
  fixture_t *f = *state;
  char ids[2][64], job[64];
  px_rpc_stream_t *s[2] = {NULL, NULL};
  nodes_up(f, 2, (const char *const[]){"n1", "n2"}, ids, s);
  submit(f, 2, 2, 3, job, sizeof job);
  expect(s[0], START, 1, job);
  expect(s[1], START, 1, job);
  assert_int_equal(rank_exit(f, job, ids[1], 1, 1, 3, 0), PX_OK);
  expect(s[0], CANCEL, 1, job);
  expect(s[1], CANCEL, 1, job);
  expect(s[0], START, 2, job); /* lost once: taken back */
  expect(s[1], START, 2, job);
  Prunex__V1__Job *j = get_job(f->ch, job);
  assert_int_equal(j->attempt, 2);
  assert_int_equal(j->n_attempts, 1);
  if (!strstr(j->attempts[0]->cause, "exited (elastic: 1 node would remain, below min_nodes 2)"))
    fail_msg("cause: %s", j->attempts[0]->cause);
  assert_int_equal(j->n_memberships, 1);
  assert_int_equal(j->memberships[0]->attempt, 2);
  assert_int_equal(j->memberships[0]->epoch, 1);
  assert_int_equal(j->n_blacklist, 0);
  px_rpc_message_free(j);
  Prunex__V1__ControlDecision *d = NULL;
  assert_int_equal(report(f, job, 0, 0, 1, &d), PX_OK);
  expect_members(d, 1, 0, "0,1", ids);
  px_rpc_message_free(d);

  int64_t t0 = pxt_now_ms();
  assert_int_equal(rank_exit(f, job, ids[1], 1, 2, 3, 0), PX_OK);
  expect(s[0], CANCEL, 2, job);
  expect(s[1], CANCEL, 2, job);
  j = get_job(f->ch, job);
  if (j->state != JS(PENDING) || !strstr(j->reason, "node n2 not taken back") ||
      j->n_blacklist != 1 || j->blacklist[0]->failures != 2 ||
      !strstr(j->blacklist[0]->reason, "code 3"))
    fail_msg("state %d, %zu blacklisted: %s", (int)j->state, j->n_blacklist, j->reason);
  int64_t left = j->blacklist[0]->until_unix_ms - wall_ms();
  px_rpc_message_free(j);
  if (left < 1000 || left > 1600) fail_msg("cooldown left: %lld ms", (long long)left);
  char env[128];
  snprintf(env, sizeof env, "PRUNEX_COORDINATOR=%s", f->d.target);
  const char *const envs[] = {env, NULL};
  static pxt_result_t r;
  const char *const st[] = {"status", job, NULL};
  assert_int_equal(pxt_pxctl(&r, f->d.dir, st, envs, 30000), 0);
  if (!strstr(r.out, "blacklist  n2 (") || !strstr(r.out, "lost 2 times, last: node n2"))
    fail_msg("pxctl status:\n%s", r.out);
  /* the cooldown over, attempt 3 is placed on both nodes again */
  expect(s[0], START, 3, job);
  expect(s[1], START, 3, job);
  int64_t waited = pxt_now_ms() - t0;
  if (waited < 1300) fail_msg("n2 taken back after %lld ms, before the cooldown",
                              (long long)waited);
  for (int i = 0; i < 2; i++) px_rpc_stream_destroy(s[i]);
}

/* A job that is not elastic still fails its attempt on a lost node. */
static void test_not_elastic_fails_as_before(void **state) {
  fixture_t *f = *state;
  char ids[2][64], job[64];
  px_rpc_stream_t *s[2] = {NULL, NULL};
  nodes_up(f, 2, (const char *const[]){"n1", "n2"}, ids, s);
  submit(f, 2, 0, 0, job, sizeof job);
  expect(s[0], START, 1, job);
  expect(s[1], START, 1, job);
  Prunex__V1__ControlDecision *d = NULL;
  assert_int_equal(report(f, job, 0, 0, 0, &d), PX_OK); /* epoch not said: accepted */
  expect_members(d, 1, 0, "0,1", ids);
  px_rpc_message_free(d);
  assert_int_equal(rank_exit(f, job, ids[1], 1, 1, 0, 9), PX_OK);
  assert_int_equal(pxt_job_state(f->ch, job), JS(FAILED));
  for (int i = 0; i < 2; i++) px_rpc_stream_destroy(s[i]);
}

/* The elastic section's rules, in a file and on the wire. */
static void test_spec_rules(void **state) {
  fixture_t *f = *state;
  static const char base[] = "strategy: %s\nmodel: {name: resnet20}\n"
                             "dataset: {name: synthetic}\ncluster: {nodes: 3, "
                             "workers_per_node: 1}\nelastic: {%s}\n";
  static const struct {
    const char *strategy, *elastic, *error;
  } cases[] = {
      {"hsadmm", "min_nodes: 2, max_nodes: 4", NULL},
      {"hsadmm", "min_nodes: 3", NULL},
      {"hsadmm", "min_nodes: 0, max_nodes: 0", NULL},
      {"hsadmm", "max_nodes: 4", "elastic.min_nodes: required with elastic.max_nodes"},
      {"hsadmm", "min_nodes: 4", "elastic.min_nodes: 4 is more than cluster.nodes (3)"},
      {"hsadmm", "min_nodes: 2, max_nodes: 2",
       "elastic.max_nodes: 2 is less than cluster.nodes (3)"},
      {"hsadmm", "min_nodes: -1", "elastic.min_nodes: expected 0 or an integer >= 1"},
      {"ddp", "min_nodes: 2", "elastic jobs need strategy hsadmm"},
  };
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
    char text[512];
    snprintf(text, sizeof text, base, cases[i].strategy, cases[i].elastic);
    Prunex__V1__JobSpec *spec = NULL;
    px_status_t st = px_jobspec_parse_string(text, strlen(text), "elastic.yaml", &spec);
    if (!cases[i].error) {
      if (st != PX_OK) fail_msg("case %zu: %s", i, px_last_error());
      px_jobspec_free(spec);
      continue;
    }
    if (st == PX_OK || !strstr(px_last_error(), cases[i].error) ||
        !strstr(px_last_error(), "elastic.yaml:"))
      fail_msg("case %zu: %s (expected '%s')", i, st == PX_OK ? "accepted" : px_last_error(),
               cases[i].error);
  }
  /* SubmitJob refuses it too, naming the field */
  pxt_spec_t s;
  pxt_spec_init(&s, 2, 1);
  Prunex__V1__ElasticSpec el = PRUNEX__V1__ELASTIC_SPEC__INIT;
  el.min_nodes = 3;
  s.spec.elastic = &el;
  char job[64];
  assert_int_equal(pxt_submit(f->ch, &s, job, sizeof job), PX_ERR_INVALID);
  if (!strstr(px_last_error(), "spec.elastic.min_nodes: 3 is more than cluster.nodes (2)"))
    fail_msg("SubmitJob: %s", px_last_error());
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test_setup_teardown(test_agent_gone_drops_the_node_at_the_next_round, setup,
                                      teardown),
      cmocka_unit_test_setup_teardown(test_dead_worker_drops_its_node_and_the_attempt_goes_on,
                                      setup, teardown),
      cmocka_unit_test_setup_teardown(test_below_min_restarts_and_a_twice_lost_node_cools_down,
                                      setup, teardown),
      cmocka_unit_test_setup_teardown(test_node_that_comes_back_joins_at_the_next_round, setup,
                                      teardown),
      cmocka_unit_test_setup_teardown(test_repeated_latest_report_names_the_next_epoch, setup,
                                      teardown),
      cmocka_unit_test_setup_teardown(test_roll_call_loses_a_silent_node, setup, teardown),
      cmocka_unit_test_setup_teardown(test_not_elastic_fails_as_before, setup, teardown),
      cmocka_unit_test_setup_teardown(test_spec_rules, setup, teardown),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
