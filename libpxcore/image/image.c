/* Image files to uint8 pixels: JPEG through libjpeg-turbo (tjDecompress2),
 * PNG through libpng's simplified API, and the one resampler that both the
 * first pass (shorter side to the target size, centre crop) and the
 * training augmentation (random-resized crop) use.
 *
 * Everything read from a file is bounded before memory is sized from it:
 * the file's bytes (PX_IMAGE_MAX_FILE_BYTES), each side
 * (PX_IMAGE_MAX_SIDE) and the pixel count (PX_IMAGE_MAX_PIXELS). The format
 * is told by the file's first bytes, not by its name. */
#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <png.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <turbojpeg.h>
#include <unistd.h>

#include "image/image_int.h"
#include "px_check.h"

struct px_image_decoder {
  tjhandle tj;
  uint8_t *file;      /* [file_cap] the encoded bytes of the current file */
  size_t file_cap;
  uint8_t *pixels;    /* [pix_cap] decoded HWC pixels */
  size_t pix_cap;
  float *resampled;   /* [channels * size * size] before rounding */
  size_t res_cap;
  float *rowbuf;      /* [width * channels] one row of area sums */
  size_t row_cap;
  char why[256];      /* why the last image was refused */
};

px_status_t px_image_decoder_create(px_image_decoder_t **out) {
  PX_REQUIRE(out != NULL, "px_image_decoder_create: out is NULL");
  px_image_decoder_t *d = px_calloc(1, sizeof *d, "data.image_decoder");
  if (!d) return PX_ERR_NOMEM;
  d->tj = tjInitDecompress();
  if (!d->tj) {
    px_free(d);
    return px_set_error(PX_ERR_BACKEND, "libjpeg-turbo: cannot create a decompressor: %s",
                        tjGetErrorStr2(NULL));
  }
  *out = d;
  return PX_OK;
}

void px_image_decoder_destroy(px_image_decoder_t *d) {
  if (!d) return;
  tjDestroy(d->tj);
  PX_FREE_ALL(d->file, d->pixels, d->resampled, d->rowbuf, d);
}

const char *px_image_decoder_reason(const px_image_decoder_t *d) { return d->why; }

/* Grows *buf to at least need bytes (contents not kept). */
static px_status_t px__grow(void **buf, size_t *cap, size_t need, const char *name) {
  if (*cap >= need) return PX_OK;
  size_t n = *cap ? *cap : 4096;
  while (n < need) n = n > SIZE_MAX / 2 ? need : 2 * n;
  px_free(*buf);
  *buf = px_malloc(n, name);
  *cap = *buf ? n : 0;
  return *buf ? PX_OK : PX_ERR_NOMEM;
}

/* ---- resampling ------------------------------------------------------------ */

/* Area average over [a, b) x [c, d) of a source plane when the region is at
 * least one pixel on each side per output pixel; the overlap of each source
 * pixel is its weight (OpenCV's INTER_AREA). */
static float px__area(const uint8_t *s, int32_t w, int32_t h, int32_t row, int32_t px, double ya,
                      double yb, double xa, double xb) {
  int32_t iy0 = (int32_t)floor(ya), iy1 = (int32_t)ceil(yb);
  int32_t ix0 = (int32_t)floor(xa), ix1 = (int32_t)ceil(xb);
  if (iy0 < 0) iy0 = 0;
  if (ix0 < 0) ix0 = 0;
  if (iy1 > h) iy1 = h;
  if (ix1 > w) ix1 = w;
  double acc = 0.0, total = 0.0;
  for (int32_t iy = iy0; iy < iy1; iy++) {
    double wy = fmin(yb, iy + 1.0) - fmax(ya, (double)iy);
    if (wy <= 0.0) continue;
    const uint8_t *r = s + (size_t)iy * (size_t)row;
    double racc = 0.0, rw = 0.0;
    for (int32_t ix = ix0; ix < ix1; ix++) {
      double wx = fmin(xb, ix + 1.0) - fmax(xa, (double)ix);
      if (wx <= 0.0) continue;
      racc += wx * r[(size_t)ix * (size_t)px];
      rw += wx;
    }
    acc += wy * racc;
    total += wy * rw;
  }
  return total > 0.0 ? (float)(acc / total) : 0.0f;
}

/* The two source pixels i0, i1 (clamped to 0..n-1) around position f and
 * the weight of i1. */
