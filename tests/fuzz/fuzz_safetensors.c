/* libFuzzer harness: the safetensors reader (checkpoints and models come
 * from other programs and other machines): open, list every tensor and
 * metadata entry, read every tensor. */
#include <stdlib.h>

#include "fuzz_util.h"
#include "prunex/safetensors.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  pxf_quiet();
  char path[128];
  if (pxf_scratch(0, data, size, path, sizeof path, ".safetensors") != 0) return 0;
  px_safetensors_t *st = NULL;
  if (px_safetensors_open(path, &st) == PX_OK) {
    int n = px_safetensors_count(st);
    for (int i = 0; i < n; i++) {
      px_st_info_t info;
      const char *name = px_safetensors_name(st, i);
      if (px_safetensors_find(st, name, &info) != PX_OK) abort(); /* listed means findable */
      if (info.nbytes > ((uint64_t)64 << 20)) continue;
      void *buf = malloc(info.nbytes ? info.nbytes : 1);
      if (buf) {
        (void)px_safetensors_read(st, name, buf, info.nbytes);
        free(buf);
      }
    }
    for (int i = 0; i < px_safetensors_meta_count(st); i++) {
      const char *k, *v;
      px_safetensors_meta_at(st, i, &k, &v);
      (void)px_safetensors_meta(st, k);
    }
    px_safetensors_close(st);
  }
  unlink(path);
  return 0;
}
