/* The whole chain with TLS and tokens on: real pxcoordd with a
 * certificate made by openssl at test time and a tokens file, real pxagent
 * processes authenticating with their node tokens (PRUNEX_TOKEN, --ca), and
 * real pxworker processes carrying the per-rank secrets their agents got in
 * the assignment. A small job submitted by a user runs to SUCCEEDED, owned
 * by that user; an agent holding a user token is refused registration and
 * says so in its log; an output_dir outside what the agents allow is
 * refused at submission, with nothing written; and one that is under an
 * agent's --output-root only through a symbolic link leading out of it is
 * refused by the agents before anything runs, naming the link; and a job
 * that ran without a usable checkpoint because one node could not write
 * says so when it ends, while the other node kept only keep + 1 files; a
 * dataset.path outside the agents' data roots (or leading out of one
 * through a link) is refused before anything runs, and an image folder's
 * links out of the root are skipped by name, and so is a
 * dataset.cache_dir outside the roots the agents let jobs write to; a
 * model.onnx outside the data roots is refused at submission, and one
 * changed after it fails the job. */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>

#include <cmocka.h>

#include "agent_harness.h"
#include "pxctl_harness.h"

#define NODES 2
#define WORKERS 1

typedef struct {
  pxt_coordd_t d;
  char ca[320];
  char root[320];     /* every agent's --output-root */
  pxt_agent_t a[NODES];
  px_rpc_channel_t *alice;
} fixture_t;

static fixture_t *F;

static void dump_all(void) {
  pxt_coordd_dump_log(&F->d);
  for (int i = 0; i < NODES; i++) pxt_dump_file(F->a[i].log);
}

/* Starts an agent with a token in its environment (and --ca). */
static int start_agent(pxt_agent_t *a, const char *name, const char *token) {
  const char *extra[] = {"--ca", F->ca, "--output-root", F->root, NULL};
  setenv("PRUNEX_TOKEN", token, 1);
  int rc = pxt_agent_start(a, &F->d, name, WORKERS, extra);
  unsetenv("PRUNEX_TOKEN");
  return rc;
}

static int group_setup(void **state) {
  (void)state;
  F = calloc(1, sizeof *F);
  if (!F) return -1;
  F->d.pid = -1;
  if (pxt_mkdtemp(F->d.dir, sizeof F->d.dir) != 0 || pxt_make_security(F->d.dir) != 0) return -1;
  snprintf(F->d.db, sizeof F->d.db, "%s/coord.db", F->d.dir);
  snprintf(F->ca, sizeof F->ca, "%s/ca.pem", F->d.dir);
  snprintf(F->root, sizeof F->root, "%s/outputs", F->d.dir);
  if (mkdir(F->root, 0755) != 0) return -1;
  char cert[320], key[320], tokens[320];
  snprintf(cert, sizeof cert, "%s/server.pem", F->d.dir);
  snprintf(key, sizeof key, "%s/server.key", F->d.dir);
  snprintf(tokens, sizeof tokens, "%s/tokens", F->d.dir);
  const char *extra[] = {"--tls-cert", cert, "--tls-key", key, "--tokens", tokens, NULL};
  if (pxt_coordd_start(&F->d, extra) != 0) return -1;
  F->alice = pxt_channel(F->d.target, F->ca, PXT_TOK_ALICE);
  if (!F->alice) return -1;
  static const char *const names[NODES] = {"n1", "n2"};
  static const char *const toks[NODES] = {PXT_TOK_N1, PXT_TOK_N2};
  for (int i = 0; i < NODES; i++) {
    if (start_agent(&F->a[i], names[i], toks[i]) != 0) return -1;
    if (!pxt_wait_node_named(F->alice, names[i], PRUNEX__V1__NODE_STATE__NODE_STATE_READY,
                             30000)) {
      dump_all();
      return -1;
    }
  }
  return 0;
}

