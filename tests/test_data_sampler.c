/* The stateless pieces of the input pipeline: sharding covers every index
 * exactly once across ranks, the per-epoch shuffle is an unbiased
 * permutation fixed by (seed, epoch), crop and flip move pixels where they
 * should, normalisation uses the documented constants, a batch is exactly
 * augment-then-normalise, and the synthetic sources are seeded. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "prunex/data.h"
#include "px_test_util.h"

/* ---- sharding ---- */

static void check_shards(int64_t n, int32_t world, px_shard_mode_t mode) {
  uint8_t *seen = calloc((size_t)n + 1, 1);
  assert_non_null(seen);
  int64_t next = 0, min = INT64_MAX, max = -1;
  for (int32_t r = 0; r < world; r++) {
    int64_t begin = -1, count = -1;
    assert_int_equal(px_data_shard(n, r, world, mode, &begin, &count), PX_OK);
    assert_int_equal(begin, next); /* adjacent, ascending */
    for (int64_t i = begin; i < begin + count; i++) {
      assert_true(i < n);
      assert_int_equal(seen[i], 0);
      seen[i] = 1;
    }
    next = begin + count;
    if (count < min) min = count;
    if (count > max) max = count;
  }
  if (mode == PX_SHARD_SPREAD) {
    assert_int_equal(next, n); /* everything covered */
    assert_true(max - min <= 1);
  } else {
    assert_int_equal(next, (n / world) * world); /* only the remainder is left out */
    assert_int_equal(min, max);
  }
  free(seen);
}

static void test_shards_cover_every_index_once(void **state) {
  (void)state;
  const int64_t ns[] = {0, 1, 5, 7, 10, 100, 1001, 10000, 60000};
  const int32_t worlds[] = {1, 2, 3, 4, 7, 8, 16, 64, 128};
  for (size_t i = 0; i < sizeof ns / sizeof ns[0]; i++) {
    for (size_t j = 0; j < sizeof worlds / sizeof worlds[0]; j++) {
      check_shards(ns[i], worlds[j], PX_SHARD_SPREAD);
      check_shards(ns[i], worlds[j], PX_SHARD_EQUAL);
    }
  }
}

static void test_shard_spread_gives_first_ranks_the_remainder(void **state) {
  (void)state;
  int64_t b, c;
  assert_int_equal(px_data_shard(10, 0, 4, PX_SHARD_SPREAD, &b, &c), PX_OK);
  assert_true(b == 0 && c == 3);
  assert_int_equal(px_data_shard(10, 1, 4, PX_SHARD_SPREAD, &b, &c), PX_OK);
  assert_true(b == 3 && c == 3);
  assert_int_equal(px_data_shard(10, 2, 4, PX_SHARD_SPREAD, &b, &c), PX_OK);
  assert_true(b == 6 && c == 2);
  assert_int_equal(px_data_shard(10, 3, 4, PX_SHARD_EQUAL, &b, &c), PX_OK);
  assert_true(b == 6 && c == 2);
}

static void test_shard_rejects_bad_rank_and_world(void **state) {
  (void)state;
  int64_t b, c;
  assert_int_equal(px_data_shard(10, 4, 4, PX_SHARD_SPREAD, &b, &c), PX_ERR_INVALID);
  assert_int_equal(px_data_shard(10, -1, 4, PX_SHARD_SPREAD, &b, &c), PX_ERR_INVALID);
  assert_int_equal(px_data_shard(10, 0, 0, PX_SHARD_SPREAD, &b, &c), PX_ERR_INVALID);
  assert_int_equal(px_data_shard(-1, 0, 1, PX_SHARD_SPREAD, &b, &c), PX_ERR_INVALID);
}

/* ---- shuffling ---- */

static void assert_permutation(const uint32_t *p, int64_t n) {
  uint8_t *seen = calloc((size_t)n + 1, 1);
  assert_non_null(seen);
  for (int64_t i = 0; i < n; i++) {
    assert_true(p[i] < n);
    assert_int_equal(seen[p[i]], 0);
    seen[p[i]] = 1;
  }
  free(seen);
}

static void test_shuffle_is_a_permutation(void **state) {
  (void)state;
  const int64_t ns[] = {0, 1, 2, 3, 17, 1000, 60000};
  for (size_t i = 0; i < sizeof ns / sizeof ns[0]; i++) {
    uint32_t *p = malloc(((size_t)ns[i] + 1) * sizeof *p);
    assert_non_null(p);
    for (int64_t e = 0; e < 3; e++) {
      assert_int_equal(px_data_shuffle(ns[i], 7, e, p), PX_OK);
      assert_permutation(p, ns[i]);
    }
    free(p);
  }
}

