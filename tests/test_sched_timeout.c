/* Time limits with the real pxcoordd, pxagent and pxworker: a
 * job with recovery: checkpoints that runs past its time_limit_s is asked to
 * stop at its next iteration, its ranks write their final checkpoint and
 * exit, and it ends TIMEOUT (not SUCCEEDED) with its node free again and its
 * accounting record saying TIMEOUT. */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>

#include <cmocka.h>

#include "agent_harness.h"

#define JS(x) PRUNEX__V1__JOB_STATE__JOB_STATE_##x

static int count_entries(const char *dir) {
  DIR *d = opendir(dir);
  if (!d) return 0;
  int n = 0;
  struct dirent *e;
  while ((e = readdir(d)))
    if (e->d_name[0] != '.') n++;
  closedir(d);
  return n;
}

static void test_job_past_its_time_limit_checkpoints_and_times_out(void **state) {
  (void)state;
  pxt_coordd_t d;
  px_rpc_channel_t *ch;
  char data[400];
  pxt_agent_t a;
  int w = pxt_one_node(&d, &ch, &a, data, sizeof data);
  assert_true(w >= 0);
  pxt_job_t j;
  pxt_job_init(&j, w > 0 ? data : NULL, 1, 1, 100000, 1); /* far more than 4 s of work */
  Prunex__V1__RecoverySpec rec = PRUNEX__V1__RECOVERY_SPEC__INIT;
  rec.checkpoint_every = 1000; /* only the final one lands within the limit */
  rec.keep = 2;
  j.spec.recovery = &rec;
  j.spec.time_limit_s = 4;
  char job[64];
  if (pxt_job_submit(ch, &j, job, sizeof job) != PX_OK) fail_msg("submit: %s", px_last_error());
  int s = pxt_wait_job(ch, job, 0, 120000);
  Prunex__V1__Job *jb = NULL;
  assert_int_equal(px_rpc_get_job(ch, job, 0, &jb), PX_OK);
  printf("job %s: %s: %s (iteration %d)\n", job, px_rpc_job_state_name(s), jb->reason,
         jb->iteration);
  if (s != JS(TIMEOUT)) {
    pxt_dump_file(a.log);
    pxt_coordd_dump_log(&d);
    fail_msg("expected TIMEOUT");
  }
  assert_non_null(strstr(jb->reason, "TIMEOUT: stopped at iteration"));
  assert_true(jb->iteration < 100000 - 1);
  /* the stop wrote the final checkpoint */
  char ck[600];
  snprintf(ck, sizeof ck, "%s/jobs/%s/checkpoints", a.work, job);
  if (count_entries(ck) < 1) fail_msg("no checkpoint in %s", ck);
  px_rpc_message_free(jb);
  /* the node is free again, and the record says TIMEOUT */
  Prunex__V1__GetAccountingRequest req = PRUNEX__V1__GET_ACCOUNTING_REQUEST__INIT;
  req.state = JS(TIMEOUT);
  Prunex__V1__GetAccountingResponse *r = NULL;
  assert_int_equal(px_rpc_get_accounting(ch, &req, 0, &r), PX_OK);
  assert_int_equal(r->n_records, 1);
  assert_string_equal(r->records[0]->job_id, job);
  assert_true(r->records[0]->node_seconds >= 3.5);
  px_rpc_message_free(r);
  assert_true(pxt_wait_node_named(ch, "node0", PRUNEX__V1__NODE_STATE__NODE_STATE_READY, 10000));
  int status = pxt_agent_stop(&a, SIGTERM, 20000);
  if (!pxt_exited_ok(status)) pxt_dump_file(a.log);
  assert_true(pxt_exited_ok(status));
  px_rpc_channel_destroy(ch);
  assert_int_equal(pxt_coordd_teardown(&d), 0);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_job_past_its_time_limit_checkpoints_and_times_out),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
