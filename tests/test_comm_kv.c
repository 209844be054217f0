/* The directory rendezvous store (px_kv_open_dir): values round-trip byte
 * for byte (empty and binary ones too), a put replaces, keys with '/' and
 * ':' and 255-byte keys map to distinct files, a missing key times out near
 * its deadline, a get waits for a put made later by another process, no
 * temporary file is left behind, and nothing leaks. */
#include <dirent.h>
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <cmocka.h>

#include "comm_harness.h"

typedef struct {
  char dir[64];
  px_kv_t *kv;
  px_mem_stats_t before;
} kv_fixture_t;

static int setup(void **state) {
  kv_fixture_t *f = calloc(1, sizeof *f);
  snprintf(f->dir, sizeof f->dir, "/tmp/pxkv-XXXXXX");
  if (!mkdtemp(f->dir)) return -1;
  px_mem_stats(&f->before);
  /* a nested directory that does not exist yet */
  char sub[128];
  snprintf(sub, sizeof sub, "%s/a/b", f->dir);
  if (px_kv_open_dir(sub, &f->kv) != PX_OK) return -1;
  *state = f;
  return 0;
}

static int teardown(void **state) {
  kv_fixture_t *f = *state;
  px_kv_destroy(f->kv);
  px_mem_stats_t after;
  px_mem_stats(&after);
  assert_int_equal(after.live_bytes, f->before.live_bytes);
  char sub[128];
  snprintf(sub, sizeof sub, "%s/a/b", f->dir);
  px_th_rmdir(sub);
  snprintf(sub, sizeof sub, "%s/a", f->dir);
  rmdir(sub);
  rmdir(f->dir);
  free(f);
  return 0;
}

static void check_value(px_kv_t *kv, const char *key, const void *want, size_t want_len) {
  void *val = NULL;
  size_t len = 99;
  assert_int_equal(px_kv_get(kv, key, 0, &val, &len), PX_OK);
  assert_int_equal(len, want_len);
  if (want_len) assert_memory_equal(val, want, want_len);
  px_free(val);
}

static void test_kv_roundtrip_and_replace(void **state) {
  kv_fixture_t *f = *state;
  const unsigned char bin[] = {0, 1, 2, 0, 255, 0};
  assert_int_equal(px_kv_put(f->kv, "job/1/ucx/0", bin, sizeof bin), PX_OK);
  check_value(f->kv, "job/1/ucx/0", bin, sizeof bin);
  assert_int_equal(px_kv_put(f->kv, "job/1/ucx/0", "xyz", 3), PX_OK);
  check_value(f->kv, "job/1/ucx/0", "xyz", 3);
  assert_int_equal(px_kv_put(f->kv, "empty", NULL, 0), PX_OK);
  check_value(f->kv, "empty", NULL, 0);
}

static void test_kv_keys_with_separators_are_distinct(void **state) {
  kv_fixture_t *f = *state;
  const char *keys[] = {"a/b", "a:b", "a_b", "a.b", "a-b", "a/b/", "/a/b", "a//b", ".", "..", "a%"};
  int nk = 10; /* the last one is not a valid key */
  for (int i = 0; i < nk; i++) assert_int_equal(px_kv_put(f->kv, keys[i], keys[i], strlen(keys[i])), PX_OK);
  for (int i = 0; i < nk; i++) check_value(f->kv, keys[i], keys[i], strlen(keys[i]));
  assert_int_equal(px_kv_put(f->kv, keys[nk], "x", 1), PX_ERR_INVALID);
  assert_int_equal(px_kv_put(f->kv, "", "x", 1), PX_ERR_INVALID);
}

static void test_kv_long_keys(void **state) {
  kv_fixture_t *f = *state;
  /* 255 bytes, mostly separators (3 bytes each once encoded): too long for
   * a file name, so hashed; two keys differing in one byte stay distinct */
  char k1[256], k2[256], k3[257];
  for (int i = 0; i < 255; i++) k1[i] = i % 3 == 0 ? '/' : i % 3 == 1 ? ':' : 'x';
  k1[255] = '\0';
  memcpy(k2, k1, sizeof k2);
  k2[253] = 'y';
  assert_int_equal(px_kv_put(f->kv, k1, "one", 3), PX_OK);
  assert_int_equal(px_kv_put(f->kv, k2, "two", 3), PX_OK);
  check_value(f->kv, k1, "one", 3);
  check_value(f->kv, k2, "two", 3);
  memset(k3, 'c', 256);
  k3[256] = '\0';
  assert_int_equal(px_kv_put(f->kv, k3, "x", 1), PX_ERR_INVALID);
}

