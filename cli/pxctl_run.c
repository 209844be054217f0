/* `pxctl run SPEC.yaml`: the embedded mode. One command runs a job on this
 * machine with the real control plane: a private pxcoordd on a free
 * loopback port with its database in a fresh run directory, and one pxagent
 * per node of the spec (node-0 .. node-M-1, each with P CPU workers). It
 * waits for the nodes, submits, shows the progress, prints the summary the
 * coordinator computed and tears everything down.
 *
 * Process hygiene is the point of this file. Every child runs in its own
 * process group (so Ctrl-C at the terminal reaches pxctl only, and pxctl
 * decides: cancel the job, then stop agents, then the coordinator) and gets
 * PR_SET_PDEATHSIG, so that it is told even if pxctl is killed outright.
 * pxctl is a child subreaper: workers orphaned by a dying agent become its
 * children and are killed and reaped in the final sweep. A child's exit is
 * noticed with WNOWAIT so that its zombie keeps the process-group id
 * reserved until the group has been swept with SIGKILL. Every wait is
 * bounded; a second Ctrl-C cuts the grace periods short. */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <limits.h>
#include <poll.h>
#include <sched.h>
#include <signal.h>
#include <sqlite3.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "prunex/jobspec.h"
#include "prunex/export.h"
#include "pxctl.h"

#define PXCTL_COORDD_START_S 30.0   /* until pxcoordd prints its port */
#define PXCTL_NODES_READY_S 90.0    /* until every agent's node is READY */
#define PXCTL_AGENT_GRACE_MS 15000  /* SIGTERM -> SIGKILL for agents (they stop workers) */
#define PXCTL_COORDD_GRACE_MS 10000
#define PXCTL_RPC_MS 5000
#define PXCTL_RUN_MAX_NODES 256     /* agents started on this one machine */

typedef struct {
  pid_t pid;          /* 0: never started */
  char what[64];      /* "pxcoordd", "pxagent node-1" */
  char log[PATH_MAX];
  int exited;         /* noticed (WNOWAIT), not necessarily reaped */
  int reaped;
  int status;         /* wait status once exited */
} pxctl_child_t;

typedef struct {
  pxctl_opts_t *o;
  Prunex__V1__JobSpec *spec;
  char *spec_text;
  int M, P, T;
  char run_dir[PATH_MAX];
  char output_dir[PATH_MAX];
  int output_defaulted;     /* output_dir is RUN_DIR/output */
  char coordd_bin[PATH_MAX], agent_bin[PATH_MAX];
  pxctl_child_t coordd;
  pxctl_child_t *agents;
  char target[64];
  px_rpc_channel_t *ch;
  char job_id[128];
  const pxctl_child_t *died; /* a child that exited while the job ran */
  FILE *progress;            /* stderr */
  double t0;
} pxctl_run_t;

static volatile sig_atomic_t pxctl_signal, pxctl_nsignals;

/* snprintf for paths and messages: -1 when the result did not fit (paths
 * are then refused rather than used cut short). */
