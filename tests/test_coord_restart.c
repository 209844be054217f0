/* pxcoordd survives restarts and refuses bad databases: after SIGTERM and
 * after kill -9, a coordinator restarted on the same database has every
 * job, event, node, rendezvous key, metric and control state it had (nodes
 * LOST until heard from, running jobs as they were); a file that is not a
 * database, a corrupt or truncated one, an unreadable path, and a database
 * from a newer schema are refused with a message naming the file. */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>

#include <cmocka.h>

#include "coord_harness.h"
#include "prunex/store.h"

#define JS(x) PRUNEX__V1__JOB_STATE__JOB_STATE_##x
#define NS(x) PRUNEX__V1__NODE_STATE__NODE_STATE_##x

typedef struct {
  pxt_coordd_t d;
  char node_a[64], node_b[64];
  char done[64], running[64], pending[64];
  size_t done_events;
} world_t;

static int setup(void **state) {
  world_t *w = calloc(1, sizeof *w);
  if (!w || pxt_coordd_setup(&w->d, NULL) != 0) {
    free(w);
    return -1;
  }
  *state = w;
  return 0;
}

static int teardown(void **state) {
  world_t *w = *state;
  int rc = pxt_coordd_teardown(&w->d);
  free(w);
  return rc;
}

static Prunex__V1__ControlDecision *report(px_rpc_channel_t *ch, const char *job, int it) {
  Prunex__V1__LayerMetrics L = PRUNEX__V1__LAYER_METRICS__INIT, *lp = &L;
  L.layer = 0;
  L.name = "conv1.weight";
  L.r_intra = L.r_inter = 100.0;
  L.s_intra = L.s_inter = 1.0;
  L.rho1 = L.rho2 = 1.0;
  L.theta_norm = L.zi_norm = L.z_norm = L.u_norm = L.v_norm = 5.0;
  L.numel = 4096;
  Prunex__V1__IterationReport r = PRUNEX__V1__ITERATION_REPORT__INIT;
  r.job_id = (char *)job;
  r.iteration = it;
  r.loss = 3.0 - it;
  r.mask_drift = 0;
  r.n_layers = 1;
  r.layers = &lp;
  Prunex__V1__ControlDecision *d = NULL;
  assert_int_equal(px_rpc_report_iteration(ch, &r, 0, &d), PX_OK);
  return d;
}

static void kv_put(px_rpc_channel_t *ch, const char *job, const char *key, const char *v) {
  Prunex__V1__KvPutRequest req = PRUNEX__V1__KV_PUT_REQUEST__INIT;
  req.job_id = (char *)job;
  req.key = (char *)key;
  req.value.data = (uint8_t *)v;
  req.value.len = strlen(v);
  assert_int_equal(px_rpc_kv_put(ch, &req, 0), PX_OK);
}

static void exit_rank(px_rpc_channel_t *ch, const char *job, int rank) {
  Prunex__V1__RankExit ex = PRUNEX__V1__RANK_EXIT__INIT;
  ex.job_id = (char *)job;
  ex.rank = rank;
  assert_int_equal(px_rpc_report_rank_exit(ch, &ex, 0), PX_OK);
}

/* Two 1-device nodes; a finished job, a running job with 3 iterations
 * (rho 1 -> 2 -> 4 -> 8 decided), a pending 2-node job, KV keys. */
