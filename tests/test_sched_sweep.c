/* Sweeps with the real pxcoordd, pxagent, pxworker and pxctl on
 * the Fashion-MNIST subset: `pxctl submit` of a spec whose sweep has 2 x 3
 * values makes 6 jobs under one sweep id, each with its combination's
 * values in its spec; the first two run to the end; `pxctl status SWEEP`
 * and `pxctl list --sweep` summarise them (the best accuracy is the best of
 * the jobs' own); `pxctl cancel SWEEP` cancels the rest together. A sweep
 * with a combination no rank could run, or more jobs than the user's
 * quota, is refused whole: no job is made. */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>

#include <cmocka.h>

#include "agent_harness.h"
#include "pxctl_harness.h"

#define JS(x) PRUNEX__V1__JOB_STATE__JOB_STATE_##x

static int write_text(const char *path, const char *text) {
  FILE *f = fopen(path, "w");
  if (!f) return -1;
  int ok = fputs(text, f) >= 0;
  return fclose(f) == 0 && ok ? 0 : -1;
}

static int64_t count_jobs(px_rpc_channel_t *ch) {
  Prunex__V1__ListJobsRequest req = PRUNEX__V1__LIST_JOBS_REQUEST__INIT;
  req.limit = 1000;
  Prunex__V1__ListJobsResponse *r = NULL;
  assert_int_equal(px_rpc_list_jobs(ch, &req, 0, &r), PX_OK);
  int64_t n = (int64_t)r->n_jobs;
  px_rpc_message_free(r);
  return n;
}

#define SWEEP_SPEC                                                                        \
  "name: sw\n"                                                                            \
  "model: {name: resnet20}\n"                                                             \
  "dataset: {name: %s, path: \"%s\", augment: false}\n"                                   \
  "cluster: {nodes: 1, workers_per_node: 1, device: cpu, threads_per_worker: 1}\n"        \
  "strategy: hsadmm\n"                                                                    \
  "train: {epochs: 1, batch_size: 8, lr: 0.05, momentum: 0.9, local_steps: 1, seed: 7,"   \
  " lr_schedule: constant}\n"                                                             \
  "prune: {filter_keep: 0.5}\n"                                                           \
  "admm: {max_iterations: 2, rho1: 0.001, rho2: 0.001}\n"                                 \
  "comm: {timeout_ms: 30000}\n"                                                           \
  "sweep:\n"                                                                              \
  "  prune.channel_keep: [0.5, 1]\n"                                                      \
  "  train.lr: [0.05, 0.1, 0.2]\n"

/* The six jobs hold their combination's values, in order. */
static void check_members(px_rpc_channel_t *ch, const pxj_t *ids, const char *sweep) {
  static const double keep[] = {0.5, 1}, lr[] = {0.05, 0.1, 0.2};
  for (size_t k = 0; k < 6; k++) {
    Prunex__V1__Job *j = NULL;
    assert_int_equal(px_rpc_get_job(ch, ids->items[k]->str, 0, &j), PX_OK);
    assert_string_equal(j->sweep_id, sweep);
    assert_true(j->spec->prune->channel_keep == keep[k / 3]);
    assert_true(j->spec->train->lr == lr[k % 3]);
    assert_int_equal(j->spec->n_sweep, 0);
    char want[96], name[16];
    snprintf(want, sizeof want, "prune.channel_keep=%s, train.lr=%s", k / 3 ? "1" : "0.5",
             k % 3 == 0 ? "0.05" : k % 3 == 1 ? "0.1" : "0.2");
    assert_string_equal(j->sweep_point, want);
    snprintf(name, sizeof name, "sw-%zu", k + 1);
    assert_string_equal(j->name, name);
    px_rpc_message_free(j);
  }
}

/* `status SWEEP --json`: six members, and the best accuracy is the best of
 * the members' own. */
