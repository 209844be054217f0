/* The f32 multiply-add peak of this CPU (how far the training
 * engine's convolutions are from what the cores can do): each of N threads
 * runs 16 independent chains of fused multiply-adds on 16-wide vectors
 * (AVX-512; 8-wide AVX2 chains where the CPU lacks AVX-512F), which keeps
 * every FMA unit busy without touching memory. Prints the GFLOP/s of one
 * thread and of all N together (wall clock, best of R runs of about 0.3 s)
 * and `RESULT fma_peak_gflops` (all threads). bench/train/conv_share.sh sets
 * oneDNN's convolution GFLOP/s beside it.
 *   px_bench_fma_peak [--threads N] [--reps R] */
#include <immintrin.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define CHAINS 16
#define ITERS 120000000L

static volatile float sink;

__attribute__((target("avx512f"))) static double run512(long iters) {
  __m512 a[CHAINS];
  for (int k = 0; k < CHAINS; k++) a[k] = _mm512_set1_ps((float)k * 1e-3f);
  const __m512 b = _mm512_set1_ps(0.999999f), c = _mm512_set1_ps(1e-6f);
  for (long i = 0; i < iters; i++) {
#pragma GCC unroll 16
    for (int k = 0; k < CHAINS; k++) a[k] = _mm512_fmadd_ps(a[k], b, c);
  }
  float s = 0;
  for (int k = 0; k < CHAINS; k++) s += _mm512_reduce_add_ps(a[k]);
  sink = s;
  return (double)iters * CHAINS * 16 * 2;
}

__attribute__((target("avx2,fma"))) static double run256(long iters) {
  __m256 a[CHAINS];
  for (int k = 0; k < CHAINS; k++) a[k] = _mm256_set1_ps((float)k * 1e-3f);
  const __m256 b = _mm256_set1_ps(0.999999f), c = _mm256_set1_ps(1e-6f);
  for (long i = 0; i < iters; i++) {
#pragma GCC unroll 16
    for (int k = 0; k < CHAINS; k++) a[k] = _mm256_fmadd_ps(a[k], b, c);
  }
  float s = 0, v[8];
  for (int k = 0; k < CHAINS; k++) {
    _mm256_storeu_ps(v, a[k]);
    for (int j = 0; j < 8; j++) s += v[j];
  }
  sink = s;
  return (double)iters * CHAINS * 8 * 2;
}

static int wide;

static void *worker(void *arg) {
  double *flops = arg;
  *flops = wide ? run512(ITERS) : run256(ITERS);
  return NULL;
}

static double now_s(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return (double)t.tv_sec + (double)t.tv_nsec * 1e-9;
}

/* GFLOP/s of n threads together, best of reps. */
static double measure(int n, int reps) {
  double best = 0;
  pthread_t th[64];
  double flops[64];
  for (int r = 0; r < reps; r++) {
    double t0 = now_s();
    for (int i = 0; i < n; i++)
      if (pthread_create(&th[i], NULL, worker, &flops[i])) {
        fprintf(stderr, "px_bench_fma_peak: cannot start a thread\n");
        exit(1);
      }
    double total = 0;
    for (int i = 0; i < n; i++) {
      pthread_join(th[i], NULL);
      total += flops[i];
    }
    double g = total / (now_s() - t0) / 1e9;
    if (g > best) best = g;
  }
  return best;
}

int main(int argc, char **argv) {
  int threads = 1, reps = 5;
  for (int i = 1; i < argc; i++) {
    const char *v = i + 1 < argc ? argv[i + 1] : NULL;
    if (!strcmp(argv[i], "--threads") && v) threads = atoi(v), i++;
    else if (!strcmp(argv[i], "--reps") && v) reps = atoi(v), i++;
    else return fprintf(stderr, "usage: px_bench_fma_peak [--threads N] [--reps R]\n"), 2;
  }
  if (threads < 1 || threads > 64 || reps < 1)
    return fprintf(stderr, "px_bench_fma_peak: threads must be 1 to 64, reps at least 1\n"), 2;
  __builtin_cpu_init();
  wide = __builtin_cpu_supports("avx512f");
  if (!wide && !(__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma")))
    return fprintf(stderr, "px_bench_fma_peak: the CPU has neither AVX-512F nor AVX2+FMA\n"), 1;
  double one = measure(1, reps), all = threads > 1 ? measure(threads, reps) : one;
  printf("f32 FMA peak (%s, %d chains): %.1f GFLOP/s on 1 thread, %.1f on %d\n",
         wide ? "AVX-512" : "AVX2", CHAINS, one, all, threads);
  printf("RESULT fma_peak_gflops %.1f GFLOP/s\n", all);
  return 0;
}
