/* Compaction (prunex/export.h): the compact model computes the masked dense
 * model's logits for resnet20, resnet18 and resnet50 (bottleneck) pruned
 * with coupled channels, a residual-stream channel that every reader drops
 * (removed everywhere) or only some drop (kept), and zero filters whose
 * batch-norm constant is still read (folded for 1x1 readers, kept for 3x3);
 * the compact file holds the masked shapes and reloads; a wrong width fails
 * naming the tensor. Random batch-norm parameters and statistics make the
 * constants non-trivial. The ONNX file of a known data set carries its
 * preprocessing (Pad, Sub, Div: it takes raw pixels at the data set's own
 * size), one of an unknown data set takes the normalised tensor, and a data
 * set the model cannot take is refused naming both sizes (what the graph
 * computes is checked by tests/export_check.py with onnx, OpenCV and
 * PyTorch). */
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
#include "prunex/prune.h"
#include "prunex/safetensors.h"
#include "px_test_util.h"

#define BATCH 2

static float *host_of(const px_tensor_t *t) {
  size_t n = px_tensor_numel(t);
  float *h = malloc(n * sizeof *h);
  assert_non_null(h);
  assert_int_equal(px_tensor_copy_to_host(t, h, n * sizeof *h), PX_OK);
  return h;
}

static void put(px_tensor_t *t, const float *h) {
  assert_int_equal(px_tensor_copy_from_host(t, h, px_tensor_numel(t) * sizeof *h), PX_OK);
}

static int param_index(const px_model_t *m, const char *name) {
  for (int i = 0; i < px_model_num_params(m); i++)
    if (!strcmp(px_model_param(m, i)->name, name)) return i;
  fail_msg("no parameter %s", name);
  return -1;
}

static px_conv_shape_t shape_of(const px_tensor_t *t) {
  return (px_conv_shape_t){(int32_t)t->dims[0], (int32_t)t->dims[1], (int32_t)t->dims[2],
                           (int32_t)t->dims[3]};
}

/* Zeroes input channel c (all filters) of conv parameter i. */
static void zero_in_channel(px_model_t *m, int i, int c) {
  px_tensor_t *t = px_model_param(m, i)->value;
  float *w = host_of(t);
  px_conv_shape_t s = shape_of(t);
  for (int o = 0; o < s.c_out; o++)
    memset(w + ((size_t)o * s.c_in + c) * s.kh * s.kw, 0, (size_t)s.kh * s.kw * sizeof *w);
  put(t, w);
  free(w);
}

static void zero_filter(px_model_t *m, int i, int o) {
  px_tensor_t *t = px_model_param(m, i)->value;
  float *w = host_of(t);
  px_conv_shape_t s = shape_of(t);
  memset(w + (size_t)o * s.c_in * s.kh * s.kw, 0, (size_t)s.c_in * s.kh * s.kw * sizeof *w);
  put(t, w);
  free(w);
}

/* Makes the BN output of channel c for a zero input the constant 1 (shift 1,
 * running mean 0), so that a zero filter before it is read as a constant. */
static void bn_constant_one(px_model_t *m, const char *bn, int c) {
  char nm[128];
  snprintf(nm, sizeof nm, "%s.bias", bn);
  px_tensor_t *t = px_model_param(m, param_index(m, nm))->value;
  float *h = host_of(t);
  h[c] = 1.0f;
  put(t, h);
  free(h);
  snprintf(nm, sizeof nm, "%s.running_mean", bn);
  for (int i = 0; i < px_model_num_buffers(m); i++)
    if (!strcmp(px_model_buffer(m, i)->name, nm)) {
      h = host_of(px_model_buffer(m, i)->value);
      h[c] = 0.0f;
      put(px_model_buffer(m, i)->value, h);
      free(h);
    }
}

