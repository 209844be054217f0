/* PruneX data sets and input pipeline (libpxcore/data; docs/architecture.md,
 * "Data (`data/`)").
 *
 * Readers for Fashion-MNIST (IDX files, gzip-compressed or plain) and CIFAR-10
 * (binary batches) load a whole split into one px_dataset_t: uint8 images
 * [n][channels][height][width] and uint8 labels [n]. Fashion-MNIST images are
 * padded from 28x28 to 32x32 with two zero pixels on each side, so that the
 * same CIFAR-style networks take both sets.
 *
 * A px_loader_t turns a data set into float32 NCHW batches with int32 labels
 * for one rank of a data-parallel job:
 *
 *   1. every epoch all ranks compute the same permutation of 0..n-1 from
 *      (seed, epoch) (identity when shuffling is off);
 *   2. rank r takes its shard, a contiguous slice of that permutation
 *      (px_data_shard), so the ranks' samples are disjoint every epoch;
 *   3. each sample is optionally augmented (random crop from the image padded
 *      with zeros, random horizontal flip), the random choices being a pure
 *      function of (seed, epoch, sample index), and normalised per channel:
 *      x = (pixel / 255 - mean[c]) / std[c].
 *
 * Every random decision is made with the library's own integer PRNGs, so the
 * same seed and epoch give bit-identical batches on every machine, whatever
 * the number of prefetch threads or their timing.
 *
 * The loader can prepare batches ahead of the caller on a background thread
 * (prefetch > 0) into buffers allocated once at creation: iterating an epoch
 * allocates nothing. With prefetch = 0 it computes each batch synchronously in
 * px_loader_next (the evaluation path).
 *
 * Errors: unreadable or missing files give PX_ERR_IO, malformed ones
 * (truncated, bad magic, wrong dimensions, label out of range, bad gzip data,
 * image and label counts that differ, a CIFAR file whose size is not a
 * multiple of the record size) give PX_ERR_FORMAT; the message
 * (px_last_error) names the file and what is wrong. */
#ifndef PRUNEX_DATA_H
#define PRUNEX_DATA_H

#include <stddef.h>
#include <stdint.h>

#include "prunex/image.h"
#include "prunex/px.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Standard normalisation constants, in units of pixel / 255. The
 * Fashion-MNIST ones are the usual statistics of the 28x28 images (they are
 * applied unchanged to the 32x32 padded images, as is common practice). */
PX_API extern const float px_fashion_mnist_mean[1]; /* 0.2860 */
PX_API extern const float px_fashion_mnist_std[1];  /* 0.3530 */
PX_API extern const float px_cifar10_mean[3];       /* 0.4914, 0.4822, 0.4465 (R, G, B) */
PX_API extern const float px_cifar10_std[3];        /* 0.2470, 0.2435, 0.2616 */

/* ---- data sets ----------------------------------------------------------- */


/* Loads a Fashion-MNIST split from dir: train-{images-idx3,labels-idx1}-ubyte
 * (60000 samples) or t10k-... (10000), each file either gzip-compressed with
 * a .gz suffix (preferred when both exist) or plain without one. Images must
 * be 28x28 and come out padded to 1x32x32; 10 classes; mean/std are
 * px_fashion_mnist_*. The counts are not fixed, so subsets in the same
 * format load too. The caller owns *out (px_dataset_destroy). Fails with
 * PX_ERR_IO (missing or unreadable file), PX_ERR_FORMAT, PX_ERR_NOMEM,
 * PX_ERR_INVALID (NULL argument, path too long); *out is untouched then. */
PX_API px_status_t px_dataset_load_fashion_mnist(const char *dir, px_split_t split,
                                                 px_dataset_t **out);

