/* pxagent: the PruneX node agent, one per node (docs/architecture.md,
 * "Processes").
 *
 * Registers the node with the coordinator (host name, its devices: the CUDA
 * devices when there are any, else --cpu-workers CPU workers), heartbeats,
 * follows the node's assignment stream, starts one pxworker per assigned
 * rank, watches them and reports every exit; stops a job's workers on
 * CANCEL; survives coordinator restarts (it registers again by name). See
 * agent.h for the threads.
 *
 * Exit status: 0 after a clean shutdown (SIGTERM or SIGINT: its workers are
 * stopped first), 1 when it cannot run (work directory), 2 for bad flags. */
#include <errno.h>
#include <getopt.h>
#include <limits.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <grpc/grpc.h>

#include "agent.h"
#include "metrics.h"
#include "prunex/conf.h"
#include "prunex/cuda.h"
#include "prunex/text.h"

static void pxa_usage(FILE *f) {
  fprintf(f,
          "usage: pxagent --coordinator HOST:PORT [--config FILE] [--name NODE]\n"
          "               [--cpu-workers N] [--threads-per-worker T] [--work-dir DIR]\n"
          "               [--heartbeat-ms N] [--worker PATH] [--log-level L] [--ca FILE]\n"
          "               [--output-root DIR]...\n"
          "\n"
          "The PruneX node agent: registers this node with the coordinator, heartbeats,\n"
          "starts one pxworker per assigned rank and reports how each one ended.\n"
          "\n"
          "  --coordinator HOST:PORT  the coordinator (pxcoordd) to serve (default: the\n"
          "                           PRUNEX_COORDINATOR environment variable, else\n"
          "                           coordinator in the config file)\n"
          "  --config FILE            settings file (e.g. /etc/prunex/pxagent.conf):\n"
          "                           `key = value` lines or a YAML mapping; keys are the\n"
          "                           flags' names (coordinator, name, cpu_workers, ...,\n"
          "                           dashes or underscores); flags win\n"
          "  --name NODE              stable node name (default: the host name); an agent\n"
          "                           that registers again under it gets the same node\n"
          "  --cpu-workers N          CPU devices to offer when no GPU is found (default 1)\n"
          "  --threads-per-worker T   compute threads per worker when the job does not set\n"
          "                           cluster.threads_per_worker (default max(1, cores / N))\n"
          "  --work-dir DIR           job files (jobs/<job>/spec.pb, rank-<R>.log, the\n"
          "                           model) and metrics.db (default $STATE_DIRECTORY when\n"
          "                           set, as under systemd: /var/lib/prunex; else\n"
          "                           $TMPDIR/pxagent-<name>)\n"
          "  --heartbeat-ms N         heartbeat at least this often (default: the interval\n"
          "                           the coordinator asks for)\n"
          "  --worker PATH            the pxworker program (default: beside pxagent)\n"
          "  --log-level L            error, warn, info or debug (default info, or the\n"
          "                           PX_LOG_LEVEL environment variable)\n"
          "  --output-root DIR        a directory (absolute) under which a job's output_dir\n"
          "                           may be, besides the work directory; repeatable\n"
          "  --data-root DIR          a directory (absolute) under which a job's\n"
          "                           dataset.path may be, besides the work directory;\n"
          "                           repeatable (default " PXA_DEFAULT_DATA_ROOT ", where the\n"
          "                           data set packages install). Links are followed only\n"
          "                           while they stay inside\n"
          "  --ca FILE                PEM CA bundle: talk TLS to the coordinator and verify\n"
          "                           it (default $PRUNEX_CA; unset: plain text). The\n"
          "                           node's token comes from $PRUNEX_TOKEN (role node in\n"
          "                           the coordinator's tokens file, NAME = --name);\n"
          "                           workers get their rank's secret instead\n"
          "  --help, --version\n"
          "\n"
          "Under systemd (Type=notify) it sends READY=1 once registered, STATUS= lines,\n"
          "and WATCHDOG=1 from its event loop when WatchdogSec= is set.\n"
          "SIGTERM or SIGINT stop the workers (SIGTERM, SIGKILL after 3 s) and then the\n"
          "agent. Exit status: 0 clean shutdown, 1 runtime failure, 2 bad flags.\n");
}

