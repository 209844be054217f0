/* ResNet-family models as a fixed graph of op objects.
 *
 * Building walks the architecture once: every layer becomes a node holding
 * its op (created for the exact input spec, so every primitive exists before
 * the first step), its output activation and its parameters. Then each
 * family is allocated in one arena. Training runs the nodes forward, the loss,
 * and the nodes backward in reverse; inference runs them forward with the
 * running statistics.
 *
 * Activation gradients. An ADD's inputs that feed nothing else take their
 * gradient straight from the ADD's output gradient (the same buffer: the
 * ADD's backward computes it in place), so residual blocks copy nothing. An
 * activation with two consumers (a block input feeding both the block and
 * its shortcut) gets the first gradient written in place and the second
 * added from a scratch buffer.
 *
 * The files: model_build.c builds the layers, model_onnx.c lowers an
 * imported graph, model_plan.c plans the memory (see there),
 * model_init.c sets the initial values; this file creates the model,
 * answers its accessors and runs the step. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "nn/model_int.h"
#include "nn/px_train_int.h"
#include "prunex/nn.h"
#include "prunex/ops_internal.h"
#include "prunex/tensor_internal.h"
#include "px_check.h"

static px_status_t px__publish(px_model_t *m) {
  m->params = px_calloc((size_t)m->nparams, sizeof *m->params, "model.param_views");
  m->buffers = px_calloc((size_t)(m->nbufs ? m->nbufs : 1), sizeof *m->buffers, "model.buffer_views");
  if (!m->params || !m->buffers) return PX_ERR_NOMEM;
  for (int i = 0; i < m->nparams; i++)
    m->params[i] = (px_model_param_t){m->pnames[i], m->pkinds[i], &m->pvals[i], &m->pgrads[i]};
  for (int i = 0; i < m->nbufs; i++) m->buffers[i] = (px_model_buffer_t){m->bnames[i], &m->bufs[i]};
  return PX_OK;
}

px_status_t px_model_create(px_ops_t *ops, const px_model_config_t *cfg, px_model_t **out) {
  return px__model_create_ex(ops, cfg, NULL, out);
}

/* The prunable convs whose output channels a channel shuffle or a channel
 * split reads (through batch norms, activations, concatenations and layout
 * conversions): compaction keeps all of them (export/compact.c), so their
 * filters are left dense as producers; m->dense_note names them and why. */
static px_status_t px__dense_note(px_model_t *m) {
  uint8_t *feeds = px_calloc((size_t)m->nacts, 1, "model.feeds");
  size_t cap = 1, len = 0;
  for (int k = 0; k < m->nnodes; k++) cap += m->nodes[k].kind == PX__CONV ? 256 : 0;
  m->dense_note = px_malloc(cap, "model.dense_note");
  if (!feeds || !m->dense_note) {
    px_free(feeds);
    return PX_ERR_NOMEM;
  }
  m->dense_note[0] = '\0';
  for (int k = m->nnodes - 1; k >= 0; k--) { /* readers before writers */
    const px__node_t *n = &m->nodes[k];
    if (n->kind == PX__SHUFFLE) feeds[n->in] |= 1;
    if (n->kind == PX__SLICE) feeds[n->in] |= 2;
    if (n->kind != PX__BN && n->kind != PX__ACT && n->kind != PX__CONCAT &&
        n->kind != PX__REORDER)
      continue;
    feeds[n->in] |= feeds[n->out];
    if (n->in2 >= 0) feeds[n->in2] |= feeds[n->out];
  }
  for (int k = 0; k < m->nnodes; k++) {
    const px__node_t *n = &m->nodes[k];
    if (n->kind != PX__CONV || m->pkinds[n->w] != PX_WEIGHT_CONV || !feeds[n->out]) continue;
    const char *nm = m->pnames[n->w], *dot = strrchr(nm, '.');
    len += (size_t)snprintf(m->dense_note + len, cap - len, "%s%.*s (feeds a channel %s)",
                            len ? ", " : "", (int)(dot ? dot - nm : 200), nm,
                            feeds[n->out] & 1 ? "shuffle" : "split");
    if (len >= cap) len = cap - 1;
  }
  px_free(feeds);
  return PX_OK;
}

