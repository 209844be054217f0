/* The part of prunex/tensor.h internal to libpxcore, its programs and its tests
 * (not installed, not exported: docs/architecture.md, "libpxcore"). */
#ifndef PRUNEX_TENSOR_INTERNAL_H
#define PRUNEX_TENSOR_INTERNAL_H

#include "prunex/tensor.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Bytes an arena needs for tensors[0..n) laid out in order, each starting at
 * a multiple of align (a power of two; 0 means 64). Also writes each
 * tensor's offset to offsets[i] when offsets is not NULL. */
size_t px_arena_plan(px_tensor_t *const *tensors, size_t n, size_t align, size_t *offsets);

/* Allocates one zeroed block for tensors[0..n) on dev and points each
 * tensor's data into it (the tensors become views: they do not own it).
 * Every tensor must be a spec on dev without storage. On failure nothing is
 * allocated and no tensor is changed. *arena must be empty (zeroed). */
px_status_t px_arena_alloc(px_arena_t *arena, px_device_t dev, px_tensor_t *const *tensors,
                           size_t n, size_t align, const char *name);

/* Frees the block; views into it dangle afterwards. Safe on an empty arena. */
void px_arena_free(px_arena_t *arena);

#ifdef __cplusplus
}
#endif

#endif
