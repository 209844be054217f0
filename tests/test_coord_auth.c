/* pxcoordd as a shared service that trusts nobody
 * (docs/security.md): the real daemon with TLS (a throwaway CA and server
 * certificate made with openssl at test time) and a tokens file, driven by
 * libpxcore's client with various credentials. It proves that every RPC
 * without a token is UNAUTHENTICATED; that users manage only their own jobs
 * (admins all); that user tokens cannot act as nodes or ranks, nodes only
 * as themselves and for the ranks they hold, and rank secrets only for
 * their own rank of their own, live job; that a client with the wrong CA
 * cannot connect; that the tokens file is re-read on SIGHUP and refused when
 * others may read it; that a token removed from it loses the streams it
 * opened; that the daemon refuses a non-loopback address
 * without TLS and tokens; that a hostile 400,000-layer report is refused
 * at once while the daemon keeps answering; and that the dashboard (in
 * headless Chromium) opened without a token says how to give one, and
 * draws with one. */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <cmocka.h>

#include "coord_harness.h"

#define JS(x) PRUNEX__V1__JOB_STATE__JOB_STATE_##x

typedef struct {
  pxt_coordd_t d;
  char ca[320], other_ca[320], cert[320], key[320], tokens[320];
  px_rpc_channel_t *admin, *alice, *bob, *n1, *n2;
} fixture_t;

static int setup(void **state) {
  fixture_t *f = calloc(1, sizeof *f);
  if (!f) return -1;
  f->d.pid = -1;
  if (pxt_mkdtemp(f->d.dir, sizeof f->d.dir) != 0 || pxt_make_security(f->d.dir) != 0) {
    free(f);
    return -1;
  }
  snprintf(f->d.db, sizeof f->d.db, "%s/coord.db", f->d.dir);
  snprintf(f->ca, sizeof f->ca, "%s/ca.pem", f->d.dir);
  snprintf(f->other_ca, sizeof f->other_ca, "%s/other-ca.pem", f->d.dir);
  snprintf(f->cert, sizeof f->cert, "%s/server.pem", f->d.dir);
  snprintf(f->key, sizeof f->key, "%s/server.key", f->d.dir);
  snprintf(f->tokens, sizeof f->tokens, "%s/tokens", f->d.dir);
  const char *extra[] = {"--tls-cert", f->cert, "--tls-key", f->key, "--tokens", f->tokens,
                         "--heartbeat-timeout-ms", "60000", "--http", "127.0.0.1:0",
                         "--http-www", PX_SOURCE_DIR "/coordinatord/www", NULL};
  if (pxt_coordd_start(&f->d, extra) != 0) {
    pxt_rmtree(f->d.dir);
    free(f);
    return -1;
  }
  f->admin = pxt_channel(f->d.target, f->ca, PXT_TOK_ADMIN);
  f->alice = pxt_channel(f->d.target, f->ca, PXT_TOK_ALICE);
  f->bob = pxt_channel(f->d.target, f->ca, PXT_TOK_BOB);
  f->n1 = pxt_channel(f->d.target, f->ca, PXT_TOK_N1);
  f->n2 = pxt_channel(f->d.target, f->ca, PXT_TOK_N2);
  *state = f;
  return f->admin && f->alice && f->bob && f->n1 && f->n2 ? 0 : -1;
}

static int teardown(void **state) {
  fixture_t *f = *state;
  px_rpc_channel_destroy(f->admin);
  px_rpc_channel_destroy(f->alice);
  px_rpc_channel_destroy(f->bob);
  px_rpc_channel_destroy(f->n1);
  px_rpc_channel_destroy(f->n2);
  int rc = pxt_coordd_teardown(&f->d);
  free(f);
  return rc;
}

/* ---- transport --------------------------------------------------------------- */

