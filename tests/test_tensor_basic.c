/* Tensors: specs, owned storage, arenas (one allocation per family, pointers
 * from a size table), host copies in plain and blocked layouts, and the
 * device checks that keep CUDA tensors out until that backend exists. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "prunex/cuda.h"
#include "prunex/ops.h"
#include "prunex/ops_internal.h"
#include "prunex/tensor.h"
#include "prunex/tensor_internal.h"
#include "px_test_util.h"

static void init_computes_numel_and_bytes(void **state) {
  (void)state;
  px_tensor_t t;
  const int64_t dims[3] = {2, 3, 5};
  assert_int_equal(px_tensor_init(&t, px_device_cpu(), PX_DTYPE_F32, 3, dims), PX_OK);
  assert_int_equal(px_tensor_numel(&t), 30);
  assert_int_equal(t.nbytes, 120);
  assert_int_equal(px_tensor_plain_bytes(&t), 120);
  assert_null(t.data);
  assert_null(t.layout);
  assert_int_equal(t.dims[3], 1);
  assert_int_equal(px_tensor_init(&t, px_device_cpu(), PX_DTYPE_U8, 1, dims), PX_OK);
  assert_int_equal(t.nbytes, 2);
  assert_int_equal(px_dtype_size(PX_DTYPE_I32), 4);
}

static void init_rejects_bad_shapes(void **state) {
  (void)state;
  px_tensor_t t;
  const int64_t bad[2] = {2, 0};
  const int64_t ok[5] = {1, 2, 3, 4, 5};
  assert_int_equal(px_tensor_init(&t, px_device_cpu(), PX_DTYPE_F32, 2, bad), PX_ERR_INVALID);
  assert_int_equal(px_tensor_init(&t, px_device_cpu(), PX_DTYPE_F32, 5, ok), PX_ERR_INVALID);
  assert_int_equal(px_tensor_init(&t, px_device_cpu(), PX_DTYPE_F32, 0, ok), PX_ERR_INVALID);
  assert_int_equal(px_tensor_init(&t, px_device_cpu(), (px_dtype_t)42, 2, ok), PX_ERR_INVALID);
}

static void alloc_and_release_are_counted(void **state) {
  (void)state;
  px_mem_stats_t before, mid, after;
  px_mem_stats(&before);
  px_tensor_t t;
  assert_int_equal(px_tensor_init4(&t, px_device_cpu(), 2, 3, 4, 5), PX_OK);
  assert_int_equal(px_tensor_alloc(&t, "test tensor"), PX_OK);
  assert_non_null(t.data);
  assert_true(t.flags & PX_TENSOR_OWNS_DATA);
  assert_int_equal(((uintptr_t)t.data) % 64, 0);
  for (size_t i = 0; i < px_tensor_numel(&t); i++) assert_true(((float *)t.data)[i] == 0.0f);
  assert_int_equal(px_tensor_alloc(&t, "again"), PX_ERR_STATE);
  px_mem_stats(&mid);
  assert_int_equal(mid.live_bytes - before.live_bytes, 480);
  px_tensor_release(&t);
  assert_null(t.data);
  px_mem_stats(&after);
  assert_int_equal(after.live_bytes, before.live_bytes);
}

static void arena_is_one_aligned_zeroed_allocation(void **state) {
  (void)state;
  px_tensor_t a, b, c;
  const int64_t da[1] = {3}, db[2] = {5, 7}, dc[1] = {10};
  assert_int_equal(px_tensor_init(&a, px_device_cpu(), PX_DTYPE_F32, 1, da), PX_OK);
  assert_int_equal(px_tensor_init(&b, px_device_cpu(), PX_DTYPE_F32, 2, db), PX_OK);
  assert_int_equal(px_tensor_init(&c, px_device_cpu(), PX_DTYPE_U8, 1, dc), PX_OK);
  px_tensor_t *family[3] = {&a, &b, &c};
  size_t offsets[3];
  assert_int_equal(px_arena_plan(family, 3, 64, offsets), 64 + 192 + 10);
  assert_int_equal(offsets[0], 0);
  assert_int_equal(offsets[1], 64);
  assert_int_equal(offsets[2], 256);

  px_mem_stats_t before, after;
  px_mem_stats(&before);
  px_arena_t arena = {0};
  assert_int_equal(px_arena_alloc(&arena, px_device_cpu(), family, 3, 64, "test arena"), PX_OK);
  px_mem_stats(&after);
  assert_int_equal(after.allocs - before.allocs, 1);
  assert_int_equal(after.live_bytes - before.live_bytes, (int64_t)arena.bytes);
  assert_ptr_equal(a.data, arena.base);
  assert_ptr_equal(b.data, (char *)arena.base + 64);
  assert_ptr_equal(c.data, (char *)arena.base + 256);
  assert_false(a.flags & PX_TENSOR_OWNS_DATA);
  for (size_t i = 0; i < arena.bytes; i++) assert_int_equal(((unsigned char *)arena.base)[i], 0);
  /* packed: with align equal to the element size the family is one flat array */
  px_tensor_t p1, p2;
  assert_int_equal(px_tensor_init(&p1, px_device_cpu(), PX_DTYPE_F32, 1, da), PX_OK);
  assert_int_equal(px_tensor_init(&p2, px_device_cpu(), PX_DTYPE_F32, 2, db), PX_OK);
  px_tensor_t *packed[2] = {&p1, &p2};
  px_arena_t flat = {0};
  assert_int_equal(px_arena_alloc(&flat, px_device_cpu(), packed, 2, 4, "flat"), PX_OK);
  assert_int_equal(flat.bytes, (3 + 35) * 4);
  assert_ptr_equal(p2.data, (float *)p1.data + 3);
  /* a tensor that already has storage is refused and nothing changes */
  px_arena_t again = {0};
  assert_int_equal(px_arena_alloc(&again, px_device_cpu(), packed, 2, 4, "again"), PX_ERR_INVALID);
  assert_null(again.base);
  px_arena_free(&flat);
  px_arena_free(&arena);
  px_arena_free(&arena); /* safe twice */
  px_mem_stats(&after);
  assert_int_equal(after.live_bytes, before.live_bytes);
}

