/* The job handlers: SubmitJob, CancelJob, DeleteJob, ReportRankExit
 * (success and failure), the read side (GetJob, ListJobs, WatchJob,
 * GetAccounting), and the time-limit and retention sweeps. Each records
 * what its transition makes follow and commits it (effects.h); the
 * submission's checks are submit.c's, placement place.c's, faults
 * attempt.c's, the queries db/'s. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "db/control.h"
#include "db/db_core.h"
#include "db/membership.h"
#include "flow.h"
#include "notify_policy.h"
#include "shrink.h"

#include "prunex/check.h"
#include "prunex/jobspec.h"

#define COORD_SPEC_YAML_MAX (1 << 20)

/* ---- time limits ------------------------------------------------------------------ */

void coord_time_limit_sweep(coord_t *c) {
  if (c->stopping) return;
  int64_t now = coord_now_ms();
  coord_arena_t a;
  coord_arena_init(&a);
  coord_sched_overdue_t *o = NULL;
  size_t n = 0;
  if (coord_db_sched_overdue(c, &a, now, &o, &n) != PX_OK) goto fail;
  for (size_t i = 0; i < n; i++) {
    long long limit_s = (long long)(o[i].time_limit_ms / 1000);
    if (!o[i].stop_requested_ms) {
      /* the graceful end: rank 0's next report is answered stop */
      if (coord_db_sched_request_stop(c, o[i].job_id, now) != PX_OK) goto fail;
      px_log(PX_LOG_INFO, "job %s reached its time limit of %lld s: its ranks are asked to stop"
             " (final checkpoint, then TIMEOUT)", o[i].job_id, limit_s);
      continue;
    }
    if (now - o[i].stop_requested_ms < COORD_TIMEOUT_GRACE_MS) continue;
    char reason[256];
    snprintf(reason, sizeof reason,
             "TIMEOUT: ran past its time limit of %lld s and did not stop within %d s of being"
             " asked: its ranks were cancelled",
             limit_s, COORD_TIMEOUT_GRACE_MS / 1000);
    coord_effects_t fx;
    coord_effects_init(&fx, &a);
    if (px_store_begin(c->db) != PX_OK ||
        coord_job_set_state(c, o[i].job_id, o[i].state, JS_TIMEOUT, reason) != PX_OK ||
        coord_job_release_nodes(c, o[i].job_id, reason) != PX_OK ||
        coord_fx_push(&fx, o[i].job_id, PRUNEX__V1__ASSIGNMENT_ACTION__ASSIGNMENT_ACTION_CANCEL) !=
            PX_OK ||
        coord_fx_changed(&fx, o[i].job_id) != PX_OK) {
      px_store_rollback(c->db);
      goto fail;
    }
    coord_fx_schedule(&fx);
    if (coord_commit(c, &fx) != PX_OK) goto fail;
  }
  goto out;
fail:
  px_log(PX_LOG_ERROR, "time limits: %s", px_last_error());
out:
  coord_arena_free(&a);
}