static void test_every_rpc_without_a_token_is_unauthenticated(void **state) {
  fixture_t *f = *state;
  px_rpc_channel_t *anon = pxt_channel(f->d.target, f->ca, NULL);
  assert_non_null(anon);
  static const char *const methods[] = {
      PX_RPC_REGISTER_NODE, PX_RPC_HEARTBEAT,       PX_RPC_KV_PUT,
      PX_RPC_KV_GET,        PX_RPC_REPORT_ITERATION, PX_RPC_REPORT_RANK_EXIT,
      PX_RPC_SUBMIT_JOB,    PX_RPC_GET_JOB,         PX_RPC_LIST_JOBS,
      PX_RPC_CANCEL_JOB,    PX_RPC_LIST_NODES,      PX_RPC_GET_ITERATIONS,
      PX_RPC_DELETE_JOB,
  };
  for (size_t i = 0; i < sizeof methods / sizeof methods[0]; i++) {
    void *resp = NULL;
    size_t len = 0;
    /* An empty request is a valid message of every type. */
    assert_int_not_equal(px_rpc_call_raw(anon, methods[i], "", 0, 5000, &resp, &len), PX_OK);
    if (px_rpc_last_code() != PX_RPC_UNAUTHENTICATED)
      fail_msg("%s: %s", methods[i], px_last_error());
  }
  /* The two streams end UNAUTHENTICATED too. */
  px_rpc_stream_t *s = NULL;
  assert_int_equal(px_rpc_watch_assignments(anon, "node-0001", &s), PX_OK);
  Prunex__V1__Assignment *a = NULL;
  assert_int_not_equal(px_rpc_read_assignment(s, 5000, &a), PX_OK);
  assert_int_equal(px_rpc_last_code(), PX_RPC_UNAUTHENTICATED);
  px_rpc_stream_destroy(s);
  assert_int_equal(px_rpc_watch_job(anon, "job-000001", &s), PX_OK);
  Prunex__V1__JobUpdate *u = NULL;
  assert_int_not_equal(px_rpc_read_job_update(s, 5000, &u), PX_OK);
  assert_int_equal(px_rpc_last_code(), PX_RPC_UNAUTHENTICATED);
  px_rpc_stream_destroy(s);
  px_rpc_channel_destroy(anon);

  /* An unknown token is no better than none. */
  px_rpc_channel_t *forged = pxt_channel(f->d.target, f->ca, "tok-forged-0123456789abcdef");
  Prunex__V1__ListJobsRequest req = PRUNEX__V1__LIST_JOBS_REQUEST__INIT;
  Prunex__V1__ListJobsResponse *l = NULL;
  assert_int_not_equal(px_rpc_list_jobs(forged, &req, 5000, &l), PX_OK);
  assert_int_equal(px_rpc_last_code(), PX_RPC_UNAUTHENTICATED);
  assert_non_null(strstr(px_last_error(), "unknown token"));
  px_rpc_channel_destroy(forged);
}

static void test_a_client_with_the_wrong_ca_or_no_tls_cannot_connect(void **state) {
  fixture_t *f = *state;
  Prunex__V1__ListJobsRequest req = PRUNEX__V1__LIST_JOBS_REQUEST__INIT;
  Prunex__V1__ListJobsResponse *l = NULL;
  px_rpc_channel_t *wrong = pxt_channel(f->d.target, f->other_ca, PXT_TOK_ADMIN);
  assert_non_null(wrong);
  assert_int_not_equal(px_rpc_list_jobs(wrong, &req, 3000, &l), PX_OK);
  assert_int_equal(px_rpc_last_code(), PX_RPC_UNAVAILABLE);
  px_rpc_channel_destroy(wrong);
  px_rpc_channel_t *plain = pxt_channel(f->d.target, NULL, PXT_TOK_ADMIN);
  assert_int_not_equal(px_rpc_list_jobs(plain, &req, 3000, &l), PX_OK);
  assert_int_equal(px_rpc_last_code(), PX_RPC_UNAVAILABLE);
  px_rpc_channel_destroy(plain);
  /* The right CA works. */
  assert_int_equal(px_rpc_list_jobs(f->alice, &req, 5000, &l), PX_OK);
  px_rpc_message_free(l);
  /* A CA file that is not one is refused before any connection. */
  px_rpc_channel_options_t o = {f->tokens, PXT_TOK_ADMIN};
  px_rpc_channel_t *ch = NULL;
  assert_int_equal(px_rpc_channel_create_ex(f->d.target, &o, &ch), PX_ERR_INVALID);
  assert_non_null(strstr(px_last_error(), "no PEM certificate"));
}

/* ---- users ------------------------------------------------------------------- */