static void plain_host_copies_round_trip(void **state) {
  (void)state;
  px_tensor_t t;
  assert_int_equal(px_tensor_init4(&t, px_device_cpu(), 2, 3, 2, 2), PX_OK);
  assert_int_equal(px_tensor_alloc(&t, "t"), PX_OK);
  float in[24], out[24];
  for (int i = 0; i < 24; i++) in[i] = (float)i - 7.5f;
  assert_int_equal(px_tensor_copy_from_host(&t, in, sizeof in), PX_OK);
  assert_int_equal(px_tensor_copy_to_host(&t, out, sizeof out), PX_OK);
  assert_memory_equal(in, out, sizeof in);
  assert_int_equal(px_tensor_copy_from_host(&t, in, sizeof in - 4), PX_ERR_INVALID);
  px_tensor_t u = t;
  u.data = NULL;
  u.flags = 0;
  assert_int_equal(px_tensor_alloc(&u, "u"), PX_OK);
  assert_int_equal(px_tensor_copy(&u, &t), PX_OK);
  assert_memory_equal(u.data, t.data, t.nbytes);
  assert_int_equal(px_tensor_zero(&t), PX_OK);
  assert_int_equal(((float *)t.data)[5], 0.0f);
  px_tensor_release(&u);
  px_tensor_release(&t);
}

