/* pxagent's worker processes, on the loop thread: an assignment START
 * becomes one pxworker per listed rank (spec written to
 * <work-dir>/jobs/<job>/spec.pb, spec-<K>.pb for attempt K > 1, output to
 * rank-<R>.log beside it, appended to by later attempts); every
 * exit is reported with its code or signal and, for a failure, the last
 * lines of the rank's log; a CANCEL (or a job the coordinator no longer
 * runs here) sends SIGTERM to the job's workers and SIGKILL
 * PXA_KILL_AFTER_MS later. A progress watchdog reports a worker that has
 * been stopped (SIGSTOP, a debugger) for PXA_HUNG_AFTER_MS as failed, naming
 * it, while it is still there: its peers are blocked waiting for it and
 * cannot fail first, so the job's reason names the hung rank; the CANCEL
 * that follows ends it.
 *
 * Restarts: the table is keyed by (job, attempt). A START for
 * attempt K of a job whose older attempt still has workers here stops them
 * and waits in that entry (`pending`) until they are all gone; a CANCEL
 * names the attempt it stops (0: every attempt). Workers get PRUNEX_ATTEMPT
 * in their environment and their exits are reported with their attempt.
 *
 * libuv lifetime rules: a worker's uv_process_t lives in its job's array,
 * and the job is freed only when the close callbacks of all its handles
 * have run. */
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "agent.h"
#include "prunex/check.h"
#include "prunex/text.h"

extern char **environ;

/* ---- the job table -------------------------------------------------------------- */

/* The entry of the job's attempt (0: its newest entry, any attempt). */
static pxa_job_t *pxa_job_find(pxa_agent_t *ag, const char *id, int attempt) {
  pxa_job_t *best = NULL;
  for (pxa_job_t *j = ag->jobs; j; j = j->next) {
    if (strcmp(j->id, id) != 0) continue;
    if (attempt > 0 && j->attempt == attempt) return j;
    if (attempt == 0 && (!best || j->attempt > best->attempt)) best = j;
  }
  return best;
}

static int pxa_job_finished(const pxa_agent_t *ag, const char *id, int attempt) {
  int n = ag->nfinished < PXA_FINISHED_MAX ? ag->nfinished : PXA_FINISHED_MAX;
  for (int i = 0; i < n; i++)
    if (ag->finished_attempt[i] == attempt && !strcmp(ag->finished[i], id)) return 1;
  return 0;
}

static void pxa_job_mark_finished(pxa_agent_t *ag, const char *id, int attempt) {
  int k = ag->nfinished % PXA_FINISHED_MAX;
  snprintf(ag->finished[k], PXA_ID_MAX, "%s", id);
  ag->finished_attempt[k] = attempt;
  ag->nfinished++;
}

/* An assignment's attempt: 1 when the coordinator predates attempts. */
static int pxa_attempt_of(const Prunex__V1__Assignment *as) {
  return as->attempt > 0 ? as->attempt : 1;
}

static int pxa_job_start(pxa_agent_t *ag, Prunex__V1__Assignment *as);

/* Publishes the ids of the jobs with live workers for the heartbeats. */
static void pxa_publish_running(pxa_agent_t *ag) {
  size_t n = 0;
  for (pxa_job_t *j = ag->jobs; j; j = j->next) n += j->nrunning > 0;
  char **ids = n ? px_calloc(n, sizeof *ids, "agent.running") : NULL;
  int *atts = n ? px_calloc(n, sizeof *atts, "agent.running.attempts") : NULL;
  size_t k = 0;
  if (!atts) {
    px_free(ids);
    ids = NULL;
  }
  for (pxa_job_t *j = ag->jobs; ids && j; j = j->next) {
    if (j->nrunning <= 0) continue;
    size_t len = strlen(j->id) + 1;
    if ((ids[k] = px_malloc(len, "agent.running.id"))) {
      memcpy(ids[k], j->id, len);
      atts[k++] = j->attempt;
    }
  }
  pthread_mutex_lock(&ag->mu);
  char **old = ag->running_ids;
  int *old_atts = ag->running_attempts;
  size_t nold = ag->nrunning_ids;
  ag->running_ids = ids;
  ag->running_attempts = atts;
  ag->nrunning_ids = k;
  pthread_mutex_unlock(&ag->mu);
  for (size_t i = 0; i < nold; i++) px_free(old[i]);
  px_free(old);
  px_free(old_atts);
  /* What `systemctl status pxagent` shows while jobs come and go. */
  int ranks = 0;
  for (pxa_job_t *j = ag->jobs; j; j = j->next) ranks += j->nrunning > 0 ? j->nrunning : 0;
  if (k == 0)
    px_service_notify("STATUS=node '%s': idle (%zu device%s)", ag->name, ag->ndevices,
                      ag->ndevices == 1 ? "" : "s");
  else
    px_service_notify("STATUS=node '%s': %d rank%s of %zu job%s running (%s%s)", ag->name, ranks,
                      ranks == 1 ? "" : "s", k, k == 1 ? "" : "s", ids[0], k > 1 ? ", ..." : "");
}

static void pxa_job_free_if_done(pxa_job_t *job) {
  if (job->nopen > 0) return;
  pxa_agent_t *ag = job->agent;
  for (pxa_job_t **p = &ag->jobs; *p; p = &(*p)->next) {
    if (*p == job) {
      *p = job->next;
      break;
    }
  }
  px_log(PX_LOG_INFO, "job %s: all workers of attempt %d on this node are gone", job->id,
         job->attempt);
  pxa_job_mark_finished(ag, job->id, job->attempt);
  Prunex__V1__Assignment *next = job->pending;
  px_free(job->workers);
  px_free(job);
  pxa_publish_running(ag);
  if (next) {
    /* the newer attempt waited for these workers to go */
    px_log(PX_LOG_INFO, "job %s: starting attempt %d", next->job_id, pxa_attempt_of(next));
    if (!pxa_job_start(ag, next)) px_rpc_message_free(next);
  }
}

