/* px_bench_sched: the scheduling policy (coordinatord/sched.h) on a
 * simulated cluster, beside plain first-come first-served on the same
 * trace. A seeded trace of JOBS queued jobs from USERS users (a few heavy
 * users submit most of them: user u's weight is 1/(u+1)) runs on NODES
 * simulated nodes of 4 devices, as an event simulation: at every event
 * (the start, each batch of jobs ending) the simulator builds the snapshot
 * pxcoordd would build from its database (free nodes, nodes busy until their
 * job's time limit, the pending jobs, users' usage with running jobs
 * included) and calls coord_sched_decide, the very function pxcoordd runs,
 * timing each call; the jobs it starts run for their (hidden) duration,
 * which is at most their time limit.
 *
 * FCFS is the same function with only the age factor weighted (so the order
 * is submission order) and no time limits (so nothing backfills): the
 * pre-issue-31 queue, whose head blocks the jobs behind it.
 *
 *   px_bench_sched [--jobs N] [--users U] [--nodes M] [--seed S]
 *   px_bench_sched --target HOST:PORT [--jobs N] [--nodes M] [--finish K]
 *
 * With --target (run.sh) it drives a real pxcoordd instead: registers the
 * nodes, submits the trace's jobs (one SubmitJob each, every one followed by
 * a scheduler pass over the growing queue), then ends K running jobs one at
 * a time (ReportRankExit for each rank, as agents do), each end followed by
 * a pass that places jobs from the full queue. run.sh reads the daemon's
 * "scheduler pass" log lines for the latency of those passes (database
 * snapshot, policy, reasons and placements).
 *
 * Prints per-policy rows (decisions, decision latency p50/p99/max, makespan,
 * utilisation, mean and p95 wait, mean wait of the heaviest user and of the
 * others), then RESULT lines; the p99 decision latency of the policy must
 * stay under 50 ms (exit 1 otherwise). Exit 2 for bad usage. */
#include <getopt.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "prunex/rpc.h"
#include "sched.h"

typedef struct {
  int user, nodes, per_node, priority;
  int64_t submit_ms, duration_ms, limit_ms;
  int64_t start_ms, end_ms; /* -1: not yet */
} bench_job_t;

typedef struct {
  double decisions_p50_ms, decisions_p99_ms, decisions_max_ms;
  size_t decisions;
  double makespan_s, utilisation, mean_wait_s, p95_wait_s, heavy_wait_s, other_wait_s;
} bench_result_t;

static uint64_t bench_rng = 88172645463325252ull;
static double bench_uniform(void) { /* xorshift64*, [0, 1) */
  bench_rng ^= bench_rng >> 12;
  bench_rng ^= bench_rng << 25;
  bench_rng ^= bench_rng >> 27;
  return (double)((bench_rng * 2685821657736338717ull) >> 11) / 9007199254740992.0;
}

static double bench_now_ms(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec * 1e3 + (double)ts.tv_nsec / 1e6;
}

static int bench_cmp_double(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return x < y ? -1 : x > y;
}

/* The trace: sizes, durations, limits and users drawn once from the seed. */
static void bench_trace(bench_job_t *jobs, int njobs, int nusers) {
  double wsum = 0;
  for (int u = 0; u < nusers; u++) wsum += 1.0 / (u + 1);
  static const int sizes[] = {1, 1, 1, 1, 1, 2, 2, 4, 4, 8, 8, 16, 32, 64};
  static const int per_node[] = {1, 2, 4, 4};
  for (int i = 0; i < njobs; i++) {
    bench_job_t *j = &jobs[i];
    double r = bench_uniform() * wsum;
    j->user = 0;
    for (double acc = 1.0; j->user < nusers - 1 && acc < r; acc += 1.0 / (++j->user + 1)) {
    }
    j->nodes = sizes[(int)(bench_uniform() * (sizeof sizes / sizeof sizes[0]))];
    j->per_node = per_node[(int)(bench_uniform() * 4)];
    j->priority = bench_uniform() < 0.1 ? 50 : COORD_PRIORITY_DEFAULT;
    /* log-normal durations, median 10 minutes, 1 minute to 12 hours */
    double d = 600.0 * exp(1.2 * sqrt(-2.0 * log(1.0 - bench_uniform())) *
                           cos(6.283185307179586 * bench_uniform()));
    if (d < 60) d = 60;
    if (d > 43200) d = 43200;
    j->duration_ms = (int64_t)(d * 1000);
    double over = 1.1 + 1.9 * bench_uniform(); /* users over-ask, 1.1x to 3x */
    j->limit_ms = ((int64_t)(d * over / 60.0) + 1) * 60000;
    j->submit_ms = i; /* queued in this order at the start */
  }
}

