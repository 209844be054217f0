/* Status names, the per-thread last error, the counted allocator and logging:
 * the few process-wide services every module of libpxcore uses. */
#include <pthread.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/time.h>
#include <time.h>

#include "prunex/px.h"
#include "px_check.h"
#include "prunex/service.h"

#ifndef PX_VERSION_STRING
#define PX_VERSION_STRING "0.0.0"
#endif

const char *px_version(void) { return PX_VERSION_STRING; }

const char *px_status_name(px_status_t st) {
  switch (st) {
    case PX_OK: return "PX_OK";
    case PX_ERR_INVALID: return "PX_ERR_INVALID";
    case PX_ERR_NOMEM: return "PX_ERR_NOMEM";
    case PX_ERR_IO: return "PX_ERR_IO";
    case PX_ERR_FORMAT: return "PX_ERR_FORMAT";
    case PX_ERR_STATE: return "PX_ERR_STATE";
    case PX_ERR_NOT_BUILT: return "PX_ERR_NOT_BUILT";
    case PX_ERR_NO_DEVICE: return "PX_ERR_NO_DEVICE";
    case PX_ERR_TIMEOUT: return "PX_ERR_TIMEOUT";
    case PX_ERR_PEER: return "PX_ERR_PEER";
    case PX_ERR_MISMATCH: return "PX_ERR_MISMATCH";
    case PX_ERR_BACKEND: return "PX_ERR_BACKEND";
    case PX_ERR_INTERNAL: return "PX_ERR_INTERNAL";
    default: return "PX_ERR_UNKNOWN";
  }
}

static _Thread_local char px__err_msg[512];

const char *px_last_error(void) { return px__err_msg; }

void px_clear_error(void) { px__err_msg[0] = '\0'; }

px_status_t px_set_error(px_status_t st, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(px__err_msg, sizeof px__err_msg, fmt, ap);
  va_end(ap);
  px_log(PX_LOG_DEBUG, "%s: %s", px_status_name(st), px__err_msg);
  return st;
}

/* ---- allocator ----------------------------------------------------------
 * A 64-byte header in front of every block records its size so that frees
 * can be accounted; it also keeps the user pointer 64-byte aligned for the
 * aligned variant (all variants share one layout, so px_free fits all). */

#define PX__HDR 64

static atomic_uint_fast64_t px__allocs;
static atomic_uint_fast64_t px__frees;
static atomic_int_fast64_t px__live;
static atomic_int_fast64_t px__peak;

static void px__account(int64_t delta) {
  int64_t now = atomic_fetch_add(&px__live, delta) + delta;
  int64_t peak = atomic_load(&px__peak);
  while (now > peak && !atomic_compare_exchange_weak(&px__peak, &peak, now)) {
  }
}

static void *px__alloc(size_t size, int zero, const char *name) {
  if (size > SIZE_MAX - PX__HDR) {
    px_set_error(PX_ERR_NOMEM, "allocation '%s' of %zu bytes is too large", name, size);
    return NULL;
  }
  void *base = NULL;
  if (posix_memalign(&base, PX__HDR, size + PX__HDR) != 0) {
    px_set_error(PX_ERR_NOMEM, "out of memory allocating '%s' (%zu bytes)", name, size);
    return NULL;
  }
  *(size_t *)base = size;
  char *user = (char *)base + PX__HDR;
  if (zero) memset(user, 0, size);
  atomic_fetch_add(&px__allocs, 1);
  px__account((int64_t)size);
  return user;
}

void *px_malloc(size_t size, const char *name) { return px__alloc(size, 0, name); }
void *px_malloc_aligned(size_t size, const char *name) { return px__alloc(size, 0, name); }

void *px_calloc(size_t n, size_t size, const char *name) {
  if (size && n > SIZE_MAX / size) {
    px_set_error(PX_ERR_NOMEM, "allocation '%s' of %zu x %zu bytes overflows", name, n, size);
    return NULL;
  }
  return px__alloc(n * size, 1, name);
}

void px_free(void *p) {
  if (!p) return;
  char *base = (char *)p - PX__HDR;
  size_t size = *(size_t *)base;
  atomic_fetch_add(&px__frees, 1);
  px__account(-(int64_t)size);
  free(base);
}

void px__free_all(void *const *p, size_t n) {
  for (size_t i = 0; i < n; i++) px_free(p[i]);
}

