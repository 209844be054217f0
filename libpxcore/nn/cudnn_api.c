/* PX_CUDNN_API, the switch between cuDNN's graph (backend) API (the default
 * since an H200 measured it: docs/performance.md) and its legacy convolution
 * API for the CUDA engine's convolutions: parsed here, in every build, so
 * that its rules are tested without a GPU (test_gpu_conv_graph). */
#include <string.h>

#include "nn/px_ops_int.h"
#include "prunex/check.h"

px_status_t px__cudnn_api_parse(const char *value, int *graph) {
  *graph = 1;
  if (!value || !*value || !strcmp(value, "graph")) return PX_OK;
  *graph = 0;
  if (!strcmp(value, "legacy")) return PX_OK;
  return px_set_error(PX_ERR_INVALID,
                      "PX_CUDNN_API: '%.40s%s' is not one of graph (the default) or legacy", value,
                      strlen(value) > 40 ? "..." : "");
}
