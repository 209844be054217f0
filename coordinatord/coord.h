/* pxcoordd internals: the coordinator's state, shared by the files of the
 * daemon. The database (SQLite, WAL) is the truth for everything that must
 * survive a restart: nodes, jobs, their events, placements, rendezvous keys,
 * iteration metrics, control-policy state and decisions. What lives only in
 * memory is what dies with the connections anyway: open watch streams,
 * parked KvGet calls, timers.
 *
 * Everything here runs on the libuv loop thread (RPC handlers included), so
 * there are no locks. */
#ifndef PX_COORD_H
#define PX_COORD_H

#include <stdint.h>
#include <uv.h>

#include "prunex.pb-c.h"
#include "prunex/admm.h"
#include "prunex/px.h"
#include "prunex/rpc.h"
#include "prunex/store.h"
#include "prunex/text.h"
#include "prunex/rpc_server.h"
#include "sched.h"

/* Short names for the proto enums used everywhere in the daemon. */
enum {
  JS_UNSPECIFIED = PRUNEX__V1__JOB_STATE__JOB_STATE_UNSPECIFIED,
  JS_PENDING = PRUNEX__V1__JOB_STATE__JOB_STATE_PENDING,
  JS_SCHEDULED = PRUNEX__V1__JOB_STATE__JOB_STATE_SCHEDULED,
  JS_RUNNING = PRUNEX__V1__JOB_STATE__JOB_STATE_RUNNING,
  JS_SUCCEEDED = PRUNEX__V1__JOB_STATE__JOB_STATE_SUCCEEDED,
  JS_FAILED = PRUNEX__V1__JOB_STATE__JOB_STATE_FAILED,
  JS_CANCELLED = PRUNEX__V1__JOB_STATE__JOB_STATE_CANCELLED,
  JS_TIMEOUT = PRUNEX__V1__JOB_STATE__JOB_STATE_TIMEOUT,
};
enum {
  NS_UNSPECIFIED = PRUNEX__V1__NODE_STATE__NODE_STATE_UNSPECIFIED,
  NS_READY = PRUNEX__V1__NODE_STATE__NODE_STATE_READY,
  NS_BUSY = PRUNEX__V1__NODE_STATE__NODE_STATE_BUSY,
  NS_LOST = PRUNEX__V1__NODE_STATE__NODE_STATE_LOST,
};

static inline int coord_job_terminal(int state) {
  return state == JS_SUCCEEDED || state == JS_FAILED || state == JS_CANCELLED ||
         state == JS_TIMEOUT;
}
static inline int coord_job_active(int state) {
  return state == JS_SCHEDULED || state == JS_RUNNING;
}

/* ---- settings (flags and config file) ----------------------------------- */

#define COORD_DEFAULT_LISTEN "127.0.0.1:7070"
#define COORD_DEFAULT_HEARTBEAT_TIMEOUT_MS 15000
#define COORD_DEFAULT_PLACEMENT_TIMEOUT_MS 120000
#define COORD_DEFAULT_AGENT_GRACE_MS 3000
#define COORD_DEFAULT_BLACKLIST_WINDOW_MS 600000
#define COORD_DEFAULT_BLACKLIST_COOLDOWN_MS 300000
#define COORD_NOTIFY_ALLOW_LEN 4096 /* notify_allow (notify_policy.h) */

