/* pxcoordd's HTTP side with the real programs: a coordinator
 * started with --http, two agents, and a small hsadmm job (2 nodes x 1 CPU
 * worker, resnet20 on the synthetic data set, one local step per
 * iteration) long enough to be watched while it runs; then a short one
 * that finishes. Checked against the real tools from Debian:
 *   - /metrics during the running job passes `promtool check metrics` and
 *     carries the job's series;
 *   - a real Prometheus (throwaway config and storage in the test's
 *     directory, 1 s scrape interval) scrapes it and its HTTP API returns a
 *     prunex_job_iteration series for the job;
 *   - headless Chromium loads the dashboard of the running job and of the
 *     finished one, and every chart reports data points (data-points="N"
 *     written by the page's script after drawing); the per-layer charts of
 *     resnet20's 20+ layers draw a band, the median and the top layers with
 *     a legend (data-series, data-legend), the accuracy axes are [0, 1]
 *     whatever the number of points, the summary's inter-node MB is the
 *     job's, and times say UTC; the axes of quantities that
 *     start at 0 (bytes per iteration, drift, phase times, counts) start
 *     at 0, the x axes at iteration 0, and the count axes (nodes, jobs,
 *     changed mask bits) have whole-number ticks;
 *   - a job that ended keeps its /metrics series, with its final values
 *     and prunex_job_ended_time_seconds, for --http-metrics-ended-s (5 s
 *     here), and then they go;
 *   - /api/v1/jobs/JOB's totals (iterations, bytes_inter, bytes_intra) are
 *     the sums of its iterations (they were read one column off), and its
 *     other keys are the listing's, in its order (one field table);
 *   - the JSON is paged (limit, cursor), validates its parameters, finds a
 *     job by name, and writes null, never -1, for what was not measured;
 *   - a bad --http value (or --http-metrics-ended-s) exits 2, a busy HTTP
 *     port 1, each with a message.
 * A tool that is not installed skips its test (scripts/bootstrap installs
 * them). Bounded: each step has its own deadline. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>
#include <netinet/in.h>
#include <sys/socket.h>

#include "http_harness.h"

#define CHROMIUM PXT_CHROMIUM
#define PROMTOOL PXT_PROMTOOL
#define PROMETHEUS "/usr/bin/prometheus"

typedef struct {
  pxt_coordd_t d;
  pxt_agent_t a[2];
  px_rpc_channel_t *ch;
  char job[64];      /* the long job, running during the first tests */
  char done[64];     /* the short job, finished */
  char *ended;       /* /metrics read the moment the short job ended */
} fixture_t;

#define ENDED_S 5 /* --http-metrics-ended-s */
#define STR_(x) #x
#define STR(x) STR_(x)

static fixture_t F;

/* A free TCP port on loopback (bound and released: good enough for a test). */
static int free_port(void) {
  int fd = socket(AF_INET, SOCK_STREAM, 0);
  struct sockaddr_in sa = {0};
  sa.sin_family = AF_INET;
  sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t len = sizeof sa;
  if (bind(fd, (struct sockaddr *)&sa, sizeof sa) != 0 ||
      getsockname(fd, (struct sockaddr *)&sa, &len) != 0) {
    close(fd);
    return -1;
  }
  close(fd);
  return ntohs(sa.sin_port);
}

/* The job's JSON object (caller frees), NULL when it cannot be read. */
static pxj_t *job_json(const char *job) {
  static char body[1 << 16];
  char path[256];
  snprintf(path, sizeof path, "/api/v1/jobs/%s", job);
  if (pxt_http_get(F.d.http_port, path, body, sizeof body) != 200) return NULL;
  return pxj_parse(body);
}

/* Waits until the job has reported at least `iters` iterations (by the
 * HTTP JSON): 1 when it did. */
static int wait_iterations(const char *job, int iters, int timeout_ms) {
  int64_t end = pxt_now_ms() + timeout_ms;
  do {
    pxj_t *v = job_json(job);
    double it = v ? pxj_num(v, "iteration") : NAN;
    pxj_free(v);
    if (!isnan(it) && it + 1 >= iters) return 1;
    pxt_sleep_ms(200);
  } while (pxt_now_ms() < end);
  return 0;
}

/* ---- fixture ------------------------------------------------------------------ */

