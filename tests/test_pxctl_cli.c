/* pxctl, the query commands, against a real pxcoordd on loopback: help and
 * usage errors (exit 2), a bad spec refused with FILE:LINE before anything
 * reaches the coordinator, submit/status/list/cancel/nodes/metrics/drift
 * with --json parsed and their keys checked, unknown jobs and an unreachable
 * coordinator reported clearly (exit 1), JSON string escaping, and logs
 * read from a work directory; a job cancelled before any iteration has a
 * null density and model path in --json, `pxctl --json delete` answers in
 * JSON, status times say UTC, and --field reads one field of the JSON
 * per line for scripts (the bash completion, the Slurm script) with unique
 * job ids. The coordinator is driven with real RPCs
 * (a node registers, rank 0 reports iterations) as an agent would. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include "pxctl_harness.h"

typedef struct {
  pxt_coordd_t d;
  px_rpc_channel_t *ch;
  char coord_env[96];
  const char *env[2];
  pxt_result_t r;
} fixture_t;

static int setup(void **state) {
  fixture_t *f = calloc(1, sizeof *f);
  if (!f || pxt_coordd_setup(&f->d, NULL) != 0) {
    free(f);
    return -1;
  }
  if (px_rpc_channel_create(f->d.target, &f->ch) != PX_OK) return -1;
  snprintf(f->coord_env, sizeof f->coord_env, "PRUNEX_COORDINATOR=%s", f->d.target);
  f->env[0] = f->coord_env;
  f->env[1] = NULL;
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

/* pxctl with the fixture's coordinator in the environment. */
static int pxctl(fixture_t *f, const char *const *args) {
  return pxt_pxctl(&f->r, f->d.dir, args, f->env, 60000);
}

static void write_text(const char *path, const char *text) {
  FILE *fp = fopen(path, "w");
  assert_non_null(fp);
  fputs(text, fp);
  fclose(fp);
}

static const char good_spec[] =
    "name: tiny\n"
    "model:\n"
    "  name: resnet20\n"
    "dataset:\n"
    "  name: synthetic\n"
    "cluster:\n"
    "  nodes: 1\n"
    "  workers_per_node: 1\n"
    "  device: cpu\n"
    "train:\n"
    "  batch_size: 8\n"
    "  local_steps: 2\n"
    "admm:\n"
    "  max_iterations: 3\n";

static int count_jobs(px_rpc_channel_t *ch) {
  Prunex__V1__ListJobsRequest req = PRUNEX__V1__LIST_JOBS_REQUEST__INIT;
  Prunex__V1__ListJobsResponse *resp = NULL;
  if (px_rpc_list_jobs(ch, &req, 0, &resp) != PX_OK) return -1;
  int n = (int)resp->n_jobs;
  px_rpc_message_free(resp);
  return n;
}

/* Runs pxctl and parses its stdout as one JSON document. */
static pxj_t *pxctl_json(fixture_t *f, const char *const *args) {
  if (pxctl(f, args) != 0) {
    pxt_show(args[0], &f->r);
    return NULL;
  }
  pxj_t *v = pxj_parse(f->r.out);
  if (!v) pxt_show("not JSON", &f->r);
  return v;
}

/* Submits good_spec with pxctl; the id goes to job (cap 64). */
static void submit_good(fixture_t *f, char *job) {
  char spec[400];
  snprintf(spec, sizeof spec, "%s/tiny.yaml", f->d.dir);
  write_text(spec, good_spec);
  pxj_t *v = pxctl_json(f, (const char *[]){"submit", spec, "--json", NULL});
  assert_non_null(v);
  assert_int_equal(v->type, PXJ_OBJ);
  assert_string_equal(pxj_str(v, "name"), "tiny");
  assert_string_equal(pxj_str(v, "spec_file"), spec);
  snprintf(job, 64, "%s", pxj_str(v, "job_id"));
  assert_true(strncmp(job, "job-", 4) == 0);
  pxj_free(v);
}

/* ---- help and usage ------------------------------------------------------------ */

static void test_help_exits_0_for_pxctl_and_every_command(void **state) {
  fixture_t *f = *state;
  assert_int_equal(pxctl(f, (const char *[]){"--help", NULL}), 0);
  assert_non_null(strstr(f->r.out, "usage: pxctl"));
  static const char *const cmds[] = {"submit", "status", "list",  "cancel", "nodes",
                                     "metrics", "drift", "logs", "watch",  "run"};
  for (size_t i = 0; i < sizeof cmds / sizeof cmds[0]; i++) {
    assert_non_null(strstr(f->r.out, cmds[i]));
  }
  for (size_t i = 0; i < sizeof cmds / sizeof cmds[0]; i++) {
    pxt_result_t *r = &f->r;
    assert_int_equal(pxctl(f, (const char *[]){cmds[i], "--help", NULL}), 0);
    char want[64];
    snprintf(want, sizeof want, "usage: pxctl %s", cmds[i]);
    if (!strstr(r->out, want)) pxt_show(cmds[i], r);
    assert_non_null(strstr(r->out, want));
    assert_int_equal(pxctl(f, (const char *[]){"-h", cmds[i], NULL}), 0);
    assert_non_null(strstr(r->out, want));
  }
  assert_int_equal(pxctl(f, (const char *[]){"--version", NULL}), 0);
  assert_non_null(strstr(f->r.out, "pxctl "));
}

