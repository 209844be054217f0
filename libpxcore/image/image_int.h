/* Internals of the image folders and the image decoder (image/): the data
 * set struct, which the folder loader (folder.c) fills and the data module
 * (data/) reads, the decoder's whole-file entry points, and the streamed
 * folder's files. Here rather than in data/data_int.h because folder.c and
 * image.c are spec-layer code (pxctl checks a folder with them, with no
 * engine linked): data/ includes this header, never the other way. */
#ifndef PX_IMAGE_INT_H
#define PX_IMAGE_INT_H

#include <stddef.h>
#include <stdint.h>

#include "prunex/image.h"

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

/* splitmix64 finaliser: a bijective 64-bit mix. */
static inline uint64_t px__mix64(uint64_t z) {
  z += 0x9e3779b97f4a7c15ull;
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

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

/* ---- streamed image folders (folder.c: the files; data/xform.c: one image;
 * data/stream.c: a batch) ----------------------------------------------------- */

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

#endif
