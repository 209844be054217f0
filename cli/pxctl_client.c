/* The pxctl client module: what every command file imports and that
 * imports none of them back. Errors (pxctl_fail, pxctl_usage_error and the
 * gRPC status turned into a message), the connection to the coordinator,
 * name resolution (a job name into its id), spec loading (parsed once),
 * the iteration reports of a job, the watch loop with its progress bar and
 * the final summary of a job. It calls only the formatting helpers
 * (pxctl_fmt.c) and the library. */
#include <errno.h>
#include <limits.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "prunex/jobspec.h"
#include "pxctl.h"

/* ---- errors ------------------------------------------------------------------ */

int pxctl_usage_error(const pxctl_opts_t *o, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  fprintf(stderr, "pxctl%s%s: ", o && o->cmd ? " " : "", o && o->cmd ? o->cmd : "");
  vfprintf(stderr, fmt, ap);
  va_end(ap);
  fprintf(stderr, "\n(run 'pxctl%s%s --help' for usage)\n", o && o->cmd ? " " : "",
          o && o->cmd ? o->cmd : "");
  return PXCTL_EXIT_USAGE;
}

static char pxctl_failure[512]; /* the last pxctl_fail message */

int pxctl_fail(const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(pxctl_failure, sizeof pxctl_failure, fmt, ap);
  va_end(ap);
  fprintf(stderr, "pxctl: %s\n", pxctl_failure);
  return PXCTL_EXIT_FAIL;
}

const char *pxctl_last_failure(void) { return pxctl_failure; }

/* The database read offline (pxctl_offline.c sets it), for messages. */
static char pxctl_offline_source[PATH_MAX + 64]; /* "": none */

void pxctl_set_offline_db(const char *db) {
  snprintf(pxctl_offline_source, sizeof pxctl_offline_source, "%s", db ? db : "");
}

const char *pxctl_offline_db(void) {
  return pxctl_offline_source[0] ? pxctl_offline_source : NULL;
}

/* ---- connection ---------------------------------------------------------------- */

px_rpc_channel_t *pxctl_connect(const pxctl_opts_t *o) {
  px_rpc_channel_t *ch = NULL;
  if (px_rpc_channel_create(o->coordinator, &ch) != PX_OK) {
    pxctl_fail("coordinator %s: %s", o->coordinator, px_last_error());
    return NULL;
  }
  return ch;
}

int pxctl_with_channel(pxctl_opts_t *o, pxctl_channel_fn fn) {
  px_rpc_channel_t *ch = pxctl_connect(o);
  if (!ch) return PXCTL_EXIT_FAIL;
  int rc = fn(o, ch);
  px_rpc_channel_destroy(ch);
  return rc;
}

int pxctl_rpc_fail(px_rpc_channel_t *ch, const char *job_id) {
  px_rpc_code_t code = px_rpc_last_code();
  const char *target = ch ? px_rpc_channel_target(ch) : "?";
  if (code == PX_RPC_NOT_FOUND && job_id && pxctl_offline_db())
    return pxctl_fail("no job '%s' in %s", job_id, pxctl_offline_db());
  if (code == PX_RPC_NOT_FOUND && job_id)
    return pxctl_fail("no job '%s' (coordinator %s)", job_id, target);
  const char *hint = "";
  if (code == PX_RPC_UNAVAILABLE)
    hint = "\n(is pxcoordd running there? set --coordinator HOST:PORT or PRUNEX_COORDINATOR)";
  else if (code == PX_RPC_DEADLINE_EXCEEDED)
    hint = "\n(the coordinator did not answer in time)";
  else if (code == PX_RPC_UNAUTHENTICATED)
    hint = "\n(this coordinator needs a token: set PRUNEX_TOKEN, or put it in "
           "~/.config/prunex/token, mode 600)";
  return pxctl_fail("coordinator %s: %s (gRPC status %s)%s", target, px_last_error(),
                    px_rpc_code_name(code), hint);
}

/* ---- name resolution ------------------------------------------------------------ */

