/* The tests' Python through one process per test program
 * (tests/px_py_server.py): see px_test_py in px_test_util.h. */
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include "px_test_util.h"

extern char **environ;

/* The server of this process (a forked child of a test does not use its
 * parent's: owner is the pid that started it). */
static struct {
  pid_t pid, owner;
  int fd;
} px__py = {0, 0, -1};

static void px__py_stop(void) {
  if (px__py.fd < 0 || px__py.owner != getpid()) return;
  close(px__py.fd); /* EOF: the server returns */
  px__py.fd = -1;
  int ws;
  waitpid(px__py.pid, &ws, 0);
}

static int px__py_start(void) {
  int sv[2];
  if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv) != 0) return -1;
  pid_t pid = fork();
  if (pid < 0) {
    close(sv[0]);
    close(sv[1]);
    return -1;
  }
  if (pid == 0) {
    int fd = dup(sv[1]); /* without CLOEXEC: the server's end */
    char arg[16];
    snprintf(arg, sizeof arg, "%d", fd);
    execl(px_test_python(), px_test_python(), PX_SOURCE_DIR "/tests/px_py_server.py", arg,
          (char *)NULL);
    fprintf(stderr, "px_test_py: cannot run %s: %s\n", px_test_python(), strerror(errno));
    _exit(127);
  }
  close(sv[1]);
  static int registered;
  if (!registered++) atexit(px__py_stop);
  px__py.pid = pid;
  px__py.owner = getpid();
  px__py.fd = sv[0];
  return 0;
}

static int px__send(int fd, const char *p, size_t n) {
  while (n) {
    ssize_t k = send(fd, p, n, MSG_NOSIGNAL);
    if (k < 0 && errno == EINTR) continue;
    if (k <= 0) return -1;
    p += k;
    n -= (size_t)k;
  }
  return 0;
}

/* The request: the command line, the working directory and the environment,
 * NUL-separated, after their length. */
static int px__py_request(const char *line) {
  char cwd[4096];
  if (!getcwd(cwd, sizeof cwd)) return -1;
  size_t n = strlen(line) + 1 + strlen(cwd);
  for (char **e = environ; *e; e++) n += 1 + strlen(*e);
  char *buf = malloc(n + 32), *p = buf;
  if (!buf) return -1;
  p += sprintf(p, "%zu\n%s", n, line);
  *p++ = '\0';
  p += sprintf(p, "%s", cwd);
  for (char **e = environ; *e; e++) {
    *p++ = '\0';
    p += sprintf(p, "%s", *e);
  }
  fflush(stdout); /* the server writes to the same stdout and stderr */
  fflush(stderr);
  int rc = px__send(px__py.fd, buf, (size_t)(p - buf));
  free(buf);
  return rc;
}

/* The exit status the server answers, or -1 when it is gone. */
static int px__py_answer(void) {
  char a[16];
  size_t n = 0;
  while (n + 1 < sizeof a) {
    ssize_t k = read(px__py.fd, a + n, 1);
    if (k < 0 && errno == EINTR) continue;
    if (k <= 0) return -1;
    if (a[n++] == '\n') break;
  }
  a[n] = '\0';
  return atoi(a);
}

int px_test_py(const char *line) {
  if ((px__py.fd < 0 || px__py.owner != getpid()) && px__py_start() != 0) {
    fprintf(stderr, "px_test_py: cannot start %s\n", px_test_python());
    return -1;
  }
  int rc = px__py_request(line) == 0 ? px__py_answer() : -1;
  if (rc < 0) { /* gone: the next call starts another */
    fprintf(stderr, "px_test_py: %s (tests/px_py_server.py) ended while running: %s\n",
            px_test_python(), line);
    close(px__py.fd);
    px__py.fd = -1;
    waitpid(px__py.pid, NULL, 0);
  }
  return rc;
}
