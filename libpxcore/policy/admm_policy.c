/* The H-SADMM control policy: residual balancing of the penalties, mask
 * freeze and stopping rules. Pure: everything it depends on is an argument,
 * so the coordinator (which persists the state) and the tests call the same
 * code and a restarted coordinator decides exactly as before. */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "prunex/admm.h"
#include "px_check.h"

void px_admm_policy_defaults(px_admm_policy_t *p) {
  *p = (px_admm_policy_t){
      .adaptive_rho = 1, .mu = 10.0, .tau = 2.0, .rho_min = 1e-6, .rho_max = 1e4,
      .freeze_on_stable = 3, .freeze_iteration = 0, .max_iterations = 100,
      .eps_abs = 1e-4, .eps_rel = 1e-3, .rho1_ramp = 1.0,
  };
}

px_status_t px_admm_policy_validate(const px_admm_policy_t *p) {
  PX_REQUIRE(p->mu > 1.0, "admm.mu = %g: must be > 1", p->mu);
  PX_REQUIRE(p->tau > 1.0, "admm.tau = %g: must be > 1", p->tau);
  PX_REQUIRE(p->rho_min >= 0.0, "admm.rho_min = %g: must be >= 0", p->rho_min);
  PX_REQUIRE(p->rho_max == 0.0 || p->rho_max >= p->rho_min,
             "admm.rho_max = %g: must be 0 (no clamp) or >= rho_min (%g)", p->rho_max, p->rho_min);
  PX_REQUIRE(p->freeze_on_stable >= 0, "admm.freeze_on_stable = %d: must be >= 0",
             p->freeze_on_stable);
  PX_REQUIRE(p->freeze_iteration >= 0, "admm.freeze_iteration = %d: must be >= 0",
             p->freeze_iteration);
  PX_REQUIRE(p->max_iterations >= 0, "admm.max_iterations = %d: must be >= 0", p->max_iterations);
  PX_REQUIRE(p->rho1_ramp >= 1.0 && p->rho1_ramp <= 10.0,
             "admm.rho1_ramp = %g: must be in [1, 10]", p->rho1_ramp);
  PX_REQUIRE(p->eps_abs >= 0.0 && p->eps_rel >= 0.0,
             "admm.eps_abs = %g, admm.eps_rel = %g: must be >= 0", p->eps_abs, p->eps_rel);
  return PX_OK;
}

/* Boyd 3.4.1: grow rho when the primal residual dominates, shrink it when
 * the dual one does, then clamp. */
static double px__balance(const px_admm_policy_t *p, double rho, double r, double s) {
  if (p->adaptive_rho) {
    if (r > p->mu * s) rho *= p->tau;
    else if (s > p->mu * r) rho /= p->tau;
  }
  if (rho < p->rho_min) rho = p->rho_min;
  if (p->rho_max > 0.0 && rho > p->rho_max) rho = p->rho_max;
  return rho;
}

static int px__bad(double x) { return !(x >= 0.0) || isinf(x); }

