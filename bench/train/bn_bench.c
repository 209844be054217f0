/* The training batch norm per call: px_batchnorm_forward_train then
 * px_batchnorm_backward, batch 128.
 *
 * CPU engine (the default): ResNet-20's three map shapes on the
 * nChw16c layout a 1x1 convolution gives them, ReLU fused (`--relu 0`:
 * without). Prints the best wall and CPU time of each over `--reps` calls
 * and a hash of the outputs (y, dx, dscale, dshift), so runs on other
 * thread counts can be compared bit for bit. Build it against another
 * build's library to compare two batch norms (docs/performance.md, "CPU
 * training throughput").
 *
 * `--device cuda`: ResNet-50's batch-norm shapes on GPU 0 in the
 * activation format of `--precision` (NHWC bf16 or f32), each with the ReLU
 * fused where the network fuses it; the best wall time of each call (the
 * stream synchronised), the bandwidth its minimum traffic makes of it (the
 * forward 3 activation-sized passes, the backward 5), the outputs' hash
 * (the same on every run: the kernels are deterministic), and the sum over
 * the network's 53 batch norms, the figure the profile's px__bn_nhwc_*
 * kernels give per step.
 *
 *   px_bench_bn [--threads N] [--reps N] [--relu 0|1] [--device cpu|cuda]
 *               [--precision bf16|fp32] */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "prunex/ops.h"
#include "prunex/ops_internal.h"
#include "prunex/tensor.h"
#include "../px_bench_util.h"

#define PROG "px_bench_bn"
enum { NT = 13 }; /* x y dy dx mean var ws scale shift rmean rvar dscale dshift */

/* t = spec's shape, allocated; filled with a fixed pattern of amplitude amp
 * about 0.5 unless amp is 0. Returns 0, or 1 after printing the error. */
static int make(px_tensor_t *t, const px_tensor_t *spec, float amp) {
  *t = *spec;
  t->data = NULL;
  t->flags = 0;
  if (!t->nbytes) return 0;
  if (px_tensor_alloc(t, PROG) != PX_OK) return pxb_fail(PROG, "alloc");
  if (amp == 0.0f) return 0;
  const size_t n = px_tensor_numel(t);
  float *h = malloc(n * sizeof *h);
  if (!h) return pxb_fail(PROG, "host buffer");
  for (size_t i = 0; i < n; i++) h[i] = amp * (float)((i * 2654435761u) % 1000) / 1000.0f + 0.5f;
  const int bad = px_tensor_copy_from_host(t, h, px_tensor_plain_bytes(t)) != PX_OK;
  free(h);
  return bad ? pxb_fail(PROG, "upload") : 0;
}

/* FNV-1a over the host copies of ts[0..n). */
static uint64_t outputs_hash(px_tensor_t *const *ts, int n) {
  uint64_t h = 1469598103934665603ull;
  for (int o = 0; o < n; o++) {
    const size_t nb = px_tensor_plain_bytes(ts[o]);
    unsigned char *b = malloc(nb);
    if (!b || px_tensor_copy_to_host(ts[o], b, nb) != PX_OK) {
      free(b);
      return 0;
    }
    for (size_t i = 0; i < nb; i++) h = (h ^ b[i]) * 1099511628211ull;
    free(b);
  }
  return h;
}

/* The activation spec of a [128, c, hw, hw] batch norm: on the CPU the
 * layout a 1x1 convolution hands it, on CUDA the context's format. */
static int act_spec(px_ops_t *ops, int cuda, px_precision_t prec, int64_t c, int64_t hw,
                    px_tensor_t *xs) {
  px_tensor_t src;
  if (cuda) {
    if (px_tensor_init4(xs, px_device_cuda(0), 128, c, hw, hw) != PX_OK ||
        px_ops_act_format(ops, prec, xs) != PX_OK)
      return pxb_fail(PROG, "activation format");
    return 0;
  }
  if (px_tensor_init4(&src, px_device_cpu(), 128, 8, hw, hw) != PX_OK) return pxb_fail(PROG, "spec");
  px_conv2d_params_t cp = {.c_out = (int32_t)c, .kh = 1, .kw = 1, .stride_h = 1, .stride_w = 1};
  px_conv2d_t *conv;
  if (px_conv2d_create(ops, &src, &cp, &conv) != PX_OK) return pxb_fail(PROG, "conv");
  px_conv2d_y_spec(conv, xs);
  px_conv2d_destroy(conv);
  return 0;
}

