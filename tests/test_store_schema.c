/* The SQLite helpers (prunex/store.h): WAL mode, versioned migrations
 * applied in transactions, refusal of newer, foreign and corrupt databases
 * with messages that name the file, and the prepared-statement helpers. */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>

#include <cmocka.h>
#include <string.h>
#include <sys/stat.h>

#include "coord_harness.h"
#include "prunex/store.h"

static const px_store_migration_t m_v1[] = {
    {1, "CREATE TABLE t (id INTEGER PRIMARY KEY, name TEXT NOT NULL UNIQUE, data BLOB);"},
};
static const px_store_migration_t m_v2[] = {
    {1, "CREATE TABLE t (id INTEGER PRIMARY KEY, name TEXT NOT NULL UNIQUE, data BLOB);"},
    {2, "ALTER TABLE t ADD COLUMN extra INTEGER NOT NULL DEFAULT 7;"
        "CREATE TABLE u (x INTEGER);"},
};
static const px_store_migration_t m_bad2[] = {
    {1, "CREATE TABLE t (id INTEGER PRIMARY KEY, name TEXT NOT NULL UNIQUE, data BLOB);"},
    {2, "CREATE TABLE half_done (x INTEGER); INSERT INTO no_such_table VALUES (1);"},
};

typedef struct {
  char dir[256];
  char path[320];
} fixture_t;

static int setup(void **state) {
  fixture_t *f = calloc(1, sizeof *f);
  assert_non_null(f);
  assert_int_equal(pxt_mkdtemp(f->dir, sizeof f->dir), 0);
  snprintf(f->path, sizeof f->path, "%s/test.db", f->dir);
  *state = f;
  return 0;
}

static int teardown(void **state) {
  fixture_t *f = *state;
  pxt_rmtree(f->dir);
  free(f);
  return 0;
}

static px_store_options_t opts(const char *schema, const px_store_migration_t *m, int n) {
  px_store_options_t o = {.schema = schema, .migrations = m, .nmigrations = n, .create = 1};
  return o;
}

static px_status_t open_v(const char *path, const px_store_migration_t *m, int n, px_store_t **s) {
  px_store_options_t o = opts("test", m, n);
  return px_store_open(path, &o, s);
}

static void insert_row(px_store_t *s, const char *name, const void *data, size_t len) {
  px_store_stmt_t *st;
  assert_int_equal(px_store_stmt(s, "INSERT INTO t (name, data) VALUES (?1, ?2)", &st), PX_OK);
  assert_int_equal(px_store_bind_text(st, 1, name), PX_OK);
  assert_int_equal(px_store_bind_blob(st, 2, data, len), PX_OK);
  assert_int_equal(px_store_run(st), PX_OK);
}

static int count_rows(px_store_t *s, const char *sql) {
  px_store_stmt_t *st;
  assert_int_equal(px_store_stmt(s, sql, &st), PX_OK);
  assert_int_equal(px_store_step(st), 1);
  int n = (int)px_store_column_int64(st, 0);
  px_store_reset(st);
  return n;
}

static void test_open_creates_wal_database_at_newest_version(void **state) {
  fixture_t *f = *state;
  px_store_t *s = NULL;
  assert_int_equal(open_v(f->path, m_v2, 2, &s), PX_OK);
  assert_int_equal(px_store_schema_version(s), 2);
  assert_string_equal(px_store_path(s), f->path);
  px_store_stmt_t *st;
  assert_int_equal(px_store_stmt(s, "PRAGMA journal_mode", &st), PX_OK);
  assert_int_equal(px_store_step(st), 1);
  assert_string_equal(px_store_column_text(st, 0), "wal");
  px_store_reset(st);
  assert_int_equal(count_rows(s, "SELECT version FROM schema_version"), 2);
  insert_row(s, "a", "x", 1);
  char wal[400];
  snprintf(wal, sizeof wal, "%s-wal", f->path);
  assert_int_equal(access(wal, F_OK), 0);
  px_store_close(s);
}