static void test_shuffle_is_deterministic_per_seed_and_epoch(void **state) {
  (void)state;
  enum { N = 5000 };
  static uint32_t a[N], b[N], c[N], d[N];
  assert_int_equal(px_data_shuffle(N, 1234, 5, a), PX_OK);
  assert_int_equal(px_data_shuffle(N, 1234, 5, b), PX_OK);
  assert_memory_equal(a, b, sizeof a);
  assert_int_equal(px_data_shuffle(N, 1234, 6, c), PX_OK);
  assert_memory_not_equal(a, c, sizeof a);
  assert_int_equal(px_data_shuffle(N, 1235, 5, d), PX_OK);
  assert_memory_not_equal(a, d, sizeof a);
  /* And it actually moves things: few fixed points. */
  int fixed = 0;
  for (int i = 0; i < N; i++) fixed += a[i] == (uint32_t)i;
  assert_true(fixed < 20);
}

static void test_shuffle_order_is_pinned_across_machines(void **state) {
  /* The generator is fixed by definition (splitmix64 + xoshiro256**, integer
   * arithmetic only), so this order must never change: every rank of a job,
   * on whatever machine, relies on it. */
  (void)state;
  uint32_t p[10];
  assert_int_equal(px_data_shuffle(10, 42, 0, p), PX_OK);
  /* Checked against an independent Python model of the same definition. */
  const uint32_t want[10] = {8, 2, 4, 3, 6, 9, 1, 5, 7, 0};
  assert_memory_equal(p, want, sizeof p);
}

static void test_shuffle_is_unbiased_on_small_sets(void **state) {
  /* Every permutation of 4 elements should come up about equally often. */
  (void)state;
  int counts[256] = {0};
  enum { EPOCHS = 24000 };
  for (int e = 0; e < EPOCHS; e++) {
    uint32_t p[4];
    assert_int_equal(px_data_shuffle(4, 99, e, p), PX_OK);
    counts[p[0] * 64 + p[1] * 16 + p[2] * 4 + p[3]]++;
  }
  int distinct = 0;
  for (int k = 0; k < 256; k++) {
    if (!counts[k]) continue;
    distinct++;
    assert_true(counts[k] > 850 && counts[k] < 1150); /* expected 1000, sd ~31 */
  }
  assert_int_equal(distinct, 24);
}

/* ---- augmentation ---- */

/* 2 channels of 4x5; channel c pixel (y, x) = 100c + 10y + x + 1. */
static void known_image(uint8_t *img) {
  for (int c = 0; c < 2; c++) {
    for (int y = 0; y < 4; y++) {
      for (int x = 0; x < 5; x++) img[c * 20 + y * 5 + x] = (uint8_t)(100 * c + 10 * y + x + 1);
    }
  }
}

static uint8_t px_at(const uint8_t *img, int c, int y, int x) { return img[c * 20 + y * 5 + x]; }

static void test_crop_shifts_and_zero_fills(void **state) {
  (void)state;
  uint8_t src[40], dst[40];
  known_image(src);
  /* pad 2, offsets (0, 0): the output window starts 2 pixels up-left, so the
   * image moves down-right by 2 and zeros enter at the top and left. */
  px_crop_flip_t cf = {.dy = 0, .dx = 0, .flip = 0};
  px_augment_apply_u8(src, 2, 4, 5, 2, &cf, dst);
  for (int c = 0; c < 2; c++) {
    for (int y = 0; y < 4; y++) {
      for (int x = 0; x < 5; x++) {
        uint8_t want = (y >= 2 && x >= 2) ? px_at(src, c, y - 2, x - 2) : 0;
        assert_int_equal(px_at(dst, c, y, x), want);
      }
    }
  }
  assert_int_equal(px_at(dst, 1, 3, 4), 100 + 10 * 1 + 2 + 1); /* (1, 2) of channel 1 */
  /* Centre offsets (pad, pad) are the identity. */
  cf.dy = 2;
  cf.dx = 2;
  px_augment_apply_u8(src, 2, 4, 5, 2, &cf, dst);
  assert_memory_equal(dst, src, sizeof src);
  /* Offsets (2*pad, 2*pad - 1) = (4, 3) with pad 2: up by 2, left by 1. */
  cf.dy = 4;
  cf.dx = 3;
  px_augment_apply_u8(src, 2, 4, 5, 2, &cf, dst);
  assert_int_equal(px_at(dst, 0, 0, 0), px_at(src, 0, 2, 1));
  assert_int_equal(px_at(dst, 0, 1, 3), px_at(src, 0, 3, 4));
  assert_int_equal(px_at(dst, 0, 1, 4), 0); /* right of the image */
  assert_int_equal(px_at(dst, 1, 2, 0), 0); /* below the image */
}