/* ---- exits ----------------------------------------------------------------------- */

static void pxa_on_close(uv_handle_t *h) {
  pxa_worker_t *w = h->data;
  pxa_job_t *job = w->job;
  w->open = 0;
  job->nopen--;
  pxa_job_free_if_done(job);
}

/* The reason sent with a worker's exit: empty for a success; for a failure
 * the last line of its log first (the error, usually: the coordinator's job
 * reason keeps only the beginning), then up to PXA_TAIL_BYTES of its last
 * lines. */
static char *pxa_exit_reason(const pxa_worker_t *w, int64_t code, int sig) {
  const pxa_job_t *job = w->job;
  if (code == 0 && sig == 0) {
    /* a success may carry a note (pxworker: no usable checkpoint since ...) */
    char note[512] = "", path[sizeof w->log + 16];
    snprintf(path, sizeof path, "%s", w->log);
    char *dot = strrchr(path, '.');
    if (dot && !strcmp(dot, ".log")) {
      strcpy(dot, ".note");
      pxa_file_tail(path, note, sizeof note);
    }
    size_t n = strlen(note) + 1;
    char *r = px_malloc(n, "agent.exit.reason");
    if (r) memcpy(r, note, n);
    return r;
  }
  char tail[PXA_TAIL_BYTES + 1];
  size_t n = pxa_file_tail(w->log, tail, sizeof tail);
  const char *last = tail;
  for (const char *p = tail; n > 0 && *p; p++)
    if (*p == '\n' && p[1]) last = p + 1;
  char what[256];
  if (job->stopping)
    snprintf(what, sizeof what, "stopped by the agent (%s)", job->stop_reason);
  else if (sig)
    snprintf(what, sizeof what, "pxworker was killed by signal %d (%s)", sig, strsignal(sig));
  else
    snprintf(what, sizeof what, "pxworker exited with code %lld", (long long)code);
  size_t cap = strlen(what) + 2 * n + strlen(w->log) + 128;
  char *r = px_malloc(cap, "agent.exit.reason");
  if (!r) return NULL;
  if (n == 0)
    snprintf(r, cap, "%s; its log %s is empty", what, w->log);
  else
    snprintf(r, cap, "%s: %.*s\n--- last lines of %s:\n%s", what, 300, last, w->log, tail);
  return r;
}

static void pxa_on_exit(uv_process_t *p, int64_t exit_status, int term_signal) {
  pxa_worker_t *w = p->data;
  pxa_job_t *job = w->job;
  pxa_agent_t *ag = job->agent;
  w->running = 0;
  job->nrunning--;
  if (w->declared) { /* its failure is reported already */
    px_log(PX_LOG_INFO, "job %s: hung rank %d is gone", job->id, w->rank);
    if (job->nrunning == 0) pxa_publish_running(ag);
    uv_close((uv_handle_t *)p, pxa_on_close);
    return;
  }
  if (term_signal)
    px_log(job->stopping ? PX_LOG_INFO : PX_LOG_WARN, "job %s: rank %d was killed by signal %d",
           job->id, w->rank, term_signal);
  else
    px_log(exit_status == 0 || job->stopping ? PX_LOG_INFO : PX_LOG_WARN,
           "job %s: rank %d exited with code %lld", job->id, w->rank, (long long)exit_status);
  pxa_logship_exited(ag, job->id, w->rank);
  pxa_exit_t *e = px_calloc(1, sizeof *e, "agent.exit");
  if (e) {
    snprintf(e->job_id, sizeof e->job_id, "%s", job->id);
    e->attempt = job->attempt;
    e->rank = w->rank;
    e->exit_code = (int)exit_status;
    e->signal = term_signal;
    e->reason = pxa_exit_reason(w, exit_status, term_signal);
    pxa_report_exit(ag, e);
  } else {
    px_log(PX_LOG_ERROR, "job %s: out of memory: the exit of rank %d goes unreported", job->id,
           w->rank);
  }
  if (job->nrunning == 0) pxa_publish_running(ag);
  uv_close((uv_handle_t *)p, pxa_on_close);
}

/* Reports a rank that never ran (the agent could not start it). */
static void pxa_report_unstarted(pxa_agent_t *ag, const char *job_id, int attempt, int rank,
                                 const char *why) {
  pxa_exit_t *e = px_calloc(1, sizeof *e, "agent.exit");
  if (!e) return;
  snprintf(e->job_id, sizeof e->job_id, "%s", job_id);
  e->attempt = attempt;
  e->rank = rank;
  e->exit_code = 127;
  size_t len = strlen(why) + 1;
  if ((e->reason = px_malloc(len, "agent.exit.reason"))) memcpy(e->reason, why, len);
  pxa_report_exit(ag, e);
}

/* ---- start ----------------------------------------------------------------------- */

/* environ with PX_AGENT_PID, OMP_NUM_THREADS and PRUNEX_ATTEMPT (the job's
 * attempt) set and without the agent's own PRUNEX_TOKEN (the node
 * credential stays with the agent: each worker gets its rank's secret
 * instead, pxa_spawn); *out is one px_malloc block (array then strings). */
static int pxa_env_ours(const char *e) {
  return !strncmp(e, "PX_AGENT_PID=", 13) || !strncmp(e, "OMP_NUM_THREADS=", 16) ||
         !strncmp(e, "PRUNEX_TOKEN=", 13) || !strncmp(e, "PRUNEX_ATTEMPT=", 15);
}