/* One shape: prints its line; *ms gets the best forward + backward wall ms. */
static int one_shape(px_ops_t *ops, int cuda, px_precision_t prec, int64_t c, int64_t hw, int relu,
                     int reps, double *ms) {
  px_tensor_t xs, cs, wss, t[NT];
  px_tensor_t *x = &t[0], *y = &t[1], *dy = &t[2], *dx = &t[3], *m = &t[4], *v = &t[5],
              *ws = &t[6], *sc = &t[7], *sf = &t[8], *rm = &t[9], *rv = &t[10], *ds = &t[11],
              *db = &t[12];
  if (act_spec(ops, cuda, prec, c, hw, &xs)) return 1;
  px_batchnorm_params_t bp = {.eps = 1e-5f, .momentum = 0.1f, .fuse_relu = relu};
  px_batchnorm_t *bn;
  if (px_batchnorm_create(ops, &xs, &bp, &bn) != PX_OK) return pxb_fail(PROG, "batch norm");
  px_batchnorm_c_spec(bn, &cs);
  px_batchnorm_ws_spec(bn, &wss);
  memset(t, 0, sizeof t);
  const px_tensor_t *specs[NT] = {&xs, &xs, &xs, &xs, &cs, &cs, &wss, &cs, &cs, &cs, &cs, &cs, &cs};
  const float amps[NT] = {4, 0, 1, 0, 0, 0, 0, 1, 0.1f, 0, 1, 0, 0};
  int rc = 0;
  for (int i = 0; i < NT && !rc; i++) rc = make(&t[i], specs[i], amps[i]);
  px_tensor_t *wsp = wss.nbytes ? ws : NULL;
  double best[4] = {1e9, 1e9, 1e9, 1e9}; /* forward wall, CPU; backward wall, CPU */
  for (int r = 0; r < reps && !rc; r++) {
    const double t0 = px__now(), c0 = pxb_cpu_s();
    rc = px_batchnorm_forward_train(bn, y, m, v, wsp, x, sc, sf, rm, rv) != PX_OK;
    rc = rc || (cuda && px_ops_sync(ops) != PX_OK);
    const double t1 = px__now(), c1 = pxb_cpu_s();
    rc = rc || px_batchnorm_backward(bn, dx, ds, db, dy, x, sc, sf, m, v, wsp) != PX_OK;
    rc = rc || (cuda && px_ops_sync(ops) != PX_OK);
    const double t2 = px__now(), c2 = pxb_cpu_s();
    const double got[4] = {t1 - t0, c1 - c0, t2 - t1, c2 - c1};
    for (int k = 0; k < 4; k++)
      if (got[k] < best[k]) best[k] = got[k];
  }
  if (rc) rc = pxb_fail(PROG, "batch norm call");
  px_tensor_t *outs[4] = {y, dx, ds, db};
  *ms = 1e3 * (best[0] + best[2]);
  if (!rc && !cuda)
    printf("%lld x %lld x %lld, relu %d: forward %.3f ms (CPU %.3f), backward %.3f ms (CPU %.3f), "
           "outputs %016llx\n", (long long)c, (long long)hw, (long long)hw, relu, 1e3 * best[0],
           1e3 * best[1], 1e3 * best[2], 1e3 * best[3], (unsigned long long)outputs_hash(outs, 4));
  if (!rc && cuda) /* x.nbytes: one activation-sized pass */
    printf("%lld x %lld x %lld, relu %d: forward %.3f ms (%.0f GB/s), backward %.3f ms "
           "(%.0f GB/s), outputs %016llx\n", (long long)c, (long long)hw, (long long)hw, relu,
           1e3 * best[0], 3e-9 * (double)xs.nbytes / best[0], 1e3 * best[2],
           5e-9 * (double)xs.nbytes / best[2], (unsigned long long)outputs_hash(outs, 4));
  for (int i = 0; i < NT; i++) px_tensor_release(&t[i]);
  px_batchnorm_destroy(bn);
  return rc;
}

