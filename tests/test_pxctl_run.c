/* `pxctl run`, the embedded mode, with the real programs: a tiny job (2
 * nodes x 2 CPU workers, resnet20 on the synthetic data set, 2 outer
 * iterations of 2 local steps) runs to SUCCEEDED and the last line of
 * --json output carries the figures; Ctrl-C (SIGINT) in the middle of a
 * long job cancels it and leaves no process and no directory behind;
 * missing programs are named; a job with a MAC budget gets the compact
 * model the hand count says, and one whose budget is too small fails
 * naming it. The tests that need pxagent and pxworker
 * skip, saying so, when those are not built. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include "pxctl_harness.h"

typedef struct {
  char dir[256];
  char runs[320];   /* --work-dir of pxctl run */
  char spec[320];
  char out_path[320], err_path[320];
  pxt_result_t r;
} fixture_t;

static int setup(void **state) {
  fixture_t *f = calloc(1, sizeof *f);
  if (!f || pxt_mkdtemp(f->dir, sizeof f->dir) != 0) {
    free(f);
    return -1;
  }
  snprintf(f->runs, sizeof f->runs, "%s/runs", f->dir);
  snprintf(f->spec, sizeof f->spec, "%s/tiny.yaml", f->dir);
  snprintf(f->out_path, sizeof f->out_path, "%s/stdout.txt", f->dir);
  snprintf(f->err_path, sizeof f->err_path, "%s/stderr.txt", f->dir);
  if (mkdir(f->runs, 0755) != 0) return -1;
  *state = f;
  return 0;
}

static int teardown(void **state) {
  fixture_t *f = *state;
  pxt_rmtree(f->dir);
  free(f);
  return 0;
}

static int have_agent(void) {
  if (access(PXT_PXAGENT, X_OK) == 0 && access(PXT_PXWORKER, X_OK) == 0) return 1;
  fprintf(stderr, "SKIP: %s or %s is not built yet\n", PXT_PXAGENT, PXT_PXWORKER);
  return 0;
}

static void write_spec_for(const fixture_t *f, int iterations, int local_steps,
                           const char *strategy) {
  FILE *fp = fopen(f->spec, "w");
  assert_non_null(fp);
  fprintf(fp, "strategy: %s\n", strategy);
  fprintf(fp,
          "name: tiny\n"
          "model:\n"
          "  name: resnet20\n"
          "dataset:\n"
          "  name: synthetic\n"
          "  augment: false\n"
          "cluster:\n"
          "  nodes: 2\n"
          "  workers_per_node: 2\n"
          "  device: cpu\n"
          "train:\n"
          "  batch_size: 8\n"
          "  local_steps: %d\n"
          "  lr: 0.05\n"
          "prune:\n"
          "  filter_keep: 0.5\n"
          "admm:\n"
          "  max_iterations: %d\n",
          local_steps, iterations);
  fclose(fp);
}

static void write_spec(const fixture_t *f, int iterations, int local_steps) {
  write_spec_for(f, iterations, local_steps, "hsadmm");
}

/* A pid that is gone, or a zombie nobody has reaped yet. */
static int proc_gone(pid_t pid) {
  char path[64], buf[512];
  snprintf(path, sizeof path, "/proc/%d/stat", (int)pid);
  FILE *fp = fopen(path, "r");
  if (!fp) return 1;
  size_t n = fread(buf, 1, sizeof buf - 1, fp);
  fclose(fp);
  buf[n] = '\0';
  char *rp = strrchr(buf, ')');
  return rp && rp[1] == ' ' && rp[2] == 'Z';
}

