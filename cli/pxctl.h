/* pxctl internals: what the files of the command-line client share. The
 * program is split by concern: pxctl.c (argument parsing, dispatch, help),
 * pxctl_query.c (the commands that ask the coordinator: submit, status,
 * list, cancel, nodes, metrics, drift, watch), pxctl_logs.c (per-rank log
 * files), pxctl_run.c (the embedded mode: private coordinator and agents),
 * pxctl_json.c (the JSON emitter) and pxctl_fmt.c (tables and human
 * formatting).
 *
 * Exit codes are the same for every command: 0 success, 1 a runtime
 * failure (the coordinator, a job that did not succeed, a missing file),
 * 2 bad usage or a bad job spec. */
#ifndef PXCTL_H
#define PXCTL_H

#include <stdint.h>
#include <stdio.h>

#include "prunex.pb-c.h"
#include "prunex/export.h" /* px_export_report_t (a type: the work is pxtrain's) */
#include "prunex/px.h"
#include "prunex/rpc.h"

enum { PXCTL_EXIT_OK = 0, PXCTL_EXIT_FAIL = 1, PXCTL_EXIT_USAGE = 2 };

#define PXCTL_DEFAULT_COORDINATOR "127.0.0.1:7070"
#define PXCTL_DEFAULT_WORK_DIR "/var/lib/prunex"

/* ---- command line ------------------------------------------------------ */

/* Everything the options of any command can set. Strings point into argv
 * or the environment (never freed). */
typedef struct {
  const char *cmd;            /* the command name ("status") */
  const char *coordinator;    /* HOST:PORT */
  const char *work_dir;       /* logs/run: --work-dir (NULL: not given) */
  const char *output;         /* run: --output */
  int json;
  int keep;                   /* run: --keep */
  int layers;                 /* metrics: --layers */
  int all_ranks;              /* metrics/drift: --all-ranks */
  int follow;                 /* logs: --follow */
  int rank;                   /* logs: --rank (-1: all) */
  int state;                  /* list/nodes: --state (0: any) */
  int limit;                  /* list/metrics: --limit (0: all) */
  int from;                   /* metrics: --from */
  const char *reason;         /* cancel: --reason */
  int nodes;                  /* submit: --nodes (0: the spec's) */
  int workers_per_node;       /* submit: --workers-per-node (0: the spec's) */
  const char *out;            /* plot: --out */
  const char *db;             /* plot: --db (a coordinator database file) */
  const char *http;           /* run: --http HOST:PORT for the private pxcoordd */
  int csv;                    /* metrics: --csv */
  const char *pos[8];         /* positional arguments */
  int onnx;                   /* export: --onnx */
  const char *user;           /* acct: --user */
  int64_t since_unix_ms;      /* acct: --since (0: all) */
  const char *sweep;          /* list: --sweep (NULL: every job) */
  int npos;
} pxctl_opts_t;

/* Prints "pxctl CMD: <message>" and the hint to run --help on stderr;
 * returns PXCTL_EXIT_USAGE. */
int pxctl_usage_error(const pxctl_opts_t *o, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));

