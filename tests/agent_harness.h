/* Test harness for the agent tests: real pxcoordd (coord_harness.h), real
 * pxagent processes on loopback, each with its own work directory, and the
 * helpers those tests share: find a node by name, wait for a job state,
 * find an agent's pxworker children, build a small job spec in C, write a
 * small Fashion-MNIST subset as IDX files, read a node-local metrics file.
 * Header-only (static functions) because every tests/test_*.c is its own
 * program.
 *
 * An agent's stderr (log level info) goes to DIR/agent-<name>.log; a
 * failing test prints it. PX_TEST_KEEP=1 keeps the directory. */
#ifndef PX_AGENT_HARNESS_H
#define PX_AGENT_HARNESS_H

#include <dirent.h>
#include <stdarg.h>

#include "../agent/metrics_schema.h"
#include "coord_harness.h"
#include "prunex/data.h"
#include "prunex/store.h"
#include "px_test_util.h"

#define PXT_AGENT PX_BINARY_DIR "/agent/pxagent"
#define PXT_WORKER PX_BINARY_DIR "/agent/pxworker"
#define PXT_FMNIST "/usr/share/datasets/fashion-mnist"

typedef struct {
  pid_t pid;
  char name[64];
  char work[400];
  char log[400];
} pxt_agent_t;

/* Spawns an executable with argv (argv[0] included, NULL-terminated),
 * stdout and stderr appended to log. */
static PXT_UNUSED pid_t pxt_spawn_logged(const char *path, const char *const *argv,
                                         const char *log) {
  posix_spawn_file_actions_t fa;
  posix_spawn_file_actions_init(&fa);
  posix_spawn_file_actions_addopen(&fa, 1, log, O_WRONLY | O_CREAT | O_APPEND, 0644);
  posix_spawn_file_actions_adddup2(&fa, 1, 2);
  pid_t pid = -1;
  int rc = posix_spawn(&pid, path, &fa, NULL, (char *const *)argv, environ);
  posix_spawn_file_actions_destroy(&fa);
  return rc == 0 ? pid : -1;
}

/* Prints a file to stderr (for a failing test). */
static PXT_UNUSED void pxt_dump_file(const char *path) {
  FILE *f = fopen(path, "r");
  if (!f) return;
  fprintf(stderr, "---- %s\n", path);
  char line[2048];
  while (fgets(line, sizeof line, f)) fputs(line, stderr);
  fclose(f);
}

/* Starts pxagent for the coordinator d as node `name` with ncpu CPU
 * workers, work directory DIR/work-<name>, log level info, and the extra
 * flags (NULL-terminated, may be NULL). 0 on success. */
static PXT_UNUSED int pxt_agent_start(pxt_agent_t *a, const pxt_coordd_t *d, const char *name,
                                      int ncpu, const char *const *extra) {
  memset(a, 0, sizeof *a);
  snprintf(a->name, sizeof a->name, "%s", name);
  snprintf(a->work, sizeof a->work, "%s/work-%s", d->dir, name);
  snprintf(a->log, sizeof a->log, "%s/agent-%s.log", d->dir, name);
  char cpu[16];
  snprintf(cpu, sizeof cpu, "%d", ncpu);
  const char *argv[32];
  int n = 0;
  argv[n++] = PXT_AGENT;
  argv[n++] = "--coordinator";
  argv[n++] = d->target;
  argv[n++] = "--name";
  argv[n++] = a->name;
  argv[n++] = "--cpu-workers";
  argv[n++] = cpu;
  argv[n++] = "--work-dir";
  argv[n++] = a->work;
  argv[n++] = "--log-level";
  argv[n++] = "info";
  /* the tests' data sets live in the test's directory (dataset.path
   * must be under a --data-root) */
  argv[n++] = "--data-root";
  argv[n++] = d->dir;
  argv[n++] = "--data-root";
  argv[n++] = "/usr/share/datasets";
  for (int i = 0; extra && extra[i] && n < 31; i++) argv[n++] = extra[i];
  argv[n] = NULL;
  a->pid = pxt_spawn_logged(PXT_AGENT, argv, a->log);
  return a->pid > 0 ? 0 : -1;
}

