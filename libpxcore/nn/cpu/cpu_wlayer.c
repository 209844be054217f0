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

/* A bf16 layer's conversions of its f32 input and output gradient, the
 * buffer that keeps the forward's bf16 input, and the shared buffer of the
 * bf16 output gradient. The backward-weights primitive was made with the
 * forward's source layout, so x_lp serves both. */
static px_status_t px__wlayer_lowp_execs(px_ops_t *ops, px__cpu_wlayer_t *l,
                                         dnnl_primitive_desc_t const pd[PX__WL_NPD]) {
  dnnl_memory_desc_t x_md;
  PX_CHECK(px__cpu_md_of(ops, &l->wl.x_spec, &x_md));
  const dnnl_memory_desc_t *x_lp = px__cpu_pd_md(pd[PX__WL_FWD], DNNL_ARG_SRC);
  const dnnl_memory_desc_t *y_md = px__cpu_pd_md(pd[PX__WL_FWD], DNNL_ARG_DST);
  const dnnl_memory_desc_t *dy_d = px__cpu_pd_md(pd[PX__WL_BWD_D], DNNL_ARG_DIFF_DST);
  const dnnl_memory_desc_t *dy_w = px__cpu_pd_md(pd[PX__WL_BWD_W], DNNL_ARG_DIFF_DST);
  if (!dnnl_memory_desc_equal(x_lp, px__cpu_pd_md(pd[PX__WL_BWD_W], DNNL_ARG_SRC)))
    return px_set_error(PX_ERR_INTERNAL, "%s: bf16 backward weights wants another source layout "
                        "than the forward", l->wl.name);
  PX_CHECK(px__exec_create_reorder(ops, &l->x_cvt, &x_md, x_lp));
  PX_CHECK(px__exec_create_reorder(ops, &l->dy_cvt_d, y_md, dy_d));
  PX_CHECK(px__exec_create_reorder(ops, &l->dy_cvt_w, y_md, dy_w));
  l->x_lp = px_malloc_aligned(dnnl_memory_desc_get_size(x_lp), "bf16 layer input");
  if (!l->x_lp) return PX_ERR_NOMEM;
  size_t need = dnnl_memory_desc_get_size(dy_d);
  if (dnnl_memory_desc_get_size(dy_w) > need) need = dnnl_memory_desc_get_size(dy_w);
  return px__cpu_grow_shared(&ops->lpscratch, &ops->lpscratch_bytes, need, "bf16 gradient scratch");
}

/* An f32 layer whose primitives take the source in their own layout
 * (l->xcvt): the conversions of x into it and of the input gradient back,
 * the buffer of the converted x (kept for the backward weights of the same
 * step) and room for the gradient in the shared scratch. */
static px_status_t px__wlayer_xcvt_execs(px_ops_t *ops, px__cpu_wlayer_t *l,
                                         dnnl_primitive_desc_t const pd[PX__WL_NPD]) {
  dnnl_memory_desc_t x_md;
  PX_CHECK(px__cpu_md_of(ops, &l->wl.x_spec, &x_md));
  const dnnl_memory_desc_t *x_pd = px__cpu_pd_md(pd[PX__WL_FWD], DNNL_ARG_SRC);
  const dnnl_memory_desc_t *dx_pd = px__cpu_pd_md(pd[PX__WL_BWD_D], DNNL_ARG_DIFF_SRC);
  if (!dnnl_memory_desc_equal(x_pd, px__cpu_pd_md(pd[PX__WL_BWD_W], DNNL_ARG_SRC)))
    return px_set_error(PX_ERR_INTERNAL, "%s: backward weights wants another source layout "
                        "than the forward", l->wl.name);
  PX_CHECK(px__exec_create_reorder(ops, &l->x_cvt, &x_md, x_pd));
  PX_CHECK(px__exec_create_reorder(ops, &l->dx_cvt, dx_pd, &x_md));
  l->x_lp = px_malloc_aligned(dnnl_memory_desc_get_size(x_pd), "layer input (converted)");
  if (!l->x_lp) return PX_ERR_NOMEM;
  return px__cpu_grow_shared(&ops->lpscratch, &ops->lpscratch_bytes,
                             dnnl_memory_desc_get_size(dx_pd), "input gradient scratch");
}

/* An f32 layer whose backward data alone writes another layout than x's
 * (l->dxcvt): the conversion of the input gradient back into x's. The
 * scratch it is written into grows at the first backward data
 * (px__cpu_wlayer_backward_data). */
static px_status_t px__wlayer_dxcvt_exec(px_ops_t *ops, px__cpu_wlayer_t *l,
                                         dnnl_primitive_desc_t const pd[PX__WL_NPD]) {
  dnnl_memory_desc_t x_md;
  PX_CHECK(px__cpu_md_of(ops, &l->wl.x_spec, &x_md));
  return px__exec_create_reorder(ops, &l->dx_cvt, px__cpu_pd_md(pd[PX__WL_BWD_D],
                                                               DNNL_ARG_DIFF_SRC), &x_md);
}

