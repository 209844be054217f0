/* Image folders: the decoder against OpenCV (tests/image_fixture.py writes
 * PNG and JPEG files with python3-opencv and what OpenCV decodes from them),
 * corrupt and oversized files named and skipped, layout refusals (missing
 * split, empty class, unmatched class), the cache (built once, mapped after,
 * rebuilt when the file list changes or the cache is damaged, built once by
 * concurrent processes), the random-resized crop against a plain bilinear
 * reference, and the loader sharding a folder across ranks. Skips without
 * /usr/bin/python3 and python3-opencv. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <fcntl.h>
#include <ftw.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "prunex/data.h"
#include "prunex/jobspec.h"
#include "prunex/jobspec_translate.h"
#include "px_test_util.h"

#define PY "/usr/bin/python3"

static char fxdir[64]; /* OpenCV fixtures */
static char root[64]; /* scratch folders */

static int rm_entry(const char *path, const struct stat *sb, int flag, struct FTW *ftw) {
  (void)sb;
  (void)flag;
  (void)ftw;
  return remove(path);
}

static void rm_tree(const char *dir) { nftw(dir, rm_entry, 16, FTW_DEPTH | FTW_PHYS); }

static int group_setup(void **state) {
  (void)state;
  snprintf(fxdir, sizeof fxdir, "/tmp/px_folder_fx_XXXXXX");
  snprintf(root, sizeof root, "/tmp/px_folder_XXXXXX");
  if (!mkdtemp(fxdir) || !mkdtemp(root)) return -1;
  char cmd[512];
  snprintf(cmd, sizeof cmd, "%s/tests/image_fixture.py %s >/dev/null 2>&1", PX_SOURCE_DIR, fxdir);
  if (px_test_py(cmd) != 0) fxdir[0] = '\0'; /* tests that need OpenCV skip */
  return 0;
}

static int group_teardown(void **state) {
  (void)state;
  if (fxdir[0]) rm_tree(fxdir);
  rm_tree(root);
  return 0;
}

static void need_fixtures(void) {
  if (!fxdir[0]) {
    print_message("needs " PY " with python3-opencv and numpy (scripts/bootstrap)\n");
    skip();
  }
}

static uint8_t *read_all(const char *path, size_t *len) {
  uint8_t *b = (uint8_t *)px_test_read_file(path, len);
  assert_non_null(b);
  return b;
}

static void write_bytes(const char *path, const void *p, size_t n) {
  FILE *f = fopen(path, "wb");
  assert_non_null(f);
  assert_int_equal(fwrite(p, 1, n, f), n);
  fclose(f);
}

static void copy_file(const char *from, const char *to) {
  size_t n;
  uint8_t *b = read_all(from, &n);
  write_bytes(to, b, n);
  free(b);
}

/* Decodes fx/NAME.ext at (channels, size) and compares with OpenCV's
 * reference NAME.c<ch>s<refsize>.raw: the largest difference. */
static int decode_vs_opencv(const char *file, int channels, int size, int refsize) {
  char path[256], refp[256], base[64];
  snprintf(path, sizeof path, "%s/%s", fxdir, file);
  snprintf(base, sizeof base, "%s", file);
  *strrchr(base, '.') = '\0';
  snprintf(refp, sizeof refp, "%s/%s.c%ds%d.raw", fxdir, base, channels, refsize);
  size_t rn;
  uint8_t *ref = read_all(refp, &rn);
  assert_int_equal(rn, (size_t)channels * size * size);
  uint8_t *got = malloc(rn);
  px_image_decoder_t *d;
  assert_int_equal(px_image_decoder_create(&d), PX_OK);
  assert_int_equal(px_image_decode_file(d, path, channels, size, got), PX_OK);
  assert_string_equal(px_image_decoder_reason(d), "");
  int worst = 0;
  for (size_t i = 0; i < rn; i++) {
    int diff = abs((int)got[i] - (int)ref[i]);
    if (diff > worst) worst = diff;
  }
  px_image_decoder_destroy(d);
  free(got);
  free(ref);
  return worst;
}

static void png_and_jpeg_decode_as_opencv_does(void **state) {
  (void)state;
  need_fixtures();
  /* lossless PNG at its own size: exact, colour, grey and either way round */
  assert_int_equal(decode_vs_opencv("rgb40.png", 3, 40, 0), 0);
  assert_int_equal(decode_vs_opencv("grey24.png", 1, 24, 0), 0);
  assert_int_equal(decode_vs_opencv("grey24.png", 3, 24, 0), 0);
  /* colour to grey: OpenCV's BT.601 weights, rounding may differ by one */
  assert_true(decode_vs_opencv("rgb40.png", 1, 40, 0) <= 1);
  /* JPEG through the same libjpeg-turbo: identical pixels */
  assert_int_equal(decode_vs_opencv("smooth.jpg", 3, 64, 0), 0);
  assert_int_equal(decode_vs_opencv("smooth.jpg", 1, 64, 0), 0);
  assert_int_equal(decode_vs_opencv("grey.jpg", 1, 64, 0), 0);
}

static void resize_and_centre_crop_match_opencv(void **state) {
  (void)state;
  need_fixtures();
  /* shrinking by 2: INTER_AREA averages 2x2 blocks; OpenCV rounds in fixed
   * point, we in float: one level at most */
  assert_true(decode_vs_opencv("rgb40.png", 3, 20, 20) <= 1);
  /* enlarging by 2: INTER_LINEAR (11-bit fixed-point weights in OpenCV) */
  assert_true(decode_vs_opencv("grey24.png", 1, 48, 48) <= 1);
  /* 64x32 to 16: shorter side to 16, centre 16x16 of 32x16 */
  assert_true(decode_vs_opencv("wide.png", 3, 16, 16) <= 1);
  /* JPEG at half size: libjpeg-turbo's scaled IDCT (1/2) instead of a full
   * decode and an area average: close, not identical */
  assert_true(decode_vs_opencv("smooth.jpg", 3, 32, 32) <= 8);
}