void coord_rpc_submit_job(px_rpc_srv_call_t *call, const ProtobufCMessage *msg, void *data) {
  coord_t *c = data;
  const Prunex__V1__SubmitJobRequest *r = (const Prunex__V1__SubmitJobRequest *)msg;
  char err[1024];
  if (strlen(r->spec_yaml) > COORD_SPEC_YAML_MAX) {
    px_rpc_srv_finish(call, PX_RPC_INVALID_ARGUMENT, "spec_yaml: %zu bytes, the limit is %d",
                      strlen(r->spec_yaml), COORD_SPEC_YAML_MAX);
    return;
  }
  if (!px_utf8_valid(r->spec_yaml, strlen(r->spec_yaml))) {
    px_rpc_srv_finish(call, PX_RPC_INVALID_ARGUMENT, "spec_yaml: not valid UTF-8");
    return;
  }
  /* the spec's rules are the job spec module's (jobspec.h), the very ones
   * every worker applies: a spec no rank could run is refused here */
  px_status_t bad = px_jobspec_check_submitted(r->spec);
  if (bad == PX_ERR_NOMEM) {
    coord_fail_internal(c, call);
    return;
  }
  if (bad != PX_OK) {
    px_log(PX_LOG_INFO, "SubmitJob refused: %s", px_last_error());
    px_rpc_srv_finish(call, PX_RPC_INVALID_ARGUMENT, "%s", px_last_error());
    return;
  }
  int out_ok = coord_submit_paths_ok(c, r->spec, err, sizeof err);
  if (out_ok < 0) {
    coord_fail_internal(c, call);
    return;
  }
  if (!out_ok) {
    px_log(PX_LOG_INFO, "SubmitJob refused: %s", err);
    px_rpc_srv_finish(call, PX_RPC_PERMISSION_DENIED, "%s", err);
    return;
  }
  if (!coord_submit_notify_ok(c, call, r->spec)) return; /* notify.url where allowed */
  if (r->spec->n_sweep > 0) {
    coord_sweep_submit(c, call, r); /* one job per combination (sweep.c) */
    return;
  }
  int priority = 0;
  int64_t time_limit_ms = 0;
  if (!coord_submit_policy(c, call, r->spec, &priority, &time_limit_ms)) return;
  char job_id[64];
  coord_arena_t a;
  coord_arena_init(&a);
  char *depends = "";
  if (!coord_submit_after(c, call, &a, r, &depends) || !coord_submit_quota(c, call, 1)) {
    coord_arena_free(&a);
    return;
  }
  coord_effects_t fx;
  coord_effects_init(&fx, &a);
  if (px_store_begin(c->db) != PX_OK ||
      coord_job_submit(c, r->spec, r->spec_yaml, priority, time_limit_ms, job_id,
                       sizeof job_id) != PX_OK ||
      coord_job_set_depends(c, job_id, depends) != PX_OK ||
      coord_fx_changed(&fx, job_id) != PX_OK) { /* PENDING: its notifications */
    coord_fail_internal(c, call);
    coord_arena_free(&a);
    return;
  }
  coord_fx_schedule(&fx);
  if (coord_commit(c, &fx) != PX_OK) {
    coord_fail_internal(c, call);
  } else {
    Prunex__V1__SubmitJobResponse resp = PRUNEX__V1__SUBMIT_JOB_RESPONSE__INIT;
    resp.job_id = job_id;
    px_rpc_srv_reply(call, &resp.base);
  }
  coord_arena_free(&a);
}

/* ---- GetJob / ListJobs / WatchJob ----------------------------------------------------- */

static int coord_need_job_id(px_rpc_srv_call_t *call, const char *job_id) {
  if (!job_id[0]) {
    px_rpc_srv_finish(call, PX_RPC_INVALID_ARGUMENT, "job_id is required");
    return 0;
  }
  if (strlen(job_id) >= sizeof ((coord_watch_t *)0)->id) {
    px_rpc_srv_finish(call, PX_RPC_INVALID_ARGUMENT, "job_id is too long");
    return 0;
  }
  return 1;
}

/* A pending job's live place in the queue from the policy's decision: its
 * JobPriority, and its reason with its priority and the jobs ahead
 * (nothing when sj is NULL: the job left the queue between the queries). */
static px_status_t coord_job_live(coord_arena_t *a, const coord_sched_job_t *sj,
                                  Prunex__V1__Job *j) {
  if (!sj) return PX_OK;
  Prunex__V1__JobPriority *p = coord_alloc(a, sizeof *p);
  char why[320];
  coord_sched_reason(sj, 1, why, sizeof why);
  if (!p) return PX_ERR_NOMEM;
  /* held or waiting for its dependencies: the stored reason says which */
  if (sj->wait != COORD_WAIT_BLOCKED && !(j->reason = coord_strdup(a, why))) return PX_ERR_NOMEM;
  prunex__v1__job_priority__init(p);
  p->priority = sj->score;
  p->job_factor = sj->f_job;
  p->fairshare_factor = sj->f_fairshare;
  p->age_factor = sj->f_age;
  p->ahead = sj->ahead;
  p->job_priority = sj->priority;
  p->time_limit_ms = sj->time_limit_ms;
  j->sched = p;
  return PX_OK;
}

/* The same for GetJob: one policy pass for the one job. */
static px_status_t coord_job_queue_place(coord_t *c, coord_arena_t *a, Prunex__V1__Job *job) {
  coord_sched_view_t v;
  PX_CHECK(coord_sched_view(c, a, &v));
  for (size_t i = 0; i < v.s.njobs; i++)
    if (!strcmp(v.job_ids[i], job->job_id)) return coord_job_live(a, &v.s.jobs[i], job);
  return PX_OK;
}

