/* The scheduler's queries (the coordinator's data layer): named
 * functions over the scheduler's tables, with job and node states bound as
 * parameters, never written into the SQL. Each runs in the caller's
 * transaction when there is one; text and arrays returned come from the
 * caller's arena. */
#ifndef PX_COORD_DB_SCHED_H
#define PX_COORD_DB_SCHED_H

#include "../coord.h"

/* What a job's attempt was asked to stop for (the control decision's
 * stop_reason): nothing, its time limit ("time_limit"), a preemption
 * ("preempted": its ranks write a checkpoint and exit, the job is queued
 * again and resumes from it). */
enum { COORD_STOP_NONE = 0, COORD_STOP_TIME_LIMIT = 1, COORD_STOP_PREEMPTED = 2 };

/* preempt_stops.stopped: asked, stopped at its checkpoint, not asked (a job
 * whose stop would not resume bit for bit: its attempt is cancelled);
 * SHRINK: an elastic job asked to give nodes at its next round boundary,
 * going on without them (shrink.c). */
enum { COORD_PSTOP_ASKED = 0, COORD_PSTOP_STOPPED = 1, COORD_PSTOP_CANCEL = 2,
       COORD_PSTOP_SHRINK = 3 };

/* A job asked to stop for a waiting one (preempt_stops joined with jobs). */
typedef struct {
  char *job_id;
  int state;          /* the job's state now */
  char *waiter;       /* the job its nodes are for */
  char *by;           /* "JOB (priority P)" */
  int64_t asked_ms;
  int stopped;        /* COORD_PSTOP_* */
  int stop_iteration; /* the iteration it stopped after; -1: not stopped */
} coord_db_pstop_t;

/* Records that job_id is asked to stop (stopped: COORD_PSTOP_ASKED or
 * _CANCEL) for waiter. */
px_status_t coord_db_sched_pstop_add(coord_t *c, const char *job_id, const char *waiter,
                                     const char *by, int64_t now, int stopped);
/* Every row, the oldest first, in arena a. */
px_status_t coord_db_sched_pstops(coord_t *c, coord_arena_t *a, coord_db_pstop_t **out,
                                  size_t *n);
/* The row of job_id (*found 0: none), in arena a. */
px_status_t coord_db_sched_pstop_get(coord_t *c, coord_arena_t *a, const char *job_id,
                                     coord_db_pstop_t *out, int *found);
/* Its ranks have exited after writing the checkpoint of `iteration`. */
px_status_t coord_db_sched_pstop_stopped(coord_t *c, const char *job_id, int iteration);
/* Forgets job_id's row (none: no-op). */
px_status_t coord_db_sched_pstop_drop(coord_t *c, const char *job_id);
/* *kind: COORD_STOP_* the job's attempt was asked to stop for (the time
 * limit first: it ends the job); the decision's stop_reason is
 * coord_stop_reason_name(kind). */
px_status_t coord_db_sched_stop_kind(coord_t *c, const char *job_id, int *kind);

/* ---- submissions, notifications, time limits, accounting ---------------- */

/* A submitted job's scheduling fields and its accounting row. In the
 * submission's transaction. */
px_status_t coord_db_sched_job_new(coord_t *c, const char *job_id, const char *owner,
                                   const char *name, int nodes, int per_node, int priority,
                                   int64_t time_limit_ms, const char *notify_url,
                                   unsigned notify_mask, int64_t now);
/* The owner's jobs not finished (PENDING, SCHEDULED, RUNNING). */
px_status_t coord_db_sched_unfinished_jobs(coord_t *c, const char *owner, int64_t *n);

/* Notifications: the job's state, its notify.url and states mask, and
 * whether that state is not yet notified (due). */
typedef struct {
  int due;
  int state;
  unsigned mask;
  char url[1100];
} coord_sched_notify_t;
px_status_t coord_db_sched_notify_due(coord_t *c, const char *job_id, coord_sched_notify_t *out);
/* Records that the job's state `state` has been handled. */
px_status_t coord_db_sched_notify_done(coord_t *c, const char *job_id, int state);

/* Time limits: active jobs whose attempt has run past its limit (a), with
 * when a stop was asked of them (0: not yet). */
typedef struct {
  char *job_id;
  int state;
  int64_t time_limit_ms;
  int64_t stop_requested_ms;
} coord_sched_overdue_t;
px_status_t coord_db_sched_overdue(coord_t *c, coord_arena_t *a, int64_t now,
                                   coord_sched_overdue_t **out, size_t *n);
/* Marks the job's attempt asked to stop (the next control decision says
 * stop, "time_limit"); no-op when already asked. */
px_status_t coord_db_sched_request_stop(coord_t *c, const char *job_id, int64_t now);

/* Preemption (preempt.c): the active jobs of job priority below `below`
 * that checkpoint (spec.recovery.checkpoint_every > 0), lowest priority
 * first and, within one, the latest started first (the least work to
 * redo), each with how many of its nodes have per_node devices (arena a). */
typedef struct {
  char *job_id;
  int state;
  int priority;
  int fitting_nodes;
  int graceful;   /* 1: may stop at a checkpoint of its own (not comm.overlap) */
} coord_sched_victim_t;
px_status_t coord_db_sched_preemptible(coord_t *c, coord_arena_t *a, int below, int per_node,
                                       coord_sched_victim_t **out, size_t *n);

