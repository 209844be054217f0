/* Queue controls, in the spirit of Slurm's scontrol hold,
 * release and update: HoldJob keeps a PENDING job out of the scheduler's
 * candidates (its reason says who holds it), ReleaseJob lets it run again
 * (a job an admin held is released by an admin only), UpdateJob changes a
 * job's priority and time limit under the submission's rules. The caller
 * must be the job's owner or an admin, as for CancelJob. The state lives in
 * jobs.held_by / held_admin / priority / time_limit_ms (db/sched.c), so it
 * survives a restart; the pending jobs in memory (sched_queue.c) are read
 * again from the row in the same transaction. Each handler answers with the
 * job as it is afterwards. A handler file (flow.h): it records effects and
 * commits. */
#include <stdio.h>
#include <string.h>

#include "flow.h"
#include "notify_policy.h"

#include "prunex/check.h"

static const char *coord_caller(const coord_t *c) {
  return c->who.role == COORD_ROLE_ANON ? "anonymous" : c->who.name;
}

static int coord_caller_admin(const coord_t *c) {
  return c->who.role == COORD_ROLE_ADMIN || c->who.role == COORD_ROLE_ANON;
}

/* The job named by a queue control: 1 with its state when the caller may
 * manage it; else the call is answered and 0 returned. */
static int coord_ctl_job(coord_t *c, px_rpc_srv_call_t *call, const char *job_id,
                         const char *what, int *state) {
  if (!job_id[0] || strlen(job_id) > 63) {
    px_rpc_srv_finish(call, PX_RPC_INVALID_ARGUMENT, "job_id: %s",
                      job_id[0] ? "longer than a job id" : "required");
    return 0;
  }
  return coord_job_to_manage(c, call, job_id, what, state);
}

/* Commits the transaction (with a scheduler pass and the job's watchers
 * told) and answers with the job; on any failure INTERNAL. */
static void coord_ctl_finish(coord_t *c, px_rpc_srv_call_t *call, coord_arena_t *a,
                             const char *job_id, px_status_t rc) {
  coord_effects_t fx;
  coord_effects_init(&fx, a);
  if (rc == PX_OK) rc = coord_fx_changed(&fx, job_id);
  coord_fx_schedule(&fx);
  if (coord_commit_if(c, rc, 1, &fx) != PX_OK) {
    coord_fail_internal(c, call);
    return;
  }
  Prunex__V1__Job *job = NULL;
  if (coord_job_load(c, a, job_id, &job) != PX_OK || !job ||
      coord_job_redact(a, &c->who, job) != PX_OK)
    coord_fail_internal(c, call);
  else px_rpc_srv_reply(call, &job->base);
}

/* Holds or releases (held_by "") the job: its row, its entry in the queue,
 * its reason. In a transaction it opens. */
static px_status_t coord_ctl_hold(coord_t *c, const char *job_id, const char *held_by, int admin,
                                  const char *reason) {
  PX_CHECK(px_store_begin(c->db));
  PX_CHECK(coord_db_sched_hold(c, job_id, held_by, admin));
  PX_CHECK(coord_queue_job_changed(c, job_id, JS_PENDING));
  return coord_sched_set_reason(c, job_id, reason);
}

void coord_rpc_hold_job(px_rpc_srv_call_t *call, const ProtobufCMessage *msg, void *data) {
  coord_t *c = data;
  const Prunex__V1__HoldJobRequest *r = (const Prunex__V1__HoldJobRequest *)msg;
  int state = 0;
  if (!coord_ctl_job(c, call, r->job_id, "hold", &state)) return;
  if (state != JS_PENDING) {
    px_rpc_srv_finish(call, PX_RPC_FAILED_PRECONDITION,
                      "job %s is %s: only a pending job can be held", r->job_id,
                      px_rpc_job_state_name(state));
    return;
  }
  int admin = c->who.role == COORD_ROLE_ADMIN;
  char why[320];
  snprintf(why, sizeof why, admin ? "held by admin %s (only an admin may release it)"
                                  : "held by %s (pxctl release lets it run)",
           coord_caller(c));
  coord_arena_t a;
  coord_arena_init(&a);
  px_status_t rc = coord_ctl_hold(c, r->job_id, coord_caller(c), admin, why);
  if (rc == PX_OK) px_log(PX_LOG_INFO, "job %s held by %s", r->job_id, coord_caller(c));
  coord_ctl_finish(c, call, &a, r->job_id, rc);
  coord_arena_free(&a);
}

