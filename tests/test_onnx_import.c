/* ONNX import (nn/onnx_import.c) against the real thing: PyTorch
 * (python3-torch, Debian's /usr/bin/python3) builds a VGG-style net (max,
 * average and global pooling), a ResNet (residual adds), a MobileNetV2-style
 * net (depthwise convolutions, ReLU6, Concat) and a ResNet with
 * squeeze-and-excitation (Sigmoid, Mul, LeakyRelu, MatMul), exports them
 * with torch.onnx.export and computes, on a random batch, the eval-mode
 * logits and one training step's gradients (tests/onnx_import_nets.py). Our engine imports the file and must give the
 * same logits within 1e-4 and the same gradients (train-mode BatchNorm, mean
 * cross-entropy) within 1e-4 relative to the largest. The importer refuses
 * what it cannot take with the file, the node and the operator, and
 * survives truncated and garbage files. Skips without the Python packages. */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cmocka.h>

#include "prunex/export.h"
#include "prunex/nn.h"
#include "prunex/prune.h"
#include "px_test_util.h"

#define PY "/usr/bin/python3"
#define NETS PX_SOURCE_DIR "/tests/onnx_import_nets.py"
#define BATCH 8
#define C 3
#define HW 16
#define K 10

static int have_torch(void) {
  if (system(PY " -c 'import torch, onnx, numpy' >/dev/null 2>&1") == 0) return 1;
  print_message("needs python3-torch, python3-onnx and python3-numpy (scripts/bootstrap)\n");
  return 0;
}

static size_t read_f32(const char *dir, const char *name, void *buf, size_t bytes) {
  char p[512];
  snprintf(p, sizeof p, "%s/%s", dir, name);
  FILE *f = fopen(p, "rb");
  assert_non_null(f);
  size_t n = fread(buf, 1, bytes, f);
  fclose(f);
  return n;
}

/* PyTorch's reference for net in a fresh directory dir. */
static void reference(const char *net, char *dir) {
  strcpy(dir, "/tmp/px_onnx_import_XXXXXX");
  assert_non_null(mkdtemp(dir));
  char cmd[1024];
  snprintf(cmd, sizeof cmd, PY " %s reference %s %s %d %d %d %d %d >/dev/null", NETS, net, dir,
           BATCH, C, HW, HW, K);
  assert_int_equal(system(cmd), 0);
}

static px_model_t *import(px_ops_t *ops, const char *dir) {
  char path[512];
  snprintf(path, sizeof path, "%s/model.onnx", dir);
  px_model_config_t cfg = {"", C, K, BATCH, HW, HW, NULL, 0, PX_PRECISION_FP32, path};
  px_model_t *m = NULL;
  px_status_t st = px_model_create(ops, &cfg, &m);
  if (st != PX_OK) fail_msg("import %s: %s", path, px_last_error());
  assert_int_equal(px_model_init_params(m, 1), PX_OK);
  assert_string_equal(px_model_config(m)->arch, "onnx");
  return m;
}

