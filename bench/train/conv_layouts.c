/* Which activation layout oneDNN 2.6 runs a narrow convolution fast in
 * (compact training): times the forward, backward-data and
 * backward-weights primitives (f32, 3x3, stride 1, padding 1) of the layer
 * shapes a compact ResNet-20 has on Fashion-MNIST (32x32 maps, channel
 * counts of 8, 16, 32, 64 and odd ones), with source and destination in
 * channels-last (nhwc), nChw8c and nChw16c, and weights in the layout
 * oneDNN picks for each primitive (format_tag_any), as the engine does
 * (nn/cpu/cpu_conv.c). Prints per shape and layout the milliseconds of each
 * direction (best of R after a warm-up; process CPU time with --cpu-time 1,
 * which other programs on a loaded machine do not inflate at one thread)
 * and the implementation oneDNN picked ("ref:any" is its reference code).
 *   px_bench_conv_layouts [--batch N] [--reps R] [--cpu-time 0|1]
 *   (threads: OMP_NUM_THREADS) */
#include <dnnl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "px_bench_dnnl.h"

typedef struct {
  int c_in, c_out, hw;
} shape_t;

static const shape_t shapes[] = {{8, 8, 32},   {8, 16, 32},  {16, 8, 32}, {16, 16, 32},
                                 {16, 16, 16}, {32, 32, 16}, {24, 24, 16}, {32, 32, 8},
                                 {64, 64, 8},  {29, 13, 16}};
static const struct {
  const char *name;
  dnnl_format_tag_t tag;
} layouts[] = {{"nhwc", dnnl_nhwc}, {"nChw8c", dnnl_nChw8c}, {"nChw16c", dnnl_nChw16c}};

static int use_cpu_time;
static dnnl_engine_t eng;
static dnnl_stream_t strm;

static double now_ms(void) {
  struct timespec t;
  clock_gettime(use_cpu_time ? CLOCK_PROCESS_CPUTIME_ID : CLOCK_MONOTONIC, &t);
  return t.tv_sec * 1e3 + t.tv_nsec / 1e6;
}

static dnnl_memory_t mem(const dnnl_memory_desc_t *md) {
  dnnl_memory_t m;
  CK(dnnl_memory_create(&m, md, eng, DNNL_MEMORY_ALLOCATE));
  void *p;
  CK(dnnl_memory_get_data_handle(m, &p));
  size_t n = dnnl_memory_desc_get_size(md) / sizeof(float);
  for (size_t i = 0; i < n; i++) ((float *)p)[i] = (float)((i * 7919) % 13) / 13.0f - 0.5f;
  return m;
}

static const char *impl(const_dnnl_primitive_desc_t pd) {
  const char *s = "?";
  CK(dnnl_primitive_desc_query(pd, dnnl_query_impl_info_str, 0, &s));
  return s;
}

/* Best of reps milliseconds of p on args; a reference primitive (seconds
 * a call) runs once after the warm-up. */
static double best(dnnl_primitive_t p, const dnnl_exec_arg_t *args, int reps, int slow) {
  double b = 1e30;
  for (int r = 0; r <= (slow ? 1 : reps); r++) {
    double t0 = now_ms();
    CK(dnnl_primitive_execute(p, strm, 3, args));
    CK(dnnl_stream_wait(strm));
    double t = now_ms() - t0;
    if (r > 0 && t < b) b = t;
  }
  return b;
}

