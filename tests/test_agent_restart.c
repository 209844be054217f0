/* Automatic restarts through the real processes: pxcoordd, three
 * pxagent nodes with one CPU worker each, and a 2-node job (resnet20, a few
 * iterations on a small Fashion-MNIST subset or the synthetic data set)
 * with recovery.max_restarts 1.
 *
 *   - a worker killed with SIGKILL: the coordinator restarts the job on the
 *     same nodes; each agent stops the old attempt's workers before it
 *     starts the new attempt's, and the job SUCCEEDS as attempt 2;
 *   - an agent killed with SIGKILL: its node is blamed and LOST, and the
 *     job moves to the third node and SUCCEEDS.
 *   - the same with checkpoints every 5 iterations: the second attempt
 *     resumes from the newest checkpoint (not from 0) and ends with the
 *     accuracy of the job uninterrupted.
 * Without checkpoints a restarted attempt starts from iteration 0. */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

#include <cmocka.h>

#include "agent_harness.h"

#define NODES 3
#define ITERATIONS 20 /* the kill after iteration 12 leaves 8 to run */

typedef struct {
  pxt_coordd_t d;
  px_rpc_channel_t *ch;
  pxt_agent_t a[NODES];
  char data[400]; /* "" : synthetic data */
} fixture_t;

static fixture_t *F;

static void dump_all(void) {
  for (int i = 0; i < NODES; i++) pxt_dump_file(F->a[i].log);
  pxt_coordd_dump_log(&F->d);
}

static void fail_with_logs(const char *what) {
  dump_all();
  fail_msg("%s", what);
}

static int group_setup(void **state) {
  (void)state;
  F = calloc(1, sizeof *F);
  if (!F) return -1;
  static const char *const extra[] = {"--agent-grace-ms", "1000", NULL};
  if (pxt_coordd_setup(&F->d, extra) != 0) return -1;
  if (px_rpc_channel_create(F->d.target, &F->ch) != PX_OK) return -1;
  int w = pxt_write_fmnist_subset(F->d.dir, 256, 64, F->data, sizeof F->data);
  if (w < 0) return -1;
  if (w == 0) F->data[0] = '\0';
  /* the workers log at info: test_killed_worker_resumes_from_its_checkpoint
   * reads where rank 0 resumed from its log */
  setenv("PX_LOG_LEVEL", "info", 1);
  for (int i = 0; i < NODES; i++) { /* one at a time: node index i is agent i */
    char name[16];
    snprintf(name, sizeof name, "node%d", i);
    if (pxt_agent_start(&F->a[i], &F->d, name, 1, NULL) != 0) return -1;
    if (!pxt_wait_node_named(F->ch, name, PRUNEX__V1__NODE_STATE__NODE_STATE_READY, 30000)) {
      dump_all();
      return -1;
    }
  }
  return 0;
}

static int group_teardown(void **state) {
  (void)state;
  int rc = 0;
  for (int i = 0; i < NODES; i++) {
    if (F->a[i].pid <= 0) continue;
    int status = pxt_agent_stop(&F->a[i], SIGTERM, 20000);
    if (!pxt_exited_ok(status)) {
      fprintf(stderr, "pxagent %s did not exit cleanly (wait status %d)\n", F->a[i].name, status);
      pxt_dump_file(F->a[i].log);
      rc = -1;
    }
  }
  px_rpc_channel_destroy(F->ch);
  if (pxt_coordd_teardown(&F->d) != 0) rc = -1;
  free(F);
  return rc;
}

/* Submits the 2-node job with one restart (checkpoints every
 * checkpoint_every iterations, 0: none) and waits for it to run. */
