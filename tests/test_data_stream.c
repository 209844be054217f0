/* Streamed image folders (data/stream.c, data/xform.c): a folder over its
 * cache budget is decoded every epoch. The evaluation transform against
 * torchvision's Resize + CenterCrop and the training crop against
 * torchvision's resized_crop of the same box (tests/stream_fixture.py, with
 * Pillow and torchvision), training batches the same whatever the thread
 * count and prefetch, corrupt files skipped, counted and failing the epoch
 * past dataset.max_skipped, a short training run on a streamed folder, and
 * pxtrain's flags for it.
 * Skips without /usr/bin/python3 with Pillow and torchvision. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <ftw.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "data/data_int.h"
#include "prunex/data.h"
#include "prunex/nn.h"
#include "px_test_util.h"

#define PY "/usr/bin/python3"
#define SIZE 32
#define NTRAIN 24 /* 3 classes x 8 */
#define NVAL 9

static char fx[64]; /* the generated folder */

static int rm_entry(const char *path, const struct stat *sb, int flag, struct FTW *ftw) {
  (void)sb;
  (void)flag;
  (void)ftw;
  return remove(path);
}

static int group_setup(void **state) {
  (void)state;
  snprintf(fx, sizeof fx, "/tmp/px_stream_XXXXXX");
  if (!mkdtemp(fx)) return -1;
  char cmd[512];
  snprintf(cmd, sizeof cmd, "%s/tests/stream_fixture.py folder %s %d >/dev/null 2>&1",
           PX_SOURCE_DIR, fx, SIZE);
  if (px_test_py(cmd) != 0) {
    nftw(fx, rm_entry, 16, FTW_DEPTH | FTW_PHYS);
    fx[0] = '\0';
  }
  return 0;
}

static int group_teardown(void **state) {
  (void)state;
  if (fx[0]) nftw(fx, rm_entry, 16, FTW_DEPTH | FTW_PHYS);
  return 0;
}

static void need_fixture(void) {
  if (!fx[0]) {
    print_message("needs " PY " with Pillow and torchvision (scripts/bootstrap)\n");
    skip();
  }
}

/* A split of dir, forced onto the streaming path by a 1-byte budget. */
static px_dataset_t *load_streamed(const char *dir, px_split_t split, double max_skipped) {
  px_folder_config_t fc;
  memset(&fc, 0, sizeof fc);
  fc.dir = dir;
  fc.split = split;
  fc.channels = 3;
  fc.size = SIZE;
  fc.max_skipped = max_skipped;
  fc.cache_budget = 1;
  px_folder_report_t rep;
  px_dataset_t *ds = NULL;
  assert_int_equal(px_dataset_load_folder(&fc, &rep, &ds), PX_OK);
  assert_int_equal(rep.streamed, 1);
  assert_int_equal(px_dataset_streamed(ds), 1);
  assert_null(px_dataset_images(ds));
  return ds;
}

/* Loader config giving raw pixel values (mean 0, std 1/255). */
static void raw_config(px_loader_config_t *lc, int batch, int threads, int prefetch) {
  for (int c = 0; c < 3; c++) {
    lc->mean[c] = 0.0f;
    lc->std[c] = 1.0f / 255.0f;
  }
  lc->batch_size = batch;
  lc->threads = threads;
  lc->prefetch = prefetch;
}

