/* Non-blocking collectives and the bucketed list reduction: many requests
 * in flight on several groups complete correctly in call order, waited in
 * any order, with blocking calls in between; a large reduction completes in
 * the background while the caller computes (the overlap DDP relies on); the
 * list helper packs tensors around and across the bucket size and matches
 * the serial reference; after warm-up, collectives allocate nothing. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "comm_harness.h"
#include "prunex/comm_internal.h"

/* exact f32 reference of a sum over the members of g */
static int check_sum(px_group_t *g, const float *got, size_t n, uint64_t seed, double scale) {
  for (size_t i = 0; i < n; i++) {
    double s = 0;
    for (int k = 0; k < px_group_size(g); k++) s += px_th_val(seed, px_group_world_rank(g, k), i);
    if (got[i] != (float)(s * scale)) {
      fprintf(stderr, "rank %d: element %zu of seed %llu: %g != %g\n", px_th_me, i,
              (unsigned long long)seed, got[i], s * scale);
      return 1;
    }
  }
  return 0;
}

static int rank_many(px_th_ctx_t *ctx) {
  px_comm_t *c = NULL;
  PX_TH_OK(px_th_comm(ctx, NULL, &c));
  enum { NREQ = 40 };
  static const size_t sizes[] = {1, 17, 1000, 9000, 70001};
  float *buf[NREQ];
  px_comm_req_t *req[NREQ];
  px_group_t *grp[NREQ];
  for (int i = 0; i < NREQ; i++) {
    size_t n = sizes[i % 5];
    buf[i] = malloc(n * sizeof(float));
    PX_TH_CHECK(buf[i] != NULL);
    px_th_fill(buf[i], n, PX_COMM_F32, (uint64_t)i, ctx->rank, 0);
    grp[i] = px_comm_group(c, (px_group_kind_t)(i % 3));
    req[i] = NULL;
    if (grp[i]) /* inter: leaders only */
      PX_TH_OK(px_comm_iallreduce(grp[i], buf[i], buf[i], n, PX_COMM_F32, PX_COMM_SUM, &req[i]));
    if (i == NREQ / 2) {
      /* a blocking call in the middle runs after everything issued before it */
      double v = 1;
      PX_TH_OK(px_comm_allreduce(px_comm_group(c, PX_GROUP_WORLD), &v, &v, 1, PX_COMM_F64,
                                 PX_COMM_SUM));
      PX_TH_CHECK(v == ctx->size);
      for (int j = 0; j <= i; j++) {
        int done = 0;
        if (!req[j]) continue;
        PX_TH_OK(px_comm_test(req[j], &done));
        PX_TH_CHECK(done == 1);
      }
    }
  }
  /* wait in reverse order */
  for (int i = NREQ - 1; i >= 0; i--) {
    if (req[i]) {
      PX_TH_OK(px_comm_wait(req[i]));
      if (check_sum(grp[i], buf[i], sizes[i % 5], (uint64_t)i, 1.0)) return 1;
    }
    free(buf[i]);
  }
  /* every other non-blocking form */
  px_group_t *w = px_comm_group(c, PX_GROUP_WORLD);
  int n = ctx->size, me = ctx->rank;
  double b[64], gat[64 * PX_TH_MAX_RANKS], gv[64 * PX_TH_MAX_RANKS];
  size_t counts[PX_TH_MAX_RANKS], tot = 0;
  for (int k = 0; k < n; k++) tot += counts[k] = (size_t)(k + 1);
  for (int i = 0; i < 64; i++) b[i] = me == 1 ? i * 0.5 : -1;
  px_comm_req_t *r1, *r2, *r3, *r4;
  PX_TH_OK(px_comm_ibroadcast(w, b, 64, PX_COMM_F64, 1, &r1));
  PX_TH_OK(px_comm_ibarrier(w, &r2));
  double mine[PX_TH_MAX_RANKS];
  for (int i = 0; i < n; i++) mine[i] = me * 100 + i;
  PX_TH_OK(px_comm_iallgather(w, mine, gat, 3, PX_COMM_F64, &r3));
  PX_TH_OK(px_comm_iallgatherv(w, mine, gv, counts, PX_COMM_F64, &r4));
  PX_TH_OK(px_comm_wait(r4));
  PX_TH_OK(px_comm_wait(r2));
  PX_TH_OK(px_comm_wait(r1));
  PX_TH_OK(px_comm_wait(r3));
  for (int i = 0; i < 64; i++) PX_TH_CHECK(b[i] == i * 0.5);
  size_t o = 0;
  for (int k = 0; k < n; k++)
    for (size_t i = 0; i < counts[k]; i++, o++) PX_TH_CHECK(gv[o] == k * 100 + (double)i);
  PX_TH_CHECK(o == tot);
  for (int k = 0; k < n; k++)
    for (int i = 0; i < 3; i++) PX_TH_CHECK(gat[k * 3 + i] == k * 100 + i);
  px_comm_destroy(c);
  return 0;
}

