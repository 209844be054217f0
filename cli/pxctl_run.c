/* `pxctl run SPEC.yaml`: the embedded mode. One command runs a job on this
 * machine with the real control plane: a private pxcoordd on a free
 * loopback port with its database in a fresh run directory, and one pxagent
 * per node of the spec (node-0 .. node-M-1, each with P CPU workers). It
 * waits for the nodes, submits, shows the progress, prints the summary the
 * coordinator computed and tears everything down.
 *
 * Process hygiene is the point of this file. Every child runs in its own
 * process group (so Ctrl-C at the terminal reaches pxctl only, and pxctl
 * decides: cancel the job, then stop agents, then the coordinator) and gets
 * PR_SET_PDEATHSIG, so that it is told even if pxctl is killed outright.
 * pxctl is a child subreaper: workers orphaned by a dying agent become its
 * children and are killed and reaped in the final sweep. A child's exit is
 * noticed with WNOWAIT so that its zombie keeps the process-group id
 * reserved until the group has been swept with SIGKILL. Every wait is
 * bounded; a second Ctrl-C cuts the grace periods short. */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <limits.h>
#include <sched.h>
#include <signal.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "prunex/jobspec.h"
#include "prunex/text.h"
#include "pxctl.h"
#include "pxctl_supervise.h"

#define PXCTL_NODES_READY_S 90.0    /* until every agent's node is READY */
#define PXCTL_AGENT_GRACE_MS 15000  /* SIGTERM -> SIGKILL for agents (they stop workers) */
#define PXCTL_COORDD_GRACE_MS 10000
#define PXCTL_RPC_MS 5000
#define PXCTL_RUN_MAX_NODES 256     /* agents started on this one machine */


typedef struct {
  pxctl_opts_t *o;
  Prunex__V1__JobSpec *spec;
  char *spec_text;
  int M, P, T;
  char run_dir[PATH_MAX];
  char output_dir[PATH_MAX];
  int output_defaulted;     /* output_dir is RUN_DIR/output */
  char coordd_bin[PATH_MAX], agent_bin[PATH_MAX];
  pxctl_child_t coordd;
  pxctl_child_t *agents;
  char target[64];
  px_rpc_channel_t *ch;
  char job_id[128];
  const pxctl_child_t *died; /* a child that exited while the job ran */
  FILE *progress;            /* stderr */
  double t0;
  pxctl_tb_t *tb;            /* --tensorboard: the job's event file */
} pxctl_run_t;

/* ---- steps -------------------------------------------------------------------------- */

/* Starts pxcoordd and reads the port it prints. */
static int pxctl_start_coordd(pxctl_run_t *r) {
  pxctl_child_t *c = &r->coordd;
  snprintf(c->what, sizeof c->what, "pxcoordd");
  char db[PATH_MAX];
  if (pxctl_fmt(c->log, sizeof c->log, "%s/pxcoordd.log", r->run_dir) != 0 ||
      pxctl_fmt(db, sizeof db, "%s/coordinator.db", r->run_dir) != 0)
    return -1; /* cannot happen: the run directory's length is checked */
  char *argv[] = {r->coordd_bin, "--listen", "127.0.0.1:0", "--db", db, "--log-level", "info",
                  NULL, NULL, NULL};
  if (r->o->http) { /* the HTTP listener: metrics, JSON, the live dashboard */
    argv[7] = "--http";
    argv[8] = (char *)r->o->http;
  }
  char hline[256] = "";
  if (pxctl_coordd_start(c, argv, r->o->http ? hline : NULL, sizeof hline, r->target,
                         sizeof r->target) != 0)
    return -1;
  if (r->o->http && !strncmp(hline, "http on ", 8))
    fprintf(r->progress ? r->progress : stderr,
            "pxctl: dashboard at http://%s/ (Prometheus metrics at /metrics)\n", hline + 8);
  return 0;
}

