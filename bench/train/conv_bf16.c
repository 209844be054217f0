/* Potential of bf16 convolutions for CPU training: times
 * oneDNN 2.6's convolution primitives for the 3x3 layer shapes of ResNet-20
 * and ResNet-18 (32x32 inputs, batch 128 by default), forward,
 * backward-data and backward-weights, in f32 and with bf16 source, weights
 * and gradient of the destination (f32 destination / diff-weights, f32
 * accumulation), plus the f32 -> bf16 conversions a bf16 step would add
 * (activation in, weights in, diff-dst in). Layouts are oneDNN's choice
 * (format_tag_any), as in the engine. Prints one row per shape and the
 * implementation oneDNN picked, then RESULT lines with the whole-network
 * speedups (f32 time / bf16 time including conversions, higher is better),
 * also for bf16 forward and backward-data with f32 backward-weights ("hyb").
 * PX_BENCH_IMPLS=1 times every backward-weights implementation oneDNN offers
 * in bf16 and keeps the fastest.
 *   px_bench_conv_bf16 [--batch N] [--reps R] [--net resnet20|resnet18] [--cpu-time 0|1]
 *   (threads: OMP_NUM_THREADS; best of R runs after one warm-up) */
#include <dnnl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "px_bench_dnnl.h"

typedef struct {
  const char *net;
  int c_in, c_out, hw, stride, count; /* count: layers of this shape in the net */
} shape_t;

/* 3x3 convolutions, 32x32 input, CIFAR-style stems (ResNet-18 with a 3x3
 * stride-1 stem as the engine builds it). */
static const shape_t shapes[] = {
    {"resnet20", 16, 16, 32, 1, 6},  {"resnet20", 16, 32, 32, 2, 1}, {"resnet20", 32, 32, 16, 1, 5},
    {"resnet20", 32, 64, 16, 2, 1},  {"resnet20", 64, 64, 8, 1, 5},  {"resnet18", 64, 64, 32, 1, 4},
    {"resnet18", 64, 128, 32, 2, 1}, {"resnet18", 128, 128, 16, 1, 3}, {"resnet18", 128, 256, 16, 2, 1},
    {"resnet18", 256, 256, 8, 1, 3}, {"resnet18", 256, 512, 8, 2, 1}, {"resnet18", 512, 512, 4, 1, 3},
};

/* --cpu-time: the process's CPU time instead of the wall clock. With one
 * thread (OMP_NUM_THREADS=1) that is the work itself, which other programs
 * on a loaded machine do not inflate (with more threads it would count the
 * time spent spinning at barriers). */
static int use_cpu_time;

static double now_ms(void) {
  struct timespec t;
  clock_gettime(use_cpu_time ? CLOCK_PROCESS_CPUTIME_ID : CLOCK_MONOTONIC, &t);
  return t.tv_sec * 1e3 + t.tv_nsec / 1e6;
}

static dnnl_engine_t eng;
static dnnl_stream_t strm;

static dnnl_memory_t mem(const dnnl_memory_desc_t *md) {
  dnnl_memory_t m;
  CK(dnnl_memory_create(&m, md, eng, DNNL_MEMORY_ALLOCATE));
  void *p;
  CK(dnnl_memory_get_data_handle(m, &p));
  memset(p, 0, dnnl_memory_desc_get_size(md)); /* zeros: timing does not depend on values */
  return m;
}

static const dnnl_memory_desc_t *qmd(const_dnnl_primitive_desc_t pd, int arg) {
  return dnnl_primitive_desc_query_md(pd, dnnl_query_exec_arg_md, arg);
}

static const char *impl(const_dnnl_primitive_desc_t pd) {
  const char *s = NULL;
  CK(dnnl_primitive_desc_query(pd, dnnl_query_impl_info_str, 0, &s));
  return s;
}