/* A blocked layout comes from an op: a 1x1 convolution's output. */
static void blocked_host_copies_round_trip(void **state) {
  (void)state;
  px_ops_t *ops = NULL;
  assert_int_equal(px_ops_create(px_device_cpu(), 2, &ops), PX_OK);
  px_tensor_t x;
  assert_int_equal(px_tensor_init4(&x, px_device_cpu(), 3, 4, 5, 6), PX_OK);
  px_conv2d_params_t p = {.c_out = 20, .kh = 1, .kw = 1, .stride_h = 1, .stride_w = 1};
  px_conv2d_t *conv = NULL;
  assert_int_equal(px_conv2d_create(ops, &x, &p, &conv), PX_OK);
  px_tensor_t y;
  px_conv2d_y_spec(conv, &y);
  px_conv2d_destroy(conv); /* the layout is owned by ops and outlives the op */
  assert_int_equal(y.dims[1], 20);
  assert_non_null(y.layout); /* oneDNN blocks channels on every x86 ISA it JITs for */
  print_message("blocked layout: %s, %zu bytes for %zu elements\n", px_layout_name(y.layout),
                y.nbytes, px_tensor_numel(&y));
  assert_true(y.nbytes >= px_tensor_plain_bytes(&y)); /* 20 channels pad to the block */
  assert_int_equal(px_tensor_alloc(&y, "blocked"), PX_OK);
  const size_t n = px_tensor_numel(&y);
  float *in = malloc(n * sizeof *in), *out = malloc(n * sizeof *out);
  px_test_rng_t rng;
  px_test_rng_seed(&rng, 7);
  px_test_fill_normal(&rng, in, n);
  assert_int_equal(px_tensor_copy_from_host(&y, in, n * sizeof *in), PX_OK);
  /* the storage really is in another order */
  assert_true(memcmp(y.data, in, n * sizeof *in) != 0);
  assert_int_equal(px_tensor_copy_to_host(&y, out, n * sizeof *out), PX_OK);
  assert_memory_equal(in, out, n * sizeof *in);

  /* the reorder op converts between the two layouts on the device */
  px_tensor_t plain;
  assert_int_equal(px_tensor_init4(&plain, px_device_cpu(), 3, 20, 5, 6), PX_OK);
  assert_int_equal(px_tensor_alloc(&plain, "plain"), PX_OK);
  px_reorder_t *r = NULL;
  assert_int_equal(px_reorder_create(ops, &plain, &y, &r), PX_OK);
  assert_int_equal(px_reorder_execute(r, &plain, &y), PX_OK);
  assert_memory_equal(plain.data, in, n * sizeof *in);
  assert_int_equal(px_reorder_execute(r, &y, &plain), PX_ERR_INVALID); /* wrong direction */
  px_reorder_destroy(r);

  free(in);
  free(out);
  px_tensor_release(&plain);
  px_tensor_release(&y);
  px_ops_destroy(ops);
}

/* Without CUDA built in, CUDA tensors and contexts are refused as not
 * built; with it, a device that does not exist is refused as such (the GPU
 * itself is tested by test_gpu_ops). */
static void cuda_is_refused_without_a_device(void **state) {
  (void)state;
  px_tensor_t t;
  int n = 0;
  const int built = px_cuda_built();
  if (built) assert_int_equal(px_cuda_device_count(&n), PX_OK);
  assert_int_equal(px_tensor_init4(&t, px_device_cuda(n), 1, 1, 1, 1), PX_OK);
  assert_int_equal(px_tensor_alloc(&t, "gpu"), built ? PX_ERR_NO_DEVICE : PX_ERR_NOT_BUILT);
  assert_null(t.data);
  px_ops_t *ops = NULL;
  assert_int_equal(px_ops_create(px_device_cuda(n), 0, &ops),
                   built ? PX_ERR_NO_DEVICE : PX_ERR_NOT_BUILT);
  assert_null(ops);
  char buf[16];
  assert_string_equal(px_device_str(px_device_cuda(3), buf, sizeof buf), "cuda:3");
  assert_string_equal(px_device_str(px_device_cpu(), buf, sizeof buf), "cpu");
}

static void ops_context_describes_itself(void **state) {
  (void)state;
  px_ops_t *ops = NULL;
  assert_int_equal(px_ops_create(px_device_cpu(), 2, &ops), PX_OK);
  print_message("%s\n", px_ops_describe(ops));
  assert_non_null(strstr(px_ops_describe(ops), "oneDNN"));
  assert_int_equal(px_ops_threads(ops), 2);
  assert_int_equal(px_ops_sync(ops), PX_OK);
  px_ops_destroy(ops);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(init_computes_numel_and_bytes),
      cmocka_unit_test(init_rejects_bad_shapes),
      cmocka_unit_test(alloc_and_release_are_counted),
      cmocka_unit_test(arena_is_one_aligned_zeroed_allocation),
      cmocka_unit_test(plain_host_copies_round_trip),
      cmocka_unit_test(blocked_host_copies_round_trip),
      cmocka_unit_test(cuda_is_refused_without_a_device),
      cmocka_unit_test(ops_context_describes_itself),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
