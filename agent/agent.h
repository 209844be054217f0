/* pxagent internals, shared by the files of the daemon.
 *
 * Threads and what each owns:
 *   loop thread (main)  the libuv loop: signals, the worker processes
 *                       (uv_spawn, exit callbacks, SIGTERM then SIGKILL),
 *                       the job table; it never makes an RPC.
 *   control thread      RegisterNode and the WatchAssignments stream, with
 *                       capped exponential backoff while the coordinator is
 *                       away; hands assignments to the loop (cmds + wake).
 *   heartbeat thread    Heartbeat at the coordinator's interval; known=false
 *                       makes the control thread re-register, cancel_job_ids
 *                       become cancel commands for the loop.
 *   reporter thread     ReportRankExit for every worker exit, retried while
 *                       the coordinator is unreachable.
 * The threads meet in the fields under `mu`; the loop is woken with
 * uv_async_send (the only libuv call other threads make), and only while
 * `loop_open` says the async handle still exists. */
#ifndef PX_AGENT_H
#define PX_AGENT_H

#include <pthread.h>
#include <stdint.h>
#include <uv.h>

#include "prunex.pb-c.h"
#include "prunex/px.h"
#include "prunex/rpc.h"
#include "prunex/service.h"
#include "util.h"

#define PXA_ID_MAX 128
#define PXA_PATH_MAX 4096
#define PXA_FINISHED_MAX 256       /* job ids remembered after their workers ended */
#define PXA_KILL_AFTER_MS 3000     /* SIGTERM, then SIGKILL this much later */
#define PXA_BACKOFF_MIN_MS 100
#define PXA_BACKOFF_MAX_MS 5000
#define PXA_TAIL_BYTES 2048        /* log lines carried in a failed rank's reason */
#define PXA_REPORT_GIVE_UP_MS (10 * 60 * 1000)
#define PXA_FLUSH_MS 5000          /* exit reports still sent after a shutdown */
#define PXA_HUNG_AFTER_MS 10000    /* a worker stopped (SIGSTOP, ptrace) this long is hung */
#define PXA_STALLED_AFTER_MS 15000 /* a training worker that used no CPU this long is hung */
#define PXA_WATCHDOG_EVERY_MS 1000
#define PXA_LOG_SHIP_MS 2000       /* rank logs are uploaded this often */
#define PXA_LOG_CHUNK 65536        /* bytes per AppendRankLog */
#define PXA_LOG_PASS_CHUNKS 16     /* chunks per log per pass (1 MiB) */

#define PXA_MAX_ROOTS 16
/* Where data sets may be read from when no --data-root is given (besides
 * the work directory): Debian's data set packages install there. */
#define PXA_DEFAULT_DATA_ROOT "/usr/share/datasets"

typedef struct {
  const char *coordinator;   /* flag, else PRUNEX_COORDINATOR, else the config file */
  const char *name;          /* NULL: the host name */
  const char *work_dir;      /* NULL: $STATE_DIRECTORY, else $TMPDIR/pxagent-<name> */
  const char *worker_bin;    /* NULL: pxworker beside pxagent, else from PATH */
  int cpu_workers;           /* CPU devices when no GPU is found */
  int threads_per_worker;    /* 0: max(1, cores / devices) */
  int heartbeat_ms;          /* 0: the coordinator's interval; else at most this */
  int log_level;             /* px_log_level_t; -1: not set */
  const char *output_roots[PXA_MAX_ROOTS]; /* --output-root: where output_dir may also be */
  int noutput_roots;
  const char *data_roots[PXA_MAX_ROOTS];   /* --data-root: where dataset.path may be */
  int ndata_roots;
  const char *config;        /* --config FILE, or NULL */
  const char *ca;            /* --ca FILE (else PRUNEX_CA, else the file's), or NULL */
  struct px_settings *settings; /* keeps the strings above (config.c) */
} pxa_config_t;

