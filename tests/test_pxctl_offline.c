/* Finished runs read without a coordinator, with the real
 * programs: one tiny `pxctl run` (hsadmm, 2 nodes x 1 CPU worker, resnet20
 * on the synthetic data set, 3 iterations, --keep) leaves OUTPUT and its run
 * directory. `pxctl status|metrics|drift|logs OUTPUT` print byte for byte
 * what the same commands print against a pxcoordd started on a copy of
 * OUTPUT/metrics/coordinator.db (the workaround they replace); `plot OUTPUT`
 * writes the same data files as `plot JOB` against that coordinator; the
 * kept run directory and --db FILE read the same job; nothing is written
 * in OUTPUT and no private copy is left behind; a directory that is not a
 * run is refused naming what is missing. A second run is read while it
 * trains (its database is being written) and again after its pxcoordd was
 * killed mid-write and pxctl with it (SIGKILL). pxcoordd --read-only refuses every change and leaves its
 * database as it was. */
#include <glob.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include "pxctl_harness.h"

typedef struct {
  char dir[256];
  char out[320], runs[320], tmp[320], tmpenv[340];
  char run_dir[512];
  pxt_coordd_t live;   /* the reference: a pxcoordd on a copy of the kept database */
  pxt_result_t r, r2;
} fixture_t;

static fixture_t *F;

static void write_spec(const char *path, const char *name, int iters) {
  FILE *fp = fopen(path, "w");
  assert_non_null(fp);
  fprintf(fp,
          "name: %s\nstrategy: hsadmm\nmodel:\n  name: resnet20\ndataset:\n  name: synthetic\n"
          "  augment: false\ncluster:\n  nodes: 2\n  workers_per_node: 1\n  device: cpu\n"
          "train:\n  batch_size: 8\n  local_steps: 1\n  lr: 0.05\nprune:\n  filter_keep: 0.5\n"
          "admm:\n  max_iterations: %d\n  eps_abs: 1e-12\n  eps_rel: 1e-12\n",
          name, iters);
  fclose(fp);
}

/* pxctl with TMPDIR pointing at the fixture's tmp (where private copies go). */
static int px(pxt_result_t *r, const char *const *args) {
  const char *env[] = {F->tmpenv, NULL};
  return pxt_pxctl(r, F->dir, args, env, 60000);
}

/* A plain copy of a file (0600): the database a finished run left has no
 * -wal file, so the file alone is the whole database. */
static int copy_file(const char *from, const char *to) {
  FILE *a = fopen(from, "rb");
  int fd = open(to, O_WRONLY | O_CREAT | O_TRUNC, 0600);
  FILE *b = fd >= 0 ? fdopen(fd, "wb") : NULL;
  char buf[65536];
  size_t n;
  int ok = a && b;
  while (ok && (n = fread(buf, 1, sizeof buf, a)) > 0) ok = fwrite(buf, 1, n, b) == n;
  if (a) fclose(a);
  if (b) ok &= fclose(b) == 0;
  return ok ? 0 : -1;
}

static int group_setup(void **state) {
  (void)state;
  F = calloc(1, sizeof *F);
  if (!F || pxt_mkdtemp(F->dir, sizeof F->dir) != 0) return -1;
  if (access(PXT_PXAGENT, X_OK) != 0 || access(PXT_PXWORKER, X_OK) != 0) return -1;
  snprintf(F->out, sizeof F->out, "%s/out", F->dir);
  snprintf(F->runs, sizeof F->runs, "%s/runs", F->dir);
  snprintf(F->tmp, sizeof F->tmp, "%s/tmp", F->dir);
  snprintf(F->tmpenv, sizeof F->tmpenv, "TMPDIR=%s", F->tmp);
  mkdir(F->runs, 0755);
  mkdir(F->tmp, 0755);
  char spec[400];
  snprintf(spec, sizeof spec, "%s/tiny.yaml", F->dir);
  write_spec(spec, "offline-tiny", 3);
  const char *args[] = {"run", spec, "--json", "--keep", "--work-dir", F->runs,
                        "--output", F->out, NULL};
  /* the ranks log at info (ctest runs with PX_LOG_LEVEL=error): logs to compare */
  const char *env[] = {"PX_LOG_LEVEL=info", NULL};
  if (pxt_pxctl(&F->r, F->dir, args, env, 180000) != 0) {
    pxt_show("pxctl run", &F->r);
    return -1;
  }
  char line[8192];
  pxj_t *v = pxj_parse(pxt_last_line(F->r.out, line, sizeof line));
  if (!v || !pxj_str(v, "run_dir")) return -1;
  snprintf(F->run_dir, sizeof F->run_dir, "%s", pxj_str(v, "run_dir"));
  pxj_free(v);
  /* the reference coordinator, on a copy (a restarted pxcoordd writes) */
  F->live.pid = -1;
  snprintf(F->live.dir, sizeof F->live.dir, "%s", F->dir);
  snprintf(F->live.db, sizeof F->live.db, "%s/live.db", F->dir);
  char kept[400];
  snprintf(kept, sizeof kept, "%s/metrics/coordinator.db", F->out);
  if (copy_file(kept, F->live.db) != 0) return -1;
  return pxt_coordd_start(&F->live, NULL);
}

