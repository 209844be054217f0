/* The rank logs' queries (logs.c; the coordinator's data layer): rank_logs, one
 * row per (job, rank), and rank_log_chunks, the kept bytes by position. */
#ifndef PX_COORD_DB_LOGS_H
#define PX_COORD_DB_LOGS_H

#include "../coord.h"

/* The job's rank count; *found 0 when there is no such job. */
px_status_t coord_db_logs_job_ranks(coord_t *c, const char *job_id, int *found, int *nranks);
/* The node that holds the job's rank into node (cap bytes); *found 0 when
 * the job is not placed. */
px_status_t coord_db_logs_rank_node(coord_t *c, const char *job_id, int rank, int *found,
                                    char *node, size_t cap);
/* The rank's log row (zeros and *found 0 when none). */
px_status_t coord_db_logs_row(coord_t *c, const char *job_id, int rank, int *found,
                              int64_t *size, int64_t *start, int *eof);
/* Stores data[0..len) at position pos of the rank's log. */
px_status_t coord_db_logs_chunk_add(coord_t *c, const char *job_id, int rank, int64_t pos,
                                   const void *data, size_t len);
/* Drops the rank's chunks that end at or before keep_from. */
px_status_t coord_db_logs_chunks_trim(coord_t *c, const char *job_id, int rank,
                                      int64_t keep_from);
/* Writes the rank's row: its node, size and eof (the kept tail's start is
 * its first chunk's). */
px_status_t coord_db_logs_row_set(coord_t *c, const char *job_id, int rank, const char *node_id,
                                  int64_t size, int eof, int64_t now);
/* Copies the rank's log bytes from position `from` into buf, at most want,
 * stopping at a hole; *got the bytes copied. */
px_status_t coord_db_logs_read(coord_t *c, const char *job_id, int rank, int64_t from,
                               uint8_t *buf, size_t want, size_t *got);

#endif
