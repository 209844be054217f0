/* `pxctl plot JOB [JOB ...] --out DIR`: the dashboard's figures as files for
 * reports, drawn by gnuplot (Debian's gnuplot-nox), each as PNG (pngcairo,
 * 1200x800) and SVG (1200x800). Several jobs are overlaid where that makes
 * sense (accuracy against time and against inter-node bytes, message size,
 * drift and density: hsadmm against ddp, say); the per-layer figures
 * (residuals, rho) and the phase times are drawn per job.
 *
 * The data comes from the coordinator (GetJob, GetIterations with layers):
 * the live one, or for a `pxctl run`'s directory or a database file (--db)
 * a private read-only one on a copy of it (pxctl_offline.c), so plot never
 * reads the coordinator's schema; the figures are picked out of the reports
 * by the report tables (prunex/report.h). It is written as
 * tab-separated files under DIR/data/ next to the gnuplot script DIR/plot.gp,
 * so a figure can be restyled and redrawn with `gnuplot DIR/plot.gp`.
 * gnuplot is found on PATH (or $PRUNEX_GNUPLOT); it is run once, bounded by
 * a 120 s limit. */
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <spawn.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "prunex/jobspec.h"
#include "prunex/report.h"
#include "pxctl.h"

extern char **environ;

#define PLOT_MAX_JOBS 8
#define PLOT_NCOLS 15     /* columns of DIR/data/ID.tsv */
#define PLOT_LAYER_LINES 8 /* up to this many layers: one line each; beyond, the band */
#define PLOT_TOP_LAYERS 3  /* beyond: the layers drawn by name, largest at the end */

typedef struct {
  int iteration;
  int64_t time_ms;
  double test_acc;    /* < 0: not evaluated */
  uint64_t binter, bdense;
  int64_t drift, groups;
  double density;
  int has_ph;
  double ph[6];       /* the iteration table's phase fields, local_s .. control_s */
} plot_row_t;

typedef struct {
  int iteration, layer;
  char name[96];
  double v[6];        /* the layer table's PX_REPORT_PLOT fields: r_intra, s_intra,
                         r_inter, s_inter, rho1, rho2 (the columns of ID-layers.tsv) */
} plot_layer_t;

typedef struct {
  char id[128], name[128], strategy[24];
  char key[160];      /* file names: the id, made unique (two runs' job-000001) */
  int64_t start_ms;
  plot_row_t *rows;
  size_t n, cap;
  plot_layer_t *layers;
  size_t nl, lcap;
  double colmax[PLOT_NCOLS + 1]; /* the largest value of each column of ID.tsv (1-based),
                                    phases: column 10 holds their largest sum */
} plot_job_t;

/* Appends the elem bytes of item to the array *arr of *n (room for *cap),
 * doubling it from 256 when full. */
static px_status_t plot_append(void **arr, size_t *n, size_t *cap, const void *item, size_t elem) {
  if (*n + 1 > *cap) {
    size_t c = *cap ? *cap * 2 : 256;
    while (c < *n + 1) c *= 2;
    void *q = px_realloc(*arr, c * elem, "pxctl.plot");
    if (!q) return PX_ERR_NOMEM;
    *arr = q;
    *cap = c;
  }
  memcpy((char *)*arr + *n * elem, item, elem);
  (*n)++;
  return PX_OK;
}

/* ---- loading: coordinator ------------------------------------------------------ */

/* The values of msg's fields of table t that have flag `where`, in the
 * table's order, into v[n] (the phase times; the layer figures drawn). */
static void plot_values(px_report_table_t t, unsigned where, const void *msg, double *v, int n) {
  int k = 0;
  for (int i = 0; i < px_report_count(t) && k < n; i++) {
    const px_report_field_t *f = px_report_field(t, i);
    if (f->where & where) v[k++] = px_report_value(f, msg, NULL);
  }
}

