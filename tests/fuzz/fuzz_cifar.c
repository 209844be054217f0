/* libFuzzer harness: the CIFAR-10 binary reader (3073-byte records). */
#include "fuzz_util.h"
#include "prunex/data.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  pxf_quiet();
  char path[128];
  if (pxf_scratch(3, data, size, path, sizeof path, ".bin") != 0) return 0;
  const char *paths[1] = {path};
  px_dataset_t *ds = NULL;
  if (px_dataset_load_cifar10_files(paths, 1, &ds) == PX_OK) px_dataset_destroy(ds);
  unlink(path);
  return 0;
}
