/* safetensors checkpoints: every dtype, scalars and empty tensors round-trip
 * with metadata; the bytes on disk match a hand-written file exactly; loading
 * into a table that disagrees with the file names the tensor and both sides;
 * every kind of corrupt file fails as PX_ERR_FORMAT naming the file, without
 * leaking; saves are atomic; and, where python3 has numpy, a plain numpy
 * reader (tests/safetensors_read.py) sees what the C writer wrote. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <dirent.h>
#include <ftw.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "prunex/safetensors.h"
#include "px_test_util.h"

typedef struct {
  char dir[64];
  char path[128]; /* dir/ckpt.safetensors, the file most tests use */
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
  snprintf(f->dir, sizeof f->dir, "/tmp/px_test_st_XXXXXX");
  if (!mkdtemp(f->dir)) {
    free(f);
    return -1;
  }
  snprintf(f->path, sizeof f->path, "%s/ckpt.safetensors", f->dir);
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

/* ---- helpers --------------------------------------------------------------- */

static void write_bytes(const char *path, const void *data, size_t len) {
  FILE *fp = fopen(path, "wb");
  assert_non_null(fp);
  if (len) assert_int_equal(fwrite(data, 1, len, fp), len);
  assert_int_equal(fclose(fp), 0);
}

/* A file with the given header (size = strlen(json), no padding) and data. */
static void write_st(const char *path, const char *json, const void *data, size_t dlen) {
  size_t hlen = strlen(json);
  size_t total = 8 + hlen + dlen;
  uint8_t *buf = malloc(total);
  assert_non_null(buf);
  for (int i = 0; i < 8; i++) buf[i] = (uint8_t)((uint64_t)hlen >> (8 * i));
  memcpy(buf + 8, json, hlen);
  if (dlen) memcpy(buf + 8 + hlen, data, dlen);
  write_bytes(path, buf, total);
  free(buf);
}

static uint8_t *read_whole(const char *path, size_t *len) {
  FILE *fp = fopen(path, "rb");
  assert_non_null(fp);
  assert_int_equal(fseek(fp, 0, SEEK_END), 0);
  long n = ftell(fp);
  assert_true(n >= 0);
  rewind(fp);
  uint8_t *buf = malloc((size_t)n + 1);
  assert_non_null(buf);
  assert_int_equal(fread(buf, 1, (size_t)n, fp), (size_t)n);
  fclose(fp);
  *len = (size_t)n;
  return buf;
}

static void assert_msg_has(const char *needle) {
  const char *msg = px_last_error();
  if (!strstr(msg, needle)) {
    fail_msg("error message \"%s\" does not contain \"%s\"", msg, needle);
  }
}

/* Opening path fails as a format error whose message names the file and
 * contains `what`. */
static void expect_corrupt(const char *path, const char *what) {
  px_safetensors_t *h = (px_safetensors_t *)(uintptr_t)1;
  px_clear_error();
  assert_int_equal(px_safetensors_open(path, &h), PX_ERR_FORMAT);
  assert_null(h);
  assert_msg_has(path);
  assert_msg_has(what);
}

static void expect_corrupt_json(const fixture_t *f, const char *json, const char *what) {
  write_st(f->path, json, NULL, 0);
  expect_corrupt(f->path, what);
}

static int dir_entries(const char *dir) {
  DIR *d = opendir(dir);
  assert_non_null(d);
  int n = 0;
  struct dirent *e;
  while ((e = readdir(d)) != NULL) {
    if (strcmp(e->d_name, ".") && strcmp(e->d_name, "..")) n++;
  }
  closedir(d);
  return n;
}

static px_st_tensor_t tensor(const char *name, px_st_dtype_t dt, int ndim, const int64_t *shape,
                             const void *data) {
  px_st_tensor_t t;
  memset(&t, 0, sizeof t);
  t.name = name;
  t.dtype = dt;
  t.ndim = ndim;
  for (int i = 0; i < ndim; i++) t.shape[i] = shape[i];
  t.data = data;
  return t;
}

static size_t numel(const px_st_tensor_t *t) {
  size_t n = 1;
  for (int i = 0; i < t->ndim; i++) n *= (size_t)t->shape[i];
  return n;
}

/* A table with two tensors of each PruneX dtype, among them 0-d scalars and
 * zero-element tensors. Values are small multiples of 1/4 (exact in every
 * float sum) or integers. */
typedef struct {
  float conv_w[4 * 3 * 2 * 2];
  double bn_var[6];
  double scale;
  int32_t labels[3 * 1 * 2];
  int64_t idx[2 * 2];
  int64_t step;
  uint8_t mask[2 * 5];
  uint8_t flag;
  px_st_tensor_t t[10];
  int n;
} table_t;