static void test_run_of_a_tiny_job_succeeds_and_reports_json(void **state) {
  fixture_t *f = *state;
  if (!have_agent()) skip();
  write_spec(f, 2, 2);
  char out[320];
  snprintf(out, sizeof out, "%s/model-out", f->dir);
  const char *args[] = {"run", f->spec, "--json", "--work-dir", f->runs, "--output", out, NULL};
  int code = pxt_pxctl(&f->r, f->dir, args, NULL, 240000);
  if (code != 0) pxt_show("pxctl run", &f->r);
  assert_int_equal(code, 0);
  char line[8192];
  pxj_t *v = pxj_parse(pxt_last_line(f->r.out, line, sizeof line));
  if (!v) pxt_show("last line is not JSON", &f->r);
  assert_non_null(v);
  static const char *const keys[] = {"job_id",      "state",        "test_accuracy",
                                     "density",     "inter_bytes",  "inter_bytes_dense",
                                     "wall_s",      "iterations",   "model_path",
                                     "inter_reduction", "summary_source", NULL};
  assert_true(pxj_has_keys(v, keys));
  assert_string_equal(pxj_str(v, "state"), "SUCCEEDED");
  assert_true(strncmp(pxj_str(v, "job_id"), "job-", 4) == 0);
  assert_true(pxj_num(v, "iterations") == 2.0);
  double acc = pxj_num(v, "test_accuracy"), density = pxj_num(v, "density");
  assert_true(acc >= 0.0 && acc <= 1.0);
  assert_true(density > 0.0 && density <= 1.0);
  double inter = pxj_num(v, "inter_bytes"), dense = pxj_num(v, "inter_bytes_dense");
  assert_true(inter > 0.0);
  assert_true(dense >= inter);
  assert_true(pxj_num(v, "wall_s") > 0.0);
  assert_string_equal(pxj_str(v, "summary_source"), "coordinator");
  /* The model went to --output and is still there; the run directory is gone. */
  const char *model = pxj_str(v, "model_path");
  assert_true(strncmp(model, out, strlen(out)) == 0);
  assert_true(pxt_exists(model));
  /* ... with its compact twin beside it, and both sizes in the summary */
  static const char *const sizes[] = {"dense_params", "compact_params", "dense_bytes",
                                      "compact_bytes", "compact_path", NULL};
  assert_true(pxj_has_keys(v, sizes));
  assert_true(pxj_num(v, "compact_params") > 0.0);
  assert_true(pxj_num(v, "compact_params") <= pxj_num(v, "dense_params"));
  assert_true(pxj_num(v, "compact_bytes") > 0.0);
  assert_true(pxt_exists(pxj_str(v, "compact_path")));
  /* multiply-accumulates per image, by hand for resnet20 on 3 x 32 x 32:
   * conv1 16*3*9*1024; six 16->16 convs at 32x32, 6*16*16*9*1024; at 16x16
   * 32*16*9*256 + five 32*32*9*256 + the 1x1 shortcut 32*16*256; at 8x8
   * 64*32*9*64 + five 64*64*9*64 + 64*32*64; the classifier 64*10 */
  double dense_macs = 16.0 * 3 * 9 * 1024 + 6.0 * 16 * 16 * 9 * 1024 + 32.0 * 16 * 9 * 256 +
                      5.0 * 32 * 32 * 9 * 256 + 32.0 * 16 * 256 + 64.0 * 32 * 9 * 64 +
                      5.0 * 64 * 64 * 9 * 64 + 64.0 * 32 * 64 + 64.0 * 10;
  assert_true(pxj_num(v, "dense_macs") == dense_macs);
  /* filter_keep 0.5: the filters a block's first conv loses, and with
   * them the second conv's inputs (test_model_macs counts compact models) */
  assert_true(pxj_num(v, "compact_macs") > 0.0);
  assert_true(pxj_num(v, "compact_macs") < dense_macs);
  assert_int_equal(pxj_get(v, "run_dir")->type, PXJ_NULL);
  assert_int_equal(pxt_dir_entries(f->runs), 0);
  pxj_free(v);
  /* Progress went to stderr. */
  assert_non_null(strstr(f->r.err, "SUCCEEDED"));
  pid_t left[16];
  assert_int_equal(pxt_procs_mentioning(f->runs, left, 16), 0);
}

/* The baselines and the flat ablation run through the same embedded mode;
 * ddp moves exactly the dense bytes, topk far fewer. */