static char **pxa_worker_env(int threads, int attempt) {
  size_t n = 0, bytes = 0;
  for (char **e = environ; *e; e++) {
    if (pxa_env_ours(*e)) continue;
    n++;
    bytes += strlen(*e) + 1;
  }
  char extra[3][64];
  snprintf(extra[0], sizeof extra[0], "PX_AGENT_PID=%ld", (long)getpid());
  snprintf(extra[1], sizeof extra[1], "OMP_NUM_THREADS=%d", threads);
  snprintf(extra[2], sizeof extra[2], "PRUNEX_ATTEMPT=%d", attempt);
  bytes += strlen(extra[0]) + strlen(extra[1]) + strlen(extra[2]) + 3;
  char **env = px_malloc((n + 4) * sizeof *env + bytes, "agent.worker.env");
  if (!env) return NULL;
  char *s = (char *)(env + n + 4);
  size_t k = 0;
  for (char **e = environ; *e; e++) {
    if (pxa_env_ours(*e)) continue;
    size_t len = strlen(*e) + 1;
    memcpy(s, *e, len);
    env[k++] = s;
    s += len;
  }
  for (int i = 0; i < 3; i++) {
    size_t len = strlen(extra[i]) + 1;
    memcpy(s, extra[i], len);
    env[k++] = s;
    s += len;
  }
  env[k] = NULL;
  return env;
}

/* Where an attempt's spec is written: spec.pb for attempt 1 (as before
 * restarts existed), spec-<K>.pb for attempt K. Its existence also says
 * that an agent on this work directory started the attempt. Returns the
 * length snprintf would write. */
static size_t pxa_spec_path(const pxa_agent_t *ag, const char *job_id, int attempt, char *out,
                            size_t cap) {
  int n = attempt <= 1 ? snprintf(out, cap, "%s/jobs/%s/spec.pb", ag->work_dir, job_id)
                       : snprintf(out, cap, "%s/jobs/%s/spec-%d.pb", ag->work_dir, job_id, attempt);
  return n < 0 ? cap : (size_t)n;
}

/* The root a read path p of the spec must stay under: for a relative p
 * the job's directory (into jd[cap]), else the longest of this node's data
 * roots (--data-root, default PXA_DEFAULT_DATA_ROOT) and its work directory
 * that p is under; NULL when none. */
static const char *pxa_read_root(const pxa_agent_t *ag, const Prunex__V1__Assignment *as,
                                 const char *p, char *jd, size_t cap) {
  if (p[0] != '/') {
    snprintf(jd, cap, "%s/jobs/%s", ag->work_dir, as->job_id);
    return jd;
  }
  static const char *const def[1] = {PXA_DEFAULT_DATA_ROOT};
  const char *const *roots = ag->cfg.ndata_roots ? ag->cfg.data_roots : def;
  int n = ag->cfg.ndata_roots ? ag->cfg.ndata_roots : 1;
  const char *root = pxa_path_is_under(p, ag->work_dir) ? ag->work_dir : NULL;
  for (int i = 0; i < n; i++)
    if (pxa_path_is_under(p, roots[i]) && (!root || strlen(roots[i]) > strlen(root)))
      root = roots[i];
  return root;
}

/* PX_ERR_INVALID naming what when p has a ".." component. */
static px_status_t pxa_no_dotdot(const char *p, const char *what) {
  for (const char *c = p; *c;) {
    const char *e = strchr(c, '/');
    size_t len = e ? (size_t)(e - c) : strlen(c);
    if (len == 2 && c[0] == '.' && c[1] == '.')
      return px_set_error(PX_ERR_INVALID, "%s '%s': '..' is not allowed", what, p);
    if (!e) break;
    c = e + 1;
  }
  return PX_OK;
}

/* dataset.path and model.onnx (what = the field) must be under one of this node's data roots (--data-root,
 * default PXA_DEFAULT_DATA_ROOT) or its work directory, without leaving it
 * through a link: jobs must not read what the agent's user can read
 * elsewhere (/etc, other jobs' keys). A relative path is under the job's
 * directory (the worker's cwd) and may not hold "..". */
static px_status_t pxa_check_read_path(const pxa_agent_t *ag, const Prunex__V1__Assignment *as,
                                       const char *p, const char *what) {
  if (!p || !p[0]) return PX_OK;
  PX_CHECK(pxa_no_dotdot(p, what));
  char jd[PXA_PATH_MAX + 200];
  const char *root = pxa_read_root(ag, as, p, jd, sizeof jd);
  if (p[0] != '/') {
    char full[2 * PXA_PATH_MAX + 200];
    snprintf(full, sizeof full, "%s/%s", jd, p);
    return pxa_check_beneath(jd, full, what);
  }
  if (!root) {
    const char *def[1] = {PXA_DEFAULT_DATA_ROOT};
    const char *const *roots = ag->cfg.ndata_roots ? ag->cfg.data_roots : def;
    int n = ag->cfg.ndata_roots ? ag->cfg.ndata_roots : 1;
    char list[1024] = "";
    for (int i = 0; i < n; i++)
      snprintf(list + strlen(list), sizeof list - strlen(list), "%s, ", roots[i]);
    return px_set_error(PX_ERR_INVALID,
                        "%s '%s' is not under this node's data roots (%s%s): nothing "
                        "read (pxagent --data-root DIR allows more)",
                        what, p, list, ag->work_dir);
  }
  return pxa_check_beneath(root, p, what);
}

/* The root dataset.cache_dir p must stay under: for a relative
 * p the job's directory (into jd[cap]), else the longest of this node's
 * work directory, --output-root directories (where jobs may write) and
 * data roots (where the default cache, beside the data, goes) that p is
 * under; NULL when none. The worker makes the directory beneath it
 * (--cache-root). */
