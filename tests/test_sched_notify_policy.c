/* Where a spec's notify.url may send (docs/security.md
 * "Notifications"), with the real pxcoordd: by default only to public
 * addresses, so loopback (in any spelling: 2130706433, 0x7f.1,
 * 017700000001, localhost, [::1]), private, link-local, CGNAT, unspecified
 * and IPv4-mapped addresses are refused at SubmitJob naming the address and
 * why; notify_allow lets named addresses, hosts and URL prefixes in, never
 * the coordinator's own listeners; notify_public = off sends only where
 * notify_allow says; a bad setting stops the daemon; and the policy is
 * checked again when the notification is sent. */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>

#include <cmocka.h>

#include "notify_harness.h"

/* Submits a job notifying url (states "pending"): expects it refused with a
 * message holding want (and naming notify_allow). */
static void refused(px_rpc_channel_t *ch, const char *url, const char *want) {
  char job[64];
  px_status_t st = submit_notified(ch, url, "pending", job, sizeof job);
  if (st == PX_OK || !strstr(px_last_error(), want) || !strstr(px_last_error(), "notify_allow"))
    fail_msg("%s: %s (wanted '%s')", url, st == PX_OK ? "accepted" : px_last_error(), want);
  assert_non_null(strstr(px_last_error(), "notify.url"));
}

static void test_loopback_private_and_link_local_are_refused_at_submit(void **state) {
  (void)state;
  receiver_t r;
  receiver_start(&r, 0, 0);
  pxt_coordd_t d;
  assert_int_equal(pxt_coordd_setup(&d, NULL), 0); /* no notify_allow: public addresses only */
  px_rpc_channel_t *ch = NULL;
  assert_int_equal(px_rpc_channel_create(d.target, &ch), PX_OK);
  char url[160];
  snprintf(url, sizeof url, "http://127.0.0.1:%d/hook", r.port);
  refused(ch, url, "127.0.0.1 is a loopback address");
  refused(ch, "http://2130706433/", "127.0.0.1 is a loopback address");
  refused(ch, "http://0x7f.1/", "127.0.0.1 is a loopback address");
  refused(ch, "http://017700000001/", "127.0.0.1 is a loopback address");
  snprintf(url, sizeof url, "http://localhost:%d/", r.port);
  refused(ch, url, "is a loopback address");
  snprintf(url, sizeof url, "http://[::1]:%d/", r.port);
  refused(ch, url, "::1 is a loopback address");
  refused(ch, "http://[::ffff:127.0.0.1]/", "is an IPv4-mapped address");
  refused(ch, "http://10.1.2.3/", "10.1.2.3 is a private address");
  refused(ch, "https://192.168.0.1/", "192.168.0.1 is a private address");
  refused(ch, "http://169.254.169.254/latest/meta-data/", "169.254.169.254 is a link-local");
  refused(ch, "http://100.64.0.1/", "100.64.0.1 is a shared (CGNAT");
  refused(ch, "http://0.0.0.0/", "0.0.0.0 is an unspecified");
  snprintf(url, sizeof url, "http://127.0.0.1:%d/", d.port); /* pxcoordd's own gRPC port */
  refused(ch, url, "127.0.0.1 port");
  assert_non_null(strstr(px_last_error(), "is the coordinator's own listener"));
  /* the message hides the URL's credentials */
  refused(ch, "http://alice:s3cr3t@127.0.0.1/?key=k3y", "http://***@127.0.0.1/?***");
  assert_null(strstr(px_last_error(), "s3cr3t"));
  assert_null(strstr(px_last_error(), "k3y"));
  /* a public address is accepted (only its end would be sent) */
  char job[64];
  assert_int_equal(submit_notified(ch, "http://93.184.216.34/hook", "succeeded", job, sizeof job),
                   PX_OK);
  pxt_sleep_ms(300);
  assert_int_equal(receiver_count(&r), 0);
  assert_false(pxt_file_contains(d.log, "s3cr3t"));
  px_rpc_channel_destroy(ch);
  assert_int_equal(pxt_coordd_teardown(&d), 0);
  receiver_stop(&r);
}

static void test_allowed_loopback_never_reaches_the_coordinators_own_ports(void **state) {
  (void)state;
  receiver_t r;
  receiver_start(&r, 0, 0);
  pxt_coordd_t d;
  const char *http[] = {"--http", "127.0.0.1:0", NULL};
  assert_int_equal(coordd_with_config(&d, "notify_allow = 127.0.0.1, ::1\n", http), 0);
  px_rpc_channel_t *ch = NULL;
  assert_int_equal(px_rpc_channel_create(d.target, &ch), PX_OK);
  char url[160], job[64];
  snprintf(url, sizeof url, "http://127.0.0.1:%d/", d.port);
  refused(ch, url, "is the coordinator's own listener");
  snprintf(url, sizeof url, "http://2130706433:%d/api/v1/jobs", d.http_port);
  refused(ch, url, "is the coordinator's own listener");
  snprintf(url, sizeof url, "http://localhost:%d/", d.http_port);
  refused(ch, url, "is the coordinator's own listener");
  refused(ch, "http://10.1.2.3/", "10.1.2.3 is a private address"); /* not allowed */
  snprintf(url, sizeof url, "http://2130706433:%d/in", r.port); /* allowed: 127.0.0.1 */
  assert_int_equal(submit_notified(ch, url, "pending", job, sizeof job), PX_OK);
  assert_true(wait_posts(&r, 1, 10000));
  assert_string_equal(r.path[0], "/in");
  px_rpc_channel_destroy(ch);
  assert_int_equal(pxt_coordd_teardown(&d), 0);
  receiver_stop(&r);
}

