/* pxcoordd's job-scoped rendezvous store: KvPut/KvGet, a KvGet that waits
 * and is woken by a later KvPut (while the coordinator keeps serving), a
 * wait that ends with found = false, validation, job scoping, and the
 * px_kv_t store over it (px_kv_open_coordinator). */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>

#include <pthread.h>

#include <cmocka.h>

#include "coord_harness.h"
#include "prunex/kv.h"

typedef struct {
  pxt_coordd_t d;
  px_rpc_channel_t *ch;
  char job[64];
} fixture_t;

static int setup(void **state) {
  fixture_t *f = calloc(1, sizeof *f);
  if (!f || pxt_coordd_setup(&f->d, NULL) != 0) {
    free(f);
    return -1;
  }
  if (px_rpc_channel_create(f->d.target, &f->ch) != PX_OK) return -1;
  if (pxt_submit_mp(f->ch, 2, 1, f->job, sizeof f->job) != PX_OK) return -1;
  *state = f;
  return 0;
}

static int teardown(void **state) {
  fixture_t *f = *state;
  px_rpc_channel_destroy(f->ch);
  int rc = pxt_coordd_teardown(&f->d);
  free(f);
  return rc;
}

static px_status_t put(px_rpc_channel_t *ch, const char *job, const char *key, const void *v,
                       size_t len) {
  Prunex__V1__KvPutRequest req = PRUNEX__V1__KV_PUT_REQUEST__INIT;
  req.job_id = (char *)job;
  req.key = (char *)key;
  req.value.data = (uint8_t *)v;
  req.value.len = len;
  return px_rpc_kv_put(ch, &req, 0);
}

static px_status_t get(px_rpc_channel_t *ch, const char *job, const char *key, int wait_ms,
                       Prunex__V1__KvGetResponse **r) {
  Prunex__V1__KvGetRequest req = PRUNEX__V1__KV_GET_REQUEST__INIT;
  req.job_id = (char *)job;
  req.key = (char *)key;
  req.wait_ms = wait_ms;
  return px_rpc_kv_get(ch, &req, 0, r);
}

static void test_put_then_get_round_trips_binary_values(void **state) {
  fixture_t *f = *state;
  const unsigned char v[6] = {0, 'u', 'c', 0, 'x', 255};
  assert_int_equal(put(f->ch, f->job, "ucx/addr/0", v, sizeof v), PX_OK);
  Prunex__V1__KvGetResponse *r = NULL;
  assert_int_equal(get(f->ch, f->job, "ucx/addr/0", 0, &r), PX_OK);
  assert_true(r->found);
  assert_int_equal(r->value.len, sizeof v);
  assert_memory_equal(r->value.data, v, sizeof v);
  px_rpc_message_free(r);
  /* Putting again replaces; an empty value is a value. */
  assert_int_equal(put(f->ch, f->job, "ucx/addr/0", "", 0), PX_OK);
  assert_int_equal(get(f->ch, f->job, "ucx/addr/0", 0, &r), PX_OK);
  assert_true(r->found);
  assert_int_equal(r->value.len, 0);
  px_rpc_message_free(r);
}

static void test_missing_key_without_wait_is_not_found(void **state) {
  fixture_t *f = *state;
  Prunex__V1__KvGetResponse *r = NULL;
  int64_t t0 = pxt_now_ms();
  assert_int_equal(get(f->ch, f->job, "absent", 0, &r), PX_OK);
  assert_false(r->found);
  assert_true(pxt_now_ms() - t0 < 1000);
  px_rpc_message_free(r);
}

typedef struct {
  const char *target, *job, *key;
  int wait_ms;
  px_status_t st;
  int found;
  char value[64];
  int64_t took;
} waiter_t;

static void *wait_for_key(void *arg) {
  waiter_t *w = arg;
  px_rpc_channel_t *ch = NULL;
  w->st = px_rpc_channel_create(w->target, &ch);
  if (w->st != PX_OK) return NULL;
  int64_t t0 = pxt_now_ms();
  Prunex__V1__KvGetResponse *r = NULL;
  w->st = get(ch, w->job, w->key, w->wait_ms, &r);
  w->took = pxt_now_ms() - t0;
  if (w->st == PX_OK) {
    w->found = r->found;
    snprintf(w->value, sizeof w->value, "%.*s", (int)r->value.len, (const char *)r->value.data);
  }
  px_rpc_message_free(r);
  px_rpc_channel_destroy(ch);
  return NULL;
}

