/* Compaction: the physically smaller twin of a masked dense model.
 *
 * Works on the model graph (px_model_node) and host copies of its values.
 * Activations are joined into channel groups by the per-channel ops (batch
 * norm, residual add, global pooling); a group's channel c is live when some
 * convolution or the FC reading a tensor of the group has a non-zero weight
 * for it. Dead channels disappear from every producer's filters, every batch
 * norm of the group and every reader's input channels. A live channel whose
 * only producer filter is zero is a constant after its batch norm; when every
 * reader is a 1x1 unpadded conv feeding a batch norm, the constant is folded
 * into that batch norm's running mean and the channel goes too. See
 * prunex/export.h for the contract. */
#include <math.h>
#include <string.h>

#include "export/compact_int.h"
#include "prunex/export.h"
#include "px_check.h"

typedef px__compact_t px__cg_t;

static int px__find(int *g, int a) {
  while (g[a] != a) a = g[a] = g[g[a]];
  return a;
}

static void px__union(int *g, int a, int b) {
  a = px__find(g, a);
  b = px__find(g, b);
  if (a != b) g[a > b ? a : b] = a < b ? a : b;
}

static void px__cg_free(px__cg_t *c) {
  if (!c) return;
  for (int i = 0; c->pv && i < c->np; i++) px_free(c->pv[i]);
  for (int i = 0; c->bv && i < c->nb; i++) px_free(c->bv[i]);
  for (int i = 0; c->live && i < c->na; i++) px_free(c->live[i]);
  PX_FREE_ALL(c->pv, c->bv, c->live, c->group, c->nodes);
}

static px_status_t px__host_alloc(const px_tensor_t *t, float **out) {
  size_t n = px_tensor_numel(t);
  *out = px_malloc((n ? n : 1) * sizeof(float), "compact.host");
  return *out ? PX_OK : PX_ERR_NOMEM;
}

/* A depthwise conv: output channel c reads input channel c only, so the
 * two are one channel (tied like a batch norm's). */
static int px__depthwise(const px_model_node_t *n) {
  return n->kind == PX_NODE_CONV && n->groups > 1 && n->groups == n->c_in &&
         n->groups == n->c_out;
}

/* A grouped conv that is not depthwise: its channels are tied within
 * groups, which compaction does not follow; all of its input and output
 * channels stay. */
static int px__grouped(const px_model_node_t *n) {
  return n->kind == PX_NODE_CONV && n->groups > 1 && !px__depthwise(n);
}

/* The node reading activation a, when exactly one does; else -1. */
static int px__sole_reader(const px__cg_t *c, int a) {
  int r = -1;
  for (int k = 0; k < c->nn; k++)
    if (c->nodes[k].in == a || c->nodes[k].in2 == a) {
      if (r >= 0) return -1;
      r = k;
    }
  return r;
}

/* The pixels of each input channel an FC node reads: 1 for pooled
 * features, H * W for a flattened map (VGG's classifier: its weight's
 * columns are [c_in][H * W], channel-major as PyTorch flattens, so a dead
 * channel drops a block of H * W columns). */
static size_t px__fc_area(const px_model_t *m, const px_model_node_t *n) {
  int h, w;
  return px_model_act_area(m, n->in, &h, &w) == 0 ? (size_t)h * (size_t)w : 1;
}

/* Folds the constant channels of a conv -> BN -> {1x1 conv -> BN}* chain
 * into the readers' batch norms (see the file comment). */