static int group_setup(void **state) {
  (void)state;
  memset(&F, 0, sizeof F);
  const char *extra[] = {"--http", "127.0.0.1:0", "--http-www", PX_SOURCE_DIR "/coordinatord/www",
                         "--http-metrics-ended-s", STR(ENDED_S), NULL};
  if (pxt_coordd_setup(&F.d, extra) != 0) return -1;
  if (px_rpc_channel_create(F.d.target, &F.ch) != PX_OK) return -1;
  for (int i = 0; i < 2; i++) {
    char name[16];
    snprintf(name, sizeof name, "node%d", i);
    if (pxt_agent_start(&F.a[i], &F.d, name, 1, NULL) != 0) return -1;
    if (!pxt_wait_node_named(F.ch, name, PRUNEX__V1__NODE_STATE__NODE_STATE_READY, 30000))
      return -1;
  }
  pxt_job_t j;
  pxt_job_init(&j, NULL, 2, 1, 100000, 1);
  j.spec.name = "dash-long";
  if (pxt_job_submit(F.ch, &j, F.job, sizeof F.job) != PX_OK) return -1;
  if (!wait_iterations(F.job, 4, 60000)) {
    fprintf(stderr, "the job did not reach 4 iterations\n");
    pxt_dump_file(F.a[0].log);
    return -1;
  }
  return 0;
}

static int group_teardown(void **state) {
  (void)state;
  for (int i = 0; i < 2; i++) pxt_agent_stop(&F.a[i], SIGTERM, 20000);
  if (F.ch) px_rpc_channel_destroy(F.ch);
  return pxt_coordd_teardown(&F.d);
}

/* Every chart box of the dumped DOM ('id="chart-X" data-points="N"'):
 * how many there are, and how many have N > 0. */
static void count_charts(const char *dom, int *charts, int *with_points) {
  *charts = *with_points = 0;
  for (const char *p = dom; (p = strstr(p, "id=\"chart-")); p++) {
    const char *dp = strstr(p, "data-points=\"");
    const char *close = strchr(p, '>');
    if (!dp || !close || dp > close) continue;
    (*charts)++;
    int n = atoi(dp + 13);
    if (n > 0) (*with_points)++;
    else fprintf(stderr, "empty chart: %.40s\n", p);
  }
}

/* Attribute attr of chart box `id` in the dumped DOM, NAN when absent. */
static double chart_attr(const char *dom, const char *id, const char *attr) {
  char key[96], a[64];
  snprintf(key, sizeof key, "id=\"chart-%s\"", id);
  snprintf(a, sizeof a, " %s=\"", attr);
  const char *p = strstr(dom, key);
  if (!p) return NAN;
  const char *open = p, *close = strchr(p, '>');
  while (open > dom && *open != '<') open--;
  for (const char *at = strstr(open, a); at && at < close; at = strstr(at + 1, a))
    return strtod(at + strlen(a), NULL);
  return NAN;
}

/* Attribute attr of chart box `id` in the dumped DOM as text ("" when absent). */
static const char *chart_text(const char *dom, const char *id, const char *attr) {
  char key[96];
  snprintf(key, sizeof key, "chart-%s", id);
  return pxt_dom_attr(dom, key, attr);
}

/* 1 when chart `id`'s y axis starts at 0 and its ticks (data-y-ticks) are
 * at least two whole numbers. */
static int y_from_zero_in_whole_numbers(const char *dom, const char *id) {
  const char *t = chart_text(dom, id, "data-y-ticks");
  print_message("%s: y from %g, ticks %s\n", id, chart_attr(dom, id, "data-y-min"), t);
  int n = 0;
  for (const char *p = t; *p; n++) {
    char *end;
    double v = strtod(p, &end);
    if (end == p || v != floor(v)) return 0;
    p = *end == ',' ? end + 1 : end;
  }
  return n >= 2 && chart_attr(dom, id, "data-y-min") == 0.0;
}

/* The text of the first table cell of column col (data-col="col"), "" if none. */
static const char *cell(const char *dom, const char *col) {
  static char text[256];
  char key[96];
  snprintf(key, sizeof key, "data-col=\"%s\">", col);
  const char *p = strstr(dom, key);
  text[0] = '\0';
  if (!p) return text;
  p += strlen(key);
  size_t n = strcspn(p, "<");
  snprintf(text, sizeof text, "%.*s", (int)(n < sizeof text ? n : sizeof text - 1), p);
  return text;
}

