/* One image file to one normalised float image, for the streaming folder
 * path (stream.c): the torchvision transforms applied straight from the
 * encoded file, so that nothing decoded outlives the batch.
 *
 *   training:   RandomResizedCrop(size, scale=(min_scale, 1), ratio=(3/4, 4/3))
 *               and, when asked, RandomHorizontalFlip
 *   evaluation: Resize(size * 256/224) (the shorter side) + CenterCrop(size)
 *
 * The crop is chosen in the source image's pixels from its header, before
 * anything is decoded. A JPEG is then decoded with libjpeg's own API
 * (not TurboJPEG's, which cannot crop): at the smallest DCT scale M/8 that
 * still leaves the crop at least `size` pixels on both sides, only the
 * columns the crop touches (jpeg_crop_scanline, to iMCU boundaries), the
 * rows above it skipped (jpeg_skip_scanlines) and those below never read.
 * A PNG, or a JPEG in a colour space libjpeg cannot give as RGB (CMYK), is
 * decoded whole by image/image.c's decoder.
 *
 * The resampler is Pillow's bilinear filter with antialiasing (its
 * precompute_coeffs: a triangle of half-width max(scale, 1)), separable:
 * a horizontal pass into planar float rows, then a vertical pass that
 * writes dst[c][size][size] already normalised (v * a[c] + b[c]) and
 * mirrored when flipped. Buffers grow to the largest image seen and are
 * reused: once they have, a call allocates nothing. */
#include <errno.h>
#include <math.h>
#include <setjmp.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <jpeglib.h>

#include "data_int.h"
#include "px_check.h"

/* Four floats as one SSE register (GCC and clang vector extension). */
typedef float px__v4_t __attribute__((vector_size(16)));

typedef struct {
  struct jpeg_error_mgr pub;
  jmp_buf jump;
  char msg[JMSG_LENGTH_MAX];
} px__jerr_t;

/* Taps of one axis: output pixel o reads n[o] source pixels from first[o]
 * with weights w[o * kmax ...]. */
typedef struct {
  int32_t *first, *n;  /* [out] */
  float *w;            /* [out][kmax] */
  int32_t kmax;
  size_t cap;          /* floats of w */
} px__taps_t;

struct px__xform {
  struct jpeg_decompress_struct cinfo;
  px__jerr_t jerr;
  int have_cinfo;
  px_image_decoder_t *whole;  /* PNG and CMYK JPEG */
  int32_t size, channels;
  uint8_t *file;              /* [file_cap] the encoded bytes */
  size_t file_cap;
  uint8_t *pix;               /* [pix_cap] the decoded region, HWC */
  size_t pix_cap;
  float *tmp;                 /* [rows][channels][size] horizontal pass */
  size_t tmp_cap;
  float *rowf;                /* [cols * channels] one decoded row as floats */
  size_t rowf_cap;
  px__taps_t tx, ty;
  char why[256];
};

static void px__jerr_exit(j_common_ptr c) {
  px__jerr_t *e = (px__jerr_t *)c->err;
  (*c->err->format_message)(c, e->msg);
  longjmp(e->jump, 1);
}

/* Warnings (a truncated file's "premature end") are not failures, as with
 * TurboJPEG's defaults in image/image.c: the missing rows read as grey. */
static void px__jerr_quiet(j_common_ptr c) { (void)c; }

static px_status_t px__grow_buf(void **buf, size_t *cap, size_t need, const char *name) {
  if (*cap >= need) return PX_OK;
  size_t n = *cap ? *cap : 65536;
  while (n < need) n = n > SIZE_MAX / 2 ? need : 2 * n;
  px_free(*buf);
  *buf = px_malloc(n, name);
  *cap = *buf ? n : 0;
  return *buf ? PX_OK : PX_ERR_NOMEM;
}

static void px__cinfo_init(px__xform_t *x) {
  x->cinfo.err = jpeg_std_error(&x->jerr.pub);
  x->jerr.pub.error_exit = px__jerr_exit;
  x->jerr.pub.output_message = px__jerr_quiet;
  jpeg_create_decompress(&x->cinfo);
  x->have_cinfo = 1;
}