static void check_net(const char *net) {
  char dir[64];
  reference(net, dir);
  px_ops_t *ops;
  assert_int_equal(px_ops_create(px_device_cpu(), 1, &ops), PX_OK);
  px_model_t *m = import(ops, dir);
  float x[BATCH * C * HW * HW], want[BATCH * K], got[BATCH * K];
  int32_t y[BATCH];
  assert_int_equal(read_f32(dir, "x.f32", x, sizeof x), sizeof x);
  assert_int_equal(read_f32(dir, "y.i32", y, sizeof y), sizeof y);
  assert_int_equal(read_f32(dir, "logits.f32", want, sizeof want), sizeof want);
  assert_int_equal(px_model_logits(m, x, BATCH, got), PX_OK);
  double dmax = 0;
  for (int i = 0; i < BATCH * K; i++) dmax = fmax(dmax, fabs((double)got[i] - want[i]));
  print_message("%s: logits differ from PyTorch's by at most %.2e\n", net, dmax);
  assert_true(dmax <= 1e-4);

  float loss;
  int64_t correct = 0;
  assert_int_equal(px_model_train_step(m, x, y, &loss, &correct), PX_OK);
  print_message("%s: training loss %.6f\n", net, loss);
  char line[512], name[256], file[64], p[512];
  size_t numel;
  snprintf(p, sizeof p, "%s/grads.txt", dir);
  FILE *f = fopen(p, "r");
  assert_non_null(f);
  int nparams = 0;
  double worst = 0;
  while (fgets(line, sizeof line, f) && sscanf(line, "%255s %zu %63s", name, &numel, file) == 3) {
    int i = 0;
    while (i < px_model_num_params(m) && strcmp(px_model_param(m, i)->name, name)) i++;
    if (i == px_model_num_params(m)) fail_msg("%s: no parameter %s in the import", net, name);
    const px_tensor_t *g = px_model_param(m, i)->grad;
    assert_int_equal(px_tensor_numel(g), numel);
    float *ref = malloc(numel * sizeof *ref), *ours = malloc(numel * sizeof *ours);
    assert_int_equal(read_f32(dir, file, ref, numel * sizeof *ref), numel * sizeof *ref);
    assert_int_equal(px_tensor_copy_to_host(g, ours, numel * sizeof *ours), PX_OK);
    /* relative to the largest, with a floor for a gradient that vanishes
     * (a BN shift right before another conv and BN: only rounding is left) */
    double gmax = 1e-3, d = 0;
    for (size_t j = 0; j < numel; j++) {
      gmax = fmax(gmax, fabs(ref[j]));
      d = fmax(d, fabs((double)ours[j] - ref[j]));
    }
    worst = fmax(worst, d / gmax);
    if (d > 1e-4 * gmax) fail_msg("%s: gradient of %s differs by %.3e (largest %.3e)", net, name, d, gmax);
    free(ref);
    free(ours);
    nparams++;
  }
  fclose(f);
  print_message("%s: %d parameter gradients within %.2e (relative to the largest) of PyTorch's\n",
                net, nparams, worst);
  assert_int_equal(nparams, px_model_num_params(m));
  px_model_destroy(m);
  px_ops_destroy(ops);
  snprintf(p, sizeof p, "rm -rf %s", dir);
  assert_int_equal(system(p), 0);
}

static void vgg_forward_and_gradients_match_pytorch(void **state) {
  (void)state;
  if (!have_torch()) skip();
  check_net("vgg");
}

static void resnet_forward_and_gradients_match_pytorch(void **state) {
  (void)state;
  if (!have_torch()) skip();
  check_net("resnet");
}

/* Inverted residuals: depthwise (grouped) convolutions, ReLU6 exported as
 * Clip, a Concat of two branches on channels. */
static void mobilenet_forward_and_gradients_match_pytorch(void **state) {
  (void)state;
  if (!have_torch()) skip();
  check_net("mobilenet");
}

/* Squeeze-and-excitation (convs with bias on the pooled 1 x 1 map, Relu on
 * its own, Sigmoid, the per-channel Mul), a LeakyRelu stem and a MatMul +
 * Add classifier. */
static void seresnet_forward_and_gradients_match_pytorch(void **state) {
  (void)state;
  if (!have_torch()) skip();
  check_net("seresnet");
}

static int param_kind(const px_model_t *m, const char *name) {
  for (int i = 0; i < px_model_num_params(m); i++)
    if (!strcmp(px_model_param(m, i)->name, name)) return (int)px_model_param(m, i)->kind;
  fail_msg("no parameter %s", name);
  return -1;
}

/* Depthwise convolutions and the SE's convolutions on the pooled 1 x 1 map
 * are left out of pruning (PX_WEIGHT_CONV_FIXED), the pointwise ones are
 * pruned, no coupling points at a left-out conv, and such graphs are not
 * compacted (evaluated and exported at full shape). */
static void depthwise_and_se_convs_are_left_out_of_pruning(void **state) {
  (void)state;
  if (!have_torch()) skip();
  px_ops_t *ops;
  assert_int_equal(px_ops_create(px_device_cpu(), 1, &ops), PX_OK);
  const char *nets[2] = {"mobilenet", "seresnet"};
  for (int k = 0; k < 2; k++) {
    char dir[64], cmd[128];
    reference(nets[k], dir);
    px_model_t *m = import(ops, dir);
    if (k == 0) {
      assert_int_equal(param_kind(m, "blocks.0.body.3.weight"), PX_WEIGHT_CONV_FIXED);
      assert_int_equal(param_kind(m, "blocks.0.body.0.weight"), PX_WEIGHT_CONV);
      assert_int_equal(param_kind(m, "blocks.0.body.6.weight"), PX_WEIGHT_CONV);
    } else {
      assert_int_equal(param_kind(m, "layers.0.se.fc1.weight"), PX_WEIGHT_CONV_FIXED);
      assert_int_equal(param_kind(m, "layers.0.se.fc2.weight"), PX_WEIGHT_CONV_FIXED);
      assert_int_equal(param_kind(m, "layers.0.se.fc1.bias"), PX_WEIGHT_CONV_BIAS);
      assert_int_equal(param_kind(m, "layers.0.conv1.weight"), PX_WEIGHT_CONV);
    }
    int fixed = 0;
    for (int i = 0; i < px_model_num_params(m); i++) {
      int c = px_model_channel_consumer(m, i);
      if (c >= 0) assert_int_equal(px_model_param(m, c)->kind, PX_WEIGHT_CONV);
      fixed += px_model_param(m, i)->kind == PX_WEIGHT_CONV_FIXED;
    }
    print_message("%s: %d convolutions left out of pruning\n", nets[k], fixed);
    assert_int_equal(px_model_compactable(m), 0);
    px_model_destroy(m);
    snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
    assert_int_equal(system(cmd), 0);
  }
  px_ops_destroy(ops);
}

