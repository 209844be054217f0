/* SGD with momentum, Nesterov, weight decay and the ADMM proximal term, in
 * one pass over each parameter tensor (PyTorch's torch.optim.SGD update with
 * dampening 0). The momentum buffers are one arena laid out like the
 * parameters, on the model's device. On CUDA the same update runs as one
 * fused kernel over all parameters (nn/cuda/cuda_sgd.cu), queued on the
 * model's ops stream after the backward pass. */
#include <math.h>
#include <string.h>

#include "nn/px_sgd_cuda.h"
#include "prunex/nn.h"
#include "prunex/tensor_internal.h"
#include "px_check.h"

typedef struct {
  const float *z, *u; /* borrowed; z NULL when the hook is off */
  float rho;
} px__prox_t;

struct px_sgd {
  px_model_t *model;
  px_sgd_config_t cfg;
  px_tensor_t *mom;   /* [nparams] views into the arena */
  px__prox_t *prox;   /* [nparams] */
  px_arena_t arena;
  int n;
  px__cuda_sgd_t *cuda; /* the fused kernel's plan on CUDA, else NULL */
};

static px_status_t px__sgd_validate(const px_sgd_config_t *c) {
  PX_REQUIRE(c->lr > 0 && isfinite(c->lr), "train.lr = %g: must be > 0", c->lr);
  PX_REQUIRE(c->momentum >= 0 && c->momentum < 1, "train.momentum = %g: must be in [0, 1)",
             c->momentum);
  PX_REQUIRE(c->weight_decay >= 0 && isfinite(c->weight_decay),
             "train.weight_decay = %g: must be >= 0", c->weight_decay);
  PX_REQUIRE(!c->nesterov || c->momentum > 0, "train.nesterov needs a momentum > 0");
  return PX_OK;
}

/* Hands the parameters' device pointers to the fused CUDA step. */
static px_status_t px__sgd_plan_cuda(px_sgd_t *s) {
  size_t n = (size_t)(s->n ? s->n : 1);
  float **w = px_malloc(n * sizeof *w, "sgd.plan"), **g = px_malloc(n * sizeof *g, "sgd.plan");
  float **b = px_malloc(n * sizeof *b, "sgd.plan");
  size_t *numel = px_malloc(n * sizeof *numel, "sgd.plan");
  px_status_t st = PX_ERR_NOMEM;
  if (w && g && b && numel) {
    for (int i = 0; i < s->n; i++) {
      const px_model_param_t *p = px_model_param(s->model, i);
      w[i] = p->value->data;
      g[i] = p->grad->data;
      b[i] = s->mom[i].data;
      numel[i] = px_tensor_numel(p->value);
    }
    st = px__cuda_sgd_create(px_model_ops(s->model), s->n, w, g, b, numel, &s->cuda);
  }
  PX_FREE_ALL(w, g, b, numel);
  return st;
}

px_status_t px_sgd_create(px_model_t *m, const px_sgd_config_t *cfg, px_sgd_t **out) {
  *out = NULL;
  PX_CHECK(px__sgd_validate(cfg));
  px_device_t dev = px_ops_device(px_model_ops(m));
  px_sgd_t *s = px_calloc(1, sizeof *s, "sgd");
  if (!s) return PX_ERR_NOMEM;
  s->model = m;
  s->cfg = *cfg;
  s->n = px_model_num_params(m);
  s->mom = px_calloc((size_t)s->n, sizeof *s->mom, "sgd.momentum_views");
  s->prox = px_calloc((size_t)s->n, sizeof *s->prox, "sgd.prox");
  px_tensor_t **list = px_malloc((size_t)(s->n ? s->n : 1) * sizeof *list, "sgd.list");
  px_status_t st = PX_OK;
  if (!s->mom || !s->prox || !list) {
    st = PX_ERR_NOMEM;
    goto fail;
  }
  for (int i = 0; i < s->n; i++) {
    s->mom[i] = *px_model_param(m, i)->value;
    s->mom[i].data = NULL;
    s->mom[i].flags = 0;
    list[i] = &s->mom[i];
  }
  PX_CHECK_GOTO(px_arena_alloc(&s->arena, dev, list, (size_t)s->n, 4, "sgd.momentum"), st, fail);
  if (dev.kind == PX_DEVICE_CUDA) PX_CHECK_GOTO(px__sgd_plan_cuda(s), st, fail);
  px_free(list);
  *out = s;
  return PX_OK;
fail:
  px_free(list);
  px_sgd_destroy(s);
  return st;
}

