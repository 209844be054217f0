/* The cuBLAS entry points the CUDA backend uses, resolved from the library
 * at run time (cuda_blas.c says why). */
#ifndef PX_CUDA_BLAS_H
#define PX_CUDA_BLAS_H

#include <cublas_v2.h>

#include "prunex/px.h"

#ifdef __cplusplus
extern "C" {
#endif

#define PX__CUBLAS_STR2(x) #x
#define PX__CUBLAS_STR(x) PX__CUBLAS_STR2(x)
#define PX__CUBLAS_SONAME "libcublas.so." PX__CUBLAS_STR(CUBLAS_VER_MAJOR)

typedef struct {
  cublasStatus_t (*create)(cublasHandle_t *handle);
  cublasStatus_t (*destroy)(cublasHandle_t handle);
  cublasStatus_t (*set_stream)(cublasHandle_t handle, cudaStream_t stream);
  cublasStatus_t (*get_version)(cublasHandle_t handle, int *version);
  const char *(*status_string)(cublasStatus_t status);
  cublasStatus_t (*set_math_mode)(cublasHandle_t handle, cublasMath_t mode);
  cublasStatus_t (*sgemm)(cublasHandle_t handle, cublasOperation_t ta, cublasOperation_t tb,
                          int m, int n, int k, const float *alpha, const float *a, int lda,
                          const float *b, int ldb, const float *beta, float *c, int ldc);
} px__cublas_api_t;

/* Opens the library once per process (thread-safe) and returns its entry
 * points in *api (owned by the library, valid for the life of the process).
 * Fails with PX_ERR_BACKEND, naming the library, when it cannot be loaded;
 * *api is then NULL. */
px_status_t px__cublas_load(const px__cublas_api_t **api);

#ifdef __cplusplus
}
#endif
#endif