static int pxctl_start_agents(pxctl_run_t *r) {
  for (int i = 0; i < r->M; i++) {
    pxctl_child_t *c = &r->agents[i];
    char name[32], work[PATH_MAX], P[16], T[16];
    snprintf(name, sizeof name, "node-%d", i);
    snprintf(c->what, sizeof c->what, "pxagent %s", name);
    if (pxctl_fmt(c->log, sizeof c->log, "%s/pxagent-%s.log", r->run_dir, name) != 0 ||
        pxctl_fmt(work, sizeof work, "%s/%s", r->run_dir, name) != 0 || mkdir(work, 0755) != 0) {
      pxctl_fail("cannot make %s: %s", work, strerror(errno));
      return -1;
    }
    snprintf(P, sizeof P, "%d", r->P);
    snprintf(T, sizeof T, "%d", r->T);
    /* The job's output directory is outside the agents' work directories:
     * they must allow it (agents refuse any other output_dir). */
    char *argv[] = {r->agent_bin, "--coordinator", r->target, "--name", name, "--cpu-workers", P,
                    "--threads-per-worker", T, "--work-dir", work, "--output-root",
                    r->output_dir, "--data-root", "/usr/share/datasets", NULL, NULL, NULL,
                    NULL, NULL, NULL, NULL};
    /* The user's own data set and imported model, wherever they are, are
     * theirs to read (pxagent reads dataset.path and model.onnx only under
     * its --data-root list). */
    const char *data = r->spec->dataset ? r->spec->dataset->path : NULL;
    const char *onnx = r->spec->model ? r->spec->model->onnx : NULL;
    int na = 15;
    char mdir[PATH_MAX];
    if (data && data[0] == '/') {
      argv[na++] = "--data-root";
      argv[na++] = (char *)data;
    }
    if (onnx && onnx[0] == '/' && pxctl_fmt(mdir, sizeof mdir, "%s", onnx) == 0) {
      *strrchr(mdir, '/') = '\0';
      argv[na++] = "--data-root";
      argv[na++] = mdir[0] ? mdir : "/";
    }
    /* and the image folder cache directory they asked for (pxagent lets
     * jobs write dataset.cache_dir only under its roots), made
     * here as the root must exist (a failure: the worker names it) */
    const char *cache = r->spec->dataset ? r->spec->dataset->cache_dir : NULL;
    if (cache && cache[0] == '/') {
      (void)px_mkdirs(cache, 0700);
      argv[na++] = "--output-root";
      argv[na++] = (char *)cache;
    }
    /* A CPU job on a machine with GPUs: the agents must offer CPU workers
     * (pxagent offers its GPUs whenever it sees any). */
    int hide_gpus = !strcmp(r->spec->cluster->device, "cpu");
    if (pxctl_spawn(c, r->agent_bin, argv, NULL, hide_gpus) != 0) return -1;
  }
  return 0;
}

/* A child that is gone while it should not be: records it, returns 1. */
static int pxctl_check_children(pxctl_run_t *r) {
  if (pxctl_child_exited(&r->coordd)) {
    r->died = &r->coordd;
    return 1;
  }
  for (int i = 0; i < r->M; i++)
    if (pxctl_child_exited(&r->agents[i])) {
      r->died = &r->agents[i];
      return 1;
    }
  return 0;
}

static void pxctl_report_death(const pxctl_run_t *r) {
  char how[128];
  pxctl_describe_exit(r->died, how, sizeof how);
  pxctl_fail("%s %s unexpectedly (its log: %s)", r->died->what, how, r->died->log);
  pxctl_tail(r->died->log, 20);
}

static int pxctl_wait_nodes(pxctl_run_t *r) {
  double end = pxctl_mono_s() + PXCTL_NODES_READY_S;
  int ready = 0;
  while (!pxctl_signal) {
    if (pxctl_check_children(r)) {
      pxctl_report_death(r);
      return -1;
    }
    Prunex__V1__ListNodesRequest req = PRUNEX__V1__LIST_NODES_REQUEST__INIT;
    req.state = PRUNEX__V1__NODE_STATE__NODE_STATE_READY;
    Prunex__V1__ListNodesResponse *resp = NULL;
    ready = 0;
    int short_of = -1, offered = 0, gpus = 0;
    if (px_rpc_list_nodes(r->ch, &req, PXCTL_RPC_MS, &resp) == PX_OK) {
      for (int i = 0; i < r->M; i++) {
        char name[32];
        snprintf(name, sizeof name, "node-%d", i);
        for (size_t k = 0; k < resp->n_nodes; k++)
          if (!strcmp(resp->nodes[k]->name, name)) {
            const Prunex__V1__Node *n = resp->nodes[k];
            ready++;
            if ((int)n->n_devices < r->P && short_of < 0) {
              short_of = i;
              offered = (int)n->n_devices;
              for (size_t d = 0; d < n->n_devices; d++)
                gpus += n->devices[d]->kind == PRUNEX__V1__DEVICE_KIND__DEVICE_KIND_CUDA;
            }
            break;
          }
      }
      px_rpc_message_free(resp);
    }
    if (short_of >= 0) {
      /* The job would wait for devices that never come. */
      pxctl_fail("node-%d offers %d device%s (%d GPU%s), but the spec asks for "
                 "cluster.workers_per_node = %d%s",
                 short_of, offered, offered == 1 ? "" : "s", gpus, gpus == 1 ? "" : "s", r->P,
                 gpus ? "; pxagent offers the GPUs it finds: set cluster.device: cpu for CPU "
                        "workers, or workers_per_node to the GPUs per node"
                      : "");
      return -1;
    }
    if (ready == r->M) return 0;
    if (pxctl_mono_s() >= end) {
      pxctl_fail("only %d of %d agents became READY within %.0f s (their logs: %s/pxagent-*.log)",
                 ready, r->M, PXCTL_NODES_READY_S, r->run_dir);
      for (int i = 0; i < r->M; i++) pxctl_tail(r->agents[i].log, 10);
      return -1;
    }
    pxctl_sleep_ms(100);
  }
  return -1;
}

