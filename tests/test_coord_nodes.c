/* pxcoordd's node registry: RegisterNode (ids, re-registration by name),
 * Heartbeat (known/unknown, device health, cancel hints), the heartbeat
 * timeout that makes a silent node LOST and a heartbeat that brings it back,
 * and ListNodes with its state filter. */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>

#include <cmocka.h>

#include "coord_harness.h"

typedef struct {
  pxt_coordd_t d;
  px_rpc_channel_t *ch;
} fixture_t;

static int setup_with(void **state, const char *const *extra) {
  fixture_t *f = calloc(1, sizeof *f);
  if (!f || pxt_coordd_setup(&f->d, extra) != 0) {
    free(f);
    return -1;
  }
  if (px_rpc_channel_create(f->d.target, &f->ch) != PX_OK) return -1;
  *state = f;
  return 0;
}

static int setup(void **state) { return setup_with(state, NULL); }

static int setup_short_timeout(void **state) {
  static const char *const extra[] = {"--heartbeat-timeout-ms", "600", NULL};
  return setup_with(state, extra);
}

static int teardown(void **state) {
  fixture_t *f = *state;
  px_rpc_channel_destroy(f->ch);
  int rc = pxt_coordd_teardown(&f->d);
  free(f);
  return rc;
}

static px_status_t heartbeat(px_rpc_channel_t *ch, const char *node_id, int *known) {
  Prunex__V1__HeartbeatRequest req = PRUNEX__V1__HEARTBEAT_REQUEST__INIT;
  req.node_id = (char *)node_id;
  Prunex__V1__HeartbeatResponse *r = NULL;
  px_status_t st = px_rpc_heartbeat(ch, &req, 0, &r);
  if (st == PX_OK && known) *known = r->known;
  px_rpc_message_free(r);
  return st;
}

static Prunex__V1__ListNodesResponse *list_nodes(px_rpc_channel_t *ch, int state) {
  Prunex__V1__ListNodesRequest req = PRUNEX__V1__LIST_NODES_REQUEST__INIT;
  req.state = (Prunex__V1__NodeState)state;
  Prunex__V1__ListNodesResponse *r = NULL;
  assert_int_equal(px_rpc_list_nodes(ch, &req, 0, &r), PX_OK);
  return r;
}

static void test_register_returns_id_and_heartbeat_settings(void **state) {
  fixture_t *f = *state;
  Prunex__V1__Device dev = PRUNEX__V1__DEVICE__INIT, *dp = &dev;
  dev.index = 3;
  dev.kind = PRUNEX__V1__DEVICE_KIND__DEVICE_KIND_CUDA;
  dev.name = "NVIDIA H100";
  dev.memory_bytes = 80ull << 30;
  dev.healthy = 1;
  char *addrs[2] = {"ucx://a", "tcp://10.0.0.1:1234"};
  Prunex__V1__RegisterNodeRequest req = PRUNEX__V1__REGISTER_NODE_REQUEST__INIT;
  req.name = "gpu-node-1";
  req.hostname = "host1.example";
  req.n_devices = 1;
  req.devices = &dp;
  req.n_data_plane_addresses = 2;
  req.data_plane_addresses = addrs;
  Prunex__V1__RegisterNodeResponse *r = NULL;
  int64_t before = (int64_t)time(NULL) * 1000 - 1000;
  assert_int_equal(px_rpc_register_node(f->ch, &req, 0, &r), PX_OK);
  assert_true(strncmp(r->node_id, "node-", 5) == 0);
  assert_int_equal(r->heartbeat_timeout_ms, 15000);
  assert_true(r->heartbeat_interval_ms > 0 && r->heartbeat_interval_ms < r->heartbeat_timeout_ms);
  Prunex__V1__ListNodesResponse *l = list_nodes(f->ch, 0);
  assert_int_equal(l->n_nodes, 1);
  Prunex__V1__Node *n = l->nodes[0];
  assert_string_equal(n->node_id, r->node_id);
  assert_string_equal(n->name, "gpu-node-1");
  assert_string_equal(n->hostname, "host1.example");
  assert_int_equal(n->state, PRUNEX__V1__NODE_STATE__NODE_STATE_READY);
  assert_int_equal(n->n_devices, 1);
  assert_int_equal(n->devices[0]->index, 3);
  assert_int_equal(n->devices[0]->kind, PRUNEX__V1__DEVICE_KIND__DEVICE_KIND_CUDA);
  assert_string_equal(n->devices[0]->name, "NVIDIA H100");
  assert_true(n->devices[0]->memory_bytes == 80ull << 30);
  assert_true(n->devices[0]->healthy);
  assert_int_equal(n->n_data_plane_addresses, 2);
  assert_string_equal(n->data_plane_addresses[1], "tcp://10.0.0.1:1234");
  assert_string_equal(n->job_id, "");
  assert_true(n->registered_unix_ms >= before);
  assert_true(n->last_heartbeat_unix_ms >= n->registered_unix_ms);
  px_rpc_message_free(l);
  px_rpc_message_free(r);
}

