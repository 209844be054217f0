/* comm.compress lossless: the coder of lossless.h. Every float comes back
 * with its exact bits (random bits, NaNs, infinities, signed zeros and
 * denormals included), against a reference or against zeros; values close
 * to their reference code well below their raw size; a payload that is cut,
 * padded, flipped, from another round, of another length or decoded
 * against another reference fails with PX_ERR_FORMAT and a message that
 * says what is wrong; nothing is allocated once the coder exists; and the
 * fuzzer's seeds (tests/fuzz/seeds/lossless, written by a Python copy of
 * the format) are valid payloads, so that fuzzing starts inside the
 * format. */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "prunex/lossless.h"
#include "px_test_util.h"

enum { N = 20011 };

static uint64_t rng = 88172645463325252ull;
static uint32_t next32(void) {
  rng ^= rng << 13;
  rng ^= rng >> 7;
  rng ^= rng << 17;
  return (uint32_t)(rng >> 16);
}

static float from_bits(uint32_t u) {
  float f;
  memcpy(&f, &u, 4);
  return f;
}

/* ref: values of a trained model's scale; x: each moved by about 1e-3 of
 * itself, as z_i + v_i moves from one round to the next. */
static void close_pair(float *ref, float *x, size_t n) {
  for (size_t j = 0; j < n; j++) {
    double r = ((double)next32() / 4294967296.0 - 0.5) * 0.2;
    double d = ((double)next32() / 4294967296.0 - 0.5) * 2e-3;
    ref[j] = (float)r;
    x[j] = (float)(r * (1.0 + d));
  }
}

static int same_bits(const float *a, const float *b, size_t n) { return !memcmp(a, b, n * 4); }

static px_lossless_t *coder(size_t n) {
  px_lossless_t *lc;
  assert_int_equal(px_lossless_create(n, &lc), PX_OK);
  return lc;
}

static void test_every_bit_pattern_comes_back(void **state) {
  (void)state;
  static float x[N], ref[N], out[N];
  static uint8_t pay[PX_LOSSLESS_HEADER + 4 * N];
  px_lossless_t *lc = coder(N);
  for (size_t j = 0; j < N; j++) {
    x[j] = from_bits(next32());
    ref[j] = from_bits(next32());
  }
  const uint32_t special[] = {0x7fc00000u, 0xffc00001u, 0x7f800000u, 0xff800000u, 0x80000000u,
                              0x00000000u, 0x00000001u, 0x807fffffu, 0x7f7fffffu};
  for (size_t k = 0; k < sizeof special / sizeof special[0]; k++) {
    x[k] = from_bits(special[k]);
    ref[N - 1 - k] = from_bits(special[k]);
  }
  size_t len;
  for (int with_ref = 0; with_ref < 2; with_ref++) {
    const float *r = with_ref ? ref : NULL;
    assert_int_equal(px_lossless_encode(lc, x, r, N, 7, pay, sizeof pay, &len), PX_OK);
    assert_true(len <= px_lossless_bound(N));
    memset(out, 0, sizeof out);
    assert_int_equal(px_lossless_decode(lc, pay, len, r, N, 7, out), PX_OK);
    assert_true(same_bits(x, out, N));
  }
  /* in place: out is the reference */
  memcpy(out, ref, sizeof out);
  assert_int_equal(px_lossless_encode(lc, x, ref, N, 8, pay, sizeof pay, &len), PX_OK);
  assert_int_equal(px_lossless_decode(lc, pay, len, out, N, 8, out), PX_OK);
  assert_true(same_bits(x, out, N));
  /* no floats at all */
  assert_int_equal(px_lossless_encode(lc, x, ref, 0, 9, pay, sizeof pay, &len), PX_OK);
  assert_int_equal(len, PX_LOSSLESS_HEADER);
  assert_int_equal(px_lossless_decode(lc, pay, len, ref, 0, 9, out), PX_OK);
  px_lossless_destroy(lc);
}

static void test_close_values_code_small(void **state) {
  (void)state;
  static float x[N], ref[N], out[N];
  static uint8_t pay[PX_LOSSLESS_HEADER + 4 * N];
  px_lossless_t *lc = coder(N);
  close_pair(ref, x, N);
  size_t len, len0;
  assert_int_equal(px_lossless_encode(lc, x, ref, N, 1, pay, sizeof pay, &len), PX_OK);
  assert_int_equal(px_lossless_decode(lc, pay, len, ref, N, 1, out), PX_OK);
  assert_true(same_bits(x, out, N));
  assert_int_equal(px_lossless_encode(lc, x, NULL, N, 1, pay, sizeof pay, &len0), PX_OK);
  printf("close values: %.1f%% of the raw floats; against zeros %.1f%%\n",
         100.0 * (double)len / (4.0 * N), 100.0 * (double)len0 / (4.0 * N));
  /* the two upper planes shrink to far less than half: under 70% in all */
  assert_true((double)len < 0.70 * 4.0 * N);
  assert_true(len < len0);
  /* identical values: the upper planes are all zeros, the lower ones are
   * stored as they are, and the zeros deflate to almost nothing */
  assert_int_equal(px_lossless_encode(lc, ref, ref, N, 1, pay, sizeof pay, &len), PX_OK);
  assert_true((double)len < 0.52 * 4.0 * N);
  px_lossless_destroy(lc);
}

