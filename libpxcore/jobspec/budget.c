/* The iteration budget a spec derives (admm.max_iterations left out): the
 * epochs over the training images of the data set actually named, counted
 * where the spec is parsed (dataset.train_samples), never assumed: an image
 * folder's files, the IDX header of Fashion-MNIST's training images,
 * CIFAR-10's batch files. A spec completed from the wire (the coordinator,
 * pxctl submit --nodes) derives from the count the parser recorded. */
#include <inttypes.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>

#include <zlib.h>

#include "jobspec/jobspec_int.h"
#include "prunex/image.h"
#include "prunex/jobspec.h"
#include "px_check.h"

#define PX__JS_FMNIST_DIR "/usr/share/datasets/fashion-mnist"
#define PX__JS_CIFAR_RECORD 3073 /* label byte + 3 x 32 x 32 */

/* The image count of an IDX image file (plain or gzip), 0 when unreadable. */
static int64_t px__js_idx_count(const char *path) {
  gzFile f = gzopen(path, "rb");
  if (!f) return 0;
  unsigned char h[8];
  int got = gzread(f, h, sizeof h);
  gzclose(f);
  if (got != (int)sizeof h || h[0] || h[1] || h[2] != 0x08 || h[3] != 0x03) return 0;
  return (int64_t)h[4] << 24 | (int64_t)h[5] << 16 | (int64_t)h[6] << 8 | h[7];
}

static int64_t px__js_fmnist_count(const char *dir) {
  char p[4200];
  const char *names[2] = {"train-images-idx3-ubyte.gz", "train-images-idx3-ubyte"};
  for (int i = 0; i < 2; i++) {
    snprintf(p, sizeof p, "%s/%s", dir && dir[0] ? dir : PX__JS_FMNIST_DIR, names[i]);
    int64_t n = px__js_idx_count(p);
    if (n > 0) return n;
  }
  return 0;
}

/* CIFAR-10's five training batch files in dir (or its cifar-10-batches-bin/,
 * as the loader takes them): records by their sizes, 0 if one is missing. */
static int64_t px__js_cifar_count(const char *dir) {
  const char *sub[2] = {"", "/cifar-10-batches-bin"};
  for (int k = 0; k < 2; k++) {
    int64_t n = 0;
    for (int i = 1; i <= 5; i++) {
      char p[4200];
      struct stat sb;
      snprintf(p, sizeof p, "%s%s/data_batch_%d.bin", dir, sub[k], i);
      if (stat(p, &sb) != 0 || sb.st_size % PX__JS_CIFAR_RECORD) {
        n = 0;
        break;
      }
      n += sb.st_size / PX__JS_CIFAR_RECORD;
    }
    if (n > 0) return n;
  }
  return 0;
}

int64_t px__js_count_train(const Prunex__V1__JobSpec *spec) {
  const Prunex__V1__DatasetSpec *d = spec->dataset;
  if (!d || !d->name) return 0;
  const char *path = d->path ? d->path : "";
  int64_t files = 0;
  if (!strcmp(d->name, "folder"))
    return path[0] && px_folder_check(path, NULL, &files) == PX_OK ? files : 0;
  if (!strcmp(d->name, "fashion-mnist")) return px__js_fmnist_count(path);
  if (!strcmp(d->name, "cifar10") && path[0]) return px__js_cifar_count(path);
  return 0;
}

/* Training samples the budget is derived from: the parser's count, else
 * the set's standard size; 0 for a folder nobody counted. */
static int64_t px__js_train_samples(const Prunex__V1__JobSpec *spec) {
  const Prunex__V1__DatasetSpec *d = spec->dataset;
  const char *n = d && d->name ? d->name : "";
  if (!strcmp(n, "synthetic")) return 10 * (int64_t)spec->train->batch_size;
  if (d && d->train_samples > 0) return d->train_samples;
  if (!strcmp(n, "cifar10")) return 50000;
  if (!strcmp(n, "fashion-mnist")) return 60000;
  return 0;
}

int32_t px__js_derive_max_iterations(const Prunex__V1__JobSpec *spec) {
  const Prunex__V1__TrainSpec *t = spec->train;
  const Prunex__V1__ClusterSpec *c = spec->cluster;
  if (!t || !c) return 1;
  int64_t epochs = t->epochs > 0 ? t->epochs : 1, iters;
  if (t->local_steps > 0) {
    int64_t world = (int64_t)(c->nodes > 0 ? c->nodes : 1) *
                    (c->workers_per_node > 0 ? c->workers_per_node : 1);
    int64_t batch = t->batch_size > 0 ? t->batch_size : 1, samples = px__js_train_samples(spec);
    if (samples < 1) return 0;
    int64_t steps = samples / world / batch;
    if (steps < 1) steps = 1;
    iters = (epochs * steps + t->local_steps - 1) / t->local_steps;
  } else if (t->local_epochs > 0) {
    iters = (epochs + t->local_epochs - 1) / t->local_epochs;
  } else {
    iters = epochs; /* ddp / topk: one per epoch, unused */
  }
  if (iters < 1) iters = 1;
  return iters > INT32_MAX ? INT32_MAX : (int32_t)iters;
}

px_status_t px__js_underived(const Prunex__V1__JobSpec *spec, const char *prefix) {
  return px_set_error(PX_ERR_INVALID,
                      "%sadmm.max_iterations: not given and not derivable: the training images "
                      "of image folder '%.200s' were not counted (they are counted where the "
                      "spec is parsed, on a machine that sees the folder); give "
                      "admm.max_iterations or dataset.train_samples",
                      prefix, spec->dataset && spec->dataset->path ? spec->dataset->path : "");
}

int px_jobspec_budget_text(const Prunex__V1__JobSpec *spec, char *buf, size_t cap) {
  if (!buf || !cap) return 0;
  buf[0] = '\0';
  if (!spec || !spec->train || !spec->cluster || !spec->admm || !spec->dataset) return 0;
  const Prunex__V1__TrainSpec *t = spec->train;
  int32_t derived = px__js_derive_max_iterations(spec);
  if (derived < 1 || derived != spec->admm->max_iterations) return 0;
  int64_t samples = px__js_train_samples(spec);
  if (t->local_steps > 0)
    snprintf(buf, cap,
             "%" PRId32 " iterations, derived: %d epoch%s of %" PRId64 " training images%s over "
             "%d node%s x %d worker%s, batch %d, %d local step%s per iteration",
             derived, t->epochs, t->epochs == 1 ? "" : "s", samples,
             spec->dataset->train_samples > 0 || !strcmp(spec->dataset->name, "synthetic")
                 ? ""
                 : " (the set's standard size)",
             spec->cluster->nodes, spec->cluster->nodes == 1 ? "" : "s",
             spec->cluster->workers_per_node, spec->cluster->workers_per_node == 1 ? "" : "s",
             t->batch_size, t->local_steps, t->local_steps == 1 ? "" : "s");
  else
    snprintf(buf, cap, "%" PRId32 " iterations, derived: %d epoch%s, %d local epoch%s each",
             derived, t->epochs, t->epochs == 1 ? "" : "s", t->local_epochs,
             t->local_epochs == 1 ? "" : "s");
  return 1;
}
