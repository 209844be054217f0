/* The batch loader: the prefetching loader yields exactly the batches of the
 * synchronous path for the same seed and epoch; each epoch gives every rank
 * its shard once; drop_last and batch counts; iterating allocates nothing;
 * ending an epoch early or destroying mid-epoch neither hangs nor leaks;
 * misuse gives PX_ERR_STATE / PX_ERR_INVALID. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "prunex/data.h"
#include "px_test_util.h"

static int64_t live_bytes(void) {
  px_mem_stats_t s;
  px_mem_stats(&s);
  return s.live_bytes;
}

static int setup(void **state) {
  int64_t *before = malloc(sizeof *before);
  if (!before) return -1;
  *before = live_bytes();
  *state = before;
  return 0;
}

static int teardown(void **state) {
  int64_t *before = *state;
  int64_t leaked = live_bytes() - *before;
  free(before);
  if (leaked != 0) {
    fprintf(stderr, "leaked %lld bytes through px_malloc\n", (long long)leaked);
    return -1;
  }
  return 0;
}

static double now_s(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static px_dataset_t *random_dataset(int64_t n, int32_t c, int32_t h, int32_t w, uint64_t seed) {
  px_dataset_info_t info;
  memset(&info, 0, sizeof info);
  info.n = n;
  info.channels = c;
  info.height = h;
  info.width = w;
  info.num_classes = 10;
  px_dataset_t *ds = NULL;
  assert_int_equal(px_dataset_create_synthetic(&info, seed, &ds), PX_OK);
  return ds;
}

/* Images 1x1x2 whose two pixels spell the sample's index, so batches can be
 * decoded back into indices (with mean 0 and std 1, x = pixel / 255). */
static px_dataset_t *index_dataset(int64_t n) {
  px_dataset_info_t info;
  memset(&info, 0, sizeof info);
  info.n = n;
  info.channels = 1;
  info.height = 1;
  info.width = 2;
  info.num_classes = 10;
  info.std[0] = 1.0f;
  uint8_t *img = malloc((size_t)n * 2), *lab = malloc((size_t)n);
  assert_non_null(img);
  assert_non_null(lab);
  for (int64_t i = 0; i < n; i++) {
    img[2 * i] = (uint8_t)(i & 255);
    img[2 * i + 1] = (uint8_t)(i >> 8);
    lab[i] = (uint8_t)(i % 10);
  }
  px_dataset_t *ds = NULL;
  assert_int_equal(px_dataset_create(&info, img, lab, &ds), PX_OK);
  free(img);
  free(lab);
  return ds;
}

static int64_t decode_index(const float *x) {
  return lrintf(x[0] * 255.0f) + 256 * lrintf(x[1] * 255.0f);
}

/* All batches of one epoch, copied. */
typedef struct {
  float *x;
  int32_t *y;
  int32_t *n;
  int64_t nbatches;
  size_t floats_per_batch;
} epoch_dump_t;

static void dump_epoch(px_loader_t *l, const px_dataset_t *ds, int32_t batch, int64_t epoch,
                       epoch_dump_t *d) {
  const px_dataset_info_t *info = px_dataset_info(ds);
  d->floats_per_batch = (size_t)batch * info->channels * info->height * info->width;
  d->nbatches = px_loader_num_batches(l);
  d->x = calloc((size_t)d->nbatches * d->floats_per_batch + 1, sizeof(float));
  d->y = calloc((size_t)d->nbatches * batch + 1, sizeof(int32_t));
  d->n = calloc((size_t)d->nbatches + 1, sizeof(int32_t));
  assert_non_null(d->x);
  assert_non_null(d->y);
  assert_non_null(d->n);
  assert_int_equal(px_loader_begin_epoch(l, epoch), PX_OK);
  px_batch_t b;
  int64_t k = 0;
  px_status_t st;
  while ((st = px_loader_next(l, &b)) == 1) {
    assert_true(k < d->nbatches);
    assert_int_equal(b.index, k);
    assert_int_equal(b.epoch, epoch);
    assert_int_equal(b.channels, info->channels);
    assert_int_equal(b.height, info->height);
    assert_int_equal(b.width, info->width);
    assert_true(b.n >= 1 && b.n <= batch);
    size_t img = (size_t)info->channels * info->height * info->width;
    memcpy(d->x + k * d->floats_per_batch, b.x, (size_t)b.n * img * sizeof(float));
    memcpy(d->y + k * batch, b.y, (size_t)b.n * sizeof(int32_t));
    d->n[k] = b.n;
    k++;
  }
  assert_int_equal(st, 0);
  assert_int_equal(k, d->nbatches);
  assert_int_equal(px_loader_next(l, &b), 0); /* stays at the end */
  assert_int_equal(px_loader_end_epoch(l), PX_OK);
}

