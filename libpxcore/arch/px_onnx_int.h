/* Internals of the ONNX import (arch/onnx_import.c): an ONNX file lowered onto
 * the layer set the model builder (nn/model.c) already has. The importer
 * reads and checks the file once (bounded sizes, linear time) and hands the
 * builder a list of layers in forward order, each naming the layer whose
 * output it reads and pointing at its initial weights inside the parsed
 * file (which the graph keeps alive). */
#ifndef PX_ONNX_INT_H
#define PX_ONNX_INT_H

#include <stddef.h>
#include <stdint.h>

#include "prunex/arch.h"
#include "prunex/px.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Limits on an untrusted file. */
#define PX__ONNX_MAX_BYTES (1536u << 20) /* the file (VGG-11's is 531 MB) */
#define PX__ONNX_MAX_NODES 4096         /* graph nodes */
#define PX__ONNX_MAX_VALUES 16384       /* named tensors (initializers + node outputs + inputs) */
#define PX__ONNX_MAX_NUMEL (256u << 20) /* elements of one initializer (VGG-11's 25088 x 4096 is
                                           102.8 M); the import bound below caps their sum */
#define PX__ONNX_MAX_NAME 200           /* bytes of a tensor or node name */
/* The memory an import may take by default: the file and all its
 * initializers, used or not (PX_ONNX_MAX_BYTES in the environment sets
 * another; VGG-11's 531 MB file takes about 1.1 GB so). */
#define PX__ONNX_IMPORT_BYTES (2ull << 30)

typedef enum {
  PX__OL_CONV, PX__OL_BN, PX__OL_ADD, PX__OL_GAP, PX__OL_FC, PX__OL_MAXPOOL, PX__OL_AVGPOOL,
  PX__OL_ACT, PX__OL_MUL, PX__OL_CONCAT,
  PX__OL_LN, /* LayerNorm over channels: w, b its scale and shift [c_out] (bytes NULL: 1 and 0) */
  PX__OL_SHUFFLE, /* channel shuffle of groups: out channel i * groups + j = in j * (c / groups) + i */
  PX__OL_SLICE    /* channels [start, start + c_out) of the input */
} px__onnx_kind_t;

/* One weight tensor's initial values: n little-endian float32 at bytes
 * (possibly unaligned: read with memcpy); bytes NULL means zeros. */
typedef struct {
  const uint8_t *bytes;
  size_t n;
} px__onnx_init_t;

typedef struct {
  px__onnx_kind_t kind;
  int in, in2;            /* layer whose output is read; -1: the graph input (in2: ADD, MUL
                             (the per-channel gate), CONCAT (the second part)) */
  int relu;               /* BN / ADD: a Relu follows and is fused */
  int c_out;              /* CONV: filters; FC: classes; others: channels of the output */
  px_window_t win;        /* CONV, pools: the window (auto_pad resolved into pads; AVGPOOL
                             counts the padding unless win.exclude_pad) */
  float eps, momentum;    /* BN, LN: epsilon; BN: PyTorch's momentum (1 - ONNX's) */
  int groups;             /* CONV: 1, or grouped / depthwise */
  int act;                /* ACT: a px__act_t (nn/px_graph_ops.h) */
  float alpha;            /* ACT: LeakyRelu's slope */
  int transposed;         /* FC: w is [features, classes] (a MatMul's), not Gemm's [classes,
                             features]; CONV (1 x 1, a MatMul on the NHWC view): w is
                             [c_in, c_out] */
  const char *wname;      /* CONV: the weight parameter's whole name when the file's is no
                             "<prefix>.weight" (a layer scale's), else NULL */
  const char *op;         /* the ONNX operator (for messages) */
  char prefix[PX__ONNX_MAX_NAME + 1]; /* parameter names: prefix.weight, ... */
  px__onnx_init_t w, b, rm, rv;        /* CONV: w [b]; BN: w b rm rv; FC: w b */
  const char *node;       /* the ONNX node's name (for messages) */
  int start;              /* SLICE: the first input channel taken */
  int logits;             /* CONV: its filters are the classes (a classifier of convolutions,
                             SqueezeNet's: conv, activations, global pooling giving the
                             logits); left out of pruning, as a final FC is */
} px__onnx_layer_t;

/* A tensor the import computed (arch/onnx_shape.c): this header, then the
 * Onnx__TensorProto, its dims and its data, in one allocation. */
typedef struct px__onnx_fold {
  struct px__onnx_fold *next;
} px__onnx_fold_t;

typedef struct px__onnx_graph {
  void *proto;                /* Onnx__ModelProto, owns every byte the layers point at */
  px__onnx_fold_t *folds;     /* the folded constants (a layer may point into them too) */
  size_t fold_bytes;          /* their size, at most PX__ONNX_FOLD_BYTES */
  px__onnx_layer_t *layers;   /* [nlayers], forward order; the last gives the logits: an FC,
                                 or a GAP of a conv classifier (px__onnx_layer_t.logits) */
  int nlayers;
  int in_c, in_h, in_w;       /* the graph input [N, in_c, in_h, in_w] */
  int classes;                /* the logits [N, classes] */
  int nconv;
  char sha256[65];            /* the file's SHA-256, lowercase hex ("" unless asked for) */
} px__onnx_graph_t;

/* Reads and checks path. Caller owns *out (px__onnx_free). Fails with
 * PX_ERR_IO (unreadable, too large) or PX_ERR_INVALID naming the file and,
 * for a node it cannot take, the node's name and operator. With sha256 (64
 * lowercase hex digits) a file of another SHA-256 fails with PX_ERR_INVALID
 * before it is parsed; "" computes the sum (g->sha256) without a check,
 * NULL neither (g->sha256 is ""). */
px_status_t px__onnx_load(const char *path, const char *sha256, px__onnx_graph_t **out);
void px__onnx_free(px__onnx_graph_t *g);

#ifdef __cplusplus
}
#endif
#endif
