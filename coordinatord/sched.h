/* The scheduling policy: the order of the queue and which
 * pending jobs start now, as a pure function over an in-memory snapshot of
 * the cluster (free and busy nodes, pending jobs, users' usage). No SQL and
 * no coordinator state here: jobs.c builds the snapshot from the database
 * (sched_view.c) and applies the decisions; bench/sched calls the same
 * function on a simulated cluster.
 *
 * The order is Slurm's multifactor priority, simply: a weighted mean of
 *   job factor        the job's own priority / COORD_PRIORITY_MAX,
 *   fair-share factor 2^(-U/S): U the user's share of the cluster's decayed
 *                     usage (node-seconds, half-life policy.half_life_s), S
 *                     the user's share of the shares (equal by default),
 *   age factor        time queued / policy.max_age_s, at most 1,
 * ties broken by submission order. Walking that order: a job that can never
 * fit on the alive nodes, or whose user is at the running-nodes quota, does
 * not block the others; the first job that fits the cluster but not the
 * free nodes now holds a reservation at its shadow time (when enough of
 * the nodes it can use are free, from the running jobs' time limits), and a
 * job behind it starts only when it fits the free nodes now and its time
 * limit ends by that shadow time (backfill that never delays the top job).
 * Jobs without a time limit never backfill. A blocked job (held, or
 * waiting for its dependencies) keeps its place in the order but
 * is passed over, as one that can never fit. */
#ifndef PX_COORD_SCHED_H
#define PX_COORD_SCHED_H

#include <stddef.h>
#include <stdint.h>

#define COORD_PRIORITY_DEFAULT 100
#define COORD_PRIORITY_MAX 1000
#define COORD_SCHED_USERS_MAX 256
#define COORD_SCHED_USER_NAME 128
#define COORD_SCHED_NEVER INT64_MAX /* a busy node's free time when its job has no limit */
#define COORD_SCHED_WEIGHT_JOB 1000       /* the policy's defaults (config.c's table) */
#define COORD_SCHED_WEIGHT_FAIRSHARE 1000
#define COORD_SCHED_WEIGHT_AGE 100
#define COORD_SCHED_HALF_LIFE_S 604800    /* 7 days */
#define COORD_SCHED_MAX_AGE_S 604800
#define COORD_PREEMPT_GRACE_S 30 /* preemption_grace_s: as the time limit's grace */

/* One user's line of the config (share.NAME, max_running_nodes.NAME,
 * max_queued_jobs.NAME). -1: the default. */
typedef struct {
  char name[COORD_SCHED_USER_NAME];
  double share;            /* > 0; -1: 1 */
  int max_running_nodes;   /* 0: unlimited; -1: the default */
  int max_queued_jobs;     /* 0: unlimited; -1: the default */
} coord_sched_user_conf_t;

/* The policy settings (docs/operations.md, "Scheduling policy"). */
typedef struct {
  double weight_job, weight_fairshare, weight_age;  /* >= 0, not all 0 */
  int64_t half_life_s;         /* usage decay; default 7 days */
  int64_t max_age_s;           /* age factor reaches 1 here; default 7 days */
  int max_running_nodes;       /* per user by default; 0: unlimited */
  int max_queued_jobs;         /* unfinished jobs per user by default; 0: unlimited */
  int64_t time_limit_default_s;/* for jobs that give none; 0: none */
  int64_t time_limit_max_s;    /* 0: no maximum */
  int preempt;                 /* 1: a waiting job may preempt running jobs of a lower
                                  job priority that checkpoint (preempt.c) */
  int64_t preempt_grace_s;     /* a victim not stopped at its checkpoint this long after
                                  being asked is cancelled; default 30 */
  int nusers;
  coord_sched_user_conf_t users[COORD_SCHED_USERS_MAX];
} coord_sched_policy_t;

void coord_sched_policy_defaults(coord_sched_policy_t *p);
/* The user's line, or NULL (the defaults apply). Linear in the lines. */
const coord_sched_user_conf_t *coord_sched_user_conf(const coord_sched_policy_t *p,
                                                     const char *user);