/* Best-of-reps time of one primitive with its arguments (scratchpad added). */
static double time_prim(const_dnnl_primitive_desc_t pd, int n, const int *ids, int reps) {
  dnnl_exec_arg_t a[8];
  for (int i = 0; i < n; i++) a[i] = (dnnl_exec_arg_t){ids[i], mem(qmd(pd, ids[i]))};
  a[n] = (dnnl_exec_arg_t){DNNL_ARG_SCRATCHPAD, mem(qmd(pd, DNNL_ARG_SCRATCHPAD))};
  dnnl_primitive_t p;
  CK(dnnl_primitive_create(&p, pd));
  double best = 1e30;
  for (int r = 0; r < reps + 1; r++) { /* the first run warms up */
    double t0 = now_ms();
    CK(dnnl_primitive_execute(p, strm, n + 1, a));
    CK(dnnl_stream_wait(strm));
    double t = now_ms() - t0;
    if (r > 0 && t < best) best = t;
  }
  dnnl_primitive_destroy(p);
  for (int i = 0; i <= n; i++) dnnl_memory_destroy(a[i].memory);
  return best;
}

static double time_reorder(const dnnl_memory_desc_t *from, const dnnl_memory_desc_t *to, int reps) {
  dnnl_primitive_desc_t pd;
  CK(dnnl_reorder_primitive_desc_create(&pd, from, eng, to, eng, NULL));
  int ids[2] = {DNNL_ARG_FROM, DNNL_ARG_TO};
  double t = time_prim(pd, 2, ids, reps);
  dnnl_primitive_desc_destroy(pd);
  return t;
}

/* oneDNN's first backward-weights implementation for bf16 on AMX is not
 * always its fastest (brgconv's is slow for small spatial sizes in 2.6):
 * walk the implementations oneDNN offers and keep the fastest, as the
 * engine would do once per layer at creation. */
static dnnl_primitive_desc_t best_impl(const void *cd, const_dnnl_primitive_desc_t hint, int reps) {
  dnnl_primitive_desc_iterator_t it;
  CK(dnnl_primitive_desc_iterator_create(&it, (const_dnnl_op_desc_t)cd, NULL, eng, hint));
  dnnl_primitive_desc_t best = NULL;
  double best_t = 1e30;
  int wa[] = {DNNL_ARG_SRC, DNNL_ARG_DIFF_DST, DNNL_ARG_DIFF_WEIGHTS};
  do {
    dnnl_primitive_desc_t pd = dnnl_primitive_desc_iterator_fetch(it);
    if (strstr(impl(pd), "ref") || strstr(impl(pd), "gemm")) { /* reference code: never faster */
      dnnl_primitive_desc_destroy(pd);
      continue;
    }
    double t = time_prim(pd, 3, wa, reps);
    fprintf(stderr, "    bwd_w candidate %s: %.2f ms\n", impl(pd), t);
    if (t < best_t) {
      if (best) dnnl_primitive_desc_destroy(best);
      best = pd;
      best_t = t;
    } else {
      dnnl_primitive_desc_destroy(pd);
    }
  } while (dnnl_primitive_desc_iterator_next(it) == dnnl_success);
  dnnl_primitive_desc_iterator_destroy(it);
  return best;
}

typedef struct {
  double fwd, bwd_d, bwd_w, conv; /* ms */
  const char *impl;
} times_t;