static void corrupt_and_oversized_files_are_refused_with_a_reason(void **state) {
  (void)state;
  need_fixtures();
  px_image_decoder_t *d;
  assert_int_equal(px_image_decoder_create(&d), PX_OK);
  uint8_t out[3 * 8 * 8];
  char path[256];
  size_t n;
  snprintf(path, sizeof path, "%s/smooth.jpg", fxdir);
  uint8_t *jpg = read_all(path, &n);
  /* truncated JPEG */
  assert_int_equal(px_image_decode(d, jpg, n / 2, 3, 8, out), PX_ERR_FORMAT);
  assert_non_null(strstr(px_image_decoder_reason(d), "JPEG"));
  /* neither format */
  assert_int_equal(px_image_decode(d, (const uint8_t *)"hello, world", 12, 3, 8, out),
                   PX_ERR_FORMAT);
  assert_non_null(strstr(px_image_decoder_reason(d), "not a JPEG or PNG"));
  assert_int_equal(px_image_decode(d, NULL, 0, 3, 8, out), PX_ERR_FORMAT);
  /* a PNG whose header claims 100000 x 100000 pixels: refused before any
   * memory is sized from it (the CRC of IHDR is not checked first) */
  snprintf(path, sizeof path, "%s/grey24.png", fxdir);
  free(jpg);
  uint8_t *png = read_all(path, &n);
  uint8_t big[4] = {0x00, 0x01, 0x86, 0xA0};
  memcpy(png + 16, big, 4);
  memcpy(png + 20, big, 4);
  px_status_t st = px_image_decode(d, png, n, 1, 8, out);
  assert_int_equal(st, PX_ERR_FORMAT);
  /* a PNG cut in its image data */
  free(png);
  png = read_all(path, &n);
  assert_int_equal(px_image_decode(d, png, n - 40, 1, 8, out), PX_ERR_FORMAT);
  assert_non_null(strstr(px_image_decoder_reason(d), "PNG"));
  /* a missing file is an I/O error naming it */
  assert_int_equal(px_image_decode_file(d, "/nonexistent/x.png", 1, 8, out), PX_ERR_IO);
  assert_non_null(strstr(px_last_error(), "/nonexistent/x.png"));
  /* size and channels are checked */
  assert_int_equal(px_image_decode(d, png, n, 2, 8, out), PX_ERR_INVALID);
  assert_int_equal(px_image_decode(d, png, n, 1, 0, out), PX_ERR_INVALID);
  free(png);
  px_image_decoder_destroy(d);
}

/* root/NAME/{train,val}/{a,b,c}/ with `per` copies of the fixture PNGs and
 * JPEGs in each. */
static void make_folder(char *dir, size_t cap, const char *name, int per) {
  snprintf(dir, cap, "%s/%s", root, name);
  rm_tree(dir);
  char p[512];
  mkdir(dir, 0755);
  const char *splits[2] = {"train", "val"}, *classes[3] = {"a", "b", "c"};
  const char *src[3] = {"rgb40.png", "smooth.jpg", "grey24.png"};
  for (int s = 0; s < 2; s++) {
    snprintf(p, sizeof p, "%s/%s", dir, splits[s]);
    mkdir(p, 0755);
    for (int c = 0; c < 3; c++) {
      snprintf(p, sizeof p, "%s/%s/%s", dir, splits[s], classes[c]);
      mkdir(p, 0755);
      for (int i = 0; i < per; i++) {
        char from[256];
        snprintf(from, sizeof from, "%s/%s", fxdir, src[(c + i) % 3]);
        snprintf(p, sizeof p, "%s/%s/%s/%02d%s", dir, splits[s], classes[c], i,
                 strrchr(src[(c + i) % 3], '.'));
        copy_file(from, p);
      }
    }
  }
}

static void layout_errors_are_refused_naming_the_directory(void **state) {
  (void)state;
  need_fixtures();
  char dir[256], p[512];
  int32_t classes = 0;
  int64_t files = 0;
  make_folder(dir, sizeof dir, "layout", 2);
  assert_int_equal(px_folder_check(dir, &classes, &files), PX_OK);
  assert_int_equal(classes, 3);
  assert_int_equal(files, 6);
  /* an empty class in val/ */
  snprintf(p, sizeof p, "%s/val/b/00.jpg", dir);
  assert_int_equal(unlink(p), 0);
  snprintf(p, sizeof p, "%s/val/b/01.png", dir);
  assert_int_equal(unlink(p), 0);
  snprintf(p, sizeof p, "%s/val/b/notes.txt", dir); /* other files do not count */
  write_bytes(p, "x", 1);
  assert_int_equal(px_folder_check(dir, NULL, NULL), PX_ERR_FORMAT);
  assert_non_null(strstr(px_last_error(), "val/b"));
  assert_non_null(strstr(px_last_error(), "empty class"));
  /* a class of val/ that train/ lacks */
  make_folder(dir, sizeof dir, "layout", 1);
  snprintf(p, sizeof p, "%s/val/zebra", dir);
  mkdir(p, 0755);
  assert_int_equal(px_folder_check(dir, NULL, NULL), PX_ERR_FORMAT);
  assert_non_null(strstr(px_last_error(), "zebra"));
  /* a missing split */
  make_folder(dir, sizeof dir, "layout", 1);
  snprintf(p, sizeof p, "%s/val", dir);
  rm_tree(p);
  assert_int_equal(px_folder_check(dir, NULL, NULL), PX_ERR_FORMAT);
  assert_non_null(strstr(px_last_error(), "/val"));
  px_folder_config_t fc = {dir, PX_SPLIT_TRAIN, 3, 8, NULL, NULL, 0, NULL, 0};
  px_dataset_t *ds = NULL;
  assert_int_equal(px_dataset_load_folder(&fc, NULL, &ds), PX_ERR_FORMAT);
  assert_null(ds);
  /* the job spec check that pxctl submit runs */
  Prunex__V1__JobSpec *spec;
  char yaml[512];
  snprintf(yaml, sizeof yaml,
           "strategy: ddp\nmodel: {name: resnet20}\ndataset: {name: folder, path: %s}\n"
           "cluster: {nodes: 1, workers_per_node: 1, device: cpu}\n", dir);
  assert_int_equal(px_jobspec_parse_string(yaml, strlen(yaml), "t.yaml", &spec), PX_OK);
  assert_int_equal(px_jobspec_check_data(spec), PX_ERR_FORMAT);
  assert_non_null(strstr(px_last_error(), "/val"));
  px_jobspec_free(spec);
  make_folder(dir, sizeof dir, "layout", 1);
  snprintf(yaml, sizeof yaml,
           "strategy: ddp\nmodel: {name: resnet20, num_classes: 10}\n"
           "dataset: {name: folder, path: %s}\n"
           "cluster: {nodes: 1, workers_per_node: 1, device: cpu}\n", dir);
  assert_int_equal(px_jobspec_parse_string(yaml, strlen(yaml), "t.yaml", &spec), PX_OK);
  assert_int_equal(px_jobspec_check_data(spec), PX_ERR_INVALID);
  assert_non_null(strstr(px_last_error(), "3 classes"));
  px_jobspec_free(spec);
  /* a spec file's derived iteration count counts the folder's training
   * images (3 here: 3 steps of batch 1 per epoch, one step per iteration)
   * and records the count; completed from the wire (pxctl submit --nodes,
   * the coordinator) it derives from that count, never from a default, and
   * without a count it is refused, not guessed */
  snprintf(yaml, sizeof yaml,
           "strategy: hsadmm\nmodel: {name: resnet20}\ndataset: {name: folder, path: %s}\n"
           "cluster: {nodes: 1, workers_per_node: 1, device: cpu}\n"
           "train: {batch_size: 1, local_steps: 1, epochs: 1}\n", dir);
  assert_int_equal(px_jobspec_parse_string(yaml, strlen(yaml), "t.yaml", &spec), PX_OK);
  assert_int_equal(spec->admm->max_iterations, 3);
  assert_int_equal(spec->dataset->train_samples, 3);
  char budget[400];
  assert_int_equal(px_jobspec_budget_text(spec, budget, sizeof budget), 1);
  assert_string_equal(budget, "3 iterations, derived: 1 epoch of 3 training images over 1 node "
                              "x 1 worker, batch 1, 1 local step per iteration");
  spec->admm->max_iterations = 0;
  spec->train->epochs = 4;
  assert_int_equal(px_jobspec_fill_defaults(spec), PX_OK);
  assert_int_equal(spec->admm->max_iterations, 12);
  spec->admm->max_iterations = 5; /* given: not derived */
  assert_int_equal(px_jobspec_budget_text(spec, budget, sizeof budget), 0);
  assert_string_equal(budget, "");
  spec->admm->max_iterations = 0;
  spec->dataset->train_samples = 0;
  assert_int_equal(px_jobspec_fill_defaults(spec), PX_ERR_INVALID);
  assert_non_null(strstr(px_last_error(), "admm.max_iterations: not given and not derivable"));
  assert_non_null(strstr(px_last_error(), dir));
  px_jobspec_free(spec);
  /* no path at all is a spec error */
  const char *nopath = "strategy: ddp\nmodel: {name: resnet20}\ndataset: {name: folder}\n"
                       "cluster: {nodes: 1, workers_per_node: 1, device: cpu}\n";
  assert_int_equal(px_jobspec_parse_string(nopath, strlen(nopath), "t.yaml", &spec),
                   PX_ERR_INVALID);
  assert_non_null(strstr(px_last_error(), "dataset.path"));
}

