/* Stand-ins for the pruning kernels of cuda_kernels.h (prune/cuda/) when
 * libpxcore is built without CUDA: each answers PX_ERR_NOT_BUILT, so callers
 * need no #ifdefs. */
#include "prunex/cuda_kernels.h"

static px_status_t px__not_built(void) {
  return px_set_error(PX_ERR_NOT_BUILT, "libpxcore was built without CUDA (PX_WITH_CUDA=OFF)");
}

px_status_t px_cuda_kernels_alloc(size_t bytes, const char *name, void **dev) {
  (void)bytes; (void)name;
  if (dev) *dev = NULL;
  return px__not_built();
}

void px_cuda_kernels_free(void *dev) { (void)dev; }

px_status_t px_cuda_kernels_upload(void *dev, const void *host, size_t bytes) {
  (void)dev; (void)host; (void)bytes;
  return px__not_built();
}

px_status_t px_cuda_kernels_download(void *host, const void *dev, size_t bytes) {
  (void)host; (void)dev; (void)bytes;
  return px__not_built();
}

px_status_t px_cuda_kernels_sync(void *stream) {
  (void)stream;
  return px__not_built();
}

px_status_t px_cuda_prune_group_norms(double *norms, const float *w, px_conv_shape_t s,
                                      px_prune_group_t kind, void *stream) {
  (void)norms; (void)w; (void)s; (void)kind; (void)stream;
  return px__not_built();
}

px_status_t px_cuda_prune_channel_norms_add(double *norms, const float *w, px_conv_shape_t s,
                                            void *stream) {
  (void)norms; (void)w; (void)s; (void)stream;
  return px__not_built();
}

px_status_t px_cuda_prune_select(uint8_t *keep, const double *norms, size_t ngroups,
                                 size_t alpha, void *stream) {
  (void)keep; (void)norms; (void)ngroups; (void)alpha; (void)stream;
  return px__not_built();
}

px_status_t px_cuda_prune_apply_mask(float *w, const uint8_t *filter, const uint8_t *channel,
                                     const uint8_t *shape, px_conv_shape_t s, void *stream) {
  (void)w; (void)filter; (void)channel; (void)shape; (void)s; (void)stream;
  return px__not_built();
}

px_status_t px_cuda_prune_apply_layout(float *w, const uint8_t *mask, const px_prune_layout_t *L,
                                       void *stream) {
  (void)w; (void)mask; (void)L; (void)stream;
  return px__not_built();
}

px_status_t px_cuda_prune_project_group(float *w, uint8_t *mask_part, px_conv_shape_t s,
                                        px_prune_group_t kind, double keep, void *ws,
                                        size_t ws_bytes, void *stream) {
  (void)w; (void)mask_part; (void)s; (void)kind; (void)keep; (void)ws; (void)ws_bytes;
  (void)stream;
  return px__not_built();
}

px_status_t px_cuda_prune_project(float *w, uint8_t *mask, px_conv_shape_t s,
                                  const px_prune_keep_t *keep, void *ws, size_t ws_bytes,
                                  void *stream) {
  (void)w; (void)mask; (void)s; (void)keep; (void)ws; (void)ws_bytes; (void)stream;
  return px__not_built();
}

px_status_t px_cuda_pack_shrink(float *packed, const float *w, const int32_t *k_out,
                                int32_t n_out, const int32_t *k_in, int32_t n_in,
                                px_conv_shape_t s, void *stream) {
  (void)packed; (void)w; (void)k_out; (void)n_out; (void)k_in; (void)n_in; (void)s;
  (void)stream;
  return px__not_built();
}

px_status_t px_cuda_pack_expand(float *w, const float *packed, const int32_t *k_out,
                                int32_t n_out, const int32_t *k_in, int32_t n_in,
                                const uint8_t *shape_mask, px_conv_shape_t s, void *stream) {
  (void)w; (void)packed; (void)k_out; (void)n_out; (void)k_in; (void)n_in; (void)shape_mask;
  (void)s; (void)stream;
  return px__not_built();
}