static int group_teardown(void **state) {
  (void)state;
  int rc = 0;
  for (int i = 0; i < NODES; i++) {
    if (F->a[i].pid <= 0) continue;
    int status = pxt_agent_stop(&F->a[i], SIGTERM, 20000);
    if (!pxt_exited_ok(status)) {
      fprintf(stderr, "pxagent %s did not exit cleanly (wait status %d)\n", F->a[i].name, status);
      pxt_dump_file(F->a[i].log);
      rc = -1;
    }
  }
  px_rpc_channel_destroy(F->alice);
  if (pxt_coordd_teardown(&F->d) != 0) rc = -1;
  free(F);
  return rc;
}

static void test_a_job_runs_to_success_with_tls_tokens_and_rank_secrets(void **state) {
  (void)state;
  pxt_job_t j;
  pxt_job_init(&j, NULL, NODES, WORKERS, 2, 1);
  char job[64];
  if (pxt_job_submit(F->alice, &j, job, sizeof job) != PX_OK)
    fail_msg("submit: %s", px_last_error());
  int s = pxt_wait_job(F->alice, job, 0, 200000);
  if (s != PRUNEX__V1__JOB_STATE__JOB_STATE_SUCCEEDED) {
    char reason[2048];
    pxt_job_reason(F->alice, job, reason, sizeof reason);
    fprintf(stderr, "job state %d, reason: %s\n", s, reason);
    for (int i = 0; i < NODES; i++) {
      char p[600];
      snprintf(p, sizeof p, "%s/jobs/%s/rank-%d.log", F->a[i].work, job, i);
      pxt_dump_file(p);
    }
    dump_all();
    fail_msg("the job did not succeed");
  }
  Prunex__V1__Job *jb = NULL;
  assert_int_equal(px_rpc_get_job(F->alice, job, 0, &jb), PX_OK);
  assert_string_equal(jb->owner, "alice");
  assert_true(jb->summary && jb->summary->iterations >= 1);
  px_rpc_message_free(jb);
  /* The rank secrets never went through argv: the agents' logs list the
   * workers' command lines, which must not hold one. */
  for (int i = 0; i < NODES; i++) assert_int_equal(pxt_file_contains(F->a[i].log, "pxr_"), 0);
}

static void test_an_agent_with_a_user_token_is_refused(void **state) {
  (void)state;
  pxt_agent_t a;
  assert_int_equal(start_agent(&a, "alice", PXT_TOK_ALICE), 0);
  int seen = 0;
  for (int i = 0; i < 200 && !seen; i++) {
    seen = pxt_file_contains(a.log, "PERMISSION_DENIED");
    if (!seen) pxt_sleep_ms(50);
  }
  pxt_agent_stop(&a, SIGTERM, 10000);
  if (!seen) {
    pxt_dump_file(a.log);
    fail_msg("the agent did not report PERMISSION_DENIED");
  }
  assert_int_equal(pxt_node_by_name(F->alice, "alice", NULL, 0), -1); /* never registered */
}

static void test_output_dir_outside_the_agents_roots_is_refused_at_submit(void **state) {
  (void)state;
  pxt_job_t j;
  pxt_job_init(&j, NULL, NODES, WORKERS, 2, 1);
  char evil[600], job[64];
  snprintf(evil, sizeof evil, "%s/evil/out", F->d.dir);
  j.spec.output_dir = evil;
  assert_int_not_equal(pxt_job_submit(F->alice, &j, job, sizeof job), PX_OK);
  assert_int_equal(px_rpc_last_code(), PX_RPC_PERMISSION_DENIED);
  assert_non_null(strstr(px_last_error(), "does not let jobs write there"));
  char parent[400];
  snprintf(parent, sizeof parent, "%s/evil", F->d.dir);
  assert_int_equal(access(parent, F_OK), -1); /* nothing written */
  /* under one node's work directory only: the other refuses it */
  snprintf(evil, sizeof evil, "%s/out", F->a[0].work);
  assert_int_not_equal(pxt_job_submit(F->alice, &j, job, sizeof job), PX_OK);
  assert_non_null(strstr(px_last_error(), "node n2"));
  j.spec.output_dir = "runs/../../../../etc";
  assert_int_not_equal(pxt_job_submit(F->alice, &j, job, sizeof job), PX_OK);
  assert_non_null(strstr(px_last_error(), "'..' is not allowed"));
  j.spec.output_dir = "runs/ok"; /* relative: under the job's directory */
  assert_int_equal(pxt_job_submit(F->alice, &j, job, sizeof job), PX_OK);
  Prunex__V1__CancelJobResponse *cr = NULL;
  assert_int_equal(px_rpc_cancel_job(F->alice, job, "enough", 0, &cr), PX_OK);
  px_rpc_message_free(cr);
}

