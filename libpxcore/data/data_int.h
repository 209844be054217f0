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

#endif
