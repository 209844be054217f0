/* An image folder end to end: Fashion-MNIST
 * written as PNG files (examples/make_fmnist_folder.py: the first 8,000
 * training and 1,000 test images), trained by `pxctl run` with the real
 * coordinator, agents and workers (hsadmm, resnet20, 2 nodes x 1 CPU worker,
 * 16 x 16 grey images decoded into the folder's cache, channel keep 0.5): the
 * job learns (test accuracy above 80%) and its node leaders exchange fewer
 * bytes than dense training would. Its compact ONNX export carries the
 * folder's input contract (normalisation in the graph, the class names in
 * metadata_props) and runs in OpenCV's dnn (tests/folder_onnx_check.py) on
 * raw val images in [0, 1] with our engine's predictions, image by image. About a minute on
 * a quiet 2-core machine. Skips without the data set, python3-opencv or the
 * agent programs. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include "prunex/data.h"
#include "prunex/export.h"
#include "pxctl_harness.h"
#include "px_test_util.h"

#define FMNIST "/usr/share/datasets/fashion-mnist"
#define SIZE 16

static void write_file(const char *path, const void *p, size_t bytes) {
  FILE *fp = fopen(path, "wb");
  assert_non_null(fp);
  assert_int_equal(fwrite(p, 1, bytes, fp), bytes);
  fclose(fp);
}

static void folder_job_learns_packs_less_and_its_onnx_agrees(void **state) {
  (void)state;
  if (access(FMNIST "/train-images-idx3-ubyte.gz", R_OK) != 0 ||
      px_test_py("-c 'import cv2, numpy' >/dev/null 2>&1") != 0 ||
      access(PXT_PXAGENT, X_OK) != 0 || access(PXT_PXWORKER, X_OK) != 0) {
    print_message("needs " FMNIST ", python3-opencv and the agent programs\n");
    skip();
  }
  char dir[256], data[320], spec[320], runs[320], out[320], cmd[4096];
  assert_int_equal(pxt_mkdtemp(dir, sizeof dir), 0);
  snprintf(data, sizeof data, "%s/fmnist", dir);
  snprintf(spec, sizeof spec, "%s/folder.yaml", dir);
  snprintf(runs, sizeof runs, "%s/runs", dir);
  snprintf(out, sizeof out, "%s/out", dir);
  assert_int_equal(mkdir(runs, 0755), 0);
  snprintf(cmd, sizeof cmd, "%s/examples/make_fmnist_folder.py %s --train 8000 --val 1000 >/dev/null",
           PX_SOURCE_DIR, data);
  assert_int_equal(px_test_py(cmd), 0);

  FILE *fp = fopen(spec, "w");
  assert_non_null(fp);
  fprintf(fp,
          "name: folder\nstrategy: hsadmm\nmodel: {name: resnet20}\n"
          "dataset: {name: folder, path: %s, image_size: %d, channels: 1, augment: false}\n"
          "cluster: {nodes: 2, workers_per_node: 1, device: cpu, threads_per_worker: 1}\n"
          "train: {epochs: 4, batch_size: 64, lr: 0.05, local_steps: 4, eval_every: 100}\n"
          "prune: {channel_keep: 0.5}\n"
          "admm: {rho1: 0.01, rho2: 0.001, adaptive_rho: false, freeze_iteration: 10,\n"
          "       freeze_on_stable: 2}\n",
          data, SIZE);
  fclose(fp);
  pxt_result_t r;
  const char *args[] = {"run", spec, "--json", "--work-dir", runs, "--output", out, NULL};
  int code = pxt_pxctl(&r, dir, args, NULL, 400000);
  if (code != 0) pxt_show("pxctl run", &r);
  assert_int_equal(code, 0);
  char line[8192];
  pxj_t *v = pxj_parse(pxt_last_line(r.out, line, sizeof line));
  assert_non_null(v);
  assert_string_equal(pxj_str(v, "state"), "SUCCEEDED");
  double acc = pxj_num(v, "test_accuracy");
  double inter = pxj_num(v, "inter_bytes"), dense = pxj_num(v, "inter_bytes_dense");
  printf("folder job: test accuracy %.4f, inter-node %.0f bytes (dense %.0f), %g s\n", acc, inter,
         dense, pxj_num(v, "wall_s"));
  assert_true(acc > 0.80);
  assert_true(inter > 0.0 && inter < 0.6 * dense);
  char model[512];
  snprintf(model, sizeof model, "%s", pxj_str(v, "model_path"));
  pxj_free(v);

  /* The workers left the caches beside the data; reading them decodes
   * nothing. */
  px_folder_config_t fc = {data, PX_SPLIT_TRAIN, 1, SIZE, NULL, NULL, 0, NULL, 0};
  px_folder_report_t rep;
  px_dataset_t *train, *val;
  assert_int_equal(px_dataset_load_folder(&fc, &rep, &train), PX_OK);
  assert_int_equal(rep.built, 0);
  assert_int_equal(rep.files, 8000);
  fc.split = PX_SPLIT_TEST;
  assert_int_equal(px_dataset_load_folder(&fc, &rep, &val), PX_OK);
  assert_int_equal(rep.built, 0);
  const px_dataset_info_t *ti = px_dataset_info(train), *vi = px_dataset_info(val);
  assert_int_equal(vi->n, 1000);

  /* The compact ONNX carries the folder's input contract (the worker wrote
   * it into the model file): OpenCV's dnn, fed raw val images in [0, 1] as
   * docs/user-guide.md says, predicts what our engine's compact model
   * predicts, image by image (tests/folder_onnx_check.py). */
  char onnx_dir[320], xs[320], ls[320];
  snprintf(onnx_dir, sizeof onnx_dir, "%s/onnx", dir);
  px_export_report_t er;
  assert_int_equal(px_export_file(model, onnx_dir, 1, NULL, &er), PX_OK);
  assert_true(er.compact_params < er.dense_params);
  px_model_config_t mc;
  int32_t widths[256];
  assert_int_equal(px_model_file_config(er.compact_path, &mc, widths, 256), PX_OK);
  mc.batch = 100;
  mc.height = mc.width = SIZE;
  px_ops_t *ops;
  px_model_t *cm;
  assert_int_equal(px_ops_create(px_device_cpu(), 1, &ops), PX_OK);
  assert_int_equal(px_model_create(ops, &mc, &cm), PX_OK);
  assert_int_equal(px_model_load(cm, NULL, er.compact_path), PX_OK);
  size_t n = (size_t)vi->n, per = (size_t)SIZE * SIZE;
  snprintf(ls, sizeof ls, "%s/logits.f32", dir);
  double ours = px_test_write_logits_norm(cm, val, (int)n, ti->mean, ti->std, ls);
  assert_true(ours >= 0);
  /* the raw pixels our loader decoded: bytes / 255, no normalisation */
  float *x = malloc(n * per * sizeof *x), zero = 0.0f, one = 1.0f;
  int32_t *y = malloc(n * sizeof *y);
  uint32_t *idx = malloc(n * sizeof *idx);
  for (size_t i = 0; i < n; i++) idx[i] = (uint32_t)i;
  assert_int_equal(px_data_fill_batch(val, idx, (int32_t)n, NULL, &zero, &one, 0, 0, x, y),
                   PX_OK);
  snprintf(xs, sizeof xs, "%s/x.raw", dir);
  write_file(xs, x, n * per * sizeof *x);
  snprintf(cmd, sizeof cmd, "%s/tests/folder_onnx_check.py %s %s %s %s %zu 1 %d %.4f",
           PX_SOURCE_DIR, er.onnx_path, data, xs, ls, n, SIZE, 100.0 * ours);
  int rc = px_test_py(cmd);
  printf("our compact model: accuracy %.4f (the job's %.4f)\n", ours, acc);
  assert_int_equal(rc, 0);
  /* 1,000 images: at most one image apart (float summation order) */
  assert_true(fabs(ours - acc) <= 0.0011);
  free(x);
  free(y);
  free(idx);
  px_model_destroy(cm);
  px_ops_destroy(ops);
  px_dataset_destroy(train);
  px_dataset_destroy(val);
  pxt_rmtree(dir);
}

