/* px_bench_comm: allreduce time and bus bandwidth of the PruneX data plane
 * (host memory over UCX) on this machine. A small launcher forks the ranks,
 * which meet through a px_kv directory like the multi-process tests do, and
 * each message size is timed the same way as bench/comm/mpi_allreduce.c times
 * MPI_Allreduce: float sum, separate send and receive buffers, a barrier,
 * `iters` back-to-back calls, the slowest rank's mean per call; the median
 * of `reps` such runs is reported. run.sh alternates the two per size.
 *
 *   px_bench_comm [--ranks N] [--nodes M] [--iters K] [--reps R]
 *                 [--algo auto|rd|ring] [--small BYTES] SIZE...
 *
 * prints one line per size: "SIZE_BYTES TIME_US BUSBW_GBPS". */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "prunex/comm.h"
#include "prunex/comm_internal.h"
#include "prunex/kv.h"
#include "../px_bench_util.h"

#define MAX_SIZES 32
#define MAX_REPS 64

static int iters_for(size_t bytes, int forced) {
  if (forced > 0) return forced;
  size_t it = ((size_t)256 << 20) / (bytes ? bytes : 1);
  if (it < 4) it = 4;
  if (it > 2000) it = 2000;
  return (int)it;
}

/* one rank: times every size, writes the per-rep mean into res */
static int rank_main(int rank, int nranks, const int *nodes, const char *dir, const size_t *sizes,
                     int nsizes, int iters, int reps, const px_comm_opts_t *opts,
                     volatile double *res) {
  px_kv_t *kv = NULL;
  px_comm_t *c = NULL;
  if (px_kv_open_dir(dir, &kv) != PX_OK ||
      px_comm_create(rank, nranks, nodes, kv, opts, &c) != PX_OK) {
    fprintf(stderr, "rank %d: %s\n", rank, px_last_error());
    return 1;
  }
  px_kv_destroy(kv);
  px_group_t *w = px_comm_group(c, PX_GROUP_WORLD);
  size_t maxb = 0;
  for (int s = 0; s < nsizes; s++)
    if (sizes[s] > maxb) maxb = sizes[s];
  float *x = malloc(maxb + 64), *y = malloc(maxb + 64);
  if (!x || !y) return 1;
  for (size_t i = 0; i < maxb / 4; i++) x[i] = (float)((i + (size_t)rank) % 13);
  memset(y, 0, maxb);
  for (int s = 0; s < nsizes; s++) {
    size_t n = sizes[s] / 4;
    int it = iters_for(sizes[s], iters);
    /* warm-up: connections, scratch buffers, page faults */
    for (int i = 0; i < (it < 10 ? it : 10); i++)
      if (px_comm_allreduce(w, x, y, n, PX_COMM_F32, PX_COMM_SUM) != PX_OK) goto fail;
    for (int r = 0; r < reps; r++) {
      if (px_comm_barrier(w) != PX_OK) goto fail;
      double t0 = px__now();
      for (int i = 0; i < it; i++)
        if (px_comm_allreduce(w, x, y, n, PX_COMM_F32, PX_COMM_SUM) != PX_OK) goto fail;
      double t = (px__now() - t0) / it;
      /* the slowest rank defines the time */
      double tmax = t;
      if (px_comm_allreduce(w, &t, &tmax, 1, PX_COMM_F64, PX_COMM_MAX) != PX_OK) goto fail;
      if (rank == 0) res[s * MAX_REPS + r] = tmax;
    }
    /* the result is right: sum over ranks of (i + r) % 13 */
    for (size_t i = 0; i < n; i += 997) {
      float want = 0;
      for (int r = 0; r < nranks; r++) want += (float)((i + (size_t)r) % 13);
      if (y[i] != want) {
        fprintf(stderr, "rank %d: wrong result at %zu\n", rank, i);
        return 1;
      }
    }
  }
  free(x);
  free(y);
  px_comm_destroy(c);
  return 0;
fail:
  fprintf(stderr, "rank %d: %s\n", rank, px_last_error());
  return 1;
}

int main(int argc, char **argv) {
  int nranks = 4, nnodes = 1, iters = 0, reps = 5, nsizes = 0;
  size_t sizes[MAX_SIZES];
  px_comm_opts_t opts;
  px_comm_opts_default(&opts);
  for (int i = 1; i < argc; i++) {
    if (!strcmp(argv[i], "--algo") && i + 1 < argc) {
      i++;
      opts.allreduce_algo = !strcmp(argv[i], "rd")     ? PX_COMM_ALGO_RD
                            : !strcmp(argv[i], "ring") ? PX_COMM_ALGO_RING
                                                       : PX_COMM_ALGO_AUTO;
      continue;
    }
    if (!strcmp(argv[i], "--small") && i + 1 < argc) {
      opts.small_bytes = (size_t)strtoull(argv[++i], NULL, 0);
      continue;
    }
    if (!strcmp(argv[i], "--ranks") && i + 1 < argc) nranks = atoi(argv[++i]);
    else if (!strcmp(argv[i], "--nodes") && i + 1 < argc) nnodes = atoi(argv[++i]);
    else if (!strcmp(argv[i], "--iters") && i + 1 < argc) iters = atoi(argv[++i]);
    else if (!strcmp(argv[i], "--reps") && i + 1 < argc) reps = atoi(argv[++i]);
    else if (nsizes < MAX_SIZES) sizes[nsizes++] = (size_t)strtoull(argv[i], NULL, 0);
  }
  if (nsizes == 0 || nranks < 1 || nranks > 64 || nnodes < 1 || nnodes > nranks || reps < 1 ||
      reps > MAX_REPS) {
    fprintf(stderr,
            "usage: %s [--ranks N] [--nodes M] [--iters K] [--reps R] [--algo auto|rd|ring]\n"
            "          [--small BYTES] SIZE_BYTES...\n",
            argv[0]);
    return 2;
  }
  int nodes[64];
  for (int r = 0; r < nranks; r++) nodes[r] = r * nnodes / nranks;
  char dir[] = "/tmp/pxbench-XXXXXX";
  if (!mkdtemp(dir)) return 1;
  volatile double *res = mmap(NULL, MAX_SIZES * MAX_REPS * sizeof(double), PROT_READ | PROT_WRITE,
                              MAP_SHARED | MAP_ANONYMOUS, -1, 0);
  if (res == MAP_FAILED) return 1;
  pid_t pids[64];
  fflush(stdout);
  for (int r = 0; r < nranks; r++) {
    pids[r] = fork();
    if (pids[r] == 0) _exit(rank_main(r, nranks, nodes, dir, sizes, nsizes, iters, reps, &opts, res));
  }
  int bad = 0;
  for (int r = 0; r < nranks; r++) {
    int ws = 0;
    waitpid(pids[r], &ws, 0);
    if (!WIFEXITED(ws) || WEXITSTATUS(ws) != 0) bad = 1;
  }
  char cmd[128];
  snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
  if (system(cmd) != 0) bad = 1;
  if (bad) return 1;
  for (int s = 0; s < nsizes; s++) {
    double t[MAX_REPS];
    for (int r = 0; r < reps; r++) t[r] = res[s * MAX_REPS + r];
    qsort(t, (size_t)reps, sizeof t[0], pxb_cmp_double);
    double med = t[reps / 2];
    double busbw = (double)sizes[s] / med * 2.0 * (nranks - 1) / nranks / 1e9;
    printf("%zu %.3f %.3f\n", sizes[s], med * 1e6, busbw);
  }
  return 0;
}
