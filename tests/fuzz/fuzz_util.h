/* Shared by the fuzz harnesses: a per-process scratch file that the
 * file-based readers (safetensors, IDX, CIFAR) are pointed at. Under
 * /dev/shm when it exists, so that a fuzzing run does not wear a disk. */
#ifndef PX_FUZZ_UTIL_H
#define PX_FUZZ_UTIL_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <unistd.h>

#include "prunex/px.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

/* Writes data to the scratch file number `which` of this process; its path
 * goes to path. 0 on success. */
static inline int pxf_scratch(int which, const uint8_t *data, size_t size, char *path, size_t cap,
                              const char *suffix) {
  const char *dir = access("/dev/shm", W_OK) == 0 ? "/dev/shm" : "/tmp";
  snprintf(path, cap, "%s/pxfuzz-%d-%d%s", dir, (int)getpid(), which, suffix);
  FILE *f = fopen(path, "wb");
  if (!f) return -1;
  size_t w = size ? fwrite(data, 1, size, f) : 0;
  int rc = fclose(f);
  return (w == size && rc == 0) ? 0 : -1;
}

/* Keeps fuzzing output readable: the library logs errors it returns. */
static inline void pxf_quiet(void) {
  static int done;
  if (!done) {
    px_log_set_level(PX_LOG_ERROR);
    done = 1;
  }
}

#endif
