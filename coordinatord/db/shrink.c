/* Preemption's shrink queries (db/shrink.h). */
#include "shrink.h"

#include <string.h>

#include "db_core.h"
#include "membership.h"

#include "prunex/check.h"

static px_status_t coord_db_shrinkable_fill(coord_arena_t *a, px_store_stmt_t *st, void *obj,
                                            void *arg) {
  (void)arg;
  coord_db_shrinkable_t *v = obj;
  size_t len = 0;
  const void *blob = px_store_column_blob(st, 3, &len);
  Prunex__V1__JobSpec *spec = (Prunex__V1__JobSpec *)protobuf_c_message_unpack(
      &prunex__v1__job_spec__descriptor, &a->pb, len, blob);
  if (!spec || !spec->elastic || spec->elastic->min_nodes <= 0) return 1; /* not elastic */
  if (!(v->job_id = coord_strdup(a, px_store_column_text(st, 0)))) return PX_ERR_NOMEM;
  v->priority = (int)px_store_column_int64(st, 1);
  v->attempt = (int)px_store_column_int64(st, 2);
  v->min_nodes = spec->elastic->min_nodes;
  return PX_OK;
}

px_status_t coord_db_shrinkable(coord_t *c, coord_arena_t *a, int below,
                                coord_db_shrinkable_t **out, size_t *n) {
  return coord_db_rows(c, a,
                       "SELECT j.job_id, j.priority, j.attempt, j.spec FROM jobs j"
                       " WHERE j.state = ?1 AND j.priority < ?2"
                       " ORDER BY j.priority, j.scheduled_unix_ms DESC, j.id DESC",
                       PX_STORE_ARGS(PX_ARG_INT(JS_RUNNING), PX_ARG_INT(below)), sizeof **out,
                       out, n, coord_db_shrinkable_fill, NULL);
}

px_status_t coord_db_shrink_nodes(coord_t *c, coord_arena_t *a, const char *job_id, int per_node,
                                  char ***ids, char ***names, int **fits, size_t *n) {
  *n = 0;
  return coord_db_list(c, a,
                       "SELECT jn.node_id, coalesce(nd.name, jn.node_id), (SELECT count(*)"
                       " FROM node_devices d WHERE d.node_id = jn.node_id) >= ?2 FROM job_nodes jn"
                       " LEFT JOIN nodes nd ON nd.node_id = jn.node_id WHERE jn.job_id = ?1"
                       " ORDER BY jn.node_index DESC",
                       PX_STORE_ARGS(PX_ARG_TEXT(job_id), PX_ARG_INT(per_node)),
                       COORD_LIST_COLS(COORD_LIST_TEXT(ids), COORD_LIST_TEXT(names),
                                       COORD_LIST_I32(fits)),
                       n);
}

px_status_t coord_db_shrink_node_exits(coord_t *c, const char *job_id, const char *node_id,
                                       int64_t *ranks, int64_t *exited) {
  *ranks = *exited = 0;
  return px_store_row(c->db,
                      "SELECT count(*), count(e.rank) FROM job_ranks r JOIN job_nodes n"
                      " ON n.job_id = r.job_id AND n.node_index = r.node_index LEFT JOIN"
                      " rank_exits e ON e.job_id = r.job_id AND e.rank = r.rank"
                      " WHERE r.job_id = ?1 AND n.node_id = ?2",
                      PX_STORE_ARGS(PX_ARG_TEXT(job_id), PX_ARG_TEXT(node_id)),
                      PX_STORE_COLS(PX_COL_INT(ranks), PX_COL_INT(exited)), NULL);
}

px_status_t coord_db_shrink_pending_drops(coord_t *c, coord_arena_t *a, const char *job_id,
                                          char ***ids, size_t *n) {
  return coord_db_ids(c, a,
                      "SELECT d.node_id FROM job_epoch_drops d JOIN job_nodes n"
                      " ON n.job_id = d.job_id AND n.node_id = d.node_id WHERE d.job_id = ?1"
                      " ORDER BY d.time_unix_ms, d.rowid",
                      job_id, ids, n);
}

