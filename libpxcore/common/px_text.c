/* Text and files (prunex/text.h): the one buffer, UTF-8 check, JSON quoting,
 * atomic file write and mkdir -p that the library, the daemons and pxctl
 * share. */
#include <errno.h>
#include <fcntl.h>
#include <stdatomic.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "prunex/text.h"
#include "px_check.h"

/* ---- buffer ------------------------------------------------------------------ */

static int px__buf_reserve(px_buf_t *b, size_t n) {
  if (b->oom) return 0;
  if (n > SIZE_MAX / 2 - b->len - 1) {
    b->oom = 1;
    return 0;
  }
  size_t need = b->len + n + 1;
  if (need <= b->cap) return 1;
  if (b->max && need > b->max) {
    b->oom = 1;
    return 0;
  }
  size_t cap = b->cap ? b->cap : 256;
  while (cap < need) cap *= 2;
  if (b->max && cap > b->max) cap = b->max;
  char *p = px_realloc(b->p, cap, "text.buffer");
  if (!p) {
    b->oom = 1;
    return 0;
  }
  b->p = p;
  b->cap = cap;
  return 1;
}

void px_buf_put(px_buf_t *b, const void *s, size_t n) {
  if (!px__buf_reserve(b, n)) return;
  if (n) memcpy(b->p + b->len, s, n);
  b->len += n;
  b->p[b->len] = '\0';
}

void px_buf_puts(px_buf_t *b, const char *s) { px_buf_put(b, s, strlen(s)); }

void px_buf_vprintf(px_buf_t *b, const char *fmt, va_list ap) {
  va_list ap2;
  va_copy(ap2, ap);
  int n = vsnprintf(NULL, 0, fmt, ap2);
  va_end(ap2);
  if (n < 0 || !px__buf_reserve(b, (size_t)n)) return;
  vsnprintf(b->p + b->len, (size_t)n + 1, fmt, ap);
  b->len += (size_t)n;
}

void px_buf_printf(px_buf_t *b, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  px_buf_vprintf(b, fmt, ap);
  va_end(ap);
}

void px_buf_reset(px_buf_t *b) {
  b->len = 0;
  b->oom = 0;
  if (b->p) b->p[0] = '\0';
}

void px_buf_free(px_buf_t *b) {
  size_t max = b->max;
  px_free(b->p);
  memset(b, 0, sizeof *b);
  b->max = max;
}

/* ---- UTF-8 ---------------------------------------------------------------------- */

size_t px_utf8_seq(const char *str, size_t n) {
  const unsigned char *s = (const unsigned char *)str;
  unsigned c = s[0];
  if (c < 0x80) return 1;
  size_t len;
  unsigned lo = 0x80, hi = 0xbf; /* the range the second byte may take */
  if (c >= 0xc2 && c <= 0xdf) {
    len = 2;
  } else if (c >= 0xe0 && c <= 0xef) {
    len = 3;
    if (c == 0xe0) lo = 0xa0; /* overlong */
    if (c == 0xed) hi = 0x9f; /* surrogates */
  } else if (c >= 0xf0 && c <= 0xf4) {
    len = 4;
    if (c == 0xf0) lo = 0x90; /* overlong */
    if (c == 0xf4) hi = 0x8f; /* beyond U+10FFFF */
  } else {
    return 0;
  }
  if (n < len || s[1] < lo || s[1] > hi) return 0;
  for (size_t k = 2; k < len; k++)
    if ((s[k] & 0xc0) != 0x80) return 0;
  return len;
}

int px_utf8_valid(const char *s, size_t n) {
  for (size_t i = 0, k; i < n; i += k) {
    if (s[i] == '\0') return 0;
    k = px_utf8_seq(s + i, n - i);
    if (k == 0) return 0;
  }
  return 1;
}

int px_text_ok(const char *s) {
  size_t n = strlen(s);
  for (size_t i = 0; i < n; i++) {
    unsigned char c = (unsigned char)s[i];
    if (c < 0x20 || c == 0x7f) return 0;
  }
  return px_utf8_valid(s, n);
}

