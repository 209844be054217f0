/* Records: state changes with their event rows, the Job and Node messages
 * built from the database for replies and streams, and a job's rows
 * removed (db_core.h, coord.h). */
#include <stdio.h>
#include <string.h>

#include "db_core.h"
#include "membership.h"
#include "shrink.h"
#include "prunex/check.h"

px_status_t coord_job_set_state(coord_t *c, const char *job_id, int from, int to,
                                const char *reason_in) {
  /* Reasons quote clients and logs, and are cut to fit buffers: served to
   * proto3 clients, they must be UTF-8. */
  char reason[2048];
  px_utf8_clean(reason_in, reason, sizeof reason);
  int64_t now = coord_now_ms();
  PX_CHECK(px_store_run_args(c->db,
                             "UPDATE jobs SET state = ?2, reason = ?3, updated_unix_ms = ?4,"
                             " scheduled_unix_ms = CASE WHEN ?5 THEN ?4 ELSE scheduled_unix_ms END,"
                             " finished_unix_ms = CASE WHEN ?6 THEN ?4 ELSE finished_unix_ms END"
                             " WHERE job_id = ?1",
                             PX_STORE_ARGS(PX_ARG_TEXT(job_id), PX_ARG_INT(to), PX_ARG_TEXT(reason),
                                           PX_ARG_INT(now), PX_ARG_INT(to == JS_SCHEDULED),
                                           PX_ARG_INT(coord_job_terminal(to)))));
  PX_CHECK(coord_db_event(c, 0, job_id, now, from, to, reason));
  PX_CHECK(coord_sched_state_changed(c, job_id, from, to, reason, now));
  if (coord_job_terminal(to)) {
    /* A finished job's rendezvous entries are no use to anyone. */
    PX_CHECK(coord_db_run_key(c, "DELETE FROM kv WHERE job_id = ?1", job_id));
  }
  px_log(PX_LOG_INFO, "job %s: %s -> %s (%s)", job_id, px_rpc_job_state_name(from),
         px_rpc_job_state_name(to), reason);
  return PX_OK;
}

px_status_t coord_node_set_state(coord_t *c, const char *node_id, int from, int to,
                                 const char *reason) {
  if (from == to) return PX_OK;
  int64_t now = coord_now_ms();
  PX_CHECK(px_store_run_args(c->db, "UPDATE nodes SET state = ?2 WHERE node_id = ?1",
                             PX_STORE_ARGS(PX_ARG_TEXT(node_id), PX_ARG_INT(to))));
  PX_CHECK(coord_db_event(c, 1, node_id, now, from, to, reason));
  px_log(PX_LOG_INFO, "node %s: %s -> %s (%s)", node_id, px_rpc_node_state_name(from),
         px_rpc_node_state_name(to), reason);
  return PX_OK;
}

px_status_t coord_job_lookup(coord_t *c, coord_arena_t *a, const char *job_id, int *found,
                             int *state, Prunex__V1__JobSpec **spec) {
  *found = 0;
  if (spec) *spec = NULL;
  px_store_stmt_t *st;
  PX_CHECK(px_store_stmt(c->db, "SELECT state, spec FROM jobs WHERE job_id = ?1", &st));
  PX_CHECK(px_store_bind_text(st, 1, job_id));
  px_status_t rc = px_store_step(st);
  if (rc < 0) return rc;
  if (rc == 0) return PX_OK;
  *found = 1;
  if (state) *state = (int)px_store_column_int64(st, 0);
  if (spec) {
    size_t len;
    const void *blob = px_store_column_blob(st, 1, &len);
    *spec = (Prunex__V1__JobSpec *)protobuf_c_message_unpack(&prunex__v1__job_spec__descriptor,
                                                            &a->pb, len, blob);
    if (!*spec) {
      px_store_reset(st);
      return px_set_error(PX_ERR_FORMAT, "%s: job %s: stored spec does not unpack",
                          px_store_path(c->db), job_id);
    }
  }
  px_store_reset(st);
  return PX_OK;
}

