/* Membership's queries (db/membership.h). */
#include "membership.h"

#include <stdlib.h>
#include <string.h>

#include "db_core.h"
#include "epoch_rows.h"

#include "prunex/check.h"

px_status_t coord_db_epoch_put(coord_t *c, const char *job_id, const coord_db_epoch_t *e) {
  return px_store_run_args(c->db,
                           "INSERT OR REPLACE INTO job_epochs (job_id, attempt, epoch,"
                           " from_iteration, node_ids, node_indexes, reason, time_unix_ms)"
                           " VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8)",
                           PX_STORE_ARGS(PX_ARG_TEXT(job_id), PX_ARG_INT(e->attempt),
                                         PX_ARG_INT(e->epoch), PX_ARG_INT(e->from_iteration),
                                         PX_ARG_TEXT(e->node_ids), PX_ARG_TEXT(e->node_indexes),
                                         PX_ARG_TEXT(e->reason), PX_ARG_INT(e->time_unix_ms)));
}

static px_status_t coord_db_epoch_fill(coord_arena_t *a, px_store_stmt_t *st, void *obj,
                                       void *arg) {
  (void)arg;
  coord_db_epoch_t *e = obj;
  int64_t v[4];
  px_store_read_cols(st,
                     PX_STORE_COLS(PX_COL_INT(&v[0]), PX_COL_INT(&v[1]), PX_COL_INT(&v[2]),
                                   PX_COL_SKIP, PX_COL_SKIP, PX_COL_SKIP, PX_COL_INT(&v[3])));
  e->attempt = (int)v[0];
  e->epoch = (int)v[1];
  e->from_iteration = (int)v[2];
  e->time_unix_ms = v[3];
  e->node_ids = coord_strdup(a, px_store_column_text(st, 3));
  e->node_indexes = coord_strdup(a, px_store_column_text(st, 4));
  e->reason = coord_strdup(a, px_store_column_text(st, 5));
  return e->node_ids && e->node_indexes && e->reason ? PX_OK : PX_ERR_NOMEM;
}

#define COORD_EPOCH_COLUMNS \
  "attempt, epoch, from_iteration, node_ids, node_indexes, reason, time_unix_ms"

px_status_t coord_db_epoch_at(coord_t *c, coord_arena_t *a, const char *job_id, int attempt,
                              int iteration, coord_db_epoch_t *out, int *found) {
  coord_db_epoch_t *rows = NULL;
  size_t n = 0;
  PX_CHECK(coord_db_rows(c, a,
                         "SELECT " COORD_EPOCH_COLUMNS " FROM job_epochs WHERE job_id = ?1"
                         " AND attempt = ?2 AND (?3 < 0 OR from_iteration <= ?3)"
                         " ORDER BY epoch DESC LIMIT 1",
                         PX_STORE_ARGS(PX_ARG_TEXT(job_id), PX_ARG_INT(attempt),
                                       PX_ARG_INT(iteration)),
                         sizeof *rows, &rows, &n, coord_db_epoch_fill, NULL));
  *found = n > 0;
  if (n > 0) *out = rows[0];
  return PX_OK;
}

px_status_t coord_db_epochs_list(coord_t *c, coord_arena_t *a, const char *job_id, int attempt,
                                 coord_db_epoch_t **out, size_t *n) {
  return coord_db_rows(c, a,
                       "SELECT " COORD_EPOCH_COLUMNS " FROM job_epochs WHERE job_id = ?1"
                       " AND attempt = ?2 ORDER BY epoch",
                       PX_STORE_ARGS(PX_ARG_TEXT(job_id), PX_ARG_INT(attempt)), sizeof **out,
                       out, n, coord_db_epoch_fill, NULL);
}

px_status_t coord_db_epoch_drop_put(coord_t *c, const char *job_id, int attempt,
                                    const char *node_id, const char *reason, int64_t now) {
  return px_store_run_args(c->db,
                           "INSERT OR IGNORE INTO job_epoch_drops (job_id, attempt, node_id,"
                           " reason, time_unix_ms) VALUES (?1, ?2, ?3, ?4, ?5)",
                           PX_STORE_ARGS(PX_ARG_TEXT(job_id), PX_ARG_INT(attempt),
                                         PX_ARG_TEXT(node_id), PX_ARG_TEXT(reason),
                                         PX_ARG_INT(now)));
}

