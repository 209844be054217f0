/* PruneX common definitions: the one status type of the library, the last
 * error message, the counted allocator every module allocates through, and
 * logging. Every other public header includes this one. */
#ifndef PRUNEX_PX_H
#define PRUNEX_PX_H

#include <stddef.h>
#include <stdint.h>

/* Marks the library's API: libpxcore is built with hidden visibility, so a
 * function or variable is exported from libpxcore.so only when its
 * declaration in these public headers carries PX_API. Everything else,
 * including every px__ internal, stays inside the library; the repository's
 * tests reach internals through the static pxcore_internal library. */
#define PX_API __attribute__((visibility("default")))

#ifdef __cplusplus
extern "C" {
#endif

/* Status: 0 is success, negative is an error. Functions that fail also set
 * the calling thread's last error message (px_last_error). The library never
 * exits or aborts on a runtime failure. */
typedef enum {
  PX_OK = 0,
  PX_ERR_INVALID = -1,    /* bad argument or input data */
  PX_ERR_NOMEM = -2,      /* allocation failed */
  PX_ERR_IO = -3,         /* file or socket I/O failed */
  PX_ERR_FORMAT = -4,     /* malformed file or message */
  PX_ERR_STATE = -5,      /* call not allowed in the object's state (e.g. frozen) */
  PX_ERR_NOT_BUILT = -6,  /* feature not compiled in (e.g. CUDA) */
  PX_ERR_NO_DEVICE = -7,  /* no usable device at run time */
  PX_ERR_TIMEOUT = -8,
  PX_ERR_PEER = -9,       /* a peer process failed or left */
  PX_ERR_MISMATCH = -10,  /* ranks disagree (sizes, types) */
  PX_ERR_BACKEND = -11,   /* an error from a library we call (CUDA, UCX, SQLite, ...) */
  PX_ERR_INTERNAL = -12,
} px_status_t;

/* Short constant name of a status ("PX_ERR_INVALID"); never NULL. */
PX_API const char *px_status_name(px_status_t st);

/* Message of the last error set on this thread ("" if none). The string is
 * owned by the library and valid until the next failing call on this thread. */
PX_API const char *px_last_error(void);

/* Records st and a formatted message as this thread's last error and returns
 * st, so that `return px_set_error(PX_ERR_INVALID, "...")` reads naturally. */
PX_API px_status_t px_set_error(px_status_t st, const char *fmt, ...)
           __attribute__((format(printf, 2, 3)));

/* Clears this thread's last error. */
PX_API void px_clear_error(void);

/* ---- counted allocation -------------------------------------------------
 * Every allocation of the library goes through these so that memory can be
 * accounted and allocation-free hot paths can be tested (px_mem_stats). The
 * name is a static string describing the allocation, kept for debugging.
 * px_malloc/px_calloc/px_realloc return NULL on failure and set the last
 * error; memory is aligned to 64 bytes when align64 variants are used. */
PX_API void *px_malloc(size_t size, const char *name);
PX_API void *px_calloc(size_t n, size_t size, const char *name);
PX_API void *px_realloc(void *p, size_t size, const char *name);
PX_API void *px_malloc_aligned(size_t size, const char *name); /* 64-byte aligned */
PX_API void px_free(void *p);

typedef struct {
  uint64_t allocs;      /* calls that allocated (malloc, calloc, aligned, growing realloc) */
  uint64_t frees;
  int64_t live_bytes;   /* bytes currently allocated through px_* */
  int64_t peak_bytes;
} px_mem_stats_t;

/* Process-wide counters, updated atomically. */
PX_API void px_mem_stats(px_mem_stats_t *out);

/* ---- logging -------------------------------------------------------------
 * Lines go to stderr as "LEVEL file:line message". The threshold comes from
 * the PX_LOG_LEVEL environment variable (error, warn, info, debug; default
 * warn for the library, programs may lower it with px_log_set_level). */
typedef enum { PX_LOG_ERROR = 0, PX_LOG_WARN = 1, PX_LOG_INFO = 2, PX_LOG_DEBUG = 3 } px_log_level_t;

PX_API void px_log_set_level(px_log_level_t level);
PX_API px_log_level_t px_log_get_level(void);
PX_API void px_log_at(px_log_level_t level, const char *file, int line, const char *fmt, ...)
           __attribute__((format(printf, 4, 5)));

#define px_log(level, ...) px_log_at((level), __FILE__, __LINE__, __VA_ARGS__)

/* Repeated lines (one refused connection a line made 16 MB a
 * minute): a cause is a call site and level (file, line, level); at most
 * burst lines of one cause are written in an interval of interval_ms (which
 * starts at its first line), the rest are counted, and the cause's next
 * line after the interval ends with "(N similar lines suppressed in the
 * last Xs)". Debug lines, asked for when debugging (px_set_error logs
 * every error at debug from one call site), are never limited. burst 0
 * writes every line (the library's default; the daemons set
 * PX_LOG_RATE_BURST per PX_LOG_RATE_INTERVAL_MS). The environment
 * variable PX_LOG_RATE overrides any program's choice: "0" writes every
 * line, "BURST/SECONDS" (e.g. "10/10") sets the limit. Setting it starts
 * every cause afresh (counts not yet written are dropped). Thread-safe, no
 * allocation; the causes live in a fixed table, and a line whose cause
 * finds no room is written. Cannot fail. */
#define PX_LOG_RATE_BURST 10
#define PX_LOG_RATE_INTERVAL_MS 10000
PX_API void px_log_set_rate(int burst, int interval_ms);

/* Library version string, e.g. "0.1.0". */
PX_API const char *px_version(void);

#ifdef __cplusplus
}
#endif
#endif
