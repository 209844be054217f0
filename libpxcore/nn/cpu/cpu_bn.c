/* Batch normalisation on oneDNN with PyTorch semantics: training forward
 * (batch statistics, optional fused ReLU via dnnl_fuse_norm_relu),
 * inference forward (running statistics, dnnl_use_global_stats) and the
 * backward (dx, dscale, dshift). Data keep the layout of the input (the
 * blocked output of the convolution before it). oneDNN returns the biased
 * batch variance, which is what normalises and what the backward needs; the
 * running variance gets the unbiased one, as PyTorch does, in a short loop
 * over the channels here. */
#include <string.h>

#include "nn/cpu/px_cpu_int.h"

struct px_batchnorm {
  px__ops_head_t head; /* first: the dispatcher reads it */
  px_ops_t *ops;
  px_batchnorm_params_t p;
  int64_t count;      /* N*H*W: values per channel */
  px_tensor_t x_spec; /* [N, C, H, W], layout of the input; y and dx, dy share it */
  px_tensor_t c_spec; /* [C] plain f32 */
  px_tensor_t ws_spec; /* [bytes] u8, ReLU mask; nbytes 0 without fused ReLU */
  px__exec_t fwd;     /* SRC, SCALE, SHIFT, DST, MEAN, VARIANCE, [WORKSPACE] */
  px__exec_t infer;   /* SRC, SCALE, SHIFT, MEAN, VARIANCE, DST */
  px__exec_t bwd;     /* SRC, DIFF_DST, SCALE, SHIFT, MEAN, VARIANCE, DIFF_SRC, DIFF_SCALE,
                         DIFF_SHIFT, [WORKSPACE] */
};

void px__cpu_batchnorm_destroy(px_batchnorm_t *op) {
  if (!op) return;
  px__exec_destroy(&op->fwd);
  px__exec_destroy(&op->infer);
  px__exec_destroy(&op->bwd);
  if (op->ops) px__cpu_op_died(op->ops);
  px_free(op);
}