/* ROOT/evil -> ELSEWHERE: output_dir ROOT/evil/m is textually under the
 * agents' --output-root, so the coordinator accepts it; the agents resolve
 * it beneath ROOT (openat2 RESOLVE_BENEATH) and refuse it, naming the link,
 * before any worker runs: the job fails and ELSEWHERE stays empty. An
 * absolute link to a place inside ROOT is refused as well, saying so; a
 * relative link that stays inside ROOT is fine. */
static void test_output_dir_through_a_link_out_of_the_root_is_refused(void **state) {
  (void)state;
  char elsewhere[400], evil[400], out[450], job[64];
  snprintf(elsewhere, sizeof elsewhere, "%s/elsewhere", F->d.dir);
  snprintf(evil, sizeof evil, "%s/evil", F->root);
  assert_int_equal(mkdir(elsewhere, 0755), 0);
  assert_int_equal(symlink(elsewhere, evil), 0);
  pxt_job_t j;
  pxt_job_init(&j, NULL, NODES, WORKERS, 2, 1);
  snprintf(out, sizeof out, "%s/m", evil);
  j.spec.output_dir = out;
  if (pxt_job_submit(F->alice, &j, job, sizeof job) != PX_OK)
    fail_msg("submit: %s", px_last_error());
  int s = pxt_wait_job(F->alice, job, 0, 30000);
  char reason[2048];
  pxt_job_reason(F->alice, job, reason, sizeof reason);
  if (s != PRUNEX__V1__JOB_STATE__JOB_STATE_FAILED || !strstr(reason, "symbolic link") ||
      !strstr(reason, evil))
    fail_msg("job state %d, reason: %s", s, reason);
  char m[450];
  snprintf(m, sizeof m, "%s/m", elsewhere);
  assert_int_equal(access(m, F_OK), -1); /* nothing made through the link */

  /* an absolute link to a place inside the root is refused too, and the
   * reason says so instead of "leads out" */
  char inside[400], link[400];
  snprintf(inside, sizeof inside, "%s/real", F->root);
  snprintf(link, sizeof link, "%s/absolute", F->root);
  assert_int_equal(mkdir(inside, 0755), 0);
  assert_int_equal(symlink(inside, link), 0);
  snprintf(out, sizeof out, "%s/m", link);
  if (pxt_job_submit(F->alice, &j, job, sizeof job) != PX_OK)
    fail_msg("submit: %s", px_last_error());
  s = pxt_wait_job(F->alice, job, 0, 30000);
  pxt_job_reason(F->alice, job, reason, sizeof reason);
  if (s != PRUNEX__V1__JOB_STATE__JOB_STATE_FAILED || strstr(reason, "leads out") ||
      !strstr(reason, "through an absolute symbolic link") || !strstr(reason, link) ||
      !strstr(reason, "must be relative"))
    fail_msg("job state %d, reason: %s", s, reason);
  snprintf(m, sizeof m, "%s/m", inside);
  assert_int_equal(access(m, F_OK), -1);

  /* a relative link inside the root is followed */
  snprintf(link, sizeof link, "%s/alias", F->root);
  assert_int_equal(symlink("real", link), 0);
  snprintf(out, sizeof out, "%s/m", link);
  if (pxt_job_submit(F->alice, &j, job, sizeof job) != PX_OK)
    fail_msg("submit: %s", px_last_error());
  s = pxt_wait_job(F->alice, job, 0, 200000);
  pxt_job_reason(F->alice, job, reason, sizeof reason);
  if (s != PRUNEX__V1__JOB_STATE__JOB_STATE_SUCCEEDED) fail_msg("job state %d: %s", s, reason);
  snprintf(m, sizeof m, "%s/m/model.safetensors", inside);
  assert_int_equal(access(m, F_OK), 0);
}

