/* Batch normalisation on the CPU with PyTorch semantics: training forward
 * (batch statistics, optional fused ReLU), inference forward (running
 * statistics) and the backward (dx, dscale, dshift), on the input's own
 * layout (plain NCHW, or the channel-blocked nChw8c / nChw16c the
 * convolution before it writes, or NHWC).
 *
 * Our own loops, not oneDNN's primitive: oneDNN 2.6 sums x and x^2 about 0
 * in one pass for the variance and sum(dy x) - mean sum(dy) for the
 * backward, in f32, which loses the digits of a channel whose mean is large
 * against its spread (the MobileNet-style net's gradients drifted from
 * PyTorch's at 40 x 24 maps; docs/performance.md). Here each
 * task (an image's channel block) sums x - c and (x - c)^2 in one pass about
 * c, the mean of its first pixels, so the difference that gives the task's
 * squared deviations loses only what c misses of the mean; the tasks are
 * combined in image order by Chan's formula, and the backward sums dy and
 * dy (x - mean), all carried in double (float over 8 vectors at a time).
 * Like oneDNN's, the forward reads x twice (sums, then the map) and the
 * backward reads dy and x twice; a one-thread resnet20 step with it is
 * about 2% slower than with oneDNN's (docs/performance.md). Work is
 * split into (image, channel block) tasks over the OpenMP threads oneDNN
 * runs on (px__cpu_enter sets their count); each task writes its own
 * partial sums, which are added in image order, so the result does not
 * depend on the number of threads. The ReLU mask goes from the forward to
 * the backward in the workspace, one bit per value (as oneDNN's; a byte
 * per value cost resnet20 11 MB more at batch 128, 32 x 32 inputs).
 * Nothing is allocated per call. nn/cpu/ref_ops.c holds the plain
 * reference the tests compare with. */
#include <math.h>
#include <string.h>

#include "nn/cpu/px_cpu_int.h"
#include "prunex/ops_internal.h"

#define PX__BN_VL 16 /* lanes of the partial sums: a multiple of every channel block */

/* Where value (image i, channel ch, pixel p of H*W) of the input lies:
 * i * s_n + (ch / blk) * s_b + p * s_p + ch % blk floats from the start. */
typedef struct {
  int64_t n, c, hw;      /* logical N, C, H*W */
  int64_t blk;           /* channels stored side by side (the layout's inner block; 1: none) */
  int64_t nblk;          /* channel blocks: padded channels / blk */
  int64_t s_n, s_b, s_p; /* strides in floats of an image, a channel block, a pixel */
  int64_t numel;         /* floats in the storage, padding included */
  int rows;              /* 1: the lanes of 16 map onto channels: a block of an image is one
                            contiguous run (s_p == blk) and blk divides PX__BN_VL, or blk is
                            PX__BN_VL and a vector is one pixel's block (channels-last) */
  int64_t vs;            /* with rows: floats from one vector of a task to the next
                            (PX__BN_VL in a run, s_p for a pixel's block) */
  int64_t mbytes;        /* bytes of a task's ReLU mask: a bit per value, whole 16-bit words */
  int cl;                /* channels-last with c neither a multiple nor a divisor of 16: a task
                            is an image (blk = c), its pixels' rows of c channels in vectors of
                            16, the last one partial; mask bit p * mrow + l (rows of whole
                            16-bit words) */
  int64_t mrow;          /* with cl: c rounded up to 16 */
} px__bn_geom_t;

struct px_batchnorm {
  px__ops_head_t head; /* first: the dispatcher reads it */
  px_ops_t *ops;
  px_batchnorm_params_t p;
  px__bn_geom_t g;
  px_tensor_t x_spec;  /* [N, C, H, W], layout of the input; y and dx, dy share it */
  px_tensor_t c_spec;  /* [C] plain f32 */
  px_tensor_t ws_spec; /* [tasks * g.mbytes] u8, the ReLU mask, a bit per value; nbytes 0
                          without fused ReLU */
  double *part;        /* [N, 2, Cpad] the tasks' partial sums, two per channel */
  float *fcoef;        /* [3, Cpad] the last training forward's coefficients (centre, factor,
                          offset), kept for px_batchnorm_recompute */
  int trained;         /* a training forward has run: fcoef holds its coefficients */
  double *stat;        /* [2, Cpad] per channel: the two sums (or mean and variance) */
  float *coef;         /* [4, Cpad] per channel, the maps' coefficients: centre, factor,
                          offset (forwards) or mean of masked dy (backward), dx's x factor */
  float *centre;       /* [N, Cpad] with g.cl: each image task's centre for its sums */
};

/* ---- layout ------------------------------------------------------------------ */

/* The geometry of md (4-D f32): plain or blocked on channels alone. */
static px_status_t px__bn_geom(const dnnl_memory_desc_t *md, px__bn_geom_t *g) {
  const dnnl_blocking_desc_t *b = &md->format_desc.blocking;
  const int64_t *d = md->dims, *pd = md->padded_dims;
  int ok = md->format_kind == dnnl_blocked && md->ndims == 4 && md->offset0 == 0 &&
           pd[0] == d[0] && pd[2] == d[2] && pd[3] == d[3] && b->strides[2] == d[3] * b->strides[3] &&
           (b->inner_nblks == 0 || (b->inner_nblks == 1 && b->inner_idxs[0] == 1 &&
                                    b->inner_blks[0] <= PX__BN_VL));
  if (!ok) return px_set_error(PX_ERR_INVALID, "px_batchnorm_create: the input's layout is not "
                               "plain or blocked on channels alone "
                               "(in blocks of at most 16)");
  memset(g, 0, sizeof *g);
  g->n = d[0];
  g->c = d[1];
  g->hw = d[2] * d[3];
  g->blk = b->inner_nblks ? b->inner_blks[0] : 1;
  g->nblk = pd[1] / g->blk;
  g->s_n = b->strides[0];
  g->s_b = b->strides[1];
  g->s_p = b->strides[3];
  g->numel = (int64_t)(dnnl_memory_desc_get_size(md) / sizeof(float));
  g->rows = g->s_p == g->blk && PX__BN_VL % g->blk == 0;
  g->vs = PX__BN_VL;
  if (g->blk == 1 && g->c > 1 && g->s_b == 1 && g->s_p == g->c) { /* channels-last (acdb) */
    if (g->c % PX__BN_VL == 0) { /* a task: an image's 16 channels, a vector per pixel */
      g->blk = g->s_b = PX__BN_VL;
      g->nblk = g->c / PX__BN_VL;
      g->rows = 1;
      g->vs = g->s_p;
    } else if (PX__BN_VL % g->c == 0) { /* a task: an image, one run */
      g->blk = g->c;
      g->nblk = 1;
      g->rows = 1;
    } else { /* a task: an image, a row of c channels per pixel */
      g->blk = g->c;
      g->nblk = 1;
      g->cl = 1;
      g->mrow = (g->c + PX__BN_VL - 1) / PX__BN_VL * PX__BN_VL;
    }
  }
  g->mbytes = g->cl ? g->hw * g->mrow / 8 : (g->hw * g->blk + PX__BN_VL - 1) / PX__BN_VL * 2;
  return PX_OK;
}

