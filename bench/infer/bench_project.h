/* The benches' stand-in for H-SADMM's masks: every coupled channel pair of
 * a model (px_model_channel_consumer) projected at channel keep `keep`
 * (px_prune_project_coupled), in place on a CPU model. Shared by
 * infer_bench.c and eval_bench.c. */
#ifndef PX_BENCH_PROJECT_H
#define PX_BENCH_PROJECT_H

#include <stdlib.h>
#include <string.h>

#include "prunex/nn.h"
#include "prunex/prune.h"

/* 0, or -1 with px_last_error() set. */
static inline int px_bench_project_coupled(px_model_t *m, double keep) {
  for (int i = 0; i < px_model_num_params(m); i++) {
    int j = px_model_channel_consumer(m, i);
    if (j < 0) continue;
    px_tensor_t *tp = px_model_param(m, i)->value, *tc = px_model_param(m, j)->value;
    px_conv_shape_t sp = {(int32_t)tp->dims[0], (int32_t)tp->dims[1], (int32_t)tp->dims[2],
                          (int32_t)tp->dims[3]};
    px_conv_shape_t sc = {(int32_t)tc->dims[0], (int32_t)tc->dims[1], (int32_t)tc->dims[2],
                          (int32_t)tc->dims[3]};
    uint8_t *fm = malloc((size_t)sp.c_out), *cm = malloc((size_t)sc.c_in);
    int bad = !fm || !cm;
    if (!bad) {
      memset(fm, 1, (size_t)sp.c_out);
      bad = px_prune_project_coupled(tp->data, sp, tc->data, sc, keep, fm, cm, NULL, 0) < 0;
    }
    free(fm);
    free(cm);
    if (bad) return -1;
  }
  return 0;
}

#endif