/* dataset.path is read only under the agents' data roots (the harness
 * gives them the test's directory and /usr/share/datasets), which they
 * report when they register: /etc/passwd is refused at SubmitJob, naming
 * the node and what it allows; a path under a root that a link leads out
 * of can only be seen by the agents, which fail the job before any worker
 * runs, naming the link's root. */
static void test_dataset_path_outside_the_data_roots_is_refused(void **state) {
  (void)state;
  char link[400], job[64], reason[2048];
  pxt_job_t j;
  pxt_job_init(&j, NULL, NODES, WORKERS, 2, 1);
  j.dataset.path = "/etc/passwd";
  assert_int_not_equal(pxt_job_submit(F->alice, &j, job, sizeof job), PX_OK);
  assert_int_equal(px_rpc_last_code(), PX_RPC_PERMISSION_DENIED);
  if (!strstr(px_last_error(), "spec.dataset.path = '/etc/passwd': node n1 does not let jobs "
                               "read there") ||
      !strstr(px_last_error(), "/usr/share/datasets"))
    fail_msg("%s", px_last_error());
  j.dataset.path = "data/../../../etc/passwd";
  assert_int_not_equal(pxt_job_submit(F->alice, &j, job, sizeof job), PX_OK);
  assert_non_null(strstr(px_last_error(), "'..' is not allowed"));

  snprintf(link, sizeof link, "%s/data-link", F->d.dir);
  assert_int_equal(symlink("/etc", link), 0);
  char through[450];
  snprintf(through, sizeof through, "%s/passwd", link);
  j.dataset.path = through;
  if (pxt_job_submit(F->alice, &j, job, sizeof job) != PX_OK)
    fail_msg("submit: %s", px_last_error());
  int s = pxt_wait_job(F->alice, job, 0, 30000);
  pxt_job_reason(F->alice, job, reason, sizeof reason);
  if (s != PRUNEX__V1__JOB_STATE__JOB_STATE_FAILED || !strstr(reason, "through a symbolic link") ||
      !strstr(reason, through))
    fail_msg("dataset.path %s: job state %d, reason: %s", through, s, reason);
}

/* n2 (rank 1) cannot write its checkpoints after iteration 0: their file
 * names are taken by directories, as good as a full disk for the rename.
 * The job still succeeds, its reason says "no usable checkpoint since
 * iteration 0", naming rank 1, and so did its status while it ran
 * (Job.checkpoint_problem, from the iteration reports); n1 (rank 0) holds
 * keep (1) + 1 files, not one per iteration. */