static void test_bad_usage_exits_2_with_a_message(void **state) {
  fixture_t *f = *state;
  static const struct {
    const char *args[6];
    const char *says;
  } cases[] = {
      {{NULL}, "no command"},
      {{"frobnicate", NULL}, "unknown command 'frobnicate'"},
      {{"list", "--frob", NULL}, "unknown option '--frob'"},
      {{"status", NULL}, "missing JOB"},
      {{"status", "a", "b", NULL}, "unexpected argument 'b'"},
      {{"list", "--limit", "ten", NULL}, "--limit 'ten'"},
      {{"list", "--limit", NULL}, "--limit needs a value"},
      {{"list", "--state", "sleeping", NULL}, "--state 'sleeping'"},
      {{"nodes", "--state", "running", NULL}, "--state 'running'"},
      {{"status", "job-1", "--layers", NULL}, "does not apply"},
      {{"run", "x.yaml", "--coordinator", "h:1", NULL}, "private coordinator"},
      {{"list", "--json=yes", NULL}, "takes no value"},
      {{"--coordinator", "nocolon", "list", NULL}, "HOST:PORT"},
      {{"logs", "job-1", "--json", "--follow", NULL}, "--follow"},
  };
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
    int code = pxctl(f, cases[i].args);
    if (code != 2 || !strstr(f->r.err, cases[i].says)) pxt_show(cases[i].says, &f->r);
    assert_int_equal(code, 2);
    assert_non_null(strstr(f->r.err, cases[i].says));
    assert_non_null(strstr(f->r.err, "--help"));
  }
  /* A JOB with a '/' is a finished run's directory (pxctl_offline.c): one
   * that is not a run is named, with what it lacks, and never used as a job
   * id in a path. */
  const char *dir[] = {"logs", "../etc", NULL};
  assert_int_equal(pxctl(f, dir), 1);
  assert_non_null(strstr(f->r.err, "../etc"));
  assert_null(strstr(f->r.err, "jobs/"));
}

/* ---- specs -------------------------------------------------------------------------- */

static void test_bad_spec_is_refused_with_file_and_line_and_nothing_is_submitted(void **state) {
  fixture_t *f = *state;
  char bad[400], missing[400], work[400];
  snprintf(bad, sizeof bad, "%s/bad.yaml", f->d.dir);
  write_text(bad,
             "name: broken\n"
             "model:\n"
             "  name: resnet20\n"
             "train:\n"
             "  batch_size: lots\n");
  assert_int_equal(pxctl(f, (const char *[]){"submit", bad, NULL}), 2);
  char want[480];
  snprintf(want, sizeof want, "%s:5:", bad);
  if (!strstr(f->r.err, want)) pxt_show("bad spec", &f->r);
  assert_non_null(strstr(f->r.err, want));
  assert_non_null(strstr(f->r.err, "train.batch_size"));
  assert_non_null(strstr(f->r.err, "nothing was submitted"));
  assert_string_equal(f->r.out, "");

  /* A semantic error, reported at its line too. */
  write_text(bad, "name: broken\ncluster:\n  nodes: 0\n");
  assert_int_equal(pxctl(f, (const char *[]){"submit", bad, "--json", NULL}), 2);
  assert_non_null(strstr(f->r.err, "cluster.nodes"));
  snprintf(want, sizeof want, "%s:3:", bad);
  assert_non_null(strstr(f->r.err, want));

  snprintf(missing, sizeof missing, "%s/nope.yaml", f->d.dir);
  assert_int_equal(pxctl(f, (const char *[]){"submit", missing, NULL}), 2);
  assert_non_null(strstr(f->r.err, missing));

  /* run refuses it as well, before it starts anything or makes a directory. */
  snprintf(work, sizeof work, "%s/runs", f->d.dir);
  assert_int_equal(mkdir(work, 0755), 0);
  assert_int_equal(pxctl(f, (const char *[]){"run", bad, "--work-dir", work, NULL}), 2);
  assert_non_null(strstr(f->r.err, "cluster.nodes"));
  assert_int_equal(pxt_dir_entries(work), 0);

  assert_int_equal(count_jobs(f->ch), 0);
}

/* ---- the query commands ------------------------------------------------------------- */

static void check_job_object(const pxj_t *job, const char *id, const char *state) {
  static const char *const keys[] = {"job_id",          "name",      "state",  "spec",
                                     "spec_yaml",       "reason",    "created_unix_ms",
                                     "updated_unix_ms", "node_ids",  "events", "iteration",
                                     "summary",         NULL};
  assert_int_equal(job->type, PXJ_OBJ);
  assert_true(pxj_has_keys(job, keys));
  assert_string_equal(pxj_str(job, "job_id"), id);
  assert_string_equal(pxj_str(job, "state"), state);
  assert_int_equal(pxj_get(job, "created_unix_ms")->type, PXJ_NUM);
  assert_int_equal(pxj_get(job, "events")->type, PXJ_ARR);
  assert_int_equal(pxj_get(job, "node_ids")->type, PXJ_ARR);
  const pxj_t *spec = pxj_get(job, "spec");
  assert_int_equal(spec->type, PXJ_OBJ);
  assert_string_equal(pxj_str(spec, "strategy"), "hsadmm");
  const pxj_t *cluster = pxj_get(spec, "cluster");
  assert_non_null(cluster);
  assert_true(pxj_num(cluster, "nodes") == 1.0);
  assert_string_equal(pxj_str(pxj_get(spec, "model"), "name"), "resnet20");
  assert_non_null(strstr(pxj_str(job, "spec_yaml"), "resnet20"));
  const pxj_t *sum = pxj_get(job, "summary");
  static const char *const skeys[] = {"test_accuracy", "density",    "inter_bytes",
                                      "inter_bytes_dense", "intra_bytes", "wall_s",
                                      "iterations",    "model_path", NULL};
  assert_true(pxj_has_keys(sum, skeys));
  assert_int_equal(pxj_get(sum, "inter_bytes")->type, PXJ_NUM);
}

