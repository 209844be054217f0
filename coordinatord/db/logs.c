/* The rank logs' queries (db/logs.h). */
#include "logs.h" /* db/logs.h */

#include <stdio.h>
#include <string.h>

#include "prunex/check.h"

px_status_t coord_db_logs_job_ranks(coord_t *c, const char *job_id, int *found, int *nranks) {
  int64_t n = 0;
  PX_CHECK(px_store_row_int64(c->db,
                              "SELECT max(num_nodes * workers_per_node, coalesce((SELECT"
                              " max(rank) + 1 FROM job_ranks r WHERE r.job_id = jobs.job_id), 0))"
                              " FROM jobs"
                              " WHERE job_id = ?1",
                              job_id, &n, 1, found));
  *nranks = (int)n;
  return PX_OK;
}

px_status_t coord_db_logs_rank_node(coord_t *c, const char *job_id, int rank, int *found,
                                    char *node, size_t cap) {
  node[0] = '\0';
  return px_store_row(c->db,
                      "SELECT n.node_id FROM job_ranks r JOIN job_nodes n"
                      " ON n.job_id = r.job_id AND n.node_index = r.node_index"
                      " WHERE r.job_id = ?1 AND r.rank = ?2",
                      PX_STORE_ARGS(PX_ARG_TEXT(job_id), PX_ARG_INT(rank)),
                      PX_STORE_COLS(PX_COL_TEXT(node, cap)), found);
}

px_status_t coord_db_logs_row(coord_t *c, const char *job_id, int rank, int *found,
                              int64_t *size, int64_t *start, int *eof) {
  *size = *start = 0;
  *eof = 0;
  return px_store_row(c->db,
                      "SELECT size, start_offset, eof FROM rank_logs"
                      " WHERE job_id = ?1 AND rank = ?2",
                      PX_STORE_ARGS(PX_ARG_TEXT(job_id), PX_ARG_INT(rank)),
                      PX_STORE_COLS(PX_COL_INT(size), PX_COL_INT(start), PX_COL_I32(eof)), found);
}

px_status_t coord_db_logs_chunk_add(coord_t *c, const char *job_id, int rank, int64_t pos,
                                   const void *data, size_t len) {
  px_store_stmt_t *st;
  PX_CHECK(px_store_stmt(c->db,
                         "INSERT OR REPLACE INTO rank_log_chunks (job_id, rank, pos, data)"
                         " VALUES (?1, ?2, ?3, ?4)",
                         &st));
  PX_CHECK(px_store_bind_args(st, PX_STORE_ARGS(PX_ARG_TEXT(job_id), PX_ARG_INT(rank),
                                                PX_ARG_INT(pos))));
  PX_CHECK(px_store_bind_blob(st, 4, data, len));
  return px_store_run(st);
}

px_status_t coord_db_logs_chunks_trim(coord_t *c, const char *job_id, int rank,
                                      int64_t keep_from) {
  return px_store_run_args(c->db,
                           "DELETE FROM rank_log_chunks WHERE job_id = ?1 AND rank = ?2"
                           " AND pos + length(data) <= ?3",
                           PX_STORE_ARGS(PX_ARG_TEXT(job_id), PX_ARG_INT(rank),
                                         PX_ARG_INT(keep_from)));
}

px_status_t coord_db_logs_row_set(coord_t *c, const char *job_id, int rank, const char *node_id,
                                  int64_t size, int eof, int64_t now) {
  return px_store_run_args(c->db,
                           "INSERT INTO rank_logs (job_id, rank, node_id, size, start_offset, eof,"
                           " updated_unix_ms) VALUES (?1, ?2, ?3, ?4,"
                           " coalesce((SELECT min(pos) FROM rank_log_chunks"
                           "           WHERE job_id = ?1 AND rank = ?2), ?4), ?5, ?6)"
                           " ON CONFLICT (job_id, rank) DO UPDATE SET node_id = excluded.node_id,"
                           " size = excluded.size, start_offset = excluded.start_offset,"
                           " eof = excluded.eof, updated_unix_ms = excluded.updated_unix_ms",
                           PX_STORE_ARGS(PX_ARG_TEXT(job_id), PX_ARG_INT(rank),
                                         PX_ARG_TEXT(node_id), PX_ARG_INT(size), PX_ARG_INT(eof),
                                         PX_ARG_INT(now)));
}

px_status_t coord_db_logs_read(coord_t *c, const char *job_id, int rank, int64_t from,
                               uint8_t *buf, size_t want, size_t *got) {
  px_store_stmt_t *st;
  *got = 0;
  PX_CHECK(px_store_stmt(c->db,
                         "SELECT pos, data FROM rank_log_chunks WHERE job_id = ?1"
                         " AND rank = ?2 AND pos + length(data) > ?3 ORDER BY pos",
                         &st));
  PX_CHECK(px_store_bind_args(st, PX_STORE_ARGS(PX_ARG_TEXT(job_id), PX_ARG_INT(rank),
                                                PX_ARG_INT(from))));
  px_status_t rc = PX_OK;
  while (*got < want && (rc = px_store_step(st)) == 1) {
    int64_t pos = px_store_column_int64(st, 0);
    size_t len = 0;
    const uint8_t *d = px_store_column_blob(st, 1, &len);
    int64_t at = from + (int64_t)*got; /* the next byte wanted */
    if (pos > at || pos + (int64_t)len <= at) break; /* a hole: stop before it */
    size_t skip = (size_t)(at - pos), n = len - skip;
    if (n > want - *got) n = want - *got;
    memcpy(buf + *got, d + skip, n);
    *got += n;
  }
  px_store_reset(st);
  return rc < 0 ? rc : PX_OK;
}
