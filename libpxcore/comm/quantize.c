/* Block-scaled integer payloads with stochastic rounding (quantize.h): the
 * encoding of the leaders' packed z_i + v_i buffers when comm.quantize is 8
 * or 4. Kept apart from the collectives: the exchange itself is an ordinary
 * allgather of bytes. */
#include <math.h>
#include <string.h>

#include "prunex/quantize.h"

static inline uint64_t px__mix(uint64_t z) {
  z += 0x9E3779B97F4A7C15ull;
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

uint64_t px_quant_key(uint64_t a, uint64_t b, uint64_t c, uint64_t d) {
  return px__mix(px__mix(px__mix(px__mix(a) ^ b) ^ c) ^ d);
}

int px_quant_bits_ok(int bits) { return bits == 8 || bits == 4; }

int px_quant_bits_from_name(const char *name) {
  if (!name || !*name || !strcmp(name, "none")) return 0;
  if (!strcmp(name, "8")) return 8;
  if (!strcmp(name, "4")) return 4;
  return -1;
}

static size_t px__data_bytes(int bits, size_t n) { return bits == 8 ? n : (n + 1) / 2; }

size_t px_quant_bytes(int bits, size_t count) {
  size_t blocks = (count + PX_QUANT_BLOCK - 1) / PX_QUANT_BLOCK;
  size_t full = count / PX_QUANT_BLOCK, tail = count % PX_QUANT_BLOCK;
  return blocks * 8 + full * px__data_bytes(bits, PX_QUANT_BLOCK) + px__data_bytes(bits, tail);
}

void px_quant_encode(float *x, size_t count, int bits, uint64_t seed, uint8_t *out) {
  const uint32_t L = (1u << bits) - 1u;
  for (size_t lo = 0; lo < count; lo += PX_QUANT_BLOCK) {
    size_t n = count - lo < PX_QUANT_BLOCK ? count - lo : PX_QUANT_BLOCK;
    float *b = x + lo;
    float mn = b[0], mx = b[0];
    for (size_t j = 1; j < n; j++) {
      if (b[j] < mn) mn = b[j];
      if (b[j] > mx) mx = b[j];
    }
    float step = (mx - mn) / (float)L;
    if (!(step > 0) || !isfinite(step)) step = 0.0f;
    if (!isfinite(mn)) mn = 0.0f;
    memcpy(out, &mn, 4);
    memcpy(out + 4, &step, 4);
    out += 8;
    float inv = step > 0 ? 1.0f / step : 0.0f;
    uint64_t ctr = seed + (uint64_t)lo;
    if (bits == 8) memset(out, 0, n);
    else memset(out, 0, (n + 1) / 2);
    for (size_t j = 0; j < n; j++) {
      float u = (float)(px__mix(ctr + j) >> 40) * (1.0f / 16777216.0f); /* [0, 1), 24 bits */
      float t = (b[j] - mn) * inv + u;
      uint32_t q = t > 0 ? (uint32_t)t : 0u; /* floor of a non-negative value */
      if (q > L) q = L;
      b[j] -= mn + (float)q * step;
      if (bits == 8) out[j] = (uint8_t)q;
      else out[j >> 1] |= (uint8_t)(q << ((j & 1) * 4));
    }
    out += px__data_bytes(bits, n);
  }
}

void px_quant_decode_add(const uint8_t *in, size_t count, int bits, float *acc) {
  for (size_t lo = 0; lo < count; lo += PX_QUANT_BLOCK) {
    size_t n = count - lo < PX_QUANT_BLOCK ? count - lo : PX_QUANT_BLOCK;
    float mn, step;
    memcpy(&mn, in, 4);
    memcpy(&step, in + 4, 4);
    in += 8;
    float *a = acc + lo;
    if (bits == 8) {
      for (size_t j = 0; j < n; j++) a[j] += mn + (float)in[j] * step;
    } else {
      for (size_t j = 0; j < n; j++) a[j] += mn + (float)((in[j >> 1] >> ((j & 1) * 4)) & 15u) * step;
    }
    in += px__data_bytes(bits, n);
  }
}