static void test_migrations_resume_from_stored_version(void **state) {
  fixture_t *f = *state;
  px_store_t *s = NULL;
  assert_int_equal(open_v(f->path, m_v1, 1, &s), PX_OK);
  insert_row(s, "kept", "abc", 3);
  px_store_close(s);
  assert_int_equal(open_v(f->path, m_v2, 2, &s), PX_OK);
  assert_int_equal(px_store_schema_version(s), 2);
  assert_int_equal(count_rows(s, "SELECT extra FROM t WHERE name = 'kept'"), 7);
  assert_int_equal(count_rows(s, "SELECT count(*) FROM u"), 0);
  px_store_close(s);
  /* Opening again at the same version changes nothing. */
  assert_int_equal(open_v(f->path, m_v2, 2, &s), PX_OK);
  assert_int_equal(count_rows(s, "SELECT count(*) FROM t"), 1);
  px_store_close(s);
}

static void test_failed_migration_is_rolled_back(void **state) {
  fixture_t *f = *state;
  px_store_t *s = NULL;
  assert_int_equal(open_v(f->path, m_v1, 1, &s), PX_OK);
  px_store_close(s);
  s = NULL;
  px_status_t st = open_v(f->path, m_bad2, 2, &s);
  assert_int_not_equal(st, PX_OK);
  assert_null(s);
  assert_non_null(strstr(px_last_error(), f->path));
  assert_non_null(strstr(px_last_error(), "version 2"));
  assert_int_equal(open_v(f->path, m_v1, 1, &s), PX_OK);
  assert_int_equal(px_store_schema_version(s), 1);
  assert_int_equal(count_rows(s, "SELECT count(*) FROM sqlite_master WHERE name = 'half_done'"), 0);
  px_store_close(s);
}

static void test_newer_schema_is_refused(void **state) {
  fixture_t *f = *state;
  px_store_t *s = NULL;
  assert_int_equal(open_v(f->path, m_v2, 2, &s), PX_OK);
  px_store_close(s);
  s = NULL;
  assert_int_equal(open_v(f->path, m_v1, 1, &s), PX_ERR_FORMAT);
  assert_null(s);
  assert_non_null(strstr(px_last_error(), f->path));
  assert_non_null(strstr(px_last_error(), "newer"));
}

static void test_other_programs_database_is_refused(void **state) {
  fixture_t *f = *state;
  px_store_t *s = NULL;
  assert_int_equal(open_v(f->path, m_v1, 1, &s), PX_OK);
  px_store_close(s);
  px_store_options_t o = opts("someone-else", m_v1, 1);
  s = NULL;
  assert_int_equal(px_store_open(f->path, &o, &s), PX_ERR_FORMAT);
  assert_non_null(strstr(px_last_error(), "'test'"));
}

static void test_tables_without_schema_version_are_refused(void **state) {
  fixture_t *f = *state;
  /* Build a plain SQLite file through a schema, then drop its version table. */
  px_store_t *s = NULL;
  assert_int_equal(open_v(f->path, m_v1, 1, &s), PX_OK);
  assert_int_equal(px_store_exec(s, "DROP TABLE schema_version"), PX_OK);
  px_store_close(s);
  s = NULL;
  assert_int_equal(open_v(f->path, m_v1, 1, &s), PX_ERR_FORMAT);
  assert_non_null(strstr(px_last_error(), "schema_version"));
}

static void write_file(const char *path, const void *data, size_t len, long offset) {
  int fd = open(path, O_WRONLY | O_CREAT, 0644);
  assert_true(fd >= 0);
  assert_int_equal(pwrite(fd, data, len, offset), (ssize_t)len);
  close(fd);
}

static void test_not_a_database_is_refused_naming_the_file(void **state) {
  fixture_t *f = *state;
  char junk[8192];
  for (size_t i = 0; i < sizeof junk; i++) junk[i] = (char)(i * 7 + 3);
  write_file(f->path, junk, sizeof junk, 0);
  px_store_t *s = NULL;
  assert_int_equal(open_v(f->path, m_v1, 1, &s), PX_ERR_FORMAT);
  assert_null(s);
  assert_non_null(strstr(px_last_error(), f->path));
  assert_non_null(strstr(px_last_error(), "not a database"));
}