static void px__fold_constants(px__cg_t *c, int g) {
  int prod = -1, bn = -1, nprod = 0;
  for (int k = 0; k < c->nn; k++) {
    const px_model_node_t *n = &c->nodes[k];
    if (c->group[n->out] != g) continue;
    if (n->kind == PX_NODE_CONV) {
      prod = k;
      nprod++;
    } else if (n->kind == PX_NODE_BN) {
      if (bn >= 0) return;
      bn = k;
    } else {
      return; /* a residual add or pooling joins this group */
    }
  }
  if (nprod != 1 || bn < 0 || c->nodes[bn].in != c->nodes[prod].out) return;
  if (c->nodes[prod].groups > 1 || c->nodes[prod].b >= 0) return; /* not a zero output */
  if (px__sole_reader(c, c->nodes[prod].out) != bn) return;
  const px_model_node_t *P = &c->nodes[prod], *B = &c->nodes[bn];
  int all_1x1 = 1, nreaders = 0;
  for (int k = 0; k < c->nn; k++) {
    const px_model_node_t *n = &c->nodes[k];
    if (n->in != B->out && n->in2 != B->out) continue;
    nreaders++;
    if (n->kind != PX_NODE_CONV || n->win.kh != 1 || n->win.kw != 1 || n->win.pad_t ||
        n->win.pad_l || n->win.pad_b || n->win.pad_r)
      all_1x1 = 0;
    else {
      int nb = px__sole_reader(c, n->out);
      if (nb < 0 || c->nodes[nb].kind != PX_NODE_BN) all_1x1 = 0;
    }
  }
  if (!nreaders) return;
  size_t per_filter = (size_t)P->c_in * P->win.kh * P->win.kw;
  const float *wp = c->pv[P->w];
  for (int ch = 0; ch < P->c_out; ch++) {
    if (!c->live[g][ch]) continue;
    int zero = 1;
    for (size_t j = 0; j < per_filter && zero; j++) zero = wp[(size_t)ch * per_filter + j] == 0.0f;
    if (!zero) continue;
    /* the BN output of a zero filter: scale * (0 - mean) / sqrt(var + eps) + shift */
    double k = (double)c->pv[B->w][ch] * (0.0 - c->bv[B->rm][ch]) /
                   sqrt((double)c->bv[B->rv][ch] + B->eps) +
               c->pv[B->b][ch];
    if (B->relu && k < 0) k = 0;
    if (k != 0 && !all_1x1) continue; /* a padded reader: keep the channel */
    for (int r = 0; k != 0 && r < c->nn; r++) {
      const px_model_node_t *R = &c->nodes[r];
      if (R->in != B->out) continue;
      const px_model_node_t *nb = &c->nodes[px__sole_reader(c, R->out)];
      const float *wr = c->pv[R->w];
      for (int o = 0; o < R->c_out; o++)
        c->bv[nb->rm][o] -= (float)((double)wr[(size_t)o * R->c_in + ch] * k);
    }
    c->live[g][ch] = 0;
  }
}

/* Concat n's channel c is input k's channel c - offset_k: a live output
 * channel keeps its input channel, and the output's live mask becomes the
 * inputs' side by side. Returns 1 when a mask changed. */
static int px__concat_sync(px__cg_t *c, const px_model_node_t *n) {
  uint8_t *out = c->live[c->group[n->out]];
  const int src[2] = {n->in, n->in2};
  int changed = 0, off = 0;
  for (int s = 0; s < 2; s++) {
    uint8_t *in = c->live[c->group[src[s]]];
    int ch = n->kind == PX_NODE_CONCAT && s == 0 ? n->c_in : n->c_out - n->c_in;
    for (int i = 0; i < ch; i++) {
      if (out[off + i] && !in[i]) in[i] = 1, changed = 1;
      if (in[i] && !out[off + i]) out[off + i] = 1, changed = 1;
    }
    off += ch;
  }
  return changed;
}