int pxctl_resolve_job(const pxctl_opts_t *o, const char **ref) {
  px_rpc_channel_t *ch = NULL;
  if (px_rpc_channel_create(o->coordinator, &ch) != PX_OK) return 0;
  Prunex__V1__Job *job = NULL;
  int rc = 0;
  if (px_rpc_get_job(ch, *ref, PXCTL_DEADLINE_MS, &job) == PX_OK ||
      px_rpc_last_code() != PX_RPC_NOT_FOUND) {
    px_rpc_message_free(job);
    px_rpc_channel_destroy(ch);
    return 0;
  }
  /* Every page of ListJobs (newest first), so that older jobs are found. */
  Prunex__V1__ListJobsRequest req = PRUNEX__V1__LIST_JOBS_REQUEST__INIT;
  req.limit = 1000;
  char token[256] = "", first_id[128] = "", ids[512] = "";
  size_t found = 0;
  for (;;) {
    Prunex__V1__ListJobsResponse *resp = NULL;
    req.page_token = token;
    if (px_rpc_list_jobs(ch, &req, PXCTL_DEADLINE_MS, &resp) != PX_OK) break;
    for (size_t i = 0; i < resp->n_jobs; i++) {
      if (strcmp(resp->jobs[i]->name, *ref) != 0) continue;
      if (found++ == 0) snprintf(first_id, sizeof first_id, "%s", resp->jobs[i]->job_id);
      size_t used = strlen(ids);
      if (used + 2 < sizeof ids)
        snprintf(ids + used, sizeof ids - used, "%s%s", used ? ", " : "", resp->jobs[i]->job_id);
    }
    int more = resp->next_page_token && resp->next_page_token[0] &&
               strlen(resp->next_page_token) < sizeof token;
    if (more) snprintf(token, sizeof token, "%s", resp->next_page_token);
    px_rpc_message_free(resp);
    if (!more) break;
  }
  if (found == 1) {
    static char names[8][128];
    static int next;
    char *slot = names[next++ % 8];
    snprintf(slot, sizeof names[0], "%s", first_id);
    *ref = slot;
  } else if (found > 1) {
    rc = pxctl_fail("%zu jobs are named '%s' (%s): give the job id", found, *ref, ids);
  }
  px_rpc_channel_destroy(ch);
  return rc;
}

/* ---- specs ------------------------------------------------------------------ */

int pxctl_load_spec(const char *path, Prunex__V1__JobSpec **spec, char **text,
                    px_jobspec_given_t *given) {
  /* One read and one parse (which runs every check of the schema); the
   * text travels with the spec, for the record. */
  if (px_jobspec_parse_file_ex(path, spec, text, given) != PX_OK) {
    fprintf(stderr, "pxctl: %s\npxctl: the job spec was refused; nothing was submitted\n",
            px_last_error());
    return PXCTL_EXIT_USAGE;
  }
  /* What only this machine can check: the data the spec names. */
  if (px_jobspec_check_data(*spec) != PX_OK) {
    fprintf(stderr, "pxctl: %s: %s\npxctl: the job spec was refused; nothing was submitted\n",
            path, px_last_error());
    px_jobspec_free(*spec);
    px_free(*text);
    *spec = NULL;
    *text = NULL;
    return PXCTL_EXIT_USAGE;
  }
  return PXCTL_EXIT_OK;
}

/* ---- jobs --------------------------------------------------------------------- */

int pxctl_job_max_iterations(const Prunex__V1__Job *job) {
  return job->spec && job->spec->admm ? job->spec->admm->max_iterations : 0;
}

int pxctl_job_done_iterations(const Prunex__V1__Job *job) {
  return job->summary ? job->summary->iterations : 0;
}

/* ---- iteration reports ---------------------------------------------------------- */

/* Fetches the job's iteration reports; unless all_ranks, keeps one per
 * iteration (the lowest rank's: rank 0 reports for the job). The kept
 * reports are pointers into *resp; *n counts them; *rows is px_malloc'd. */
px_status_t pxctl_iterations(px_rpc_channel_t *ch, const char *job_id, int from,
                             int layers, int all_ranks,
                             Prunex__V1__GetIterationsResponse **resp,
                             Prunex__V1__IterationReport ***rows, size_t *n) {
  return pxctl_iterations_page(ch, job_id, from, 0, layers, all_ranks, resp, rows, n);
}

px_status_t pxctl_iterations_page(px_rpc_channel_t *ch, const char *job_id, int from, int limit,
                                  int layers, int all_ranks,
                                  Prunex__V1__GetIterationsResponse **resp,
                                  Prunex__V1__IterationReport ***rows, size_t *n) {
  *rows = NULL;
  *n = 0;
  Prunex__V1__GetIterationsRequest req = PRUNEX__V1__GET_ITERATIONS_REQUEST__INIT;
  req.job_id = (char *)job_id;
  req.from_iteration = from;
  req.limit = limit;
  req.include_layers = layers;
  px_status_t st = px_rpc_get_iterations(ch, &req, PXCTL_DEADLINE_MS, resp);
  if (st != PX_OK) return st;
  size_t cnt = (*resp)->n_iterations;
  *rows = px_malloc((cnt ? cnt : 1) * sizeof **rows, "pxctl.iterations");
  if (!*rows) return PX_ERR_NOMEM;
  for (size_t i = 0; i < cnt; i++) {
    Prunex__V1__IterationReport *it = (*resp)->iterations[i];
    /* The server orders by (iteration, rank). */
    if (!all_ranks && *n > 0 && (*rows)[*n - 1]->iteration == it->iteration) continue;
    (*rows)[(*n)++] = it;
  }
  return PX_OK;
}