/* Reports iteration it as rank 0 of job (2 layers, the given drift). */
static void report(fixture_t *f, const char *job, int it, int64_t drift, int frozen) {
  Prunex__V1__LayerMetrics L[2], *lp[2];
  for (int l = 0; l < 2; l++) {
    L[l] = (Prunex__V1__LayerMetrics)PRUNEX__V1__LAYER_METRICS__INIT;
    L[l].layer = l;
    L[l].name = l == 0 ? "conv1.weight" : "layer1.0.conv1.weight";
    L[l].r_intra = 0.5 / (it + 1);
    L[l].s_intra = 0.25;
    L[l].r_inter = 0.125;
    L[l].s_inter = 0.0625;
    L[l].rho1 = 1e-3;
    L[l].rho2 = 1e-3;
    L[l].density = 0.5;
    L[l].numel = 432;
    lp[l] = &L[l];
  }
  Prunex__V1__IterationReport r = PRUNEX__V1__ITERATION_REPORT__INIT;
  r.job_id = (char *)job;
  r.rank = 0;
  r.iteration = it;
  r.loss = 2.0 - 0.25 * it;
  r.train_accuracy = 0.2 + 0.1 * it;
  r.test_accuracy = it == 0 ? -1.0 : 0.15 + 0.1 * it;
  r.density = 0.5;
  r.mask_drift = drift;
  r.bytes_intra = 4000;
  r.bytes_inter = 1000;
  r.bytes_inter_dense = 4000;
  r.epoch = 0.5 * (it + 1);
  r.frozen = frozen;
  r.n_layers = 2;
  r.layers = lp;
  Prunex__V1__ControlDecision *d = NULL;
  assert_int_equal(px_rpc_report_iteration(f->ch, &r, 0, &d), PX_OK);
  px_rpc_message_free(d);
}

