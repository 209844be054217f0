/* Rank logs in one place: the agents upload new bytes of each rank's log
 * (AppendRankLog, every few seconds and when the rank exits) and pxctl
 * reads them back from any host (GetRankLog), so `pxctl logs` needs no
 * access to the node that ran a rank.
 *
 * Storage (schema v5): rank_logs, one row per (job, rank) with the bytes
 * uploaded so far (size), where the kept tail starts and whether the log is
 * complete (eof); rank_log_chunks, the kept bytes as uploaded, keyed by
 * their position in the log. A rank keeps at most COORD_LOG_TAIL_BYTES plus
 * one chunk: older chunks are dropped whole, so a long job costs bounded
 * space and an append touches a few rows, never the whole tail.
 *
 * Uploads are idempotent: a chunk that starts before the end already held
 * has its known prefix skipped, one that starts past it is refused with the
 * offset to resend from (next_offset), so an agent that restarts, or a
 * coordinator restored from a backup, converges without duplicates. Only
 * the node that holds the rank may append to its log. */
#include <string.h>

#include "coord.h"
#include "prunex/check.h"

#define COORD_LOG_TAIL_BYTES (1 << 20) /* kept per rank */
#define COORD_LOG_CHUNK_MAX (256 << 10) /* one upload */
#define COORD_LOG_READ_MAX (1 << 20)    /* one GetRankLog answer */

/* The job's rank count, or a finished call: 0 when the call was answered
 * (not found, bad rank, database error). */
static int coord_log_job_ranks(coord_t *c, px_rpc_srv_call_t *call, const char *job_id, int rank,
                               int *nranks) {
  if (!job_id[0] || strlen(job_id) > 128) {
    px_rpc_srv_finish(call, PX_RPC_INVALID_ARGUMENT, "job_id is %s",
                      job_id[0] ? "too long" : "required");
    return 0;
  }
  px_store_stmt_t *st;
  px_status_t rc = px_store_stmt(c->db,
                                 "SELECT num_nodes * workers_per_node FROM jobs WHERE job_id = ?1",
                                 &st);
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
  *nranks = (int)px_store_column_int64(st, 0);
  px_store_reset(st);
  if (rank < 0 || rank >= *nranks) {
    px_rpc_srv_finish(call, PX_RPC_INVALID_ARGUMENT, "rank = %d: job %s has ranks 0..%d", rank,
                      job_id, *nranks - 1);
    return 0;
  }
  return 1;
}

/* The rank's row: 1 and the fields when there is one, 0 when none,
 * negative on a database error. */
static int coord_log_row(coord_t *c, const char *job_id, int rank, int64_t *size, int64_t *start,
                         int *eof) {
  px_store_stmt_t *st;
  px_status_t rc = px_store_stmt(c->db,
                                 "SELECT size, start_offset, eof FROM rank_logs"
                                 " WHERE job_id = ?1 AND rank = ?2",
                                 &st);
  if (rc == PX_OK) rc = px_store_bind_text(st, 1, job_id);
  if (rc == PX_OK) rc = px_store_bind_int64(st, 2, rank);
  if (rc == PX_OK) rc = px_store_step(st);
  if (rc < 0) return rc;
  *size = *start = 0;
  *eof = 0;
  if (rc == 1) {
    *size = px_store_column_int64(st, 0);
    *start = px_store_column_int64(st, 1);
    *eof = (int)px_store_column_int64(st, 2);
  }
  px_store_reset(st);
  return rc;
}

/* Appends the new bytes and drops chunks beyond the tail; within the
 * caller's transaction. *size becomes the new end. */