static int group_teardown(void **state) {
  (void)state;
  pxt_coordd_stop(&F->live, SIGTERM);
  pxt_rmtree(F->dir);
  free(F);
  return 0;
}

/* Drops the lines with a relative time ("12s ago"), which tick between two
 * calls; keeps everything else. */
static void drop_ages(char *text) {
  char *w = text;
  for (char *line = text; *line;) {
    char *nl = strchr(line, '\n');
    size_t len = nl ? (size_t)(nl - line) + 1 : strlen(line);
    char keep[1024];
    snprintf(keep, sizeof keep, "%.*s", (int)(len < sizeof keep ? len : sizeof keep - 1), line);
    if (!strstr(keep, " ago")) {
      memmove(w, line, len);
      w += len;
    }
    line += len;
  }
  *w = '\0';
}

/* Runs cmd with the output directory, and with the job id against the live
 * coordinator; the two outputs must be equal (and not empty). */
static void same_as_live(const char *cmd, const char *opt1, const char *opt2) {
  const char *off[8] = {cmd, F->out}, *live[10] = {cmd, "job-000001", "--coordinator",
                                                   F->live.target};
  int n = 2, m = 4;
  if (opt1) off[n++] = live[m++] = opt1;
  if (opt2) off[n++] = live[m++] = opt2;
  off[n] = live[m] = NULL;
  int c1 = px(&F->r, off), c2 = px(&F->r2, live);
  if (!strcmp(cmd, "status") && !opt1) {
    drop_ages(F->r.out);
    drop_ages(F->r2.out);
  }
  if (c1 != 0 || c2 != 0 || strlen(F->r.out) <= 20 || strcmp(F->r.out, F->r2.out) != 0) {
    fprintf(stderr, "pxctl %s %s %s differs offline and live:\n", cmd, opt1 ? opt1 : "",
            opt2 ? opt2 : "");
    pxt_show("offline", &F->r);
    pxt_show("live", &F->r2);
  }
  assert_int_equal(c1, 0);
  assert_int_equal(c2, 0);
  assert_true(strlen(F->r.out) > 20);
  assert_string_equal(F->r.out, F->r2.out);
}

static void test_status_metrics_drift_logs_read_the_output_directory_as_live(void **state) {
  (void)state;
  same_as_live("status", "--json", NULL);
  assert_non_null(strstr(F->r.out, "\"state\":\"SUCCEEDED\""));
  same_as_live("status", NULL, NULL);
  /* the kept model's size and multiply-accumulates (filter_keep 0.5) */
  if (!strstr(F->r.out, "MACs       ")) pxt_show("pxctl status", &F->r);
  assert_non_null(strstr(F->r.out, "model size "));
  assert_non_null(strstr(F->r.out, "MACs       40.81 M per image dense; "));
  same_as_live("metrics", NULL, NULL);
  same_as_live("metrics", "--json", NULL);
  same_as_live("metrics", "--csv", "--layers");
  same_as_live("drift", NULL, NULL);
  same_as_live("drift", "--json", NULL);
  same_as_live("logs", NULL, NULL);
  same_as_live("logs", "--json", NULL);
  assert_non_null(strstr(F->r.out, "\"source\":\"coordinator\""));
  same_as_live("logs", "--rank", "1");
  assert_true(strlen(F->r.out) > 100); /* rank 1's own log, uploaded by its agent */
}

/* The data files pxctl plot writes, concatenated in name order. */
static void plot_data(const char *figs, char *buf, size_t cap) {
  char pat[400];
  snprintf(pat, sizeof pat, "%s/data/*.tsv", figs);
  glob_t g;
  buf[0] = '\0';
  assert_int_equal(glob(pat, 0, NULL, &g), 0);
  assert_int_equal(g.gl_pathc, 3); /* the job's rows, its layers' rows and their bands */
  size_t used = 0;
  for (size_t i = 0; i < g.gl_pathc && used + 1 < cap; i++) {
    pxt_read_file(g.gl_pathv[i], buf + used, cap - used);
    used += strlen(buf + used);
  }
  globfree(&g);
}

