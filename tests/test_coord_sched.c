/* pxcoordd's scheduling policy with the real daemon, several
 * users by token and nodes played through the RPC API (as test_coord_jobs
 * does): the queue's order by priority, an admin-only raise, fair share
 * after one user's use, quotas (queued refusals with RESOURCE_EXHAUSTED,
 * running nodes) re-read on SIGHUP, backfill that does not delay the top
 * job, and accounting records that outlive the job with totals equal to the
 * sum of the records' node-seconds. */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>

#include <cmocka.h>

#include "agent_harness.h"
#include "pxctl_harness.h"

#define JS(x) PRUNEX__V1__JOB_STATE__JOB_STATE_##x

#define TOK_N3 "tok-node-n3-0123456789abcd"

typedef struct {
  pxt_coordd_t d;
  char tokens[320];
  char config[320];
  px_rpc_channel_t *admin, *alice, *bob, *n[3];
  char node_id[3][64];
} fixture_t;

static int write_file(const char *path, const char *text) {
  FILE *f = fopen(path, "w");
  if (!f) return -1;
  int ok = fputs(text, f) >= 0;
  return fclose(f) == 0 && ok ? 0 : -1;
}

/* A daemon with tokens for root (admin), alice, bob and nodes n1..n3, the
 * policy in config_text, and nnodes nodes of one device registered. */
static fixture_t *start(const char *config_text, int nnodes) {
  fixture_t *f = calloc(1, sizeof *f);
  assert_non_null(f);
  const char *toks = PXT_TOK_ADMIN " root admin\n" PXT_TOK_ALICE " alice user\n" PXT_TOK_BOB
                     " bob user\n" PXT_TOK_N1 " n1 node\n" PXT_TOK_N2 " n2 node\n" TOK_N3
                     " n3 node\n";
  assert_int_equal(pxt_coordd_prepare_tokens(&f->d, f->tokens, sizeof f->tokens, toks), 0);
  snprintf(f->config, sizeof f->config, "%s/coord.conf", f->d.dir);
  assert_int_equal(write_file(f->config, config_text), 0);
  const char *extra[] = {"--tokens", f->tokens, "--config", f->config, NULL};
  assert_int_equal(pxt_coordd_start(&f->d, extra), 0);
  f->admin = pxt_channel(f->d.target, NULL, PXT_TOK_ADMIN);
  f->alice = pxt_channel(f->d.target, NULL, PXT_TOK_ALICE);
  f->bob = pxt_channel(f->d.target, NULL, PXT_TOK_BOB);
  const char *ntok[3] = {PXT_TOK_N1, PXT_TOK_N2, TOK_N3};
  for (int i = 0; i < 3; i++) f->n[i] = pxt_channel(f->d.target, NULL, ntok[i]);
  assert_true(f->admin && f->alice && f->bob && f->n[0] && f->n[1] && f->n[2]);
  for (int i = 0; i < nnodes; i++) {
    char name[8];
    snprintf(name, sizeof name, "n%d", i + 1);
    assert_int_equal(pxt_register(f->n[i], name, 1, 0, f->node_id[i], sizeof f->node_id[i]),
                     PX_OK);
  }
  return f;
}

static void stop(fixture_t *f) {
  px_rpc_channel_destroy(f->admin);
  px_rpc_channel_destroy(f->alice);
  px_rpc_channel_destroy(f->bob);
  for (int i = 0; i < 3; i++) px_rpc_channel_destroy(f->n[i]);
  assert_int_equal(pxt_coordd_teardown(&f->d), 0);
  free(f);
}

/* Submits as ch a job of `nodes` nodes x 1 worker with the given priority
 * (0: default) and time limit (s, 0: none); the px status. */
static px_status_t submit(px_rpc_channel_t *ch, int nodes, int priority, int limit_s, char *job,
                          size_t cap) {
  pxt_spec_t s;
  pxt_spec_init(&s, nodes, 1);
  s.spec.priority = priority;
  s.spec.time_limit_s = limit_s;
  return pxt_submit(ch, &s, job, cap);
}

