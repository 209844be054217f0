/* IDX reader (the MNIST family's format) and the Fashion-MNIST loader.
 *
 * Files are read through zlib's gz* functions, which decompress gzip data and
 * pass plain files through unchanged, so one code path reads both. A header
 * can announce more data than the file holds, so the buffers grow as records
 * actually arrive: a lying header fails as a truncated file, never as a huge
 * allocation. Every error names the file and what is wrong with it. */
#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>
#include <zlib.h>

#include "data_int.h"
#include "px_check.h"

#define PX__IDX_MAX_DIM 4096u
#define PX__IDX_MAX_PAD 1024

typedef struct {
  gzFile gz;
  const char *path;
  uint64_t offset;  /* uncompressed bytes consumed */
  uint64_t expect;  /* uncompressed bytes the header announces (for messages) */
  int want_gzip;    /* the name ends in .gz: the content must be gzip data */
  int checked;      /* whether the gzip-ness was checked (after the first read) */
} px__idx_file_t;

static px_status_t px__idx_open(px__idx_file_t *f, const char *path) {
  memset(f, 0, sizeof *f);
  f->path = path;
  size_t len = strlen(path);
  f->want_gzip = len >= 3 && strcmp(path + len - 3, ".gz") == 0;
  errno = 0;
  f->gz = gzopen(path, "rb");
  if (!f->gz) {
    return px_set_error(PX_ERR_IO, "cannot open %s: %s", path,
                        errno ? strerror(errno) : "out of memory");
  }
  gzbuffer(f->gz, 1u << 17);
  return PX_OK;
}

static void px__idx_close(px__idx_file_t *f) {
  if (f->gz) gzclose_r(f->gz);
  f->gz = NULL;
}

/* zlib's error message without the "path: " it starts with. */
static const char *px__idx_gzmsg(px__idx_file_t *f, int *err) {
  const char *msg = gzerror(f->gz, err);
  size_t plen = strlen(f->path);
  if (strncmp(msg, f->path, plen) == 0 && msg[plen] == ':' && msg[plen + 1] == ' ') {
    msg += plen + 2;
  }
  return msg;
}

/* Turns a failed gzread into a status and message. */
static px_status_t px__idx_gzfail(px__idx_file_t *f, const char *what) {
  int err = Z_OK;
  const char *msg = px__idx_gzmsg(f, &err);
  if (err == Z_ERRNO) {
    return px_set_error(PX_ERR_IO, "%s: read error in %s: %s", f->path, what, strerror(errno));
  }
  if (err == Z_MEM_ERROR) {
    return px_set_error(PX_ERR_NOMEM, "%s: out of memory decompressing %s", f->path, what);
  }
  return px_set_error(PX_ERR_FORMAT, "%s: bad gzip data (%s) while reading the %s", f->path, msg,
                      what);
}

/* Reads exactly len bytes of `what`; a short read is a truncated file. */
static px_status_t px__idx_read(px__idx_file_t *f, void *buf, size_t len, const char *what) {
  size_t done = 0;
  while (done < len) {
    size_t want = len - done;
    unsigned chunk = want > (1u << 30) ? (1u << 30) : (unsigned)want;
    int got = gzread(f->gz, (char *)buf + done, chunk);
    if (got < 0) return px__idx_gzfail(f, what);
    if (!f->checked) {
      f->checked = 1;
      if (f->want_gzip && gzdirect(f->gz)) {
        return px_set_error(PX_ERR_FORMAT, "%s: not gzip data (bad gzip magic) although the "
                            "name ends in .gz", f->path);
      }
    }
    if (got == 0) break;
    done += (size_t)got;
  }
  f->offset += done;
  if (done < len) {
    int err = Z_OK;
    const char *msg = px__idx_gzmsg(f, &err);
    uint64_t expect = f->expect > f->offset ? f->expect : f->offset + (len - done);
    return px_set_error(PX_ERR_FORMAT,
                        "%s: truncated: the data ends after %llu of %llu bytes, in the %s%s%s%s",
                        f->path, (unsigned long long)f->offset, (unsigned long long)expect, what,
                        err == Z_BUF_ERROR ? " (gzip: " : "", err == Z_BUF_ERROR ? msg : "",
                        err == Z_BUF_ERROR ? ")" : "");
  }
  return PX_OK;
}

/* After the announced data: nothing may follow, and a gzip stream must end
 * cleanly (its CRC is checked here). */
