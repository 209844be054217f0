/* Tensor module internals shared with the backends: the common head of a
 * layout object. A backend (nn/cpu for oneDNN, later nn/cuda) embeds
 * struct px_layout as the first member of its own layout struct and fills in
 * the function table, so that tensor.c can convert to and from plain host
 * order without knowing the backend's types. */
#ifndef PX_TENSOR_INT_H
#define PX_TENSOR_INT_H

#include "prunex/tensor.h"

typedef struct {
  /* Converts the storage at src (in this layout) to plain row-major order at
   * dst (host memory), and back. Both may be called on a const layout: the
   * backend caches its conversion primitives in the layout object, which is
   * owned by one px_ops_t and used from one thread at a time. */
  px_status_t (*to_plain)(const px_layout_t *layout, void *dst_plain, const void *src);
  px_status_t (*from_plain)(const px_layout_t *layout, void *dst, const void *src_plain);
} px__layout_vtbl_t;

struct px_layout {
  const px__layout_vtbl_t *vt;
  px_device_t device;
  px_dtype_t dtype;
  int32_t ndim;
  int64_t dims[PX_TENSOR_MAX_DIMS];
  size_t nbytes;  /* storage bytes of a tensor in this layout */
  char name[40];  /* e.g. "nChw16c" */
};

#endif
