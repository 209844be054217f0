/* Preemption that shrinks elastic jobs (shrink.c's header says how it
 * goes): the calls preempt.c, membership.c and jobs.c make. */
#ifndef PX_COORD_SHRINK_H
#define PX_COORD_SHRINK_H

#include "db/membership.h"
#include "db/sched.h"
#include "flow.h"

/* Preemption that shrinks elastic jobs (shrink.c's header says how it goes).
 * In the caller's transaction: asks RUNNING elastic jobs of a lower
 * priority than waiting job i of v to give the nodes it needs above their
 * min_nodes at their next round boundary (*done 1), when that alone is
 * enough (*done 0: nothing asked). */
px_status_t coord_shrink_ask(coord_t *c, coord_arena_t *a, const coord_sched_view_t *v, size_t i,
                             int *done);
/* The shrink under way (rows s[0..n), all COORD_PSTOP_SHRINK): ended when
 * the victims have let every node go, or their grace is over (*commit 1);
 * *gave_up 1 when a victim's round boundary never came (its nodes kept:
 * the caller may try the preemption that stops jobs). */
px_status_t coord_shrink_progress(coord_t *c, coord_arena_t *a, coord_effects_t *fx,
                                  const coord_db_pstop_t *s, size_t n, int *commit,
                                  int *gave_up);
/* 1 when rank r is on a node its elastic job is giving to a preemption and
 * that is out of its epoch now: its exit is taken, not fenced. */
int coord_shrink_rank_exit_ok(coord_t *c, const Prunex__V1__RankExit *r);
/* After such a rank's exit was recorded (in the transaction): its node
 * leaves the job once all its ranks have, and the waiting job is placed
 * once all the shrink's nodes have. */
px_status_t coord_shrink_left(coord_t *c, coord_arena_t *a, const Prunex__V1__RankExit *r,
                              coord_effects_t *fx);
#endif