/* --help and --version (printed: 0), else the config file, PRUNEX_COORDINATOR
 * and PRUNEX_CA, then the flags, into c (config.c's table): -1 to go on, 2
 * after saying on stderr what is wrong. Either way c keeps its settings
 * handle: pxa_config_free releases it and the strings of c. */
int pxa_parse_args(int argc, char **argv, pxa_config_t *c);
void pxa_config_free(pxa_config_t *c);


typedef enum { PXA_CMD_START = 1, PXA_CMD_CANCEL = 2 } pxa_cmd_kind_t;

/* Work for the loop, queued by the RPC threads. */
typedef struct pxa_cmd {
  struct pxa_cmd *next;
  pxa_cmd_kind_t kind;
  Prunex__V1__Assignment *assignment; /* START: owned (px_rpc_message_free) */
  char job_id[PXA_ID_MAX];
  int attempt;               /* CANCEL: the attempt to stop; 0: every attempt */
  char reason[160];
} pxa_cmd_t;

/* A worker exit waiting to be reported. */
typedef struct pxa_exit {
  struct pxa_exit *next;
  char job_id[PXA_ID_MAX];
  int attempt;               /* the attempt the rank belonged to */
  int rank, exit_code, signal;
  char *reason;              /* px_malloc'd */
  int64_t queued_ms;
} pxa_exit_t;

/* A rank log being uploaded to the coordinator (logship.c). */
typedef struct {
  char job_id[PXA_ID_MAX];
  int rank;
  char path[PXA_PATH_MAX + 320];
  int64_t offset;            /* the coordinator has the log up to here */
  int exited;                /* the rank ended: upload to the end, with eof */
} pxa_logfile_t;

typedef struct pxa_job pxa_job_t;

typedef struct {
  uv_process_t proc;         /* valid once `open` */
  pxa_job_t *job;
  int rank, local_rank;
  int device_index;          /* the node's device this rank trains on (its assignment) */
  int open;                  /* the handle is initialised and not yet closed */
  int running;               /* the process is alive */
  int declared;              /* its failure was reported before it exited (hung) */
  int64_t stopped_since_ms;  /* 0, or when the watchdog first saw it stopped */
  int training;              /* 0 before its first iteration, 1 training, 2 done training */
  int64_t cpu_ticks;         /* its main thread's CPU time when last looked at */
  int64_t idle_since_ms;     /* 0, or since when that has not moved */
  char log[PXA_PATH_MAX + 320];
  char progress[PXA_PATH_MAX + 330]; /* rank-R.progress: exists while it trains */
} pxa_worker_t;

/* One attempt of a job on this node: the table is keyed by (id, attempt).
 * The job's directory is shared by its attempts (the workers keep their
 * checkpoints in it). */
struct pxa_job {
  pxa_job_t *next;
  struct pxa_agent *agent;
  char id[PXA_ID_MAX];
  int attempt;               /* 1, 2, ...: the coordinator's restarts of the job */
  int join_epoch;            /* > 0: its ranks join the running attempt (elastic) */
  Prunex__V1__Assignment *pending; /* START of a newer attempt, run once this one's workers
                                      are gone (owned) */
  int nworkers;
  pxa_worker_t *workers;     /* [nworkers] */
  int nrunning, nopen;
  int stopping, killed;
  int64_t kill_at_ms;
  char stop_reason[160];
};

