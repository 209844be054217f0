/* Logs in one place: agents upload their ranks' logs to the
 * coordinator and `pxctl logs` reads any rank from any host.
 *
 * The real processes on loopback: pxcoordd, and two pxagent nodes with
 * separate work directories, one configured by a settings file (--config)
 * and one by PRUNEX_COORDINATOR, each with one CPU worker; a small job runs
 * on both. pxctl, given a work directory with no files at all, prints each
 * rank's log exactly as the agent that ran the rank wrote it (the workers
 * log one line per iteration at info), as JSON too, and --follow prints a
 * running job's lines until it ends. The coordinator's side of the
 * protocol: only the node holding a rank may append to its log, a chunk
 * that starts past the end is answered with where to resend from, an
 * oversized chunk is refused, duplicate bytes are not stored twice, and a
 * rank keeps a bounded tail (1 MiB plus at most one chunk). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include "agent_harness.h"
#include "pxctl_harness.h"

typedef struct {
  pxt_coordd_t d;
  px_rpc_channel_t *ch;
  pxt_agent_t a[2];
  char empty[400];    /* a work directory with nothing in it: pxctl's */
  pxt_result_t r;
  char coord_env[128];
} fixture_t;

static fixture_t *F;

static void dump_all(void) {
  for (int i = 0; i < 2; i++) pxt_dump_file(F->a[i].log);
  pxt_coordd_dump_log(&F->d);
}

#define FAIL(...)            \
  do {                       \
    dump_all();              \
    fail_msg(__VA_ARGS__);   \
  } while (0)

/* Agent 0 from a settings file, agent 1 from PRUNEX_COORDINATOR. */
static int start_agents(fixture_t *f) {
  pxt_agent_t *a = &f->a[0];
  memset(a, 0, sizeof *f->a * 2);
  snprintf(a->name, sizeof a->name, "node-conf");
  snprintf(a->work, sizeof a->work, "%s/work-conf", f->d.dir);
  snprintf(a->log, sizeof a->log, "%s/agent-conf.log", f->d.dir);
  char conf[480];
  snprintf(conf, sizeof conf, "%s/pxagent.conf", f->d.dir);
  FILE *fp = fopen(conf, "w");
  if (!fp) return -1;
  fprintf(fp,
          "# written by test_deploy_logs\n"
          "coordinator = %s\nname = node-conf\ncpu-workers = 1\nwork_dir = \"%s\"\n"
          "log_level = info\n",
          f->d.target, a->work);
  fclose(fp);
  const char *argv0[] = {PXT_AGENT, "--config", conf, NULL};
  a->pid = pxt_spawn_logged(PXT_AGENT, argv0, a->log);

  a = &f->a[1];
  snprintf(a->name, sizeof a->name, "node-env");
  snprintf(a->work, sizeof a->work, "%s/work-env", f->d.dir);
  snprintf(a->log, sizeof a->log, "%s/agent-env.log", f->d.dir);
  setenv("PRUNEX_COORDINATOR", f->d.target, 1);
  const char *argv1[] = {PXT_AGENT, "--name", a->name, "--cpu-workers", "1", "--work-dir",
                         a->work, "--log-level", "info", NULL};
  a->pid = pxt_spawn_logged(PXT_AGENT, argv1, a->log);
  unsetenv("PRUNEX_COORDINATOR");
  return f->a[0].pid > 0 && f->a[1].pid > 0 ? 0 : -1;
}

