/* The image-folder pipeline on one core: the first pass (list, decode,
 * resize and crop every image of DIR/train, write the cache) at SIZE x SIZE,
 * then the feed from the cache: px_loader batches of 128 with the
 * random-resized crop and flip and the normalisation, built synchronously
 * on this thread (prefetch 0), for EPOCHS epochs at FEED x FEED.
 *
 *   px_bench_folder DIR CACHE_DIR SIZE FEED CHANNELS EPOCHS
 *
 * CACHE_DIR must not hold a cache of DIR yet (the first pass is timed).
 * Prints rows, then RESULT decode_images_per_sec_per_core and
 * feed_images_per_sec_per_core. */
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#include "prunex/data.h"
#include "../px_bench_util.h"

int main(int argc, char **argv) {
  if (argc != 7) {
    fprintf(stderr, "usage: px_bench_folder DIR CACHE_DIR SIZE FEED CHANNELS EPOCHS\n");
    return 2;
  }
  int size = atoi(argv[3]), feed = atoi(argv[4]), channels = atoi(argv[5]);
  int epochs = atoi(argv[6]);
  px_folder_config_t fc = {argv[1], PX_SPLIT_TRAIN, channels, size, argv[2], NULL, 0, NULL, 0};
  px_folder_report_t rep;
  px_dataset_t *ds;
  double t0 = px__now();
  if (px_dataset_load_folder(&fc, &rep, &ds) != PX_OK || !rep.built) {
    fprintf(stderr, "px_bench_folder: first pass: %s\n",
            rep.built ? px_last_error() : "a cache already existed");
    return 1;
  }
  double decode_s = px__now() - t0;
  double decode_rate = (double)rep.files / decode_s;
  printf("first pass  %lld images -> %dx%dx%d  %.2f s  %.0f images/s\n", (long long)rep.files,
         channels, size, size, decode_s, decode_rate);
  px_dataset_destroy(ds);

  fc.size = feed;
  if (px_dataset_load_folder(&fc, &rep, &ds) != PX_OK) {
    fprintf(stderr, "px_bench_folder: %s\n", px_last_error());
    return 1;
  }
  px_dataset_destroy(ds);
  t0 = px__now();
  if (px_dataset_load_folder(&fc, &rep, &ds) != PX_OK || rep.built) {
    fprintf(stderr, "px_bench_folder: the cache was not reused\n");
    return 1;
  }
  double map_s = px__now() - t0;
  px_loader_config_t lc;
  px_loader_config_default(ds, &lc);
  lc.prefetch = 0;
  lc.augment.rrc_scale = 0.35f;
  lc.augment.flip = 1;
  px_loader_t *l;
  if (px_loader_create(ds, &lc, &l) != PX_OK) {
    fprintf(stderr, "px_bench_folder: %s\n", px_last_error());
    return 1;
  }
  int64_t images = 0;
  double checksum = 0;
  t0 = px__now();
  for (int e = 0; e < epochs; e++) {
    px_loader_begin_epoch(l, e);
    px_batch_t b;
    while (px_loader_next(l, &b) == 1) {
      images += b.n;
      checksum += b.x[0];
    }
    px_loader_end_epoch(l);
  }
  double feed_s = px__now() - t0;
  double feed_rate = (double)images / feed_s;
  printf("cache feed  %lld images at %dx%dx%d (map %.3f s), random-resized crop + flip + "
         "normalise, batch 128  %.2f s  %.0f images/s  (checksum %.3f)\n",
         (long long)images, channels, feed, feed, map_s, feed_s, feed_rate, checksum);
  px_loader_destroy(l);
  px_dataset_destroy(ds);
  printf("RESULT decode_images_per_sec_per_core %.0f img/s\n", decode_rate);
  printf("RESULT feed_images_per_sec_per_core %.0f img/s\n", feed_rate);
  return 0;
}
