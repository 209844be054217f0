/* The checkpoint files of the strategies' resumption (strategy/px_resume.h),
 * read and written by one real rank: files carry zlib's CRC-32 of their
 * buffers (format prunex-resume-2), a flipped data byte is caught, files of
 * the old FNV-1a format prunex-resume-1 are still read (a job restarted
 * across an upgrade resumes), a wrong old checksum is caught, and a format
 * from a newer build is refused. Apart from test_resume (whole runs that
 * resume) so that the sanitizer pass, which leaves the slow runs out, still
 * reads every kind of file. */
#include <inttypes.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cmocka.h>
#include <zlib.h>

#include "comm_harness.h"
#include "px_test_util.h"
#include "strategy/px_resume.h"

static char dir[256];

static int setup(void **state) {
  (void)state;
  snprintf(dir, sizeof dir, "/tmp/px_resume_format_XXXXXX");
  return mkdtemp(dir) ? 0 : -1;
}

static int teardown(void **state) {
  (void)state;
  px_th_rmdir(dir);
  return 0;
}

#define CK_A 1000
#define CK_B 37

/* The buffers' values as ck_main saves them. */
static void ck_values(float *a, uint8_t *b) {
  for (int i = 0; i < CK_A; i++) a[i] = (float)i * 0.5f - 7.0f;
  for (int i = 0; i < CK_B; i++) b[i] = (uint8_t)(i * 7 + 1);
}

/* One rank: saves two buffers at iteration 0 (shared[0..1]: 1 when saved),
 * or (arg "load") loads them back into zeroed buffers (shared[2]: the
 * iteration resumed from; shared[3]: 1 when the values came back). */
static int ck_main(px_th_ctx_t *ctx) {
  const char *mode = ctx->arg;
  px_comm_t *comm = NULL;
  PX_TH_OK(px_th_comm(ctx, NULL, &comm));
  char d[400];
  snprintf(d, sizeof d, "%s/cksum", dir);
  px__resume_t *rs = NULL;
  PX_TH_OK(px__resume_create(comm, d, 2, &rs));
  float a[CK_A], ra[CK_A];
  uint8_t b[CK_B], rb[CK_B];
  int load = !strcmp(mode, "load");
  ck_values(ra, rb);
  if (load) {
    memset(a, 0, sizeof a);
    memset(b, 0, sizeof b);
  } else {
    ck_values(a, b);
  }
  PX_TH_OK(px__resume_add(rs, "a", PX_RS_RANK, PX_ST_F32, a, sizeof a));
  PX_TH_OK(px__resume_add(rs, "b", PX_RS_RANK, PX_ST_U8, b, sizeof b));
  if (!load) {
    uint64_t bytes;
    double sec;
    PX_TH_OK(px__resume_save(rs, 0, &bytes, &sec));
    PX_TH_OK(px__resume_finish(rs, &sec));
    px_th_shared[0] = 1;
  } else {
    int it = -2, nf = 0, rf = 0;
    PX_TH_OK(px__resume_load(rs, &it, &nf, &rf));
    int same = !memcmp(a, ra, sizeof a) && !memcmp(b, rb, sizeof b);
    px_th_shared[2] = it;
    px_th_shared[3] = it == 0 && same;
  }
  px__resume_destroy(rs);
  px_comm_destroy(comm);
  return 0;
}

/* Rewrites the checkpoint with format `fmt`, checksum `sum` and, when
 * flip >= 0, byte `flip` of buffer a changed. */
static void ck_rewrite(const char *path, const char *fmt, const char *sum, int flip) {
  px_safetensors_t *f = NULL;
  assert_int_equal(px_safetensors_open(path, &f), PX_OK);
  float a[CK_A]; /* the saved values (a flip of an earlier rewrite undone) */
  uint8_t b[CK_B];
  ck_values(a, b);
  const char *meta[10];
  int nm = px_safetensors_meta_count(f);
  assert_int_equal(nm, 5);
  for (int i = 0; i < nm; i++) {
    px_safetensors_meta_at(f, i, &meta[2 * i], &meta[2 * i + 1]);
    if (!strcmp(meta[2 * i], "format")) meta[2 * i + 1] = fmt;
    if (!strcmp(meta[2 * i], "checksum")) meta[2 * i + 1] = sum;
  }
  if (flip >= 0) ((uint8_t *)a)[flip] ^= 0x10;
  px_st_tensor_t t[2] = {{"a", PX_ST_F32, 1, {CK_A}, a, NULL}, {"b", PX_ST_U8, 1, {CK_B}, b, NULL}};
  char tmp[600];
  snprintf(tmp, sizeof tmp, "%s.new", path);
  assert_int_equal(px_safetensors_save(tmp, t, 2, meta, nm), PX_OK);
  px_safetensors_close(f);
  assert_int_equal(rename(tmp, path), 0);
}

static double ck_load(void) {
  int one = 0;
  px_th_shared[2] = -3;
  px_th_shared[3] = 0;
  assert_int_equal(px_th_run(1, &one, ck_main, "load", 60), 0);
  return px_th_shared[3] ? 0 : px_th_shared[2] == 0 ? -2 : px_th_shared[2];
}

static void test_checkpoints_carry_crc32_and_old_files_still_load(void **state) {
  (void)state;
  int one = 0;
  assert_int_equal(px_th_run(1, &one, ck_main, "save", 60), 0);
  char path[600];
  snprintf(path, sizeof path, "%s/cksum/ckpt-%08d-r0.safetensors", dir, 0);
  /* what the file says: the format and zlib's CRC-32 of a then b */
  float a[CK_A];
  uint8_t b[CK_B];
  ck_values(a, b);
  uLong crc = crc32(crc32(0, (const Bytef *)a, sizeof a), b, sizeof b);
  char want[32];
  snprintf(want, sizeof want, "%08lx", crc);
  px_safetensors_t *f = NULL;
  assert_int_equal(px_safetensors_open(path, &f), PX_OK);
  assert_string_equal(px_safetensors_meta(f, "format"), "prunex-resume-2");
  assert_string_equal(px_safetensors_meta(f, "checksum"), want);
  px_safetensors_close(f);
  assert_true(ck_load() == 0); /* read back whole */
  /* one flipped bit in the data, checksum unchanged: not used */
  ck_rewrite(path, "prunex-resume-2", want, 5);
  assert_true(ck_load() == -1);
  /* the old format with its FNV-1a checksum over the same bytes: used */
  uint64_t h = 0xcbf29ce484222325ull;
  for (size_t i = 0; i < sizeof a; i++) h = (h ^ ((uint8_t *)a)[i]) * 0x100000001b3ull;
  for (size_t i = 0; i < sizeof b; i++) h = (h ^ b[i]) * 0x100000001b3ull;
  char fnv[32];
  snprintf(fnv, sizeof fnv, "%016" PRIx64, h);
  ck_rewrite(path, "prunex-resume-1", fnv, -1);
  assert_true(ck_load() == 0);
  /* the old format with a wrong checksum, and a format from a newer build */
  ck_rewrite(path, "prunex-resume-1", "0123456789abcdef", -1);
  assert_true(ck_load() == -1);
  ck_rewrite(path, "prunex-resume-3", want, -1);
  assert_true(ck_load() == -1);
}

int main(int argc, char **argv) {
  px_th_init(argc, argv);
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_checkpoints_carry_crc32_and_old_files_still_load),
  };
  return cmocka_run_group_tests(tests, setup, teardown);
}
