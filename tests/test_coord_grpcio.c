/* pxcoordd against a second gRPC implementation: Python's grpcio (Debian's
 * python3-grpcio) with message classes protoc generates from
 * proto/prunex.proto at test time (python3-protobuf), driven by
 * tests/grpcio_client.py. It proves that the wire format the daemon speaks
 * is gRPC + protobuf as the reference stacks know it, not merely what our
 * own client (gRPC C core + protobuf-c) agrees with: a job submitted from
 * Python is accepted and listed PENDING, errors arrive with their gRPC
 * codes and details, and a job submitted by either client reads the same
 * from the other one, field by field. The daemon runs with TLS and tokens:
 * Python verifies it against a CA made by openssl at test time
 * and sends a bearer token, and a call without one is UNAUTHENTICATED.
 *
 * The group setup runs the daemon and the Python client once; each test
 * checks one part of what the client printed. Without /usr/bin/python3 +
 * grpcio + protobuf or without protoc (scripts/bootstrap installs them)
 * every test skips with a message saying what is missing. */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <math.h>
#include <stdint.h>

#include <cmocka.h>

#include "coord_harness.h"

#define JS(x) PRUNEX__V1__JOB_STATE__JOB_STATE_##x
#define PYTHON "/usr/bin/python3"
#define CLIENT PX_SOURCE_DIR "/tests/grpcio_client.py"
/* The name grpcio_client.py submits, in UTF-8 ("grpcio-j\u00f6b"). */
#define PY_JOB_NAME "grpcio-j\xc3\xb6" "b"
#define RUN_TIMEOUT_MS 60000

typedef struct {
  pxt_coordd_t d;
  px_rpc_channel_t *ch;
  char skip_why[1024]; /* non-empty: the prerequisites are missing */
  char ca[320];        /* the test CA (pxt_make_security) */
  char c_job[64];      /* submitted with the C client before Python ran */
  char out[16384];     /* the client's JSON line */
  char err[4096];      /* its stderr */
} fixture_t;

/* ---- running a program ------------------------------------------------------------ */

/* Runs argv (argv[0] looked up in PATH) with stdout and stderr captured,
 * killing it after timeout_ms: its exit code, 128 + signal, or -1 when it
 * could not start or ran out of time. */
static int run_capture(const char *const *argv, char *out, size_t out_cap, char *err,
                       size_t err_cap, int timeout_ms) {
  int po[2], pe[2];
  if (pipe(po) != 0) return -1;
  if (pipe(pe) != 0) {
    close(po[0]);
    close(po[1]);
    return -1;
  }
  posix_spawn_file_actions_t fa;
  posix_spawn_file_actions_init(&fa);
  posix_spawn_file_actions_adddup2(&fa, po[1], 1);
  posix_spawn_file_actions_adddup2(&fa, pe[1], 2);
  posix_spawn_file_actions_addclose(&fa, po[0]);
  posix_spawn_file_actions_addclose(&fa, pe[0]);
  posix_spawn_file_actions_addclose(&fa, po[1]);
  posix_spawn_file_actions_addclose(&fa, pe[1]);
  pid_t pid = -1;
  int rc = posix_spawnp(&pid, argv[0], &fa, NULL, (char *const *)argv, environ);
  posix_spawn_file_actions_destroy(&fa);
  close(po[1]);
  close(pe[1]);
  size_t used[2] = {0, 0};
  char *buf[2] = {out, err};
  size_t cap[2] = {out_cap, err_cap};
  int fds[2] = {po[0], pe[0]};
  int open_fds = rc == 0 ? 2 : 0;
  int64_t end = pxt_now_ms() + timeout_ms;
  while (open_fds > 0) {
    int left = (int)(end - pxt_now_ms());
    if (left <= 0) break;
    struct pollfd p[2] = {{fds[0], POLLIN, 0}, {fds[1], POLLIN, 0}};
    if (poll(p, 2, left) <= 0) continue;
    for (int i = 0; i < 2; i++) {
      if (fds[i] < 0 || !(p[i].revents & (POLLIN | POLLHUP | POLLERR))) continue;
      char tmp[1024];
      ssize_t r = read(fds[i], tmp, sizeof tmp);
      if (r <= 0) {
        fds[i] = -1; /* closed below */
        open_fds--;
        continue;
      }
      for (ssize_t k = 0; k < r && used[i] + 1 < cap[i]; k++) buf[i][used[i]++] = tmp[k];
    }
  }
  out[used[0]] = '\0';
  err[used[1]] = '\0';
  close(po[0]);
  close(pe[0]);
  if (rc != 0) {
    snprintf(err, err_cap, "cannot run %s: %s", argv[0], strerror(rc));
    return -1;
  }
  int left = (int)(end - pxt_now_ms());
  int status = pxt_wait_pid(pid, left > 0 ? left : 1);
  if (status == -1) {
    kill(pid, SIGKILL);
    pxt_wait_pid(pid, 5000);
    snprintf(err + used[1], err_cap - used[1], "\n%s: killed after %d ms", argv[0], timeout_ms);
    return -1;
  }
  return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
}