void coord_rpc_get_job(px_rpc_srv_call_t *call, const ProtobufCMessage *msg, void *data) {
  coord_t *c = data;
  const Prunex__V1__GetJobRequest *r = (const Prunex__V1__GetJobRequest *)msg;
  if (!coord_need_job_id(call, r->job_id)) return;
  coord_arena_t a;
  coord_arena_init(&a);
  Prunex__V1__Job *job;
  px_status_t rc = coord_job_load_ex(c, &a, r->job_id, r->include_spec_yaml, &job);
  if (rc == PX_OK && job && (int)job->state == JS_PENDING) rc = coord_job_queue_place(c, &a, job);
  if (rc == PX_OK) rc = coord_job_redact(&a, &c->who, job); /* others' notify URL hidden */
  if (rc != PX_OK) coord_fail_internal(c, call);
  else if (!job) px_rpc_srv_finish(call, PX_RPC_NOT_FOUND, "job %s not found", r->job_id);
  else px_rpc_srv_reply(call, &job->base);
  coord_arena_free(&a);
}

/* Pages, newest first: page_token is the decimal row id of the last job of
 * the previous page. A page holds at most limit jobs (default 100, at most
 * 1000) and, with spec_yaml, at most COORD_PAGE_YAML_BYTES of it. */
#define COORD_PAGE_DEFAULT 100
#define COORD_PAGE_MAX 1000
#define COORD_PAGE_YAML_BYTES (16 << 20)

/* A request's state filter (0: any) and limit (0: def, at most max): 1
 * when both are good, else the call is answered INVALID_ARGUMENT and 0
 * returned. */
static int coord_filter_ok(px_rpc_srv_call_t *call, int state, int limit, int def, int max) {
  if (state < 0 || state > JS_TIMEOUT) {
    px_rpc_srv_finish(call, PX_RPC_INVALID_ARGUMENT, "state = %d: not a JobState", state);
    return 0;
  }
  if (limit < 0 || limit > max) {
    px_rpc_srv_finish(call, PX_RPC_INVALID_ARGUMENT, "limit = %d: must be 0 (default %d) to %d",
                      limit, def, max);
    return 0;
  }
  return 1;
}

/* ListJobs' owner filter: *owner NULL (every user's), the name asked for,
 * or the caller's own (mine; "" for an anonymous caller). 1, or 0 with the
 * call answered INVALID_ARGUMENT. */
static int coord_list_owner(coord_t *c, px_rpc_srv_call_t *call,
                            const Prunex__V1__ListJobsRequest *r, const char **owner) {
  *owner = NULL;
  if (r->mine && r->owner[0]) {
    px_rpc_srv_finish(call, PX_RPC_INVALID_ARGUMENT, "owner and mine: give one");
    return 0;
  }
  if (r->owner[0] && !coord_name_ok(r->owner)) {
    px_rpc_srv_finish(call, PX_RPC_INVALID_ARGUMENT,
                      "owner: not a user name (1 to 127 of A-Z a-z 0-9 . _ - @)");
    return 0;
  }
  if (r->owner[0]) *owner = r->owner;
  else if (r->mine) *owner = c->who.role == COORD_ROLE_ANON ? "" : c->who.name;
  return 1;
}

