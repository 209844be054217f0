/* Job notifications with the real pxcoordd and a local HTTP
 * receiver in the test (a thread answering POSTs on loopback): the spec's
 * notify.url gets the job's JSON on the states asked for, once each; a
 * receiver that fails is retried with backoff; a receiver that hangs does
 * not hold the coordinator (calls are answered meanwhile); the
 * coordinator-wide notify_url gets every job's end; bad notify settings are
 * refused naming the field. The receivers are on loopback: the coordinator
 * is told to allow 127.0.0.1 (notify_allow; test_sched_notify_policy.c has
 * what it refuses without). */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>

#include <cmocka.h>

#include "notify_harness.h"

#define JS(x) PRUNEX__V1__JOB_STATE__JOB_STATE_##x
static void cancel(px_rpc_channel_t *ch, const char *job) {
  Prunex__V1__CancelJobResponse *r = NULL;
  assert_int_equal(px_rpc_cancel_job(ch, job, "test", 0, &r), PX_OK);
  px_rpc_message_free(r);
}

static void test_spec_notify_posts_each_state_once_and_retries(void **state) {
  (void)state;
  receiver_t r;
  receiver_start(&r, 1, 0); /* the first POST fails: retried after 1 s */
  pxt_coordd_t d;
  assert_int_equal(coordd_with_config(&d, "notify_allow = 127.0.0.1\n", NULL), 0);
  px_rpc_channel_t *ch = NULL;
  assert_int_equal(px_rpc_channel_create(d.target, &ch), PX_OK);
  char url[128], job[64], node[64];
  snprintf(url, sizeof url, "http://127.0.0.1:%d/hooks/prunex", r.port);
  assert_int_equal(submit_notified(ch, url, "scheduled, cancelled", job, sizeof job), PX_OK);
  assert_int_equal(pxt_register(ch, "n1", 1, 0, node, sizeof node), PX_OK);
  assert_int_equal(pxt_job_state(ch, job), JS(SCHEDULED));
  assert_true(wait_posts(&r, 2, 10000)); /* a 500, then the retry */
  pxt_sleep_ms(300);
  assert_int_equal(receiver_count(&r), 2);
  cancel(ch, job);
  assert_true(wait_posts(&r, 3, 10000));
  pxt_sleep_ms(1500); /* nothing more: PENDING was not asked, each state once */
  assert_int_equal(receiver_count(&r), 3);
  assert_string_equal(r.path[0], "/hooks/prunex");
  assert_string_equal(r.body[0], r.body[1]); /* the retry sends the same summary */
  char want[96];
  snprintf(want, sizeof want, "{\"job_id\":\"%s\"", job);
  assert_true(!strncmp(r.body[1], want, strlen(want)));
  assert_non_null(strstr(r.body[1], "\"state\":\"SCHEDULED\""));
  assert_non_null(strstr(r.body[2], "\"state\":\"CANCELLED\""));
  assert_true(pxt_file_contains(d.log, "failed (the receiver answered HTTP 500); retrying"));
  px_rpc_channel_destroy(ch);
  assert_int_equal(pxt_coordd_teardown(&d), 0);
  receiver_stop(&r);
}

static void test_a_hanging_receiver_does_not_hold_the_coordinator(void **state) {
  (void)state;
  receiver_t r;
  receiver_start(&r, 0, 3000); /* answers after 3 s */
  pxt_coordd_t d;
  assert_int_equal(coordd_with_config(&d, "notify_allow = 127.0.0.1\n", NULL), 0);
  px_rpc_channel_t *ch = NULL;
  assert_int_equal(px_rpc_channel_create(d.target, &ch), PX_OK);
  char url[128], job[64];
  snprintf(url, sizeof url, "http://127.0.0.1:%d/", r.port);
  assert_int_equal(submit_notified(ch, url, "pending,cancelled", job, sizeof job), PX_OK);
  assert_true(wait_posts(&r, 1, 10000)); /* the receiver now holds the POST */
  int64_t t0 = pxt_now_ms();
  for (int i = 0; i < 5; i++) assert_int_equal(pxt_job_state(ch, job), JS(PENDING));
  cancel(ch, job);
  int64_t took = pxt_now_ms() - t0;
  printf("6 calls during a hanging POST: %lld ms\n", (long long)took);
  assert_true(took < 2000); /* not behind the 3 s answer */
  assert_true(wait_posts(&r, 2, 15000)); /* the CANCELLED one once the first is answered */
  px_rpc_channel_destroy(ch);
  assert_int_equal(pxt_coordd_teardown(&d), 0);
  receiver_stop(&r);
}

static void test_coordinator_notify_url_and_bad_settings(void **state) {
  (void)state;
  receiver_t r;
  receiver_start(&r, 0, 0);
  pxt_coordd_t d;
  memset(&d, 0, sizeof d);
  assert_int_equal(pxt_mkdtemp(d.dir, sizeof d.dir), 0);
  snprintf(d.db, sizeof d.db, "%s/coord.db", d.dir);
  char conf[400], text[256];
  snprintf(conf, sizeof conf, "%s/coord.conf", d.dir);
  /* a bad setting stops the daemon at start, naming the file and key */
  FILE *f = fopen(conf, "w");
  assert_non_null(f);
  fputs("notify_url = ftp://example.org/x\n", f);
  fclose(f);
  char out[512], err[2048];
  const char *bad[] = {PXT_COORDD, "--db", d.db, "--config", conf, NULL};
  assert_int_equal(pxt_coordd_run(d.dir, bad, out, sizeof out, err, sizeof err, 10000), 2);
  assert_non_null(strstr(err, "notify_url = 'ftp://example.org/x'"));
  snprintf(text, sizeof text, "notify_url = http://127.0.0.1:%d/all\nnotify_states = end\n",
           r.port);
  f = fopen(conf, "w");
  assert_non_null(f);
  fputs(text, f);
  fclose(f);
  const char *extra[] = {"--config", conf, NULL};
  assert_int_equal(pxt_coordd_start(&d, extra), 0);
  px_rpc_channel_t *ch = NULL;
  assert_int_equal(px_rpc_channel_create(d.target, &ch), PX_OK);
  char job[64];
  assert_int_equal(pxt_submit_mp(ch, 1, 1, job, sizeof job), PX_OK); /* no notify in the spec */
  pxt_sleep_ms(300);
  assert_int_equal(receiver_count(&r), 0); /* PENDING is not an end */
  cancel(ch, job);
  assert_true(wait_posts(&r, 1, 10000));
  assert_string_equal(r.path[0], "/all");
  assert_non_null(strstr(r.body[0], "\"state\":\"CANCELLED\""));
  /* a bad spec notify is refused naming the field */
  assert_int_not_equal(submit_notified(ch, "mailto:me@example.org", "end", job, sizeof job),
                       PX_OK);
  assert_non_null(strstr(px_last_error(), "notify.url"));
  assert_int_not_equal(submit_notified(ch, "http://127.0.0.1:1/", "ended", job, sizeof job),
                       PX_OK);
  assert_non_null(strstr(px_last_error(), "notify.states"));
  px_rpc_channel_destroy(ch);
  assert_int_equal(pxt_coordd_teardown(&d), 0);
  receiver_stop(&r);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_spec_notify_posts_each_state_once_and_retries),
      cmocka_unit_test(test_a_hanging_receiver_does_not_hold_the_coordinator),
      cmocka_unit_test(test_coordinator_notify_url_and_bad_settings),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
