/* Shrink/expand throughput beside memcpy.
 *
 * Builds the conv layers of a CIFAR-style ResNet-18 (3x3 stem, 11.2 M conv
 * weights), projects them onto 50% channel keep (the default; --filter,
 * --channel, --shape change it), freezes a pack plan and times, alternating
 * in one loop, (a) shrink of all layers into the packed buffer, (b) expand
 * back into zero-filled full tensors, (c) a plain memcpy of the packed byte
 * count between two buffers. Throughput is the packed bytes per second, the
 * bytes that cross the inter-node link. Ends with
 *   RESULT shrink_vs_memcpy <ratio>   (pack+unpack throughput / memcpy, higher is better)
 * --demo prints the per-layer table too (used by `make run`). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "prunex/prune.h"
#include "prunex/prune_internal.h"
#include "px_bench_util.h"

static double median(double *v, int n) {
  qsort(v, (size_t)n, sizeof *v, pxb_cmp_double);
  return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

/* Conv layers of ResNet-18 with a 3x3 stem (the CIFAR variant). */
static int resnet18_convs(px_param_desc_t *d, char names[][32]) {
  int n = 0, cin = 64;
  snprintf(names[n], 32, "conv1");
  d[n] = (px_param_desc_t){names[n], PX_PARAM_CONV, {64, 3, 3, 3}, 0, NULL};
  n++;
  int widths[4] = {64, 128, 256, 512};
  for (int l = 0; l < 4; l++) {
    int w = widths[l];
    for (int b = 0; b < 2; b++) {
      int in = b == 0 ? cin : w;
      snprintf(names[n], 32, "layer%d.%d.conv1", l + 1, b);
      d[n] = (px_param_desc_t){names[n], PX_PARAM_CONV, {w, in, 3, 3}, 0, NULL};
      n++;
      snprintf(names[n], 32, "layer%d.%d.conv2", l + 1, b);
      d[n] = (px_param_desc_t){names[n], PX_PARAM_CONV, {w, w, 3, 3}, 0, NULL};
      n++;
      if (b == 0 && in != w) {
        snprintf(names[n], 32, "layer%d.%d.downsample", l + 1, b);
        d[n] = (px_param_desc_t){names[n], PX_PARAM_CONV, {w, in, 1, 1}, 0, NULL};
        n++;
      }
    }
    cin = w;
  }
  return n;
}

static uint64_t rng_state = 0x853c49e6748fea9bull;
static float rnd(void) {
  rng_state ^= rng_state >> 12;
  rng_state ^= rng_state << 25;
  rng_state ^= rng_state >> 27;
  return (float)((rng_state * 0x2545F4914F6CDD1Dull) >> 40) / 16777216.0f - 0.5f;
}