static const char *pxa_cache_root(const pxa_agent_t *ag, const Prunex__V1__Assignment *as,
                                  const char *p, char *jd, size_t cap) {
  const char *root = pxa_read_root(ag, as, p, jd, cap);
  if (p[0] != '/') return root;
  for (int i = 0; i < ag->cfg.noutput_roots; i++)
    if (pxa_path_is_under(p, ag->cfg.output_roots[i]) &&
        (!root || strlen(ag->cfg.output_roots[i]) > strlen(root)))
      root = ag->cfg.output_roots[i];
  return root;
}

/* dataset.cache_dir, where the worker writes the image folder's cache,
 * must be under pxa_cache_root's root without leaving it through a link:
 * a job must not write where the agent's user may write elsewhere. */
static px_status_t pxa_check_cache_dir(const pxa_agent_t *ag, const Prunex__V1__Assignment *as) {
  const char *p = as->spec->dataset ? as->spec->dataset->cache_dir : NULL;
  if (!p || !p[0]) return PX_OK;
  PX_CHECK(pxa_no_dotdot(p, "dataset.cache_dir"));
  char jd[PXA_PATH_MAX + 200];
  const char *root = pxa_cache_root(ag, as, p, jd, sizeof jd);
  if (p[0] != '/') {
    char full[2 * PXA_PATH_MAX + 200];
    snprintf(full, sizeof full, "%s/%s", jd, p);
    return pxa_check_beneath(jd, full, "dataset.cache_dir");
  }
  if (!root)
    return px_set_error(PX_ERR_INVALID,
                        "dataset.cache_dir '%s' is not under this node's work directory (%s), "
                        "an --output-root or a --data-root directory: nothing written (a "
                        "relative cache_dir is under the job's directory)",
                        p, ag->work_dir);
  return pxa_check_beneath(root, p, "dataset.cache_dir");
}

static px_status_t pxa_check_dataset_path(const pxa_agent_t *ag,
                                          const Prunex__V1__Assignment *as) {
  PX_CHECK(pxa_check_read_path(ag, as, as->spec->dataset ? as->spec->dataset->path : NULL,
                               "dataset.path"));
  PX_CHECK(pxa_check_cache_dir(ag, as));
  return pxa_check_read_path(ag, as, as->spec->model ? as->spec->model->onnx : NULL,
                             "model.onnx");
}

/* Writes the job's directory and spec; fails with the reason in the error. */
static px_status_t pxa_prepare_job(pxa_agent_t *ag, const Prunex__V1__Assignment *as, char *dir,
                                   size_t dcap, char *spec_path, size_t scap) {
  /* The coordinator checked output_dir against the roots nodes reported
   * at submission; a node that registered since may allow less. */
  if (as->spec->output_dir[0] &&
      !pxa_output_dir_allowed(as->spec->output_dir, ag->work_dir, ag->cfg.output_roots,
                              ag->cfg.noutput_roots))
    return px_set_error(PX_ERR_INVALID,
                        "output_dir '%s' is not under this node's work directory (%s) or an "
                        "--output-root: nothing written",
                        as->spec->output_dir, ag->work_dir);
  /* Textually under a root is not enough: a symbolic link below the root
   * (made by a user who may write there) could lead anywhere, and agents
   * often run as root. The directory is made here, resolved beneath its
   * root, before any worker writes to it. */
  if (as->spec->output_dir[0] == '/') {
    const char *root = pxa_output_root_of(as->spec->output_dir, ag->work_dir,
                                          ag->cfg.output_roots, ag->cfg.noutput_roots);
    if (root) PX_CHECK(pxa_mkdirs_beneath(root, as->spec->output_dir));
  }
  if ((size_t)snprintf(dir, dcap, "%s/jobs/%s", ag->work_dir, as->job_id) >= dcap ||
      pxa_spec_path(ag, as->job_id, pxa_attempt_of(as), spec_path, scap) >= scap)
    return px_set_error(PX_ERR_INVALID, "job %s: path too long", as->job_id);
  PX_CHECK(px_mkdirs(dir, 0755));
  PX_CHECK(pxa_check_dataset_path(ag, as));
  size_t len = protobuf_c_message_get_packed_size(&as->spec->base);
  uint8_t *buf = px_malloc(len ? len : 1, "agent.spec");
  if (!buf) return PX_ERR_NOMEM;
  protobuf_c_message_pack(&as->spec->base, buf);
  px_status_t st = px_file_write_atomic(spec_path, buf, len, 0644, 0);
  px_free(buf);
  return st;
}

static int pxa_threads_for(const pxa_agent_t *ag, const Prunex__V1__Assignment *as) {
  if (as->spec->cluster && as->spec->cluster->threads_per_worker > 0)
    return as->spec->cluster->threads_per_worker;
  return ag->threads_per_worker;
}

/* The rank's log file, opened for the worker's stdout and stderr: a later
 * attempt, or ranks that join the attempt again, append (the earlier lines
 * say why those ended). */
static px_status_t pxa_open_rank_log(pxa_job_t *job, pxa_worker_t *w, const char *dir, int *fd) {
  snprintf(w->log, sizeof w->log, "%s/rank-%d.log", dir, w->rank);
  snprintf(w->progress, sizeof w->progress, "%s/rank-%d.progress", dir, w->rank);
  unlink(w->progress); /* an earlier attempt's */
  int append = job->attempt > 1 || job->join_epoch > 0;
  *fd = open(w->log, O_WRONLY | O_CREAT | O_CLOEXEC | (append ? O_APPEND : O_TRUNC), 0644);
  if (*fd < 0) return px_set_error(PX_ERR_IO, "%s: cannot create: %s", w->log, strerror(errno));
  if (append) {
    char mark[160];
    int m = job->join_epoch > 0
                ? snprintf(mark, sizeof mark, "--- pxagent: joins attempt %d of job %s in "
                           "membership epoch %d here ---\n", job->attempt, job->id,
                           job->join_epoch)
                : snprintf(mark, sizeof mark, "--- pxagent: attempt %d of job %s starts here "
                           "---\n", job->attempt, job->id);
    if (m > 0 && write(*fd, mark, (size_t)m) < 0)
      px_log(PX_LOG_WARN, "%s: cannot write: %s", w->log, strerror(errno));
  }
  return PX_OK;
}