/* Readers (conv parameter indices) of the residual stream the stem feeds. */
static int stem_stream_readers(const px_model_t *m, int *readers) {
  int na = px_model_num_acts(m), nn = px_model_num_nodes(m), nr = 0;
  char *in = calloc((size_t)na, 1);
  px_model_node_t n;
  assert_int_equal(px_model_node(m, 0, &n), PX_OK); /* the stem conv */
  in[n.out] = 1;
  for (int changed = 1; changed;) {
    changed = 0;
    for (int k = 0; k < nn; k++) {
      px_model_node(m, k, &n);
      if (n.kind == PX_NODE_CONV || n.kind == PX_NODE_FC) continue;
      int hit = in[n.in] || (n.in2 >= 0 && in[n.in2]) || in[n.out];
      if (!hit) continue;
      if (!in[n.out] || !in[n.in] || (n.in2 >= 0 && !in[n.in2])) changed = 1;
      in[n.out] = in[n.in] = 1;
      if (n.in2 >= 0) in[n.in2] = 1;
    }
  }
  for (int k = 0; k < nn; k++) {
    px_model_node(m, k, &n);
    if (n.kind == PX_NODE_CONV && in[n.in]) readers[nr++] = n.w;
  }
  free(in);
  return nr;
}

/* fold_producer: a 3x3 conv whose output a 1x1 conv reads (a bottleneck's
 * conv2), or NULL. */