static void test_plot_reads_the_output_directory_as_live(void **state) {
  (void)state;
  if (access("/usr/bin/gnuplot", X_OK) != 0) {
    fprintf(stderr, "SKIP: gnuplot not installed (Debian package gnuplot-nox)\n");
    skip();
  }
  char f1[400], f2[400];
  snprintf(f1, sizeof f1, "%s/figs-offline", F->dir);
  snprintf(f2, sizeof f2, "%s/figs-live", F->dir);
  const char *off[] = {"plot", F->out, "--out", f1, NULL};
  const char *live[] = {"plot", "offline-tiny", "--coordinator", F->live.target, "--out", f2,
                        NULL};
  if (px(&F->r, off) != 0) pxt_show("plot offline", &F->r);
  assert_int_equal(F->r.code, 0);
  if (px(&F->r, live) != 0) pxt_show("plot live", &F->r);
  assert_int_equal(F->r.code, 0);
  static char a[1 << 20], b[1 << 20];
  plot_data(f1, a, sizeof a);
  plot_data(f2, b, sizeof b);
  assert_true(strlen(a) > 1000);
  assert_string_equal(a, b);
}

static void test_run_directory_and_db_file_read_the_same_job(void **state) {
  (void)state;
  const char *ref[] = {"status", F->out, "--json", NULL};
  assert_int_equal(px(&F->r2, ref), 0);
  const char *kept[] = {"status", F->run_dir, "--json", NULL};
  assert_int_equal(px(&F->r, kept), 0);
  assert_string_equal(F->r.out, F->r2.out);
  char db[400];
  snprintf(db, sizeof db, "%s/metrics/coordinator.db", F->out);
  const char *byname[] = {"status", "offline-tiny", "--db", db, "--json", NULL};
  assert_int_equal(px(&F->r, byname), 0);
  assert_string_equal(F->r.out, F->r2.out);
  const char *nojob[] = {"status", "job-000009", "--db", db, NULL};
  assert_int_equal(px(&F->r, nojob), 1);
  assert_non_null(strstr(F->r.err, "no job 'job-000009' in "));
  assert_non_null(strstr(F->r.err, db));
}

/* Name, size and modification time of every file of dir, one per line. */
static void dir_state(const char *dir, char *buf, size_t cap) {
  DIR *d = opendir(dir);
  assert_non_null(d);
  struct dirent *e;
  size_t used = 0;
  buf[0] = '\0';
  while ((e = readdir(d)) && used + 300 < cap) {
    char p[700];
    struct stat sb;
    snprintf(p, sizeof p, "%s/%s", dir, e->d_name);
    if (stat(p, &sb) != 0) continue;
    used += (size_t)snprintf(buf + used, cap - used, "%s %lld %lld.%09ld\n", e->d_name,
                             (long long)sb.st_size, (long long)sb.st_mtim.tv_sec,
                             sb.st_mtim.tv_nsec);
  }
  closedir(d);
}

static void test_reading_changes_nothing_and_leaves_no_copy(void **state) {
  (void)state;
  char metrics[400], before[8192], after[8192];
  snprintf(metrics, sizeof metrics, "%s/metrics", F->out);
  dir_state(metrics, before, sizeof before);
  const char *s[] = {"status", F->out, NULL};
  assert_int_equal(px(&F->r, s), 0);
  const char *l[] = {"logs", F->out, "--rank", "0", NULL};
  assert_int_equal(px(&F->r, l), 0);
  char figs[400];
  snprintf(figs, sizeof figs, "%s/figs-again", F->dir);
  const char *p[] = {"plot", F->out, "--out", figs, NULL};
  px(&F->r, p); /* its data is read before gnuplot, which may be missing */
  dir_state(metrics, after, sizeof after);
  assert_string_equal(before, after); /* no -wal, -shm, .key, nothing touched */
  assert_int_equal(pxt_dir_entries(F->tmp), 0);
}