/* ResNet-50's batch norms at batch 128 (torchvision's layout, as
 * nn/model.c builds it): channels, map side, ReLU fused, how many. */
static const struct {
  int64_t c, hw;
  int relu, layers;
} rn50[] = {{64, 112, 1, 1},  {64, 56, 1, 6},   {256, 56, 0, 4},  {128, 56, 1, 1},
            {128, 28, 1, 7},  {512, 28, 0, 5},  {256, 28, 1, 1},  {256, 14, 1, 11},
            {1024, 14, 0, 7}, {512, 14, 1, 1},  {512, 7, 1, 5},   {2048, 7, 0, 4}};

static int run_cuda(px_precision_t prec, int reps) {
  px_ops_t *ops;
  if (px_ops_create(px_device_cuda(0), 0, &ops) != PX_OK) return pxb_fail(PROG, "CUDA ops");
  printf("%s: ResNet-50's batch norms, batch 128, %s, best of %d calls; %s\n", PROG,
         prec == PX_PRECISION_BF16 ? "bf16" : "fp32", reps, px_ops_describe(ops));
  double step = 0.0, ms = 0.0;
  int rc = 0, layers = 0;
  for (size_t s = 0; s < sizeof rn50 / sizeof rn50[0] && !rc; s++) {
    rc = one_shape(ops, 1, prec, rn50[s].c, rn50[s].hw, rn50[s].relu, reps, &ms);
    step += ms * rn50[s].layers;
    layers += rn50[s].layers;
  }
  if (!rc) {
    printf("ResNet-50 step, %d batch norms forward + backward: %.3f ms\n", layers, step);
    printf("RESULT bn_resnet50_%s_step_ms %.3f\n", prec == PX_PRECISION_BF16 ? "bf16" : "fp32",
           step);
  }
  px_ops_destroy(ops);
  return rc;
}

static int usage(void) {
  fprintf(stderr, "usage: %s [--threads N] [--reps N] [--relu 0|1] [--device cpu|cuda] "
                  "[--precision bf16|fp32]\n", PROG);
  return 2;
}

int main(int argc, char **argv) {
  int threads = 1, reps = 30, relu = 1, cuda = 0;
  px_precision_t prec = PX_PRECISION_BF16;
  for (int i = 1; i < argc; i++) {
    const char *val = i + 1 < argc ? argv[i + 1] : "";
    if (!strcmp(argv[i], "--device") && (!strcmp(val, "cpu") || !strcmp(val, "cuda"))) {
      cuda = !strcmp(val, "cuda");
      i++;
      continue;
    }
    if (!strcmp(argv[i], "--precision") && (!strcmp(val, "bf16") || !strcmp(val, "fp32"))) {
      prec = !strcmp(val, "bf16") ? PX_PRECISION_BF16 : PX_PRECISION_FP32;
      i++;
      continue;
    }
    int *dst = !strcmp(argv[i], "--threads") ? &threads
               : !strcmp(argv[i], "--reps")  ? &reps
               : !strcmp(argv[i], "--relu")  ? &relu
                                             : NULL;
    char *end = NULL;
    long v = dst && i + 1 < argc ? strtol(val, &end, 10) : -1;
    if (!dst || !end || *end || v < 0 || v > 1000000 || (dst != &relu && v < 1)) return usage();
    *dst = (int)v;
    i++;
  }
  if (cuda) return run_cuda(prec, reps);
  px_ops_t *ops;
  if (px_ops_create(px_device_cpu(), threads, &ops) != PX_OK) return pxb_fail(PROG, "ops");
  printf("%s: batch 128, %d thread(s), best of %d calls; %s\n", PROG, threads, reps,
         px_ops_describe(ops));
  const int64_t shapes[3][2] = {{16, 28}, {32, 14}, {64, 7}};
  int rc = 0;
  double ms;
  for (int s = 0; s < 3 && !rc; s++)
    rc = one_shape(ops, 0, PX_PRECISION_FP32, shapes[s][0], shapes[s][1], !!relu, reps, &ms);
  px_ops_destroy(ops);
  return rc;
}
