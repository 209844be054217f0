/* The queries of the node registry (nodes.c), of placements (place.c) and
 * of the assignments built from them (assign.c). */
#include <stdio.h>
#include <string.h>

#include "db_core.h"

#include "prunex/check.h"

px_status_t coord_db_node_get(coord_t *c, const char *key, int by_name, int *found,
                              coord_db_node_t *out) {
  return px_store_row(c->db,
                      by_name ? "SELECT node_id, name, job_id, state FROM nodes WHERE name = ?1"
                              : "SELECT node_id, name, job_id, state FROM nodes WHERE node_id = ?1",
                      PX_STORE_ARGS(PX_ARG_TEXT(key)),
                      PX_STORE_COLS(PX_COL_TEXT(out->node_id, sizeof out->node_id),
                                    PX_COL_TEXT(out->name, sizeof out->name),
                                    PX_COL_TEXT(out->job_id, sizeof out->job_id),
                                    PX_COL_I32(&out->state)),
                      found);
}

px_status_t coord_db_node_name(coord_t *c, const char *node_id, char *name, size_t cap) {
  coord_db_node_t n;
  int found;
  PX_CHECK(coord_db_node_get(c, node_id, 0, &found, &n));
  snprintf(name, cap, "%s", found ? n.name : node_id);
  return PX_OK;
}

px_status_t coord_db_node_set_job(coord_t *c, const char *node_id, const char *job_id) {
  return px_store_run_args(c->db, "UPDATE nodes SET job_id = ?2 WHERE node_id = ?1",
                           PX_STORE_ARGS(PX_ARG_TEXT(node_id), PX_ARG_TEXT(job_id)));
}

/* Binds the fields of a registration as ?2.. ?5 and ?8, ?9 (as both
 * statements number them). */
static px_status_t coord_db_bind_info(px_store_stmt_t *st, const coord_db_node_info_t *info) {
  PX_CHECK(px_store_bind_text(st, 2, info->hostname));
  PX_CHECK(px_store_bind_text(st, 3, info->addresses));
  PX_CHECK(px_store_bind_text(st, 4, info->agent_version));
  PX_CHECK(px_store_bind_int64(st, 5, info->pid));
  PX_CHECK(px_store_bind_text(st, 8, info->output_roots));
  return px_store_bind_text(st, 9, info->data_roots);
}

px_status_t coord_db_node_reregister(coord_t *c, const char *node_id,
                                     const coord_db_node_info_t *info, int state, int64_t now) {
  px_store_stmt_t *st;
  PX_CHECK(px_store_stmt(c->db,
                         "UPDATE nodes SET hostname = ?2, addresses = ?3, agent_version = ?4,"
                         " pid = ?5, last_heartbeat_unix_ms = ?6,"
                         " job_id = CASE WHEN ?7 = ?10 THEN job_id ELSE '' END,"
                         " output_roots = ?8, data_roots = ?9 WHERE node_id = ?1",
                         &st));
  PX_CHECK(px_store_bind_text(st, 1, node_id));
  PX_CHECK(coord_db_bind_info(st, info));
  PX_CHECK(px_store_bind_int64(st, 6, now));
  PX_CHECK(px_store_bind_int64(st, 7, state));
  PX_CHECK(px_store_bind_int64(st, 10, NS_BUSY));
  return px_store_run(st);
}

px_status_t coord_db_node_insert(coord_t *c, const char *name, const coord_db_node_info_t *info,
                                 int state, const char *reason, int64_t now, char *node_id,
                                 size_t cap) {
  px_store_stmt_t *st;
  PX_CHECK(px_store_stmt(c->db,
                         "INSERT INTO nodes (node_id, name, hostname, addresses, agent_version,"
                         " pid, state, registered_unix_ms, last_heartbeat_unix_ms,"
                         " output_roots, data_roots)"
                         " VALUES ('new:' || ?1, ?1, ?2, ?3, ?4, ?5, ?6, ?7, ?7, ?8, ?9)",
                         &st));
  PX_CHECK(px_store_bind_text(st, 1, name));
  PX_CHECK(coord_db_bind_info(st, info));
  PX_CHECK(px_store_bind_int64(st, 6, state));
  PX_CHECK(px_store_bind_int64(st, 7, now));
  PX_CHECK(px_store_run(st));
  int64_t id = px_store_last_insert_id(c->db);
  snprintf(node_id, cap, "node-%04lld", (long long)id);
  PX_CHECK(px_store_run_args(c->db, "UPDATE nodes SET node_id = ?2 WHERE id = ?1",
                             PX_STORE_ARGS(PX_ARG_INT(id), PX_ARG_TEXT(node_id))));
  /* The first event: from UNSPECIFIED, recorded without the state check. */
  return coord_db_event(c, 1, node_id, now, NS_UNSPECIFIED, state, reason);
}

