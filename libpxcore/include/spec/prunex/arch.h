/* PruneX architectures: what a job spec may name as its model, checked
 * without the engine (pxctl checks a spec with these alone): the built-in
 * architectures' names (the table of arch/arch.c) and an ONNX file's check
 * (arch/onnx_import.c), the window of a convolution or pooling that a
 * model's graph describes (px_model_node_t, nn.h, which includes this
 * header), and the bound of an N:M pruning set (prune.h). */
#ifndef PRUNEX_ARCH_H
#define PRUNEX_ARCH_H

#include <stdint.h>

#include "prunex/px.h"

#ifdef __cplusplus
extern "C" {
#endif

/* 1 if arch names a known architecture. */
PX_API int px_model_arch_known(const char *arch);
/* The static name string of a known architecture, NULL if unknown. */
PX_API const char *px_model_arch_name(const char *arch);
/* Space-separated list of the known architectures (static string). */
PX_API const char *px_model_arch_list(void);

/* What an ONNX file holds, as px_model_create would build it. */
typedef struct {
  int32_t in_channels, height, width; /* the graph input [N, C, H, W] */
  int32_t num_classes;                /* the logits [N, num_classes] */
  int32_t nconv;                      /* convolutions (prunable layers) */
  int32_t nlayers;                    /* layers after fusing Relus and dropping Identities */
  char sha256[65];                    /* the file's SHA-256, 64 lowercase hex digits */
} px_model_onnx_info_t;

/* Reads and checks an ONNX model file without building it (what a job
 * submission does): opset 11-20, every node an operator the import takes
 * (docs/user-guide.md lists them), shapes consistent, sizes bounded. info may
 * be NULL. Fails with PX_ERR_IO (unreadable, over 1.5 GiB) or PX_ERR_INVALID
 * whose message names the file and, for a node it refuses, the node's name
 * and operator. Linear in the file's size. */
PX_API px_status_t px_model_onnx_check(const char *path, px_model_onnx_info_t *info);

/* The largest M of an N:M pruning set (px_prune_keep_t, prune.h): the
 * bound of the spec's prune.nm_n and prune.nm_m. */
#define PX_PRUNE_NM_MAX 64

/* The window of a CONV, MAXPOOL or AVGPOOL node: kernel kh x kw, strides,
 * zero padding before (pad_t, pad_l) and after (pad_b, pad_r) the input,
 * dilation (1: none), and for pools PyTorch's ceil_mode (the output size
 * rounded up, the last window starting inside the input or its top/left
 * padding) and count_include_pad = 0 (exclude_pad). All zero for other
 * nodes. The built-in models' convs are k x k, stride s, padding k / 2 on
 * every side. */
typedef struct {
  int kh, kw;
  int stride_h, stride_w;
  int pad_t, pad_l, pad_b, pad_r;
  int dil_h, dil_w;
  int ceil_mode;
  int exclude_pad;
} px_window_t;

#ifdef __cplusplus
}
#endif
#endif
