/* Device-neutral tensor helpers: specs, owned storage, host copies and
 * arenas. Plain layouts on the CPU are handled here directly; blocked
 * layouts go through the function table of their layout object (filled in by
 * the backend that created it), so this file does not depend on oneDNN.
 * CUDA storage comes from the caching allocator of tensor/cuda/
 * (px_tensor_cuda.h), which answers PX_ERR_NOT_BUILT in a build without
 * CUDA; CUDA tensors are always plain. */
#include <assert.h>
#include <stdio.h>
#include <string.h>

#include "prunex/tensor.h"
#include "prunex/tensor_internal.h"
#include "px_check.h"
#include "tensor/px_tensor_cuda.h"
#include "tensor/px_tensor_int.h"

const char *px_device_str(px_device_t dev, char *buf, size_t len) {
  if (!buf || len == 0) return "";
  if (dev.kind == PX_DEVICE_CPU)
    snprintf(buf, len, "cpu");
  else if (dev.kind == PX_DEVICE_CUDA)
    snprintf(buf, len, "cuda:%d", (int)dev.index);
  else
    snprintf(buf, len, "device?%d", (int)dev.kind);
  return buf;
}

size_t px_dtype_size(px_dtype_t dt) {
  switch (dt) {
    case PX_DTYPE_F32: return 4;
    case PX_DTYPE_U8: return 1;
    case PX_DTYPE_I32: return 4;
    case PX_DTYPE_BF16: return 2;
  }
  return 0;
}

const char *px_layout_name(const px_layout_t *layout) { return layout ? layout->name : "plain"; }

px_status_t px_tensor_init(px_tensor_t *t, px_device_t dev, px_dtype_t dtype, int ndim,
                           const int64_t *dims) {
  assert(t);
  PX_REQUIRE(ndim >= 1 && ndim <= PX_TENSOR_MAX_DIMS, "tensor ndim %d not in 1..%d", ndim,
             PX_TENSOR_MAX_DIMS);
  PX_REQUIRE(px_dtype_size(dtype) != 0, "unknown tensor dtype %d", (int)dtype);
  PX_REQUIRE(dims != NULL, "tensor dims are NULL");
  memset(t, 0, sizeof *t);
  t->device = dev;
  t->dtype = dtype;
  t->ndim = ndim;
  size_t numel = 1;
  for (int i = 0; i < PX_TENSOR_MAX_DIMS; i++) {
    int64_t d = i < ndim ? dims[i] : 1;
    PX_REQUIRE(d > 0, "tensor dim %d is %lld (must be positive)", i, (long long)d);
    PX_REQUIRE(numel <= SIZE_MAX / (size_t)d / 8, "tensor of %d dims is too large", ndim);
    numel *= (size_t)d;
    t->dims[i] = d;
  }
  t->nbytes = numel * px_dtype_size(dtype);
  return PX_OK;
}

px_status_t px_tensor_init4(px_tensor_t *t, px_device_t dev, int64_t n, int64_t c, int64_t h,
                            int64_t w) {
  const int64_t dims[4] = {n, c, h, w};
  return px_tensor_init(t, dev, PX_DTYPE_F32, 4, dims);
}

size_t px_tensor_numel(const px_tensor_t *t) {
  size_t n = 1;
  for (int i = 0; i < t->ndim; i++) n *= (size_t)t->dims[i];
  return n;
}

size_t px_tensor_plain_bytes(const px_tensor_t *t) {
  return px_tensor_numel(t) * px_dtype_size(t->dtype);
}

int px_tensor_same_spec(const px_tensor_t *a, const px_tensor_t *b) {
  if (!px_device_equal(a->device, b->device) || a->dtype != b->dtype || a->ndim != b->ndim ||
      a->layout != b->layout)
    return 0;
  for (int i = 0; i < a->ndim; i++)
    if (a->dims[i] != b->dims[i]) return 0;
  return 1;
}

/* PX_OK for a device whose storage this file knows (CPU, CUDA); a CUDA
 * tensor in a layout (the CUDA engine's channels-last activations) must
 * have a layout of its own device. */