static void test_submit_status_list_nodes_metrics_drift_cancel_with_json(void **state) {
  fixture_t *f = *state;
  char job[64];
  submit_good(f, job);
  assert_int_equal(count_jobs(f->ch), 1);

  pxj_t *v = pxctl_json(f, (const char *[]){"status", job, "--json", NULL});
  assert_non_null(v);
  check_job_object(v, job, "PENDING");
  pxj_free(v);

  /* Human status names the job and its state. */
  assert_int_equal(pxctl(f, (const char *[]){"status", job, NULL}), 0);
  assert_non_null(strstr(f->r.out, job));
  assert_non_null(strstr(f->r.out, "PENDING"));
  /* ... and how it trains: batch and precision (fp32 unless the spec says) */
  assert_non_null(strstr(f->r.out, "training   batch 8 per worker, precision fp32"));
  assert_null(strstr(f->r.out, "compact model trains"));
  /* The only job named "tiny" is found by its name too. */
  assert_int_equal(pxctl(f, (const char *[]){"status", "tiny", NULL}), 0);
  assert_non_null(strstr(f->r.out, job));
  assert_non_null(strstr(f->r.out, "PENDING (since"));

  v = pxctl_json(f, (const char *[]){"list", "--json", NULL});
  assert_non_null(v);
  assert_int_equal(v->type, PXJ_ARR);
  assert_int_equal(v->n, 1);
  check_job_object(v->items[0], job, "PENDING");
  pxj_free(v);
  v = pxctl_json(f, (const char *[]){"--json", "list", "--state", "running", NULL});
  assert_non_null(v);
  assert_int_equal(v->type, PXJ_ARR);
  assert_int_equal(v->n, 0);
  pxj_free(v);
  assert_int_equal(pxctl(f, (const char *[]){"list", NULL}), 0);
  assert_non_null(strstr(f->r.out, "JOB"));
  assert_non_null(strstr(f->r.out, job));

  v = pxctl_json(f, (const char *[]){"nodes", "--json", NULL});
  assert_non_null(v);
  assert_int_equal(v->type, PXJ_ARR);
  assert_int_equal(v->n, 0);
  pxj_free(v);

  /* A node arrives: the job is placed on it. */
  char node[64];
  assert_int_equal(pxt_register(f->ch, "n0", 1, 0, node, sizeof node), PX_OK);
  int64_t end = pxt_now_ms() + 10000;
  while (pxt_job_state(f->ch, job) != PRUNEX__V1__JOB_STATE__JOB_STATE_SCHEDULED &&
         pxt_now_ms() < end)
    pxt_sleep_ms(20);
  v = pxctl_json(f, (const char *[]){"nodes", "--json", NULL});
  assert_non_null(v);
  assert_int_equal(v->n, 1);
  static const char *const nkeys[] = {"node_id", "name", "hostname", "state", "devices",
                                      "data_plane_addresses", "last_heartbeat_unix_ms",
                                      "job_id", "registered_unix_ms", NULL};
  assert_true(pxj_has_keys(v->items[0], nkeys));
  assert_string_equal(pxj_str(v->items[0], "node_id"), node);
  assert_string_equal(pxj_str(v->items[0], "state"), "BUSY");
  assert_string_equal(pxj_str(v->items[0], "job_id"), job);
  const pxj_t *devs = pxj_get(v->items[0], "devices");
  assert_int_equal(devs->n, 1);
  assert_string_equal(pxj_str(devs->items[0], "kind"), "CPU");
  pxj_free(v);
  assert_int_equal(pxctl(f, (const char *[]){"nodes", NULL}), 0);
  assert_non_null(strstr(f->r.out, "n0"));
  assert_non_null(strstr(f->r.out, "BUSY"));

  /* Rank 0 reports three iterations; the masks freeze at the third. */
  report(f, job, 0, 7, 0);
  report(f, job, 1, 0, 0);
  report(f, job, 2, 0, 1);
  v = pxctl_json(f, (const char *[]){"metrics", job, "--json", NULL});
  assert_non_null(v);
  assert_string_equal(pxj_str(v, "job_id"), job);
  const pxj_t *its = pxj_get(v, "iterations");
  assert_non_null(its);
  assert_int_equal(its->n, 3);
  static const char *const ikeys[] = {"iteration", "rank",        "epoch",       "loss",
                                      "train_accuracy", "test_accuracy", "density",
                                      "mask_drift", "bytes_intra", "bytes_inter",
                                      "bytes_inter_dense", "frozen", "layers", NULL};
  for (size_t i = 0; i < its->n; i++) {
    assert_true(pxj_has_keys(its->items[i], ikeys));
    assert_true(pxj_num(its->items[i], "iteration") == (double)i);
  }
  assert_true(pxj_num(its->items[0], "mask_drift") == 7.0);
  assert_true(pxj_num(its->items[1], "bytes_inter") == 1000.0);
  assert_true(fabs(pxj_num(its->items[2], "loss") - 1.5) < 1e-12);
  assert_int_equal(pxj_get(its->items[2], "frozen")->type, PXJ_BOOL);
  assert_int_equal(pxj_get(its->items[0], "layers")->n, 0);
  pxj_free(v);

  v = pxctl_json(f, (const char *[]){"metrics", job, "--layers", "--from", "1", "--json", NULL});
  assert_non_null(v);
  its = pxj_get(v, "iterations");
  assert_int_equal(its->n, 2);
  const pxj_t *layers = pxj_get(its->items[0], "layers");
  assert_int_equal(layers->n, 2);
  static const char *const lkeys[] = {"layer", "name", "r_intra", "s_intra", "r_inter",
                                      "s_inter", "rho1", "rho2", "density", NULL};
  assert_true(pxj_has_keys(layers->items[1], lkeys));
  assert_string_equal(pxj_str(layers->items[1], "name"), "layer1.0.conv1.weight");
  assert_true(pxj_num(layers->items[0], "s_inter") == 0.0625);
  pxj_free(v);

  assert_int_equal(pxctl(f, (const char *[]){"metrics", job, "--layers", NULL}), 0);
  assert_non_null(strstr(f->r.out, "TEST-ACC"));
  assert_non_null(strstr(f->r.out, "DENSITY"));
  assert_non_null(strstr(f->r.out, "R-INTRA"));
  assert_non_null(strstr(f->r.out, "conv1.weight"));

  v = pxctl_json(f, (const char *[]){"drift", job, "--json", NULL});
  assert_non_null(v);
  assert_true(pxj_get(v, "frozen")->b);
  assert_true(pxj_num(v, "frozen_at_iteration") == 2.0);
  assert_true(pxj_num(v, "last_change_iteration") == 0.0);
  assert_int_equal(pxj_get(v, "iterations")->n, 3);
  pxj_free(v);
  assert_int_equal(pxctl(f, (const char *[]){"drift", job, NULL}), 0);
  assert_non_null(strstr(f->r.out, "froze at iteration 2"));

  /* The running job's summary comes from the coordinator. */
  v = pxctl_json(f, (const char *[]){"status", job, "--json", NULL});
  assert_non_null(v);
  check_job_object(v, job, "RUNNING");
  assert_true(pxj_num(pxj_get(v, "summary"), "iterations") == 3.0);
  assert_true(pxj_num(pxj_get(v, "summary"), "inter_bytes") == 3000.0);
  pxj_free(v);

  v = pxctl_json(f, (const char *[]){"cancel", job, "--reason", "test is done", "--json", NULL});
  assert_non_null(v);
  check_job_object(v, job, "CANCELLED");
  assert_non_null(strstr(pxj_str(v, "reason"), "test is done"));
  pxj_free(v);
  assert_int_equal(pxctl(f, (const char *[]){"cancel", job, NULL}), 1);
  assert_non_null(strstr(f->r.err, "already finished"));

  /* watch of a finished job returns at once: 1 because it did not succeed. */
  assert_int_equal(pxctl(f, (const char *[]){"watch", job, NULL}), 1);
  assert_non_null(strstr(f->r.out, "CANCELLED"));
  v = NULL;
  assert_int_equal(pxctl(f, (const char *[]){"watch", job, "--json", NULL}), 1);
  v = pxj_parse(f->r.out);
  assert_non_null(v);
  assert_string_equal(pxj_str(v, "state"), "CANCELLED");
  pxj_free(v);

  /* A second job named "tiny": the name no longer says which. */
  char job2[64];
  submit_good(f, job2);
  assert_int_equal(pxctl(f, (const char *[]){"status", "tiny", NULL}), 1);
  assert_non_null(strstr(f->r.err, "2 jobs are named 'tiny'"));
  assert_non_null(strstr(f->r.err, job2));
}

/* A job cancelled while pending measured nothing and has no model:
 * null, not 0 and ""; delete takes --json wherever it is given; times are UTC. */