static void test_reregistering_by_name_reuses_the_node(void **state) {
  fixture_t *f = *state;
  char a[64], b[64], c[64];
  assert_int_equal(pxt_register(f->ch, "alpha", 2, 0, a, sizeof a), PX_OK);
  assert_int_equal(pxt_register(f->ch, "beta", 1, 0, b, sizeof b), PX_OK);
  assert_string_not_equal(a, b);
  assert_int_equal(pxt_register(f->ch, "alpha", 4, 0, c, sizeof c), PX_OK);
  assert_string_equal(a, c);
  Prunex__V1__ListNodesResponse *l = list_nodes(f->ch, 0);
  assert_int_equal(l->n_nodes, 2);
  assert_string_equal(l->nodes[0]->node_id, a); /* registration order */
  assert_int_equal(l->nodes[0]->n_devices, 4);  /* the new device list */
  px_rpc_message_free(l);
}

static void test_register_validation(void **state) {
  fixture_t *f = *state;
  Prunex__V1__RegisterNodeRequest req = PRUNEX__V1__REGISTER_NODE_REQUEST__INIT;
  Prunex__V1__RegisterNodeResponse *r = NULL;
  assert_int_equal(px_rpc_register_node(f->ch, &req, 0, &r), PX_ERR_INVALID);
  assert_int_equal(px_rpc_last_code(), PX_RPC_INVALID_ARGUMENT);
  assert_non_null(strstr(px_last_error(), "name"));
  Prunex__V1__Device dev = PRUNEX__V1__DEVICE__INIT, *dp = &dev;
  dev.index = -1;
  req.name = "n";
  req.n_devices = 1;
  req.devices = &dp;
  assert_int_equal(px_rpc_register_node(f->ch, &req, 0, &r), PX_ERR_INVALID);
  assert_non_null(strstr(px_last_error(), "devices[0].index"));
  assert_null(r);
}

static void test_heartbeat_known_unknown_and_invalid(void **state) {
  fixture_t *f = *state;
  char id[64];
  assert_int_equal(pxt_register(f->ch, "n1", 1, 0, id, sizeof id), PX_OK);
  int known = -1;
  assert_int_equal(heartbeat(f->ch, id, &known), PX_OK);
  assert_int_equal(known, 1);
  assert_int_equal(heartbeat(f->ch, "node-4242", &known), PX_OK);
  assert_int_equal(known, 0);
  assert_int_equal(heartbeat(f->ch, "", &known), PX_ERR_INVALID);
  assert_int_equal(px_rpc_last_code(), PX_RPC_INVALID_ARGUMENT);
}