static void test_a_directory_that_is_not_a_run_is_refused_clearly(void **state) {
  (void)state;
  char empty[400], file[400], missing[400];
  snprintf(empty, sizeof empty, "%s/empty", F->dir);
  snprintf(file, sizeof file, "%s/tiny.yaml", F->dir);
  snprintf(missing, sizeof missing, "%s/no-such-dir", F->dir);
  mkdir(empty, 0755);
  const char *a[] = {"status", empty, NULL};
  assert_int_equal(px(&F->r, a), 1);
  assert_non_null(strstr(F->r.err, empty));
  assert_non_null(strstr(F->r.err, "metrics/coordinator.db"));
  const char *b[] = {"metrics", missing, NULL};
  assert_int_equal(px(&F->r, b), 1);
  assert_non_null(strstr(F->r.err, missing));
  assert_non_null(strstr(F->r.err, "No such file or directory"));
  const char *c[] = {"drift", file, NULL};
  assert_int_equal(px(&F->r, c), 1);
  assert_non_null(strstr(F->r.err, "is not a directory"));
  const char *d[] = {"plot", empty, "--out", empty, NULL};
  assert_int_equal(px(&F->r, d), 1);
  assert_non_null(strstr(F->r.err, "metrics/coordinator.db"));
  const char *e[] = {"logs", F->out, "--follow", NULL};
  assert_int_equal(px(&F->r, e), 2);
  assert_non_null(strstr(F->r.err, "read offline"));
}

/* The run directory pxctl run made under runs/ (other than the kept one). */
static int find_new_run_dir(char *out, size_t cap) {
  char pat[400];
  snprintf(pat, sizeof pat, "%s/pxctl-run-*", F->runs);
  glob_t g;
  memset(&g, 0, sizeof g);
  int found = 0;
  if (glob(pat, 0, NULL, &g) == 0)
    for (size_t i = 0; i < g.gl_pathc && !found; i++)
      if (strcmp(g.gl_pathv[i], F->run_dir) != 0) {
        snprintf(out, cap, "%s", g.gl_pathv[i]);
        found = 1;
      }
  globfree(&g);
  return found;
}

/* Sends sig to every process whose command line mentions needle and prog
 * (what the killed run left: its pxcoordd, agents, workers); the count. */
static int signal_procs(const char *needle, const char *prog, int sig) {
  pid_t pids[64];
  int n = pxt_procs_mentioning(needle, pids, 64), hit = 0;
  for (int i = 0; i < n; i++) {
    char path[64], cmd[8192] = "";
    snprintf(path, sizeof path, "/proc/%d/cmdline", (int)pids[i]);
    pxt_read_file(path, cmd, sizeof cmd); /* the program's path, up to its first NUL */
    if (strstr(cmd, prog) && kill(pids[i], sig) == 0) hit++;
  }
  return hit;
}

static void test_a_running_then_killed_run_is_readable(void **state) {
  (void)state;
  char spec[400], op[400], ep[400], dir[512] = "";
  snprintf(spec, sizeof spec, "%s/long.yaml", F->dir);
  snprintf(op, sizeof op, "%s/long.out", F->dir);
  snprintf(ep, sizeof ep, "%s/long.err", F->dir);
  write_spec(spec, "offline-long", 500);
  const char *args[] = {"run", spec, "--work-dir", F->runs, NULL};
  const char *env[] = {"PX_LOG_LEVEL=info", NULL};
  pid_t pid = pxt_pxctl_start(args, env, op, ep);
  assert_true(pid > 0);
  /* while it trains: its database is being written by its pxcoordd */
  int running = 0;
  for (int i = 0; i < 600 && !running; i++) {
    usleep(100000);
    if (!dir[0] && !find_new_run_dir(dir, sizeof dir)) continue;
    const char *s[] = {"metrics", dir, "--json", NULL};
    if (px(&F->r, s) == 0 && strstr(F->r.out, "\"iteration\":2")) running = 1;
  }
  if (!running) pxt_show("metrics of the running job", &F->r);
  assert_true(running);
  const char *st[] = {"status", dir, "--json", NULL};
  assert_int_equal(px(&F->r, st), 0);
  assert_non_null(strstr(F->r.out, "\"state\":\"RUNNING\""));
  /* the agents upload the rank logs every 2 s; until the coordinator has
   * them, pxctl reads this host's files (no "source"), which does not mean
   * that the database has them (on the Zen 5 VM under ASan it had not) */
  const char *l[] = {"logs", dir, "--json", NULL};
  int uploaded = 0;
  for (int i = 0; i < 100 && !uploaded; i++) {
    uploaded = px(&F->r, l) == 0 && strstr(F->r.out, "rank 1: iteration 1 ") &&
               strstr(F->r.out, "\"source\":\"coordinator\"");
    if (!uploaded) usleep(200000);
  }
  assert_true(uploaded);
  /* The worst end: pxctl frozen (so that it cleans nothing up), its
   * pxcoordd killed mid-write (its -wal file not checkpointed), then pxctl
   * killed. */
  kill(pid, SIGSTOP);
  assert_int_equal(signal_procs(dir, "pxcoordd", SIGKILL), 1);
  for (int i = 0; i < 100 && signal_procs(dir, "pxcoordd", 0) > 0; i++) usleep(100000);
  assert_int_equal(signal_procs(dir, "pxcoordd", 0), 0);
  kill(pid, SIGKILL);
  assert_true(pxt_wait_pid(pid, 10000) != -1);
  char wal[600];
  snprintf(wal, sizeof wal, "%s/coordinator.db-wal", dir);
  assert_true(pxt_exists(wal));
  assert_int_equal(px(&F->r, st), 0);
  assert_non_null(strstr(F->r.out, "\"job_id\":\"job-000001\""));
  assert_non_null(strstr(F->r.out, "\"state\":\"RUNNING\""));
  const char *m[] = {"metrics", dir, "--csv", NULL};
  assert_int_equal(px(&F->r, m), 0);
  assert_non_null(strstr(F->r.out, "\n2,0,")); /* iteration 2, rank 0: committed before */
  /* what the agents had uploaded */
  if (px(&F->r, l) != 0) pxt_show("logs of the killed run", &F->r);
  assert_int_equal(F->r.code, 0);
  assert_non_null(strstr(F->r.out, "\"source\":\"coordinator\""));
  assert_non_null(strstr(F->r.out, "rank 1: iteration 1 "));
  /* the agents would wind down by themselves; the test does not wait */
  signal_procs(dir, "px", SIGKILL);
}