px_status_t coord_db_epoch_drops(coord_t *c, coord_arena_t *a, const char *job_id, int attempt,
                                 char ***node_ids, char ***reasons, size_t *n) {
  *n = 0;
  return coord_db_list(c, a,
                       "SELECT node_id, reason FROM job_epoch_drops WHERE job_id = ?1"
                       " AND attempt = ?2 ORDER BY time_unix_ms, rowid",
                       PX_STORE_ARGS(PX_ARG_TEXT(job_id), PX_ARG_INT(attempt)),
                       COORD_LIST_COLS(COORD_LIST_TEXT(node_ids), COORD_LIST_TEXT(reasons)), n);
}

px_status_t coord_db_epoch_drops_clear(coord_t *c, const char *job_id) {
  return coord_db_run_key(c, "DELETE FROM job_epoch_drops WHERE job_id = ?1", job_id);
}

px_status_t coord_db_job_places(coord_t *c, coord_arena_t *a, const char *job_id, char ***ids,
                                int **indexes, size_t *n) {
  *n = 0;
  return coord_db_list(c, a,
                       "SELECT node_id, node_index FROM job_nodes WHERE job_id = ?1"
                       " ORDER BY node_index",
                       PX_STORE_ARGS(PX_ARG_TEXT(job_id)),
                       COORD_LIST_COLS(COORD_LIST_TEXT(ids), COORD_LIST_I32(indexes)), n);
}

px_status_t coord_db_job_place_remove(coord_t *c, const char *job_id, const char *node_id) {
  PX_CHECK(px_store_run_args(c->db, "DELETE FROM job_nodes WHERE job_id = ?1 AND node_id = ?2",
                             PX_STORE_ARGS(PX_ARG_TEXT(job_id), PX_ARG_TEXT(node_id))));
  return px_store_run_args(c->db, "UPDATE nodes SET job_id = '' WHERE node_id = ?2"
                                  " AND job_id = ?1",
                           PX_STORE_ARGS(PX_ARG_TEXT(job_id), PX_ARG_TEXT(node_id)));
}

px_status_t coord_db_rank_place(coord_t *c, const char *job_id, int rank, int *found,
                                int *node_index, char *node_id, size_t cap) {
  node_id[0] = '\0';
  return px_store_row(c->db,
                      "SELECT r.node_index, coalesce(n.node_id, '') FROM job_ranks r"
                      " LEFT JOIN job_nodes n ON n.job_id = r.job_id"
                      " AND n.node_index = r.node_index WHERE r.job_id = ?1 AND r.rank = ?2",
                      PX_STORE_ARGS(PX_ARG_TEXT(job_id), PX_ARG_INT(rank)),
                      PX_STORE_COLS(PX_COL_I32(node_index), PX_COL_TEXT(node_id, cap)), found);
}

px_status_t coord_db_rank_exits_ok_placed(coord_t *c, const char *job_id, int64_t *ok,
                                          int64_t *placed) {
  int found = 0;
  *ok = *placed = 0;
  return px_store_row(c->db,
                      "SELECT count(*), coalesce(sum(e.exit_code = 0 AND e.signal = 0), 0)"
                      " FROM job_ranks r JOIN job_nodes n ON n.job_id = r.job_id"
                      " AND n.node_index = r.node_index LEFT JOIN rank_exits e"
                      " ON e.job_id = r.job_id AND e.rank = r.rank WHERE r.job_id = ?1",
                      PX_STORE_ARGS(PX_ARG_TEXT(job_id)),
                      PX_STORE_COLS(PX_COL_INT(placed), PX_COL_INT(ok)), &found);
}