/* The user's quotas with the defaults applied (0: unlimited). */
int coord_sched_max_running_nodes(const coord_sched_policy_t *p, const char *user);
int coord_sched_max_queued_jobs(const coord_sched_policy_t *p, const char *user);
/* A job's time limit in ms: its own, else the default; 0: none. */
int64_t coord_sched_time_limit_ms(const coord_sched_policy_t *p, int32_t spec_time_limit_s);

/* A node that is alive (registered, not LOST, agent connected). */
typedef struct {
  int devices;
  int64_t free_at_ms;  /* 0: free now; else when its job's time limit ends
                          (COORD_SCHED_NEVER: no limit) */
} coord_sched_node_t;

typedef struct {
  const char *name;     /* borrowed */
  double usage;         /* decayed node-seconds, running jobs included */
  int running_nodes;    /* nodes its active jobs hold */
  /* out */
  double fairshare;     /* factor in (0, 1] */
  double share;         /* normalised share in (0, 1] */
} coord_sched_user_t;

enum {
  COORD_WAIT_NONE = 0,   /* starts now */
  COORD_WAIT_NEVER,      /* cannot fit on the alive nodes: a = alive nodes that fit */
  COORD_WAIT_QUOTA,      /* a = nodes the user's jobs hold, b = the quota */
  COORD_WAIT_NODES,      /* first in line: a = free nodes that fit, b = alive that fit */
  COORD_WAIT_PRIORITY,   /* behind higher-priority jobs that wait (or a reservation) */
  COORD_WAIT_BLOCKED,    /* held, or waiting for its dependencies: the
                            caller says which */
};

typedef struct {
  int user;             /* index in the snapshot's users */
  int nodes, per_node;  /* M nodes x P devices */
  int priority;         /* 1..COORD_PRIORITY_MAX */
  int64_t submit_ms;
  int64_t time_limit_ms;/* 0: none */
  int blocked;          /* 1: not a candidate (held, dependencies): ordered, never
                           started, blocks nobody */
  /* out */
  double score;         /* the priority, in [0, 1] */
  double f_job, f_fairshare, f_age;
  int64_t ahead;        /* pending jobs before it in the order */
  int start;            /* 1: start it now */
  int backfill;         /* 1: starts ahead of a reservation (time limit fits) */
  int wait;             /* COORD_WAIT_* */
  int wait_a, wait_b;
  int64_t shadow_ms;    /* COORD_WAIT_NODES: when it can start at the latest by
                           the limits (COORD_SCHED_NEVER: unknown) */
} coord_sched_job_t;

typedef struct {
  int64_t now_ms;
  coord_sched_node_t *nodes;
  size_t nnodes;
  coord_sched_user_t *users;
  size_t nusers;
  coord_sched_job_t *jobs;   /* pending jobs, in submission order */
  size_t njobs;
  size_t *order;      /* caller's scratch of njobs: the priority order on return */
  int64_t *until;     /* caller's scratch of nnodes */
  int *user_nodes;    /* caller's scratch of nusers */
} coord_sched_snapshot_t;

/* Computes every pending job's factors and score, orders them and decides
 * which start now (jobs[i].start) and why the others wait. Allocates
 * nothing; O(njobs log njobs + njobs * nnodes). Cannot fail. */
void coord_sched_decide(const coord_sched_policy_t *p, coord_sched_snapshot_t *s);

/* Why a pending job waits, for its reason ("priority 0.42, 3 jobs ahead",
 * "user quota: 4 of 4 nodes in use", "priority 0.61, first in line; waiting
 * for nodes: needs 2 nodes x 1 device; 1 of 2 free"). With live 0 the text
 * leaves out what changes with every submission and with time (the
 * priority, the jobs ahead), so that the stored reason changes only when
 * the cause does; GetJob and ListJobs say the live one. */
void coord_sched_reason(const coord_sched_job_t *j, int live, char *buf, size_t cap);

/* The decayed value of usage recorded at then_ms, at now_ms. */
double coord_sched_decay(double usage, int64_t then_ms, int64_t now_ms, int64_t half_life_s);

#endif
