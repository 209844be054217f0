/* The CUDA op backend against the CPU engine: every op of ops.h (conv
 * forward / backward data / backward weights with stride and padding
 * variants and bias, batch norm training / inference / backward with and
 * without the fused ReLU, ReLU, max / average / global average pooling,
 * FC, residual add with and without ReLU, softmax cross-entropy, reorder)
 * runs on random data on the GPU and on the CPU (px_ops on the CPU, itself
 * tested against the plain C reference by test_ops_*), and the results must
 * agree to f32 tolerances with TF32 forbidden (and to TF32 tolerances with it
 * allowed, for the convolution). Also: the device allocator reuses freed
 * blocks, rounds large ones to 2 MiB and reuses them best fit, and records
 * what its peak was made of; its size classes bound the waste (checked on
 * the CPU, everywhere); and without CUDA (or without a GPU) the backend is
 * refused with a clear status. Skips with a message when there is no GPU to
 * run on. */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "prunex/cuda.h"
#include "prunex/ops.h"
#include "prunex/ops_internal.h"
#include "prunex/tensor_internal.h"
#include "px_test_util.h"
#include "tensor/px_mem_class.h"
#include "tensor/px_tensor_cuda.h"

#include "ops_test_util.h"

/* ---- environment ------------------------------------------------------------- */

#define REQUIRE_GPU()                                  \
  do {                                                 \
    if (!px_test_gpu_ready("GPU op checks")) skip();   \
  } while (0)

/* A CPU and a GPU context side by side; the GPU one computes in plain f32
 * unless tf32. */
typedef struct {
  px_ops_t *cpu, *gpu;
} pair_t;

static void pair_init(pair_t *p, int tf32) {
  p->cpu = new_ops();
  assert_ok(px_ops_create(px_device_cuda(0), 0, &p->gpu));
  assert_ok(px_ops_set_tf32(p->gpu, tf32));
}

static void pair_fini(pair_t *p) {
  px_ops_destroy(p->gpu);
  px_ops_destroy(p->cpu);
}

static px_tensor_t spec4(px_device_t dev, int64_t n, int64_t c, int64_t h, int64_t w) {
  px_tensor_t s;
  assert_ok(px_tensor_init4(&s, dev, n, c, h, w));
  return s;
}

/* Same logical dims (the CPU may pick a blocked layout, the GPU is plain). */
static void expect_same_dims(const px_tensor_t *a, const px_tensor_t *b) {
  assert_int_equal(a->ndim, b->ndim);
  for (int i = 0; i < a->ndim; i++) assert_int_equal(a->dims[i], b->dims[i]);
  assert_null(b->layout);
  assert_int_equal(b->device.kind, PX_DEVICE_CUDA);
}

/* Reads both tensors back and compares them. */
static void expect_match(const char *what, const px_tensor_t *gpu, const px_tensor_t *cpu,
                         double tol) {
  assert_int_equal(px_tensor_numel(gpu), px_tensor_numel(cpu));
  float *g = read_host(gpu), *c = read_host(cpu);
  double err = px_test_max_rel_err(g, c, px_tensor_numel(cpu));
  if (err > tol) fail_msg("%s: GPU vs CPU max relative error %g > %g", what, err, tol);
  free(g);
  free(c);
}

/* ||gpu - cpu|| / ||cpu|| (2-norms): the measure for TF32, whose error is
 * relative to the magnitude of the operands rather than of each output. */
static void expect_match_l2(const char *what, const px_tensor_t *gpu, const px_tensor_t *cpu,
                            double tol) {
  const size_t n = px_tensor_numel(cpu);
  float *g = read_host(gpu), *c = read_host(cpu);
  double num = 0, den = 0;
  for (size_t i = 0; i < n; i++) {
    num += ((double)g[i] - c[i]) * ((double)g[i] - c[i]);
    den += (double)c[i] * c[i];
  }
  double err = sqrt(num) / (sqrt(den) > 1e-30 ? sqrt(den) : 1e-30);
  if (!(err <= tol)) fail_msg("%s: GPU vs CPU relative L2 error %g > %g", what, err, tol);
  free(g);
  free(c);
}

/* ---- refusal without CUDA or GPU ------------------------------------------------- */

/* Everywhere: px_cuda_host_alloc gives 64-byte aligned memory to write,
 * page-locked on a machine with a GPU and ordinary without one, and
 * px_cuda_host_free takes either. */
static void host_buffers_are_page_locked_with_a_gpu(void **state) {
  (void)state;
  const size_t bytes = (size_t)3 << 20;
  unsigned char *p = px_cuda_host_alloc(0, bytes);
  assert_non_null(p);
  assert_int_equal((uintptr_t)p % 64, 0);
  memset(p, 0xa5, bytes);
  assert_int_equal(p[bytes - 1], 0xa5);
  int n = 0;
  const int gpu = px_cuda_built() && px_cuda_device_count(&n) == PX_OK && n > 0;
  printf("%s host buffer\n", px_cuda_host_pinned(p) ? "page-locked" : "ordinary");
  assert_int_equal(px_cuda_host_pinned(p), gpu);
  unsigned char plain[64];
  assert_false(px_cuda_host_pinned(plain));
  assert_false(px_cuda_host_pinned(NULL));
  px_cuda_host_free(p);
  px_cuda_host_free(NULL);
}

static void cuda_backend_is_refused_cleanly_when_absent(void **state) {
  (void)state;
  px_ops_t *ops = NULL;
  px_tensor_t t = spec4(px_device_cuda(0), 1, 1, 2, 2);
  if (!px_cuda_built()) {
    assert_int_equal(px_ops_create(px_device_cuda(0), 0, &ops), PX_ERR_NOT_BUILT);
    assert_non_null(strstr(px_last_error(), "without CUDA"));
    assert_null(ops);
    assert_int_equal(px_tensor_alloc(&t, "gpu"), PX_ERR_NOT_BUILT);
    assert_null(t.data);
    return;
  }
  int n = 0;
  assert_ok(px_cuda_device_count(&n));
  /* a device that does not exist, whether or not there is a GPU */
  assert_int_equal(px_ops_create(px_device_cuda(n), 0, &ops), PX_ERR_NO_DEVICE);
  assert_null(ops);
  if (n == 0) {
    assert_non_null(strstr(px_last_error(), "no CUDA device"));
    assert_true(px_tensor_alloc(&t, "gpu") < 0);
    assert_null(t.data);
  }
}

