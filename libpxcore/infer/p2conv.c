/* 3x3 convolutions on the pair-planar bf16 layout (P2, see p2conv.h) for
 * the narrow layers of pruned nets: the first stage of a pruned ResNet-20
 * (1 -> 15, 15 -> 8, 8 -> 15 channels at 32 x 32) took oneDNN 2.6's bf16
 * convolution about 0.96 ms per batch of 64 for 15 -> 8 on one Zen 5 core,
 * because its kernels vectorise over channels and pad them to whole
 * vectors.
 *
 * Here a vector is 16 output pixels of one row and one output channel, in
 * f32 lanes, so narrow channel counts waste nothing. A P2 word holds two
 * input channels as a bf16 pair, which is what VDPBF16PS multiplies by a
 * pair of weights and adds to an f32 lane: for each input pair and tap,
 * one load of 16 words (shifted by the tap; the zero border of the layout
 * is the padding, so no tap is tested) feeds one dot product per output
 * channel, with the weight pair broadcast from memory. The output channels
 * go in blocks of up to 8, each over 2 to 4 chunks of 16 pixels at a time,
 * so that about 16 accumulators stay in registers. The epilogue adds the
 * bias, applies the ReLUs and the residual, rounds two channels to bf16
 * with integer operations and stores their word. 15 -> 8 channels at
 * 32 x 32 take 0.37 ms per 64 images on one Zen 5 core, about 90% of the
 * rate at which it runs VDPBF16PS (two a cycle), input from L3 or L1 alike.
 *
 * The f32 layout (P1) is the same with one channel a plane, for a bf16
 * net's f32 twin (oneDNN's f32 15 -> 8 took 1.6 ms per 64 images): its
 * kernel shares the chunks, blocks and dispatch and does one FMA per input
 * channel where the bf16 one does a dot product per pair, twice the
 * instructions: 15 -> 8 take 0.65 to 0.7 ms per 64 images, FMAs at about
 * their peak rate. The conversions to NHWC transpose 16 pixels by 8 words
 * in registers and store each pixel's words at once; those from NHWC load
 * each pixel's words at once and transpose them back.
 *
 * The AVX-512 code is compiled for that ISA alone (target attributes), so
 * the rest of the file and of the library stays baseline x86-64; the plain
 * references accumulate in the same order and are what the tests compare
 * the kernels with. Images are split over OpenMP threads; nothing is
 * allocated. */
#include "infer/p2conv.h"

#include <assert.h>
#include <math.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#if defined(__x86_64__)
#include <immintrin.h>
#endif

/* The bf16 of f (round to nearest even of its bits), in the low 16 bits. */
static inline uint32_t px__p2_bf16(float f) {
  uint32_t b;
  memcpy(&b, &f, sizeof b);
  return (b + 0x7FFFu + ((b >> 16) & 1u)) >> 16;
}

/* The f32 of bf16 bits h (low 16 bits). */
static inline float px__p2_f32(uint32_t h) {
  const uint32_t b = h << 16;
  float f;
  memcpy(&f, &b, sizeof f);
  return f;
}

size_t px__p2_words(int32_t batch, int c, int h, int w) {
  return (size_t)batch * (size_t)((c + 1) / 2) * (size_t)(h + 2) * (size_t)(w + 2);
}

size_t px__p2_weight_words(int c_in, int c_out) {
  return (size_t)((c_in + 1) / 2) * 9 * (size_t)c_out;
}

size_t px__p1_words(int32_t batch, int c, int h, int w) {
  return (size_t)batch * (size_t)c * (size_t)(h + 2) * (size_t)(w + 2);
}

size_t px__p1_weight_words(int c_in, int c_out) { return (size_t)c_in * 9 * (size_t)c_out; }

static int px__p2_ok, px__p1_ok;
static pthread_once_t px__p2_once = PTHREAD_ONCE_INIT;

static void px__p2_decide(void) {
#if defined(__x86_64__)
  const char *e = getenv("PX_INFER_P2");
  const int on = !(e && strcmp(e, "0") == 0);
  __builtin_cpu_init();
  px__p1_ok = on && __builtin_cpu_supports("avx512f");
  px__p2_ok = px__p1_ok && __builtin_cpu_supports("avx512bw") &&
              __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("avx512bf16");
#endif
}

int px__p2_available(void) {
  pthread_once(&px__p2_once, px__p2_decide);
  return px__p2_ok;
}

int px__p1_available(void) {
  pthread_once(&px__p2_once, px__p2_decide);
  return px__p1_ok;
}

void px__p2_pack_weights(const float *wf, int c_in, int c_out, uint32_t *wq) {
  assert(c_in >= 1 && c_out >= 1);
  const int qi = (c_in + 1) / 2;
  for (int q = 0; q < qi; q++)
    for (int t = 0; t < 9; t++)
      for (int o = 0; o < c_out; o++) {
        const float *f = wf + ((size_t)o * (size_t)c_in + (size_t)(2 * q)) * 9 + t;
        const uint32_t hi = 2 * q + 1 < c_in ? px__p2_bf16(f[9]) : 0;
        wq[((size_t)q * 9 + (size_t)t) * (size_t)c_out + (size_t)o] = px__p2_bf16(f[0]) | hi << 16;
      }
}

void px__p1_pack_weights(const float *wf, int c_in, int c_out, float *wq) {
  assert(c_in >= 1 && c_out >= 1);
  for (int c = 0; c < c_in; c++)
    for (int t = 0; t < 9; t++)
      for (int o = 0; o < c_out; o++)
        wq[((size_t)c * 9 + (size_t)t) * (size_t)c_out + (size_t)o] =
            wf[((size_t)o * (size_t)c_in + (size_t)c) * 9 + (size_t)t];
}

/* Zeroes the border of one plane of an h x w map, P2 or P1 (4-byte
 * words either way; memset, so that it writes no type). */
static void px__zero_border(void *plane, int h, int w) {
  char *pl = plane;
  const size_t pitch = 4 * ((size_t)w + 2);
  memset(pl, 0, pitch);
  memset(pl + (size_t)(h + 1) * pitch, 0, pitch);
  for (int y = 1; y <= h; y++) {
    memset(pl + (size_t)y * pitch, 0, 4);
    memset(pl + (size_t)y * pitch + pitch - 4, 0, 4);
  }
}