/* ---- kernels: one (image, channel block) task each ------------------------------
 * A task's values: for pixel p and lane l < blk, r[p * s_p + l], channel
 * cb * blk + l. With g->rows they are one run of hw * blk floats whose value
 * k belongs to lane k % blk; the loops then go over the run in vectors of
 * PX__BN_VL floats (GCC's vector extension: one AVX-512 register, two AVX2
 * or four SSE ones, sums held in registers) with per-lane coefficients and
 * sums (lane j: channel j % blk). Sums are taken in float over PX__BN_CHUNK
 * vectors (deviations from a centre near the mean) and carried in double
 * from there on. The kernels are inlined into their callers with constant
 * flags, so a flag costs no test in the loop. */

#define PX__BN_INLINE static inline __attribute__((always_inline))
#define PX__BN_CHUNK 8 /* vectors summed in float before the sums go to double */

/* The vectors never cross a call (every function taking or returning one is
 * inlined), so GCC's note that their ABI differs between targets is moot. */
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic ignored "-Wpsabi"
#endif
typedef float px__bn_vf __attribute__((vector_size(PX__BN_VL * sizeof(float))));
typedef int32_t px__bn_vi __attribute__((vector_size(PX__BN_VL * sizeof(int32_t))));
typedef double px__bn_vd __attribute__((vector_size(PX__BN_VL * sizeof(double))));

PX__BN_INLINE px__bn_vf px__bn_ld(const float *p) {
  px__bn_vf v;
  memcpy(&v, p, sizeof v);
  return v;
}

PX__BN_INLINE void px__bn_st(float *p, px__bn_vf v) { memcpy(p, &v, sizeof v); }

/* The ReLU mask of vector v of a run: bit j of the little-endian 16-bit
 * word at m + 2 v is lane j's (the values past the last whole vector take
 * the next word's bits). */
PX__BN_INLINE px__bn_vi px__bn_lane_bits(void) {
  px__bn_vi b;
  for (int j = 0; j < PX__BN_VL; j++) b[j] = 1 << j;
  return b;
}

PX__BN_INLINE px__bn_vi px__bn_ld_mask(const uint8_t *m, int64_t v) {
  const int32_t w = m[2 * v] | m[2 * v + 1] << 8;
  return (((px__bn_vi){0} + w) & px__bn_lane_bits()) != 0;
}

/* The lanes' bits are gathered by halving (four shuffles and ors, where a
 * loop over the lanes costs sixteen extracts). */
_Static_assert(PX__BN_VL == 16, "px__bn_st_mask's shuffles are written for 16 lanes");
PX__BN_INLINE void px__bn_st_mask(uint8_t *m, int64_t v, px__bn_vi pos) {
  px__bn_vi b = pos & px__bn_lane_bits();
  b |= __builtin_shufflevector(b, b, 8, 9, 10, 11, 12, 13, 14, 15, 0, 1, 2, 3, 4, 5, 6, 7);
  b |= __builtin_shufflevector(b, b, 4, 5, 6, 7, 0, 1, 2, 3, 4, 5, 6, 7, 0, 1, 2, 3);
  b |= __builtin_shufflevector(b, b, 2, 3, 0, 1, 2, 3, 0, 1, 2, 3, 0, 1, 2, 3, 0, 1);
  b |= __builtin_shufflevector(b, b, 1, 0, 1, 0, 1, 0, 1, 0, 1, 0, 1, 0, 1, 0, 1, 0);
  m[2 * v] = (uint8_t)b[0];
  m[2 * v + 1] = (uint8_t)(b[0] >> 8);
}

/* Bit j of a task's mask, and setting it (a task's mask bytes are its own:
 * g->mbytes per task, bit j = value j of the run, or pixel
 * j / blk's lane j % blk where the task is not one run). */
PX__BN_INLINE int px__bn_bit(const uint8_t *m, int64_t j) { return (m[j >> 3] >> (j & 7)) & 1; }

PX__BN_INLINE void px__bn_set_bit(uint8_t *m, int64_t j, int on) {
  const unsigned b = 1u << (j & 7);
  m[j >> 3] = (uint8_t)(on ? m[j >> 3] | b : m[j >> 3] & ~b);
}

/* The per-lane values of per-channel v[blk]: lane j gets v[j % blk]. */
PX__BN_INLINE px__bn_vf px__bn_lanes(const float *v, const px__bn_geom_t *g) {
  px__bn_vf r;
  if (g->blk == PX__BN_VL) return px__bn_ld(v);
  for (int j = 0; j < PX__BN_VL; j++) r[j] = v[j & (g->blk - 1)]; /* blk: a power of 2 */
  return r;
}

