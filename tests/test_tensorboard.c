/* TensorBoard event files of a job, with the real programs.
 *
 * The CRC-32C and the TFRecord framing (cli/pxctl_tfrecord.c, compiled in)
 * against the Castagnoli check value and RFC 3720's vectors. Then a live
 * job: a pxcoordd and one pxagent (2 CPU workers), a tiny hsadmm job
 * (resnet20, synthetic data, 6 iterations) followed by `pxctl watch JOB
 * --tensorboard DIR` from its submission to its end (its file grows while
 * the job runs), then `pxctl export JOB --tensorboard DIR`, both reading
 * the reports three at a time; and a finished run: `pxctl run --tensorboard DIR`
 * writing as the job goes, then `pxctl export OUTPUT --tensorboard DIR`
 * reading the run's directory offline. Every event file is read back by
 * tests/tensorboard_check.py with python3-protobuf (classes generated from
 * proto/tensorboard.proto by protoc): both CRCs of every record, the
 * file_version event, one event per iteration, and every scalar against
 * what `pxctl metrics JOB --json --layers` says for the job. A directory
 * that cannot be made is named, exit 1. Without /usr/bin/python3's
 * google.protobuf or protoc, the read-back tests skip, saying so. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include "agent_harness.h"
#include "pxctl_harness.h"
#include "pxctl_tfrecord.h"

#define PXT_PYTHON "/usr/bin/python3"

typedef struct {
  char dir[256];
  char out[320];       /* the output directory of `pxctl run` */
  pxt_result_t r;
  /* the live job's coordinator and agent, stopped by the teardown also
   * after a failed assertion */
  pxt_coordd_t d;
  pxt_agent_t a;
  px_rpc_channel_t *ch;
} fixture_t;

static fixture_t *F;

static int group_setup(void **state) {
  (void)state;
  F = calloc(1, sizeof *F);
  if (!F || pxt_mkdtemp(F->dir, sizeof F->dir) != 0) return -1;
  snprintf(F->out, sizeof F->out, "%s/out", F->dir);
  return 0;
}

static int group_teardown(void **state) {
  (void)state;
  if (F->ch) px_rpc_channel_destroy(F->ch);
  if (F->a.pid > 0) pxt_agents_stop(&F->a, 1);
  if (F->d.pid > 0) pxt_coordd_teardown(&F->d);
  pxt_rmtree(F->dir);
  free(F);
  return 0;
}

/* ---- CRC-32C and the framing ----------------------------------------------------- */

static void test_crc32c_matches_the_castagnoli_check_values(void **state) {
  (void)state;
  assert_int_equal(pxctl_crc32c("123456789", 9), 0xe3069283u);
  assert_int_equal(pxctl_crc32c("", 0), 0u);
  unsigned char zeros[32] = {0}, ones[32], inc[32];
  memset(ones, 0xff, sizeof ones);
  for (int i = 0; i < 32; i++) inc[i] = (unsigned char)i;
  /* RFC 3720, B.4 */
  assert_int_equal(pxctl_crc32c(zeros, 32), 0x8a9136aau);
  assert_int_equal(pxctl_crc32c(ones, 32), 0x62a8ab43u);
  assert_int_equal(pxctl_crc32c(inc, 32), 0x46dd794eu);
  assert_int_equal(pxctl_crc32c_mask(0), 0xa282ead8u);
  assert_int_equal(pxctl_crc32c_mask(0x00008000u), 0xa282ead9u); /* rotated right by 15 */
}

static uint32_t le32(const unsigned char *b) {
  return (uint32_t)b[0] | (uint32_t)b[1] << 8 | (uint32_t)b[2] << 16 | (uint32_t)b[3] << 24;
}

static void test_a_record_is_length_crc_data_crc(void **state) {
  (void)state;
  FILE *f = tmpfile();
  assert_non_null(f);
  assert_int_equal(pxctl_tfrecord_write(f, "abc", 3), 0);
  rewind(f);
  unsigned char b[64];
  assert_int_equal(fread(b, 1, sizeof b, f), 19);
  fclose(f);
  for (int i = 0; i < 8; i++) assert_int_equal(b[i], i == 0 ? 3 : 0);
  assert_int_equal(le32(b + 8), pxctl_crc32c_mask(pxctl_crc32c(b, 8)));
  assert_memory_equal(b + 12, "abc", 3);
  assert_int_equal(le32(b + 15), pxctl_crc32c_mask(pxctl_crc32c("abc", 3)));
}