/* ---- memory ---------------------------------------------------------------------- */

static void device_allocator_reuses_freed_blocks(void **state) {
  (void)state;
  REQUIRE_GPU();
  px_cuda_mem_stats_t a, b, c;
  px_tensor_t t = spec4(px_device_cuda(0), 3, 5, 7, 11);
  /* a live block keeps the device's cache (the last free of a device
   * empties it, checked at the end) */
  px_tensor_t keeper = spec4(px_device_cuda(0), 1, 1, 1, 1);
  assert_ok(px_tensor_alloc(&keeper, "keeper"));
  px_cuda_mem_stats(&a);
  assert_ok(px_tensor_alloc(&t, "test"));
  px_cuda_mem_stats(&b);
  assert_true(b.live_bytes - a.live_bytes >= (int64_t)t.nbytes);
  float *zero = read_host(&t); /* allocation zeroes */
  for (size_t i = 0; i < px_tensor_numel(&t); i++) assert_true(zero[i] == 0.0f);
  free(zero);
  px_tensor_release(&t);
  px_cuda_mem_stats(&c);
  assert_int_equal(c.live_bytes, a.live_bytes);
  assert_true(c.cached_bytes > 0);
  /* the same size again comes from the cache, not from cudaMalloc */
  assert_ok(px_tensor_alloc(&t, "test"));
  px_cuda_mem_stats(&b);
  assert_int_equal(b.device_allocs, c.device_allocs);
  assert_true(b.cache_hits > c.cache_hits);
  /* host round trip, device copy and zero */
  px_test_rng_t rng;
  px_test_rng_seed(&rng, 5);
  float *h = rand_host(&rng, px_tensor_numel(&t), 1.0f, 0.0f);
  assert_ok(px_tensor_copy_from_host(&t, h, px_tensor_plain_bytes(&t)));
  px_tensor_t u = t;
  u.data = NULL;
  u.flags = 0;
  assert_ok(px_tensor_alloc(&u, "test"));
  assert_ok(px_tensor_copy(&u, &t));
  float *back = read_host(&u);
  assert_memory_equal(back, h, px_tensor_plain_bytes(&t));
  assert_ok(px_tensor_zero(&u));
  free(back);
  back = read_host(&u);
  for (size_t i = 0; i < px_tensor_numel(&u); i++) assert_true(back[i] == 0.0f);
  free(back);
  free(h);
  px_tensor_release(&u);
  px_tensor_release(&t);
  px_cuda_mem_stats(&c);
  assert_true(c.cached_bytes > 0);
  assert_ok(px_cuda_mem_trim());
  px_cuda_mem_stats(&c);
  assert_int_equal(c.cached_bytes, 0);
  /* the last live block of the device gone: its cache goes back to the driver */
  assert_ok(px_tensor_alloc(&t, "test"));
  px_tensor_release(&t);
  px_tensor_release(&keeper);
  px_cuda_mem_stats(&c);
  assert_int_equal(c.live_bytes, 0);
  assert_int_equal(c.cached_bytes, 0);
}

/* CPU, everywhere: every request gets a block at least its size, of the
 * class that block's own size maps to (a freed block goes back to the list
 * it came from), with at most a quarter wasted up to 16 MiB and less than
 * 2 MiB above, in whole 2 MiB units; a large block serves a later request
 * only within an eighth. */
static void allocator_size_classes_bound_the_waste(void **state) {
  (void)state;
  px_test_rng_t rng;
  px_test_rng_seed(&rng, 9);
  const size_t mib = (size_t)1 << 20;
  size_t fixed[] = {1, 511, 512, 513, 640, 641, 1000, 4096, 4097, 16 * mib - 1, 16 * mib,
                    16 * mib + 1, 18 * mib, 18 * mib + 1, 1666 * mib + 12345, (size_t)1 << 46};
  for (int i = 0; i < 20000; i++) {
    size_t n = i < (int)(sizeof fixed / sizeof *fixed)
                   ? fixed[i]
                   : 1 + (size_t)(px_test_rng_uniform(&rng) *
                                  (double)((size_t)1 << (4 + i % 36)));
    int cls = -1, cls2 = -1;
    size_t size = px__mem_class_of(n, &cls);
    assert_true(size >= n);
    assert_true(cls >= 0 && cls < PX__MEM_CLASSES);
    assert_int_equal(px__mem_class_of(size, &cls2), size);
    assert_int_equal(cls2, cls);
    if (n > PX__MEM_LARGE) {
      assert_int_equal(cls, PX__MEM_LARGE_CLASS);
      assert_int_equal(size % (2 * mib), 0);
      assert_true(size - n < 2 * mib);
    } else {
      assert_true(cls != PX__MEM_LARGE_CLASS);
      assert_true(size <= PX__MEM_LARGE);
      assert_true(n <= 512 || (size - n) * 4 <= size);
    }
  }
  /* ResNet-50's bf16 activation memory at batch 128 (about 1,666 MB, half
   * the CPU plan's f32 bytes): the quarter classes made it a 1,879 MB block,
   * whole 2 MiB units make it 1,667 MB */
  int cls;
  assert_true(px__mem_class_of((size_t)3331850240 / 2, &cls) == 795 * 2 * mib);
  assert_true(px__mem_large_fits(100 * mib, 100 * mib));
  assert_true(px__mem_large_fits(112 * mib, 100 * mib));  /* an eighth more */
  assert_false(px__mem_large_fits(114 * mib, 100 * mib)); /* more than an eighth */
  assert_false(px__mem_large_fits(98 * mib, 100 * mib));  /* too small */
}

/* GPU: large blocks in 2 MiB units, reused best fit within an eighth, and
 * the peak's blocks by name summing to the peak. */
