/* Preemption that shrinks an elastic job (shrink.c), with the real
 * pxcoordd (`preemption = on`) on loopback and real SQLite; the nodes and
 * the ranks are played through the RPC API (as test_coord_elastic):
 * - a job of a higher priority that needs one node takes it from a running
 *   elastic job above its min_nodes, which needs no checkpoint and is not
 *   stopped: the node leaves at the elastic job's next round boundary (the
 *   epoch without it, its reason "node n3 (ID) preempted by JOB (priority
 *   500)", kind "preempted" in /metrics), the rank there exits 0 unfenced,
 *   then the waiting job starts on the node; the elastic job goes on over
 *   two nodes and succeeds in its first attempt, and says it wants the node
 *   back (pxctl status);
 * - an elastic job at its min_nodes (and without checkpoints) gives
 *   nothing: the other job waits;
 * - a node out of the epoch whose rank never exits is freed after
 *   preemption_grace_s (its workers told to stop) and the waiting job
 *   starts on it;
 * - a node lost while the job gives another: the node given does not
 *   remain, so min_nodes counts without it (the attempt ends);
 * - a leaving rank killed on its way out: the node goes to the waiting job
 *   all the same, with no loss counted against it and no other epoch. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include "http_harness.h"

#define JS(x) PRUNEX__V1__JOB_STATE__JOB_STATE_##x
#define NS(x) PRUNEX__V1__NODE_STATE__NODE_STATE_##x
#define START PRUNEX__V1__ASSIGNMENT_ACTION__ASSIGNMENT_ACTION_START
#define CANCEL PRUNEX__V1__ASSIGNMENT_ACTION__ASSIGNMENT_ACTION_CANCEL
#define GRACE_S 2

typedef struct {
  pxt_coordd_t d;
  px_rpc_channel_t *ch;
  char ids[3][64];
  px_rpc_stream_t *s[3];
  char low[64], high[64];
} fixture_t;

static int setup(void **state) {
  fixture_t *f = calloc(1, sizeof *f);
  if (!f) return -1;
  f->d.pid = -1;
  char conf[400];
  if (pxt_mkdtemp(f->d.dir, sizeof f->d.dir) != 0) return -1;
  snprintf(f->d.db, sizeof f->d.db, "%s/coord.db", f->d.dir);
  snprintf(conf, sizeof conf, "%s/coord.conf", f->d.dir);
  FILE *c = fopen(conf, "w");
  if (!c || fprintf(c, "preemption = on\npreemption_grace_s = %d\n", GRACE_S) < 0 ||
      fclose(c) != 0)
    return -1;
  const char *extra[] = {"--config", conf, "--http", "127.0.0.1:0", "--agent-grace-ms", "300",
                         NULL};
  if (pxt_coordd_start(&f->d, extra) != 0) return -1;
  if (px_rpc_channel_create(f->d.target, &f->ch) != PX_OK) return -1;
  static const char *const names[] = {"n1", "n2", "n3"};
  for (int i = 0; i < 3; i++)
    if (pxt_register(f->ch, names[i], 1, 0, f->ids[i], sizeof f->ids[i]) != PX_OK ||
        px_rpc_watch_assignments(f->ch, f->ids[i], &f->s[i]) != PX_OK)
      return -1;
  *state = f;
  return 0;
}

static int teardown(void **state) {
  fixture_t *f = *state;
  for (int i = 0; i < 3; i++)
    if (f->s[i]) px_rpc_stream_destroy(f->s[i]);
  px_rpc_channel_destroy(f->ch);
  int rc = pxt_coordd_teardown(&f->d);
  free(f);
  return rc;
}

/* Submits an hsadmm job of nodes x 1 worker at this priority, elastic down
 * to min_nodes (0: not), without checkpoints. */
static void submit(fixture_t *f, int nodes, int min_nodes, int priority, const char *name,
                   char *job) {
  pxt_spec_t s;
  pxt_spec_init(&s, nodes, 1);
  Prunex__V1__ElasticSpec el = PRUNEX__V1__ELASTIC_SPEC__INIT;
  el.min_nodes = min_nodes;
  if (min_nodes) s.spec.elastic = &el;
  s.spec.priority = priority;
  s.spec.name = (char *)name;
  if (pxt_submit(f->ch, &s, job, 64) != PX_OK) fail_msg("submit: %s", px_last_error());
}