/* pxworker's command line for one rank; the strings live in the struct. */
typedef struct {
  char *args[32];
  char rank[16], lrank[16], dev[16], world[16], node[16], nodes[16], thr[16], leaders[1024];
  char join[16];
  char droot[PXA_PATH_MAX + 200], croot[PXA_PATH_MAX + 200];
} pxa_worker_argv_t;

static void pxa_worker_argv(pxa_agent_t *ag, pxa_job_t *job, const pxa_worker_t *w,
                            const Prunex__V1__Assignment *as, const char *spec_path, int threads,
                            pxa_worker_argv_t *v) {
  snprintf(v->rank, sizeof v->rank, "%d", w->rank);
  snprintf(v->lrank, sizeof v->lrank, "%d", w->local_rank);
  snprintf(v->dev, sizeof v->dev, "%d", w->device_index);
  snprintf(v->world, sizeof v->world, "%d", as->world_size);
  snprintf(v->node, sizeof v->node, "%d", as->node_index);
  snprintf(v->nodes, sizeof v->nodes, "%d", as->num_nodes);
  snprintf(v->thr, sizeof v->thr, "%d", threads);
  v->leaders[0] = '\0';
  if ((int)as->n_leader_ranks == as->num_nodes) {
    size_t used = 0;
    for (size_t i = 0; i < as->n_leader_ranks && used < sizeof v->leaders; i++)
      used += (size_t)snprintf(v->leaders + used, sizeof v->leaders - used, "%s%d", i ? "," : "",
                               as->leader_ranks[i]);
    if (used >= sizeof v->leaders) v->leaders[0] = '\0';
  }
  const char *coord = as->coordinator[0] ? as->coordinator : ag->cfg.coordinator;
  char *const fixed[] = {ag->worker_bin, "--coordinator", (char *)coord, "--job", job->id,
                         "--rank", v->rank, "--local-rank", v->lrank, "--device-index", v->dev,
                         "--world-size", v->world, "--node-index", v->node, "--num-nodes",
                         v->nodes, "--spec", (char *)spec_path, "--threads", v->thr,
                         "--work-dir", ag->work_dir, "--metrics-db", ag->metrics_db};
  int n = 0;
  for (size_t i = 0; i < sizeof fixed / sizeof fixed[0]; i++) v->args[n++] = fixed[i];
  if (v->leaders[0]) {
    v->args[n++] = "--leaders";
    v->args[n++] = v->leaders;
  }
  if (as->join_epoch > 0) { /* the node joins the running attempt (elastic) */
    snprintf(v->join, sizeof v->join, "%d", as->join_epoch);
    v->args[n++] = "--join-epoch";
    v->args[n++] = v->join;
  }
  /* the root dataset.path was allowed under (pxa_check_read_path): the
   * worker opens every file of an image folder beneath it */
  const char *dp = as->spec->dataset ? as->spec->dataset->path : NULL;
  const char *root = dp && dp[0] ? pxa_read_root(ag, as, dp, v->droot, sizeof v->droot) : NULL;
  if (root) {
    if (root != v->droot) snprintf(v->droot, sizeof v->droot, "%s", root);
    v->args[n++] = "--data-root";
    v->args[n++] = v->droot;
  }
  /* the root dataset.cache_dir was allowed under (pxa_check_cache_dir) */
  const char *cd = as->spec->dataset ? as->spec->dataset->cache_dir : NULL;
  root = cd && cd[0] ? pxa_cache_root(ag, as, cd, v->croot, sizeof v->croot) : NULL;
  if (root) {
    if (root != v->croot) snprintf(v->croot, sizeof v->croot, "%s", root);
    v->args[n++] = "--cache-root";
    v->args[n++] = v->croot;
  }
  v->args[n] = NULL;
}

/* The worker's environment: the agent's plus the rank's secret
 * as PRUNEX_TOKEN, never in argv (which every user of the host can read).
 * *wenv and *tok are NULL when the rank has no secret; the caller wipes
 * and frees them. */
static px_status_t pxa_rank_env(const Prunex__V1__Assignment *as, int rank, char **env,
                                char ***wenv, char **tok) {
  *wenv = NULL;
  *tok = NULL;
  const char *secret = NULL;
  for (size_t i = 0; i < as->n_ranks; i++)
    if (as->ranks[i]->rank == rank) secret = as->ranks[i]->secret;
  if (!secret || !secret[0]) return PX_OK;
  size_t ne = 0;
  while (env[ne]) ne++;
  *wenv = px_malloc((ne + 2) * sizeof **wenv, "agent.worker.env.rank");
  *tok = px_malloc(strlen(secret) + 16, "agent.worker.env.token");
  if (!*wenv || !*tok) {
    px_free(*wenv);
    px_free(*tok);
    *wenv = NULL;
    *tok = NULL;
    return px_set_error(PX_ERR_NOMEM, "out of memory");
  }
  memcpy(*wenv, env, ne * sizeof **wenv);
  snprintf(*tok, strlen(secret) + 16, "PRUNEX_TOKEN=%s", secret);
  (*wenv)[ne] = *tok;
  (*wenv)[ne + 1] = NULL;
  return PX_OK;
}

