/* pxcoordd's HTTP listener against idle and slow sockets: with
 * 500 connections held open by clients that send nothing or send their
 * headers a byte at a time, an authenticated request is still answered in
 * under a second; one address cannot hold more than its share; and a client
 * whose headers are not all in within the header deadline is cut off.
 * Idle connections from the client's own address (the reverse
 * proxy's, in the documented deployment) do not keep it out; a trusted
 * proxy has its own, larger budget; and a flood of connections over the
 * budget makes a few log lines, not one each.
 *
 * The hostile connections come from other loopback addresses (127.0.0.2
 * and up: all of 127.0.0.0/8 is the loopback interface), the honest client
 * from 127.0.0.1, as a proxy or Prometheus would be elsewhere. */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <cmocka.h>

#include "coord_harness.h"

#define NHOSTILE 500
#define PER_ADDRESS 25  /* hostile connections per source address (the limit is 32) */

typedef struct {
  pxt_coordd_t d;
  char tokens[320];
  int fds[NHOSTILE];
  int nfds;
} fixture_t;

/* The coordinator's extra flags for the next setup (NULL: none). */
static const char *const *g_extra;

static int setup(void **state) {
  /* the test holds ~550 sockets */
  struct rlimit rl;
  if (getrlimit(RLIMIT_NOFILE, &rl) == 0 && rl.rlim_cur < 2048 && rl.rlim_max > rl.rlim_cur) {
    rl.rlim_cur = rl.rlim_max < 2048 ? rl.rlim_max : 2048;
    setrlimit(RLIMIT_NOFILE, &rl);
  }
  fixture_t *f = calloc(1, sizeof *f);
  if (!f || pxt_coordd_prepare_tokens(&f->d, f->tokens, sizeof f->tokens,
                                      PXT_TOK_ALICE " alice user\n") != 0) {
    free(f);
    return -1;
  }
  const char *extra[16] = {"--tokens", f->tokens, "--http", "127.0.0.1:0"};
  for (int i = 0; g_extra && g_extra[i] && i < 10; i++) extra[4 + i] = g_extra[i];
  if (pxt_coordd_start(&f->d, extra) != 0) {
    pxt_rmtree(f->d.dir);
    free(f);
    return -1;
  }
  *state = f;
  return 0;
}

/* The setup with trusted proxies 10.0.0.0/8 and 127.0.0.8/30 (.8 to .11). */
static int setup_proxy(void **state) {
  static const char *const extra[] = {"--http-trusted-proxies", "10.0.0.0/8 127.0.0.8/30", NULL};
  g_extra = extra;
  int rc = setup(state);
  g_extra = NULL;
  return rc;
}

static int teardown(void **state) {
  fixture_t *f = *state;
  for (int i = 0; i < f->nfds; i++) close(f->fds[i]);
  int rc = pxt_coordd_teardown(&f->d);
  free(f);
  return rc;
}

/* A TCP connection from 127.0.0.<src> to the HTTP port; -1 on failure. */
static int connect_from(int src, int port) {
  int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return -1;
  struct sockaddr_in me = {.sin_family = AF_INET};
  me.sin_addr.s_addr = htonl(0x7f000000u | (uint32_t)src);
  struct sockaddr_in to = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port)};
  to.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (bind(fd, (struct sockaddr *)&me, sizeof me) != 0 ||
      connect(fd, (struct sockaddr *)&to, sizeof to) != 0) {
    close(fd);
    return -1;
  }
  return fd;
}

/* 1 when the server has closed fd (end of stream or reset) within ms. */
static int closed_by_server(int fd, int ms) {
  struct pollfd p = {fd, POLLIN, 0};
  if (poll(&p, 1, ms) <= 0) return 0;
  char b[256];
  ssize_t r = recv(fd, b, sizeof b, MSG_DONTWAIT);
  return r == 0 || (r < 0 && errno != EAGAIN && errno != EWOULDBLOCK);
}

