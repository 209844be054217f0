/* The job queue: SubmitJob (validation), the FIFO scheduler (placement,
 * ranks, leaders), CancelJob, ReportRankExit (success and failure), and the
 * read side: GetJob, ListJobs, WatchJob. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "coord.h"
#include "prunex/jobspec.h"
#include "prunex/check.h"

#define COORD_SPEC_YAML_MAX (1 << 20)

#define COORD_BAD(...)                \
  do {                                \
    snprintf(err, cap, __VA_ARGS__);  \
    return 0;                         \
  } while (0)

/* ---- job updates ------------------------------------------------------------- */

void coord_job_changed(coord_t *c, const char *job_id, const Prunex__V1__IterationReport *latest) {
  coord_notify_job(c, job_id); /* a state change: its notifications (issue 31) */
  int any = 0;
  for (coord_watch_t *w = c->job_watches; w; w = w->next) any |= !strcmp(w->id, job_id);
  if (!any) return;
  coord_arena_t a;
  coord_arena_init(&a);
  Prunex__V1__Job *job;
  if (coord_job_load(c, &a, job_id, &job) != PX_OK || !job) {
    px_log(PX_LOG_ERROR, "job %s: cannot load for its watchers: %s", job_id, px_last_error());
    coord_arena_free(&a);
    return;
  }
  Prunex__V1__JobUpdate up = PRUNEX__V1__JOB_UPDATE__INIT;
  up.job = job;
  up.latest = (Prunex__V1__IterationReport *)latest;
  int end = coord_job_terminal(job->state);
  coord_watch_t *w = c->job_watches, *next;
  for (; w; w = next) {
    next = w->next;
    if (strcmp(w->id, job_id) != 0) continue;
    px_rpc_srv_send(w->call, &up.base);
    if (end) coord_watch_close(c, w);
  }
  coord_arena_free(&a);
}

/* ---- scheduling ----------------------------------------------------------------- */

/* Places the job on the given nodes: ranks node by node, a leader per node
 * (local rank 0 unless its device is unhealthy), nodes BUSY, job SCHEDULED.
 * In a transaction. */
px_status_t coord_place(coord_t *c, const char *job_id, int P, char **nodes, char **names,
                        int M) {
  px_store_stmt_t *st;
  px_status_t rc;
  char reason[512];
  int used = snprintf(reason, sizeof reason, "placed on %d node%s:", M, M == 1 ? "" : "s");
  for (int i = 0; i < M; i++) {
    int dev[4096], healthy[4096], n = 0;
    if (P > 4096) return px_set_error(PX_ERR_INVALID, "job %s: %d workers per node", job_id, P);
    PX_CHECK(px_store_stmt(c->db,
                           "SELECT device_index, healthy FROM node_devices WHERE node_id = ?1"
                           " ORDER BY position LIMIT ?2",
                           &st));
    PX_CHECK(px_store_bind_text(st, 1, nodes[i]));
    PX_CHECK(px_store_bind_int64(st, 2, P));
    while ((rc = px_store_step(st)) == 1 && n < P) {
      dev[n] = (int)px_store_column_int64(st, 0);
      healthy[n] = px_store_column_int64(st, 1) != 0;
      n++;
    }
    if (rc < 0) return rc;
    px_store_reset(st);
    if (n < P) return px_set_error(PX_ERR_INTERNAL, "node %s has %d devices, needs %d", nodes[i], n, P);
    int leader = 0;
    while (leader < P && !healthy[leader]) leader++;
    if (leader == P) leader = 0; /* none healthy: rank 0 leads, the job will tell */
    for (int j = 0; j < P; j++) {
      char salt[33], hash[65];
      PX_CHECK(coord_rank_secret_new(c, salt, hash));
      PX_CHECK(px_store_stmt(c->db,
                             "INSERT INTO job_ranks (job_id, rank, node_index, local_rank,"
                             " device_index, is_leader, secret_salt, secret_hash)"
                             " VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8)",
                             &st));
      PX_CHECK(px_store_bind_text(st, 7, salt));
      PX_CHECK(px_store_bind_text(st, 8, hash));
      PX_CHECK(px_store_bind_text(st, 1, job_id));
      PX_CHECK(px_store_bind_int64(st, 2, (int64_t)i * P + j));
      PX_CHECK(px_store_bind_int64(st, 3, i));
      PX_CHECK(px_store_bind_int64(st, 4, j));
      PX_CHECK(px_store_bind_int64(st, 5, dev[j]));
      PX_CHECK(px_store_bind_int64(st, 6, j == leader));
      PX_CHECK(px_store_run(st));
    }
    PX_CHECK(px_store_stmt(c->db,
                           "INSERT INTO job_nodes (job_id, node_index, node_id, leader_rank)"
                           " VALUES (?1, ?2, ?3, ?4)",
                           &st));
    PX_CHECK(px_store_bind_text(st, 1, job_id));
    PX_CHECK(px_store_bind_int64(st, 2, i));
    PX_CHECK(px_store_bind_text(st, 3, nodes[i]));
    PX_CHECK(px_store_bind_int64(st, 4, (int64_t)i * P + leader));
    PX_CHECK(px_store_run(st));
    PX_CHECK(px_store_stmt(c->db, "UPDATE nodes SET job_id = ?2 WHERE node_id = ?1", &st));
    PX_CHECK(px_store_bind_text(st, 1, nodes[i]));
    PX_CHECK(px_store_bind_text(st, 2, job_id));
    PX_CHECK(px_store_run(st));
    char why[192];
    snprintf(why, sizeof why, "runs job %s as node %d of %d", job_id, i, M);
    PX_CHECK(coord_node_set_state(c, nodes[i], NS_READY, NS_BUSY, why));
    if (used < (int)sizeof reason)
      used += snprintf(reason + used, sizeof reason - (size_t)used, " %s", names[i]);
  }
  return coord_job_set_state(c, job_id, JS_PENDING, JS_SCHEDULED, reason);
}

/* Counts the nodes that could ever take a job of P devices per node now
 * (registered, not LOST, agent connected: *alive) and lists the READY ones
 * among them, up to M (*ready): first those named in prefer ('\n' around
 * each id: a restarted job's previous nodes), then the others, last those
 * named "-ID" in prefer (the node its placement timed out on), each group
 * in registration order. */