/* The plan's arrays for m's graph (px__compact_update fills them). */
static px_status_t px__plan_alloc(const px_model_t *m, px__cg_t *c) {
  c->nn = px_model_num_nodes(m);
  c->na = px_model_num_acts(m);
  c->np = px_model_num_params(m);
  c->nb = px_model_num_buffers(m);
  c->nodes = px_calloc((size_t)c->nn, sizeof *c->nodes, "compact.nodes");
  c->pv = px_calloc((size_t)c->np, sizeof *c->pv, "compact.pv");
  c->bv = px_calloc((size_t)(c->nb ? c->nb : 1), sizeof *c->bv, "compact.bv");
  c->group = px_calloc((size_t)c->na, sizeof *c->group, "compact.group");
  c->live = px_calloc((size_t)c->na, sizeof *c->live, "compact.live");
  if (!c->nodes || !c->pv || !c->bv || !c->group || !c->live) return PX_ERR_NOMEM;
  for (int k = 0; k < c->nn; k++) PX_CHECK(px_model_node(m, k, &c->nodes[k]));
  for (int i = 0; i < c->np; i++) PX_CHECK(px__host_alloc(px_model_param(m, i)->value, &c->pv[i]));
  for (int i = 0; i < c->nb; i++) PX_CHECK(px__host_alloc(px_model_buffer(m, i)->value, &c->bv[i]));
  for (int a = 0; a < c->na; a++) c->group[a] = a;
  for (int k = 0; k < c->nn; k++) {
    const px_model_node_t *n = &c->nodes[k];
    if (n->kind == PX_NODE_BN || n->kind == PX_NODE_GAP || n->kind == PX_NODE_ADD ||
        n->kind == PX_NODE_REORDER || n->kind == PX_NODE_MAXPOOL || n->kind == PX_NODE_AVGPOOL ||
        n->kind == PX_NODE_ACT || n->kind == PX_NODE_MUL || px__depthwise(n))
      px__union(c->group, n->in, n->out);
    if (n->kind == PX_NODE_ADD || n->kind == PX_NODE_MUL) px__union(c->group, n->in2, n->out);
  }
  for (int a = 0; a < c->na; a++) c->group[a] = px__find(c->group, a);
  for (int a = 0; a < c->na; a++) {
    int g = c->group[a];
    if (c->live[g]) continue;
    int ch = px_model_act_channels(m, a);
    c->live[g] = px_calloc((size_t)ch, 1, "compact.live");
    if (!c->live[g]) return PX_ERR_NOMEM;
  }
  return PX_OK;
}

int px__compact_round_width(int n, int round) {
  if (round == PX__COMPACT_ROUND_CL) {
    if (n > 8) return (n + 15) / 16 * 16;
    int t = n > 0;
    while (t < n) t *= 2;
    return t;
  }
  return round > 1 ? (n + round - 1) / round * round : n;
}

/* Widens every channel group to its px__compact_round_width (the
 * lowest dropped ones first; all of them when fewer), so that the compact
 * model's layers have widths the engine's fast kernels take. A dropped
 * channel that comes back is read by no weight: it changes nothing the
 * model computes. A graph with a concatenation keeps its exact widths (the
 * offsets tie its groups). */
static void px__round_groups(px__cg_t *c, const px_model_t *m) {
  for (int k = 0; k < c->nn; k++)
    if (c->nodes[k].kind == PX_NODE_CONCAT) return;
  for (int a = 0; a < c->na; a++) {
    if (c->group[a] != a) continue;
    int ch = px_model_act_channels(m, a), n = 0;
    for (int i = 0; i < ch; i++) n += c->live[a][i];
    const int t = px__compact_round_width(n, c->round);
    for (int i = 0; i < ch && n < t; i++)
      if (!c->live[a][i]) c->live[a][i] = 1, n++;
  }
}