static int pxctl_run_stop(void *arg) {
  pxctl_run_t *r = arg;
  pxctl_tb_poll(r->tb); /* --tensorboard: the iterations so far */
  return pxctl_signal || pxctl_check_children(r);
}

/* Prints the tail of each rank log of the job (for a job that failed: the
 * run directory is about to go). */
static void pxctl_rank_log_tails(const pxctl_run_t *r) {
  for (int i = 0; i < r->M; i++) {
    char dir[PATH_MAX];
    if (pxctl_fmt(dir, sizeof dir, "%s/node-%d/jobs/%s", r->run_dir, i, r->job_id) != 0) continue;
    DIR *d = opendir(dir);
    if (!d) continue;
    struct dirent *e;
    while ((e = readdir(d))) {
      if (strncmp(e->d_name, "rank-", 5) != 0) continue;
      char path[PATH_MAX];
      if (pxctl_fmt(path, sizeof path, "%s/%s", dir, e->d_name) == 0) pxctl_tail(path, 8);
    }
    closedir(d);
  }
}

/* ---- the result ------------------------------------------------------------------- */

typedef struct {
  const char *state;          /* job state name, or "ERROR" before a job existed */
  char reason[1024];
  char error[1024];           /* what went wrong in pxctl's own steps ("" if nothing) */
  int have_summary;
  pxctl_summary_t sum;
  char model_path[PATH_MAX];  /* "" when none (or removed) */
  int have_compact;           /* compact: the compact model written beside it */
  px_export_report_t compact;
  char name[256];
  int interrupted;
  int kept;                   /* the run directory is kept (entirely) */
  int output_kept;            /* only RUN_DIR/output is kept */
  char metrics_dir[PATH_MAX]; /* OUTPUT/metrics when the databases were exported, else "" */
} pxctl_result_t;

/* Keeps the run's metrics next to the model: OUTPUT/metrics/coordinator.db
 * (what `pxctl plot OUTPUT` and `pxctl plot --db` read) and each node's
 * metrics.db as node-I-metrics.db. Best effort: a failure is reported in
 * res->error and the run's outcome is unchanged. */
static void pxctl_export_metrics(const pxctl_run_t *r, pxctl_result_t *res) {
  char dir[PATH_MAX], from[PATH_MAX], to[PATH_MAX + 64];
  if (pxctl_fmt(dir, sizeof dir, "%s/metrics", r->output_dir) != 0) return;
  if (mkdir(dir, 0755) != 0 && errno != EEXIST) return;
  if (pxctl_fmt(from, sizeof from, "%s/coordinator.db", r->run_dir) != 0) return;
  snprintf(to, sizeof to, "%s/coordinator.db", dir);
  unlink(to);
  char err[PATH_MAX + 256];
  if (pxctl_copy_db(from, to, err, sizeof err) != 0) {
    snprintf(res->error, sizeof res->error, "could not copy the metrics database to %.400s: %.500s",
             to, err);
    return;
  }
  for (int i = 0; i < r->M; i++) {
    char f2[PATH_MAX];
    snprintf(f2, sizeof f2, "%s/node-%d/metrics.db", r->run_dir, i);
    if (access(f2, R_OK) != 0) continue;
    snprintf(to, sizeof to, "%s/node-%d-metrics.db", dir, i);
    unlink(to);
    pxctl_copy_db(f2, to, err, sizeof err);
  }
  snprintf(res->metrics_dir, sizeof res->metrics_dir, "%s", dir);
}

/* The metrics directory is shown when it survives the run. */
static int pxctl_metrics_shown(const pxctl_run_t *r, const pxctl_result_t *res) {
  return res->metrics_dir[0] && (res->kept || res->output_kept || !r->output_defaulted);
}

