/* Node registry: RegisterNode, Heartbeat, ListNodes and WatchAssignments
 * (the streams themselves are watch.c's, the assignments assign.c's, the
 * heartbeat sweep recovery.c's, the queries db/nodes.c's). */
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "db/db_core.h"
#include "flow.h"
#include "prunex/check.h"

/* ---- RegisterNode ------------------------------------------------------------ */

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
  coord_db_node_info_t info = {.hostname = r->hostname, .addresses = addrs,
                               .agent_version = r->agent_version, .output_roots = roots,
                               .data_roots = droots, .pid = r->pid};
  coord_db_node_t old;
  int found;
  PX_CHECK(coord_db_node_get(c, r->name, 1, &found, &old));
  if (found) {
    snprintf(node_id, cap, "%s", old.node_id);
    int state;
    PX_CHECK(coord_node_live_state(c, old.job_id, &state));
    PX_CHECK(coord_db_node_reregister(c, node_id, &info, state, now));
    PX_CHECK(coord_node_set_state(c, node_id, old.state, state, "re-registered"));
  } else {
    char reason[160];
    snprintf(reason, sizeof reason, "registered (host '%s', %zu device%s)", r->hostname,
             r->n_devices, r->n_devices == 1 ? "" : "s");
    PX_CHECK(coord_db_node_insert(c, r->name, &info, NS_READY, reason, now, node_id, cap));
    px_log(PX_LOG_INFO, "node %s (%s): %s", node_id, r->name, reason);
  }
  return coord_db_node_devices_set(c, node_id, r->n_devices, r->devices);
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
  coord_arena_t a;
  coord_arena_init(&a);
  coord_effects_t fx; /* a new or returning node: a placement may now fit */
  coord_effects_init(&fx, &a);
  coord_fx_schedule(&fx);
  if (px_store_begin(c->db) != PX_OK || coord_register(c, r, node_id, sizeof node_id) != PX_OK ||
      coord_commit(c, &fx) != PX_OK) {
    coord_fail_internal(c, call);
    coord_arena_free(&a);
    return;
  }
  coord_arena_free(&a);
  Prunex__V1__RegisterNodeResponse resp = PRUNEX__V1__REGISTER_NODE_RESPONSE__INIT;
  resp.node_id = node_id;
  resp.heartbeat_timeout_ms = c->cfg.heartbeat_timeout_ms;
  resp.heartbeat_interval_ms = c->cfg.heartbeat_timeout_ms / 3 > 0 ? c->cfg.heartbeat_timeout_ms / 3 : 1;
  px_rpc_srv_reply(call, &resp.base);
}

/* ---- Heartbeat ------------------------------------------------------------------- */

/* The agent's heartbeat is the truth about its devices: a list that
 * differs from the stored one (changed by a later RegisterNode, say)
 * replaces it, rather than lasting until the agent restarts, and
 * sets *revived (placement may change). Otherwise only health changes. */
static px_status_t coord_heartbeat_devices(coord_t *c, const Prunex__V1__HeartbeatRequest *r,
                                           int *revived) {
  int same = 1;
  if (r->n_devices > 0)
    PX_CHECK(coord_db_node_devices_same(c, r->node_id, r->n_devices, r->devices, &same));
  if (!same) {
    px_log(PX_LOG_WARN, "node %s: its heartbeat lists %zu devices that differ from those "
           "registered: the heartbeat's replace them", r->node_id, r->n_devices);
    PX_CHECK(coord_db_node_devices_set(c, r->node_id, r->n_devices, r->devices));
    *revived = 1;
    return PX_OK;
  }
  return coord_db_node_devices_health(c, r->node_id, r->n_devices, r->devices);
}

/* Jobs the agent runs that it should not (unknown, finished, or not placed
 * on this node) into resp->cancel_job_ids; the others' placement is
 * marked started here. */
static px_status_t coord_heartbeat_jobs(coord_t *c, const Prunex__V1__HeartbeatRequest *r,
                                        coord_arena_t *a, Prunex__V1__HeartbeatResponse *resp) {
  size_t cap = 0;
  for (size_t i = 0; i < r->n_running_job_ids; i++) {
    const char *jid = r->running_job_ids[i];
    int found = 0, state = 0;
    PX_CHECK(coord_db_job_state_on_node(c, jid, r->node_id, &found, &state));
    if (found && coord_job_active(state)) {
      /* The node runs its ranks: the placement has started here. */
      PX_CHECK(coord_db_job_node_started(c, jid, r->node_id, coord_now_ms()));
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
  coord_db_node_t node;
  int found;
  PX_CHECK(coord_db_node_get(c, r->node_id, 0, &found, &node));
  resp->known = found;
  if (!found) return PX_OK;
  int old = node.state;
  const char *job_id = node.job_id;
  PX_CHECK(coord_db_node_heartbeat(c, r->node_id, coord_now_ms()));
  PX_CHECK(coord_heartbeat_devices(c, r, revived));
  if (old == NS_LOST) {
    int state;
    PX_CHECK(coord_node_live_state(c, job_id, &state));
    if (state == NS_READY && job_id[0]) PX_CHECK(coord_db_node_set_job(c, r->node_id, ""));
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
  coord_effects_t fx;
  coord_effects_init(&fx, &a);
  px_status_t rc = px_store_begin(c->db);
  if (rc == PX_OK) rc = coord_heartbeat(c, r, &a, &resp, &revived);
  if (revived) coord_fx_schedule(&fx); /* a node back or its devices changed */
  if (rc != PX_OK || coord_commit(c, &fx) != PX_OK) coord_fail_internal(c, call);
  else px_rpc_srv_reply(call, &resp.base);
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
  px_status_t rc = coord_db_nodes_list(c, &a, (int)r->state, &resp.nodes, &resp.n_nodes);
  if (rc < 0) {
    coord_fail_internal(c, call);
  } else {
    px_rpc_srv_reply(call, &resp.base);
  }
  coord_arena_free(&a);
}

/* ---- WatchAssignments ------------------------------------------------------------ */

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
  char **jobs = NULL;
  size_t n = 0;
  int known = 0;
  coord_db_node_t node;
  px_status_t rc = coord_db_node_get(c, r->node_id, 0, &known, &node);
  if (rc == PX_OK && known)
    rc = coord_db_node_jobs(c, &a, r->node_id, JS_SCHEDULED, JS_RUNNING, &jobs, &n);
  if (rc < 0) {
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