/* Folds PX__BN_VL lane sums into out[blk]. */
PX__BN_INLINE void px__bn_fold(double *out, px__bn_vd lanes, int64_t blk) {
  if (blk == PX__BN_VL) {
    memcpy(out, &lanes, sizeof lanes);
    return;
  }
  for (int64_t l = 0; l < blk; l++) out[l] = 0.0;
  for (int j = 0; j < PX__BN_VL; j++) out[j & (blk - 1)] += lanes[j];
}

/* The first n (<= PX__BN_VL) floats at p as a vector (the rest 0), and
 * storing the first n lanes of v. */
PX__BN_INLINE px__bn_vf px__bn_ldn(const float *p, int64_t n) {
  if (n == PX__BN_VL) return px__bn_ld(p);
  px__bn_vf v = {0};
  memcpy(&v, p, (size_t)n * sizeof(float));
  return v;
}

PX__BN_INLINE void px__bn_stn(float *p, px__bn_vf v, int64_t n) {
  if (n == PX__BN_VL) px__bn_st(p, v);
  else memcpy(p, &v, (size_t)n * sizeof(float));
}

/* px__bn_sums_k on a channels-last image task (g->cl): per channel the
 * same sums in the same order as a 16-channel task's (float over
 * PX__BN_CHUNK pixels, then double), over the image's rows. */
PX__BN_INLINE void px__bn_sums_cl(double *o1, double *o2, const px__bn_geom_t *g, const float *u,
                                  const float *x, const uint8_t *m, const float *ctr,
                                  const int centred, const int masked) {
  const int64_t c = g->c;
  for (int64_t l = 0; l < c; l++) o1[l] = o2[l] = 0.0;
  for (int64_t p0 = 0; p0 < g->hw; p0 += PX__BN_CHUNK) {
    const int64_t p1 = p0 + PX__BN_CHUNK < g->hw ? p0 + PX__BN_CHUNK : g->hw;
    for (int64_t k0 = 0; k0 < c; k0 += PX__BN_VL) {
      const int64_t nl = c - k0 < PX__BN_VL ? c - k0 : PX__BN_VL;
      const px__bn_vf cv = px__bn_ldn(ctr + k0, nl);
      px__bn_vf a = {0}, b = {0};
      for (int64_t p = p0; p < p1; p++) {
        const int64_t k = p * c + k0;
        px__bn_vf d = px__bn_ldn(u + k, nl);
        if (centred) d -= cv;
        if (masked) d = (px__bn_vf)((px__bn_vi)d & px__bn_ld_mask(m, (p * g->mrow + k0) / PX__BN_VL));
        a += d;
        b += d * (centred ? d : px__bn_ldn(x + k, nl) - cv);
      }
      const px__bn_vd da = __builtin_convertvector(a, px__bn_vd);
      const px__bn_vd db = __builtin_convertvector(b, px__bn_vd);
      for (int64_t j = 0; j < nl; j++) {
        o1[k0 + j] += da[j];
        o2[k0 + j] += db[j];
      }
    }
  }
}

/* o1[l] = the sum of u and o2[l] = the sum of u (x - ctr[l]) over the task,
 * where u is x - ctr[l] (centred 1: the sums of the forward's statistics)
 * or dy, counted only where the ReLU mask m is set (masked 1: the
 * backward's). */
PX__BN_INLINE void px__bn_sums_k(double *o1, double *o2, const px__bn_geom_t *g, const float *u,
                                 const float *x, const uint8_t *m, const float *ctr,
                                 const int centred, const int masked) {
  if (g->cl) {
    px__bn_sums_cl(o1, o2, g, u, x, m, ctr, centred, masked);
    return;
  }
  if (g->rows) {
    px__bn_vd s1 = {0}, s2 = {0};
    const px__bn_vf c = px__bn_lanes(ctr, g);
    const int64_t len = g->hw * g->blk, nv = len / PX__BN_VL;
    for (int64_t v0 = 0; v0 < nv; v0 += PX__BN_CHUNK) {
      const int64_t v1 = v0 + PX__BN_CHUNK < nv ? v0 + PX__BN_CHUNK : nv;
      px__bn_vf a = {0}, b = {0};
      for (int64_t v = v0; v < v1; v++) {
        const int64_t k = v * g->vs;
        px__bn_vf d = px__bn_ld(u + k);
        if (centred) d -= c;
        if (masked) d = (px__bn_vf)((px__bn_vi)d & px__bn_ld_mask(m, v));
        a += d;
        b += d * (centred ? d : px__bn_ld(x + k) - c);
      }
      s1 += __builtin_convertvector(a, px__bn_vd);
      s2 += __builtin_convertvector(b, px__bn_vd);
    }
    for (int64_t k = nv * PX__BN_VL; k < len; k++) {
      const double w = (double)x[k] - c[k % PX__BN_VL];
      const double d = masked && !px__bn_bit(m, k) ? 0.0 : centred ? w : (double)u[k];
      s1[k % PX__BN_VL] += d;
      s2[k % PX__BN_VL] += d * w;
    }
    px__bn_fold(o1, s1, g->blk);
    px__bn_fold(o2, s2, g->blk);
    return;
  }
  for (int64_t l = 0; l < g->blk; l++) o1[l] = o2[l] = 0.0;
  for (int64_t p = 0; p < g->hw; p++)
    for (int64_t l = 0; l < g->blk; l++) {
      const int64_t k = p * g->s_p + l;
      const double w = (double)x[k] - ctr[l];
      const double d = masked && !px__bn_bit(m, p * g->blk + l) ? 0.0 : centred ? w : (double)u[k];
      o1[l] += d;
      o2[l] += d * w;
    }
}

/* y = (x - ctr[l]) * f[l] + o[l] at k, ReLU'd when relu; the mask (whether
 * it stayed positive) goes to bit j of m when record. */
PX__BN_INLINE void px__bn_y1(float *y, uint8_t *m, const float *x, int64_t k, int64_t j, float c,
                             float f, float o, const int relu, const int record) {
  const float v = (x[k] - c) * f + o;
  if (record) px__bn_set_bit(m, j, v > 0.0f);
  y[k] = relu ? (v > 0.0f ? v : 0.0f) : v;
}