static void free_dump(epoch_dump_t *d) {
  free(d->x);
  free(d->y);
  free(d->n);
}

static void assert_dumps_equal(const epoch_dump_t *a, const epoch_dump_t *b, int32_t batch) {
  assert_int_equal(a->nbatches, b->nbatches);
  assert_memory_equal(a->n, b->n, (size_t)a->nbatches * sizeof(int32_t));
  assert_memory_equal(a->x, b->x, (size_t)a->nbatches * a->floats_per_batch * sizeof(float));
  assert_memory_equal(a->y, b->y, (size_t)a->nbatches * batch * sizeof(int32_t));
}

static void test_prefetch_yields_same_batches_as_sync(void **state) {
  (void)state;
  px_dataset_t *ds = random_dataset(700, 3, 8, 8, 1);
  const struct {
    int32_t batch, rank, world, drop_last, prefetch, shuffle, pad, flip;
  } cases[] = {
      {32, 0, 1, 0, 1, 1, 2, 1}, {32, 1, 3, 1, 1, 1, 4, 1}, {50, 2, 3, 0, 3, 1, 0, 1},
      {7, 0, 2, 1, 16, 0, 1, 0}, {1000, 0, 1, 0, 2, 1, 2, 1},
  };
  for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
    px_loader_config_t cfg;
    px_loader_config_default(ds, &cfg);
    cfg.batch_size = cases[c].batch;
    cfg.rank = cases[c].rank;
    cfg.world_size = cases[c].world;
    cfg.drop_last = cases[c].drop_last;
    cfg.shuffle = cases[c].shuffle;
    cfg.augment.crop_pad = cases[c].pad;
    cfg.augment.flip = cases[c].flip;
    cfg.seed = 77 + c;
    px_loader_t *sync = NULL, *pre = NULL;
    cfg.prefetch = 0;
    assert_int_equal(px_loader_create(ds, &cfg, &sync), PX_OK);
    cfg.prefetch = cases[c].prefetch;
    assert_int_equal(px_loader_create(ds, &cfg, &pre), PX_OK);
    for (int64_t e = 0; e < 3; e++) {
      epoch_dump_t a, b;
      dump_epoch(sync, ds, cfg.batch_size, e, &a);
      dump_epoch(pre, ds, cfg.batch_size, e, &b);
      assert_dumps_equal(&a, &b, cfg.batch_size);
      free_dump(&a);
      free_dump(&b);
    }
    px_loader_destroy(sync);
    px_loader_destroy(pre);
  }
  px_dataset_destroy(ds);
}

static void test_batches_match_shuffle_shard_and_fill(void **state) {
  /* The loader is exactly: permutation of (seed, epoch), this rank's slice,
   * px_data_fill_batch on consecutive pieces of it. */
  (void)state;
  px_dataset_t *ds = random_dataset(300, 2, 5, 5, 2);
  px_loader_config_t cfg;
  px_loader_config_default(ds, &cfg);
  cfg.batch_size = 16;
  cfg.rank = 1;
  cfg.world_size = 4;
  cfg.augment.crop_pad = 1;
  cfg.augment.flip = 1;
  cfg.seed = 5;
  px_loader_t *l = NULL;
  assert_int_equal(px_loader_create(ds, &cfg, &l), PX_OK);
  uint32_t perm[300];
  assert_int_equal(px_data_shuffle(300, 5, 9, perm), PX_OK);
  int64_t begin, count;
  assert_int_equal(px_data_shard(300, 1, 4, PX_SHARD_EQUAL, &begin, &count), PX_OK);
  assert_int_equal(count, 75);
  assert_int_equal(px_loader_num_samples(l), 75);
  assert_int_equal(px_loader_num_batches(l), 5);
  float want[16 * 50];
  int32_t ywant[16];
  assert_int_equal(px_loader_begin_epoch(l, 9), PX_OK);
  px_batch_t b;
  for (int64_t k = 0; k < 5; k++) {
    assert_int_equal(px_loader_next(l, &b), 1);
    int32_t n = k < 4 ? 16 : 11;
    assert_int_equal(b.n, n);
    assert_int_equal(px_data_fill_batch(ds, perm + begin + 16 * k, n, &cfg.augment, cfg.mean,
                                        cfg.std, 5, 9, want, ywant),
                     PX_OK);
    assert_memory_equal(b.x, want, (size_t)n * 50 * sizeof(float));
    assert_memory_equal(b.y, ywant, (size_t)n * sizeof(int32_t));
  }
  assert_int_equal(px_loader_next(l, &b), 0);
  px_loader_destroy(l); /* without end_epoch: destroy ends it */
  px_dataset_destroy(ds);
}

