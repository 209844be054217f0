/* CIFAR-10 binary reader. A file is a sequence of 3073-byte records: the
 * label byte, then the 32x32 red, green and blue planes (CHW). The files
 * have no header, so their size is the only structure to check: it must be
 * a positive multiple of the record size, and every label must be 0..9. */
#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "data_int.h"
#include "px_check.h"

#define PX__CIFAR_PIXELS 3072
#define PX__CIFAR_RECORD (1 + PX__CIFAR_PIXELS)
#define PX__CIFAR_CLASSES 10
#define PX__CIFAR_MAX_FILES 64
#define PX__CIFAR_CHUNK 256 /* records read per fread */

/* Number of records in path, after checking its size. */
static px_status_t px__cifar_count(const char *path, int64_t *records) {
  struct stat sb;
  if (stat(path, &sb) != 0) {
    return px_set_error(PX_ERR_IO, "cannot open %s: %s", path, strerror(errno));
  }
  if (!S_ISREG(sb.st_mode)) {
    return px_set_error(PX_ERR_IO, "%s is not a regular file", path);
  }
  if (sb.st_size == 0) {
    return px_set_error(PX_ERR_FORMAT, "%s: empty file (expected %d-byte CIFAR-10 records)", path,
                        PX__CIFAR_RECORD);
  }
  if (sb.st_size % PX__CIFAR_RECORD != 0) {
    return px_set_error(PX_ERR_FORMAT, "%s: size %lld is not a multiple of the %d-byte record "
                        "size (truncated or not a CIFAR-10 binary file)", path,
                        (long long)sb.st_size, PX__CIFAR_RECORD);
  }
  *records = (int64_t)(sb.st_size / PX__CIFAR_RECORD);
  return PX_OK;
}

/* Reads `records` records of path into images/labels. */
static px_status_t px__cifar_read(const char *path, int64_t records, uint8_t *chunk,
                                  uint8_t *images, uint8_t *labels) {
  FILE *fp = fopen(path, "rb");
  if (!fp) return px_set_error(PX_ERR_IO, "cannot open %s: %s", path, strerror(errno));
  px_status_t st = PX_OK;
  for (int64_t done = 0; done < records;) {
    size_t k = records - done < PX__CIFAR_CHUNK ? (size_t)(records - done) : PX__CIFAR_CHUNK;
    size_t got = fread(chunk, PX__CIFAR_RECORD, k, fp);
    if (got != k) {
      if (ferror(fp)) {
        st = px_set_error(PX_ERR_IO, "%s: read error at record %lld: %s", path,
                          (long long)(done + (int64_t)got), strerror(errno));
      } else {
        st = px_set_error(PX_ERR_FORMAT, "%s: truncated: the file ends within record %lld of "
                          "%lld", path, (long long)(done + (int64_t)got), (long long)records);
      }
      goto done;
    }
    for (size_t i = 0; i < k; i++) {
      const uint8_t *rec = chunk + i * PX__CIFAR_RECORD;
      if (rec[0] >= PX__CIFAR_CLASSES) {
        st = px_set_error(PX_ERR_FORMAT, "%s: label %u of record %lld is out of range 0..%d",
                          path, rec[0], (long long)(done + (int64_t)i), PX__CIFAR_CLASSES - 1);
        goto done;
      }
      labels[done + (int64_t)i] = rec[0];
      memcpy(images + (size_t)(done + (int64_t)i) * PX__CIFAR_PIXELS, rec + 1, PX__CIFAR_PIXELS);
    }
    done += (int64_t)k;
  }
done:
  fclose(fp);
  return st;
}

