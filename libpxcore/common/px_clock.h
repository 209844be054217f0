/* The monotonic clock every phase timer of the library reads (training
 * steps, H-SADMM's phases, the strategies' iteration figures). */
#ifndef PX_CLOCK_H
#define PX_CLOCK_H

#include <time.h>

/* Seconds of clock id (only differences mean anything). */
static inline double px__clock_seconds(clockid_t id) {
  struct timespec ts;
  clock_gettime(id, &ts);
  return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* Monotonic seconds. */
static inline double px__now(void) { return px__clock_seconds(CLOCK_MONOTONIC); }

/* Monotonic milliseconds (deadlines of waits and timeouts). */
static inline double px__now_ms(void) { return 1e3 * px__now(); }

#endif