static void test_corrupt_page_is_found_on_open(void **state) {
  fixture_t *f = *state;
  px_store_t *s = NULL;
  assert_int_equal(open_v(f->path, m_v1, 1, &s), PX_OK);
  assert_int_equal(px_store_begin(s), PX_OK);
  char blob[600];
  memset(blob, 'z', sizeof blob);
  for (int i = 0; i < 200; i++) {
    char name[32];
    snprintf(name, sizeof name, "row-%d", i);
    insert_row(s, name, blob, sizeof blob);
  }
  assert_int_equal(px_store_commit(s), PX_OK);
  /* Move everything from the WAL into the main file before corrupting it. */
  assert_int_equal(px_store_exec(s, "PRAGMA wal_checkpoint(TRUNCATE)"), PX_OK);
  px_store_close(s);
  struct stat sb;
  assert_int_equal(stat(f->path, &sb), 0);
  assert_true(sb.st_size > 8 * 4096);
  char junk[4096];
  memset(junk, 0xA5, sizeof junk);
  write_file(f->path, junk, sizeof junk, 3 * 4096);
  px_store_options_t o = opts("test", m_v1, 1);
  o.quick_check = 1;
  s = NULL;
  px_status_t st = px_store_open(f->path, &o, &s);
  assert_int_not_equal(st, PX_OK);
  assert_null(s);
  assert_non_null(strstr(px_last_error(), f->path));
}

static void test_missing_file_and_directory_are_io_errors(void **state) {
  fixture_t *f = *state;
  px_store_options_t o = opts("test", m_v1, 1);
  o.create = 0;
  px_store_t *s = NULL;
  assert_int_equal(px_store_open(f->path, &o, &s), PX_ERR_IO);
  assert_non_null(strstr(px_last_error(), f->path));
  o.create = 1;
  assert_int_equal(px_store_open(f->dir, &o, &s), PX_ERR_IO);
  assert_non_null(strstr(px_last_error(), f->dir));
  char deep[400];
  snprintf(deep, sizeof deep, "%s/no/such/dir/x.db", f->dir);
  assert_int_equal(px_store_open(deep, &o, &s), PX_ERR_IO);
  assert_non_null(strstr(px_last_error(), deep));
}

static void test_bad_options_are_refused(void **state) {
  fixture_t *f = *state;
  static const px_store_migration_t gap[] = {{1, "SELECT 1"}, {3, "SELECT 1"}};
  px_store_t *s = NULL;
  assert_int_equal(open_v(f->path, gap, 2, &s), PX_ERR_INVALID);
  assert_int_equal(open_v(f->path, gap, 0, &s), PX_ERR_INVALID);
  px_store_options_t o = opts(NULL, m_v1, 1);
  assert_int_equal(px_store_open(f->path, &o, &s), PX_ERR_INVALID);
  assert_null(s);
}

static void test_statements_bind_step_and_columns(void **state) {
  fixture_t *f = *state;
  px_store_t *s = NULL;
  assert_int_equal(open_v(f->path, m_v1, 1, &s), PX_OK);
  const unsigned char bin[5] = {0, 1, 0, 255, 7};
  insert_row(s, "bin", bin, sizeof bin);
  insert_row(s, "empty", NULL, 0);
  assert_int_equal(px_store_last_insert_id(s), 2);
  px_store_stmt_t *st, *again;
  const char *q = "SELECT data, name, id, 2.5 FROM t WHERE name = ?1";
  assert_int_equal(px_store_stmt(s, q, &st), PX_OK);
  assert_int_equal(px_store_bind_text(st, 1, "bin"), PX_OK);
  assert_int_equal(px_store_step(st), 1);
  size_t len = 0;
  const void *b = px_store_column_blob(st, 0, &len);
  assert_int_equal(len, sizeof bin);
  assert_memory_equal(b, bin, sizeof bin);
  assert_string_equal(px_store_column_text(st, 1), "bin");
  assert_int_equal(px_store_column_int64(st, 2), 1);
  assert_true(px_store_column_double(st, 3) == 2.5);
  assert_int_equal(px_store_step(st), 0);
  /* The cache hands back the same statement, reset and unbound. */
  assert_int_equal(px_store_stmt(s, q, &again), PX_OK);
  assert_ptr_equal(st, again);
  assert_int_equal(px_store_bind_text(again, 1, "empty"), PX_OK);
  assert_int_equal(px_store_step(again), 1);
  b = px_store_column_blob(again, 0, &len);
  assert_null(b);
  assert_int_equal(len, 0);
  assert_false(px_store_column_is_null(again, 0));
  px_store_reset(again);
  /* NULL reads as "" and is NULL. */
  assert_int_equal(px_store_stmt(s, "SELECT NULL", &st), PX_OK);
  assert_int_equal(px_store_step(st), 1);
  assert_string_equal(px_store_column_text(st, 0), "");
  assert_true(px_store_column_is_null(st, 0));
  px_store_reset(st);
  /* Errors are converted and name the file: a UNIQUE violation, bad SQL. */
  assert_int_equal(px_store_stmt(s, "INSERT INTO t (name) VALUES ('bin')", &st), PX_OK);
  assert_int_equal(px_store_run(st), PX_ERR_INVALID);
  assert_non_null(strstr(px_last_error(), f->path));
  assert_non_null(strstr(px_last_error(), "UNIQUE"));
  assert_int_equal(px_store_stmt(s, "SELEKT 1", &st), PX_ERR_INVALID);
  assert_non_null(strstr(px_last_error(), f->path));
  assert_int_equal(px_store_exec(s, "NOT SQL"), PX_ERR_INVALID);
  px_store_close(s);
}

