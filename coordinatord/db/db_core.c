/* Helpers of the coordinator's data layer (db_core.h). */
#include <assert.h>
#include <stdio.h>

#include "db_core.h"

#include "prunex/check.h"

typedef struct {
  coord_arena_t *a;
  const coord_db_list_col_t *cols;
  size_t ncols, n[COORD_LIST_MAX_COLS], cap[COORD_LIST_MAX_COLS];
} coord_db_list_t;

static px_status_t coord_db_list_row(void *arg, px_store_stmt_t *st) {
  coord_db_list_t *l = arg;
  for (size_t k = 0; k < l->ncols; k++) {
    const coord_db_list_col_t *col = &l->cols[k];
    size_t elem = col->type == 1 ? sizeof(int64_t) : col->type == 4 ? sizeof(int) : sizeof(char *);
    void *slot = coord_push(l->a, col->out, &l->n[k], &l->cap[k], elem);
    if (!slot) return PX_ERR_NOMEM;
    if (col->type == 1) *(int64_t *)slot = px_store_column_int64(st, (int)k);
    else if (col->type == 4) *(int *)slot = (int)px_store_column_int64(st, (int)k);
    else if (!(*(char **)slot = coord_strdup(l->a, px_store_column_text(st, (int)k))))
      return PX_ERR_NOMEM;
  }
  return PX_OK;
}

px_status_t coord_db_list(coord_t *c, coord_arena_t *a, const char *sql,
                          const px_store_arg_t *args, size_t nargs,
                          const coord_db_list_col_t *cols, size_t ncols, size_t *n) {
  assert(ncols >= 1 && ncols <= COORD_LIST_MAX_COLS);
  coord_db_list_t l = {.a = a, .cols = cols, .ncols = ncols};
  for (size_t k = 0; k < ncols; k++) l.n[k] = l.cap[k] = *n;
  px_status_t rc = px_store_each(c->db, sql, args, nargs, coord_db_list_row, &l);
  *n = l.n[ncols - 1]; /* the rows whose every column was added */
  return rc;
}

typedef struct {
  coord_arena_t *a;
  size_t size, cap, *n;
  void **out;
  coord_db_fill_fn fill;
  void *arg;
  int inline_; /* elements in the array (coord_db_rows), else pointers */
} coord_db_objects_t;

static px_status_t coord_db_object_row(void *arg, px_store_stmt_t *st) {
  coord_db_objects_t *o = arg;
  void *obj;
  if (o->inline_) {
    obj = coord_push(o->a, o->out, o->n, &o->cap, o->size);
  } else {
    void **slot = coord_push(o->a, o->out, o->n, &o->cap, sizeof(void *));
    if ((obj = slot ? coord_alloc(o->a, o->size) : NULL)) *slot = obj;
  }
  if (!obj) return PX_ERR_NOMEM;
  px_status_t rc = o->fill(o->a, st, obj, o->arg);
  if (rc > 0) (*o->n)--; /* dropped: the next row takes its place */
  return rc < 0 ? rc : PX_OK;
}

px_status_t coord_db_objects(coord_t *c, coord_arena_t *a, const char *sql,
                             const px_store_arg_t *args, size_t nargs, size_t size, void *out,
                             size_t *n, coord_db_fill_fn fill, void *arg) {
  coord_db_objects_t o = {a, size, *n, n, out, fill, arg, 0};
  return px_store_each(c->db, sql, args, nargs, coord_db_object_row, &o);
}

px_status_t coord_db_rows(coord_t *c, coord_arena_t *a, const char *sql,
                          const px_store_arg_t *args, size_t nargs, size_t size, void *out,
                          size_t *n, coord_db_fill_fn fill, void *arg) {
  *(void **)out = NULL;
  *n = 0;
  coord_db_objects_t o = {a, size, 0, n, out, fill, arg, 1};
  return px_store_each(c->db, sql, args, nargs, coord_db_object_row, &o);
}

px_status_t coord_db_ids(coord_t *c, coord_arena_t *a, const char *sql, const char *key,
                         char ***ids, size_t *n) {
  return coord_db_list(c, a, sql, PX_STORE_ARGS(PX_ARG_TEXT(key)),
                       COORD_LIST_COLS(COORD_LIST_TEXT(ids)), n);
}

px_status_t coord_db_run_key(coord_t *c, const char *sql, const char *key) {
  return px_store_run_args(c->db, sql, PX_STORE_ARGS(PX_ARG_TEXT(key)));
}

px_status_t coord_db_text(coord_t *c, const char *sql, const char *key, char *out, size_t cap,
                          int *found) {
  return px_store_row(c->db, sql, PX_STORE_ARGS(PX_ARG_TEXT(key)),
                      PX_STORE_COLS(PX_COL_TEXT(out, cap)), found);
}

px_status_t coord_db_event(coord_t *c, int node, const char *id, int64_t now, int from, int to,
                           const char *reason) {
  return px_store_run_args(c->db,
                           node ? "INSERT INTO node_events (node_id, time_unix_ms, from_state,"
                                  " to_state, reason) VALUES (?1, ?2, ?3, ?4, ?5)"
                                : "INSERT INTO job_events (job_id, time_unix_ms, from_state,"
                                  " to_state, reason) VALUES (?1, ?2, ?3, ?4, ?5)",
                           PX_STORE_ARGS(PX_ARG_TEXT(id), PX_ARG_INT(now), PX_ARG_INT(from),
                                         PX_ARG_INT(to), PX_ARG_TEXT(reason)));
}

px_status_t coord_db_query_only(coord_t *c) {
  return px_store_exec(c->db, "PRAGMA query_only = ON");
}
