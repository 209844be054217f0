/* The coordinator's SQL for the H-SADMM control policy (iterations.c,
 * preempt.c): the stored decisions (so a retried report gets the very
 * answer the first one got), the per-layer penalties in force and the
 * policy's state on the job's row. Named queries; the caller holds the
 * transaction where one is needed. */
#ifndef PX_COORD_DB_CONTROL_H
#define PX_COORD_DB_CONTROL_H

#include "../coord.h"

/* The stored decision of (job_id, iteration), or with iteration < 0 the
 * job's newest; NULL when there is none. Unpacked in arena a. */
px_status_t coord_db_control_decision(coord_t *c, coord_arena_t *a, const char *job_id,
                                      int iteration, Prunex__V1__ControlDecision **out);
/* Stores d as the decision of (job_id, d->iteration): a new row made at
 * now_ms, or with now_ms 0 the existing row's decision replaced. */
px_status_t coord_db_control_decision_put(coord_t *c, const char *job_id,
                                          const Prunex__V1__ControlDecision *d, int64_t now_ms);
/* The policy's state kept on the job's row. PX_ERR_INTERNAL: no such job. */
px_status_t coord_db_control_state(coord_t *c, const char *job_id, int *stable_iterations,
                                   int *frozen);
/* After a decision: the policy's state, the newest iteration and the
 * checkpoint problem the report carried, on the job's row. */
px_status_t coord_db_control_state_put(coord_t *c, const char *job_id, int stable_iterations,
                                       int frozen, int iteration, const char *checkpoint_problem,
                                       int64_t now_ms);
/* The penalties in force for the layer (*found 0: never decided). */
px_status_t coord_db_control_penalty(coord_t *c, const char *job_id, int layer, double *rho1,
                                     double *rho2, int *found);
px_status_t coord_db_control_penalty_put(coord_t *c, const char *job_id, int layer, double rho1,
                                         double rho2);
/* How many layers have penalties (the job's model as its first report
 * showed it; 0: none yet). */
px_status_t coord_db_control_layers(coord_t *c, const char *job_id, int64_t *n);

#endif