typedef struct {
  char listen[256];
  char db[4096];
  char advertise[256];     /* "" : derived from listen and the bound port */
  int heartbeat_timeout_ms;
  int placement_timeout_ms; /* a SCHEDULED job's nodes must start its ranks within this */
  int agent_grace_ms;       /* an agent whose assignment stream closed must reopen it within this */
  int blacklist_window_ms;  /* an elastic job losing a node twice within this ... */
  int blacklist_cooldown_ms; /* ... does not take it back this long (doubled per further loss) */
  int log_level;           /* px_log_level_t; -1: not set */
  /* the shared service (docs/security.md) */
  char tls_cert[4096];     /* PEM certificate chain; "" : plain text */
  char tls_key[4096];      /* PEM private key */
  char tokens[4096];       /* tokens file; "" : no authentication (loopback only) */
  int retention_days;      /* finished jobs older than this are removed; 0: kept */
  char http[256];          /* HTTP listener HOST:PORT; "" : none (http.c) */
  char http_www[4096];     /* dashboard files; "" : the installed ones */
  char http_js[4096];      /* JS libraries; "" : COORD_DEFAULT_HTTP_JS */
  int http_max_per_address; /* HTTP connections from one address */
  int http_max_per_proxy;   /* ... from one address of http_trusted_proxies */
  char http_trusted_proxies[1024]; /* addresses and CIDR blocks; "" : none */
  int http_metrics_ended_s; /* an ended job's /metrics series stay this long (http_metrics.c) */
  char config_path[4096];  /* --config FILE, absolute ("" : none): re-read on SIGHUP */
  coord_sched_policy_t sched; /* priorities, fair share, quotas, time limits */
  char notify_url[1100];   /* every job's state changes are POSTed here ("" : none) */
  char notify_states[260]; /* which (px_jobspec_notify_states); default "end" */
  char notify_allow[COORD_NOTIFY_ALLOW_LEN]; /* where specs' notify.url may go */
  int notify_public;       /* 1 (default): also to any public address */
  int argc;                /* the command line, applied again on SIGHUP */
  char **argv;
  int read_only;           /* --read-only: serve the queries of an existing database, change
                            * nothing (pxctl's offline reading, cli/pxctl_offline.c) */
} coord_config_t;

#define COORD_DEFAULT_HTTP_PER_ADDRESS 32
#define COORD_DEFAULT_HTTP_PER_PROXY 256
#define COORD_DEFAULT_HTTP_METRICS_ENDED_S 120

#define COORD_DEFAULT_HTTP_JS "/usr/share/javascript"

/* The settings are one table (config.c, prunex/settings.h) that the flags,
 * the config file, --help and the reload are read from; docs/operations.md
 * and deploy/man/pxcoordd.8 list the same settings.
 * --help and --version (printed: 0), else the config file (--config), then
 * the flags, into cfg, and the checks that span settings: -1 to go on, 2
 * after saying on stderr what is wrong (file:line, key, value, what was
 * expected). argv must outlive cfg (SIGHUP applies the flags again). */
int coord_config_parse(int argc, char **argv, coord_config_t *cfg);

/* SIGHUP: reads the config file again (then the same flags) and applies
 * the settings the table marks RELOAD (the scheduling policy and the
 * notifications); names in restart (comma-separated) the other settings
 * whose value changed, which need a restart and keep their running value,
 * and returns how many they are. On error (a negative status, the message
 * naming file:line) cfg is unchanged. */
int coord_config_reload(coord_config_t *cfg, char *restart, size_t cap);

/* ---- identity (auth.c) ------------------------------------------------- */

#define COORD_NAME_MAX 128            /* user and node names */
#define COORD_RANK_SECRET_PREFIX "pxr_"
#define COORD_RANK_SECRET_LEN 69      /* prefix + 64 hex digits */

enum { COORD_ROLE_ANON = 0, COORD_ROLE_ADMIN, COORD_ROLE_USER, COORD_ROLE_NODE, COORD_ROLE_RANK };

/* Who made a call. ANON: the coordinator has no tokens (every call is let
 * through, as an admin). RANK: job_id, rank and node_id of the secret. */
typedef struct {
  int role;
  char name[COORD_NAME_MAX + 32];  /* user or node name; "rank R of JOB" */
  char job_id[64];
  int rank;
  char node_id[64];
  int from_file;                   /* 1: a token of the tokens file, digest below */
  unsigned char digest[32];        /* its SHA-256: streams are re-checked on SIGHUP */
} coord_identity_t;

typedef struct coord_tokens coord_tokens_t;

/* Reads a tokens file (`TOKEN NAME ROLE` lines, '#' comments). Refuses a
 * file whose mode is not 0600 or 0400, malformed lines (naming file:line),
 * duplicate tokens, and an empty file. Caller owns *out. */
px_status_t coord_tokens_load(const char *path, coord_tokens_t **out);
void coord_tokens_free(coord_tokens_t *t);
size_t coord_tokens_count(const coord_tokens_t *t);
/* Looks a token of the file up (not rank secrets): 1 and its name and role
 * when known. Constant time in the token's bytes (only SHA-256 digests are
 * held, each compared). Reads t only: safe from any thread that holds t. */
int coord_tokens_lookup(const coord_tokens_t *t, const char *token, char *name, size_t cap,
                        int *role);

/* 1 when the two strings are equal; the time taken does not depend on
 * where they differ (both are hashed, then compared with CRYPTO_memcmp). */
int coord_secret_equal(const char *a, const char *b);

