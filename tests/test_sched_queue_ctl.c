/* Queue controls and ownership with the real pxcoordd, several
 * users by token and nodes played through the RPC API (as test_coord_sched
 * does): hold keeps a pending job out while others run and release lets it
 * run; an admin's hold is released by an admin only; update changes a
 * job's priority and time limit under the submission's rules (refusals
 * name the field); --after ok/any orders jobs, and a dependency that can
 * never be met cancels the job with that reason; holds and dependencies
 * survive a restart; `pxctl list` shows USER and filters by --user/--me on
 * the coordinator; `pxctl acct` shows START and END and cuts reasons at a
 * word. */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>

#include <cmocka.h>

#include "agent_harness.h"
#include "pxctl_harness.h"

#define JS(x) PRUNEX__V1__JOB_STATE__JOB_STATE_##x

typedef struct {
  pxt_coordd_t d;
  char tokens[320];
  char config[320];
  const char *extra[5];
  px_rpc_channel_t *admin, *alice, *bob, *n1;
  char node_id[64];
} fixture_t;

static void connect_all(fixture_t *f) {
  f->admin = pxt_channel(f->d.target, NULL, PXT_TOK_ADMIN);
  f->alice = pxt_channel(f->d.target, NULL, PXT_TOK_ALICE);
  f->bob = pxt_channel(f->d.target, NULL, PXT_TOK_BOB);
  f->n1 = pxt_channel(f->d.target, NULL, PXT_TOK_N1);
  assert_true(f->admin && f->alice && f->bob && f->n1);
}

static void disconnect_all(fixture_t *f) {
  px_rpc_channel_destroy(f->admin);
  px_rpc_channel_destroy(f->alice);
  px_rpc_channel_destroy(f->bob);
  px_rpc_channel_destroy(f->n1);
}

/* A daemon with tokens for root (admin), alice, bob and node n1, the
 * policy in config_text; n1 (one device) registered when with_node. */
static fixture_t *start(const char *config_text, int with_node) {
  fixture_t *f = calloc(1, sizeof *f);
  assert_non_null(f);
  const char *toks = PXT_TOK_ADMIN " root admin\n" PXT_TOK_ALICE " alice user\n" PXT_TOK_BOB
                     " bob user\n" PXT_TOK_N1 " n1 node\n";
  assert_int_equal(pxt_coordd_prepare_tokens(&f->d, f->tokens, sizeof f->tokens, toks), 0);
  snprintf(f->config, sizeof f->config, "%s/coord.conf", f->d.dir);
  FILE *cf = fopen(f->config, "w");
  assert_non_null(cf);
  fputs(config_text, cf);
  fclose(cf);
  const char *extra[] = {"--tokens", f->tokens, "--config", f->config, NULL};
  memcpy(f->extra, extra, sizeof extra);
  assert_int_equal(pxt_coordd_start(&f->d, f->extra), 0);
  connect_all(f);
  if (with_node)
    assert_int_equal(pxt_register(f->n1, "n1", 1, 0, f->node_id, sizeof f->node_id), PX_OK);
  return f;
}

static void stop(fixture_t *f) {
  disconnect_all(f);
  assert_int_equal(pxt_coordd_teardown(&f->d), 0);
  free(f);
}

static void must_submit(px_rpc_channel_t *ch, int priority, int limit_s, const char *after,
                        int any, char *job, size_t cap) {
  pxt_spec_t s;
  pxt_spec_init(&s, 1, 1);
  s.spec.priority = priority;
  s.spec.time_limit_s = limit_s;
  Prunex__V1__JobDependency dep = PRUNEX__V1__JOB_DEPENDENCY__INIT, *dp = &dep;
  if (after) {
    dep.job_id = (char *)after;
    dep.kind = any ? PRUNEX__V1__DEPENDENCY_KIND__DEPENDENCY_KIND_ANY
                   : PRUNEX__V1__DEPENDENCY_KIND__DEPENDENCY_KIND_OK;
    s.req.after = &dp;
    s.req.n_after = 1;
  }
  if (pxt_submit(ch, &s, job, cap) != PX_OK) fail_msg("submit: %s", px_last_error());
}

static void cancel(fixture_t *f, const char *job) {
  Prunex__V1__CancelJobResponse *r = NULL;
  assert_int_equal(px_rpc_cancel_job(f->admin, job, "test", 0, &r), PX_OK);
  px_rpc_message_free(r);
}