/* The forward map over the task (px__bn_y1 at every value). */
PX__BN_INLINE void px__bn_map_y_k(float *y, uint8_t *m, const px__bn_geom_t *g, const float *x,
                                  const float *ctr, const float *f, const float *o, const int relu,
                                  const int record) {
  if (g->cl) { /* row by row (the coefficients stay in L1) */
    for (int64_t p = 0; p < g->hw; p++)
      for (int64_t k0 = 0; k0 < g->c; k0 += PX__BN_VL) {
        const int64_t nl = g->c - k0 < PX__BN_VL ? g->c - k0 : PX__BN_VL;
        const px__bn_vf c = px__bn_ldn(ctr + k0, nl), a = px__bn_ldn(f + k0, nl);
        const px__bn_vf b = px__bn_ldn(o + k0, nl);
        const int64_t k = p * g->c + k0;
        px__bn_vf u = (px__bn_ldn(x + k, nl) - c) * a + b;
        const px__bn_vi pos = u > 0.0f;
        if (record) px__bn_st_mask(m, (p * g->mrow + k0) / PX__BN_VL, pos);
        if (relu) u = (px__bn_vf)((px__bn_vi)u & pos);
        px__bn_stn(y + k, u, nl);
      }
    return;
  }
  if (g->rows) {
    const px__bn_vf c = px__bn_lanes(ctr, g), a = px__bn_lanes(f, g), b = px__bn_lanes(o, g);
    const int64_t len = g->hw * g->blk, nv = len / PX__BN_VL;
    for (int64_t v = 0; v < nv; v++) {
      const int64_t k = v * g->vs;
      px__bn_vf u = (px__bn_ld(x + k) - c) * a + b;
      const px__bn_vi pos = u > 0.0f;
      if (record) px__bn_st_mask(m, v, pos);
      if (relu) u = (px__bn_vf)((px__bn_vi)u & pos);
      px__bn_st(y + k, u);
    }
    for (int64_t k = nv * PX__BN_VL; k < len; k++) {
      const int j = (int)(k % PX__BN_VL);
      px__bn_y1(y, m, x, k, k, c[j], a[j], b[j], relu, record);
    }
    return;
  }
  for (int64_t p = 0; p < g->hw; p++)
    for (int64_t l = 0; l < g->blk; l++)
      px__bn_y1(y, m, x, p * g->s_p + l, p * g->blk + l, ctr[l], f[l], o[l], relu, record);
}

/* One value of the backward map: (dy, masked, - gm) * a - (x - c) * kx. */
PX__BN_INLINE void px__bn_dx1(float *dx, const float *dy, const float *x, const uint8_t *m,
                              int64_t k, int64_t j, float c, float a, float kx, float gm,
                              const int masked) {
  const float d = masked && !px__bn_bit(m, j) ? 0.0f : dy[k];
  dx[k] = (d - gm) * a - (x[k] - c) * kx;
}

/* dx = (dy, masked when masked, - gm[l]) * a[l] - (x - ctr[l]) * kx[l] over
 * the task (dx may be dy). */
PX__BN_INLINE void px__bn_map_dx_k(float *dx, const px__bn_geom_t *g, const float *dy,
                                   const float *x, const uint8_t *m, const float *ctr,
                                   const float *a, const float *kx, const float *gm,
                                   const int masked) {
  if (g->cl) {
    for (int64_t p = 0; p < g->hw; p++)
      for (int64_t k0 = 0; k0 < g->c; k0 += PX__BN_VL) {
        const int64_t nl = g->c - k0 < PX__BN_VL ? g->c - k0 : PX__BN_VL;
        const px__bn_vf c = px__bn_ldn(ctr + k0, nl), f = px__bn_ldn(a + k0, nl);
        const px__bn_vf q = px__bn_ldn(kx + k0, nl), s = px__bn_ldn(gm + k0, nl);
        const int64_t k = p * g->c + k0;
        px__bn_vf d = px__bn_ldn(dy + k, nl);
        if (masked) d = (px__bn_vf)((px__bn_vi)d & px__bn_ld_mask(m, (p * g->mrow + k0) / PX__BN_VL));
        px__bn_stn(dx + k, (d - s) * f - (px__bn_ldn(x + k, nl) - c) * q, nl);
      }
    return;
  }
  if (g->rows) {
    const px__bn_vf c = px__bn_lanes(ctr, g), f = px__bn_lanes(a, g);
    const px__bn_vf q = px__bn_lanes(kx, g), s = px__bn_lanes(gm, g);
    const int64_t len = g->hw * g->blk, nv = len / PX__BN_VL;
    for (int64_t v = 0; v < nv; v++) {
      const int64_t k = v * g->vs;
      px__bn_vf d = px__bn_ld(dy + k);
      if (masked) d = (px__bn_vf)((px__bn_vi)d & px__bn_ld_mask(m, v));
      px__bn_st(dx + k, (d - s) * f - (px__bn_ld(x + k) - c) * q);
    }
    for (int64_t k = nv * PX__BN_VL; k < len; k++) {
      const int j = (int)(k % PX__BN_VL);
      px__bn_dx1(dx, dy, x, m, k, k, c[j], f[j], q[j], s[j], masked);
    }
    return;
  }
  for (int64_t p = 0; p < g->hw; p++)
    for (int64_t l = 0; l < g->blk; l++)
      px__bn_dx1(dx, dy, x, m, p * g->s_p + l, p * g->blk + l, ctr[l], a[l], kx[l], gm[l],
                 masked);
}

/* ---- passes over all tasks ------------------------------------------------------ */

/* Whether a pass over g's values should fork the threads: not for data
 * within PX__SERIAL_BYTES, where the barrier costs more than it saves. */
static int px__bn_parallel(const px__bn_geom_t *g) {
  return (size_t)g->numel * sizeof(float) > PX__SERIAL_BYTES;
}

/* Sums the tasks' partial sums over the images, in image order: half 0
 * into o1[Cpad] and, when o2, half 1 into o2[Cpad]. */
