/* prunex/settings.h: the one table that drives a program's flags, config
 * file, environment variables, --help and SIGHUP reload (pxcoordd, pxagent,
 * pxworker). Each test declares a small table over a struct of every kind of
 * field and proves one thing: each type parses and stores, bounds and
 * allowed values are enforced with a message naming the origin, key, value
 * and what was expected; unknown keys are refused in files (FILE:LINE) and
 * on the command line; precedence is default < file < variable < flag;
 * required flags; the reload copies only RELOAD settings and names the
 * others; --help lists every setting with its default. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cmocka.h>

#include "prunex/settings.h"

typedef struct {
  char listen[32];
  const char *name;
  int workers;
  int64_t half_life_s;
  double weight;
  int verbose;
  int level;
  int read_only;
  char config[256];
  char users[256];  /* "share.NAME" values, appended by a CUSTOM setter */
  const char *job;
} obj_t;

#define F(field) offsetof(obj_t, field), sizeof(((obj_t *)0)->field)

static int calls_custom; /* how often the CUSTOM setter ran */

static int no_colon_check(const char *v, char *why, size_t cap) {
  if (!strchr(v, ':')) return 0;
  snprintf(why, cap, "expected no ':'");
  return -1;
}

static int user_set(void *o, const char *key, const char *v, char *why, size_t cap) {
  obj_t *x = o;
  calls_custom++;
  if (atof(v) <= 0) return snprintf(why, cap, "expected a positive share"), -1;
  size_t used = strlen(x->users);
  snprintf(x->users + used, sizeof x->users - used, "%s%s=%s", used ? " " : "", key + 6, v);
  return 0;
}

static const char *const levels[] = {"error", "warn", "info", NULL};

static const px_setting_t table[] = {
    {"config", PX_SETTING_STRING, PX_SETTING_FLAG_ONLY | PX_SETTING_CONFIG, F(config), 0, 0, NULL,
     NULL, "FILE", "settings file", NULL, NULL, NULL},
    {"listen", PX_SETTING_STRING, 0, F(listen), 0, 0, NULL, "127.0.0.1:7070", "HOST:PORT",
     "where to serve", NULL, NULL, NULL},
    {"name", PX_SETTING_STRREF, 0, F(name), 0, 0, NULL, NULL, "NODE", "node name", "PXT_NAME",
     no_colon_check, NULL},
    {"workers", PX_SETTING_INT, PX_SETTING_RELOAD, F(workers), 1, 64, NULL, "4", "N",
     "workers to start", NULL, NULL, NULL},
    {"half_life_s", PX_SETTING_INT, PX_SETTING_RELOAD, F(half_life_s), 1, 1e12, NULL, "604800",
     "S", "usage decay half-life", NULL, NULL, NULL},
    {"weight", PX_SETTING_NUMBER, PX_SETTING_RELOAD, F(weight), 0, 10, NULL, "0.5", "W",
     "a weight", NULL, NULL, NULL},
    {"verbose", PX_SETTING_BOOL, 0, F(verbose), 0, 0, NULL, "off", "on|off", "talk more", NULL,
     NULL, NULL},
    {"log_level", PX_SETTING_ENUM, 0, F(level), 0, 0, levels, NULL, "L", "log threshold", NULL,
     NULL, NULL},
    {"read_only", PX_SETTING_BOOL, PX_SETTING_FLAG_ONLY, F(read_only), 0, 0, NULL, NULL, NULL,
     "change nothing", NULL, NULL, NULL},
    {"share.", PX_SETTING_CUSTOM, PX_SETTING_PREFIX | PX_SETTING_FILE_ONLY | PX_SETTING_RELOAD,
     F(users), 0, 0, NULL, NULL, "S", "user NAME's share", NULL, NULL, user_set},
    {"job", PX_SETTING_STRREF, PX_SETTING_REQUIRED, F(job), 0, 0, NULL, NULL, "ID", "the job",
     NULL, NULL, NULL},
};

static const px_settings_spec_t spec = {
    .program = "pxtest",
    .synopsis = "--job ID [OPTIONS]",
    .about = "A test program.",
    .epilogue = "Exit status: 0.",
    .table = table,
    .n = sizeof table / sizeof table[0],
};