static void test_users_manage_their_own_jobs_and_admins_all(void **state) {
  fixture_t *f = *state;
  char ja[64], jb[64], jc[64];
  assert_int_equal(pxt_submit_mp(f->alice, 9, 1, ja, sizeof ja), PX_OK);
  assert_int_equal(pxt_submit_mp(f->alice, 9, 1, jb, sizeof jb), PX_OK);
  assert_int_equal(pxt_submit_mp(f->bob, 9, 1, jc, sizeof jc), PX_OK);
  Prunex__V1__Job *j = NULL;
  assert_int_equal(px_rpc_get_job(f->bob, ja, 0, &j), PX_OK); /* everyone sees every job */
  assert_string_equal(j->owner, "alice");
  px_rpc_message_free(j);

  Prunex__V1__CancelJobResponse *cr = NULL;
  assert_int_not_equal(px_rpc_cancel_job(f->bob, ja, "mine now", 0, &cr), PX_OK);
  assert_int_equal(px_rpc_last_code(), PX_RPC_PERMISSION_DENIED);
  assert_non_null(strstr(px_last_error(), "belongs to alice"));
  assert_int_equal(pxt_job_state(f->admin, ja), JS(PENDING));
  assert_int_equal(px_rpc_cancel_job(f->alice, ja, "own", 0, &cr), PX_OK);
  px_rpc_message_free(cr);
  assert_int_equal(px_rpc_cancel_job(f->admin, jb, "admin", 0, &cr), PX_OK);
  px_rpc_message_free(cr);
  assert_int_equal(pxt_job_state(f->admin, jb), JS(CANCELLED));

  /* delete: owner or admin, finished jobs only */
  assert_int_equal(px_rpc_delete_job(f->alice, jc, 0), PX_ERR_BACKEND);
  assert_int_equal(px_rpc_last_code(), PX_RPC_PERMISSION_DENIED);
  assert_int_equal(px_rpc_delete_job(f->bob, jc, 0), PX_ERR_STATE); /* still pending */
  assert_int_equal(px_rpc_delete_job(f->bob, ja, 0), PX_ERR_BACKEND);
  assert_int_equal(px_rpc_last_code(), PX_RPC_PERMISSION_DENIED);
  assert_int_equal(px_rpc_delete_job(f->alice, ja, 0), PX_OK);
  assert_int_equal(px_rpc_delete_job(f->admin, jb, 0), PX_OK);
  assert_int_equal(px_rpc_get_job(f->admin, ja, 0, &j), PX_ERR_INVALID);
  assert_int_equal(px_rpc_last_code(), PX_RPC_NOT_FOUND);
  assert_int_equal(px_rpc_cancel_job(f->bob, jc, "cleanup", 0, &cr), PX_OK);
  px_rpc_message_free(cr);
}

static void test_user_tokens_cannot_act_as_nodes_or_ranks(void **state) {
  fixture_t *f = *state;
  char id[64];
  assert_int_not_equal(pxt_register(f->admin, "n1", 1, 0, id, sizeof id), PX_OK);
  assert_int_equal(px_rpc_last_code(), PX_RPC_PERMISSION_DENIED);
  assert_int_not_equal(pxt_register(f->alice, "n9", 1, 0, id, sizeof id), PX_OK);
  assert_int_equal(px_rpc_last_code(), PX_RPC_PERMISSION_DENIED);
  Prunex__V1__IterationReport rep = PRUNEX__V1__ITERATION_REPORT__INIT;
  rep.job_id = "job-000001";
  Prunex__V1__ControlDecision *d = NULL;
  assert_int_not_equal(px_rpc_report_iteration(f->alice, &rep, 0, &d), PX_OK);
  assert_int_equal(px_rpc_last_code(), PX_RPC_PERMISSION_DENIED);
  Prunex__V1__RankExit ex = PRUNEX__V1__RANK_EXIT__INIT;
  ex.job_id = "job-000001";
  assert_int_not_equal(px_rpc_report_rank_exit(f->admin, &ex, 0), PX_OK);
  assert_int_equal(px_rpc_last_code(), PX_RPC_PERMISSION_DENIED);
  Prunex__V1__KvPutRequest kp = PRUNEX__V1__KV_PUT_REQUEST__INIT;
  kp.job_id = "job-000001";
  kp.key = "k";
  assert_int_not_equal(px_rpc_kv_put(f->admin, &kp, 0), PX_OK);
  assert_int_equal(px_rpc_last_code(), PX_RPC_PERMISSION_DENIED);
  /* and nodes cannot use the Jobs service */
  Prunex__V1__ListJobsRequest lr = PRUNEX__V1__LIST_JOBS_REQUEST__INIT;
  Prunex__V1__ListJobsResponse *l = NULL;
  assert_int_not_equal(px_rpc_list_jobs(f->n1, &lr, 0, &l), PX_OK);
  assert_int_equal(px_rpc_last_code(), PX_RPC_PERMISSION_DENIED);
}

/* ---- nodes and ranks ------------------------------------------------------------ */

