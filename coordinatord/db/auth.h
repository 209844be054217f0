/* The authorisation's queries (auth.c; the coordinator's data layer): rank
 * secrets (their SHA-256 in job_ranks.secret_hash), and what a call's
 * identity is checked against (a job's state and attempt, a node's name,
 * the node that holds a rank). */
#ifndef PX_COORD_DB_AUTH_H
#define PX_COORD_DB_AUTH_H

#include "../coord.h"

/* A rank secret an older pxcoordd stored in clear. */
typedef struct {
  char *job_id;
  int64_t rank;
  char *secret;
  int state; /* its job's */
} coord_db_auth_clear_t;
/* Every rank secret stored in clear (arena a). */
px_status_t coord_db_auth_clear_secrets(coord_t *c, coord_arena_t *a, coord_db_auth_clear_t **out,
                                        size_t *n);
/* Stores the rank's secret hash; the clear secret is kept only when
 * keep_clear (an active job's ranks still present it). */
px_status_t coord_db_auth_secret_hash_set(coord_t *c, const char *job_id, int64_t rank,
                                          const char *hash, int keep_clear);
/* SQLite's secure_delete (freed bytes overwritten in the file) on or off. */
px_status_t coord_db_auth_secure_delete(coord_t *c, int on);
/* The rank whose secret hashes to hash, with the node that holds it;
 * *found 0 when none. */
px_status_t coord_db_auth_rank_by_secret(coord_t *c, const char *hash, int *found, char *job_id,
                                         size_t job_cap, int *rank, char *node_id,
                                         size_t node_cap);
/* The job's state and attempt; *found 0 when there is no such job. */
px_status_t coord_db_auth_job(coord_t *c, const char *job_id, int *found, int *state,
                              int *attempt);
/* The name of a node by its id; "" when unknown. */
px_status_t coord_db_auth_node_name(coord_t *c, const char *node_id, char *name, size_t cap);
/* *holds 1 when the node named name holds rank of job_id. */
px_status_t coord_db_auth_node_holds(coord_t *c, const char *name, const char *job_id, int rank,
                                     int *holds);

#endif