typedef struct {
  char dir[64];
  obj_t o;
  px_settings_t *s;
} fixture_t;

static int setup(void **state) {
  fixture_t *f = calloc(1, sizeof *f);
  snprintf(f->dir, sizeof f->dir, "/tmp/pxt-settings-XXXXXX");
  if (!f || !mkdtemp(f->dir)) return -1;
  if (px_settings_create(&spec, &f->o, &f->s) != PX_OK) return -1;
  if (px_settings_defaults(f->s) != PX_OK) return -1;
  unsetenv("PXT_NAME");
  calls_custom = 0;
  *state = f;
  return 0;
}

static int teardown(void **state) {
  fixture_t *f = *state;
  px_settings_destroy(f->s);
  char cmd[128];
  snprintf(cmd, sizeof cmd, "rm -rf %s", f->dir);
  int rc = system(cmd);
  free(f);
  return rc == 0 ? 0 : -1;
}

static const char *write_file(fixture_t *f, const char *leaf, const char *text) {
  static char path[128];
  snprintf(path, sizeof path, "%s/%s", f->dir, leaf);
  FILE *fp = fopen(path, "w");
  assert_non_null(fp);
  fputs(text, fp);
  fclose(fp);
  return path;
}

/* px_settings_set's error, which must contain every needle given. */
static void expect_error(fixture_t *f, const char *key, const char *value, const char *needle1,
                         const char *needle2) {
  assert_int_equal(px_settings_set(f->s, key, value, "here"), PX_ERR_INVALID);
  const char *e = px_last_error();
  if (!strstr(e, needle1) || (needle2 && !strstr(e, needle2)))
    fail_msg("error '%s' lacks '%s' or '%s'", e, needle1, needle2 ? needle2 : "");
}

static void test_defaults_are_applied_and_not_given(void **state) {
  fixture_t *f = *state;
  assert_string_equal(f->o.listen, "127.0.0.1:7070");
  assert_int_equal(f->o.workers, 4);
  assert_true(f->o.half_life_s == 604800);
  assert_true(f->o.weight == 0.5);
  assert_int_equal(f->o.verbose, 0);
  assert_int_equal(f->o.level, -1); /* an enum without a default is unset */
  assert_null(f->o.name);
  assert_false(px_settings_given(f->s, "workers"));
}

static void test_each_type_parses_and_stores(void **state) {
  fixture_t *f = *state;
  assert_int_equal(px_settings_set(f->s, "listen", "0.0.0.0:1", "here"), PX_OK);
  assert_string_equal(f->o.listen, "0.0.0.0:1");
  char name[] = "node-a";
  assert_int_equal(px_settings_set(f->s, "name", name, "here"), PX_OK);
  name[0] = 'X'; /* the value is a copy the settings keep */
  assert_string_equal(f->o.name, "node-a");
  assert_int_equal(px_settings_set(f->s, "workers", "64", "here"), PX_OK);
  assert_int_equal(f->o.workers, 64);
  assert_int_equal(px_settings_set(f->s, "half-life-s", "1000000000000", "here"), PX_OK);
  assert_true(f->o.half_life_s == INT64_C(1000000000000)); /* int64_t by the field's size */
  assert_int_equal(px_settings_set(f->s, "weight", "2.25", "here"), PX_OK);
  assert_true(f->o.weight == 2.25);
  const char *on[] = {"on", "true", "yes", "1"}, *off[] = {"off", "false", "no", "0"};
  for (int i = 0; i < 4; i++) {
    assert_int_equal(px_settings_set(f->s, "verbose", on[i], "here"), PX_OK);
    assert_int_equal(f->o.verbose, 1);
    assert_int_equal(px_settings_set(f->s, "verbose", off[i], "here"), PX_OK);
    assert_int_equal(f->o.verbose, 0);
  }
  assert_int_equal(px_settings_set(f->s, "log-level", "info", "here"), PX_OK);
  assert_int_equal(f->o.level, 2);
  assert_int_equal(px_settings_set(f->s, "share.bob-x", "2", "here"), PX_OK);
  assert_int_equal(px_settings_set(f->s, "share.al", "0.5", "here"), PX_OK);
  assert_string_equal(f->o.users, "bob-x=2 al=0.5"); /* a user's dashes stay */
  assert_int_equal(calls_custom, 2);
  assert_true(px_settings_given(f->s, "workers"));
}

