/* Internals of the data module: the data set struct shared by the readers,
 * and the integer PRNGs every random decision of the input pipeline uses
 * (splitmix64 to hash keys, xoshiro256** for streams), chosen because their
 * output is fixed by their definition on every platform. */
#ifndef PX_DATA_INT_H
#define PX_DATA_INT_H

#include <stdint.h>

#include "prunex/data.h"

struct px_dataset {
  px_dataset_info_t info;
  uint8_t *images;  /* [n][channels][height][width] */
  uint8_t *labels;  /* [n] */
  char name[64];
  void *map;        /* non-NULL: images and labels point into this read-only mapping
                       of map_len bytes (an image folder's cache), unmapped at destroy */
  size_t map_len;
  struct px__fstream *stream; /* non-NULL: a streamed image folder (images NULL, labels
                                 its files' classes): the loader decodes every epoch */
};

/* Largest data set the pipeline handles (indices are uint32, counts int32
 * fit comfortably). */
#define PX__DATA_MAX_N ((int64_t)INT32_MAX)

/* Domain constants so that the shuffle, augmentation and synthetic streams
 * of one seed are independent. */
#define PX__DOMAIN_SHUFFLE 0x53485546464c4531ull /* "SHUFFLE1" */
#define PX__DOMAIN_AUGMENT 0x4155474d454e5431ull /* "AUGMENT1" */
#define PX__DOMAIN_SYNTH 0x53594e5448455431ull   /* "SYNTHET1" */
#define PX__DOMAIN_DATASET 0x4441544153455431ull /* "DATASET1" */

