/* The CUDA side of the SGD optimiser (optim.c): one fused kernel that
 * updates every parameter of a model in one launch, with momentum, Nesterov,
 * weight decay and the ADMM proximal term, queued on the model's ops stream
 * (nn/cuda/cuda_sgd.cu; nn/nn_cuda_stub.c answers PX_ERR_NOT_BUILT without
 * CUDA). The update is the one of px_sgd_step in nn.h, element for element. */
#ifndef PX_SGD_CUDA_H
#define PX_SGD_CUDA_H

#include <stddef.h>

#include "prunex/ops.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct px__cuda_sgd px__cuda_sgd_t;

/* Plans the update of n parameters: w[i], g[i], buf[i] are device arrays of
 * numel[i] floats on ops' device (value, gradient, momentum buffer), which
 * must stay where they are for the optimiser's life. Builds the kernel's
 * tables (one entry per parameter, one per chunk of at most a few thousand
 * elements) on the device. Caller owns *out. Fails with PX_ERR_NOT_BUILT,
 * PX_ERR_NOMEM, PX_ERR_BACKEND. */
px_status_t px__cuda_sgd_create(px_ops_t *ops, int n, float *const *w, float *const *g,
                                float *const *buf, const size_t *numel, px__cuda_sgd_t **out);
void px__cuda_sgd_destroy(px__cuda_sgd_t *s);

/* Proximal term of parameter i from the next step on (rho 0: off). z and u
 * (u may be NULL) must be device memory of the optimiser's device:
 * PX_ERR_INVALID otherwise (a host pointer here is the likely mistake). */
px_status_t px__cuda_sgd_set_prox(px__cuda_sgd_t *s, int i, const float *z, const float *u,
                                  float rho);

/* Queues one update of every parameter. No synchronisation, no allocation
 * (the parameter table is re-sent only after a change of a proximal term). */
px_status_t px__cuda_sgd_step(px__cuda_sgd_t *s, float lr, float momentum, float weight_decay,
                              int nesterov);

#ifdef __cplusplus
}
#endif
#endif
