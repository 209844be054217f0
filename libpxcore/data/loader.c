/* The batch loader: one rank's view of a data set as a sequence of epochs of
 * float batches, optionally prepared ahead by a background thread.
 *
 * Buffers form a ring of nslots = prefetch + 1 slots; batch b of an epoch
 * lives in slot b % nslots. The producer may fill batch b once the consumer
 * has released batch b - nslots, so the slot the caller holds is never
 * written. The producer builds a batch without the lock (it only reads the
 * data set and the epoch's permutation, which nobody writes while an epoch is
 * active) and publishes it under the lock. Ending an epoch bumps a generation
 * counter and waits until the producer is idle, so a batch built for an old
 * epoch is never published and the permutation can be rewritten safely.
 *
 * Everything is allocated in px_loader_create; an epoch allocates nothing. */
#include <assert.h>
#include <pthread.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "data_int.h"
#include "px_check.h"
#include "px_clock.h"

#define PX__LOADER_MAX_PREFETCH 16

typedef struct {
  float *x;    /* [batch_size][c][h][w] */
  int32_t *y;  /* [batch_size] */
  int32_t n;   /* samples in the batch held here */
  px_status_t st;  /* a streamed batch that failed (err says why) */
  char err[512];
} px__slot_t;

struct px_loader {
  const px_dataset_t *ds;  /* borrowed */
  px_loader_config_t cfg;
  int64_t shard_begin;     /* this rank's positions in the epoch order */
  int64_t shard_count;
  int64_t num_batches;
  int64_t num_samples;     /* shard_count, less a dropped partial batch */
  uint32_t *perm;          /* [n] order of the current epoch */
  int nslots;
  px__slot_t *slots;       /* [nslots] */
  px__sbatch_t *sb;        /* a streamed data set's decoders (stream.c), else NULL */

  /* Epoch state; under mu when there is a producer thread. */
  int active;
  int64_t epoch;
  uint64_t gen;            /* bumped when an epoch begins or ends */
  int64_t filled;          /* batches of this epoch published by the producer */
  int64_t released;        /* batches the consumer is done with */
  int64_t taken;           /* batches handed to the consumer */

  /* Producer thread (prefetch > 0). */
  int has_thread;
  pthread_t thread;
  pthread_mutex_t mu;
  pthread_cond_t cv_work;  /* producer waits: work to do or stop */
  pthread_cond_t cv_done;  /* consumer waits: a batch is ready or the producer went idle */
  int busy;                /* the producer is building a batch outside the lock */
  int stop;
  double stall_s;          /* time px_loader_next waited or built (consumer only) */
};

/* A streamed data set's batch: decoded from the files (stream.c). */
static void px__loader_stream(px_loader_t *l, int64_t epoch, const uint32_t *idx, int32_t n,
                              px__slot_t *slot) {
  const px_augment_t *aug = &l->cfg.augment;
  px__xform_params_t p = {aug->rrc_scale, aug->flip, l->cfg.seed, epoch, 0};
  float a[PX_DATA_MAX_CHANNELS], b[PX_DATA_MAX_CHANNELS];
  for (int c = 0; c < l->ds->info.channels; c++) {
    a[c] = 1.0f / (255.0f * l->cfg.std[c]);
    b[c] = -l->cfg.mean[c] / l->cfg.std[c];
  }
  slot->st = px__sbatch_fill(l->sb, idx, n, &p, a, b, slot->x, slot->y, slot->err);
}

static void px__loader_build(px_loader_t *l, int64_t epoch, int64_t b) {
  px__slot_t *slot = &l->slots[b % l->nslots];
  int64_t first = b * l->cfg.batch_size;
  int64_t n = l->num_samples - first;
  if (n > l->cfg.batch_size) n = l->cfg.batch_size;
  slot->n = (int32_t)n;
  if (l->sb) {
    px__loader_stream(l, epoch, l->perm + l->shard_begin + first, (int32_t)n, slot);
    return;
  }
  /* Cannot fail: indices come from a permutation of the data set and the
   * config was validated at creation. */
  px_data_fill_batch(l->ds, l->perm + l->shard_begin + first, (int32_t)n, &l->cfg.augment,
                     l->cfg.mean, l->cfg.std, l->cfg.seed, epoch, slot->x, slot->y);
  slot->n = (int32_t)n;
}

