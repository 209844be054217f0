/* A 3-channel model's ONNX export runs on batches: a ResNet-20 for CIFAR-10
 * (3 x 32 x 32, R,G,B) saved and exported with px_export_file, whose graph
 * starts with the per-channel normalisation; our engine writes its logits
 * on 16 random images normalised with CIFAR-10's mean and std, and
 * tests/export_rgb_check.py (Debian's /usr/bin/python3) runs the file in
 * OpenCV's dnn on batches of 1, 5 and 16 of the raw images / 255, and ONNX
 * Runtime (onnxruntime-node, tests/onnx_ort.js) on the batch of 16: the
 * same logits on every image. Skips without python3-onnx and python3-opencv
 * (scripts/bootstrap installs them). */
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
#include "prunex/nn.h"
#include "prunex/ops.h"
#include "px_test_util.h"

#define N 16

static void rgb_export_runs_on_batches_in_opencv(void **state) {
  (void)state;
  if (px_test_py("-c 'import onnx, cv2, numpy' >/dev/null 2>&1") != 0) {
    print_message("needs python3-onnx, python3-opencv, python3-numpy\n");
    skip();
  }
  px_ops_t *ops;
  assert_int_equal(px_ops_create(px_device_cpu(), 1, &ops), PX_OK);
  px_model_config_t mc = {"resnet20", 3, 10, 8, 32, 32, NULL, 0, PX_PRECISION_FP32, NULL};
  px_model_t *m;
  assert_int_equal(px_model_create(ops, &mc, &m), PX_OK);
  assert_int_equal(px_model_init_params(m, 7), PX_OK);
  px_dataset_info_t info = {N, 3, 32, 32, 10, {0}, {0}};
  memcpy(info.mean, px_cifar10_mean, sizeof px_cifar10_mean);
  memcpy(info.std, px_cifar10_std, sizeof px_cifar10_std);
  px_dataset_t *ds;
  assert_int_equal(px_dataset_create_synthetic(&info, 3, &ds), PX_OK);

  char dir[] = "/tmp/px_export_rgb_XXXXXX", path[512], xpath[512], lpath[512], cmd[4096];
  assert_non_null(mkdtemp(dir));
  snprintf(path, sizeof path, "%s/model.safetensors", dir);
  assert_int_equal(px_model_save(m, NULL, path, NULL, 0), PX_OK);
  px_export_report_t rep;
  if (px_export_file(path, dir, 1, "cifar10", &rep) != PX_OK) fail_msg("export: %s", px_last_error());
  snprintf(xpath, sizeof xpath, "%s/x.u8", dir);
  assert_int_equal(px_data_write_file(xpath, px_dataset_images(ds), (size_t)N * 3 * 32 * 32), PX_OK);
  snprintf(lpath, sizeof lpath, "%s/logits.f32", dir);
  assert_true(px_test_write_logits_norm(m, ds, N, px_cifar10_mean, px_cifar10_std, lpath) >= 0);
  /* ONNX Runtime on the whole batch of raw pixels / 255 (tests/onnx_ort.js) */
  char fpath[512], opath[512], mods[512];
  snprintf(fpath, sizeof fpath, "%s/x.f32", dir);
  snprintf(opath, sizeof opath, "%s/ort.f32", dir);
  float *xf = malloc((size_t)N * 3 * 32 * 32 * sizeof *xf);
  assert_non_null(xf);
  for (size_t i = 0; i < (size_t)N * 3 * 32 * 32; i++) xf[i] = px_dataset_images(ds)[i] / 255.0f;
  assert_int_equal(px_data_write_file(fpath, xf, (size_t)N * 3 * 32 * 32 * sizeof *xf), PX_OK);
  free(xf);
  if (px_test_ort_modules(mods, sizeof mods)) {
    snprintf(cmd, sizeof cmd, "NODE_PATH=%s node %s/tests/onnx_ort.js %s %s %d 3 32 32 %s", mods,
             PX_SOURCE_DIR, rep.onnx_path, fpath, N, opath);
    assert_int_equal(system(cmd), 0);
  } else {
    opath[0] = '-';
    opath[1] = '\0';
  }
  snprintf(cmd, sizeof cmd, "%s/tests/export_rgb_check.py %s %s %s %d 3 32 32 %s",
           PX_SOURCE_DIR, rep.onnx_path, xpath, lpath, N, opath);
  assert_int_equal(px_test_py(cmd), 0);

  snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
  assert_int_equal(system(cmd), 0);
  px_dataset_destroy(ds);
  px_model_destroy(m);
  px_ops_destroy(ops);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(rgb_export_runs_on_batches_in_opencv),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
