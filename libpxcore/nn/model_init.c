/* The parameters' initial values: He-normal convolutions, PyTorch's
 * uniform fully connected layers, unit scales and zero shifts, each
 * parameter from its own stream of the seed; an imported model starts
 * from its file's weights. */
#include <math.h>
#include <string.h>

#include "nn/model_int.h"
#include "px_check.h"

/* ---- initialisation ----------------------------------------------------------- */

typedef struct {
  uint64_t s;
} px__init_rng_t;

static uint64_t px__init_rng_next(px__init_rng_t *r) {
  uint64_t z = (r->s += 0x9E3779B97F4A7C15ull); /* splitmix64 */
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

static double px__init_rng_uniform(px__init_rng_t *r) { return (double)(px__init_rng_next(r) >> 11) * 0x1.0p-53; }

static double px__init_rng_normal(px__init_rng_t *r) {
  double u1 = px__init_rng_uniform(r), u2 = px__init_rng_uniform(r);
  if (u1 < 1e-300) u1 = 1e-300;
  return sqrt(-2.0 * log(u1)) * cos(6.283185307179586 * u2);
}

static px_status_t px__fill(px_tensor_t *t, float *tmp, size_t n) {
  return px_tensor_copy_from_host(t, tmp, n * sizeof(float));
}

/* a [rows, cols] in place to [cols, rows] (a MatMul's weight as Gemm's). */
static px_status_t px__transpose(float *a, int64_t rows, int64_t cols) {
  size_t n = (size_t)(rows * cols);
  float *t = px_malloc(n * sizeof *t, "model.transpose");
  if (!t) return PX_ERR_NOMEM;
  for (int64_t r = 0; r < rows; r++)
    for (int64_t c = 0; c < cols; c++) t[c * rows + r] = a[r * cols + c];
  memcpy(a, t, n * sizeof *t);
  px_free(t);
  return PX_OK;
}

/* An imported model starts from the file's weights: the layers hold them in
 * the order their nodes created parameters and buffers. */
static px_status_t px__init_onnx(px_model_t *m, float *tmp) {
  const px__onnx_graph_t *g = m->graph;
  int p = 0, b = 0;
  for (int k = 0; k < g->nlayers; k++) {
    const px__onnx_layer_t *L = &g->layers[k];
    const px__onnx_init_t *src[4] = {&L->w, &L->b, &L->rm, &L->rv};
    int np = L->kind == PX__OL_CONV ? 1 + (L->b.n > 0)
             : L->kind == PX__OL_BN || L->kind == PX__OL_FC || L->kind == PX__OL_LN ? 2
                                                                                    : 0;
    int nb = L->kind == PX__OL_BN ? 2 : 0;
    for (int i = 0; i < np + nb; i++) {
      px_tensor_t *t = i < np ? &m->pvals[p++] : &m->bufs[b++];
      size_t n = px_tensor_numel(t);
      if (src[i]->bytes && src[i]->n != n)
        return px_set_error(PX_ERR_INTERNAL, "%s: layer '%s' has %zu values for %zu", m->onnx,
                            L->node, src[i]->n, n);
      if (src[i]->bytes) memcpy(tmp, src[i]->bytes, n * sizeof *tmp);
      else memset(tmp, 0, n * sizeof *tmp);
      for (size_t j = 0; !src[i]->bytes && L->kind == PX__OL_LN && i == 0 && j < n; j++)
        tmp[j] = 1.0f; /* a LayerNorm without a scale: 1 */
      if (i == 0 && L->transposed) PX_CHECK(px__transpose(tmp, t->dims[1], t->dims[0]));
      PX_CHECK(px__fill(t, tmp, n));
    }
  }
  return PX_OK;
}

px_status_t px_model_init_params(px_model_t *m, uint64_t seed) {
  size_t maxn = 1;
  for (int i = 0; i < m->nparams; i++)
    if (px_tensor_numel(&m->pvals[i]) > maxn) maxn = px_tensor_numel(&m->pvals[i]);
  for (int i = 0; i < m->nbufs; i++)
    if (px_tensor_numel(&m->bufs[i]) > maxn) maxn = px_tensor_numel(&m->bufs[i]);
  float *tmp = px_malloc(maxn * sizeof(float), "model.init");
  if (!tmp) return PX_ERR_NOMEM;
  px_status_t st = PX_OK;
  if (m->graph && !m->widths) {
    PX_CHECK_GOTO(px__init_onnx(m, tmp), st, done);
    PX_CHECK_GOTO(px_tensor_zero(&m->flat_grads), st, done);
    goto done;
  }
  for (int i = 0; i < m->nparams; i++) {
    px_tensor_t *t = &m->pvals[i];
    size_t n = px_tensor_numel(t);
    /* each parameter draws from its own stream: adding a layer does not
     * change the others' initial values */
    px__init_rng_t r = {seed * 0x100000001B3ull + (uint64_t)i * 0x9E3779B97F4A7C15ull};
    switch (m->pkinds[i]) {
      case PX_WEIGHT_CONV:
      case PX_WEIGHT_CONV_FIXED: {
        double fan_out = (double)t->dims[0] * t->dims[2] * t->dims[3];
        double std = sqrt(2.0 / fan_out);
        for (size_t j = 0; j < n; j++) tmp[j] = (float)(std * px__init_rng_normal(&r));
        break;
      }
      case PX_WEIGHT_BN_SCALE:
      case PX_WEIGHT_LN_SCALE:
        for (size_t j = 0; j < n; j++) tmp[j] = 1.0f;
        break;
      case PX_WEIGHT_BN_SHIFT:
      case PX_WEIGHT_LN_SHIFT:
      case PX_WEIGHT_CONV_BIAS:
        for (size_t j = 0; j < n; j++) tmp[j] = 0.0f;
        break;
      case PX_WEIGHT_FC:
      case PX_WEIGHT_FC_BIAS: {
        const px_tensor_t *w = m->pkinds[i] == PX_WEIGHT_FC ? t : &m->pvals[i - 1];
        double bound = 1.0 / sqrt((double)w->dims[1]);
        for (size_t j = 0; j < n; j++) tmp[j] = (float)(bound * (2.0 * px__init_rng_uniform(&r) - 1.0));
        break;
      }
    }
    PX_CHECK_GOTO(px__fill(t, tmp, n), st, done);
  }
  for (int i = 0; i < m->nbufs; i++) {
    size_t n = px_tensor_numel(&m->bufs[i]);
    float v = strstr(m->bnames[i], "running_var") ? 1.0f : 0.0f;
    for (size_t j = 0; j < n; j++) tmp[j] = v;
    PX_CHECK_GOTO(px__fill(&m->bufs[i], tmp, n), st, done);
  }
  PX_CHECK_GOTO(px_tensor_zero(&m->flat_grads), st, done);
done:
  px_free(tmp);
  return st;
}