static void test_a_job_without_usable_checkpoints_says_so(void **state) {
  (void)state;
  enum { ITERS = 4 }; /* the report of iteration 3 knows checkpoint 1 failed */
  Prunex__V1__ListJobsRequest lr = PRUNEX__V1__LIST_JOBS_REQUEST__INIT;
  lr.limit = 1;
  Prunex__V1__ListJobsResponse *l = NULL;
  assert_int_equal(px_rpc_list_jobs(F->alice, &lr, 0, &l), PX_OK);
  long next = l->n_jobs ? atol(l->jobs[0]->job_id + 4) + 1 : 1;
  px_rpc_message_free(l);
  char want[64], p[700];
  snprintf(want, sizeof want, "job-%06ld", next);
  for (int it = 1; it < ITERS; it++) {
    snprintf(p, sizeof p, "mkdir -p '%s/jobs/%s/checkpoints/ckpt-%08d-r1.safetensors'",
             F->a[1].work, want, it);
    assert_int_equal(system(p), 0);
  }
  pxt_job_t j;
  pxt_job_init(&j, NULL, NODES, WORKERS, ITERS, 1);
  Prunex__V1__RecoverySpec rec = PRUNEX__V1__RECOVERY_SPEC__INIT;
  rec.checkpoint_every = 1;
  rec.keep = 1;
  rec.max_restarts = 0;
  j.spec.recovery = &rec;
  char job[64];
  if (pxt_job_submit(F->alice, &j, job, sizeof job) != PX_OK)
    fail_msg("submit: %s", px_last_error());
  assert_string_equal(job, want);
  int s = pxt_wait_job(F->alice, job, 0, 200000);
  char reason[2048];
  pxt_job_reason(F->alice, job, reason, sizeof reason);
  if (s != PRUNEX__V1__JOB_STATE__JOB_STATE_SUCCEEDED ||
      !strstr(reason, "no usable checkpoint since iteration 0") || !strstr(reason, "rank 1: "))
    fail_msg("job state %d, reason: %s", s, reason);
  /* said while it ran: the iteration reports carried it to the job */
  Prunex__V1__Job *jb = NULL;
  assert_int_equal(px_rpc_get_job(F->alice, job, 0, &jb), PX_OK);
  if (!strstr(jb->checkpoint_problem, "no usable checkpoint since iteration 0: iteration 1: rank 1: "))
    fail_msg("checkpoint_problem: '%s'", jb->checkpoint_problem);
  px_rpc_message_free(jb);
  /* what the operator sees */
  char e1[128], e2[400], e3[128];
  snprintf(e1, sizeof e1, "PRUNEX_COORDINATOR=%s", F->d.target);
  snprintf(e2, sizeof e2, "PRUNEX_CA=%s", F->ca);
  snprintf(e3, sizeof e3, "PRUNEX_TOKEN=%s", PXT_TOK_ALICE);
  const char *const envs[] = {e1, e2, e3, NULL};
  static pxt_result_t r;
  const char *const st[] = {"status", job, NULL};
  if (pxt_pxctl(&r, F->d.dir, st, envs, 30000) != 0) pxt_show("pxctl status", &r);
  if (!strstr(r.out, "checkpoint no usable checkpoint since iteration 0"))
    fail_msg("pxctl status:\n%s", r.out);
  int n = 0, has0 = 0;
  for (int it = 0; it < ITERS; it++) {
    snprintf(p, sizeof p, "%s/jobs/%s/checkpoints/ckpt-%08d-r0.safetensors", F->a[0].work, job,
             it);
    if (access(p, F_OK) == 0) n++, has0 |= it == 0;
  }
  if (n > 2 || !has0) fail_msg("rank 0 holds %d checkpoint files (iteration 0: %d)", n, has0);
}

/* An image folder under the agents' data root: its files are
 * opened beneath that root, which pxagent passes to pxworker (--data-root).
 * A link to an image outside the root is skipped by its name, its pixels
 * and size read by no one; a link into a pool elsewhere under the root (but
 * outside the folder) decodes, which it would not if the worker had only
 * the folder as its root. Needs /usr/bin/python3 with OpenCV for the
 * images (tests/image_fixture.py). */