static void test_many_requests_in_flight(void **state) {
  (void)state;
  const int nodes[] = {0, 0, 1, 1, 1};
  assert_int_equal(px_th_run(5, nodes, rank_many, NULL, 120), 0);
}

/* ---- overlap ----------------------------------------------------------------- */

static int rank_overlap(px_th_ctx_t *ctx) {
  px_comm_t *c = NULL;
  PX_TH_OK(px_th_comm(ctx, NULL, &c));
  px_group_t *w = px_comm_group(c, PX_GROUP_WORLD);
  size_t n = 1 << 20;
  float *x = malloc(n * sizeof *x);
  PX_TH_CHECK(x != NULL);
  px_th_fill(x, n, PX_COMM_F32, 5, ctx->rank, 0);
  PX_TH_OK(px_comm_barrier(w));
  px_comm_req_t *req = NULL;
  PX_TH_OK(px_comm_iallreduce(w, x, x, n, PX_COMM_F32, PX_COMM_SUM, &req));
  /* "backward pass": compute, polling now and then, never waiting */
  double t_end = px_th_now_ms() + 20000;
  volatile double acc = 0;
  int done = 0;
  while (!done && px_th_now_ms() < t_end) {
    for (int i = 0; i < 100000; i++) acc += i * 1e-9;
    PX_TH_OK(px_comm_test(req, &done));
  }
  if (!done) PX_TH_FAIL("the reduction did not progress while the caller computed");
  PX_TH_OK(px_comm_wait(req));
  if (check_sum(w, x, 4096, 5, 1.0)) return 1;
  free(x);
  px_comm_destroy(c);
  return 0;
}

static void test_reduction_progresses_while_caller_computes(void **state) {
  (void)state;
  const int nodes[] = {0, 0, 1};
  assert_int_equal(px_th_run(3, nodes, rank_overlap, NULL, 60), 0);
}

/* ---- bucketed list ------------------------------------------------------------ */

#define BUCKET_BYTES (64 << 10) /* 16384 floats */

static int rank_list(px_th_ctx_t *ctx) {
  px_comm_opts_t o;
  px_comm_opts_default(&o);
  o.bucket_bytes = BUCKET_BYTES;
  px_comm_t *c = NULL;
  PX_TH_OK(px_th_comm(ctx, &o, &c));
  const size_t B = BUCKET_BYTES / sizeof(float);
  static size_t counts[] = {3, 0, 16383, 16384, 16385, 1, 2, 5000, 5000, 6384, 0, 49157, 7, 8191, 8193};
  enum { NT = sizeof counts / sizeof counts[0] };
  (void)B;
  float *t[NT];
  void *bufs[NT];
  for (int form = 0; form < 2; form++) {
    for (int k = 0; k < 3; k++) {
      px_group_t *g = px_comm_group(c, (px_group_kind_t)k);
      if (!g) continue;
      for (int op = 0; op < 2; op++) {
        for (int i = 0; i < NT; i++) {
          t[i] = malloc(counts[i] * sizeof(float) + 4);
          PX_TH_CHECK(t[i] != NULL);
          px_th_fill(t[i], counts[i], PX_COMM_F32, 100 + (uint64_t)i, ctx->rank, 0);
          bufs[i] = t[i];
        }
        px_comm_op_t rop = op ? PX_COMM_AVG : PX_COMM_SUM;
        if (form == 0) {
          PX_TH_OK(px_comm_allreduce_list(g, bufs, counts, NT, PX_COMM_F32, rop));
        } else {
          px_comm_req_t *req = NULL;
          PX_TH_OK(px_comm_iallreduce_list(g, bufs, counts, NT, PX_COMM_F32, rop, &req));
          PX_TH_OK(px_comm_wait(req));
        }
        for (int i = 0; i < NT; i++) {
          /* avg: sum/n in float, as the library computes it */
          for (size_t e = 0; e < counts[i]; e++) {
            double s = 0;
            for (int m = 0; m < px_group_size(g); m++)
              s += px_th_val(100 + (uint64_t)i, px_group_world_rank(g, m), e);
            float want = op ? (float)s / (float)px_group_size(g) : (float)s;
            if (t[i][e] != want)
              PX_TH_FAIL("list form %d group %d op %d tensor %d (%zu elements) element %zu: %g != %g",
                         form, k, op, i, counts[i], e, t[i][e], want);
          }
          free(t[i]);
        }
      }
    }
  }
  px_comm_destroy(c);
  return 0;
}

