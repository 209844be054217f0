/* pxcoordd's handling of faults it sees by itself: an agent whose
 * assignment stream closes and stays closed (its node LOST after the grace,
 * its job FAILED naming the node, never offered READY again), a survivor's
 * failure report that arrives after a node's agent has gone (the node is
 * blamed, not the survivor), exit records for the lost node's ranks, a
 * placement whose node never starts its ranks (FAILED after the placement
 * timeout), and a job that can never fit not blocking the queue. Real
 * pxcoordd on loopback, agents played through the RPC API. */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>

#include <cmocka.h>

#include "coord_harness.h"

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
  static const char *const extra[] = {"--agent-grace-ms", "400", "--placement-timeout-ms", "1500",
                                      NULL};
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

static Prunex__V1__Job *get_job(px_rpc_channel_t *ch, const char *job) {
  Prunex__V1__Job *j = NULL;
  assert_int_equal(px_rpc_get_job(ch, job, 0, &j), PX_OK);
  return j;
}

static int wait_job_state(px_rpc_channel_t *ch, const char *job, int state, int timeout_ms) {
  int64_t end = pxt_now_ms() + timeout_ms;
  for (;;) {
    if (pxt_job_state(ch, job) == state) return 1;
    if (pxt_now_ms() >= end) return 0;
    pxt_sleep_ms(20);
  }
}

static px_status_t heartbeat_running(px_rpc_channel_t *ch, const char *node, const char *job) {
  Prunex__V1__HeartbeatRequest req = PRUNEX__V1__HEARTBEAT_REQUEST__INIT;
  req.node_id = (char *)node;
  char *ids[1] = {(char *)job};
  req.n_running_job_ids = job ? 1 : 0;
  req.running_job_ids = ids;
  Prunex__V1__HeartbeatResponse *resp = NULL;
  px_status_t st = px_rpc_heartbeat(ch, &req, 0, &resp);
  px_rpc_message_free(resp);
  return st;
}

/* Two nodes run a job; b's agent goes away (its stream closes). */
static void start_two_node_job(fixture_t *f, char *a, char *b, char *job, px_rpc_stream_t **sa,
                               px_rpc_stream_t **sb) {
  assert_int_equal(pxt_register(f->ch, "alpha", 1, 0, a, 64), PX_OK);
  assert_int_equal(pxt_register(f->ch, "beta", 1, 0, b, 64), PX_OK);
  assert_int_equal(px_rpc_watch_assignments(f->ch, a, sa), PX_OK);
  assert_int_equal(px_rpc_watch_assignments(f->ch, b, sb), PX_OK);
  assert_int_equal(pxt_submit_mp(f->ch, 2, 1, job, 64), PX_OK);
  Prunex__V1__Assignment *x = pxt_next_assignment(*sa, 5000), *y = pxt_next_assignment(*sb, 5000);
  assert_non_null(x);
  assert_non_null(y);
  assert_int_equal(x->action, START);
  px_rpc_message_free(x);
  px_rpc_message_free(y);
  assert_int_equal(heartbeat_running(f->ch, a, job), PX_OK);
  assert_int_equal(heartbeat_running(f->ch, b, job), PX_OK);
}

static void test_gone_agent_fails_its_job_naming_the_node(void **state) {
  fixture_t *f = *state;
  char a[64], b[64], job[64];
  px_rpc_stream_t *sa = NULL, *sb = NULL;
  start_two_node_job(f, a, b, job, &sa, &sb);
  int64_t t0 = pxt_now_ms();
  px_rpc_stream_destroy(sb); /* kill -9 of b's agent, as the coordinator sees it */
  assert_true(wait_job_state(f->ch, job, JS(FAILED), 5000));
  int64_t took = pxt_now_ms() - t0;
  printf("job FAILED %lld ms after the agent left (grace 400 ms)\n", (long long)took);
  assert_true(took >= 350);
  Prunex__V1__Job *j = get_job(f->ch, job);
  if (!strstr(j->reason, "node beta") || !strstr(j->reason, "lost") ||
      !strstr(j->reason, "agent"))
    fail_msg("reason: %s", j->reason);
  /* rank_exits agrees: beta's rank 1 has a record saying why. */
  assert_int_equal(j->n_rank_exits, 1);
  assert_int_equal(j->rank_exits[0]->rank, 1);
  assert_string_equal(j->rank_exits[0]->node_id, b);
  assert_int_equal(j->rank_exits[0]->exit_code, -1);
  assert_non_null(strstr(j->rank_exits[0]->reason, "lost"));
  px_rpc_message_free(j);
  /* alpha is told to stop and is free; beta is LOST, never READY. */
  Prunex__V1__Assignment *x = pxt_next_assignment(sa, 5000);
  assert_non_null(x);
  assert_int_equal(x->action, CANCEL);
  px_rpc_message_free(x);
  assert_int_equal(pxt_node_state(f->ch, a), NS(READY));
  assert_int_equal(pxt_node_state(f->ch, b), NS(LOST));
  /* A new 2-node job waits: beta is not offered. */
  char job2[64];
  assert_int_equal(pxt_submit_mp(f->ch, 2, 1, job2, sizeof job2), PX_OK);
  assert_int_equal(pxt_job_state(f->ch, job2), JS(PENDING));
  j = get_job(f->ch, job2);
  if (!strstr(j->reason, "needs 2 nodes x 1 device; 1 node")) fail_msg("reason: %s", j->reason);
  px_rpc_message_free(j);
  /* beta's agent comes back (registers, opens its stream): the job starts. */
  char b2[64];
  assert_int_equal(pxt_register(f->ch, "beta", 1, 0, b2, sizeof b2), PX_OK);
  assert_string_equal(b2, b);
  assert_int_equal(px_rpc_watch_assignments(f->ch, b, &sb), PX_OK);
  assert_true(wait_job_state(f->ch, job2, JS(SCHEDULED), 3000));
  px_rpc_stream_destroy(sa);
  px_rpc_stream_destroy(sb);
}

