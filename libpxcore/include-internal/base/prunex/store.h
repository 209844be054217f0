/* SQLite helpers shared by the programs that keep state on disk: the
 * coordinator's database and the agent's node-local metrics file.
 *
 * px_store_open opens (or creates) a database in WAL mode with a busy
 * timeout, checks what it holds and brings its schema up to date through a
 * list of numbered migrations; a database written by a newer program (a
 * schema_version above the newest migration), or by another program (a
 * different schema name), is refused with an error naming the file. Every
 * SQLite error is converted at this boundary into a px_status_t whose message
 * names the file, the operation and SQLite's own text.
 *
 * Handles are not thread-safe: one thread uses a store (and its statements)
 * at a time. */
#ifndef PRUNEX_STORE_H
#define PRUNEX_STORE_H

#include <stddef.h>
#include <stdint.h>

#include "prunex/px.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct px_store px_store_t;
typedef struct px_store_stmt px_store_stmt_t;
struct sqlite3;

/* One schema step. Migration i must have version i + 1 (versions start at 1
 * and are contiguous); its SQL (one or more statements) runs in the same
 * transaction as the update of schema_version, so a step is applied wholly or
 * not at all. */
typedef struct {
  int version;
  const char *sql;
} px_store_migration_t;

typedef struct {
  /* Name of the schema ("coordinator", "agent-metrics"); recorded in the
   * schema_version table and checked on open. Required. */
  const char *schema;
  const px_store_migration_t *migrations;
  int nmigrations;
  int busy_timeout_ms;   /* 0: 5000 */
  int quick_check;       /* run PRAGMA quick_check on open (finds corrupt pages) */
  int create;            /* create the file when missing (else PX_ERR_IO) */
  /* read only (a reader beside the writer, e.g. pxcoordd's HTTP thread):
   * the file must exist at the newest schema version (nothing is migrated
   * or switched), and every write fails */
  int read_only;
} px_store_options_t;

/* Opens path and migrates it to the newest version of opt->migrations.
 * Errors (each message names the file): PX_ERR_IO (cannot open or create,
 * read-only, disk full), PX_ERR_FORMAT (not a database, corrupt, newer
 * schema, other program's schema), PX_ERR_INVALID (bad options or a failing
 * migration's SQL). *out is owned by the caller (px_store_close). */
px_status_t px_store_open(const char *path, const px_store_options_t *opt, px_store_t **out);

/* Finalizes cached statements and closes the database. NULL is a no-op. */
void px_store_close(px_store_t *s);

/* The path given to px_store_open (owned by the store). */
const char *px_store_path(const px_store_t *s);

/* The schema version after open (the newest migration's version). */
int px_store_schema_version(const px_store_t *s);

/* The underlying connection, for programs that link SQLite themselves. */
struct sqlite3 *px_store_sqlite(px_store_t *s);

/* 1 when the last call on s that failed did so for lack of space (a full
 * disk, a quota, a file-size limit): an operator's problem rather than a
 * bug. The message of that failure says "no space left". */
int px_store_full(const px_store_t *s);

/* Runs one or more SQL statements that return no rows of interest. */
px_status_t px_store_exec(px_store_t *s, const char *sql);

/* Transactions: begin is BEGIN IMMEDIATE (takes the write lock at once, so
 * a busy database fails here, not halfway through). rollback never fails. */
px_status_t px_store_begin(px_store_t *s);
px_status_t px_store_commit(px_store_t *s);
void px_store_rollback(px_store_t *s);

/* Rowid of the last INSERT, and the rows changed by the last statement. */
int64_t px_store_last_insert_id(px_store_t *s);
int px_store_changes(px_store_t *s);

/* ---- prepared statements ------------------------------------------------
 * px_store_stmt returns the statement for sql, prepared once and cached by
 * the store (keyed by the text), reset and with its bindings cleared: do not
 * finalize it. Parameters are numbered from 1, result columns from 0. */
px_status_t px_store_stmt(px_store_t *s, const char *sql, px_store_stmt_t **out);

px_status_t px_store_bind_int64(px_store_stmt_t *st, int idx, int64_t v);
px_status_t px_store_bind_double(px_store_stmt_t *st, int idx, double v);
/* Text and blobs are copied by SQLite (the caller keeps its buffer). */
px_status_t px_store_bind_text(px_store_stmt_t *st, int idx, const char *v);
px_status_t px_store_bind_blob(px_store_stmt_t *st, int idx, const void *v, size_t len);
px_status_t px_store_bind_null(px_store_stmt_t *st, int idx);

/* Several parameters at once: args[k] binds ?k+1, typed by its maker
 * (PX_ARG_INT, PX_ARG_REAL, PX_ARG_TEXT; text NULL binds NULL, as
 * px_store_bind_text). Write them with PX_STORE_ARGS:
 *   px_store_bind_args(st, PX_STORE_ARGS(PX_ARG_TEXT(job_id), PX_ARG_INT(state)))
 * Stops at the first failure. */
