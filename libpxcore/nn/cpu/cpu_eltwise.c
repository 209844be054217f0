/* Elementwise ops on oneDNN: ReLU forward/backward, and the residual add
 * (binary add, with ReLU as a post-op for the end of a ResNet block) whose
 * backward is gradient routing. Both work on any layout, blocked included,
 * because the operands always share one descriptor. The ReLU backward reads
 * the forward's output (relu_use_dst_for_bwd), so the forward can run in
 * place and the pre-activation need not be kept. */
#include <string.h>

#include "nn/cpu/px_cpu_int.h"
#include "prunex/ops_internal.h"

/* ---- ReLU ----------------------------------------------------------------- */

struct px_relu {
  px__ops_head_t head; /* first: the dispatcher reads it */
  px_ops_t *ops;
  px_tensor_t x_spec; /* any shape and layout; y, dx, dy share it */
  px__exec_t fwd;     /* SRC, DST */
  px__exec_t bwd;     /* DST, DIFF_DST, DIFF_SRC */
};

/* Forward and backward ReLU primitives on one descriptor. */
static px_status_t px__relu_pair(px_ops_t *ops, const dnnl_memory_desc_t *md, px__exec_t *fwd,
                                 px__exec_t *bwd) {
  px_status_t st = PX_OK;
  dnnl_primitive_desc_t fwd_pd = NULL, bwd_pd = NULL;
  dnnl_eltwise_desc_t ed;
  PX_DNNL_GOTO(dnnl_eltwise_forward_desc_init(&ed, dnnl_forward_training,
                                              dnnl_eltwise_relu_use_dst_for_bwd, md, 0.0f, 0.0f),
               st, done);
  PX_CHECK_GOTO(px__cpu_pd_create(ops, &fwd_pd, &ed, NULL, NULL, "relu forward"), st, done);
  if (fwd) {
    const int fa[] = {DNNL_ARG_SRC, DNNL_ARG_DST};
    PX_CHECK_GOTO(px__exec_create(ops, fwd, fwd_pd, fa, 2), st, done);
  }
  PX_DNNL_GOTO(dnnl_eltwise_backward_desc_init(&ed, dnnl_eltwise_relu_use_dst_for_bwd, md, md, 0.0f,
                                               0.0f),
               st, done);
  PX_CHECK_GOTO(px__cpu_pd_create(ops, &bwd_pd, &ed, NULL, fwd_pd, "relu backward"), st, done);
  {
    const int ba[] = {DNNL_ARG_DST, DNNL_ARG_DIFF_DST, DNNL_ARG_DIFF_SRC};
    PX_CHECK_GOTO(px__exec_create(ops, bwd, bwd_pd, ba, 3), st, done);
  }
done:
  if (fwd_pd) dnnl_primitive_desc_destroy(fwd_pd);
  if (bwd_pd) dnnl_primitive_desc_destroy(bwd_pd);
  return st;
}

void px__cpu_relu_destroy(px_relu_t *op) {
  if (!op) return;
  px__exec_destroy(&op->fwd);
  px__exec_destroy(&op->bwd);
  if (op->ops) px__cpu_op_died(op->ops);
  px_free(op);
}

px_status_t px__cpu_relu_create(px_ops_t *ops, const px_tensor_t *x_spec, px_relu_t **out) {
  PX_REQUIRE(out != NULL, "px_relu_create: out is NULL");
  *out = NULL;
  PX_CHECK(px__cpu_check_input(ops, x_spec, 1, 4, "px_relu_create"));
  px__cpu_enter(ops);
  dnnl_memory_desc_t md;
  PX_CHECK(px__cpu_md_of(ops, x_spec, &md));
  px_relu_t *op = px__cpu_op_new(ops, sizeof *op, "px_relu");
  if (!op) return PX_ERR_NOMEM;
  op->ops = ops;
  op->x_spec = px__ops_spec_copy(x_spec);
  px_status_t st = px__relu_pair(ops, &md, &op->fwd, &op->bwd);
  if (st < 0) {
    px__cpu_relu_destroy(op);
    return st;
  }
  *out = op;
  return PX_OK;
}

void px__cpu_relu_y_spec(const px_relu_t *op, px_tensor_t *spec) { *spec = op->x_spec; }

px_status_t px__cpu_relu_forward(px_relu_t *op, px_tensor_t *y, const px_tensor_t *x) {
  PX_CHECK(px__ops_check_tensor(x, &op->x_spec, "relu forward x"));
  PX_CHECK(px__ops_check_tensor(y, &op->x_spec, "relu forward y"));
  px__cpu_enter(op->ops);
  void *ptrs[2] = {x->data, y->data};
  return px__exec_run(op->ops, &op->fwd, ptrs);
}

px_status_t px__cpu_relu_backward(px_relu_t *op, px_tensor_t *dx, const px_tensor_t *dy,
                                  const px_tensor_t *y) {
  PX_CHECK(px__ops_check_tensor(y, &op->x_spec, "relu backward y"));
  PX_CHECK(px__ops_check_tensor(dy, &op->x_spec, "relu backward dy"));
  PX_CHECK(px__ops_check_tensor(dx, &op->x_spec, "relu backward dx"));
  px__cpu_enter(op->ops);
  void *ptrs[3] = {y->data, dy->data, dx->data};
  return px__exec_run(op->ops, &op->bwd, ptrs);
}