void coord_rpc_list_jobs(px_rpc_srv_call_t *call, const ProtobufCMessage *msg, void *data) {
  coord_t *c = data;
  const Prunex__V1__ListJobsRequest *r = (const Prunex__V1__ListJobsRequest *)msg;
  if (!coord_filter_ok(call, (int)r->state, r->limit, COORD_PAGE_DEFAULT, COORD_PAGE_MAX)) return;
  if (strlen(r->sweep_id) > 63) {
    px_rpc_srv_finish(call, PX_RPC_INVALID_ARGUMENT, "sweep_id: longer than a sweep id");
    return;
  }
  /* one user's jobs, filtered here so that pages stay full */
  const char *owner = NULL;
  if (!coord_list_owner(c, call, r, &owner)) return;
  long long before = 0;
  if (r->page_token[0]) {
    char *end = NULL;
    before = strtoll(r->page_token, &end, 10);
    if (!end || *end || before <= 0 || strlen(r->page_token) > 20) {
      px_rpc_srv_finish(call, PX_RPC_INVALID_ARGUMENT,
                        "page_token '%.32s': not a token this coordinator gave", r->page_token);
      return;
    }
  }
  int limit = r->limit > 0 ? r->limit : COORD_PAGE_DEFAULT;
  coord_arena_t a;
  coord_arena_init(&a);
  char **ids = NULL;
  int64_t *rowids = NULL;
  size_t n = 0;
  px_status_t rc = coord_db_jobs_page(c, &a, (int)r->state, r->sweep_id, owner, before,
                                      limit + 1, &ids, &rowids, &n);
  Prunex__V1__ListJobsResponse resp = PRUNEX__V1__LIST_JOBS_RESPONSE__INIT;
  char next[32] = "";
  int more = n > (size_t)limit;
  if (more) n = (size_t)limit;
  int64_t *rows = NULL; /* of resp.jobs */
  if (rc >= 0 && n > 0) {
    resp.jobs = coord_alloc(&a, n * sizeof *resp.jobs);
    rows = coord_alloc(&a, n * sizeof *rows);
    if (!resp.jobs || !rows) rc = PX_ERR_NOMEM;
    size_t yaml = 0;
    for (size_t i = 0; rc >= 0 && i < n; i++) {
      if (r->include_spec_yaml && i > 0 && yaml > COORD_PAGE_YAML_BYTES) {
        more = 1;
        break;
      }
      Prunex__V1__Job *j = NULL;
      rc = coord_job_load_ex(c, &a, ids[i], r->include_spec_yaml, &j);
      if (rc == PX_OK) rc = coord_job_redact(&a, &c->who, j); /* others' notify URL hidden */
      if (rc == PX_OK && j) {
        rows[resp.n_jobs] = rowids[i];
        resp.jobs[resp.n_jobs++] = j;
        yaml += strlen(j->spec_yaml);
        snprintf(next, sizeof next, "%lld", (long long)rowids[i]);
      }
    }
  }
  /* the page's pending jobs carry their place in the queue: one policy pass */
  int pending = 0;
  for (size_t i = 0; i < resp.n_jobs; i++) pending |= (int)resp.jobs[i]->state == JS_PENDING;
  if (rc >= 0 && pending) {
    coord_sched_view_t view;
    rc = coord_sched_view(c, &a, &view);
    for (size_t i = 0; rc == PX_OK && i < resp.n_jobs; i++) {
      if ((int)resp.jobs[i]->state != JS_PENDING) continue;
      rc = coord_job_live(&a, coord_sched_view_find(&view, rows[i]), resp.jobs[i]);
    }
  }
  resp.next_page_token = more ? next : "";
  if (rc < 0) coord_fail_internal(c, call);
  else px_rpc_srv_reply(call, &resp.base);
  coord_arena_free(&a);
}

void coord_rpc_watch_job(px_rpc_srv_call_t *call, const ProtobufCMessage *msg, void *data) {
  coord_t *c = data;
  const Prunex__V1__WatchJobRequest *r = (const Prunex__V1__WatchJobRequest *)msg;
  if (!coord_need_job_id(call, r->job_id)) return;
  coord_arena_t a;
  coord_arena_init(&a);
  Prunex__V1__Job *job;
  if (coord_job_load(c, &a, r->job_id, &job) != PX_OK ||
      coord_job_redact(&a, &c->who, job) != PX_OK) {
    coord_fail_internal(c, call);
  } else if (!job) {
    px_rpc_srv_finish(call, PX_RPC_NOT_FOUND, "job %s not found", r->job_id);
  } else {
    Prunex__V1__JobUpdate up = PRUNEX__V1__JOB_UPDATE__INIT;
    up.job = job;
    px_rpc_srv_send(call, &up.base);
    if (coord_job_terminal(job->state)) px_rpc_srv_finish(call, PX_RPC_OK, NULL);
    else if (!coord_watch_open(c, call, r->job_id, 1))
      px_rpc_srv_finish(call, PX_RPC_RESOURCE_EXHAUSTED, "out of memory");
  }
  coord_arena_free(&a);
}

/* The job a CancelJob or DeleteJob names, for a caller who wants to `what`
 * it: 1 with its state when it exists and the caller may manage it (its
 * owner, or an admin); else the call is answered (NOT_FOUND,
 * PERMISSION_DENIED or INTERNAL) and 0 returned. One query. */
int coord_job_to_manage(coord_t *c, px_rpc_srv_call_t *call, const char *job_id,
                        const char *what, int *state) {
  char owner[COORD_NAME_MAX];
  int found = 0;
  if (coord_db_job_owner(c, job_id, &found, owner, sizeof owner, state) != PX_OK) {
    coord_fail_internal(c, call);
    return 0;
  }
  if (!found) {
    px_rpc_srv_finish(call, PX_RPC_NOT_FOUND, "job %s not found", job_id);
    return 0;
  }
  if (coord_auth_may_manage(&c->who, owner)) return 1;
  px_rpc_srv_finish(call, PX_RPC_PERMISSION_DENIED,
                    "%s may not %s job %s: it belongs to %s (only its owner or an admin may)",
                    c->who.name, what, job_id, owner[0] ? owner : "nobody");
  return 0;
}