static void run(int n, const shape_t *s, int li, int reps) {
  dnnl_dims_t sd = {n, s->c_in, s->hw, s->hw}, wd = {s->c_out, s->c_in, 3, 3};
  dnnl_dims_t dd = {n, s->c_out, s->hw, s->hw}, st = {1, 1}, pad = {1, 1};
  dnnl_memory_desc_t x, w, y;
  CK(dnnl_memory_desc_init_by_tag(&x, 4, sd, dnnl_f32, layouts[li].tag));
  CK(dnnl_memory_desc_init_by_tag(&y, 4, dd, dnnl_f32, layouts[li].tag));
  CK(dnnl_memory_desc_init_by_tag(&w, 4, wd, dnnl_f32, dnnl_format_tag_any));
  const dnnl_alg_kind_t alg = dnnl_convolution_direct;
  dnnl_convolution_desc_t cf, cb, cw;
  CK(dnnl_convolution_forward_desc_init(&cf, dnnl_forward_training, alg, &x, &w, NULL, &y, st, pad,
                                        pad));
  CK(dnnl_convolution_backward_data_desc_init(&cb, alg, &x, &w, &y, st, pad, pad));
  CK(dnnl_convolution_backward_weights_desc_init(&cw, alg, &x, &w, NULL, &y, st, pad, pad));
  dnnl_primitive_desc_t pf, pb, pw;
  CK(dnnl_primitive_desc_create(&pf, &cf, NULL, eng, NULL));
  CK(dnnl_primitive_desc_create(&pb, &cb, NULL, eng, pf));
  CK(dnnl_primitive_desc_create(&pw, &cw, NULL, eng, pf));
  dnnl_memory_t mx = mem(&x), my = mem(&y), mdx = mem(&x);
  dnnl_memory_t mw = mem(dnnl_primitive_desc_query_md(pf, dnnl_query_weights_md, 0));
  dnnl_memory_t mbw = mem(dnnl_primitive_desc_query_md(pb, dnnl_query_weights_md, 0));
  dnnl_memory_t mdw = mem(dnnl_primitive_desc_query_md(pw, dnnl_query_diff_weights_md, 0));
  dnnl_primitive_t f, b, g;
  CK(dnnl_primitive_create(&f, pf));
  CK(dnnl_primitive_create(&b, pb));
  CK(dnnl_primitive_create(&g, pw));
  const dnnl_exec_arg_t af[3] = {{DNNL_ARG_SRC, mx}, {DNNL_ARG_WEIGHTS, mw}, {DNNL_ARG_DST, my}};
  const dnnl_exec_arg_t ab[3] = {
      {DNNL_ARG_DIFF_DST, my}, {DNNL_ARG_WEIGHTS, mbw}, {DNNL_ARG_DIFF_SRC, mdx}};
  const dnnl_exec_arg_t aw[3] = {
      {DNNL_ARG_SRC, mx}, {DNNL_ARG_DIFF_DST, my}, {DNNL_ARG_DIFF_WEIGHTS, mdw}};
  const char *i1 = impl(pf), *i2 = impl(pb), *i3 = impl(pw);
  double t1 = best(f, af, reps, !strcmp(i1, "ref:any"));
  double t2 = best(b, ab, reps, !strcmp(i2, "ref:any"));
  double t3 = best(g, aw, reps, !strcmp(i3, "ref:any"));
  printf("%3d>%-3d @%-2d %-8s %9.3f %9.3f %9.3f %9.3f  %s / %s / %s\n", s->c_in, s->c_out, s->hw,
         layouts[li].name, t1, t2, t3, t1 + t2 + t3, i1, i2, i3);
  dnnl_primitive_destroy(f), dnnl_primitive_destroy(b), dnnl_primitive_destroy(g);
  dnnl_primitive_desc_destroy(pf), dnnl_primitive_desc_destroy(pb), dnnl_primitive_desc_destroy(pw);
  dnnl_memory_destroy(mx), dnnl_memory_destroy(my), dnnl_memory_destroy(mdx);
  dnnl_memory_destroy(mw), dnnl_memory_destroy(mbw), dnnl_memory_destroy(mdw);
}

int main(int argc, char **argv) {
  int n = 64, reps = 5;
  for (int i = 1; i + 1 < argc; i += 2) {
    if (!strcmp(argv[i], "--batch")) n = atoi(argv[i + 1]);
    else if (!strcmp(argv[i], "--reps")) reps = atoi(argv[i + 1]);
    else if (!strcmp(argv[i], "--cpu-time")) use_cpu_time = atoi(argv[i + 1]);
    else return fprintf(stderr, "px_bench_conv_layouts: unknown option %s\n", argv[i]), 2;
  }
  if (argc % 2 == 0 || n < 1 || reps < 1)
    return fprintf(stderr, "usage: px_bench_conv_layouts [--batch N] [--reps R] [--cpu-time 0|1]\n"), 2;
  CK(dnnl_engine_create(&eng, dnnl_cpu, 0));
  CK(dnnl_stream_create(&strm, eng, dnnl_stream_default_flags));
  printf("batch %d, ms (%s): fwd, bwd-data, bwd-weights, total; implementations\n", n,
         use_cpu_time ? "CPU time" : "wall clock");
  for (size_t s = 0; s < sizeof shapes / sizeof *shapes; s++)
    for (size_t l = 0; l < sizeof layouts / sizeof *layouts; l++) run(n, &shapes[s], (int)l, reps);
  dnnl_stream_destroy(strm);
  dnnl_engine_destroy(eng);
  return 0;
}