const char *px_model_left_dense(const px_model_t *m) { return m->dense_note ? m->dense_note : ""; }

px_status_t px__model_create_ex(px_ops_t *ops, const px_model_config_t *cfg, const char *sha256,
                                px_model_t **out) {
  PX_REQUIRE(out != NULL && ops != NULL && cfg != NULL, "px_model_create: NULL argument");
  *out = NULL;
  const px__arch_t *a = cfg->onnx ? NULL : px__arch_find(cfg->arch);
  PX_REQUIRE(cfg->onnx || a != NULL, "model.name '%s' is not a known architecture (%s)",
             cfg->arch ? cfg->arch : "(null)", px_model_arch_list());
  PX_REQUIRE(cfg->in_channels >= 1, "model.in_channels = %d: must be >= 1", cfg->in_channels);
  PX_REQUIRE(cfg->num_classes >= 2, "model.num_classes = %d: must be >= 2", cfg->num_classes);
  PX_REQUIRE(cfg->batch >= 1, "batch size %d: must be >= 1", cfg->batch);
  int min_side = a ? 1 << (a->nstages - 1) : 1;
  PX_REQUIRE(cfg->height >= min_side && cfg->width >= min_side,
             "input %dx%d is too small for %s (needs at least %dx%d)", cfg->height, cfg->width,
             a ? a->name : cfg->onnx, min_side, min_side);
  px_model_t *m = px_calloc(1, sizeof *m, "model");
  if (!m) return PX_ERR_NOMEM;
  m->cfg = *cfg;
  snprintf(m->arch, sizeof m->arch, "%s", a ? a->name : "onnx");
  m->cfg.arch = m->arch;
  m->ops = ops;
  px_status_t st = px__mem_plan_mode(m);
  if (st != PX_OK) goto done;
  if (cfg->widths) {
    if (cfg->nwidths < 1) {
      st = px_set_error(PX_ERR_INVALID, "model widths: %d given", cfg->nwidths);
      goto done;
    }
    m->widths = px_malloc((size_t)cfg->nwidths * sizeof(int32_t), "model.widths");
    if (!m->widths) {
      st = PX_ERR_NOMEM;
      goto done;
    }
    memcpy(m->widths, cfg->widths, (size_t)cfg->nwidths * sizeof(int32_t));
    m->cfg.widths = m->widths;
  } else {
    m->cfg.nwidths = 0;
  }
  if (cfg->onnx) PX_CHECK_GOTO(px__open_onnx(m, cfg, sha256), st, done);
  PX_CHECK_GOTO(m->graph ? px__build_onnx(m) : px__build(m, a), st, done);
  if (m->widths && m->nconv != m->cfg.nwidths) {
    st = px_set_error(PX_ERR_INVALID, "model widths: %d given, %s has %d convolutions",
                      m->cfg.nwidths, m->arch, m->nconv);
    goto done;
  }
  PX_CHECK_GOTO(px__analyse(m), st, done);
  PX_CHECK_GOTO(px__alloc_families(m), st, done);
  PX_CHECK_GOTO(px__plan_memory(m), st, done);
  PX_CHECK_GOTO(px__publish(m), st, done);
  PX_CHECK_GOTO(px__dense_note(m), st, done);
done:
  return PX_CREATED(st, m, out, px_model_destroy);
}

void px_model_set_bn_momentum(px_model_t *m, float momentum) {
  for (int i = 0; m && i < m->nnodes; i++)
    if (m->nodes[i].bn)
      px_batchnorm_set_momentum(m->nodes[i].bn, momentum > 0.0f ? momentum : m->nodes[i].momentum);
}

