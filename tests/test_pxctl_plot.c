/* Figures and exports of a finished run, with the real programs:
 * two tiny `pxctl run`s (hsadmm and ddp, 2 nodes x 1 CPU worker, resnet20
 * on the synthetic data set, a few iterations) keep their metrics
 * databases in OUTPUT/metrics; `pxctl plot` overlays the two from their
 * output directories into PNG (1200x800, read from the IHDR chunk) and SVG
 * (width and height 1200 and 800) files; a pxcoordd started on the kept
 * database serves `pxctl metrics --csv` (the expected columns, one row per
 * iteration, every test accuracy a number) and --json (null, never -1),
 * `pxctl run`'s progress shows the rate, the ETA and "drift N of M groups",
 * `pxctl drift` ("N of M groups") and finds the job by its name. The
 * figures do not mislead: every axis of a quantity that starts
 * at 0 starts at 0 in plot.gp, bytes per iteration are drawn beside their
 * dense line, the per-layer figures draw the min-max and 10-90 % bands and
 * the median over the 65 layers (the band file checked against the layers
 * file) and the 3 layers largest at the end by name, and gnuplot warns of
 * nothing, also for a ddp run alone (drift all 0: an "empty y range" for
 * the old script). gnuplot missing skips the plot tests (scripts/bootstrap
 * installs gnuplot-nox). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include "pxctl_harness.h"

typedef struct {
  char dir[256];
  char o1[320], o2[320], figs[320];
  pxt_result_t r;
} fixture_t;

static fixture_t *F;

static void write_spec(const char *path, const char *name, const char *strategy, int iters) {
  FILE *fp = fopen(path, "w");
  assert_non_null(fp);
  fprintf(fp,
          "name: %s\nstrategy: %s\nmodel:\n  name: resnet20\ndataset:\n  name: synthetic\n"
          "  augment: false\ncluster:\n  nodes: 2\n  workers_per_node: 1\n  device: cpu\n"
          "train:\n  batch_size: 8\n  local_steps: 1\n  lr: 0.05\nprune:\n  filter_keep: 0.5\n"
          "admm:\n  max_iterations: %d\n",
          name, strategy, iters);
  fclose(fp);
}

static int run_job(const char *name, const char *strategy, int iters, const char *out) {
  char spec[400], runs[400];
  snprintf(spec, sizeof spec, "%s/%s.yaml", F->dir, name);
  snprintf(runs, sizeof runs, "%s/runs", F->dir);
  mkdir(runs, 0755);
  write_spec(spec, name, strategy, iters);
  const char *args[] = {"run", spec, "--json", "--work-dir", runs, "--output", out, NULL};
  int code = pxt_pxctl(&F->r, F->dir, args, NULL, 120000);
  if (code != 0) pxt_show("pxctl run", &F->r);
  return code;
}

static int group_setup(void **state) {
  (void)state;
  F = calloc(1, sizeof *F);
  if (!F || pxt_mkdtemp(F->dir, sizeof F->dir) != 0) return -1;
  snprintf(F->o1, sizeof F->o1, "%s/out-hsadmm", F->dir);
  snprintf(F->o2, sizeof F->o2, "%s/out-ddp", F->dir);
  snprintf(F->figs, sizeof F->figs, "%s/figs", F->dir);
  if (access(PXT_PXAGENT, X_OK) != 0 || access(PXT_PXWORKER, X_OK) != 0) return -1;
  return 0;
}

static int group_teardown(void **state) {
  (void)state;
  pxt_rmtree(F->dir);
  free(F);
  return 0;
}

static void test_run_keeps_the_metrics_databases_next_to_the_model(void **state) {
  (void)state;
  assert_int_equal(run_job("plot-hsadmm", "hsadmm", 4, F->o1), 0);
  /* the progress lines (stderr under --json) carry the rate, the ETA while
   * running and the drift out of the mask's groups */
  if (!strstr(F->r.err, " it/s") || !strstr(F->r.err, "  ETA ") || !strstr(F->r.err, " groups"))
    pxt_show("pxctl run progress", &F->r);
  assert_non_null(strstr(F->r.err, " it/s"));
  assert_non_null(strstr(F->r.err, "  ETA "));
  assert_non_null(strstr(F->r.err, " of "));
  assert_non_null(strstr(F->r.err, " groups"));
  char line[8192];
  pxj_t *v = pxj_parse(pxt_last_line(F->r.out, line, sizeof line));
  assert_non_null(v);
  char want[400];
  snprintf(want, sizeof want, "%s/metrics", F->o1);
  assert_string_equal(pxj_str(v, "metrics_dir"), want);
  pxj_free(v);
  snprintf(want, sizeof want, "%s/metrics/coordinator.db", F->o1);
  assert_true(pxt_exists(want));
  snprintf(want, sizeof want, "%s/metrics/node-0-metrics.db", F->o1);
  assert_true(pxt_exists(want));
  snprintf(want, sizeof want, "%s/model.safetensors", F->o1);
  assert_true(pxt_exists(want));
  assert_int_equal(run_job("plot-ddp", "ddp", 3, F->o2), 0);
}

