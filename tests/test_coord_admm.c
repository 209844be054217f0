/* pxcoordd's H-SADMM controller: ReportIteration stores the metrics, moves
 * SCHEDULED -> RUNNING, and answers the decision of px_admm_decide with the
 * penalties and policy state it keeps per job (residual balancing, freeze
 * after stable drift, stop at max_iterations); a repeated report gets the
 * same decision; bad reports are refused; GetIterations reads it all back. */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>

#include <cmocka.h>

#include "coord_harness.h"
#include "prunex/admm.h"

typedef struct {
  pxt_coordd_t d;
  px_rpc_channel_t *ch;
  char node[64];
} fixture_t;

static int setup(void **state) {
  fixture_t *f = calloc(1, sizeof *f);
  if (!f || pxt_coordd_setup(&f->d, NULL) != 0) {
    free(f);
    return -1;
  }
  if (px_rpc_channel_create(f->d.target, &f->ch) != PX_OK) return -1;
  if (pxt_register(f->ch, "n1", 2, 0, f->node, sizeof f->node) != PX_OK) return -1;
  *state = f;
  return 0;
}

static int teardown(void **state) {
  fixture_t *f = *state;
  px_rpc_channel_destroy(f->ch);
  int rc = pxt_coordd_teardown(&f->d);
  free(f);
  return rc;
}

/* A report of nl layers: primal residuals r, dual s (both levels), the
 * rho the worker believes in force, and the mask drift. */
typedef struct {
  Prunex__V1__IterationReport rep;
  Prunex__V1__LayerMetrics layers[4];
  Prunex__V1__LayerMetrics *lp[4];
  Prunex__V1__PhaseTimes phases;
} report_t;

static void report_init(report_t *r, const char *job, int iteration, int nl, double res,
                        double dual, int64_t drift) {
  r->rep = (Prunex__V1__IterationReport)PRUNEX__V1__ITERATION_REPORT__INIT;
  r->rep.job_id = (char *)job;
  r->rep.iteration = iteration;
  r->rep.loss = 1.5;
  r->rep.train_accuracy = 0.4;
  r->rep.test_accuracy = 0.35;
  r->rep.density = 0.5;
  r->rep.mask_drift = drift;
  r->rep.bytes_intra = 1000;
  r->rep.bytes_inter = 100;
  r->rep.bytes_inter_dense = 400;
  r->rep.epoch = iteration * 0.5;
  r->phases = (Prunex__V1__PhaseTimes)PRUNEX__V1__PHASE_TIMES__INIT;
  r->phases.local_s = 1.25;
  r->phases.inter_s = 0.125;
  r->rep.phases = &r->phases;
  for (int l = 0; l < nl; l++) {
    Prunex__V1__LayerMetrics *L = &r->layers[l];
    *L = (Prunex__V1__LayerMetrics)PRUNEX__V1__LAYER_METRICS__INIT;
    L->layer = l;
    L->name = l == 0 ? "conv1.weight" : "layer1.0.conv1.weight";
    L->r_intra = res;
    L->s_intra = dual;
    L->r_inter = res;
    L->s_inter = dual;
    L->rho1 = 1.0;
    L->rho2 = 1.0;
    L->density = 0.5;
    L->theta_norm = L->zi_norm = L->z_norm = L->u_norm = L->v_norm = 10.0;
    L->numel = 1000;
    r->lp[l] = L;
  }
  r->rep.n_layers = (size_t)nl;
  r->rep.layers = r->lp;
}

static Prunex__V1__ControlDecision *report(px_rpc_channel_t *ch, report_t *r) {
  Prunex__V1__ControlDecision *d = NULL;
  assert_int_equal(px_rpc_report_iteration(ch, &r->rep, 0, &d), PX_OK);
  assert_non_null(d);
  return d;
}

/* Submits a 1 x 2 job with the given admm settings and places it. */
static void start_job(fixture_t *f, pxt_spec_t *s, char *job, size_t cap) {
  assert_int_equal(pxt_submit(f->ch, s, job, cap), PX_OK);
  assert_int_equal(pxt_job_state(f->ch, job), PRUNEX__V1__JOB_STATE__JOB_STATE_SCHEDULED);
}