static void build_world(world_t *w) {
  px_rpc_channel_t *ch = NULL;
  assert_int_equal(px_rpc_channel_create(w->d.target, &ch), PX_OK);
  assert_int_equal(pxt_register(ch, "a", 1, 0, w->node_a, sizeof w->node_a), PX_OK);
  assert_int_equal(pxt_submit_mp(ch, 1, 1, w->done, sizeof w->done), PX_OK);
  assert_int_equal(pxt_job_state(ch, w->done), JS(SCHEDULED));
  exit_rank(ch, w->done, 0);
  assert_int_equal(pxt_submit_mp(ch, 1, 1, w->running, sizeof w->running), PX_OK);
  assert_int_equal(pxt_job_state(ch, w->running), JS(SCHEDULED));
  for (int it = 0; it < 3; it++) px_rpc_message_free(report(ch, w->running, it));
  kv_put(ch, w->running, "nccl/id", "unique-id-bytes");
  kv_put(ch, w->running, "ucx/0", "worker-address-0");
  assert_int_equal(pxt_register(ch, "b", 1, 0, w->node_b, sizeof w->node_b), PX_OK);
  assert_int_equal(pxt_submit_mp(ch, 2, 1, w->pending, sizeof w->pending), PX_OK);
  Prunex__V1__Job *j = NULL;
  assert_int_equal(px_rpc_get_job(ch, w->done, 0, &j), PX_OK);
  assert_int_equal(j->state, JS(SUCCEEDED));
  w->done_events = j->n_events;
  px_rpc_message_free(j);
  px_rpc_channel_destroy(ch);
}

/* Everything build_world made is there after a restart. */
static void check_world(world_t *w) {
  px_rpc_channel_t *ch = NULL;
  assert_int_equal(px_rpc_channel_create(w->d.target, &ch), PX_OK);
  Prunex__V1__Job *j = NULL;
  assert_int_equal(px_rpc_get_job(ch, w->done, 0, &j), PX_OK);
  assert_int_equal(j->state, JS(SUCCEEDED));
  assert_int_equal(j->n_events, w->done_events);
  assert_int_equal(j->events[w->done_events - 1]->to_state, JS(SUCCEEDED));
  px_rpc_message_free(j);
  assert_int_equal(px_rpc_get_job(ch, w->running, 0, &j), PX_OK);
  assert_int_equal(j->state, JS(RUNNING));
  assert_int_equal(j->iteration, 2);
  assert_int_equal(j->n_node_ids, 1);
  assert_string_equal(j->node_ids[0], w->node_a);
  px_rpc_message_free(j);
  assert_int_equal(pxt_job_state(ch, w->pending), JS(PENDING));

  /* Nodes are LOST until they are heard from. */
  assert_int_equal(pxt_node_state(ch, w->node_a), NS(LOST));
  assert_int_equal(pxt_node_state(ch, w->node_b), NS(LOST));

  /* Rendezvous keys. */
  Prunex__V1__KvGetRequest kreq = PRUNEX__V1__KV_GET_REQUEST__INIT;
  kreq.job_id = w->running;
  kreq.key = "nccl/id";
  Prunex__V1__KvGetResponse *kr = NULL;
  assert_int_equal(px_rpc_kv_get(ch, &kreq, 0, &kr), PX_OK);
  assert_true(kr->found);
  assert_int_equal(kr->value.len, strlen("unique-id-bytes"));
  assert_memory_equal(kr->value.data, "unique-id-bytes", kr->value.len);
  px_rpc_message_free(kr);

  /* Metrics, with their layers. */
  Prunex__V1__GetIterationsRequest q = PRUNEX__V1__GET_ITERATIONS_REQUEST__INIT;
  q.job_id = w->running;
  q.include_layers = 1;
  Prunex__V1__GetIterationsResponse *g = NULL;
  assert_int_equal(px_rpc_get_iterations(ch, &q, 0, &g), PX_OK);
  assert_int_equal(g->n_iterations, 3);
  assert_true(g->iterations[2]->loss == 1.0);
  assert_int_equal(g->iterations[2]->n_layers, 1);
  assert_int_equal(g->iterations[2]->layers[0]->numel, 4096);
  px_rpc_message_free(g);

  /* Control state: a retried report gets its old answer, the next one
   * continues from the persisted penalty (8 -> 16). */
  Prunex__V1__ControlDecision *d = report(ch, w->running, 2);
  assert_true(d->layers[0]->rho1 == 8.0);
  px_rpc_message_free(d);
  d = report(ch, w->running, 3);
  assert_true(d->layers[0]->rho1 == 16.0);
  px_rpc_message_free(d);

  /* The running job's node gets its assignment again when it reconnects,
   * and comes back BUSY with a heartbeat; b comes back READY. */
  px_rpc_stream_t *s = NULL;
  assert_int_equal(px_rpc_watch_assignments(ch, w->node_a, &s), PX_OK);
  Prunex__V1__Assignment *as = pxt_next_assignment(s, 5000);
  assert_non_null(as);
  assert_string_equal(as->job_id, w->running);
  px_rpc_message_free(as);
  Prunex__V1__HeartbeatRequest hb = PRUNEX__V1__HEARTBEAT_REQUEST__INIT;
  Prunex__V1__HeartbeatResponse *hr = NULL;
  hb.node_id = w->node_a;
  assert_int_equal(px_rpc_heartbeat(ch, &hb, 0, &hr), PX_OK);
  assert_true(hr->known);
  px_rpc_message_free(hr);
  hb.node_id = w->node_b;
  assert_int_equal(px_rpc_heartbeat(ch, &hb, 0, &hr), PX_OK);
  px_rpc_message_free(hr);
  assert_int_equal(pxt_node_state(ch, w->node_a), NS(BUSY));
  assert_int_equal(pxt_node_state(ch, w->node_b), NS(READY));
  /* The queue goes on: the running job ends, the pending one is placed. */
  exit_rank(ch, w->running, 0);
  assert_int_equal(pxt_job_state(ch, w->running), JS(SUCCEEDED));
  assert_int_equal(pxt_job_state(ch, w->pending), JS(SCHEDULED));
  px_rpc_stream_destroy(s);
  px_rpc_channel_destroy(ch);
}