static void test_kv_missing_key_times_out(void **state) {
  kv_fixture_t *f = *state;
  void *val = (void *)1;
  size_t len = 5;
  double t0 = px_th_now_ms();
  assert_int_equal(px_kv_get(f->kv, "nobody/here", 150, &val, &len), PX_ERR_TIMEOUT);
  double dt = px_th_now_ms() - t0;
  assert_true(dt >= 140 && dt < 2000);
  assert_null(val);
  assert_int_equal(len, 0);
  assert_non_null(strstr(px_last_error(), "nobody/here"));
}

static void test_kv_get_waits_for_a_later_put(void **state) {
  kv_fixture_t *f = *state;
  char sub[128];
  snprintf(sub, sizeof sub, "%s/a/b", f->dir);
  pid_t pid = fork();
  if (pid == 0) {
    struct timespec ts = {0, 200 * 1000000};
    nanosleep(&ts, NULL);
    px_kv_t *kv = NULL;
    if (px_kv_open_dir(sub, &kv) != PX_OK) _exit(1);
    int rc = px_kv_put(kv, "late:key", "hello", 5) != PX_OK;
    px_kv_destroy(kv);
    _exit(rc);
  }
  double t0 = px_th_now_ms();
  void *val = NULL;
  size_t len = 0;
  assert_int_equal(px_kv_get(f->kv, "late:key", 10000, &val, &len), PX_OK);
  double dt = px_th_now_ms() - t0;
  assert_int_equal(len, 5);
  assert_memory_equal(val, "hello", 5);
  px_free(val);
  assert_true(dt >= 150 && dt < 5000);
  int ws = 0;
  assert_int_equal(waitpid(pid, &ws, 0), pid);
  assert_true(WIFEXITED(ws) && WEXITSTATUS(ws) == 0);
}

static void test_kv_leaves_no_temporary_files(void **state) {
  kv_fixture_t *f = *state;
  for (int i = 0; i < 50; i++) {
    char key[32];
    snprintf(key, sizeof key, "k/%d", i % 5);
    assert_int_equal(px_kv_put(f->kv, key, key, strlen(key)), PX_OK);
  }
  char sub[128];
  snprintf(sub, sizeof sub, "%s/a/b", f->dir);
  DIR *d = opendir(sub);
  assert_non_null(d);
  struct dirent *e;
  int files = 0;
  while ((e = readdir(d)) != NULL) {
    if (e->d_name[0] == '.' && (e->d_name[1] == '\0' || !strcmp(e->d_name, ".."))) continue;
    assert_true(e->d_name[0] != '.'); /* no temporary file */
    files++;
  }
  closedir(d);
  assert_int_equal(files, 5);
}

static void test_kv_open_dir_rejects_a_file(void **state) {
  (void)state;
  char path[] = "/tmp/pxkvfile-XXXXXX";
  int fd = mkstemp(path);
  assert_true(fd >= 0);
  close(fd);
  px_kv_t *kv = (px_kv_t *)1;
  assert_int_equal(px_kv_open_dir(path, &kv), PX_ERR_IO);
  assert_null(kv);
  unlink(path);
}

int main(int argc, char **argv) {
  (void)argc;
  (void)argv;
  const struct CMUnitTest tests[] = {
      cmocka_unit_test_setup_teardown(test_kv_roundtrip_and_replace, setup, teardown),
      cmocka_unit_test_setup_teardown(test_kv_keys_with_separators_are_distinct, setup, teardown),
      cmocka_unit_test_setup_teardown(test_kv_long_keys, setup, teardown),
      cmocka_unit_test_setup_teardown(test_kv_missing_key_times_out, setup, teardown),
      cmocka_unit_test_setup_teardown(test_kv_get_waits_for_a_later_put, setup, teardown),
      cmocka_unit_test_setup_teardown(test_kv_leaves_no_temporary_files, setup, teardown),
      cmocka_unit_test(test_kv_open_dir_rejects_a_file),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