static void pxctl_print_result_json(const pxctl_run_t *r, const pxctl_result_t *res,
                                    double total) {
  const pxctl_summary_t *s = &res->sum;
  pxctl_json_t j;
  pxctl_json_init(&j, stdout);
  pxctl_json_begin_object(&j);
  pxctl_json_kv_string(&j, "job_id", r->job_id[0] ? r->job_id : NULL);
  pxctl_json_kv_string(&j, "name", res->name);
  pxctl_json_kv_string(&j, "state", res->state);
  pxctl_json_kv_string(&j, "reason", res->reason);
  pxctl_json_kv_string(&j, "error", res->error[0] ? res->error : NULL);
  pxctl_json_kv_bool(&j, "interrupted", res->interrupted);
  pxctl_json_kv_int(&j, "nodes", r->M);
  pxctl_json_kv_int(&j, "workers_per_node", r->P);
  pxctl_json_kv_int(&j, "threads_per_worker", r->T);
  pxctl_json_kv_int(&j, "iterations", s->iterations);
  pxctl_json_key(&j, "test_accuracy");
  if (res->have_summary && s->test_accuracy >= 0) pxctl_json_double(&j, s->test_accuracy);
  else pxctl_json_null(&j);
  pxctl_json_key(&j, "density");
  if (res->have_summary && s->iterations > 0) pxctl_json_double(&j, s->density);
  else pxctl_json_null(&j);
  pxctl_json_kv_uint(&j, "inter_bytes", s->inter_bytes);
  pxctl_json_kv_uint(&j, "inter_bytes_dense", s->inter_bytes_dense);
  pxctl_json_key(&j, "inter_reduction");
  if (s->inter_bytes_dense > 0)
    pxctl_json_double(&j, 1.0 - (double)s->inter_bytes / (double)s->inter_bytes_dense);
  else pxctl_json_null(&j);
  pxctl_json_kv_uint(&j, "intra_bytes", s->intra_bytes);
  pxctl_json_kv_double(&j, "wall_s", s->wall_s);
  pxctl_json_kv_double(&j, "total_s", total);
  pxctl_json_kv_string(&j, "model_path", res->model_path[0] ? res->model_path : NULL);
  pxctl_json_kv_string(&j, "metrics_dir", pxctl_metrics_shown(r, res) ? res->metrics_dir : NULL);
  if (res->have_compact) {
    pxctl_json_kv_uint(&j, "dense_params", res->compact.dense_params);
    pxctl_json_kv_uint(&j, "dense_bytes", res->compact.dense_bytes);
    pxctl_json_kv_uint(&j, "compact_params", res->compact.compact_params);
    pxctl_json_kv_uint(&j, "compact_bytes", res->compact.compact_bytes);
    pxctl_json_kv_uint(&j, "dense_macs", res->compact.dense_macs);
    pxctl_json_kv_uint(&j, "compact_macs", res->compact.compact_macs);
    pxctl_json_kv_string(&j, "compact_path", res->model_path[0] ? res->compact.compact_path : NULL);
  }
  pxctl_json_kv_string(&j, "run_dir", res->kept ? r->run_dir : NULL);
  pxctl_json_kv_string(&j, "summary_source", res->have_summary ? s->source : NULL);
  pxctl_json_end_object(&j);
  pxctl_json_finish(&j);
}

static void pxctl_print_result(const pxctl_run_t *r, const pxctl_result_t *res) {
  double total = pxctl_mono_s() - r->t0;
  const pxctl_summary_t *s = &res->sum;
  if (r->o->json) {
    pxctl_print_result_json(r, res, total);
    return;
  }
  printf("\n%s%s%s%s %s%s%s\n", r->job_id[0] ? r->job_id : "(no job)", res->name[0] ? " (" : "",
         res->name, res->name[0] ? ")" : "", res->state, res->reason[0] ? ": " : "", res->reason);
  if (res->error[0]) printf("  error               %s\n", res->error);
  if (res->have_summary) {
    char acc[32], inter[32], dense[32], intra[32], wall[32], tot[32];
    pxctl_fmt_pct(acc, sizeof acc, s->test_accuracy);
    pxctl_fmt_bytes(inter, sizeof inter, s->inter_bytes);
    pxctl_fmt_bytes(dense, sizeof dense, s->inter_bytes_dense);
    pxctl_fmt_bytes(intra, sizeof intra, s->intra_bytes);
    pxctl_fmt_duration(wall, sizeof wall, s->wall_s);
    pxctl_fmt_duration(tot, sizeof tot, total);
    printf("  cluster             %d node%s x %d worker%s (%s), %d thread%s each\n", r->M,
           r->M == 1 ? "" : "s", r->P, r->P == 1 ? "" : "s", r->spec->cluster->device, r->T,
           r->T == 1 ? "" : "s");
    printf("  iterations          %d\n", s->iterations);
    printf("  test accuracy       %s\n", acc);
    if (s->iterations > 0)
      printf("  density             %.4f (%.1f%% kept)\n", s->density, 100.0 * s->density);
    if (s->inter_bytes_dense > 0)
      printf("  inter-node traffic  %s; dense synchronisation would have sent %s "
             "(%.1f%% less, %.1fx)\n",
             inter, dense, 100.0 * (1.0 - (double)s->inter_bytes / (double)s->inter_bytes_dense),
             s->inter_bytes ? (double)s->inter_bytes_dense / (double)s->inter_bytes : 0.0);
    else printf("  inter-node traffic  %s\n", inter);
    printf("  intra-node traffic  %s\n", intra);
    printf("  wall time           %s (%s with start-up and teardown)\n", wall, tot);
  }
  if (res->model_path[0]) printf("  model               %s\n", res->model_path);
  if (res->have_compact)
    printf("  model size          %zu parameters, %.2f MB dense; %zu parameters (%.1f%%), "
           "%.2f MB compact%s%s\n",
           res->compact.dense_params, res->compact.dense_bytes / 1e6,
           res->compact.compact_params,
           100.0 * (double)res->compact.compact_params / (double)res->compact.dense_params,
           res->compact.compact_bytes / 1e6, res->model_path[0] ? " in " : "",
           res->model_path[0] ? res->compact.compact_path : "");
  if (res->have_compact) {
    char macs[96], budget[64] = "";
    pxctl_fmt_macs(macs, sizeof macs, res->compact.dense_macs, res->compact.compact_macs);
    if (r->spec->prune && r->spec->prune->mac_keep > 0) /* what the spec asked for */
      snprintf(budget, sizeof budget, "; the budget: %.4g%% (prune.mac_keep)",
               100.0 * r->spec->prune->mac_keep);
    printf("  multiply-adds       %s%s\n", macs, budget);
  }
  if (!res->model_path[0] && res->have_summary && !strcmp(res->state, "SUCCEEDED"))
    printf("  model               none kept (use --keep or --output DIR)\n");
  if (pxctl_metrics_shown(r, res))
    printf("  metrics             %s (read with pxctl status|metrics|drift|logs|plot %s)\n",
           res->metrics_dir, r->output_dir);
  if (res->kept) printf("  run directory       %s (kept)\n", r->run_dir);
  else if (res->output_kept) printf("  run directory       removed, except %s\n", r->output_dir);
  fflush(stdout);
}