px_status_t coord_fitting_nodes(coord_t *c, coord_arena_t *a, int P, int M, const char *prefer,
                                int *alive, char ***nodes, char ***names, size_t *ready) {
  px_store_stmt_t *st;
  px_status_t rc;
  size_t cap = 0, cap2 = 0, n2 = 0;
  *alive = 0;
  *ready = 0;
  PX_CHECK(px_store_stmt(c->db,
                         "SELECT n.node_id, n.name, n.state FROM nodes n WHERE n.state IN (1, 2)"
                         " AND (SELECT count(*) FROM node_devices d WHERE d.node_id = n.node_id)"
                         " >= ?1 ORDER BY CASE"
                         " WHEN instr(?2, char(10) || n.node_id || char(10)) THEN 0"
                         " WHEN instr(?2, char(10) || '-' || n.node_id || char(10)) THEN 2"
                         " ELSE 1 END, n.id",
                         &st));
  PX_CHECK(px_store_bind_int64(st, 1, P));
  PX_CHECK(px_store_bind_text(st, 2, prefer));
  while ((rc = px_store_step(st)) == 1) {
    const char *id = px_store_column_text(st, 0);
    if (coord_agent_is_gone(c, id)) continue;
    (*alive)++;
    if (px_store_column_int64(st, 2) != NS_READY || (int)*ready >= M) continue;
    char **s1 = coord_push(a, (void **)nodes, ready, &cap, sizeof(char *));
    char **s2 = coord_push(a, (void **)names, &n2, &cap2, sizeof(char *));
    if (!s1 || !s2 || !(*s1 = coord_strdup(a, id)) ||
        !(*s2 = coord_strdup(a, px_store_column_text(st, 1)))) {
      px_store_reset(st);
      return PX_ERR_NOMEM;
    }
  }
  return rc < 0 ? rc : PX_OK;
}

static double coord_clock_ms(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec * 1e3 + (double)ts.tv_nsec / 1e6;
}

/* One pass of the scheduler: the policy (sched.h) orders the pending jobs
 * over a snapshot and says which start now; each waiting job's reason says
 * why it waits, and the jobs to start are placed in the policy's order, on
 * the nodes coord_fitting_nodes picks (a restarted job's previous nodes
 * first). A job the policy started that finds too few nodes after all (the
 * snapshot's node counts against the preferences) ends the pass: the next
 * event schedules again. The placed jobs' ids go to *placed (arena a). */
static px_status_t coord_schedule_pass(coord_t *c, coord_arena_t *a, char ***placed,
                                       size_t *nplaced) {
  coord_sched_view_t v;
  size_t cap = 0;
  *nplaced = 0;
  double t0 = coord_clock_ms();
  PX_CHECK(coord_sched_view(c, a, &v));
  double t1 = coord_clock_ms();
  PX_CHECK(px_store_begin(c->db));
  px_status_t rc = PX_OK;
  for (size_t i = 0; rc == PX_OK && i < v.s.njobs; i++) {
    const coord_sched_job_t *j = &v.s.jobs[i];
    if (j->start) continue;
    char why[320];
    coord_sched_reason(j, 0, why, sizeof why);
    if (strcmp(why, v.reasons[i]) != 0) rc = coord_sched_set_reason(c, v.job_ids[i], why);
  }
  for (size_t r = 0; rc == PX_OK && r < v.s.njobs; r++) {
    size_t i = v.s.order[r];
    const coord_sched_job_t *j = &v.s.jobs[i];
    if (!j->start) continue;
    int alive = 0;
    char **nodes = NULL, **names = NULL;
    size_t ready = 0;
    rc = coord_fitting_nodes(c, a, j->per_node, j->nodes, v.prefer[i], &alive, &nodes, &names,
                             &ready);
    if (rc != PX_OK || (int)ready < j->nodes) break;
    rc = coord_place(c, v.job_ids[i], j->per_node, nodes, names, j->nodes);
    char **slot = rc == PX_OK ? coord_push(a, (void **)placed, nplaced, &cap, sizeof(char *)) : NULL;
    if (rc == PX_OK && !slot) rc = PX_ERR_NOMEM;
    if (slot) *slot = v.job_ids[i];
    if (rc == PX_OK && j->backfill)
      px_log(PX_LOG_INFO, "job %s backfilled: its time limit ends before the first waiting"
             " job can start", v.job_ids[i]);
  }
  if (rc == PX_OK) rc = px_store_commit(c->db);
  if (rc != PX_OK) {
    px_store_rollback(c->db);
    *nplaced = 0;
  }
  /* bench/sched reads these lines for the decision latency of a pass */
  px_log(PX_LOG_DEBUG, "scheduler pass: %zu pending, %zu nodes, %zu started in %.2f ms"
         " (snapshot and policy %.2f ms)", v.s.njobs, v.s.nnodes, *nplaced,
         coord_clock_ms() - t0, t1 - t0);
  return rc;
}

void coord_schedule(coord_t *c) {
  if (c->stopping) return;
  coord_arena_t a;
  coord_arena_init(&a);
  char **placed = NULL;
  size_t n = 0;
  if (coord_schedule_pass(c, &a, &placed, &n) != PX_OK)
    px_log(PX_LOG_ERROR, "scheduler: %s", px_last_error());
  for (size_t i = 0; i < n; i++) {
    coord_push_assignments(c, placed[i], PRUNEX__V1__ASSIGNMENT_ACTION__ASSIGNMENT_ACTION_START);
    coord_job_changed(c, placed[i], NULL);
  }
  coord_arena_free(&a);
  if (c->cfg.sched.preempt) coord_preempt_run(c); /* preempt.c */
}

/* ---- time limits ------------------------------------------------------------------ */

void coord_time_limit_sweep(coord_t *c) {
  if (c->stopping) return;
  int64_t now = coord_now_ms();
  coord_arena_t a;
  coord_arena_init(&a);
  coord_sched_overdue_t *o = NULL;
  size_t n = 0;
  int ended = 0;
  if (coord_db_sched_overdue(c, &a, now, &o, &n) != PX_OK) goto fail;
  for (size_t i = 0; i < n; i++) {
    long long limit_s = (long long)(o[i].time_limit_ms / 1000);
    if (!o[i].stop_requested_ms) {
      /* the graceful end: rank 0's next report is answered stop */
      if (coord_db_sched_request_stop(c, o[i].job_id, now) != PX_OK) goto fail;
      px_log(PX_LOG_INFO, "job %s reached its time limit of %lld s: its ranks are asked to stop"
             " (final checkpoint, then TIMEOUT)", o[i].job_id, limit_s);
      continue;
    }
    if (now - o[i].stop_requested_ms < COORD_TIMEOUT_GRACE_MS) continue;
    char reason[256];
    snprintf(reason, sizeof reason,
             "TIMEOUT: ran past its time limit of %lld s and did not stop within %d s of being"
             " asked: its ranks were cancelled",
             limit_s, COORD_TIMEOUT_GRACE_MS / 1000);
    if (px_store_begin(c->db) != PX_OK ||
        coord_job_set_state(c, o[i].job_id, o[i].state, JS_TIMEOUT, reason) != PX_OK ||
        coord_job_release_nodes(c, o[i].job_id, reason) != PX_OK ||
        px_store_commit(c->db) != PX_OK) {
      px_store_rollback(c->db);
      goto fail;
    }
    coord_push_assignments(c, o[i].job_id, PRUNEX__V1__ASSIGNMENT_ACTION__ASSIGNMENT_ACTION_CANCEL);
    coord_job_changed(c, o[i].job_id, NULL);
    ended = 1;
  }
  goto out;
fail:
  px_log(PX_LOG_ERROR, "time limits: %s", px_last_error());
out:
  coord_arena_free(&a);
  if (ended) coord_schedule(c);
}

/* ---- output_dir ---------------------------------------------------------------- */