static void test_flip_mirrors_each_row(void **state) {
  (void)state;
  uint8_t src[40], dst[40];
  known_image(src);
  px_crop_flip_t cf = {.dy = 1, .dx = 1, .flip = 1}; /* pad 1, centred: flip only */
  px_augment_apply_u8(src, 2, 4, 5, 1, &cf, dst);
  for (int c = 0; c < 2; c++) {
    for (int y = 0; y < 4; y++) {
      for (int x = 0; x < 5; x++) assert_int_equal(px_at(dst, c, y, x), px_at(src, c, y, 4 - x));
    }
  }
  assert_int_equal(px_at(dst, 0, 0, 0), 5);
  /* Crop then flip: offsets (1, 0) with pad 1 shift right by 1, then mirror,
   * so the zero column ends up on the right. */
  cf.dx = 0;
  px_augment_apply_u8(src, 2, 4, 5, 1, &cf, dst);
  for (int y = 0; y < 4; y++) {
    assert_int_equal(px_at(dst, 0, y, 4), 0);
    for (int x = 0; x < 4; x++) assert_int_equal(px_at(dst, 0, y, x), px_at(src, 0, y, 3 - x));
  }
}

static void test_augment_choices_are_in_range_and_seeded(void **state) {
  (void)state;
  px_augment_t aug = {.crop_pad = 4, .flip = 1};
  int seen_dy[9] = {0}, seen_dx[9] = {0}, flips = 0;
  enum { N = 9000 };
  for (int i = 0; i < N; i++) {
    px_crop_flip_t a, b;
    px_augment_choose(&aug, 3, 1, i, &a);
    px_augment_choose(&aug, 3, 1, i, &b);
    assert_memory_equal(&a, &b, sizeof a);
    assert_true(a.dy >= 0 && a.dy <= 8 && a.dx >= 0 && a.dx <= 8);
    assert_true(a.flip == 0 || a.flip == 1);
    seen_dy[a.dy]++;
    seen_dx[a.dx]++;
    flips += a.flip;
  }
  for (int k = 0; k < 9; k++) assert_true(seen_dy[k] > 850 && seen_dx[k] > 850);
  assert_true(flips > 4200 && flips < 4800);
  /* Another epoch makes other choices. */
  int same = 0;
  for (int i = 0; i < 100; i++) {
    px_crop_flip_t a, b;
    px_augment_choose(&aug, 3, 1, i, &a);
    px_augment_choose(&aug, 3, 2, i, &b);
    same += a.dy == b.dy && a.dx == b.dx && a.flip == b.flip;
  }
  assert_true(same < 20);
  /* No augmentation: centred, not flipped. */
  px_crop_flip_t c;
  px_augment_choose(NULL, 3, 1, 5, &c);
  assert_true(c.dy == 0 && c.dx == 0 && c.flip == 0);
  px_augment_t flip_only = {.crop_pad = 0, .flip = 1};
  px_augment_choose(&flip_only, 3, 1, 5, &c);
  assert_true(c.dy == 0 && c.dx == 0);
}

/* ---- normalisation ---- */

static void test_normalize_uses_mean_and_std_per_channel(void **state) {
  (void)state;
  uint8_t src[6] = {0, 255, 51, 0, 255, 128};
  float dst[6];
  px_data_normalize_u8(src, 3, 2, px_cifar10_mean, px_cifar10_std, dst);
  const double m[3] = {0.4914, 0.4822, 0.4465}, s[3] = {0.2470, 0.2435, 0.2616};
  for (int c = 0; c < 3; c++) {
    for (int i = 0; i < 2; i++) {
      double want = (src[c * 2 + i] / 255.0 - m[c]) / s[c];
      assert_true(fabs(dst[c * 2 + i] - want) < 1e-5);
    }
  }
  assert_true(fabs(dst[0] - (-0.4914 / 0.2470)) < 1e-5);
  assert_true(fabs(dst[1] - ((1.0 - 0.4914) / 0.2470)) < 1e-5);
  /* Fashion-MNIST constants. */
  px_data_normalize_u8(src, 1, 2, px_fashion_mnist_mean, px_fashion_mnist_std, dst);
  assert_true(fabs(dst[0] - (-0.2860 / 0.3530)) < 1e-5);
  assert_true(fabs(dst[1] - ((1.0 - 0.2860) / 0.3530)) < 1e-5);
}