static void test_each_epoch_covers_every_sample_once_across_ranks(void **state) {
  (void)state;
  enum { N = 1003 };
  px_dataset_t *ds = index_dataset(N);
  const int32_t worlds[] = {1, 3, 4, 7};
  for (size_t w = 0; w < sizeof worlds / sizeof worlds[0]; w++) {
    int32_t world = worlds[w];
    int first_of_epoch[3];
    for (int64_t e = 0; e < 3; e++) {
      int seen[N] = {0};
      for (int32_t r = 0; r < world; r++) {
        px_loader_config_t cfg;
        px_loader_config_default(ds, &cfg);
        cfg.shard_mode = PX_SHARD_SPREAD;
        cfg.batch_size = 64;
        cfg.rank = r;
        cfg.world_size = world;
        cfg.seed = 11;
        cfg.prefetch = 1 + r % 2;
        px_loader_t *l = NULL;
        assert_int_equal(px_loader_create(ds, &cfg, &l), PX_OK);
        assert_int_equal(px_loader_begin_epoch(l, e), PX_OK);
        px_batch_t b;
        int first = 1;
        while (px_loader_next(l, &b) == 1) {
          for (int32_t i = 0; i < b.n; i++) {
            int64_t idx = decode_index(b.x + 2 * i);
            assert_true(idx >= 0 && idx < N);
            assert_int_equal(b.y[i], idx % 10);
            seen[idx]++;
            if (first && r == 0) first_of_epoch[e] = (int)idx;
            first = 0;
          }
        }
        px_loader_destroy(l);
      }
      for (int i = 0; i < N; i++) assert_int_equal(seen[i], 1);
    }
    /* Shuffled: the epochs start differently (a fixed seed, so fixed values). */
    assert_false(first_of_epoch[0] == first_of_epoch[1] && first_of_epoch[1] == first_of_epoch[2]);
  }
  px_dataset_destroy(ds);
}

static void test_drop_last_and_batch_counts(void **state) {
  (void)state;
  px_dataset_t *ds = index_dataset(100);
  px_loader_config_t cfg;
  px_loader_config_eval(ds, &cfg);
  cfg.batch_size = 32;
  px_loader_t *l = NULL;
  assert_int_equal(px_loader_create(ds, &cfg, &l), PX_OK);
  assert_int_equal(px_loader_num_batches(l), 4);
  assert_int_equal(px_loader_num_samples(l), 100);
  assert_int_equal(px_loader_begin_epoch(l, 0), PX_OK);
  px_batch_t b;
  const int32_t sizes[4] = {32, 32, 32, 4};
  for (int k = 0; k < 4; k++) {
    assert_int_equal(px_loader_next(l, &b), 1);
    assert_int_equal(b.n, sizes[k]);
    /* Evaluation order is the data set order. */
    for (int32_t i = 0; i < b.n; i++) assert_int_equal(decode_index(b.x + 2 * i), 32 * k + i);
  }
  assert_int_equal(px_loader_next(l, &b), 0);
  px_loader_destroy(l);

  cfg.drop_last = 1;
  assert_int_equal(px_loader_create(ds, &cfg, &l), PX_OK);
  assert_int_equal(px_loader_num_batches(l), 3);
  assert_int_equal(px_loader_num_samples(l), 96);
  px_loader_destroy(l);

  cfg.batch_size = 101; /* no full batch at all */
  assert_int_equal(px_loader_create(ds, &cfg, &l), PX_OK);
  assert_int_equal(px_loader_num_batches(l), 0);
  assert_int_equal(px_loader_begin_epoch(l, 0), PX_OK);
  assert_int_equal(px_loader_next(l, &b), 0);
  px_loader_destroy(l);

  /* Equal shards: 100 over 3 ranks is 33 each; with 8 per batch, 4 full
   * batches and one of 1, on every rank alike. */
  px_loader_config_default(ds, &cfg);
  cfg.batch_size = 8;
  cfg.world_size = 3;
  for (int32_t r = 0; r < 3; r++) {
    cfg.rank = r;
    assert_int_equal(px_loader_create(ds, &cfg, &l), PX_OK);
    assert_int_equal(px_loader_num_samples(l), 33);
    assert_int_equal(px_loader_num_batches(l), 5);
    px_loader_destroy(l);
  }
  px_dataset_destroy(ds);
}