/* The three primitives of one shape with src/weights/diff-dst in dt. */
static times_t time_shape(const shape_t *s, int batch, dnnl_data_type_t dt, int reps,
                          dnnl_memory_desc_t *x_out, dnnl_memory_desc_t *w_out,
                          dnnl_memory_desc_t *y_out) {
  const int oh = (s->hw + 2 - 3) / s->stride + 1;
  dnnl_dims_t xd = {batch, s->c_in, s->hw, s->hw}, wd = {s->c_out, s->c_in, 3, 3};
  dnnl_dims_t yd = {batch, s->c_out, oh, oh}, st = {s->stride, s->stride}, pad = {1, 1};
  dnnl_memory_desc_t x, w, y, yf, xf, wf;
  CK(dnnl_memory_desc_init_by_tag(&x, 4, xd, dt, dnnl_format_tag_any));
  CK(dnnl_memory_desc_init_by_tag(&w, 4, wd, dt, dnnl_format_tag_any));
  CK(dnnl_memory_desc_init_by_tag(&y, 4, yd, dt, dnnl_format_tag_any));
  CK(dnnl_memory_desc_init_by_tag(&yf, 4, yd, dnnl_f32, dnnl_format_tag_any));
  CK(dnnl_memory_desc_init_by_tag(&xf, 4, xd, dnnl_f32, dnnl_format_tag_any));
  CK(dnnl_memory_desc_init_by_tag(&wf, 4, wd, dnnl_f32, dnnl_format_tag_any));
  const dnnl_alg_kind_t alg = dnnl_convolution_direct;
  dnnl_convolution_desc_t cd;
  dnnl_primitive_desc_t fpd, dpd, wpd;
  times_t t;
  /* forward: dst f32 (what batch norm reads) */
  CK(dnnl_convolution_forward_desc_init(&cd, dnnl_forward_training, alg, &x, &w, NULL, &yf, st,
                                        pad, pad));
  CK(dnnl_primitive_desc_create(&fpd, &cd, NULL, eng, NULL));
  t.impl = impl(fpd);
  *x_out = *qmd(fpd, DNNL_ARG_SRC);
  *w_out = *qmd(fpd, DNNL_ARG_WEIGHTS);
  /* backward data: diff_src f32, diff_dst and weights in dt */
  CK(dnnl_convolution_backward_data_desc_init(&cd, alg, &xf, &w, &y, st, pad, pad));
  CK(dnnl_primitive_desc_create(&dpd, &cd, NULL, eng, fpd));
  *y_out = *qmd(dpd, DNNL_ARG_DIFF_DST);
  /* backward weights: src, diff_dst in dt, diff_weights f32 */
  CK(dnnl_convolution_backward_weights_desc_init(&cd, alg, &x, &wf, NULL, &y, st, pad, pad));
  if (dt == dnnl_bf16 && getenv("PX_BENCH_IMPLS")) wpd = best_impl(&cd, fpd, reps);
  else CK(dnnl_primitive_desc_create(&wpd, &cd, NULL, eng, fpd));
  int fa[] = {DNNL_ARG_SRC, DNNL_ARG_WEIGHTS, DNNL_ARG_DST};
  int da[] = {DNNL_ARG_DIFF_DST, DNNL_ARG_WEIGHTS, DNNL_ARG_DIFF_SRC};
  int wa[] = {DNNL_ARG_SRC, DNNL_ARG_DIFF_DST, DNNL_ARG_DIFF_WEIGHTS};
  t.fwd = time_prim(fpd, 3, fa, reps);
  t.bwd_d = time_prim(dpd, 3, da, reps);
  t.bwd_w = time_prim(wpd, 3, wa, reps);
  t.conv = t.fwd + t.bwd_d + t.bwd_w;
  if (dt == dnnl_bf16) fprintf(stderr, "  bwd_d %s, bwd_w %s\n", impl(dpd), impl(wpd));
  dnnl_primitive_desc_destroy(fpd);
  dnnl_primitive_desc_destroy(dpd);
  dnnl_primitive_desc_destroy(wpd);
  return t;
}

/* f32 -> bf16 conversions a bf16 step adds for one layer: its input
 * activation (f32 out of batch norm / ReLU), its weights (from the plain f32
 * master copy) and the gradient of its output (f32 out of batch norm's
 * backward), each into the layout the bf16 primitives want. */
static double time_conversions(const dnnl_memory_desc_t *x, const dnnl_memory_desc_t *w,
                               const dnnl_memory_desc_t *y, int reps) {
  dnnl_memory_desc_t xf = *x, yf = *y, wp;
  xf.data_type = dnnl_f32; /* same blocking, f32: the layout the f32 layer before would write */
  yf.data_type = dnnl_f32;
  CK(dnnl_memory_desc_init_by_tag(&wp, 4, w->dims, dnnl_f32, dnnl_oihw));
  return time_reorder(&xf, x, reps) + time_reorder(&wp, w, reps) + time_reorder(&yf, y, reps);
}

