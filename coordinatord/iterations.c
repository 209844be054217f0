/* ReportIteration: stores the iteration's metrics, runs the H-SADMM control
 * policy (px_admm_decide) with the state and per-layer penalties kept in the
 * database, and answers the ControlDecision; GetIterations reads the metrics
 * back. Decisions are stored too, so a report retried (after a timeout or a
 * coordinator restart) gets the very answer the first one got. A new
 * decision is the round boundary of membership (membership.c): it makes the
 * next epoch of an elastic job that lost a node, and every answer carries
 * the epoch in force for the next iteration; a rank outside it is fenced. */
#include <stdio.h>
#include <string.h>

#include "coord.h"
#include "flow.h"
#include "prunex/check.h"
#include "prunex/jobspec.h"
#include "db/control.h"
#include "db/epoch_rows.h"
#include "db/reports.h"
#include "rollcall.h"

/* Penalty in force for a layer whose penalties were never decided: the
 * reported one, else the spec's initial one, else 1. */
static double coord_initial_rho(double reported, double spec) {
  if (reported > 0.0) return reported;
  if (spec > 0.0) return spec;
  return 1.0;
}

/* Runs the policy for this report. *refused is set (with the message) when
 * the policy refuses the report's figures. */
static px_status_t coord_decide(coord_t *c, coord_arena_t *a, const Prunex__V1__IterationReport *r,
                                const Prunex__V1__JobSpec *spec, Prunex__V1__ControlDecision *d,
                                px_admm_policy_state_t *pstate, int *refused) {
  *refused = 0;
  px_status_t rc;
  PX_CHECK(coord_db_control_state(c, r->job_id, &pstate->stable_iterations, &pstate->frozen));

  int nl = (int)r->n_layers;
  px_admm_layer_report_t *rep = coord_alloc(a, (size_t)(nl ? nl : 1) * sizeof *rep);
  px_admm_layer_decision_t *dec = coord_alloc(a, (size_t)(nl ? nl : 1) * sizeof *dec);
  if (!rep || !dec) return PX_ERR_NOMEM;
  double spec_rho1 = spec->admm ? spec->admm->rho1 : 0.0;
  double spec_rho2 = spec->admm ? spec->admm->rho2 : 0.0;
  for (int l = 0; l < nl; l++) {
    const Prunex__V1__LayerMetrics *L = r->layers[l];
    px_layer_metrics_to_admm(L, &rep[l]);
    rep[l].rho1 = coord_initial_rho(L->rho1, spec_rho1);
    rep[l].rho2 = coord_initial_rho(L->rho2, spec_rho2);
    /* The coordinator's own record of the penalties in force wins. */
    int found = 0;
    double rho1 = 0.0, rho2 = 0.0;
    PX_CHECK(coord_db_control_penalty(c, r->job_id, L->layer, &rho1, &rho2, &found));
    if (found) {
      rep[l].rho1 = rho1;
      rep[l].rho2 = rho2;
    }
  }
  px_admm_policy_t policy;
  px_jobspec_admm_policy(spec, &policy);
  int M = spec->cluster->nodes, P = spec->cluster->workers_per_node;
  px_admm_decision_t out;
  rc = px_admm_decide(&policy, pstate, r->iteration, r->mask_drift, M, P, rep, nl, dec, &out);
  if (rc != PX_OK) {
    *refused = 1;
    return rc;
  }

  /* the first iteration that converged, carried from decision to decision */
  Prunex__V1__ControlDecision *prev = NULL;
  PX_CHECK(coord_db_control_decision(c, a, r->job_id, -1, &prev));
  d->iteration = r->iteration;
  d->freeze = out.freeze;
  d->converged = out.converged;
  d->converged_at = prev && prev->converged_at ? prev->converged_at
                    : out.converged            ? r->iteration + 1
                                               : 0;
  d->stop = out.stop;
  d->stop_reason = coord_strdup(a, out.stop_reason);
  d->n_layers = (size_t)nl;
  d->layers = coord_alloc(a, (size_t)(nl ? nl : 1) * sizeof *d->layers);
  if (!d->stop_reason || !d->layers) return PX_ERR_NOMEM;
  for (int l = 0; l < nl; l++) {
    Prunex__V1__LayerPenalty *p = coord_alloc(a, sizeof *p);
    if (!p) return PX_ERR_NOMEM;
    *p = (Prunex__V1__LayerPenalty)PRUNEX__V1__LAYER_PENALTY__INIT;
    p->layer = r->layers[l]->layer;
    p->rho1 = dec[l].rho1;
    p->rho2 = dec[l].rho2;
    d->layers[l] = p;
  }
  return PX_OK;
}

