/* torchvision's classification zoo through the ONNX import:
 * each of the 18 networks of ZOO, built by tests/onnx_zoo.py with
 * python3-torchvision (random weights, 10 classes, 64 x 64 inputs, vgg11_bn
 * 224 x 224: onnx_zoo.py says why not 32), exported at opsets 13 and 17 and
 * checked on a batch of 2:
 *   (a) our logits are PyTorch's within 1e-4 of the largest (at least 1);
 *   (b) one training step's gradients are as close to PyTorch's float64
 *       step as its own float32 step is (GRAD_FACTOR times, or GRAD_TOL of
 *       the largest);
 *   (c) H-SADMM at channel keep 0.5 packs fewer inter-node bytes than the
 *       dense exchange (the packed floats and the masks of the pack plan
 *       the data plane uses; bench/zoo/run.sh prints bench/traffic's real
 *       exchange per network);
 *   (d) the compact model (pruned channels removed) exported to ONNX runs
 *       in ONNX Runtime (onnxruntime-node, tests/onnx_ort.js) with our
 *       compact model's logits and predictions.
 * With PX_TEST_ZOO_DEVICE=cuda (ctest's gpu_zoo_NET, label gpu: they skip
 * without a GPU) (a) and (b) run on the CUDA engine instead, in a
 * directory of their own (PX_BINARY_DIR/zoo-cuda); (b) then takes a
 * gradient within GRAD_FACTOR times PyTorch float32's distance or our CPU
 * engine's on the same batch (the known gaps below come with float32
 * batch norms over 8 values; on an H200, 2026-11-30, the CUDA engine's
 * resnet50 layer4.0.bn3 bias gradient was 23% of the largest from
 * float64's, PyTorch 2.11's float32 0.02%).
 * A network the import does not take yet is listed with what its refusal
 * must name (the operator or attribute; the node is named too, as every
 * refusal of an unsupported input does): the test checks that contract, and
 * fails when such a network imports (flip its entry). ctest runs one test
 * per network (onnx_zoo_NET, label zoo, tests/CMakeLists.txt: `ctest -L zoo
 * -j2`); each export and reference goes to PX_BINARY_DIR/zoo and is
 * removed once its checks pass (13 GB for the zoo), or kept with
 * PX_TEST_ZOO_KEEP=1 and then reused by the next run (redone when the
 * Python side changes). Run without an argument, the
 * program checks that `pxtrain --bench` and a folder job spec take an
 * imported model's own input size. Skips without python3-torchvision; (d)
 * skips without onnxruntime-node (scripts/bootstrap installs both). */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <cmocka.h>

#include "prunex/export.h"
#include "prunex/jobspec.h"
#include "prunex/nn.h"
#include "prunex/prune.h"
#include "px_test_onnx.h"
#include "px_test_util.h"

#define ZOO_PY PX_SOURCE_DIR "/tests/onnx_zoo.py"
#define NETS_PY PX_SOURCE_DIR "/tests/onnx_import_nets.py"
#define ORT_JS PX_SOURCE_DIR "/tests/onnx_ort.js"
#define PXTRAIN PX_BINARY_DIR "/cli/pxtrain"
#define BATCH 2
#define K 10
/* (b): a parameter's gradient passes when it is within GRAD_FACTOR times
 * PyTorch float32's distance from the float64 step, or within GRAD_TOL of
 * the largest value (both relative to the float64 gradient's largest). */
#define GRAD_FACTOR 4.0
#define GRAD_TOL 1e-4

/* One network: its input side, per opset (13, 17) NULL when it imports or
 * what the refusal must name, and (b)'s factor where our gradients are
 * known to be further from float64's than PyTorch float32's by more than
 * GRAD_FACTOR (0: GRAD_FACTOR), and its tolerance where even that factor
 * depends on the CPU PyTorch runs on (0: GRAD_TOL of the largest). */
typedef struct {
  const char *net;
  int size;
  const char *refused[2];
  double grad_factor, grad_tol;
} zoo_net_t;

static const int OPSETS[2] = {13, 17};