/* ---- the command ------------------------------------------------------------------------ */

static int pxctl_cpu_count(void) {
  cpu_set_t set;
  if (sched_getaffinity(0, sizeof set, &set) == 0) {
    int n = CPU_COUNT(&set);
    if (n > 0) return n;
  }
  long n = sysconf(_SC_NPROCESSORS_ONLN);
  return n > 0 ? (int)n : 1;
}

static int pxctl_make_absolute(const char *path, char *out, size_t cap) {
  if (path[0] == '/') return snprintf(out, cap, "%s", path) < (int)cap ? 0 : -1;
  char cwd[PATH_MAX];
  if (!getcwd(cwd, sizeof cwd)) return -1;
  return snprintf(out, cap, "%s/%s", cwd, path) < (int)cap ? 0 : -1;
}

/* The spec and the run's shape. 0, or the exit status of a run that ends
 * before it starts anything (everything freed). */
static int pxctl_run_load(pxctl_opts_t *o, pxctl_run_t *r, pxctl_result_t *res) {
  int rc = pxctl_load_spec(o->pos[0], &r->spec, &r->spec_text, NULL);
  if (rc) return rc;
  snprintf(res->name, sizeof res->name, "%s", r->spec->name);
  r->M = r->spec->cluster->nodes;
  r->P = r->spec->cluster->workers_per_node;
  if (r->spec->n_sweep > 0) {
    fprintf(stderr,
            "pxctl: %s: sweep: pxctl run runs one job; submit the sweep to a coordinator "
            "(pxctl submit) or remove sweep:\n",
            o->pos[0]);
    rc = PXCTL_EXIT_USAGE;
  } else if (r->M > PXCTL_RUN_MAX_NODES) {
    fprintf(stderr,
            "pxctl: %s: cluster.nodes = %d: pxctl run starts one agent per node on this "
            "machine and takes at most %d; submit the job to a cluster's coordinator instead\n",
            o->pos[0], r->M, PXCTL_RUN_MAX_NODES);
    rc = PXCTL_EXIT_USAGE;
  } else {
    int cores = pxctl_cpu_count();
    r->T = r->spec->cluster->threads_per_worker > 0 ? r->spec->cluster->threads_per_worker
                                                    : cores / (r->M * r->P);
    if (r->T < 1) r->T = 1;
    r->agents = px_calloc((size_t)r->M, sizeof *r->agents, "pxctl.agents");
    if (r->agents) return 0;
    rc = pxctl_fail("out of memory");
  }
  px_jobspec_free(r->spec);
  px_free(r->spec_text);
  return rc;
}

/* The run directory (TMPDIR or --work-dir) and the output directory
 * (--output, the spec's, or RUN_DIR/output). 0, or -1 with res->error. */