static void must_submit(px_rpc_channel_t *ch, int nodes, int priority, int limit_s, char *job,
                        size_t cap) {
  if (submit(ch, nodes, priority, limit_s, job, cap) != PX_OK)
    fail_msg("submit: %s", px_last_error());
}

static void cancel(fixture_t *f, const char *job) {
  Prunex__V1__CancelJobResponse *r = NULL;
  assert_int_equal(px_rpc_cancel_job(f->admin, job, "test", 0, &r), PX_OK);
  px_rpc_message_free(r);
}

static void reason_has(px_rpc_channel_t *ch, const char *job, const char *needle) {
  Prunex__V1__Job *j = NULL;
  assert_int_equal(px_rpc_get_job(ch, job, 0, &j), PX_OK);
  if (!strstr(j->reason, needle)) fail_msg("job %s: expected '%s' in its reason '%s'", job, needle, j->reason);
  px_rpc_message_free(j);
}

/* The pending job's JobPriority from ListJobs (copied), 0 if not listed. */
static int priority_of(px_rpc_channel_t *ch, const char *job, Prunex__V1__JobPriority *out) {
  Prunex__V1__ListJobsRequest req = PRUNEX__V1__LIST_JOBS_REQUEST__INIT;
  req.state = JS(PENDING);
  Prunex__V1__ListJobsResponse *l = NULL;
  assert_int_equal(px_rpc_list_jobs(ch, &req, 0, &l), PX_OK);
  int found = 0;
  for (size_t i = 0; i < l->n_jobs; i++)
    if (!strcmp(l->jobs[i]->job_id, job) && l->jobs[i]->sched) {
      *out = *l->jobs[i]->sched;
      found = 1;
    }
  px_rpc_message_free(l);
  return found;
}

/* ---- priority ------------------------------------------------------------- */

static void test_queue_follows_priority_and_only_admins_raise_it(void **state) {
  (void)state;
  fixture_t *f = start("log_level = info\n", 1);
  char a1[64], a2[64], b1[64], r1[64], x[64];
  must_submit(f->alice, 1, 0, 0, a1, sizeof a1);
  assert_int_equal(pxt_job_state(f->admin, a1), JS(SCHEDULED));
  must_submit(f->alice, 1, 50, 0, a2, sizeof a2);   /* alice lowers hers */
  must_submit(f->bob, 1, 0, 0, b1, sizeof b1);
  must_submit(f->admin, 1, 500, 0, r1, sizeof r1);  /* an admin raises one */
  /* a user may not raise a job's priority */
  assert_int_not_equal(submit(f->alice, 1, 200, 0, x, sizeof x), PX_OK);
  assert_int_equal(px_rpc_last_code(), PX_RPC_PERMISSION_DENIED);
  assert_non_null(strstr(px_last_error(), "only an admin may raise"));
  /* nor past the range */
  assert_int_equal(submit(f->admin, 1, 1001, 0, x, sizeof x), PX_ERR_INVALID);
  assert_non_null(strstr(px_last_error(), "priority"));

  Prunex__V1__JobPriority p;
  assert_true(priority_of(f->bob, a2, &p));
  assert_int_equal(p.job_priority, 50);
  assert_float_equal(p.job_factor, 0.05, 1e-9);
  assert_int_equal(p.ahead, 2);
  assert_true(p.fairshare_factor > 0 && p.fairshare_factor < 1); /* alice is running a job */
  assert_true(p.priority > 0 && p.priority < 1);
  assert_true(priority_of(f->bob, r1, &p));
  assert_int_equal(p.ahead, 0);
  assert_float_equal(p.fairshare_factor, 1.0, 1e-9); /* root has used nothing */
  reason_has(f->alice, a2, "2 jobs ahead");
  reason_has(f->alice, r1, "first in line; waiting for nodes: needs 1 node x 1 device; 0 of 1 free");

  cancel(f, a1);
  assert_int_equal(pxt_job_state(f->admin, r1), JS(SCHEDULED));
  assert_int_equal(pxt_job_state(f->admin, b1), JS(PENDING));
  cancel(f, r1);
  assert_int_equal(pxt_job_state(f->admin, b1), JS(SCHEDULED));
  assert_int_equal(pxt_job_state(f->admin, a2), JS(PENDING));
  cancel(f, b1);
  assert_int_equal(pxt_job_state(f->admin, a2), JS(SCHEDULED));
  stop(f);
}

