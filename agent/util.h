/* Small helpers shared by pxagent and pxworker: clocks, sleeping, files and
 * directories, and the retry rule for control-plane calls. */
#ifndef PX_AGENT_UTIL_H
#define PX_AGENT_UTIL_H

#include <pthread.h>
#include <stddef.h>
#include <stdint.h>

#include "prunex/px.h"

/* Monotonic and wall-clock milliseconds. */
int64_t pxa_now_ms(void);
int64_t pxa_unix_ms(void);
void pxa_sleep_ms(int64_t ms);

/* Waits on cv (mu held) for up to ms milliseconds of the monotonic clock,
 * the clock the agent's condition variables are made with. */
void pxa_cond_wait_ms(pthread_cond_t *cv, pthread_mutex_t *mu, int64_t ms);

/* Parses s as a whole decimal int in [lo, hi] into *out: 0, or -1 (and
 * *out untouched) for anything else. */
int pxa_parse_int(const char *s, int lo, int hi, int *out);

/* Reads a whole file (at most max bytes) into *data (px_malloc, caller
 * frees; NUL-terminated beyond *len). PX_ERR_IO naming the path. */
px_status_t pxa_read_file(const char *path, size_t max, uint8_t **data, size_t *len);

/* Copies the last lines of the file at path, at most cap - 1 bytes and
 * starting at a line boundary when the file is longer, into buf
 * (NUL-terminated; "" when the file cannot be read). Returns the length. */
size_t pxa_file_tail(const char *path, char *buf, size_t cap);

/* Online processors (at least 1). */
int pxa_cpu_count(void);

/* 1 when a job's output_dir is one this agent allows: relative without
 * "..", or absolute under the work directory or one of roots. */
int pxa_output_dir_allowed(const char *output_dir, const char *work_dir, const char *const *roots,
                           int nroots);

/* The root (work_dir or one of roots; the longest) that the absolute path
 * out is under; NULL when none. */
const char *pxa_output_root_of(const char *out, const char *work_dir, const char *const *roots,
                               int nroots);

/* Creates dir (under root) and its missing parents (mode 0755) without
 * leaving root: symbolic links below root are followed only while they stay
 * below it (openat2 RESOLVE_BENEATH; no link at all on kernels without it).
 * PX_ERR_INVALID naming the link that leads out, an absolute link (never
 * followed, even to a place inside root: the message says so), or a
 * component that is not a directory; PX_ERR_IO otherwise. */
px_status_t pxa_mkdirs_beneath(const char *root, const char *dir);

/* PX_OK when path (textually under root) does not lead out of root through
 * a symbolic link (openat2 RESOLVE_BENEATH; realpath on older kernels), or
 * does not exist; else PX_ERR_INVALID naming what (e.g. "dataset.path"),
 * path and root, and whether the path leads out or stays inside through an
 * absolute link. */
px_status_t pxa_check_beneath(const char *root, const char *path, const char *what);

/* 1 when path is dir or below it, on a path-component boundary. */
int pxa_path_is_under(const char *path, const char *dir);

#endif
