/* A job's membership changes as metrics rows (epoch_rows.h). */
#include "epoch_rows.h"

#include <string.h>

#include "prunex/check.h"

static const char *const coord_epoch_kinds[COORD_EPOCH_NKINDS] = {"placed", "lost", "preempted",
                                                                  "joined", "other"};

const char *coord_epoch_kind_name(coord_epoch_kind_t k) {
  return k >= 0 && k < COORD_EPOCH_NKINDS ? coord_epoch_kinds[k] : "other";
}

coord_epoch_kind_t coord_epoch_kind(int epoch, const char *reason) {
  if (epoch <= 1) return COORD_EPOCH_PLACED;
  static const struct {
    const char *word;
    coord_epoch_kind_t kind;
  } words[] = {{" lost", COORD_EPOCH_LOST},
               {" preempted by ", COORD_EPOCH_PREEMPTED},
               {" join", COORD_EPOCH_JOINED},
               {" rejoin", COORD_EPOCH_JOINED}};
  const char *first = NULL;
  coord_epoch_kind_t kind = COORD_EPOCH_OTHER;
  for (size_t i = 0; i < sizeof words / sizeof words[0]; i++) {
    const char *at = reason ? strstr(reason, words[i].word) : NULL;
    if (at && (!first || at < first)) {
      first = at;
      kind = words[i].kind;
    }
  }
  return kind;
}

typedef struct {
  coord_arena_t *a;
  coord_epoch_row_t *rows;
  size_t n, cap;
  px_status_t rc;
} coord_epoch_read_t;

/* Splits the member ids (one a line) into the row's node_ids. */
static px_status_t coord_epoch_split(coord_arena_t *a, const char *ids, coord_epoch_row_t *r) {
  char *text = coord_strdup(a, ids ? ids : "");
  if (!text) return PX_ERR_NOMEM;
  size_t cap = 0;
  for (char *p = text, *nl; *p; p = nl + 1) {
    nl = strchr(p, '\n');
    if (nl) *nl = '\0';
    char **slot = coord_push(a, (void **)&r->node_ids, &r->n, &cap, sizeof(char *));
    if (!slot) return PX_ERR_NOMEM;
    *slot = p;
    if (!nl) break;
  }
  return PX_OK;
}

static px_status_t coord_epoch_read_row(void *arg, px_store_stmt_t *st) {
  coord_epoch_read_t *rd = arg;
  coord_epoch_row_t *r = coord_push(rd->a, (void **)&rd->rows, &rd->n, &rd->cap, sizeof *r);
  if (!r) return PX_ERR_NOMEM;
  r->attempt = (int)px_store_column_int64(st, 0);
  r->epoch = (int)px_store_column_int64(st, 1);
  r->from_iteration = (int)px_store_column_int64(st, 2);
  r->reason = coord_strdup(rd->a, px_store_column_text(st, 4));
  r->time_unix_ms = px_store_column_int64(st, 5);
  if (!r->reason) return PX_ERR_NOMEM;
  r->kind = coord_epoch_kind(r->epoch, r->reason);
  return coord_epoch_split(rd->a, px_store_column_text(st, 3), r);
}

/* The node's name (its id when the coordinator has no such node). */
static px_status_t coord_epoch_name(px_store_t *db, coord_arena_t *a, const char *id, char **out) {
  char name[256] = "";
  int found = 0;
  PX_CHECK(px_store_row(db, "SELECT name FROM nodes WHERE node_id = ?1",
                        PX_STORE_ARGS(PX_ARG_TEXT(id)), PX_STORE_COLS(PX_COL_TEXT(name, sizeof name)),
                        &found));
  *out = coord_strdup(a, found && name[0] ? name : id);
  return *out ? PX_OK : PX_ERR_NOMEM;
}

static int coord_epoch_has(const coord_epoch_row_t *r, const char *id) {
  for (size_t i = 0; r && i < r->n; i++)
    if (!strcmp(r->node_ids[i], id)) return 1;
  return 0;
}

/* Names of a's members that are not members of b (b NULL: all of them). */
static px_status_t coord_epoch_diff(px_store_t *db, coord_arena_t *a, const coord_epoch_row_t *x,
                                    const coord_epoch_row_t *y, char ***out, size_t *n) {
  size_t cap = 0;
  for (size_t i = 0; x && i < x->n; i++) {
    if (coord_epoch_has(y, x->node_ids[i])) continue;
    char **slot = coord_push(a, (void **)out, n, &cap, sizeof(char *));
    if (!slot) return PX_ERR_NOMEM;
    PX_CHECK(coord_epoch_name(db, a, x->node_ids[i], slot));
  }
  return PX_OK;
}