static px_status_t coord_log_store(coord_t *c, const Prunex__V1__RankLogChunk *r, int64_t *size,
                                   int *eof) {
  size_t skip = (size_t)(*size - r->offset);
  px_store_stmt_t *st;
  if (skip < r->data.len) {
    PX_CHECK(px_store_stmt(c->db,
                           "INSERT OR REPLACE INTO rank_log_chunks (job_id, rank, pos, data)"
                           " VALUES (?1, ?2, ?3, ?4)",
                           &st));
    PX_CHECK(px_store_bind_text(st, 1, r->job_id));
    PX_CHECK(px_store_bind_int64(st, 2, r->rank));
    PX_CHECK(px_store_bind_int64(st, 3, *size));
    PX_CHECK(px_store_bind_blob(st, 4, r->data.data + skip, r->data.len - skip));
    PX_CHECK(px_store_run(st));
    *size += (int64_t)(r->data.len - skip);
  }
  if (r->eof && r->offset + (int64_t)r->data.len == *size) *eof = 1;
  int64_t keep_from = *size - COORD_LOG_TAIL_BYTES;
  if (keep_from > 0) {
    PX_CHECK(px_store_stmt(c->db,
                           "DELETE FROM rank_log_chunks WHERE job_id = ?1 AND rank = ?2"
                           " AND pos + length(data) <= ?3",
                           &st));
    PX_CHECK(px_store_bind_text(st, 1, r->job_id));
    PX_CHECK(px_store_bind_int64(st, 2, r->rank));
    PX_CHECK(px_store_bind_int64(st, 3, keep_from));
    PX_CHECK(px_store_run(st));
  }
  PX_CHECK(px_store_stmt(c->db,
                         "INSERT INTO rank_logs (job_id, rank, node_id, size, start_offset, eof,"
                         " updated_unix_ms) VALUES (?1, ?2, ?3, ?4,"
                         " coalesce((SELECT min(pos) FROM rank_log_chunks"
                         "           WHERE job_id = ?1 AND rank = ?2), ?4), ?5, ?6)"
                         " ON CONFLICT (job_id, rank) DO UPDATE SET node_id = excluded.node_id,"
                         " size = excluded.size, start_offset = excluded.start_offset,"
                         " eof = excluded.eof, updated_unix_ms = excluded.updated_unix_ms",
                         &st));
  PX_CHECK(px_store_bind_text(st, 1, r->job_id));
  PX_CHECK(px_store_bind_int64(st, 2, r->rank));
  PX_CHECK(px_store_bind_text(st, 3, r->node_id));
  PX_CHECK(px_store_bind_int64(st, 4, *size));
  PX_CHECK(px_store_bind_int64(st, 5, *eof));
  PX_CHECK(px_store_bind_int64(st, 6, coord_now_ms()));
  return px_store_run(st);
}

void coord_rpc_append_rank_log(px_rpc_srv_call_t *call, const ProtobufCMessage *msg, void *data) {
  coord_t *c = data;
  const Prunex__V1__RankLogChunk *r = (const Prunex__V1__RankLogChunk *)msg;
  int nranks = 0;
  if (!coord_log_job_ranks(c, call, r->job_id, r->rank, &nranks)) return;
  if (r->offset < 0 || r->data.len > COORD_LOG_CHUNK_MAX) {
    px_rpc_srv_finish(call, PX_RPC_INVALID_ARGUMENT,
                      "offset = %lld, %zu bytes: expected offset >= 0 and at most %d bytes",
                      (long long)r->offset, r->data.len, COORD_LOG_CHUNK_MAX);
    return;
  }
  /* Only the node that holds the rank writes its log. */
  px_store_stmt_t *st;
  px_status_t rc = px_store_stmt(c->db,
                                 "SELECT n.node_id FROM job_ranks r JOIN job_nodes n"
                                 " ON n.job_id = r.job_id AND n.node_index = r.node_index"
                                 " WHERE r.job_id = ?1 AND r.rank = ?2",
                                 &st);
  if (rc == PX_OK) rc = px_store_bind_text(st, 1, r->job_id);
  if (rc == PX_OK) rc = px_store_bind_int64(st, 2, r->rank);
  if (rc == PX_OK) rc = px_store_step(st);
  if (rc < 0) {
    coord_fail_internal(c, call);
    return;
  }
  if (rc == 0) {
    px_rpc_srv_finish(call, PX_RPC_FAILED_PRECONDITION, "job %s is not placed: rank %d has no node",
                      r->job_id, r->rank);
    return;
  }
  if (strcmp(px_store_column_text(st, 0), r->node_id) != 0) {
    px_rpc_srv_finish(call, PX_RPC_PERMISSION_DENIED,
                      "rank %d of job %s runs on node %s, not on node '%s'", r->rank, r->job_id,
                      px_store_column_text(st, 0), r->node_id);
    px_store_reset(st);
    return;
  }
  px_store_reset(st);

  int64_t size = 0, start = 0;
  int eof = 0;
  if (px_store_begin(c->db) != PX_OK ||
      coord_log_row(c, r->job_id, r->rank, &size, &start, &eof) < 0 ||
      (r->offset <= size && coord_log_store(c, r, &size, &eof) != PX_OK) ||
      px_store_commit(c->db) != PX_OK) {
    coord_fail_internal(c, call);
    return;
  }
  if (r->offset > size)
    px_log(PX_LOG_INFO, "job %s: rank %d's log: a chunk at %lld, the log ends at %lld: resend",
           r->job_id, r->rank, (long long)r->offset, (long long)size);
  Prunex__V1__RankLogChunkResponse resp = PRUNEX__V1__RANK_LOG_CHUNK_RESPONSE__INIT;
  resp.next_offset = size;
  px_rpc_srv_reply(call, &resp.base);
}