static void make_table(table_t *tb, uint64_t seed) {
  px_test_rng_t rng;
  px_test_rng_seed(&rng, seed);
  for (size_t i = 0; i < 48; i++) {
    tb->conv_w[i] = (float)((int)(px_test_rng_u64(&rng) % 41) - 20) * 0.25f;
  }
  for (size_t i = 0; i < 6; i++) tb->bn_var[i] = (double)(px_test_rng_u64(&rng) % 1000) * 0.125;
  tb->scale = -2.75;
  for (size_t i = 0; i < 6; i++) tb->labels[i] = (int32_t)(px_test_rng_u64(&rng) % 2001) - 1000;
  tb->idx[0] = -5;
  tb->idx[1] = (int64_t)1 << 40;
  tb->idx[2] = 7;
  tb->idx[3] = -((int64_t)1 << 33);
  tb->step = 123456789012;
  for (size_t i = 0; i < 10; i++) tb->mask[i] = (uint8_t)(px_test_rng_u64(&rng) % 256);
  tb->flag = 1;
  static const int64_t s_conv[] = {4, 3, 2, 2}, s_empty_f[] = {0, 4}, s_var[] = {6},
                       s_lab[] = {3, 1, 2}, s_empty_i[] = {0}, s_idx[] = {2, 2}, s_mask[] = {2, 5};
  int n = 0;
  tb->t[n++] = tensor("conv1.weight", PX_ST_F32, 4, s_conv, tb->conv_w);
  tb->t[n++] = tensor("fc.bias_empty", PX_ST_F32, 2, s_empty_f, NULL);
  tb->t[n++] = tensor("bn.running_var", PX_ST_F64, 1, s_var, tb->bn_var);
  tb->t[n++] = tensor("scale", PX_ST_F64, 0, NULL, &tb->scale);
  tb->t[n++] = tensor("labels", PX_ST_I32, 3, s_lab, tb->labels);
  tb->t[n++] = tensor("no_labels", PX_ST_I32, 1, s_empty_i, NULL);
  tb->t[n++] = tensor("idx", PX_ST_I64, 2, s_idx, tb->idx);
  tb->t[n++] = tensor("step", PX_ST_I64, 0, NULL, &tb->step);
  tb->t[n++] = tensor("mask", PX_ST_U8, 2, s_mask, tb->mask);
  tb->t[n++] = tensor("flag", PX_ST_U8, 0, NULL, &tb->flag);
  tb->n = n;
}

static const char *const table_meta[] = {"format", "pt", "epoch", "17",
                                         "note", "quote \" backslash \\ tab \t \xc3\xa9"};

/* ---- round trip ------------------------------------------------------------ */

static void test_roundtrip_every_dtype_scalars_empty_and_metadata(void **state) {
  fixture_t *f = *state;
  table_t tb;
  make_table(&tb, 11);
  assert_int_equal(px_safetensors_save(f->path, tb.t, tb.n, table_meta, 3), PX_OK);

  px_safetensors_t *h = NULL;
  assert_int_equal(px_safetensors_open(f->path, &h), PX_OK);
  assert_int_equal(px_safetensors_count(h), tb.n);
  for (int i = 0; i < tb.n; i++) {
    const px_st_tensor_t *t = &tb.t[i];
    px_st_info_t info;
    assert_int_equal(px_safetensors_find(h, t->name, &info), PX_OK);
    assert_string_equal(info.name, t->name);
    assert_int_equal(info.dtype, t->dtype);
    assert_int_equal(info.ndim, t->ndim);
    for (int d = 0; d < t->ndim; d++) assert_int_equal(info.shape[d], t->shape[d]);
    size_t bytes = numel(t) * px_st_dtype_size(t->dtype);
    assert_int_equal(info.nbytes, bytes);
    assert_int_equal(info.file_offset % px_st_dtype_size(t->dtype), 0); /* aligned */
    uint8_t buf[256];
    assert_true(bytes <= sizeof buf);
    memset(buf, 0xAB, sizeof buf);
    assert_int_equal(px_safetensors_read(h, t->name, buf, bytes), PX_OK);
    if (bytes) assert_memory_equal(buf, t->data, bytes);
    assert_int_equal(buf[bytes], 0xAB); /* nothing written past the end */
  }
  assert_int_equal(px_safetensors_meta_count(h), 3);
  assert_string_equal(px_safetensors_meta(h, "format"), "pt");
  assert_string_equal(px_safetensors_meta(h, "epoch"), "17");
  assert_string_equal(px_safetensors_meta(h, "note"), table_meta[5]);
  assert_null(px_safetensors_meta(h, "missing"));
  const char *k, *v;
  px_safetensors_meta_at(h, 1, &k, &v);
  assert_string_equal(k, "epoch");
  assert_string_equal(v, "17");
  px_safetensors_close(h);
}

static void test_enumeration_is_in_data_order_largest_dtype_first(void **state) {
  fixture_t *f = *state;
  table_t tb;
  make_table(&tb, 12);
  assert_int_equal(px_safetensors_save(f->path, tb.t, tb.n, NULL, 0), PX_OK);
  px_safetensors_t *h = NULL;
  assert_int_equal(px_safetensors_open(f->path, &h), PX_OK);
  /* 8-byte dtypes by name, then 4-byte, then 1-byte; zero-sized tensors sort
   * before a tensor at the same offset. */
  static const char *const want[] = {"bn.running_var", "idx", "scale", "step", "conv1.weight",
                                     "fc.bias_empty", "labels", "no_labels", "flag", "mask"};
  for (int i = 0; i < 10; i++) assert_string_equal(px_safetensors_name(h, i), want[i]);
  assert_null(px_safetensors_name(h, 10));
  assert_null(px_safetensors_name(h, -1));
  assert_int_equal(px_safetensors_meta_count(h), 0);
  px_safetensors_close(h);
}

