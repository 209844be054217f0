/* Job notifications (issue 31) with the real pxcoordd and a local HTTP
 * receiver in the test (a thread answering POSTs on loopback): the spec's
 * notify.url gets the job's JSON on the states asked for, once each; a
 * receiver that fails is retried with backoff; a receiver that hangs does
 * not hold the coordinator (calls are answered meanwhile); the
 * coordinator-wide notify_url gets every job's end; bad notify settings are
 * refused naming the field. */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>

#include <arpa/inet.h>
#include <cmocka.h>
#include <netinet/in.h>
#include <pthread.h>
#include <sys/socket.h>

#include "agent_harness.h"

#define JS(x) PRUNEX__V1__JOB_STATE__JOB_STATE_##x
#define MAX_POSTS 16

typedef struct {
  int fd, port;
  pthread_t thread;
  pthread_mutex_t mu;
  int stop;
  int fail_first;        /* answer 500 to this many requests first */
  int hang_ms;           /* hold each answer this long */
  int n;                 /* requests seen */
  char body[MAX_POSTS][4096];
  char path[MAX_POSTS][128];
} receiver_t;

/* Reads one request (headers, then Content-Length bytes) into r. */
static void *receiver_main(void *arg) {
  receiver_t *r = arg;
  for (;;) {
    int c = accept(r->fd, NULL, NULL);
    if (c < 0) break;
    pthread_mutex_lock(&r->mu);
    int stop = r->stop;
    pthread_mutex_unlock(&r->mu);
    if (stop) {
      close(c);
      break;
    }
    char buf[8192];
    size_t got = 0;
    long want = -1;
    char *body = NULL;
    while (got < sizeof buf - 1) {
      ssize_t k = read(c, buf + got, sizeof buf - 1 - got);
      if (k <= 0) break;
      got += (size_t)k;
      buf[got] = '\0';
      char *end = strstr(buf, "\r\n\r\n");
      if (!end) continue;
      body = end + 4;
      char *cl = strcasestr(buf, "Content-Length:");
      want = cl ? atol(cl + 15) : 0;
      if ((long)(got - (size_t)(body - buf)) >= want) break;
    }
    pthread_mutex_lock(&r->mu);
    int k = r->n++;
    int fail = k < r->fail_first;
    int hang = r->hang_ms;
    if (k < MAX_POSTS && body) {
      snprintf(r->body[k], sizeof r->body[k], "%s", body);
      sscanf(buf, "POST %127s", r->path[k]);
    }
    pthread_mutex_unlock(&r->mu);
    if (hang) pxt_sleep_ms(hang);
    const char *ans = fail ? "HTTP/1.1 500 Internal Server Error\r\nContent-Length: 0\r\n"
                             "Connection: close\r\n\r\n"
                           : "HTTP/1.1 200 OK\r\nContent-Length: 2\r\nConnection: close\r\n\r\nok";
    if (write(c, ans, strlen(ans)) < 0) { /* the coordinator gave up: fine */
    }
    close(c);
  }
  return NULL;
}

static void receiver_start(receiver_t *r, int fail_first, int hang_ms) {
  memset(r, 0, sizeof *r);
  pthread_mutex_init(&r->mu, NULL);
  r->fail_first = fail_first;
  r->hang_ms = hang_ms;
  r->fd = socket(AF_INET, SOCK_STREAM, 0);
  assert_true(r->fd >= 0);
  struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = 0};
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  assert_int_equal(bind(r->fd, (struct sockaddr *)&a, sizeof a), 0);
  assert_int_equal(listen(r->fd, 16), 0);
  socklen_t len = sizeof a;
  assert_int_equal(getsockname(r->fd, (struct sockaddr *)&a, &len), 0);
  r->port = ntohs(a.sin_port);
  assert_int_equal(pthread_create(&r->thread, NULL, receiver_main, r), 0);
}

static void receiver_stop(receiver_t *r) {
  pthread_mutex_lock(&r->mu);
  r->stop = 1;
  pthread_mutex_unlock(&r->mu);
  int c = socket(AF_INET, SOCK_STREAM, 0); /* wake accept() */
  struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons((uint16_t)r->port)};
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (connect(c, (struct sockaddr *)&a, sizeof a) != 0) { /* already gone */
  }
  close(c);
  pthread_join(r->thread, NULL);
  close(r->fd);
  pthread_mutex_destroy(&r->mu);
}

static int receiver_count(receiver_t *r) {
  pthread_mutex_lock(&r->mu);
  int n = r->n;
  pthread_mutex_unlock(&r->mu);
  return n;
}

static int wait_posts(receiver_t *r, int n, int timeout_ms) {
  int64_t end = pxt_now_ms() + timeout_ms;
  while (receiver_count(r) < n && pxt_now_ms() < end) pxt_sleep_ms(20);
  return receiver_count(r) >= n;
}

static px_status_t submit_notified(px_rpc_channel_t *ch, const char *url, const char *states,
                                   char *job, size_t cap) {
  pxt_spec_t s;
  pxt_spec_init(&s, 1, 1);
  Prunex__V1__NotifySpec n = PRUNEX__V1__NOTIFY_SPEC__INIT;
  n.url = (char *)url;
  n.states = (char *)states;
  s.spec.notify = &n;
  return pxt_submit(ch, &s, job, cap);
}

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
  assert_int_equal(pxt_coordd_setup(&d, NULL), 0);
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
  assert_int_equal(pxt_coordd_setup(&d, NULL), 0);
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
