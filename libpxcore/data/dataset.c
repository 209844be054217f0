/* The data set object: images and labels of one split held in memory as
 * uint8, created by the file readers, from caller memory, or synthetically.
 * Everything downstream (sharding, augmentation, batches) reads it without
 * locking, so it is immutable once created. */
#include <stdio.h>
#include <string.h>
#include <sys/mman.h>

#include "data_int.h"
#include "px_check.h"

const float px_fashion_mnist_mean[1] = {0.2860f};
const float px_fashion_mnist_std[1] = {0.3530f};
const float px_cifar10_mean[3] = {0.4914f, 0.4822f, 0.4465f};
const float px_cifar10_std[3] = {0.2470f, 0.2435f, 0.2616f};

px_status_t px__dataset_info_check(const px_dataset_info_t *info) {
  PX_REQUIRE(info != NULL, "data set info is NULL");
  PX_REQUIRE(info->n >= 1 && info->n <= PX__DATA_MAX_N, "data set size %lld: must be in 1..%lld",
             (long long)info->n, (long long)PX__DATA_MAX_N);
  PX_REQUIRE(info->channels >= 1 && info->channels <= PX_DATA_MAX_CHANNELS,
             "data set channels %d: must be in 1..%d", info->channels, PX_DATA_MAX_CHANNELS);
  PX_REQUIRE(info->height >= 1 && info->width >= 1 && info->height <= 65536 &&
                 info->width <= 65536,
             "data set image size %dx%d: both must be in 1..65536", info->height, info->width);
  PX_REQUIRE(info->num_classes >= 1 && info->num_classes <= 256,
             "data set classes %d: must be in 1..256", info->num_classes);
  for (int c = 0; c < info->channels; c++) {
    PX_REQUIRE(info->std[c] > 0.0f, "data set std[%d] = %g: must be positive", c,
               (double)info->std[c]);
  }
  size_t per = (size_t)info->channels * (size_t)info->height * (size_t)info->width;
  PX_REQUIRE((size_t)info->n <= SIZE_MAX / per, "data set of %lld images of %zu bytes is too large",
             (long long)info->n, per);
  return PX_OK;
}

static size_t px__image_bytes(const px_dataset_info_t *info) {
  return (size_t)info->channels * (size_t)info->height * (size_t)info->width;
}

px_status_t px__dataset_wrap(const px_dataset_info_t *info, uint8_t *images, uint8_t *labels,
                             const char *name, px_dataset_t **out) {
  px_dataset_t *ds = px_calloc(1, sizeof *ds, "data.dataset");
  if (!ds) {
    px_free(images);
    px_free(labels);
    return PX_ERR_NOMEM;
  }
  ds->info = *info;
  for (int c = info->channels; c < PX_DATA_MAX_CHANNELS; c++) {
    ds->info.mean[c] = 0.0f;
    ds->info.std[c] = 1.0f;
  }
  ds->images = images;
  ds->labels = labels;
  snprintf(ds->name, sizeof ds->name, "%s", name ? name : "dataset");
  *out = ds;
  return PX_OK;
}

static px_status_t px__dataset_alloc(const px_dataset_info_t *info, const char *name,
                                     px_dataset_t **out) {
  uint8_t *images = px_malloc((size_t)info->n * px__image_bytes(info), "data.images");
  uint8_t *labels = px_malloc((size_t)info->n, "data.labels");
  if (!images || !labels) {
    px_free(images);
    px_free(labels);
    return PX_ERR_NOMEM;
  }
  return px__dataset_wrap(info, images, labels, name, out);
}

px_status_t px_dataset_create(const px_dataset_info_t *info, const uint8_t *images,
                              const uint8_t *labels, px_dataset_t **out) {
  PX_REQUIRE(out != NULL, "px_dataset_create: out is NULL");
  PX_CHECK(px__dataset_info_check(info));
  if (labels) {
    for (int64_t i = 0; i < info->n; i++) {
      PX_REQUIRE(labels[i] < info->num_classes, "data set label %d of sample %lld: must be < %d",
                 labels[i], (long long)i, info->num_classes);
    }
  }
  px_dataset_t *ds = NULL;
  PX_CHECK(px__dataset_alloc(info, "memory", &ds));
  size_t nbytes = (size_t)info->n * px__image_bytes(info);
  if (images) {
    memcpy(ds->images, images, nbytes);
  } else {
    memset(ds->images, 0, nbytes);
  }
  if (labels) {
    memcpy(ds->labels, labels, (size_t)info->n);
  } else {
    memset(ds->labels, 0, (size_t)info->n);
  }
  *out = ds;
  return PX_OK;
}

px_status_t px_dataset_create_synthetic(const px_dataset_info_t *info, uint64_t seed,
                                        px_dataset_t **out) {
  PX_REQUIRE(out != NULL, "px_dataset_create_synthetic: out is NULL");
  PX_REQUIRE(info != NULL, "data set info is NULL");
  px_dataset_info_t fixed = *info;
  for (int c = 0; c < PX_DATA_MAX_CHANNELS; c++) {
    if (!(fixed.std[c] > 0.0f)) {
      fixed.mean[c] = 0.5f;
      fixed.std[c] = 0.2887f; /* 1/sqrt(12): uniform pixels */
    }
  }
  PX_CHECK(px__dataset_info_check(&fixed));
  px_dataset_t *ds = NULL;
  PX_CHECK(px__dataset_alloc(&fixed, "synthetic", &ds));
  px__rng_t rng;
  px__rng_seed(&rng, px__key(PX__DOMAIN_DATASET, seed, 0, 0));
  size_t nbytes = (size_t)fixed.n * px__image_bytes(&fixed);
  size_t i = 0;
  for (; i + 8 <= nbytes; i += 8) {
    uint64_t v = px__rng_u64(&rng);
    for (int b = 0; b < 8; b++) ds->images[i + (size_t)b] = (uint8_t)(v >> (8 * b));
  }
  for (; i < nbytes; i++) ds->images[i] = (uint8_t)(px__rng_u64(&rng) >> 56);
  for (int64_t k = 0; k < fixed.n; k++) {
    ds->labels[k] = (uint8_t)px__rng_below(&rng, (uint64_t)fixed.num_classes);
  }
  *out = ds;
  return PX_OK;
}

void px_dataset_destroy(px_dataset_t *ds) {
  if (!ds) return;
  px__fstream_free(ds->stream);
  if (ds->map) {
    munmap(ds->map, ds->map_len);
  } else {
    px_free(ds->images);
    px_free(ds->labels);
  }
  px_free(ds);
}

const px_dataset_info_t *px_dataset_info(const px_dataset_t *ds) { return &ds->info; }
const uint8_t *px_dataset_images(const px_dataset_t *ds) { return ds->images; }
const uint8_t *px_dataset_labels(const px_dataset_t *ds) { return ds->labels; }
const char *px_dataset_name(const px_dataset_t *ds) { return ds->name; }
int32_t px_dataset_streamed(const px_dataset_t *ds) { return ds->stream != NULL; }
