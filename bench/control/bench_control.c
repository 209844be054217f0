/* px_bench_control: control-plane load on one running pxcoordd. Simulated
 * agents register, then heartbeat on a fixed schedule (each node once per
 * period, the nodes' phases spread evenly over the period, so the
 * coordinator sees a steady AGENTS x RATE calls per second), while the
 * simulated rank 0 of a job placed on a few of those nodes reports
 * iterations (ReportIteration with per-layer residuals, answered with the
 * H-SADMM decision). Every call goes through libpxcore's RPC client, as
 * pxagent's and pxworker's do. It measures each call's latency and the
 * coordinator's CPU time (/proc/PID/stat) over the measured window.
 *
 *   px_bench_control --target HOST:PORT [--coord-pid PID] [--agents N]
 *       [--rate HZ] [--duration S] [--warmup S] [--procs P] [--threads T]
 *       [--devices D] [--job-nodes M] [--report-hz R] [--layers L]
 *
 * The clients run in P forked processes of T threads each: gRPC shares one
 * connection among all channels of a process to one address, so P is the
 * number of connections the coordinator serves (real agents have one each).
 * A call that starts late (its thread was still busy, or the machine did
 * not run it) is still timed from its own start; the lag is reported
 * separately so that a client that could not keep up is visible.
 *
 * With --token-secret S the coordinator has TLS and tokens (the
 * CA comes from PRUNEX_CA): node g authenticates with the token S-node-G
 * (its own channel, as each agent has its own credential; channels with
 * their own credentials do not share a connection, so the coordinator serves
 * one TLS connection per simulated agent, as with real agents), the job is
 * submitted with S-admin, and rank 0 reports with the rank secret read from
 * its node's assignment stream, as pxworker does. run.sh makes the tokens
 * file to match.
 *
 * Prints rows, then `RESULT <name> <value> [unit]` lines, the last one
 * `RESULT heartbeat_p99_ms X ms`. Exit status 0 when every call succeeded,
 * 1 when some failed (the figures are still printed), 2 for bad usage. */
#include <errno.h>
#include <getopt.h>
#include <math.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "prunex/px.h"
#include "prunex/rpc.h"

#define ID_CAP 48
#define MAX_PROCS 64
#define MAX_THREADS 64
#define MAX_LAYERS 256
#define NOT_SENT (-1.0f)
#define FAILED (-2.0f)

typedef struct {
  const char *target;
  int coord_pid;
  int agents;
  double rate;     /* heartbeats per node per second */
  double duration; /* measured seconds */
  double warmup;   /* seconds before the measured window */
  int procs, threads, devices;
  int job_nodes;
  double report_hz;
  int layers;
  const char *secret; /* --token-secret: NULL for a coordinator without tokens */
} cfg_t;

/* Shared by the launcher and the forked clients (MAP_SHARED | MAP_ANON);
 * each slot has one writer. */
typedef struct {
  int64_t start_ns; /* CLOCK_MONOTONIC of schedule time 0 */
  char job_id[64];
  int beats;   /* K: heartbeat slots per agent */
  int reports; /* report slots */
  int hb_errors, hb_unknown, hb_cancels, reg_errors, rep_errors, rep_stops;
  int err_taken;
  char first_error[512];
} shared_t;

static cfg_t cfg = {
    .target = NULL,
    .coord_pid = 0,
    .agents = 1000,
    .rate = 1.0,
    .duration = 20.0,
    .warmup = 2.0,
    .procs = 4,
    .threads = 4,
    .devices = 1,
    .job_nodes = 4,
    .report_hz = 2.0,
    .layers = 20,
};
static shared_t *sh;
static char (*node_ids)[ID_CAP]; /* [agents] */
static uint8_t *in_job;          /* [agents] */
static float *reg_lat;           /* [agents] ms */
static float *hb_lat, *hb_lag;   /* [agents][beats] ms */
static float *rep_lat, *rep_lag; /* [reports] ms */
static px_rpc_channel_t **node_ch; /* [agents], token mode: each node's own channel */

/* A channel with token (NULL: none; the CA, if any, from PRUNEX_CA). */
static px_rpc_channel_t *open_channel(const char *token) {
  px_rpc_channel_options_t o = {NULL, token ? token : ""};
  px_rpc_channel_t *ch = NULL;
  if (px_rpc_channel_create_ex(cfg.target, &o, &ch) != PX_OK) return NULL;
  return ch;
}

static void node_token(int g, char *buf, size_t cap) {
  snprintf(buf, cap, "%s-node-%05d", cfg.secret, g);
}