/* How many of fds[n] the server has closed, once want are or after ms
 * (well inside the 5 s header deadline, which would close them all). */
static int count_closed(const int *fds, int n, int want, int ms) {
  int64_t end = pxt_now_ms() + ms;
  for (;;) {
    pxt_sleep_ms(100);
    int closed = 0;
    for (int i = 0; i < n; i++) closed += closed_by_server(fds[i], 0);
    if (closed >= want || pxt_now_ms() >= end) return closed;
  }
}

/* Lines of the daemon's log that contain needle. */
static int log_lines_with(const pxt_coordd_t *d, const char *needle) {
  FILE *f = fopen(d->log, "r");
  if (!f) return -1;
  char line[4096];
  int n = 0;
  while (fgets(line, sizeof line, f)) n += strstr(line, needle) != NULL;
  fclose(f);
  return n;
}

/* An authenticated GET /api/v1/jobs from 127.0.0.1: its status (-1 when no
 * answer came within 5 s) and, in *ms, how long the answer took. */
static int honest_get(int port, int64_t *ms) {
  int64_t t0 = pxt_now_ms();
  int fd = connect_from(1, port);
  if (fd < 0) return -1;
  struct timeval tv = {5, 0};
  setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
  char req[256];
  int n = snprintf(req, sizeof req,
                   "GET /api/v1/jobs HTTP/1.1\r\nHost: 127.0.0.1\r\nAuthorization: Bearer %s\r\n"
                   "Connection: close\r\n\r\n",
                   PXT_TOK_ALICE);
  int code = -1;
  char buf[64] = "";
  if (write(fd, req, (size_t)n) == n) {
    ssize_t r = read(fd, buf, sizeof buf - 1);
    if (r > 12 && sscanf(buf, "HTTP/1.%*d %d", &code) != 1) code = -1;
  }
  close(fd);
  *ms = pxt_now_ms() - t0;
  return code;
}

/* 500 connections from 20 addresses, half silent, half sending the start
 * of a request and a header byte now and then: the honest request is
 * answered, quickly, three times over. */
static void test_500_idle_and_slow_connections_do_not_starve_a_user(void **state) {
  fixture_t *f = *state;
  for (int i = 0; i < NHOSTILE; i++) {
    int fd = connect_from(2 + i / PER_ADDRESS, f->d.http_port);
    assert_true(fd >= 0);
    f->fds[f->nfds++] = fd;
    if (i % 2) {
      const char *start = "GET /api/v1/jobs HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Slow: ";
      assert_int_equal(write(fd, start, strlen(start)), (ssize_t)strlen(start));
    }
  }
  pxt_sleep_ms(300); /* let the listener accept them all */
  for (int round = 0; round < 3; round++) {
    for (int i = 1; i < f->nfds; i += 2)
      (void)send(f->fds[i], "a", 1, MSG_NOSIGNAL);
    int64_t ms = 0;
    int code = honest_get(f->d.http_port, &ms);
    if (code != 200 || ms >= 1000)
      fail_msg("round %d: status %d after %lld ms (want 200 in under 1000 ms)", round, code,
               (long long)ms);
    pxt_sleep_ms(200);
  }
}

/* 40 connections from one address: the listener keeps 32 and closes the
 * rest at once; the honest client, from another address, is served. */
static void test_one_address_gets_at_most_its_share(void **state) {
  fixture_t *f = *state;
  for (int i = 0; i < 40; i++) {
    int fd = connect_from(50, f->d.http_port);
    assert_true(fd >= 0);
    f->fds[f->nfds++] = fd;
  }
  int closed = 0;
  for (int i = 0; i < f->nfds; i++) closed += closed_by_server(f->fds[i], 100);
  if (closed != 8) fail_msg("%d of 40 connections from one address closed, want 8", closed);
  int64_t ms = 0;
  assert_int_equal(honest_get(f->d.http_port, &ms), 200);
}

