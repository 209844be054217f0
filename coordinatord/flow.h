/* The job and node flow below the handlers, file by file, in the order the
 * calls go (each file calls only those above it in this list, and the data
 * layer db/):
 *
 *   effects.c  the effects record (effects.h): recording calls nothing
 *   gone.c     the agents that went away (memory only)
 *   membership.c  membership epochs, fencing, an elastic job's lost nodes,
 *              the blacklist
 *   watch.c    WatchJob / WatchAssignments streams; coord_job_changed
 *   assign.c   assignments built from the placement and sent to nodes
 *   attempt.c  how an attempt ends: nodes released, faults, preemption
 *   place.c    placement and the scheduler's pass
 *   shrink.c   preemption that shrinks elastic jobs (shrink.h): nodes given
 *              at a round boundary, the waiting job placed on them
 *   preempt.c  preemption's steps, decided in a transaction (effects into fx)
 *   commit.c   coord_commit: commit, then send, notify, schedule; the
 *              scheduler's and preemption's passes committed the same way
 *   submit.c   a submission's checks and rows
 *   jobs.c, nodes.c, recovery.c, sweep.c, iterations.c: the handlers and
 *              sweeps, which record effects and commit
 *
 * The older part of this interface is declared in coord.h (its comments
 * name the functions' files). */
#ifndef PX_COORD_FLOW_H
#define PX_COORD_FLOW_H

#include "coord.h"
#include "effects.h"

/* ---- gone.c -------------------------------------------------------------- */

/* When the node's agent closed its stream (0: it has not, or came back). */
int64_t coord_agent_gone_since(const coord_t *c, const char *node_id);
/* The nodes whose agent went away at or before `before` (arena a). */
px_status_t coord_agents_gone_before(coord_t *c, coord_arena_t *a, int64_t before, char ***ids,
                                     size_t *n);
/* Forgets every gone agent (at shutdown). */
void coord_agents_forget(coord_t *c);

/* ---- membership.c ------------------------------------------------------- */

/* 1 when the spec makes the job elastic, with its elastic.min_nodes. */
int coord_spec_elastic(const Prunex__V1__JobSpec *spec, int *min_nodes);
/* Epoch 1 of the job's current attempt: its placement's nodes (after
 * coord_place's rows; drops of an earlier attempt forgotten). In a
 * transaction. */
px_status_t coord_membership_start(coord_t *c, coord_arena_t *a, const char *job_id);
/* At the round boundary of a decision for `iteration`: with advance the
 * attempt's drops become the next epoch, in force from iteration + 1, and
 * with COORD_ADVANCE_ALL (a new decision) so do nodes placed to join
 * (join.c); a repeated report (COORD_ADVANCE_DROPS) makes an epoch for
 * drops only, so that the survivors asking at one boundary all get the
 * same one however the scheduler grows the job meanwhile. Then d's
 * membership fields are set to the epoch in force at iteration + 1 (left 0
 * for a job placed without epochs). In a transaction when advance. */
enum { COORD_ADVANCE_NONE = 0, COORD_ADVANCE_ALL = 1, COORD_ADVANCE_DROPS = 2 };
px_status_t coord_membership_decide(coord_t *c, coord_arena_t *a, const char *job_id,
                                    int iteration, int advance,
                                    Prunex__V1__ControlDecision *d);
/* Fencing for method `what`: rank (-1: unknown) of job_id at iteration
 * (-1: now) saying it is in membership epoch `epoch` (0: not said). 1 to
 * go on; else 0 with the call answered (FAILED_PRECONDITION naming the
 * epoch and its members: the rank's node is not a member, or the epoch is
 * older than the one in force or unknown; INTERNAL). */
int coord_membership_fence(coord_t *c, px_rpc_srv_call_t *call, const char *what,
                           const char *job_id, int rank, int iteration, int epoch);
/* The active job loses node_id (reason: why, for the record). For an
 * elastic job the loss is counted (the blacklist), and while at least
 * elastic.min_nodes would remain the node is dropped: its ranks get exit
 * records, it leaves the placement (freed; LOST when its agent has gone),
 * the next round boundary makes the epoch without it, its workers get a
 * CANCEL and the job's watchers an update (fx); *dropped 1. Else *dropped
 * 0 and the caller ends the attempt as for any job, with note (cap bytes:
 * " (elastic: 1 node would remain, below min_nodes 2)", or "") appended to
 * its cause. In a transaction. */
px_status_t coord_membership_lose(coord_t *c, coord_arena_t *a, const char *job_id, int state,
                                  const char *node_id, const char *reason, coord_effects_t *fx,
                                  int *dropped, char *note, size_t cap);
/* The nodes of the job's placement now. */
px_status_t coord_membership_members(coord_t *c, const char *job_id, int *n);
/* The job's nodes in cooldown now (ids, arena a) and why, for its reason
 * (cap bytes; "" when none). */
px_status_t coord_membership_blacklisted(coord_t *c, coord_arena_t *a, const char *job_id,
                                         char ***ids, size_t *n, char *why, size_t cap);

/* ---- join.c ----------------------------------------------------------------- */