px_status_t coord_db_node_devices_set(coord_t *c, const char *node_id, size_t n,
                                      Prunex__V1__Device *const *devs) {
  PX_CHECK(coord_db_run_key(c, "DELETE FROM node_devices WHERE node_id = ?1", node_id));
  for (size_t i = 0; i < n; i++) {
    PX_CHECK(px_store_run_args(c->db,
                               "INSERT INTO node_devices (node_id, position, device_index,"
                               " kind, name, memory_bytes, healthy)"
                               " VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7)",
                               PX_STORE_ARGS(PX_ARG_TEXT(node_id), PX_ARG_INT((int64_t)i),
                                             PX_ARG_INT(devs[i]->index), PX_ARG_INT(devs[i]->kind),
                                             PX_ARG_TEXT(devs[i]->name),
                                             PX_ARG_INT((int64_t)devs[i]->memory_bytes),
                                             PX_ARG_INT(devs[i]->healthy ? 1 : 0))));
  }
  return PX_OK;
}

px_status_t coord_db_node_devices_same(coord_t *c, const char *node_id, size_t n,
                                       Prunex__V1__Device *const *devs, int *same) {
  px_store_stmt_t *st;
  px_status_t rc;
  size_t k = 0;
  *same = 1;
  PX_CHECK(px_store_stmt(c->db,
                         "SELECT device_index, kind, name, memory_bytes FROM node_devices"
                         " WHERE node_id = ?1 ORDER BY position",
                         &st));
  PX_CHECK(px_store_bind_text(st, 1, node_id));
  while ((rc = px_store_step(st)) == 1) {
    const Prunex__V1__Device *d = k < n ? devs[k] : NULL;
    if (!d || d->index != px_store_column_int64(st, 0) ||
        (int64_t)d->kind != px_store_column_int64(st, 1) ||
        strcmp(d->name, px_store_column_text(st, 2)) != 0 ||
        (int64_t)d->memory_bytes != px_store_column_int64(st, 3))
      *same = 0;
    k++;
  }
  if (rc < 0) return rc;
  if (k != n) *same = 0;
  return PX_OK;
}

px_status_t coord_db_node_devices_health(coord_t *c, const char *node_id, size_t n,
                                         Prunex__V1__Device *const *devs) {
  for (size_t i = 0; i < n; i++) {
    PX_CHECK(px_store_run_args(c->db,
                               "UPDATE node_devices SET healthy = ?3 WHERE node_id = ?1 AND"
                               " device_index = ?2",
                               PX_STORE_ARGS(PX_ARG_TEXT(node_id), PX_ARG_INT(devs[i]->index),
                                             PX_ARG_INT(devs[i]->healthy ? 1 : 0))));
  }
  return PX_OK;
}

px_status_t coord_db_node_devices_first(coord_t *c, const char *node_id, int P, int *dev,
                                        int *healthy, int *n) {
  px_store_stmt_t *st;
  px_status_t rc;
  *n = 0;
  PX_CHECK(px_store_stmt(c->db,
                         "SELECT device_index, healthy FROM node_devices WHERE node_id = ?1"
                         " ORDER BY position LIMIT ?2",
                         &st));
  PX_CHECK(px_store_bind_args(st, PX_STORE_ARGS(PX_ARG_TEXT(node_id), PX_ARG_INT(P))));
  while ((rc = px_store_step(st)) == 1 && *n < P) {
    dev[*n] = (int)px_store_column_int64(st, 0);
    healthy[*n] = px_store_column_int64(st, 1) != 0;
    (*n)++;
  }
  if (rc < 0) return rc;
  px_store_reset(st);
  return PX_OK;
}

px_status_t coord_db_node_heartbeat(coord_t *c, const char *node_id, int64_t now) {
  return px_store_run_args(c->db, "UPDATE nodes SET last_heartbeat_unix_ms = ?2 WHERE node_id = ?1",
                           PX_STORE_ARGS(PX_ARG_TEXT(node_id), PX_ARG_INT(now)));
}

px_status_t coord_db_nodes_silent(coord_t *c, coord_arena_t *a, int except, int64_t before,
                                  char ***ids, int **states, int64_t **last, size_t *n) {
  return coord_db_list(c, a,
                       "SELECT node_id, state, last_heartbeat_unix_ms FROM nodes"
                       " WHERE state != ?2 AND last_heartbeat_unix_ms < ?1",
                       PX_STORE_ARGS(PX_ARG_INT(before), PX_ARG_INT(except)),
                       COORD_LIST_COLS(COORD_LIST_TEXT(ids), COORD_LIST_I32(states),
                                       COORD_LIST_INT(last)),
                       n);
}

