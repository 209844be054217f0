/* The NCCL backend: collectives on device memory, one NCCL communicator per
 * group, with one forked rank per GPU (up to 4; NCCL allows one rank per
 * GPU). Allreduce of every op and dtype (u8 max as the mask OR), broadcast,
 * allgather(v), host and device buffers on the same communicator, the
 * traffic NCCL's ring moves, and a mismatched count failing everywhere.
 * Skips cleanly without CUDA or without a GPU. The parent never touches
 * CUDA (a CUDA context does not survive fork): it counts GPUs in a child,
 * and the ranks reach the CUDA runtime through dlsym (tests link only
 * libpxcore). */
#include <dlfcn.h>
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>

#include <cmocka.h>

#include "comm_harness.h"
#include "prunex/comm_internal.h"
#include "prunex/cuda.h"

typedef int (*cuda_malloc_t)(void **, size_t);
typedef int (*cuda_free_t)(void *);
typedef int (*cuda_memcpy_t)(void *, const void *, size_t, int);
typedef int (*cuda_set_device_t)(int);

static struct {
  cuda_malloc_t malloc_;
  cuda_free_t free_;
  cuda_memcpy_t memcpy_;
  cuda_set_device_t set_device;
} cu;

enum { H2D = 1, D2H = 2 };

static int load_cudart(void) {
  const char *names[] = {"libcudart.so.13", "libcudart.so.12", "libcudart.so"};
  void *h = NULL;
  for (int i = 0; i < 3 && !h; i++) h = dlopen(names[i], RTLD_NOW | RTLD_GLOBAL);
  if (!h) return -1;
  cu.malloc_ = (cuda_malloc_t)dlsym(h, "cudaMalloc");
  cu.free_ = (cuda_free_t)dlsym(h, "cudaFree");
  cu.memcpy_ = (cuda_memcpy_t)dlsym(h, "cudaMemcpy");
  cu.set_device = (cuda_set_device_t)dlsym(h, "cudaSetDevice");
  return cu.malloc_ && cu.free_ && cu.memcpy_ && cu.set_device ? 0 : -1;
}

/* GPUs on this machine, counted in a child process */
static int gpu_count(void) {
  pid_t pid = fork();
  if (pid == 0) {
    int n = 0;
    if (px_cuda_device_count(&n) != PX_OK) n = 0;
    _exit(n > 100 ? 100 : n);
  }
  int ws = 0;
  if (pid < 0 || waitpid(pid, &ws, 0) != pid || !WIFEXITED(ws)) return 0;
  return WEXITSTATUS(ws);
}

static const px_comm_dtype_t k_dtypes[] = {PX_COMM_F32, PX_COMM_F64, PX_COMM_U8};
static const px_comm_op_t k_ops[] = {PX_COMM_SUM, PX_COMM_AVG, PX_COMM_MAX};