/* Everything a new decision changes, in one transaction. */
static px_status_t coord_commit_decision(coord_t *c, const Prunex__V1__IterationReport *r,
                                         const Prunex__V1__ControlDecision *d,
                                         const px_admm_policy_state_t *ps, int state) {
  int64_t now = coord_now_ms();
  PX_CHECK(coord_db_reports_put(c->db, r, now));
  for (size_t l = 0; l < d->n_layers; l++)
    PX_CHECK(coord_db_control_penalty_put(c, r->job_id, d->layers[l]->layer, d->layers[l]->rho1,
                                          d->layers[l]->rho2));
  PX_CHECK(coord_db_control_decision_put(c, r->job_id, d, now));
  PX_CHECK(coord_db_control_state_put(c, r->job_id, ps->stable_iterations, ps->frozen,
                                      r->iteration, r->checkpoint_problem, now));
  if (state == JS_SCHEDULED) {
    char reason[128];
    snprintf(reason, sizeof reason, "first iteration report (rank %d, iteration %d)", r->rank,
             r->iteration);
    PX_CHECK(coord_job_set_state(c, r->job_id, JS_SCHEDULED, JS_RUNNING, reason));
  }
  return PX_OK;
}

/* Layers of a report: at most COORD_MAX_LAYERS, no more than the job's first
 * report had (the model's parameter tensors: penalties are kept for each),
 * each index in 0..n-1 once. One pass with a bitmap: linear, so a hostile
 * report costs what its size costs (a quadratic check here once
 * held the loop for minutes). Answers the call and returns 0 when bad. */
#define COORD_MAX_LAYERS 4096

static int coord_report_layers_ok(coord_t *c, px_rpc_srv_call_t *call,
                                  const Prunex__V1__IterationReport *r) {
  size_t n = r->n_layers;
  if (n > COORD_MAX_LAYERS) {
    px_rpc_srv_finish(call, PX_RPC_INVALID_ARGUMENT,
                      "layers: %zu reported, no model has more than %d", n, COORD_MAX_LAYERS);
    return 0;
  }
  unsigned char seen[COORD_MAX_LAYERS];
  memset(seen, 0, n);
  for (size_t i = 0; i < n; i++) {
    int l = r->layers[i]->layer;
    if (l < 0 || (size_t)l >= n) {
      px_rpc_srv_finish(call, PX_RPC_INVALID_ARGUMENT,
                        "layers[%zu].layer = %d: must be in 0..%zu (one entry per layer)", i, l,
                        n ? n - 1 : 0);
      return 0;
    }
    if (seen[l]) {
      px_rpc_srv_finish(call, PX_RPC_INVALID_ARGUMENT, "layers[%zu].layer = %d: reported twice",
                        i, l);
      return 0;
    }
    seen[l] = 1;
    const char *name = r->layers[i]->name;
    if (strlen(name) > 256 || !px_utf8_valid(name, strlen(name))) {
      px_rpc_srv_finish(call, PX_RPC_INVALID_ARGUMENT,
                        "layers[%zu].name: must be UTF-8 of at most 256 bytes", i);
      return 0;
    }
  }
  size_t np = strlen(r->checkpoint_problem);
  if (np > 512 || !px_utf8_valid(r->checkpoint_problem, np)) {
    px_rpc_srv_finish(call, PX_RPC_INVALID_ARGUMENT,
                      "checkpoint_problem: must be UTF-8 of at most 512 bytes");
    return 0;
  }
  /* The job's model, as its first report showed it. */
  int64_t known = 0;
  if (coord_db_control_layers(c, r->job_id, &known) != PX_OK) {
    coord_fail_internal(c, call);
    return 0;
  }
  if (known > 0 && (int64_t)n > known) {
    px_rpc_srv_finish(call, PX_RPC_INVALID_ARGUMENT,
                      "layers: %zu reported, the job's model has %lld", n, (long long)known);
    return 0;
  }
  return 1;
}

