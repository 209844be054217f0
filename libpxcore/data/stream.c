/* The decoding side of a loader over a streamed image folder: every batch's
 * images are read, decoded and transformed (xform.c) by a pool of threads,
 * the thread that asks for the batch (the loader's producer, or the caller
 * without prefetch) working beside them. Images are handed out one at a
 * time from a shared counter, and each writes only its own slice of the
 * batch, with choices drawn from (seed, epoch, index): the batch does not
 * depend on which thread decoded what.
 *
 * A file that cannot be decoded is marked (once: a byte per file) and
 * counted, and its place is taken by the next file of the data set that
 * decodes, with that file's label and choices: as a file's being corrupt
 * is a property of the file, the substitute is the same whatever the
 * timing. More than max_skipped of the files marked fails the batch.
 *
 * Everything (threads, decoders, the marks) is allocated at creation. */
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "data_int.h"
#include "px_check.h"

#define PX__SBATCH_MAX_THREADS 256
/* substitutes tried for one image before the batch fails */
#define PX__SBATCH_TRIES 64

struct px__sbatch {
  const px_dataset_t *ds;  /* borrowed */
  const px__fstream_t *fs;
  int32_t nthreads;        /* decoders: [0] the caller's, [1..] the pool's */
  px__xform_t **xf;        /* [nthreads] */
  pthread_t *threads;      /* [nthreads - 1] */
  int started;             /* pool threads running */
  _Atomic uint8_t *bad;    /* [n] 1: the file was found undecodable */
  atomic_int_fast64_t skipped;

  pthread_mutex_t mu;
  pthread_cond_t cv_work, cv_done;
  int stop;
  uint64_t gen;            /* bumped for every batch */
  int32_t active;          /* pool threads working on the current batch */
  /* the current batch, read by the workers */
  const uint32_t *indices;
  int32_t n;
  px__xform_params_t p;
  const float *a, *b;
  float *x;
  int32_t *y;
  atomic_int next;         /* next image of the batch to take */
  px_status_t st;          /* first failure of the batch (under mu) */
  char err[512];
  char reasons[512];       /* the first files skipped, for the failure message */
};

/* Image i of the current batch into its slot, with worker w's decoder;
 * err[512] says why it failed. */
static px_status_t px__sbatch_one(px__sbatch_t *sb, int32_t w, int32_t i, char *err) {
  const px_dataset_info_t *info = &sb->ds->info;
  size_t img = (size_t)info->channels * info->height * info->width;
  int64_t k = sb->indices[i];
  px__xform_params_t p = sb->p;
  char why[256];
  for (int tries = 0; tries < PX__SBATCH_TRIES; tries++, k = (k + 1) % info->n) {
    if (atomic_load_explicit(&sb->bad[k], memory_order_relaxed)) continue;
    p.index = k;
    int fd = px__fstream_open(sb->fs, k, why);
    px_status_t st = PX_ERR_FORMAT;
    if (fd >= 0) {
      st = px__xform_fd(sb->xf[w], fd, &p, sb->a, sb->b, sb->x + (size_t)i * img);
      close(fd);
      if (st == PX_ERR_FORMAT) snprintf(why, sizeof why, "%s", px__xform_reason(sb->xf[w]));
    }
    if (st == PX_OK) {
      sb->y[i] = sb->ds->labels[k];
      return PX_OK;
    }
    if (st != PX_ERR_FORMAT) return st;
    if (atomic_exchange(&sb->bad[k], 1) == 0) {
      int64_t nth = atomic_fetch_add(&sb->skipped, 1);
      const char *name = px__fstream_name(sb->fs, k);
      px_log(PX_LOG_WARN, "image folder: skipped %s/%s: %s", px__fstream_dir(sb->fs), name, why);
      if (nth < 3) {
        pthread_mutex_lock(&sb->mu);
        size_t len = strlen(sb->reasons);
        snprintf(sb->reasons + len, sizeof sb->reasons - len, "%s%s: %s", len ? "; " : "", name,
                 why);
        pthread_mutex_unlock(&sb->mu);
      }
    }
  }
  pthread_mutex_lock(&sb->mu);
  snprintf(err, 512, "image folder %.200s: no decodable image among %d files from sample %u "
           "on: %.200s", px__fstream_dir(sb->fs), PX__SBATCH_TRIES, sb->indices[i], sb->reasons);
  pthread_mutex_unlock(&sb->mu);
  return PX_ERR_FORMAT;
}

/* Takes images of the current batch until none is left. */
static void px__sbatch_drain(px__sbatch_t *sb, int32_t w) {
  for (;;) {
    int32_t i = atomic_fetch_add(&sb->next, 1);
    if (i >= sb->n) return;
    char err[512];
    px_status_t st = px__sbatch_one(sb, w, i, err);
    if (st != PX_OK) {
      if (st != PX_ERR_FORMAT) snprintf(err, sizeof err, "%s", px_last_error());
      pthread_mutex_lock(&sb->mu);
      if (sb->st == PX_OK) {
        sb->st = st;
        snprintf(sb->err, sizeof sb->err, "%s", err);
      }
      pthread_mutex_unlock(&sb->mu);
      atomic_store(&sb->next, sb->n); /* the others stop too */
      return;
    }
  }
}

typedef struct {
  px__sbatch_t *sb;
  int32_t w;
} px__sworker_arg_t;

