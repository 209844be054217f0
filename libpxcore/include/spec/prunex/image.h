/* PruneX image folders and images: the ImageFolder layout's check, which
 * a job submission runs without the engine (pxctl checks a spec's folder
 * with it), the folder's load into a mapped cache, and the JPEG/PNG decoder
 * and resampler that the load and the streaming loader share
 * (libpxcore/image). With the description of a data set (px_dataset_info_t)
 * that the load fills: the data sets' other readers and the loader are
 * data.h's, which includes this header. */
#ifndef PRUNEX_IMAGE_H
#define PRUNEX_IMAGE_H

#include <stddef.h>
#include <stdint.h>

#include "prunex/px.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Most channels a data set may have (per-channel normalisation arrays). */
#define PX_DATA_MAX_CHANNELS 8

typedef enum {
  PX_SPLIT_TRAIN = 0,
  PX_SPLIT_TEST = 1,
} px_split_t;

/* ---- data sets ----------------------------------------------------------- */

typedef struct px_dataset px_dataset_t;

typedef struct {
  int64_t n;                          /* samples, >= 1 */
  int32_t channels, height, width;    /* every image is [channels][height][width] */
  int32_t num_classes;                /* labels are 0..num_classes-1 */
  float mean[PX_DATA_MAX_CHANNELS];   /* default normalisation per channel, pixel/255 units */
  float std[PX_DATA_MAX_CHANNELS];    /* > 0 for every channel */
} px_dataset_info_t;

/* ---- image folders ---------------------------------------------------------
 *
 * A folder in the ImageFolder layout: dir/train/CLASS/NAME and
 * dir/val/CLASS/NAME, where NAME ends in .jpg, .jpeg or .png (any case; the
 * format is told by the file's first bytes). Classes are the
 * subdirectories of train/, sorted by name (label 0 is the first); val/ must
 * have the same ones, and every class at least one image in each split.
 * Names starting with '.' are ignored, and so are files of other
 * extensions.
 *
 * The first load of a split decodes every image (libjpeg-turbo, libpng),
 * scales its shorter side to `size` and crops the centre square (area
 * averaging when shrinking, bilinear when enlarging), and writes the result
 * to a cache file: a header with a checksum of the file list (names, sizes,
 * modification times) and of the settings, the labels, then the images
 * [n][channels][size][size]. Later loads, by this process or any other rank
 * on the node, map that file read-only (mmap) instead of decoding. The cache
 * is written to a temporary file and renamed into place while an exclusive
 * flock on "<cache>.lock" is held, so ranks that start together decode
 * once: the others wait on the lock, then map the finished file. The cache
 * file and its lock are made readable by their owner only (0600), a cache
 * directory made here 0700. An image that cannot be read or decoded is left
 * out and named (path and reason) in a warning; the count is in the report
 * and in the cache header. More than max_skipped of a split's files left
 * out fails the load, naming the count and the first reasons.
 *
 * Every directory and file of the folder is opened beneath `root`
 * (openat2 RESOLVE_BENEATH): a symbolic link is followed only while it
 * stays below the root (a link given as an absolute path is resolved and
 * then opened beneath the root without following any link). A file whose
 * link leads out of the root is never opened: it is skipped with the reason
 * "a link that leads outside the data root", which says nothing of its
 * target; a class directory or split that leads out fails the load.
 *
 * The cache directory is opened once and every cache file is made and
 * opened in it by name without following a link: dir/.prunex-
 * cache is made beneath the root and is not used when it is a link; an
 * explicit cache_dir must be under cache_root (or root) and is made beneath
 * it, a link leading out refused. A cache directory must be owned by the
 * effective user and writable by no one else (/tmp/prunex-cache-UID: mode
 * 0700): one another user could write to (or made first) is refused, as
 * such a user could plant a cache.
 *
 * A split whose decoded images would take more than cache_budget bytes
 * (default: PX_FOLDER_CACHE_SHARE of the machine's memory; ImageNet at
 * 224x224 is 190 GB) is streamed instead: the load lists its files and
 * decodes nothing, and a loader over it (px_loader_create) reads, decodes
 * and transforms each epoch's shard on px_loader_config_t.threads threads
 * into its prefetch + 1 batch buffers, torchvision's transforms straight from
 * the file: with augmentation (rrc_scale > 0) RandomResizedCrop(size,
 * scale=(rrc_scale, 1), ratio=(3/4, 4/3)) and the flip, without it
 * Resize(size * 256/224) + CenterCrop(size), Pillow's antialiased bilinear
 * filter in both. A JPEG is decoded at a reduced DCT scale where the crop
 * allows, and only the columns and rows the crop needs. The choices come
 * from (seed, epoch, index), so batches do not depend on the threads. A
 * file that cannot be decoded is skipped when first read, named in a
 * warning, counted (px_loader_skipped) and replaced by the next good file
 * of the data set; more than max_skipped of the split fails the batch
 * (px_loader_next: PX_ERR_FORMAT naming the count). mean/std are then
 * ImageNet's (0.485, 0.456, 0.406 / 0.229, 0.224, 0.225; grey 0.449 /
 * 0.226): the split's pixels are never all decoded at once. */