static int rank_nccl(px_th_ctx_t *ctx) {
  PX_TH_CHECK(load_cudart() == 0);
  PX_TH_CHECK(cu.set_device(ctx->rank) == 0);
  px_comm_opts_t o;
  px_comm_opts_default(&o);
  o.nccl = 1;
  o.cuda_device = ctx->rank;
  o.timeout_ms = 60000;
  px_comm_t *c = NULL;
  PX_TH_OK(px_th_comm(ctx, &o, &c));
  static const size_t sizes[] = {0, 1, 1021, 65537};
  size_t cap = 65537 * 8 * PX_TH_MAX_RANKS;
  char *h = malloc(cap), *ref = malloc(cap);
  void *d = NULL, *d2 = NULL;
  PX_TH_CHECK(h && ref && cu.malloc_(&d, cap) == 0 && cu.malloc_(&d2, cap) == 0);
  for (int k = 0; k < 3; k++) {
    px_group_t *g = px_comm_group(c, (px_group_kind_t)k);
    if (!g) continue;
    int n = px_group_size(g), me = px_group_rank(g);
    for (int di = 0; di < 3; di++) {
      px_comm_dtype_t dt = k_dtypes[di];
      size_t esz = px_comm_dtype_size(dt);
      for (int oi = 0; oi < 3; oi++) {
        px_comm_op_t op = k_ops[oi];
        if (op == PX_COMM_AVG && dt == PX_COMM_U8) continue;
        for (int s = 0; s < 4; s++) {
          size_t cnt = sizes[s];
          uint64_t seed = 31u * (uint64_t)k + 7u * (uint64_t)dt + (uint64_t)op + cnt;
          px_th_fill(h, cnt, dt, seed, ctx->rank, op == PX_COMM_MAX);
          PX_TH_CHECK(cu.memcpy_(d, h, cnt * esz + 1, H2D) == 0);
          px_comm_traffic_reset(c);
          PX_TH_OK(px_comm_allreduce(g, d, d, cnt, dt, op));
          px_comm_traffic_t t;
          px_comm_traffic(c, &t);
          uint64_t want = n > 1 ? 2 * (uint64_t)(n - 1) * cnt * esz / (uint64_t)n : 0;
          /* the agreement check adds a little host traffic of its own */
          PX_TH_CHECK(t.sent[0] + t.sent[1] >= want);
          PX_TH_CHECK(cu.memcpy_(h, d, cnt * esz + 1, D2H) == 0);
          for (size_t i = 0; i < cnt; i++) {
            if (dt == PX_COMM_U8) {
              uint8_t acc = 0;
              for (int m = 0; m < n; m++) {
                uint8_t v = op == PX_COMM_MAX
                                ? (uint8_t)(px_th_u8(seed, px_group_world_rank(g, m), i) % 7 == 0)
                                : px_th_u8(seed, px_group_world_rank(g, m), i);
                acc = op == PX_COMM_MAX ? (uint8_t)(acc | v) : (uint8_t)(acc + v);
              }
              PX_TH_CHECK(((uint8_t *)h)[i] == acc);
            } else {
              double acc = op == PX_COMM_MAX ? -INFINITY : 0;
              for (int m = 0; m < n; m++) {
                double v = px_th_val(seed, px_group_world_rank(g, m), i);
                acc = op == PX_COMM_MAX ? (v > acc ? v : acc) : acc + v;
              }
              if (op == PX_COMM_AVG) acc /= n;
              double got = dt == PX_COMM_F32 ? ((float *)h)[i] : ((double *)h)[i];
              if (fabs(got - acc) > 1e-6 * (1 + fabs(acc)))
                PX_TH_FAIL("nccl allreduce group %d dt %d op %d n %zu [%zu]: %g != %g", k, dt,
                           op, cnt, i, got, acc);
            }
          }
        }
      }
    }
    /* broadcast from every root */
    for (int root = 0; root < n; root++) {
      size_t cnt = 100003;
      px_th_fill(ref, cnt, PX_COMM_F32, 9, px_group_world_rank(g, root), 0);
      if (me == root) PX_TH_CHECK(cu.memcpy_(d, ref, cnt * 4, H2D) == 0);
      PX_TH_OK(px_comm_broadcast(g, d, cnt, PX_COMM_F32, root));
      PX_TH_CHECK(cu.memcpy_(h, d, cnt * 4, D2H) == 0);
      PX_TH_CHECK(memcmp(h, ref, cnt * 4) == 0);
    }
    /* allgatherv with an empty block */
    size_t counts[PX_TH_MAX_RANKS], off = 0;
    for (int m = 0; m < n; m++) counts[m] = m == 1 ? 0 : (size_t)(1000 * m + 7);
    for (int m = 0; m < n; m++) {
      px_th_fill(ref + off * 8, counts[m], PX_COMM_F64, 11, px_group_world_rank(g, m), 0);
      if (m == me) PX_TH_CHECK(cu.memcpy_(d, ref + off * 8, counts[m] * 8 + 1, H2D) == 0);
      off += counts[m];
    }
    PX_TH_OK(px_comm_allgatherv(g, d, d2, counts, PX_COMM_F64));
    PX_TH_CHECK(cu.memcpy_(h, d2, off * 8 + 1, D2H) == 0);
    PX_TH_CHECK(memcmp(h, ref, off * 8) == 0);
    /* host buffers still go over UCX on the same communicator */
    double x = me + 1;
    PX_TH_OK(px_comm_allreduce(g, &x, &x, 1, PX_COMM_F64, PX_COMM_SUM));
    PX_TH_CHECK(x == n * (n + 1) / 2.0);
  }
  /* a mismatched device call fails on every rank */
  px_group_t *w = px_comm_group(c, PX_GROUP_WORLD);
  if (px_group_size(w) > 1) {
    px_status_t st = px_comm_allreduce(w, d, d, ctx->rank == 0 ? 10 : 11, PX_COMM_F32, PX_COMM_SUM);
    if (st != PX_ERR_MISMATCH) PX_TH_FAIL("mismatch gave %s", px_status_name(st));
  }
  px_comm_destroy(c);
  cu.free_(d);
  cu.free_(d2);
  free(h);
  free(ref);
  return 0;
}

static void test_nccl_collectives_on_device_memory(void **state) {
  (void)state;
  if (!px_comm_nccl_built()) {
    printf("libpxcore built without CUDA: NCCL checks skipped\n");
    skip();
  }
  int ngpu = gpu_count();
  if (ngpu == 0) {
    printf("no CUDA device on this machine: NCCL checks skipped\n");
    skip();
  }
  int n = ngpu < 4 ? ngpu : 4;
  const int nodes[4][4] = {{0}, {0, 0}, {0, 0, 1}, {0, 0, 1, 1}};
  printf("%d GPU(s): %d rank(s)\n", ngpu, n);
  assert_int_equal(px_th_run(n, nodes[n - 1], rank_nccl, NULL, 240), 0);
}

int main(int argc, char **argv) {
  px_th_init(argc, argv);
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_nccl_collectives_on_device_memory),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
