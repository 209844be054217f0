/* Node registry: RegisterNode, Heartbeat, ListNodes, the heartbeat sweep
 * that marks silent nodes LOST, and the WatchAssignments streams through
 * which nodes learn what to start and what to stop. */
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "coord.h"
#include "prunex/check.h"

/* ---- assignments ------------------------------------------------------------ */

/* Builds the assignment of job_id for node_id in the arena; *out NULL when
 * the node holds no place in the job. */
static px_status_t coord_assignment_build(coord_t *c, coord_arena_t *a, const char *job_id,
                                          const char *node_id, int action,
                                          Prunex__V1__Assignment **out) {
  *out = NULL;
  int found, state;
  Prunex__V1__JobSpec *spec;
  PX_CHECK(coord_job_lookup(c, a, job_id, &found, &state, &spec));
  if (!found) return PX_OK;
  Prunex__V1__Assignment *as = coord_alloc(a, sizeof *as);
  if (!as) return PX_ERR_NOMEM;
  *as = (Prunex__V1__Assignment)PRUNEX__V1__ASSIGNMENT__INIT;
  as->job_id = coord_strdup(a, job_id);
  as->coordinator = c->advertise;
  as->action = (Prunex__V1__AssignmentAction)action;
  as->spec = spec;
  if (!as->job_id) return PX_ERR_NOMEM;

  px_store_stmt_t *st;
  px_status_t rc;
  PX_CHECK(px_store_stmt(c->db,
                         "SELECT j.num_nodes, j.workers_per_node, n.node_index, j.attempt"
                         " FROM jobs j"
                         " JOIN job_nodes n ON n.job_id = j.job_id"
                         " WHERE j.job_id = ?1 AND n.node_id = ?2",
                         &st));
  PX_CHECK(px_store_bind_text(st, 1, job_id));
  PX_CHECK(px_store_bind_text(st, 2, node_id));
  if ((rc = px_store_step(st)) <= 0) return rc;
  as->num_nodes = (int32_t)px_store_column_int64(st, 0);
  as->world_size = as->num_nodes * (int32_t)px_store_column_int64(st, 1);
  as->node_index = (int32_t)px_store_column_int64(st, 2);
  as->attempt = (int32_t)px_store_column_int64(st, 3);
  px_store_reset(st);

  size_t cap = 0;
  PX_CHECK(px_store_stmt(c->db,
                         "SELECT rank, local_rank, device_index, is_leader, secret, secret_salt"
                         " FROM job_ranks"
                         " WHERE job_id = ?1 AND node_index = ?2 ORDER BY rank",
                         &st));
  PX_CHECK(px_store_bind_text(st, 1, job_id));
  PX_CHECK(px_store_bind_int64(st, 2, as->node_index));
  while ((rc = px_store_step(st)) == 1) {
    Prunex__V1__RankAssignment **slot =
        coord_push(a, (void **)&as->ranks, &as->n_ranks, &cap, sizeof *as->ranks);
    Prunex__V1__RankAssignment *r = coord_alloc(a, sizeof *r);
    if (!slot || !r) return PX_ERR_NOMEM;
    *r = (Prunex__V1__RankAssignment)PRUNEX__V1__RANK_ASSIGNMENT__INIT;
    r->rank = (int32_t)px_store_column_int64(st, 0);
    r->local_rank = (int32_t)px_store_column_int64(st, 1);
    r->device_index = (int32_t)px_store_column_int64(st, 2);
    r->is_leader = px_store_column_int64(st, 3) != 0;
    /* derived again from the salt (a job placed by an older pxcoordd may
     * still have its secret in clear) */
    char secret[COORD_RANK_SECRET_LEN + 8] = "";
    const char *clear = px_store_column_text(st, 4), *salt = px_store_column_text(st, 5);
    if (clear[0]) snprintf(secret, sizeof secret, "%s", clear);
    else if (salt[0]) PX_CHECK(coord_rank_secret_derive(c, salt, secret, sizeof secret));
    r->secret = coord_strdup(a, secret);
    memset(secret, 0, sizeof secret);
    if (!r->secret) return PX_ERR_NOMEM;
    *slot = r;
  }
  if (rc < 0) return rc;
  cap = 0;
  PX_CHECK(px_store_stmt(c->db,
                         "SELECT leader_rank FROM job_nodes WHERE job_id = ?1 ORDER BY node_index",
                         &st));
  PX_CHECK(px_store_bind_text(st, 1, job_id));
  while ((rc = px_store_step(st)) == 1) {
    int32_t *slot = coord_push(a, (void **)&as->leader_ranks, &as->n_leader_ranks, &cap,
                               sizeof(int32_t));
    if (!slot) return PX_ERR_NOMEM;
    *slot = (int32_t)px_store_column_int64(st, 0);
  }
  if (rc < 0) return rc;
  *out = as;
  return PX_OK;
}