static int setup(void **state) {
  fixture_t *f = calloc(1, sizeof *f);
  if (!f) return -1;
  F = f;
  /* the workers log at info unless PX_LOG_LEVEL says otherwise (ctest
   * sets error for the other tests) */
  unsetenv("PX_LOG_LEVEL");
  if (pxt_coordd_setup(&f->d, NULL) != 0) return -1;
  if (px_rpc_channel_create(f->d.target, &f->ch) != PX_OK) return -1;
  snprintf(f->empty, sizeof f->empty, "%s/pxctl-empty", f->d.dir);
  if (mkdir(f->empty, 0755) != 0) return -1;
  snprintf(f->coord_env, sizeof f->coord_env, "PRUNEX_COORDINATOR=%s", f->d.target);
  if (start_agents(f) != 0) return -1;
  if (!pxt_wait_node_named(f->ch, "node-conf", PRUNEX__V1__NODE_STATE__NODE_STATE_READY, 20000) ||
      !pxt_wait_node_named(f->ch, "node-env", PRUNEX__V1__NODE_STATE__NODE_STATE_READY, 20000)) {
    dump_all();
    return -1;
  }
  *state = f;
  return 0;
}

static int teardown(void **state) {
  fixture_t *f = *state;
  int rc = 0;
  for (int i = 0; i < 2; i++)
    if (f->a[i].pid > 0 && !pxt_exited_ok(pxt_agent_stop(&f->a[i], SIGTERM, 20000))) {
      fprintf(stderr, "agent %s did not stop cleanly\n", f->a[i].name);
      rc = -1;
    }
  px_rpc_channel_destroy(f->ch);
  if (rc != 0) dump_all();
  if (getenv("PX_TEST_KEEP")) f->d.dir[0] = '\0';
  if (pxt_coordd_teardown(&f->d) != 0) rc = -1;
  free(f);
  return rc;
}

/* pxctl with the coordinator in its environment and no usable work dir. */
static int pxctl(fixture_t *f, const char *const *args) {
  const char *env[] = {f->coord_env, "PRUNEX_WORK_DIR=/nonexistent", NULL};
  return pxt_pxctl(&f->r, f->d.dir, args, env, 60000);
}

static void submit(fixture_t *f, int iterations, int steps, char *job, size_t cap) {
  pxt_job_t j;
  pxt_job_init(&j, NULL, 2, 1, iterations, steps);
  j.spec.name = "logs-test";
  if (pxt_job_submit(f->ch, &j, job, cap) != PX_OK) FAIL("submit: %s", px_last_error());
}

/* The rank's log file in whichever agent's work directory has it. */
static int rank_file(fixture_t *f, const char *job, int rank, char *text, size_t cap, int *agent) {
  for (int i = 0; i < 2; i++) {
    char path[700];
    snprintf(path, sizeof path, "%s/jobs/%s/rank-%d.log", f->a[i].work, job, rank);
    if (!pxt_file_exists(path, 0)) continue;
    pxt_read_file(path, text, cap);
    if (agent) *agent = i;
    return 1;
  }
  return 0;
}

/* Waits until the coordinator holds rank's whole log (eof). */
static int wait_eof(fixture_t *f, const char *job, int rank, int timeout_ms) {
  int64_t end = pxt_now_ms() + timeout_ms;
  do {
    Prunex__V1__GetRankLogRequest req = PRUNEX__V1__GET_RANK_LOG_REQUEST__INIT;
    req.job_id = (char *)job;
    req.rank = rank;
    req.max_bytes = 1;
    Prunex__V1__RankLog *log = NULL;
    if (px_rpc_get_rank_log(f->ch, &req, 0, &log) == PX_OK) {
      int eof = log->found && log->eof;
      px_rpc_message_free(log);
      if (eof) return 1;
    }
    pxt_sleep_ms(100);
  } while (pxt_now_ms() < end);
  return 0;
}

