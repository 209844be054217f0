/* The control-plane client (prunex/rpc.h) against a real pxcoordd: status
 * mapping (UNAVAILABLE, UNIMPLEMENTED, INVALID_ARGUMENT for malformed bytes,
 * DEADLINE_EXCEEDED), messages that name the method, server-stream reads
 * with timeouts, cancellation from another thread, and a daemon that shuts
 * down cleanly on SIGTERM while calls are open. */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>

#include <arpa/inet.h>
#include <netinet/in.h>
#include <pthread.h>
#include <sys/socket.h>

#include <cmocka.h>

#include "coord_harness.h"

static int setup(void **state) {
  pxt_coordd_t *d = calloc(1, sizeof *d);
  assert_non_null(d);
  if (pxt_coordd_setup(d, NULL) != 0) {
    free(d);
    return -1;
  }
  *state = d;
  return 0;
}

static int teardown(void **state) {
  pxt_coordd_t *d = *state;
  int rc = pxt_coordd_teardown(d);
  free(d);
  return rc;
}

/* A loopback port nobody listens on (bound, then closed). */
static int closed_port(void) {
  int fd = socket(AF_INET, SOCK_STREAM, 0);
  struct sockaddr_in a = {0};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  assert_int_equal(bind(fd, (struct sockaddr *)&a, sizeof a), 0);
  socklen_t len = sizeof a;
  assert_int_equal(getsockname(fd, (struct sockaddr *)&a, &len), 0);
  close(fd);
  return ntohs(a.sin_port);
}

static void test_channel_rejects_bad_targets(void **state) {
  (void)state;
  px_rpc_channel_t *ch = NULL;
  assert_int_equal(px_rpc_channel_create("", &ch), PX_ERR_INVALID);
  assert_int_equal(px_rpc_channel_create("no-port", &ch), PX_ERR_INVALID);
  assert_int_equal(px_rpc_channel_create("host:", &ch), PX_ERR_INVALID);
  assert_null(ch);
  assert_int_equal(px_rpc_last_code(), PX_RPC_UNKNOWN);
}

static void test_nobody_listening_is_unavailable_naming_the_method(void **state) {
  (void)state;
  char target[64];
  snprintf(target, sizeof target, "127.0.0.1:%d", closed_port());
  px_rpc_channel_t *ch = NULL;
  assert_int_equal(px_rpc_channel_create(target, &ch), PX_OK);
  assert_string_equal(px_rpc_channel_target(ch), target);
  int64_t t0 = pxt_now_ms();
  Prunex__V1__Job *job = NULL;
  assert_int_equal(px_rpc_get_job(ch, "job-1", 5000, &job), PX_ERR_PEER);
  assert_true(pxt_now_ms() - t0 < 4000); /* fails fast, not at the deadline */
  assert_null(job);
  assert_int_equal(px_rpc_last_code(), PX_RPC_UNAVAILABLE);
  assert_non_null(strstr(px_last_error(), PX_RPC_GET_JOB));
  assert_non_null(strstr(px_last_error(), "UNAVAILABLE"));
  assert_int_equal(px_rpc_channel_wait_ready(ch, 300), PX_ERR_TIMEOUT);
  px_rpc_channel_destroy(ch);
}

static void test_channel_wait_ready_connects(void **state) {
  pxt_coordd_t *d = *state;
  px_rpc_channel_t *ch = NULL;
  assert_int_equal(px_rpc_channel_create(d->target, &ch), PX_OK);
  assert_int_equal(px_rpc_channel_wait_ready(ch, 5000), PX_OK);
  px_rpc_channel_destroy(ch);
}