/* ---- fair share and accounting ------------------------------------------------- */

static void test_fair_share_puts_the_heavy_user_behind(void **state) {
  (void)state;
  fixture_t *f = start("fairshare_half_life_s = 604800\n", 1);
  char a1[64], a2[64], b1[64];
  must_submit(f->alice, 1, 0, 0, a1, sizeof a1);
  assert_int_equal(pxt_job_state(f->admin, a1), JS(SCHEDULED));
  pxt_sleep_ms(300); /* alice uses the node */
  must_submit(f->alice, 1, 0, 0, a2, sizeof a2); /* submitted first, same priority */
  must_submit(f->bob, 1, 0, 0, b1, sizeof b1);
  Prunex__V1__JobPriority pa, pb;
  assert_true(priority_of(f->admin, a2, &pa));
  assert_true(priority_of(f->admin, b1, &pb));
  /* two users, equal shares, all usage alice's: 2^(-1 / 0.5) */
  assert_float_equal(pa.fairshare_factor, 0.25, 1e-9);
  assert_float_equal(pb.fairshare_factor, 1.0, 1e-9);
  assert_true(pb.priority > pa.priority);
  assert_int_equal(pb.ahead, 0);
  cancel(f, a1);
  assert_int_equal(pxt_job_state(f->admin, b1), JS(SCHEDULED)); /* bob first */
  assert_int_equal(pxt_job_state(f->admin, a2), JS(PENDING));
  stop(f);
}