/* rank 0 of the job on n1 exits with code (0: the job SUCCEEDED, else FAILED) */
static void finish(fixture_t *f, const char *job, int code) {
  Prunex__V1__RankExit ex = PRUNEX__V1__RANK_EXIT__INIT;
  ex.job_id = (char *)job;
  ex.node_id = f->node_id;
  ex.exit_code = code;
  ex.reason = code ? "test failure" : "";
  assert_int_equal(px_rpc_report_rank_exit(f->n1, &ex, 0), PX_OK);
}

static void reason_has(px_rpc_channel_t *ch, const char *job, const char *needle) {
  Prunex__V1__Job *j = NULL;
  assert_int_equal(px_rpc_get_job(ch, job, 0, &j), PX_OK);
  if (!strstr(j->reason, needle))
    fail_msg("job %s: expected '%s' in its reason '%s'", job, needle, j->reason);
  px_rpc_message_free(j);
}

typedef px_status_t (*ctl_fn)(px_rpc_channel_t *, const char *);
static px_status_t hold(px_rpc_channel_t *ch, const char *job) {
  Prunex__V1__HoldJobRequest req = PRUNEX__V1__HOLD_JOB_REQUEST__INIT;
  req.job_id = (char *)job;
  Prunex__V1__Job *j = NULL;
  px_status_t st = px_rpc_hold_job(ch, &req, 0, &j);
  px_rpc_message_free(j);
  return st;
}
static px_status_t release(px_rpc_channel_t *ch, const char *job) {
  Prunex__V1__ReleaseJobRequest req = PRUNEX__V1__RELEASE_JOB_REQUEST__INIT;
  req.job_id = (char *)job;
  Prunex__V1__Job *j = NULL;
  px_status_t st = px_rpc_release_job(ch, &req, 0, &j);
  px_rpc_message_free(j);
  return st;
}
static void refused(px_status_t st, px_rpc_code_t code, const char *needle) {
  assert_int_not_equal(st, PX_OK);
  if (px_rpc_last_code() != code || !strstr(px_last_error(), needle))
    fail_msg("expected %s with '%s', got %s: %s", px_rpc_code_name(code), needle,
             px_rpc_code_name(px_rpc_last_code()), px_last_error());
}

/* ---- hold / release ------------------------------------------------------------ */

static void test_hold_keeps_a_job_pending_while_another_runs(void **state) {
  (void)state;
  fixture_t *f = start("log_level = info\n", 1);
  char a1[64], a2[64], b1[64], b2[64];
  must_submit(f->alice, 0, 0, NULL, 0, a1, sizeof a1);
  assert_int_equal(pxt_job_state(f->admin, a1), JS(SCHEDULED));
  must_submit(f->alice, 0, 0, NULL, 0, a2, sizeof a2); /* first in line */
  must_submit(f->bob, 0, 0, NULL, 0, b1, sizeof b1);
  refused(hold(f->bob, a2), PX_RPC_PERMISSION_DENIED, "only its owner or an admin");
  refused(hold(f->alice, a1), PX_RPC_FAILED_PRECONDITION, "only a pending job can be held");
  assert_int_equal(hold(f->alice, a2), PX_OK);
  reason_has(f->bob, a2, "held by alice");
  cancel(f, a1); /* n1 free: bob's job runs, the held one stays */
  assert_int_equal(pxt_job_state(f->admin, b1), JS(SCHEDULED));
  assert_int_equal(pxt_job_state(f->admin, a2), JS(PENDING));
  reason_has(f->alice, a2, "held by alice");
  assert_int_equal(release(f->alice, a2), PX_OK);
  reason_has(f->alice, a2, "first in line"); /* waits for n1 again, as any job */
  refused(release(f->alice, a2), PX_RPC_FAILED_PRECONDITION, "not held");
  cancel(f, b1);
  assert_int_equal(pxt_job_state(f->admin, a2), JS(SCHEDULED));
  /* an admin's hold is released by an admin only */
  must_submit(f->bob, 0, 0, NULL, 0, b2, sizeof b2);
  assert_int_equal(hold(f->admin, b2), PX_OK);
  reason_has(f->bob, b2, "held by admin root");
  refused(release(f->bob, b2), PX_RPC_PERMISSION_DENIED, "only an admin may release it");
  assert_int_equal(release(f->admin, b2), PX_OK);
  stop(f);
}

