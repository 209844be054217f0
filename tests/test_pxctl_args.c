/* pxctl's command line: the getopt_long driver of cli/pxctl_args.c
 * (compiled in) on a table of its own, in-process, and the real pxctl on
 * lines that need no coordinator.
 *
 * In-process: --opt VALUE and --opt=VALUE (an empty one, one starting with
 * '-'), flags, a short option, positional arguments before, between and
 * after options, "--" ending the options, the errors (unknown option, an
 * option of another command, a missing value, a value given to a flag) and
 * that long names are never abbreviated (getopt_long would take --out for
 * --output), parses one after another (getopt_long's state reset), the
 * same answers under POSIXLY_CORRECT, finding the command behind options
 * and their values, and the help lines printed from the table. With pxctl:
 * the same forms reach the commands (a bad number, a value below the
 * least, --coordinator=HOST:PORT used over PRUNEX_COORDINATOR), the usage
 * messages name the command and option with exit 2, and --field (listed
 * by no command's help) goes exactly where --json does. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include "pxctl_args.h"
#include "pxctl_harness.h"

enum { T_COORD = PXCTL_ARG_ID0, T_LIMIT, T_JSON, T_FOLLOW, T_OUTPUT, T_REASON, T_OUT, T_LAYERS };

static const pxctl_arg_t test_args[] = {
    {"coordinator", 0, "HOST:PORT", T_COORD, "the coordinator (default: $X, else\n127.0.0.1:7070)"},
    {"limit", 0, "N", T_LIMIT, "at most N rows"},
    {"json", 0, NULL, T_JSON, "one JSON object"},
    {"follow", 'f', NULL, T_FOLLOW, "keep printing"},
    {"output", 0, "DIR", T_OUTPUT, "the output directory"},
    {"reason", 0, "TEXT", T_REASON, NULL},
};
/* every option of the made-up program: test_args and two of another command */
static const pxctl_arg_t test_known[] = {
    {"coordinator", 0, "HOST:PORT", T_COORD, NULL}, {"limit", 0, "N", T_LIMIT, NULL},
    {"json", 0, NULL, T_JSON, NULL},                 {"follow", 'f', NULL, T_FOLLOW, NULL},
    {"output", 0, "DIR", T_OUTPUT, NULL},            {"reason", 0, "TEXT", T_REASON, NULL},
    {"out", 0, "DIR", T_OUT, NULL},                  {"layers", 0, NULL, T_LAYERS, NULL},
};
#define N(t) (sizeof t / sizeof t[0])

/* What a parse found, in order: "name=value " for an option (a flag: "name "),
 * "[word] " for a positional argument. */
typedef struct {
  char log[512];
  int napplied;
  int stop_at; /* the positional argument (1-based) whose function stops with 7; 0: none */
  int npos;
} record_t;

static int record_option(void *ctx, const pxctl_arg_t *a, const char *v) {
  record_t *r = ctx;
  size_t n = strlen(r->log);
  snprintf(r->log + n, sizeof r->log - n, v ? "%s=%s " : "%s ", a->name, v);
  r->napplied++;
  return -1;
}

static int record_positional(void *ctx, const char *arg) {
  record_t *r = ctx;
  size_t n = strlen(r->log);
  snprintf(r->log + n, sizeof r->log - n, "[%s] ", arg);
  return ++r->npos == r->stop_at ? 7 : -1;
}

/* Parses words (NULL-terminated, the program name excluded) with the test
 * table into r; the status pxctl_args_parse returned. */
static int parse(record_t *r, pxctl_args_error_t *e, const char *const *words) {
  char *argv[32] = {"prog"};
  int argc = 1;
  while (words[argc - 1]) {
    argv[argc] = (char *)words[argc - 1];
    argc++;
  }
  int stop_at = r->stop_at;
  memset(r, 0, sizeof *r);
  r->stop_at = stop_at;
  pxctl_args_t p = {test_args, N(test_args), test_known, N(test_known), "cmd",
                    record_option, record_positional, r};
  int rc = pxctl_args_parse(&p, argc, argv, e);
  /* the log without its last blank, for comparing */
  size_t n = strlen(r->log);
  if (n) r->log[n - 1] = '\0';
  return rc;
}