static int64_t now_ns(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

static void sleep_until_ns(int64_t t) {
  struct timespec ts = {(time_t)(t / 1000000000), (long)(t % 1000000000)};
  while (clock_nanosleep(CLOCK_MONOTONIC, TIMER_ABSTIME, &ts, NULL) == EINTR) {
  }
}

static void count(int *counter) { __atomic_fetch_add(counter, 1, __ATOMIC_RELAXED); }

/* Keeps the first failure's message for the report. */
static void note_error(const char *what) {
  int expected = 0;
  if (__atomic_compare_exchange_n(&sh->err_taken, &expected, 1, 0, __ATOMIC_ACQ_REL,
                                  __ATOMIC_RELAXED))
    snprintf(sh->first_error, sizeof sh->first_error, "%s: %s", what, px_last_error());
}

/* ---- heartbeating agents (one process, cfg.threads threads) ------------------------ */

typedef struct {
  int proc, thread;
  px_rpc_channel_t *ch;
  Prunex__V1__Device devices[16];
  Prunex__V1__Device *dev_ptrs[16];
} hb_thread_t;

/* The healthy CPU devices every simulated node reports. */
static void init_devices(hb_thread_t *t) {
  for (int d = 0; d < cfg.devices; d++) {
    t->devices[d] = (Prunex__V1__Device)PRUNEX__V1__DEVICE__INIT;
    t->devices[d].index = d;
    t->devices[d].kind = PRUNEX__V1__DEVICE_KIND__DEVICE_KIND_CPU;
    t->devices[d].name = "cpu";
    t->devices[d].healthy = 1;
    t->dev_ptrs[d] = &t->devices[d];
  }
}

/* Agent g belongs to process g % P and, within it, to thread (g / P) % T:
 * every thread's agents are spread over the whole period. */
static int agent_proc(int g) { return g % cfg.procs; }
static int agent_thread(int g) { return (g / cfg.procs) % cfg.threads; }
static px_rpc_channel_t *chan(hb_thread_t *t, int g) { return node_ch ? node_ch[g] : t->ch; }

static void *register_main(void *arg) {
  hb_thread_t *t = arg;
  char name[64], addr[96];
  char *addrs[1] = {addr};
  for (int g = 0; g < cfg.agents; g++) {
    if (agent_proc(g) != t->proc || agent_thread(g) != t->thread) continue;
    snprintf(name, sizeof name, "sim-node-%05d", g);
    snprintf(addr, sizeof addr, "tcp://10.%d.%d.%d:9000", (g >> 16) & 255, (g >> 8) & 255, g & 255);
    Prunex__V1__RegisterNodeRequest req = PRUNEX__V1__REGISTER_NODE_REQUEST__INIT;
    req.name = name;
    req.hostname = name;
    req.n_devices = (size_t)cfg.devices;
    req.devices = t->dev_ptrs;
    req.n_data_plane_addresses = 1;
    req.data_plane_addresses = addrs;
    req.agent_version = "bench";
    req.pid = getpid();
    Prunex__V1__RegisterNodeResponse *resp = NULL;
    int64_t t0 = now_ns();
    px_status_t st = px_rpc_register_node(chan(t, g), &req, 30000, &resp);
    reg_lat[g] = (float)((now_ns() - t0) / 1e6);
    if (st != PX_OK) {
      count(&sh->reg_errors);
      note_error("RegisterNode");
      reg_lat[g] = FAILED;
    } else {
      snprintf(node_ids[g], ID_CAP, "%s", resp->node_id);
    }
    px_rpc_message_free(resp);
  }
  return NULL;
}

static void *heartbeat_main(void *arg) {
  hb_thread_t *t = arg;
  int *mine = malloc((size_t)cfg.agents * sizeof *mine), m = 0;
  if (!mine) return NULL;
  for (int g = 0; g < cfg.agents; g++)
    if (agent_proc(g) == t->proc && agent_thread(g) == t->thread && node_ids[g][0]) mine[m++] = g;
  const double period_ns = 1e9 / cfg.rate;
  const int64_t end = sh->start_ns + (int64_t)((cfg.warmup + cfg.duration) * 1e9);
  char *running[1] = {sh->job_id};
  for (int64_t k = 0; m > 0; k++) {
    int g = mine[k % m];
    int beat = (int)(k / m);
    int64_t when = sh->start_ns + (int64_t)(g * period_ns / cfg.agents + beat * period_ns);
    if (when >= end || beat >= sh->beats) break;
    sleep_until_ns(when);
    Prunex__V1__HeartbeatRequest req = PRUNEX__V1__HEARTBEAT_REQUEST__INIT;
    req.node_id = node_ids[g];
    req.n_devices = (size_t)cfg.devices;
    req.devices = t->dev_ptrs;
    if (in_job[g]) {
      req.n_running_job_ids = 1;
      req.running_job_ids = running;
    }
    Prunex__V1__HeartbeatResponse *resp = NULL;
    int64_t t0 = now_ns();
    px_status_t st = px_rpc_heartbeat(chan(t, g), &req, 5000, &resp);
    int64_t t1 = now_ns();
    size_t slot = (size_t)g * (size_t)sh->beats + (size_t)beat;
    hb_lag[slot] = (float)((t0 - when) / 1e6);
    if (st != PX_OK) {
      count(&sh->hb_errors);
      note_error("Heartbeat");
      hb_lat[slot] = FAILED;
    } else {
      hb_lat[slot] = (float)((t1 - t0) / 1e6);
      if (!resp->known) count(&sh->hb_unknown);
      if (resp->n_cancel_job_ids) count(&sh->hb_cancels);
    }
    px_rpc_message_free(resp);
  }
  free(mine);
  return NULL;
}

/* Runs fn on cfg.threads threads of this process, sharing one channel. */
static int run_threads(px_rpc_channel_t *ch, int proc, void *(*fn)(void *)) {
  pthread_t th[MAX_THREADS];
  hb_thread_t ts[MAX_THREADS];
  for (int i = 0; i < cfg.threads; i++) {
    ts[i] = (hb_thread_t){.proc = proc, .thread = i, .ch = ch};
    init_devices(&ts[i]);
    if (pthread_create(&th[i], NULL, fn, &ts[i]) != 0) return -1;
  }
  for (int i = 0; i < cfg.threads; i++) pthread_join(th[i], NULL);
  return 0;
}

/* A client process: registers its agents, says so on ready_fd, waits for
 * go_fd to close, heartbeats until the end of the window. */
static int agent_proc_main(int proc, int ready_fd, int go_fd) {
  px_rpc_channel_t *ch = NULL;
  char c = 'r';
  if (cfg.secret) {
    node_ch = calloc((size_t)cfg.agents, sizeof *node_ch);
    for (int g = 0; node_ch && g < cfg.agents; g++) {
      if (agent_proc(g) != proc) continue;
      char tok[256];
      node_token(g, tok, sizeof tok);
      if (!(node_ch[g] = open_channel(tok))) c = 'e';
    }
    if (!node_ch) c = 'e';
  }
  if (c == 'e' || !(ch = open_channel(NULL)) || px_rpc_channel_wait_ready(ch, 15000) != PX_OK) {
    note_error("connect");
    c = 'e';
  } else if (run_threads(ch, proc, register_main) != 0) {
    c = 'e';
  }
  if (write(ready_fd, &c, 1) != 1 || c == 'e') {
    px_rpc_channel_destroy(ch);
    return 1;
  }
  while (read(go_fd, &c, 1) < 0 && errno == EINTR) {
  }
  int rc = sh->start_ns > 0 ? run_threads(ch, proc, heartbeat_main) : -1;
  px_rpc_channel_destroy(ch);
  for (int g = 0; node_ch && g < cfg.agents; g++) px_rpc_channel_destroy(node_ch[g]);
  free(node_ch);
  return rc == 0 ? 0 : 1;
}

/* ---- the job's rank 0 ------------------------------------------------------------- */

/* Submits a job of cfg.job_nodes nodes x 1 worker and waits until it is
 * placed; marks its nodes in in_job. 0 or -1. */
static int submit_job(px_rpc_channel_t *ch) {
  Prunex__V1__ModelSpec model = PRUNEX__V1__MODEL_SPEC__INIT;
  Prunex__V1__DatasetSpec data = PRUNEX__V1__DATASET_SPEC__INIT;
  Prunex__V1__ClusterSpec cluster = PRUNEX__V1__CLUSTER_SPEC__INIT;
  Prunex__V1__AdmmSpec admm = PRUNEX__V1__ADMM_SPEC__INIT;
  Prunex__V1__JobSpec spec = PRUNEX__V1__JOB_SPEC__INIT;
  Prunex__V1__SubmitJobRequest req = PRUNEX__V1__SUBMIT_JOB_REQUEST__INIT;
  model.name = "resnet20";
  data.name = "fashion-mnist";
  cluster.nodes = cfg.job_nodes;
  cluster.workers_per_node = 1;
  cluster.device = "cpu";
  admm.rho1 = 1.0;
  admm.rho2 = 1.0;
  admm.adaptive_rho = 1;
  admm.max_iterations = 1000000; /* never stops the bench */
  spec.name = "bench-control";
  spec.model = &model;
  spec.dataset = &data;
  spec.cluster = &cluster;
  spec.admm = &admm;
  spec.strategy = PRUNEX__V1__STRATEGY__STRATEGY_HSADMM;
  req.spec = &spec;
  req.spec_yaml = "name: bench-control\n";
  Prunex__V1__SubmitJobResponse *sub = NULL;
  if (px_rpc_submit_job(ch, &req, 10000, &sub) != PX_OK) {
    note_error("SubmitJob");
    return -1;
  }
  snprintf(sh->job_id, sizeof sh->job_id, "%s", sub->job_id);
  px_rpc_message_free(sub);
  int64_t end = now_ns() + (int64_t)30e9;
  while (now_ns() < end) {
    Prunex__V1__Job *job = NULL;
    if (px_rpc_get_job(ch, sh->job_id, 10000, &job) != PX_OK) {
      note_error("GetJob");
      return -1;
    }
    int placed = job->state == PRUNEX__V1__JOB_STATE__JOB_STATE_SCHEDULED;
    for (size_t i = 0; placed && i < job->n_node_ids; i++)
      for (int g = 0; g < cfg.agents; g++)
        if (!strcmp(node_ids[g], job->node_ids[i])) in_job[g] = 1;
    px_rpc_message_free(job);
    if (placed) return 0;
    sleep_until_ns(now_ns() + 20000000);
  }
  px_set_error(PX_ERR_TIMEOUT, "job %s was not placed in 30 s", sh->job_id);
  note_error("SubmitJob");
  return -1;
}

static px_rpc_stream_t *rank0_stream;     /* token mode: kept open, see rank0_secret */
static px_rpc_channel_t *rank0_stream_ch;

/* Token mode: the secret of rank 0, from the assignment stream of the node
 * that holds it (what pxagent receives and hands to pxworker), into out.
 * 0 or -1. */
static int rank0_secret(px_rpc_channel_t *user, char *out, size_t cap) {
  Prunex__V1__Job *job = NULL;
  if (px_rpc_get_job(user, sh->job_id, 10000, &job) != PX_OK || job->n_node_ids == 0) {
    px_rpc_message_free(job);
    return -1;
  }
  int g0 = -1;
  for (int g = 0; g < cfg.agents && g0 < 0; g++)
    if (!strcmp(node_ids[g], job->node_ids[0])) g0 = g;
  px_rpc_message_free(job);
  if (g0 < 0) return -1;
  char tok[256];
  node_token(g0, tok, sizeof tok);
  px_rpc_channel_t *nch = open_channel(tok);
  px_rpc_stream_t *s = NULL;
  Prunex__V1__Assignment *as = NULL;
  int rc = -1;
  if (nch && px_rpc_watch_assignments(nch, node_ids[g0], &s) == PX_OK &&
      px_rpc_read_assignment(s, 10000, &as) == PX_OK && as) {
    for (size_t i = 0; i < as->n_ranks; i++)
      if (as->ranks[i]->rank == 0) {
        snprintf(out, cap, "%s", as->ranks[i]->secret);
        rc = 0;
      }
  }
  px_rpc_message_free(as);
  /* The stream stays open for the run, as its agent's would: the
   * coordinator takes a node whose assignment stream closes (and stays
   * closed) for lost, and fails its job. The process exit closes it. */
  rank0_stream = s;
  rank0_stream_ch = nch;
  return rc;
}

static int reporter_main(int ready_fd, int go_fd, int submit_fd) {
  px_rpc_channel_t *ch = NULL;
  char c;
  while (read(submit_fd, &c, 1) < 0 && errno == EINTR) {
  }
  c = 'r';
  char admin[256];
  snprintf(admin, sizeof admin, "%s-admin", cfg.secret ? cfg.secret : "");
  if (!(ch = open_channel(cfg.secret ? admin : NULL)) || submit_job(ch) != 0) c = 'e';
  if (c != 'e' && cfg.secret) {
    /* reports carry the rank's secret, not a user token */
    char secret[128];
    if (rank0_secret(ch, secret, sizeof secret) != 0) {
      note_error("rank 0 secret");
      c = 'e';
    } else {
      px_rpc_channel_destroy(ch);
      if (!(ch = open_channel(secret))) c = 'e';
    }
  }
  if (write(ready_fd, &c, 1) != 1 || c == 'e') {
    px_rpc_channel_destroy(ch);
    return 1;
  }
  while (read(go_fd, &c, 1) < 0 && errno == EINTR) {
  }
  if (sh->start_ns <= 0) {
    px_rpc_channel_destroy(ch);
    return 1;
  }
  Prunex__V1__LayerMetrics lm[MAX_LAYERS], *lp[MAX_LAYERS];
  char names[MAX_LAYERS][32];
  Prunex__V1__PhaseTimes phases = PRUNEX__V1__PHASE_TIMES__INIT;
  phases.local_s = 1.2;
  phases.intra_s = 0.05;
  phases.projection_s = 0.01;
  phases.inter_s = 0.08;
  phases.broadcast_s = 0.02;
  phases.control_s = 0.002;
  const int64_t end = sh->start_ns + (int64_t)((cfg.warmup + cfg.duration) * 1e9);
  for (int k = 0; k < sh->reports; k++) {
    int64_t when = sh->start_ns + (int64_t)(k * 1e9 / cfg.report_hz);
    if (when >= end) break;
    sleep_until_ns(when);
    double decay = exp(-0.05 * k);
    for (int l = 0; l < cfg.layers; l++) {
      lm[l] = (Prunex__V1__LayerMetrics)PRUNEX__V1__LAYER_METRICS__INIT;
      snprintf(names[l], sizeof names[l], "layer%d.conv.weight", l);
      lm[l].layer = l;
      lm[l].name = names[l];
      lm[l].r_intra = 0.5 * decay * (1 + 0.1 * l);
      lm[l].s_intra = 0.3 * decay;
      lm[l].r_inter = 0.8 * decay * (1 + 0.05 * l);
      lm[l].s_inter = 0.2 * decay;
      lm[l].rho1 = 1.0;
      lm[l].rho2 = 1.0;
      lm[l].density = 0.5;
      lm[l].theta_norm = 10.0 + l;
      lm[l].zi_norm = 9.5 + l;
      lm[l].z_norm = 9.0 + l;
      lm[l].u_norm = 0.1;
      lm[l].v_norm = 0.1;
      lm[l].numel = 9216;
      lp[l] = &lm[l];
    }
    Prunex__V1__IterationReport rep = PRUNEX__V1__ITERATION_REPORT__INIT;
    rep.job_id = sh->job_id;
    rep.rank = 0;
    rep.iteration = k;
    rep.loss = 2.3 * decay + 0.2;
    rep.train_accuracy = 0.9 - 0.8 * decay;
    rep.test_accuracy = -1;
    rep.density = 0.5;
    rep.mask_drift = k < 10 ? 100 - 10 * k : 0;
    rep.bytes_intra = 1u << 24;
    rep.bytes_inter = 1u << 22;
    rep.bytes_inter_dense = 1u << 23;
    rep.n_layers = (size_t)cfg.layers;
    rep.layers = lp;
    rep.phases = &phases;
    rep.epoch = k * 0.1;
    Prunex__V1__ControlDecision *dec = NULL;
    int64_t t0 = now_ns();
    px_status_t st = px_rpc_report_iteration(ch, &rep, 5000, &dec);
    int64_t t1 = now_ns();
    rep_lag[k] = (float)((t0 - when) / 1e6);
    if (st != PX_OK) {
      count(&sh->rep_errors);
      note_error("ReportIteration");
      rep_lat[k] = FAILED;
    } else {
      rep_lat[k] = (float)((t1 - t0) / 1e6);
      if (dec->stop || dec->cancelled) count(&sh->rep_stops);
    }
    px_rpc_message_free(dec);
  }
  px_rpc_channel_destroy(ch);
  return 0;
}

/* ---- statistics ------------------------------------------------------------------- */

static int cmp_float(const void *a, const void *b) {
  float x = *(const float *)a, y = *(const float *)b;
  return x < y ? -1 : x > y;
}

/* Nearest-rank percentile of sorted v[n]. */
static double pct(const float *v, size_t n, double p) {
  if (n == 0) return NAN;
  size_t i = (size_t)ceil(p / 100.0 * (double)n);
  return v[i ? i - 1 : 0];
}

typedef struct {
  size_t n;
  double p50, p90, p99, p999, max, mean;
} stats_t;

/* Sorts v[n] in place (values < 0 are dropped) and summarises it. */
static stats_t summarise(float *v, size_t n) {
  size_t k = 0;
  double sum = 0;
  for (size_t i = 0; i < n; i++)
    if (v[i] >= 0) {
      v[k++] = v[i];
      sum += v[i];
    }
  qsort(v, k, sizeof *v, cmp_float);
  stats_t s = {k, pct(v, k, 50), pct(v, k, 90), pct(v, k, 99), pct(v, k, 99.9),
               k ? v[k - 1] : NAN, k ? sum / (double)k : NAN};
  return s;
}

static void print_row(const char *what, const stats_t *s, int errors, double window_s) {
  printf("%-16s %7zu %6d %8.1f %8.3f %8.3f %8.3f %8.3f %8.3f %8.3f\n", what, s->n, errors,
         (double)s->n / window_s, s->p50, s->p90, s->p99, s->p999, s->max, s->mean);
}

/* utime + stime of pid in seconds, or -1. */
static double proc_cpu_s(int pid) {
  char path[64], buf[1024];
  snprintf(path, sizeof path, "/proc/%d/stat", pid);
  FILE *f = fopen(path, "r");
  if (!f) return -1;
  size_t n = fread(buf, 1, sizeof buf - 1, f);
  fclose(f);
  buf[n] = '\0';
  const char *p = strrchr(buf, ')'); /* the command name may hold spaces */
  unsigned long long ut, st;
  /* After ")": state(3) ppid pgrp session tty tpgid flags minflt cminflt
   * majflt cmajflt utime(14) stime(15). */
  if (!p || sscanf(p + 2, "%*c %*d %*d %*d %*d %*d %*u %*u %*u %*u %*u %llu %llu", &ut, &st) != 2)
    return -1;
  return (double)(ut + st) / (double)sysconf(_SC_CLK_TCK);
}

/* VmRSS of pid in MiB, or -1. */
static double proc_rss_mib(int pid) {
  char path[64], line[256];
  snprintf(path, sizeof path, "/proc/%d/status", pid);
  FILE *f = fopen(path, "r");
  if (!f) return -1;
  double kib = -1;
  while (fgets(line, sizeof line, f))
    if (sscanf(line, "VmRSS: %lf", &kib) == 1) break;
  fclose(f);
  return kib < 0 ? -1 : kib / 1024.0;
}

/* ---- launcher --------------------------------------------------------------------- */

static int usage(const char *msg) {
  if (msg) fprintf(stderr, "px_bench_control: %s\n", msg);
  fprintf(stderr,
          "usage: px_bench_control --target HOST:PORT [--coord-pid PID] [--agents N]\n"
          "         [--rate HZ] [--duration S] [--warmup S] [--procs P] [--threads T]\n"
          "         [--devices D] [--job-nodes M] [--report-hz R] [--layers L]\n"
          "         [--token-secret S]\n");
  return 2;
}

static int parse(int argc, char **argv) {
  static const struct option opts[] = {
      {"target", required_argument, NULL, 't'},   {"coord-pid", required_argument, NULL, 'p'},
      {"agents", required_argument, NULL, 'n'},   {"rate", required_argument, NULL, 'r'},
      {"duration", required_argument, NULL, 'd'}, {"warmup", required_argument, NULL, 'w'},
      {"procs", required_argument, NULL, 'P'},    {"threads", required_argument, NULL, 'T'},
      {"devices", required_argument, NULL, 'D'},  {"job-nodes", required_argument, NULL, 'M'},
      {"report-hz", required_argument, NULL, 'R'}, {"layers", required_argument, NULL, 'L'},
      {"token-secret", required_argument, NULL, 'S'},
      {"help", no_argument, NULL, 'h'},           {NULL, 0, NULL, 0}};
  int o;
  while ((o = getopt_long(argc, argv, "", opts, NULL)) != -1) {
    switch (o) {
      case 't': cfg.target = optarg; break;
      case 'p': cfg.coord_pid = atoi(optarg); break;
      case 'n': cfg.agents = atoi(optarg); break;
      case 'r': cfg.rate = atof(optarg); break;
      case 'd': cfg.duration = atof(optarg); break;
      case 'w': cfg.warmup = atof(optarg); break;
      case 'P': cfg.procs = atoi(optarg); break;
      case 'T': cfg.threads = atoi(optarg); break;
      case 'D': cfg.devices = atoi(optarg); break;
      case 'M': cfg.job_nodes = atoi(optarg); break;
      case 'R': cfg.report_hz = atof(optarg); break;
      case 'L': cfg.layers = atoi(optarg); break;
      case 'S': cfg.secret = optarg; break;
      case 'h': usage(NULL); exit(0);
      default: return usage(NULL);
    }
  }
  if (optind != argc) return usage("unexpected argument");
  if (!cfg.target) return usage("--target is required");
  if (cfg.agents < 1 || cfg.agents > 1000000) return usage("--agents: 1..1000000");
  if (!(cfg.rate > 0 && cfg.rate <= 1000)) return usage("--rate: (0, 1000] Hz");
  if (!(cfg.duration > 0 && cfg.duration <= 3600)) return usage("--duration: (0, 3600] s");
  if (!(cfg.warmup >= 0 && cfg.warmup <= 600)) return usage("--warmup: [0, 600] s");
  if (cfg.procs < 1 || cfg.procs > MAX_PROCS) return usage("--procs: 1..64");
  if (cfg.threads < 1 || cfg.threads > MAX_THREADS) return usage("--threads: 1..64");
  if (cfg.devices < 1 || cfg.devices > 16) return usage("--devices: 1..16");
  if (cfg.job_nodes < 0 || cfg.job_nodes > cfg.agents) return usage("--job-nodes: 0..agents");
  if (!(cfg.report_hz >= 0 && cfg.report_hz <= 1000)) return usage("--report-hz: [0, 1000]");
  if (cfg.layers < 1 || cfg.layers > MAX_LAYERS) return usage("--layers: 1..256");
  if (cfg.job_nodes == 0) cfg.report_hz = 0;
  return 0;
}

static void *shared_alloc(size_t bytes) {
  void *p = mmap(NULL, bytes ? bytes : 1, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1,
                 0);
  return p == MAP_FAILED ? NULL : p;
}

/* Reads one status byte from each of n clients; -1 when one reports a
 * failure or they take longer than 60 s + 20 ms per agent together. */
static int await_ready(int fd, int n) {
  int64_t end = now_ns() + (int64_t)(60e9 + 20e6 * cfg.agents);
  for (int i = 0; i < n; i++) {
    char c;
    ssize_t r = -1;
    for (;;) {
      int left = (int)((end - now_ns()) / 1000000);
      struct pollfd p = {fd, POLLIN, 0};
      if (left <= 0) return -1;
      int pr = poll(&p, 1, left);
      if (pr < 0 && errno == EINTR) continue;
      if (pr <= 0) return -1;
      r = read(fd, &c, 1);
      if (r < 0 && errno == EINTR) continue;
      break;
    }
    if (r != 1 || c != 'r') return -1;
  }
  return 0;
}

int main(int argc, char **argv) {
  int prc = parse(argc, argv);
  if (prc != 0) return prc;
  const double span = cfg.warmup + cfg.duration;
  const int beats = (int)ceil(span * cfg.rate) + 1;
  const int reports = cfg.report_hz > 0 ? (int)ceil(span * cfg.report_hz) + 1 : 0;
  const size_t N = (size_t)cfg.agents, NB = N * (size_t)beats;
  sh = shared_alloc(sizeof *sh);
  node_ids = shared_alloc(N * ID_CAP);
  in_job = shared_alloc(N);
  reg_lat = shared_alloc(N * sizeof(float));
  hb_lat = shared_alloc(NB * sizeof(float));
  hb_lag = shared_alloc(NB * sizeof(float));
  rep_lat = shared_alloc((size_t)(reports + 1) * sizeof(float));
  rep_lag = shared_alloc((size_t)(reports + 1) * sizeof(float));
  if (!sh || !node_ids || !in_job || !reg_lat || !hb_lat || !hb_lag || !rep_lat || !rep_lag) {
    fprintf(stderr, "px_bench_control: out of memory\n");
    return 1;
  }
  sh->beats = beats;
  sh->reports = reports;
  for (size_t i = 0; i < NB; i++) hb_lat[i] = hb_lag[i] = NOT_SENT;
  for (int i = 0; i <= reports; i++) rep_lat[i] = rep_lag[i] = NOT_SENT;

  /* Pipes: clients -> launcher "registered" bytes; launcher -> reporter
   * "submit now"; launcher closes go to start everybody at once. No gRPC in
   * this process before the forks: gRPC does not survive fork. */
  int ready[2], go[2], submit[2];
  if (pipe(ready) != 0 || pipe(go) != 0 || pipe(submit) != 0) {
    perror("pipe");
    return 1;
  }
  int nclients = cfg.procs + (cfg.report_hz > 0 ? 1 : 0);
  pid_t pids[MAX_PROCS + 1];
  fflush(stdout);
  int64_t reg_t0 = now_ns();
  for (int i = 0; i < nclients; i++) {
    pids[i] = fork();
    if (pids[i] < 0) {
      perror("fork");
      return 1;
    }
    if (pids[i] == 0) {
      close(ready[0]);
      close(go[1]);
      close(submit[1]);
      int rc = i < cfg.procs ? agent_proc_main(i, ready[1], go[0])
                             : reporter_main(ready[1], go[0], submit[0]);
      exit(rc); /* not _exit: under the sanitizers the client is leak-checked too */
    }
  }
  close(ready[1]);
  close(go[0]);
  close(submit[0]);
  int ok = await_ready(ready[0], cfg.procs) == 0;
  double reg_s = (double)(now_ns() - reg_t0) / 1e9;
  if (ok && cfg.report_hz > 0) {
    char c = 's';
    ok = write(submit[1], &c, 1) == 1 && await_ready(ready[0], 1) == 0;
  }
  close(submit[1]);
  /* Start a little later so that every client is waiting on go. */
  if (ok) sh->start_ns = now_ns() + 200000000;
  __atomic_thread_fence(__ATOMIC_SEQ_CST);
  close(go[1]);
  double cpu0 = -1, cpu1 = -1, rss = -1, window = cfg.duration;
  if (ok) {
    sleep_until_ns(sh->start_ns + (int64_t)(cfg.warmup * 1e9));
    int64_t w0 = now_ns();
    if (cfg.coord_pid > 0) cpu0 = proc_cpu_s(cfg.coord_pid);
    sleep_until_ns(sh->start_ns + (int64_t)(span * 1e9));
    if (cfg.coord_pid > 0) {
      cpu1 = proc_cpu_s(cfg.coord_pid);
      rss = proc_rss_mib(cfg.coord_pid);
    }
    window = (double)(now_ns() - w0) / 1e9;
  }
  int failed_clients = 0;
  for (int i = 0; !ok && i < nclients; i++) kill(pids[i], SIGTERM);
  for (int i = 0; i < nclients; i++) {
    int status;
    while (waitpid(pids[i], &status, 0) < 0 && errno == EINTR) {
    }
    if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) failed_clients++;
  }
  struct rusage ru;
  getrusage(RUSAGE_CHILDREN, &ru);
  double client_cpu = ru.ru_utime.tv_sec + ru.ru_utime.tv_usec * 1e-6 + ru.ru_stime.tv_sec +
                      ru.ru_stime.tv_usec * 1e-6;
  if (!ok) {
    fprintf(stderr, "px_bench_control: set-up failed: %s\n",
            sh->first_error[0] ? sh->first_error : "a client process died");
    return 1;
  }

  /* Heartbeats scheduled inside the measured window only. */
  float *lat = malloc((NB ? NB : 1) * sizeof *lat), *lag = malloc((NB ? NB : 1) * sizeof *lag);
  if (!lat || !lag) return 1;
  size_t n = 0;
  const double period_s = 1.0 / cfg.rate;
  for (size_t g = 0; g < N; g++)
    for (int b = 0; b < beats; b++) {
      double when = (double)g * period_s / (double)N + b * period_s;
      if (when < cfg.warmup || when >= span) continue;
      size_t slot = g * (size_t)beats + (size_t)b;
      if (hb_lat[slot] == NOT_SENT) continue;
      lat[n] = hb_lat[slot];
      lag[n] = hb_lag[slot];
      n++;
    }
  size_t nreg = 0;
  float *regv = malloc(N * sizeof *regv);
  if (!regv) return 1;
  for (size_t g = 0; g < N; g++) regv[nreg++] = reg_lat[g];
  size_t nrep = 0;
  float *repv = malloc((size_t)(reports + 1) * sizeof *repv);
  float *replag = malloc((size_t)(reports + 1) * sizeof *replag);
  if (!repv || !replag) return 1;
  for (int k = 0; k < reports; k++) {
    double when = k / cfg.report_hz;
    if (when < cfg.warmup || when >= span || rep_lat[k] == NOT_SENT) continue;
    repv[nrep] = rep_lat[k];
    replag[nrep] = rep_lag[k];
    nrep++;
  }
  stats_t hs = summarise(lat, n), ls = summarise(lag, n);
  stats_t rs = summarise(regv, nreg), ps = summarise(repv, nrep), pl = summarise(replag, nrep);

  double load[3] = {0, 0, 0};
  getloadavg(load, 3);
  printf("control plane: %d agents x %.3g Hz heartbeats (%d device%s each), %.3g s measured after "
         "%.3g s warm-up\n",
         cfg.agents, cfg.rate, cfg.devices, cfg.devices == 1 ? "" : "s", cfg.duration, cfg.warmup);
  if (cfg.secret)
    printf("clients: %d processes x %d threads, one TLS connection per agent (each its own "
           "token)", cfg.procs, cfg.threads);
  else
    printf("clients: %d processes (= connections) x %d threads", cfg.procs, cfg.threads);
  if (cfg.report_hz > 0)
    printf("; rank 0 of %s (%d nodes) reports %.3g iterations/s with %d layers", sh->job_id,
           cfg.job_nodes, cfg.report_hz, cfg.layers);
  printf("\nmachine: %ld cores, load average %.2f %.2f %.2f (the clients share it)\n",
         sysconf(_SC_NPROCESSORS_ONLN), load[0], load[1], load[2]);
  printf("%-16s %7s %6s %8s %8s %8s %8s %8s %8s %8s\n", "call", "count", "errors", "per_s",
         "p50_ms", "p90_ms", "p99_ms", "p99.9_ms", "max_ms", "mean_ms");
  print_row("RegisterNode", &rs, sh->reg_errors, reg_s);
  print_row("Heartbeat", &hs, sh->hb_errors, window);
  if (cfg.report_hz > 0) print_row("ReportIteration", &ps, sh->rep_errors, window);
  printf("client lag (call start - schedule): heartbeat p99 %.3f ms, max %.3f ms", ls.p99, ls.max);
  if (cfg.report_hz > 0) printf("; report p99 %.3f ms", pl.p99);
  printf("\n");
  printf("registration: %d nodes in %.2f s\n", cfg.agents, reg_s);
  if (sh->hb_unknown || sh->hb_cancels || sh->rep_stops)
    printf("answers: %d unknown-node, %d with cancel_job_ids, %d stop/cancelled decisions\n",
           sh->hb_unknown, sh->hb_cancels, sh->rep_stops);
  double cpu_pct = NAN;
  if (cpu0 >= 0 && cpu1 >= 0) {
    cpu_pct = 100.0 * (cpu1 - cpu0) / window;
    size_t calls = hs.n + ps.n;
    printf("coordinator (pid %d): %.2f s CPU in %.2f s = %.1f%% of one core (%.0f us per call),"
           " RSS %.1f MiB\n",
           cfg.coord_pid, cpu1 - cpu0, window, cpu_pct,
           calls ? 1e6 * (cpu1 - cpu0) / (double)calls : NAN, rss);
  } else if (cfg.coord_pid > 0) {
    printf("coordinator (pid %d): /proc/%d/stat unreadable\n", cfg.coord_pid, cfg.coord_pid);
  }
  printf("clients: %.2f s CPU in all (registration included)\n", client_cpu);
  int errors = sh->reg_errors + sh->hb_errors + sh->rep_errors + failed_clients;
  if (errors) printf("failures: %d (first: %s)\n", errors, sh->first_error);
  printf("RESULT heartbeat_p50_ms %.3f ms\n", hs.p50);
  if (!isnan(cpu_pct)) printf("RESULT coordinator_cpu_pct %.1f %%\n", cpu_pct);
  if (cfg.report_hz > 0) printf("RESULT report_iteration_p99_ms %.3f ms\n", ps.p99);
  printf("RESULT heartbeat_p99_ms %.3f ms\n", hs.p99);
  free(lat);
  free(lag);
  free(regv);
  free(repv);
  free(replag);
  return errors ? 1 : 0;
}