static void test_an_image_folder_reads_nothing_outside_the_data_root(void **state) {
  (void)state;
  char fx[400], dir[400], p[600], t[600], outside[64], cmd[1200], job[64], reason[2048];
  snprintf(fx, sizeof fx, "%s/imgfx", F->d.dir);
  snprintf(cmd, sizeof cmd, "/usr/bin/python3 %s/tests/image_fixture.py %s >/dev/null 2>&1",
           PX_SOURCE_DIR, fx);
  if (system(cmd) != 0) {
    print_message("needs /usr/bin/python3 with python3-opencv (scripts/bootstrap)\n");
    skip();
  }
  snprintf(outside, sizeof outside, "/tmp/px_outside_XXXXXX");
  assert_non_null(mkdtemp(outside));
  snprintf(cmd, sizeof cmd, "cp %s/wide.png %s/private.png", fx, outside);
  assert_int_equal(system(cmd), 0);
  snprintf(p, sizeof p, "%s/pool", F->d.dir);
  assert_int_equal(mkdir(p, 0755), 0);
  snprintf(p, sizeof p, "%s/pool/shared.jpg", F->d.dir);
  snprintf(t, sizeof t, "%s/smooth.jpg", fx);
  assert_int_equal(symlink(t, p), 0);
  snprintf(dir, sizeof dir, "%s/folder", F->d.dir);
  assert_int_equal(mkdir(dir, 0755), 0);
  const char *splits[2] = {"train", "val"}, *classes[2] = {"a", "b"};
  for (int s = 0; s < 2; s++) {
    snprintf(p, sizeof p, "%s/%s", dir, splits[s]);
    assert_int_equal(mkdir(p, 0755), 0);
    for (int c = 0; c < 2; c++) {
      snprintf(p, sizeof p, "%s/%s/%s", dir, splits[s], classes[c]);
      assert_int_equal(mkdir(p, 0755), 0);
      for (int i = 0; i < 4; i++) {
        snprintf(p, sizeof p, "%s/%s/%s/%d.png", dir, splits[s], classes[c], i);
        snprintf(t, sizeof t, "%s/rgb40.png", fx);
        assert_int_equal(symlink(t, p), 0); /* fx is under the root too */
      }
    }
  }
  snprintf(p, sizeof p, "%s/train/a/zz_out.png", dir);
  snprintf(t, sizeof t, "%s/private.png", outside);
  assert_int_equal(symlink(t, p), 0);
  snprintf(p, sizeof p, "%s/train/b/zz_pool.jpg", dir);
  assert_int_equal(symlink("../../../pool/shared.jpg", p), 0);

  pxt_job_t j;
  pxt_job_init(&j, NULL, NODES, WORKERS, 1, 1);
  j.dataset.name = "folder";
  j.dataset.path = dir;
  j.dataset.image_size = 8;
  j.dataset.channels = 3;
  j.dataset.max_skipped = 0.2; /* 1 of 10 */
  j.train.batch_size = 2;
  if (pxt_job_submit(F->alice, &j, job, sizeof job) != PX_OK)
    fail_msg("submit: %s", px_last_error());
  int s = pxt_wait_job(F->alice, job, 0, 200000);
  pxt_job_reason(F->alice, job, reason, sizeof reason);
  if (s != PRUNEX__V1__JOB_STATE__JOB_STATE_SUCCEEDED) {
    dump_all();
    fail_msg("job state %d: %s", s, reason);
  }
  /* the node's cache of the training split: 10 files, the link out (only)
   * skipped, the agent's user's alone. The header: magic[8], version,
   * channels, size, num_classes (uint32), n, files, skipped (uint64). */
  snprintf(p, sizeof p, "%s/.prunex-cache/train-3x8x8.pxc", dir);
  uint64_t counts[3] = {0, 0, 0};
  int fd = open(p, O_RDONLY);
  assert_true(fd >= 0);
  assert_int_equal(pread(fd, counts, sizeof counts, 24), (ssize_t)sizeof counts);
  struct stat sb;
  assert_int_equal(fstat(fd, &sb), 0);
  close(fd);
  if (counts[0] != 9 || counts[1] != 10 || counts[2] != 1)
    fail_msg("cache %s: n %llu, files %llu, skipped %llu", p, (unsigned long long)counts[0],
             (unsigned long long)counts[1], (unsigned long long)counts[2]);
  assert_int_equal(sb.st_mode & 0777, 0600);
  /* the rank that built the cache names the link out in its log (unless
   * the agents were started with PX_LOG_LEVEL=error, as under ctest); no
   * log names the pool's link or the outside file's path */
  const char *lvl = getenv("PX_LOG_LEVEL");
  int warns = !lvl || strcmp(lvl, "error") != 0;
  static char log[1 << 16];
  int logs = 0, named = 0;
  for (int a = 0; a < NODES; a++) {
    for (int r = 0; r < NODES * WORKERS; r++) {
      snprintf(p, sizeof p, "%s/jobs/%s/rank-%d.log", F->a[a].work, job, r);
      if (access(p, F_OK) != 0) continue;
      logs++;
      pxt_read_file(p, log, sizeof log);
      named += strstr(log, "train/a/zz_out.png: a link that leads outside the data root") != NULL;
      if (strstr(log, "zz_pool") || strstr(log, outside)) fail_msg("%s:\n%s", p, log);
    }
  }
  assert_int_equal(logs, NODES * WORKERS);
  if (warns) assert_true(named >= 1);
  snprintf(p, sizeof p, "%s/private.png", outside);
  unlink(p);
  rmdir(outside);
}