void px_model_destroy(px_model_t *m) {
  if (!m) return;
  for (int i = 0; i < m->nnodes; i++) {
    px__node_t *n = &m->nodes[i];
    if (n->conv) px_conv2d_destroy(n->conv);
    if (n->bn) px_batchnorm_destroy(n->bn);
    if (n->add) px_add_destroy(n->add);
    if (n->pool) px_pool2d_destroy(n->pool);
    if (n->fc) px_fc_destroy(n->fc);
    if (n->rf) px_reorder_destroy(n->rf);
    if (n->rb) px_reorder_destroy(n->rb);
  }
  for (int a = 0; a < m->nacts && m->acc; a++)
    if (m->acc[a]) px_add_destroy(m->acc[a]);
  for (int i = 0; i < m->nparams; i++) px_free(m->pnames[i]);
  for (int i = 0; i < m->nbufs; i++) px_free(m->bnames[i]);
  px__onnx_free(m->graph);
  px_free(m->onnx);
  px_arena_free(&m->a_params);
  px_arena_free(&m->a_grads);
  px_arena_free(&m->a_bufs);
  px_arena_free(&m->a_acts);
  px_arena_free(&m->a_gacts);
  PX_FREE_ALL(m->nodes, m->acts, m->pvals, m->pgrads, m->pnames, m->pkinds, m->bufs, m->bnames,
              m->params, m->buffers, m->consumers, m->producer, m->last_use, m->alias, m->grads,
              m->scratch, m->acc, m->ready, m->gbufs, m->host_x, m->host_logits, m->widths,
              m->redo_at, m->bacts, m->dense_note, m);
}

/* ---- accessors ------------------------------------------------------------------ */

const px_model_config_t *px_model_config(const px_model_t *m) { return &m->cfg; }
px_ops_t *px_model_ops(const px_model_t *m) { return m->ops; }
int px_model_num_params(const px_model_t *m) { return m->nparams; }

/* The one node reading activation a, or NULL when none or several do. */
static const px__node_t *px__sole_reader(const px_model_t *m, int a) {
  const px__node_t *r = NULL;
  for (int k = 0; k < m->nnodes; k++) {
    const px__node_t *n = &m->nodes[k];
    if (n->in != a && n->in2 != a) continue;
    if (r) return NULL;
    r = n;
  }
  return r;
}

/* A depthwise conv: output channel c reads input channel c alone. */
static int px__depthwise(const px_model_t *m, const px__node_t *n) {
  return n->kind == PX__CONV && n->groups > 1 && n->groups == (int)m->acts[n->in].dims[1] &&
         n->groups == (int)m->acts[n->out].dims[1];
}

int px_model_channel_consumer(const px_model_t *m, int i) {
  if (i < 0 || i >= m->nparams || m->pkinds[i] != PX_WEIGHT_CONV) return -1;
  for (int k = 0; k < m->nnodes; k++) {
    const px__node_t *n = &m->nodes[k];
    if (n->kind != PX__CONV || n->w != i) continue;
    /* conv -> BN (ReLU fused or not) -> conv, each the only reader; in an
     * imported graph, standalone activations, further BNs and depthwise
     * convs may come between: each passes channel c on as channel c */
    const px__node_t *bn = px__sole_reader(m, n->out);
    if (!bn || (bn->kind != PX__BN && bn->kind != PX__ACT)) return -1;
    /* an imported ConvNeXt's Linear pair (1 x 1 convs with bias, GELU
     * between): a pruned channel's bias makes a constant that only the
     * consumer's pruned input channel reads, so the pair couples without a
     * BN; a LayerNorm (statistics over all channels) ends every chain */
    const px__node_t *c = bn->kind == PX__BN ? px__sole_reader(m, bn->out) : bn;
    while (c && (c->kind == PX__ACT || c->kind == PX__BN || px__depthwise(m, c)))
      c = px__sole_reader(m, c->out);
    if (!c || c->kind != PX__CONV || m->pkinds[c->w] != PX_WEIGHT_CONV) return -1;
    return c->w;
  }
  return -1;
}