static px_status_t pxa_spawn(pxa_agent_t *ag, pxa_job_t *job, pxa_worker_t *w,
                             const Prunex__V1__Assignment *as, const char *dir,
                             const char *spec_path, char **env, int threads) {
  int fd;
  PX_CHECK(pxa_open_rank_log(job, w, dir, &fd));
  pxa_worker_argv_t v;
  pxa_worker_argv(ag, job, w, as, spec_path, threads, &v);
  char **wenv, *tok;
  if (pxa_rank_env(as, w->rank, env, &wenv, &tok) != PX_OK) {
    close(fd);
    return PX_ERR_NOMEM;
  }
  uv_stdio_container_t stdio[3];
  stdio[0].flags = UV_IGNORE;
  stdio[1].flags = UV_INHERIT_FD;
  stdio[1].data.fd = fd;
  stdio[2].flags = UV_INHERIT_FD;
  stdio[2].data.fd = fd;
  uv_process_options_t o;
  memset(&o, 0, sizeof o);
  o.exit_cb = pxa_on_exit;
  o.file = ag->worker_bin;
  o.args = v.args;
  o.env = wenv ? wenv : env;
  o.cwd = dir;
  o.stdio_count = 3;
  o.stdio = stdio;
  w->proc.data = w;
  int rc = uv_spawn(ag->loop, &w->proc, &o);
  if (tok) {
    memset(tok, 0, strlen(tok));
    px_free(tok);
  }
  px_free(wenv);
  close(fd);
  /* the handle is initialised either way and must be closed */
  w->open = 1;
  job->nopen++;
  if (rc != 0) {
    uv_close((uv_handle_t *)&w->proc, pxa_on_close);
    return px_set_error(PX_ERR_IO, "cannot start %s: %s", ag->worker_bin, uv_strerror(rc));
  }
  w->running = 1;
  job->nrunning++;
  px_log(PX_LOG_INFO,
         "job %s: started rank %d of attempt %d (local rank %d, device %d, pid %d, %d thread%s),"
         " log %s",
         job->id, w->rank, job->attempt, w->local_rank, w->device_index, w->proc.pid, threads,
         threads == 1 ? "" : "s", w->log);
  pxa_logship_add(ag, job->id, w->rank, w->log);
  return PX_OK;
}

static void pxa_job_stop(pxa_job_t *job, const char *reason);

/* Every rank of the assignment reported as never started (why), and the
 * attempt marked finished here. */
static void pxa_fail_unstarted(pxa_agent_t *ag, const Prunex__V1__Assignment *as, int attempt,
                               const char *why) {
  for (size_t i = 0; i < as->n_ranks; i++)
    pxa_report_unstarted(ag, as->job_id, attempt, as->ranks[i]->rank, why);
  pxa_job_mark_finished(ag, as->job_id, attempt);
}

/* An older attempt still has workers here: they go first (the new ranks
 * would share their devices, logs and checkpoints), and as waits in the
 * newest entry. Returns 1 when it kept as, 0 when a newer one waits. */
static int pxa_job_defer(pxa_agent_t *ag, pxa_job_t *newest, Prunex__V1__Assignment *as,
                         int attempt) {
  char why[96];
  snprintf(why, sizeof why, "attempt %d of the job starts", attempt);
  for (pxa_job_t *j = ag->jobs; j; j = j->next)
    if (!strcmp(j->id, as->job_id)) pxa_job_stop(j, why);
  if (newest->pending) {
    if (pxa_attempt_of(newest->pending) > attempt) return 0;
    px_rpc_message_free(newest->pending);
  }
  newest->pending = as;
  px_log(PX_LOG_INFO, "job %s: attempt %d waits for the %d worker%s of attempt %d to end",
         as->job_id, attempt, newest->nrunning, newest->nrunning == 1 ? "" : "s",
         newest->attempt);
  return 1;
}

/* Starts the assignment's ranks. Returns 1 when it kept as (pending in an
 * older attempt's entry), 0 when the caller still owns it. */