/* The dashboard at url rendered by headless Chromium (http_harness.h). */
static const char *dump_dom(const char *url) { return pxt_dump_dom(F.d.dir, url); }

/* ---- tests -------------------------------------------------------------------- */

static void test_metrics_of_a_running_job_pass_promtool(void **state) {
  (void)state;
  static char body[1 << 20];
  assert_int_equal(pxt_http_get(F.d.http_port, "/metrics", body, sizeof body), 200);
  char want[160];
  snprintf(want, sizeof want, "prunex_job_iteration{job_id=\"%s\",job_name=\"dash-long\"", F.job);
  if (!strstr(body, want)) fprintf(stderr, "%s\n", body);
  assert_non_null(strstr(body, want));
  assert_non_null(strstr(body, "prunex_jobs{state=\"running\"} 1"));
  assert_non_null(strstr(body, "prunex_nodes{state=\"busy\"} 2"));
  assert_non_null(strstr(body, "prunex_rpc_handler_seconds_bucket{method=\"ReportIteration\",le=\"+Inf\"}"));
  assert_non_null(strstr(body, "prunex_job_inter_bytes_total{"));
  assert_non_null(strstr(body, "prunex_job_rho{"));
  assert_non_null(strstr(body, "prunex_job_phase_seconds{"));
  /* every RPC so far: the agents registered, and rank 0 reports */
  assert_null(strstr(body, "prunex_rpc_requests_total{method=\"ReportIteration\"} 0\n"));
  if (access(PROMTOOL, X_OK) != 0) {
    fprintf(stderr, "SKIP: %s not installed (Debian package prometheus)\n", PROMTOOL);
    skip();
  }
  char in[400], out[400], err[400];
  snprintf(in, sizeof in, "%s/metrics.txt", F.d.dir);
  snprintf(out, sizeof out, "%s/promtool.out", F.d.dir);
  snprintf(err, sizeof err, "%s/promtool.err", F.d.dir);
  FILE *f = fopen(in, "w");
  assert_non_null(f);
  fputs(body, f);
  fclose(f);
  const char *argv[] = {PROMTOOL, "check", "metrics", NULL};
  int rc = pxt_run_tool(argv, in, out, err, 30000);
  if (rc != 0) {
    pxt_dump_file(out);
    pxt_dump_file(err);
  }
  assert_int_equal(rc, 0);
}

static void test_prometheus_scrapes_a_prunex_series(void **state) {
  (void)state;
  if (access(PROMETHEUS, X_OK) != 0) {
    fprintf(stderr, "SKIP: %s not installed (Debian package prometheus)\n", PROMETHEUS);
    skip();
  }
  char cfg[400], tsdb[400], log[400], listen[64];
  snprintf(cfg, sizeof cfg, "%s/prometheus.yml", F.d.dir);
  snprintf(tsdb, sizeof tsdb, "--storage.tsdb.path=%s/tsdb", F.d.dir);
  snprintf(log, sizeof log, "%s/prometheus.log", F.d.dir);
  int pport = free_port();
  assert_true(pport > 0);
  snprintf(listen, sizeof listen, "--web.listen-address=127.0.0.1:%d", pport);
  FILE *f = fopen(cfg, "w");
  assert_non_null(f);
  fprintf(f,
          "global:\n  scrape_interval: 1s\n  evaluation_interval: 1s\n"
          "scrape_configs:\n  - job_name: prunex\n    static_configs:\n"
          "      - targets: ['127.0.0.1:%d']\n",
          F.d.http_port);
  fclose(f);
  char cfg_arg[440];
  snprintf(cfg_arg, sizeof cfg_arg, "--config.file=%s", cfg);
  const char *argv[] = {PROMETHEUS, cfg_arg, tsdb, listen, "--log.level=warn", NULL};
  pid_t pid = pxt_spawn_logged(PROMETHEUS, argv, log);
  assert_true(pid > 0);
  char query[256], body[1 << 16];
  snprintf(query, sizeof query, "/api/v1/query?query=prunex_job_iteration%%7Bjob_id%%3D%%22%s%%22%%7D",
           F.job);
  int found = 0;
  int64_t end = pxt_now_ms() + 60000;
  while (!found && pxt_now_ms() < end) {
    pxt_sleep_ms(500);
    if (pxt_http_get(pport, query, body, sizeof body) != 200) continue;
    pxj_t *v = pxj_parse(body);
    const pxj_t *data = pxj_get(v, "data");
    const pxj_t *result = pxj_get(data, "result");
    found = !strcmp(pxj_str(v, "status"), "success") && result && result->type == PXJ_ARR &&
            result->n == 1;
    pxj_free(v);
  }
  kill(pid, SIGTERM);
  if (pxt_wait_pid(pid, 15000) == -1) {
    kill(pid, SIGKILL);
    pxt_wait_pid(pid, 5000);
  }
  if (!found) {
    fprintf(stderr, "last answer: %s\n", body);
    pxt_dump_file(log);
  }
  assert_true(found);
}

