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
 * stopped first), 1 when it cannot run (work directory), 2 for bad flags.
 * The flags and the config file: config.c. */
#include <errno.h>
#include <limits.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <grpc/grpc.h>

#include "agent.h"
#include "metrics.h"
#include "prunex/cuda.h"
#include "prunex/text.h"

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