/* px_store_row_int64: the first row's integer columns, or nothing found. */
static void test_row_int64_reads_one_row(void **state) {
  fixture_t *f = *state;
  px_store_t *s = NULL;
  assert_int_equal(open_v(f->path, m_v1, 1, &s), PX_OK);
  insert_row(s, "a", "", 0);
  insert_row(s, "b", "", 0);
  const char *q = "SELECT id, id * 10 FROM t WHERE name = ?1";
  int64_t v[2] = {-1, -1};
  int found = -1;
  assert_int_equal(px_store_row_int64(s, q, "b", v, 2, &found), PX_OK);
  assert_int_equal(found, 1);
  assert_int_equal(v[0], 2);
  assert_int_equal(v[1], 20);
  v[0] = v[1] = 77;
  assert_int_equal(px_store_row_int64(s, q, "none", v, 2, &found), PX_OK);
  assert_int_equal(found, 0);
  assert_int_equal(v[0], 77); /* untouched: the caller's default stands */
  /* the statement was reset: it reads again at once */
  assert_int_equal(px_store_row_int64(s, q, "a", v, 1, &found), PX_OK);
  assert_int_equal(found, 1);
  assert_int_equal(v[0], 1);
  assert_int_equal(v[1], 77);
  assert_int_equal(px_store_row_int64(s, "SELEKT", "a", v, 1, &found), PX_ERR_INVALID);
  px_store_close(s);
}

/* px_store_bind_args: ?1..?n bound in order, each by its type; text NULL
 * binds NULL; a parameter the statement does not have fails. */
static void test_bind_args_binds_in_order_by_type(void **state) {
  fixture_t *f = *state;
  px_store_t *s = NULL;
  assert_int_equal(open_v(f->path, m_v1, 1, &s), PX_OK);
  px_store_stmt_t *st = NULL;
  assert_int_equal(px_store_stmt(s, "SELECT ?1 + 1, ?2 * 2, ?3 || '!', ?4 IS NULL, typeof(?2)",
                                 &st),
                   PX_OK);
  int32_t small = -3; /* widened to int64 by PX_ARG_INT */
  assert_int_equal(px_store_bind_args(st, PX_STORE_ARGS(PX_ARG_INT(small), PX_ARG_REAL(1.25),
                                                        PX_ARG_TEXT("x"), PX_ARG_TEXT(NULL))),
                   PX_OK);
  assert_int_equal(px_store_step(st), 1);
  assert_int_equal(px_store_column_int64(st, 0), -2);
  assert_true(px_store_column_double(st, 1) == 2.5);
  assert_string_equal(px_store_column_text(st, 2), "x!");
  assert_int_equal(px_store_column_int64(st, 3), 1);
  assert_string_equal(px_store_column_text(st, 4), "real");
  px_store_reset(st);
  assert_int_equal(px_store_stmt(s, "SELECT ?1", &st), PX_OK);
  assert_int_not_equal(
      px_store_bind_args(st, PX_STORE_ARGS(PX_ARG_INT(1), PX_ARG_INT(2))), PX_OK);
  px_store_close(s);
}

/* px_store_run_args and px_store_row: prepare, bind, step in one call;
 * each column into its typed target (text cut to fit), no row leaves the
 * targets untouched, a bad statement fails. */