/* Known gradient gaps (2026-11-29, PX_TEST_GRAD_TABLE=1 prints them): in
 * the last stage of resnet50, wide_resnet50_2 and the regnets (2 x 2 maps,
 * train-mode batch norms over 8 values, activations in the hundreds) some
 * batch-norm and convolution gradients are 10 to 500 times further from the
 * float64 step than PyTorch's float32 ones (up to 16% of the largest
 * against 0.05%); elsewhere within a few times. PyTorch accumulates its CPU
 * batch-norm sums in double. vgg11_bn at 224 x 224: features.11's weight
 * gradient 5.7 times PyTorch float32's distance (1.6e-2 against 2.8e-3).
 * mnasnet1_0 needed a factor of 32 while only its last stage ran
 * channels-last (layers.12.0 4.7 to 15.4 times PyTorch float32's distance);
 * built channels-last throughout (2026-11-30) its worst is 1.75 times.
 * On the Zen 5 VM (2026-11-30) Debian's PyTorch float32 is far closer to
 * float64 in those layers than on the AVX2 VM (vgg11_bn's features.12-23:
 * 2e-6 of the largest against ours 1e-2 to 7.7e-2, the same on both VMs
 * and with oneDNN capped at AVX2; wide_resnet50_2's layer4.2.conv3 22% and
 * layer4.2.bn3 bias 12% against 5e-4 and 1.4e-5): there a tolerance of
 * twice our worst bounds those two networks instead (the factor is
 * meaningless against a yardstick that moves 4,000-fold with the CPU), and
 * resnext50_32x4d's last stage needs a factor (layer4.2.bn2 bias 12.9
 * times PyTorch's distance there, 18.6% of the largest).
 * mobilenet_v2 since imported networks with depthwise convolutions train
 * channels-last (model_onnx.c px__onnx_wants_cl; 2026-11-30): one input of
 * features.13.conv.1's ReLU6 (4 x 4 maps, a batch of 2) is 8.5e-8 there and
 * at most 0 in the blocked layout's sums (float64 agrees with the latter):
 * that one gate passes a gradient the other step does not, and everything
 * before it moves (features.13.conv.1.1's bias 2.0e-2 of the largest,
 * features.0.0 8.3e-4; PyTorch float32 7.3e-5 and 4.6e-5); a tolerance of
 * twice the worst.
 * Reported for the engine; the factors and tolerances below (twice the worst
 * measured) still catch a wrong gradient of the size of a lost term.
 * Every network imports today (a refused one would name what the refusal
 * must say, per opset). */
static const zoo_net_t ZOO[] = {
    {"resnet18", 64, {NULL, NULL}, 0, 0},
    {"resnet50", 64, {NULL, NULL}, 600, 0},
    {"resnext50_32x4d", 64, {NULL, NULL}, 26, 0},
    {"wide_resnet50_2", 64, {NULL, NULL}, 60, 0.45},
    {"vgg11_bn", 224, {NULL, NULL}, 12, 0.16},
    {"mobilenet_v2", 64, {NULL, NULL}, 0, 0.04},
    {"mobilenet_v3_small", 64, {NULL, NULL}, 0, 0},
    {"mobilenet_v3_large", 64, {NULL, NULL}, 0, 0},
    {"efficientnet_b0", 64, {NULL, NULL}, 0, 0},
    {"efficientnet_v2_s", 64, {NULL, NULL}, 0, 0},
    {"regnet_x_400mf", 64, {NULL, NULL}, 600, 0},
    {"regnet_y_400mf", 64, {NULL, NULL}, 1200, 0},
    {"shufflenet_v2_x1_0", 64, {NULL, NULL}, 0, 0},
    {"squeezenet1_1", 64, {NULL, NULL}, 0, 0},
    {"densenet121", 64, {NULL, NULL}, 0, 0},
    {"mnasnet1_0", 64, {NULL, NULL}, 0, 0},
    {"googlenet", 64, {NULL, NULL}, 0, 0},
    {"convnext_tiny", 64, {NULL, NULL}, 0, 0},
};
#define NZOO ((int)(sizeof ZOO / sizeof ZOO[0]))

static const zoo_net_t *the_net; /* argv[1]'s entry */

static double now_s(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return ts.tv_sec + ts.tv_nsec / 1e9;
}