/* Stops the agent with sig and waits up to timeout_ms: its wait status,
 * or -1 (then it was SIGKILLed). */
static PXT_UNUSED int pxt_agent_stop(pxt_agent_t *a, int sig, int timeout_ms) {
  if (a->pid <= 0) return -1;
  kill(a->pid, sig);
  int status = pxt_wait_pid(a->pid, timeout_ms);
  if (status == -1) {
    kill(a->pid, SIGKILL);
    pxt_wait_pid(a->pid, 5000);
  }
  a->pid = -1;
  return status;
}

/* 1 when the wait status is a clean exit with code 0. */
static PXT_UNUSED int pxt_exited_ok(int status) {
  return status != -1 && WIFEXITED(status) && WEXITSTATUS(status) == 0;
}

/* Stops the n agents that run (SIGTERM, 20 s each): 0 when each exited
 * cleanly, else -1 (the log of each one that did not is dumped). */
static PXT_UNUSED int pxt_agents_stop(pxt_agent_t *a, int n) {
  int rc = 0;
  for (int i = 0; i < n; i++) {
    if (a[i].pid <= 0) continue;
    int status = pxt_agent_stop(&a[i], SIGTERM, 20000);
    if (!pxt_exited_ok(status)) {
      fprintf(stderr, "pxagent %s did not exit cleanly (wait status %d)\n", a[i].name, status);
      pxt_dump_file(a[i].log);
      rc = -1;
    }
  }
  return rc;
}

/* The node named name (from ListNodes): its id copied to id (may be NULL)
 * and its state returned, or -1 when there is no such node. */
static PXT_UNUSED int pxt_node_by_name(px_rpc_channel_t *ch, const char *name, char *id,
                                       size_t cap) {
  Prunex__V1__ListNodesRequest req = PRUNEX__V1__LIST_NODES_REQUEST__INIT;
  Prunex__V1__ListNodesResponse *r = NULL;
  if (px_rpc_list_nodes(ch, &req, 0, &r) != PX_OK) return -1;
  int s = -1;
  for (size_t i = 0; i < r->n_nodes; i++) {
    if (strcmp(r->nodes[i]->name, name) != 0) continue;
    s = (int)r->nodes[i]->state;
    if (id) snprintf(id, cap, "%s", r->nodes[i]->node_id);
    break;
  }
  px_rpc_message_free(r);
  return s;
}

/* Waits up to timeout_ms for the named node to be in state: 1 if it was. */
static PXT_UNUSED int pxt_wait_node_named(px_rpc_channel_t *ch, const char *name, int state,
                                          int timeout_ms) {
  int64_t end = pxt_now_ms() + timeout_ms;
  do {
    if (pxt_node_by_name(ch, name, NULL, 0) == state) return 1;
    pxt_sleep_ms(50);
  } while (pxt_now_ms() < end);
  return 0;
}

/* Waits for the job to reach state (or any terminal state when state is
 * 0): the state it ended in, or -1 on timeout. */
static PXT_UNUSED int pxt_wait_job(px_rpc_channel_t *ch, const char *job, int state,
                                   int timeout_ms) {
  int64_t end = pxt_now_ms() + timeout_ms;
  int s = -1;
  do {
    s = pxt_job_state(ch, job);
    if (state ? s == state
              : s == PRUNEX__V1__JOB_STATE__JOB_STATE_SUCCEEDED ||
                    s == PRUNEX__V1__JOB_STATE__JOB_STATE_FAILED ||
                    s == PRUNEX__V1__JOB_STATE__JOB_STATE_CANCELLED ||
                    s == PRUNEX__V1__JOB_STATE__JOB_STATE_TIMEOUT)
      return s;
    pxt_sleep_ms(100);
  } while (pxt_now_ms() < end);
  return -1;
}