px_status_t px__compact_update(px__compact_t *c, const px_model_t *m) {
  for (int i = 0; i < c->np; i++) {
    const px_tensor_t *t = px_model_param(m, i)->value;
    PX_CHECK(px_tensor_copy_to_host(t, c->pv[i], px_tensor_numel(t) * sizeof(float)));
  }
  for (int i = 0; i < c->nb; i++) {
    const px_tensor_t *t = px_model_buffer(m, i)->value;
    PX_CHECK(px_tensor_copy_to_host(t, c->bv[i], px_tensor_numel(t) * sizeof(float)));
  }
  for (int a = 0; a < c->na; a++)
    if (c->group[a] == a) memset(c->live[a], 0, (size_t)px_model_act_channels(m, a));
  memset(c->live[c->group[0]], 1, (size_t)px_model_act_channels(m, 0)); /* the images */
  memset(c->live[c->group[c->na - 1]], 1, (size_t)px_model_act_channels(m, c->na - 1));
  for (int k = 0; k < c->nn; k++) {
    const px_model_node_t *n = &c->nodes[k];
    /* a LayerNorm's statistics are over all of its channels: dropping one
     * would change the others' normalisation, so its input and output stay
     * whole (a producer conv's filters there too) */
    /* a channel shuffle or slice (ShuffleNet's) moves channels between
     * groups that compaction does not tie: every channel on either side
     * stays (its producers are left dense) */
    if (px__grouped(n) || n->kind == PX_NODE_LN || n->kind == PX_NODE_SHUFFLE ||
        n->kind == PX_NODE_SLICE) {
      memset(c->live[c->group[n->in]], 1, (size_t)n->c_in);
      memset(c->live[c->group[n->out]], 1, (size_t)n->c_out);
    }
    /* an FC's outputs stay (the FC layers are not pruned; a hidden one's
     * features feed the next FC, through activations) */
    if (n->kind == PX_NODE_FC) memset(c->live[c->group[n->out]], 1, (size_t)n->c_out);
    if ((n->kind != PX_NODE_CONV && n->kind != PX_NODE_FC) || n->groups > 1) continue;
    uint8_t *live = c->live[c->group[n->in]];
    size_t kk = n->kind == PX_NODE_CONV ? (size_t)n->win.kh * n->win.kw : px__fc_area(m, n);
    const float *w = c->pv[n->w];
    for (int o = 0; o < n->c_out; o++)
      for (int ch = 0; ch < n->c_in; ch++) {
        if (live[ch]) continue;
        const float *p = w + ((size_t)o * n->c_in + ch) * kk;
        for (size_t j = 0; j < kk; j++)
          if (p[j] != 0.0f) {
            live[ch] = 1;
            break;
          }
      }
  }
  for (int a = 0; a < c->na && c->fold; a++)
    if (c->group[a] == a && a != c->group[0]) px__fold_constants(c, a);
  /* a group must keep one channel to be a tensor at all; a dead one is
   * exact. A concatenation's output keeps exactly its inputs' kept channels,
   * at their offsets: repeated until nothing changes (nested concats) */
  for (int changed = 1; changed;) {
    changed = 0;
    for (int a = 0; a < c->na; a++) {
      if (c->group[a] != a) continue;
      int ch = px_model_act_channels(m, a), any = 0;
      for (int i = 0; i < ch && !any; i++) any = c->live[a][i];
      if (!any) c->live[a][0] = 1;
    }
    for (int k = c->nn - 1; k >= 0; k--)
      if (c->nodes[k].kind == PX_NODE_CONCAT) changed |= px__concat_sync(c, &c->nodes[k]);
  }
  if (c->round > 1 || c->round == PX__COMPACT_ROUND_CL) px__round_groups(c, m);
  return PX_OK;
}

/* Indices of the kept channels of activation a's group into idx (room for
 * all); returns their number. */
int px__compact_kept(const px__compact_t *c, const px_model_t *m, int a, int32_t *idx) {
  const uint8_t *live = c->live[c->group[a]];
  int n = 0, ch = px_model_act_channels(m, a);
  for (int i = 0; i < ch; i++)
    if (live[i]) idx[n++] = i;
  return n;
}

