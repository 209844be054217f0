/* CIFAR-10 binary reader: small record files written into a temporary
 * directory are read back exactly and in file order; sizes that are not a
 * multiple of the record, empty files, labels out of range and missing files
 * fail with the right status and a message naming the file. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <ftw.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "prunex/data.h"
#include "px_test_util.h"

#define RECORD 3073

typedef struct {
  char dir[64];
  int64_t live_before;
} fixture_t;

static int64_t live_bytes(void) {
  px_mem_stats_t s;
  px_mem_stats(&s);
  return s.live_bytes;
}

static int rm_entry(const char *path, const struct stat *sb, int flag, struct FTW *ftw) {
  (void)sb;
  (void)flag;
  (void)ftw;
  return remove(path);
}

static int setup(void **state) {
  fixture_t *f = calloc(1, sizeof *f);
  if (!f) return -1;
  snprintf(f->dir, sizeof f->dir, "/tmp/px_test_cifar_XXXXXX");
  if (!mkdtemp(f->dir)) {
    free(f);
    return -1;
  }
  f->live_before = live_bytes();
  *state = f;
  return 0;
}

static int teardown(void **state) {
  fixture_t *f = *state;
  int64_t leaked = live_bytes() - f->live_before;
  nftw(f->dir, rm_entry, 8, FTW_DEPTH | FTW_PHYS);
  free(f);
  if (leaked != 0) {
    fprintf(stderr, "leaked %lld bytes through px_malloc\n", (long long)leaked);
    return -1;
  }
  return 0;
}

/* n random records; labels (i + seed) % 10. The caller frees. */
static uint8_t *make_records(int n, uint64_t seed) {
  uint8_t *buf = malloc((size_t)n * RECORD);
  assert_non_null(buf);
  px_test_rng_t rng;
  px_test_rng_seed(&rng, seed);
  for (int i = 0; i < n; i++) {
    uint8_t *r = buf + (size_t)i * RECORD;
    r[0] = (uint8_t)((i + (int)seed) % 10);
    for (int k = 1; k < RECORD; k++) r[k] = (uint8_t)(px_test_rng_u64(&rng) >> 56);
  }
  return buf;
}

static void write_file(const char *dir, const char *name, const void *data, size_t len,
                       char *path_out, size_t cap) {
  char path[256];
  snprintf(path, sizeof path, "%s/%s", dir, name);
  FILE *fp = fopen(path, "wb");
  assert_non_null(fp);
  if (len) assert_int_equal(fwrite(data, 1, len, fp), len);
  assert_int_equal(fclose(fp), 0);
  if (path_out) snprintf(path_out, cap, "%s", path);
}

/* Sample at..at+n of ds must equal the n records in recs. */
static void check_records(const px_dataset_t *ds, int64_t at, const uint8_t *recs, int n) {
  const uint8_t *img = px_dataset_images(ds), *lab = px_dataset_labels(ds);
  for (int i = 0; i < n; i++) {
    const uint8_t *r = recs + (size_t)i * RECORD;
    assert_int_equal(lab[at + i], r[0]);
    assert_memory_equal(img + (size_t)(at + i) * 3072, r + 1, 3072);
  }
}

static void assert_error_names(px_status_t st, px_status_t want, const char *path,
                               const char *what) {
  assert_int_equal(st, want);
  const char *msg = px_last_error();
  if (!strstr(msg, path) || (what && !strstr(msg, what))) {
    fail_msg("message \"%s\" should name %s and say \"%s\"", msg, path, what ? what : "");
  }
}