static void eval_transform_matches_torchvision(void **state) {
  (void)state;
  need_fixture();
  px_dataset_t *ds = load_streamed(fx, PX_SPLIT_TEST, 0);
  assert_int_equal(px_dataset_info(ds)->n, NVAL);
  px_loader_config_t lc;
  px_loader_config_eval(ds, &lc);
  raw_config(&lc, NVAL, 2, 0);
  px_loader_t *l;
  assert_int_equal(px_loader_create(ds, &lc, &l), PX_OK);
  assert_int_equal(px_loader_begin_epoch(l, 0), PX_OK);
  px_batch_t b;
  assert_int_equal(px_loader_next(l, &b), 1);
  assert_int_equal(b.n, NVAL);
  /* in label then name order; stream_fixture.py's shapes */
  static const char *names[NVAL] = {"a/a00.jpg", "a/a01.jpg", "a/a02.png",
                                    "b/b00.jpg", "b/b01.jpg", "b/b02.png",
                                    "c/c00.jpg", "c/c01.jpg", "c/c02.png"};
  /* 1: decoded at full scale (40x40, 36x44 JPEGs and the PNGs): only
   * rounding differs; 0: at a reduced DCT scale, which Pillow does not do */
  static const int full[NVAL] = {1, 1, 1, 1, 0, 1, 0, 0, 1};
  size_t img = 3 * SIZE * SIZE;
  for (int i = 0; i < NVAL; i++) {
    char path[256];
    snprintf(path, sizeof path, "%s/val/%s.ref", fx, names[i]);
    size_t n;
    uint8_t *ref = (uint8_t *)px_test_read_file(path, &n);
    assert_non_null(ref);
    assert_int_equal(n, img);
    double worst = 0, sum = 0;
    for (size_t k = 0; k < img; k++) {
      double d = fabs(b.x[(size_t)i * img + k] - ref[k]);
      sum += d;
      if (d > worst) worst = d;
    }
    printf("%s: largest difference %.2f, mean %.3f\n", names[i], worst, sum / img);
    assert_int_equal(b.y[i], i / 3);
    if (full[i]) {
      assert_true(worst <= 1.5);
    } else {
      assert_true(sum / img <= 3.0);
    }
    free(ref);
  }
  px_loader_destroy(l);
  px_dataset_destroy(ds);
}

/* The training crops of one w x h file for (seed 7, epoch 3, index) against
 * torchvision's resized_crop of the same boxes: boxes small enough to be
 * decoded at full scale (so only rounding differs), the columns around
 * them cropped before decoding on a large image. */
static void crops_vs_torchvision(const char *file, int w, int h, double min_scale) {
  char path[256], out[128], cmd[2048];
  snprintf(path, sizeof path, "%s/%s", fx, file);
  snprintf(out, sizeof out, "%s/crops.raw", fx);
  size_t len;
  uint8_t *buf = (uint8_t *)px_test_read_file(path, &len);
  assert_non_null(buf);
  enum { N = 6 };
  px__xform_params_t p = {min_scale, 1, 7, 3, 0};
  px__xform_geom_t g[N];
  int64_t index[N];
  int at = snprintf(cmd, sizeof cmd, PY " %s/tests/stream_fixture.py crop %s %d %s", PX_SOURCE_DIR,
                    path, SIZE, out);
  int flips = 0, found = 0;
  for (int64_t k = 100; found < N && k < 1000; k++) {
    p.index = k;
    px__xform_choose(&p, w, h, SIZE, &g[found]);
    px__xform_geom_t *q = &g[found];
    assert_true(q->box.w >= 1 && q->box.x + q->box.w <= w && q->box.y + q->box.h <= h);
    if ((q->box.w < q->box.h ? q->box.w : q->box.h) >= 72) continue; /* a reduced DCT scale */
    index[found] = k;
    flips += q->flip;
    at += snprintf(cmd + at, sizeof cmd - at, " %d,%d,%d,%d", (int)q->box.x, (int)q->box.y,
                   (int)q->box.w, (int)q->box.h);
    found++;
  }
  assert_int_equal(found, N);
  assert_true(flips > 0 && flips < N); /* seed 7's draws: both ways */
  assert_int_equal(system(cmd), 0);
  size_t n;
  uint8_t *ref = (uint8_t *)px_test_read_file(out, &n);
  size_t img = 3 * SIZE * SIZE;
  assert_int_equal(n, N * img);
  px__xform_t *x;
  assert_int_equal(px__xform_create(3, SIZE, &x), PX_OK);
  static const float one[3] = {1, 1, 1}, zero[3] = {0, 0, 0};
  float *got = malloc(img * sizeof *got);
  for (int i = 0; i < N; i++) {
    p.index = index[i];
    assert_int_equal(px__xform_run(x, buf, len, &p, one, zero, got), PX_OK);
    double worst = 0;
    for (int c = 0; c < 3; c++)
      for (int yy = 0; yy < SIZE; yy++)
        for (int xx = 0; xx < SIZE; xx++) {
          int sx = g[i].flip ? SIZE - 1 - xx : xx; /* torchvision's crop is unflipped */
          double d = fabs(got[((size_t)c * SIZE + yy) * SIZE + xx] -
                          ref[i * img + ((size_t)c * SIZE + yy) * SIZE + sx]);
          if (d > worst) worst = d;
        }
    printf("%s crop %d (%g,%g %gx%g flip %d): largest difference %.2f\n", file, i, g[i].box.x,
           g[i].box.y, g[i].box.w, g[i].box.h, g[i].flip, worst);
    assert_true(worst <= 1.5);
  }
  px__xform_destroy(x);
  free(got);
  free(ref);
  free(buf);
}