static void test_run_args_and_row_read_typed_columns(void **state) {
  fixture_t *f = *state;
  px_store_t *s = NULL;
  assert_int_equal(open_v(f->path, m_v1, 1, &s), PX_OK);
  assert_int_equal(px_store_run_args(s, "INSERT INTO t (name, data) VALUES (?1, ?2)",
                                     PX_STORE_ARGS(PX_ARG_TEXT("alpha-long-name"),
                                                   PX_ARG_INT(5))),
                   PX_OK);
  const char *q = "SELECT id, data * 2, data / 4.0, name, 'skipped' FROM t WHERE name = ?1";
  int64_t id = -1;
  int twice = -1, found = -1;
  double quarter = -1;
  char name[6];
  assert_int_equal(px_store_row(s, q, PX_STORE_ARGS(PX_ARG_TEXT("alpha-long-name")),
                                PX_STORE_COLS(PX_COL_INT(&id), PX_COL_I32(&twice),
                                              PX_COL_REAL(&quarter), PX_COL_TEXT(name, sizeof name),
                                              PX_COL_SKIP),
                                &found),
                   PX_OK);
  assert_int_equal(found, 1);
  assert_int_equal(id, 1);
  assert_int_equal(twice, 10);
  assert_true(quarter == 1.25);
  assert_string_equal(name, "alpha"); /* cut to fit */
  id = 77;
  assert_int_equal(px_store_row(s, q, PX_STORE_ARGS(PX_ARG_TEXT("none")),
                                PX_STORE_COLS(PX_COL_INT(&id)), &found),
                   PX_OK);
  assert_int_equal(found, 0);
  assert_int_equal(id, 77); /* untouched */
  assert_int_equal(px_store_row(s, "SELEKT", NULL, 0, PX_STORE_COLS(PX_COL_INT(&id)), NULL),
                   PX_ERR_INVALID);
  assert_int_equal(px_store_run_args(s, "INSERT INTO t (name) VALUES (?1)",
                                     PX_STORE_ARGS(PX_ARG_TEXT(NULL))),
                   PX_ERR_INVALID); /* NOT NULL */
  px_store_close(s);
}

typedef struct {
  int rows, stop_at;
  int64_t sum;
} each_t;

static px_status_t each_row(void *arg, px_store_stmt_t *st) {
  each_t *e = arg;
  e->sum += px_store_column_int64(st, 0);
  if (++e->rows == e->stop_at) return 1;
  return e->stop_at < 0 && e->rows == -e->stop_at ? PX_ERR_NOMEM : PX_OK;
}

/* px_store_each: every row in order; a positive return stops early (OK),
 * a negative one is the result; the statement is reset every time, so a
 * writer on another connection checkpoints the whole log afterwards. */
static void test_each_visits_rows_and_stops_when_told(void **state) {
  fixture_t *f = *state;
  px_store_t *s = NULL, *r = NULL;
  assert_int_equal(open_v(f->path, m_v1, 1, &s), PX_OK);
  for (int i = 0; i < 5; i++) {
    char name[8];
    snprintf(name, sizeof name, "n%d", i);
    insert_row(s, name, "", 0);
  }
  px_store_options_t o = opts("test", m_v1, 1);
  o.read_only = 1;
  assert_int_equal(px_store_open(f->path, &o, &r), PX_OK);
  const char *q = "SELECT id FROM t WHERE id > ?1 ORDER BY id";
  each_t e = {0, 0, 0};
  assert_int_equal(px_store_each(r, q, PX_STORE_ARGS(PX_ARG_INT(1)), each_row, &e), PX_OK);
  assert_int_equal(e.rows, 4);
  assert_int_equal(e.sum, 2 + 3 + 4 + 5);
  e = (each_t){0, 2, 0};
  assert_int_equal(px_store_each(r, q, PX_STORE_ARGS(PX_ARG_INT(0)), each_row, &e), PX_OK);
  assert_int_equal(e.rows, 2);
  e = (each_t){0, -3, 0};
  assert_int_equal(px_store_each(r, q, PX_STORE_ARGS(PX_ARG_INT(0)), each_row, &e),
                   PX_ERR_NOMEM);
  assert_int_equal(e.rows, 3);
  /* no read left open on r: the writer's checkpoint empties the log */
  insert_row(s, "late", "", 0);
  assert_int_equal(px_store_exec(s, "PRAGMA wal_checkpoint(TRUNCATE)"), PX_OK);
  char wal[400];
  snprintf(wal, sizeof wal, "%s-wal", f->path);
  struct stat sb;
  assert_int_equal(stat(wal, &sb), 0);
  assert_int_equal(sb.st_size, 0);
  px_store_close(r);
  px_store_close(s);
}