/* Rewrites the cache at path as version 1 (the version field at byte 8),
 * whose decoder lost good JPEGs after a bad one. */
static void mark_cache_version_1(const char *path) {
  uint32_t v1 = 1;
  int fd = open(path, O_WRONLY);
  assert_true(fd >= 0);
  assert_int_equal(pwrite(fd, &v1, sizeof v1, 8), (ssize_t)sizeof v1);
  close(fd);
}

static void corrupt_images_are_skipped_and_counted(void **state) {
  (void)state;
  need_fixtures();
  char dir[256], p[512];
  make_folder(dir, sizeof dir, "corrupt", 3);
  snprintf(p, sizeof p, "%s/train/a/90.jpg", dir);
  write_bytes(p, "\xff\xd8\xff\xe0 not really", 15);
  snprintf(p, sizeof p, "%s/train/b/91.png", dir);
  write_bytes(p, "", 0);
  snprintf(p, sizeof p, "%s/train/c/92.png", dir);
  write_bytes(p, "\x89PNG\r\n\x1a\n garbage", 16);
  px_folder_config_t fc = {dir, PX_SPLIT_TRAIN, 3, 16, NULL, NULL, 0.25, NULL, 0};
  px_folder_report_t rep;
  memset(&rep, 0xff, sizeof rep); /* every field is set: a cached split is not streamed */
  px_dataset_t *ds;
  assert_int_equal(px_dataset_load_folder(&fc, &rep, &ds), PX_OK);
  assert_int_equal(rep.streamed, 0);
  assert_int_equal(rep.files, 12);
  assert_int_equal(rep.skipped, 3);
  assert_int_equal(rep.built, 1);
  assert_int_equal(px_dataset_info(ds)->n, 9);
  assert_int_equal(px_dataset_info(ds)->num_classes, 3);
  /* labels follow the sorted classes, files in name order */
  const uint8_t *labels = px_dataset_labels(ds);
  for (int i = 0; i < 9; i++) assert_int_equal(labels[i], i / 3);
  px_dataset_destroy(ds);
  /* the count survives in the cache */
  assert_int_equal(px_dataset_load_folder(&fc, &rep, &ds), PX_OK);
  assert_int_equal(rep.built, 0);
  assert_int_equal(rep.skipped, 3);
  px_dataset_destroy(ds);
  /* a version 1 cache (its decoder lost good JPEGs after a bad one) that
   * skipped images is rebuilt */
  mark_cache_version_1(rep.cache_path);
  assert_int_equal(px_dataset_load_folder(&fc, &rep, &ds), PX_OK);
  assert_int_equal(rep.built, 1);
  px_dataset_destroy(ds);
}

static uint64_t dataset_hash(const px_dataset_t *ds) {
  const px_dataset_info_t *in = px_dataset_info(ds);
  size_t img = (size_t)in->channels * in->height * in->width;
  return px_test_fnv64(px_dataset_images(ds), (size_t)in->n * img) ^
         px_test_fnv64(px_dataset_labels(ds), (size_t)in->n);
}