static px_status_t px__idx_expect_end(px__idx_file_t *f) {
  unsigned char extra;
  int got = gzread(f->gz, &extra, 1);
  if (got < 0) return px__idx_gzfail(f, "the end of the data");
  if (got > 0) {
    return px_set_error(PX_ERR_FORMAT, "%s: unexpected data after the %llu bytes the header "
                        "announces", f->path, (unsigned long long)f->offset);
  }
  int err = Z_OK;
  const char *msg = px__idx_gzmsg(f, &err);
  if (err == Z_BUF_ERROR) {
    return px_set_error(PX_ERR_FORMAT, "%s: truncated gzip stream (%s)", f->path, msg);
  }
  return PX_OK;
}

static uint32_t px__be32(const uint8_t *p) {
  return ((uint32_t)p[0] << 24) | ((uint32_t)p[1] << 16) | ((uint32_t)p[2] << 8) | p[3];
}

/* Reads the magic and the ndim dimensions of an IDX ubyte file. */
static px_status_t px__idx_header(px__idx_file_t *f, int ndim, uint32_t *dims) {
  uint8_t hdr[16];
  f->expect = 4 + 4 * (uint64_t)ndim;
  PX_CHECK(px__idx_read(f, hdr, 4 + 4 * (size_t)ndim, "IDX header"));
  uint32_t magic = px__be32(hdr);
  uint32_t want = 0x0800u | (uint32_t)ndim;
  if (magic != want) {
    return px_set_error(PX_ERR_FORMAT, "%s: bad IDX magic 0x%08x (expected 0x%08x: unsigned "
                        "bytes, %d dimension%s)", f->path, magic, want, ndim, ndim > 1 ? "s" : "");
  }
  for (int i = 0; i < ndim; i++) dims[i] = px__be32(hdr + 4 + 4 * i);
  return PX_OK;
}

/* Where a chunk of records goes in the output buffer. */
typedef void (*px__place_fn)(const uint8_t *src, size_t nrec, const void *ctx, uint8_t *dst);

typedef struct {
  uint32_t rows, cols;
  int32_t pad;
} px__pad_ctx_t;

static void px__place_copy(const uint8_t *src, size_t nrec, const void *ctx, uint8_t *dst) {
  (void)ctx;
  memcpy(dst, src, nrec);
}

/* Copies images of rows x cols into the centre of (rows+2p) x (cols+2p). */
static void px__place_pad(const uint8_t *src, size_t nrec, const void *ctx, uint8_t *dst) {
  const px__pad_ctx_t *p = ctx;
  size_t ow = p->cols + 2 * (size_t)p->pad, oh = p->rows + 2 * (size_t)p->pad;
  memset(dst, 0, nrec * ow * oh);
  for (size_t i = 0; i < nrec; i++) {
    const uint8_t *s = src + i * p->rows * p->cols;
    uint8_t *d = dst + i * ow * oh + (size_t)p->pad * ow + (size_t)p->pad;
    for (uint32_t r = 0; r < p->rows; r++) memcpy(d + r * ow, s + (size_t)r * p->cols, p->cols);
  }
}

/* Reads count records of in_rec bytes, placing each as out_rec bytes into
 * *out (owned by the caller on success). */
static px_status_t px__idx_read_records(px__idx_file_t *f, uint64_t count, size_t in_rec,
                                        size_t out_rec, px__place_fn place, const void *ctx,
                                        const char *what, uint8_t **out) {
  size_t per_chunk = ((size_t)1 << 20) / in_rec;
  if (per_chunk == 0) per_chunk = 1;
  size_t cap = ((size_t)16 << 20) / out_rec;
  if (cap < per_chunk) cap = per_chunk;
  if (cap > count) cap = (size_t)count;
  px_status_t st = PX_OK;
  uint8_t *chunk = px_malloc(per_chunk * in_rec, "data.idx_chunk");
  uint8_t *buf = px_malloc(cap * out_rec, "data.idx_records");
  if (!chunk || !buf) {
    st = PX_ERR_NOMEM;
    goto fail;
  }
  for (uint64_t done = 0; done < count;) {
    size_t k = count - done < per_chunk ? (size_t)(count - done) : per_chunk;
    PX_CHECK_GOTO(px__idx_read(f, chunk, k * in_rec, what), st, fail);
    if (done + k > cap) {
      size_t ncap = cap * 2 < count ? cap * 2 : (size_t)count;
      uint8_t *nbuf = px_realloc(buf, ncap * out_rec, "data.idx_records");
      if (!nbuf) {
        st = PX_ERR_NOMEM;
        goto fail;
      }
      buf = nbuf;
      cap = ncap;
    }
    place(chunk, k, ctx, buf + done * out_rec);
    done += k;
  }
  px_free(chunk);
  *out = buf;
  return PX_OK;
fail:
  px_free(chunk);
  px_free(buf);
  return st;
}