static void test_every_other_strategy_runs_through_pxctl_run(void **state) {
  fixture_t *f = *state;
  if (!have_agent()) skip();
  static const char *const strategies[] = {"hsadmm-flat", "ddp", "topk"};
  for (size_t k = 0; k < sizeof strategies / sizeof strategies[0]; k++) {
    write_spec_for(f, 2, 2, strategies[k]);
    const char *args[] = {"run", f->spec, "--json", "--work-dir", f->runs, NULL};
    int code = pxt_pxctl(&f->r, f->dir, args, NULL, 240000);
    if (code != 0) pxt_show(strategies[k], &f->r);
    assert_int_equal(code, 0);
    char line[8192];
    pxj_t *v = pxj_parse(pxt_last_line(f->r.out, line, sizeof line));
    assert_non_null(v);
    assert_string_equal(pxj_str(v, "state"), "SUCCEEDED");
    assert_true(pxj_num(v, "iterations") == 2.0);
    double inter = pxj_num(v, "inter_bytes"), dense = pxj_num(v, "inter_bytes_dense");
    printf("%s: inter %.0f bytes, dense %.0f\n", strategies[k], inter, dense);
    assert_true(inter > 0.0);
    if (!strcmp(strategies[k], "ddp")) assert_true(inter == dense);
    if (!strcmp(strategies[k], "topk")) assert_true(inter < 0.5 * dense);
    pxj_free(v);
    pid_t left[16];
    assert_int_equal(pxt_procs_mentioning(f->runs, left, 16), 0);
  }
}

/* Runs an hsadmm job whose residuals converge at once (the tolerances are
 * huge), stop_on_converged and the prune section as given; answers pxctl
 * run's JSON summary of a job that SUCCEEDED (the caller frees it). */
static pxj_t *run_converging_job(fixture_t *f, int stop_on_converged, const char *prune) {
  FILE *fp = fopen(f->spec, "w");
  assert_non_null(fp);
  fprintf(fp,
          "strategy: hsadmm\nname: converging\nmodel:\n  name: resnet20\n"
          "dataset:\n  name: synthetic\n  augment: false\n"
          "cluster:\n  nodes: 2\n  workers_per_node: 1\n  device: cpu\n"
          "train:\n  batch_size: 8\n  local_steps: 1\n  lr: 0.05\n  eval_every: 50\n"
          "prune:\n%s"
          "admm:\n  max_iterations: 5\n  eps_abs: 1e9\n  eps_rel: 1e9\n"
          "  stop_on_converged: %s\n",
          prune, stop_on_converged ? "true" : "false");
  fclose(fp);
  const char *args[] = {"run", f->spec, "--json", "--work-dir", f->runs, NULL};
  int code = pxt_pxctl(&f->r, f->dir, args, NULL, 240000);
  if (code != 0) pxt_show("pxctl run", &f->r);
  assert_int_equal(code, 0);
  char line[8192];
  pxj_t *v = pxj_parse(pxt_last_line(f->r.out, line, sizeof line));
  assert_non_null(v);
  assert_string_equal(pxj_str(v, "state"), "SUCCEEDED");
  printf("stop_on_converged %d: %s\n", stop_on_converged, pxj_str(v, "reason"));
  return v;
}

/* With admm.stop_on_converged the controller stops the job before any
 * iteration due for a test: the strategy tests the final model after the
 * loop, and the summary shows that accuracy, not "not evaluated". */
static void test_early_stop_still_reports_the_final_accuracy(void **state) {
  fixture_t *f = *state;
  if (!have_agent()) skip();
  pxj_t *v = run_converging_job(f, 1, "  channel_keep: 0.5\n");
  double iters = pxj_num(v, "iterations"), acc = pxj_num(v, "test_accuracy");
  assert_true(iters >= 1.0 && iters < 5.0);
  assert_true(acc >= 0.0 && acc <= 1.0);
  assert_non_null(strstr(pxj_str(v, "reason"), "the residuals converged (admm.stop_on_converged)"));
  pxj_free(v);
}

/* Without it (the default) the residuals converge as early, freeze the
 * masks and are reported, and the job trains its whole budget. */