px_status_t px_admm_decide(const px_admm_policy_t *policy, px_admm_policy_state_t *state,
                           int iteration, int64_t mask_drift, int num_nodes,
                           int workers_per_node, const px_admm_layer_report_t *layers,
                           int nlayers, px_admm_layer_decision_t *out_layers,
                           px_admm_decision_t *out) {
  PX_CHECK(px_admm_policy_validate(policy));
  PX_REQUIRE(iteration >= 0 && num_nodes > 0 && workers_per_node > 0 && nlayers >= 0,
             "admm decision: iteration %d, %d nodes x %d workers, %d layers", iteration,
             num_nodes, workers_per_node, nlayers);
  PX_REQUIRE(mask_drift >= 0, "admm decision: mask drift %lld is negative",
             (long long)mask_drift);
  for (int l = 0; l < nlayers; l++) {
    const px_admm_layer_report_t *L = &layers[l];
    double v[] = {L->r_intra, L->s_intra, L->r_inter, L->s_inter, L->theta_norm,
                  L->zi_norm,  L->z_norm,  L->u_norm,  L->v_norm};
    for (size_t i = 0; i < sizeof v / sizeof v[0]; i++)
      PX_REQUIRE(!px__bad(v[i]), "admm decision: layer %d reports a non-finite or negative norm",
                 l);
    PX_REQUIRE(L->rho1 > 0.0 && L->rho2 > 0.0 && !isinf(L->rho1) && !isinf(L->rho2),
               "admm decision: layer %d has penalties rho1 = %g, rho2 = %g", l, L->rho1, L->rho2);
    PX_REQUIRE(L->numel > 0, "admm decision: layer %d has %lld elements", l,
               (long long)L->numel);
  }

  int N = num_nodes * workers_per_node, all_converged = nlayers > 0;
  int tolerances = policy->eps_abs > 0.0 || policy->eps_rel > 0.0;
  for (int l = 0; l < nlayers; l++) {
    const px_admm_layer_report_t *L = &layers[l];
    double n_intra = sqrt((double)N * (double)L->numel);
    double n_inter = sqrt((double)num_nodes * (double)L->numel);
    double pri_intra = n_intra * policy->eps_abs +
                       policy->eps_rel * fmax(L->theta_norm, L->zi_norm);
    double dual_intra = n_intra * policy->eps_abs + policy->eps_rel * L->rho1 * L->u_norm;
    double pri_inter = n_inter * policy->eps_abs + policy->eps_rel * fmax(L->zi_norm, L->z_norm);
    double dual_inter = n_inter * policy->eps_abs + policy->eps_rel * L->rho2 * L->v_norm;
    int conv = tolerances && L->r_intra <= pri_intra && L->s_intra <= dual_intra &&
               L->r_inter <= pri_inter && L->s_inter <= dual_inter;
    all_converged &= conv;
    out_layers[l].converged = conv;
    out_layers[l].rho1 = px__balance(policy, L->rho1, L->r_intra, L->s_intra);
    out_layers[l].rho2 = px__balance(policy, L->rho2, L->r_inter, L->s_inter);
  }

  memset(out, 0, sizeof *out);
  out->converged = all_converged && tolerances;
  /* converged residuals say the ranks agree on the masks too: they freeze */
  const int was_frozen = state->frozen;
  if (!state->frozen) {
    state->stable_iterations = mask_drift == 0 ? state->stable_iterations + 1 : 0;
    if ((policy->freeze_on_stable > 0 && state->stable_iterations >= policy->freeze_on_stable) ||
        (policy->freeze_iteration > 0 && iteration >= policy->freeze_iteration) ||
        out->converged)
      state->frozen = 1;
  }
  out->freeze = state->frozen;
  /* the ramp: rho1 grows until the freeze, whose decision takes the
     iteration factors it added back out (the iteration numbers say how
     many: a restarted run decides the same) */
  if (policy->rho1_ramp > 1.0)
    for (int l = 0; l < nlayers; l++) {
      double r = out_layers[l].rho1;
      r = state->frozen ? (was_frozen ? r : r / pow(policy->rho1_ramp, iteration))
                        : r * policy->rho1_ramp;
      if (r < policy->rho_min) r = policy->rho_min;
      if (policy->rho_max > 0.0 && r > policy->rho_max) r = policy->rho_max;
      out_layers[l].rho1 = r;
    }
  if (policy->max_iterations > 0 && iteration + 1 >= policy->max_iterations) {
    out->stop = 1;
    snprintf(out->stop_reason, sizeof out->stop_reason, "max_iterations");
  } else if (out->converged && policy->stop_on_converged) {
    out->stop = 1;
    snprintf(out->stop_reason, sizeof out->stop_reason, "converged");
  }
  return PX_OK;
}

void px_admm_rescale_dual(float *u, size_t n, double rho_old, double rho_new) {
  if (rho_old == rho_new) return;
  float f = (float)(rho_old / rho_new);
  for (size_t i = 0; i < n; i++) u[i] *= f;
}