/* ---- update ------------------------------------------------------------------------ */

static px_status_t update(px_rpc_channel_t *ch, const char *job, int priority, int limit_s,
                          Prunex__V1__Job **out) {
  Prunex__V1__UpdateJobRequest req = PRUNEX__V1__UPDATE_JOB_REQUEST__INIT;
  req.job_id = (char *)job;
  req.priority = priority;
  req.time_limit_s = limit_s;
  Prunex__V1__Job *j = NULL;
  px_status_t st = px_rpc_update_job(ch, &req, 0, &j);
  if (out) *out = j;
  else px_rpc_message_free(j);
  return st;
}

static void test_update_follows_the_submission_rules(void **state) {
  (void)state;
  fixture_t *f = start("time_limit_max_s = 3600\n", 0);
  char a1[64];
  must_submit(f->alice, 0, 600, NULL, 0, a1, sizeof a1);
  Prunex__V1__Job *j = NULL;
  assert_int_equal(update(f->alice, a1, 40, 1800, &j), PX_OK); /* lower, within the max */
  assert_int_equal(j->priority, 40);
  assert_int_equal(j->time_limit_ms, 1800000);
  px_rpc_message_free(j);
  assert_int_equal(px_rpc_get_job(f->bob, a1, 0, &j), PX_OK);
  assert_non_null(j->sched); /* the queue's entry follows */
  assert_int_equal(j->sched->job_priority, 40);
  assert_int_equal(j->sched->time_limit_ms, 1800000);
  px_rpc_message_free(j);
  refused(update(f->alice, a1, 200, 0, NULL), PX_RPC_PERMISSION_DENIED, "priority = 200");
  refused(update(f->alice, a1, 0, 7200, NULL), PX_RPC_PERMISSION_DENIED, "time_limit_s = 7200");
  refused(update(f->alice, a1, 5000, 0, NULL), PX_RPC_INVALID_ARGUMENT, "priority = 5000");
  refused(update(f->alice, a1, 0, -5, NULL), PX_RPC_INVALID_ARGUMENT, "time_limit_s = -5");
  refused(update(f->alice, a1, 0, 0, NULL), PX_RPC_INVALID_ARGUMENT, "nothing to update");
  refused(update(f->bob, a1, 10, 0, NULL), PX_RPC_PERMISSION_DENIED, "only its owner");
  /* an admin goes beyond both */
  assert_int_equal(update(f->admin, a1, 900, 7200, &j), PX_OK);
  assert_int_equal(j->priority, 900);
  assert_int_equal(j->time_limit_ms, 7200000);
  px_rpc_message_free(j);
  cancel(f, a1);
  refused(update(f->admin, a1, 10, 0, NULL), PX_RPC_FAILED_PRECONDITION, "already finished");
  stop(f);
}

/* ---- dependencies ------------------------------------------------------------------ */

static void test_after_ok_and_any_order_the_jobs(void **state) {
  (void)state;
  fixture_t *f = start("log_level = info\n", 1);
  char a1[64], ok[64], any[64], x[64];
  must_submit(f->alice, 0, 0, NULL, 0, a1, sizeof a1);
  must_submit(f->bob, 0, 0, a1, 0, ok, sizeof ok);
  must_submit(f->alice, 0, 0, a1, 1, any, sizeof any);
  assert_int_equal(pxt_job_state(f->admin, a1), JS(SCHEDULED));
  reason_has(f->bob, ok, "dependency: waiting for ");
  reason_has(f->bob, ok, "to succeed");
  reason_has(f->alice, any, "to end");
  /* an unknown job is refused at submission, naming the dependency */
  pxt_spec_t s;
  pxt_spec_init(&s, 1, 1);
  Prunex__V1__JobDependency dep = PRUNEX__V1__JOB_DEPENDENCY__INIT, *dp = &dep;
  dep.job_id = "job-999999";
  s.req.after = &dp;
  s.req.n_after = 1;
  refused(pxt_submit(f->alice, &s, x, sizeof x), PX_RPC_INVALID_ARGUMENT,
          "after[0]: job job-999999 not found");
  finish(f, a1, 0); /* SUCCEEDED: both may run; bob's first (alice used n1: fair share) */
  assert_int_equal(pxt_job_state(f->admin, a1), JS(SUCCEEDED));
  assert_int_equal(pxt_job_state(f->admin, ok), JS(SCHEDULED));
  assert_int_equal(pxt_job_state(f->admin, any), JS(PENDING));
  reason_has(f->admin, any, "first in line");
  finish(f, ok, 3); /* FAILED: `any` still runs after it */
  assert_int_equal(pxt_job_state(f->admin, any), JS(SCHEDULED));
  stop(f);
}

