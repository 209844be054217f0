/* The effects boundary (effects.h): coord_commit applies what a committed
 * transition recorded, in one order (send, notify, schedule), and
 * coord_schedule, the scheduler's entry point, commits its own pass the
 * same way. This file is the top of the job flow (flow.h): it calls the
 * senders, the watchers and the scheduler, and nothing below calls it. */
#include <string.h>

#include "flow.h"

#include "prunex/check.h"

static void coord_fx_apply(coord_t *c, coord_effects_t *fx) {
  for (size_t i = 0; i < fx->nsends; i++) {
    const coord_send_t *s = &fx->sends[i];
    if (s->attempt > 0) {
      coord_fault_t f = {.restarted = 1, .attempt = s->attempt, .nodes = s->nodes,
                         .nnodes = s->nnodes};
      coord_attempt_cancel(c, s->job_id, &f);
    } else if (s->join_epoch > 0) {
      coord_push_join(c, s->job_id, s->nodes, s->nnodes, s->join_epoch);
    } else {
      coord_push_assignments(c, s->job_id, s->action);
    }
  }
  for (size_t i = 0; i < fx->nchanged; i++) {
    const char *id = fx->changed[i];
    int reported = fx->report_job && !strcmp(fx->report_job, id);
    coord_job_changed(c, id, reported ? fx->report : NULL);
  }
  if (fx->schedule) coord_schedule(c);
}

px_status_t coord_commit(coord_t *c, coord_effects_t *fx) {
  px_status_t rc = px_store_commit(c->db);
  if (rc != PX_OK) {
    px_store_rollback(c->db);
    coord_effects_clear(fx);
    return rc;
  }
  coord_effects_t now = *fx;
  coord_effects_clear(fx);
  coord_fx_apply(c, &now);
  return PX_OK;
}

px_status_t coord_commit_if(coord_t *c, px_status_t rc, int commit, coord_effects_t *fx) {
  if (rc == PX_OK && commit) return coord_commit(c, fx);
  px_store_rollback(c->db);
  coord_effects_clear(fx);
  return rc;
}

void coord_schedule(coord_t *c) {
  /* again: a pass cancelled jobs whose dependency can never be met, and the
   * jobs waiting for those may now be in the same case (each pass removes
   * at least one pending job: the loop ends) */
  for (int again = 1; again && !c->stopping;) {
    coord_arena_t a;
    coord_arena_init(&a);
    coord_effects_t fx;
    coord_effects_init(&fx, &a);
    px_status_t rc = coord_schedule_pass(c, &a, &fx, &again);
    if (rc == PX_OK) rc = coord_commit(c, &fx); /* fx never asks to schedule again */
    if (rc != PX_OK) px_log(PX_LOG_ERROR, "scheduler: %s", px_last_error());
    coord_arena_free(&a);
    if (rc != PX_OK) break;
  }
  if (c->cfg.sched.preempt && !c->stopping) coord_preempt_pass(c, 1);
}

void coord_preempt_pass(coord_t *c, int ask) {
  for (int again = 1; again && !c->stopping;) {
    coord_arena_t a;
    coord_arena_init(&a);
    coord_effects_t fx;
    coord_effects_init(&fx, &a);
    int commit = 0;
    px_status_t rc = px_store_begin(c->db);
    if (rc == PX_OK) rc = coord_preempt_step(c, &a, &fx, ask, &commit, &again);
    rc = coord_commit_if(c, rc, commit, &fx); /* preempt.c decided, in the transaction */
    if (rc != PX_OK) px_log(PX_LOG_ERROR, "preemption: %s", px_last_error());
    coord_arena_free(&a);
    if (rc != PX_OK || !commit) break;
  }
}
