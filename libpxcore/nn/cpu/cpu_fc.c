/* Fully connected layer (oneDNN inner product), forward and backward. The
 * source keeps the input's layout, so the blocked [N, C, 1, 1] output of
 * global average pooling feeds it with no conversion; the output is plain
 * [N, out] for the loss. The caller's weights are plain [out, C*H*W], which
 * for a 4-D source is the same memory as plain OIHW; oneDNN's preferred
 * weight layout is reached through an op-owned buffer as for convolution. */
#include <string.h>

#include "nn/cpu/px_cpu_int.h"

struct px_fc {
  px__ops_head_t head; /* first: the dispatcher reads it */
  px_ops_t *ops;
  px_fc_params_t p;
  px_tensor_t x_spec; /* [N, C] or [N, C, H, W], layout of the input */
  px_tensor_t y_spec; /* [N, out] plain */
  px_tensor_t w_spec; /* [out, C*H*W] plain */
  px_tensor_t b_spec; /* [out] plain */
  px__exec_t fwd;     /* SRC, WEIGHTS, DST, [BIAS] */
  px__exec_t bwd_d;   /* DIFF_DST, WEIGHTS, DIFF_SRC */
  px__exec_t bwd_w;   /* SRC, DIFF_DST, DIFF_WEIGHTS, [DIFF_BIAS] */
  px__wbuf_t w_fwd, w_bwd, dw;
};

void px__cpu_fc_destroy(px_fc_t *op) {
  if (!op) return;
  px__exec_destroy(&op->fwd);
  px__exec_destroy(&op->bwd_d);
  px__exec_destroy(&op->bwd_w);
  px__wbuf_destroy(&op->w_fwd);
  px__wbuf_destroy(&op->w_bwd);
  px__wbuf_destroy(&op->dw);
  if (op->ops) px__cpu_op_died(op->ops);
  px_free(op);
}

px_status_t px__cpu_fc_create(px_ops_t *ops, const px_tensor_t *x_spec, const px_fc_params_t *p,
                              px_fc_t **out) {
  PX_REQUIRE(out && p, "px_fc_create: NULL argument");
  *out = NULL;
  PX_CHECK(px__cpu_check_input(ops, x_spec, 2, 4, "px_fc_create"));
  PX_REQUIRE(x_spec->ndim != 3, "px_fc_create: input must be [N, C] or [N, C, H, W]");
  PX_REQUIRE(p->out_features > 0, "px_fc_create: out_features %d", p->out_features);
  const int nd = x_spec->ndim;
  const int64_t n = x_spec->dims[0];
  int64_t in = 1;
  for (int i = 1; i < nd; i++) in *= x_spec->dims[i];

  px__cpu_enter(ops);
  px_status_t st = PX_OK;
  dnnl_primitive_desc_t fwd_pd = NULL, bwd_d_pd = NULL, bwd_w_pd = NULL;
  px_fc_t *op = px_calloc(1, sizeof *op, "px_fc");
  if (!op) return PX_ERR_NOMEM;
  op->head.be = &px__cpu_backend;
  op->ops = ops;
  px__cpu_op_born(ops);
  op->p = *p;
  op->x_spec = *x_spec;
  op->x_spec.data = NULL;
  op->x_spec.flags = 0;
  const int64_t ydims[2] = {n, p->out_features}, wdims[2] = {p->out_features, in};
  const int64_t bdims[1] = {p->out_features};
  PX_CHECK_GOTO(px_tensor_init(&op->y_spec, ops->device, PX_DTYPE_F32, 2, ydims), st, fail);
  PX_CHECK_GOTO(px_tensor_init(&op->w_spec, ops->device, PX_DTYPE_F32, 2, wdims), st, fail);
  PX_CHECK_GOTO(px_tensor_init(&op->b_spec, ops->device, PX_DTYPE_F32, 1, bdims), st, fail);

  /* Weights have the source's rank: [out, C] or [out, C, H, W]. */
  int64_t wd4[4] = {p->out_features, 1, 1, 1};
  for (int i = 1; i < nd; i++) wd4[i] = x_spec->dims[i];
  dnnl_dims_t wd = {wd4[0], wd4[1], wd4[2], wd4[3]};
  dnnl_memory_desc_t x_md, y_md, b_md, w_plain, w_any;
  PX_CHECK_GOTO(px__cpu_md_of(ops, x_spec, &x_md), st, fail);
  PX_CHECK_GOTO(px__cpu_plain_md(&y_md, 2, ydims, PX_DTYPE_F32), st, fail);
  PX_CHECK_GOTO(px__cpu_plain_md(&b_md, 1, bdims, PX_DTYPE_F32), st, fail);
  PX_CHECK_GOTO(px__cpu_plain_md(&w_plain, nd, wd4, PX_DTYPE_F32), st, fail);
  PX_DNNL_GOTO(dnnl_memory_desc_init_by_tag(&w_any, nd, wd, dnnl_f32, dnnl_format_tag_any), st, fail);

  dnnl_inner_product_desc_t id;
  PX_DNNL_GOTO(dnnl_inner_product_forward_desc_init(&id, dnnl_forward_training, &x_md, &w_any,
                                                    p->bias ? &b_md : NULL, &y_md),
               st, fail);
  PX_CHECK_GOTO(px__cpu_pd_create(ops, &fwd_pd, &id, NULL, NULL, "inner product forward"), st, fail);
  {
    const int fa[] = {DNNL_ARG_SRC, DNNL_ARG_WEIGHTS, DNNL_ARG_DST, DNNL_ARG_BIAS};
    PX_CHECK_GOTO(px__exec_create(ops, &op->fwd, fwd_pd, fa, p->bias ? 4 : 3), st, fail);
  }
  PX_CHECK_GOTO(px__wbuf_create(ops, &op->w_fwd, &w_plain, px__cpu_pd_md(fwd_pd, DNNL_ARG_WEIGHTS), 1),
                st, fail);

  PX_DNNL_GOTO(dnnl_inner_product_backward_data_desc_init(&id, &x_md, &w_any, &y_md), st, fail);
  PX_CHECK_GOTO(px__cpu_pd_create(ops, &bwd_d_pd, &id, NULL, fwd_pd, "inner product backward data"),
                st, fail);
  {
    const int ba[] = {DNNL_ARG_DIFF_DST, DNNL_ARG_WEIGHTS, DNNL_ARG_DIFF_SRC};
    PX_CHECK_GOTO(px__exec_create(ops, &op->bwd_d, bwd_d_pd, ba, 3), st, fail);
  }
  PX_CHECK_GOTO(
      px__wbuf_create(ops, &op->w_bwd, &w_plain, px__cpu_pd_md(bwd_d_pd, DNNL_ARG_WEIGHTS), 1), st,
      fail);

  PX_DNNL_GOTO(dnnl_inner_product_backward_weights_desc_init(&id, &x_md, &w_any,
                                                             p->bias ? &b_md : NULL, &y_md),
               st, fail);
  PX_CHECK_GOTO(
      px__cpu_pd_create(ops, &bwd_w_pd, &id, NULL, fwd_pd, "inner product backward weights"), st,
      fail);
  {
    const int wa[] = {DNNL_ARG_SRC, DNNL_ARG_DIFF_DST, DNNL_ARG_DIFF_WEIGHTS, DNNL_ARG_DIFF_BIAS};
    PX_CHECK_GOTO(px__exec_create(ops, &op->bwd_w, bwd_w_pd, wa, p->bias ? 4 : 3), st, fail);
  }
  PX_CHECK_GOTO(
      px__wbuf_create(ops, &op->dw, &w_plain, px__cpu_pd_md(bwd_w_pd, DNNL_ARG_DIFF_WEIGHTS), 0), st,
      fail);

  dnnl_primitive_desc_destroy(fwd_pd);
  dnnl_primitive_desc_destroy(bwd_d_pd);
  dnnl_primitive_desc_destroy(bwd_w_pd);
  *out = op;
  return PX_OK;
fail:
  if (fwd_pd) dnnl_primitive_desc_destroy(fwd_pd);
  if (bwd_d_pd) dnnl_primitive_desc_destroy(bwd_d_pd);
  if (bwd_w_pd) dnnl_primitive_desc_destroy(bwd_w_pd);
  px__cpu_fc_destroy(op);
  return st;
}