static int plot_load_rpc(px_rpc_channel_t *ch, const char *ref, plot_job_t *j) {
  Prunex__V1__Job *job = NULL;
  if (px_rpc_get_job(ch, ref, 10000, &job) != PX_OK) return pxctl_rpc_fail(ch, ref);
  snprintf(j->id, sizeof j->id, "%s", job->job_id);
  snprintf(j->name, sizeof j->name, "%s", job->name[0] ? job->name : job->job_id);
  snprintf(j->strategy, sizeof j->strategy, "%s",
           job->spec ? px_jobspec_strategy_name(job->spec->strategy) : "");
  j->start_ms = job->created_unix_ms;
  for (size_t i = 0; i < job->n_events; i++)
    if (job->events[i]->to_state == PRUNEX__V1__JOB_STATE__JOB_STATE_SCHEDULED) {
      j->start_ms = job->events[i]->time_unix_ms;
      break;
    }
  px_rpc_message_free(job);
  Prunex__V1__GetIterationsRequest req = PRUNEX__V1__GET_ITERATIONS_REQUEST__INIT;
  req.job_id = j->id;
  req.include_layers = 1;
  Prunex__V1__GetIterationsResponse *resp = NULL;
  if (px_rpc_get_iterations(ch, &req, 60000, &resp) != PX_OK) return pxctl_rpc_fail(ch, ref);
  px_status_t st = PX_OK;
  int last = -1;
  for (size_t i = 0; st == PX_OK && i < resp->n_iterations; i++) {
    const Prunex__V1__IterationReport *it = resp->iterations[i];
    if (it->iteration == last) continue; /* one report per iteration: the lowest rank's */
    last = it->iteration;
    plot_row_t r = {it->iteration, it->time_unix_ms, it->test_accuracy, it->bytes_inter,
                    it->bytes_inter_dense, it->mask_drift, it->mask_groups, it->density,
                    it->phases != NULL, {0}};
    plot_values(PX_REPORT_ITERATION, PX_REPORT_PHASE, it, r.ph, 6);
    st = plot_append((void **)&j->rows, &j->n, &j->cap, &r, sizeof r);
    for (size_t k = 0; st == PX_OK && k < it->n_layers; k++) {
      const Prunex__V1__LayerMetrics *L = it->layers[k];
      plot_layer_t l = {it->iteration, L->layer, "", {0}};
      plot_values(PX_REPORT_LAYER, PX_REPORT_PLOT, L, l.v, 6);
      snprintf(l.name, sizeof l.name, "%s", L->name);
      st = plot_append((void **)&j->layers, &j->nl, &j->lcap, &l, sizeof l);
    }
  }
  px_rpc_message_free(resp);
  return st == PX_OK ? 0 : pxctl_fail("out of memory reading job %s", j->id);
}

/* ---- data files and the gnuplot script ------------------------------------------ */

/* A gnuplot string literal (single quotes doubled). */
static void plot_gp_str(FILE *f, const char *s) {
  fputc('\'', f);
  for (; *s; s++) {
    if (*s == '\'') fputc('\'', f);
    if (*s != '\n') fputc(*s, f);
  }
  fputc('\'', f);
}

/* Keeps the largest value of column c (1-based) of the job's ID.tsv. */
static void plot_max(plot_job_t *j, int c, double v) {
  if (v == v && v > j->colmax[c]) j->colmax[c] = v;
}

/* DIR/data/ID.tsv: one row per iteration; notes each column's largest
 * value in j->colmax (the figures' ranges). */
static int plot_write_rows(const char *dir, plot_job_t *j) {
  char path[4400];
  snprintf(path, sizeof path, "%s/data/%s.tsv", dir, j->key);
  FILE *f = fopen(path, "w");
  if (!f) return -1;
  fprintf(f, "# iteration\tseconds\ttest_accuracy\tinter_mb_cum\tinter_mb\tdense_mb\tdrift\t"
             "groups\tdensity\tlocal\tintra\tprojection\tinter\tbroadcast\tcontrol\n");
  double cum = 0;
  for (size_t i = 0; i < j->n; i++) {
    const plot_row_t *r = &j->rows[i];
    cum += (double)r->binter / 1e6;
    double secs = (double)(r->time_ms - j->start_ms) / 1000.0, sum = 0;
    fprintf(f, "%d\t%.3f\t", r->iteration, secs);
    if (r->test_acc >= 0) fprintf(f, "%.6f", r->test_acc);
    else fputs("NaN", f);
    fprintf(f, "\t%.6f\t%.6f\t%.6f\t%lld\t%lld\t%.6f", cum, (double)r->binter / 1e6,
            (double)r->bdense / 1e6, (long long)r->drift, (long long)r->groups, r->density);
    for (int k = 0; k < 6; k++) {
      fprintf(f, "\t%.6g", r->has_ph ? r->ph[k] : 0.0);
      sum += r->has_ph ? r->ph[k] : 0.0;
    }
    fputc('\n', f);
    double v[] = {r->iteration, secs, 0, cum, (double)r->binter / 1e6, (double)r->bdense / 1e6,
                  (double)r->drift, (double)r->groups, r->density, sum};
    for (int c = 0; c < (int)(sizeof v / sizeof v[0]); c++) plot_max(j, c + 1, v[c]);
  }
  return fclose(f) == 0 ? 0 : -1;
}