static void test_list_reduction_through_buckets(void **state) {
  (void)state;
  const int nodes[] = {0, 0, 1, 1};
  assert_int_equal(px_th_run(4, nodes, rank_list, NULL, 120), 0);
}

/* ---- allocation-free steady state --------------------------------------------- */

static int one_round(px_comm_t *c, float *big, float *small, float *gat, void **bufs,
                     const size_t *cnts, const size_t *counts) {
  px_group_t *w = px_comm_group(c, PX_GROUP_WORLD);
  px_group_t *in = px_comm_group(c, PX_GROUP_INTRA);
  PX_TH_OK(px_comm_allreduce(w, small, small, 100, PX_COMM_F32, PX_COMM_SUM));
  PX_TH_OK(px_comm_allreduce(w, big, big, 1 << 18, PX_COMM_F32, PX_COMM_AVG));
  PX_TH_OK(px_comm_allreduce(in, big, big, 1 << 16, PX_COMM_F32, PX_COMM_MAX));
  PX_TH_OK(px_comm_broadcast(w, big, 300000, PX_COMM_F32, 1));
  PX_TH_OK(px_comm_allgather(w, small, gat, 100, PX_COMM_F32));
  PX_TH_OK(px_comm_allgatherv(w, small, gat, counts, PX_COMM_F32));
  PX_TH_OK(px_comm_barrier(w));
  PX_TH_OK(px_comm_allreduce_list(w, bufs, cnts, 3, PX_COMM_F32, PX_COMM_SUM));
  px_comm_req_t *r1, *r2;
  PX_TH_OK(px_comm_iallreduce(w, small, small, 100, PX_COMM_F32, PX_COMM_SUM, &r1));
  PX_TH_OK(px_comm_iallreduce_list(w, bufs, cnts, 3, PX_COMM_F32, PX_COMM_SUM, &r2));
  PX_TH_OK(px_comm_wait(r1));
  PX_TH_OK(px_comm_wait(r2));
  return 0;
}

static int rank_noalloc(px_th_ctx_t *ctx) {
  px_comm_opts_t o;
  px_comm_opts_default(&o);
  o.bucket_bytes = 1 << 20;
  px_comm_t *c = NULL;
  PX_TH_OK(px_th_comm(ctx, &o, &c));
  float *big = calloc(1 << 20, sizeof(float)), *small = calloc(100, sizeof(float)),
        *gat = calloc(100 * PX_TH_MAX_RANKS, sizeof(float));
  float *t0 = calloc(1000, 4), *t1 = calloc(2000, 4), *t2 = calloc(3, 4);
  void *bufs[3] = {t0, t1, t2};
  size_t cnts[3] = {1000, 2000, 3};
  size_t counts[PX_TH_MAX_RANKS];
  for (int k = 0; k < ctx->size; k++) counts[k] = (size_t)(10 * k + 1);
  if (one_round(c, big, small, gat, bufs, cnts, counts)) return 1; /* warm-up */
  px_mem_stats_t a, b;
  px_mem_stats(&a);
  for (int i = 0; i < 20; i++)
    if (one_round(c, big, small, gat, bufs, cnts, counts)) return 1;
  px_mem_stats(&b);
  if (b.allocs != a.allocs || b.live_bytes != a.live_bytes)
    PX_TH_FAIL("steady state allocated: %llu allocations, %lld live bytes",
               (unsigned long long)(b.allocs - a.allocs), (long long)(b.live_bytes - a.live_bytes));
  px_comm_destroy(c);
  px_mem_stats(&b);
  (void)b;
  free(big);
  free(small);
  free(gat);
  free(t0);
  free(t1);
  free(t2);
  return 0;
}

static void test_steady_state_allocates_nothing(void **state) {
  (void)state;
  const int nodes[] = {0, 0, 1, 1};
  assert_int_equal(px_th_run(4, nodes, rank_noalloc, NULL, 120), 0);
}

int main(int argc, char **argv) {
  px_th_init(argc, argv);
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_many_requests_in_flight),
      cmocka_unit_test(test_reduction_progresses_while_caller_computes),
      cmocka_unit_test(test_list_reduction_through_buckets),
      cmocka_unit_test(test_steady_state_allocates_nothing),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