void px_utf8_clean(const char *in, char *out, size_t cap) {
  if (!cap) return;
  size_t n = strlen(in), i = 0, o = 0;
  while (i < n) {
    size_t len = px_utf8_seq(in + i, n - i);
    size_t w = len ? len : 1;
    if (o + w >= cap) break; /* never cut a sequence */
    if (len) memcpy(out + o, in + i, len);
    else out[o] = '?';
    o += w;
    i += w;
  }
  out[o] = '\0';
}

void px_buf_json_string(px_buf_t *b, const char *s, size_t n) {
  px_buf_put(b, "\"", 1);
  size_t run = 0; /* start of the bytes copied as they are */
  for (size_t i = 0; i < n;) {
    unsigned char c = (unsigned char)s[i];
    const char *esc = NULL;
    char u[8];
    size_t len = 1;
    switch (c) {
      case '"': esc = "\\\""; break;
      case '\\': esc = "\\\\"; break;
      case '\n': esc = "\\n"; break;
      case '\r': esc = "\\r"; break;
      case '\t': esc = "\\t"; break;
      case '\b': esc = "\\b"; break;
      case '\f': esc = "\\f"; break;
      default:
        if (c < 0x20 || c == 0x7f) {
          snprintf(u, sizeof u, "\\u%04x", c);
          esc = u;
        } else if (c >= 0x80 && (len = px_utf8_seq(s + i, n - i)) == 0) {
          esc = "\\ufffd";
          len = 1;
        }
        break;
    }
    if (esc) {
      px_buf_put(b, s + run, i - run);
      px_buf_puts(b, esc);
      run = i + len;
    }
    i += len;
  }
  px_buf_put(b, s + run, n - run);
  px_buf_put(b, "\"", 1);
}

/* ---- atomic files ------------------------------------------------------------------ */

/* fsync of the directory holding path, so that the rename itself survives a
 * crash. Best effort: the new file is in place whatever happens here. */
static void px__sync_dir(const char *path) {
  const char *slash = strrchr(path, '/');
  char dir[4096];
  if (!slash) snprintf(dir, sizeof dir, ".");
  else if (slash == path) snprintf(dir, sizeof dir, "/");
  else if ((size_t)(slash - path) < sizeof dir) snprintf(dir, sizeof dir, "%.*s", (int)(slash - path), path);
  else return;
  int fd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd < 0) return;
  if (fsync(fd) != 0 && errno != EINVAL)
    px_log(PX_LOG_WARN, "%s: fsync of directory %s failed: %s", path, dir, strerror(errno));
  close(fd);
}

px_status_t px_atomic_file_open(px_atomic_file_t *f, const char *path, unsigned mode,
                                unsigned flags) {
  return px_atomic_file_openat(f, AT_FDCWD, path, mode, flags);
}

px_status_t px_atomic_file_openat(px_atomic_file_t *f, int dirfd, const char *path, unsigned mode,
                                  unsigned flags) {
  static atomic_uint counter;
  memset(f, 0, sizeof *f);
  f->fd = -1;
  f->dirfd = dirfd;
  PX_REQUIRE(path && path[0], "atomic write: no path");
  size_t cap = strlen(path) + 48;
  f->tmp = px_malloc(cap, "text.tmp_path");
  if (!f->tmp) return PX_ERR_NOMEM;
  f->path = path;
  f->flags = flags;
  /* a name of our own with O_EXCL rather than mkstemp: the file gets mode &
   * ~umask without touching the process umask */
  for (int attempt = 0;; attempt++) {
    snprintf(f->tmp, cap, "%s.tmp.%ld.%u", path, (long)getpid(), atomic_fetch_add(&counter, 1u));
    f->fd = openat(dirfd, f->tmp, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC | O_NOFOLLOW,
                   (mode_t)mode);
    if (f->fd >= 0) return PX_OK;
    if (errno == EINTR || (errno == EEXIST && attempt < 100)) continue;
    int e = errno;
    px_status_t st = px_set_error(PX_ERR_IO, "%s: cannot create the temporary file %s: %s", path,
                                  f->tmp, strerror(e));
    px_free(f->tmp);
    f->tmp = NULL;
    return st;
  }
}