static void check_status(const char *dir, const char *const *env, const char *sweep) {
  pxt_result_t *r = calloc(1, sizeof *r);
  const char *args[] = {"status", sweep, "--json", NULL};
  if (pxt_pxctl(r, dir, args, env, 30000) != 0) pxt_show("status SWEEP", r);
  assert_int_equal(r->code, 0);
  pxj_t *v = pxj_parse(r->out);
  assert_non_null(v);
  assert_int_equal((int)pxj_num(v, "jobs"), 6);
  assert_true(pxj_num(pxj_get(v, "states"), "SUCCEEDED") >= 2);
  const pxj_t *best = pxj_get(v, "best_accuracy"), *m = pxj_get(v, "members");
  assert_non_null(best);
  assert_int_equal(best->type, PXJ_OBJ);
  double top = -1;
  for (size_t i = 0; i < m->n; i++) {
    const pxj_t *acc = pxj_get(m->items[i], "test_accuracy");
    if (acc && acc->type == PXJ_NUM && acc->num > top) top = acc->num;
  }
  assert_true(top > 0);
  assert_true(pxj_num(best, "test_accuracy") == top);
  assert_non_null(pxj_get(v, "lowest_density"));
  pxj_free(v);
  /* the human summary, after list --sweep's table */
  const char *largs[] = {"list", "--sweep", sweep, NULL};
  if (pxt_pxctl(r, dir, largs, env, 30000) != 0) pxt_show("list --sweep", r);
  assert_int_equal(r->code, 0);
  printf("%s", r->out);
  assert_non_null(strstr(r->out, "sweep      sweep-"));
  assert_non_null(strstr(r->out, ": 6 jobs: "));
  assert_non_null(strstr(r->out, "best       test accuracy "));
  free(r);
}

static void test_sweep_of_six_jobs(void **state) {
  (void)state;
  pxt_coordd_t d;
  px_rpc_channel_t *ch;
  char data[400], spec[600], text[2048], coord[320];
  pxt_agent_t a;
  int w = pxt_one_node(&d, &ch, &a, data, sizeof data);
  assert_true(w >= 0);
  snprintf(text, sizeof text, SWEEP_SPEC, w > 0 ? "fashion-mnist" : "synthetic",
           w > 0 ? data : "");
  snprintf(spec, sizeof spec, "%s/sweep.yaml", d.dir);
  assert_int_equal(write_text(spec, text), 0);
  snprintf(coord, sizeof coord, "PRUNEX_COORDINATOR=%s", d.target);
  const char *env[] = {coord, NULL};
  pxt_result_t *r = calloc(1, sizeof *r);
  const char *args[] = {"submit", spec, "--json", NULL};
  if (pxt_pxctl(r, d.dir, args, env, 30000) != 0) pxt_show("submit", r);
  assert_int_equal(r->code, 0);
  pxj_t *sub = pxj_parse(r->out);
  assert_non_null(sub);
  char sweep[64];
  snprintf(sweep, sizeof sweep, "%s", pxj_str(sub, "sweep_id"));
  const pxj_t *ids = pxj_get(sub, "job_ids");
  assert_non_null(ids);
  assert_int_equal(ids->n, 6);
  assert_int_equal(count_jobs(ch), 6);
  check_members(ch, ids, sweep);
  /* one node: the jobs run one after another; the first two to the end */
  int s = pxt_wait_job(ch, ids->items[1]->str, JS(SUCCEEDED), 240000);
  if (s != JS(SUCCEEDED)) {
    pxt_dump_file(a.log);
    fail_msg("job 2 of the sweep: %s", px_rpc_job_state_name(s));
  }
  check_status(d.dir, env, sweep);
  /* cancel the sweep: every job not finished, together */
  const char *cargs[] = {"cancel", sweep, "--json", NULL};
  if (pxt_pxctl(r, d.dir, cargs, env, 30000) != 0) pxt_show("cancel SWEEP", r);
  assert_int_equal(r->code, 0);
  pxj_t *can = pxj_parse(r->out);
  const pxj_t *gone = pxj_get(can, "cancelled");
  assert_true(gone && gone->n >= 1 && gone->n <= 4);
  for (size_t k = 0; k < 6; k++) {
    int st = pxt_job_state(ch, ids->items[k]->str);
    assert_true(st == JS(SUCCEEDED) || st == JS(CANCELLED));
    if (k >= 6 - gone->n) assert_int_equal(st, JS(CANCELLED));
  }
  pxj_free(can);
  pxj_free(sub);
  free(r);
  assert_true(pxt_wait_node_named(ch, "node0", PRUNEX__V1__NODE_STATE__NODE_STATE_READY, 20000));
  int status = pxt_agent_stop(&a, SIGTERM, 20000);
  if (!pxt_exited_ok(status)) pxt_dump_file(a.log);
  assert_true(pxt_exited_ok(status));
  px_rpc_channel_destroy(ch);
  assert_int_equal(pxt_coordd_teardown(&d), 0);
}