/* 1 when s is a valid user or node name (1..127 of A-Z a-z 0-9 . _ - @). */
int coord_name_ok(const char *s);

/* UTF-8: px_utf8_valid checks what a request gives; px_utf8_clean keeps
 * text from processes (e.g. a log tail in a rank's exit reason) as valid
 * UTF-8 rather than refusing it (prunex/text.h). */

/* ---- per-request arena -------------------------------------------------- */

/* Messages built for a reply (and specs unpacked from the database) are
 * allocated here and freed together once the reply is packed. */
typedef struct coord_arena_chunk coord_arena_chunk_t;
typedef struct {
  coord_arena_chunk_t *head;
  ProtobufCAllocator pb;   /* protobuf-c allocator drawing from the arena */
} coord_arena_t;

void coord_arena_init(coord_arena_t *a);
void coord_arena_free(coord_arena_t *a);
/* Zeroed memory; NULL on allocation failure (last error set). */
void *coord_alloc(coord_arena_t *a, size_t size);
char *coord_strdup(coord_arena_t *a, const char *s);
/* Grows the arena array *arr (*n used of *cap elements of elem bytes) by one
 * and returns the new, zeroed element; NULL on allocation failure. */
void *coord_push(coord_arena_t *a, void **arr, size_t *n, size_t *cap, size_t elem);

/* ---- the coordinator ----------------------------------------------------- */

typedef struct coord_watch coord_watch_t;   /* an open WatchAssignments / WatchJob */
typedef struct coord_kv_wait coord_kv_wait_t; /* a parked KvGet */
typedef struct coord_gone coord_gone_t;       /* an agent that went away (gone.c) */
typedef struct coord_http coord_http_t;       /* the HTTP listener (http.h) */
typedef struct coord_notifier coord_notifier_t; /* the notifications' sender (notify.c) */
typedef struct coord_queue coord_queue_t;     /* the pending jobs in memory (sched_queue.c) */
typedef struct coord_rollcall coord_rollcall_t; /* an elastic job's roll call (rollcall.c) */

typedef struct {
  uv_loop_t *loop;
  coord_config_t cfg;
  px_store_t *db;
  px_rpc_server_t *srv;
  char advertise[300];     /* HOST:PORT given to workers in assignments */
  uv_timer_t sweep;        /* heartbeat deadline checks */
  uv_signal_t sigterm, sigint;
  coord_watch_t *node_watches;
  coord_watch_t *job_watches;
  coord_kv_wait_t *kv_waits;
  coord_gone_t *gone;      /* nodes whose agent closed its assignment stream (gone.c) */
  int64_t started_ms;      /* when this process started: heartbeat ages count from here at most */
  coord_http_t *http;      /* NULL without --http */
  int stopping;
  int exit_code;
  uv_signal_t sighup;      /* re-reads the tokens file */
  uv_timer_t retention;    /* removes old finished jobs (retention_days) */
  coord_tokens_t *tokens;  /* NULL: no authentication */
  coord_identity_t who;    /* the caller of the handler now running (coord_authorize) */
  unsigned char secret_key[32]; /* rank secrets are HMACs under it (DB.key) */
  coord_notifier_t *notifier;   /* job notifications (notify.c) */
  int own_ports[2];             /* the gRPC and HTTP listeners' (0: none), never notified */
  coord_queue_t *queue;         /* the pending jobs, in step with the database */
  int64_t blacklist_wake_ms;    /* a node's cooldown ends then: schedule (0: none known) */
  coord_rollcall_t *rollcalls;  /* the survivors' roll calls open now (rollcall.c) */
} coord_t;

/* Re-reads the tokens file (when one is configured); on failure the old
 * tokens stay and the error is returned. */
px_status_t coord_auth_reload(coord_t *c);
/* After a reload: ends (UNAUTHENTICATED) every open WatchJob and
 * WatchAssignments stream whose token is no longer in the file (or now
 * names another user or role); returns how many. */
size_t coord_auth_revoke_streams(coord_t *c);

/* Turns an `authorization` value ("Bearer TOKEN"; NULL or "" when absent)
 * into an identity. PX_RPC_OK, or UNAUTHENTICATED (INTERNAL on a database
 * error) with the reason in err. Shared by every listener. */
px_rpc_code_t coord_auth_identify(coord_t *c, const char *authorization, coord_identity_t *who,
                                  char *err, size_t cap);