static void large_blocks_are_whole_units_reused_best_fit(void **state) {
  (void)state;
  REQUIRE_GPU();
  const size_t mib = (size_t)1 << 20;
  px_cuda_mem_stats_t a, b;
  void *keep = NULL, *p = NULL, *q = NULL;
  assert_ok(px__cuda_mem_alloc(0, 4096, "keeper", &keep)); /* the cache stays */
  px_cuda_mem_stats(&a);
  assert_ok(px__cuda_mem_alloc(0, 100 * mib + 1, "test large", &p));
  px_cuda_mem_stats(&b);
  assert_int_equal(b.live_bytes - a.live_bytes, 102 * mib); /* not the 128 MiB class */
  px__cuda_mem_free(p);
  /* 92 MiB fits the cached 102 MiB within an eighth: no cudaMalloc */
  px_cuda_mem_stats(&a);
  assert_ok(px__cuda_mem_alloc(0, 92 * mib, "test large", &p));
  px_cuda_mem_stats(&b);
  assert_int_equal(b.device_allocs, a.device_allocs);
  assert_int_equal(b.live_bytes - a.live_bytes, 102 * mib);
  /* 50 MiB does not: a block of its own */
  assert_ok(px__cuda_mem_alloc(0, 50 * mib, "test other", &q));
  px_cuda_mem_stats(&a);
  assert_int_equal(a.device_allocs, b.device_allocs + 1);
  assert_int_equal(a.live_bytes - b.live_bytes, 50 * mib);
  /* the peak, made of these blocks, by name */
  px_cuda_mem_use_t use[4];
  const int n = px_cuda_mem_peak_uses(use, 4);
  assert_true(n >= 3);
  int64_t sum = 0;
  for (int i = 0; i < n; i++) {
    printf("peak: %s %lld bytes in %d blocks\n", use[i].name, (long long)use[i].bytes,
           use[i].blocks);
    sum += use[i].bytes;
    if (i) assert_true(use[i - 1].bytes >= use[i].bytes);
  }
  assert_int_equal(sum, a.peak_bytes);
  assert_string_equal(use[0].name, "test large");
  assert_int_equal(use[0].bytes, (int64_t)(102 * mib));
  assert_string_equal(use[1].name, "test other");
  assert_int_equal(px_cuda_mem_peak_uses(use, 1), 1); /* everything in one entry */
  assert_int_equal(use[0].bytes, a.peak_bytes);
  assert_string_equal(use[0].name, "(other names)");
  px__cuda_mem_free(q);
  px__cuda_mem_free(p);
  px__cuda_mem_free(keep);
}

/* GPU: the peak record names 32 names as they are; from 33 on, the last
 * entry sums the names beyond the first 31. */
static void peak_record_names_32_and_sums_the_rest(void **state) {
  (void)state;
  REQUIRE_GPU();
  enum { N = 40 };
  static char names[N][16]; /* the allocator keeps the name's pointer */
  void *p[N] = {0};
  /* 32 x 6 MiB goes past the earlier tests' peaks (152 MiB) */
  const size_t mib = (size_t)1 << 20, each = 6 * mib;
  px_cuda_mem_use_t use[32];
  for (int i = 0; i < N; i++) {
    snprintf(names[i], sizeof names[i], "test name %02d", i);
    assert_ok(px__cuda_mem_alloc(0, each, names[i], &p[i]));
    if (i == 31) { /* 32 names: each its own entry */
      assert_int_equal(px_cuda_mem_peak_uses(use, 32), 32);
      for (int k = 0; k < 32; k++) {
        assert_int_equal(use[k].blocks, 1);
        assert_null(strstr(use[k].name, "other"));
      }
    }
  }
  /* 40 names: 31 of them, and the other 9 summed */
  assert_int_equal(px_cuda_mem_peak_uses(use, 32), 32);
  int others = 0;
  for (int k = 0; k < 32; k++)
    if (!strcmp(use[k].name, "(other names)")) {
      others++;
      assert_int_equal(use[k].blocks, N - 31);
      assert_int_equal(use[k].bytes, (int64_t)((N - 31) * each));
    } else {
      assert_int_equal(use[k].blocks, 1);
    }
  assert_int_equal(others, 1);
  for (int i = 0; i < N; i++) px__cuda_mem_free(p[i]);
}

static void arena_on_gpu_is_zeroed_and_plain(void **state) {
  (void)state;
  REQUIRE_GPU();
  px_tensor_t a = spec4(px_device_cuda(0), 1, 3, 3, 3), b = spec4(px_device_cuda(0), 2, 1, 1, 5);
  px_tensor_t *list[2] = {&a, &b};
  px_arena_t arena;
  memset(&arena, 0, sizeof arena);
  assert_ok(px_arena_alloc(&arena, px_device_cuda(0), list, 2, 4, "test arena"));
  assert_ptr_equal(a.data, arena.base);
  assert_ptr_equal(b.data, (char *)arena.base + a.nbytes);
  float *h = read_host(&b);
  for (int i = 0; i < 10; i++) assert_true(h[i] == 0.0f);
  free(h);
  px_arena_free(&arena);
  assert_null(arena.base);
}

/* ---- convolution ---------------------------------------------------------------- */

typedef struct {
  int64_t n, c, h, w;
  int32_t c_out, k, stride, pad, bias;
} conv_case_t;

