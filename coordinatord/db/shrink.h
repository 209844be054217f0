/* The coordinator's SQL for preemption that shrinks an elastic job
 * (shrink.c): the running elastic jobs a waiting job may take nodes from,
 * their nodes, the ranks of a node that have exited, and the drops of
 * nodes still placed (the nodes asked to leave at the next round
 * boundary). Writes run in the caller's transaction. */
#ifndef PX_COORD_DB_SHRINK_H
#define PX_COORD_DB_SHRINK_H

#include "../coord.h"

/* A running job below a job priority that is elastic (spec.elastic). */
typedef struct {
  char *job_id;
  int priority, attempt, min_nodes;
} coord_db_shrinkable_t;

/* The RUNNING elastic jobs of a job priority below `below`, the lowest
 * priority first, then the latest started (arena a). */
px_status_t coord_db_shrinkable(coord_t *c, coord_arena_t *a, int below,
                                coord_db_shrinkable_t **out, size_t *n);

/* The job's placement now, the highest node index first: ids, names, and
 * whether each node has at least per_node devices (fits[i] 1). */
px_status_t coord_db_shrink_nodes(coord_t *c, coord_arena_t *a, const char *job_id, int per_node,
                                  char ***ids, char ***names, int **fits, size_t *n);

/* Of the ranks the job has on node_id (its placement's), how many there
 * are and how many have an exit record. */
px_status_t coord_db_shrink_node_exits(coord_t *c, const char *job_id, const char *node_id,
                                       int64_t *ranks, int64_t *exited);

/* The job's drops of nodes still in its placement (asked to leave, their
 * epoch not made yet; arena a). */
px_status_t coord_db_shrink_pending_drops(coord_t *c, coord_arena_t *a, const char *job_id,
                                          char ***ids, size_t *n);
/* Forgets them (a shrink given up before its round boundary came). */
px_status_t coord_db_shrink_drops_revert(coord_t *c, const char *job_id);

/* The job's placed nodes it is giving to a preemption: asked to leave at
 * the next round boundary (a drop still placed), or out of its newest
 * epoch of the attempt and not gone yet (ids in arena a). */
px_status_t coord_db_shrink_giving(coord_t *c, coord_arena_t *a, const char *job_id, int attempt,
                                   char ***ids, size_t *n);

/* The hook for growing back (joining, not built yet): the nodes the
 * elastic job gave up to preemptions in its current attempt (an epoch of
 * kind "preempted" left them out) and does not hold now, ids in arena a,
 * to be offered to it first when they are free again. Job.wanted_back. */
px_status_t coord_db_shrink_wanted_back(coord_t *c, coord_arena_t *a, const char *job_id,
                                        int attempt, char ***ids, size_t *n);

#endif
