/* SQLite helpers: open in WAL mode, check and migrate the schema, cache
 * prepared statements, and convert SQLite's result codes into px_status_t
 * with messages that name the file. The coordinator's database and the
 * agent's metrics file are both opened through here, so a corrupt, foreign
 * or too-new file is refused the same way everywhere. */
#include <assert.h>
#include <errno.h>
#include <sqlite3.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>

#include "prunex/store.h"
#include "px_check.h"

struct px_store_stmt {
  px_store_t *store;
  sqlite3_stmt *stmt;
  char *sql;
  struct px_store_stmt *next;
};

struct px_store {
  sqlite3 *db;
  char *path;
  int version;
  px_store_stmt_t *stmts; /* cache, most recently added first */
  int full;               /* the last failure was for lack of space (px_store_full) */
};

/* SQLite result code -> px status: what the caller can do about it. */
static px_status_t px__store_status(int rc) {
  switch (rc & 0xff) {
    case SQLITE_NOMEM: return PX_ERR_NOMEM;
    case SQLITE_CORRUPT:
    case SQLITE_NOTADB:
    case SQLITE_FORMAT: return PX_ERR_FORMAT;
    case SQLITE_CANTOPEN:
    case SQLITE_IOERR:
    case SQLITE_READONLY:
    case SQLITE_FULL:
    case SQLITE_PERM:
    case SQLITE_AUTH: return PX_ERR_IO;
    case SQLITE_BUSY:
    case SQLITE_LOCKED: return PX_ERR_TIMEOUT;
    case SQLITE_CONSTRAINT:
    case SQLITE_MISMATCH:
    case SQLITE_RANGE:
    case SQLITE_ERROR: return PX_ERR_INVALID;
    default: return PX_ERR_BACKEND;
  }
}

/* Sets the last error "PATH: WHAT: sqlite message (code name)". */
/* 1 when rc (on db) means the disk, a quota or a file-size limit is full:
 * SQLite says SQLITE_FULL for a short write, or an I/O error whose errno
 * says so. Read at the failure: the connection's errno is overwritten by
 * the next one. */
static int px__store_is_full(sqlite3 *db, int rc) {
  int e = db ? sqlite3_system_errno(db) : 0;
  return (rc & 0xff) == SQLITE_FULL ||
         ((rc & 0xff) == SQLITE_IOERR && (e == ENOSPC || e == EDQUOT || e == EFBIG));
}

static px_status_t px__store_error(px_store_t *s, const char *path, sqlite3 *db, int rc,
                                   const char *what) {
  int full = px__store_is_full(db, rc);
  if (s) s->full = full;
  if (full)
    return px_set_error(PX_ERR_IO, "%s: %s: no space left (%s)", path, what,
                        db ? sqlite3_errmsg(db) : sqlite3_errstr(rc));
  const char *msg = db ? sqlite3_errmsg(db) : sqlite3_errstr(rc);
  if (strcmp(msg, sqlite3_errstr(rc)) == 0)
    return px_set_error(px__store_status(rc), "%s: %s: %s", path, what, msg);
  return px_set_error(px__store_status(rc), "%s: %s: %s (%s)", path, what, msg,
                      sqlite3_errstr(rc));
}

const char *px_store_path(const px_store_t *s) { return s->path; }
int px_store_schema_version(const px_store_t *s) { return s->version; }
struct sqlite3 *px_store_sqlite(px_store_t *s) { return s->db; }
int px_store_full(const px_store_t *s) { return s->full; }
int64_t px_store_last_insert_id(px_store_t *s) { return sqlite3_last_insert_rowid(s->db); }
int px_store_changes(px_store_t *s) { return sqlite3_changes(s->db); }

px_status_t px_store_exec(px_store_t *s, const char *sql) {
  char *err = NULL;
  int rc = sqlite3_exec(s->db, sql, NULL, NULL, &err);
  if (rc != SQLITE_OK) {
    s->full = px__store_is_full(s->db, rc);
    int e = (rc & 0xff) == SQLITE_IOERR ? sqlite3_system_errno(s->db) : 0;
    px_status_t st = px_set_error(px__store_status(rc), "%s: %.60s...: %s (%s%s%s)%s", s->path,
                                  sql, err ? err : sqlite3_errmsg(s->db), sqlite3_errstr(rc),
                                  e ? ": " : "", e ? strerror(e) : "",
                                  s->full ? ": no space left" : "");
    sqlite3_free(err);
    return st;
  }
  return PX_OK;
}