static void test_notify_public_off_sends_only_where_notify_allow_names(void **state) {
  (void)state;
  receiver_t r;
  receiver_start(&r, 0, 0);
  pxt_coordd_t d;
  char conf[256], url[160], job[64];
  snprintf(conf, sizeof conf,
           "notify_public = off\nnotify_allow = http://127.0.0.1:%d/hooks/\n"
           "notify_allow = localhost\n", r.port);
  assert_int_equal(coordd_with_config(&d, conf, NULL), 0);
  px_rpc_channel_t *ch = NULL;
  assert_int_equal(px_rpc_channel_create(d.target, &ch), PX_OK);
  refused(ch, "http://93.184.216.34/", "93.184.216.34 is not named by");
  snprintf(url, sizeof url, "http://127.0.0.1:%d/hooksx", r.port); /* not under the prefix */
  refused(ch, url, "127.0.0.1 is a loopback address");
  snprintf(url, sizeof url, "http://127.0.0.1:%d/hooks/a", r.port);
  assert_int_equal(submit_notified(ch, url, "pending", job, sizeof job), PX_OK);
  assert_true(wait_posts(&r, 1, 10000));
  snprintf(url, sizeof url, "http://localhost:%d/by-name", r.port); /* the host entry */
  assert_int_equal(submit_notified(ch, url, "pending", job, sizeof job), PX_OK);
  assert_true(wait_posts(&r, 2, 10000));
  assert_string_equal(r.path[0], "/hooks/a");
  assert_string_equal(r.path[1], "/by-name");
  px_rpc_channel_destroy(ch);
  assert_int_equal(pxt_coordd_teardown(&d), 0);
  receiver_stop(&r);
}

static void test_a_bad_notify_allow_stops_the_coordinator(void **state) {
  (void)state;
  const char *bad[][2] = {{"notify_allow = 10.0.0.0/40\n", "'10.0.0.0/40'"},
                          {"notify_allow = https://u:p@hooks.example.org/\n", "userinfo"},
                          {"notify_public = maybe\n", "notify_public = 'maybe'"}};
  for (int i = 0; i < 3; i++) {
    char dir[256], conf[320], db[320], out[512], err[2048];
    assert_int_equal(pxt_mkdtemp(dir, sizeof dir), 0);
    snprintf(conf, sizeof conf, "%s/coord.conf", dir);
    snprintf(db, sizeof db, "%s/coord.db", dir);
    FILE *f = fopen(conf, "w");
    assert_non_null(f);
    fputs(bad[i][0], f);
    fclose(f);
    const char *args[] = {PXT_COORDD, "--db", db, "--config", conf, NULL};
    assert_int_equal(pxt_coordd_run(dir, args, out, sizeof out, err, sizeof err, 10000), 2);
    if (!strstr(err, bad[i][1])) fail_msg("%s: %s", bad[i][0], err);
    pxt_rmtree(dir);
  }
}

static void test_the_policy_is_checked_again_when_sending(void **state) {
  (void)state;
  receiver_t r;
  receiver_start(&r, 0, 0);
  pxt_coordd_t d;
  assert_int_equal(coordd_with_config(&d, "notify_allow = 127.0.0.1\n", NULL), 0);
  px_rpc_channel_t *ch = NULL;
  assert_int_equal(px_rpc_channel_create(d.target, &ch), PX_OK);
  char url[160], job[64], conf[400];
  snprintf(url, sizeof url, "http://127.0.0.1:%d/late", r.port);
  assert_int_equal(submit_notified(ch, url, "cancelled", job, sizeof job), PX_OK);
  /* the operator withdraws the entry: the notification is refused when due */
  snprintf(conf, sizeof conf, "%s/coord.conf", d.dir);
  FILE *f = fopen(conf, "w");
  assert_non_null(f);
  fputs("notify_states = end\n", f);
  fclose(f);
  kill(d.pid, SIGHUP);
  int64_t end = pxt_now_ms() + 10000;
  while (!pxt_file_contains(d.log, "SIGHUP: scheduling policy re-read") && pxt_now_ms() < end)
    pxt_sleep_ms(20);
  Prunex__V1__CancelJobResponse *cr = NULL;
  assert_int_equal(px_rpc_cancel_job(ch, job, "test", 0, &cr), PX_OK);
  px_rpc_message_free(cr);
  end = pxt_now_ms() + 10000;
  while (!pxt_file_contains(d.log, "not sent: notify.url") && pxt_now_ms() < end)
    pxt_sleep_ms(20);
  assert_true(pxt_file_contains(d.log, "not sent: notify.url"));
  assert_true(pxt_file_contains(d.log, "127.0.0.1 is a loopback address"));
  pxt_sleep_ms(300);
  assert_int_equal(receiver_count(&r), 0);
  px_rpc_channel_destroy(ch);
  assert_int_equal(pxt_coordd_teardown(&d), 0);
  receiver_stop(&r);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_loopback_private_and_link_local_are_refused_at_submit),
      cmocka_unit_test(test_allowed_loopback_never_reaches_the_coordinators_own_ports),
      cmocka_unit_test(test_notify_public_off_sends_only_where_notify_allow_names),
      cmocka_unit_test(test_a_bad_notify_allow_stops_the_coordinator),
      cmocka_unit_test(test_the_policy_is_checked_again_when_sending),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