static int pxa_bad_usage(const char *fmt, const char *arg) {
  fprintf(stderr, "pxagent: ");
  fprintf(stderr, fmt, arg);
  fprintf(stderr, "\n(run pxagent --help for the flags)\n");
  return 2;
}

/* Keeps a copy of a config-file value for the life of the run. */
static const char *pxa_config_keep(pxa_config_t *c, const char *v, int from_file) {
  if (!from_file) return v; /* argv outlives the run */
  if (c->nstrings >= PXA_CONFIG_STRINGS) return NULL;
  size_t n = strlen(v) + 1;
  char *copy = px_malloc(n, "agent.config");
  if (!copy) return NULL;
  memcpy(copy, v, n);
  c->strings[c->nstrings++] = copy;
  return copy;
}

/* One setting, by its config-file name (dashes already underscores), from a
 * flag (where = "--flag") or the config file (where = "FILE:LINE: key").
 * Errors name where and the value. */
static px_status_t pxa_config_apply(pxa_config_t *c, const char *key, const char *v,
                                    const char *where, int from_file) {
  if (!strcmp(key, "coordinator") || !strcmp(key, "name") || !strcmp(key, "work_dir") ||
      !strcmp(key, "worker")) {
    if (!strcmp(key, "coordinator")) {
      const char *colon = strrchr(v, ':');
      if (!colon || colon == v || !colon[1])
        return px_set_error(PX_ERR_INVALID, "%s '%s': expected HOST:PORT", where, v);
    }
    if (!v[0] || (!strcmp(key, "name") && strlen(v) > 120))
      return px_set_error(PX_ERR_INVALID, "%s '%s': %s", where, v,
                          !strcmp(key, "name") ? "1 to 120 bytes" : "must not be empty");
    const char *kept = pxa_config_keep(c, v, from_file);
    if (!kept) return px_set_error(PX_ERR_NOMEM, "%s: out of memory", where);
    if (!strcmp(key, "coordinator")) {
      c->coordinator = kept;
      c->coordinator_from = from_file ? c->config : "--coordinator";
    } else if (!strcmp(key, "name")) {
      c->name = kept;
    } else if (!strcmp(key, "work_dir")) {
      c->work_dir = kept;
    } else {
      c->worker_bin = kept;
    }
    return PX_OK;
  }
  if (!strcmp(key, "cpu_workers") || !strcmp(key, "threads_per_worker")) {
    int *dst = !strcmp(key, "cpu_workers") ? &c->cpu_workers : &c->threads_per_worker;
    if (pxa_parse_int(v, 1, 4096, dst) != 0)
      return px_set_error(PX_ERR_INVALID, "%s '%s': expected 1..4096", where, v);
    return PX_OK;
  }
  if (!strcmp(key, "heartbeat_ms")) {
    if (pxa_parse_int(v, 10, 3600000, &c->heartbeat_ms) != 0)
      return px_set_error(PX_ERR_INVALID, "%s '%s': expected 10..3600000", where, v);
    return PX_OK;
  }
  if (!strcmp(key, "log_level")) {
    static const char *const names[] = {"error", "warn", "info", "debug"};
    for (int i = 0; i < 4; i++)
      if (!strcmp(v, names[i])) {
        c->log_level = i;
        return PX_OK;
      }
    return px_set_error(PX_ERR_INVALID, "%s '%s': expected error, warn, info or debug", where, v);
  }
  if (!strcmp(key, "output_root") || !strcmp(key, "data_root")) {
    int data = !strcmp(key, "data_root");
    if (v[0] != '/' || strstr(v, "/..") || strlen(v) > 1024)
      return px_set_error(PX_ERR_INVALID, "%s '%s': expected an absolute path without '..'", where,
                          v);
    int *n = data ? &c->ndata_roots : &c->noutput_roots;
    if (*n >= PXA_MAX_ROOTS)
      return px_set_error(PX_ERR_INVALID, "%s '%s': at most %d of them", where, v, PXA_MAX_ROOTS);
    const char *kept = pxa_config_keep(c, v, from_file);
    if (!kept) return px_set_error(PX_ERR_NOMEM, "%s: out of memory", where);
    (data ? c->data_roots : c->output_roots)[(*n)++] = kept;
    return PX_OK;
  }
  if (!strcmp(key, "ca")) {
    if (access(v, R_OK) != 0)
      return px_set_error(PX_ERR_INVALID, "%s '%s': cannot read the file", where, v);
    /* Through the environment: the RPC client and the workers read it. The
     * flag wins over PRUNEX_CA, which wins over the config file. */
    const char *env = getenv("PRUNEX_CA");
    if (!from_file || !env || !env[0]) setenv("PRUNEX_CA", v, 1);
    return PX_OK;
  }
  return px_set_error(PX_ERR_INVALID, "%s: unknown setting (known: coordinator, name, "
                      "cpu_workers, threads_per_worker, work_dir, heartbeat_ms, worker, "
                      "log_level, ca, output_root, data_root)", where);
}