px_status_t px_store_begin(px_store_t *s) { return px_store_exec(s, "BEGIN IMMEDIATE"); }
px_status_t px_store_commit(px_store_t *s) { return px_store_exec(s, "COMMIT"); }

void px_store_rollback(px_store_t *s) {
  if (!sqlite3_get_autocommit(s->db)) sqlite3_exec(s->db, "ROLLBACK", NULL, NULL, NULL);
}

/* ---- statements ---------------------------------------------------------- */

px_status_t px_store_stmt(px_store_t *s, const char *sql, px_store_stmt_t **out) {
  *out = NULL;
  for (px_store_stmt_t *c = s->stmts; c; c = c->next) {
    if (strcmp(c->sql, sql) == 0) {
      sqlite3_reset(c->stmt);
      sqlite3_clear_bindings(c->stmt);
      *out = c;
      return PX_OK;
    }
  }
  px_store_stmt_t *c = px_calloc(1, sizeof *c, "store.stmt");
  if (!c) return PX_ERR_NOMEM;
  c->sql = px__strdup(sql, "store.stmt.sql");
  if (!c->sql) {
    px_free(c);
    return PX_ERR_NOMEM;
  }
  int rc = sqlite3_prepare_v3(s->db, sql, -1, SQLITE_PREPARE_PERSISTENT, &c->stmt, NULL);
  if (rc != SQLITE_OK) {
    char what[96];
    snprintf(what, sizeof what, "prepare '%.60s'", sql);
    px_status_t st = px__store_error(s, s->path, s->db, rc, what);
    sqlite3_finalize(c->stmt);
    px_free(c->sql);
    px_free(c);
    return st;
  }
  c->store = s;
  c->next = s->stmts;
  s->stmts = c;
  *out = c;
  return PX_OK;
}

static px_status_t px__bind_check(px_store_stmt_t *st, int idx, int rc) {
  if (rc == SQLITE_OK) return PX_OK;
  char what[112];
  snprintf(what, sizeof what, "bind parameter %d of '%.60s'", idx, st->sql);
  return px__store_error(st->store, st->store->path, st->store->db, rc, what);
}

px_status_t px_store_bind_int64(px_store_stmt_t *st, int idx, int64_t v) {
  return px__bind_check(st, idx, sqlite3_bind_int64(st->stmt, idx, v));
}

px_status_t px_store_bind_double(px_store_stmt_t *st, int idx, double v) {
  return px__bind_check(st, idx, sqlite3_bind_double(st->stmt, idx, v));
}

px_status_t px_store_bind_text(px_store_stmt_t *st, int idx, const char *v) {
  if (!v) return px_store_bind_null(st, idx);
  return px__bind_check(st, idx, sqlite3_bind_text(st->stmt, idx, v, -1, SQLITE_TRANSIENT));
}

px_status_t px_store_bind_blob(px_store_stmt_t *st, int idx, const void *v, size_t len) {
  /* An empty blob is stored as an empty blob, not NULL. */
  static const char empty = 0;
  return px__bind_check(st, idx, sqlite3_bind_blob64(st->stmt, idx, len ? v : &empty,
                                                     (sqlite3_uint64)len, SQLITE_TRANSIENT));
}

px_status_t px_store_bind_null(px_store_stmt_t *st, int idx) {
  return px__bind_check(st, idx, sqlite3_bind_null(st->stmt, idx));
}

px_status_t px_store_bind_args(px_store_stmt_t *st, const px_store_arg_t *args, size_t n) {
  for (size_t k = 0; k < n; k++) {
    int idx = (int)k + 1;
    px_status_t rc;
    switch (args[k].type) {
    case 1: rc = px_store_bind_int64(st, idx, args[k].i); break;
    case 2: rc = px_store_bind_double(st, idx, args[k].d); break;
    case 3: rc = px_store_bind_text(st, idx, args[k].s); break;
    default: return px_set_error(PX_ERR_INVALID, "px_store_bind_args: argument %d has no type", idx);
    }
    if (rc != PX_OK) return rc;
  }
  return PX_OK;
}

px_status_t px_store_step(px_store_stmt_t *st) {
  int rc = sqlite3_step(st->stmt);
  if (rc == SQLITE_ROW) return 1;
  if (rc == SQLITE_DONE) return 0;
  char what[96];
  snprintf(what, sizeof what, "'%.60s'", st->sql);
  px_status_t s = px__store_error(st->store, st->store->path, st->store->db, rc, what);
  sqlite3_reset(st->stmt);
  return s;
}

