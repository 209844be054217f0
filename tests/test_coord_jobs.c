/* pxcoordd's job queue: SubmitJob validation, placement on M ready nodes
 * with P devices, ranks node by node and leader election, the FIFO order,
 * START/CANCEL assignments on WatchAssignments (and again on reconnect),
 * ReportRankExit (success, failure with reason), CancelJob, GetJob /
 * ListJobs with their events, and WatchJob. */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>

#include <cmocka.h>

#include "coord_harness.h"

#define JS(x) PRUNEX__V1__JOB_STATE__JOB_STATE_##x
#define NS(x) PRUNEX__V1__NODE_STATE__NODE_STATE_##x
#define START PRUNEX__V1__ASSIGNMENT_ACTION__ASSIGNMENT_ACTION_START
#define CANCEL PRUNEX__V1__ASSIGNMENT_ACTION__ASSIGNMENT_ACTION_CANCEL

typedef struct {
  pxt_coordd_t d;
  px_rpc_channel_t *ch;
} fixture_t;

static int setup(void **state) {
  fixture_t *f = calloc(1, sizeof *f);
  if (!f || pxt_coordd_setup(&f->d, NULL) != 0) {
    free(f);
    return -1;
  }
  if (px_rpc_channel_create(f->d.target, &f->ch) != PX_OK) return -1;
  *state = f;
  return 0;
}

static int teardown(void **state) {
  fixture_t *f = *state;
  px_rpc_channel_destroy(f->ch);
  int rc = pxt_coordd_teardown(&f->d);
  free(f);
  return rc;
}

static px_status_t rank_exit(px_rpc_channel_t *ch, const char *job, const char *node, int rank,
                             int code, int sig, const char *reason) {
  Prunex__V1__RankExit req = PRUNEX__V1__RANK_EXIT__INIT;
  req.job_id = (char *)job;
  req.node_id = (char *)node;
  req.rank = rank;
  req.exit_code = code;
  req.signal = sig;
  req.reason = (char *)reason;
  return px_rpc_report_rank_exit(ch, &req, 0);
}

static Prunex__V1__Job *get_job(px_rpc_channel_t *ch, const char *job) {
  Prunex__V1__Job *j = NULL;
  assert_int_equal(px_rpc_get_job(ch, job, 0, &j), PX_OK);
  return j;
}

/* ---- SubmitJob validation ---------------------------------------------------- */

static void expect_invalid(px_rpc_channel_t *ch, pxt_spec_t *s, const char *field) {
  char job[64];
  assert_int_equal(pxt_submit(ch, s, job, sizeof job), PX_ERR_INVALID);
  assert_int_equal(px_rpc_last_code(), PX_RPC_INVALID_ARGUMENT);
  if (!strstr(px_last_error(), field))
    fail_msg("expected '%s' in the error, got: %s", field, px_last_error());
}