static void expect(px_rpc_stream_t *s, int action, const char *job, int timeout_ms) {
  Prunex__V1__Assignment *a = pxt_next_assignment(s, timeout_ms);
  if (!a || strcmp(a->job_id, job) || (int)a->action != action)
    fail_msg("assignment: %s %d, expected %s action %d", a ? a->job_id : "none",
             a ? (int)a->action : -1, job, action);
  px_rpc_message_free(a);
}

/* rank 0's report of iteration it in epoch: the decision's epoch (and its
 * member indexes into members), -1 on an error. */
static int report(fixture_t *f, const char *job, int rank, int it, int epoch, char *members) {
  Prunex__V1__LayerMetrics L = PRUNEX__V1__LAYER_METRICS__INIT, *lp = &L;
  L.name = "conv1.weight";
  L.r_intra = L.s_intra = L.r_inter = L.s_inter = 1.0;
  L.rho1 = L.rho2 = L.density = 1.0;
  L.numel = 100;
  Prunex__V1__IterationReport r = PRUNEX__V1__ITERATION_REPORT__INIT;
  r.job_id = (char *)job;
  r.rank = rank;
  r.iteration = it;
  r.test_accuracy = -1;
  r.n_layers = 1;
  r.layers = &lp;
  r.membership_epoch = epoch;
  Prunex__V1__ControlDecision *d = NULL;
  if (px_rpc_report_iteration(f->ch, &r, 0, &d) != PX_OK) return -1;
  int e = d->membership_epoch;
  size_t u = 0;
  if (members) members[0] = '\0';
  for (size_t i = 0; members && i < d->n_member_node_indexes; i++)
    u += (size_t)snprintf(members + u, 64 - u, "%s%d", i ? "," : "", d->member_node_indexes[i]);
  px_rpc_message_free(d);
  return e;
}

static px_status_t rank_exit_sig(fixture_t *f, const char *job, int node, int rank, int sig) {
  Prunex__V1__RankExit req = PRUNEX__V1__RANK_EXIT__INIT;
  req.signal = sig;
  req.job_id = (char *)job;
  req.node_id = f->ids[node];
  req.rank = rank;
  req.attempt = 1;
  req.reason = sig ? "pxworker was killed by signal 9 (Killed)" : "pxworker exited";
  return px_rpc_report_rank_exit(f->ch, &req, 0);
}

static px_status_t rank_exit(fixture_t *f, const char *job, int node, int rank) {
  return rank_exit_sig(f, job, node, rank, 0);
}

static Prunex__V1__Job *get_job(fixture_t *f, const char *job) {
  Prunex__V1__Job *j = NULL;
  assert_int_equal(px_rpc_get_job(f->ch, job, 0, &j), PX_OK);
  return j;
}

/* The 3-node elastic job (min 2, priority 10) running, then the 1-node job
 * of priority 500 submitted: n3 is asked to leave, nothing stops. */
static void start_and_ask(fixture_t *f) {
  submit(f, 3, 2, 10, "elastic-low", f->low);
  for (int i = 0; i < 3; i++) expect(f->s[i], START, f->low, 5000);
  char m[64];
  assert_int_equal(report(f, f->low, 0, 0, 1, m), 1);
  submit(f, 1, 0, 500, "urgent", f->high);
  pxt_sleep_ms(300);
  assert_int_equal(pxt_job_state(f->ch, f->high), JS(PENDING));
  Prunex__V1__Job *j = get_job(f, f->low);
  assert_int_equal(j->state, JS(RUNNING));
  assert_int_equal(j->n_node_ids, 3); /* n3 stays until the boundary */
  px_rpc_message_free(j);
  Prunex__V1__Assignment *a = pxt_next_assignment(f->s[2], 100);
  if (a) fail_msg("n3 got an assignment before the boundary: %s %d", a->job_id, (int)a->action);
  /* the round boundary: epoch 2 without n3 from iteration 2 */
  assert_int_equal(report(f, f->low, 0, 1, 1, m), 2);
  assert_string_equal(m, "0,1");
}

