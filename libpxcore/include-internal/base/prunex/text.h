/* Text and files, written once for the library and the programs: a growing
 * byte buffer, UTF-8 checks, JSON string quoting, the atomic write of a file
 * (temporary file beside it, fsync, rename, fsync of the directory) and the
 * creation of a directory with its parents.
 * Everything here runs in time linear in its input. */
#ifndef PRUNEX_TEXT_H
#define PRUNEX_TEXT_H

#include <stdarg.h>
#include <stddef.h>

#include "prunex/px.h"

#ifdef __cplusplus
extern "C" {
#endif

/* ---- buffer ---------------------------------------------------------------
 * A zeroed px_buf_t is empty, unbounded and ready. Appends grow it
 * (px_realloc); a failed growth, or one past max (a bound on what untrusted
 * input can make it hold), sets oom and drops that and every later append,
 * so a writer checks oom once at the end. p is NUL-terminated after every
 * append that fit (and NULL while nothing was appended). */
typedef struct {
  char *p;
  size_t len, cap;
  size_t max;           /* 0: no bound; else len + 1 never exceeds it */
  int oom;
} px_buf_t;

void px_buf_put(px_buf_t *b, const void *s, size_t n);
void px_buf_puts(px_buf_t *b, const char *s);
void px_buf_printf(px_buf_t *b, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
void px_buf_vprintf(px_buf_t *b, const char *fmt, va_list ap);
/* s[0..n) as a JSON string, quotes included: ", \ and control characters
 * escaped, each byte that is not part of valid UTF-8 written as \ufffd (the
 * output is always valid JSON and valid UTF-8). */
void px_buf_json_string(px_buf_t *b, const char *s, size_t n);
/* Empties the buffer and keeps its memory. */
void px_buf_reset(px_buf_t *b);
/* Frees the memory; the buffer is empty and ready again. */
void px_buf_free(px_buf_t *b);

/* ---- UTF-8 ------------------------------------------------------------------ */

/* Length (1-4) of the valid UTF-8 sequence at s, with n > 0 bytes left; 0
 * when it is not valid (overlong forms, surrogates, beyond U+10FFFF, a cut
 * sequence). A NUL byte is a valid one-byte sequence here. */
size_t px_utf8_seq(const char *s, size_t n);
/* 1 when s[0..n) is valid UTF-8 without NUL bytes. */
int px_utf8_valid(const char *s, size_t n);
/* 1 when the NUL-terminated s is valid UTF-8 without control characters
 * (below 0x20, or 0x7f): the rule for names and texts a user gives. */
int px_text_ok(const char *s);
/* in copied into out[cap], each invalid byte replaced by '?', never cutting
 * a sequence; out is always NUL-terminated (cap > 0). */
void px_utf8_clean(const char *in, char *out, size_t cap);

/* ---- atomic files ------------------------------------------------------------
 * A file written beside its destination under a unique temporary name
 * (O_EXCL) and renamed over it only when complete: readers see the old file
 * or the new one, never a part. */
enum {
  PX_FILE_NO_SYNC = 1u, /* skip the fsyncs (scratch files that need not survive a crash) */
};

typedef struct {
  int fd;
  int dirfd;            /* AT_FDCWD, or the directory tmp and path are relative to */
  char *tmp;            /* px_malloc'd temporary path */
  const char *path;     /* the caller's, must outlive the handle */
  unsigned flags;
  px_status_t st;       /* the first failure of a write */
} px_atomic_file_t;

/* Creates the temporary file with permissions mode (& ~umask). Fails with
 * PX_ERR_IO naming path; then nothing is left behind. */
px_status_t px_atomic_file_open(px_atomic_file_t *f, const char *path, unsigned mode,
                                       unsigned flags);
/* The same for the file name in the open directory dirfd (borrowed: it must
 * stay open until commit or abort): the temporary file is made there with
 * O_NOFOLLOW and renamed there, so a link swapped in for a component of the
 * directory's path since it was opened changes nothing. */
px_status_t px_atomic_file_openat(px_atomic_file_t *f, int dirfd, const char *name,
                                         unsigned mode, unsigned flags);
/* Appends data (retries short writes and EINTR). After a failure, further
 * writes do nothing and commit reports the first failure. */
px_status_t px_atomic_file_write(px_atomic_file_t *f, const void *data, size_t len);
/* fsync, close, rename over path, fsync of the directory (best effort).
 * On any failure the temporary file is removed and path is untouched. The
 * handle is finished either way. */
px_status_t px_atomic_file_commit(px_atomic_file_t *f);
/* Removes the temporary file (a writer that gave up). */
void px_atomic_file_abort(px_atomic_file_t *f);
/* The whole file at once. */
px_status_t px_file_write_atomic(const char *path, const void *data, size_t len,
                                        unsigned mode, unsigned flags);

/* ---- directories --------------------------------------------------------- */

/* Creates dir and every missing parent with permissions mode (& ~umask), as
 * `mkdir -p` does; existing ones are fine. Fails with PX_ERR_INVALID for an
 * empty path or one of 4096 bytes or more, PX_ERR_IO naming the component
 * that could not be made, or dir when it is not a directory. */
px_status_t px_mkdirs(const char *dir, unsigned mode);

#ifdef __cplusplus
}
#endif

#endif