static float px__lin_tap(double f, int32_t n, int32_t *i0, int32_t *i1) {
  if (f < 0.0) f = 0.0;
  int32_t a = (int32_t)f;
  if (a > n - 1) a = n - 1;
  *i0 = a;
  *i1 = a + 1 < n ? a + 1 : n - 1;
  float t = (float)(f - a);
  return t > 1.0f ? 1.0f : t;
}

void px_image_resample(const uint8_t *src, int32_t w, int32_t h, int32_t c, int32_t row,
                       int32_t px, int32_t cstride, const px_rect_t *crop, int32_t ow,
                       int32_t oh, int32_t flip, const float *a, const float *b, float *dst) {
  double sx = crop->w / ow, sy = crop->h / oh;
  if (sx >= 1.0 && sy >= 1.0) {
    for (int32_t ch = 0; ch < c; ch++) {
      const uint8_t *s = src + (size_t)ch * (size_t)cstride;
      float *d = dst + (size_t)ch * (size_t)ow * (size_t)oh;
      for (int32_t oy = 0; oy < oh; oy++) {
        double ya = crop->y + oy * sy;
        for (int32_t ox = 0; ox < ow; ox++) {
          int32_t tx = flip ? ow - 1 - ox : ox;
          double xa = crop->x + tx * sx;
          float v = px__area(s, w, h, row, px, ya, ya + sy, xa, xa + sx);
          d[(size_t)oy * ow + ox] = v * a[ch] + b[ch];
        }
      }
    }
    return;
  }
  /* Bilinear with pixel centres at +0.5, clamped at the borders (OpenCV's
   * INTER_LINEAR): the random-resized crop always enlarges. */
  for (int32_t oy = 0; oy < oh; oy++) {
    int32_t y0, y1;
    float wy = px__lin_tap(crop->y + (oy + 0.5) * sy - 0.5, h, &y0, &y1);
    for (int32_t ox = 0; ox < ow; ox++) {
      int32_t tx = flip ? ow - 1 - ox : ox, x0, x1;
      float wx = px__lin_tap(crop->x + (tx + 0.5) * sx - 0.5, w, &x0, &x1);
      size_t p00 = (size_t)y0 * row + (size_t)x0 * px, p01 = (size_t)y0 * row + (size_t)x1 * px;
      size_t p10 = (size_t)y1 * row + (size_t)x0 * px, p11 = (size_t)y1 * row + (size_t)x1 * px;
      for (int32_t ch = 0; ch < c; ch++) {
        const uint8_t *s = src + (size_t)ch * (size_t)cstride;
        float top = s[p00] + wx * ((float)s[p01] - s[p00]);
        float bot = s[p10] + wx * ((float)s[p11] - s[p10]);
        float v = top + wy * (bot - top);
        dst[((size_t)ch * oh + oy) * ow + ox] = v * a[ch] + b[ch];
      }
    }
  }
}

/* The decoder's area average of an interleaved (HWC) source, the same
 * weights as px__area: each output row first sums its source rows into
 * rowbuf [w * c] (contiguous, so the inner loop runs over whole rows), then
 * each output pixel sums its columns of that. */