static int pxctl_run_dirs(pxctl_run_t *r, pxctl_result_t *res, const char *spec_output) {
  const pxctl_opts_t *o = r->o;
  const char *tmp = o->work_dir ? o->work_dir : getenv("TMPDIR");
  if (!tmp || !tmp[0]) tmp = "/tmp";
  char base[PATH_MAX];
  /* Room is left for the names made inside the run directory. */
  errno = 0;
  if (pxctl_make_absolute(tmp, base, sizeof base) != 0 || strlen(base) > PATH_MAX - 512 ||
      pxctl_fmt(r->run_dir, sizeof r->run_dir, "%s/pxctl-run-XXXXXX", base) != 0 ||
      !mkdtemp(r->run_dir)) {
    pxctl_fmt(res->error, sizeof res->error, "cannot make a run directory in %s: %s", tmp,
              errno ? strerror(errno) : "path too long");
    r->run_dir[0] = '\0';
    return pxctl_fail("%s", res->error), -1;
  }
  if (o->output || spec_output[0]) {
    if (pxctl_make_absolute(o->output ? o->output : spec_output, r->output_dir,
                            sizeof r->output_dir) != 0) {
      snprintf(res->error, sizeof res->error, "output directory: path too long");
      return pxctl_fail("%s", res->error), -1;
    }
  } else {
    pxctl_fmt(r->output_dir, sizeof r->output_dir, "%s/output", r->run_dir);
    r->output_defaulted = 1;
  }
  if (mkdir(r->output_dir, 0755) != 0 && errno != EEXIST) {
    pxctl_fmt(res->error, sizeof res->error, "cannot make the output directory %s: %s",
              r->output_dir, strerror(errno));
    return pxctl_fail("%s", res->error), -1;
  }
  r->spec->output_dir = r->output_dir;
  if (!strcmp(r->spec->cluster->device, "cpu"))
    fprintf(r->progress, "pxctl: run directory %s; %d node%s x %d CPU worker%s, %d thread%s each\n",
            r->run_dir, r->M, r->M == 1 ? "" : "s", r->P, r->P == 1 ? "" : "s", r->T,
            r->T == 1 ? "" : "s");
  else /* cuda or auto: the agents offer the GPUs they find */
    fprintf(r->progress, "pxctl: run directory %s; %d node%s x %d worker%s on device %s\n",
            r->run_dir, r->M, r->M == 1 ? "" : "s", r->P, r->P == 1 ? "" : "s",
            r->spec->cluster->device);
  return 0;
}

/* SubmitJob to the private coordinator. 0 or -1. */
static int pxctl_run_submit(pxctl_run_t *r) {
  Prunex__V1__SubmitJobRequest req = PRUNEX__V1__SUBMIT_JOB_REQUEST__INIT;
  req.spec = r->spec;
  req.spec_yaml = r->spec_text;
  Prunex__V1__SubmitJobResponse *resp = NULL;
  if (pxctl_signal) return -1;
  if (px_rpc_submit_job(r->ch, &req, PXCTL_RPC_MS, &resp) != PX_OK) {
    pxctl_rpc_fail(r->ch, NULL);
    return -1;
  }
  snprintf(r->job_id, sizeof r->job_id, "%s", resp->job_id);
  px_rpc_message_free(resp);
  fprintf(r->progress, "pxctl: submitted %s to the private coordinator %s\n", r->job_id,
          r->target);
  if (r->tb) {
    pxctl_tb_follow(r->tb, &r->ch, r->job_id);
    fprintf(r->progress, "pxctl: TensorBoard events go to %s\n", pxctl_tb_file(r->tb));
  }
  return 0;
}

/* Follows the job to its end; the exit status of the run. */
static int pxctl_run_follow(pxctl_run_t *r, pxctl_result_t *res) {
  int exit_code = PXCTL_EXIT_FAIL;
  void *holder = NULL;
  const Prunex__V1__Job *fin = NULL;
  px_status_t st = pxctl_watch(r->ch, r->job_id, r->progress, pxctl_run_stop, r, &holder, &fin);
  /* --tensorboard: what is left, all of it when the job is over */
  if (r->tb && pxctl_tb_sync(r->tb, r->ch, st == PX_OK && fin) != 0 && st == PX_OK && fin)
    snprintf(res->error, sizeof res->error, "%s", pxctl_last_failure());
  if (st == PX_OK && fin) {
    res->state = px_rpc_job_state_name(fin->state);
    snprintf(res->reason, sizeof res->reason, "%s", fin->reason);
    if (pxctl_job_summary(r->ch, fin, &res->sum) == PX_OK) res->have_summary = 1;
    if (fin->state == PRUNEX__V1__JOB_STATE__JOB_STATE_SUCCEEDED) exit_code = PXCTL_EXIT_OK;
    else pxctl_rank_log_tails(r);
  } else if ((st == PX_ERR_STATE && r->died) || (!pxctl_signal && pxctl_check_children(r))) {
    pxctl_report_death(r);
    snprintf(res->error, sizeof res->error, "%s ended unexpectedly", r->died->what);
  } else if (st != PX_ERR_STATE) {
    pxctl_rpc_fail(r->ch, r->job_id);
    snprintf(res->error, sizeof res->error, "lost the job's progress: %s", px_last_error());
  }
  px_rpc_message_free(holder);
  return exit_code;
}

