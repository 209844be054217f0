/* Preemption with the real pxcoordd (`preemption = on`), two
 * pxagents and their pxworkers on the Fashion-MNIST subset.
 * - Graceful: a 2-node job of low priority whose periodic checkpoints lie
 *   past its end is preempted by a 1-node job of higher priority: its ranks
 *   are asked to stop, write a checkpoint at the iteration they stop after
 *   and exit; it is queued again (its restarts untouched), the urgent job
 *   starts on a node it freed, and it resumes from that checkpoint (its
 *   rank 0's log says from which iteration: one at or after the iteration
 *   it had reached when preempted, so written at the preemption) and ends
 *   with the very test accuracy, density, inter-node bytes and iterations
 *   of the same job run uninterrupted, and the same final model file byte
 *   for byte.
 * - Fallback: the same job checkpointing every 2 iterations whose rank 0
 *   is stopped (SIGSTOP) cannot stop: preemption_grace_s later its attempt
 *   is cancelled, and it resumes from its newest periodic checkpoint,
 *   replays the iterations after it with the stored decisions and ends bit
 *   for bit as well.
 * - A job without checkpoints is never preempted: the higher-priority job
 *   waits for it. */
#include <signal.h>
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <string.h>

#include <cmocka.h>

#include "agent_harness.h"

#define JS(x) PRUNEX__V1__JOB_STATE__JOB_STATE_##x
#define ITERATIONS 16
#define GRACE_S 6 /* preemption_grace_s: a victim that runs stops well within it */

typedef struct {
  pxt_coordd_t d;
  px_rpc_channel_t *ch;
  pxt_agent_t a[2];
  char data[400];
  char conf[320];
} fixture_t;

static fixture_t *F;

static void fail_with_logs(const char *what) {
  for (int i = 0; i < 2; i++) pxt_dump_file(F->a[i].log);
  pxt_coordd_dump_log(&F->d);
  fail_msg("%s", what);
}

static int group_setup(void **state) {
  (void)state;
  F = calloc(1, sizeof *F);
  if (!F) return -1;
  F->d.pid = -1;
  if (pxt_mkdtemp(F->d.dir, sizeof F->d.dir) != 0) return -1;
  snprintf(F->d.db, sizeof F->d.db, "%s/coord.db", F->d.dir);
  snprintf(F->conf, sizeof F->conf, "%s/coord.conf", F->d.dir);
  FILE *f = fopen(F->conf, "w");
  if (!f || fprintf(f, "preemption = on\npreemption_grace_s = %d\n", GRACE_S) < 0 ||
      fclose(f) != 0)
    return -1;
  const char *extra[] = {"--config", F->conf, NULL};
  if (pxt_coordd_start(&F->d, extra) != 0) return -1;
  if (px_rpc_channel_create(F->d.target, &F->ch) != PX_OK) return -1;
  int w = pxt_write_fmnist_subset(F->d.dir, 256, 64, F->data, sizeof F->data);
  if (w < 0) return -1;
  if (w == 0) F->data[0] = '\0';
  setenv("PX_LOG_LEVEL", "info", 1); /* rank 0's log says where it resumed */
  for (int i = 0; i < 2; i++) {
    char name[16];
    snprintf(name, sizeof name, "node%d", i);
    if (pxt_agent_start(&F->a[i], &F->d, name, 1, NULL) != 0) return -1;
    if (!pxt_wait_node_named(F->ch, name, PRUNEX__V1__NODE_STATE__NODE_STATE_READY, 30000))
      return -1;
  }
  return 0;
}

static int group_teardown(void **state) {
  (void)state;
  int rc = pxt_agents_stop(F->a, 2);
  px_rpc_channel_destroy(F->ch);
  if (pxt_coordd_teardown(&F->d) != 0) rc = -1;
  free(F);
  return rc;
}

/* Submits a job of `nodes` nodes x 1 worker at this job priority;
 * checkpoint_every 0: no checkpoints. */
static void submit(char *job, size_t cap, const char *name, int nodes, int iterations,
                   int priority, int checkpoint_every) {
  pxt_job_t j;
  pxt_job_init(&j, F->data[0] ? F->data : NULL, nodes, 1, iterations, 1);
  Prunex__V1__RecoverySpec rec = PRUNEX__V1__RECOVERY_SPEC__INIT;
  rec.checkpoint_every = checkpoint_every;
  rec.keep = 2;
  if (checkpoint_every > 0) j.spec.recovery = &rec;
  j.spec.priority = priority;
  j.spec.name = (char *)name;
  if (pxt_job_submit(F->ch, &j, job, cap) != PX_OK) fail_msg("submit: %s", px_last_error());
}

static Prunex__V1__Job *get(const char *job) {
  Prunex__V1__Job *j = NULL;
  assert_int_equal(px_rpc_get_job(F->ch, job, 0, &j), PX_OK);
  return j;
}

