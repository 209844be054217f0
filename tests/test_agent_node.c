/* pxagent as a node of the cluster, with the real pxcoordd on loopback:
 * it registers and shows up READY with its CPU devices; its heartbeats keep
 * the node READY past the heartbeat timeout and, once the agent is killed,
 * stop, so that the node becomes LOST; it survives a coordinator restart on
 * the same database (killed, then started again on the same port) and
 * registers again under the same node id; it shuts down cleanly on
 * SIGTERM; both programs refuse bad flags with exit status 2. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include "agent_harness.h"

typedef struct {
  pxt_coordd_t d;
  px_rpc_channel_t *ch;
  pxt_agent_t a;
} fixture_t;

static int setup_with(void **state, const char *const *coord_args) {
  fixture_t *f = calloc(1, sizeof *f);
  if (!f) return -1;
  f->a.pid = -1;
  if (pxt_coordd_setup(&f->d, coord_args) != 0) {
    free(f);
    return -1;
  }
  if (px_rpc_channel_create(f->d.target, &f->ch) != PX_OK) return -1;
  *state = f;
  return 0;
}

static int setup(void **state) { return setup_with(state, NULL); }

static int setup_short_timeout(void **state) {
  static const char *const args[] = {"--heartbeat-timeout-ms", "2000", NULL};
  return setup_with(state, args);
}

static int teardown(void **state) {
  fixture_t *f = *state;
  if (f->a.pid > 0) pxt_agent_stop(&f->a, SIGKILL, 5000);
  px_rpc_channel_destroy(f->ch);
  int rc = pxt_coordd_teardown(&f->d);
  free(f);
  return rc;
}

/* Fails the test after printing the logs. */
static void fail_with_logs(fixture_t *f, const char *what) {
  pxt_dump_file(f->a.log);
  pxt_coordd_dump_log(&f->d);
  fail_msg("%s", what);
}

/* Runs a program to its end (bounded): its exit code, 128 + signal, or -1. */
static int run_prog(const char *path, const char *const *argv, const char *log) {
  pid_t pid = pxt_spawn_logged(path, argv, log);
  if (pid < 0) return -1;
  int status = pxt_wait_pid(pid, 30000);
  if (status == -1) {
    kill(pid, SIGKILL);
    pxt_wait_pid(pid, 5000);
    return -1;
  }
  return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
}

static void test_bad_flags_exit_2(void **state) {
  fixture_t *f = *state;
  char log[400];
  snprintf(log, sizeof log, "%s/usage.log", f->d.dir);
  const char *const a1[] = {PXT_AGENT, NULL};
  const char *const a2[] = {PXT_AGENT, "--coordinator", "nohostport", NULL};
  const char *const a3[] = {PXT_AGENT, "--coordinator", f->d.target, "--cpu-workers", "0", NULL};
  const char *const a4[] = {PXT_AGENT, "--coordinator", f->d.target, "--bogus", NULL};
  const char *const a5[] = {PXT_AGENT, "--help", NULL};
  assert_int_equal(run_prog(PXT_AGENT, a1, log), 2);
  assert_int_equal(run_prog(PXT_AGENT, a2, log), 2);
  assert_int_equal(run_prog(PXT_AGENT, a3, log), 2);
  assert_int_equal(run_prog(PXT_AGENT, a4, log), 2);
  assert_int_equal(run_prog(PXT_AGENT, a5, log), 0);
  const char *const w1[] = {PXT_WORKER, NULL};
  const char *const w2[] = {PXT_WORKER, "--coordinator", f->d.target, "--job", "j", "--rank", "3",
                            "--local-rank", "0", "--world-size", "4", "--node-index", "0",
                            "--num-nodes", "2", "--spec", "/nonexistent", NULL};
  const char *const w3[] = {PXT_WORKER, "--help", NULL};
  assert_int_equal(run_prog(PXT_WORKER, w1, log), 2);
  assert_int_equal(run_prog(PXT_WORKER, w2, log), 2); /* rank 3 is on node 1 */
  assert_int_equal(run_prog(PXT_WORKER, w3, log), 0);
  assert_true(pxt_file_contains(log, "--coordinator HOST:PORT is required"));
  assert_true(pxt_file_contains(log, "do not fit 2 nodes x 2 workers"));
  /* a spec that cannot be read is a runtime failure, named on stderr */
  const char *const w4[] = {PXT_WORKER, "--coordinator", f->d.target, "--job", "j", "--rank", "0",
                            "--local-rank", "0", "--world-size", "1", "--node-index", "0",
                            "--num-nodes", "1", "--spec", "/nonexistent/spec.pb", "--work-dir",
                            f->d.dir, NULL};
  assert_int_equal(run_prog(PXT_WORKER, w4, log), 1);
  assert_true(pxt_file_contains(log, "/nonexistent/spec.pb: cannot open"));
}