void px_sgd_destroy(px_sgd_t *s) {
  if (!s) return;
  px__cuda_sgd_destroy(s->cuda); /* first: it waits for queued steps */
  px_arena_free(&s->arena);
  PX_FREE_ALL(s->mom, s->prox, s);
}

void px_sgd_set_lr(px_sgd_t *s, double lr) { s->cfg.lr = lr; }
double px_sgd_lr(const px_sgd_t *s) { return s->cfg.lr; }
double px_sgd_weight_decay(const px_sgd_t *s) { return s->cfg.weight_decay; }
void px_sgd_set_weight_decay(px_sgd_t *s, double wd) { s->cfg.weight_decay = wd; }
px_tensor_t *px_sgd_momentum(px_sgd_t *s, int i) { return i >= 0 && i < s->n ? &s->mom[i] : NULL; }

px_status_t px_sgd_set_prox(px_sgd_t *s, int i, const float *z, const float *u, float rho) {
  PX_REQUIRE(i >= 0 && i < s->n, "proximal term for parameter %d of %d", i, s->n);
  PX_REQUIRE(rho >= 0 && isfinite(rho), "proximal penalty rho = %g: must be >= 0", rho);
  PX_REQUIRE(rho == 0 || z != NULL, "proximal term for %s without a target z",
             px_model_param(s->model, i)->name);
  if (s->cuda) PX_CHECK(px__cuda_sgd_set_prox(s->cuda, i, z, u, rho));
  s->prox[i] = (px__prox_t){rho > 0 ? z : NULL, rho > 0 ? u : NULL, rho};
  return PX_OK;
}

/* The update of one tensor; the compiler vectorises the loop. The branches
 * on the options are hoisted by keeping one loop per case. */
static void px__sgd_tensor(float *restrict w, const float *restrict g, float *restrict buf,
                           size_t n, float lr, float mom, float wd, int nesterov,
                           const float *restrict z, const float *restrict u, float rho) {
  if (z) {
    for (size_t j = 0; j < n; j++) {
      float d = g[j] + wd * w[j] + rho * (w[j] - z[j] + (u ? u[j] : 0.0f));
      float b = mom * buf[j] + d;
      buf[j] = b;
      w[j] -= lr * (nesterov ? d + mom * b : b);
    }
    return;
  }
  if (nesterov) {
    for (size_t j = 0; j < n; j++) {
      float d = g[j] + wd * w[j];
      float b = mom * buf[j] + d;
      buf[j] = b;
      w[j] -= lr * (d + mom * b);
    }
  } else {
    for (size_t j = 0; j < n; j++) {
      float d = g[j] + wd * w[j];
      float b = mom * buf[j] + d;
      buf[j] = b;
      w[j] -= lr * b;
    }
  }
}

px_status_t px_sgd_step(px_sgd_t *s) {
  float lr = (float)s->cfg.lr, mom = (float)s->cfg.momentum, wd = (float)s->cfg.weight_decay;
  if (s->cuda) return px__cuda_sgd_step(s->cuda, lr, mom, wd, s->cfg.nesterov);
  for (int i = 0; i < s->n; i++) {
    const px_model_param_t *p = px_model_param(s->model, i);
    size_t n = px_tensor_numel(p->value);
    px__sgd_tensor(p->value->data, p->grad->data, s->mom[i].data, n, lr, mom, wd,
                   s->cfg.nesterov, s->prox[i].z, s->prox[i].u, s->prox[i].rho);
  }
  return PX_OK;
}