static void test_json_is_paged_and_writes_null_for_missing_values(void **state) {
  (void)state;
  static char body[1 << 20];
  char path[256];
  /* a running job: not finished, so finished_unix_ms is null, not -1 or 0 */
  pxj_t *job = job_json("dash-long"); /* by name */
  assert_non_null(job);
  assert_string_equal(pxj_str(job, "job_id"), F.job);
  assert_string_equal(pxj_str(job, "state"), "RUNNING");
  const pxj_t *fin = pxj_get(job, "finished_unix_ms");
  assert_non_null(fin);
  assert_int_equal(fin->type, PXJ_NULL);
  pxj_free(job);
  /* pages of 2 iterations, walked with the cursor, give 0, 1, 2, 3 in order */
  int expect = 0;
  char cursor[64] = "";
  for (int page = 0; page < 2; page++) {
    snprintf(path, sizeof path, "/api/v1/jobs/%s/iterations?limit=2%s%s", F.job,
             cursor[0] ? "&cursor=" : "", cursor);
    assert_int_equal(pxt_http_get(F.d.http_port, path, body, sizeof body), 200);
    assert_null(strstr(body, ":-1"));
    pxj_t *v = pxj_parse(body);
    assert_non_null(v);
    const pxj_t *its = pxj_get(v, "iterations");
    assert_non_null(its);
    assert_int_equal(its->n, 2);
    for (size_t i = 0; i < its->n; i++) {
      assert_int_equal((int)pxj_num(its->items[i], "iteration"), expect++);
      static const char *const keys[] = {"time_unix_ms", "loss", "test_accuracy", "density",
                                         "mask_drift", "bytes_inter", "bytes_inter_dense",
                                         "phases", NULL};
      assert_true(pxj_has_keys(its->items[i], keys));
    }
    const pxj_t *next = pxj_get(v, "next_cursor");
    assert_non_null(next);
    assert_int_equal(next->type, PXJ_STR);
    snprintf(cursor, sizeof cursor, "%s", next->str);
    pxj_free(v);
  }
  /* per-layer figures, paged by "iteration:layer" */
  snprintf(path, sizeof path, "/api/v1/jobs/%s/layers?limit=3", F.job);
  assert_int_equal(pxt_http_get(F.d.http_port, path, body, sizeof body), 200);
  pxj_t *v = pxj_parse(body);
  assert_non_null(v);
  assert_int_equal(pxj_get(v, "layers")->n, 3);
  assert_string_equal(pxj_str(v, "next_cursor"), "0:2");
  pxj_free(v);
  /* listings of jobs and nodes */
  assert_int_equal(pxt_http_get(F.d.http_port, "/api/v1/nodes?limit=1", body, sizeof body), 200);
  v = pxj_parse(body);
  assert_int_equal(pxj_get(v, "nodes")->n, 1);
  assert_string_equal(pxj_str(v, "next_cursor"), "1");
  pxj_free(v);
  assert_int_equal(pxt_http_get(F.d.http_port, "/api/v1/jobs", body, sizeof body), 200);
  assert_non_null(strstr(body, F.job));
  /* one field table: the job of the listing and /api/v1/jobs/JOB have the
   * same keys in the same order, the latter plus its three totals */
  v = pxj_parse(body);
  assert_non_null(v);
  const pxj_t *jobs = pxj_get(v, "jobs"), *listed = NULL;
  for (size_t i = 0; jobs && i < jobs->n; i++)
    if (!strcmp(pxj_str(jobs->items[i], "job_id"), F.job)) listed = jobs->items[i];
  assert_non_null(listed);
  pxj_t *one = job_json(F.job);
  assert_non_null(one);
  assert_int_equal(one->n, listed->n + 4);
  for (size_t i = 0; i < listed->n; i++) assert_string_equal(one->keys[i], listed->keys[i]);
  assert_string_equal(one->keys[listed->n], "iterations");
  assert_string_equal(one->keys[listed->n + 1], "bytes_inter");
  assert_string_equal(one->keys[listed->n + 2], "bytes_intra");
  assert_string_equal(one->keys[listed->n + 3], "memberships");
  pxj_free(one);
  pxj_free(v);
  /* bad input is refused with a message; unknown things are 404 */
  assert_int_equal(pxt_http_get(F.d.http_port, "/api/v1/jobs?limit=0", body, sizeof body), 400);
  assert_non_null(strstr(body, "limit"));
  assert_int_equal(pxt_http_get(F.d.http_port, "/api/v1/jobs?limit=99999999999999999999", body,
                            sizeof body), 400);
  snprintf(path, sizeof path, "/api/v1/jobs/%s/layers?cursor=x", F.job);
  assert_int_equal(pxt_http_get(F.d.http_port, path, body, sizeof body), 400);
  assert_int_equal(pxt_http_get(F.d.http_port, "/api/v1/jobs/no-such-job", body, sizeof body), 404);
  assert_int_equal(pxt_http_get(F.d.http_port, "/static/../coord.db", body, sizeof body), 404);
  assert_int_equal(pxt_http_get(F.d.http_port, "/nothing", body, sizeof body), 404);
}