void coord_rpc_release_job(px_rpc_srv_call_t *call, const ProtobufCMessage *msg, void *data) {
  coord_t *c = data;
  const Prunex__V1__ReleaseJobRequest *r = (const Prunex__V1__ReleaseJobRequest *)msg;
  int state = 0;
  if (!coord_ctl_job(c, call, r->job_id, "release", &state)) return;
  coord_db_controls_t ctl;
  if (coord_db_sched_controls(c, r->job_id, &ctl) != PX_OK) {
    coord_fail_internal(c, call);
    return;
  }
  if (state != JS_PENDING || !ctl.held_by[0]) {
    px_rpc_srv_finish(call, PX_RPC_FAILED_PRECONDITION, "job %s is %s and not held", r->job_id,
                      px_rpc_job_state_name(state));
    return;
  }
  if (ctl.held_admin && !coord_caller_admin(c)) {
    px_rpc_srv_finish(call, PX_RPC_PERMISSION_DENIED,
                      "job %s is held by admin %s: only an admin may release it", r->job_id,
                      ctl.held_by);
    return;
  }
  char why[320];
  snprintf(why, sizeof why, "released by %s", coord_caller(c));
  coord_arena_t a;
  coord_arena_init(&a);
  px_status_t rc = coord_ctl_hold(c, r->job_id, "", 0, why);
  if (rc == PX_OK) px_log(PX_LOG_INFO, "job %s released by %s", r->job_id, coord_caller(c));
  coord_ctl_finish(c, call, &a, r->job_id, rc);
  coord_arena_free(&a);
}

/* UpdateJob's rules, the submission's (submit.c): 1, or 0 with the call
 * answered INVALID_ARGUMENT or PERMISSION_DENIED naming the field. */
static int coord_update_ok(coord_t *c, px_rpc_srv_call_t *call,
                           const Prunex__V1__UpdateJobRequest *r) {
  const coord_sched_policy_t *p = &c->cfg.sched;
  if (!r->priority && !r->time_limit_s) {
    px_rpc_srv_finish(call, PX_RPC_INVALID_ARGUMENT,
                      "nothing to update: give priority (1 to %d) or time_limit_s (> 0)",
                      COORD_PRIORITY_MAX);
    return 0;
  }
  if (r->priority < 0 || r->priority > COORD_PRIORITY_MAX) {
    px_rpc_srv_finish(call, PX_RPC_INVALID_ARGUMENT, "priority = %d: must be 1 to %d (0: unchanged)",
                      r->priority, COORD_PRIORITY_MAX);
    return 0;
  }
  if (!coord_priority_allowed(c, call, "priority", r->priority)) return 0;
  if (r->time_limit_s < 0) {
    px_rpc_srv_finish(call, PX_RPC_INVALID_ARGUMENT,
                      "time_limit_s = %d: must be > 0 (0: unchanged)", r->time_limit_s);
    return 0;
  }
  if (p->time_limit_max_s > 0 && r->time_limit_s > p->time_limit_max_s && !coord_caller_admin(c)) {
    px_rpc_srv_finish(call, PX_RPC_PERMISSION_DENIED,
                      "time_limit_s = %d: above this cluster's maximum of %lld s"
                      " (time_limit_max_s); only an admin may go beyond it",
                      r->time_limit_s, (long long)p->time_limit_max_s);
    return 0;
  }
  return 1;
}

void coord_rpc_update_job(px_rpc_srv_call_t *call, const ProtobufCMessage *msg, void *data) {
  coord_t *c = data;
  const Prunex__V1__UpdateJobRequest *r = (const Prunex__V1__UpdateJobRequest *)msg;
  int state = 0;
  if (!coord_ctl_job(c, call, r->job_id, "update", &state) || !coord_update_ok(c, call, r))
    return;
  if (coord_job_terminal(state)) {
    px_rpc_srv_finish(call, PX_RPC_FAILED_PRECONDITION, "job %s has already finished (%s)",
                      r->job_id, px_rpc_job_state_name(state));
    return;
  }
  coord_arena_t a;
  coord_arena_init(&a);
  px_status_t rc = px_store_begin(c->db);
  if (rc == PX_OK)
    rc = coord_db_sched_update(c, r->job_id, r->priority, (int64_t)r->time_limit_s * 1000);
  /* a pending job's entry in the queue carries both */
  if (rc == PX_OK && state == JS_PENDING) rc = coord_queue_job_changed(c, r->job_id, JS_PENDING);
  if (rc == PX_OK)
    px_log(PX_LOG_INFO, "job %s updated by %s: priority %d, time limit %d s (0: unchanged)",
           r->job_id, coord_caller(c), r->priority, r->time_limit_s);
  coord_ctl_finish(c, call, &a, r->job_id, rc);
  coord_arena_free(&a);
}