static void *px__loader_main(void *arg) {
  px_loader_t *l = arg;
  pthread_mutex_lock(&l->mu);
  for (;;) {
    while (!l->stop && !(l->active && l->filled < l->num_batches &&
                         l->filled < l->released + l->nslots)) {
      pthread_cond_wait(&l->cv_work, &l->mu);
    }
    if (l->stop) break;
    int64_t b = l->filled, epoch = l->epoch;
    uint64_t gen = l->gen;
    l->busy = 1;
    pthread_mutex_unlock(&l->mu);
    px__loader_build(l, epoch, b);
    pthread_mutex_lock(&l->mu);
    l->busy = 0;
    if (gen == l->gen) l->filled = b + 1;
    pthread_cond_broadcast(&l->cv_done);
  }
  pthread_mutex_unlock(&l->mu);
  return NULL;
}

static px_status_t px__loader_check(const px_dataset_t *ds, const px_loader_config_t *cfg) {
  PX_REQUIRE(ds && cfg, "px_loader_create: NULL argument");
  const px_dataset_info_t *info = &ds->info;
  PX_REQUIRE(cfg->batch_size >= 1, "loader batch size %d: must be positive", cfg->batch_size);
  PX_REQUIRE(cfg->world_size >= 1 && cfg->rank >= 0 && cfg->rank < cfg->world_size,
             "loader rank %d of world %d: need 0 <= rank < world", cfg->rank, cfg->world_size);
  PX_REQUIRE(cfg->threads >= 0 && cfg->threads <= 256, "loader threads %d: must be in 0..256",
             cfg->threads);
  PX_REQUIRE(!cfg->host_alloc == !cfg->host_free, "loader: host_alloc and host_free go together");
  PX_REQUIRE(cfg->prefetch >= 0 && cfg->prefetch <= PX__LOADER_MAX_PREFETCH,
             "loader prefetch %d: must be in 0..%d", cfg->prefetch, PX__LOADER_MAX_PREFETCH);
  PX_REQUIRE(cfg->augment.crop_pad >= 0 && cfg->augment.crop_pad <= 1024,
             "loader crop padding %d: must be in 0..1024", cfg->augment.crop_pad);
  PX_REQUIRE(cfg->augment.rrc_scale >= 0.0f && cfg->augment.rrc_scale <= 1.0f,
             "loader random-resized-crop scale %g: must be in 0..1 (0: off)",
             (double)cfg->augment.rrc_scale);
  for (int c = 0; c < info->channels; c++) {
    PX_REQUIRE(cfg->std[c] > 0.0f, "loader std[%d] = %g: must be positive", c,
               (double)cfg->std[c]);
  }
  size_t img = (size_t)info->channels * info->height * info->width;
  size_t max_batch = SIZE_MAX / sizeof(float) / img / (PX__LOADER_MAX_PREFETCH + 1);
  PX_REQUIRE((size_t)cfg->batch_size <= max_batch, "loader batch size %d is too large",
             cfg->batch_size);
  return PX_OK;
}

static void px__config_base(const px_dataset_t *ds, px_loader_config_t *out) {
  memset(out, 0, sizeof *out);
  out->batch_size = 128;
  out->rank = 0;
  out->world_size = 1;
  for (int c = 0; c < PX_DATA_MAX_CHANNELS; c++) {
    out->mean[c] = ds->info.mean[c];
    out->std[c] = ds->info.std[c];
  }
}

void px_loader_config_default(const px_dataset_t *ds, px_loader_config_t *out) {
  px__config_base(ds, out);
  out->shard_mode = PX_SHARD_EQUAL;
  out->shuffle = 1;
  out->prefetch = 1;
}

void px_loader_config_eval(const px_dataset_t *ds, px_loader_config_t *out) {
  px__config_base(ds, out);
  out->shard_mode = PX_SHARD_SPREAD;
}

void px_loader_destroy(px_loader_t *l) {
  if (!l) return;
  if (l->has_thread) {
    pthread_mutex_lock(&l->mu);
    l->stop = 1;
    pthread_cond_broadcast(&l->cv_work);
    pthread_mutex_unlock(&l->mu);
    pthread_join(l->thread, NULL);
    pthread_cond_destroy(&l->cv_done);
    pthread_cond_destroy(&l->cv_work);
    pthread_mutex_destroy(&l->mu);
  }
  if (l->slots) {
    for (int s = 0; s < l->nslots; s++) {
      if (l->cfg.host_free && l->slots[s].x) l->cfg.host_free(l->slots[s].x, l->cfg.host_ctx);
      else px_free(l->slots[s].x);
      px_free(l->slots[s].y);
    }
  }
  px__sbatch_destroy(l->sb); /* after the producer: it may be decoding */
  px_free(l->slots);
  px_free(l->perm);
  px_free(l);
}

