/* Softmax cross-entropy on the CPU in plain C: logits are [N, K] with K the
 * number of classes (10 for CIFAR-10 and Fashion-MNIST), far too small for a
 * primitive to pay off. The arithmetic of a row (sums in double, the max
 * subtracted first so exp cannot overflow) is nn/px_loss_row.h, which the
 * CUDA kernel runs too. */
#include "nn/cpu/px_cpu_int.h"
#include "nn/px_loss_row.h"
#include "prunex/ops_internal.h"

px_status_t px__cpu_softmax_ce(px_ops_t *ops, px_tensor_t *dlogits, float *loss, int64_t *correct,
                               const px_tensor_t *logits, const px_tensor_t *labels) {
  PX_CHECK(px__cpu_require(ops, "px_softmax_ce"));
  /* shapes and devices: checked by the dispatcher (px_softmax_ce) */
  const int64_t n = logits->dims[0], k = logits->dims[1];
  const float *x = logits->data;
  const int32_t *lab = labels->data;
  for (int64_t i = 0; i < n; i++)
    PX_REQUIRE(lab[i] >= 0 && lab[i] < k, "px_softmax_ce: label %d of sample %lld not in [0, %lld)",
               (int)lab[i], (long long)i, (long long)k);

  float *dx = dlogits ? dlogits->data : NULL;
  const double inv_n = 1.0 / (double)n;
  double total = 0.0;
  int64_t hits = 0;
  for (int64_t i = 0; i < n; i++) {
    int hit;
    total += px__softmax_ce_row(dx ? dx + i * k : NULL, &hit, x + i * k, lab[i], k, inv_n);
    hits += hit;
  }
  if (loss) *loss = (float)(total * inv_n);
  if (correct) *correct = hits;
  return PX_OK;
}
