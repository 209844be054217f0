/* The H-SADMM control policy: residual balancing moves each penalty the
 * right way and clamps it, freezing follows zero-drift streaks or the set
 * iteration and is sticky, stopping follows max_iterations or the Boyd
 * tolerances, and bad figures or settings are refused with the field named. */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include <cmocka.h>

#include "prunex/admm.h"

static px_admm_layer_report_t layer(double r1, double s1, double r2, double s2) {
  return (px_admm_layer_report_t){.r_intra = r1, .s_intra = s1, .r_inter = r2, .s_inter = s2,
                                  .rho1 = 1.0, .rho2 = 0.5, .theta_norm = 10, .zi_norm = 10,
                                  .z_norm = 10, .u_norm = 1, .v_norm = 1, .numel = 100};
}

static void test_residual_balancing_moves_rho_towards_balance(void **state) {
  (void)state;
  px_admm_policy_t p;
  px_admm_policy_defaults(&p);
  p.max_iterations = 0;
  px_admm_policy_state_t st = {0};
  px_admm_layer_report_t L[3] = {
      layer(100, 1, 1, 100), /* primal dominates intra, dual dominates inter */
      layer(1, 1, 1, 1),     /* balanced: unchanged */
      layer(5, 1, 1, 5),     /* imbalance below mu: unchanged */
  };
  px_admm_layer_decision_t d[3];
  px_admm_decision_t g;
  assert_int_equal(px_admm_decide(&p, &st, 0, 5, 2, 2, L, 3, d, &g), PX_OK);
  assert_float_equal(d[0].rho1, 2.0, 0);
  assert_float_equal(d[0].rho2, 0.25, 0);
  assert_float_equal(d[1].rho1, 1.0, 0);
  assert_float_equal(d[1].rho2, 0.5, 0);
  assert_float_equal(d[2].rho1, 1.0, 0);
  assert_float_equal(d[2].rho2, 0.5, 0);
  /* clamped at rho_max, and nothing moves when adaptation is off */
  p.rho_max = 1.5;
  assert_int_equal(px_admm_decide(&p, &st, 1, 5, 2, 2, L, 1, d, &g), PX_OK);
  assert_float_equal(d[0].rho1, 1.5, 0);
  p.adaptive_rho = 0;
  p.rho_max = 1e4;
  assert_int_equal(px_admm_decide(&p, &st, 2, 5, 2, 2, L, 1, d, &g), PX_OK);
  assert_float_equal(d[0].rho1, 1.0, 0);
  assert_float_equal(d[0].rho2, 0.5, 0);
}

/* The defaults with the freeze rules given and no iteration limit. */
static px_admm_policy_t freeze_policy(int32_t on_stable, int32_t at_iteration) {
  px_admm_policy_t p;
  px_admm_policy_defaults(&p);
  p.freeze_on_stable = on_stable;
  p.freeze_iteration = at_iteration;
  p.max_iterations = 0;
  return p;
}

static void test_freeze_after_stable_iterations_is_sticky(void **state) {
  (void)state;
  px_admm_policy_t p = freeze_policy(2, 0);
  px_admm_policy_state_t st = {0};
  px_admm_layer_report_t L = layer(1, 1, 1, 1);
  px_admm_layer_decision_t d;
  px_admm_decision_t g;
  int64_t drift[] = {7, 0, 3, 0, 0, 9, 4};
  int want[] = {0, 0, 0, 0, 1, 1, 1};
  for (int it = 0; it < 7; it++) {
    assert_int_equal(px_admm_decide(&p, &st, it, drift[it], 2, 2, &L, 1, &d, &g), PX_OK);
    assert_int_equal(g.freeze, want[it]);
  }
}

static void test_freeze_at_set_iteration(void **state) {
  (void)state;
  px_admm_policy_t p = freeze_policy(0, 3);
  px_admm_policy_state_t st = {0};
  px_admm_layer_report_t L = layer(1, 1, 1, 1);
  px_admm_layer_decision_t d;
  px_admm_decision_t g;
  for (int it = 0; it < 5; it++) {
    assert_int_equal(px_admm_decide(&p, &st, it, 0, 1, 4, &L, 1, &d, &g), PX_OK);
    assert_int_equal(g.freeze, it >= 3);
  }
}