static void train_crop_matches_torchvision(void **state) {
  (void)state;
  need_fixture();
  crops_vs_torchvision("train/a/a00.jpg", 40, 40, 0.08);   /* enlarged */
  crops_vs_torchvision("train/a/a07.jpg", 200, 150, 0.01); /* cropped before decoding */
}

/* Every training batch of two epochs with `threads` decoders and prefetch. */
static float *train_epochs(px_dataset_t *ds, int threads, int prefetch, int32_t *labels) {
  px_loader_config_t lc;
  px_loader_config_default(ds, &lc);
  raw_config(&lc, 8, threads, prefetch);
  lc.seed = 11;
  lc.augment.rrc_scale = 0.08f;
  lc.augment.flip = 1;
  px_loader_t *l;
  assert_int_equal(px_loader_create(ds, &lc, &l), PX_OK);
  size_t img = 3 * SIZE * SIZE;
  float *all = malloc(2 * NTRAIN * img * sizeof *all);
  size_t at = 0;
  for (int e = 0; e < 2; e++) {
    assert_int_equal(px_loader_begin_epoch(l, e), PX_OK);
    px_batch_t b;
    while (px_loader_next(l, &b) == 1) {
      memcpy(all + at * img, b.x, (size_t)b.n * img * sizeof *all);
      memcpy(labels + at, b.y, (size_t)b.n * sizeof *labels);
      at += (size_t)b.n;
    }
    assert_int_equal(px_loader_end_epoch(l), PX_OK);
  }
  assert_int_equal(at, 2 * NTRAIN);
  assert_int_equal(px_loader_skipped(l), 0);
  px_loader_destroy(l);
  return all;
}

static void train_batches_do_not_depend_on_threads(void **state) {
  (void)state;
  need_fixture();
  px_dataset_t *ds = load_streamed(fx, PX_SPLIT_TRAIN, 0);
  int32_t y1[2 * NTRAIN], y2[2 * NTRAIN], y3[2 * NTRAIN];
  float *a = train_epochs(ds, 1, 0, y1);
  float *b = train_epochs(ds, 3, 2, y2);
  float *c = train_epochs(ds, 2, 1, y3);
  size_t half = NTRAIN * 3 * SIZE * SIZE;
  assert_memory_equal(a, b, 2 * half * sizeof *a);
  assert_memory_equal(a, c, 2 * half * sizeof *a);
  assert_memory_equal(y1, y2, sizeof y1);
  assert_memory_equal(y1, y3, sizeof y1);
  /* and the second epoch is another draw */
  assert_true(memcmp(a, a + half, half * sizeof *a) != 0);
  free(a);
  free(b);
  free(c);
  px_dataset_destroy(ds);
}

/* A copy of the fixture's train/ and val/ with `bad` train files overwritten
 * by garbage. */
