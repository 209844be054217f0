/* The process supervisor of `pxctl run` (pxctl_supervise.c): what starts,
 * watches and stops the private coordinator and agents, with the process
 * hygiene pxctl_run.c describes, and the file helpers of its run
 * directory. pxctl_run.c imports it; it imports nothing of the run. */
#ifndef PXCTL_SUPERVISE_H
#define PXCTL_SUPERVISE_H

#include <limits.h>
#include <signal.h>
#include <stddef.h>
#include <sys/types.h>
#include <time.h>

typedef struct {
  pid_t pid;          /* 0: never started */
  char what[64];      /* "pxcoordd", "pxagent node-1" */
  char log[PATH_MAX];
  int exited;         /* noticed (WNOWAIT), not necessarily reaped */
  int reaped;
  int status;         /* wait status once exited */
} pxctl_child_t;

/* The first of SIGINT/SIGTERM/SIGHUP received (0: none) and how many. */
extern volatile sig_atomic_t pxctl_signal, pxctl_nsignals;
void pxctl_on_signal(int sig);
void pxctl_sleep_ms(int ms);

/* snprintf for paths and messages: -1 when the result did not fit (paths
 * are then refused rather than used cut short). */
int pxctl_fmt(char *out, size_t cap, const char *fmt, ...) __attribute__((format(printf, 3, 4)));

/* $PRUNEX_BIN_DIR, the directory of pxctl itself, the build tree's sibling
 * (<dir>/../<subdir>), PATH. On failure err says where it looked. */
int pxctl_find_program(const char *name, const char *subdir, char *out, size_t cap, char *err,
                       size_t errcap);

/* Starts path with argv in a new process group, stdin from /dev/null,
 * stderr (and stdout unless out_pipe is given) appended to c->log. With
 * hide_gpus the child sees no CUDA device. 0 on success. */
int pxctl_spawn(pxctl_child_t *c, const char *path, char *const argv[], int *out_pipe,
                int hide_gpus);
/* Reads one line (without its newline) from fd until end (pxctl_mono_s
 * time) or a signal. 0 when a whole line came, else -1 (line holds what
 * came). */
int pxctl_read_line(int fd, char *line, size_t cap, double end);
#define PXCTL_COORDD_START_S 30.0 /* until a private pxcoordd prints its port */

/* Starts the private pxcoordd argv[0] (c->what and c->log set by the
 * caller; argv listens on 127.0.0.1:0) and waits for its `listening on
 * HOST:PORT` line: the loopback address goes to target. hline (NULL: none)
 * gets the next line (`http on HOST:PORT` when argv has --http). 0, or -1
 * after saying why, with the tail of its log; the child, if started, is
 * the caller's to stop. */
int pxctl_coordd_start(pxctl_child_t *c, char *const argv[], char *hline, size_t hcap,
                       char *target, size_t tcap);
/* 1 once the child has exited (noticed without reaping: the zombie keeps
 * the group id). */
int pxctl_child_exited(pxctl_child_t *c);
void pxctl_describe_exit(const pxctl_child_t *c, char *buf, size_t cap);
/* Prints the last lines of a file to stderr, indented. */
void pxctl_tail(const char *path, int lines);
void pxctl_signal_group(pxctl_child_t *c, int sig);
void pxctl_wait_exits(pxctl_child_t **cs, int n, int ms);
/* SIGTERM to each group, grace, SIGKILL to what is left, sweep, reap. */
void pxctl_stop_children(pxctl_child_t **cs, int n, int grace_ms);
/* Kills and reaps any other child (workers reparented to this subreaper). */
void pxctl_sweep_orphans(void);

/* Removes dir and what it holds, except keep (and its contents) when set. */
void pxctl_rmtree(const char *dir, const char *keep);
int pxctl_dir_has_files(const char *dir);
/* The newest *.safetensors under dir (depth-limited) into best[cap]. */
void pxctl_find_model(const char *dir, int depth, char *best, size_t cap,
                      struct timespec *best_t);

#endif