/* 1 when name is an executable file in a directory of PATH. */
static int in_path(const char *name) {
  const char *path = getenv("PATH");
  if (!path) path = "/usr/bin:/bin";
  while (*path) {
    size_t n = strcspn(path, ":");
    char full[1024];
    snprintf(full, sizeof full, "%.*s/%s", (int)n, n ? path : ".", name);
    if (access(full, X_OK) == 0) return 1;
    path += n;
    if (*path == ':') path++;
  }
  return 0;
}

/* ---- the client's JSON line ------------------------------------------------------- *
 * json.dumps output with ", " and ": ", flat but for the "jobs" list of flat
 * objects, so a key is found by text search: a job's key between the
 * job's '{' and the next '}', a top-level key anywhere (its name is used by
 * no job). */

/* Where "key": starts its value, or NULL. */
static const char *json_value(const char *from, const char *key, int in_object) {
  char pat[96];
  snprintf(pat, sizeof pat, "\"%s\": ", key);
  const char *end = in_object ? strchr(from, '}') : NULL;
  const char *p = strstr(from, pat);
  if (!p || (end && p > end)) return NULL;
  return p + strlen(pat);
}

/* The string value of key (escapes \" \\ \n decoded), "" when absent. */
static const char *json_str_at(const char *p, char *buf, size_t cap) {
  size_t n = 0;
  if (p && *p == '"') {
    for (p++; *p && *p != '"' && n + 1 < cap; p++) {
      if (*p == '\\' && p[1]) {
        p++;
        buf[n++] = *p == 'n' ? '\n' : *p;
      } else {
        buf[n++] = *p;
      }
    }
  }
  buf[n] = '\0';
  return buf;
}

/* The number (true = 1, false = 0) at p; NAN when absent. */
static double json_num_at(const char *p) {
  if (!p) return NAN;
  if (!strncmp(p, "true", 4)) return 1;
  if (!strncmp(p, "false", 5)) return 0;
  char *e;
  double v = strtod(p, &e);
  return e == p ? NAN : v;
}

/* A top-level string / a key of the job object at obj. */
static const char *top_str(const char *json, const char *key, char *buf, size_t cap) {
  return json_str_at(json_value(json, key, 0), buf, cap);
}
static const char *job_str(const char *obj, const char *key, char *buf, size_t cap) {
  return json_str_at(json_value(obj, key, 1), buf, cap);
}
static double job_num(const char *obj, const char *key) {
  return json_num_at(json_value(obj, key, 1));
}

/* The object in the "jobs" list whose job_id is id, or NULL. */
static const char *json_job(const char *json, const char *id) {
  char pat[128];
  snprintf(pat, sizeof pat, "{\"job_id\": \"%s\"", id);
  const char *jobs = strstr(json, "\"jobs\": [");
  return jobs ? strstr(jobs, pat) : NULL;
}

/* ---- fixture ------------------------------------------------------------------------- */

/* Leaves f->skip_why empty when python3 with grpc + protobuf and protoc are
 * all there, else says what is missing. */
static void check_prerequisites(fixture_t *f) {
  char out[512], err[512];
  const char *check[] = {PYTHON, "-I", "-c", "import grpc, google.protobuf", NULL};
  if (access(PYTHON, X_OK) != 0)
    snprintf(f->skip_why, sizeof f->skip_why, "%s is missing", PYTHON);
  else if (run_capture(check, out, sizeof out, err, sizeof err, 30000) != 0)
    snprintf(f->skip_why, sizeof f->skip_why,
             "%s cannot import grpc and google.protobuf (python3-grpcio, python3-protobuf): %s",
             PYTHON, err);
  else if (!in_path("protoc"))
    snprintf(f->skip_why, sizeof f->skip_why, "protoc is not in PATH (protobuf-compiler)");
}