static void test_load_into_fills_every_dst_strictly(void **state) {
  fixture_t *f = *state;
  table_t tb, out;
  make_table(&tb, 13);
  memset(&out, 0, sizeof out);
  make_table(&out, 99); /* same shapes, other values */
  assert_int_equal(px_safetensors_save(f->path, tb.t, tb.n, NULL, 0), PX_OK);
  void *dsts[10] = {out.conv_w, NULL, out.bn_var, &out.scale, out.labels,
                    NULL,       out.idx, &out.step, out.mask, &out.flag};
  for (int i = 0; i < out.n; i++) out.t[i].dst = dsts[i];
  assert_int_equal(px_safetensors_load_into(f->path, out.t, out.n, 1), PX_OK);
  assert_memory_equal(out.conv_w, tb.conv_w, sizeof tb.conv_w);
  assert_memory_equal(out.bn_var, tb.bn_var, sizeof tb.bn_var);
  assert_memory_equal(out.labels, tb.labels, sizeof tb.labels);
  assert_memory_equal(out.idx, tb.idx, sizeof tb.idx);
  assert_memory_equal(out.mask, tb.mask, sizeof tb.mask);
  assert_true(out.scale == tb.scale && out.step == tb.step && out.flag == tb.flag);
}

static void test_names_needing_json_escapes_roundtrip(void **state) {
  fixture_t *f = *state;
  static const char *const names[] = {"with \"quotes\"", "back\\slash", "new\nline\x01",
                                      "caf\xc3\xa9 \xf0\x9f\x98\x80", "a/b.c:d"};
  uint8_t v[5] = {1, 2, 3, 4, 5};
  px_st_tensor_t t[5];
  for (int i = 0; i < 5; i++) t[i] = tensor(names[i], PX_ST_U8, 0, NULL, &v[i]);
  assert_int_equal(px_safetensors_save(f->path, t, 5, NULL, 0), PX_OK);
  px_safetensors_t *h = NULL;
  assert_int_equal(px_safetensors_open(f->path, &h), PX_OK);
  for (int i = 0; i < 5; i++) {
    uint8_t got = 0;
    assert_int_equal(px_safetensors_read(h, names[i], &got, 1), PX_OK);
    assert_int_equal(got, v[i]);
  }
  px_safetensors_close(h);
}

static void test_unicode_escapes_decode_to_utf8(void **state) {
  fixture_t *f = *state;
  /* \u00e9 = é, \ud83d\ude00 = U+1F600, \/ = / */
  write_st(f->path,
           "{\"caf\\u00e9\\ud83d\\ude00\\/x\":"
           "{\"dtype\":\"U8\",\"shape\":[],\"data_offsets\":[0,1]},"
           "\"__metadata__\":{\"k\\n\":\"\\u0041\\t\\\"\"}}   ",
           "\x2a", 1);
  px_safetensors_t *h = NULL;
  assert_int_equal(px_safetensors_open(f->path, &h), PX_OK);
  assert_string_equal(px_safetensors_name(h, 0), "caf\xc3\xa9\xf0\x9f\x98\x80/x");
  assert_string_equal(px_safetensors_meta(h, "k\n"), "A\t\"");
  px_safetensors_close(h);
}

static void test_empty_checkpoint_roundtrips(void **state) {
  fixture_t *f = *state;
  assert_int_equal(px_safetensors_save(f->path, NULL, 0, NULL, 0), PX_OK);
  size_t len;
  uint8_t *got = read_whole(f->path, &len);
  assert_int_equal(len, 16);
  assert_memory_equal(got, "\x08\0\0\0\0\0\0\0{}      ", 16);
  free(got);
  px_safetensors_t *h = NULL;
  assert_int_equal(px_safetensors_open(f->path, &h), PX_OK);
  assert_int_equal(px_safetensors_count(h), 0);
  px_safetensors_close(h);
  assert_int_equal(px_safetensors_load_into(f->path, NULL, 0, 1), PX_OK);
}

/* ---- exact layout ------------------------------------------------------------ */

static void test_layout_is_byte_exact(void **state) {
  fixture_t *f = *state;
  uint8_t bias[3] = {1, 2, 3};
  float a = 1.5f; /* 0x3FC00000 */
  static const int64_t s3[] = {3};
  /* Given U8 first: the writer still puts the 4-byte tensor first. */
  px_st_tensor_t t[2] = {tensor("bias", PX_ST_U8, 1, s3, bias),
                         tensor("a", PX_ST_F32, 0, NULL, &a)};
  const char *meta[] = {"format", "pt"};
  assert_int_equal(px_safetensors_save(f->path, t, 2, meta, 1), PX_OK);

  /* 139 bytes of JSON + 5 spaces = 144 = 0x90; then 4 + 3 data bytes. */
  static const char expect[] =
      "\x90\x00\x00\x00\x00\x00\x00\x00"
      "{\"__metadata__\":{\"format\":\"pt\"},"
      "\"a\":{\"dtype\":\"F32\",\"shape\":[],\"data_offsets\":[0,4]},"
      "\"bias\":{\"dtype\":\"U8\",\"shape\":[3],\"data_offsets\":[4,7]}}"
      "     "
      "\x00\x00\xc0\x3f"
      "\x01\x02\x03";
  size_t len;
  uint8_t *got = read_whole(f->path, &len);
  assert_int_equal(len, sizeof expect - 1);
  assert_int_equal(len, 8 + 144 + 7);
  assert_memory_equal(got, expect, len);
  free(got);
}