void px__p2_from_nchw(const float *x, int32_t n, int32_t batch, int c, int h, int w, uint32_t *y) {
  assert(n >= 0 && n <= batch && c >= 1 && h >= 1 && w >= 1);
  const int64_t qn = (c + 1) / 2, planes = (int64_t)batch * qn;
  const size_t pitch = (size_t)w + 2, plane = (size_t)(h + 2) * pitch, hw = (size_t)h * (size_t)w;
#pragma omp parallel for schedule(static)
  for (int64_t i = 0; i < planes; i++) {
    const int64_t b = i / qn, q = i % qn;
    uint32_t *pl = y + (size_t)i * plane;
    if (b >= n) {
      memset(pl, 0, plane * sizeof *pl);
      continue;
    }
    const float *lo = x + ((size_t)b * (size_t)c + (size_t)(2 * q)) * hw;
    const float *hi = 2 * q + 1 < c ? lo + hw : NULL;
    px__zero_border(pl, h, w);
    for (int py = 0; py < h; py++) {
      uint32_t *row = pl + (size_t)(py + 1) * pitch + 1;
      const size_t s = (size_t)py * (size_t)w;
      for (int px = 0; px < w; px++) {
        const uint32_t odd = hi ? px__p2_bf16(hi[s + (size_t)px]) : 0;
        row[px] = px__p2_bf16(lo[s + (size_t)px]) | odd << 16;
      }
    }
  }
}

void px__p1_from_nchw(const float *x, int32_t n, int32_t batch, int c, int h, int w, float *y) {
  assert(n >= 0 && n <= batch && c >= 1 && h >= 1 && w >= 1);
  const int64_t planes = (int64_t)batch * c;
  const size_t pitch = (size_t)w + 2, plane = (size_t)(h + 2) * pitch, hw = (size_t)h * (size_t)w;
#pragma omp parallel for schedule(static)
  for (int64_t i = 0; i < planes; i++) {
    float *pl = y + (size_t)i * plane;
    if (i >= (int64_t)n * c) {
      memset(pl, 0, plane * sizeof *pl);
      continue;
    }
    px__zero_border(pl, h, w);
    for (int py = 0; py < h; py++)
      memcpy(pl + (size_t)(py + 1) * pitch + 1, x + (size_t)i * hw + (size_t)py * (size_t)w,
             (size_t)w * sizeof *pl);
  }
}

/* Image b of px__p2_to_nhwc, one value at a time (off AVX-512). */
static void px__p2_to_nhwc_c(const uint32_t *x, int32_t b, int c, int h, int w, uint16_t *y) {
  const int qn = (c + 1) / 2;
  const size_t pitch = (size_t)w + 2, plane = (size_t)(h + 2) * pitch;
  for (int q = 0; q < qn; q++) {
    const uint32_t *pl = x + ((size_t)b * (size_t)qn + (size_t)q) * plane;
    for (int py = 0; py < h; py++)
      for (int px = 0; px < w; px++) {
        const uint32_t v = pl[(size_t)(py + 1) * pitch + (size_t)px + 1];
        uint16_t *o = y + (((size_t)b * (size_t)h + (size_t)py) * (size_t)w + (size_t)px) *
                              (size_t)c + (size_t)(2 * q);
        o[0] = (uint16_t)(v & 0xFFFFu);
        if (2 * q + 1 < c) o[1] = (uint16_t)(v >> 16);
      }
  }
}

/* Image b of px__p1_to_nhwc, one value at a time. */
static void px__p1_to_nhwc_c(const float *x, int32_t b, int c, int h, int w, float *y) {
  const size_t pitch = (size_t)w + 2, plane = (size_t)(h + 2) * pitch;
  for (int ch = 0; ch < c; ch++) {
    const float *pl = x + ((size_t)b * (size_t)c + (size_t)ch) * plane;
    for (int py = 0; py < h; py++)
      for (int px = 0; px < w; px++)
        y[(((size_t)b * (size_t)h + (size_t)py) * (size_t)w + (size_t)px) * (size_t)c +
          (size_t)ch] = pl[(size_t)(py + 1) * pitch + (size_t)px + 1];
  }
}

static void px__p2_to_nhwc_v(const uint32_t *x, int32_t b, int c, int h, int w, uint16_t *y);
static void px__p1_to_nhwc_v(const float *x, int32_t b, int c, int h, int w, float *y);

void px__p2_to_nhwc(const uint32_t *x, int32_t batch, int c, int h, int w, uint16_t *y) {
  assert(c >= 1 && h >= 1 && w >= 1);
  const int v = px__p2_available();
#pragma omp parallel for schedule(static)
  for (int32_t b = 0; b < batch; b++) {
    if (v) px__p2_to_nhwc_v(x, b, c, h, w, y);
    else px__p2_to_nhwc_c(x, b, c, h, w, y);
  }
}

void px__p1_to_nhwc(const float *x, int32_t batch, int c, int h, int w, float *y) {
  assert(c >= 1 && h >= 1 && w >= 1);
  const int v = px__p1_available();
#pragma omp parallel for schedule(static)
  for (int32_t b = 0; b < batch; b++) {
    if (v) px__p1_to_nhwc_v(x, b, c, h, w, y);
    else px__p1_to_nhwc_c(x, b, c, h, w, y);
  }
}

/* Image b of px__p2_from_nhwc, one word at a time (off AVX-512): each
 * pair plane in order, its border first. */
static void px__p2_from_nhwc_c(const uint16_t *x, int32_t b, int c, int h, int w, uint32_t *y) {
  const int qn = (c + 1) / 2;
  const size_t pitch = (size_t)w + 2, plane = (size_t)(h + 2) * pitch;
  const uint16_t *img = x + (size_t)b * (size_t)h * (size_t)w * (size_t)c;
  for (int q = 0; q < qn; q++) {
    uint32_t *pl = y + ((size_t)b * (size_t)qn + (size_t)q) * plane;
    px__zero_border(pl, h, w);
    for (int py = 0; py < h; py++)
      for (int px = 0; px < w; px++) {
        const uint16_t *v = img + ((size_t)py * (size_t)w + (size_t)px) * (size_t)c +
                            (size_t)(2 * q);
        const uint32_t odd = 2 * q + 1 < c ? (uint32_t)v[1] << 16 : 0;
        pl[(size_t)(py + 1) * pitch + (size_t)px + 1] = (uint32_t)v[0] | odd;
      }
  }
}

/* Image b of px__p1_from_nhwc, one float at a time. */
static void px__p1_from_nhwc_c(const float *x, int32_t b, int c, int h, int w, float *y) {
  const size_t pitch = (size_t)w + 2, plane = (size_t)(h + 2) * pitch;
  const float *img = x + (size_t)b * (size_t)h * (size_t)w * (size_t)c;
  for (int ch = 0; ch < c; ch++) {
    float *pl = y + ((size_t)b * (size_t)c + (size_t)ch) * plane;
    px__zero_border(pl, h, w);
    for (int py = 0; py < h; py++)
      for (int px = 0; px < w; px++)
        pl[(size_t)(py + 1) * pitch + (size_t)px + 1] =
            img[((size_t)py * (size_t)w + (size_t)px) * (size_t)c + (size_t)ch];
  }
}