/* ---- GetAccounting ---------------------------------------------------------------------- */

void coord_rpc_get_accounting(px_rpc_srv_call_t *call, const ProtobufCMessage *msg, void *data) {
  coord_t *c = data;
  const Prunex__V1__GetAccountingRequest *r = (const Prunex__V1__GetAccountingRequest *)msg;
  if (!coord_filter_ok(call, (int)r->state, r->limit, COORD_ACCT_DEFAULT, COORD_ACCT_MAX)) return;
  if (r->since_unix_ms < 0) {
    px_rpc_srv_finish(call, PX_RPC_INVALID_ARGUMENT, "since_unix_ms = %lld: must be >= 0",
                      (long long)r->since_unix_ms);
    return;
  }
  if (r->user[0] && !coord_name_ok(r->user)) {
    px_rpc_srv_finish(call, PX_RPC_INVALID_ARGUMENT,
                      "user: not a user name (1 to 127 of A-Z a-z 0-9 . _ - @)");
    return;
  }
  coord_arena_t a;
  coord_arena_init(&a);
  Prunex__V1__GetAccountingResponse resp = PRUNEX__V1__GET_ACCOUNTING_RESPONSE__INIT;
  if (coord_db_sched_acct(c, &a, r->user, r->since_unix_ms, (int)r->state, r->limit, &resp) != PX_OK)
    coord_fail_internal(c, call);
  else px_rpc_srv_reply(call, &resp.base);
  coord_arena_free(&a);
}

/* ---- DeleteJob ------------------------------------------------------------------------------ */

void coord_rpc_delete_job(px_rpc_srv_call_t *call, const ProtobufCMessage *msg, void *data) {
  coord_t *c = data;
  const Prunex__V1__DeleteJobRequest *r = (const Prunex__V1__DeleteJobRequest *)msg;
  if (!coord_need_job_id(call, r->job_id)) return;
  coord_arena_t a;
  coord_arena_init(&a);
  int state = 0;
  if (!coord_job_to_manage(c, call, r->job_id, "delete", &state)) goto out;
  if (!coord_job_terminal(state)) {
    px_rpc_srv_finish(call, PX_RPC_FAILED_PRECONDITION,
                      "job %s is %s: cancel it first (pxctl cancel), then delete it", r->job_id,
                      px_rpc_job_state_name(state));
    goto out;
  }
  coord_effects_t fx; /* none: a finished job has no nodes and no watchers */
  coord_effects_init(&fx, &a);
  if (px_store_begin(c->db) != PX_OK || coord_job_delete_rows(c, r->job_id) != PX_OK ||
      coord_commit(c, &fx) != PX_OK) {
    coord_fail_internal(c, call);
    goto out;
  }
  px_log(PX_LOG_INFO, "job %s deleted by %s", r->job_id,
         c->who.role == COORD_ROLE_ANON ? "an anonymous caller" : c->who.name);
  Prunex__V1__DeleteJobResponse resp = PRUNEX__V1__DELETE_JOB_RESPONSE__INIT;
  px_rpc_srv_reply(call, &resp.base);
out:
  coord_arena_free(&a);
}

/* ---- retention ------------------------------------------------------------------------------ */

/* One batch of 10 jobs per run (the timer runs every minute: 14,400 a day),
 * so that a backlog of jobs with many iteration rows never holds the loop
 * for long. */
void coord_retention_run(coord_t *c) {
  if (c->cfg.retention_days <= 0 || c->stopping) return;
  int64_t cutoff = coord_now_ms() - (int64_t)c->cfg.retention_days * 86400 * 1000;
  coord_arena_t a;
  coord_arena_init(&a);
  char **ids = NULL;
  size_t n = 0;
  coord_effects_t fx; /* none: finished jobs have no nodes and no watchers */
  coord_effects_init(&fx, &a);
  px_status_t rc = coord_db_jobs_expired(c, &a, cutoff, 10, &ids, &n);
  if (rc >= 0 && n > 0) {
    rc = px_store_begin(c->db);
    for (size_t i = 0; rc == PX_OK && i < n; i++) rc = coord_job_delete_rows(c, ids[i]);
    rc = coord_commit_if(c, rc, 1, &fx);
    if (rc == PX_OK)
      px_log(PX_LOG_INFO, "retention: removed %zu job%s finished over %d days ago", n,
             n == 1 ? "" : "s", c->cfg.retention_days);
  }
  if (rc < 0) px_log(PX_LOG_ERROR, "retention: %s", px_last_error());
  coord_arena_free(&a);
}

