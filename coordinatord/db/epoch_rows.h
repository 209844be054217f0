/* A job's membership changes as rows of its metrics: each epoch of each
 * attempt (job_epochs, db/membership.h) with its members by name, the
 * nodes that came in and went out against the attempt's epoch before, and
 * the kind of change its reason names. Read by GetIterations and GetJob
 * (pxctl metrics, pxctl status), the JSON API, /metrics and the dashboard.
 * Takes a px_store_t, so that it runs on the loop thread (c->db) and on the
 * HTTP thread (its read-only store) alike; rows in the caller's arena. */
#ifndef PX_COORD_DB_EPOCH_ROWS_H
#define PX_COORD_DB_EPOCH_ROWS_H

#include "../coord.h"

/* The kinds of change, as the `reason` label of
 * prunex_job_membership_changes_total and the rows' "kind" spell them: a
 * bounded set (the label's cardinality). COORD_EPOCH_PLACED is an
 * attempt's epoch 1 (its placement), not a change. */
typedef enum {
  COORD_EPOCH_PLACED,
  COORD_EPOCH_LOST,
  COORD_EPOCH_PREEMPTED,
  COORD_EPOCH_JOINED,
  COORD_EPOCH_OTHER,
  COORD_EPOCH_NKINDS
} coord_epoch_kind_t;

/* "placed", "lost", "preempted", "joined", "other". */
const char *coord_epoch_kind_name(coord_epoch_kind_t k);
/* The kind of epoch `epoch` that began for `reason`: the first of " lost",
 * " preempted by ", " join" / " rejoin" the reason names (several drops
 * at one boundary: the first one's). */
coord_epoch_kind_t coord_epoch_kind(int epoch, const char *reason);

typedef struct {
  int attempt, epoch, from_iteration;
  int64_t time_unix_ms;
  char *reason;
  coord_epoch_kind_t kind;
  char **node_ids, **names; /* the members, node order (names: the id when unknown) */
  size_t n;
  char **in, **out;         /* names: members now and not in the epoch before, and the
                               reverse (epoch 1: every member in, none out) */
  size_t n_in, n_out;
} coord_epoch_row_t;

/* The job's epochs, by attempt then epoch (attempt > 0: that attempt's
 * only), in arena a; with names 0 the names, in and out are left empty
 * (the ids and kinds only: a cheaper read for /metrics). */
px_status_t coord_db_epoch_rows(px_store_t *db, coord_arena_t *a, const char *job_id, int attempt,
                                int names, coord_epoch_row_t **out, size_t *n);

/* The rows as MembershipEpoch messages (arena a; kind's name, in and out
 * filled). */
px_status_t coord_db_epoch_messages(coord_arena_t *a, const coord_epoch_row_t *rows, size_t n,
                                    Prunex__V1__MembershipEpoch ***out);

/* Fills the change's fields (names, in, out, kind) of the attempt's
 * epochs m[0..n) as coord_db_job_membership_fill made them. */
px_status_t coord_db_epoch_enrich(px_store_t *db, coord_arena_t *a, const char *job_id,
                                  int attempt, Prunex__V1__MembershipEpoch **m, size_t n);

#endif