static int pxctl_fmt(char *out, size_t cap, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
static int pxctl_fmt(char *out, size_t cap, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  int n = vsnprintf(out, cap, fmt, ap);
  va_end(ap);
  return n >= 0 && (size_t)n < cap ? 0 : -1;
}

static void pxctl_on_signal(int sig) {
  if (!pxctl_signal) pxctl_signal = sig;
  pxctl_nsignals++;
}

static void pxctl_sleep_ms(int ms) {
  struct timespec ts = {ms / 1000, (long)(ms % 1000) * 1000000L};
  nanosleep(&ts, NULL); /* a signal cuts it short, as wanted */
}

/* ---- locating the programs ------------------------------------------------ */

static int pxctl_executable(const char *path) {
  struct stat sb;
  return stat(path, &sb) == 0 && S_ISREG(sb.st_mode) && access(path, X_OK) == 0;
}

/* $PRUNEX_BIN_DIR, the directory of pxctl itself, the build tree's sibling
 * (<dir>/../<subdir>), PATH. On failure err says where it looked. */
static int pxctl_find_program(const char *name, const char *subdir, char *out, size_t cap,
                              char *err, size_t errcap) {
  const char *bin = getenv("PRUNEX_BIN_DIR");
  if (bin && bin[0]) {
    if (pxctl_fmt(out, cap, "%s/%s", bin, name) == 0 && pxctl_executable(out)) return 0;
    pxctl_fmt(err, errcap, "cannot find %s: PRUNEX_BIN_DIR is %s and %s is not an executable there",
              name, bin, name);
    return -1;
  }
  char self[PATH_MAX], looked[3 * PATH_MAX] = "";
  ssize_t n = readlink("/proc/self/exe", self, sizeof self - 1);
  if (n > 0) {
    self[n] = '\0';
    char *slash = strrchr(self, '/');
    if (slash) *slash = '\0';
    if (pxctl_fmt(out, cap, "%s/%s", self, name) == 0 && pxctl_executable(out)) return 0;
    if (pxctl_fmt(out, cap, "%s/../%s/%s", self, subdir, name) == 0 && pxctl_executable(out)) {
      char real[PATH_MAX];
      if (realpath(out, real)) snprintf(out, cap, "%s", real);
      return 0;
    }
    pxctl_fmt(looked, sizeof looked, "%s, %s/../%s, ", self, self, subdir);
  }
  const char *path = getenv("PATH");
  if (path) {
    const char *p = path;
    while (*p) {
      const char *colon = strchr(p, ':');
      size_t len = colon ? (size_t)(colon - p) : strlen(p);
      if (len > 0 && len < PATH_MAX - 64) {
        if (pxctl_fmt(out, cap, "%.*s/%s", (int)len, p, name) == 0 && pxctl_executable(out))
          return 0;
      }
      p += len + (colon ? 1 : 0);
      if (!colon) break;
    }
  }
  pxctl_fmt(err, errcap,
            "cannot find %s: looked in %sand PATH; build it (cmake --build) or set "
            "PRUNEX_BIN_DIR to the directory that holds pxcoordd and pxagent",
            name, looked);
  return -1;
}

/* ---- children --------------------------------------------------------------- */

extern char **environ;

/* Starts path with argv in a new process group, stdin from /dev/null,
 * stderr (and stdout unless out_pipe is given) appended to c->log. With
 * hide_gpus the child sees no CUDA device (CUDA_VISIBLE_DEVICES=""). */
static int pxctl_spawn(pxctl_child_t *c, const char *path, char *const argv[], int *out_pipe,
                       int hide_gpus) {
  /* The environment is built here: nothing but async-signal-safe calls
   * may run in the child of a threaded process. */
  size_t nenv = 0;
  while (environ[nenv]) nenv++;
  char **envp = px_calloc(nenv + 2, sizeof *envp, "pxctl.envp");
  if (!envp) return pxctl_fail("out of memory"), -1;
  size_t k = 0;
  for (size_t i = 0; i < nenv; i++)
    if (!hide_gpus || strncmp(environ[i], "CUDA_VISIBLE_DEVICES=", 21) != 0)
      envp[k++] = environ[i];
  static char no_gpus[] = "CUDA_VISIBLE_DEVICES=";
  if (hide_gpus) envp[k++] = no_gpus;
  envp[k] = NULL;
  int rc = -1;
  int pfd[2] = {-1, -1};
  if (out_pipe && pipe2(pfd, O_CLOEXEC) != 0) {
    pxctl_fail("pipe: %s", strerror(errno));
    px_free(envp);
    return -1;
  }
  int logfd = open(c->log, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
  int nullfd = open("/dev/null", O_RDONLY | O_CLOEXEC);
  if (logfd < 0 || nullfd < 0) {
    pxctl_fail("%s: %s", logfd < 0 ? c->log : "/dev/null", strerror(errno));
    if (logfd >= 0) close(logfd);
    if (nullfd >= 0) close(nullfd);
    if (pfd[0] >= 0) close(pfd[0]), close(pfd[1]);
    px_free(envp);
    return -1;
  }
  pid_t parent = getpid();
  fflush(NULL);
  pid_t pid = fork();
  if (pid == 0) {
    /* Only async-signal-safe calls from here to exec. */
    setpgid(0, 0);
    prctl(PR_SET_PDEATHSIG, SIGTERM);
    if (getppid() != parent) _exit(127);
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = SIG_DFL;
    sigaction(SIGPIPE, &sa, NULL);
    sigaction(SIGINT, &sa, NULL);
    sigaction(SIGTERM, &sa, NULL);
    dup2(nullfd, 0);
    dup2(out_pipe ? pfd[1] : logfd, 1);
    dup2(logfd, 2);
    execve(path, argv, envp);
    static const char msg[] = "pxctl: exec failed\n";
    ssize_t w = write(2, msg, sizeof msg - 1);
    (void)w;
    _exit(127);
  }
  int err = errno;
  close(logfd);
  close(nullfd);
  if (out_pipe) close(pfd[1]);
  if (pid < 0) {
    if (out_pipe) close(pfd[0]);
    pxctl_fail("cannot start %s: %s", path, strerror(err));
  } else {
    setpgid(pid, pid); /* also here, so that it holds before either side runs on */
    c->pid = pid;
    if (out_pipe) *out_pipe = pfd[0];
    rc = 0;
  }
  px_free(envp);
  return rc;
}

/* Notices an exit without reaping (the zombie keeps the group id). */
static int pxctl_child_exited(pxctl_child_t *c) {
  if (!c->pid || c->exited) return c->pid ? 1 : 0;
  siginfo_t si;
  memset(&si, 0, sizeof si);
  if (waitid(P_PID, (id_t)c->pid, &si, WEXITED | WNOHANG | WNOWAIT) == 0 && si.si_pid == c->pid) {
    c->exited = 1;
    if (si.si_code == CLD_EXITED) c->status = (si.si_status & 0xff) << 8;
    else c->status = si.si_status & 0x7f;
  }
  return c->exited;
}

static void pxctl_describe_exit(const pxctl_child_t *c, char *buf, size_t cap) {
  if (WIFEXITED(c->status)) snprintf(buf, cap, "exited with code %d", WEXITSTATUS(c->status));
  else if (WIFSIGNALED(c->status))
    snprintf(buf, cap, "was killed by signal %d (%s)", WTERMSIG(c->status),
             strsignal(WTERMSIG(c->status)));
  else snprintf(buf, cap, "ended (status %d)", c->status);
}

/* Prints the last lines of a file to stderr, indented. */
static void pxctl_tail(const char *path, int lines) {
  FILE *f = fopen(path, "rb");
  if (!f) return;
  static char buf[16384];
  fseeko(f, 0, SEEK_END);
  off_t size = ftello(f);
  off_t from = size > (off_t)sizeof buf - 1 ? size - (off_t)sizeof buf + 1 : 0;
  fseeko(f, from, SEEK_SET);
  size_t n = fread(buf, 1, sizeof buf - 1, f);
  fclose(f);
  buf[n] = '\0';
  while (n > 0 && buf[n - 1] == '\n') buf[--n] = '\0';
  int seen = 0;
  size_t start = 0;
  for (size_t i = n; i > 0; i--)
    if (buf[i - 1] == '\n' && ++seen == lines) {
      start = i;
      break;
    }
  if (n == 0) return;
  fprintf(stderr, "---- last lines of %s\n", path);
  for (char *p = buf + start, *nl; p && *p; p = nl ? nl + 1 : NULL) {
    nl = strchr(p, '\n');
    fprintf(stderr, "  %.*s\n", nl ? (int)(nl - p) : (int)strlen(p), p);
  }
}

/* Sends sig to the child's whole group, unless it has been reaped. */
static void pxctl_signal_group(pxctl_child_t *c, int sig) {
  if (c->pid > 0 && !c->reaped) kill(-c->pid, sig);
}

/* Waits until every child in cs has exited or ms pass. */
static void pxctl_wait_exits(pxctl_child_t **cs, int n, int ms) {
  double end = pxctl_mono_s() + ms / 1000.0;
  for (;;) {
    int left = 0;
    for (int i = 0; i < n; i++) left += cs[i]->pid > 0 && !pxctl_child_exited(cs[i]);
    if (!left) return;
    if (pxctl_mono_s() >= end) return;
    if (pxctl_nsignals >= 2 && ms > 500) end = pxctl_mono_s(); /* second Ctrl-C: hurry */
    pxctl_sleep_ms(20);
  }
}

/* SIGTERM to each group, grace, SIGKILL to what is left, sweep the groups
 * (workers an agent left behind) while the zombies hold the ids, reap. */
static void pxctl_stop_children(pxctl_child_t **cs, int n, int grace_ms) {
  for (int i = 0; i < n; i++)
    if (cs[i]->pid > 0 && !pxctl_child_exited(cs[i])) pxctl_signal_group(cs[i], SIGTERM);
  pxctl_wait_exits(cs, n, pxctl_nsignals >= 2 ? 200 : grace_ms);
  for (int i = 0; i < n; i++)
    if (cs[i]->pid > 0 && !pxctl_child_exited(cs[i])) {
      fprintf(stderr, "pxctl: %s did not stop within %d ms; killing it\n", cs[i]->what, grace_ms);
      pxctl_signal_group(cs[i], SIGKILL);
    }
  pxctl_wait_exits(cs, n, 5000);
  for (int i = 0; i < n; i++) {
    pxctl_child_t *c = cs[i];
    if (c->pid <= 0 || c->reaped) continue;
    pxctl_signal_group(c, SIGKILL);
    int status;
    pid_t r = waitpid(c->pid, &status, c->exited ? 0 : WNOHANG);
    if (r == c->pid) {
      c->reaped = 1;
      c->exited = 1;
      c->status = status;
    } else {
      fprintf(stderr, "pxctl: %s (pid %d) could not be reaped\n", c->what, (int)c->pid);
    }
  }
}

/* Kills and reaps any other child: workers reparented to us (we are a
 * subreaper) after their agent died. */
static void pxctl_sweep_orphans(void) {
  pid_t self = getpid();
  for (int round = 0; round < 50; round++) {
    int found = 0;
    DIR *d = opendir("/proc");
    struct dirent *e;
    while (d && (e = readdir(d))) {
      char *end;
      long pid = strtol(e->d_name, &end, 10);
      if (*end || pid <= 0) continue;
      char path[64], buf[512];
      snprintf(path, sizeof path, "/proc/%ld/stat", pid);
      FILE *f = fopen(path, "r");
      if (!f) continue;
      size_t n = fread(buf, 1, sizeof buf - 1, f);
      fclose(f);
      buf[n] = '\0';
      char *rp = strrchr(buf, ')');
      char state;
      long ppid;
      if (!rp || sscanf(rp + 1, " %c %ld", &state, &ppid) != 2 || ppid != self) continue;
      found++;
      if (state != 'Z') kill((pid_t)pid, SIGKILL);
    }
    if (d) closedir(d);
    while (waitpid(-1, NULL, WNOHANG) > 0) {
    }
    if (!found) return;
    pxctl_sleep_ms(100);
  }
  fprintf(stderr, "pxctl: some child processes could not be reaped\n");
}

/* ---- the run directory ---------------------------------------------------------- */

static const char *pxctl_rm_keep; /* a path nftw must not remove (with its contents) */

static int pxctl_rm(const char *path, const struct stat *sb, int flag, struct FTW *ftw) {
  (void)sb;
  (void)flag;
  (void)ftw;
  if (pxctl_rm_keep) {
    size_t k = strlen(pxctl_rm_keep);
    if (!strncmp(path, pxctl_rm_keep, k) && (path[k] == '\0' || path[k] == '/')) return 0;
    if (!strncmp(pxctl_rm_keep, path, strlen(path)) && pxctl_rm_keep[strlen(path)] == '/')
      return 0; /* an ancestor of what we keep */
  }
  if (remove(path) != 0 && errno != ENOENT)
    fprintf(stderr, "pxctl: cannot remove %s: %s\n", path, strerror(errno));
  return 0;
}

static void pxctl_rmtree(const char *dir, const char *keep) {
  pxctl_rm_keep = keep;
  nftw(dir, pxctl_rm, 32, FTW_DEPTH | FTW_PHYS);
  pxctl_rm_keep = NULL;
}

static int pxctl_dir_has_files(const char *dir) {
  DIR *d = opendir(dir);
  if (!d) return 0;
  struct dirent *e;
  int any = 0;
  while (!any && (e = readdir(d))) any = strcmp(e->d_name, ".") && strcmp(e->d_name, "..");
  closedir(d);
  return any;
}

/* The newest *.safetensors under dir (depth-limited). */
static void pxctl_find_model(const char *dir, int depth, char *best, size_t cap,
                             struct timespec *best_t) {
  DIR *d = opendir(dir);
  if (!d) return;
  struct dirent *e;
  while ((e = readdir(d))) {
    if (!strcmp(e->d_name, ".") || !strcmp(e->d_name, "..")) continue;
    char path[PATH_MAX];
    if (pxctl_fmt(path, sizeof path, "%s/%s", dir, e->d_name) != 0) continue;
    struct stat sb;
    if (lstat(path, &sb) != 0) continue;
    if (S_ISDIR(sb.st_mode)) {
      if (depth > 0) pxctl_find_model(path, depth - 1, best, cap, best_t);
      continue;
    }
    size_t n = strlen(e->d_name);
    if (!S_ISREG(sb.st_mode) || n < 12 || strcmp(e->d_name + n - 12, ".safetensors")) continue;
    if (!best[0] || sb.st_mtim.tv_sec > best_t->tv_sec ||
        (sb.st_mtim.tv_sec == best_t->tv_sec && sb.st_mtim.tv_nsec > best_t->tv_nsec)) {
      snprintf(best, cap, "%s", path);
      *best_t = sb.st_mtim;
    }
  }
  closedir(d);
}

/* ---- steps -------------------------------------------------------------------------- */

/* Starts pxcoordd and reads the port it prints. */
static int pxctl_start_coordd(pxctl_run_t *r) {
  pxctl_child_t *c = &r->coordd;
  snprintf(c->what, sizeof c->what, "pxcoordd");
  char db[PATH_MAX];
  if (pxctl_fmt(c->log, sizeof c->log, "%s/pxcoordd.log", r->run_dir) != 0 ||
      pxctl_fmt(db, sizeof db, "%s/coordinator.db", r->run_dir) != 0)
    return -1; /* cannot happen: the run directory's length is checked */
  char *argv[] = {r->coordd_bin, "--listen", "127.0.0.1:0", "--db", db, "--log-level", "info",
                  NULL, NULL, NULL};
  if (r->o->http) { /* the HTTP listener: metrics, JSON, the live dashboard */
    argv[7] = "--http";
    argv[8] = (char *)r->o->http;
  }
  int fd = -1;
  if (pxctl_spawn(c, r->coordd_bin, argv, &fd, 0) != 0) return -1;
  char line[256];
  size_t used = 0;
  double end = pxctl_mono_s() + PXCTL_COORDD_START_S;
  while (used < sizeof line - 1 && !pxctl_signal) {
    int left = (int)((end - pxctl_mono_s()) * 1000);
    if (left <= 0) break;
    struct pollfd p = {fd, POLLIN, 0};
    int pr = poll(&p, 1, left < 200 ? left : 200);
    if (pr < 0 && errno == EINTR) continue;
    if (pr <= 0) continue;
    ssize_t n = read(fd, line + used, 1);
    if (n <= 0) break;
    if (line[used] == '\n') break;
    used++;
  }
  line[used] = '\0';
  char hline[256] = "";
  for (size_t hu = 0; r->o->http && hu < sizeof hline - 1 && !pxctl_signal;) {
    int left = (int)((end - pxctl_mono_s()) * 1000);
    struct pollfd p = {fd, POLLIN, 0};
    if (left <= 0 || poll(&p, 1, left < 200 ? left : 200) <= 0) {
      if (left <= 0) break;
      continue;
    }
    if (read(fd, hline + hu, 1) <= 0 || hline[hu] == '\n') {
      hline[hu] = '\0';
      break;
    }
    hline[++hu] = '\0';
  }
  close(fd);
  if (pxctl_signal) return -1;
  if (r->o->http && !strncmp(hline, "http on ", 8))
    fprintf(r->progress ? r->progress : stderr,
            "pxctl: dashboard at http://%s/ (Prometheus metrics at /metrics)\n", hline + 8);
  const char *colon = strrchr(line, ':');
  if (strncmp(line, "listening on ", 13) != 0 || !colon || atoi(colon + 1) <= 0) {
    char how[128] = "said nothing in time";
    if (pxctl_child_exited(c)) pxctl_describe_exit(c, how, sizeof how);
    pxctl_fail("the private pxcoordd (%s) did not start: it %s", r->coordd_bin, how);
    pxctl_tail(c->log, 15);
    return -1;
  }
  snprintf(r->target, sizeof r->target, "127.0.0.1:%d", atoi(colon + 1));
  return 0;
}

static int pxctl_start_agents(pxctl_run_t *r) {
  for (int i = 0; i < r->M; i++) {
    pxctl_child_t *c = &r->agents[i];
    char name[32], work[PATH_MAX], P[16], T[16];
    snprintf(name, sizeof name, "node-%d", i);
    snprintf(c->what, sizeof c->what, "pxagent %s", name);
    if (pxctl_fmt(c->log, sizeof c->log, "%s/pxagent-%s.log", r->run_dir, name) != 0 ||
        pxctl_fmt(work, sizeof work, "%s/%s", r->run_dir, name) != 0 || mkdir(work, 0755) != 0) {
      pxctl_fail("cannot make %s: %s", work, strerror(errno));
      return -1;
    }
    snprintf(P, sizeof P, "%d", r->P);
    snprintf(T, sizeof T, "%d", r->T);
    /* The job's output directory is outside the agents' work directories:
     * they must allow it (issue 12: agents refuse any other output_dir). */
    char *argv[] = {r->agent_bin, "--coordinator", r->target, "--name", name, "--cpu-workers", P,
                    "--threads-per-worker", T, "--work-dir", work, "--output-root",
                    r->output_dir, "--data-root", "/usr/share/datasets", NULL, NULL, NULL,
                    NULL, NULL};
    /* The user's own data set and imported model, wherever they are, are
     * theirs to read (pxagent reads dataset.path and model.onnx only under
     * its --data-root list, issue 26). */
    const char *data = r->spec->dataset ? r->spec->dataset->path : NULL;
    const char *onnx = r->spec->model ? r->spec->model->onnx : NULL;
    int na = 15;
    char mdir[PATH_MAX];
    if (data && data[0] == '/') {
      argv[na++] = "--data-root";
      argv[na++] = (char *)data;
    }
    if (onnx && onnx[0] == '/' && pxctl_fmt(mdir, sizeof mdir, "%s", onnx) == 0) {
      *strrchr(mdir, '/') = '\0';
      argv[na++] = "--data-root";
      argv[na++] = mdir[0] ? mdir : "/";
    }
    /* A CPU job on a machine with GPUs: the agents must offer CPU workers
     * (pxagent offers its GPUs whenever it sees any). */
    int hide_gpus = !strcmp(r->spec->cluster->device, "cpu");
    if (pxctl_spawn(c, r->agent_bin, argv, NULL, hide_gpus) != 0) return -1;
  }
  return 0;
}

/* A child that is gone while it should not be: records it, returns 1. */
static int pxctl_check_children(pxctl_run_t *r) {
  if (pxctl_child_exited(&r->coordd)) {
    r->died = &r->coordd;
    return 1;
  }
  for (int i = 0; i < r->M; i++)
    if (pxctl_child_exited(&r->agents[i])) {
      r->died = &r->agents[i];
      return 1;
    }
  return 0;
}

static void pxctl_report_death(const pxctl_run_t *r) {
  char how[128];
  pxctl_describe_exit(r->died, how, sizeof how);
  pxctl_fail("%s %s unexpectedly (its log: %s)", r->died->what, how, r->died->log);
  pxctl_tail(r->died->log, 20);
}

static int pxctl_wait_nodes(pxctl_run_t *r) {
  double end = pxctl_mono_s() + PXCTL_NODES_READY_S;
  int ready = 0;
  while (!pxctl_signal) {
    if (pxctl_check_children(r)) {
      pxctl_report_death(r);
      return -1;
    }
    Prunex__V1__ListNodesRequest req = PRUNEX__V1__LIST_NODES_REQUEST__INIT;
    req.state = PRUNEX__V1__NODE_STATE__NODE_STATE_READY;
    Prunex__V1__ListNodesResponse *resp = NULL;
    ready = 0;
    int short_of = -1, offered = 0, gpus = 0;
    if (px_rpc_list_nodes(r->ch, &req, PXCTL_RPC_MS, &resp) == PX_OK) {
      for (int i = 0; i < r->M; i++) {
        char name[32];
        snprintf(name, sizeof name, "node-%d", i);
        for (size_t k = 0; k < resp->n_nodes; k++)
          if (!strcmp(resp->nodes[k]->name, name)) {
            const Prunex__V1__Node *n = resp->nodes[k];
            ready++;
            if ((int)n->n_devices < r->P && short_of < 0) {
              short_of = i;
              offered = (int)n->n_devices;
              for (size_t d = 0; d < n->n_devices; d++)
                gpus += n->devices[d]->kind == PRUNEX__V1__DEVICE_KIND__DEVICE_KIND_CUDA;
            }
            break;
          }
      }
      px_rpc_message_free(resp);
    }
    if (short_of >= 0) {
      /* The job would wait for devices that never come. */
      pxctl_fail("node-%d offers %d device%s (%d GPU%s), but the spec asks for "
                 "cluster.workers_per_node = %d%s",
                 short_of, offered, offered == 1 ? "" : "s", gpus, gpus == 1 ? "" : "s", r->P,
                 gpus ? "; pxagent offers the GPUs it finds: set cluster.device: cpu for CPU "
                        "workers, or workers_per_node to the GPUs per node"
                      : "");
      return -1;
    }
    if (ready == r->M) return 0;
    if (pxctl_mono_s() >= end) {
      pxctl_fail("only %d of %d agents became READY within %.0f s (their logs: %s/pxagent-*.log)",
                 ready, r->M, PXCTL_NODES_READY_S, r->run_dir);
      for (int i = 0; i < r->M; i++) pxctl_tail(r->agents[i].log, 10);
      return -1;
    }
    pxctl_sleep_ms(100);
  }
  return -1;
}

static int pxctl_run_stop(void *arg) {
  pxctl_run_t *r = arg;
  return pxctl_signal || pxctl_check_children(r);
}

/* Prints the tail of each rank log of the job (for a job that failed: the
 * run directory is about to go). */
static void pxctl_rank_log_tails(const pxctl_run_t *r) {
  for (int i = 0; i < r->M; i++) {
    char dir[PATH_MAX];
    if (pxctl_fmt(dir, sizeof dir, "%s/node-%d/jobs/%s", r->run_dir, i, r->job_id) != 0) continue;
    DIR *d = opendir(dir);
    if (!d) continue;
    struct dirent *e;
    while ((e = readdir(d))) {
      if (strncmp(e->d_name, "rank-", 5) != 0) continue;
      char path[PATH_MAX];
      if (pxctl_fmt(path, sizeof path, "%s/%s", dir, e->d_name) == 0) pxctl_tail(path, 8);
    }
    closedir(d);
  }
}

/* ---- the result ------------------------------------------------------------------- */

typedef struct {
  const char *state;          /* job state name, or "ERROR" before a job existed */
  char reason[1024];
  char error[1024];           /* what went wrong in pxctl's own steps ("" if nothing) */
  int have_summary;
  pxctl_summary_t sum;
  char model_path[PATH_MAX];  /* "" when none (or removed) */
  int have_compact;           /* compact: the compact model written beside it */
  px_export_report_t compact;
  char name[256];
  int interrupted;
  int kept;                   /* the run directory is kept (entirely) */
  int output_kept;            /* only RUN_DIR/output is kept */
  char metrics_dir[PATH_MAX]; /* OUTPUT/metrics when the databases were exported, else "" */
} pxctl_result_t;

/* Copies one SQLite database with the online backup API (consistent, WAL
 * included; the source is only read). The copy is made 0600 whatever the
 * umask, as pxcoordd makes its own (and wants it to reopen it). 0 on
 * success. */
static int pxctl_copy_db(const char *from, const char *to) {
  sqlite3 *src = NULL, *dst = NULL;
  int fd = open(to, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
  if (fd < 0 || fchmod(fd, 0600) != 0) {
    if (fd >= 0) close(fd);
    return -1;
  }
  close(fd);
  int rc = sqlite3_open_v2(from, &src, SQLITE_OPEN_READONLY, NULL);
  if (rc == SQLITE_OK) rc = sqlite3_open_v2(to, &dst, SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE, NULL);
  if (rc == SQLITE_OK) {
    sqlite3_backup *b = sqlite3_backup_init(dst, "main", src, "main");
    if (b) {
      rc = sqlite3_backup_step(b, -1);
      sqlite3_backup_finish(b);
      rc = rc == SQLITE_DONE ? SQLITE_OK : rc;
    } else {
      rc = sqlite3_errcode(dst);
    }
  }
  sqlite3_close(src);
  sqlite3_close(dst);
  return rc == SQLITE_OK ? 0 : -1;
}

/* Keeps the run's metrics next to the model: OUTPUT/metrics/coordinator.db
 * (what `pxctl plot OUTPUT` and `pxctl plot --db` read) and each node's
 * metrics.db as node-I-metrics.db. Best effort: a failure is reported in
 * res->error and the run's outcome is unchanged. */
static void pxctl_export_metrics(const pxctl_run_t *r, pxctl_result_t *res) {
  char dir[PATH_MAX], from[PATH_MAX], to[PATH_MAX + 64];
  if (pxctl_fmt(dir, sizeof dir, "%s/metrics", r->output_dir) != 0) return;
  if (mkdir(dir, 0755) != 0 && errno != EEXIST) return;
  if (pxctl_fmt(from, sizeof from, "%s/coordinator.db", r->run_dir) != 0) return;
  snprintf(to, sizeof to, "%s/coordinator.db", dir);
  unlink(to);
  if (pxctl_copy_db(from, to) != 0) {
    snprintf(res->error, sizeof res->error, "could not copy the metrics database %.400s to %.400s", from,
             to);
    return;
  }
  for (int i = 0; i < r->M; i++) {
    char f2[PATH_MAX];
    snprintf(f2, sizeof f2, "%s/node-%d/metrics.db", r->run_dir, i);
    if (access(f2, R_OK) != 0) continue;
    snprintf(to, sizeof to, "%s/node-%d-metrics.db", dir, i);
    unlink(to);
    pxctl_copy_db(f2, to);
  }
  snprintf(res->metrics_dir, sizeof res->metrics_dir, "%s", dir);
}

static void pxctl_print_result(const pxctl_run_t *r, const pxctl_result_t *res) {
  double total = pxctl_mono_s() - r->t0;
  const pxctl_summary_t *s = &res->sum;
  if (r->o->json) {
    pxctl_json_t j;
    pxctl_json_init(&j, stdout);
    pxctl_json_begin_object(&j);
    pxctl_json_key(&j, "job_id");
    pxctl_json_string(&j, r->job_id[0] ? r->job_id : NULL);
    pxctl_json_key(&j, "name");
    pxctl_json_string(&j, res->name);
    pxctl_json_key(&j, "state");
    pxctl_json_string(&j, res->state);
    pxctl_json_key(&j, "reason");
    pxctl_json_string(&j, res->reason);
    pxctl_json_key(&j, "error");
    pxctl_json_string(&j, res->error[0] ? res->error : NULL);
    pxctl_json_key(&j, "interrupted");
    pxctl_json_bool(&j, res->interrupted);
    pxctl_json_key(&j, "nodes");
    pxctl_json_int(&j, r->M);
    pxctl_json_key(&j, "workers_per_node");
    pxctl_json_int(&j, r->P);
    pxctl_json_key(&j, "threads_per_worker");
    pxctl_json_int(&j, r->T);
    pxctl_json_key(&j, "iterations");
    pxctl_json_int(&j, s->iterations);
    pxctl_json_key(&j, "test_accuracy");
    if (res->have_summary && s->test_accuracy >= 0) pxctl_json_double(&j, s->test_accuracy);
    else pxctl_json_null(&j);
    pxctl_json_key(&j, "density");
    if (res->have_summary && s->iterations > 0) pxctl_json_double(&j, s->density);
    else pxctl_json_null(&j);
    pxctl_json_key(&j, "inter_bytes");
    pxctl_json_uint(&j, s->inter_bytes);
    pxctl_json_key(&j, "inter_bytes_dense");
    pxctl_json_uint(&j, s->inter_bytes_dense);
    pxctl_json_key(&j, "inter_reduction");
    if (s->inter_bytes_dense > 0)
      pxctl_json_double(&j, 1.0 - (double)s->inter_bytes / (double)s->inter_bytes_dense);
    else pxctl_json_null(&j);
    pxctl_json_key(&j, "intra_bytes");
    pxctl_json_uint(&j, s->intra_bytes);
    pxctl_json_key(&j, "wall_s");
    pxctl_json_double(&j, s->wall_s);
    pxctl_json_key(&j, "total_s");
    pxctl_json_double(&j, total);
    pxctl_json_key(&j, "model_path");
    pxctl_json_string(&j, res->model_path[0] ? res->model_path : NULL);
    pxctl_json_key(&j, "metrics_dir");
    pxctl_json_string(&j, res->metrics_dir[0] && (res->kept || res->output_kept ||
                                                  !r->output_defaulted)
                              ? res->metrics_dir
                              : NULL);
    if (res->have_compact) {
      pxctl_json_key(&j, "dense_params");
      pxctl_json_uint(&j, res->compact.dense_params);
      pxctl_json_key(&j, "dense_bytes");
      pxctl_json_uint(&j, res->compact.dense_bytes);
      pxctl_json_key(&j, "compact_params");
      pxctl_json_uint(&j, res->compact.compact_params);
      pxctl_json_key(&j, "compact_bytes");
      pxctl_json_uint(&j, res->compact.compact_bytes);
      pxctl_json_key(&j, "compact_path");
      pxctl_json_string(&j, res->model_path[0] ? res->compact.compact_path : NULL);
    }
    pxctl_json_key(&j, "run_dir");
    pxctl_json_string(&j, res->kept ? r->run_dir : NULL);
    pxctl_json_key(&j, "summary_source");
    pxctl_json_string(&j, res->have_summary ? s->source : NULL);
    pxctl_json_end_object(&j);
    pxctl_json_finish(&j);
    return;
  }
  printf("\n%s%s%s%s %s%s%s\n", r->job_id[0] ? r->job_id : "(no job)", res->name[0] ? " (" : "",
         res->name, res->name[0] ? ")" : "", res->state, res->reason[0] ? ": " : "", res->reason);
  if (res->error[0]) printf("  error               %s\n", res->error);
  if (res->have_summary) {
    char acc[32], inter[32], dense[32], intra[32], wall[32], tot[32];
    pxctl_fmt_pct(acc, sizeof acc, s->test_accuracy);
    pxctl_fmt_bytes(inter, sizeof inter, s->inter_bytes);
    pxctl_fmt_bytes(dense, sizeof dense, s->inter_bytes_dense);
    pxctl_fmt_bytes(intra, sizeof intra, s->intra_bytes);
    pxctl_fmt_duration(wall, sizeof wall, s->wall_s);
    pxctl_fmt_duration(tot, sizeof tot, total);
    printf("  cluster             %d node%s x %d worker%s (%s), %d thread%s each\n", r->M,
           r->M == 1 ? "" : "s", r->P, r->P == 1 ? "" : "s", r->spec->cluster->device, r->T,
           r->T == 1 ? "" : "s");
    printf("  iterations          %d\n", s->iterations);
    printf("  test accuracy       %s\n", acc);
    if (s->iterations > 0)
      printf("  density             %.4f (%.1f%% kept)\n", s->density, 100.0 * s->density);
    if (s->inter_bytes_dense > 0)
      printf("  inter-node traffic  %s; dense synchronisation would have sent %s "
             "(%.1f%% less, %.1fx)\n",
             inter, dense, 100.0 * (1.0 - (double)s->inter_bytes / (double)s->inter_bytes_dense),
             s->inter_bytes ? (double)s->inter_bytes_dense / (double)s->inter_bytes : 0.0);
    else printf("  inter-node traffic  %s\n", inter);
    printf("  intra-node traffic  %s\n", intra);
    printf("  wall time           %s (%s with start-up and teardown)\n", wall, tot);
  }
  if (res->model_path[0]) printf("  model               %s\n", res->model_path);
  if (res->have_compact)
    printf("  model size          %zu parameters, %.2f MB dense; %zu parameters (%.1f%%), "
           "%.2f MB compact%s%s\n",
           res->compact.dense_params, res->compact.dense_bytes / 1e6,
           res->compact.compact_params,
           100.0 * (double)res->compact.compact_params / (double)res->compact.dense_params,
           res->compact.compact_bytes / 1e6, res->model_path[0] ? " in " : "",
           res->model_path[0] ? res->compact.compact_path : "");
  if (!res->model_path[0] && res->have_summary && !strcmp(res->state, "SUCCEEDED"))
    printf("  model               none kept (use --keep or --output DIR)\n");
  if (res->metrics_dir[0] && (res->kept || res->output_kept || !r->output_defaulted))
    printf("  metrics             %s (pxctl plot %s --out DIR)\n", res->metrics_dir,
           r->output_dir);
  if (res->kept) printf("  run directory       %s (kept)\n", r->run_dir);
  else if (res->output_kept) printf("  run directory       removed, except %s\n", r->output_dir);
  fflush(stdout);
}

/* ---- the command ------------------------------------------------------------------------ */

static int pxctl_cpu_count(void) {
  cpu_set_t set;
  if (sched_getaffinity(0, sizeof set, &set) == 0) {
    int n = CPU_COUNT(&set);
    if (n > 0) return n;
  }
  long n = sysconf(_SC_NPROCESSORS_ONLN);
  return n > 0 ? (int)n : 1;
}

static int pxctl_make_absolute(const char *path, char *out, size_t cap) {
  if (path[0] == '/') return snprintf(out, cap, "%s", path) < (int)cap ? 0 : -1;
  char cwd[PATH_MAX];
  if (!getcwd(cwd, sizeof cwd)) return -1;
  return snprintf(out, cap, "%s/%s", cwd, path) < (int)cap ? 0 : -1;
}

int pxctl_cmd_run(pxctl_opts_t *o) {
  /* The private coordinator is plain text on loopback with no tokens: a
   * CA or token meant for a shared coordinator must not reach its clients
   * (this process, the agents, the workers). */
  unsetenv("PRUNEX_CA");
  unsetenv("PRUNEX_TOKEN");
  pxctl_run_t r;
  memset(&r, 0, sizeof r);
  r.o = o;
  r.progress = stderr;
  r.t0 = pxctl_mono_s();
  pxctl_result_t res;
  memset(&res, 0, sizeof res);
  res.state = "ERROR";
  int rc = pxctl_load_spec(o->pos[0], &r.spec, &r.spec_text);
  if (rc) return rc;
  snprintf(res.name, sizeof res.name, "%s", r.spec->name);
  char *spec_output = r.spec->output_dir; /* restored before the spec is freed */
  int exit_code = PXCTL_EXIT_FAIL;
  const char *step = "";

  r.M = r.spec->cluster->nodes;
  r.P = r.spec->cluster->workers_per_node;
  if (r.M > PXCTL_RUN_MAX_NODES) {
    fprintf(stderr,
            "pxctl: %s: cluster.nodes = %d: pxctl run starts one agent per node on this "
            "machine and takes at most %d; submit the job to a cluster's coordinator instead\n",
            o->pos[0], r.M, PXCTL_RUN_MAX_NODES);
    px_jobspec_free(r.spec);
    px_free(r.spec_text);
    return PXCTL_EXIT_USAGE;
  }
  int cores = pxctl_cpu_count();
  r.T = r.spec->cluster->threads_per_worker > 0 ? r.spec->cluster->threads_per_worker
                                                : cores / (r.M * r.P);
  if (r.T < 1) r.T = 1;
  r.agents = px_calloc((size_t)r.M, sizeof *r.agents, "pxctl.agents");
  if (!r.agents) {
    px_jobspec_free(r.spec);
    px_free(r.spec_text);
    return pxctl_fail("out of memory");
  }
  if (pxctl_find_program("pxcoordd", "coordinatord", r.coordd_bin, sizeof r.coordd_bin,
                         res.error, sizeof res.error) != 0 ||
      pxctl_find_program("pxagent", "agent", r.agent_bin, sizeof r.agent_bin, res.error,
                         sizeof res.error) != 0) {
    pxctl_fail("%s", res.error);
    goto teardown; /* nothing started: it only reports */
  }

  /* From here on every exit goes through teardown. */
  struct sigaction sa;
  memset(&sa, 0, sizeof sa);
  sa.sa_handler = pxctl_on_signal;
  sigemptyset(&sa.sa_mask);
  sigaction(SIGINT, &sa, NULL);
  sigaction(SIGTERM, &sa, NULL);
  sigaction(SIGHUP, &sa, NULL);
  prctl(PR_SET_CHILD_SUBREAPER, 1);

  const char *tmp = o->work_dir ? o->work_dir : getenv("TMPDIR");
  if (!tmp || !tmp[0]) tmp = "/tmp";
  char base[PATH_MAX];
  /* Room is left for the names made inside the run directory. */
  errno = 0;
  if (pxctl_make_absolute(tmp, base, sizeof base) != 0 || strlen(base) > PATH_MAX - 512 ||
      pxctl_fmt(r.run_dir, sizeof r.run_dir, "%s/pxctl-run-XXXXXX", base) != 0 ||
      !mkdtemp(r.run_dir)) {
    pxctl_fmt(res.error, sizeof res.error, "cannot make a run directory in %s: %s", tmp,
              errno ? strerror(errno) : "path too long");
    pxctl_fail("%s", res.error);
    r.run_dir[0] = '\0';
    goto teardown;
  }
  if (o->output || spec_output[0]) {
    if (pxctl_make_absolute(o->output ? o->output : spec_output, r.output_dir,
                            sizeof r.output_dir) != 0) {
      snprintf(res.error, sizeof res.error, "output directory: path too long");
      pxctl_fail("%s", res.error);
      goto teardown;
    }
  } else {
    pxctl_fmt(r.output_dir, sizeof r.output_dir, "%s/output", r.run_dir);
    r.output_defaulted = 1;
  }
  if (mkdir(r.output_dir, 0755) != 0 && errno != EEXIST) {
    pxctl_fmt(res.error, sizeof res.error, "cannot make the output directory %s: %s",
              r.output_dir, strerror(errno));
    pxctl_fail("%s", res.error);
    goto teardown;
  }
  r.spec->output_dir = r.output_dir;
  if (!strcmp(r.spec->cluster->device, "cpu"))
    fprintf(r.progress, "pxctl: run directory %s; %d node%s x %d CPU worker%s, %d thread%s each\n",
            r.run_dir, r.M, r.M == 1 ? "" : "s", r.P, r.P == 1 ? "" : "s", r.T,
            r.T == 1 ? "" : "s");
  else /* cuda or auto: the agents offer the GPUs they find */
    fprintf(r.progress, "pxctl: run directory %s; %d node%s x %d worker%s on device %s\n",
            r.run_dir, r.M, r.M == 1 ? "" : "s", r.P, r.P == 1 ? "" : "s",
            r.spec->cluster->device);

  step = "starting the coordinator";
  if (pxctl_start_coordd(&r) != 0) goto step_failed;
  if (px_rpc_channel_create(r.target, &r.ch) != PX_OK) {
    pxctl_fail("coordinator %s: %s", r.target, px_last_error());
    goto step_failed;
  }
  step = "starting the agents";
  if (pxctl_start_agents(&r) != 0) goto step_failed;
  step = "waiting for the agents";
  if (pxctl_wait_nodes(&r) != 0) goto step_failed;

  step = "submitting the job";
  {
    Prunex__V1__SubmitJobRequest req = PRUNEX__V1__SUBMIT_JOB_REQUEST__INIT;
    req.spec = r.spec;
    req.spec_yaml = r.spec_text;
    Prunex__V1__SubmitJobResponse *resp = NULL;
    if (pxctl_signal) goto step_failed;
    if (px_rpc_submit_job(r.ch, &req, PXCTL_RPC_MS, &resp) != PX_OK) {
      pxctl_rpc_fail(r.ch, NULL);
      goto step_failed;
    }
    snprintf(r.job_id, sizeof r.job_id, "%s", resp->job_id);
    px_rpc_message_free(resp);
  }
  fprintf(r.progress, "pxctl: submitted %s to the private coordinator %s\n", r.job_id, r.target);

  step = "running the job";
  {
    void *holder = NULL;
    const Prunex__V1__Job *fin = NULL;
    px_status_t st = pxctl_watch(r.ch, r.job_id, r.progress, pxctl_run_stop, &r, &holder, &fin);
    if (st == PX_OK && fin) {
      res.state = px_rpc_job_state_name(fin->state);
      snprintf(res.reason, sizeof res.reason, "%s", fin->reason);
      if (pxctl_job_summary(r.ch, fin, &res.sum) == PX_OK) res.have_summary = 1;
      if (fin->state == PRUNEX__V1__JOB_STATE__JOB_STATE_SUCCEEDED) exit_code = PXCTL_EXIT_OK;
      else pxctl_rank_log_tails(&r);
    } else if ((st == PX_ERR_STATE && r.died) || (!pxctl_signal && pxctl_check_children(&r))) {
      pxctl_report_death(&r);
      snprintf(res.error, sizeof res.error, "%s ended unexpectedly", r.died->what);
    } else if (st != PX_ERR_STATE) {
      pxctl_rpc_fail(r.ch, r.job_id);
      snprintf(res.error, sizeof res.error, "lost the job's progress: %s", px_last_error());
    }
    px_rpc_message_free(holder);
  }
  goto teardown;

step_failed:
  if (!pxctl_signal && !res.error[0]) {
    const char *why = pxctl_last_failure();
    snprintf(res.error, sizeof res.error, "failed %s%s%s", step, why[0] ? ": " : "", why);
  }

teardown:
  if (pxctl_signal) {
    res.interrupted = 1;
    exit_code = 128 + pxctl_signal;
    const char *sig = pxctl_signal == SIGINT    ? "SIGINT"
                      : pxctl_signal == SIGTERM ? "SIGTERM"
                                                : "SIGHUP";
    fprintf(stderr, "\npxctl: %s: stopping%s\n", sig,
            r.job_id[0] ? " (cancelling the job first)" : "");
    if (!res.error[0]) snprintf(res.error, sizeof res.error, "interrupted by %s", sig);
    if (!r.job_id[0]) res.state = "INTERRUPTED";
  }
  /* A job that is still going (interrupted, or a process died) is
   * cancelled, so that the agents stop its workers themselves. */
  if (r.job_id[0] && r.ch && !pxctl_child_exited(&r.coordd)) {
    Prunex__V1__Job *job = NULL;
    if (px_rpc_get_job(r.ch, r.job_id, PXCTL_RPC_MS, &job) == PX_OK) {
      int s = job->state;
      Prunex__V1__CancelJobResponse *cr = NULL;
      const Prunex__V1__Job *last = job;
      if (s != PRUNEX__V1__JOB_STATE__JOB_STATE_SUCCEEDED &&
          s != PRUNEX__V1__JOB_STATE__JOB_STATE_FAILED &&
          s != PRUNEX__V1__JOB_STATE__JOB_STATE_CANCELLED) {
        const char *why = pxctl_signal ? "pxctl run was interrupted" : "pxctl run is stopping";
        if (px_rpc_cancel_job(r.ch, r.job_id, why, PXCTL_RPC_MS, &cr) == PX_OK && cr->job)
          last = cr->job;
      }
      res.state = px_rpc_job_state_name(last->state);
      snprintf(res.reason, sizeof res.reason, "%s", last->reason);
      /* The figures so far, for a job that did not finish. */
      if (!res.have_summary && pxctl_job_summary(r.ch, last, &res.sum) == PX_OK)
        res.have_summary = 1;
      px_rpc_message_free(cr);
      px_rpc_message_free(job);
    }
  }
  {
    pxctl_child_t *cs[PXCTL_RUN_MAX_NODES];
    int n = 0;
    for (int i = 0; i < r.M; i++) cs[n++] = &r.agents[i];
    pxctl_stop_children(cs, n, PXCTL_AGENT_GRACE_MS);
    /* The channel goes before the coordinator, so that it shuts down
     * without a client attached. */
    px_rpc_channel_destroy(r.ch);
    r.ch = NULL;
    cs[0] = &r.coordd;
    pxctl_stop_children(cs, 1, PXCTL_COORDD_GRACE_MS);
    pxctl_sweep_orphans();
  }
  if (r.job_id[0] && r.output_dir[0]) pxctl_export_metrics(&r, &res);
  if (res.have_summary) {
    snprintf(res.model_path, sizeof res.model_path, "%s", res.sum.model_path);
    if (!res.model_path[0]) {
      struct timespec t = {0, 0};
      pxctl_find_model(r.output_dir, 3, res.model_path, sizeof res.model_path, &t);
      if (!res.model_path[0] && r.run_dir[0])
        pxctl_find_model(r.run_dir, 5, res.model_path, sizeof res.model_path, &t);
    }
    /* the compact model beside the dense one, and both sizes for the summary */
    if (res.model_path[0] && !strcmp(res.state, "SUCCEEDED")) {
      char dir[PATH_MAX];
      snprintf(dir, sizeof dir, "%s", res.model_path);
      char *slash = strrchr(dir, '/');
      if (slash) *slash = '\0';
      else snprintf(dir, sizeof dir, ".");
      const char *ds = r.spec && r.spec->dataset ? r.spec->dataset->name : NULL;
      if (px_export_file(res.model_path, dir, 0, ds && ds[0] ? ds : NULL, &res.compact) == PX_OK)
        res.have_compact = 1;
      else
        fprintf(stderr, "pxctl: compact model: %s\n", px_last_error());
    }
  }
  if (r.run_dir[0]) {
    if (o->keep) {
      res.kept = 1;
    } else {
      const char *keep = NULL;
      if (exit_code == PXCTL_EXIT_OK && r.output_defaulted && pxctl_dir_has_files(r.output_dir))
        keep = r.output_dir;
      pxctl_rmtree(r.run_dir, keep);
      res.output_kept = keep != NULL;
      /* A model that lived in what was removed is gone. */
      size_t k = strlen(r.run_dir);
      if (res.model_path[0] && !strncmp(res.model_path, r.run_dir, k) &&
          !(keep && !strncmp(res.model_path, keep, strlen(keep))))
        res.model_path[0] = '\0';
    }
  }
  if (r.spec) r.spec->output_dir = spec_output;
  pxctl_print_result(&r, &res);
  px_free(r.agents);
  px_jobspec_free(r.spec);
  px_free(r.spec_text);
  return exit_code;
}
