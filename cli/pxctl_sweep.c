/* Sweeps in pxctl: `status SWEEP` and the summary after `list
 * --sweep SWEEP` (the sweep's jobs by state, the best test accuracy, the
 * lowest density and the fewest inter-node bytes among the jobs that
 * reported, each with its values), and `cancel SWEEP`. The jobs come from
 * ListJobs filtered by sweep id; the coordinator holds no summary of its
 * own. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "pxctl.h"

#define PXCTL_DEADLINE_MS 10000

int pxctl_is_sweep_id(const char *ref) { return ref && !strncmp(ref, "sweep-", 6); }

/* The sweep's best jobs: index of each, -1 when none reported. */
typedef struct {
  int best_acc, low_density, few_bytes;
  size_t by_state[16];
} pxctl_sweep_sum_t;

static int pxctl_reported(const Prunex__V1__Job *j) {
  return j->summary && j->summary->iterations > 0;
}

static void pxctl_sweep_sum(Prunex__V1__Job *const *jobs, size_t n, pxctl_sweep_sum_t *s) {
  memset(s, 0, sizeof *s);
  s->best_acc = s->low_density = s->few_bytes = -1;
  for (size_t i = 0; i < n; i++) {
    const Prunex__V1__Job *j = jobs[i];
    if ((unsigned)j->state < 16) s->by_state[j->state]++;
    if (!pxctl_reported(j)) continue;
    const Prunex__V1__JobSummary *m = j->summary;
    if (m->test_accuracy >= 0 &&
        (s->best_acc < 0 || m->test_accuracy > jobs[s->best_acc]->summary->test_accuracy))
      s->best_acc = (int)i;
    if (s->low_density < 0 || m->density < jobs[s->low_density]->summary->density)
      s->low_density = (int)i;
    if (s->few_bytes < 0 || m->inter_bytes < jobs[s->few_bytes]->summary->inter_bytes)
      s->few_bytes = (int)i;
  }
}

void pxctl_sweep_print_summary(const char *sweep_id, Prunex__V1__Job *const *jobs, size_t n) {
  pxctl_sweep_sum_t s;
  pxctl_sweep_sum(jobs, n, &s);
  printf("sweep      %s: %zu job%s", sweep_id, n, n == 1 ? "" : "s");
  const char *sep = ": ";
  for (int st = 1; st < 16; st++) {
    if (!s.by_state[st]) continue;
    printf("%s%zu %s", sep, s.by_state[st], px_rpc_job_state_name((Prunex__V1__JobState)st));
    sep = ", ";
  }
  printf("\n");
  char buf[64];
  if (s.best_acc >= 0) {
    const Prunex__V1__Job *j = jobs[s.best_acc];
    pxctl_fmt_pct(buf, sizeof buf, j->summary->test_accuracy);
    printf("best       test accuracy %s: %s (%s)\n", buf, j->job_id, j->sweep_point);
  }
  if (s.low_density >= 0) {
    const Prunex__V1__Job *j = jobs[s.low_density];
    printf("lowest     density %.4f: %s (%s)\n", j->summary->density, j->job_id, j->sweep_point);
  }
  if (s.few_bytes >= 0) {
    const Prunex__V1__Job *j = jobs[s.few_bytes];
    pxctl_fmt_bytes(buf, sizeof buf, j->summary->inter_bytes);
    printf("fewest     inter-node bytes %s: %s (%s)\n", buf, j->job_id, j->sweep_point);
  }
  if (s.best_acc < 0 && s.low_density < 0) printf("results    none reported yet\n");
}

/* One member of the sweep as JSON (what the summary compares). */
static void pxctl_sweep_json_job(pxctl_json_t *j, const Prunex__V1__Job *job) {
  int have = pxctl_reported(job);
  pxctl_json_begin_object(j);
  pxctl_json_kv_string(j, "job_id", job->job_id);
  pxctl_json_kv_string(j, "name", job->name);
  pxctl_json_kv_string(j, "sweep_point", job->sweep_point);
  pxctl_json_kv_string(j, "state", px_rpc_job_state_name(job->state));
  pxctl_json_kv_int(j, "iterations", have ? job->summary->iterations : 0);
  pxctl_json_key(j, "test_accuracy");
  if (have && job->summary->test_accuracy >= 0) pxctl_json_double(j, job->summary->test_accuracy);
  else pxctl_json_null(j);
  pxctl_json_key(j, "density");
  if (have) pxctl_json_double(j, job->summary->density);
  else pxctl_json_null(j);
  pxctl_json_key(j, "inter_bytes");
  if (have) pxctl_json_uint(j, job->summary->inter_bytes);
  else pxctl_json_null(j);
  pxctl_json_end_object(j);
}