px_status_t px__cpu_wlayer_create(px_ops_t *ops, px__cpu_wlayer_t *l, px__cpu_wlayer_pds_fn pds,
                                  const void *params) {
  dnnl_primitive_desc_t pd[PX__WL_NPD] = {NULL, NULL, NULL};
  dnnl_memory_desc_t w_plain;
  px_status_t st = pds(ops, l, params, pd, &w_plain);
  if (st == PX_OK) st = px__wlayer_execs(ops, l, pd, &w_plain);
  if (st == PX_OK && l->lowp) st = px__wlayer_lowp_execs(ops, l, pd);
  if (st == PX_OK && l->xcvt) st = px__wlayer_xcvt_execs(ops, l, pd);
  if (st == PX_OK && l->dxcvt) st = px__wlayer_dxcvt_exec(ops, l, pd);
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
  px__exec_destroy(&l->x_cvt);
  px__exec_destroy(&l->dy_cvt_d);
  px__exec_destroy(&l->dy_cvt_w);
  px__exec_destroy(&l->dx_cvt);
  px_free(l->x_lp);
  l->x_lp = NULL;
}

/* The source a primitive reads: x itself, or (bf16 layers, xcvt) x
 * converted into x_lp, which the backward weights of the step reuse. */
static px_status_t px__wlayer_src(px_ops_t *ops, px__cpu_wlayer_t *l, const px_tensor_t *x,
                                  int convert, void **out) {
  *out = x->data;
  if (!l->lowp && !l->xcvt) return PX_OK;
  if (convert || l->x_lp_of != x->data) {
    void *ptrs[2] = {x->data, l->x_lp};
    PX_CHECK(px__exec_run(ops, &l->x_cvt, ptrs));
    l->x_lp_of = x->data;
  }
  *out = l->x_lp;
  return PX_OK;
}

/* The output gradient a backward primitive reads: dy itself, or (bf16
 * layers) dy converted by cvt into the shared bf16 scratch. */
static px_status_t px__wlayer_dy(px_ops_t *ops, px__cpu_wlayer_t *l, px__exec_t *cvt,
                                 const px_tensor_t *dy, void **out) {
  *out = dy->data;
  if (!l->lowp) return PX_OK;
  void *ptrs[2] = {dy->data, ops->lpscratch};
  PX_CHECK(px__exec_run(ops, cvt, ptrs));
  *out = ops->lpscratch;
  return PX_OK;
}

px_status_t px__cpu_wlayer_forward(px_ops_t *ops, px__cpu_wlayer_t *l, px_tensor_t *y,
                                   const px_tensor_t *x, const px_tensor_t *w,
                                   const px_tensor_t *b) {
  PX_CHECK(px__wlayer_check_forward(&l->wl, y, x, w, b));
  px__cpu_enter(ops);
  void *wp;
  PX_CHECK(px__wbuf_in(ops, &l->w_fwd, w, &wp));
  void *xp;
  PX_CHECK(px__wlayer_src(ops, l, x, 1, &xp));
  void *ptrs[4] = {xp, wp, y->data, b ? b->data : NULL};
  px__cpu_warn_ref(ops, l->ref_fwd, "convolution forward");
  return px__exec_run(ops, &l->fwd, ptrs);
}

px_status_t px__cpu_wlayer_backward_data(px_ops_t *ops, px__cpu_wlayer_t *l, px_tensor_t *dx,
                                         const px_tensor_t *dy, const px_tensor_t *w) {
  PX_CHECK(px__wlayer_check_backward_data(&l->wl, dx, dy, w));
  px__cpu_enter(ops);
  void *wp;
  PX_CHECK(px__wbuf_in(ops, &l->w_bwd, w, &wp));
  void *dyp;
  PX_CHECK(px__wlayer_dy(ops, l, &l->dy_cvt_d, dy, &dyp));
  if (l->dxcvt) /* once: a layer whose backward data never runs (the first) holds none */
    PX_CHECK(px__cpu_grow_shared(&ops->lpscratch, &ops->lpscratch_bytes, l->dx_bytes,
                                 "input gradient scratch"));
  const int cvt = l->xcvt || l->dxcvt;
  void *ptrs[3] = {dyp, wp, cvt ? ops->lpscratch : dx->data};
  px__cpu_warn_ref(ops, l->ref_bwd_d, "convolution backward data");
  PX_CHECK(px__exec_run(ops, &l->bwd_d, ptrs));
  if (!cvt) return PX_OK;
  void *back[2] = {ops->lpscratch, dx->data};
  return px__exec_run(ops, &l->dx_cvt, back);
}

px_status_t px__cpu_wlayer_backward_weights(px_ops_t *ops, px__cpu_wlayer_t *l, px_tensor_t *dw,
                                            px_tensor_t *db, const px_tensor_t *x,
                                            const px_tensor_t *dy) {
  PX_CHECK(px__wlayer_check_backward_weights(&l->wl, dw, db, x, dy));
  px__cpu_enter(ops);
  void *xp, *dyp;
  PX_CHECK(px__wlayer_src(ops, l, x, 0, &xp)); /* the forward's conversion when x is its input */
  PX_CHECK(px__wlayer_dy(ops, l, &l->dy_cvt_w, dy, &dyp));
  void *ptrs[4] = {xp, dyp, px__wbuf_target(ops, &l->dw, dw), db ? db->data : NULL};
  px__cpu_warn_ref(ops, l->ref_bwd_w, "convolution backward weights");
  PX_CHECK(px__exec_run(ops, &l->bwd_w, ptrs));
  return px__wbuf_out(ops, &l->dw, dw);
}
