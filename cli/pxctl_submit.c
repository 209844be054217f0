/* pxctl submit: a spec file (parsed once, pxctl_load_spec), the cluster
 * shape from the command line, SubmitJob. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "prunex/jobspec.h"

#include "pxctl.h"

/* The cluster shape from the command line (the Slurm script's
 * allocation). A derived max_iterations follows the new shape; one the spec
 * gives stays. The text gets a note of the options at its end. 0, or the
 * exit status (the message printed). */
static int pxctl_submit_shape(const pxctl_opts_t *o, Prunex__V1__JobSpec *spec, char **text,
                              const px_jobspec_given_t *given) {
  if (o->nodes > 0) spec->cluster->nodes = o->nodes;
  if (o->workers_per_node > 0) spec->cluster->workers_per_node = o->workers_per_node;
  if (!px_jobspec_given(given, "admm.max_iterations")) spec->admm->max_iterations = 0;
  if (px_jobspec_fill_defaults(spec) != PX_OK || px_jobspec_validate(spec) != PX_OK) {
    fprintf(stderr, "pxctl: %s with --nodes %d --workers-per-node %d: %s\n", o->pos[0],
            spec->cluster->nodes, spec->cluster->workers_per_node, px_last_error());
    return PXCTL_EXIT_USAGE;
  }
  size_t n = strlen(*text);
  char note[96];
  int m = snprintf(note, sizeof note, "%s# pxctl submit --nodes %d --workers-per-node %d\n",
                   n && (*text)[n - 1] != '\n' ? "\n" : "", spec->cluster->nodes,
                   spec->cluster->workers_per_node);
  if (n + (size_t)m > (1u << 20)) return PXCTL_EXIT_OK; /* a spec's limit: no room for the note */
  char *t = px_realloc(*text, n + (size_t)m + 1, "pxctl.spec_text");
  if (!t) return pxctl_fail("out of memory");
  memcpy(t + n, note, (size_t)m + 1);
  *text = t;
  return PXCTL_EXIT_OK;
}

/* The --after options as dependencies (their job ids copied into ids). */
static void pxctl_submit_after(const pxctl_opts_t *o, Prunex__V1__JobDependency *deps,
                               Prunex__V1__JobDependency **dp, char (*ids)[64]) {
  for (int i = 0; i < o->nafter; i++) {
    deps[i] = (Prunex__V1__JobDependency)PRUNEX__V1__JOB_DEPENDENCY__INIT;
    size_t n = strcspn(o->after[i], ":");
    snprintf(ids[i], 64, "%.*s", (int)(n < 63 ? n : 63), o->after[i]);
    deps[i].job_id = ids[i];
    deps[i].kind = !strcmp(o->after[i] + n, ":any")
                       ? PRUNEX__V1__DEPENDENCY_KIND__DEPENDENCY_KIND_ANY
                       : PRUNEX__V1__DEPENDENCY_KIND__DEPENDENCY_KIND_OK;
    dp[i] = &deps[i];
  }
}

int pxctl_cmd_submit(pxctl_opts_t *o) {
  Prunex__V1__JobSpec *spec;
  char *text;
  px_jobspec_given_t given;
  int rc = pxctl_load_spec(o->pos[0], &spec, &text, &given);
  if (rc) return rc;
  if ((o->nodes > 0 || o->workers_per_node > 0) &&
      (rc = pxctl_submit_shape(o, spec, &text, &given)) != PXCTL_EXIT_OK) {
    px_jobspec_free(spec);
    px_free(text);
    return rc;
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
  /* --after JOB[:ok|any] (checked when parsed): the jobs it waits for */
  Prunex__V1__JobDependency deps[PXCTL_AFTER_MAX], *dp[PXCTL_AFTER_MAX];
  char ids[PXCTL_AFTER_MAX][64];
  pxctl_submit_after(o, deps, dp, ids);
  req.after = dp;
  req.n_after = (size_t)o->nafter;
  Prunex__V1__SubmitJobResponse *resp = NULL;
  char budget[400] = "";
  if (!px_jobspec_given(&given, "admm.max_iterations"))
    px_jobspec_budget_text(spec, budget, sizeof budget);
  if (px_rpc_submit_job(ch, &req, PXCTL_DEADLINE_MS, &resp) != PX_OK) {
    rc = pxctl_rpc_fail(ch, NULL);
  } else if (o->json) {
    pxctl_json_t j;
    pxctl_json_init(&j, stdout);
    pxctl_json_begin_object(&j);
    pxctl_json_kv_string(&j, "job_id", resp->job_id);
    pxctl_json_kv_string(&j, "name", spec->name);
    pxctl_json_kv_string(&j, "spec_file", o->pos[0]);
    if (budget[0]) pxctl_json_kv_string(&j, "budget", budget);
    if (resp->sweep_id[0]) {
      pxctl_json_kv_string(&j, "sweep_id", resp->sweep_id);
      pxctl_json_kv_strings(&j, "job_ids", resp->job_ids, resp->n_job_ids);
    }
    pxctl_json_end_object(&j);
    pxctl_json_finish(&j);
  } else if (resp->sweep_id[0]) {
    printf("%s\n", resp->sweep_id); /* then its jobs, one a line */
    for (size_t i = 0; i < resp->n_job_ids; i++) printf("%s\n", resp->job_ids[i]);
  } else {
    printf("%s\n", resp->job_id);
  }
  if (rc == PXCTL_EXIT_OK && budget[0] && !o->json) /* stdout stays the job ids */
    fprintf(stderr, "pxctl: admm.max_iterations: %s\n", budget);
  px_rpc_message_free(resp);
  px_rpc_channel_destroy(ch);
  px_jobspec_free(spec);
  px_free(text);
  return rc;
}
