/* Internals of the data module (beside image/image_int.h, the data set
 * struct and what the image folders and the decoder share with it): the
 * integer PRNGs every random decision of the input pipeline uses
 * (splitmix64 to hash keys, xoshiro256** for streams), chosen because their
 * output is fixed by their definition on every platform. */
#ifndef PX_DATA_INT_H
#define PX_DATA_INT_H

#include <stdint.h>

#include "image/image_int.h"
#include "prunex/data.h"

/* Largest data set the pipeline handles (indices are uint32, counts int32
 * fit comfortably). */
#define PX__DATA_MAX_N ((int64_t)INT32_MAX)

/* Domain constants so that the shuffle, augmentation and synthetic streams
 * of one seed are independent. */
#define PX__DOMAIN_SHUFFLE 0x53485546464c4531ull /* "SHUFFLE1" */
#define PX__DOMAIN_AUGMENT 0x4155474d454e5431ull /* "AUGMENT1" */
#define PX__DOMAIN_SYNTH 0x53594e5448455431ull   /* "SYNTHET1" */
#define PX__DOMAIN_DATASET 0x4441544153455431ull /* "DATASET1" */

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