/* Starts the daemon, submits the C job, generates the Python classes and
 * runs the client; 0 or -1 after printing why. */
static int run_client(fixture_t *f) {
  f->d.pid = -1;
  if (pxt_mkdtemp(f->d.dir, sizeof f->d.dir) != 0 || pxt_make_security(f->d.dir) != 0) return -1;
  snprintf(f->d.db, sizeof f->d.db, "%s/coord.db", f->d.dir);
  char cert[320], key[320], tokens[320];
  snprintf(f->ca, sizeof f->ca, "%s/ca.pem", f->d.dir);
  snprintf(cert, sizeof cert, "%s/server.pem", f->d.dir);
  snprintf(key, sizeof key, "%s/server.key", f->d.dir);
  snprintf(tokens, sizeof tokens, "%s/tokens", f->d.dir);
  const char *extra[] = {"--tls-cert", cert, "--tls-key", key, "--tokens", tokens, NULL};
  if (pxt_coordd_start(&f->d, extra) != 0) return -1;
  if (!(f->ch = pxt_channel(f->d.target, f->ca, PXT_TOK_ADMIN))) return -1;
  /* One job from our own client first: Python must list it too. */
  if (pxt_submit_mp(f->ch, 2, 1, f->c_job, sizeof f->c_job) != PX_OK) {
    fprintf(stderr, "C SubmitJob: %s\n", px_last_error());
    return -1;
  }
  char pb2[320], python_out[400], port[16];
  snprintf(pb2, sizeof pb2, "%s/pb2", f->d.dir);
  if (mkdir(pb2, 0755) != 0) return -1;
  snprintf(python_out, sizeof python_out, "--python_out=%s", pb2);
  const char *protoc[] = {"protoc", python_out, "-I", PX_SOURCE_DIR "/proto", "prunex.proto",
                          NULL};
  int rc = run_capture(protoc, f->out, sizeof f->out, f->err, sizeof f->err, RUN_TIMEOUT_MS);
  if (rc != 0) {
    fprintf(stderr, "protoc exited %d: %s\n", rc, f->err);
    return -1;
  }
  snprintf(port, sizeof port, "%d", f->d.port);
  /* -I: Debian's packages only, whatever PYTHONPATH or ~/.local hold. */
  const char *client[] = {PYTHON, "-I", "-B", CLIENT, port, pb2, f->ca, PXT_TOK_ALICE, NULL};
  int64_t t0 = pxt_now_ms();
  rc = run_capture(client, f->out, sizeof f->out, f->err, sizeof f->err, RUN_TIMEOUT_MS);
  if (rc != 0 || !strchr(f->out, '{')) {
    fprintf(stderr, "grpcio_client.py exited %d\nstdout: %s\nstderr: %s\n", rc, f->out, f->err);
    pxt_coordd_dump_log(&f->d);
    return -1;
  }
  printf("grpcio_client.py (%lld ms): %s", (long long)(pxt_now_ms() - t0), f->out);
  return 0;
}

static int group_teardown(void **state) {
  fixture_t *f = *state;
  if (!f) return 0;
  px_rpc_channel_destroy(f->ch);
  int rc = pxt_coordd_teardown(&f->d);
  free(f);
  *state = NULL;
  return rc;
}

/* A failed setup cleans up at once (cmocka's group teardown, if it runs
 * after a failed setup, then finds a NULL state). */
static int group_setup(void **state) {
  fixture_t *f = calloc(1, sizeof *f);
  if (!f) return -1;
  f->d.pid = -1;
  *state = f;
  check_prerequisites(f);
  if (f->skip_why[0] || run_client(f) == 0) return 0;
  group_teardown(state);
  return -1;
}

/* Skips the calling test, saying why, when the prerequisites are missing. */
#define SKIP_UNLESS_READY(f)                                           \
  do {                                                                 \
    if ((f)->skip_why[0]) {                                            \
      print_message("skipped: %s (run scripts/bootstrap)\n", (f)->skip_why); \
      skip();                                                          \
    }                                                                  \
  } while (0)

/* ---- tests --------------------------------------------------------------------------- */