static void pxctl_status(fixture_t *f, const char *job, pxt_result_t *r) {
  char env[128];
  snprintf(env, sizeof env, "PRUNEX_COORDINATOR=%s", f->d.target);
  const char *const envs[] = {env, NULL};
  const char *const args[] = {"status", job, NULL};
  if (pxt_pxctl(r, f->d.dir, args, envs, 30000) != 0) pxt_show("pxctl status", r), fail();
}

static void test_higher_priority_job_takes_a_node_and_the_elastic_job_goes_on(void **state) {
  fixture_t *f = *state;
  start_and_ask(f);
  Prunex__V1__Job *j = get_job(f, f->low);
  char want[160];
  snprintf(want, sizeof want, "preempted by %s (priority 500)", f->high);
  assert_int_equal(j->n_memberships, 2);
  const Prunex__V1__MembershipEpoch *e = j->memberships[1];
  print_message("epoch %d from %d (%s): %s\n", e->epoch, e->from_iteration, e->kind, e->reason);
  if (!strstr(e->reason, "node n3 (") || !strstr(e->reason, want) || strcmp(e->kind, "preempted"))
    fail_msg("epoch 2: %s: %s", e->kind, e->reason);
  assert_true(e->n_nodes_out == 1 && !strcmp(e->nodes_out[0], "n3"));
  px_rpc_message_free(j);
  /* n3's rank leaves (stop reason "left", exit 0): taken, not fenced */
  assert_int_equal(rank_exit(f, f->low, 2, 2), PX_OK);
  expect(f->s[2], START, f->high, 5000);
  assert_int_equal(pxt_job_state(f->ch, f->high), JS(SCHEDULED));
  j = get_job(f, f->low);
  if (j->state != JS(RUNNING) || j->attempt != 1 || j->n_attempts != 0 || j->n_node_ids != 2)
    fail_msg("elastic job: state %d attempt %d, %zu nodes: %s", (int)j->state, j->attempt,
             j->n_node_ids, j->reason);
  assert_int_equal(j->n_wanted_back, 1);
  assert_string_equal(j->wanted_back[0], f->ids[2]);
  px_rpc_message_free(j);
  static pxt_result_t r;
  pxctl_status(f, f->low, &r);
  if (!strstr(r.out, "epoch 2    from iteration 2: 2 nodes (n1, n2), in force: node n3 (") ||
      !strstr(r.out, want) || !strstr(r.out, "wants back n3 ("))
    fail_msg("pxctl status:\n%s", r.out);
  /* /metrics counts it */
  static char body[1 << 18];
  assert_int_equal(pxt_http_get(f->d.http_port, "/metrics", body, sizeof body), 200);
  char key[200];
  snprintf(key, sizeof key, "prunex_job_membership_changes_total{job_id=\"%s\",job_name="
           "\"elastic-low\",strategy=\"hsadmm\",reason=\"preempted\"} 1\n", f->low);
  if (!strstr(body, key)) fail_msg("/metrics lacks %s:\n%s", key, body);
  /* the elastic job goes on over its two nodes and succeeds */
  assert_int_equal(report(f, f->low, 0, 2, 2, NULL), 2);
  assert_int_equal(rank_exit(f, f->low, 0, 0), PX_OK);
  assert_int_equal(rank_exit(f, f->low, 1, 1), PX_OK);
  j = get_job(f, f->low);
  if (j->state != JS(SUCCEEDED) || !strstr(j->reason, "all 2 ranks exited with code 0"))
    fail_msg("state %d: %s", (int)j->state, j->reason);
  px_rpc_message_free(j);
}

static void test_elastic_job_at_its_min_nodes_gives_nothing(void **state) {
  fixture_t *f = *state;
  submit(f, 3, 3, 10, "elastic-min", f->low);
  for (int i = 0; i < 3; i++) expect(f->s[i], START, f->low, 5000);
  assert_int_equal(report(f, f->low, 0, 0, 1, NULL), 1);
  submit(f, 1, 0, 500, "urgent", f->high);
  pxt_sleep_ms(300);
  assert_int_equal(report(f, f->low, 0, 1, 1, NULL), 1); /* no epoch made */
  assert_int_equal(pxt_job_state(f->ch, f->high), JS(PENDING));
  Prunex__V1__Job *j = get_job(f, f->low);
  assert_int_equal(j->n_memberships, 1);
  assert_int_equal(j->n_node_ids, 3);
  px_rpc_message_free(j);
}