/* Groups from the graph (issue 30, item 2): the sparsity set's projection
 * (channel keep 0.5) with the coupling px_model_channel_consumer derives,
 * on an imported net's weights; returns the number of coupled pairs, each
 * checked: a channel pruned in the consumer is a filter pruned in the
 * producer, and the reverse (zero in all tied places). */
static int project_coupled(px_model_t *m) {
  int np = px_model_num_params(m), pairs = 0;
  px_sparsity_param_t *sp = calloc((size_t)np, sizeof *sp);
  size_t *off = calloc((size_t)np, sizeof *off);
  const float *base = px_model_flat_params(m)->data;
  for (int i = 0; i < np; i++) {
    const px_tensor_t *t = px_model_param(m, i)->value;
    off[i] = (size_t)((const float *)t->data - base);
    sp[i].consumer = -1;
    sp[i].prunable = px_model_param(m, i)->kind == PX_WEIGHT_CONV;
    if (sp[i].prunable)
      sp[i].shape = (px_conv_shape_t){(int32_t)t->dims[0], (int32_t)t->dims[1],
                                      (int32_t)t->dims[2], (int32_t)t->dims[3]};
  }
  for (int i = 0; i < np; i++) {
    int c = px_model_channel_consumer(m, i);
    if (sp[i].prunable && c >= 0 && sp[c].prunable) sp[i].consumer = c, pairs++;
  }
  px_prune_keep_t keep = {1.0, 0.5, 1.0, 0, 0};
  px_sparsity_t *set;
  assert_int_equal(px_sparsity_create(sp, NULL, np, &keep, &set), PX_OK);
  uint8_t *masks = calloc(px_sparsity_mask_bytes(set) + 1, 1);
  assert_int_equal(px_sparsity_project(set, (float *)base, off, masks), PX_OK);
  for (int i = 0; i < np; i++) {
    if (sp[i].consumer < 0) continue;
    px_conv_shape_t P = sp[i].shape, Q = sp[sp[i].consumer].shape;
    const float *wp = base + off[i], *wq = base + off[sp[i].consumer];
    int pruned = 0;
    for (int ch = 0; ch < P.c_out; ch++) {
      int filter_zero = 1, channel_zero = 1;
      for (int j = 0; j < P.c_in * P.kh * P.kw; j++) filter_zero &= wp[ch * P.c_in * P.kh * P.kw + j] == 0;
      for (int o = 0; o < Q.c_out; o++)
        for (int j = 0; j < Q.kh * Q.kw; j++)
          channel_zero &= wq[((size_t)o * Q.c_in + ch) * Q.kh * Q.kw + j] == 0;
      assert_int_equal(filter_zero, channel_zero);
      pruned += channel_zero;
    }
    assert_int_equal(pruned, P.c_out / 2); /* ceil(0.5 * C) kept */
  }
  px_sparsity_destroy(set);
  free(masks);
  free(off);
  free(sp);
  return pairs;
}

/* The channel groups of an imported MobileNetV2-style net (depthwise convs,
 * ReLU6, Concat) and SE-ResNet (SE multiply, residual adds): coupled
 * channels are pruned together across the activations and the depthwise
 * convs; the compact model is smaller and computes the pruned dense model's
 * logits; its ONNX passes onnx's checker and OpenCV's dnn (4.6: the SE's
 * gate resized to the trunk's map, see export/onnx.c) gives those logits. */
