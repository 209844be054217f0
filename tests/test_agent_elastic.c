/* An elastic job through the real processes (docs/operations.md, elastic jobs): pxcoordd, three
 * pxagents and their pxworkers on loopback, a 3-node job of one rank each
 * (hsadmm, resnet20 on a Fashion-MNIST subset, spec.elastic.min_nodes 2).
 * Node 2's agent and worker are SIGKILLed mid-run; the survivors' members
 * callback gets the coordinator's epoch 2 without node 2 (pxworker repeats
 * its last report, which the coordinator answers with the next epoch), the
 * broken round runs again over two nodes, and the job SUCCEEDS in its first
 * attempt with two nodes; `pxctl status` shows both epochs. The same with
 * node 0 lost: rank 1 becomes rank 0 and reports and saves the model. Node
 * 2 coming back joins; a 2-node job with max_nodes 3 grows onto the free
 * third node. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

#include <cmocka.h>

#include "agent_harness.h"
#include "pxctl_harness.h"

#define NODES 3
#define ITERATIONS 10

static pxt_coordd_t D;
static px_rpc_channel_t *CH;
static pxt_agent_t A[NODES];
static char DATA[400];

static void fail_with_logs(const char *what) {
  for (int i = 0; i < NODES; i++) pxt_dump_file(A[i].log);
  pxt_coordd_dump_log(&D);
  fail_msg("%s", what);
}

static int job_iteration(const char *job) {
  Prunex__V1__Job *j = NULL;
  if (px_rpc_get_job(CH, job, 0, &j) != PX_OK) return -1;
  int it = j->iteration;
  px_rpc_message_free(j);
  return it;
}

/* Prints the lines of path that hold needle (what the survivors said). */
static void print_lines(const char *path, const char *needle) {
  FILE *f = fopen(path, "r");
  char line[2048];
  while (f && fgets(line, sizeof line, f))
    if (strstr(line, needle)) printf("  %s", line);
  if (f) fclose(f);
}

/* Runs the job, SIGKILLs node `victim`'s agent and worker after iteration
 * 3 and checks that the two others finish it in its first attempt. */