static void the_cache_is_built_once_and_rebuilt_when_stale(void **state) {
  (void)state;
  need_fixtures();
  char dir[256], p[512];
  make_folder(dir, sizeof dir, "cache", 4);
  px_folder_config_t fc = {dir, PX_SPLIT_TEST, 1, 12, NULL, NULL, 0, NULL, 0};
  px_folder_report_t rep;
  px_dataset_t *a, *b;
  assert_int_equal(px_dataset_load_folder(&fc, &rep, &a), PX_OK);
  assert_int_equal(rep.built, 1);
  assert_non_null(strstr(rep.cache_path, "/.prunex-cache/val-1x12x12.pxc"));
  /* what was cached is what the decoder gives */
  px_image_decoder_t *d;
  assert_int_equal(px_image_decoder_create(&d), PX_OK);
  uint8_t img[144];
  snprintf(p, sizeof p, "%s/val/b/00.jpg", dir); /* sample 4: class b's first file */
  assert_int_equal(px_image_decode_file(d, p, 1, 12, img), PX_OK);
  assert_memory_equal(px_dataset_images(a) + 4 * 144, img, 144);
  px_image_decoder_destroy(d);
  assert_int_equal(px_dataset_load_folder(&fc, &rep, &b), PX_OK);
  assert_int_equal(rep.built, 0);
  assert_int_equal(dataset_hash(a), dataset_hash(b));
  px_dataset_destroy(b);
  /* a version 1 cache that skipped nothing is still good */
  mark_cache_version_1(rep.cache_path);
  assert_int_equal(px_dataset_load_folder(&fc, &rep, &b), PX_OK);
  assert_int_equal(rep.built, 0);
  px_dataset_destroy(b);
  /* a changed file list (a new image) makes the cache stale */
  snprintf(p, sizeof p, "%s/val/c/zz.png", dir);
  char from[256];
  snprintf(from, sizeof from, "%s/rgb40.png", fxdir);
  copy_file(from, p);
  assert_int_equal(px_dataset_load_folder(&fc, &rep, &b), PX_OK);
  assert_int_equal(rep.built, 1);
  assert_int_equal(px_dataset_info(b)->n, 13);
  px_dataset_destroy(b);
  /* a truncated cache is rebuilt, not trusted; the old mapping stays valid */
  truncate(rep.cache_path, 200);
  assert_int_equal(px_dataset_load_folder(&fc, &rep, &b), PX_OK);
  assert_int_equal(rep.built, 1);
  assert_int_equal(px_dataset_info(b)->n, 13);
  assert_int_equal(px_dataset_info(a)->n, 12);
  px_dataset_destroy(b);
  px_dataset_destroy(a);
  /* an explicit cache directory */
  char cdir[300];
  snprintf(cdir, sizeof cdir, "%s/elsewhere", root);
  fc.cache_dir = cdir;
  assert_int_equal(px_dataset_load_folder(&fc, &rep, &b), PX_OK);
  assert_int_equal(rep.built, 1);
  assert_int_equal(strncmp(rep.cache_path, cdir, strlen(cdir)), 0);
  px_dataset_destroy(b);
}

static void concurrent_ranks_decode_once(void **state) {
  (void)state;
  need_fixtures();
  char dir[256];
  make_folder(dir, sizeof dir, "ranks", 20);
  enum { NPROC = 4 };
  pid_t pids[NPROC];
  for (int r = 0; r < NPROC; r++) {
    pids[r] = fork();
    assert_true(pids[r] >= 0);
    if (pids[r] == 0) {
      px_folder_config_t fc = {dir, PX_SPLIT_TRAIN, 3, 24, NULL, NULL, 0, NULL, 0};
      px_folder_report_t rep;
      px_dataset_t *ds;
      if (px_dataset_load_folder(&fc, &rep, &ds) != PX_OK) _exit(100);
      int code = (rep.built ? 1 : 0) | (px_dataset_info(ds)->n == 60 ? 2 : 0);
      _exit(code | (int)((dataset_hash(ds) & 0xf) << 2));
    }
  }
  int built = 0, hash = -1;
  for (int r = 0; r < NPROC; r++) {
    int status;
    assert_int_equal(waitpid(pids[r], &status, 0), pids[r]);
    assert_true(WIFEXITED(status));
    int code = WEXITSTATUS(status);
    assert_true(code != 100);
    assert_true(code & 2);
    built += code & 1;
    if (hash < 0) hash = code >> 2;
    assert_int_equal(code >> 2, hash);
  }
  assert_int_equal(built, 1);
}

/* Plain bilinear sample of plane s (w x h) at (fx, fy), borders clamped. */
static double bilinear_ref(const uint8_t *s, int w, int h, double fx, double fy) {
  fx = fx < 0 ? 0 : fx;
  fy = fy < 0 ? 0 : fy;
  int x0 = (int)fx < w - 1 ? (int)fx : w - 1, y0 = (int)fy < h - 1 ? (int)fy : h - 1;
  int x1 = x0 + 1 < w ? x0 + 1 : w - 1, y1 = y0 + 1 < h ? y0 + 1 : h - 1;
  double ax = fmin(fx - x0, 1.0), ay = fmin(fy - y0, 1.0);
  double top = s[y0 * w + x0] * (1 - ax) + s[y0 * w + x1] * ax;
  double bot = s[y1 * w + x0] * (1 - ax) + s[y1 * w + x1] * ax;
  return top * (1 - ay) + bot * ay;
}

static void random_resized_crop_matches_a_plain_reference(void **state) {
  (void)state;
  enum { C = 3, H = 20, W = 20, N = 64 };
  px_dataset_info_t info;
  memset(&info, 0, sizeof info);
  info.n = N;
  info.channels = C;
  info.height = H;
  info.width = W;
  info.num_classes = 10;
  for (int c = 0; c < C; c++) {
    info.mean[c] = 0.5f;
    info.std[c] = 0.25f;
  }
  px_dataset_t *ds;
  assert_int_equal(px_dataset_create_synthetic(&info, 7, &ds), PX_OK);
  px_augment_t aug = {.crop_pad = 0, .flip = 1, .rrc_scale = 0.3f};
  uint32_t idx[N];
  for (int i = 0; i < N; i++) idx[i] = (uint32_t)i;
  float *x = malloc(sizeof(float) * N * C * H * W);
  int32_t y[N];
  assert_int_equal(px_data_fill_batch(ds, idx, N, &aug, info.mean, info.std, 11, 3, x, y), PX_OK);
  int flips = 0, smaller = 0;
  double worst = 0;
  for (int i = 0; i < N; i++) {
    px_crop_flip_t cf, again;
    px_augment_choose(&aug, 11, 3, i, &cf);
    px_augment_choose(&aug, 11, 3, i, &again);
    assert_memory_equal(&cf, &again, sizeof cf); /* a pure function */
    double area = cf.rect.w * cf.rect.h;
    assert_true(area >= 0.3 - 1e-9 && area <= 1.0 + 1e-9);
    assert_true(cf.rect.x >= 0 && cf.rect.y >= 0 && cf.rect.x + cf.rect.w <= 1 + 1e-9 &&
                cf.rect.y + cf.rect.h <= 1 + 1e-9);
    double ar = (cf.rect.w * W) / (cf.rect.h * H);
    if (area < 1.0) assert_true(ar >= 0.75 - 1e-9 && ar <= 4.0 / 3.0 + 1e-9);
    flips += cf.flip;
    smaller += area < 0.999;
    const uint8_t *img = px_dataset_images(ds) + (size_t)i * C * H * W;
    for (int c = 0; c < C; c++) {
      for (int oy = 0; oy < H; oy++) {
        for (int ox = 0; ox < W; ox++) {
          int tx = cf.flip ? W - 1 - ox : ox;
          double fx = cf.rect.x * W + (tx + 0.5) * (cf.rect.w * W) / W - 0.5;
          double fy = cf.rect.y * H + (oy + 0.5) * (cf.rect.h * H) / H - 0.5;
          double want = (bilinear_ref(img + c * H * W, W, H, fx, fy) / 255.0 - 0.5) / 0.25;
          double got = x[((size_t)i * C + c) * H * W + oy * W + ox];
          if (fabs(got - want) > worst) worst = fabs(got - want);
        }
      }
    }
  }
  assert_true(worst < 1e-4);
  assert_true(flips > 10 && flips < 54);
  assert_true(smaller > 50);
  /* another epoch, other crops */
  px_crop_flip_t e3, e4;
  int same = 0;
  for (int i = 0; i < N; i++) {
    px_augment_choose(&aug, 11, 3, i, &e3);
    px_augment_choose(&aug, 11, 4, i, &e4);
    same += e3.rect.x == e4.rect.x && e3.rect.w == e4.rect.w;
  }
  assert_true(same < 4);
  free(x);
  px_dataset_destroy(ds);
}