/* The IDX pair reader behind both public entry points; expect_h/expect_w of
 * 0 accept any image size. */
static px_status_t px__idx_load(const char *images_path, const char *labels_path,
                                int32_t num_classes, int32_t pad, uint32_t expect_h,
                                uint32_t expect_w, const char *name, px_dataset_t **out) {
  PX_REQUIRE(images_path && labels_path && out, "px_dataset_load_idx: NULL argument");
  PX_REQUIRE(num_classes >= 1 && num_classes <= 256, "IDX classes %d: must be in 1..256",
             num_classes);
  PX_REQUIRE(pad >= 0 && pad <= PX__IDX_MAX_PAD, "IDX padding %d: must be in 0..%d", pad,
             PX__IDX_MAX_PAD);
  px_status_t st = PX_OK;
  px__idx_file_t fi = {0}, fl = {0};
  uint8_t *images = NULL, *labels = NULL;
  uint32_t idims[3] = {0}, ldims[1] = {0}; /* set by the header read; zero quiets -Wmaybe-uninitialized */
  px__pad_ctx_t pctx;
  px_dataset_info_t info;

  PX_CHECK_GOTO(px__idx_open(&fi, images_path), st, done);
  PX_CHECK_GOTO(px__idx_open(&fl, labels_path), st, done);
  PX_CHECK_GOTO(px__idx_header(&fi, 3, idims), st, done);
  PX_CHECK_GOTO(px__idx_header(&fl, 1, ldims), st, done);
  if (idims[0] == 0 || idims[0] > (uint32_t)PX__DATA_MAX_N) {
    st = px_set_error(PX_ERR_FORMAT, "%s: image count %u must be in 1..%lld", images_path,
                      idims[0], (long long)PX__DATA_MAX_N);
    goto done;
  }
  if (idims[1] == 0 || idims[2] == 0 || idims[1] > PX__IDX_MAX_DIM ||
      idims[2] > PX__IDX_MAX_DIM) {
    st = px_set_error(PX_ERR_FORMAT, "%s: bad image dimensions %ux%u (each must be in 1..%u)",
                      images_path, idims[1], idims[2], PX__IDX_MAX_DIM);
    goto done;
  }
  if (expect_h && (idims[1] != expect_h || idims[2] != expect_w)) {
    st = px_set_error(PX_ERR_FORMAT, "%s: wrong image dimensions %ux%u (expected %ux%u)",
                      images_path, idims[1], idims[2], expect_h, expect_w);
    goto done;
  }
  if (ldims[0] != idims[0]) {
    st = px_set_error(PX_ERR_FORMAT, "%s has %u labels but %s has %u images", labels_path,
                      ldims[0], images_path, idims[0]);
    goto done;
  }

  fl.expect = fl.offset + ldims[0];
  PX_CHECK_GOTO(px__idx_read_records(&fl, ldims[0], 1, 1, px__place_copy, NULL, "labels",
                                     &labels), st, done);
  PX_CHECK_GOTO(px__idx_expect_end(&fl), st, done);
  for (uint32_t i = 0; i < ldims[0]; i++) {
    if (labels[i] >= num_classes) {
      st = px_set_error(PX_ERR_FORMAT, "%s: label %u of sample %u is out of range 0..%d",
                        labels_path, labels[i], i, num_classes - 1);
      goto done;
    }
  }

  pctx.rows = idims[1];
  pctx.cols = idims[2];
  pctx.pad = pad;
  size_t in_rec = (size_t)idims[1] * idims[2];
  size_t out_rec = (idims[1] + 2 * (size_t)pad) * (idims[2] + 2 * (size_t)pad);
  fi.expect = fi.offset + (uint64_t)idims[0] * in_rec;
  PX_CHECK_GOTO(px__idx_read_records(&fi, idims[0], in_rec, out_rec, px__place_pad, &pctx,
                                     "pixel data", &images), st, done);
  PX_CHECK_GOTO(px__idx_expect_end(&fi), st, done);

  memset(&info, 0, sizeof info);
  info.n = idims[0];
  info.channels = 1;
  info.height = (int32_t)(idims[1] + 2 * (uint32_t)pad);
  info.width = (int32_t)(idims[2] + 2 * (uint32_t)pad);
  info.num_classes = num_classes;
  info.mean[0] = 0.5f;
  info.std[0] = 0.5f;
  st = px__dataset_wrap(&info, images, labels, name, out);
  images = labels = NULL; /* owned by the data set now, or freed */
done:
  px__idx_close(&fi);
  px__idx_close(&fl);
  px_free(images);
  px_free(labels);
  return st;
}