static void submit_job(char *job, size_t cap, int checkpoint_every) {
  pxt_job_t j;
  pxt_job_init(&j, F->data[0] ? F->data : NULL, 2, 1, ITERATIONS, 1);
  Prunex__V1__RecoverySpec rec = PRUNEX__V1__RECOVERY_SPEC__INIT;
  rec.max_restarts = 1;
  rec.checkpoint_every = checkpoint_every;
  j.spec.recovery = &rec;
  if (pxt_job_submit(F->ch, &j, job, cap) != PX_OK) fail_msg("submit: %s", px_last_error());
}

static void submit_running(char *job, size_t cap) {
  submit_job(job, cap, 0);
  if (pxt_wait_job(F->ch, job, PRUNEX__V1__JOB_STATE__JOB_STATE_RUNNING, 150000) !=
      PRUNEX__V1__JOB_STATE__JOB_STATE_RUNNING)
    fail_with_logs("the job never reached RUNNING");
}

/* Waits for the job's end; it must have SUCCEEDED as attempt 2 with one
 * earlier attempt whose cause holds `cause`. Returns the job (free it). */
static Prunex__V1__Job *expect_success_on_attempt_2(const char *job, const char *cause) {
  int s = pxt_wait_job(F->ch, job, 0, 300000);
  Prunex__V1__Job *j = NULL;
  assert_int_equal(px_rpc_get_job(F->ch, job, 0, &j), PX_OK);
  printf("job %s: %s (attempt %d): %s\n", job, px_rpc_job_state_name(s), j->attempt, j->reason);
  for (size_t i = 0; i < j->n_attempts; i++)
    printf("  attempt %d ended: %.200s\n", j->attempts[i]->attempt, j->attempts[i]->cause);
  if (s != PRUNEX__V1__JOB_STATE__JOB_STATE_SUCCEEDED) {
    px_rpc_message_free(j);
    fail_with_logs("the restarted job did not succeed");
  }
  assert_int_equal(j->attempt, 2);
  assert_int_equal(j->n_attempts, 1);
  if (!strstr(j->attempts[0]->cause, cause)) fail_msg("cause: %s", j->attempts[0]->cause);
  return j;
}

static void test_killed_worker_restarts_on_the_same_nodes(void **state) {
  (void)state;
  char job[64];
  submit_running(job, sizeof job);
  pid_t pids[4];
  int ranks[4];
  int n = pxt_worker_children(F->a[1].pid, pids, ranks, 4);
  if (n != 1) fail_with_logs("node1 does not run one worker");
  kill(pids[0], SIGKILL);
  Prunex__V1__Job *j = expect_success_on_attempt_2(job, "signal 9");
  /* the same nodes; each agent started the job's rank twice, the second
   * time as attempt 2 */
  assert_int_equal(j->n_node_ids, 2);
  assert_int_equal(j->attempts[0]->n_node_ids, 2);
  for (int i = 0; i < 2; i++) assert_string_equal(j->node_ids[i], j->attempts[0]->node_ids[i]);
  px_rpc_message_free(j);
  for (int i = 0; i < 2; i++) {
    char started[128];
    snprintf(started, sizeof started, "job %s: started rank", job);
    assert_int_equal(pxt_file_count(F->a[i].log, started), 2);
    snprintf(started, sizeof started, "job %s: started rank %d of attempt 2", job, i);
    assert_int_equal(pxt_file_count(F->a[i].log, started), 1);
  }
  /* the spec of each attempt and one log per rank, appended to */
  char p[700];
  snprintf(p, sizeof p, "%s/jobs/%s/spec-2.pb", F->a[0].work, job);
  assert_true(pxt_file_exists(p, 1));
  snprintf(p, sizeof p, "%s/jobs/%s/rank-0.log", F->a[0].work, job);
  assert_int_equal(pxt_file_count(p, "attempt 2 of job"), 1);
}

static int job_iteration(const char *job) {
  Prunex__V1__Job *j = NULL;
  if (px_rpc_get_job(F->ch, job, 0, &j) != PX_OK) return -1;
  int it = j->iteration;
  px_rpc_message_free(j);
  return it;
}

