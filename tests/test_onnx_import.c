/* ONNX import (arch/onnx_import.c) against the real thing: PyTorch
 * (python3-torch, Debian's /usr/bin/python3) builds a VGG-style net (max,
 * average and global pooling), a ResNet (residual adds), a MobileNetV2-style
 * net (depthwise convolutions, ReLU6, Concat) and a ResNet with
 * squeeze-and-excitation (Sigmoid, Mul, LeakyRelu, MatMul), exports them
 * with torch.onnx.export and computes, on a random batch, the eval-mode
 * logits and one training step's gradients (tests/onnx_import_nets.py). Our engine imports the file and must give the
 * same logits within 1e-4 and the same gradients (train-mode BatchNorm, mean
 * cross-entropy) within 1e-4 of PyTorch's float64 step, relative to the
 * largest. The importer refuses
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
#include "prunex/hsadmm.h"
#include "prunex/nn.h"
#include "prunex/prune.h"
#include "prunex/prune_internal.h"
#include "prunex/strategy.h"
#include "onnx.pb-c.h" /* the library's generated code: the tests edit files with it */
#include "px_test_onnx.h"
#include "px_test_util.h"

#define NETS PX_SOURCE_DIR "/tests/onnx_import_nets.py"
#define BATCH 8
#define C 3
#define HW 16
#define K 10
/* Gradients are measured against PyTorch's float64 step (the same weights
 * and inputs), relative to each tensor's largest value: at most GRAD_TOL.
 * PyTorch's own float32 step is printed beside ours as the yardstick. */
#define GRAD_TOL 1e-4

static int have_torch(void) { return px_test_python_has("torch, onnx, numpy"); }

/* PyTorch's reference for net on c x h x w inputs in a fresh directory dir. */
static void reference_at(const char *net, int c, int h, int w, char *dir) {
  strcpy(dir, "/tmp/px_onnx_import_XXXXXX");
  assert_non_null(mkdtemp(dir));
  char cmd[1024];
  snprintf(cmd, sizeof cmd, "%s reference %s %s %d %d %d %d %d >/dev/null", NETS, net, dir,
           BATCH, c, h, w, K);
  assert_int_equal(px_test_py(cmd), 0);
}

static void reference(const char *net, char *dir) { reference_at(net, C, HW, HW, dir); }

static px_model_t *import_at(px_ops_t *ops, const char *dir, int c, int h, int w) {
  char path[512];
  snprintf(path, sizeof path, "%s/model.onnx", dir);
  px_model_config_t cfg = {"", c, K, BATCH, h, w, NULL, 0, PX_PRECISION_FP32, path};
  px_model_t *m = NULL;
  px_status_t st = px_model_create(ops, &cfg, &m);
  if (st != PX_OK) fail_msg("import %s: %s", path, px_last_error());
  assert_int_equal(px_model_init_params(m, 1), PX_OK);
  assert_string_equal(px_model_config(m)->arch, "onnx");
  return m;
}

static px_model_t *import(px_ops_t *ops, const char *dir) { return import_at(ops, dir, C, HW, HW); }

/* The running statistics after the training step against PyTorch's float32
 * ones (dir/bufs.txt, written for the nets that ask: each batch norm's
 * momentum), within 1e-5 of the largest. */
static void check_buffers(const px_model_t *m, const char *dir, const char *net) {
  char line[512], name[256], file[64], p[512];
  size_t numel;
  snprintf(p, sizeof p, "%s/bufs.txt", dir);
  FILE *f = fopen(p, "r");
  if (!f) return;
  int nbufs = 0;
  double worst = 0;
  while (fgets(line, sizeof line, f) && sscanf(line, "%255s %zu %63s", name, &numel, file) == 3) {
    int i = 0;
    while (i < px_model_num_buffers(m) && strcmp(px_model_buffer(m, i)->name, name)) i++;
    if (i == px_model_num_buffers(m)) fail_msg("%s: no buffer %s in the import", net, name);
    const px_tensor_t *v = px_model_buffer(m, i)->value;
    assert_int_equal(px_tensor_numel(v), numel);
    float *ref = malloc(numel * sizeof *ref), *ours = malloc(numel * sizeof *ours);
    assert_int_equal(px_test_read_bytes(dir, file, ref, numel * sizeof *ref), numel * sizeof *ref);
    assert_int_equal(px_tensor_copy_to_host(v, ours, numel * sizeof *ours), PX_OK);
    double vmax = 1e-3, d = 0;
    for (size_t j = 0; j < numel; j++) {
      vmax = fmax(vmax, fabs((double)ref[j]));
      d = fmax(d, fabs((double)ours[j] - ref[j]));
    }
    if (d > 1e-5 * vmax)
      fail_msg("%s: %s differs from PyTorch's by %.3e (largest %.3e)", net, name, d, vmax);
    worst = fmax(worst, d / vmax);
    free(ref);
    free(ours);
    nbufs++;
  }
  fclose(f);
  print_message("%s: %d running statistics within %.2e of PyTorch's after the step\n", net, nbufs,
                worst);
  assert_int_equal(nbufs, px_model_num_buffers(m));
}

/* net on c x h x w inputs: our logits and, when grads, one training
 * step's gradients against PyTorch's. */
static void check_net_at(const char *net, int c, int h, int w, int grads) {
  char dir[64];
  reference_at(net, c, h, w, dir);
  px_ops_t *ops;
  assert_int_equal(px_ops_create(px_device_cpu(), 1, &ops), PX_OK);
  px_model_t *m = import_at(ops, dir, c, h, w);
  size_t xbytes = (size_t)BATCH * c * h * w * sizeof(float);
  float *x = malloc(xbytes), want[BATCH * K], got[BATCH * K];
  int32_t y[BATCH];
  assert_int_equal(px_test_read_bytes(dir, "x.f32", x, xbytes), xbytes);
  assert_int_equal(px_test_read_bytes(dir, "y.i32", y, sizeof y), sizeof y);
  assert_int_equal(px_test_read_bytes(dir, "logits.f32", want, sizeof want), sizeof want);
  assert_int_equal(px_model_logits(m, x, BATCH, got), PX_OK);
  double dmax = 0;
  for (int i = 0; i < BATCH * K; i++) dmax = fmax(dmax, fabs((double)got[i] - want[i]));
  print_message("%s (%dx%dx%d): logits differ from PyTorch's by at most %.2e\n", net, c, h, w,
                dmax);
  assert_true(dmax <= 1e-4);
  char macs[32] = "";
  assert_true(px_test_read_bytes(dir, "macs.txt", macs, sizeof macs - 1) > 0);
  print_message("%s: %llu multiply-accumulates per image (PyTorch's count: %s)\n", net,
                (unsigned long long)px_model_macs(m), macs);
  assert_int_equal(px_model_macs(m), strtoull(macs, NULL, 10));
  if (!grads) goto done;

  float loss;
  int64_t correct = 0;
  assert_int_equal(px_model_train_step(m, x, y, &loss, &correct), PX_OK);
  print_message("%s: training loss %.6f\n", net, loss);
  px_test_onnx_check_grads(m, dir, net, GRAD_TOL, 0, NULL, NULL);
  check_buffers(m, dir, net);
done:
  free(x);
  px_model_destroy(m);
  px_ops_destroy(ops);
  char p[512];
  snprintf(p, sizeof p, "rm -rf %s", dir);
  assert_int_equal(system(p), 0);
}

