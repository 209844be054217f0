/* CUDA device discovery and a self-test kernel: the first CUDA code of the
 * library, compiled whenever a toolkit is found so that the CUDA build stays
 * green on machines without a GPU. */
#include <cuda_runtime.h>
#include <stdio.h>
#include <string.h>

#include "prunex/cuda.h"
#include "px_cuda_int.h"

extern "C" px_status_t px__cuda_to_status(cudaError_t e, const char *what) {
  if (e == cudaSuccess) return PX_OK;
  cudaGetLastError(); /* clear a non-sticky error so that the next call is not blamed */
  px_status_t st = PX_ERR_BACKEND;
  if (e == cudaErrorMemoryAllocation) st = PX_ERR_NOMEM;
  if (e == cudaErrorNoDevice || e == cudaErrorInsufficientDriver || e == cudaErrorInvalidDevice)
    st = PX_ERR_NO_DEVICE;
  return px_set_error(st, "%s: %s (%s)", what, cudaGetErrorString(e), cudaGetErrorName(e));
}

static px_status_t px__cuda_error(cudaError_t e, const char *what) {
  return px__cuda_to_status(e, what);
}

extern "C" int px_cuda_built(void) { return 1; }

extern "C" px_status_t px_cuda_device_count(int *count) {
  *count = 0;
  cudaError_t e = cudaGetDeviceCount(count);
  if (e == cudaErrorNoDevice || e == cudaErrorInsufficientDriver) {
    cudaGetLastError(); /* clear the sticky error: no GPU is not a failure */
    *count = 0;
    return PX_OK;
  }
  if (e != cudaSuccess) {
    *count = 0;
    return px__cuda_error(e, "cudaGetDeviceCount");
  }
  return PX_OK;
}

extern "C" px_status_t px_cuda_device_info(int device, char *name, size_t name_len,
                                           uint64_t *memory_bytes) {
  int n = 0;
  px_status_t st = px_cuda_device_count(&n);
  if (st < 0) return st;
  if (device < 0 || device >= n)
    return px_set_error(PX_ERR_INVALID, "CUDA device %d does not exist (%d present)", device, n);
  cudaDeviceProp prop;
  cudaError_t e = cudaGetDeviceProperties(&prop, device);
  if (e != cudaSuccess) return px__cuda_error(e, "cudaGetDeviceProperties");
  if (name && name_len) snprintf(name, name_len, "%s", prop.name);
  if (memory_bytes) *memory_bytes = (uint64_t)prop.totalGlobalMem;
  return PX_OK;
}

extern "C" px_status_t px_cuda_device_bus_id(int device, char *buf, size_t len) {
  if (buf && len) buf[0] = '\0';
  int n = 0;
  px_status_t st = px_cuda_device_count(&n);
  if (st < 0) return st;
  if (device < 0 || device >= n)
    return px_set_error(PX_ERR_INVALID, "CUDA device %d does not exist (%d present)", device, n);
  if (!buf || len < 2) return px_set_error(PX_ERR_INVALID, "PCI bus id: no room in the buffer");
  int cap = len > 256 ? 256 : (int)len;
  cudaError_t e = cudaDeviceGetPCIBusId(buf, cap, device);
  if (e != cudaSuccess) return px__cuda_error(e, "cudaDeviceGetPCIBusId");
  buf[cap - 1] = '\0';
  return PX_OK;
}

__global__ static void px__iota_kernel(int *out, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) out[i] = 3 * i + 1;
}

extern "C" px_status_t px_cuda_selftest(int device) {
  enum { N = 1000 };
  int host[N];
  int *dev = NULL;
  cudaError_t e = cudaSetDevice(device);
  if (e != cudaSuccess) return px__cuda_error(e, "cudaSetDevice");
  if ((e = cudaMalloc((void **)&dev, N * sizeof(int))) != cudaSuccess)
    return px__cuda_error(e, "cudaMalloc");
  px__iota_kernel<<<(N + 255) / 256, 256>>>(dev, N);
  e = cudaGetLastError();
  if (e == cudaSuccess) e = cudaMemcpy(host, dev, sizeof host, cudaMemcpyDeviceToHost);
  cudaFree(dev);
  if (e != cudaSuccess) return px__cuda_error(e, "self-test kernel");
  for (int i = 0; i < N; i++)
    if (host[i] != 3 * i + 1)
      return px_set_error(PX_ERR_BACKEND, "self-test kernel wrote %d at %d, expected %d", host[i],
                          i, 3 * i + 1);
  return PX_OK;
}