/* A sweep with one bad combination, or over the quota, makes no job. */
static void test_sweep_is_all_or_nothing(void **state) {
  (void)state;
  pxt_coordd_t d;
  char conf[320];
  memset(&d, 0, sizeof d);
  d.pid = -1;
  assert_int_equal(pxt_mkdtemp(d.dir, sizeof d.dir), 0);
  snprintf(d.db, sizeof d.db, "%s/coord.db", d.dir);
  snprintf(conf, sizeof conf, "%s/coord.conf", d.dir);
  assert_int_equal(write_text(conf, "max_queued_jobs = 5\n"), 0);
  const char *extra[] = {"--config", conf, NULL};
  assert_int_equal(pxt_coordd_start(&d, extra), 0);
  px_rpc_channel_t *ch = NULL;
  assert_int_equal(px_rpc_channel_create(d.target, &ch), PX_OK);
  pxt_job_t j;
  pxt_job_init(&j, NULL, 1, 1, 2, 1);
  j.train.nesterov = 1;
  Prunex__V1__SweepAxis ax = PRUNEX__V1__SWEEP_AXIS__INIT;
  char *vals[] = {"0.9", "0"};
  ax.field = "train.momentum";
  ax.values = vals;
  ax.n_values = 2;
  Prunex__V1__SweepAxis *axes[] = {&ax};
  j.spec.sweep = axes;
  j.spec.n_sweep = 1;
  char job[64];
  assert_int_not_equal(pxt_job_submit(ch, &j, job, sizeof job), PX_OK);
  assert_int_equal(px_rpc_last_code(), PX_RPC_INVALID_ARGUMENT);
  printf("refused: %s\n", px_last_error());
  assert_non_null(strstr(px_last_error(), "the combination train.momentum=0"));
  assert_int_equal(count_jobs(ch), 0);
  /* 6 combinations, quota 5 */
  char *six[] = {"0.1", "0.2", "0.3", "0.4", "0.5", "0.6"};
  ax.field = "prune.channel_keep";
  ax.values = six;
  ax.n_values = 6;
  assert_int_not_equal(pxt_job_submit(ch, &j, job, sizeof job), PX_OK);
  assert_int_equal(px_rpc_last_code(), PX_RPC_RESOURCE_EXHAUSTED);
  printf("refused: %s\n", px_last_error());
  assert_non_null(strstr(px_last_error(), "the sweep's 6 jobs"));
  assert_int_equal(count_jobs(ch), 0);
  ax.n_values = 5; /* fits: five jobs, one sweep */
  assert_int_equal(pxt_job_submit(ch, &j, job, sizeof job), PX_OK);
  assert_int_equal(count_jobs(ch), 5);
  /* an unknown sweep cannot be cancelled */
  Prunex__V1__CancelJobResponse *cr = NULL;
  assert_int_not_equal(px_rpc_cancel_job(ch, "sweep-999999", "x", 0, &cr), PX_OK);
  assert_int_equal(px_rpc_last_code(), PX_RPC_NOT_FOUND);
  px_rpc_channel_destroy(ch);
  assert_int_equal(pxt_coordd_teardown(&d), 0);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_sweep_is_all_or_nothing),
      cmocka_unit_test(test_sweep_of_six_jobs),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
