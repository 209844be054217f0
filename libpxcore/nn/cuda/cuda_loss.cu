/* Softmax cross-entropy on CUDA: one block, each thread taking rows
 * t, t + blockDim, ..., with the arithmetic of the CPU version, the same
 * code (nn/px_loss_row.h: max first, then sums of exp in double, the first
 * maximum as the prediction); the
 * per-thread loss sums, hit counts and the first bad label are combined by
 * a fixed tree in shared memory, so the result is deterministic. Logits are
 * [N, K] with K the number of classes (10 for our data sets): a row per
 * thread is plenty. The result comes back to pinned host memory with one
 * copy, the only synchronisation of a training step. */
#include <string.h>

#include "nn/cuda/px_cuda_ops_int.h"
#include "nn/px_loss_row.h"
#include "prunex/ops_internal.h"

enum { PX__CE_THREADS = 256 };

__global__ static void px__softmax_ce_kernel(px__cuda_loss_result_t *res, float *dlogits,
                                             const float *__restrict__ logits,
                                             const int32_t *__restrict__ labels, int64_t n,
                                             int64_t k) {
  __shared__ double s_loss[PX__CE_THREADS];
  __shared__ long long s_hits[PX__CE_THREADS];
  __shared__ int s_bad[PX__CE_THREADS];
  const int t = threadIdx.x;
  const double inv_n = 1.0 / (double)n;
  double loss = 0.0;
  long long hits = 0;
  int bad = -1;
  for (int64_t r = t; r < n; r += blockDim.x) {
    const float *row = logits + r * k;
    const int32_t lab = labels[r];
    if (lab < 0 || lab >= k) {
      if (bad < 0) bad = (int)r; /* rows ascend per thread: this is its first */
      continue;
    }
    int hit;
    loss += px__softmax_ce_row(dlogits ? dlogits + r * k : NULL, &hit, row, lab, k, inv_n);
    hits += hit;
  }
  s_loss[t] = loss;
  s_hits[t] = hits;
  s_bad[t] = bad;
  __syncthreads();
  for (int half = PX__CE_THREADS / 2; half > 0; half /= 2) {
    if (t < half) {
      s_loss[t] += s_loss[t + half];
      s_hits[t] += s_hits[t + half];
      const int a = s_bad[t], b = s_bad[t + half];
      s_bad[t] = a < 0 ? b : (b < 0 ? a : (a < b ? a : b));
    }
    __syncthreads();
  }
  if (t == 0) {
    res->loss_sum = s_loss[0];
    res->correct = s_hits[0];
    res->bad_label = s_bad[0];
    res->pad = 0;
  }
}

extern "C" px_status_t px__cuda_softmax_ce(px_ops_t *o, px_tensor_t *dlogits, float *loss,
                                           int64_t *correct, const px_tensor_t *logits,
                                           const px_tensor_t *labels) {
  px__cuda_ops_t *ops = px__cuda_ctx(o);
  /* shapes and devices: checked by the dispatcher (px_softmax_ce) */
  const int64_t n = logits->dims[0], k = logits->dims[1];
  PX_CHECK(px__cuda_enter(ops));
  px__softmax_ce_kernel<<<1, PX__CE_THREADS, 0, ops->stream>>>(
      ops->dres, dlogits ? (float *)dlogits->data : NULL, (const float *)logits->data,
      (const int32_t *)labels->data, n, k);
  PX_CUDA_LAUNCHED("softmax cross-entropy");
  PX_CUDA(cudaMemcpyAsync(ops->hres, ops->dres, sizeof *ops->hres, cudaMemcpyDeviceToHost,
                          ops->stream));
  PX_CUDA(cudaStreamSynchronize(ops->stream));
  const px__cuda_loss_result_t r = *ops->hres;
  if (r.bad_label >= 0)
    return px_set_error(PX_ERR_INVALID, "px_softmax_ce: the label of sample %d is not in [0, %lld)",
                        r.bad_label, (long long)k);
  if (loss) *loss = (float)(r.loss_sum / (double)n);
  if (correct) *correct = (int64_t)r.correct;
  return PX_OK;
}