static void test_survivor_report_after_an_agent_left_blames_the_node(void **state) {
  fixture_t *f = *state;
  char a[64], b[64], job[64];
  px_rpc_stream_t *sa = NULL, *sb = NULL;
  start_two_node_job(f, a, b, job, &sa, &sb);
  px_rpc_stream_destroy(sb);
  pxt_sleep_ms(50); /* the coordinator sees the stream close */
  /* Rank 0 on alpha then fails: its peer vanished. */
  Prunex__V1__RankExit req = PRUNEX__V1__RANK_EXIT__INIT;
  req.job_id = job;
  req.node_id = a;
  req.rank = 0;
  req.exit_code = 1;
  req.reason = "rank 0 broke the communicator";
  assert_int_equal(px_rpc_report_rank_exit(f->ch, &req, 0), PX_OK);
  Prunex__V1__Job *j = get_job(f->ch, job);
  assert_int_equal(j->state, JS(FAILED));
  if (!strstr(j->reason, "node beta") || strstr(j->reason, "rank 0"))
    fail_msg("reason: %s", j->reason);
  assert_int_equal(j->n_rank_exits, 2); /* rank 0's own report, rank 1 lost */
  assert_int_equal(j->rank_exits[0]->exit_code, 1);
  assert_int_equal(j->rank_exits[1]->exit_code, -1);
  px_rpc_message_free(j);
  assert_int_equal(pxt_node_state(f->ch, b), NS(LOST));
  assert_int_equal(pxt_node_state(f->ch, a), NS(READY));
  px_rpc_stream_destroy(sa);
}

static void test_a_reconnecting_agent_is_not_lost(void **state) {
  fixture_t *f = *state;
  char a[64], b[64], job[64];
  px_rpc_stream_t *sa = NULL, *sb = NULL;
  start_two_node_job(f, a, b, job, &sa, &sb);
  px_rpc_stream_destroy(sb);
  assert_int_equal(px_rpc_watch_assignments(f->ch, b, &sb), PX_OK); /* back within the grace */
  Prunex__V1__Assignment *y = pxt_next_assignment(sb, 5000); /* the active job again */
  assert_non_null(y);
  px_rpc_message_free(y);
  for (int i = 0; i < 10; i++) { /* well past the grace */
    assert_int_equal(heartbeat_running(f->ch, a, job), PX_OK);
    assert_int_equal(heartbeat_running(f->ch, b, job), PX_OK);
    pxt_sleep_ms(100);
  }
  assert_int_equal(pxt_job_state(f->ch, job), JS(SCHEDULED));
  assert_int_equal(pxt_node_state(f->ch, b), NS(BUSY));
  px_rpc_stream_destroy(sa);
  px_rpc_stream_destroy(sb);
}

