/* Stand-ins for the H-SADMM and Top-K kernels of cuda_kernels.h (admm/cuda/)
 * when libpxcore is built without CUDA: each answers PX_ERR_NOT_BUILT, so
 * callers need no #ifdefs. */
#include "prunex/cuda_kernels.h"

static px_status_t px__not_built(void) {
  return px_set_error(PX_ERR_NOT_BUILT, "libpxcore was built without CUDA (PX_WITH_CUDA=OFF)");
}

px_status_t px_cuda_kernels_copy(void *dst, const void *src, size_t bytes, void *stream) {
  (void)dst; (void)src; (void)bytes; (void)stream;
  return px__not_built();
}

px_status_t px_cuda_kernels_zero(void *dev, size_t bytes, void *stream) {
  (void)dev; (void)bytes; (void)stream;
  return px__not_built();
}

px_status_t px_cuda_admm_add(float *out, const float *a, const float *b, size_t n, void *stream) {
  (void)out; (void)a; (void)b; (void)n; (void)stream;
  return px__not_built();
}

px_status_t px_cuda_admm_scale(float *x, float f, size_t n, void *stream) {
  (void)x; (void)f; (void)n; (void)stream;
  return px__not_built();
}

px_status_t px_cuda_admm_zi_update(float *zi, const float *s, const float *z, const float *v,
                                   double rho1, double rho2, double lambda, int num_nodes,
                                   int ranks_per_node, size_t n, void *stream) {
  (void)zi; (void)s; (void)z; (void)v; (void)rho1; (void)rho2; (void)lambda; (void)num_nodes;
  (void)ranks_per_node; (void)n; (void)stream;
  return px__not_built();
}

px_status_t px_cuda_admm_z_flat(float *z, const float *s, double rho1, double lambda,
                                int num_ranks, size_t n, void *stream) {
  (void)z; (void)s; (void)rho1; (void)lambda; (void)num_ranks; (void)n; (void)stream;
  return px__not_built();
}

px_status_t px_cuda_admm_dual_update(float *x, const float *a, const float *b, size_t n,
                                     void *stream) {
  (void)x; (void)a; (void)b; (void)n; (void)stream;
  return px__not_built();
}

px_status_t px_cuda_admm_rescale(float *x, double rho_old, double rho_new, size_t n,
                                 void *stream) {
  (void)x; (void)rho_old; (void)rho_new; (void)n; (void)stream;
  return px__not_built();
}

px_status_t px_cuda_admm_sqdiff(double *out, const float *a, const float *b, size_t n, void *ws,
                                size_t ws_bytes, void *stream) {
  (void)out; (void)a; (void)b; (void)n; (void)ws; (void)ws_bytes; (void)stream;
  return px__not_built();
}

px_status_t px_cuda_topk_workspace_size(size_t n, size_t *bytes) {
  (void)n;
  if (bytes) *bytes = 0;
  return px__not_built();
}

px_status_t px_cuda_topk_select(px_topk_pair_t *pairs, float *e, size_t n, size_t k, void *ws,
                                size_t ws_bytes, void *stream) {
  (void)pairs; (void)e; (void)n; (void)k; (void)ws; (void)ws_bytes; (void)stream;
  return px__not_built();
}

px_status_t px_cuda_topk_scatter_add(float *grad, uint32_t *bad, const px_topk_pair_t *pairs,
                                     size_t k, size_t n, float scale, void *stream) {
  (void)grad; (void)bad; (void)pairs; (void)k; (void)n; (void)scale; (void)stream;
  return px__not_built();
}