static void px__bn_reduce(const px_batchnorm_t *op, double *o1, double *o2) {
  const int64_t cpad = op->g.nblk * op->g.blk;
  for (int64_t ch = 0; ch < cpad; ch++) o1[ch] = o2 ? (o2[ch] = 0.0) : 0.0;
  for (int64_t i = 0; i < op->g.n; i++) {
    const double *q = op->part + i * 2 * cpad;
    for (int64_t ch = 0; ch < cpad; ch++) o1[ch] += q[ch];
    if (o2)
      for (int64_t ch = 0; ch < cpad; ch++) o2[ch] += q[cpad + ch];
  }
}

/* One task's sum o1[l] and its sum of squared deviations from its own
 * mean o2[l], in one pass over the task's values: the sums of d = x - c
 * and d^2 about c, the mean of the task's first few pixels (PX__BN_CHUNK
 * vectors' worth), which lies within a fraction of the spread of the task's
 * mean; d^2's sum less (sum d)^2 / count then loses only the digits of
 * (task mean - c) / spread (a one-pass sum about 0 loses those of
 * mean / spread, oneDNN 2.6's case). */
PX__BN_INLINE void px__bn_task_stats(double *o1, double *o2, const px__bn_geom_t *g,
                                     const float *r, float *cc) {
  if (g->cl) { /* the centre: each channel's mean over the first pixels, in cc[c] */
    const int64_t np = g->hw < PX__BN_CHUNK ? g->hw : PX__BN_CHUNK;
    for (int64_t k0 = 0; k0 < g->c; k0 += PX__BN_VL) {
      const int64_t nl = g->c - k0 < PX__BN_VL ? g->c - k0 : PX__BN_VL;
      px__bn_vf a = {0};
      for (int64_t p = 0; p < np; p++) a += px__bn_ldn(r + p * g->c + k0, nl);
      px__bn_stn(cc + k0, a / (float)np, nl);
    }
    px__bn_sums_cl(o1, o2, g, r, r, NULL, cc, 1, 0);
    const double n = (double)g->hw, inv = 1.0 / n;
    for (int64_t l = 0; l < g->c; l++) {
      const double m2 = o2[l] - o1[l] * o1[l] * inv;
      o1[l] += n * cc[l];
      o2[l] = m2 > 0.0 ? m2 : 0.0;
    }
    return;
  }
  float c[PX__BN_VL] = {0};
  double d1[PX__BN_VL];
  const int64_t nv = g->rows ? g->hw * g->blk / PX__BN_VL : 0;
  if (nv > 0) { /* the first vectors' lanes, each a pixel's channel */
    const int64_t nc = nv < PX__BN_CHUNK ? nv : PX__BN_CHUNK;
    px__bn_vf a = {0};
    for (int64_t v = 0; v < nc; v++) a += px__bn_ld(r + v * g->vs);
    if (g->blk == PX__BN_VL) {
      px__bn_st(c, a / (float)nc);
    } else {
      for (int j = 0; j < PX__BN_VL; j++) c[j & (g->blk - 1)] += a[j];
      for (int64_t l = 0; l < g->blk; l++) c[l] /= (float)(nc * PX__BN_VL / g->blk);
    }
  } else {
    const int64_t np = g->hw < PX__BN_CHUNK ? g->hw : PX__BN_CHUNK;
    for (int64_t l = 0; l < g->blk; l++) {
      for (int64_t p = 0; p < np; p++) c[l] += r[p * g->s_p + l];
      c[l] /= (float)np;
    }
  }
  px__bn_sums_k(d1, o2, g, r, r, NULL, c, 1, 0);
  const double n = (double)g->hw, inv = 1.0 / n;
  for (int64_t l = 0; l < g->blk; l++) {
    const double m2 = o2[l] - d1[l] * d1[l] * inv;
    o1[l] = d1[l] + n * c[l];
    o2[l] = m2 > 0.0 ? m2 : 0.0;
  }
}

/* The tasks' entry points, each built for AVX-512, AVX2 and baseline x86-64
 * and picked when the library loads (GCC's target_clones): baseline x86-64
 * has 4-float vectors, and these loops run at the vector width. The flags
 * are tested once per task, the kernels inlined with them constant. */
#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__)
#define PX__BN_TASK static __attribute__((noinline, target_clones("avx512f", "avx2", "default")))
#else
#define PX__BN_TASK static __attribute__((noinline))
#endif

PX__BN_TASK void px__bn_task_stats_v(double *o1, double *o2, const px__bn_geom_t *g,
                                     const float *r, float *cc) {
  px__bn_task_stats(o1, o2, g, r, cc);
}

PX__BN_TASK void px__bn_task_y(float *y, uint8_t *m, const px__bn_geom_t *g, const float *x,
                               const float *ctr, const float *f, const float *o, int relu) {
  if (m) px__bn_map_y_k(y, m, g, x, ctr, f, o, 1, 1);
  else if (relu) px__bn_map_y_k(y, NULL, g, x, ctr, f, o, 1, 0);
  else px__bn_map_y_k(y, NULL, g, x, ctr, f, o, 0, 0);
}

PX__BN_TASK void px__bn_task_sum_dy(double *sg, double *sgx, const px__bn_geom_t *g,
                                    const float *dy, const float *x, const uint8_t *m,
                                    const float *ctr) {
  if (m) px__bn_sums_k(sg, sgx, g, dy, x, m, ctr, 0, 1);
  else px__bn_sums_k(sg, sgx, g, dy, x, NULL, ctr, 0, 0);
}

PX__BN_TASK void px__bn_task_dx(float *dx, const px__bn_geom_t *g, const float *dy, const float *x,
                                const uint8_t *m, const float *ctr, const float *a,
                                const float *kx, const float *gm) {
  if (m) px__bn_map_dx_k(dx, g, dy, x, m, ctr, a, kx, gm, 1);
  else px__bn_map_dx_k(dx, g, dy, x, NULL, ctr, a, kx, gm, 0);
}