/* The number of layers the job reported figures for (0: ddp, topk). */
static int plot_nlayers(const plot_job_t *j) {
  int nlayers = 0;
  for (size_t i = 0; i < j->nl; i++)
    if (j->layers[i].layer + 1 > nlayers) nlayers = j->layers[i].layer + 1;
  return nlayers;
}

/* DIR/data/ID-layers.tsv: one block per layer (blocks separated by two
 * blank lines for gnuplot's `index`), a value that is not positive (a log
 * axis cannot show it) written NaN. */
static int plot_write_layers(const char *dir, const plot_job_t *j, int nlayers) {
  char path[4400];
  snprintf(path, sizeof path, "%s/data/%s-layers.tsv", dir, j->key);
  FILE *f = fopen(path, "w");
  if (!f) return -1;
  for (int L = 0; L < nlayers; L++) {
    fprintf(f, "%s# layer %d\n", L ? "\n\n" : "", L);
    for (size_t i = 0; i < j->nl; i++) {
      const plot_layer_t *l = &j->layers[i];
      if (l->layer != L) continue;
      fprintf(f, "%d", l->iteration);
      for (int k = 0; k < 6; k++)
        if (l->v[k] > 0) fprintf(f, "\t%.6g", l->v[k]);
        else fputs("\tNaN", f);
      fputc('\n', f);
    }
  }
  return fclose(f) == 0 ? 0 : -1;
}

static int plot_cmp_double(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return (x > y) - (x < y);
}

/* The q-quantile of the sorted v[n] (n > 0), linear between neighbours. */
static double plot_quantile(const double *v, size_t n, double q) {
  double at = q * (double)(n - 1);
  size_t lo = (size_t)at;
  return lo + 1 < n ? v[lo] + (at - (double)lo) * (v[lo + 1] - v[lo]) : v[n - 1];
}

/* DIR/data/ID-band.tsv: per iteration, for each layer figure k (the
 * columns of ID-layers.tsv), over the layers' positive values: min, 10th
 * percentile, median, 90th percentile, max (columns 2 + 5k .. 6 + 5k; NaN
 * where no layer had a positive value). */
static int plot_write_band(const char *dir, const plot_job_t *j, int nlayers) {
  char path[4400];
  snprintf(path, sizeof path, "%s/data/%s-band.tsv", dir, j->key);
  double *v = px_malloc((size_t)nlayers * sizeof *v, "pxctl.plot.band");
  FILE *f = v ? fopen(path, "w") : NULL;
  if (!f) {
    px_free(v);
    return -1;
  }
  fputs("# iteration, then for each of r_intra s_intra r_inter s_inter rho1 rho2 over the "
        "layers: min p10 median p90 max\n", f);
  for (size_t at = 0; at < j->nl;) {
    size_t end = at;
    while (end < j->nl && j->layers[end].iteration == j->layers[at].iteration) end++;
    fprintf(f, "%d", j->layers[at].iteration);
    for (int k = 0; k < 6; k++) {
      size_t n = 0;
      for (size_t i = at; i < end && n < (size_t)nlayers; i++)
        if (j->layers[i].v[k] > 0) v[n++] = j->layers[i].v[k];
      qsort(v, n, sizeof *v, plot_cmp_double);
      static const double q[5] = {0, 0.1, 0.5, 0.9, 1};
      for (int c = 0; c < 5; c++)
        if (n) fprintf(f, "\t%.6g", plot_quantile(v, n, q[c]));
        else fputs("\tNaN", f);
    }
    fputc('\n', f);
    at = end;
  }
  px_free(v);
  return fclose(f) == 0 ? 0 : -1;
}

/* The job's data files under DIR/data/: ID.tsv, and for a job with layer
 * figures ID-layers.tsv and ID-band.tsv. */
static int plot_write_data(const char *dir, plot_job_t *j) {
  if (plot_write_rows(dir, j) != 0) return -1;
  int nlayers = plot_nlayers(j);
  if (nlayers == 0) return 0;
  if (plot_write_layers(dir, j, nlayers) != 0 || plot_write_band(dir, j, nlayers) != 0) return -1;
  return 0;
}

/* One figure, drawn twice (PNG, SVG): body is the gnuplot text after the
 * terminal and output are set. */