static px_status_t coord_db_blacklist_fill(coord_arena_t *a, px_store_stmt_t *st, void *obj,
                                           void *arg) {
  (void)arg;
  coord_db_blacklist_t *b = obj;
  int64_t v[3];
  px_store_read_cols(st, PX_STORE_COLS(PX_COL_SKIP, PX_COL_SKIP, PX_COL_INT(&v[0]),
                                       PX_COL_INT(&v[1]), PX_COL_INT(&v[2])));
  b->failures = (int)v[0];
  b->last_unix_ms = v[1];
  b->until_unix_ms = v[2];
  b->node_id = coord_strdup(a, px_store_column_text(st, 0));
  b->name = coord_strdup(a, px_store_column_text(st, 1));
  b->reason = coord_strdup(a, px_store_column_text(st, 5));
  b->job_id = coord_strdup(a, px_store_column_text(st, 6));
  return b->node_id && b->name && b->reason && b->job_id ? PX_OK : PX_ERR_NOMEM;
}

#define COORD_BLACKLIST_SELECT                                                          \
  "SELECT b.node_id, coalesce(n.name, b.node_id), b.failures, b.last_unix_ms,"          \
  " b.until_unix_ms, b.reason, b.job_id FROM job_blacklist b LEFT JOIN nodes n"         \
  " ON n.node_id = b.node_id"

px_status_t coord_db_blacklist_get(coord_t *c, coord_arena_t *a, const char *job_id,
                                   const char *node_id, coord_db_blacklist_t *out, int *found) {
  coord_db_blacklist_t *rows = NULL;
  size_t n = 0;
  PX_CHECK(coord_db_rows(c, a, COORD_BLACKLIST_SELECT " WHERE b.job_id = ?1 AND b.node_id = ?2",
                         PX_STORE_ARGS(PX_ARG_TEXT(job_id), PX_ARG_TEXT(node_id)), sizeof *rows,
                         &rows, &n, coord_db_blacklist_fill, NULL));
  *found = n > 0;
  if (n > 0) *out = rows[0];
  return PX_OK;
}

px_status_t coord_db_blacklist_put(coord_t *c, const char *job_id, const coord_db_blacklist_t *b) {
  return px_store_run_args(c->db,
                           "INSERT OR REPLACE INTO job_blacklist (job_id, node_id, failures,"
                           " last_unix_ms, until_unix_ms, reason) VALUES (?1, ?2, ?3, ?4, ?5, ?6)",
                           PX_STORE_ARGS(PX_ARG_TEXT(job_id), PX_ARG_TEXT(b->node_id),
                                         PX_ARG_INT(b->failures), PX_ARG_INT(b->last_unix_ms),
                                         PX_ARG_INT(b->until_unix_ms), PX_ARG_TEXT(b->reason)));
}

px_status_t coord_db_blacklist_active(coord_t *c, coord_arena_t *a, const char *job_id,
                                      int64_t now, coord_db_blacklist_t **out, size_t *n) {
  return coord_db_rows(c, a, COORD_BLACKLIST_SELECT " WHERE b.job_id = ?1 AND b.until_unix_ms > ?2"
                       " ORDER BY b.node_id",
                       PX_STORE_ARGS(PX_ARG_TEXT(job_id), PX_ARG_INT(now)), sizeof **out, out, n,
                       coord_db_blacklist_fill, NULL);
}

px_status_t coord_db_blacklist_all(coord_t *c, coord_arena_t *a, int64_t now,
                                   coord_db_blacklist_t **out, size_t *n) {
  return coord_db_rows(c, a, COORD_BLACKLIST_SELECT " WHERE b.until_unix_ms > ?1"
                       " ORDER BY b.job_id, b.node_id",
                       PX_STORE_ARGS(PX_ARG_INT(now)), sizeof **out, out, n,
                       coord_db_blacklist_fill, NULL);
}

px_status_t coord_db_blacklist_next_end(coord_t *c, int64_t now, int64_t *until) {
  *until = 0;
  int found = 0;
  return px_store_row(c->db,
                      "SELECT coalesce(min(until_unix_ms), 0) FROM job_blacklist"
                      " WHERE until_unix_ms > ?1",
                      PX_STORE_ARGS(PX_ARG_INT(now)), PX_STORE_COLS(PX_COL_INT(until)), &found);
}