/* dataset.cache_dir: outside every root the agents allow it is
 * refused at SubmitJob, naming the field and the node; one under the
 * agents' --output-root only through a link that leads out passes the
 * coordinator's check (text) and is refused by the agents before any
 * worker runs, naming the field and the link; nothing is written where
 * either points. */
static void test_a_cache_dir_outside_the_roots_is_refused(void **state) {
  (void)state;
  char outside[64], dir[400], p[600], cache[600], link[400], job[64], reason[2048];
  snprintf(outside, sizeof outside, "/tmp/px_cache_out_XXXXXX");
  assert_non_null(mkdtemp(outside));
  snprintf(dir, sizeof dir, "%s/cfolder", F->d.dir);
  assert_int_equal(mkdir(dir, 0755), 0);
  const char *splits[2] = {"train", "val"};
  for (int s = 0; s < 2; s++) {
    snprintf(p, sizeof p, "%s/%s", dir, splits[s]);
    assert_int_equal(mkdir(p, 0755), 0);
    snprintf(p, sizeof p, "%s/%s/a", dir, splits[s]);
    assert_int_equal(mkdir(p, 0755), 0);
    snprintf(p, sizeof p, "%s/%s/a/0.png", dir, splits[s]);
    FILE *f = fopen(p, "w");
    assert_non_null(f);
    fclose(f);
  }
  pxt_job_t j;
  pxt_job_init(&j, NULL, NODES, WORKERS, 1, 1);
  j.dataset.name = "folder";
  j.dataset.path = dir;
  j.dataset.image_size = 8;
  j.dataset.channels = 3;
  snprintf(cache, sizeof cache, "%s/c", outside);
  j.dataset.cache_dir = cache;
  assert_int_not_equal(pxt_job_submit(F->alice, &j, job, sizeof job), PX_OK);
  assert_int_equal(px_rpc_last_code(), PX_RPC_PERMISSION_DENIED);
  if (!strstr(px_last_error(), "spec.dataset.cache_dir") ||
      !strstr(px_last_error(), "node n1 does not let jobs write a cache there"))
    fail_msg("%s", px_last_error());
  j.dataset.cache_dir = "cache/../../../../tmp";
  assert_int_not_equal(pxt_job_submit(F->alice, &j, job, sizeof job), PX_OK);
  assert_non_null(strstr(px_last_error(), "'..' is not allowed"));

  snprintf(link, sizeof link, "%s/cache-link", F->root);
  assert_int_equal(symlink(outside, link), 0);
  snprintf(cache, sizeof cache, "%s/c", link);
  j.dataset.cache_dir = cache;
  if (pxt_job_submit(F->alice, &j, job, sizeof job) != PX_OK)
    fail_msg("submit: %s", px_last_error());
  int s = pxt_wait_job(F->alice, job, 0, 30000);
  pxt_job_reason(F->alice, job, reason, sizeof reason);
  if (s != PRUNEX__V1__JOB_STATE__JOB_STATE_FAILED || !strstr(reason, "dataset.cache_dir") ||
      !strstr(reason, "through a symbolic link") || !strstr(reason, cache))
    fail_msg("dataset.cache_dir %s: job state %d, reason: %s", cache, s, reason);
  snprintf(p, sizeof p, "%s/c", outside);
  assert_int_equal(access(p, F_OK), -1); /* nothing made where the link leads */
  unlink(link);
  rmdir(outside);
}