/* The node whose weight (CONV, BN scale) or bias (BN shift, CONV bias) is
 * parameter i, or NULL. */
static const px__node_t *px__param_node(const px_model_t *m, int i) {
  for (int k = 0; k < m->nnodes; k++)
    if ((m->nodes[k].w == i || m->nodes[k].b == i) &&
        (m->nodes[k].kind == PX__CONV || m->nodes[k].kind == PX__BN))
      return &m->nodes[k];
  return NULL;
}

int px_model_channel_follower(const px_model_t *m, int i) {
  if (i < 0 || i >= m->nparams) return -1;
  const px__node_t *n = px__param_node(m, i);
  if (!n || (n->kind != PX__BN && !px__depthwise(m, n))) return -1;
  /* back to the producing conv, each link read by the next node alone */
  int dw = px__depthwise(m, n);
  const px__node_t *p = n;
  do {
    if (m->consumers[p->in] != 1 || m->producer[p->in] < 0) return -1;
    p = &m->nodes[m->producer[p->in]];
    if (p->kind != PX__ACT && p->kind != PX__BN && p->kind != PX__CONV) return -1;
    dw |= px__depthwise(m, p);
  } while (p->kind != PX__CONV || px__depthwise(m, p));
  /* no depthwise conv before it: the producer's own batch norm, which
   * travels dense as the built-in models' do */
  if (!dw) return -1;
  return px_model_channel_consumer(m, p->w);
}
int px_model_num_nodes(const px_model_t *m) { return m->nnodes; }

int px_model_compactable(const px_model_t *m) {
  for (int k = 0; k < m->nnodes; k++) {
    const px__node_t *n = &m->nodes[k];
    if (n->kind == PX__ACT || n->kind == PX__MUL || n->kind == PX__CONCAT || n->kind == PX__LN ||
        n->kind == PX__SHUFFLE || n->kind == PX__SLICE)
      return 0;
    if (n->kind == PX__CONV && (n->groups > 1 || n->b >= 0)) return 0;
  }
  return 1;
}
int px_model_num_acts(const px_model_t *m) { return m->nacts; }
int px_model_act_channels(const px_model_t *m, int a) {
  return a >= 0 && a < m->nacts ? (int)m->acts[a].dims[1] : -1;
}
int px_model_act_area(const px_model_t *m, int a, int *h, int *w) {
  if (a < 0 || a >= m->nacts || m->acts[a].ndim != 4) return -1;
  *h = (int)m->acts[a].dims[2];
  *w = (int)m->acts[a].dims[3];
  return 0;
}

/* f as the shortest decimal of up to 7 digits that gives it back (1e-5f:
 * 1e-5), as PyTorch's epsilon is written; f itself when none does. */
static double px__decimal(float f) {
  char buf[32];
  for (int digits = 1; digits <= 7; digits++) {
    snprintf(buf, sizeof buf, "%.*g", digits, (double)f);
    double d = strtod(buf, NULL);
    if ((float)d == f) return d;
  }
  return (double)f;
}

px_status_t px_model_node(const px_model_t *m, int k, px_model_node_t *out) {
  PX_REQUIRE(k >= 0 && k < m->nnodes, "model node %d of %d", k, m->nnodes);
  const px__node_t *n = &m->nodes[k];
  static const px_node_kind_t kinds[] = {PX_NODE_CONV, PX_NODE_BN,      PX_NODE_ADD,
                                         PX_NODE_GAP,  PX_NODE_FC,      PX_NODE_REORDER,
                                         PX_NODE_ACT,  PX_NODE_MUL,     PX_NODE_CONCAT,
                                         PX_NODE_LN,   PX_NODE_SHUFFLE, PX_NODE_SLICE};
  px_node_kind_t kind = kinds[n->kind];
  if (n->kind == PX__POOL && n->kernel > 0)
    kind = n->mode == PX_POOL_MAX ? PX_NODE_MAXPOOL : PX_NODE_AVGPOOL;
  *out = (px_model_node_t){kind, n->in, n->in2, n->out, n->w, n->b, n->rm, n->rv,
                           n->relu, n->win.kh, n->win.stride_h,
                           n->kind == PX__SLICE ? n->pad : n->win.pad_t,
                           (int)m->acts[n->in].dims[1], (int)m->acts[n->out].dims[1],
                           n->kind == PX__CONV ? (n->groups > 1 ? n->groups : 1)
                           : n->kind == PX__SHUFFLE ? n->groups : 0, (int)n->act,
                           n->alpha, n->momentum,
                           n->kind == PX__BN || n->kind == PX__LN ? px__decimal(n->eps) : 0.0, n->win};
  return PX_OK;
}