static void check_dashboard(const char *job, int expect_live) {
  if (access(CHROMIUM, X_OK) != 0) {
    fprintf(stderr, "SKIP: %s not installed (Debian package chromium)\n", CHROMIUM);
    skip();
  }
  char url[256];
  snprintf(url, sizeof url, "http://127.0.0.1:%d/?job=%s", F.d.http_port, job);
  const char *dom = dump_dom(url);
  int charts, with_points;
  count_charts(dom, &charts, &with_points);
  if (charts != 11 || with_points != 11 || !strstr(dom, "data-ready=\"1\""))
    fprintf(stderr, "DOM:\n%.4000s\n", dom);
  assert_non_null(strstr(dom, "data-ready=\"1\""));
  assert_null(strstr(dom, "data-error="));
  assert_int_equal(charts, 11);
  assert_int_equal(with_points, 11);
  if (expect_live) assert_non_null(strstr(dom, "live, every"));
  else assert_non_null(strstr(dom, "SUCCEEDED"));
  /* accuracy in [0, 1] on the y axis, from 0 on the x axis, however many points */
  static const char *const acc[] = {"acc_time", "acc_bytes"};
  for (int i = 0; i < 2; i++) {
    double y0 = chart_attr(dom, acc[i], "data-y-min"), y1 = chart_attr(dom, acc[i], "data-y-max");
    double x0 = chart_attr(dom, acc[i], "data-x-min");
    print_message("%s: %g points, x from %g, y %g..%g\n", acc[i],
                  chart_attr(dom, acc[i], "data-points"), x0, y0, y1);
    assert_true(y0 == 0.0 && y1 == 1.0);
    assert_true(x0 == 0.0);
  }
  /* bytes per iteration (beside the dense line) and phase times from 0 */
  print_message("msg: x from %g, y from %g, series %g; phases: y from %g\n",
                chart_attr(dom, "msg", "data-x-min"), chart_attr(dom, "msg", "data-y-min"),
                chart_attr(dom, "msg", "data-series"), chart_attr(dom, "phases", "data-y-min"));
  assert_true(chart_attr(dom, "msg", "data-x-min") == 0.0);
  assert_true(chart_attr(dom, "msg", "data-y-min") == 0.0);
  assert_true(chart_attr(dom, "msg", "data-series") == 2.0);
  assert_true(chart_attr(dom, "phases", "data-y-min") == 0.0);
  /* mask drift: a count, from 0 in whole numbers, from iteration 0 */
  assert_true(y_from_zero_in_whole_numbers(dom, "drift"));
  assert_true(chart_attr(dom, "drift", "data-x-min") == 0.0);
  /* resnet20's 20+ layers: a band, the median and the top layers, with a legend */
  static const char *const per_layer[] = {"r_intra", "s_intra", "r_inter", "s_inter", "rho1", "rho2"};
  for (int i = 0; i < 6; i++) {
    double series = chart_attr(dom, per_layer[i], "data-series");
    print_message("%s: %g series, legend %g\n", per_layer[i], series,
                  chart_attr(dom, per_layer[i], "data-legend"));
    assert_true(series >= 3 && series <= 8);
    assert_true(chart_attr(dom, per_layer[i], "data-legend") == 1.0);
    assert_true(chart_attr(dom, per_layer[i], "data-x-min") == 0.0);
  }
  /* named in the canvas's aria-label: the band over every layer, the median,
   * and layers by their parameter names */
  const char *label = strstr(dom, "aria-label=\"Intra primal residual per layer: ");
  assert_non_null(label);
  print_message("%.300s\n", label);
  assert_non_null(strstr(label, "max over "));
  assert_non_null(strstr(label, "median"));
  assert_true(atoi(strstr(label, "max over ") + 9) > 8);
  assert_non_null(strstr(label, ".weight"));
  /* the summary's inter-node MB is the job's (it read a shifted column: 0.00) */
  pxj_t *j = job_json(job);
  assert_non_null(j);
  double mb = atof(cell(dom, "inter MB"));
  print_message("summary: inter MB '%s', the job's bytes_inter %.0f\n", cell(dom, "inter MB"),
                pxj_num(j, "bytes_inter"));
  assert_true(pxj_num(j, "bytes_inter") > 0);
  if (expect_live) /* still sending: the page saw fewer bytes than asked now */
    assert_true(mb > 0 && mb <= pxj_num(j, "bytes_inter") / 1e6 + 0.006);
  else assert_true(fabs(mb - pxj_num(j, "bytes_inter") / 1e6) <= 0.006);
  pxj_free(j);
}