/* ---- load_into mismatches ------------------------------------------------------ */

static void save_fc(const fixture_t *f) {
  float w[20] = {0}, b[10] = {0};
  static const int64_t sw[] = {10, 2}, sb[] = {10};
  px_st_tensor_t t[2] = {tensor("fc.weight", PX_ST_F32, 2, sw, w),
                         tensor("fc.bias", PX_ST_F32, 1, sb, b)};
  assert_int_equal(px_safetensors_save(f->path, t, 2, NULL, 0), PX_OK);
}

static void test_load_wrong_shape_names_tensor_and_both_shapes(void **state) {
  fixture_t *f = *state;
  save_fc(f);
  float w[30], b[10];
  for (int i = 0; i < 30; i++) w[i] = 7.0f;
  static const int64_t sw[] = {10, 3}, sb[] = {10};
  px_st_tensor_t t[2] = {tensor("fc.weight", PX_ST_F32, 2, sw, NULL),
                         tensor("fc.bias", PX_ST_F32, 1, sb, NULL)};
  t[0].dst = w;
  t[1].dst = b;
  assert_int_equal(px_safetensors_load_into(f->path, t, 2, 0), PX_ERR_MISMATCH);
  assert_msg_has(f->path);
  assert_msg_has("'fc.weight'");
  assert_msg_has("[10, 2]");
  assert_msg_has("[10, 3]");
  for (int i = 0; i < 30; i++) assert_true(w[i] == 7.0f); /* untouched */
}

static void test_load_wrong_dtype_names_tensor_and_both_dtypes(void **state) {
  fixture_t *f = *state;
  save_fc(f);
  double b[10];
  static const int64_t sb[] = {10};
  px_st_tensor_t t = tensor("fc.bias", PX_ST_F64, 1, sb, NULL);
  t.dst = b;
  assert_int_equal(px_safetensors_load_into(f->path, &t, 1, 0), PX_ERR_MISMATCH);
  assert_msg_has(f->path);
  assert_msg_has("'fc.bias' is F32 in the file, expected F64");
}

static void test_load_missing_tensor_names_it(void **state) {
  fixture_t *f = *state;
  save_fc(f);
  float g[4];
  static const int64_t s[] = {4};
  px_st_tensor_t t = tensor("bn.gamma", PX_ST_F32, 1, s, NULL);
  t.dst = g;
  assert_int_equal(px_safetensors_load_into(f->path, &t, 1, 0), PX_ERR_MISMATCH);
  assert_msg_has(f->path);
  assert_msg_has("'bn.gamma'");
  assert_msg_has("missing");
}

static void test_strict_load_rejects_extra_tensor_lenient_accepts(void **state) {
  fixture_t *f = *state;
  save_fc(f);
  float b[10];
  static const int64_t sb[] = {10};
  px_st_tensor_t t = tensor("fc.bias", PX_ST_F32, 1, sb, NULL);
  t.dst = b;
  assert_int_equal(px_safetensors_load_into(f->path, &t, 1, 1), PX_ERR_MISMATCH);
  assert_msg_has(f->path);
  assert_msg_has("'fc.weight'");
  assert_msg_has("strict");
  assert_int_equal(px_safetensors_load_into(f->path, &t, 1, 0), PX_OK);
}

static void test_read_checks_size_and_name(void **state) {
  fixture_t *f = *state;
  save_fc(f);
  px_safetensors_t *h = NULL;
  assert_int_equal(px_safetensors_open(f->path, &h), PX_OK);
  float b[11];
  assert_int_equal(px_safetensors_read(h, "fc.bias", b, sizeof b), PX_ERR_INVALID);
  assert_msg_has("'fc.bias' is 40 bytes, the buffer is 44 bytes");
  px_st_info_t info;
  assert_int_equal(px_safetensors_find(h, "fc.nope", &info), PX_ERR_INVALID);
  assert_msg_has(f->path);
  assert_msg_has("'fc.nope'");
  assert_int_equal(px_safetensors_read(h, "fc.nope", b, 40), PX_ERR_INVALID);
  px_safetensors_close(h);
}

/* ---- corrupt files --------------------------------------------------------------- */

static void test_corrupt_truncated_data(void **state) {
  fixture_t *f = *state;
  save_fc(f);
  size_t len;
  uint8_t *buf = read_whole(f->path, &len);
  write_bytes(f->path, buf, len - 5);
  expect_corrupt(f->path, "run past the end of the file");
  free(buf);
}

static void test_corrupt_truncated_header(void **state) {
  fixture_t *f = *state;
  save_fc(f);
  size_t len;
  uint8_t *buf = read_whole(f->path, &len);
  write_bytes(f->path, buf, 40); /* cut inside the JSON */
  expect_corrupt(f->path, "is larger than the 32 bytes after it");
  write_bytes(f->path, buf, 5); /* cut inside the size */
  expect_corrupt(f->path, "too short for the 8-byte header size");
  write_bytes(f->path, buf, 0);
  expect_corrupt(f->path, "too short");
  free(buf);
}