/* Loads any IDX pair: an idx3 ubyte image file (magic 0x00000803) and an idx1
 * ubyte label file (0x00000801), each gzip-compressed or plain; a path ending
 * in ".gz" must be gzip data. Every image is surrounded by `pad` zero pixels
 * on each side (0 <= pad <= 1024), giving 1 x (rows+2*pad) x (cols+2*pad);
 * rows and cols must be 1..4096. Labels must be < num_classes (1..256). The
 * default mean/std are 0.5/0.5 (set the loader's mean/std for the real
 * statistics). Same ownership and errors as px_dataset_load_fashion_mnist. */
PX_API px_status_t px_dataset_load_idx(const char *images_path, const char *labels_path,
                                       int32_t num_classes, int32_t pad, px_dataset_t **out);

/* Writes len bytes to path (created or truncated), gzip-compressed when the
 * name ends in ".gz", so that what the readers accept can be produced: data
 * subsets, caches, test fixtures. Fails with PX_ERR_INVALID (NULL argument)
 * or PX_ERR_IO naming the file; a partly written file may remain then. */
PX_API px_status_t px_data_write_file(const char *path, const void *data, size_t len);

/* Loads a CIFAR-10 split from dir (or from dir/cifar-10-batches-bin when dir
 * itself has no data_batch_1.bin): data_batch_1.bin .. data_batch_5.bin for
 * the training split, test_batch.bin for the test split. 3x32x32, 10 classes,
 * mean/std px_cifar10_*. Same ownership and errors as above. */
PX_API px_status_t px_dataset_load_cifar10(const char *dir, px_split_t split, px_dataset_t **out);

/* Loads and concatenates CIFAR-10 binary files in the given order. Each file
 * is a sequence of 3073-byte records (label byte 0..9, then 3072 pixel bytes
 * in CHW order); any positive number of records per file is accepted (the
 * real files hold 10000). Same ownership and errors as above. */
PX_API px_status_t px_dataset_load_cifar10_files(const char *const *paths, int nfiles,
                                                 px_dataset_t **out);

/* Creates a data set from caller memory, which is copied: images
 * [n][channels][height][width] (NULL for all zeros) and labels [n] (NULL for
 * all zeros). info must be valid (n >= 1, 1 <= channels <= PX_DATA_MAX_CHANNELS,
 * positive height and width, 1 <= num_classes <= 256, std > 0). The caller owns
 * *out. Fails with PX_ERR_INVALID (bad info, label >= num_classes) or
 * PX_ERR_NOMEM. */
PX_API px_status_t px_dataset_create(const px_dataset_info_t *info, const uint8_t *images,
                                     const uint8_t *labels, px_dataset_t **out);

/* Creates a data set of uniformly random pixels (0..255) and uniformly random
 * labels, a pure function of (shape, seed). info->mean/std are kept, except
 * that a channel with std <= 0 gets mean 0.5 and std 0.2887 (uniform [0, 1]).
 * The caller owns *out. Fails like px_dataset_create. */
PX_API px_status_t px_dataset_create_synthetic(const px_dataset_info_t *info, uint64_t seed,
                                               px_dataset_t **out);

/* Frees the data set; NULL is a no-op. No loader may still use it. */
PX_API void px_dataset_destroy(px_dataset_t *ds);

/* Shape, classes and default normalisation; owned by ds, valid while it lives. */
PX_API const px_dataset_info_t *px_dataset_info(const px_dataset_t *ds);
/* Images [n][channels][height][width] and labels [n]; owned by ds, read-only. */
PX_API const uint8_t *px_dataset_images(const px_dataset_t *ds);
PX_API const uint8_t *px_dataset_labels(const px_dataset_t *ds);
/* Short description for logs, e.g. "fashion-mnist/train"; owned by ds. */
PX_API const char *px_dataset_name(const px_dataset_t *ds);

/* 1 when ds is a streamed image folder (see px_folder_config_t.cache_budget):
 * its images are not in memory (px_dataset_images is NULL, px_data_fill_batch
 * refuses it) and only a loader reads them; else 0. */
PX_API int32_t px_dataset_streamed(const px_dataset_t *ds);