static void test_cancelled_job_has_nulls_and_delete_speaks_json(void **state) {
  fixture_t *f = *state;
  char job[64];
  submit_good(f, job);
  pxj_t *v = pxctl_json(f, (const char *[]){"cancel", job, "--json", NULL});
  assert_non_null(v);
  pxj_free(v);
  v = pxctl_json(f, (const char *[]){"status", job, "--json", NULL});
  assert_non_null(v);
  check_job_object(v, job, "CANCELLED");
  const pxj_t *sum = pxj_get(v, "summary");
  static const char *const nulls[] = {"density", "model_path", "test_accuracy"};
  for (int i = 0; i < 3; i++) {
    const pxj_t *x = pxj_get(sum, nulls[i]);
    assert_non_null(x);
    if (x->type != PXJ_NULL) fprintf(stderr, "summary.%s is not null: %s\n", nulls[i], f->r.out);
    assert_int_equal(x->type, PXJ_NULL);
  }
  assert_true(pxj_num(sum, "iterations") == 0.0);
  pxj_free(v);
  /* human status: times with their zone */
  assert_int_equal(pxctl(f, (const char *[]){"status", job, NULL}), 0);
  assert_non_null(strstr(f->r.out, " UTC ("));
  /* delete --json, the option before or after the command */
  v = pxctl_json(f, (const char *[]){"--json", "delete", job, NULL});
  assert_non_null(v);
  assert_string_equal(pxj_str(v, "job_id"), job);
  assert_int_equal(pxj_get(v, "deleted")->type, PXJ_BOOL);
  assert_true(pxj_get(v, "deleted")->b);
  pxj_free(v);
  assert_int_equal(count_jobs(f->ch), 0);
  /* deleting it again: exit 1 with a message, nothing on stdout */
  assert_int_equal(pxctl(f, (const char *[]){"delete", job, "--json", NULL}), 1);
  assert_non_null(strstr(f->r.err, job));
  assert_string_equal(f->r.out, "");
}

/* --field: one value per line, read from the JSON, for scripts: every job
 * id once (the completion used to repeat them), one object's field, an
 * unknown field refused naming the ones there are. */
static void test_field_prints_one_value_per_line(void **state) {
  fixture_t *f = *state;
  char a[64], b[64];
  submit_good(f, a);
  submit_good(f, b);
  assert_int_equal(pxctl(f, (const char *[]){"list", "--field", "job_id", NULL}), 0);
  char want[160];
  snprintf(want, sizeof want, "%s\n%s\n", b, a); /* newest first */
  assert_string_equal(f->r.out, want);
  assert_int_equal(pxctl(f, (const char *[]){"--field=name", "status", a, NULL}), 0);
  assert_string_equal(f->r.out, "tiny\n");
  /* numbers as JSON (no iteration yet: -1, as the proto says) */
  assert_int_equal(pxctl(f, (const char *[]){"list", "--field", "iteration", NULL}), 0);
  assert_string_equal(f->r.out, "-1\n-1\n");
  assert_int_equal(pxctl(f, (const char *[]){"nodes", "--field", "name", NULL}), 0);
  assert_string_equal(f->r.out, "");
  assert_int_equal(pxctl(f, (const char *[]){"list", "--field", "nosuch", NULL}), 2);
  assert_string_equal(f->r.out, "");
  assert_non_null(strstr(f->r.err, "--field nosuch"));
  assert_non_null(strstr(f->r.err, "job_id, name, state"));
  assert_int_equal(pxctl(f, (const char *[]){"list", "--field", NULL}), 2);
  assert_non_null(strstr(f->r.err, "--field needs a value"));
}

static void test_unknown_job_is_reported_clearly(void **state) {
  fixture_t *f = *state;
  static const char *const cmds[] = {"status", "cancel", "metrics", "drift", "watch"};
  for (size_t i = 0; i < sizeof cmds / sizeof cmds[0]; i++) {
    int code = pxctl(f, (const char *[]){cmds[i], "job-999999", NULL});
    if (code != 1 || !strstr(f->r.err, "no job 'job-999999'")) pxt_show(cmds[i], &f->r);
    assert_int_equal(code, 1);
    assert_non_null(strstr(f->r.err, "no job 'job-999999'"));
    assert_int_equal(pxctl(f, (const char *[]){cmds[i], "job-999999", "--json", NULL}), 1);
    assert_string_equal(f->r.out, "");
  }
}

static void test_unreachable_coordinator_names_it_and_the_grpc_status(void **state) {
  fixture_t *f = *state;
  /* A port nobody listens on: the fixture's own daemon is on another. */
  const char *const args[] = {"--coordinator", "127.0.0.1:1", "list", NULL};
  assert_int_equal(pxt_pxctl(&f->r, f->d.dir, args, NULL, 60000), 1);
  assert_non_null(strstr(f->r.err, "127.0.0.1:1"));
  assert_non_null(strstr(f->r.err, "UNAVAILABLE"));
  const char *env[] = {"PRUNEX_COORDINATOR=127.0.0.1:1", NULL};
  assert_int_equal(pxt_pxctl(&f->r, f->d.dir, (const char *[]){"status", "job-1", NULL}, env,
                             60000),
                   1);
  assert_non_null(strstr(f->r.err, "coordinator 127.0.0.1:1"));
}

