/* The arithmetic of softmax cross-entropy for one row of logits, shared by
 * the CPU backend (nn/cpu/cpu_loss.c, a loop over rows) and the CUDA one
 * (nn/cuda/cuda_loss.cu, a row per thread), so that both compute the same
 * numbers the same way: the first maximum as the prediction, the max
 * subtracted before exp, the sums in double. Only how rows are spread over
 * workers and how the totals are combined differ between the backends. */
#ifndef PX_LOSS_ROW_H
#define PX_LOSS_ROW_H

#include <math.h>
#include <stdint.h>

#ifdef __CUDACC__
#define PX__HOST_DEVICE __host__ __device__
#else
#define PX__HOST_DEVICE
#endif

/* Loss of row (k logits) for label lab (in [0, k)): log-sum-exp minus the
 * label's logit. *hit is 1 when the prediction is lab. When drow is not
 * NULL it receives the gradient of the mean loss over the batch:
 * (softmax - onehot) * inv_n. */
PX__HOST_DEVICE static inline double px__softmax_ce_row(float *drow, int *hit, const float *row,
                                                        int32_t lab, int64_t k, double inv_n) {
  int64_t arg = 0;
  for (int64_t j = 1; j < k; j++)
    if (row[j] > row[arg]) arg = j;
  const double mx = row[arg];
  double sum = 0.0;
  for (int64_t j = 0; j < k; j++) sum += exp((double)row[j] - mx);
  const double lse = mx + log(sum);
  *hit = arg == lab;
  if (drow)
    for (int64_t j = 0; j < k; j++) {
      const double pj = exp((double)row[j] - lse);
      drow[j] = (float)((pj - (j == lab ? 1.0 : 0.0)) * inv_n);
    }
  return lse - (double)row[lab];
}

#endif