static void test_submit_validates_the_spec_naming_the_field(void **state) {
  fixture_t *f = *state;
  pxt_spec_t s;
  pxt_spec_init(&s, 1, 1);
  s.req.spec = NULL;
  expect_invalid(f->ch, &s, "spec");
  pxt_spec_init(&s, 0, 1);
  expect_invalid(f->ch, &s, "spec.cluster.nodes");
  pxt_spec_init(&s, 1, 0);
  expect_invalid(f->ch, &s, "spec.cluster.workers_per_node");
  pxt_spec_init(&s, 1, 1);
  s.spec.cluster = NULL;
  expect_invalid(f->ch, &s, "spec.cluster");
  pxt_spec_init(&s, 1, 1);
  s.spec.strategy = PRUNEX__V1__STRATEGY__STRATEGY_UNSPECIFIED;
  expect_invalid(f->ch, &s, "spec.strategy");
  pxt_spec_init(&s, 1, 1);
  s.model.name = "";
  expect_invalid(f->ch, &s, "spec.model.name");
  pxt_spec_init(&s, 1, 1);
  s.spec.dataset = NULL;
  expect_invalid(f->ch, &s, "spec.dataset.name");
  pxt_spec_init(&s, 1, 1);
  s.cluster.device = "tpu";
  expect_invalid(f->ch, &s, "spec.cluster.device");
  pxt_spec_init(&s, 1, 1);
  s.admm.mu = 0.5;
  expect_invalid(f->ch, &s, "admm.mu");
  pxt_spec_init(&s, 1, 1);
  s.admm.rho1 = -1;
  expect_invalid(f->ch, &s, "spec.admm.rho1");
  /* what every worker would refuse is refused here (the rules of
   * px_jobspec_validate, after the defaults): an unknown model, a data set
   * without a location, NCCL on CPUs */
  pxt_spec_init(&s, 1, 1);
  s.model.name = "resnet999";
  expect_invalid(f->ch, &s, "model.name");
  pxt_spec_init(&s, 1, 1);
  s.dataset.path = "";
  expect_invalid(f->ch, &s, "dataset.path: cifar10 has no default location");
  pxt_spec_init(&s, 1, 1);
  Prunex__V1__CommSpec comm = PRUNEX__V1__COMM_SPEC__INIT;
  comm.backend = "nccl";
  s.spec.comm = &comm;
  expect_invalid(f->ch, &s, "comm.backend: nccl");
  Prunex__V1__ListJobsRequest lreq = PRUNEX__V1__LIST_JOBS_REQUEST__INIT;
  Prunex__V1__ListJobsResponse *l = NULL;
  assert_int_equal(px_rpc_list_jobs(f->ch, &lreq, 0, &l), PX_OK);
  assert_int_equal(l->n_jobs, 0); /* nothing was queued */
  px_rpc_message_free(l);
}

/* ---- placement --------------------------------------------------------------- */

static void test_job_waits_pending_until_enough_nodes(void **state) {
  fixture_t *f = *state;
  char job[64], a[64], small[64], c[64];
  assert_int_equal(pxt_submit_mp(f->ch, 2, 2, job, sizeof job), PX_OK);
  assert_int_equal(pxt_job_state(f->ch, job), JS(PENDING));
  assert_int_equal(pxt_register(f->ch, "a", 2, 0, a, sizeof a), PX_OK);
  assert_int_equal(pxt_job_state(f->ch, job), JS(PENDING));
  assert_int_equal(pxt_register(f->ch, "small", 1, 0, small, sizeof small), PX_OK);
  assert_int_equal(pxt_job_state(f->ch, job), JS(PENDING)); /* 1 device < P */
  assert_int_equal(pxt_register(f->ch, "c", 3, 0, c, sizeof c), PX_OK);
  Prunex__V1__Job *j = get_job(f->ch, job);
  assert_int_equal(j->state, JS(SCHEDULED));
  assert_int_equal(j->n_node_ids, 2);
  assert_string_equal(j->node_ids[0], a);
  assert_string_equal(j->node_ids[1], c);
  px_rpc_message_free(j);
  assert_int_equal(pxt_node_state(f->ch, a), NS(BUSY));
  assert_int_equal(pxt_node_state(f->ch, c), NS(BUSY));
  assert_int_equal(pxt_node_state(f->ch, small), NS(READY));
}