/* 1 when the (text) file contains needle. */
static int pxt_file_contains_text(const char *path, const char *needle) {
  static char buf[1 << 21];
  pxt_read_file(path, buf, sizeof buf);
  return strstr(buf, needle) != NULL;
}

/* Width and height of a PNG file from its IHDR chunk; 0 when not a PNG. */
static int png_size(const char *path, unsigned *w, unsigned *h) {
  unsigned char b[24];
  FILE *f = fopen(path, "rb");
  if (!f) return 0;
  size_t n = fread(b, 1, sizeof b, f);
  fclose(f);
  if (n != 24 || memcmp(b, "\x89PNG\r\n\x1a\n", 8) != 0 || memcmp(b + 12, "IHDR", 4) != 0)
    return 0;
  *w = (unsigned)b[16] << 24 | (unsigned)b[17] << 16 | (unsigned)b[18] << 8 | b[19];
  *h = (unsigned)b[20] << 24 | (unsigned)b[21] << 16 | (unsigned)b[22] << 8 | b[23];
  return 1;
}

static void test_plot_overlays_two_runs_as_png_and_svg(void **state) {
  (void)state;
  if (access("/usr/bin/gnuplot", X_OK) != 0) {
    fprintf(stderr, "SKIP: gnuplot not installed (Debian package gnuplot-nox)\n");
    skip();
  }
  const char *args[] = {"plot", F->o1, F->o2, "--out", F->figs, "--json", NULL};
  int code = pxt_pxctl(&F->r, F->dir, args, NULL, 120000);
  if (code != 0) pxt_show("pxctl plot", &F->r);
  assert_int_equal(code, 0);
  pxj_t *v = pxj_parse(F->r.out);
  assert_non_null(v);
  const pxj_t *files = pxj_get(v, "files");
  assert_non_null(files);
  /* 5 overlays + phases for both + residuals and rho for the hsadmm run, x2 */
  assert_int_equal(files->n, 2 * (5 + 2 + 2));
  static const char *const must[] = {"accuracy-time", "accuracy-bytes", "message-size",
                                     "residuals-job-000001", "rho-job-000001", NULL};
  for (int m = 0; must[m]; m++) {
    int found = 0;
    for (size_t i = 0; i < files->n; i++) found += strstr(files->items[i]->str, must[m]) != NULL;
    if (found != 2) fprintf(stderr, "figure %s: %d files\n", must[m], found);
    assert_int_equal(found, 2);
  }
  for (size_t i = 0; i < files->n; i++) {
    const char *p = files->items[i]->str;
    struct stat sb;
    assert_int_equal(stat(p, &sb), 0);
    assert_true(sb.st_size > 2000);
    size_t n = strlen(p);
    if (n > 4 && !strcmp(p + n - 4, ".png")) {
      unsigned w = 0, h = 0;
      assert_true(png_size(p, &w, &h));
      assert_int_equal(w, 1200);
      assert_int_equal(h, 800);
    } else {
      assert_true(pxt_file_contains_text(p, "width=\"1200\""));
      assert_true(pxt_file_contains_text(p, "height=\"800\""));
      assert_true(pxt_file_contains_text(p, "<path"));
    }
  }
  /* both runs are in the overlay's legend */
  char svg[400];
  snprintf(svg, sizeof svg, "%s/accuracy-bytes.svg", F->figs);
  assert_true(pxt_file_contains_text(svg, "plot-hsadmm"));
  assert_true(pxt_file_contains_text(svg, "plot-ddp"));
  pxj_free(v);
}