typedef struct {
  int type; /* 1 integer, 2 real, 3 text */
  int64_t i;
  double d;
  const char *s;
} px_store_arg_t;
#define PX_ARG_INT(v) ((px_store_arg_t){.type = 1, .i = (int64_t)(v)})
#define PX_ARG_REAL(v) ((px_store_arg_t){.type = 2, .d = (double)(v)})
#define PX_ARG_TEXT(v) ((px_store_arg_t){.type = 3, .s = (v)})
#define PX_STORE_ARGS(...)                                                                   \
  (const px_store_arg_t[]){__VA_ARGS__},                                                     \
      sizeof((const px_store_arg_t[]){__VA_ARGS__}) / sizeof(px_store_arg_t)
px_status_t px_store_bind_args(px_store_stmt_t *st, const px_store_arg_t *args, size_t n);

/* Runs sql (no rows of interest) with args bound: prepare, bind, run in
 * one call, e.g.
 *   px_store_run_args(s, "UPDATE jobs SET state = ?2 WHERE job_id = ?1",
 *                     PX_STORE_ARGS(PX_ARG_TEXT(id), PX_ARG_INT(state)))
 * Negative on an error, as px_store_step. */
px_status_t px_store_run_args(px_store_t *s, const char *sql, const px_store_arg_t *args,
                                     size_t nargs);

/* Where a result column goes (px_store_row): made by PX_COL_INT (int64_t
 * *), PX_COL_I32 (int *), PX_COL_REAL (double *), PX_COL_TEXT (char buffer
 * and its size: cut to fit, always NUL-terminated), PX_COL_SKIP (read
 * nothing); the makers check the pointer's type. Written with
 * PX_STORE_COLS as PX_STORE_ARGS. */
typedef struct {
  int type; /* 1 int64, 2 real, 3 text, 4 int, 5 skip */
  void *out;
  size_t cap;
} px_store_col_t;
#define PX_COL_INT(p) ((px_store_col_t){.type = 1, .out = (1 ? (p) : (int64_t *)0)})
#define PX_COL_REAL(p) ((px_store_col_t){.type = 2, .out = (1 ? (p) : (double *)0)})
#define PX_COL_TEXT(buf, n) ((px_store_col_t){.type = 3, .out = (1 ? (buf) : (char *)0), .cap = (n)})
#define PX_COL_I32(p) ((px_store_col_t){.type = 4, .out = (1 ? (p) : (int *)0)})
#define PX_COL_SKIP ((px_store_col_t){.type = 5})
#define PX_STORE_COLS(...)                                                                   \
  (const px_store_col_t[]){__VA_ARGS__},                                                     \
      sizeof((const px_store_col_t[]){__VA_ARGS__}) / sizeof(px_store_col_t)

/* Reads the current row of st into cols (column k into cols[k]). */
void px_store_read_cols(px_store_stmt_t *st, const px_store_col_t *cols, size_t ncols);

/* The first row of sql (args bound) into cols, *found 1; no row leaves
 * the targets untouched, *found 0 (found may be NULL). The statement is
 * reset either way. Negative on an error, as px_store_step. */
px_status_t px_store_row(px_store_t *s, const char *sql, const px_store_arg_t *args,
                                size_t nargs, const px_store_col_t *cols, size_t ncols,
                                int *found);

/* Calls fn(arg, st) for each row of sql (args bound), in order, until the
 * rows end or fn returns nonzero: a negative return is an error returned
 * as it is, a positive one stops early (PX_OK). The statement is reset on
 * every outcome, so no read stays open. */
typedef px_status_t (*px_store_row_fn)(void *arg, px_store_stmt_t *st);
px_status_t px_store_each(px_store_t *s, const char *sql, const px_store_arg_t *args,
                                 size_t nargs, px_store_row_fn fn, void *arg);

/* Steps the statement: 1 when a row is ready, 0 when done, negative on an
 * error (converted, naming the file and the statement). */
px_status_t px_store_step(px_store_stmt_t *st);

/* Steps a statement that returns no rows (INSERT, UPDATE, ...) to its end. */
px_status_t px_store_run(px_store_stmt_t *st);

/* The first row of sql (one text parameter ?1 = key): its first n columns
 * as integers into out[n], *found 1; no row leaves out untouched, *found 0.
 * The statement is reset. Negative on an error, as px_store_step. */
px_status_t px_store_row_int64(px_store_t *s, const char *sql, const char *key,
                                      int64_t *out, int n, int *found);

/* Column accessors for the current row. Text and blobs are owned by the
 * statement and valid until the next step or reset; text is never NULL
 * ("" for NULL), a NULL or empty blob gives NULL with *len 0. */
int64_t px_store_column_int64(px_store_stmt_t *st, int col);
double px_store_column_double(px_store_stmt_t *st, int col);
const char *px_store_column_text(px_store_stmt_t *st, int col);
const void *px_store_column_blob(px_store_stmt_t *st, int col, size_t *len);
int px_store_column_is_null(px_store_stmt_t *st, int col);
/* The column's size in bytes (of its text or blob). */
size_t px_store_column_bytes(px_store_stmt_t *st, int col);

/* Resets the statement so that it can be stepped again (bindings kept). */
void px_store_reset(px_store_stmt_t *st);

#ifdef __cplusplus
}
#endif
#endif