px_status_t coord_db_epoch_members(coord_arena_t *a, const coord_db_epoch_t *e, char ***ids,
                                   int32_t **indexes, size_t *n) {
  *ids = NULL;
  *indexes = NULL;
  *n = 0;
  size_t cap = 0, ni = 0, icap = 0;
  char *text = coord_strdup(a, e->node_ids);
  if (!text) return PX_ERR_NOMEM;
  for (char *p = text, *nl; *p; p = nl + 1) {
    nl = strchr(p, '\n');
    if (nl) *nl = '\0';
    char **slot = coord_push(a, (void **)ids, n, &cap, sizeof(char *));
    if (!slot) return PX_ERR_NOMEM;
    *slot = p;
    if (!nl) break;
  }
  for (const char *p = e->node_indexes; *p;) {
    char *end;
    long v = strtol(p, &end, 10);
    if (end == p) break;
    int32_t *slot = coord_push(a, (void **)indexes, &ni, &icap, sizeof(int32_t));
    if (!slot) return PX_ERR_NOMEM;
    *slot = (int32_t)v;
    p = *end == ',' ? end + 1 : end;
  }
  if (ni != *n)
    return px_set_error(PX_ERR_FORMAT, "membership epoch %d: %zu node ids, %zu indexes", e->epoch,
                        *n, ni);
  return PX_OK;
}

static px_status_t coord_db_epoch_message(coord_arena_t *a, const coord_db_epoch_t *e,
                                          Prunex__V1__MembershipEpoch **out) {
  Prunex__V1__MembershipEpoch *m = coord_alloc(a, sizeof *m);
  if (!m) return PX_ERR_NOMEM;
  *m = (Prunex__V1__MembershipEpoch)PRUNEX__V1__MEMBERSHIP_EPOCH__INIT;
  m->attempt = e->attempt;
  m->epoch = e->epoch;
  m->from_iteration = e->from_iteration;
  m->reason = e->reason;
  m->time_unix_ms = e->time_unix_ms;
  size_t n = 0;
  PX_CHECK(coord_db_epoch_members(a, e, &m->node_ids, &m->node_indexes, &n));
  m->n_node_ids = m->n_node_indexes = n;
  *out = m;
  return PX_OK;
}

px_status_t coord_db_job_membership_fill(coord_t *c, coord_arena_t *a, Prunex__V1__Job *j,
                                         int64_t now) {
  coord_db_epoch_t *ep = NULL;
  size_t n = 0;
  PX_CHECK(coord_db_epochs_list(c, a, j->job_id, j->attempt, &ep, &n));
  j->memberships = coord_alloc(a, (n ? n : 1) * sizeof *j->memberships);
  if (!j->memberships) return PX_ERR_NOMEM;
  for (size_t i = 0; i < n; i++) PX_CHECK(coord_db_epoch_message(a, &ep[i], &j->memberships[i]));
  j->n_memberships = n;
  PX_CHECK(coord_db_epoch_enrich(c->db, a, j->job_id, j->attempt, j->memberships, n));
  coord_db_blacklist_t *bl = NULL;
  size_t nb = 0;
  PX_CHECK(coord_db_blacklist_active(c, a, j->job_id, now, &bl, &nb));
  j->blacklist = coord_alloc(a, (nb ? nb : 1) * sizeof *j->blacklist);
  if (!j->blacklist) return PX_ERR_NOMEM;
  for (size_t i = 0; i < nb; i++) {
    Prunex__V1__BlacklistedNode *b = coord_alloc(a, sizeof *b);
    if (!b) return PX_ERR_NOMEM;
    *b = (Prunex__V1__BlacklistedNode)PRUNEX__V1__BLACKLISTED_NODE__INIT;
    b->node_id = bl[i].node_id;
    b->name = bl[i].name;
    b->failures = bl[i].failures;
    b->until_unix_ms = bl[i].until_unix_ms;
    b->reason = bl[i].reason;
    j->blacklist[i] = b;
  }
  j->n_blacklist = nb;
  return PX_OK;
}