px_status_t px_loader_create(const px_dataset_t *ds, const px_loader_config_t *cfg,
                             px_loader_t **out) {
  PX_REQUIRE(out != NULL, "px_loader_create: out is NULL");
  PX_CHECK(px__loader_check(ds, cfg));
  px_status_t st = PX_OK;
  const px_dataset_info_t *info = &ds->info;
  px_loader_t *l = px_calloc(1, sizeof *l, "data.loader");
  if (!l) return PX_ERR_NOMEM;
  l->ds = ds;
  l->cfg = *cfg;
  PX_CHECK_GOTO(px_data_shard(info->n, cfg->rank, cfg->world_size, cfg->shard_mode,
                              &l->shard_begin, &l->shard_count),
                st, done);
  l->num_batches = cfg->drop_last ? l->shard_count / cfg->batch_size
                                  : (l->shard_count + cfg->batch_size - 1) / cfg->batch_size;
  l->num_samples = cfg->drop_last ? l->num_batches * cfg->batch_size : l->shard_count;

  l->perm = px_malloc((size_t)info->n * sizeof *l->perm, "data.loader_perm");
  l->nslots = cfg->prefetch + 1;
  l->slots = px_calloc((size_t)l->nslots, sizeof *l->slots, "data.loader_slots");
  if (!l->perm || !l->slots) {
    st = PX_ERR_NOMEM;
    goto done;
  }
  size_t img = (size_t)info->channels * info->height * info->width;
  for (int s = 0; s < l->nslots; s++) {
    size_t xbytes = (size_t)cfg->batch_size * img * sizeof(float);
    l->slots[s].x = cfg->host_alloc ? cfg->host_alloc(xbytes, cfg->host_ctx)
                                    : px_malloc_aligned(xbytes, "data.loader_x");
    l->slots[s].y = px_malloc_aligned((size_t)cfg->batch_size * sizeof(int32_t),
                                      "data.loader_y");
    if (!l->slots[s].x || !l->slots[s].y) {
      st = PX_ERR_NOMEM;
      goto done;
    }
  }

  if (ds->stream) {
    int32_t threads = cfg->threads;
    if (threads == 0) {
      long cpus = sysconf(_SC_NPROCESSORS_ONLN);
      threads = cpus < 1 ? 1 : cpus > PX_LOADER_DEFAULT_THREADS ? PX_LOADER_DEFAULT_THREADS
                                                                 : (int32_t)cpus;
    }
    PX_CHECK_GOTO(px__sbatch_create(ds, threads, &l->sb), st, done);
  }
  if (cfg->prefetch > 0) {
    int rc = pthread_mutex_init(&l->mu, NULL);
    if (rc == 0) {
      rc = pthread_cond_init(&l->cv_work, NULL);
      if (rc != 0) pthread_mutex_destroy(&l->mu);
    }
    if (rc == 0) {
      rc = pthread_cond_init(&l->cv_done, NULL);
      if (rc != 0) {
        pthread_cond_destroy(&l->cv_work);
        pthread_mutex_destroy(&l->mu);
      }
    }
    if (rc == 0) {
      rc = pthread_create(&l->thread, NULL, px__loader_main, l);
      if (rc != 0) {
        pthread_cond_destroy(&l->cv_done);
        pthread_cond_destroy(&l->cv_work);
        pthread_mutex_destroy(&l->mu);
      }
    }
    if (rc != 0) {
      st = px_set_error(PX_ERR_BACKEND, "loader: cannot start the prefetch thread: %s",
                        strerror(rc));
      goto done;
    }
    l->has_thread = 1;
  }
done:
  return PX_CREATED(st, l, out, px_loader_destroy);
}

px_status_t px_loader_reshard(px_loader_t *l, int32_t rank, int32_t world_size) {
  PX_REQUIRE(l != NULL, "px_loader_reshard: NULL loader");
  if (l->active)
    return px_set_error(PX_ERR_STATE, "loader: epoch %lld is still active (reshard between "
                        "epochs)", (long long)l->epoch);
  int64_t begin, count;
  PX_CHECK(px_data_shard(l->ds->info.n, rank, world_size, l->cfg.shard_mode, &begin, &count));
  /* no epoch is active: the producer is idle and reads none of this */
  if (l->has_thread) pthread_mutex_lock(&l->mu);
  l->cfg.rank = rank;
  l->cfg.world_size = world_size;
  l->shard_begin = begin;
  l->shard_count = count;
  int64_t bs = l->cfg.batch_size;
  l->num_batches = l->cfg.drop_last ? count / bs : (count + bs - 1) / bs;
  l->num_samples = l->cfg.drop_last ? l->num_batches * bs : count;
  if (l->has_thread) pthread_mutex_unlock(&l->mu);
  return PX_OK;
}