px_status_t px__xform_create(int32_t channels, int32_t size, px__xform_t **out) {
  px__xform_t *x = px_calloc(1, sizeof *x, "data.xform");
  if (!x) return PX_ERR_NOMEM;
  x->channels = channels;
  x->size = size;
  px_status_t st = px_image_decoder_create(&x->whole);
  size_t k = 8; /* taps per output pixel for a 3.5x reduction; grown past that */
  x->tx.first = px_malloc((size_t)size * sizeof(int32_t), "data.xform_taps");
  x->tx.n = px_malloc((size_t)size * sizeof(int32_t), "data.xform_taps");
  x->ty.first = px_malloc((size_t)size * sizeof(int32_t), "data.xform_taps");
  x->ty.n = px_malloc((size_t)size * sizeof(int32_t), "data.xform_taps");
  if (st == PX_OK && (!x->tx.first || !x->tx.n || !x->ty.first || !x->ty.n)) st = PX_ERR_NOMEM;
  if (st == PX_OK)
    st = px__grow_buf((void **)&x->tx.w, &x->tx.cap, (size_t)size * k * sizeof(float),
                      "data.xform_taps");
  if (st == PX_OK)
    st = px__grow_buf((void **)&x->ty.w, &x->ty.cap, (size_t)size * k * sizeof(float),
                      "data.xform_taps");
  if (st == PX_OK) {
    x->tx.cap /= sizeof(float);
    x->ty.cap /= sizeof(float);
    px__cinfo_init(x);
  }
  return PX_CREATED(st, x, out, px__xform_destroy);
}

void px__xform_destroy(px__xform_t *x) {
  if (!x) return;
  if (x->have_cinfo) jpeg_destroy_decompress(&x->cinfo);
  px_image_decoder_destroy(x->whole);
  PX_FREE_ALL(x->file, x->pix, x->tmp, x->rowf, x->tx.first, x->tx.n, x->tx.w, x->ty.first, x->ty.n,
              x->ty.w, x);
}

const char *px__xform_reason(const px__xform_t *x) { return x->why; }

/* ---- geometry -------------------------------------------------------------- */

/* Python's round() (half to even), which torchvision's arithmetic uses. */
static int64_t px__pyround(double v) { return (int64_t)nearbyint(v); }

/* torchvision's RandomResizedCrop.get_params on a w x h image, drawn from
 * rng: the box (in pixels) to be resized to the output. */
static void px__rrc_box(px__rng_t *rng, double scale_lo, int32_t w, int32_t h, px_rect_t *box) {
  double area = (double)w * h, lo = log(3.0 / 4.0), hi = log(4.0 / 3.0);
  for (int attempt = 0; attempt < 10; attempt++) {
    double target = area * (scale_lo + (1.0 - scale_lo) * px__rng_uniform(rng));
    double ar = exp(lo + (hi - lo) * px__rng_uniform(rng));
    int64_t cw = px__pyround(sqrt(target * ar)), ch = px__pyround(sqrt(target / ar));
    if (cw > 0 && cw <= w && ch > 0 && ch <= h) {
      box->y = (double)px__rng_below(rng, (uint64_t)(h - ch + 1));
      box->x = (double)px__rng_below(rng, (uint64_t)(w - cw + 1));
      box->w = (double)cw;
      box->h = (double)ch;
      return;
    }
  }
  /* the centre crop of the nearest allowed ratio */
  double in_ratio = (double)w / h;
  int64_t cw = w, ch = h;
  if (in_ratio < 3.0 / 4.0) ch = px__pyround(cw / (3.0 / 4.0));
  else if (in_ratio > 4.0 / 3.0) cw = px__pyround(ch * (4.0 / 3.0));
  box->w = (double)cw;
  box->h = (double)ch;
  box->x = (double)((w - cw) / 2);
  box->y = (double)((h - ch) / 2);
}

/* One axis of the transform: output pixel o samples around source position
 * x0 + (o + 0.5) * scale, reading only [lo, hi) of the source. */
typedef struct {
  double x0, scale, lo, hi;
} px__axis_t;

