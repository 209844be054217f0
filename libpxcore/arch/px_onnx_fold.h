/* The ONNX import's constant folding (arch/onnx_shape.c): the small shape
 * subgraphs exporters write around the layers (x.view(x.size(0), -1) is
 * Shape, Gather, Unsqueeze, Concat, Reshape) computed once at import into
 * new constant tensors, so the node reading them (a Reshape) sees a
 * constant. Only shapes and constants fold: a value computed from an
 * activation's data is the caller's to refuse. The batch dimension, unknown
 * at import, folds as the marker PX__ONNX_BATCH, which may only be copied
 * (Gather, Slice, Concat, Unsqueeze, Squeeze, Identity) and read by a
 * Reshape as its first dimension. */
#ifndef PX_ONNX_FOLD_H
#define PX_ONNX_FOLD_H

#include <stddef.h>
#include <stdint.h>

#include "arch/px_onnx_int.h"
#include "onnx.pb-c.h"

#ifdef __cplusplus
extern "C" {
#endif

/* The batch dimension in a folded int64 tensor. */
#define PX__ONNX_BATCH INT64_MIN
/* What folding may allocate: elements of one folded tensor, bytes of all
 * (an import folds a few shape vectors of a handful of elements each). */
#define PX__ONNX_FOLD_NUMEL 4096
#define PX__ONNX_FOLD_BYTES (1u << 20)

/* The folded output of node n (Gather, Unsqueeze, Squeeze, Concat, Cast,
 * Slice, ConstantOfShape; Add, Sub, Mul, Div of two constants) from its
 * inputs in[0 .. n->n_input - 1], each a
 * constant (NULL: an optional input left out). The tensor is g's (freed by
 * px__onnx_free) and holds float32 or int64 data in float_data /
 * int64_data. PX_ERR_INVALID with why (a sentence, no node name) filled for
 * what does not fold; PX_ERR_NOMEM. */
px_status_t px__onnx_fold(px__onnx_graph_t *g, const Onnx__NodeProto *n,
                          const Onnx__TensorProto *const *in, char *why, size_t cap,
                          const Onnx__TensorProto **out);

/* The int64 tensor [count] of dims[start .. start + count - 1] (a Shape's
 * output; dims[0] of an activation is PX__ONNX_BATCH), g's as above. */
px_status_t px__onnx_fold_dims(px__onnx_graph_t *g, const int64_t *dims, int count, char *why,
                               size_t cap, const Onnx__TensorProto **out);

/* The int64 values of t (int64, or float32 with integral values: none
 * here) into v[cap]; the count, or -1 when t is not int64 or has more than
 * cap elements. */
int px__onnx_ints(const Onnx__TensorProto *t, int64_t *v, int cap);

#ifdef __cplusplus
}
#endif
#endif