static void px__p2_from_nhwc_v(const uint16_t *x, int32_t b, int c, int h, int w, uint32_t *y);
static void px__p1_from_nhwc_v(const float *x, int32_t b, int c, int h, int w, float *y);

void px__p2_from_nhwc(const uint16_t *x, int32_t batch, int c, int h, int w, uint32_t *y) {
  assert(c >= 1 && h >= 1 && w >= 1);
  const int v = px__p2_available();
#pragma omp parallel for schedule(static)
  for (int32_t b = 0; b < batch; b++) {
    if (v) px__p2_from_nhwc_v(x, b, c, h, w, y);
    else px__p2_from_nhwc_c(x, b, c, h, w, y);
  }
}

void px__p1_from_nhwc(const float *x, int32_t batch, int c, int h, int w, float *y) {
  assert(c >= 1 && h >= 1 && w >= 1);
  const int v = px__p1_available();
#pragma omp parallel for schedule(static)
  for (int32_t b = 0; b < batch; b++) {
    if (v) px__p1_from_nhwc_v(x, b, c, h, w, y);
    else px__p1_from_nhwc_c(x, b, c, h, w, y);
  }
}

/* ---- reference ------------------------------------------------------------ */

/* The accumulator of output o at pixel (py, px) of one image's input x: the
 * kernel's order (pairs, rows and columns of taps; the odd channel of a pair
 * first, as VDPBF16PS adds them). The products of bf16 values are exact. */
static float px__p2_ref_acc(const px__p2_conv_t *p, const uint32_t *x, int o, int py, int px) {
  const int qi = (p->c_in + 1) / 2;
  const size_t pitch = (size_t)p->w + 2, plane = (size_t)(p->h + 2) * pitch;
  float acc = 0.0f;
  for (int q = 0; q < qi; q++)
    for (int ky = 0; ky < 3; ky++)
      for (int kx = 0; kx < 3; kx++) {
        const uint32_t xv = x[(size_t)q * plane + (size_t)(py + ky) * pitch + (size_t)(px + kx)];
        const uint32_t wv = p->wq[(size_t)(q * 9 + ky * 3 + kx) * (size_t)p->c_out + (size_t)o];
        acc += px__p2_f32(xv >> 16) * px__p2_f32(wv >> 16);
        acc += px__p2_f32(xv & 0xFFFFu) * px__p2_f32(wv & 0xFFFFu);
      }
  return acc;
}

/* Output pair j of image b, borders included. */
static void px__p2_ref_pair(const px__p2_conv_t *p, int32_t b, int j) {
  const int qi = (p->c_in + 1) / 2, qo = (p->c_out + 1) / 2;
  const size_t pitch = (size_t)p->w + 2, plane = (size_t)(p->h + 2) * pitch;
  const uint32_t *x = p->x + (size_t)b * (size_t)qi * plane;
  uint32_t *pl = p->y + ((size_t)b * (size_t)qo + (size_t)j) * plane;
  for (int py = 0; py < p->h; py++)
    for (int px = 0; px < p->w; px++) {
      uint32_t *yw = pl + (size_t)(py + 1) * pitch + (size_t)px + 1, word = 0;
      for (int e = 0; e < 2 && 2 * j + e < p->c_out; e++) {
        const int o = 2 * j + e;
        float v = px__p2_ref_acc(p, x, o, py, px) + p->bias[o];
        if (p->relu_mid) v = v > 0.0f ? v : 0.0f;
        if (p->sum) v += px__p2_f32(e ? *yw >> 16 : *yw & 0xFFFFu);
        if (p->relu) v = v > 0.0f ? v : 0.0f;
        word |= px__p2_bf16(v) << (16 * e);
      }
      *yw = word;
    }
  px__zero_border(pl, p->h, p->w);
}

void px__p2_conv3x3_ref(const px__p2_conv_t *p) {
  assert(p->c_in >= 1 && p->c_out >= 1 && p->h >= 1 && p->w >= 1 && p->x != p->y);
  const int qo = (p->c_out + 1) / 2;
#pragma omp parallel for schedule(static)
  for (int32_t b = 0; b < p->batch; b++)
    for (int j = 0; j < qo; j++) px__p2_ref_pair(p, b, j);
}

/* The accumulator of output o at pixel (py, px) of one image's input x: the
 * kernel's order (channels, rows and columns of taps), one rounding a step
 * as its FMAs. */
static float px__p1_ref_acc(const px__p1_conv_t *p, const float *x, int o, int py, int px) {
  const size_t pitch = (size_t)p->w + 2, plane = (size_t)(p->h + 2) * pitch;
  float acc = 0.0f;
  for (int c = 0; c < p->c_in; c++)
    for (int ky = 0; ky < 3; ky++)
      for (int kx = 0; kx < 3; kx++)
        acc = fmaf(x[(size_t)c * plane + (size_t)(py + ky) * pitch + (size_t)(px + kx)],
                   p->wq[(size_t)(c * 9 + ky * 3 + kx) * (size_t)p->c_out + (size_t)o], acc);
  return acc;
}

void px__p1_conv3x3_ref(const px__p1_conv_t *p) {
  assert(p->c_in >= 1 && p->c_out >= 1 && p->h >= 1 && p->w >= 1 && p->x != p->y);
  const size_t pitch = (size_t)p->w + 2, plane = (size_t)(p->h + 2) * pitch;
#pragma omp parallel for schedule(static)
  for (int32_t b = 0; b < p->batch; b++)
    for (int o = 0; o < p->c_out; o++) {
      const float *x = p->x + (size_t)b * (size_t)p->c_in * plane;
      float *pl = p->y + ((size_t)b * (size_t)p->c_out + (size_t)o) * plane;
      for (int py = 0; py < p->h; py++)
        for (int px = 0; px < p->w; px++) {
          float *yv = pl + (size_t)(py + 1) * pitch + (size_t)px + 1;
          float v = px__p1_ref_acc(p, x, o, py, px) + p->bias[o];
          if (p->relu_mid) v = v > 0.0f ? v : 0.0f;
          if (p->sum) v += *yv;
          if (p->relu) v = v > 0.0f ? v : 0.0f;
          *yv = v;
        }
      px__zero_border(pl, p->h, p->w);
    }
}

/* ---- AVX-512 kernels -------------------------------------------------------- */

#if defined(__x86_64__)

/* The code both layouts share is compiled for AVX512F, a subset of the bf16
 * kernel's ISA, so that it inlines into either. */
/* The kernels are left out of the sanitizers' instrumentation: a check on
 * every lane of every unrolled tap took GCC 132 s and clang 207 s to compile
 * this file with AddressSanitizer and UBSan (9 s without), the longest step
 * of the sanitizer and fuzz builds. They run on AVX-512 BF16 CPUs only, where
 * test_infer_p2 compares them lane for lane with the plain references; their
 * loads and stores are masked to the image's rows, and the plain code of
 * this file stays instrumented. */