/* ---- sharding, shuffling, augmentation, normalisation -------------------- */

typedef enum {
  /* The remainder is spread: the first n % world ranks get one extra sample.
   * All ranks together cover all n samples exactly once. */
  PX_SHARD_SPREAD = 0,
  /* The remainder is dropped: every rank gets exactly n / world samples (the
   * last n % world positions of the epoch's order go unused; with shuffling
   * they are different samples every epoch). Every rank then runs the same
   * number of steps, which synchronous collectives need. */
  PX_SHARD_EQUAL = 1,
} px_shard_mode_t;

/* Positions [*begin, *begin + *count) of an n-long sequence that belong to
 * rank (0 <= rank < world). Slices of consecutive ranks are adjacent and
 * ascending. Fails with PX_ERR_INVALID on n < 0, world < 1 or a rank out of
 * range. */
PX_API px_status_t px_data_shard(int64_t n, int32_t rank, int32_t world, px_shard_mode_t mode,
                                 int64_t *begin, int64_t *count);

/* Writes to perm[n] the permutation of 0..n-1 for (seed, epoch): a
 * Fisher-Yates shuffle driven by xoshiro256** seeded from (seed, epoch), so it
 * is the same on every machine and differs between epochs. Fails with
 * PX_ERR_INVALID on n < 0 or n > UINT32_MAX. */
PX_API px_status_t px_data_shuffle(int64_t n, uint64_t seed, int64_t epoch, uint32_t *perm);

/* Augmentation settings; all zero is no augmentation. */
typedef struct {
  int32_t crop_pad;  /* > 0: random crop of the original size from the image padded with
                        crop_pad zero pixels on each side (offsets 0..2*crop_pad) */
  int32_t flip;      /* != 0: horizontal flip with probability 1/2 */
  float rrc_scale;   /* > 0: random-resized crop instead of the padded crop: a
                        rectangle of rrc_scale..1 of the image's area and aspect
                        ratio 3/4..4/3 (torchvision's RandomResizedCrop), resized
                        back to the image's size; must be <= 1 */
} px_augment_t;

/* The random choices for one sample. */
typedef struct {
  int32_t dy, dx;  /* crop offsets in the padded image, 0..2*crop_pad; crop_pad when no crop */
  int32_t flip;    /* 1: mirror horizontally (after the crop) */
  px_rect_t rect;  /* random-resized crop: the rectangle taken, as fractions of the
                      image's width and height (0, 0, 1, 1 when rrc_scale is 0) */
} px_crop_flip_t;

/* Choices for sample `index` (its index in the data set) in `epoch`: a pure
 * function of its arguments. aug NULL means no augmentation. */
PX_API void px_augment_choose(const px_augment_t *aug, uint64_t seed, int64_t epoch, int64_t index,
                              px_crop_flip_t *out);

/* Applies a crop and flip to one uint8 image src[c][h][w]:
 *   out[ch][y][x] = padded[ch][y + dy][x' + dx], x' = flip ? w-1-x : x,
 * where padded is src surrounded by `pad` zeros. dst must not overlap src. */
PX_API void px_augment_apply_u8(const uint8_t *src, int32_t c, int32_t h, int32_t w, int32_t pad,
                                const px_crop_flip_t *cf, uint8_t *dst);

/* dst[ch][i] = (src[ch][i] / 255 - mean[ch]) / std[ch] for c channels of hw
 * pixels each. */
PX_API void px_data_normalize_u8(const uint8_t *src, int32_t c, int64_t hw, const float *mean,
                                 const float *std, float *dst);

/* Builds one batch from data set samples indices[0..n): x gets n float
 * images [n][c][h][w] (augmented when aug is not NULL and active, with
 * px_augment_choose(aug, seed, epoch, indices[i]), then normalised with
 * mean/std), y gets the n labels. Allocates nothing; safe to call from
 * several threads on the same data set. Fails with PX_ERR_INVALID on an
 * index out of range or n < 0 (x and y may then be partly written). */