static void test_json_strings_are_escaped(void **state) {
  fixture_t *f = *state;
  char spec[400];
  snprintf(spec, sizeof spec, "%s/esc.yaml", f->d.dir);
  /* Quotes, a backslash and non-ASCII text in the job name; a tab and
   * quotes in a comment, which travels in spec_yaml. */
  write_text(spec, "# a\t\"tabbed\" comment\n"
                   "name: \"q\\\"uote \\\\ \xc3\xa9t\xc3\xa9 \xe2\x82\xac\"\n");
  char job[64];
  pxj_t *v = pxctl_json(f, (const char *[]){"submit", spec, "--json", NULL});
  assert_non_null(v);
  snprintf(job, sizeof job, "%s", pxj_str(v, "job_id"));
  pxj_free(v);
  v = pxctl_json(f, (const char *[]){"status", job, "--json", NULL});
  assert_non_null(v);
  assert_string_equal(pxj_str(v, "name"), "q\"uote \\ \xc3\xa9t\xc3\xa9 \xe2\x82\xac");
  assert_non_null(strstr(pxj_str(v, "spec_yaml"), "# a\t\"tabbed\" comment\n"));
  pxj_free(v);
}

static void test_logs_reads_rank_files_and_says_when_they_are_elsewhere(void **state) {
  fixture_t *f = *state;
  char work[400], dir[480], path[560];
  snprintf(work, sizeof work, "%s/work", f->d.dir);
  snprintf(dir, sizeof dir, "%s/jobs", work);
  assert_int_equal(mkdir(work, 0755), 0);
  assert_int_equal(mkdir(dir, 0755), 0);
  snprintf(dir, sizeof dir, "%s/jobs/job-000042", work);
  assert_int_equal(mkdir(dir, 0755), 0);
  snprintf(path, sizeof path, "%s/rank-0.log", dir);
  write_text(path, "rank zero line 1\nrank zero line 2\n");
  snprintf(path, sizeof path, "%s/rank-1.log", dir);
  write_text(path, "rank one \"quoted\"\n");

  assert_int_equal(pxctl(f, (const char *[]){"logs", "job-000042", "--work-dir", work, "--rank",
                                             "1", NULL}),
                   0);
  assert_string_equal(f->r.out, "rank one \"quoted\"\n");
  assert_int_equal(pxctl(f, (const char *[]){"logs", "job-000042", "--work-dir", work, NULL}), 0);
  assert_non_null(strstr(f->r.out, "rank zero line 2"));
  assert_non_null(strstr(f->r.out, "rank one"));

  /* PRUNEX_WORK_DIR is the default, --json gives the texts. */
  char wenv[480];
  snprintf(wenv, sizeof wenv, "PRUNEX_WORK_DIR=%s", work);
  const char *env[] = {f->coord_env, wenv, NULL};
  assert_int_equal(pxt_pxctl(&f->r, f->d.dir, (const char *[]){"logs", "job-000042", "--json", NULL},
                             env, 60000),
                   0);
  pxj_t *v = pxj_parse(f->r.out);
  assert_non_null(v);
  const pxj_t *files = pxj_get(v, "files");
  assert_int_equal(files->n, 2);
  assert_true(pxj_num(files->items[1], "rank") == 1.0);
  assert_string_equal(pxj_str(files->items[1], "text"), "rank one \"quoted\"\n");
  pxj_free(v);

  /* A rank that did not run here, a job whose logs are not here. */
  assert_int_equal(pxctl(f, (const char *[]){"logs", "job-000042", "--work-dir", work, "--rank",
                                             "5", NULL}),
                   1);
  assert_non_null(strstr(f->r.err, "not on this host"));
  assert_non_null(strstr(f->r.err, "ranks 0, 1"));
  char job[64];
  submit_good(f, job);
  assert_int_equal(pxctl(f, (const char *[]){"logs", job, "--work-dir", work, NULL}), 1);
  assert_non_null(strstr(f->r.err, "not on this host"));
  assert_int_equal(pxctl(f, (const char *[]){"logs", "job-777777", "--work-dir", work, NULL}), 1);
  assert_non_null(strstr(f->r.err, "no job 'job-777777'"));
}

static void test_logs_follow_prints_new_lines_until_the_job_ends(void **state) {
  fixture_t *f = *state;
  char job[64], work[400], dir[560], log[600], outp[400], errp[400];
  submit_good(f, job);
  snprintf(work, sizeof work, "%s/work", f->d.dir);
  assert_int_equal(mkdir(work, 0755), 0);
  snprintf(dir, sizeof dir, "%s/jobs", work);
  assert_int_equal(mkdir(dir, 0755), 0);
  snprintf(dir, sizeof dir, "%s/jobs/%s", work, job);
  assert_int_equal(mkdir(dir, 0755), 0);
  snprintf(log, sizeof log, "%s/rank-0.log", dir);
  write_text(log, "first\n");
  snprintf(outp, sizeof outp, "%s/follow.out", f->d.dir);
  snprintf(errp, sizeof errp, "%s/follow.err", f->d.dir);
  const char *args[] = {"logs", job, "--follow", "--work-dir", work, NULL};
  pid_t pid = pxt_pxctl_start(args, f->env, outp, errp);
  assert_true(pid > 0);
  char out[4096];
  int64_t end = pxt_now_ms() + 30000;
  do {
    pxt_sleep_ms(50);
    pxt_read_file(outp, out, sizeof out);
  } while (!strstr(out, "first") && pxt_now_ms() < end);
  assert_non_null(strstr(out, "[rank 0] first"));
  FILE *fp = fopen(log, "a");
  assert_non_null(fp);
  fputs("second line\nno newline yet", fp);
  fclose(fp);
  do {
    pxt_sleep_ms(50);
    pxt_read_file(outp, out, sizeof out);
  } while (!strstr(out, "second line") && pxt_now_ms() < end);
  assert_non_null(strstr(out, "[rank 0] second line\n"));
  assert_null(strstr(out, "no newline yet"));
  /* The job ends: follow prints the rest and exits 0. */
  Prunex__V1__CancelJobResponse *cr = NULL;
  assert_int_equal(px_rpc_cancel_job(f->ch, job, "test", 0, &cr), PX_OK);
  px_rpc_message_free(cr);
  int status = pxt_wait_pid(pid, 30000);
  if (status == -1) {
    kill(pid, SIGKILL);
    pxt_wait_pid(pid, 5000);
  }
  assert_true(status != -1 && WIFEXITED(status));
  assert_int_equal(WEXITSTATUS(status), 0);
  pxt_read_file(outp, out, sizeof out);
  assert_non_null(strstr(out, "[rank 0] no newline yet\n"));
}