static int coord_db_epoch_listed(char **ids, size_t n, const char *id) {
  for (size_t i = 0; i < n; i++)
    if (!strcmp(ids[i], id)) return 1;
  return 0;
}

int coord_db_epoch_has(const coord_db_epoch_t *e, const char *id) {
  size_t n = strlen(id);
  for (const char *p = e->node_ids; p && *p;) {
    const char *nl = strchr(p, '\n');
    size_t len = nl ? (size_t)(nl - p) : strlen(p);
    if (len == n && !strncmp(p, id, n)) return 1;
    if (!nl) break;
    p = nl + 1;
  }
  return 0;
}

px_status_t coord_db_epoch_without(coord_arena_t *a, coord_db_epoch_t *e, char **drops, size_t nd,
                                   size_t *count) {
  char **ids = NULL;
  int32_t *idx = NULL;
  size_t n = 0;
  PX_CHECK(coord_db_epoch_members(a, e, &ids, &idx, &n));
  size_t cap = 1;
  for (size_t i = 0; i < n; i++) cap += strlen(ids[i]) + 1;
  char *text = coord_alloc(a, cap), *nums = coord_alloc(a, 12 * n + 1);
  if (!text || !nums) return PX_ERR_NOMEM;
  size_t u = 0, v = 0, k = 0;
  for (size_t i = 0; i < n; i++) {
    if (coord_db_epoch_listed(drops, nd, ids[i])) continue;
    u += (size_t)snprintf(text + u, cap - u, "%s%s", k ? "\n" : "", ids[i]);
    v += (size_t)snprintf(nums + v, 12 * n + 1 - v, "%s%d", k ? "," : "", idx[i]);
    k++;
  }
  e->node_ids = text;
  e->node_indexes = nums;
  *count = k;
  return PX_OK;
}

/* ---- joining ------------------------------------------------------------------ */

px_status_t coord_db_jobs_short(coord_t *c, coord_arena_t *a, int all, char ***ids, int **nodes,
                                int **per_node, size_t *n) {
  return coord_db_list(c, a,
                       "SELECT j.job_id, j.num_nodes, j.workers_per_node FROM jobs j"
                       " WHERE j.state = ?1 AND (?2 OR j.num_nodes >"
                       " (SELECT count(*) FROM job_nodes n WHERE n.job_id = j.job_id))"
                       " ORDER BY j.id",
                       PX_STORE_ARGS(PX_ARG_INT(JS_RUNNING), PX_ARG_INT(all)),
                       COORD_LIST_COLS(COORD_LIST_TEXT(ids), COORD_LIST_I32(nodes),
                                       COORD_LIST_I32(per_node)),
                       n);
}

px_status_t coord_db_place_clear_index(coord_t *c, const char *job_id, int idx, int per_node) {
  PX_CHECK(px_store_run_args(c->db, "DELETE FROM job_ranks WHERE job_id = ?1 AND node_index = ?2",
                             PX_STORE_ARGS(PX_ARG_TEXT(job_id), PX_ARG_INT(idx))));
  return px_store_run_args(c->db,
                           "DELETE FROM rank_exits WHERE job_id = ?1 AND rank >= ?2 AND rank < ?3",
                           PX_STORE_ARGS(PX_ARG_TEXT(job_id), PX_ARG_INT(idx * per_node),
                                         PX_ARG_INT((idx + 1) * per_node)));
}

px_status_t coord_db_node_back_since(coord_t *c, const char *node_id, int64_t since_ms,
                                     int *back) {
  int64_t n = 0;
  int found = 0;
  PX_CHECK(px_store_row(c->db,
                        "SELECT count(*) FROM node_events WHERE node_id = ?1 AND from_state = ?2"
                        " AND to_state = ?3 AND time_unix_ms >= ?4",
                        PX_STORE_ARGS(PX_ARG_TEXT(node_id), PX_ARG_INT(NS_LOST),
                                      PX_ARG_INT(NS_READY), PX_ARG_INT(since_ms)),
                        PX_STORE_COLS(PX_COL_INT(&n)), &found));
  *back = n > 0;
  return PX_OK;
}