static void test_corrupt_header_size_larger_than_file(void **state) {
  fixture_t *f = *state;
  uint8_t buf[8 + 16] = {0};
  buf[0] = 0x00;
  buf[1] = 0x10; /* 4096 */
  memcpy(buf + 8, "{}              ", 16);
  write_bytes(f->path, buf, sizeof buf);
  expect_corrupt(f->path, "header size 4096 is larger than the 16 bytes after it");
  memset(buf, 0xFF, 8); /* 2^64 - 1 */
  write_bytes(f->path, buf, sizeof buf);
  expect_corrupt(f->path, "exceeds the 100000000-byte limit");
}

static void test_corrupt_bad_json(void **state) {
  fixture_t *f = *state;
  static const struct {
    const char *json, *what;
  } cases[] = {
      {"", "header is empty"},
      {" {}", "does not start with '{'"},
      {"[]", "does not start with '{'"},
      {"{", "unexpected end of data"}, /* the structure: json-c's words */
      {"{\"a\" {}}", "':' expected"},
      {"{\"a\":{\"dtype\":\"U8\",\"shape\":[],\"data_offsets\":[0,0]},}", "unexpected character"},
      {"{\"a\":{\"dtype\":\"U8\",\"shape\":[],\"data_offsets\":[0,0]}} x", "at byte 53"},
      {"{\"a\":{\"dtype\":\"U8\",\"shape\":[],\"data_offsets\":[0,0]}}{}", "at byte 52"},
      {"{\"a\":{\"dtype\":\"U8\",\"shape\":[],\"data_offsets\":[0,0]} \"b\":1}", "',' expected"},
      {"{\"a\":{\"dtype\":\"U8\",\"shape\":[1.0],\"data_offsets\":[0,1]}}", "must be integers"},
      {"{\"a\":{\"dtype\":\"U8\",\"shape\":[1e2],\"data_offsets\":[0,1]}}", "must be integers"},
      {"{\"a\":{\"dtype\":\"U8\",\"shape\":[01],\"data_offsets\":[0,1]}}", "leading zero"},
      {"{\"a\":{\"dtype\":\"U8\",\"shape\":[true],\"data_offsets\":[0,1]}}", "expected an integer"},
      {"{\"a\":{\"dtype\":\"U8\",\"shape\":[1,],\"data_offsets\":[0,1]}}", "unexpected character"},
      {"{\"a\":{\"dtype\":\"U8\",\"shape\":[1 2],\"data_offsets\":[0,1]}}", "',' expected"},
      {"{\"a\":{\"dtype\":\"U8\",\"shape\":[99999999999999999999],\"data_offsets\":[0,1]}}",
       "out of range"},
      {"{\"a\":{\"dtype\":null,\"shape\":[],\"data_offsets\":[0,1]}}", "dtype is not a string"},
      {"{\"a\":{\"dtype\":\"U8\",\"shape\":{},\"data_offsets\":[0,1]}}", "not an array"},
      {"{\"a\":[]}", "entry is not an object"},
      {"{\"a\":{\"dtype\":\"U8\",\"shape\":[],\"data_offsets\":[0,1],\"x\":1}}",
       "unknown field 'x'"},
      {"{\"a\":{\"dtype\":\"U8\",\"data_offsets\":[0,1]}}", "missing field 'shape'"},
      {"{\"a\":{\"dtype\":\"U8\",\"shape\":[],\"data_offsets\":[0]}}", "two non-negative"},
      {"{\"a\":{\"dtype\":\"U8\",\"shape\":[],\"data_offsets\":[0,1,2]}}", "more than 2"},
      {"{\"a\x01\":{}}", "control character"},
      {"{\"a\\x\":{}}", "bad escape"},
      {"{\"a\\u12G4\":{}}", "bad \\u escape"},
      {"{\"a\\udc00\":{}}", "lone low surrogate"},
      {"{\"a\\ud800x\":{}}", "high surrogate"},
      {"{\"a\\u0000\":{}}", "NUL"},
      {"{\"\xc3\x28\":{}}", "invalid UTF-8"},
      {"{\"\xed\xa0\x80\":{}}", "invalid UTF-8"}, /* an encoded surrogate */
      {"{\"\xc0\xaf\":{}}", "invalid UTF-8"},     /* overlong '/' */
      {"{\"abc", "unterminated string"},
      {"{\"__metadata__\":{\"k\":1}}", "value of 'k' is not a string"},
      {"{\"__metadata__\":[]}", "__metadata__ is not an object"},
      /* what json-c itself would take: a single-quoted string, NaN, nesting
       * past its bound, equal keys spelled apart, a duplicate deeper down */
      {"{'a':{}}", "single-quoted string"},
      {"{\"a\":{\"dtype\":\"U8\",\"shape\":[NaN],\"data_offsets\":[0,1]}}", "NaN"},
      {"{\"a\":[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[["
       "]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]}",
       "nested more than 64 deep"},
      {"{\"w\":{\"dtype\":\"U8\",\"shape\":[1],\"data_offsets\":[0,1]},\"\\u0077\":[]}",
       "duplicate tensor name 'w'"},
      {"{\"a\":{\"x\":{\"k\":1,\"k\":2}}}", "duplicate key 'k'"},
  };
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
    write_st(f->path, cases[i].json, "\0", 1);
    px_safetensors_t *h = NULL;
    px_status_t st = px_safetensors_open(f->path, &h);
    if (st != PX_ERR_FORMAT || !strstr(px_last_error(), cases[i].what) ||
        !strstr(px_last_error(), f->path)) {
      fail_msg("case %zu (%s): status %s, message \"%s\", wanted \"%s\"", i, cases[i].json,
               px_status_name(st), px_last_error(), cases[i].what);
    }
    assert_null(h);
  }
}