static void test_placement_assigns_ranks_and_leaders(void **state) {
  fixture_t *f = *state;
  char a[64], b[64], job[64];
  assert_int_equal(pxt_register(f->ch, "a", 3, 0, a, sizeof a), PX_OK);
  assert_int_equal(pxt_register(f->ch, "b", 4, 1u << 0, b, sizeof b), PX_OK); /* dev 0 sick */
  px_rpc_stream_t *sa = NULL, *sb = NULL;
  assert_int_equal(px_rpc_watch_assignments(f->ch, a, &sa), PX_OK);
  assert_int_equal(px_rpc_watch_assignments(f->ch, b, &sb), PX_OK);
  pxt_spec_t s;
  pxt_spec_init(&s, 2, 3);
  s.spec.name = "ranks";
  assert_int_equal(pxt_submit(f->ch, &s, job, sizeof job), PX_OK);

  Prunex__V1__Assignment *x = pxt_next_assignment(sa, 5000);
  Prunex__V1__Assignment *y = pxt_next_assignment(sb, 5000);
  assert_non_null(x);
  assert_non_null(y);
  assert_string_equal(x->job_id, job);
  assert_int_equal(x->action, START);
  assert_int_equal(x->node_index, 0);
  assert_int_equal(y->node_index, 1);
  assert_int_equal(x->num_nodes, 2);
  assert_int_equal(x->world_size, 6);
  assert_string_equal(x->coordinator, f->d.target);
  assert_non_null(x->spec);
  assert_string_equal(x->spec->name, "ranks");
  assert_int_equal(x->spec->cluster->workers_per_node, 3);
  assert_int_equal(x->n_ranks, 3);
  assert_int_equal(y->n_ranks, 3);
  for (int i = 0; i < 3; i++) {
    assert_int_equal(x->ranks[i]->rank, i);
    assert_int_equal(x->ranks[i]->local_rank, i);
    assert_int_equal(x->ranks[i]->device_index, i);
    assert_int_equal(x->ranks[i]->is_leader, i == 0);
    assert_int_equal(y->ranks[i]->rank, 3 + i);
    assert_int_equal(y->ranks[i]->local_rank, i);
    assert_int_equal(y->ranks[i]->device_index, i);
    assert_int_equal(y->ranks[i]->is_leader, i == 1); /* local rank 0's device is unhealthy */
  }
  for (int k = 0; k < 2; k++) {
    Prunex__V1__Assignment *z = k ? y : x;
    assert_int_equal(z->n_leader_ranks, 2);
    assert_int_equal(z->leader_ranks[0], 0);
    assert_int_equal(z->leader_ranks[1], 4);
  }
  px_rpc_message_free(x);
  px_rpc_message_free(y);
  px_rpc_stream_destroy(sa);
  px_rpc_stream_destroy(sb);
}

static void test_queue_is_fifo(void **state) {
  fixture_t *f = *state;
  char n1[64], j1[64], j2[64], j3[64], j4[64];
  assert_int_equal(pxt_register(f->ch, "only", 1, 0, n1, sizeof n1), PX_OK);
  assert_int_equal(pxt_submit_mp(f->ch, 1, 1, j1, sizeof j1), PX_OK);
  assert_int_equal(pxt_submit_mp(f->ch, 1, 1, j2, sizeof j2), PX_OK);
  assert_int_equal(pxt_submit_mp(f->ch, 2, 1, j3, sizeof j3), PX_OK); /* needs 2 nodes */
  assert_int_equal(pxt_submit_mp(f->ch, 1, 1, j4, sizeof j4), PX_OK);
  assert_int_equal(pxt_job_state(f->ch, j1), JS(SCHEDULED));
  assert_int_equal(pxt_job_state(f->ch, j2), JS(PENDING));
  assert_int_equal(pxt_job_state(f->ch, j3), JS(PENDING));
  assert_int_equal(pxt_job_state(f->ch, j4), JS(PENDING));
  assert_int_equal(rank_exit(f->ch, j1, n1, 0, 0, 0, ""), PX_OK);
  assert_int_equal(pxt_job_state(f->ch, j1), JS(SUCCEEDED));
  assert_int_equal(pxt_job_state(f->ch, j2), JS(SCHEDULED)); /* next in line */
  assert_int_equal(rank_exit(f->ch, j2, n1, 0, 0, 0, ""), PX_OK);
  /* j3 heads the queue and can never fit on this cluster: it does not block
   * j4, and says what it needs. */
  assert_int_equal(pxt_job_state(f->ch, j3), JS(PENDING));
  assert_int_equal(pxt_job_state(f->ch, j4), JS(SCHEDULED));
  Prunex__V1__Job *j = get_job(f->ch, j3);
  if (!strstr(j->reason, "needs 2 nodes x 1 device; 1 node with 1 or more devices registered"))
    fail_msg("pending reason: %s", j->reason);
  px_rpc_message_free(j);
  Prunex__V1__CancelJobResponse *cr = NULL;
  assert_int_equal(px_rpc_cancel_job(f->ch, j3, "too big", 0, &cr), PX_OK);
  px_rpc_message_free(cr);
}

/* A head job that fits once a running job ends keeps its place: nothing
 * behind it starts (no starvation), and its reason says it waits. */