#define COORD_NEW(a, T, init, out)                  \
  do {                                              \
    (out) = coord_alloc((a), sizeof(T));            \
    if (!(out)) return PX_ERR_NOMEM;                \
    *(out) = (T)init;                               \
  } while (0)

static px_status_t coord_job_summary(coord_t *c, coord_arena_t *a, const char *job_id,
                                     int64_t scheduled, int64_t finished,
                                     Prunex__V1__JobSummary **out) {
  Prunex__V1__JobSummary *s;
  COORD_NEW(a, Prunex__V1__JobSummary, PRUNEX__V1__JOB_SUMMARY__INIT, s);
  const px_store_arg_t key[] = {PX_ARG_TEXT(job_id), PX_ARG_INT(JS_SCHEDULED)};
  int64_t v[4] = {0, 0, 0, 0}, first = 0;
  char model_path[4096] = "";
  /* Totals over the lowest reporting rank (rank 0 reports for the job). */
  PX_CHECK(px_store_row(c->db,
                        "SELECT count(*), coalesce(sum(bytes_inter), 0),"
                        " coalesce(sum(bytes_inter_dense), 0), coalesce(sum(bytes_intra), 0)"
                        " FROM iterations WHERE job_id = ?1 AND rank ="
                        " (SELECT min(rank) FROM iterations WHERE job_id = ?1)",
                        key, 1,
                        PX_STORE_COLS(PX_COL_INT(&v[0]), PX_COL_INT(&v[1]), PX_COL_INT(&v[2]),
                                      PX_COL_INT(&v[3])),
                        NULL));
  s->iterations = (int32_t)v[0];
  s->inter_bytes = (uint64_t)v[1];
  s->inter_bytes_dense = (uint64_t)v[2];
  s->intra_bytes = (uint64_t)v[3];
  PX_CHECK(px_store_row(c->db,
                        "SELECT density FROM iterations WHERE job_id = ?1"
                        " ORDER BY iteration DESC, rank LIMIT 1",
                        key, 1, PX_STORE_COLS(PX_COL_REAL(&s->density)), NULL));
  s->test_accuracy = -1.0;
  PX_CHECK(px_store_row(c->db,
                        "SELECT test_accuracy FROM iterations WHERE job_id = ?1"
                        " AND test_accuracy >= 0 ORDER BY iteration DESC, rank LIMIT 1",
                        key, 1, PX_STORE_COLS(PX_COL_REAL(&s->test_accuracy)), NULL));
  /* where the final model was saved, as the rank that saved it reported */
  PX_CHECK(px_store_row(c->db,
                        "SELECT model_path FROM rank_exits WHERE job_id = ?1 AND model_path != ''"
                        " AND exit_code = 0 AND signal = 0 ORDER BY rank LIMIT 1",
                        key, 1, PX_STORE_COLS(PX_COL_TEXT(model_path, sizeof model_path)), NULL));
  if (!(s->model_path = coord_strdup(a, model_path))) return PX_ERR_NOMEM;
  /* Wall time runs from the first placement, not the current attempt's
   * (jobs.scheduled_unix_ms is the current attempt's: the placement timeout
   * counts from it): a restarted job's time includes its failed attempts. */
  PX_CHECK(px_store_row(c->db,
                        "SELECT coalesce(min(time_unix_ms), 0) FROM job_events WHERE job_id = ?1"
                        " AND to_state = ?2",
                        key, 2, PX_STORE_COLS(PX_COL_INT(&first)), NULL));
  if (first > 0 && (scheduled <= 0 || first < scheduled)) scheduled = first;
  if (scheduled > 0)
    s->wall_s = (double)((finished > 0 ? finished : coord_now_ms()) - scheduled) / 1000.0;
  *out = s;
  return PX_OK;
}

px_status_t coord_job_load(coord_t *c, coord_arena_t *a, const char *job_id,
                           Prunex__V1__Job **out) {
  return coord_job_load_ex(c, a, job_id, 0, out);
}