static void test_values_as_separate_word_or_after_equals(void **state) {
  (void)state;
  record_t r = {0};
  pxctl_args_error_t e;
  assert_int_equal(parse(&r, &e, (const char *[]){"--coordinator", "h:1", "--limit=3", NULL}), -1);
  assert_string_equal(r.log, "coordinator=h:1 limit=3");
  /* a value may be empty (after '='), start with '-', or be "--json" itself */
  assert_int_equal(parse(&r, &e, (const char *[]){"--limit=", "--output", "-x", "--reason",
                                                   "--json", NULL}),
                   -1);
  assert_string_equal(r.log, "limit= output=-x reason=--json");
  /* a value with '=' in it, and the same option twice: both, in order */
  assert_int_equal(parse(&r, &e, (const char *[]){"--reason=a=b", "--reason", "c", NULL}), -1);
  assert_string_equal(r.log, "reason=a=b reason=c");
}

static void test_flags_short_option_and_positionals_in_order(void **state) {
  (void)state;
  record_t r = {0};
  pxctl_args_error_t e;
  assert_int_equal(
      parse(&r, &e, (const char *[]){"a", "--json", "b", "-f", "--limit", "2", "c", "-", NULL}),
      -1);
  assert_string_equal(r.log, "[a] json [b] follow limit=2 [c] [-]");
  assert_int_equal(parse(&r, &e, (const char *[]){"--follow", NULL}), -1);
  assert_string_equal(r.log, "follow");
}

static void test_double_dash_ends_the_options(void **state) {
  (void)state;
  record_t r = {0};
  pxctl_args_error_t e;
  assert_int_equal(
      parse(&r, &e, (const char *[]){"a", "--json", "--", "--limit", "3", "-f", "--", NULL}), -1);
  assert_string_equal(r.log, "[a] json [--limit] [3] [-f] [--]");
  assert_int_equal(parse(&r, &e, (const char *[]){"--", NULL}), -1);
  assert_string_equal(r.log, "");
}

/* Each bad line: the message, and nothing after the bad word applied. */
static void test_errors_name_the_option_and_what_is_wrong(void **state) {
  (void)state;
  static const struct {
    const char *words[5];
    const char *says;
    int elsewhere; /* the option of test_known it names as not applying; 0: none */
  } cases[] = {
      {{"--frob", "--json", NULL}, "unknown option '--frob'", 0},
      {{"--frob=1", NULL}, "unknown option '--frob=1'", 0},
      {{"-x", NULL}, "unknown option '-x'", 0},
      {{"-fx", NULL}, "unknown option '-fx'", 0},   /* no clusters of short options */
      {{"-json", NULL}, "unknown option '-json'", 0},
      {{"--layers", "--json", NULL}, "option --layers does not apply to 'cmd'", T_LAYERS},
      {{"--layers=1", NULL}, "option --layers does not apply to 'cmd'", T_LAYERS},
      /* getopt_long would take these prefixes for --output, --limit, --json */
      {{"--out", "d", NULL}, "option --out does not apply to 'cmd'", T_OUT},
      {{"--out=d", NULL}, "option --out does not apply to 'cmd'", T_OUT},
      {{"--lim", "3", NULL}, "unknown option '--lim'", 0},
      {{"--js", NULL}, "unknown option '--js'", 0},
      {{"--js=1", NULL}, "unknown option '--js=1'", 0},
      {{"--limit", NULL}, "--limit needs a value", 0},
      {{"a", "--coordinator", NULL}, "--coordinator needs a value", 0},
      {{"--json=yes", NULL}, "--json takes no value", 0},
      {{"--json=", NULL}, "--json takes no value", 0},
      {{"--follow=1", NULL}, "--follow takes no value", 0},
      {{"-f=1", NULL}, "-f takes no value", 0},
  };
  for (size_t i = 0; i < N(cases); i++) {
    record_t r = {0};
    pxctl_args_error_t e;
    int rc = parse(&r, &e, cases[i].words);
    if (rc != PXCTL_ARGS_BAD || strcmp(e.msg, cases[i].says))
      fprintf(stderr, "case %zu (%s): rc %d, said \"%s\", applied \"%s\"\n", i, cases[i].says, rc,
              e.msg, r.log);
    assert_int_equal(rc, PXCTL_ARGS_BAD);
    assert_string_equal(e.msg, cases[i].says);
    if (cases[i].elsewhere) {
      assert_non_null(e.elsewhere);
      assert_int_equal(e.elsewhere->id, cases[i].elsewhere);
    } else {
      assert_null(e.elsewhere);
    }
    assert_null(strstr(r.log, "json")); /* nothing after the bad word */
  }
}