char *px__strdup(const char *s, const char *name) {
  size_t n = strlen(s) + 1;
  char *d = px_malloc(n, name);
  if (d) memcpy(d, s, n);
  return d;
}

void *px_realloc(void *p, size_t size, const char *name) {
  if (!p) return px__alloc(size, 0, name);
  size_t old = *(size_t *)((char *)p - PX__HDR);
  if (size <= old) return p; /* shrinking keeps the block: no work, no accounting */
  void *q = px__alloc(size, 0, name);
  if (!q) return NULL;
  memcpy(q, p, old);
  px_free(p);
  return q;
}

void px_mem_stats(px_mem_stats_t *out) {
  out->allocs = atomic_load(&px__allocs);
  out->frees = atomic_load(&px__frees);
  out->live_bytes = atomic_load(&px__live);
  out->peak_bytes = atomic_load(&px__peak);
}

/* ---- logging ------------------------------------------------------------ */

static atomic_int px__log_level = -1;

static px_log_level_t px__env_level(void) {
  const char *s = getenv("PX_LOG_LEVEL");
  if (!s) return PX_LOG_WARN;
  if (!strcmp(s, "error")) return PX_LOG_ERROR;
  if (!strcmp(s, "info")) return PX_LOG_INFO;
  if (!strcmp(s, "debug")) return PX_LOG_DEBUG;
  return PX_LOG_WARN;
}

void px_log_set_level(px_log_level_t level) { atomic_store(&px__log_level, (int)level); }

px_log_level_t px_log_get_level(void) {
  int l = atomic_load(&px__log_level);
  if (l < 0) {
    l = (int)px__env_level();
    atomic_store(&px__log_level, l);
  }
  return (px_log_level_t)l;
}

/* ---- repeated lines (px_log_set_rate) -----------------------------------
 * Causes live in an open-addressed table keyed by the file name's address,
 * the line and the level, under one mutex (the daemons log from their loop,
 * HTTP, notification and gRPC threads). A lookup probes PX__CAUSE_PROBES
 * slots; a new cause takes the first free one or one whose interval is over
 * with nothing suppressed (so no count is ever lost), and when there is none
 * its line is written unlimited rather than dropped uncounted. */
#define PX__CAUSES 512
#define PX__CAUSE_PROBES 16

typedef struct {
  const char *file;    /* NULL: a free slot */
  int line, level;
  int64_t since_ms;    /* CLOCK_MONOTONIC: the start of the cause's interval */
  int written;         /* lines written in it */
  uint64_t suppressed; /* lines dropped in it */
} px__cause_t;

static px__cause_t px__causes[PX__CAUSES];
static pthread_mutex_t px__cause_mu = PTHREAD_MUTEX_INITIALIZER;
static atomic_int px__rate_burst = 0; /* the program's choice (px_log_set_rate) */
static atomic_int px__rate_ms = PX_LOG_RATE_INTERVAL_MS;
static atomic_int px__env_burst = -2; /* -2: PX_LOG_RATE not read yet; -1: not set */
static atomic_int px__env_ms;

void px_log_set_rate(int burst, int interval_ms) {
  pthread_mutex_lock(&px__cause_mu);
  atomic_store(&px__rate_burst, burst > 0 ? burst : 0);
  atomic_store(&px__rate_ms, interval_ms > 0 ? interval_ms : 1);
  memset(px__causes, 0, sizeof px__causes);
  pthread_mutex_unlock(&px__cause_mu);
}

/* The limit in force: PX_LOG_RATE's when it is set (and well formed), else
 * the program's. */
static void px__rate_get(int *burst, int *ms) {
  int eb = atomic_load(&px__env_burst);
  if (eb == -2) {
    const char *s = getenv("PX_LOG_RATE");
    char *end = NULL;
    long b = s ? strtol(s, &end, 10) : -1;
    double secs = PX_LOG_RATE_INTERVAL_MS / 1000.0;
    if (s && end != s && *end == '/') secs = strtod(end + 1, &end);
    eb = (s && end != s && *end == '\0' && b >= 0 && b <= 1000000 && secs > 0 && secs < 86400)
             ? (int)b : -1;
    atomic_store(&px__env_ms, (int)(secs * 1000 + 0.5) > 0 ? (int)(secs * 1000 + 0.5) : 1);
    atomic_store(&px__env_burst, eb);
  }
  if (eb >= 0) {
    *burst = eb;
    *ms = atomic_load(&px__env_ms);
  } else {
    *burst = atomic_load(&px__rate_burst);
    *ms = atomic_load(&px__rate_ms);
  }
}