/* The job's dependencies (jobs.depends lines "JOB:ok" / "JOB:any"),
 * each with its job's state now (from acct, which outlives the job's
 * rows; UNSPECIFIED when unknown). The line text is the arena's copy: it is
 * cut in place. */
static px_status_t coord_job_after(coord_t *c, coord_arena_t *a, char *deps, Prunex__V1__Job *j) {
  size_t cap = 0;
  for (char *p = deps; *p;) {
    char *nl = strchr(p, '\n');
    if (nl) *nl = '\0';
    char *colon = strchr(p, ':');
    if (colon) *colon = '\0';
    Prunex__V1__JobDependency **slot =
        coord_push(a, (void **)&j->after, &j->n_after, &cap, sizeof *slot);
    Prunex__V1__JobDependency *d = slot ? coord_alloc(a, sizeof *d) : NULL;
    if (!d) return PX_ERR_NOMEM;
    prunex__v1__job_dependency__init(d);
    *slot = d;
    d->job_id = p;
    d->kind = colon && !strcmp(colon + 1, "any") ? PRUNEX__V1__DEPENDENCY_KIND__DEPENDENCY_KIND_ANY
                                                 : PRUNEX__V1__DEPENDENCY_KIND__DEPENDENCY_KIND_OK;
    int found = 0, state = 0;
    PX_CHECK(coord_db_sched_dep_state(c, p, &found, &state));
    d->state = (Prunex__V1__JobState)(found ? state : 0);
    if (!nl) break;
    p = nl + 1;
  }
  return PX_OK;
}

/* The jobs row (spec_yaml only with_yaml): *out NULL when there is no
 * such job; *scheduled and *finished for the summary. */
static px_status_t coord_job_row(coord_t *c, coord_arena_t *a, const char *job_id, int with_yaml,
                                 Prunex__V1__Job **out, int64_t *scheduled, int64_t *finished) {
  px_store_stmt_t *st;
  PX_CHECK(px_store_stmt(c->db,
                         "SELECT job_id, name, state, spec, CASE WHEN ?2 THEN coalesce((SELECT"
                         " y.spec_yaml FROM job_spec_yaml y WHERE y.job_id = jobs.job_id),"
                         " spec_yaml) ELSE '' END, reason, created_unix_ms, updated_unix_ms,"
                         " iteration,"
                         " scheduled_unix_ms, finished_unix_ms, owner, attempt, checkpoint_problem,"
                         " sweep_id, sweep_point, held_by, priority, time_limit_ms, depends"
                         " FROM jobs WHERE job_id = ?1",
                         &st));
  PX_CHECK(px_store_bind_args(st, PX_STORE_ARGS(PX_ARG_TEXT(job_id),
                                                PX_ARG_INT(with_yaml ? 1 : 0))));
  px_status_t rc = px_store_step(st);
  if (rc <= 0) return rc;
  Prunex__V1__Job *j;
  COORD_NEW(a, Prunex__V1__Job, PRUNEX__V1__JOB__INIT, j);
  j->job_id = coord_strdup(a, px_store_column_text(st, 0));
  j->name = coord_strdup(a, px_store_column_text(st, 1));
  j->state = (Prunex__V1__JobState)px_store_column_int64(st, 2);
  size_t len;
  const void *blob = px_store_column_blob(st, 3, &len);
  j->spec = (Prunex__V1__JobSpec *)protobuf_c_message_unpack(&prunex__v1__job_spec__descriptor,
                                                            &a->pb, len, blob);
  j->spec_yaml = coord_strdup(a, px_store_column_text(st, 4));
  j->reason = coord_strdup(a, px_store_column_text(st, 5));
  j->created_unix_ms = px_store_column_int64(st, 6);
  j->updated_unix_ms = px_store_column_int64(st, 7);
  j->iteration = (int32_t)px_store_column_int64(st, 8);
  *scheduled = px_store_column_int64(st, 9);
  *finished = px_store_column_int64(st, 10);
  j->owner = coord_strdup(a, px_store_column_text(st, 11));
  j->attempt = (int32_t)px_store_column_int64(st, 12);
  j->checkpoint_problem = coord_strdup(a, px_store_column_text(st, 13));
  j->sweep_id = coord_strdup(a, px_store_column_text(st, 14));
  j->sweep_point = coord_strdup(a, px_store_column_text(st, 15));
  j->held_by = coord_strdup(a, px_store_column_text(st, 16));
  j->priority = (int32_t)px_store_column_int64(st, 17);
  j->time_limit_ms = px_store_column_int64(st, 18);
  char *deps = coord_strdup(a, px_store_column_text(st, 19));
  px_store_reset(st);
  if (!j->job_id || !j->name || !j->spec_yaml || !j->reason || !j->owner ||
      !j->checkpoint_problem || !j->sweep_id || !j->sweep_point || !j->held_by || !deps)
    return PX_ERR_NOMEM;
  PX_CHECK(coord_job_after(c, a, deps, j));
  if (!j->spec)
    return px_set_error(PX_ERR_FORMAT, "%s: job %s: stored spec does not unpack",
                        px_store_path(c->db), job_id);
  *out = j;
  return PX_OK;
}