static px_status_t pxa_config_file_set(void *ctx, const char *key, const char *value,
                                       const char *where) {
  char w[4400];
  snprintf(w, sizeof w, "%s: %s", where, key);
  return pxa_config_apply(ctx, key, value, w, 1);
}

/* Frees the config-file strings. */
static void pxa_config_free(pxa_config_t *c) {
  for (int i = 0; i < c->nstrings; i++) px_free(c->strings[i]);
  c->nstrings = 0;
}

/* Returns -1 to go on, else the exit status. Precedence: flags, then the
 * environment (PRUNEX_COORDINATOR), then the config file, then defaults. */
static int pxa_parse_args(int argc, char **argv, pxa_config_t *c) {
  enum { O_COORD = 256, O_NAME, O_CPU, O_THREADS, O_WORK, O_HB, O_WORKER, O_LOG, O_VERSION,
         O_CONFIG, O_CA, O_ROOT, O_DATA_ROOT };
  static const struct option opts[] = {
      {"coordinator", required_argument, NULL, O_COORD},
      {"name", required_argument, NULL, O_NAME},
      {"cpu-workers", required_argument, NULL, O_CPU},
      {"threads-per-worker", required_argument, NULL, O_THREADS},
      {"work-dir", required_argument, NULL, O_WORK},
      {"heartbeat-ms", required_argument, NULL, O_HB},
      {"worker", required_argument, NULL, O_WORKER},
      {"log-level", required_argument, NULL, O_LOG},
      {"config", required_argument, NULL, O_CONFIG},
      {"ca", required_argument, NULL, O_CA},
      {"output-root", required_argument, NULL, O_ROOT},
      {"data-root", required_argument, NULL, O_DATA_ROOT},
      {"help", no_argument, NULL, 'h'},
      {"version", no_argument, NULL, O_VERSION},
      {NULL, 0, NULL, 0},
  };
  memset(c, 0, sizeof *c);
  c->cpu_workers = 1;
  c->log_level = -1;
  /* The config file first, so that flags override it wherever they are. */
  for (int i = 1; i < argc; i++) {
    if (!strcmp(argv[i], "--config") && i + 1 < argc) c->config = argv[++i];
    else if (!strncmp(argv[i], "--config=", 9)) c->config = argv[i] + 9;
    else if (!strcmp(argv[i], "--help") || !strcmp(argv[i], "-h") ||
             !strcmp(argv[i], "--version")) break;
  }
  int help = 0;
  for (int i = 1; i < argc; i++)
    help |= !strcmp(argv[i], "--help") || !strcmp(argv[i], "-h") || !strcmp(argv[i], "--version");
  if (c->config && !help && px_conf_load(c->config, pxa_config_file_set, c) != PX_OK) {
    fprintf(stderr, "pxagent: %s\n", px_last_error());
    return 2;
  }
  const char *env = getenv("PRUNEX_COORDINATOR");
  if (env && env[0]) {
    c->coordinator = env;
    c->coordinator_from = "PRUNEX_COORDINATOR";
  }
  opterr = 0;
  int o;
  while ((o = getopt_long(argc, argv, "h", opts, NULL)) != -1) {
    static const char *const keys[] = {"coordinator", "name", "cpu_workers", "threads_per_worker",
                                       "work_dir", "coordinator", "worker", "log_level"};
    const char *key = NULL, *flag = NULL;
    switch (o) {
      case 'h': pxa_usage(stdout); return 0;
      case O_VERSION: printf("pxagent %s\n", px_version()); return 0;
      case O_CONFIG: continue; /* read above */
      case O_COORD: key = keys[0]; flag = "--coordinator"; break;
      case O_NAME: key = keys[1]; flag = "--name"; break;
      case O_CPU: key = keys[2]; flag = "--cpu-workers"; break;
      case O_THREADS: key = keys[3]; flag = "--threads-per-worker"; break;
      case O_WORK: key = keys[4]; flag = "--work-dir"; break;
      case O_HB: key = "heartbeat_ms"; flag = "--heartbeat-ms"; break;
      case O_WORKER: key = keys[6]; flag = "--worker"; break;
      case O_LOG: key = keys[7]; flag = "--log-level"; break;
      case O_CA: key = "ca"; flag = "--ca"; break;
      case O_ROOT: key = "output_root"; flag = "--output-root"; break;
      case O_DATA_ROOT: key = "data_root"; flag = "--data-root"; break;
      default: return pxa_bad_usage("unknown or incomplete option '%s'", argv[optind - 1]);
    }
    if (pxa_config_apply(c, key, optarg, flag, 0) != PX_OK)
      return pxa_bad_usage("%s", px_last_error());
  }
  if (optind < argc) return pxa_bad_usage("unexpected argument '%s'", argv[optind]);
  if (!c->coordinator)
    return pxa_bad_usage("%s", "--coordinator HOST:PORT is required (or coordinator in "
                               "--config FILE, or the PRUNEX_COORDINATOR environment variable)");
  const char *colon = strrchr(c->coordinator, ':');
  if (!colon || colon == c->coordinator || !colon[1]) {
    fprintf(stderr, "pxagent: %s '%s': expected HOST:PORT\n(run pxagent --help for the flags)\n",
            c->coordinator_from ? c->coordinator_from : "coordinator", c->coordinator);
    return 2;
  }
  return -1;
}