static void ranks_shard_a_mapped_folder(void **state) {
  (void)state;
  need_fixtures();
  char dir[256];
  make_folder(dir, sizeof dir, "shard", 5);
  px_folder_config_t fc = {dir, PX_SPLIT_TRAIN, 3, 16, NULL, NULL, 0, NULL, 0};
  px_dataset_t *ds;
  assert_int_equal(px_dataset_load_folder(&fc, NULL, &ds), PX_OK);
  int seen[15] = {0};
  for (int r = 0; r < 2; r++) {
    px_loader_config_t lc;
    px_loader_config_eval(ds, &lc);
    lc.batch_size = 4;
    lc.rank = r;
    lc.world_size = 2;
    px_loader_t *l;
    assert_int_equal(px_loader_create(ds, &lc, &l), PX_OK);
    assert_int_equal(px_loader_num_samples(l), r == 0 ? 8 : 7);
    assert_int_equal(px_loader_begin_epoch(l, 0), PX_OK);
    px_batch_t b;
    int k = r == 0 ? 0 : 8;
    while (px_loader_next(l, &b) == 1) {
      for (int i = 0; i < b.n; i++) {
        assert_int_equal(b.y[i], px_dataset_labels(ds)[k]);
        seen[k++]++;
      }
    }
    px_loader_destroy(l);
  }
  for (int i = 0; i < 15; i++) assert_int_equal(seen[i], 1);
  px_dataset_destroy(ds);
}

/* ---- links out of the data root, decoder recovery, max_skipped ------------ */

/* Runs load with stderr (the library's log, its warnings on even under
 * ctest's PX_LOG_LEVEL=error) in log[cap]. */
static px_status_t load_logged(const px_folder_config_t *fc, px_folder_report_t *rep,
                               px_dataset_t **ds, char *log, size_t cap) {
  px_log_level_t level = px_log_get_level();
  px_log_set_level(PX_LOG_WARN);
  char path[128];
  snprintf(path, sizeof path, "%s/stderr.log", root);
  fflush(stderr);
  int saved = dup(2), fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, 0600);
  assert_true(saved >= 0 && fd >= 0);
  dup2(fd, 2);
  close(fd);
  px_status_t st = px_dataset_load_folder(fc, rep, ds);
  fflush(stderr);
  dup2(saved, 2);
  close(saved);
  px_log_set_level(level);
  size_t n;
  char *s = px_test_read_file(path, &n);
  assert_non_null(s);
  snprintf(log, cap, "%s", s);
  free(s);
  return st;
}

/* 1 when the decoded image `file` (at channels, size) is one of ds's images. */
static int holds_image_of(const px_dataset_t *ds, const char *file, int channels, int size) {
  size_t img = (size_t)channels * size * size;
  uint8_t *want = malloc(img);
  px_image_decoder_t *d;
  assert_int_equal(px_image_decoder_create(&d), PX_OK);
  assert_int_equal(px_image_decode_file(d, file, channels, size, want), PX_OK);
  px_image_decoder_destroy(d);
  int found = 0;
  for (int64_t i = 0; i < px_dataset_info(ds)->n && !found; i++)
    found = !memcmp(px_dataset_images(ds) + (size_t)i * img, want, img);
  free(want);
  return found;
}

/* The issue: a link in a folder under --data-root led out of it, the
 * outside image's pixels went into the cache (0644) and a non-image's size
 * into the log. Links out are now skipped by name, their targets never
 * opened; links that stay inside the root still work. */
