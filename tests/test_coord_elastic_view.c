/* An elastic job's membership changes, as the operator sees them: each is
 * a row of the job's metrics (round, epoch, nodes in and out, why) in
 *   - pxctl metrics: a line among the iteration rows, before the first
 *     iteration of the new epoch, and a "memberships" array in --json;
 *   - the HTTP API's job (/api/v1/jobs/JOB): membership_epoch,
 *     member_nodes and "memberships" (kind, nodes, nodes_in, nodes_out,
 *     reason);
 *   - /metrics: prunex_job_membership_epoch, prunex_job_member_nodes and
 *     prunex_job_membership_changes_total{reason}, passing `promtool check
 *     metrics`;
 *   - the dashboard: a marker on both accuracy charts at the round boundary
 *     (headless Chromium; data-markers, data-marker-x, data-marker-labels).
 * Real pxcoordd (--http) with real SQLite on loopback; the three nodes and
 * rank 0 are played through the RPC API (as test_coord_elastic): node n2's
 * agent goes away after iteration 1, epoch 2 (n1, n3) begins at iteration
 * 3. A tool that is not installed skips its part. Bounded: every wait has
 * its deadline. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include "http_harness.h"

#define NS(x) PRUNEX__V1__NODE_STATE__NODE_STATE_##x
#define START PRUNEX__V1__ASSIGNMENT_ACTION__ASSIGNMENT_ACTION_START
#define ITERS 6
#define BYTES 2000000 /* inter-node bytes of each iteration */

typedef struct {
  pxt_coordd_t d;
  px_rpc_channel_t *ch;
  char ids[3][64];
  px_rpc_stream_t *s[3];
  char job[64];
} fixture_t;

static fixture_t F;