px_status_t px__compact_plan(const px_model_t *dense, int fold, px__compact_t **out) {
  *out = NULL;
  px__compact_t *c = px_calloc(1, sizeof *c, "compact.plan");
  if (!c) return PX_ERR_NOMEM;
  c->fold = fold;
  px_status_t st;
  PX_CHECK_GOTO(px__plan_alloc(dense, c), st, fail);
  int maxc = 1;
  size_t maxn = 1;
  for (int a = 0; a < c->na; a++)
    if (px_model_act_channels(dense, a) > maxc) maxc = px_model_act_channels(dense, a);
  for (int i = 0; i < c->np; i++)
    if (px_tensor_numel(px_model_param(dense, i)->value) > maxn)
      maxn = px_tensor_numel(px_model_param(dense, i)->value);
  c->ki = px_malloc((size_t)maxc * sizeof *c->ki, "compact.idx");
  c->ko = px_malloc((size_t)maxc * sizeof *c->ko, "compact.idx");
  c->tmp = px_malloc(maxn * sizeof *c->tmp, "compact.tmp");
  c->src = px_malloc(maxn * sizeof *c->src, "compact.src");
  if (!c->ki || !c->ko || !c->tmp || !c->src) {
    st = PX_ERR_NOMEM;
    goto fail;
  }
  PX_CHECK_GOTO(px__compact_update(c, dense), st, fail);
  *out = c;
  return PX_OK;
fail:
  px__compact_destroy(c);
  return st;
}

void px__compact_destroy(px__compact_t *c) {
  if (!c) return;
  PX_FREE_ALL(c->ki, c->ko, c->tmp, c->src);
  px__cg_free(c);
  px_free(c);
}

px_status_t px__compact_build(px__compact_t *c, const px_model_t *dense, px_ops_t *ops,
                              int32_t batch, px_model_t **out) {
  *out = NULL;
  int nconv = 0;
  for (int k = 0; k < c->nn; k++) nconv += c->nodes[k].kind == PX_NODE_CONV;
  int32_t *widths = px_malloc((size_t)(nconv ? nconv : 1) * sizeof *widths, "compact.widths");
  if (!widths) return PX_ERR_NOMEM;
  int nw = 0;
  for (int k = 0; k < c->nn; k++)
    if (c->nodes[k].kind == PX_NODE_CONV)
      widths[nw++] = px__compact_kept(c, dense, c->nodes[k].out, c->ko);
  px_model_config_t cfg = *px_model_config(dense);
  cfg.batch = batch;
  cfg.widths = widths;
  cfg.nwidths = nw;
  px_model_t *cm = NULL;
  px_status_t st;
  PX_CHECK_GOTO(px_model_create(ops, &cfg, &cm), st, done);
  /* the same parameters in the same order (a compact model may add layout
   * conversions, which have none) */
  if (px_model_num_params(cm) != c->np || px_model_num_buffers(cm) != c->nb) {
    st = px_set_error(PX_ERR_INTERNAL, "compact model has a different graph");
    goto done;
  }
  PX_CHECK_GOTO(px__compact_fill(c, dense, cm), st, done);
  *out = cm;
  cm = NULL;
  st = PX_OK;
done:
  px_model_destroy(cm);
  px_free(widths);
  return st;
}

/* The dense indices of a conv's kept filters x kept input channels (a
 * depthwise conv's kept filters; a grouped one keeps all) into src;
 * returns their number. */
static size_t px__conv_src(const px_model_node_t *n, const int32_t *ki, int nin, const int32_t *ko,
                           int nout, int32_t *src) {
  size_t kk = (size_t)n->win.kh * n->win.kw, j = 0;
  int per = n->c_in / (n->groups > 1 ? n->groups : 1); /* input channels per filter */
  for (int o = 0; o < nout; o++) {
    if (n->groups > 1) { /* a depthwise or (all kept) grouped filter: whole */
      for (size_t e = 0; e < (size_t)per * kk; e++)
        src[j++] = (int32_t)((size_t)ko[o] * per * kk + e);
      continue;
    }
    for (int i = 0; i < nin; i++)
      for (size_t e = 0; e < kk; e++)
        src[j++] = (int32_t)(((size_t)ko[o] * n->c_in + ki[i]) * kk + e);
  }
  return j;
}