static void plot_figure(FILE *gp, const char *dir, const char *name, const char *body,
                        char files[][4400], int *nfiles) {
  static const char *const term[2][2] = {
      {"pngcairo size 1200,800 enhanced font 'sans,11'", "png"},
      {"svg size 1200,800 enhanced font 'sans,11' background rgb 'white'", "svg"}};
  for (int t = 0; t < 2; t++) {
    snprintf(files[*nfiles], 4400, "%s/%s.%s", dir, name, term[t][1]);
    fprintf(gp, "reset\nset terminal %s\nset output ", term[t][0]);
    plot_gp_str(gp, files[*nfiles]);
    fprintf(gp, "\nset grid\nset key outside bottom center horizontal noenhanced\n%s\nunset output\n",
            body);
    (*nfiles)++;
  }
}

/* `set AXISrange [0:*]`, or [0:1] when every value is 0 (gnuplot would
 * warn "empty range" and pick one centred on 0). A count (whole: an
 * iteration, changed bits) gets a tick per unit below 10, where gnuplot
 * would tick at halves. */
static size_t plot_range(char *b, size_t cap, const char *axis, double max, int whole) {
  return (size_t)snprintf(b, cap, "set %srange [0:%s]\n%s%s%s", axis, max > 0 ? "*" : "1",
                          whole && max < 10 ? "set " : "", whole && max < 10 ? axis : "",
                          whole && max < 10 ? "tics 1\n" : "");
}

/* One overlay figure: its gnuplot setup, the columns of ID.tsv giving the
 * ranges (ycol 0: the y range is [0:1], an accuracy or a fraction), and
 * one or two series per job (the second, dashed in the job's colour, is a
 * baseline: its title is the job's plus title2). */
typedef struct {
  const char *name, *setup;
  int xcol, ycol;
  int xwhole, ywhole; /* the axis counts (plot_range) */
  const char *using, *with;
  const char *using2, *title2;
} plot_overlay_t;

/* The body of an overlay figure: the ranges from 0, then every job's
 * series (lc: the job's colour). */
static char *plot_overlay(const char *dir, const plot_job_t *jobs, int njobs,
                          const plot_overlay_t *ov) {
  size_t cap = 4096 + (size_t)njobs * 10000;
  char *b = px_malloc(cap, "pxctl.plot.body");
  if (!b) return NULL;
  double xmax = 0, ymax = 0;
  for (int i = 0; i < njobs; i++) {
    if (jobs[i].colmax[ov->xcol] > xmax) xmax = jobs[i].colmax[ov->xcol];
    if (ov->ycol && jobs[i].colmax[ov->ycol] > ymax) ymax = jobs[i].colmax[ov->ycol];
    if (ov->using2 && jobs[i].colmax[6] > ymax) ymax = jobs[i].colmax[6]; /* the dense line */
  }
  size_t n = (size_t)snprintf(b, cap, "%s\n", ov->setup);
  n += plot_range(b + n, cap - n, "x", xmax, ov->xwhole);
  n += ov->ycol ? plot_range(b + n, cap - n, "y", ymax, ov->ywhole)
                : (size_t)snprintf(b + n, cap - n, "set yrange [0:1]\n");
  n += (size_t)snprintf(b + n, cap - n, "plot ");
  for (int i = 0; i < njobs && n < cap; i++) {
    char title[300];
    snprintf(title, sizeof title, "%.180s (%.60s, %.40s)", jobs[i].name, jobs[i].id,
             jobs[i].strategy);
    for (char *p = title; *p; p++)
      if (*p == '\'' || *p == '\n') *p = ' ';
    n += (size_t)snprintf(b + n, cap - n,
                          "%s'%s/data/%s.tsv' using %s with %s lw 2 lc %d title '%s'",
                          i ? ", " : "", dir, jobs[i].key, ov->using, ov->with, i + 1, title);
    if (ov->using2 && n < cap)
      n += (size_t)snprintf(b + n, cap - n,
                            ", '%s/data/%s.tsv' using %s with lines lw 1.5 dt 2 lc %d title '%s%s'",
                            dir, jobs[i].key, ov->using2, i + 1, title, ov->title2);
  }
  return b;
}