/* Batch mean and biased variance of x into op->stat[0] and [1]: each task's
 * sum and squared deviations from its own mean, combined in image order
 * (Chan et al.: M2 = sum of the tasks' M2 + hw (task mean - mean)^2), so
 * x is read from memory once and nothing is a difference of large sums. */
static void px__bn_stats(px_batchnorm_t *op, const float *x) {
  const px__bn_geom_t *g = &op->g;
  const int64_t cpad = g->nblk * g->blk, tasks = g->n * g->nblk;
  const double cnt = (double)(g->n * g->hw), hw = (double)g->hw;
  double *mean = op->stat, *var = op->stat + cpad;
#pragma omp parallel for schedule(static) if (px__bn_parallel(g))
  for (int64_t t = 0; t < tasks; t++) {
    const int64_t i = t / g->nblk, cb = t % g->nblk;
    double *q = op->part + i * 2 * cpad + cb * g->blk;
    px__bn_task_stats_v(q, q + cpad, g, x + i * g->s_n + cb * g->s_b,
                        g->cl ? op->centre + i * cpad : NULL);
  }
  px__bn_reduce(op, mean, var);
  for (int64_t ch = 0; ch < cpad; ch++) mean[ch] /= cnt;
  const double inv_hw = 1.0 / hw;
  for (int64_t i = 0; i < g->n; i++) {
    const double *q = op->part + i * 2 * cpad;
    for (int64_t ch = 0; ch < cpad; ch++) {
      const double dm = q[ch] * inv_hw - mean[ch];
      var[ch] += hw * dm * dm;
    }
  }
  for (int64_t ch = 0; ch < cpad; ch++) var[ch] /= cnt;
}

/* y = (x - centre) * factor + offset with the coefficients in
 * coef[0..2] (of Cpad each), ReLU'd when the op fuses it; the mask goes to
 * ws when not NULL (training). Element by element: the same coefficients
 * give the same bits whatever the threads. */
static void px__bn_apply(px_batchnorm_t *op, const float *coef, float *y, uint8_t *ws,
                         const float *x) {
  const px__bn_geom_t *g = &op->g;
  const int64_t cpad = g->nblk * g->blk, tasks = g->n * g->nblk;
  const float *ctr = coef, *f = coef + cpad, *o = coef + 2 * cpad;
  const int relu = op->p.fuse_relu;
#pragma omp parallel for schedule(static) if (px__bn_parallel(g))
  for (int64_t t = 0; t < tasks; t++) {
    const int64_t cb = t % g->nblk, off = (t / g->nblk) * g->s_n + cb * g->s_b, l0 = cb * g->blk;
    uint8_t *m = ws ? ws + t * g->mbytes : NULL;
    px__bn_task_y(y + off, m, g, x + off, ctr + l0, f + l0, o + l0, relu);
  }
}

/* The forward coefficients into coef[0..3 Cpad) from per-channel centre
 * and variance (double) and the affine parameters; zero for padded
 * channels, whose y is then 0. */
static void px__bn_forward_coef(px_batchnorm_t *op, float *coef, const float *centre,
                                const double *var, const float *scale, const float *shift) {
  const int64_t cpad = op->g.nblk * op->g.blk;
  float *ctr = coef, *f = coef + cpad, *o = coef + 2 * cpad;
  for (int64_t ch = 0; ch < cpad; ch++) {
    const int real = ch < op->g.c;
    ctr[ch] = real ? centre[ch] : 0.0f;
    f[ch] = real ? (float)((double)scale[ch] / sqrt(var[ch] + (double)op->p.eps)) : 0.0f;
    o[ch] = real ? shift[ch] : 0.0f;
  }
}

/* ---- op ------------------------------------------------------------------------- */

void px__cpu_batchnorm_destroy(px_batchnorm_t *op) {
  if (!op) return;
  px_free(op->part);
  px_free(op->stat);
  px_free(op->coef);
  px_free(op->fcoef);
  px_free(op->centre);
  if (op->ops) px__cpu_op_died(op->ops);
  px_free(op);
}

px_status_t px__cpu_batchnorm_create(px_ops_t *ops, const px_tensor_t *x_spec,
                                     const px_batchnorm_params_t *p, px_batchnorm_t **out) {
  PX_REQUIRE(out && p, "px_batchnorm_create: NULL argument");
  *out = NULL;
  PX_CHECK(px__cpu_check_input(ops, x_spec, 4, 4, "px_batchnorm_create"));
  PX_REQUIRE(p->eps > 0.0f && p->momentum >= 0.0f && p->momentum <= 1.0f,
             "px_batchnorm_create: eps %g must be > 0 and momentum %g in [0, 1]", (double)p->eps,
             (double)p->momentum);
  px_status_t st = PX_OK;
  px_batchnorm_t *op = px__cpu_op_new(ops, sizeof *op, "px_batchnorm");
  if (!op) return PX_ERR_NOMEM;
  op->ops = ops;
  op->p = *p;
  op->x_spec = px__ops_spec_copy(x_spec);
  const int64_t cdims[1] = {x_spec->dims[1]};
  PX_CHECK_GOTO(px_tensor_init(&op->c_spec, ops->device, PX_DTYPE_F32, 1, cdims), st, fail);
  dnnl_memory_desc_t x_md;
  PX_CHECK_GOTO(px__cpu_md_of(ops, x_spec, &x_md), st, fail);
  PX_CHECK_GOTO(px__bn_geom(&x_md, &op->g), st, fail);
  {
    const size_t cpad = (size_t)(op->g.nblk * op->g.blk);
    op->part = px_malloc((size_t)op->g.n * 2 * cpad * sizeof(double), "px_batchnorm.part");
    op->stat = px_malloc(2 * cpad * sizeof(double), "px_batchnorm.stat");
    op->coef = px_malloc(4 * cpad * sizeof(float), "px_batchnorm.coef");
    op->fcoef = px_malloc(3 * cpad * sizeof(float), "px_batchnorm.fcoef");
    op->centre = op->g.cl ? px_malloc((size_t)op->g.n * cpad * sizeof(float), "px_batchnorm.centre")
                          : NULL;
    if (!op->part || !op->stat || !op->coef || !op->fcoef || (op->g.cl && !op->centre)) {
      st = px_set_error(PX_ERR_NOMEM, "px_batchnorm_create: out of memory");
      goto fail;
    }
    const int64_t wdims[1] = {p->fuse_relu ? op->g.n * op->g.nblk * op->g.mbytes : 1};
    PX_CHECK_GOTO(px_tensor_init(&op->ws_spec, ops->device, PX_DTYPE_U8, 1, wdims), st, fail);
    if (!p->fuse_relu) op->ws_spec.nbytes = 0;
  }
  *out = op;
  return PX_OK;
fail:
  px__cpu_batchnorm_destroy(op);
  return st;
}