static void test_dashboard_of_a_running_job_has_data_in_every_chart(void **state) {
  (void)state;
  check_dashboard(F.job, 1);
}

static void test_dashboard_of_a_finished_job_has_data_in_every_chart(void **state) {
  (void)state;
  /* end the long job, then run a short one to the end */
  Prunex__V1__CancelJobResponse *cr = NULL;
  assert_int_equal(px_rpc_cancel_job(F.ch, F.job, "test", 0, &cr), PX_OK);
  px_rpc_message_free(cr);
  assert_int_equal(pxt_wait_job(F.ch, F.job, PRUNEX__V1__JOB_STATE__JOB_STATE_CANCELLED, 30000),
                   PRUNEX__V1__JOB_STATE__JOB_STATE_CANCELLED);
  pxt_job_t j;
  pxt_job_init(&j, NULL, 2, 1, 5, 1);
  j.spec.name = "dash-short";
  assert_int_equal(pxt_job_submit(F.ch, &j, F.done, sizeof F.done), PX_OK);
  assert_int_equal(pxt_wait_job(F.ch, F.done, 0, 60000), PRUNEX__V1__JOB_STATE__JOB_STATE_SUCCEEDED);
  /* /metrics at once: the ended job's final series (checked in the next test) */
  F.ended = malloc(1 << 20);
  assert_non_null(F.ended);
  assert_int_equal(pxt_http_get(F.d.http_port, "/metrics", F.ended, 1 << 20), 200);
  check_dashboard(F.done, 0);
  /* and the overview lists both jobs with its two charts drawn */
  char url[256];
  snprintf(url, sizeof url, "http://127.0.0.1:%d/", F.d.http_port);
  const char *dom = dump_dom(url);
  int charts, with_points;
  count_charts(dom, &charts, &with_points);
  assert_int_equal(charts, 2);
  assert_int_equal(with_points, 2);
  assert_non_null(strstr(dom, F.job));
  assert_non_null(strstr(dom, F.done));
  /* counts: from 0, whole-number ticks (2 nodes, 2 jobs: Chart.js would put
   * ticks at 0.2 steps) */
  assert_true(y_from_zero_in_whole_numbers(dom, "nodes"));
  assert_true(y_from_zero_in_whole_numbers(dom, "jobs"));
  /* table times carry their zone (UTC, as the logs) */
  const char *created = cell(dom, "created");
  print_message("created: '%s'\n", created);
  assert_true(strlen(created) > 4 && !strcmp(created + strlen(created) - 4, " UTC"));
  /* who owns each job (no tokens here: nobody, "-"), and the
   * accuracy as pxctl prints it, digit for digit */
  assert_non_null(strstr(dom, "data-col=\"user\""));
  assert_string_equal(cell(dom, "user"), "-");
  char acc[64];
  snprintf(acc, sizeof acc, "%s", cell(dom, "test acc"));
  static pxt_result_t r;
  char coord[96];
  snprintf(coord, sizeof coord, "PRUNEX_COORDINATOR=%s", F.d.target);
  const char *env[] = {coord, NULL};
  const char *status[] = {"status", F.done, NULL};
  pxt_pxctl(&r, F.d.dir, status, env, 30000);
  char want[96];
  snprintf(want, sizeof want, "test accuracy %s,", acc);
  print_message("dashboard test acc '%s'\n", acc);
  if (r.code != 0 || !strchr(acc, '%') || !strstr(r.out, want)) pxt_show("pxctl status", &r), fail();
}

