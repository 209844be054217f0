/* A job's notify URL may carry credentials: alice's job notifying
 * https://u:secret@hooks.example.org/p?token=x shows the URL whole to alice
 * and to an admin, and to bob (another user) only with its userinfo and
 * query hidden (***@hooks.example.org/p?***) in GetJob, ListJobs, WatchJob (spec
 * and spec_yaml) and `pxctl status --json`; nodes get it redacted in their
 * assignments; the coordinator's log never holds the secret. */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>

#include <cmocka.h>

#include "notify_harness.h"
#include "pxctl_harness.h"

#define SECRET_URL "https://u:secret@hooks.example.org/p?token=x"
#define SHOWN_URL "https://***@hooks.example.org/p?***"
#define SPEC_YAML "name: test-job\nnotify:\n  url: " SECRET_URL "\n  states: end\n"

typedef struct {
  pxt_coordd_t d;
  char ca[320], job[64];
  px_rpc_channel_t *admin, *alice, *bob;
} fixture_t;

static int setup(void **state) {
  fixture_t *f = calloc(1, sizeof *f);
  if (!f) return -1;
  f->d.pid = -1;
  if (pxt_mkdtemp(f->d.dir, sizeof f->d.dir) != 0 || pxt_make_security(f->d.dir) != 0) return -1;
  snprintf(f->d.db, sizeof f->d.db, "%s/coord.db", f->d.dir);
  char cert[320], key[320], tokens[320], conf[320];
  snprintf(f->ca, sizeof f->ca, "%s/ca.pem", f->d.dir);
  snprintf(cert, sizeof cert, "%s/server.pem", f->d.dir);
  snprintf(key, sizeof key, "%s/server.key", f->d.dir);
  snprintf(tokens, sizeof tokens, "%s/tokens", f->d.dir);
  snprintf(conf, sizeof conf, "%s/coord.conf", f->d.dir);
  FILE *c = fopen(conf, "w");
  if (!c) return -1;
  fputs("notify_allow = hooks.example.org\n", c); /* a name: accepted without DNS */
  fclose(c);
  const char *extra[] = {"--tls-cert", cert, "--tls-key", key, "--tokens", tokens,
                         "--config", conf, NULL};
  if (pxt_coordd_start(&f->d, extra) != 0) return -1;
  f->admin = pxt_channel(f->d.target, f->ca, PXT_TOK_ADMIN);
  f->alice = pxt_channel(f->d.target, f->ca, PXT_TOK_ALICE);
  f->bob = pxt_channel(f->d.target, f->ca, PXT_TOK_BOB);
  *state = f;
  if (!f->admin || !f->alice || !f->bob) return -1;
  pxt_spec_t s;
  pxt_spec_init(&s, 1, 1);
  Prunex__V1__NotifySpec n = PRUNEX__V1__NOTIFY_SPEC__INIT;
  n.url = SECRET_URL;
  n.states = "end";
  s.spec.notify = &n;
  s.req.spec_yaml = SPEC_YAML;
  if (pxt_submit(f->alice, &s, f->job, sizeof f->job) != PX_OK) {
    fprintf(stderr, "submit: %s\n", px_last_error());
    return -1;
  }
  return 0;
}

static int teardown(void **state) {
  fixture_t *f = *state;
  px_rpc_channel_destroy(f->admin);
  px_rpc_channel_destroy(f->alice);
  px_rpc_channel_destroy(f->bob);
  int rc = pxt_coordd_teardown(&f->d);
  free(f);
  return rc;
}

/* The job as ch's caller reads it with GetJob (spec_yaml included). */
static Prunex__V1__Job *get(px_rpc_channel_t *ch, const char *job) {
  Prunex__V1__Job *j = NULL;
  assert_int_equal(px_rpc_get_job_ex(ch, job, 1, 0, &j), PX_OK);
  return j;
}

static void assert_whole(const Prunex__V1__Job *j) {
  assert_string_equal(j->spec->notify->url, SECRET_URL);
  assert_string_equal(j->spec_yaml, SPEC_YAML);
}

static void assert_redacted(const Prunex__V1__Job *j) {
  assert_string_equal(j->spec->notify->url, SHOWN_URL);
  assert_null(strstr(j->spec_yaml, "secret"));
  assert_null(strstr(j->spec_yaml, "token=x"));
  assert_non_null(strstr(j->spec_yaml, SHOWN_URL)); /* the text as written, URL hidden */
}