void coord_rpc_get_rank_log(px_rpc_srv_call_t *call, const ProtobufCMessage *msg, void *data) {
  coord_t *c = data;
  const Prunex__V1__GetRankLogRequest *r = (const Prunex__V1__GetRankLogRequest *)msg;
  int nranks = 0;
  if (!coord_log_job_ranks(c, call, r->job_id, r->rank, &nranks)) return;
  Prunex__V1__RankLog resp = PRUNEX__V1__RANK_LOG__INIT;
  resp.job_id = r->job_id;
  resp.rank = r->rank;
  int64_t size = 0, start = 0;
  int eof = 0;
  int found = coord_log_row(c, r->job_id, r->rank, &size, &start, &eof);
  if (found < 0) {
    coord_fail_internal(c, call);
    return;
  }
  int64_t from = r->offset > start ? r->offset : start;
  if (from > size) from = size;
  size_t cap = r->max_bytes > 0 && r->max_bytes < COORD_LOG_READ_MAX ? (size_t)r->max_bytes
                                                                     : COORD_LOG_READ_MAX;
  size_t want = (size_t)(size - from) < cap ? (size_t)(size - from) : cap;
  uint8_t *buf = want ? px_malloc(want, "coord.ranklog") : NULL;
  if (want && !buf) {
    px_set_error(PX_ERR_NOMEM, "out of memory for %zu bytes of log", want);
    coord_fail_internal(c, call);
    return;
  }
  size_t got = 0;
  if (want) {
    px_store_stmt_t *st;
    px_status_t rc = px_store_stmt(c->db,
                                   "SELECT pos, data FROM rank_log_chunks WHERE job_id = ?1"
                                   " AND rank = ?2 AND pos + length(data) > ?3 ORDER BY pos",
                                   &st);
    if (rc == PX_OK) rc = px_store_bind_text(st, 1, r->job_id);
    if (rc == PX_OK) rc = px_store_bind_int64(st, 2, r->rank);
    if (rc == PX_OK) rc = px_store_bind_int64(st, 3, from);
    while (rc >= 0 && got < want && (rc = px_store_step(st)) == 1) {
      int64_t pos = px_store_column_int64(st, 0);
      size_t len = 0;
      const uint8_t *d = px_store_column_blob(st, 1, &len);
      int64_t at = from + (int64_t)got; /* the next byte wanted */
      if (pos > at || pos + (int64_t)len <= at) break; /* a hole: stop before it */
      size_t skip = (size_t)(at - pos), n = len - skip;
      if (n > want - got) n = want - got;
      memcpy(buf + got, d + skip, n);
      got += n;
    }
    px_store_reset(st);
    if (rc < 0) {
      px_free(buf);
      coord_fail_internal(c, call);
      return;
    }
  }
  resp.found = found == 1;
  resp.offset = from;
  resp.data.data = buf;
  resp.data.len = got;
  resp.size = size;
  resp.start_offset = start;
  resp.eof = eof;
  px_rpc_srv_reply(call, &resp.base);
  px_free(buf);
}
