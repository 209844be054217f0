/* Helpers shared by pxagent and pxworker; see util.h. */
#include "util.h"

#include <errno.h>
#include <fcntl.h>
#include <linux/openat2.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include "prunex/rpc.h"

int64_t pxa_now_ms(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

int64_t pxa_unix_ms(void) {
  struct timespec ts;
  clock_gettime(CLOCK_REALTIME, &ts);
  return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

void pxa_sleep_ms(int64_t ms) {
  if (ms <= 0) return;
  struct timespec ts = {(time_t)(ms / 1000), (long)(ms % 1000) * 1000000L};
  while (nanosleep(&ts, &ts) != 0 && errno == EINTR) {
  }
}

void pxa_cond_wait_ms(pthread_cond_t *cv, pthread_mutex_t *mu, int64_t ms) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  ts.tv_sec += (time_t)(ms / 1000);
  ts.tv_nsec += (long)(ms % 1000) * 1000000L;
  if (ts.tv_nsec >= 1000000000L) {
    ts.tv_sec++;
    ts.tv_nsec -= 1000000000L;
  }
  pthread_cond_timedwait(cv, mu, &ts);
}

int pxa_parse_int(const char *s, int lo, int hi, int *out) {
  char *end;
  errno = 0;
  long v = strtol(s, &end, 10);
  if (errno || end == s || *end || v < lo || v > hi) return -1;
  *out = (int)v;
  return 0;
}

px_status_t pxa_read_file(const char *path, size_t max, uint8_t **data, size_t *len) {
  *data = NULL;
  *len = 0;
  FILE *f = fopen(path, "rb");
  if (!f) return px_set_error(PX_ERR_IO, "%s: cannot open: %s", path, strerror(errno));
  size_t cap = 4096, used = 0;
  uint8_t *buf = px_malloc(cap + 1, "agent.file");
  if (!buf) {
    fclose(f);
    return PX_ERR_NOMEM;
  }
  for (;;) {
    if (used == cap) {
      if (cap >= max) {
        px_free(buf);
        fclose(f);
        return px_set_error(PX_ERR_FORMAT, "%s: larger than %zu bytes", path, max);
      }
      cap = cap * 2 > max ? max : cap * 2;
      uint8_t *nb = px_realloc(buf, cap + 1, "agent.file");
      if (!nb) {
        px_free(buf);
        fclose(f);
        return PX_ERR_NOMEM;
      }
      buf = nb;
    }
    size_t r = fread(buf + used, 1, cap - used, f);
    used += r;
    if (r == 0) break;
  }
  int err = ferror(f);
  fclose(f);
  if (err) {
    px_free(buf);
    return px_set_error(PX_ERR_IO, "%s: read error", path);
  }
  buf[used] = '\0';
  *data = buf;
  *len = used;
  return PX_OK;
}

size_t pxa_file_tail(const char *path, char *buf, size_t cap) {
  if (cap == 0) return 0;
  buf[0] = '\0';
  int fd = open(path, O_RDONLY | O_CLOEXEC);
  if (fd < 0) return 0;
  struct stat sb;
  if (fstat(fd, &sb) != 0) {
    close(fd);
    return 0;
  }
  size_t want = cap - 1;
  off_t start = sb.st_size > (off_t)want ? sb.st_size - (off_t)want : 0;
  size_t n = 0;
  while (n < want) {
    ssize_t r = pread(fd, buf + n, want - n, start + (off_t)n);
    if (r < 0 && errno == EINTR) continue;
    if (r <= 0) break;
    n += (size_t)r;
  }
  close(fd);
  buf[n] = '\0';
  size_t off = 0;
  if (start > 0) {
    /* drop the partial first line */
    char *nl = memchr(buf, '\n', n);
    if (nl && (size_t)(nl - buf) + 1 < n) off = (size_t)(nl - buf) + 1;
  }
  /* trailing newlines add nothing to a reason */
  while (n > off && (buf[n - 1] == '\n' || buf[n - 1] == '\r')) n--;
  if (off) memmove(buf, buf + off, n - off);
  n -= off;
  buf[n] = '\0';
  return n;
}

int pxa_cpu_count(void) {
  long n = sysconf(_SC_NPROCESSORS_ONLN);
  return n > 0 ? (int)n : 1;
}

/* 1 when path is dir or below it, on a component boundary ("/a/b" is
 * under "/a" and "/a/", not under "/ab"). */
static int pxa_path_under(const char *path, const char *dir) {
  size_t n = strlen(dir);
  while (n > 1 && dir[n - 1] == '/') n--;
  if (strncmp(path, dir, n) != 0) return 0;
  return path[n] == '\0' || path[n] == '/' || (n == 1 && dir[0] == '/');
}

int pxa_output_dir_allowed(const char *out, const char *work_dir, const char *const *roots,
                           int nroots) {
  /* no ".." component anywhere */
  for (const char *p = out; *p;) {
    const char *e = strchr(p, '/');
    size_t len = e ? (size_t)(e - p) : strlen(p);
    if (len == 2 && p[0] == '.' && p[1] == '.') return 0;
    if (!e) break;
    p = e + 1;
  }
  if (out[0] != '/') return 1; /* relative: under the job's directory in the work dir */
  if (pxa_path_under(out, work_dir)) return 1;
  for (int i = 0; i < nroots; i++)
    if (pxa_path_under(out, roots[i])) return 1;
  return 0;
}

/* ---- paths that stay inside their root ------------------------------------------ */

/* openat2(dirfd, rel, O_DIRECTORY, RESOLVE_BENEATH | RESOLVE_NO_MAGICLINKS):
 * every symbolic link is followed only while it stays below dirfd (an
 * absolute link or '..' past it fails with EXDEV). Kernels before 5.6
 * (ENOSYS): a walk that opens each component with O_NOFOLLOW, so no
 * link at all is followed. */
static int pxa_open_dir_beneath(int dirfd, const char *rel) {
  struct open_how how = {.flags = O_RDONLY | O_DIRECTORY | O_CLOEXEC,
                         .resolve = RESOLVE_BENEATH | RESOLVE_NO_MAGICLINKS};
  long fd = syscall(SYS_openat2, dirfd, rel, &how, sizeof how);
  if (fd >= 0 || errno != ENOSYS) return (int)fd;
  char buf[4096];
  if (snprintf(buf, sizeof buf, "%s", rel) >= (int)sizeof buf) {
    errno = ENAMETOOLONG;
    return -1;
  }
  int cur = dup(dirfd);
  for (char *save = NULL, *c = strtok_r(buf, "/", &save); cur >= 0 && c;
       c = strtok_r(NULL, "/", &save)) {
    if (!strcmp(c, "..")) {
      close(cur);
      errno = EXDEV;
      return -1;
    }
    int next = openat(cur, c, O_RDONLY | O_DIRECTORY | O_CLOEXEC | O_NOFOLLOW);
    int err = errno;
    close(cur);
    errno = err;
    cur = next;
  }
  return cur;
}

/* For the message of a refusal by RESOLVE_BENEATH (EXDEV, ELOOP): 1 when
 * path, followed through its links, stays inside root, so that what
 * refused it is an absolute link (RESOLVE_BENEATH follows none, even to a
 * place inside the root); 0 when it leads out or cannot be resolved. Only
 * words depend on it: the path is refused either way. */
static int pxa_inside_through_absolute_link(const char *root, const char *path) {
  char real_root[4096], real[4096], target[4096];
  if (!realpath(root, real_root)) return 0;
  if (realpath(path, real)) return pxa_path_under(real, real_root);
  /* a link to a place not made yet: its own target, as written */
  ssize_t n = readlink(path, target, sizeof target - 1);
  if (n <= 0 || target[0] != '/') return 0;
  target[n] = '\0';
  return pxa_path_under(target, root) || pxa_path_under(target, real_root);
}

px_status_t pxa_mkdirs_beneath(const char *root, const char *dir) {
  size_t rn = strlen(root);
  while (rn > 1 && root[rn - 1] == '/') rn--;
  if (strncmp(dir, root, rn) != 0 || (dir[rn] != '\0' && dir[rn] != '/' && rn > 1))
    return px_set_error(PX_ERR_INVALID, "%s is not under %s", dir, root);
  const char *rel = dir + rn;
  while (*rel == '/') rel++;
  int rootfd = open(root, O_RDONLY | O_DIRECTORY | O_CLOEXEC); /* the root may be a link */
  if (rootfd < 0)
    return px_set_error(PX_ERR_IO, "%s: cannot open the directory: %s", root, strerror(errno));
  char prefix[4096];
  px_status_t st = PX_OK;
  size_t n = strlen(rel);
  if (n >= sizeof prefix) st = px_set_error(PX_ERR_INVALID, "%s: path too long", dir);
  /* each prefix of rel in turn: opened beneath the root, or made there */
  for (size_t i = 1; st == PX_OK && i <= n; i++) {
    if (rel[i] != '/' && rel[i] != '\0') continue;
    memcpy(prefix, rel, i);
    prefix[i] = '\0';
    int fd = pxa_open_dir_beneath(rootfd, prefix);
    if (fd < 0 && errno == ENOENT) {
      /* make the last component inside its (checked) parent */
      char *slash = strrchr(prefix, '/');
      int parent = slash ? (*slash = '\0', pxa_open_dir_beneath(rootfd, prefix)) : dup(rootfd);
      const char *leaf = slash ? slash + 1 : prefix;
      if (parent >= 0 && mkdirat(parent, leaf, 0755) != 0 && errno != EEXIST) {
        st = px_set_error(PX_ERR_IO, "%s/%.*s: cannot create the directory: %s", root, (int)i,
                          rel, strerror(errno));
      }
      if (parent >= 0) close(parent);
      if (slash) *slash = '/';
      if (st != PX_OK) break;
      fd = pxa_open_dir_beneath(rootfd, prefix);
    }
    if (fd < 0) {
      int err = errno;
      char at[8400];
      snprintf(at, sizeof at, "%s/%.*s", root, (int)i, rel);
      if ((err == EXDEV || err == ELOOP) && pxa_inside_through_absolute_link(root, at))
        st = px_set_error(PX_ERR_INVALID,
                          "%s: %s stays inside %s but through an absolute symbolic link, "
                          "which is refused (links beneath %s must be relative)",
                          dir, at, root, root);
      else if (err == EXDEV || err == ELOOP)
        st = px_set_error(PX_ERR_INVALID,
                          "%s: %s/%.*s is a symbolic link that leads out of %s (paths are "
                          "resolved without leaving their root)",
                          dir, root, (int)i, rel, root);
      else if (err == ENOTDIR)
        st = px_set_error(PX_ERR_INVALID, "%s: %s/%.*s is not a directory", dir, root, (int)i,
                          rel);
      else
        st = px_set_error(PX_ERR_IO, "%s: %s/%.*s: %s", dir, root, (int)i, rel, strerror(err));
      break;
    }
    close(fd);
  }
  close(rootfd);
  return st;
}

int pxa_path_is_under(const char *path, const char *dir) { return pxa_path_under(path, dir); }

const char *pxa_output_root_of(const char *out, const char *work_dir, const char *const *roots,
                               int nroots) {
  const char *best = pxa_path_under(out, work_dir) ? work_dir : NULL;
  for (int i = 0; i < nroots; i++)
    if (pxa_path_under(out, roots[i]) && (!best || strlen(roots[i]) > strlen(best)))
      best = roots[i];
  return best;
}

px_status_t pxa_check_beneath(const char *root, const char *path, const char *what) {
  size_t rn = strlen(root);
  while (rn > 1 && root[rn - 1] == '/') rn--;
  const char *rel = path + rn;
  while (*rel == '/') rel++;
  if (!*rel) return PX_OK;
  int rootfd = open(root, O_PATH | O_DIRECTORY | O_CLOEXEC);
  if (rootfd < 0)
    return px_set_error(PX_ERR_IO, "%s '%s': cannot open %s: %s", what, path, root,
                        strerror(errno));
  struct open_how how = {.flags = O_PATH | O_CLOEXEC,
                         .resolve = RESOLVE_BENEATH | RESOLVE_NO_MAGICLINKS};
  long fd = syscall(SYS_openat2, rootfd, rel, &how, sizeof how);
  int err = errno;
  if (fd < 0 && err == ENOSYS) {
    /* before Linux 5.6: where the path really leads, compared as text */
    char real_root[4096], real[4096];
    if (!realpath(root, real_root) || !realpath(path, real)) {
      err = errno;
    } else {
      size_t n = strlen(real_root);
      int under = !strncmp(real, real_root, n) && (real[n] == '\0' || real[n] == '/' || n == 1);
      err = under ? 0 : EXDEV;
      fd = under ? 0 : -1;
      if (under) fd = dup(rootfd);
    }
  }
  close(rootfd);
  if (fd >= 0) {
    close((int)fd);
    return PX_OK;
  }
  if (err == ENOENT) return PX_OK; /* missing: the worker says so, naming it */
  if ((err == EXDEV || err == ELOOP) && pxa_inside_through_absolute_link(root, path))
    return px_set_error(PX_ERR_INVALID,
                        "%s '%s' stays inside %s but through an absolute symbolic link, which "
                        "is refused (links beneath %s must be relative)",
                        what, path, root, root);
  if (err == EXDEV || err == ELOOP)
    return px_set_error(PX_ERR_INVALID,
                        "%s '%s' leads out of %s through a symbolic link (paths are resolved "
                        "without leaving their root)",
                        what, path, root);
  return px_set_error(PX_ERR_IO, "%s '%s': %s", what, path, strerror(err));
}