void px__xform_choose(const px__xform_params_t *p, int32_t w, int32_t h, int32_t size,
                      px__xform_geom_t *g) {
  memset(g, 0, sizeof *g);
  uint64_t key = px__key(PX__DOMAIN_AUGMENT, p->seed, (uint64_t)p->epoch, (uint64_t)p->index);
  if (p->min_scale > 0.0) {
    px__rng_t rng;
    px__rng_seed(&rng, px__mix64(key ^ 0x5252435049584c31ull)); /* "RRCPIXL1" */
    px__rrc_box(&rng, p->min_scale, w, h, &g->box);
    g->bounds = g->box; /* torchvision crops, then resizes the crop alone */
    g->sx = g->box.w / size;
    g->sy = g->box.h / size;
  } else {
    /* Resize(R) then CenterCrop(size): R = size * 256 / 224, the longer side
     * truncated as torchvision does */
    double r = floor(size * 256.0 / 224.0 + 0.5);
    int64_t nw, nh;
    if (w <= h) {
      nw = (int64_t)r;
      nh = (int64_t)(r * h / w);
    } else {
      nh = (int64_t)r;
      nw = (int64_t)(r * w / h);
    }
    g->sx = (double)w / nw;
    g->sy = (double)h / nh;
    int64_t top = px__pyround((nh - size) / 2.0), left = px__pyround((nw - size) / 2.0);
    g->box.x = left * g->sx;
    g->box.y = top * g->sy;
    g->box.w = size * g->sx;
    g->box.h = size * g->sy;
    g->bounds.x = g->bounds.y = 0.0;
    g->bounds.w = w;
    g->bounds.h = h;
  }
  g->flip = p->flip ? (int32_t)(px__mix64(key) >> 63) : 0;
}

/* Pillow's precompute_coeffs for the bilinear filter on axis a of a source
 * of n pixels, as offsets relative to `origin` (the first decoded pixel). */
static px_status_t px__taps_make(px__taps_t *t, const px__axis_t *a, int32_t out, int32_t n,
                                 int32_t origin) {
  double fs = a->scale < 1.0 ? 1.0 : a->scale, support = fs;
  int32_t kmax = (int32_t)ceil(support) * 2 + 1;
  if ((size_t)kmax * out > t->cap) {
    size_t bytes = t->cap * sizeof(float);
    PX_CHECK(px__grow_buf((void **)&t->w, &bytes, (size_t)kmax * out * sizeof(float),
                          "data.xform_taps"));
    t->cap = bytes / sizeof(float);
  }
  t->kmax = kmax;
  int32_t lo = (int32_t)floor(a->lo), hi = (int32_t)ceil(a->hi);
  if (lo < 0) lo = 0;
  if (hi > n) hi = n;
  for (int32_t o = 0; o < out; o++) {
    double c = a->x0 + (o + 0.5) * a->scale;
    int32_t xmin = (int32_t)floor(c - support + 0.5), xmax = (int32_t)floor(c + support + 0.5);
    if (xmin < lo) xmin = lo;
    if (xmax > hi) xmax = hi;
    if (xmax - xmin > kmax) xmax = xmin + kmax;
    if (xmax <= xmin) { /* a degenerate box: the nearest pixel */
      xmin = c < lo ? lo : c >= hi ? hi - 1 : (int32_t)c;
      xmax = xmin + 1;
    }
    float *w = t->w + (size_t)o * kmax;
    double total = 0.0;
    for (int32_t k = 0; k < xmax - xmin; k++) {
      double d = fabs((xmin + k - c + 0.5) / fs);
      w[k] = d < 1.0 ? (float)(1.0 - d) : 0.0f;
      total += w[k];
    }
    for (int32_t k = 0; k < xmax - xmin; k++) w[k] = total > 0.0 ? (float)(w[k] / total) : 1.0f;
    t->first[o] = xmin - origin;
    t->n[o] = xmax - xmin;
  }
  return PX_OK;
}

/* The separable pass over a decoded region src [rows][cols][c] whose taps
 * are in x->tx, x->ty (relative to the region): dst [c][size][size]. Each
 * row is widened to floats once (each pixel feeds several taps), the
 * horizontal taps then read floats; the vertical pass runs along whole
 * output rows (vectorised: xform.c is compiled with -O3). */