px_status_t px__cpu_batchnorm_create(px_ops_t *ops, const px_tensor_t *x_spec,
                                     const px_batchnorm_params_t *p, px_batchnorm_t **out) {
  PX_REQUIRE(out && p, "px_batchnorm_create: NULL argument");
  *out = NULL;
  PX_CHECK(px__cpu_check_input(ops, x_spec, 4, 4, "px_batchnorm_create"));
  PX_REQUIRE(p->eps > 0.0f && p->momentum >= 0.0f && p->momentum <= 1.0f,
             "px_batchnorm_create: eps %g must be > 0 and momentum %g in [0, 1]", (double)p->eps,
             (double)p->momentum);
  px__cpu_enter(ops);
  px_status_t st = PX_OK;
  dnnl_primitive_desc_t fwd_pd = NULL, inf_pd = NULL, bwd_pd = NULL;
  px_batchnorm_t *op = px__cpu_op_new(ops, sizeof *op, "px_batchnorm");
  if (!op) return PX_ERR_NOMEM;
  op->ops = ops;
  op->p = *p;
  op->count = x_spec->dims[0] * x_spec->dims[2] * x_spec->dims[3];
  op->x_spec = px__ops_spec_copy(x_spec);
  const int64_t cdims[1] = {x_spec->dims[1]};
  PX_CHECK_GOTO(px_tensor_init(&op->c_spec, ops->device, PX_DTYPE_F32, 1, cdims), st, fail);

  dnnl_memory_desc_t x_md;
  PX_CHECK_GOTO(px__cpu_md_of(ops, x_spec, &x_md), st, fail);
  const unsigned flags = dnnl_use_scale | dnnl_use_shift | (p->fuse_relu ? dnnl_fuse_norm_relu : 0u);
  dnnl_batch_normalization_desc_t bd;

  PX_DNNL_GOTO(dnnl_batch_normalization_forward_desc_init(&bd, dnnl_forward_training, &x_md, p->eps,
                                                          flags),
               st, fail);
  PX_CHECK_GOTO(px__cpu_pd_create(ops, &fwd_pd, &bd, NULL, NULL, "batch norm forward"), st, fail);
  {
    const int fa[] = {DNNL_ARG_SRC,  DNNL_ARG_SCALE,    DNNL_ARG_SHIFT,    DNNL_ARG_DST,
                      DNNL_ARG_MEAN, DNNL_ARG_VARIANCE, DNNL_ARG_WORKSPACE};
    PX_CHECK_GOTO(px__exec_create(ops, &op->fwd, fwd_pd, fa, p->fuse_relu ? 7 : 6), st, fail);
  }
  {
    const dnnl_memory_desc_t *dst = px__cpu_pd_md(fwd_pd, DNNL_ARG_DST);
    if (!dnnl_memory_desc_equal(dst, &x_md)) {
      st = px_set_error(PX_ERR_INTERNAL, "batch norm changed the data layout");
      goto fail;
    }
    int64_t wsbytes = 0;
    if (p->fuse_relu) {
      const dnnl_memory_desc_t *ws = dnnl_primitive_desc_query_md(fwd_pd, dnnl_query_workspace_md, 0);
      wsbytes = ws ? (int64_t)dnnl_memory_desc_get_size(ws) : 0;
    }
    const int64_t wdims[1] = {wsbytes > 0 ? wsbytes : 1};
    PX_CHECK_GOTO(px_tensor_init(&op->ws_spec, ops->device, PX_DTYPE_U8, 1, wdims), st, fail);
    if (wsbytes == 0) op->ws_spec.nbytes = 0;
  }

  PX_DNNL_GOTO(dnnl_batch_normalization_forward_desc_init(&bd, dnnl_forward_inference, &x_md, p->eps,
                                                          flags | dnnl_use_global_stats),
               st, fail);
  PX_CHECK_GOTO(px__cpu_pd_create(ops, &inf_pd, &bd, NULL, NULL, "batch norm inference"), st, fail);
  {
    const int ia[] = {DNNL_ARG_SRC, DNNL_ARG_SCALE, DNNL_ARG_SHIFT, DNNL_ARG_MEAN, DNNL_ARG_VARIANCE,
                      DNNL_ARG_DST};
    PX_CHECK_GOTO(px__exec_create(ops, &op->infer, inf_pd, ia, 6), st, fail);
  }

  PX_DNNL_GOTO(dnnl_batch_normalization_backward_desc_init(&bd, dnnl_backward, &x_md, &x_md, p->eps,
                                                           flags),
               st, fail);
  PX_CHECK_GOTO(px__cpu_pd_create(ops, &bwd_pd, &bd, NULL, fwd_pd, "batch norm backward"), st, fail);
  {
    /* oneDNN 2.6 lists SHIFT among the backward's inputs when use_shift is set */
    const int ba[] = {DNNL_ARG_SRC,      DNNL_ARG_DIFF_DST, DNNL_ARG_SCALE,      DNNL_ARG_SHIFT,
                      DNNL_ARG_MEAN,     DNNL_ARG_VARIANCE, DNNL_ARG_DIFF_SRC,   DNNL_ARG_DIFF_SCALE,
                      DNNL_ARG_DIFF_SHIFT, DNNL_ARG_WORKSPACE};
    PX_CHECK_GOTO(px__exec_create(ops, &op->bwd, bwd_pd, ba, p->fuse_relu ? 10 : 9), st, fail);
  }

  dnnl_primitive_desc_destroy(fwd_pd);
  dnnl_primitive_desc_destroy(inf_pd);
  dnnl_primitive_desc_destroy(bwd_pd);
  *out = op;
  return PX_OK;
fail:
  if (fwd_pd) dnnl_primitive_desc_destroy(fwd_pd);
  if (inf_pd) dnnl_primitive_desc_destroy(inf_pd);
  if (bwd_pd) dnnl_primitive_desc_destroy(bwd_pd);
  px__cpu_batchnorm_destroy(op);
  return st;
}

void px__cpu_batchnorm_y_spec(const px_batchnorm_t *op, px_tensor_t *spec) { *spec = op->x_spec; }
void px__cpu_batchnorm_c_spec(const px_batchnorm_t *op, px_tensor_t *spec) { *spec = op->c_spec; }
void px__cpu_batchnorm_ws_spec(const px_batchnorm_t *op, px_tensor_t *spec) { *spec = op->ws_spec; }

static px_status_t px__check_ws(const px_batchnorm_t *op, const px_tensor_t *ws, const char *what) {
  if (op->ws_spec.nbytes == 0) return PX_OK;
  return px__ops_check_tensor(ws, &op->ws_spec, what);
}

