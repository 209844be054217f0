/* The pxctl client module (pxctl_client.c): the plumbing the command files
 * import and that imports none of them back. The command-line options,
 * exit codes and errors, the connection to the coordinator and the message
 * of a failed call, job name resolution, spec loading, a job's iteration
 * reports, the watch loop and the summary of a finished job.
 *
 * Exit codes are the same for every command: 0 success, 1 a runtime
 * failure (the coordinator, a job that did not succeed, a missing file),
 * 2 bad usage or a bad job spec. */
#ifndef PXCTL_CLIENT_H
#define PXCTL_CLIENT_H

#include <stdint.h>
#include <stdio.h>

#include "prunex.pb-c.h"
#include "prunex/jobspec.h"
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
  const char *tensorboard;    /* export/watch/run: --tensorboard DIR */
  const char *http;           /* run: --http HOST:PORT for the private pxcoordd */
  int csv;                    /* metrics: --csv */
  const char *pos[8];         /* positional arguments */
  int onnx;                   /* export: --onnx */
  const char *user;           /* acct: --user */
  int64_t since_unix_ms;      /* acct: --since (0: all) */
  const char *sweep;          /* list: --sweep (NULL: every job) */
  int me;                     /* list: --me */
#define PXCTL_AFTER_MAX 64
  const char *after[PXCTL_AFTER_MAX]; /* submit: --after JOB[:ok|any], each */
  int nafter;
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

/* The database read offline now, for messages; NULL: a live coordinator.
 * pxctl_offline.c sets it (NULL or "": none). */
const char *pxctl_offline_db(void);
void pxctl_set_offline_db(const char *db);

/* ---- the coordinator -------------------------------------------------------- */

/* The deadline of one call to the coordinator. */
#define PXCTL_DEADLINE_MS 10000

/* Turns a job name into its id when *ref is not a job id and exactly one
 * job has that name (*ref then points at static storage that lives until
 * exit); several jobs of that name are an error naming them (exit 1).
 * Anything else (an id, no such job, coordinator unreachable) is left for
 * the command to report. Returns 0 or the exit code. */
int pxctl_resolve_job(const pxctl_opts_t *o, const char **ref);

/* Opens a channel to o->coordinator; on failure prints why and returns
 * NULL. */
px_rpc_channel_t *pxctl_connect(const pxctl_opts_t *o);

/* A command's work on a channel: connects to o->coordinator (on failure
 * says why and returns PXCTL_EXIT_FAIL), runs fn, closes the channel.
 * Returns fn's exit code. */
typedef int (*pxctl_channel_fn)(pxctl_opts_t *o, px_rpc_channel_t *ch);
int pxctl_with_channel(pxctl_opts_t *o, pxctl_channel_fn fn);

/* Turns the last failed RPC into a message on stderr and returns
 * PXCTL_EXIT_FAIL: "no job 'X'" for NOT_FOUND when job_id is given, else
 * the coordinator's address, the gRPC status and the details. */
int pxctl_rpc_fail(px_rpc_channel_t *ch, const char *job_id);

/* Reads a spec file once, parses and checks it (the parser's checks, then
 * px_jobspec_check_data: the data it names, on this machine). On success
 * *spec and *text (the file's bytes, NUL-terminated, px_free) belong to the
 * caller and *given says which fields the file wrote; on failure the
 * message (FILE:LINE:COL: FIELD: what) is printed and PXCTL_EXIT_USAGE
 * returned. */
int pxctl_load_spec(const char *path, Prunex__V1__JobSpec **spec, char **text,
                    px_jobspec_given_t *given);

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

/* The job's admm.max_iterations (0: none known) and the iterations its
 * summary counts so far. */
int pxctl_job_max_iterations(const Prunex__V1__Job *job);
int pxctl_job_done_iterations(const Prunex__V1__Job *job);

/* Fetches the job's iteration reports; unless all_ranks, keeps one per
 * iteration (the lowest rank's: rank 0 reports for the job). The kept
 * reports are pointers into *resp (px_rpc_message_free); *n counts them;
 * *rows is px_malloc'd (px_free). An RPC error leaves *resp NULL;
 * PX_ERR_NOMEM (with *resp set) otherwise. */
px_status_t pxctl_iterations(px_rpc_channel_t *ch, const char *job_id, int from, int layers,
                             int all_ranks, Prunex__V1__GetIterationsResponse **resp,
                             Prunex__V1__IterationReport ***rows, size_t *n);
/* The same, of at most limit reports (iteration x rank; 0: all) from
 * iteration from on, in (iteration, rank) order: a page ends inside an
 * iteration only after that iteration's lowest rank, so the next page
 * starts at the page's last iteration + 1. (*resp)->n_iterations < limit
 * on the last page. */
px_status_t pxctl_iterations_page(px_rpc_channel_t *ch, const char *job_id, int from, int limit,
                                  int layers, int all_ranks,
                                  Prunex__V1__GetIterationsResponse **resp,
                                  Prunex__V1__IterationReport ***rows, size_t *n);

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

#endif