/* Runs the trace under policy p (with_limits: the jobs tell their time
 * limits); fills r. */
static int bench_run(const coord_sched_policy_t *p, int with_limits, const bench_job_t *trace,
                     int njobs, int nusers, int nnodes, bench_result_t *r) {
  bench_job_t *jobs = malloc((size_t)njobs * sizeof *jobs);
  int *node_job = malloc((size_t)nnodes * sizeof *node_job);
  coord_sched_node_t *nodes = malloc((size_t)nnodes * sizeof *nodes);
  coord_sched_job_t *pend = malloc((size_t)njobs * sizeof *pend);
  int *pend_id = malloc((size_t)njobs * sizeof *pend_id);
  size_t *order = malloc((size_t)njobs * sizeof *order);
  int64_t *until = malloc((size_t)nnodes * sizeof *until);
  coord_sched_user_t *users = calloc((size_t)nusers, sizeof *users);
  int *user_nodes = malloc((size_t)nusers * sizeof *user_nodes);
  double *usage = calloc((size_t)nusers, sizeof *usage);
  double *lat = malloc(((size_t)njobs + 2) * sizeof *lat);
  char (*names)[16] = malloc((size_t)nusers * sizeof *names);
  if (!jobs || !node_job || !nodes || !pend || !pend_id || !order || !until || !users ||
      !user_nodes || !usage || !lat || !names) {
    fprintf(stderr, "px_bench_sched: out of memory\n");
    return -1;
  }
  memcpy(jobs, trace, (size_t)njobs * sizeof *jobs);
  for (int i = 0; i < njobs; i++) {
    jobs[i].start_ms = jobs[i].end_ms = -1;
    if (!with_limits) jobs[i].limit_ms = 0;
  }
  for (int n = 0; n < nnodes; n++) node_job[n] = -1;
  for (int u = 0; u < nusers; u++) {
    snprintf(names[u], sizeof names[u], "user%02d", u);
    users[u].name = names[u];
  }
  int64_t now = 0, busy_node_ms = 0;
  int done = 0;
  size_t nlat = 0;
  while (done < njobs) {
    /* jobs ending now free their nodes and charge their node-seconds */
    for (int n = 0; n < nnodes; n++) {
      int k = node_job[n];
      if (k >= 0 && jobs[k].end_ms <= now) node_job[n] = -1;
    }
    /* the snapshot pxcoordd builds */
    for (int u = 0; u < nusers; u++) {
      users[u].usage = usage[u];
      users[u].running_nodes = 0;
    }
    for (int n = 0; n < nnodes; n++) {
      int k = node_job[n];
      nodes[n].devices = 4;
      nodes[n].free_at_ms = k < 0 ? 0
                            : jobs[k].limit_ms > 0 ? jobs[k].start_ms + jobs[k].limit_ms
                                                   : COORD_SCHED_NEVER;
    }
    for (int k = 0; k < njobs; k++)
      if (jobs[k].start_ms >= 0 && jobs[k].end_ms > now) {
        users[jobs[k].user].running_nodes += jobs[k].nodes;
        users[jobs[k].user].usage += (double)jobs[k].nodes * (double)(now - jobs[k].start_ms) / 1e3;
      }
    size_t np = 0;
    for (int k = 0; k < njobs; k++) {
      if (jobs[k].start_ms >= 0) continue;
      coord_sched_job_t *j = &pend[np];
      memset(j, 0, sizeof *j);
      j->user = jobs[k].user;
      j->nodes = jobs[k].nodes;
      j->per_node = jobs[k].per_node;
      j->priority = jobs[k].priority;
      j->submit_ms = jobs[k].submit_ms;
      j->time_limit_ms = jobs[k].limit_ms;
      pend_id[np++] = k;
    }
    coord_sched_snapshot_t s = {.now_ms = now, .nodes = nodes, .nnodes = (size_t)nnodes,
                                .users = users, .nusers = (size_t)nusers, .jobs = pend,
                                .njobs = np, .order = order, .until = until,
                                .user_nodes = user_nodes};
    double t0 = bench_now_ms();
    coord_sched_decide(p, &s);
    lat[nlat++] = bench_now_ms() - t0;
    /* start what it started, on the nodes it would take */
    for (size_t r2 = 0; r2 < np; r2++) {
      size_t i = order[r2];
      if (!pend[i].start) continue;
      int k = pend_id[i], need = jobs[k].nodes;
      for (int n = 0; n < nnodes && need > 0; n++)
        if (node_job[n] < 0 && nodes[n].devices >= jobs[k].per_node) {
          node_job[n] = k;
          need--;
        }
      if (need > 0) {
        fprintf(stderr, "px_bench_sched: the policy started a job that does not fit\n");
        return -1;
      }
      jobs[k].start_ms = now;
      jobs[k].end_ms = now + jobs[k].duration_ms;
    }
    /* the next event: the earliest end */
    int64_t next = INT64_MAX;
    for (int n = 0; n < nnodes; n++)
      if (node_job[n] >= 0 && jobs[node_job[n]].end_ms < next) next = jobs[node_job[n]].end_ms;
    if (next == INT64_MAX) {
      fprintf(stderr, "px_bench_sched: %d jobs can never start\n", njobs - done);
      return -1;
    }
    for (int k = 0; k < njobs; k++)
      if (jobs[k].start_ms >= 0 && jobs[k].end_ms > now && jobs[k].end_ms <= next) {
        usage[jobs[k].user] += (double)jobs[k].nodes * (double)jobs[k].duration_ms / 1e3;
        busy_node_ms += (int64_t)jobs[k].nodes * jobs[k].duration_ms;
        done++;
      }
    now = next;
  }
  qsort(lat, nlat, sizeof *lat, bench_cmp_double);
  r->decisions = nlat;
  r->decisions_p50_ms = lat[nlat / 2];
  r->decisions_p99_ms = lat[(size_t)((double)(nlat - 1) * 0.99)];
  r->decisions_max_ms = lat[nlat - 1];
  r->makespan_s = (double)now / 1e3;
  r->utilisation = (double)busy_node_ms / ((double)nnodes * (double)now);
  double *waits = lat; /* reused: njobs + 2 entries */
  double heavy = 0, other = 0;
  int nheavy = 0;
  double sum = 0;
  for (int k = 0; k < njobs; k++) {
    waits[k] = (double)(jobs[k].start_ms - jobs[k].submit_ms) / 1e3;
    sum += waits[k];
    if (jobs[k].user == 0) heavy += waits[k], nheavy++;
    else other += waits[k];
  }
  r->mean_wait_s = sum / njobs;
  r->heavy_wait_s = nheavy ? heavy / nheavy : 0;
  r->other_wait_s = njobs > nheavy ? other / (njobs - nheavy) : 0;
  qsort(waits, (size_t)njobs, sizeof *waits, bench_cmp_double);
  r->p95_wait_s = waits[(size_t)((double)(njobs - 1) * 0.95)];
  free(jobs), free(node_job), free(nodes), free(pend), free(pend_id), free(order);
  free(until), free(users), free(user_nodes), free(usage), free(lat), free(names);
  return 0;
}