static void test_nodes_and_rank_secrets_are_checked_against_the_assignment(void **state) {
  fixture_t *f = *state;
  char id1[64], id2[64];
  assert_int_equal(pxt_register(f->n1, "n1", 2, 0, id1, sizeof id1), PX_OK);
  assert_int_equal(pxt_register(f->n2, "n2", 2, 0, id2, sizeof id2), PX_OK);
  /* n2 cannot take n1's name, nor heartbeat or watch as n1 */
  assert_int_not_equal(pxt_register(f->n2, "n1", 2, 0, NULL, 0), PX_OK);
  assert_int_equal(px_rpc_last_code(), PX_RPC_PERMISSION_DENIED);
  Prunex__V1__HeartbeatRequest hb = PRUNEX__V1__HEARTBEAT_REQUEST__INIT;
  hb.node_id = id1;
  Prunex__V1__HeartbeatResponse *hr = NULL;
  assert_int_not_equal(px_rpc_heartbeat(f->n2, &hb, 0, &hr), PX_OK);
  assert_int_equal(px_rpc_last_code(), PX_RPC_PERMISSION_DENIED);
  assert_int_equal(px_rpc_heartbeat(f->n1, &hb, 0, &hr), PX_OK);
  assert_true(hr->known);
  px_rpc_message_free(hr);

  px_rpc_stream_t *w1 = NULL, *w2 = NULL;
  assert_int_equal(px_rpc_watch_assignments(f->n1, id1, &w1), PX_OK);
  assert_int_equal(px_rpc_watch_assignments(f->n2, id2, &w2), PX_OK);
  pxt_sleep_ms(200);
  /* job A on both nodes (2 x 2: n1 ranks 0-1, n2 ranks 2-3) */
  char ja[64], jb[64];
  assert_int_equal(pxt_submit_mp(f->alice, 2, 2, ja, sizeof ja), PX_OK);
  Prunex__V1__Assignment *a1 = pxt_next_assignment(w1, 10000);
  Prunex__V1__Assignment *a2 = pxt_next_assignment(w2, 10000);
  assert_non_null(a1);
  assert_non_null(a2);
  assert_string_equal(a1->job_id, ja);
  assert_int_equal(a1->n_ranks, 2);
  assert_int_equal(a2->n_ranks, 2);
  const char *s_n1 = a1->ranks[0]->secret; /* rank of n1 */
  assert_int_equal(strncmp(s_n1, "pxr_", 4), 0);
  assert_int_equal(strlen(s_n1), 68);
  assert_string_not_equal(s_n1, a1->ranks[1]->secret);
  int r_n1 = a1->ranks[0]->rank, r_n2 = a2->ranks[0]->rank;

  px_rpc_channel_t *rank = pxt_channel(f->d.target, f->ca, s_n1);
  /* its own rank of its own job: fine */
  Prunex__V1__KvPutRequest kp = PRUNEX__V1__KV_PUT_REQUEST__INIT;
  kp.job_id = ja;
  kp.key = "ucx/0";
  kp.value.data = (uint8_t *)"addr";
  kp.value.len = 4;
  assert_int_equal(px_rpc_kv_put(rank, &kp, 0), PX_OK);
  Prunex__V1__IterationReport rep = PRUNEX__V1__ITERATION_REPORT__INIT;
  rep.job_id = ja;
  rep.rank = r_n1;
  Prunex__V1__ControlDecision *d = NULL;
  assert_int_equal(px_rpc_report_iteration(rank, &rep, 0, &d), PX_OK);
  px_rpc_message_free(d);
  /* more layers than any model: refused by the linear check */
  Prunex__V1__LayerMetrics *lm = calloc(5000, sizeof *lm);
  Prunex__V1__LayerMetrics **lp = calloc(5000, sizeof *lp);
  for (int i = 0; i < 5000; i++) {
    lm[i] = (Prunex__V1__LayerMetrics)PRUNEX__V1__LAYER_METRICS__INIT;
    lm[i].layer = i;
    lp[i] = &lm[i];
  }
  rep.iteration = 1;
  rep.layers = lp;
  rep.n_layers = 5000;
  assert_int_not_equal(px_rpc_report_iteration(rank, &rep, 0, &d), PX_OK);
  assert_int_equal(px_rpc_last_code(), PX_RPC_INVALID_ARGUMENT);
  assert_non_null(strstr(px_last_error(), "no model has more than"));
  rep.n_layers = 3;
  lm[2].layer = 0; /* a duplicate */
  assert_int_not_equal(px_rpc_report_iteration(rank, &rep, 0, &d), PX_OK);
  assert_non_null(strstr(px_last_error(), "reported twice"));
  rep.n_layers = 0;
  rep.layers = NULL;
  free(lm);
  free(lp);
  /* another rank: refused */
  rep.rank = r_n2;
  assert_int_not_equal(px_rpc_report_iteration(rank, &rep, 0, &d), PX_OK);
  assert_int_equal(px_rpc_last_code(), PX_RPC_PERMISSION_DENIED);

  /* a node reports exits only for ranks it holds */
  Prunex__V1__RankExit ex = PRUNEX__V1__RANK_EXIT__INIT;
  ex.job_id = ja;
  ex.rank = r_n2;
  ex.exit_code = 0;
  assert_int_not_equal(px_rpc_report_rank_exit(f->n1, &ex, 0), PX_OK);
  assert_int_equal(px_rpc_last_code(), PX_RPC_PERMISSION_DENIED);
  assert_non_null(strstr(px_last_error(), "does not hold"));
  assert_int_equal(pxt_job_state(f->admin, ja), JS(RUNNING));

  /* job B: job A's secret does not open it */
  Prunex__V1__CancelJobResponse *cr = NULL;
  assert_int_equal(px_rpc_cancel_job(f->alice, ja, "next", 0, &cr), PX_OK);
  px_rpc_message_free(cr);
  assert_int_equal(pxt_submit_mp(f->bob, 2, 2, jb, sizeof jb), PX_OK);
  kp.job_id = jb;
  assert_int_not_equal(px_rpc_kv_put(rank, &kp, 0), PX_OK);
  assert_int_equal(px_rpc_last_code(), PX_RPC_PERMISSION_DENIED);
  assert_non_null(strstr(px_last_error(), "does not open job"));
  /* and job A is over: its secrets are void */
  kp.job_id = ja;
  assert_int_not_equal(px_rpc_kv_put(rank, &kp, 0), PX_OK);
  assert_int_equal(px_rpc_last_code(), PX_RPC_PERMISSION_DENIED);
  px_rpc_channel_destroy(rank);

  px_rpc_message_free(a1);
  px_rpc_message_free(a2);
  assert_int_equal(px_rpc_cancel_job(f->bob, jb, "done", 0, &cr), PX_OK);
  px_rpc_message_free(cr);
  px_rpc_stream_destroy(w1);
  px_rpc_stream_destroy(w2);
}

