/* Communicator creation and groups: world, intra and inter are built from
 * the rank-to-node map (contiguous, interleaved, sparse node ids, one node,
 * one rank per node, chosen leaders); only leaders have the inter group;
 * bad arguments are refused locally with PX_ERR_INVALID and leave a
 * communicator usable; a one-rank world works without peers; NCCL is refused
 * cleanly where it cannot run. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "comm_harness.h"
#include "prunex/comm_internal.h"
#include "prunex/cuda.h"

typedef struct {
  const int *leader_of_node; /* NULL: lowest rank */
} groups_arg_t;

static int rank_groups(px_th_ctx_t *ctx) {
  const groups_arg_t *ga = ctx->arg;
  px_comm_opts_t o;
  px_comm_opts_default(&o);
  o.leader_of_node = ga->leader_of_node;
  px_comm_t *c = NULL;
  PX_TH_OK(px_th_comm(ctx, &o, &c));
  int n = ctx->size, me = ctx->rank, node = ctx->node_of[me];
  PX_TH_CHECK(px_comm_rank(c) == me && px_comm_size(c) == n && px_comm_node(c) == node);
  int nnodes = 0, leader[PX_TH_MAX_RANKS];
  for (int id = 0; id < n; id++) {
    leader[id] = -1;
    for (int r = 0; r < n; r++)
      if (ctx->node_of[r] == id && leader[id] < 0) leader[id] = r;
    if (leader[id] >= 0) {
      nnodes++;
      if (ga->leader_of_node) leader[id] = ga->leader_of_node[id];
    }
  }
  PX_TH_CHECK(px_comm_nnodes(c) == nnodes);

  px_group_t *w = px_comm_group(c, PX_GROUP_WORLD);
  PX_TH_CHECK(w && px_group_kind(w) == PX_GROUP_WORLD && px_group_size(w) == n &&
              px_group_rank(w) == me);
  for (int i = 0; i < n; i++) PX_TH_CHECK(px_group_world_rank(w, i) == i);
  PX_TH_CHECK(px_group_world_rank(w, n) == -1 && px_group_world_rank(w, -1) == -1);

  px_group_t *in = px_comm_group(c, PX_GROUP_INTRA);
  PX_TH_CHECK(in && px_group_kind(in) == PX_GROUP_INTRA);
  int k = 0;
  for (int r = 0; r < n; r++) {
    if (ctx->node_of[r] != node) continue;
    PX_TH_CHECK(px_group_world_rank(in, k) == r);
    if (r == me) PX_TH_CHECK(px_group_rank(in) == k);
    k++;
  }
  PX_TH_CHECK(px_group_size(in) == k);

  px_group_t *it = px_comm_group(c, PX_GROUP_INTER);
  if (leader[node] == me) {
    PX_TH_CHECK(it && px_group_kind(it) == PX_GROUP_INTER && px_group_size(it) == nnodes);
    k = 0;
    for (int id = 0; id < n; id++) {
      if (leader[id] < 0) continue;
      PX_TH_CHECK(px_group_world_rank(it, k) == leader[id]);
      if (leader[id] == me) PX_TH_CHECK(px_group_rank(it) == k);
      k++;
    }
  } else {
    PX_TH_CHECK(it == NULL);
  }
  PX_TH_CHECK(px_comm_group(c, (px_group_kind_t)7) == NULL);

  /* every group works: sum of world ranks over each */
  for (int g = 0; g < 3; g++) {
    px_group_t *grp = px_comm_group(c, (px_group_kind_t)g);
    if (!grp) continue;
    double v = me, want = 0;
    for (int i = 0; i < px_group_size(grp); i++) want += px_group_world_rank(grp, i);
    PX_TH_OK(px_comm_allreduce(grp, &v, &v, 1, PX_COMM_F64, PX_COMM_SUM));
    PX_TH_CHECK(v == want);
  }
  px_comm_destroy(c);
  return 0;
}

static void run_map(int size, const int *nodes, const int *leaders) {
  groups_arg_t ga = {leaders};
  assert_int_equal(px_th_run(size, nodes, rank_groups, &ga, 60), 0);
}

