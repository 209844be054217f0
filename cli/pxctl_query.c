/* The pxctl commands that talk to a running coordinator (the Jobs service
 * of proto/prunex.proto): submit, status, list, cancel, nodes, metrics,
 * drift and watch, plus what `run` shares with them (spec loading, the
 * watch loop with its progress bar, the final summary). Human tables by
 * default, one JSON document with --json. */
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <sys/stat.h>
#include <unistd.h>

#include "prunex/jobspec.h"
#include "prunex/report.h"
#include "pxctl.h"

#define PXCTL_DEADLINE_MS 10000
/* pxctl watch waits this long for a coordinator that went away. */
#define PXCTL_WATCH_RECONNECT_MS (15 * 60 * 1000)

/* ---- connection and errors ---------------------------------------------- */

px_rpc_channel_t *pxctl_connect(const pxctl_opts_t *o) {
  px_rpc_channel_t *ch = NULL;
  if (px_rpc_channel_create(o->coordinator, &ch) != PX_OK) {
    pxctl_fail("coordinator %s: %s", o->coordinator, px_last_error());
    return NULL;
  }
  return ch;
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

int pxctl_load_spec(const char *path, Prunex__V1__JobSpec **spec, char **text) {
  *spec = NULL;
  *text = NULL;
  if (px_jobspec_parse_file(path, spec) != PX_OK) {
    fprintf(stderr, "pxctl: %s\npxctl: the job spec was refused; nothing was submitted\n",
            px_last_error());
    return PXCTL_EXIT_USAGE;
  }
  if (px_jobspec_validate(*spec) != PX_OK || px_jobspec_check_data(*spec) != PX_OK) {
    fprintf(stderr, "pxctl: %s: %s\npxctl: the job spec was refused; nothing was submitted\n",
            path, px_last_error());
    px_jobspec_free(*spec);
    *spec = NULL;
    return PXCTL_EXIT_USAGE;
  }
  /* The text travels with the spec, for the record. parse_file read the
   * same file just now and refuses anything over 1 MiB. */
  FILE *f = fopen(path, "rb");
  char *buf = px_malloc((1u << 20) + 1, "pxctl.spec_text");
  size_t n = 0;
  if (f && buf) n = fread(buf, 1, 1u << 20, f);
  if (f) fclose(f);
  if (!buf) {
    px_jobspec_free(*spec);
    *spec = NULL;
    return pxctl_fail("out of memory");
  }
  buf[n] = '\0';
  *text = buf;
  return PXCTL_EXIT_OK;
}

/* ---- submit ----------------------------------------------------------------- */

int pxctl_cmd_submit(pxctl_opts_t *o) {
  Prunex__V1__JobSpec *spec;
  char *text;
  int rc = pxctl_load_spec(o->pos[0], &spec, &text);
  if (rc) return rc;
  if (o->nodes > 0 || o->workers_per_node > 0) {
    /* The cluster shape from the command line (the Slurm script's
     * allocation). A derived max_iterations follows the new shape; one the
     * spec gives stays. */
    if (o->nodes > 0) spec->cluster->nodes = o->nodes;
    if (o->workers_per_node > 0) spec->cluster->workers_per_node = o->workers_per_node;
    if (!strstr(text, "max_iterations")) spec->admm->max_iterations = 0;
    if (px_jobspec_fill_defaults(spec) != PX_OK || px_jobspec_validate(spec) != PX_OK) {
      fprintf(stderr, "pxctl: %s with --nodes %d --workers-per-node %d: %s\n", o->pos[0],
              spec->cluster->nodes, spec->cluster->workers_per_node, px_last_error());
      px_jobspec_free(spec);
      px_free(text);
      return PXCTL_EXIT_USAGE;
    }
    size_t n = strlen(text);
    char note[96];
    int m = snprintf(note, sizeof note, "%s# pxctl submit --nodes %d --workers-per-node %d\n",
                     n && text[n - 1] != '\n' ? "\n" : "", spec->cluster->nodes,
                     spec->cluster->workers_per_node);
    if (n + (size_t)m <= (1u << 20)) memcpy(text + n, note, (size_t)m + 1); /* buffer: 1 MiB + 1 */
  }
  px_rpc_channel_t *ch = pxctl_connect(o);
  if (!ch) {
    px_jobspec_free(spec);
    px_free(text);
    return PXCTL_EXIT_FAIL;
  }
  Prunex__V1__SubmitJobRequest req = PRUNEX__V1__SUBMIT_JOB_REQUEST__INIT;
  req.spec = spec;
  req.spec_yaml = text;
  Prunex__V1__SubmitJobResponse *resp = NULL;
  if (px_rpc_submit_job(ch, &req, PXCTL_DEADLINE_MS, &resp) != PX_OK) {
    rc = pxctl_rpc_fail(ch, NULL);
  } else if (o->json) {
    pxctl_json_t j;
    pxctl_json_init(&j, stdout);
    pxctl_json_begin_object(&j);
    pxctl_json_key(&j, "job_id");
    pxctl_json_string(&j, resp->job_id);
    pxctl_json_key(&j, "name");
    pxctl_json_string(&j, spec->name);
    pxctl_json_key(&j, "spec_file");
    pxctl_json_string(&j, o->pos[0]);
    if (resp->sweep_id[0]) {
      pxctl_json_key(&j, "sweep_id");
      pxctl_json_string(&j, resp->sweep_id);
      pxctl_json_key(&j, "job_ids");
      pxctl_json_begin_array(&j);
      for (size_t i = 0; i < resp->n_job_ids; i++) pxctl_json_string(&j, resp->job_ids[i]);
      pxctl_json_end_array(&j);
    }
    pxctl_json_end_object(&j);
    pxctl_json_finish(&j);
  } else if (resp->sweep_id[0]) {
    printf("%s\n", resp->sweep_id); /* then its jobs, one a line */
    for (size_t i = 0; i < resp->n_job_ids; i++) printf("%s\n", resp->job_ids[i]);
  } else {
    printf("%s\n", resp->job_id);
  }
  px_rpc_message_free(resp);
  px_rpc_channel_destroy(ch);
  px_jobspec_free(spec);
  px_free(text);
  return rc;
}

/* ---- status ----------------------------------------------------------------- */

static int pxctl_terminal(int state) { return pxctl_job_finished(state); }

static int pxctl_max_iterations(const Prunex__V1__Job *job) {
  return job->spec && job->spec->admm ? job->spec->admm->max_iterations : 0;
}

static int pxctl_done_iterations(const Prunex__V1__Job *job) {
  return job->summary ? job->summary->iterations : 0;
}

/* "12 iterations, test accuracy 85.21%, density 0.500, inter-node 1.2 MiB
 * (dense 9.8 MiB: 87.8% less)" */
static void pxctl_results_line(char *buf, size_t cap, const pxctl_summary_t *s) {
  char acc[32], inter[32], dense[32], red[64] = "";
  pxctl_fmt_pct(acc, sizeof acc, s->test_accuracy);
  pxctl_fmt_bytes(inter, sizeof inter, s->inter_bytes);
  pxctl_fmt_bytes(dense, sizeof dense, s->inter_bytes_dense);
  if (s->inter_bytes_dense > 0)
    snprintf(red, sizeof red, ": %.1f%% less",
             100.0 * (1.0 - (double)s->inter_bytes / (double)s->inter_bytes_dense));
  snprintf(buf, cap, "%d iteration%s, test accuracy %s, density %.3f, inter-node %s (dense %s%s)",
           s->iterations, s->iterations == 1 ? "" : "s", acc, s->density, inter, dense, red);
}

/* Node ids -> "name (host)" from ListNodes; best effort. */
static void pxctl_node_label(const Prunex__V1__ListNodesResponse *nodes, const char *id, char *buf,
                             size_t cap) {
  for (size_t i = 0; nodes && i < nodes->n_nodes; i++)
    if (!strcmp(nodes->nodes[i]->node_id, id)) {
      snprintf(buf, cap, "%s (%s, host %s)", nodes->nodes[i]->name, id, nodes->nodes[i]->hostname);
      return;
    }
  snprintf(buf, cap, "%s", id);
}

/* The job's nodes, and where and how its earlier attempts ended. */
static void pxctl_print_placement(px_rpc_channel_t *ch, const Prunex__V1__Job *job) {
  char t1[64];
  Prunex__V1__ListNodesResponse *nodes = NULL;
  if (job->n_node_ids > 0 || job->n_attempts > 0) {
    Prunex__V1__ListNodesRequest req = PRUNEX__V1__LIST_NODES_REQUEST__INIT;
    if (px_rpc_list_nodes(ch, &req, PXCTL_DEADLINE_MS, &nodes) != PX_OK) nodes = NULL;
  }
  for (size_t i = 0; i < job->n_node_ids; i++) {
    char label[512];
    pxctl_node_label(nodes, job->node_ids[i], label, sizeof label);
    printf("%s %zu     %s\n", i == 0 ? "node" : "    ", i, label);
  }
  for (size_t i = 0; i < job->n_attempts; i++) {
    const Prunex__V1__JobAttempt *a = job->attempts[i];
    char on[1024] = "";
    size_t used = 0;
    for (size_t k = 0; k < a->n_node_ids && used < sizeof on; k++) {
      char label[512];
      pxctl_node_label(nodes, a->node_ids[k], label, sizeof label);
      used += (size_t)snprintf(on + used, sizeof on - used, "%s%s", k ? ", " : "", label);
    }
    size_t cut = strcspn(a->cause, "\n");
    pxctl_fmt_time(t1, sizeof t1, a->ended_unix_ms);
    printf("attempt %d  ended %s on %s: %.*s\n", a->attempt, t1, on[0] ? on : "no node",
           (int)(cut > 600 ? 600 : cut), a->cause);
  }
  px_rpc_message_free(nodes);
}

/* The job's events, and the ranks that ended other than cleanly. */
static void pxctl_print_history(const Prunex__V1__Job *job) {
  char t1[64];
  if (job->n_events > 0) {
    printf("events\n");
    static const char *const h[] = {"TIME", "FROM", "TO", "REASON"};
    pxctl_table_t *t = pxctl_table_create(4, h);
    for (size_t i = 0; i < job->n_events; i++) {
      const Prunex__V1__JobEvent *e = job->events[i];
      pxctl_fmt_time(t1, sizeof t1, e->time_unix_ms);
      pxctl_table_cell(t, "%s", t1);
      pxctl_table_cell(t, "%s", e->from_state ? px_rpc_job_state_name(e->from_state) : "-");
      pxctl_table_cell(t, "%s", px_rpc_job_state_name(e->to_state));
      pxctl_table_cell(t, "%s", e->reason);
    }
    pxctl_table_print(t, stdout, 2);
  }
  /* Ranks that ended other than cleanly: who failed, and why. */
  size_t bad = 0;
  for (size_t i = 0; i < job->n_rank_exits; i++)
    bad += job->rank_exits[i]->exit_code != 0 || job->rank_exits[i]->signal != 0;
  if (bad > 0) {
    printf("rank exits (%zu of %zu not clean)\n", bad, job->n_rank_exits);
    static const char *const h[] = {"RANK", "NODE", "EXIT", "REASON"};
    pxctl_table_t *t = pxctl_table_create(4, h);
    for (size_t i = 0; i < job->n_rank_exits; i++) {
      const Prunex__V1__RankExit *e = job->rank_exits[i];
      if (e->exit_code == 0 && e->signal == 0) continue;
      pxctl_table_cell(t, "%d", e->rank);
      pxctl_table_cell(t, "%s", e->node_id);
      if (e->signal) pxctl_table_cell(t, "signal %d", e->signal);
      else if (e->exit_code < 0) pxctl_table_cell(t, e->exit_code == -1 ? "none (lost)" : "none (hung)");
      else pxctl_table_cell(t, "code %d", e->exit_code);
      pxctl_table_cell(t, "%s", e->reason);
    }
    pxctl_table_print(t, stdout, 2);
  }
}

static void pxctl_print_job(px_rpc_channel_t *ch, const Prunex__V1__Job *job) {
  char t1[64], t2[64];
  printf("job        %s  %s\n", job->job_id, job->name);
  if (job->sweep_id[0]) printf("sweep      %s: %s\n", job->sweep_id, job->sweep_point);
  /* Since the change into the current state (its newest event), not the
   * last update: a running job is updated by every iteration. */
  int64_t since = 0;
  for (size_t i = 0; i < job->n_events; i++)
    if ((int)job->events[i]->to_state == (int)job->state) since = job->events[i]->time_unix_ms;
  pxctl_fmt_age(t1, sizeof t1, since ? since : job->created_unix_ms);
  printf("state      %s (since %s)%s%s\n", px_rpc_job_state_name(job->state), t1,
         job->reason[0] ? ": " : "", job->reason);
  const Prunex__V1__JobSpec *s = job->spec;
  if (s) {
    printf("spec       %s, %s on %s, %d node%s x %d worker%s (%s)\n",
           px_jobspec_strategy_name(s->strategy), s->model ? s->model->name : "?",
           s->dataset ? s->dataset->name : "?", s->cluster ? s->cluster->nodes : 0,
           s->cluster && s->cluster->nodes == 1 ? "" : "s",
           s->cluster ? s->cluster->workers_per_node : 0,
           s->cluster && s->cluster->workers_per_node == 1 ? "" : "s",
           s->cluster && s->cluster->device[0] ? s->cluster->device : "auto");
    if (s->prune)
      printf("pruning    keep filters %.3g, channels %.3g, shapes %.3g\n", s->prune->filter_keep,
             s->prune->channel_keep, s->prune->shape_keep);
    if (s->prune && s->prune->nm_m > 0)
      printf("           N:M %d:%d along input channels\n", s->prune->nm_n, s->prune->nm_m);
  }
  int max = pxctl_max_iterations(job);
  if (max > 0) printf("progress   %d of %d iterations\n", pxctl_done_iterations(job), max);
  else printf("progress   %d iterations\n", pxctl_done_iterations(job));
  /* Automatic restarts (issue 14): which attempt, and how the earlier ones
   * ended. */
  int restarts = s && s->recovery ? s->recovery->max_restarts : 0;
  int attempt = job->attempt > 0 ? job->attempt : 1;
  if (restarts > 0 || attempt > 1)
    printf("attempt    %d of %d (%d restart%s allowed)\n", attempt, 1 + restarts, restarts,
           restarts == 1 ? "" : "s");
  /* a job running without a usable checkpoint (a full disk) says so (issue 26) */
  if (job->checkpoint_problem[0]) printf("checkpoint %s\n", job->checkpoint_problem);
  pxctl_print_placement(ch, job);
  pxctl_fmt_time(t1, sizeof t1, job->created_unix_ms);
  pxctl_fmt_age(t2, sizeof t2, job->created_unix_ms);
  printf("created    %s (%s)\n", t1, t2);
  if (job->summary && pxctl_done_iterations(job) > 0) {
    pxctl_summary_t sum;
    memset(&sum, 0, sizeof sum);
    sum.iterations = job->summary->iterations;
    sum.test_accuracy = job->summary->test_accuracy;
    sum.density = job->summary->density;
    sum.inter_bytes = job->summary->inter_bytes;
    sum.inter_bytes_dense = job->summary->inter_bytes_dense;
    char line[512], wall[32];
    pxctl_results_line(line, sizeof line, &sum);
    pxctl_fmt_duration(wall, sizeof wall, job->summary->wall_s);
    printf("%s    %s, wall %s\n", pxctl_terminal(job->state) ? "results" : "so far ", line, wall);
    if (job->summary->model_path[0]) {
      printf("model      %s\n", job->summary->model_path);
      pxctl_print_model_sizes(job->summary->model_path);
    }
  }
  pxctl_print_history(job);
}

int pxctl_cmd_status(pxctl_opts_t *o) {
  px_rpc_channel_t *ch = pxctl_connect(o);
  if (!ch) return PXCTL_EXIT_FAIL;
  if (pxctl_is_sweep_id(o->pos[0])) {
    int src = pxctl_sweep_status(o, ch);
    px_rpc_channel_destroy(ch);
    return src;
  }
  Prunex__V1__Job *job = NULL;
  int rc = PXCTL_EXIT_OK;
  if (px_rpc_get_job_ex(ch, o->pos[0], 1, PXCTL_DEADLINE_MS, &job) != PX_OK) {
    rc = pxctl_rpc_fail(ch, o->pos[0]);
  } else if (o->json) {
    pxctl_json_t j;
    pxctl_json_init(&j, stdout);
    pxctl_json_job(&j, job);
    pxctl_json_finish(&j);
  } else {
    pxctl_print_job(ch, job);
  }
  px_rpc_message_free(job);
  px_rpc_channel_destroy(ch);
  return rc;
}

/* ---- list ------------------------------------------------------------------- */

/* The jobs as a table; pending ones add their place in the queue. */
static void pxctl_print_jobs(const Prunex__V1__ListJobsResponse *resp) {
  int queue = 0;
  for (size_t i = 0; i < resp->n_jobs; i++) queue |= resp->jobs[i]->sched != NULL;
  static const char *const h[] = {"JOB",      "NAME",    "STATE",          "STRATEGY",
                                  ">NODES",   ">ITER",   ">TEST-ACC",      ">DENSITY",
                                  "CREATED",  ">PRIORITY", "JOB/FAIR/AGE", ">AHEAD"};
  pxctl_table_t *t = pxctl_table_create(queue ? 12 : 9, h);
  for (size_t i = 0; i < resp->n_jobs; i++) {
    const Prunex__V1__Job *job = resp->jobs[i];
    const Prunex__V1__JobSpec *s = job->spec;
    char acc[32], age[48];
    pxctl_table_cell(t, "%s", job->job_id);
    pxctl_table_cell(t, "%s", job->name);
    if (job->attempt > 1)
      pxctl_table_cell(t, "%s (attempt %d)", px_rpc_job_state_name(job->state), job->attempt);
    else pxctl_table_cell(t, "%s", px_rpc_job_state_name(job->state));
    pxctl_table_cell(t, "%s", s ? px_jobspec_strategy_name(s->strategy) : "?");
    if (s && s->cluster)
      pxctl_table_cell(t, "%dx%d", s->cluster->nodes, s->cluster->workers_per_node);
    else pxctl_table_cell(t, "?");
    int max = pxctl_max_iterations(job);
    if (max > 0) pxctl_table_cell(t, "%d/%d", pxctl_done_iterations(job), max);
    else pxctl_table_cell(t, "%d", pxctl_done_iterations(job));
    int have = job->summary && job->summary->iterations > 0;
    pxctl_fmt_pct(acc, sizeof acc, have ? job->summary->test_accuracy : -1.0);
    pxctl_table_cell(t, "%s", acc);
    if (have) pxctl_table_cell(t, "%.3f", job->summary->density);
    else pxctl_table_cell(t, "-");
    pxctl_fmt_age(age, sizeof age, job->created_unix_ms);
    pxctl_table_cell(t, "%s", age);
    if (!queue) continue;
    const Prunex__V1__JobPriority *p = job->sched;
    if (p) {
      pxctl_table_cell(t, "%.3f", p->priority);
      pxctl_table_cell(t, "%.2f/%.2f/%.2f", p->job_factor, p->fairshare_factor,
                       p->age_factor);
      pxctl_table_cell(t, "%lld", (long long)p->ahead);
    } else {
      for (int k = 0; k < 3; k++) pxctl_table_cell(t, "-");
    }
  }
  pxctl_table_print(t, stdout, 0);
}

int pxctl_cmd_list(pxctl_opts_t *o) {
  px_rpc_channel_t *ch = pxctl_connect(o);
  if (!ch) return PXCTL_EXIT_FAIL;
  /* Pages of at most 1000, newest first, until --limit jobs or the end. The
   * jobs are gathered into one synthetic response (its array only). */
  Prunex__V1__ListJobsResponse **pages = NULL;
  size_t npages = 0;
  Prunex__V1__ListJobsResponse all = PRUNEX__V1__LIST_JOBS_RESPONSE__INIT;
  Prunex__V1__ListJobsResponse *resp = &all;
  size_t jcap = 0;
  char token[64] = "";
  int rc = PXCTL_EXIT_OK, failed = 0;
  for (;;) {
    Prunex__V1__ListJobsRequest req = PRUNEX__V1__LIST_JOBS_REQUEST__INIT;
    req.state = (Prunex__V1__JobState)o->state;
    size_t want = o->limit > 0 ? (size_t)o->limit - all.n_jobs : 1000;
    req.limit = (int32_t)(want > 1000 ? 1000 : want);
    req.page_token = token;
    req.sweep_id = o->sweep ? (char *)o->sweep : "";
    Prunex__V1__ListJobsResponse *page = NULL;
    if (px_rpc_list_jobs(ch, &req, PXCTL_DEADLINE_MS, &page) != PX_OK) {
      failed = 1;
      break;
    }
    Prunex__V1__ListJobsResponse **np = realloc(pages, (npages + 1) * sizeof *np);
    if (!np) {
      px_rpc_message_free(page);
      failed = 1;
      break;
    }
    pages = np;
    pages[npages++] = page;
    if (all.n_jobs + page->n_jobs > jcap) {
      jcap = (all.n_jobs + page->n_jobs) * 2;
      Prunex__V1__Job **nj = realloc(all.jobs, jcap * sizeof *nj);
      if (!nj) {
        failed = 1;
        break;
      }
      all.jobs = nj;
    }
    for (size_t i = 0; i < page->n_jobs; i++) all.jobs[all.n_jobs++] = page->jobs[i];
    if (!page->next_page_token[0] || strlen(page->next_page_token) >= sizeof token) break;
    if (o->limit > 0 && all.n_jobs >= (size_t)o->limit) break;
    snprintf(token, sizeof token, "%s", page->next_page_token);
  }
  if (failed) {
    rc = pxctl_rpc_fail(ch, NULL);
  } else if (o->json) {
    pxctl_json_t j;
    pxctl_json_init(&j, stdout);
    pxctl_json_begin_array(&j);
    for (size_t i = 0; i < resp->n_jobs; i++) pxctl_json_job(&j, resp->jobs[i]);
    pxctl_json_end_array(&j);
    pxctl_json_finish(&j);
  } else if (resp->n_jobs == 0) {
    printf(o->state ? "no %s jobs\n" : "no jobs\n",
           px_rpc_job_state_name((Prunex__V1__JobState)o->state));
  } else {
    pxctl_print_jobs(resp);
    if (o->sweep) pxctl_sweep_print_summary(o->sweep, resp->jobs, resp->n_jobs);
  }
  for (size_t i = 0; i < npages; i++) px_rpc_message_free(pages[i]);
  free(pages);
  free(all.jobs);
  px_rpc_channel_destroy(ch);
  return rc;
}

/* ---- delete ----------------------------------------------------------------- */

int pxctl_cmd_delete(pxctl_opts_t *o) {
  px_rpc_channel_t *ch = pxctl_connect(o);
  if (!ch) return PXCTL_EXIT_FAIL;
  int rc = PXCTL_EXIT_OK;
  if (px_rpc_delete_job(ch, o->pos[0], PXCTL_DEADLINE_MS) != PX_OK) {
    px_rpc_code_t code = px_rpc_last_code();
    if (code == PX_RPC_FAILED_PRECONDITION || code == PX_RPC_PERMISSION_DENIED)
      rc = pxctl_fail("cannot delete job '%s': %s", o->pos[0], px_last_error());
    else rc = pxctl_rpc_fail(ch, o->pos[0]);
  } else if (o->json) {
    pxctl_json_t j;
    pxctl_json_init(&j, stdout);
    pxctl_json_begin_object(&j);
    pxctl_json_key(&j, "job_id");
    pxctl_json_string(&j, o->pos[0]);
    pxctl_json_key(&j, "deleted");
    pxctl_json_bool(&j, 1);
    pxctl_json_end_object(&j);
    pxctl_json_finish(&j);
  } else {
    printf("%s deleted\n", o->pos[0]);
  }
  px_rpc_channel_destroy(ch);
  return rc;
}

/* ---- cancel ----------------------------------------------------------------- */

int pxctl_cmd_cancel(pxctl_opts_t *o) {
  px_rpc_channel_t *ch = pxctl_connect(o);
  if (!ch) return PXCTL_EXIT_FAIL;
  if (pxctl_is_sweep_id(o->pos[0])) {
    int src = pxctl_sweep_cancel(o, ch);
    px_rpc_channel_destroy(ch);
    return src;
  }
  Prunex__V1__CancelJobResponse *resp = NULL;
  int rc = PXCTL_EXIT_OK;
  const char *reason = o->reason && o->reason[0] ? o->reason : "by pxctl cancel";
  if (px_rpc_cancel_job(ch, o->pos[0], reason, PXCTL_DEADLINE_MS, &resp) != PX_OK) {
    if (px_rpc_last_code() == PX_RPC_FAILED_PRECONDITION)
      rc = pxctl_fail("cannot cancel job '%s': %s", o->pos[0], px_last_error());
    else rc = pxctl_rpc_fail(ch, o->pos[0]);
  } else if (o->json) {
    pxctl_json_t j;
    pxctl_json_init(&j, stdout);
    pxctl_json_job(&j, resp->job);
    pxctl_json_finish(&j);
  } else {
    printf("%s %s\n", o->pos[0],
           resp->job ? px_rpc_job_state_name(resp->job->state) : "CANCELLED");
  }
  px_rpc_message_free(resp);
  px_rpc_channel_destroy(ch);
  return rc;
}

/* ---- nodes ------------------------------------------------------------------ */

int pxctl_cmd_nodes(pxctl_opts_t *o) {
  px_rpc_channel_t *ch = pxctl_connect(o);
  if (!ch) return PXCTL_EXIT_FAIL;
  Prunex__V1__ListNodesRequest req = PRUNEX__V1__LIST_NODES_REQUEST__INIT;
  req.state = (Prunex__V1__NodeState)o->state;
  Prunex__V1__ListNodesResponse *resp = NULL;
  int rc = PXCTL_EXIT_OK;
  if (px_rpc_list_nodes(ch, &req, PXCTL_DEADLINE_MS, &resp) != PX_OK) {
    rc = pxctl_rpc_fail(ch, NULL);
  } else if (o->json) {
    pxctl_json_t j;
    pxctl_json_init(&j, stdout);
    pxctl_json_begin_array(&j);
    for (size_t i = 0; i < resp->n_nodes; i++) pxctl_json_message(&j, &resp->nodes[i]->base);
    pxctl_json_end_array(&j);
    pxctl_json_finish(&j);
  } else if (resp->n_nodes == 0) {
    printf(o->state ? "no %s nodes\n" : "no nodes registered\n",
           px_rpc_node_state_name((Prunex__V1__NodeState)o->state));
  } else {
    static const char *const h[] = {"NODE", "NAME", "HOST", "STATE", "DEVICES", "JOB",
                                    "HEARTBEAT"};
    pxctl_table_t *t = pxctl_table_create(7, h);
    for (size_t i = 0; i < resp->n_nodes; i++) {
      const Prunex__V1__Node *n = resp->nodes[i];
      int cpu = 0, cuda = 0, bad = 0;
      for (size_t k = 0; k < n->n_devices; k++) {
        if (n->devices[k]->kind == PRUNEX__V1__DEVICE_KIND__DEVICE_KIND_CUDA) cuda++;
        else cpu++;
        if (!n->devices[k]->healthy) bad++;
      }
      char dev[96] = "", age[48];
      int used = 0;
      if (cuda) used += snprintf(dev + used, sizeof dev - (size_t)used, "%d gpu", cuda);
      if (cpu)
        used += snprintf(dev + used, sizeof dev - (size_t)used, "%s%d cpu", used ? ", " : "", cpu);
      if (bad) snprintf(dev + used, sizeof dev - (size_t)used, " (%d unhealthy)", bad);
      pxctl_fmt_age(age, sizeof age, n->last_heartbeat_unix_ms);
      pxctl_table_cell(t, "%s", n->node_id);
      pxctl_table_cell(t, "%s", n->name);
      pxctl_table_cell(t, "%s", n->hostname);
      pxctl_table_cell(t, "%s", px_rpc_node_state_name(n->state));
      pxctl_table_cell(t, "%s", dev[0] ? dev : "none");
      pxctl_table_cell(t, "%s", n->job_id[0] ? n->job_id : "-");
      pxctl_table_cell(t, "%s", age);
    }
    pxctl_table_print(t, stdout, 0);
  }
  px_rpc_message_free(resp);
  px_rpc_channel_destroy(ch);
  return rc;
}

/* ---- metrics and drift -------------------------------------------------------- */

/* Fetches the job's iteration reports; unless all_ranks, keeps one per
 * iteration (the lowest rank's: rank 0 reports for the job). The kept
 * reports are pointers into *resp; *n counts them; *rows is px_malloc'd. */
static px_status_t pxctl_iterations(px_rpc_channel_t *ch, const char *job_id, int from,
                                    int layers, int all_ranks,
                                    Prunex__V1__GetIterationsResponse **resp,
                                    Prunex__V1__IterationReport ***rows, size_t *n) {
  *rows = NULL;
  *n = 0;
  Prunex__V1__GetIterationsRequest req = PRUNEX__V1__GET_ITERATIONS_REQUEST__INIT;
  req.job_id = (char *)job_id;
  req.from_iteration = from;
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

/* `metrics --csv`: RFC 4180 (names are quoted, with quotes doubled), the
 * columns of the report tables (prunex/report.h); with --layers one row
 * per layer, keyed by the iteration's iteration and rank. */
static void pxctl_metrics_csv(FILE *f, Prunex__V1__IterationReport **rows, size_t n, int layers) {
  if (layers) {
    fputs("iteration,rank", f);
    px_report_csv_header(PX_REPORT_LAYER, 1, f);
    fputc('\n', f);
    for (size_t i = 0; i < n; i++)
      for (size_t k = 0; k < rows[i]->n_layers; k++) {
        fprintf(f, "%d,%d", rows[i]->iteration, rows[i]->rank);
        px_report_csv_row(PX_REPORT_LAYER, 1, rows[i]->layers[k], f);
        fputc('\n', f);
      }
  } else {
    px_report_csv_header(PX_REPORT_ITERATION, 0, f);
    fputc('\n', f);
    for (size_t i = 0; i < n; i++) {
      px_report_csv_row(PX_REPORT_ITERATION, 0, rows[i], f);
      fputc('\n', f);
    }
  }
  fflush(f);
}

int pxctl_cmd_metrics(pxctl_opts_t *o) {
  px_rpc_channel_t *ch = pxctl_connect(o);
  if (!ch) return PXCTL_EXIT_FAIL;
  Prunex__V1__GetIterationsResponse *resp = NULL;
  Prunex__V1__IterationReport **rows = NULL;
  size_t n = 0;
  int rc = PXCTL_EXIT_OK;
  if (pxctl_iterations(ch, o->pos[0], o->from, o->layers, o->all_ranks, &resp, &rows, &n) !=
      PX_OK) {
    rc = resp ? pxctl_fail("%s", px_last_error()) : pxctl_rpc_fail(ch, o->pos[0]);
    goto out;
  }
  if (o->limit > 0 && n > (size_t)o->limit) n = (size_t)o->limit;
  if (o->csv && o->json) {
    rc = pxctl_usage_error(o, "--csv and --json: choose one");
    goto out;
  }
  if (o->csv) {
    pxctl_metrics_csv(stdout, rows, n, o->layers);
    goto out;
  }
  if (o->json) {
    pxctl_json_t j;
    pxctl_json_init(&j, stdout);
    pxctl_json_begin_object(&j);
    pxctl_json_key(&j, "job_id");
    pxctl_json_string(&j, o->pos[0]);
    pxctl_json_key(&j, "iterations");
    pxctl_json_begin_array(&j);
    for (size_t i = 0; i < n; i++) pxctl_json_message(&j, &rows[i]->base);
    pxctl_json_end_array(&j);
    pxctl_json_end_object(&j);
    pxctl_json_finish(&j);
    goto out;
  }
  if (n == 0) {
    printf("job %s has no iteration reports%s\n", o->pos[0], o->from ? " from there" : " yet");
    goto out;
  }
  static const char *const h[] = {">ITER",    ">RANK",    ">EPOCH", ">LOSS",  ">TRAIN-ACC",
                                  ">TEST-ACC", ">DENSITY", ">DRIFT", ">INTRA", ">INTER"};
  int skip_rank = !o->all_ranks;
  const char *hh[10];
  int nc = 0;
  for (int c = 0; c < 10; c++)
    if (!(skip_rank && c == 1)) hh[nc++] = h[c];
  pxctl_table_t *t = pxctl_table_create(nc, hh);
  for (size_t i = 0; i < n; i++) {
    const Prunex__V1__IterationReport *it = rows[i];
    char tr[32], te[32], bi[32], be[32];
    pxctl_fmt_pct(tr, sizeof tr, it->train_accuracy);
    pxctl_fmt_pct(te, sizeof te, it->test_accuracy);
    pxctl_fmt_bytes(bi, sizeof bi, it->bytes_intra);
    pxctl_fmt_bytes(be, sizeof be, it->bytes_inter);
    pxctl_table_cell(t, "%d%s", it->iteration, it->frozen ? "*" : "");
    if (!skip_rank) pxctl_table_cell(t, "%d", it->rank);
    pxctl_table_cell(t, "%.2f", it->epoch);
    pxctl_table_cell(t, "%.4f", it->loss);
    pxctl_table_cell(t, "%s", tr);
    pxctl_table_cell(t, "%s", te);
    pxctl_table_cell(t, "%.4f", it->density);
    if (it->mask_groups > 0)
      pxctl_table_cell(t, "%lld/%lld", (long long)it->mask_drift, (long long)it->mask_groups);
    else pxctl_table_cell(t, "%lld", (long long)it->mask_drift);
    pxctl_table_cell(t, "%s", bi);
    pxctl_table_cell(t, "%s", be);
  }
  pxctl_table_print(t, stdout, 0);
  int any_frozen = 0;
  for (size_t i = 0; i < n; i++) any_frozen |= rows[i]->frozen;
  if (any_frozen) printf("(* masks frozen)\n");
  for (size_t i = 0; o->layers && i < n; i++) {
    const Prunex__V1__IterationReport *it = rows[i];
    printf("\niteration %d, rank %d: %zu layer%s\n", it->iteration, it->rank, it->n_layers,
           it->n_layers == 1 ? "" : "s");
    if (it->n_layers == 0) continue;
    static const char *const lh[] = {">LAYER",   "NAME",  ">R-INTRA", ">S-INTRA", ">R-INTER",
                                     ">S-INTER", ">RHO1", ">RHO2",    ">DENSITY"};
    pxctl_table_t *lt = pxctl_table_create(9, lh);
    for (size_t k = 0; k < it->n_layers; k++) {
      const Prunex__V1__LayerMetrics *L = it->layers[k];
      pxctl_table_cell(lt, "%d", L->layer);
      pxctl_table_cell(lt, "%s", L->name);
      pxctl_table_cell(lt, "%.3e", L->r_intra);
      pxctl_table_cell(lt, "%.3e", L->s_intra);
      pxctl_table_cell(lt, "%.3e", L->r_inter);
      pxctl_table_cell(lt, "%.3e", L->s_inter);
      pxctl_table_cell(lt, "%.4g", L->rho1);
      pxctl_table_cell(lt, "%.4g", L->rho2);
      if (L->density >= 0) pxctl_table_cell(lt, "%.4f", L->density);
      else pxctl_table_cell(lt, "-"); /* not a pruned layer */
    }
    pxctl_table_print(lt, stdout, 2);
  }
out:
  px_free(rows);
  px_rpc_message_free(resp);
  px_rpc_channel_destroy(ch);
  return rc;
}

int pxctl_cmd_drift(pxctl_opts_t *o) {
  px_rpc_channel_t *ch = pxctl_connect(o);
  if (!ch) return PXCTL_EXIT_FAIL;
  Prunex__V1__GetIterationsResponse *resp = NULL;
  Prunex__V1__IterationReport **rows = NULL;
  size_t n = 0;
  int rc = PXCTL_EXIT_OK;
  if (pxctl_iterations(ch, o->pos[0], 0, 0, o->all_ranks, &resp, &rows, &n) != PX_OK) {
    rc = resp ? pxctl_fail("%s", px_last_error()) : pxctl_rpc_fail(ch, o->pos[0]);
    goto out;
  }
  /* The first iteration whose report says frozen, and the last one that
   * still changed the masks. */
  int frozen_at = -1, last_change = -1;
  for (size_t i = 0; i < n; i++) {
    if (rows[i]->frozen && frozen_at < 0) frozen_at = rows[i]->iteration;
    if (rows[i]->mask_drift != 0) last_change = rows[i]->iteration;
  }
  if (o->json) {
    pxctl_json_t j;
    pxctl_json_init(&j, stdout);
    pxctl_json_begin_object(&j);
    pxctl_json_key(&j, "job_id");
    pxctl_json_string(&j, o->pos[0]);
    pxctl_json_key(&j, "frozen");
    pxctl_json_bool(&j, frozen_at >= 0);
    pxctl_json_key(&j, "frozen_at_iteration");
    if (frozen_at >= 0) pxctl_json_int(&j, frozen_at);
    else pxctl_json_null(&j);
    pxctl_json_key(&j, "last_change_iteration");
    if (last_change >= 0) pxctl_json_int(&j, last_change);
    else pxctl_json_null(&j);
    pxctl_json_key(&j, "iterations");
    pxctl_json_begin_array(&j);
    for (size_t i = 0; i < n; i++) {
      pxctl_json_begin_object(&j);
      pxctl_json_key(&j, "iteration");
      pxctl_json_int(&j, rows[i]->iteration);
      pxctl_json_key(&j, "rank");
      pxctl_json_int(&j, rows[i]->rank);
      pxctl_json_key(&j, "mask_drift");
      pxctl_json_int(&j, rows[i]->mask_drift);
      pxctl_json_key(&j, "mask_groups");
      if (rows[i]->mask_groups > 0) pxctl_json_int(&j, rows[i]->mask_groups);
      else pxctl_json_null(&j);
      pxctl_json_key(&j, "density");
      pxctl_json_double(&j, rows[i]->density);
      pxctl_json_key(&j, "frozen");
      pxctl_json_bool(&j, rows[i]->frozen);
      pxctl_json_end_object(&j);
    }
    pxctl_json_end_array(&j);
    pxctl_json_end_object(&j);
    pxctl_json_finish(&j);
    goto out;
  }
  if (n == 0) {
    printf("job %s has no iteration reports yet\n", o->pos[0]);
    goto out;
  }
  static const char *const h[] = {">ITER", ">RANK", ">DRIFT", ">DENSITY", "MASKS"};
  static const char *const h1[] = {">ITER", ">DRIFT", ">DENSITY", "MASKS"};
  pxctl_table_t *t = o->all_ranks ? pxctl_table_create(5, h) : pxctl_table_create(4, h1);
  for (size_t i = 0; i < n; i++) {
    pxctl_table_cell(t, "%d", rows[i]->iteration);
    if (o->all_ranks) pxctl_table_cell(t, "%d", rows[i]->rank);
    if (rows[i]->mask_groups > 0)
      pxctl_table_cell(t, "%lld of %lld groups", (long long)rows[i]->mask_drift,
                       (long long)rows[i]->mask_groups);
    else pxctl_table_cell(t, "%lld", (long long)rows[i]->mask_drift);
    pxctl_table_cell(t, "%.4f", rows[i]->density);
    pxctl_table_cell(t, "%s", rows[i]->frozen ? "frozen" : "-");
  }
  pxctl_table_print(t, stdout, 0);
  if (frozen_at >= 0)
    printf("masks froze at iteration %d%s", frozen_at, last_change >= 0 ? "" : "\n");
  else printf("masks not frozen%s", last_change >= 0 ? "" : "\n");
  if (last_change >= 0)
    printf("; last change at iteration %d\n", last_change);
out:
  px_free(rows);
  px_rpc_message_free(resp);
  px_rpc_channel_destroy(ch);
  return rc;
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
  int max = pxctl_max_iterations(job), done = pxctl_done_iterations(job);
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
  if (pxctl_terminal(job->state) && job->n_events > 0)
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
  if (rate > 0 && max > done && !pxctl_terminal(job->state) && used < (int)sizeof line) {
    char eta[32];
    pxctl_fmt_duration(eta, sizeof eta, (max - done) / rate);
    used += snprintf(line + used, sizeof line - (size_t)used, "  ETA %s", eta);
  }
  if (used < (int)sizeof line) used += snprintf(line + used, sizeof line - (size_t)used, "  %s", el);
  /* A job that ended before max_iterations says why (the controller
   * converged, a rank failed, it was cancelled). */
  if (final && pxctl_terminal(job->state) && max > done && job->reason[0] &&
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
    int end = pxctl_terminal(last->job->state);
    pxctl_bar_draw(&b, last->job, end);
    last_draw = pxctl_mono_s();
    if (end) break;
  }
  px_rpc_stream_destroy(s);
  if (st == PX_OK && (!last || !last->job || !pxctl_terminal(last->job->state))) {
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

/* After a failed call of watch: 1 when it is worth another try (the
 * coordinator is unreachable or restarting, and has been for less than
 * PXCTL_WATCH_RECONNECT_MS since *lost_at), after a pause that doubles up
 * to 5 s and a new channel in *ch; 0 to give up (*ch still valid, or NULL
 * when a new one could not be made). */
static int pxctl_watch_retry(pxctl_opts_t *o, px_rpc_channel_t **ch, int64_t *lost_at,
                             int64_t *pause) {
  int retryable = px_rpc_last_retryable();
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  int64_t now = (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
  if (!*lost_at) *lost_at = now;
  if (!retryable || now - *lost_at > PXCTL_WATCH_RECONNECT_MS) return 0;
  fprintf(stderr, "pxctl: watch %s: the coordinator at %s is unreachable (%s); reconnecting\n",
          o->pos[0], o->coordinator, px_last_error());
  px_rpc_channel_destroy(*ch);
  struct timespec d = {*pause / 1000, (long)(*pause % 1000) * 1000000L};
  nanosleep(&d, NULL);
  *pause = *pause * 2 > 5000 ? 5000 : *pause * 2;
  *ch = pxctl_connect(o);
  return *ch != NULL;
}

int pxctl_cmd_watch(pxctl_opts_t *o) {
  px_rpc_channel_t *ch = pxctl_connect(o);
  if (!ch) return PXCTL_EXIT_FAIL;
  /* A coordinator that goes away (a restart, an outage), or is not there
   * yet, is waited for: the call is made again, with a backoff, for
   * PXCTL_WATCH_RECONNECT_MS. GetJob first: a clear "no job" beats a stream
   * that ends NOT_FOUND. */
  int64_t lost_at = 0, pause = 200;
  Prunex__V1__Job *job = NULL;
  while (px_rpc_get_job(ch, o->pos[0], PXCTL_DEADLINE_MS, &job) != PX_OK) {
    if (pxctl_watch_retry(o, &ch, &lost_at, &pause)) continue;
    if (!ch) return PXCTL_EXIT_FAIL;
    int rc = pxctl_rpc_fail(ch, o->pos[0]);
    px_rpc_channel_destroy(ch);
    return rc;
  }
  px_rpc_message_free(job);
  void *holder = NULL;
  const Prunex__V1__Job *fin = NULL;
  int rc = PXCTL_EXIT_OK;
  px_status_t st;
  while ((st = pxctl_watch(ch, o->pos[0], o->json ? NULL : stdout, NULL, NULL, &holder, &fin)) !=
         PX_OK) {
    px_rpc_message_free(holder);
    holder = NULL;
    if (!pxctl_watch_retry(o, &ch, &lost_at, &pause)) break;
  }
  if (!ch) return PXCTL_EXIT_FAIL;
  if (st != PX_OK) {
    rc = pxctl_rpc_fail(ch, o->pos[0]);
  } else if (o->json) {
    pxctl_json_t j;
    pxctl_json_init(&j, stdout);
    pxctl_json_job(&j, fin);
    pxctl_json_finish(&j);
    rc = fin->state == PRUNEX__V1__JOB_STATE__JOB_STATE_SUCCEEDED ? 0 : PXCTL_EXIT_FAIL;
  } else {
    printf("%s %s%s%s\n", fin->job_id, px_rpc_job_state_name(fin->state),
           fin->reason[0] ? ": " : "", fin->reason);
    rc = fin->state == PRUNEX__V1__JOB_STATE__JOB_STATE_SUCCEEDED ? 0 : PXCTL_EXIT_FAIL;
  }
  px_rpc_message_free(holder);
  px_rpc_channel_destroy(ch);
  return rc;
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
