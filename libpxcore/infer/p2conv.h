/* 3x3 convolutions (stride 1, pad 1) for narrow layers on the "pair-planar"
 * (P2) bf16 layout, vectorised over 16 output pixels with AVX512-BF16 dot
 * products, so that a layer of 1, 8 or 15 channels wastes no lane (oneDNN
 * 2.6's bf16 convolutions vectorise over channels and pad them to 16 or 32).
 *
 * P2: an activation of C channels, H x W, for B images is an array of
 * uint32_t words, Q = (C + 1) / 2 channel pairs; pixel (y, x) of pair q of
 * image b is word ((b * Q + q) * (H + 2) + y + 1) * (W + 2) + x + 1. A word
 * holds the bf16 of channel 2q in its low 16 bits and that of channel 2q + 1
 * in its high 16 bits (0 when 2q + 1 == C). The one-pixel border around
 * each pair plane is zero: it is the convolution's zero padding, so the
 * kernel reads taps without tests. bf16 values are the round-to-nearest-even
 * of the f32 bits.
 *
 * px__p2_conv3x3 runs on CPUs with AVX512F, BW, VL and BF16
 * (px__p2_available); px__p2_conv3x3_ref is the plain C reference it is
 * tested against (tests/test_infer_p2.c). Nothing here allocates; the
 * convolutions split their images over the OpenMP threads of the caller
 * (each image on one thread, so results do not depend on the count).
 *
 * The same in f32 for a bf16 net's f32 twin (oneDNN 2.6's f32 kernels pad
 * narrow layers the same way), on the "planar" (P1) layout: channel c of
 * image b is the float plane (b * C + c) * (H + 2) * (W + 2), pixel (y, x)
 * at (y + 1) * (W + 2) + x + 1 in it, the one-pixel border zero. Its kernel
 * multiplies 16 pixels of a channel by a broadcast weight (AVX512F FMAs). */
#ifndef PX_P2CONV_H
#define PX_P2CONV_H

#include <stddef.h>
#include <stdint.h>

/* Words of a P2 activation: batch * Q * (h + 2) * (w + 2). */
size_t px__p2_words(int32_t batch, int c, int h, int w);

/* 1 when px__p2_conv3x3 can run here: the CPU has AVX512F, AVX512BW,
 * AVX512VL and AVX512_BF16 and the environment variable PX_INFER_P2 is not
 * "0". Decided once per process. Always 0 off x86-64. */
int px__p2_available(void);

/* Words of packed weights: Q_in * 9 * c_out. */
size_t px__p2_weight_words(int c_in, int c_out);

/* Packs wf ([c_out][c_in][3][3] f32, BN already folded) into wq
 * (px__p2_weight_words words): wq[(q * 9 + ky * 3 + kx) * c_out + o] is the
 * bf16 pair of input channels 2q (low) and 2q + 1 (high, 0 past c_in). */
void px__p2_pack_weights(const float *wf, int c_in, int c_out, uint32_t *wq);

typedef struct {
  const uint32_t *x;  /* P2 input, c_in channels, h x w, batch images */
  uint32_t *y;        /* P2 output, c_out channels, h x w; does not overlap x */
  const uint32_t *wq; /* px__p2_pack_weights of the filters */
  const float *bias;  /* [c_out] */
  int32_t batch;
  int c_in, c_out, h, w; /* c_in >= 1, c_out >= 1, h >= 1, w >= 1 */
  int sum;            /* 1: y already holds a P2 activation of c_out channels (the residual),
                         added after the bias and relu_mid */
  int relu_mid;       /* ReLU on (acc + bias), before the sum */
  int relu;           /* ReLU last */
} px__p2_conv_t;

/* y[b][o][py][px] = bf16(R(M(acc + bias[o]) + (sum ? old y : 0))), acc the
 * sum over c, ky, kx of x * w (bf16 products accumulated in f32), M a
 * ReLU when relu_mid, R one when relu. Writes every word of y's batch
 * images, zero borders included (y may hold garbage when sum is 0). Cannot
 * fail. px__p2_conv3x3 only when px__p2_available(); the reference on any
 * CPU. Both accumulate each output in the same order (pairs, then taps,
 * the odd channel of a pair before the even one, as Intel documents
 * VDPBF16PS), so they agree to the bit but where the instruction flushes
 * denormals (all words did in the tests on a Zen 5). */