#define PX_IMAGE_MAX_SIDE 16384            /* pixels per side of a source image */
#define PX_IMAGE_MAX_PIXELS (1 << 26)      /* pixels of a source image */
#define PX_IMAGE_MAX_FILE_BYTES (64 << 20) /* bytes of one image file */
#define PX_IMAGE_MAX_SIZE 1024             /* side of a stored (cached) image */
#define PX_FOLDER_MAX_CLASSES 256
#define PX_FOLDER_MAX_FILES (1 << 24)      /* image files of one split */
#define PX_FOLDER_MAX_SKIPPED 0.01         /* share of files that may be skipped */
#define PX_FOLDER_CACHE_SHARE 0.25         /* of the memory: default decoded-cache budget */

typedef struct {
  const char *dir;        /* the folder (train/ and val/ under it) */
  px_split_t split;       /* PX_SPLIT_TRAIN: train/, PX_SPLIT_TEST: val/ */
  int32_t channels;       /* 1 (grey, BT.601 luma) or 3 (R, G, B) */
  int32_t size;           /* stored images are size x size, 1..PX_IMAGE_MAX_SIZE */
  const char *cache_dir;  /* NULL or "": dir/.prunex-cache, or, when that is not
                             usable, $XDG_CACHE_HOME/prunex ($HOME/.cache/prunex, else
                             /tmp/prunex-cache-UID); else made (0700) and used beneath
                             cache_root (relative: to the working directory) */
  const char *root;       /* NULL or "": dir itself; else a directory that dir is under
                             (as text): no file is read from outside it (pxworker: the
                             agent's data root that holds dataset.path) */
  double max_skipped;     /* share of the split's files, (0, 1], that may be left out:
                             more fails the load (1: any but all); 0: PX_FOLDER_MAX_SKIPPED
                             (dataset.max_skipped) */
  const char *cache_root; /* NULL or "": root as given (NULL: cache_dir is trusted, made
                             where it leads); else a directory that cache_dir must be
                             under (as text), made and opened beneath it (pxworker: the
                             agent's root that allowed dataset.cache_dir) */
  int64_t cache_budget;   /* bytes the split's decoded images may take in the cache; a
                             split that needs more is streamed (below); 0:
                             PX_FOLDER_CACHE_SHARE of the machine's memory
                             (dataset.cache_budget_mb) */
} px_folder_config_t;

typedef struct {
  int64_t files;          /* image files listed */
  int64_t skipped;        /* of them, unreadable or corrupt and left out */
  int32_t num_classes;
  int32_t built;          /* 1: this call decoded and wrote the cache; 0: it mapped one */
  char cache_path[4096];  /* the cache file used ("" when streamed) */
  int32_t streamed;       /* 1: too large for the cache budget, decoded every epoch by the
                             loader (skipped is then 0: files are found corrupt as read) */
} px_folder_report_t;