void coord_send_to_node(coord_t *c, const char *node_id, const Prunex__V1__Assignment *as) {
  int sent = 0;
  for (coord_watch_t *w = c->node_watches; w; w = w->next) {
    if (strcmp(w->id, node_id) != 0) continue;
    if (px_rpc_srv_send(w->call, &as->base) == PX_OK) sent++;
  }
  px_log(PX_LOG_INFO, "job %s: %s assignment (attempt %d) for node %s (%d stream%s)",
         as->job_id,
         as->action == PRUNEX__V1__ASSIGNMENT_ACTION__ASSIGNMENT_ACTION_START ? "START" : "CANCEL",
         as->attempt, node_id, sent, sent == 1 ? "" : "s");
}

void coord_push_assignments(coord_t *c, const char *job_id, int action) {
  coord_arena_t a;
  coord_arena_init(&a);
  char **ids = NULL;
  size_t n = 0, cap = 0;
  px_store_stmt_t *st;
  px_status_t rc = px_store_stmt(c->db,
                                 "SELECT node_id FROM job_nodes WHERE job_id = ?1"
                                 " ORDER BY node_index",
                                 &st);
  if (rc == PX_OK) rc = px_store_bind_text(st, 1, job_id);
  while (rc == PX_OK && (rc = px_store_step(st)) == 1) {
    char **slot = coord_push(&a, (void **)&ids, &n, &cap, sizeof(char *));
    if (!slot || !(*slot = coord_strdup(&a, px_store_column_text(st, 0)))) rc = PX_ERR_NOMEM;
    else rc = PX_OK;
  }
  if (rc < 0) px_store_reset(st);
  for (size_t i = 0; rc >= 0 && i < n; i++) {
    Prunex__V1__Assignment *as;
    rc = coord_assignment_build(c, &a, job_id, ids[i], action, &as);
    if (rc == PX_OK && as) coord_send_to_node(c, ids[i], as);
  }
  if (rc < 0) px_log(PX_LOG_ERROR, "job %s: pushing assignments: %s", job_id, px_last_error());
  coord_arena_free(&a);
}

/* ---- RegisterNode ------------------------------------------------------------ */

static px_status_t coord_store_devices(coord_t *c, const char *node_id, size_t n,
                                       Prunex__V1__Device *const *devs) {
  px_store_stmt_t *st;
  PX_CHECK(px_store_stmt(c->db, "DELETE FROM node_devices WHERE node_id = ?1", &st));
  PX_CHECK(px_store_bind_text(st, 1, node_id));
  PX_CHECK(px_store_run(st));
  for (size_t i = 0; i < n; i++) {
    PX_CHECK(px_store_stmt(c->db,
                           "INSERT INTO node_devices (node_id, position, device_index, kind, name,"
                           " memory_bytes, healthy) VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7)",
                           &st));
    PX_CHECK(px_store_bind_text(st, 1, node_id));
    PX_CHECK(px_store_bind_int64(st, 2, (int64_t)i));
    PX_CHECK(px_store_bind_int64(st, 3, devs[i]->index));
    PX_CHECK(px_store_bind_int64(st, 4, devs[i]->kind));
    PX_CHECK(px_store_bind_text(st, 5, devs[i]->name));
    PX_CHECK(px_store_bind_int64(st, 6, (int64_t)devs[i]->memory_bytes));
    PX_CHECK(px_store_bind_int64(st, 7, devs[i]->healthy ? 1 : 0));
    PX_CHECK(px_store_run(st));
  }
  return PX_OK;
}

/* State a node returns to when it is heard from: BUSY while its job runs. */
static px_status_t coord_node_live_state(coord_t *c, const char *job_id, int *state) {
  *state = NS_READY;
  if (!job_id[0]) return PX_OK;
  int found, js;
  coord_arena_t a;
  coord_arena_init(&a);
  px_status_t rc = coord_job_lookup(c, &a, job_id, &found, &js, NULL);
  coord_arena_free(&a);
  if (rc == PX_OK && found && coord_job_active(js)) *state = NS_BUSY;
  return rc;
}

