/* PruneX checkpoints in the safetensors format (huggingface/safetensors), so
 * that PyTorch and NumPy users can open them directly.
 *
 * A file is: an 8-byte little-endian unsigned header size N; N bytes of UTF-8
 * JSON, an object mapping each tensor name to
 *   {"dtype": "F32", "shape": [d0, d1, ...], "data_offsets": [begin, end]}
 * plus an optional "__metadata__" object of string -> string, padded with
 * spaces so that N is a multiple of 8; then the raw little-endian data of
 * every tensor, row-major, at [begin, end) relative to the first byte after
 * the header, packed without gaps or overlaps.
 *
 * Everything here works on host memory: the caller copies device tensors to
 * the host before saving and after loading.
 *
 * Writing (px_safetensors_save) is atomic: the file appears complete under
 * its name or not at all (temporary file in the same directory, fsync,
 * rename). Reading (px_safetensors_open) validates the whole header before
 * anything else happens, so every later call can trust it.
 *
 * Errors: PX_ERR_INVALID for bad arguments, PX_ERR_IO for failed system
 * calls (the message names the path and the errno text), PX_ERR_FORMAT for a
 * malformed file, PX_ERR_MISMATCH when a file does not hold what
 * px_safetensors_load_into was asked for, PX_ERR_NOMEM. Every message
 * (px_last_error) starts with the file's path and says what is wrong. */
#ifndef PRUNEX_SAFETENSORS_H
#define PRUNEX_SAFETENSORS_H

#include <stddef.h>
#include <stdint.h>

#include "prunex/px.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Most dimensions a tensor may have. */
#define PX_ST_MAX_DIMS 8

/* Largest header a reader accepts (the reference implementation's limit). */
#define PX_ST_MAX_HEADER 100000000u

/* Element types, named as in the file ("F32", ...). The first five are the
 * ones PruneX itself writes; the others are read (and written) as raw bytes
 * so that files from other tools open too. */
typedef enum {
  PX_ST_F32 = 0,
  PX_ST_F64,
  PX_ST_I32,
  PX_ST_I64,
  PX_ST_U8,
  PX_ST_I8,
  PX_ST_I16,
  PX_ST_U16,
  PX_ST_U32,
  PX_ST_U64,
  PX_ST_F16,
  PX_ST_BF16,
  PX_ST_BOOL,
  PX_ST_F8_E4M3,
  PX_ST_F8_E5M2,
  PX_ST_DTYPE_COUNT
} px_st_dtype_t;

/* The file's name of a dtype ("F32"); "?" for a value out of range. */
const char *px_st_dtype_name(px_st_dtype_t dtype);
/* Bytes per element; 0 for a value out of range. */
size_t px_st_dtype_size(px_st_dtype_t dtype);

/* One tensor of a table that is saved or loaded. The same table can serve
 * both directions: px_safetensors_save reads `data`, px_safetensors_load_into
 * writes `dst`; each ignores the other pointer. */
typedef struct {
  const char *name;               /* UTF-8, unique in the table, not "__metadata__" */
  px_st_dtype_t dtype;
  int ndim;                       /* 0..PX_ST_MAX_DIMS; 0 is a scalar (one element) */
  int64_t shape[PX_ST_MAX_DIMS];  /* shape[0..ndim), each >= 0; a 0 makes an empty tensor */
  const void *data;               /* save: numel * dtype size bytes, host order (little-endian) */
  void *dst;                      /* load_into: room for numel * dtype size bytes */
} px_st_tensor_t;

/* Writes tensors[0..n) and nmeta metadata pairs (meta_kv[2i] is a key,
 * meta_kv[2i+1] its value; NULL when nmeta is 0) to path, replacing any file
 * there. Tensors are stored largest element size first, then by name (as the
 * reference implementation does), so their data stays aligned; metadata keeps
 * the caller's order. Atomic: a temporary file "<path>.tmp.*" in the same
 * directory is written, fsync'ed and renamed over path, and removed on any
 * failure, so path holds either the old content or the complete new file.
 * Fails with PX_ERR_INVALID (NULL or duplicate names, names or metadata that
 * are not valid UTF-8 or hold a NUL, bad dtype, ndim or shape, NULL data for
 * a non-empty tensor, duplicate metadata keys), PX_ERR_IO naming the path and
 * errno text, PX_ERR_NOMEM. Allocates only the header; data is written
 * straight from the caller's buffers. */