static void test_first_report_runs_the_job_and_balances_rho(void **state) {
  fixture_t *f = *state;
  pxt_spec_t s;
  pxt_spec_init(&s, 1, 2);
  char job[64];
  start_job(f, &s, job, sizeof job);
  report_t r;
  report_init(&r, job, 0, 2, 100.0, 0.1, 5); /* r >> s: rho grows by tau = 2 */
  r.layers[1].r_intra = 0.1;                  /* layer 1 intra: s >> r: rho shrinks */
  r.layers[1].s_intra = 100.0;
  Prunex__V1__ControlDecision *d = report(f->ch, &r);
  assert_int_equal(d->iteration, 0);
  assert_int_equal(d->n_layers, 2);
  assert_int_equal(d->layers[0]->layer, 0);
  assert_true(d->layers[0]->rho1 == 2.0);
  assert_true(d->layers[0]->rho2 == 2.0);
  assert_true(d->layers[1]->rho1 == 0.5);
  assert_true(d->layers[1]->rho2 == 2.0);
  assert_false(d->freeze);
  assert_false(d->stop);
  assert_false(d->cancelled);
  px_rpc_message_free(d);
  assert_int_equal(pxt_job_state(f->ch, job), PRUNEX__V1__JOB_STATE__JOB_STATE_RUNNING);
  /* The coordinator's penalties are the ones in force next time (the
   * worker's own figure is not trusted): 2 -> 4, 0.5 -> 0.25. */
  report_init(&r, job, 1, 2, 100.0, 0.1, 5);
  r.layers[1].r_intra = 0.1;
  r.layers[1].s_intra = 100.0;
  d = report(f->ch, &r);
  assert_true(d->layers[0]->rho1 == 4.0);
  assert_true(d->layers[1]->rho1 == 0.25);
  px_rpc_message_free(d);
  /* Balanced residuals leave rho alone. */
  report_init(&r, job, 2, 1, 1.0, 1.0, 5);
  d = report(f->ch, &r);
  assert_true(d->layers[0]->rho1 == 4.0);
  px_rpc_message_free(d);
  Prunex__V1__Job *j = NULL;
  assert_int_equal(px_rpc_get_job(f->ch, job, 0, &j), PX_OK);
  assert_int_equal(j->iteration, 2);
  assert_int_equal(j->n_events, 3);
  assert_non_null(strstr(j->events[2]->reason, "first iteration report"));
  assert_int_equal(j->summary->iterations, 3);
  assert_true(j->summary->inter_bytes == 300);
  assert_true(j->summary->inter_bytes_dense == 1200);
  assert_true(j->summary->intra_bytes == 3000);
  assert_true(j->summary->test_accuracy == 0.35);
  px_rpc_message_free(j);
}

static void test_decisions_match_px_admm_decide(void **state) {
  fixture_t *f = *state;
  pxt_spec_t s;
  pxt_spec_init(&s, 1, 2);
  s.admm.mu = 5.0;
  s.admm.tau = 3.0;
  s.admm.rho_max = 7.0;
  s.admm.rho1 = 0.5;
  s.admm.rho2 = 2.0;
  char job[64];
  start_job(f, &s, job, sizeof job);
  px_admm_policy_t pol;
  px_admm_policy_defaults(&pol);
  pol.mu = 5.0;
  pol.tau = 3.0;
  pol.rho_max = 7.0;
  pol.max_iterations = 50;
  pol.freeze_on_stable = 0;
  px_admm_policy_state_t ps = {0, 0};
  double rho1 = 0.5, rho2 = 2.0;
  const double res[][2] = {{60, 1}, {60, 1}, {1, 60}, {3, 2}, {60, 1}};
  for (int it = 0; it < 5; it++) {
    report_t r;
    report_init(&r, job, it, 1, res[it][0], res[it][1], it);
    r.layers[0].rho1 = 0; /* the worker leaves it to the spec */
    r.layers[0].rho2 = 0;
    Prunex__V1__ControlDecision *d = report(f->ch, &r);
    px_admm_layer_report_t L = {
        .r_intra = res[it][0], .s_intra = res[it][1], .r_inter = res[it][0],
        .s_inter = res[it][1], .rho1 = rho1, .rho2 = rho2, .theta_norm = 10, .zi_norm = 10,
        .z_norm = 10, .u_norm = 10, .v_norm = 10, .numel = 1000};
    px_admm_layer_decision_t ld;
    px_admm_decision_t gd;
    assert_int_equal(px_admm_decide(&pol, &ps, it, it, 1, 2, &L, 1, &ld, &gd), PX_OK);
    assert_true(d->layers[0]->rho1 == ld.rho1);
    assert_true(d->layers[0]->rho2 == ld.rho2);
    assert_int_equal(d->freeze, gd.freeze);
    assert_int_equal(d->stop, gd.stop);
    rho1 = ld.rho1;
    rho2 = ld.rho2;
    px_rpc_message_free(d);
  }
  assert_true(rho2 == 7.0); /* clamped at rho_max */
}