/* After SIGINT, SIGTERM or SIGHUP: the exit status (128 + the signal). */
static int pxctl_run_interrupted(const pxctl_run_t *r, pxctl_result_t *res) {
  res->interrupted = 1;
  const char *sig = pxctl_signal == SIGINT    ? "SIGINT"
                    : pxctl_signal == SIGTERM ? "SIGTERM"
                                              : "SIGHUP";
  fprintf(stderr, "\npxctl: %s: stopping%s\n", sig,
          r->job_id[0] ? " (cancelling the job first)" : "");
  if (!res->error[0]) snprintf(res->error, sizeof res->error, "interrupted by %s", sig);
  if (!r->job_id[0]) res->state = "INTERRUPTED";
  return 128 + pxctl_signal;
}

/* A job that is still going (interrupted, or a process died) is cancelled,
 * so that the agents stop its workers themselves; its state and figures
 * so far go into res. */
static void pxctl_run_cancel(pxctl_run_t *r, pxctl_result_t *res) {
  if (!r->job_id[0] || !r->ch || pxctl_child_exited(&r->coordd)) return;
  Prunex__V1__Job *job = NULL;
  if (px_rpc_get_job(r->ch, r->job_id, PXCTL_RPC_MS, &job) != PX_OK) return;
  int s = job->state;
  Prunex__V1__CancelJobResponse *cr = NULL;
  const Prunex__V1__Job *last = job;
  if (!pxctl_job_finished(s)) {
    const char *why = pxctl_signal ? "pxctl run was interrupted" : "pxctl run is stopping";
    if (px_rpc_cancel_job(r->ch, r->job_id, why, PXCTL_RPC_MS, &cr) == PX_OK && cr->job)
      last = cr->job;
  }
  res->state = px_rpc_job_state_name(last->state);
  snprintf(res->reason, sizeof res->reason, "%s", last->reason);
  if (!res->have_summary && pxctl_job_summary(r->ch, last, &res->sum) == PX_OK)
    res->have_summary = 1;
  px_rpc_message_free(cr);
  px_rpc_message_free(job);
}

/* Agents first (they stop their workers), then the channel (so that the
 * coordinator shuts down without a client attached), the coordinator, and
 * whatever was left behind. */
static void pxctl_run_stop_all(pxctl_run_t *r) {
  pxctl_child_t *cs[PXCTL_RUN_MAX_NODES];
  int n = 0;
  for (int i = 0; i < r->M; i++) cs[n++] = &r->agents[i];
  pxctl_stop_children(cs, n, PXCTL_AGENT_GRACE_MS);
  px_rpc_channel_destroy(r->ch);
  r->ch = NULL;
  cs[0] = &r->coordd;
  pxctl_stop_children(cs, 1, PXCTL_COORDD_GRACE_MS);
  pxctl_sweep_orphans();
}

/* The final model's path, and the compact model written beside it with
 * both sizes for the summary. */
static void pxctl_run_model(const pxctl_run_t *r, pxctl_result_t *res) {
  if (!res->have_summary) return;
  snprintf(res->model_path, sizeof res->model_path, "%s", res->sum.model_path);
  if (!res->model_path[0]) {
    struct timespec t = {0, 0};
    pxctl_find_model(r->output_dir, 3, res->model_path, sizeof res->model_path, &t);
    if (!res->model_path[0] && r->run_dir[0])
      pxctl_find_model(r->run_dir, 5, res->model_path, sizeof res->model_path, &t);
  }
  if (!res->model_path[0] || strcmp(res->state, "SUCCEEDED")) return;
  char dir[PATH_MAX];
  snprintf(dir, sizeof dir, "%s", res->model_path);
  char *slash = strrchr(dir, '/');
  if (slash) *slash = '\0';
  else snprintf(dir, sizeof dir, ".");
  const char *ds = r->spec && r->spec->dataset ? r->spec->dataset->name : NULL;
  ds = ds && ds[0] ? ds : NULL;
  if (pxctl_engine_export(res->model_path, dir, 0, ds, &res->compact) == PX_OK)
    res->have_compact = 1;
  else
    fprintf(stderr, "pxctl: compact model: %s\n", px_last_error());
}

/* The run directory goes unless --keep; a default output directory with
 * the results of a successful run stays. */