static void test_iterating_epochs_allocates_nothing(void **state) {
  (void)state;
  px_dataset_t *ds = random_dataset(500, 3, 8, 8, 3);
  for (int32_t prefetch = 0; prefetch <= 2; prefetch++) {
    px_loader_config_t cfg;
    px_loader_config_default(ds, &cfg);
    cfg.batch_size = 20;
    cfg.prefetch = prefetch;
    cfg.augment.crop_pad = 2;
    cfg.augment.flip = 1;
    px_loader_t *l = NULL;
    assert_int_equal(px_loader_create(ds, &cfg, &l), PX_OK);
    px_mem_stats_t before, after;
    px_mem_stats(&before);
    for (int64_t e = 0; e < 3; e++) {
      assert_int_equal(px_loader_begin_epoch(l, e), PX_OK);
      px_batch_t b;
      int64_t k = 0;
      while (px_loader_next(l, &b) == 1) k++;
      assert_int_equal(k, 25);
      assert_int_equal(px_loader_end_epoch(l), PX_OK);
    }
    px_mem_stats(&after);
    assert_int_equal(after.allocs, before.allocs);
    assert_int_equal(after.live_bytes, before.live_bytes);
    px_loader_destroy(l);
  }
  px_dataset_destroy(ds);
}

static void test_end_epoch_early_then_next_epoch_is_clean(void **state) {
  /* Batches prepared ahead for an abandoned epoch must not leak into the next. */
  (void)state;
  px_dataset_t *ds = random_dataset(400, 3, 8, 8, 4);
  px_loader_config_t cfg;
  px_loader_config_default(ds, &cfg);
  cfg.batch_size = 16;
  cfg.augment.crop_pad = 2;
  cfg.augment.flip = 1;
  px_loader_t *ref = NULL, *l = NULL;
  cfg.prefetch = 0;
  assert_int_equal(px_loader_create(ds, &cfg, &ref), PX_OK);
  cfg.prefetch = 4;
  assert_int_equal(px_loader_create(ds, &cfg, &l), PX_OK);
  for (int round = 0; round < 20; round++) {
    px_batch_t b;
    assert_int_equal(px_loader_begin_epoch(l, 100 + round), PX_OK);
    for (int k = 0; k < round % 5; k++) assert_int_equal(px_loader_next(l, &b), 1);
    assert_int_equal(px_loader_end_epoch(l), PX_OK);
    assert_int_equal(px_loader_end_epoch(l), PX_OK); /* idempotent */
  }
  epoch_dump_t a, b;
  dump_epoch(ref, ds, 16, 3, &a);
  dump_epoch(l, ds, 16, 3, &b);
  assert_dumps_equal(&a, &b, 16);
  free_dump(&a);
  free_dump(&b);
  px_loader_destroy(ref);
  px_loader_destroy(l);
  px_dataset_destroy(ds);
}

static void test_destroy_mid_epoch_does_not_hang_or_leak(void **state) {
  (void)state;
  /* Batches big enough that the producer is often busy building one. */
  px_dataset_t *ds = random_dataset(2000, 3, 32, 32, 5);
  double t0 = now_s();
  for (int round = 0; round < 40; round++) {
    px_loader_config_t cfg;
    px_loader_config_default(ds, &cfg);
    cfg.batch_size = 128;
    cfg.prefetch = 1 + round % 4;
    cfg.augment.crop_pad = 4;
    cfg.augment.flip = 1;
    px_loader_t *l = NULL;
    assert_int_equal(px_loader_create(ds, &cfg, &l), PX_OK);
    if (round % 3 != 0) {
      assert_int_equal(px_loader_begin_epoch(l, round), PX_OK);
      px_batch_t b;
      for (int k = 0; k < round % 3; k++) assert_int_equal(px_loader_next(l, &b), 1);
    }
    px_loader_destroy(l);
  }
  assert_true(now_s() - t0 < 10.0);
  px_dataset_destroy(ds);
}