static void test_feasible_head_is_not_overtaken(void **state) {
  fixture_t *f = *state;
  char n1[64], n2[64], j1[64], j2[64], j3[64];
  assert_int_equal(pxt_register(f->ch, "one", 1, 0, n1, sizeof n1), PX_OK);
  assert_int_equal(pxt_register(f->ch, "two", 1, 0, n2, sizeof n2), PX_OK);
  assert_int_equal(pxt_submit_mp(f->ch, 1, 1, j1, sizeof j1), PX_OK);
  assert_int_equal(pxt_submit_mp(f->ch, 2, 1, j2, sizeof j2), PX_OK);
  assert_int_equal(pxt_submit_mp(f->ch, 1, 1, j3, sizeof j3), PX_OK);
  assert_int_equal(pxt_job_state(f->ch, j1), JS(SCHEDULED));
  assert_int_equal(pxt_job_state(f->ch, j2), JS(PENDING));
  assert_int_equal(pxt_job_state(f->ch, j3), JS(PENDING)); /* one node free, but j2 is first */
  Prunex__V1__Job *j = get_job(f->ch, j2);
  if (!strstr(j->reason, "waiting for nodes: needs 2 nodes x 1 device; 1 of 2 free"))
    fail_msg("pending reason: %s", j->reason);
  px_rpc_message_free(j);
  assert_int_equal(rank_exit(f->ch, j1, n1, 0, 0, 0, ""), PX_OK);
  assert_int_equal(pxt_job_state(f->ch, j2), JS(SCHEDULED));
  assert_int_equal(pxt_job_state(f->ch, j3), JS(PENDING));
}

static void test_reconnecting_watch_gets_active_assignments(void **state) {
  fixture_t *f = *state;
  char n1[64], job[64];
  assert_int_equal(pxt_register(f->ch, "n1", 2, 0, n1, sizeof n1), PX_OK);
  assert_int_equal(pxt_submit_mp(f->ch, 1, 2, job, sizeof job), PX_OK); /* no watch yet */
  for (int round = 0; round < 2; round++) {
    px_rpc_stream_t *s = NULL;
    assert_int_equal(px_rpc_watch_assignments(f->ch, n1, &s), PX_OK);
    Prunex__V1__Assignment *a = pxt_next_assignment(s, 5000);
    assert_non_null(a);
    assert_string_equal(a->job_id, job);
    assert_int_equal(a->action, START);
    assert_int_equal(a->n_ranks, 2);
    px_rpc_message_free(a);
    assert_null(pxt_next_assignment(s, 200)); /* only once per connection */
    px_rpc_stream_destroy(s);
  }
  assert_int_equal(rank_exit(f->ch, job, n1, 0, 0, 0, ""), PX_OK);
  assert_int_equal(rank_exit(f->ch, job, n1, 1, 0, 0, ""), PX_OK);
  px_rpc_stream_t *s = NULL;
  assert_int_equal(px_rpc_watch_assignments(f->ch, n1, &s), PX_OK);
  assert_null(pxt_next_assignment(s, 300)); /* the job is over */
  px_rpc_stream_destroy(s);
}

/* ---- rank exits ------------------------------------------------------------------ */

static void test_all_ranks_exiting_zero_succeeds(void **state) {
  fixture_t *f = *state;
  char n1[64], job[64];
  assert_int_equal(pxt_register(f->ch, "n1", 2, 0, n1, sizeof n1), PX_OK);
  assert_int_equal(pxt_submit_mp(f->ch, 1, 2, job, sizeof job), PX_OK);
  assert_int_equal(rank_exit(f->ch, job, n1, 1, 0, 0, ""), PX_OK);
  assert_int_equal(pxt_job_state(f->ch, job), JS(SCHEDULED)); /* rank 0 still runs */
  assert_int_equal(rank_exit(f->ch, job, n1, 0, 0, 0, ""), PX_OK);
  Prunex__V1__Job *j = get_job(f->ch, job);
  assert_int_equal(j->state, JS(SUCCEEDED));
  assert_non_null(strstr(j->reason, "all 2 ranks"));
  assert_int_equal(j->n_events, 3);
  assert_int_equal(j->events[0]->from_state, JS(UNSPECIFIED));
  assert_int_equal(j->events[0]->to_state, JS(PENDING));
  assert_int_equal(j->events[1]->to_state, JS(SCHEDULED));
  assert_int_equal(j->events[2]->from_state, JS(SCHEDULED));
  assert_int_equal(j->events[2]->to_state, JS(SUCCEEDED));
  for (size_t i = 0; i < j->n_events; i++) {
    assert_true(j->events[i]->time_unix_ms > 0);
    assert_true(j->events[i]->reason[0] != '\0');
  }
  px_rpc_message_free(j);
  assert_int_equal(pxt_node_state(f->ch, n1), NS(READY));
  /* A late exit of a finished job is recorded without changing it. */
  assert_int_equal(rank_exit(f->ch, job, n1, 1, 9, 0, "late"), PX_OK);
  assert_int_equal(pxt_job_state(f->ch, job), JS(SUCCEEDED));
}