#define PX__NOSAN __attribute__((no_sanitize("address", "undefined")))
#define PX__F_ISA "avx512f"
#define PX__F_INLINE static inline __attribute__((always_inline, target(PX__F_ISA))) PX__NOSAN
#define PX__F_FN static __attribute__((noinline, target(PX__F_ISA))) PX__NOSAN
#define PX__P2_ISA "avx512f,avx512bw,avx512vl,avx512bf16"
#define PX__P2_INLINE static inline __attribute__((always_inline, target(PX__P2_ISA))) PX__NOSAN
#define PX__P2_FN static __attribute__((noinline, target(PX__P2_ISA))) PX__NOSAN
/* The loops over chunks, channels and taps unroll completely (their bounds
 * are constants once px__p2_chunks is inlined), so that the accumulators
 * are registers. Clang optimises px__p2_chunks before it inlines it: given
 * GCC's pragma, it unrolled the loops there by a count, bounds unknown, and
 * the accumulators stayed arrays in memory (2.5 times slower); its own
 * pragma waits for the bounds. */
#if defined(__clang__)
#define PX__UNROLL(n) _Pragma("clang loop unroll(full)")
#else
#define PX__UNROLL(n) _Pragma(PX__STR(GCC unroll n))
#define PX__STR(s) #s
#endif
#define PX__NO 8  /* output channels of a block, at most */
#define PX__NCH 4 /* chunks of 16 pixels a block computes at a time, at most */

/* One block of output channels of one image, either layout (4-byte words:
 * bf16 pairs or floats). */
typedef struct {
  const void *x;         /* the image's input, plane 0 */
  void *y;               /* the image's output, the block's first plane */
  const void *wq;        /* packed weights, offset to the block's first channel */
  const float *bias;     /* [block] */
  int ci, c_out;         /* input planes (pairs or channels); the row length of wq */
  int h, w, nx;          /* map; 16-pixel chunks per row */
  int64_t pitch, plane;  /* words of a padded row, of a padded plane */
  int sum, relu_mid, relu;
} px__blk_t;

typedef void (*px__block_fn)(const px__blk_t *);

/* Chunk k (row k / nx, columns from 16 (k % nx)) of nk: where its taps start
 * (words from x, padded row oy, column x0: the top-left tap), where its
 * outputs go (words from y), and its lanes. Past nk, no lane (masked loads
 * and stores touch nothing). */
PX__F_INLINE void px__chunk_at(const px__blk_t *g, int64_t k, int64_t nk, int64_t *xo,
                               int64_t *yo, __mmask16 *m) {
  if (k >= nk) {
    *xo = *yo = 0;
    *m = 0;
    return;
  }
  const int64_t oy = k / g->nx, x0 = (k % g->nx) * 16;
  const int64_t lanes = g->w - x0 < 16 ? g->w - x0 : 16;
  *m = (__mmask16)((1u << lanes) - 1u);
  *xo = oy * g->pitch + x0;
  *yo = (oy + 1) * g->pitch + x0 + 1;
}

/* Bias and the first ReLU of output o. */
PX__F_INLINE __m512 px__mid(const px__blk_t *g, __m512 acc, int o) {
  const __m512 v = _mm512_add_ps(acc, _mm512_set1_ps(g->bias[o]));
  return g->relu_mid ? _mm512_max_ps(v, _mm512_setzero_ps()) : v;
}

/* A block of NO output channels over all chunks of the image, NCH chunks
 * at a time (the unmasked loop first when rows are whole chunks), by
 * px__<L>_chunks of layout L. */
#define PX__BLOCK(L, FN, NO, NCH)                                                                \
  FN void px__##L##_block_##NO(const px__blk_t *g) {                                             \
    const int64_t nk = (int64_t)g->h * g->nx;                                                    \
    const int64_t nfull = g->w % 16 ? 0 : nk / NCH * NCH;                                        \
    int64_t k = 0;                                                                               \
    for (; k < nfull; k += NCH) px__##L##_chunks(g, k, nk, NO, NCH, 1);                          \
    for (; k < nk; k += NCH) px__##L##_chunks(g, k, nk, NO, NCH, 0);                             \
  }

/* The output channels of g's image in blocks of up to PX__NO (blocks[no]
 * computes no of them), per to a plane (2: P2, whose blocks must then be
 * even but the last; 1: P1), then the borders of all c_out / per planes. */
static void px__image(px__blk_t *g, const px__block_fn *blocks, int per, void *y,
                      const void *wq, const float *bias, int c_out) {
  for (int o0 = 0; o0 < c_out; o0 += PX__NO) {
    const int no = c_out - o0 < PX__NO ? c_out - o0 : PX__NO;
    g->y = (char *)y + 4 * (size_t)(o0 / per) * (size_t)g->plane;
    g->wq = (const char *)wq + 4 * (size_t)o0;
    g->bias = bias + o0;
    blocks[no](g);
  }
  for (int j = 0; j < (c_out + per - 1) / per; j++)
    px__zero_border((char *)y + 4 * (size_t)j * (size_t)g->plane, g->h, g->w);
}

/* The 16 x 8 transpose of the 32-bit words of r (8 rows of 16 columns):
 * column j of r (its 8 words) is 256-bit half j / 4 % 2 of v[j / 8 * 4 + j % 4]. */
PX__F_INLINE void px__transpose8(const __m512i r[8], __m512i v[8]) {
  __m512i t[8], u[8];
  PX__UNROLL(4)
  for (int i = 0; i < 4; i++) {
    t[2 * i] = _mm512_unpacklo_epi32(r[2 * i], r[2 * i + 1]);
    t[2 * i + 1] = _mm512_unpackhi_epi32(r[2 * i], r[2 * i + 1]);
  }
  /* u[k] (rows 0 to 3), u[4 + k] (rows 4 to 7): column 4 l + k in lane l */
  PX__UNROLL(2)
  for (int i = 0; i < 2; i++) {
    u[4 * i] = _mm512_unpacklo_epi64(t[4 * i], t[4 * i + 2]);
    u[4 * i + 1] = _mm512_unpackhi_epi64(t[4 * i], t[4 * i + 2]);
    u[4 * i + 2] = _mm512_unpacklo_epi64(t[4 * i + 1], t[4 * i + 3]);
    u[4 * i + 3] = _mm512_unpackhi_epi64(t[4 * i + 1], t[4 * i + 3]);
  }
  const __m512i lo = _mm512_set_epi64(11, 10, 3, 2, 9, 8, 1, 0);
  const __m512i hi = _mm512_set_epi64(15, 14, 7, 6, 13, 12, 5, 4);
  PX__UNROLL(4)
  for (int k = 0; k < 4; k++) {
    v[k] = _mm512_permutex2var_epi64(u[k], lo, u[4 + k]);
    v[4 + k] = _mm512_permutex2var_epi64(u[k], hi, u[4 + k]);
  }
}

