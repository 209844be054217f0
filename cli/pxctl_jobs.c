/* pxctl list, cancel and delete: the jobs of the coordinator. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "prunex/jobspec.h"

#include "pxctl.h"


/* The first dependency a job still waits for (not ended), or NULL. */
static const char *pxctl_job_waits_for(const Prunex__V1__Job *job) {
  for (size_t i = 0; i < job->n_after; i++)
    if (!pxctl_job_finished(job->after[i]->state)) return job->after[i]->job_id;
  return NULL;
}

/* The jobs as a table; pending ones add their place in the queue. */
static void pxctl_print_jobs(const Prunex__V1__ListJobsResponse *resp) {
  int queue = 0;
  for (size_t i = 0; i < resp->n_jobs; i++) queue |= resp->jobs[i]->sched != NULL;
  static const char *const h[] = {"JOB",      "USER",    "NAME",      "STATE",
                                  "STRATEGY", ">NODES",  ">ITER",     ">TEST-ACC",
                                  ">DENSITY", "CREATED", ">PRIORITY", "JOB/FAIR/AGE",
                                  ">AHEAD"};
  pxctl_table_t *t = pxctl_table_create(queue ? 13 : 10, h);
  for (size_t i = 0; i < resp->n_jobs; i++) {
    const Prunex__V1__Job *job = resp->jobs[i];
    const Prunex__V1__JobSpec *s = job->spec;
    char acc[32], age[48];
    pxctl_table_cell(t, "%s", job->job_id);
    pxctl_table_cell(t, "%s", job->owner[0] ? job->owner : "-");
    pxctl_table_cell(t, "%s", job->name);
    if (job->state == PRUNEX__V1__JOB_STATE__JOB_STATE_PENDING && job->held_by[0])
      pxctl_table_cell(t, "PENDING (held)");
    else if (job->state == PRUNEX__V1__JOB_STATE__JOB_STATE_PENDING && pxctl_job_waits_for(job))
      pxctl_table_cell(t, "PENDING (after %s)", pxctl_job_waits_for(job));
    else if (job->attempt > 1)
      pxctl_table_cell(t, "%s (attempt %d)", px_rpc_job_state_name(job->state), job->attempt);
    else pxctl_table_cell(t, "%s", px_rpc_job_state_name(job->state));
    pxctl_table_cell(t, "%s", s ? px_jobspec_strategy_name(s->strategy) : "?");
    if (s && s->cluster)
      pxctl_table_cell(t, "%dx%d", s->cluster->nodes, s->cluster->workers_per_node);
    else pxctl_table_cell(t, "?");
    int max = pxctl_job_max_iterations(job);
    if (max > 0) pxctl_table_cell(t, "%d/%d", pxctl_job_done_iterations(job), max);
    else pxctl_table_cell(t, "%d", pxctl_job_done_iterations(job));
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
  if (o->user && o->me) return pxctl_usage_error(o, "--user and --me: give one");
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
    req.owner = o->user ? (char *)o->user : ""; /* filtered by the coordinator, page by page */
    req.mine = o->me;
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
    printf(o->state ? "no %s jobs" : "no jobs",
           px_rpc_job_state_name((Prunex__V1__JobState)o->state));
    if (o->user || o->me) printf(" of %s", o->user ? o->user : "yours");
    printf("\n");
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

static int pxctl_delete_job(pxctl_opts_t *o, px_rpc_channel_t *ch) {
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
    pxctl_json_kv_string(&j, "job_id", o->pos[0]);
    pxctl_json_kv_bool(&j, "deleted", 1);
    pxctl_json_end_object(&j);
    pxctl_json_finish(&j);
  } else {
    printf("%s deleted\n", o->pos[0]);
  }
  return rc;
}

int pxctl_cmd_delete(pxctl_opts_t *o) { return pxctl_with_channel(o, pxctl_delete_job); }

/* ---- cancel ----------------------------------------------------------------- */

static int pxctl_job_cancel(pxctl_opts_t *o, px_rpc_channel_t *ch) {
  Prunex__V1__CancelJobResponse *resp = NULL;
  int rc = PXCTL_EXIT_OK;
  const char *reason = o->reason && o->reason[0] ? o->reason : "by pxctl cancel";
  if (px_rpc_cancel_job(ch, o->pos[0], reason, PXCTL_DEADLINE_MS, &resp) != PX_OK) {
    if (px_rpc_last_code() == PX_RPC_FAILED_PRECONDITION)
      rc = pxctl_fail("cannot cancel job '%s': %s", o->pos[0], px_last_error());
    else rc = pxctl_rpc_fail(ch, o->pos[0]);
  } else if (o->json) {
    pxctl_json_print_job(resp->job);
  } else {
    printf("%s %s\n", o->pos[0],
           resp->job ? px_rpc_job_state_name(resp->job->state) : "CANCELLED");
  }
  px_rpc_message_free(resp);
  return rc;
}

int pxctl_cmd_cancel(pxctl_opts_t *o) {
  return pxctl_with_channel(o, pxctl_is_sweep_id(o->pos[0]) ? pxctl_sweep_cancel : pxctl_job_cancel);
}