/* A header padded with NUL bytes instead of spaces. */
static void test_corrupt_nul_padding(void **state) {
  fixture_t *f = *state;
  static const char json[] = "{\"a\":{\"dtype\":\"U8\",\"shape\":[1],\"data_offsets\":[0,1]}}\0\0";
  uint8_t buf[8 + sizeof json - 1 + 1] = {(uint8_t)(sizeof json - 1)};
  memcpy(buf + 8, json, sizeof json - 1);
  buf[sizeof buf - 1] = 'x';
  write_bytes(f->path, buf, sizeof buf);
  expect_corrupt(f->path, "NUL byte");
}

static void test_corrupt_offsets_not_matching_shape(void **state) {
  fixture_t *f = *state;
  uint8_t data[40] = {0};
  write_st(f->path, "{\"fc.weight\":{\"dtype\":\"F32\",\"shape\":[10,2],\"data_offsets\":[0,40]}}",
           data, 40);
  expect_corrupt(f->path,
                 "tensor 'fc.weight': data_offsets [0, 40] do not match shape [10, 2] of F32 "
                 "(80 bytes)");
}

static void test_corrupt_overlapping_offsets(void **state) {
  fixture_t *f = *state;
  uint8_t data[12] = {0};
  write_st(f->path,
           "{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]},"
           "\"b\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[4,12]}}",
           data, 12);
  expect_corrupt(f->path, "tensor 'b': data_offsets [4, 12] overlap tensor 'a' [0, 8]");
}

static void test_corrupt_gap_and_trailing_bytes(void **state) {
  fixture_t *f = *state;
  uint8_t data[12] = {0};
  write_st(f->path,
           "{\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]},"
           "\"b\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[8,12]}}",
           data, 12);
  expect_corrupt(f->path, "tensor 'b': data_offsets [8, 12] leave a gap of 4 bytes");
  write_st(f->path, "{\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]}}", data, 12);
  expect_corrupt(f->path, "8 bytes after the last tensor");
  write_st(f->path, "{\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[4,0]}}", data, 4);
  expect_corrupt(f->path, "reversed");
}

static void test_corrupt_unknown_dtype(void **state) {
  fixture_t *f = *state;
  write_st(f->path, "{\"w\":{\"dtype\":\"F33\",\"shape\":[1],\"data_offsets\":[0,4]}}", "abcd", 4);
  expect_corrupt(f->path, "tensor 'w': unknown dtype 'F33'");
}

static void test_corrupt_duplicate_keys(void **state) {
  fixture_t *f = *state;
  write_st(f->path,
           "{\"w\":{\"dtype\":\"U8\",\"shape\":[1],\"data_offsets\":[0,1]},"
           "\"w\":{\"dtype\":\"U8\",\"shape\":[1],\"data_offsets\":[1,2]}}",
           "ab", 2);
  expect_corrupt(f->path, "duplicate tensor name 'w'");
  write_st(f->path,
           "{\"w\":{\"dtype\":\"U8\",\"dtype\":\"U8\",\"shape\":[1],\"data_offsets\":[0,1]}}", "a",
           1);
  expect_corrupt(f->path, "tensor 'w': duplicate field 'dtype'");
  expect_corrupt_json(f, "{\"__metadata__\":{\"k\":\"1\",\"k\":\"2\"}}",
                      "duplicate __metadata__ key 'k'");
  expect_corrupt_json(f, "{\"__metadata__\":{},\"__metadata__\":{}}",
                      "duplicate key '__metadata__'");
}

static void test_corrupt_negative_or_overflowing_shape(void **state) {
  fixture_t *f = *state;
  expect_corrupt_json(f, "{\"w\":{\"dtype\":\"U8\",\"shape\":[-1],\"data_offsets\":[0,0]}}",
                      "tensor 'w': shape has a negative dimension -1");
  expect_corrupt_json(f,
                      "{\"w\":{\"dtype\":\"U8\",\"shape\":[1,2,3,4,5,6,7,8,9],"
                      "\"data_offsets\":[0,0]}}",
                      "more than 8 elements");
  expect_corrupt_json(f,
                      "{\"w\":{\"dtype\":\"F64\",\"shape\":[4294967296,4294967296],"
                      "\"data_offsets\":[0,0]}}",
                      "tensor 'w': shape [4294967296, 4294967296] of F64 is too large");
  expect_corrupt_json(f, "{\"w\":{\"dtype\":\"U8\",\"shape\":[2],\"data_offsets\":[-2,0]}}",
                      "two non-negative");
}

static void test_huge_dims_with_a_zero_are_an_empty_tensor(void **state) {
  fixture_t *f = *state;
  write_st(f->path,
           "{\"w\":{\"dtype\":\"F64\",\"shape\":[4294967296,0,4294967296],\"data_offsets\":[0,0]}}",
           NULL, 0);
  px_safetensors_t *h = NULL;
  assert_int_equal(px_safetensors_open(f->path, &h), PX_OK);
  px_st_info_t info;
  assert_int_equal(px_safetensors_find(h, "w", &info), PX_OK);
  assert_int_equal(info.nbytes, 0);
  px_safetensors_close(h);
}