static void test_cifar_files_read_back_exactly_in_order(void **state) {
  fixture_t *f = *state;
  uint8_t *a = make_records(3, 1), *b = make_records(5, 2);
  char pa[256], pb[256];
  write_file(f->dir, "a.bin", a, 3 * RECORD, pa, sizeof pa);
  write_file(f->dir, "b.bin", b, 5 * RECORD, pb, sizeof pb);
  const char *paths[] = {pb, pa};
  px_dataset_t *ds = NULL;
  assert_int_equal(px_dataset_load_cifar10_files(paths, 2, &ds), PX_OK);
  const px_dataset_info_t *info = px_dataset_info(ds);
  assert_int_equal(info->n, 8);
  assert_int_equal(info->channels, 3);
  assert_int_equal(info->height, 32);
  assert_int_equal(info->width, 32);
  assert_int_equal(info->num_classes, 10);
  check_records(ds, 0, b, 5);
  check_records(ds, 5, a, 3);
  px_dataset_destroy(ds);
  free(a);
  free(b);
}

static void test_cifar_dir_train_and_test_splits(void **state) {
  fixture_t *f = *state;
  uint8_t *batch[5];
  for (int i = 0; i < 5; i++) {
    char name[32];
    snprintf(name, sizeof name, "data_batch_%d.bin", i + 1);
    batch[i] = make_records(i + 1, 10 + (uint64_t)i);
    write_file(f->dir, name, batch[i], (size_t)(i + 1) * RECORD, NULL, 0);
  }
  uint8_t *test = make_records(4, 20);
  write_file(f->dir, "test_batch.bin", test, 4 * RECORD, NULL, 0);

  px_dataset_t *ds = NULL;
  assert_int_equal(px_dataset_load_cifar10(f->dir, PX_SPLIT_TRAIN, &ds), PX_OK);
  assert_int_equal(px_dataset_info(ds)->n, 1 + 2 + 3 + 4 + 5);
  int64_t at = 0;
  for (int i = 0; i < 5; i++) {
    check_records(ds, at, batch[i], i + 1);
    at += i + 1;
  }
  const px_dataset_info_t *info = px_dataset_info(ds);
  for (int c = 0; c < 3; c++) {
    assert_true(info->mean[c] == px_cifar10_mean[c]);
    assert_true(info->std[c] == px_cifar10_std[c]);
  }
  assert_true(px_cifar10_mean[0] == 0.4914f && px_cifar10_mean[1] == 0.4822f &&
              px_cifar10_mean[2] == 0.4465f);
  assert_true(px_cifar10_std[0] == 0.2470f && px_cifar10_std[1] == 0.2435f &&
              px_cifar10_std[2] == 0.2616f);
  assert_string_equal(px_dataset_name(ds), "cifar10/train");
  px_dataset_destroy(ds);

  assert_int_equal(px_dataset_load_cifar10(f->dir, PX_SPLIT_TEST, &ds), PX_OK);
  assert_int_equal(px_dataset_info(ds)->n, 4);
  check_records(ds, 0, test, 4);
  px_dataset_destroy(ds);
  for (int i = 0; i < 5; i++) free(batch[i]);
  free(test);
}

static void test_cifar_dir_finds_the_archive_subdirectory(void **state) {
  fixture_t *f = *state;
  char sub[128];
  snprintf(sub, sizeof sub, "%s/cifar-10-batches-bin", f->dir);
  assert_int_equal(mkdir(sub, 0700), 0);
  uint8_t *test = make_records(2, 30);
  write_file(sub, "test_batch.bin", test, 2 * RECORD, NULL, 0);
  px_dataset_t *ds = NULL;
  assert_int_equal(px_dataset_load_cifar10(f->dir, PX_SPLIT_TEST, &ds), PX_OK);
  check_records(ds, 0, test, 2);
  px_dataset_destroy(ds);
  free(test);
}

static void test_size_not_multiple_of_record_is_format_error(void **state) {
  fixture_t *f = *state;
  uint8_t *r = make_records(3, 3);
  char p[256];
  write_file(f->dir, "short.bin", r, 3 * RECORD - 100, p, sizeof p); /* truncated */
  const char *paths[] = {p};
  px_dataset_t *ds = NULL;
  assert_error_names(px_dataset_load_cifar10_files(paths, 1, &ds), PX_ERR_FORMAT, p,
                     "not a multiple");
  write_file(f->dir, "long.bin", r, 2 * RECORD + 1, p, sizeof p);
  assert_error_names(px_dataset_load_cifar10_files(paths, 1, &ds), PX_ERR_FORMAT, p,
                     "not a multiple");
  write_file(f->dir, "empty.bin", r, 0, p, sizeof p);
  assert_error_names(px_dataset_load_cifar10_files(paths, 1, &ds), PX_ERR_FORMAT, p, "empty");
  assert_null(ds);
  free(r);
}