/* The inverse: a[k] holds column k (8 words) in its low 256 bits and
 * column 8 + k in its high ones; row i of the 16 columns (word i of each)
 * comes out in r[i]. The same three steps, the last across the halves. */
PX__F_INLINE void px__untranspose8(const __m512i a[8], __m512i r[8]) {
  __m512i t[8], u[8];
  PX__UNROLL(4)
  for (int i = 0; i < 4; i++) {
    t[2 * i] = _mm512_unpacklo_epi32(a[2 * i], a[2 * i + 1]);
    t[2 * i + 1] = _mm512_unpackhi_epi32(a[2 * i], a[2 * i + 1]);
  }
  /* u[4 i + k], 128-bit lane l: word k + 4 (l % 2) of the four columns
   * from 4 i + 8 (l / 2) */
  PX__UNROLL(2)
  for (int i = 0; i < 2; i++) {
    u[4 * i] = _mm512_unpacklo_epi64(t[4 * i], t[4 * i + 2]);
    u[4 * i + 1] = _mm512_unpackhi_epi64(t[4 * i], t[4 * i + 2]);
    u[4 * i + 2] = _mm512_unpacklo_epi64(t[4 * i + 1], t[4 * i + 3]);
    u[4 * i + 3] = _mm512_unpackhi_epi64(t[4 * i + 1], t[4 * i + 3]);
  }
  const __m512i lo = _mm512_set_epi64(13, 12, 5, 4, 9, 8, 1, 0);
  const __m512i hi = _mm512_set_epi64(15, 14, 7, 6, 11, 10, 3, 2);
  PX__UNROLL(4)
  for (int k = 0; k < 4; k++) {
    r[k] = _mm512_permutex2var_epi64(u[k], lo, u[4 + k]);
    r[4 + k] = _mm512_permutex2var_epi64(u[k], hi, u[4 + k]);
  }
}

/* The border of a plane is its top and bottom rows and, between them, the
 * last word of a row and the first of the next, which follow each other:
 * px__zero_pair zeroes two such words (w words past the first pixel of a
 * row), and the conversions from NHWC call it after each row (with a
 * pass over each plane's border after the image they took up to 15%
 * longer on a Zen 5, zeroing the image's planes first up to 30%);
 * px__zero_rows_v zeroes the rest, the top row with the first word of the
 * next, and the bottom row. Either layout, no typed store. */
PX__F_INLINE void px__zero_pair(void *at) {
  const uint64_t z = 0;
  memcpy(at, &z, sizeof z);
}

PX__F_INLINE void px__zero_rows_v(void *plane, int h, int w) {
  char *pl = plane;
  const int64_t pitch = w + 2;
  const __m512i z = _mm512_setzero_si512();
  for (int64_t i = 0; i <= pitch; i += 16) {
    const int64_t n = pitch + 1 - i;
    _mm512_mask_storeu_epi32(pl + 4 * i, (__mmask16)(n < 16 ? (1u << n) - 1u : 0xFFFFu), z);
  }
  for (int64_t i = 0; i < pitch; i += 16) {
    const int64_t n = pitch - i;
    _mm512_mask_storeu_epi32(pl + 4 * ((h + 1) * pitch + i),
                             (__mmask16)(n < 16 ? (1u << n) - 1u : 0xFFFFu), z);
  }
}

/* ---- the bf16 kernel (P2) ---- */

/* v rounded to bf16 on its bits (to nearest, ties to even, as
 * px__p2_bf16): the bf16 is the high half of each lane. */
PX__P2_INLINE __m512i px__p2_rne(__m512 v) {
  const __m512i b = _mm512_castps_si512(v);
  const __m512i odd = _mm512_and_si512(_mm512_srli_epi32(b, 16), _mm512_set1_epi32(1));
  return _mm512_add_epi32(b, _mm512_add_epi32(odd, _mm512_set1_epi32(0x7FFF)));
}

/* The rest of the epilogue of a pair (ve, vo: its even and odd channel
 * after px__mid; odd 0 when the pair has no odd channel): the residual,
 * the last ReLU, bf16 rounding of both and the store of the masked lanes
 * of their words. */
PX__P2_INLINE void px__p2_store(const px__blk_t *g, uint32_t *yp, __mmask16 m, __m512 ve,
                                __m512 vo, int odd) {
  const __m512i hi = _mm512_set1_epi32((int)0xFFFF0000u);
  if (g->sum) {
    const __m512i old = _mm512_maskz_loadu_epi32(m, yp);
    ve = _mm512_add_ps(ve, _mm512_castsi512_ps(_mm512_slli_epi32(old, 16)));
    vo = _mm512_add_ps(vo, _mm512_castsi512_ps(_mm512_and_si512(old, hi)));
  }
  if (g->relu) {
    ve = _mm512_max_ps(ve, _mm512_setzero_ps());
    vo = _mm512_max_ps(vo, _mm512_setzero_ps());
  }
  __m512i word = _mm512_srli_epi32(px__p2_rne(ve), 16);
  if (odd) word = _mm512_or_si512(word, _mm512_and_si512(px__p2_rne(vo), hi));
  _mm512_mask_storeu_epi32(yp, m, word);
}

/* nch chunks from chunk k (of nk) of the block's no output channels: the
 * accumulators acc[c][o] stay in registers (no, nch and full are constants
 * where this is inlined, so the loops over them unroll). full: every lane
 * of the nch chunks is in the map, the loads need no mask. */
