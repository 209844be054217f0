/* The export checked by runtimes that share no code with PruneX: a ResNet-20
 * trained for a few steps on Fashion-MNIST, projected with coupled channels
 * (as H-SADMM projects; keep 0.75 so that a few steps of training survive
 * it), its BN statistics re-estimated, then exported (compact safetensors +
 * ONNX) with px_export_file. Our engine writes the compact model's logits on
 * the first 2,000 test images (test export proves they are the masked dense
 * model's), fed by the training loader (padded, normalised);
 * tests/export_check.py (Debian's /usr/bin/python3) then runs
 * python3-onnx's checker (a raw 1x28x28 input, the preprocessing in the
 * graph, the metadata), OpenCV's dnn fed the raw 28x28 test images / 255 as
 * docs/user-guide.md says and a plain PyTorch module built from the compact
 * file's metadata fed the raw images preprocessed as the ONNX metadata says:
 * both predict what our engine predicts, image by image, with its logits.
 * Skips without the data set or the Python packages (scripts/bootstrap
 * installs them). */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cmocka.h>

#include "prunex/data.h"
#include "prunex/export.h"
#include "prunex/prune.h"
#include "px_test_util.h"

#define FMNIST "/usr/share/datasets/fashion-mnist"
#define KEEP 0.75 /* coupled channel keep: a few steps of training survive it */
#define NTEST 2000 /* the first NTEST test images: the CI machines are small and shared */

static void onnx_opencv_and_torch_agree_with_our_engine(void **state) {
  (void)state;
  if (access(FMNIST "/t10k-images-idx3-ubyte.gz", R_OK) != 0 ||
      px_test_py("-c 'import onnx, cv2, torch, numpy' >/dev/null 2>&1") != 0) {
    print_message("needs " FMNIST " and python3-onnx, python3-opencv, python3-torch\n");
    skip();
  }
  px_train_config_t c;
  px_train_config_default(&c);
  c.augment = 0;
  c.batch = 64;
  c.epochs = 1;
  px_trainer_t *t;
  assert_int_equal(px_trainer_create(&c, &t), PX_OK);
  px_epoch_stats_t es;
  assert_int_equal(px_trainer_steps(t, 30, &es), PX_OK);
  px_model_t *m = px_trainer_model(t);
  for (int i = 0; i < px_model_num_params(m); i++) {
    int j = px_model_channel_consumer(m, i);
    if (j < 0) continue;
    px_tensor_t *tp = px_model_param(m, i)->value, *tc = px_model_param(m, j)->value;
    px_conv_shape_t sp = {(int32_t)tp->dims[0], (int32_t)tp->dims[1], (int32_t)tp->dims[2],
                          (int32_t)tp->dims[3]};
    px_conv_shape_t sc = {(int32_t)tc->dims[0], (int32_t)tc->dims[1], (int32_t)tc->dims[2],
                          (int32_t)tc->dims[3]};
    uint8_t fm[512], cm[512];
    memset(fm, 1, sizeof fm);
    /* a CPU model: parameter data are host memory */
    assert_int_equal(px_prune_project_coupled(tp->data, sp, tc->data, sc, KEEP, fm, cm, NULL, 0),
                     PX_OK);
  }
  assert_int_equal(px_trainer_calibrate_bn(t, 4), PX_OK);

  char dir[] = "/tmp/px_export_rt_XXXXXX", path[512], logits_path[512], cmd[4096];
  assert_non_null(mkdtemp(dir));
  snprintf(path, sizeof path, "%s/model.safetensors", dir);
  assert_int_equal(px_model_save(m, NULL, path, NULL, 0), PX_OK);
  px_export_report_t rep;
  px_status_t st = px_export_file(path, dir, 1, "fashion-mnist", &rep);
  if (st != PX_OK) fail_msg("export: %s", px_last_error());
  print_message("dense %zu params %llu bytes -> compact %zu params %llu bytes, onnx %llu bytes\n",
                rep.dense_params, (unsigned long long)rep.dense_bytes, rep.compact_params,
                (unsigned long long)rep.compact_bytes, (unsigned long long)rep.onnx_bytes);
  assert_true(rep.compact_params < rep.dense_params * 9 / 10);

  /* our engine on the compact file (test export proves it computes the masked
   * dense model's logits) */
  px_dataset_t *ds;
  assert_int_equal(px_dataset_load_fashion_mnist(FMNIST, PX_SPLIT_TEST, &ds), PX_OK);
  px_model_config_t fc;
  int32_t widths[64];
  assert_int_equal(px_model_file_config(rep.compact_path, &fc, widths, 64), PX_OK);
  fc.batch = 100;
  fc.height = fc.width = 32;
  px_model_t *cmod;
  assert_int_equal(px_model_create(px_model_ops(m), &fc, &cmod), PX_OK);
  assert_int_equal(px_model_load(cmod, NULL, rep.compact_path), PX_OK);
  snprintf(logits_path, sizeof logits_path, "%s/logits.f32", dir);
  double acc_c = 100.0 * px_test_write_logits(cmod, ds, NTEST, logits_path);
  print_message("our engine: compact model accuracy %.2f%% on the first %d test images\n", acc_c,
                NTEST);
  assert_true(acc_c > 15); /* not a constant predictor (10%): accuracies to compare mean something */

  snprintf(cmd, sizeof cmd, "%s/tests/export_check.py %s %s %s %d %.4f %s", PX_SOURCE_DIR,
           rep.onnx_path, rep.compact_path, logits_path, NTEST, acc_c, FMNIST);
  int rc = px_test_py(cmd);
  assert_int_equal(rc, 0);

  snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
  assert_int_equal(system(cmd), 0);
  px_model_destroy(cmod);
  px_dataset_destroy(ds);
  px_trainer_destroy(t);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(onnx_opencv_and_torch_agree_with_our_engine),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