px_status_t px_atomic_file_write(px_atomic_file_t *f, const void *data, size_t len) {
  if (f->st != PX_OK) return f->st;
  const char *p = data;
  while (len > 0) {
    ssize_t w = write(f->fd, p, len);
    if (w < 0 && errno == EINTR) continue;
    if (w <= 0) {
      int e = w < 0 ? errno : ENOSPC;
      f->st = px_set_error(PX_ERR_IO, "%s: write of %s failed: %s", f->path, f->tmp, strerror(e));
      return f->st;
    }
    p += w;
    len -= (size_t)w;
  }
  return PX_OK;
}

void px_atomic_file_abort(px_atomic_file_t *f) {
  if (f->fd >= 0) close(f->fd);
  f->fd = -1;
  if (f->tmp) unlinkat(f->dirfd, f->tmp, 0);
  px_free(f->tmp);
  f->tmp = NULL;
}

px_status_t px_atomic_file_commit(px_atomic_file_t *f) {
  px_status_t st = f->st;
  int sync = !(f->flags & PX_FILE_NO_SYNC);
  if (st == PX_OK && sync && fsync(f->fd) != 0)
    st = px_set_error(PX_ERR_IO, "%s: cannot fsync %s: %s", f->path, f->tmp, strerror(errno));
  if (st == PX_OK) {
    int rc = close(f->fd);
    f->fd = -1;
    if (rc != 0)
      st = px_set_error(PX_ERR_IO, "%s: cannot close %s: %s", f->path, f->tmp, strerror(errno));
  }
  if (st == PX_OK && renameat(f->dirfd, f->tmp, f->dirfd, f->path) != 0)
    st = px_set_error(PX_ERR_IO, "%s: cannot rename %s into place: %s", f->path, f->tmp,
                      strerror(errno));
  if (st != PX_OK) {
    px_atomic_file_abort(f);
    return st;
  }
  px_free(f->tmp);
  f->tmp = NULL;
  if (sync && f->dirfd != AT_FDCWD) {
    if (fsync(f->dirfd) != 0 && errno != EINVAL && errno != EBADF)
      px_log(PX_LOG_WARN, "%s: fsync of its directory failed: %s", f->path, strerror(errno));
  } else if (sync) {
    px__sync_dir(f->path);
  }
  return PX_OK;
}

px_status_t px_file_write_atomic(const char *path, const void *data, size_t len, unsigned mode,
                                 unsigned flags) {
  px_atomic_file_t f;
  PX_CHECK(px_atomic_file_open(&f, path, mode, flags));
  (void)px_atomic_file_write(&f, data, len);
  return px_atomic_file_commit(&f);
}

/* ---- directories ------------------------------------------------------------- */

px_status_t px_mkdirs(const char *dir, unsigned mode) {
  char p[4096];
  size_t n = strlen(dir);
  if (n == 0 || n >= sizeof p) return px_set_error(PX_ERR_INVALID, "bad directory '%s'", dir);
  memcpy(p, dir, n + 1);
  for (size_t i = 1; i <= n; i++) {
    if (p[i] != '/' && p[i] != '\0') continue;
    char c = p[i];
    p[i] = '\0';
    if (mkdir(p, (mode_t)mode) != 0 && errno != EEXIST)
      return px_set_error(PX_ERR_IO, "%s: cannot create the directory: %s", p, strerror(errno));
    p[i] = c;
  }
  struct stat sb;
  if (stat(dir, &sb) != 0 || !S_ISDIR(sb.st_mode))
    return px_set_error(PX_ERR_IO, "%s: not a directory", dir);
  return PX_OK;
}
