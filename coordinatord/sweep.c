/* Sweeps: a submitted spec with `sweep:` becomes one job per
 * combination of its values, all under one sweep id, in one transaction
 * (every combination checked first: all jobs or none). Each job is an
 * ordinary job from then on: its stored spec is the combination's (no
 * sweep), its spec_yaml the combination written out, and it names its
 * sweep and values (jobs.sweep_id, sweep_point) for `pxctl list --sweep`
 * and `pxctl status SWEEP`. Cancelling the sweep id cancels its unfinished
 * jobs together. The expansion rules are the job spec module's
 * (px_jobspec_sweep_point); the queries are db/sweep.c's. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "coord.h"
#include "db/sweep.h"
#include "effects.h"
#include "prunex/check.h"
#include "prunex/jobspec.h"

int coord_sweep_id_like(const char *id) {
  return !strncmp(id, COORD_SWEEP_PREFIX, strlen(COORD_SWEEP_PREFIX));
}

/* One combination, ready to insert. */
typedef struct {
  Prunex__V1__JobSpec *spec;
  char *yaml;
  char label[1200];
  int priority;
  int64_t time_limit_ms;
} coord_sweep_point_t;

static void coord_sweep_points_free(coord_sweep_point_t *pts, size_t n) {
  for (size_t i = 0; pts && i < n; i++) {
    px_jobspec_free(pts[i].spec);
    px_free(pts[i].yaml);
  }
  px_free(pts);
}

/* Expands and checks every combination (the job names NAME-K, K from 1).
 * 1 with *pts (n of them), or 0 with the call answered. */
static int coord_sweep_expand(coord_t *c, px_rpc_srv_call_t *call,
                              const Prunex__V1__SubmitJobRequest *r, coord_sweep_point_t **pts,
                              size_t *n) {
  *pts = NULL;
  if (px_jobspec_sweep_count(r->spec, n) != PX_OK) { /* checked already: a NOMEM */
    coord_fail_internal(c, call);
    return 0;
  }
  coord_sweep_point_t *p = px_calloc(*n, sizeof *p, "coordd.sweep_points");
  if (!p) {
    coord_fail_internal(c, call);
    return 0;
  }
  for (size_t k = 0; k < *n; k++) {
    px_status_t st = px_jobspec_sweep_point(r->spec, k, &p[k].spec, p[k].label,
                                            sizeof p[k].label);
    if (st == PX_ERR_INVALID) {
      px_log(PX_LOG_INFO, "SubmitJob (sweep) refused: %s", px_last_error());
      px_rpc_srv_finish(call, PX_RPC_INVALID_ARGUMENT, "%s", px_last_error());
    } else if (st != PX_OK) {
      coord_fail_internal(c, call);
    }
    char name[160];
    snprintf(name, sizeof name, "%.120s-%zu", r->spec->name, k + 1);
    if (st == PX_OK) {
      free(p[k].spec->name); /* protobuf-c's allocator: malloc */
      p[k].spec->name = strdup(name);
      if (!p[k].spec->name) st = PX_ERR_NOMEM;
      if (st != PX_OK) coord_fail_internal(c, call);
    }
    if (st == PX_OK &&
        !coord_submit_policy(c, call, p[k].spec, &p[k].priority, &p[k].time_limit_ms))
      st = PX_ERR_INVALID;
    if (st == PX_OK && px_jobspec_to_yaml(p[k].spec, &p[k].yaml) != PX_OK) {
      st = PX_ERR_NOMEM;
      coord_fail_internal(c, call);
    }
    if (st != PX_OK) {
      coord_sweep_points_free(p, k + 1);
      return 0;
    }
  }
  *pts = p;
  return 1;
}

/* Inserts the sweep and its jobs (in a transaction); ids into the arena. */
static px_status_t coord_sweep_insert(coord_t *c, coord_arena_t *a,
                                      const Prunex__V1__SubmitJobRequest *r,
                                      const coord_sweep_point_t *pts, size_t n, char *sweep_id,
                                      size_t cap, char **ids, const char *depends) {
  const char *owner = c->who.role == COORD_ROLE_ANON ? "" : c->who.name;
  PX_CHECK(coord_db_sweep_new(c, owner, r->spec->name, r->spec_yaml, (int64_t)n, coord_now_ms(),
                           sweep_id, cap));
  for (size_t k = 0; k < n; k++) {
    char job_id[64];
    px_buf_t y = {0};
    px_buf_printf(&y, "# %s, job %zu of %zu: %s\n%s", sweep_id, k + 1, n, pts[k].label,
                  pts[k].yaml);
    px_status_t st = y.oom ? PX_ERR_NOMEM : PX_OK;
    if (st == PX_OK)
      st = coord_job_submit(c, pts[k].spec, y.p, pts[k].priority, pts[k].time_limit_ms, job_id,
                            sizeof job_id);
    px_buf_free(&y);
    PX_CHECK(st);
    PX_CHECK(coord_db_sweep_job_set(c, job_id, sweep_id, pts[k].label));
    PX_CHECK(coord_job_set_depends(c, job_id, depends)); /* each waits for them */
    if (!(ids[k] = coord_strdup(a, job_id))) return PX_ERR_NOMEM;
  }
  return PX_OK;
}