static px_status_t coord_register(coord_t *c, const Prunex__V1__RegisterNodeRequest *r,
                                  char *node_id, size_t cap) {
  char addrs[8192] = "";
  size_t used = 0;
  for (size_t i = 0; i < r->n_data_plane_addresses; i++) {
    int w = snprintf(addrs + used, sizeof addrs - used, "%s%s", i ? "\n" : "",
                     r->data_plane_addresses[i]);
    if (w < 0 || (size_t)w >= sizeof addrs - used) break;
    used += (size_t)w;
  }
  char roots[66 * 1026] = "", droots[66 * 1026] = "";
  size_t rused = 0;
  for (size_t i = 0; i < r->n_output_roots && i < 64; i++)
    rused += (size_t)snprintf(roots + rused, sizeof roots - rused, "%s%s", i ? "\n" : "",
                              r->output_roots[i]);
  rused = 0;
  for (size_t i = 0; i < r->n_data_roots && i < 64; i++)
    rused += (size_t)snprintf(droots + rused, sizeof droots - rused, "%s%s", i ? "\n" : "",
                              r->data_roots[i]);
  int64_t now = coord_now_ms();
  px_store_stmt_t *st;
  px_status_t rc;
  PX_CHECK(px_store_stmt(c->db, "SELECT node_id, state, job_id FROM nodes WHERE name = ?1", &st));
  PX_CHECK(px_store_bind_text(st, 1, r->name));
  if ((rc = px_store_step(st)) < 0) return rc;
  if (rc == 1) {
    snprintf(node_id, cap, "%s", px_store_column_text(st, 0));
    int old = (int)px_store_column_int64(st, 1);
    char job_id[128];
    snprintf(job_id, sizeof job_id, "%s", px_store_column_text(st, 2));
    px_store_reset(st);
    int state;
    PX_CHECK(coord_node_live_state(c, job_id, &state));
    PX_CHECK(px_store_stmt(c->db,
                           "UPDATE nodes SET hostname = ?2, addresses = ?3, agent_version = ?4,"
                           " pid = ?5, last_heartbeat_unix_ms = ?6,"
                           " job_id = CASE WHEN ?7 = 2 THEN job_id ELSE '' END,"
                           " output_roots = ?8, data_roots = ?9 WHERE node_id = ?1",
                           &st));
    PX_CHECK(px_store_bind_text(st, 8, roots));
    PX_CHECK(px_store_bind_text(st, 9, droots));
    PX_CHECK(px_store_bind_text(st, 1, node_id));
    PX_CHECK(px_store_bind_text(st, 2, r->hostname));
    PX_CHECK(px_store_bind_text(st, 3, addrs));
    PX_CHECK(px_store_bind_text(st, 4, r->agent_version));
    PX_CHECK(px_store_bind_int64(st, 5, r->pid));
    PX_CHECK(px_store_bind_int64(st, 6, now));
    PX_CHECK(px_store_bind_int64(st, 7, state));
    PX_CHECK(px_store_run(st));
    PX_CHECK(coord_node_set_state(c, node_id, old, state, "re-registered"));
  } else {
    PX_CHECK(px_store_stmt(c->db,
                           "INSERT INTO nodes (node_id, name, hostname, state, addresses,"
                           " agent_version, pid, registered_unix_ms, last_heartbeat_unix_ms,"
                           " output_roots, data_roots)"
                           " VALUES ('new:' || ?1, ?1, ?2, ?3, ?4, ?5, ?6, ?7, ?7, ?8, ?9)",
                           &st));
    PX_CHECK(px_store_bind_text(st, 8, roots));
    PX_CHECK(px_store_bind_text(st, 9, droots));
    PX_CHECK(px_store_bind_text(st, 1, r->name));
    PX_CHECK(px_store_bind_text(st, 2, r->hostname));
    PX_CHECK(px_store_bind_int64(st, 3, NS_READY));
    PX_CHECK(px_store_bind_text(st, 4, addrs));
    PX_CHECK(px_store_bind_text(st, 5, r->agent_version));
    PX_CHECK(px_store_bind_int64(st, 6, r->pid));
    PX_CHECK(px_store_bind_int64(st, 7, now));
    PX_CHECK(px_store_run(st));
    int64_t id = px_store_last_insert_id(c->db);
    snprintf(node_id, cap, "node-%04lld", (long long)id);
    PX_CHECK(px_store_stmt(c->db, "UPDATE nodes SET node_id = ?2 WHERE id = ?1", &st));
    PX_CHECK(px_store_bind_int64(st, 1, id));
    PX_CHECK(px_store_bind_text(st, 2, node_id));
    PX_CHECK(px_store_run(st));
    char reason[160];
    snprintf(reason, sizeof reason, "registered (host '%s', %zu device%s)", r->hostname,
             r->n_devices, r->n_devices == 1 ? "" : "s");
    /* The first event: from UNSPECIFIED, recorded without the state check. */
    PX_CHECK(px_store_stmt(c->db,
                           "INSERT INTO node_events (node_id, time_unix_ms, from_state, to_state,"
                           " reason) VALUES (?1, ?2, 0, ?3, ?4)",
                           &st));
    PX_CHECK(px_store_bind_text(st, 1, node_id));
    PX_CHECK(px_store_bind_int64(st, 2, now));
    PX_CHECK(px_store_bind_int64(st, 3, NS_READY));
    PX_CHECK(px_store_bind_text(st, 4, reason));
    PX_CHECK(px_store_run(st));
    px_log(PX_LOG_INFO, "node %s (%s): %s", node_id, r->name, reason);
  }
  return coord_store_devices(c, node_id, r->n_devices, r->devices);
}