static void test_bounds_and_allowed_values_are_named(void **state) {
  fixture_t *f = *state;
  expect_error(f, "workers", "0", "here: workers = '0'", "expected an integer in [1, 64]");
  expect_error(f, "workers", "65", "'65'", "[1, 64]");
  expect_error(f, "workers", "3.5", "'3.5'", "an integer");
  expect_error(f, "workers", "4x", "'4x'", "an integer");
  expect_error(f, "workers", "", "''", "an integer");
  expect_error(f, "weight", "11", "weight = '11'", "expected a number in [0, 10]");
  expect_error(f, "weight", "nan", "'nan'", "a number");
  expect_error(f, "verbose", "maybe", "verbose = 'maybe'", "expected on or off");
  expect_error(f, "log_level", "loud", "log_level = 'loud'", "expected error, warn or info");
  expect_error(f, "listen", "", "listen = ''", "not an empty one");
  expect_error(f, "listen", "0123456789012345678901234567890123", "listen", "at most 31 bytes");
  expect_error(f, "name", "a:b", "name = 'a:b'", "expected no ':'"); /* the entry's check */
  expect_error(f, "share.al", "-1", "share.al = '-1'", "expected a positive share");
  /* a bad value leaves the field as it was */
  assert_int_equal(f->o.workers, 4);
  assert_string_equal(f->o.listen, "127.0.0.1:7070");
}

static void test_unknown_keys_are_refused(void **state) {
  fixture_t *f = *state;
  expect_error(f, "colour", "blue", "here: unknown setting 'colour'", NULL);
  expect_error(f, "share.", "1", "unknown setting 'share.'", NULL); /* a prefix needs a suffix */
  expect_error(f, "workers.x", "1", "unknown setting", NULL);
  /* a file names FILE:LINE; a flag-only setting is no key there */
  const char *p = write_file(f, "a.conf", "# c\nworkers = 8\n\ncolour = blue\n");
  assert_int_equal(px_settings_load(f->s, p), PX_ERR_INVALID);
  char where[160];
  snprintf(where, sizeof where, "%s:4: unknown setting 'colour'", p);
  assert_non_null(strstr(px_last_error(), where));
  p = write_file(f, "b.yaml", "workers: 8\nread_only: on\n");
  assert_int_equal(px_settings_load(f->s, p), PX_ERR_INVALID);
  snprintf(where, sizeof where, "%s:2: unknown setting 'read_only'", p);
  assert_non_null(strstr(px_last_error(), where));
  p = write_file(f, "c.conf", "workers = 99\n");
  assert_int_equal(px_settings_load(f->s, p), PX_ERR_INVALID);
  snprintf(where, sizeof where, "%s:1: workers = '99': expected an integer in [1, 64]", p);
  assert_non_null(strstr(px_last_error(), where));
}

static int parse(fixture_t *f, const char *const *args) {
  int argc = 0;
  while (args[argc]) argc++;
  return px_settings_parse_args(f->s, argc, (char **)args);
}