static void test_unregistered_methods_are_unimplemented(void **state) {
  pxt_coordd_t *d = *state;
  px_rpc_channel_t *ch = NULL;
  assert_int_equal(px_rpc_channel_create(d->target, &ch), PX_OK);
  const char *paths[] = {"/prunex.v1.Jobs/NoSuchMethod", "/other.v9.Service/Method"};
  for (int i = 0; i < 2; i++) {
    void *resp = NULL;
    size_t len = 0;
    assert_int_equal(px_rpc_call_raw(ch, paths[i], "", 0, 5000, &resp, &len), PX_ERR_NOT_BUILT);
    assert_int_equal(px_rpc_last_code(), PX_RPC_UNIMPLEMENTED);
    assert_non_null(strstr(px_last_error(), paths[i]));
    assert_null(resp);
  }
  px_rpc_channel_destroy(ch);
}

static void test_malformed_requests_are_invalid_argument(void **state) {
  pxt_coordd_t *d = *state;
  px_rpc_channel_t *ch = NULL;
  assert_int_equal(px_rpc_channel_create(d->target, &ch), PX_OK);
  /* A length-delimited field whose length runs past the end, and a field
   * with wire type 7 (none): neither unpacks. */
  const unsigned char bad1[] = {0x0a, 0x50, 'x'};
  const unsigned char bad2[] = {0x0f, 0x01};
  const char *methods[] = {PX_RPC_GET_JOB, PX_RPC_SUBMIT_JOB, PX_RPC_KV_PUT,
                           PX_RPC_REPORT_ITERATION, PX_RPC_WATCH_JOB};
  for (size_t i = 0; i < sizeof methods / sizeof methods[0]; i++) {
    void *resp = NULL;
    size_t len = 0;
    assert_int_equal(px_rpc_call_raw(ch, methods[i], bad1, sizeof bad1, 5000, &resp, &len),
                     PX_ERR_INVALID);
    assert_int_equal(px_rpc_last_code(), PX_RPC_INVALID_ARGUMENT);
    assert_non_null(strstr(px_last_error(), "malformed"));
    assert_int_equal(px_rpc_call_raw(ch, methods[i], bad2, sizeof bad2, 5000, &resp, &len),
                     PX_ERR_INVALID);
  }
  /* A well-formed empty message is a valid request: GetJob with no id is
   * refused for what it says, not for how it is encoded. */
  void *resp = NULL;
  size_t len = 0;
  assert_int_equal(px_rpc_call_raw(ch, PX_RPC_GET_JOB, "", 0, 5000, &resp, &len), PX_ERR_INVALID);
  assert_non_null(strstr(px_last_error(), "job_id"));
  /* And a good request through the raw call unpacks on our side. */
  assert_int_equal(pxt_register(ch, "n1", 1, 0, NULL, 0), PX_OK);
  Prunex__V1__ListNodesRequest req = PRUNEX__V1__LIST_NODES_REQUEST__INIT;
  uint8_t buf[16];
  size_t n = prunex__v1__list_nodes_request__pack(&req, buf);
  assert_int_equal(px_rpc_call_raw(ch, PX_RPC_LIST_NODES, buf, n, 5000, &resp, &len), PX_OK);
  Prunex__V1__ListNodesResponse *nodes = prunex__v1__list_nodes_response__unpack(NULL, len, resp);
  assert_non_null(nodes);
  assert_int_equal(nodes->n_nodes, 1);
  prunex__v1__list_nodes_response__free_unpacked(nodes, NULL);
  px_free(resp);
  px_rpc_channel_destroy(ch);
}

static void test_deadline_exceeded_is_timeout(void **state) {
  pxt_coordd_t *d = *state;
  px_rpc_channel_t *ch = NULL;
  assert_int_equal(px_rpc_channel_create(d->target, &ch), PX_OK);
  char job[64];
  assert_int_equal(pxt_submit_mp(ch, 1, 1, job, sizeof job), PX_OK);
  Prunex__V1__KvGetRequest req = PRUNEX__V1__KV_GET_REQUEST__INIT;
  req.job_id = job;
  req.key = "never";
  req.wait_ms = 5000;
  ProtobufCMessage *resp = NULL;
  int64_t t0 = pxt_now_ms();
  /* The generic call does not extend the deadline by the wait. */
  assert_int_equal(px_rpc_call(ch, PX_RPC_KV_GET, &req.base, &prunex__v1__kv_get_response__descriptor,
                               300, &resp),
                   PX_ERR_TIMEOUT);
  int64_t took = pxt_now_ms() - t0;
  assert_true(took >= 250 && took < 3000);
  assert_int_equal(px_rpc_last_code(), PX_RPC_DEADLINE_EXCEEDED);
  assert_null(resp);
  /* The coordinator is still fine after the client gave up. */
  assert_int_equal(pxt_job_state(ch, job), PRUNEX__V1__JOB_STATE__JOB_STATE_PENDING);
  px_rpc_channel_destroy(ch);
}