static px_status_t px__check_device(const px_tensor_t *t, const char *what) {
  if (t->device.kind == PX_DEVICE_CPU) return PX_OK;
  if (t->device.kind == PX_DEVICE_CUDA) {
    PX_REQUIRE(t->layout == NULL || px_device_equal(t->layout->device, t->device),
               "%s: CUDA tensor in a layout of another device (%s)", what,
               px_layout_name(t->layout));
    return PX_OK;
  }
  return px_set_error(PX_ERR_INVALID, "%s: unknown device kind %d", what, (int)t->device.kind);
}

static int px__on_cuda(const px_tensor_t *t) { return t->device.kind == PX_DEVICE_CUDA; }

/* One zeroed block of bytes on dev (CPU: 64-byte aligned; CUDA: from the
 * caching allocator). */
static px_status_t px__storage_alloc(px_device_t dev, size_t bytes, const char *name, void **out) {
  *out = NULL;
  if (dev.kind == PX_DEVICE_CUDA) {
    void *p;
    PX_CHECK(px__cuda_mem_alloc(dev.index, bytes, name, &p));
    px_status_t st = px__cuda_mem_zero(dev.index, p, bytes);
    if (st < 0) {
      px__cuda_mem_free(p);
      return st;
    }
    *out = p;
    return PX_OK;
  }
  void *p = px_malloc_aligned(bytes, name);
  if (!p) return PX_ERR_NOMEM;
  memset(p, 0, bytes);
  *out = p;
  return PX_OK;
}

static void px__storage_free(px_device_t dev, void *p) {
  if (dev.kind == PX_DEVICE_CUDA)
    px__cuda_mem_free(p);
  else
    px_free(p);
}

px_status_t px_tensor_alloc(px_tensor_t *t, const char *name) {
  assert(t);
  PX_CHECK(px__check_device(t, "px_tensor_alloc"));
  if (t->data) return px_set_error(PX_ERR_STATE, "px_tensor_alloc: tensor already has storage");
  PX_REQUIRE(t->nbytes > 0, "px_tensor_alloc: empty tensor spec");
  void *p;
  PX_CHECK(px__storage_alloc(t->device, t->nbytes, name ? name : "tensor", &p));
  t->data = p;
  t->flags |= PX_TENSOR_OWNS_DATA;
  return PX_OK;
}

void px_tensor_release(px_tensor_t *t) {
  if (!t) return;
  if ((t->flags & PX_TENSOR_OWNS_DATA) && t->data &&
      (t->device.kind == PX_DEVICE_CPU || t->device.kind == PX_DEVICE_CUDA))
    px__storage_free(t->device, t->data);
  t->data = NULL;
  t->flags &= ~(uint32_t)PX_TENSOR_OWNS_DATA;
}

px_status_t px_tensor_zero(px_tensor_t *t) {
  PX_CHECK(px__check_device(t, "px_tensor_zero"));
  PX_REQUIRE(t->data != NULL, "px_tensor_zero: tensor has no storage");
  if (px__on_cuda(t)) return px__cuda_mem_zero(t->device.index, t->data, t->nbytes);
  memset(t->data, 0, t->nbytes);
  return PX_OK;
}

px_status_t px_tensor_copy(px_tensor_t *dst, const px_tensor_t *src) {
  PX_CHECK(px__check_device(dst, "px_tensor_copy"));
  PX_REQUIRE(px_tensor_same_spec(dst, src), "px_tensor_copy: tensors differ in shape or layout");
  PX_REQUIRE(dst->data && src->data, "px_tensor_copy: tensor has no storage");
  if (dst->data == src->data) return PX_OK;
  if (px__on_cuda(dst)) return px__cuda_mem_copy(dst->device.index, dst->data, src->data, dst->nbytes);
  memmove(dst->data, src->data, dst->nbytes);
  return PX_OK;
}

/* The checks of a copy between t and a host buffer of bytes (fn names the
 * call, verb what the caller did with the size: "given", "wanted"). */
static px_status_t px__host_copy_check(const px_tensor_t *t, const void *host, size_t bytes,
                                       const char *fn, const char *verb) {
  PX_CHECK(px__check_device(t, fn));
  PX_REQUIRE(t->data && host, "%s: missing storage or host buffer", fn);
  PX_REQUIRE(bytes == px_tensor_plain_bytes(t), "%s: %zu bytes %s, tensor holds %zu", fn, bytes,
             verb, px_tensor_plain_bytes(t));
  return PX_OK;
}