static void test_placement_that_never_starts_times_out(void **state) {
  fixture_t *f = *state;
  char a[64], b[64], started[64], stuck[64];
  assert_int_equal(pxt_register(f->ch, "runs", 1, 0, a, sizeof a), PX_OK);
  assert_int_equal(pxt_register(f->ch, "stuck", 1, 0, b, sizeof b), PX_OK);
  assert_int_equal(pxt_submit_mp(f->ch, 1, 1, started, sizeof started), PX_OK); /* on runs */
  assert_int_equal(pxt_submit_mp(f->ch, 1, 1, stuck, sizeof stuck), PX_OK);     /* on stuck */
  /* runs reports its job running; stuck heartbeats without it. */
  int64_t end = pxt_now_ms() + 2500;
  while (pxt_now_ms() < end && pxt_job_state(f->ch, stuck) == JS(SCHEDULED)) {
    assert_int_equal(heartbeat_running(f->ch, a, started), PX_OK);
    assert_int_equal(heartbeat_running(f->ch, b, NULL), PX_OK);
    pxt_sleep_ms(100);
  }
  Prunex__V1__Job *j = get_job(f->ch, stuck);
  assert_int_equal(j->state, JS(FAILED));
  if (!strstr(j->reason, "placement timed out: node stuck")) fail_msg("reason: %s", j->reason);
  assert_int_equal(j->n_rank_exits, 1);
  px_rpc_message_free(j);
  assert_int_equal(pxt_job_state(f->ch, started), JS(SCHEDULED));
  assert_int_equal(pxt_node_state(f->ch, b), NS(READY)); /* its agent is alive */
}

static void test_impossible_job_does_not_block_the_queue(void **state) {
  fixture_t *f = *state;
  char a[64], b[64], big[64], small[64];
  assert_int_equal(pxt_register(f->ch, "a", 2, 0, a, sizeof a), PX_OK);
  assert_int_equal(pxt_register(f->ch, "b", 2, 0, b, sizeof b), PX_OK);
  assert_int_equal(pxt_submit_mp(f->ch, 3, 2, big, sizeof big), PX_OK);
  assert_int_equal(pxt_submit_mp(f->ch, 1, 2, small, sizeof small), PX_OK);
  assert_int_equal(pxt_job_state(f->ch, big), JS(PENDING));
  assert_int_equal(pxt_job_state(f->ch, small), JS(SCHEDULED));
  Prunex__V1__Job *j = get_job(f->ch, big);
  if (!strstr(j->reason, "needs 3 nodes x 2 devices; 2 nodes with 2 or more devices"))
    fail_msg("reason: %s", j->reason);
  px_rpc_message_free(j);
}

/* From tests/fuzz (coord_requests): bytes with a field number 0 under a
 * non-canonical tag unpack, but their repacked form does not (protobuf-c).
 * The coordinator stores a spec repacked, so such a spec would make every
 * later GetJob and ListJobs fail: it must be refused (the workers' checks,
 * which re-read the repacked spec, do), and the coordinator keeps
 * answering. */
static void test_spec_that_does_not_repack_is_refused(void **state) {
  fixture_t *f = *state;
  pxt_spec_t s;
  pxt_spec_init(&s, 1, 1);
  size_t n = protobuf_c_message_get_packed_size(&s.spec.base);
  uint8_t spec[1024], req[1100];
  assert_true(n + 3 < sizeof spec);
  protobuf_c_message_pack(&s.spec.base, spec);
  memcpy(spec + n, "\x82\x00\x00", 3); /* field 0, length 0, tag in two bytes */
  n += 3;
  assert_true(n < 128);
  req[0] = 0x0a; /* SubmitJobRequest.spec */
  req[1] = (uint8_t)n;
  memcpy(req + 2, spec, n);
  void *resp = NULL;
  size_t len = 0;
  px_status_t st = px_rpc_call_raw(f->ch, "/prunex.v1.Jobs/SubmitJob", req, n + 2, 5000, &resp,
                                   &len);
  px_free(resp);
  assert_int_equal(st, PX_ERR_INVALID);
  assert_int_equal(px_rpc_last_code(), PX_RPC_INVALID_ARGUMENT);
  Prunex__V1__ListJobsRequest lr = PRUNEX__V1__LIST_JOBS_REQUEST__INIT;
  Prunex__V1__ListJobsResponse *l = NULL;
  assert_int_equal(px_rpc_list_jobs(f->ch, &lr, 0, &l), PX_OK);
  px_rpc_message_free(l);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test_setup_teardown(test_gone_agent_fails_its_job_naming_the_node, setup,
                                      teardown),
      cmocka_unit_test_setup_teardown(test_survivor_report_after_an_agent_left_blames_the_node,
                                      setup, teardown),
      cmocka_unit_test_setup_teardown(test_a_reconnecting_agent_is_not_lost, setup, teardown),
      cmocka_unit_test_setup_teardown(test_placement_that_never_starts_times_out, setup, teardown),
      cmocka_unit_test_setup_teardown(test_impossible_job_does_not_block_the_queue, setup,
                                      teardown),
      cmocka_unit_test_setup_teardown(test_spec_that_does_not_repack_is_refused, setup,
                                      teardown),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