/* Waits until the job has reported iteration `it` (RUNNING). */
static void wait_iteration(const char *job, int it) {
  int64_t end = pxt_now_ms() + 200000;
  for (;;) {
    Prunex__V1__Job *j = get(job);
    int at = j->iteration, st = j->state;
    px_rpc_message_free(j);
    if (st == JS(RUNNING) && at >= it) return;
    if (st >= JS(SUCCEEDED) || pxt_now_ms() > end)
      fail_with_logs("the job ended or stalled before the iteration awaited");
    pxt_sleep_ms(20);
  }
}

/* Where rank 0 of the job's last attempt resumed from (-1: not said). */
static int resumed_from(const char *job) {
  char p[700], line[1024];
  snprintf(p, sizeof p, "%s/jobs/%s/rank-0.log", F->a[0].work, job);
  FILE *f = fopen(p, "r");
  int resumed = -1;
  if (!f) return -1;
  while (fgets(line, sizeof line, f)) {
    const char *k = strstr(line, "resuming from the checkpoint of iteration ");
    if (k) resumed = atoi(k + strlen("resuming from the checkpoint of iteration "));
  }
  fclose(f);
  return resumed;
}

/* A whole file (px_free), its size in *n; NULL when unreadable. */
static char *slurp(const char *path, size_t *n) {
  FILE *f = fopen(path, "rb");
  char *buf = NULL;
  *n = 0;
  if (!f) return NULL;
  for (;;) {
    char *nb = px_realloc(buf, *n + 65536, "test.slurp");
    if (!nb) break;
    buf = nb;
    size_t got = fread(buf + *n, 1, 65536, f);
    *n += got;
    if (got < 65536) break;
  }
  fclose(f);
  return buf;
}

/* 1 when the two model files hold the same bytes except for their job ids
 * (the metadata's job_id: ids of the same length at the same place). */
static int same_model(const char *a, const char *ja, const char *b, const char *jb) {
  size_t na, nb;
  char *fa = slurp(a, &na), *fb = slurp(b, &nb);
  int same = fa && fb && na == nb && na > 0 && strlen(ja) == strlen(jb);
  const char *pa = same ? memmem(fa, na, ja, strlen(ja)) : NULL;
  const char *pb = same ? memmem(fb, nb, jb, strlen(jb)) : NULL;
  same = same && pa && pb && pa - fa == pb - fb;
  size_t lo = same ? (size_t)(pa - fa) : 0, hi = lo + strlen(ja), diff = 0;
  for (size_t i = 0; same && i < na; i++)
    if (fa[i] != fb[i] && (i < lo || i >= hi)) same = 0;
    else diff += fa[i] != fb[i];
  printf("model files: %zu bytes, %zu differ (all within the job id)\n", na, diff);
  px_free(fa);
  px_free(fb);
  return same;
}

/* The job that ran uninterrupted (its id: test 1 sets it, test 2 reuses it). */
static char REF[64];

/* The preempted job ended as the uninterrupted one: same figures, same
 * model file (but for the job id). */
static void assert_same_as_ref(const char *job) {
  Prunex__V1__Job *r = get(REF), *j = get(job);
  printf("uninterrupted: acc %.17g density %.17g inter %llu iterations %d\n"
         "preempted:     acc %.17g density %.17g inter %llu iterations %d\n",
         r->summary->test_accuracy, r->summary->density,
         (unsigned long long)r->summary->inter_bytes, r->summary->iterations,
         j->summary->test_accuracy, j->summary->density,
         (unsigned long long)j->summary->inter_bytes, j->summary->iterations);
  assert_true(r->summary->inter_bytes > 0);
  assert_true(j->summary->test_accuracy == r->summary->test_accuracy);
  assert_true(j->summary->density == r->summary->density);
  assert_int_equal(j->summary->inter_bytes, r->summary->inter_bytes);
  assert_int_equal(j->summary->iterations, r->summary->iterations);
  printf("final models: %s and %s\n", r->summary->model_path, j->summary->model_path);
  assert_true(r->summary->model_path[0] && strcmp(r->summary->model_path, j->summary->model_path));
  assert_true(same_model(r->summary->model_path, REF, j->summary->model_path, job));
  px_rpc_message_free(r);
  px_rpc_message_free(j);
}

/* Submits the urgent 1-node job, waits for it to succeed, then for the
 * preempted job to end; returns that job, queued again once (attempt 2)
 * with the cause of its first attempt's end in cause. */