/* The gRPC server's authorize hook (px_rpc_authorize_fn): identifies the
 * caller into c->who and applies the per-method policy. */
int coord_authorize(px_rpc_srv_call_t *call, const ProtobufCMessage *req, void *data);

/* 1 when who may cancel or delete a job owned by owner (owner or admin). */
int coord_auth_may_manage(const coord_identity_t *who, const char *owner);

/* Rank secrets at rest: a rank's secret is "pxr_" + the hex of
 * HMAC-SHA256(key, salt), where the key (COORD_SECRET_KEY_BYTES random
 * bytes, hex) is the file DB.key beside the database (0600, made at first
 * start) and the salt is random per rank. job_ranks keeps the salt and the
 * secret's SHA-256 only: a copy of the database opens nothing, and the
 * coordinator can still send an agent its ranks' secrets again after a
 * restart. */
#define COORD_SECRET_KEY_BYTES 32
/* Reads (or, when missing, creates) DB.key into c->secret_key; refuses a key
 * file others may read, or one that is not a key. */
px_status_t coord_secret_key_load(coord_t *c);
/* A new rank: a random salt (32 hex digits) and its secret's SHA-256 (hex). */
px_status_t coord_rank_secret_new(const coord_t *c, char salt[33], char hash[65]);
/* The secret of a rank from its salt, into out (cap >= 70). */
px_status_t coord_rank_secret_derive(const coord_t *c, const char *salt, char *out, size_t cap);
/* The SHA-256 of s, as 64 hex digits. */
void coord_sha256_hex(const char *s, char out[65]);
/* At start: secrets an older pxcoordd stored in clear get their hash; the
 * clear text is wiped except for jobs still running (their agents may need
 * it sent again). */
px_status_t coord_rank_secrets_upgrade(coord_t *c);

/* Removes finished jobs older than retention_days, with all their rows. */
void coord_retention_run(coord_t *c);
/* Removes one job's rows (every table). In a transaction. */
px_status_t coord_job_delete_rows(coord_t *c, const char *job_id);

int64_t coord_now_ms(void);

/* Schema of the coordinator database (db/schema.c). */
extern const px_store_migration_t coord_migrations[];
extern const int coord_nmigrations;
/* How the coordinator's database is opened: its schema and migrations,
 * busy_timeout_ms; the loop's connection (read_only 0) also checks the
 * pages (quick_check) and creates a missing file when create; a reader
 * (read_only 1, the HTTP thread) neither. */
px_store_options_t coord_db_options(int read_only, int create, int busy_timeout_ms);

/* The RPC method table (service.c). */
extern const px_rpc_method_t coord_methods[];
extern const int coord_nmethods;

/* Answers a call whose handler hit a database (or other internal) error:
 * logs px_last_error() and ends the call INTERNAL (RESOURCE_EXHAUSTED when
 * the database's disk is full), rolling back any open transaction. */
void coord_fail_internal(coord_t *c, px_rpc_srv_call_t *call);

/* ---- records (db/model.c; coord_job_release_nodes: attempt.c) ---------- */

/* Records a job state change: the row in jobs, the event, the reason. Must
 * run inside a transaction; watchers are told by coord_job_changed after
 * the commit. */
px_status_t coord_job_set_state(coord_t *c, const char *job_id, int from, int to,
                                const char *reason);
px_status_t coord_node_set_state(coord_t *c, const char *node_id, int from, int to,
                                 const char *reason);

/* Looks a job up: *found 0 when unknown; state and spec (unpacked into the
 * arena, NULL for unknown jobs) are optional outputs. */
px_status_t coord_job_lookup(coord_t *c, coord_arena_t *a, const char *job_id, int *found,
                             int *state, Prunex__V1__JobSpec **spec);

/* Builds the Job message (events, nodes, summary) in the arena. *out is
 * NULL when the job is unknown. */
px_status_t coord_job_load(coord_t *c, coord_arena_t *a, const char *job_id,
                           Prunex__V1__Job **out);
/* The same; spec_yaml is read only when with_yaml (else ""). */
px_status_t coord_job_load_ex(coord_t *c, coord_arena_t *a, const char *job_id, int with_yaml,
                              Prunex__V1__Job **out);
px_status_t coord_node_load_row(coord_t *c, coord_arena_t *a, px_store_stmt_t *st,
                                Prunex__V1__Node **out);