static int pxa_job_start(pxa_agent_t *ag, Prunex__V1__Assignment *as) {
  if (ag->shutting_down) return 0;
  if (!as->job_id[0] || !as->spec || as->n_ranks == 0 || as->num_nodes < 1 ||
      as->world_size < 1) {
    px_log(PX_LOG_WARN, "ignoring an incomplete START assignment (job '%s')", as->job_id);
    return 0;
  }
  int attempt = pxa_attempt_of(as);
  /* a node that joins the attempt again (its ranks left it, given to a
   * preemption or dropped, and have exited) starts new ones */
  int rejoin = as->join_epoch > 0;
  if (pxa_job_find(ag, as->job_id, attempt) ||
      (!rejoin && pxa_job_finished(ag, as->job_id, attempt))) {
    px_log(PX_LOG_INFO, "job %s: attempt %d already started here; START ignored", as->job_id,
           attempt);
    return 0;
  }
  pxa_job_t *newest = pxa_job_find(ag, as->job_id, 0);
  if (newest && newest->attempt > attempt) {
    px_log(PX_LOG_INFO, "job %s: attempt %d runs here; START of attempt %d ignored", as->job_id,
           newest->attempt, attempt);
    return 0;
  }
  if (newest) return pxa_job_defer(ag, newest, as, attempt);
  char dir[PXA_PATH_MAX + 256], spec_path[PXA_PATH_MAX + 300];
  pxa_spec_path(ag, as->job_id, attempt, dir, sizeof dir);
  struct stat sb;
  /* (a node that joins the running attempt again, join_epoch, starts new
   * ranks there: the coordinator placed them, knowing the old ones gone) */
  if (as->join_epoch <= 0 && stat(dir, &sb) == 0) {
    /* An earlier agent on this work directory ran the job: its workers died
     * with it (PR_SET_PDEATHSIG), and the survivors elsewhere cannot take
     * new ones in. The coordinator must fail the job. */
    char why[256];
    snprintf(why, sizeof why,
             "pxagent restarted (now pid %ld) while this rank ran on node '%s': its worker is "
             "gone", (long)getpid(), ag->name);
    px_log(PX_LOG_WARN, "job %s: %s", as->job_id, why);
    pxa_fail_unstarted(ag, as, attempt, why);
    return 0;
  }
  px_status_t st = pxa_prepare_job(ag, as, dir, sizeof dir, spec_path, sizeof spec_path);
  if (st != PX_OK) {
    char why[512];
    snprintf(why, sizeof why, "pxagent on node '%s' cannot prepare the job: %s", ag->name,
             px_last_error());
    px_log(PX_LOG_ERROR, "job %s: %s", as->job_id, why);
    pxa_fail_unstarted(ag, as, attempt, why);
    return 0;
  }
  pxa_job_t *job = px_calloc(1, sizeof *job, "agent.job");
  pxa_worker_t *ws = px_calloc(as->n_ranks, sizeof *ws, "agent.workers");
  int threads = pxa_threads_for(ag, as);
  char **env = pxa_worker_env(threads, attempt);
  if (!job || !ws || !env) {
    px_log(PX_LOG_ERROR, "job %s: out of memory", as->job_id);
    pxa_fail_unstarted(ag, as, attempt, "pxagent: out of memory");
    px_free(job);
    px_free(ws);
    px_free(env);
    return 0;
  }
  job->agent = ag;
  job->attempt = attempt;
  job->join_epoch = as->join_epoch;
  snprintf(job->id, sizeof job->id, "%s", as->job_id);
  job->workers = ws;
  job->nworkers = (int)as->n_ranks;
  job->next = ag->jobs;
  ag->jobs = job;
  for (int i = 0; i < job->nworkers; i++) {
    pxa_worker_t *w = &ws[i];
    w->job = job;
    w->rank = as->ranks[i]->rank;
    w->local_rank = as->ranks[i]->local_rank;
    w->device_index = as->ranks[i]->device_index;
    if (pxa_spawn(ag, job, w, as, dir, spec_path, env, threads) != PX_OK) {
      char why[600];
      snprintf(why, sizeof why, "pxagent on node '%s': %s", ag->name, px_last_error());
      px_log(PX_LOG_ERROR, "job %s: rank %d: %s", job->id, w->rank, why);
      pxa_report_unstarted(ag, job->id, job->attempt, w->rank, why);
    }
  }
  px_free(env);
  pxa_publish_running(ag);
  /* with no handle left (nothing could even be initialised) the job ends now */
  if (job->nopen == 0) pxa_job_free_if_done(job);
  return 0;
}

/* ---- stop ------------------------------------------------------------------------ */

static void pxa_job_stop(pxa_job_t *job, const char *reason) {
  if (job->stopping) return;
  job->stopping = 1;
  snprintf(job->stop_reason, sizeof job->stop_reason, "%s", reason);
  job->kill_at_ms = pxa_now_ms() + PXA_KILL_AFTER_MS;
  px_log(PX_LOG_INFO, "job %s: stopping the %d worker%s of attempt %d: %s", job->id,
         job->nrunning, job->nrunning == 1 ? "" : "s", job->attempt, reason);
  for (int i = 0; i < job->nworkers; i++)
    if (job->workers[i].running) uv_process_kill(&job->workers[i].proc, SIGTERM);
}

static void pxa_job_kill(pxa_job_t *job) {
  job->killed = 1;
  for (int i = 0; i < job->nworkers; i++) {
    if (!job->workers[i].running) continue;
    px_log(PX_LOG_WARN, "job %s: rank %d ignored SIGTERM: SIGKILL", job->id, job->workers[i].rank);
    uv_process_kill(&job->workers[i].proc, SIGKILL);
  }
}

void pxa_stop_all(pxa_agent_t *ag, const char *reason) {
  for (pxa_job_t *j = ag->jobs; j; j = j->next) pxa_job_stop(j, reason);
}

void pxa_kill_all(pxa_agent_t *ag) {
  for (pxa_job_t *j = ag->jobs; j; j = j->next) pxa_job_kill(j);
}

/* ---- loop callbacks ----------------------------------------------------------------- */

void pxa_on_wake(uv_async_t *h) {
  pxa_agent_t *ag = h->data;
  pthread_mutex_lock(&ag->mu);
  pxa_cmd_t *c = ag->cmds;
  ag->cmds = NULL;
  ag->cmds_tail = &ag->cmds;
  pthread_mutex_unlock(&ag->mu);
  while (c) {
    pxa_cmd_t *next = c->next;
    if (c->kind == PXA_CMD_START) {
      if (pxa_job_start(ag, c->assignment)) c->assignment = NULL; /* kept pending */
    } else {
      /* attempt 0: every attempt of the job; else only that one (a newer
       * attempt that already runs here is left alone). */
      int any = 0;
      for (pxa_job_t *j = ag->jobs; j; j = j->next) {
        if (strcmp(j->id, c->job_id) != 0 || (c->attempt > 0 && j->attempt != c->attempt))
          continue;
        any = 1;
        if (c->attempt == 0 && j->pending) {
          px_rpc_message_free(j->pending); /* the whole job stops */
          j->pending = NULL;
        }
        pxa_job_stop(j, c->reason);
      }
      /* a START of that attempt arriving later must not run it */
      if (!any && c->attempt > 0 && !pxa_job_finished(ag, c->job_id, c->attempt))
        pxa_job_mark_finished(ag, c->job_id, c->attempt);
    }
    px_rpc_message_free(c->assignment);
    px_free(c);
    c = next;
  }
}

/* The scheduler state ('R', 'S', 'T', ...) and the CPU time (user +
 * system, in clock ticks) of a process's main thread from its stat file;
 * 0 and -1 when it cannot be read. The command name may hold spaces and
 * parentheses: the fields follow the last ')'. */
