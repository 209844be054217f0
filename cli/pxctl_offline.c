/* Reading a finished run without a coordinator: `pxctl status`,
 * `metrics`, `drift`, `logs` and `plot` take the directory a `pxctl run`
 * leaves (OUTPUT, which keeps metrics/coordinator.db, or the run directory
 * itself, kept with --keep or left by a run that was killed) in place of
 * JOB, or a coordinator database file with --db FILE.
 *
 * Nothing here reads the schema. The database is copied (SQLite's backup
 * API: a consistent snapshot, also of a database a live or killed pxcoordd
 * was writing) into a private directory, a private pxcoordd is started on
 * the copy with --read-only on a free loopback port, exactly as `pxctl run`
 * starts its own (pxctl_supervise.c), and the command runs unchanged
 * against it: the same queries, the same output as against the live
 * coordinator, by construction. The original file is only read, and
 * nothing is written beside it. The copy and the coordinator are gone when
 * the command ends, also after Ctrl-C. */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <signal.h>
#include <sqlite3.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "pxctl.h"
#include "pxctl_supervise.h"

#define PXCTL_OFFLINE_GRACE_MS 5000
#define PXCTL_OFFLINE_RPC_MS 10000

struct pxctl_offline {
  char dir[PATH_MAX];        /* the private directory: the copy and the log */
  char target[64];           /* the private coordinator, 127.0.0.1:PORT */
  char job_id[128];          /* the newest job (a run directory's job) */
  pxctl_child_t coordd;
  char *env[2];              /* PRUNEX_CA, PRUNEX_TOKEN as they were (NULL: unset) */
};

static const char *const pxctl_offline_env[2] = {"PRUNEX_CA", "PRUNEX_TOKEN"};

/* What Ctrl-C (SIGINT, SIGTERM, SIGHUP) must not leave behind: the private
 * coordinator's process group and the files of the private directory,
 * spelled out beforehand so that the handler makes only async-signal-safe
 * calls (kill, unlink, rmdir, _exit). One private coordinator at a time. */
static volatile pid_t pxctl_offline_pid;
static char pxctl_offline_files[6][PATH_MAX + 16]; /* the copy and its side files, the log, the dir */

static void pxctl_offline_on_signal(int sig) {
  if (pxctl_offline_pid > 0) kill(-pxctl_offline_pid, SIGKILL);
  for (int i = 0; i < 5; i++) unlink(pxctl_offline_files[i]);
  rmdir(pxctl_offline_files[5]);
  _exit(128 + sig);
}

/* Arms (dir given) or disarms (NULL) the handler above; a signal the
 * process was started ignoring (nohup, a background job) stays ignored, and
 * disarming puts back what was there. */
static void pxctl_offline_guard(const char *dir, pid_t pid) {
  static const int sigs[3] = {SIGINT, SIGTERM, SIGHUP};
  static struct sigaction saved[3];
  static int armed;
  if (dir) {
    static const char *const names[5] = {"coordinator.db", "coordinator.db-wal",
                                         "coordinator.db-shm", "coordinator.db-journal",
                                         "pxcoordd.log"};
    for (int i = 0; i < 5; i++)
      pxctl_fmt(pxctl_offline_files[i], sizeof pxctl_offline_files[i], "%s/%s", dir, names[i]);
    pxctl_fmt(pxctl_offline_files[5], sizeof pxctl_offline_files[5], "%s", dir);
  }
  pxctl_offline_pid = pid;
  if (!dir || armed) {
    for (int i = 0; !dir && armed && i < 3; i++) sigaction(sigs[i], &saved[i], NULL);
    armed = dir != NULL;
    return;
  }
  struct sigaction sa;
  memset(&sa, 0, sizeof sa);
  sigemptyset(&sa.sa_mask);
  sa.sa_handler = pxctl_offline_on_signal;
  for (int i = 0; i < 3; i++) {
    sigaction(sigs[i], NULL, &saved[i]);
    if (saved[i].sa_handler != SIG_IGN) sigaction(sigs[i], &sa, NULL);
  }
  armed = 1;
}

