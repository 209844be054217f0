/* The coordinator's data layer: every query of the job, node and
 * recovery records is a named function here, coord_db_<area>_<verb>, and
 * job and node states reach SQL as bound parameters, never as literals in
 * its text. Nothing outside coordinatord/db/ writes SQL; the files above
 * call these functions and decide, the functions only read and write rows.
 *
 * Everything runs on the loop thread against c->db (coord.h). Functions that
 * write must run inside the caller's transaction (px_store_begin ...
 * coord_commit, effects.h). Lists are returned in the caller's arena; every
 * function returns PX_OK or a negative status with the error set (the
 * store's message names the file and the statement). */
#ifndef PX_COORD_DB_CORE_H
#define PX_COORD_DB_CORE_H

#include "../coord.h"

/* ---- helpers (db_core.c) ------------------------------------------------- */

/* Where coord_db_list puts a result column: appended to an arena array,
 * text copied (COORD_LIST_TEXT: char ***), integers (COORD_LIST_INT:
 * int64_t **, COORD_LIST_I32: int **); the makers check the pointer's type.
 * Written with COORD_LIST_COLS as PX_STORE_ARGS. */
typedef struct {
  int type; /* 1 int64, 3 text, 4 int */
  void *out;
} coord_db_list_col_t;
#define COORD_LIST_INT(p) ((coord_db_list_col_t){1, (1 ? (p) : (int64_t **)0)})
#define COORD_LIST_TEXT(p) ((coord_db_list_col_t){3, (1 ? (p) : (char ***)0)})
#define COORD_LIST_I32(p) ((coord_db_list_col_t){4, (1 ? (p) : (int **)0)})
#define COORD_LIST_COLS(...)                                                                 \
  (const coord_db_list_col_t[]){__VA_ARGS__},                                                \
      sizeof((const coord_db_list_col_t[]){__VA_ARGS__}) / sizeof(coord_db_list_col_t)
#define COORD_LIST_MAX_COLS 8

/* The rows of sql (args bound), each column appended to its array in
 * arena a (*n rows before, *n after: the arrays must hold *n already):
 * the "select rows into the arena" loop of the coordinator, written once.
 * PX_ERR_NOMEM when the arena is full; the statement is reset either way. */
px_status_t coord_db_list(coord_t *c, coord_arena_t *a, const char *sql,
                          const px_store_arg_t *args, size_t nargs,
                          const coord_db_list_col_t *cols, size_t ncols, size_t *n);

/* The rows of sql (args bound) as messages: for each row an object of
 * `size` bytes is allocated in arena a, its pointer appended to the arena
 * array *out (*n of them), and fill(a, st, obj, arg) sets it from the
 * row (it sets the message's INIT itself). Fails with fill's error,
 * PX_ERR_NOMEM or the store's; the statement is reset either way. */
typedef px_status_t (*coord_db_fill_fn)(coord_arena_t *a, px_store_stmt_t *st, void *obj,
                                        void *arg);
px_status_t coord_db_objects(coord_t *c, coord_arena_t *a, const char *sql,
                             const px_store_arg_t *args, size_t nargs, size_t size, void *out,
                             size_t *n, coord_db_fill_fn fill, void *arg);
/* The same for an arena array of structs of `size` bytes (*out, *n of
 * them, set from 0): each row's element is zeroed and filled; a fill that
 * returns 1 drops the row (a filter the SQL cannot express). */
px_status_t coord_db_rows(coord_t *c, coord_arena_t *a, const char *sql,
                          const px_store_arg_t *args, size_t nargs, size_t size, void *out,
                          size_t *n, coord_db_fill_fn fill, void *arg);

/* The ids (column 0, text) a one-text-parameter query yields (?1 = key). */
px_status_t coord_db_ids(coord_t *c, coord_arena_t *a, const char *sql, const char *key,
                         char ***ids, size_t *n);
/* Runs a statement of one text parameter (?1 = key) that returns no rows. */
px_status_t coord_db_run_key(coord_t *c, const char *sql, const char *key);
/* The first row's column 0 of a one-text-parameter query as text (cap
 * bytes); *found 0 when there is no row (out untouched). */
px_status_t coord_db_text(coord_t *c, const char *sql, const char *key, char *out, size_t cap,
                          int *found);
/* A state change's event row: node_events (node 1) or job_events. */
px_status_t coord_db_event(coord_t *c, int node, const char *id, int64_t now, int from, int to,
                           const char *reason);
/* --read-only: every later write fails (SQLITE_READONLY) instead of
 * changing the file. */
px_status_t coord_db_query_only(coord_t *c);

/* ---- jobs (jobs.c) --------------------------------------------------------- */

/* Inserts a job in state `state` (a new job's row id names it: its id into
 * job_id) and its spec's YAML when not "". */