static void imported_graphs_prune_by_coupled_groups_and_compact_exactly(void **state) {
  (void)state;
  if (!have_torch() || system(PY " -c 'import cv2, onnx' >/dev/null 2>&1") != 0) skip();
  px_ops_t *ops;
  assert_int_equal(px_ops_create(px_device_cpu(), 1, &ops), PX_OK);
  const char *nets[2] = {"mobilenet", "seresnet"};
  const int want_pairs[2] = {3, 2}; /* the three blocks' expansion -> projection; conv1 -> conv2 */
  for (int k = 0; k < 2; k++) {
    char dir[64], path[512], cmd[2048];
    reference(nets[k], dir);
    px_model_t *m = import(ops, dir), *cm = NULL;
    int pairs = project_coupled(m);
    assert_int_equal(pairs, want_pairs[k]);
    if (k == 0) { /* the classifier reads no channel 3 (left) or 35 (right) of the Concat */
      for (int i = 0; i < px_model_num_params(m); i++) {
        const px_model_param_t *p = px_model_param(m, i);
        if (strcmp(p->name, "fc.weight")) continue;
        for (int o = 0; o < K; o++)
          ((float *)p->value->data)[o * 48 + 3] = ((float *)p->value->data)[o * 48 + 35] = 0.0f;
      }
    }
    assert_int_equal(px_model_compact(m, ops, BATCH, &cm), PX_OK);
    size_t n = (size_t)BATCH * C * HW * HW;
    float *x = malloc(n * sizeof *x), ld[BATCH * K], lc[BATCH * K];
    uint64_t r = 11;
    for (size_t i = 0; i < n; i++) x[i] = (float)((r = r * 6364136223846793005ull + 1) >> 40) / 8388608.0f - 1.0f;
    assert_int_equal(px_model_logits(m, x, BATCH, ld), PX_OK);
    assert_int_equal(px_model_logits(cm, x, BATCH, lc), PX_OK);
    double d = 0, scale = 1;
    for (int i = 0; i < BATCH * K; i++) {
      d = fmax(d, fabs((double)ld[i] - lc[i]));
      scale = fmax(scale, fabs((double)ld[i]));
    }
    print_message("%s: %d coupled pairs, %zu of %zu parameters after compaction, compact logits "
                  "within %.2e\n", nets[k], pairs, px_model_numel(cm), px_model_numel(m), d);
    assert_true(px_model_numel(cm) < px_model_numel(m));
    assert_true(d <= 1e-4 * scale);
    snprintf(path, sizeof path, "%s/compact.onnx", dir);
    assert_int_equal(px_onnx_save(cm, path, NULL), PX_OK);
    char xs[128], ls[128];
    snprintf(xs, sizeof xs, "%s/x.f32", dir);
    snprintf(ls, sizeof ls, "%s/l.f32", dir);
    FILE *f = fopen(xs, "wb");
    assert_int_equal(fwrite(x, sizeof *x, n, f), n);
    fclose(f);
    f = fopen(ls, "wb");
    assert_int_equal(fwrite(lc, sizeof *lc, BATCH * K, f), (size_t)BATCH * K);
    fclose(f);
    snprintf(cmd, sizeof cmd,
             PY " -c \"import onnx, cv2, numpy as np; m = onnx.load('%s'); "
                "onnx.checker.check_model(m, full_check=True); n = cv2.dnn.readNetFromONNX('%s'); "
                "n.setInput(np.fromfile('%s', np.float32).reshape(%d, %d, %d, %d)); a = n.forward(); "
                "b = np.fromfile('%s', np.float32).reshape(%d, %d); d = float(np.abs(a - b).max()); "
                "print('%s compact ONNX: checker ok, OpenCV logits within %%.2e' %% d); "
                "assert (a.argmax(1) == b.argmax(1)).all() and d < 1e-4 * (1 + np.abs(b).max())\"",
             path, path, xs, BATCH, C, HW, HW, ls, BATCH, K, nets[k]);
    assert_int_equal(system(cmd), 0);
    free(x);
    px_model_destroy(cm);
    px_model_destroy(m);
    snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
    assert_int_equal(system(cmd), 0);
  }
  px_ops_destroy(ops);
}

/* The message of checking path, which must fail. */
static const char *refusal(const char *path) {
  px_model_onnx_info_t info;
  px_status_t st = px_model_onnx_check(path, &info);
  assert_true(st < 0);
  print_message("refused: %s\n", px_last_error());
  return px_last_error();
}

