/* H-SADMM control policy (step 6 of docs/architecture.md, "H-SADMM (one outer
 * iteration)"): from one iteration's residuals, decide the next penalties per
 * layer (residual balancing, Boyd 3.4.1), whether to freeze the masks, and
 * whether to stop (max iterations or Boyd 3.3.1 tolerances). A pure function
 * of its inputs and a small state that the caller persists (the coordinator
 * keeps it in SQLite, so a restart decides exactly as before). */
#ifndef PRUNEX_ADMM_H
#define PRUNEX_ADMM_H

#include <stddef.h>
#include <stdint.h>

#include "prunex/px.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct {
  int adaptive_rho;      /* residual balancing on/off */
  double mu;             /* > 1: imbalance that triggers a change (Boyd: 10) */
  double tau;            /* > 1: factor of a change (Boyd: 2) */
  double rho_min;        /* >= 0: lower clamp */
  double rho_max;        /* upper clamp (0: no clamp) */
  int freeze_on_stable;  /* freeze after this many consecutive zero-drift iterations; 0: never */
  int freeze_iteration;  /* freeze at this iteration (0-based) regardless; 0: never */
  int max_iterations;    /* stop after this many iterations; 0: no limit */
  double eps_abs, eps_rel; /* residual tolerances (Boyd 3.3.1); both 0: never converged */
  int stop_on_converged; /* 1: converged residuals stop the run; 0: they freeze the masks
                            and are reported, and the run trains its whole budget */
  double rho1_ramp;      /* >= 1: each decision before the masks freeze multiplies rho1 by
                            it (within rho_max); the decision that freezes them divides
                            it by rho1_ramp^iteration, taking the ramp back out (1: none) */
} px_admm_policy_t;

/* Defaults: adaptive, mu 10, tau 2, rho in [1e-6, 1e4], freeze after 3
 * stable iterations, 100 iterations, eps_abs 1e-4, eps_rel 1e-3, no stop on
 * convergence. */
PX_API void px_admm_policy_defaults(px_admm_policy_t *p);

/* PX_ERR_INVALID naming the bad field (admm.mu etc.) when out of range. */
PX_API px_status_t px_admm_policy_validate(const px_admm_policy_t *p);

/* One layer's figures for one iteration. Residual norms are of the stacked
 * vectors over all ranks (intra: N blocks, inter: M blocks), as are the norms
 * beside them, which set the relative tolerances. */
typedef struct {
  double r_intra, s_intra, r_inter, s_inter;
  double rho1, rho2;     /* penalties in force during the iteration */
  double theta_norm, zi_norm, z_norm, u_norm, v_norm;
  int64_t numel;
} px_admm_layer_report_t;

typedef struct {
  double rho1, rho2;     /* penalties for the next iteration */
  int converged;         /* all four residuals within tolerance */
} px_admm_layer_decision_t;

/* What the caller persists between iterations. Zero-initialise. */
typedef struct {
  int stable_iterations; /* consecutive iterations with zero mask drift */
  int frozen;
} px_admm_policy_state_t;

typedef struct {
  int freeze;            /* masks are (now) frozen */
  int converged;         /* every layer's residuals are within the tolerances */
  int stop;
  char stop_reason[64];  /* "max_iterations", "converged" */
} px_admm_decision_t;

/* Decides iteration `iteration` (0-based) of a job of num_nodes x
 * workers_per_node ranks: writes one decision per layer to out_layers[nlayers]
 * and the global one to *out, and advances *state. Fails with
 * PX_ERR_INVALID on a bad policy or a negative/NaN figure (naming the layer). */
PX_API px_status_t px_admm_decide(const px_admm_policy_t *policy, px_admm_policy_state_t *state,
                                  int iteration, int64_t mask_drift, int num_nodes,
                                  int workers_per_node, const px_admm_layer_report_t *layers,
                                  int nlayers, px_admm_layer_decision_t *out_layers,
                                  px_admm_decision_t *out);

/* Scaled duals must follow a penalty change so that the unscaled dual
 * y = rho * u stays the same: u *= rho_old / rho_new. */
PX_API void px_admm_rescale_dual(float *u, size_t n, double rho_old, double rho_new);

#ifdef __cplusplus
}
#endif
#endif
