/* cuBLAS, loaded on first use. Linking libcublas would load it (and
 * libcublasLt) into every process that links libpxcore, GPU or not: about
 * 210 MB of resident memory at start-up for pxcoordd, pxctl and every CPU
 * worker. The CUDA backend is its only user (FC layers), so the library is
 * opened when the first CUDA backend context is created, and the handful of
 * entry points it calls are resolved then. The header still comes from the
 * toolkit, for the types. */
#include <dlfcn.h>
#include <pthread.h>
#include <stdio.h>

#include "nn/cuda/px_cuda_blas.h"
#include "px_check.h"

static px__cublas_api_t px__api;
static pthread_once_t px__once = PTHREAD_ONCE_INIT;
static px_status_t px__load_status = PX_ERR_NOT_BUILT;
static char px__load_error[256];

static int px__sym(void *lib, const char *name, void **fn) {
  *fn = dlsym(lib, name);
  if (*fn) return 1;
  snprintf(px__load_error, sizeof px__load_error, "%s has no symbol %s", PX__CUBLAS_SONAME, name);
  return 0;
}

static void px__load(void) {
  void *lib = dlopen(PX__CUBLAS_SONAME, RTLD_NOW | RTLD_LOCAL);
  if (!lib) {
    snprintf(px__load_error, sizeof px__load_error, "cannot load %s: %s", PX__CUBLAS_SONAME,
             dlerror());
    px__load_status = PX_ERR_BACKEND;
    return;
  }
  px__cublas_api_t a;
  if (!px__sym(lib, "cublasCreate_v2", (void **)&a.create) ||
      !px__sym(lib, "cublasDestroy_v2", (void **)&a.destroy) ||
      !px__sym(lib, "cublasSetStream_v2", (void **)&a.set_stream) ||
      !px__sym(lib, "cublasGetVersion_v2", (void **)&a.get_version) ||
      !px__sym(lib, "cublasGetStatusString", (void **)&a.status_string) ||
      !px__sym(lib, "cublasSetMathMode", (void **)&a.set_math_mode) ||
      !px__sym(lib, "cublasSgemm_v2", (void **)&a.sgemm)) {
    dlclose(lib);
    px__load_status = PX_ERR_BACKEND;
    return;
  }
  px__api = a; /* the library stays open for the life of the process */
  px__load_status = PX_OK;
}

px_status_t px__cublas_load(const px__cublas_api_t **api) {
  pthread_once(&px__once, px__load);
  *api = px__load_status == PX_OK ? &px__api : NULL;
  if (px__load_status != PX_OK)
    return px_set_error(px__load_status, "cuBLAS: %s (is the CUDA toolkit's library directory on "
                        "LD_LIBRARY_PATH?)", px__load_error);
  return PX_OK;
}
