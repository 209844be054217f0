/* pxctl against a pxcoordd with TLS and tokens (docs/security.md):
 * the CA from --ca or PRUNEX_CA, the token from PRUNEX_TOKEN or the first
 * line of $XDG_CONFIG_HOME/prunex/token, which pxctl refuses when others may
 * read it; clear messages without a token or TLS; users cancel and delete
 * only their own jobs; `list --limit N` gives the newest N. Real pxctl and
 * pxcoordd processes; certificates made by openssl at test time. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include "pxctl_harness.h"

#define SPEC PX_SOURCE_DIR "/examples/quickstart.yaml"

typedef struct {
  pxt_coordd_t d;
  char ca[320], cfg[320], tokfile[480];
  char env_coord[128], env_cfg[400], env_ca[400];
  pxt_result_t r;
} fixture_t;

static int setup(void **state) {
  fixture_t *f = calloc(1, sizeof *f);
  if (!f) return -1;
  f->d.pid = -1;
  if (pxt_mkdtemp(f->d.dir, sizeof f->d.dir) != 0 || pxt_make_security(f->d.dir) != 0) return -1;
  snprintf(f->d.db, sizeof f->d.db, "%s/coord.db", f->d.dir);
  snprintf(f->ca, sizeof f->ca, "%s/ca.pem", f->d.dir);
  char cert[320], key[320], tokens[320];
  snprintf(cert, sizeof cert, "%s/server.pem", f->d.dir);
  snprintf(key, sizeof key, "%s/server.key", f->d.dir);
  snprintf(tokens, sizeof tokens, "%s/tokens", f->d.dir);
  const char *extra[] = {"--tls-cert", cert, "--tls-key", key, "--tokens", tokens, NULL};
  if (pxt_coordd_start(&f->d, extra) != 0) return -1;
  snprintf(f->cfg, sizeof f->cfg, "%s/config", f->d.dir);
  char dir[340];
  snprintf(dir, sizeof dir, "%s/prunex", f->cfg);
  if (mkdir(f->cfg, 0700) != 0 || mkdir(dir, 0700) != 0) return -1;
  snprintf(f->tokfile, sizeof f->tokfile, "%s/token", dir);
  snprintf(f->env_coord, sizeof f->env_coord, "PRUNEX_COORDINATOR=%s", f->d.target);
  snprintf(f->env_cfg, sizeof f->env_cfg, "XDG_CONFIG_HOME=%s", f->cfg);
  snprintf(f->env_ca, sizeof f->env_ca, "PRUNEX_CA=%s", f->ca);
  *state = f;
  return 0;
}

static int teardown(void **state) {
  fixture_t *f = *state;
  int rc = pxt_coordd_teardown(&f->d);
  free(f);
  return rc;
}

static void write_token(fixture_t *f, const char *token, mode_t mode) {
  FILE *t = fopen(f->tokfile, "w");
  assert_non_null(t);
  fprintf(t, "%s\n", token);
  fclose(t);
  assert_int_equal(chmod(f->tokfile, mode), 0);
}

/* pxctl with the coordinator, the test's config dir, and extra env/args. */
static int pxctl(fixture_t *f, const char *token_env, int with_ca_env, const char *const *args) {
  char tok[128];
  const char *env[6];
  int n = 0;
  env[n++] = f->env_coord;
  env[n++] = f->env_cfg;
  if (with_ca_env) env[n++] = f->env_ca;
  if (token_env) {
    snprintf(tok, sizeof tok, "PRUNEX_TOKEN=%s", token_env);
    env[n++] = tok;
  }
  env[n] = NULL;
  return pxt_pxctl(&f->r, f->d.dir, args, env, 30000);
}

static void test_credentials_come_from_flags_env_and_a_private_file(void **state) {
  fixture_t *f = *state;
  const char *list[] = {"list", NULL};
  /* no CA: the TLS listener cannot be reached */
  assert_int_equal(pxctl(f, PXT_TOK_ALICE, 0, list), 1);
  assert_non_null(strstr(f->r.err, "UNAVAILABLE"));
  /* CA but no token: UNAUTHENTICATED, with the way out */
  assert_int_equal(pxctl(f, NULL, 1, list), 1);
  assert_non_null(strstr(f->r.err, "UNAUTHENTICATED"));
  assert_non_null(strstr(f->r.err, "PRUNEX_TOKEN"));
  /* a token file others may read is refused */
  write_token(f, PXT_TOK_ALICE, 0644);
  assert_int_equal(pxctl(f, NULL, 1, list), 1);
  assert_non_null(strstr(f->r.err, "chmod 600"));
  /* 0600: used */
  write_token(f, PXT_TOK_ALICE, 0600);
  if (pxctl(f, NULL, 1, list) != 0) {
    pxt_show("list with the token file", &f->r);
    fail();
  }
  /* --ca instead of PRUNEX_CA */
  const char *list_ca[] = {"list", "--ca", f->ca, NULL};
  assert_int_equal(pxctl(f, NULL, 0, list_ca), 0);
  /* PRUNEX_TOKEN wins over the file */
  assert_int_equal(pxctl(f, "tok-wrong-0123456789abcdef", 1, list), 1);
  assert_non_null(strstr(f->r.err, "unknown token"));
}

static void test_users_cancel_and_delete_only_their_own_jobs(void **state) {
  fixture_t *f = *state;
  write_token(f, PXT_TOK_ALICE, 0600);
  const char *submit[] = {"submit", SPEC, NULL};
  char j1[64], j2[64];
  assert_int_equal(pxctl(f, NULL, 1, submit), 0);
  pxt_last_line(f->r.out, j1, sizeof j1);
  assert_int_equal(pxctl(f, NULL, 1, submit), 0);
  pxt_last_line(f->r.out, j2, sizeof j2);
  assert_string_not_equal(j1, j2);

  /* list --limit 1: the newest */
  const char *newest[] = {"list", "--limit", "1", "--json", NULL};
  assert_int_equal(pxctl(f, NULL, 1, newest), 0);
  pxj_t *v = pxj_parse(f->r.out);
  assert_non_null(v);
  assert_int_equal(v->n, 1);
  assert_string_equal(pxj_str(v->items[0], "job_id"), j2);
  assert_string_equal(pxj_str(v->items[0], "owner"), "alice");
  pxj_free(v);

  const char *cancel[] = {"cancel", j1, NULL};
  assert_int_equal(pxctl(f, PXT_TOK_BOB, 1, cancel), 1);
  assert_non_null(strstr(f->r.err, "belongs to alice"));
  assert_int_equal(pxctl(f, NULL, 1, cancel), 0);
  const char *del[] = {"delete", j1, NULL};
  assert_int_equal(pxctl(f, PXT_TOK_BOB, 1, del), 1);
  assert_non_null(strstr(f->r.err, "cannot delete"));
  assert_int_equal(pxctl(f, PXT_TOK_ADMIN, 1, del), 0);
  assert_non_null(strstr(f->r.out, "deleted"));
  const char *status[] = {"status", j1, NULL};
  assert_int_equal(pxctl(f, NULL, 1, status), 1);
  assert_non_null(strstr(f->r.err, "no job"));
  const char *del2[] = {"delete", j2, NULL}; /* still pending */
  assert_int_equal(pxctl(f, NULL, 1, del2), 1);
  assert_non_null(strstr(f->r.err, "cancel it first"));
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test_setup_teardown(test_credentials_come_from_flags_env_and_a_private_file,
                                      setup, teardown),
      cmocka_unit_test_setup_teardown(test_users_cancel_and_delete_only_their_own_jobs, setup,
                                      teardown),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