/* 1 when path is dir or below it, on a component boundary. */
static int coord_path_under(const char *path, const char *dir, size_t n) {
  while (n > 1 && dir[n - 1] == '/') n--;
  if (strncmp(path, dir, n) != 0) return 0;
  return path[n] == '\0' || path[n] == '/' || (n == 1 && dir[0] == '/');
}

/* The job's output_dir must be where the agents let jobs write (issue 12):
 * relative (under the job's directory in the agent's work directory) or
 * absolute under a root that every node not LOST reported (its work
 * directory, its --output-root directories), never with a ".." component.
 * With data set, the same for dataset.path and the nodes' data roots
 * (issue 26; a node that reported none, an older agent, is not asked).
 * Returns 1, or 0 with the reason in err (or -1 on a database error). */
static int coord_path_ok(coord_t *c, const char *out, int data, char *err, size_t cap) {
  const char *field = data ? "spec.dataset.path" : "spec.output_dir";
  if (!out[0]) return 1;
  if (strlen(out) > 1024) COORD_BAD("%s: longer than 1024 bytes", field);
  for (const char *p = out; *p;) {
    const char *e = strchr(p, '/');
    size_t len = e ? (size_t)(e - p) : strlen(p);
    if (len == 2 && p[0] == '.' && p[1] == '.')
      COORD_BAD("%s = '%.200s': '..' is not allowed in it", field, out);
    if (!e) break;
    p = e + 1;
  }
  if (out[0] != '/') return 1;
  px_store_stmt_t *st;
  px_status_t rc = px_store_stmt(c->db,
                                 data ? "SELECT name, data_roots FROM nodes WHERE state != 3"
                                        " AND data_roots != '' ORDER BY id"
                                      : "SELECT name, output_roots FROM nodes WHERE state != 3"
                                        " ORDER BY id",
                                 &st);
  if (rc != PX_OK) return -1;
  int nodes = 0, ok = 1;
  char refused[256] = "", allowed[512] = "";
  while ((rc = px_store_step(st)) == 1) {
    nodes++;
    const char *roots = px_store_column_text(st, 1);
    int here = 0;
    for (const char *p = roots; *p && !here;) {
      const char *e = strchr(p, '\n');
      size_t n = e ? (size_t)(e - p) : strlen(p);
      here = n > 0 && coord_path_under(out, p, n);
      p = e ? e + 1 : p + n;
    }
    if (!here && ok) {
      ok = 0;
      snprintf(refused, sizeof refused, "%s", px_store_column_text(st, 0));
      snprintf(allowed, sizeof allowed, "%s", roots[0] ? roots : "(nothing)");
      for (char *q = allowed; *q; q++)
        if (*q == '\n') *q = ',';
    }
  }
  if (rc < 0) {
    px_store_reset(st);
    return -1;
  }
  if (data) {
    if (!ok)
      COORD_BAD("%s = '%.200s': node %.100s does not let jobs read there (it allows %.160s; "
                "an agent allows its --work-dir and its --data-root directories, by default "
                "/usr/share/datasets)",
                field, out, refused, allowed);
    return 1; /* no node said: the agents check it when the job starts */
  }
  if (!nodes)
    COORD_BAD("spec.output_dir = '%.200s': no node is registered to say where jobs may write "
              "(give a relative output_dir, or start the agents first)", out);
  if (!ok)
    COORD_BAD("spec.output_dir = '%.200s': node %s does not let jobs write there (it allows %.160s; an "
              "agent allows its --work-dir and its --output-root directories)",
              out, refused, allowed);
  return 1;
}

/* ---- SubmitJob ---------------------------------------------------------------------- */

px_status_t coord_job_submit(coord_t *c, const Prunex__V1__JobSpec *spec, const char *spec_yaml,
                             int priority, int64_t time_limit_ms, char *job_id, size_t cap) {
  size_t len = protobuf_c_message_get_packed_size(&spec->base);
  uint8_t *blob = px_malloc(len ? len : 1, "coordd.spec");
  if (!blob) return PX_ERR_NOMEM;
  protobuf_c_message_pack(&spec->base, blob);
  int64_t now = coord_now_ms();
  px_store_stmt_t *st;
  px_status_t rc;
  PX_CHECK_GOTO(px_store_stmt(c->db,
                              "INSERT INTO jobs (job_id, name, state, spec, spec_yaml, num_nodes,"
                              " workers_per_node, created_unix_ms, updated_unix_ms, owner)"
                              " VALUES ('new', ?1, ?2, ?3, ?4, ?5, ?6, ?7, ?7, ?8)",
                              &st),
                rc, out);
  PX_CHECK_GOTO(px_store_bind_text(st, 8, c->who.role == COORD_ROLE_ANON ? "" : c->who.name), rc,
                out);
  PX_CHECK_GOTO(px_store_bind_text(st, 1, spec->name), rc, out);
  PX_CHECK_GOTO(px_store_bind_int64(st, 2, JS_PENDING), rc, out);
  PX_CHECK_GOTO(px_store_bind_blob(st, 3, blob, len), rc, out);
  PX_CHECK_GOTO(px_store_bind_text(st, 4, ""), rc, out); /* in job_spec_yaml (schema v3) */
  PX_CHECK_GOTO(px_store_bind_int64(st, 5, spec->cluster->nodes), rc, out);
  PX_CHECK_GOTO(px_store_bind_int64(st, 6, spec->cluster->workers_per_node), rc, out);
  PX_CHECK_GOTO(px_store_bind_int64(st, 7, now), rc, out);
  PX_CHECK_GOTO(px_store_run(st), rc, out);
  int64_t id = px_store_last_insert_id(c->db);
  snprintf(job_id, cap, "job-%06lld", (long long)id);
  PX_CHECK_GOTO(px_store_stmt(c->db, "UPDATE jobs SET job_id = ?2 WHERE id = ?1", &st), rc, out);
  PX_CHECK_GOTO(px_store_bind_int64(st, 1, id), rc, out);
  PX_CHECK_GOTO(px_store_bind_text(st, 2, job_id), rc, out);
  PX_CHECK_GOTO(px_store_run(st), rc, out);
  if (spec_yaml[0]) {
    PX_CHECK_GOTO(px_store_stmt(c->db,
                                "INSERT INTO job_spec_yaml (job_id, spec_yaml) VALUES (?1, ?2)",
                                &st),
                  rc, out);
    PX_CHECK_GOTO(px_store_bind_text(st, 1, job_id), rc, out);
    PX_CHECK_GOTO(px_store_bind_text(st, 2, spec_yaml), rc, out);
    PX_CHECK_GOTO(px_store_run(st), rc, out);
  }
  unsigned notify_mask = 0;
  const char *notify_url = spec->notify && spec->notify->url ? spec->notify->url : "";
  if (notify_url[0] && px_jobspec_notify_states(spec->notify->states, &notify_mask) != 0)
    notify_mask = 0; /* px_jobspec_check_submitted refused such a spec already */
  PX_CHECK_GOTO(coord_db_sched_job_new(c, job_id, c->who.role == COORD_ROLE_ANON ? "" : c->who.name,
                                    spec->name, spec->cluster->nodes,
                                    spec->cluster->workers_per_node, priority, time_limit_ms,
                                    notify_url, notify_mask, now),
                rc, out);
  char reason[160];
  snprintf(reason, sizeof reason, "submitted: %d node%s x %d worker%s",
           spec->cluster->nodes, spec->cluster->nodes == 1 ? "" : "s",
           spec->cluster->workers_per_node, spec->cluster->workers_per_node == 1 ? "" : "s");
  rc = coord_job_set_state(c, job_id, JS_UNSPECIFIED, JS_PENDING, reason);
out:
  px_free(blob);
  return rc;
}