typedef struct {
  px_rpc_stream_t *s;
  px_status_t st;
  int code;
  int64_t took;
} reader_t;

static void *read_forever(void *arg) {
  reader_t *r = arg;
  int64_t t0 = pxt_now_ms();
  ProtobufCMessage *m = NULL;
  r->st = px_rpc_stream_read(r->s, -1, &m);
  r->code = px_rpc_last_code();
  r->took = pxt_now_ms() - t0;
  px_rpc_message_free(m);
  return NULL;
}

static void test_stream_read_times_out_and_cancel_wakes_reader(void **state) {
  pxt_coordd_t *d = *state;
  px_rpc_channel_t *ch = NULL;
  assert_int_equal(px_rpc_channel_create(d->target, &ch), PX_OK);
  char node[64];
  assert_int_equal(pxt_register(ch, "n1", 1, 0, node, sizeof node), PX_OK);
  px_rpc_stream_t *s = NULL;
  assert_int_equal(px_rpc_watch_assignments(ch, node, &s), PX_OK);
  Prunex__V1__Assignment *a = NULL;
  int64_t t0 = pxt_now_ms();
  assert_int_equal(px_rpc_read_assignment(s, 200, &a), PX_ERR_TIMEOUT);
  assert_true(pxt_now_ms() - t0 >= 150);
  assert_null(a);
  /* Still usable after a timeout: a job placed now arrives. */
  char job[64];
  assert_int_equal(pxt_submit_mp(ch, 1, 1, job, sizeof job), PX_OK);
  a = pxt_next_assignment(s, 5000);
  assert_non_null(a);
  assert_string_equal(a->job_id, job);
  px_rpc_message_free(a);
  /* A reader blocked forever returns when another thread cancels. */
  reader_t r = {s, 0, 0, 0};
  pthread_t th;
  assert_int_equal(pthread_create(&th, NULL, read_forever, &r), 0);
  pxt_sleep_ms(200);
  px_rpc_stream_cancel(s);
  pthread_join(th, NULL);
  assert_int_equal(r.st, PX_ERR_PEER);
  assert_int_equal(r.code, PX_RPC_CANCELLED);
  assert_true(r.took < 3000);
  /* The end repeats. */
  assert_int_equal(px_rpc_read_assignment(s, 100, &a), PX_ERR_PEER);
  px_rpc_stream_destroy(s);
  px_rpc_channel_destroy(ch);
}

static void test_stream_error_status_ends_the_stream(void **state) {
  pxt_coordd_t *d = *state;
  px_rpc_channel_t *ch = NULL;
  assert_int_equal(px_rpc_channel_create(d->target, &ch), PX_OK);
  px_rpc_stream_t *s = NULL;
  assert_int_equal(px_rpc_watch_assignments(ch, "node-9999", &s), PX_OK);
  Prunex__V1__Assignment *a = NULL;
  assert_int_equal(px_rpc_read_assignment(s, 5000, &a), PX_ERR_INVALID);
  assert_int_equal(px_rpc_last_code(), PX_RPC_NOT_FOUND);
  assert_non_null(strstr(px_last_error(), "node-9999"));
  assert_int_equal(px_rpc_read_assignment(s, 5000, &a), PX_ERR_INVALID);
  assert_int_equal(px_rpc_last_code(), PX_RPC_NOT_FOUND);
  px_rpc_stream_destroy(s);
  /* Destroying a stream that was never read is fine too. */
  assert_int_equal(px_rpc_watch_job(ch, "job-000001", &s), PX_OK);
  px_rpc_stream_destroy(s);
  px_rpc_channel_destroy(ch);
}