static px_status_t px__resample(px__xform_t *x, const uint8_t *src, size_t row, int32_t rows,
                                const float *a, const float *b, int32_t flip, float *dst) {
  int32_t c = x->channels, s = x->size;
  size_t need = (size_t)rows * c * s * sizeof(float);
  PX_CHECK(px__grow_buf((void **)&x->tmp, &x->tmp_cap, need, "data.xform_rows"));
  size_t cols = row / (size_t)c;
  PX_CHECK(px__grow_buf((void **)&x->rowf, &x->rowf_cap, cols * 4 * sizeof(float),
                        "data.xform_rowf"));
  const px__taps_t *tx = &x->tx, *ty = &x->ty;
  float *restrict rf = x->rowf;
  for (int32_t r = 0; r < rows; r++) {
    const uint8_t *restrict sr = src + (size_t)r * row;
    float *restrict t = x->tmp + (size_t)r * c * s;
    if (c == 3) {
      /* R, G, B, 0 per pixel: one 4-wide multiply-add per tap for all three */
      for (size_t k = 0; k < cols; k++) {
        rf[4 * k] = (float)sr[3 * k];
        rf[4 * k + 1] = (float)sr[3 * k + 1];
        rf[4 * k + 2] = (float)sr[3 * k + 2];
        rf[4 * k + 3] = 0.0f;
      }
      const px__v4_t *q = (const px__v4_t *)rf;
      for (int32_t o = 0; o < s; o++) {
        const px__v4_t *p = q + tx->first[o];
        const float *w = tx->w + (size_t)o * tx->kmax;
        px__v4_t acc = {0.0f, 0.0f, 0.0f, 0.0f};
        for (int32_t k = 0; k < tx->n[o]; k++) acc += w[k] * p[k];
        t[o] = acc[0];
        t[s + o] = acc[1];
        t[2 * s + o] = acc[2];
      }
      continue;
    }
    for (size_t k = 0; k < row; k++) rf[k] = (float)sr[k];
    for (int32_t o = 0; o < s; o++) {
      const float *p = rf + (size_t)tx->first[o] * c;
      const float *w = tx->w + (size_t)o * tx->kmax;
      int32_t n = tx->n[o];
      {
        float v = 0.0f;
        for (int32_t k = 0; k < n; k++) v += w[k] * p[k];
        t[o] = v;
      }
    }
  }
  for (int32_t ch = 0; ch < c; ch++) {
    for (int32_t oy = 0; oy < s; oy++) {
      float *d = dst + ((size_t)ch * s + oy) * s;
      const float *w = ty->w + (size_t)oy * ty->kmax;
      const float *t0 = x->tmp + ((size_t)ty->first[oy] * c + ch) * s;
      size_t step = (size_t)c * s;
      float acc[PX_IMAGE_MAX_SIZE];
      for (int32_t o = 0; o < s; o++) acc[o] = 0.0f;
      for (int32_t k = 0; k < ty->n[oy]; k++) {
        const float *t = t0 + (size_t)k * step;
        float wk = w[k];
        for (int32_t o = 0; o < s; o++) acc[o] += wk * t[o];
      }
      if (flip)
        for (int32_t o = 0; o < s; o++) d[s - 1 - o] = acc[o] * a[ch] + b[ch];
      else
        for (int32_t o = 0; o < s; o++) d[o] = acc[o] * a[ch] + b[ch];
    }
  }
  return PX_OK;
}

/* The axes of g on an image decoded at fx, fy of its size sw x sh. */
static void px__axes(const px__xform_geom_t *g, double fx, double fy, px__axis_t *ax,
                     px__axis_t *ay) {
  ax->x0 = g->box.x * fx;
  ax->scale = g->sx * fx;
  ax->lo = g->bounds.x * fx;
  ax->hi = (g->bounds.x + g->bounds.w) * fx;
  ay->x0 = g->box.y * fy;
  ay->scale = g->sy * fy;
  ay->lo = g->bounds.y * fy;
  ay->hi = (g->bounds.y + g->bounds.h) * fy;
}

/* ---- decoding -------------------------------------------------------------- */

#define PX__XREFUSE(x, ...) (snprintf((x)->why, sizeof (x)->why, __VA_ARGS__), PX_ERR_FORMAT)

/* The smallest DCT scale M/8 (M = 1..8) at which the box still covers at
 * least PX__DCT_GAP source pixels per output pixel on both axes: the DCT's
 * reduction is a box filter, so the last factor of two is left to the
 * triangle filter, which is what keeps the result near Pillow's (as its
 * reducing_gap = 2 does). */
#define PX__DCT_GAP 2.0
static int px__dct_num(const px__xform_geom_t *g) {
  double need = PX__DCT_GAP / (g->sx < g->sy ? g->sx : g->sy);
  for (int m = 1; m < 8; m++)
    if (m / 8.0 >= need) return m;
  return 8;
}