static void test_a_node_whose_rank_does_not_leave_is_freed_after_the_grace(void **state) {
  fixture_t *f = *state;
  int64_t t0 = pxt_now_ms();
  start_and_ask(f);
  /* rank 2 never reports its exit: after the grace its node is freed */
  expect(f->s[2], CANCEL, f->low, (GRACE_S + 5) * 1000);
  expect(f->s[2], START, f->high, 5000);
  int64_t took = pxt_now_ms() - t0;
  print_message("n3 freed and given after %lld ms\n", (long long)took);
  assert_true(took >= GRACE_S * 1000);
  Prunex__V1__Job *j = get_job(f, f->low);
  assert_int_equal(j->state, JS(RUNNING));
  assert_int_equal(j->n_node_ids, 2);
  px_rpc_message_free(j);
  /* its late exit is fenced: the node is no member */
  assert_int_equal(rank_exit(f, f->low, 2, 2), PX_ERR_STATE);
}

static void test_a_node_lost_while_giving_one_counts_without_it(void **state) {
  fixture_t *f = *state;
  submit(f, 3, 2, 10, "elastic-low", f->low);
  for (int i = 0; i < 3; i++) expect(f->s[i], START, f->low, 5000);
  assert_int_equal(report(f, f->low, 0, 0, 1, NULL), 1);
  submit(f, 1, 0, 500, "urgent", f->high);
  pxt_sleep_ms(300); /* n3 asked to leave */
  px_rpc_stream_destroy(f->s[1]); /* then n2's agent is killed */
  f->s[1] = NULL;
  assert_true(pxt_wait_node_state(f->ch, f->ids[1], NS(LOST), 5000));
  int st = -1;
  for (int64_t end = pxt_now_ms() + 5000; pxt_now_ms() < end; pxt_sleep_ms(50))
    if ((st = pxt_job_state(f->ch, f->low)) == JS(FAILED)) break;
  Prunex__V1__Job *j = get_job(f, f->low);
  print_message("%s: %s\n", px_rpc_job_state_name(j->state), j->reason);
  if (j->state != JS(FAILED) || !strstr(j->reason, "1 node would remain, below min_nodes 2"))
    fail_msg("state %d: %s", (int)j->state, j->reason);
  px_rpc_message_free(j);
  /* the urgent job is placed on a node the failed job let go */
  for (int64_t end = pxt_now_ms() + 5000; pxt_now_ms() < end; pxt_sleep_ms(50))
    if ((st = pxt_job_state(f->ch, f->high)) != JS(PENDING)) break;
  assert_int_equal(st, JS(SCHEDULED));
}

static void test_a_leaving_rank_killed_on_its_way_out_counts_no_loss(void **state) {
  fixture_t *f = *state;
  start_and_ask(f);
  assert_int_equal(rank_exit_sig(f, f->low, 2, 2, 9), PX_OK);
  expect(f->s[2], CANCEL, f->low, 5000);
  expect(f->s[2], START, f->high, 5000);
  assert_int_equal(report(f, f->low, 0, 2, 2, NULL), 2); /* no epoch 3 */
  Prunex__V1__Job *j = get_job(f, f->low);
  if (j->state != JS(RUNNING) || j->n_memberships != 2 || j->n_blacklist != 0 ||
      j->n_node_ids != 2)
    fail_msg("state %d, %zu epochs, %zu blacklisted, %zu nodes: %s", (int)j->state,
             j->n_memberships, j->n_blacklist, j->n_node_ids, j->reason);
  px_rpc_message_free(j);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test_setup_teardown(
          test_higher_priority_job_takes_a_node_and_the_elastic_job_goes_on, setup, teardown),
      cmocka_unit_test_setup_teardown(test_elastic_job_at_its_min_nodes_gives_nothing, setup,
                                      teardown),
      cmocka_unit_test_setup_teardown(
          test_a_node_whose_rank_does_not_leave_is_freed_after_the_grace, setup, teardown),
      cmocka_unit_test_setup_teardown(test_a_node_lost_while_giving_one_counts_without_it, setup,
                                      teardown),
      cmocka_unit_test_setup_teardown(test_a_leaving_rank_killed_on_its_way_out_counts_no_loss,
                                      setup, teardown),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