PX__P2_INLINE void px__p2_chunks(const px__blk_t *g, int64_t k, int64_t nk, const int no,
                                 const int nch, const int full) {
  const uint32_t *x = g->x, *wt = g->wq;
  uint32_t *y = g->y;
  const uint32_t *xp[PX__NCH];
  uint32_t *yp[PX__NCH];
  __mmask16 m[PX__NCH];
  __m512 acc[PX__NCH][PX__NO];
  PX__UNROLL(4)
  for (int c = 0; c < nch; c++) {
    int64_t xo, yo;
    px__chunk_at(g, k + c, nk, &xo, &yo, &m[c]);
    xp[c] = x + xo;
    yp[c] = y + yo;
    PX__UNROLL(8)
    for (int o = 0; o < no; o++) acc[c][o] = _mm512_setzero_ps();
  }
  for (int q = 0; q < g->ci; q++) {
    const uint32_t *xq[PX__NCH];
    PX__UNROLL(4)
    for (int c = 0; c < nch; c++) xq[c] = xp[c] + q * g->plane;
    PX__UNROLL(3)
    for (int ky = 0; ky < 3; ky++)
      PX__UNROLL(3)
      for (int kx = 0; kx < 3; kx++, wt += g->c_out) {
        __m512bh xv[PX__NCH];
        PX__UNROLL(4)
        for (int c = 0; c < nch; c++)
          xv[c] = (__m512bh)(full ? _mm512_loadu_si512(xq[c] + ky * g->pitch + kx)
                                  : _mm512_maskz_loadu_epi32(m[c], xq[c] + ky * g->pitch + kx));
        PX__UNROLL(8)
        for (int o = 0; o < no; o++) {
          const __m512bh wv = (__m512bh)_mm512_set1_epi32((int)wt[o]);
          PX__UNROLL(4)
          for (int c = 0; c < nch; c++) acc[c][o] = _mm512_dpbf16_ps(acc[c][o], xv[c], wv);
        }
      }
  }
  PX__UNROLL(4)
  for (int c = 0; c < nch; c++)
    PX__UNROLL(4)
    for (int j = 0; j < (no + 1) / 2; j++) {
      const __m512 ve = px__mid(g, acc[c][2 * j], 2 * j);
      const __m512 vo = 2 * j + 1 < no ? px__mid(g, acc[c][2 * j + 1], 2 * j + 1)
                                       : _mm512_setzero_ps();
      px__p2_store(g, yp[c] + j * g->plane, m[c], ve, vo, 2 * j + 1 < no);
    }
}

/* Dot products of one accumulator follow each other at the instruction's
 * latency, so a core needs about 16 independent accumulators to keep its
 * dot-product units busy (12 to 16 saturate a Zen 5 core; fewer chunks with
 * more channels measured slower: 15 -> 16 channels took 0.96 ms per 64
 * images as one block of 16 x 1 chunk, 0.77 ms as two of 8 x 2). */
PX__BLOCK(p2, PX__P2_FN, 1, 4)
PX__BLOCK(p2, PX__P2_FN, 2, 4)
PX__BLOCK(p2, PX__P2_FN, 3, 4)
PX__BLOCK(p2, PX__P2_FN, 4, 4)
PX__BLOCK(p2, PX__P2_FN, 5, 3)
PX__BLOCK(p2, PX__P2_FN, 6, 2)
PX__BLOCK(p2, PX__P2_FN, 7, 2)
PX__BLOCK(p2, PX__P2_FN, 8, 2)

static const px__block_fn px__p2_blocks[PX__NO + 1] = {
    NULL,           px__p2_block_1, px__p2_block_2, px__p2_block_3, px__p2_block_4,
    px__p2_block_5, px__p2_block_6, px__p2_block_7, px__p2_block_8};

void px__p2_conv3x3(const px__p2_conv_t *p) {
  assert(p->c_in >= 1 && p->c_out >= 1 && p->h >= 1 && p->w >= 1 && p->x != p->y);
  assert(px__p2_available());
  const int qi = (p->c_in + 1) / 2, qo = (p->c_out + 1) / 2;
  const int64_t pitch = p->w + 2, plane = (int64_t)(p->h + 2) * pitch;
#pragma omp parallel for schedule(static)
  for (int32_t b = 0; b < p->batch; b++) {
    px__blk_t g = {.x = p->x + (size_t)b * (size_t)qi * (size_t)plane, .ci = qi,
                   .c_out = p->c_out, .h = p->h, .w = p->w, .nx = (p->w + 15) / 16,
                   .pitch = pitch, .plane = plane, .sum = p->sum, .relu_mid = p->relu_mid,
                   .relu = p->relu};
    px__image(&g, px__p2_blocks, 2, p->y + (size_t)b * (size_t)qo * (size_t)plane, p->wq,
              p->bias, p->c_out);
  }
}

/* Image b of px__p2_to_nhwc: 16 pixels of a row at a time, 8 pairs (16
 * channels) at a time, transposed in registers so that each pixel's 16
 * bf16 values are one masked store (the mask drops the channels past c). */
PX__P2_FN void px__p2_to_nhwc_v(const uint32_t *x, int32_t b, int c, int h, int w, uint16_t *y) {
  const int qn = (c + 1) / 2;
  const int64_t pitch = w + 2, plane = (int64_t)(h + 2) * pitch;
  x += (size_t)b * (size_t)qn * (size_t)plane;
  y += (size_t)b * (size_t)h * (size_t)w * (size_t)c;
  for (int q0 = 0; q0 < qn; q0 += 8) {
    const int nq = qn - q0 < 8 ? qn - q0 : 8, nc = c - 2 * q0 < 16 ? c - 2 * q0 : 16;
    const __mmask16 cm = (__mmask16)((1u << nc) - 1u);
    for (int py = 0; py < h; py++)
      for (int x0 = 0; x0 < w; x0 += 16) {
        const int lanes = w - x0 < 16 ? w - x0 : 16;
        const __mmask16 m = (__mmask16)((1u << lanes) - 1u);
        const uint32_t *src = x + (size_t)q0 * (size_t)plane + (size_t)(py + 1) * (size_t)pitch +
                              (size_t)x0 + 1;
        uint16_t *dst = y + ((size_t)py * (size_t)w + (size_t)x0) * (size_t)c + (size_t)(2 * q0);
        __m512i r[8], v[8];
        PX__UNROLL(8)
        for (int i = 0; i < 8; i++)
          r[i] = i < nq ? _mm512_maskz_loadu_epi32(m, src + (size_t)i * (size_t)plane)
                        : _mm512_setzero_si512();
        px__transpose8(r, v);
        PX__UNROLL(16)
        for (int j = 0; j < 16; j++) {
          const __m512i vj = v[j / 8 * 4 + j % 4];
          const __m256i half = j / 4 % 2 ? _mm512_extracti64x4_epi64(vj, 1)
                                         : _mm512_castsi512_si256(vj);
          /* past the row's last pixel: nothing stored, and no pointer past the output */
          const size_t at = j < lanes ? (size_t)j * (size_t)c : 0;
          _mm256_mask_storeu_epi16(dst + at, j < lanes ? cm : 0, half);
        }
      }
  }
}

/* 16 pixels of a row (lanes of them in the row, all when full), 8 pairs of
 * channels from pair q0 (nq of them; cm the mask of their channels among a
 * pixel's 16), from src (the first pixel's channel 2 q0) to dst (pair q0's
 * plane, the first pixel's word): each pixel's 16 bf16 values one masked
 * load, transposed in registers so that each pair's words are one masked
 * store. */