void coord_rpc_register_node(px_rpc_srv_call_t *call, const ProtobufCMessage *msg, void *data) {
  coord_t *c = data;
  const Prunex__V1__RegisterNodeRequest *r = (const Prunex__V1__RegisterNodeRequest *)msg;
  if (!r->name[0]) {
    px_rpc_srv_finish(call, PX_RPC_INVALID_ARGUMENT, "name: a node needs a name");
    return;
  }
  if (strlen(r->name) > 120) {
    px_rpc_srv_finish(call, PX_RPC_INVALID_ARGUMENT, "name: longer than 120 bytes");
    return;
  }
  for (size_t i = 0; i < r->n_devices; i++) {
    if (r->devices[i]->index < 0) {
      px_rpc_srv_finish(call, PX_RPC_INVALID_ARGUMENT, "devices[%zu].index = %d: must be >= 0",
                        i, r->devices[i]->index);
      return;
    }
  }
  /* Strings are stored and served to every client: proto3 clients cannot
   * decode a message holding a string that is not UTF-8. */
  const char *bad = NULL;
  if (!px_utf8_valid(r->name, strlen(r->name))) bad = "name";
  else if (!px_utf8_valid(r->hostname, strlen(r->hostname))) bad = "hostname";
  else if (!px_utf8_valid(r->agent_version, strlen(r->agent_version))) bad = "agent_version";
  for (size_t i = 0; !bad && i < r->n_devices; i++)
    if (!px_utf8_valid(r->devices[i]->name, strlen(r->devices[i]->name))) bad = "devices[].name";
  for (size_t i = 0; !bad && i < r->n_data_plane_addresses; i++)
    if (!px_utf8_valid(r->data_plane_addresses[i], strlen(r->data_plane_addresses[i])))
      bad = "data_plane_addresses[]";
  if (bad) {
    px_rpc_srv_finish(call, PX_RPC_INVALID_ARGUMENT, "%s: not valid UTF-8", bad);
    return;
  }
  if (r->n_output_roots > 64) {
    px_rpc_srv_finish(call, PX_RPC_INVALID_ARGUMENT, "output_roots: %zu, at most 64",
                      r->n_output_roots);
    return;
  }
  for (size_t i = 0; i < r->n_output_roots; i++) {
    const char *p = r->output_roots[i];
    if (p[0] != '/' || strlen(p) > 1024 || strchr(p, '\n') || strstr(p, "/..") ||
        !px_utf8_valid(p, strlen(p))) {
      px_rpc_srv_finish(call, PX_RPC_INVALID_ARGUMENT,
                        "output_roots[%zu]: expected an absolute UTF-8 path without '..'", i);
      return;
    }
  }
  if (r->n_data_roots > 64) {
    px_rpc_srv_finish(call, PX_RPC_INVALID_ARGUMENT, "data_roots: %zu, at most 64",
                      r->n_data_roots);
    return;
  }
  for (size_t i = 0; i < r->n_data_roots; i++) {
    const char *p = r->data_roots[i];
    if (p[0] != '/' || strlen(p) > 1024 || strchr(p, '\n') || strstr(p, "/..") ||
        !px_utf8_valid(p, strlen(p))) {
      px_rpc_srv_finish(call, PX_RPC_INVALID_ARGUMENT,
                        "data_roots[%zu]: expected an absolute UTF-8 path without '..'", i);
      return;
    }
  }
  char node_id[64];
  if (px_store_begin(c->db) != PX_OK || coord_register(c, r, node_id, sizeof node_id) != PX_OK ||
      px_store_commit(c->db) != PX_OK) {
    coord_fail_internal(c, call);
    return;
  }
  Prunex__V1__RegisterNodeResponse resp = PRUNEX__V1__REGISTER_NODE_RESPONSE__INIT;
  resp.node_id = node_id;
  resp.heartbeat_timeout_ms = c->cfg.heartbeat_timeout_ms;
  resp.heartbeat_interval_ms = c->cfg.heartbeat_timeout_ms / 3 > 0 ? c->cfg.heartbeat_timeout_ms / 3 : 1;
  px_rpc_srv_reply(call, &resp.base);
  coord_schedule(c);
}

/* ---- Heartbeat ------------------------------------------------------------------- */

/* The agent's heartbeat is the truth about its devices: a list that
 * differs from the stored one (changed by a later RegisterNode, say)
 * replaces it, rather than lasting until the agent restarts (issue 26), and
 * sets *revived (placement may change). Otherwise only health changes. */
