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
#include "db/logs.h"
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
  int found = 0;
  if (coord_db_logs_job_ranks(c, job_id, &found, nranks) != PX_OK) {
    coord_fail_internal(c, call);
    return 0;
  }
  if (!found) {
    px_rpc_srv_finish(call, PX_RPC_NOT_FOUND, "job %s not found", job_id);
    return 0;
  }
  if (rank < 0 || rank >= *nranks) {
    px_rpc_srv_finish(call, PX_RPC_INVALID_ARGUMENT, "rank = %d: job %s has ranks 0..%d", rank,
                      job_id, *nranks - 1);
    return 0;
  }
  return 1;
}

/* Appends the new bytes and drops chunks beyond the tail; within the
 * caller's transaction. *size becomes the new end. */
static px_status_t coord_log_store(coord_t *c, const Prunex__V1__RankLogChunk *r, int64_t *size,
                                   int *eof) {
  size_t skip = (size_t)(*size - r->offset);
  if (skip < r->data.len) {
    PX_CHECK(coord_db_logs_chunk_add(c, r->job_id, r->rank, *size, r->data.data + skip,
                                     r->data.len - skip));
    *size += (int64_t)(r->data.len - skip);
  }
  if (r->eof && r->offset + (int64_t)r->data.len == *size) *eof = 1;
  int64_t keep_from = *size - COORD_LOG_TAIL_BYTES;
  if (keep_from > 0) PX_CHECK(coord_db_logs_chunks_trim(c, r->job_id, r->rank, keep_from));
  return coord_db_logs_row_set(c, r->job_id, r->rank, r->node_id, *size, *eof, coord_now_ms());
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
  char node[256];
  int placed = 0, found = 0;
  if (coord_db_logs_rank_node(c, r->job_id, r->rank, &placed, node, sizeof node) != PX_OK) {
    coord_fail_internal(c, call);
    return;
  }
  if (!placed) {
    px_rpc_srv_finish(call, PX_RPC_FAILED_PRECONDITION, "job %s is not placed: rank %d has no node",
                      r->job_id, r->rank);
    return;
  }
  if (strcmp(node, r->node_id) != 0) {
    px_rpc_srv_finish(call, PX_RPC_PERMISSION_DENIED,
                      "rank %d of job %s runs on node %s, not on node '%s'", r->rank, r->job_id,
                      node, r->node_id);
    return;
  }

  int64_t size = 0, start = 0;
  int eof = 0;
  if (px_store_begin(c->db) != PX_OK ||
      coord_db_logs_row(c, r->job_id, r->rank, &found, &size, &start, &eof) != PX_OK ||
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
  int eof = 0, found = 0;
  if (coord_db_logs_row(c, r->job_id, r->rank, &found, &size, &start, &eof) != PX_OK) {
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
  if (want && coord_db_logs_read(c, r->job_id, r->rank, from, buf, want, &got) != PX_OK) {
    px_free(buf);
    coord_fail_internal(c, call);
    return;
  }
  resp.found = found;
  resp.offset = from;
  resp.data.data = buf;
  resp.data.len = got;
  resp.size = size;
  resp.start_offset = start;
  resp.eof = eof;
  px_rpc_srv_reply(call, &resp.base);
  px_free(buf);
}