static void test_groups_contiguous_nodes(void **state) {
  (void)state;
  const int nodes[] = {0, 0, 1, 1, 2, 2, 3, 3};
  run_map(8, nodes, NULL);
}

static void test_groups_interleaved_sparse_node_ids(void **state) {
  (void)state;
  const int nodes[] = {4, 2, 4, 2, 3};
  run_map(5, nodes, NULL);
}

static void test_groups_one_node_and_one_rank_per_node(void **state) {
  (void)state;
  const int one[] = {0, 0, 0};
  run_map(3, one, NULL);
  const int each[] = {2, 1, 0};
  run_map(3, each, NULL);
}

static void test_groups_chosen_leaders(void **state) {
  (void)state;
  const int nodes[] = {0, 0, 0, 1, 1, 1};
  const int leaders[] = {2, 4};
  run_map(6, nodes, leaders);
}

/* ---- single process --------------------------------------------------------- */

static px_kv_t *open_kv(char *dir) {
  px_kv_t *kv = NULL;
  assert_non_null(mkdtemp(dir));
  assert_int_equal(px_kv_open_dir(dir, &kv), PX_OK);
  return kv;
}

static void test_create_rejects_bad_arguments(void **state) {
  (void)state;
  char dir[] = "/tmp/pxcomm-XXXXXX";
  px_kv_t *kv = open_kv(dir);
  px_comm_t *c = (px_comm_t *)1;
  const int nodes[] = {0, 0, 1};
  assert_int_equal(px_comm_create(3, 3, nodes, kv, NULL, &c), PX_ERR_INVALID);
  assert_null(c);
  assert_int_equal(px_comm_create(0, 0, nodes, kv, NULL, &c), PX_ERR_INVALID);
  assert_int_equal(px_comm_create(0, 3, NULL, kv, NULL, &c), PX_ERR_INVALID);
  assert_int_equal(px_comm_create(0, 3, nodes, NULL, NULL, &c), PX_ERR_INVALID);
  const int bad_nodes[] = {0, 3, 1};
  assert_int_equal(px_comm_create(0, 3, bad_nodes, kv, NULL, &c), PX_ERR_INVALID);
  assert_non_null(strstr(px_last_error(), "node id 3"));
  px_comm_opts_t o;
  px_comm_opts_default(&o);
  const int leaders[] = {2, 2}; /* rank 2 is not on node 0 */
  o.leader_of_node = leaders;
  assert_int_equal(px_comm_create(0, 3, nodes, kv, &o, &c), PX_ERR_INVALID);
  assert_non_null(strstr(px_last_error(), "leader_of_node[0]"));
  px_comm_opts_default(&o);
  o.key_prefix = "bad prefix!";
  assert_int_equal(px_comm_create(0, 3, nodes, kv, &o, &c), PX_ERR_INVALID);
  px_kv_destroy(kv);
  px_th_rmdir(dir);
}

/* one rank: every collective is local and exact; bad calls are refused
 * without breaking the communicator; nothing leaks */
