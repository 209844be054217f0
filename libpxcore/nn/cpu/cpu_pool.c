/* Max, average and global average pooling on oneDNN, forward (training
 * kind, so max pooling records its arg-max positions in a workspace) and
 * backward. The source keeps the input's layout; oneDNN picks the
 * destination's (the same blocked format in practice). */
#include <string.h>

#include "nn/cpu/px_cpu_int.h"
#include "prunex/ops_internal.h"

struct px_pool2d {
  px__ops_head_t head; /* first: the dispatcher reads it */
  px_ops_t *ops;
  px_pool2d_params_t p;
  px_tensor_t x_spec;  /* [N, C, H, W] */
  px_tensor_t y_spec;  /* [N, C, OH, OW] */
  px_tensor_t ws_spec; /* [bytes] u8; nbytes 0 for average pooling */
  px__exec_t fwd;      /* SRC, DST, [WORKSPACE] */
  px__exec_t bwd;      /* DIFF_DST, DIFF_SRC, [WORKSPACE] */
};

void px__cpu_pool2d_destroy(px_pool2d_t *op) {
  if (!op) return;
  px__exec_destroy(&op->fwd);
  px__exec_destroy(&op->bwd);
  if (op->ops) px__cpu_op_died(op->ops);
  px_free(op);
}

/* The output sizes of p on x_spec and oneDNN's geometry: the end padding
 * takes what ceil rounding adds (padded positions are never the maximum nor
 * counted by the exclusive average); over: some window runs past the end
 * padding. PX_ERR_INVALID for bad parameters, an empty output, and an
 * average counting its padding whose windows run past it. */
typedef struct {
  int64_t oh, ow;
  int over;
  dnnl_dims_t strides, kernel, dil, pad_l, pad_r;
} px__pool_geom_t;

static px_status_t px__pool_geom(const px_tensor_t *x_spec, const px_pool2d_params_t *p,
                                 px__pool_geom_t *g) {
  px__axis_t ah, aw;
  PX_CHECK(px__pool_axes(x_spec, p, &ah, &aw));
  g->oh = px__axis_out(&ah);
  g->ow = px__axis_out(&aw);
  PX_REQUIRE(g->oh > 0 && g->ow > 0, "px_pool2d_create: kernel larger than the padded input");
  const int64_t xh = px__axis_overrun(&ah, g->oh), xw = px__axis_overrun(&aw, g->ow);
  g->over = xh > 0 || xw > 0;
  PX_REQUIRE(!(g->over && p->mode == PX_POOL_AVG && (p->pad_h || p->pad_w || ah.p1 || aw.p1)),
             "px_pool2d_create: an average pooling counting its padding whose ceil_mode windows "
             "run past the padding is not supported on the CPU engine");
  *g = (px__pool_geom_t){g->oh, g->ow, g->over, {p->stride_h, p->stride_w}, {p->kh, p->kw},
                         {ah.d - 1, aw.d - 1}, {p->pad_h, p->pad_w}, {ah.p1 + xh, aw.p1 + xw}};
  return PX_OK;
}