static void corrupt_copy(const char *dst, int bad) {
  char cmd[512];
  snprintf(cmd, sizeof cmd, "rm -rf %s && cp -r %s %s", dst, fx, dst);
  assert_int_equal(system(cmd), 0);
  static const char *victims[] = {"a/a01.jpg", "b/b04.jpg", "c/c06.png"};
  for (int i = 0; i < bad; i++) {
    char path[256];
    snprintf(path, sizeof path, "%s/train/%s", dst, victims[i]);
    FILE *f = fopen(path, "wb");
    assert_non_null(f);
    fputs(i == 1 ? "\xff\xd8\xff garbage after a JPEG marker" : "not an image", f);
    fclose(f);
  }
}

static void corrupt_files_are_skipped_then_fail_the_epoch(void **state) {
  (void)state;
  need_fixture();
  char dir[128];
  snprintf(dir, sizeof dir, "%s-bad", fx);
  corrupt_copy(dir, 1);
  px_dataset_t *ds = load_streamed(dir, PX_SPLIT_TRAIN, 0.1);
  px_loader_config_t lc;
  px_loader_config_default(ds, &lc);
  raw_config(&lc, NTRAIN, 2, 1);
  lc.augment.rrc_scale = 0.08f;
  px_loader_t *l;
  assert_int_equal(px_loader_create(ds, &lc, &l), PX_OK);
  assert_int_equal(px_loader_begin_epoch(l, 0), PX_OK);
  px_batch_t b;
  assert_int_equal(px_loader_next(l, &b), 1);
  assert_int_equal(b.n, NTRAIN);
  assert_int_equal(px_loader_skipped(l), 1);
  /* the bad file's place is taken by the next file of its class (a02) */
  int count_a = 0;
  for (int i = 0; i < NTRAIN; i++) count_a += b.y[i] == 0;
  assert_int_equal(count_a, 8);
  px_loader_destroy(l);
  px_dataset_destroy(ds);

  corrupt_copy(dir, 3); /* 3 of 24 > 10% */
  ds = load_streamed(dir, PX_SPLIT_TRAIN, 0.1);
  assert_int_equal(px_loader_create(ds, &lc, &l), PX_OK);
  assert_int_equal(px_loader_begin_epoch(l, 0), PX_OK);
  assert_int_equal(px_loader_next(l, &b), PX_ERR_FORMAT);
  printf("%s\n", px_last_error());
  assert_non_null(strstr(px_last_error(), "3 of 24 images could not be decoded"));
  assert_non_null(strstr(px_last_error(), "dataset.max_skipped"));
  px_loader_destroy(l);
  px_dataset_destroy(ds);
  char cmd[256];
  snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
  assert_int_equal(system(cmd), 0);
}

static void fill_batch_refuses_a_streamed_set(void **state) {
  (void)state;
  need_fixture();
  px_dataset_t *ds = load_streamed(fx, PX_SPLIT_TRAIN, 0);
  uint32_t idx = 0;
  float x[3 * SIZE * SIZE];
  int32_t y;
  const px_dataset_info_t *info = px_dataset_info(ds);
  assert_int_equal(px_data_fill_batch(ds, &idx, 1, NULL, info->mean, info->std, 0, 0, x, &y),
                   PX_ERR_INVALID);
  assert_non_null(strstr(px_last_error(), "streamed"));
  px_dataset_destroy(ds);
}