/* The scheduling policy's rules for a submission (issue 31): only admins
 * raise a job's priority above the default, a time limit within the
 * cluster's maximum. 1 with the job's priority and time limit (ms, 0:
 * none), or 0 with the call answered (PERMISSION_DENIED, INVALID_ARGUMENT). */
int coord_submit_policy(coord_t *c, px_rpc_srv_call_t *call, const Prunex__V1__JobSpec *spec,
                        int *priority, int64_t *time_limit_ms) {
  const coord_sched_policy_t *p = &c->cfg.sched;
  *priority = spec->priority > 0 ? spec->priority : COORD_PRIORITY_DEFAULT;
  if (*priority > COORD_PRIORITY_DEFAULT && c->who.role != COORD_ROLE_ADMIN &&
      c->who.role != COORD_ROLE_ANON) {
    px_rpc_srv_finish(call, PX_RPC_PERMISSION_DENIED,
                      "spec.priority = %d: only an admin may raise a job's priority above %d"
                      " (%s may lower it: 1 to %d)",
                      *priority, COORD_PRIORITY_DEFAULT, c->who.name, COORD_PRIORITY_DEFAULT);
    return 0;
  }
  if (p->time_limit_max_s > 0 && spec->time_limit_s > p->time_limit_max_s) {
    px_rpc_srv_finish(call, PX_RPC_INVALID_ARGUMENT,
                      "spec.time_limit_s = %d: above this cluster's maximum of %lld s"
                      " (time_limit_max_s)",
                      spec->time_limit_s, (long long)p->time_limit_max_s);
    return 0;
  }
  *time_limit_ms = coord_sched_time_limit_ms(p, spec->time_limit_s);
  return 1;
}

/* The user's quota of unfinished jobs, for nnew more: 1, or 0 with the
 * call answered (RESOURCE_EXHAUSTED or INTERNAL). */
int coord_submit_quota(coord_t *c, px_rpc_srv_call_t *call, int64_t nnew) {
  const char *owner = c->who.role == COORD_ROLE_ANON ? "" : c->who.name;
  int quota = coord_sched_max_queued_jobs(&c->cfg.sched, owner);
  if (quota <= 0) return 1;
  int64_t n = 0;
  if (coord_db_sched_unfinished_jobs(c, owner, &n) != PX_OK) {
    coord_fail_internal(c, call);
    return 0;
  }
  if (n + nnew <= quota) return 1;
  px_log(PX_LOG_INFO, "SubmitJob refused: %s has %lld unfinished jobs (quota %d), %lld more",
         owner[0] ? owner : "anonymous", (long long)n, quota, (long long)nnew);
  if (nnew > 1)
    px_rpc_srv_finish(call, PX_RPC_RESOURCE_EXHAUSTED,
                      "user quota: the sweep's %lld jobs and the %lld unfinished job%s of %s"
                      " exceed the %d allowed (max_queued_jobs); submit a smaller sweep",
                      (long long)nnew, (long long)n, n == 1 ? "" : "s",
                      owner[0] ? owner : "the anonymous user", quota);
  else
    px_rpc_srv_finish(call, PX_RPC_RESOURCE_EXHAUSTED,
                      "user quota: %s has %lld unfinished job%s (pending or running) and may"
                      " have at most %d (max_queued_jobs); wait for one to end or cancel one",
                      owner[0] ? owner : "the anonymous user", (long long)n, n == 1 ? "" : "s",
                      quota);
  return 0;
}

void coord_rpc_submit_job(px_rpc_srv_call_t *call, const ProtobufCMessage *msg, void *data) {
  coord_t *c = data;
  const Prunex__V1__SubmitJobRequest *r = (const Prunex__V1__SubmitJobRequest *)msg;
  char err[1024];
  if (strlen(r->spec_yaml) > COORD_SPEC_YAML_MAX) {
    px_rpc_srv_finish(call, PX_RPC_INVALID_ARGUMENT, "spec_yaml: %zu bytes, the limit is %d",
                      strlen(r->spec_yaml), COORD_SPEC_YAML_MAX);
    return;
  }
  if (!px_utf8_valid(r->spec_yaml, strlen(r->spec_yaml))) {
    px_rpc_srv_finish(call, PX_RPC_INVALID_ARGUMENT, "spec_yaml: not valid UTF-8");
    return;
  }
  /* the spec's rules are the job spec module's (jobspec.h), the very ones
   * every worker applies: a spec no rank could run is refused here */
  px_status_t bad = px_jobspec_check_submitted(r->spec);
  if (bad == PX_ERR_NOMEM) {
    coord_fail_internal(c, call);
    return;
  }
  if (bad != PX_OK) {
    px_log(PX_LOG_INFO, "SubmitJob refused: %s", px_last_error());
    px_rpc_srv_finish(call, PX_RPC_INVALID_ARGUMENT, "%s", px_last_error());
    return;
  }
  int out_ok = coord_path_ok(c, r->spec->output_dir, 0, err, sizeof err);
  if (out_ok > 0 && r->spec->dataset)
    out_ok = coord_path_ok(c, r->spec->dataset->path, 1, err, sizeof err);
  if (out_ok < 0) {
    coord_fail_internal(c, call);
    return;
  }
  if (!out_ok) {
    px_log(PX_LOG_INFO, "SubmitJob refused: %s", err);
    px_rpc_srv_finish(call, PX_RPC_PERMISSION_DENIED, "%s", err);
    return;
  }
  if (r->spec->n_sweep > 0) {
    coord_sweep_submit(c, call, r); /* one job per combination (sweep.c) */
    return;
  }
  int priority = 0;
  int64_t time_limit_ms = 0;
  if (!coord_submit_policy(c, call, r->spec, &priority, &time_limit_ms)) return;
  if (!coord_submit_quota(c, call, 1)) return;
  char job_id[64];
  if (px_store_begin(c->db) != PX_OK ||
      coord_job_submit(c, r->spec, r->spec_yaml, priority, time_limit_ms, job_id,
                       sizeof job_id) != PX_OK ||
      px_store_commit(c->db) != PX_OK) {
    coord_fail_internal(c, call);
    return;
  }
  Prunex__V1__SubmitJobResponse resp = PRUNEX__V1__SUBMIT_JOB_RESPONSE__INIT;
  resp.job_id = job_id;
  px_rpc_srv_reply(call, &resp.base);
  coord_notify_job(c, job_id); /* PENDING (no watcher can exist yet) */
  coord_schedule(c);
}

/* ---- GetJob / ListJobs / WatchJob ----------------------------------------------------- */

