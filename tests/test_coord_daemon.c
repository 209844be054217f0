/* pxcoordd as a program: --help and --version, bad flags and bad config
 * files (exit 2 with a message naming the problem), config files in both
 * formats (`key = value` and YAML) with flags overriding them, the
 * --heartbeat-timeout-ms setting reaching the agents, SIGHUP applying only
 * the reloadable settings, one coordinator per database, and an address
 * already in use (exit 1). */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>

#include <cmocka.h>

#include "coord_harness.h"

typedef struct {
  char dir[256];
  char db[320];
  char out[4096], err[4096];
} fixture_t;

static int setup(void **state) {
  fixture_t *f = calloc(1, sizeof *f);
  if (!f || pxt_mkdtemp(f->dir, sizeof f->dir) != 0) return -1;
  snprintf(f->db, sizeof f->db, "%s/coord.db", f->dir);
  *state = f;
  return 0;
}

static int teardown(void **state) {
  fixture_t *f = *state;
  pxt_rmtree(f->dir);
  free(f);
  return 0;
}

static int run(fixture_t *f, const char *const *args) {
  return pxt_coordd_run(f->dir, args, f->out, sizeof f->out, f->err, sizeof f->err, 20000);
}

static void write_text(const char *path, const char *text) {
  FILE *fp = fopen(path, "w");
  assert_non_null(fp);
  fputs(text, fp);
  fclose(fp);
}

static void test_help_and_version(void **state) {
  fixture_t *f = *state;
  const char *help[] = {"--help", NULL};
  assert_int_equal(run(f, help), 0);
  assert_non_null(strstr(f->out, "--heartbeat-timeout-ms"));
  assert_non_null(strstr(f->out, "default 127.0.0.1:7070"));
  assert_non_null(strstr(f->out, "default 15000"));
  const char *version[] = {"--version", NULL};
  assert_int_equal(run(f, version), 0);
  assert_non_null(strstr(f->out, "pxcoordd "));
}

static void expect_usage_error(fixture_t *f, const char *const *args, const char *what) {
  int rc = run(f, args);
  if (rc != 2 || !strstr(f->err, what))
    fail_msg("expected exit 2 mentioning '%s', got %d: %s", what, rc, f->err);
}

static void test_bad_flags_exit_2(void **state) {
  fixture_t *f = *state;
  const char *no_db[] = {"--listen", "127.0.0.1:0", NULL};
  expect_usage_error(f, no_db, "--db");
  const char *unknown[] = {"--db", f->db, "--frobnicate", NULL};
  expect_usage_error(f, unknown, "--frobnicate");
  const char *missing[] = {"--db", NULL};
  expect_usage_error(f, missing, "--db needs a value");
  const char *timeout[] = {"--db", f->db, "--heartbeat-timeout-ms", "soon", NULL};
  expect_usage_error(f, timeout, "heartbeat_timeout_ms");
  const char *listen[] = {"--db", f->db, "--listen", "nowhere", NULL};
  expect_usage_error(f, listen, "HOST:PORT");
  const char *port[] = {"--db", f->db, "--listen=127.0.0.1:99999", NULL};
  expect_usage_error(f, port, "port");
  const char *level[] = {"--db", f->db, "--log-level", "loud", NULL};
  expect_usage_error(f, level, "log_level");
  const char *config[] = {"--db", f->db, "--config", "/nonexistent/pxcoordd.conf", NULL};
  expect_usage_error(f, config, "/nonexistent/pxcoordd.conf");
  /* Nothing was created for a run that never started. */
  assert_int_not_equal(access(f->db, F_OK), 0);
}

static void test_bad_config_files_exit_2_naming_file_and_line(void **state) {
  fixture_t *f = *state;
  char conf[400];
  snprintf(conf, sizeof conf, "%s/bad.conf", f->dir);
  write_text(conf, "# settings\nlisten = 127.0.0.1:0\ncolour = blue\n");
  const char *args[] = {"--db", f->db, "--config", conf, NULL};
  char where[420];
  snprintf(where, sizeof where, "%s:3", conf);
  expect_usage_error(f, args, where);
  assert_non_null(strstr(f->err, "colour"));
  write_text(conf, "listen = 127.0.0.1:0\nheartbeat_timeout_ms = -5\n");
  snprintf(where, sizeof where, "%s:2", conf);
  expect_usage_error(f, args, where);
  snprintf(conf, sizeof conf, "%s/bad.yaml", f->dir);
  write_text(conf, "listen: 127.0.0.1:0\nlog_level: [a, b]\n");
  const char *yargs[] = {"--db", f->db, "--config", conf, NULL};
  snprintf(where, sizeof where, "%s:2", conf);
  expect_usage_error(f, yargs, where);
  write_text(conf, "listen: 127.0.0.1:0\n  bad: indentation: here\n");
  expect_usage_error(f, yargs, conf);
}