static void test_accounting_outlives_the_job_and_totals_add_up(void **state) {
  (void)state;
  fixture_t *f = start("log_level = info\n", 2);
  char j[4][64];
  must_submit(f->alice, 1, 0, 0, j[0], sizeof j[0]);
  must_submit(f->bob, 1, 0, 0, j[1], sizeof j[1]);
  pxt_sleep_ms(250);
  cancel(f, j[0]); /* alice's second job takes the node */
  must_submit(f->alice, 1, 0, 0, j[2], sizeof j[2]);
  pxt_sleep_ms(150);
  cancel(f, j[1]);
  cancel(f, j[2]);
  must_submit(f->alice, 3, 0, 0, j[3], sizeof j[3]); /* never fits: never started */
  cancel(f, j[3]);
  assert_int_equal(px_rpc_delete_job(f->alice, j[0], 0), PX_OK); /* its rows are gone */

  Prunex__V1__GetAccountingRequest req = PRUNEX__V1__GET_ACCOUNTING_REQUEST__INIT;
  Prunex__V1__GetAccountingResponse *r = NULL;
  assert_int_equal(px_rpc_get_accounting(f->bob, &req, 0, &r), PX_OK);
  assert_int_equal(r->n_records, 4);
  double sum[2] = {0, 0};
  int64_t jobs[2] = {0, 0};
  int seen_deleted = 0;
  for (size_t i = 0; i < r->n_records; i++) {
    const Prunex__V1__AcctRecord *a = r->records[i];
    int u = !strcmp(a->owner, "bob");
    sum[u] += a->node_seconds;
    jobs[u]++;
    assert_int_equal(a->state, JS(CANCELLED));
    assert_non_null(strstr(a->reason, "cancelled"));
    if (!strcmp(a->job_id, j[0])) {
      seen_deleted = 1;
      assert_true(a->node_seconds >= 0.2 && a->node_seconds < 10);
      assert_int_equal(a->attempts, 1);
      assert_true(a->start_unix_ms >= a->submit_unix_ms && a->end_unix_ms > a->start_unix_ms);
    }
    if (!strcmp(a->job_id, j[3])) {
      assert_int_equal(a->attempts, 0);
      assert_int_equal(a->start_unix_ms, 0);
      assert_float_equal(a->node_seconds, 0, 0);
      assert_int_equal(a->num_nodes, 3);
      assert_int_equal(a->devices, 3);
    }
  }
  assert_true(seen_deleted);
  assert_int_equal(r->n_totals, 2);
  assert_string_equal(r->totals[0]->user, "alice");
  assert_string_equal(r->totals[1]->user, "bob");
  for (int u = 0; u < 2; u++) {
    assert_int_equal(r->totals[u]->jobs, jobs[u]);
    assert_float_equal(r->totals[u]->node_seconds, sum[u], 1e-6);
  }
  assert_true(sum[1] >= 0.35); /* bob's ran through both of alice's */
  px_rpc_message_free(r);
  /* filters */
  req.user = "bob";
  assert_int_equal(px_rpc_get_accounting(f->bob, &req, 0, &r), PX_OK);
  assert_int_equal(r->n_records, 1);
  assert_string_equal(r->records[0]->job_id, j[1]);
  px_rpc_message_free(r);
  req.user = "";
  req.state = JS(SUCCEEDED);
  assert_int_equal(px_rpc_get_accounting(f->bob, &req, 0, &r), PX_OK);
  assert_int_equal(r->n_records, 0);
  px_rpc_message_free(r);
  req.state = 0;
  req.limit = 2;
  assert_int_equal(px_rpc_get_accounting(f->bob, &req, 0, &r), PX_OK);
  assert_int_equal(r->n_records, 2);
  assert_true(r->truncated);
  assert_int_equal(r->totals[0]->jobs + r->totals[1]->jobs, 4); /* totals: every match */
  px_rpc_message_free(r);
  req.limit = 0;
  req.user = "bad user!";
  assert_int_not_equal(px_rpc_get_accounting(f->bob, &req, 0, &r), PX_OK);
  assert_int_equal(px_rpc_last_code(), PX_RPC_INVALID_ARGUMENT);
  stop(f);
}

/* ---- quotas --------------------------------------------------------------------- */

static void test_quotas_refuse_and_hold_and_sighup_rereads_them(void **state) {
  (void)state;
  fixture_t *f = start("max_queued_jobs = 2\nmax_running_nodes.alice = 1\n", 2);
  char a1[64], a2[64], a3[64], b1[64];
  must_submit(f->alice, 1, 0, 0, a1, sizeof a1);
  must_submit(f->alice, 1, 0, 0, a2, sizeof a2);
  assert_int_equal(pxt_job_state(f->admin, a1), JS(SCHEDULED));
  assert_int_equal(pxt_job_state(f->admin, a2), JS(PENDING)); /* a node is free, alice is at 1 */
  reason_has(f->alice, a2, "user quota: 1 of 1 nodes in use");
  assert_int_not_equal(submit(f->alice, 1, 0, 0, a3, sizeof a3), PX_OK);
  assert_int_equal(px_rpc_last_code(), PX_RPC_RESOURCE_EXHAUSTED);
  assert_non_null(strstr(px_last_error(), "alice has 2 unfinished jobs"));
  assert_non_null(strstr(px_last_error(), "max_queued_jobs"));
  /* a job held by its user's quota does not hold others back */
  must_submit(f->bob, 1, 0, 0, b1, sizeof b1);
  assert_int_equal(pxt_job_state(f->admin, b1), JS(SCHEDULED));

  /* a bad file on SIGHUP keeps the policy in force */
  assert_int_equal(write_file(f->config, "max_queued_jobs = lots\n"), 0);
  kill(f->d.pid, SIGHUP);
  int64_t end = pxt_now_ms() + 5000;
  while (pxt_now_ms() < end &&
         !pxt_file_contains(f->d.log, "previous scheduling policy stays in force"))
    pxt_sleep_ms(20);
  assert_true(pxt_file_contains(f->d.log, "max_queued_jobs = 'lots'"));
  assert_int_not_equal(submit(f->alice, 1, 0, 0, a3, sizeof a3), PX_OK);
  assert_int_equal(px_rpc_last_code(), PX_RPC_RESOURCE_EXHAUSTED);

  assert_int_equal(write_file(f->config, "max_queued_jobs = 3\nmax_running_nodes.alice = 2\n"),
                   0);
  kill(f->d.pid, SIGHUP);
  end = pxt_now_ms() + 5000;
  while (pxt_now_ms() < end && submit(f->alice, 1, 0, 0, a3, sizeof a3) != PX_OK)
    pxt_sleep_ms(20);
  assert_int_equal(pxt_job_state(f->admin, a3), JS(PENDING));
  reason_has(f->alice, a3, "1 job ahead");
  cancel(f, b1); /* alice may now run two */
  assert_int_equal(pxt_job_state(f->admin, a2), JS(SCHEDULED));
  stop(f);
}