/* The job's reason ("" when it cannot be read). */
static PXT_UNUSED void pxt_job_reason(px_rpc_channel_t *ch, const char *job, char *buf,
                                      size_t cap) {
  buf[0] = '\0';
  Prunex__V1__Job *j = NULL;
  if (px_rpc_get_job(ch, job, 0, &j) != PX_OK) return;
  snprintf(buf, cap, "%s", j->reason);
  px_rpc_message_free(j);
}

/* Live children of pid running pxworker: their pids into out (up to cap)
 * and, when ranks is given, each one's --rank. Returns the count. */
static PXT_UNUSED int pxt_worker_children(pid_t pid, pid_t *out, int *ranks, int cap) {
  DIR *d = opendir("/proc");
  if (!d) return 0;
  int n = 0;
  struct dirent *e;
  while ((e = readdir(d)) && n < cap) {
    char *end;
    long p = strtol(e->d_name, &end, 10);
    char buf[512];
    if (*end || p <= 0 || pxt_proc_read(p, "stat", buf, sizeof buf) < 0) continue;
    /* pid (comm) state ppid ...; comm may hold spaces: parse after ')' */
    char *rp = strrchr(buf, ')');
    char st;
    long ppid;
    if (!rp || sscanf(rp + 1, " %c %ld", &st, &ppid) != 2 || ppid != pid || st == 'Z') continue;
    if (!strstr(buf, "(pxworker)")) continue;
    if (ranks) {
      ranks[n] = -1;
      char cmd[4096];
      long m = pxt_proc_read(p, "cmdline", cmd, sizeof cmd);
      for (long i = 0; i < m;) {
        const char *arg = cmd + i;
        long al = (long)strlen(arg);
        if (!strcmp(arg, "--rank") && i + al + 1 < m) ranks[n] = atoi(arg + al + 1);
        i += al + 1;
      }
    }
    out[n++] = (pid_t)p;
  }
  closedir(d);
  return n;
}

/* 1 when the process is gone (or a zombie nobody reaps yet). */
static PXT_UNUSED int pxt_pid_gone(pid_t pid) {
  if (kill(pid, 0) != 0) return 1;
  char path[64], buf[512];
  snprintf(path, sizeof path, "/proc/%ld/stat", (long)pid);
  FILE *f = fopen(path, "r");
  if (!f) return 1;
  size_t len = fread(buf, 1, sizeof buf - 1, f);
  fclose(f);
  buf[len] = '\0';
  char *rp = strrchr(buf, ')');
  return rp && rp[1] == ' ' && rp[2] == 'Z';
}

/* ---- job specs ------------------------------------------------------------------ */

/* A complete spec (every section) for a small job; the caller adjusts the
 * fields it cares about and submits pxt_job_req(&j). */
typedef struct {
  Prunex__V1__JobSpec spec;
  Prunex__V1__ModelSpec model;
  Prunex__V1__DatasetSpec dataset;
  Prunex__V1__ClusterSpec cluster;
  Prunex__V1__TrainSpec train;
  Prunex__V1__PruneSpec prune;
  Prunex__V1__AdmmSpec admm;
  Prunex__V1__CommSpec comm;
  Prunex__V1__SubmitJobRequest req;
  char path[400];
} pxt_job_t;

/* resnet20 on the data set at data_dir (fashion-mnist IDX files; NULL: the
 * synthetic data set), nodes x workers CPU ranks, hsadmm with half the
 * filters kept, `iterations` outer iterations of `steps` local steps of
 * batch 8, one compute thread per rank. */