static void px__area_hwc(const uint8_t *src, int32_t w, int32_t h, int32_t c,
                         const px_rect_t *crop, int32_t ow, int32_t oh, float *rowbuf,
                         float *dst) {
  double sx = crop->w / ow, sy = crop->h / oh;
  int32_t xlo = (int32_t)floor(crop->x), xhi = (int32_t)ceil(crop->x + crop->w);
  if (xlo < 0) xlo = 0;
  if (xhi > w) xhi = w;
  size_t plane = (size_t)ow * oh;
  for (int32_t oy = 0; oy < oh; oy++) {
    double ya = crop->y + oy * sy, yb = ya + sy;
    int32_t iy0 = (int32_t)floor(ya), iy1 = (int32_t)ceil(yb);
    if (iy0 < 0) iy0 = 0;
    if (iy1 > h) iy1 = h;
    float *rb = rowbuf + (size_t)xlo * c;
    size_t len = (size_t)(xhi - xlo) * c;
    memset(rb, 0, len * sizeof *rb);
    double wysum = 0.0;
    for (int32_t iy = iy0; iy < iy1; iy++) {
      float wy = (float)(fmin(yb, iy + 1.0) - fmax(ya, (double)iy));
      if (wy <= 0.0f) continue;
      wysum += wy;
      const uint8_t *r = src + ((size_t)iy * w + xlo) * c;
      for (size_t k = 0; k < len; k++) rb[k] += wy * (float)r[k];
    }
    for (int32_t ox = 0; ox < ow; ox++) {
      double xa = crop->x + ox * sx, xb = xa + sx;
      int32_t ix0 = (int32_t)floor(xa), ix1 = (int32_t)ceil(xb);
      if (ix0 < 0) ix0 = 0;
      if (ix1 > w) ix1 = w;
      float acc[3] = {0.0f, 0.0f, 0.0f};
      double wxsum = 0.0;
      for (int32_t ix = ix0; ix < ix1; ix++) {
        float wx = (float)(fmin(xb, ix + 1.0) - fmax(xa, (double)ix));
        if (wx <= 0.0f) continue;
        wxsum += wx;
        for (int32_t ch = 0; ch < c; ch++) acc[ch] += wx * rowbuf[(size_t)ix * c + ch];
      }
      float norm = wysum * wxsum > 0.0 ? (float)(1.0 / (wysum * wxsum)) : 0.0f;
      for (int32_t ch = 0; ch < c; ch++)
        dst[(size_t)ch * plane + (size_t)oy * ow + ox] = acc[ch] * norm;
    }
  }
}

/* ---- decoding -------------------------------------------------------------- */

#define PX__REFUSE(d, ...) (snprintf((d)->why, sizeof (d)->why, __VA_ARGS__), PX_ERR_FORMAT)

px_status_t px__image_dims_check(char *why, size_t cap, const char *fmt, int64_t w, int64_t h) {
  if (w < 1 || h < 1 || w > PX_IMAGE_MAX_SIDE || h > PX_IMAGE_MAX_SIDE ||
      w * h > PX_IMAGE_MAX_PIXELS) {
    snprintf(why, cap, "%s of %lldx%lld pixels: each side must be 1..%d and the image at most "
             "%d pixels", fmt, (long long)w, (long long)h, PX_IMAGE_MAX_SIDE, PX_IMAGE_MAX_PIXELS);
    return PX_ERR_FORMAT;
  }
  return PX_OK;
}

static px_status_t px__dims_ok(px_image_decoder_t *d, const char *fmt, int64_t w, int64_t h) {
  return px__image_dims_check(d->why, sizeof d->why, fmt, w, h);
}

/* A failed call can leave a TurboJPEG handle unusable: with libjpeg-turbo
 * 2.1, after tjDecompressHeader3 fails the next good file's header reads as
 * garbage, so one corrupt file lost every file after it. Every failure is
 * therefore followed by a fresh handle (the reason is copied out first). */
static px_status_t px__jpeg_fail(px_image_decoder_t *d, const char *what) {
  snprintf(d->why, sizeof d->why, "%s: %s", what, tjGetErrorStr2(d->tj));
  tjhandle fresh = tjInitDecompress();
  if (!fresh)
    return px_set_error(PX_ERR_BACKEND, "libjpeg-turbo: cannot create a decompressor: %s",
                        tjGetErrorStr2(NULL));
  tjDestroy(d->tj);
  d->tj = fresh;
  return PX_ERR_FORMAT;
}

/* JPEG to HWC pixels of `channels` (1: luma, 3: R,G,B), decoded at the
 * smallest libjpeg-turbo scale whose shorter side still covers `size`. */
static px_status_t px__decode_jpeg(px_image_decoder_t *d, const uint8_t *buf, size_t len,
                                   int32_t channels, int32_t size, int32_t *w, int32_t *h) {
  int jw, jh, sub, cs;
  if (tjDecompressHeader3(d->tj, buf, (unsigned long)len, &jw, &jh, &sub, &cs) != 0)
    return px__jpeg_fail(d, "corrupt JPEG header");
  if (px__dims_ok(d, "JPEG", jw, jh) != PX_OK) return PX_ERR_FORMAT;
  int nsf = 0;
  tjscalingfactor *sf = tjGetScalingFactors(&nsf);
  int bw = jw, bh = jh;
  for (int i = 0; sf && i < nsf; i++) {
    int sw = TJSCALED(jw, sf[i]), sh = TJSCALED(jh, sf[i]);
    if ((sw < jw || sh < jh) && (sw < sh ? sw : sh) >= size && sw * (int64_t)sh < bw * (int64_t)bh) {
      bw = sw;
      bh = sh;
    }
  }
  PX_CHECK(px__grow((void **)&d->pixels, &d->pix_cap, (size_t)bw * bh * channels, "data.pixels"));
  int pf = channels == 1 ? TJPF_GRAY : TJPF_RGB;
  if (tjDecompress2(d->tj, buf, (unsigned long)len, d->pixels, bw, 0, bh, pf, 0) != 0)
    return px__jpeg_fail(d, "corrupt JPEG data");
  *w = bw;
  *h = bh;
  return PX_OK;
}