static void test_masks_freeze_after_stable_drift(void **state) {
  fixture_t *f = *state;
  pxt_spec_t s;
  pxt_spec_init(&s, 1, 2);
  s.admm.freeze_on_stable = 3;
  char job[64];
  start_job(f, &s, job, sizeof job);
  const int64_t drift[] = {12, 0, 0, 0, 4, 0};
  const int frozen[] = {0, 0, 0, 1, 1, 1}; /* once frozen, stays frozen */
  for (int it = 0; it < 6; it++) {
    report_t r;
    report_init(&r, job, it, 1, 1.0, 1.0, drift[it]);
    Prunex__V1__ControlDecision *d = report(f->ch, &r);
    assert_int_equal(d->freeze, frozen[it]);
    px_rpc_message_free(d);
  }
}

/* Every rank of job reports a clean exit. */
static void exit_ranks(fixture_t *f, const char *job, int n) {
  Prunex__V1__RankExit ex = PRUNEX__V1__RANK_EXIT__INIT;
  ex.job_id = (char *)job;
  for (int rank = 0; rank < n; rank++) {
    ex.rank = rank;
    assert_int_equal(px_rpc_report_rank_exit(f->ch, &ex, 0), PX_OK);
  }
}

static void job_reason(px_rpc_channel_t *ch, const char *job, char *buf, size_t cap) {
  Prunex__V1__Job *j = NULL;
  assert_int_equal(px_rpc_get_job(ch, job, 0, &j), PX_OK);
  snprintf(buf, cap, "%s", j->reason);
  px_rpc_message_free(j);
}

static void test_a_converged_job_says_so_when_it_ends(void **state) {
  fixture_t *f = *state;
  pxt_spec_t s;
  pxt_spec_init(&s, 1, 2);
  s.admm.stop_on_converged = 1;
  char job[64];
  start_job(f, &s, job, sizeof job);
  report_t r;
  report_init(&r, job, 0, 2, 1e-12, 1e-12, 0);
  Prunex__V1__ControlDecision *d = report(f->ch, &r);
  if (!d->stop) fprintf(stderr, "no stop: reason '%s'\n", d->stop_reason);
  assert_true(d->stop);
  assert_string_equal(d->stop_reason, "converged");
  px_rpc_message_free(d);
  exit_ranks(f, job, 2);
  assert_int_equal(pxt_job_state(f->ch, job), PRUNEX__V1__JOB_STATE__JOB_STATE_SUCCEEDED);
  char reason[512];
  job_reason(f->ch, job, reason, sizeof reason);
  assert_string_equal(reason, "the controller stopped it at iteration 0: the residuals converged "
                              "(admm.stop_on_converged); all 2 ranks exited with code 0");
}

/* By default converged residuals freeze the masks and are reported: the job
 * trains its whole budget and says at its end when they converged. */
static void test_converged_residuals_freeze_and_the_budget_runs_on(void **state) {
  fixture_t *f = *state;
  pxt_spec_t s;
  pxt_spec_init(&s, 1, 2);
  s.admm.max_iterations = 4;
  s.admm.freeze_on_stable = 0;
  char job[64];
  start_job(f, &s, job, sizeof job);
  const double r_[] = {1.0, 1e-12, 1.0, 1e-12};
  for (int it = 0; it < 4; it++) {
    report_t r;
    report_init(&r, job, it, 2, r_[it], r_[it], 3);
    Prunex__V1__ControlDecision *d = report(f->ch, &r);
    assert_int_equal(d->converged, r_[it] < 1e-6);
    assert_int_equal(d->freeze, it >= 1); /* the first convergence froze the masks */
    assert_int_equal(d->converged_at, it >= 1 ? 2 : 0);
    assert_int_equal(d->stop, it == 3);
    px_rpc_message_free(d);
  }
  exit_ranks(f, job, 2);
  char reason[512];
  job_reason(f->ch, job, reason, sizeof reason);
  assert_string_equal(reason, "it trained its whole budget (4 iterations); the residuals "
                              "converged at iteration 1; all 2 ranks exited with code 0");
}