static int coord_need_job_id(px_rpc_srv_call_t *call, const char *job_id) {
  if (!job_id[0]) {
    px_rpc_srv_finish(call, PX_RPC_INVALID_ARGUMENT, "job_id is required");
    return 0;
  }
  if (strlen(job_id) >= sizeof ((coord_watch_t *)0)->id) {
    px_rpc_srv_finish(call, PX_RPC_INVALID_ARGUMENT, "job_id is too long");
    return 0;
  }
  return 1;
}

/* A pending job's live place in the queue from the policy's decision: its
 * JobPriority, and its reason with its priority and the jobs ahead
 * (nothing when sj is NULL: the job left the queue between the queries). */
static px_status_t coord_job_live(coord_arena_t *a, const coord_sched_job_t *sj,
                                  Prunex__V1__Job *j) {
  if (!sj) return PX_OK;
  Prunex__V1__JobPriority *p = coord_alloc(a, sizeof *p);
  char why[320];
  coord_sched_reason(sj, 1, why, sizeof why);
  if (!p || !(j->reason = coord_strdup(a, why))) return PX_ERR_NOMEM;
  prunex__v1__job_priority__init(p);
  p->priority = sj->score;
  p->job_factor = sj->f_job;
  p->fairshare_factor = sj->f_fairshare;
  p->age_factor = sj->f_age;
  p->ahead = sj->ahead;
  p->job_priority = sj->priority;
  p->time_limit_ms = sj->time_limit_ms;
  j->sched = p;
  return PX_OK;
}

/* The same for GetJob: one policy pass for the one job. */
static px_status_t coord_job_queue_place(coord_t *c, coord_arena_t *a, Prunex__V1__Job *job) {
  coord_sched_view_t v;
  PX_CHECK(coord_sched_view(c, a, &v));
  for (size_t i = 0; i < v.s.njobs; i++)
    if (!strcmp(v.job_ids[i], job->job_id)) return coord_job_live(a, &v.s.jobs[i], job);
  return PX_OK;
}

void coord_rpc_get_job(px_rpc_srv_call_t *call, const ProtobufCMessage *msg, void *data) {
  coord_t *c = data;
  const Prunex__V1__GetJobRequest *r = (const Prunex__V1__GetJobRequest *)msg;
  if (!coord_need_job_id(call, r->job_id)) return;
  coord_arena_t a;
  coord_arena_init(&a);
  Prunex__V1__Job *job;
  px_status_t rc = coord_job_load_ex(c, &a, r->job_id, r->include_spec_yaml, &job);
  if (rc == PX_OK && job && (int)job->state == JS_PENDING) rc = coord_job_queue_place(c, &a, job);
  if (rc != PX_OK) coord_fail_internal(c, call);
  else if (!job) px_rpc_srv_finish(call, PX_RPC_NOT_FOUND, "job %s not found", r->job_id);
  else px_rpc_srv_reply(call, &job->base);
  coord_arena_free(&a);
}

/* Pages, newest first: page_token is the decimal row id of the last job of
 * the previous page. A page holds at most limit jobs (default 100, at most
 * 1000) and, with spec_yaml, at most COORD_PAGE_YAML_BYTES of it. */
#define COORD_PAGE_DEFAULT 100
#define COORD_PAGE_MAX 1000
#define COORD_PAGE_YAML_BYTES (16 << 20)

/* A request's state filter (0: any) and limit (0: def, at most max): 1
 * when both are good, else the call is answered INVALID_ARGUMENT and 0
 * returned. */
static int coord_filter_ok(px_rpc_srv_call_t *call, int state, int limit, int def, int max) {
  if (state < 0 || state > JS_TIMEOUT) {
    px_rpc_srv_finish(call, PX_RPC_INVALID_ARGUMENT, "state = %d: not a JobState", state);
    return 0;
  }
  if (limit < 0 || limit > max) {
    px_rpc_srv_finish(call, PX_RPC_INVALID_ARGUMENT, "limit = %d: must be 0 (default %d) to %d",
                      limit, def, max);
    return 0;
  }
  return 1;
}

void coord_rpc_list_jobs(px_rpc_srv_call_t *call, const ProtobufCMessage *msg, void *data) {
  coord_t *c = data;
  const Prunex__V1__ListJobsRequest *r = (const Prunex__V1__ListJobsRequest *)msg;
  if (!coord_filter_ok(call, (int)r->state, r->limit, COORD_PAGE_DEFAULT, COORD_PAGE_MAX)) return;
  if (strlen(r->sweep_id) > 63) {
    px_rpc_srv_finish(call, PX_RPC_INVALID_ARGUMENT, "sweep_id: longer than a sweep id");
    return;
  }
  long long before = 0;
  if (r->page_token[0]) {
    char *end = NULL;
    before = strtoll(r->page_token, &end, 10);
    if (!end || *end || before <= 0 || strlen(r->page_token) > 20) {
      px_rpc_srv_finish(call, PX_RPC_INVALID_ARGUMENT,
                        "page_token '%.32s': not a token this coordinator gave", r->page_token);
      return;
    }
  }
  int limit = r->limit > 0 ? r->limit : COORD_PAGE_DEFAULT;
  coord_arena_t a;
  coord_arena_init(&a);
  char **ids = NULL;
  int64_t *rowids = NULL;
  size_t n = 0, cap = 0, n2 = 0, cap2 = 0;
  px_store_stmt_t *st;
  px_status_t rc = px_store_stmt(c->db,
                                 "SELECT job_id, id FROM jobs WHERE (?1 = 0 OR state = ?1)"
                                 " AND (?3 = 0 OR id < ?3) AND (?4 = '' OR sweep_id = ?4)"
                                 " ORDER BY id DESC LIMIT ?2",
                                 &st);
  if (rc == PX_OK) rc = px_store_bind_int64(st, 1, r->state);
  if (rc == PX_OK) rc = px_store_bind_text(st, 4, r->sweep_id);
  if (rc == PX_OK) rc = px_store_bind_int64(st, 2, limit + 1);
  if (rc == PX_OK) rc = px_store_bind_int64(st, 3, before);
  while (rc == PX_OK && (rc = px_store_step(st)) == 1) {
    char **slot = coord_push(&a, (void **)&ids, &n, &cap, sizeof(char *));
    int64_t *rs = coord_push(&a, (void **)&rowids, &n2, &cap2, sizeof(int64_t));
    rc = slot && rs && (*slot = coord_strdup(&a, px_store_column_text(st, 0))) ? PX_OK
                                                                               : PX_ERR_NOMEM;
    if (rs) *rs = px_store_column_int64(st, 1);
  }
  if (rc < 0) px_store_reset(st);
  Prunex__V1__ListJobsResponse resp = PRUNEX__V1__LIST_JOBS_RESPONSE__INIT;
  char next[32] = "";
  int more = n > (size_t)limit;
  if (more) n = (size_t)limit;
  int64_t *rows = NULL; /* of resp.jobs */
  if (rc >= 0 && n > 0) {
    resp.jobs = coord_alloc(&a, n * sizeof *resp.jobs);
    rows = coord_alloc(&a, n * sizeof *rows);
    if (!resp.jobs || !rows) rc = PX_ERR_NOMEM;
    size_t yaml = 0;
    for (size_t i = 0; rc >= 0 && i < n; i++) {
      if (r->include_spec_yaml && i > 0 && yaml > COORD_PAGE_YAML_BYTES) {
        more = 1;
        break;
      }
      Prunex__V1__Job *j = NULL;
      rc = coord_job_load_ex(c, &a, ids[i], r->include_spec_yaml, &j);
      if (rc == PX_OK && j) {
        rows[resp.n_jobs] = rowids[i];
        resp.jobs[resp.n_jobs++] = j;
        yaml += strlen(j->spec_yaml);
        snprintf(next, sizeof next, "%lld", (long long)rowids[i]);
      }
    }
  }
  /* the page's pending jobs carry their place in the queue: one policy pass */
  int pending = 0;
  for (size_t i = 0; i < resp.n_jobs; i++) pending |= (int)resp.jobs[i]->state == JS_PENDING;
  if (rc >= 0 && pending) {
    coord_sched_view_t view;
    rc = coord_sched_view(c, &a, &view);
    for (size_t i = 0; rc == PX_OK && i < resp.n_jobs; i++) {
      if ((int)resp.jobs[i]->state != JS_PENDING) continue;
      rc = coord_job_live(&a, coord_sched_view_find(&view, rows[i]), resp.jobs[i]);
    }
  }
  resp.next_page_token = more ? next : "";
  if (rc < 0) coord_fail_internal(c, call);
  else px_rpc_srv_reply(call, &resp.base);
  coord_arena_free(&a);
}