static void test_the_whole_budget_runs_by_default(void **state) {
  fixture_t *f = *state;
  if (!have_agent()) skip();
  /* with a budget of half the MACs instead of a channel keep: 8, 15 and 30
   * of each stage's 16, 32 and 64 inner channels (test_mac_budget), the
   * stream readers' inputs kept (a budget's default); the stem, the two shortcuts and the
   * classifier as in the hand count of the tiny job above */
  pxj_t *v = run_converging_job(f, 0, "  mac_keep: 0.5\n");
  assert_true(pxj_num(v, "iterations") == 5.0);
  assert_non_null(strstr(pxj_str(v, "reason"), "it trained its whole budget (5 iterations); the "
                                               "residuals converged at iteration 0"));
  double inner = 8.0 * 3 * 2 * 16 * 9 * 1024 + 15.0 * (16 * 9 * 256 + 32 * 9 * 256 + 4 * 32 * 9 * 256) +
                 30.0 * (32 * 9 * 64 + 64 * 9 * 64 + 4 * 64 * 9 * 64);
  double fixed = 16.0 * 3 * 9 * 1024 + 32.0 * 16 * 256 + 64.0 * 32 * 64 + 64.0 * 10;
  printf("compact MACs %.0f of %.0f\n", pxj_num(v, "compact_macs"), pxj_num(v, "dense_macs"));
  assert_true(pxj_num(v, "compact_macs") == inner + fixed);
  assert_true(pxj_num(v, "compact_macs") <= 0.5 * pxj_num(v, "dense_macs"));
  pxj_free(v);
  /* the summary for people says the budget beside the count */
  const char *args[] = {"run", f->spec, "--work-dir", f->runs, NULL};
  int code = pxt_pxctl(&f->r, f->dir, args, NULL, 240000);
  if (code != 0) pxt_show("pxctl run", &f->r);
  assert_int_equal(code, 0);
  assert_non_null(strstr(f->r.out, "multiply-adds       40.81 M per image dense; 19.95 M (48.9%) "
                                   "compact; the budget: 50% (prune.mac_keep)\n"));
}

/* A budget below what the unpruned layers compute fails the job as it
 * starts, the reason naming the field and both figures. */
static void test_a_mac_budget_too_small_fails_naming_both_figures(void **state) {
  fixture_t *f = *state;
  if (!have_agent()) skip();
  FILE *fp = fopen(f->spec, "w");
  assert_non_null(fp);
  fprintf(fp, "strategy: hsadmm\nname: budget\nmodel:\n  name: resnet20\n"
              "dataset:\n  name: synthetic\n  augment: false\n"
              "cluster:\n  nodes: 2\n  workers_per_node: 1\n  device: cpu\n"
              "train:\n  batch_size: 8\n  local_steps: 1\n"
              "prune:\n  mac_keep: 0.01\nadmm:\n  max_iterations: 3\n");
  fclose(fp);
  const char *args[] = {"run", f->spec, "--json", "--work-dir", f->runs, NULL};
  assert_int_not_equal(pxt_pxctl(&f->r, f->dir, args, NULL, 240000), 0);
  char line[8192];
  pxj_t *v = pxj_parse(pxt_last_line(f->r.out, line, sizeof line));
  assert_non_null(v);
  assert_string_equal(pxj_str(v, "state"), "FAILED");
  const char *reason = pxj_str(v, "reason");
  printf("%.300s\n", reason);
  assert_non_null(strstr(reason, "prune.mac_keep: 0.01 of the model's 40813184 "
                                 "multiply-accumulates per image is less than the 2198144 (5.4%)"));
  pxj_free(v);
  pid_t left[16];
  assert_int_equal(pxt_procs_mentioning(f->runs, left, 16), 0);
}

/* Starts a long job with pxctl run and waits until it is RUNNING; returns
 * the pid of pxctl (the test fails if it never gets there). */
