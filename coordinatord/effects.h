/* The effects boundary: a state transition (submit, cancel,
 * place, start, finish, fault, restart, preemption, node join or loss)
 * writes its rows in a transaction and records here what must follow once
 * they are committed; coord_commit then applies it all in one fixed order:
 *
 *   1. the store's commit (nothing else happens when it fails),
 *   2. send: the assignments to push to the nodes (START, CANCEL, or the
 *      CANCEL that names an ended attempt),
 *   3. notify: the jobs whose state changed (their WatchJob streams and
 *      notifications, coord_job_changed),
 *   4. schedule: a scheduler pass (coord_schedule), when asked for.
 *
 * Handlers and sweeps never call those four themselves after a commit.
 * The record lives in the caller's arena; nothing is sent, told or placed
 * before the commit, so a rolled-back transaction leaves no trace. */
#ifndef PX_COORD_EFFECTS_H
#define PX_COORD_EFFECTS_H

#include "coord.h"

/* One send: the job's assignment with this action to each of its nodes, or,
 * for an attempt that ended and was queued again (attempt > 0), a CANCEL
 * naming that attempt to the nodes it ran on. */
typedef struct {
  char *job_id;
  int action;
  int attempt;
  char **nodes;
  size_t nnodes;
  int join_epoch;        /* > 0: a START to these nodes only, which join in that epoch */
} coord_send_t;

typedef struct {
  coord_arena_t *a;
  coord_send_t *sends;
  size_t nsends, csends;
  char **changed;        /* jobs whose state changed, in order */
  size_t nchanged, cchanged;
  /* the iteration report that changed report_job (ReportIteration): its
   * watchers get it as the update's latest; borrowed, not copied */
  const char *report_job;
  const Prunex__V1__IterationReport *report;
  int schedule;          /* run the scheduler after */
} coord_effects_t;

/* An empty record drawing from arena a. */
void coord_effects_init(coord_effects_t *fx, coord_arena_t *a);
/* Records: the job's state changed / its assignment goes to its nodes
 * with action / a scheduler pass. PX_ERR_NOMEM when the arena is full. */
px_status_t coord_fx_changed(coord_effects_t *fx, const char *job_id);
px_status_t coord_fx_push(coord_effects_t *fx, const char *job_id, int action);
void coord_fx_schedule(coord_effects_t *fx);
/* The job changed by an iteration report r (borrowed: it must outlive the
 * commit): its watchers' update carries r as the latest. */
px_status_t coord_fx_report(coord_effects_t *fx, const char *job_id,
                            const Prunex__V1__IterationReport *r);
/* What follows a fault (coord_job_fault, coord_job_preempt filled f):
 * the ended attempt's nodes told to stop (naming it when the job was
 * queued again; else the job's CANCEL), the job changed, a scheduler pass
 * (which places a restarted job again). */
px_status_t coord_fx_fault(coord_effects_t *fx, const char *job_id, const coord_fault_t *f);

/* A CANCEL naming the attempt to these nodes only (nodes borrowed: in
 * the record's arena or outliving the commit): the nodes an elastic job
 * dropped stop its workers there while the others go on. */
px_status_t coord_fx_cancel_nodes(coord_effects_t *fx, const char *job_id, int attempt,
                                  char **nodes, size_t n);

/* The job's START to these nodes only (borrowed, as above), which join
 * its running attempt in membership epoch join_epoch (join.c). */
px_status_t coord_fx_start_nodes(coord_effects_t *fx, const char *job_id, int join_epoch,
                                 char **nodes, size_t n);
/* Empties fx (nothing recorded). */
void coord_effects_clear(coord_effects_t *fx);

/* commit.c. Commits the open transaction and then applies fx in the order above;
 * when the commit fails the transaction is rolled back, nothing is applied
 * and the error returned (px_last_error says why). fx is emptied. */
px_status_t coord_commit(coord_t *c, coord_effects_t *fx);
/* Ends the open transaction of a step that returned rc: committed (and fx
 * applied, coord_commit) when rc is PX_OK and the step asked to commit,
 * else rolled back with fx emptied. Returns rc, or the commit's error. */
px_status_t coord_commit_if(coord_t *c, px_status_t rc, int commit, coord_effects_t *fx);

#endif