/* ---- batches ---- */

static px_dataset_t *random_dataset(int64_t n, int32_t c, int32_t h, int32_t w, uint64_t seed) {
  px_dataset_info_t info;
  memset(&info, 0, sizeof info);
  info.n = n;
  info.channels = c;
  info.height = h;
  info.width = w;
  info.num_classes = 10;
  for (int k = 0; k < c; k++) {
    info.mean[k] = 0.3f + 0.1f * (float)k;
    info.std[k] = 0.2f + 0.05f * (float)k;
  }
  px_dataset_t *ds = NULL;
  assert_int_equal(px_dataset_create_synthetic(&info, seed, &ds), PX_OK);
  return ds;
}

static void test_fill_batch_is_augment_then_normalize(void **state) {
  (void)state;
  px_dataset_t *ds = random_dataset(50, 3, 8, 6, 1);
  const px_dataset_info_t *info = px_dataset_info(ds);
  const uint32_t idx[5] = {7, 0, 49, 7, 23};
  px_augment_t aug = {.crop_pad = 3, .flip = 1};
  size_t img = 3 * 8 * 6;
  float x[5 * 3 * 8 * 6], want[3 * 8 * 6];
  int32_t y[5];
  uint8_t tmp[3 * 8 * 6];
  for (int with_aug = 0; with_aug < 2; with_aug++) {
    const px_augment_t *a = with_aug ? &aug : NULL;
    assert_int_equal(px_data_fill_batch(ds, idx, 5, a, info->mean, info->std, 11, 2, x, y),
                     PX_OK);
    for (int i = 0; i < 5; i++) {
      const uint8_t *src = px_dataset_images(ds) + idx[i] * img;
      px_crop_flip_t cf;
      px_augment_choose(a, 11, 2, idx[i], &cf);
      px_augment_apply_u8(src, 3, 8, 6, with_aug ? 3 : 0, &cf, tmp);
      px_data_normalize_u8(tmp, 3, 8 * 6, info->mean, info->std, want);
      assert_true(px_test_max_rel_err(x + i * img, want, img) < 1e-6);
      assert_int_equal(y[i], px_dataset_labels(ds)[idx[i]]);
    }
  }
  /* The same sample in one batch is augmented the same way (choices depend on
   * the sample, the seed and the epoch only). */
  assert_int_equal(px_data_fill_batch(ds, idx, 5, &aug, info->mean, info->std, 11, 2, x, y),
                   PX_OK);
  assert_memory_equal(x, x + 3 * img, img * sizeof(float));
  const uint32_t bad[1] = {50};
  assert_int_equal(px_data_fill_batch(ds, bad, 1, NULL, info->mean, info->std, 0, 0, x, y),
                   PX_ERR_INVALID);
  px_dataset_destroy(ds);
}

/* ---- data set objects ---- */

static void test_dataset_create_copies_and_validates(void **state) {
  (void)state;
  px_dataset_info_t info;
  memset(&info, 0, sizeof info);
  info.n = 3;
  info.channels = 1;
  info.height = 2;
  info.width = 2;
  info.num_classes = 4;
  info.mean[0] = 0.5f;
  info.std[0] = 0.25f;
  uint8_t img[12] = {1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12};
  uint8_t lab[3] = {3, 0, 2};
  px_dataset_t *ds = NULL;
  assert_int_equal(px_dataset_create(&info, img, lab, &ds), PX_OK);
  img[0] = 99; /* copied, not borrowed */
  assert_int_equal(px_dataset_images(ds)[0], 1);
  assert_memory_equal(px_dataset_labels(ds), lab, 3);
  px_dataset_destroy(ds);
  lab[1] = 4;
  ds = NULL;
  assert_int_equal(px_dataset_create(&info, img, lab, &ds), PX_ERR_INVALID);
  assert_null(ds);
  info.std[0] = 0.0f;
  assert_int_equal(px_dataset_create(&info, NULL, NULL, &ds), PX_ERR_INVALID);
  info.std[0] = 1.0f;
  info.channels = PX_DATA_MAX_CHANNELS + 1;
  assert_int_equal(px_dataset_create(&info, NULL, NULL, &ds), PX_ERR_INVALID);
  info.channels = 1;
  info.n = 0;
  assert_int_equal(px_dataset_create(&info, NULL, NULL, &ds), PX_ERR_INVALID);
  assert_null(ds);
}