/* A decoded whole image (PNG, CMYK JPEG) of w x h HWC pixels, resampled. */
static px_status_t px__from_whole(px__xform_t *x, const uint8_t *pix, int32_t w, int32_t h,
                                  const px__xform_geom_t *g, const float *a, const float *b,
                                  float *dst) {
  px__axis_t ax, ay;
  px__axes(g, 1.0, 1.0, &ax, &ay);
  PX_CHECK(px__taps_make(&x->tx, &ax, x->size, w, 0));
  PX_CHECK(px__taps_make(&x->ty, &ay, x->size, h, 0));
  int32_t r0 = x->ty.first[0], r1 = x->ty.first[x->size - 1] + x->ty.n[x->size - 1];
  for (int32_t o = 0; o < x->size; o++) x->ty.first[o] -= r0;
  return px__resample(x, pix + (size_t)r0 * w * x->channels, (size_t)w * x->channels, r1 - r0,
                      a, b, g->flip, dst);
}

/* Decodes the rows and columns of the JPEG in cinfo (header read) that g
 * needs and resamples them. Runs under the caller's setjmp. */
static px_status_t px__jpeg_region(px__xform_t *x, const px__xform_geom_t *g, const float *a,
                                   const float *b, float *dst) {
  struct jpeg_decompress_struct *ci = &x->cinfo;
  int32_t w = (int32_t)ci->image_width, h = (int32_t)ci->image_height;
  ci->scale_num = (unsigned)px__dct_num(g);
  ci->scale_denom = 8;
  ci->out_color_space = x->channels == 1 ? JCS_GRAYSCALE : JCS_RGB;
  jpeg_start_decompress(ci);
  int32_t sw = (int32_t)ci->output_width, sh = (int32_t)ci->output_height;
  px__axis_t ax, ay;
  px__axes(g, (double)sw / w, (double)sh / h, &ax, &ay);
  PX_CHECK(px__taps_make(&x->tx, &ax, x->size, sw, 0));
  PX_CHECK(px__taps_make(&x->ty, &ay, x->size, sh, 0));
  int32_t c0 = x->tx.first[0], c1 = c0;
  for (int32_t o = 0; o < x->size; o++) {
    int32_t f = x->tx.first[o], e = f + x->tx.n[o];
    if (f < c0) c0 = f;
    if (e > c1) c1 = e;
  }
  int32_t r0 = x->ty.first[0], r1 = x->ty.first[x->size - 1] + x->ty.n[x->size - 1];
  /* one iMCU column of margin each side: the chroma upsampling of a
   * cropped row's edge pixels reads beyond them (without, they differ) */
  int32_t mcu = ci->max_h_samp_factor * ci->min_DCT_scaled_size;
  c0 = c0 - mcu < 0 ? 0 : c0 - mcu;
  c1 = c1 + mcu > sw ? sw : c1 + mcu;
  JDIMENSION xoff = (JDIMENSION)c0, cw = (JDIMENSION)(c1 - c0);
  if (xoff > 0 || cw < (JDIMENSION)sw) jpeg_crop_scanline(ci, &xoff, &cw);
  size_t row = (size_t)cw * x->channels;
  PX_CHECK(px__grow_buf((void **)&x->pix, &x->pix_cap, row * (size_t)(r1 - r0), "data.xform_pix"));
  /* whole iMCU rows skipped, the rest read over the first row: a skip that
   * ends inside an iMCU row upsamples the next row without its context */
  int32_t imcu = ci->max_v_samp_factor * ci->min_DCT_scaled_size;
  int32_t skip = r0 / imcu * imcu;
  if (skip > 0) jpeg_skip_scanlines(ci, (JDIMENSION)skip);
  while ((int32_t)ci->output_scanline < r1) {
    int32_t at = (int32_t)ci->output_scanline - r0;
    JSAMPROW rp = x->pix + (size_t)(at < 0 ? 0 : at) * row;
    jpeg_read_scanlines(ci, &rp, 1);
  }
  jpeg_abort_decompress(ci);
  for (int32_t o = 0; o < x->size; o++) {
    x->tx.first[o] -= (int32_t)xoff;
    x->ty.first[o] -= r0;
  }
  return px__resample(x, x->pix, row, r1 - r0, a, b, g->flip, dst);
}

