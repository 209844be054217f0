/* The monotonic clock every phase timer of the library reads (training
 * steps, H-SADMM's phases, the strategies' iteration figures). */
#ifndef PX_CLOCK_H
#define PX_CLOCK_H

#include <time.h>

/* Monotonic seconds (only differences mean anything). */
static inline double px__now(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

#endif
