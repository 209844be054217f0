/* Test harness for the control-plane tests: runs the real pxcoordd on
 * loopback with a real SQLite file in a fresh temporary directory, reads the
 * port it prints, and offers small helpers over the libpxcore RPC client
 * (register a node, submit a job, wait for a state). Header-only (static
 * functions) because every tests/test_*.c is its own program.
 *
 * The daemon's stderr (at log level info) goes to DIR/coordd.log; set
 * PX_TEST_KEEP=1 to keep the directory after the test for a look. */
#ifndef PX_COORD_HARNESS_H
#define PX_COORD_HARNESS_H

#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <poll.h>
#include <signal.h>
#include <spawn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "prunex/px.h"
#include "prunex/rpc.h"

#define PXT_UNUSED __attribute__((unused))
#define PXT_COORDD PX_BINARY_DIR "/coordinatord/pxcoordd"

extern char **environ;

typedef struct {
  pid_t pid;
  char dir[256];
  char db[320];
  char log[320];
  char target[64];
  int port;
  int http_port;   /* with --http among the extra args: the port of `http on HOST:PORT` */
} pxt_coordd_t;

static PXT_UNUSED int64_t pxt_now_ms(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

static PXT_UNUSED void pxt_sleep_ms(int ms) {
  struct timespec ts = {ms / 1000, (long)(ms % 1000) * 1000000L};
  nanosleep(&ts, NULL);
}

/* A fresh directory under TMPDIR (or /tmp); 0 on success. */
static PXT_UNUSED int pxt_mkdtemp(char *dir, size_t cap) {
  const char *tmp = getenv("TMPDIR");
  snprintf(dir, cap, "%s/pxcoord-test-XXXXXX", tmp && tmp[0] ? tmp : "/tmp");
  return mkdtemp(dir) ? 0 : -1;
}

static int pxt__rm(const char *path, const struct stat *sb, int flag, struct FTW *ftw) {
  (void)sb;
  (void)flag;
  (void)ftw;
  return remove(path);
}

static PXT_UNUSED void pxt_rmtree(const char *dir) {
  const char *keep = getenv("PX_TEST_KEEP");
  if (keep && keep[0] == '1') {
    fprintf(stderr, "kept %s\n", dir);
    return;
  }
  nftw(dir, pxt__rm, 16, FTW_DEPTH | FTW_PHYS);
}

/* Spawns pxcoordd with args (argv[0] excluded, NULL-terminated); stdout to
 * *out_fd (a pipe) when out_fd is given, stderr appended to log. */
static pid_t pxt__spawn(const char *const *args, const char *log, int *out_fd) {
  const char *argv[32];
  int n = 0;
  argv[n++] = PXT_COORDD;
  for (int i = 0; args[i] && n < 31; i++) argv[n++] = args[i];
  argv[n] = NULL;
  int pfd[2] = {-1, -1};
  if (out_fd && pipe(pfd) != 0) return -1;
  posix_spawn_file_actions_t fa;
  posix_spawn_file_actions_init(&fa);
  if (out_fd) {
    posix_spawn_file_actions_adddup2(&fa, pfd[1], 1);
    posix_spawn_file_actions_addclose(&fa, pfd[0]);
    posix_spawn_file_actions_addclose(&fa, pfd[1]);
  }
  posix_spawn_file_actions_addopen(&fa, 2, log, O_WRONLY | O_CREAT | O_APPEND, 0644);
  pid_t pid = -1;
  int rc = posix_spawn(&pid, PXT_COORDD, &fa, NULL, (char *const *)argv, environ);
  posix_spawn_file_actions_destroy(&fa);
  if (out_fd) {
    close(pfd[1]);
    if (rc != 0) close(pfd[0]);
    else *out_fd = pfd[0];
  }
  return rc == 0 ? pid : -1;
}

/* Reads /proc/PID/WHAT ("stat", "cmdline") into buf, NUL-terminated (at
 * most cap - 1 bytes): the byte count, or -1 when the process is gone. */
static PXT_UNUSED long pxt_proc_read(long pid, const char *what, char *buf, size_t cap) {
  char path[64];
  snprintf(path, sizeof path, "/proc/%ld/%s", pid, what);
  FILE *f = fopen(path, "rb");
  if (!f) return -1;
  size_t len = fread(buf, 1, cap - 1, f);
  fclose(f);
  buf[len] = '\0';
  return (long)len;
}

/* Waits up to timeout_ms for pid: its wait status, or -1 on timeout. */
static PXT_UNUSED int pxt_wait_pid(pid_t pid, int timeout_ms) {
  int64_t end = pxt_now_ms() + timeout_ms;
  for (;;) {
    int status;
    pid_t r = waitpid(pid, &status, WNOHANG);
    if (r == pid) return status;
    if (r < 0 && errno != EINTR) return -1;
    if (pxt_now_ms() >= end) return -1;
    pxt_sleep_ms(10);
  }
}

/* Prints the daemon's log to stderr (for a failing test). */
static PXT_UNUSED void pxt_coordd_dump_log(const pxt_coordd_t *d) {
  FILE *f = fopen(d->log, "r");
  if (!f) return;
  fprintf(stderr, "---- %s\n", d->log);
  char line[1024];
  while (fgets(line, sizeof line, f)) fputs(line, stderr);
  fclose(f);
}

/* Reads one line (without its newline) from fd until the deadline. */
static PXT_UNUSED void pxt__read_line(int fd, char *line, size_t cap, int64_t end) {
  size_t used = 0;
  while (used < cap - 1) {
    int left = (int)(end - pxt_now_ms());
    struct pollfd p = {fd, POLLIN, 0};
    if (left <= 0 || poll(&p, 1, left) <= 0) break;
    ssize_t r = read(fd, line + used, 1);
    if (r <= 0) break;
    if (line[used] == '\n') break;
    used++;
  }
  line[used] = '\0';
}

/* Starts pxcoordd on d->db (which must be set; d->dir too) with
 * --listen 127.0.0.1:0 and the extra args, and reads the port. Returns 0,
 * or -1 when the daemon exits or says nothing within 15 s (its log says
 * why). */
static PXT_UNUSED int pxt_coordd_start(pxt_coordd_t *d, const char *const *extra) {
  const char *args[24];
  int n = 0;
  args[n++] = "--db";
  args[n++] = d->db;
  args[n++] = "--listen";
  args[n++] = "127.0.0.1:0";
  args[n++] = "--log-level";
  args[n++] = "info";
  for (int i = 0; extra && extra[i] && n < 23; i++) args[n++] = extra[i];
  args[n] = NULL;
  snprintf(d->log, sizeof d->log, "%s/coordd.log", d->dir);
  int fd = -1;
  d->pid = pxt__spawn(args, d->log, &fd);
  if (d->pid < 0) return -1;
  char line[256];
  int64_t end = pxt_now_ms() + 15000;
  pxt__read_line(fd, line, sizeof line, end);
  int want_http = 0;
  for (int i = 0; extra && extra[i]; i++) want_http |= !strcmp(extra[i], "--http");
  char hline[256] = "";
  if (want_http) pxt__read_line(fd, hline, sizeof hline, end);
  close(fd);
  const char *colon = strrchr(line, ':');
  const char *hcolon = strrchr(hline, ':');
  if (strncmp(line, "listening on ", 13) != 0 || !colon ||
      (want_http && (strncmp(hline, "http on ", 8) != 0 || !hcolon))) {
    fprintf(stderr, "pxcoordd did not start (stdout: '%s' '%s')\n", line, hline);
    pxt_coordd_dump_log(d);
    kill(d->pid, SIGKILL);
    pxt_wait_pid(d->pid, 5000);
    d->pid = -1;
    return -1;
  }
  d->http_port = want_http ? atoi(hcolon + 1) : 0;
  d->port = atoi(colon + 1);
  snprintf(d->target, sizeof d->target, "127.0.0.1:%d", d->port);
  return 0;
}

/* Sends sig and waits (10 s, then SIGKILL): the wait status. */
static PXT_UNUSED int pxt_coordd_stop(pxt_coordd_t *d, int sig) {
  if (d->pid <= 0) return -1;
  kill(d->pid, sig);
  int status = pxt_wait_pid(d->pid, 10000);
  if (status == -1) {
    kill(d->pid, SIGKILL);
    status = pxt_wait_pid(d->pid, 5000);
    status = -1;
  }
  d->pid = -1;
  return status;
}

/* Makes a directory, a database path in it, and starts the daemon. */
static PXT_UNUSED int pxt_coordd_setup(pxt_coordd_t *d, const char *const *extra) {
  memset(d, 0, sizeof *d);
  d->pid = -1;
  if (pxt_mkdtemp(d->dir, sizeof d->dir) != 0) return -1;
  snprintf(d->db, sizeof d->db, "%s/coord.db", d->dir);
  return pxt_coordd_start(d, extra);
}

/* Makes a directory and a database path in it (not started), and in that
 * directory a tokens file `tokens` (cap bytes) of mode 0600 holding text.
 * 0, or -1 with nothing left behind. */
static PXT_UNUSED int pxt_coordd_prepare_tokens(pxt_coordd_t *d, char *tokens, size_t cap,
                                                const char *text) {
  memset(d, 0, sizeof *d);
  d->pid = -1;
  if (pxt_mkdtemp(d->dir, sizeof d->dir) != 0) return -1;
  snprintf(d->db, sizeof d->db, "%s/coord.db", d->dir);
  snprintf(tokens, cap, "%s/tokens", d->dir);
  int fd = open(tokens, O_WRONLY | O_CREAT | O_TRUNC, 0600);
  if (fd < 0 || write(fd, text, strlen(text)) != (ssize_t)strlen(text)) {
    if (fd >= 0) close(fd);
    pxt_rmtree(d->dir);
    d->dir[0] = '\0';
    return -1;
  }
  close(fd);
  return 0;
}

/* Stops a running daemon with SIGTERM and removes the directory. Returns 0
 * when the daemon (if running) shut down cleanly with status 0 (under the
 * sanitizers that includes no leak report), else -1 after printing its log:
 * a cmocka teardown that fails marks the test failed. */
static PXT_UNUSED int pxt_coordd_teardown(pxt_coordd_t *d) {
  int rc = 0;
  if (d->pid > 0) {
    int status = pxt_coordd_stop(d, SIGTERM);
    if (status == -1 || !WIFEXITED(status) || WEXITSTATUS(status) != 0) {
      fprintf(stderr, "pxcoordd did not shut down cleanly (wait status %d)\n", status);
      pxt_coordd_dump_log(d);
      rc = -1;
    }
  }
  if (d->dir[0]) pxt_rmtree(d->dir);
  return rc;
}

/* Runs pxcoordd with args to completion (it must exit within timeout_ms):
 * returns its exit code (or 128 + signal, -1 on timeout), its stderr in
 * err and its stdout in out (each NUL-terminated, truncated to cap). */
static PXT_UNUSED int pxt_coordd_run(const char *dir, const char *const *args, char *out,
                                     size_t out_cap, char *err, size_t err_cap, int timeout_ms) {
  char log[320];
  snprintf(log, sizeof log, "%s/run-stderr.txt", dir);
  unlink(log);
  int fd = -1;
  pid_t pid = pxt__spawn(args, log, &fd);
  if (pid < 0) return -1;
  size_t used = 0;
  int64_t end = pxt_now_ms() + timeout_ms;
  for (;;) {
    int left = (int)(end - pxt_now_ms());
    struct pollfd p = {fd, POLLIN, 0};
    if (left <= 0 || poll(&p, 1, left) <= 0) break;
    char buf[512];
    ssize_t r = read(fd, buf, sizeof buf);
    if (r <= 0) break;
    for (ssize_t i = 0; i < r && used + 1 < out_cap; i++) out[used++] = buf[i];
  }
  if (out_cap) out[used] = '\0';
  close(fd);
  int status = pxt_wait_pid(pid, (int)(end - pxt_now_ms() > 0 ? end - pxt_now_ms() : 1));
  if (status == -1) {
    kill(pid, SIGKILL);
    pxt_wait_pid(pid, 5000);
  }
  FILE *f = fopen(log, "r");
  size_t n = 0;
  if (f) {
    n = fread(err, 1, err_cap ? err_cap - 1 : 0, f);
    fclose(f);
  }
  if (err_cap) err[n] = '\0';
  if (status == -1) return -1;
  if (WIFEXITED(status)) return WEXITSTATUS(status);
  return 128 + WTERMSIG(status);
}

/* ---- RPC helpers ---------------------------------------------------------------- */

/* A job spec with the fields the coordinator requires, on nodes x workers. */
typedef struct {
  Prunex__V1__JobSpec spec;
  Prunex__V1__ModelSpec model;
  Prunex__V1__DatasetSpec dataset;
  Prunex__V1__ClusterSpec cluster;
  Prunex__V1__AdmmSpec admm;
  Prunex__V1__SubmitJobRequest req;
} pxt_spec_t;

static PXT_UNUSED void pxt_spec_init(pxt_spec_t *s, int nodes, int workers) {
  s->spec = (Prunex__V1__JobSpec)PRUNEX__V1__JOB_SPEC__INIT;
  s->model = (Prunex__V1__ModelSpec)PRUNEX__V1__MODEL_SPEC__INIT;
  s->dataset = (Prunex__V1__DatasetSpec)PRUNEX__V1__DATASET_SPEC__INIT;
  s->cluster = (Prunex__V1__ClusterSpec)PRUNEX__V1__CLUSTER_SPEC__INIT;
  s->admm = (Prunex__V1__AdmmSpec)PRUNEX__V1__ADMM_SPEC__INIT;
  s->req = (Prunex__V1__SubmitJobRequest)PRUNEX__V1__SUBMIT_JOB_REQUEST__INIT;
  s->model.name = "resnet20";
  s->dataset.name = "cifar10";
  s->dataset.path = "/srv/data/cifar10"; /* no default location: the workers need one */
  s->cluster.nodes = nodes;
  s->cluster.workers_per_node = workers;
  s->cluster.device = "cpu";
  s->admm.rho1 = 1.0;
  s->admm.rho2 = 1.0;
  s->admm.adaptive_rho = 1;
  s->admm.max_iterations = 50;
  s->spec.name = "test-job";
  s->spec.model = &s->model;
  s->spec.dataset = &s->dataset;
  s->spec.cluster = &s->cluster;
  s->spec.admm = &s->admm;
  s->spec.strategy = PRUNEX__V1__STRATEGY__STRATEGY_HSADMM;
  s->req.spec = &s->spec;
  s->req.spec_yaml = "name: test-job\n";
}

/* Submits; the job id is copied to job_id. Returns the px status. */
static PXT_UNUSED px_status_t pxt_submit(px_rpc_channel_t *ch, pxt_spec_t *s, char *job_id,
                                         size_t cap) {
  Prunex__V1__SubmitJobResponse *r = NULL;
  px_status_t st = px_rpc_submit_job(ch, &s->req, 0, &r);
  if (st == PX_OK) snprintf(job_id, cap, "%s", r->job_id);
  px_rpc_message_free(r);
  return st;
}

static PXT_UNUSED px_status_t pxt_submit_mp(px_rpc_channel_t *ch, int nodes, int workers,
                                            char *job_id, size_t cap) {
  pxt_spec_t s;
  pxt_spec_init(&s, nodes, workers);
  return pxt_submit(ch, &s, job_id, cap);
}

/* Registers a node with ndev CPU devices (indexes 0..ndev-1); bit i of
 * unhealthy marks device i unhealthy. */
static PXT_UNUSED px_status_t pxt_register(px_rpc_channel_t *ch, const char *name, int ndev,
                                           unsigned unhealthy, char *node_id, size_t cap) {
  Prunex__V1__Device devs[16], *dp[16];
  for (int i = 0; i < ndev && i < 16; i++) {
    devs[i] = (Prunex__V1__Device)PRUNEX__V1__DEVICE__INIT;
    devs[i].index = i;
    devs[i].kind = PRUNEX__V1__DEVICE_KIND__DEVICE_KIND_CPU;
    devs[i].name = "cpu";
    devs[i].healthy = !(unhealthy & (1u << i));
    dp[i] = &devs[i];
  }
  char addr[64];
  snprintf(addr, sizeof addr, "tcp://%s:9000", name);
  char *addrs[1] = {addr};
  Prunex__V1__RegisterNodeRequest req = PRUNEX__V1__REGISTER_NODE_REQUEST__INIT;
  req.name = (char *)name;
  req.hostname = (char *)name;
  req.n_devices = (size_t)ndev;
  req.devices = dp;
  req.n_data_plane_addresses = 1;
  req.data_plane_addresses = addrs;
  req.agent_version = "test";
  req.pid = getpid();
  Prunex__V1__RegisterNodeResponse *r = NULL;
  px_status_t st = px_rpc_register_node(ch, &req, 0, &r);
  if (st == PX_OK && node_id) snprintf(node_id, cap, "%s", r->node_id);
  px_rpc_message_free(r);
  return st;
}

/* The job's state, or -1 when it cannot be read. */
static PXT_UNUSED int pxt_job_state(px_rpc_channel_t *ch, const char *job_id) {
  Prunex__V1__Job *j = NULL;
  if (px_rpc_get_job(ch, job_id, 0, &j) != PX_OK) return -1;
  int s = (int)j->state;
  px_rpc_message_free(j);
  return s;
}

/* The node's state (from ListNodes), or -1. */
static PXT_UNUSED int pxt_node_state(px_rpc_channel_t *ch, const char *node_id) {
  Prunex__V1__ListNodesRequest req = PRUNEX__V1__LIST_NODES_REQUEST__INIT;
  Prunex__V1__ListNodesResponse *r = NULL;
  if (px_rpc_list_nodes(ch, &req, 0, &r) != PX_OK) return -1;
  int s = -1;
  for (size_t i = 0; i < r->n_nodes; i++)
    if (!strcmp(r->nodes[i]->node_id, node_id)) s = (int)r->nodes[i]->state;
  px_rpc_message_free(r);
  return s;
}

/* Polls until the node reaches state or timeout_ms pass: 1 if it did. */
static PXT_UNUSED int pxt_wait_node_state(px_rpc_channel_t *ch, const char *node_id, int state,
                                          int timeout_ms) {
  int64_t end = pxt_now_ms() + timeout_ms;
  do {
    if (pxt_node_state(ch, node_id) == state) return 1;
    pxt_sleep_ms(20);
  } while (pxt_now_ms() < end);
  return 0;
}

/* Reads the next assignment (timeout_ms), NULL when none came. */
static PXT_UNUSED Prunex__V1__Assignment *pxt_next_assignment(px_rpc_stream_t *s, int timeout_ms) {
  Prunex__V1__Assignment *a = NULL;
  if (px_rpc_read_assignment(s, timeout_ms, &a) != PX_OK) return NULL;
  return a;
}


/* ---- TLS and tokens -----------------------------------------------------------
 * pxt_make_security writes, into dir, a throwaway CA (ca.pem), a server
 * certificate for 127.0.0.1 and localhost signed by it (server.pem,
 * server.key), a second CA that signed nothing (other-ca.pem) and a tokens
 * file (tokens, mode 0600) with the tokens below. Made with openssl at test
 * time: no private key is ever committed. 0 on success. */
#define PXT_TOK_ADMIN "tok-admin-0123456789abcdef"
#define PXT_TOK_ALICE "tok-alice-0123456789abcdef"
#define PXT_TOK_BOB "tok-bob-0123456789abcdefgh"
#define PXT_TOK_N1 "tok-node-n1-0123456789abcd"
#define PXT_TOK_N2 "tok-node-n2-0123456789abcd"

static PXT_UNUSED int pxt_make_security(const char *dir) {
  char cmd[4096];
  snprintf(cmd, sizeof cmd,
           "cd '%s' && printf 'subjectAltName=IP:127.0.0.1,DNS:localhost\\n' > ext.cnf && "
           "timeout 60 openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes "
           "-keyout ca.key -out ca.pem -days 2 -subj /CN=pxtest-ca 2>/dev/null && "
           "timeout 60 openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes "
           "-keyout other-ca.key -out other-ca.pem -days 2 -subj /CN=pxtest-other-ca 2>/dev/null && "
           "timeout 60 openssl req -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes "
           "-keyout server.key -out server.csr -subj /CN=localhost 2>/dev/null && "
           "timeout 60 openssl x509 -req -in server.csr -CA ca.pem -CAkey ca.key -CAcreateserial "
           "-out server.pem -days 2 -extfile ext.cnf 2>/dev/null && chmod 600 server.key",
           dir);
  if (system(cmd) != 0) {
    fprintf(stderr, "openssl could not make the test certificates in %s\n", dir);
    return -1;
  }
  char path[512];
  snprintf(path, sizeof path, "%s/tokens", dir);
  int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, 0600);
  if (fd < 0) return -1;
  const char *text = "# test tokens: TOKEN NAME ROLE\n"
                     PXT_TOK_ADMIN " root admin\n"
                     PXT_TOK_ALICE " alice user\n"
                     PXT_TOK_BOB " bob user\n"
                     PXT_TOK_N1 " n1 node\n"
                     PXT_TOK_N2 " n2 node\n";
  ssize_t w = write(fd, text, strlen(text));
  close(fd);
  return w == (ssize_t)strlen(text) ? 0 : -1;
}

/* A channel to target with the CA file (NULL: plain text) and token (NULL:
 * none), whatever PRUNEX_CA and PRUNEX_TOKEN say. NULL on failure. */
static PXT_UNUSED px_rpc_channel_t *pxt_channel(const char *target, const char *ca,
                                                const char *token) {
  px_rpc_channel_options_t o = {ca ? ca : "", token ? token : ""};
  px_rpc_channel_t *ch = NULL;
  if (px_rpc_channel_create_ex(target, &o, &ch) != PX_OK) {
    fprintf(stderr, "channel: %s\n", px_last_error());
    return NULL;
  }
  return ch;
}

#endif