static pid_t start_long_run(fixture_t *f) {
  write_spec(f, 100000, 1);
  const char *args[] = {"run", f->spec, "--json", "--work-dir", f->runs, NULL};
  pid_t pid = pxt_pxctl_start(args, NULL, f->out_path, f->err_path);
  assert_true(pid > 0);
  static char err[1 << 16];
  int64_t end = pxt_now_ms() + 180000;
  while (pxt_now_ms() < end && pxt_wait_pid(pid, 1) == -1) {
    pxt_read_file(f->err_path, err, sizeof err);
    if (strstr(err, "RUNNING")) return pid;
    pxt_sleep_ms(100);
  }
  pxt_read_file(f->err_path, err, sizeof err);
  fprintf(stderr, "pxctl run never showed RUNNING:\n%s\n", err);
  kill(pid, SIGKILL);
  pxt_wait_pid(pid, 10000);
  fail();
  return -1;
}

static void test_sigint_cancels_the_job_and_leaves_nothing_behind(void **state) {
  fixture_t *f = *state;
  if (!have_agent()) skip();
  pid_t pid = start_long_run(f);
  char err[1 << 16];
  pid_t kids[64];
  int nkids = pxt_procs_mentioning(f->runs, kids, 64);
  /* pxcoordd, 2 pxagents and 4 pxworkers mention the run directory. */
  assert_true(nkids >= 7);

  assert_int_equal(kill(pid, SIGINT), 0);
  int status = pxt_wait_pid(pid, 90000);
  if (status == -1) {
    kill(pid, SIGKILL);
    pxt_wait_pid(pid, 10000);
  }
  char out[1 << 16], line[8192];
  pxt_read_file(f->out_path, out, sizeof out);
  pxt_read_file(f->err_path, err, sizeof err);
  if (status == -1 || !WIFEXITED(status) || WEXITSTATUS(status) != 130)
    fprintf(stderr, "wait status %d\n---- stdout\n%s\n---- stderr\n%s\n", status, out, err);
  assert_true(status != -1);
  assert_true(WIFEXITED(status));
  assert_int_equal(WEXITSTATUS(status), 130);

  for (int i = 0; i < nkids; i++) {
    if (!proc_gone(kids[i])) fprintf(stderr, "process %d is still there\n", (int)kids[i]);
    assert_true(proc_gone(kids[i]));
  }
  pid_t left[16];
  assert_int_equal(pxt_procs_mentioning(f->runs, left, 16), 0);
  assert_int_equal(pxt_dir_entries(f->runs), 0);

  pxj_t *v = pxj_parse(pxt_last_line(out, line, sizeof line));
  assert_non_null(v);
  assert_string_equal(pxj_str(v, "state"), "CANCELLED");
  assert_true(pxj_get(v, "interrupted")->b);
  pxj_free(v);
  assert_non_null(strstr(err, "SIGINT"));
}

static void test_an_agent_that_dies_fails_the_run_and_the_rest_is_cleaned_up(void **state) {
  fixture_t *f = *state;
  if (!have_agent()) skip();
  pid_t pid = start_long_run(f);
  pid_t kids[64], agent = -1;
  int nkids = pxt_procs_mentioning(f->runs, kids, 64);
  for (int i = 0; i < nkids; i++) {
    char path[64], buf[4096];
    snprintf(path, sizeof path, "/proc/%d/cmdline", (int)kids[i]);
    FILE *fp = fopen(path, "rb");
    if (!fp) continue;
    size_t n = fread(buf, 1, sizeof buf - 1, fp);
    fclose(fp);
    buf[n] = '\0';
    /* argv[0] ends in pxagent and some argument is node-1 */
    if (!strstr(buf, "pxagent")) continue;
    for (size_t k = 0; k + 6 <= n; k++)
      if (!memcmp(buf + k, "node-1", 7)) agent = kids[i];
  }
  assert_true(agent > 0);
  assert_int_equal(kill(agent, SIGKILL), 0);
  int status = pxt_wait_pid(pid, 90000);
  if (status == -1) {
    kill(pid, SIGINT);
    pxt_wait_pid(pid, 60000);
  }
  char out[1 << 16], err[1 << 16], line[8192];
  pxt_read_file(f->out_path, out, sizeof out);
  pxt_read_file(f->err_path, err, sizeof err);
  if (status == -1 || !WIFEXITED(status) || WEXITSTATUS(status) != 1)
    fprintf(stderr, "wait status %d\n---- stdout\n%s\n---- stderr\n%s\n", status, out, err);
  assert_true(status != -1 && WIFEXITED(status));
  assert_int_equal(WEXITSTATUS(status), 1);
  assert_non_null(strstr(err, "pxagent node-1 was killed by signal 9"));
  for (int i = 0; i < nkids; i++) assert_true(proc_gone(kids[i]));
  pid_t left[16];
  assert_int_equal(pxt_procs_mentioning(f->runs, left, 16), 0);
  assert_int_equal(pxt_dir_entries(f->runs), 0);
  pxj_t *v = pxj_parse(pxt_last_line(out, line, sizeof line));
  assert_non_null(v);
  assert_true(strcmp(pxj_str(v, "state"), "SUCCEEDED") != 0);
  assert_non_null(strstr(pxj_str(v, "error"), "pxagent node-1"));
  pxj_free(v);
}