/* Column list that coord_node_load_row expects, for SELECT ... FROM nodes. */
#define COORD_NODE_COLUMNS                                                           \
  "node_id, name, hostname, state, job_id, addresses, last_heartbeat_unix_ms, "      \
  "registered_unix_ms"

/* Releases the nodes held by a job (back to READY unless LOST). In a
 * transaction. */
px_status_t coord_job_release_nodes(coord_t *c, const char *job_id, const char *reason);

/* ---- nodes (recovery.c) and assignments (assign.c, watch.c) ------------ */

px_status_t coord_nodes_start(coord_t *c);   /* marks nodes LOST, starts the sweep timer */
void coord_nodes_stop(coord_t *c);
/* Sends the job's assignment with this action to each of its nodes'
 * assignment streams (after the commit that made it so). */
void coord_push_assignments(coord_t *c, const char *job_id, int action);
/* The job's START to these nodes only, marked joining in membership epoch
 * join_epoch (their agents start the workers with --join-epoch). */
void coord_push_join(coord_t *c, const char *job_id, char **nodes, size_t n, int join_epoch);
/* Sends one assignment to every open stream of node_id. */
void coord_send_to_node(coord_t *c, const char *node_id, const Prunex__V1__Assignment *as);

/* ---- faults: restart or fail (attempt.c; effects: coord_fx_fault) ------- */

/* What coord_job_fault did, for coord_fx_fault (effects.h). */
typedef struct {
  int restarted;   /* 1: the job is PENDING again for its next attempt; 0: FAILED */
  int attempt;     /* the attempt that ended */
  char **nodes;    /* its nodes (in the caller's arena) */
  size_t nnodes;
} coord_fault_t;

/* A fault (a failed or hung rank, a lost node, a placement timeout) ends
 * the active job's current attempt with cause as its first cause. While
 * restarts remain (attempts used < 1 + spec.recovery.max_restarts) the
 * nodes are released, the placement,
 * rank secrets, exit records and KV rows dropped, and the job PENDING again
 * with jobs.attempt + 1; the next placement prefers the attempt's nodes
 * except avoid_node (may be NULL). Else the job FAILED with the cause and
 * its nodes released. With max_restarts > 0 the attempt is recorded in
 * job_attempts either way. In a transaction; f filled (arena a). */
px_status_t coord_job_fault(coord_t *c, coord_arena_t *a, const char *job_id, int state,
                            const char *cause, const char *avoid_node, coord_fault_t *f);
/* Preemption: ends the active job's attempt because `by` (e.g.
 * "job-000007 (priority 500)") takes its nodes. Recorded in job_attempts
 * and jobs.preemptions, it uses none of the job's restarts; otherwise as a
 * restart: nodes released, placement and rank secrets dropped, iteration
 * rows and stored decisions kept (the next attempt resumes from the newest
 * checkpoint its ranks hold, re-reports the iterations after it and gets
 * the very decisions back, less the stop the preemption put in the last
 * one), and the job PENDING for attempt + 1 preferring the same nodes
 * (where its checkpoints are). In a transaction; f filled
 * (f->restarted 1) for coord_fx_fault. */
px_status_t coord_job_preempt(coord_t *c, coord_arena_t *a, const char *job_id, int state,
                              const char *by, coord_fault_t *f);
/* The CANCEL of a restarted or preempted attempt to its nodes, naming it. */
void coord_attempt_cancel(coord_t *c, const char *job_id, const coord_fault_t *f);

/* An open WatchAssignments (id: node) or WatchJob (id: job) stream. */
struct coord_watch {
  coord_watch_t *next;
  coord_t *c;
  px_rpc_srv_call_t *call;
  int is_job;
  char id[128];
  coord_identity_t who;  /* who opened it (re-checked when the tokens change) */
};
/* Opens a watch on the call (its cancel callback unlinks and frees it);
 * NULL on allocation failure. */
coord_watch_t *coord_watch_open(coord_t *c, px_rpc_srv_call_t *call, const char *id, int is_job);
/* Ends a watch with status OK (a job reached a terminal state). */
void coord_watch_close(coord_t *c, coord_watch_t *w);
/* Ends a watch with code and message (frees w). An assignment stream ended
 * this way counts as its agent gone (coord_agent_gone). */
void coord_watch_end(coord_t *c, coord_watch_t *w, px_rpc_code_t code, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));

/* ---- placement (place.c), scheduling (effects.c), changes (watch.c) ---- */

/* Places the job on the given M nodes of P devices (SCHEDULED; the nodes
 * BUSY). In a transaction. */