static void test_restart_after_sigterm_keeps_everything(void **state) {
  world_t *w = *state;
  build_world(w);
  int status = pxt_coordd_stop(&w->d, SIGTERM);
  assert_true(WIFEXITED(status));
  assert_int_equal(WEXITSTATUS(status), 0);
  assert_int_equal(pxt_coordd_start(&w->d, NULL), 0);
  check_world(w);
}

static void test_restart_after_kill_9_keeps_everything(void **state) {
  world_t *w = *state;
  build_world(w);
  int status = pxt_coordd_stop(&w->d, SIGKILL);
  assert_true(WIFSIGNALED(status));
  assert_int_equal(pxt_coordd_start(&w->d, NULL), 0);
  check_world(w);
}

/* Runs pxcoordd on db, expecting it to refuse: exit 1 and the path named. */
static void expect_refused(const char *dir, const char *db, const char *what) {
  const char *args[] = {"--db", db, "--listen", "127.0.0.1:0", NULL};
  char out[256], err[4096];
  int rc = pxt_coordd_run(dir, args, out, sizeof out, err, sizeof err, 20000);
  if (rc != 1 || !strstr(err, db) || (what && !strstr(err, what)))
    fail_msg("expected exit 1 naming %s%s%s, got %d: stdout '%s' stderr '%s'", db,
             what ? " and " : "", what ? what : "", rc, out, err);
  assert_null(strstr(out, "listening on"));
}

static void test_garbage_file_is_refused(void **state) {
  world_t *w = *state;
  pxt_coordd_stop(&w->d, SIGTERM);
  char db[400];
  snprintf(db, sizeof db, "%s/garbage.db", w->d.dir);
  FILE *f = fopen(db, "wb");
  assert_non_null(f);
  for (int i = 0; i < 20000; i++) fputc((i * 31 + 7) & 0xff, f);
  fclose(f);
  assert_int_equal(chmod(db, 0600), 0); /* private, as pxcoordd wants: refused for its bytes */
  expect_refused(w->d.dir, db, "not a database");
}

static void corrupt(const char *path, long offset, size_t len) {
  int fd = open(path, O_WRONLY);
  assert_true(fd >= 0);
  char junk[8192];
  memset(junk, 0xA5, sizeof junk);
  assert_true(len <= sizeof junk);
  assert_int_equal(pwrite(fd, junk, len, offset), (ssize_t)len);
  close(fd);
}