static void a_link_out_of_the_data_root_is_refused_by_name_only(void **state) {
  (void)state;
  need_fixtures();
  char droot[128], dir[256], p[512], t[512], secret[128], log[16384];
  snprintf(droot, sizeof droot, "%s/droot", root);
  snprintf(secret, sizeof secret, "%s/secret", root);
  rm_tree(droot);
  rm_tree(secret);
  mkdir(droot, 0755);
  mkdir(secret, 0755);
  /* outside the root: an image and a non-image of 1401 bytes */
  snprintf(t, sizeof t, "%s/wide.png", fxdir);
  snprintf(p, sizeof p, "%s/private.png", secret);
  copy_file(t, p);
  char text[1401];
  memset(text, 'x', sizeof text);
  snprintf(p, sizeof p, "%s/passwd", secret);
  write_bytes(p, text, sizeof text);
  /* inside the root, outside the folder: a pool that links may use */
  snprintf(p, sizeof p, "%s/pool", droot);
  mkdir(p, 0755);
  snprintf(t, sizeof t, "%s/grey.jpg", fxdir);
  snprintf(p, sizeof p, "%s/pool/shared.jpg", droot);
  copy_file(t, p);
  make_folder(dir, sizeof dir, "droot/links", 3);
  snprintf(p, sizeof p, "%s/train/a/zz_abs.png", dir);
  snprintf(t, sizeof t, "%s/private.png", secret);
  assert_int_equal(symlink(t, p), 0);
  snprintf(p, sizeof p, "%s/train/b/zz_rel.png", dir);
  assert_int_equal(symlink("../../../../secret/private.png", p), 0);
  snprintf(p, sizeof p, "%s/train/c/passwd.png", dir);
  snprintf(t, sizeof t, "%s/passwd", secret);
  assert_int_equal(symlink(t, p), 0);
  snprintf(p, sizeof p, "%s/train/c/zz_in_abs.jpg", dir);
  snprintf(t, sizeof t, "%s/pool/shared.jpg", droot);
  assert_int_equal(symlink(t, p), 0);
  snprintf(p, sizeof p, "%s/train/c/zz_in_rel.jpg", dir);
  assert_int_equal(symlink("../../../pool/shared.jpg", p), 0);

  px_folder_config_t fc = {dir, PX_SPLIT_TRAIN, 3, 16, NULL, droot, 1.0, NULL, 0};
  px_folder_report_t rep;
  px_dataset_t *ds;
  assert_int_equal(load_logged(&fc, &rep, &ds, log, sizeof log), PX_OK);
  assert_int_equal(rep.files, 14);
  assert_int_equal(rep.skipped, 3);
  assert_int_equal(px_dataset_info(ds)->n, 11);
  assert_non_null(strstr(log, "a/zz_abs.png: a link that leads outside the data root"));
  assert_non_null(strstr(log, "b/zz_rel.png: a link that leads outside the data root"));
  assert_non_null(strstr(log, "c/passwd.png: a link that leads outside the data root"));
  assert_null(strstr(log, "1401"));
  assert_null(strstr(log, "not a JPEG or PNG"));
  assert_null(strstr(log, "secret"));
  /* the outside pixels are nowhere in the cache; the linked pool image is */
  snprintf(p, sizeof p, "%s/private.png", secret);
  assert_false(holds_image_of(ds, p, 3, 16));
  snprintf(p, sizeof p, "%s/pool/shared.jpg", droot);
  assert_true(holds_image_of(ds, p, 3, 16));
  px_dataset_destroy(ds);
  /* the cache and its lock are the agent's user's alone */
  struct stat sb;
  assert_int_equal(stat(rep.cache_path, &sb), 0);
  assert_int_equal(sb.st_mode & 0777, 0600);
  char lock[sizeof rep.cache_path + 8];
  snprintf(lock, sizeof lock, "%s.lock", rep.cache_path);
  assert_int_equal(stat(lock, &sb), 0);
  assert_int_equal(sb.st_mode & 0777, 0600);
  snprintf(p, sizeof p, "%s/.prunex-cache", dir);
  assert_int_equal(stat(p, &sb), 0);
  assert_int_equal(sb.st_mode & 0777, 0700);
  /* a .prunex-cache that is a link is not written through */
  char elsewhere[300];
  snprintf(elsewhere, sizeof elsewhere, "%s/elsewhere-cache", root);
  mkdir(elsewhere, 0755);
  snprintf(p, sizeof p, "%s/.prunex-cache", dir);
  rm_tree(p);
  assert_int_equal(symlink(secret, p), 0);
  setenv("XDG_CACHE_HOME", elsewhere, 1);
  assert_int_equal(load_logged(&fc, &rep, &ds, log, sizeof log), PX_OK);
  unsetenv("XDG_CACHE_HOME");
  assert_int_equal(strncmp(rep.cache_path, elsewhere, strlen(elsewhere)), 0);
  px_dataset_destroy(ds);
  unlink(p);
  /* no root (pxtrain, pxctl run): the folder is the root, the pool is out */
  fc.root = NULL;
  fc.split = PX_SPLIT_TEST;
  snprintf(p, sizeof p, "%s/val/a/zz_pool.jpg", dir);
  snprintf(t, sizeof t, "%s/pool/shared.jpg", droot);
  assert_int_equal(symlink(t, p), 0);
  assert_int_equal(load_logged(&fc, &rep, &ds, log, sizeof log), PX_OK);
  assert_int_equal(rep.skipped, 1);
  assert_non_null(strstr(log, "a/zz_pool.jpg: a link that leads outside the data root"));
  px_dataset_destroy(ds);
  /* a class directory that leads out fails the load, naming it */
  snprintf(p, sizeof p, "%s/train/d", dir);
  assert_int_equal(symlink(secret, p), 0);
  fc.root = droot;
  fc.split = PX_SPLIT_TRAIN;
  assert_int_equal(load_logged(&fc, &rep, &ds, log, sizeof log), PX_ERR_FORMAT);
  assert_non_null(strstr(px_last_error(), "train/d: a link that leads outside the data root"));
  /* a folder not under its root is refused */
  fc.root = secret;
  assert_int_equal(px_dataset_load_folder(&fc, &rep, &ds), PX_ERR_INVALID);
}

/* root/NAME/{train,val}/{a,b,c}/NN.jpg: `per` JPEGs per class. */
static void make_jpeg_folder(char *dir, size_t cap, const char *name, int per) {
  snprintf(dir, cap, "%s/%s", root, name);
  rm_tree(dir);
  mkdir(dir, 0755);
  char p[512], from[256];
  snprintf(from, sizeof from, "%s/smooth.jpg", fxdir);
  const char *splits[2] = {"train", "val"}, *classes[3] = {"a", "b", "c"};
  for (int s = 0; s < 2; s++) {
    snprintf(p, sizeof p, "%s/%s", dir, splits[s]);
    mkdir(p, 0755);
    for (int c = 0; c < 3; c++) {
      snprintf(p, sizeof p, "%s/%s/%s", dir, splits[s], classes[c]);
      mkdir(p, 0755);
      for (int i = 0; i < per; i++) {
        snprintf(p, sizeof p, "%s/%s/%s/%02d.jpg", dir, splits[s], classes[c], i);
        copy_file(from, p);
      }
    }
  }
}

/* A JPEG cut in half (its header parses up to the missing scan). */
static void corrupt_jpeg(const char *path) {
  char from[256];
  snprintf(from, sizeof from, "%s/smooth.jpg", fxdir);
  size_t n;
  uint8_t *b = read_all(from, &n);
  write_bytes(path, b, n / 2);
  free(b);
}

/* The issue: after one corrupt JPEG the TurboJPEG handle stayed broken and
 * every later JPEG of the split was skipped too. */