px_status_t px_loader_begin_epoch(px_loader_t *l, int64_t epoch) {
  return px_loader_begin_epoch_at(l, epoch, 0);
}

px_status_t px_loader_begin_epoch_at(px_loader_t *l, int64_t epoch, int64_t first) {
  assert(l != NULL);
  if (first < 0 || first > l->num_batches)
    return px_set_error(PX_ERR_INVALID, "loader: batch %lld of an epoch of %lld batches",
                        (long long)first, (long long)l->num_batches);
  if (l->active) {
    return px_set_error(PX_ERR_STATE, "loader: epoch %lld is still active (end it before "
                        "beginning epoch %lld)", (long long)l->epoch, (long long)epoch);
  }
  /* No epoch is active, so the producer is idle and does not read perm. */
  int64_t n = l->ds->info.n;
  if (l->cfg.shuffle) {
    PX_CHECK(px_data_shuffle(n, l->cfg.seed, epoch, l->perm));
  } else {
    for (int64_t i = 0; i < n; i++) l->perm[i] = (uint32_t)i;
  }
  if (l->has_thread) pthread_mutex_lock(&l->mu);
  l->epoch = epoch;
  l->filled = l->released = l->taken = first;
  l->gen++;
  l->active = 1;
  if (l->has_thread) {
    pthread_cond_signal(&l->cv_work);
    pthread_mutex_unlock(&l->mu);
  }
  return PX_OK;
}

px_status_t px_loader_next(px_loader_t *l, px_batch_t *out) {
  assert(l != NULL && out != NULL);
  if (!l->active) return px_set_error(PX_ERR_STATE, "loader: no epoch is active");
  const px_dataset_info_t *info = &l->ds->info;
  int64_t b = l->taken;
  if (l->has_thread) {
    pthread_mutex_lock(&l->mu);
    if (l->released < l->taken) {
      l->released = l->taken; /* the batch handed out last time */
      pthread_cond_signal(&l->cv_work);
    }
    if (b >= l->num_batches) {
      pthread_mutex_unlock(&l->mu);
      return 0;
    }
    if (l->filled <= b) {
      double t0 = px__now();
      while (l->filled <= b) pthread_cond_wait(&l->cv_done, &l->mu);
      l->stall_s += px__now() - t0;
    }
    l->taken = b + 1;
    pthread_mutex_unlock(&l->mu);
  } else {
    l->released = l->taken;
    if (b >= l->num_batches) return 0;
    double t0 = px__now();
    px__loader_build(l, l->epoch, b);
    l->stall_s += px__now() - t0;
    l->filled = l->taken = b + 1;
  }
  const px__slot_t *slot = &l->slots[b % l->nslots];
  if (l->sb && slot->st != PX_OK) return px_set_error(slot->st, "%s", slot->err);
  out->x = slot->x;
  out->y = slot->y;
  out->n = slot->n;
  out->channels = info->channels;
  out->height = info->height;
  out->width = info->width;
  out->index = b;
  out->epoch = l->epoch;
  return 1;
}

int64_t px_loader_position(const px_loader_t *l) { return l->active ? l->taken : 0; }

px_status_t px_loader_end_epoch(px_loader_t *l) {
  assert(l != NULL);
  if (!l->active) return PX_OK;
  if (l->has_thread) {
    pthread_mutex_lock(&l->mu);
    l->active = 0;
    l->gen++;
    while (l->busy) pthread_cond_wait(&l->cv_done, &l->mu);
    pthread_mutex_unlock(&l->mu);
  } else {
    l->active = 0;
    l->gen++;
  }
  return PX_OK;
}

int64_t px_loader_num_batches(const px_loader_t *l) { return l->num_batches; }
int64_t px_loader_num_samples(const px_loader_t *l) { return l->num_samples; }

int32_t px_loader_ready(px_loader_t *l) {
  if (!l->has_thread) return 0;
  pthread_mutex_lock(&l->mu);
  int64_t ready = l->active ? l->filled - l->taken : 0;
  pthread_mutex_unlock(&l->mu);
  return (int32_t)ready;
}

double px_loader_stall_seconds(const px_loader_t *l) { return l->stall_s; }

int64_t px_loader_skipped(const px_loader_t *l) { return l->sb ? px__sbatch_skipped(l->sb) : 0; }