static void test_a_function_stops_the_parse_with_its_status(void **state) {
  (void)state;
  record_t r = {.stop_at = 2};
  pxctl_args_error_t e;
  assert_int_equal(parse(&r, &e, (const char *[]){"a", "b", "--json", "c", NULL}), 7);
  assert_string_equal(r.log, "[a] [b]");
  /* the next parse starts over (optind reset), mid-line as it was */
  r.stop_at = 0;
  assert_int_equal(parse(&r, &e, (const char *[]){"--json", "x", NULL}), -1);
  assert_string_equal(r.log, "json [x]");
  /* ... also after an error in the middle of a word ("-fx") */
  assert_int_equal(parse(&r, &e, (const char *[]){"-fx", "--json", NULL}), PXCTL_ARGS_BAD);
  assert_int_equal(parse(&r, &e, (const char *[]){"-f", "y", NULL}), -1);
  assert_string_equal(r.log, "follow [y]");
}

static void test_posixly_correct_changes_nothing(void **state) {
  (void)state;
  setenv("POSIXLY_CORRECT", "1", 1);
  record_t r = {0};
  pxctl_args_error_t e;
  int rc = parse(&r, &e, (const char *[]){"a", "--json", "--limit=1", "b", NULL});
  unsetenv("POSIXLY_CORRECT");
  assert_int_equal(rc, -1);
  assert_string_equal(r.log, "[a] json limit=1 [b]");
}

/* pxctl_args_command: the index of the command word, flags before it applied. */
static int command(record_t *r, const char *const *words, int *cmd_at) {
  char *argv[32] = {"prog"};
  int argc = 1;
  while (words[argc - 1]) {
    argv[argc] = (char *)words[argc - 1];
    argc++;
  }
  memset(r, 0, sizeof *r);
  pxctl_args_t p = {test_known, N(test_known), test_known, N(test_known), NULL,
                    record_option, NULL, r};
  int rc = pxctl_args_command(&p, argc, argv, cmd_at);
  size_t n = strlen(r->log);
  if (n) r->log[n - 1] = '\0';
  return rc;
}

static void test_the_command_is_found_behind_options_and_values(void **state) {
  (void)state;
  record_t r;
  int at;
  assert_int_equal(command(&r, (const char *[]){"--coordinator", "h:1", "--json", "list",
                                                 "--limit", "3", NULL},
                           &at),
                   -1);
  assert_int_equal(at, 4);
  assert_string_equal(r.log, "json"); /* flags only: values are the command's to check */
  assert_int_equal(command(&r, (const char *[]){"--limit=3", "-f", "--layers", "x", NULL}, &at),
                   -1);
  assert_int_equal(at, 4);
  assert_string_equal(r.log, "follow layers");
  /* unknown options are skipped as flags; a prefix is no option here either */
  assert_int_equal(command(&r, (const char *[]){"--frob", "--coord", "h:1", "list", NULL}, &at),
                   -1);
  assert_int_equal(at, 3);
  assert_int_equal(command(&r, (const char *[]){"--", "--json", NULL}, &at), -1);
  assert_int_equal(at, 2);
  assert_int_equal(command(&r, (const char *[]){"--json", "--limit", NULL}, &at), -1);
  assert_int_equal(at, 0);
  assert_int_equal(command(&r, (const char *[]){"-", NULL}, &at), -1);
  assert_int_equal(at, 1);
}

static void test_help_lines_come_from_the_table(void **state) {
  (void)state;
  char *text = NULL;
  size_t len = 0;
  FILE *f = open_memstream(&text, &len);
  assert_non_null(f);
  pxctl_args_print_help(f, test_args, N(test_args));
  fclose(f);
  assert_string_equal(text,
                      "  --coordinator HOST:PORT  the coordinator (default: $X, else\n"
                      "                           127.0.0.1:7070)\n"
                      "  --limit N                at most N rows\n"
                      "  --json                   one JSON object\n"
                      "  -f, --follow             keep printing\n"
                      "  --output DIR             the output directory\n");
  free(text);
}

/* ---- the real pxctl, without a coordinator ------------------------------ */

typedef struct {
  char dir[256];
  pxt_result_t r;
} fixture_t;

static int setup(void **state) {
  fixture_t *f = calloc(1, sizeof *f);
  if (!f || pxt_mkdtemp(f->dir, sizeof f->dir) != 0) {
    free(f);
    return -1;
  }
  *state = f;
  return 0;
}

static int teardown(void **state) {
  fixture_t *f = *state;
  pxt_rmtree(f->dir);
  free(f);
  return 0;
}

/* pxctl with PRUNEX_COORDINATOR at a port where nothing listens, and no token. */
static int pxctl(fixture_t *f, const char *const *args) {
  char home[300];
  snprintf(home, sizeof home, "HOME=%s", f->dir);
  const char *env[] = {"PRUNEX_COORDINATOR=127.0.0.1:2", home, "PRUNEX_TOKEN=", NULL};
  return pxt_pxctl(&f->r, f->dir, args, env, 30000);
}