static void check_arch(const char *arch, const char *fold_producer) {
  px_ops_t *ops;
  assert_int_equal(px_ops_create(px_device_cpu(), 0, &ops), PX_OK);
  px_model_config_t cfg = {arch, 3, 10, BATCH, 32, 32, NULL, 0, PX_PRECISION_FP32, NULL};
  px_model_t *m, *cm;
  assert_int_equal(px_model_create(ops, &cfg, &m), PX_OK);
  assert_int_equal(px_model_init_params(m, 7), PX_OK);
  px_test_rng_t r;
  px_test_rng_seed(&r, 11);
  /* random BN parameters and statistics: the constants of dead filters matter */
  for (int i = 0; i < px_model_num_params(m); i++) {
    const px_model_param_t *p = px_model_param(m, i);
    if (p->kind != PX_WEIGHT_BN_SCALE && p->kind != PX_WEIGHT_BN_SHIFT) continue;
    float *h = host_of(p->value);
    for (size_t j = 0; j < px_tensor_numel(p->value); j++)
      h[j] = p->kind == PX_WEIGHT_BN_SCALE ? (float)(0.5 + px_test_rng_uniform(&r))
                                           : (float)(px_test_rng_uniform(&r) - 0.5);
    put(p->value, h);
    free(h);
  }
  for (int i = 0; i < px_model_num_buffers(m); i++) {
    const px_model_buffer_t *b = px_model_buffer(m, i);
    float *h = host_of(b->value);
    int var = strstr(b->name, "running_var") != NULL;
    for (size_t j = 0; j < px_tensor_numel(b->value); j++)
      h[j] = var ? (float)(0.5 + px_test_rng_uniform(&r)) : (float)(0.2 * px_test_rng_normal(&r));
    put(b->value, h);
    free(h);
  }
  /* coupled channel projection at keep 0.5, as training does */
  int np = px_model_num_params(m);
  int *kept = calloc((size_t)np, sizeof *kept);
  for (int i = 0; i < np; i++) {
    int j = px_model_channel_consumer(m, i);
    if (j < 0) continue;
    px_tensor_t *tp = px_model_param(m, i)->value, *tc = px_model_param(m, j)->value;
    float *wp = host_of(tp), *wc = host_of(tc);
    uint8_t *fm = calloc((size_t)tp->dims[0], 1), *cm_ = calloc((size_t)tc->dims[1], 1);
    memset(fm, 1, (size_t)tp->dims[0]);
    assert_int_equal(px_prune_project_coupled(wp, shape_of(tp), wc, shape_of(tc), 0.5, fm, cm_,
                                              NULL, 0),
                     PX_OK);
    put(tp, wp);
    put(tc, wc);
    kept[i] = (int)px_prune_keep_count(0.5, (size_t)tp->dims[0]);
    free(wp);
    free(wc);
    free(fm);
    free(cm_);
  }
  /* residual stream of the stem: channel 3 dropped by every reader, channel 5 by one */
  int readers[64], nr = stem_stream_readers(m, readers);
  assert_true(nr >= 2);
  for (int k = 0; k < nr; k++) zero_in_channel(m, readers[k], 3);
  zero_in_channel(m, readers[0], 5);
  /* a zero filter whose constant BN output a 3x3 conv reads: kept */
  int l1c1 = param_index(m, "layer1.0.conv1.weight");
  int l1c1_consumer = px_model_channel_consumer(m, l1c1);
  {
    /* find a filter the projection kept and zero only the filter */
    float *wc = host_of(px_model_param(m, l1c1_consumer)->value);
    px_conv_shape_t s = shape_of(px_model_param(m, l1c1_consumer)->value);
    int c = -1;
    for (int ch = 0; ch < s.c_in && c < 0; ch++)
      for (int o = 0; o < s.c_out; o++)
        if (wc[((size_t)o * s.c_in + ch) * s.kh * s.kw] != 0.0f) {
          c = ch;
          break;
        }
    free(wc);
    assert_true(c >= 0);
    zero_filter(m, l1c1, c);
    bn_constant_one(m, "layer1.0.bn1", c);
  }
  int fold = -1;
  if (fold_producer) { /* its consumer is 1x1: the constant is folded, the channel goes */
    fold = param_index(m, fold_producer);
    float *wc = host_of(px_model_param(m, px_model_channel_consumer(m, fold))->value);
    px_conv_shape_t s = shape_of(px_model_param(m, px_model_channel_consumer(m, fold))->value);
    int c = -1;
    for (int ch = 0; ch < s.c_in && c < 0; ch++)
      for (int o = 0; o < s.c_out; o++)
        if (wc[(size_t)o * s.c_in + ch] != 0.0f) {
          c = ch;
          break;
        }
    free(wc);
    assert_true(c >= 0);
    zero_filter(m, fold, c);
    char bn[64];
    snprintf(bn, sizeof bn, "%.*sbn2", (int)(strlen(fold_producer) - strlen("conv2.weight")),
             fold_producer);
    bn_constant_one(m, bn, c);
  }

  px_status_t cst = px_model_compact(m, ops, BATCH, &cm);
  if (cst != PX_OK) fail_msg("compact %s: %s", arch, px_last_error());
  assert_true(px_model_numel(cm) < px_model_numel(m));

  /* the same logits */
  size_t per = 3 * 32 * 32;
  float *x = malloc(BATCH * per * sizeof *x), ld[BATCH * 10], lc[BATCH * 10];
  px_test_fill_normal(&r, x, BATCH * per);
  assert_int_equal(px_model_logits(m, x, BATCH, ld), PX_OK);
  assert_int_equal(px_model_logits(cm, x, BATCH, lc), PX_OK);
  double mx = 0, err = 0;
  for (int i = 0; i < BATCH * 10; i++) {
    if (fabs(ld[i]) > mx) mx = fabs(ld[i]);
    if (fabs(ld[i] - lc[i]) > err) err = fabs(ld[i] - lc[i]);
  }
  print_message("%s: %zu -> %zu parameters, max |logit| %.3g, max diff %.3g\n", arch,
                px_model_numel(m), px_model_numel(cm), mx, err);
  assert_true(mx > 1e-3);
  assert_true(err <= 1e-4 * (1 + mx));

  /* shapes: coupled pairs at the kept count, the stem stream without channel 3 */
  for (int i = 0; i < np; i++) {
    if (!kept[i]) continue;
    const px_tensor_t *t = px_model_param(cm, i)->value;
    int j = px_model_channel_consumer(m, i);
    int want = kept[i] - (i == fold ? 1 : 0); /* l1c1's constant stays */
    assert_int_equal(t->dims[0], want);
    assert_int_equal(px_model_param(cm, j)->value->dims[1], want);
  }
  int stem_c = (int)px_model_param(m, 0)->value->dims[0];
  assert_int_equal(px_model_param(cm, 0)->value->dims[0], stem_c - 1);
  for (int k = 0; k < nr; k++)
    assert_int_equal(px_model_param(cm, readers[k])->value->dims[1], stem_c - 1);

  /* the compact file: the masked shapes, reload, same logits */
  char path[256];
  snprintf(path, sizeof path, "/tmp/px_test_export_%d_%s.safetensors", (int)getpid(), arch);
  assert_int_equal(px_model_save(cm, NULL, path, NULL, 0), PX_OK);
  px_safetensors_t *f;
  assert_int_equal(px_safetensors_open(path, &f), PX_OK);
  for (int i = 0; i < px_model_num_params(cm); i++) {
    px_st_info_t info;
    const px_tensor_t *t = px_model_param(cm, i)->value;
    assert_int_equal(px_safetensors_find(f, px_model_param(cm, i)->name, &info), PX_OK);
    assert_int_equal(info.ndim, t->ndim);
    for (int d = 0; d < t->ndim; d++) assert_int_equal(info.shape[d], t->dims[d]);
  }
  px_safetensors_close(f);
  px_model_config_t fc;
  int32_t widths[256];
  assert_int_equal(px_model_file_config(path, &fc, widths, 256), PX_OK);
  assert_non_null(fc.widths);
  assert_string_equal(fc.arch, arch);
  fc.batch = BATCH;
  fc.height = fc.width = 32;
  px_model_t *lm;
  assert_int_equal(px_model_create(ops, &fc, &lm), PX_OK);
  assert_int_equal(px_model_load(lm, NULL, path), PX_OK);
  float ll[BATCH * 10];
  assert_int_equal(px_model_logits(lm, x, BATCH, ll), PX_OK);
  assert_memory_equal(ll, lc, sizeof ll);
  px_model_destroy(lm);
  /* a wrong width: the load names the tensor */
  widths[1] -= 1; /* layer1.0.conv1 */
  assert_int_equal(px_model_create(ops, &fc, &lm), PX_OK);
  assert_int_equal(px_model_load(lm, NULL, path), PX_ERR_MISMATCH);
  print_message("wrong width: %s\n", px_last_error());
  assert_non_null(strstr(px_last_error(), "layer1.0.conv1.weight"));
  px_model_destroy(lm);
  /* the compact model trains (fine-tuning): a step, then finite logits */
  {
    int32_t y[BATCH] = {1, 7};
    float loss;
    int64_t correct;
    assert_int_equal(px_model_train_step(cm, x, y, &loss, &correct), PX_OK);
    assert_true(isfinite(loss));
  }
  /* a dense model does not take a compact file */
  assert_int_equal(px_model_load(m, NULL, path), PX_ERR_MISMATCH);
  unlink(path);

  free(x);
  free(kept);
  px_model_destroy(cm);
  px_model_destroy(m);
  px_ops_destroy(ops);
}