px_status_t coord_place(coord_t *c, const char *job_id, int P, char **nodes, char **names,
                        int M);
/* The READY nodes of at least P devices, up to M (prefer's first, see
 * jobs.c), and how many such nodes are alive (arena a). */
px_status_t coord_fitting_nodes(coord_t *c, coord_arena_t *a, int P, int M, const char *prefer,
                                int *alive, char ***nodes, char ***names, size_t *ready);
/* Places pending jobs, in submission order, while the head of the queue
 * fits on the ready nodes. Errors are logged. */
void coord_schedule(coord_t *c);
/* Queues the job's notifications of a new state (notify.c) and tells its
 * WatchJob streams (latest: the report that caused it, or
 * NULL); ends them when the job is terminal. */
void coord_job_changed(coord_t *c, const char *job_id, const Prunex__V1__IterationReport *latest);

/* ---- faults (gone.c, attempt.c, recovery.c) ------------------------------ */

/* The node's agent closed its assignment stream (called from the stream's
 * cancel callback) / opened one again. A node whose agent stays away past
 * agent_grace_ms is LOST, and so are its jobs. */
void coord_agent_gone(coord_t *c, const char *node_id);
void coord_agent_back(coord_t *c, const char *node_id);
/* 1 when the node's agent has closed its stream and not come back. */
int coord_agent_is_gone(const coord_t *c, const char *node_id);
/* Marks the node LOST and fails the job it holds, naming the node: the
 * node's ranks without an exit record get one ("node lost"), the other
 * nodes are released and told to stop. Commits its own transaction and
 * tells watchers; then runs the scheduler. */
px_status_t coord_node_lost(coord_t *c, const char *node_id, const char *why);
/* Called by the heartbeat sweep: agents gone past their grace, nodes of
 * active jobs silent past the heartbeat timeout, SCHEDULED jobs whose
 * nodes did not start their ranks within placement_timeout_ms. */
void coord_recovery_sweep(coord_t *c);
/* Inside a transaction that is about to fail job_id for a rank's report
 * sent by the agent of node `reporter`: when another of its nodes' agents
 * is gone, that node is the first cause (a report from the gone node's own
 * agent speaks for itself).
 * Writes the reason naming it into reason, records exits for its ranks and
 * marks it LOST; returns 1. Else 0 (nothing written). <0 on a database
 * error. */
int coord_blame_gone_node(coord_t *c, const char *job_id, const char *reporter, char *reason,
                          size_t cap);

/* ---- scheduling policy and accounting (sched_view.c; the policy: sched.h;
 * the queries: db/sched.h) ---------------------------------------------- */

/* The snapshot the policy decided over, with what the coordinator needs to
 * act on it: per pending job (submission order) its id, preferred nodes and
 * row id. */
typedef struct {
  coord_sched_snapshot_t s;
  char **job_ids;
  char **prefer;
  char **reasons;   /* the stored reason: rewritten only when it changes */
  int64_t *rowids;
  /* why a job is not a candidate (held, waiting for its
   * dependencies; NULL: it is one), and 1 where a dependency can never be
   * met (the scheduler's pass cancels the job with blocked[i] as reason) */
  char **blocked;
  int *never;
} coord_sched_view_t;

/* Builds the snapshot from the database (arena a) and runs
 * coord_sched_decide on it with the configured policy. */
px_status_t coord_sched_view(coord_t *c, coord_arena_t *a, coord_sched_view_t *v);
/* The pending job of that row id in v, or NULL. O(log n). */
const coord_sched_job_t *coord_sched_view_find(const coord_sched_view_t *v, int64_t rowid);
/* Sets a PENDING job's reason (why it waits) when it changed; no event. */
px_status_t coord_sched_set_reason(coord_t *c, const char *job_id, const char *reason);
/* Called by coord_job_set_state: an attempt that ends charges its
 * node-seconds to the owner's usage and the accounting row, which also
 * follows the state (start, attempts, end, exit reason). */
px_status_t coord_sched_state_changed(coord_t *c, const char *job_id, int from, int to,
                                      const char *reason, int64_t now);

/* commit.c. With preemption on: when the first job in line waits for nodes
 * that running jobs of a lower job priority that checkpoint hold, the
 * fewest of them needed are asked to stop at a checkpoint (preempt.c's
 * header says how it goes on); a preemption under way is carried on
 * instead of a new one started (ask 0, from the heartbeat sweep: only
 * that). Each step committed through coord_commit; errors are logged. */
