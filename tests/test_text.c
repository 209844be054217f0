/* prunex/text.h: the one buffer, UTF-8 check, JSON quoting, atomic file
 * write and mkdir -p that the library, the daemons and pxctl share. */
#include <dirent.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cmocka.h>

#include "prunex/text.h"

static void buffer_grows_and_counts(void **state) {
  (void)state;
  px_buf_t b = {0};
  for (int i = 0; i < 1000; i++) px_buf_printf(&b, "%d,", i % 10);
  assert_false(b.oom);
  assert_int_equal(b.len, 2000);
  assert_int_equal(strlen(b.p), 2000);
  assert_memory_equal(b.p, "0,1,2,", 6);
  px_buf_reset(&b);
  assert_int_equal(b.len, 0);
  assert_string_equal(b.p, "");
  px_buf_puts(&b, "x");
  px_buf_put(&b, "yz", 2);
  assert_string_equal(b.p, "xyz");
  px_buf_free(&b);
  assert_null(b.p);
  assert_int_equal(b.cap, 0);
}

static void utf8_accepts_valid_and_refuses_the_rest(void **state) {
  (void)state;
  assert_true(px_utf8_valid("plain", 5));
  assert_true(px_utf8_valid("\xc3\xa9t\xc3\xa9", 5));          /* été */
  assert_true(px_utf8_valid("\xe2\x82\xac", 3));               /* euro sign */
  assert_true(px_utf8_valid("\xf0\x9f\x98\x80", 4));           /* U+1F600 */
  assert_true(px_utf8_valid("\xf4\x8f\xbf\xbf", 4));           /* U+10FFFF */
  assert_false(px_utf8_valid("\xc0\xaf", 2));                  /* overlong '/' */
  assert_false(px_utf8_valid("\xe0\x80\xaf", 3));              /* overlong, 3 bytes */
  assert_false(px_utf8_valid("\xf0\x80\x80\xaf", 4));          /* overlong, 4 bytes */
  assert_false(px_utf8_valid("\xed\xa0\x80", 3));              /* surrogate */
  assert_false(px_utf8_valid("\xf4\x90\x80\x80", 4));          /* beyond U+10FFFF */
  assert_false(px_utf8_valid("\xe2\x82", 2));                  /* cut */
  assert_false(px_utf8_valid("\x80", 1));                      /* lone continuation */
  assert_false(px_utf8_valid("a\0b", 3));                      /* NUL inside */
  assert_int_equal(px_utf8_seq("\xe2\x82\xac!", 4), 3);
  assert_true(px_text_ok("job \xc3\xa9"));
  assert_false(px_text_ok("tab\there"));
  assert_false(px_text_ok("del\x7f"));
  assert_false(px_text_ok("bad \xff"));
}

static void utf8_clean_replaces_and_never_cuts(void **state) {
  (void)state;
  char out[16];
  px_utf8_clean("a\xff" "b\xc3\xa9", out, sizeof out);
  assert_string_equal(out, "a?b\xc3\xa9");
  px_utf8_clean("ab\xe2\x82\xac", out, 4); /* room for "ab" and a NUL only */
  assert_string_equal(out, "ab");
}

static void json_strings_are_valid_json(void **state) {
  (void)state;
  px_buf_t b = {0};
  const char in[] = "q\"b\\n\nt\tc\x01" "d\x7f" "e\xc3\xa9" "x\xff" "y";
  px_buf_json_string(&b, in, sizeof in - 1);
  assert_false(b.oom);
  assert_string_equal(b.p, "\"q\\\"b\\\\n\\nt\\tc\\u0001d\\u007fe\xc3\xa9x\\ufffdy\"");
  px_buf_reset(&b);
  px_buf_json_string(&b, "", 0);
  assert_string_equal(b.p, "\"\"");
  px_buf_free(&b);
}

/* Files of dir other than . and .. (temporary files left behind show here). */
static int dir_entries(const char *dir) {
  DIR *d = opendir(dir);
  assert_non_null(d);
  int n = 0;
  for (struct dirent *e; (e = readdir(d));)
    if (strcmp(e->d_name, ".") && strcmp(e->d_name, "..")) n++;
  closedir(d);
  return n;
}