/* ---- watch ------------------------------------------------------------------ */

typedef struct {
  FILE *out;
  int tty;
  double t0;
  int have_it;
  int iteration;
  double loss, test_accuracy, density;
  int64_t drift, groups;
  int last_state, last_done;
  size_t last_len;
} pxctl_bar_t;

static void pxctl_bar_draw(pxctl_bar_t *b, const Prunex__V1__Job *job, int final) {
  if (!b->out || !job) return;
  int max = pxctl_job_max_iterations(job), done = pxctl_job_done_iterations(job);
  if (!b->tty && !final && (int)job->state == b->last_state && done == b->last_done) return;
  b->last_state = (int)job->state;
  b->last_done = done;
  char line[640], bar[64] = "", el[32], inter[32] = "";
  int used = 0;
  /* The clock counts from the job's start (its first SCHEDULED event), not
   * from when this watch attached, and stops at its end. */
  int64_t start = job->created_unix_ms, end = pxctl_now_unix_ms();
  for (size_t i = 0; i < job->n_events; i++) {
    const Prunex__V1__JobEvent *e = job->events[i];
    if (e->to_state == PRUNEX__V1__JOB_STATE__JOB_STATE_SCHEDULED) {
      start = e->time_unix_ms;
      break;
    }
  }
  if (pxctl_job_finished(job->state) && job->n_events > 0)
    end = job->events[job->n_events - 1]->time_unix_ms;
  double elapsed = end > start ? (double)(end - start) / 1000.0 : 0.0;
  pxctl_fmt_duration(el, sizeof el, elapsed);
  if (max > 0) {
    const int W = 24;
    int fill = done >= max ? W : (int)((double)done / max * W);
    bar[0] = '[';
    for (int i = 0; i < W; i++) bar[1 + i] = i < fill ? '#' : '-';
    bar[W + 1] = ']';
    bar[W + 2] = '\0';
    used = snprintf(line, sizeof line, "%s %-9s %s %d/%d", job->job_id,
                    px_rpc_job_state_name(job->state), bar, done, max);
  } else {
    used = snprintf(line, sizeof line, "%s %-9s iteration %d", job->job_id,
                    px_rpc_job_state_name(job->state), done);
  }
  if (b->have_it && used < (int)sizeof line) {
    char acc[32];
    pxctl_fmt_pct(acc, sizeof acc, b->test_accuracy);
    used += snprintf(line + used, sizeof line - (size_t)used, "  loss %.4f  test %s  density %.3f",
                     b->loss, acc, b->density);
  }
  if (job->summary && job->summary->inter_bytes > 0 && used < (int)sizeof line) {
    pxctl_fmt_bytes(inter, sizeof inter, job->summary->inter_bytes);
    used += snprintf(line + used, sizeof line - (size_t)used, "  inter %s", inter);
  }
  if (b->have_it && b->groups > 0 && used < (int)sizeof line)
    used += snprintf(line + used, sizeof line - (size_t)used, "  drift %lld of %lld groups",
                     (long long)b->drift, (long long)b->groups);
  else if (b->have_it && used < (int)sizeof line)
    used += snprintf(line + used, sizeof line - (size_t)used, "  drift %lld", (long long)b->drift);
  double rate = elapsed > 0 && done > 0 ? done / elapsed : 0.0;
  if (rate > 0 && used < (int)sizeof line)
    used += snprintf(line + used, sizeof line - (size_t)used, "  %.2f it/s", rate);
  if (rate > 0 && max > done && !pxctl_job_finished(job->state) && used < (int)sizeof line) {
    char eta[32];
    pxctl_fmt_duration(eta, sizeof eta, (max - done) / rate);
    used += snprintf(line + used, sizeof line - (size_t)used, "  ETA %s", eta);
  }
  if (used < (int)sizeof line) used += snprintf(line + used, sizeof line - (size_t)used, "  %s", el);
  /* A job that ended before max_iterations says why (the controller
   * converged, a rank failed, it was cancelled). */
  if (final && pxctl_job_finished(job->state) && max > done && job->reason[0] &&
      used < (int)sizeof line)
    snprintf(line + used, sizeof line - (size_t)used, "  (ended at %d of %d: %s)", done, max,
             job->reason);
  if (b->tty) {
    fprintf(b->out, "\r\033[K%s%s", line, final ? "\n" : "");
  } else {
    fprintf(b->out, "%s\n", line);
  }
  fflush(b->out);
}