static px_status_t coord_heartbeat_devices(coord_t *c, const Prunex__V1__HeartbeatRequest *r,
                                           int *revived) {
  px_store_stmt_t *st;
  px_status_t rc;
  int same = 1;
  if (r->n_devices > 0) {
    size_t n = 0;
    PX_CHECK(px_store_stmt(c->db,
                           "SELECT device_index, kind, name, memory_bytes FROM node_devices"
                           " WHERE node_id = ?1 ORDER BY position",
                           &st));
    PX_CHECK(px_store_bind_text(st, 1, r->node_id));
    while ((rc = px_store_step(st)) == 1) {
      const Prunex__V1__Device *d = n < r->n_devices ? r->devices[n] : NULL;
      if (!d || d->index != px_store_column_int64(st, 0) ||
          (int64_t)d->kind != px_store_column_int64(st, 1) ||
          strcmp(d->name, px_store_column_text(st, 2)) != 0 ||
          (int64_t)d->memory_bytes != px_store_column_int64(st, 3))
        same = 0;
      n++;
    }
    if (rc < 0) return rc;
    if (n != r->n_devices) same = 0;
  }
  if (!same) {
    px_log(PX_LOG_WARN, "node %s: its heartbeat lists %zu devices that differ from those "
           "registered: the heartbeat's replace them", r->node_id, r->n_devices);
    PX_CHECK(coord_store_devices(c, r->node_id, r->n_devices, r->devices));
    *revived = 1;
  }
  for (size_t i = 0; same && i < r->n_devices; i++) {
    PX_CHECK(px_store_stmt(c->db,
                           "UPDATE node_devices SET healthy = ?3 WHERE node_id = ?1 AND"
                           " device_index = ?2",
                           &st));
    PX_CHECK(px_store_bind_text(st, 1, r->node_id));
    PX_CHECK(px_store_bind_int64(st, 2, r->devices[i]->index));
    PX_CHECK(px_store_bind_int64(st, 3, r->devices[i]->healthy ? 1 : 0));
    PX_CHECK(px_store_run(st));
  }
  return PX_OK;
}

/* Jobs the agent runs that it should not (unknown, finished, or not placed
 * on this node) into resp->cancel_job_ids; the others' placement is
 * marked started here. */
static px_status_t coord_heartbeat_jobs(coord_t *c, const Prunex__V1__HeartbeatRequest *r,
                                        coord_arena_t *a, Prunex__V1__HeartbeatResponse *resp) {
  px_store_stmt_t *st;
  px_status_t rc;
  size_t cap = 0;
  for (size_t i = 0; i < r->n_running_job_ids; i++) {
    const char *jid = r->running_job_ids[i];
    PX_CHECK(px_store_stmt(c->db,
                           "SELECT j.state FROM jobs j JOIN job_nodes n ON n.job_id = j.job_id"
                           " WHERE j.job_id = ?1 AND n.node_id = ?2",
                           &st));
    PX_CHECK(px_store_bind_text(st, 1, jid));
    PX_CHECK(px_store_bind_text(st, 2, r->node_id));
    if ((rc = px_store_step(st)) < 0) return rc;
    int keep = rc == 1 && coord_job_active((int)px_store_column_int64(st, 0));
    px_store_reset(st);
    if (keep) {
      /* The node runs its ranks: the placement has started here. */
      PX_CHECK(px_store_stmt(c->db,
                             "UPDATE job_nodes SET started_unix_ms = ?3 WHERE job_id = ?1 AND"
                             " node_id = ?2 AND started_unix_ms = 0",
                             &st));
      PX_CHECK(px_store_bind_text(st, 1, jid));
      PX_CHECK(px_store_bind_text(st, 2, r->node_id));
      PX_CHECK(px_store_bind_int64(st, 3, coord_now_ms()));
      PX_CHECK(px_store_run(st));
      continue;
    }
    char **slot = coord_push(a, (void **)&resp->cancel_job_ids, &resp->n_cancel_job_ids, &cap,
                             sizeof(char *));
    if (!slot || !(*slot = coord_strdup(a, jid))) return PX_ERR_NOMEM;
  }
  return PX_OK;
}

