/* PX_CUDNN_API, the switch between cuDNN's legacy convolution API and its
 * graph (backend) API for the CUDA engine's convolutions: parsed here, in
 * every build, so that its rules are tested without a GPU (test_gpu_conv_graph). */
#include <string.h>

#include "nn/px_ops_int.h"
#include "prunex/check.h"

px_status_t px__cudnn_api_parse(const char *value, int *graph) {
  *graph = 0;
  if (!value || !*value || !strcmp(value, "legacy")) return PX_OK;
  if (!strcmp(value, "graph")) {
    *graph = 1;
    return PX_OK;
  }
  return px_set_error(PX_ERR_INVALID,
                      "PX_CUDNN_API: '%.40s%s' is not one of legacy (the default) or graph", value,
                      strlen(value) > 40 ? "..." : "");
}
