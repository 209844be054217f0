/* prune.mac_keep (px_strategy_mac_keep): the channel keep a budget of
 * multiply-accumulates chooses. For resnet20 it is the hand count's (the
 * quickstart's budget of half the MACs keeps 30 of layer3's 64 inner
 * channels: 31 is 2,368 MACs over); for resnet20 and resnet50 (bottleneck)
 * at several budgets the masks H-SADMM projects at that keep give a compact
 * model of exactly the counted MACs where the stream readers keep their
 * inputs (a bound where they prune theirs), within the budget, and one more
 * channel anywhere is over it; a budget below what the unpruned layers
 * compute is refused with both figures; skip_layers' convs count whole.
 * (The imported MobileNetV2-style graph: test_onnx_import; a job through
 * pxctl run: test_pxctl_run.) */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "prunex/export.h"
#include "prunex/nn.h"
#include "prunex/strategy.h"
#include "px_test_onnx.h"
#include "px_test_util.h"

#define BATCH 2

static px_model_t *built_in(px_ops_t *ops, const char *arch, int channels) {
  px_model_config_t cfg = {arch, channels, 10, BATCH, 32, 32, NULL, 0, PX_PRECISION_FP32, NULL};
  px_model_t *m = NULL;
  assert_int_equal(px_model_create(ops, &cfg, &m), PX_OK);
  assert_int_equal(px_model_init_params(m, 3), PX_OK);
  return m;
}

/* resnet20 on 1 x 32 x 32 (Fashion-MNIST padded), by hand: each block's
 * inner channel costs its two 3x3 convs, 2 * 16 * 9 * 1024 in layer1;
 * 16 * 9 * 256 + 32 * 9 * 256 in layer2's first block (stride 2), 2 * 32 *
 * 9 * 256 in the others; 32 * 9 * 64 + 64 * 9 * 64 and 2 * 64 * 9 * 64 in
 * layer3. The stem (16 * 9 * 1024), the two 1x1 shortcuts (32 * 16 * 256,
 * 64 * 32 * 64) and the classifier (64 * 10) are not pruned. */
static uint64_t resnet20_macs(int c1, int c2, int c3) {
  uint64_t fixed = 16 * 9 * 1024 + 32 * 16 * 256 + 64 * 32 * 64 + 64 * 10;
  uint64_t l1 = 3 * 2 * 16 * 9 * 1024, l2 = 16 * 9 * 256 + 32 * 9 * 256 + 2 * 2 * 32 * 9 * 256,
           l3 = 32 * 9 * 64 + 64 * 9 * 64 + 2 * 2 * 64 * 9 * 64;
  return fixed + l1 * (uint64_t)c1 + l2 * (uint64_t)c2 + l3 * (uint64_t)c3;
}

static void resnet20_budget_is_the_hand_count(void **state) {
  (void)state;
  px_ops_t *ops;
  assert_int_equal(px_ops_create(px_device_cpu(), 1, &ops), PX_OK);
  px_model_t *m = built_in(ops, "resnet20", 1);
  assert_true(px_model_macs(m) == resnet20_macs(16, 32, 64));
  assert_true(px_model_macs(m) == 40518272);
  uint64_t macs;
  /* half: 8 of 16, 15 of 32, 30 of 64 (48.5%); 31 of 64 takes 16 of 32 */
  double keep = px_test_mac_budget(ops, m, BATCH, 0.5, 1.0, &macs);
  assert_true(keep == 30.0 / 64.0);
  assert_true(macs == resnet20_macs(8, 15, 30));
  assert_true(macs == 19653248);
  assert_true(resnet20_macs(8, 16, 31) == 40518272 / 2 + 2368);
  px_model_destroy(m);
  /* a quarter: 4 of 16, 7 of 32, 14 of 64 (24.0%); 15 of 64 takes 8 of 32 */
  m = built_in(ops, "resnet20", 1);
  keep = px_test_mac_budget(ops, m, BATCH, 0.25, 1.0, &macs);
  assert_true(keep == 14.0 / 64.0);
  assert_true(macs == resnet20_macs(4, 7, 14) && macs == 9626240);
  assert_true(resnet20_macs(4, 8, 15) > 40518272 / 4);
  px_model_destroy(m);
  /* the whole model fits the budget of 1 */
  m = built_in(ops, "resnet20", 1);
  keep = px_test_mac_budget(ops, m, BATCH, 1.0, 1.0, &macs);
  assert_true(keep == 1.0 && macs == 40518272);
  px_model_destroy(m);
  px_ops_destroy(ops);
}