static void test_waiting_get_is_woken_by_a_later_put(void **state) {
  fixture_t *f = *state;
  enum { N = 4 };
  waiter_t w[N];
  pthread_t th[N];
  for (int i = 0; i < N; i++) {
    w[i] = (waiter_t){f->d.target, f->job, "nccl/unique-id", 20000, -1, -1, "", 0};
    assert_int_equal(pthread_create(&th[i], NULL, wait_for_key, &w[i]), 0);
  }
  pxt_sleep_ms(400);
  /* While the gets are parked the coordinator answers everything else. */
  int64_t t0 = pxt_now_ms();
  assert_int_equal(pxt_job_state(f->ch, f->job), PRUNEX__V1__JOB_STATE__JOB_STATE_PENDING);
  assert_int_equal(put(f->ch, f->job, "other-key", "x", 1), PX_OK);
  assert_true(pxt_now_ms() - t0 < 1000);
  assert_int_equal(put(f->ch, f->job, "nccl/unique-id", "the-id", 6), PX_OK);
  for (int i = 0; i < N; i++) {
    pthread_join(th[i], NULL);
    assert_int_equal(w[i].st, PX_OK);
    assert_int_equal(w[i].found, 1);
    assert_string_equal(w[i].value, "the-id");
    assert_true(w[i].took >= 300);   /* it did wait */
    assert_true(w[i].took < 10000);  /* and was woken, not timed out */
  }
}

static void test_waiting_get_times_out_with_found_false(void **state) {
  fixture_t *f = *state;
  Prunex__V1__KvGetResponse *r = NULL;
  int64_t t0 = pxt_now_ms();
  assert_int_equal(get(f->ch, f->job, "never", 500, &r), PX_OK);
  int64_t took = pxt_now_ms() - t0;
  assert_false(r->found);
  assert_true(took >= 450 && took < 5000);
  px_rpc_message_free(r);
  /* A later put still works, and a late get finds it at once. */
  assert_int_equal(put(f->ch, f->job, "never", "now", 3), PX_OK);
  assert_int_equal(get(f->ch, f->job, "never", 5000, &r), PX_OK);
  assert_true(r->found);
  px_rpc_message_free(r);
}

static void test_kv_validation(void **state) {
  fixture_t *f = *state;
  Prunex__V1__KvGetResponse *r = NULL;
  assert_int_equal(put(f->ch, f->job, "has space", "x", 1), PX_ERR_INVALID);
  assert_int_equal(px_rpc_last_code(), PX_RPC_INVALID_ARGUMENT);
  assert_non_null(strstr(px_last_error(), "key"));
  assert_int_equal(put(f->ch, f->job, "", "x", 1), PX_ERR_INVALID);
  assert_int_equal(put(f->ch, "", "k", "x", 1), PX_ERR_INVALID);
  assert_non_null(strstr(px_last_error(), "job_id"));
  assert_int_equal(put(f->ch, "job-555555", "k", "x", 1), PX_ERR_INVALID);
  assert_int_equal(px_rpc_last_code(), PX_RPC_NOT_FOUND);
  assert_int_equal(get(f->ch, "job-555555", "k", 100, &r), PX_ERR_INVALID);
  assert_int_equal(px_rpc_last_code(), PX_RPC_NOT_FOUND);
  assert_int_equal(get(f->ch, f->job, "k", -5, &r), PX_ERR_INVALID);
  assert_int_equal(px_rpc_last_code(), PX_RPC_INVALID_ARGUMENT);
  assert_null(r);
}

static void test_keys_are_scoped_to_their_job(void **state) {
  fixture_t *f = *state;
  char other[64];
  assert_int_equal(pxt_submit_mp(f->ch, 1, 1, other, sizeof other), PX_OK);
  assert_int_equal(put(f->ch, f->job, "leader", "A", 1), PX_OK);
  assert_int_equal(put(f->ch, other, "leader", "B", 1), PX_OK);
  Prunex__V1__KvGetResponse *r = NULL;
  assert_int_equal(get(f->ch, f->job, "leader", 0, &r), PX_OK);
  assert_memory_equal(r->value.data, "A", 1);
  px_rpc_message_free(r);
  assert_int_equal(get(f->ch, other, "leader", 0, &r), PX_OK);
  assert_memory_equal(r->value.data, "B", 1);
  px_rpc_message_free(r);
}