static void pxctl_sweep_json(const char *sweep_id, Prunex__V1__Job *const *jobs, size_t n) {
  pxctl_sweep_sum_t s;
  pxctl_sweep_sum(jobs, n, &s);
  pxctl_json_t j;
  pxctl_json_init(&j, stdout);
  pxctl_json_begin_object(&j);
  pxctl_json_kv_string(&j, "sweep_id", sweep_id);
  pxctl_json_kv_int(&j, "jobs", (int64_t)n);
  pxctl_json_key(&j, "states");
  pxctl_json_begin_object(&j);
  for (int st = 1; st < 16; st++)
    if (s.by_state[st]) {
      pxctl_json_key(&j, px_rpc_job_state_name((Prunex__V1__JobState)st));
      pxctl_json_int(&j, (int64_t)s.by_state[st]);
    }
  pxctl_json_end_object(&j);
  static const char *const keys[] = {"best_accuracy", "lowest_density", "fewest_inter_bytes"};
  const int best[] = {s.best_acc, s.low_density, s.few_bytes};
  for (int k = 0; k < 3; k++) {
    pxctl_json_key(&j, keys[k]);
    if (best[k] >= 0) pxctl_sweep_json_job(&j, jobs[best[k]]);
    else pxctl_json_null(&j);
  }
  pxctl_json_key(&j, "members");
  pxctl_json_begin_array(&j);
  for (size_t i = 0; i < n; i++) pxctl_sweep_json_job(&j, jobs[i]);
  pxctl_json_end_array(&j);
  pxctl_json_end_object(&j);
  pxctl_json_finish(&j);
}

static void pxctl_sweep_table(Prunex__V1__Job *const *jobs, size_t n) {
  static const char *const h[] = {"JOB", "VALUES", "STATE", ">ITER", ">TEST-ACC", ">DENSITY",
                                  ">INTER-NODE"};
  pxctl_table_t *t = pxctl_table_create(7, h);
  for (size_t i = 0; i < n; i++) {
    const Prunex__V1__Job *job = jobs[i];
    int have = pxctl_reported(job);
    char acc[32], bytes[32];
    pxctl_fmt_pct(acc, sizeof acc, have ? job->summary->test_accuracy : -1.0);
    pxctl_fmt_bytes(bytes, sizeof bytes, have ? job->summary->inter_bytes : 0);
    pxctl_table_cell(t, "%s", job->job_id);
    pxctl_table_cell(t, "%s", job->sweep_point);
    pxctl_table_cell(t, "%s", px_rpc_job_state_name(job->state));
    pxctl_table_cell(t, "%d", have ? job->summary->iterations : 0);
    pxctl_table_cell(t, "%s", acc);
    if (have) pxctl_table_cell(t, "%.4f", job->summary->density);
    else pxctl_table_cell(t, "-");
    pxctl_table_cell(t, "%s", have ? bytes : "-");
  }
  pxctl_table_print(t, stdout, 0);
}

int pxctl_sweep_status(pxctl_opts_t *o, px_rpc_channel_t *ch) {
  /* a sweep has at most 1000 jobs: one page (a second only to be sure) */
  Prunex__V1__ListJobsRequest req = PRUNEX__V1__LIST_JOBS_REQUEST__INIT;
  req.limit = 1000;
  req.sweep_id = (char *)o->pos[0];
  Prunex__V1__ListJobsResponse *resp = NULL;
  if (px_rpc_list_jobs(ch, &req, PXCTL_DEADLINE_MS, &resp) != PX_OK)
    return pxctl_rpc_fail(ch, NULL);
  int rc = PXCTL_EXIT_OK;
  size_t n = resp->n_jobs;
  /* submission order (ListJobs gives the newest first) */
  for (size_t i = 0; i < n / 2; i++) {
    Prunex__V1__Job *t = resp->jobs[i];
    resp->jobs[i] = resp->jobs[n - 1 - i];
    resp->jobs[n - 1 - i] = t;
  }
  if (n == 0) {
    rc = pxctl_fail("no sweep '%s' (or none of its jobs is kept)", o->pos[0]);
  } else if (o->json) {
    pxctl_sweep_json(o->pos[0], resp->jobs, n);
  } else {
    pxctl_sweep_print_summary(o->pos[0], resp->jobs, n);
    pxctl_sweep_table(resp->jobs, n);
  }
  px_rpc_message_free(resp);
  return rc;
}

int pxctl_sweep_cancel(pxctl_opts_t *o, px_rpc_channel_t *ch) {
  Prunex__V1__CancelJobResponse *resp = NULL;
  const char *reason = o->reason && o->reason[0] ? o->reason : "by pxctl cancel";
  if (px_rpc_cancel_job(ch, o->pos[0], reason, PXCTL_DEADLINE_MS, &resp) != PX_OK)
    return px_rpc_last_code() == PX_RPC_NOT_FOUND ? pxctl_fail("no sweep '%s'", o->pos[0])
                                                  : pxctl_rpc_fail(ch, NULL);
  if (o->json) {
    pxctl_json_t j;
    pxctl_json_init(&j, stdout);
    pxctl_json_begin_object(&j);
    pxctl_json_kv_string(&j, "sweep_id", o->pos[0]);
    pxctl_json_kv_strings(&j, "cancelled", resp->job_ids, resp->n_job_ids);
    pxctl_json_end_object(&j);
    pxctl_json_finish(&j);
  } else {
    printf("%s: %zu unfinished job%s cancelled\n", o->pos[0], resp->n_job_ids,
           resp->n_job_ids == 1 ? "" : "s");
    for (size_t i = 0; i < resp->n_job_ids; i++) printf("%s CANCELLED\n", resp->job_ids[i]);
  }
  px_rpc_message_free(resp);
  return PXCTL_EXIT_OK;
}