void px__cpu_batchnorm_y_spec(const px_batchnorm_t *op, px_tensor_t *spec) { *spec = op->x_spec; }
void px__cpu_batchnorm_c_spec(const px_batchnorm_t *op, px_tensor_t *spec) { *spec = op->c_spec; }
void px__cpu_batchnorm_ws_spec(const px_batchnorm_t *op, px_tensor_t *spec) { *spec = op->ws_spec; }

static px_status_t px__check_ws(const px_batchnorm_t *op, const px_tensor_t *ws, const char *what) {
  if (op->ws_spec.nbytes == 0) return PX_OK;
  return px__ops_check_tensor(ws, &op->ws_spec, what);
}

static uint8_t *px__ws_data(const px_batchnorm_t *op, const px_tensor_t *ws) {
  return op->ws_spec.nbytes ? ws->data : NULL;
}

px_status_t px__cpu_batchnorm_forward_train(px_batchnorm_t *op, px_tensor_t *y, px_tensor_t *mean,
                                            px_tensor_t *var, px_tensor_t *ws, const px_tensor_t *x,
                                            const px_tensor_t *scale, const px_tensor_t *shift,
                                            px_tensor_t *running_mean, px_tensor_t *running_var) {
  PX_CHECK(px__ops_check_tensor(x, &op->x_spec, "batchnorm forward x"));
  PX_CHECK(px__ops_check_tensor(y, &op->x_spec, "batchnorm forward y"));
  PX_CHECK(px__ops_check_tensor(mean, &op->c_spec, "batchnorm forward mean"));
  PX_CHECK(px__ops_check_tensor(var, &op->c_spec, "batchnorm forward var"));
  PX_CHECK(px__check_ws(op, ws, "batchnorm forward ws"));
  PX_CHECK(px__ops_check_tensor(scale, &op->c_spec, "batchnorm forward scale"));
  PX_CHECK(px__ops_check_tensor(shift, &op->c_spec, "batchnorm forward shift"));
  PX_CHECK(px__ops_check_tensor(running_mean, &op->c_spec, "batchnorm forward running_mean"));
  PX_CHECK(px__ops_check_tensor(running_var, &op->c_spec, "batchnorm forward running_var"));
  const int64_t count = op->g.n * op->g.hw, cpad = op->g.nblk * op->g.blk;
  PX_REQUIRE(count >= 2, "batchnorm forward: %lld values per channel, training needs 2 or more",
             (long long)count);
  px__cpu_enter(op->ops);
  px__bn_stats(op, x->data);
  float *bm = mean->data, *bv = var->data;
  for (int64_t c = 0; c < op->g.c; c++) {
    bm[c] = (float)op->stat[c];
    bv[c] = (float)op->stat[cpad + c];
  }
  /* into fcoef, where px_batchnorm_recompute finds them */
  px__bn_forward_coef(op, op->fcoef, bm, op->stat + cpad, scale->data, shift->data);
  op->trained = 1;
  px__bn_apply(op, op->fcoef, y->data, px__ws_data(op, ws), x->data);

  const double m = op->p.momentum, unbias = (double)count / (double)(count - 1);
  float *rm = running_mean->data, *rv = running_var->data;
  for (int64_t c = 0; c < op->g.c; c++) {
    rm[c] = (float)((1.0 - m) * rm[c] + m * op->stat[c]);
    rv[c] = (float)((1.0 - m) * rv[c] + m * op->stat[cpad + c] * unbias);
  }
  return PX_OK;
}

px_status_t px__cpu_batchnorm_forward_infer(px_batchnorm_t *op, px_tensor_t *y, const px_tensor_t *x,
                                            const px_tensor_t *scale, const px_tensor_t *shift,
                                            const px_tensor_t *running_mean,
                                            const px_tensor_t *running_var) {
  PX_CHECK(px__ops_check_tensor(x, &op->x_spec, "batchnorm infer x"));
  PX_CHECK(px__ops_check_tensor(y, &op->x_spec, "batchnorm infer y"));
  PX_CHECK(px__ops_check_tensor(scale, &op->c_spec, "batchnorm infer scale"));
  PX_CHECK(px__ops_check_tensor(shift, &op->c_spec, "batchnorm infer shift"));
  PX_CHECK(px__ops_check_tensor(running_mean, &op->c_spec, "batchnorm infer running_mean"));
  PX_CHECK(px__ops_check_tensor(running_var, &op->c_spec, "batchnorm infer running_var"));
  px__cpu_enter(op->ops);
  const float *rv = running_var->data;
  for (int64_t c = 0; c < op->g.c; c++) op->stat[c] = rv[c];
  px__bn_forward_coef(op, op->coef, running_mean->data, op->stat, scale->data, shift->data);
  px__bn_apply(op, op->coef, y->data, NULL, x->data); /* no mask: the workspace is the training's */
  return PX_OK;
}

void px__cpu_batchnorm_set_momentum(px_batchnorm_t *op, float momentum) {
  op->p.momentum = momentum;
}

int px__cpu_batchnorm_can_recompute(const px_batchnorm_t *op) {
  (void)op;
  return 1;
}

