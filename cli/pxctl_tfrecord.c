/* TFRecord framing and CRC-32C for TensorBoard's event files
 * (pxctl_tfrecord.h). The CRC is table-driven, one byte at a time: event
 * files are a few hundred bytes per iteration, so nothing faster is
 * needed, and the table is built once on first use. */
#include "pxctl_tfrecord.h"

#include <errno.h>

static uint32_t pxctl_crc_table[256];
static int pxctl_crc_ready;

static void pxctl_crc_init(void) {
  for (uint32_t i = 0; i < 256; i++) {
    uint32_t c = i;
    for (int k = 0; k < 8; k++) c = (c & 1u) ? (c >> 1) ^ 0x82f63b78u : c >> 1;
    pxctl_crc_table[i] = c;
  }
  pxctl_crc_ready = 1;
}

uint32_t pxctl_crc32c(const void *data, size_t n) {
  if (!pxctl_crc_ready) pxctl_crc_init();
  const unsigned char *p = data;
  uint32_t c = 0xffffffffu;
  for (size_t i = 0; i < n; i++) c = pxctl_crc_table[(c ^ p[i]) & 0xffu] ^ (c >> 8);
  return c ^ 0xffffffffu;
}

uint32_t pxctl_crc32c_mask(uint32_t crc) {
  return ((crc >> 15) | (crc << 17)) + 0xa282ead8u;
}

static void pxctl_le32(unsigned char *b, uint32_t v) {
  for (int i = 0; i < 4; i++) b[i] = (unsigned char)(v >> (8 * i));
}

int pxctl_tfrecord_write(FILE *f, const void *data, size_t n) {
  unsigned char head[12], foot[4];
  uint64_t len = (uint64_t)n;
  for (int i = 0; i < 8; i++) head[i] = (unsigned char)(len >> (8 * i));
  pxctl_le32(head + 8, pxctl_crc32c_mask(pxctl_crc32c(head, 8)));
  pxctl_le32(foot, pxctl_crc32c_mask(pxctl_crc32c(data, n)));
  errno = 0;
  if (fwrite(head, 1, sizeof head, f) != sizeof head || (n && fwrite(data, 1, n, f) != n) ||
      fwrite(foot, 1, sizeof foot, f) != sizeof foot) {
    if (!errno) errno = EIO;
    return -1;
  }
  return 0;
}
