/* The half of a oneDNN layer with weights (convolution, inner product) that
 * does not depend on which primitive it is: once the layer has made its
 * three primitive descriptors (forward, backward data, backward weights),
 * this file creates their executables and the weight conversions, checks
 * each call's arguments against the layer's contract (px__wlayer_t) and runs
 * the primitive with the weights in its layout. cpu_conv.c and cpu_fc.c keep
 * only what differs: the descriptors. */
#include "nn/cpu/px_cpu_int.h"

/* The executables and weight conversions of l from its descriptors. */
static px_status_t px__wlayer_execs(px_ops_t *ops, px__cpu_wlayer_t *l,
                                    dnnl_primitive_desc_t const pd[PX__WL_NPD],
                                    const dnnl_memory_desc_t *w_plain) {
  const int nb = l->wl.bias ? 4 : 3;
  const int fa[] = {DNNL_ARG_SRC, DNNL_ARG_WEIGHTS, DNNL_ARG_DST, DNNL_ARG_BIAS};
  const int ba[] = {DNNL_ARG_DIFF_DST, DNNL_ARG_WEIGHTS, DNNL_ARG_DIFF_SRC};
  const int wa[] = {DNNL_ARG_SRC, DNNL_ARG_DIFF_DST, DNNL_ARG_DIFF_WEIGHTS, DNNL_ARG_DIFF_BIAS};
  PX_CHECK(px__exec_create(ops, &l->fwd, pd[PX__WL_FWD], fa, nb));
  PX_CHECK(px__wbuf_create(ops, &l->w_fwd, w_plain, px__cpu_pd_md(pd[PX__WL_FWD], DNNL_ARG_WEIGHTS),
                           1));
  PX_CHECK(px__exec_create(ops, &l->bwd_d, pd[PX__WL_BWD_D], ba, 3));
  PX_CHECK(px__wbuf_create(ops, &l->w_bwd, w_plain,
                           px__cpu_pd_md(pd[PX__WL_BWD_D], DNNL_ARG_WEIGHTS), 1));
  PX_CHECK(px__exec_create(ops, &l->bwd_w, pd[PX__WL_BWD_W], wa, nb));
  l->fwd.serial = l->bwd_d.serial = l->bwd_w.serial = l->serial;
  return px__wbuf_create(ops, &l->dw, w_plain,
                         px__cpu_pd_md(pd[PX__WL_BWD_W], DNNL_ARG_DIFF_WEIGHTS), 0);
}

px_status_t px__cpu_wlayer_create(px_ops_t *ops, px__cpu_wlayer_t *l, px__cpu_wlayer_pds_fn pds,
                                  const void *params) {
  dnnl_primitive_desc_t pd[PX__WL_NPD] = {NULL, NULL, NULL};
  dnnl_memory_desc_t w_plain;
  px_status_t st = pds(ops, l, params, pd, &w_plain);
  if (st == PX_OK) st = px__wlayer_execs(ops, l, pd, &w_plain);
  for (int i = 0; i < PX__WL_NPD; i++)
    if (pd[i]) dnnl_primitive_desc_destroy(pd[i]);
  return st;
}

void px__cpu_wlayer_destroy(px__cpu_wlayer_t *l) {
  px__exec_destroy(&l->fwd);
  px__exec_destroy(&l->bwd_d);
  px__exec_destroy(&l->bwd_w);
  px__wbuf_destroy(&l->w_fwd);
  px__wbuf_destroy(&l->w_bwd);
  px__wbuf_destroy(&l->dw);
}

px_status_t px__cpu_wlayer_forward(px_ops_t *ops, px__cpu_wlayer_t *l, px_tensor_t *y,
                                   const px_tensor_t *x, const px_tensor_t *w,
                                   const px_tensor_t *b) {
  PX_CHECK(px__wlayer_check_forward(&l->wl, y, x, w, b));
  px__cpu_enter(ops);
  void *wp;
  PX_CHECK(px__wbuf_in(ops, &l->w_fwd, w, &wp));
  void *ptrs[4] = {x->data, wp, y->data, b ? b->data : NULL};
  return px__exec_run(ops, &l->fwd, ptrs);
}

px_status_t px__cpu_wlayer_backward_data(px_ops_t *ops, px__cpu_wlayer_t *l, px_tensor_t *dx,
                                         const px_tensor_t *dy, const px_tensor_t *w) {
  PX_CHECK(px__wlayer_check_backward_data(&l->wl, dx, dy, w));
  px__cpu_enter(ops);
  void *wp;
  PX_CHECK(px__wbuf_in(ops, &l->w_bwd, w, &wp));
  void *ptrs[3] = {dy->data, wp, dx->data};
  return px__exec_run(ops, &l->bwd_d, ptrs);
}

px_status_t px__cpu_wlayer_backward_weights(px_ops_t *ops, px__cpu_wlayer_t *l, px_tensor_t *dw,
                                            px_tensor_t *db, const px_tensor_t *x,
                                            const px_tensor_t *dy) {
  PX_CHECK(px__wlayer_check_backward_weights(&l->wl, dw, db, x, dy));
  px__cpu_enter(ops);
  void *ptrs[4] = {x->data, dy->data, px__wbuf_target(ops, &l->dw, dw), db ? db->data : NULL};
  PX_CHECK(px__exec_run(ops, &l->bwd_w, ptrs));
  return px__wbuf_out(ops, &l->dw, dw);
}