static void test_label_out_of_range_is_format_error(void **state) {
  fixture_t *f = *state;
  uint8_t *r = make_records(4, 4);
  r[2 * RECORD] = 10;
  char good[256], bad[256];
  write_file(f->dir, "good.bin", r, RECORD, good, sizeof good);
  write_file(f->dir, "bad.bin", r, 4 * RECORD, bad, sizeof bad);
  const char *paths[] = {good, bad};
  px_dataset_t *ds = NULL;
  assert_error_names(px_dataset_load_cifar10_files(paths, 2, &ds), PX_ERR_FORMAT, bad,
                     "label 10 of record 2");
  assert_null(ds);
  free(r);
}

static void test_missing_file_is_io_error_naming_it(void **state) {
  fixture_t *f = *state;
  uint8_t *r = make_records(1, 5);
  /* Batches 1-4 present, 5 missing. */
  for (int i = 1; i <= 4; i++) {
    char name[32];
    snprintf(name, sizeof name, "data_batch_%d.bin", i);
    write_file(f->dir, name, r, RECORD, NULL, 0);
  }
  px_dataset_t *ds = NULL;
  assert_error_names(px_dataset_load_cifar10(f->dir, PX_SPLIT_TRAIN, &ds), PX_ERR_IO,
                     "data_batch_5.bin", NULL);
  assert_error_names(px_dataset_load_cifar10(f->dir, PX_SPLIT_TEST, &ds), PX_ERR_IO,
                     "test_batch.bin", NULL);
  assert_error_names(px_dataset_load_cifar10("/nonexistent/px", PX_SPLIT_TRAIN, &ds), PX_ERR_IO,
                     "/nonexistent/px/data_batch_1.bin", NULL);
  /* A directory where a file should be. */
  char sub[128];
  snprintf(sub, sizeof sub, "%s/dir.bin", f->dir);
  assert_int_equal(mkdir(sub, 0700), 0);
  const char *paths[] = {sub};
  assert_error_names(px_dataset_load_cifar10_files(paths, 1, &ds), PX_ERR_IO, sub, NULL);
  assert_null(ds);
  free(r);
}

static void test_bad_arguments_are_invalid(void **state) {
  (void)state;
  px_dataset_t *ds = NULL;
  const char *paths[] = {"x"};
  assert_int_equal(px_dataset_load_cifar10_files(paths, 0, &ds), PX_ERR_INVALID);
  assert_int_equal(px_dataset_load_cifar10_files(NULL, 1, &ds), PX_ERR_INVALID);
  assert_int_equal(px_dataset_load_cifar10(NULL, PX_SPLIT_TEST, &ds), PX_ERR_INVALID);
  assert_int_equal(px_dataset_load_cifar10("/tmp", (px_split_t)7, &ds), PX_ERR_INVALID);
  assert_null(ds);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test_setup_teardown(test_cifar_files_read_back_exactly_in_order, setup,
                                      teardown),
      cmocka_unit_test_setup_teardown(test_cifar_dir_train_and_test_splits, setup, teardown),
      cmocka_unit_test_setup_teardown(test_cifar_dir_finds_the_archive_subdirectory, setup,
                                      teardown),
      cmocka_unit_test_setup_teardown(test_size_not_multiple_of_record_is_format_error, setup,
                                      teardown),
      cmocka_unit_test_setup_teardown(test_label_out_of_range_is_format_error, setup, teardown),
      cmocka_unit_test_setup_teardown(test_missing_file_is_io_error_naming_it, setup, teardown),
      cmocka_unit_test_setup_teardown(test_bad_arguments_are_invalid, setup, teardown),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