static void compact_resnet20_same_logits(void **state) {
  (void)state;
  check_arch("resnet20", NULL);
}

static void compact_resnet18_same_logits(void **state) {
  (void)state;
  check_arch("resnet18", NULL);
}

static void compact_resnet50_bottleneck_same_logits(void **state) {
  (void)state;
  check_arch("resnet50", "layer2.1.conv2.weight");
}

/* An unpruned model compacts to itself. */
static void dense_model_compacts_to_same_size(void **state) {
  (void)state;
  px_ops_t *ops;
  assert_int_equal(px_ops_create(px_device_cpu(), 0, &ops), PX_OK);
  px_model_config_t cfg = {"resnet20", 1, 10, 1, 32, 32, NULL, 0, PX_PRECISION_FP32, NULL};
  px_model_t *m, *cm;
  assert_int_equal(px_model_create(ops, &cfg, &m), PX_OK);
  assert_int_equal(px_model_init_params(m, 3), PX_OK);
  assert_int_equal(px_model_compact(m, ops, 1, &cm), PX_OK);
  assert_int_equal(px_model_numel(cm), px_model_numel(m));
  px_model_destroy(cm);
  px_model_destroy(m);
  px_ops_destroy(ops);
}

/* Reads a whole file; caller frees. */
static char *slurp(const char *path, size_t *len) {
  char *b = px_test_read_file(path, len);
  assert_non_null(b);
  return b;
}

