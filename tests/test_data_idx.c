/* IDX / Fashion-MNIST reader: small files written into a temporary
 * directory, plain (stdio) and gzip (px_data_write_file, which uses zlib's
 * gzopen/gzwrite), read back exactly; every kind of broken file
 * fails with the right status and a message naming the file; and, where the
 * real data set is installed, its counts, shapes and class balance. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <ftw.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "prunex/data.h"
#include "px_test_util.h"

#define REAL_FMNIST_DIR "/usr/share/datasets/fashion-mnist"

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
  snprintf(f->dir, sizeof f->dir, "/tmp/px_test_idx_XXXXXX");
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

static void path_in(const fixture_t *f, const char *name, char *buf, size_t cap) {
  snprintf(buf, cap, "%s/%s", f->dir, name);
}

static void write_plain(const char *path, const void *data, size_t len) {
  FILE *fp = fopen(path, "wb");
  assert_non_null(fp);
  assert_int_equal(fwrite(data, 1, len, fp), len);
  assert_int_equal(fclose(fp), 0);
}

/* The library's writer compresses by the .gz suffix (the tests do not link
 * zlib themselves). */
static void write_gz(const char *path, const void *data, size_t len) {
  assert_true(strlen(path) > 3 && strcmp(path + strlen(path) - 3, ".gz") == 0);
  assert_int_equal(px_data_write_file(path, data, len), PX_OK);
}

static void put_be32(uint8_t *p, uint32_t v) {
  p[0] = (uint8_t)(v >> 24);
  p[1] = (uint8_t)(v >> 16);
  p[2] = (uint8_t)(v >> 8);
  p[3] = (uint8_t)v;
}

/* A small IDX image file (n images of rows x cols) and label file in memory. */
typedef struct {
  uint8_t *img;
  size_t img_len;
  uint8_t *lab;
  size_t lab_len;
  uint32_t n, rows, cols;
} idx_pair_t;

static void make_pair(idx_pair_t *p, uint32_t n, uint32_t rows, uint32_t cols, uint64_t seed) {
  px_test_rng_t rng;
  px_test_rng_seed(&rng, seed);
  p->n = n;
  p->rows = rows;
  p->cols = cols;
  p->img_len = 16 + (size_t)n * rows * cols;
  p->img = malloc(p->img_len);
  p->lab_len = 8 + n;
  p->lab = malloc(p->lab_len);
  assert_non_null(p->img);
  assert_non_null(p->lab);
  put_be32(p->img, 0x00000803);
  put_be32(p->img + 4, n);
  put_be32(p->img + 8, rows);
  put_be32(p->img + 12, cols);
  for (size_t i = 16; i < p->img_len; i++) p->img[i] = (uint8_t)(px_test_rng_u64(&rng) >> 56);
  put_be32(p->lab, 0x00000801);
  put_be32(p->lab + 4, n);
  for (uint32_t i = 0; i < n; i++) p->lab[8 + i] = (uint8_t)(i % 10);
}

static void free_pair(idx_pair_t *p) {
  free(p->img);
  free(p->lab);
}

