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

/* DIR/data/ID.tsv (per iteration) and DIR/data/ID-layers.tsv (one block
 * per layer, blocks separated by two blank lines for gnuplot's `index`);
 * returns the number of layers. */
static int plot_write_data(const char *dir, const plot_job_t *j) {
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
    fprintf(f, "%d\t%.3f\t", r->iteration, (double)(r->time_ms - j->start_ms) / 1000.0);
    if (r->test_acc >= 0) fprintf(f, "%.6f", r->test_acc);
    else fputs("NaN", f);
    fprintf(f, "\t%.6f\t%.6f\t%.6f\t%lld\t%lld\t%.6f", cum, (double)r->binter / 1e6,
            (double)r->bdense / 1e6, (long long)r->drift, (long long)r->groups, r->density);
    for (int k = 0; k < 6; k++) fprintf(f, "\t%.6g", r->has_ph ? r->ph[k] : 0.0);
    fputc('\n', f);
  }
  fclose(f);
  /* layers: sorted by layer, then iteration */
  int nlayers = 0;
  for (size_t i = 0; i < j->nl; i++)
    if (j->layers[i].layer + 1 > nlayers) nlayers = j->layers[i].layer + 1;
  if (nlayers == 0) return 0;
  snprintf(path, sizeof path, "%s/data/%s-layers.tsv", dir, j->key);
  f = fopen(path, "w");
  if (!f) return -1;
  for (int L = 0; L < nlayers; L++) {
    fprintf(f, "%s# layer %d\n", L ? "\n\n" : "", L);
    for (size_t i = 0; i < j->nl; i++) {
      const plot_layer_t *l = &j->layers[i];
      if (l->layer != L) continue;
      fprintf(f, "%d", l->iteration);
      for (int k = 0; k < 6; k++) fprintf(f, "\t%.6g", l->v[k] > 0 ? l->v[k] : 1e-30);
      fputc('\n', f);
    }
  }
  fclose(f);
  return nlayers;
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