static PXT_UNUSED void pxt_job_init(pxt_job_t *j, const char *data_dir, int nodes, int workers,
                                    int iterations, int steps) {
  memset(j, 0, sizeof *j);
  j->spec = (Prunex__V1__JobSpec)PRUNEX__V1__JOB_SPEC__INIT;
  j->model = (Prunex__V1__ModelSpec)PRUNEX__V1__MODEL_SPEC__INIT;
  j->dataset = (Prunex__V1__DatasetSpec)PRUNEX__V1__DATASET_SPEC__INIT;
  j->cluster = (Prunex__V1__ClusterSpec)PRUNEX__V1__CLUSTER_SPEC__INIT;
  j->train = (Prunex__V1__TrainSpec)PRUNEX__V1__TRAIN_SPEC__INIT;
  j->prune = (Prunex__V1__PruneSpec)PRUNEX__V1__PRUNE_SPEC__INIT;
  j->admm = (Prunex__V1__AdmmSpec)PRUNEX__V1__ADMM_SPEC__INIT;
  j->comm = (Prunex__V1__CommSpec)PRUNEX__V1__COMM_SPEC__INIT;
  j->req = (Prunex__V1__SubmitJobRequest)PRUNEX__V1__SUBMIT_JOB_REQUEST__INIT;
  j->model.name = "resnet20";
  if (data_dir) {
    snprintf(j->path, sizeof j->path, "%s", data_dir);
    j->dataset.name = "fashion-mnist";
    j->dataset.path = j->path;
  } else {
    j->dataset.name = "synthetic";
  }
  j->dataset.augment = 0;
  j->cluster.nodes = nodes;
  j->cluster.workers_per_node = workers;
  j->cluster.device = "cpu";
  j->cluster.threads_per_worker = 1;
  j->train.epochs = 1;
  j->train.batch_size = 8;
  j->train.lr = 0.05;
  j->train.momentum = 0.9;
  j->train.weight_decay = 5e-4;
  j->train.local_steps = steps;
  j->train.seed = 7;
  j->train.lr_schedule = "constant";
  j->prune.filter_keep = 0.5;
  j->prune.channel_keep = 1.0;
  j->prune.shape_keep = 1.0;
  j->admm.rho1 = 1e-3;
  j->admm.rho2 = 1e-3;
  j->admm.max_iterations = iterations;
  j->admm.adaptive_rho = 1;
  j->admm.mu = 10;
  j->admm.tau = 2;
  j->admm.rho_max = 1e4;
  j->comm.timeout_ms = 30000;
  j->comm.backend = "auto";
  j->comm.topk_ratio = 0.01;
  j->spec.name = "agent-test";
  j->spec.strategy = PRUNEX__V1__STRATEGY__STRATEGY_HSADMM;
  j->spec.model = &j->model;
  j->spec.dataset = &j->dataset;
  j->spec.cluster = &j->cluster;
  j->spec.train = &j->train;
  j->spec.prune = &j->prune;
  j->spec.admm = &j->admm;
  j->spec.comm = &j->comm;
  j->req.spec = &j->spec;
  j->req.spec_yaml = "# built by the agent tests\n";
}

static PXT_UNUSED px_status_t pxt_job_submit(px_rpc_channel_t *ch, pxt_job_t *j, char *job_id,
                                             size_t cap) {
  Prunex__V1__SubmitJobResponse *r = NULL;
  px_status_t st = px_rpc_submit_job(ch, &j->req, 0, &r);
  if (st == PX_OK) snprintf(job_id, cap, "%s", r->job_id);
  px_rpc_message_free(r);
  return st;
}

/* ---- data ------------------------------------------------------------------------ */

/* A Fashion-MNIST subset (ntrain training and ntest test images) in
 * dir/fmnist; dir/fmnist is copied to out. 0 when the full data set is not
 * installed (the caller uses the synthetic one), 1 when written, -1 on
 * failure. */
static PXT_UNUSED int pxt_write_fmnist_subset(const char *dir, int ntrain, int ntest, char *out,
                                              size_t cap) {
  if (access(PXT_FMNIST, R_OK) != 0) return 0;
  snprintf(out, cap, "%s/fmnist", dir);
  if (mkdir(out, 0755) != 0 && errno != EEXIST) return -1;
  return px_test_write_fmnist_subset(out, ntrain, ntest);
}