void coord_sweep_submit(coord_t *c, px_rpc_srv_call_t *call,
                        const Prunex__V1__SubmitJobRequest *r) {
  coord_sweep_point_t *pts = NULL;
  size_t n = 0;
  if (!coord_sweep_expand(c, call, r, &pts, &n)) return;
  coord_arena_t a;
  coord_arena_init(&a);
  char sweep_id[64];
  char **ids = coord_alloc(&a, n * sizeof *ids);
  char *depends = "";
  if (!coord_submit_after(c, call, &a, r, &depends)) goto out;
  if (!coord_submit_quota(c, call, (int64_t)n)) goto out;
  coord_effects_t fx;
  coord_effects_init(&fx, &a);
  px_status_t rc = ids ? px_store_begin(c->db) : PX_ERR_NOMEM;
  if (rc == PX_OK) {
    rc = coord_sweep_insert(c, &a, r, pts, n, sweep_id, sizeof sweep_id, ids, depends);
    for (size_t k = 0; rc == PX_OK && k < n; k++)
      rc = coord_fx_changed(&fx, ids[k]); /* PENDING: their notifications */
    coord_fx_schedule(&fx);
    rc = coord_commit_if(c, rc, 1, &fx);
  }
  if (rc != PX_OK) {
    coord_fail_internal(c, call);
    goto out;
  }
  px_log(PX_LOG_INFO, "sweep %s: %zu jobs (%s ... %s)", sweep_id, n, ids[0], ids[n - 1]);
  Prunex__V1__SubmitJobResponse resp = PRUNEX__V1__SUBMIT_JOB_RESPONSE__INIT;
  resp.job_id = ids[0];
  resp.sweep_id = sweep_id;
  resp.job_ids = ids;
  resp.n_job_ids = n;
  px_rpc_srv_reply(call, &resp.base);
out:
  coord_sweep_points_free(pts, n);
  coord_arena_free(&a);
}

/* Cancels the listed jobs (in a transaction of its own, committed with
 * what follows: the active ones' CANCEL to their nodes, every one changed,
 * a scheduler pass for the nodes freed). */
static px_status_t coord_sweep_cancel_jobs(coord_t *c, coord_arena_t *a,
                                           const coord_db_sweep_job_t *jobs, size_t n,
                                           const char *reason) {
  coord_effects_t fx;
  coord_effects_init(&fx, a);
  PX_CHECK(px_store_begin(c->db));
  px_status_t rc = PX_OK;
  for (size_t i = 0; rc == PX_OK && i < n; i++) {
    rc = coord_job_set_state(c, jobs[i].job_id, jobs[i].state, JS_CANCELLED, reason);
    if (rc == PX_OK) rc = coord_job_release_nodes(c, jobs[i].job_id, reason);
    if (rc == PX_OK && coord_job_active(jobs[i].state))
      rc = coord_fx_push(&fx, jobs[i].job_id,
                         PRUNEX__V1__ASSIGNMENT_ACTION__ASSIGNMENT_ACTION_CANCEL);
    if (rc == PX_OK) rc = coord_fx_changed(&fx, jobs[i].job_id);
  }
  coord_fx_schedule(&fx);
  if (rc != PX_OK) {
    px_store_rollback(c->db);
    return rc;
  }
  return coord_commit(c, &fx);
}

void coord_sweep_cancel(coord_t *c, px_rpc_srv_call_t *call,
                        const Prunex__V1__CancelJobRequest *r) {
  coord_arena_t a;
  coord_arena_init(&a);
  int found = 0;
  char owner[COORD_NAME_MAX];
  coord_db_sweep_job_t *jobs = NULL;
  size_t n = 0;
  if (coord_db_sweep_owner(c, r->job_id, &found, owner, sizeof owner) != PX_OK) {
    coord_fail_internal(c, call);
    goto out;
  }
  if (!found) {
    px_rpc_srv_finish(call, PX_RPC_NOT_FOUND, "sweep %s not found", r->job_id);
    goto out;
  }
  if (!coord_auth_may_manage(&c->who, owner)) {
    px_rpc_srv_finish(call, PX_RPC_PERMISSION_DENIED,
                      "%s may not cancel sweep %s: it belongs to %s (only its owner or an admin"
                      " may)",
                      c->who.name, r->job_id, owner[0] ? owner : "nobody");
    goto out;
  }
  char reason[512];
  snprintf(reason, sizeof reason, "cancelled with sweep %s: %s", r->job_id,
           r->reason[0] ? r->reason : "by request");
  if (coord_db_sweep_unfinished(c, &a, r->job_id, &jobs, &n) != PX_OK ||
      coord_sweep_cancel_jobs(c, &a, jobs, n, reason) != PX_OK) {
    coord_fail_internal(c, call);
    goto out;
  }
  char **ids = coord_alloc(&a, (n ? n : 1) * sizeof *ids);
  for (size_t i = 0; ids && i < n; i++) ids[i] = jobs[i].job_id;
  px_log(PX_LOG_INFO, "sweep %s: %zu unfinished jobs cancelled", r->job_id, n);
  Prunex__V1__CancelJobResponse resp = PRUNEX__V1__CANCEL_JOB_RESPONSE__INIT;
  resp.job_ids = ids;
  resp.n_job_ids = ids ? n : 0;
  px_rpc_srv_reply(call, &resp.base);
out:
  coord_arena_free(&a);
}