static void pxctl_run_clean(const pxctl_run_t *r, pxctl_result_t *res, int exit_code) {
  if (!r->run_dir[0]) return;
  if (r->o->keep) {
    res->kept = 1;
    return;
  }
  const char *keep = NULL;
  if (exit_code == PXCTL_EXIT_OK && r->output_defaulted && pxctl_dir_has_files(r->output_dir))
    keep = r->output_dir;
  pxctl_rmtree(r->run_dir, keep);
  res->output_kept = keep != NULL;
  /* A model that lived in what was removed is gone. */
  size_t k = strlen(r->run_dir);
  if (res->model_path[0] && !strncmp(res->model_path, r->run_dir, k) &&
      !(keep && !strncmp(res->model_path, keep, strlen(keep))))
    res->model_path[0] = '\0';
}

static void pxctl_run_catch_signals(void) {
  struct sigaction sa;
  memset(&sa, 0, sizeof sa);
  sa.sa_handler = pxctl_on_signal;
  sigemptyset(&sa.sa_mask);
  sigaction(SIGINT, &sa, NULL);
  sigaction(SIGTERM, &sa, NULL);
  sigaction(SIGHUP, &sa, NULL);
  prctl(PR_SET_CHILD_SUBREAPER, 1);
}

int pxctl_cmd_run(pxctl_opts_t *o) {
  /* The private coordinator is plain text on loopback with no tokens: a
   * CA or token meant for a shared coordinator must not reach its clients
   * (this process, the agents, the workers). */
  unsetenv("PRUNEX_CA");
  unsetenv("PRUNEX_TOKEN");
  pxctl_run_t r;
  memset(&r, 0, sizeof r);
  r.o = o;
  r.progress = stderr;
  r.t0 = pxctl_mono_s();
  pxctl_result_t res;
  memset(&res, 0, sizeof res);
  res.state = "ERROR";
  int exit_code = pxctl_run_load(o, &r, &res);
  if (exit_code) return exit_code;
  char *spec_output = r.spec->output_dir; /* restored before the spec is freed */
  exit_code = PXCTL_EXIT_FAIL;
  const char *step = "";
  if (pxctl_find_program("pxcoordd", "coordinatord", r.coordd_bin, sizeof r.coordd_bin,
                         res.error, sizeof res.error) != 0 ||
      pxctl_find_program("pxagent", "agent", r.agent_bin, sizeof r.agent_bin, res.error,
                         sizeof res.error) != 0) {
    pxctl_fail("%s", res.error);
    goto teardown; /* nothing started: it only reports */
  }
  /* --tensorboard: a directory that cannot be written is said before
   * anything starts (the job is named when it is submitted) */
  if (o->tensorboard && pxctl_tb_open(o->tensorboard, NULL, &r.tb) != 0) {
    snprintf(res.error, sizeof res.error, "%s", pxctl_last_failure());
    goto teardown;
  }
  /* From here on every exit goes through teardown. */
  pxctl_run_catch_signals();
  if (pxctl_run_dirs(&r, &res, spec_output) != 0) goto teardown;
  step = "starting the coordinator";
  if (pxctl_start_coordd(&r) != 0) goto step_failed;
  if (px_rpc_channel_create(r.target, &r.ch) != PX_OK) {
    pxctl_fail("coordinator %s: %s", r.target, px_last_error());
    goto step_failed;
  }
  step = "starting the agents";
  if (pxctl_start_agents(&r) != 0) goto step_failed;
  step = "waiting for the agents";
  if (pxctl_wait_nodes(&r) != 0) goto step_failed;
  step = "submitting the job";
  if (pxctl_run_submit(&r) != 0) goto step_failed;
  step = "running the job";
  exit_code = pxctl_run_follow(&r, &res);
  goto teardown;

step_failed:
  if (!pxctl_signal && !res.error[0]) {
    const char *why = pxctl_last_failure();
    snprintf(res.error, sizeof res.error, "failed %s%s%s", step, why[0] ? ": " : "", why);
  }
teardown:
  if (pxctl_signal) exit_code = pxctl_run_interrupted(&r, &res);
  if (pxctl_tb_close(r.tb) != 0 && exit_code == PXCTL_EXIT_OK) exit_code = PXCTL_EXIT_FAIL;
  pxctl_run_cancel(&r, &res);
  pxctl_run_stop_all(&r);
  if (r.job_id[0] && r.output_dir[0]) pxctl_export_metrics(&r, &res);
  pxctl_run_model(&r, &res);
  pxctl_run_clean(&r, &res, exit_code);
  if (r.spec) r.spec->output_dir = spec_output;
  pxctl_print_result(&r, &res);
  px_free(r.agents);
  px_jobspec_free(r.spec);
  px_free(r.spec_text);
  return exit_code;
}