/* Polls until the loader has `want` batches ready; fails after 10 s. */
static void wait_ready(px_loader_t *l, int32_t want) {
  double t0 = now_s();
  while (px_loader_ready(l) < want) {
    assert_true(now_s() - t0 < 10.0);
    struct timespec ts = {0, 1000000};
    nanosleep(&ts, NULL);
  }
  assert_int_equal(px_loader_ready(l), want); /* and never more than the ring holds */
}

static void test_background_thread_fills_ahead_while_caller_computes(void **state) {
  (void)state;
  px_dataset_t *ds = random_dataset(1000, 3, 8, 8, 7);
  px_loader_config_t cfg;
  px_loader_config_default(ds, &cfg);
  cfg.batch_size = 50;
  cfg.prefetch = 3;
  px_loader_t *l = NULL;
  assert_int_equal(px_loader_create(ds, &cfg, &l), PX_OK);
  assert_int_equal(px_loader_ready(l), 0);
  assert_int_equal(px_loader_begin_epoch(l, 0), PX_OK);
  /* Built without any px_loader_next call; no batch is held yet, so every
   * slot of the ring fills. */
  wait_ready(l, 4);
  px_batch_t b;
  assert_int_equal(px_loader_next(l, &b), 1);
  assert_int_equal(px_loader_ready(l), 3); /* the held batch's slot is not refilled... */
  assert_int_equal(px_loader_next(l, &b), 1);
  wait_ready(l, 3); /* ...until the caller moves on */
  /* Batches taken from a full ring never wait. */
  double stall = px_loader_stall_seconds(l);
  assert_int_equal(px_loader_next(l, &b), 1);
  assert_true(px_loader_stall_seconds(l) == stall);
  assert_int_equal(px_loader_end_epoch(l), PX_OK);
  assert_int_equal(px_loader_ready(l), 0);
  px_loader_destroy(l);
  px_dataset_destroy(ds);
}

static void test_misuse_gives_state_errors(void **state) {
  (void)state;
  px_dataset_t *ds = index_dataset(10);
  for (int32_t prefetch = 0; prefetch <= 1; prefetch++) {
    px_loader_config_t cfg;
    px_loader_config_default(ds, &cfg);
    cfg.batch_size = 4;
    cfg.prefetch = prefetch;
    px_loader_t *l = NULL;
    assert_int_equal(px_loader_create(ds, &cfg, &l), PX_OK);
    px_batch_t b;
    assert_int_equal(px_loader_next(l, &b), PX_ERR_STATE);
    assert_int_equal(px_loader_end_epoch(l), PX_OK); /* nothing to end */
    assert_int_equal(px_loader_begin_epoch(l, 0), PX_OK);
    assert_int_equal(px_loader_begin_epoch(l, 1), PX_ERR_STATE);
    assert_non_null(strstr(px_last_error(), "still active"));
    assert_int_equal(px_loader_next(l, &b), 1);
    assert_int_equal(px_loader_end_epoch(l), PX_OK);
    assert_int_equal(px_loader_next(l, &b), PX_ERR_STATE);
    px_loader_destroy(l);
  }
  px_loader_destroy(NULL);
  px_dataset_destroy(ds);
}

static void test_bad_config_is_invalid(void **state) {
  (void)state;
  px_dataset_t *ds = index_dataset(10);
  px_loader_config_t cfg;
  px_loader_t *l = NULL;
  px_loader_config_default(ds, &cfg);
  cfg.batch_size = 0;
  assert_int_equal(px_loader_create(ds, &cfg, &l), PX_ERR_INVALID);
  px_loader_config_default(ds, &cfg);
  cfg.rank = 2;
  cfg.world_size = 2;
  assert_int_equal(px_loader_create(ds, &cfg, &l), PX_ERR_INVALID);
  px_loader_config_default(ds, &cfg);
  cfg.prefetch = 17;
  assert_int_equal(px_loader_create(ds, &cfg, &l), PX_ERR_INVALID);
  px_loader_config_default(ds, &cfg);
  cfg.std[0] = 0.0f;
  assert_int_equal(px_loader_create(ds, &cfg, &l), PX_ERR_INVALID);
  px_loader_config_default(ds, &cfg);
  cfg.augment.crop_pad = -1;
  assert_int_equal(px_loader_create(ds, &cfg, &l), PX_ERR_INVALID);
  assert_null(l);
  px_dataset_destroy(ds);
}

