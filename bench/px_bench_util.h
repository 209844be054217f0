/* Helpers the benchmark programs share: the clocks they time with (px__now,
 * the library's own monotonic clock, for wall time), the sort order of their
 * medians and the line they print when a library call fails. Header-only
 * (static inline), since each benchmark is a program of its own. */
#ifndef PX_BENCH_UTIL_H
#define PX_BENCH_UTIL_H

#include <stdio.h>
#include <time.h>

#include "../libpxcore/common/px_clock.h" /* px__now: the library's monotonic seconds */
#include "prunex/px.h"

/* Seconds of CPU time used by the whole process (all threads). */
static inline double pxb_cpu_s(void) { return px__clock_seconds(CLOCK_PROCESS_CPUTIME_ID); }

/* qsort order of doubles, ascending. */
static inline int pxb_cmp_double(const void *a, const void *b) {
  const double x = *(const double *)a, y = *(const double *)b;
  return (x > y) - (x < y);
}

/* Prints "prog: what: <the library's last error>" to stderr; returns 1, the
 * exit status of a failed benchmark. */
static inline int pxb_fail(const char *prog, const char *what) {
  fprintf(stderr, "%s: %s: %s\n", prog, what, px_last_error());
  return 1;
}

#endif
