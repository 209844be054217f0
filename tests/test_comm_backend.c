/* Choosing the data plane (px_comm_choose_backend, a job spec's
 * comm.backend): cluster.device cpu and comm.backend ucx decide without the
 * store; auto lets the ranks compare where they train through the store
 * and every rank follows rank 0's one verdict (ranks on the CPU: ucx, saying
 * which rank rules NCCL out); nccl where NCCL cannot serve fails on every
 * rank saying why; a rank 0 that never answers is named within the timeout;
 * a bad query is refused; nothing leaks. Ranks are threads, each with its
 * own handle on one directory store. */
#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <cmocka.h>

#include "comm_harness.h"

#define WORLD 3

typedef struct {
  const char *dir;
  px_comm_backend_query_t q;
  px_comm_opts_t opts;
  char why[256];
  px_status_t st;
  char err[512];
} rank_t;

static void *rank_main(void *arg) {
  rank_t *r = arg;
  px_kv_t *kv = NULL;
  r->st = px_kv_open_dir(r->dir, &kv);
  if (r->st == PX_OK) r->st = px_comm_choose_backend(&r->q, kv, &r->opts, r->why, sizeof r->why);
  if (r->st != PX_OK) snprintf(r->err, sizeof r->err, "%s", px_last_error());
  px_kv_destroy(kv);
  return NULL;
}

/* Runs ranks first..WORLD-1 of a job with the given backend, all on the
 * CPU with cluster.device auto, in threads; results in r[]. */
static void run_ranks(const char *dir, const char *backend, int first, rank_t *r) {
  pthread_t t[WORLD];
  for (int i = first; i < WORLD; i++) {
    memset(&r[i], 0, sizeof r[i]);
    r[i].dir = dir;
    r[i].q = (px_comm_backend_query_t){.backend = backend,
                                       .cluster_device = "auto",
                                       .device = px_device_cpu(),
                                       .rank = i,
                                       .world = WORLD,
                                       .key_prefix = "job/j1/devices",
                                       .timeout_ms = 300};
    px_comm_opts_default(&r[i].opts);
    r[i].opts.nccl = 7; /* overwritten */
    assert_int_equal(pthread_create(&t[i], NULL, rank_main, &r[i]), 0);
  }
  for (int i = first; i < WORLD; i++) pthread_join(t[i], NULL);
}

typedef struct {
  char dir[64];
  px_mem_stats_t before;
} fixture_t;

static int setup(void **state) {
  fixture_t *f = calloc(1, sizeof *f);
  snprintf(f->dir, sizeof f->dir, "/tmp/pxbackend-XXXXXX");
  if (!mkdtemp(f->dir)) return -1;
  px_mem_stats(&f->before);
  *state = f;
  return 0;
}

static int teardown(void **state) {
  fixture_t *f = *state;
  px_mem_stats_t after;
  px_mem_stats(&after);
  assert_int_equal(after.live_bytes, f->before.live_bytes);
  px_th_rmdir(f->dir);
  free(f);
  return 0;
}

static void test_cpu_and_ucx_decide_without_the_store(void **state) {
  (void)state;
  px_comm_backend_query_t q = {.backend = "auto", .cluster_device = "cpu",
                               .device = px_device_cpu(), .rank = 1, .world = 2,
                               .key_prefix = "job/x/devices", .timeout_ms = 100};
  px_comm_opts_t o;
  px_comm_opts_default(&o);
  char why[128];
  /* kv NULL: the store is not touched */
  assert_int_equal(px_comm_choose_backend(&q, NULL, &o, why, sizeof why), PX_OK);
  assert_int_equal(o.nccl, 0);
  assert_string_equal(why, "cluster.device is cpu");
  q.backend = "nccl";
  assert_int_equal(px_comm_choose_backend(&q, NULL, &o, why, sizeof why), PX_ERR_INVALID);
  assert_non_null(strstr(px_last_error(), "comm.backend is nccl, but cluster.device is cpu"));
  q.backend = "ucx";
  q.cluster_device = "cuda";
  assert_int_equal(px_comm_choose_backend(&q, NULL, &o, why, sizeof why), PX_OK);
  assert_int_equal(o.nccl, 0);
  assert_string_equal(why, "");
}