static int64_t wall_ms(void) {
  struct timespec ts;
  clock_gettime(CLOCK_REALTIME, &ts);
  return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

/* Rank 0's report of iteration it in epoch: one layer, a test accuracy,
 * BYTES inter-node. The decision's membership epoch, -1 on an error. */
static int report(int it, int epoch) {
  Prunex__V1__LayerMetrics L = PRUNEX__V1__LAYER_METRICS__INIT, *lp = &L;
  L.name = "conv1.weight";
  L.r_intra = L.s_intra = L.r_inter = L.s_inter = 1.0;
  L.rho1 = L.rho2 = 1.0;
  L.density = 1.0;
  L.numel = 100;
  Prunex__V1__IterationReport r = PRUNEX__V1__ITERATION_REPORT__INIT;
  r.job_id = F.job;
  r.iteration = it;
  r.epoch = 0.5 * it;
  r.loss = 2.0 - 0.2 * it;
  r.test_accuracy = 0.3 + 0.1 * it;
  r.train_accuracy = 0.3 + 0.1 * it;
  r.density = 1.0;
  r.bytes_inter = BYTES;
  r.bytes_inter_dense = BYTES;
  r.time_unix_ms = wall_ms();
  r.n_layers = 1;
  r.layers = &lp;
  r.membership_epoch = epoch;
  Prunex__V1__ControlDecision *d = NULL;
  if (px_rpc_report_iteration(F.ch, &r, 0, &d) != PX_OK) {
    fprintf(stderr, "report of iteration %d: %s\n", it, px_last_error());
    return -1;
  }
  int e = d->membership_epoch;
  px_rpc_message_free(d);
  return e;
}

/* Three nodes, the elastic job (min 2) on them; rank 0 reports 0..1, n2's
 * agent goes, rank 0 reports 2 (the boundary: epoch 2 from 3), then the
 * rest in epoch 2. */
static int group_setup(void **state) {
  (void)state;
  memset(&F, 0, sizeof F);
  const char *extra[] = {"--agent-grace-ms", "300", "--http", "127.0.0.1:0", "--http-www",
                         PX_SOURCE_DIR "/coordinatord/www", NULL};
  if (pxt_coordd_setup(&F.d, extra) != 0) return -1;
  if (px_rpc_channel_create(F.d.target, &F.ch) != PX_OK) return -1;
  static const char *const names[] = {"n1", "n2", "n3"};
  for (int i = 0; i < 3; i++)
    if (pxt_register(F.ch, names[i], 1, 0, F.ids[i], sizeof F.ids[i]) != PX_OK ||
        px_rpc_watch_assignments(F.ch, F.ids[i], &F.s[i]) != PX_OK)
      return -1;
  pxt_spec_t s;
  pxt_spec_init(&s, 3, 1);
  Prunex__V1__ElasticSpec el = PRUNEX__V1__ELASTIC_SPEC__INIT;
  el.min_nodes = 2;
  s.spec.elastic = &el;
  s.spec.name = "elastic-view";
  if (pxt_submit(F.ch, &s, F.job, sizeof F.job) != PX_OK) return -1;
  for (int i = 0; i < 3; i++) {
    Prunex__V1__Assignment *a = pxt_next_assignment(F.s[i], 5000);
    int ok = a && (int)a->action == START;
    px_rpc_message_free(a);
    if (!ok) return -1;
  }
  if (report(0, 1) != 1 || report(1, 1) != 1) return -1;
  px_rpc_stream_destroy(F.s[1]); /* n2's agent is killed */
  F.s[1] = NULL;
  if (!pxt_wait_node_state(F.ch, F.ids[1], NS(LOST), 5000)) return -1;
  pxt_sleep_ms(100);
  if (report(2, 1) != 2) return -1;
  for (int it = 3; it < ITERS; it++)
    if (report(it, 2) != 2) return -1;
  return 0;
}

static int group_teardown(void **state) {
  (void)state;
  for (int i = 0; i < 3; i++)
    if (F.s[i]) px_rpc_stream_destroy(F.s[i]);
  if (F.ch) px_rpc_channel_destroy(F.ch);
  return pxt_coordd_teardown(&F.d);
}

static void pxctl(pxt_result_t *r, const char *const *args) {
  char env[128];
  snprintf(env, sizeof env, "PRUNEX_COORDINATOR=%s", F.d.target);
  const char *const envs[] = {env, NULL};
  if (pxt_pxctl(r, F.d.dir, args, envs, 30000) != 0) pxt_show("pxctl", r), fail();
}

/* The change is a line between iterations 2 and 3 of `pxctl metrics`, and
 * a row of --json's "memberships" with the nodes in and out. */
static void test_pxctl_metrics_shows_the_change_among_the_iterations(void **state) {
  (void)state;
  static pxt_result_t r;
  pxctl(&r, (const char *const[]){"metrics", F.job, NULL});
  const char *line = strstr(r.out, "-- membership epoch 2 from iteration 3 (lost): out n2; "
                                   "nodes n1, n3: node n2 (");
  const char *row2 = strstr(r.out, "\n   2 "), *row3 = strstr(r.out, "\n   3 ");
  print_message("%s", r.out);
  if (!line || !row2 || !row3 || !(row2 < line && line < row3)) fail_msg("pxctl metrics:\n%s", r.out);
  assert_null(strstr(r.out, "membership epoch 1")); /* the placement is no change */
  pxctl(&r, (const char *const[]){"metrics", "--json", F.job, NULL});
  pxj_t *v = pxj_parse(r.out);
  const pxj_t *m = pxj_get(v, "memberships");
  if (!m || m->type != PXJ_ARR || m->n != 2) fail_msg("pxctl metrics --json:\n%s", r.out);
  const pxj_t *e = m->items[1];
  assert_int_equal((int)pxj_num(e, "epoch"), 2);
  assert_int_equal((int)pxj_num(e, "from_iteration"), 3);
  assert_string_equal(pxj_str(e, "kind"), "lost");
  const pxj_t *out = pxj_get(e, "nodes_out"), *in = pxj_get(e, "nodes_in");
  assert_true(out && out->n == 1 && !strcmp(out->items[0]->str, "n2"));
  assert_true(!in || in->n == 0);
  assert_string_equal(pxj_str(m->items[0], "kind"), "placed");
  assert_int_equal((int)pxj_get(v, "iterations")->n, ITERS);
  pxj_free(v);
  /* and pxctl status names the epochs, the one in force last */
  pxctl(&r, (const char *const[]){"status", F.job, NULL});
  if (!strstr(r.out, "epoch 2    from iteration 3: 2 nodes (n1, n3), in force: node n2"))
    fail_msg("pxctl status:\n%s", r.out);
}

/* /api/v1/jobs/JOB: the epoch in force, its nodes, every epoch as a row. */
static void test_job_json_carries_the_memberships(void **state) {
  (void)state;
  static char body[1 << 18];
  char path[128];
  snprintf(path, sizeof path, "/api/v1/jobs/%s", F.job);
  assert_int_equal(pxt_http_get(F.d.http_port, path, body, sizeof body), 200);
  pxj_t *j = pxj_parse(body);
  assert_non_null(j);
  assert_int_equal((int)pxj_num(j, "membership_epoch"), 2);
  assert_int_equal((int)pxj_num(j, "member_nodes"), 2);
  const pxj_t *m = pxj_get(j, "memberships");
  if (!m || m->n != 2) fail_msg("%s", body);
  const pxj_t *e = m->items[1];
  print_message("epoch 2: %s, reason %s\n", pxj_str(e, "kind"), pxj_str(e, "reason"));
  assert_string_equal(pxj_str(e, "kind"), "lost");
  assert_int_equal((int)pxj_num(e, "from_iteration"), 3);
  const pxj_t *nodes = pxj_get(e, "nodes"), *out = pxj_get(e, "nodes_out");
  assert_true(nodes && nodes->n == 2 && !strcmp(nodes->items[0]->str, "n1") &&
              !strcmp(nodes->items[1]->str, "n3"));
  assert_true(out && out->n == 1 && !strcmp(out->items[0]->str, "n2"));
  assert_int_equal((int)pxj_get(e, "nodes_in")->n, 0);
  assert_non_null(strstr(pxj_str(e, "reason"), "node n2 ("));
  const pxj_t *in1 = pxj_get(m->items[0], "nodes_in");
  assert_true(in1 && in1->n == 3); /* the placement: every node in */
  pxj_free(j);
  /* the listing has the same epoch and node count */
  assert_int_equal(pxt_http_get(F.d.http_port, "/api/v1/jobs", body, sizeof body), 200);
  assert_non_null(strstr(body, "\"membership_epoch\":2,\"member_nodes\":2"));
}

/* The sample of family `name` of the job (labels containing `also`): its
 * value, NAN when none. */
static double sample(const char *body, const char *name, const char *also) {
  char key[256];
  snprintf(key, sizeof key, "\n%s{job_id=\"%s\"", name, F.job);
  for (const char *p = strstr(body, key); p; p = strstr(p + 1, key)) {
    const char *close = strstr(p, "} ");
    const char *in = also[0] ? strstr(p, also) : p;
    if (close && in && in < close) return strtod(close + 2, NULL);
  }
  return NAN;
}

static void test_prometheus_job_metrics_count_the_change(void **state) {
  (void)state;
  static char body[1 << 20];
  assert_int_equal(pxt_http_get(F.d.http_port, "/metrics", body, sizeof body), 200);
  double epoch = sample(body, "prunex_job_membership_epoch", "");
  double nodes = sample(body, "prunex_job_member_nodes", "");
  double lost = sample(body, "prunex_job_membership_changes_total", "reason=\"lost\"");
  double pre = sample(body, "prunex_job_membership_changes_total", "reason=\"preempted\"");
  double joined = sample(body, "prunex_job_membership_changes_total", "reason=\"joined\"");
  print_message("epoch %g, nodes %g, changes: lost %g, preempted %g, joined %g\n", epoch, nodes,
                lost, pre, joined);
  if (!(epoch == 2 && nodes == 2 && lost == 1 && pre == 0 && joined == 0))
    fail_msg("/metrics:\n%s", body);
  assert_non_null(strstr(body, "# TYPE prunex_job_membership_changes_total counter\n"));
  if (access(PXT_PROMTOOL, X_OK) != 0) {
    fprintf(stderr, "SKIP: %s not installed (Debian package prometheus)\n", PXT_PROMTOOL);
    skip();
  }
  assert_int_equal(pxt_promtool_check(F.d.dir, body), 0);
}

/* Both accuracy charts mark the change at the boundary after iteration 2:
 * on the bytes axis at 3 iterations' bytes, on the time axis at or after
 * iteration 2's report, each labelled. */
static void test_dashboard_marks_the_change_on_the_accuracy_charts(void **state) {
  (void)state;
  if (access(PXT_CHROMIUM, X_OK) != 0) {
    fprintf(stderr, "SKIP: %s not installed (Debian package chromium)\n", PXT_CHROMIUM);
    skip();
  }
  char url[256];
  snprintf(url, sizeof url, "http://127.0.0.1:%d/?job=%s", F.d.http_port, F.job);
  const char *dom = pxt_dump_dom(F.d.dir, url);
  if (!strstr(dom, "data-ready=\"1\"") || strstr(dom, "data-error="))
    fail_msg("DOM:\n%.4000s", dom);
  static const char *const charts[] = {"chart-acc_time", "chart-acc_bytes"};
  for (int i = 0; i < 2; i++) {
    char n[16], x[64], labels[512];
    snprintf(n, sizeof n, "%s", pxt_dom_attr(dom, charts[i], "data-markers"));
    snprintf(x, sizeof x, "%s", pxt_dom_attr(dom, charts[i], "data-marker-x"));
    snprintf(labels, sizeof labels, "%s", pxt_dom_attr(dom, charts[i], "data-marker-labels"));
    print_message("%s: %s marker(s) at x %s: %s\n", charts[i], n, x, labels);
    assert_string_equal(n, "1");
    assert_string_equal(labels, "epoch 2: -n2 (lost)");
    if (i == 1) assert_true(fabs(atof(x) - 3 * BYTES / 1e6) < 1e-9);
    else assert_true(atof(x) >= 0.0);
  }
  /* the other charts carry none */
  assert_string_equal(pxt_dom_attr(dom, "chart-msg", "data-markers"), "0");
  /* the summary says the epoch in force */
  assert_non_null(strstr(dom, "epoch 2: 2 nodes"));
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_pxctl_metrics_shows_the_change_among_the_iterations),
      cmocka_unit_test(test_job_json_carries_the_memberships),
      cmocka_unit_test(test_prometheus_job_metrics_count_the_change),
      cmocka_unit_test(test_dashboard_marks_the_change_on_the_accuracy_charts),
  };
  return cmocka_run_group_tests(tests, group_setup, group_teardown);
}
