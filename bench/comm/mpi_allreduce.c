/* The Open MPI side of bench/comm: MPI_Allreduce timed exactly like
 * px_bench_comm times px_comm_allreduce (float sum, separate buffers, a
 * barrier, `iters` calls, the slowest rank's mean, median of `reps`).
 *
 *   mpirun -np N px_bench_comm_mpi [--iters K] [--reps R] SIZE...
 *
 * prints one line per size on rank 0: "SIZE_BYTES TIME_US BUSBW_GBPS". */
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define MAX_SIZES 32
#define MAX_REPS 64

static int cmp_double(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return x < y ? -1 : x > y;
}

int main(int argc, char **argv) {
  MPI_Init(&argc, &argv);
  int rank = 0, nranks = 1, iters = 0, reps = 5, nsizes = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &nranks);
  size_t sizes[MAX_SIZES];
  for (int i = 1; i < argc; i++) {
    if (!strcmp(argv[i], "--iters") && i + 1 < argc) iters = atoi(argv[++i]);
    else if (!strcmp(argv[i], "--reps") && i + 1 < argc) reps = atoi(argv[++i]);
    else if (nsizes < MAX_SIZES) sizes[nsizes++] = (size_t)strtoull(argv[i], NULL, 0);
  }
  if (reps < 1 || reps > MAX_REPS) reps = 5;
  size_t maxb = 0;
  for (int s = 0; s < nsizes; s++)
    if (sizes[s] > maxb) maxb = sizes[s];
  float *x = malloc(maxb + 64), *y = malloc(maxb + 64);
  for (size_t i = 0; i < maxb / 4; i++) x[i] = (float)((i + (size_t)rank) % 13);
  memset(y, 0, maxb);
  int rc = 0;
  for (int s = 0; s < nsizes; s++) {
    int n = (int)(sizes[s] / 4);
    int it = iters;
    if (it <= 0) {
      size_t k = ((size_t)256 << 20) / (sizes[s] ? sizes[s] : 1);
      it = k < 4 ? 4 : k > 2000 ? 2000 : (int)k;
    }
    for (int i = 0; i < (it < 10 ? it : 10); i++)
      MPI_Allreduce(x, y, n, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
    double t[MAX_REPS];
    for (int r = 0; r < reps; r++) {
      MPI_Barrier(MPI_COMM_WORLD);
      double t0 = MPI_Wtime();
      for (int i = 0; i < it; i++) MPI_Allreduce(x, y, n, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
      double tl = (MPI_Wtime() - t0) / it, tmax = tl;
      MPI_Allreduce(&tl, &tmax, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
      t[r] = tmax;
    }
    for (int i = 0; i < n; i += 997) {
      float want = 0;
      for (int r = 0; r < nranks; r++) want += (float)(((size_t)i + (size_t)r) % 13);
      if (y[i] != want) rc = 1;
    }
    if (rank == 0) {
      qsort(t, (size_t)reps, sizeof t[0], cmp_double);
      double med = t[reps / 2];
      printf("%zu %.3f %.3f\n", sizes[s], med * 1e6,
             (double)sizes[s] / med * 2.0 * (nranks - 1) / nranks / 1e9);
    }
  }
  if (rc) fprintf(stderr, "rank %d: wrong MPI_Allreduce result\n", rank);
  free(x);
  free(y);
  MPI_Finalize();
  return rc;
}