px_status_t px_store_run(px_store_stmt_t *st) {
  px_status_t rc;
  while ((rc = px_store_step(st)) == 1) {
  }
  sqlite3_reset(st->stmt);
  return rc;
}

px_status_t px_store_row_int64(px_store_t *s, const char *sql, const char *key,
                               int64_t *out, int n, int *found) {
  px_store_stmt_t *st;
  *found = 0;
  PX_CHECK(px_store_stmt(s, sql, &st));
  PX_CHECK(px_store_bind_text(st, 1, key));
  px_status_t rc = px_store_step(st);
  if (rc < 0) return rc;
  if (rc == 1) {
    for (int i = 0; i < n; i++) out[i] = sqlite3_column_int64(st->stmt, i);
    *found = 1;
    sqlite3_reset(st->stmt);
  }
  return PX_OK;
}

px_status_t px_store_run_args(px_store_t *s, const char *sql, const px_store_arg_t *args,
                              size_t nargs) {
  px_store_stmt_t *st;
  PX_CHECK(px_store_stmt(s, sql, &st));
  PX_CHECK(px_store_bind_args(st, args, nargs));
  return px_store_run(st);
}

void px_store_read_cols(px_store_stmt_t *st, const px_store_col_t *cols, size_t ncols) {
  for (size_t k = 0; k < ncols; k++) {
    int col = (int)k;
    switch (cols[k].type) {
    case 1: *(int64_t *)cols[k].out = sqlite3_column_int64(st->stmt, col); break;
    case 2: *(double *)cols[k].out = sqlite3_column_double(st->stmt, col); break;
    case 3: snprintf(cols[k].out, cols[k].cap, "%s", px_store_column_text(st, col)); break;
    case 4: *(int *)cols[k].out = (int)sqlite3_column_int64(st->stmt, col); break;
    default: break;
    }
  }
}

px_status_t px_store_row(px_store_t *s, const char *sql, const px_store_arg_t *args,
                         size_t nargs, const px_store_col_t *cols, size_t ncols, int *found) {
  px_store_stmt_t *st;
  if (found) *found = 0;
  PX_CHECK(px_store_stmt(s, sql, &st));
  PX_CHECK(px_store_bind_args(st, args, nargs));
  px_status_t rc = px_store_step(st);
  if (rc == 1) {
    px_store_read_cols(st, cols, ncols);
    if (found) *found = 1;
  }
  sqlite3_reset(st->stmt);
  return rc < 0 ? rc : PX_OK;
}

px_status_t px_store_each(px_store_t *s, const char *sql, const px_store_arg_t *args,
                          size_t nargs, px_store_row_fn fn, void *arg) {
  px_store_stmt_t *st;
  PX_CHECK(px_store_stmt(s, sql, &st));
  PX_CHECK(px_store_bind_args(st, args, nargs));
  px_status_t rc, stop = 0;
  while ((rc = px_store_step(st)) == 1 && (stop = fn(arg, st)) == 0) {
  }
  sqlite3_reset(st->stmt);
  if (rc < 0) return rc;
  return stop < 0 ? stop : PX_OK;
}

size_t px_store_column_bytes(px_store_stmt_t *st, int col) {
  return (size_t)sqlite3_column_bytes(st->stmt, col);
}

int64_t px_store_column_int64(px_store_stmt_t *st, int col) {
  return sqlite3_column_int64(st->stmt, col);
}

double px_store_column_double(px_store_stmt_t *st, int col) {
  return sqlite3_column_double(st->stmt, col);
}

const char *px_store_column_text(px_store_stmt_t *st, int col) {
  const unsigned char *t = sqlite3_column_text(st->stmt, col);
  return t ? (const char *)t : "";
}

const void *px_store_column_blob(px_store_stmt_t *st, int col, size_t *len) {
  const void *b = sqlite3_column_blob(st->stmt, col);
  int n = sqlite3_column_bytes(st->stmt, col);
  *len = b ? (size_t)n : 0;
  return n > 0 ? b : NULL;
}

int px_store_column_is_null(px_store_stmt_t *st, int col) {
  return sqlite3_column_type(st->stmt, col) == SQLITE_NULL;
}

void px_store_reset(px_store_stmt_t *st) { sqlite3_reset(st->stmt); }

/* ---- open, check, migrate ------------------------------------------------ */