const px_model_param_t *px_model_param(const px_model_t *m, int i) {
  return i >= 0 && i < m->nparams ? &m->params[i] : NULL;
}
int px_model_num_buffers(const px_model_t *m) { return m->nbufs; }
const px_model_buffer_t *px_model_buffer(const px_model_t *m, int i) {
  return i >= 0 && i < m->nbufs ? &m->buffers[i] : NULL;
}
size_t px_model_numel(const px_model_t *m) { return m->numel; }
const px_tensor_t *px_model_flat_params(const px_model_t *m) { return &m->flat_params; }
const px_tensor_t *px_model_flat_grads(const px_model_t *m) { return &m->flat_grads; }
const px_tensor_t *px_model_flat_buffers(const px_model_t *m) { return &m->flat_bufs; }
size_t px_model_memory_bytes(const px_model_t *m) {
  return m->a_params.bytes + m->a_grads.bytes + m->a_bufs.bytes + m->a_acts.bytes +
         m->a_gacts.bytes;
}
size_t px_model_activation_bytes(const px_model_t *m) { return m->a_acts.bytes + m->a_gacts.bytes; }

/* ---- forward / backward ----------------------------------------------------------- */

static px_tensor_t *px__ws(px__node_t *n) { return n->ws.nbytes > 0 ? &n->ws : NULL; }

/* The graph operators, on the model's engine. */
static px_status_t px__graph_forward(px_model_t *m, const px__node_t *n) {
  px_tensor_t *y = &m->acts[n->out];
  const px_tensor_t *x = &m->acts[n->in];
  if (n->kind == PX__ACT) return px__ops_act_forward(m->ops, y, x, n->act, n->alpha);
  if (n->kind == PX__MUL) return px__ops_mul_forward(m->ops, y, x, &m->acts[n->in2]);
  if (n->kind == PX__LN)
    return px__ops_ln_forward(m->ops, y, (px_tensor_t *)&n->mean, (px_tensor_t *)&n->var, x,
                              &m->pvals[n->w], &m->pvals[n->b], n->eps);
  if (n->kind == PX__SHUFFLE || n->kind == PX__SLICE)
    return px__ops_chan_forward(m->ops, y, x, n->groups, n->pad);
  return px__ops_concat_forward(m->ops, y, x, &m->acts[n->in2]);
}