/* ---- bounds --------------------------------------------------------------------- */

static void test_a_400000_layer_report_is_refused_at_once(void **state) {
  fixture_t *f = *state;
  /* Hand-encoded: 400,000 x (field 12, length 2, {field 1 = i mod 128}) plus
   * job_id: 1.6 MB, a few ms to build, under the 2 MiB server limit. */
  size_t n = 400000, len = 0;
  uint8_t *buf = malloc(n * 4 + 64);
  assert_non_null(buf);
  const char *job = "job-000001";
  buf[len++] = 0x0a;
  buf[len++] = (uint8_t)strlen(job);
  memcpy(buf + len, job, strlen(job));
  len += strlen(job);
  for (size_t i = 0; i < n; i++) {
    buf[len++] = 0x62; /* field 12, length-delimited */
    buf[len++] = 2;
    buf[len++] = 0x08; /* field 1, varint */
    buf[len++] = (uint8_t)(i % 128);
  }
  px_rpc_channel_t *anon = pxt_channel(f->d.target, f->ca, PXT_TOK_N1);
  void *resp = NULL;
  size_t rlen = 0;
  int64_t t0 = pxt_now_ms();
  assert_int_not_equal(px_rpc_call_raw(anon, PX_RPC_REPORT_ITERATION, buf, len, 10000, &resp,
                                       &rlen),
                       PX_OK);
  int64_t ms = pxt_now_ms() - t0;
  px_rpc_code_t code = px_rpc_last_code();
  assert_true(code == PX_RPC_RESOURCE_EXHAUSTED || code == PX_RPC_INVALID_ARGUMENT ||
              code == PX_RPC_PERMISSION_DENIED);
  printf("400,000-layer report (%zu bytes): %s in %lld ms\n", len, px_rpc_code_name(code),
         (long long)ms);
  assert_true(ms < 2000);
  free(buf);
  px_rpc_channel_destroy(anon);
  /* still answering */
  t0 = pxt_now_ms();
  Prunex__V1__ListJobsRequest req = PRUNEX__V1__LIST_JOBS_REQUEST__INIT;
  Prunex__V1__ListJobsResponse *l = NULL;
  assert_int_equal(px_rpc_list_jobs(f->admin, &req, 5000, &l), PX_OK);
  px_rpc_message_free(l);
  assert_true(pxt_now_ms() - t0 < 2000);
}

/* ---- the tokens file ------------------------------------------------------------ */