static void run_conv(const conv_case_t *cc, int tf32, double tol, uint64_t seed) {
  pair_t p;
  pair_init(&p, tf32);
  px_conv2d_params_t prm = {cc->c_out, cc->k, cc->k, cc->stride, cc->stride, cc->pad, cc->pad,
                            cc->bias, 1, 0, 0, 0, 0};
  px_tensor_t xs_c = spec4(px_device_cpu(), cc->n, cc->c, cc->h, cc->w);
  px_tensor_t xs_g = spec4(px_device_cuda(0), cc->n, cc->c, cc->h, cc->w);
  px_conv2d_t *oc, *og;
  assert_ok(px_conv2d_create(p.cpu, &xs_c, &prm, &oc));
  assert_ok(px_conv2d_create(p.gpu, &xs_g, &prm, &og));
  px_tensor_t ys_c, ys_g, ws_c, ws_g, bs_c, bs_g;
  px_conv2d_y_spec(oc, &ys_c);
  px_conv2d_y_spec(og, &ys_g);
  px_conv2d_w_spec(oc, &ws_c);
  px_conv2d_w_spec(og, &ws_g);
  px_conv2d_b_spec(oc, &bs_c);
  px_conv2d_b_spec(og, &bs_g);
  expect_same_dims(&ys_c, &ys_g);
  expect_same_dims(&ws_c, &ws_g);

  px_test_rng_t rng;
  px_test_rng_seed(&rng, seed);
  float *hx = rand_host(&rng, px_tensor_numel(&xs_c), 1.0f, 0.0f);
  float *hw = rand_host(&rng, px_tensor_numel(&ws_c), 0.3f, 0.0f);
  float *hb = rand_host(&rng, px_tensor_numel(&bs_c), 1.0f, 0.0f);
  float *hdy = rand_host(&rng, px_tensor_numel(&ys_c), 1.0f, 0.0f);
  px_tensor_t x[2], y[2], w[2], b[2], dy[2], dx[2], dw[2], db[2];
  const px_tensor_t *xs[2] = {&xs_c, &xs_g}, *ys[2] = {&ys_c, &ys_g}, *wss[2] = {&ws_c, &ws_g},
                    *bss[2] = {&bs_c, &bs_g};
  px_conv2d_t *op[2] = {oc, og};
  for (int d = 0; d < 2; d++) {
    make_tensor(&x[d], xs[d], hx);
    make_tensor(&y[d], ys[d], NULL);
    make_tensor(&w[d], wss[d], hw);
    make_tensor(&b[d], bss[d], hb);
    make_tensor(&dy[d], ys[d], hdy);
    make_tensor(&dx[d], xs[d], NULL);
    make_tensor(&dw[d], wss[d], NULL);
    make_tensor(&db[d], bss[d], NULL);
    assert_ok(px_conv2d_forward(op[d], &y[d], &x[d], &w[d], cc->bias ? &b[d] : NULL));
    assert_ok(px_conv2d_backward_data(op[d], &dx[d], &dy[d], &w[d]));
    assert_ok(px_conv2d_backward_weights(op[d], &dw[d], cc->bias ? &db[d] : NULL, &x[d], &dy[d]));
  }
  assert_ok(px_ops_sync(p.gpu));
  void (*check)(const char *, const px_tensor_t *, const px_tensor_t *, double) =
      tf32 ? expect_match_l2 : expect_match;
  check("conv forward y", &y[1], &y[0], tol);
  check("conv backward dx", &dx[1], &dx[0], tol);
  check("conv backward dw", &dw[1], &dw[0], tol);
  if (cc->bias) check("conv backward db", &db[1], &db[0], tol);
  /* a wrong spec is refused on the GPU as on the CPU */
  assert_int_equal(px_conv2d_forward(og, &y[1], &dy[1], &w[1], cc->bias ? &b[1] : NULL),
                   PX_ERR_INVALID);
  for (int d = 0; d < 2; d++) {
    px_tensor_t *all[] = {&x[d], &y[d], &w[d], &b[d], &dy[d], &dx[d], &dw[d], &db[d]};
    for (size_t i = 0; i < sizeof all / sizeof *all; i++) px_tensor_release(all[i]);
  }
  free(hx);
  free(hw);
  free(hb);
  free(hdy);
  px_conv2d_destroy(oc);
  px_conv2d_destroy(og);
  pair_fini(&p);
}

static const conv_case_t conv_cases[] = {
    {2, 3, 9, 9, 8, 3, 1, 1, 1},   /* stem-like 3x3, padding, bias */
    {2, 8, 8, 8, 16, 3, 2, 1, 0},  /* strided 3x3 */
    {3, 5, 7, 6, 4, 1, 1, 0, 1},   /* 1x1 */
    {2, 4, 10, 10, 6, 5, 2, 2, 0}, /* 5x5, stride 2, pad 2 */
    {2, 16, 8, 8, 32, 1, 2, 0, 0}, /* 1x1 stride-2 shortcut */
    {1, 6, 7, 7, 5, 3, 3, 0, 1},   /* stride larger than padding, odd size */
};

static void conv_matches_cpu_in_f32(void **state) {
  (void)state;
  REQUIRE_GPU();
  for (size_t i = 0; i < sizeof conv_cases / sizeof *conv_cases; i++)
    run_conv(&conv_cases[i], 0, 1e-3, 100 + i);
}

static void conv_matches_cpu_in_tf32(void **state) {
  (void)state;
  REQUIRE_GPU();
  for (size_t i = 0; i < sizeof conv_cases / sizeof *conv_cases; i++)
    run_conv(&conv_cases[i], 1, 1e-2, 200 + i);
}

/* ---- batch norm ------------------------------------------------------------------ */