static void test_auto_every_rank_follows_rank_0s_verdict(void **state) {
  fixture_t *f = *state;
  rank_t r[WORLD];
  run_ranks(f->dir, "auto", 0, r);
  for (int i = 0; i < WORLD; i++) {
    if (r[i].st != PX_OK) fail_msg("rank %d: %s", i, r[i].err);
    assert_int_equal(r[i].opts.nccl, 0);
    assert_int_equal(r[i].opts.cuda_device, 0);
    assert_string_equal(r[i].why, "rank 0 trains on the CPU");
  }
  /* what the ranks said, as the store keeps it */
  px_kv_t *kv;
  assert_int_equal(px_kv_open_dir(f->dir, &kv), PX_OK);
  void *v;
  size_t n;
  assert_int_equal(px_kv_get(kv, "job/j1/devices/2", 0, &v, &n), PX_OK);
  assert_int_equal(n, 3);
  assert_memory_equal(v, "cpu", 3);
  px_free(v);
  assert_int_equal(px_kv_get(kv, "job/j1/devices/verdict", 0, &v, &n), PX_OK);
  assert_int_equal(n, strlen("ucx rank 0 trains on the CPU"));
  assert_memory_equal(v, "ucx rank 0 trains on the CPU", n);
  px_free(v);
  px_kv_destroy(kv);
}

static void test_nccl_that_cannot_serve_fails_on_every_rank(void **state) {
  fixture_t *f = *state;
  rank_t r[WORLD];
  run_ranks(f->dir, "nccl", 0, r);
  for (int i = 0; i < WORLD; i++) {
    assert_int_equal(r[i].st, PX_ERR_INVALID);
    if (!strstr(r[i].err, "comm.backend is nccl, but rank 0 trains on the CPU (NCCL needs a GPU"))
      fail_msg("rank %d: %s", i, r[i].err);
  }
}

static void test_a_silent_rank_0_is_named_within_the_timeout(void **state) {
  fixture_t *f = *state;
  rank_t r[WORLD];
  struct timespec a, b;
  clock_gettime(CLOCK_MONOTONIC, &a);
  run_ranks(f->dir, "auto", 1, r); /* rank 0 never comes */
  clock_gettime(CLOCK_MONOTONIC, &b);
  double ms = (double)(b.tv_sec - a.tv_sec) * 1e3 + (double)(b.tv_nsec - a.tv_nsec) / 1e6;
  assert_true(ms < 5000);
  for (int i = 1; i < WORLD; i++) {
    assert_int_equal(r[i].st, PX_ERR_TIMEOUT);
    if (!strstr(r[i].err, "rank 0 did not choose the data plane within 300 ms"))
      fail_msg("rank %d: %s", i, r[i].err);
  }
}

static void test_a_bad_query_is_refused(void **state) {
  (void)state;
  px_comm_backend_query_t q = {.backend = "tcp", .cluster_device = "auto",
                               .device = px_device_cpu(), .rank = 0, .world = 1,
                               .key_prefix = "job/x/devices", .timeout_ms = 100};
  px_comm_opts_t o;
  char why[64];
  assert_int_equal(px_comm_choose_backend(&q, NULL, &o, why, sizeof why), PX_ERR_INVALID);
  assert_non_null(strstr(px_last_error(), "comm.backend 'tcp': must be auto, ucx or nccl"));
  q.backend = "auto";
  /* auto on cluster.device auto asks the other ranks: no store is refused */
  assert_int_equal(px_comm_choose_backend(&q, NULL, &o, why, sizeof why), PX_ERR_INVALID);
  assert_non_null(strstr(px_last_error(), "needs a rendezvous store"));
  q.rank = 1;
  assert_int_equal(px_comm_choose_backend(&q, NULL, &o, why, sizeof why), PX_ERR_INVALID);
  assert_int_equal(px_comm_choose_backend(NULL, NULL, &o, why, sizeof why), PX_ERR_INVALID);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test_setup_teardown(test_cpu_and_ucx_decide_without_the_store, setup, teardown),
      cmocka_unit_test_setup_teardown(test_auto_every_rank_follows_rank_0s_verdict, setup,
                                      teardown),
      cmocka_unit_test_setup_teardown(test_nccl_that_cannot_serve_fails_on_every_rank, setup,
                                      teardown),
      cmocka_unit_test_setup_teardown(test_a_silent_rank_0_is_named_within_the_timeout, setup,
                                      teardown),
      cmocka_unit_test_setup_teardown(test_a_bad_query_is_refused, setup, teardown),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
