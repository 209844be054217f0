/* libFuzzer harness: the IDX reader (Fashion-MNIST format, plain or gzip).
 * The input is split in two files: the first two bytes give the length of
 * the image file, the rest is the label file. */
#include "fuzz_util.h"
#include "prunex/data.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  pxf_quiet();
  if (size < 2) return 0;
  size_t n1 = (size_t)data[0] | (size_t)data[1] << 8;
  data += 2;
  size -= 2;
  if (n1 > size) n1 = size;
  /* gzip data goes through the gzip path (a ".gz" name must be gzip) */
  int gz = n1 >= 2 && data[0] == 0x1f && data[1] == 0x8b;
  char img[128], lab[128];
  if (pxf_scratch(1, data, n1, img, sizeof img, gz ? ".gz" : "") != 0) return 0;
  if (pxf_scratch(2, data + n1, size - n1, lab, sizeof lab, "") != 0) return 0;
  px_dataset_t *ds = NULL;
  if (px_dataset_load_idx(img, lab, 10, 2, &ds) == PX_OK) px_dataset_destroy(ds);
  unlink(img);
  unlink(lab);
  return 0;
}