static void test_a_dependency_never_met_cancels_the_job(void **state) {
  (void)state;
  fixture_t *f = start("log_level = info\n", 0);
  char a1[64], b[64], c[64], d[64];
  must_submit(f->alice, 0, 0, NULL, 0, a1, sizeof a1);
  must_submit(f->alice, 0, 0, a1, 0, b, sizeof b);  /* ok on a1 */
  must_submit(f->alice, 0, 0, b, 0, c, sizeof c);   /* ok on b: cancelled in turn */
  must_submit(f->alice, 0, 0, a1, 1, d, sizeof d);  /* any on a1: free to run */
  cancel(f, a1);
  assert_int_equal(pxt_job_state(f->admin, b), JS(CANCELLED));
  assert_int_equal(pxt_job_state(f->admin, c), JS(CANCELLED));
  assert_int_equal(pxt_job_state(f->admin, d), JS(PENDING));
  char want[160];
  snprintf(want, sizeof want, "dependency never satisfied: %s ended CANCELLED", a1);
  reason_has(f->alice, b, want);
  snprintf(want, sizeof want, "dependency never satisfied: %s ended CANCELLED", b);
  reason_has(f->alice, c, want);
  reason_has(f->alice, d, "cannot fit now"); /* no node: waits as any job does */
  stop(f);
}

/* ---- a restart ---------------------------------------------------------------------- */

static void test_holds_and_dependencies_survive_a_restart(void **state) {
  (void)state;
  fixture_t *f = start("log_level = info\n", 0);
  char a1[64], a2[64];
  must_submit(f->alice, 0, 0, NULL, 0, a1, sizeof a1);
  must_submit(f->alice, 0, 0, a1, 0, a2, sizeof a2);
  assert_int_equal(hold(f->alice, a1), PX_OK);
  disconnect_all(f);
  assert_true(pxt_coordd_stop(&f->d, SIGTERM) == 0);
  assert_int_equal(pxt_coordd_start(&f->d, f->extra), 0);
  connect_all(f);
  assert_int_equal(pxt_register(f->n1, "n1", 1, 0, f->node_id, sizeof f->node_id), PX_OK);
  Prunex__V1__Job *j = NULL;
  assert_int_equal(px_rpc_get_job(f->bob, a1, 0, &j), PX_OK);
  assert_int_equal((int)j->state, JS(PENDING));
  assert_string_equal(j->held_by, "alice");
  assert_string_equal(j->owner, "alice");
  px_rpc_message_free(j);
  assert_int_equal(px_rpc_get_job(f->bob, a2, 0, &j), PX_OK);
  assert_int_equal((int)j->n_after, 1);
  assert_string_equal(j->after[0]->job_id, a1);
  assert_int_equal((int)j->after[0]->state, JS(PENDING));
  px_rpc_message_free(j);
  reason_has(f->bob, a1, "held by alice");
  reason_has(f->bob, a2, "to succeed");
  assert_int_equal(release(f->alice, a1), PX_OK);
  assert_int_equal(pxt_job_state(f->admin, a1), JS(SCHEDULED));
  finish(f, a1, 0);
  assert_int_equal(pxt_job_state(f->admin, a2), JS(SCHEDULED));
  stop(f);
}

/* ---- pxctl: list, status, acct, hold, update ------------------------------------------ */

/* The lines of out that hold needle. */
static int lines_with(const char *out, const char *needle) {
  int n = 0;
  for (const char *p = strstr(out, needle); p; p = strstr(p + 1, needle)) n++;
  return n;
}