static void unsupported_operator_is_refused_with_node_and_file(void **state) {
  (void)state;
  if (!have_torch()) skip();
  char dir[64], path[512], cmd[1024];
  strcpy(dir, "/tmp/px_onnx_import_XXXXXX");
  assert_non_null(mkdtemp(dir));
  snprintf(path, sizeof path, "%s/tanh.onnx", dir);
  snprintf(cmd, sizeof cmd, PY " %s export tanh %s", NETS, path);
  assert_int_equal(system(cmd), 0);
  const char *msg = refusal(path);
  assert_non_null(strstr(msg, path));
  assert_non_null(strstr(msg, "/gate/Tanh"));
  assert_non_null(strstr(msg, "operator Tanh is not supported"));
  /* a Clip other than ReLU6 */
  snprintf(path, sizeof path, "%s/clip1.onnx", dir);
  snprintf(cmd, sizeof cmd, PY " %s export clip1 %s", NETS, path);
  assert_int_equal(system(cmd), 0);
  msg = refusal(path);
  assert_non_null(strstr(msg, "(Clip): only Clip(min 0, max 6) (ReLU6)"));
  assert_non_null(strstr(msg, "clips to [0, 1]"));
  snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
  assert_int_equal(system(cmd), 0);
}

static void truncated_and_garbage_files_are_refused(void **state) {
  (void)state;
  if (!have_torch()) skip();
  char dir[64], path[512], bad[600], cmd[1024];
  reference("resnet", dir);
  snprintf(path, sizeof path, "%s/model.onnx", dir);
  px_model_onnx_info_t info;
  assert_int_equal(px_model_onnx_check(path, &info), PX_OK);
  assert_int_equal(info.in_channels, C);
  assert_int_equal(info.height, HW);
  assert_int_equal(info.num_classes, K);
  assert_int_equal(info.nconv, 9);
  /* every prefix of the file parses as garbage or is refused, never crashes */
  FILE *f = fopen(path, "rb");
  assert_non_null(f);
  static uint8_t buf[1 << 20];
  size_t n = fread(buf, 1, sizeof buf, f);
  fclose(f);
  snprintf(bad, sizeof bad, "%s/bad.onnx", dir);
  for (size_t cut = 1; cut < n; cut += n / 97 + 1) {
    f = fopen(bad, "wb");
    assert_int_equal(fwrite(buf, 1, cut, f), cut);
    fclose(f);
    assert_true(px_model_onnx_check(bad, NULL) < 0);
    assert_non_null(strstr(px_last_error(), bad));
  }
  for (size_t i = 0; i < n; i++) buf[i] ^= (uint8_t)(i * 2654435761u >> 13);
  f = fopen(bad, "wb");
  assert_int_equal(fwrite(buf, 1, n, f), n);
  fclose(f);
  assert_true(px_model_onnx_check(bad, NULL) < 0);
  assert_non_null(strstr(refusal("/nonexistent/model.onnx"), "/nonexistent/model.onnx"));
  /* the data must fit the graph */
  px_ops_t *ops;
  assert_int_equal(px_ops_create(px_device_cpu(), 1, &ops), PX_OK);
  px_model_config_t cfg = {"", 1, K, 2, 28, 28, NULL, 0, PX_PRECISION_FP32, path};
  px_model_t *m = NULL;
  assert_int_equal(px_model_create(ops, &cfg, &m), PX_ERR_INVALID);
  assert_non_null(strstr(px_last_error(), "the graph takes 3x16x16 inputs"));
  px_ops_destroy(ops);
  snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
  assert_int_equal(system(cmd), 0);
}

/* The imported VGG (max and average pooling) exports back to ONNX: onnx's
 * checker accepts PruneX's file and OpenCV gives it the logits of the file
 * PyTorch wrote (no pruning: the same weights). */