/* ---- CancelJob --------------------------------------------------------------------------- */

void coord_rpc_cancel_job(px_rpc_srv_call_t *call, const ProtobufCMessage *msg, void *data) {
  coord_t *c = data;
  const Prunex__V1__CancelJobRequest *r = (const Prunex__V1__CancelJobRequest *)msg;
  if (!coord_need_job_id(call, r->job_id)) return;
  if (coord_sweep_id_like(r->job_id)) {
    coord_sweep_cancel(c, call, r); /* every unfinished job of the sweep (sweep.c) */
    return;
  }
  coord_arena_t a;
  coord_arena_init(&a);
  int state = 0;
  if (!coord_job_to_manage(c, call, r->job_id, "cancel", &state)) goto out;
  if (coord_job_terminal(state)) {
    px_rpc_srv_finish(call, PX_RPC_FAILED_PRECONDITION, "job %s has already finished (%s)",
                      r->job_id, px_rpc_job_state_name(state));
    goto out;
  }
  char reason[512];
  snprintf(reason, sizeof reason, "cancelled: %s", r->reason[0] ? r->reason : "by request");
  coord_effects_t fx;
  coord_effects_init(&fx, &a);
  px_status_t rc = px_store_begin(c->db);
  if (rc == PX_OK) rc = coord_job_set_state(c, r->job_id, state, JS_CANCELLED, reason);
  if (rc == PX_OK) rc = coord_job_release_nodes(c, r->job_id, reason);
  if (rc == PX_OK && coord_job_active(state))
    rc = coord_fx_push(&fx, r->job_id, PRUNEX__V1__ASSIGNMENT_ACTION__ASSIGNMENT_ACTION_CANCEL);
  if (rc == PX_OK) rc = coord_fx_changed(&fx, r->job_id);
  coord_fx_schedule(&fx);
  if (rc != PX_OK || coord_commit(c, &fx) != PX_OK) {
    coord_fail_internal(c, call);
    goto out;
  }
  Prunex__V1__CancelJobResponse resp = PRUNEX__V1__CANCEL_JOB_RESPONSE__INIT;
  if (coord_job_load(c, &a, r->job_id, &resp.job) != PX_OK) coord_fail_internal(c, call);
  else px_rpc_srv_reply(call, &resp.base);
out:
  coord_arena_free(&a);
}

/* ---- ReportRankExit ------------------------------------------------------------------------ */

/* Records the exit and decides the job's fate. *to: the new state, or 0. */
/* Why the controller ended the job, from its last stored decision: "it
 * trained its whole budget (N iterations)", "the controller stopped it at
 * iteration K: the residuals converged (admm.stop_on_converged)", and when
 * the residuals converged before a run that went on, "; the residuals
 * converged at iteration K"; "" when the last decision did not stop (the
 * workers ended on their own, e.g. after their epochs). */
static px_status_t coord_stop_reason(coord_t *c, coord_arena_t *a, const char *job_id, char *buf,
                                     size_t cap, int *timeout) {
  buf[0] = '\0';
  *timeout = 0;
  Prunex__V1__ControlDecision *d = NULL;
  PX_CHECK(coord_db_control_decision(c, a, job_id, -1, &d));
  if (!d || !d->stop || !d->stop_reason[0] || !strcmp(d->stop_reason, "cancelled"))
    return PX_OK;
  if (!strcmp(d->stop_reason, "converged"))
    snprintf(buf, cap,
             "the controller stopped it at iteration %d: the residuals converged "
             "(admm.stop_on_converged)",
             d->iteration);
  else if (!strcmp(d->stop_reason, "max_iterations"))
    snprintf(buf, cap, "it trained its whole budget (%d iterations)", d->iteration + 1);
  else if (!strcmp(d->stop_reason, "time_limit") && (*timeout = 1))
    snprintf(buf, cap, "TIMEOUT: stopped at iteration %d, at its time limit", d->iteration);
  else
    snprintf(buf, cap, "the controller stopped it at iteration %d: %s", d->iteration,
             d->stop_reason);
  size_t n = strlen(buf);
  if (d->converged_at > 0 && strcmp(d->stop_reason, "converged") != 0 && n < cap)
    snprintf(buf + n, cap - n, "; the residuals converged at iteration %d",
             d->converged_at - 1);
  return PX_OK;
}

/* A failed rank of an elastic job: its node is lost to the job
 * (membership.c: dropped while enough nodes remain, *dropped 1). */
