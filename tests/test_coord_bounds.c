/* pxcoordd's bounds on what clients may store and make it do,
 * on the real daemon (no tokens: the loopback set-up of the embedded mode):
 * ListJobs pages newest first and stays fast with 1,000 jobs of 1 MiB specs
 * (which an unpaged listing could not even send); spec_yaml over 1 MiB and
 * strings that are not UTF-8 are refused at the edge; a finished job's
 * rendezvous entries are gone and it takes no more KvPuts; values and
 * requests over their caps are refused; DeleteJob and the retention setting
 * remove a finished job with everything stored for it; a rank's exit
 * reason (a log tail) that is not UTF-8 is cleaned, not served as is; a
 * full disk is RESOURCE_EXHAUSTED (not INTERNAL), and the daemon works on
 * once there is room again. */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>

#include <cmocka.h>
#include <sched.h>
#include <sys/mount.h>
#include <sys/statvfs.h>

#include "coord_harness.h"

#define JS(x) PRUNEX__V1__JOB_STATE__JOB_STATE_##x

typedef struct {
  pxt_coordd_t d;
  px_rpc_channel_t *ch;
} fixture_t;

static int setup(void **state) {
  fixture_t *f = calloc(1, sizeof *f);
  if (!f || pxt_coordd_setup(&f->d, NULL) != 0) {
    free(f);
    return -1;
  }
  if (px_rpc_channel_create(f->d.target, &f->ch) != PX_OK) return -1;
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

/* 1 MiB of YAML comments (valid UTF-8), NUL-terminated. */
static char *big_yaml(size_t n) {
  char *y = malloc(n + 1);
  assert_non_null(y);
  for (size_t i = 0; i < n; i++) y[i] = (i % 64 == 63) ? '\n' : (i % 64 == 0 ? '#' : 'x');
  y[n] = '\0';
  return y;
}

static void test_list_jobs_pages_1000_jobs_of_1mib_specs(void **state) {
  fixture_t *f = *state;
  const int N = 1000;
  char *yaml = big_yaml(1 << 20);
  pxt_spec_t s;
  pxt_spec_init(&s, 64, 1); /* never placed: no nodes */
  s.req.spec_yaml = yaml;
  char first[64] = "", last[64] = "";
  int64_t t0 = pxt_now_ms();
  for (int i = 0; i < N; i++) {
    char id[64];
    if (pxt_submit(f->ch, &s, id, sizeof id) != PX_OK) fail_msg("submit %d: %s", i, px_last_error());
    if (i == 0) snprintf(first, sizeof first, "%s", id);
    snprintf(last, sizeof last, "%s", id);
  }
  printf("1000 jobs of 1 MiB specs submitted in %.1f s\n", (double)(pxt_now_ms() - t0) / 1000);
  free(yaml);

  /* The default page: the newest 100, no spec_yaml, quickly. */
  Prunex__V1__ListJobsRequest req = PRUNEX__V1__LIST_JOBS_REQUEST__INIT;
  Prunex__V1__ListJobsResponse *l = NULL;
  t0 = pxt_now_ms();
  assert_int_equal(px_rpc_list_jobs(f->ch, &req, 10000, &l), PX_OK);
  int64_t ms = pxt_now_ms() - t0;
  printf("ListJobs, first page of %zu: %lld ms\n", l->n_jobs, (long long)ms);
  assert_int_equal(l->n_jobs, 100);
  assert_string_equal(l->jobs[0]->job_id, last);
  assert_string_equal(l->jobs[0]->spec_yaml, "");
  assert_string_not_equal(l->next_page_token, "");
  assert_true(ms < 2000);
  px_rpc_message_free(l);

  /* Every job once, newest first, in pages of 300. */
  char token[64] = "", prev[64] = "";
  int seen = 0, pages = 0;
  t0 = pxt_now_ms();
  do {
    req.limit = 300;
    req.page_token = token;
    assert_int_equal(px_rpc_list_jobs(f->ch, &req, 10000, &l), PX_OK);
    for (size_t i = 0; i < l->n_jobs; i++) {
      if (prev[0]) assert_true(strcmp(l->jobs[i]->job_id, prev) < 0); /* job-NNNNNN */
      snprintf(prev, sizeof prev, "%s", l->jobs[i]->job_id);
      seen++;
    }
    snprintf(token, sizeof token, "%s", l->next_page_token);
    px_rpc_message_free(l);
    pages++;
  } while (token[0] && pages < 10);
  printf("ListJobs, all %d in %d pages: %lld ms\n", seen, pages, (long long)(pxt_now_ms() - t0));
  assert_int_equal(seen, N);
  assert_int_equal(pages, 4);
  assert_string_equal(prev, first);

  /* With spec_yaml a page stops at 16 MiB of it and says where to go on. */
  req.limit = 1000;
  req.page_token = "";
  req.include_spec_yaml = 1;
  assert_int_equal(px_rpc_list_jobs(f->ch, &req, 20000, &l), PX_OK);
  assert_true(l->n_jobs >= 16 && l->n_jobs <= 18);
  assert_int_equal(strlen(l->jobs[0]->spec_yaml), 1 << 20);
  assert_string_not_equal(l->next_page_token, "");
  px_rpc_message_free(l);

  req.limit = 1001;
  req.include_spec_yaml = 0;
  assert_int_equal(px_rpc_list_jobs(f->ch, &req, 0, &l), PX_ERR_INVALID);
}

static void test_spec_yaml_over_1mib_and_non_utf8_strings_are_refused(void **state) {
  fixture_t *f = *state;
  char *yaml = big_yaml((1 << 20) + 1);
  pxt_spec_t s;
  pxt_spec_init(&s, 1, 1);
  s.req.spec_yaml = yaml;
  char id[64];
  assert_int_equal(pxt_submit(f->ch, &s, id, sizeof id), PX_ERR_INVALID);
  assert_non_null(strstr(px_last_error(), "spec_yaml"));
  free(yaml);
  s.req.spec_yaml = "name: ok\n";
  s.spec.name = "bad-\xff-name";
  assert_int_equal(pxt_submit(f->ch, &s, id, sizeof id), PX_ERR_INVALID);
  assert_non_null(strstr(px_last_error(), "spec.name: not valid UTF-8"));
  /* a node name that proto3 clients could not decode */
  assert_int_not_equal(pxt_register(f->ch, "node-\xc3\x28", 1, 0, id, sizeof id), PX_OK);
  assert_int_equal(px_rpc_last_code(), PX_RPC_INVALID_ARGUMENT);
  assert_non_null(strstr(px_last_error(), "name: not valid UTF-8"));
  assert_int_equal(pxt_register(f->ch, "n\xc3\xb6" "de", 1, 0, id, sizeof id), PX_OK); /* UTF-8 ok */
  /* 8 MiB is over every method's cap: refused unread */
  size_t n = 8 << 20;
  char *junk = calloc(1, n);
  void *resp = NULL;
  size_t rlen = 0;
  assert_int_not_equal(px_rpc_call_raw(f->ch, PX_RPC_SUBMIT_JOB, junk, n, 10000, &resp, &rlen),
                       PX_OK);
  assert_int_equal(px_rpc_last_code(), PX_RPC_RESOURCE_EXHAUSTED);
  free(junk);
}

static px_status_t put(px_rpc_channel_t *ch, const char *job, const char *key, const void *v,
                       size_t len) {
  Prunex__V1__KvPutRequest req = PRUNEX__V1__KV_PUT_REQUEST__INIT;
  req.job_id = (char *)job;
  req.key = (char *)key;
  req.value.data = (uint8_t *)v;
  req.value.len = len;
  return px_rpc_kv_put(ch, &req, 0);
}

static void test_finished_jobs_lose_their_kv_and_take_no_puts(void **state) {
  fixture_t *f = *state;
  char job[64];
  assert_int_equal(pxt_submit_mp(f->ch, 1, 1, job, sizeof job), PX_OK);
  assert_int_equal(put(f->ch, job, "ucx/0", "addr", 4), PX_OK);
  char *big = calloc(1, (256 << 10) + 1);
  assert_int_equal(put(f->ch, job, "big", big, (256 << 10) + 1), PX_ERR_BACKEND);
  assert_int_equal(px_rpc_last_code(), PX_RPC_RESOURCE_EXHAUSTED);
  free(big);
  Prunex__V1__CancelJobResponse *cr = NULL;
  assert_int_equal(px_rpc_cancel_job(f->ch, job, "done", 0, &cr), PX_OK);
  px_rpc_message_free(cr);
  Prunex__V1__KvGetRequest g = PRUNEX__V1__KV_GET_REQUEST__INIT;
  g.job_id = job;
  g.key = "ucx/0";
  Prunex__V1__KvGetResponse *r = NULL;
  px_status_t st = px_rpc_kv_get(f->ch, &g, 0, &r);
  assert_true(st != PX_OK || !r->found); /* gone with the job */
  px_rpc_message_free(r);
  assert_int_equal(put(f->ch, job, "ucx/0", "addr", 4), PX_ERR_STATE);
  assert_int_equal(px_rpc_last_code(), PX_RPC_FAILED_PRECONDITION);
  assert_non_null(strstr(px_last_error(), "has finished"));
}

static void test_exit_reasons_that_are_not_utf8_are_cleaned(void **state) {
  fixture_t *f = *state;
  char node[64], job[64];
  assert_int_equal(pxt_register(f->ch, "n1", 1, 0, node, sizeof node), PX_OK);
  assert_int_equal(pxt_submit_mp(f->ch, 1, 1, job, sizeof job), PX_OK);
  Prunex__V1__RankExit ex = PRUNEX__V1__RANK_EXIT__INIT;
  ex.job_id = job;
  ex.node_id = node;
  ex.rank = 0;
  ex.exit_code = 1;
  ex.reason = "log tail: bad \xff\xfe bytes and a cut \xe2\x80";
  assert_int_equal(px_rpc_report_rank_exit(f->ch, &ex, 0), PX_OK);
  Prunex__V1__Job *j = NULL;
  assert_int_equal(px_rpc_get_job(f->ch, job, 0, &j), PX_OK);
  assert_int_equal(j->state, JS(FAILED));
  assert_non_null(strstr(j->reason, "bad ?? bytes and a cut ??"));
  px_rpc_message_free(j);
}

/* Back-dates a job's end with Debian's python3 sqlite3 (the daemon must be
 * stopped). */
static int backdate(const char *db, const char *job, int days) {
  char cmd[1024];
  snprintf(cmd, sizeof cmd,
           "/usr/bin/python3 -I -c \"import sqlite3,time; c=sqlite3.connect('%s'); "
           "c.execute('UPDATE jobs SET finished_unix_ms=? WHERE job_id=?', "
           "(int((time.time()-%d*86400)*1000), '%s')); c.commit()\"",
           db, days, job);
  return system(cmd);
}

static void test_delete_and_retention_remove_finished_jobs(void **state) {
  fixture_t *f = *state;
  char j1[64], j2[64], j3[64];
  assert_int_equal(pxt_submit_mp(f->ch, 1, 1, j1, sizeof j1), PX_OK);
  assert_int_equal(pxt_submit_mp(f->ch, 1, 1, j2, sizeof j2), PX_OK);
  assert_int_equal(pxt_submit_mp(f->ch, 1, 1, j3, sizeof j3), PX_OK);
  assert_int_equal(px_rpc_delete_job(f->ch, j1, 0), PX_ERR_STATE); /* pending */
  Prunex__V1__CancelJobResponse *cr = NULL;
  const char *ids[] = {j1, j2};
  for (int i = 0; i < 2; i++) {
    assert_int_equal(px_rpc_cancel_job(f->ch, ids[i], "done", 0, &cr), PX_OK);
    px_rpc_message_free(cr);
  }
  assert_int_equal(px_rpc_delete_job(f->ch, j1, 0), PX_OK);
  assert_int_equal(pxt_job_state(f->ch, j1), -1);
  assert_int_equal(px_rpc_delete_job(f->ch, j1, 0), PX_ERR_INVALID); /* NOT_FOUND */

  /* j2 ended 10 days ago; with retention_days 7 it goes, j3 (pending) stays */
  px_rpc_channel_destroy(f->ch);
  f->ch = NULL;
  assert_int_equal(pxt_coordd_stop(&f->d, SIGTERM), 0);
  assert_int_equal(backdate(f->d.db, j2, 10), 0);
  const char *extra[] = {"--retention-days", "7", NULL};
  assert_int_equal(pxt_coordd_start(&f->d, extra), 0);
  assert_int_equal(px_rpc_channel_create(f->d.target, &f->ch), PX_OK);
  int gone = 0;
  for (int i = 0; i < 100 && !gone; i++) {
    gone = pxt_job_state(f->ch, j2) == -1;
    if (!gone) pxt_sleep_ms(50);
  }
  assert_true(gone);
  assert_int_equal(pxt_job_state(f->ch, j3), JS(PENDING));
}

/* A full disk, for real: the daemon's database on a 2 MiB tmpfs in a
 * mount namespace of this test's own (root only; skipped otherwise), most
 * of it taken by a filler file. A 1 MiB SubmitJob cannot be written and is
 * refused RESOURCE_EXHAUSTED, saying the disk is full (it was INTERNAL);
 * once the filler is gone the same call succeeds. */
static void test_a_full_disk_is_resource_exhausted(void **state) {
  (void)state;
  pxt_coordd_t d;
  memset(&d, 0, sizeof d);
  d.pid = -1;
  assert_int_equal(pxt_mkdtemp(d.dir, sizeof d.dir), 0);
  if (unshare(CLONE_NEWNS) != 0 || mount(NULL, "/", NULL, MS_REC | MS_PRIVATE, NULL) != 0 ||
      mount("tmpfs", d.dir, "tmpfs", 0, "size=2m") != 0) {
    pxt_rmtree(d.dir);
    skip(); /* not root: no file system of our own to fill */
  }
  snprintf(d.db, sizeof d.db, "%s/coord.db", d.dir);
  assert_int_equal(pxt_coordd_start(&d, NULL), 0);
  char filler[400];
  snprintf(filler, sizeof filler, "%s/filler", d.dir);
  struct statvfs vs;
  assert_int_equal(statvfs(d.dir, &vs), 0);
  size_t room = (size_t)vs.f_bavail * vs.f_bsize;
  assert_true(room > 512 * 1024);
  size_t fill = room - 512 * 1024; /* leaves 512 KiB: less than the spec */
  char *zeros = calloc(1, fill);
  assert_non_null(zeros);
  int fd = open(filler, O_WRONLY | O_CREAT, 0600);
  assert_true(fd >= 0);
  assert_int_equal(write(fd, zeros, fill), (ssize_t)fill);
  close(fd);
  free(zeros);

  px_rpc_channel_t *ch = NULL;
  assert_int_equal(px_rpc_channel_create(d.target, &ch), PX_OK);
  char *yaml = big_yaml(1 << 20);
  pxt_spec_t s;
  pxt_spec_init(&s, 1, 1);
  s.req.spec_yaml = yaml;
  char job[64];
  assert_int_not_equal(pxt_submit(ch, &s, job, sizeof job), PX_OK);
  if (px_rpc_last_code() != PX_RPC_RESOURCE_EXHAUSTED || !strstr(px_last_error(), "disk is full"))
    fail_msg("code %d: %s", px_rpc_last_code(), px_last_error());
  assert_int_equal(unlink(filler), 0);
  assert_int_equal(pxt_submit(ch, &s, job, sizeof job), PX_OK);
  assert_int_equal(pxt_job_state(ch, job), JS(PENDING));
  free(yaml);
  px_rpc_channel_destroy(ch);
  int status = pxt_coordd_stop(&d, SIGTERM);
  assert_true(WIFEXITED(status) && WEXITSTATUS(status) == 0);
  umount2(d.dir, MNT_DETACH);
  pxt_rmtree(d.dir);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_a_full_disk_is_resource_exhausted),
      cmocka_unit_test_setup_teardown(test_spec_yaml_over_1mib_and_non_utf8_strings_are_refused,
                                      setup, teardown),
      cmocka_unit_test_setup_teardown(test_finished_jobs_lose_their_kv_and_take_no_puts, setup,
                                      teardown),
      cmocka_unit_test_setup_teardown(test_delete_and_retention_remove_finished_jobs, setup,
                                      teardown),
      cmocka_unit_test_setup_teardown(test_exit_reasons_that_are_not_utf8_are_cleaned, setup,
                                      teardown),
      cmocka_unit_test_setup_teardown(test_list_jobs_pages_1000_jobs_of_1mib_specs, setup,
                                      teardown),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
