/* Entry points of the CUDA op backend (the .cu files of nn/cuda), seen from C: the
 * function table px__cuda_backend (cuda_backend.c) is filled from these. Each
 * has the contract of the ops.h function of the same name without the
 * px__cuda_ prefix. Compiled only with CUDA; nn/nn_cuda_stub.c stands in for
 * px__cuda_ops_create otherwise. */
#ifndef PX_CUDA_NN_H
#define PX_CUDA_NN_H

#include "nn/px_ops_int.h"

#ifdef __cplusplus
extern "C" {
#endif

extern const px__ops_backend_t px__cuda_backend;

/* context: cuda_ops.cu; conv: cuda_conv.cu; batch norm: cuda_bn.cu; ReLU,
 * add, reorder: cuda_eltwise.cu; pooling: cuda_pool.cu; FC: cuda_fc.cu;
 * softmax cross-entropy: cuda_loss.cu; activations, Mul, Concat:
 * cuda_graph.cu */
#define PX__CUDA_DECL(ret, name, params) ret px__cuda_##name params;
PX__OPS_ENTRY_POINTS(PX__CUDA_DECL)
#undef PX__CUDA_DECL

#ifdef __cplusplus
}
#endif
#endif