/* PX_TEST_ZOO_DEVICE=cuda (the gpu_zoo_NET tests): (a) and (b) on the CUDA
 * engine, in its default channels-last f32 activations with TF32 off; (c)
 * and (d) are left to the CPU test (the projection, the packing and the
 * export are the same code whatever ran the steps). */
static int on_cuda(void) {
  const char *d = getenv("PX_TEST_ZOO_DEVICE");
  return d && !strcmp(d, "cuda");
}

/* Where the references go: the CUDA tests' own, so that both may run at once. */
static const char *zoo_root(void) {
  return on_cuda() ? PX_BINARY_DIR "/zoo-cuda" : PX_BINARY_DIR "/zoo";
}

/* The reference of net at opset k in PX_BINARY_DIR/zoo (made once; the
 * file alone for a network listed as refused). The first opset's run also
 * exports the second when both import (one PyTorch step for both: the
 * module's reference does not depend on the file's opset); the second's run
 * then finds it made. */
static void zoo_reference(const zoo_net_t *z, int k, char *dir, size_t cap) {
  int opset = OPSETS[k];
  snprintf(dir, cap, "%s/%s-op%d", zoo_root(), z->net, opset);
  char cmd[1024], also[600] = "";
  if (k == 0 && !z->refused[0] && !z->refused[1])
    snprintf(also, sizeof also, " %d %s/%s-op%d", OPSETS[1], zoo_root(), z->net, OPSETS[1]);
  snprintf(cmd, sizeof cmd, ZOO_PY " reference %s %d %s %d%s", z->net, opset, dir,
           z->refused[k] ? 0 : BATCH, also);
  double t0 = now_s();
  assert_int_equal(px_test_py(cmd), 0);
  print_message("%s opset %d: reference in %.1f s (%s)\n", z->net, opset, now_s() - t0, dir);
}

/* A network listed as refused: the check fails naming the node and what. */
static void check_refusal(const zoo_net_t *z, int k, const char *path) {
  px_status_t st = px_model_onnx_check(path, NULL);
  if (st == PX_OK)
    fail_msg("%s opset %d imports now: set its entry in ZOO to NULL (expected refused: %s)",
             z->net, OPSETS[k], z->refused[k]);
  const char *e = px_last_error();
  print_message("%s opset %d refused as expected: %s\n", z->net, OPSETS[k], e);
  if (!strstr(e, "node '") || !strstr(e, z->refused[k]))
    fail_msg("%s: the refusal names no node or not '%s'", z->net, z->refused[k]);
}

/* (a): our eval-mode logits of dir/x.f32 against PyTorch's. */
static void check_logits(px_model_t *m, const char *dir, const char *net, const float *x) {
  float want[BATCH * K], got[BATCH * K];
  assert_int_equal(px_test_read_bytes(dir, "logits.f32", want, sizeof want), sizeof want);
  assert_int_equal(px_model_logits(m, x, BATCH, got), PX_OK);
  double d = 0, scale = 1;
  for (int i = 0; i < BATCH * K; i++) {
    d = fmax(d, fabs((double)got[i] - want[i]));
    scale = fmax(scale, fabs((double)want[i]));
  }
  print_message("%s: (a) logits within %.2e of PyTorch's (largest %.2f)\n", net, d, scale);
  if (d > 1e-4 * scale) fail_msg("%s: logits differ from PyTorch's by %.3e", net, d);
}

/* (c): the bytes H-SADMM's packed exchange moves at channel keep 0.5 (the
 * packed floats and the masks) against the dense parameters'; projects m's
 * weights (pruned groups zero). */