px_status_t coord_db_shrink_drops_revert(coord_t *c, const char *job_id) {
  return coord_db_run_key(c,
                          "DELETE FROM job_epoch_drops WHERE job_id = ?1 AND node_id IN"
                          " (SELECT node_id FROM job_nodes WHERE job_id = ?1)",
                          job_id);
}

static int coord_db_shrink_in(char **ids, size_t n, const char *id) {
  for (size_t i = 0; i < n; i++)
    if (!strcmp(ids[i], id)) return 1;
  return 0;
}

/* Appends to (*ids, *n) the members of epoch `before` that `after` lacks
 * and that are neither in placed nor already listed. */
static px_status_t coord_db_shrink_gone(coord_arena_t *a, const coord_db_epoch_t *before,
                                        const coord_db_epoch_t *after, char **placed, size_t np,
                                        char ***ids, size_t *n, size_t *cap) {
  char **b = NULL, **m = NULL;
  int32_t *bi = NULL, *mi = NULL;
  size_t nb = 0, nm = 0;
  PX_CHECK(coord_db_epoch_members(a, before, &b, &bi, &nb));
  PX_CHECK(coord_db_epoch_members(a, after, &m, &mi, &nm));
  for (size_t i = 0; i < nb; i++) {
    if (coord_db_shrink_in(m, nm, b[i]) || coord_db_shrink_in(placed, np, b[i]) ||
        coord_db_shrink_in(*ids, *n, b[i]))
      continue;
    char **slot = coord_push(a, (void **)ids, n, cap, sizeof *slot);
    if (!slot) return PX_ERR_NOMEM;
    *slot = b[i];
  }
  return PX_OK;
}

px_status_t coord_db_shrink_wanted_back(coord_t *c, coord_arena_t *a, const char *job_id,
                                        int attempt, char ***ids, size_t *n) {
  coord_db_epoch_t *ep = NULL;
  size_t ne = 0, cap = 0, np = 0;
  *ids = NULL;
  *n = 0;
  PX_CHECK(coord_db_epochs_list(c, a, job_id, attempt, &ep, &ne));
  char **placed = NULL;
  int *idx = NULL;
  PX_CHECK(coord_db_job_places(c, a, job_id, &placed, &idx, &np));
  for (size_t k = 1; k < ne; k++)
    if (strstr(ep[k].reason, " preempted by "))
      PX_CHECK(coord_db_shrink_gone(a, &ep[k - 1], &ep[k], placed, np, ids, n, &cap));
  return PX_OK;
}

px_status_t coord_db_shrink_giving(coord_t *c, coord_arena_t *a, const char *job_id, int attempt,
                                   char ***ids, size_t *n) {
  PX_CHECK(coord_db_shrink_pending_drops(c, a, job_id, ids, n));
  coord_db_epoch_t e;
  int found = 0;
  PX_CHECK(coord_db_epoch_at(c, a, job_id, attempt, -1, &e, &found));
  if (!found) return PX_OK;
  char **placed = NULL, **m = NULL;
  int *idx = NULL;
  int32_t *mi = NULL;
  size_t np = 0, nm = 0, cap = *n;
  PX_CHECK(coord_db_job_places(c, a, job_id, &placed, &idx, &np));
  PX_CHECK(coord_db_epoch_members(a, &e, &m, &mi, &nm));
  for (size_t i = 0; i < np; i++) {
    if (coord_db_shrink_in(m, nm, placed[i]) || coord_db_shrink_in(*ids, *n, placed[i])) continue;
    char **slot = coord_push(a, (void **)ids, n, &cap, sizeof *slot);
    if (!slot) return PX_ERR_NOMEM;
    *slot = placed[i];
  }
  return PX_OK;
}