static void *px__sbatch_main(void *arg) {
  px__sbatch_t *sb = ((px__sworker_arg_t *)arg)->sb;
  int32_t w = ((px__sworker_arg_t *)arg)->w;
  px_free(arg);
  uint64_t seen = 0;
  pthread_mutex_lock(&sb->mu);
  for (;;) {
    while (!sb->stop && sb->gen == seen) pthread_cond_wait(&sb->cv_work, &sb->mu);
    if (sb->stop) break;
    seen = sb->gen;
    sb->active++;
    pthread_mutex_unlock(&sb->mu);
    px__sbatch_drain(sb, w);
    pthread_mutex_lock(&sb->mu);
    if (--sb->active == 0) pthread_cond_broadcast(&sb->cv_done);
  }
  pthread_mutex_unlock(&sb->mu);
  return NULL;
}

void px__sbatch_destroy(px__sbatch_t *sb) {
  if (!sb) return;
  if (sb->started) {
    pthread_mutex_lock(&sb->mu);
    sb->stop = 1;
    pthread_cond_broadcast(&sb->cv_work);
    pthread_mutex_unlock(&sb->mu);
    for (int32_t t = 0; t < sb->started; t++) pthread_join(sb->threads[t], NULL);
  }
  pthread_cond_destroy(&sb->cv_done);
  pthread_cond_destroy(&sb->cv_work);
  pthread_mutex_destroy(&sb->mu);
  for (int32_t t = 0; sb->xf && t < sb->nthreads; t++) px__xform_destroy(sb->xf[t]);
  PX_FREE_ALL(sb->xf, sb->threads, (void *)sb->bad, sb);
}

static px_status_t px__sbatch_start(px__sbatch_t *sb) {
  for (int32_t t = 1; t < sb->nthreads; t++) {
    px__sworker_arg_t *arg = px_malloc(sizeof *arg, "data.stream_arg");
    if (!arg) return PX_ERR_NOMEM;
    arg->sb = sb;
    arg->w = t;
    int rc = pthread_create(&sb->threads[t - 1], NULL, px__sbatch_main, arg);
    if (rc != 0) {
      px_free(arg);
      return px_set_error(PX_ERR_BACKEND, "image folder: cannot start decoding thread %d: %s", t,
                          strerror(rc));
    }
    sb->started++;
  }
  return PX_OK;
}

px_status_t px__sbatch_create(const px_dataset_t *ds, int32_t threads, px__sbatch_t **out) {
  PX_REQUIRE(ds && ds->stream && out, "px__sbatch_create: not a streamed data set");
  PX_REQUIRE(threads >= 1 && threads <= PX__SBATCH_MAX_THREADS,
             "loader threads %d: must be 1..%d", threads, PX__SBATCH_MAX_THREADS);
  px__sbatch_t *sb = px_calloc(1, sizeof *sb, "data.stream");
  if (!sb) return PX_ERR_NOMEM;
  /* initialised first: destroy always tears them down */
  pthread_mutex_init(&sb->mu, NULL);
  pthread_cond_init(&sb->cv_work, NULL);
  pthread_cond_init(&sb->cv_done, NULL);
  sb->ds = ds;
  sb->fs = ds->stream;
  sb->nthreads = threads;
  px_status_t st = PX_OK;
  sb->xf = px_calloc((size_t)threads, sizeof *sb->xf, "data.stream_xforms");
  sb->threads = px_calloc((size_t)threads, sizeof *sb->threads, "data.stream_threads");
  sb->bad = px_calloc((size_t)ds->info.n, 1, "data.stream_bad");
  if (!sb->xf || !sb->threads || !sb->bad) st = PX_ERR_NOMEM;
  for (int32_t t = 0; st == PX_OK && t < threads; t++)
    st = px__xform_create(ds->info.channels, ds->info.height, &sb->xf[t]);
  if (st == PX_OK) st = px__sbatch_start(sb);
  return PX_CREATED(st, sb, out, px__sbatch_destroy);
}

int64_t px__sbatch_skipped(const px__sbatch_t *sb) {
  return atomic_load((atomic_int_fast64_t *)&sb->skipped);
}

px_status_t px__sbatch_fill(px__sbatch_t *sb, const uint32_t *indices, int32_t n,
                            const px__xform_params_t *p, const float *a, const float *b,
                            float *x, int32_t *y, char *err) {
  pthread_mutex_lock(&sb->mu);
  sb->indices = indices;
  sb->n = n;
  sb->p = *p;
  sb->a = a;
  sb->b = b;
  sb->x = x;
  sb->y = y;
  sb->st = PX_OK;
  sb->err[0] = '\0';
  atomic_store(&sb->next, 0);
  sb->gen++;
  pthread_cond_broadcast(&sb->cv_work);
  pthread_mutex_unlock(&sb->mu);
  px__sbatch_drain(sb, 0);
  pthread_mutex_lock(&sb->mu);
  /* a worker that has not woken yet finds nothing left and returns at once */
  while (sb->active > 0 || atomic_load(&sb->next) < n) pthread_cond_wait(&sb->cv_done, &sb->mu);
  px_status_t st = sb->st;
  if (st != PX_OK) snprintf(err, 512, "%s", sb->err);
  pthread_mutex_unlock(&sb->mu);
  if (st != PX_OK) return st;
  int64_t files = sb->ds->info.n, skipped = px__sbatch_skipped(sb);
  double m = px__fstream_max_skipped(sb->fs);
  if ((double)skipped > m * (double)files + 1e-9) {
    pthread_mutex_lock(&sb->mu);
    snprintf(err, 512, "image folder %.160s: %lld of %lld images could not be decoded (more "
             "than dataset.max_skipped = %g%%): %.240s%s", px__fstream_dir(sb->fs), (long long)skipped,
             (long long)files, 100.0 * m, sb->reasons, skipped > 3 ? "; ..." : "");
    pthread_mutex_unlock(&sb->mu);
    return PX_ERR_FORMAT;
  }
  return PX_OK;
}