void coord_rpc_watch_job(px_rpc_srv_call_t *call, const ProtobufCMessage *msg, void *data) {
  coord_t *c = data;
  const Prunex__V1__WatchJobRequest *r = (const Prunex__V1__WatchJobRequest *)msg;
  if (!coord_need_job_id(call, r->job_id)) return;
  coord_arena_t a;
  coord_arena_init(&a);
  Prunex__V1__Job *job;
  if (coord_job_load(c, &a, r->job_id, &job) != PX_OK) {
    coord_fail_internal(c, call);
  } else if (!job) {
    px_rpc_srv_finish(call, PX_RPC_NOT_FOUND, "job %s not found", r->job_id);
  } else {
    Prunex__V1__JobUpdate up = PRUNEX__V1__JOB_UPDATE__INIT;
    up.job = job;
    px_rpc_srv_send(call, &up.base);
    if (coord_job_terminal(job->state)) px_rpc_srv_finish(call, PX_RPC_OK, NULL);
    else if (!coord_watch_open(c, call, r->job_id, 1))
      px_rpc_srv_finish(call, PX_RPC_RESOURCE_EXHAUSTED, "out of memory");
  }
  coord_arena_free(&a);
}

/* The job a CancelJob or DeleteJob names, for a caller who wants to `what`
 * it: 1 with its state when it exists and the caller may manage it (its
 * owner, or an admin); else the call is answered (NOT_FOUND,
 * PERMISSION_DENIED or INTERNAL) and 0 returned. One query. */
static int coord_job_to_manage(coord_t *c, px_rpc_srv_call_t *call, const char *job_id,
                               const char *what, int *state) {
  px_store_stmt_t *st;
  px_status_t rc = px_store_stmt(c->db, "SELECT owner, state FROM jobs WHERE job_id = ?1", &st);
  if (rc == PX_OK) rc = px_store_bind_text(st, 1, job_id);
  if (rc == PX_OK) rc = px_store_step(st);
  if (rc < 0) {
    coord_fail_internal(c, call);
    return 0;
  }
  if (rc == 0) {
    px_rpc_srv_finish(call, PX_RPC_NOT_FOUND, "job %s not found", job_id);
    return 0;
  }
  char owner[COORD_NAME_MAX];
  snprintf(owner, sizeof owner, "%s", px_store_column_text(st, 0));
  *state = (int)px_store_column_int64(st, 1);
  px_store_reset(st);
  if (coord_auth_may_manage(&c->who, owner)) return 1;
  px_rpc_srv_finish(call, PX_RPC_PERMISSION_DENIED,
                    "%s may not %s job %s: it belongs to %s (only its owner or an admin may)",
                    c->who.name, what, job_id, owner[0] ? owner : "nobody");
  return 0;
}

/* ---- GetAccounting ---------------------------------------------------------------------- */

void coord_rpc_get_accounting(px_rpc_srv_call_t *call, const ProtobufCMessage *msg, void *data) {
  coord_t *c = data;
  const Prunex__V1__GetAccountingRequest *r = (const Prunex__V1__GetAccountingRequest *)msg;
  if (!coord_filter_ok(call, (int)r->state, r->limit, COORD_ACCT_DEFAULT, COORD_ACCT_MAX)) return;
  if (r->since_unix_ms < 0) {
    px_rpc_srv_finish(call, PX_RPC_INVALID_ARGUMENT, "since_unix_ms = %lld: must be >= 0",
                      (long long)r->since_unix_ms);
    return;
  }
  if (r->user[0] && !coord_name_ok(r->user)) {
    px_rpc_srv_finish(call, PX_RPC_INVALID_ARGUMENT,
                      "user: not a user name (1 to 127 of A-Z a-z 0-9 . _ - @)");
    return;
  }
  coord_arena_t a;
  coord_arena_init(&a);
  Prunex__V1__GetAccountingResponse resp = PRUNEX__V1__GET_ACCOUNTING_RESPONSE__INIT;
  if (coord_db_sched_acct(c, &a, r->user, r->since_unix_ms, (int)r->state, r->limit, &resp) != PX_OK)
    coord_fail_internal(c, call);
  else px_rpc_srv_reply(call, &resp.base);
  coord_arena_free(&a);
}

/* ---- DeleteJob ------------------------------------------------------------------------------ */

void coord_rpc_delete_job(px_rpc_srv_call_t *call, const ProtobufCMessage *msg, void *data) {
  coord_t *c = data;
  const Prunex__V1__DeleteJobRequest *r = (const Prunex__V1__DeleteJobRequest *)msg;
  if (!coord_need_job_id(call, r->job_id)) return;
  coord_arena_t a;
  coord_arena_init(&a);
  int state = 0;
  if (!coord_job_to_manage(c, call, r->job_id, "delete", &state)) goto out;
  if (!coord_job_terminal(state)) {
    px_rpc_srv_finish(call, PX_RPC_FAILED_PRECONDITION,
                      "job %s is %s: cancel it first (pxctl cancel), then delete it", r->job_id,
                      px_rpc_job_state_name(state));
    goto out;
  }
  if (px_store_begin(c->db) != PX_OK || coord_job_delete_rows(c, r->job_id) != PX_OK ||
      px_store_commit(c->db) != PX_OK) {
    coord_fail_internal(c, call);
    goto out;
  }
  px_log(PX_LOG_INFO, "job %s deleted by %s", r->job_id,
         c->who.role == COORD_ROLE_ANON ? "an anonymous caller" : c->who.name);
  Prunex__V1__DeleteJobResponse resp = PRUNEX__V1__DELETE_JOB_RESPONSE__INIT;
  px_rpc_srv_reply(call, &resp.base);
out:
  coord_arena_free(&a);
}

/* ---- retention ------------------------------------------------------------------------------ */

