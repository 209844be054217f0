/* Notifications are sent by a pool: a receiver that accepts
 * connections and never answers holds at most its own notifications, each
 * for the POST's timeout, and never another destination's; and a
 * coordinator stopping with such POSTs in flight stops at once. With one
 * sender thread the unrelated notification below waited behind five
 * 10-second timeouts (49.8 s measured). */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>

#include <cmocka.h>

#include "notify_harness.h"

static void test_a_silent_receiver_does_not_delay_other_destinations(void **state) {
  (void)state;
  int silent_port = 0;
  int silent = silent_listener(&silent_port);
  receiver_t r;
  receiver_start(&r, 0, 0);
  pxt_coordd_t d;
  assert_int_equal(coordd_with_config(&d, "notify_allow = 127.0.0.1\n", NULL), 0);
  px_rpc_channel_t *ch = NULL;
  assert_int_equal(px_rpc_channel_create(d.target, &ch), PX_OK);
  char url[160], job[64];
  snprintf(url, sizeof url, "http://127.0.0.1:%d/never", silent_port);
  for (int i = 0; i < 5; i++)
    assert_int_equal(submit_notified(ch, url, "pending", job, sizeof job), PX_OK);
  pxt_sleep_ms(300); /* the silent receiver's POSTs are in flight */
  snprintf(url, sizeof url, "http://127.0.0.1:%d/other", r.port);
  int64_t t0 = pxt_now_ms();
  assert_int_equal(submit_notified(ch, url, "pending", job, sizeof job), PX_OK);
  int got = wait_posts(&r, 1, 8000);
  int64_t took = pxt_now_ms() - t0;
  printf("the other destination's notification arrived after %lld ms\n", (long long)took);
  assert_true(got);
  assert_true(took < 5000);
  assert_string_equal(r.path[0], "/other");
  px_rpc_channel_destroy(ch);
  int64_t t1 = pxt_now_ms();
  assert_int_equal(pxt_coordd_teardown(&d), 0); /* POSTs to the silent one still in flight */
  int64_t stop = pxt_now_ms() - t1;
  printf("pxcoordd stopped in %lld ms\n", (long long)stop);
  assert_true(stop < 5000);
  close(silent);
  receiver_stop(&r);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_a_silent_receiver_does_not_delay_other_destinations),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