PX__P2_INLINE void px__p2_from_chunk(const uint16_t *src, int c, __mmask16 cm, int lanes,
                                     int nq, int64_t plane, uint32_t *dst, const int full) {
  __m512i a[8], r[8];
  PX__UNROLL(8)
  for (int k = 0; k < 8; k++) {
    __m256i p[2];
    PX__UNROLL(2)
    for (int e = 0; e < 2; e++) {
      const int j = k + 8 * e;
      /* past the row's last pixel: nothing loaded, and no pointer past the input */
      p[e] = full ? _mm256_maskz_loadu_epi16(cm, src + (size_t)j * (size_t)c)
                  : _mm256_maskz_loadu_epi16(j < lanes ? cm : 0,
                                             src + (j < lanes ? (size_t)j * (size_t)c : 0));
    }
    a[k] = _mm512_inserti64x4(_mm512_castsi256_si512(p[0]), p[1], 1);
  }
  px__untranspose8(a, r);
  const __mmask16 m = (__mmask16)(full ? 0xFFFFu : (1u << lanes) - 1u);
  PX__UNROLL(8)
  for (int i = 0; i < 8; i++)
    if (i < nq) _mm512_mask_storeu_epi32(dst + i * plane, m, r[i]);
}

/* Image b of px__p2_from_nhwc: px__p2_to_nhwc_v backwards, and the
 * borders. The channels past c load as zeros (the high half of the last
 * pair when c is odd; whole pairs past it are not stored). */
PX__P2_FN void px__p2_from_nhwc_v(const uint16_t *x, int32_t b, int c, int h, int w, uint32_t *y) {
  const int qn = (c + 1) / 2;
  const int64_t pitch = w + 2, plane = (int64_t)(h + 2) * pitch;
  x += (size_t)b * (size_t)h * (size_t)w * (size_t)c;
  y += (size_t)b * (size_t)qn * (size_t)plane;
  for (int q0 = 0; q0 < qn; q0 += 8) {
    const int nq = qn - q0 < 8 ? qn - q0 : 8, nc = c - 2 * q0 < 16 ? c - 2 * q0 : 16;
    const __mmask16 cm = (__mmask16)((1u << nc) - 1u);
    for (int py = 0; py < h; py++) {
      const uint16_t *src = x + (size_t)py * (size_t)w * (size_t)c + (size_t)(2 * q0);
      uint32_t *dst = y + (size_t)q0 * (size_t)plane + (size_t)(py + 1) * (size_t)pitch + 1;
      int x0 = 0;
      for (; x0 + 16 <= w; x0 += 16)
        px__p2_from_chunk(src + (size_t)x0 * (size_t)c, c, cm, 16, nq, plane, dst + x0, 1);
      if (x0 < w)
        px__p2_from_chunk(src + (size_t)x0 * (size_t)c, c, cm, w - x0, nq, plane, dst + x0, 0);
      for (int i = 0; i < nq; i++) px__zero_pair(dst + i * plane + w);
    }
  }
  for (int q = 0; q < qn; q++) px__zero_rows_v(y + (size_t)q * (size_t)plane, h, w);
}

/* ---- the f32 kernel (P1) ---- */

/* As px__p2_chunks, one FMA by a broadcast weight per input channel, tap,
 * output channel and chunk; the epilogue adds the bias, applies the ReLUs
 * and the residual, and stores the masked lanes. */
PX__F_INLINE void px__p1_chunks(const px__blk_t *g, int64_t k, int64_t nk, const int no,
                                const int nch, const int full) {
  const float *x = g->x, *wt = g->wq;
  float *y = g->y;
  const float *xp[PX__NCH];
  float *yp[PX__NCH];
  __mmask16 m[PX__NCH];
  __m512 acc[PX__NCH][PX__NO];
  PX__UNROLL(4)
  for (int c = 0; c < nch; c++) {
    int64_t xo, yo;
    px__chunk_at(g, k + c, nk, &xo, &yo, &m[c]);
    xp[c] = x + xo;
    yp[c] = y + yo;
    PX__UNROLL(8)
    for (int o = 0; o < no; o++) acc[c][o] = _mm512_setzero_ps();
  }
  for (int i = 0; i < g->ci; i++) {
    const float *xq[PX__NCH];
    PX__UNROLL(4)
    for (int c = 0; c < nch; c++) xq[c] = xp[c] + i * g->plane;
    PX__UNROLL(3)
    for (int ky = 0; ky < 3; ky++)
      PX__UNROLL(3)
      for (int kx = 0; kx < 3; kx++, wt += g->c_out) {
        __m512 xv[PX__NCH];
        PX__UNROLL(4)
        for (int c = 0; c < nch; c++)
          xv[c] = full ? _mm512_loadu_ps(xq[c] + ky * g->pitch + kx)
                       : _mm512_maskz_loadu_ps(m[c], xq[c] + ky * g->pitch + kx);
        PX__UNROLL(8)
        for (int o = 0; o < no; o++) {
          const __m512 wv = _mm512_set1_ps(wt[o]);
          PX__UNROLL(4)
          for (int c = 0; c < nch; c++) acc[c][o] = _mm512_fmadd_ps(xv[c], wv, acc[c][o]);
        }
      }
  }
  PX__UNROLL(4)
  for (int c = 0; c < nch; c++)
    PX__UNROLL(8)
    for (int o = 0; o < no; o++) {
      float *yo = yp[c] + o * g->plane;
      __m512 v = px__mid(g, acc[c][o], o);
      if (g->sum) v = _mm512_add_ps(v, _mm512_maskz_loadu_ps(m[c], yo));
      if (g->relu) v = _mm512_max_ps(v, _mm512_setzero_ps());
      _mm512_mask_storeu_ps(yo, m[c], v);
    }
}

/* The bf16 kernel's blocks: FMAs need as many accumulators as its dot
 * products (3 chunks for 6 to 8 channels, or 15 channels as three blocks of
 * 5, measured no faster with GCC 12). */
PX__BLOCK(p1, PX__F_FN, 1, 4)
PX__BLOCK(p1, PX__F_FN, 2, 4)
PX__BLOCK(p1, PX__F_FN, 3, 4)
PX__BLOCK(p1, PX__F_FN, 4, 4)
PX__BLOCK(p1, PX__F_FN, 5, 3)
PX__BLOCK(p1, PX__F_FN, 6, 2)
PX__BLOCK(p1, PX__F_FN, 7, 2)
PX__BLOCK(p1, PX__F_FN, 8, 2)

static const px__block_fn px__p1_blocks[PX__NO + 1] = {
    NULL,           px__p1_block_1, px__p1_block_2, px__p1_block_3, px__p1_block_4,
    px__p1_block_5, px__p1_block_6, px__p1_block_7, px__p1_block_8};