static void test_heartbeat_updates_device_health(void **state) {
  fixture_t *f = *state;
  char id[64];
  assert_int_equal(pxt_register(f->ch, "n1", 2, 0, id, sizeof id), PX_OK);
  /* a heartbeat lists the node's devices (as pxt_register made them) */
  Prunex__V1__Device dev[2], *dp[2];
  for (int i = 0; i < 2; i++) {
    dev[i] = (Prunex__V1__Device)PRUNEX__V1__DEVICE__INIT;
    dev[i].index = i;
    dev[i].kind = PRUNEX__V1__DEVICE_KIND__DEVICE_KIND_CPU;
    dev[i].name = "cpu";
    dev[i].healthy = i == 0;
    dp[i] = &dev[i];
  }
  Prunex__V1__HeartbeatRequest req = PRUNEX__V1__HEARTBEAT_REQUEST__INIT;
  req.node_id = id;
  req.n_devices = 2;
  req.devices = dp;
  Prunex__V1__HeartbeatResponse *r = NULL;
  assert_int_equal(px_rpc_heartbeat(f->ch, &req, 0, &r), PX_OK);
  px_rpc_message_free(r);
  Prunex__V1__ListNodesResponse *l = list_nodes(f->ch, 0);
  assert_int_equal(l->nodes[0]->n_devices, 2);
  assert_true(l->nodes[0]->devices[0]->healthy);
  assert_false(l->nodes[0]->devices[1]->healthy);
  px_rpc_message_free(l);

  /* A RegisterNode that claims 4 devices (it used to last until
   * the agent restarted) is corrected by the next heartbeat, which lists
   * the 2 the agent has. */
  assert_int_equal(pxt_register(f->ch, "n1", 4, 0, NULL, 0), PX_OK);
  l = list_nodes(f->ch, 0);
  assert_int_equal(l->nodes[0]->n_devices, 4);
  px_rpc_message_free(l);
  dev[1].healthy = 1;
  assert_int_equal(px_rpc_heartbeat(f->ch, &req, 0, &r), PX_OK);
  px_rpc_message_free(r);
  l = list_nodes(f->ch, 0);
  assert_int_equal(l->nodes[0]->n_devices, 2);
  assert_true(l->nodes[0]->devices[1]->healthy);
  px_rpc_message_free(l);
  /* a device without a valid index is refused, naming it */
  dev[1].index = -2;
  assert_int_not_equal(px_rpc_heartbeat(f->ch, &req, 0, &r), PX_OK);
  assert_int_equal(px_rpc_last_code(), PX_RPC_INVALID_ARGUMENT);
  assert_non_null(strstr(px_last_error(), "devices[1]"));
}

static void test_heartbeat_tells_the_agent_what_to_stop(void **state) {
  fixture_t *f = *state;
  char id[64], other[64], running[64], cancelled[64];
  assert_int_equal(pxt_register(f->ch, "n1", 1, 0, id, sizeof id), PX_OK);
  assert_int_equal(pxt_register(f->ch, "n2", 1, 0, other, sizeof other), PX_OK);
  assert_int_equal(pxt_submit_mp(f->ch, 1, 1, running, sizeof running), PX_OK);     /* on n1 */
  assert_int_equal(pxt_submit_mp(f->ch, 1, 1, cancelled, sizeof cancelled), PX_OK); /* on n2 */
  Prunex__V1__CancelJobResponse *cr = NULL;
  assert_int_equal(px_rpc_cancel_job(f->ch, cancelled, "test", 0, &cr), PX_OK);
  px_rpc_message_free(cr);
  char *jobs[3] = {running, cancelled, "job-999999"};
  Prunex__V1__HeartbeatRequest req = PRUNEX__V1__HEARTBEAT_REQUEST__INIT;
  req.node_id = id;
  req.n_running_job_ids = 3;
  req.running_job_ids = jobs;
  Prunex__V1__HeartbeatResponse *r = NULL;
  assert_int_equal(px_rpc_heartbeat(f->ch, &req, 0, &r), PX_OK);
  assert_true(r->known);
  assert_int_equal(r->n_cancel_job_ids, 2);
  assert_string_equal(r->cancel_job_ids[0], cancelled);
  assert_string_equal(r->cancel_job_ids[1], "job-999999");
  px_rpc_message_free(r);
}