static void test_stop_at_max_iterations_and_on_convergence(void **state) {
  (void)state;
  px_admm_policy_t p;
  px_admm_policy_defaults(&p);
  p.max_iterations = 3;
  px_admm_policy_state_t st = {0};
  px_admm_layer_report_t big = layer(1, 1, 1, 1), tiny = layer(1e-6, 1e-6, 1e-6, 1e-6);
  px_admm_layer_decision_t d[2];
  px_admm_decision_t g;
  assert_int_equal(px_admm_decide(&p, &st, 1, 0, 2, 2, &big, 1, d, &g), PX_OK);
  assert_false(g.stop);
  assert_int_equal(px_admm_decide(&p, &st, 2, 0, 2, 2, &big, 1, d, &g), PX_OK);
  assert_true(g.stop);
  assert_string_equal(g.stop_reason, "max_iterations");

  p.max_iterations = 0;
  px_admm_layer_report_t two[2] = {tiny, big};
  assert_int_equal(px_admm_decide(&p, &st, 5, 0, 2, 2, two, 2, d, &g), PX_OK);
  assert_true(d[0].converged);
  assert_false(d[1].converged);
  assert_false(g.stop); /* every layer must converge */
  two[1] = tiny;
  /* by default converged residuals freeze the masks and the run goes on */
  px_admm_policy_state_t fresh = {0};
  assert_int_equal(px_admm_decide(&p, &fresh, 6, 5, 2, 2, two, 2, d, &g), PX_OK);
  assert_true(g.converged);
  assert_true(g.freeze);
  assert_false(g.stop);
  /* admm.stop_on_converged: they end it */
  p.stop_on_converged = 1;
  assert_int_equal(px_admm_decide(&p, &st, 6, 0, 2, 2, two, 2, d, &g), PX_OK);
  assert_true(g.stop);
  assert_string_equal(g.stop_reason, "converged");
  /* tolerances of zero never stop on convergence */
  p.eps_abs = p.eps_rel = 0;
  two[0].r_intra = 1e-9;
  assert_int_equal(px_admm_decide(&p, &st, 7, 0, 2, 2, two, 2, d, &g), PX_OK);
  assert_false(g.stop);
  assert_false(g.converged);
}

static void test_tolerance_scales_with_ranks_and_norms(void **state) {
  (void)state;
  px_admm_policy_t p;
  px_admm_policy_defaults(&p);
  p.max_iterations = 0;
  p.eps_rel = 0;
  p.eps_abs = 1e-3;
  px_admm_policy_state_t st = {0};
  /* eps_pri_intra = sqrt(N * numel) * eps_abs = sqrt(4 * 100) * 1e-3 = 0.02 */
  px_admm_layer_report_t L = layer(0.019, 0, 0, 0);
  px_admm_layer_decision_t d;
  px_admm_decision_t g;
  assert_int_equal(px_admm_decide(&p, &st, 0, 0, 2, 2, &L, 1, &d, &g), PX_OK);
  assert_true(d.converged);
  L.r_intra = 0.021;
  assert_int_equal(px_admm_decide(&p, &st, 0, 0, 2, 2, &L, 1, &d, &g), PX_OK);
  assert_false(d.converged);
  /* the relative part: eps_rel * max(theta, z_i) */
  p.eps_abs = 0;
  p.eps_rel = 1e-2;
  L = layer(0.09, 0, 0, 0); /* 1e-2 * 10 = 0.1 */
  assert_int_equal(px_admm_decide(&p, &st, 0, 0, 2, 2, &L, 1, &d, &g), PX_OK);
  assert_true(d.converged);
}

/* admm.rho1_ramp: rho1 grows by the factor at every decision before the
 * freeze (rho2 not), the freezing decision takes the ramp back out, and
 * from then on rho1 stays; the ramp stops at rho_max. */