static int plot_run_gnuplot(const char *script, const char *dir) {
  const char *gnuplot = getenv("PRUNEX_GNUPLOT");
  if (!gnuplot || !gnuplot[0]) gnuplot = "gnuplot";
  char log[4400];
  snprintf(log, sizeof log, "%s/plot.log", dir);
  posix_spawn_file_actions_t fa;
  posix_spawn_file_actions_init(&fa);
  posix_spawn_file_actions_addopen(&fa, 0, "/dev/null", O_RDONLY, 0);
  posix_spawn_file_actions_addopen(&fa, 1, log, O_WRONLY | O_CREAT | O_TRUNC, 0644);
  posix_spawn_file_actions_adddup2(&fa, 1, 2);
  const char *argv[] = {gnuplot, script, NULL};
  pid_t pid;
  int rc = posix_spawnp(&pid, gnuplot, &fa, NULL, (char *const *)argv, environ);
  posix_spawn_file_actions_destroy(&fa);
  if (rc != 0)
    return pxctl_fail("cannot run %s: %s (install Debian's gnuplot-nox, or set PRUNEX_GNUPLOT)",
                      gnuplot, strerror(rc));
  int status = 0;
  double end = pxctl_mono_s() + 120.0;
  for (;;) {
    pid_t r = waitpid(pid, &status, WNOHANG);
    if (r == pid) break;
    if (pxctl_mono_s() > end) {
      kill(pid, SIGKILL);
      waitpid(pid, &status, 0);
      return pxctl_fail("gnuplot took more than 120 s; killed (see %s)", log);
    }
    struct timespec ts = {0, 20000000};
    nanosleep(&ts, NULL);
  }
  if (!WIFEXITED(status) || WEXITSTATUS(status) != 0)
    return pxctl_fail("gnuplot failed on %s (its messages are in %s)", script, log);
  return 0;
}

/* Reads one job from the coordinator o->coordinator names (the live one,
 * or a private one reading a database: pxctl_offline.c); ref is a job id
 * or a name only one job has, or NULL for the newest job. */
static int plot_load_one(pxctl_opts_t *o, const char *ref, plot_job_t *j) {
  px_rpc_channel_t *ch = pxctl_connect(o);
  if (!ch) return PXCTL_EXIT_FAIL;
  int rc = 0;
  if (!ref) {
    Prunex__V1__ListJobsRequest req = PRUNEX__V1__LIST_JOBS_REQUEST__INIT;
    req.limit = 1;
    Prunex__V1__ListJobsResponse *resp = NULL;
    if (px_rpc_list_jobs(ch, &req, 10000, &resp) != PX_OK) rc = pxctl_rpc_fail(ch, NULL);
    else if (resp->n_jobs == 0) rc = pxctl_fail("%s holds no job", pxctl_offline_db());
    else rc = plot_load_rpc(ch, resp->jobs[0]->job_id, j);
    px_rpc_message_free(resp);
  } else if (!(rc = pxctl_resolve_job(o, &ref))) {
    rc = plot_load_rpc(ch, ref, j);
  }
  px_rpc_channel_destroy(ch);
  return rc;
}

/* Reads each job (a `pxctl run`'s directory, each through its own private
 * read-only coordinator; a job of --db FILE; or of the coordinator) and
 * gives each its file key (the id, made unique). */
static int plot_load_all(pxctl_opts_t *o, plot_job_t *jobs, int njobs) {
  int rc = 0;
  const char *live = o->coordinator;
  pxctl_offline_t *db = NULL;
  if (o->db) rc = pxctl_offline_open(o, o->db, &db);
  for (int i = 0; i < njobs && !rc; i++) {
    char path[4400];
    int dir = o->db ? 0 : pxctl_run_dir_db(o->pos[i], path, sizeof path);
    pxctl_offline_t *off = NULL;
    if (dir < 0) rc = PXCTL_EXIT_FAIL;
    else if (dir > 0 && !(rc = pxctl_offline_open(o, path, &off))) rc = plot_load_one(o, NULL, &jobs[i]);
    else if (dir == 0) rc = plot_load_one(o, o->pos[i], &jobs[i]);
    pxctl_offline_close(off);
    o->coordinator = live;
  }
  pxctl_offline_close(db);
  for (int i = 0; i < njobs && !rc; i++) {
    int dup = 0;
    for (int k = 0; k < i; k++) dup |= !strcmp(jobs[k].id, jobs[i].id);
    if (dup) snprintf(jobs[i].key, sizeof jobs[i].key, "%.120s-%d", jobs[i].id, i + 1);
    else snprintf(jobs[i].key, sizeof jobs[i].key, "%.150s", jobs[i].id);
  }
  return rc;
}

