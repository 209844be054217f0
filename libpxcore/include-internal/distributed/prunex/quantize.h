/* Quantized payloads for the inter-node exchange (comm.quantize).
 *
 * A float stream is cut into blocks of PX_QUANT_BLOCK elements; each block
 * travels as its minimum and its step (two f32) followed by one unsigned
 * integer of `bits` bits per element (8: one byte; 4: two per byte, low
 * nibble first): x ~ min + q * step, step = (max - min) / (2^bits - 1).
 * Rounding is stochastic (q = floor((x - min) / step + u), u uniform in
 * [0, 1) from a counter-based generator keyed by the caller's seed), so the
 * decoded value is an unbiased estimate of x, and the error of every element
 * is below one step of its block. Error feedback (as CGX does for
 * gradients) is the caller's: encode writes x - decode(q) back into x, and
 * the caller adds it to what it sends next time, so that the running sum of
 * what was sent follows the running sum of what was meant.
 *
 * Decoding is plain arithmetic in a fixed order (min + (float)q * step,
 * then accumulation in the order the caller chooses), so every rank that
 * decodes the same payloads in the same order gets bit-identical floats.
 * Nothing here allocates. */
#ifndef PRUNEX_QUANTIZE_H
#define PRUNEX_QUANTIZE_H

#include <stddef.h>
#include <stdint.h>

#include "prunex/px.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Elements per scale block. */
#define PX_QUANT_BLOCK 512

/* 1 for the supported widths (8 and 4), 0 otherwise. */
int px_quant_bits_ok(int bits);

/* The width that comm.quantize names: 0 for "none" (or an empty string, an
 * unset field), 8 or 4; -1 for anything else. */
int px_quant_bits_from_name(const char *name);

/* Payload bytes of count floats at that width (0 for count 0): the blocks'
 * headers (8 bytes each) plus the packed integers. */
size_t px_quant_bytes(int bits, size_t count);

/* Encodes x[count] into out[px_quant_bytes(bits, count)] and replaces every
 * x[j] by its quantization error x[j] - decode(out)[j] (the error feedback
 * the caller keeps). seed keys the stochastic rounding: the same seed and
 * input give the same payload. Non-finite input is encoded as its block
 * minimum would allow (callers pass finite values). */
void px_quant_encode(float *x, size_t count, int bits, uint64_t seed, uint8_t *out);

/* acc[j] += decode(in)[j] for j < count. */
void px_quant_decode_add(const uint8_t *in, size_t count, int bits, float *acc);

/* A 64-bit key from several words (seed, iteration, rank, bucket): a
 * splitmix64 chain, the same on every platform. */
uint64_t px_quant_key(uint64_t a, uint64_t b, uint64_t c, uint64_t d);

#ifdef __cplusplus
}
#endif
#endif