static void test_tokens_file_is_reread_on_sighup(void **state) {
  fixture_t *f = *state;
  const char *carol = "tok-carol-0123456789abcdef";
  px_rpc_channel_t *ch = pxt_channel(f->d.target, f->ca, carol);
  Prunex__V1__ListJobsRequest req = PRUNEX__V1__LIST_JOBS_REQUEST__INIT;
  Prunex__V1__ListJobsResponse *l = NULL;
  assert_int_not_equal(px_rpc_list_jobs(ch, &req, 5000, &l), PX_OK);
  assert_int_equal(px_rpc_last_code(), PX_RPC_UNAUTHENTICATED);
  FILE *t = fopen(f->tokens, "a");
  assert_non_null(t);
  fprintf(t, "%s carol user\n", carol);
  fclose(t);
  kill(f->d.pid, SIGHUP);
  int ok = 0;
  for (int i = 0; i < 100 && !ok; i++) {
    ok = px_rpc_list_jobs(ch, &req, 5000, &l) == PX_OK;
    if (ok) px_rpc_message_free(l);
    else pxt_sleep_ms(50);
  }
  assert_true(ok);
  /* a broken file keeps the tokens in force */
  t = fopen(f->tokens, "a");
  fprintf(t, "short bad role\n");
  fclose(t);
  kill(f->d.pid, SIGHUP);
  pxt_sleep_ms(300);
  assert_int_equal(px_rpc_list_jobs(ch, &req, 5000, &l), PX_OK);
  px_rpc_message_free(l);
  px_rpc_channel_destroy(ch);
}

/* Revocation reaches open streams: bob's WatchJob and node n2's
 * WatchAssignments, opened before their lines left the tokens file, end
 * UNAUTHENTICATED on SIGHUP, while the admin's stream goes on and still
 * sees the job end. */
static void test_a_revoked_token_loses_its_open_streams(void **state) {
  fixture_t *f = *state;
  char job[64], node[64];
  assert_int_equal(pxt_submit_mp(f->alice, 2, 1, job, sizeof job), PX_OK); /* stays PENDING */
  assert_int_equal(pxt_register(f->n2, "n2", 1, 0, node, sizeof node), PX_OK);
  px_rpc_stream_t *bobs = NULL, *admins = NULL, *n2s = NULL;
  Prunex__V1__JobUpdate *u = NULL;
  Prunex__V1__Assignment *as = NULL;
  assert_int_equal(px_rpc_watch_job(f->bob, job, &bobs), PX_OK);
  assert_int_equal(px_rpc_read_job_update(bobs, 5000, &u), PX_OK);
  assert_non_null(u);
  px_rpc_message_free(u);
  assert_int_equal(px_rpc_watch_job(f->admin, job, &admins), PX_OK);
  assert_int_equal(px_rpc_read_job_update(admins, 5000, &u), PX_OK);
  assert_non_null(u);
  px_rpc_message_free(u);
  assert_int_equal(px_rpc_watch_assignments(f->n2, node, &n2s), PX_OK);
  assert_int_equal(px_rpc_read_assignment(n2s, 500, &as), PX_ERR_TIMEOUT); /* open, quiet */

  /* bob and n2 leave the file (same mode: rewritten in place) */
  int fd = open(f->tokens, O_WRONLY | O_TRUNC);
  assert_true(fd >= 0);
  const char *text = PXT_TOK_ADMIN " root admin\n" PXT_TOK_ALICE " alice user\n" PXT_TOK_N1
                     " n1 node\n";
  assert_int_equal(write(fd, text, strlen(text)), (ssize_t)strlen(text));
  close(fd);
  int64_t t0 = pxt_now_ms();
  kill(f->d.pid, SIGHUP);

  assert_int_not_equal(px_rpc_read_job_update(bobs, 5000, &u), PX_OK);
  assert_int_equal(px_rpc_last_code(), PX_RPC_UNAUTHENTICATED);
  assert_non_null(strstr(px_last_error(), "revoked"));
  assert_int_not_equal(px_rpc_read_assignment(n2s, 5000, &as), PX_OK);
  assert_int_equal(px_rpc_last_code(), PX_RPC_UNAUTHENTICATED);
  assert_true(pxt_now_ms() - t0 < 3000);

  /* the admin's stream is untouched: it sees the job cancelled, then ends OK */
  assert_int_equal(px_rpc_read_job_update(admins, 300, &u), PX_ERR_TIMEOUT);
  Prunex__V1__CancelJobResponse *cr = NULL;
  assert_int_equal(px_rpc_cancel_job(f->alice, job, "test", 5000, &cr), PX_OK);
  px_rpc_message_free(cr);
  assert_int_equal(px_rpc_read_job_update(admins, 5000, &u), PX_OK);
  assert_non_null(u);
  assert_int_equal(u->job->state, JS(CANCELLED));
  px_rpc_message_free(u);
  px_rpc_stream_destroy(bobs);
  px_rpc_stream_destroy(admins);
  px_rpc_stream_destroy(n2s);
}