static px_status_t coord_rank_exit_elastic(coord_t *c, coord_arena_t *a,
                                           const Prunex__V1__RankExit *r, int state,
                                           char *reason, size_t cap, coord_effects_t *fx,
                                           int *dropped) {
  *dropped = 0;
  int found = 0, index = -1;
  char node[128];
  PX_CHECK(coord_db_rank_place(c, r->job_id, r->rank, &found, &index, node, sizeof node));
  if (!found || !node[0]) return PX_OK;
  char name[COORD_NAME_MAX], why[1024];
  PX_CHECK(coord_db_node_name(c, node, name, sizeof name));
  snprintf(why, sizeof why, "node %.127s (%.127s) lost its rank: %.640s", name, node, reason);
  char note[128];
  PX_CHECK(coord_membership_lose(c, a, r->job_id, state, node, why, fx, dropped, note,
                                 sizeof note));
  size_t used = strlen(reason);
  if (!*dropped) snprintf(reason + used, cap - used, "%s", note);
  return PX_OK;
}

/* All the ranks have exited with code 0: of the placement now, when an
 * elastic job dropped nodes (their ranks' records say why), else all N. */
static px_status_t coord_rank_exits_done(coord_t *c, const char *job_id, int64_t ok, int *N,
                                         int *done) {
  int64_t placed_ok = 0, placed = 0;
  PX_CHECK(coord_db_rank_exits_ok_placed(c, job_id, &placed_ok, &placed));
  if (placed > 0 && placed != *N) { /* fewer (dropped) or more (grown past num_nodes) */
    *done = placed_ok >= placed;
    *N = (int)placed;
  } else {
    *done = ok >= *N;
  }
  return PX_OK;
}

static px_status_t coord_rank_exit(coord_t *c, coord_arena_t *a, const Prunex__V1__RankExit *r,
                                   int state, int N, int *to, coord_fault_t *f,
                                   coord_effects_t *fx) {
  *to = 0;
  memset(f, 0, sizeof *f);
  char clean[4096], path[4096];
  px_utf8_clean(r->reason, clean, sizeof clean);
  px_utf8_clean(r->model_path, path, sizeof path); /* served in JobSummary */
  PX_CHECK(coord_db_rank_exit_put(c, r, clean, path, coord_now_ms()));
  if (!coord_job_active(state)) return PX_OK;
  char reason[640];
  char where[160] = "";
  if (r->node_id[0]) snprintf(where, sizeof where, " on node %s", r->node_id);
  if (r->exit_code != 0 || r->signal != 0) {
    if (r->signal != 0)
      snprintf(reason, sizeof reason, "rank %d%s was killed by signal %d%s%s", r->rank, where,
               r->signal, r->reason[0] ? ": " : "", r->reason);
    else if (r->exit_code < 0) /* still there, declared failed by its agent (hung) */
      snprintf(reason, sizeof reason, "rank %d%s failed: %s", r->rank, where,
               r->reason[0] ? r->reason : "declared failed by its agent");
    else
      snprintf(reason, sizeof reason, "rank %d%s exited with code %d%s%s", r->rank, where,
               r->exit_code, r->reason[0] ? ": " : "", r->reason);
    int dropped = 0; /* an elastic job goes on without the rank's node */
    PX_CHECK(coord_rank_exit_elastic(c, a, r, state, reason, sizeof reason, fx, &dropped));
    if (dropped) return PX_OK;
    *to = JS_FAILED;
    /* A rank that lost its peers because a node's agent went away is not
     * the first cause: the node is. */
    int blamed = coord_blame_gone_node(c, r->job_id, r->node_id, reason, sizeof reason);
    if (blamed < 0) return blamed;
    /* Restarted while restarts remain, else FAILED (a gone node of a job
     * being preempted: queued again as preempted). */
    if (blamed)
      PX_CHECK(coord_job_fault_unreachable(c, a, r->job_id, state, reason, NULL, f));
    else
      PX_CHECK(coord_job_fault(c, a, r->job_id, state, reason, NULL, f));
    if (f->restarted) *to = JS_PENDING;
    return PX_OK;
  } else {
    int64_t ok = 0;
    char first[396];
    PX_CHECK(coord_db_rank_exits_ok(c, r->job_id, &ok, first, sizeof first));
    int done = 0;
    PX_CHECK(coord_rank_exits_done(c, r->job_id, ok, &N, &done));
    if (!done) return PX_OK;
    int held = 0; /* stopped for a preemption: queued again with the others (preempt.c) */
    PX_CHECK(coord_preempt_hold(c, a, r->job_id, &held));
    if (held) return PX_OK;
    char why[200] = "";
    int timeout = 0;
    PX_CHECK(coord_stop_reason(c, a, r->job_id, why, sizeof why, &timeout));
    /* A rank's note on a success ("no usable checkpoint since
     * iteration N: ...") is said with it: the job ran unprotected. */
    char note[400] = "";
    if (first[0]) snprintf(note, sizeof note, "; %s", first);
    snprintf(reason, sizeof reason, "%s%sall %d ranks exited with code 0%s", why,
             why[0] ? "; " : "", N, note);
    *to = timeout ? JS_TIMEOUT : JS_SUCCEEDED;
  }
  PX_CHECK(coord_job_set_state(c, r->job_id, state, *to, reason));
  char why[700];
  snprintf(why, sizeof why, "job %s %s", r->job_id, *to == JS_TIMEOUT ? "timed out" : "succeeded");
  return coord_job_release_nodes(c, r->job_id, why);
}