static int registered_timeout(const char *target) {
  px_rpc_channel_t *ch = NULL;
  assert_int_equal(px_rpc_channel_create(target, &ch), PX_OK);
  Prunex__V1__RegisterNodeRequest req = PRUNEX__V1__REGISTER_NODE_REQUEST__INIT;
  req.name = "n";
  Prunex__V1__RegisterNodeResponse *r = NULL;
  assert_int_equal(px_rpc_register_node(ch, &req, 0, &r), PX_OK);
  int t = r->heartbeat_timeout_ms;
  assert_true(r->heartbeat_interval_ms > 0 && r->heartbeat_interval_ms <= t / 2);
  px_rpc_message_free(r);
  px_rpc_channel_destroy(ch);
  return t;
}

static void test_config_files_in_both_formats(void **state) {
  fixture_t *f = *state;
  pxt_coordd_t d;
  memset(&d, 0, sizeof d);
  snprintf(d.dir, sizeof d.dir, "%s", f->dir);
  snprintf(d.db, sizeof d.db, "%s", f->db);
  char conf[400];
  /* key = value: the database and the timeout come from the file. */
  snprintf(conf, sizeof conf, "%s/coordd.conf", f->dir);
  char text[1024];
  snprintf(text, sizeof text,
           "# pxcoordd settings\n\ndb = \"%s/from-config.db\"\nheartbeat-timeout-ms = 2500\n"
           "log_level = warn   # quiet\n",
           f->dir);
  write_text(conf, text);
  const char *extra[] = {"--config", conf, NULL};
  snprintf(d.db, sizeof d.db, "%s/ignored-by-config.db", f->dir);
  /* pxt_coordd_start passes --db d.db: the flag must win over the file. */
  assert_int_equal(pxt_coordd_start(&d, extra), 0);
  assert_int_equal(registered_timeout(d.target), 2500);
  assert_int_equal(pxt_coordd_stop(&d, SIGTERM), 0);
  assert_int_equal(access(d.db, F_OK), 0);
  /* YAML; a flag overrides the file's timeout. */
  snprintf(conf, sizeof conf, "%s/coordd.yaml", f->dir);
  write_text(conf, "---\n# pxcoordd\nheartbeat_timeout_ms: 3500\nlog_level: info\n");
  const char *yextra[] = {"--config", conf, NULL};
  assert_int_equal(pxt_coordd_start(&d, yextra), 0);
  assert_int_equal(registered_timeout(d.target), 3500);
  assert_int_equal(pxt_coordd_stop(&d, SIGTERM), 0);
  const char *flag_wins[] = {"--config", conf, "--heartbeat-timeout-ms=900", NULL};
  assert_int_equal(pxt_coordd_start(&d, flag_wins), 0);
  assert_int_equal(registered_timeout(d.target), 900);
  assert_int_equal(pxt_coordd_stop(&d, SIGTERM), 0);
  /* Only the config file names the database. */
  snprintf(conf, sizeof conf, "%s/db-only.conf", f->dir);
  snprintf(text, sizeof text, "db = %s/from-config.db\nlisten = 127.0.0.1:0\n", f->dir);
  write_text(conf, text);
  char from[400];
  snprintf(from, sizeof from, "%s/from-config.db", f->dir);
  unlink(from);
  const char *only[] = {"--config", conf, NULL};
  /* It runs until the harness gives up on it (and kills it). */
  assert_int_equal(pxt_coordd_run(f->dir, only, f->out, sizeof f->out, f->err, sizeof f->err,
                                  1500),
                   -1);
  assert_non_null(strstr(f->out, "listening on 127.0.0.1:"));
  assert_int_equal(access(from, F_OK), 0);
}