static void test_python_submit_is_accepted_and_listed_pending(void **state) {
  fixture_t *f = *state;
  SKIP_UNLESS_READY(f);
  char id[64], s[256];
  top_str(f->out, "submitted_job_id", id, sizeof id);
  assert_true(id[0] != '\0');
  assert_string_not_equal(id, f->c_job);
  const char *j = json_job(f->out, id);
  if (!j) fail_msg("Python's ListJobs lacks its own job %s: %s", id, f->out);
  assert_string_equal(job_str(j, "state", s, sizeof s), "JOB_STATE_PENDING");
  assert_string_equal(job_str(j, "name", s, sizeof s), PY_JOB_NAME);
  assert_string_equal(job_str(j, "model", s, sizeof s), "resnet20");
  assert_string_equal(job_str(j, "dataset", s, sizeof s), "fashion-mnist");
  assert_string_equal(job_str(j, "strategy", s, sizeof s), "STRATEGY_HSADMM");
  assert_true(job_num(j, "nodes") == 1);
  assert_true(job_num(j, "workers_per_node") == 1);
  assert_string_equal(job_str(j, "seed", s, sizeof s), "9223372036854775813");
  assert_string_equal(job_str(j, "skip_layers", s, sizeof s), "conv1,fc");
  assert_true(job_num(j, "rho2") == 0.25);
  assert_true(job_num(j, "spec_yaml_matches") == 1);
  assert_true(job_num(j, "events") >= 1); /* the submit transition */
  /* The state filter and the limit, as Python encodes them: newest first,
   * so Python's own job, not the older C one. */
  char pend[128];
  snprintf(pend, sizeof pend, "\"pending_limit_1\": [\"%s\"]", id);
  if (!strstr(f->out, pend)) fail_msg("expected %s in %s", pend, f->out);
}

static void test_python_lists_the_job_the_c_client_submitted(void **state) {
  fixture_t *f = *state;
  SKIP_UNLESS_READY(f);
  char s[256];
  const char *j = json_job(f->out, f->c_job);
  if (!j) fail_msg("Python's ListJobs lacks %s: %s", f->c_job, f->out);
  assert_string_equal(job_str(j, "name", s, sizeof s), "test-job");
  assert_string_equal(job_str(j, "state", s, sizeof s), "JOB_STATE_PENDING");
  assert_string_equal(job_str(j, "dataset", s, sizeof s), "cifar10");
  assert_true(job_num(j, "nodes") == 2);
  /* Exactly the two jobs, newest first: the invalid one was not queued. */
  const char *jobs = strstr(f->out, "\"jobs\": [");
  assert_non_null(jobs);
  assert_ptr_not_equal(strstr(jobs, "{\"job_id\""), j);
  int n = 0;
  for (const char *p = jobs; (p = strstr(p, "{\"job_id\"")); p++) n++;
  assert_int_equal(n, 2);
}

static void test_c_client_reads_the_python_job_with_the_same_fields(void **state) {
  fixture_t *f = *state;
  SKIP_UNLESS_READY(f);
  char id[64];
  top_str(f->out, "submitted_job_id", id, sizeof id);
  const char *pj = json_job(f->out, id);
  assert_non_null(pj);
  Prunex__V1__ListJobsRequest req = PRUNEX__V1__LIST_JOBS_REQUEST__INIT;
  req.include_spec_yaml = 1;
  Prunex__V1__ListJobsResponse *l = NULL;
  assert_int_equal(px_rpc_list_jobs(f->ch, &req, 0, &l), PX_OK);
  assert_int_equal(l->n_jobs, 2);
  const Prunex__V1__Job *j = NULL;
  for (size_t i = 0; i < l->n_jobs; i++)
    if (!strcmp(l->jobs[i]->job_id, id)) j = l->jobs[i];
  if (!j) fail_msg("the C client's ListJobs lacks the Python job %s", id);
  assert_int_equal(j->state, JS(PENDING));
  assert_string_equal(j->name, PY_JOB_NAME);
  assert_true((double)j->created_unix_ms == job_num(pj, "created_unix_ms"));
  assert_non_null(j->spec);
  const Prunex__V1__JobSpec *s = j->spec;
  assert_string_equal(s->name, PY_JOB_NAME);
  assert_int_equal(s->strategy, PRUNEX__V1__STRATEGY__STRATEGY_HSADMM);
  assert_non_null(s->model);
  assert_string_equal(s->model->name, "resnet20");
  assert_non_null(s->dataset);
  assert_string_equal(s->dataset->name, "fashion-mnist");
  assert_non_null(s->cluster);
  assert_int_equal(s->cluster->nodes, 1);
  assert_int_equal(s->cluster->workers_per_node, 1);
  assert_string_equal(s->cluster->device, "cpu");
  assert_non_null(s->train);
  assert_int_equal(s->train->epochs, 1);
  assert_int_equal(s->train->batch_size, 64);
  assert_true(s->train->lr == 0.05);
  assert_true(s->train->momentum == 0.9);
  assert_true(s->train->seed == UINT64_C(9223372036854775813));
  assert_non_null(s->prune);
  assert_true(s->prune->filter_keep == 0.5);
  assert_int_equal(s->prune->n_skip_layers, 2);
  assert_string_equal(s->prune->skip_layers[0], "conv1");
  assert_string_equal(s->prune->skip_layers[1], "fc");
  assert_non_null(s->admm);
  assert_true(s->admm->rho1 == 0.5);
  assert_true(s->admm->rho2 == 0.25);
  assert_int_equal(s->admm->max_iterations, 7);
  assert_null(s->comm); /* Python never touched it: absent, not empty */
  assert_true(strstr(j->spec_yaml, "\xe2\x80\x94 Python grpcio\n") != NULL);
  assert_true(strstr(j->spec_yaml, "name: " PY_JOB_NAME "\n") != NULL);
  assert_true(j->n_events >= 1);
  assert_int_equal(j->events[0]->to_state, JS(PENDING));
  px_rpc_message_free(l);
}

