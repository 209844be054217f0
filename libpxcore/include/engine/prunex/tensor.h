/* PruneX tensors: devices, element types, shapes, layouts and the arenas
 * that hold whole families of tensors (one allocation per family).
 *
 * A px_tensor_t is a small value type that describes a block of device
 * memory: the device it lives on, its element type, its logical shape (up to
 * 4 dims, NCHW order for activations, OIHW for conv weights) and its layout,
 * plus the data pointer. It is copied by value; copying never copies data.
 *
 * Layouts. `layout == NULL` means plain row-major over the logical dims
 * (NCHW, OIHW, NC, C). Otherwise the layout is an opaque object chosen by
 * the backend for speed (on the CPU, oneDNN's blocked formats such as
 * nChw16c, whose storage may be larger than numel * element size because
 * channels are padded to the block). Blocked activations are first-class:
 * the op objects of ops.h say which layout they produce and want, the model
 * keeps activations in those layouts from layer to layer, and only the
 * edges of the network (input images, logits) are plain. Layout objects are
 * owned by the px_ops_t that created them and live as long as it does; two
 * tensors have the same layout iff their layout pointers are equal.
 *
 * Ownership. A tensor either owns its storage (px_tensor_alloc, freed by
 * px_tensor_release) or is a view into memory someone else owns, typically
 * an arena: one allocation per family (parameters, gradients, activations,
 * optimizer state) whose tensors' data pointers are set from a size table
 * by px_arena_alloc. Code above the backend never dereferences `data`: it
 * moves host data in and out with px_tensor_copy_from_host / _to_host, which
 * convert between plain host order and the tensor's layout.
 *
 * CUDA. A tensor on px_device_cuda(i) is always plain; its data is device
 * memory from a caching allocator (freed blocks are reused by size class,
 * see px_cuda_mem_stats in prunex/cuda.h). The functions below are blocking
 * and ordered with the work queued by the ops contexts of that device. */
#ifndef PRUNEX_TENSOR_H
#define PRUNEX_TENSOR_H

#include <stddef.h>
#include <stdint.h>

#include "prunex/px.h"

