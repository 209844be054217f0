/* Secrets at rest (docs/security.md): the coordinator's database
 * holds the rank secrets and every job's data, so pxcoordd creates it and
 * its -wal and -shm files 0600 whatever the umask, and refuses to start on
 * a database (or -wal, -shm file) that others may read, naming the file;
 * the tokens file is accepted with mode 0600 or 0400 only; the tokens
 * (held as SHA-256 digests) still identify their users; and rank secrets
 * are not in the database at all (a salt and the secret's hash are), yet an
 * agent gets the same secret again after a restart, and secrets an older
 * pxcoordd stored in clear are hashed (and wiped for ended jobs). */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>

#include <cmocka.h>
#include <sqlite3.h>

#include "coord_harness.h"

typedef struct {
  pxt_coordd_t d;
  char tokens[320];
} fixture_t;

static int setup(void **state) {
  fixture_t *f = calloc(1, sizeof *f);
  const char *text = PXT_TOK_ADMIN " root admin\n" PXT_TOK_ALICE " alice user\n" PXT_TOK_N1
                     " n1 node\n";
  if (!f || pxt_coordd_prepare_tokens(&f->d, f->tokens, sizeof f->tokens, text) != 0) {
    free(f);
    return -1;
  }
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

/* 1 when the bytes of s appear anywhere in the file at path (0 when the
 * file does not exist). */
static int file_holds(const char *path, const char *s) {
  FILE *fp = fopen(path, "rb");
  if (!fp) return 0;
  fseek(fp, 0, SEEK_END);
  long n = ftell(fp);
  fseek(fp, 0, SEEK_SET);
  char *buf = malloc((size_t)n + 1);
  assert_non_null(buf);
  size_t got = fread(buf, 1, (size_t)n, fp);
  fclose(fp);
  int found = memmem(buf, got, s, strlen(s)) != NULL;
  free(buf);
  return found;
}

/* Runs one SQL statement on the (stopped) coordinator's database. */
static void db_exec(const char *db, const char *sql) {
  sqlite3 *h = NULL;
  assert_int_equal(sqlite3_open(db, &h), SQLITE_OK);
  char *err = NULL;
  if (sqlite3_exec(h, sql, NULL, NULL, &err) != SQLITE_OK) fail_msg("%s: %s", sql, err);
  sqlite3_close(h);
}

/* The text of the first column of the first row, into out ("" if none). */
static void db_text(const char *db, const char *sql, char *out, size_t cap) {
  sqlite3 *h = NULL;
  sqlite3_stmt *st = NULL;
  out[0] = '\0';
  assert_int_equal(sqlite3_open(db, &h), SQLITE_OK);
  assert_int_equal(sqlite3_prepare_v2(h, sql, -1, &st, NULL), SQLITE_OK);
  if (sqlite3_step(st) == SQLITE_ROW)
    snprintf(out, cap, "%s", (const char *)sqlite3_column_text(st, 0));
  sqlite3_finalize(st);
  sqlite3_close(h);
}

/* Node n1 (re)opens its assignment stream and reads its START. */
static Prunex__V1__Assignment *n1_assignment(fixture_t *f, const char *node) {
  px_rpc_channel_t *n1 = pxt_channel(f->d.target, NULL, PXT_TOK_N1);
  assert_non_null(n1);
  px_rpc_stream_t *w = NULL;
  assert_int_equal(px_rpc_watch_assignments(n1, node, &w), PX_OK);
  Prunex__V1__Assignment *a = pxt_next_assignment(w, 10000);
  px_rpc_stream_destroy(w);
  px_rpc_channel_destroy(n1);
  return a;
}

/* KvPut into job with secret as the credential: the px status. */
static px_status_t kv_put_as(fixture_t *f, const char *secret, const char *job) {
  px_rpc_channel_t *ch = pxt_channel(f->d.target, NULL, secret);
  assert_non_null(ch);
  Prunex__V1__KvPutRequest kp = PRUNEX__V1__KV_PUT_REQUEST__INIT;
  kp.job_id = (char *)job;
  kp.key = "k";
  kp.value.data = (uint8_t *)"v";
  kp.value.len = 1;
  px_status_t st = px_rpc_kv_put(ch, &kp, 5000);
  px_rpc_channel_destroy(ch);
  return st;
}

static void restart(fixture_t *f) {
  int status = pxt_coordd_stop(&f->d, SIGTERM);
  assert_true(WIFEXITED(status) && WEXITSTATUS(status) == 0);
  const char *extra[] = {"--tokens", f->tokens, "--heartbeat-timeout-ms", "60000", NULL};
  assert_int_equal(pxt_coordd_start(&f->d, extra), 0);
}

static void test_rank_secrets_are_not_stored_yet_survive_a_restart(void **state) {
  fixture_t *f = *state;
  const char *extra[] = {"--tokens", f->tokens, "--heartbeat-timeout-ms", "60000", NULL};
  assert_int_equal(pxt_coordd_start(&f->d, extra), 0);
  px_rpc_channel_t *n1 = pxt_channel(f->d.target, NULL, PXT_TOK_N1);
  px_rpc_channel_t *alice = pxt_channel(f->d.target, NULL, PXT_TOK_ALICE);
  char node[64], job[64];
  assert_int_equal(pxt_register(n1, "n1", 1, 0, node, sizeof node), PX_OK);
  px_rpc_stream_t *w = NULL;
  assert_int_equal(px_rpc_watch_assignments(n1, node, &w), PX_OK);
  pxt_sleep_ms(200);
  assert_int_equal(pxt_submit_mp(alice, 1, 1, job, sizeof job), PX_OK);
  Prunex__V1__Assignment *a = pxt_next_assignment(w, 10000);
  assert_non_null(a);
  char secret[128];
  snprintf(secret, sizeof secret, "%s", a->ranks[0]->secret);
  px_rpc_message_free(a);
  px_rpc_stream_destroy(w);
  assert_int_equal(strlen(secret), 68);
  assert_int_equal(kv_put_as(f, secret, job), PX_OK);

  /* nowhere in the database, its WAL or its shared memory */
  char p[400];
  assert_false(file_holds(f->d.db, secret));
  assert_false(file_holds(f->d.db, secret + 4)); /* not even the hex part */
  snprintf(p, sizeof p, "%s-wal", f->d.db);
  assert_false(file_holds(p, secret + 4));
  snprintf(p, sizeof p, "%s.key", f->d.db);
  assert_int_equal(file_mode(p), 0600);

  /* after a restart the agent is sent the same secret, which still works */
  restart(f);
  a = n1_assignment(f, node);
  assert_non_null(a);
  assert_string_equal(a->ranks[0]->secret, secret);
  px_rpc_message_free(a);
  assert_int_equal(kv_put_as(f, secret, job), PX_OK);
  assert_int_not_equal(kv_put_as(f, "pxr_0123456789abcdef0123456789abcdef0123456789abcdef01234567"
                                    "89abcdef", job), PX_OK);
  assert_int_equal(px_rpc_last_code(), PX_RPC_UNAUTHENTICATED);

  /* a secret an older pxcoordd stored in clear: hashed at start, still
   * valid (and still sent) while its job runs */
  const char *legacy = "pxr_1111111111111111111111111111111111111111111111111111111111111111";
  int status = pxt_coordd_stop(&f->d, SIGTERM);
  assert_true(WIFEXITED(status) && WEXITSTATUS(status) == 0);
  char sql[512];
  snprintf(sql, sizeof sql,
           "UPDATE job_ranks SET secret = '%s', secret_salt = '', secret_hash = ''", legacy);
  db_exec(f->d.db, sql);
  assert_int_equal(pxt_coordd_start(&f->d, extra), 0);
  assert_int_equal(kv_put_as(f, legacy, job), PX_OK);
  a = n1_assignment(f, node);
  assert_non_null(a);
  assert_string_equal(a->ranks[0]->secret, legacy);
  px_rpc_message_free(a);
  char got[128];
  db_text(f->d.db, "SELECT secret_hash FROM job_ranks", got, sizeof got);
  assert_int_equal(strlen(got), 64);
  /* once the job has ended, the next start wipes the clear text */
  Prunex__V1__CancelJobResponse *cr = NULL;
  px_rpc_channel_destroy(alice);
  alice = pxt_channel(f->d.target, NULL, PXT_TOK_ALICE);
  assert_int_equal(px_rpc_cancel_job(alice, job, "done", 5000, &cr), PX_OK);
  px_rpc_message_free(cr);
  restart(f);
  db_text(f->d.db, "SELECT secret FROM job_ranks", got, sizeof got);
  assert_string_equal(got, "");
  px_rpc_channel_destroy(alice);
  px_rpc_channel_destroy(n1);
}

/* A key file others may read is refused like the database. */
static void test_a_readable_secret_key_is_refused(void **state) {
  fixture_t *f = *state;
  const char *extra[] = {"--tokens", f->tokens, NULL};
  assert_int_equal(pxt_coordd_start(&f->d, extra), 0);
  int status = pxt_coordd_stop(&f->d, SIGTERM);
  assert_true(WIFEXITED(status) && WEXITSTATUS(status) == 0);
  char key[400];
  snprintf(key, sizeof key, "%s.key", f->d.db);
  assert_int_equal(chmod(key, 0640), 0);
  const char *want[] = {key, "0640", "chmod 600", NULL};
  expect_refused(f, f->d.db, 1, want);
  /* nor is a file that is not a key */
  assert_int_equal(chmod(key, 0600), 0);
  FILE *fp = fopen(key, "w");
  fputs("not a key\n", fp);
  fclose(fp);
  const char *want2[] = {key, "not a rank-secret key", NULL};
  expect_refused(f, f->d.db, 1, want2);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test_setup_teardown(test_database_files_are_0600_whatever_the_umask, setup,
                                      teardown),
      cmocka_unit_test_setup_teardown(test_a_database_others_may_read_is_refused, setup,
                                      teardown),
      cmocka_unit_test_setup_teardown(test_tokens_file_must_be_0600_or_0400, setup, teardown),
      cmocka_unit_test_setup_teardown(test_hashed_tokens_identify_their_users, setup, teardown),
      cmocka_unit_test_setup_teardown(test_rank_secrets_are_not_stored_yet_survive_a_restart,
                                      setup, teardown),
      cmocka_unit_test_setup_teardown(test_a_readable_secret_key_is_refused, setup, teardown),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