/* The stream readers pruning their own inputs (uncoupled keep 0: the
 * chosen keep) leave zeros the compact model drops only where no reader
 * keeps the channel: the count is a bound. resnet50's bottlenecks couple
 * two pairs per block (conv1 -> conv2 -> conv3). */
static void compact_models_stay_within_the_budget(void **state) {
  (void)state;
  px_ops_t *ops;
  assert_int_equal(px_ops_create(px_device_cpu(), 1, &ops), PX_OK);
  const struct {
    const char *arch;
    int channels;
    double mac_keep, uncoupled;
  } cases[] = {{"resnet20", 3, 0.5, 0.0}, {"resnet20", 3, 0.3, 0.5},
               {"resnet50", 3, 0.5, 1.0}, {"resnet50", 3, 0.3, 0.0}};
  for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
    px_model_t *m = built_in(ops, cases[c].arch, cases[c].channels);
    uint64_t dense = px_model_macs(m), macs;
    double keep = px_test_mac_budget(ops, m, BATCH, cases[c].mac_keep, cases[c].uncoupled, &macs);
    print_message("%s at %g of %llu MACs: channel keep %.4g\n", cases[c].arch, cases[c].mac_keep,
                  (unsigned long long)dense, keep);
    assert_true(keep > 0.0 && keep < 1.0);
    px_model_destroy(m);
  }
  px_ops_destroy(ops);
}

static void budgets_below_the_unpruned_layers_are_refused(void **state) {
  (void)state;
  px_ops_t *ops;
  assert_int_equal(px_ops_create(px_device_cpu(), 1, &ops), PX_OK);
  px_model_t *m = built_in(ops, "resnet20", 1);
  int np = px_model_num_params(m);
  px_hsadmm_param_t *hp = calloc((size_t)np, sizeof *hp);
  px_strategy_hsadmm_params(m, NULL, 0, hp);
  /* one channel per group: 1,903,232 MACs, 4.7% */
  double keep = -1;
  uint64_t macs = 0;
  assert_true(px_strategy_coupled_macs(m, hp, 1e-9) == resnet20_macs(1, 1, 1));
  assert_int_equal(px_strategy_mac_keep(m, hp, 0.04, &keep, &macs), PX_ERR_INVALID);
  assert_true(keep == -1);
  assert_non_null(strstr(px_last_error(), "prune.mac_keep"));
  assert_non_null(strstr(px_last_error(), "1903232 (4.7%)"));
  assert_int_equal(px_strategy_mac_keep(m, hp, 0.05, &keep, &macs), PX_OK);
  assert_true(keep == 1.0 / 64.0 && macs == resnet20_macs(1, 1, 1)); /* 1/32 takes 2 of 64 */
  assert_int_equal(px_strategy_mac_keep(m, hp, 0.0, &keep, &macs), PX_ERR_INVALID);
  assert_int_equal(px_strategy_mac_keep(m, hp, 1.5, &keep, &macs), PX_ERR_INVALID);
  assert_non_null(strstr(px_last_error(), "prune.mac_keep: 1.5"));
  /* skip_layers: layer3's convs count whole, so the others prune deeper */
  const char *skip[] = {"layer3.0.conv1", "layer3.1.conv1", "layer3.2.conv1"};
  px_strategy_hsadmm_params(m, skip, 3, hp);
  assert_int_equal(px_strategy_mac_keep(m, hp, 0.5, &keep, &macs), PX_OK);
  assert_true(macs == resnet20_macs((int)ceil(keep * 16 - 1e-9), (int)ceil(keep * 32 - 1e-9), 64));
  assert_true(keep < 30.0 / 64.0);
  /* nothing left to prune: only a budget of the whole model holds */
  const char *all[] = {"layer1.0.conv1", "layer1.1.conv1", "layer1.2.conv1",
                       "layer2.0.conv1", "layer2.1.conv1", "layer2.2.conv1",
                       "layer3.0.conv1", "layer3.1.conv1", "layer3.2.conv1"};
  px_strategy_hsadmm_params(m, all, 9, hp);
  assert_int_equal(px_strategy_mac_keep(m, hp, 0.9, &keep, &macs), PX_ERR_INVALID);
  assert_non_null(strstr(px_last_error(), "no coupled channels to prune"));
  assert_int_equal(px_strategy_mac_keep(m, hp, 1.0, &keep, &macs), PX_OK);
  assert_true(keep == 1.0 && macs == 40518272);
  free(hp);
  px_model_destroy(m);
  px_ops_destroy(ops);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(resnet20_budget_is_the_hand_count),
      cmocka_unit_test(compact_models_stay_within_the_budget),
      cmocka_unit_test(budgets_below_the_unpruned_layers_are_refused),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