static px_status_t px__forward(px_model_t *m, int train) {
  for (int k = 0; k < m->nnodes; k++) {
    px__node_t *n = &m->nodes[k];
    px_tensor_t *y = &m->acts[n->out];
    const px_tensor_t *x = &m->acts[n->in];
    switch (n->kind) {
      case PX__CONV:
        PX_CHECK(px_conv2d_forward(n->conv, y, x, &m->pvals[n->w],
                                   n->b >= 0 ? &m->pvals[n->b] : NULL));
        break;
      case PX__ACT:
      case PX__MUL:
      case PX__CONCAT:
      case PX__LN:
      case PX__SHUFFLE:
      case PX__SLICE:
        PX_CHECK(px__graph_forward(m, n));
        break;
      case PX__BN:
        if (train)
          PX_CHECK(px_batchnorm_forward_train(n->bn, y, &n->mean, &n->var, px__ws(n), x,
                                              &m->pvals[n->w], &m->pvals[n->b], &m->bufs[n->rm],
                                              &m->bufs[n->rv]));
        else
          PX_CHECK(px_batchnorm_forward_infer(n->bn, y, x, &m->pvals[n->w], &m->pvals[n->b],
                                              &m->bufs[n->rm], &m->bufs[n->rv]));
        break;
      case PX__ADD:
        PX_CHECK(px_add_forward(n->add, y, x, &m->acts[n->in2]));
        break;
      case PX__POOL:
        PX_CHECK(px_pool2d_forward(n->pool, y, px__ws(n), x));
        break;
      case PX__FC:
        PX_CHECK(px_fc_forward(n->fc, y, x, &m->pvals[n->w], &m->pvals[n->b]));
        break;
      case PX__REORDER:
        PX_CHECK(px_reorder_execute(n->rf, y, x));
        break;
    }
  }
  return PX_OK;
}

/* Where the gradient of activation a goes: its own buffer the first time in
 * a backward pass, the scratch buffer after (then px__settle adds it). */
static px_tensor_t *px__dx(px_model_t *m, int a) {
  if (!m->ready[a]) {
    m->ready[a] = 1;
    return &m->grads[a];
  }
  return &m->scratch[a];
}

static px_status_t px__settle(px_model_t *m, int a, const px_tensor_t *written) {
  if (written == &m->scratch[a])
    return px_add_forward(m->acc[a], &m->grads[a], &m->grads[a], &m->scratch[a]);
  return PX_OK;
}

/* Routes an ADD's gradient g to one of its inputs. */
static px_status_t px__route(px_model_t *m, int a, const px_tensor_t *g) {
  if (m->alias[a] != a) { /* shares g's buffer: already there */
    m->ready[a] = 1;
    return PX_OK;
  }
  if (!m->ready[a]) {
    m->ready[a] = 1;
    return px_tensor_copy(&m->grads[a], g);
  }
  return px_add_forward(m->acc[a], &m->grads[a], &m->grads[a], g);
}

/* Their backward: the gradients of both inputs (none for the images). */
static px_status_t px__graph_backward(px_model_t *m, const px__node_t *n) {
  const px_tensor_t *x = &m->bacts[n->in], *dy = &m->grads[n->out];
  int want1 = n->in != 0 && n->in != m->in_act, want2 = n->in2 > 0 && n->in2 != m->in_act;
  px_tensor_t *dx = want1 ? px__dx(m, n->in) : NULL;
  px_tensor_t *dx2 = want2 ? px__dx(m, n->in2) : NULL;
  if (n->kind == PX__ACT && dx)
    PX_CHECK(px__ops_act_backward(m->ops, dx, dy, x, &m->bacts[n->out], n->act, n->alpha));
  else if (n->kind == PX__MUL && (dx || dx2))
    PX_CHECK(px__ops_mul_backward(m->ops, dx, dx2, dy, x, &m->bacts[n->in2]));
  else if (n->kind == PX__CONCAT && (dx || dx2))
    PX_CHECK(px__ops_concat_backward(m->ops, dx, dx2, dy));
  else if ((n->kind == PX__SHUFFLE || n->kind == PX__SLICE) && dx)
    PX_CHECK(px__ops_chan_backward(m->ops, dx, dy, n->groups, n->pad));
  if (dx) PX_CHECK(px__settle(m, n->in, dx));
  if (dx2) PX_CHECK(px__settle(m, n->in2, dx2));
  return PX_OK;
}

/* Makes again the recomputed activations whose first backward reader is
 * node k (px__recompute_lifetimes), from their BN's input and statistics. */
static px_status_t px__recompute(px_model_t *m, int k) {
  int reads[2], nr = px__backward_reads(&m->nodes[k], reads);
  for (int i = 0; i < nr; i++) {
    const int a = reads[i];
    if (m->redo_at[a] != k) continue;
    px__node_t *bn = &m->nodes[m->producer[a]];
    PX_CHECK(px_batchnorm_recompute(bn->bn, &m->bacts[a], &m->bacts[bn->in], &m->pvals[bn->w],
                                    &m->pvals[bn->b], &bn->mean, &bn->var));
  }
  return PX_OK;
}

