/* Multiply-accumulates per image (px_model_macs) against hand counts: the
 * dense resnet20, a compact one whose blocks keep half of their first
 * convs' filters, and the CIFAR resnet18. Imported graphs are checked against PyTorch's own count in
 * test_onnx_import. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include "prunex/nn.h"

static px_ops_t *ops;

static int setup(void **state) {
  (void)state;
  return px_ops_create(px_device_cpu(), 1, &ops) == PX_OK ? 0 : -1;
}

static int teardown(void **state) {
  (void)state;
  px_ops_destroy(ops);
  return 0;
}

static uint64_t macs_of(const char *arch, int c, int hw, int classes, const int32_t *widths,
                        int nwidths) {
  px_model_config_t cfg = {arch, c, classes, 1, hw, hw, widths, nwidths, PX_PRECISION_FP32, NULL};
  px_model_t *m = NULL;
  assert_int_equal(px_model_create(ops, &cfg, &m), PX_OK);
  uint64_t n = px_model_macs(m);
  px_model_destroy(m);
  return n;
}

/* k x k conv of ci -> co channels onto an hw x hw map */
static uint64_t conv(uint64_t ci, uint64_t co, uint64_t k, uint64_t hw) {
  return ci * co * k * k * hw * hw;
}

static void resnet20_dense_by_hand(void **state) {
  (void)state;
  uint64_t want = conv(1, 16, 3, 32) + 6 * conv(16, 16, 3, 32) +          /* stem, stage 1 */
                  conv(16, 32, 3, 16) + 5 * conv(32, 32, 3, 16) + conv(16, 32, 1, 16) +
                  conv(32, 64, 3, 8) + 5 * conv(64, 64, 3, 8) + conv(32, 64, 1, 8) +
                  64 * 10;                                                  /* classifier */
  assert_int_equal(want, 40518272);
  assert_int_equal(macs_of("resnet20", 1, 32, 10, NULL, 0), want);
}

/* widths in build order: stem, then per block conv1, conv2 [, downsample] */
static void resnet20_compact_by_hand(void **state) {
  (void)state;
  const int32_t w[] = {16, 8,  16, 8,  16, 8,  16, 16, 32, 32, 16,
                       32, 16, 32, 32, 64, 64, 32, 64, 32, 64};
  uint64_t stage1 = 3 * (conv(16, 8, 3, 32) + conv(8, 16, 3, 32));
  uint64_t stage2 = conv(16, 16, 3, 16) + conv(16, 32, 3, 16) + conv(16, 32, 1, 16) +
                    2 * (conv(32, 16, 3, 16) + conv(16, 32, 3, 16));
  uint64_t stage3 = conv(32, 32, 3, 8) + conv(32, 64, 3, 8) + conv(32, 64, 1, 8) +
                    2 * (conv(64, 32, 3, 8) + conv(32, 64, 3, 8));
  uint64_t want = conv(1, 16, 3, 32) + stage1 + stage2 + stage3 + 64 * 10;
  assert_int_equal(macs_of("resnet20", 1, 32, 10, w, (int)(sizeof w / sizeof w[0])), want);
}

/* resnet18 as the CIFAR papers build it (3x3 stem, stride 1, no max pool):
 * 0.56 G, as their tables quote */
static void resnet18_cifar_by_hand(void **state) {
  (void)state;
  uint64_t want = conv(3, 64, 3, 32) + 4 * conv(64, 64, 3, 32) + conv(64, 128, 3, 16) +
                  3 * conv(128, 128, 3, 16) + conv(64, 128, 1, 16) + conv(128, 256, 3, 8) +
                  3 * conv(256, 256, 3, 8) + conv(128, 256, 1, 8) + conv(256, 512, 3, 4) +
                  3 * conv(512, 512, 3, 4) + conv(256, 512, 1, 4) + 512 * 10;
  assert_int_equal(want, 555422720);
  assert_int_equal(macs_of("resnet18", 3, 32, 10, NULL, 0), want);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(resnet20_dense_by_hand),
      cmocka_unit_test(resnet20_compact_by_hand),
      cmocka_unit_test(resnet18_cifar_by_hand),
  };
  return cmocka_run_group_tests(tests, setup, teardown);
}