px_status_t px_safetensors_save(const char *path, const px_st_tensor_t *tensors, int n,
                                       const char *const *meta_kv, int nmeta);

/* ---- reading --------------------------------------------------------------- */

typedef struct px_safetensors px_safetensors_t;

/* What the header says about one tensor. */
typedef struct {
  const char *name;               /* owned by the handle, valid until close */
  px_st_dtype_t dtype;
  int ndim;
  int64_t shape[PX_ST_MAX_DIMS];
  uint64_t nbytes;                /* numel * dtype size */
  uint64_t file_offset;           /* absolute offset of the data in the file */
} px_st_info_t;

/* Opens path and parses and validates its whole header: strict JSON (no
 * duplicate keys, no unknown fields, valid UTF-8, integers only, nesting at
 * most 64 deep; read with json-c, in time linear in its size), known
 * dtypes, 0..PX_ST_MAX_DIMS non-negative dimensions whose byte size does not
 * overflow, data_offsets equal to shape x dtype size, tensors packed from 0
 * to the end of the file without gaps or overlaps, header size within the
 * file and at most PX_ST_MAX_HEADER. The caller owns *out
 * (px_safetensors_close); it keeps the file open for reads. Fails with
 * PX_ERR_IO (cannot open or read), PX_ERR_FORMAT, PX_ERR_NOMEM,
 * PX_ERR_INVALID (NULL argument); *out is NULL then. */
px_status_t px_safetensors_open(const char *path, px_safetensors_t **out);

/* Closes the file and frees the handle; NULL is a no-op. Invalidates every
 * name, info and metadata string obtained from it. */
void px_safetensors_close(px_safetensors_t *st);

/* Number of tensors. */
int px_safetensors_count(const px_safetensors_t *st);

/* Name of tensor i (0 <= i < count), in the order of their data in the file;
 * owned by the handle. NULL when i is out of range. */
const char *px_safetensors_name(const px_safetensors_t *st, int i);

/* Looks a tensor up by name. Fails with PX_ERR_INVALID naming the file and
 * the tensor when there is none of that name (*info untouched). */
px_status_t px_safetensors_find(const px_safetensors_t *st, const char *name,
                                       px_st_info_t *info);

/* Reads the data of tensor `name` into dst, which must be exactly its size:
 * bytes must equal the tensor's nbytes. Fails with PX_ERR_INVALID (no such
 * tensor, wrong size), PX_ERR_IO, PX_ERR_FORMAT (the file shrank since open);
 * dst may be partly written then. Safe from several threads on one handle. */
px_status_t px_safetensors_read(const px_safetensors_t *st, const char *name, void *dst,
                                       size_t bytes);

/* Value of metadata key, or NULL when absent; owned by the handle. */
const char *px_safetensors_meta(const px_safetensors_t *st, const char *key);

/* Number of metadata pairs, and pair i (0 <= i < count, in file order);
 * NULL key and value when i is out of range. Strings owned by the handle. */
int px_safetensors_meta_count(const px_safetensors_t *st);
void px_safetensors_meta_at(const px_safetensors_t *st, int i, const char **key,
                                   const char **value);

/* Opens path and reads every listed tensor into its dst, after checking that
 * each exists with exactly the listed dtype and shape. With strict != 0 the
 * file must hold no tensor outside the list. Everything is checked before
 * any dst is written, so a mismatch leaves the caller's buffers untouched.
 * Fails with PX_ERR_MISMATCH (missing tensor, dtype or shape differs, extra
 * tensor in strict mode; the message names the tensor and both dtypes or
 * shapes), PX_ERR_INVALID (NULL or duplicate names, NULL dst for a
 * non-empty tensor), and whatever px_safetensors_open and _read fail with. */
px_status_t px_safetensors_load_into(const char *path, const px_st_tensor_t *tensors, int n,
                                            int strict);

#ifdef __cplusplus
}
#endif
#endif
