/* The model's internals shared by its files (nn/model*.c): the node, the
 * model itself, and the functions one file gives another. Building
 * (model_build.c) makes nodes, activations and parameters; the ONNX lowering
 * (model_onnx.c) builds an imported graph with the same layer functions; the
 * plan (model_plan.c) analyses the graph and places its memory; model.c
 * creates the model from these, answers the accessors and runs the step;
 * model_init.c gives the parameters their initial values. */
#ifndef PX_NN_MODEL_INT_H
#define PX_NN_MODEL_INT_H

#include <stdint.h>

#include "arch/px_arch_int.h"
#include "nn/px_graph_ops.h"
#include "arch/px_onnx_int.h"
#include "nn/px_ops_int.h"
#include "prunex/nn.h"
#include "prunex/ops_internal.h"
#include "prunex/tensor_internal.h"

/* ACT, MUL, CONCAT: the graph operators of imported networks (nn/px_graph_ops.h),
 * run through the ops context (px__ops_act_forward ...: nn/px_ops_int.h). */
typedef enum {
  PX__CONV, PX__BN, PX__ADD, PX__POOL, PX__FC, PX__REORDER, PX__ACT, PX__MUL, PX__CONCAT,
  PX__LN, /* LayerNorm over channels: w, b its scale and shift, mean / var its statistics
            (var: 1 / sqrt(var + eps)) per pixel [N * H * W] */
  PX__SHUFFLE, /* channel shuffle of `groups` (ShuffleNet's; px__ops_chan_forward) */
  PX__SLICE    /* channels [pad, pad + C_out) of the input (a Split's part) */
} px__node_kind_t;

typedef struct {
  px__node_kind_t kind;
  int in, in2, out;          /* activation indices (in2: ADD, MUL's gate, CONCAT's second) */
  int w, b;                  /* parameter indices, -1 if none (CONV: b its bias) */
  int rm, rv;                /* BN running-statistics buffer indices */
  int relu;                  /* BN / ADD: ReLU fused */
  int kernel, stride;        /* CONV: square kernel, stride (padding kernel / 2);
                                POOL: the same for a windowed pooling (0: global) */
  int pad;                   /* POOL: zero padding on each side (unused: see win) */
  px_window_t win;           /* CONV, windowed POOL: the whole window (px_model_node_t's) */
  px_pool_mode_t mode;       /* POOL with kernel > 0 */
  int groups;                /* CONV: 1 dense, > 1 grouped */
  px__act_t act;             /* ACT */
  float alpha;               /* ACT: LeakyReLU's slope */
  float eps, momentum;       /* BN: epsilon, PyTorch's momentum */
  px_conv2d_t *conv;
  px_batchnorm_t *bn;
  px_add_t *add;
  px_pool2d_t *pool;
  px_fc_t *fc;
  px_reorder_t *rf, *rb;     /* REORDER: forward (x -> y layout) and backward (y -> x) */
  px_tensor_t mean, var;     /* BN batch statistics [c] */
  px_tensor_t ws;            /* BN ReLU mask / pooling workspace; nbytes 0 if none */
} px__node_t;

struct px_model {
  px_model_config_t cfg;
  char arch[32];
  char *onnx;                /* the imported file's path (cfg.onnx points here), or NULL */
  px__onnx_graph_t *graph;   /* the imported graph (layers, initial weights), or NULL */
  int32_t *widths;           /* [nwidths] conv output widths of a compact model, or NULL */
  int nconv;                 /* convs built so far (index into widths) */
  px_ops_t *ops;
  int in_act;                /* the input images in the engine's format: act 0, or the
                                output of the conversion node that reads act 0 */

  px__node_t *nodes;         /* [nnodes], forward order */
  int nnodes, cap_nodes;
  px_tensor_t *acts;         /* [nacts]; act 0 is the input, the last the logits */
  int nacts, cap_acts;
  px_tensor_t *pvals, *pgrads;  /* [nparams] */
  char **pnames;
  px_weight_kind_t *pkinds;
  int nparams, cap_params;
  px_tensor_t *bufs;         /* [nbufs] BN running statistics */
  char **bnames;
  int nbufs, cap_bufs;

