/* Secrets at rest (issue 26, docs/security.md): the coordinator's database
 * holds the rank secrets and every job's data, so pxcoordd creates it and
 * its -wal and -shm files 0600 whatever the umask, and refuses to start on
 * a database (or -wal, -shm file) that others may read, naming the file;
 * the tokens file is accepted with mode 0600 or 0400 only; and the tokens
 * (held as SHA-256 digests) still identify their users. */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>

#include <cmocka.h>

#include "coord_harness.h"

typedef struct {
  pxt_coordd_t d;
  char tokens[320];
} fixture_t;

static int setup(void **state) {
  fixture_t *f = calloc(1, sizeof *f);
  if (!f) return -1;
  f->d.pid = -1;
  if (pxt_mkdtemp(f->d.dir, sizeof f->d.dir) != 0) {
    free(f);
    return -1;
  }
  snprintf(f->d.db, sizeof f->d.db, "%s/coord.db", f->d.dir);
  snprintf(f->tokens, sizeof f->tokens, "%s/tokens", f->d.dir);
  int fd = open(f->tokens, O_WRONLY | O_CREAT | O_TRUNC, 0600);
  const char *text = PXT_TOK_ADMIN " root admin\n" PXT_TOK_ALICE " alice user\n";
  if (fd < 0 || write(fd, text, strlen(text)) != (ssize_t)strlen(text)) {
    if (fd >= 0) close(fd);
    pxt_rmtree(f->d.dir);
    free(f);
    return -1;
  }
  close(fd);
  *state = f;
  return 0;
}

static int teardown(void **state) {
  fixture_t *f = *state;
  int rc = pxt_coordd_teardown(&f->d);
  free(f);
  return rc;
}

static unsigned file_mode(const char *path) {
  struct stat sb;
  if (stat(path, &sb) != 0) fail_msg("%s: %s", path, strerror(errno));
  return (unsigned)(sb.st_mode & 07777);
}

/* Runs pxcoordd on db with the tokens file, expecting it to refuse with
 * exit status code and a message containing each of want (NULL-ended). */
static void expect_refused(fixture_t *f, const char *db, int code, const char *const *want) {
  const char *args[] = {"--db", db, "--listen", "127.0.0.1:0", "--tokens", f->tokens, NULL};
  char out[512], err[4096];
  int rc = pxt_coordd_run(f->d.dir, args, out, sizeof out, err, sizeof err, 15000);
  if (rc != code) fail_msg("expected exit %d, got %d: stdout '%s' stderr '%s'", code, rc, out, err);
  for (int i = 0; want[i]; i++)
    if (!strstr(err, want[i])) fail_msg("stderr lacks '%s': %s", want[i], err);
  assert_null(strstr(out, "listening on"));
}

/* With umask 0 (the worst a caller can give) the database, -wal and -shm
 * are still 0600 while the daemon writes them. */
static void test_database_files_are_0600_whatever_the_umask(void **state) {
  fixture_t *f = *state;
  mode_t old = umask(0);
  const char *extra[] = {"--tokens", f->tokens, NULL};
  int rc = pxt_coordd_start(&f->d, extra);
  umask(old);
  assert_int_equal(rc, 0);
  /* a write, so that the WAL has something in it */
  px_rpc_channel_t *ch = pxt_channel(f->d.target, NULL, PXT_TOK_ALICE);
  assert_non_null(ch);
  char job[64];
  assert_int_equal(pxt_submit_mp(ch, 1, 1, job, sizeof job), PX_OK);
  px_rpc_channel_destroy(ch);
  char p[400];
  assert_int_equal(file_mode(f->d.db), 0600);
  snprintf(p, sizeof p, "%s-wal", f->d.db);
  assert_int_equal(file_mode(p), 0600);
  snprintf(p, sizeof p, "%s-shm", f->d.db);
  assert_int_equal(file_mode(p), 0600);
}

/* A database that others may read (made by an older pxcoordd under umask
 * 022, or copied) is refused, naming the file and the fix; so is a
 * readable -shm or -wal beside a private database. */
