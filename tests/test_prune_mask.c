/* Group-mask algebra: union is a bytewise OR (the MAX reduction between
 * node leaders), drift counts changed group bits, and the index sets K_out and
 * K_in hold exactly the filters and channels with an active element. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include <cmocka.h>

#include "prunex/prune.h"
#include "prunex/prune_internal.h"

static void test_union_is_bytewise_or(void **state) {
  (void)state;
  uint8_t a[6] = {0, 1, 0, 1, 0, 1}, b[6] = {0, 0, 1, 1, 0, 1};
  uint8_t want[6] = {0, 1, 1, 1, 0, 1};
  px_prune_mask_union(a, b, 6);
  assert_memory_equal(a, want, 6);
  /* idempotent and commutative */
  uint8_t c[6];
  memcpy(c, b, 6);
  px_prune_mask_union(c, want, 6);
  assert_memory_equal(c, want, 6);
  px_prune_mask_union(c, c, 6);
  assert_memory_equal(c, want, 6);
}

static void test_drift_counts_changed_bits(void **state) {
  (void)state;
  uint8_t a[8] = {0, 1, 0, 1, 1, 1, 0, 0}, b[8] = {0, 1, 1, 0, 1, 1, 0, 1};
  assert_int_equal(px_prune_mask_drift(a, b, 8), 3);
  assert_int_equal(px_prune_mask_drift(a, a, 8), 0);
  assert_int_equal(px_prune_mask_drift(a, b, 0), 0);
  /* nonzero bytes count as set: a MAX of 1s never reads as drift */
  uint8_t c[2] = {1, 0}, d[2] = {7, 0};
  assert_int_equal(px_prune_mask_drift(c, d, 2), 0);
}

static void test_index_sets_follow_active_elements(void **state) {
  (void)state;
  px_conv_shape_t s = {4, 3, 1, 2};
  /* filters 0,2 kept; channels 0,1 kept; shape: channel 1 fully pruned */
  uint8_t m[4 + 3 + 6] = {1, 0, 1, 0, /* filter */ 1, 1, 0, /* channel */
                          1, 0, 0, 0, 1, 1 /* shape */};
  int32_t ko[4], ki[3], no, ni;
  px_prune_index_sets(m, s, ko, &no, ki, &ni);
  assert_int_equal(no, 2);
  assert_int_equal(ko[0], 0);
  assert_int_equal(ko[1], 2);
  assert_int_equal(ni, 1); /* channel 1 has no active position, channel 2 is pruned */
  assert_int_equal(ki[0], 0);
  assert_float_equal(px_prune_mask_density(m, s), (2.0 * 1) / 24.0, 1e-12);

  /* nothing survives when no channel does: K_out is empty too */
  uint8_t none[13] = {1, 1, 1, 1, 0, 0, 0, 1, 1, 1, 1, 1, 1};
  px_prune_index_sets(none, s, NULL, &no, NULL, &ni);
  assert_int_equal(no, 0);
  assert_int_equal(ni, 0);
  assert_float_equal(px_prune_mask_density(none, s), 0.0, 0.0);

  /* a full mask gives every index */
  uint8_t full[13];
  px_prune_mask_fill(full, s);
  px_prune_index_sets(full, s, ko, &no, ki, &ni);
  assert_int_equal(no, 4);
  assert_int_equal(ni, 3);
  for (int i = 0; i < 4; i++) assert_int_equal(ko[i], i);
  assert_float_equal(px_prune_mask_density(full, s), 1.0, 0.0);
}

static void test_apply_mask_zeroes_outside_active_set(void **state) {
  (void)state;
  px_conv_shape_t s = {2, 2, 1, 2};
  float w[8] = {1, 2, 3, 4, 5, 6, 7, 8};
  uint8_t m[2 + 2 + 4] = {1, 1, 1, 0, 1, 0, 1, 1};
  px_prune_apply_mask(w, s, m);
  float want[8] = {1, 0, 0, 0, 5, 0, 0, 0};
  assert_memory_equal(w, want, sizeof w);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_union_is_bytewise_or),
      cmocka_unit_test(test_drift_counts_changed_bits),
      cmocka_unit_test(test_index_sets_follow_active_elements),
      cmocka_unit_test(test_apply_mask_zeroes_outside_active_set),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