static px_status_t px__backward(px_model_t *m) {
  memset(m->ready, 0, (size_t)m->nacts);
  m->ready[m->nacts - 1] = 1; /* the logits' gradient comes from the loss */
  for (int k = m->nnodes - 1; k >= 0; k--) {
    px__node_t *n = &m->nodes[k];
    px_tensor_t *dy = &m->grads[n->out];
    PX_CHECK(px__recompute(m, k));
    const px_tensor_t *x = &m->bacts[n->in];
    if (n->kind == PX__ACT || n->kind == PX__MUL || n->kind == PX__CONCAT ||
        n->kind == PX__SHUFFLE || n->kind == PX__SLICE) {
      PX_CHECK(px__graph_backward(m, n));
      continue;
    }
    if (n->kind == PX__ADD) { /* routes its gradient rather than computing one */
      PX_CHECK(px_add_backward(n->add, dy, dy, &m->bacts[n->out]));
      PX_CHECK(px__route(m, n->in, dy));
      PX_CHECK(px__route(m, n->in2, dy));
      continue;
    }
    /* none for the input images, nor for their conversion */
    px_tensor_t *dx = n->in != 0 && n->in != m->in_act ? px__dx(m, n->in) : NULL;
    switch (n->kind) {
      case PX__CONV:
        PX_CHECK(px_conv2d_backward_weights(n->conv, &m->pgrads[n->w],
                                            n->b >= 0 ? &m->pgrads[n->b] : NULL, x, dy));
        if (dx) PX_CHECK(px_conv2d_backward_data(n->conv, dx, dy, &m->pvals[n->w]));
        break;
      case PX__LN:
        PX_CHECK(px__ops_ln_backward(m->ops, dx, &m->pgrads[n->w], &m->pgrads[n->b], dy, x,
                                     &n->mean, &n->var, &m->pvals[n->w]));
        break;
      case PX__BN:
        PX_CHECK(px_batchnorm_backward(n->bn, dx, &m->pgrads[n->w], &m->pgrads[n->b], dy, x,
                                       &m->pvals[n->w], &m->pvals[n->b], &n->mean, &n->var,
                                       px__ws(n)));
        break;
      case PX__ADD:
      case PX__ACT:
      case PX__MUL:
      case PX__CONCAT:
      case PX__SHUFFLE:
      case PX__SLICE:
        break;
      case PX__POOL:
        PX_CHECK(px_pool2d_backward(n->pool, dx, dy, px__ws(n)));
        break;
      case PX__FC:
        PX_CHECK(px_fc_backward_weights(n->fc, &m->pgrads[n->w], &m->pgrads[n->b], x, dy));
        PX_CHECK(px_fc_backward_data(n->fc, dx, dy, &m->pvals[n->w]));
        break;
      case PX__REORDER:
        if (dx) PX_CHECK(px_reorder_execute(n->rb, dx, dy));
        break;
    }
    if (dx) PX_CHECK(px__settle(m, n->in, dx));
    /* the node's parameter gradients are final: a data-parallel strategy
     * may start reducing them while the earlier layers run backward */
    if (m->grad_ready && n->w >= 0) PX_CHECK(m->grad_ready(m->grad_ready_ctx, m, n->w));
    if (m->grad_ready && n->b >= 0) PX_CHECK(m->grad_ready(m->grad_ready_ctx, m, n->b));
  }
  return PX_OK;
}

void px_model_set_grad_ready(px_model_t *m, px_grad_ready_fn fn, void *ctx) {
  m->grad_ready = fn;
  m->grad_ready_ctx = ctx;
}

/* The input batch (and the labels when y is not NULL) onto the model's
 * device: on the GPU through the ops context's pinned staging buffer, queued
 * before the forward pass. */
