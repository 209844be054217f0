/* TFRecord framing (pxctl_tfrecord.c), the container of TensorBoard's event
 * files: each record is
 *   uint64 length (little-endian)
 *   uint32 masked CRC-32C of those 8 length bytes (little-endian)
 *   length bytes of data
 *   uint32 masked CRC-32C of the data (little-endian)
 * where the mask is ((crc >> 15) | (crc << 17)) + 0xa282ead8. No
 * dependencies (the tests compile this file on its own). */
#ifndef PXCTL_TFRECORD_H
#define PXCTL_TFRECORD_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

/* CRC-32C (Castagnoli, reflected polynomial 0x82f63b78, initial value and
 * final xor 0xffffffff) of n bytes: crc32c("123456789") == 0xe3069283. */
uint32_t pxctl_crc32c(const void *data, size_t n);

/* The CRC as TFRecord stores it (rotated right by 15, plus 0xa282ead8). */
uint32_t pxctl_crc32c_mask(uint32_t crc);

/* Appends one record of data[n] to f (header, data, footer: n + 16
 * bytes). 0, or -1 with errno set when a write failed. */
int pxctl_tfrecord_write(FILE *f, const void *data, size_t n);

#endif