/* Names, in and out of row r, whose attempt's epoch before is prev (NULL:
 * none). */
static px_status_t coord_epoch_resolve(px_store_t *db, coord_arena_t *a, coord_epoch_row_t *r,
                                       const coord_epoch_row_t *prev) {
  r->names = coord_alloc(a, (r->n ? r->n : 1) * sizeof *r->names);
  if (!r->names) return PX_ERR_NOMEM;
  for (size_t i = 0; i < r->n; i++) PX_CHECK(coord_epoch_name(db, a, r->node_ids[i], &r->names[i]));
  PX_CHECK(coord_epoch_diff(db, a, r, prev, &r->in, &r->n_in));
  return prev ? coord_epoch_diff(db, a, prev, r, &r->out, &r->n_out) : PX_OK;
}

px_status_t coord_db_epoch_rows(px_store_t *db, coord_arena_t *a, const char *job_id, int attempt,
                                int names, coord_epoch_row_t **out, size_t *n) {
  coord_epoch_read_t rd = {.a = a};
  *out = NULL;
  *n = 0;
  PX_CHECK(px_store_each(db,
                         "SELECT attempt, epoch, from_iteration, node_ids, reason, time_unix_ms"
                         " FROM job_epochs WHERE job_id = ?1 AND (?2 <= 0 OR attempt = ?2)"
                         " ORDER BY attempt, epoch",
                         PX_STORE_ARGS(PX_ARG_TEXT(job_id), PX_ARG_INT(attempt)),
                         coord_epoch_read_row, &rd));
  for (size_t i = 0; names && i < rd.n; i++) {
    const coord_epoch_row_t *prev =
        i > 0 && rd.rows[i - 1].attempt == rd.rows[i].attempt ? &rd.rows[i - 1] : NULL;
    PX_CHECK(coord_epoch_resolve(db, a, &rd.rows[i], prev));
  }
  *out = rd.rows;
  *n = rd.n;
  return PX_OK;
}

/* The change's fields of a message from its row. */
static void coord_epoch_row_fields(const coord_epoch_row_t *r, Prunex__V1__MembershipEpoch *m) {
  m->n_node_names = r->names ? r->n : 0;
  m->node_names = r->names;
  m->n_nodes_in = r->n_in;
  m->nodes_in = r->in;
  m->n_nodes_out = r->n_out;
  m->nodes_out = r->out;
  m->kind = (char *)coord_epoch_kind_name(r->kind);
}

px_status_t coord_db_epoch_enrich(px_store_t *db, coord_arena_t *a, const char *job_id,
                                  int attempt, Prunex__V1__MembershipEpoch **m, size_t n) {
  coord_epoch_row_t *rows = NULL;
  size_t nr = 0;
  PX_CHECK(coord_db_epoch_rows(db, a, job_id, attempt, 1, &rows, &nr));
  for (size_t i = 0; i < n; i++)
    for (size_t k = 0; k < nr; k++)
      if (rows[k].epoch == m[i]->epoch && rows[k].attempt == m[i]->attempt)
        coord_epoch_row_fields(&rows[k], m[i]);
  return PX_OK;
}

px_status_t coord_db_epoch_messages(coord_arena_t *a, const coord_epoch_row_t *rows, size_t n,
                                    Prunex__V1__MembershipEpoch ***out) {
  *out = coord_alloc(a, (n ? n : 1) * sizeof **out);
  if (!*out) return PX_ERR_NOMEM;
  for (size_t i = 0; i < n; i++) {
    const coord_epoch_row_t *r = &rows[i];
    Prunex__V1__MembershipEpoch *m = coord_alloc(a, sizeof *m);
    if (!m) return PX_ERR_NOMEM;
    *m = (Prunex__V1__MembershipEpoch)PRUNEX__V1__MEMBERSHIP_EPOCH__INIT;
    m->attempt = r->attempt;
    m->epoch = r->epoch;
    m->from_iteration = r->from_iteration;
    m->reason = r->reason;
    m->time_unix_ms = r->time_unix_ms;
    m->n_node_ids = r->n;
    m->node_ids = r->node_ids;
    coord_epoch_row_fields(r, m);
    (*out)[i] = m;
  }
  return PX_OK;
}