static void test_python_gets_invalid_argument_with_the_field_for_a_bad_spec(void **state) {
  fixture_t *f = *state;
  SKIP_UNLESS_READY(f);
  char s[512];
  assert_string_equal(top_str(f->out, "invalid_submit_code", s, sizeof s), "INVALID_ARGUMENT");
  top_str(f->out, "invalid_submit_details", s, sizeof s);
  if (!strstr(s, "spec.cluster.nodes")) fail_msg("details do not name the field: '%s'", s);
}

static void test_python_speaks_tls_and_is_refused_without_its_token(void **state) {
  fixture_t *f = *state;
  SKIP_UNLESS_READY(f);
  char s[128];
  if (!strstr(f->out, "\"tls\": true")) fail_msg("the client did not use TLS: %s", f->out);
  assert_string_equal(top_str(f->out, "no_token_code", s, sizeof s), "UNAUTHENTICATED");
  /* and its job belongs to the token's user */
  char id[64];
  top_str(f->out, "submitted_job_id", id, sizeof id);
  Prunex__V1__Job *j = NULL;
  assert_int_equal(px_rpc_get_job(f->ch, id, 0, &j), PX_OK);
  assert_string_equal(j->owner, "alice");
  px_rpc_message_free(j);
}

static void test_python_gets_not_found_for_an_unknown_job(void **state) {
  fixture_t *f = *state;
  SKIP_UNLESS_READY(f);
  char s[512];
  assert_string_equal(top_str(f->out, "unknown_get_code", s, sizeof s), "NOT_FOUND");
  top_str(f->out, "unknown_get_details", s, sizeof s);
  if (!strstr(s, "job-999999")) fail_msg("details do not name the job: '%s'", s);
}

/* Last: the Python connections left nothing that stops a clean shutdown. */
static void test_daemon_stops_cleanly_after_the_python_client(void **state) {
  fixture_t *f = *state;
  SKIP_UNLESS_READY(f);
  px_rpc_channel_destroy(f->ch);
  f->ch = NULL;
  int status = pxt_coordd_stop(&f->d, SIGTERM);
  if (status == -1 || !WIFEXITED(status) || WEXITSTATUS(status) != 0) {
    pxt_coordd_dump_log(&f->d);
    fail_msg("pxcoordd did not exit 0 after SIGTERM (wait status %d)", status);
  }
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_python_submit_is_accepted_and_listed_pending),
      cmocka_unit_test(test_python_lists_the_job_the_c_client_submitted),
      cmocka_unit_test(test_c_client_reads_the_python_job_with_the_same_fields),
      cmocka_unit_test(test_python_gets_invalid_argument_with_the_field_for_a_bad_spec),
      cmocka_unit_test(test_python_gets_not_found_for_an_unknown_job),
      cmocka_unit_test(test_python_speaks_tls_and_is_refused_without_its_token),
      cmocka_unit_test(test_daemon_stops_cleanly_after_the_python_client),
  };
  return cmocka_run_group_tests(tests, group_setup, group_teardown);
}