/* The block of plot.gp that draws figure NAME.png (from its `set output`
 * to the next `reset`), into out[cap]; 0 when there is none. */
static int gp_block(const char *dir, const char *name, char *out, size_t cap) {
  static char gp[1 << 20];
  char path[400], key[400];
  snprintf(path, sizeof path, "%s/plot.gp", dir);
  pxt_read_file(path, gp, sizeof gp);
  snprintf(key, sizeof key, "/%s.png'\n", name);
  const char *p = strstr(gp, key);
  if (!p) return 0;
  const char *end = strstr(p, "\nreset\n");
  size_t n = end ? (size_t)(end - p) : strlen(p);
  snprintf(out, cap, "%.*s", (int)(n < cap ? n : cap - 1), p);
  return 1;
}

static int count_of(const char *s, const char *needle) {
  int n = 0;
  for (const char *p = strstr(s, needle); p; p = strstr(p + 1, needle)) n++;
  return n;
}

/* gnuplot's messages (DIR/plot.log): none, not even a warning. */
static void assert_gnuplot_quiet(const char *dir) {
  char path[400], log[8192];
  snprintf(path, sizeof path, "%s/plot.log", dir);
  pxt_read_file(path, log, sizeof log);
  if (log[0]) fprintf(stderr, "gnuplot said:\n%s\n", log);
  assert_string_equal(log, "");
}

/* Layer figure column col (2: r_intra) of the job's layers file: per
 * iteration its values, and each layer's value at its last iteration. */
typedef struct {
  double v[16][128];
  int n[16], iters, nlayers;
  double last[128];
} layer_cols_t;

static void read_layer_col(const char *path, int col, layer_cols_t *c) {
  memset(c, 0, sizeof *c);
  FILE *f = fopen(path, "r");
  assert_non_null(f);
  char line[1024];
  int layer = -1;
  while (fgets(line, sizeof line, f)) {
    if (!strncmp(line, "# layer ", 8)) layer = atoi(line + 8), c->nlayers = layer + 1;
    if (line[0] == '#' || line[0] == '\n') continue;
    char *p = line;
    int it = (int)strtol(p, &p, 10);
    double v = NAN;
    for (int k = 2; k <= col; k++) v = strtod(p, &p);
    assert_true(it >= 0 && it < 16 && layer >= 0 && layer < 128);
    if (it + 1 > c->iters) c->iters = it + 1;
    if (!isnan(v)) c->v[it][c->n[it]++] = v, c->last[layer] = v;
  }
  fclose(f);
}

static int cmp_d(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return (x > y) - (x < y);
}