px_status_t px_tensor_copy_from_host(px_tensor_t *t, const void *host, size_t bytes) {
  PX_CHECK(px__host_copy_check(t, host, bytes, "px_tensor_copy_from_host", "given"));
  if (px__on_cuda(t) && !t->layout)
    return px__cuda_mem_upload(t->device.index, t->data, host, bytes);
  if (!t->layout) {
    memcpy(t->data, host, bytes);
    return PX_OK;
  }
  return t->layout->vt->from_plain(t->layout, t->data, host);
}

px_status_t px_tensor_copy_to_host(const px_tensor_t *t, void *host, size_t bytes) {
  PX_CHECK(px__host_copy_check(t, host, bytes, "px_tensor_copy_to_host", "wanted"));
  if (px__on_cuda(t) && !t->layout)
    return px__cuda_mem_download(t->device.index, host, t->data, bytes);
  if (!t->layout) {
    memcpy(host, t->data, bytes);
    return PX_OK;
  }
  return t->layout->vt->to_plain(t->layout, host, t->data);
}

/* ---- arenas ------------------------------------------------------------- */

size_t px_arena_plan(px_tensor_t *const *tensors, size_t n, size_t align, size_t *offsets) {
  if (align == 0) align = 64;
  assert((align & (align - 1)) == 0);
  size_t off = 0;
  for (size_t i = 0; i < n; i++) {
    off = (off + align - 1) & ~(align - 1);
    if (offsets) offsets[i] = off;
    off += tensors[i]->nbytes;
  }
  return off;
}

px_status_t px_arena_alloc(px_arena_t *arena, px_device_t dev, px_tensor_t *const *tensors,
                           size_t n, size_t align, const char *name) {
  assert(arena);
  PX_REQUIRE(arena->base == NULL, "px_arena_alloc: arena is not empty");
  PX_REQUIRE(n == 0 || tensors != NULL, "px_arena_alloc: tensors are NULL");
  PX_REQUIRE(align == 0 || (align & (align - 1)) == 0, "px_arena_alloc: align %zu is not a power of two",
             align);
  PX_REQUIRE(dev.kind == PX_DEVICE_CPU || dev.kind == PX_DEVICE_CUDA,
             "px_arena_alloc: unknown device kind %d", (int)dev.kind);
  for (size_t i = 0; i < n; i++) {
    PX_REQUIRE(tensors[i] != NULL, "px_arena_alloc: tensor %zu is NULL", i);
    PX_REQUIRE(tensors[i]->data == NULL, "px_arena_alloc: tensor %zu already has storage", i);
    PX_REQUIRE(px_device_equal(tensors[i]->device, dev), "px_arena_alloc: tensor %zu is on another device", i);
    PX_REQUIRE(dev.kind == PX_DEVICE_CPU || tensors[i]->layout == NULL ||
                   px_device_equal(tensors[i]->layout->device, dev),
               "px_arena_alloc: CUDA tensor %zu is in a layout of another device", i);
  }
  /* The size table is walked twice, once to size the block and once to set
   * the pointers, so that the family costs exactly one allocation and a
   * failure leaves every tensor untouched. */
  const size_t total = px_arena_plan(tensors, n, align, NULL);
  const size_t a = align ? align : 64;
  if (total > 0) {
    void *base;
    PX_CHECK(px__storage_alloc(dev, total, name ? name : "arena", &base));
    arena->base = base;
  }
  arena->device = dev;
  arena->bytes = total;
  size_t off = 0;
  for (size_t i = 0; i < n; i++) {
    off = (off + a - 1) & ~(a - 1);
    tensors[i]->data = arena->base ? (char *)arena->base + off : NULL;
    tensors[i]->flags &= ~(uint32_t)PX_TENSOR_OWNS_DATA;
    off += tensors[i]->nbytes;
  }
  return PX_OK;
}

void px_arena_free(px_arena_t *arena) {
  if (!arena) return;
  if (arena->base && (arena->device.kind == PX_DEVICE_CPU || arena->device.kind == PX_DEVICE_CUDA))
    px__storage_free(arena->device, arena->base);
  arena->base = NULL;
  arena->bytes = 0;
}