static void test_rank_exit_validation(void **state) {
  fixture_t *f = *state;
  char n1[64], job[64], pending[64];
  assert_int_equal(pxt_register(f->ch, "n1", 1, 0, n1, sizeof n1), PX_OK);
  assert_int_equal(pxt_submit_mp(f->ch, 1, 1, job, sizeof job), PX_OK);
  assert_int_equal(pxt_submit_mp(f->ch, 1, 1, pending, sizeof pending), PX_OK);
  assert_int_equal(rank_exit(f->ch, job, n1, 1, 0, 0, ""), PX_ERR_INVALID); /* world is 1 */
  assert_int_equal(px_rpc_last_code(), PX_RPC_INVALID_ARGUMENT);
  assert_int_equal(rank_exit(f->ch, job, n1, -1, 0, 0, ""), PX_ERR_INVALID);
  assert_int_equal(rank_exit(f->ch, "job-999999", n1, 0, 0, 0, ""), PX_ERR_INVALID);
  assert_int_equal(px_rpc_last_code(), PX_RPC_NOT_FOUND);
  assert_int_equal(rank_exit(f->ch, pending, n1, 0, 0, 0, ""), PX_ERR_STATE);
  assert_int_equal(px_rpc_last_code(), PX_RPC_FAILED_PRECONDITION);
  assert_int_equal(rank_exit(f->ch, "", n1, 0, 0, 0, ""), PX_ERR_INVALID);
  assert_int_equal(pxt_job_state(f->ch, job), JS(SCHEDULED));
}

static void test_failed_rank_fails_the_job_and_cancels_the_other_nodes(void **state) {
  fixture_t *f = *state;
  char a[64], b[64], job[64];
  assert_int_equal(pxt_register(f->ch, "a", 1, 0, a, sizeof a), PX_OK);
  assert_int_equal(pxt_register(f->ch, "b", 1, 0, b, sizeof b), PX_OK);
  px_rpc_stream_t *sa = NULL, *sb = NULL;
  assert_int_equal(px_rpc_watch_assignments(f->ch, a, &sa), PX_OK);
  assert_int_equal(px_rpc_watch_assignments(f->ch, b, &sb), PX_OK);
  assert_int_equal(pxt_submit_mp(f->ch, 2, 1, job, sizeof job), PX_OK);
  Prunex__V1__Assignment *x = pxt_next_assignment(sa, 5000), *y = pxt_next_assignment(sb, 5000);
  assert_non_null(x);
  assert_non_null(y);
  assert_int_equal(x->action, START);
  px_rpc_message_free(x);
  px_rpc_message_free(y);
  assert_int_equal(rank_exit(f->ch, job, b, 1, 3, 0, "out of memory in the data loader"), PX_OK);
  Prunex__V1__Job *j = get_job(f->ch, job);
  assert_int_equal(j->state, JS(FAILED));
  assert_non_null(strstr(j->reason, "rank 1"));
  assert_non_null(strstr(j->reason, "code 3"));
  assert_non_null(strstr(j->reason, "out of memory in the data loader"));
  assert_string_equal(j->events[j->n_events - 1]->reason, j->reason);
  px_rpc_message_free(j);
  x = pxt_next_assignment(sa, 5000);
  assert_non_null(x);
  assert_string_equal(x->job_id, job);
  assert_int_equal(x->action, CANCEL);
  px_rpc_message_free(x);
  assert_int_equal(pxt_node_state(f->ch, a), NS(READY));
  assert_int_equal(pxt_node_state(f->ch, b), NS(READY));

  /* Killed by a signal. */
  assert_int_equal(pxt_submit_mp(f->ch, 1, 1, job, sizeof job), PX_OK);
  assert_int_equal(rank_exit(f->ch, job, a, 0, 0, 9, "oom killer"), PX_OK);
  j = get_job(f->ch, job);
  assert_int_equal(j->state, JS(FAILED));
  assert_non_null(strstr(j->reason, "signal 9"));
  px_rpc_message_free(j);
  /* the agents' streams stay open until here: a node whose agent has gone
   * is not offered to the second job */
  px_rpc_stream_destroy(sa);
  px_rpc_stream_destroy(sb);
}

