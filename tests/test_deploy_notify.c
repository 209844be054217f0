/* Service-manager integration of the daemons (deploy/systemd): pxcoordd and
 * pxagent started the way systemd starts a Type=notify unit with
 * WatchdogSec= (NOTIFY_SOCKET naming a unix datagram socket this test owns,
 * WATCHDOG_USEC, WATCHDOG_PID = the daemon's own pid) send READY=1 only once
 * they can serve (the coordinator answers RPCs, the agent's node is
 * registered), STATUS= lines, WATCHDOG=1 at half the interval from their
 * event loops, and STOPPING=1 on SIGTERM. A watchdog meant for another pid
 * is ignored. Log lines carry "<N>" syslog priorities when stderr is the
 * journal (JOURNAL_STREAM names it) and time stamps otherwise. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <sys/socket.h>
#include <sys/un.h>

#include <cmocka.h>

#include "coord_harness.h"

#define PXT_AGENT_BIN PX_BINARY_DIR "/agent/pxagent"
#define WATCHDOG_USEC 300000 /* pings expected every 150 ms */

static void pxt_dump_log_file(const char *path) {
  FILE *fp = fopen(path, "r");
  if (!fp) return;
  fprintf(stderr, "---- %s\n", path);
  char line[2048];
  while (fgets(line, sizeof line, fp)) fputs(line, stderr);
  fclose(fp);
}

/* 1 when a line of the file contains needle. */
static int pxt_file_has(const char *path, const char *needle) {
  FILE *fp = fopen(path, "r");
  if (!fp) return 0;
  char line[4096];
  int found = 0;
  while (!found && fgets(line, sizeof line, fp)) found = strstr(line, needle) != NULL;
  fclose(fp);
  return found;
}

typedef struct {
  char dir[256];
  char sock_paths[2][320];    /* one socket per daemon, so that pings are told apart */
  int socks[2];
  int cur;                    /* the socket the next daemon and the waits use */
  pid_t coord, agent;
  char coord_log[320], agent_log[320];
  char target[64];
} fixture_t;

static int setup(void **state) {
  fixture_t *f = calloc(1, sizeof *f);
  if (!f || pxt_mkdtemp(f->dir, sizeof f->dir) != 0) return -1;
  f->coord = f->agent = -1;
  for (int i = 0; i < 2; i++) {
    snprintf(f->sock_paths[i], sizeof f->sock_paths[i], "%s/notify-%d.sock", f->dir, i);
    f->socks[i] = socket(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC, 0);
    struct sockaddr_un sa = {.sun_family = AF_UNIX};
    if (strlen(f->sock_paths[i]) >= sizeof sa.sun_path) return -1;
    memcpy(sa.sun_path, f->sock_paths[i], strlen(f->sock_paths[i]) + 1);
    if (f->socks[i] < 0 || bind(f->socks[i], (struct sockaddr *)&sa, sizeof sa) != 0) return -1;
  }
  snprintf(f->coord_log, sizeof f->coord_log, "%s/coordd.log", f->dir);
  snprintf(f->agent_log, sizeof f->agent_log, "%s/agent.log", f->dir);
  *state = f;
  return 0;
}

static void stop(pid_t *pid) {
  if (*pid <= 0) return;
  kill(*pid, SIGKILL);
  pxt_wait_pid(*pid, 5000);
  *pid = -1;
}

static int teardown(void **state) {
  fixture_t *f = *state;
  stop(&f->agent);
  stop(&f->coord);
  close(f->socks[0]);
  close(f->socks[1]);
  if (!getenv("PX_TEST_KEEP")) pxt_rmtree(f->dir);
  free(f);
  return 0;
}

/* Forks and execs path with argv, as a service manager would: NOTIFY_SOCKET,
 * WATCHDOG_USEC and WATCHDOG_PID (the child's own pid, or watchdog_pid when
 * > 0), JOURNAL_STREAM naming the log file when journal is set; stderr to
 * log, stdout to *out_fd (a pipe) when out_fd is given. */