static void check_net(const char *net) { check_net_at(net, C, HW, HW, 1); }

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

/* Inputs other than the 16 x 16 above: Fashion-MNIST's
 * own 1 x 28 x 28 through the VGG (28 -> 14 -> 7 -> 3: pooling windows that
 * do not divide the map), a non-square 3 x 40 x 24 image through the
 * ResNet and the MobileNet, and the MobileNet at 3 x 64 x 64, logits and
 * gradients. The MobileNet's batch norm after block 2's depthwise conv sees
 * a mean large against its spread at these sizes: with oneDNN 2.6's
 * one-pass batch norm its gradients were 1.0e-2 and 1.5e-2 of the largest
 * off; the CPU engine's own batch norm (sums about a centre near the
 * mean, nn/cpu/cpu_bn.c) keeps them as close as PyTorch's float32 step:
 * 3.6e-6 and 1.3e-5 against PyTorch's 3.6e-6 and 1.5e-5
 * (PX_TEST_GRAD_TABLE=1 prints them; docs/performance.md). */
static void other_input_sizes_match_pytorch(void **state) {
  (void)state;
  if (!have_torch()) skip();
  check_net_at("vgg", 1, 28, 28, 1);
  check_net_at("resnet", 3, 40, 24, 1);
  check_net_at("mobilenet", 3, 40, 24, 1);
  check_net_at("mobilenet", 3, 64, 64, 1);
}

/* Squeeze-and-excitation (convs with bias on the pooled 1 x 1 map, Relu on
 * its own, Sigmoid, the per-channel Mul), a LeakyRelu stem and a MatMul +
 * Add classifier. */
static void seresnet_forward_and_gradients_match_pytorch(void **state) {
  (void)state;
  if (!have_torch()) skip();
  check_net("seresnet");
}

/* check_net of each net in nets (NULL-ended) as exported at each opset of
 * the comma-separated list (PX_TEST_ONNX_OPSET). */
static void check_nets_at(const char *opset_list, const char *const *nets) {
  char list[32];
  snprintf(list, sizeof list, "%s", opset_list);
  for (char *save = NULL, *o = strtok_r(list, ",", &save); o; o = strtok_r(NULL, ",", &save)) {
    print_message("opset %s\n", o);
    setenv("PX_TEST_ONNX_OPSET", o, 1);
    for (const char *const *n = nets; *n; n++) check_net(*n);
  }
  unsetenv("PX_TEST_ONNX_OPSET");
}

/* mobilenet_v3's and efficientnet_b0's activations: Hardswish,
 * SiLU, the exact GELU, Tanh, Hardsigmoid and a Hardsigmoid-gated
 * squeeze-and-excitation, as PyTorch exports them at opset 13 (Hardswish as
 * Mul(x, HardSigmoid(x)), SiLU as Mul(x, Sigmoid(x)), GELU as Div, Erf,
 * Add, Mul, Mul) and 17 (HardSwish), and as opset 20 writes them (Gelu). */
static void acts_forward_and_gradients_match_pytorch(void **state) {
  (void)state;
  if (!have_torch()) skip();
  check_nets_at("13,17,20", (const char *const[]){"acts", NULL});
  check_net("scalars"); /* Mul, Add, Sub, Div by a constant; 1 - x; x / sqrt 2 without Erf */
}

/* What exporters write around the layers, at opsets 13, 17 and
 * 18 (ReduceMean's axes an input):
 * a Concat of one input, ReduceMean over H and W as a global average
 * pooling (keepdims 1 feeding an SE's convs, keepdims 0 the classifier),
 * the shape subgraph of x.view(x.size(0), -1) and of [N, C // 2 * 2, 1, 1]
 * (Shape, Gather, Div, Cast, Mul, Unsqueeze, Concat, Reshape: folded into
 * constants) and
 * Squeeze / Unsqueeze of a pooled map, each moving no data. */
static void shapes_forward_and_gradients_match_pytorch(void **state) {
  (void)state;
  if (!have_torch()) skip();
  /* shapes: the classifier on x.view(x.size(0), -1); shapes_mean: on x.mean((2, 3)) */
  check_nets_at("13,17,18", (const char *const[]){"shapes", "shapes_mean", NULL});
}

/* Batch norms of other epsilons and momenta (googlenet's and mobilenet_v3's
 * eps 1e-3, mobilenet_v3's momentum 0.01; 0.05, 0.5 and 0.3): the logits,
 * the gradients and the running statistics after the step. */
static void bn_epsilons_and_momenta_match_pytorch(void **state) {
  (void)state;
  if (!have_torch()) skip();
  check_nets_at("13,17", (const char *const[]){"bn_eps", NULL});
}

/* mobilenet_v3's classifier: Gemm, Hardswish (opset 13: Mul(x,
 * HardSigmoid(x)); 17: HardSwish) and Dropout on the pooled features, then
 * a second Gemm, at opsets 13 and 17. */
static void fc_chain_matches_pytorch(void **state) {
  (void)state;
  if (!have_torch()) skip();
  check_nets_at("13,17", (const char *const[]){"fc_chain", NULL});
}

/* torchvision's ConvNeXt at toy size: the Transpose pairs of
 * its blocks (NCHW -> NHWC, LayerNorm on the last axis, Linear to 4C by
 * MatMul + Add, GELU, Linear back, NHWC -> NCHW; lowered to a LayerNorm over
 * channels and 1 x 1 convs with bias, moving no data), the layer scale
 * ([C, 1, 1] Mul: a trainable per-channel scale), LayerNorm2d in the stem,
 * before the downsampling and in the head (+ Flatten + Linear), a depthwise
 * 7 x 7 conv; LayerNorm as opset 17's LayerNormalization and as opset 13
 * writes it out (ReduceMean, Sub, Pow, ReduceMean, Add, Sqrt, Div, Mul,
 * Add). */