/* Called for each tensor of the compact model with the dense indices of its
 * elements in order: parameter (buffer 0) or BN statistic (buffer 1) i. */
typedef px_status_t (*px__compact_visit_fn)(void *ctx, int buffer, int i, const int32_t *src,
                                            size_t n);

/* The one traversal of the kept entries: every tensor of the compact model
 * once, its elements in the compact layout. */
static px_status_t px__compact_walk(px__compact_t *c, const px_model_t *dense,
                                    px__compact_visit_fn fn, void *ctx) {
  int32_t *ki = c->ki, *ko = c->ko, *src = c->src;
  for (int k = 0; k < c->nn; k++) {
    const px_model_node_t *n = &c->nodes[k];
    int nin = px__compact_kept(c, dense, n->in, ki), nout = px__compact_kept(c, dense, n->out, ko);
    if (n->kind == PX_NODE_CONV) {
      PX_CHECK(fn(ctx, 0, n->w, src, px__conv_src(n, ki, nin, ko, nout, src)));
      if (n->b >= 0) PX_CHECK(fn(ctx, 0, n->b, ko, (size_t)nout));
    } else if (n->kind == PX_NODE_BN) {
      PX_CHECK(fn(ctx, 0, n->w, ko, (size_t)nout));
      PX_CHECK(fn(ctx, 0, n->b, ko, (size_t)nout));
      PX_CHECK(fn(ctx, 1, n->rm, ko, (size_t)nout));
      PX_CHECK(fn(ctx, 1, n->rv, ko, (size_t)nout));
    } else if (n->kind == PX_NODE_LN) {
      PX_CHECK(fn(ctx, 0, n->w, ko, (size_t)nout));
      PX_CHECK(fn(ctx, 0, n->b, ko, (size_t)nout));
    } else if (n->kind == PX_NODE_FC) {
      size_t j = 0, hw = px__fc_area(dense, n);
      for (int o = 0; o < n->c_out; o++)
        for (int i = 0; i < nin; i++)
          for (size_t e = 0; e < hw; e++)
            src[j++] = (int32_t)(((size_t)o * n->c_in + ki[i]) * hw + e);
      PX_CHECK(fn(ctx, 0, n->w, src, j));
      for (int o = 0; o < n->c_out; o++) src[o] = o;
      PX_CHECK(fn(ctx, 0, n->b, src, (size_t)n->c_out));
    }
  }
  return PX_OK;
}

typedef struct {
  px__compact_t *c;
  px_model_t *cm;
} px__fill_ctx_t;

/* Gathers the plan's values into the compact model's tensor. */
static px_status_t px__fill_visit(void *ctx, int buffer, int i, const int32_t *src, size_t n) {
  px__fill_ctx_t *f = ctx;
  const float *v = buffer ? f->c->bv[i] : f->c->pv[i];
  for (size_t j = 0; j < n; j++) f->c->tmp[j] = v[src[j]];
  px_tensor_t *dst = buffer ? px_model_buffer(f->cm, i)->value : px_model_param(f->cm, i)->value;
  return px_tensor_copy_from_host(dst, f->c->tmp, n * sizeof(float));
}

px_status_t px__compact_fill(px__compact_t *c, const px_model_t *dense, px_model_t *cm) {
  px__fill_ctx_t f = {c, cm};
  return px__compact_walk(c, dense, px__fill_visit, &f);
}

typedef struct {
  const px_model_t *dense, *cm;
  int64_t *pmap, *bmap;
} px__index_ctx_t;