/* The data set must hold exactly p's images, each padded by pad zeros. */
static void check_matches(const px_dataset_t *ds, const idx_pair_t *p, int32_t pad) {
  const px_dataset_info_t *info = px_dataset_info(ds);
  int32_t h = (int32_t)p->rows + 2 * pad, w = (int32_t)p->cols + 2 * pad;
  assert_int_equal(info->n, p->n);
  assert_int_equal(info->channels, 1);
  assert_int_equal(info->height, h);
  assert_int_equal(info->width, w);
  const uint8_t *img = px_dataset_images(ds);
  const uint8_t *lab = px_dataset_labels(ds);
  for (uint32_t i = 0; i < p->n; i++) {
    assert_int_equal(lab[i], p->lab[8 + i]);
    for (int32_t y = 0; y < h; y++) {
      for (int32_t x = 0; x < w; x++) {
        int32_t sy = y - pad, sx = x - pad;
        uint8_t want = 0;
        if (sy >= 0 && sy < (int32_t)p->rows && sx >= 0 && sx < (int32_t)p->cols) {
          want = p->img[16 + (size_t)i * p->rows * p->cols + (size_t)sy * p->cols + sx];
        }
        assert_int_equal(img[(size_t)i * h * w + (size_t)y * w + x], want);
      }
    }
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

/* ---- round trips ---- */

static void test_idx_plain_reads_back_exactly(void **state) {
  fixture_t *f = *state;
  char ip[256], lp[256];
  path_in(f, "img-idx3-ubyte", ip, sizeof ip);
  path_in(f, "lab-idx1-ubyte", lp, sizeof lp);
  idx_pair_t p;
  make_pair(&p, 7, 5, 6, 1);
  write_plain(ip, p.img, p.img_len);
  write_plain(lp, p.lab, p.lab_len);
  px_dataset_t *ds = NULL;
  assert_int_equal(px_dataset_load_idx(ip, lp, 10, 0, &ds), PX_OK);
  check_matches(ds, &p, 0);
  assert_int_equal(px_dataset_info(ds)->num_classes, 10);
  px_dataset_destroy(ds);
  free_pair(&p);
}

static void test_idx_gzip_reads_back_exactly_with_padding(void **state) {
  fixture_t *f = *state;
  char ip[256], lp[256];
  path_in(f, "img-idx3-ubyte.gz", ip, sizeof ip);
  path_in(f, "lab-idx1-ubyte.gz", lp, sizeof lp);
  idx_pair_t p;
  make_pair(&p, 11, 4, 3, 2);
  write_gz(ip, p.img, p.img_len);
  write_gz(lp, p.lab, p.lab_len);
  FILE *fp = fopen(ip, "rb"); /* really gzip on disk */
  assert_non_null(fp);
  assert_int_equal(fgetc(fp), 0x1f);
  assert_int_equal(fgetc(fp), 0x8b);
  fclose(fp);
  px_dataset_t *ds = NULL;
  assert_int_equal(px_dataset_load_idx(ip, lp, 10, 3, &ds), PX_OK);
  check_matches(ds, &p, 3);
  px_dataset_destroy(ds);
  free_pair(&p);
}

static void test_idx_many_images_cross_read_chunks(void **state) {
  /* More than one 1 MiB read chunk of pixel data, so the growing buffer and
   * chunked placement are exercised. */
  fixture_t *f = *state;
  char ip[256], lp[256];
  path_in(f, "big-idx3-ubyte.gz", ip, sizeof ip);
  path_in(f, "big-idx1-ubyte", lp, sizeof lp);
  idx_pair_t p;
  make_pair(&p, 1500, 28, 28, 3);
  write_gz(ip, p.img, p.img_len);
  write_plain(lp, p.lab, p.lab_len);
  px_dataset_t *ds = NULL;
  assert_int_equal(px_dataset_load_idx(ip, lp, 10, 2, &ds), PX_OK);
  check_matches(ds, &p, 2);
  px_dataset_destroy(ds);
  free_pair(&p);
}

static void write_fmnist(const fixture_t *f, const char *prefix, const idx_pair_t *p, int gz) {
  char path[256], name[128];
  snprintf(name, sizeof name, "%s-images-idx3-ubyte%s", prefix, gz ? ".gz" : "");
  path_in(f, name, path, sizeof path);
  (gz ? write_gz : write_plain)(path, p->img, p->img_len);
  snprintf(name, sizeof name, "%s-labels-idx1-ubyte%s", prefix, gz ? ".gz" : "");
  path_in(f, name, path, sizeof path);
  (gz ? write_gz : write_plain)(path, p->lab, p->lab_len);
}

static void test_fmnist_dir_pads_to_32_and_sets_constants(void **state) {
  fixture_t *f = *state;
  idx_pair_t tr, te;
  make_pair(&tr, 20, 28, 28, 4);
  make_pair(&te, 6, 28, 28, 5);
  write_fmnist(f, "train", &tr, 1);
  write_fmnist(f, "t10k", &te, 0); /* plain files are found too */
  px_dataset_t *ds = NULL;
  assert_int_equal(px_dataset_load_fashion_mnist(f->dir, PX_SPLIT_TRAIN, &ds), PX_OK);
  check_matches(ds, &tr, 2);
  const px_dataset_info_t *info = px_dataset_info(ds);
  assert_int_equal(info->height, 32);
  assert_int_equal(info->width, 32);
  assert_int_equal(info->num_classes, 10);
  assert_true(info->mean[0] == 0.2860f && info->std[0] == 0.3530f);
  assert_string_equal(px_dataset_name(ds), "fashion-mnist/train");
  px_dataset_destroy(ds);
  assert_int_equal(px_dataset_load_fashion_mnist(f->dir, PX_SPLIT_TEST, &ds), PX_OK);
  check_matches(ds, &te, 2);
  px_dataset_destroy(ds);
  free_pair(&tr);
  free_pair(&te);
}

static void test_fmnist_prefers_gz_when_both_exist(void **state) {
  fixture_t *f = *state;
  idx_pair_t plain, gz;
  make_pair(&plain, 3, 28, 28, 6);
  make_pair(&gz, 4, 28, 28, 7);
  write_fmnist(f, "t10k", &plain, 0);
  write_fmnist(f, "t10k", &gz, 1);
  px_dataset_t *ds = NULL;
  assert_int_equal(px_dataset_load_fashion_mnist(f->dir, PX_SPLIT_TEST, &ds), PX_OK);
  check_matches(ds, &gz, 2);
  px_dataset_destroy(ds);
  free_pair(&plain);
  free_pair(&gz);
}

/* ---- broken files ---- */

static void test_missing_file_is_io_error_naming_it(void **state) {
  fixture_t *f = *state;
  char ip[256], lp[256];
  path_in(f, "nope-idx3-ubyte", ip, sizeof ip);
  path_in(f, "lab-idx1-ubyte", lp, sizeof lp);
  idx_pair_t p;
  make_pair(&p, 2, 2, 2, 8);
  write_plain(lp, p.lab, p.lab_len);
  px_dataset_t *ds = NULL;
  assert_error_names(px_dataset_load_idx(ip, lp, 10, 0, &ds), PX_ERR_IO, ip, NULL);
  assert_null(ds);
  /* Fashion-MNIST directory without the files. */
  assert_error_names(px_dataset_load_fashion_mnist(f->dir, PX_SPLIT_TRAIN, &ds), PX_ERR_IO,
                     "train-images-idx3-ubyte", "missing");
  assert_error_names(px_dataset_load_fashion_mnist("/nonexistent/px", PX_SPLIT_TEST, &ds),
                     PX_ERR_IO, "/nonexistent/px/t10k-images-idx3-ubyte", "missing");
  free_pair(&p);
}

/* Writes p (modified by the caller) and expects the load to fail. */
static void expect_load_error(const fixture_t *f, const idx_pair_t *p, int gz, px_status_t want,
                              int bad_is_labels, const char *what) {
  char ip[256], lp[256];
  path_in(f, gz ? "e-idx3-ubyte.gz" : "e-idx3-ubyte", ip, sizeof ip);
  path_in(f, gz ? "e-idx1-ubyte.gz" : "e-idx1-ubyte", lp, sizeof lp);
  (gz ? write_gz : write_plain)(ip, p->img, p->img_len);
  (gz ? write_gz : write_plain)(lp, p->lab, p->lab_len);
  px_dataset_t *ds = NULL;
  assert_error_names(px_dataset_load_idx(ip, lp, 10, 0, &ds), want, bad_is_labels ? lp : ip,
                     what);
  assert_null(ds);
}

static void test_bad_magic_is_format_error(void **state) {
  idx_pair_t p;
  make_pair(&p, 3, 4, 4, 9);
  p.img[3] = 0x02; /* two dimensions instead of three */
  expect_load_error(*state, &p, 0, PX_ERR_FORMAT, 0, "magic");
  p.img[3] = 0x03;
  p.lab[2] = 0x0d; /* float labels */
  expect_load_error(*state, &p, 1, PX_ERR_FORMAT, 1, "magic");
  free_pair(&p);
}

static void test_wrong_dims_are_format_errors(void **state) {
  fixture_t *f = *state;
  idx_pair_t p;
  make_pair(&p, 3, 4, 4, 10);
  put_be32(p.img + 8, 0); /* zero rows */
  expect_load_error(f, &p, 0, PX_ERR_FORMAT, 0, "dimensions");
  free_pair(&p);
  /* Fashion-MNIST must be 28x28. */
  make_pair(&p, 3, 27, 28, 11);
  write_fmnist(f, "train", &p, 1);
  px_dataset_t *ds = NULL;
  assert_error_names(px_dataset_load_fashion_mnist(f->dir, PX_SPLIT_TRAIN, &ds), PX_ERR_FORMAT,
                     "train-images-idx3-ubyte.gz", "27x28");
  free_pair(&p);
}

static void test_label_out_of_range_is_format_error(void **state) {
  idx_pair_t p;
  make_pair(&p, 5, 3, 3, 12);
  p.lab[8 + 3] = 10;
  expect_load_error(*state, &p, 0, PX_ERR_FORMAT, 1, "out of range");
  free_pair(&p);
}

static void test_count_mismatch_names_both_files(void **state) {
  fixture_t *f = *state;
  idx_pair_t p;
  make_pair(&p, 5, 3, 3, 13);
  put_be32(p.lab + 4, 4);
  p.lab_len -= 1;
  expect_load_error(f, &p, 0, PX_ERR_FORMAT, 1, "4 labels");
  char ip[256];
  path_in(f, "e-idx3-ubyte", ip, sizeof ip);
  assert_non_null(strstr(px_last_error(), ip));
  free_pair(&p);
}

static void test_truncated_plain_is_format_error(void **state) {
  idx_pair_t p;
  make_pair(&p, 5, 3, 3, 14);
  p.img_len -= 4; /* last image short */
  expect_load_error(*state, &p, 0, PX_ERR_FORMAT, 0, "truncated");
  p.img_len = 10; /* inside the header */
  expect_load_error(*state, &p, 0, PX_ERR_FORMAT, 0, "truncated");
  free_pair(&p);
}

static void test_header_announcing_huge_count_fails_as_truncated(void **state) {
  idx_pair_t p;
  make_pair(&p, 5, 28, 28, 15);
  put_be32(p.img + 4, 2000000000u);
  put_be32(p.lab + 4, 2000000000u);
  expect_load_error(*state, &p, 0, PX_ERR_FORMAT, 1, "truncated");
  free_pair(&p);
}

static void test_trailing_data_is_format_error(void **state) {
  idx_pair_t p;
  make_pair(&p, 5, 3, 3, 16);
  /* Both headers announce one sample fewer than the files hold. */
  put_be32(p.img + 4, 4);
  put_be32(p.lab + 4, 4);
  expect_load_error(*state, &p, 1, PX_ERR_FORMAT, 1, "unexpected data");
  p.lab_len -= 1; /* now only the image file has more */
  expect_load_error(*state, &p, 0, PX_ERR_FORMAT, 0, "unexpected data");
  free_pair(&p);
}

static void test_truncated_gzip_is_format_error(void **state) {
  fixture_t *f = *state;
  char ip[256], lp[256], tmp[256];
  path_in(f, "t-idx3-ubyte.gz", ip, sizeof ip);
  path_in(f, "t-idx1-ubyte.gz", lp, sizeof lp);
  path_in(f, "whole.gz", tmp, sizeof tmp);
  idx_pair_t p;
  make_pair(&p, 50, 10, 10, 17);
  write_gz(lp, p.lab, p.lab_len);
  write_gz(tmp, p.img, p.img_len);
  /* Copy all but the last 20 bytes of the compressed file (the gzip trailer
   * and the end of the deflate stream). */
  FILE *fp = fopen(tmp, "rb");
  assert_non_null(fp);
  uint8_t buf[8192];
  size_t len = fread(buf, 1, sizeof buf, fp);
  fclose(fp);
  assert_true(len > 40 && len < sizeof buf);
  write_plain(ip, buf, len - 20);
  px_dataset_t *ds = NULL;
  assert_error_names(px_dataset_load_idx(ip, lp, 10, 0, &ds), PX_ERR_FORMAT, ip, "truncated");
  /* Only the 8-byte trailer missing: the data is complete but the stream is not. */
  write_plain(ip, buf, len - 8);
  assert_error_names(px_dataset_load_idx(ip, lp, 10, 0, &ds), PX_ERR_FORMAT, ip, "gzip");
  assert_null(ds);
  free_pair(&p);
}

static void test_corrupt_gzip_is_format_error(void **state) {
  fixture_t *f = *state;
  char ip[256], lp[256];
  path_in(f, "c-idx3-ubyte.gz", ip, sizeof ip);
  path_in(f, "c-idx1-ubyte.gz", lp, sizeof lp);
  idx_pair_t p;
  make_pair(&p, 50, 10, 10, 18);
  write_gz(lp, p.lab, p.lab_len);
  /* A valid gzip header followed by a deflate block of the reserved type 3. */
  const uint8_t bad[] = {0x1f, 0x8b, 8, 0, 0, 0, 0, 0, 0, 3, 0x07, 0xff, 0xff, 0xff, 0xff};
  write_plain(ip, bad, sizeof bad);
  px_dataset_t *ds = NULL;
  assert_error_names(px_dataset_load_idx(ip, lp, 10, 0, &ds), PX_ERR_FORMAT, ip, "gzip");
  /* A valid stream whose CRC does not match its data. */
  write_gz(ip, p.img, p.img_len);
  FILE *fp = fopen(ip, "r+b");
  assert_non_null(fp);
  assert_int_equal(fseek(fp, -8, SEEK_END), 0);
  int c = fgetc(fp);
  assert_int_equal(fseek(fp, -8, SEEK_END), 0);
  fputc(c ^ 0x5a, fp);
  fclose(fp);
  assert_error_names(px_dataset_load_idx(ip, lp, 10, 0, &ds), PX_ERR_FORMAT, ip, "gzip");
  assert_null(ds);
  free_pair(&p);
}

static void test_gz_name_with_plain_content_is_format_error(void **state) {
  fixture_t *f = *state;
  char ip[256], lp[256];
  path_in(f, "p-idx3-ubyte.gz", ip, sizeof ip);
  path_in(f, "p-idx1-ubyte", lp, sizeof lp);
  idx_pair_t p;
  make_pair(&p, 3, 3, 3, 19);
  write_plain(ip, p.img, p.img_len);
  write_plain(lp, p.lab, p.lab_len);
  px_dataset_t *ds = NULL;
  assert_error_names(px_dataset_load_idx(ip, lp, 10, 0, &ds), PX_ERR_FORMAT, ip, "not gzip");
  free_pair(&p);
}

static void test_bad_arguments_are_invalid(void **state) {
  (void)state;
  px_dataset_t *ds = NULL;
  assert_int_equal(px_dataset_load_idx(NULL, "x", 10, 0, &ds), PX_ERR_INVALID);
  assert_int_equal(px_dataset_load_idx("x", "y", 0, 0, &ds), PX_ERR_INVALID);
  assert_int_equal(px_dataset_load_idx("x", "y", 10, -1, &ds), PX_ERR_INVALID);
  assert_int_equal(px_dataset_load_fashion_mnist(NULL, PX_SPLIT_TRAIN, &ds), PX_ERR_INVALID);
  assert_null(ds);
}

/* ---- the real data set ---- */

static void test_real_fashion_mnist_counts_dims_and_balance(void **state) {
  (void)state;
  if (access(REAL_FMNIST_DIR "/train-images-idx3-ubyte.gz", R_OK) != 0) skip();
  px_dataset_t *tr = NULL, *te = NULL;
  assert_int_equal(px_dataset_load_fashion_mnist(REAL_FMNIST_DIR, PX_SPLIT_TRAIN, &tr), PX_OK);
  assert_int_equal(px_dataset_load_fashion_mnist(REAL_FMNIST_DIR, PX_SPLIT_TEST, &te), PX_OK);
  const px_dataset_info_t *a = px_dataset_info(tr), *b = px_dataset_info(te);
  assert_int_equal(a->n, 60000);
  assert_int_equal(b->n, 10000);
  for (int k = 0; k < 2; k++) {
    const px_dataset_info_t *i = k ? b : a;
    assert_int_equal(i->channels, 1);
    assert_int_equal(i->height, 32);
    assert_int_equal(i->width, 32);
    assert_int_equal(i->num_classes, 10);
  }
  int64_t per_class[10] = {0};
  const uint8_t *lab = px_dataset_labels(tr);
  for (int64_t i = 0; i < a->n; i++) {
    assert_true(lab[i] < 10);
    per_class[lab[i]]++;
  }
  for (int c = 0; c < 10; c++) assert_int_equal(per_class[c], 6000);
  memset(per_class, 0, sizeof per_class);
  lab = px_dataset_labels(te);
  for (int64_t i = 0; i < b->n; i++) {
    assert_true(lab[i] < 10);
    per_class[lab[i]]++;
  }
  for (int c = 0; c < 10; c++) assert_int_equal(per_class[c], 1000);
  /* The two-pixel border is zero padding; the images themselves are not blank. */
  const uint8_t *img = px_dataset_images(tr);
  uint64_t inside = 0;
  for (int64_t i = 0; i < 100; i++) {
    const uint8_t *im = img + i * 1024;
    for (int y = 0; y < 32; y++) {
      for (int x = 0; x < 32; x++) {
        if (y < 2 || y >= 30 || x < 2 || x >= 30) {
          assert_int_equal(im[y * 32 + x], 0);
        } else {
          inside += im[y * 32 + x];
        }
      }
    }
  }
  assert_true(inside > 0);
  /* The first training and test items are both ankle boots (class 9). */
  assert_int_equal(px_dataset_labels(tr)[0], 9);
  assert_int_equal(px_dataset_labels(te)[0], 9);
  px_dataset_destroy(tr);
  px_dataset_destroy(te);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test_setup_teardown(test_idx_plain_reads_back_exactly, setup, teardown),
      cmocka_unit_test_setup_teardown(test_idx_gzip_reads_back_exactly_with_padding, setup,
                                      teardown),
      cmocka_unit_test_setup_teardown(test_idx_many_images_cross_read_chunks, setup, teardown),
      cmocka_unit_test_setup_teardown(test_fmnist_dir_pads_to_32_and_sets_constants, setup,
                                      teardown),
      cmocka_unit_test_setup_teardown(test_fmnist_prefers_gz_when_both_exist, setup, teardown),
      cmocka_unit_test_setup_teardown(test_missing_file_is_io_error_naming_it, setup, teardown),
      cmocka_unit_test_setup_teardown(test_bad_magic_is_format_error, setup, teardown),
      cmocka_unit_test_setup_teardown(test_wrong_dims_are_format_errors, setup, teardown),
      cmocka_unit_test_setup_teardown(test_label_out_of_range_is_format_error, setup, teardown),
      cmocka_unit_test_setup_teardown(test_count_mismatch_names_both_files, setup, teardown),
      cmocka_unit_test_setup_teardown(test_truncated_plain_is_format_error, setup, teardown),
      cmocka_unit_test_setup_teardown(test_header_announcing_huge_count_fails_as_truncated, setup,
                                      teardown),
      cmocka_unit_test_setup_teardown(test_trailing_data_is_format_error, setup, teardown),
      cmocka_unit_test_setup_teardown(test_truncated_gzip_is_format_error, setup, teardown),
      cmocka_unit_test_setup_teardown(test_corrupt_gzip_is_format_error, setup, teardown),
      cmocka_unit_test_setup_teardown(test_gz_name_with_plain_content_is_format_error, setup,
                                      teardown),
      cmocka_unit_test_setup_teardown(test_bad_arguments_are_invalid, setup, teardown),
      cmocka_unit_test_setup_teardown(test_real_fashion_mnist_counts_dims_and_balance, setup,
                                      teardown),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