/* ---- backfill ------------------------------------------------------------------- */

static void test_backfill_never_delays_the_top_job(void **state) {
  (void)state;
  fixture_t *f = start("log_level = info\n", 2);
  char a1[64], top[64], lng[64], nolim[64], shrt[64];
  must_submit(f->alice, 1, 0, 60, a1, sizeof a1); /* n1 until at most now + 60 s */
  assert_int_equal(pxt_job_state(f->admin, a1), JS(SCHEDULED));
  must_submit(f->admin, 2, 1000, 0, top, sizeof top); /* needs both: waits for a1 */
  reason_has(f->admin, top, "first in line; waiting for nodes: needs 2 nodes x 1 device; 1 of 2 free");
  /* n2 is free, but these would still hold it when a1's limit ends */
  must_submit(f->bob, 1, 0, 120, lng, sizeof lng);
  must_submit(f->bob, 1, 0, 0, nolim, sizeof nolim);
  assert_int_equal(pxt_job_state(f->admin, lng), JS(PENDING));
  assert_int_equal(pxt_job_state(f->admin, nolim), JS(PENDING));
  reason_has(f->admin, lng, "1 job ahead");
  /* this one ends before: it backfills n2 */
  must_submit(f->bob, 1, 0, 30, shrt, sizeof shrt);
  assert_int_equal(pxt_job_state(f->admin, shrt), JS(SCHEDULED));
  assert_int_equal(pxt_job_state(f->admin, top), JS(PENDING));
  /* both end: the top job starts, not the older ones behind it */
  cancel(f, a1);
  assert_int_equal(pxt_job_state(f->admin, top), JS(PENDING)); /* n2 still busy */
  assert_int_equal(pxt_job_state(f->admin, lng), JS(PENDING)); /* n1 is reserved */
  cancel(f, shrt);
  assert_int_equal(pxt_job_state(f->admin, top), JS(SCHEDULED));
  assert_int_equal(pxt_job_state(f->admin, lng), JS(PENDING));
  stop(f);
}

static void test_time_limit_above_the_maximum_is_refused(void **state) {
  (void)state;
  fixture_t *f = start("time_limit_default_s = 600\ntime_limit_max_s = 3600\n", 0);
  char x[64];
  assert_int_equal(submit(f->alice, 1, 0, 7200, x, sizeof x), PX_ERR_INVALID);
  assert_non_null(strstr(px_last_error(), "spec.time_limit_s = 7200"));
  assert_non_null(strstr(px_last_error(), "time_limit_max_s"));
  must_submit(f->alice, 1, 0, 0, x, sizeof x);
  Prunex__V1__JobPriority p;
  assert_true(priority_of(f->alice, x, &p));
  assert_int_equal(p.time_limit_ms, 600000); /* the cluster's default */
  stop(f);
}

/* ---- pxctl list / status / acct ----------------------------------------------------- */