/* The figures that overlay every job; every axis from 0. */
static int plot_overlays(FILE *gp, const char *out, const plot_job_t *jobs, int njobs,
                         char (*files)[4400], int *nfiles) {
  static const plot_overlay_t overlays[] = {
      {"accuracy-time",
       "set title 'Test accuracy vs wall time'\nset xlabel 'seconds since the job started'\n"
       "set ylabel 'test accuracy'",
       2, 0, 0, 0, "2:3", "linespoints pt 7 ps 0.5", NULL, NULL},
      {"accuracy-bytes",
       "set title 'Test accuracy vs cumulative inter-node bytes'\n"
       "set xlabel 'inter-node MB (sent + received, cumulative)'\nset ylabel 'test accuracy'",
       4, 0, 0, 0, "4:3", "linespoints pt 7 ps 0.5", NULL, NULL},
      {"message-size",
       "set title 'Inter-node bytes per iteration (dashed: the same with dense buffers)'\n"
       "set xlabel 'iteration'\nset ylabel 'MB per iteration'",
       1, 5, 1, 0, "1:5", "lines", "1:6", ": dense"},
      {"drift",
       "set title 'Mask drift per iteration'\nset xlabel 'iteration'\n"
       "set ylabel 'changed group-mask bits'",
       1, 7, 1, 1, "1:7", "lines", NULL, NULL},
      {"density",
       "set title 'Density (kept fraction of the prunable weights)'\nset xlabel 'iteration'\n"
       "set ylabel 'density'",
       1, 0, 1, 0, "1:9", "lines", NULL, NULL},
  };
  for (size_t f = 0; f < sizeof overlays / sizeof overlays[0]; f++) {
    char *body = plot_overlay(out, jobs, njobs, &overlays[f]);
    if (!body) return pxctl_fail("out of memory");
    plot_figure(gp, out, overlays[f].name, body, files, nfiles);
    px_free(body);
  }
  return 0;
}

/* The phase times of rank 0 stacked from 0, one box per iteration
 * centred on it (so the x axis starts half a box before iteration 0). */
static void plot_phases(FILE *gp, const char *out, const plot_job_t *j, char (*files)[4400],
                        int *nfiles) {
  char body[8192], name[4096];
  snprintf(name, sizeof name, "phases-%s", j->key);
  snprintf(body, sizeof body,
           "set title 'Phase times per iteration: %s (rank 0)'\nset xlabel 'iteration'\n"
           "set ylabel 'seconds'\nset style fill solid 0.8 noborder\nset boxwidth 0.9 relative\n"
           "set xrange [-0.5:%g]\n%sset yrange [0:%s]\nf='%s/data/%s.tsv'\n"
           "plot f using 1:($10+$11+$12+$13+$14+$15) with boxes title 'control', "
           "f using 1:($10+$11+$12+$13+$14) with boxes title 'broadcast', "
           "f using 1:($10+$11+$12+$13) with boxes title 'inter', "
           "f using 1:($10+$11+$12) with boxes title 'projection', "
           "f using 1:($10+$11) with boxes title 'intra', "
           "f using 1:10 with boxes title 'local'",
           j->name, j->colmax[1] + 0.5, j->colmax[1] < 10 ? "set xtics 1\n" : "",
           j->colmax[10] > 0 ? "*" : "1", out, j->key);
  plot_figure(gp, out, name, body, files, nfiles);
}

/* s with its quotes and newlines blanked, for a gnuplot '...' title. */
static const char *plot_title(const char *s, char *buf, size_t cap) {
  snprintf(buf, cap, "%s", s);
  for (char *p = buf; *p; p++)
    if (*p == '\'' || *p == '\n') *p = ' ';
  return buf;
}

/* Layer L's name (the first row of it), "" when it has none. */
static const char *plot_layer_name(const plot_job_t *j, int L) {
  for (size_t i = 0; i < j->nl; i++)
    if (j->layers[i].layer == L) return j->layers[i].name;
  return "";
}

/* Figure k's value of each layer at its latest iteration with a positive
 * one (-1: none) into last[nlayers]; the range of all positive values in
 * *lo, *hi (0, 0: none). */
static void plot_layer_stats(const plot_job_t *j, int k, double *last, int nlayers, double *lo,
                             double *hi) {
  *lo = *hi = 0;
  for (int L = 0; L < nlayers; L++) last[L] = -1;
  for (size_t i = 0; i < j->nl; i++) {
    double v = j->layers[i].v[k];
    if (!(v > 0)) continue;
    last[j->layers[i].layer] = v;
    if (*hi == 0 || v < *lo) *lo = v;
    if (v > *hi) *hi = v;
  }
}

/* Figure k's series: with up to PLOT_LAYER_LINES layers one line per
 * layer; beyond, the min-max and 10-90 % bands over the layers, their
 * median, and the PLOT_TOP_LAYERS largest at the end, by name. */