static double job_accuracy(const char *job) {
  Prunex__V1__Job *j = NULL;
  assert_int_equal(px_rpc_get_job(F->ch, job, 0, &j), PX_OK);
  double a = j->summary ? j->summary->test_accuracy : -1;
  px_rpc_message_free(j);
  return a;
}

/* With checkpoints every 5 iterations, a worker killed after iteration 12:
 * the second attempt resumes from the checkpoint of iteration 9 or later
 * (its ranks' logs say so), not from 0, and ends with the accuracy of the
 * same job uninterrupted (resumption is exact: bit for bit in
 * test_resume; here within the 0.5 point the issue asks). */
static void test_killed_worker_resumes_from_its_checkpoint(void **state) {
  (void)state;
  char ref[64], job[64];
  submit_job(ref, sizeof ref, 5);
  int s = pxt_wait_job(F->ch, ref, 0, 300000);
  if (s != PRUNEX__V1__JOB_STATE__JOB_STATE_SUCCEEDED) fail_with_logs("the reference job failed");
  double a_ref = job_accuracy(ref);
  submit_job(job, sizeof job, 5);
  int64_t end = pxt_now_ms() + 200000;
  while (job_iteration(job) < 12 && pxt_now_ms() < end) pxt_sleep_ms(20);
  if (job_iteration(job) < 12) fail_with_logs("the job did not reach iteration 12");
  pid_t pids[4];
  int ranks[4];
  if (pxt_worker_children(F->a[1].pid, pids, ranks, 4) != 1) fail_with_logs("node1: no worker");
  int64_t t0 = pxt_now_ms();
  kill(pids[0], SIGKILL);
  Prunex__V1__Job *j = expect_success_on_attempt_2(job, "signal 9");
  px_rpc_message_free(j);
  double a = job_accuracy(job);
  printf("accuracy %.4f, uninterrupted %.4f; killed to end %lld ms\n", a, a_ref,
         (long long)(pxt_now_ms() - t0));
  assert_true(fabs(a - a_ref) <= 0.005);
  char p[700];
  snprintf(p, sizeof p, "%s/jobs/%s/rank-0.log", F->a[0].work, job);
  FILE *f = fopen(p, "r");
  assert_non_null(f);
  char line[1024];
  int resumed = -1;
  while (fgets(line, sizeof line, f)) {
    const char *k = strstr(line, "resuming from the checkpoint of iteration ");
    if (k) resumed = atoi(k + strlen("resuming from the checkpoint of iteration "));
  }
  fclose(f);
  printf("attempt 2 resumed after iteration %d\n", resumed);
  assert_true(resumed >= 9);
}

static void test_killed_agent_moves_the_job_to_the_third_node(void **state) {
  (void)state;
  char job[64];
  submit_running(job, sizeof job);
  pxt_agent_stop(&F->a[1], SIGKILL, 5000);
  Prunex__V1__Job *j = expect_success_on_attempt_2(job, "node1");
  char n0[64], n2[64];
  assert_true(pxt_node_by_name(F->ch, "node0", n0, sizeof n0) >= 0);
  assert_true(pxt_node_by_name(F->ch, "node2", n2, sizeof n2) >= 0);
  assert_int_equal(j->n_node_ids, 2);
  assert_string_equal(j->node_ids[0], n0);
  assert_string_equal(j->node_ids[1], n2);
  px_rpc_message_free(j);
  assert_int_equal(pxt_node_by_name(F->ch, "node1", NULL, 0),
                   PRUNEX__V1__NODE_STATE__NODE_STATE_LOST);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_killed_worker_restarts_on_the_same_nodes),
      cmocka_unit_test(test_killed_worker_resumes_from_its_checkpoint),
      cmocka_unit_test(test_killed_agent_moves_the_job_to_the_third_node), /* last: kills node1 */
  };
  return cmocka_run_group_tests(tests, group_setup, group_teardown);
}