/* Fills the database with enough rows to span many pages, then stops. */
static void fill_and_stop(world_t *w) {
  px_rpc_channel_t *ch = NULL;
  assert_int_equal(px_rpc_channel_create(w->d.target, &ch), PX_OK);
  char job[64];
  assert_int_equal(pxt_submit_mp(ch, 1, 1, job, sizeof job), PX_OK);
  char val[1024];
  memset(val, 'v', sizeof val - 1);
  val[sizeof val - 1] = '\0';
  for (int i = 0; i < 200; i++) {
    char key[32];
    snprintf(key, sizeof key, "key/%d", i);
    kv_put(ch, job, key, val);
  }
  px_rpc_channel_destroy(ch);
  int status = pxt_coordd_stop(&w->d, SIGTERM);
  assert_true(WIFEXITED(status) && WEXITSTATUS(status) == 0);
  struct stat sb;
  assert_int_equal(stat(w->d.db, &sb), 0);
  assert_true(sb.st_size > 40 * 4096);
}

static void test_corrupt_pages_are_refused(void **state) {
  world_t *w = *state;
  fill_and_stop(w);
  corrupt(w->d.db, 10 * 4096, 8192);
  expect_refused(w->d.dir, w->d.db, NULL);
}

static void test_truncated_database_is_refused(void **state) {
  world_t *w = *state;
  fill_and_stop(w);
  struct stat sb;
  assert_int_equal(stat(w->d.db, &sb), 0);
  assert_int_equal(truncate(w->d.db, sb.st_size / 3), 0);
  expect_refused(w->d.dir, w->d.db, NULL);
}

static void test_unreadable_paths_are_refused(void **state) {
  world_t *w = *state;
  pxt_coordd_stop(&w->d, SIGTERM);
  expect_refused(w->d.dir, w->d.dir, NULL); /* a directory */
  char db[400];
  snprintf(db, sizeof db, "%s/no/such/dir/coord.db", w->d.dir);
  expect_refused(w->d.dir, db, NULL);
}

static void test_newer_schema_is_refused(void **state) {
  world_t *w = *state;
  pxt_coordd_stop(&w->d, SIGTERM);
  char db[400];
  snprintf(db, sizeof db, "%s/future.db", w->d.dir);
  static const px_store_migration_t m[] = {{1, "CREATE TABLE future (x INTEGER)"}};
  px_store_options_t o = {.schema = "coordinator", .migrations = m, .nmigrations = 1, .create = 1};
  px_store_t *s = NULL;
  assert_int_equal(px_store_open(db, &o, &s), PX_OK);
  assert_int_equal(px_store_exec(s, "UPDATE schema_version SET version = 1000"), PX_OK);
  px_store_close(s);
  assert_int_equal(chmod(db, 0600), 0);
  expect_refused(w->d.dir, db, "1000");
  expect_refused(w->d.dir, db, "newer");
  /* And a database of another program. */
  snprintf(db, sizeof db, "%s/other.db", w->d.dir);
  o.schema = "agent-metrics";
  assert_int_equal(px_store_open(db, &o, &s), PX_OK);
  px_store_close(s);
  assert_int_equal(chmod(db, 0600), 0);
  expect_refused(w->d.dir, db, "agent-metrics");
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test_setup_teardown(test_restart_after_sigterm_keeps_everything, setup,
                                      teardown),
      cmocka_unit_test_setup_teardown(test_restart_after_kill_9_keeps_everything, setup,
                                      teardown),
      cmocka_unit_test_setup_teardown(test_garbage_file_is_refused, setup, teardown),
      cmocka_unit_test_setup_teardown(test_corrupt_pages_are_refused, setup, teardown),
      cmocka_unit_test_setup_teardown(test_truncated_database_is_refused, setup, teardown),
      cmocka_unit_test_setup_teardown(test_unreadable_paths_are_refused, setup, teardown),
      cmocka_unit_test_setup_teardown(test_newer_schema_is_refused, setup, teardown),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