static void test_flags_forms_and_errors(void **state) {
  fixture_t *f = *state;
  const char *ok[] = {"p", "--job", "j1", "--workers=8", "--verbose", "--read-only",
                      "--log-level", "warn", "--weight", "1", NULL};
  assert_int_equal(parse(f, ok), -1);
  assert_string_equal(f->o.job, "j1");
  assert_int_equal(f->o.workers, 8);
  assert_int_equal(f->o.verbose, 1); /* a bool flag without a value is on */
  assert_int_equal(f->o.read_only, 1);
  assert_int_equal(f->o.level, 1);
  const char *off[] = {"p", "--job", "j", "--verbose=off", NULL};
  assert_int_equal(parse(f, off), -1);
  assert_int_equal(f->o.verbose, 0);
  const char *next[] = {"p", "--verbose", "yes", "--read-only", "--job", "j", NULL};
  assert_int_equal(parse(f, next), -1); /* a bool takes the next word unless it is a flag */
  assert_int_equal(f->o.verbose, 1);
  /* every bad command line: exit status 2 */
  const char *missing[] = {"p", "--job", "j", "--workers", NULL};
  assert_int_equal(parse(f, missing), 2);
  assert_non_null(strstr(px_last_error(), "--workers needs a value"));
  const char *unknown[] = {"p", "--job", "j", "--frobnicate", NULL};
  assert_int_equal(parse(f, unknown), 2);
  assert_non_null(strstr(px_last_error(), "unknown argument '--frobnicate'"));
  const char *underscores[] = {"p", "--job", "j", "--log_level", "info", NULL};
  assert_int_equal(parse(f, underscores), 2); /* flags are spelled with dashes */
  const char *file_only[] = {"p", "--job", "j", "--share.al", "1", NULL};
  assert_int_equal(parse(f, file_only), 2);
  const char *maybe[] = {"p", "--job", "j", "--verbose", "maybe", NULL};
  assert_int_equal(parse(f, maybe), 2); /* a bool's value, wrong */
  assert_non_null(strstr(px_last_error(), "--verbose: verbose = 'maybe': expected on or off"));
  const char *positional[] = {"p", "--job", "j", "extra", NULL};
  assert_int_equal(parse(f, positional), 2);
  const char *bad[] = {"p", "--job", "j", "--workers", "0", NULL};
  assert_int_equal(parse(f, bad), 2);
  assert_non_null(strstr(px_last_error(), "--workers: workers = '0': expected an integer"));
}

static void test_required_flags(void **state) {
  fixture_t *f = *state;
  const char *none[] = {"p", "--workers", "2", NULL};
  assert_int_equal(parse(f, none), 2);
  assert_string_equal(px_last_error(), "--job is required");
}

static void test_precedence_default_file_variable_flag(void **state) {
  fixture_t *f = *state;
  const char *p = write_file(f, "p.conf", "name = from-file\nworkers = 3\nweight = 7\n"
                                          "share.al-b = 2\n");
  char cfg[200];
  snprintf(cfg, sizeof cfg, "--config=%s", p);
  const char *args[] = {"p", "--job", "j", "--workers", "5", cfg, NULL};
  assert_int_equal(parse(f, args), -1); /* the file first, wherever --config is */
  assert_string_equal(f->o.name, "from-file");
  assert_int_equal(f->o.workers, 5);
  assert_true(f->o.weight == 7);
  assert_string_equal(f->o.users, "al-b=2"); /* a file's user name keeps its dashes too */
  assert_string_equal(f->o.config, p);
  setenv("PXT_NAME", "from-env", 1);
  assert_int_equal(parse(f, args), -1);
  assert_string_equal(f->o.name, "from-env");
  const char *flag[] = {"p", "--job", "j", cfg, "--name", "from-flag", NULL};
  assert_int_equal(parse(f, flag), -1);
  assert_string_equal(f->o.name, "from-flag");
  setenv("PXT_NAME", "bad:name", 1);
  assert_int_equal(parse(f, flag), 2);
  assert_non_null(strstr(px_last_error(), "$PXT_NAME: name = 'bad:name'"));
  unsetenv("PXT_NAME");
  const char *nofile[] = {"p", "--job", "j", "--config", "/nonexistent/p.conf", NULL};
  assert_int_equal(parse(f, nofile), 2);
  assert_non_null(strstr(px_last_error(), "/nonexistent/p.conf"));
}