/* The SHA-256 of path by coreutils' sha256sum into hex[65]. */
static void file_sha256(const char *path, char hex[65]) {
  char cmd[600];
  snprintf(cmd, sizeof cmd, "sha256sum '%s'", path);
  FILE *p = popen(cmd, "r");
  assert_non_null(p);
  assert_int_equal(fscanf(p, "%64s", hex), 1);
  assert_int_equal(pclose(p), 0);
  assert_int_equal(strlen(hex), 64);
}

/* model.onnx is read by the workers as the data are: outside the agents'
 * data roots it is refused at SubmitJob, naming the field and the node; on
 * the wire it needs the SHA-256 of the file as submitted; and a file that
 * changed after submission fails the job, naming the file, with nothing
 * trained from the new bytes. */
static void test_a_model_file_outside_the_roots_or_changed_is_refused(void **state) {
  (void)state;
  char model[400], sha[65], job[64], reason[2048];
  pxt_job_t j;
  pxt_job_init(&j, NULL, NODES, WORKERS, 1, 1);
  j.model.name = "onnx";
  j.model.onnx = "/etc/passwd";
  assert_int_not_equal(pxt_job_submit(F->alice, &j, job, sizeof job), PX_OK);
  assert_int_equal(px_rpc_last_code(), PX_RPC_INVALID_ARGUMENT);
  if (!strstr(px_last_error(), "model.onnx_sha256: required with model.onnx"))
    fail_msg("%s", px_last_error());
  file_sha256("/etc/passwd", sha);
  j.model.onnx_sha256 = sha;
  assert_int_not_equal(pxt_job_submit(F->alice, &j, job, sizeof job), PX_OK);
  assert_int_equal(px_rpc_last_code(), PX_RPC_PERMISSION_DENIED);
  if (!strstr(px_last_error(), "spec.model.onnx = '/etc/passwd': node n1 does not let jobs "
                               "read there"))
    fail_msg("%s", px_last_error());

  snprintf(model, sizeof model, "%s/model.onnx", F->d.dir);
  FILE *f = fopen(model, "w");
  assert_non_null(f);
  fputs("the file as submitted", f);
  fclose(f);
  file_sha256(model, sha);
  f = fopen(model, "w");
  assert_non_null(f);
  fputs("the file changed since", f);
  fclose(f);
  j.model.onnx = model;
  if (pxt_job_submit(F->alice, &j, job, sizeof job) != PX_OK)
    fail_msg("submit: %s", px_last_error());
  int s = pxt_wait_job(F->alice, job, 0, 60000);
  pxt_job_reason(F->alice, job, reason, sizeof reason);
  if (s != PRUNEX__V1__JOB_STATE__JOB_STATE_FAILED ||
      !strstr(reason, "changed since the job was submitted") || !strstr(reason, model))
    fail_msg("model.onnx %s changed: job state %d, reason: %s", model, s, reason);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_a_job_runs_to_success_with_tls_tokens_and_rank_secrets),
      cmocka_unit_test(test_an_agent_with_a_user_token_is_refused),
      cmocka_unit_test(test_output_dir_outside_the_agents_roots_is_refused_at_submit),
      cmocka_unit_test(test_output_dir_through_a_link_out_of_the_root_is_refused),
      cmocka_unit_test(test_a_job_without_usable_checkpoints_says_so),
      cmocka_unit_test(test_dataset_path_outside_the_data_roots_is_refused),
      cmocka_unit_test(test_an_image_folder_reads_nothing_outside_the_data_root),
      cmocka_unit_test(test_a_cache_dir_outside_the_roots_is_refused),
      cmocka_unit_test(test_a_model_file_outside_the_roots_or_changed_is_refused),
  };
  return cmocka_run_group_tests(tests, group_setup, group_teardown);
}