/* The job's events, its placement (node ids) and its ranks' exits, in order. */
static px_status_t coord_job_event_fill(coord_arena_t *a, px_store_stmt_t *st, void *obj,
                                        void *arg) {
  (void)arg;
  Prunex__V1__JobEvent *e = obj;
  *e = (Prunex__V1__JobEvent)PRUNEX__V1__JOB_EVENT__INIT;
  e->time_unix_ms = px_store_column_int64(st, 0);
  e->from_state = (Prunex__V1__JobState)px_store_column_int64(st, 1);
  e->to_state = (Prunex__V1__JobState)px_store_column_int64(st, 2);
  e->reason = coord_strdup(a, px_store_column_text(st, 3));
  return e->reason ? PX_OK : PX_ERR_NOMEM;
}

static px_status_t coord_rank_exit_fill(coord_arena_t *a, px_store_stmt_t *st, void *obj,
                                        void *arg) {
  Prunex__V1__RankExit *e = obj;
  *e = (Prunex__V1__RankExit)PRUNEX__V1__RANK_EXIT__INIT;
  e->job_id = arg;
  e->rank = (int32_t)px_store_column_int64(st, 0);
  e->node_id = coord_strdup(a, px_store_column_text(st, 1));
  e->exit_code = (int32_t)px_store_column_int64(st, 2);
  e->signal = (int32_t)px_store_column_int64(st, 3);
  e->reason = coord_strdup(a, px_store_column_text(st, 4));
  e->model_path = coord_strdup(a, px_store_column_text(st, 5));
  return e->node_id && e->reason && e->model_path ? PX_OK : PX_ERR_NOMEM;
}

/* The job's events, its placement (node ids) and its ranks' exits, in order. */
static px_status_t coord_job_history(coord_t *c, coord_arena_t *a, const char *job_id,
                                     Prunex__V1__Job *j) {
  PX_CHECK(coord_db_objects(c, a,
                            "SELECT time_unix_ms, from_state, to_state, reason FROM job_events"
                            " WHERE job_id = ?1 ORDER BY id",
                            PX_STORE_ARGS(PX_ARG_TEXT(job_id)), sizeof **j->events, &j->events,
                            &j->n_events, coord_job_event_fill, NULL));
  PX_CHECK(coord_db_job_node_ids(c, a, job_id, &j->node_ids, &j->n_node_ids));
  return coord_db_objects(c, a,
                          "SELECT rank, node_id, exit_code, signal, reason, model_path FROM"
                          " rank_exits WHERE job_id = ?1 ORDER BY rank",
                          PX_STORE_ARGS(PX_ARG_TEXT(job_id)), sizeof **j->rank_exits,
                          &j->rank_exits, &j->n_rank_exits, coord_rank_exit_fill, j->job_id);
}