/* ---- CancelJob -------------------------------------------------------------------- */

static void test_cancel_job(void **state) {
  fixture_t *f = *state;
  char n1[64], job[64], pending[64];
  assert_int_equal(pxt_register(f->ch, "n1", 1, 0, n1, sizeof n1), PX_OK);
  px_rpc_stream_t *s = NULL;
  assert_int_equal(px_rpc_watch_assignments(f->ch, n1, &s), PX_OK);
  assert_int_equal(pxt_submit_mp(f->ch, 1, 1, job, sizeof job), PX_OK);
  assert_int_equal(pxt_submit_mp(f->ch, 1, 1, pending, sizeof pending), PX_OK);
  Prunex__V1__Assignment *a = pxt_next_assignment(s, 5000);
  assert_non_null(a);
  assert_int_equal(a->action, START);
  px_rpc_message_free(a);

  Prunex__V1__CancelJobResponse *r = NULL;
  assert_int_equal(px_rpc_cancel_job(f->ch, job, "user asked", 0, &r), PX_OK);
  assert_int_equal(r->job->state, JS(CANCELLED));
  assert_non_null(strstr(r->job->reason, "user asked"));
  px_rpc_message_free(r);
  a = pxt_next_assignment(s, 5000);
  assert_non_null(a);
  assert_string_equal(a->job_id, job);
  assert_int_equal(a->action, CANCEL);
  px_rpc_message_free(a);
  /* The node went back to work: the pending job got it. */
  a = pxt_next_assignment(s, 5000);
  assert_non_null(a);
  assert_string_equal(a->job_id, pending);
  assert_int_equal(a->action, START);
  px_rpc_message_free(a);

  assert_int_equal(px_rpc_cancel_job(f->ch, job, "", 0, &r), PX_ERR_STATE);
  assert_int_equal(px_rpc_last_code(), PX_RPC_FAILED_PRECONDITION);
  assert_int_equal(px_rpc_cancel_job(f->ch, "job-424242", "", 0, &r), PX_ERR_INVALID);
  assert_int_equal(px_rpc_last_code(), PX_RPC_NOT_FOUND);
  assert_int_equal(px_rpc_cancel_job(f->ch, "", "", 0, &r), PX_ERR_INVALID);
  assert_int_equal(px_rpc_last_code(), PX_RPC_INVALID_ARGUMENT);

  /* A cancelled job's rank 0 learns it from its next report. */
  Prunex__V1__IterationReport rep = PRUNEX__V1__ITERATION_REPORT__INIT;
  rep.job_id = job;
  rep.iteration = 3;
  Prunex__V1__ControlDecision *d = NULL;
  assert_int_equal(px_rpc_report_iteration(f->ch, &rep, 0, &d), PX_OK);
  assert_true(d->cancelled);
  assert_true(d->stop);
  px_rpc_message_free(d);
  px_rpc_stream_destroy(s);

  /* Cancelling a pending job sends nothing to anyone. */
  char waiting[64];
  assert_int_equal(pxt_submit_mp(f->ch, 3, 1, waiting, sizeof waiting), PX_OK);
  assert_int_equal(px_rpc_cancel_job(f->ch, waiting, "", 0, &r), PX_OK);
  assert_int_equal(r->job->state, JS(CANCELLED));
  assert_int_equal(r->job->n_events, 2);
  px_rpc_message_free(r);
}

/* ---- GetJob / ListJobs ---------------------------------------------------------------- */