static void test_only_the_owner_and_admins_see_the_notify_url(void **state) {
  fixture_t *f = *state;
  Prunex__V1__Job *j = get(f->alice, f->job);
  assert_whole(j);
  px_rpc_message_free(j);
  j = get(f->admin, f->job);
  assert_whole(j);
  px_rpc_message_free(j);
  j = get(f->bob, f->job);
  assert_redacted(j);
  px_rpc_message_free(j);
  Prunex__V1__ListJobsRequest lr = PRUNEX__V1__LIST_JOBS_REQUEST__INIT;
  lr.include_spec_yaml = 1;
  Prunex__V1__ListJobsResponse *l = NULL;
  assert_int_equal(px_rpc_list_jobs(f->bob, &lr, 0, &l), PX_OK);
  assert_int_equal(l->n_jobs, 1);
  assert_redacted(l->jobs[0]);
  px_rpc_message_free(l);
  assert_int_equal(px_rpc_list_jobs(f->alice, &lr, 0, &l), PX_OK);
  assert_whole(l->jobs[0]);
  px_rpc_message_free(l);
}

static void test_pxctl_status_json_of_another_users_job_hides_the_secret(void **state) {
  fixture_t *f = *state;
  char coord[128], ca[400], tok[128];
  snprintf(coord, sizeof coord, "PRUNEX_COORDINATOR=%s", f->d.target);
  snprintf(ca, sizeof ca, "PRUNEX_CA=%s", f->ca);
  const char *args[] = {"status", f->job, "--json", NULL};
  pxt_result_t *r = calloc(1, sizeof *r);
  assert_non_null(r);
  snprintf(tok, sizeof tok, "PRUNEX_TOKEN=%s", PXT_TOK_BOB);
  const char *env_bob[] = {coord, ca, tok, "XDG_CONFIG_HOME=/nonexistent", NULL};
  if (pxt_pxctl(r, f->d.dir, args, env_bob, 30000) != 0) pxt_show("pxctl status (bob)", r);
  assert_int_equal(r->code, 0);
  assert_null(strstr(r->out, "secret"));
  assert_null(strstr(r->out, "token=x"));
  assert_non_null(strstr(r->out, "hooks.example.org"));
  snprintf(tok, sizeof tok, "PRUNEX_TOKEN=%s", PXT_TOK_ALICE);
  const char *env_alice[] = {coord, ca, tok, "XDG_CONFIG_HOME=/nonexistent", NULL};
  assert_int_equal(pxt_pxctl(r, f->d.dir, args, env_alice, 30000), 0);
  assert_non_null(strstr(r->out, "u:secret@hooks.example.org/p?token=x"));
  free(r);
}

static void test_watchers_and_nodes_get_it_redacted(void **state) {
  fixture_t *f = *state;
  px_rpc_stream_t *bob = NULL, *alice = NULL;
  assert_int_equal(px_rpc_watch_job(f->bob, f->job, &bob), PX_OK);
  assert_int_equal(px_rpc_watch_job(f->alice, f->job, &alice), PX_OK);
  Prunex__V1__JobUpdate *u = NULL;
  assert_int_equal(px_rpc_read_job_update(bob, 10000, &u), PX_OK);
  assert_string_equal(u->job->spec->notify->url, SHOWN_URL);
  px_rpc_message_free(u);
  assert_int_equal(px_rpc_read_job_update(alice, 10000, &u), PX_OK);
  assert_string_equal(u->job->spec->notify->url, SECRET_URL);
  px_rpc_message_free(u);
  /* a node is placed: its assignment, and the watchers' update, after the change */
  px_rpc_channel_t *n1 = pxt_channel(f->d.target, f->ca, PXT_TOK_N1);
  char node[64];
  assert_int_equal(pxt_register(n1, "n1", 1, 0, node, sizeof node), PX_OK);
  px_rpc_stream_t *as = NULL;
  assert_int_equal(px_rpc_watch_assignments(n1, node, &as), PX_OK);
  Prunex__V1__Assignment *a = pxt_next_assignment(as, 10000);
  assert_non_null(a);
  assert_string_equal(a->spec->notify->url, SHOWN_URL);
  px_rpc_message_free(a);
  assert_int_equal(px_rpc_read_job_update(bob, 10000, &u), PX_OK);
  assert_string_equal(u->job->spec->notify->url, SHOWN_URL);
  px_rpc_message_free(u);
  assert_int_equal(px_rpc_read_job_update(alice, 10000, &u), PX_OK);
  assert_string_equal(u->job->spec->notify->url, SECRET_URL);
  px_rpc_message_free(u);
  px_rpc_stream_destroy(as);
  px_rpc_stream_destroy(bob);
  px_rpc_stream_destroy(alice);
  px_rpc_channel_destroy(n1);
  assert_false(pxt_file_contains(f->d.log, "u:secret"));
  assert_false(pxt_file_contains(f->d.log, "token=x"));
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test_setup_teardown(test_only_the_owner_and_admins_see_the_notify_url, setup,
                                      teardown),
      cmocka_unit_test_setup_teardown(test_pxctl_status_json_of_another_users_job_hides_the_secret,
                                      setup, teardown),
      cmocka_unit_test_setup_teardown(test_watchers_and_nodes_get_it_redacted, setup, teardown),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