static void test_a_database_others_may_read_is_refused(void **state) {
  fixture_t *f = *state;
  const char *extra[] = {"--tokens", f->tokens, NULL};
  assert_int_equal(pxt_coordd_start(&f->d, extra), 0);
  int status = pxt_coordd_stop(&f->d, SIGTERM);
  assert_true(WIFEXITED(status) && WEXITSTATUS(status) == 0);

  assert_int_equal(chmod(f->d.db, 0644), 0);
  const char *w1[] = {f->d.db, "0644", "chmod 600", NULL};
  expect_refused(f, f->d.db, 1, w1);
  assert_int_equal(chmod(f->d.db, 0640), 0); /* the group too */
  const char *w2[] = {f->d.db, "0640", NULL};
  expect_refused(f, f->d.db, 1, w2);

  assert_int_equal(chmod(f->d.db, 0600), 0);
  char shm[400];
  snprintf(shm, sizeof shm, "%s-shm", f->d.db);
  int fd = open(shm, O_WRONLY | O_CREAT, 0644);
  assert_true(fd >= 0);
  close(fd);
  assert_int_equal(chmod(shm, 0644), 0);
  const char *w3[] = {shm, "0644", NULL};
  expect_refused(f, f->d.db, 1, w3);

  /* made private, it starts again on the same database */
  assert_int_equal(chmod(shm, 0600), 0);
  assert_int_equal(pxt_coordd_start(&f->d, extra), 0);
}

/* The tokens file: 0600 and 0400 only (0660 used to pass: a group is more
 * than one user). */
static void test_tokens_file_must_be_0600_or_0400(void **state) {
  fixture_t *f = *state;
  static const unsigned bad[] = {0660, 0640, 0604, 0644, 0700};
  for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
    assert_int_equal(chmod(f->tokens, bad[i]), 0);
    char mode[16];
    snprintf(mode, sizeof mode, "mode %04o", bad[i]);
    const char *want[] = {f->tokens, mode, "chmod 600", NULL};
    expect_refused(f, f->d.db, 2, want);
  }
  assert_int_equal(chmod(f->tokens, 0400), 0);
  const char *extra[] = {"--tokens", f->tokens, NULL};
  assert_int_equal(pxt_coordd_start(&f->d, extra), 0);
}

/* Held as digests, the tokens still tell alice from a stranger and from a
 * token that differs from hers in its last character only. */
static void test_hashed_tokens_identify_their_users(void **state) {
  fixture_t *f = *state;
  const char *extra[] = {"--tokens", f->tokens, NULL};
  assert_int_equal(pxt_coordd_start(&f->d, extra), 0);
  char near[64];
  snprintf(near, sizeof near, "%s", PXT_TOK_ALICE);
  near[strlen(near) - 1] ^= 1;
  const char *toks[] = {PXT_TOK_ALICE, near, "tok-stranger-0123456789abcdef"};
  for (int i = 0; i < 3; i++) {
    px_rpc_channel_t *ch = pxt_channel(f->d.target, NULL, toks[i]);
    assert_non_null(ch);
    Prunex__V1__ListJobsRequest req = PRUNEX__V1__LIST_JOBS_REQUEST__INIT;
    Prunex__V1__ListJobsResponse *l = NULL;
    px_status_t st = px_rpc_list_jobs(ch, &req, 5000, &l);
    if (i == 0) {
      assert_int_equal(st, PX_OK);
      px_rpc_message_free(l);
    } else {
      assert_int_not_equal(st, PX_OK);
      assert_int_equal(px_rpc_last_code(), PX_RPC_UNAUTHENTICATED);
    }
    px_rpc_channel_destroy(ch);
  }
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test_setup_teardown(test_database_files_are_0600_whatever_the_umask, setup,
                                      teardown),
      cmocka_unit_test_setup_teardown(test_a_database_others_may_read_is_refused, setup,
                                      teardown),
      cmocka_unit_test_setup_teardown(test_tokens_file_must_be_0600_or_0400, setup, teardown),
      cmocka_unit_test_setup_teardown(test_hashed_tokens_identify_their_users, setup, teardown),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
