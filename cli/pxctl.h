/* pxctl internals: what the files of the command-line client share. The
 * program is split by concern: pxctl.c (the commands and their option
 * tables, dispatch, help) over pxctl_args.c (getopt_long driven by such
 * tables: pxctl_args.h, which imports nothing of pxctl);
 * pxctl_client.c (pxctl_client.h: the plumbing every command imports:
 * errors, connection, name resolution, spec loading, iteration reports,
 * watch, summary); one file per command or family of commands
 * (pxctl_submit.c, pxctl_status.c, pxctl_jobs.c: list, cancel, delete,
 * pxctl_nodes.c, pxctl_metrics.c: metrics, drift, pxctl_watch.c,
 * pxctl_logs.c, pxctl_plot.c, pxctl_export.c, pxctl_acct.c,
 * pxctl_sweep.c, pxctl_run.c: the embedded mode); what the commands build
 * on: pxctl_tensorboard.c (TensorBoard event files, framed by
 * pxctl_tfrecord.c), pxctl_supervise.c (child processes), pxctl_offline.c (finished runs
 * read offline), pxctl_engine.c (pxtrain for the engine's work),
 * pxctl_json.c (the JSON emitter) and pxctl_fmt.c (tables and human
 * formatting). Files call down this list, never back up: no circle. */
#ifndef PXCTL_H
#define PXCTL_H

#include <stdint.h>
#include <stdio.h>

#include "prunex.pb-c.h"
#include "prunex/export.h" /* px_export_report_t (a type: the work is pxtrain's) */
#include "prunex/px.h"
#include "prunex/rpc.h"
#include "pxctl_client.h"

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
/* Queue controls (pxctl_queue.c): hold, release, update. */
int pxctl_cmd_hold(pxctl_opts_t *o);
int pxctl_cmd_release(pxctl_opts_t *o);
int pxctl_cmd_update(pxctl_opts_t *o);

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
px_status_t pxctl_engine_count(const char *model, px_export_report_t *r);

/* ---- TensorBoard event files (pxctl_tensorboard.c) ------------------------------
 * export, watch and run --tensorboard DIR: a job's iteration reports (with
 * their layers) as TensorBoard scalars, one Event per iteration; the tags
 * are listed at the top of pxctl_tensorboard.c and in docs/user-guide.md. */

typedef struct pxctl_tb pxctl_tb_t;

/* Makes dir (and its parents) and a new event file in it
 * (events.out.tfevents.<time>.<host>.<pid>.pxctl) for job_id (NULL: named
 * later, by pxctl_tb_follow), whose first
 * record says file_version "brain.Event:2". 0 with *out
 * (pxctl_tb_close), or the exit status after saying which directory or
 * file and why. */
int pxctl_tb_open(const char *dir, const char *job_id, pxctl_tb_t **out);
/* Fetches the job's iteration reports not written yet (with layers, a page
 * at a time: pxctl_iterations_page) and appends them, flushed. final: every one, and a failed
 * fetch is reported; else the newest is kept for later and a failed fetch
 * is left for the next call. 0, or the exit status after saying why (a
 * failed write stops all further writes). */
int pxctl_tb_sync(pxctl_tb_t *tb, px_rpc_channel_t *ch, int final);
/* While a job runs: pxctl_tb_poll(tb), called often (a pxctl_watch stop
 * function, which never asks to stop), syncs (not final) on *ch every 2 s.
 * ch points at the caller's channel, which it may replace; job_id (NULL:
 * the one given to pxctl_tb_open) is the job. */
void pxctl_tb_follow(pxctl_tb_t *tb, px_rpc_channel_t *const *ch, const char *job_id);
int pxctl_tb_poll(void *tb);
/* The event file's path; the iteration events and scalars written. */
const char *pxctl_tb_file(const pxctl_tb_t *tb);
void pxctl_tb_counts(const pxctl_tb_t *tb, size_t *events, size_t *scalars);
/* Closes the file and frees tb (NULL: 0). 0, or PXCTL_EXIT_FAIL when a
 * write failed (said when it did) or closing fails (said here). */
int pxctl_tb_close(pxctl_tb_t *tb);

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
/* (pxctl_offline_db, the database read now, is the client module's.) */

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
/* pxctl_json_key then the value. */
void pxctl_json_kv_string(pxctl_json_t *j, const char *key, const char *s);
void pxctl_json_kv_int(pxctl_json_t *j, const char *key, int64_t v);
void pxctl_json_kv_uint(pxctl_json_t *j, const char *key, uint64_t v);
void pxctl_json_kv_double(pxctl_json_t *j, const char *key, double v);
void pxctl_json_kv_bool(pxctl_json_t *j, const char *key, int v);
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
/* pxctl_json_key then an array of the n strings. */
void pxctl_json_kv_strings(pxctl_json_t *j, const char *key, char *const *items, size_t n);
/* A message (pxctl_json_message) as the one document on stdout. */
void pxctl_json_print_message(const ProtobufCMessage *m);
/* That Job as the one document on stdout. */
void pxctl_json_print_job(const Prunex__V1__Job *job);

/* ---- human formatting (pxctl_fmt.c) ------------------------------------ */

/* A table of strings: columns sized to their widest cell, right-aligned
 * where the header starts with '>', which is not printed. */
typedef struct pxctl_table pxctl_table_t;

pxctl_table_t *pxctl_table_create(int ncols, const char *const *headers);
/* Appends one cell to the current row (a row ends after ncols cells). */
void pxctl_table_cell(pxctl_table_t *t, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));
/* Appends a row printed as one line of text across the columns (not
 * aligned with them, nor counted in their widths); between rows only. */
void pxctl_table_line(pxctl_table_t *t, const char *text);
/* Prints (indent spaces before each line) and frees. */
void pxctl_table_print(pxctl_table_t *t, FILE *f, int indent);
void pxctl_table_destroy(pxctl_table_t *t);

/* text cut to at most width bytes at a word boundary, "..." after a cut
 * (a first word longer than width is kept whole, never split); only its
 * first line. */
void pxctl_fmt_clip(char *buf, size_t cap, const char *text, size_t width);
/* "1.23 MiB" style with IEC units. */
void pxctl_fmt_bytes(char *buf, size_t cap, uint64_t bytes);
/* "40.52 M per image dense; 10.31 M (25.4%) compact": multiply-accumulates
 * of the dense and compact models (pruning tables call them FLOPs). */
void pxctl_fmt_macs(char *buf, size_t cap, uint64_t dense, uint64_t compact);
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