#ifdef __cplusplus
extern "C" {
#endif

#define PX_TENSOR_MAX_DIMS 4

/* ---- devices ------------------------------------------------------------ */

typedef enum { PX_DEVICE_CPU = 0, PX_DEVICE_CUDA = 1 } px_device_kind_t;

typedef struct {
  px_device_kind_t kind;
  int32_t index; /* CUDA device ordinal; 0 for the CPU */
} px_device_t;

static inline px_device_t px_device_cpu(void) {
  px_device_t d = {PX_DEVICE_CPU, 0};
  return d;
}

static inline px_device_t px_device_cuda(int32_t index) {
  px_device_t d = {PX_DEVICE_CUDA, index};
  return d;
}

static inline int px_device_equal(px_device_t a, px_device_t b) {
  return a.kind == b.kind && a.index == b.index;
}

/* "cpu" or "cuda:N" into buf (always NUL-terminated); returns buf. */
PX_API const char *px_device_str(px_device_t dev, char *buf, size_t len);

/* ---- element types ------------------------------------------------------ */

/* BF16: bfloat16 (the upper half of an f32), the activations of the CUDA
 * engine's bf16 precision; no CPU op takes it. */
typedef enum { PX_DTYPE_F32 = 0, PX_DTYPE_U8 = 1, PX_DTYPE_I32 = 2, PX_DTYPE_BF16 = 3 } px_dtype_t;

/* Bytes per element (4, 1, 4, 2); 0 for an unknown type. */
PX_API size_t px_dtype_size(px_dtype_t dt);

/* ---- layouts ------------------------------------------------------------ */

/* Opaque backend layout; see the file comment. NULL is plain row-major. */
typedef struct px_layout px_layout_t;

/* Short name of a layout: "plain", or for oneDNN layouts its format tag,
 * dims outermost first, blocked dims in upper case, then the inner blocks
 * ("aBcd16b" is nChw16c). Never NULL; owned by the layout. */
PX_API const char *px_layout_name(const px_layout_t *layout);

/* ---- tensors ------------------------------------------------------------ */

enum {
  PX_TENSOR_OWNS_DATA = 1u << 0, /* data was allocated by px_tensor_alloc */
};

typedef struct {
  px_device_t device;
  px_dtype_t dtype;
  int32_t ndim;                      /* 1..PX_TENSOR_MAX_DIMS */
  int64_t dims[PX_TENSOR_MAX_DIMS];  /* logical shape; unused dims are 1 */
  const px_layout_t *layout;         /* NULL: plain row-major; else owned by a px_ops_t */
  size_t nbytes;                     /* storage bytes (>= numel * dtype size) */
  void *data;                        /* device memory; NULL for a spec without storage */
  uint32_t flags;                    /* PX_TENSOR_* */
} px_tensor_t;

/* Initialises *t as a plain spec (no storage: data NULL) of the given shape.
 * Fails with PX_ERR_INVALID on a bad ndim, a non-positive dim or dtype. */
PX_API px_status_t px_tensor_init(px_tensor_t *t, px_device_t dev, px_dtype_t dtype, int ndim,
                                  const int64_t *dims);

/* Shorthand for a plain 4-D f32 spec [n, c, h, w]. */
PX_API px_status_t px_tensor_init4(px_tensor_t *t, px_device_t dev, int64_t n, int64_t c, int64_t h,
                                   int64_t w);

/* Number of logical elements (product of dims). */
PX_API size_t px_tensor_numel(const px_tensor_t *t);

/* Bytes of a plain copy of the tensor: numel * dtype size. */
PX_API size_t px_tensor_plain_bytes(const px_tensor_t *t);

static inline int px_tensor_is_plain(const px_tensor_t *t) { return t->layout == NULL; }

/* 1 if a and b have the same device, dtype, dims and layout. */
PX_API int px_tensor_same_spec(const px_tensor_t *a, const px_tensor_t *b);

/* Allocates t->nbytes of zeroed storage on t->device for a tensor without
 * storage; the tensor then owns it (release with px_tensor_release). Fails
 * with PX_ERR_STATE if t already has data, PX_ERR_NOMEM, PX_ERR_NOT_BUILT
 * for a device whose backend is not compiled in, or PX_ERR_NO_DEVICE for a
 * GPU that is not there. */
PX_API px_status_t px_tensor_alloc(px_tensor_t *t, const char *name);

/* Frees owned storage (a no-op for views) and sets data to NULL. The spec
 * (shape, layout) is kept, so the tensor can be allocated again. */
PX_API void px_tensor_release(px_tensor_t *t);

/* Sets every byte of the storage to zero (blocked padding included). */
PX_API px_status_t px_tensor_zero(px_tensor_t *t);

/* Copies src's storage into dst's; both must have the same spec. */
PX_API px_status_t px_tensor_copy(px_tensor_t *dst, const px_tensor_t *src);

/* Copies plain row-major host data (bytes == px_tensor_plain_bytes(t)) into
 * the tensor, converting to its layout. For a blocked layout this runs a
 * backend reorder (its primitives are created on first use and cached in the
 * layout). Fails with PX_ERR_INVALID on a size mismatch or missing storage. */
PX_API px_status_t px_tensor_copy_from_host(px_tensor_t *t, const void *host, size_t bytes);

/* Copies the tensor out to plain row-major host memory (bytes ==
 * px_tensor_plain_bytes(t)), converting from its layout; waits for the
 * device. This is the reorder helper used to check blocked results. */
PX_API px_status_t px_tensor_copy_to_host(const px_tensor_t *t, void *host, size_t bytes);

/* ---- arenas ------------------------------------------------------------- */

/* One allocation holding a family of tensors. Gaps left for alignment are
 * zero, so the whole block can be treated as one flat buffer (e.g. all
 * parameters for an allreduce) when align equals the element size. */
typedef struct {
  px_device_t device;
  void *base;   /* owned; NULL when empty */
  size_t bytes; /* size of base */
} px_arena_t;

#ifdef __cplusplus
}
#endif
#endif