typedef struct {
  const char *target, *job;
  px_status_t st;
  char value[64];
  size_t len;
} kv_waiter_t;

static void *kv_store_wait(void *arg) {
  kv_waiter_t *w = arg;
  px_kv_t *kv = NULL;
  w->st = px_kv_open_coordinator(w->target, w->job, &kv);
  if (w->st != PX_OK) return NULL;
  void *val = NULL;
  w->st = px_kv_get(kv, "rank/1/addr", 20000, &val, &w->len);
  if (w->st == PX_OK && w->len < sizeof w->value) memcpy(w->value, val, w->len);
  px_free(val);
  px_kv_destroy(kv);
  return NULL;
}

static void test_px_kv_coordinator_store_round_trips_and_waits(void **state) {
  fixture_t *f = *state;
  px_kv_t *kv = NULL;
  assert_int_equal(px_kv_open_coordinator(f->d.target, f->job, &kv), PX_OK);
  assert_int_equal(px_kv_put(kv, "rank/0/addr", "addr-zero", 9), PX_OK);
  void *val = NULL;
  size_t len = 0;
  assert_int_equal(px_kv_get(kv, "rank/0/addr", 0, &val, &len), PX_OK);
  assert_int_equal(len, 9);
  assert_memory_equal(val, "addr-zero", 9);
  px_free(val);
  val = NULL;
  /* Missing: the wait ends with PX_ERR_TIMEOUT. */
  int64_t t0 = pxt_now_ms();
  assert_int_equal(px_kv_get(kv, "rank/9/addr", 300, &val, &len), PX_ERR_TIMEOUT);
  assert_true(pxt_now_ms() - t0 >= 250);
  assert_null(val);
  assert_non_null(strstr(px_last_error(), "rank/9/addr"));
  /* Bad keys never leave the process. */
  assert_int_equal(px_kv_put(kv, "bad key", "x", 1), PX_ERR_INVALID);
  /* A waiting get (another handle, another thread) is woken by this put. */
  kv_waiter_t w = {f->d.target, f->job, -1, "", 0};
  pthread_t th;
  assert_int_equal(pthread_create(&th, NULL, kv_store_wait, &w), 0);
  pxt_sleep_ms(300);
  assert_int_equal(px_kv_put(kv, "rank/1/addr", "addr-one", 8), PX_OK);
  pthread_join(th, NULL);
  assert_int_equal(w.st, PX_OK);
  assert_int_equal(w.len, 8);
  assert_memory_equal(w.value, "addr-one", 8);
  px_kv_destroy(kv);
  /* A store for an unknown job fails on use with the coordinator's answer. */
  assert_int_equal(px_kv_open_coordinator(f->d.target, "job-404040", &kv), PX_OK);
  assert_int_equal(px_kv_put(kv, "k", "v", 1), PX_ERR_INVALID);
  assert_int_equal(px_rpc_last_code(), PX_RPC_NOT_FOUND);
  px_kv_destroy(kv);
  assert_int_equal(px_kv_open_coordinator(f->d.target, "", &kv), PX_ERR_INVALID);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test_setup_teardown(test_put_then_get_round_trips_binary_values, setup,
                                      teardown),
      cmocka_unit_test_setup_teardown(test_missing_key_without_wait_is_not_found, setup, teardown),
      cmocka_unit_test_setup_teardown(test_waiting_get_is_woken_by_a_later_put, setup, teardown),
      cmocka_unit_test_setup_teardown(test_waiting_get_times_out_with_found_false, setup,
                                      teardown),
      cmocka_unit_test_setup_teardown(test_kv_validation, setup, teardown),
      cmocka_unit_test_setup_teardown(test_keys_are_scoped_to_their_job, setup, teardown),
      cmocka_unit_test_setup_teardown(test_px_kv_coordinator_store_round_trips_and_waits, setup,
                                      teardown),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