/* Runs a one-row PRAGMA and copies its first column into buf. */
static px_status_t px__pragma_text(px_store_t *s, const char *sql, const char *what, char *buf,
                                   size_t cap) {
  sqlite3_stmt *stmt = NULL;
  int rc = sqlite3_prepare_v2(s->db, sql, -1, &stmt, NULL);
  if (rc == SQLITE_OK) rc = sqlite3_step(stmt);
  if (rc != SQLITE_ROW && rc != SQLITE_DONE) {
    px_status_t st = px__store_error(s, s->path, s->db, rc, what);
    sqlite3_finalize(stmt);
    return st;
  }
  const unsigned char *t = rc == SQLITE_ROW ? sqlite3_column_text(stmt, 0) : NULL;
  snprintf(buf, cap, "%s", t ? (const char *)t : "");
  sqlite3_finalize(stmt);
  return PX_OK;
}

static px_status_t px__read_schema(px_store_t *s, const char *schema, int *version) {
  char buf[128];
  *version = 0;
  PX_CHECK(px__pragma_text(s, "SELECT count(*) FROM sqlite_master WHERE type = 'table' AND "
                              "name = 'schema_version'", "read the schema", buf, sizeof buf));
  if (strcmp(buf, "0") == 0) {
    PX_CHECK(px__pragma_text(s, "SELECT count(*) FROM sqlite_master", "read the schema", buf,
                           sizeof buf));
    if (strcmp(buf, "0") != 0)
      return px_set_error(PX_ERR_FORMAT,
                          "%s: the database holds tables but no schema_version table: it is "
                          "not a PruneX %s database", s->path, schema);
    return PX_OK;
  }
  sqlite3_stmt *stmt = NULL;
  int rc = sqlite3_prepare_v2(s->db, "SELECT version, name FROM schema_version WHERE id = 1", -1,
                              &stmt, NULL);
  if (rc == SQLITE_OK) rc = sqlite3_step(stmt);
  if (rc != SQLITE_ROW) {
    px_status_t st = rc == SQLITE_DONE
                         ? px_set_error(PX_ERR_FORMAT, "%s: schema_version table is empty", s->path)
                         : px__store_error(s, s->path, s->db, rc, "read schema_version");
    sqlite3_finalize(stmt);
    return st;
  }
  *version = sqlite3_column_int(stmt, 0);
  const unsigned char *name = sqlite3_column_text(stmt, 1);
  px_status_t st = PX_OK;
  if (!name || strcmp((const char *)name, schema) != 0)
    st = px_set_error(PX_ERR_FORMAT, "%s: holds a '%s' database, not a '%s' one", s->path,
                      name ? (const char *)name : "", schema);
  sqlite3_finalize(stmt);
  return st;
}

static px_status_t px__migrate(px_store_t *s, const px_store_options_t *opt, int from) {
  for (int i = from; i < opt->nmigrations; i++) {
    const px_store_migration_t *m = &opt->migrations[i];
    px_status_t st = PX_OK;
    PX_CHECK(px_store_begin(s));
    if (i == 0) {
      PX_CHECK_GOTO(px_store_exec(s, "CREATE TABLE schema_version ("
                                     " id INTEGER PRIMARY KEY CHECK (id = 1),"
                                     " version INTEGER NOT NULL,"
                                     " name TEXT NOT NULL,"
                                     " updated_unix_ms INTEGER NOT NULL)"),
                    st, fail);
    }
    char *err = NULL;
    int rc = sqlite3_exec(s->db, m->sql, NULL, NULL, &err);
    if (rc != SQLITE_OK) {
      st = px_set_error(px__store_status(rc), "%s: schema migration to version %d failed: %s",
                        s->path, m->version, err ? err : sqlite3_errmsg(s->db));
      sqlite3_free(err);
      goto fail;
    }
    px_store_stmt_t *ins;
    PX_CHECK_GOTO(px_store_stmt(s,
                                "INSERT OR REPLACE INTO schema_version (id, version, name, "
                                "updated_unix_ms) VALUES (1, ?1, ?2, CAST((julianday('now') - "
                                "2440587.5) * 86400000 AS INTEGER))",
                                &ins),
                  st, fail);
    PX_CHECK_GOTO(px_store_bind_int64(ins, 1, m->version), st, fail);
    PX_CHECK_GOTO(px_store_bind_text(ins, 2, opt->schema), st, fail);
    PX_CHECK_GOTO(px_store_run(ins), st, fail);
    PX_CHECK_GOTO(px_store_commit(s), st, fail);
    px_log(PX_LOG_INFO, "%s: schema migrated to version %d", s->path, m->version);
    continue;
  fail:
    px_store_rollback(s);
    return st;
  }
  return PX_OK;
}