/* ---- set-up ------------------------------------------------------------------- */

static px_status_t pxa_find_devices(pxa_agent_t *ag) {
  int ncuda = 0;
  if (px_cuda_device_count(&ncuda) != PX_OK) ncuda = 0;
  size_t n = ncuda > 0 ? (size_t)ncuda : (size_t)ag->cfg.cpu_workers;
  ag->devices = px_calloc(n, sizeof *ag->devices, "agent.devices");
  ag->device_ptrs = px_calloc(n, sizeof *ag->device_ptrs, "agent.devices");
  if (!ag->devices || !ag->device_ptrs) return PX_ERR_NOMEM;
  long pages = sysconf(_SC_PHYS_PAGES), page = sysconf(_SC_PAGESIZE);
  uint64_t ram = pages > 0 && page > 0 ? (uint64_t)pages * (uint64_t)page : 0;
  for (size_t i = 0; i < n; i++) {
    Prunex__V1__Device *d = &ag->devices[i];
    *d = (Prunex__V1__Device)PRUNEX__V1__DEVICE__INIT;
    d->index = (int32_t)i;
    d->healthy = 1;
    char name[256] = "cpu";
    if (ncuda > 0) {
      d->kind = PRUNEX__V1__DEVICE_KIND__DEVICE_KIND_CUDA;
      if (px_cuda_device_info((int)i, name, sizeof name, &d->memory_bytes) != PX_OK) {
        snprintf(name, sizeof name, "cuda:%zu", i);
        d->healthy = 0;
      }
    } else {
      d->kind = PRUNEX__V1__DEVICE_KIND__DEVICE_KIND_CPU;
      d->memory_bytes = ram / n;
    }
    size_t len = strlen(name) + 1;
    if (!(d->name = px_malloc(len, "agent.device.name"))) return PX_ERR_NOMEM;
    memcpy(d->name, name, len);
    ag->device_ptrs[i] = d;
  }
  ag->ndevices = n;
  int cores = pxa_cpu_count();
  ag->threads_per_worker = ag->cfg.threads_per_worker > 0 ? ag->cfg.threads_per_worker
                           : cores / (int)n > 1        ? cores / (int)n
                                                       : 1;
  px_log(PX_LOG_INFO, "%zu %s device%s, %d compute thread%s per worker", n,
         ncuda > 0 ? "CUDA" : "CPU", n == 1 ? "" : "s", ag->threads_per_worker,
         ag->threads_per_worker == 1 ? "" : "s");
  return PX_OK;
}