static void test_missing_file_is_io_error_naming_it(void **state) {
  fixture_t *f = *state;
  px_safetensors_t *h = NULL;
  assert_int_equal(px_safetensors_open(f->path, &h), PX_ERR_IO);
  assert_null(h);
  assert_msg_has(f->path);
  assert_msg_has("No such file or directory");
  assert_int_equal(px_safetensors_open(f->dir, &h), PX_ERR_IO);
  assert_msg_has("not a regular file");
}

/* ---- save: argument checks and atomicity -------------------------------------------- */

static void test_save_rejects_bad_tables_and_writes_nothing(void **state) {
  fixture_t *f = *state;
  uint8_t v[2] = {0};
  static const int64_t s2[] = {2}, sneg[] = {-2};
  px_st_tensor_t dup[2] = {tensor("x", PX_ST_U8, 1, s2, v), tensor("x", PX_ST_U8, 0, NULL, v)};
  assert_int_equal(px_safetensors_save(f->path, dup, 2, NULL, 0), PX_ERR_INVALID);
  assert_msg_has("duplicate tensor name 'x'");
  px_st_tensor_t t = tensor("__metadata__", PX_ST_U8, 1, s2, v);
  assert_int_equal(px_safetensors_save(f->path, &t, 1, NULL, 0), PX_ERR_INVALID);
  assert_msg_has("reserved");
  t = tensor("bad\xff", PX_ST_U8, 1, s2, v);
  assert_int_equal(px_safetensors_save(f->path, &t, 1, NULL, 0), PX_ERR_INVALID);
  assert_msg_has("UTF-8");
  t = tensor("neg", PX_ST_U8, 1, sneg, v);
  assert_int_equal(px_safetensors_save(f->path, &t, 1, NULL, 0), PX_ERR_INVALID);
  assert_msg_has("negative");
  t = tensor("nodata", PX_ST_U8, 1, s2, NULL);
  assert_int_equal(px_safetensors_save(f->path, &t, 1, NULL, 0), PX_ERR_INVALID);
  assert_msg_has("'nodata': NULL data");
  t = tensor("ok", PX_ST_U8, 1, s2, v);
  t.ndim = PX_ST_MAX_DIMS + 1;
  assert_int_equal(px_safetensors_save(f->path, &t, 1, NULL, 0), PX_ERR_INVALID);
  t = tensor("ok", (px_st_dtype_t)PX_ST_DTYPE_COUNT, 1, s2, v);
  assert_int_equal(px_safetensors_save(f->path, &t, 1, NULL, 0), PX_ERR_INVALID);
  const char *meta[] = {"k", "1", "k", "2"};
  t = tensor("ok", PX_ST_U8, 1, s2, v);
  assert_int_equal(px_safetensors_save(f->path, &t, 1, meta, 2), PX_ERR_INVALID);
  assert_msg_has("duplicate metadata key 'k'");
  assert_int_equal(dir_entries(f->dir), 0);
}

static void test_failed_save_into_missing_dir_leaves_no_file(void **state) {
  fixture_t *f = *state;
  char path[160];
  snprintf(path, sizeof path, "%s/no_such_dir/ckpt.safetensors", f->dir);
  table_t tb;
  make_table(&tb, 14);
  assert_int_equal(px_safetensors_save(path, tb.t, tb.n, NULL, 0), PX_ERR_IO);
  assert_msg_has(path);
  assert_msg_has("No such file or directory");
  assert_int_equal(dir_entries(f->dir), 0);
  struct stat sb;
  assert_int_not_equal(stat(path, &sb), 0);
}

static void test_save_over_existing_file_replaces_it(void **state) {
  fixture_t *f = *state;
  save_fc(f);
  int32_t v[3] = {4, 5, 6};
  static const int64_t s3[] = {3};
  px_st_tensor_t t = tensor("only", PX_ST_I32, 1, s3, v);
  assert_int_equal(px_safetensors_save(f->path, &t, 1, NULL, 0), PX_OK);
  assert_int_equal(dir_entries(f->dir), 1); /* no temporary file left behind */
  px_safetensors_t *h = NULL;
  assert_int_equal(px_safetensors_open(f->path, &h), PX_OK);
  assert_int_equal(px_safetensors_count(h), 1);
  int32_t got[3];
  assert_int_equal(px_safetensors_read(h, "only", got, sizeof got), PX_OK);
  assert_memory_equal(got, v, sizeof v);
  px_safetensors_close(h);

  /* A save that fails keeps the old file. */
  t.data = NULL;
  assert_int_equal(px_safetensors_save(f->path, &t, 1, NULL, 0), PX_ERR_INVALID);
  assert_int_equal(px_safetensors_open(f->path, &h), PX_OK);
  assert_int_equal(px_safetensors_count(h), 1);
  px_safetensors_close(h);
  assert_int_equal(dir_entries(f->dir), 1);
}

/* ---- interoperability with a plain numpy reader ----------------------------------- */