static void lose_node(int victim) {
  int64_t t0 = pxt_now_ms();
  int keep[2], k = 0;
  for (int i = 0; i < NODES; i++)
    if (i != victim) keep[k++] = i;
  static const char *const extra[] = {"--agent-grace-ms", "300", NULL};
  if (pxt_coordd_setup(&D, extra) != 0 || px_rpc_channel_create(D.target, &CH) != PX_OK)
    fail_msg("coordinator");
  int w = pxt_write_fmnist_subset(D.dir, 192, 48, DATA, sizeof DATA);
  if (w < 0) fail_msg("data");
  setenv("PX_LOG_LEVEL", "info", 1);
  for (int i = 0; i < NODES; i++) { /* one at a time: node index i is agent i */
    char name[16];
    snprintf(name, sizeof name, "node%d", i);
    if (pxt_agent_start(&A[i], &D, name, 1, NULL) != 0) fail_msg("agent %d", i);
    if (!pxt_wait_node_named(CH, name, PRUNEX__V1__NODE_STATE__NODE_STATE_READY, 30000))
      fail_with_logs("an agent did not register");
  }
  pxt_job_t j;
  pxt_job_init(&j, w ? DATA : NULL, NODES, 1, ITERATIONS, 2);
  Prunex__V1__ElasticSpec el = PRUNEX__V1__ELASTIC_SPEC__INIT;
  el.min_nodes = 2;
  el.max_nodes = 3;
  j.spec.elastic = &el;
  j.comm.timeout_ms = 8000; /* lost_ms 4000: a dead peer noticed in 0.5 s */
  char job[64];
  if (pxt_job_submit(CH, &j, job, sizeof job) != PX_OK) fail_msg("submit: %s", px_last_error());
  int64_t end = pxt_now_ms() + 60000;
  while (job_iteration(job) < 3 && pxt_now_ms() < end) pxt_sleep_ms(20);
  if (job_iteration(job) < 3) fail_with_logs("the job did not reach iteration 3");
  pid_t pids[4];
  if (pxt_worker_children(A[victim].pid, pids, NULL, 4) != 1) fail_with_logs("victim: no worker");
  int64_t tk = pxt_now_ms();
  kill(A[victim].pid, SIGKILL);
  kill(pids[0], SIGKILL);
  pxt_wait_pid(A[victim].pid, 5000);
  A[victim].pid = -1;
  int s = pxt_wait_job(CH, job, 0, 90000);
  Prunex__V1__Job *r = NULL;
  assert_int_equal(px_rpc_get_job(CH, job, 0, &r), PX_OK);
  printf("job %s: %s (attempt %d, %zu epochs): %s; killed at iteration >= 3, end %lld ms later\n",
         job, px_rpc_job_state_name(s), r->attempt, r->n_memberships, r->reason,
         (long long)(pxt_now_ms() - tk));
  if (s != PRUNEX__V1__JOB_STATE__JOB_STATE_SUCCEEDED) fail_with_logs("the job did not succeed");
  assert_int_equal(r->attempt, 1);
  assert_int_equal((int)r->n_attempts, 0);
  assert_int_equal(r->iteration, ITERATIONS - 1);
  assert_true(r->n_memberships >= 2);
  const Prunex__V1__MembershipEpoch *last = r->memberships[r->n_memberships - 1];
  assert_int_equal(last->epoch, 2);
  assert_int_equal((int)last->n_node_indexes, 2);
  assert_int_equal(last->node_indexes[0], keep[0]);
  assert_int_equal(last->node_indexes[1], keep[1]);
  px_rpc_message_free(r);
  /* pxctl status shows both epochs */
  pxt_result_t pr;
  char coord[96];
  snprintf(coord, sizeof coord, "PRUNEX_COORDINATOR=%s", D.target);
  const char *env[] = {coord, NULL};
  const char *args[] = {"status", job, NULL};
  pxt_pxctl(&pr, D.dir, args, env, 30000);
  printf("%s", pr.out);
  assert_int_equal(pr.code, 0);
  assert_non_null(strstr(pr.out, "epoch 1 "));
  assert_non_null(strstr(pr.out, "epoch 2 "));
  /* the model, saved by the first survivor (rank 0 of the rebuilt
   * communicator) */
  char p[700];
  snprintf(p, sizeof p, "%s/jobs/%s/model.safetensors", A[keep[0]].work, job);
  assert_true(pxt_file_exists(p, 1));
  /* the round the node was lost in ran again over the epoch the members
   * callback got, or (the coordinator dropped the node first) the decision
   * at the boundary shrank the job */
  char p0[700];
  snprintf(p0, sizeof p0, "%s/jobs/%s/rank-%d.log", A[keep[0]].work, job, keep[0]);
  snprintf(p, sizeof p, "%s/jobs/%s/rank-%d.log", A[keep[1]].work, job, keep[1]);
  print_lines(p0, "membership epoch");
  print_lines(p0, "lost");
  assert_true(pxt_file_contains(p, "membership epoch 2 has 2 nodes") ||
              pxt_file_contains(p0, "membership epoch 2 from iteration"));
  /* one record per iteration: at the coordinator (the round run again and
   * the survivors' repeated reports replaced the earlier ones) and in each
   * survivor's metrics file */
  Prunex__V1__GetIterationsRequest q = PRUNEX__V1__GET_ITERATIONS_REQUEST__INIT;
  q.job_id = job;
  Prunex__V1__GetIterationsResponse *its = NULL;
  assert_int_equal(px_rpc_get_iterations(CH, &q, 0, &its), PX_OK);
  assert_int_equal((int)its->n_iterations, ITERATIONS);
  for (int i = 0; i < ITERATIONS; i++) assert_int_equal(its->iterations[i]->iteration, i);
  px_rpc_message_free(its);
  for (int i = 0; i < 2; i++) {
    snprintf(p, sizeof p, "%s/metrics.db", A[keep[i]].work);
    px_store_t *m = pxt_metrics_open(p);
    assert_non_null(m);
    assert_int_equal(pxt_query_int(m, "SELECT COUNT(*) FROM iterations WHERE job_id = ?1", job),
                     ITERATIONS);
    assert_int_equal(pxt_query_int(m, "SELECT COUNT(DISTINCT iteration) FROM iterations WHERE"
                                      " job_id = ?1", job), ITERATIONS);
    px_store_close(m);
  }
  printf("test time %lld ms\n", (long long)(pxt_now_ms() - t0));
  assert_int_equal(pxt_agents_stop(A, NODES), 0);
  px_rpc_channel_destroy(CH);
  assert_int_equal(pxt_coordd_teardown(&D), 0);
}

