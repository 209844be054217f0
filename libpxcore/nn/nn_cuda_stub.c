/* Stand-ins for nn/cuda/ in a build without CUDA: the CUDA op backend and
 * the CUDA optimiser cannot be created, so nothing else of theirs can be
 * reached (see nn/px_ops_int.h). */
#include "nn/px_ops_int.h"
#include "nn/px_sgd_cuda.h"

static px_status_t px__not_built(const char *what) {
  return px_set_error(PX_ERR_NOT_BUILT, "%s: libpxcore was built without CUDA (PX_WITH_CUDA=OFF)",
                      what);
}

px_status_t px__cuda_ops_create(px_device_t dev, int nthreads, px_ops_t **out) {
  (void)dev;
  (void)nthreads;
  *out = NULL;
  return px__not_built("px_ops_create");
}

px_status_t px__cuda_sgd_create(px_ops_t *ops, int n, float *const *w, float *const *g,
                                float *const *buf, const size_t *numel, px__cuda_sgd_t **out) {
  (void)ops; (void)n; (void)w; (void)g; (void)buf; (void)numel;
  *out = NULL;
  return px__not_built("px_sgd_create");
}

void px__cuda_sgd_destroy(px__cuda_sgd_t *s) { (void)s; }

px_status_t px__cuda_sgd_set_prox(px__cuda_sgd_t *s, int i, const float *z, const float *u,
                                  float rho) {
  (void)s; (void)i; (void)z; (void)u; (void)rho;
  return px__not_built("px_sgd_set_prox");
}

px_status_t px__cuda_sgd_step(px__cuda_sgd_t *s, float lr, float momentum, float weight_decay,
                              int nesterov) {
  (void)s; (void)lr; (void)momentum; (void)weight_decay; (void)nesterov;
  return px__not_built("px_sgd_step");
}