/* PNG to HWC pixels: 8-bit grey or R,G,B as libpng's simplified API gives
 * them; a colour image asked for in grey is converted here with OpenCV's
 * weights, so that grey from a JPEG and from a PNG agree. */
static px_status_t px__decode_png(px_image_decoder_t *d, const uint8_t *buf, size_t len,
                                  int32_t channels, int32_t *w, int32_t *h) {
  png_image img;
  memset(&img, 0, sizeof img);
  img.version = PNG_IMAGE_VERSION;
  /* libpng frees the image on its errors; png_image_free again is a no-op,
   * kept so that no path depends on that */
  if (!png_image_begin_read_from_memory(&img, buf, len)) {
    png_image_free(&img);
    return PX__REFUSE(d, "corrupt PNG header: %s", img.message);
  }
  if (px__dims_ok(d, "PNG", img.width, img.height) != PX_OK) {
    png_image_free(&img);
    return PX_ERR_FORMAT;
  }
  int colour = (img.format & PNG_FORMAT_FLAG_COLOR) != 0;
  int rgb = channels == 3 || colour;
  img.format = rgb ? PNG_FORMAT_RGB : PNG_FORMAT_GRAY;
  size_t n = (size_t)img.width * img.height * (rgb ? 3 : 1);
  px_status_t st = px__grow((void **)&d->pixels, &d->pix_cap, n, "data.pixels");
  if (st != PX_OK) {
    png_image_free(&img);
    return st;
  }
  /* alpha is composited onto black: without a background libpng would
   * composite onto whatever the reused buffer holds */
  static const png_color black = {0, 0, 0};
  if (!png_image_finish_read(&img, &black, d->pixels, 0, NULL)) {
    png_image_free(&img);
    return PX__REFUSE(d, "corrupt PNG data: %s", img.message);
  }
  if (rgb && channels == 1) {
    for (size_t i = 0, np = (size_t)img.width * img.height; i < np; i++) {
      const uint8_t *p = d->pixels + 3 * i;
      d->pixels[i] = (uint8_t)((p[0] * 4899u + p[1] * 9617u + p[2] * 1868u + 8192u) >> 14);
    }
  }
  *w = (int32_t)img.width;
  *h = (int32_t)img.height;
  return PX_OK;
}

px_status_t px_image_decode(px_image_decoder_t *d, const uint8_t *buf, size_t len,
                            int32_t channels, int32_t size, uint8_t *dst) {
  PX_REQUIRE(d && (buf || len == 0) && dst, "px_image_decode: NULL argument");
  PX_REQUIRE(channels == 1 || channels == 3, "image channels %d: must be 1 or 3", channels);
  PX_REQUIRE(size >= 1 && size <= PX_IMAGE_MAX_SIZE, "image size %d: must be 1..%d", size,
             PX_IMAGE_MAX_SIZE);
  d->why[0] = '\0';
  int32_t w = 0, h = 0;
  px_status_t st;
  if (len >= 3 && buf[0] == 0xFF && buf[1] == 0xD8 && buf[2] == 0xFF) {
    st = px__decode_jpeg(d, buf, len, channels, size, &w, &h);
  } else if (len >= 8 && !memcmp(buf, "\x89PNG\r\n\x1a\n", 8)) {
    st = px__decode_png(d, buf, len, channels, &w, &h);
  } else {
    st = PX__REFUSE(d, "not a JPEG or PNG file (%zu bytes)", len);
  }
  if (st != PX_OK) {
    if (st == PX_ERR_FORMAT) return px_set_error(st, "%s", d->why);
    return st;
  }
  PX_CHECK(px__grow((void **)&d->resampled, &d->res_cap,
                    (size_t)channels * size * size * sizeof(float), "data.resampled"));
  int32_t side = w < h ? w : h;
  px_rect_t crop = {(w - side) / 2.0, (h - side) / 2.0, side, side};
  /* both decoders give HWC pixels of exactly `channels` */
  if (side >= size) {
    PX_CHECK(px__grow((void **)&d->rowbuf, &d->row_cap, (size_t)w * channels * sizeof(float),
                      "data.rowbuf"));
    px__area_hwc(d->pixels, w, h, channels, &crop, size, size, d->rowbuf, d->resampled);
  } else {
    static const float one[3] = {1.0f, 1.0f, 1.0f}, zero[3] = {0.0f, 0.0f, 0.0f};
    px_image_resample(d->pixels, w, h, channels, w * channels, channels, 1, &crop, size, size, 0,
                      one, zero, d->resampled);
  }
  size_t plane = (size_t)size * size;
  for (int32_t ch = 0; ch < channels; ch++) {
    const float *s = d->resampled + (size_t)ch * plane;
    uint8_t *o = dst + (size_t)ch * plane;
    for (size_t i = 0; i < plane; i++) {
      float v = s[i] + 0.5f;
      o[i] = v <= 0.0f ? 0 : v >= 255.0f ? 255 : (uint8_t)v;
    }
  }
  return PX_OK;
}