/* A reader's checks: a database of this schema at the newest version. */
static px_status_t px__open_read_only(px_store_t *s, const px_store_options_t *opt) {
  int version = 0, newest = opt->migrations[opt->nmigrations - 1].version;
  PX_CHECK(px__read_schema(s, opt->schema, &version));
  if (version != newest)
    return px_set_error(PX_ERR_FORMAT,
                        "%s: database schema version %d, this program reads %d: open it read-write "
                        "first (it cannot be migrated read-only)", s->path, version, newest);
  s->version = newest;
  return PX_OK;
}

px_status_t px_store_open(const char *path, const px_store_options_t *opt, px_store_t **out) {
  *out = NULL;
  PX_REQUIRE(path && path[0], "store: empty database path");
  PX_REQUIRE(opt && opt->schema && opt->schema[0], "%s: store opened without a schema name", path);
  PX_REQUIRE(opt->nmigrations >= 1 && opt->migrations, "%s: no schema migrations", path);
  for (int i = 0; i < opt->nmigrations; i++)
    PX_REQUIRE(opt->migrations[i].version == i + 1 && opt->migrations[i].sql,
               "%s: migration %d has version %d (versions must be 1, 2, ...)", path, i,
               opt->migrations[i].version);

  struct stat sb;
  if (stat(path, &sb) == 0 && S_ISDIR(sb.st_mode))
    return px_set_error(PX_ERR_IO, "%s: is a directory, not a database file", path);

  px_store_t *s = px_calloc(1, sizeof *s, "store");
  if (!s) return PX_ERR_NOMEM;
  px_status_t st = PX_OK;
  s->path = px__strdup(path, "store.path");
  if (!s->path) {
    st = PX_ERR_NOMEM;
    goto done;
  }
  int flags = opt->read_only ? SQLITE_OPEN_READONLY
                             : SQLITE_OPEN_READWRITE | (opt->create ? SQLITE_OPEN_CREATE : 0);
  int rc = sqlite3_open_v2(path, &s->db, flags, NULL);
  if (rc != SQLITE_OK) {
    st = px__store_error(s, path, s->db, rc, "open");
    goto done;
  }
  sqlite3_extended_result_codes(s->db, 1);
  sqlite3_busy_timeout(s->db, opt->busy_timeout_ms > 0 ? opt->busy_timeout_ms : 5000);

  if (opt->read_only) {
    PX_CHECK_GOTO(px__open_read_only(s, opt), st, done);
    goto done;
  }
  /* The first statement reads the header: a file that is not a database
   * fails here with SQLITE_NOTADB. */
  char mode[32];
  PX_CHECK_GOTO(px__pragma_text(s, "PRAGMA journal_mode = WAL", "open", mode, sizeof mode), st,
                done);
  if (strcmp(mode, "wal") != 0) {
    st = px_set_error(PX_ERR_IO, "%s: cannot switch to WAL journal mode (got '%s')", path, mode);
    goto done;
  }
  PX_CHECK_GOTO(px_store_exec(s, "PRAGMA synchronous = NORMAL; PRAGMA foreign_keys = ON"), st,
                done);
  if (opt->quick_check) {
    char res[256];
    PX_CHECK_GOTO(px__pragma_text(s, "PRAGMA quick_check(1)", "integrity check", res, sizeof res),
                  st, done);
    if (strcmp(res, "ok") != 0) {
      st = px_set_error(PX_ERR_FORMAT, "%s: database is corrupt: %s", path, res);
      goto done;
    }
  }
  int version = 0;
  PX_CHECK_GOTO(px__read_schema(s, opt->schema, &version), st, done);
  int newest = opt->migrations[opt->nmigrations - 1].version;
  if (version > newest) {
    st = px_set_error(PX_ERR_FORMAT,
                      "%s: database schema version %d is newer than this program's %d (it was "
                      "written by a newer PruneX %s): refusing to open it", path, version, newest,
                      opt->schema);
    goto done;
  }
  PX_CHECK_GOTO(px__migrate(s, opt, version), st, done);
  s->version = newest;
done:
  return PX_CREATED(st, s, out, px_store_close);
}

void px_store_close(px_store_t *s) {
  if (!s) return;
  px_store_stmt_t *c = s->stmts;
  while (c) {
    px_store_stmt_t *next = c->next;
    sqlite3_finalize(c->stmt);
    px_free(c->sql);
    px_free(c);
    c = next;
  }
  if (s->db) sqlite3_close_v2(s->db);
  px_free(s->path);
  px_free(s);
}