/* Under px__cause_mu. 1: write the line, and when *dropped > 0 say that so
 * many were suppressed in the last *span_ms; 0: drop it (counted). */
static int px__cause_admit(const char *file, int line, int level, int burst, int ms,
                           uint64_t *dropped, int64_t *span_ms) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  int64_t now = (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
  uintptr_t h = ((uintptr_t)file >> 3) * 2654435761u + (uintptr_t)line * 40503u + (uintptr_t)level;
  px__cause_t *c = NULL, *room = NULL;
  for (int i = 0; i < PX__CAUSE_PROBES && !c; i++) {
    px__cause_t *s = &px__causes[(h + (uintptr_t)i) % PX__CAUSES];
    if (s->file == file && s->line == line && s->level == level) c = s;
    else if (!s->file || (now - s->since_ms >= ms && s->suppressed == 0)) {
      if (!room) room = s;
      if (!s->file) break; /* the probe chain ends here: the cause is new */
    }
  }
  if (!c) {
    if (!room) return 1;
    *room = (px__cause_t){.file = file, .line = line, .level = level, .since_ms = now};
    c = room;
  }
  if (now - c->since_ms >= ms) {
    *dropped = c->suppressed;
    *span_ms = now - c->since_ms;
    c->since_ms = now;
    c->written = 1;
    c->suppressed = 0;
    return 1;
  }
  if (c->written < burst) {
    c->written++;
    return 1;
  }
  c->suppressed++;
  return 0;
}

/* Where stderr goes decides the line format, once per process: under
 * journald (JOURNAL_STREAM names our stderr) a "<N>" syslog priority
 * prefix, which the journal turns into the entry's priority and which
 * carries its own time stamp; anywhere else an ISO 8601 UTC time stamp. */
static atomic_int px__log_journal = -1;

void px_log_at(px_log_level_t level, const char *file, int line, const char *fmt, ...) {
  if (level > px_log_get_level()) return;
  static const char *names[] = {"ERROR", "WARN", "INFO", "DEBUG"};
  static const int syslog_prio[] = {3, 4, 6, 7}; /* LOG_ERR, LOG_WARNING, LOG_INFO, LOG_DEBUG */
  int burst, ms;
  uint64_t dropped = 0;
  int64_t span_ms = 0;
  px__rate_get(&burst, &ms);
  if (burst > 0 && level != PX_LOG_DEBUG) { /* debug lines are asked for: all of them */
    pthread_mutex_lock(&px__cause_mu);
    int keep = px__cause_admit(file, line, (int)level, burst, ms, &dropped, &span_ms);
    pthread_mutex_unlock(&px__cause_mu);
    if (!keep) return;
  }
  const char *base = strrchr(file, '/');
  char msg[1024];
  va_list ap;
  va_start(ap, fmt);
  int n = vsnprintf(msg, sizeof msg, fmt, ap);
  va_end(ap);
  size_t at = n < 0 ? 0 : (size_t)n; /* the note goes last, even after a cut message */
  if (at > sizeof msg - 96) at = sizeof msg - 96;
  if (dropped)
    snprintf(msg + at, sizeof msg - at, " (%llu similar line%s suppressed in the last %.3gs)",
             (unsigned long long)dropped, dropped == 1 ? "" : "s", (double)span_ms / 1000.0);
  int journal = atomic_load(&px__log_journal);
  if (journal < 0) {
    journal = px_service_stderr_is_journal();
    atomic_store(&px__log_journal, journal);
  }
  if (journal) {
    fprintf(stderr, "<%d>%-5s %s:%d %s\n", syslog_prio[level], names[level],
            base ? base + 1 : file, line, msg);
    return;
  }
  struct timeval tv;
  gettimeofday(&tv, NULL);
  struct tm tm;
  gmtime_r(&tv.tv_sec, &tm);
  char when[32];
  strftime(when, sizeof when, "%Y-%m-%dT%H:%M:%S", &tm);
  fprintf(stderr, "%s.%03dZ %-5s %s:%d %s\n", when, (int)(tv.tv_usec / 1000), names[level],
          base ? base + 1 : file, line, msg);
}