  px_model_param_t *params;  /* public views, built once the arrays are final */
  px_model_buffer_t *buffers;

  int *consumers;            /* [nacts] number of nodes reading each activation */
  int *producer;             /* [nacts] node writing it (-1 for the input) */
  int *last_use;             /* [nacts] last node reading it (nnodes for the logits) */
  int *alias;                /* [nacts] activation whose gradient buffer it shares, or itself */
  px_tensor_t *grads;        /* [nacts] activation gradients (views) */
  px_tensor_t *scratch;      /* [nacts] second-consumer gradient (views; multi-consumer only) */
  px_add_t **acc;            /* [nacts] accumulate op (multi-consumer only) */
  uint8_t *ready;            /* [nacts] gradient written in this backward pass */
  px_grad_ready_fn grad_ready; /* NULL: none (px_model_set_grad_ready) */
  void *grad_ready_ctx;

  px_tensor_t labels;        /* i32 [batch] */
  px_tensor_t *gbufs;        /* shared gradient buffers (u8 specs) */
  int ngbufs;
  int separate;              /* PX_MEM_PLAN=separate: the activations in their own arena and
                                the gradients in equal-size buffers (the plan before the
                                shared arena, kept for the tests and the bench to compare) */
  int recompute;             /* PX_MEM_PLAN=recompute: BN outputs made again in the backward */
  int *redo_at;              /* [nacts] a recomputed activation: the node before whose backward
                                it is made again (its last backward reader in forward order);
                                -1: kept from the forward */
  px_tensor_t *bacts;        /* [nacts] what the backward reads: a recomputed activation's
                                backward copy, else the activation itself */
  px_arena_t a_params, a_grads, a_bufs, a_acts, a_gacts;
  px_tensor_t flat_params, flat_grads, flat_bufs;
  size_t numel;
  float *host_x;             /* [batch * C * H * W] staging for short batches */
  float *host_logits;        /* [batch * classes] */
  char *dense_note;          /* px_model_left_dense's text ("" when none) */
};

/* Building (model_build.c): the layer functions that make a node, its output
 * activation and its parameters, and the built-in architectures. */
px_status_t px__act_node(px_model_t *m, int in, px__act_t act, float alpha, int *out);
px_status_t px__add(px_model_t *m, int a, int b, int relu, int *out);
px_status_t px__bn_as(px_model_t *m, int in, int relu, float eps, float momentum, const char *name,
                      int *out);
px_status_t px__build(px_model_t *m, const px__arch_t *a);
px_status_t px__chan_node(px_model_t *m, const px__onnx_layer_t *L, int in, int *out);
px_status_t px__conv_win(px_model_t *m, int in, int c_out, const px_window_t *win, int groups,
                         int bias, px_weight_kind_t kind, const char *name, int *out);
px_status_t px__fc(px_model_t *m, int in, int classes, const char *name, int *out);
px_status_t px__gap(px_model_t *m, int in, int *out);
px_status_t px__graph_node(px_model_t *m, px__node_kind_t kind, int in, int in2, int c_out,
                           int *out);
px_status_t px__input(px_model_t *m, int *h);
px_status_t px__ln_node(px_model_t *m, int in, float eps, const char *name, int *out);
int px__on_cpu(const px_model_t *m);
px_status_t px__plain(px_model_t *m, int a, int *out);
px_status_t px__pool(px_model_t *m, int in, px_pool_mode_t mode, const px_window_t *win, int *out);

/* The ONNX lowering (model_onnx.c). */
px_status_t px__build_onnx(px_model_t *m);
px_status_t px__open_onnx(px_model_t *m, const px_model_config_t *cfg, const char *sha256);

/* The plan (model_plan.c): the graph's analysis and the memory of the
 * activations, their gradients and the parameters. */
px_status_t px__alloc_families(px_model_t *m);
px_status_t px__analyse(px_model_t *m);
int px__backward_reads(const px__node_t *n, int out[2]);
px_status_t px__mem_plan_mode(px_model_t *m);
px_status_t px__plan_memory(px_model_t *m);

#endif