static void test_stop_at_max_iterations_and_defaults(void **state) {
  fixture_t *f = *state;
  pxt_spec_t s;
  pxt_spec_init(&s, 1, 2);
  s.admm.max_iterations = 3;
  char job[64];
  start_job(f, &s, job, sizeof job);
  for (int it = 0; it < 3; it++) {
    report_t r;
    report_init(&r, job, it, 1, 1.0, 1.0, 1);
    Prunex__V1__ControlDecision *d = report(f->ch, &r);
    assert_int_equal(d->stop, it == 2);
    if (it == 2) assert_string_equal(d->stop_reason, "max_iterations");
    px_rpc_message_free(d);
  }
  /* No admm section at all: px_admm_policy_defaults (adaptive, tau 2). */
  char job2[64];
  exit_ranks(f, job, 2);
  /* the job's reason says why it ended */
  char reason[512];
  job_reason(f->ch, job, reason, sizeof reason);
  if (!strstr(reason, "it trained its whole budget (3 iterations)")) fprintf(stderr, "%s\n", reason);
  assert_non_null(strstr(reason, "it trained its whole budget (3 iterations)"));
  assert_non_null(strstr(reason, "all 2 ranks exited with code 0"));
  pxt_spec_init(&s, 1, 2);
  s.spec.admm = NULL;
  start_job(f, &s, job2, sizeof job2);
  report_t r;
  report_init(&r, job2, 0, 1, 100.0, 1.0, 0);
  Prunex__V1__ControlDecision *d = report(f->ch, &r);
  assert_true(d->layers[0]->rho1 == 2.0);
  assert_false(d->freeze);
  px_rpc_message_free(d);
}

static void test_repeated_report_gets_the_same_decision(void **state) {
  fixture_t *f = *state;
  pxt_spec_t s;
  pxt_spec_init(&s, 1, 2);
  char job[64];
  start_job(f, &s, job, sizeof job);
  report_t r;
  report_init(&r, job, 0, 1, 100.0, 1.0, 0);
  Prunex__V1__ControlDecision *d1 = report(f->ch, &r);
  report_init(&r, job, 0, 1, 1.0, 100.0, 0); /* a retry, figures changed */
  Prunex__V1__ControlDecision *d2 = report(f->ch, &r);
  assert_true(d1->layers[0]->rho1 == 2.0);
  assert_true(d2->layers[0]->rho1 == 2.0);
  px_rpc_message_free(d1);
  px_rpc_message_free(d2);
  /* ... and the penalty was not doubled twice. */
  report_init(&r, job, 1, 1, 100.0, 1.0, 0);
  d1 = report(f->ch, &r);
  assert_true(d1->layers[0]->rho1 == 4.0);
  px_rpc_message_free(d1);
}

static void test_bad_reports_are_refused(void **state) {
  fixture_t *f = *state;
  pxt_spec_t s;
  pxt_spec_init(&s, 1, 2);
  char job[64], pending[64];
  start_job(f, &s, job, sizeof job);
  assert_int_equal(pxt_submit(f->ch, &s, pending, sizeof pending), PX_OK);
  report_t r;
  Prunex__V1__ControlDecision *d = NULL;
  report_init(&r, job, 0, 2, 1.0, 1.0, 0);
  r.layers[1].s_inter = -1.0;
  assert_int_equal(px_rpc_report_iteration(f->ch, &r.rep, 0, &d), PX_ERR_INVALID);
  assert_int_equal(px_rpc_last_code(), PX_RPC_INVALID_ARGUMENT);
  assert_non_null(strstr(px_last_error(), "layer 1"));
  report_init(&r, job, 0, 1, 1.0, 1.0, 0);
  r.layers[0].numel = 0;
  assert_int_equal(px_rpc_report_iteration(f->ch, &r.rep, 0, &d), PX_ERR_INVALID);
  report_init(&r, job, 0, 2, 1.0, 1.0, 0);
  r.layers[1].layer = 0;
  assert_int_equal(px_rpc_report_iteration(f->ch, &r.rep, 0, &d), PX_ERR_INVALID);
  assert_non_null(strstr(px_last_error(), "twice"));
  report_init(&r, job, -1, 1, 1.0, 1.0, 0);
  assert_int_equal(px_rpc_report_iteration(f->ch, &r.rep, 0, &d), PX_ERR_INVALID);
  report_init(&r, job, 0, 1, 1.0, 1.0, -3);
  assert_int_equal(px_rpc_report_iteration(f->ch, &r.rep, 0, &d), PX_ERR_INVALID);
  report_init(&r, pending, 0, 1, 1.0, 1.0, 0);
  assert_int_equal(px_rpc_report_iteration(f->ch, &r.rep, 0, &d), PX_ERR_STATE);
  assert_int_equal(px_rpc_last_code(), PX_RPC_FAILED_PRECONDITION);
  report_init(&r, "job-123456", 0, 1, 1.0, 1.0, 0);
  assert_int_equal(px_rpc_report_iteration(f->ch, &r.rep, 0, &d), PX_ERR_INVALID);
  assert_int_equal(px_rpc_last_code(), PX_RPC_NOT_FOUND);
  assert_null(d);
  /* Nothing of the refused reports was kept; the job did not start. */
  assert_int_equal(pxt_job_state(f->ch, job), PRUNEX__V1__JOB_STATE__JOB_STATE_SCHEDULED);
  Prunex__V1__GetIterationsRequest q = PRUNEX__V1__GET_ITERATIONS_REQUEST__INIT;
  q.job_id = job;
  Prunex__V1__GetIterationsResponse *g = NULL;
  assert_int_equal(px_rpc_get_iterations(f->ch, &q, 0, &g), PX_OK);
  assert_int_equal(g->n_iterations, 0);
  px_rpc_message_free(g);
}

