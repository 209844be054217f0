/* 2-D convolution on oneDNN: forward, backward-data and backward-weights
 * primitives created once per layer shape and reused every step.
 *
 * Layouts: the source keeps the layout of the tensor the layer receives
 * (blocked from a previous layer, plain NCHW at the network input, where
 * oneDNN has dedicated first-layer kernels); the destination and the weights
 * are dnnl_format_tag_any so oneDNN picks its blocked formats. Gradients of
 * activations use their activation's descriptor, so the backward primitives
 * read and write the same layouts as the forward. The caller's weights and
 * weight gradients stay plain OIHW; each call converts them through a
 * buffer owned by the op (weights are small next to activations, and this is
 * what keeps the optimiser and pruning working on plain arrays). */
#include <string.h>

#include "nn/cpu/px_cpu_int.h"

struct px_conv2d {
  px__ops_head_t head; /* first: the dispatcher reads it */
  px_ops_t *ops;
  px_conv2d_params_t p;
  px_tensor_t x_spec; /* [N, C_in, H, W], layout of the input */
  px_tensor_t y_spec; /* [N, C_out, OH, OW], layout chosen by oneDNN */
  px_tensor_t w_spec; /* [C_out, C_in, KH, KW] plain */
  px_tensor_t b_spec; /* [C_out] plain */
  px__exec_t fwd;     /* SRC, WEIGHTS, [BIAS], DST */
  px__exec_t bwd_d;   /* DIFF_DST, WEIGHTS, DIFF_SRC */
  px__exec_t bwd_w;   /* SRC, DIFF_DST, DIFF_WEIGHTS, [DIFF_BIAS] */
  px__wbuf_t w_fwd;   /* plain weights -> forward layout */
  px__wbuf_t w_bwd;   /* plain weights -> backward-data layout */
  px__wbuf_t dw;      /* weight gradient layout -> plain */
};