px_status_t pxctl_watch(px_rpc_channel_t *ch, const char *job_id, FILE *out,
                        pxctl_watch_stop_fn stop, void *arg, void **holder,
                        const Prunex__V1__Job **final) {
  *holder = NULL;
  *final = NULL;
  pxctl_bar_t b;
  memset(&b, 0, sizeof b);
  b.out = out;
  b.tty = out && isatty(fileno(out));
  b.t0 = pxctl_mono_s();
  b.last_state = -1;
  b.last_done = -1;
  b.test_accuracy = -1.0;
  px_rpc_stream_t *s = NULL;
  px_status_t st = px_rpc_watch_job(ch, job_id, &s);
  if (st != PX_OK) return st;
  Prunex__V1__JobUpdate *last = NULL;
  double last_draw = 0;
  for (;;) {
    if (stop && stop(arg)) {
      st = PX_ERR_STATE;
      break;
    }
    Prunex__V1__JobUpdate *u = NULL;
    st = px_rpc_read_job_update(s, 200, &u);
    if (st == PX_ERR_TIMEOUT) {
      if (b.tty && last && pxctl_mono_s() - last_draw >= 1.0) {
        pxctl_bar_draw(&b, last->job, 0);
        last_draw = pxctl_mono_s();
      }
      continue;
    }
    if (st != PX_OK) break;
    if (!u) break; /* the server ended the stream: the job is over */
    if (u->latest) {
      b.have_it = 1;
      b.iteration = u->latest->iteration;
      b.loss = u->latest->loss;
      if (u->latest->test_accuracy >= 0) b.test_accuracy = u->latest->test_accuracy;
      b.density = u->latest->density;
      b.drift = u->latest->mask_drift;
      b.groups = u->latest->mask_groups;
    }
    px_rpc_message_free(last);
    last = u;
    if (!last->job) continue;
    int end = pxctl_job_finished(last->job->state);
    pxctl_bar_draw(&b, last->job, end);
    last_draw = pxctl_mono_s();
    if (end) break;
  }
  px_rpc_stream_destroy(s);
  if (st == PX_OK && (!last || !last->job || !pxctl_job_finished(last->job->state))) {
    /* Ended without showing the end (should not happen): ask. */
    Prunex__V1__Job *job = NULL;
    st = px_rpc_get_job(ch, job_id, PXCTL_DEADLINE_MS, &job);
    px_rpc_message_free(last);
    last = NULL;
    if (st == PX_OK) {
      *holder = job;
      *final = job;
      return PX_OK;
    }
    return st;
  }
  if (st != PX_OK && b.tty && last) fputc('\n', out);
  *holder = last;
  *final = last ? last->job : NULL;
  return st;
}

/* ---- summary ------------------------------------------------------------------ */

px_status_t pxctl_job_summary(px_rpc_channel_t *ch, const Prunex__V1__Job *job,
                              pxctl_summary_t *s) {
  memset(s, 0, sizeof *s);
  s->test_accuracy = -1.0;
  if (job->summary) {
    const Prunex__V1__JobSummary *js = job->summary;
    s->iterations = js->iterations;
    s->test_accuracy = js->test_accuracy;
    s->density = js->density;
    s->inter_bytes = js->inter_bytes;
    s->inter_bytes_dense = js->inter_bytes_dense;
    s->intra_bytes = js->intra_bytes;
    s->wall_s = js->wall_s;
    snprintf(s->model_path, sizeof s->model_path, "%s", js->model_path);
    s->source = "coordinator";
    return PX_OK;
  }
  /* A coordinator that does not fill Job.summary: add it up. */
  s->source = "iterations";
  Prunex__V1__GetIterationsResponse *resp = NULL;
  Prunex__V1__IterationReport **rows = NULL;
  size_t n = 0;
  px_status_t st = pxctl_iterations(ch, job->job_id, 0, 0, 0, &resp, &rows, &n);
  for (size_t i = 0; st == PX_OK && i < n; i++) {
    s->inter_bytes += rows[i]->bytes_inter;
    s->inter_bytes_dense += rows[i]->bytes_inter_dense;
    s->intra_bytes += rows[i]->bytes_intra;
    s->density = rows[i]->density;
    if (rows[i]->test_accuracy >= 0) s->test_accuracy = rows[i]->test_accuracy;
  }
  s->iterations = (int)n;
  /* Wall time: from the first SCHEDULED event to the last event. */
  int64_t t0 = 0, t1 = 0;
  for (size_t i = 0; i < job->n_events; i++) {
    if (job->events[i]->to_state == PRUNEX__V1__JOB_STATE__JOB_STATE_SCHEDULED && !t0)
      t0 = job->events[i]->time_unix_ms;
    t1 = job->events[i]->time_unix_ms;
  }
  if (t0 > 0 && t1 >= t0) s->wall_s = (double)(t1 - t0) / 1000.0;
  px_free(rows);
  px_rpc_message_free(resp);
  return st;
}