/* A test's one-node cluster: a coordinator (d), a channel to it (ch) and
 * the agent "node0" with one device (a), registered and READY, beside a
 * Fashion-MNIST subset of 256 + 64 images in data. Returns what
 * pxt_write_fmnist_subset did (0: use the synthetic set), or -1 when a step
 * failed (said on stderr; the agent's log shown). */
static PXT_UNUSED int pxt_one_node(pxt_coordd_t *d, px_rpc_channel_t **ch, pxt_agent_t *a,
                                   char *data, size_t cap) {
  *ch = NULL;
  if (pxt_coordd_setup(d, NULL) != 0 || px_rpc_channel_create(d->target, ch) != PX_OK) return -1;
  int w = pxt_write_fmnist_subset(d->dir, 256, 64, data, cap);
  if (w < 0 || pxt_agent_start(a, d, "node0", 1, NULL) != 0) return -1;
  if (!pxt_wait_node_named(*ch, "node0", PRUNEX__V1__NODE_STATE__NODE_STATE_READY, 30000)) {
    pxt_dump_file(a->log);
    fprintf(stderr, "the agent did not register\n");
    return -1;
  }
  return w;
}

/* ---- metrics files ------------------------------------------------------------- */

/* Opens a node-local metrics file with the schema the programs use. */
static PXT_UNUSED px_store_t *pxt_metrics_open(const char *path) {
  px_store_options_t opt = {
      .schema = "agent-metrics",
      .migrations = pxa_metrics_migrations,
      .nmigrations = PXA_METRICS_NMIGRATIONS,
      .busy_timeout_ms = 5000,
      .quick_check = 1,
      .create = 0,
  };
  px_store_t *s = NULL;
  if (px_store_open(path, &opt, &s) != PX_OK) {
    fprintf(stderr, "metrics file %s: %s\n", path, px_last_error());
    return NULL;
  }
  return s;
}

/* The first column of the first row of a query with one text parameter
 * (job id), as an integer; -1 on error. */
static PXT_UNUSED int64_t pxt_query_int(px_store_t *s, const char *sql, const char *job) {
  px_store_stmt_t *st;
  if (px_store_stmt(s, sql, &st) != PX_OK) {
    fprintf(stderr, "%s: %s\n", sql, px_last_error());
    return -1;
  }
  if (job && px_store_bind_text(st, 1, job) != PX_OK) return -1;
  int64_t v = -1;
  if (px_store_step(st) == 1) v = px_store_column_int64(st, 0);
  px_store_reset(st);
  return v;
}

/* 1 when path exists as a regular file with at least min_bytes. */
static PXT_UNUSED int pxt_file_exists(const char *path, long min_bytes) {
  struct stat sb;
  return stat(path, &sb) == 0 && S_ISREG(sb.st_mode) && sb.st_size >= min_bytes;
}

/* Lines of the file at path that contain needle. */
static PXT_UNUSED int pxt_file_count(const char *path, const char *needle) {
  FILE *f = fopen(path, "r");
  if (!f) return 0;
  char line[4096];
  int n = 0;
  while (fgets(line, sizeof line, f)) n += strstr(line, needle) != NULL;
  fclose(f);
  return n;
}

/* 1 when the file at path contains needle. */
static PXT_UNUSED int pxt_file_contains(const char *path, const char *needle) {
  FILE *f = fopen(path, "r");
  if (!f) return 0;
  char buf[4096];
  size_t keep = 0;
  int found = 0;
  size_t nl = strlen(needle);
  for (;;) {
    size_t r = fread(buf + keep, 1, sizeof buf - 1 - keep, f);
    if (r == 0) break;
    buf[keep + r] = '\0';
    if (memmem(buf, keep + r, needle, nl)) {
      found = 1;
      break;
    }
    size_t tot = keep + r;
    keep = nl < tot ? nl : tot;
    memmove(buf, buf + tot - keep, keep);
  }
  fclose(f);
  return found;
}

#endif