/* One GET on the coordinator's HTTP listener: the status code, or -1. */
static int http_status(int port, const char *path, const char *token) {
  int fd = socket(AF_INET, SOCK_STREAM, 0);
  if (fd < 0) return -1;
  struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port)};
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  struct timeval tv = {10, 0};
  setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
  if (connect(fd, (struct sockaddr *)&a, sizeof a) != 0) {
    close(fd);
    return -1;
  }
  char req[512], auth[128] = "";
  if (token) snprintf(auth, sizeof auth, "Authorization: Bearer %s\r\n", token);
  int n = snprintf(req, sizeof req, "GET %s HTTP/1.1\r\nHost: 127.0.0.1\r\n%sConnection: close\r\n\r\n",
                   path, auth);
  if (write(fd, req, (size_t)n) != n) {
    close(fd);
    return -1;
  }
  char buf[64] = "";
  ssize_t r = read(fd, buf, sizeof buf - 1);
  close(fd);
  int code = -1;
  if (r > 12 && sscanf(buf, "HTTP/1.%*d %d", &code) != 1) code = -1;
  return code;
}

/* The HTTP listener applies the same users: /metrics and the JSON API need
 * a user or admin token; the dashboard's files do not (they hold no data). */
static void test_http_needs_a_user_token(void **state) {
  fixture_t *f = *state;
  assert_true(f->d.http_port > 0);
  assert_int_equal(http_status(f->d.http_port, "/metrics", NULL), 401);
  assert_int_equal(http_status(f->d.http_port, "/api/v1/jobs", "not-a-token"), 401);
  assert_int_equal(http_status(f->d.http_port, "/api/v1/jobs", PXT_TOK_N1), 401); /* a node */
  assert_int_equal(http_status(f->d.http_port, "/metrics", PXT_TOK_ALICE), 200);
  assert_int_equal(http_status(f->d.http_port, "/api/v1/nodes", PXT_TOK_ADMIN), 200);
  assert_int_equal(http_status(f->d.http_port, "/", NULL), 200);
}

/* Loads url in headless Chromium; its rendered DOM (with Chromium's own
 * messages) in out[cap]. */
static void dashboard_dom(const fixture_t *f, const char *url, char *out, size_t cap) {
  char log[400], profile[440];
  snprintf(log, sizeof log, "%s/chromium.out", f->d.dir);
  snprintf(profile, sizeof profile, "--user-data-dir=%s/chromium-profile", f->d.dir);
  unlink(log);
  const char *argv[] = {"/usr/bin/chromium", "--headless", "--no-sandbox", "--disable-gpu",
                        "--no-first-run", profile, "--virtual-time-budget=5000", "--dump-dom",
                        url, NULL};
  posix_spawn_file_actions_t fa;
  posix_spawn_file_actions_init(&fa);
  posix_spawn_file_actions_addopen(&fa, 1, log, O_WRONLY | O_CREAT | O_TRUNC, 0644);
  posix_spawn_file_actions_addopen(&fa, 2, "/dev/null", O_WRONLY, 0);
  pid_t pid = -1;
  assert_int_equal(posix_spawn(&pid, argv[0], &fa, NULL, (char *const *)argv, environ), 0);
  posix_spawn_file_actions_destroy(&fa);
  if (pxt_wait_pid(pid, 90000) == -1) {
    kill(pid, SIGKILL);
    pxt_wait_pid(pid, 5000);
    fail_msg("chromium did not finish in 90 s");
  }
  out[0] = '\0';
  FILE *fp = fopen(log, "r");
  assert_non_null(fp);
  out[fread(out, 1, cap - 1, fp)] = '\0';
  fclose(fp);
}

/* The dashboard of a coordinator with tokens: without one it says how to
 * give one (#token=...), with a user's it draws the overview. */