px_status_t coord_db_nodes_fitting(coord_t *c, coord_arena_t *a, int s1, int s2, int P,
                                   const char *prefer, char ***ids, char ***names, int **states,
                                   size_t *n) {
  return coord_db_list(c, a,
                       "SELECT n.node_id, n.name, n.state FROM nodes n WHERE n.state IN (?3, ?4)"
                       " AND (SELECT count(*) FROM node_devices d WHERE d.node_id = n.node_id)"
                       " >= ?1 ORDER BY CASE"
                       " WHEN instr(?2, char(10) || n.node_id || char(10)) THEN 0"
                       " WHEN instr(?2, char(10) || '-' || n.node_id || char(10)) THEN 2"
                       " ELSE 1 END, n.id",
                       PX_STORE_ARGS(PX_ARG_INT(P), PX_ARG_TEXT(prefer), PX_ARG_INT(s1),
                                     PX_ARG_INT(s2)),
                       COORD_LIST_COLS(COORD_LIST_TEXT(ids), COORD_LIST_TEXT(names),
                                       COORD_LIST_I32(states)),
                       n);
}

px_status_t coord_db_nodes_roots(coord_t *c, coord_arena_t *a, int except, int data,
                                 char ***names, char ***roots, size_t *n) {
  return coord_db_list(c, a,
                       data ? "SELECT name, data_roots FROM nodes WHERE state != ?1"
                              " AND data_roots != '' ORDER BY id"
                            : "SELECT name, output_roots FROM nodes WHERE state != ?1"
                              " ORDER BY id",
                       PX_STORE_ARGS(PX_ARG_INT(except)),
                       COORD_LIST_COLS(COORD_LIST_TEXT(names), COORD_LIST_TEXT(roots)), n);
}

px_status_t coord_db_nodes_list(coord_t *c, coord_arena_t *a, int state,
                                Prunex__V1__Node ***out, size_t *n) {
  px_store_stmt_t *st;
  px_status_t rc;
  size_t cap = 0;
  PX_CHECK(px_store_stmt(c->db,
                         "SELECT " COORD_NODE_COLUMNS " FROM nodes"
                         " WHERE ?1 = 0 OR state = ?1 ORDER BY id",
                         &st));
  PX_CHECK(px_store_bind_int64(st, 1, state));
  while ((rc = px_store_step(st)) == 1) {
    Prunex__V1__Node **slot = coord_push(a, (void **)out, n, &cap, sizeof **out);
    rc = slot ? coord_node_load_row(c, a, st, slot) : PX_ERR_NOMEM;
    if (rc != PX_OK) break;
  }
  if (rc < 0) px_store_reset(st);
  return rc < 0 ? rc : PX_OK;
}

px_status_t coord_db_node_jobs(coord_t *c, coord_arena_t *a, const char *node_id, int s1, int s2,
                               char ***ids, size_t *n) {
  return coord_db_list(c, a,
                       "SELECT j.job_id FROM job_nodes n JOIN jobs j ON j.job_id = n.job_id"
                       " WHERE n.node_id = ?1 AND j.state IN (?2, ?3) ORDER BY j.id",
                       PX_STORE_ARGS(PX_ARG_TEXT(node_id), PX_ARG_INT(s1), PX_ARG_INT(s2)),
                       COORD_LIST_COLS(COORD_LIST_TEXT(ids)), n);
}

px_status_t coord_db_job_state_on_node(coord_t *c, const char *job_id, const char *node_id,
                                       int *found, int *state) {
  return px_store_row(c->db,
                      "SELECT j.state FROM jobs j JOIN job_nodes n ON n.job_id = j.job_id"
                      " WHERE j.job_id = ?1 AND n.node_id = ?2",
                      PX_STORE_ARGS(PX_ARG_TEXT(job_id), PX_ARG_TEXT(node_id)),
                      PX_STORE_COLS(PX_COL_I32(state)), found);
}

px_status_t coord_db_job_node_started(coord_t *c, const char *job_id, const char *node_id,
                                      int64_t now) {
  return px_store_run_args(c->db,
                           "UPDATE job_nodes SET started_unix_ms = ?3 WHERE job_id = ?1 AND"
                           " node_id = ?2 AND started_unix_ms = 0",
                           PX_STORE_ARGS(PX_ARG_TEXT(job_id), PX_ARG_TEXT(node_id),
                                         PX_ARG_INT(now)));
}

/* ---- placements and assignments ---------------------------------------------- */

