/* bf16 training on the CPU engine (precision bf16 on a CPU context): the
 * convolutions compute in bf16 on oneDNN's AVX512-BF16 / AMX kernels with
 * f32 accumulation, from the f32 master weights converted each call; batch
 * norm, the loss, the gradients handed to the optimiser and the optimiser
 * stay f32 (nn/cpu/cpu_conv.c, cpu_wlayer.c).
 *
 * Proves, on random data and against the fp32 engine: one ResNet-20 step
 * gives the fp32 step's loss and weight gradients to bf16 accuracy; bf16
 * training lowers the loss as fp32 does. On a CPU without bf16 instructions
 * precision bf16 is refused naming the ISA, and the checks skip. */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "prunex/data.h"
#include "prunex/nn.h"
#include "prunex/ops.h"
#include "px_test_util.h"

#include "nn/cpu/px_cpu_int.h"
#include "ops_test_util.h"

#define BATCH 16

/* 1: this CPU runs bf16 (the model was made); 0: refused naming the ISA. */
static int cpu_has_bf16(void) {
  px_ops_t *ops = new_ops();
  px_model_config_t mc = {"resnet20", 3, 10, 2, 32, 32, NULL, 0, PX_PRECISION_BF16, NULL};
  px_model_t *m = NULL;
  px_status_t st = px_model_create(ops, &mc, &m);
  if (st != PX_OK) {
    assert_int_equal(st, PX_ERR_INVALID);
    assert_null(m);
    assert_non_null(strstr(px_last_error(), "bf16 precision on the CPU needs AVX512-BF16 or AMX"));
  }
  px_model_destroy(m);
  px_ops_destroy(ops);
  return st == PX_OK;
}

#define REQUIRE_BF16()                                                             \
  do {                                                                             \
    if (!cpu_has_bf16()) {                                                         \
      printf("this CPU has no bf16 instructions: the bf16 checks skip\n");         \
      skip();                                                                      \
    }                                                                              \
  } while (0)

/* `steps` ResNet-20 training steps (batch 16, synthetic data, seed 1, SGD
 * after each) on a fresh one-thread CPU context (one thread: a loaded
 * machine costs a parallel region's barriers a time slice each) in
 * precision prec. No primitive may run oneDNN's reference code: in bf16
 * without AMX, channels-last convolutions did (9.6 s a step on an AMD EPYC
 * Zen 5, against 0.08 s in the blocked layouts now used there). */
static px_test_steps_t model_step(px_precision_t prec, int steps) {
  px_ops_t *ops = NULL;
  assert_ok(px_ops_create(px_device_cpu(), 1, &ops));
  px_test_steps_t r;
  assert_int_equal(px_test_resnet20_steps(ops, BATCH, prec, steps, &r), 0);
  assert_int_equal(px__cpu_ops_ref_pds(ops), 0);
  px_ops_destroy(ops);
  return r;
}

static void resnet20_step_in_bf16_matches_fp32(void **state) {
  (void)state;
  REQUIRE_BF16();
  px_test_steps_t ref = model_step(PX_PRECISION_FP32, 1);
  px_test_steps_t b = model_step(PX_PRECISION_BF16, 1);
  double dot = 0, nb = 0, nr = 0;
  for (size_t i = 0; i < ref.numel; i++) {
    dot += (double)b.grads[i] * ref.grads[i];
    nb += (double)b.grads[i] * b.grads[i];
    nr += (double)ref.grads[i] * ref.grads[i];
  }
  const double e16 = px_test_rel_l2(b.grads, ref.grads, ref.numel), cosine = dot / sqrt(nb * nr);
  printf("loss fp32 %.6f, bf16 %.6f; weight gradients: relative L2 error %.3g, cosine %.4f\n",
         ref.first, b.first, e16, cosine);
  /* bf16 keeps 8 mantissa bits: each input and weight is off by up to 2^-9
   * relative, and a sum of K products of such values by about 2^-9 / sqrt(K)
   * of its scale; through 19 layers of batch norm the loss moves by well
   * under 2% (the CUDA engine's bf16 check uses the same bound). The
   * gradients differ more: a ReLU whose input is within rounding of zero
   * flips, in every layer; the CUDA engine's bf16 step and PyTorch's
   * autocast both give a relative error near 0.27 here, so the bound is on
   * the direction (cosine) and on a loose magnitude. */
  assert_true(fabsf(b.first - ref.first) <= 2e-2f * fabsf(ref.first));
  assert_true(e16 < 0.5);
  assert_true(cosine > 0.9);
  /* and not bit for bit: the bf16 convolutions really ran */
  assert_true(memcmp(b.grads, ref.grads, ref.numel * sizeof(float)) != 0);
  free(ref.grads);
  free(b.grads);
}

static void bf16_training_lowers_the_loss(void **state) {
  (void)state;
  REQUIRE_BF16();
  px_test_steps_t b = model_step(PX_PRECISION_BF16, 20);
  assert_true(b.last < b.first - 0.3f); /* the loss fell by more than 0.3 */
  free(b.grads);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(resnet20_step_in_bf16_matches_fp32),
      cmocka_unit_test(bf16_training_lowers_the_loss),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