static void run_bn(int64_t n, int64_t c, int64_t h, int64_t w, int relu, uint64_t seed) {
  pair_t p;
  pair_init(&p, 0);
  px_batchnorm_params_t prm = {1e-5f, 0.1f, relu};
  px_tensor_t xs[2] = {spec4(px_device_cpu(), n, c, h, w), spec4(px_device_cuda(0), n, c, h, w)};
  px_batchnorm_t *op[2];
  assert_ok(px_batchnorm_create(p.cpu, &xs[0], &prm, &op[0]));
  assert_ok(px_batchnorm_create(p.gpu, &xs[1], &prm, &op[1]));
  px_tensor_t ys[2], cs[2], wss[2];
  for (int d = 0; d < 2; d++) {
    px_batchnorm_y_spec(op[d], &ys[d]);
    px_batchnorm_c_spec(op[d], &cs[d]);
    px_batchnorm_ws_spec(op[d], &wss[d]);
    assert_true(relu ? wss[d].nbytes > 0 : wss[d].nbytes == 0);
  }
  expect_same_dims(&ys[0], &ys[1]);
  px_test_rng_t rng;
  px_test_rng_seed(&rng, seed);
  const size_t nx = (size_t)(n * c * h * w), nc = (size_t)c;
  float *hx = rand_host(&rng, nx, 2.0f, 0.5f), *hdy = rand_host(&rng, nx, 1.0f, 0.0f);
  float *hscale = rand_host(&rng, nc, 0.5f, 1.0f), *hshift = rand_host(&rng, nc, 0.5f, 0.0f);
  float *hrm = rand_host(&rng, nc, 0.1f, 0.0f), *hrv = rand_host(&rng, nc, 0.1f, 1.0f);
  px_tensor_t x[2], y[2], mean[2], var[2], ws[2], scale[2], shift[2], rm[2], rv[2], dy[2], dx[2],
      dscale[2], dshift[2];
  for (int d = 0; d < 2; d++) {
    make_tensor(&x[d], &xs[d], hx);
    make_tensor(&y[d], &ys[d], NULL);
    make_tensor(&dy[d], &ys[d], hdy);
    make_tensor(&dx[d], &xs[d], NULL);
    make_tensor(&mean[d], &cs[d], NULL);
    make_tensor(&var[d], &cs[d], NULL);
    make_tensor(&scale[d], &cs[d], hscale);
    make_tensor(&shift[d], &cs[d], hshift);
    make_tensor(&rm[d], &cs[d], hrm);
    make_tensor(&rv[d], &cs[d], hrv);
    make_tensor(&dscale[d], &cs[d], NULL);
    make_tensor(&dshift[d], &cs[d], NULL);
    make_tensor(&ws[d], &wss[d], NULL);
    px_tensor_t *wsp = wss[d].nbytes ? &ws[d] : NULL;
    assert_ok(px_batchnorm_forward_train(op[d], &y[d], &mean[d], &var[d], wsp, &x[d], &scale[d],
                                         &shift[d], &rm[d], &rv[d]));
    assert_ok(px_batchnorm_backward(op[d], &dx[d], &dscale[d], &dshift[d], &dy[d], &x[d], &scale[d],
                                    &shift[d], &mean[d], &var[d], wsp));
  }
  expect_match("bn train y", &y[1], &y[0], 2e-4);
  expect_match("bn batch mean", &mean[1], &mean[0], 1e-5);
  expect_match("bn batch var", &var[1], &var[0], 2e-4);
  expect_match("bn running mean", &rm[1], &rm[0], 1e-5);
  expect_match("bn running var (unbiased)", &rv[1], &rv[0], 2e-5);
  expect_match("bn dx", &dx[1], &dx[0], 2e-3);
  expect_match("bn dscale", &dscale[1], &dscale[0], 2e-3);
  expect_match("bn dshift", &dshift[1], &dshift[0], 2e-3);

  /* the backward in place (dx aliasing dy) gives the same result on the GPU */
  px_tensor_t dxy;
  make_tensor(&dxy, &ys[1], hdy);
  assert_ok(px_batchnorm_backward(op[1], &dxy, &dscale[1], &dshift[1], &dxy, &x[1], &scale[1],
                                  &shift[1], &mean[1], &var[1], wss[1].nbytes ? &ws[1] : NULL));
  expect_match("bn dx in place", &dxy, &dx[1], 1e-5);
  px_tensor_release(&dxy);

  /* inference with the updated running statistics */
  for (int d = 0; d < 2; d++)
    assert_ok(px_batchnorm_forward_infer(op[d], &y[d], &x[d], &scale[d], &shift[d], &rm[d], &rv[d]));
  expect_match("bn infer y", &y[1], &y[0], 2e-4);
  for (int d = 0; d < 2; d++) {
    px_tensor_t *all[] = {&x[d],  &y[d],  &mean[d], &var[d], &ws[d],     &scale[d],  &shift[d],
                          &rm[d], &rv[d], &dy[d],   &dx[d],  &dscale[d], &dshift[d]};
    for (size_t i = 0; i < sizeof all / sizeof *all; i++) px_tensor_release(all[i]);
    px_batchnorm_destroy(op[d]);
  }
  free(hx); free(hdy); free(hscale); free(hshift); free(hrm); free(hrv);
  pair_fini(&p);
}

static void batchnorm_matches_cpu(void **state) {
  (void)state;
  REQUIRE_GPU();
  run_bn(4, 8, 5, 5, 0, 11);
  run_bn(2, 16, 3, 7, 0, 12);
  run_bn(8, 3, 1, 1, 0, 13); /* after global pooling: one value per sample */
}

static void batchnorm_fused_relu_matches_cpu(void **state) {
  (void)state;
  REQUIRE_GPU();
  run_bn(4, 8, 5, 5, 1, 21);
  run_bn(2, 16, 6, 6, 1, 22);
}

/* ---- ReLU and residual add ---------------------------------------------------------- */

static void relu_matches_cpu(void **state) {
  (void)state;
  REQUIRE_GPU();
  pair_t p;
  pair_init(&p, 0);
  px_tensor_t xs[2] = {spec4(px_device_cpu(), 2, 5, 6, 7), spec4(px_device_cuda(0), 2, 5, 6, 7)};
  px_relu_t *op[2];
  assert_ok(px_relu_create(p.cpu, &xs[0], &op[0]));
  assert_ok(px_relu_create(p.gpu, &xs[1], &op[1]));
  px_test_rng_t rng;
  px_test_rng_seed(&rng, 31);
  const size_t n = px_tensor_numel(&xs[0]);
  float *hx = rand_host(&rng, n, 1.0f, 0.0f), *hdy = rand_host(&rng, n, 1.0f, 0.0f);
  px_tensor_t x[2], y[2], dy[2], dx[2];
  for (int d = 0; d < 2; d++) {
    make_tensor(&x[d], &xs[d], hx);
    make_tensor(&y[d], &xs[d], NULL);
    make_tensor(&dy[d], &xs[d], hdy);
    make_tensor(&dx[d], &xs[d], NULL);
    assert_ok(px_relu_forward(op[d], &y[d], &x[d]));
    assert_ok(px_relu_backward(op[d], &dx[d], &dy[d], &y[d]));
    assert_ok(px_relu_forward(op[d], &x[d], &x[d])); /* in place */
  }
  expect_match("relu y", &y[1], &y[0], 0.0);
  expect_match("relu dx", &dx[1], &dx[0], 0.0);
  expect_match("relu in place", &x[1], &y[0], 0.0);
  for (int d = 0; d < 2; d++) {
    px_tensor_release(&x[d]);
    px_tensor_release(&y[d]);
    px_tensor_release(&dy[d]);
    px_tensor_release(&dx[d]);
    px_relu_destroy(op[d]);
  }
  free(hx);
  free(hdy);
  pair_fini(&p);
}