static void test_single_rank_world(void **state) {
  (void)state;
  px_mem_stats_t before, after;
  px_mem_stats(&before);
  char dir[] = "/tmp/pxcomm-XXXXXX";
  px_kv_t *kv = open_kv(dir);
  const int nodes[] = {0};
  px_comm_t *c = NULL;
  assert_int_equal(px_comm_create(0, 1, nodes, kv, NULL, &c), PX_OK);
  px_kv_destroy(kv);
  px_group_t *g = px_comm_group(c, PX_GROUP_INTER);
  assert_non_null(g);
  assert_int_equal(px_group_size(g), 1);
  float x[5] = {1, 2, 3, 4, 5}, y[5] = {0};
  assert_int_equal(px_comm_allreduce(g, x, y, 5, PX_COMM_F32, PX_COMM_AVG), PX_OK);
  assert_memory_equal(x, y, sizeof x);
  assert_int_equal(px_comm_broadcast(g, x, 5, PX_COMM_F32, 0), PX_OK);
  float z[5];
  assert_int_equal(px_comm_allgather(g, x, z, 5, PX_COMM_F32), PX_OK);
  assert_memory_equal(x, z, sizeof x);
  size_t counts[1] = {3};
  assert_int_equal(px_comm_allgatherv(g, x, z, counts, PX_COMM_F32), PX_OK);
  assert_int_equal(px_comm_barrier(g), PX_OK);
  void *bufs[2] = {x, y};
  size_t cnt[2] = {5, 5};
  assert_int_equal(px_comm_allreduce_list(g, bufs, cnt, 2, PX_COMM_F32, PX_COMM_SUM), PX_OK);

  /* refused locally */
  uint8_t m[4] = {0};
  assert_int_equal(px_comm_allreduce(NULL, m, m, 4, PX_COMM_U8, PX_COMM_MAX), PX_ERR_INVALID);
  assert_int_equal(px_comm_allreduce(g, m, m, 4, PX_COMM_U8, PX_COMM_AVG), PX_ERR_INVALID);
  assert_int_equal(px_comm_allreduce(g, m, m, 4, (px_comm_dtype_t)9, PX_COMM_SUM), PX_ERR_INVALID);
  assert_int_equal(px_comm_allreduce(g, NULL, m, 4, PX_COMM_U8, PX_COMM_SUM), PX_ERR_INVALID);
  assert_int_equal(px_comm_broadcast(g, m, 4, PX_COMM_U8, 1), PX_ERR_INVALID);
  assert_int_equal(px_comm_allgatherv(g, m, m, NULL, PX_COMM_U8), PX_ERR_INVALID);
  assert_int_equal(px_comm_iallreduce(g, m, m, 4, PX_COMM_U8, PX_COMM_SUM, NULL), PX_ERR_INVALID);
  assert_int_equal(px_comm_status(c), PX_OK);
  assert_int_equal(px_comm_allreduce(g, m, m, 4, PX_COMM_U8, PX_COMM_MAX), PX_OK);

  px_comm_traffic_t t;
  px_comm_traffic(c, &t);
  assert_true(t.sent[0] == 0 && t.sent[1] == 0 && t.recv[0] == 0 && t.recv[1] == 0);
  px_comm_destroy(c);
  px_th_rmdir(dir);
  px_mem_stats(&after);
  assert_int_equal(after.live_bytes, before.live_bytes);
}

/* NCCL: refused with PX_ERR_NOT_BUILT without CUDA; with CUDA but no GPU the
 * device cannot be set (PX_ERR_BACKEND); never a crash or a hang */
static void test_nccl_option_without_gpu(void **state) {
  (void)state;
  char dir[] = "/tmp/pxcomm-XXXXXX";
  px_kv_t *kv = open_kv(dir);
  const int nodes[] = {0};
  px_comm_opts_t o;
  px_comm_opts_default(&o);
  o.nccl = 1;
  o.cuda_device = 0;
  o.timeout_ms = 2000;
  px_comm_t *c = NULL;
  if (!px_comm_nccl_built()) {
    assert_int_equal(px_comm_create(0, 1, nodes, kv, &o, &c), PX_ERR_NOT_BUILT);
    assert_non_null(strstr(px_last_error(), "without CUDA"));
  } else {
    /* probing CUDA here is fine: this process forks no ranks after it */
    int ngpu = 0;
    px_cuda_device_count(&ngpu);
    px_status_t st = px_comm_create(0, 1, nodes, kv, &o, &c);
    if (ngpu == 0) {
      /* CUDA's "no device" is PX_ERR_NO_DEVICE (one conversion) */
      assert_int_equal(st, PX_ERR_NO_DEVICE);
    } else {
      assert_int_equal(st, PX_OK);
      px_comm_destroy(c);
    }
  }
  px_kv_destroy(kv);
  px_th_rmdir(dir);
}

int main(int argc, char **argv) {
  px_th_init(argc, argv);
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_groups_contiguous_nodes),
      cmocka_unit_test(test_groups_interleaved_sparse_node_ids),
      cmocka_unit_test(test_groups_one_node_and_one_rank_per_node),
      cmocka_unit_test(test_groups_chosen_leaders),
      cmocka_unit_test(test_create_rejects_bad_arguments),
      cmocka_unit_test(test_single_rank_world),
      cmocka_unit_test(test_nccl_option_without_gpu),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