static void check_packing(px_model_t *m, const char *net) {
  int np = px_model_num_params(m);
  px_sparsity_param_t *sp = calloc((size_t)np, sizeof *sp);
  size_t *off = calloc((size_t)np, sizeof *off);
  px_sparsity_t *set = px_test_onnx_sparsity(m, 0.5, sp, off);
  uint8_t *masks = calloc(px_sparsity_mask_bytes(set) + 1, 1);
  assert_int_equal(px_sparsity_project(set, (float *)px_model_flat_params(m)->data, off, masks),
                   PX_OK);
  int prunable = 0;
  for (int i = 0; i < np; i++) prunable += sp[i].prunable;
  double packed = 4.0 * (double)px_test_onnx_packed_floats(m, set, sp, masks, 0, NULL) +
                  (double)px_sparsity_mask_bytes(set);
  double dense = 4.0 * (double)px_model_numel(m);
  print_message("%s: (c) %d prunable tensors; packed exchange %.2f MB of dense %.2f MB (%.1f%% "
                "less)\n", net, prunable, packed / 1e6, dense / 1e6, 100 * (1 - packed / dense));
  if (!(packed < dense)) fail_msg("%s: the packed exchange is not smaller than dense", net);
  px_sparsity_destroy(set);
  free(masks);
  free(off);
  free(sp);
}

/* (d): the compact model of the projected m exported to ONNX, run by ONNX
 * Runtime on x (skipped without it): the same logits and predictions as
 * our compact model, which computes the projected dense model's. */
static void check_compact_ort(px_model_t *m, px_ops_t *ops, const char *dir, const char *net,
                              const float *x, int size, int *ort_skipped) {
  px_model_t *cm = NULL;
  if (px_model_compact(m, ops, BATCH, &cm) != PX_OK)
    fail_msg("%s: compaction: %s", net, px_last_error());
  float ld[BATCH * K], lc[BATCH * K], lo[BATCH * K];
  assert_int_equal(px_model_logits(m, x, BATCH, ld), PX_OK);
  assert_int_equal(px_model_logits(cm, x, BATCH, lc), PX_OK);
  double dc = 0, scale = 1, dor = 0;
  for (int i = 0; i < BATCH * K; i++) {
    dc = fmax(dc, fabs((double)ld[i] - lc[i]));
    scale = fmax(scale, fabs((double)ld[i]));
  }
  if (dc > 1e-4 * scale)
    fail_msg("%s: compact logits differ from the pruned model's by %.3e", net, dc);
  char path[640], mods[512], cmd[4096];
  snprintf(path, sizeof path, "%s/compact.onnx", dir);
  if (px_onnx_save(cm, path, NULL) != PX_OK) fail_msg("%s: export: %s", net, px_last_error());
  print_message("%s: (d) compact model %zu of %zu parameters, its logits within %.2e\n", net,
                px_model_numel(cm), px_model_numel(m), dc);
  if (!px_test_ort_modules(mods, sizeof mods)) {
    *ort_skipped = 1;
    goto done;
  }
  snprintf(cmd, sizeof cmd, "NODE_PATH=%s node " ORT_JS " %s %s/x.f32 %d 3 %d %d %s/ort.f32", mods,
           path, dir, BATCH, size, size, dir);
  assert_int_equal(system(cmd), 0);
  assert_int_equal(px_test_read_bytes(dir, "ort.f32", lo, sizeof lo), sizeof lo);
  for (int i = 0; i < BATCH * K; i++) dor = fmax(dor, fabs((double)lo[i] - lc[i]));
  for (int n = 0; n < BATCH; n++) {
    int a = 0, b = 0;
    for (int j = 1; j < K; j++) {
      if (lo[n * K + j] > lo[n * K + a]) a = j;
      if (lc[n * K + j] > lc[n * K + b]) b = j;
    }
    if (a != b) fail_msg("%s: ONNX Runtime predicts %d for image %d, we %d", net, a, n, b);
  }
  print_message("%s: (d) ONNX Runtime's logits of the compact ONNX within %.2e, same predictions\n",
                net, dor);
  if (dor > 1e-4 * scale) fail_msg("%s: ONNX Runtime's logits differ by %.3e", net, dor);
done:
  px_model_destroy(cm);
}