void px__p1_conv3x3(const px__p1_conv_t *p) {
  assert(p->c_in >= 1 && p->c_out >= 1 && p->h >= 1 && p->w >= 1 && p->x != p->y);
  assert(px__p1_available());
  const int64_t pitch = p->w + 2, plane = (int64_t)(p->h + 2) * pitch;
#pragma omp parallel for schedule(static)
  for (int32_t b = 0; b < p->batch; b++) {
    px__blk_t g = {.x = p->x + (size_t)b * (size_t)p->c_in * (size_t)plane, .ci = p->c_in,
                   .c_out = p->c_out, .h = p->h, .w = p->w, .nx = (p->w + 15) / 16,
                   .pitch = pitch, .plane = plane, .sum = p->sum, .relu_mid = p->relu_mid,
                   .relu = p->relu};
    px__image(&g, px__p1_blocks, 1, p->y + (size_t)b * (size_t)p->c_out * (size_t)plane, p->wq,
              p->bias, p->c_out);
  }
}

/* Image b of px__p1_to_nhwc, as px__p2_to_nhwc_v: 16 pixels by 8 channels
 * at a time, each pixel's 8 floats one masked store. */
PX__F_FN void px__p1_to_nhwc_v(const float *x, int32_t b, int c, int h, int w, float *y) {
  const int64_t pitch = w + 2, plane = (int64_t)(h + 2) * pitch;
  x += (size_t)b * (size_t)c * (size_t)plane;
  y += (size_t)b * (size_t)h * (size_t)w * (size_t)c;
  for (int c0 = 0; c0 < c; c0 += 8) {
    const int nc = c - c0 < 8 ? c - c0 : 8;
    const __mmask16 cm = (__mmask16)((1u << nc) - 1u);
    for (int py = 0; py < h; py++)
      for (int x0 = 0; x0 < w; x0 += 16) {
        const int lanes = w - x0 < 16 ? w - x0 : 16;
        const __mmask16 m = (__mmask16)((1u << lanes) - 1u);
        const float *src = x + (size_t)c0 * (size_t)plane + (size_t)(py + 1) * (size_t)pitch +
                           (size_t)x0 + 1;
        float *dst = y + ((size_t)py * (size_t)w + (size_t)x0) * (size_t)c + (size_t)c0;
        __m512i r[8], v[8];
        PX__UNROLL(8)
        for (int i = 0; i < 8; i++)
          r[i] = i < nc ? _mm512_castps_si512(
                              _mm512_maskz_loadu_ps(m, src + (size_t)i * (size_t)plane))
                        : _mm512_setzero_si512();
        px__transpose8(r, v);
        PX__UNROLL(16)
        for (int j = 0; j < 16; j++) {
          __m512i vj = v[j / 8 * 4 + j % 4];
          if (j / 4 % 2) vj = _mm512_shuffle_i64x2(vj, vj, 0x4E); /* the high half down */
          const size_t at = j < lanes ? (size_t)j * (size_t)c : 0;
          _mm512_mask_storeu_ps(dst + at, j < lanes ? cm : 0, _mm512_castsi512_ps(vj));
        }
      }
  }
}

/* As px__p2_from_chunk, 8 channels (nc of them stored; cm their mask, on
 * the low 8 lanes of a 512-bit load, as AVX512F has no 256-bit masked
 * load). */
PX__F_INLINE void px__p1_from_chunk(const float *src, int c, __mmask16 cm, int lanes, int nc,
                                    int64_t plane, float *dst, const int full) {
  __m512i a[8], r[8];
  PX__UNROLL(8)
  for (int k = 0; k < 8; k++) {
    __m512i p[2];
    PX__UNROLL(2)
    for (int e = 0; e < 2; e++) {
      const int j = k + 8 * e;
      p[e] = _mm512_castps_si512(
          full ? _mm512_maskz_loadu_ps(cm, src + (size_t)j * (size_t)c)
               : _mm512_maskz_loadu_ps(j < lanes ? cm : 0,
                                       src + (j < lanes ? (size_t)j * (size_t)c : 0)));
    }
    a[k] = _mm512_inserti64x4(p[0], _mm512_castsi512_si256(p[1]), 1);
  }
  px__untranspose8(a, r);
  const __mmask16 m = (__mmask16)(full ? 0xFFFFu : (1u << lanes) - 1u);
  PX__UNROLL(8)
  for (int i = 0; i < 8; i++)
    if (i < nc) _mm512_mask_storeu_ps(dst + i * plane, m, _mm512_castsi512_ps(r[i]));
}

/* Image b of px__p1_from_nhwc: px__p1_to_nhwc_v backwards, and the
 * borders. */
PX__F_FN void px__p1_from_nhwc_v(const float *x, int32_t b, int c, int h, int w, float *y) {
  const int64_t pitch = w + 2, plane = (int64_t)(h + 2) * pitch;
  x += (size_t)b * (size_t)h * (size_t)w * (size_t)c;
  y += (size_t)b * (size_t)c * (size_t)plane;
  for (int c0 = 0; c0 < c; c0 += 8) {
    const int nc = c - c0 < 8 ? c - c0 : 8;
    const __mmask16 cm = (__mmask16)((1u << nc) - 1u);
    for (int py = 0; py < h; py++) {
      const float *src = x + (size_t)py * (size_t)w * (size_t)c + (size_t)c0;
      float *dst = y + (size_t)c0 * (size_t)plane + (size_t)(py + 1) * (size_t)pitch + 1;
      int x0 = 0;
      for (; x0 + 16 <= w; x0 += 16)
        px__p1_from_chunk(src + (size_t)x0 * (size_t)c, c, cm, 16, nc, plane, dst + x0, 1);
      if (x0 < w)
        px__p1_from_chunk(src + (size_t)x0 * (size_t)c, c, cm, w - x0, nc, plane, dst + x0, 0);
      for (int i = 0; i < nc; i++) px__zero_pair(dst + i * plane + w);
    }
  }
  for (int ch = 0; ch < c; ch++) px__zero_rows_v(y + (size_t)ch * (size_t)plane, h, w);
}

#else /* not x86-64: px__p2_available() and px__p1_available() are 0 */

void px__p2_conv3x3(const px__p2_conv_t *p) { px__p2_conv3x3_ref(p); }
void px__p1_conv3x3(const px__p1_conv_t *p) { px__p1_conv3x3_ref(p); }

static void px__p2_to_nhwc_v(const uint32_t *x, int32_t b, int c, int h, int w, uint16_t *y) {
  px__p2_to_nhwc_c(x, b, c, h, w, y);
}

static void px__p1_to_nhwc_v(const float *x, int32_t b, int c, int h, int w, float *y) {
  px__p1_to_nhwc_c(x, b, c, h, w, y);
}

static void px__p2_from_nhwc_v(const uint16_t *x, int32_t b, int c, int h, int w, uint32_t *y) {
  px__p2_from_nhwc_c(x, b, c, h, w, y);
}

static void px__p1_from_nhwc_v(const float *x, int32_t b, int c, int h, int w, float *y) {
  px__p1_from_nhwc_c(x, b, c, h, w, y);
}

#endif