px_status_t px__cpu_batchnorm_forward_train(px_batchnorm_t *op, px_tensor_t *y, px_tensor_t *mean,
                                            px_tensor_t *var, px_tensor_t *ws, const px_tensor_t *x,
                                            const px_tensor_t *scale, const px_tensor_t *shift,
                                            px_tensor_t *running_mean, px_tensor_t *running_var) {
  PX_CHECK(px__ops_check_tensor(x, &op->x_spec, "batchnorm forward x"));
  PX_CHECK(px__ops_check_tensor(y, &op->x_spec, "batchnorm forward y"));
  PX_CHECK(px__ops_check_tensor(mean, &op->c_spec, "batchnorm forward mean"));
  PX_CHECK(px__ops_check_tensor(var, &op->c_spec, "batchnorm forward var"));
  PX_CHECK(px__check_ws(op, ws, "batchnorm forward ws"));
  PX_CHECK(px__ops_check_tensor(scale, &op->c_spec, "batchnorm forward scale"));
  PX_CHECK(px__ops_check_tensor(shift, &op->c_spec, "batchnorm forward shift"));
  PX_CHECK(px__ops_check_tensor(running_mean, &op->c_spec, "batchnorm forward running_mean"));
  PX_CHECK(px__ops_check_tensor(running_var, &op->c_spec, "batchnorm forward running_var"));
  PX_REQUIRE(op->count >= 2, "batchnorm forward: %lld values per channel, training needs 2 or more",
             (long long)op->count);
  px__cpu_enter(op->ops);
  void *ptrs[7] = {x->data,    scale->data, shift->data, y->data,
                   mean->data, var->data,   op->p.fuse_relu ? ws->data : NULL};
  PX_CHECK(px__exec_run(op->ops, &op->fwd, ptrs));

  const float m = op->p.momentum;
  const float unbias = (float)((double)op->count / (double)(op->count - 1));
  const float *bm = mean->data, *bv = var->data;
  float *rm = running_mean->data, *rv = running_var->data;
  for (int64_t c = 0; c < op->c_spec.dims[0]; c++) {
    rm[c] = (1.0f - m) * rm[c] + m * bm[c];
    rv[c] = (1.0f - m) * rv[c] + m * bv[c] * unbias;
  }
  return PX_OK;
}

px_status_t px__cpu_batchnorm_forward_infer(px_batchnorm_t *op, px_tensor_t *y, const px_tensor_t *x,
                                            const px_tensor_t *scale, const px_tensor_t *shift,
                                            const px_tensor_t *running_mean,
                                            const px_tensor_t *running_var) {
  PX_CHECK(px__ops_check_tensor(x, &op->x_spec, "batchnorm infer x"));
  PX_CHECK(px__ops_check_tensor(y, &op->x_spec, "batchnorm infer y"));
  PX_CHECK(px__ops_check_tensor(scale, &op->c_spec, "batchnorm infer scale"));
  PX_CHECK(px__ops_check_tensor(shift, &op->c_spec, "batchnorm infer shift"));
  PX_CHECK(px__ops_check_tensor(running_mean, &op->c_spec, "batchnorm infer running_mean"));
  PX_CHECK(px__ops_check_tensor(running_var, &op->c_spec, "batchnorm infer running_var"));
  px__cpu_enter(op->ops);
  void *ptrs[6] = {x->data, scale->data, shift->data, running_mean->data, running_var->data, y->data};
  return px__exec_run(op->ops, &op->infer, ptrs);
}

px_status_t px__cpu_batchnorm_backward(px_batchnorm_t *op, px_tensor_t *dx, px_tensor_t *dscale,
                                       px_tensor_t *dshift, const px_tensor_t *dy, const px_tensor_t *x,
                                       const px_tensor_t *scale, const px_tensor_t *shift,
                                       const px_tensor_t *mean, const px_tensor_t *var,
                                       const px_tensor_t *ws) {
  PX_CHECK(px__ops_check_tensor(dy, &op->x_spec, "batchnorm backward dy"));
  PX_CHECK(px__ops_check_tensor(x, &op->x_spec, "batchnorm backward x"));
  PX_CHECK(px__ops_check_tensor(dx, &op->x_spec, "batchnorm backward dx"));
  PX_CHECK(px__ops_check_tensor(scale, &op->c_spec, "batchnorm backward scale"));
  PX_CHECK(px__ops_check_tensor(shift, &op->c_spec, "batchnorm backward shift"));
  PX_CHECK(px__ops_check_tensor(mean, &op->c_spec, "batchnorm backward mean"));
  PX_CHECK(px__ops_check_tensor(var, &op->c_spec, "batchnorm backward var"));
  PX_CHECK(px__ops_check_tensor(dscale, &op->c_spec, "batchnorm backward dscale"));
  PX_CHECK(px__ops_check_tensor(dshift, &op->c_spec, "batchnorm backward dshift"));
  PX_CHECK(px__check_ws(op, ws, "batchnorm backward ws"));
  px__cpu_enter(op->ops);
  void *ptrs[10] = {x->data,  dy->data, scale->data,  shift->data,  mean->data,
                    var->data, dx->data, dscale->data, dshift->data, op->p.fuse_relu ? ws->data : NULL};
  return px__exec_run(op->ops, &op->bwd, ptrs);
}