/* The body of an overlay figure: for every job, `plot` term using cols. */
static char *plot_overlay(const char *dir, const plot_job_t *jobs, int njobs, const char *setup,
                          const char *using, const char *with) {
  size_t cap = 4096 + (size_t)njobs * 5000;
  char *b = px_malloc(cap, "pxctl.plot.body");
  if (!b) return NULL;
  size_t n = (size_t)snprintf(b, cap, "%s\nplot ", setup);
  for (int i = 0; i < njobs && n < cap; i++) {
    char title[300];
    snprintf(title, sizeof title, "%s (%s, %s)", jobs[i].name, jobs[i].id, jobs[i].strategy);
    for (char *p = title; *p; p++)
      if (*p == '\'' || *p == '\n') *p = ' ';
    n += (size_t)snprintf(b + n, cap - n, "%s'%s/data/%s.tsv' using %s with %s lw 2 title '%s'",
                          i ? ", " : "", dir, jobs[i].key, using, with, title);
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

/* The figures that overlay every job. */
static int plot_overlays(FILE *gp, const char *out, const plot_job_t *jobs, int njobs,
                         char (*files)[4400], int *nfiles) {
  struct {
    const char *name, *setup, *using, *with;
  } overlays[] = {
      {"accuracy-time",
       "set title 'Test accuracy vs wall time'\nset xlabel 'seconds since the job started'\n"
       "set ylabel 'test accuracy'",
       "2:3", "linespoints pt 7 ps 0.5"},
      {"accuracy-bytes",
       "set title 'Test accuracy vs cumulative inter-node bytes'\n"
       "set xlabel 'inter-node MB (sent + received, cumulative)'\nset ylabel 'test accuracy'",
       "4:3", "linespoints pt 7 ps 0.5"},
      {"message-size",
       "set title 'Inter-node bytes per iteration'\nset xlabel 'iteration'\n"
       "set ylabel 'MB per iteration'",
       "1:5", "lines"},
      {"drift",
       "set title 'Mask drift per iteration'\nset xlabel 'iteration'\n"
       "set ylabel 'changed group-mask bits'",
       "1:7", "lines"},
      {"density",
       "set title 'Density (kept fraction of the prunable weights)'\nset xlabel 'iteration'\n"
       "set ylabel 'density'",
       "1:9", "lines"},
  };
  for (size_t f = 0; f < sizeof overlays / sizeof overlays[0]; f++) {
    char *body = plot_overlay(out, jobs, njobs, overlays[f].setup, overlays[f].using,
                              overlays[f].with);
    if (!body) return pxctl_fail("out of memory");
    plot_figure(gp, out, overlays[f].name, body, files, nfiles);
    px_free(body);
  }
  return 0;
}

/* One job's own figures: phase times, and per layer (H-SADMM) residuals
 * and penalties. */
static void plot_job_figures(FILE *gp, const char *out, const plot_job_t *j, char (*files)[4400],
                             int *nfiles) {
  char body[16384], name[4096];
  snprintf(name, sizeof name, "phases-%s", j->key);
  snprintf(body, sizeof body,
           "set title 'Phase times per iteration: %s (rank 0)'\nset xlabel 'iteration'\n"
           "set ylabel 'seconds'\nset style fill solid 0.8 noborder\nset boxwidth 0.9 relative\n"
           "f='%s/data/%s.tsv'\n"
           "plot f using 1:($10+$11+$12+$13+$14+$15) with boxes title 'control', "
           "f using 1:($10+$11+$12+$13+$14) with boxes title 'broadcast', "
           "f using 1:($10+$11+$12+$13) with boxes title 'inter', "
           "f using 1:($10+$11+$12) with boxes title 'projection', "
           "f using 1:($10+$11) with boxes title 'intra', "
           "f using 1:10 with boxes title 'local'",
           j->name, out, j->key);
  plot_figure(gp, out, name, body, files, nfiles);
  int nlayers = 0;
  for (size_t k = 0; k < j->nl; k++)
    if (j->layers[k].layer + 1 > nlayers) nlayers = j->layers[k].layer + 1;
  if (nlayers == 0) return; /* ddp, topk: no per-layer figures */
  snprintf(name, sizeof name, "residuals-%s", j->key);
  snprintf(body, sizeof body,
           "f='%s/data/%s-layers.tsv'\nset multiplot layout 2,2 title 'Residuals per layer: "
           "%s (one line per layer)'\nset logscale y\nset format y '%%.0e'\nunset key\n"
           "set xlabel 'iteration'\n"
           "set title 'intra primal r'\nplot for [L=0:%d] f index L using 1:2 with lines\n"
           "set title 'intra dual s'\nplot for [L=0:%d] f index L using 1:3 with lines\n"
           "set title 'inter primal r'\nplot for [L=0:%d] f index L using 1:4 with lines\n"
           "set title 'inter dual s'\nplot for [L=0:%d] f index L using 1:5 with lines\n"
           "unset multiplot",
           out, j->key, j->name, nlayers - 1, nlayers - 1, nlayers - 1, nlayers - 1);
  plot_figure(gp, out, name, body, files, nfiles);
  snprintf(name, sizeof name, "rho-%s", j->key);
  snprintf(body, sizeof body,
           "f='%s/data/%s-layers.tsv'\nset multiplot layout 1,2 title 'Penalties per layer: "
           "%s'\nset logscale y\nunset key\nset xlabel 'iteration'\n"
           "set title 'rho1 (intra)'\nplot for [L=0:%d] f index L using 1:6 with lines\n"
           "set title 'rho2 (inter)'\nplot for [L=0:%d] f index L using 1:7 with lines\n"
           "unset multiplot",
           out, j->key, j->name, nlayers - 1, nlayers - 1);
  plot_figure(gp, out, name, body, files, nfiles);
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
    for (int i = 0; i < njobs && !rc; i++) plot_job_figures(gp, o->out, &jobs[i], files, &nfiles);
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