static void test_figures_start_at_zero_and_band_the_layers(void **state) {
  (void)state;
  if (access("/usr/bin/gnuplot", X_OK) != 0) skip();
  static char b[1 << 16];
  /* overlays: both axes from 0 (accuracy and density [0:1]) */
  static const char *const figs[] = {"accuracy-time", "accuracy-bytes", "message-size", "drift",
                                     "density", NULL};
  for (int i = 0; figs[i]; i++) {
    assert_true(gp_block(F->figs, figs[i], b, sizeof b));
    if (!strstr(b, "set xrange [0:") || !strstr(b, "set yrange [0:")) fprintf(stderr, "%s\n", b);
    assert_non_null(strstr(b, "set xrange [0:"));
    assert_non_null(strstr(b, "set yrange [0:"));
  }
  /* inter-node MB per iteration beside the dense line (column 6), per run */
  assert_true(gp_block(F->figs, "message-size", b, sizeof b));
  assert_int_equal(count_of(b, "using 1:6 "), 2);
  assert_int_equal(count_of(b, ": dense'"), 2);
  /* stacked phase times from 0 */
  assert_true(gp_block(F->figs, "phases-job-000001", b, sizeof b));
  assert_non_null(strstr(b, "set yrange [0:*]"));
  /* residuals: per panel the bands, the median and 3 layers by name */
  assert_true(gp_block(F->figs, "residuals-job-000001", b, sizeof b));
  assert_int_equal(count_of(b, "title 'min-max of 65 layers'"), 4);
  assert_int_equal(count_of(b, "title '10-90%'"), 4);
  assert_int_equal(count_of(b, "title 'median'"), 4);
  assert_int_equal(count_of(b, "f index "), 4 * 3);
  assert_int_equal(count_of(b, "set xrange [0:"), 4);
  /* the 3 of r_intra are the largest at the last iteration (layers file) */
  char path[400];
  snprintf(path, sizeof path, "%s/data/job-000001-layers.tsv", F->figs);
  static layer_cols_t c;
  read_layer_col(path, 2, &c);
  assert_int_equal(c.nlayers, 65);
  const char *panel = strstr(b, "set title 'intra primal r'");
  const char *next = strstr(b, "set title 'intra dual s'");
  assert_true(panel && next);
  for (int rank = 0; rank < 3; rank++) { /* the rank-th largest is drawn in this panel */
    int best = -1;
    for (int L = 0; L < c.nlayers; L++) {
      int above = 0;
      for (int M = 0; M < c.nlayers; M++) above += c.last[M] > c.last[L];
      if (above == rank) best = L;
    }
    char want[64];
    snprintf(want, sizeof want, "f index %d using 1:2 ", best);
    const char *at = strstr(panel, want);
    print_message("r_intra: #%d largest at the end is layer %d (%g)\n", rank + 1, best,
                  best >= 0 ? c.last[best] : 0);
    assert_true(best >= 0 && at && at < next);
  }
  /* the band file: min <= p10 <= median <= p90 <= max, the median the
   * layers file's, per iteration */
  snprintf(path, sizeof path, "%s/data/job-000001-band.tsv", F->figs);
  FILE *f = fopen(path, "r");
  assert_non_null(f);
  char line[4096];
  int rows = 0;
  while (fgets(line, sizeof line, f)) {
    if (line[0] == '#') continue;
    char *p = line;
    int it = (int)strtol(p, &p, 10);
    double q[5];
    for (int k = 0; k < 5; k++) q[k] = strtod(p, &p);
    for (int k = 0; k < 4; k++) assert_true(q[k] <= q[k + 1]);
    double *v = c.v[it];
    qsort(v, (size_t)c.n[it], sizeof *v, cmp_d);
    int n = c.n[it];
    double med = n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
    assert_true(fabs(q[2] - med) <= 1e-5 * med && q[0] == v[0] && q[4] == v[n - 1]);
    rows++;
  }
  fclose(f);
  assert_int_equal(rows, c.iters);
  assert_int_equal(rows, 4);
  /* the legend is in the drawing */
  snprintf(path, sizeof path, "%s/residuals-job-000001.svg", F->figs);
  assert_true(pxt_file_contains_text(path, ">median<"));
  assert_true(pxt_file_contains_text(path, ">10-90%<"));
  assert_true(gp_block(F->figs, "rho-job-000001", b, sizeof b));
  assert_int_equal(count_of(b, "title 'median'"), 2);
  assert_gnuplot_quiet(F->figs);
}

/* A ddp run alone: its drift is 0 throughout and its message size
 * constant; every range is still from 0, and gnuplot warns of nothing. */
static void test_a_flat_run_plots_without_empty_ranges(void **state) {
  (void)state;
  if (access("/usr/bin/gnuplot", X_OK) != 0) skip();
  char out[400];
  snprintf(out, sizeof out, "%s/figs-ddp", F->dir);
  const char *args[] = {"plot", F->o2, "--out", out, NULL};
  int code = pxt_pxctl(&F->r, F->dir, args, NULL, 120000);
  if (code != 0) pxt_show("pxctl plot (ddp)", &F->r);
  assert_int_equal(code, 0);
  static char b[1 << 16];
  assert_true(gp_block(out, "drift", b, sizeof b));
  assert_non_null(strstr(b, "set yrange [0:1]")); /* all 0: an explicit range */
  /* 3 iterations, no changed bit: counts ticked per unit, not at halves */
  assert_non_null(strstr(b, "set xtics 1\n"));
  assert_non_null(strstr(b, "set ytics 1\n"));
  assert_gnuplot_quiet(out);
}