/* The scheduler's pass, after the pending jobs: each running elastic job
 * placed on fewer nodes than its cluster.nodes, or, while no job waits
 * (waiting 0), than its elastic.max_nodes, with no membership change
 * pending, takes a fitting READY node not in its cooldown at the lowest
 * free placement index, oldest job first, one node per job (its START with
 * join_epoch recorded in fx); *grown counts them. In a transaction. */
px_status_t coord_membership_grow(coord_t *c, coord_arena_t *a, coord_effects_t *fx, int waiting,
                                  int *grown);
/* The epoch a node of the job's placement (node_index) joins in: the next
 * one when it is not a member of the attempt's last epoch (it joined the
 * placement since), else 0. Every START built for it carries it. */
px_status_t coord_membership_join_epoch(coord_t *c, coord_arena_t *a, const char *job_id,
                                        int node_index, int *epoch);

/* ---- assign.c -------------------------------------------------------------- */

/* Builds the assignment of job_id for node_id in the arena; *out NULL when
 * the node holds no place in the job. */
px_status_t coord_assignment_build(coord_t *c, coord_arena_t *a, const char *job_id,
                                   const char *node_id, int action,
                                   Prunex__V1__Assignment **out);

/* ---- attempt.c ------------------------------------------------------------- */

/* A fault whose cause (reason) is a node that cannot be reached: for a
 * job being preempted (asked to stop, or stopped and held: db/sched.h's
 * preempt_stops) its attempt ends as the preemption's (coord_job_preempt,
 * no restart used); otherwise coord_job_fault. In a transaction; f
 * filled. */
px_status_t coord_job_fault_unreachable(coord_t *c, coord_arena_t *a, const char *job_id,
                                        int state, const char *reason, const char *avoid_node,
                                        coord_fault_t *f);

/* Ends the active job's attempt because of node_id: the node's ranks get
 * exit records saying reason, then the job restarts or fails
 * (coord_job_fault_unreachable, avoiding the node). In a transaction. */
px_status_t coord_job_fault_node(coord_t *c, coord_arena_t *a, const char *job_id, int state,
                                 const char *node_id, const char *reason, coord_fault_t *f);

/* ---- place.c ---------------------------------------------------------------- */

/* One pass of the scheduler in a transaction it opens: reasons of the
 * waiting jobs updated, jobs whose dependency can never be met cancelled
 * (*again 1: another pass may cancel the jobs that wait for them), the jobs
 * the policy starts placed (each recorded in fx: START to its nodes,
 * changed). On success the transaction is left open for coord_commit; on
 * failure it is rolled back and fx emptied. */
px_status_t coord_schedule_pass(coord_t *c, coord_arena_t *a, coord_effects_t *fx, int *again);
/* A preemption's waiting job placed on the nodes that fit it now (*placed
 * its id), or left waiting (*placed NULL) when they no longer suffice;
 * effects into fx. Both kinds of preemption end with it (preempt.c,
 * shrink.c). */
px_status_t coord_preempt_place_waiter(coord_t *c, coord_arena_t *a, coord_effects_t *fx,
                                       const char *waiter, const char **placed);

/* ---- jobs.c ------------------------------------------------------------------ */

/* The job a CancelJob, DeleteJob or queue control (queue_ctl.c) names, for
 * a caller who wants to `what` it: 1 with its state when it exists and the
 * caller may manage it (its owner, or an admin); else the call is answered
 * (NOT_FOUND, PERMISSION_DENIED or INTERNAL) and 0 returned. */
int coord_job_to_manage(coord_t *c, px_rpc_srv_call_t *call, const char *job_id,
                        const char *what, int *state);

/* ---- preempt.c -------------------------------------------------------------- */

/* One step of preemption in the caller's transaction: a preemption under
 * way is ended when its victims have all stopped or its grace is over (the
 * victims queued again, the waiting job placed; the sends, changes and a
 * scheduler pass into fx); with none under way and ask, the first job
 * waiting for nodes has the fewest victims needed asked to stop. *commit 1
 * when something was decided (the caller commits fx), *again 1 when the
 * next step may end it at once (no victim to wait for). */
px_status_t coord_preempt_step(coord_t *c, coord_arena_t *a, coord_effects_t *fx, int ask,
                               int *commit, int *again);

/* ---- submit.c --------------------------------------------------------------- */

/* The spec's output_dir, dataset.path and dataset.cache_dir are where the
 * nodes let jobs write, read and write a cache: 1, or 0 with the reason in
 * err (-1 on a database error). */
int coord_submit_paths_ok(coord_t *c, const Prunex__V1__JobSpec *spec, char *err, size_t cap);
/* The spec's notify.url against the coordinator's notify_allow and
 * notify_public (notify_policy.h): 1, or 0 with the call answered
 * (PERMISSION_DENIED naming the address and why). Resolves the URL's host,
 * waiting at most COORD_NOTIFY_SUBMIT_RESOLVE_MS; a name that gives no
 * answer by then is accepted and checked when the notification is sent. */
#define COORD_NOTIFY_SUBMIT_RESOLVE_MS 1000
int coord_submit_notify_ok(coord_t *c, px_rpc_srv_call_t *call, const Prunex__V1__JobSpec *spec);

#endif