#define COORD_ACCT_DEFAULT 1000
#define COORD_ACCT_MAX 5000
/* Accounting records (newest first, at most limit: 0 means
 * COORD_ACCT_DEFAULT, capped at COORD_ACCT_MAX) and per-user totals
 * matching user ("" : all), submitted at or after since, in state (0:
 * any); filled into out in arena a. */
px_status_t coord_db_sched_acct(coord_t *c, coord_arena_t *a, const char *user, int64_t since,
                                int state, int limit, Prunex__V1__GetAccountingResponse *out);

/* ---- usage and the accounting row on state changes ------------------------ */

/* The user's decayed usage as of updated_ms; *found 0 when none. */
px_status_t coord_db_sched_usage_get(coord_t *c, const char *user, int *found, double *usage,
                                     int64_t *updated_ms);
px_status_t coord_db_sched_usage_put(coord_t *c, const char *user, double usage, int64_t now);
/* The job's owner and the node-seconds of its attempt until now: the
 * nodes it was placed with since it was placed, then (an elastic attempt)
 * each membership epoch's member nodes from the epoch's time; 0 before it
 * is placed. */
px_status_t coord_db_sched_attempt(coord_t *c, const char *job_id, int64_t now, int *found,
                                   char *owner, size_t cap, double *node_seconds);
/* Adds node_seconds to the job's accounting row. */
px_status_t coord_db_sched_acct_charge(coord_t *c, const char *job_id, double node_seconds);
/* The accounting row follows the job's state `to` (start, attempts, end,
 * exit reason: its first 255 bytes). */
px_status_t coord_db_sched_acct_state(coord_t *c, const char *job_id, int to, int64_t now,
                                      const char *reason);
/* A new attempt: no stop asked of it. */
px_status_t coord_db_sched_stop_clear(coord_t *c, const char *job_id);
/* Sets a PENDING job's stored reason when it differs. */
px_status_t coord_db_sched_set_reason(coord_t *c, const char *job_id, const char *reason);

/* ---- the snapshot's rows --------------------------------------------------- */

/* An alive node (READY or BUSY) with its devices and, when busy, its job's
 * placement time and time limit (0: none). */
typedef struct {
  char *node_id;
  int state;
  int devices;
  int64_t since_ms, limit_ms;
} coord_db_sched_node_t;
px_status_t coord_db_sched_nodes(coord_t *c, coord_arena_t *a, coord_db_sched_node_t **out,
                                 size_t *n);
/* A user's figure: stored usage (value, as of ms), or a running job's nodes
 * (value: those it holds now, its num_nodes before any is placed; placed
 * at ms). */
typedef struct {
  char *user;
  double value;
  int64_t ms;
} coord_db_sched_use_t;
px_status_t coord_db_sched_usages(coord_t *c, coord_arena_t *a, coord_db_sched_use_t **out,
                                  size_t *n);
px_status_t coord_db_sched_running(coord_t *c, coord_arena_t *a, coord_db_sched_use_t **out,
                                   size_t *n);

/* ---- the pending jobs (sched_queue.c keeps them in memory) ----------------- */

/* Each PENDING job in submission order, read into an entry whose prefer
 * and reason are px_malloc'd, handed to fn, which owns them from then
 * (also when it fails); fn's error stops the walk and is returned. */
typedef px_status_t (*coord_db_queue_fn)(void *ctx, coord_queue_entry_t *e);
/* fn(arg) after every rollback of the coordinator's database (NULL: none),
 * for what is kept in memory in step with it. */
void coord_db_sched_on_rollback(coord_t *c, void (*fn)(void *), void *arg);
px_status_t coord_db_sched_pending(coord_t *c, coord_db_queue_fn fn, void *ctx);
/* The job's entry, whatever its state (prefer and reason px_malloc'd: the
 * caller owns them); *found 0 when there is no such job. */
px_status_t coord_db_sched_queue_entry(coord_t *c, const char *job_id, coord_queue_entry_t *e,
                                       int *found);

/* ---- queue controls ------------------------------------------------------- */

/* A dependency's state, from its accounting row (kept past the job's rows);
 * *found 0 when there is no such job. */
px_status_t coord_db_sched_dep_state(coord_t *c, const char *job_id, int *found, int *state);
/* Holds (held_by not "") or releases ("") the job. */
px_status_t coord_db_sched_hold(coord_t *c, const char *job_id, const char *held_by, int admin);
/* The job's queue controls as stored. */
typedef struct {
  int found;
  char held_by[COORD_NAME_MAX + 32];
  int64_t held_admin;
  int64_t priority;
  int64_t time_limit_ms;
} coord_db_controls_t;
px_status_t coord_db_sched_controls(coord_t *c, const char *job_id, coord_db_controls_t *out);
/* Sets the job's priority and time limit (each: 0 leaves it). */
px_status_t coord_db_sched_update(coord_t *c, const char *job_id, int priority,
                                  int64_t time_limit_ms);
/* Sets the job's dependencies (jobs.depends lines). */
px_status_t coord_db_sched_set_depends(coord_t *c, const char *job_id, const char *depends);

#endif