static int file_has(const char *b, size_t len, const char *s) {
  return memmem(b, len, s, strlen(s)) != NULL;
}

static void onnx_carries_the_input_contract(void **state) {
  (void)state;
  px_ops_t *ops;
  assert_int_equal(px_ops_create(px_device_cpu(), 0, &ops), PX_OK);
  px_model_config_t cfg = {"resnet20", 1, 10, 1, 32, 32, NULL, 0, PX_PRECISION_FP32, NULL};
  px_model_t *m;
  assert_int_equal(px_model_create(ops, &cfg, &m), PX_OK);
  assert_int_equal(px_model_init_params(m, 3), PX_OK);
  char path[256];
  snprintf(path, sizeof path, "/tmp/px_test_export_%d.onnx", (int)getpid());
  size_t len;
  char *b;

  /* Fashion-MNIST: raw 1x28x28 pixels, the preprocessing in the graph */
  px_onnx_info_t fm = {.dataset = "fashion-mnist", .source = "m.safetensors"};
  assert_int_equal(px_onnx_save(m, path, &fm), PX_OK);
  b = slurp(path, &len);
  assert_true(file_has(b, len, "preprocess.pad"));
  assert_true(file_has(b, len, "preprocess.sub_mean"));
  assert_true(file_has(b, len, "preprocess.div_std"));
  assert_true(file_has(b, len, "1x28x28"));
  assert_true(file_has(b, len, "raw Fashion-MNIST pixels in [0, 1]"));
  free(b);

  /* a data set we do not know: the normalised 32x32 tensor, said so */
  px_onnx_info_t syn = {.dataset = "synthetic"};
  assert_int_equal(px_onnx_save(m, path, &syn), PX_OK);
  b = slurp(path, &len);
  assert_false(file_has(b, len, "preprocess.pad"));
  assert_true(file_has(b, len, "none: the input is normalised"));
  assert_true(file_has(b, len, "1x32x32"));
  free(b);

  /* CIFAR-10's 3-channel images cannot feed a 1-channel model */
  unlink(path);
  px_onnx_info_t cifar = {.dataset = "cifar10"};
  assert_int_equal(px_onnx_save(m, path, &cifar), PX_ERR_INVALID);
  print_message("cifar10 into a 1-channel model: %s\n", px_last_error());
  assert_non_null(strstr(px_last_error(), "1 x 32 x 32"));
  assert_non_null(strstr(px_last_error(), "cifar10's 3 x 32 x 32"));
  assert_int_not_equal(access(path, F_OK), 0); /* nothing written */
  px_model_destroy(m);

  /* CIFAR-10: 3x32x32 R,G,B, normalised in the graph, nothing to pad */
  cfg.in_channels = 3;
  assert_int_equal(px_model_create(ops, &cfg, &m), PX_OK);
  assert_int_equal(px_model_init_params(m, 3), PX_OK);
  assert_int_equal(px_onnx_save(m, path, &cifar), PX_OK);
  b = slurp(path, &len);
  assert_false(file_has(b, len, "preprocess.pad"));
  assert_true(file_has(b, len, "preprocess.sub_mean"));
  assert_true(file_has(b, len, "3x32x32"));
  assert_true(file_has(b, len, "0.4914,0.4822,0.4465"));
  assert_true(file_has(b, len, "R,G,B"));
  free(b);
  unlink(path);
  px_model_destroy(m);
  px_ops_destroy(ops);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(dense_model_compacts_to_same_size),
      cmocka_unit_test(compact_resnet20_same_logits),
      cmocka_unit_test(compact_resnet18_same_logits),
      cmocka_unit_test(compact_resnet50_bottleneck_same_logits),
      cmocka_unit_test(onnx_carries_the_input_contract),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
