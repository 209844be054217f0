/* Inference speed of a pruned model, dense (masked) vs compact, on our CPU
 * engine: the model is initialised (seed 1, BN statistics randomised so that
 * nothing is trivially zero), its coupled channel pairs projected at keep
 * KEEP as H-SADMM does (px_prune_project_coupled), then compacted
 * (px_model_compact). Measures images/s at batch 128 (forward only, logits
 * to the host) and the median latency at batch 1, dense and compact, and
 * saves both models to OUT_DIR (for run.sh's PyTorch side).
 *   px_bench_infer ARCH IN_CHANNELS KEEP OUT_DIR [ITERS]
 * Prints rows and RESULT compact_speedup_<arch> (compact/dense images/s at
 * batch 128, higher is better) and compact_latency_ratio_<arch> (compact /
 * dense latency at batch 1, lower is better). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "prunex/export.h"
#include "prunex/prune.h"
#include "bench_project.h"
#include "../px_bench_util.h"

static int die(const char *what) { return pxb_fail("px_bench_infer", what); }

/* images/s at the model's batch over iters forward passes (after one warm-up) */
static double throughput(px_model_t *m, const float *x, float *logits, int iters) {
  int B = px_model_config(m)->batch;
  if (px_model_logits(m, x, B, logits) < 0) return -1;
  double t0 = px__now();
  for (int i = 0; i < iters; i++)
    if (px_model_logits(m, x, B, logits) < 0) return -1;
  return iters * (double)B / (px__now() - t0);
}

static double latency_ms(px_model_t *m, const float *x, float *logits, int iters) {
  double *t = malloc((size_t)iters * sizeof *t);
  if (px_model_logits(m, x, 1, logits) < 0) return -1;
  for (int i = 0; i < iters; i++) {
    double t0 = px__now();
    if (px_model_logits(m, x, 1, logits) < 0) return -1;
    t[i] = 1e3 * (px__now() - t0);
  }
  qsort(t, (size_t)iters, sizeof *t, pxb_cmp_double);
  double med = t[iters / 2];
  free(t);
  return med;
}

int main(int argc, char **argv) {
  if (argc < 5) {
    fprintf(stderr, "usage: px_bench_infer ARCH IN_CHANNELS KEEP OUT_DIR [ITERS]\n");
    return 2;
  }
  const char *arch = argv[1], *out = argv[4];
  int in_c = atoi(argv[2]), iters = argc > 5 ? atoi(argv[5]) : 10;
  double keep = atof(argv[3]);
  px_ops_t *ops;
  if (px_ops_create(px_device_cpu(), 0, &ops) < 0) return die("ops");
  px_model_config_t c128 = {arch, in_c, 10, 128, 32, 32, NULL, 0, PX_PRECISION_FP32, NULL}, c1 = c128;
  c1.batch = 1;
  px_model_t *d128, *d1, *k128, *k1;
  if (px_model_create(ops, &c128, &d128) < 0 || px_model_init_params(d128, 1) < 0)
    return die("dense model");
  /* randomised BN statistics, then the coupled projection */
  uint64_t s = 12345;
  for (int i = 0; i < px_model_num_buffers(d128); i++) {
    const px_model_buffer_t *b = px_model_buffer(d128, i);
    float *v = (float *)b->value->data; /* CPU model: host memory */
    for (size_t j = 0; j < px_tensor_numel(b->value); j++) {
      s = s * 6364136223846793005ull + 1442695040888963407ull;
      double u = (double)(s >> 11) * 0x1.0p-53;
      v[j] = strstr(b->name, "running_var") ? (float)(0.5 + u) : (float)(0.2 * (u - 0.5));
    }
  }
  if (px_bench_project_coupled(d128, keep) < 0) return die("projection");
  char dense_path[1024], compact_path[1024];
  snprintf(dense_path, sizeof dense_path, "%s/%s.safetensors", out, arch);
  snprintf(compact_path, sizeof compact_path, "%s/%s.compact.safetensors", out, arch);
  if (px_model_save(d128, NULL, dense_path, NULL, 0) < 0) return die("save");
  if (px_model_compact(d128, ops, 128, &k128) < 0 || px_model_compact(d128, ops, 1, &k1) < 0)
    return die("compact");
  if (px_model_save(k128, NULL, compact_path, NULL, 0) < 0) return die("save");
  if (px_model_create(ops, &c1, &d1) < 0 || px_model_load(d1, NULL, dense_path) < 0)
    return die("dense batch 1");
  size_t per = (size_t)in_c * 32 * 32;
  float *x = malloc(128 * per * sizeof *x), *lg = malloc(128 * 10 * sizeof *lg);
  for (size_t i = 0; i < 128 * per; i++) {
    s = s * 6364136223846793005ull + 1442695040888963407ull;
    x[i] = (float)((double)(s >> 11) * 0x1.0p-53 - 0.5);
  }
  /* alternate dense and compact, best of two rounds each */
  double tp_d = 0, tp_k = 0, lat_d = 1e30, lat_k = 1e30;
  for (int r = 0; r < 2; r++) {
    double a = throughput(d128, x, lg, iters), b = throughput(k128, x, lg, iters);
    double la = latency_ms(d1, x, lg, 5 * iters), lb = latency_ms(k1, x, lg, 5 * iters);
    if (a < 0 || b < 0 || la < 0 || lb < 0) return die("forward");
    if (a > tp_d) tp_d = a;
    if (b > tp_k) tp_k = b;
    if (la < lat_d) lat_d = la;
    if (lb < lat_k) lat_k = lb;
  }
  printf("%-9s keep %.2f  params %zu -> %zu  batch128 %.1f -> %.1f img/s  batch1 %.2f -> %.2f ms  (%s)\n",
         arch, keep, px_model_numel(d128), px_model_numel(k128), tp_d, tp_k, lat_d, lat_k,
         px_ops_describe(ops));
  printf("ROW %s ours %zu %zu %.2f %.2f %.4f %.4f\n", arch, px_model_numel(d128),
         px_model_numel(k128), tp_d, tp_k, lat_d, lat_k);
  printf("RESULT compact_speedup_%s %.2f ratio\n", arch, tp_k / tp_d);
  printf("RESULT compact_latency_ratio_%s %.2f ratio\n", arch, lat_k / lat_d);
  free(x);
  free(lg);
  px_model_destroy(k1);
  px_model_destroy(k128);
  px_model_destroy(d1);
  px_model_destroy(d128);
  px_ops_destroy(ops);
  return 0;
}