static px_status_t px__load_input(px_model_t *m, const float *x, const int32_t *y) {
  px_tensor_t *dst[2] = {&m->acts[0], &m->labels};
  const void *src[2] = {x, y};
  return px__ops_upload(m->ops, y ? 2 : 1, dst, src);
}

/* t, the logits, as the loss reads them: [N, classes] (a conv classifier's
 * pooled plain [N, classes, 1, 1] is the same memory). */
static px_tensor_t px__logits_2d(const px_tensor_t *t) {
  px_tensor_t v = *t;
  v.ndim = 2;
  v.dims[2] = v.dims[3] = 1;
  return v;
}

px_status_t px_model_train_step(px_model_t *m, const float *x, const int32_t *y, float *loss,
                                int64_t *correct) {
  PX_CHECK(px__load_input(m, x, y));
  PX_CHECK(px__forward(m, 1));
  int lg = m->nacts - 1;
  px_tensor_t z = px__logits_2d(&m->acts[lg]), dz = px__logits_2d(&m->grads[lg]);
  PX_CHECK(px_softmax_ce(m->ops, &dz, loss, correct, &z, &m->labels));
  return px__backward(m);
}

px_status_t px_model_forward_train(px_model_t *m, const float *x) {
  PX_CHECK(px__load_input(m, x, NULL));
  return px__forward(m, 1);
}

/* Inference forward of the first n (1..batch) samples of x, the rest of the
 * batch zero-filled in host_x; leaves the batch's logits in host_logits. */
static px_status_t px__infer_host(px_model_t *m, const float *x, int32_t n) {
  const int B = m->cfg.batch, K = m->cfg.num_classes;
  if (n < B) {
    size_t per = (size_t)m->cfg.in_channels * m->cfg.height * m->cfg.width;
    memcpy(m->host_x, x, (size_t)n * per * sizeof(float));
    memset(m->host_x + (size_t)n * per, 0, (size_t)(B - n) * per * sizeof(float));
    x = m->host_x;
  }
  PX_CHECK(px__load_input(m, x, NULL));
  PX_CHECK(px__forward(m, 0));
  return px_tensor_copy_to_host(&m->acts[m->nacts - 1], m->host_logits,
                                (size_t)B * K * sizeof(float));
}

px_status_t px_model_logits(px_model_t *m, const float *x, int32_t n, float *logits) {
  int B = m->cfg.batch, K = m->cfg.num_classes;
  PX_REQUIRE(n >= 1 && n <= B, "logits of %d samples (model batch %d)", n, B);
  PX_CHECK(px__infer_host(m, x, n));
  memcpy(logits, m->host_logits, (size_t)n * K * sizeof(float));
  return PX_OK;
}

px_status_t px_model_eval_batch(px_model_t *m, const float *x, const int32_t *y, int32_t n,
                                double *loss_sum, int64_t *correct) {
  int B = m->cfg.batch, K = m->cfg.num_classes;
  PX_REQUIRE(n >= 1 && n <= B, "evaluation batch of %d samples (model batch %d)", n, B);
  for (int i = 0; i < n; i++)
    PX_REQUIRE(y[i] >= 0 && y[i] < K, "label %d of sample %d is outside [0, %d)", y[i], i, K);
  PX_CHECK(px__infer_host(m, x, n));
  double ls = 0;
  int64_t ok = 0;
  for (int i = 0; i < n; i++) {
    const float *z = m->host_logits + (size_t)i * K;
    int best = 0;
    double mx = z[0];
    for (int k = 1; k < K; k++)
      if (z[k] > mx) {
        mx = z[k];
        best = k;
      }
    double se = 0;
    for (int k = 0; k < K; k++) se += exp((double)z[k] - mx);
    ls += mx + log(se) - z[y[i]];
    ok += best == y[i];
  }
  *loss_sum += ls;
  *correct += ok;
  return PX_OK;
}