static void one_corrupt_jpeg_skips_that_file_only(void **state) {
  (void)state;
  need_fixtures();
  char path[256];
  snprintf(path, sizeof path, "%s/smooth.jpg", fxdir);
  size_t n;
  uint8_t *jpg = read_all(path, &n), out[3 * 16 * 16];
  px_image_decoder_t *d;
  assert_int_equal(px_image_decoder_create(&d), PX_OK);
  assert_int_equal(px_image_decode(d, jpg, n / 2, 3, 16, out), PX_ERR_FORMAT);
  assert_int_equal(px_image_decode(d, jpg, n, 3, 16, out), PX_OK);
  assert_int_equal(px_image_decode(d, jpg, n - 100, 3, 16, out), PX_ERR_FORMAT);
  assert_int_equal(px_image_decode(d, jpg, n, 3, 16, out), PX_OK);
  px_image_decoder_destroy(d);
  free(jpg);
  char dir[256], p[512];
  /* in the middle of the split, then first */
  for (int first = 0; first < 2; first++) {
    make_jpeg_folder(dir, sizeof dir, "onebad", 10);
    snprintf(p, sizeof p, "%s/train/%s", dir, first ? "a/00.jpg" : "b/05.jpg");
    corrupt_jpeg(p);
    px_folder_config_t fc = {dir, PX_SPLIT_TRAIN, 3, 16, NULL, NULL, 0.5, NULL, 0};
    px_folder_report_t rep;
    px_dataset_t *ds;
    assert_int_equal(px_dataset_load_folder(&fc, &rep, &ds), PX_OK);
    assert_int_equal(rep.files, 30);
    assert_int_equal(rep.skipped, 1);
    assert_int_equal(px_dataset_info(ds)->n, 29);
    px_dataset_destroy(ds);
  }
}

/* More than max_skipped of a split skipped fails the load with the count
 * and the first reasons, when the cache is built and when it is mapped. */
static void too_many_skipped_images_fail_with_the_count(void **state) {
  (void)state;
  need_fixtures();
  char dir[256], p[512];
  make_jpeg_folder(dir, sizeof dir, "manybad", 10);
  snprintf(p, sizeof p, "%s/train/b/05.jpg", dir);
  corrupt_jpeg(p);
  snprintf(p, sizeof p, "%s/train/c/07.jpg", dir);
  write_bytes(p, "not an image", 12);
  /* 2 of 30 is 6.7%: over the default 1% */
  px_folder_config_t fc = {dir, PX_SPLIT_TRAIN, 3, 16, NULL, NULL, 0, NULL, 0};
  px_folder_report_t rep;
  px_dataset_t *ds = NULL;
  assert_int_equal(px_dataset_load_folder(&fc, &rep, &ds), PX_ERR_FORMAT);
  assert_null(ds);
  const char *e = px_last_error();
  assert_non_null(strstr(e, "2 of 30 images could not be decoded"));
  assert_non_null(strstr(e, "dataset.max_skipped = 1%"));
  assert_non_null(strstr(e, "b/05.jpg: corrupt JPEG"));
  assert_non_null(strstr(e, "c/07.jpg: not a JPEG or PNG"));
  /* mapped from the cache that stayed: the same rule, the count */
  assert_int_equal(px_dataset_load_folder(&fc, &rep, &ds), PX_ERR_FORMAT);
  assert_non_null(strstr(px_last_error(), "2 of 30 images could not be decoded"));
  /* at or under the limit it loads */
  fc.max_skipped = 0.07;
  assert_int_equal(px_dataset_load_folder(&fc, &rep, &ds), PX_OK);
  assert_int_equal(rep.built, 0);
  assert_int_equal(rep.skipped, 2);
  px_dataset_destroy(ds);
  fc.max_skipped = 0.06;
  assert_int_equal(px_dataset_load_folder(&fc, &rep, &ds), PX_ERR_FORMAT);
  fc.max_skipped = 1.5;
  assert_int_equal(px_dataset_load_folder(&fc, &rep, &ds), PX_ERR_INVALID);
  /* the job spec field: default 0.01, (0, 1], carried to the trainer */
  Prunex__V1__JobSpec *spec;
  char yaml[512];
  const char *fmt = "strategy: ddp\nmodel: {name: resnet20}\n"
                    "dataset: {name: folder, path: %s%s}\n"
                    "cluster: {nodes: 1, workers_per_node: 1, device: cpu}\n";
  snprintf(yaml, sizeof yaml, fmt, dir, "");
  assert_int_equal(px_jobspec_parse_string(yaml, strlen(yaml), "t.yaml", &spec), PX_OK);
  assert_true(spec->dataset->max_skipped == 0.01);
  spec->dataset->max_skipped = 0; /* a client without the field */
  assert_int_equal(px_jobspec_fill_defaults(spec), PX_OK);
  assert_true(spec->dataset->max_skipped == 0.01);
  px_jobspec_free(spec);
  snprintf(yaml, sizeof yaml, fmt, dir, ", max_skipped: 0.07");
  assert_int_equal(px_jobspec_parse_string(yaml, strlen(yaml), "t.yaml", &spec), PX_OK);
  px_train_config_t tc;
  px_jobspec_train_config(spec, &tc);
  assert_true(tc.max_skipped == 0.07);
  px_jobspec_free(spec);
  snprintf(yaml, sizeof yaml, fmt, dir, ", max_skipped: 0");
  assert_int_equal(px_jobspec_parse_string(yaml, strlen(yaml), "t.yaml", &spec), PX_ERR_INVALID);
  assert_non_null(strstr(px_last_error(), "max_skipped"));
}

/* dataset.cache_dir: made beneath its root (the agent's) or
 * refused naming the field, nothing written outside, a link that leads out
 * refused; a cache directory another user owns or may write to is refused,
 * and so is a $TMPDIR/prunex-cache-UID that another user made first. */
