/* The coordinator's SQL for membership (membership.c): the epochs of a
 * job's attempt (job_epochs), the member nodes lost since the newest epoch
 * (job_epoch_drops) and the nodes an elastic job does not take back
 * (job_blacklist). Named queries; writes run in the caller's
 * transaction. */
#ifndef PX_COORD_DB_MEMBERSHIP_H
#define PX_COORD_DB_MEMBERSHIP_H

#include "../coord.h"

/* One epoch row: the member nodes (ids one a line, placement indexes
 * comma-separated, both in node order) from from_iteration on. Text in the
 * caller's arena. */
typedef struct {
  int attempt, epoch, from_iteration;
  char *node_ids;
  char *node_indexes;
  char *reason;
  int64_t time_unix_ms;
} coord_db_epoch_t;

/* The epoch's members as arrays (arena a): ids and placement indexes, in
 * node order; the two have the same count (*n). */
px_status_t coord_db_epoch_members(coord_arena_t *a, const coord_db_epoch_t *e, char ***ids,
                                   int32_t **indexes, size_t *n);
/* The membership a Job message shows: the current attempt's epochs
 * (j->attempt) and the nodes in cooldown at now. */
px_status_t coord_db_job_membership_fill(coord_t *c, coord_arena_t *a, Prunex__V1__Job *j,
                                         int64_t now);

/* 1 when id is one of the epoch's member nodes. */
int coord_db_epoch_has(const coord_db_epoch_t *e, const char *id);
/* The epoch e (arena a) without the nodes drops[0..nd) (a node an elastic
 * job gives to a preemption is still placed when its epoch is made,
 * shrink.c): its member lists rewritten, *count its nodes. */
px_status_t coord_db_epoch_without(coord_arena_t *a, coord_db_epoch_t *e, char **drops, size_t nd,
                                   size_t *count);

/* Records an epoch (replacing a row of the same job, attempt and epoch). */
px_status_t coord_db_epoch_put(coord_t *c, const char *job_id, const coord_db_epoch_t *e);
/* The attempt's epoch in force at iteration (the newest whose
 * from_iteration is at most it; iteration < 0: the newest of all); *found 0
 * when the attempt has none. */
px_status_t coord_db_epoch_at(coord_t *c, coord_arena_t *a, const char *job_id, int attempt,
                              int iteration, coord_db_epoch_t *out, int *found);
/* The attempt's epochs, oldest first (arena a). */
px_status_t coord_db_epochs_list(coord_t *c, coord_arena_t *a, const char *job_id, int attempt,
                                 coord_db_epoch_t **out, size_t *n);

/* A member node lost since the newest epoch, and why. */
px_status_t coord_db_epoch_drop_put(coord_t *c, const char *job_id, int attempt,
                                    const char *node_id, const char *reason, int64_t now);
/* The attempt's drops not yet in an epoch, in the order they came (arena a). */
px_status_t coord_db_epoch_drops(coord_t *c, coord_arena_t *a, const char *job_id, int attempt,
                                 char ***node_ids, char ***reasons, size_t *n);
/* Forgets the job's drops (they are in an epoch now, or the attempt ended). */
px_status_t coord_db_epoch_drops_clear(coord_t *c, const char *job_id);

/* The job's placement now: node ids and indexes in node order (arena a). */
px_status_t coord_db_job_places(coord_t *c, coord_arena_t *a, const char *job_id, char ***ids,
                                int **indexes, size_t *n);
/* The node leaves the job's placement (its job_nodes row; the node no
 * longer holds the job). Its ranks' rows stay: ranks keep their numbers. */
px_status_t coord_db_job_place_remove(coord_t *c, const char *job_id, const char *node_id);
/* The placement index of the rank and the node there now ("" when that
 * node left the placement; *found 0: no such rank). */
px_status_t coord_db_rank_place(coord_t *c, const char *job_id, int rank, int *found,
                                int *node_index, char *node_id, size_t cap);

/* Of the ranks on the job's placement now: how many exited with code 0
 * (*ok) and how many there are (*placed). */
px_status_t coord_db_rank_exits_ok_placed(coord_t *c, const char *job_id, int64_t *ok,
                                          int64_t *placed);

/* A node the job lost: failures, the time of the last one, until when it
 * is not taken back (0: it may be), the last cause; *found 0: never lost. */
typedef struct {
  char *job_id;
  char *node_id;
  char *name;
  int failures;
  int64_t last_unix_ms, until_unix_ms;
  char *reason;
} coord_db_blacklist_t;
px_status_t coord_db_blacklist_get(coord_t *c, coord_arena_t *a, const char *job_id,
                                   const char *node_id, coord_db_blacklist_t *out, int *found);
px_status_t coord_db_blacklist_put(coord_t *c, const char *job_id, const coord_db_blacklist_t *b);
/* The job's nodes not taken back at `now` (until_unix_ms > now), with
 * their names, by node id (arena a). */
px_status_t coord_db_blacklist_active(coord_t *c, coord_arena_t *a, const char *job_id,
                                      int64_t now, coord_db_blacklist_t **out, size_t *n);
/* Every job's nodes not taken back at `now`, by job (arena a). */
px_status_t coord_db_blacklist_all(coord_t *c, coord_arena_t *a, int64_t now,
                                   coord_db_blacklist_t **out, size_t *n);
/* The soonest end of a cooldown after `now` over every job (0: none). */
px_status_t coord_db_blacklist_next_end(coord_t *c, int64_t now, int64_t *until);

/* ---- joining (coordinatord/join.c) ---- */

/* Running jobs whose placement has fewer nodes than their num_nodes (all:
 * every running job, for those that may grow past it), oldest first
 * (arena a): ids, num_nodes, workers per node. */
px_status_t coord_db_jobs_short(coord_t *c, coord_arena_t *a, int all, char ***ids, int **nodes,
                                int **per_node, size_t *n);
/* The job's rows of placement index idx cleared (ranks, their exit
 * records: a node that left it), for a node to take that index again. */
px_status_t coord_db_place_clear_index(coord_t *c, const char *job_id, int idx, int per_node);
/* Whether the node came back (its agent registered again: LOST -> READY)
 * at or after since_ms. */
px_status_t coord_db_node_back_since(coord_t *c, const char *node_id, int64_t since_ms,
                                     int *back);

#endif
