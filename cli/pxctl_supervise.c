/* The process supervisor of `pxctl run` (pxctl_supervise.h): children in
 * their own process groups, told of pxctl's death, noticed without being
 * reaped, stopped with a grace period and swept; the programs located; the
 * run directory removed. It knows nothing of jobs. */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <limits.h>
#include <poll.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "pxctl.h"
#include "pxctl_supervise.h"

volatile sig_atomic_t pxctl_signal, pxctl_nsignals;

int pxctl_fmt(char *out, size_t cap, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  int n = vsnprintf(out, cap, fmt, ap);
  va_end(ap);
  return n >= 0 && (size_t)n < cap ? 0 : -1;
}

void pxctl_on_signal(int sig) {
  if (!pxctl_signal) pxctl_signal = sig;
  pxctl_nsignals++;
}

void pxctl_sleep_ms(int ms) {
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
int pxctl_find_program(const char *name, const char *subdir, char *out, size_t cap,
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
            "PRUNEX_BIN_DIR to the directory of PruneX's programs",
            name, looked);
  return -1;
}

/* ---- children --------------------------------------------------------------- */

extern char **environ;

/* Starts path with argv in a new process group, stdin from /dev/null,
 * stderr (and stdout unless out_pipe is given) appended to c->log. With
 * hide_gpus the child sees no CUDA device (CUDA_VISIBLE_DEVICES=""). */
int pxctl_spawn(pxctl_child_t *c, const char *path, char *const argv[], int *out_pipe,
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

/* Reads one line from fd (the child's stdout pipe) until end (pxctl_mono_s
 * time) or a signal; the newline is dropped. 0 when a whole line came. */
int pxctl_read_line(int fd, char *line, size_t cap, double end) {
  size_t used = 0;
  line[0] = '\0';
  while (used < cap - 1 && !pxctl_signal) {
    int left = (int)((end - pxctl_mono_s()) * 1000);
    if (left <= 0) break;
    struct pollfd p = {fd, POLLIN, 0};
    int pr = poll(&p, 1, left < 200 ? left : 200);
    if (pr <= 0) continue; /* EINTR or nothing yet: the deadline decides */
    ssize_t n = read(fd, line + used, 1);
    if (n <= 0) break;
    if (line[used] == '\n') {
      line[used] = '\0';
      return 0;
    }
    line[++used] = '\0';
  }
  return -1;
}

int pxctl_coordd_start(pxctl_child_t *c, char *const argv[], char *hline, size_t hcap,
                       char *target, size_t tcap) {
  int fd = -1;
  if (pxctl_spawn(c, argv[0], argv, &fd, 0) != 0) return -1;
  char line[256];
  double end = pxctl_mono_s() + PXCTL_COORDD_START_S;
  pxctl_read_line(fd, line, sizeof line, end);
  if (hline) pxctl_read_line(fd, hline, hcap, end);
  close(fd);
  if (pxctl_signal) return -1;
  const char *colon = strrchr(line, ':');
  if (strncmp(line, "listening on ", 13) != 0 || !colon || atoi(colon + 1) <= 0) {
    char how[128] = "said nothing in time";
    if (pxctl_child_exited(c)) pxctl_describe_exit(c, how, sizeof how);
    pxctl_fail("the private pxcoordd (%s) did not start: it %s", argv[0], how);
    pxctl_tail(c->log, 15);
    return -1;
  }
  return pxctl_fmt(target, tcap, "127.0.0.1:%d", atoi(colon + 1));
}

/* Notices an exit without reaping (the zombie keeps the group id). */
int pxctl_child_exited(pxctl_child_t *c) {
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

void pxctl_describe_exit(const pxctl_child_t *c, char *buf, size_t cap) {
  if (WIFEXITED(c->status)) snprintf(buf, cap, "exited with code %d", WEXITSTATUS(c->status));
  else if (WIFSIGNALED(c->status))
    snprintf(buf, cap, "was killed by signal %d (%s)", WTERMSIG(c->status),
             strsignal(WTERMSIG(c->status)));
  else snprintf(buf, cap, "ended (status %d)", c->status);
}

/* Prints the last lines of a file to stderr, indented. */
void pxctl_tail(const char *path, int lines) {
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
void pxctl_signal_group(pxctl_child_t *c, int sig) {
  if (c->pid > 0 && !c->reaped) kill(-c->pid, sig);
}

/* Waits until every child in cs has exited or ms pass. */
void pxctl_wait_exits(pxctl_child_t **cs, int n, int ms) {
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
void pxctl_stop_children(pxctl_child_t **cs, int n, int grace_ms) {
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
void pxctl_sweep_orphans(void) {
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

void pxctl_rmtree(const char *dir, const char *keep) {
  pxctl_rm_keep = keep;
  nftw(dir, pxctl_rm, 32, FTW_DEPTH | FTW_PHYS);
  pxctl_rm_keep = NULL;
}

int pxctl_dir_has_files(const char *dir) {
  DIR *d = opendir(dir);
  if (!d) return 0;
  struct dirent *e;
  int any = 0;
  while (!any && (e = readdir(d))) any = strcmp(e->d_name, ".") && strcmp(e->d_name, "..");
  closedir(d);
  return any;
}

/* The newest *.safetensors under dir (depth-limited). */
void pxctl_find_model(const char *dir, int depth, char *best, size_t cap,
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