static px_status_t coord_heartbeat(coord_t *c, const Prunex__V1__HeartbeatRequest *r,
                                   coord_arena_t *a, Prunex__V1__HeartbeatResponse *resp,
                                   int *revived) {
  *revived = 0;
  px_store_stmt_t *st;
  px_status_t rc;
  PX_CHECK(px_store_stmt(c->db, "SELECT state, job_id FROM nodes WHERE node_id = ?1", &st));
  PX_CHECK(px_store_bind_text(st, 1, r->node_id));
  if ((rc = px_store_step(st)) < 0) return rc;
  if (rc == 0) {
    resp->known = 0;
    return PX_OK;
  }
  resp->known = 1;
  int old = (int)px_store_column_int64(st, 0);
  char job_id[128];
  snprintf(job_id, sizeof job_id, "%s", px_store_column_text(st, 1));
  px_store_reset(st);

  PX_CHECK(px_store_stmt(c->db, "UPDATE nodes SET last_heartbeat_unix_ms = ?2 WHERE node_id = ?1",
                         &st));
  PX_CHECK(px_store_bind_text(st, 1, r->node_id));
  PX_CHECK(px_store_bind_int64(st, 2, coord_now_ms()));
  PX_CHECK(px_store_run(st));
  PX_CHECK(coord_heartbeat_devices(c, r, revived));
  if (old == NS_LOST) {
    int state;
    PX_CHECK(coord_node_live_state(c, job_id, &state));
    if (state == NS_READY && job_id[0]) {
      PX_CHECK(px_store_stmt(c->db, "UPDATE nodes SET job_id = '' WHERE node_id = ?1", &st));
      PX_CHECK(px_store_bind_text(st, 1, r->node_id));
      PX_CHECK(px_store_run(st));
    }
    PX_CHECK(coord_node_set_state(c, r->node_id, old, state, "heartbeat resumed"));
    *revived |= state == NS_READY;
  }
  return coord_heartbeat_jobs(c, r, a, resp);
}

void coord_rpc_heartbeat(px_rpc_srv_call_t *call, const ProtobufCMessage *msg, void *data) {
  coord_t *c = data;
  const Prunex__V1__HeartbeatRequest *r = (const Prunex__V1__HeartbeatRequest *)msg;
  if (!r->node_id[0]) {
    px_rpc_srv_finish(call, PX_RPC_INVALID_ARGUMENT, "node_id is required");
    return;
  }
  /* The devices may replace the registered ones: the same checks. */
  for (size_t i = 0; i < r->n_devices; i++) {
    if (r->devices[i]->index < 0 ||
        !px_utf8_valid(r->devices[i]->name, strlen(r->devices[i]->name))) {
      px_rpc_srv_finish(call, PX_RPC_INVALID_ARGUMENT,
                        "devices[%zu]: index must be >= 0 and name valid UTF-8", i);
      return;
    }
  }
  coord_arena_t a;
  coord_arena_init(&a);
  Prunex__V1__HeartbeatResponse resp = PRUNEX__V1__HEARTBEAT_RESPONSE__INIT;
  int revived = 0;
  if (px_store_begin(c->db) != PX_OK || coord_heartbeat(c, r, &a, &resp, &revived) != PX_OK ||
      px_store_commit(c->db) != PX_OK) {
    coord_fail_internal(c, call);
  } else {
    px_rpc_srv_reply(call, &resp.base);
    if (revived) coord_schedule(c);
  }
  coord_arena_free(&a);
}

/* ---- ListNodes ---------------------------------------------------------------- */

void coord_rpc_list_nodes(px_rpc_srv_call_t *call, const ProtobufCMessage *msg, void *data) {
  coord_t *c = data;
  const Prunex__V1__ListNodesRequest *r = (const Prunex__V1__ListNodesRequest *)msg;
  if ((int)r->state < 0 || (int)r->state > NS_LOST) {
    px_rpc_srv_finish(call, PX_RPC_INVALID_ARGUMENT, "state = %d: not a NodeState", (int)r->state);
    return;
  }
  coord_arena_t a;
  coord_arena_init(&a);
  Prunex__V1__ListNodesResponse resp = PRUNEX__V1__LIST_NODES_RESPONSE__INIT;
  px_store_stmt_t *st;
  px_status_t rc = px_store_stmt(c->db,
                                 "SELECT " COORD_NODE_COLUMNS " FROM nodes"
                                 " WHERE ?1 = 0 OR state = ?1 ORDER BY id",
                                 &st);
  if (rc == PX_OK) rc = px_store_bind_int64(st, 1, r->state);
  size_t cap = 0;
  while (rc == PX_OK && (rc = px_store_step(st)) == 1) {
    Prunex__V1__Node **slot =
        coord_push(&a, (void **)&resp.nodes, &resp.n_nodes, &cap, sizeof *resp.nodes);
    rc = slot ? coord_node_load_row(c, &a, st, slot) : PX_ERR_NOMEM;
  }
  if (rc < 0) {
    px_store_reset(st);
    coord_fail_internal(c, call);
  } else {
    px_rpc_srv_reply(call, &resp.base);
  }
  coord_arena_free(&a);
}

/* ---- WatchAssignments ------------------------------------------------------------ */

static void coord_watch_unlink(coord_watch_t **list, coord_watch_t *w) {
  for (coord_watch_t **p = list; *p; p = &(*p)->next) {
    if (*p == w) {
      *p = w->next;
      return;
    }
  }
}