/* A spec named `name` on synthetic data, one CPU worker, with the extra
 * top-level YAML `more`, written to DIR/name.yaml, whose path goes to spec. */
static void small_spec(fixture_t *f, char *spec, size_t n, const char *name, const char *more) {
  char text[600];
  snprintf(spec, n, "%s/%s.yaml", f->d.dir, name);
  snprintf(text, sizeof text,
           "name: %s\nmodel: {name: resnet20}\ndataset: {name: synthetic}\n"
           "cluster: {nodes: 1, workers_per_node: 1, device: cpu}\n%s",
           name, more);
  write_text(spec, text);
}

/* Status says the precision, whether the compact model trains after the
 * freeze, the uncoupled convs' keep and a MAC budget, as the spec asks. */
static void test_status_shows_precision_and_compact_training(void **state) {
  fixture_t *f = *state;
  char spec[400];
  small_spec(f, spec, sizeof spec, "compact",
             "train: {batch_size: 16, local_steps: 2, precision: bf16}\n"
             "prune: {channel_keep: 0.5, compact_training: true, uncoupled_channel_keep: 1}\n");
  assert_int_equal(pxctl(f, (const char *[]){"submit", spec, NULL}), 0);
  assert_int_equal(pxctl(f, (const char *[]){"status", "compact", NULL}), 0);
  assert_non_null(strstr(f->r.out, "training   batch 16 per worker, precision bf16"));
  assert_non_null(
      strstr(f->r.out, "channels 0.5, shapes 1; the compact model trains after the freeze"));
  assert_non_null(strstr(f->r.out, "uncoupled convs keep 1 of their input channels"));
  /* a MAC budget in place of the channel keep */
  small_spec(f, spec, sizeof spec, "budget",
             "train: {batch_size: 16, local_steps: 2}\nprune: {mac_keep: 0.5}\n");
  assert_int_equal(pxctl(f, (const char *[]){"submit", spec, NULL}), 0);
  assert_int_equal(pxctl(f, (const char *[]){"status", "budget", NULL}), 0);
  assert_non_null(strstr(f->r.out, "keep filters 1, channels within 0.5 of the dense MACs, shapes 1\n"));
}

/* submit --nodes/--workers-per-node (the Slurm script's allocation) change
 * the cluster shape, derive max_iterations again when the spec leaves it
 * out, and are checked like the spec. */
static void test_submit_overrides_the_cluster_shape(void **state) {
  fixture_t *f = *state;
  char spec[400];
  small_spec(f, spec, sizeof spec, "derived", "train: {batch_size: 8, local_steps: 2}\n");
  assert_int_equal(pxctl(f, (const char *[]){"submit", spec, NULL}), 0);
  char job1[64], job2[64];
  snprintf(job1, sizeof job1, "%.63s", f->r.out);
  job1[strcspn(job1, "\n")] = '\0';
  assert_int_equal(pxctl(f, (const char *[]){"submit", spec, "--nodes", "3",
                                             "--workers-per-node", "2", NULL}),
                   0);
  snprintf(job2, sizeof job2, "%.63s", f->r.out);
  job2[strcspn(job2, "\n")] = '\0';
  Prunex__V1__Job *a = NULL, *b = NULL;
  assert_int_equal(px_rpc_get_job(f->ch, job1, 0, &a), PX_OK);
  assert_int_equal(px_rpc_get_job_ex(f->ch, job2, 1, 0, &b), PX_OK); /* with spec_yaml */
  assert_int_equal(b->spec->cluster->nodes, 3);
  assert_int_equal(b->spec->cluster->workers_per_node, 2);
  /* 6 ranks instead of 1: fewer steps per epoch, fewer derived iterations */
  printf("max_iterations: %d on 1x1, %d on 3x2\n", a->spec->admm->max_iterations,
         b->spec->admm->max_iterations);
  assert_true(b->spec->admm->max_iterations < a->spec->admm->max_iterations);
  int32_t want_3x2 = b->spec->admm->max_iterations;
  assert_non_null(strstr(b->spec_yaml, "# pxctl submit --nodes 3 --workers-per-node 2"));
  px_rpc_message_free(a);
  px_rpc_message_free(b);
  assert_int_equal(pxctl(f, (const char *[]){"submit", spec, "--nodes", "0", NULL}), 2);
  assert_non_null(strstr(f->r.err, "--nodes '0'"));
  /* The parser says whether max_iterations was given: a comment that names
   * it leaves it derived (for the new shape); a value written stays. */
  static const char *const tails[2] = {"# admm.max_iterations: derived\n",
                                       "admm: {max_iterations: 4}\n"};
  for (int k = 0; k < 2; k++) {
    char text[512];
    snprintf(text, sizeof text,
             "name: derived\nmodel: {name: resnet20}\ndataset: {name: synthetic}\n"
             "cluster: {nodes: 1, workers_per_node: 1, device: cpu}\n"
             "train: {batch_size: 8, local_steps: 2}\n%s", tails[k]);
    write_text(spec, text);
    assert_int_equal(pxctl(f, (const char *[]){"submit", spec, "--nodes", "3",
                                               "--workers-per-node", "2", NULL}),
                     0);
    snprintf(job2, sizeof job2, "%.63s", f->r.out);
    job2[strcspn(job2, "\n")] = '\0';
    Prunex__V1__Job *c = NULL;
    assert_int_equal(px_rpc_get_job(f->ch, job2, 0, &c), PX_OK);
    assert_int_equal(c->spec->admm->max_iterations, k == 0 ? want_3x2 : 4);
    px_rpc_message_free(c);
  }
}