typedef struct {
  const char *target;
  const char *job;
  px_status_t st;
  int found;
} kv_waiter_t;

static void *kv_wait(void *arg) {
  kv_waiter_t *w = arg;
  px_rpc_channel_t *ch = NULL;
  if (px_rpc_channel_create(w->target, &ch) != PX_OK) return NULL;
  Prunex__V1__KvGetRequest req = PRUNEX__V1__KV_GET_REQUEST__INIT;
  req.job_id = (char *)w->job;
  req.key = "never";
  req.wait_ms = 60000;
  Prunex__V1__KvGetResponse *r = NULL;
  w->st = px_rpc_kv_get(ch, &req, 0, &r);
  w->found = r ? r->found : -1;
  px_rpc_message_free(r);
  px_rpc_channel_destroy(ch);
  return NULL;
}

static void test_sigterm_with_open_calls_shuts_down_cleanly(void **state) {
  pxt_coordd_t *d = *state;
  px_rpc_channel_t *ch = NULL;
  assert_int_equal(px_rpc_channel_create(d->target, &ch), PX_OK);
  char node[64], job[64];
  assert_int_equal(pxt_register(ch, "n1", 1, 0, node, sizeof node), PX_OK);
  assert_int_equal(pxt_submit_mp(ch, 2, 1, job, sizeof job), PX_OK);
  px_rpc_stream_t *watch = NULL, *jobw = NULL;
  assert_int_equal(px_rpc_watch_assignments(ch, node, &watch), PX_OK);
  assert_int_equal(px_rpc_watch_job(ch, job, &jobw), PX_OK);
  Prunex__V1__JobUpdate *u = NULL;
  assert_int_equal(px_rpc_read_job_update(jobw, 5000, &u), PX_OK);
  px_rpc_message_free(u);
  kv_waiter_t w = {d->target, job, 0, 0};
  pthread_t th;
  assert_int_equal(pthread_create(&th, NULL, kv_wait, &w), 0);
  pxt_sleep_ms(300);
  int64_t t0 = pxt_now_ms();
  int status = pxt_coordd_stop(d, SIGTERM);
  assert_true(WIFEXITED(status));
  assert_int_equal(WEXITSTATUS(status), 0);
  assert_true(pxt_now_ms() - t0 < 5000);
  pthread_join(th, NULL);
  assert_int_not_equal(w.st, PX_OK); /* the parked call ended with an error */
  Prunex__V1__Assignment *a = NULL;
  assert_int_not_equal(px_rpc_read_assignment(watch, 5000, &a), PX_OK);
  assert_int_not_equal(px_rpc_read_job_update(jobw, 5000, &u), PX_OK);
  px_rpc_stream_destroy(watch);
  px_rpc_stream_destroy(jobw);
  px_rpc_channel_destroy(ch);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_channel_rejects_bad_targets),
      cmocka_unit_test(test_nobody_listening_is_unavailable_naming_the_method),
      cmocka_unit_test_setup_teardown(test_channel_wait_ready_connects, setup, teardown),
      cmocka_unit_test_setup_teardown(test_unregistered_methods_are_unimplemented, setup,
                                      teardown),
      cmocka_unit_test_setup_teardown(test_malformed_requests_are_invalid_argument, setup,
                                      teardown),
      cmocka_unit_test_setup_teardown(test_deadline_exceeded_is_timeout, setup, teardown),
      cmocka_unit_test_setup_teardown(test_stream_read_times_out_and_cancel_wakes_reader, setup,
                                      teardown),
      cmocka_unit_test_setup_teardown(test_stream_error_status_ends_the_stream, setup, teardown),
      cmocka_unit_test_setup_teardown(test_sigterm_with_open_calls_shuts_down_cleanly, setup,
                                      teardown),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