/* ---- reading the files back ----------------------------------------------------------- */

/* Skips (saying why) unless python3-protobuf and protoc are there. */
static int have_python_protobuf(void) {
  if (system(PXT_PYTHON " -c 'import google.protobuf' >/dev/null 2>&1") != 0) {
    fprintf(stderr, "SKIP: " PXT_PYTHON " has no google.protobuf (Debian's python3-protobuf)\n");
    return 0;
  }
  if (system("protoc --version >/dev/null 2>&1") != 0) {
    fprintf(stderr, "SKIP: no protoc (Debian's protobuf-compiler)\n");
    return 0;
  }
  return 1;
}

/* pxctl args (env: extra environment) with stdout into the file path;
 * its exit status. */
static int pxctl_to_file(const char *const *args, const char *const *env, const char *path) {
  char err[400];
  snprintf(err, sizeof err, "%s.err", path);
  pid_t pid = pxt_pxctl_start(args, env, path, err);
  assert_true(pid > 0);
  int status = pxt_wait_pid(pid, 60000);
  if (status == -1) kill(pid, SIGKILL);
  int code = status != -1 && WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  if (code != 0) pxt_dump_file(err);
  return code;
}

/* Runs the checker on the metrics document and the directories dirs[n];
 * asserts that it passes and that some iteration had a test accuracy and
 * some scalar was an ADMM figure, in each directory. */
static void check_event_files(const char *metrics, const char *const *dirs, int n) {
  char cmd[4096];
  int k = snprintf(cmd, sizeof cmd, PXT_PYTHON " %s/tests/tensorboard_check.py %s/proto/tensorboard.proto %s",
                   PX_SOURCE_DIR, PX_SOURCE_DIR, metrics);
  for (int i = 0; i < n; i++) k += snprintf(cmd + k, sizeof cmd - (size_t)k, " %s", dirs[i]);
  snprintf(cmd + k, sizeof cmd - (size_t)k, " 2>&1");
  FILE *p = popen(cmd, "r");
  assert_non_null(p);
  char line[1024];
  int good = 0;
  while (fgets(line, sizeof line, p)) {
    fputs(line, stdout);
    int events = 0, scalars = 0, iters = 0, acc = 0, admm = 0;
    const char *c = strstr(line, ": ");
    if (c && sscanf(c, ": %d events, %d scalars match the job's %d iterations; test/accuracy %d, "
                       "admm %d", &events, &scalars, &iters, &acc, &admm) == 5) {
      assert_int_equal(events, iters);
      assert_true(iters >= 3);
      assert_true(scalars > 20 * iters);
      assert_true(acc >= 1);
      assert_true(admm > 0);
      good++;
    }
  }
  assert_int_equal(pclose(p), 0);
  assert_int_equal(good, n);
}

/* ---- a live job: watch, then export ------------------------------------------------ */

/* The size of the event file in dir (-1: none yet). */
static long event_file_size(const char *dir) {
  DIR *d = opendir(dir);
  if (!d) return -1;
  long size = -1;
  struct dirent *e;
  while ((e = readdir(d)))
    if (!strncmp(e->d_name, "events.out.tfevents.", 20)) {
      char path[700];
      struct stat sb;
      snprintf(path, sizeof path, "%s/%s", dir, e->d_name);
      if (stat(path, &sb) == 0) size = (long)sb.st_size;
    }
  closedir(d);
  return size;
}

/* Runs `pxctl watch` (args, env) to its end; its exit status, and in
 * *grew whether its event file in dir grew past the file_version record
 * (40 bytes) while the job was still RUNNING. */