static void expect_format(px_lossless_t *lc, const uint8_t *pay, size_t len, const float *ref,
                          size_t n, uint32_t tag, const char *needle) {
  static float out[N];
  px_status_t st = px_lossless_decode(lc, pay, len, ref, n, tag, out);
  printf("  %s -> %s\n", needle, px_last_error());
  assert_int_equal(st, PX_ERR_FORMAT);
  assert_non_null(strstr(px_last_error(), needle));
}

static void test_bad_payloads_are_named(void **state) {
  (void)state;
  static float x[N], ref[N], other[N];
  static uint8_t pay[PX_LOSSLESS_HEADER + 4 * N], bad[PX_LOSSLESS_HEADER + 4 * N + 8];
  px_lossless_t *lc = coder(N);
  close_pair(ref, x, N);
  size_t len;
  assert_int_equal(px_lossless_encode(lc, x, ref, N, 42, pay, sizeof pay, &len), PX_OK);
  expect_format(lc, pay, 10, ref, N, 42, "without its header");
  expect_format(lc, pay, len, ref, N, 43, "another round");
  expect_format(lc, pay, len, ref, N - 1, 42, "expected 20010");
  expect_format(lc, pay, len - 1, ref, N, 42, "do not make a payload");
  memcpy(bad, pay, len);
  bad[len] = 0;
  expect_format(lc, bad, len + 1, ref, N, 42, "do not make a payload");
  /* a byte inside the deflated upper plane */
  memcpy(bad, pay, len);
  bad[PX_LOSSLESS_HEADER + 3] ^= 0x5a;
  px_status_t st = px_lossless_decode(lc, bad, len, ref, N, 42, other);
  assert_int_equal(st, PX_ERR_FORMAT);
  /* a byte of a stored lower plane: inflates fine, decodes to other bits */
  memcpy(bad, pay, len);
  bad[len - 5] ^= 1;
  expect_format(lc, bad, len, ref, N, 42, "references differ");
  /* a receiver whose reference differs in one element by one bit */
  memcpy(other, ref, sizeof other);
  uint32_t u;
  memcpy(&u, other + 1234, 4);
  u ^= 1;
  memcpy(other + 1234, &u, 4);
  expect_format(lc, pay, len, other, N, 42, "references differ");
  /* the encoder's own limits */
  assert_int_equal(px_lossless_encode(lc, x, ref, N + 1, 1, pay, sizeof pay, &len),
                   PX_ERR_INVALID);
  assert_int_equal(px_lossless_encode(lc, x, ref, N, 1, pay, 100, &len), PX_ERR_INVALID);
  px_lossless_destroy(lc);
}

static void test_no_allocation_after_create(void **state) {
  (void)state;
  static float x[N], ref[N], out[N];
  static uint8_t pay[PX_LOSSLESS_HEADER + 4 * N];
  px_lossless_t *lc = coder(N);
  close_pair(ref, x, N);
  px_mem_stats_t a, b;
  px_mem_stats(&a);
  for (int k = 0; k < 5; k++) {
    size_t len;
    assert_int_equal(px_lossless_encode(lc, x, ref, N, (uint32_t)k, pay, sizeof pay, &len),
                     PX_OK);
    assert_int_equal(px_lossless_decode(lc, pay, len, ref, N, (uint32_t)k, out), PX_OK);
  }
  px_mem_stats(&b);
  assert_int_equal(a.allocs, b.allocs);
  px_lossless_destroy(lc);
  px_mem_stats(&b);
  assert_true(b.live_bytes < a.live_bytes);
}

/* The seeds: two bytes of count, then a payload of tag 0 against the
 * harness's reference (fuzz_lossless.c). */
static void test_fuzz_seeds_decode(void **state) {
  (void)state;
  static const char *const names[] = {"close64", "stored40", "close1000"};
  static float ref[4096], out[4096];
  static uint8_t buf[65536];
  for (int j = 0; j < 4096; j++) ref[j] = (float)(j % 97 - 48) / 64.0f; /* exact */
  px_lossless_t *lc = coder(4096);
  for (size_t k = 0; k < sizeof names / sizeof names[0]; k++) {
    char path[512];
    snprintf(path, sizeof path, "%s/tests/fuzz/seeds/lossless/%s.bin", PX_SOURCE_DIR, names[k]);
    FILE *f = fopen(path, "rb");
    assert_non_null(f);
    size_t n = fread(buf, 1, sizeof buf, f);
    fclose(f);
    assert_true(n > 2);
    size_t count = (size_t)buf[0] | (size_t)buf[1] << 8;
    px_status_t st = px_lossless_decode(lc, buf + 2, n - 2, ref, count, 0, out);
    if (st != PX_OK) fail_msg("%s: %s", names[k], px_last_error());
  }
  px_lossless_destroy(lc);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_every_bit_pattern_comes_back),
      cmocka_unit_test(test_close_values_code_small),
      cmocka_unit_test(test_bad_payloads_are_named),
      cmocka_unit_test(test_no_allocation_after_create),
      cmocka_unit_test(test_fuzz_seeds_decode),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