static void pxa_free_devices(pxa_agent_t *ag) {
  for (size_t i = 0; ag->devices && i < ag->ndevices; i++) px_free(ag->devices[i].name);
  px_free(ag->devices);
  px_free(ag->device_ptrs);
}

/* pxworker: --worker, else beside this program, else from PATH. */
static void pxa_find_worker(pxa_agent_t *ag) {
  if (ag->cfg.worker_bin) {
    snprintf(ag->worker_bin, sizeof ag->worker_bin, "%s", ag->cfg.worker_bin);
    return;
  }
  char self[PXA_PATH_MAX];
  ssize_t n = readlink("/proc/self/exe", self, sizeof self - 1);
  if (n > 0) {
    self[n] = '\0';
    char *slash = strrchr(self, '/');
    if (slash) {
      *slash = '\0';
      size_t len = strlen(self);
      if (len + 10 < sizeof ag->worker_bin) {
        memcpy(ag->worker_bin, self, len);
        memcpy(ag->worker_bin + len, "/pxworker", 10);
        if (access(ag->worker_bin, X_OK) == 0) return;
      }
    }
  }
  snprintf(ag->worker_bin, sizeof ag->worker_bin, "pxworker");
}

static px_status_t pxa_setup(pxa_agent_t *ag) {
  if (gethostname(ag->hostname, sizeof ag->hostname) != 0)
    snprintf(ag->hostname, sizeof ag->hostname, "localhost");
  ag->hostname[sizeof ag->hostname - 1] = '\0';
  snprintf(ag->name, sizeof ag->name, "%.120s", ag->cfg.name ? ag->cfg.name : ag->hostname);
  const char *state_dir = getenv("STATE_DIRECTORY"); /* systemd's StateDirectory= */
  if (ag->cfg.work_dir) {
    snprintf(ag->work_dir, sizeof ag->work_dir, "%s", ag->cfg.work_dir);
  } else if (state_dir && state_dir[0]) {
    /* the first of a colon-separated list */
    snprintf(ag->work_dir, sizeof ag->work_dir, "%.*s", (int)strcspn(state_dir, ":"), state_dir);
  } else {
    const char *tmp = getenv("TMPDIR");
    snprintf(ag->work_dir, sizeof ag->work_dir, "%s/pxagent-%s", tmp && tmp[0] ? tmp : "/tmp",
             ag->name);
  }
  /* Workers run in their job's directory: give them absolute paths. */
  if (ag->work_dir[0] != '/') {
    char cwd[PXA_PATH_MAX];
    if (!getcwd(cwd, sizeof cwd)) return px_set_error(PX_ERR_IO, "getcwd: %s", strerror(errno));
    size_t a = strlen(cwd), b = strlen(ag->work_dir);
    if (a + b + 2 > sizeof ag->work_dir)
      return px_set_error(PX_ERR_INVALID, "--work-dir '%s': path too long", ag->work_dir);
    memmove(ag->work_dir + a + 1, ag->work_dir, b + 1);
    memcpy(ag->work_dir, cwd, a);
    ag->work_dir[a] = '/';
  }
  if (strlen(ag->work_dir) > PXA_PATH_MAX - 512)
    return px_set_error(PX_ERR_INVALID, "--work-dir '%s': path too long", ag->work_dir);
  px_status_t st = px_mkdirs(ag->work_dir, 0755);
  if (st != PX_OK) return st;
  snprintf(ag->metrics_db, sizeof ag->metrics_db, "%s/metrics.db", ag->work_dir);
  /* Create the schema now, so that the workers of a node never race to. */
  pxa_metrics_t *m = NULL;
  if ((st = pxa_metrics_open(ag->metrics_db, &m)) != PX_OK) return st;
  pxa_metrics_close(m);
  pxa_find_worker(ag);
  return pxa_find_devices(ag);
}

/* ---- signals ------------------------------------------------------------------ */