/* splitmix64 finaliser: a bijective 64-bit mix. */
static inline uint64_t px__mix64(uint64_t z) {
  z += 0x9e3779b97f4a7c15ull;
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

/* Hash of a (domain, seed, a, b) key. */
static inline uint64_t px__key(uint64_t domain, uint64_t seed, uint64_t a, uint64_t b) {
  return px__mix64(px__mix64(px__mix64(px__mix64(domain) ^ seed) ^ a) ^ b);
}

typedef struct {
  uint64_t s[4];
} px__rng_t;

static inline void px__rng_seed(px__rng_t *r, uint64_t key) {
  for (int i = 0; i < 4; i++) {
    key = px__mix64(key);
    r->s[i] = key;
  }
  if (!(r->s[0] | r->s[1] | r->s[2] | r->s[3])) r->s[0] = 1; /* the one bad state */
}

static inline uint64_t px__rotl(uint64_t x, int k) { return (x << k) | (x >> (64 - k)); }

/* xoshiro256** */
static inline uint64_t px__rng_u64(px__rng_t *r) {
  uint64_t *s = r->s;
  uint64_t result = px__rotl(s[1] * 5, 7) * 9;
  uint64_t t = s[1] << 17;
  s[2] ^= s[0];
  s[3] ^= s[1];
  s[1] ^= s[2];
  s[0] ^= s[3];
  s[2] ^= t;
  s[3] = px__rotl(s[3], 45);
  return result;
}

/* Unbiased integer in [0, range), range >= 1 (Lemire's multiply-and-reject). */
static inline uint64_t px__rng_below(px__rng_t *r, uint64_t range) {
  unsigned __int128 m = (unsigned __int128)px__rng_u64(r) * range;
  uint64_t lo = (uint64_t)m;
  if (lo < range) {
    uint64_t threshold = (0 - range) % range;
    while (lo < threshold) {
      m = (unsigned __int128)px__rng_u64(r) * range;
      lo = (uint64_t)m;
    }
  }
  return (uint64_t)(m >> 64);
}

/* Uniform double in [0, 1) with 53 random bits. */
static inline double px__rng_uniform(px__rng_t *r) {
  return (double)(px__rng_u64(r) >> 11) * (1.0 / 9007199254740992.0);
}

/* Checks info as px_dataset_create documents; PX_ERR_INVALID with a message. */
px_status_t px__dataset_info_check(const px_dataset_info_t *info);

/* Wraps buffers allocated with px_malloc into a new data set, taking
 * ownership of them on success and on failure alike. */
px_status_t px__dataset_wrap(const px_dataset_info_t *info, uint8_t *images, uint8_t *labels,
                             const char *name, px_dataset_t **out);

/* px_image_decode_file on an open file (not closed here): a regular file of
 * at most PX_IMAGE_MAX_FILE_BYTES, read whole. Sets the decoder's reason
 * on PX_ERR_FORMAT and PX_ERR_IO (not the path: the caller names it). */
px_status_t px__image_decode_fd(px_image_decoder_t *d, int fd, int32_t channels, int32_t size,
                                uint8_t *dst);

/* PX_OK when a w x h image of format fmt ("JPEG", "PNG") is within
 * PX_IMAGE_MAX_SIDE and PX_IMAGE_MAX_PIXELS; otherwise PX_ERR_FORMAT with
 * the reason in why (cap bytes). */
px_status_t px__image_dims_check(char *why, size_t cap, const char *fmt, int64_t w, int64_t h);

/* The whole image in buf decoded to HWC pixels of `channels` at full scale
 * (*pix owned by d, valid until its next call): what the streaming path
 * resamples a PNG or a CMYK JPEG from. PX_ERR_FORMAT with d's reason. */
px_status_t px__image_decode_whole(px_image_decoder_t *d, const uint8_t *buf, size_t len,
                                   int32_t channels, const uint8_t **pix, int32_t *w,
                                   int32_t *h);

/* ---- streamed image folders (folder.c: the files; xform.c: one image;
 * stream.c: a batch) ---------------------------------------------------------- */

typedef struct px__fstream px__fstream_t;

/* Opens file i of the streamed split beneath the folder's root (O_RDONLY);
 * -1 with why[256] set when it cannot be (the file is then skipped). */
int px__fstream_open(const px__fstream_t *fs, int64_t i, char *why);
/* "CLASS/NAME" of file i, and the split's directory for messages
 * ("DIR/train"); owned by fs. */
const char *px__fstream_name(const px__fstream_t *fs, int64_t i);
const char *px__fstream_dir(const px__fstream_t *fs);
/* dataset.max_skipped of the load (a share of the split's files). */
double px__fstream_max_skipped(const px__fstream_t *fs);
void px__fstream_free(px__fstream_t *fs);

/* What to do to one image: RandomResizedCrop (min_scale > 0) or
 * Resize + CenterCrop (min_scale 0), flipped with probability 1/2 when flip,
 * the choices drawn from (seed, epoch, index). */
typedef struct {
  double min_scale;
  int32_t flip;
  uint64_t seed;
  int64_t epoch, index;
} px__xform_params_t;

/* The choices for a w x h source: box is mapped onto the output (output
 * pixel (ox, oy) samples around box.x + (ox + 0.5) * sx, box.y + (oy + 0.5)
 * * sy), nothing outside bounds is read. */
typedef struct {
  px_rect_t box, bounds;
  double sx, sy;
  int32_t flip;
} px__xform_geom_t;

void px__xform_choose(const px__xform_params_t *p, int32_t w, int32_t h, int32_t size,
                      px__xform_geom_t *g);

typedef struct px__xform px__xform_t;
px_status_t px__xform_create(int32_t channels, int32_t size, px__xform_t **out);
void px__xform_destroy(px__xform_t *x);
/* The image in buf (or read from fd) transformed to dst[channels][size]
 * [size] = pixel * a[c] + b[c]. PX_ERR_FORMAT (the file is to be skipped)
 * with px__xform_reason set; PX_ERR_NOMEM. Allocates only while its
 * buffers grow to the largest image seen. */
px_status_t px__xform_run(px__xform_t *x, const uint8_t *buf, size_t len,
                          const px__xform_params_t *p, const float *a, const float *b,
                          float *dst);
px_status_t px__xform_fd(px__xform_t *x, int fd, const px__xform_params_t *p, const float *a,
                         const float *b, float *dst);
const char *px__xform_reason(const px__xform_t *x);

/* A loader's decoding side for a streamed data set: a pool of threads and
 * one px__xform_t per thread, allocated at creation. */
typedef struct px__sbatch px__sbatch_t;
px_status_t px__sbatch_create(const px_dataset_t *ds, int32_t threads, px__sbatch_t **out);
void px__sbatch_destroy(px__sbatch_t *sb);
/* Fills x [n][c][size][size] and y [n] from data set samples indices[0..n)
 * (with p's transform, p->index set per sample). A file that cannot be
 * decoded is counted and replaced by the next good file of the data set;
 * PX_ERR_FORMAT once more than max_skipped of the files were, with the
 * message in err[512]. */
px_status_t px__sbatch_fill(px__sbatch_t *sb, const uint32_t *indices, int32_t n,
                            const px__xform_params_t *p, const float *a, const float *b,
                            float *x, int32_t *y, char *err);
/* Distinct files found undecodable so far. */
int64_t px__sbatch_skipped(const px__sbatch_t *sb);

#endif