/* ---- the copy ---------------------------------------------------------------- */

/* "file:" URI of path for sqlite3_open_v2 with immutable=1: every byte but
 * the unreserved ones and '/' percent-encoded. 0, or -1 when it does not
 * fit. */
static int pxctl_db_uri(const char *path, char *out, size_t cap) {
  static const char hex[] = "0123456789ABCDEF";
  size_t n = 0;
  const char *head = "file:";
  for (const char *p = head; *p && n < cap; p++) out[n++] = *p;
  for (const unsigned char *p = (const unsigned char *)path; *p; p++) {
    if (n + 4 >= cap) return -1;
    if ((*p >= 'A' && *p <= 'Z') || (*p >= 'a' && *p <= 'z') || (*p >= '0' && *p <= '9') ||
        strchr("/-._~", *p)) {
      out[n++] = (char)*p;
    } else {
      out[n++] = '%';
      out[n++] = hex[*p >> 4];
      out[n++] = hex[*p & 15];
    }
  }
  const char *tail = "?immutable=1";
  if (n + strlen(tail) + 1 > cap) return -1;
  memcpy(out + n, tail, strlen(tail) + 1);
  return 0;
}

/* Opens from for reading without writing anything beside it. A database
 * with no -wal file holds everything in the file: opened immutable (no
 * locks, no -shm). One with a -wal file (its pxcoordd is running, or was
 * killed) is opened read-only through its WAL, so that what was committed
 * is read and a transaction cut short is not. */
static int pxctl_open_source(const char *from, sqlite3 **src) {
  char wal[PATH_MAX + 8], uri[3 * PATH_MAX + 32];
  int has_wal = pxctl_fmt(wal, sizeof wal, "%s-wal", from) == 0 && access(wal, F_OK) == 0;
  if (!has_wal && pxctl_db_uri(from, uri, sizeof uri) == 0)
    return sqlite3_open_v2(uri, src, SQLITE_OPEN_READONLY | SQLITE_OPEN_URI, NULL);
  int rc = sqlite3_open_v2(from, src, SQLITE_OPEN_READONLY, NULL);
  if (rc == SQLITE_OK) sqlite3_busy_timeout(*src, 5000);
  return rc;
}