void px__cpu_fc_y_spec(const px_fc_t *op, px_tensor_t *spec) { *spec = op->y_spec; }
void px__cpu_fc_w_spec(const px_fc_t *op, px_tensor_t *spec) { *spec = op->w_spec; }
void px__cpu_fc_b_spec(const px_fc_t *op, px_tensor_t *spec) { *spec = op->b_spec; }

px_status_t px__cpu_fc_forward(px_fc_t *op, px_tensor_t *y, const px_tensor_t *x, const px_tensor_t *w,
                               const px_tensor_t *b) {
  PX_CHECK(px__cpu_check(x, &op->x_spec, "fc forward x"));
  PX_CHECK(px__cpu_check(w, &op->w_spec, "fc forward w"));
  PX_CHECK(px__cpu_check(y, &op->y_spec, "fc forward y"));
  if (op->p.bias)
    PX_CHECK(px__cpu_check(b, &op->b_spec, "fc forward b"));
  else
    PX_REQUIRE(b == NULL, "fc forward: bias given to a layer without bias");
  px__cpu_enter(op->ops);
  void *wp;
  PX_CHECK(px__wbuf_in(op->ops, &op->w_fwd, w, &wp));
  void *ptrs[4] = {x->data, wp, y->data, b ? b->data : NULL};
  return px__exec_run(op->ops, &op->fwd, ptrs);
}

px_status_t px__cpu_fc_backward_data(px_fc_t *op, px_tensor_t *dx, const px_tensor_t *dy,
                                     const px_tensor_t *w) {
  PX_CHECK(px__cpu_check(dy, &op->y_spec, "fc backward dy"));
  PX_CHECK(px__cpu_check(w, &op->w_spec, "fc backward w"));
  PX_CHECK(px__cpu_check(dx, &op->x_spec, "fc backward dx"));
  px__cpu_enter(op->ops);
  void *wp;
  PX_CHECK(px__wbuf_in(op->ops, &op->w_bwd, w, &wp));
  void *ptrs[3] = {dy->data, wp, dx->data};
  return px__exec_run(op->ops, &op->bwd_d, ptrs);
}

px_status_t px__cpu_fc_backward_weights(px_fc_t *op, px_tensor_t *dw, px_tensor_t *db,
                                        const px_tensor_t *x, const px_tensor_t *dy) {
  PX_CHECK(px__cpu_check(x, &op->x_spec, "fc backward x"));
  PX_CHECK(px__cpu_check(dy, &op->y_spec, "fc backward dy"));
  PX_CHECK(px__cpu_check(dw, &op->w_spec, "fc backward dw"));
  if (op->p.bias)
    PX_CHECK(px__cpu_check(db, &op->b_spec, "fc backward db"));
  else
    PX_REQUIRE(db == NULL, "fc backward: bias gradient asked of a layer without bias");
  px__cpu_enter(op->ops);
  void *ptrs[4] = {x->data, dy->data, px__wbuf_target(op->ops, &op->dw, dw), db ? db->data : NULL};
  PX_CHECK(px__exec_run(op->ops, &op->bwd_w, ptrs));
  return px__wbuf_out(op->ops, &op->dw, dw);
}