px_status_t coord_db_job_insert(coord_t *c, const Prunex__V1__JobSpec *spec,
                                const char *spec_yaml, const char *owner, int state, int64_t now,
                                char *job_id, size_t cap);
/* *found 0 when unknown; else the job's owner (cap bytes) and state. */
px_status_t coord_db_job_owner(coord_t *c, const char *job_id, int *found, char *owner,
                               size_t cap, int *state);
/* *found 0 when unknown; else the job's state, its ranks (nodes x workers)
 * and its attempt. */
px_status_t coord_db_job_ranks_info(coord_t *c, const char *job_id, int *found, int *state,
                                    int *nranks, int *attempt);
/* A page of job ids, newest first: of state (0: any), of sweep ("" : any),
 * of owner (NULL: any; "" : the anonymous jobs), row ids below before (0:
 * from the newest), at most limit. */
px_status_t coord_db_jobs_page(coord_t *c, coord_arena_t *a, int state, const char *sweep_id,
                               const char *owner, int64_t before, int limit, char ***ids,
                               int64_t **rowids, size_t *n);
/* Finished jobs that ended before cutoff, oldest first, at most limit. */
px_status_t coord_db_jobs_expired(coord_t *c, coord_arena_t *a, int64_t cutoff, int limit,
                                  char ***ids, size_t *n);
/* Records (or replaces) a rank's exit. */
px_status_t coord_db_rank_exit_put(coord_t *c, const Prunex__V1__RankExit *r,
                                   const char *reason, const char *model_path, int64_t now);
/* How many of the job's ranks exited with code 0, and the first such
 * rank's note ("" : none; cap bytes). */
px_status_t coord_db_rank_exits_ok(coord_t *c, const char *job_id, int64_t *n, char *note,
                                   size_t cap);

/* ---- nodes (nodes.c) -------------------------------------------------------- */

/* A node row (the fields the daemon decides on). */
typedef struct {
  char node_id[64];
  char name[COORD_NAME_MAX];
  char job_id[64];
  int state;
} coord_db_node_t;
/* *found 0 when no node has this id (by_name 0) or name (by_name 1). */
px_status_t coord_db_node_get(coord_t *c, const char *key, int by_name, int *found,
                              coord_db_node_t *out);
/* The node's display name (its id when unknown). */
px_status_t coord_db_node_name(coord_t *c, const char *node_id, char *name, size_t cap);
/* Sets the job a node holds ("" : none). */
px_status_t coord_db_node_set_job(coord_t *c, const char *node_id, const char *job_id);
/* What a registration stores of a node. */
typedef struct {
  const char *hostname, *addresses, *agent_version, *output_roots, *data_roots;
  int64_t pid;
} coord_db_node_info_t;
/* An already known node registered again: its fields, its heartbeat now,
 * and its job kept only when `state` (the state it returns to) is busy. */
px_status_t coord_db_node_reregister(coord_t *c, const char *node_id,
                                     const coord_db_node_info_t *info, int state, int64_t now);
/* A new node `name` in `state` with its first event (reason); its id into
 * node_id. */
px_status_t coord_db_node_insert(coord_t *c, const char *name, const coord_db_node_info_t *info,
                                 int state, const char *reason, int64_t now, char *node_id,
                                 size_t cap);
/* Replaces the node's devices. */
px_status_t coord_db_node_devices_set(coord_t *c, const char *node_id, size_t n,
                                      Prunex__V1__Device *const *devs);
/* *same 1 when the stored devices are these (index, kind, name, memory). */
px_status_t coord_db_node_devices_same(coord_t *c, const char *node_id, size_t n,
                                       Prunex__V1__Device *const *devs, int *same);
/* Sets the health of the node's devices to these (matched by index). */
px_status_t coord_db_node_devices_health(coord_t *c, const char *node_id, size_t n,
                                         Prunex__V1__Device *const *devs);
/* The first n (at most P) devices of a node: index and health. */
px_status_t coord_db_node_devices_first(coord_t *c, const char *node_id, int P, int *dev,
                                        int *healthy, int *n);
/* Records a heartbeat. */
px_status_t coord_db_node_heartbeat(coord_t *c, const char *node_id, int64_t now);
/* The nodes not in state `except` whose last heartbeat is before `before`
 * (ids, states, last heartbeats; arena a). */
px_status_t coord_db_nodes_silent(coord_t *c, coord_arena_t *a, int except, int64_t before,
                                  char ***ids, int **states, int64_t **last, size_t *n);
/* The nodes in state s1 or s2 with at least P devices, ordered by prefer
 * ("\nID\n" first, "\n-ID\n" last, the rest between, each by registration):
 * ids, names and states. */
