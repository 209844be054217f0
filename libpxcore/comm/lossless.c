/* Lossless coding of float streams against a shared reference
 * (prunex/lossless.h): bit-pattern differences, zig-zag mapped, in four
 * byte planes, the upper two deflated. */
#include "prunex/lossless.h"

#include <string.h>
#include <zlib.h>

#include "px_check.h"

#define PX__LC_MAGIC 0x434C5850u /* "PXLC" */

struct px_lossless {
  size_t max;
  uint8_t *pl;   /* [4 * max] the planes, 3 first */
  z_stream d, i;
  int d_ok, i_ok;
};

static voidpf px__lc_alloc(voidpf opaque, uInt items, uInt size) {
  (void)opaque;
  return px_calloc(items, size, "lossless.zlib");
}

static void px__lc_free(voidpf opaque, voidpf p) {
  (void)opaque;
  px_free(p);
}

size_t px_lossless_bound(size_t count) { return PX_LOSSLESS_HEADER + 4 * count; }

void px_lossless_destroy(px_lossless_t *lc) {
  if (!lc) return;
  if (lc->d_ok) deflateEnd(&lc->d);
  if (lc->i_ok) inflateEnd(&lc->i);
  px_free(lc->pl);
  px_free(lc);
}

px_status_t px_lossless_create(size_t max_count, px_lossless_t **out) {
  *out = NULL;
  px_lossless_t *lc = px_calloc(1, sizeof *lc, "lossless");
  if (!lc) return PX_ERR_NOMEM;
  lc->max = max_count;
  lc->pl = px_malloc(4 * (max_count ? max_count : 1), "lossless.planes");
  if (!lc->pl) {
    px_lossless_destroy(lc);
    return PX_ERR_NOMEM;
  }
  lc->d.zalloc = lc->i.zalloc = px__lc_alloc;
  lc->d.zfree = lc->i.zfree = px__lc_free;
  lc->d_ok = deflateInit(&lc->d, Z_BEST_SPEED) == Z_OK;
  lc->i_ok = inflateInit(&lc->i) == Z_OK;
  if (!lc->d_ok || !lc->i_ok) {
    px_lossless_destroy(lc);
    return px_set_error(PX_ERR_BACKEND, "lossless coder: zlib could not start");
  }
  *out = lc;
  return PX_OK;
}

static inline uint32_t px__bits(const float *p, size_t j) {
  uint32_t u;
  memcpy(&u, p + j, 4);
  return u;
}

static void px__put32(uint8_t *p, uint32_t v) {
  for (int k = 0; k < 4; k++) p[k] = (uint8_t)(v >> (8 * k));
}

static uint32_t px__get32(const uint8_t *p) {
  return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}

/* Deflates src[n] into dst (room for n bytes): the bytes written, or 0 when
 * deflating would not make it smaller (the caller stores it). */
static px_status_t px__deflate(px_lossless_t *lc, const uint8_t *src, size_t n, uint8_t *dst,
                               size_t *written) {
  *written = 0;
  if (deflateReset(&lc->d) != Z_OK)
    return px_set_error(PX_ERR_BACKEND, "lossless coder: deflateReset failed");
  lc->d.next_in = (Bytef *)(uintptr_t)src;
  lc->d.avail_in = (uInt)n;
  lc->d.next_out = dst;
  lc->d.avail_out = (uInt)n;
  int zr = deflate(&lc->d, Z_FINISH);
  if (zr == Z_STREAM_END && lc->d.total_out < n) *written = lc->d.total_out;
  else if (zr != Z_OK && zr != Z_BUF_ERROR && zr != Z_STREAM_END)
    return px_set_error(PX_ERR_BACKEND, "lossless coder: deflate failed (%d)", zr);
  return PX_OK;
}

px_status_t px_lossless_encode(px_lossless_t *lc, const float *x, const float *ref,
                               size_t count, uint32_t tag, uint8_t *out, size_t cap,
                               size_t *len) {
  *len = 0;
  PX_REQUIRE(count <= lc->max, "lossless coder: %zu floats, made for at most %zu", count,
             lc->max);
  PX_REQUIRE(count <= UINT32_MAX && cap >= px_lossless_bound(count),
             "lossless coder: %zu bytes of room for %zu floats (needs %zu)", cap, count,
             px_lossless_bound(count));
  uint8_t *p3 = lc->pl, *p2 = p3 + count, *p1 = p2 + count, *p0 = p1 + count;
  uint32_t h = 2166136261u;
  for (size_t j = 0; j < count; j++) {
    uint32_t c = px__bits(x, j), d = c - (ref ? px__bits(ref, j) : 0u);
    uint32_t z = (d << 1) ^ (uint32_t)((int32_t)d >> 31);
    p3[j] = (uint8_t)(z >> 24);
    p2[j] = (uint8_t)(z >> 16);
    p1[j] = (uint8_t)(z >> 8);
    p0[j] = (uint8_t)z;
    h = (h ^ c) * 16777619u;
  }
  uint8_t *o = out + PX_LOSSLESS_HEADER;
  uint32_t flags = 0, n[2];
  const uint8_t *planes[2] = {p3, p2};
  for (int k = 0; k < 2; k++) {
    size_t w;
    PX_CHECK(px__deflate(lc, planes[k], count, o, &w));
    if (!w) { /* stored */
      memcpy(o, planes[k], count);
      w = count;
      flags |= 1u << k;
    }
    n[k] = (uint32_t)w;
    o += w;
  }
  memcpy(o, p1, count);
  memcpy(o + count, p0, count);
  o += 2 * count;
  px__put32(out, PX__LC_MAGIC);
  px__put32(out + 4, tag);
  px__put32(out + 8, (uint32_t)count);
  px__put32(out + 12, (uint32_t)((uint64_t)count >> 32));
  px__put32(out + 16, flags);
  px__put32(out + 20, n[0]);
  px__put32(out + 24, n[1]);
  px__put32(out + 28, h);
  *len = (size_t)(o - out);
  return PX_OK;
}

