/* Element-wise reduction kernels of the host collectives: dst = a op b over
 * f32, f64 and u8, and the final division of an average.
 *
 * The operand order is part of the contract: the algorithms always pass the
 * contribution of the lower ranks as a, so that every rank computes every
 * element in the same order and gets bit-identical results (MAX of +0 and -0,
 * or of NaNs, is not symmetric). dst may alias a or b; the loops are simple
 * enough for the compiler to vectorise, with the aliasing cases split out so
 * that it needs no run-time overlap checks. */
#include "comm/comm_int.h"
#include "prunex/comm_internal.h"

#define PX__VEC __attribute__((optimize("O3")))

#define PX__DEFINE_KERNELS(T, NAME)                                                           \
  static PX__VEC void px__sum3_##NAME(T *restrict d, const T *restrict a, const T *restrict b, \
                                      size_t n) {                                             \
    for (size_t i = 0; i < n; i++) d[i] = a[i] + b[i];                                       \
  }                                                                                           \
  static PX__VEC void px__sum2_##NAME(T *restrict d, const T *restrict b, size_t n) {         \
    for (size_t i = 0; i < n; i++) d[i] = d[i] + b[i];                                       \
  }                                                                                           \
  static PX__VEC void px__max3_##NAME(T *restrict d, const T *restrict a, const T *restrict b, \
                                      size_t n) {                                             \
    for (size_t i = 0; i < n; i++) d[i] = b[i] > a[i] ? b[i] : a[i];                         \
  }                                                                                           \
  /* d = max(d, b) with d as the first operand */                                             \
  static PX__VEC void px__max2a_##NAME(T *restrict d, const T *restrict b, size_t n) {        \
    for (size_t i = 0; i < n; i++) d[i] = b[i] > d[i] ? b[i] : d[i];                         \
  }                                                                                           \
  /* d = max(a, d) with d as the second operand */                                            \
  static PX__VEC void px__max2b_##NAME(T *restrict d, const T *restrict a, size_t n) {        \
    for (size_t i = 0; i < n; i++) d[i] = d[i] > a[i] ? d[i] : a[i];                         \
  }                                                                                           \
  static void px__reduce_##NAME(T *d, const T *a, const T *b, size_t n, int max) {            \
    if (!max) {                                                                               \
      if (d == a) px__sum2_##NAME(d, b, n);                                                   \
      else if (d == b) px__sum2_##NAME(d, a, n);                                              \
      else px__sum3_##NAME(d, a, b, n);                                                       \
    } else {                                                                                  \
      if (d == a) px__max2a_##NAME(d, b, n);                                                  \
      else if (d == b) px__max2b_##NAME(d, a, n);                                             \
      else px__max3_##NAME(d, a, b, n);                                                       \
    }                                                                                         \
  }

PX__DEFINE_KERNELS(float, f32)
PX__DEFINE_KERNELS(double, f64)
PX__DEFINE_KERNELS(uint8_t, u8)

void px__reduce(void *dst, const void *a, const void *b, size_t n, px_comm_dtype_t dt,
                px_comm_op_t op) {
  int max = op == PX_COMM_MAX;
  switch (dt) {
    case PX_COMM_F32: px__reduce_f32(dst, a, b, n, max); break;
    case PX_COMM_F64: px__reduce_f64(dst, a, b, n, max); break;
    case PX_COMM_U8: px__reduce_u8(dst, a, b, n, max); break;
  }
}

static PX__VEC void px__div_f32(float *restrict x, size_t n, float d) {
  for (size_t i = 0; i < n; i++) x[i] = x[i] / d;
}

static PX__VEC void px__div_f64(double *restrict x, size_t n, double d) {
  for (size_t i = 0; i < n; i++) x[i] = x[i] / d;
}

void px__avg_finish(void *buf, size_t n, px_comm_dtype_t dt, int group_size) {
  if (dt == PX_COMM_F32) px__div_f32(buf, n, (float)group_size);
  else if (dt == PX_COMM_F64) px__div_f64(buf, n, (double)group_size);
}

size_t px_comm_dtype_size(px_comm_dtype_t dt) {
  switch (dt) {
    case PX_COMM_F32: return 4;
    case PX_COMM_F64: return 8;
    case PX_COMM_U8: return 1;
  }
  return 0;
}