static void bench_row(const char *name, const bench_result_t *r) {
  printf("%-10s %9zu %8.2f %8.2f %8.2f %10.1f %7.1f%% %10.1f %10.1f %10.1f %10.1f\n", name,
         r->decisions, r->decisions_p50_ms, r->decisions_p99_ms, r->decisions_max_ms,
         r->makespan_s / 3600.0, 100.0 * r->utilisation, r->mean_wait_s / 3600.0,
         r->p95_wait_s / 3600.0, r->heavy_wait_s / 3600.0, r->other_wait_s / 3600.0);
}

/* The live mode: see the file comment. */
static int bench_live(const char *target, const bench_job_t *trace, int njobs, int nnodes,
                      int finish) {
  px_rpc_channel_t *ch = NULL;
  if (px_rpc_channel_create(target, &ch) != PX_OK) {
    fprintf(stderr, "px_bench_sched: %s\n", px_last_error());
    return 1;
  }
  int rc = 1;
  for (int n = 0; n < nnodes; n++) {
    Prunex__V1__Device devs[4], *dp[4];
    for (int d = 0; d < 4; d++) {
      devs[d] = (Prunex__V1__Device)PRUNEX__V1__DEVICE__INIT;
      devs[d].index = d;
      devs[d].kind = PRUNEX__V1__DEVICE_KIND__DEVICE_KIND_CPU;
      devs[d].name = "cpu";
      devs[d].healthy = 1;
      dp[d] = &devs[d];
    }
    char name[32], addr[64];
    snprintf(name, sizeof name, "sim-%03d", n);
    snprintf(addr, sizeof addr, "tcp://%s:9000", name);
    char *addrs[1] = {addr};
    Prunex__V1__RegisterNodeRequest req = PRUNEX__V1__REGISTER_NODE_REQUEST__INIT;
    req.name = req.hostname = name;
    req.n_devices = 4;
    req.devices = dp;
    req.n_data_plane_addresses = 1;
    req.data_plane_addresses = addrs;
    req.agent_version = "bench";
    Prunex__V1__RegisterNodeResponse *r = NULL;
    if (px_rpc_register_node(ch, &req, 30000, &r) != PX_OK) goto out;
    px_rpc_message_free(r);
  }
  double t0 = bench_now_ms();
  char (*ids)[32] = malloc((size_t)njobs * sizeof *ids);
  if (!ids) goto out;
  for (int i = 0; i < njobs; i++) {
    Prunex__V1__JobSpec spec = PRUNEX__V1__JOB_SPEC__INIT;
    Prunex__V1__ModelSpec model = PRUNEX__V1__MODEL_SPEC__INIT;
    Prunex__V1__DatasetSpec data = PRUNEX__V1__DATASET_SPEC__INIT;
    Prunex__V1__ClusterSpec cl = PRUNEX__V1__CLUSTER_SPEC__INIT;
    model.name = "resnet20";
    data.name = "synthetic";
    cl.nodes = trace[i].nodes;
    cl.workers_per_node = trace[i].per_node;
    cl.device = "cpu";
    spec.name = "bench";
    spec.model = &model;
    spec.dataset = &data;
    spec.cluster = &cl;
    spec.strategy = PRUNEX__V1__STRATEGY__STRATEGY_HSADMM;
    spec.priority = trace[i].priority;
    spec.time_limit_s = (int32_t)(trace[i].limit_ms / 1000);
    Prunex__V1__SubmitJobRequest req = PRUNEX__V1__SUBMIT_JOB_REQUEST__INIT;
    req.spec = &spec;
    req.spec_yaml = "";
    Prunex__V1__SubmitJobResponse *r = NULL;
    if (px_rpc_submit_job(ch, &req, 60000, &r) != PX_OK) goto out_ids;
    snprintf(ids[i], sizeof ids[i], "%s", r->job_id);
    px_rpc_message_free(r);
  }
  printf("live: %d nodes registered, %d jobs submitted in %.1f s\n", nnodes, njobs,
         (bench_now_ms() - t0) / 1e3);
  /* end running jobs, oldest first: each end places jobs from the queue */
  int ended = 0;
  for (int i = 0; i < njobs && ended < finish; i++) {
    Prunex__V1__Job *j = NULL;
    if (px_rpc_get_job(ch, ids[i], 60000, &j) != PX_OK) goto out_ids;
    int active = j->state == PRUNEX__V1__JOB_STATE__JOB_STATE_SCHEDULED ||
                 j->state == PRUNEX__V1__JOB_STATE__JOB_STATE_RUNNING;
    int ranks = trace[i].nodes * trace[i].per_node;
    px_rpc_message_free(j);
    if (!active) continue;
    for (int k = 0; k < ranks; k++) {
      Prunex__V1__RankExit ex = PRUNEX__V1__RANK_EXIT__INIT;
      ex.job_id = ids[i];
      ex.node_id = "";
      ex.rank = k;
      ex.reason = "";
      if (px_rpc_report_rank_exit(ch, &ex, 60000) != PX_OK) goto out_ids;
    }
    ended++;
  }
  printf("live: %d running jobs ended\n", ended);
  rc = 0;
out_ids:
  free(ids);
out:
  if (rc) fprintf(stderr, "px_bench_sched: %s\n", px_last_error());
  px_rpc_channel_destroy(ch);
  return rc;
}