static void coord_watch_cancelled(px_rpc_srv_call_t *call, void *arg) {
  coord_watch_t *w = arg;
  coord_watch_unlink(w->is_job ? &w->c->job_watches : &w->c->node_watches, w);
  /* The client left: for an assignment stream, the node's agent. */
  if (!w->is_job) coord_agent_gone(w->c, w->id);
  px_rpc_srv_finish(call, PX_RPC_CANCELLED, "watch ended");
  px_free(w);
}

coord_watch_t *coord_watch_open(coord_t *c, px_rpc_srv_call_t *call, const char *id, int is_job) {
  coord_watch_t *w = px_calloc(1, sizeof *w, "coordd.watch");
  if (!w) return NULL;
  w->c = c;
  w->call = call;
  w->is_job = is_job;
  w->who = c->who; /* the caller coord_authorize identified for this call */
  snprintf(w->id, sizeof w->id, "%s", id);
  coord_watch_t **list = is_job ? &c->job_watches : &c->node_watches;
  w->next = *list;
  *list = w;
  px_rpc_srv_on_cancel(call, coord_watch_cancelled, w);
  return w;
}

void coord_watch_close(coord_t *c, coord_watch_t *w) {
  coord_watch_unlink(w->is_job ? &c->job_watches : &c->node_watches, w);
  px_rpc_srv_finish(w->call, PX_RPC_OK, NULL);
  px_free(w);
}

void coord_watch_end(coord_t *c, coord_watch_t *w, px_rpc_code_t code, const char *fmt, ...) {
  char msg[512];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(msg, sizeof msg, fmt, ap);
  va_end(ap);
  coord_watch_unlink(w->is_job ? &c->job_watches : &c->node_watches, w);
  if (!w->is_job) coord_agent_gone(c, w->id);
  px_rpc_srv_finish(w->call, code, "%s", msg);
  px_free(w);
}

void coord_rpc_watch_assignments(px_rpc_srv_call_t *call, const ProtobufCMessage *msg,
                                 void *data) {
  coord_t *c = data;
  const Prunex__V1__WatchAssignmentsRequest *r = (const Prunex__V1__WatchAssignmentsRequest *)msg;
  if (!r->node_id[0]) {
    px_rpc_srv_finish(call, PX_RPC_INVALID_ARGUMENT, "node_id is required");
    return;
  }
  if (strlen(r->node_id) >= sizeof ((coord_watch_t *)0)->id) {
    px_rpc_srv_finish(call, PX_RPC_INVALID_ARGUMENT, "node_id is too long");
    return;
  }
  coord_arena_t a;
  coord_arena_init(&a);
  px_store_stmt_t *st;
  char **jobs = NULL;
  size_t n = 0, cap = 0;
  int known = 0;
  px_status_t rc = px_store_stmt(c->db, "SELECT 1 FROM nodes WHERE node_id = ?1", &st);
  if (rc == PX_OK) rc = px_store_bind_text(st, 1, r->node_id);
  if (rc == PX_OK && (rc = px_store_step(st)) == 1) {
    known = 1;
    px_store_reset(st);
    rc = px_store_stmt(c->db,
                       "SELECT j.job_id FROM job_nodes n JOIN jobs j ON j.job_id = n.job_id"
                       " WHERE n.node_id = ?1 AND j.state IN (2, 3) ORDER BY j.id",
                       &st);
    if (rc == PX_OK) rc = px_store_bind_text(st, 1, r->node_id);
    while (rc == PX_OK && (rc = px_store_step(st)) == 1) {
      char **slot = coord_push(&a, (void **)&jobs, &n, &cap, sizeof(char *));
      rc = slot && (*slot = coord_strdup(&a, px_store_column_text(st, 0))) ? PX_OK : PX_ERR_NOMEM;
    }
  }
  if (rc < 0) {
    px_store_reset(st);
    coord_fail_internal(c, call);
    coord_arena_free(&a);
    return;
  }
  if (!known) {
    px_rpc_srv_finish(call, PX_RPC_NOT_FOUND, "node %s is not registered", r->node_id);
    coord_arena_free(&a);
    return;
  }
  if (!coord_watch_open(c, call, r->node_id, 0)) {
    px_rpc_srv_finish(call, PX_RPC_RESOURCE_EXHAUSTED, "out of memory");
    coord_arena_free(&a);
    return;
  }
  px_log(PX_LOG_INFO, "node %s: assignment stream open (%zu active job%s)", r->node_id, n,
         n == 1 ? "" : "s");
  coord_agent_back(c, r->node_id);
  for (size_t i = 0; i < n; i++) {
    Prunex__V1__Assignment *as;
    if (coord_assignment_build(c, &a, jobs[i], r->node_id,
                               PRUNEX__V1__ASSIGNMENT_ACTION__ASSIGNMENT_ACTION_START,
                               &as) == PX_OK &&
        as)
      px_rpc_srv_send(call, &as->base);
  }
  coord_arena_free(&a);
}