/* One batch of 10 jobs per run (the timer runs every minute: 14,400 a day),
 * so that a backlog of jobs with many iteration rows never holds the loop
 * for long. */
void coord_retention_run(coord_t *c) {
  if (c->cfg.retention_days <= 0 || c->stopping) return;
  int64_t cutoff = coord_now_ms() - (int64_t)c->cfg.retention_days * 86400 * 1000;
  coord_arena_t a;
  coord_arena_init(&a);
  char **ids = NULL;
  size_t n = 0, cap = 0;
  px_store_stmt_t *st;
  px_status_t rc = px_store_stmt(c->db,
                                 "SELECT job_id FROM jobs WHERE finished_unix_ms > 0 AND"
                                 " finished_unix_ms < ?1 AND state >= 4 ORDER BY finished_unix_ms"
                                 " LIMIT 10",
                                 &st);
  if (rc == PX_OK) rc = px_store_bind_int64(st, 1, cutoff);
  while (rc == PX_OK && (rc = px_store_step(st)) == 1) {
    char **slot = coord_push(&a, (void **)&ids, &n, &cap, sizeof(char *));
    rc = slot && (*slot = coord_strdup(&a, px_store_column_text(st, 0))) ? PX_OK : PX_ERR_NOMEM;
  }
  if (rc < 0) px_store_reset(st);
  if (rc >= 0 && n > 0) {
    rc = px_store_begin(c->db);
    for (size_t i = 0; rc == PX_OK && i < n; i++) rc = coord_job_delete_rows(c, ids[i]);
    if (rc == PX_OK) rc = px_store_commit(c->db);
    if (rc != PX_OK) px_store_rollback(c->db);
    else px_log(PX_LOG_INFO, "retention: removed %zu job%s finished over %d days ago", n,
                n == 1 ? "" : "s", c->cfg.retention_days);
  }
  if (rc < 0) px_log(PX_LOG_ERROR, "retention: %s", px_last_error());
  coord_arena_free(&a);
}

/* ---- CancelJob --------------------------------------------------------------------------- */

void coord_rpc_cancel_job(px_rpc_srv_call_t *call, const ProtobufCMessage *msg, void *data) {
  coord_t *c = data;
  const Prunex__V1__CancelJobRequest *r = (const Prunex__V1__CancelJobRequest *)msg;
  if (!coord_need_job_id(call, r->job_id)) return;
  if (coord_sweep_id_like(r->job_id)) {
    coord_sweep_cancel(c, call, r); /* every unfinished job of the sweep (sweep.c) */
    return;
  }
  coord_arena_t a;
  coord_arena_init(&a);
  int state = 0;
  if (!coord_job_to_manage(c, call, r->job_id, "cancel", &state)) goto out;
  if (coord_job_terminal(state)) {
    px_rpc_srv_finish(call, PX_RPC_FAILED_PRECONDITION, "job %s has already finished (%s)",
                      r->job_id, px_rpc_job_state_name(state));
    goto out;
  }
  char reason[512];
  snprintf(reason, sizeof reason, "cancelled: %s", r->reason[0] ? r->reason : "by request");
  if (px_store_begin(c->db) != PX_OK ||
      coord_job_set_state(c, r->job_id, state, JS_CANCELLED, reason) != PX_OK ||
      coord_job_release_nodes(c, r->job_id, reason) != PX_OK || px_store_commit(c->db) != PX_OK) {
    coord_fail_internal(c, call);
    goto out;
  }
  if (coord_job_active(state))
    coord_push_assignments(c, r->job_id, PRUNEX__V1__ASSIGNMENT_ACTION__ASSIGNMENT_ACTION_CANCEL);
  coord_job_changed(c, r->job_id, NULL);
  Prunex__V1__CancelJobResponse resp = PRUNEX__V1__CANCEL_JOB_RESPONSE__INIT;
  if (coord_job_load(c, &a, r->job_id, &resp.job) != PX_OK) coord_fail_internal(c, call);
  else px_rpc_srv_reply(call, &resp.base);
  coord_schedule(c);
out:
  coord_arena_free(&a);
}

/* ---- ReportRankExit ------------------------------------------------------------------------ */

/* Records the exit and decides the job's fate. *to: the new state, or 0. */
/* Why the controller ended the job, from its last stored decision: "the
 * controller stopped it at iteration K: the residuals converged", "it
 * reached max_iterations (N iterations)";
 * "" when the last decision did not stop (the workers ended on their own,
 * e.g. after their epochs). */
static px_status_t coord_stop_reason(coord_t *c, const char *job_id, char *buf, size_t cap,
                                     int *timeout) {
  buf[0] = '\0';
  *timeout = 0;
  px_store_stmt_t *st;
  PX_CHECK(px_store_stmt(c->db,
                         "SELECT decision FROM decisions WHERE job_id = ?1"
                         " ORDER BY iteration DESC LIMIT 1",
                         &st));
  PX_CHECK(px_store_bind_text(st, 1, job_id));
  px_status_t rc = px_store_step(st);
  if (rc < 0) return rc;
  if (rc == 1) {
    size_t n = 0;
    const void *blob = px_store_column_blob(st, 0, &n);
    Prunex__V1__ControlDecision *d =
        blob ? prunex__v1__control_decision__unpack(NULL, n, blob) : NULL;
    if (d && d->stop && d->stop_reason[0] && strcmp(d->stop_reason, "cancelled") != 0) {
      if (!strcmp(d->stop_reason, "converged"))
        snprintf(buf, cap, "the controller stopped it at iteration %d: the residuals converged",
                 d->iteration);
      else if (!strcmp(d->stop_reason, "max_iterations"))
        snprintf(buf, cap, "it reached max_iterations (%d iterations)", d->iteration + 1);
      else if (!strcmp(d->stop_reason, "time_limit") && (*timeout = 1))
        snprintf(buf, cap, "TIMEOUT: stopped at iteration %d, at its time limit", d->iteration);
      else
        snprintf(buf, cap, "the controller stopped it at iteration %d: %s", d->iteration,
                 d->stop_reason);
    }
    if (d) prunex__v1__control_decision__free_unpacked(d, NULL);
  }
  px_store_reset(st);
  return PX_OK;
}