static int watch_live(const char *const *args, const char *const *env, const char *dir,
                      px_rpc_channel_t *ch, const char *job, int *grew) {
  char out[400], err[400];
  snprintf(out, sizeof out, "%s/watch.out", F->dir);
  snprintf(err, sizeof err, "%s/watch.err", F->dir);
  pid_t pid = pxt_pxctl_start(args, env, out, err);
  assert_true(pid > 0);
  *grew = 0;
  int status = -1;
  for (int64_t end = pxt_now_ms() + 180000; pxt_now_ms() < end;) {
    if ((status = pxt_wait_pid(pid, 100)) != -1) break;
    long size = event_file_size(dir);
    if (size > 40 && pxt_job_state(ch, job) == PRUNEX__V1__JOB_STATE__JOB_STATE_RUNNING) *grew = 1;
  }
  if (status == -1) kill(pid, SIGKILL);
  int code = status != -1 && WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  if (code != 0) pxt_dump_file(err);
  return code;
}

static void test_watch_and_export_of_a_live_job(void **state) {
  (void)state;
  if (!have_python_protobuf()) skip();
  pxt_coordd_t *d = &F->d;
  assert_int_equal(pxt_coordd_setup(d, NULL), 0);
  assert_int_equal(px_rpc_channel_create(d->target, &F->ch), PX_OK);
  px_rpc_channel_t *ch = F->ch;
  assert_int_equal(pxt_agent_start(&F->a, d, "node0", 2, NULL), 0);
  assert_true(pxt_wait_node_named(ch, "node0", PRUNEX__V1__NODE_STATE__NODE_STATE_READY, 30000));
  pxt_job_t job;
  pxt_job_init(&job, NULL, 1, 2, 6, 1);
  char id[64], coord[96], tbw[400], tbe[400], metrics[400];
  assert_int_equal(pxt_job_submit(ch, &job, id, sizeof id), PX_OK);
  snprintf(coord, sizeof coord, "PRUNEX_COORDINATOR=%s", d->target);
  snprintf(tbw, sizeof tbw, "%s/tb/watch", F->dir);
  snprintf(tbe, sizeof tbe, "%s/tb/export", F->dir);
  snprintf(metrics, sizeof metrics, "%s/live-metrics.json", F->dir);
  /* pages of three reports (iteration x rank): the paging of a long job */
  const char *env[] = {coord, "PRUNEX_TENSORBOARD_PAGE=3", "PRUNEX_TENSORBOARD_POLL_S=0.2", NULL};
  /* from just after the submission to the end of the job; the file grows
   * while the job runs (about 1.4 s per iteration on the AVX2 VM, a few
   * tenths on the Zen 5 VM, where a poll every 2 s saw none of it run:
   * polled every 0.2 s) */
  const char *watch[] = {"watch", id, "--tensorboard", tbw, NULL};
  int grew = 0;
  assert_int_equal(watch_live(watch, env, tbw, ch, id, &grew), 0);
  assert_true(grew);
  const char *exp[] = {"export", id, "--tensorboard", tbe, "--json", NULL};
  pxt_pxctl(&F->r, F->dir, exp, env, 60000);
  if (F->r.code != 0) pxt_show("pxctl export", &F->r);
  assert_int_equal(F->r.code, 0);
  pxj_t *j = pxj_parse(F->r.out);
  assert_non_null(j);
  assert_true(pxj_num(j, "tensorboard_events") == 6.0);
  assert_non_null(pxj_str(j, "tensorboard_file"));
  assert_non_null(strstr(pxj_str(j, "tensorboard_file"), "/events.out.tfevents."));
  pxj_free(j);
  const char *m[] = {"metrics", id, "--json", "--layers", NULL};
  assert_int_equal(pxctl_to_file(m, env, metrics), 0);
  const char *dirs[] = {tbw, tbe};
  check_event_files(metrics, dirs, 2);
  px_rpc_channel_destroy(ch);
  F->ch = NULL;
  assert_int_equal(pxt_agents_stop(&F->a, 1), 0);
  F->a.pid = 0;
  assert_int_equal(pxt_coordd_teardown(d), 0);
  d->pid = -1;
}

/* ---- a finished run: run --tensorboard, then export of its directory ------------------- */