/* An image folder's budget under a new shape (the Slurm script's
 * allocation) is derived from the folder's own image count, which the
 * parser recorded, never from a default (it was once 60,000); submit and
 * status say how it was derived. */
static void test_submit_derives_a_folders_budget_from_its_images(void **state) {
  fixture_t *f = *state;
  char dir[400], p[480], spec[400], text[800], job[64];
  snprintf(dir, sizeof dir, "%s/imgs", f->d.dir);
  const char *made[] = {"", "/train", "/train/a", "/train/b", "/val", "/val/a", "/val/b"};
  for (int i = 0; i < 7; i++) {
    snprintf(p, sizeof p, "%s%s", dir, made[i]);
    assert_int_equal(mkdir(p, 0755), 0);
  }
  for (int i = 0; i < 22; i++) { /* 10 + 10 training images, one of each class to validate */
    snprintf(p, sizeof p, "%s/%s/%s/%d.png", dir, i < 20 ? "train" : "val", i % 2 ? "b" : "a", i);
    write_text(p, "");
  }
  snprintf(spec, sizeof spec, "%s/folder.yaml", f->d.dir);
  snprintf(text, sizeof text,
           "name: folderjob\nmodel: {name: resnet20, num_classes: 2}\n"
           "dataset: {name: folder, path: %s, channels: 1, image_size: 8}\n"
           "cluster: {nodes: 1, workers_per_node: 1, device: cpu}\n"
           "train: {batch_size: 2, local_steps: 1, epochs: 1}\n", dir);
  write_text(spec, text);
  assert_int_equal(pxctl(f, (const char *[]){"submit", spec, "--nodes", "2", NULL}), 0);
  snprintf(job, sizeof job, "%.63s", f->r.out);
  job[strcspn(job, "\n")] = '\0';
  if (!strstr(f->r.err, "admm.max_iterations: 5 iterations, derived: 1 epoch of 20 training "
                        "images over 2 nodes x 1 worker, batch 2, 1 local step per iteration"))
    fail_msg("submit said: %s", f->r.err);
  Prunex__V1__Job *j = NULL;
  assert_int_equal(px_rpc_get_job(f->ch, job, 0, &j), PX_OK);
  assert_int_equal(j->spec->admm->max_iterations, 5); /* 20 images / 2 ranks / batch 2 */
  assert_int_equal(j->spec->dataset->train_samples, 20);
  px_rpc_message_free(j);
  assert_int_equal(pxctl(f, (const char *[]){"status", job, NULL}), 0);
  assert_non_null(strstr(f->r.out, "budget     5 iterations, derived: 1 epoch of 20 training"));
}

int main(void) {
  if (access(PXT_PXCTL, X_OK) != 0) {
    fprintf(stderr, "pxctl is not built (%s)\n", PXT_PXCTL);
    return 1;
  }
  const struct CMUnitTest tests[] = {
      cmocka_unit_test_setup_teardown(test_help_exits_0_for_pxctl_and_every_command, setup,
                                      teardown),
      cmocka_unit_test_setup_teardown(test_bad_usage_exits_2_with_a_message, setup, teardown),
      cmocka_unit_test_setup_teardown(
          test_bad_spec_is_refused_with_file_and_line_and_nothing_is_submitted, setup, teardown),
      cmocka_unit_test_setup_teardown(test_submit_status_list_nodes_metrics_drift_cancel_with_json,
                                      setup, teardown),
      cmocka_unit_test_setup_teardown(test_cancelled_job_has_nulls_and_delete_speaks_json, setup,
                                      teardown),
      cmocka_unit_test_setup_teardown(test_field_prints_one_value_per_line, setup, teardown),
      cmocka_unit_test_setup_teardown(test_unknown_job_is_reported_clearly, setup, teardown),
      cmocka_unit_test_setup_teardown(test_unreachable_coordinator_names_it_and_the_grpc_status,
                                      setup, teardown),
      cmocka_unit_test_setup_teardown(test_json_strings_are_escaped, setup, teardown),
      cmocka_unit_test_setup_teardown(test_logs_reads_rank_files_and_says_when_they_are_elsewhere,
                                      setup, teardown),
      cmocka_unit_test_setup_teardown(test_submit_overrides_the_cluster_shape, setup, teardown),
      cmocka_unit_test_setup_teardown(test_submit_derives_a_folders_budget_from_its_images, setup,
                                      teardown),
      cmocka_unit_test_setup_teardown(test_status_shows_precision_and_compact_training, setup,
                                      teardown),
      cmocka_unit_test_setup_teardown(test_logs_follow_prints_new_lines_until_the_job_ends, setup,
                                      teardown),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