/* The training forward's y again: its coefficients were kept (they come
 * from the batch variance in double, which mean/var, rounded to float, no
 * longer hold), so the arguments are checked but not read. */
px_status_t px__cpu_batchnorm_recompute(px_batchnorm_t *op, px_tensor_t *y, const px_tensor_t *x,
                                        const px_tensor_t *scale, const px_tensor_t *shift,
                                        const px_tensor_t *mean, const px_tensor_t *var) {
  PX_CHECK(px__ops_check_tensor(x, &op->x_spec, "batchnorm recompute x"));
  PX_CHECK(px__ops_check_tensor(y, &op->x_spec, "batchnorm recompute y"));
  PX_CHECK(px__ops_check_tensor(scale, &op->c_spec, "batchnorm recompute scale"));
  PX_CHECK(px__ops_check_tensor(shift, &op->c_spec, "batchnorm recompute shift"));
  PX_CHECK(px__ops_check_tensor(mean, &op->c_spec, "batchnorm recompute mean"));
  PX_CHECK(px__ops_check_tensor(var, &op->c_spec, "batchnorm recompute var"));
  if (!op->trained)
    return px_set_error(PX_ERR_STATE, "batchnorm recompute: no training forward has run");
  px__cpu_enter(op->ops);
  px__bn_apply(op, op->fcoef, y->data, NULL, x->data);
  return PX_OK;
}

/* The backward's coefficients (op->coef: centre, factor, mean of masked dy,
 * x factor) and dscale, dshift from the sums in op->stat. */
static void px__bn_backward_coef(px_batchnorm_t *op, float *dscale, float *dshift,
                                 const float *scale, const float *mean, const float *var) {
  const int64_t cpad = op->g.nblk * op->g.blk;
  const double cnt = (double)(op->g.n * op->g.hw);
  float *ctr = op->coef, *a = op->coef + cpad, *gm = op->coef + 2 * cpad, *kx = op->coef + 3 * cpad;
  for (int64_t ch = 0; ch < cpad; ch++) {
    if (ch >= op->g.c) {
      ctr[ch] = a[ch] = gm[ch] = kx[ch] = 0.0f;
      continue;
    }
    const double rstd = 1.0 / sqrt((double)var[ch] + (double)op->p.eps);
    const double sg = op->stat[ch], sgx = op->stat[cpad + ch], f = (double)scale[ch] * rstd;
    dshift[ch] = (float)sg;
    dscale[ch] = (float)(sgx * rstd);
    ctr[ch] = mean[ch];
    a[ch] = (float)f;
    gm[ch] = (float)(sg / cnt);
    kx[ch] = (float)(f * rstd * rstd * sgx / cnt);
  }
}

px_status_t px__cpu_batchnorm_backward(px_batchnorm_t *op, px_tensor_t *dx, px_tensor_t *dscale,
                                       px_tensor_t *dshift, const px_tensor_t *dy, const px_tensor_t *x,
                                       const px_tensor_t *scale, const px_tensor_t *shift,
                                       const px_tensor_t *mean, const px_tensor_t *var,
                                       const px_tensor_t *ws) {
  PX_CHECK(px__ops_check_tensor(dy, &op->x_spec, "batchnorm backward dy"));
  PX_CHECK(px__ops_check_tensor(x, &op->x_spec, "batchnorm backward x"));
  PX_CHECK(px__ops_check_tensor(dx, &op->x_spec, "batchnorm backward dx"));
  PX_CHECK(px__ops_check_tensor(scale, &op->c_spec, "batchnorm backward scale"));
  PX_CHECK(px__ops_check_tensor(shift, &op->c_spec, "batchnorm backward shift"));
  PX_CHECK(px__ops_check_tensor(mean, &op->c_spec, "batchnorm backward mean"));
  PX_CHECK(px__ops_check_tensor(var, &op->c_spec, "batchnorm backward var"));
  PX_CHECK(px__ops_check_tensor(dscale, &op->c_spec, "batchnorm backward dscale"));
  PX_CHECK(px__ops_check_tensor(dshift, &op->c_spec, "batchnorm backward dshift"));
  PX_CHECK(px__check_ws(op, ws, "batchnorm backward ws"));
  px__cpu_enter(op->ops);
  const px__bn_geom_t *g = &op->g;
  const int64_t cpad = g->nblk * g->blk, tasks = g->n * g->nblk;
  const float *dyd = dy->data, *xd = x->data, *mf = mean->data;
  const uint8_t *m = px__ws_data(op, ws);
  float *mu = op->coef; /* the centre of the sums: the forward's mean, as it normalised */
  for (int64_t ch = 0; ch < cpad; ch++) mu[ch] = ch < g->c ? mf[ch] : 0.0f;
#pragma omp parallel for schedule(static) if (px__bn_parallel(g))
  for (int64_t t = 0; t < tasks; t++) {
    const int64_t i = t / g->nblk, cb = t % g->nblk, off = i * g->s_n + cb * g->s_b;
    double *q = op->part + i * 2 * cpad + cb * g->blk;
    const uint8_t *mt = m ? m + t * g->mbytes : NULL;
    px__bn_task_sum_dy(q, q + cpad, g, dyd + off, xd + off, mt, mu + cb * g->blk);
  }
  px__bn_reduce(op, op->stat, op->stat + cpad);
  px__bn_backward_coef(op, dscale->data, dshift->data, scale->data, mean->data, var->data);
  const float *c = op->coef;
  float *dxd = dx->data;
#pragma omp parallel for schedule(static) if (px__bn_parallel(g))
  for (int64_t t = 0; t < tasks; t++) {
    const int64_t cb = t % g->nblk, off = (t / g->nblk) * g->s_n + cb * g->s_b, l0 = cb * g->blk;
    const float *ctr = c + l0, *a = c + cpad + l0, *gm = c + 2 * cpad + l0, *kx = c + 3 * cpad + l0;
    px__bn_task_dx(dxd + off, g, dyd + off, xd + off, m ? m + t * g->mbytes : NULL, ctr, a, kx, gm);
  }
  return PX_OK;
}