/* (a) to (d) for one exported file ((a) and (b) on CUDA). */
static void check_imported(const zoo_net_t *z, const char *dir, int *ort_skipped) {
  char path[640];
  snprintf(path, sizeof path, "%s/model.onnx", dir);
  px_ops_t *ops;
  if (on_cuda()) {
    assert_int_equal(px_ops_create(px_device_cuda(0), 0, &ops), PX_OK);
    assert_int_equal(px_ops_set_tf32(ops, 0), PX_OK);
  } else {
    assert_int_equal(px_ops_create(px_device_cpu(), 1, &ops), PX_OK);
  }
  px_model_config_t cfg = {"", 3, K, BATCH, z->size, z->size, NULL, 0, PX_PRECISION_FP32, path};
  px_model_t *m = NULL;
  if (px_model_create(ops, &cfg, &m) != PX_OK)
    fail_msg("%s: import: %s (listed as importing)", z->net, px_last_error());
  assert_int_equal(px_model_init_params(m, 1), PX_OK);
  size_t n = (size_t)BATCH * 3 * z->size * z->size;
  float *x = malloc(n * sizeof *x), loss;
  int32_t y[BATCH];
  int64_t correct;
  assert_int_equal(px_test_read_bytes(dir, "x.f32", x, n * sizeof *x), n * sizeof *x);
  assert_int_equal(px_test_read_bytes(dir, "y.i32", y, sizeof y), sizeof y);
  check_logits(m, dir, z->net, x);
  assert_int_equal(px_model_train_step(m, x, y, &loss, &correct), PX_OK);
  const double factor = z->grad_factor ? z->grad_factor : GRAD_FACTOR;
  if (on_cuda()) { /* as close as PyTorch float32's, or as our CPU engine's step */
    px_ops_t *cops;
    px_model_t *cm = NULL;
    float closs;
    assert_int_equal(px_ops_create(px_device_cpu(), 4, &cops), PX_OK);
    assert_int_equal(px_model_create(cops, &cfg, &cm), PX_OK);
    assert_int_equal(px_model_init_params(cm, 1), PX_OK);
    assert_int_equal(px_model_train_step(cm, x, y, &closs, &correct), PX_OK);
    print_message("%s: loss on CUDA %.6f, on the CPU %.6f\n", z->net, loss, closs);
    px_test_onnx_check_grads_vs(m, cm, dir, z->net, GRAD_TOL, GRAD_FACTOR);
    px_model_destroy(cm);
    px_ops_destroy(cops);
  } else {
    px_test_onnx_check_grads(m, dir, z->net, z->grad_tol ? z->grad_tol : GRAD_TOL, factor, NULL,
                             NULL);
  }
  if (!on_cuda()) {
    check_packing(m, z->net);
    check_compact_ort(m, ops, dir, z->net, x, z->size, ort_skipped);
  }
  free(x);
  px_model_destroy(m);
  px_ops_destroy(ops);
}

static void zoo_network_imports_trains_prunes_and_exports(void **state) {
  (void)state;
  if (on_cuda() && !px_test_gpu_ready("the zoo on the CUDA engine")) skip();
  if (!px_test_python_has("torch, torchvision, onnx, numpy")) skip();
  const zoo_net_t *z = the_net;
  int ort_skipped = 0;
  char mk[600];
  snprintf(mk, sizeof mk, "mkdir -p %s", zoo_root());
  assert_int_equal(system(mk), 0);
  for (int k = 0; k < 2; k++) {
    char dir[512], path[600];
    zoo_reference(z, k, dir, sizeof dir);
    double t0 = now_s();
    snprintf(path, sizeof path, "%s/model.onnx", dir);
    if (z->refused[k]) check_refusal(z, k, path);
    else check_imported(z, dir, &ort_skipped);
    print_message("%s opset %d: checked in %.1f s\n", z->net, OPSETS[k], now_s() - t0);
    /* passed: its reference goes (vgg11_bn's gradients in float32 and
     * float64 are 2.4 GB, the zoo's 13 GB in all), unless asked to keep it
     * for the next run (PX_TEST_ZOO_KEEP=1); a failed one stays to look at */
    if (!getenv("PX_TEST_ZOO_KEEP") || strcmp(getenv("PX_TEST_ZOO_KEEP"), "1")) {
      char cmd[600];
      snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
      assert_int_equal(system(cmd), 0);
    }
  }
  if (ort_skipped) skip();
}

/* The run of cmd (stdout and stderr) into out; its exit status. */
static int run_out(const char *cmd, char *out, size_t cap) {
  char full[2048];
  snprintf(full, sizeof full, "%s 2>&1", cmd);
  FILE *p = popen(full, "r");
  assert_non_null(p);
  size_t n = fread(out, 1, cap - 1, p);
  out[n] = '\0';
  int st = pclose(p);
  return WIFEXITED(st) ? WEXITSTATUS(st) : -1;
}