/* The attempts that ended in a fault and were restarted. */
/* Splits the lines of text (changed in place) into an arena array. */
static px_status_t coord_lines(coord_arena_t *a, char *text, char ***out, size_t *n) {
  size_t cap = 0;
  for (char *p = text, *nl; *p; p = nl + 1) {
    nl = strchr(p, '\n');
    if (nl) *nl = '\0';
    char **slot = coord_push(a, (void **)out, n, &cap, sizeof(char *));
    if (!slot) return PX_ERR_NOMEM;
    *slot = p;
    if (!nl) break;
  }
  return PX_OK;
}

static px_status_t coord_attempt_fill(coord_arena_t *a, px_store_stmt_t *st, void *obj,
                                      void *arg) {
  (void)arg;
  Prunex__V1__JobAttempt *e = obj;
  *e = (Prunex__V1__JobAttempt)PRUNEX__V1__JOB_ATTEMPT__INIT;
  e->attempt = (int32_t)px_store_column_int64(st, 0);
  e->cause = coord_strdup(a, px_store_column_text(st, 1));
  char *ids = coord_strdup(a, px_store_column_text(st, 2));
  e->ended_unix_ms = px_store_column_int64(st, 3);
  if (!e->cause || !ids) return PX_ERR_NOMEM;
  return coord_lines(a, ids, &e->node_ids, &e->n_node_ids);
}

/* The attempts that ended in a fault and were restarted. */
static px_status_t coord_job_attempts(coord_t *c, coord_arena_t *a, const char *job_id,
                                      Prunex__V1__Job *j) {
  return coord_db_objects(c, a,
                          "SELECT attempt, cause, node_ids, ended_unix_ms FROM job_attempts"
                          " WHERE job_id = ?1 ORDER BY attempt",
                          PX_STORE_ARGS(PX_ARG_TEXT(job_id)), sizeof **j->attempts, &j->attempts,
                          &j->n_attempts, coord_attempt_fill, NULL);
}

px_status_t coord_job_load_ex(coord_t *c, coord_arena_t *a, const char *job_id, int with_yaml,
                              Prunex__V1__Job **out) {
  *out = NULL;
  Prunex__V1__Job *j = NULL;
  int64_t scheduled = 0, finished = 0;
  PX_CHECK(coord_job_row(c, a, job_id, with_yaml, &j, &scheduled, &finished));
  if (!j) return PX_OK;
  PX_CHECK(coord_job_history(c, a, job_id, j));
  PX_CHECK(coord_job_attempts(c, a, job_id, j));
  PX_CHECK(coord_db_job_membership_fill(c, a, j, coord_now_ms()));
  if (coord_job_active((int)j->state)) /* a job that ended wants nothing back */
    PX_CHECK(coord_db_shrink_wanted_back(c, a, job_id, j->attempt, &j->wanted_back,
                                         &j->n_wanted_back));
  PX_CHECK(coord_job_summary(c, a, job_id, scheduled, finished, &j->summary));
  *out = j;
  return PX_OK;
}

static px_status_t coord_device_fill(coord_arena_t *a, px_store_stmt_t *st, void *obj,
                                     void *arg) {
  (void)arg;
  Prunex__V1__Device *d = obj;
  *d = (Prunex__V1__Device)PRUNEX__V1__DEVICE__INIT;
  d->index = (int32_t)px_store_column_int64(st, 0);
  d->kind = (Prunex__V1__DeviceKind)px_store_column_int64(st, 1);
  d->name = coord_strdup(a, px_store_column_text(st, 2));
  d->memory_bytes = (uint64_t)px_store_column_int64(st, 3);
  d->healthy = px_store_column_int64(st, 4) != 0;
  return d->name ? PX_OK : PX_ERR_NOMEM;
}