/* The value of the sample of family `name` whose labels start with
 * job_id="job" (and contain `also`, "" for any) in a /metrics body; NAN
 * when there is none. */
static double job_sample(const char *body, const char *name, const char *job, const char *also) {
  char key[256];
  snprintf(key, sizeof key, "\n%s{job_id=\"%s\"", name, job);
  for (const char *p = strstr(body, key); p; p = strstr(p + 1, key)) {
    const char *close = strstr(p, "} ");
    const char *in = also[0] ? strstr(p, also) : p;
    if (close && in && in < close) return strtod(close + 2, NULL);
  }
  return NAN;
}

/* A job that ended: its series carry the final values for ENDED_S seconds
 * (the last iteration, the whole job's totals, when it ended), pass
 * promtool, then go; the counts by state stay. */
static void test_an_ended_jobs_series_keep_its_final_values_then_go(void **state) {
  (void)state;
  assert_non_null(F.ended);
  pxj_t *j = job_json(F.done);
  assert_non_null(j);
  double fin = pxj_num(j, "finished_unix_ms"), inter = pxj_num(j, "bytes_inter");
  double it = job_sample(F.ended, "prunex_job_iteration", F.done, "");
  double bytes = job_sample(F.ended, "prunex_job_inter_bytes_total", F.done, "");
  double ended = job_sample(F.ended, "prunex_job_ended_time_seconds", F.done,
                            "state=\"succeeded\"");
  print_message("%s ended at %.3f: iteration %g, inter bytes %g (job: %g), ended %.3f\n",
                F.done, fin / 1000, it, bytes, inter, ended);
  if (isnan(it)) fprintf(stderr, "%s\n", F.ended);
  assert_true(it == 4.0); /* 5 iterations: the last */
  assert_true(bytes == inter && inter > 0);
  assert_true(fabs(ended - fin / 1000) < 0.0015);
  pxj_free(j);
  if (access(PROMTOOL, X_OK) == 0) {
    char in[400], out[400], err[400];
    snprintf(in, sizeof in, "%s/ended.txt", F.d.dir);
    snprintf(out, sizeof out, "%s/promtool-ended.out", F.d.dir);
    snprintf(err, sizeof err, "%s/promtool-ended.err", F.d.dir);
    FILE *f = fopen(in, "w");
    assert_non_null(f);
    fputs(F.ended, f);
    fclose(f);
    const char *argv[] = {PROMTOOL, "check", "metrics", NULL};
    int rc = pxt_run_tool(argv, in, out, err, 30000);
    if (rc != 0) pxt_dump_file(out), pxt_dump_file(err);
    assert_int_equal(rc, 0);
  }
  /* ENDED_S after the end: gone (the cancelled long job ended before) */
  for (;;) { /* finished_unix_ms is wall-clock time */
    struct timespec now;
    clock_gettime(CLOCK_REALTIME, &now);
    if ((double)now.tv_sec * 1000 + (double)now.tv_nsec / 1e6 >= fin + ENDED_S * 1000 + 500) break;
    pxt_sleep_ms(100);
  }
  static char body[1 << 20];
  assert_int_equal(pxt_http_get(F.d.http_port, "/metrics", body, sizeof body), 200);
  char id[96];
  snprintf(id, sizeof id, "job_id=\"%s\"", F.done);
  if (strstr(body, id)) fprintf(stderr, "%s\n", body);
  assert_null(strstr(body, id));
  snprintf(id, sizeof id, "job_id=\"%s\"", F.job);
  assert_null(strstr(body, id));
  assert_null(strstr(body, "\nprunex_job_ended_time_seconds{"));
  assert_non_null(strstr(body, "prunex_jobs{state=\"succeeded\"} 1\n"));
  free(F.ended);
  F.ended = NULL;
}