void px__cpu_conv2d_destroy(px_conv2d_t *op) {
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

static int64_t px__out_dim(int64_t in, int32_t k, int32_t s, int32_t pad) {
  int64_t span = in + 2 * (int64_t)pad - k;
  return span < 0 ? 0 : span / s + 1;
}

/* The weights' plain and primitive-chosen descriptors. Grouped: oneDNN's
 * weights are [g, c_out/g, c_in/g, kh, kw], the same bytes as the plain
 * [c_out, c_in/g, kh, kw] the caller holds. */
static px_status_t px__weight_mds(const px_conv2d_params_t *p, int64_t c_in, int64_t g,
                                  dnnl_memory_desc_t *plain, dnnl_memory_desc_t *any) {
  dnnl_dims_t wd = {p->c_out, c_in, p->kh, p->kw}, gwd = {g, p->c_out / g, c_in / g, p->kh, p->kw};
  const int64_t wdims[4] = {p->c_out, c_in / g, p->kh, p->kw};
  if (g > 1) PX_DNNL(dnnl_memory_desc_init_by_tag(plain, 5, gwd, dnnl_f32, dnnl_goihw));
  else PX_CHECK(px__cpu_plain_md(plain, 4, wdims, PX_DTYPE_F32));
  PX_DNNL(dnnl_memory_desc_init_by_tag(any, g > 1 ? 5 : 4, g > 1 ? gwd : wd, dnnl_f32,
                                       dnnl_format_tag_any));
  return PX_OK;
}

px_status_t px__cpu_conv2d_create(px_ops_t *ops, const px_tensor_t *x_spec, const px_conv2d_params_t *p,
                                  px_conv2d_t **out) {
  PX_REQUIRE(out && p, "px_conv2d_create: NULL argument");
  *out = NULL;
  PX_CHECK(px__cpu_check_input(ops, x_spec, 4, 4, "px_conv2d_create"));
  PX_REQUIRE(p->c_out > 0 && p->kh > 0 && p->kw > 0 && p->stride_h > 0 && p->stride_w > 0 &&
                 p->pad_h >= 0 && p->pad_w >= 0,
             "px_conv2d_create: bad parameters (c_out %d, kernel %dx%d, stride %dx%d, pad %dx%d)",
             p->c_out, p->kh, p->kw, p->stride_h, p->stride_w, p->pad_h, p->pad_w);
  const int64_t n = x_spec->dims[0], c_in = x_spec->dims[1], g = p->groups > 1 ? p->groups : 1;
  PX_REQUIRE(p->groups >= 0 && c_in % g == 0 && p->c_out % g == 0,
             "px_conv2d_create: %lld input and %d output channels in %lld groups",
             (long long)c_in, p->c_out, (long long)g);
  const int64_t oh = px__out_dim(x_spec->dims[2], p->kh, p->stride_h, p->pad_h);
  const int64_t ow = px__out_dim(x_spec->dims[3], p->kw, p->stride_w, p->pad_w);
  PX_REQUIRE(oh > 0 && ow > 0, "px_conv2d_create: kernel larger than the padded input");

  px__cpu_enter(ops);
  px_status_t st = PX_OK;
  dnnl_primitive_desc_t fwd_pd = NULL, bwd_d_pd = NULL, bwd_w_pd = NULL;
  px_conv2d_t *op = px_calloc(1, sizeof *op, "px_conv2d");
  if (!op) return PX_ERR_NOMEM;
  op->head.be = &px__cpu_backend;
  op->ops = ops;
  px__cpu_op_born(ops);
  op->p = *p;
  op->x_spec = *x_spec;
  op->x_spec.data = NULL;
  op->x_spec.flags = 0;

  dnnl_memory_desc_t x_md, w_plain, w_any, b_md, y_any;
  const int64_t wdims[4] = {p->c_out, c_in / g, p->kh, p->kw};
  const int64_t bdims[1] = {p->c_out};
  dnnl_dims_t ydims = {n, p->c_out, oh, ow};
  dnnl_dims_t strides = {p->stride_h, p->stride_w}, pad = {p->pad_h, p->pad_w};
  PX_CHECK_GOTO(px__cpu_md_of(ops, x_spec, &x_md), st, fail);
  PX_CHECK_GOTO(px__weight_mds(p, c_in, g, &w_plain, &w_any), st, fail);
  PX_CHECK_GOTO(px__cpu_plain_md(&b_md, 1, bdims, PX_DTYPE_F32), st, fail);
  PX_DNNL_GOTO(dnnl_memory_desc_init_by_tag(&y_any, 4, ydims, dnnl_f32, dnnl_format_tag_any), st,
               fail);
  PX_CHECK_GOTO(px_tensor_init(&op->w_spec, ops->device, PX_DTYPE_F32, 4, wdims), st, fail);
  PX_CHECK_GOTO(px_tensor_init(&op->b_spec, ops->device, PX_DTYPE_F32, 1, bdims), st, fail);

  /* forward */
  dnnl_convolution_desc_t cd;
  PX_DNNL_GOTO(dnnl_convolution_forward_desc_init(&cd, dnnl_forward_training,
                                                  dnnl_convolution_direct, &x_md, &w_any,
                                                  p->bias ? &b_md : NULL, &y_any, strides, pad, pad),
               st, fail);
  PX_CHECK_GOTO(px__cpu_pd_create(ops, &fwd_pd, &cd, NULL, NULL, "convolution forward"), st, fail);
  const dnnl_memory_desc_t y_md = *px__cpu_pd_md(fwd_pd, DNNL_ARG_DST);
  PX_CHECK_GOTO(px__cpu_spec_of(ops, &y_md, &op->y_spec), st, fail);
  {
    const int fa[] = {DNNL_ARG_SRC, DNNL_ARG_WEIGHTS, DNNL_ARG_DST, DNNL_ARG_BIAS};
    PX_CHECK_GOTO(px__exec_create(ops, &op->fwd, fwd_pd, fa, p->bias ? 4 : 3), st, fail);
  }
  PX_CHECK_GOTO(px__wbuf_create(ops, &op->w_fwd, &w_plain, px__cpu_pd_md(fwd_pd, DNNL_ARG_WEIGHTS), 1),
                st, fail);

  /* backward data: dx in the layout of x, dy in the layout of y */
  PX_DNNL_GOTO(dnnl_convolution_backward_data_desc_init(&cd, dnnl_convolution_direct, &x_md, &w_any,
                                                        &y_md, strides, pad, pad),
               st, fail);
  PX_CHECK_GOTO(px__cpu_pd_create(ops, &bwd_d_pd, &cd, NULL, fwd_pd, "convolution backward data"), st,
                fail);
  {
    const int ba[] = {DNNL_ARG_DIFF_DST, DNNL_ARG_WEIGHTS, DNNL_ARG_DIFF_SRC};
    PX_CHECK_GOTO(px__exec_create(ops, &op->bwd_d, bwd_d_pd, ba, 3), st, fail);
  }
  PX_CHECK_GOTO(
      px__wbuf_create(ops, &op->w_bwd, &w_plain, px__cpu_pd_md(bwd_d_pd, DNNL_ARG_WEIGHTS), 1), st,
      fail);

  /* backward weights */
  PX_DNNL_GOTO(dnnl_convolution_backward_weights_desc_init(&cd, dnnl_convolution_direct, &x_md,
                                                           &w_any, p->bias ? &b_md : NULL, &y_md,
                                                           strides, pad, pad),
               st, fail);
  PX_CHECK_GOTO(px__cpu_pd_create(ops, &bwd_w_pd, &cd, NULL, fwd_pd, "convolution backward weights"),
                st, fail);
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
  px__cpu_conv2d_destroy(op);
  return st;
}

void px__cpu_conv2d_y_spec(const px_conv2d_t *op, px_tensor_t *spec) { *spec = op->y_spec; }
void px__cpu_conv2d_w_spec(const px_conv2d_t *op, px_tensor_t *spec) { *spec = op->w_spec; }
void px__cpu_conv2d_b_spec(const px_conv2d_t *op, px_tensor_t *spec) { *spec = op->b_spec; }

px_status_t px__cpu_conv2d_forward(px_conv2d_t *op, px_tensor_t *y, const px_tensor_t *x,
                                   const px_tensor_t *w, const px_tensor_t *b) {
  PX_CHECK(px__cpu_check(x, &op->x_spec, "conv2d forward x"));
  PX_CHECK(px__cpu_check(w, &op->w_spec, "conv2d forward w"));
  PX_CHECK(px__cpu_check(y, &op->y_spec, "conv2d forward y"));
  if (op->p.bias)
    PX_CHECK(px__cpu_check(b, &op->b_spec, "conv2d forward b"));
  else
    PX_REQUIRE(b == NULL, "conv2d forward: bias given to a conv without bias");
  px__cpu_enter(op->ops);
  void *wp;
  PX_CHECK(px__wbuf_in(op->ops, &op->w_fwd, w, &wp));
  void *ptrs[4] = {x->data, wp, y->data, b ? b->data : NULL};
  return px__exec_run(op->ops, &op->fwd, ptrs);
}

px_status_t px__cpu_conv2d_backward_data(px_conv2d_t *op, px_tensor_t *dx, const px_tensor_t *dy,
                                         const px_tensor_t *w) {
  PX_CHECK(px__cpu_check(dy, &op->y_spec, "conv2d backward dy"));
  PX_CHECK(px__cpu_check(w, &op->w_spec, "conv2d backward w"));
  PX_CHECK(px__cpu_check(dx, &op->x_spec, "conv2d backward dx"));
  px__cpu_enter(op->ops);
  void *wp;
  PX_CHECK(px__wbuf_in(op->ops, &op->w_bwd, w, &wp));
  void *ptrs[3] = {dy->data, wp, dx->data};
  return px__exec_run(op->ops, &op->bwd_d, ptrs);
}

px_status_t px__cpu_conv2d_backward_weights(px_conv2d_t *op, px_tensor_t *dw, px_tensor_t *db,
                                            const px_tensor_t *x, const px_tensor_t *dy) {
  PX_CHECK(px__cpu_check(x, &op->x_spec, "conv2d backward x"));
  PX_CHECK(px__cpu_check(dy, &op->y_spec, "conv2d backward dy"));
  PX_CHECK(px__cpu_check(dw, &op->w_spec, "conv2d backward dw"));
  if (op->p.bias)
    PX_CHECK(px__cpu_check(db, &op->b_spec, "conv2d backward db"));
  else
    PX_REQUIRE(db == NULL, "conv2d backward: bias gradient asked of a conv without bias");
  px__cpu_enter(op->ops);
  void *ptrs[4] = {x->data, dy->data, px__wbuf_target(op->ops, &op->dw, dw), db ? db->data : NULL};
  PX_CHECK(px__exec_run(op->ops, &op->bwd_w, ptrs));
  return px__wbuf_out(op->ops, &op->dw, dw);
}