static void atomic_write_replaces_whole_files_and_leaves_nothing(void **state) {
  (void)state;
  char dir[] = "/tmp/px-text-XXXXXX";
  assert_non_null(mkdtemp(dir));
  char path[256], got[64];
  snprintf(path, sizeof path, "%s/file", dir);
  assert_int_equal(px_file_write_atomic(path, "first", 5, 0600, 0), PX_OK);
  assert_int_equal(px_file_write_atomic(path, "second", 6, 0600, PX_FILE_NO_SYNC), PX_OK);
  FILE *f = fopen(path, "r");
  assert_non_null(f);
  size_t n = fread(got, 1, sizeof got - 1, f);
  got[n] = '\0';
  fclose(f);
  assert_string_equal(got, "second");
  struct stat sb;
  assert_int_equal(stat(path, &sb), 0);
  assert_int_equal(sb.st_mode & 0777, 0600);
  assert_int_equal(dir_entries(dir), 1);

  /* streamed in pieces; an abort leaves the old file and no temporary */
  px_atomic_file_t a;
  assert_int_equal(px_atomic_file_open(&a, path, 0644, 0), PX_OK);
  assert_int_equal(px_atomic_file_write(&a, "par", 3), PX_OK);
  assert_int_equal(dir_entries(dir), 2);
  px_atomic_file_abort(&a);
  assert_int_equal(dir_entries(dir), 1);
  assert_int_equal(px_atomic_file_open(&a, path, 0644, 0), PX_OK);
  assert_int_equal(px_atomic_file_write(&a, "thi", 3), PX_OK);
  assert_int_equal(px_atomic_file_write(&a, "rd", 2), PX_OK);
  assert_int_equal(px_atomic_file_commit(&a), PX_OK);
  f = fopen(path, "r");
  n = fread(got, 1, sizeof got - 1, f);
  got[n] = '\0';
  fclose(f);
  assert_string_equal(got, "third");

  /* a destination that cannot be replaced (a non-empty directory): named,
   * and nothing left behind */
  char sub[256], inner[300];
  snprintf(sub, sizeof sub, "%s/sub", dir);
  assert_int_equal(mkdir(sub, 0700), 0);
  snprintf(inner, sizeof inner, "%s/x", sub);
  assert_int_equal(px_file_write_atomic(inner, "x", 1, 0600, 0), PX_OK);
  assert_int_equal(px_file_write_atomic(sub, "y", 1, 0600, 0), PX_ERR_IO);
  assert_non_null(strstr(px_last_error(), sub));
  assert_int_equal(dir_entries(dir), 2);
  /* a missing directory */
  char missing[300];
  snprintf(missing, sizeof missing, "%s/none/file", dir);
  assert_int_equal(px_file_write_atomic(missing, "z", 1, 0600, 0), PX_ERR_IO);
  assert_non_null(strstr(px_last_error(), missing));

  unlink(inner);
  rmdir(sub);
  unlink(path);
  assert_int_equal(rmdir(dir), 0);
}

static void mkdirs_makes_parents_and_names_what_fails(void **state) {
  (void)state;
  char dir[] = "/tmp/px-mkdirs-XXXXXX";
  assert_non_null(mkdtemp(dir));
  char deep[256], file[256], under[300];
  snprintf(deep, sizeof deep, "%s/a/b/c/", dir);
  assert_int_equal(px_mkdirs(deep, 0750), PX_OK);
  struct stat sb;
  assert_int_equal(stat(deep, &sb), 0);
  assert_true(S_ISDIR(sb.st_mode));
  assert_int_equal(px_mkdirs(deep, 0750), PX_OK); /* existing: fine */
  /* a file in the way: the component is named */
  snprintf(file, sizeof file, "%s/a/f", dir);
  FILE *f = fopen(file, "w");
  assert_non_null(f);
  fclose(f);
  assert_int_equal(px_mkdirs(file, 0750), PX_ERR_IO);
  assert_non_null(strstr(px_last_error(), "not a directory"));
  snprintf(under, sizeof under, "%s/g", file);
  assert_int_equal(px_mkdirs(under, 0750), PX_ERR_IO);
  assert_non_null(strstr(px_last_error(), file));
  assert_int_equal(px_mkdirs("", 0750), PX_ERR_INVALID);
  char name[300];
  const char *parts[] = {"a/b/c", "a/b", "a/f", "a"};
  for (int i = 0; i < 4; i++) {
    snprintf(name, sizeof name, "%s/%s", dir, parts[i]);
    assert_int_equal(i == 2 ? unlink(name) : rmdir(name), 0);
  }
  assert_int_equal(rmdir(dir), 0);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(buffer_grows_and_counts),
      cmocka_unit_test(utf8_accepts_valid_and_refuses_the_rest),
      cmocka_unit_test(utf8_clean_replaces_and_never_cuts),
      cmocka_unit_test(json_strings_are_valid_json),
      cmocka_unit_test(atomic_write_replaces_whole_files_and_leaves_nothing),
      cmocka_unit_test(mkdirs_makes_parents_and_names_what_fails),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