static void test_pxctl_logs_reads_a_rank_of_another_agent_through_the_coordinator(void **state) {
  fixture_t *f = *state;
  char job[64];
  submit(f, 3, 2, job, sizeof job);
  if (pxt_wait_job(f->ch, job, 0, 240000) != PRUNEX__V1__JOB_STATE__JOB_STATE_SUCCEEDED)
    FAIL("the job did not succeed");
  /* the job ran on both agents: one rank each, in different work dirs */
  static char want0[1 << 15], want1[1 << 15];
  int ag0 = -1, ag1 = -1;
  assert_true(rank_file(f, job, 0, want0, sizeof want0, &ag0));
  assert_true(rank_file(f, job, 1, want1, sizeof want1, &ag1));
  assert_int_not_equal(ag0, ag1);
  assert_non_null(strstr(want1, "rank 1: iteration 2"));
  assert_true(wait_eof(f, job, 0, 15000));
  assert_true(wait_eof(f, job, 1, 15000));

  /* pxctl has no file of the job: it reads rank 1 through the coordinator */
  assert_int_equal(pxctl(f, (const char *[]){"logs", job, "--rank", "1", "--work-dir", f->empty,
                                             NULL}),
                   0);
  assert_string_equal(f->r.out, want1);

  /* every rank, with headers */
  assert_int_equal(pxctl(f, (const char *[]){"logs", job, "--work-dir", f->empty, NULL}), 0);
  assert_non_null(strstr(f->r.out, "==> rank 0 <=="));
  assert_non_null(strstr(f->r.out, "==> rank 1 <=="));
  assert_non_null(strstr(f->r.out, want0));

  /* --json */
  assert_int_equal(pxctl(f, (const char *[]){"logs", job, "--json", NULL}), 0);
  pxj_t *v = pxj_parse(f->r.out);
  assert_non_null(v);
  assert_string_equal(pxj_str(v, "source"), "coordinator");
  const pxj_t *files = pxj_get(v, "files");
  assert_int_equal(files->n, 2);
  assert_string_equal(pxj_str(files->items[1], "text"), want1);
  assert_true(pxj_num(files->items[1], "size") == (double)strlen(want1));
  pxj_free(v);

  /* a rank the job does not have */
  assert_int_equal(pxctl(f, (const char *[]){"logs", job, "--rank", "7", NULL}), 1);
  assert_non_null(strstr(f->r.err, "ranks 0..1"));
}

static void test_pxctl_logs_follow_prints_a_running_job_until_it_ends(void **state) {
  fixture_t *f = *state;
  char job[64], outp[400], errp[400];
  submit(f, 6, 2, job, sizeof job);
  snprintf(outp, sizeof outp, "%s/follow.out", f->d.dir);
  snprintf(errp, sizeof errp, "%s/follow.err", f->d.dir);
  const char *env[] = {f->coord_env, NULL};
  const char *args[] = {"logs", job, "--follow", "--rank", "1", "--work-dir", f->empty, NULL};
  pid_t pid = pxt_pxctl_start(args, env, outp, errp);
  assert_true(pid > 0);
  int status = pxt_wait_pid(pid, 240000);
  if (status == -1) {
    kill(pid, SIGKILL);
    pxt_wait_pid(pid, 5000);
    FAIL("pxctl logs --follow did not end with the job");
  }
  assert_true(WIFEXITED(status));
  assert_int_equal(WEXITSTATUS(status), 0);
  assert_int_equal(pxt_job_state(f->ch, job), PRUNEX__V1__JOB_STATE__JOB_STATE_SUCCEEDED);
  static char out[1 << 15], want[1 << 15];
  pxt_read_file(outp, out, sizeof out);
  assert_true(rank_file(f, job, 1, want, sizeof want, NULL));
  printf("followed %zu bytes of rank 1's log (the file has %zu)\n", strlen(out), strlen(want));
  assert_non_null(strstr(out, "rank 1: iteration 5"));
  assert_string_equal(out, want);
}

/* A RankLogChunk for the rank 0 of job, from node. */
static px_status_t append(fixture_t *f, const char *job, const char *node, int64_t offset,
                          const void *data, size_t len, int64_t *next) {
  Prunex__V1__RankLogChunk c = PRUNEX__V1__RANK_LOG_CHUNK__INIT;
  c.job_id = (char *)job;
  c.node_id = (char *)node;
  c.rank = 0;
  c.offset = offset;
  c.data.data = (uint8_t *)data;
  c.data.len = len;
  Prunex__V1__RankLogChunkResponse *r = NULL;
  px_status_t st = px_rpc_append_rank_log(f->ch, &c, 0, &r);
  if (st == PX_OK) *next = r->next_offset;
  px_rpc_message_free(r);
  return st;
}

