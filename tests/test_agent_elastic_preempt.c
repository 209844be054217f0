/* Preemption that shrinks, through the real processes (shrink.c;
 * docs/operations.md, preemption): pxcoordd with `preemption = on`, three
 * pxagents and their pxworkers on loopback. An elastic 3-node job of one
 * rank each (hsadmm, resnet20 on a Fashion-MNIST subset, min_nodes 2,
 * priority 10, no checkpoints) runs; once it has reached iteration 3 a
 * 1-node job of priority 500 is submitted. Node 2 leaves the elastic job at
 * its next round boundary by decision (epoch 2 "preempted by" the urgent
 * job; its rank says it left and exits 0), the urgent job runs there and
 * succeeds, and the elastic job goes on over nodes 0 and 1, takes node 2
 * back by joining once it is free (epoch 3, when that comes before its
 * end) and SUCCEEDS in its first attempt with every iteration recorded
 * once. */
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
#define JS(x) PRUNEX__V1__JOB_STATE__JOB_STATE_##x

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

static void start_cluster(void) {
  D.pid = -1;
  char conf[400];
  if (pxt_mkdtemp(D.dir, sizeof D.dir) != 0) fail_msg("tmpdir");
  snprintf(D.db, sizeof D.db, "%s/coord.db", D.dir);
  snprintf(conf, sizeof conf, "%s/coord.conf", D.dir);
  FILE *f = fopen(conf, "w");
  if (!f || fprintf(f, "preemption = on\npreemption_grace_s = 20\n") < 0 || fclose(f) != 0)
    fail_msg("config");
  const char *extra[] = {"--config", conf, "--agent-grace-ms", "300", NULL};
  if (pxt_coordd_start(&D, extra) != 0 || px_rpc_channel_create(D.target, &CH) != PX_OK)
    fail_msg("coordinator");
  int w = pxt_write_fmnist_subset(D.dir, 192, 48, DATA, sizeof DATA);
  if (w < 0) fail_msg("data");
  if (w == 0) DATA[0] = '\0';
  setenv("PX_LOG_LEVEL", "info", 1);
  for (int i = 0; i < NODES; i++) { /* one at a time: node index i is agent i */
    char name[16];
    snprintf(name, sizeof name, "node%d", i);
    if (pxt_agent_start(&A[i], &D, name, 1, NULL) != 0) fail_msg("agent %d", i);
    if (!pxt_wait_node_named(CH, name, PRUNEX__V1__NODE_STATE__NODE_STATE_READY, 30000))
      fail_with_logs("an agent did not register");
  }
}