int pxctl_copy_db(const char *from, const char *to, char *err, size_t errcap) {
  sqlite3 *src = NULL, *dst = NULL;
  int fd = open(to, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
  if (fd < 0 || fchmod(fd, 0600) != 0) {
    pxctl_fmt(err, errcap, "%s: %s", to, strerror(errno));
    if (fd >= 0) close(fd);
    return -1;
  }
  close(fd);
  int rc = pxctl_open_source(from, &src);
  const char *what = from;
  if (rc == SQLITE_OK) {
    what = to;
    rc = sqlite3_open_v2(to, &dst, SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE, NULL);
  }
  if (rc == SQLITE_OK) {
    sqlite3_backup *b = sqlite3_backup_init(dst, "main", src, "main");
    if (b) {
      /* one step: one read transaction, a consistent snapshot even while a
       * live pxcoordd writes; a busy moment of its checkpoint is waited out */
      for (int tries = 0; tries < 50; tries++) {
        rc = sqlite3_backup_step(b, -1);
        if (rc != SQLITE_BUSY && rc != SQLITE_LOCKED) break;
        pxctl_sleep_ms(100);
      }
      sqlite3_backup_finish(b);
      rc = rc == SQLITE_DONE ? SQLITE_OK : rc;
      what = from;
    } else {
      rc = sqlite3_errcode(dst);
    }
  }
  if (rc != SQLITE_OK)
    pxctl_fmt(err, errcap, "cannot copy %s: %s", what, sqlite3_errstr(rc));
  sqlite3_close(src);
  sqlite3_close(dst);
  return rc == SQLITE_OK ? 0 : -1;
}

/* ---- what a JOB argument names ------------------------------------------------ */

static int pxctl_readable_file(const char *path) {
  struct stat sb;
  return stat(path, &sb) == 0 && S_ISREG(sb.st_mode) && access(path, R_OK) == 0;
}

int pxctl_run_dir_db(const char *arg, char *db, size_t cap) {
  int is_path = strchr(arg, '/') || !strcmp(arg, ".") || !strcmp(arg, "..");
  struct stat sb;
  if (stat(arg, &sb) != 0) {
    if (!is_path) return 0;
    pxctl_fail("%s: %s (expected the directory of a `pxctl run`, or a job id or name)", arg,
               strerror(errno));
    return -1;
  }
  if (!S_ISDIR(sb.st_mode)) {
    if (!is_path) return 0;
    pxctl_fail("%s is not a directory: give the output or run directory of a `pxctl run`, or "
               "--db %s JOB for a coordinator database file", arg, arg);
    return -1;
  }
  if (pxctl_fmt(db, cap, "%s/metrics/coordinator.db", arg) == 0 && pxctl_readable_file(db))
    return 1;
  if (pxctl_fmt(db, cap, "%s/coordinator.db", arg) == 0 && pxctl_readable_file(db)) return 1;
  if (!is_path) return 0; /* a job of that name, as before */
  pxctl_fail("%s is not the directory of a `pxctl run`: it has neither metrics/coordinator.db "
             "(an output directory) nor coordinator.db (a run directory, kept with --keep or left "
             "by a run that was stopped)", arg);
  return -1;
}

/* ---- the private coordinator ---------------------------------------------------- */

void pxctl_offline_close(pxctl_offline_t *off) {
  if (!off) return;
  pxctl_child_t *cs[1] = {&off->coordd};
  if (off->coordd.pid > 0) pxctl_stop_children(cs, 1, PXCTL_OFFLINE_GRACE_MS);
  if (off->dir[0]) pxctl_rmtree(off->dir, NULL);
  if (off->dir[0]) pxctl_offline_guard(NULL, 0);
  pxctl_set_offline_db(NULL);
  for (int i = 0; i < 2; i++) /* for a live coordinator asked next (plot) */
    if (off->env[i]) {
      setenv(pxctl_offline_env[i], off->env[i], 1);
      px_free(off->env[i]);
    }
  px_free(off);
}

/* The private directory and the copy of db in it. 0, or the exit status. */
static int pxctl_offline_copy(pxctl_offline_t *off, const char *db, char *copy, size_t cap) {
  const char *tmp = getenv("TMPDIR");
  if (!tmp || !tmp[0]) tmp = "/tmp";
  if (pxctl_fmt(off->dir, sizeof off->dir, "%s/pxctl-offline-XXXXXX", tmp) != 0 ||
      !mkdtemp(off->dir)) {
    int e = errno;
    off->dir[0] = '\0';
    return pxctl_fail("cannot make a private directory in %s: %s", tmp, strerror(e));
  }
  pxctl_offline_guard(off->dir, 0);
  char err[PATH_MAX + 256];
  if (pxctl_fmt(copy, cap, "%s/coordinator.db", off->dir) != 0 ||
      pxctl_fmt(off->coordd.log, sizeof off->coordd.log, "%s/pxcoordd.log", off->dir) != 0)
    return pxctl_fail("%s: path too long", off->dir);
  if (pxctl_copy_db(db, copy, err, sizeof err) != 0) return pxctl_fail("%s", err);
  return 0;
}

int pxctl_offline_open(pxctl_opts_t *o, const char *db, pxctl_offline_t **out) {
  *out = NULL;
  if (!pxctl_readable_file(db))
    return pxctl_fail("%s: %s", db, access(db, F_OK) ? strerror(errno) : "not a readable file");
  pxctl_offline_t *off = px_calloc(1, sizeof *off, "pxctl.offline");
  if (!off) return pxctl_fail("out of memory");
  char bin[PATH_MAX], copy[PATH_MAX], err[3 * PATH_MAX];
  int rc = pxctl_offline_copy(off, db, copy, sizeof copy);
  if (!rc && pxctl_find_program("pxcoordd", "coordinatord", bin, sizeof bin, err, sizeof err))
    rc = pxctl_fail("%s", err);
  if (!rc) {
    snprintf(off->coordd.what, sizeof off->coordd.what, "pxcoordd --read-only");
    char *argv[] = {bin, "--listen", "127.0.0.1:0", "--db", copy, "--read-only",
                    "--log-level", "warn", NULL};
    rc = pxctl_coordd_start(&off->coordd, argv, NULL, 0, off->target, sizeof off->target);
    pxctl_offline_guard(off->dir, off->coordd.pid);
    if (rc) rc = pxctl_fail("cannot read %s: its private read-only pxcoordd did not start", db);
  }
  if (rc) {
    pxctl_offline_close(off);
    return rc;
  }
  /* Plain text on loopback without tokens: a CA or token meant for a
   * shared coordinator must not be offered to it (put back on close). */
  for (int i = 0; i < 2; i++) {
    const char *v = getenv(pxctl_offline_env[i]);
    size_t n = v ? strlen(v) + 1 : 0;
    if (v && (off->env[i] = px_malloc(n, "pxctl.offline.env"))) memcpy(off->env[i], v, n);
    unsetenv(pxctl_offline_env[i]);
  }
  o->coordinator = off->target;
  pxctl_set_offline_db(db);
  *out = off;
  return 0;
}

/* The newest job of the database: the one job of a `pxctl run`. */
static int pxctl_offline_newest(pxctl_offline_t *off, const char *db) {
  px_rpc_channel_t *ch = NULL;
  if (px_rpc_channel_create(off->target, &ch) != PX_OK)
    return pxctl_fail("coordinator %s: %s", off->target, px_last_error());
  Prunex__V1__ListJobsRequest req = PRUNEX__V1__LIST_JOBS_REQUEST__INIT;
  req.limit = 1;
  Prunex__V1__ListJobsResponse *resp = NULL;
  int rc = 0;
  if (px_rpc_list_jobs(ch, &req, PXCTL_OFFLINE_RPC_MS, &resp) != PX_OK)
    rc = pxctl_rpc_fail(ch, NULL);
  else if (resp->n_jobs == 0)
    rc = pxctl_fail("%s holds no job (the run ended before it submitted one)", db);
  else
    snprintf(off->job_id, sizeof off->job_id, "%s", resp->jobs[0]->job_id);
  px_rpc_message_free(resp);
  px_rpc_channel_destroy(ch);
  return rc;
}

int pxctl_offline_begin(pxctl_opts_t *o, pxctl_offline_t **out) {
  *out = NULL;
  char db[PATH_MAX + 64];
  int dir = 0;
  if (o->db) {
    snprintf(db, sizeof db, "%s", o->db);
  } else if ((dir = pxctl_run_dir_db(o->pos[0], db, sizeof db)) <= 0) {
    return dir < 0 ? PXCTL_EXIT_FAIL : -1; /* -1: a job of a live coordinator */
  }
  if (o->follow)
    return pxctl_usage_error(o, "--follow: %s is read offline, where nothing is added any more",
                             dir ? o->pos[0] : o->db);
  int rc = pxctl_offline_open(o, db, out);
  if (!rc && dir) rc = pxctl_offline_newest(*out, db);
  if (rc) {
    pxctl_offline_close(*out);
    *out = NULL;
    return rc;
  }
  if (dir) {
    o->pos[0] = (*out)->job_id;
    /* logs: when the log store has nothing, the files of a kept run
     * directory's first node, never this host's agent's */
    static char work[PATH_MAX + 64];
    if (!o->work_dir &&
        pxctl_fmt(work, sizeof work, "%.*s/node-0", (int)(strlen(db) - 15), db) == 0)
      o->work_dir = work;
  }
  return -1;
}