/* ---- residual add ----------------------------------------------------------- */

struct px_add {
  px__ops_head_t head; /* first: the dispatcher reads it */
  px_ops_t *ops;
  int relu;
  px_tensor_t x_spec; /* a, b, y, dy, g */
  px__exec_t fwd;     /* SRC_0, SRC_1, DST */
  px__exec_t bwd;     /* DST, DIFF_DST, DIFF_SRC (ReLU backward; only with relu) */
};

void px__cpu_add_destroy(px_add_t *op) {
  if (!op) return;
  px__exec_destroy(&op->fwd);
  px__exec_destroy(&op->bwd);
  if (op->ops) px__cpu_op_died(op->ops);
  px_free(op);
}

px_status_t px__cpu_add_create(px_ops_t *ops, const px_tensor_t *x_spec, int relu, px_add_t **out) {
  PX_REQUIRE(out != NULL, "px_add_create: out is NULL");
  *out = NULL;
  PX_CHECK(px__cpu_check_input(ops, x_spec, 1, 4, "px_add_create"));
  px__cpu_enter(ops);
  dnnl_memory_desc_t md;
  PX_CHECK(px__cpu_md_of(ops, x_spec, &md));
  px_status_t st = PX_OK;
  dnnl_primitive_attr_t attr = NULL;
  dnnl_post_ops_t po = NULL;
  dnnl_primitive_desc_t pd = NULL;
  px_add_t *op = px__cpu_op_new(ops, sizeof *op, "px_add");
  if (!op) return PX_ERR_NOMEM;
  op->ops = ops;
  op->relu = relu ? 1 : 0;
  op->x_spec = px__ops_spec_copy(x_spec);

  PX_DNNL_GOTO(dnnl_primitive_attr_clone(&attr, ops->attr), st, fail);
  if (op->relu) {
    PX_DNNL_GOTO(dnnl_post_ops_create(&po), st, fail);
    PX_DNNL_GOTO(dnnl_post_ops_append_eltwise(po, 1.0f, dnnl_eltwise_relu, 0.0f, 0.0f), st, fail);
    PX_DNNL_GOTO(dnnl_primitive_attr_set_post_ops(attr, po), st, fail);
  }
  dnnl_binary_desc_t bd;
  PX_DNNL_GOTO(dnnl_binary_desc_init(&bd, dnnl_binary_add, &md, &md, &md), st, fail);
  PX_CHECK_GOTO(px__cpu_pd_create(ops, &pd, &bd, attr, NULL, "binary add"), st, fail);
  {
    const int fa[] = {DNNL_ARG_SRC_0, DNNL_ARG_SRC_1, DNNL_ARG_DST};
    PX_CHECK_GOTO(px__exec_create(ops, &op->fwd, pd, fa, 3), st, fail);
  }
  if (op->relu) PX_CHECK_GOTO(px__relu_pair(ops, &md, NULL, &op->bwd), st, fail);
  dnnl_primitive_desc_destroy(pd);
  if (po) dnnl_post_ops_destroy(po);
  dnnl_primitive_attr_destroy(attr);
  *out = op;
  return PX_OK;
fail:
  if (pd) dnnl_primitive_desc_destroy(pd);
  if (po) dnnl_post_ops_destroy(po);
  if (attr) dnnl_primitive_attr_destroy(attr);
  px__cpu_add_destroy(op);
  return st;
}

void px__cpu_add_y_spec(const px_add_t *op, px_tensor_t *spec) { *spec = op->x_spec; }

px_status_t px__cpu_add_forward(px_add_t *op, px_tensor_t *y, const px_tensor_t *a,
                                const px_tensor_t *b) {
  PX_CHECK(px__ops_check_tensor(a, &op->x_spec, "add forward a"));
  PX_CHECK(px__ops_check_tensor(b, &op->x_spec, "add forward b"));
  PX_CHECK(px__ops_check_tensor(y, &op->x_spec, "add forward y"));
  px__cpu_enter(op->ops);
  void *ptrs[3] = {a->data, b->data, y->data};
  return px__exec_run(op->ops, &op->fwd, ptrs);
}

px_status_t px__cpu_add_backward(px_add_t *op, px_tensor_t *g, const px_tensor_t *dy,
                                 const px_tensor_t *y) {
  PX_CHECK(px__ops_check_tensor(dy, &op->x_spec, "add backward dy"));
  PX_CHECK(px__ops_check_tensor(g, &op->x_spec, "add backward g"));
  if (!op->relu) return px_tensor_copy(g, dy);
  PX_CHECK(px__ops_check_tensor(y, &op->x_spec, "add backward y"));
  px__cpu_enter(op->ops);
  void *ptrs[3] = {y->data, dy->data, g->data};
  return px__exec_run(op->ops, &op->bwd, ptrs);
}