px_status_t coord_node_load_row(coord_t *c, coord_arena_t *a, px_store_stmt_t *row,
                                Prunex__V1__Node **out) {
  *out = NULL;
  Prunex__V1__Node *n;
  COORD_NEW(a, Prunex__V1__Node, PRUNEX__V1__NODE__INIT, n);
  n->node_id = coord_strdup(a, px_store_column_text(row, 0));
  n->name = coord_strdup(a, px_store_column_text(row, 1));
  n->hostname = coord_strdup(a, px_store_column_text(row, 2));
  n->state = (Prunex__V1__NodeState)px_store_column_int64(row, 3);
  n->job_id = coord_strdup(a, px_store_column_text(row, 4));
  char *addrs = coord_strdup(a, px_store_column_text(row, 5));
  n->last_heartbeat_unix_ms = px_store_column_int64(row, 6);
  n->registered_unix_ms = px_store_column_int64(row, 7);
  if (!n->node_id || !n->name || !n->hostname || !n->job_id || !addrs) return PX_ERR_NOMEM;
  PX_CHECK(coord_lines(a, addrs, &n->data_plane_addresses, &n->n_data_plane_addresses));
  PX_CHECK(coord_db_objects(c, a,
                            "SELECT device_index, kind, name, memory_bytes, healthy FROM"
                            " node_devices WHERE node_id = ?1 ORDER BY position",
                            PX_STORE_ARGS(PX_ARG_TEXT(n->node_id)), sizeof **n->devices,
                            &n->devices, &n->n_devices, coord_device_fill, NULL));
  *out = n;
  return PX_OK;
}

px_status_t coord_db_job_node_ids(coord_t *c, coord_arena_t *a, const char *job_id, char ***ids,
                                  size_t *n) {
  return coord_db_ids(c, a, "SELECT node_id FROM job_nodes WHERE job_id = ?1 ORDER BY node_index",
                      job_id, ids, n);
}

px_status_t coord_db_job_nodes_held(coord_t *c, coord_arena_t *a, const char *job_id,
                                    char ***ids, int **states, size_t *n) {
  return coord_db_list(c, a, "SELECT node_id, state FROM nodes WHERE job_id = ?1",
                       PX_STORE_ARGS(PX_ARG_TEXT(job_id)),
                       COORD_LIST_COLS(COORD_LIST_TEXT(ids), COORD_LIST_I32(states)), n);
}

px_status_t coord_db_job_nodes_unlink(coord_t *c, const char *job_id) {
  return coord_db_run_key(c, "UPDATE nodes SET job_id = '' WHERE job_id = ?1", job_id);
}

px_status_t coord_job_delete_rows(coord_t *c, const char *job_id) {
  static const char *const sql[] = {
      "DELETE FROM iteration_layers WHERE job_id = ?1",
      "DELETE FROM iterations WHERE job_id = ?1",
      "DELETE FROM decisions WHERE job_id = ?1",
      "DELETE FROM job_penalties WHERE job_id = ?1",
      "DELETE FROM kv WHERE job_id = ?1",
      "DELETE FROM rank_exits WHERE job_id = ?1",
      "DELETE FROM job_ranks WHERE job_id = ?1",
      "DELETE FROM job_nodes WHERE job_id = ?1",
      "DELETE FROM job_events WHERE job_id = ?1",
      "DELETE FROM job_spec_yaml WHERE job_id = ?1",
      "DELETE FROM rank_log_chunks WHERE job_id = ?1",
      "DELETE FROM rank_logs WHERE job_id = ?1",
      "DELETE FROM job_attempts WHERE job_id = ?1",
      "DELETE FROM job_epochs WHERE job_id = ?1",
      "DELETE FROM job_epoch_drops WHERE job_id = ?1",
      "DELETE FROM job_blacklist WHERE job_id = ?1",
      "DELETE FROM jobs WHERE job_id = ?1",
  };
  for (size_t i = 0; i < sizeof sql / sizeof sql[0]; i++)
    PX_CHECK(coord_db_run_key(c, sql[i], job_id));
  return PX_OK;
}