static void test_synthetic_dataset_is_seeded(void **state) {
  (void)state;
  px_dataset_t *a = random_dataset(100, 3, 4, 4, 5), *b = random_dataset(100, 3, 4, 4, 5);
  px_dataset_t *c = random_dataset(100, 3, 4, 4, 6);
  assert_memory_equal(px_dataset_images(a), px_dataset_images(b), 100 * 48);
  assert_memory_equal(px_dataset_labels(a), px_dataset_labels(b), 100);
  assert_memory_not_equal(px_dataset_images(a), px_dataset_images(c), 100 * 48);
  for (int i = 0; i < 100; i++) assert_true(px_dataset_labels(a)[i] < 10);
  px_dataset_destroy(a);
  px_dataset_destroy(b);
  px_dataset_destroy(c);
}

static void test_synth_batches_are_seeded_and_distributed(void **state) {
  (void)state;
  px_synth_config_t cfg;
  px_synth_config_default(&cfg);
  assert_true(cfg.channels == 3 && cfg.height == 32 && cfg.width == 32 && cfg.num_classes == 10);
  enum { B = 64, IMG = 3 * 32 * 32 };
  static float x1[B * IMG], x2[B * IMG];
  int32_t y1[B], y2[B];
  cfg.seed = 9;
  assert_int_equal(px_synth_batch(&cfg, 3, B, x1, y1), PX_OK);
  assert_int_equal(px_synth_batch(&cfg, 3, B, x2, y2), PX_OK);
  assert_memory_equal(x1, x2, sizeof x1);
  assert_memory_equal(y1, y2, sizeof y1);
  assert_int_equal(px_synth_batch(&cfg, 4, B, x2, y2), PX_OK);
  assert_memory_not_equal(x1, x2, sizeof x1);
  double sum = 0, sq = 0;
  for (int i = 0; i < B * IMG; i++) {
    assert_true(x1[i] >= -1.0f && x1[i] <= 1.0f);
    sum += x1[i];
    sq += (double)x1[i] * x1[i];
  }
  double mean = sum / (B * IMG), var = sq / (B * IMG) - mean * mean;
  assert_true(fabs(mean) < 0.01 && fabs(var - 1.0 / 3.0) < 0.01);
  for (int i = 0; i < B; i++) assert_true(y1[i] >= 0 && y1[i] < 10);

  cfg.dist = PX_SYNTH_NORMAL;
  cfg.loc = 2.0f;
  cfg.scale = 0.5f;
  assert_int_equal(px_synth_batch(&cfg, 0, B, x1, y1), PX_OK);
  sum = sq = 0;
  for (int i = 0; i < B * IMG; i++) {
    sum += x1[i];
    sq += (double)x1[i] * x1[i];
  }
  mean = sum / (B * IMG);
  var = sq / (B * IMG) - mean * mean;
  assert_true(fabs(mean - 2.0) < 0.01 && fabs(sqrt(var) - 0.5) < 0.01);
  cfg.scale = -1.0f;
  assert_int_equal(px_synth_batch(&cfg, 0, B, x1, y1), PX_ERR_INVALID);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_shards_cover_every_index_once),
      cmocka_unit_test(test_shard_spread_gives_first_ranks_the_remainder),
      cmocka_unit_test(test_shard_rejects_bad_rank_and_world),
      cmocka_unit_test(test_shuffle_is_a_permutation),
      cmocka_unit_test(test_shuffle_is_deterministic_per_seed_and_epoch),
      cmocka_unit_test(test_shuffle_order_is_pinned_across_machines),
      cmocka_unit_test(test_shuffle_is_unbiased_on_small_sets),
      cmocka_unit_test(test_crop_shifts_and_zero_fills),
      cmocka_unit_test(test_flip_mirrors_each_row),
      cmocka_unit_test(test_augment_choices_are_in_range_and_seeded),
      cmocka_unit_test(test_normalize_uses_mean_and_std_per_channel),
      cmocka_unit_test(test_fill_batch_is_augment_then_normalize),
      cmocka_unit_test(test_dataset_create_copies_and_validates),
      cmocka_unit_test(test_synthetic_dataset_is_seeded),
      cmocka_unit_test(test_synth_batches_are_seeded_and_distributed),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