px_status_t px__image_decode_fd(px_image_decoder_t *d, int fd, int32_t channels, int32_t size,
                                uint8_t *dst) {
  d->why[0] = '\0';
  struct stat sb;
  if (fstat(fd, &sb) != 0) {
    snprintf(d->why, sizeof d->why, "cannot stat: %s", strerror(errno));
    return PX_ERR_IO;
  }
  if (!S_ISREG(sb.st_mode)) return PX__REFUSE(d, "not a regular file");
  if (sb.st_size > PX_IMAGE_MAX_FILE_BYTES)
    return PX__REFUSE(d, "%lld bytes: more than the %d-byte limit for one image",
                      (long long)sb.st_size, PX_IMAGE_MAX_FILE_BYTES);
  size_t len = (size_t)sb.st_size, got = 0;
  PX_CHECK(px__grow((void **)&d->file, &d->file_cap, len + 1, "data.image_file"));
  while (got < len) {
    ssize_t k = read(fd, d->file + got, len - got);
    if (k < 0 && errno == EINTR) continue;
    if (k <= 0) {
      snprintf(d->why, sizeof d->why, "read error: %s", k < 0 ? strerror(errno) : "short");
      return PX_ERR_IO;
    }
    got += (size_t)k;
  }
  return px_image_decode(d, d->file, len, channels, size, dst);
}

px_status_t px_image_decode_file(px_image_decoder_t *d, const char *path, int32_t channels,
                                 int32_t size, uint8_t *dst) {
  PX_REQUIRE(d && path && dst, "px_image_decode_file: NULL argument");
  /* O_NONBLOCK: a FIFO in an image's place must not hang the loader */
  int fd = open(path, O_RDONLY | O_CLOEXEC | O_NONBLOCK);
  if (fd < 0) {
    snprintf(d->why, sizeof d->why, "cannot open: %s", strerror(errno));
    return px_set_error(PX_ERR_IO, "%s: %s", path, d->why);
  }
  px_status_t st = px__image_decode_fd(d, fd, channels, size, dst);
  close(fd);
  if (st != PX_OK && d->why[0]) return px_set_error(st, "%s: %s", path, d->why);
  return st;
}

px_status_t px__image_decode_whole(px_image_decoder_t *d, const uint8_t *buf, size_t len,
                                   int32_t channels, const uint8_t **pix, int32_t *w,
                                   int32_t *h) {
  d->why[0] = '\0';
  px_status_t st;
  if (len >= 3 && buf[0] == 0xFF && buf[1] == 0xD8 && buf[2] == 0xFF)
    st = px__decode_jpeg(d, buf, len, channels, INT32_MAX, w, h); /* no size: full scale */
  else if (len >= 8 && !memcmp(buf, "\x89PNG\r\n\x1a\n", 8))
    st = px__decode_png(d, buf, len, channels, w, h);
  else
    st = PX__REFUSE(d, "not a JPEG or PNG file (%zu bytes)", len);
  *pix = d->pixels;
  return st;
}