static void a_cache_dir_outside_its_root_or_open_to_others_is_refused(void **state) {
  (void)state;
  need_fixtures();
  char croot[128], out[128], dir[256], cdir[300], p[512];
  snprintf(croot, sizeof croot, "%s/croot", root);
  snprintf(out, sizeof out, "%s/outside-cache", root);
  rm_tree(croot);
  rm_tree(out);
  mkdir(croot, 0700);
  make_folder(dir, sizeof dir, "cfold", 1);
  px_folder_config_t fc = {dir, PX_SPLIT_TRAIN, 3, 16, out, NULL, 1.0, croot, 0};
  px_folder_report_t rep;
  px_dataset_t *ds;
  struct stat sb;
  /* outside its root: refused, naming the field and the root */
  assert_int_equal(px_dataset_load_folder(&fc, &rep, &ds), PX_ERR_INVALID);
  assert_non_null(strstr(px_last_error(), "dataset.cache_dir"));
  assert_non_null(strstr(px_last_error(), croot));
  assert_int_not_equal(stat(out, &sb), 0);
  /* with no cache root, the data root bounds it */
  fc.cache_root = NULL;
  fc.root = dir;
  assert_int_equal(px_dataset_load_folder(&fc, &rep, &ds), PX_ERR_INVALID);
  assert_non_null(strstr(px_last_error(), "is not under"));
  assert_int_not_equal(stat(out, &sb), 0);
  /* a link beneath the root that leads out: nothing made where it leads */
  mkdir(out, 0700);
  snprintf(p, sizeof p, "%s/link", croot);
  assert_int_equal(symlink(out, p), 0);
  snprintf(cdir, sizeof cdir, "%s/link/sub", croot);
  fc.cache_dir = cdir;
  fc.cache_root = croot;
  assert_int_equal(px_dataset_load_folder(&fc, &rep, &ds), PX_ERR_INVALID);
  assert_non_null(strstr(px_last_error(), "a symbolic link that leads out"));
  snprintf(p, sizeof p, "%s/sub", out);
  assert_int_not_equal(stat(p, &sb), 0);
  /* beneath it: made (0700) and used */
  snprintf(cdir, sizeof cdir, "%s/x/y", croot);
  assert_int_equal(px_dataset_load_folder(&fc, &rep, &ds), PX_OK);
  assert_int_equal(strncmp(rep.cache_path, cdir, strlen(cdir)), 0);
  px_dataset_destroy(ds);
  assert_int_equal(stat(cdir, &sb), 0);
  assert_int_equal(sb.st_mode & 0777, 0700);
  /* a cache directory other users may write to, or another user's */
  chmod(cdir, 0777);
  assert_int_equal(px_dataset_load_folder(&fc, &rep, &ds), PX_ERR_INVALID);
  assert_non_null(strstr(px_last_error(), "has mode 0777"));
  chmod(cdir, 0700);
  if (geteuid() == 0) {
    assert_int_equal(chown(cdir, 65534, 65534), 0);
    assert_int_equal(px_dataset_load_folder(&fc, &rep, &ds), PX_ERR_INVALID);
    assert_non_null(strstr(px_last_error(), "is owned by uid 65534"));
  }
}

/* The last fallback, $TMPDIR/prunex-cache-UID, when the folder's
 * .prunex-cache cannot be used and there is no home: another user could
 * have made it first, so it must be this user's, mode 0700, no link. */
static void a_shared_tmp_cache_made_by_another_is_refused(void **state) {
  (void)state;
  need_fixtures();
  char dir[256], tmp[128], base[300], p[512];
  make_folder(dir, sizeof dir, "tfold", 1);
  snprintf(p, sizeof p, "%s/.prunex-cache", dir);
  write_bytes(p, "x", 1); /* not a directory: the fallbacks */
  snprintf(tmp, sizeof tmp, "%s/tmp", root);
  rm_tree(tmp);
  mkdir(tmp, 0777);
  chmod(tmp, 01777);
  snprintf(base, sizeof base, "%s/prunex-cache-%u", tmp, (unsigned)geteuid());
  mkdir(base, 0755);
  char *home = getenv("HOME") ? strdup(getenv("HOME")) : NULL;
  char *tmpdir = getenv("TMPDIR") ? strdup(getenv("TMPDIR")) : NULL;
  unsetenv("HOME");
  unsetenv("XDG_CACHE_HOME");
  setenv("TMPDIR", tmp, 1);
  px_folder_config_t fc = {dir, PX_SPLIT_TRAIN, 3, 16, NULL, NULL, 1.0, NULL, 0};
  px_folder_report_t rep;
  px_dataset_t *ds;
  px_status_t st = px_dataset_load_folder(&fc, &rep, &ds);
  char err[1024];
  snprintf(err, sizeof err, "%s", px_last_error());
  chmod(base, 0700);
  px_status_t st_ok = px_dataset_load_folder(&fc, &rep, &ds);
  if (st_ok == PX_OK) px_dataset_destroy(ds);
  px_status_t st_other = PX_ERR_INVALID;
  if (geteuid() == 0 && chown(base, 65534, 65534) == 0)
    st_other = px_dataset_load_folder(&fc, &rep, &ds);
  rm_tree(base);
  char elsewhere[300];
  snprintf(elsewhere, sizeof elsewhere, "%s/elsewhere-tmp", root);
  mkdir(elsewhere, 0700);
  int linked = symlink(elsewhere, base) == 0;
  px_status_t st_link = px_dataset_load_folder(&fc, &rep, &ds);
  if (home) setenv("HOME", home, 1);
  if (tmpdir) setenv("TMPDIR", tmpdir, 1);
  else unsetenv("TMPDIR");
  free(home);
  free(tmpdir);
  assert_int_equal(st, PX_ERR_INVALID);
  assert_non_null(strstr(err, base));
  assert_non_null(strstr(err, "has mode 0755"));
  assert_int_equal(st_ok, PX_OK);
  assert_int_equal(st_other, PX_ERR_INVALID);
  assert_true(linked);
  assert_int_not_equal(st_link, PX_OK);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(png_and_jpeg_decode_as_opencv_does),
      cmocka_unit_test(resize_and_centre_crop_match_opencv),
      cmocka_unit_test(corrupt_and_oversized_files_are_refused_with_a_reason),
      cmocka_unit_test(layout_errors_are_refused_naming_the_directory),
      cmocka_unit_test(corrupt_images_are_skipped_and_counted),
      cmocka_unit_test(the_cache_is_built_once_and_rebuilt_when_stale),
      cmocka_unit_test(concurrent_ranks_decode_once),
      cmocka_unit_test(random_resized_crop_matches_a_plain_reference),
      cmocka_unit_test(ranks_shard_a_mapped_folder),
      cmocka_unit_test(a_link_out_of_the_data_root_is_refused_by_name_only),
      cmocka_unit_test(one_corrupt_jpeg_skips_that_file_only),
      cmocka_unit_test(too_many_skipped_images_fail_with_the_count),
      cmocka_unit_test(a_cache_dir_outside_its_root_or_open_to_others_is_refused),
      cmocka_unit_test(a_shared_tmp_cache_made_by_another_is_refused),
  };
  return cmocka_run_group_tests(tests, group_setup, group_teardown);
}
