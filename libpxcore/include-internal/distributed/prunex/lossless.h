/* Lossless coding of a float stream against a reference that both ends
 * hold (comm.compress: lossless, the exact exchange of strategy hsadmm).
 *
 * The leaders' exchange sends z_i + v_i, which changes little from one
 * round to the next in its upper bits: sign, exponent and the first
 * mantissa bits. Each value travels as the difference of its bit pattern
 * from the reference's (as 32-bit integers, wrapping, zig-zag mapped so
 * that small differences of either sign have many leading zero bits), cut
 * into four byte planes; the two upper planes are deflated (zlib, fastest
 * level), the two lower ones, close to random, travel as they are. Decoding
 * adds the differences back to the reference's bits, so the receiver gets
 * exactly the sender's floats (NaNs and signed zeros included) whenever it
 * holds exactly the sender's reference. A checksum of the floats and a tag
 * (the round) in every payload make a receiver whose reference drifted fail
 * with a clear error rather than go on with wrong values.
 *
 * On the quickstart's exchange (resnet20, 2 nodes) a numpy model of this
 * code kept 64.4% of the raw floats, and the coded run's inter-node
 * traffic was 66.5% of the plain run's (docs/performance.md). Payload layout, little-endian:
 *   u32 magic "PXLC", u32 tag, u64 count, u32 flags (bit k: plane 3-k is
 *   stored, not deflated), u32 bytes of plane 3, u32 bytes of plane 2,
 *   u32 checksum (FNV-1a over the floats' bits), then plane 3, plane 2 and
 *   the count bytes of plane 1 and of plane 0.
 *
 * A coder holds two zlib streams and its plane scratch, made by
 * px_lossless_create: encoding and decoding allocate nothing. */
#ifndef PRUNEX_LOSSLESS_H
#define PRUNEX_LOSSLESS_H

#include <stddef.h>
#include <stdint.h>

#include "prunex/px.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct px_lossless px_lossless_t;

/* Bytes of the fixed header. */
#define PX_LOSSLESS_HEADER 32

/* The largest payload of count floats. */
size_t px_lossless_bound(size_t count);

/* A coder for streams of at most max_count floats. PX_ERR_NOMEM,
 * PX_ERR_BACKEND when zlib cannot start. */
px_status_t px_lossless_create(size_t max_count, px_lossless_t **out);
void px_lossless_destroy(px_lossless_t *lc);

/* Codes x[count] against ref[count] into out[cap] (cap at least
 * px_lossless_bound(count)); *len: the payload's bytes. ref NULL codes
 * against zeros. PX_ERR_INVALID when count exceeds the coder's or cap is
 * short; PX_ERR_BACKEND when zlib fails. */
px_status_t px_lossless_encode(px_lossless_t *lc, const float *x, const float *ref,
                                      size_t count, uint32_t tag, uint8_t *out, size_t cap,
                                      size_t *len);

/* Decodes in[len] against ref[count] (NULL: zeros) into out[count] (out may
 * be ref). PX_ERR_FORMAT, naming what is wrong, when the payload is not a
 * payload of count floats with this tag, or when its checksum does not
 * match what it decodes to (the two ends' references differ). Runs in time
 * linear in len + count; reads nothing beyond in[len]. */
px_status_t px_lossless_decode(px_lossless_t *lc, const uint8_t *in, size_t len,
                                      const float *ref, size_t count, uint32_t tag, float *out);

#ifdef __cplusplus
}
#endif

#endif