static void test_metrics_csv_json_and_drift_from_the_kept_database(void **state) {
  (void)state;
  pxt_coordd_t d;
  memset(&d, 0, sizeof d);
  snprintf(d.dir, sizeof d.dir, "%s", F->dir);
  snprintf(d.db, sizeof d.db, "%.280s/metrics/coordinator.db", F->o1);
  assert_int_equal(pxt_coordd_start(&d, NULL), 0);
  /* by name: "plot-hsadmm" is the only job of that name */
  const char *csv[] = {"metrics", "plot-hsadmm", "--csv", "--coordinator", d.target, NULL};
  int code = pxt_pxctl(&F->r, F->dir, csv, NULL, 30000);
  if (code != 0) pxt_show("pxctl metrics --csv", &F->r);
  assert_int_equal(code, 0);
  const char *header =
      "iteration,rank,time_unix_ms,epoch,loss,train_accuracy,test_accuracy,density,mask_drift,"
      "mask_groups,frozen,bytes_intra,bytes_inter,bytes_inter_dense,local_s,intra_s,"
      "projection_s,inter_s,broadcast_s,control_s\n";
  assert_memory_equal(F->r.out, header, strlen(header));
  int rows = 0;
  for (char *line = strchr(F->r.out, '\n') + 1; *line; rows++) {
    char *nl = strchr(line, '\n');
    assert_non_null(nl);
    *nl = '\0';
    int commas = 0;
    for (char *p = line; *p; p++) commas += *p == ',';
    assert_int_equal(commas, 19);
    /* column 7: test accuracy, evaluated every iteration here */
    char *p = line;
    for (int c = 0; c < 6; c++) p = strchr(p, ',') + 1;
    char *end;
    double acc = strtod(p, &end);
    assert_true(end != p && *end == ',' && acc >= 0 && acc <= 1);
    line = nl + 1;
  }
  assert_int_equal(rows, 4);
  /* per layer: a header and iterations x layers rows (resnet20: 65 tensors) */
  const char *lcsv[] = {"metrics", "plot-hsadmm", "--csv", "--layers", "--coordinator",
                        d.target, NULL};
  assert_int_equal(pxt_pxctl(&F->r, F->dir, lcsv, NULL, 30000), 0);
  const char *lheader = "iteration,rank,layer,name,r_intra,s_intra,r_inter,s_inter,rho1,rho2,"
                        "density\n";
  assert_memory_equal(F->r.out, lheader, strlen(lheader));
  int lines = 0;
  for (const char *p = F->r.out; *p; p++) lines += *p == '\n';
  assert_int_equal(lines - 1, 4 * 65);
  assert_non_null(strstr(F->r.out, ",\"layer1.0.conv1.weight\","));
  const char *json[] = {"metrics", "plot-hsadmm", "--json", "--coordinator", d.target, NULL};
  assert_int_equal(pxt_pxctl(&F->r, F->dir, json, NULL, 30000), 0);
  assert_null(strstr(F->r.out, ":-1"));
  assert_non_null(strstr(F->r.out, "\"mask_groups\":"));
  const char *drift[] = {"drift", "plot-hsadmm", "--coordinator", d.target, NULL};
  assert_int_equal(pxt_pxctl(&F->r, F->dir, drift, NULL, 30000), 0);
  if (!strstr(F->r.out, " groups")) pxt_show("pxctl drift", &F->r);
  assert_non_null(strstr(F->r.out, " of "));
  assert_non_null(strstr(F->r.out, " groups"));
  const char *status[] = {"status", "plot-hsadmm", "--coordinator", d.target, NULL};
  assert_int_equal(pxt_pxctl(&F->r, F->dir, status, NULL, 30000), 0);
  assert_non_null(strstr(F->r.out, "SUCCEEDED (since"));
  assert_non_null(strstr(F->r.out, "it trained its whole budget"));
  const char *nojob[] = {"status", "no-such-name", "--coordinator", d.target, NULL};
  assert_int_equal(pxt_pxctl(&F->r, F->dir, nojob, NULL, 30000), 1);
  assert_non_null(strstr(F->r.err, "no-such-name"));
  assert_int_equal(pxt_coordd_stop(&d, SIGTERM) != -1, 1);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_run_keeps_the_metrics_databases_next_to_the_model),
      cmocka_unit_test(test_plot_overlays_two_runs_as_png_and_svg),
      cmocka_unit_test(test_figures_start_at_zero_and_band_the_layers),
      cmocka_unit_test(test_a_flat_run_plots_without_empty_ranges),
      cmocka_unit_test(test_metrics_csv_json_and_drift_from_the_kept_database),
  };
  return cmocka_run_group_tests(tests, group_setup, group_teardown);
}
