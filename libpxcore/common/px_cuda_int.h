/* The one conversion of a CUDA runtime error to the library's status, for
 * every CUDA file of the library (CUDA builds only; C and CUDA C++). */
#ifndef PX_CUDA_INT_H
#define PX_CUDA_INT_H

#include <cuda_runtime_api.h>

#include "prunex/px.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Sets the last error to "what: message (name)" and returns the status of e:
 * PX_ERR_NOMEM for out-of-memory, PX_ERR_NO_DEVICE when there is no usable
 * device or driver, PX_ERR_BACKEND otherwise (PX_OK for cudaSuccess). Clears
 * a non-sticky error so that the next call is not blamed for it. */
px_status_t px__cuda_to_status(cudaError_t e, const char *what);

#ifdef __cplusplus
}
#endif
#endif