int main(int argc, char **argv) {
  int batch = 128, reps = 5;
  const char *only = NULL;
  for (int i = 1; i + 1 < argc; i += 2) {
    if (!strcmp(argv[i], "--batch")) batch = atoi(argv[i + 1]);
    else if (!strcmp(argv[i], "--net")) only = argv[i + 1];
    else if (!strcmp(argv[i], "--cpu-time")) use_cpu_time = atoi(argv[i + 1]);
    else if (!strcmp(argv[i], "--reps")) reps = atoi(argv[i + 1]);
    else {
      fprintf(stderr, "usage: %s [--batch N] [--reps R] [--net resnet20|resnet18] [--cpu-time 0|1]\n",
              argv[0]);
      return 2;
    }
  }
  if (batch < 1 || reps < 1) {
    fprintf(stderr, "--batch and --reps must be positive\n");
    return 2;
  }
  CK(dnnl_engine_create(&eng, dnnl_cpu, 0));
  CK(dnnl_stream_create(&strm, eng, dnnl_stream_default_flags));
  printf("%-9s %-15s %8s %8s %8s %8s %8s %8s %8s %7s %7s %7s\n", "net", "shape", "f32_fwd",
         "f32_bwdd", "f32_bwdw", "bf_fwd", "bf_bwdd", "bf_bwdw", "bf_conv", "x_conv", "x_all",
         "x_hyb");
  double tot_f[2] = {0, 0}, tot_b[2] = {0, 0}, tot_c[2] = {0, 0}, tot_h[2] = {0, 0};
  for (size_t i = 0; i < sizeof shapes / sizeof shapes[0]; i++) {
    const shape_t *s = &shapes[i];
    if (only && strcmp(only, s->net)) continue;
    dnnl_memory_desc_t x, w, y;
    times_t f = time_shape(s, batch, dnnl_f32, reps, &x, &w, &y);
    times_t b = time_shape(s, batch, dnnl_bf16, reps, &x, &w, &y);
    double cv = time_conversions(&x, &w, &y, reps);
    char name[32];
    snprintf(name, sizeof name, "%d>%d@%d/s%d", s->c_in, s->c_out, s->hw, s->stride);
    /* hybrid: bf16 forward and backward-data, f32 backward-weights on the f32 tensors */
    const double hyb = b.fwd + b.bwd_d + f.bwd_w + cv;
    printf("%-9s %-15s %8.2f %8.2f %8.2f %8.2f %8.2f %8.2f %8.2f %7.2f %7.2f %7.2f  [f32 %s | bf16 "
           "%s]\n",
           s->net, name, f.fwd, f.bwd_d, f.bwd_w, b.fwd, b.bwd_d, b.bwd_w, cv, f.conv / b.conv,
           f.conv / (b.conv + cv), f.conv / hyb, f.impl, b.impl);
    int k = strcmp(s->net, "resnet20") ? 1 : 0;
    tot_f[k] += s->count * f.conv;
    tot_b[k] += s->count * b.conv;
    tot_c[k] += s->count * cv;
    tot_h[k] += s->count * hyb;
  }
  for (int k = 0; k < 2; k++)
    if (tot_f[k] > 0)
      printf("%-9s all 3x3 layers: f32 %.1f ms, bf16 %.1f ms + conversions %.1f ms\n",
           k ? "resnet18" : "resnet20", tot_f[k], tot_b[k], tot_c[k]);
  for (int k = 0; k < 2; k++) {
    const char *n = k ? "resnet18" : "resnet20";
    if (tot_f[k] <= 0) continue;
    printf("RESULT %s_conv_bf16_speedup %.2f ratio\n", n, tot_f[k] / tot_b[k]);
    printf("RESULT %s_conv_bf16_speedup_with_conversions %.2f ratio\n", n,
           tot_f[k] / (tot_b[k] + tot_c[k]));
    printf("RESULT %s_conv_bf16_fwd_bwdd_f32_bwdw_speedup %.2f ratio\n", n, tot_f[k] / tot_h[k]);
  }
  dnnl_stream_destroy(strm);
  dnnl_engine_destroy(eng);
  return 0;
}