/* pxcoordd --read-only answers queries and refuses every change, and
 * leaves its database as it was; without a database it refuses to start. */
static void test_read_only_coordinator_changes_nothing(void **state) {
  (void)state;
  pxt_coordd_t d;
  memset(&d, 0, sizeof d);
  d.pid = -1;
  snprintf(d.dir, sizeof d.dir, "%s", F->dir);
  snprintf(d.db, sizeof d.db, "%s/ro.db", F->dir);
  assert_int_equal(copy_file(F->live.db, d.db), 0);
  char before[8192], after[8192];
  dir_state(F->dir, before, sizeof before);
  const char *ro[] = {"--read-only", NULL};
  assert_int_equal(pxt_coordd_start(&d, ro), 0);
  const char *st[] = {"status", "job-000001", "--coordinator", d.target, NULL};
  assert_int_equal(px(&F->r, st), 0);
  char spec[400];
  snprintf(spec, sizeof spec, "%s/tiny.yaml", F->dir);
  const char *sub[] = {"submit", spec, "--coordinator", d.target, NULL};
  const char *del[] = {"delete", "job-000001", "--coordinator", d.target, NULL};
  const char *const *calls[] = {sub, del};
  for (int i = 0; i < 2; i++) {
    assert_int_equal(px(&F->r, calls[i]), 1);
    assert_non_null(strstr(F->r.err, "read-only"));
    assert_non_null(strstr(F->r.err, "FAILED_PRECONDITION"));
  }
  assert_true(pxt_coordd_stop(&d, SIGTERM) != -1);
  /* the directory (the copy, its -wal and -shm gone again, no .key) */
  dir_state(F->dir, after, sizeof after);
  char *ro_before = strstr(before, "ro.db "), *ro_after = strstr(after, "ro.db ");
  assert_non_null(ro_before);
  assert_non_null(ro_after);
  assert_memory_equal(ro_before, ro_after, strcspn(ro_before, "\n"));
  assert_null(strstr(after, "ro.db.key"));
  /* nothing to read: refused, nothing created */
  snprintf(d.db, sizeof d.db, "%s/none.db", F->dir);
  assert_int_equal(pxt_coordd_start(&d, ro), -1);
  assert_int_equal(access(d.db, F_OK), -1);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_status_metrics_drift_logs_read_the_output_directory_as_live),
      cmocka_unit_test(test_plot_reads_the_output_directory_as_live),
      cmocka_unit_test(test_run_directory_and_db_file_read_the_same_job),
      cmocka_unit_test(test_reading_changes_nothing_and_leaves_no_copy),
      cmocka_unit_test(test_a_directory_that_is_not_a_run_is_refused_clearly),
      cmocka_unit_test(test_a_running_then_killed_run_is_readable),
      cmocka_unit_test(test_read_only_coordinator_changes_nothing),
  };
  return cmocka_run_group_tests(tests, group_setup, group_teardown);
}