PX_API px_status_t px_data_fill_batch(const px_dataset_t *ds, const uint32_t *indices, int32_t n,
                                      const px_augment_t *aug, const float *mean, const float *std,
                                      uint64_t seed, int64_t epoch, float *x, int32_t *y);

/* ---- batch loader --------------------------------------------------------- */

typedef struct px_loader px_loader_t;

typedef struct {
  int32_t batch_size;                /* >= 1 */
  int32_t rank, world_size;          /* this rank's shard: 0 <= rank < world_size */
  px_shard_mode_t shard_mode;
  uint64_t seed;                     /* shuffle and augmentation seed, same on all ranks */
  int32_t shuffle;                   /* != 0: new permutation every epoch; 0: data set order */
  int32_t drop_last;                 /* != 0: drop a final partial batch */
  px_augment_t augment;              /* all zero: off */
  float mean[PX_DATA_MAX_CHANNELS];  /* normalisation, pixel/255 units */
  float std[PX_DATA_MAX_CHANNELS];
  int32_t prefetch;                  /* batches prepared ahead on a background thread
                                        (1 = double buffering); 0 = synchronous */
  int32_t threads;                   /* a streamed image folder: threads that decode a
                                        batch (the producer among them), 0..256; 0: the
                                        online CPUs, at most PX_LOADER_DEFAULT_THREADS */
  /* Where the batch buffers x come from: NULL, px_malloc_aligned; else
   * host_alloc(bytes, host_ctx) at creation (NULL: out of memory) and
   * host_free(p, host_ctx) at destruction, e.g. cudaHostAlloc'd (pinned)
   * memory so that a batch's copy to the GPU can run asynchronously. */
  void *(*host_alloc)(size_t bytes, void *ctx);
  void (*host_free)(void *p, void *ctx);
  void *host_ctx;
} px_loader_config_t;

#define PX_LOADER_DEFAULT_THREADS 8

/* Training defaults for ds: batch 128, rank 0 of 1, PX_SHARD_EQUAL, seed 0,
 * shuffle on, drop_last off, no augmentation, the data set's mean/std,
 * prefetch 1. */
PX_API void px_loader_config_default(const px_dataset_t *ds, px_loader_config_t *out);

/* Evaluation defaults for ds: as above but PX_SHARD_SPREAD (every sample is
 * seen once across ranks), no shuffle, no augmentation, prefetch 0. */
PX_API void px_loader_config_eval(const px_dataset_t *ds, px_loader_config_t *out);

/* One batch. The buffers belong to the loader and stay valid until the next
 * px_loader_next, px_loader_end_epoch or px_loader_destroy. */
typedef struct {
  const float *x;      /* [n][channels][height][width] */
  const int32_t *y;    /* [n] */
  int32_t n;           /* samples in this batch, 1..batch_size */
  int32_t channels, height, width;
  int64_t index;       /* batch number within the epoch, from 0 */
  int64_t epoch;
} px_batch_t;

/* Creates a loader over ds, which is borrowed and must outlive the loader.
 * Allocates the permutation and the batch buffers (prefetch + 1 of them) and,
 * when prefetch > 0, starts the background thread, which idles until an
 * epoch begins. The caller owns *out (px_loader_destroy). Fails with
 * PX_ERR_INVALID (bad config), PX_ERR_NOMEM, PX_ERR_BACKEND (thread creation). */
PX_API px_status_t px_loader_create(const px_dataset_t *ds, const px_loader_config_t *cfg,
                                    px_loader_t **out);

/* Stops and joins the background thread (also in the middle of an epoch; it
 * waits at most for the batch being built) and frees everything. NULL is a
 * no-op. */
PX_API void px_loader_destroy(px_loader_t *l);

/* Starts epoch `epoch` (any value; it selects the permutation and the
 * augmentation choices): the background thread starts filling batches.
 * Fails with PX_ERR_STATE if an epoch is already active (call
 * px_loader_end_epoch first). */