static void test_reload_copies_only_reloadable(void **state) {
  fixture_t *f = *state;
  obj_t fresh = f->o;
  px_settings_t *s2 = NULL;
  assert_int_equal(px_settings_create(&spec, &fresh, &s2), PX_OK);
  assert_int_equal(px_settings_set(s2, "workers", "9", "f"), PX_OK);
  assert_int_equal(px_settings_set(s2, "share.al", "3", "f"), PX_OK);
  assert_int_equal(px_settings_set(s2, "listen", "127.0.0.1:1", "f"), PX_OK);
  assert_int_equal(px_settings_set(s2, "name", "other", "f"), PX_OK);
  snprintf(fresh.config, sizeof fresh.config, "elsewhere"); /* the CONFIG flag is not compared */
  char changed[64];
  assert_int_equal(px_settings_reload(&spec, &f->o, &fresh, changed, sizeof changed), 2);
  assert_string_equal(changed, "listen, name");
  assert_int_equal(f->o.workers, 9);
  assert_string_equal(f->o.users, "al=3");
  assert_string_equal(f->o.listen, "127.0.0.1:7070"); /* needs a restart: unchanged */
  assert_null(f->o.name);
  /* the same values again: nothing to do */
  obj_t same = f->o;
  assert_int_equal(px_settings_reload(&spec, &f->o, &same, changed, sizeof changed), 0);
  assert_string_equal(changed, "");
  /* a short buffer is cut, the count stays right */
  assert_int_equal(px_settings_reload(&spec, &f->o, &fresh, changed, 4), 2);
  assert_int_equal(strlen(changed), 3);
  px_settings_destroy(s2);
}

static void test_help_lists_every_setting(void **state) {
  (void)state;
  char *text = NULL;
  size_t len = 0;
  FILE *m = open_memstream(&text, &len);
  assert_non_null(m);
  px_settings_usage(&spec, m);
  fclose(m);
  const char *needles[] = {
      "usage: pxtest --job ID [OPTIONS]\n\nA test program.\n",
      "  --config FILE            settings file\n",
      "  --listen HOST:PORT       where to serve (default 127.0.0.1:7070)\n",
      "  --name NODE              node name [$PXT_NAME]\n",
      "  --workers N              workers to start (default 4) [re-read on SIGHUP]\n",
      "  --half-life-s S", "  --weight W", "  --verbose on|off", "  --log-level L",
      "  --read-only              change nothing\n", "  --job ID", "  --help, --version\n",
      "Config-file keys without a flag:\n  share.NAME = S           user NAME's share",
      "\nExit status: 0.\n"};
  for (size_t i = 0; i < sizeof needles / sizeof needles[0]; i++)
    if (!strstr(text, needles[i])) fail_msg("--help lacks '%s':\n%s", needles[i], text);
  assert_null(strstr(text, "--share")); /* a file-only key is no flag */
  for (const char *l = text; *l;) { /* wrapped at 79 columns */
    size_t n = strcspn(l, "\n");
    if (n > 79) fail_msg("a line of %zu columns: %.*s", n, (int)n, l);
    l += n + (l[n] == '\n');
  }
  free(text);
}

static void test_bad_default_is_a_table_error(void **state) {
  (void)state;
  static const px_setting_t bad[] = {{"n", PX_SETTING_INT, 0, F(workers), 1, 8, NULL, "9", "N",
                                      "n", NULL, NULL, NULL}};
  static const px_settings_spec_t bad_spec = {.program = "p", .table = bad, .n = 1};
  obj_t o;
  px_settings_t *s = NULL;
  assert_int_equal(px_settings_create(&bad_spec, &o, &s), PX_OK);
  assert_int_equal(px_settings_defaults(s), PX_ERR_INVALID);
  assert_non_null(strstr(px_last_error(), "the default: n = '9': expected an integer in [1, 8]"));
  px_settings_destroy(s);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test_setup_teardown(test_defaults_are_applied_and_not_given, setup, teardown),
      cmocka_unit_test_setup_teardown(test_each_type_parses_and_stores, setup, teardown),
      cmocka_unit_test_setup_teardown(test_bounds_and_allowed_values_are_named, setup, teardown),
      cmocka_unit_test_setup_teardown(test_unknown_keys_are_refused, setup, teardown),
      cmocka_unit_test_setup_teardown(test_flags_forms_and_errors, setup, teardown),
      cmocka_unit_test_setup_teardown(test_required_flags, setup, teardown),
      cmocka_unit_test_setup_teardown(test_precedence_default_file_variable_flag, setup,
                                      teardown),
      cmocka_unit_test_setup_teardown(test_reload_copies_only_reloadable, setup, teardown),
      cmocka_unit_test(test_help_lists_every_setting),
      cmocka_unit_test(test_bad_default_is_a_table_error),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
