/* Assignments: what a node must start or stop, built from the job's
 * placement (db/nodes.c) and sent to the node's assignment streams
 * (watch.c), after the commit that made it so (effects.h). */
#include <stdio.h>
#include <string.h>

#include "db/db_core.h"
#include "flow.h"
#include "notify_policy.h"

#include "prunex/check.h"

/* Builds the assignment of job_id for node_id in the arena; *out NULL when
 * the node holds no place in the job. */
px_status_t coord_assignment_build(coord_t *c, coord_arena_t *a, const char *job_id,
                                   const char *node_id, int action,
                                   Prunex__V1__Assignment **out) {
  *out = NULL;
  int found, state;
  Prunex__V1__JobSpec *spec;
  PX_CHECK(coord_job_lookup(c, a, job_id, &found, &state, &spec));
  if (!found) return PX_OK;
  Prunex__V1__Assignment *as = coord_alloc(a, sizeof *as);
  if (!as) return PX_ERR_NOMEM;
  *as = (Prunex__V1__Assignment)PRUNEX__V1__ASSIGNMENT__INIT;
  as->job_id = coord_strdup(a, job_id);
  as->coordinator = c->advertise;
  as->action = (Prunex__V1__AssignmentAction)action;
  as->spec = spec;
  if (!as->job_id) return PX_ERR_NOMEM;
  PX_CHECK(coord_spec_redact(a, spec)); /* nodes need no notify credentials */
  char **salts = NULL;
  PX_CHECK(coord_db_assignment_fill(c, a, node_id, as, &found, &salts));
  if (!found) return PX_OK;
  if (state == JS_RUNNING) /* a node that joins the running attempt (join.c) */
    PX_CHECK(coord_membership_join_epoch(c, a, job_id, as->node_index, &as->join_epoch));
  for (size_t i = 0; i < as->n_ranks; i++) {
    Prunex__V1__RankAssignment *r = as->ranks[i];
    if (r->secret[0] || !salts[i][0]) continue;
    /* rank secrets are stored as salts and derived again */
    char secret[COORD_RANK_SECRET_LEN + 8] = "";
    px_status_t rc = coord_rank_secret_derive(c, salts[i], secret, sizeof secret);
    r->secret = rc == PX_OK ? coord_strdup(a, secret) : NULL;
    memset(secret, 0, sizeof secret);
    if (rc != PX_OK) return rc;
    if (!r->secret) return PX_ERR_NOMEM;
  }
  *out = as;
  return PX_OK;
}

void coord_push_assignments(coord_t *c, const char *job_id, int action) {
  coord_arena_t a;
  coord_arena_init(&a);
  char **ids = NULL;
  size_t n = 0;
  px_status_t rc = coord_db_job_node_ids(c, &a, job_id, &ids, &n);
  for (size_t i = 0; rc >= 0 && i < n; i++) {
    Prunex__V1__Assignment *as;
    rc = coord_assignment_build(c, &a, job_id, ids[i], action, &as);
    if (rc == PX_OK && as) coord_send_to_node(c, ids[i], as);
  }
  if (rc < 0) px_log(PX_LOG_ERROR, "job %s: pushing assignments: %s", job_id, px_last_error());
  coord_arena_free(&a);
}

void coord_push_join(coord_t *c, const char *job_id, char **nodes, size_t n, int join_epoch) {
  coord_arena_t a;
  coord_arena_init(&a);
  px_status_t rc = PX_OK;
  for (size_t i = 0; rc >= 0 && i < n; i++) {
    Prunex__V1__Assignment *as;
    rc = coord_assignment_build(c, &a, job_id, nodes[i],
                                PRUNEX__V1__ASSIGNMENT_ACTION__ASSIGNMENT_ACTION_START, &as);
    if (rc != PX_OK || !as) continue;
    as->join_epoch = join_epoch;
    coord_send_to_node(c, nodes[i], as);
  }
  if (rc < 0) px_log(PX_LOG_ERROR, "job %s: pushing a joining node's assignment: %s", job_id,
                     px_last_error());
  coord_arena_free(&a);
}

void coord_attempt_cancel(coord_t *c, const char *job_id, const coord_fault_t *f) {
  /* The old attempt's nodes stop it: its placement is gone, so the CANCEL
   * is built here, naming the attempt. */
  Prunex__V1__Assignment as = PRUNEX__V1__ASSIGNMENT__INIT;
  as.job_id = (char *)job_id;
  as.action = PRUNEX__V1__ASSIGNMENT_ACTION__ASSIGNMENT_ACTION_CANCEL;
  as.coordinator = c->advertise;
  as.attempt = f->attempt;
  for (size_t i = 0; i < f->nnodes; i++) coord_send_to_node(c, f->nodes[i], &as);
}
