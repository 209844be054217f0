/* The function table of the CUDA op backend: what every CUDA context and op
 * object points to from its first member (see nn/px_ops_int.h). Kept in C
 * for its designated initialisers. */
#include "nn/cuda/px_cuda_nn.h"

#define PX__CUDA_ENTRY(ret, name, params) .name = px__cuda_##name,
const px__ops_backend_t px__cuda_backend = {.name = "cuda", PX__OPS_ENTRY_POINTS(PX__CUDA_ENTRY)};
#undef PX__CUDA_ENTRY