static void pxa_on_signal(uv_signal_t *h, int signum) {
  pxa_agent_t *ag = h->data;
  if (ag->shutting_down) {
    px_log(PX_LOG_WARN, "second %s: killing the workers now", signum == SIGTERM ? "SIGTERM" : "SIGINT");
    pxa_kill_all(ag);
    return;
  }
  ag->shutting_down = 1;
  px_log(PX_LOG_INFO, "shutting down (%s)", signum == SIGTERM ? "SIGTERM" : "SIGINT");
  px_service_notify("STOPPING=1\nSTATUS=stopping the workers (%s)",
                    signum == SIGTERM ? "SIGTERM" : "SIGINT");
  pthread_mutex_lock(&ag->mu);
  ag->quiesce = 1; /* no new assignments */
  if (ag->stream) px_rpc_stream_cancel(ag->stream);
  pthread_cond_broadcast(&ag->cv);
  pthread_mutex_unlock(&ag->mu);
  pxa_stop_all(ag, "pxagent is shutting down");
}

int main(int argc, char **argv) {
  signal(SIGPIPE, SIG_IGN);
  pxa_agent_t *ag = px_calloc(1, sizeof *ag, "agent");
  if (!ag) {
    fprintf(stderr, "pxagent: out of memory\n");
    return 1;
  }
  int rc = pxa_parse_args(argc, argv, &ag->cfg);
  if (rc >= 0) {
    pxa_config_free(&ag->cfg);
    px_free(ag);
    return rc;
  }
  if (ag->cfg.log_level >= 0) px_log_set_level((px_log_level_t)ag->cfg.log_level);
  else if (!getenv("PX_LOG_LEVEL")) px_log_set_level(PX_LOG_INFO);
  /* a daemon: a cause repeated past the burst is counted, not written */
  px_log_set_rate(PX_LOG_RATE_BURST, PX_LOG_RATE_INTERVAL_MS);

  /* One gRPC reference for the whole run: the threads drop and recreate
   * their channels while the coordinator is away, and without it the last
   * channel closed would shut gRPC down each time. */
  grpc_init();
  pthread_mutex_init(&ag->mu, NULL);
  pthread_condattr_t ca;
  pthread_condattr_init(&ca);
  pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
  pthread_cond_init(&ag->cv, &ca);
  pthread_condattr_destroy(&ca);
  ag->cmds_tail = &ag->cmds;
  ag->exits_tail = &ag->exits;

  if (pxa_setup(ag) != PX_OK) {
    fprintf(stderr, "pxagent: %s\n", px_last_error());
    rc = 1;
    goto out;
  }
  px_log(PX_LOG_INFO, "pxagent %s: node '%s', coordinator %s, work directory %s, worker %s",
         px_version(), ag->name, ag->cfg.coordinator, ag->work_dir, ag->worker_bin);

  uv_loop_t loop;
  uv_loop_init(&loop);
  ag->loop = &loop;
  uv_async_init(&loop, &ag->wake, pxa_on_wake);
  ag->wake.data = ag;
  uv_timer_init(&loop, &ag->tick);
  ag->tick.data = ag;
  uv_timer_start(&ag->tick, pxa_on_tick, 100, 100);
  uv_signal_init(&loop, &ag->sigterm);
  uv_signal_init(&loop, &ag->sigint);
  ag->sigterm.data = ag->sigint.data = ag;
  uv_signal_start(&ag->sigterm, pxa_on_signal, SIGTERM);
  uv_signal_start(&ag->sigint, pxa_on_signal, SIGINT);
  ag->loop_open = 1;
  px_service_watchdog_start(&ag->watchdog, &loop);
  px_service_notify("STATUS=registering node '%s' with the coordinator at %s", ag->name,
                    ag->cfg.coordinator);

  rc = 0;
  if (pxa_session_start(ag) != PX_OK) {
    fprintf(stderr, "pxagent: %s\n", px_last_error());
    rc = 1;
    ag->shutting_down = 1; /* the tick closes the loop */
  }
  uv_run(&loop, UV_RUN_DEFAULT);
  pxa_session_stop(ag);
  if (uv_loop_close(&loop) != 0) px_log(PX_LOG_WARN, "event loop closed with handles open");
  px_log(PX_LOG_INFO, "stopped");
out:
  pxa_session_free(ag);
  pxa_free_devices(ag);
  pthread_cond_destroy(&ag->cv);
  pthread_mutex_destroy(&ag->mu);
  pxa_config_free(&ag->cfg);
  px_free(ag);
  grpc_shutdown();
  return rc;
}