/* 1 when the file holds needle within ms. */
static int log_says(const char *path, const char *needle, int ms) {
  for (int waited = 0; waited <= ms; waited += 20) {
    char buf[65536];
    FILE *fp = fopen(path, "r");
    size_t n = fp ? fread(buf, 1, sizeof buf - 1, fp) : 0;
    if (fp) fclose(fp);
    buf[n] = '\0';
    if (strstr(buf, needle)) return 1;
    usleep(20 * 1000);
  }
  return 0;
}

/* SIGHUP applies the settings marked reloadable and names a changed other
 * one as needing a restart, which keeps its running value; a flag still
 * wins over the file re-read. */
static void test_sighup_reloads_only_reloadable_settings(void **state) {
  fixture_t *f = *state;
  pxt_coordd_t d;
  memset(&d, 0, sizeof d);
  snprintf(d.dir, sizeof d.dir, "%s", f->dir);
  snprintf(d.db, sizeof d.db, "%s", f->db);
  char conf[400];
  snprintf(conf, sizeof conf, "%s/reload.conf", f->dir);
  write_text(conf, "heartbeat_timeout_ms = 2500\npriority_weight_age = 5\n");
  const char *extra[] = {"--config", conf, "--retention-days", "3", NULL};
  assert_int_equal(pxt_coordd_start(&d, extra), 0);
  assert_int_equal(registered_timeout(d.target), 2500);
  /* only policy keys change: nothing needs a restart */
  write_text(conf, "heartbeat_timeout_ms = 2500\npriority_weight_age = 7\nretention_days = 9\n");
  kill(d.pid, SIGHUP);
  assert_true(log_says(d.log, "SIGHUP: scheduling policy re-read", 5000));
  assert_false(log_says(d.log, "needs a restart", 200)); /* --retention-days 3 still wins */
  write_text(conf, "heartbeat_timeout_ms = 4000\npriority_weight_age = 7\n");
  kill(d.pid, SIGHUP);
  char want[600];
  snprintf(want, sizeof want, "SIGHUP: heartbeat_timeout_ms changed in %s: needs a restart", conf);
  if (!log_says(d.log, want, 5000)) {
    pxt_coordd_dump_log(&d);
    fail_msg("no '%s' in the log", want);
  }
  assert_int_equal(registered_timeout(d.target), 2500); /* the running value stays */
  /* a bad file keeps everything */
  write_text(conf, "priority_weight_age = -1\n");
  kill(d.pid, SIGHUP);
  assert_true(log_says(d.log, "priority_weight_age = '-1': expected a number in [0, 1000000000]",
                       5000));
  assert_int_equal(pxt_coordd_stop(&d, SIGTERM), 0);
}

static void test_one_coordinator_per_database_and_port(void **state) {
  fixture_t *f = *state;
  pxt_coordd_t d;
  memset(&d, 0, sizeof d);
  snprintf(d.dir, sizeof d.dir, "%s", f->dir);
  snprintf(d.db, sizeof d.db, "%s", f->db);
  assert_int_equal(pxt_coordd_start(&d, NULL), 0);
  const char *same_db[] = {"--db", f->db, "--listen", "127.0.0.1:0", NULL};
  assert_int_equal(run(f, same_db), 1);
  assert_non_null(strstr(f->err, "in use"));
  assert_non_null(strstr(f->err, f->db));
  char other[400], listen[64];
  snprintf(other, sizeof other, "%s/other.db", f->dir);
  snprintf(listen, sizeof listen, "127.0.0.1:%d", d.port);
  const char *same_port[] = {"--db", other, "--listen", listen, NULL};
  assert_int_equal(run(f, same_port), 1);
  assert_non_null(strstr(f->err, listen));
  int status = pxt_coordd_stop(&d, SIGINT);
  assert_true(WIFEXITED(status));
  assert_int_equal(WEXITSTATUS(status), 0);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test_setup_teardown(test_help_and_version, setup, teardown),
      cmocka_unit_test_setup_teardown(test_bad_flags_exit_2, setup, teardown),
      cmocka_unit_test_setup_teardown(test_bad_config_files_exit_2_naming_file_and_line, setup,
                                      teardown),
      cmocka_unit_test_setup_teardown(test_config_files_in_both_formats, setup, teardown),
      cmocka_unit_test_setup_teardown(test_sighup_reloads_only_reloadable_settings, setup,
                                      teardown),
      cmocka_unit_test_setup_teardown(test_one_coordinator_per_database_and_port, setup,
                                      teardown),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