static void test_pxctl_shows_the_queue_and_the_accounting(void **state) {
  (void)state;
  fixture_t *f = start("log_level = info\n", 1);
  char a1[64], b1[64];
  must_submit(f->alice, 1, 0, 0, a1, sizeof a1);
  must_submit(f->bob, 1, 40, 0, b1, sizeof b1);
  static pxt_result_t r;
  const char *list[] = {"list", NULL};
  pxt_pxctl_as(&r, &f->d, PXT_TOK_BOB, list);
  if (r.code != 0 || !strstr(r.out, "PRIORITY") || !strstr(r.out, "JOB/FAIR/AGE") ||
      !strstr(r.out, "0.04/1.00/"))
    pxt_show("pxctl list", &r), fail();
  const char *status[] = {"status", b1, NULL};
  pxt_pxctl_as(&r, &f->d, PXT_TOK_BOB, status);
  if (r.code != 0 || !strstr(r.out, "first in line; waiting for nodes")) pxt_show("status", &r), fail();
  pxt_sleep_ms(200);
  cancel(f, a1);
  cancel(f, b1);

  const char *csv[] = {"acct", "--csv", NULL};
  pxt_pxctl_as(&r, &f->d, PXT_TOK_ALICE, csv);
  if (r.code != 0 ||
      strncmp(r.out, "job_id,user,name,nodes,devices,submit,start,end,node_seconds,state,"
                     "attempts,reason\n", 82) != 0)
    pxt_show("acct --csv", &r), fail();
  int lines = 0;
  for (const char *p = r.out; *p; p++) lines += *p == '\n';
  assert_int_equal(lines, 3);
  assert_non_null(strstr(r.out, ",\"alice\",\"test-job\",1,1,"));

  const char *json[] = {"acct", "--json", "--since", "1h", NULL};
  pxt_pxctl_as(&r, &f->d, PXT_TOK_ALICE, json);
  pxj_t *v = r.code == 0 ? pxj_parse(r.out) : NULL;
  if (!v) pxt_show("acct --json", &r), fail();
  const pxj_t *recs = pxj_get(v, "records"), *tot = pxj_get(v, "totals");
  assert_true(recs && recs->type == PXJ_ARR && recs->n == 2);
  assert_true(tot && tot->type == PXJ_ARR && tot->n == 2);
  double sum = 0, total = 0;
  for (size_t i = 0; i < recs->n; i++) sum += pxj_num(recs->items[i], "node_seconds");
  for (size_t i = 0; i < tot->n; i++) total += pxj_num(tot->items[i], "node_seconds");
  assert_true(sum > 0.15);
  assert_float_equal(sum, total, 1e-6);
  pxj_free(v);

  const char *human[] = {"acct", "--user", "bob", NULL};
  pxt_pxctl_as(&r, &f->d, PXT_TOK_ALICE, human);
  if (r.code != 0 || !strstr(r.out, "NODE-HOURS") || !strstr(r.out, b1) || strstr(r.out, a1))
    pxt_show("acct --user bob", &r), fail();
  const char *bad[] = {"acct", "--since", "yesterday", NULL};
  pxt_pxctl_as(&r, &f->d, PXT_TOK_ALICE, bad);
  assert_int_equal(r.code, 2);
  assert_non_null(strstr(r.err, "--since 'yesterday'"));
  const char *future[] = {"acct", "--since", "2999-01-01", NULL};
  pxt_pxctl_as(&r, &f->d, PXT_TOK_ALICE, future);
  if (r.code != 0 || !strstr(r.out, "no accounting records")) pxt_show("acct --since", &r), fail();
  stop(f);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_queue_follows_priority_and_only_admins_raise_it),
      cmocka_unit_test(test_fair_share_puts_the_heavy_user_behind),
      cmocka_unit_test(test_accounting_outlives_the_job_and_totals_add_up),
      cmocka_unit_test(test_quotas_refuse_and_hold_and_sighup_rereads_them),
      cmocka_unit_test(test_backfill_never_delays_the_top_job),
      cmocka_unit_test(test_time_limit_above_the_maximum_is_refused),
      cmocka_unit_test(test_pxctl_shows_the_queue_and_the_accounting),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