static void test_urgent_job_takes_a_node_the_elastic_job_goes_on(void **state) {
  (void)state;
  int64_t t0 = pxt_now_ms();
  start_cluster();
  pxt_job_t j;
  pxt_job_init(&j, DATA[0] ? DATA : NULL, NODES, 1, ITERATIONS, 2);
  Prunex__V1__ElasticSpec el = PRUNEX__V1__ELASTIC_SPEC__INIT;
  el.min_nodes = 2;
  j.spec.elastic = &el;
  j.spec.priority = 10;
  j.spec.name = "elastic-low";
  j.comm.timeout_ms = 8000;
  char low[64], high[64];
  if (pxt_job_submit(CH, &j, low, sizeof low) != PX_OK) fail_msg("submit: %s", px_last_error());
  int64_t end = pxt_now_ms() + 60000;
  while (job_iteration(low) < 3 && pxt_now_ms() < end) pxt_sleep_ms(20);
  if (job_iteration(low) < 3) fail_with_logs("the job did not reach iteration 3");
  pxt_job_t u;
  pxt_job_init(&u, DATA[0] ? DATA : NULL, 1, 1, 2, 1);
  u.spec.priority = 500;
  u.spec.name = "urgent";
  if (pxt_job_submit(CH, &u, high, sizeof high) != PX_OK) fail_msg("submit: %s", px_last_error());
  int64_t ts = pxt_now_ms();
  if (pxt_wait_job(CH, high, JS(SUCCEEDED), 60000) != JS(SUCCEEDED))
    fail_with_logs("the urgent job did not succeed");
  int64_t urgent_ms = pxt_now_ms() - ts;
  int s = pxt_wait_job(CH, low, 0, 90000);
  Prunex__V1__Job *r = NULL, *h = NULL;
  assert_int_equal(px_rpc_get_job(CH, low, 0, &r), PX_OK);
  assert_int_equal(px_rpc_get_job(CH, high, 0, &h), PX_OK);
  printf("urgent %s: succeeded %lld ms after its submission, on %s\n", high,
         (long long)urgent_ms, h->n_node_ids ? h->node_ids[0] : "?");
  printf("elastic %s: %s (attempt %d, %zu epochs): %s\n", low, px_rpc_job_state_name(s),
         r->attempt, r->n_memberships, r->reason);
  for (size_t i = 0; i < r->n_memberships; i++)
    printf("  epoch %d from iteration %d (%s): %s\n", r->memberships[i]->epoch,
           r->memberships[i]->from_iteration, r->memberships[i]->kind,
           r->memberships[i]->reason);
  if (s != JS(SUCCEEDED)) fail_with_logs("the elastic job did not succeed");
  assert_int_equal(r->attempt, 1);
  assert_int_equal((int)r->n_attempts, 0);
  assert_int_equal(r->iteration, ITERATIONS - 1);
  /* 3 epochs when node 2 came back before the end (the urgent job takes
   * about 2 s, the elastic one 10 rounds), else 2 */
  if (r->n_memberships != 2 && r->n_memberships != 3)
    fail_msg("%zu membership epochs, expected 2 or 3", r->n_memberships);
  if (r->n_memberships == 3) {
    const Prunex__V1__MembershipEpoch *g = r->memberships[2];
    assert_string_equal(g->kind, "joined");
    assert_int_equal((int)g->n_node_indexes, 3);
    assert_non_null(strstr(r->reason, "all 3 ranks exited with code 0"));
  }
  const Prunex__V1__MembershipEpoch *e = r->memberships[1];
  assert_string_equal(e->kind, "preempted");
  assert_non_null(strstr(e->reason, high));
  assert_int_equal((int)e->n_node_indexes, 2);
  assert_int_equal(e->node_indexes[0], 0);
  assert_int_equal(e->node_indexes[1], 1);
  char id2[64];
  assert_true(pxt_node_by_name(CH, "node2", id2, sizeof id2) >= 0);
  assert_true(h->n_node_ids == 1 && !strcmp(h->node_ids[0], id2));
  px_rpc_message_free(r);
  px_rpc_message_free(h);
  /* node 2's rank left at the boundary, exit 0 */
  char p[700];
  snprintf(p, sizeof p, "%s/jobs/%s/rank-2.log", A[2].work, low);
  if (!pxt_file_contains(p, "this node left the job")) fail_with_logs("rank 2 did not leave");
  /* one record per iteration */
  Prunex__V1__GetIterationsRequest q = PRUNEX__V1__GET_ITERATIONS_REQUEST__INIT;
  q.job_id = low;
  Prunex__V1__GetIterationsResponse *its = NULL;
  assert_int_equal(px_rpc_get_iterations(CH, &q, 0, &its), PX_OK);
  assert_int_equal((int)its->n_iterations, ITERATIONS);
  px_rpc_message_free(its);
  printf("test time %lld ms\n", (long long)(pxt_now_ms() - t0));
  assert_int_equal(pxt_agents_stop(A, NODES), 0);
  px_rpc_channel_destroy(CH);
  assert_int_equal(pxt_coordd_teardown(&D), 0);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_urgent_job_takes_a_node_the_elastic_job_goes_on),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