static void test_get_and_list_jobs(void **state) {
  fixture_t *f = *state;
  char n1[64], j1[64], j2[64], j3[64];
  assert_int_equal(pxt_register(f->ch, "n1", 1, 0, n1, sizeof n1), PX_OK);
  pxt_spec_t s;
  pxt_spec_init(&s, 1, 1);
  s.spec.name = "first";
  s.req.spec_yaml = "name: first\ncluster: {nodes: 1}\n";
  assert_int_equal(pxt_submit(f->ch, &s, j1, sizeof j1), PX_OK);
  assert_int_equal(pxt_submit_mp(f->ch, 1, 1, j2, sizeof j2), PX_OK);
  assert_int_equal(pxt_submit_mp(f->ch, 1, 1, j3, sizeof j3), PX_OK);
  Prunex__V1__Job *j = get_job(f->ch, j1);
  assert_string_equal(j->job_id, j1);
  assert_string_equal(j->name, "first");
  assert_string_equal(j->spec_yaml, ""); /* only when asked */
  px_rpc_message_free(j);
  assert_int_equal(px_rpc_get_job_ex(f->ch, j1, 1, 0, &j), PX_OK);
  assert_string_equal(j->spec_yaml, "name: first\ncluster: {nodes: 1}\n");
  assert_string_equal(j->spec->model->name, "resnet20");
  assert_int_equal(j->state, JS(SCHEDULED));
  assert_true(j->created_unix_ms > 0 && j->updated_unix_ms >= j->created_unix_ms);
  assert_int_equal(j->iteration, -1);
  assert_non_null(j->summary);
  assert_int_equal(j->summary->iterations, 0);
  px_rpc_message_free(j);

  Prunex__V1__ListJobsRequest req = PRUNEX__V1__LIST_JOBS_REQUEST__INIT;
  Prunex__V1__ListJobsResponse *l = NULL;
  assert_int_equal(px_rpc_list_jobs(f->ch, &req, 0, &l), PX_OK);
  assert_int_equal(l->n_jobs, 3);
  assert_string_equal(l->jobs[0]->job_id, j3); /* newest first */
  assert_string_equal(l->jobs[2]->job_id, j1);
  assert_string_equal(l->next_page_token, "");
  px_rpc_message_free(l);
  req.state = JS(PENDING);
  assert_int_equal(px_rpc_list_jobs(f->ch, &req, 0, &l), PX_OK);
  assert_int_equal(l->n_jobs, 2);
  assert_string_equal(l->jobs[0]->job_id, j3);
  px_rpc_message_free(l);
  req.limit = 1;
  assert_int_equal(px_rpc_list_jobs(f->ch, &req, 0, &l), PX_OK);
  assert_int_equal(l->n_jobs, 1);
  assert_string_equal(l->jobs[0]->job_id, j3);
  assert_string_not_equal(l->next_page_token, "");
  char tok[64];
  snprintf(tok, sizeof tok, "%s", l->next_page_token);
  px_rpc_message_free(l);
  req.page_token = tok; /* the next page: the older pending job */
  assert_int_equal(px_rpc_list_jobs(f->ch, &req, 0, &l), PX_OK);
  assert_int_equal(l->n_jobs, 1);
  assert_string_equal(l->jobs[0]->job_id, j2);
  assert_string_equal(l->next_page_token, "");
  px_rpc_message_free(l);
  req.page_token = "bogus";
  assert_int_equal(px_rpc_list_jobs(f->ch, &req, 0, &l), PX_ERR_INVALID);
  req.page_token = "";
  req.state = (Prunex__V1__JobState)42;
  assert_int_equal(px_rpc_list_jobs(f->ch, &req, 0, &l), PX_ERR_INVALID);
  req.state = 0;
  req.limit = -1;
  assert_int_equal(px_rpc_list_jobs(f->ch, &req, 0, &l), PX_ERR_INVALID);

  assert_int_equal(px_rpc_get_job(f->ch, "job-777777", 0, &j), PX_ERR_INVALID);
  assert_int_equal(px_rpc_last_code(), PX_RPC_NOT_FOUND);
  assert_non_null(strstr(px_last_error(), "job-777777"));
  assert_int_equal(px_rpc_get_job(f->ch, "", 0, &j), PX_ERR_INVALID);
  assert_int_equal(px_rpc_last_code(), PX_RPC_INVALID_ARGUMENT);
}

/* ---- WatchJob ------------------------------------------------------------------------ */

static Prunex__V1__JobUpdate *next_update(px_rpc_stream_t *s) {
  Prunex__V1__JobUpdate *u = NULL;
  assert_int_equal(px_rpc_read_job_update(s, 5000, &u), PX_OK);
  assert_non_null(u);
  return u;
}