/* Slowloris: a byte every 200 ms never trips an idle timeout, but the
 * headers are not in after the 5 s deadline: the connection is cut then
 * (not before 4.5 s, not after 7 s), while a silent one is cut too. */
static void test_late_headers_are_cut_at_the_deadline(void **state) {
  fixture_t *f = *state;
  int slow = connect_from(60, f->d.http_port);
  int silent = connect_from(61, f->d.http_port);
  assert_true(slow >= 0 && silent >= 0);
  f->fds[f->nfds++] = slow;
  f->fds[f->nfds++] = silent;
  const char *start = "GET /metrics HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Slow: ";
  assert_int_equal(write(slow, start, strlen(start)), (ssize_t)strlen(start));
  int64_t t0 = pxt_now_ms(), cut_at = -1;
  while (pxt_now_ms() - t0 < 9000) {
    if (closed_by_server(slow, 200)) {
      cut_at = pxt_now_ms() - t0;
      break;
    }
    if (send(slow, "a", 1, MSG_NOSIGNAL) != 1) {
      cut_at = pxt_now_ms() - t0;
      break;
    }
  }
  if (cut_at < 4500 || cut_at > 7000)
    fail_msg("the slow client was cut after %lld ms (want 4500..7000)", (long long)cut_at);
  assert_true(closed_by_server(silent, 1500));
  int64_t ms = 0;
  assert_int_equal(honest_get(f->d.http_port, &ms), 200);
}

/* The reverse proxy's address is the client's. 40 idle
 * connections from 127.0.0.1 itself: the address keeps its 32, and a new
 * request from it is still answered at once, three times over (each time
 * the connection idle longest makes room). */
static void test_idle_connections_from_the_clients_own_address_do_not_keep_it_out(void **state) {
  fixture_t *f = *state;
  for (int i = 0; i < 40; i++) {
    int fd = connect_from(1, f->d.http_port);
    assert_true(fd >= 0);
    f->fds[f->nfds++] = fd;
  }
  pxt_sleep_ms(300);
  for (int round = 0; round < 3; round++) {
    int64_t ms = 0;
    int code = honest_get(f->d.http_port, &ms);
    if (code != 200 || ms >= 1000)
      fail_msg("round %d: status %d after %lld ms (want 200 in under 1000 ms)", round, code,
               (long long)ms);
  }
  /* 40 + 3 connections of one address: 32 at most still open */
  int closed = count_closed(f->fds, f->nfds, 8, 1500);
  if (closed < 8) fail_msg("only %d of the 40 idle connections were closed", closed);
}

/* A trusted proxy (http_trusted_proxies) holds up to http_max_per_proxy
 * (256) connections: 260 idle ones from 127.0.0.9 (in 127.0.0.8/30) leave
 * 256 open, while another address still gets 32; both are served. */
static void test_a_trusted_proxy_has_its_own_budget(void **state) {
  fixture_t *f = *state;
  for (int i = 0; i < 260; i++) {
    int fd = connect_from(9, f->d.http_port);
    assert_true(fd >= 0);
    f->fds[f->nfds++] = fd;
  }
  int proxy_closed = count_closed(f->fds, 260, 4, 1500);
  if (proxy_closed != 4) fail_msg("%d of 260 connections from the proxy closed, want 4",
                                  proxy_closed);
  for (int i = 0; i < 40; i++) {
    int fd = connect_from(20, f->d.http_port);
    assert_true(fd >= 0);
    f->fds[f->nfds++] = fd;
  }
  int other_closed = count_closed(f->fds + 260, 40, 8, 1500);
  if (other_closed != 8) fail_msg("%d of 40 connections from 127.0.0.20 closed, want 8",
                                  other_closed);
  int64_t ms = 0;
  assert_int_equal(honest_get(f->d.http_port, &ms), 200);
}