static void test_pxctl_shows_owners_and_queue_controls(void **state) {
  (void)state;
  fixture_t *f = start("log_level = info\n", 0);
  char a1[64], b1[64], b2[64];
  must_submit(f->alice, 0, 0, NULL, 0, a1, sizeof a1);
  must_submit(f->bob, 0, 0, NULL, 0, b1, sizeof b1);
  must_submit(f->bob, 0, 0, a1, 1, b2, sizeof b2);
  static pxt_result_t r;
  const char *list[] = {"list", NULL};
  pxt_pxctl_as(&r, &f->d, PXT_TOK_ALICE, list);
  if (r.code != 0 || !strstr(r.out, "USER") || lines_with(r.out, " bob ") != 2 ||
      lines_with(r.out, " alice ") != 1 || !strstr(r.out, "PENDING (after "))
    pxt_show("pxctl list", &r), fail();
  /* --limit 1 --user alice: the newest of alice's, not the newest job then filtered */
  const char *mine[] = {"list", "--user", "alice", "--limit", "1", NULL};
  pxt_pxctl_as(&r, &f->d, PXT_TOK_BOB, mine);
  if (r.code != 0 || !strstr(r.out, a1) || strstr(r.out, b1)) pxt_show("list --user", &r), fail();
  const char *me[] = {"list", "--me", NULL};
  pxt_pxctl_as(&r, &f->d, PXT_TOK_BOB, me);
  char row_a1[96];
  snprintf(row_a1, sizeof row_a1, "%s  alice", a1); /* its row (b2's names a1 as it waits) */
  if (r.code != 0 || !strstr(r.out, b1) || !strstr(r.out, b2) || strstr(r.out, row_a1))
    pxt_show("list --me", &r), fail();
  const char *hold_cmd[] = {"hold", b1, NULL};
  pxt_pxctl_as(&r, &f->d, PXT_TOK_BOB, hold_cmd);
  if (r.code != 0 || !strstr(r.out, "held by bob")) pxt_show("hold", &r), fail();
  const char *upd[] = {"update", b1, "priority=50", "time_limit=15m", NULL};
  pxt_pxctl_as(&r, &f->d, PXT_TOK_BOB, upd);
  if (r.code != 0 || !strstr(r.out, "priority 50, time limit 15m00s")) pxt_show("update", &r), fail();
  const char *up_bad[] = {"update", b1, "priority=500", NULL};
  pxt_pxctl_as(&r, &f->d, PXT_TOK_BOB, up_bad);
  if (r.code != 1 || !strstr(r.err, "cannot update job") || !strstr(r.err, "priority = 500"))
    pxt_show("update refused", &r), fail();
  const char *status[] = {"status", b2, NULL};
  pxt_pxctl_as(&r, &f->d, PXT_TOK_ALICE, status);
  char after[96];
  snprintf(after, sizeof after, "after      %s:any (PENDING)", a1);
  if (r.code != 0 || !strstr(r.out, "owner      bob") || !strstr(r.out, after))
    pxt_show("status", &r), fail();
  const char *status1[] = {"status", b1, NULL};
  pxt_pxctl_as(&r, &f->d, PXT_TOK_ALICE, status1);
  if (r.code != 0 || !strstr(r.out, "held       by bob") ||
      !strstr(r.out, "queue      priority 50, time limit 15m00s"))
    pxt_show("status held", &r), fail();
  /* acct: START and END; a long reason cut at a word */
  char reason[400];
  snprintf(reason, sizeof reason, "%s", "the quick brown fox jumps over the lazy dog while the"
           " coordinator keeps every word of this reason whole");
  Prunex__V1__CancelJobResponse *cr = NULL;
  assert_int_equal(px_rpc_cancel_job(f->admin, a1, reason, 0, &cr), PX_OK);
  px_rpc_message_free(cr);
  const char *acct[] = {"acct", "--user", "alice", NULL};
  pxt_pxctl_as(&r, &f->d, PXT_TOK_ALICE, acct);
  if (r.code != 0 || !strstr(r.out, "START") || !strstr(r.out, "END") ||
      lines_with(r.out, " UTC") != 2 || !strstr(r.out, "cancelled: the quick brown fox jumps over the lazy dog..."))
    pxt_show("acct", &r), fail();
  stop(f);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_hold_keeps_a_job_pending_while_another_runs),
      cmocka_unit_test(test_update_follows_the_submission_rules),
      cmocka_unit_test(test_after_ok_and_any_order_the_jobs),
      cmocka_unit_test(test_a_dependency_never_met_cancels_the_job),
      cmocka_unit_test(test_holds_and_dependencies_survive_a_restart),
      cmocka_unit_test(test_pxctl_shows_owners_and_queue_controls),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