static size_t plot_layer_series(char *b, size_t cap, const plot_job_t *j, int k, int nlayers,
                                const double *last) {
  char t[200];
  size_t n = 0;
  int top[PLOT_TOP_LAYERS], ntop = 0;
  if (nlayers <= PLOT_LAYER_LINES) {
    for (int L = 0; L < nlayers && n < cap; L++)
      n += (size_t)snprintf(b + n, cap - n, "%sf index %d using 1:%d with lines lw 1.5 title '%s'",
                            L ? ", " : "", L, 2 + k, plot_title(plot_layer_name(j, L), t, sizeof t));
    return n;
  }
  n += (size_t)snprintf(b + n, cap - n,
                        "g using 1:%d:%d with filledcurves fc rgb '#d0d0d0' title 'min-max of %d "
                        "layers', g using 1:%d:%d with filledcurves fc rgb '#a0a0a0' title "
                        "'10-90%%', g using 1:%d with lines lc rgb 'black' lw 2.5 title 'median'",
                        2 + 5 * k, 6 + 5 * k, nlayers, 3 + 5 * k, 5 + 5 * k, 4 + 5 * k);
  for (; ntop < PLOT_TOP_LAYERS; ntop++) { /* the largest not yet taken */
    int best = -1;
    for (int L = 0; L < nlayers; L++) {
      int taken = 0;
      for (int m = 0; m < ntop; m++) taken |= top[m] == L;
      if (!taken && last[L] > 0 && (best < 0 || last[L] > last[best])) best = L;
    }
    if (best < 0) break;
    top[ntop] = best;
    if (n >= cap) break;
    n += (size_t)snprintf(b + n, cap - n, ", f index %d using 1:%d with lines lw 1.5 lc %d title '%s'", best,
                          2 + k, ntop + 1, plot_title(plot_layer_name(j, best), t, sizeof t));
  }
  return n;
}

/* One panel of a per-layer figure: figure k (column 2 + k of
 * ID-layers.tsv) on a log axis; a figure with no positive value (one node:
 * no inter-node residual) says so instead of an empty plot. */
static size_t plot_layer_panel(char *b, size_t cap, const plot_job_t *j, int k, int nlayers,
                               const char *title, double *last) {
  double lo, hi;
  plot_layer_stats(j, k, last, nlayers, &lo, &hi);
  size_t n = (size_t)snprintf(b, cap, "set title '%s'\n", title);
  n += plot_range(b + n, cap - n, "x", j->colmax[1], 1);
  if (hi == 0)
    return n + (size_t)snprintf(b + n, cap - n,
                                "unset logscale y\nset yrange [0:1]\nset format y '%%g'\n"
                                "set label 1 'no positive values' at graph 0.5,0.5 center\n"
                                "plot NaN notitle\nunset label 1\n");
  n += (size_t)snprintf(b + n, cap - n, "set logscale y\nset format y '%%.0e'\n");
  if (lo == hi) n += (size_t)snprintf(b + n, cap - n, "set yrange [%g:%g]\n", lo / 2, hi * 2);
  else n += (size_t)snprintf(b + n, cap - n, "set yrange [*:*]\n");
  n += (size_t)snprintf(b + n, cap - n, "plot ");
  if (n >= cap) return n;
  n += plot_layer_series(b + n, cap - n, j, k, nlayers, last);
  return n < cap ? n + (size_t)snprintf(b + n, cap - n, "\n") : n;
}

/* A per-layer figure of panels (figures ks[np] with their titles). */
static int plot_layer_figure(FILE *gp, const char *out, const plot_job_t *j, const char *what,
                              const char *layout, const int *ks, const char *const *titles, int np,
                              char (*files)[4400], int *nfiles) {
  int nlayers = plot_nlayers(j);
  size_t cap = 65536, n;
  char *b = px_malloc(cap, "pxctl.plot.body"), name[4096], t[200];
  double *last = px_malloc((size_t)nlayers * sizeof *last, "pxctl.plot.last");
  int rc = 0;
  if (!b || !last) {
    rc = pxctl_fail("out of memory drawing the %s of %s", what, j->id);
    goto done;
  }
  n = (size_t)snprintf(b, cap,
                       "f='%s/data/%s-layers.tsv'\ng='%s/data/%s-band.tsv'\n"
                       "set multiplot layout %s title '%s per layer: %s (%d layers%s)'\n"
                       "set key outside right top vertical font ',8' noenhanced\n"
                       "set xlabel 'iteration'\n",
                       out, j->key, out, j->key, layout, what, plot_title(j->name, t, sizeof t),
                       nlayers, nlayers > PLOT_LAYER_LINES ? ": median, bands, the largest" : "");
  for (int p = 0; p < np && n < cap; p++)
    n += plot_layer_panel(b + n, cap - n, j, ks[p], nlayers, titles[p], last);
  if (n + 32 >= cap) {
    rc = pxctl_fail("the %s figure of %s is too large", what, j->id);
    goto done;
  }
  snprintf(b + n, cap - n, "unset multiplot");
  snprintf(name, sizeof name, "%s-%s", !strcmp(what, "Residuals") ? "residuals" : "rho", j->key);
  plot_figure(gp, out, name, b, files, nfiles);
done:
  px_free(b);
  px_free(last);
  return rc;
}