/* The job's membership epochs so far (-1: no answer). */
static int job_epochs(const char *job) {
  Prunex__V1__Job *j = NULL;
  if (px_rpc_get_job(CH, job, 0, &j) != PX_OK) return -1;
  int n = (int)j->n_memberships;
  px_rpc_message_free(j);
  return n;
}

/* The coordinator, three agents and the job (iterations, `nodes` of them
 * placed, elastic 2..3). */
static void start_job_on(int iterations, int nodes, char *job, size_t cap) {
  static const char *const extra[] = {"--agent-grace-ms", "300", NULL};
  if (pxt_coordd_setup(&D, extra) != 0 || px_rpc_channel_create(D.target, &CH) != PX_OK)
    fail_msg("coordinator");
  int w = pxt_write_fmnist_subset(D.dir, 192, 48, DATA, sizeof DATA);
  if (w < 0) fail_msg("data");
  setenv("PX_LOG_LEVEL", "info", 1);
  for (int i = 0; i < NODES; i++) {
    char name[16];
    snprintf(name, sizeof name, "node%d", i);
    if (pxt_agent_start(&A[i], &D, name, 1, NULL) != 0) fail_msg("agent %d", i);
    if (!pxt_wait_node_named(CH, name, PRUNEX__V1__NODE_STATE__NODE_STATE_READY, 30000))
      fail_with_logs("an agent did not register");
  }
  pxt_job_t j;
  pxt_job_init(&j, w ? DATA : NULL, nodes, 1, iterations, 2);
  static Prunex__V1__ElasticSpec el = PRUNEX__V1__ELASTIC_SPEC__INIT;
  el.min_nodes = 2;
  el.max_nodes = 3;
  j.spec.elastic = &el;
  j.comm.timeout_ms = 8000; /* lost_ms 4000: a dead peer noticed in 0.5 s */
  if (pxt_job_submit(CH, &j, job, cap) != PX_OK) fail_msg("submit: %s", px_last_error());
}

static void start_job(int iterations, char *job, size_t cap) {
  start_job_on(iterations, NODES, job, cap);
}

/* Node 2's agent and worker are SIGKILLed after iteration 3; once the
 * coordinator has made the epoch without it, its agent comes back: the
 * scheduler gives the node back to the job (placement index 2), its worker
 * joins at the next round boundary (epoch 3, the state from rank 0) and
 * the job SUCCEEDS in its first attempt on three nodes. */
static void test_node_that_comes_back_joins(void **state) {
  (void)state;
  enum { ITERS = 14 };
  int64_t t0 = pxt_now_ms();
  char job[64];
  start_job(ITERS, job, sizeof job);
  int64_t end = pxt_now_ms() + 60000;
  while (job_iteration(job) < 3 && pxt_now_ms() < end) pxt_sleep_ms(20);
  pid_t pids[4];
  if (job_iteration(job) < 3 || pxt_worker_children(A[2].pid, pids, NULL, 4) != 1)
    fail_with_logs("the job did not reach iteration 3 with a worker on node 2");
  kill(A[2].pid, SIGKILL);
  kill(pids[0], SIGKILL);
  pxt_wait_pid(A[2].pid, 5000);
  A[2].pid = -1;
  end = pxt_now_ms() + 30000;
  while (job_epochs(job) < 2 && pxt_now_ms() < end) pxt_sleep_ms(20);
  if (job_epochs(job) < 2) fail_with_logs("no epoch without node 2");
  int it_back = job_iteration(job);
  if (pxt_agent_start(&A[2], &D, "node2", 1, NULL) != 0) fail_msg("agent 2 again");
  int s = pxt_wait_job(CH, job, 0, 90000);
  Prunex__V1__Job *r = NULL;
  assert_int_equal(px_rpc_get_job(CH, job, 0, &r), PX_OK);
  printf("job %s: %s (attempt %d, %zu epochs, agent back at iteration %d): %s\n", job,
         px_rpc_job_state_name(s), r->attempt, r->n_memberships, it_back, r->reason);
  if (s != PRUNEX__V1__JOB_STATE__JOB_STATE_SUCCEEDED) fail_with_logs("the job did not succeed");
  if (r->attempt != 1 || r->iteration != ITERS - 1 || r->n_memberships != 3)
    fail_with_logs("not one attempt with three epochs");
  const Prunex__V1__MembershipEpoch *last = r->memberships[2];
  printf("epoch 3 from iteration %d\n", last->from_iteration);
  assert_int_equal(last->epoch, 3);
  assert_int_equal((int)last->n_node_indexes, 3);
  for (int i = 0; i < 3; i++) assert_int_equal(last->node_indexes[i], i);
  px_rpc_message_free(r);
  char p[700];
  snprintf(p, sizeof p, "%s/jobs/%s/rank-2.log", A[2].work, job);
  print_lines(p, "join");
  assert_true(pxt_file_contains(p, "joined membership epoch 3 before iteration"));
  snprintf(p, sizeof p, "%s/jobs/%s/model.safetensors", A[0].work, job);
  assert_true(pxt_file_exists(p, 1));
  printf("test time %lld ms\n", (long long)(pxt_now_ms() - t0));
  assert_int_equal(pxt_agents_stop(A, NODES), 0);
  px_rpc_channel_destroy(CH);
  assert_int_equal(pxt_coordd_teardown(&D), 0);
}