/* pxtrain --bench feeds an imported model its own input
 * (here 3 x 64 x 64) and --image-size N or HxW overrides (a size the graph
 * does not take is refused naming both; a built-in model takes any); a
 * folder job spec on it takes the graph's size when dataset.image_size is
 * left out and refuses another. */
static void imported_input_size_drives_bench_and_spec(void **state) {
  (void)state;
  if (!px_test_python_has("torch, onnx, numpy")) skip();
  char dir[] = "/tmp/px_onnx_zoo_XXXXXX", path[128], cmd[1024], out[8192];
  assert_non_null(mkdtemp(dir));
  snprintf(path, sizeof path, "%s/r64.onnx", dir);
  snprintf(cmd, sizeof cmd, NETS_PY " export resnet %s 3 64 64 10", path);
  assert_int_equal(px_test_py(cmd), 0);
  const char *b = PXTRAIN " --bench --batch 2 --steps 1 --warmup 0 --threads 1";
  snprintf(cmd, sizeof cmd, "%s --model-onnx %s", b, path);
  assert_int_equal(run_out(cmd, out, sizeof out), 0);
  assert_non_null(strstr(out, "3x64x64 inputs"));
  assert_non_null(strstr(out, "RESULT images_per_sec"));
  snprintf(cmd, sizeof cmd, "%s --model-onnx %s --image-size 32", b, path);
  assert_int_equal(run_out(cmd, out, sizeof out), 1);
  print_message("%s", out);
  assert_non_null(strstr(out, "3x64x64 inputs, the data are 3x32x32"));
  snprintf(cmd, sizeof cmd, "%s --model resnet20 --image-size 40x48", b);
  assert_int_equal(run_out(cmd, out, sizeof out), 0);
  assert_non_null(strstr(out, "3x40x48 inputs"));
  snprintf(cmd, sizeof cmd, PXTRAIN " --dataset synthetic --epochs 1 --image-size 40x48");
  assert_int_equal(run_out(cmd, out, sizeof out), 2);
  assert_non_null(strstr(out, "only --bench"));

  char yaml[1024];
  const char *head = "strategy: hsadmm\nmodel:\n  onnx: %s\ndataset:\n  name: folder\n"
                     "  path: /nonexistent\n%s";
  snprintf(yaml, sizeof yaml, head, path, "");
  Prunex__V1__JobSpec *spec = NULL;
  if (px_jobspec_parse_string(yaml, strlen(yaml), "zoo.yaml", &spec) != PX_OK)
    fail_msg("%s", px_last_error());
  assert_int_equal(spec->dataset->image_size, 64);
  assert_int_equal(spec->dataset->channels, 3);
  px_jobspec_free(spec);
  snprintf(yaml, sizeof yaml, head, path, "  image_size: 64\n");
  assert_true(px_test_spec_outcome(yaml, NULL));
  snprintf(yaml, sizeof yaml, head, path, "  image_size: 32\n");
  assert_true(px_test_spec_outcome(yaml, "data set folder is 3x32x32 (dataset.image_size"));
  snprintf(yaml, sizeof yaml, "strategy: hsadmm\nmodel:\n  onnx: %s\ndataset:\n  name: synthetic\n",
           path);
  assert_true(px_test_spec_outcome(yaml, "data set synthetic is 3x32x32 with 10 classes"));
  snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
  assert_int_equal(system(cmd), 0);
}

int main(int argc, char **argv) {
  if (argc > 1) {
    for (int i = 0; i < NZOO; i++)
      if (!strcmp(ZOO[i].net, argv[1])) the_net = &ZOO[i];
    if (!the_net) {
      fprintf(stderr, "test_onnx_zoo: '%s' is not in the zoo table\n", argv[1]);
      return 2;
    }
    const struct CMUnitTest t[] = {cmocka_unit_test(zoo_network_imports_trains_prunes_and_exports)};
    return cmocka_run_group_tests_name(argv[1], t, NULL, NULL);
  }
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(imported_input_size_drives_bench_and_spec),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