static void test_watch_job_streams_every_change_and_ends(void **state) {
  fixture_t *f = *state;
  char n1[64], job[64];
  assert_int_equal(pxt_submit_mp(f->ch, 1, 1, job, sizeof job), PX_OK);
  px_rpc_stream_t *s = NULL;
  assert_int_equal(px_rpc_watch_job(f->ch, job, &s), PX_OK);
  Prunex__V1__JobUpdate *u = next_update(s);
  assert_int_equal(u->job->state, JS(PENDING));
  assert_null(u->latest);
  px_rpc_message_free(u);

  assert_int_equal(pxt_register(f->ch, "n1", 1, 0, n1, sizeof n1), PX_OK);
  u = next_update(s);
  assert_int_equal(u->job->state, JS(SCHEDULED));
  px_rpc_message_free(u);

  for (int it = 0; it < 2; it++) {
    Prunex__V1__IterationReport rep = PRUNEX__V1__ITERATION_REPORT__INIT;
    rep.job_id = job;
    rep.iteration = it;
    rep.loss = 2.0 - it;
    Prunex__V1__ControlDecision *d = NULL;
    assert_int_equal(px_rpc_report_iteration(f->ch, &rep, 0, &d), PX_OK);
    px_rpc_message_free(d);
    u = next_update(s);
    assert_int_equal(u->job->state, JS(RUNNING));
    assert_non_null(u->latest);
    assert_int_equal(u->latest->iteration, it);
    assert_true(u->latest->loss == 2.0 - it);
    assert_int_equal(u->job->iteration, it);
    px_rpc_message_free(u);
  }
  assert_int_equal(rank_exit(f->ch, job, n1, 0, 0, 0, ""), PX_OK);
  u = next_update(s);
  assert_int_equal(u->job->state, JS(SUCCEEDED));
  px_rpc_message_free(u);
  u = NULL;
  assert_int_equal(px_rpc_read_job_update(s, 5000, &u), PX_OK);
  assert_null(u); /* the stream ended with OK */
  px_rpc_stream_destroy(s);

  /* Watching a finished job: its state, then the end. */
  assert_int_equal(px_rpc_watch_job(f->ch, job, &s), PX_OK);
  u = next_update(s);
  assert_int_equal(u->job->state, JS(SUCCEEDED));
  px_rpc_message_free(u);
  assert_int_equal(px_rpc_read_job_update(s, 5000, &u), PX_OK);
  assert_null(u);
  px_rpc_stream_destroy(s);

  assert_int_equal(px_rpc_watch_job(f->ch, "job-000999", &s), PX_OK);
  assert_int_equal(px_rpc_read_job_update(s, 5000, &u), PX_ERR_INVALID);
  assert_int_equal(px_rpc_last_code(), PX_RPC_NOT_FOUND);
  px_rpc_stream_destroy(s);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test_setup_teardown(test_submit_validates_the_spec_naming_the_field, setup,
                                      teardown),
      cmocka_unit_test_setup_teardown(test_job_waits_pending_until_enough_nodes, setup, teardown),
      cmocka_unit_test_setup_teardown(test_placement_assigns_ranks_and_leaders, setup, teardown),
      cmocka_unit_test_setup_teardown(test_queue_is_fifo, setup, teardown),
      cmocka_unit_test_setup_teardown(test_feasible_head_is_not_overtaken, setup, teardown),
      cmocka_unit_test_setup_teardown(test_reconnecting_watch_gets_active_assignments, setup,
                                      teardown),
      cmocka_unit_test_setup_teardown(test_all_ranks_exiting_zero_succeeds, setup, teardown),
      cmocka_unit_test_setup_teardown(test_rank_exit_validation, setup, teardown),
      cmocka_unit_test_setup_teardown(test_failed_rank_fails_the_job_and_cancels_the_other_nodes,
                                      setup, teardown),
      cmocka_unit_test_setup_teardown(test_cancel_job, setup, teardown),
      cmocka_unit_test_setup_teardown(test_get_and_list_jobs, setup, teardown),
      cmocka_unit_test_setup_teardown(test_watch_job_streams_every_change_and_ends, setup,
                                      teardown),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