px_status_t coord_db_nodes_fitting(coord_t *c, coord_arena_t *a, int s1, int s2, int P,
                                   const char *prefer, char ***ids, char ***names, int **states,
                                   size_t *n);
/* Every node not in state `except` with its roots (data_roots when data,
 * only nodes that gave some; else output_roots), by registration. */
px_status_t coord_db_nodes_roots(coord_t *c, coord_arena_t *a, int except, int data,
                                 char ***names, char ***roots, size_t *n);
/* The Node messages of state (0: any), by registration (arena a). */
px_status_t coord_db_nodes_list(coord_t *c, coord_arena_t *a, int state,
                                Prunex__V1__Node ***out, size_t *n);
/* The jobs in state s1 or s2 placed on the node, by submission. */
px_status_t coord_db_node_jobs(coord_t *c, coord_arena_t *a, const char *node_id, int s1, int s2,
                               char ***ids, size_t *n);
/* The state of job_id when it is placed on node_id (*found 0: it is not). */
px_status_t coord_db_job_state_on_node(coord_t *c, const char *job_id, const char *node_id,
                                       int *found, int *state);
/* The node runs its ranks of job_id: its placement there has started. */
px_status_t coord_db_job_node_started(coord_t *c, const char *job_id, const char *node_id,
                                      int64_t now);

/* ---- placements and assignments --------------------------------------------- */

/* One rank of a placement. */
typedef struct {
  int rank, node_index, local_rank, device_index, is_leader;
  const char *salt, *hash;
} coord_db_rank_t;
px_status_t coord_db_rank_insert(coord_t *c, const char *job_id, const coord_db_rank_t *r);
/* Node node_index of the job is node_id, led by leader_rank. */
px_status_t coord_db_job_node_insert(coord_t *c, const char *job_id, int node_index,
                                     const char *node_id, int leader_rank);
/* Fills the assignment's place of node_id in as->job_id (sizes, node
 * index, attempt, its ranks, the leaders); *found 0 when the node holds no
 * place in the job. A rank's secret is the one an older pxcoordd stored in
 * clear, else "" and the caller derives it from (*salts)[i] (arena a). */
px_status_t coord_db_assignment_fill(coord_t *c, coord_arena_t *a, const char *node_id,
                                     Prunex__V1__Assignment *as, int *found, char ***salts);

/* ---- records (model.c) ------------------------------------------------------ */

/* The job's nodes in node order (its placement). */
px_status_t coord_db_job_node_ids(coord_t *c, coord_arena_t *a, const char *job_id, char ***ids,
                                  size_t *n);
/* The nodes that hold the job (ids and states), and them let go of it. */
px_status_t coord_db_job_nodes_held(coord_t *c, coord_arena_t *a, const char *job_id,
                                    char ***ids, int **states, size_t *n);
px_status_t coord_db_job_nodes_unlink(coord_t *c, const char *job_id);

/* ---- attempts and faults (recovery.c) ------------------------------------------ */

/* Gives every rank of node_id in job_id that has no exit record one
 * (exit_code -1) saying reason. */
px_status_t coord_db_rank_exits_for_node(coord_t *c, const char *job_id, const char *node_id,
                                         const char *reason, int64_t now);
/* The job's attempt now and how many attempts ended by preemption. */
px_status_t coord_db_job_attempts(coord_t *c, const char *job_id, int *attempt,
                                  int *preemptions);
/* Records an attempt that ended. */
px_status_t coord_db_attempt_put(coord_t *c, const char *job_id, int attempt, const char *cause,
                                 const char *node_lines, int64_t now);
/* One more of the job's attempts ended by preemption. */
px_status_t coord_db_job_preempted(coord_t *c, const char *job_id);
/* An attempt's placement gone: its ranks, nodes, exits, KV rows and logs
 * dropped; the job's next attempt number and its node preference set. */
px_status_t coord_db_job_requeue(coord_t *c, const char *job_id, int next_attempt,
                                 const char *prefer);
/* The job's state (*found 0 when unknown). */
px_status_t coord_db_job_state(coord_t *c, const char *job_id, int *found, int *state);
/* Jobs in state `state` with a node that has not started its ranks by
 * `before` (placements counted from `since` at least): job and node ids in
 * pairs (ids[2i], ids[2i+1]), by job and node order. */
px_status_t coord_db_placements_overdue(coord_t *c, coord_arena_t *a, int state, int64_t before,
                                        int64_t since, char ***pairs, size_t *n);
/* Nodes holding a job in state s1 or s2 whose last heartbeat (counted from
 * `since` at least) is before `before`. */
px_status_t coord_db_nodes_holding_silent(coord_t *c, coord_arena_t *a, int s1, int s2,
                                          int64_t before, int64_t since, char ***ids, size_t *n);

#endif