/* pxctl refuses a folder with an empty class before anything starts: exit
 * status 2, the directory named. */
static void pxctl_refuses_a_folder_with_an_empty_class(void **state) {
  (void)state;
  char dir[256], p[512], spec[320];
  assert_int_equal(pxt_mkdtemp(dir, sizeof dir), 0);
  const char *sub[] = {"data", "data/train", "data/val", "data/train/cat", "data/train/dog",
                       "data/val/cat", "data/val/dog"};
  for (size_t i = 0; i < sizeof sub / sizeof sub[0]; i++) {
    snprintf(p, sizeof p, "%s/%s", dir, sub[i]);
    assert_int_equal(mkdir(p, 0755), 0);
  }
  static const uint8_t png[] = {0x89, 'P', 'N', 'G', '\r', '\n', 0x1a, '\n'};
  const char *files[] = {"data/train/cat/1.png", "data/train/dog/1.png", "data/val/cat/1.png"};
  for (size_t i = 0; i < 3; i++) {
    snprintf(p, sizeof p, "%s/%s", dir, files[i]);
    write_file(p, png, sizeof png);
  }
  snprintf(spec, sizeof spec, "%s/j.yaml", dir);
  FILE *fp = fopen(spec, "w");
  assert_non_null(fp);
  fprintf(fp, "strategy: ddp\nmodel: {name: resnet20}\ndataset: {name: folder, path: %s/data}\n"
              "cluster: {nodes: 1, workers_per_node: 1, device: cpu}\n", dir);
  fclose(fp);
  pxt_result_t r;
  const char *run[] = {"run", spec, NULL};
  const char *submit[] = {"submit", spec, "--coordinator", "127.0.0.1:1", NULL};
  const char *const *cmds[] = {run, submit};
  for (int k = 0; k < 2; k++) {
    assert_int_equal(pxt_pxctl(&r, dir, cmds[k], NULL, 30000), 2);
    if (!strstr(r.err, "data/val/dog") || !strstr(r.err, "empty class")) pxt_show("pxctl", &r);
    assert_non_null(strstr(r.err, "data/val/dog"));
    assert_non_null(strstr(r.err, "empty class"));
  }
  pxt_rmtree(dir);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(pxctl_refuses_a_folder_with_an_empty_class),
      cmocka_unit_test(folder_job_learns_packs_less_and_its_onnx_agrees),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