/* One job's own figures: phase times, and per layer (H-SADMM) residuals
 * and penalties. */
static int plot_job_figures(FILE *gp, const char *out, const plot_job_t *j, char (*files)[4400],
                            int *nfiles) {
  plot_phases(gp, out, j, files, nfiles);
  if (plot_nlayers(j) == 0) return 0; /* ddp, topk: no per-layer figures */
  static const int rk[] = {0, 1, 2, 3}, pk[] = {4, 5};
  static const char *const rt[] = {"intra primal r", "intra dual s", "inter primal r",
                                   "inter dual s"};
  static const char *const pt[] = {"rho1 (intra)", "rho2 (inter)"};
  int rc = plot_layer_figure(gp, out, j, "Residuals", "2,2", rk, rt, 4, files, nfiles);
  return rc ? rc : plot_layer_figure(gp, out, j, "Penalties", "1,2", pk, pt, 2, files, nfiles);
}

static void plot_print_files(const pxctl_opts_t *o, const char *script, char (*files)[4400],
                             int nfiles) {
  if (!o->json) {
    for (int i = 0; i < nfiles; i++) printf("%s\n", files[i]);
    return;
  }
  pxctl_json_t jw;
  pxctl_json_init(&jw, stdout);
  pxctl_json_begin_object(&jw);
  pxctl_json_kv_string(&jw, "out", o->out);
  pxctl_json_kv_string(&jw, "script", script);
  pxctl_json_key(&jw, "files");
  pxctl_json_begin_array(&jw);
  for (int i = 0; i < nfiles; i++) pxctl_json_string(&jw, files[i]);
  pxctl_json_end_array(&jw);
  pxctl_json_end_object(&jw);
  pxctl_json_finish(&jw);
}

int pxctl_cmd_plot(pxctl_opts_t *o) {
  if (!o->out) return pxctl_usage_error(o, "--out DIR is required");
  plot_job_t jobs[PLOT_MAX_JOBS];
  memset(jobs, 0, sizeof jobs);
  int njobs = o->npos;
  char data[4400];
  snprintf(data, sizeof data, "%s/data", o->out);
  if ((mkdir(o->out, 0755) != 0 && errno != EEXIST) || (mkdir(data, 0755) != 0 && errno != EEXIST))
    return pxctl_fail("cannot create %s: %s", data, strerror(errno));
  int rc = plot_load_all(o, jobs, njobs);
  char script[4400];
  snprintf(script, sizeof script, "%s/plot.gp", o->out);
  static char files[2 * (5 + 3 * PLOT_MAX_JOBS)][4400];
  int nfiles = 0;
  FILE *gp = NULL;
  for (int i = 0; i < njobs && !rc; i++) {
    if (jobs[i].n == 0) rc = pxctl_fail("job %s has no iterations to plot", jobs[i].id);
    else if (plot_write_data(o->out, &jobs[i]) < 0)
      rc = pxctl_fail("cannot write the data of %s under %s: %s", jobs[i].id, data,
                      strerror(errno));
  }
  if (!rc && !(gp = fopen(script, "w"))) rc = pxctl_fail("cannot write %s: %s", script, strerror(errno));
  if (!rc) {
    fprintf(gp, "# written by pxctl plot; redraw with: gnuplot %s\nset datafile missing 'NaN'\n",
            script);
    rc = plot_overlays(gp, o->out, jobs, njobs, files, &nfiles);
    for (int i = 0; i < njobs && !rc; i++) rc = plot_job_figures(gp, o->out, &jobs[i], files, &nfiles);
    fclose(gp);
    if (!rc) rc = plot_run_gnuplot(script, o->out);
  }
  if (!rc) plot_print_files(o, script, files, nfiles);
  for (int i = 0; i < PLOT_MAX_JOBS; i++) {
    px_free(jobs[i].rows);
    px_free(jobs[i].layers);
  }
  return rc;
}