static void a_streamed_folder_trains(void **state) {
  (void)state;
  need_fixture();
  px_train_config_t c;
  px_train_config_default(&c);
  c.dataset = "folder";
  c.data_dir = fx;
  c.arch = "resnet20";
  c.image_size = SIZE;
  c.batch = 8;
  c.threads = 2;
  c.epochs = 1;
  c.lr = 0.05;
  c.cache_budget = 1; /* every split streamed */
  c.loader_threads = 2;
  c.min_scale = 0.08f;
  px_trainer_t *t;
  assert_int_equal(px_trainer_create(&c, &t), PX_OK);
  assert_int_equal(px_trainer_steps_per_epoch(t), NTRAIN / 8);
  px_epoch_stats_t e;
  assert_int_equal(px_trainer_epoch(t, 0, NULL, NULL, &e), PX_OK);
  px_eval_stats_t ev;
  assert_int_equal(px_trainer_evaluate(t, &ev), PX_OK);
  printf("streamed folder: loss %.3f, test loss %.3f on %lld images\n", e.loss, ev.loss,
         (long long)ev.samples);
  assert_true(isfinite(e.loss) && e.loss > 0);
  assert_int_equal(ev.samples, NVAL);
  /* the model's input contract: evaluated as torchvision does (37 = 32 x 256/224) */
  const char *kv[14];
  assert_int_equal(px_trainer_input_meta(t, kv, 7), 7);
  assert_string_equal(kv[4], "input_resize");
  assert_string_equal(kv[5], "37");
  assert_string_equal(kv[7], "32");
  assert_string_equal(kv[8], "input_mean");
  assert_string_equal(kv[9], "0.485000014,0.456,0.405999988");
  px_trainer_destroy(t);
}

/* pxtrain's flags for a folder: --cache-budget-mb sends a split over it to
 * the loader threads (streamed); a folder within the default budget is
 * cached decoded and says so; bad values name their flag. */
static void pxtrain_streams_a_folder_over_its_budget(void **state) {
  (void)state;
  need_fixture();
  char cmd[1024], out[8192];
  const char *common = "--dataset folder --image-size 128 --epochs 1 --batch 8 --threads 2 "
                       "--no-progress";
  /* 24 images of 128 x 128 x 3 bytes: 1.13 MiB */
  snprintf(cmd, sizeof cmd,
           "PX_LOG_LEVEL=info %s/cli/pxtrain --data-dir %s %s --cache-budget-mb 1 "
           "--loader-threads 2 --prefetch 3 --max-skipped 0.5 2>&1",
           PX_BINARY_DIR, fx, common);
  assert_int_equal(px_test_capture(cmd, out, sizeof out), 0);
  printf("%s", out);
  assert_non_null(strstr(out, "24 training images, 3 classes, streamed"));
  assert_non_null(strstr(out, "final test accuracy"));
  snprintf(cmd, sizeof cmd, "PX_LOG_LEVEL=info %s/cli/pxtrain --data-dir %s %s --eval-only 2>&1",
           PX_BINARY_DIR, fx, common);
  assert_int_equal(px_test_capture(cmd, out, sizeof out), 0);
  assert_null(strstr(out, "streamed"));
  assert_non_null(strstr(out, "cache"));
  static const char *bad[] = {"--prefetch 0", "--loader-threads 0", "--cache-budget-mb 0",
                              "--max-skipped 1.5"};
  for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
    snprintf(cmd, sizeof cmd, "%s/cli/pxtrain --data-dir %s %s %s 2>&1", PX_BINARY_DIR, fx,
             common, bad[i]);
    assert_int_equal(px_test_capture(cmd, out, sizeof out), 2);
    char flag[32];
    snprintf(flag, sizeof flag, "%.*s", (int)strcspn(bad[i], " "), bad[i]);
    assert_non_null(strstr(out, flag));
  }
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(eval_transform_matches_torchvision),
      cmocka_unit_test(train_crop_matches_torchvision),
      cmocka_unit_test(train_batches_do_not_depend_on_threads),
      cmocka_unit_test(corrupt_files_are_skipped_then_fail_the_epoch),
      cmocka_unit_test(fill_batch_refuses_a_streamed_set),
      cmocka_unit_test(a_streamed_folder_trains),
      cmocka_unit_test(pxtrain_streams_a_folder_over_its_budget),
  };
  return cmocka_run_group_tests(tests, group_setup, group_teardown);
}