static void test_config_defaults(void **state) {
  (void)state;
  px_dataset_t *ds = random_dataset(10, 3, 4, 4, 6);
  px_loader_config_t t, e;
  px_loader_config_default(ds, &t);
  px_loader_config_eval(ds, &e);
  assert_true(t.shuffle && t.prefetch == 1 && t.shard_mode == PX_SHARD_EQUAL);
  assert_true(!e.shuffle && e.prefetch == 0 && e.shard_mode == PX_SHARD_SPREAD);
  assert_true(!e.augment.crop_pad && !e.augment.flip && !e.drop_last);
  assert_true(t.batch_size == 128 && t.world_size == 1 && t.rank == 0);
  const px_dataset_info_t *info = px_dataset_info(ds);
  for (int c = 0; c < 3; c++) assert_true(t.mean[c] == info->mean[c] && t.std[c] == info->std[c]);
  px_dataset_destroy(ds);
}

/* An elastic job loses rank 2 of 3: from the next epoch the survivors'
 * loaders, resharded to a world of 2, cover every sample once and give the
 * batches of loaders made for that world; not while an epoch is active. */
static void test_reshard_spreads_a_lost_ranks_samples(void **state) {
  (void)state;
  enum { N = 301 };
  px_dataset_t *ds = index_dataset(N);
  px_loader_t *l[3], *fresh;
  px_loader_config_t cfg;
  px_loader_config_default(ds, &cfg);
  cfg.shard_mode = PX_SHARD_SPREAD;
  cfg.batch_size = 32;
  cfg.seed = 5;
  cfg.world_size = 3;
  for (int32_t r = 0; r < 3; r++) {
    cfg.rank = r;
    cfg.prefetch = r % 2;
    assert_int_equal(px_loader_create(ds, &cfg, &l[r]), PX_OK);
  }
  assert_int_equal(px_loader_begin_epoch(l[0], 0), PX_OK);
  assert_int_equal(px_loader_reshard(l[0], 0, 2), PX_ERR_STATE);
  assert_int_equal(px_loader_end_epoch(l[0]), PX_OK);
  assert_int_equal(px_loader_reshard(l[0], 2, 2), PX_ERR_INVALID);
  int seen[N] = {0};
  for (int32_t r = 0; r < 2; r++) {
    assert_int_equal(px_loader_reshard(l[r], r, 2), PX_OK);
    cfg.rank = r;
    cfg.world_size = 2;
    cfg.prefetch = 0;
    assert_int_equal(px_loader_create(ds, &cfg, &fresh), PX_OK);
    assert_int_equal(px_loader_num_batches(l[r]), px_loader_num_batches(fresh));
    assert_int_equal(px_loader_num_samples(l[r]), px_loader_num_samples(fresh));
    epoch_dump_t a, b;
    dump_epoch(l[r], ds, cfg.batch_size, 1, &a);
    dump_epoch(fresh, ds, cfg.batch_size, 1, &b);
    assert_dumps_equal(&a, &b, cfg.batch_size);
    for (int64_t k = 0; k < a.nbatches; k++)
      for (int32_t i = 0; i < a.n[k]; i++) seen[decode_index(a.x + k * a.floats_per_batch + 2 * i)]++;
    free_dump(&a);
    free_dump(&b);
    px_loader_destroy(fresh);
  }
  for (int i = 0; i < N; i++) assert_int_equal(seen[i], 1);
  for (int r = 0; r < 3; r++) px_loader_destroy(l[r]);
  px_dataset_destroy(ds);
}

int main(void) {
#define T(f) cmocka_unit_test_setup_teardown(f, setup, teardown)
  const struct CMUnitTest tests[] = {
      T(test_prefetch_yields_same_batches_as_sync),
      T(test_batches_match_shuffle_shard_and_fill),
      T(test_each_epoch_covers_every_sample_once_across_ranks),
      T(test_drop_last_and_batch_counts),
      T(test_iterating_epochs_allocates_nothing),
      T(test_end_epoch_early_then_next_epoch_is_clean),
      T(test_destroy_mid_epoch_does_not_hang_or_leak),
      T(test_background_thread_fills_ahead_while_caller_computes),
      T(test_misuse_gives_state_errors),
      T(test_bad_config_is_invalid),
      T(test_config_defaults),
      T(test_reshard_spreads_a_lost_ranks_samples),
  };
#undef T
  return cmocka_run_group_tests(tests, NULL, NULL);
}