/* Offset of a model tensor's data in its flat family (CPU models). */
static int64_t px__flat_off(const px_model_t *m, int buffer, int i) {
  const float *base = (buffer ? px_model_flat_buffers(m) : px_model_flat_params(m))->data;
  const float *d = buffer ? px_model_buffer(m, i)->value->data : px_model_param(m, i)->value->data;
  return d - base;
}

static px_status_t px__index_visit(void *ctx, int buffer, int i, const int32_t *src, size_t n) {
  px__index_ctx_t *x = ctx;
  int64_t *map = (buffer ? x->bmap : x->pmap) + px__flat_off(x->cm, buffer, i);
  int64_t doff = px__flat_off(x->dense, buffer, i);
  for (size_t j = 0; j < n; j++) map[j] = doff + src[j];
  return PX_OK;
}

px_status_t px__compact_index(px__compact_t *c, const px_model_t *dense, const px_model_t *cm,
                              int64_t *pmap, int64_t *bmap) {
  size_t np = px_tensor_numel(px_model_flat_params(cm));
  size_t nb = px_tensor_numel(px_model_flat_buffers(cm));
  for (size_t j = 0; j < np; j++) pmap[j] = -1;
  for (size_t j = 0; j < nb; j++) bmap[j] = -1;
  px__index_ctx_t x = {dense, cm, pmap, bmap};
  PX_CHECK(px__compact_walk(c, dense, px__index_visit, &x));
  for (size_t j = 0; j < np + nb; j++)
    if ((j < np ? pmap[j] : bmap[j - np]) < 0)
      return px_set_error(PX_ERR_STATE, "compact %s entry %zu has no dense source",
                          j < np ? "parameter" : "BN statistic", j < np ? j : j - np);
  return PX_OK;
}

/* Whether compaction follows every node of dense: the built-in layers and
 * the imported graphs' operators (ACT, MUL, CONCAT, depthwise and grouped
 * convs, biases) on the CPU engine, which alone runs them. */
static int px__compact_takes(const px_model_t *dense) {
  return px_model_compactable(dense) ||
         px_ops_device(px_model_ops(dense)).kind == PX_DEVICE_CPU;
}

/* A graph compaction does not take (px__compact_takes): its twin is
 * a copy of the same graph and values (pruned weights zero, shapes kept). */
static px_status_t px__copy_model(const px_model_t *dense, px_ops_t *ops, int32_t batch,
                                  px_model_t **out) {
  px_model_config_t cfg = *px_model_config(dense);
  cfg.batch = batch;
  PX_CHECK(px_model_create(ops, &cfg, out));
  px_status_t st = PX_OK;
  for (int f = 0; f < 2 && st == PX_OK; f++) {
    const px_tensor_t *src = f ? px_model_flat_buffers(dense) : px_model_flat_params(dense);
    const px_tensor_t *dst = f ? px_model_flat_buffers(*out) : px_model_flat_params(*out);
    size_t bytes = px_tensor_numel(src) * sizeof(float);
    float *tmp = px_malloc(bytes, "compact.copy");
    if (!tmp) st = PX_ERR_NOMEM;
    if (st == PX_OK) st = px_tensor_copy_to_host(src, tmp, bytes);
    if (st == PX_OK) st = px_tensor_copy_from_host((px_tensor_t *)dst, tmp, bytes);
    px_free(tmp);
  }
  if (st < 0) {
    px_model_destroy(*out);
    *out = NULL;
  }
  return st;
}

px_status_t px_model_compact(const px_model_t *dense, px_ops_t *ops, int32_t batch,
                             px_model_t **out) {
  PX_REQUIRE(dense && ops && out && batch >= 1, "px_model_compact: bad argument");
  *out = NULL;
  if (!px__compact_takes(dense)) return px__copy_model(dense, ops, batch, out);
  px__compact_t *c;
  PX_CHECK(px__compact_plan(dense, 1, &c));
  px_status_t st = px__compact_build(c, dense, ops, batch, out);
  px__compact_destroy(c);
  return st;
}