/* 1 in *latest when the report's iteration is the latest decided one or the
 * one before it: the boundary an elastic job's broken round started from
 * (rank 0 may have had the round's decision before a peer was lost). */
static px_status_t coord_report_latest(coord_t *c, coord_arena_t *a,
                                       const Prunex__V1__IterationReport *r, int *latest) {
  Prunex__V1__ControlDecision *next = NULL;
  PX_CHECK(coord_db_control_decision(c, a, r->job_id, r->iteration + 2, &next));
  *latest = next == NULL;
  return PX_OK;
}

void coord_rpc_report_iteration(px_rpc_srv_call_t *call, const ProtobufCMessage *msg, void *data) {
  coord_t *c = data;
  const Prunex__V1__IterationReport *r = (const Prunex__V1__IterationReport *)msg;
  if (!r->job_id[0]) {
    px_rpc_srv_finish(call, PX_RPC_INVALID_ARGUMENT, "job_id is required");
    return;
  }
  if (r->iteration < 0 || r->rank < 0) {
    px_rpc_srv_finish(call, PX_RPC_INVALID_ARGUMENT, "iteration = %d, rank = %d: must be >= 0",
                      r->iteration, r->rank);
    return;
  }
  if (!coord_report_layers_ok(c, call, r)) return;
  coord_arena_t a;
  coord_arena_init(&a);
  int found = 0, state = 0, refused = 0;
  Prunex__V1__JobSpec *spec = NULL;
  Prunex__V1__ControlDecision *stored = NULL;
  Prunex__V1__ControlDecision d = PRUNEX__V1__CONTROL_DECISION__INIT;
  px_admm_policy_state_t ps = {0, 0};
  coord_effects_t fx;
  coord_effects_init(&fx, &a);
  if (coord_job_lookup(c, &a, r->job_id, &found, &state, &spec) != PX_OK) goto internal;
  if (!found) {
    px_rpc_srv_finish(call, PX_RPC_NOT_FOUND, "job %s not found", r->job_id);
    goto out;
  }
  if (state == JS_CANCELLED) {
    d.iteration = r->iteration;
    d.cancelled = 1;
    d.stop = 1;
    d.stop_reason = "cancelled";
    px_rpc_srv_reply(call, &d.base);
    goto out;
  }
  if (state == JS_PENDING || coord_job_terminal(state)) {
    px_rpc_srv_finish(call, PX_RPC_FAILED_PRECONDITION, "job %s is %s: it takes no reports",
                      r->job_id, px_rpc_job_state_name(state));
    goto out;
  }
  /* a rank of a node dropped, or of an epoch gone (membership.c) */
  if (!coord_membership_fence(c, call, "ReportIteration", r->job_id, r->rank, r->iteration,
                              r->membership_epoch))
    goto out;
  if (coord_db_control_decision(c, &a, r->job_id, r->iteration, &stored) != PX_OK) goto internal;
  if (px_store_begin(c->db) != PX_OK) goto internal;
  if (stored) {
    /* A repeated report (a retry, another rank, or the survivors of an
     * elastic job's lost node asking for the next epoch): same answer, with
     * the membership of this attempt (a resumed one replays older
     * decisions); at the latest boundary (or the one before), the next epoch
     * when a node was dropped since, as a new decision would make it, or
     * when the survivors' roll call found one silent (rollcall.c). */
    int latest = 0;
    if (coord_db_reports_put(c->db, r, coord_now_ms()) != PX_OK ||
        coord_report_latest(c, &a, r, &latest) != PX_OK ||
        (latest && coord_rollcall_note(c, &a, r, spec, state, &fx) != PX_OK) ||
        coord_membership_decide(c, &a, r->job_id, r->iteration,
                                latest ? COORD_ADVANCE_DROPS : COORD_ADVANCE_NONE, stored) != PX_OK)
      goto rollback;
    /* an epoch the survivors' repeat made (a drop): a spare may join (join.c)
     * at once, not at the scheduler's next unrelated event */
    if (latest && stored->membership_from_iteration == r->iteration + 1) coord_fx_schedule(&fx);
  } else {
    px_status_t rc = coord_decide(c, &a, r, spec, &d, &ps, &refused);
    if (refused) {
      px_store_rollback(c->db);
      px_rpc_srv_finish(call, PX_RPC_INVALID_ARGUMENT, "%s", px_last_error());
      goto out;
    }
    /* past its time limit: stop here; the ranks write their
     * final checkpoint and exit, and the job ends TIMEOUT */
    int stop_asked = 0;
    if (rc == PX_OK) rc = coord_db_sched_stop_kind(c, r->job_id, &stop_asked);
    if (rc == PX_OK && stop_asked && !d.stop) {
      d.stop = 1;
      d.stop_reason = (char *)coord_stop_reason_name(stop_asked); /* or preempted */
    }
    /* the round boundary: the next epoch, when a member node was lost */
    if (rc == PX_OK)
      rc = coord_membership_decide(c, &a, r->job_id, r->iteration, COORD_ADVANCE_ALL, &d);
    /* a new epoch: a job that dropped a node may take one back; now
     * RUNNING: an elastic job may grow past cluster.nodes (join.c) */
    if (rc == PX_OK && (d.membership_from_iteration == r->iteration + 1 ||
                        state == JS_SCHEDULED))
      coord_fx_schedule(&fx);
    if (rc != PX_OK || coord_commit_decision(c, r, &d, &ps, state) != PX_OK) goto rollback;
  }
  /* the watchers get the report as the update's latest (effects.h) */
  if (coord_fx_report(&fx, r->job_id, r) != PX_OK) goto rollback;
  if (coord_commit(c, &fx) != PX_OK) goto internal; /* rolled back */
  px_rpc_srv_reply(call, stored ? &stored->base : &d.base);
  goto out;
rollback:
  px_store_rollback(c->db);
internal:
  coord_fail_internal(c, call);
out:
  coord_arena_free(&a);
}