static void test_coordinator_keeps_a_bounded_idempotent_tail_from_the_rank_node_only(void **state) {
  fixture_t *f = *state;
  char job[64];
  submit(f, 1, 1, job, sizeof job);
  if (pxt_wait_job(f->ch, job, 0, 240000) != PRUNEX__V1__JOB_STATE__JOB_STATE_SUCCEEDED)
    FAIL("the job did not succeed");
  assert_true(wait_eof(f, job, 0, 15000));
  /* which node holds rank 0 */
  Prunex__V1__Job *j = NULL;
  assert_int_equal(px_rpc_get_job(f->ch, job, 0, &j), PX_OK);
  char holder[128], other[128];
  snprintf(holder, sizeof holder, "%s", j->node_ids[0]);
  snprintf(other, sizeof other, "%s", j->node_ids[1]);
  px_rpc_message_free(j);
  Prunex__V1__GetRankLogRequest req = PRUNEX__V1__GET_RANK_LOG_REQUEST__INIT;
  req.job_id = job;
  Prunex__V1__RankLog *log = NULL;
  assert_int_equal(px_rpc_get_rank_log(f->ch, &req, 0, &log), PX_OK);
  int64_t size = log->size, next = -1;
  px_rpc_message_free(log);

  static char block[256 << 10];
  memset(block, 'x', sizeof block);
  /* another node may not write rank 0's log */
  assert_int_not_equal(append(f, job, other, size, "no\n", 3, &next), PX_OK);
  assert_int_equal(px_rpc_last_code(), PX_RPC_PERMISSION_DENIED);
  /* past the end: nothing stored, resend from the end */
  assert_int_equal(append(f, job, holder, size + 100, "gap\n", 4, &next), PX_OK);
  assert_int_equal(next, size);
  /* too big */
  static char big[(256 << 10) + 1];
  assert_int_not_equal(append(f, job, holder, size, big, sizeof big, &next), PX_OK);
  assert_int_equal(px_rpc_last_code(), PX_RPC_INVALID_ARGUMENT);
  /* overlapping resend: only the new bytes count */
  assert_int_equal(append(f, job, holder, size, "abc", 3, &next), PX_OK);
  assert_int_equal(next, size + 3);
  assert_int_equal(append(f, job, holder, size, "abcdef", 6, &next), PX_OK);
  assert_int_equal(next, size + 6);
  /* 2.5 MiB more: the coordinator keeps a bounded tail */
  int64_t at = next;
  for (int i = 0; i < 10; i++) {
    assert_int_equal(append(f, job, holder, at, block, sizeof block, &next), PX_OK);
    at = next;
  }
  assert_int_equal(px_rpc_get_rank_log(f->ch, &req, 0, &log), PX_OK);
  printf("rank 0: %lld bytes uploaded, the coordinator keeps %lld from offset %lld\n",
         (long long)log->size, (long long)(log->size - log->start_offset),
         (long long)log->start_offset);
  assert_int_equal(log->size, at);
  assert_true(log->start_offset > 0);
  assert_true(log->size - log->start_offset <= (1 << 20) + (256 << 10));
  assert_true(log->size - log->start_offset >= (1 << 20));
  assert_int_equal(log->offset, log->start_offset);
  assert_true(log->data.len <= (1 << 20));
  px_rpc_message_free(log);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test_setup_teardown(
          test_pxctl_logs_reads_a_rank_of_another_agent_through_the_coordinator, setup, teardown),
      cmocka_unit_test_setup_teardown(test_pxctl_logs_follow_prints_a_running_job_until_it_ends,
                                      setup, teardown),
      cmocka_unit_test_setup_teardown(
          test_coordinator_keeps_a_bounded_idempotent_tail_from_the_rank_node_only, setup,
          teardown),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