static px_status_t px__inflate(px_lossless_t *lc, const uint8_t *src, size_t n, uint8_t *dst,
                               size_t count, int plane) {
  if (inflateReset(&lc->i) != Z_OK)
    return px_set_error(PX_ERR_BACKEND, "lossless coder: inflateReset failed");
  lc->i.next_in = (Bytef *)(uintptr_t)src;
  lc->i.avail_in = (uInt)n;
  lc->i.next_out = dst;
  lc->i.avail_out = (uInt)count;
  int zr = inflate(&lc->i, Z_FINISH);
  if (zr != Z_STREAM_END || lc->i.total_out != count || lc->i.avail_in != 0)
    return px_set_error(PX_ERR_FORMAT,
                        "lossless payload: byte plane %d does not inflate to %zu bytes "
                        "(zlib %d, %lu bytes out, %u of %zu bytes in left)",
                        plane, count, zr, (unsigned long)lc->i.total_out, lc->i.avail_in, n);
  return PX_OK;
}

px_status_t px_lossless_decode(px_lossless_t *lc, const uint8_t *in, size_t len,
                               const float *ref, size_t count, uint32_t tag, float *out) {
  PX_REQUIRE(count <= lc->max, "lossless coder: %zu floats, made for at most %zu", count,
             lc->max);
  if (len < PX_LOSSLESS_HEADER || px__get32(in) != PX__LC_MAGIC)
    return px_set_error(PX_ERR_FORMAT, "lossless payload: %zu bytes without its header", len);
  uint64_t cnt = (uint64_t)px__get32(in + 8) | (uint64_t)px__get32(in + 12) << 32;
  uint32_t t = px__get32(in + 4), flags = px__get32(in + 16);
  size_t n[2] = {px__get32(in + 20), px__get32(in + 24)};
  if (t != tag)
    return px_set_error(PX_ERR_FORMAT, "lossless payload: tag %u, expected %u (another round)",
                        t, tag);
  if (cnt != count)
    return px_set_error(PX_ERR_FORMAT, "lossless payload: %llu floats, expected %zu",
                        (unsigned long long)cnt, count);
  if (flags > 3 || n[0] > count || n[1] > count ||
      len != PX_LOSSLESS_HEADER + n[0] + n[1] + 2 * count)
    return px_set_error(PX_ERR_FORMAT,
                        "lossless payload: %zu bytes, flags %u, planes of %zu and %zu bytes do "
                        "not make a payload of %zu floats",
                        len, flags, n[0], n[1], count);
  const uint8_t *src = in + PX_LOSSLESS_HEADER;
  const uint8_t *pl[4];
  for (int k = 0; k < 2; k++) {
    if (flags & (1u << k)) {
      if (n[k] != count)
        return px_set_error(PX_ERR_FORMAT, "lossless payload: stored plane %d of %zu bytes, "
                            "expected %zu", 3 - k, n[k], count);
      pl[k] = src;
    } else {
      PX_CHECK(px__inflate(lc, src, n[k], lc->pl + (size_t)k * count, count, 3 - k));
      pl[k] = lc->pl + (size_t)k * count;
    }
    src += n[k];
  }
  pl[2] = src;
  pl[3] = src + count;
  uint32_t h = 2166136261u;
  for (size_t j = 0; j < count; j++) {
    uint32_t z = (uint32_t)pl[0][j] << 24 | (uint32_t)pl[1][j] << 16 | (uint32_t)pl[2][j] << 8 |
                 pl[3][j];
    uint32_t d = (z >> 1) ^ (0u - (z & 1u));
    uint32_t c = (ref ? px__bits(ref, j) : 0u) + d;
    memcpy(out + j, &c, 4);
    h = (h ^ c) * 16777619u;
  }
  if (h != px__get32(in + 28))
    return px_set_error(PX_ERR_FORMAT,
                        "lossless payload: checksum %08x, decoded %08x: the two ends' "
                        "references differ",
                        px__get32(in + 28), h);
  return PX_OK;
}