static void test_get_iterations_reads_metrics_back(void **state) {
  fixture_t *f = *state;
  pxt_spec_t s;
  pxt_spec_init(&s, 1, 2);
  char job[64];
  start_job(f, &s, job, sizeof job);
  for (int it = 0; it < 5; it++) {
    report_t r;
    report_init(&r, job, it, 2, 2.0 + it, 1.0, 10 - it);
    r.rep.time_unix_ms = 1700000000000LL + it;
    Prunex__V1__ControlDecision *d = report(f->ch, &r);
    px_rpc_message_free(d);
  }
  Prunex__V1__GetIterationsRequest q = PRUNEX__V1__GET_ITERATIONS_REQUEST__INIT;
  q.job_id = job;
  q.from_iteration = 1;
  q.limit = 3;
  Prunex__V1__GetIterationsResponse *g = NULL;
  assert_int_equal(px_rpc_get_iterations(f->ch, &q, 0, &g), PX_OK);
  assert_int_equal(g->n_iterations, 3);
  for (int i = 0; i < 3; i++) {
    Prunex__V1__IterationReport *it = g->iterations[i];
    assert_string_equal(it->job_id, job);
    assert_int_equal(it->iteration, i + 1);
    assert_int_equal(it->mask_drift, 10 - (i + 1));
    assert_true(it->loss == 1.5);
    assert_true(it->test_accuracy == 0.35);
    assert_true(it->bytes_inter_dense == 400);
    assert_true(it->epoch == (i + 1) * 0.5);
    assert_true(it->time_unix_ms == 1700000000000LL + i + 1);
    assert_non_null(it->phases);
    assert_true(it->phases->local_s == 1.25);
    assert_true(it->phases->inter_s == 0.125);
    assert_int_equal(it->n_layers, 0); /* not asked for */
  }
  px_rpc_message_free(g);
  q.include_layers = 1;
  q.limit = 0;
  q.from_iteration = 4;
  assert_int_equal(px_rpc_get_iterations(f->ch, &q, 0, &g), PX_OK);
  assert_int_equal(g->n_iterations, 1);
  Prunex__V1__IterationReport *it = g->iterations[0];
  assert_int_equal(it->n_layers, 2);
  assert_string_equal(it->layers[0]->name, "conv1.weight");
  assert_true(it->layers[1]->r_intra == 6.0);
  assert_int_equal(it->layers[1]->numel, 1000);
  assert_true(it->layers[0]->v_norm == 10.0);
  px_rpc_message_free(g);
  q.job_id = "job-000404";
  assert_int_equal(px_rpc_get_iterations(f->ch, &q, 0, &g), PX_ERR_INVALID);
  assert_int_equal(px_rpc_last_code(), PX_RPC_NOT_FOUND);
  q.job_id = job;
  q.limit = -1;
  assert_int_equal(px_rpc_get_iterations(f->ch, &q, 0, &g), PX_ERR_INVALID);
  assert_int_equal(px_rpc_last_code(), PX_RPC_INVALID_ARGUMENT);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test_setup_teardown(test_first_report_runs_the_job_and_balances_rho, setup,
                                      teardown),
      cmocka_unit_test_setup_teardown(test_decisions_match_px_admm_decide, setup, teardown),
      cmocka_unit_test_setup_teardown(test_converged_residuals_freeze_and_the_budget_runs_on, setup,
                                      teardown),
      cmocka_unit_test_setup_teardown(test_masks_freeze_after_stable_drift, setup, teardown),
      cmocka_unit_test_setup_teardown(test_stop_at_max_iterations_and_defaults, setup, teardown),
      cmocka_unit_test_setup_teardown(test_a_converged_job_says_so_when_it_ends, setup, teardown),
      cmocka_unit_test_setup_teardown(test_repeated_report_gets_the_same_decision, setup,
                                      teardown),
      cmocka_unit_test_setup_teardown(test_bad_reports_are_refused, setup, teardown),
      cmocka_unit_test_setup_teardown(test_get_iterations_reads_metrics_back, setup, teardown),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