/* ---- GetIterations ------------------------------------------------------------- */

/* The job's membership epochs in force from the first iteration asked for
 * on (db/epoch_rows.h): each change is a row of its metrics. */
static px_status_t coord_iterations_memberships(coord_t *c, coord_arena_t *a,
                                                const Prunex__V1__GetIterationsRequest *r,
                                                Prunex__V1__GetIterationsResponse *resp) {
  coord_epoch_row_t *rows = NULL;
  size_t n = 0, k = 0;
  PX_CHECK(coord_db_epoch_rows(c->db, a, r->job_id, 0, 1, &rows, &n));
  for (size_t i = 0; i < n; i++)
    if (rows[i].from_iteration >= r->from_iteration) rows[k++] = rows[i];
  PX_CHECK(coord_db_epoch_messages(a, rows, k, &resp->memberships));
  resp->n_memberships = k;
  return PX_OK;
}

void coord_rpc_get_iterations(px_rpc_srv_call_t *call, const ProtobufCMessage *msg, void *data) {
  coord_t *c = data;
  const Prunex__V1__GetIterationsRequest *r = (const Prunex__V1__GetIterationsRequest *)msg;
  if (!r->job_id[0]) {
    px_rpc_srv_finish(call, PX_RPC_INVALID_ARGUMENT, "job_id is required");
    return;
  }
  if (r->from_iteration < 0 || r->limit < 0) {
    px_rpc_srv_finish(call, PX_RPC_INVALID_ARGUMENT,
                      "from_iteration = %d, limit = %d: must be >= 0", r->from_iteration, r->limit);
    return;
  }
  coord_arena_t a;
  coord_arena_init(&a);
  int found = 0;
  Prunex__V1__GetIterationsResponse resp = PRUNEX__V1__GET_ITERATIONS_RESPONSE__INIT;
  px_status_t rc = coord_job_lookup(c, &a, r->job_id, &found, NULL, NULL);
  if (rc == PX_OK && !found) {
    px_rpc_srv_finish(call, PX_RPC_NOT_FOUND, "job %s not found", r->job_id);
    coord_arena_free(&a);
    return;
  }
  if (rc == PX_OK)
    rc = coord_db_reports_list(c->db, &a, r->job_id, r->from_iteration, r->limit,
                               r->include_layers, &resp);
  if (rc == PX_OK) rc = coord_iterations_memberships(c, &a, r, &resp);
  if (rc < 0) coord_fail_internal(c, call);
  else px_rpc_srv_reply(call, &resp.base);
  coord_arena_free(&a);
}
