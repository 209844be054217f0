/* Automatic restarts in pxcoordd: a fault of a job whose spec
 * allows restarts (recovery.max_restarts) queues it again instead of
 * failing it: the attempt is recorded with its cause and nodes, the old
 * attempt's nodes get a CANCEL naming it, the job is placed again (the same
 * nodes when alive, else others) with START naming the new attempt, an exit
 * of the old attempt is ignored, a placement that timed out avoids the node
 * that did not start, and the fault after the last restart FAILS
 * the job. Without restarts nothing changes. `pxctl status` shows the
 * attempts. A job being preempted whose node is lost is queued again as
 * preempted, using no restart. Real pxcoordd on loopback, agents played through the RPC API. */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>

#include <cmocka.h>

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
  static const char *const extra[] = {"--agent-grace-ms", "400", "--placement-timeout-ms", "20000",
                                      NULL};
  if (!f || pxt_coordd_setup(&f->d, extra) != 0) {
    free(f);
    return -1;
  }
  if (px_rpc_channel_create(f->d.target, &f->ch) != PX_OK) return -1;
  *state = f;
  return 0;
}

/* The same with a placement timeout of 1 s. */
static int setup_short_placement(void **state) {
  fixture_t *f = calloc(1, sizeof *f);
  static const char *const extra[] = {"--agent-grace-ms", "400", "--placement-timeout-ms", "1000",
                                      NULL};
  if (!f || pxt_coordd_setup(&f->d, extra) != 0) {
    free(f);
    return -1;
  }
  if (px_rpc_channel_create(f->d.target, &f->ch) != PX_OK) return -1;
  *state = f;
  return 0;
}