void coord_preempt_pass(coord_t *c, int ask);
/* From ReportRankExit (in its transaction), when all of the job's ranks
 * have exited with code 0: *held 1 when they stopped for a preemption (the
 * job stays on its nodes until the preemption's victims have all stopped,
 * then it is queued again), else 0 (the job ends as usual). */
px_status_t coord_preempt_hold(coord_t *c, coord_arena_t *a, const char *job_id, int *held);

/* ---- the pending jobs in memory (sched_queue.c) ---------------------------- */

/* What the scheduler's snapshot needs of one PENDING job. */
typedef struct {
  int64_t rowid;
  char job_id[32];
  char owner[COORD_NAME_MAX];
  int nodes, per_node, priority;
  int64_t submit_ms, time_limit_ms;
  char *prefer;   /* jobs.prefer_nodes */
  char *reason;   /* the stored reason */
  char held_by[COORD_NAME_MAX + 32]; /* who holds it ("" : not held) */
  int held_admin;  /* an admin holds it */
  char *depends;  /* jobs.depends: "JOB:ok" / "JOB:any" lines ("" : none) */
} coord_queue_entry_t;
/* Makes c->queue (stale: read at once) and installs the database's
 * rollback hook that marks it stale; coord_queue_sync calls it the first
 * time (until then the queue has nothing to keep in step). */
px_status_t coord_queue_create(coord_t *c);
void coord_queue_destroy(coord_t *c);
/* The pending jobs in submission order (read from the database first when
 * stale); valid until the next change of a job's state. */
px_status_t coord_queue_sync(coord_t *c, const coord_queue_entry_t **out, size_t *n);
/* From coord_sched_state_changed (in the transaction): the job now in state
 * `to` enters (its row read), stays or leaves the queue. */
px_status_t coord_queue_job_changed(coord_t *c, const char *job_id, int to);
/* From coord_sched_set_reason: a pending job's stored reason. */
void coord_queue_set_reason(coord_t *c, const char *job_id, const char *reason);

/* ---- notifications (notify.c) ------------------------------------------ */

/* Starts the sender threads (libcurl). Caller owns *out. */
px_status_t coord_notifier_start(coord_notifier_t **out);
/* Stops and joins them (POSTs in flight are aborted); queued notifications
 * are dropped (logged). */
void coord_notifier_stop(coord_notifier_t *n);
/* After a job's state change (committed): queues the POSTs its spec's
 * notify and the coordinator's notify_url ask for, once per state. Never
 * blocks on the network. */
void coord_notify_job(coord_t *c, const char *job_id);

/* "time_limit" or "preempted" for a COORD_STOP_* kind that is not NONE. */
const char *coord_stop_reason_name(int kind);
/* The time-limit sweep (jobs.c, from the heartbeat sweep): asks overdue
 * jobs to stop (rank 0's next report is answered stop, "time_limit": the
 * ranks write their final checkpoint and exit, and the job ends TIMEOUT);
 * one that has not ended COORD_TIMEOUT_GRACE_MS later is ended TIMEOUT and
 * its ranks cancelled. */
#define COORD_TIMEOUT_GRACE_MS 30000
void coord_time_limit_sweep(coord_t *c);


/* ---- submissions (submit.c) and sweeps (sweep.c, db/sweep.c) ---------- */

/* Inserts a PENDING job with its scheduling fields and accounting row (in
 * the caller's transaction); its id into job_id. */
px_status_t coord_job_submit(coord_t *c, const Prunex__V1__JobSpec *spec, const char *spec_yaml,
                             int priority, int64_t time_limit_ms, char *job_id, size_t cap);
/* A submission's `after` as jobs.depends lines into *out (arena
 * a; "" : none): 1, or 0 with the call answered (INVALID_ARGUMENT naming
 * the dependency, INTERNAL). */
int coord_submit_after(coord_t *c, px_rpc_srv_call_t *call, coord_arena_t *a,
                       const Prunex__V1__SubmitJobRequest *r, char **out);
/* Sets the new job's dependencies (in the submission's transaction). */
px_status_t coord_job_set_depends(coord_t *c, const char *job_id, const char *depends);
/* The priority and time-limit rules of a submission; 1, or 0 with the call
 * answered. */