static void add_matches_cpu(void **state) {
  (void)state;
  REQUIRE_GPU();
  for (int relu = 0; relu <= 1; relu++) {
    pair_t p;
    pair_init(&p, 0);
    px_tensor_t xs[2] = {spec4(px_device_cpu(), 3, 4, 5, 5), spec4(px_device_cuda(0), 3, 4, 5, 5)};
    px_add_t *op[2];
    assert_ok(px_add_create(p.cpu, &xs[0], relu, &op[0]));
    assert_ok(px_add_create(p.gpu, &xs[1], relu, &op[1]));
    px_test_rng_t rng;
    px_test_rng_seed(&rng, 41 + (uint64_t)relu);
    const size_t n = px_tensor_numel(&xs[0]);
    float *ha = rand_host(&rng, n, 1.0f, 0.0f), *hb = rand_host(&rng, n, 1.0f, 0.0f);
    float *hdy = rand_host(&rng, n, 1.0f, 0.0f);
    px_tensor_t a[2], b[2], y[2], dy[2], g[2];
    for (int d = 0; d < 2; d++) {
      make_tensor(&a[d], &xs[d], ha);
      make_tensor(&b[d], &xs[d], hb);
      make_tensor(&y[d], &xs[d], NULL);
      make_tensor(&dy[d], &xs[d], hdy);
      make_tensor(&g[d], &xs[d], NULL);
      assert_ok(px_add_forward(op[d], &y[d], &a[d], &b[d]));
      assert_ok(px_add_backward(op[d], &g[d], &dy[d], &y[d]));
      assert_ok(px_add_backward(op[d], &dy[d], &dy[d], &y[d])); /* in place */
      assert_ok(px_add_forward(op[d], &a[d], &a[d], &b[d]));    /* y aliases a */
    }
    expect_match("add y", &y[1], &y[0], 1e-6);
    expect_match("add g", &g[1], &g[0], 0.0);
    expect_match("add g in place", &dy[1], &g[0], 0.0);
    expect_match("add y aliasing a", &a[1], &y[0], 1e-6);
    for (int d = 0; d < 2; d++) {
      px_tensor_t *all[] = {&a[d], &b[d], &y[d], &dy[d], &g[d]};
      for (size_t i = 0; i < sizeof all / sizeof *all; i++) px_tensor_release(all[i]);
      px_add_destroy(op[d]);
    }
    free(ha);
    free(hb);
    free(hdy);
    pair_fini(&p);
  }
}

/* ---- pooling ---------------------------------------------------------------------- */

static void run_pool(int global, px_pool2d_params_t prm, int64_t n, int64_t c, int64_t h,
                     int64_t w, uint64_t seed) {
  pair_t p;
  pair_init(&p, 0);
  px_tensor_t xs[2] = {spec4(px_device_cpu(), n, c, h, w), spec4(px_device_cuda(0), n, c, h, w)};
  px_pool2d_t *op[2];
  px_ops_t *ctx[2] = {p.cpu, p.gpu};
  for (int d = 0; d < 2; d++) {
    if (global)
      assert_ok(px_global_avgpool_create(ctx[d], &xs[d], &op[d]));
    else
      assert_ok(px_pool2d_create(ctx[d], &xs[d], &prm, &op[d]));
  }
  px_tensor_t ys[2], wss[2];
  for (int d = 0; d < 2; d++) {
    px_pool2d_y_spec(op[d], &ys[d]);
    px_pool2d_ws_spec(op[d], &wss[d]);
  }
  expect_same_dims(&ys[0], &ys[1]);
  assert_true((!global && prm.mode == PX_POOL_MAX) ? wss[1].nbytes > 0 : wss[1].nbytes == 0);
  px_test_rng_t rng;
  px_test_rng_seed(&rng, seed);
  float *hx = rand_host(&rng, px_tensor_numel(&xs[0]), 1.0f, 0.0f);
  float *hdy = rand_host(&rng, px_tensor_numel(&ys[0]), 1.0f, 0.0f);
  px_tensor_t x[2], y[2], ws[2], dy[2], dx[2];
  for (int d = 0; d < 2; d++) {
    make_tensor(&x[d], &xs[d], hx);
    make_tensor(&y[d], &ys[d], NULL);
    make_tensor(&ws[d], &wss[d], NULL);
    make_tensor(&dy[d], &ys[d], hdy);
    make_tensor(&dx[d], &xs[d], NULL);
    px_tensor_t *wsp = wss[d].nbytes ? &ws[d] : NULL;
    assert_ok(px_pool2d_forward(op[d], &y[d], wsp, &x[d]));
    assert_ok(px_pool2d_backward(op[d], &dx[d], &dy[d], wsp));
  }
  expect_match("pool y", &y[1], &y[0], 1e-5);
  expect_match("pool dx", &dx[1], &dx[0], 1e-5);
  for (int d = 0; d < 2; d++) {
    px_tensor_t *all[] = {&x[d], &y[d], &ws[d], &dy[d], &dx[d]};
    for (size_t i = 0; i < sizeof all / sizeof *all; i++) px_tensor_release(all[i]);
    px_pool2d_destroy(op[d]);
  }
  free(hx);
  free(hdy);
  pair_fini(&p);
}