static void test_run_writes_events_and_export_reads_the_run_offline(void **state) {
  (void)state;
  if (!have_python_protobuf()) skip();
  char spec[400], runs[400], tbr[400], tbo[400], metrics[400];
  snprintf(spec, sizeof spec, "%s/tb.yaml", F->dir);
  snprintf(runs, sizeof runs, "%s/runs", F->dir);
  snprintf(tbr, sizeof tbr, "%s/tb/run", F->dir);
  snprintf(tbo, sizeof tbo, "%s/tb/offline", F->dir);
  snprintf(metrics, sizeof metrics, "%s/run-metrics.json", F->dir);
  mkdir(runs, 0755);
  FILE *fp = fopen(spec, "w");
  assert_non_null(fp);
  fprintf(fp, "name: tb-run\nstrategy: hsadmm\nmodel:\n  name: resnet20\ndataset:\n"
              "  name: synthetic\n  augment: false\ncluster:\n  nodes: 2\n  workers_per_node: 1\n"
              "  device: cpu\ntrain:\n  batch_size: 8\n  local_steps: 1\n  lr: 0.05\n"
              "prune:\n  filter_keep: 0.5\nadmm:\n  max_iterations: 4\n");
  fclose(fp);
  const char *run[] = {"run", spec, "--json", "--work-dir", runs, "--output", F->out,
                       "--tensorboard", tbr, NULL};
  pxt_pxctl(&F->r, F->dir, run, NULL, 180000);
  if (F->r.code != 0) pxt_show("pxctl run", &F->r);
  assert_int_equal(F->r.code, 0);
  assert_non_null(strstr(F->r.err, "TensorBoard events go to "));
  const char *exp[] = {"export", F->out, "--tensorboard", tbo, NULL};
  pxt_pxctl(&F->r, F->dir, exp, NULL, 60000);
  if (F->r.code != 0) pxt_show("pxctl export", &F->r);
  assert_int_equal(F->r.code, 0);
  assert_non_null(strstr(F->r.out, "tensorboard "));
  assert_non_null(strstr(F->r.out, " (4 iterations, "));
  const char *m[] = {"metrics", F->out, "--json", "--layers", NULL};
  assert_int_equal(pxctl_to_file(m, NULL, metrics), 0);
  const char *dirs[] = {tbr, tbo};
  check_event_files(metrics, dirs, 2);
}

static void test_a_directory_that_cannot_be_made_is_named(void **state) {
  (void)state;
  char file[400], bad[440];
  snprintf(file, sizeof file, "%s/a-file", F->dir);
  FILE *fp = fopen(file, "w");
  assert_non_null(fp);
  fclose(fp);
  snprintf(bad, sizeof bad, "%s/events", file);
  /* the finished run of the test before, else any run directory check
   * fails first: a path that is not a run is named too */
  const char *exp[] = {"export", F->out, "--tensorboard", bad, NULL};
  pxt_pxctl(&F->r, F->dir, exp, NULL, 60000);
  assert_int_equal(F->r.code, 1);
  if (pxt_exists(F->out)) {
    assert_non_null(strstr(F->r.err, bad));
    assert_non_null(strstr(F->r.err, "Not a directory"));
  }
  /* run says so before it starts anything */
  char spec[400];
  snprintf(spec, sizeof spec, "%s/tb.yaml", F->dir);
  const char *run[] = {"run", spec, "--tensorboard", bad, NULL};
  pxt_pxctl(&F->r, F->dir, run, NULL, 60000);
  assert_int_equal(F->r.code, 1);
  assert_non_null(strstr(F->r.err, bad));
  assert_null(strstr(F->r.err, "submitted"));
  const char *empty[] = {"export", F->out, "--tensorboard=", NULL};
  pxt_pxctl(&F->r, F->dir, empty, NULL, 60000);
  assert_int_equal(F->r.code, 2);
  assert_non_null(strstr(F->r.err, "--tensorboard needs a directory"));
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_crc32c_matches_the_castagnoli_check_values),
      cmocka_unit_test(test_a_record_is_length_crc_data_crc),
      cmocka_unit_test(test_watch_and_export_of_a_live_job),
      cmocka_unit_test(test_run_writes_events_and_export_reads_the_run_offline),
      cmocka_unit_test(test_a_directory_that_cannot_be_made_is_named),
  };
  return cmocka_run_group_tests(tests, group_setup, group_teardown);
}