px_status_t px_dataset_load_idx(const char *images_path, const char *labels_path,
                                int32_t num_classes, int32_t pad, px_dataset_t **out) {
  return px__idx_load(images_path, labels_path, num_classes, pad, 0, 0, "idx", out);
}

px_status_t px_data_write_file(const char *path, const void *data, size_t len) {
  PX_REQUIRE(path && (data || len == 0), "px_data_write_file: NULL argument");
  const uint8_t *p = data;
  size_t plen = strlen(path);
  if (plen >= 3 && strcmp(path + plen - 3, ".gz") == 0) {
    errno = 0;
    gzFile gz = gzopen(path, "wb");
    if (!gz) {
      return px_set_error(PX_ERR_IO, "cannot create %s: %s", path,
                          errno ? strerror(errno) : "out of memory");
    }
    int ok = 1;
    for (size_t done = 0; ok && done < len;) {
      unsigned k = len - done > (1u << 30) ? (1u << 30) : (unsigned)(len - done);
      ok = gzwrite(gz, p + done, k) == (int)k;
      done += k;
    }
    int rc = gzclose_w(gz);
    if (!ok || rc != Z_OK) return px_set_error(PX_ERR_IO, "cannot write %s", path);
    return PX_OK;
  }
  FILE *fp = fopen(path, "wb");
  if (!fp) return px_set_error(PX_ERR_IO, "cannot create %s: %s", path, strerror(errno));
  int ok = len == 0 || fwrite(p, 1, len, fp) == len;
  if (fclose(fp) != 0) ok = 0;
  if (!ok) return px_set_error(PX_ERR_IO, "cannot write %s: %s", path, strerror(errno));
  return PX_OK;
}

/* dir/base.gz when it exists, else dir/base when that exists. */
static px_status_t px__fmnist_path(const char *dir, const char *base, char *buf, size_t cap) {
  int len = snprintf(buf, cap, "%s/%s.gz", dir, base);
  PX_REQUIRE(len > 0 && (size_t)len < cap, "fashion-mnist: path %s/%s.gz is too long", dir, base);
  if (access(buf, F_OK) == 0) return PX_OK;
  snprintf(buf, cap, "%s/%s", dir, base);
  if (access(buf, F_OK) == 0) return PX_OK;
  return px_set_error(PX_ERR_IO, "fashion-mnist: missing %s/%s.gz (or %s/%s): %s", dir, base,
                      dir, base, strerror(errno));
}

px_status_t px_dataset_load_fashion_mnist(const char *dir, px_split_t split, px_dataset_t **out) {
  PX_REQUIRE(dir && out, "px_dataset_load_fashion_mnist: NULL argument");
  PX_REQUIRE(split == PX_SPLIT_TRAIN || split == PX_SPLIT_TEST,
             "fashion-mnist: unknown split %d", (int)split);
  const char *prefix = split == PX_SPLIT_TRAIN ? "train" : "t10k";
  char base[64], img[4096], lab[4096];
  snprintf(base, sizeof base, "%s-images-idx3-ubyte", prefix);
  PX_CHECK(px__fmnist_path(dir, base, img, sizeof img));
  snprintf(base, sizeof base, "%s-labels-idx1-ubyte", prefix);
  PX_CHECK(px__fmnist_path(dir, base, lab, sizeof lab));
  px_dataset_t *ds = NULL;
  PX_CHECK(px__idx_load(img, lab, 10, 2, 28, 28,
                        split == PX_SPLIT_TRAIN ? "fashion-mnist/train" : "fashion-mnist/test",
                        &ds));
  ds->info.mean[0] = px_fashion_mnist_mean[0];
  ds->info.std[0] = px_fashion_mnist_std[0];
  *out = ds;
  return PX_OK;
}