/* The job object's totals are the sums of its iterations (they were read one
 * column off: "iterations" was the attempt, "bytes_inter" the count). */
static void test_job_json_totals_are_its_iterations(void **state) {
  (void)state;
  static char body[1 << 20];
  char path[256];
  snprintf(path, sizeof path, "/api/v1/jobs/%s/iterations", F.done);
  assert_int_equal(pxt_http_get(F.d.http_port, path, body, sizeof body), 200);
  pxj_t *v = pxj_parse(body);
  const pxj_t *its = pxj_get(v, "iterations");
  assert_non_null(its);
  double inter = 0, intra = 0;
  for (size_t i = 0; i < its->n; i++) {
    inter += pxj_num(its->items[i], "bytes_inter");
    intra += pxj_num(its->items[i], "bytes_intra");
  }
  pxj_t *j = job_json(F.done);
  assert_non_null(j);
  print_message("%s: %g iterations, inter %.0f, intra %.0f; sums: %zu, %.0f, %.0f\n", F.done,
                pxj_num(j, "iterations"), pxj_num(j, "bytes_inter"), pxj_num(j, "bytes_intra"),
                its->n, inter, intra);
  assert_int_equal((int)pxj_num(j, "iterations"), (int)its->n);
  assert_int_equal((int)its->n, 5);
  assert_true(inter > 0); /* 2 nodes x 1 worker: nothing intra-node */
  assert_true(pxj_num(j, "bytes_inter") == inter);
  assert_true(pxj_num(j, "bytes_intra") == intra);
  assert_int_equal((int)pxj_num(j, "attempt"), 1);
  pxj_free(j);
  pxj_free(v);
}

static void test_bad_or_busy_http_address_is_refused_clearly(void **state) {
  (void)state;
  char db[400], out[4096], err[8192], busy[64];
  snprintf(db, sizeof db, "%s/other.db", F.d.dir);
  const char *bad[] = {"--db", db, "--listen", "127.0.0.1:0", "--http", "no-port", NULL};
  assert_int_equal(pxt_coordd_run(F.d.dir, bad, out, sizeof out, err, sizeof err, 15000), 2);
  assert_non_null(strstr(err, "http"));
  /* the HTTP port of the running coordinator is taken */
  snprintf(busy, sizeof busy, "127.0.0.1:%d", F.d.http_port);
  const char *taken[] = {"--db", db, "--listen", "127.0.0.1:0", "--http", busy, NULL};
  assert_int_equal(pxt_coordd_run(F.d.dir, taken, out, sizeof out, err, sizeof err, 15000), 1);
  if (!strstr(err, "cannot listen")) fprintf(stderr, "stderr: %s\n", err);
  assert_non_null(strstr(err, "cannot listen"));
  /* how long an ended job's series stay: whole seconds, 0 to a day */
  const char *ended[] = {"--db", db, "--listen", "127.0.0.1:0", "--http", "127.0.0.1:0",
                         "--http-metrics-ended-s", "-1", NULL};
  assert_int_equal(pxt_coordd_run(F.d.dir, ended, out, sizeof out, err, sizeof err, 15000), 2);
  if (!strstr(err, "http_metrics_ended_s = '-1'")) fprintf(stderr, "stderr: %s\n", err);
  assert_non_null(strstr(err, "http_metrics_ended_s = '-1'"));
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_metrics_of_a_running_job_pass_promtool),
      cmocka_unit_test(test_prometheus_scrapes_a_prunex_series),
      cmocka_unit_test(test_json_is_paged_and_writes_null_for_missing_values),
      cmocka_unit_test(test_dashboard_of_a_running_job_has_data_in_every_chart),
      cmocka_unit_test(test_dashboard_of_a_finished_job_has_data_in_every_chart),
      cmocka_unit_test(test_an_ended_jobs_series_keep_its_final_values_then_go),
      cmocka_unit_test(test_job_json_totals_are_its_iterations),
      cmocka_unit_test(test_bad_or_busy_http_address_is_refused_clearly),
  };
  return cmocka_run_group_tests(tests, group_setup, group_teardown);
}