static px_status_t px__cifar_load(const char *const *paths, int nfiles, const char *name,
                                  px_dataset_t **out) {
  PX_REQUIRE(paths && out, "px_dataset_load_cifar10_files: NULL argument");
  PX_REQUIRE(nfiles >= 1 && nfiles <= PX__CIFAR_MAX_FILES,
             "CIFAR-10: %d files: must be 1..%d", nfiles, PX__CIFAR_MAX_FILES);
  int64_t counts[PX__CIFAR_MAX_FILES];
  int64_t total = 0;
  for (int f = 0; f < nfiles; f++) {
    PX_REQUIRE(paths[f] != NULL, "CIFAR-10: path %d is NULL", f);
    PX_CHECK(px__cifar_count(paths[f], &counts[f]));
    total += counts[f];
  }
  if (total > PX__DATA_MAX_N) {
    return px_set_error(PX_ERR_FORMAT, "CIFAR-10: %lld records in all is more than %lld",
                        (long long)total, (long long)PX__DATA_MAX_N);
  }
  px_status_t st = PX_OK;
  uint8_t *chunk = px_malloc((size_t)PX__CIFAR_CHUNK * PX__CIFAR_RECORD, "data.cifar_chunk");
  uint8_t *images = px_malloc((size_t)total * PX__CIFAR_PIXELS, "data.images");
  uint8_t *labels = px_malloc((size_t)total, "data.labels");
  if (!chunk || !images || !labels) {
    st = PX_ERR_NOMEM;
    goto fail;
  }
  int64_t at = 0;
  for (int f = 0; f < nfiles; f++) {
    PX_CHECK_GOTO(px__cifar_read(paths[f], counts[f], chunk, images + (size_t)at * PX__CIFAR_PIXELS,
                                 labels + at),
                  st, fail);
    at += counts[f];
  }
  px_free(chunk);
  px_dataset_info_t info;
  memset(&info, 0, sizeof info);
  info.n = total;
  info.channels = 3;
  info.height = 32;
  info.width = 32;
  info.num_classes = PX__CIFAR_CLASSES;
  for (int c = 0; c < 3; c++) {
    info.mean[c] = px_cifar10_mean[c];
    info.std[c] = px_cifar10_std[c];
  }
  return px__dataset_wrap(&info, images, labels, name, out);
fail:
  px_free(chunk);
  px_free(images);
  px_free(labels);
  return st;
}

px_status_t px_dataset_load_cifar10_files(const char *const *paths, int nfiles,
                                          px_dataset_t **out) {
  return px__cifar_load(paths, nfiles, "cifar10", out);
}

px_status_t px_dataset_load_cifar10(const char *dir, px_split_t split, px_dataset_t **out) {
  PX_REQUIRE(dir && out, "px_dataset_load_cifar10: NULL argument");
  PX_REQUIRE(split == PX_SPLIT_TRAIN || split == PX_SPLIT_TEST, "CIFAR-10: unknown split %d",
             (int)split);
  /* The official archive unpacks into cifar-10-batches-bin/: accept its parent. */
  char root[4096], probe[4096];
  int len = snprintf(probe, sizeof probe, "%s/data_batch_1.bin", dir);
  PX_REQUIRE(len > 0 && (size_t)len < sizeof probe, "CIFAR-10: directory name %s is too long",
             dir);
  snprintf(root, sizeof root, "%s", dir);
  if (access(probe, F_OK) != 0) {
    len = snprintf(probe, sizeof probe, "%s/cifar-10-batches-bin", dir);
    PX_REQUIRE(len > 0 && (size_t)len + 32 < sizeof probe,
               "CIFAR-10: directory name %s is too long", dir);
    if (access(probe, F_OK) == 0) snprintf(root, sizeof root, "%s", probe);
  }
  char names[5][4096];
  const char *paths[5];
  int nfiles = 0;
  if (split == PX_SPLIT_TRAIN) {
    for (int i = 0; i < 5; i++) {
      len = snprintf(names[i], sizeof names[i], "%s/data_batch_%d.bin", root, i + 1);
      PX_REQUIRE(len > 0 && (size_t)len < sizeof names[i], "CIFAR-10: path too long");
      paths[nfiles++] = names[i];
    }
  } else {
    len = snprintf(names[0], sizeof names[0], "%s/test_batch.bin", root);
    PX_REQUIRE(len > 0 && (size_t)len < sizeof names[0], "CIFAR-10: path too long");
    paths[nfiles++] = names[0];
  }
  return px__cifar_load(paths, nfiles,
                        split == PX_SPLIT_TRAIN ? "cifar10/train" : "cifar10/test", out);
}
