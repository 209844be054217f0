/* The logger's limit on repeated lines (one WARN line per refused
 * connection wrote 146,000 lines in a minute): a cause (call site and
 * level) writes its burst per interval, then is counted, and its next line
 * after the interval says how many were suppressed; causes are counted
 * apart; burst 0 and PX_LOG_RATE=0 write every line.
 *
 * stderr is sent to a file for each test and read back. */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <fcntl.h>
#include <spawn.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>
#include <cmocka.h>

#include "prunex/px.h"

extern char **environ;

static char g_path[64];
static int g_saved = -1;

static int64_t now_ms(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

/* stderr to a fresh file until capture_end. */
static void capture_begin(void) {
  snprintf(g_path, sizeof g_path, "/tmp/px-log-rate-XXXXXX");
  int fd = mkstemp(g_path);
  assert_true(fd >= 0);
  fflush(stderr);
  g_saved = dup(2);
  assert_true(g_saved >= 0);
  assert_int_equal(dup2(fd, 2), 2);
  close(fd);
}

/* Restores stderr; returns what was written (caller frees). */
static char *capture_end(void) {
  fflush(stderr);
  dup2(g_saved, 2);
  close(g_saved);
  FILE *f = fopen(g_path, "r");
  assert_non_null(f);
  char *buf = calloc(1, 1 << 24);
  assert_non_null(buf);
  size_t n = fread(buf, 1, (1 << 24) - 1, f);
  buf[n] = '\0';
  fclose(f);
  unlink(g_path);
  return buf;
}

static int count(const char *text, const char *needle) {
  int n = 0;
  for (const char *p = text; (p = strstr(p, needle)) != NULL; p += strlen(needle)) n++;
  return n;
}

/* One call site for every line of a test (one cause per level). */
static void refused(px_log_level_t level, int i) {
  px_log(level, "http: connection %d refused", i);
}

static int setup(void **state) {
  (void)state;
  px_log_set_level(PX_LOG_WARN);
  return 0;
}

/* 100,000 identical warnings in a tight loop (well inside one 10 s
 * interval): the burst of 10 is written, nothing more. */
static void test_100000_identical_warnings_write_only_the_burst(void **state) {
  (void)state;
  px_log_set_rate(PX_LOG_RATE_BURST, PX_LOG_RATE_INTERVAL_MS);
  capture_begin();
  int64_t t0 = now_ms();
  for (int i = 0; i < 100000; i++) refused(PX_LOG_WARN, i);
  int64_t took = now_ms() - t0;
  char *out = capture_end();
  int lines = count(out, "\n");
  if (took < PX_LOG_RATE_INTERVAL_MS && lines != PX_LOG_RATE_BURST)
    fail_msg("%d lines in %lld ms, want %d", lines, (long long)took, PX_LOG_RATE_BURST);
  assert_true(lines <= 2 * PX_LOG_RATE_BURST + 1);
  assert_int_equal(count(out, "connection 9 refused"), 1);
  assert_int_equal(count(out, "connection 10 refused"), 0);
  free(out);
}

/* After the interval the cause's next line carries the count of those
 * suppressed, and a new burst starts. */
static void test_the_next_line_counts_the_suppressed(void **state) {
  (void)state;
  px_log_set_rate(3, 300);
  capture_begin();
  for (int i = 0; i < 1000; i++) refused(PX_LOG_WARN, i);
  struct timespec ts = {0, 400 * 1000000L};
  nanosleep(&ts, NULL);
  refused(PX_LOG_WARN, 1000);
  refused(PX_LOG_WARN, 1001);
  char *out = capture_end();
  if (count(out, "\n") != 5 ||
      !strstr(out, "connection 1000 refused (997 similar lines suppressed in the last 0.") ||
      count(out, "suppressed") != 1)
    fail_msg("unexpected log:\n%s", out);
  free(out);
}

/* Two call sites, and one call site at two levels, are three causes: a
 * flood of one does not silence another. */
static void test_causes_are_limited_apart(void **state) {
  (void)state;
  px_log_set_rate(2, 10000);
  capture_begin();
  for (int i = 0; i < 50; i++) {
    refused(PX_LOG_WARN, i);
    refused(PX_LOG_ERROR, i);
    px_log(PX_LOG_WARN, "another cause %d", i);
  }
  char *out = capture_end();
  assert_int_equal(count(out, "\n"), 6);
  assert_int_equal(count(out, "WARN "), 4);
  assert_int_equal(count(out, "ERROR"), 2);
  assert_int_equal(count(out, "another cause"), 2);
  free(out);
}

/* Debug lines are never limited (px_set_error logs every error from one
 * call site at debug). */
static void test_debug_lines_are_not_limited(void **state) {
  (void)state;
  px_log_set_level(PX_LOG_DEBUG);
  px_log_set_rate(PX_LOG_RATE_BURST, PX_LOG_RATE_INTERVAL_MS);
  capture_begin();
  for (int i = 0; i < 100; i++) refused(PX_LOG_DEBUG, i);
  char *out = capture_end();
  assert_int_equal(count(out, "\n"), 100);
  free(out);
}

/* Burst 0 (the library's default, for programs other than the daemons):
 * every line is written. */
static void test_burst_zero_writes_every_line(void **state) {
  (void)state;
  px_log_set_rate(0, PX_LOG_RATE_INTERVAL_MS);
  capture_begin();
  for (int i = 0; i < 1000; i++) refused(PX_LOG_WARN, i);
  char *out = capture_end();
  assert_int_equal(count(out, "\n"), 1000);
  free(out);
}

/* The child of the next test: a daemon's setting, 1000 identical lines. */
static int child_main(void) {
  px_log_set_level(PX_LOG_WARN);
  px_log_set_rate(PX_LOG_RATE_BURST, PX_LOG_RATE_INTERVAL_MS);
  for (int i = 0; i < 1000; i++) refused(PX_LOG_WARN, i);
  return 0;
}

/* Runs this program as the child with PX_LOG_RATE=value; its line count. */
static int child_lines(const char *self, const char *value) {
  char env_rate[64];
  snprintf(env_rate, sizeof env_rate, "PX_LOG_RATE=%s", value);
  char *envp[] = {env_rate, "PX_LOG_LEVEL=warn", NULL};
  char path[64];
  snprintf(path, sizeof path, "/tmp/px-log-rate-child-XXXXXX");
  int fd = mkstemp(path);
  assert_true(fd >= 0);
  close(fd);
  posix_spawn_file_actions_t fa;
  posix_spawn_file_actions_init(&fa);
  posix_spawn_file_actions_addopen(&fa, 2, path, O_WRONLY | O_TRUNC, 0600);
  char *argv[] = {(char *)self, "--child", NULL};
  pid_t pid;
  assert_int_equal(posix_spawn(&pid, self, &fa, NULL, argv, envp), 0);
  posix_spawn_file_actions_destroy(&fa);
  int status = 0;
  assert_int_equal(waitpid(pid, &status, 0), pid);
  assert_true(WIFEXITED(status) && WEXITSTATUS(status) == 0);
  FILE *f = fopen(path, "r");
  assert_non_null(f);
  int lines = 0, ch;
  while ((ch = fgetc(f)) != EOF) lines += ch == '\n';
  fclose(f);
  unlink(path);
  return lines;
}

/* PX_LOG_RATE wins over the program's setting: "0" writes every line,
 * "BURST/SECONDS" sets another burst; a malformed value is ignored. */
static void test_px_log_rate_overrides_the_program(void **state) {
  (void)state;
  assert_int_equal(child_lines("/proc/self/exe", "0"), 1000);
  assert_int_equal(child_lines("/proc/self/exe", "4/60"), 4);
  assert_int_equal(child_lines("/proc/self/exe", "lots"), PX_LOG_RATE_BURST);
}

int main(int argc, char **argv) {
  if (argc > 1 && !strcmp(argv[1], "--child")) return child_main();
  (void)argv;
  const struct CMUnitTest tests[] = {
      cmocka_unit_test_setup(test_100000_identical_warnings_write_only_the_burst, setup),
      cmocka_unit_test_setup(test_the_next_line_counts_the_suppressed, setup),
      cmocka_unit_test_setup(test_causes_are_limited_apart, setup),
      cmocka_unit_test_setup(test_debug_lines_are_not_limited, setup),
      cmocka_unit_test_setup(test_burst_zero_writes_every_line, setup),
      cmocka_unit_test_setup(test_px_log_rate_overrides_the_program, setup),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