typedef struct pxa_agent {
  pxa_config_t cfg;
  char name[PXA_ID_MAX];
  char hostname[256];
  char work_dir[PXA_PATH_MAX];
  char worker_bin[PXA_PATH_MAX];
  char metrics_db[PXA_PATH_MAX + 16];
  int threads_per_worker;
  Prunex__V1__Device *devices;  /* [ndevices], names owned here */
  Prunex__V1__Device **device_ptrs;
  size_t ndevices;

  /* ---- loop thread only ---- */
  uv_loop_t *loop;
  uv_async_t wake;
  uv_signal_t sigterm, sigint;
  uv_timer_t tick;
  int64_t watchdog_ms;          /* when the progress watchdog last looked at the workers */
  px_service_watchdog_t watchdog; /* WATCHDOG=1 from this loop under systemd */
  pxa_job_t *jobs;
  char finished[PXA_FINISHED_MAX][PXA_ID_MAX];
  int finished_attempt[PXA_FINISHED_MAX];
  int nfinished;             /* ring of (id, attempt): job attempts never to start again */
  int shutting_down;         /* a signal asked us to stop */
  int closing;               /* the loop's handles are being closed */

  /* ---- shared, under mu ---- */
  pthread_mutex_t mu;
  pthread_cond_t cv;         /* wakes the threads (stop, registration, queues) */
  int stop;                  /* every thread must end */
  int quiesce;               /* the control thread must take no more assignments */
  int loop_open;             /* `wake` may be signalled */
  int registered;            /* node_id is valid */
  int reregister;            /* the coordinator forgot us: register again */
  int registrations;         /* successful RegisterNode calls so far */
  char node_id[PXA_ID_MAX];
  int hb_interval_ms;
  px_rpc_stream_t *stream;   /* the open WatchAssignments, for cancelling */
  pxa_cmd_t *cmds, **cmds_tail;
  pxa_exit_t *exits, **exits_tail;
  int64_t flush_until_ms;    /* after stop: reports are tried until then */
  char **running_ids;        /* jobs with live workers, for heartbeats */
  int *running_attempts;     /* [nrunning_ids]: the attempt of each */
  size_t nrunning_ids;
  pxa_logfile_t *logs;       /* rank logs being uploaded (logship.c) */
  size_t nlogs, caplogs;

  pthread_t control_thr, heartbeat_thr, reporter_thr, logship_thr;
  int threads_started;       /* bit 0 control, 1 heartbeat, 2 reporter, 3 log uploads */
} pxa_agent_t;

/* ---- session threads (session.c) ---------------------------------------- */

/* Starts the control, heartbeat and reporter threads. */
px_status_t pxa_session_start(pxa_agent_t *ag);
/* Tells every thread to end (reports get PXA_FLUSH_MS more) and joins them. */
void pxa_session_stop(pxa_agent_t *ag);
/* Queues an exit report (takes ownership of e). Any thread. */
void pxa_report_exit(pxa_agent_t *ag, pxa_exit_t *e);
/* Queues work for the loop and wakes it (takes ownership of c). Any thread. */
void pxa_post(pxa_agent_t *ag, pxa_cmd_t *c);
/* Frees the queues left after the threads ended. */
void pxa_session_free(pxa_agent_t *ag);

/* ---- rank log uploads (logship.c) ----------------------------------------- */

/* The thread that uploads rank logs to the coordinator (AppendRankLog):
 * new bytes of every listed log every PXA_LOG_SHIP_MS, and the rest of a
 * log, marked eof, soon after its rank exits (also during a shutdown, for
 * up to PXA_FLUSH_MS). Started and joined by pxa_session_start/stop. */
void *pxa_logship_main(void *arg);
/* Starts uploading a rank's log (loop thread, after the worker started). */
void pxa_logship_add(pxa_agent_t *ag, const char *job_id, int rank, const char *path);
/* The rank ended: upload the rest of its log now (loop thread). */
void pxa_logship_exited(pxa_agent_t *ag, const char *job_id, int rank);

/* ---- workers (workers.c), loop thread ------------------------------------ */

/* Runs the queued commands (the async callback). */
void pxa_on_wake(uv_async_t *h);
/* Periodic: SIGKILL for jobs past their deadline, shutdown progress. */
void pxa_on_tick(uv_timer_t *t);
/* Starts stopping every job (SIGTERM now, SIGKILL later). */
void pxa_stop_all(pxa_agent_t *ag, const char *reason);
/* SIGKILL every live worker now. */
void pxa_kill_all(pxa_agent_t *ag);

#endif