/* The same with preemption on (a grace long enough never to end it here). */
static int setup_preemption(void **state) {
  fixture_t *f = calloc(1, sizeof *f);
  if (!f) return -1;
  f->d.pid = -1;
  char conf[400];
  if (pxt_mkdtemp(f->d.dir, sizeof f->d.dir) != 0) return -1;
  snprintf(f->d.db, sizeof f->d.db, "%s/coord.db", f->d.dir);
  snprintf(conf, sizeof conf, "%s/coord.conf", f->d.dir);
  FILE *cf = fopen(conf, "w");
  if (!cf || fprintf(cf, "preemption = on\npreemption_grace_s = 600\n") < 0 || fclose(cf) != 0)
    return -1;
  const char *const extra[] = {"--agent-grace-ms", "400", "--placement-timeout-ms", "20000",
                               "--config", conf, NULL};
  if (pxt_coordd_start(&f->d, extra) != 0) return -1;
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

/* Submits a job of nodes x 1 worker with recovery.max_restarts. */
static void submit(fixture_t *f, int nodes, int max_restarts, char *job, size_t cap) {
  pxt_spec_t s;
  pxt_spec_init(&s, nodes, 1);
  Prunex__V1__RecoverySpec rec = PRUNEX__V1__RECOVERY_SPEC__INIT;
  rec.max_restarts = max_restarts;
  s.spec.recovery = &rec;
  assert_int_equal(pxt_submit(f->ch, &s, job, cap), PX_OK);
}

/* The next assignment on s must be action for attempt. */
static void expect(px_rpc_stream_t *s, int action, int attempt, const char *job) {
  Prunex__V1__Assignment *a = pxt_next_assignment(s, 5000);
  assert_non_null(a);
  assert_string_equal(a->job_id, job);
  if ((int)a->action != action || a->attempt != attempt)
    fail_msg("assignment: action %d attempt %d, expected action %d attempt %d", (int)a->action,
             a->attempt, action, attempt);
  px_rpc_message_free(a);
}

/* Registers nodes named names[0..n) (one device each) and opens each one's
 * assignment stream, as its agent would: ids[i], streams[i]. */
static void nodes_up(fixture_t *f, int n, const char *const *names, char ids[][64],
                     px_rpc_stream_t **streams) {
  for (int i = 0; i < n; i++)
    assert_int_equal(pxt_register(f->ch, names[i], 1, 0, ids[i], 64), PX_OK);
  for (int i = 0; i < n; i++)
    assert_int_equal(px_rpc_watch_assignments(f->ch, ids[i], &streams[i]), PX_OK);
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
  req.reason = sig ? "pxworker was killed by signal 9 (Killed)" : "pxworker exited with code 3";
  return px_rpc_report_rank_exit(f->ch, &req, 0);
}

static int has_event(const Prunex__V1__Job *j, int to, const char *text) {
  for (size_t i = 0; i < j->n_events; i++)
    if ((int)j->events[i]->to_state == to && strstr(j->events[i]->reason, text)) return 1;
  return 0;
}

static void test_killed_rank_restarts_then_the_next_fault_fails_the_job(void **state) {
  fixture_t *f = *state;
  char id[2][64], job[64];
  px_rpc_stream_t *strm[2] = {NULL, NULL};
  nodes_up(f, 2, (const char *const[]){"n1", "n2"}, id, strm);
  char *a = id[0], *b = id[1];
  px_rpc_stream_t *sa = strm[0], *sb = strm[1];
  submit(f, 2, 1, job, sizeof job);
  expect(sa, START, 1, job);
  expect(sb, START, 1, job);
  Prunex__V1__Job *j = get_job(f->ch, job);
  assert_int_equal(j->attempt, 1);
  assert_int_equal(j->n_attempts, 0);
  px_rpc_message_free(j);
  pxt_sleep_ms(1500); /* attempt 1 runs a while: the job's wall time counts it */

  /* Rank 1 on n2 is killed: attempt 1 ends, attempt 2 is placed on the
   * same nodes. */
  assert_int_equal(rank_exit(f, job, b, 1, 1, 0, 9), PX_OK);
  expect(sa, CANCEL, 1, job);
  expect(sb, CANCEL, 1, job);
  expect(sa, START, 2, job);
  expect(sb, START, 2, job);
  j = get_job(f->ch, job);
  assert_int_equal(j->state, JS(SCHEDULED));
  assert_int_equal(j->attempt, 2);
  assert_int_equal(j->n_node_ids, 2);
  assert_string_equal(j->node_ids[0], a);
  assert_string_equal(j->node_ids[1], b);
  assert_int_equal(j->n_rank_exits, 0); /* the old attempt's records are gone */
  assert_int_equal(j->n_attempts, 1);
  assert_int_equal(j->attempts[0]->attempt, 1);
  if (!strstr(j->attempts[0]->cause, "rank 1") || !strstr(j->attempts[0]->cause, "signal 9"))
    fail_msg("cause: %s", j->attempts[0]->cause);
  assert_int_equal(j->attempts[0]->n_node_ids, 2);
  assert_string_equal(j->attempts[0]->node_ids[1], b);
  assert_true(j->attempts[0]->ended_unix_ms > 0);
  if (!has_event(j, JS(PENDING), "attempt 1 failed: rank 1") ||
      !has_event(j, JS(PENDING), "; restart 1 of 1"))
    fail_msg("no PENDING event for the restart");
  px_rpc_message_free(j);

  /* Exits of attempt 1's other rank (stopped by its agent) change nothing. */
  assert_int_equal(rank_exit(f, job, a, 0, 1, 143, 0), PX_OK);
  j = get_job(f->ch, job);
  assert_int_equal(j->state, JS(SCHEDULED));
  assert_int_equal(j->n_rank_exits, 0);
  px_rpc_message_free(j);

  /* The second fault: no restart left. */
  assert_int_equal(rank_exit(f, job, a, 0, 2, 3, 0), PX_OK);
  expect(sa, CANCEL, 2, job);
  expect(sb, CANCEL, 2, job);
  j = get_job(f->ch, job);
  assert_int_equal(j->state, JS(FAILED));
  if (!strstr(j->reason, "failed after 2 attempts") || !strstr(j->reason, "rank 0") ||
      !strstr(j->reason, "code 3"))
    fail_msg("reason: %s", j->reason);
  assert_int_equal(j->attempt, 2);
  assert_int_equal(j->n_attempts, 2);
  assert_int_equal(j->attempts[1]->attempt, 2);
  assert_non_null(strstr(j->attempts[1]->cause, "rank 0"));
  assert_int_equal(j->n_rank_exits, 1);
  /* from the first placement, not attempt 2's (which lasted milliseconds) */
  assert_non_null(j->summary);
  if (j->summary->wall_s < 1.4) fail_msg("wall time %.3f s: attempt 1 left out", j->summary->wall_s);
  px_rpc_message_free(j);
  assert_int_equal(pxt_node_state(f->ch, a), NS(READY));
  assert_int_equal(pxt_node_state(f->ch, b), NS(READY));

  /* What the operator sees. */
  char env[128];
  snprintf(env, sizeof env, "PRUNEX_COORDINATOR=%s", f->d.target);
  const char *const envs[] = {env, NULL};
  static pxt_result_t r;
  const char *const st[] = {"status", job, NULL};
  if (pxt_pxctl(&r, f->d.dir, st, envs, 30000) != 0) pxt_show("pxctl status", &r);
  assert_int_equal(r.code, 0);
  printf("%s", r.out);
  if (!strstr(r.out, "attempt    2 of 2 (1 restart allowed)") ||
      !strstr(r.out, "attempt 1  ended") || !strstr(r.out, "attempt 2  ended") ||
      !strstr(r.out, "n2 (") || !strstr(r.out, "signal 9"))
    fail_msg("pxctl status:\n%s", r.out);
  const char *const js[] = {"status", job, "--json", NULL};
  assert_int_equal(pxt_pxctl(&r, f->d.dir, js, envs, 30000), 0);
  if (!strstr(r.out, "\"attempts\"") ||
      (!strstr(r.out, "\"attempt\": 2") && !strstr(r.out, "\"attempt\":2")))
    fail_msg("pxctl status --json:\n%s", r.out);
  const char *const ls[] = {"list", NULL};
  assert_int_equal(pxt_pxctl(&r, f->d.dir, ls, envs, 30000), 0);
  if (!strstr(r.out, "FAILED (attempt 2)")) fail_msg("pxctl list:\n%s", r.out);
  px_rpc_stream_destroy(sa);
  px_rpc_stream_destroy(sb);
}

static void test_without_restarts_a_fault_fails_the_job(void **state) {
  fixture_t *f = *state;
  char a[64], job[64];
  px_rpc_stream_t *sa = NULL;
  assert_int_equal(pxt_register(f->ch, "n1", 1, 0, a, sizeof a), PX_OK);
  assert_int_equal(px_rpc_watch_assignments(f->ch, a, &sa), PX_OK);
  submit(f, 1, 0, job, sizeof job);
  expect(sa, START, 1, job);
  assert_int_equal(rank_exit(f, job, a, 0, 1, 0, 9), PX_OK);
  expect(sa, CANCEL, 1, job);
  Prunex__V1__Job *j = get_job(f->ch, job);
  assert_int_equal(j->state, JS(FAILED));
  if (strncmp(j->reason, "rank 0 on node", 14) != 0 || strstr(j->reason, "attempt"))
    fail_msg("reason: %s", j->reason);
  assert_int_equal(j->attempt, 1);
  assert_int_equal(j->n_attempts, 0);
  assert_int_equal(j->n_rank_exits, 1);
  px_rpc_message_free(j);
  /* An exit naming an attempt the job never had is ignored as well. */
  assert_int_equal(rank_exit(f, job, a, 0, 7, 1, 0), PX_OK);
  px_rpc_stream_destroy(sa);
}

static void test_lost_node_moves_the_job_to_the_third_node(void **state) {
  fixture_t *f = *state;
  char id[3][64], job[64];
  px_rpc_stream_t *strm[3] = {NULL, NULL, NULL};
  nodes_up(f, 3, (const char *const[]){"n1", "n2", "n3"}, id, strm);
  char *a = id[0], *b = id[1], *c = id[2];
  px_rpc_stream_t *sa = strm[0], *sb = strm[1], *sc = strm[2];
  submit(f, 2, 1, job, sizeof job);
  expect(sa, START, 1, job);
  expect(sb, START, 1, job);
  /* n2's agent dies (kill -9): its stream closes; after the grace the node
   * is LOST and the job moves to n1 + n3. */
  px_rpc_stream_destroy(sb);
  expect(sa, CANCEL, 1, job);
  expect(sa, START, 2, job);
  expect(sc, START, 2, job);
  assert_int_equal(pxt_node_state(f->ch, b), NS(LOST));
  Prunex__V1__Job *j = get_job(f->ch, job);
  assert_int_equal(j->state, JS(SCHEDULED));
  assert_int_equal(j->attempt, 2);
  assert_int_equal(j->n_node_ids, 2);
  assert_string_equal(j->node_ids[0], a);
  assert_string_equal(j->node_ids[1], c);
  assert_int_equal(j->n_attempts, 1);
  if (!strstr(j->attempts[0]->cause, "node n2") || !strstr(j->attempts[0]->cause, "lost"))
    fail_msg("cause: %s", j->attempts[0]->cause);
  assert_int_equal(j->attempts[0]->n_node_ids, 2);
  assert_string_equal(j->attempts[0]->node_ids[1], b);
  px_rpc_message_free(j);
  /* The new attempt's ranks can report; the job runs to its end. */
  assert_int_equal(rank_exit(f, job, a, 0, 2, 0, 0), PX_OK);
  assert_int_equal(rank_exit(f, job, c, 1, 2, 0, 0), PX_OK);
  assert_true(wait_job_state(f->ch, job, JS(SUCCEEDED), 2000));
  assert_int_equal(pxt_node_state(f->ch, c), NS(READY));
  px_rpc_stream_destroy(sa);
  px_rpc_stream_destroy(sc);
}

/* A survivor's report after a node's agent left: the node is blamed and
 * LOST, and the restarted job avoids it. */
static void test_survivor_report_restarts_without_the_gone_node(void **state) {
  fixture_t *f = *state;
  char id[3][64], job[64];
  px_rpc_stream_t *strm[3] = {NULL, NULL, NULL};
  nodes_up(f, 3, (const char *const[]){"n1", "n2", "n3"}, id, strm);
  char *a = id[0], *b = id[1]; /* n3: free for the restart */
  px_rpc_stream_t *sa = strm[0], *sb = strm[1], *sc = strm[2];
  submit(f, 2, 2, job, sizeof job);
  expect(sa, START, 1, job);
  expect(sb, START, 1, job);
  px_rpc_stream_destroy(sb);
  pxt_sleep_ms(50); /* the coordinator sees the stream close */
  assert_int_equal(rank_exit(f, job, a, 0, 1, 1, 0), PX_OK);
  expect(sa, CANCEL, 1, job);
  expect(sa, START, 2, job);
  expect(sc, START, 2, job);
  Prunex__V1__Job *j = get_job(f->ch, job);
  assert_int_equal(j->attempt, 2);
  if (!strstr(j->attempts[0]->cause, "node n2") || strstr(j->attempts[0]->cause, "rank 0"))
    fail_msg("cause: %s", j->attempts[0]->cause);
  px_rpc_message_free(j);
  assert_int_equal(pxt_node_state(f->ch, b), NS(LOST));
  /* A user cancel is never restarted. */
  Prunex__V1__CancelJobResponse *cr = NULL;
  assert_int_equal(px_rpc_cancel_job(f->ch, job, "test", 0, &cr), PX_OK);
  px_rpc_message_free(cr);
  expect(sa, CANCEL, 2, job);
  expect(sc, CANCEL, 2, job);
  assert_int_equal(pxt_job_state(f->ch, job), JS(CANCELLED));
  px_rpc_stream_destroy(sa);
  px_rpc_stream_destroy(sc);
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

/* A placement that times out on one node is placed again with that node
 * last: the job moves to the free third node. */
static void test_placement_timeout_restarts_away_from_the_stuck_node(void **state) {
  fixture_t *f = *state;
  char id[3][64], job[64];
  px_rpc_stream_t *strm[3] = {NULL, NULL, NULL};
  nodes_up(f, 3, (const char *const[]){"runs", "stuck", "spare"}, id, strm);
  char *a = id[0], *b = id[1], *c = id[2];
  px_rpc_stream_t *sa = strm[0], *sb = strm[1], *sc = strm[2];
  submit(f, 2, 1, job, sizeof job);
  expect(sa, START, 1, job);
  expect(sb, START, 1, job);
  int64_t end = pxt_now_ms() + 4000;
  Prunex__V1__Job *j = NULL;
  while (pxt_now_ms() < end) { /* runs starts its rank; stuck never does */
    assert_int_equal(heartbeat_running(f->ch, a, job), PX_OK);
    assert_int_equal(heartbeat_running(f->ch, b, NULL), PX_OK);
    assert_int_equal(heartbeat_running(f->ch, c, NULL), PX_OK);
    j = get_job(f->ch, job);
    if (j->attempt == 2) break;
    px_rpc_message_free(j);
    j = NULL;
    pxt_sleep_ms(100);
  }
  assert_non_null(j);
  if (!strstr(j->attempts[0]->cause, "placement timed out: node stuck"))
    fail_msg("cause: %s", j->attempts[0]->cause);
  assert_int_equal(j->n_node_ids, 2);
  assert_string_equal(j->node_ids[0], a);
  assert_string_equal(j->node_ids[1], c);
  px_rpc_message_free(j);
  expect(sc, START, 2, job);
  assert_int_equal(pxt_node_state(f->ch, b), NS(READY)); /* its agent is alive */
  px_rpc_stream_destroy(sa);
  px_rpc_stream_destroy(sb);
  px_rpc_stream_destroy(sc);
}

/* A job asked to stop for a preemption whose node is lost before
 * it stopped is queued again as preempted, not as a fault: with
 * max_restarts 0 it is PENDING for attempt 2 (not FAILED), the attempt's
 * cause names the preemption and the node, and the job it was preempted
 * for starts on the node left. */
static void test_lost_node_of_a_preempted_job_uses_no_restart(void **state) {
  fixture_t *f = *state;
  char id[2][64], victim[64], waiter[64];
  px_rpc_stream_t *strm[2] = {NULL, NULL};
  nodes_up(f, 2, (const char *const[]){"n1", "n2"}, id, strm);
  char *b = id[1];
  px_rpc_stream_t *sa = strm[0], *sb = strm[1];
  pxt_spec_t s;
  pxt_spec_init(&s, 2, 1);
  Prunex__V1__RecoverySpec rec = PRUNEX__V1__RECOVERY_SPEC__INIT;
  rec.max_restarts = 0;
  rec.checkpoint_every = 1; /* preemptible */
  s.spec.recovery = &rec;
  s.spec.priority = 10;     /* below the default the waiter has */
  assert_int_equal(pxt_submit(f->ch, &s, victim, sizeof victim), PX_OK);
  expect(sa, START, 1, victim);
  expect(sb, START, 1, victim);
  pxt_spec_t w;
  pxt_spec_init(&w, 1, 1);
  assert_int_equal(pxt_submit(f->ch, &w, waiter, sizeof waiter), PX_OK);
  /* the victim is asked to stop; before it does, n2's agent dies */
  pxt_sleep_ms(300);
  assert_int_equal(pxt_job_state(f->ch, victim), JS(SCHEDULED));
  px_rpc_stream_destroy(sb);
  expect(sa, CANCEL, 1, victim);
  expect(sa, START, 1, waiter);
  assert_int_equal(pxt_node_state(f->ch, b), NS(LOST));
  Prunex__V1__Job *j = get_job(f->ch, victim);
  if (j->state != JS(PENDING) || j->attempt != 2 || j->n_attempts != 1 ||
      !strstr(j->attempts[0]->cause, "preempted by") ||
      !strstr(j->attempts[0]->cause, "node n2") || !has_event(j, JS(PENDING), "preempted"))
    fail_msg("state %d, attempt %d, %zu attempts: %s", (int)j->state, j->attempt, j->n_attempts,
             j->n_attempts ? j->attempts[0]->cause : "");
  px_rpc_message_free(j);
  px_rpc_stream_destroy(sa);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test_setup_teardown(test_killed_rank_restarts_then_the_next_fault_fails_the_job,
                                      setup, teardown),
      cmocka_unit_test_setup_teardown(test_without_restarts_a_fault_fails_the_job, setup,
                                      teardown),
      cmocka_unit_test_setup_teardown(test_lost_node_moves_the_job_to_the_third_node, setup,
                                      teardown),
      cmocka_unit_test_setup_teardown(test_survivor_report_restarts_without_the_gone_node, setup,
                                      teardown),
      cmocka_unit_test_setup_teardown(test_placement_timeout_restarts_away_from_the_stuck_node,
                                      setup_short_placement, teardown),
      cmocka_unit_test_setup_teardown(test_lost_node_of_a_preempted_job_uses_no_restart,
                                      setup_preemption, teardown),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
