/* The streamed image-folder pipeline: DIR/train read, decoded, transformed
 * and normalised into NCHW float batches of 64 by px_loader over a split
 * forced onto the streaming path (a 1-byte cache budget), with THREADS
 * decoding threads (the caller among them, prefetch 0: nothing overlaps
 * the measurement), for EPOCHS epochs at SIZE x SIZE.
 *
 *   px_bench_data DIR train|eval THREADS EPOCHS SIZE
 *
 * train: RandomResizedCrop(SIZE, scale=(0.08, 1)) + flip; eval:
 * Resize(SIZE * 256/224) + CenterCrop(SIZE). Prints a row, then RESULT
 * images_per_sec and images_per_sec_per_thread. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "prunex/data.h"
#include "../px_bench_util.h"

int main(int argc, char **argv) {
  if (argc != 6 || (strcmp(argv[2], "train") && strcmp(argv[2], "eval"))) {
    fprintf(stderr, "usage: px_bench_data DIR train|eval THREADS EPOCHS SIZE\n");
    return 2;
  }
  int train = !strcmp(argv[2], "train"), threads = atoi(argv[3]), epochs = atoi(argv[4]);
  int size = atoi(argv[5]);
  px_folder_config_t fc = {argv[1], PX_SPLIT_TRAIN, 3, size, NULL, NULL, 0, NULL, 1};
  px_folder_report_t rep;
  px_dataset_t *ds;
  px_loader_config_t lc;
  px_loader_t *l;
  if (px_dataset_load_folder(&fc, &rep, &ds) != PX_OK) {
    fprintf(stderr, "px_bench_data: %s\n", px_last_error());
    return 1;
  }
  if (train) {
    px_loader_config_default(ds, &lc);
    lc.augment.rrc_scale = 0.08f;
    lc.augment.flip = 1;
  } else {
    px_loader_config_eval(ds, &lc);
  }
  lc.batch_size = 64;
  lc.prefetch = 0;
  lc.threads = threads;
  if (px_loader_create(ds, &lc, &l) != PX_OK) {
    fprintf(stderr, "px_bench_data: %s\n", px_last_error());
    return 1;
  }
  int64_t images = 0;
  double checksum = 0, t0 = 0;
  for (int e = 0; e <= epochs; e++) { /* epoch 0 warms the page cache and the buffers */
    if (e == 1) t0 = px__now();
    px_loader_begin_epoch(l, e);
    px_batch_t b;
    int r;
    while ((r = px_loader_next(l, &b)) == 1) {
      if (e > 0) images += b.n;
      checksum += b.x[0];
    }
    if (r < 0) {
      fprintf(stderr, "px_bench_data: %s\n", px_last_error());
      return 1;
    }
    px_loader_end_epoch(l);
  }
  double s = px__now() - t0, rate = (double)images / s;
  printf("ours  %-5s %lld images of %lld files at 3x%dx%d, %d thread(s)  %.2f s  %.0f images/s  "
         "(checksum %.3f)\n", argv[2], (long long)images, (long long)rep.files, size, size,
         threads, s, rate, checksum);
  printf("RESULT images_per_sec %.1f img/s\n", rate);
  printf("RESULT images_per_sec_per_thread %.1f img/s\n", rate / threads);
  px_loader_destroy(l);
  px_dataset_destroy(ds);
  return 0;
}
