/* The queries of attempts and faults (attempt.c, recovery.c): exit records
 * for a lost node's ranks, an ended attempt's record and its placement
 * dropped, and what the sweeps look for. */
#include <stdio.h>
#include <string.h>

#include "db_core.h"

#include "prunex/check.h"

px_status_t coord_db_rank_exits_for_node(coord_t *c, const char *job_id, const char *node_id,
                                         const char *reason, int64_t now) {
  return px_store_run_args(c->db,
                           "INSERT OR IGNORE INTO rank_exits (job_id, rank, node_id, exit_code,"
                           " signal, reason, time_unix_ms)"
                           " SELECT r.job_id, r.rank, n.node_id, -1, 0, ?3, ?4 FROM job_ranks r"
                           " JOIN job_nodes n ON n.job_id = r.job_id AND n.node_index = r.node_index"
                           " WHERE r.job_id = ?1 AND n.node_id = ?2",
                           PX_STORE_ARGS(PX_ARG_TEXT(job_id), PX_ARG_TEXT(node_id),
                                         PX_ARG_TEXT(reason), PX_ARG_INT(now)));
}

px_status_t coord_db_job_attempts(coord_t *c, const char *job_id, int *attempt,
                                  int *preemptions) {
  int64_t v[2] = {1, 0};
  int found;
  PX_CHECK(px_store_row_int64(c->db, "SELECT attempt, preemptions FROM jobs WHERE job_id = ?1",
                              job_id, v, 2, &found));
  *attempt = (int)v[0];
  *preemptions = (int)v[1];
  return PX_OK;
}

px_status_t coord_db_attempt_put(coord_t *c, const char *job_id, int attempt, const char *cause,
                                 const char *node_lines, int64_t now) {
  return px_store_run_args(c->db,
                           "INSERT OR REPLACE INTO job_attempts (job_id, attempt, cause, node_ids,"
                           " ended_unix_ms) VALUES (?1, ?2, ?3, ?4, ?5)",
                           PX_STORE_ARGS(PX_ARG_TEXT(job_id), PX_ARG_INT(attempt),
                                         PX_ARG_TEXT(cause), PX_ARG_TEXT(node_lines),
                                         PX_ARG_INT(now)));
}

px_status_t coord_db_job_preempted(coord_t *c, const char *job_id) {
  return coord_db_run_key(c, "UPDATE jobs SET preemptions = preemptions + 1 WHERE job_id = ?1",
                          job_id);
}

px_status_t coord_db_job_requeue(coord_t *c, const char *job_id, int next_attempt,
                                 const char *prefer) {
  static const char *const drop[] = {
      "DELETE FROM rank_exits WHERE job_id = ?1",
      "DELETE FROM job_ranks WHERE job_id = ?1",
      "DELETE FROM job_nodes WHERE job_id = ?1",
      "DELETE FROM kv WHERE job_id = ?1",
      /* the new attempt's ranks may run elsewhere: their logs start anew
       * (an agent that runs a rank again appends to the same file) */
      "DELETE FROM rank_log_chunks WHERE job_id = ?1",
      "DELETE FROM rank_logs WHERE job_id = ?1",
  };
  for (size_t i = 0; i < sizeof drop / sizeof drop[0]; i++)
    PX_CHECK(coord_db_run_key(c, drop[i], job_id));
  return px_store_run_args(c->db,
                           "UPDATE jobs SET attempt = ?2, prefer_nodes = ?3 WHERE job_id = ?1",
                           PX_STORE_ARGS(PX_ARG_TEXT(job_id), PX_ARG_INT(next_attempt),
                                         PX_ARG_TEXT(prefer)));
}

px_status_t coord_db_job_state(coord_t *c, const char *job_id, int *found, int *state) {
  int64_t v = 0;
  PX_CHECK(px_store_row_int64(c->db, "SELECT state FROM jobs WHERE job_id = ?1", job_id, &v, 1,
                              found));
  *state = (int)v;
  return PX_OK;
}

px_status_t coord_db_placements_overdue(coord_t *c, coord_arena_t *a, int state, int64_t before,
                                        int64_t since, char ***pairs, size_t *n) {
  char **jobs = NULL, **nodes = NULL;
  size_t k = 0;
  PX_CHECK(coord_db_list(c, a,
                         "SELECT j.job_id, n.node_id FROM jobs j JOIN job_nodes n"
                         " ON n.job_id = j.job_id WHERE j.state = ?3 AND n.started_unix_ms = 0"
                         " AND max(j.scheduled_unix_ms, ?2) < ?1 ORDER BY j.id, n.node_index",
                         PX_STORE_ARGS(PX_ARG_INT(before), PX_ARG_INT(since), PX_ARG_INT(state)),
                         COORD_LIST_COLS(COORD_LIST_TEXT(&jobs), COORD_LIST_TEXT(&nodes)), &k));
  /* in pairs: ids[2i] the job, ids[2i+1] the node */
  *pairs = k ? coord_alloc(a, 2 * k * sizeof(char *)) : NULL;
  if (k && !*pairs) return PX_ERR_NOMEM;
  for (size_t i = 0; i < k; i++) {
    (*pairs)[2 * i] = jobs[i];
    (*pairs)[2 * i + 1] = nodes[i];
  }
  *n = k;
  return PX_OK;
}

px_status_t coord_db_nodes_holding_silent(coord_t *c, coord_arena_t *a, int s1, int s2,
                                          int64_t before, int64_t since, char ***ids, size_t *n) {
  return coord_db_list(c, a,
                       "SELECT n.node_id FROM nodes n JOIN jobs j ON j.job_id = n.job_id"
                       " WHERE n.job_id != '' AND j.state IN (?3, ?4)"
                       " AND max(n.last_heartbeat_unix_ms, ?2) < ?1 ORDER BY n.id",
                       PX_STORE_ARGS(PX_ARG_INT(before), PX_ARG_INT(since), PX_ARG_INT(s1),
                                     PX_ARG_INT(s2)),
                       COORD_LIST_COLS(COORD_LIST_TEXT(ids)), n);
}