static void expect(fixture_t *f, const char *const *args, int code, const char *says) {
  int rc = pxctl(f, args);
  if (rc != code || !strstr(f->r.err, says)) pxt_show(says, &f->r);
  assert_int_equal(rc, code);
  assert_non_null(strstr(f->r.err, says));
}

static void test_pxctl_takes_both_forms_and_names_what_is_wrong(void **state) {
  fixture_t *f = *state;
  /* a value after '=' or as the next word is checked the same */
  expect(f, (const char *[]){"list", "--limit=ten", NULL}, 2,
         "pxctl list: --limit 'ten': expected a non-negative integer");
  expect(f, (const char *[]){"list", "--limit", "-1", NULL}, 2,
         "--limit '-1': expected a non-negative integer");
  expect(f, (const char *[]){"metrics", "job-1", "--from=2x", NULL}, 2, "--from '2x'");
  expect(f, (const char *[]){"submit", "/nonexistent.yaml", "--nodes=0", NULL}, 2,
         "pxctl submit: --nodes '0': expected at least 1");
  expect(f, (const char *[]){"--state=sleeping", "list", NULL}, 2, "--state 'sleeping'");
  expect(f, (const char *[]){"list", "--frob", NULL}, 2, "pxctl list: unknown option '--frob'");
  expect(f, (const char *[]){"list", "--frob", NULL}, 2, "(run 'pxctl list --help' for usage)");
  expect(f, (const char *[]){"run", "x.yaml", "--out", "d", NULL}, 2,
         "pxctl run: option --out does not apply to 'run'");
  expect(f, (const char *[]){"run", "x.yaml", "--coordinator=h:1", NULL}, 2,
         "option --coordinator does not apply to 'run' (run starts its own private coordinator)");
  expect(f, (const char *[]){"logs", "job-1", "--rank", NULL}, 2,
         "pxctl logs: --rank needs a value");
  expect(f, (const char *[]){"logs", "job-1", "-f=1", NULL}, 2, "pxctl logs: -f takes no value");
  expect(f, (const char *[]){"status", "job-1", "--", "--json", NULL}, 2,
         "unexpected argument '--json' (status takes JOB|SWEEP)");
  /* both forms of --coordinator win over PRUNEX_COORDINATOR (127.0.0.1:2) */
  expect(f, (const char *[]){"--coordinator=127.0.0.1:1", "list", NULL}, 1, "127.0.0.1:1");
  expect(f, (const char *[]){"list", "--coordinator", "127.0.0.1:1", NULL}, 1, "127.0.0.1:1");
  /* a value starting with "--", then the job after it */
  expect(f, (const char *[]){"cancel", "--reason", "--json", "job-1", NULL}, 1, "127.0.0.1:2");
}

/* --field, which no command's help lists, goes exactly where --json does
 * (what the bash completion offers: tests/deploy_completion.sh). */
static void test_field_goes_wherever_json_does(void **state) {
  fixture_t *f = *state;
  static const char *const cmds[] = {"submit", "status", "list",    "acct", "cancel", "hold",
                                     "release", "update", "delete", "nodes", "metrics", "plot",
                                     "drift",  "logs",   "watch",   "run",   "export"};
  for (size_t c = 0; c < N(cmds); c++) {
    assert_int_equal(pxctl(f, (const char *[]){cmds[c], "--help", NULL}), 0);
    int json = strstr(f->r.out, "\n  --json ") != NULL;
    assert_null(strstr(f->r.out, "--field"));
    int rc = pxctl(f, (const char *[]){cmds[c], "--field=job_id", "--help", NULL});
    if (rc != (json ? 0 : 2)) pxt_show(cmds[c], &f->r);
    assert_int_equal(rc, json ? 0 : 2);
    if (!json) assert_non_null(strstr(f->r.err, "option --field does not apply"));
  }
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_values_as_separate_word_or_after_equals),
      cmocka_unit_test(test_flags_short_option_and_positionals_in_order),
      cmocka_unit_test(test_double_dash_ends_the_options),
      cmocka_unit_test(test_errors_name_the_option_and_what_is_wrong),
      cmocka_unit_test(test_a_function_stops_the_parse_with_its_status),
      cmocka_unit_test(test_posixly_correct_changes_nothing),
      cmocka_unit_test(test_the_command_is_found_behind_options_and_values),
      cmocka_unit_test(test_help_lines_come_from_the_table),
      cmocka_unit_test_setup_teardown(test_pxctl_takes_both_forms_and_names_what_is_wrong, setup,
                                      teardown),
      cmocka_unit_test_setup_teardown(test_field_goes_wherever_json_does, setup, teardown),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