PX_API px_status_t px_loader_begin_epoch(px_loader_t *l, int64_t epoch);
/* The same, starting at batch `first` of the epoch (0..batches): a resumed
 * job picks up its data order where its checkpoint left it. */
PX_API px_status_t px_loader_begin_epoch_at(px_loader_t *l, int64_t epoch, int64_t first);
/* Batches of the active epoch handed out so far (0 when none is active). */
PX_API int64_t px_loader_position(const px_loader_t *l);

/* Next batch of the active epoch. Returns 1 and fills *out, or 0 (PX_OK) when
 * the epoch has no more batches. Invalidates the previously returned batch.
 * Fails with PX_ERR_STATE when no epoch is active. Must be called from one
 * thread at a time. */
PX_API px_status_t px_loader_next(px_loader_t *l, px_batch_t *out);

/* Ends the active epoch, whether or not all its batches were taken: batches
 * prepared ahead are discarded and the last returned batch is invalidated.
 * A no-op when no epoch is active. Always PX_OK. */
PX_API px_status_t px_loader_end_epoch(px_loader_t *l);

/* Elastic jobs: this rank's shard becomes rank's of world_size
 * (the membership changed), from the next px_loader_begin_epoch on; the
 * lost ranks' samples are spread over the survivors, as px_data_shard
 * spreads them. Between epochs only (PX_ERR_STATE while one is active);
 * PX_ERR_INVALID for a rank outside 0..world_size-1. Allocates nothing. */
PX_API px_status_t px_loader_reshard(px_loader_t *l, int32_t rank, int32_t world_size);

/* Batches per epoch on this rank, and samples per epoch on this rank (after
 * sharding and drop_last). The same for every epoch. */
PX_API int64_t px_loader_num_batches(const px_loader_t *l);
PX_API int64_t px_loader_num_samples(const px_loader_t *l);

/* Batches of the active epoch already built ahead and not yet taken: at most
 * prefetch while the caller holds a batch, prefetch + 1 before the epoch's
 * first px_loader_next; 0 when no epoch is active or prefetch is 0. For
 * diagnostics and tests. */
PX_API int32_t px_loader_ready(px_loader_t *l);

/* Seconds px_loader_next has spent waiting for the background thread (with
 * prefetch) or building batches (without), since creation: the time compute
 * was held up by the input pipeline. */
PX_API double px_loader_stall_seconds(const px_loader_t *l);

/* Files of a streamed image folder this loader has found undecodable (and
 * replaced by the next good file) since creation; 0 for a data set held in
 * memory. */
PX_API int64_t px_loader_skipped(const px_loader_t *l);

/* ---- synthetic inputs for benchmarks --------------------------------------- */

typedef enum {
  PX_SYNTH_UNIFORM = 0,  /* uniform in [loc - scale, loc + scale) */
  PX_SYNTH_NORMAL = 1,   /* normal with mean loc and standard deviation scale */
} px_synth_dist_t;

typedef struct {
  int32_t channels, height, width;  /* every input is [channels][height][width] */
  int32_t num_classes;              /* labels uniform in 0..num_classes-1 */
  px_synth_dist_t dist;
  float loc, scale;
  uint64_t seed;
} px_synth_config_t;

/* 3x32x32, 10 classes, uniform in [-1, 1), seed 0. */
PX_API void px_synth_config_default(px_synth_config_t *out);

/* Writes batch `batch_index` of a synthetic stream: x[n][c][h][w] and y[n],
 * a pure function of (cfg, batch_index, n); allocates nothing and may be
 * called from several threads. Fails with PX_ERR_INVALID on a bad config
 * (non-positive dimensions or classes, scale < 0) or n < 0. */
PX_API px_status_t px_synth_batch(const px_synth_config_t *cfg, int64_t batch_index, int32_t n,
                                  float *x, int32_t *y);

#ifdef __cplusplus
}
#endif
#endif