static px_status_t coord_rank_exit(coord_t *c, coord_arena_t *a, const Prunex__V1__RankExit *r,
                                   int state, int N, int *to, coord_fault_t *f) {
  *to = 0;
  memset(f, 0, sizeof *f);
  px_store_stmt_t *st;
  PX_CHECK(px_store_stmt(c->db,
                         "INSERT OR REPLACE INTO rank_exits (job_id, rank, node_id, exit_code,"
                         " signal, reason, time_unix_ms, model_path)"
                         " VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8)",
                         &st));
  PX_CHECK(px_store_bind_text(st, 1, r->job_id));
  PX_CHECK(px_store_bind_int64(st, 2, r->rank));
  PX_CHECK(px_store_bind_text(st, 3, r->node_id));
  PX_CHECK(px_store_bind_int64(st, 4, r->exit_code));
  PX_CHECK(px_store_bind_int64(st, 5, r->signal));
  char clean[4096];
  px_utf8_clean(r->reason, clean, sizeof clean);
  PX_CHECK(px_store_bind_text(st, 6, clean));
  PX_CHECK(px_store_bind_int64(st, 7, coord_now_ms()));
  char path[4096];
  px_utf8_clean(r->model_path, path, sizeof path); /* served in JobSummary */
  PX_CHECK(px_store_bind_text(st, 8, path));
  PX_CHECK(px_store_run(st));
  if (!coord_job_active(state)) return PX_OK;
  char reason[640];
  char where[160] = "";
  if (r->node_id[0]) snprintf(where, sizeof where, " on node %s", r->node_id);
  if (r->exit_code != 0 || r->signal != 0) {
    if (r->signal != 0)
      snprintf(reason, sizeof reason, "rank %d%s was killed by signal %d%s%s", r->rank, where,
               r->signal, r->reason[0] ? ": " : "", r->reason);
    else if (r->exit_code < 0) /* still there, declared failed by its agent (hung) */
      snprintf(reason, sizeof reason, "rank %d%s failed: %s", r->rank, where,
               r->reason[0] ? r->reason : "declared failed by its agent");
    else
      snprintf(reason, sizeof reason, "rank %d%s exited with code %d%s%s", r->rank, where,
               r->exit_code, r->reason[0] ? ": " : "", r->reason);
    *to = JS_FAILED;
    /* A rank that lost its peers because a node's agent went away is not
     * the first cause: the node is. */
    int blamed = coord_blame_gone_node(c, r->job_id, r->node_id, reason, sizeof reason);
    if (blamed < 0) return blamed;
    /* Restarted while restarts remain, else FAILED. */
    PX_CHECK(coord_job_fault(c, a, r->job_id, state, reason, NULL, f));
    if (f->restarted) *to = JS_PENDING;
    return PX_OK;
  } else {
    PX_CHECK(px_store_stmt(c->db,
                           "SELECT count(*) FROM rank_exits WHERE job_id = ?1 AND exit_code = 0"
                           " AND signal = 0",
                           &st));
    PX_CHECK(px_store_bind_text(st, 1, r->job_id));
    px_status_t rc = px_store_step(st);
    if (rc < 0) return rc;
    int64_t ok = px_store_column_int64(st, 0);
    px_store_reset(st);
    if (ok < N) return PX_OK;
    int held = 0; /* stopped for a preemption: queued again with the others (preempt.c) */
    PX_CHECK(coord_preempt_hold(c, a, r->job_id, &held));
    if (held) return PX_OK;
    char why[200] = "";
    int timeout = 0;
    PX_CHECK(coord_stop_reason(c, r->job_id, why, sizeof why, &timeout));
    /* A rank's note on a success (issue 26: "no usable checkpoint since
     * iteration N: ...") is said with it: the job ran unprotected. */
    char note[400] = "";
    PX_CHECK(px_store_stmt(c->db,
                           "SELECT reason FROM rank_exits WHERE job_id = ?1 AND exit_code = 0"
                           " AND signal = 0 AND reason != '' ORDER BY rank LIMIT 1",
                           &st));
    PX_CHECK(px_store_bind_text(st, 1, r->job_id));
    rc = px_store_step(st);
    if (rc < 0) return rc;
    if (rc == 1) snprintf(note, sizeof note, "; %s", px_store_column_text(st, 0));
    px_store_reset(st);
    snprintf(reason, sizeof reason, "%s%sall %d ranks exited with code 0%s", why,
             why[0] ? "; " : "", N, note);
    *to = timeout ? JS_TIMEOUT : JS_SUCCEEDED;
  }
  PX_CHECK(coord_job_set_state(c, r->job_id, state, *to, reason));
  char why[700];
  snprintf(why, sizeof why, "job %s %s", r->job_id, *to == JS_TIMEOUT ? "timed out" : "succeeded");
  return coord_job_release_nodes(c, r->job_id, why);
}

void coord_rpc_report_rank_exit(px_rpc_srv_call_t *call, const ProtobufCMessage *msg, void *data) {
  coord_t *c = data;
  const Prunex__V1__RankExit *r = (const Prunex__V1__RankExit *)msg;
  if (!coord_need_job_id(call, r->job_id)) return;
  if (r->rank < 0) {
    px_rpc_srv_finish(call, PX_RPC_INVALID_ARGUMENT, "rank = %d: must be >= 0", r->rank);
    return;
  }
  px_store_stmt_t *st;
  px_status_t rc = px_store_stmt(c->db,
                                 "SELECT state, num_nodes * workers_per_node, attempt FROM jobs"
                                 " WHERE job_id = ?1",
                                 &st);
  if (rc == PX_OK) rc = px_store_bind_text(st, 1, r->job_id);
  if (rc == PX_OK) rc = px_store_step(st);
  if (rc < 0) {
    coord_fail_internal(c, call);
    return;
  }
  if (rc == 0) {
    px_rpc_srv_finish(call, PX_RPC_NOT_FOUND, "job %s not found", r->job_id);
    return;
  }
  int state = (int)px_store_column_int64(st, 0), N = (int)px_store_column_int64(st, 1);
  int attempt = (int)px_store_column_int64(st, 2);
  px_store_reset(st);
  if (r->attempt != 0 && r->attempt != attempt) {
    /* A rank of an attempt that has ended (its workers die after the
     * restart): nothing to record, nothing to decide. */
    px_log(PX_LOG_INFO, "job %s: rank %d of attempt %d exited (code %d, signal %d); the job is"
           " on attempt %d: ignored", r->job_id, r->rank, r->attempt, r->exit_code, r->signal,
           attempt);
    Prunex__V1__RankExitResponse ok = PRUNEX__V1__RANK_EXIT_RESPONSE__INIT;
    px_rpc_srv_reply(call, &ok.base);
    return;
  }
  if (state == JS_PENDING) {
    px_rpc_srv_finish(call, PX_RPC_FAILED_PRECONDITION, "job %s is PENDING: no rank has started",
                      r->job_id);
    return;
  }
  if (r->rank >= N) {
    px_rpc_srv_finish(call, PX_RPC_INVALID_ARGUMENT, "rank = %d: job %s has ranks 0..%d",
                      r->rank, r->job_id, N - 1);
    return;
  }
  int to = 0;
  coord_arena_t a;
  coord_arena_init(&a);
  coord_fault_t f;
  if (px_store_begin(c->db) != PX_OK || coord_rank_exit(c, &a, r, state, N, &to, &f) != PX_OK ||
      px_store_commit(c->db) != PX_OK) {
    coord_fail_internal(c, call);
    coord_arena_free(&a);
    return;
  }
  px_log(PX_LOG_INFO, "job %s: rank %d exited (code %d, signal %d)", r->job_id, r->rank,
         r->exit_code, r->signal);
  Prunex__V1__RankExitResponse resp = PRUNEX__V1__RANK_EXIT_RESPONSE__INIT;
  px_rpc_srv_reply(call, &resp.base);
  if (to == JS_FAILED || to == JS_PENDING) {
    coord_after_fault(c, r->job_id, &f);
  } else if (to) {
    coord_job_changed(c, r->job_id, NULL);
    coord_schedule(c);
  }
  coord_arena_free(&a);
}