int main(int argc, char **argv) {
  int njobs = 10000, nusers = 20, nnodes = 200, finish = 200;
  const char *target = NULL;
  unsigned long long seed = 1;
  static const struct option opts[] = {{"jobs", 1, NULL, 'j'}, {"users", 1, NULL, 'u'},
                                       {"nodes", 1, NULL, 'n'}, {"seed", 1, NULL, 's'},
                                       {"target", 1, NULL, 't'}, {"finish", 1, NULL, 'f'},
                                       {NULL, 0, NULL, 0}};
  int c;
  while ((c = getopt_long(argc, argv, "", opts, NULL)) != -1) {
    switch (c) {
      case 'j': njobs = atoi(optarg); break;
      case 'u': nusers = atoi(optarg); break;
      case 'n': nnodes = atoi(optarg); break;
      case 's': seed = strtoull(optarg, NULL, 10); break;
      case 't': target = optarg; break;
      case 'f': finish = atoi(optarg); break;
      default:
        fprintf(stderr, "usage: px_bench_sched [--jobs N] [--users U] [--nodes M] [--seed S]\n");
        return 2;
    }
  }
  if (njobs < 1 || nusers < 1 || nusers > COORD_SCHED_USERS_MAX || nnodes < 64) {
    fprintf(stderr, "px_bench_sched: --jobs >= 1, --users 1..%d, --nodes >= 64 (the largest"
            " job)\n", COORD_SCHED_USERS_MAX);
    return 2;
  }
  bench_rng ^= seed * 0x9E3779B97F4A7C15ull;
  bench_job_t *trace = malloc((size_t)njobs * sizeof *trace);
  if (!trace) return 1;
  bench_trace(trace, njobs, nusers);
  if (target) {
    int lrc = bench_live(target, trace, njobs, nnodes, finish);
    free(trace);
    return lrc;
  }
  coord_sched_policy_t multi, fcfs;
  coord_sched_policy_defaults(&multi);
  coord_sched_policy_defaults(&fcfs);
  fcfs.weight_job = fcfs.weight_fairshare = 0;
  fcfs.weight_age = 1;
  fcfs.max_age_s = 1000000000; /* never capped: the order is the submission order */
  printf("%d queued jobs from %d users on %d nodes of 4 devices (seed %llu); decision latency"
         " is one coord_sched_decide call over the whole queue\n",
         njobs, nusers, nnodes, seed);
  printf("%-10s %9s %8s %8s %8s %10s %8s %10s %10s %10s %10s\n", "policy", "decisions",
         "p50_ms", "p99_ms", "max_ms", "makespan_h", "util", "wait_h", "p95wait_h",
         "heavy_h", "others_h");
  bench_result_t rm, rf;
  if (bench_run(&multi, 1, trace, njobs, nusers, nnodes, &rm) != 0) return 1;
  bench_row("multifactor", &rm);
  if (bench_run(&fcfs, 0, trace, njobs, nusers, nnodes, &rf) != 0) return 1;
  bench_row("fcfs", &rf);
  free(trace);
  printf("RESULT fcfs_utilisation %.4f ratio\n", rf.utilisation);
  printf("RESULT fcfs_mean_wait_h %.3f h\n", rf.mean_wait_s / 3600.0);
  printf("RESULT sched_utilisation %.4f ratio\n", rm.utilisation);
  printf("RESULT sched_mean_wait_h %.3f h\n", rm.mean_wait_s / 3600.0);
  printf("RESULT sched_mean_wait_vs_fcfs %.3f ratio (lower is better)\n",
         rm.mean_wait_s / rf.mean_wait_s);
  printf("RESULT sched_decision_p99_ms %.2f ms\n", rm.decisions_p99_ms);
  return rm.decisions_p99_ms < 50.0 ? 0 : 1;
}