/* read_only: reads, never writes, never migrates (an older file is refused
 * naming the file), and a missing file is not created. */
static void test_read_only_reads_and_refuses_writes(void **state) {
  fixture_t *f = *state;
  px_store_t *s = NULL, *r = NULL;
  px_store_options_t o = opts("test", m_v2, 2);
  o.read_only = 1;
  assert_int_equal(px_store_open(f->path, &o, &r), PX_ERR_IO); /* missing: not created */
  assert_int_equal(open_v(f->path, m_v1, 1, &s), PX_OK);
  insert_row(s, "a", "", 0);
  assert_int_equal(px_store_open(f->path, &o, &r), PX_ERR_FORMAT); /* version 1 of 2 */
  assert_non_null(strstr(px_last_error(), f->path));
  px_store_close(s);
  assert_int_equal(open_v(f->path, m_v2, 2, &s), PX_OK);
  assert_int_equal(px_store_open(f->path, &o, &r), PX_OK);
  assert_int_equal(px_store_schema_version(r), 2);
  assert_int_equal(count_rows(r, "SELECT count(*) FROM t"), 1);
  assert_int_equal(px_store_run_args(r, "DELETE FROM t WHERE name = ?1",
                                     PX_STORE_ARGS(PX_ARG_TEXT("a"))),
                   PX_ERR_IO);
  assert_int_equal(count_rows(s, "SELECT count(*) FROM t"), 1);
  px_store_close(r);
  px_store_close(s);
}

static void test_transactions_commit_and_roll_back(void **state) {
  fixture_t *f = *state;
  px_store_t *s = NULL;
  assert_int_equal(open_v(f->path, m_v1, 1, &s), PX_OK);
  assert_int_equal(px_store_begin(s), PX_OK);
  insert_row(s, "gone", "", 0);
  px_store_rollback(s);
  assert_int_equal(count_rows(s, "SELECT count(*) FROM t"), 0);
  assert_int_equal(px_store_begin(s), PX_OK);
  insert_row(s, "kept", "", 0);
  assert_int_equal(px_store_changes(s), 1);
  assert_int_equal(px_store_commit(s), PX_OK);
  px_store_rollback(s); /* nothing open: a no-op */
  px_store_close(s);
  assert_int_equal(open_v(f->path, m_v1, 1, &s), PX_OK);
  assert_int_equal(count_rows(s, "SELECT count(*) FROM t WHERE name = 'kept'"), 1);
  px_store_close(s);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test_setup_teardown(test_open_creates_wal_database_at_newest_version, setup,
                                      teardown),
      cmocka_unit_test_setup_teardown(test_migrations_resume_from_stored_version, setup, teardown),
      cmocka_unit_test_setup_teardown(test_failed_migration_is_rolled_back, setup, teardown),
      cmocka_unit_test_setup_teardown(test_newer_schema_is_refused, setup, teardown),
      cmocka_unit_test_setup_teardown(test_bind_args_binds_in_order_by_type, setup, teardown),
      cmocka_unit_test_setup_teardown(test_other_programs_database_is_refused, setup, teardown),
      cmocka_unit_test_setup_teardown(test_tables_without_schema_version_are_refused, setup,
                                      teardown),
      cmocka_unit_test_setup_teardown(test_not_a_database_is_refused_naming_the_file, setup,
                                      teardown),
      cmocka_unit_test_setup_teardown(test_corrupt_page_is_found_on_open, setup, teardown),
      cmocka_unit_test_setup_teardown(test_missing_file_and_directory_are_io_errors, setup,
                                      teardown),
      cmocka_unit_test_setup_teardown(test_bad_options_are_refused, setup, teardown),
      cmocka_unit_test_setup_teardown(test_statements_bind_step_and_columns, setup, teardown),
      cmocka_unit_test_setup_teardown(test_row_int64_reads_one_row, setup, teardown),
      cmocka_unit_test_setup_teardown(test_run_args_and_row_read_typed_columns, setup, teardown),
      cmocka_unit_test_setup_teardown(test_each_visits_rows_and_stops_when_told, setup, teardown),
      cmocka_unit_test_setup_teardown(test_read_only_reads_and_refuses_writes, setup, teardown),
      cmocka_unit_test_setup_teardown(test_transactions_commit_and_roll_back, setup, teardown),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
