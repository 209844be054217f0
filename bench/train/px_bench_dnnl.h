/* What the oneDNN benchmark programs under bench/train share. */
#ifndef PX_BENCH_DNNL_H
#define PX_BENCH_DNNL_H

#include <dnnl.h>
#include <stdio.h>
#include <stdlib.h>

/* Exits with the call and its status when a oneDNN call fails. */
#define CK(call)                                                                  \
  do {                                                                            \
    dnnl_status_t s_ = (call);                                                    \
    if (s_ != dnnl_success) {                                                     \
      fprintf(stderr, "%s:%d: %s failed (%d)\n", __FILE__, __LINE__, #call, (int)s_); \
      exit(1);                                                                    \
    }                                                                             \
  } while (0)

#endif