/* ---- heartbeat sweep -------------------------------------------------------------- */

static void coord_sweep(uv_timer_t *t) {
  coord_t *c = t->data;
  int64_t now = coord_now_ms();
  coord_arena_t a;
  coord_arena_init(&a);
  char **ids = NULL;
  int *states = NULL;
  int64_t *last = NULL;
  size_t n = 0, cap = 0, n2 = 0, cap2 = 0, n3 = 0, cap3 = 0;
  px_store_stmt_t *st;
  px_status_t rc = px_store_stmt(c->db,
                                 "SELECT node_id, state, last_heartbeat_unix_ms FROM nodes"
                                 " WHERE state != 3 AND last_heartbeat_unix_ms < ?1",
                                 &st);
  if (rc == PX_OK) rc = px_store_bind_int64(st, 1, now - c->cfg.heartbeat_timeout_ms);
  while (rc == PX_OK && (rc = px_store_step(st)) == 1) {
    char **slot = coord_push(&a, (void **)&ids, &n, &cap, sizeof(char *));
    int *s = coord_push(&a, (void **)&states, &n2, &cap2, sizeof(int));
    int64_t *l = coord_push(&a, (void **)&last, &n3, &cap3, sizeof(int64_t));
    if (!slot || !s || !l || !(*slot = coord_strdup(&a, px_store_column_text(st, 0)))) {
      rc = PX_ERR_NOMEM;
      break;
    }
    *s = (int)px_store_column_int64(st, 1);
    *l = px_store_column_int64(st, 2);
    rc = PX_OK;
  }
  if (rc < 0) px_store_reset(st);
  if (rc >= 0 && n > 0 && (rc = px_store_begin(c->db)) == PX_OK) {
    for (size_t i = 0; rc == PX_OK && i < n; i++) {
      char reason[128];
      snprintf(reason, sizeof reason, "no heartbeat for %lld ms (timeout %d ms)",
               (long long)(now - last[i]), c->cfg.heartbeat_timeout_ms);
      rc = coord_node_set_state(c, ids[i], states[i], NS_LOST, reason);
    }
    if (rc == PX_OK) rc = px_store_commit(c->db);
    if (rc != PX_OK) px_store_rollback(c->db);
  }
  if (rc < 0) px_log(PX_LOG_ERROR, "heartbeat sweep: %s", px_last_error());
  coord_arena_free(&a);
  coord_recovery_sweep(c);
  coord_time_limit_sweep(c);
  coord_preempt_sweep(c);
}

px_status_t coord_nodes_start(coord_t *c) {
  /* Nobody has heartbeated this process yet: every node is LOST until it
   * heartbeats or registers again. */
  coord_arena_t a;
  coord_arena_init(&a);
  char **ids = NULL;
  int *states = NULL;
  size_t n = 0, cap = 0, n2 = 0, cap2 = 0;
  px_store_stmt_t *st;
  px_status_t rc;
  PX_CHECK_GOTO(px_store_stmt(c->db, "SELECT node_id, state FROM nodes WHERE state != 3", &st), rc,
                out);
  while ((rc = px_store_step(st)) == 1) {
    char **slot = coord_push(&a, (void **)&ids, &n, &cap, sizeof(char *));
    int *s = coord_push(&a, (void **)&states, &n2, &cap2, sizeof(int));
    if (!slot || !s || !(*slot = coord_strdup(&a, px_store_column_text(st, 0)))) {
      px_store_reset(st);
      rc = PX_ERR_NOMEM;
      goto out;
    }
    *s = (int)px_store_column_int64(st, 1);
  }
  if (rc < 0) goto out;
  if (n > 0) {
    PX_CHECK_GOTO(px_store_begin(c->db), rc, out);
    for (size_t i = 0; i < n; i++) {
      rc = coord_node_set_state(c, ids[i], states[i], NS_LOST, "coordinator restarted");
      if (rc != PX_OK) {
        px_store_rollback(c->db);
        goto out;
      }
    }
    PX_CHECK_GOTO(px_store_commit(c->db), rc, out);
  }
  int64_t every = c->cfg.heartbeat_timeout_ms / 5;
  if (every < 10) every = 10;
  if (every > 1000) every = 1000;
  uv_timer_init(c->loop, &c->sweep);
  c->sweep.data = c;
  uv_timer_start(&c->sweep, coord_sweep, (uint64_t)every, (uint64_t)every);
  rc = PX_OK;
out:
  coord_arena_free(&a);
  return rc;
}

void coord_nodes_stop(coord_t *c) {
  coord_recovery_stop(c);
  uv_timer_stop(&c->sweep);
  uv_close((uv_handle_t *)&c->sweep, NULL);
}