static void imported_vgg_exports_to_onnx_that_opencv_runs_alike(void **state) {
  (void)state;
  if (!have_torch() || system(PY " -c 'import cv2' >/dev/null 2>&1") != 0) skip();
  char dir[64], orig[512], ckpt[512], cmd[2048];
  strcpy(dir, "/tmp/px_onnx_import_XXXXXX");
  assert_non_null(mkdtemp(dir));
  snprintf(orig, sizeof orig, "%s/vgg.onnx", dir);
  snprintf(cmd, sizeof cmd, PY " %s export vgg %s 1 32 32 10", NETS, orig);
  assert_int_equal(system(cmd), 0);
  px_ops_t *ops;
  assert_int_equal(px_ops_create(px_device_cpu(), 1, &ops), PX_OK);
  px_model_config_t cfg = {"", 1, K, 2, 32, 32, NULL, 0, PX_PRECISION_FP32, orig};
  px_model_t *m = NULL;
  assert_int_equal(px_model_create(ops, &cfg, &m), PX_OK);
  assert_int_equal(px_model_init_params(m, 1), PX_OK);
  snprintf(ckpt, sizeof ckpt, "%s/model.safetensors", dir);
  assert_int_equal(px_model_save(m, NULL, ckpt, NULL, 0), PX_OK);
  px_export_report_t rep;
  if (px_export_file(ckpt, dir, 1, "fashion-mnist", &rep) != PX_OK)
    fail_msg("export: %s", px_last_error());
  snprintf(cmd, sizeof cmd, PY " %s compare %s %s", NETS, orig, rep.onnx_path);
  assert_int_equal(system(cmd), 0);
  px_model_destroy(m);
  px_ops_destroy(ops);
  snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
  assert_int_equal(system(cmd), 0);
}

/* examples/export_onnx.py's ResNet-20, imported, is the built-in resnet20
 * node for node (the same ops on the same shapes: the same training cost),
 * with the same parameter shapes. */
static void imported_resnet20_is_the_builtin_graph(void **state) {
  (void)state;
  if (!have_torch()) skip();
  char dir[64], path[512], cmd[1024];
  strcpy(dir, "/tmp/px_onnx_import_XXXXXX");
  assert_non_null(mkdtemp(dir));
  snprintf(path, sizeof path, "%s/resnet20.onnx", dir);
  snprintf(cmd, sizeof cmd, PY " %s/examples/export_onnx.py %s --channels 3 >/dev/null",
           PX_SOURCE_DIR, path);
  assert_int_equal(system(cmd), 0);
  px_ops_t *ops;
  assert_int_equal(px_ops_create(px_device_cpu(), 1, &ops), PX_OK);
  px_model_config_t bc = {"resnet20", 3, K, 4, 32, 32, NULL, 0, PX_PRECISION_FP32, NULL};
  px_model_config_t ic = bc;
  ic.onnx = path;
  px_model_t *b = NULL, *m = NULL;
  assert_int_equal(px_model_create(ops, &bc, &b), PX_OK);
  assert_int_equal(px_model_create(ops, &ic, &m), PX_OK);
  assert_int_equal(px_model_num_nodes(m), px_model_num_nodes(b));
  assert_int_equal(px_model_num_params(m), px_model_num_params(b));
  assert_int_equal(px_model_numel(m), px_model_numel(b));
  for (int k = 0; k < px_model_num_nodes(b); k++) {
    px_model_node_t x, y;
    assert_int_equal(px_model_node(b, k, &x), PX_OK);
    assert_int_equal(px_model_node(m, k, &y), PX_OK);
    assert_memory_equal(&x, &y, sizeof x);
  }
  for (int i = 0; i < px_model_num_params(b); i++) {
    const px_tensor_t *x = px_model_param(b, i)->value, *y = px_model_param(m, i)->value;
    assert_true(px_tensor_same_spec(x, y));
    assert_int_equal(px_model_param(b, i)->kind, px_model_param(m, i)->kind);
  }
  print_message("imported resnet20: %d nodes, %zu parameters, the built-in graph\n",
                px_model_num_nodes(m), px_model_numel(m));
  px_model_destroy(m);
  px_model_destroy(b);
  px_ops_destroy(ops);
  snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
  assert_int_equal(system(cmd), 0);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(vgg_forward_and_gradients_match_pytorch),
      cmocka_unit_test(resnet_forward_and_gradients_match_pytorch),
      cmocka_unit_test(mobilenet_forward_and_gradients_match_pytorch),
      cmocka_unit_test(seresnet_forward_and_gradients_match_pytorch),
      cmocka_unit_test(depthwise_and_se_convs_are_left_out_of_pruning),
      cmocka_unit_test(imported_graphs_prune_by_coupled_groups_and_compact_exactly),
      cmocka_unit_test(unsupported_operator_is_refused_with_node_and_file),
      cmocka_unit_test(truncated_and_garbage_files_are_refused),
      cmocka_unit_test(imported_vgg_exports_to_onnx_that_opencv_runs_alike),
      cmocka_unit_test(imported_resnet20_is_the_builtin_graph),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