static pid_t spawn_service(const fixture_t *f, const char *path, const char *const *argv,
                           const char *log, int *out_fd, pid_t watchdog_pid, int journal) {
  int pfd[2] = {-1, -1};
  if (out_fd && pipe(pfd) != 0) return -1;
  int logfd = open(log, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
  if (logfd < 0) return -1;
  pid_t pid = fork();
  if (pid == 0) {
    char buf[64];
    setenv("NOTIFY_SOCKET", f->sock_paths[f->cur], 1);
    snprintf(buf, sizeof buf, "%d", WATCHDOG_USEC);
    setenv("WATCHDOG_USEC", buf, 1);
    snprintf(buf, sizeof buf, "%ld", (long)(watchdog_pid > 0 ? watchdog_pid : getpid()));
    setenv("WATCHDOG_PID", buf, 1);
    unsetenv("JOURNAL_STREAM");
    if (journal) {
      struct stat sb;
      fstat(logfd, &sb);
      snprintf(buf, sizeof buf, "%llu:%llu", (unsigned long long)sb.st_dev,
               (unsigned long long)sb.st_ino);
      setenv("JOURNAL_STREAM", buf, 1);
    }
    dup2(logfd, 2);
    if (out_fd) dup2(pfd[1], 1);
    execv(path, (char *const *)argv);
    _exit(127);
  }
  close(logfd);
  if (out_fd) {
    close(pfd[1]);
    *out_fd = pfd[0];
  }
  return pid;
}

/* Receives notifications until one contains needle (each datagram's
 * assignments are appended to seen, one per line). 1 when found. */
static int wait_notify(fixture_t *f, const char *needle, int timeout_ms, char *seen, size_t cap) {
  int64_t end = pxt_now_ms() + timeout_ms;
  for (;;) {
    int left = (int)(end - pxt_now_ms());
    if (left <= 0) return 0;
    struct pollfd p = {f->socks[f->cur], POLLIN, 0};
    if (poll(&p, 1, left) <= 0) return 0;
    char msg[4096];
    ssize_t n = recv(f->socks[f->cur], msg, sizeof msg - 1, 0);
    if (n <= 0) continue;
    msg[n] = '\0';
    size_t used = strlen(seen);
    if (used + (size_t)n + 2 < cap) snprintf(seen + used, cap - used, "%s\n", msg);
    if (strstr(msg, needle)) return 1;
  }
}

/* WATCHDOG=1 datagrams received within ms. */
static int count_watchdog(fixture_t *f, int ms) {
  int64_t end = pxt_now_ms() + ms;
  int n = 0;
  for (;;) {
    int left = (int)(end - pxt_now_ms());
    if (left <= 0) return n;
    struct pollfd p = {f->socks[f->cur], POLLIN, 0};
    if (poll(&p, 1, left) <= 0) return n;
    char msg[4096];
    ssize_t r = recv(f->socks[f->cur], msg, sizeof msg - 1, 0);
    if (r <= 0) continue;
    msg[r] = '\0';
    if (strstr(msg, "WATCHDOG=1")) n++;
  }
}

static void drain(fixture_t *f) {
  char msg[4096];
  while (recv(f->socks[f->cur], msg, sizeof msg, MSG_DONTWAIT) > 0) {
  }
}

/* Starts pxcoordd under the fake service manager; reads its port. */
static void start_coord(fixture_t *f, int journal) {
  char db[320];
  snprintf(db, sizeof db, "%s/coord.db", f->dir);
  const char *argv[] = {PXT_COORDD, "--db", db, "--listen", "127.0.0.1:0", "--log-level", "info",
                        NULL};
  int fd = -1;
  f->coord = spawn_service(f, PXT_COORDD, argv, f->coord_log, &fd, 0, journal);
  assert_true(f->coord > 0);
  char line[256] = "";
  size_t used = 0;
  int64_t end = pxt_now_ms() + 15000;
  while (used < sizeof line - 1) {
    struct pollfd p = {fd, POLLIN, 0};
    int left = (int)(end - pxt_now_ms());
    if (left <= 0 || poll(&p, 1, left) <= 0 || read(fd, line + used, 1) != 1) break;
    if (line[used] == '\n') break;
    used++;
  }
  line[used] = '\0';
  close(fd);
  const char *colon = strrchr(line, ':');
  if (strncmp(line, "listening on ", 13) || !colon) {
    pxt_dump_log_file(f->coord_log);
    fail_msg("pxcoordd did not start: '%s'", line);
  }
  snprintf(f->target, sizeof f->target, "127.0.0.1:%d", atoi(colon + 1));
}

static void test_coordinator_ready_watchdog_stopping(void **state) {
  fixture_t *f = *state;
  start_coord(f, 1);
  char seen[8192] = "";
  if (!wait_notify(f, "READY=1", 15000, seen, sizeof seen)) {
    pxt_dump_log_file(f->coord_log);
    fail_msg("pxcoordd sent no READY=1 (got: %s)", seen);
  }
  /* READY means it serves: an RPC right now is answered */
  px_rpc_channel_t *ch = NULL;
  assert_int_equal(px_rpc_channel_create(f->target, &ch), PX_OK);
  Prunex__V1__ListNodesRequest req = PRUNEX__V1__LIST_NODES_REQUEST__INIT;
  Prunex__V1__ListNodesResponse *r = NULL;
  assert_int_equal(px_rpc_list_nodes(ch, &req, 2000, &r), PX_OK);
  px_rpc_message_free(r);
  px_rpc_channel_destroy(ch);
  assert_non_null(strstr(seen, "STATUS=serving on port"));
  int pings = count_watchdog(f, 1000);
  printf("pxcoordd: %d WATCHDOG=1 in 1 s (WATCHDOG_USEC %d)\n", pings, WATCHDOG_USEC);
  assert_true(pings >= 3 && pings <= 12); /* every 150 ms: about 7 */
  kill(f->coord, SIGTERM);
  seen[0] = '\0';
  assert_true(wait_notify(f, "STOPPING=1", 5000, seen, sizeof seen));
  int status = pxt_wait_pid(f->coord, 10000);
  f->coord = -1;
  assert_true(status != -1 && WIFEXITED(status) && WEXITSTATUS(status) == 0);
  /* stderr was "the journal": lines carry syslog priorities, no time stamp */
  assert_true(pxt_file_has(f->coord_log, "<6>INFO "));
  assert_false(pxt_file_has(f->coord_log, "Z INFO "));
}

static void test_agent_ready_once_registered(void **state) {
  fixture_t *f = *state;
  start_coord(f, 0);
  char seen[8192] = "";
  assert_true(wait_notify(f, "READY=1", 15000, seen, sizeof seen));
  drain(f);
  f->cur = 1; /* the agent's own socket: the coordinator keeps pinging its own */
  char work[320];
  snprintf(work, sizeof work, "%s/work", f->dir);
  const char *argv[] = {PXT_AGENT_BIN, "--coordinator", f->target, "--name", "notify-node",
                        "--work-dir", work, "--log-level", "info", NULL};
  f->agent = spawn_service(f, PXT_AGENT_BIN, argv, f->agent_log, NULL, 0, 0);
  assert_true(f->agent > 0);
  seen[0] = '\0';
  if (!wait_notify(f, "READY=1", 15000, seen, sizeof seen)) {
    pxt_dump_log_file(f->agent_log);
    fail_msg("pxagent sent no READY=1 (got: %s)", seen);
  }
  /* READY means registered: the coordinator already lists the node */
  px_rpc_channel_t *ch = NULL;
  assert_int_equal(px_rpc_channel_create(f->target, &ch), PX_OK);
  Prunex__V1__ListNodesRequest req = PRUNEX__V1__LIST_NODES_REQUEST__INIT;
  Prunex__V1__ListNodesResponse *r = NULL;
  assert_int_equal(px_rpc_list_nodes(ch, &req, 2000, &r), PX_OK);
  int found = 0;
  for (size_t i = 0; i < r->n_nodes; i++) found |= !strcmp(r->nodes[i]->name, "notify-node");
  px_rpc_message_free(r);
  px_rpc_channel_destroy(ch);
  assert_true(found);
  assert_non_null(strstr(seen, "STATUS=registered node 'notify-node'"));
  int pings = count_watchdog(f, 1000);
  printf("pxagent: %d WATCHDOG=1 in 1 s\n", pings);
  assert_true(pings >= 3 && pings <= 12); /* every 150 ms: about 7 */
  kill(f->agent, SIGTERM);
  seen[0] = '\0';
  assert_true(wait_notify(f, "STOPPING=1", 5000, seen, sizeof seen));
  int status = pxt_wait_pid(f->agent, 15000);
  f->agent = -1;
  assert_true(status != -1 && WIFEXITED(status) && WEXITSTATUS(status) == 0);
  /* not the journal: ISO 8601 UTC time stamps, no priority prefix */
  assert_true(pxt_file_has(f->agent_log, "Z INFO "));
  assert_false(pxt_file_has(f->agent_log, "<6>"));
}

static void test_watchdog_for_another_pid_is_ignored(void **state) {
  fixture_t *f = *state;
  char db[320];
  snprintf(db, sizeof db, "%s/other.db", f->dir);
  const char *argv[] = {PXT_COORDD, "--db", db, "--listen", "127.0.0.1:0", NULL};
  f->coord = spawn_service(f, PXT_COORDD, argv, f->coord_log, NULL, getpid(), 0);
  assert_true(f->coord > 0);
  char seen[8192] = "";
  assert_true(wait_notify(f, "READY=1", 15000, seen, sizeof seen));
  assert_int_equal(count_watchdog(f, 800), 0);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test_setup_teardown(test_coordinator_ready_watchdog_stopping, setup, teardown),
      cmocka_unit_test_setup_teardown(test_agent_ready_once_registered, setup, teardown),
      cmocka_unit_test_setup_teardown(test_watchdog_for_another_pid_is_ignored, setup, teardown),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