static void pxa_proc_stat(int pid, char *state, int64_t *cpu) {
  *state = 0;
  *cpu = -1;
  char path[64], buf[1024];
  /* the main thread's (its tid is the pid): it trains and polls the
   * network; helper threads (the data loader, UCX's, gRPC's) may wake up
   * now and then in a process whose training is stuck */
  snprintf(path, sizeof path, "/proc/%d/task/%d/stat", pid, pid);
  int fd = open(path, O_RDONLY | O_CLOEXEC);
  if (fd < 0) return;
  ssize_t n = read(fd, buf, sizeof buf - 1);
  close(fd);
  if (n <= 0) return;
  buf[n] = '\0';
  char *p = strrchr(buf, ')');
  if (!p || p[1] != ' ') return;
  *state = p[2];
  /* after ") ": state ppid pgrp session tty_nr tpgid flags minflt cminflt
   * majflt cmajflt utime stime */
  long long ut = 0, st = 0;
  if (sscanf(p + 2, "%*c %*d %*d %*d %*d %*d %*u %*u %*u %*u %*u %lld %lld", &ut, &st) == 2)
    *cpu = ut + st;
}

static void pxa_declare_hung(pxa_agent_t *ag, pxa_job_t *j, pxa_worker_t *w, const char *why) {
  w->declared = 1;
  px_log(PX_LOG_WARN, "job %s: rank %d (pid %d) is hung: %s", j->id, w->rank, w->proc.pid, why);
  pxa_exit_t *e = px_calloc(1, sizeof *e, "agent.exit");
  char *r = px_malloc(320, "agent.exit.reason");
  if (!e || !r) {
    px_free(e);
    px_free(r);
    return;
  }
  snprintf(r, 320, "hung: pxworker (pid %d) %s; reported by the agent's progress watchdog",
           w->proc.pid, why);
  snprintf(e->job_id, sizeof e->job_id, "%s", j->id);
  e->attempt = j->attempt;
  e->rank = w->rank;
  e->exit_code = -2;
  e->reason = r;
  pxa_report_exit(ag, e);
}

/* Declares w hung once it has stayed in one state (since *since, set to now
 * the first time) for limit ms; the reason reads "what for N s after". */
static void pxa_hung_after(pxa_agent_t *ag, pxa_job_t *j, pxa_worker_t *w, int64_t *since,
                           int64_t now, int64_t limit, const char *what, const char *after) {
  if (!*since) *since = now;
  if (now - *since < limit) return;
  char why[160];
  snprintf(why, sizeof why, "%s for %lld s%s", what, (long long)((now - *since) / 1000), after);
  pxa_declare_hung(ag, j, w, why);
}

/* A worker that trains and has used no CPU at all for PXA_STALLED_AFTER_MS
 * is blocked for good (a deadlock, a kernel wait): a rank waiting for a
 * peer polls its network and uses some CPU, so its stuck peer is the one
 * named. The rank-R.progress file says when training began and ended (the
 * waits before the first iteration and after the last, on peers and on the
 * coordinator, are not watched). */
static void pxa_watch_stall(pxa_agent_t *ag, pxa_job_t *j, pxa_worker_t *w, int64_t cpu,
                            int64_t now) {
  struct stat sb;
  int there = stat(w->progress, &sb) == 0;
  if (w->training == 0 && there) w->training = 1;
  else if (w->training == 1 && !there) w->training = 2;
  if (w->training != 1) return;
  if (cpu < 0 || cpu != w->cpu_ticks) {
    w->cpu_ticks = cpu;
    w->idle_since_ms = 0;
    return;
  }
  pxa_hung_after(ag, j, w, &w->idle_since_ms, now, PXA_STALLED_AFTER_MS, "used no CPU",
                 " while training (deadlocked or blocked)");
}

/* Reports a worker that has been stopped, or has stalled, too long as
 * failed. */
static void pxa_watchdog(pxa_agent_t *ag, int64_t now) {
  for (pxa_job_t *j = ag->jobs; j; j = j->next) {
    if (j->stopping) continue;
    for (int i = 0; i < j->nworkers; i++) {
      pxa_worker_t *w = &j->workers[i];
      if (!w->running || w->declared) continue;
      char state;
      int64_t cpu;
      pxa_proc_stat(w->proc.pid, &state, &cpu);
      if (state != 'T' && state != 't') {
        w->stopped_since_ms = 0;
        pxa_watch_stall(ag, j, w, cpu, now);
        continue;
      }
      w->idle_since_ms = 0; /* a stopped process is the other rule's */
      pxa_hung_after(ag, j, w, &w->stopped_since_ms, now, PXA_HUNG_AFTER_MS,
                     "has been stopped (SIGSTOP or a debugger)", "");
    }
  }
}

void pxa_on_tick(uv_timer_t *t) {
  pxa_agent_t *ag = t->data;
  int64_t now = pxa_now_ms();
  if (now - ag->watchdog_ms >= PXA_WATCHDOG_EVERY_MS) {
    ag->watchdog_ms = now;
    pxa_watchdog(ag, now);
  }
  for (pxa_job_t *j = ag->jobs; j; j = j->next)
    if (j->stopping && !j->killed && j->nrunning > 0 && now >= j->kill_at_ms) pxa_job_kill(j);
  if (ag->shutting_down && !ag->jobs && !ag->closing) {
    /* every worker is gone: close the loop's handles so that uv_run returns */
    ag->closing = 1;
    pthread_mutex_lock(&ag->mu);
    ag->loop_open = 0;
    pthread_mutex_unlock(&ag->mu);
    uv_close((uv_handle_t *)&ag->wake, NULL);
    uv_close((uv_handle_t *)&ag->tick, NULL);
    px_service_watchdog_close(&ag->watchdog);
    uv_close((uv_handle_t *)&ag->sigterm, NULL);
    uv_close((uv_handle_t *)&ag->sigint, NULL);
  }
}
