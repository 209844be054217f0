/* The sweeps' queries (the coordinator's data layer): the sweeps row a
 * submission makes, the sweep its jobs name, and the sweep's unfinished
 * jobs that a cancel ends, with job states bound as parameters. Nothing
 * else in the coordinator writes the sweeps table or jobs.sweep_*. */
#ifndef PX_COORD_DB_SWEEP_H
#define PX_COORD_DB_SWEEP_H

#include "../coord.h"

/* A new sweeps row; its id into sweep_id. In a transaction. */
px_status_t coord_db_sweep_new(coord_t *c, const char *owner, const char *name,
                               const char *spec_yaml, int64_t njobs, int64_t now, char *sweep_id,
                               size_t cap);
/* Names the job's sweep and its values. */
px_status_t coord_db_sweep_job_set(coord_t *c, const char *job_id, const char *sweep_id,
                                   const char *point);
/* *found 0 when there is no such sweep; else its owner. */
px_status_t coord_db_sweep_owner(coord_t *c, const char *sweep_id, int *found, char *owner,
                                 size_t cap);
typedef struct {
  char *job_id;
  int state;
} coord_db_sweep_job_t;
/* The sweep's jobs not finished, in submission order (arena a). */
px_status_t coord_db_sweep_unfinished(coord_t *c, coord_arena_t *a, const char *sweep_id,
                                      coord_db_sweep_job_t **out, size_t *n);

#endif