/* A 2-node job with max_nodes 3 and a third node free: once it runs, the
 * scheduler gives it that node past cluster.nodes (placement index 2, rank
 * 2, world 3), whose worker joins at the next boundary (epoch 2, "nodes
 * joined"), and the job SUCCEEDS in its first attempt with its three ranks'
 * exits. */
static void test_job_grows_past_its_nodes(void **state) {
  (void)state;
  enum { ITERS = 10 };
  char job[64];
  start_job_on(ITERS, 2, job, sizeof job);
  int s = pxt_wait_job(CH, job, 0, 90000);
  Prunex__V1__Job *r = NULL;
  assert_int_equal(px_rpc_get_job(CH, job, 0, &r), PX_OK);
  printf("job %s: %s (attempt %d, %zu epochs): %s\n", job, px_rpc_job_state_name(s), r->attempt,
         r->n_memberships, r->reason);
  if (s != PRUNEX__V1__JOB_STATE__JOB_STATE_SUCCEEDED || r->attempt != 1 ||
      r->iteration != ITERS - 1 || r->n_memberships != 2 || !strstr(r->reason, "all 3 ranks"))
    fail_with_logs("not one attempt grown to three nodes");
  const Prunex__V1__MembershipEpoch *last = r->memberships[1];
  printf("epoch 2 from iteration %d: %s\n", last->from_iteration, last->reason);
  assert_int_equal(last->epoch, 2);
  assert_int_equal((int)last->n_node_indexes, 3);
  for (int i = 0; i < 3; i++) assert_int_equal(last->node_indexes[i], i);
  assert_non_null(strstr(last->reason, "nodes joined"));
  px_rpc_message_free(r);
  int joined = 0;
  for (int i = 0; i < NODES; i++) {
    char p[700];
    snprintf(p, sizeof p, "%s/jobs/%s/rank-2.log", A[i].work, job);
    joined += pxt_file_contains(p, "joined membership epoch 2 before iteration");
  }
  assert_int_equal(joined, 1);
  assert_int_equal(pxt_agents_stop(A, NODES), 0);
  px_rpc_channel_destroy(CH);
  assert_int_equal(pxt_coordd_teardown(&D), 0);
}

/* The last node lost: ranks 0 and 1 go on as they were. */
static void test_lost_node_dropped_job_succeeds(void **state) {
  (void)state;
  lose_node(2);
}

/* Rank 0's node lost: rank 1 becomes rank 0, reports, saves the model. */
static void test_lost_rank0_node_dropped_job_succeeds(void **state) {
  (void)state;
  lose_node(0);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_lost_node_dropped_job_succeeds),
      cmocka_unit_test(test_lost_rank0_node_dropped_job_succeeds),
      cmocka_unit_test(test_node_that_comes_back_joins),
      cmocka_unit_test(test_job_grows_past_its_nodes),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