/* A bad proxy list is refused at start, naming the setting. */
static void test_a_bad_proxy_list_is_refused(void **state) {
  fixture_t *f = *state;
  char db[400], out[256], err[2048];
  snprintf(db, sizeof db, "%s/other.db", f->d.dir);
  const char *args[] = {"--db", db, "--http", "127.0.0.1:0", "--http-trusted-proxies",
                        "127.0.0.1, 10.0.0.0/40", NULL};
  assert_int_equal(pxt_coordd_run(f->d.dir, args, out, sizeof out, err, sizeof err, 10000), 2);
  assert_non_null(strstr(err, "http_trusted_proxies = '127.0.0.1, 10.0.0.0/40'"));
}

/* Log floods: 2,000 connections over one address's budget make
 * at most a burst of log lines (not one each), and once the interval is
 * over the next such line says how many were suppressed. */
static void test_a_flood_over_the_budget_makes_a_few_log_lines(void **state) {
  fixture_t *f = *state;
  int before = log_lines_with(&f->d, "http: ");
  int ring[64];
  for (int i = 0; i < 64; i++) ring[i] = -1;
  for (int i = 0; i < 2032; i++) {
    if (ring[i % 64] >= 0) close(ring[i % 64]);
    ring[i % 64] = connect_from(30, f->d.http_port);
    assert_true(ring[i % 64] >= 0);
  }
  pxt_sleep_ms(500);
  for (int i = 0; i < 64; i++) close(ring[i]);
  int lines = log_lines_with(&f->d, "http: ") - before;
  if (lines > 2 * PX_LOG_RATE_BURST + 2) {
    pxt_coordd_dump_log(&f->d);
    fail_msg("2,000 connections over the budget wrote %d log lines", lines);
  }
  assert_true(lines >= 1);
  /* past the interval: the next line of that cause carries the count */
  pxt_sleep_ms(PX_LOG_RATE_INTERVAL_MS + 500);
  for (int i = 0; i < 33; i++) {
    int fd = connect_from(30, f->d.http_port);
    assert_true(fd >= 0);
    f->fds[f->nfds++] = fd;
  }
  pxt_sleep_ms(500);
  if (log_lines_with(&f->d, "similar lines suppressed in the last") < 1) {
    pxt_coordd_dump_log(&f->d);
    fail_msg("no line counts the suppressed ones");
  }
  int64_t ms = 0;
  assert_int_equal(honest_get(f->d.http_port, &ms), 200);
}

/* The per-address limit is a setting; a value out of range is refused,
 * naming it. */
static void test_a_bad_per_address_limit_is_refused(void **state) {
  fixture_t *f = *state;
  char db[400], out[256], err[2048];
  snprintf(db, sizeof db, "%s/other.db", f->d.dir);
  const char *args[] = {"--db", db, "--http", "127.0.0.1:0", "--http-max-per-address", "0", NULL};
  assert_int_equal(pxt_coordd_run(f->d.dir, args, out, sizeof out, err, sizeof err, 10000), 2);
  assert_non_null(strstr(err, "http_max_per_address = '0'"));
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test_setup_teardown(test_500_idle_and_slow_connections_do_not_starve_a_user,
                                      setup, teardown),
      cmocka_unit_test_setup_teardown(test_one_address_gets_at_most_its_share, setup, teardown),
      cmocka_unit_test_setup_teardown(test_late_headers_are_cut_at_the_deadline, setup,
                                      teardown),
      cmocka_unit_test_setup_teardown(test_a_bad_per_address_limit_is_refused, setup, teardown),
      cmocka_unit_test_setup_teardown(
          test_idle_connections_from_the_clients_own_address_do_not_keep_it_out, setup, teardown),
      cmocka_unit_test_setup_teardown(test_a_trusted_proxy_has_its_own_budget, setup_proxy,
                                      teardown),
      cmocka_unit_test_setup_teardown(test_a_bad_proxy_list_is_refused, setup, teardown),
      cmocka_unit_test_setup_teardown(test_a_flood_over_the_budget_makes_a_few_log_lines, setup,
                                      teardown),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