static void test_registers_ready_with_cpu_devices(void **state) {
  fixture_t *f = *state;
  assert_int_equal(pxt_agent_start(&f->a, &f->d, "alpha", 3, NULL), 0);
  if (!pxt_wait_node_named(f->ch, "alpha", PRUNEX__V1__NODE_STATE__NODE_STATE_READY, 20000))
    fail_with_logs(f, "the agent's node never became READY");
  Prunex__V1__ListNodesRequest req = PRUNEX__V1__LIST_NODES_REQUEST__INIT;
  Prunex__V1__ListNodesResponse *r = NULL;
  assert_int_equal(px_rpc_list_nodes(f->ch, &req, 0, &r), PX_OK);
  assert_int_equal(r->n_nodes, 1);
  const Prunex__V1__Node *n = r->nodes[0];
  assert_string_equal(n->name, "alpha");
  assert_true(n->hostname[0] != '\0');
  assert_int_equal(n->n_devices, 3);
  for (size_t i = 0; i < n->n_devices; i++) {
    assert_int_equal(n->devices[i]->index, (int)i);
    assert_int_equal(n->devices[i]->kind, PRUNEX__V1__DEVICE_KIND__DEVICE_KIND_CPU);
    assert_string_equal(n->devices[i]->name, "cpu");
    assert_true(n->devices[i]->healthy);
  }
  px_rpc_message_free(r);
  /* the work directory holds the metrics file before any job */
  char path[500];
  snprintf(path, sizeof path, "%s/metrics.db", f->a.work);
  assert_true(pxt_file_exists(path, 1));
  /* SIGTERM: a clean exit (under the sanitizers: no leak either) */
  int status = pxt_agent_stop(&f->a, SIGTERM, 15000);
  if (!pxt_exited_ok(status)) fail_with_logs(f, "pxagent did not exit cleanly on SIGTERM");
}

static void test_heartbeats_stop_when_killed_and_node_is_lost(void **state) {
  fixture_t *f = *state;
  assert_int_equal(pxt_agent_start(&f->a, &f->d, "beta", 1, NULL), 0);
  if (!pxt_wait_node_named(f->ch, "beta", PRUNEX__V1__NODE_STATE__NODE_STATE_READY, 20000))
    fail_with_logs(f, "the agent's node never became READY");
  /* twice the 2 s timeout: only heartbeats keep it READY */
  pxt_sleep_ms(4000);
  assert_int_equal(pxt_node_by_name(f->ch, "beta", NULL, 0),
                   PRUNEX__V1__NODE_STATE__NODE_STATE_READY);
  pxt_agent_stop(&f->a, SIGKILL, 5000);
  int64_t t0 = pxt_now_ms();
  if (!pxt_wait_node_named(f->ch, "beta", PRUNEX__V1__NODE_STATE__NODE_STATE_LOST, 15000))
    fail_with_logs(f, "the node of a killed agent never became LOST");
  int64_t took = pxt_now_ms() - t0;
  printf("node LOST %lld ms after the agent was killed (timeout 2000 ms)\n", (long long)took);
  assert_true(took >= 500);
}

static void test_reconnects_after_coordinator_restart(void **state) {
  fixture_t *f = *state;
  assert_int_equal(pxt_agent_start(&f->a, &f->d, "gamma", 2, NULL), 0);
  if (!pxt_wait_node_named(f->ch, "gamma", PRUNEX__V1__NODE_STATE__NODE_STATE_READY, 20000))
    fail_with_logs(f, "the agent's node never became READY");
  char id1[64], id2[64];
  assert_int_equal(pxt_node_by_name(f->ch, "gamma", id1, sizeof id1),
                   PRUNEX__V1__NODE_STATE__NODE_STATE_READY);
  for (int round = 0; round < 2; round++) {
    /* round 0: a crash (SIGKILL); round 1: a clean stop. Either way the
     * coordinator comes back on the same database and port, a moment later. */
    int st = pxt_coordd_stop(&f->d, round == 0 ? SIGKILL : SIGTERM);
    (void)st;
    pxt_sleep_ms(1500);
    char listen[64];
    snprintf(listen, sizeof listen, "127.0.0.1:%d", f->d.port);
    const char *const args[] = {"--listen", listen, NULL};
    int port = f->d.port;
    assert_int_equal(pxt_coordd_start(&f->d, args), 0);
    assert_int_equal(f->d.port, port);
    px_rpc_channel_destroy(f->ch);
    assert_int_equal(px_rpc_channel_create(f->d.target, &f->ch), PX_OK);
    /* the restarted coordinator marks every node LOST until it hears from it */
    if (!pxt_wait_node_named(f->ch, "gamma", PRUNEX__V1__NODE_STATE__NODE_STATE_READY, 30000))
      fail_with_logs(f, "the agent did not come back after the coordinator restarted");
    assert_int_equal(pxt_node_by_name(f->ch, "gamma", id2, sizeof id2),
                     PRUNEX__V1__NODE_STATE__NODE_STATE_READY);
    assert_string_equal(id1, id2);
    assert_int_equal(waitpid(f->a.pid, NULL, WNOHANG), 0); /* still running */
  }
  assert_true(pxt_file_contains(f->a.log, "re-registered node 'gamma'"));
  int status = pxt_agent_stop(&f->a, SIGTERM, 15000);
  if (!pxt_exited_ok(status)) fail_with_logs(f, "pxagent did not exit cleanly on SIGTERM");
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test_setup_teardown(test_bad_flags_exit_2, setup, teardown),
      cmocka_unit_test_setup_teardown(test_registers_ready_with_cpu_devices, setup, teardown),
      cmocka_unit_test_setup_teardown(test_heartbeats_stop_when_killed_and_node_is_lost,
                                      setup_short_timeout, teardown),
      cmocka_unit_test_setup_teardown(test_reconnects_after_coordinator_restart, setup, teardown),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