static void max_pool_matches_cpu(void **state) {
  (void)state;
  REQUIRE_GPU();
  run_pool(0, (px_pool2d_params_t){PX_POOL_MAX, 3, 3, 2, 2, 1, 1, 0, 0, 0, 0, 0}, 2, 3, 9, 9, 51);
  run_pool(0, (px_pool2d_params_t){PX_POOL_MAX, 2, 2, 2, 2, 0, 0, 0, 0, 0, 0, 0}, 2, 4, 8, 8, 52);
  run_pool(0, (px_pool2d_params_t){PX_POOL_MAX, 3, 2, 1, 2, 1, 0, 0, 0, 0, 0, 0}, 1, 2, 7, 6, 53);
}

static void avg_pool_matches_cpu(void **state) {
  (void)state;
  REQUIRE_GPU();
  run_pool(0, (px_pool2d_params_t){PX_POOL_AVG, 3, 3, 1, 1, 1, 1, 0, 0, 0, 0, 0}, 2, 3, 7, 7, 61);
  run_pool(0, (px_pool2d_params_t){PX_POOL_AVG_EXCLUDE_PAD, 3, 3, 2, 2, 1, 1, 0, 0, 0, 0, 0}, 2, 3, 9, 8, 62);
  run_pool(0, (px_pool2d_params_t){PX_POOL_AVG, 2, 2, 2, 2, 0, 0, 0, 0, 0, 0, 0}, 2, 5, 6, 6, 63);
}

static void global_avg_pool_matches_cpu(void **state) {
  (void)state;
  REQUIRE_GPU();
  px_pool2d_params_t unused = {PX_POOL_AVG, 1, 1, 1, 1, 0, 0, 0, 0, 0, 0, 0};
  run_pool(1, unused, 4, 16, 4, 4, 71);
  run_pool(1, unused, 3, 8, 8, 5, 72);
}

/* ---- fully connected ----------------------------------------------------------------- */

static void run_fc(int four_d, int bias, int out_features, uint64_t seed) {
  pair_t p;
  pair_init(&p, 0);
  px_tensor_t xs[2];
  if (four_d) {
    xs[0] = spec4(px_device_cpu(), 6, 12, 2, 3);
    xs[1] = spec4(px_device_cuda(0), 6, 12, 2, 3);
  } else {
    const int64_t dims[2] = {7, 33};
    assert_ok(px_tensor_init(&xs[0], px_device_cpu(), PX_DTYPE_F32, 2, dims));
    assert_ok(px_tensor_init(&xs[1], px_device_cuda(0), PX_DTYPE_F32, 2, dims));
  }
  px_fc_params_t prm = {out_features, bias};
  px_fc_t *op[2];
  assert_ok(px_fc_create(p.cpu, &xs[0], &prm, &op[0]));
  assert_ok(px_fc_create(p.gpu, &xs[1], &prm, &op[1]));
  px_tensor_t ys[2], wss[2], bss[2];
  for (int d = 0; d < 2; d++) {
    px_fc_y_spec(op[d], &ys[d]);
    px_fc_w_spec(op[d], &wss[d]);
    px_fc_b_spec(op[d], &bss[d]);
  }
  expect_same_dims(&ys[0], &ys[1]);
  expect_same_dims(&wss[0], &wss[1]);
  px_test_rng_t rng;
  px_test_rng_seed(&rng, seed);
  float *hx = rand_host(&rng, px_tensor_numel(&xs[0]), 1.0f, 0.0f);
  float *hw = rand_host(&rng, px_tensor_numel(&wss[0]), 0.3f, 0.0f);
  float *hb = rand_host(&rng, px_tensor_numel(&bss[0]), 1.0f, 0.0f);
  float *hdy = rand_host(&rng, px_tensor_numel(&ys[0]), 1.0f, 0.0f);
  px_tensor_t x[2], y[2], w[2], b[2], dy[2], dx[2], dw[2], db[2];
  for (int d = 0; d < 2; d++) {
    make_tensor(&x[d], &xs[d], hx);
    make_tensor(&y[d], &ys[d], NULL);
    make_tensor(&w[d], &wss[d], hw);
    make_tensor(&b[d], &bss[d], hb);
    make_tensor(&dy[d], &ys[d], hdy);
    make_tensor(&dx[d], &xs[d], NULL);
    make_tensor(&dw[d], &wss[d], NULL);
    make_tensor(&db[d], &bss[d], NULL);
    assert_ok(px_fc_forward(op[d], &y[d], &x[d], &w[d], bias ? &b[d] : NULL));
    assert_ok(px_fc_backward_data(op[d], &dx[d], &dy[d], &w[d]));
    assert_ok(px_fc_backward_weights(op[d], &dw[d], bias ? &db[d] : NULL, &x[d], &dy[d]));
  }
  expect_match("fc y", &y[1], &y[0], 1e-4);
  expect_match("fc dx", &dx[1], &dx[0], 1e-4);
  expect_match("fc dw", &dw[1], &dw[0], 1e-4);
  if (bias) expect_match("fc db", &db[1], &db[0], 1e-4);
  for (int d = 0; d < 2; d++) {
    px_tensor_t *all[] = {&x[d], &y[d], &w[d], &b[d], &dy[d], &dx[d], &dw[d], &db[d]};
    for (size_t i = 0; i < sizeof all / sizeof *all; i++) px_tensor_release(all[i]);
    px_fc_destroy(op[d]);
  }
  free(hx); free(hw); free(hb); free(hdy);
  pair_fini(&p);
}

static void fc_matches_cpu(void **state) {
  (void)state;
  REQUIRE_GPU();
  run_fc(0, 1, 10, 81);
  run_fc(0, 0, 5, 82);
  run_fc(1, 1, 10, 83); /* [N, C, H, W] flattened in (c, h, w) order */
  run_fc(1, 0, 130, 84);
}

/* ---- softmax cross-entropy -------------------------------------------------------------- */