/* Only admins (or an unauthenticated coordinator) raise a job's priority
 * above the default: 1, or 0 with the call answered PERMISSION_DENIED
 * naming field (submit and UpdateJob). */
int coord_priority_allowed(coord_t *c, px_rpc_srv_call_t *call, const char *field,
                           int priority);
int coord_submit_policy(coord_t *c, px_rpc_srv_call_t *call, const Prunex__V1__JobSpec *spec,
                        int *priority, int64_t *time_limit_ms);
/* The caller's quota of unfinished jobs for nnew more; 1, or 0 with the
 * call answered (RESOURCE_EXHAUSTED, INTERNAL). */
int coord_submit_quota(coord_t *c, px_rpc_srv_call_t *call, int64_t nnew);

#define COORD_SWEEP_PREFIX "sweep-"
/* 1 when id names a sweep rather than a job. */
int coord_sweep_id_like(const char *id);
/* SubmitJob of a spec with a sweep: one job per combination
 * (px_jobspec_sweep_point), all in one transaction under a new sweep id,
 * or none (INVALID_ARGUMENT naming the combination, the quota's
 * RESOURCE_EXHAUSTED for the whole sweep). Answers the call. */
void coord_sweep_submit(coord_t *c, px_rpc_srv_call_t *call, const Prunex__V1__SubmitJobRequest *r);
/* CancelJob of a sweep id: every unfinished job of the sweep, in one
 * transaction (owner or admin). Answers the call. */
void coord_sweep_cancel(coord_t *c, px_rpc_srv_call_t *call, const Prunex__V1__CancelJobRequest *r);

/* ---- kv (kv.c) ---------------------------------------------------------- */

void coord_kv_cancel_all(coord_t *c);

/* ---- handlers ----------------------------------------------------------- */

void coord_rpc_register_node(px_rpc_srv_call_t *call, const ProtobufCMessage *req, void *data);
void coord_rpc_heartbeat(px_rpc_srv_call_t *call, const ProtobufCMessage *req, void *data);
void coord_rpc_watch_assignments(px_rpc_srv_call_t *call, const ProtobufCMessage *req,
                                 void *data);
void coord_rpc_kv_put(px_rpc_srv_call_t *call, const ProtobufCMessage *req, void *data);
void coord_rpc_kv_get(px_rpc_srv_call_t *call, const ProtobufCMessage *req, void *data);
void coord_rpc_report_iteration(px_rpc_srv_call_t *call, const ProtobufCMessage *req,
                                void *data);
void coord_rpc_report_rank_exit(px_rpc_srv_call_t *call, const ProtobufCMessage *req,
                                void *data);
void coord_rpc_submit_job(px_rpc_srv_call_t *call, const ProtobufCMessage *req, void *data);
void coord_rpc_get_job(px_rpc_srv_call_t *call, const ProtobufCMessage *req, void *data);
void coord_rpc_list_jobs(px_rpc_srv_call_t *call, const ProtobufCMessage *req, void *data);
void coord_rpc_cancel_job(px_rpc_srv_call_t *call, const ProtobufCMessage *req, void *data);
void coord_rpc_list_nodes(px_rpc_srv_call_t *call, const ProtobufCMessage *req, void *data);
void coord_rpc_get_iterations(px_rpc_srv_call_t *call, const ProtobufCMessage *req, void *data);
void coord_rpc_watch_job(px_rpc_srv_call_t *call, const ProtobufCMessage *req, void *data);
void coord_rpc_delete_job(px_rpc_srv_call_t *call, const ProtobufCMessage *req, void *data);
/* Rank logs (logs.c): agents append, pxctl reads; a bounded tail per rank. */
void coord_rpc_append_rank_log(px_rpc_srv_call_t *call, const ProtobufCMessage *req, void *data);
void coord_rpc_get_rank_log(px_rpc_srv_call_t *call, const ProtobufCMessage *req, void *data);
void coord_rpc_get_accounting(px_rpc_srv_call_t *call, const ProtobufCMessage *req, void *data);
/* Queue controls (queue_ctl.c). */
void coord_rpc_hold_job(px_rpc_srv_call_t *call, const ProtobufCMessage *req, void *data);
void coord_rpc_release_job(px_rpc_srv_call_t *call, const ProtobufCMessage *req, void *data);
void coord_rpc_update_job(px_rpc_srv_call_t *call, const ProtobufCMessage *req, void *data);

/* The scheduler's queries, which jobs.c and iterations.c call too. */
#include "db/sched.h"

#endif