static void test_missed_heartbeats_make_a_node_lost(void **state) {
  fixture_t *f = *state; /* heartbeat timeout 600 ms */
  char a[64], b[64];
  assert_int_equal(pxt_register(f->ch, "steady", 1, 0, a, sizeof a), PX_OK);
  assert_int_equal(pxt_register(f->ch, "silent", 1, 0, b, sizeof b), PX_OK);
  /* a heartbeats every 100 ms for 1.5 s; b says nothing. */
  int64_t end = pxt_now_ms() + 1500;
  while (pxt_now_ms() < end) {
    int known = 0;
    assert_int_equal(heartbeat(f->ch, a, &known), PX_OK);
    assert_int_equal(known, 1);
    pxt_sleep_ms(100);
  }
  assert_int_equal(pxt_node_state(f->ch, a), PRUNEX__V1__NODE_STATE__NODE_STATE_READY);
  assert_int_equal(pxt_node_state(f->ch, b), PRUNEX__V1__NODE_STATE__NODE_STATE_LOST);
  Prunex__V1__ListNodesResponse *l = list_nodes(f->ch, PRUNEX__V1__NODE_STATE__NODE_STATE_LOST);
  assert_int_equal(l->n_nodes, 1);
  assert_string_equal(l->nodes[0]->node_id, b);
  px_rpc_message_free(l);
  l = list_nodes(f->ch, PRUNEX__V1__NODE_STATE__NODE_STATE_READY);
  assert_int_equal(l->n_nodes, 1);
  assert_string_equal(l->nodes[0]->node_id, a);
  px_rpc_message_free(l);
  /* A LOST node is not placed; a heartbeat brings it back, and then it is. */
  char job[64];
  assert_int_equal(pxt_submit_mp(f->ch, 2, 1, job, sizeof job), PX_OK);
  assert_int_equal(heartbeat(f->ch, a, NULL), PX_OK);
  assert_int_equal(pxt_job_state(f->ch, job), PRUNEX__V1__JOB_STATE__JOB_STATE_PENDING);
  int known = 0;
  assert_int_equal(heartbeat(f->ch, b, &known), PX_OK);
  assert_int_equal(known, 1);
  assert_int_equal(pxt_job_state(f->ch, job), PRUNEX__V1__JOB_STATE__JOB_STATE_SCHEDULED);
  assert_int_equal(pxt_node_state(f->ch, b), PRUNEX__V1__NODE_STATE__NODE_STATE_BUSY);
  /* A BUSY node that goes silent is LOST and its job FAILED naming it; the
   * node's ranks get exit records; the other node is free again. */
  end = pxt_now_ms() + 3000; /* a keeps heartbeating */
  while (pxt_node_state(f->ch, b) != PRUNEX__V1__NODE_STATE__NODE_STATE_LOST && pxt_now_ms() < end) {
    assert_int_equal(heartbeat(f->ch, a, NULL), PX_OK);
    pxt_sleep_ms(100);
  }
  assert_int_equal(pxt_node_state(f->ch, b), PRUNEX__V1__NODE_STATE__NODE_STATE_LOST);
  Prunex__V1__Job *j = NULL;
  assert_int_equal(px_rpc_get_job(f->ch, job, 0, &j), PX_OK);
  assert_int_equal(j->state, PRUNEX__V1__JOB_STATE__JOB_STATE_FAILED);
  if (!strstr(j->reason, "silent")) fail_msg("reason: %s", j->reason);
  assert_non_null(strstr(j->reason, "lost: no heartbeat"));
  px_rpc_message_free(j);
  assert_int_equal(pxt_node_state(f->ch, a), PRUNEX__V1__NODE_STATE__NODE_STATE_READY);
  /* Heard from again, it is READY (its job is over). */
  assert_int_equal(heartbeat(f->ch, b, NULL), PX_OK);
  assert_int_equal(pxt_node_state(f->ch, b), PRUNEX__V1__NODE_STATE__NODE_STATE_READY);
}

static void test_list_nodes_rejects_unknown_state(void **state) {
  fixture_t *f = *state;
  Prunex__V1__ListNodesRequest req = PRUNEX__V1__LIST_NODES_REQUEST__INIT;
  req.state = (Prunex__V1__NodeState)9;
  Prunex__V1__ListNodesResponse *r = NULL;
  assert_int_equal(px_rpc_list_nodes(f->ch, &req, 0, &r), PX_ERR_INVALID);
  assert_int_equal(px_rpc_last_code(), PX_RPC_INVALID_ARGUMENT);
  assert_null(r);
  r = list_nodes(f->ch, 0);
  assert_int_equal(r->n_nodes, 0);
  px_rpc_message_free(r);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test_setup_teardown(test_register_returns_id_and_heartbeat_settings, setup,
                                      teardown),
      cmocka_unit_test_setup_teardown(test_reregistering_by_name_reuses_the_node, setup, teardown),
      cmocka_unit_test_setup_teardown(test_register_validation, setup, teardown),
      cmocka_unit_test_setup_teardown(test_heartbeat_known_unknown_and_invalid, setup, teardown),
      cmocka_unit_test_setup_teardown(test_heartbeat_updates_device_health, setup, teardown),
      cmocka_unit_test_setup_teardown(test_heartbeat_tells_the_agent_what_to_stop, setup,
                                      teardown),
      cmocka_unit_test_setup_teardown(test_missed_heartbeats_make_a_node_lost,
                                      setup_short_timeout, teardown),
      cmocka_unit_test_setup_teardown(test_list_nodes_rejects_unknown_state, setup, teardown),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