/* A fresh decompressor after a failure (its state is not trusted). */
static px_status_t px__jpeg_reset(px__xform_t *x) {
  jpeg_destroy_decompress(&x->cinfo);
  px__cinfo_init(x);
  return PX_ERR_FORMAT;
}

static px_status_t px__xform_jpeg(px__xform_t *x, const uint8_t *buf, size_t len,
                                  const px__xform_params_t *p, const float *a, const float *b,
                                  float *dst) {
  struct jpeg_decompress_struct *ci = &x->cinfo;
  volatile int started = 0;
  if (setjmp(x->jerr.jump)) {
    snprintf(x->why, sizeof x->why, "corrupt JPEG %s: %s", started ? "data" : "header",
             x->jerr.msg);
    return px__jpeg_reset(x);
  }
  jpeg_mem_src(ci, buf, (unsigned long)len);
  jpeg_read_header(ci, TRUE);
  started = 1;
  int32_t w = (int32_t)ci->image_width, h = (int32_t)ci->image_height;
  if (px__image_dims_check(x->why, sizeof x->why, "JPEG", w, h) != PX_OK) {
    jpeg_abort_decompress(ci);
    return PX_ERR_FORMAT;
  }
  px__xform_geom_t g;
  px__xform_choose(p, w, h, x->size, &g);
  J_COLOR_SPACE cs = ci->jpeg_color_space;
  if (cs == JCS_GRAYSCALE || cs == JCS_YCbCr || cs == JCS_RGB)
    return px__jpeg_region(x, &g, a, b, dst);
  /* CMYK and YCCK: TurboJPEG converts them, libjpeg does not */
  jpeg_abort_decompress(ci);
  const uint8_t *pix;
  int32_t pw, ph;
  px_status_t st = px__image_decode_whole(x->whole, buf, len, x->channels, &pix, &pw, &ph);
  if (st == PX_ERR_FORMAT) snprintf(x->why, sizeof x->why, "%s", px_image_decoder_reason(x->whole));
  if (st != PX_OK) return st;
  return px__from_whole(x, pix, pw, ph, &g, a, b, dst);
}

px_status_t px__xform_run(px__xform_t *x, const uint8_t *buf, size_t len,
                          const px__xform_params_t *p, const float *a, const float *b,
                          float *dst) {
  x->why[0] = '\0';
  if (len >= 3 && buf[0] == 0xFF && buf[1] == 0xD8 && buf[2] == 0xFF)
    return px__xform_jpeg(x, buf, len, p, a, b, dst);
  if (len < 8 || memcmp(buf, "\x89PNG\r\n\x1a\n", 8) != 0)
    return PX__XREFUSE(x, "not a JPEG or PNG file (%zu bytes)", len);
  const uint8_t *pix;
  int32_t w, h;
  px_status_t st = px__image_decode_whole(x->whole, buf, len, x->channels, &pix, &w, &h);
  if (st == PX_ERR_FORMAT) snprintf(x->why, sizeof x->why, "%s", px_image_decoder_reason(x->whole));
  if (st != PX_OK) return st;
  px__xform_geom_t g;
  px__xform_choose(p, w, h, x->size, &g);
  return px__from_whole(x, pix, w, h, &g, a, b, dst);
}

px_status_t px__xform_fd(px__xform_t *x, int fd, const px__xform_params_t *p, const float *a,
                         const float *b, float *dst) {
  x->why[0] = '\0';
  struct stat sb;
  if (fstat(fd, &sb) != 0) return PX__XREFUSE(x, "cannot stat: %s", strerror(errno));
  if (!S_ISREG(sb.st_mode)) return PX__XREFUSE(x, "not a regular file");
  if (sb.st_size > PX_IMAGE_MAX_FILE_BYTES)
    return PX__XREFUSE(x, "%lld bytes: more than the %d-byte limit for one image",
                       (long long)sb.st_size, PX_IMAGE_MAX_FILE_BYTES);
  size_t len = (size_t)sb.st_size, got = 0;
  PX_CHECK(px__grow_buf((void **)&x->file, &x->file_cap, len + 1, "data.xform_file"));
  while (got < len) {
    ssize_t k = read(fd, x->file + got, len - got);
    if (k < 0 && errno == EINTR) continue;
    if (k <= 0) return PX__XREFUSE(x, "read error: %s", k < 0 ? strerror(errno) : "short");
    got += (size_t)k;
  }
  return px__xform_run(x, x->file, len, p, a, b, dst);
}