px_status_t coord_db_rank_insert(coord_t *c, const char *job_id, const coord_db_rank_t *r) {
  return px_store_run_args(c->db,
                           "INSERT INTO job_ranks (job_id, rank, node_index, local_rank,"
                           " device_index, is_leader, secret_salt, secret_hash)"
                           " VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8)",
                           PX_STORE_ARGS(PX_ARG_TEXT(job_id), PX_ARG_INT(r->rank),
                                         PX_ARG_INT(r->node_index), PX_ARG_INT(r->local_rank),
                                         PX_ARG_INT(r->device_index), PX_ARG_INT(r->is_leader),
                                         PX_ARG_TEXT(r->salt), PX_ARG_TEXT(r->hash)));
}

px_status_t coord_db_job_node_insert(coord_t *c, const char *job_id, int node_index,
                                     const char *node_id, int leader_rank) {
  return px_store_run_args(c->db,
                           "INSERT INTO job_nodes (job_id, node_index, node_id, leader_rank)"
                           " VALUES (?1, ?2, ?3, ?4)",
                           PX_STORE_ARGS(PX_ARG_TEXT(job_id), PX_ARG_INT(node_index),
                                         PX_ARG_TEXT(node_id), PX_ARG_INT(leader_rank)));
}

/* The node's ranks of the job; a rank's secret is the one stored in clear
 * (a job placed by an older pxcoordd) or "", its salt in salts[i]. */
static px_status_t coord_db_assignment_ranks(coord_t *c, coord_arena_t *a,
                                             Prunex__V1__Assignment *as, char ***salts) {
  px_store_stmt_t *st;
  px_status_t rc;
  size_t cap = 0, ns = 0, scap = 0;
  PX_CHECK(px_store_stmt(c->db,
                         "SELECT rank, local_rank, device_index, is_leader, secret, secret_salt"
                         " FROM job_ranks"
                         " WHERE job_id = ?1 AND node_index = ?2 ORDER BY rank",
                         &st));
  PX_CHECK(px_store_bind_args(st, PX_STORE_ARGS(PX_ARG_TEXT(as->job_id),
                                                PX_ARG_INT(as->node_index))));
  while ((rc = px_store_step(st)) == 1) {
    Prunex__V1__RankAssignment **slot =
        coord_push(a, (void **)&as->ranks, &as->n_ranks, &cap, sizeof *as->ranks);
    char **salt = coord_push(a, (void **)salts, &ns, &scap, sizeof(char *));
    Prunex__V1__RankAssignment *r = coord_alloc(a, sizeof *r);
    if (!slot || !salt || !r) break;
    *r = (Prunex__V1__RankAssignment)PRUNEX__V1__RANK_ASSIGNMENT__INIT;
    r->rank = (int32_t)px_store_column_int64(st, 0);
    r->local_rank = (int32_t)px_store_column_int64(st, 1);
    r->device_index = (int32_t)px_store_column_int64(st, 2);
    r->is_leader = px_store_column_int64(st, 3) != 0;
    r->secret = coord_strdup(a, px_store_column_text(st, 4));
    *salt = coord_strdup(a, px_store_column_text(st, 5));
    if (!r->secret || !*salt) break;
    *slot = r;
  }
  if (rc == 1) {
    px_store_reset(st);
    return PX_ERR_NOMEM;
  }
  return rc < 0 ? rc : PX_OK;
}

px_status_t coord_db_assignment_fill(coord_t *c, coord_arena_t *a, const char *node_id,
                                     Prunex__V1__Assignment *as, int *found, char ***salts) {
  int per_node = 0;
  PX_CHECK(px_store_row(c->db,
                        /* an elastic job grown past num_nodes: its highest index + 1 */
                        "SELECT max(j.num_nodes, coalesce((SELECT max(m.node_index) + 1"
                        " FROM job_nodes m WHERE m.job_id = j.job_id), 0)), j.workers_per_node,"
                        " n.node_index,"
                        " j.attempt FROM jobs j"
                        " JOIN job_nodes n ON n.job_id = j.job_id"
                        " WHERE j.job_id = ?1 AND n.node_id = ?2",
                        PX_STORE_ARGS(PX_ARG_TEXT(as->job_id), PX_ARG_TEXT(node_id)),
                        PX_STORE_COLS(PX_COL_I32(&as->num_nodes), PX_COL_I32(&per_node),
                                      PX_COL_I32(&as->node_index), PX_COL_I32(&as->attempt)),
                        found));
  if (!*found) return PX_OK;
  as->world_size = as->num_nodes * per_node;
  PX_CHECK(coord_db_assignment_ranks(c, a, as, salts));
  return coord_db_list(c, a,
                       "SELECT leader_rank FROM job_nodes WHERE job_id = ?1 ORDER BY node_index",
                       PX_STORE_ARGS(PX_ARG_TEXT(as->job_id)),
                       COORD_LIST_COLS(COORD_LIST_I32(&as->leader_ranks)), &as->n_leader_ranks);
}