void coord_rpc_report_rank_exit(px_rpc_srv_call_t *call, const ProtobufCMessage *msg, void *data) {
  coord_t *c = data;
  const Prunex__V1__RankExit *r = (const Prunex__V1__RankExit *)msg;
  if (!coord_need_job_id(call, r->job_id)) return;
  if (r->rank < 0) {
    px_rpc_srv_finish(call, PX_RPC_INVALID_ARGUMENT, "rank = %d: must be >= 0", r->rank);
    return;
  }
  int found = 0, state = 0, N = 0, attempt = 0;
  if (coord_db_job_ranks_info(c, r->job_id, &found, &state, &N, &attempt) != PX_OK) {
    coord_fail_internal(c, call);
    return;
  }
  if (!found) {
    px_rpc_srv_finish(call, PX_RPC_NOT_FOUND, "job %s not found", r->job_id);
    return;
  }
  if (r->attempt != 0 && r->attempt != attempt) {
    /* A rank of an attempt that has ended (its workers die after the
     * restart): nothing to record, nothing to decide. */
    px_log(PX_LOG_INFO, "job %s: rank %d of attempt %d exited (code %d, signal %d); the job is"
           " on attempt %d: ignored", r->job_id, r->rank, r->attempt, r->exit_code, r->signal,
           attempt);
    Prunex__V1__RankExitResponse ok = PRUNEX__V1__RANK_EXIT_RESPONSE__INIT;
    px_rpc_srv_reply(call, &ok.base);
    return;
  }
  if (state == JS_PENDING) {
    px_rpc_srv_finish(call, PX_RPC_FAILED_PRECONDITION, "job %s is PENDING: no rank has started",
                      r->job_id);
    return;
  }
  if (r->rank >= N) {
    px_rpc_srv_finish(call, PX_RPC_INVALID_ARGUMENT, "rank = %d: job %s has ranks 0..%d",
                      r->rank, r->job_id, N - 1);
    return;
  }
  /* a rank of a node an elastic job dropped (membership.c); one of a node
   * it gives to a preemption is leaving, not fenced (shrink.c) */
  int leaving = coord_job_active(state) && coord_shrink_rank_exit_ok(c, r);
  if (coord_job_active(state) && !leaving &&
      !coord_membership_fence(c, call, "ReportRankExit", r->job_id, r->rank, -1, 0))
    return;
  int to = 0;
  coord_arena_t a;
  coord_arena_init(&a);
  coord_fault_t f;
  coord_effects_t fx;
  coord_effects_init(&fx, &a);
  px_status_t rc = px_store_begin(c->db);
  if (rc == PX_OK) rc = coord_rank_exit(c, &a, r, state, N, &to, &f, &fx);
  if (rc == PX_OK && leaving) rc = coord_shrink_left(c, &a, r, &fx);
  if (rc == PX_OK && (to == JS_FAILED || to == JS_PENDING)) {
    rc = coord_fx_fault(&fx, r->job_id, &f);
  } else if (rc == PX_OK && to) {
    rc = coord_fx_changed(&fx, r->job_id);
    coord_fx_schedule(&fx);
  }
  if (rc != PX_OK || coord_commit(c, &fx) != PX_OK) {
    coord_fail_internal(c, call);
    coord_arena_free(&a);
    return;
  }
  px_log(PX_LOG_INFO, "job %s: rank %d exited (code %d, signal %d)", r->job_id, r->rank,
         r->exit_code, r->signal);
  Prunex__V1__RankExitResponse resp = PRUNEX__V1__RANK_EXIT_RESPONSE__INIT;
  px_rpc_srv_reply(call, &resp.base);
  coord_arena_free(&a);
}