static void test_missing_programs_are_named(void **state) {
  fixture_t *f = *state;
  write_spec(f, 2, 2);
  const char *env[] = {"PRUNEX_BIN_DIR=/nonexistent/prunex-bin", NULL};
  const char *args[] = {"run", f->spec, "--work-dir", f->runs, "--json", NULL};
  assert_int_equal(pxt_pxctl(&f->r, f->dir, args, env, 60000), 1);
  assert_non_null(strstr(f->r.err, "cannot find pxcoordd"));
  assert_non_null(strstr(f->r.err, "/nonexistent/prunex-bin"));
  assert_int_equal(pxt_dir_entries(f->runs), 0);
  /* --json still ends with the result object, saying what went wrong. */
  char line[8192];
  pxj_t *v = pxj_parse(pxt_last_line(f->r.out, line, sizeof line));
  assert_non_null(v);
  assert_string_equal(pxj_str(v, "state"), "ERROR");
  assert_non_null(strstr(pxj_str(v, "error"), "cannot find pxcoordd"));
  assert_int_equal(pxj_get(v, "job_id")->type, PXJ_NULL);
  pxj_free(v);
}

static void test_run_refuses_more_nodes_than_one_machine_should_start(void **state) {
  fixture_t *f = *state;
  FILE *fp = fopen(f->spec, "w");
  assert_non_null(fp);
  fputs("name: huge\ncluster:\n  nodes: 300\n  workers_per_node: 1\n", fp);
  fclose(fp);
  const char *args[] = {"run", f->spec, "--work-dir", f->runs, NULL};
  assert_int_equal(pxt_pxctl(&f->r, f->dir, args, NULL, 60000), 2);
  assert_non_null(strstr(f->r.err, "cluster.nodes = 300"));
  assert_int_equal(pxt_dir_entries(f->runs), 0);
}

int main(void) {
  if (access(PXT_PXCTL, X_OK) != 0) {
    fprintf(stderr, "pxctl is not built (%s)\n", PXT_PXCTL);
    return 1;
  }
  const struct CMUnitTest tests[] = {
      cmocka_unit_test_setup_teardown(test_missing_programs_are_named, setup, teardown),
      cmocka_unit_test_setup_teardown(test_run_refuses_more_nodes_than_one_machine_should_start,
                                      setup, teardown),
      cmocka_unit_test_setup_teardown(test_every_other_strategy_runs_through_pxctl_run, setup,
                                      teardown),
      cmocka_unit_test_setup_teardown(test_the_whole_budget_runs_by_default, setup, teardown),
      cmocka_unit_test_setup_teardown(test_a_mac_budget_too_small_fails_naming_both_figures, setup,
                                      teardown),
      cmocka_unit_test_setup_teardown(test_early_stop_still_reports_the_final_accuracy, setup,
                                      teardown),
      cmocka_unit_test_setup_teardown(test_run_of_a_tiny_job_succeeds_and_reports_json, setup,
                                      teardown),
      cmocka_unit_test_setup_teardown(test_sigint_cancels_the_job_and_leaves_nothing_behind, setup,
                                      teardown),
      cmocka_unit_test_setup_teardown(
          test_an_agent_that_dies_fails_the_run_and_the_rest_is_cleaned_up, setup, teardown),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