static void convnext_forward_and_gradients_match_pytorch(void **state) {
  (void)state;
  if (!have_torch()) skip();
  check_nets_at("13,17", (const char *const[]){"convnext", NULL});
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

/* Whether filter (row) o of the [rows, len] tensor w is all zero. */
static int row_zero(const float *w, int o, size_t len) {
  for (size_t j = 0; j < len; j++)
    if (w[(size_t)o * len + j] != 0) return 0;
  return 1;
}

/* The packed exchange by those masks, as H-SADMM plans it: shrinking the
 * projected parameters and expanding them into zeroed tensors gives them
 * back bit for bit, and the packed stream is the one with dense followers
 * less exactly the followers' pruned channels. */
static void pack_round_trip(px_model_t *m, const px_sparsity_t *set, const px_sparsity_param_t *sp,
                            const uint8_t *masks) {
  int np = px_model_num_params(m);
  const float **src = calloc((size_t)np, sizeof *src);
  float **dst = calloc((size_t)np, sizeof *dst);
  size_t dead = 0;
  for (int i = 0; i < np; i++) {
    const px_tensor_t *v = px_model_param(m, i)->value;
    src[i] = v->data;
    dst[i] = calloc(px_tensor_numel(v), sizeof(float));
    const uint8_t *mf = sp[i].follower ? masks + px_sparsity_mask_offset(set, i) : NULL;
    for (int c = 0; mf && c < sp[i].shape.c_out; c++)
      dead += mf[c] ? 0 : px_tensor_numel(v) / (size_t)sp[i].shape.c_out;
  }
  px_pack_plan_t *plan;
  size_t with = px_test_onnx_packed_floats(m, set, sp, masks, 0, &plan);
  assert_int_equal(with + dead, px_test_onnx_packed_floats(m, set, sp, masks, 1, NULL));
  px_pack_shrink(plan, src);
  px_pack_expand(plan, dst);
  for (int i = 0; i < np; i++) {
    assert_memory_equal(dst[i], src[i], px_tensor_numel(px_model_param(m, i)->value) * sizeof(float));
    free(dst[i]);
  }
  print_message("packed: %zu floats, %zu fewer than with dense followers\n", with, dead);
  px_pack_plan_destroy(plan);
  free(dst);
  free(src);
}

/* Groups from the graph: the sparsity set's projection
 * (channel keep 0.5) with the coupling px_model_channel_consumer derives,
 * on an imported net's weights; returns the number of coupled pairs, each
 * checked: a channel pruned in the consumer is a filter pruned in the
 * producer, and the reverse (zero in all tied places). *followers gets the
 * number of tensors that ride along (a depthwise conv and the batch norm
 * after it): each one's filter mask is its group's, zero where the group
 * is pruned. */
static int project_coupled(px_model_t *m, int *followers) {
  int np = px_model_num_params(m), pairs = 0;
  px_sparsity_param_t *sp = calloc((size_t)np, sizeof *sp);
  size_t *off = calloc((size_t)np, sizeof *off);
  px_sparsity_t *set = px_test_onnx_sparsity(m, 0.5, sp, off);
  const float *base = px_model_flat_params(m)->data;
  uint8_t *masks = calloc(px_sparsity_mask_bytes(set) + 1, 1);
  assert_int_equal(px_sparsity_project(set, (float *)base, off, masks), PX_OK);
  *followers = 0;
  for (int i = 0; i < np; i++) {
    if (sp[i].consumer < 0 || sp[i].follower) continue;
    pairs++;
    px_conv_shape_t P = sp[i].shape, Q = sp[sp[i].consumer].shape;
    const float *wp = base + off[i], *wq = base + off[sp[i].consumer];
    int pruned = 0;
    for (int ch = 0; ch < P.c_out; ch++) {
      int filter_zero = row_zero(wp, ch, (size_t)P.c_in * P.kh * P.kw), channel_zero = 1;
      for (int o = 0; o < Q.c_out; o++)
        for (int j = 0; j < Q.kh * Q.kw; j++)
          channel_zero &= wq[((size_t)o * Q.c_in + ch) * Q.kh * Q.kw + j] == 0;
      assert_int_equal(filter_zero, channel_zero);
      pruned += channel_zero;
    }
    assert_int_equal(pruned, P.c_out / 2); /* ceil(0.5 * C) kept */
  }
  for (int i = 0; i < np; i++) {
    if (!sp[i].follower) continue;
    const px_prune_layout_t *F = px_sparsity_layout(set, i), *Q = px_sparsity_layout(set, sp[i].consumer);
    const uint8_t *mf = px_prune_part(F, masks + px_sparsity_mask_offset(set, i), PX_PRUNE_PART_FILTER);
    const uint8_t *mq = px_prune_part(Q, masks + px_sparsity_mask_offset(set, sp[i].consumer),
                                      PX_PRUNE_PART_CHANNEL);
    px_conv_shape_t S = sp[i].shape;
    int kept = 0;
    for (int ch = 0; ch < S.c_out; ch++) {
      assert_int_equal(mf[ch], mq[ch]);
      if (!mq[ch]) assert_true(row_zero(base + off[i], ch, (size_t)S.c_in * S.kh * S.kw));
      kept += mq[ch];
    }
    assert_int_equal(kept, (S.c_out + 1) / 2);
    assert_int_equal(px_model_channel_follower(m, i), sp[i].consumer);
    (*followers)++;
  }
  pack_round_trip(m, set, sp, masks);
  px_sparsity_destroy(set);
  free(masks);
  free(off);
  free(sp);
  return pairs;
}

/* The channel groups of an imported MobileNetV2-style net (depthwise convs,
 * ReLU6, Concat), SE-ResNet (SE multiply, residual adds) and the activations
 * net (Hardswish, SiLU, GELU, Tanh, Hardsigmoid, a Hardsigmoid-gated SE): coupled
 * channels are pruned together across the activations and the depthwise
 * convs; the compact model is smaller and computes the pruned dense model's
 * logits; its ONNX passes onnx's checker and OpenCV's dnn (4.6: the SE's
 * gate resized to the trunk's map, see export/onnx.c) gives those logits. */
static void imported_graphs_prune_by_coupled_groups_and_compact_exactly(void **state) {
  (void)state;
  if (!px_test_python_has("torch, onnx, numpy, cv2")) skip();
  px_ops_t *ops;
  assert_int_equal(px_ops_create(px_device_cpu(), 1, &ops), PX_OK);
  const char *nets[7] = {"mobilenet", "seresnet", "acts", "scalars", "shapes", "bn_eps",
                         "fc_chain"};
  /* the three blocks' expansion -> projection; conv1 -> conv2; through the
   * activations: conv1 -> conv2 (Hardswish), conv4 -> conv5 (Tanh); conv1
   * -> conv2 through the arithmetic by constants; conv1 -> conv2 through
   * the Concat of one input; conv1 -> conv2 -> conv3 -> conv4; conv1 ->
   * conv2 (the two FC layers stay dense, as every classifier does) */
  const int want_pairs[7] = {3, 2, 2, 1, 1, 3, 1};
  /* each block's depthwise conv and its batch norm's scale and shift; none in the SE-ResNet */
  const int want_followers[7] = {9, 0, 0, 0, 0, 0, 0};
  for (int k = 0; k < 7; k++) {
    char dir[64], path[512], cmd[2048];
    reference(nets[k], dir);
    px_model_t *m = import(ops, dir), *cm = NULL;
    int followers, pairs = project_coupled(m, &followers);
    assert_int_equal(pairs, want_pairs[k]);
    assert_int_equal(followers, want_followers[k]);
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
    print_message("%s: %d coupled pairs, %d followers, %zu of %zu parameters after compaction, "
                  "compact logits within %.2e\n", nets[k], pairs, followers, px_model_numel(cm),
                  px_model_numel(m), d);
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
    snprintf(cmd, sizeof cmd, "-c \"import onnx, cv2, numpy as np; m = onnx.load('%s'); "
                "onnx.checker.check_model(m, full_check=True); n = cv2.dnn.readNetFromONNX('%s'); "
                "n.setInput(np.fromfile('%s', np.float32).reshape(%d, %d, %d, %d)); a = n.forward(); "
                "b = np.fromfile('%s', np.float32).reshape(%d, %d); d = float(np.abs(a - b).max()); "
                "print('%s compact ONNX: checker ok, OpenCV logits within %%.2e' %% d); "
                "assert (a.argmax(1) == b.argmax(1)).all() and d < 1e-4 * (1 + np.abs(b).max())\"",
             path, path, xs, BATCH, C, HW, HW, ls, BATCH, K, nets[k]);
    assert_int_equal(px_test_py(cmd), 0);
    free(x);
    px_model_destroy(cm);
    px_model_destroy(m);
    snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
    assert_int_equal(system(cmd), 0);
  }
  px_ops_destroy(ops);
}

/* prune.mac_keep on the imported MobileNetV2-style net: its groups run
 * through depthwise followers (expansion -> depthwise -> projection), and
 * the masks projected at the keep the budget chooses give a compact model
 * of exactly the counted MACs (the stream readers keeping their inputs),
 * at most them where the readers prune theirs (px_test_mac_budget). */
static void imported_mobilenet_meets_a_mac_budget(void **state) {
  (void)state;
  if (!have_torch()) skip();
  px_ops_t *ops;
  assert_int_equal(px_ops_create(px_device_cpu(), 1, &ops), PX_OK);
  const double budget[2] = {0.5, 0.3}, uncoupled[2] = {1.0, 0.0};
  for (int k = 0; k < 2; k++) {
    char dir[64], cmd[128];
    reference("mobilenet", dir);
    px_model_t *m = import(ops, dir);
    uint64_t dense = px_model_macs(m), macs;
    double keep = px_test_mac_budget(ops, m, BATCH, budget[k], uncoupled[k], &macs);
    print_message("mobilenet at %g of %llu MACs: channel keep %.4g, %llu\n", budget[k],
                  (unsigned long long)dense, keep, (unsigned long long)macs);
    assert_true(keep > 0.0 && keep < 1.0);
    px_model_destroy(m);
    snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
    assert_int_equal(system(cmd), 0);
  }
  px_ops_destroy(ops);
}

/* The compact model of m (which the caller pruned), its ONNX export
 * (dir/compact.onnx, onnx's full check) imported again: the logits of all
 * three on one random batch of c x h x w; the compact model's numel. */
static size_t compact_round_trip(px_ops_t *ops, px_model_t *m, const char *dir, const char *net,
                                 int c, int h, int w) {
  char path[512], cmd[1024];
  px_model_t *cm = NULL, *rm = NULL;
  if (px_model_compact(m, ops, BATCH, &cm) != PX_OK) fail_msg("compact: %s", px_last_error());
  size_t n = (size_t)BATCH * c * h * w;
  float *x = malloc(n * sizeof *x), ld[BATCH * K], lc[BATCH * K], lr[BATCH * K];
  uint64_t r = 11;
  for (size_t i = 0; i < n; i++) x[i] = (float)((r = r * 6364136223846793005ull + 1) >> 40) / 8388608.0f - 1.0f;
  assert_int_equal(px_model_logits(m, x, BATCH, ld), PX_OK);
  assert_int_equal(px_model_logits(cm, x, BATCH, lc), PX_OK);
  snprintf(path, sizeof path, "%s/compact.onnx", dir);
  if (px_onnx_save(cm, path, NULL) != PX_OK) fail_msg("export: %s", px_last_error());
  px_model_config_t cfg = {"", c, K, BATCH, h, w, NULL, 0, PX_PRECISION_FP32, path};
  if (px_model_create(ops, &cfg, &rm) != PX_OK) fail_msg("re-import: %s", px_last_error());
  assert_int_equal(px_model_init_params(rm, 1), PX_OK);
  assert_int_equal(px_model_logits(rm, x, BATCH, lr), PX_OK);
  double d = 0, dr = 0, scale = 1;
  for (int i = 0; i < BATCH * K; i++) {
    d = fmax(d, fabs((double)ld[i] - lc[i]));
    dr = fmax(dr, fabs((double)lr[i] - lc[i]));
    scale = fmax(scale, fabs((double)ld[i]));
  }
  size_t numel = px_model_numel(cm);
  print_message("%s: %zu of %zu parameters after compaction, compact logits within %.2e, its "
                "ONNX imported again within %.2e\n", net, numel, px_model_numel(m), d, dr);
  assert_true(px_model_numel(rm) == numel);
  assert_true(d <= 1e-4 * scale);
  assert_true(dr <= 1e-5 * scale);
  snprintf(cmd, sizeof cmd, "-c \"import onnx; onnx.checker.check_model(onnx.load('%s'), "
                            "full_check=True)\"", path);
  assert_int_equal(px_test_py(cmd), 0);
  free(x);
  px_model_destroy(rm);
  px_model_destroy(cm);
  return numel;
}

/* ConvNeXt's channel groups: each block's Linear pair
 * (1 x 1 convs with bias, GELU between) is one coupled group; the
 * LayerNorms and layer scales sit on the residual stream, which stays
 * dense (a LayerNorm's statistics span every channel: compaction keeps
 * its input and output whole). The compact model computes the pruned
 * model's logits, its ONNX (LayerNorm written out at opset 13) passes
 * onnx's checker and, imported again, gives those logits. */
static void convnext_prunes_its_linear_pairs_and_compacts_exactly(void **state) {
  (void)state;
  if (!have_torch()) skip();
  px_ops_t *ops;
  assert_int_equal(px_ops_create(px_device_cpu(), 1, &ops), PX_OK);
  char dir[64], cmd[1024];
  reference("convnext", dir);
  px_model_t *m = import(ops, dir);
  int followers, pairs = project_coupled(m, &followers);
  assert_int_equal(pairs, 2);
  assert_int_equal(followers, 0);
  assert_int_equal(param_kind(m, "features.1.layer_scale"), PX_WEIGHT_CONV_FIXED);
  assert_int_equal(param_kind(m, "features.1.block.2.weight"), PX_WEIGHT_LN_SCALE);
  size_t numel = compact_round_trip(ops, m, dir, "convnext", C, HW, HW);
  print_message("convnext: %d coupled pairs\n", pairs);
  assert_true(numel < px_model_numel(m));
  px_model_destroy(m);
  px_ops_destroy(ops);
  snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
  assert_int_equal(system(cmd), 0);
}

/* Parameter index of name in m, -1 if none. */
static int param_index(const px_model_t *m, const char *name) {
  for (int i = 0; i < px_model_num_params(m); i++)
    if (!strcmp(px_model_param(m, i)->name, name)) return i;
  return -1;
}

/* VGG's classifier: the last map (64 x 2 x 2) flattened whole
 * into Linear, by Flatten and by x.view(N, -1), at opsets 13 and 17, against
 * PyTorch; then pruning: the last conv is coupled to nothing (its output
 * feeds a max pooling and the flattened classifier: it stays a producer
 * that is not pruned for the FC's sake), but a channel whose block of 2 x 2
 * FC columns is zero is dead, and compaction drops the block, the conv's
 * filter and its BN entries, exactly, through the ONNX export and back. */
static void vgg_classifier_on_a_flattened_map_matches_pytorch(void **state) {
  (void)state;
  if (!have_torch()) skip();
  check_net_at("vgg_flat", 3, 32, 32, 1);
  setenv("PX_TEST_ONNX_OPSET", "17", 1);
  check_net_at("vgg_view", 3, 32, 32, 1);
  unsetenv("PX_TEST_ONNX_OPSET");
  char dir[64];
  reference_at("vgg_flat", 3, 32, 32, dir);
  px_ops_t *ops;
  assert_int_equal(px_ops_create(px_device_cpu(), 1, &ops), PX_OK);
  px_model_t *m = import_at(ops, dir, 3, 32, 32);
  const int last = param_index(m, "features.12.weight"), fc = param_index(m, "classifier.0.weight");
  assert_true(last >= 0 && fc >= 0);
  assert_int_equal(px_model_channel_consumer(m, last), -1);
  const px_tensor_t *wf = px_model_param(m, fc)->value;
  assert_int_equal(wf->dims[1], 64 * 4);
  size_t nf = px_tensor_numel(wf);
  float *w = malloc(nf * sizeof *w);
  assert_int_equal(px_tensor_copy_to_host(wf, w, nf * sizeof *w), PX_OK);
  const int dead[] = {0, 5, 6, 63};
  for (int o = 0; o < 32; o++)
    for (int k = 0; k < 4; k++)
      memset(w + (size_t)o * 256 + (size_t)dead[k] * 4, 0, 4 * sizeof *w);
  assert_int_equal(px_tensor_copy_from_host((px_tensor_t *)wf, w, nf * sizeof *w), PX_OK);
  size_t numel = compact_round_trip(ops, m, dir, "vgg_flat", 3, 32, 32);
  /* per dead channel: 32 x 4 FC columns, a 32 x 3 x 3 filter, BN scale and shift */
  assert_int_equal(numel, px_model_numel(m) - 4 * (32 * 4 + 32 * 9 + 2));
  free(w);
  px_model_destroy(m);
  px_ops_destroy(ops);
  char cmd[128];
  snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
  assert_int_equal(system(cmd), 0);
}

/* torchvision's ShuffleNetV2 at toy size: the channel shuffle
 * (Reshape to [N, 2, C/2, H, W] by a computed shape, Transpose (0, 2, 1, 3,
 * 4), Reshape back: a SHUFFLE node), x.chunk(2, dim=1) (Split: two SLICE
 * nodes) and the Concat of the halves, at opsets 13 and 17, against
 * PyTorch; then the compact model (the convs inside a branch couple across
 * its depthwise conv; what feeds a shuffle or a split stays whole) through
 * the ONNX export and back. */
static void shufflenet_forward_and_gradients_match_pytorch(void **state) {
  (void)state;
  if (!have_torch()) skip();
  check_nets_at("13,17", (const char *const[]){"shufflenet", NULL});
  char dir[64];
  reference("shufflenet", dir);
  px_ops_t *ops;
  assert_int_equal(px_ops_create(px_device_cpu(), 1, &ops), PX_OK);
  px_model_t *m = import(ops, dir);
  int nshuffle = 0, nslice = 0;
  for (int k = 0; k < px_model_num_nodes(m); k++) {
    px_model_node_t n;
    assert_int_equal(px_model_node(m, k, &n), PX_OK);
    nshuffle += n.kind == PX_NODE_SHUFFLE && n.groups == 2;
    nslice += n.kind == PX_NODE_SLICE;
  }
  assert_int_equal(nshuffle, 4);
  assert_int_equal(nslice, 4);
  int followers, pairs = project_coupled(m, &followers);
  print_message("shufflenet: %d coupled pairs, %d followers; left dense: %s\n", pairs, followers,
                px_model_left_dense(m));
  assert_true(pairs >= 4);
  assert_non_null(strstr(px_model_left_dense(m), "stage2.0.branch2.5 "));
  size_t numel = compact_round_trip(ops, m, dir, "shufflenet", C, HW, HW);
  assert_true(numel < px_model_numel(m));
  px_model_destroy(m);
  px_ops_destroy(ops);
  char cmd[128];
  snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
  assert_int_equal(system(cmd), 0);
}

/* SqueezeNet's classifier of convolutions (a 1 x 1 conv to the classes,
 * ReLU, global average pooling, flatten; and the conv alone under
 * x.mean((2, 3))), at opsets 13 and 17, against PyTorch; then pruning: the
 * classifier conv's filters are the classes, left out of pruning
 * (PX_WEIGHT_CONV_FIXED), the Fire modules' convs prunable; a squeeze
 * filter whose channel no expand reads is dead, and compaction drops it
 * exactly, through the ONNX export (the pooled logits flattened) and back. */
static void squeezenet_conv_classifier_matches_pytorch_and_compacts(void **state) {
  (void)state;
  if (!have_torch()) skip();
  check_nets_at("13,17", (const char *const[]){"squeeze", "squeeze_mean", NULL});
  char dir[64], cmd[128];
  reference("squeeze", dir);
  px_ops_t *ops;
  assert_int_equal(px_ops_create(px_device_cpu(), 1, &ops), PX_OK);
  px_model_t *m = import(ops, dir);
  assert_int_equal(param_kind(m, "classifier.1.weight"), PX_WEIGHT_CONV_FIXED);
  assert_int_equal(param_kind(m, "features.4.squeeze.weight"), PX_WEIGHT_CONV);
  assert_int_equal(param_kind(m, "features.4.expand3x3.weight"), PX_WEIGHT_CONV);
  /* squeeze filter 2 (weights [8, 32, 1, 1]) and what both expands read of it */
  const char *names[3] = {"features.4.squeeze.weight", "features.4.expand1x1.weight",
                          "features.4.expand3x3.weight"};
  for (int k = 0; k < 3; k++) {
    int i = param_index(m, names[k]);
    assert_true(i >= 0);
    const px_tensor_t *t = px_model_param(m, i)->value;
    float *w = t->data; /* plain host memory on the CPU engine */
    const int64_t o = t->dims[0], ci = t->dims[1], kk = t->dims[2] * t->dims[3];
    for (int64_t a = 0; a < o; a++)
      for (int64_t b = 0; b < ci; b++)
        if (k == 0 ? a == 2 : b == 2) memset(w + (a * ci + b) * kk, 0, (size_t)kk * sizeof *w);
  }
  size_t numel = compact_round_trip(ops, m, dir, "squeeze", C, HW, HW);
  /* the filter (32 weights and its bias), 16 + 16 x 9 expand weights */
  assert_int_equal(numel, px_model_numel(m) - (32 + 1 + 16 + 16 * 9));
  px_model_destroy(m);
  px_ops_destroy(ops);
  snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
  assert_int_equal(system(cmd), 0);
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
  snprintf(path, sizeof path, "%s/elu.onnx", dir);
  snprintf(cmd, sizeof cmd, "%s export elu %s", NETS, path);
  assert_int_equal(px_test_py(cmd), 0);
  const char *msg = refusal(path);
  assert_non_null(strstr(msg, path));
  assert_non_null(strstr(msg, "/gate/Elu"));
  assert_non_null(strstr(msg, "operator Elu is not supported"));
  /* a Clip other than ReLU6 */
  snprintf(path, sizeof path, "%s/clip1.onnx", dir);
  snprintf(cmd, sizeof cmd, "%s export clip1 %s", NETS, path);
  assert_int_equal(px_test_py(cmd), 0);
  msg = refusal(path);
  assert_non_null(strstr(msg, "(Clip): only Clip(min 0, max 6) (ReLU6)"));
  assert_non_null(strstr(msg, "clips to [0, 1]"));
  /* GELU's tanh approximation (its first step, x * x, is no product taken) and 1 / x
   * (PyTorch's Reciprocal) */
  snprintf(path, sizeof path, "%s/gelu_tanh.onnx", dir);
  snprintf(cmd, sizeof cmd, "%s export gelu_tanh %s", NETS, path);
  assert_int_equal(px_test_py(cmd), 0);
  msg = refusal(path);
  assert_non_null(strstr(msg, "node '/gate/Mul' (Mul): only a map"));
  snprintf(path, sizeof path, "%s/recip.onnx", dir);
  snprintf(cmd, sizeof cmd, "%s export recip %s", NETS, path);
  assert_int_equal(px_test_py(cmd), 0);
  msg = refusal(path);
  assert_non_null(strstr(msg, "node '/gate/Reciprocal' (Reciprocal): operator Reciprocal is not"));
  /* a value computed from an activation's data (x[:, :8]), not its shape */
  snprintf(path, sizeof path, "%s/data_slice.onnx", dir);
  snprintf(cmd, sizeof cmd, "%s export data_slice %s", NETS, path);
  assert_int_equal(px_test_py(cmd), 0);
  msg = refusal(path);
  assert_non_null(strstr(msg, "node '/Slice' (Slice): input '/Reshape_output_0' is an "
                              "activation: a value computed from a tensor's data is not taken"));
  /* a Linear layer's features viewed as a map (a squeeze-and-excitation of Linear layers) */
  snprintf(path, sizeof path, "%s/linear_se.onnx", dir);
  snprintf(cmd, sizeof cmd, "%s export linear_se %s", NETS, path);
  assert_int_equal(px_test_py(cmd), 0);
  msg = refusal(path);
  assert_non_null(strstr(msg, "(Reshape): the features of a Gemm or MatMul are read only by"));
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
/* net as PyTorch exports it for 1 x 32 x 32 inputs, imported, saved and
 * exported by PruneX (Fashion-MNIST's preprocessing in the graph): onnx's
 * checker on the export, and OpenCV's logits of it against OpenCV's of
 * PyTorch's file or, with torch_ref, PyTorch's own. */
static void export_round_trip(const char *net, int torch_ref) {
  char dir[64], orig[512], ckpt[512], cmd[2048];
  strcpy(dir, "/tmp/px_onnx_import_XXXXXX");
  assert_non_null(mkdtemp(dir));
  snprintf(orig, sizeof orig, "%s/%s.onnx", dir, net);
  snprintf(cmd, sizeof cmd, "%s export %s %s 1 32 32 10", NETS, net, orig);
  assert_int_equal(px_test_py(cmd), 0);
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
  snprintf(cmd, sizeof cmd, "%s compare %s %s%s%s", NETS, orig, rep.onnx_path,
           torch_ref ? " " : "", torch_ref ? net : "");
  assert_int_equal(px_test_py(cmd), 0);
  px_model_destroy(m);
  px_ops_destroy(ops);
  snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
  assert_int_equal(system(cmd), 0);
}

static void imported_vgg_exports_to_onnx_that_opencv_runs_alike(void **state) {
  (void)state;
  if (!px_test_python_has("torch, onnx, numpy, cv2")) skip();
  export_round_trip("vgg", 0);
}

/* Windows other than k x k with padding k / 2 (Geometry in
 * onnx_import_nets.py): non-square kernels, patchify strides, dilation,
 * asymmetric padding (a Pad folded into a conv, auto_pad SAME_UPPER),
 * ceil_mode max and average pooling, average pooling that does not count
 * its padding, adaptive average pooling: logits and one step's gradients
 * against PyTorch's at 3 x 64 x 64, and the export back to ONNX (the
 * windows written as pads: onnx's checker, and OpenCV's logits of both
 * files) at 1 x 32 x 32. */
static void geometry_forward_gradients_and_export_match_pytorch(void **state) {
  (void)state;
  if (!have_torch()) skip();
  check_net_at("geometry", 3, 64, 64, 1);
  check_net_at("geometry_same", 3, 64, 64, 1);
  if (!px_test_python_has("torch, onnx, numpy, cv2")) return;
  export_round_trip("geometry", 1);
  export_round_trip("geometry_same", 1);
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
  snprintf(cmd, sizeof cmd, "%s/examples/export_onnx.py %s --channels 3 >/dev/null",
           PX_SOURCE_DIR, path);
  assert_int_equal(px_test_py(cmd), 0);
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
  /* --inner: the quickstart's compact architecture (bench/accuracy's quick-ddp-inner8.15.29),
     19,450,496 multiply-accumulates on 1 x 32 x 32 as the quickstart's compact model and
     bench/accuracy/fresh_compact.py's count of it */
  snprintf(cmd, sizeof cmd, "%s/examples/export_onnx.py %s --inner 8,15,29 --he --seed 1 "
           ">/dev/null", PX_SOURCE_DIR, path);
  assert_int_equal(px_test_py(cmd), 0);
  px_model_config_t cc = {"resnet20", 1, K, 4, 32, 32, NULL, 0, PX_PRECISION_FP32, path};
  assert_int_equal(px_model_create(ops, &cc, &m), PX_OK);
  assert_int_equal(px_model_macs(m), 19450496);
  const px_tensor_t *w = px_model_param(m, 3)->value; /* layer1.0.conv1: 8 filters */
  assert_int_equal(w->dims[0], 8);
  px_model_destroy(m);
  px_ops_destroy(ops);
  snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
  assert_int_equal(system(cmd), 0);
}

/* One path for built-in and imported models: the
 * built-in resnet20, written by our own ONNX export and imported back, has
 * the built-in's coupling groups (producer -> consumer, no followers) and,
 * projected from the same weights, bit for bit the built-in's masks and
 * projected weights: the coupling and the projection read the graph, not
 * the architecture's name. */
static void builtin_resnet20_through_our_onnx_has_its_groups_and_masks(void **state) {
  (void)state;
  char dir[64], path[512], cmd[128];
  strcpy(dir, "/tmp/px_onnx_import_XXXXXX");
  assert_non_null(mkdtemp(dir));
  snprintf(path, sizeof path, "%s/resnet20.onnx", dir);
  px_ops_t *ops;
  assert_int_equal(px_ops_create(px_device_cpu(), 1, &ops), PX_OK);
  px_model_config_t bc = {"resnet20", 3, K, 2, 32, 32, NULL, 0, PX_PRECISION_FP32, NULL};
  px_model_config_t ic = bc;
  ic.onnx = path;
  px_model_t *b = NULL, *m = NULL;
  assert_int_equal(px_model_create(ops, &bc, &b), PX_OK);
  assert_int_equal(px_model_init_params(b, 7), PX_OK);
  assert_int_equal(px_onnx_save(b, path, NULL), PX_OK);
  assert_int_equal(px_model_create(ops, &ic, &m), PX_OK);
  assert_int_equal(px_model_init_params(m, 1), PX_OK); /* the file's weights: b's */
  int np = px_model_num_params(b), pairs = 0;
  assert_int_equal(px_model_num_params(m), np);
  assert_int_equal(px_model_numel(m), px_model_numel(b));
  assert_memory_equal(px_model_flat_params(m)->data, px_model_flat_params(b)->data,
                      px_model_numel(b) * sizeof(float));
  px_sparsity_param_t *sb = calloc((size_t)np, sizeof *sb), *sm = calloc((size_t)np, sizeof *sm);
  size_t *ob = calloc((size_t)np, sizeof *ob), *om = calloc((size_t)np, sizeof *om);
  px_sparsity_t *setb = px_test_onnx_sparsity(b, 0.5, sb, ob);
  px_sparsity_t *setm = px_test_onnx_sparsity(m, 0.5, sm, om);
  for (int i = 0; i < np; i++) {
    assert_string_equal(px_model_param(m, i)->name, px_model_param(b, i)->name);
    assert_memory_equal(&sm[i], &sb[i], sizeof sb[i]);
    assert_int_equal(ob[i], om[i]);
    assert_int_equal(sb[i].follower, 0);
    assert_int_equal(px_model_channel_follower(b, i), -1);
    pairs += sb[i].consumer >= 0;
  }
  assert_int_equal(pairs, 9); /* every block's conv1 -> conv2 */
  size_t mb = px_sparsity_mask_bytes(setb);
  assert_int_equal(px_sparsity_mask_bytes(setm), mb);
  uint8_t *kb = calloc(mb, 1), *km = calloc(mb, 1);
  assert_int_equal(px_sparsity_project(setb, px_model_flat_params(b)->data, ob, kb), PX_OK);
  assert_int_equal(px_sparsity_project(setm, px_model_flat_params(m)->data, om, km), PX_OK);
  assert_memory_equal(kb, km, mb);
  assert_memory_equal(px_model_flat_params(m)->data, px_model_flat_params(b)->data,
                      px_model_numel(b) * sizeof(float));
  print_message("resnet20 through our ONNX: %d coupled pairs, %zu mask bytes, the built-in's\n",
                pairs, mb);
  px_sparsity_destroy(setb);
  px_sparsity_destroy(setm);
  free(kb);
  free(km);
  free(sb);
  free(sm);
  free(ob);
  free(om);
  px_model_destroy(m);
  px_model_destroy(b);
  px_ops_destroy(ops);
  snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
  assert_int_equal(system(cmd), 0);
}

/* ---- files edited in the test: no Python needed ------------------------------ */

/* The built-in resnet20 through our ONNX export (path, in the fresh
 * directory dir), unpacked for a test to edit. */
static Onnx__ModelProto *resnet20_proto(char *dir, char *path, size_t cap) {
  strcpy(dir, "/tmp/px_onnx_import_XXXXXX");
  assert_non_null(mkdtemp(dir));
  snprintf(path, cap, "%s/resnet20.onnx", dir);
  px_ops_t *ops;
  assert_int_equal(px_ops_create(px_device_cpu(), 1, &ops), PX_OK);
  px_model_config_t bc = {"resnet20", 3, K, 2, 32, 32, NULL, 0, PX_PRECISION_FP32, NULL};
  px_model_t *b = NULL;
  assert_int_equal(px_model_create(ops, &bc, &b), PX_OK);
  assert_int_equal(px_model_init_params(b, 7), PX_OK);
  assert_int_equal(px_onnx_save(b, path, NULL), PX_OK);
  px_model_destroy(b);
  px_ops_destroy(ops);
  FILE *f = fopen(path, "rb");
  assert_non_null(f);
  fseek(f, 0, SEEK_END);
  size_t n = (size_t)ftell(f);
  fseek(f, 0, SEEK_SET);
  uint8_t *buf = malloc(n);
  assert_int_equal(fread(buf, 1, n, f), n);
  fclose(f);
  Onnx__ModelProto *mp = onnx__model_proto__unpack(NULL, n, buf);
  free(buf);
  assert_non_null(mp);
  return mp;
}

static void write_proto(const Onnx__ModelProto *mp, const char *path) {
  size_t n = onnx__model_proto__get_packed_size(mp);
  uint8_t *buf = malloc(n);
  assert_int_equal(onnx__model_proto__pack(mp, buf), n);
  FILE *f = fopen(path, "wb");
  assert_non_null(f);
  assert_int_equal(fwrite(buf, 1, n, f), n);
  fclose(f);
  free(buf);
}

/* A Conv's kernel_shape must be its weight's window: one that says 5x5
 * beside a 3x3 weight, or a value out of any range, is refused with the
 * node and the values, not ignored. */
static void conv_kernel_shape_must_be_the_weights(void **state) {
  (void)state;
  char dir[64], path[512], cmd[128];
  Onnx__ModelProto *mp = resnet20_proto(dir, path, sizeof path);
  Onnx__NodeProto *conv = NULL;
  for (size_t k = 0; k < mp->graph->n_node && !conv; k++)
    if (!strcmp(mp->graph->node[k]->op_type, "Conv")) conv = mp->graph->node[k];
  assert_non_null(conv);
  Onnx__AttributeProto *ks = NULL;
  for (size_t i = 0; i < conv->n_attribute; i++)
    if (!strcmp(conv->attribute[i]->name, "kernel_shape")) ks = conv->attribute[i];
  assert_true(ks && ks->n_ints == 2 && ks->ints[0] == 3 && ks->ints[1] == 3);
  assert_int_equal(px_model_onnx_check(path, NULL), PX_OK);
  ks->ints[0] = ks->ints[1] = 5;
  write_proto(mp, path);
  const char *why = refusal(path);
  if (!strstr(why, conv->name) || !strstr(why, "kernel_shape [5, 5]") || !strstr(why, "3x3"))
    fail_msg("%s", why);
  ks->ints[0] = 3;
  ks->ints[1] = (int64_t)1 << 40;
  write_proto(mp, path);
  why = refusal(path);
  if (!strstr(why, conv->name) || !strstr(why, "kernel_shape [3, 1099511627776]"))
    fail_msg("%s", why);
  ks->ints[1] = 3;
  write_proto(mp, path);
  assert_int_equal(px_model_onnx_check(path, NULL), PX_OK);
  onnx__model_proto__free_unpacked(mp, NULL);
  snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
  assert_int_equal(system(cmd), 0);
}

/* The memory an import takes, the file and every initializer, those no
 * node reads too, is bounded by PX_ONNX_MAX_BYTES: resnet20 with an unused
 * 20 MiB initializer (a file of about 21 MiB, parsed: about 42 MiB) is
 * refused under 16M (the file alone) and 32M (with its initializers),
 * naming the setting and the total, and taken under 64M; a setting that is
 * not a size is refused, naming it. */
static void unused_initializers_count_against_the_import_bound(void **state) {
  (void)state;
  char dir[64], path[512], cmd[128];
  Onnx__ModelProto *mp = resnet20_proto(dir, path, sizeof path);
  enum { BLOB = 5 << 20 }; /* floats: 20 MiB */
  Onnx__TensorProto blob = ONNX__TENSOR_PROTO__INIT;
  int64_t dims[1] = {BLOB};
  blob.name = "unused.blob";
  blob.has_data_type = 1;
  blob.data_type = ONNX__TENSOR_PROTO__DATA_TYPE__FLOAT;
  blob.n_dims = 1;
  blob.dims = dims;
  blob.has_raw_data = 1;
  blob.raw_data.len = (size_t)BLOB * 4;
  blob.raw_data.data = calloc(BLOB, 4);
  Onnx__GraphProto *gp = mp->graph;
  Onnx__TensorProto **old = gp->initializer, **all = calloc(gp->n_initializer + 1, sizeof *all);
  memcpy(all, old, gp->n_initializer * sizeof *all);
  all[gp->n_initializer] = &blob;
  gp->initializer = all;
  gp->n_initializer++;
  write_proto(mp, path);
  gp->n_initializer--;
  gp->initializer = old;
  free(all);
  free(blob.raw_data.data);
  onnx__model_proto__free_unpacked(mp, NULL);

  setenv("PX_ONNX_MAX_BYTES", "16M", 1);
  const char *why = refusal(path);
  if (!strstr(why, "the file alone") || !strstr(why, "PX_ONNX_MAX_BYTES = 16777216"))
    fail_msg("%s", why);
  setenv("PX_ONNX_MAX_BYTES", "32M", 1);
  why = refusal(path);
  if (!strstr(why, "used or not") || !strstr(why, "PX_ONNX_MAX_BYTES = 33554432"))
    fail_msg("%s", why);
  setenv("PX_ONNX_MAX_BYTES", "64M", 1);
  if (px_model_onnx_check(path, NULL) != PX_OK) fail_msg("64M: %s", px_last_error());
  setenv("PX_ONNX_MAX_BYTES", "lots", 1);
  why = refusal(path);
  if (!strstr(why, "PX_ONNX_MAX_BYTES = 'lots'")) fail_msg("%s", why);
  unsetenv("PX_ONNX_MAX_BYTES");
  if (px_model_onnx_check(path, NULL) != PX_OK) /* the default: 2 GiB */
    fail_msg("default: %s", px_last_error());
  snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
  assert_int_equal(system(cmd), 0);
}

/* mp's graph with one more initializer t (and, when node, node n first),
 * written to path; mp is left as it was. */
static void write_with(Onnx__ModelProto *mp, Onnx__TensorProto *t, Onnx__NodeProto *node,
                       const char *path) {
  Onnx__GraphProto *gp = mp->graph;
  Onnx__TensorProto **oi = gp->initializer, **ai = calloc(gp->n_initializer + 1, sizeof *ai);
  Onnx__NodeProto **on = gp->node, **an = calloc(gp->n_node + 1, sizeof *an);
  memcpy(ai, oi, gp->n_initializer * sizeof *ai);
  ai[gp->n_initializer] = t;
  an[0] = node;
  memcpy(an + (node != NULL), on, gp->n_node * sizeof *an);
  gp->initializer = ai;
  gp->n_initializer++;
  gp->node = an;
  gp->n_node += node != NULL;
  write_proto(mp, path);
  gp->n_initializer--;
  gp->n_node -= node != NULL;
  gp->initializer = oi;
  gp->node = on;
  free(ai);
  free(an);
}

/* The per-tensor cap is 256 M elements (VGG-11's classifier weight,
 * 25088 x 4096, is 102.8 M; the import bound, PX_ONNX_MAX_BYTES, caps the
 * sum): an initializer whose dims claim 100 M elements passes the cap and
 * is refused only for the values it lacks; one claiming 300 M is refused
 * naming the cap. Folding is bounded too: a ConstantOfShape of 5000
 * elements is refused naming its node and the limit. (Cheap: no tensor's
 * data is written.) */
static void tensor_caps_take_real_networks_and_bound_hostile_ones(void **state) {
  (void)state;
  char dir[64], path[512], cmd[128];
  Onnx__ModelProto *mp = resnet20_proto(dir, path, sizeof path);
  Onnx__TensorProto t = ONNX__TENSOR_PROTO__INIT;
  int64_t dims[2] = {25088, 4096}, big[2] = {300, 1 << 20};
  t.name = "classifier.0.weight";
  t.has_data_type = 1;
  t.data_type = ONNX__TENSOR_PROTO__DATA_TYPE__FLOAT;
  t.n_dims = 2;
  t.dims = dims;
  write_with(mp, &t, NULL, path);
  const char *why = refusal(path);
  if (!strstr(why, "'classifier.0.weight' holds 0 values for 102760448 elements"))
    fail_msg("%s", why);
  t.dims = big;
  write_with(mp, &t, NULL, path);
  why = refusal(path);
  if (!strstr(why, "'classifier.0.weight' has more than 268435456 elements")) fail_msg("%s", why);
  /* ConstantOfShape([5000]) */
  int64_t one = 1, n5000 = 5000;
  t = (Onnx__TensorProto)ONNX__TENSOR_PROTO__INIT;
  t.name = "big.shape";
  t.has_data_type = 1;
  t.data_type = ONNX__TENSOR_PROTO__DATA_TYPE__INT64;
  t.n_dims = 1;
  t.dims = &one;
  t.n_int64_data = 1;
  t.int64_data = &n5000;
  Onnx__NodeProto node = ONNX__NODE_PROTO__INIT;
  char *in[1] = {"big.shape"}, *out[1] = {"big.zeros"};
  node.name = "big";
  node.op_type = "ConstantOfShape";
  node.n_input = 1;
  node.input = in;
  node.n_output = 1;
  node.output = out;
  write_with(mp, &t, &node, path);
  why = refusal(path);
  if (!strstr(why, "node 'big' (ConstantOfShape): the result would have more than 4096 elements"))
    fail_msg("%s", why);
  n5000 = 4096; /* within the limit: folded, and nothing reads it */
  write_with(mp, &t, &node, path);
  if (px_model_onnx_check(path, NULL) != PX_OK) fail_msg("4096: %s", px_last_error());
  onnx__model_proto__free_unpacked(mp, NULL);
  snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
  assert_int_equal(system(cmd), 0);
}

int main(void) {
  struct CMUnitTest tests[] = {
      cmocka_unit_test(vgg_forward_and_gradients_match_pytorch),
      cmocka_unit_test(vgg_classifier_on_a_flattened_map_matches_pytorch),
      cmocka_unit_test(shufflenet_forward_and_gradients_match_pytorch),
      cmocka_unit_test(squeezenet_conv_classifier_matches_pytorch_and_compacts),
      cmocka_unit_test(resnet_forward_and_gradients_match_pytorch),
      cmocka_unit_test(mobilenet_forward_and_gradients_match_pytorch),
      cmocka_unit_test(seresnet_forward_and_gradients_match_pytorch),
      cmocka_unit_test(acts_forward_and_gradients_match_pytorch),
      cmocka_unit_test(shapes_forward_and_gradients_match_pytorch),
      cmocka_unit_test(bn_epsilons_and_momenta_match_pytorch),
      cmocka_unit_test(fc_chain_matches_pytorch),
      cmocka_unit_test(convnext_forward_and_gradients_match_pytorch),
      cmocka_unit_test(convnext_prunes_its_linear_pairs_and_compacts_exactly),
      cmocka_unit_test(other_input_sizes_match_pytorch),
      cmocka_unit_test(depthwise_and_se_convs_are_left_out_of_pruning),
      cmocka_unit_test(imported_graphs_prune_by_coupled_groups_and_compact_exactly),
      cmocka_unit_test(imported_mobilenet_meets_a_mac_budget),
      cmocka_unit_test(unsupported_operator_is_refused_with_node_and_file),
      cmocka_unit_test(truncated_and_garbage_files_are_refused),
      cmocka_unit_test(imported_vgg_exports_to_onnx_that_opencv_runs_alike),
      cmocka_unit_test(geometry_forward_gradients_and_export_match_pytorch),
      cmocka_unit_test(imported_resnet20_is_the_builtin_graph),
      cmocka_unit_test(builtin_resnet20_through_our_onnx_has_its_groups_and_masks),
      cmocka_unit_test(conv_kernel_shape_must_be_the_weights),
      cmocka_unit_test(unused_initializers_count_against_the_import_bound),
      cmocka_unit_test(tensor_caps_take_real_networks_and_bound_hostile_ones),
  };
  size_t n = px_test_select(tests, sizeof tests / sizeof tests[0]);
  return _cmocka_run_group_tests("onnx_import", tests, n, NULL, NULL);
}