static Prunex__V1__Job *preempt_and_finish(const char *low, const char *name, char *cause,
                                           size_t cap) {
  char high[64];
  submit(high, sizeof high, name, 1, 2, 500, 0);
  if (pxt_wait_job(F->ch, high, JS(SUCCEEDED), 200000) != JS(SUCCEEDED))
    fail_with_logs("the urgent job did not succeed");
  int s = pxt_wait_job(F->ch, low, 0, 300000);
  Prunex__V1__Job *j = get(low), *h = get(high);
  printf("urgent %s: %s\npreempted %s: %s (attempt %d): %s\n", high, h->reason, low,
         px_rpc_job_state_name(s), j->attempt, j->reason);
  for (size_t i = 0; i < j->n_attempts; i++)
    printf("  attempt %d ended: %.300s\n", j->attempts[i]->attempt, j->attempts[i]->cause);
  if (s != JS(SUCCEEDED)) fail_with_logs("the preempted job did not succeed");
  assert_int_equal(j->attempt, 2);
  assert_int_equal(j->n_attempts, 1);
  assert_non_null(strstr(j->attempts[0]->cause, "preempted by "));
  assert_non_null(strstr(j->attempts[0]->cause, high));
  snprintf(cause, cap, "%s", j->attempts[0]->cause);
  px_rpc_message_free(h);
  return j;
}

static void test_preempted_job_stops_at_a_checkpoint_and_resumes_bit_for_bit(void **state) {
  (void)state;
  char low[64], cause[1024], want[160];
  /* checkpoints every 100 iterations: none before the last but the one
   * written at the preemption */
  submit(REF, sizeof REF, "pre", 2, ITERATIONS, 10, 100);
  if (pxt_wait_job(F->ch, REF, 0, 300000) != JS(SUCCEEDED))
    fail_with_logs("the uninterrupted job failed");
  submit(low, sizeof low, "pre", 2, ITERATIONS, 10, 100);
  wait_iteration(low, 4);
  Prunex__V1__Job *j = preempt_and_finish(low, "urgent", cause, sizeof cause);
  px_rpc_message_free(j);
  int from = resumed_from(low);
  printf("resumed from the checkpoint of iteration %d\n", from);
  assert_true(from >= 4 && from < ITERATIONS - 1);
  snprintf(want, sizeof want, "it stopped at its checkpoint of iteration %d", from);
  assert_non_null(strstr(cause, want));
  assert_same_as_ref(low);
}

/* rank 0 of the job's running attempt (on either agent), or -1 */
static pid_t rank0_pid(void) {
  for (int i = 0; i < 2; i++) {
    pid_t pids[4];
    int ranks[4];
    int n = pxt_worker_children(F->a[i].pid, pids, ranks, 4);
    for (int k = 0; k < n; k++)
      if (ranks[k] == 0) return pids[k];
  }
  return -1;
}

static void test_victim_that_cannot_stop_is_cancelled_after_the_grace(void **state) {
  (void)state;
  assert_true(REF[0] != '\0');
  char low[64], cause[1024];
  submit(low, sizeof low, "pre", 2, ITERATIONS, 10, 2);
  wait_iteration(low, 4);
  pid_t p0 = rank0_pid();
  assert_true(p0 > 0);
  kill(p0, SIGSTOP); /* rank 0 reports no more: it never hears the stop */
  int64_t t0 = pxt_now_ms();
  Prunex__V1__Job *j = preempt_and_finish(low, "urgent3", cause, sizeof cause);
  kill(p0, SIGCONT); /* should the cancel have left it stopped */
  px_rpc_message_free(j);
  assert_non_null(strstr(cause, "did not stop within"));
  int from = resumed_from(low);
  printf("resumed from the checkpoint of iteration %d (%lld ms after rank 0 was stopped)\n",
         from, (long long)(pxt_now_ms() - t0));
  assert_true(from >= 3 && from < ITERATIONS - 1 && from % 2 == 1); /* a periodic one */
  assert_same_as_ref(low);
}

static void test_job_without_checkpoints_is_not_preempted(void **state) {
  (void)state;
  char low[64], high[64];
  submit(low, sizeof low, "plain", 2, 400, 10, 0);
  wait_iteration(low, 1);
  submit(high, sizeof high, "urgent2", 1, 2, 500, 0);
  pxt_sleep_ms(1500);
  Prunex__V1__Job *j = get(low), *h = get(high);
  printf("%s: %s (attempt %d); %s: %s: %s\n", low, px_rpc_job_state_name(j->state), j->attempt,
         high, px_rpc_job_state_name(h->state), h->reason);
  assert_int_equal(j->state, JS(RUNNING));
  assert_int_equal(j->attempt, 1);
  assert_int_equal(h->state, JS(PENDING));
  px_rpc_message_free(j);
  px_rpc_message_free(h);
  Prunex__V1__CancelJobResponse *cr = NULL;
  assert_int_equal(px_rpc_cancel_job(F->ch, low, "test over", 0, &cr), PX_OK);
  px_rpc_message_free(cr);
  if (pxt_wait_job(F->ch, high, JS(SUCCEEDED), 200000) != JS(SUCCEEDED))
    fail_with_logs("the urgent job did not run once the other was cancelled");
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_preempted_job_stops_at_a_checkpoint_and_resumes_bit_for_bit),
      cmocka_unit_test(test_victim_that_cannot_stop_is_cancelled_after_the_grace),
      cmocka_unit_test(test_job_without_checkpoints_is_not_preempted),
  };
  return cmocka_run_group_tests(tests, group_setup, group_teardown);
}