int main(int argc, char **argv) {
  px_prune_keep_t keep = {1.0, 0.5, 1.0, 0, 0, 0};
  int reps = 30, demo = 0;
  for (int i = 1; i < argc; i++) {
    if (!strcmp(argv[i], "--demo")) demo = 1;
    else if (!strcmp(argv[i], "--reps") && i + 1 < argc) reps = atoi(argv[++i]);
    else if (!strcmp(argv[i], "--filter") && i + 1 < argc) keep.filter_keep = atof(argv[++i]);
    else if (!strcmp(argv[i], "--channel") && i + 1 < argc) keep.channel_keep = atof(argv[++i]);
    else if (!strcmp(argv[i], "--shape") && i + 1 < argc) keep.shape_keep = atof(argv[++i]);
    else {
      fprintf(stderr,
              "usage: %s [--demo] [--reps N] [--filter F] [--channel C] [--shape S]\n", argv[0]);
      return 2;
    }
  }
  if (reps < 1 || px_prune_keep_validate(&keep) < 0) {
    fprintf(stderr, "px_bench_prune: %s\n", reps < 1 ? "--reps must be >= 1" : px_last_error());
    return 2;
  }

  px_param_desc_t d[32];
  char names[32][32];
  int n = resnet18_convs(d, names);
  float *w[32], *y[32];
  uint8_t *mask[32];
  size_t dense = 0;
  for (int i = 0; i < n; i++) {
    size_t ne = px_conv_numel(d[i].shape);
    dense += ne;
    w[i] = malloc(ne * sizeof(float));
    y[i] = malloc(ne * sizeof(float));
    mask[i] = malloc(px_prune_mask_size(d[i].shape));
    if (!w[i] || !y[i] || !mask[i]) {
      fprintf(stderr, "px_bench_prune: out of memory\n");
      return 1;
    }
    for (size_t j = 0; j < ne; j++) w[i][j] = rnd();
    if (px_prune_project(w[i], d[i].shape, &keep, mask[i], NULL, 0) < 0) {
      fprintf(stderr, "px_bench_prune: projection of %s failed: %s\n", d[i].name, px_last_error());
      return 1;
    }
  }
  px_pack_plan_t *plan;
  if (px_pack_plan_create(d, n, 0, &plan) < 0 ||
      px_pack_plan_set_masks(plan, (const uint8_t *const *)mask) < 0) {
    fprintf(stderr, "px_bench_prune: pack plan: %s\n", px_last_error());
    return 1;
  }
  px_pack_plan_freeze(plan);
  size_t packed = px_pack_packed_bytes(plan);

  printf("structured pruning of ResNet-18 conv layers (CIFAR stem): keep filter %.2f, "
         "channel %.2f, shape %.2f\n", keep.filter_keep, keep.channel_keep, keep.shape_keep);
  if (demo) {
    printf("%-22s %-18s %8s %8s %12s %12s\n", "layer", "shape", "K_out", "K_in", "dense B",
           "packed B");
    for (int i = 0; i < n; i++) {
      const int32_t *ko, *ki;
      int32_t no, ni;
      px_pack_param_sets(plan, i, &ko, &no, &ki, &ni);
      char shp[32];
      snprintf(shp, sizeof shp, "%dx%dx%dx%d", d[i].shape.c_out, d[i].shape.c_in, d[i].shape.kh,
               d[i].shape.kw);
      printf("%-22s %-18s %8d %8d %12zu %12zu\n", d[i].name, shp, no, ni,
             px_conv_numel(d[i].shape) * 4, (size_t)no * ni * d[i].shape.kh * d[i].shape.kw * 4);
    }
  }
  printf("dense %.2f MB, packed %.2f MB (%.1f%%), %d bucket(s) of at most %zu MB\n",
         dense * 4 / 1e6, packed / 1e6, 100.0 * packed / (dense * 4.0), px_pack_num_buckets(plan),
         px_pack_bucket_bytes(plan) >> 20);

  float *src = malloc(packed), *dst = malloc(packed);
  memset(src, 1, packed);
  memset(dst, 0, packed);
  double *ts = malloc(3 * sizeof(double) * (size_t)reps);
  double *te = ts + reps, *tm = te + reps;
  /* one untimed round to fault the pages in */
  px_pack_shrink(plan, (const float *const *)w);
  px_pack_expand(plan, y);
  memcpy(dst, src, packed);
  for (int r = 0; r < reps; r++) {
    double t0 = px__now();
    px_pack_shrink(plan, (const float *const *)w);
    double t1 = px__now();
    px_pack_expand(plan, y);
    double t2 = px__now();
    memcpy(dst, src, packed);
    double t3 = px__now();
    ts[r] = t1 - t0;
    te[r] = t2 - t1;
    tm[r] = t3 - t2;
  }
  /* the check that the timed work was real: expand(shrink(w)) == w */
  for (int i = 0; i < n; i++)
    if (memcmp(w[i], y[i], px_conv_numel(d[i].shape) * sizeof(float)) != 0) {
      fprintf(stderr, "px_bench_prune: expand(shrink(w)) != w for %s\n", d[i].name);
      return 1;
    }
  double s = median(ts, reps), e = median(te, reps), m = median(tm, reps);
  double gb = packed / 1e9;
  printf("%-10s %10s %10s   (median of %d, single thread)\n", "op", "ms", "GB/s", reps);
  printf("%-10s %10.3f %10.2f\n", "shrink", s * 1e3, gb / s);
  printf("%-10s %10.3f %10.2f\n", "expand", e * 1e3, gb / e);
  printf("%-10s %10.3f %10.2f\n", "memcpy", m * 1e3, gb / m);
  printf("RESULT shrink_gbps %.2f GB/s\n", gb / s);
  printf("RESULT expand_gbps %.2f GB/s\n", gb / e);
  printf("RESULT memcpy_gbps %.2f GB/s\n", gb / m);
  printf("RESULT shrink_vs_memcpy %.3f ratio\n", (2 * gb / (s + e)) / (gb / m));

  free(ts);
  free(src);
  free(dst);
  for (int i = 0; i < n; i++) {
    free(w[i]);
    free(y[i]);
    free(mask[i]);
  }
  px_pack_plan_destroy(plan);
  return 0;
}