/* The first python that can import numpy, or NULL. */
static const char *python_with_numpy(void) {
  static const char *const candidates[] = {"python3", "/usr/bin/python3"};
  for (size_t i = 0; i < sizeof candidates / sizeof candidates[0]; i++) {
    char cmd[128];
    snprintf(cmd, sizeof cmd, "%s -c 'import numpy' >/dev/null 2>&1", candidates[i]);
    if (system(cmd) == 0) return candidates[i];
  }
  return NULL;
}

static void expect_line(char *out, size_t cap, size_t *len, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
static void expect_line(char *out, size_t cap, size_t *len, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  int n = vsnprintf(out + *len, cap - *len, fmt, ap);
  va_end(ap);
  assert_true(n > 0 && (size_t)n < cap - *len);
  *len += (size_t)n;
}

static double element(const px_st_tensor_t *t, size_t i) {
  switch (t->dtype) {
    case PX_ST_F32: return ((const float *)t->data)[i];
    case PX_ST_F64: return ((const double *)t->data)[i];
    case PX_ST_I32: return ((const int32_t *)t->data)[i];
    case PX_ST_I64: return (double)((const int64_t *)t->data)[i];
    case PX_ST_U8: return ((const uint8_t *)t->data)[i];
    default: fail(); return 0;
  }
}

static int cmp_tensor_name(const void *a, const void *b) {
  return strcmp(((const px_st_tensor_t *)a)->name, ((const px_st_tensor_t *)b)->name);
}

static void test_numpy_reads_what_c_wrote(void **state) {
  fixture_t *f = *state;
  const char *py = python_with_numpy();
  if (!py) {
    printf("python3 with numpy not found: skipping the interoperability check\n");
    skip();
  }
  table_t tb;
  make_table(&tb, 15);
  const char *meta[] = {"format", "pt", "epoch", "17"};
  assert_int_equal(px_safetensors_save(f->path, tb.t, tb.n, meta, 2), PX_OK);

  /* What the reader must print: tensors by name, then metadata by key. The
   * values are exact in float64, so any summation order gives these sums. */
  char expect[4096];
  size_t elen = 0;
  px_st_tensor_t sorted[10];
  memcpy(sorted, tb.t, sizeof sorted);
  qsort(sorted, (size_t)tb.n, sizeof sorted[0], cmp_tensor_name);
  for (int i = 0; i < tb.n; i++) {
    const px_st_tensor_t *t = &sorted[i];
    double s = 0, ws = 0;
    for (size_t k = 0; k < numel(t); k++) {
      s += element(t, k);
      ws += element(t, k) * (double)k;
    }
    expect_line(expect, sizeof expect, &elen, "tensor %s %s [", t->name,
                px_st_dtype_name(t->dtype));
    for (int d = 0; d < t->ndim; d++) {
      expect_line(expect, sizeof expect, &elen, "%s%lld", d ? "," : "", (long long)t->shape[d]);
    }
    expect_line(expect, sizeof expect, &elen, "] %.17g %.17g\n", s, ws);
  }
  expect_line(expect, sizeof expect, &elen, "meta epoch 17\nmeta format pt\n");

  char cmd[512];
  snprintf(cmd, sizeof cmd, "%s '%s/tests/safetensors_read.py' '%s'", py, PX_SOURCE_DIR, f->path);
  FILE *p = popen(cmd, "r");
  assert_non_null(p);
  char got[4096];
  size_t glen = fread(got, 1, sizeof got - 1, p);
  got[glen] = '\0';
  int rc = pclose(p);
  assert_int_equal(rc, 0);
  assert_string_equal(got, expect);
}

int main(void) {
#define T(fn) cmocka_unit_test_setup_teardown(fn, setup, teardown)
  const struct CMUnitTest tests[] = {
      T(test_roundtrip_every_dtype_scalars_empty_and_metadata),
      T(test_enumeration_is_in_data_order_largest_dtype_first),
      T(test_load_into_fills_every_dst_strictly),
      T(test_names_needing_json_escapes_roundtrip),
      T(test_unicode_escapes_decode_to_utf8),
      T(test_empty_checkpoint_roundtrips),
      T(test_layout_is_byte_exact),
      T(test_load_wrong_shape_names_tensor_and_both_shapes),
      T(test_load_wrong_dtype_names_tensor_and_both_dtypes),
      T(test_load_missing_tensor_names_it),
      T(test_strict_load_rejects_extra_tensor_lenient_accepts),
      T(test_read_checks_size_and_name),
      T(test_corrupt_truncated_data),
      T(test_corrupt_truncated_header),
      T(test_corrupt_header_size_larger_than_file),
      T(test_corrupt_bad_json),
      T(test_corrupt_offsets_not_matching_shape),
      T(test_corrupt_overlapping_offsets),
      T(test_corrupt_gap_and_trailing_bytes),
      T(test_corrupt_unknown_dtype),
      T(test_corrupt_duplicate_keys),
      T(test_corrupt_nul_padding),
      T(test_corrupt_negative_or_overflowing_shape),
      T(test_huge_dims_with_a_zero_are_an_empty_tensor),
      T(test_missing_file_is_io_error_naming_it),
      T(test_save_rejects_bad_tables_and_writes_nothing),
      T(test_failed_save_into_missing_dir_leaves_no_file),
      T(test_save_over_existing_file_replaces_it),
      T(test_numpy_reads_what_c_wrote),
  };
#undef T
  return cmocka_run_group_tests(tests, NULL, NULL);
}