/* Prints "pxctl: <message>" on stderr; returns PXCTL_EXIT_FAIL. */
int pxctl_fail(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

/* The message of the last pxctl_fail call ("" before any), for summaries
 * that must carry the reason (pxctl run --json). Owned by pxctl.c. */
const char *pxctl_last_failure(void);

/* ---- commands ------------------------------------------------------------ */

int pxctl_cmd_submit(pxctl_opts_t *o);
int pxctl_cmd_status(pxctl_opts_t *o);
int pxctl_cmd_list(pxctl_opts_t *o);
int pxctl_cmd_cancel(pxctl_opts_t *o);
int pxctl_cmd_delete(pxctl_opts_t *o);
int pxctl_cmd_nodes(pxctl_opts_t *o);
int pxctl_cmd_metrics(pxctl_opts_t *o);
int pxctl_cmd_drift(pxctl_opts_t *o);
int pxctl_cmd_watch(pxctl_opts_t *o);
int pxctl_cmd_logs(pxctl_opts_t *o);
int pxctl_cmd_run(pxctl_opts_t *o);
int pxctl_cmd_plot(pxctl_opts_t *o);
int pxctl_cmd_export(pxctl_opts_t *o);
int pxctl_cmd_acct(pxctl_opts_t *o);

/* ---- sweeps (pxctl_sweep.c) ---------------------------------------------- */

/* 1 when ref is a sweep id ("sweep-..."). */
int pxctl_is_sweep_id(const char *ref);
/* `status SWEEP`: the sweep's summary and its jobs. Exit code. */
int pxctl_sweep_status(pxctl_opts_t *o, px_rpc_channel_t *ch);
/* `cancel SWEEP`: its unfinished jobs. Exit code. */
int pxctl_sweep_cancel(pxctl_opts_t *o, px_rpc_channel_t *ch);
/* The summary of the sweep's jobs (by state, best accuracy, lowest density,
 * fewest inter-node bytes), after `list --sweep`'s table. */
void pxctl_sweep_print_summary(const char *sweep_id, Prunex__V1__Job *const *jobs, size_t n);
/* 1 for the terminal job states (SUCCEEDED, FAILED, CANCELLED, TIMEOUT). */
int pxctl_job_finished(int state);
/* --since: "YYYY-MM-DD[THH:MM[:SS]]" (UTC) or a duration back from now
 * ("90m", "12h", "7d", "30s") into unix ms; 0, or -1 when malformed. */
int pxctl_parse_since(const char *v, int64_t *out);

/* status: when the model file is readable here, prints "model size" with the
 * dense and compact parameter counts and file sizes (the compact file is the
 * one pxctl run / pxctl export writes beside it, if there). Prints nothing
 * otherwise. */
void pxctl_print_model_sizes(const char *model_path);

/* The engine's work, done by pxtrain (pxctl_engine.c; pxctl links the client
 * part alone): px_export_file's and px_export_count's results and errors
 * (px_last_error) for pxctl, which may be installed without the engine (then
 * they fail saying so). */
px_status_t pxctl_engine_export(const char *model, const char *dir, int onnx, const char *dataset,
                                px_export_report_t *r);
px_status_t pxctl_engine_count(const char *model, size_t *dense, size_t *compact);

/* ---- finished runs read offline (pxctl_offline.c) ----------------------------
 * status, metrics, drift, logs and plot read the directory a `pxctl run`
 * leaves, or a coordinator database file (--db), through a private
 * `pxcoordd --read-only` on a copy of its database: the same queries and
 * output as against a live coordinator. */

/* Copies the SQLite database from (only read: without a -wal file it is
 * opened immutable, so nothing is written beside it; with one, through it,
 * committed transactions only) into the new file to (0600) with the backup
 * API. 0, or -1 with the reason in err. */
int pxctl_copy_db(const char *from, const char *to, char *err, size_t errcap);

/* What a JOB argument names. 1: the directory of a run, its database's path
 * into db (DIR/metrics/coordinator.db of an output directory, else
 * DIR/coordinator.db of a run directory); 0: not a path (a job id or name;
 * a bare name counts as a directory only when one with a database is
 * there); -1: a path (with a '/') that holds no run: the message (which
 * path, what is missing) is printed. */
int pxctl_run_dir_db(const char *arg, char *db, size_t cap);

typedef struct pxctl_offline pxctl_offline_t;

/* Starts the private read-only coordinator on a copy of db and points
 * o->coordinator at it (PRUNEX_CA and PRUNEX_TOKEN are dropped). 0 with
 * *out (pxctl_offline_close) or the exit status, after saying why. */
int pxctl_offline_open(pxctl_opts_t *o, const char *db, pxctl_offline_t **out);
/* For main(), before a command that reads one job (status, metrics, drift,
 * logs): with --db, or when JOB is a run's directory (then JOB becomes the
 * newest job of its database: the run's one), opens the private
 * coordinator into *out. -1 to go on (*out NULL: a live coordinator), else
 * the exit status. */
int pxctl_offline_begin(pxctl_opts_t *o, pxctl_offline_t **out);
/* Stops the private coordinator and removes the copy. NULL is a no-op. */
void pxctl_offline_close(pxctl_offline_t *off);
/* The database read offline now, for messages; NULL: a live coordinator. */
const char *pxctl_offline_db(void);

/* ---- shared pieces of the query commands (pxctl_query.c) ---------------- */

/* Turns a job name into its id when *ref is not a job id and exactly one
 * job has that name (*ref then points at static storage that lives until
 * exit); several jobs of that name are an error naming them (exit 1).
 * Anything else (an id, no such job, coordinator unreachable) is left for
 * the command to report. Returns 0 or the exit code. */
int pxctl_resolve_job(const pxctl_opts_t *o, const char **ref);

/* Opens a channel to o->coordinator; on failure prints why and returns
 * NULL. */
px_rpc_channel_t *pxctl_connect(const pxctl_opts_t *o);

/* Turns the last failed RPC into a message on stderr and returns
 * PXCTL_EXIT_FAIL: "no job 'X'" for NOT_FOUND when job_id is given, else
 * the coordinator's address, the gRPC status and the details. */
int pxctl_rpc_fail(px_rpc_channel_t *ch, const char *job_id);

/* Reads a spec file, parses and validates it. On success *spec and *text
 * (the file's bytes, NUL-terminated, px_free) belong to the caller; on
 * failure the message (FILE:LINE:COL: FIELD: what) is printed and
 * PXCTL_EXIT_USAGE returned. */
int pxctl_load_spec(const char *path, Prunex__V1__JobSpec **spec, char **text);

/* Called between reads of a watch stream; nonzero stops the watch. */
typedef int (*pxctl_watch_stop_fn)(void *arg);

/* Follows job_id with WatchJob until it reaches a terminal state, drawing
 * a progress bar on out (a redrawn line when out is a terminal, one line
 * per change otherwise; nothing when out is NULL). stop is polled about
 * every 200 ms (NULL: never). Returns PX_OK with *final (the last Job,
 * inside *holder: free *holder with px_rpc_message_free) when the job
 * ended; PX_ERR_STATE when stop said so (then *final is the last seen
 * state, possibly NULL); an RPC error otherwise (last error set). */
px_status_t pxctl_watch(px_rpc_channel_t *ch, const char *job_id, FILE *out,
                        pxctl_watch_stop_fn stop, void *arg, void **holder,
                        const Prunex__V1__Job **final);

/* Figures of a finished job as `run` reports them. */
typedef struct {
  int iterations;
  double test_accuracy;       /* < 0: never evaluated */
  double density;
  uint64_t inter_bytes, inter_bytes_dense, intra_bytes;
  double wall_s;
  char model_path[4096];
  const char *source;         /* "coordinator" (Job.summary) or "iterations" */
} pxctl_summary_t;

/* Fills s from job->summary when the coordinator gave one, else from
 * GetIterations (sums over iterations, last test accuracy and density). */
px_status_t pxctl_job_summary(px_rpc_channel_t *ch, const Prunex__V1__Job *job,
                              pxctl_summary_t *s);

/* ---- JSON (pxctl_json.c) ---------------------------------------------------
 * A document builder over json-c (prunex/json.h): callers say what comes
 * next (begin/end, key, value) and pxctl_json_finish writes the whole tree
 * as one compact line. Invalid UTF-8 bytes become U+FFFD; non-finite
 * numbers become null; doubles are written in their shortest exact form. */
#define PXCTL_JSON_MAX_DEPTH 32

struct json_object;
typedef struct {
  FILE *f;
  int depth;
  struct json_object *stack[PXCTL_JSON_MAX_DEPTH]; /* open containers */
  struct json_object *root;
  char key[128];                     /* the key the next value goes under */
} pxctl_json_t;

/* --field NAME (pxctl.c): pxctl_json_finish then prints, instead of the
 * document, NAME of each object of its listing (the document's array, or
 * the first array member of its object; a single object: its own NAME),
 * one per line: strings bare, null as an empty line, others as JSON. A
 * NAME no object has is a usage error (exit 2, naming the fields there
 * are). NULL: whole documents. */
void pxctl_json_set_field(const char *name);

void pxctl_json_init(pxctl_json_t *j, FILE *f);
void pxctl_json_begin_object(pxctl_json_t *j);
void pxctl_json_end_object(pxctl_json_t *j);
void pxctl_json_begin_array(pxctl_json_t *j);
void pxctl_json_end_array(pxctl_json_t *j);
void pxctl_json_key(pxctl_json_t *j, const char *key);
void pxctl_json_string(pxctl_json_t *j, const char *s); /* NULL: null */
void pxctl_json_string_n(pxctl_json_t *j, const char *s, size_t n);
void pxctl_json_int(pxctl_json_t *j, int64_t v);
void pxctl_json_uint(pxctl_json_t *j, uint64_t v);
void pxctl_json_double(pxctl_json_t *j, double v);
void pxctl_json_bool(pxctl_json_t *j, int v);
void pxctl_json_null(pxctl_json_t *j);
/* Writes the document as one line (or --field's lines), flushes, and
 * frees the tree; j is empty again. */
void pxctl_json_finish(pxctl_json_t *j);
/* Frees the tree unwritten (a command that failed half way). */
void pxctl_json_discard(pxctl_json_t *j);

/* Writes a protobuf-c message as an object keyed by the proto field names
 * (every field, in descriptor order); enums as their names without the
 * type prefix ("RUNNING", "CPU"; strategies as in YAML, "hsadmm-flat"),
 * repeated fields as arrays, absent sub-messages as null, bytes as
 * base64; accuracies, losses and densities the proto marks "not measured"
 * (negative) as null, never -1. NULL writes null. */
void pxctl_json_message(pxctl_json_t *j, const ProtobufCMessage *m);

/* A Job as `status --json` prints it: pxctl_json_message, with spec_yaml
 * replaced by the canonical YAML when the job was submitted without text. */
void pxctl_json_job(pxctl_json_t *j, const Prunex__V1__Job *job);

/* ---- human formatting (pxctl_fmt.c) ------------------------------------ */

/* A table of strings: columns sized to their widest cell, right-aligned
 * where the header starts with '>', which is not printed. */
typedef struct pxctl_table pxctl_table_t;

pxctl_table_t *pxctl_table_create(int ncols, const char *const *headers);
/* Appends one cell to the current row (a row ends after ncols cells). */
void pxctl_table_cell(pxctl_table_t *t, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));
/* Prints (indent spaces before each line) and frees. */
void pxctl_table_print(pxctl_table_t *t, FILE *f, int indent);
void pxctl_table_destroy(pxctl_table_t *t);

/* "1.23 MiB" style with IEC units. */
void pxctl_fmt_bytes(char *buf, size_t cap, uint64_t bytes);
/* "85.21%" or "-" for a negative accuracy. */
void pxctl_fmt_pct(char *buf, size_t cap, double frac);
/* "2024-05-01 12:00:03 UTC" (UTC, as the logs and the dashboard), "-" for 0. */
void pxctl_fmt_time(char *buf, size_t cap, int64_t unix_ms);
/* "12s", "3m04s", "2h05m", "3d04h" */
void pxctl_fmt_duration(char *buf, size_t cap, double seconds);
/* Age of a unix-ms time: "12s ago", "-" for 0. */
void pxctl_fmt_age(char *buf, size_t cap, int64_t unix_ms);
/* A CSV field as RFC 4180 quotes it: in double quotes, quotes doubled. */
void pxctl_csv_string(FILE *f, const char *s);

int64_t pxctl_now_unix_ms(void);
double pxctl_mono_s(void);

/* Parses a job state name (case-insensitive, "running", "JOB_STATE_RUNNING")
 * or a node state name; 0 when not a state. */
int pxctl_parse_job_state(const char *s);
int pxctl_parse_node_state(const char *s);

#endif