static void test_rho1_ramp_until_the_freeze(void **state) {
  (void)state;
  px_admm_policy_t p = freeze_policy(0, 3);
  p.adaptive_rho = 0;
  p.rho1_ramp = 1.5;
  px_admm_policy_state_t st = {0};
  px_admm_layer_report_t L = layer(1, 1, 1, 1);
  L.rho1 = 0.01;
  px_admm_layer_decision_t d;
  px_admm_decision_t g;
  const double want[] = {0.015, 0.0225, 0.03375};
  for (int it = 0; it < 3; it++) {
    assert_int_equal(px_admm_decide(&p, &st, it, 0, 2, 2, &L, 1, &d, &g), PX_OK);
    assert_false(g.freeze);
    assert_float_equal(d.rho1, want[it], 1e-15);
    assert_float_equal(d.rho2, 0.5, 0);
    L.rho1 = d.rho1;
  }
  assert_int_equal(px_admm_decide(&p, &st, 3, 0, 2, 2, &L, 1, &d, &g), PX_OK);
  assert_true(g.freeze);
  assert_float_equal(d.rho1, 0.01, 1e-15);
  L.rho1 = d.rho1;
  assert_int_equal(px_admm_decide(&p, &st, 4, 0, 2, 2, &L, 1, &d, &g), PX_OK);
  assert_float_equal(d.rho1, 0.01, 0);
  /* clamped at rho_max; out of [1, 10] refused, naming the field */
  px_admm_policy_state_t st2 = {0};
  p.rho_max = 0.02;
  L.rho1 = 0.018;
  assert_int_equal(px_admm_decide(&p, &st2, 1, 0, 2, 2, &L, 1, &d, &g), PX_OK);
  assert_float_equal(d.rho1, 0.02, 0);
  p.rho1_ramp = 0.5;
  assert_int_equal(px_admm_decide(&p, &st2, 2, 0, 2, 2, &L, 1, &d, &g), PX_ERR_INVALID);
  assert_non_null(strstr(px_last_error(), "admm.rho1_ramp"));
}

static void test_bad_input_is_refused(void **state) {
  (void)state;
  px_admm_policy_t p;
  px_admm_policy_defaults(&p);
  px_admm_policy_state_t st = {0};
  px_admm_layer_report_t L = layer(1, 1, 1, 1);
  px_admm_layer_decision_t d;
  px_admm_decision_t g;
  p.tau = 1.0;
  assert_int_equal(px_admm_decide(&p, &st, 0, 0, 2, 2, &L, 1, &d, &g), PX_ERR_INVALID);
  assert_non_null(strstr(px_last_error(), "admm.tau"));
  px_admm_policy_defaults(&p);
  L.s_inter = NAN;
  assert_int_equal(px_admm_decide(&p, &st, 0, 0, 2, 2, &L, 1, &d, &g), PX_ERR_INVALID);
  assert_non_null(strstr(px_last_error(), "layer 0"));
  L = layer(1, 1, 1, 1);
  L.rho2 = 0;
  assert_int_equal(px_admm_decide(&p, &st, 0, 0, 2, 2, &L, 1, &d, &g), PX_ERR_INVALID);
  L = layer(1, 1, 1, 1);
  assert_int_equal(px_admm_decide(&p, &st, 0, -1, 2, 2, &L, 1, &d, &g), PX_ERR_INVALID);
  assert_int_equal(st.stable_iterations, 0); /* a refused call changes nothing */
}

static void test_dual_rescaling_keeps_unscaled_dual(void **state) {
  (void)state;
  float u[4] = {1, -2, 0.5f, 8};
  double rho_old = 0.5, rho_new = 2.0;
  float y_before[4];
  for (int i = 0; i < 4; i++) y_before[i] = (float)(rho_old * u[i]);
  px_admm_rescale_dual(u, 4, rho_old, rho_new);
  for (int i = 0; i < 4; i++) assert_float_equal(rho_new * u[i], y_before[i], 1e-6);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_residual_balancing_moves_rho_towards_balance),
      cmocka_unit_test(test_freeze_after_stable_iterations_is_sticky),
      cmocka_unit_test(test_freeze_at_set_iteration),
      cmocka_unit_test(test_stop_at_max_iterations_and_on_convergence),
      cmocka_unit_test(test_tolerance_scales_with_ranks_and_norms),
      cmocka_unit_test(test_rho1_ramp_until_the_freeze),
      cmocka_unit_test(test_bad_input_is_refused),
      cmocka_unit_test(test_dual_rescaling_keeps_unscaled_dual),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