/* Loads one split of an image folder as a data set whose images are mapped
 * from the cache (building the cache first when it is missing, stale or
 * damaged). mean/std are the per-channel statistics of the split's stored
 * pixels, computed when the cache was built (the trainer normalises both
 * splits with the training split's). report may be NULL. The
 * caller owns *out (px_dataset_destroy unmaps it). Fails with PX_ERR_IO
 * (missing or unreadable directory, cache not writable anywhere),
 * PX_ERR_FORMAT (layout: missing split, empty or unmatched class, too many
 * classes or files, a name too long, a split or class that leads out of the
 * root; or every image corrupt, or more than max_skipped of them),
 * PX_ERR_INVALID (bad config, dir not under root, cache_dir not
 * under cache_root or leading out of it, a cache directory that another user
 * owns or may write to), PX_ERR_NOMEM; the message
 * names the path. */
PX_API px_status_t px_dataset_load_folder(const px_folder_config_t *cfg,
                                          px_folder_report_t *report, px_dataset_t **out);

/* Checks the layout of an image folder without decoding anything: both
 * splits exist, they have the same classes (at most PX_FOLDER_MAX_CLASSES),
 * and every class holds at least one image file in each. Sets *num_classes
 * and *train_files (either may be NULL). What job submission runs: it
 * reads no image and, having no data root, follows links anywhere. Fails
 * like px_dataset_load_folder, naming the directory at fault. */
PX_API px_status_t px_folder_check(const char *dir, int32_t *num_classes, int64_t *train_files);

/* The class names of an image folder (the subdirectories of dir/train/) in
 * label order, comma-separated, a ',' or '\' inside a name escaped with
 * '\': what a folder-trained model's file and its ONNX export record as the
 * classes. The caller owns *out (px_free). Fails like px_folder_check. */
PX_API px_status_t px_folder_class_names(const char *dir, char **out);

/* A float rectangle of a source image, in pixels (x, y: top-left corner). */
typedef struct {
  double x, y, w, h;
} px_rect_t;

/* A reusable decoder: its buffers grow to the largest image seen. */
typedef struct px_image_decoder px_image_decoder_t;

/* The caller owns *out (px_image_decoder_destroy). Fails with PX_ERR_NOMEM
 * or PX_ERR_BACKEND (libjpeg-turbo). */
PX_API px_status_t px_image_decoder_create(px_image_decoder_t **out);
PX_API void px_image_decoder_destroy(px_image_decoder_t *d);

/* Decodes a JPEG or PNG held in memory to dst[channels][size][size]: the
 * shorter side scaled to size and the centre square kept, rounded to uint8.
 * Fails with PX_ERR_FORMAT (not JPEG/PNG, corrupt, dimensions over the
 * limits; px_image_decoder_reason says why), PX_ERR_INVALID, PX_ERR_NOMEM. */
PX_API px_status_t px_image_decode(px_image_decoder_t *d, const uint8_t *buf, size_t len,
                                   int32_t channels, int32_t size, uint8_t *dst);
/* The same for a file (at most PX_IMAGE_MAX_FILE_BYTES); PX_ERR_IO when it
 * cannot be read. The message names the path. */
PX_API px_status_t px_image_decode_file(px_image_decoder_t *d, const char *path, int32_t channels,
                                        int32_t size, uint8_t *dst);
/* Why the last decode failed ("" after a success); owned by d. */
PX_API const char *px_image_decoder_reason(const px_image_decoder_t *d);

/* Resamples the rectangle crop of a w x h source with c channels, pixel
 * (x, y) of channel ch at src[ch*cstride + y*row + x*px], to an ow x oh
 * float image dst[c][oh][ow] = value * a[ch] + b[ch], mirrored when flip.
 * Area averaging when the rectangle is at least as large as the output on
 * both axes, bilinear (pixel centres at +0.5, borders clamped) otherwise.
 * Allocates nothing. */
PX_API void px_image_resample(const uint8_t *src, int32_t w, int32_t h, int32_t c, int32_t row,
                              int32_t px, int32_t cstride, const px_rect_t *crop, int32_t ow,
                              int32_t oh, int32_t flip, const float *a, const float *b,
                              float *dst);

#ifdef __cplusplus
}
#endif
#endif
