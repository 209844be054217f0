/* Fully connected layer (oneDNN inner product), forward and backward. The
 * source keeps the input's layout, so the blocked [N, C, 1, 1] output of
 * global average pooling feeds it with no conversion; the output is plain
 * [N, out] for the loss. The caller's weights are plain [out, C*H*W], which
 * for a 4-D source is the same memory as plain OIHW; oneDNN's preferred
 * weight layout is reached through the context's weight buffer as for
 * convolution, by the part every layer with weights shares (cpu_wlayer.c). */
#include <stddef.h>

#include "nn/cpu/px_cpu_int.h"
#include "prunex/ops_internal.h"

struct px_fc {
  px__ops_head_t head; /* first, the contract second: the dispatcher reads both */
  px__cpu_wlayer_t l; /* x: [N, C] or [N, C, H, W] in the input's layout; y: [N, out] plain;
                         w: [out, C*H*W] plain; b: [out] */
  px_ops_t *ops;
  px_fc_params_t p;
};
_Static_assert(offsetof(struct px_fc, l.wl) == offsetof(px__wlayer_op_t, wl),
               "the dispatcher reads the contract at px__wlayer_op_t's offset");

void px__cpu_fc_destroy(px_fc_t *op) {
  if (!op) return;
  px__cpu_wlayer_destroy(&op->l);
  if (op->ops) px__cpu_op_died(op->ops);
  px_free(op);
}

/* The inner product's descriptors and specs (px__cpu_wlayer_pds_fn). */
static px_status_t px__fc_pds(px_ops_t *ops, px__cpu_wlayer_t *l, const void *params,
                              dnnl_primitive_desc_t pd[PX__WL_NPD], dnnl_memory_desc_t *w_plain) {
  const px_fc_params_t *p = params;
  const px_tensor_t *x_spec = &l->wl.x_spec;
  const int nd = x_spec->ndim;
  int64_t in = 1;
  for (int i = 1; i < nd; i++) in *= x_spec->dims[i];
  const int64_t ydims[2] = {x_spec->dims[0], p->out_features}, bdims[1] = {p->out_features};
  const int64_t wdims[2] = {p->out_features, in};
  PX_CHECK(px_tensor_init(&l->wl.y_spec, ops->device, PX_DTYPE_F32, 2, ydims));
  PX_CHECK(px_tensor_init(&l->wl.w_spec, ops->device, PX_DTYPE_F32, 2, wdims));
  PX_CHECK(px_tensor_init(&l->wl.b_spec, ops->device, PX_DTYPE_F32, 1, bdims));
  /* oneDNN's weights have the source's rank: [out, C] or [out, C, H, W]. */
  int64_t wd4[4] = {p->out_features, 1, 1, 1};
  for (int i = 1; i < nd; i++) wd4[i] = x_spec->dims[i];
  dnnl_dims_t wd = {wd4[0], wd4[1], wd4[2], wd4[3]};
  dnnl_memory_desc_t x_md, y_md, b_md, w_any;
  PX_CHECK(px__cpu_md_of(ops, x_spec, &x_md));
  PX_CHECK(px__cpu_plain_md(&y_md, 2, ydims, PX_DTYPE_F32));
  PX_CHECK(px__cpu_plain_md(&b_md, 1, bdims, PX_DTYPE_F32));
  PX_CHECK(px__cpu_plain_md(w_plain, nd, wd4, PX_DTYPE_F32));
  PX_DNNL(dnnl_memory_desc_init_by_tag(&w_any, nd, wd, dnnl_f32, dnnl_format_tag_any));
  const dnnl_memory_desc_t *bias = p->bias ? &b_md : NULL;
  /* a classifier head (ResNet-20: 128 x 64 in, 10 out) is a few microseconds of work */
  l->serial = (px_tensor_numel(x_spec) + (size_t)in * (size_t)p->out_features +
               (size_t)ydims[0] * (size_t)p->out_features) * sizeof(float) <= PX__SERIAL_BYTES;

  dnnl_inner_product_desc_t id;
  PX_DNNL(dnnl_inner_product_forward_desc_init(&id, dnnl_forward_training, &x_md, &w_any, bias,
                                               &y_md));
  PX_CHECK(px__cpu_pd_create(ops, &pd[PX__WL_FWD], &id, NULL, NULL, "inner product forward"));
  PX_DNNL(dnnl_inner_product_backward_data_desc_init(&id, &x_md, &w_any, &y_md));
  PX_CHECK(px__cpu_pd_create(ops, &pd[PX__WL_BWD_D], &id, NULL, pd[PX__WL_FWD],
                             "inner product backward data"));
  PX_DNNL(dnnl_inner_product_backward_weights_desc_init(&id, &x_md, &w_any, bias, &y_md));
  return px__cpu_pd_create(ops, &pd[PX__WL_BWD_W], &id, NULL, pd[PX__WL_FWD],
                           "inner product backward weights");
}

px_status_t px__cpu_fc_create(px_ops_t *ops, const px_tensor_t *x_spec, const px_fc_params_t *p,
                              px_fc_t **out) {
  PX_REQUIRE(out && p, "px_fc_create: NULL argument");
  *out = NULL;
  PX_CHECK(px__cpu_check_input(ops, x_spec, 2, 4, "px_fc_create"));
  PX_REQUIRE(x_spec->ndim != 3, "px_fc_create: input must be [N, C] or [N, C, H, W]");
  PX_REQUIRE(p->out_features > 0, "px_fc_create: out_features %d", p->out_features);
  px__cpu_enter(ops);
  px_fc_t *op = px__cpu_op_new(ops, sizeof *op, "px_fc");
  if (!op) return PX_ERR_NOMEM;
  op->ops = ops;
  op->p = *p;
  px__wlayer_init(&op->l.wl, "fc", "layer", p->bias, x_spec);
  px_status_t st = px__cpu_wlayer_create(ops, &op->l, px__fc_pds, p);
  if (st != PX_OK) {
    px__cpu_fc_destroy(op);
    return st;
  }
  *out = op;
  return PX_OK;
}

px_status_t px__cpu_fc_forward(px_fc_t *op, px_tensor_t *y, const px_tensor_t *x, const px_tensor_t *w,
                               const px_tensor_t *b) {
  return px__cpu_wlayer_forward(op->ops, &op->l, y, x, w, b);
}

px_status_t px__cpu_fc_backward_data(px_fc_t *op, px_tensor_t *dx, const px_tensor_t *dy,
                                     const px_tensor_t *w) {
  return px__cpu_wlayer_backward_data(op->ops, &op->l, dx, dy, w);
}

px_status_t px__cpu_fc_backward_weights(px_fc_t *op, px_tensor_t *dw, px_tensor_t *db,
                                        const px_tensor_t *x, const px_tensor_t *dy) {
  return px__cpu_wlayer_backward_weights(op->ops, &op->l, dw, db, x, dy);
}