static void run_ce(int64_t n, int64_t k, uint64_t seed) {
  pair_t p;
  pair_init(&p, 0);
  const int64_t ld[2] = {n, k}, lb[1] = {n};
  px_tensor_t ls[2], lbs[2];
  px_device_t dev[2] = {px_device_cpu(), px_device_cuda(0)};
  px_ops_t *ctx[2] = {p.cpu, p.gpu};
  px_test_rng_t rng;
  px_test_rng_seed(&rng, seed);
  float *hl = rand_host(&rng, (size_t)(n * k), 3.0f, 0.0f);
  int32_t *hy = malloc((size_t)n * sizeof *hy);
  assert_non_null(hy);
  for (int64_t i = 0; i < n; i++) hy[i] = (int32_t)(px_test_rng_u64(&rng) % (uint64_t)k);
  px_tensor_t logits[2], labels[2], dl[2];
  float loss[2], loss_eval[2];
  int64_t correct[2], correct_eval[2];
  for (int d = 0; d < 2; d++) {
    assert_ok(px_tensor_init(&ls[d], dev[d], PX_DTYPE_F32, 2, ld));
    assert_ok(px_tensor_init(&lbs[d], dev[d], PX_DTYPE_I32, 1, lb));
    make_tensor(&logits[d], &ls[d], hl);
    make_tensor(&dl[d], &ls[d], NULL);
    labels[d] = lbs[d];
    assert_ok(px_tensor_alloc(&labels[d], "labels"));
    assert_ok(px_tensor_copy_from_host(&labels[d], hy, (size_t)n * sizeof *hy));
    assert_ok(px_softmax_ce(ctx[d], &dl[d], &loss[d], &correct[d], &logits[d], &labels[d]));
    assert_ok(px_softmax_ce(ctx[d], NULL, &loss_eval[d], &correct_eval[d], &logits[d], &labels[d]));
  }
  assert_true(fabs((double)loss[1] - (double)loss[0]) <= 1e-5 * fabs((double)loss[0]) + 1e-6);
  assert_true(loss_eval[1] == loss[1]);
  assert_int_equal(correct[1], correct[0]);
  assert_int_equal(correct_eval[1], correct[0]);
  expect_match("softmax_ce dlogits", &dl[1], &dl[0], 1e-6);
  /* a label out of range is refused */
  hy[n / 2] = (int32_t)k;
  assert_ok(px_tensor_copy_from_host(&labels[1], hy, (size_t)n * sizeof *hy));
  assert_int_equal(px_softmax_ce(p.gpu, NULL, &loss[1], &correct[1], &logits[1], &labels[1]),
                   PX_ERR_INVALID);
  assert_non_null(strstr(px_last_error(), "label"));
  for (int d = 0; d < 2; d++) {
    px_tensor_release(&logits[d]);
    px_tensor_release(&labels[d]);
    px_tensor_release(&dl[d]);
  }
  free(hl);
  free(hy);
  pair_fini(&p);
}

static void softmax_ce_matches_cpu(void **state) {
  (void)state;
  REQUIRE_GPU();
  run_ce(37, 10, 91);
  run_ce(600, 10, 92); /* more rows than threads */
  run_ce(5, 100, 93);
}

/* ---- reorder and context ------------------------------------------------------------------ */

static void reorder_is_a_copy_on_gpu(void **state) {
  (void)state;
  REQUIRE_GPU();
  px_ops_t *ops;
  assert_ok(px_ops_create(px_device_cuda(0), 0, &ops));
  print_message("%s\n", px_ops_describe(ops));
  assert_non_null(strstr(px_ops_describe(ops), "cuDNN"));
  assert_int_equal(px_ops_device(ops).kind, PX_DEVICE_CUDA);
  px_tensor_t s = spec4(px_device_cuda(0), 2, 3, 4, 5), a, b;
  px_reorder_t *r;
  assert_ok(px_reorder_create(ops, &s, &s, &r));
  px_test_rng_t rng;
  px_test_rng_seed(&rng, 99);
  float *h = rand_host(&rng, px_tensor_numel(&s), 1.0f, 0.0f);
  make_tensor(&a, &s, h);
  make_tensor(&b, &s, NULL);
  assert_ok(px_reorder_execute(r, &b, &a));
  float *back = read_host(&b);
  assert_memory_equal(back, h, px_tensor_plain_bytes(&s));
  /* a CPU tensor is refused by a GPU op */
  px_tensor_t c = spec4(px_device_cpu(), 2, 3, 4, 5);
  make_tensor(&c, &c, h);
  assert_int_equal(px_reorder_execute(r, &b, &c), PX_ERR_INVALID);
  px_tensor_release(&c);
  free(back);
  free(h);
  px_tensor_release(&a);
  px_tensor_release(&b);
  px_reorder_destroy(r);
  assert_ok(px_ops_sync(ops));
  px_ops_destroy(ops);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(cuda_backend_is_refused_cleanly_when_absent),
      cmocka_unit_test(host_buffers_are_page_locked_with_a_gpu),
      cmocka_unit_test(device_allocator_reuses_freed_blocks),
      cmocka_unit_test(allocator_size_classes_bound_the_waste),
      cmocka_unit_test(large_blocks_are_whole_units_reused_best_fit),
      cmocka_unit_test(peak_record_names_32_and_sums_the_rest),
      cmocka_unit_test(arena_on_gpu_is_zeroed_and_plain),
      cmocka_unit_test(conv_matches_cpu_in_f32),
      cmocka_unit_test(conv_matches_cpu_in_tf32),
      cmocka_unit_test(batchnorm_matches_cpu),
      cmocka_unit_test(batchnorm_fused_relu_matches_cpu),
      cmocka_unit_test(relu_matches_cpu),
      cmocka_unit_test(add_matches_cpu),
      cmocka_unit_test(max_pool_matches_cpu),
      cmocka_unit_test(avg_pool_matches_cpu),
      cmocka_unit_test(global_avg_pool_matches_cpu),
      cmocka_unit_test(fc_matches_cpu),
      cmocka_unit_test(softmax_ce_matches_cpu),
      cmocka_unit_test(reorder_is_a_copy_on_gpu),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