px_status_t px__cpu_pool2d_create(px_ops_t *ops, const px_tensor_t *x_spec, const px_pool2d_params_t *p,
                                  px_pool2d_t **out) {
  PX_REQUIRE(out && p, "px_pool2d_create: NULL argument");
  *out = NULL;
  PX_CHECK(px__cpu_check_input(ops, x_spec, 4, 4, "px_pool2d_create"));
  px__pool_geom_t geo;
  PX_CHECK(px__pool_geom(x_spec, p, &geo));
  dnnl_alg_kind_t alg;
  switch (p->mode) {
    case PX_POOL_MAX: alg = dnnl_pooling_max; break;
    /* windows that run past the end padding (ceil_mode) divide by their positions inside
       it: with no padding, the real inputs (exclude); otherwise not oneDNN's (refused) */
    case PX_POOL_AVG: alg = geo.over ? dnnl_pooling_avg_exclude_padding
                                     : dnnl_pooling_avg_include_padding; break;
    case PX_POOL_AVG_EXCLUDE_PAD: alg = dnnl_pooling_avg_exclude_padding; break;
    default: return px_set_error(PX_ERR_INVALID, "px_pool2d_create: unknown mode %d", (int)p->mode);
  }
  const int64_t n = x_spec->dims[0], c = x_spec->dims[1], oh = geo.oh, ow = geo.ow;
  px__cpu_enter(ops);
  px_status_t st = PX_OK;
  dnnl_primitive_desc_t fwd_pd = NULL, bwd_pd = NULL;
  px_pool2d_t *op = px__cpu_op_new(ops, sizeof *op, "px_pool2d");
  if (!op) return PX_ERR_NOMEM;
  op->ops = ops;
  op->p = *p;
  op->x_spec = px__ops_spec_copy(x_spec);

  dnnl_memory_desc_t x_md, y_any;
  dnnl_dims_t ydims = {n, c, oh, ow};
  const int64_t *strides = geo.strides, *kernel = geo.kernel, *dil = geo.dil;
  const int64_t *pad_l = geo.pad_l, *pad_r = geo.pad_r;
  PX_CHECK_GOTO(px__cpu_md_of(ops, x_spec, &x_md), st, fail);
  PX_DNNL_GOTO(dnnl_memory_desc_init_by_tag(&y_any, 4, ydims, dnnl_f32, dnnl_format_tag_any), st,
               fail);
  dnnl_pooling_v2_desc_t pool_d;
  PX_DNNL_GOTO(dnnl_pooling_v2_forward_desc_init(&pool_d, dnnl_forward_training, alg, &x_md, &y_any,
                                                 strides, kernel, dil, pad_l, pad_r),
               st, fail);
  PX_CHECK_GOTO(px__cpu_pd_create(ops, &fwd_pd, &pool_d, NULL, NULL, "pooling forward"), st, fail);
  const dnnl_memory_desc_t y_md = *px__cpu_pd_md(fwd_pd, DNNL_ARG_DST);
  PX_CHECK_GOTO(px__cpu_spec_of(ops, &y_md, &op->y_spec), st, fail);
  const dnnl_memory_desc_t *ws = dnnl_primitive_desc_query_md(fwd_pd, dnnl_query_workspace_md, 0);
  const int64_t wsbytes = ws ? (int64_t)dnnl_memory_desc_get_size(ws) : 0;
  {
    const int64_t wdims[1] = {wsbytes > 0 ? wsbytes : 1};
    PX_CHECK_GOTO(px_tensor_init(&op->ws_spec, ops->device, PX_DTYPE_U8, 1, wdims), st, fail);
    if (wsbytes == 0) op->ws_spec.nbytes = 0;
  }
  {
    const int fa[] = {DNNL_ARG_SRC, DNNL_ARG_DST, DNNL_ARG_WORKSPACE};
    PX_CHECK_GOTO(px__exec_create(ops, &op->fwd, fwd_pd, fa, wsbytes > 0 ? 3 : 2), st, fail);
  }

  PX_DNNL_GOTO(dnnl_pooling_v2_backward_desc_init(&pool_d, alg, &x_md, &y_md, strides, kernel, dil,
                                                  pad_l, pad_r),
               st, fail);
  PX_CHECK_GOTO(px__cpu_pd_create(ops, &bwd_pd, &pool_d, NULL, fwd_pd, "pooling backward"), st, fail);
  {
    const int ba[] = {DNNL_ARG_DIFF_DST, DNNL_ARG_DIFF_SRC, DNNL_ARG_WORKSPACE};
    PX_CHECK_GOTO(px__exec_create(ops, &op->bwd, bwd_pd, ba, wsbytes > 0 ? 3 : 2), st, fail);
  }
  dnnl_primitive_desc_destroy(fwd_pd);
  dnnl_primitive_desc_destroy(bwd_pd);
  *out = op;
  return PX_OK;
fail:
  if (fwd_pd) dnnl_primitive_desc_destroy(fwd_pd);
  if (bwd_pd) dnnl_primitive_desc_destroy(bwd_pd);
  px__cpu_pool2d_destroy(op);
  return st;
}

px_status_t px__cpu_global_avgpool_create(px_ops_t *ops, const px_tensor_t *x_spec, px_pool2d_t **out) {
  PX_CHECK(px__cpu_check_input(ops, x_spec, 4, 4, "px_global_avgpool_create"));
  px_pool2d_params_t p = {PX_POOL_AVG, (int32_t)x_spec->dims[2], (int32_t)x_spec->dims[3], 1, 1, 0, 0,
                          0, 0, 0, 0, 0};
  return px__cpu_pool2d_create(ops, x_spec, &p, out);
}

void px__cpu_pool2d_y_spec(const px_pool2d_t *op, px_tensor_t *spec) { *spec = op->y_spec; }
void px__cpu_pool2d_ws_spec(const px_pool2d_t *op, px_tensor_t *spec) { *spec = op->ws_spec; }

px_status_t px__cpu_pool2d_forward(px_pool2d_t *op, px_tensor_t *y, px_tensor_t *ws,
                                   const px_tensor_t *x) {
  PX_CHECK(px__ops_check_tensor(x, &op->x_spec, "pool2d forward x"));
  PX_CHECK(px__ops_check_tensor(y, &op->y_spec, "pool2d forward y"));
  if (op->ws_spec.nbytes) PX_CHECK(px__ops_check_tensor(ws, &op->ws_spec, "pool2d forward ws"));
  px__cpu_enter(op->ops);
  void *ptrs[3] = {x->data, y->data, op->ws_spec.nbytes ? ws->data : NULL};
  return px__exec_run(op->ops, &op->fwd, ptrs);
}

px_status_t px__cpu_pool2d_backward(px_pool2d_t *op, px_tensor_t *dx, const px_tensor_t *dy,
                                    const px_tensor_t *ws) {
  PX_CHECK(px__ops_check_tensor(dy, &op->y_spec, "pool2d backward dy"));
  PX_CHECK(px__ops_check_tensor(dx, &op->x_spec, "pool2d backward dx"));
  if (op->ws_spec.nbytes) PX_CHECK(px__ops_check_tensor(ws, &op->ws_spec, "pool2d backward ws"));
  px__cpu_enter(op->ops);
  void *ptrs[3] = {dy->data, dx->data, op->ws_spec.nbytes ? ws->data : NULL};
  return px__exec_run(op->ops, &op->bwd, ptrs);
}