void px__p2_conv3x3(const px__p2_conv_t *p);
void px__p2_conv3x3_ref(const px__p2_conv_t *p);

/* The first n images of x (f32 NCHW, c channels, h x w) into y, a P2
 * activation of batch >= n images; images n .. batch - 1 all zero,
 * borders zero. */
void px__p2_from_nchw(const float *x, int32_t n, int32_t batch, int c, int h, int w, uint32_t *y);

/* P2 activation x (batch images) into y, bf16 NHWC (uint16_t
 * [batch][h][w][c]). Vectorised where px__p2_available(), 16 pixels at a
 * time (the same values either way). */
void px__p2_to_nhwc(const uint32_t *x, int32_t batch, int c, int h, int w, uint16_t *y);

/* The inverse: x, bf16 NHWC (uint16_t [batch][h][w][c]), into y, a P2
 * activation of batch images. Writes every word of y's batch images,
 * borders zero and the high half of the last pair 0 when c is odd (y may
 * hold garbage); x and y do not overlap. Vectorised where
 * px__p2_available() (the same words either way). Cannot fail. */
void px__p2_from_nhwc(const uint16_t *x, int32_t batch, int c, int h, int w, uint32_t *y);

/* ---- P1: f32 ---------------------------------------------------------------- */

/* Floats of a P1 activation: batch * c * (h + 2) * (w + 2). */
size_t px__p1_words(int32_t batch, int c, int h, int w);

/* 1 when px__p1_conv3x3 can run here: the CPU has AVX512F and PX_INFER_P2
 * is not "0" (the one switch turns both layouts off). Decided once per
 * process. Always 0 off x86-64. */
int px__p1_available(void);

/* Floats of packed weights: c_in * 9 * c_out. */
size_t px__p1_weight_words(int c_in, int c_out);

/* Packs wf ([c_out][c_in][3][3], BN already folded) into wq
 * (px__p1_weight_words floats): wq[(c * 9 + ky * 3 + kx) * c_out + o]. */
void px__p1_pack_weights(const float *wf, int c_in, int c_out, float *wq);

typedef struct {
  const float *x;     /* P1 input, c_in channels, h x w, batch images */
  float *y;           /* P1 output, c_out channels, h x w; does not overlap x */
  const float *wq;    /* px__p1_pack_weights of the filters */
  const float *bias;  /* [c_out] */
  int32_t batch;
  int c_in, c_out, h, w; /* c_in >= 1, c_out >= 1, h >= 1, w >= 1 */
  int sum;            /* 1: y already holds a P1 activation of c_out channels (the residual),
                         added after the bias and relu_mid */
  int relu_mid;       /* ReLU on (acc + bias), before the sum */
  int relu;           /* ReLU last */
} px__p1_conv_t;

/* y[b][o][py][px] = R(M(acc + bias[o]) + (sum ? old y : 0)), acc the sum
 * over c, ky, kx (in that order, from 0) of x * w, each step one fused
 * multiply-add (one rounding), M a ReLU when relu_mid, R one when relu.
 * Writes every float of y's batch images, zero borders included (y may
 * hold garbage when sum is 0). Cannot fail. px__p1_conv3x3 only when
 * px__p1_available(); the reference (fmaf) on any CPU; they agree to the
 * bit. */
void px__p1_conv3x3(const px__p1_conv_t *p);
void px__p1_conv3x3_ref(const px__p1_conv_t *p);

/* The first n images of x (f32 NCHW, c channels, h x w) into y, a P1
 * activation of batch >= n images; images n .. batch - 1 all zero,
 * borders zero. */
void px__p1_from_nchw(const float *x, int32_t n, int32_t batch, int c, int h, int w, float *y);

/* P1 activation x (batch images) into y, f32 NHWC ([batch][h][w][c]).
 * Vectorised where px__p1_available(). */
void px__p1_to_nhwc(const float *x, int32_t batch, int c, int h, int w, float *y);

/* The inverse: x, f32 NHWC ([batch][h][w][c]), into y, a P1 activation of
 * batch images, each float's bits as they are. Writes every float of y's
 * batch images, borders +0 (y may hold garbage); x and y do not overlap.
 * Vectorised where px__p1_available(). Cannot fail. */
void px__p1_from_nhwc(const float *x, int32_t batch, int c, int h, int w, float *y);

#endif