static void test_dashboard_without_a_token_says_how_to_give_one(void **state) {
  fixture_t *f = *state;
  if (access("/usr/bin/chromium", X_OK) != 0) {
    fprintf(stderr, "SKIP: /usr/bin/chromium not installed (Debian package chromium)\n");
    skip();
  }
  static char dom[1 << 20];
  char url[256];
  snprintf(url, sizeof url, "http://127.0.0.1:%d/", f->d.http_port);
  dashboard_dom(f, url, dom, sizeof dom);
  const char *msg = strstr(dom, "id=\"need-token\"");
  if (!msg) fprintf(stderr, "DOM:\n%.3000s\n", dom);
  assert_non_null(msg);
  print_message("%.300s\n", msg ? msg : "");
  char want[320];
  snprintf(want, sizeof want, "open %s#token=TOKEN", url);
  assert_non_null(strstr(msg, want));
  assert_non_null(strstr(dom, "data-error=\"a bearer token is required\""));
  assert_non_null(strstr(dom, "data-ready=\"0\""));
  /* with alice's token in the fragment: the overview, no message */
  snprintf(url, sizeof url, "http://127.0.0.1:%d/#token=%s", f->d.http_port, PXT_TOK_ALICE);
  dashboard_dom(f, url, dom, sizeof dom);
  if (!strstr(dom, "data-ready=\"1\"")) fprintf(stderr, "DOM:\n%.3000s\n", dom);
  assert_non_null(strstr(dom, "data-ready=\"1\""));
  assert_null(strstr(dom, "need-token"));
  assert_non_null(strstr(dom, "id=\"chart-nodes\""));
}

static void test_daemon_refuses_unsafe_settings(void **state) {
  fixture_t *f = *state;
  char out[512], err[2048], db[400];
  snprintf(db, sizeof db, "%s/other.db", f->d.dir);
  /* world-readable tokens file */
  char loose[400];
  snprintf(loose, sizeof loose, "%s/loose-tokens", f->d.dir);
  FILE *t = fopen(loose, "w");
  fprintf(t, "%s root admin\n", PXT_TOK_ADMIN);
  fclose(t);
  chmod(loose, 0644);
  const char *a1[] = {"--db", db, "--listen", "127.0.0.1:0", "--tokens", loose, NULL};
  assert_int_equal(pxt_coordd_run(f->d.dir, a1, out, sizeof out, err, sizeof err, 10000), 2);
  assert_non_null(strstr(err, "chmod 600"));
  /* a non-loopback address without TLS and tokens */
  const char *a2[] = {"--db", db, "--listen", "0.0.0.0:0", NULL};
  assert_int_equal(pxt_coordd_run(f->d.dir, a2, out, sizeof out, err, sizeof err, 10000), 2);
  assert_non_null(strstr(err, "not a loopback address"));
  /* the HTTP listener (plain HTTP) beyond loopback */
  const char *a4[] = {"--db", db, "--tls-cert", f->cert, "--tls-key", f->key, "--tokens",
                      f->tokens, "--listen", "0.0.0.0:0", "--http", "0.0.0.0:0", NULL};
  assert_int_equal(pxt_coordd_run(f->d.dir, a4, out, sizeof out, err, sizeof err, 10000), 2);
  assert_non_null(strstr(err, "reverse proxy"));
  /* a key without a certificate */
  const char *a3[] = {"--db", db, "--tls-key", f->key, NULL};
  assert_int_equal(pxt_coordd_run(f->d.dir, a3, out, sizeof out, err, sizeof err, 10000), 2);
  assert_non_null(strstr(err, "--tls-cert"));
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test_setup_teardown(test_every_rpc_without_a_token_is_unauthenticated, setup,
                                      teardown),
      cmocka_unit_test_setup_teardown(test_a_client_with_the_wrong_ca_or_no_tls_cannot_connect,
                                      setup, teardown),
      cmocka_unit_test_setup_teardown(test_users_manage_their_own_jobs_and_admins_all, setup,
                                      teardown),
      cmocka_unit_test_setup_teardown(test_user_tokens_cannot_act_as_nodes_or_ranks, setup,
                                      teardown),
      cmocka_unit_test_setup_teardown(
          test_nodes_and_rank_secrets_are_checked_against_the_assignment, setup, teardown),
      cmocka_unit_test_setup_teardown(test_a_400000_layer_report_is_refused_at_once, setup,
                                      teardown),
      cmocka_unit_test_setup_teardown(test_tokens_file_is_reread_on_sighup, setup, teardown),
      cmocka_unit_test_setup_teardown(test_a_revoked_token_loses_its_open_streams, setup,
                                      teardown),
      cmocka_unit_test_setup_teardown(test_http_needs_a_user_token, setup, teardown),
      cmocka_unit_test_setup_teardown(test_dashboard_without_a_token_says_how_to_give_one, setup,
                                      teardown),
      cmocka_unit_test_setup_teardown(test_daemon_refuses_unsafe_settings, setup, teardown),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
