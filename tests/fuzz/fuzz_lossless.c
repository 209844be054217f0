/* libFuzzer harness: the lossless payload decoder (comm.compress), the one
 * part of the leaders' coded exchange that reads bytes from another node.
 * The first two bytes give the float count (at most 4096), the rest is the
 * payload, decoded with tag 0 against a fixed reference. */
#include "fuzz_util.h"
#include "prunex/lossless.h"

enum { MAXN = 4096 };

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  pxf_quiet();
  static px_lossless_t *lc;
  static float ref[MAXN], out[MAXN];
  if (!lc) {
    if (px_lossless_create(MAXN, &lc) != PX_OK) return 0;
    for (int j = 0; j < MAXN; j++) ref[j] = (float)(j % 97 - 48) / 64.0f; /* exact */
  }
  if (size < 2) return 0;
  size_t n = (size_t)data[0] | (size_t)data[1] << 8;
  if (n > MAXN) n = MAXN;
  (void)px_lossless_decode(lc, data + 2, size - 2, ref, n, 0, out);
  return 0;
}
