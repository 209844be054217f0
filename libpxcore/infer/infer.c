/* The inference engine (infer_int.h): a model's graph turned into a list of
 * steps once, at creation.
 *
 * A convolution (grouped, depthwise or biased ones too) absorbs the batch
 * norm that is its only reader (folded into its filters and a bias) with
 * that norm's ReLU or the activation node (LeakyReLU, ReLU6, sigmoid, hard
 * sigmoid and swish, SiLU, GELU, tanh) that alone reads it (eltwise post-ops), and then the residual add that is
 * the result's only reader when the add's other input already exists and
 * nothing after the convolution but the add reads it: the convolution
 * then accumulates into that input's buffer (oneDNN's sum post-op) and
 * applies the add's ReLU. What is left (a norm, an activation or an add
 * that could not be fused, the pooling, the classifier, the imported
 * graphs' SE gate multiply and channel concatenation) runs in plain loops; layout
 * conversions (REORDER nodes) are the identity in NHWC and vanish. Buffers
 * ("slots") are shared by activations whose lifetimes do not overlap, so a
 * chunk's working set is a few activations, which the batch is sized to
 * keep in cache.
 *
 * The narrow 3 x 3 convolutions (at most PX__PLANAR_MAX_C channels either
 * side, maps at least PX__PLANAR_MIN_W wide: the first stages of a pruned
 * ResNet) run on the planar kernels of p2conv.h instead, vectorised over
 * pixels rather than channels, where the CPU has them (bf16: AVX512-BF16,
 * f32: AVX-512). A run of them keeps its activations in their layout from
 * the images on; a PLOUT step turns one into NHWC where another step reads
 * it, a PLIN step an NHWC one into the layout where such a convolution
 * reads it. On the quickstart's model, with the reruns gathered, they took
 * the bf16 evaluation from 2.05 to 1.43 s on a Zen 5 core (raw bf16: 1.70
 * to 1.16 s; docs/performance.md). */
#include <math.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "infer/infer_int.h"
#include "infer/p2conv.h"
#include "nn/cpu/px_cpu_int.h"
#include "nn/px_graph_ops.h"

#define PX__INFER_MARGIN_REL 0.05f
#define PX__INFER_MARGIN_ABS 0.2f

enum {
  PX__S_CONV, PX__S_BN, PX__S_BN_TRAIN, PX__S_ADD, PX__S_GAP, PX__S_FC, PX__S_ACT, PX__S_MUL,
  PX__S_CONCAT, PX__S_POOL, PX__S_PLOUT, PX__S_PLIN,
  PX__S_LN /* LayerNorm over channels (pw, pb its scale and shift; eps) */
};

/* The convolutions that run on the planar kernels (p2conv.h: a bf16 net's
 * pair-planar one where the CPU has AVX512-BF16, an f32 net's planar one
 * where it has AVX-512): 3 x 3, stride 1, both sides at most this many
 * channels (oneDNN's kernels block channels by 16 and 32, and waste most
 * of a narrower layer's lanes) and maps at least this wide (the kernels'
 * vectors are 16 pixels of a row). */
#define PX__PLANAR_MAX_C 32
#define PX__PLANAR_MIN_W 16

typedef struct {
  int kind;
  int node, bn;           /* graph nodes: the step's (CONV: the conv), the folded BN or -1 */
  int sum;                /* CONV: accumulates into in2's buffer (fused residual add) */
  int relu;               /* BN, BN_TRAIN, ADD: a ReLU last */
  int act, act_mid;       /* CONV, ACT: the activation last (px__act_t; -1 none: the BN's
                             ReLU, an ACT node's, or the fused add's ReLU) and, with a
                             fused add, the one before the sum */
  float alpha, alpha_mid; /* their LeakyReLU slopes */
  int groups;             /* CONV: 1, or grouped (depthwise) */
  int cb;                 /* CONV: the model's bias parameter, -1 if none */
  int maxpool;            /* POOL: 1 max (padding ignored), 0 average (padding counted) */
  int in, in2, out;       /* activations (REORDERs resolved); in2 -1 unless sum / ADD */
  int sin, sin2, sout;    /* their slots */
  int c_in, c_out, h, w, oh, ow, k, stride, pad;
  px_window_t win;        /* CONV, POOL: the node's whole window (k, stride, pad: its kh,
                             stride_h, pad_t) */
  int xbf, ybf;           /* bf16 net: input / output activation stored as bf16 */
  int plain_bn;           /* BN_TRAIN: the plain loops (oneDNN has no fast code for it) */
  int planar;             /* CONV: on the planar kernel of the net's precision, input and
                             output in its layout (PLOUT / PLIN steps convert for the others) */
  void *wq;               /* planar CONV: the weights as the kernel reads them */
  int pw, pb, rm, rv;     /* BN_TRAIN: the model's scale, shift, running mean and var */
  double eps;             /* BN_TRAIN: the batch norm's epsilon (px_model_node_t's) */
  float momentum;         /* BN_TRAIN: its momentum */
  float *wf;              /* CONV [c_out][c_in/groups][k][k] folded, FC [c_out][c_in], BN [c_out]
                             scale */
  float *bf;              /* [c_out] folded bias (BN: shift) */
  void *wp;               /* CONV: weights in the primitive's layout (wf when plain) */
  px__exec_t fwd, wreo;   /* CONV: the primitive; plain -> primitive weights; BN_TRAIN:
                             oneDNN's training-mode batch norm */
  int have_fwd, have_wreo;
  float *bstat;           /* BN_TRAIN: [2][c_out] batch mean and biased variance */
  void *ws;               /* BN_TRAIN with ReLU: the primitive's workspace */
} px__istep_t;

struct px__infer {
  px_model_t *m;
  px_ops_t *ops;
  int train_bn;          /* 1: BN in training mode (batch statistics; running ones updated) */
  float calib_m;         /* > 0: the momentum of those updates instead of each layer's */
  double *stat;          /* [2][max channels] train_bn's per-channel sums */
  int32_t batch, classes, in_c, in_h, in_w;
  int nsteps;
  px__istep_t *steps;    /* [nsteps] */
  int nslots;
  float **slot;          /* [nslots] each [slot_floats] */
  size_t slot_floats;
  int in_slot, out_slot; /* the images (NHWC), the logits [batch][classes] */
  float *logits;         /* [batch][classes] eval's scratch */
  float *logits2;        /* [batch][classes] px__infer_compare's */
  int bf16;              /* convolutions in bf16 (activations between them too) */
  int in_bf;             /* bf16: the input slot holds bf16 */
  int in_planar;         /* the input slot holds the planar layout */
  px__infer_t *exact;    /* bf16 with the check: the f32 twin that reruns close calls */
  float *gather;         /* [exact batch][in_c*in_h*in_w] the samples it reruns */
  int32_t *pend;         /* [exact batch] their rows (px__logits) or labels (px__infer_eval) */
  int32_t npend;         /* px__infer_eval's samples gathered and not yet rerun */
  int64_t rechecked;
};

int32_t px__infer_batch(const px__infer_t *net) { return net->batch; }
int px__infer_is_bf16(const px__infer_t *net) { return net->bf16; }
int64_t px__infer_rechecked(const px__infer_t *net) { return net->rechecked; }

int px__infer_convs(const px__infer_t *net, int *planar) {
  int n = 0;
  *planar = 0;
  for (int i = 0; i < net->nsteps; i++) {
    n += net->steps[i].kind == PX__S_CONV;
    *planar += net->steps[i].planar;
  }
  return n;
}

static int px__bf16_fast_v;
static pthread_once_t px__bf16_once = PTHREAD_ONCE_INIT;

static void px__bf16_decide(void) {
  const char *env = getenv("PX_INFER_PRECISION");
  dnnl_cpu_isa_t isa = dnnl_get_effective_cpu_isa();
  int amx = (isa & dnnl_cpu_isa_avx512_core_amx) == dnnl_cpu_isa_avx512_core_amx;
  int dot = (isa & dnnl_cpu_isa_avx512_core_bf16) == dnnl_cpu_isa_avx512_core_bf16;
  px__bf16_fast_v = env && !strcmp(env, "f32") ? 0 : env && !strcmp(env, "bf16") ? 1 : dot;
  px_log(PX_LOG_INFO, "inference engine: %s convolutions (oneDNN ISA %s%s)",
         px__bf16_fast_v ? "bf16" : "f32",
         amx ? "with AMX" : dot ? "with AVX512-BF16, without AMX" : "without bf16 instructions",
         env ? ", PX_INFER_PRECISION set" : "");
}

int px__infer_bf16_fast(void) {
  pthread_once(&px__bf16_once, px__bf16_decide);
  return px__bf16_fast_v;
}

/* bf16 <-> f32: round to nearest even (finite values) / exact. */
static inline uint16_t px__to_bf16(float f) {
  uint32_t u;
  memcpy(&u, &f, sizeof u);
  u += 0x7fffu + ((u >> 16) & 1u);
  return (uint16_t)(u >> 16);
}

static inline float px__from_bf16(uint16_t h) {
  uint32_t u = (uint32_t)h << 16;
  float f;
  memcpy(&f, &u, sizeof f);
  return f;
}

/* ---- graph analysis ----------------------------------------------------------------- */

typedef struct {
  int nn, na;
  px_model_node_t *nodes;
  int *alias;   /* [na] activation a is stored as alias[a] (REORDERs resolved) */
  int *ch, *h, *w; /* [na] */
} px__graph_t;

static int px__g_reads(const px__graph_t *g, int k, int a) {
  const px_model_node_t *n = &g->nodes[k];
  if (n->kind == PX_NODE_REORDER) return 0;
  return g->alias[n->in] == a || (n->in2 >= 0 && g->alias[n->in2] == a);
}

/* The only node reading a (-1 when none or several); *last: the latest. */
static int px__g_sole_reader(const px__graph_t *g, int a, int *last) {
  int r = -1, cnt = 0;
  *last = -1;
  for (int k = 0; k < g->nn; k++)
    if (px__g_reads(g, k, a)) {
      r = k;
      cnt++;
      *last = k;
    }
  return cnt == 1 ? r : -1;
}

/* Whether any node other than except, at or after node from, reads a. */
static int px__g_read_after(const px__graph_t *g, int a, int from, int except) {
  for (int k = from; k < g->nn; k++)
    if (k != except && px__g_reads(g, k, a)) return 1;
  return 0;
}

/* A CONV step: the convolution absorbs the batch norm that alone reads it
 * (inference nets: folded), then the activation that alone reads the result
 * (the norm's ReLU or an ACT node: an eltwise post-op), then the residual add
 * that alone reads that when the add's other input already exists and is
 * read by nothing after it (the sum post-op into that input's buffer, the
 * add's ReLU after it). An activation oneDNN has no post-op for stays a
 * step of its own. */
static int px__act_fuses(int act, float alpha);

static void px__plan_conv(px__infer_t *net, px__graph_t *g, int k, int *used, px__istep_t *s) {
  const px_model_node_t *n = &g->nodes[k];
  s->kind = PX__S_CONV;
  s->k = n->kernel;
  s->stride = n->stride;
  s->pad = n->pad;
  s->win = n->win;
  s->groups = n->groups > 1 ? n->groups : 1;
  s->cb = n->b;
  s->relu = 0;
  int last, r = px__g_sole_reader(g, s->out, &last);
  if (r >= 0 && g->nodes[r].kind == PX_NODE_BN && !net->train_bn) {
    s->bn = r;
    used[r] = 1;
    s->out = g->alias[g->nodes[r].out];
    if (g->nodes[r].relu) s->act = PX__ACT_RELU;
    r = px__g_sole_reader(g, s->out, &last);
  }
  if (s->act < 0 && r >= 0 && g->nodes[r].kind == PX_NODE_ACT &&
      px__act_fuses(g->nodes[r].act, g->nodes[r].alpha)) {
    used[r] = 1;
    s->act = g->nodes[r].act;
    s->alpha = g->nodes[r].alpha;
    s->out = g->alias[g->nodes[r].out];
    r = px__g_sole_reader(g, s->out, &last);
  }
  if (net->train_bn || r < 0 || g->nodes[r].kind != PX_NODE_ADD) return;
  const px_model_node_t *A = &g->nodes[r];
  int other = g->alias[A->in] == s->out ? g->alias[A->in2] : g->alias[A->in];
  int produced = other == 0;
  for (int j = 0; j < k && !produced; j++)
    produced = g->nodes[j].kind != PX_NODE_REORDER && g->alias[g->nodes[j].out] == other;
  if (other == s->out || !produced || px__g_read_after(g, other, k, r)) return;
  used[r] = 1;
  s->sum = 1;
  s->act_mid = s->act;
  s->alpha_mid = s->alpha;
  s->act = A->relu ? PX__ACT_RELU : -1;
  s->alpha = 0;
  s->in2 = other;
  s->out = g->alias[A->out];
}

static px_status_t px__plan_steps(px__infer_t *net, px__graph_t *g) {
  int *used = px_calloc((size_t)g->nn, sizeof *used, "infer.used");
  if (!used) return PX_ERR_NOMEM;
  px_status_t st = PX_OK;
  for (int k = 0; k < g->nn; k++) {
    const px_model_node_t *n = &g->nodes[k];
    if (used[k] || n->kind == PX_NODE_REORDER) continue;
    px__istep_t *s = &net->steps[net->nsteps++];
    memset(s, 0, sizeof *s);
    s->node = k;
    s->bn = -1;
    s->cb = -1;
    s->act = s->act_mid = -1;
    s->groups = 1;
    s->in = g->alias[n->in];
    s->in2 = n->in2 >= 0 ? g->alias[n->in2] : -1;
    s->out = g->alias[n->out];
    s->relu = n->relu;
    s->c_in = g->ch[s->in];
    s->c_out = g->ch[s->out];
    s->h = g->h[s->in];
    s->w = g->w[s->in];
    s->oh = g->h[s->out];
    s->ow = g->w[s->out];
    switch (n->kind) {
      case PX_NODE_CONV: px__plan_conv(net, g, k, used, s); break;
      case PX_NODE_BN:
        s->kind = net->train_bn ? PX__S_BN_TRAIN : PX__S_BN;
        s->pw = n->w;
        s->pb = n->b;
        s->rm = n->rm;
        s->rv = n->rv;
        s->eps = n->eps;
        s->momentum = n->momentum;
        break;
      case PX_NODE_ADD: s->kind = PX__S_ADD; break;
      case PX_NODE_GAP: s->kind = PX__S_GAP; break;
      case PX_NODE_FC: s->kind = PX__S_FC; break;
      case PX_NODE_ACT:
        s->kind = PX__S_ACT;
        s->act = n->act;
        s->alpha = n->alpha;
        break;
      case PX_NODE_MUL: s->kind = PX__S_MUL; break;
      case PX_NODE_LN:
        s->kind = PX__S_LN;
        s->pw = n->w;
        s->pb = n->b;
        s->eps = n->eps;
        break;
      case PX_NODE_CONCAT: s->kind = PX__S_CONCAT; break;
      case PX_NODE_MAXPOOL:
      case PX_NODE_AVGPOOL:
        s->kind = PX__S_POOL;
        s->maxpool = n->kind == PX_NODE_MAXPOOL;
        s->k = n->kernel;
        s->stride = n->stride;
        s->pad = n->pad;
        s->win = n->win;
        break;
      default:
        st = px_set_error(PX_ERR_INVALID, "inference: node %d has an unknown kind %d", k,
                          (int)n->kind);
        goto done;
    }
  }
done:
  px_free(used);
  return st;
}

/* Slots: a step's output takes a free slot (or, fused with an add, the
 * slot of the add's other input); inputs free theirs after their last step. */
static px_status_t px__plan_slots(px__infer_t *net, int na, int logits) {
  int *last = px_malloc((size_t)na * sizeof *last, "infer.last");
  int *slot_of = px_malloc((size_t)na * sizeof *slot_of, "infer.slot_of");
  int *busy = px_calloc((size_t)na + 1, sizeof *busy, "infer.busy");
  px_status_t st = PX_OK;
  if (!last || !slot_of || !busy) {
    st = PX_ERR_NOMEM;
    goto done;
  }
  for (int a = 0; a < na; a++) last[a] = -1, slot_of[a] = -1;
  for (int i = 0; i < net->nsteps; i++) {
    last[net->steps[i].in] = i;
    if (net->steps[i].in2 >= 0) last[net->steps[i].in2] = i;
  }
  slot_of[0] = 0;
  busy[0] = 1;
  net->nslots = 1;
  for (int i = 0; i < net->nsteps; i++) {
    px__istep_t *s = &net->steps[i];
    s->sin = slot_of[s->in];
    s->sin2 = s->in2 >= 0 ? slot_of[s->in2] : -1;
    if (s->sin < 0 || (s->in2 >= 0 && s->sin2 < 0)) {
      st = px_set_error(PX_ERR_INVALID, "inference: step %d reads an activation not computed", i);
      goto done;
    }
    if (s->sum) {
      s->sout = s->sin2;
    } else {
      int f = 0;
      while (f < net->nslots && busy[f]) f++;
      if (f == net->nslots) net->nslots++;
      s->sout = f;
      busy[f] = 1;
    }
    slot_of[s->out] = s->sout;
    if (last[s->in] == i && s->sin != s->sout) busy[s->sin] = 0;
    if (s->in2 >= 0 && last[s->in2] == i && s->sin2 != s->sout) busy[s->sin2] = 0;
  }
  net->in_slot = 0;
  net->out_slot = slot_of[logits];
  if (net->out_slot < 0) st = px_set_error(PX_ERR_INVALID, "inference: the logits are not computed");
done:
  PX_FREE_ALL(last, slot_of, busy);
  return st;
}

/* bf16 net: which activations are stored as bf16. Those that only
 * convolutions (and the global pooling) read and that a convolution with a
 * bf16 input writes (or the images); a fused add's two sides (one buffer)
 * agree. Everything the plain loops of BN, ADD and FC touch stays f32. */
static px_status_t px__plan_bf16(px__infer_t *net, int na) {
  uint8_t *bf = px_malloc((size_t)na, "infer.bf16");
  if (!bf) return PX_ERR_NOMEM;
  memset(bf, 1, (size_t)na);
  for (int i = 0; i < net->nsteps; i++) {
    const px__istep_t *s = &net->steps[i];
    if (s->kind == PX__S_CONV) continue;
    if (s->kind != PX__S_GAP) bf[s->in] = 0;
    if (s->in2 >= 0) bf[s->in2] = 0;
    bf[s->out] = 0;
  }
  for (int changed = 1; changed;) {
    changed = 0;
    for (int i = 0; i < net->nsteps; i++) {
      const px__istep_t *s = &net->steps[i];
      if (s->kind != PX__S_CONV) continue;
      uint8_t v = bf[s->out] && bf[s->in] && (!s->sum || bf[s->in2]);
      if (v != bf[s->out] || (s->sum && v != bf[s->in2])) changed = 1;
      bf[s->out] = v;
      if (s->sum) bf[s->in2] = v;
    }
  }
  for (int i = 0; i < net->nsteps; i++) {
    px__istep_t *s = &net->steps[i];
    s->xbf = (s->kind == PX__S_CONV || s->kind == PX__S_GAP) && bf[s->in];
    s->ybf = s->kind == PX__S_CONV && bf[s->out];
  }
  net->in_bf = bf[0];
  px_free(bf);
  return PX_OK;
}

/* Words (4 bytes) of an activation of c channels, h x w, in the net's
 * planar layout. */
static size_t px__planar_words(const px__infer_t *net, int c, int h, int w) {
  return net->bf16 ? px__p2_words(net->batch, c, h, w) : px__p1_words(net->batch, c, h, w);
}

/* Whether step s fits the planar kernel (its input's layout aside). */
static int px__planar_fits(const px__infer_t *net, const px__istep_t *s) {
  const px_window_t *w = &s->win;
  return s->kind == PX__S_CONV && s->groups == 1 && w->kh == 3 && w->kw == 3 &&
         w->stride_h == 1 && w->stride_w == 1 && w->pad_t == 1 && w->pad_l == 1 &&
         w->pad_b == 1 && w->pad_r == 1 && w->dil_h == 1 && w->dil_w == 1 &&
         s->xbf == net->bf16 && s->ybf == net->bf16 && s->c_in <= PX__PLANAR_MAX_C &&
         s->c_out <= PX__PLANAR_MAX_C && s->w >= PX__PLANAR_MIN_W &&
         (s->act < 0 || s->act == PX__ACT_RELU) &&
         (!s->sum || s->act_mid < 0 || s->act_mid == PX__ACT_RELU);
}

/* A layout conversion step (PLOUT or PLIN) of activation a, which src
 * writes (NULL: the images), into the new activation out. */
static void px__plan_layout_step(const px__infer_t *net, px__istep_t *c, int kind,
                                 const px__istep_t *src, int a, int out) {
  memset(c, 0, sizeof *c);
  c->kind = kind;
  c->node = src ? src->node : 0;
  c->bn = c->cb = c->act = c->act_mid = -1;
  c->in = a;
  c->in2 = -1;
  c->out = out;
  c->c_in = c->c_out = src ? src->c_out : net->in_c;
  c->h = c->oh = src ? src->oh : net->in_h;
  c->w = c->ow = src ? src->ow : net->in_w;
  c->groups = 1;
  c->xbf = c->ybf = net->bf16;
}

/* After px__plan_bf16: the convolutions that fit run on the planar kernel,
 * reading and writing its layout; the images are packed into it when one
 * of them reads them. Each activation in the planar layout that another
 * step reads gets a PLOUT step right after the step that writes it, into a
 * new activation (numbered from *na on) in NHWC that those readers read
 * instead; each NHWC activation that a planar convolution reads (or sums
 * into) gets a PLIN step the same way. */
static px_status_t px__plan_planar(px__infer_t *net, int *na) {
  const int n0 = *na, ns = net->nsteps;
  uint8_t *pl = px_calloc((size_t)n0, 1, "infer.planar");
  int *conv = px_malloc(2 * (size_t)n0 * sizeof *conv, "infer.plconv"), *cin = conv + n0;
  px__istep_t *old = px_malloc((size_t)ns * sizeof *old, "infer.plsteps");
  px_status_t st = PX_OK;
  if (!pl || !conv || !old) {
    st = PX_ERR_NOMEM;
    goto done;
  }
  for (int i = 0; i < ns; i++) {
    px__istep_t *s = &net->steps[i];
    s->planar = px__planar_fits(net, s);
    if (s->planar) pl[s->out] = 1;
    if (s->planar && (s->in == 0 || s->in2 == 0)) pl[0] = 1; /* fits: in_bf is the net's */
  }
  /* conv[a] / cin[a] 0: activation a needs an NHWC / a planar copy */
  for (int a = 0; a < 2 * n0; a++) conv[a] = -1;
  for (int i = 0; i < ns; i++) {
    const px__istep_t *s = &net->steps[i];
    int *need = s->planar ? cin : conv, want = !s->planar;
    if (pl[s->in] == want) need[s->in] = 0;
    if (s->in2 >= 0 && pl[s->in2] == want) need[s->in2] = 0;
  }
  memcpy(old, net->steps, (size_t)ns * sizeof *old);
  net->nsteps = 0;
  for (int i = -1; i < ns; i++) {
    const px__istep_t *src = i < 0 ? NULL : &old[i];
    int a = src ? src->out : 0;
    if (src) net->steps[net->nsteps++] = *src;
    if (conv[a] == 0)
      px__plan_layout_step(net, &net->steps[net->nsteps++], PX__S_PLOUT, src, a, conv[a] = (*na)++);
    if (cin[a] == 0)
      px__plan_layout_step(net, &net->steps[net->nsteps++], PX__S_PLIN, src, a, cin[a] = (*na)++);
  }
  for (int i = 0; i < net->nsteps; i++) {
    px__istep_t *s = &net->steps[i];
    if (s->kind == PX__S_PLOUT || s->kind == PX__S_PLIN) continue;
    const int *to = s->planar ? cin : conv, want = !s->planar;
    if (s->in < n0 && pl[s->in] == want) s->in = to[s->in];
    if (s->in2 >= 0 && s->in2 < n0 && pl[s->in2] == want) s->in2 = to[s->in2];
  }
  net->in_planar = pl[0];
done:
  PX_FREE_ALL(pl, conv, old);
  return st;
}

/* Height and width of activation a (1 x 1 for the pooled vector and the
 * logits). */
static void px__act_hw(const px_model_t *m, int a, int *h, int *w) {
  if (px_model_act_area(m, a, h, w) < 0) *h = *w = 1;
}

static px_status_t px__graph_load(const px_model_t *m, px__graph_t *g) {
  g->nn = px_model_num_nodes(m);
  g->na = px_model_num_acts(m);
  g->nodes = px_calloc((size_t)g->nn, sizeof *g->nodes, "infer.nodes");
  g->alias = px_malloc((size_t)g->na * sizeof *g->alias, "infer.alias");
  g->ch = px_malloc((size_t)g->na * sizeof *g->ch, "infer.dims");
  g->h = px_malloc((size_t)g->na * sizeof *g->h, "infer.dims");
  g->w = px_malloc((size_t)g->na * sizeof *g->w, "infer.dims");
  if (!g->nodes || !g->alias || !g->ch || !g->h || !g->w) return PX_ERR_NOMEM;
  for (int a = 0; a < g->na; a++) {
    g->alias[a] = a;
    g->ch[a] = px_model_act_channels(m, a);
    px__act_hw(m, a, &g->h[a], &g->w[a]);
  }
  for (int k = 0; k < g->nn; k++) {
    px_model_node_t *n = &g->nodes[k];
    PX_CHECK(px_model_node(m, k, n));
    PX_REQUIRE(n->in >= 0 && n->in < g->na && n->out > 0 && n->out < g->na && n->in2 < g->na,
               "inference: node %d has activations out of range", k);
    if (n->kind == PX_NODE_REORDER) g->alias[n->out] = g->alias[n->in];
  }
  return PX_OK;
}

static void px__graph_free(px__graph_t *g) { PX_FREE_ALL(g->nodes, g->alias, g->ch, g->h, g->w); }

int32_t px__infer_cache_batch(const px_model_t *m, int32_t cap) {
  long l2 = sysconf(_SC_LEVEL2_CACHE_SIZE);
  if (l2 <= 0) l2 = 1 << 20;
  size_t widest = 1;
  for (int k = 0; k < px_model_num_nodes(m); k++) {
    px_model_node_t n;
    if (px_model_node(m, k, &n) < 0) break;
    if (n.kind != PX_NODE_CONV) continue;
    int ih, iw, oh, ow;
    px__act_hw(m, n.in, &ih, &iw);
    px__act_hw(m, n.out, &oh, &ow);
    size_t bytes = sizeof(float) * ((size_t)n.c_in * ih * iw + (size_t)n.c_out * oh * ow);
    if (bytes > widest) widest = bytes;
  }
  size_t b = (size_t)l2 / widest;
  if (b < 1) b = 1;
  if (b >= (size_t)cap) return cap;
  /* even chunks of a batch of cap: 64 = 3 x 22 - 2 rather than 2 x 24 + 16 */
  size_t chunks = ((size_t)cap + b - 1) / b;
  return (int32_t)(((size_t)cap + chunks - 1) / chunks);
}

/* ---- primitives --------------------------------------------------------------------- */

/* An activation (px__act_t) as oneDNN 2.6 eltwise algorithms, applied in
 * order: the hard sigmoid is linear then clip; the hard swish has the
 * slope 1/6 alone (oneDNN's ignores alpha). Returns how many (0: none
 * fits, 1 or 2). */
static int px__act_algs(int act, float alpha, dnnl_alg_kind_t alg[2], float a[2], float b[2]) {
  a[0] = b[0] = a[1] = b[1] = 0.0f;
  switch (act) {
    case PX__ACT_RELU: alg[0] = dnnl_eltwise_relu; return 1;
    case PX__ACT_LEAKY: alg[0] = dnnl_eltwise_relu, a[0] = alpha; return 1;
    case PX__ACT_RELU6: alg[0] = dnnl_eltwise_clip, b[0] = 6.0f; return 1;
    case PX__ACT_SIGMOID: alg[0] = dnnl_eltwise_logistic; return 1;
    case PX__ACT_HSIGMOID:
      alg[0] = dnnl_eltwise_linear, a[0] = alpha, b[0] = 0.5f;
      alg[1] = dnnl_eltwise_clip, b[1] = 1.0f;
      return 2;
    case PX__ACT_HSWISH: alg[0] = dnnl_eltwise_hardswish; return alpha == 1.0f / 6.0f;
    case PX__ACT_SILU: alg[0] = dnnl_eltwise_swish, a[0] = 1.0f; return 1;
    case PX__ACT_GELU: alg[0] = dnnl_eltwise_gelu_erf; return 1;
    case PX__ACT_TANH: alg[0] = dnnl_eltwise_tanh; return 1;
    case PX__ACT_SCALE: alg[0] = dnnl_eltwise_linear, a[0] = alpha; return 1;
    case PX__ACT_SHIFT: alg[0] = dnnl_eltwise_linear, a[0] = 1.0f, b[0] = alpha; return 1;
  }
  return 0;
}

/* Whether activation act (-1: none) fits a convolution's post-ops. */
static int px__act_fuses(int act, float alpha) {
  dnnl_alg_kind_t alg[2];
  float a[2], b[2];
  return act < 0 || px__act_algs(act, alpha, alg, a, b) > 0;
}

/* An activation (px__act_t, -1: none) as eltwise post-ops. */
static px_status_t px__append_act(dnnl_post_ops_t po, int act, float alpha) {
  if (act < 0) return PX_OK;
  dnnl_alg_kind_t alg[2];
  float a[2], b[2];
  const int n = px__act_algs(act, alpha, alg, a, b);
  if (n == 0)
    return px_set_error(PX_ERR_INTERNAL, "inference: activation %d is no post-op", act);
  for (int i = 0; i < n; i++) PX_DNNL(dnnl_post_ops_append_eltwise(po, 1.0f, alg[i], a[i], b[i]));
  return PX_OK;
}

/* The weights' plain and primitive-chosen descriptors; grouped: oneDNN's
 * [g, c_out/g, c_in/g, k, k], the same bytes as the plain folded ones. */
static px_status_t px__conv_weight_mds(const px__istep_t *s, dnnl_data_type_t xt,
                                       dnnl_memory_desc_t *plain, dnnl_memory_desc_t *any) {
  const int64_t g = s->groups;
  const int64_t kh = s->win.kh, kw = s->win.kw;
  dnnl_dims_t wd = {s->c_out, s->c_in, kh, kw}, gwd = {g, s->c_out / g, s->c_in / g, kh, kw};
  const int64_t wdims[4] = {s->c_out, s->c_in, kh, kw};
  if (g > 1) PX_DNNL(dnnl_memory_desc_init_by_tag(plain, 5, gwd, dnnl_f32, dnnl_goihw));
  else PX_CHECK(px__cpu_plain_md(plain, 4, wdims, PX_DTYPE_F32));
  PX_DNNL(dnnl_memory_desc_init_by_tag(any, g > 1 ? 5 : 4, g > 1 ? gwd : wd, xt,
                                       dnnl_format_tag_any));
  return PX_OK;
}

static px_status_t px__conv_create(px__infer_t *net, px__istep_t *s) {
  px_ops_t *ops = net->ops;
  const int64_t B = net->batch;
  dnnl_memory_desc_t src, dst, w_any, w_plain, b_md;
  dnnl_dims_t sd = {B, s->c_in, s->h, s->w}, dd = {B, s->c_out, s->oh, s->ow};
  const px_window_t *w = &s->win;
  dnnl_dims_t strides = {w->stride_h, w->stride_w}, pad_l = {w->pad_t, w->pad_l};
  dnnl_dims_t pad_r = {w->pad_b, w->pad_r}, dil = {w->dil_h - 1, w->dil_w - 1};
  const int64_t bdims[1] = {s->c_out};
  dnnl_primitive_attr_t attr = NULL;
  dnnl_post_ops_t po = NULL;
  dnnl_primitive_desc_t pd = NULL;
  px_status_t st = PX_OK;
  const dnnl_data_type_t xt = s->xbf ? dnnl_bf16 : dnnl_f32, yt = s->ybf ? dnnl_bf16 : dnnl_f32;
  PX_DNNL_GOTO(dnnl_memory_desc_init_by_tag(&src, 4, sd, xt, dnnl_nhwc), st, done);
  PX_DNNL_GOTO(dnnl_memory_desc_init_by_tag(&dst, 4, dd, yt, dnnl_nhwc), st, done);
  PX_CHECK_GOTO(px__conv_weight_mds(s, xt, &w_plain, &w_any), st, done);
  PX_CHECK_GOTO(px__cpu_plain_md(&b_md, 1, bdims, PX_DTYPE_F32), st, done);
  dnnl_convolution_desc_t cd;
  PX_DNNL_GOTO(dnnl_dilated_convolution_forward_desc_init(&cd, dnnl_forward_inference,
                                                          dnnl_convolution_direct, &src, &w_any,
                                                          &b_md, &dst, strides, dil, pad_l, pad_r),
               st, done);
  PX_DNNL_GOTO(dnnl_primitive_attr_create(&attr), st, done);
  PX_DNNL_GOTO(dnnl_primitive_attr_set_scratchpad_mode(attr, dnnl_scratchpad_mode_user), st, done);
  PX_DNNL_GOTO(dnnl_post_ops_create(&po), st, done);
  if (s->sum) PX_CHECK_GOTO(px__append_act(po, s->act_mid, s->alpha_mid), st, done);
  if (s->sum) PX_DNNL_GOTO(dnnl_post_ops_append_sum(po, 1.0f), st, done);
  PX_CHECK_GOTO(px__append_act(po, s->act, s->alpha), st, done);
  PX_DNNL_GOTO(dnnl_primitive_attr_set_post_ops(attr, po), st, done);
  PX_CHECK_GOTO(px__cpu_pd_create(ops, &pd, &cd, attr, NULL, "inference convolution"), st, done);
  const int args[] = {DNNL_ARG_SRC, DNNL_ARG_WEIGHTS, DNNL_ARG_BIAS, DNNL_ARG_DST};
  PX_CHECK_GOTO(px__exec_create(ops, &s->fwd, pd, args, 4), st, done);
  s->have_fwd = 1;
  const dnnl_memory_desc_t *wmd = px__cpu_pd_md(pd, DNNL_ARG_WEIGHTS);
  if (dnnl_memory_desc_equal(wmd, &w_plain)) {
    s->wp = s->wf;
  } else {
    s->wp = px_malloc(dnnl_memory_desc_get_size(wmd), "infer.weights");
    if (!s->wp) {
      st = PX_ERR_NOMEM;
      goto done;
    }
    PX_CHECK_GOTO(px__exec_create_reorder(ops, &s->wreo, &w_plain, wmd), st, done);
    s->have_wreo = 1;
  }
done:
  if (pd) dnnl_primitive_desc_destroy(pd);
  if (po) dnnl_post_ops_destroy(po);
  if (attr) dnnl_primitive_attr_destroy(attr);
  return st;
}

/* oneDNN's training-mode batch norm on the step's NHWC activation (ReLU
 * fused), as the training engine runs it (nn/cpu/cpu_bn.c). */
static px_status_t px__bn_train_create(px__infer_t *net, px__istep_t *s) {
  px_ops_t *ops = net->ops;
  dnnl_memory_desc_t md;
  dnnl_dims_t d = {net->batch, s->c_in, s->h, s->w};
  dnnl_primitive_desc_t pd = NULL;
  px_status_t st = PX_OK;
  PX_DNNL(dnnl_memory_desc_init_by_tag(&md, 4, d, dnnl_f32, dnnl_nhwc));
  const unsigned flags = dnnl_use_scale | dnnl_use_shift | (s->relu ? dnnl_fuse_norm_relu : 0u);
  dnnl_batch_normalization_desc_t bd;
  PX_DNNL(dnnl_batch_normalization_forward_desc_init(&bd, dnnl_forward_training, &md,
                                                     (float)s->eps, flags));
  PX_CHECK(px__cpu_pd_create(ops, &pd, &bd, NULL, NULL, "calibration batch norm"));
  const char *impl = NULL;
  if (net->train_bn == 2 ||
      (dnnl_primitive_desc_query(pd, dnnl_query_impl_info_str, 0, &impl) == dnnl_success &&
       impl && !strstr(impl, "jit"))) {
    /* oneDNN's generic NHWC code (channels not a multiple of 8 or 16):
     * 5x slower than the plain loops (docs/performance.md), which run it */
    s->plain_bn = 1;
    dnnl_primitive_desc_destroy(pd);
    return PX_OK;
  }
  const int fa[] = {DNNL_ARG_SRC,  DNNL_ARG_SCALE,    DNNL_ARG_SHIFT,    DNNL_ARG_DST,
                    DNNL_ARG_MEAN, DNNL_ARG_VARIANCE, DNNL_ARG_WORKSPACE};
  PX_CHECK_GOTO(px__exec_create(ops, &s->fwd, pd, fa, s->relu ? 7 : 6), st, done);
  s->have_fwd = 1;
  s->bstat = px_malloc(2 * (size_t)s->c_in * sizeof(float), "infer.bstat");
  if (!s->bstat) {
    st = PX_ERR_NOMEM;
    goto done;
  }
  if (s->relu) {
    const dnnl_memory_desc_t *ws = dnnl_primitive_desc_query_md(pd, dnnl_query_workspace_md, 0);
    size_t wb = ws ? dnnl_memory_desc_get_size(ws) : 0;
    s->ws = px_malloc(wb ? wb : 1, "infer.bn_ws");
    if (!s->ws) st = PX_ERR_NOMEM;
  }
done:
  dnnl_primitive_desc_destroy(pd);
  return st;
}

static const float *px__param(const px_model_t *m, int i);
static const float *px__buffer(const px_model_t *m, int i);

/* Runs a BN_TRAIN step on oneDNN, then moves the running statistics as
 * cpu_bn.c does (the layer's momentum, unbiased variance). */
static px_status_t px__bn_train_run(px__infer_t *net, px__istep_t *s) {
  const size_t C = (size_t)s->c_in;
  const int64_t count = (int64_t)net->batch * s->h * s->w;
  PX_REQUIRE(count >= 2, "calibration: %lld values per channel, training needs 2 or more",
             (long long)count);
  void *ptrs[7] = {net->slot[s->sin], (void *)px__param(net->m, s->pw),
                   (void *)px__param(net->m, s->pb), net->slot[s->sout], s->bstat,
                   s->bstat + C, s->ws};
  PX_CHECK(px__exec_run(net->ops, &s->fwd, ptrs));
  const float m = net->calib_m > 0.0f ? net->calib_m : s->momentum;
  const float unbias = (float)((double)count / (double)(count - 1));
  float *rm = (float *)px__buffer(net->m, s->rm), *rv = (float *)px__buffer(net->m, s->rv);
  for (size_t c = 0; c < C; c++) {
    rm[c] = (1.0f - m) * rm[c] + m * s->bstat[c];
    rv[c] = (1.0f - m) * rv[c] + m * s->bstat[C + c] * unbias;
  }
  return PX_OK;
}

static px_status_t px__infer_exact_create(px__infer_t *net);

int px__infer_takes(const px_model_t *m) {
  for (int k = 0; k < px_model_num_nodes(m); k++) {
    px_model_node_t n;
    int h, w, h2, w2;
    if (px_model_node(m, k, &n) < 0) return 0;
    /* an FC on a flattened map (VGG's classifier), a channel shuffle or a
     * channel slice: the model runs them */
    px__act_hw(m, n.in, &h, &w);
    if (n.kind == PX_NODE_FC && h * w > 1) return 0;
    if (n.kind == PX_NODE_SHUFFLE || n.kind == PX_NODE_SLICE) return 0;
    if (n.kind != PX_NODE_MUL && n.kind != PX_NODE_CONCAT) continue;
    px__act_hw(m, n.in, &h, &w);
    px__act_hw(m, n.in2, &h2, &w2);
    if (n.kind == PX_NODE_MUL &&
        (h2 != 1 || w2 != 1 || px_model_act_channels(m, n.in2) != px_model_act_channels(m, n.in)))
      return 0;
    if (n.kind == PX_NODE_CONCAT && (h != h2 || w != w2)) return 0;
  }
  return 1;
}

px_status_t px__infer_create(px_model_t *m, int32_t batch, int train_bn, px__infer_prec_t prec,
                             px__infer_t **out) {
  PX_REQUIRE(m && out && batch >= 1, "px__infer_create: bad argument");
  *out = NULL;
  px_ops_t *ops = px_model_ops(m);
  PX_CHECK(px__cpu_require(ops, "inference engine"));
  PX_REQUIRE(px__infer_takes(m), "inference engine: the model has a multiplication that is not "
             "by a per-channel gate, a concatenation of maps of different sizes, a classifier "
             "on a flattened map or a channel shuffle or slice (the model runs those)");
  const px_model_config_t *cfg = px_model_config(m);
  px__graph_t g;
  memset(&g, 0, sizeof g);
  px__infer_t *net = px_calloc(1, sizeof *net, "infer");
  if (!net) return PX_ERR_NOMEM;
  net->m = m;
  net->ops = ops;
  net->train_bn = train_bn;
  if (prec == PX__INFER_AUTO) prec = px__infer_bf16_fast() ? PX__INFER_BF16 : PX__INFER_F32;
  net->bf16 = !train_bn && prec != PX__INFER_F32;
  net->batch = batch;
  net->classes = cfg->num_classes;
  net->in_c = cfg->in_channels;
  net->in_h = cfg->height;
  net->in_w = cfg->width;
  px_status_t st;
  PX_CHECK_GOTO(px__graph_load(m, &g), st, fail);
  /* the graph's steps and at most one PLOUT and one PLIN per activation */
  net->steps = px_calloc((size_t)g.nn + 2 * (size_t)g.na, sizeof *net->steps, "infer.steps");
  if (!net->steps) {
    st = PX_ERR_NOMEM;
    goto fail;
  }
  PX_CHECK_GOTO(px__plan_steps(net, &g), st, fail);
  int na = g.na;
  if (net->bf16) PX_CHECK_GOTO(px__plan_bf16(net, g.na), st, fail);
  if (!train_bn && (net->bf16 ? px__p2_available() : px__p1_available()))
    PX_CHECK_GOTO(px__plan_planar(net, &na), st, fail);
  PX_CHECK_GOTO(px__plan_slots(net, na, g.na - 1), st, fail);
  if (net->bf16 && prec == PX__INFER_BF16)
    PX_CHECK_GOTO(px__infer_exact_create(net), st, fail);
  net->slot_floats = 1;
  for (int a = 0; a < g.na; a++) {
    size_t f = (size_t)batch * g.ch[a] * g.h[a] * g.w[a];
    if (f > net->slot_floats) net->slot_floats = f;
  }
  for (int i = 0; i < net->nsteps; i++) { /* the planar layout's padded maps */
    const px__istep_t *s = &net->steps[i];
    if (!s->planar) continue;
    size_t f = px__planar_words(net, s->c_in, s->h, s->w);
    size_t f2 = px__planar_words(net, s->c_out, s->oh, s->ow);
    if (f2 > f) f = f2;
    if (f > net->slot_floats) net->slot_floats = f;
  }
  int maxc = 1;
  for (int a = 0; a < g.na; a++)
    if (g.ch[a] > maxc) maxc = g.ch[a];
  net->stat = px_calloc(2 * (size_t)maxc, sizeof *net->stat, "infer.stat");
  net->slot = px_calloc((size_t)net->nslots, sizeof *net->slot, "infer.slots");
  net->logits = px_malloc((size_t)batch * net->classes * sizeof(float), "infer.logits");
  net->logits2 = px_malloc((size_t)batch * net->classes * sizeof(float), "infer.logits");
  if (!net->slot || !net->logits || !net->logits2 || !net->stat) {
    st = PX_ERR_NOMEM;
    goto fail;
  }
  for (int i = 0; i < net->nslots; i++) {
    net->slot[i] = px_calloc(net->slot_floats, sizeof(float), "infer.slot");
    if (!net->slot[i]) {
      st = PX_ERR_NOMEM;
      goto fail;
    }
  }
  px__cpu_enter(ops);
  for (int i = 0; i < net->nsteps; i++) {
    px__istep_t *s = &net->steps[i];
    if (s->kind == PX__S_BN_TRAIN) PX_CHECK_GOTO(px__bn_train_create(net, s), st, fail);
    size_t nw = s->kind == PX__S_CONV ? (size_t)s->c_out * (s->c_in / s->groups) * s->win.kh * s->win.kw
                : s->kind == PX__S_FC ? (size_t)s->c_out * s->c_in
                : s->kind == PX__S_BN ? (size_t)s->c_out : 0;
    if (!nw) continue;
    s->wf = px_malloc(nw * sizeof(float), "infer.folded");
    s->bf = px_calloc((size_t)s->c_out, sizeof(float), "infer.bias");
    if (s->planar) /* 4-byte words: bf16 pairs or floats */
      s->wq = px_malloc(4 * (net->bf16 ? px__p2_weight_words(s->c_in, s->c_out)
                                       : px__p1_weight_words(s->c_in, s->c_out)), "infer.planar_w");
    if (!s->wf || !s->bf || (s->planar && !s->wq)) {
      st = PX_ERR_NOMEM;
      goto fail;
    }
    if (s->kind == PX__S_CONV && !s->planar) PX_CHECK_GOTO(px__conv_create(net, s), st, fail);
  }
  px__graph_free(&g);
  *out = net;
  return PX_OK;
fail:
  px__graph_free(&g);
  px__infer_destroy(net);
  return st;
}

/* A bf16 net's f32 twin (cache-sized chunks, as f32 nets have: as fast a
 * sample as whole batches of 64 on the quickstart's model, in an eighth of
 * the memory) and its gather buffers. */
static px_status_t px__infer_exact_create(px__infer_t *net) {
  PX_CHECK(px__infer_create(net->m, px__infer_cache_batch(net->m, net->batch), 0, PX__INFER_F32,
                            &net->exact));
  const size_t per = (size_t)net->in_c * net->in_h * net->in_w, nb = (size_t)net->exact->batch;
  net->gather = px_malloc(nb * per * sizeof(float), "infer.gather");
  net->pend = px_malloc(nb * sizeof(int32_t), "infer.pend");
  return net->gather && net->pend ? PX_OK : PX_ERR_NOMEM;
}

void px__infer_destroy(px__infer_t *net) {
  if (!net) return;
  for (int i = 0; net->steps && i < net->nsteps; i++) {
    px__istep_t *s = &net->steps[i];
    if (s->have_fwd) px__exec_destroy(&s->fwd);
    if (s->have_wreo) px__exec_destroy(&s->wreo);
    if (s->wp != s->wf) px_free(s->wp);
    PX_FREE_ALL(s->wf, s->bf, s->bstat, s->ws, s->wq);
  }
  for (int i = 0; net->slot && i < net->nslots; i++) px_free(net->slot[i]);
  px__infer_destroy(net->exact);
  PX_FREE_ALL(net->slot, net->steps, net->logits, net->logits2, net->stat, net->gather, net->pend);
  px_free(net);
}

/* ---- values ------------------------------------------------------------------------- */

static const float *px__param(const px_model_t *m, int i) {
  return (const float *)px_model_param(m, i)->value->data; /* CPU model: host memory */
}

static const float *px__buffer(const px_model_t *m, int i) {
  return (const float *)px_model_buffer(m, i)->value->data;
}

px_status_t px__infer_load(px__infer_t *net) {
  const px_model_t *m = net->m;
  net->npend = 0; /* a pass of px__infer_eval cut short leaves nothing behind */
  if (net->exact) PX_CHECK(px__infer_load(net->exact));
  for (int i = 0; i < net->nsteps; i++) {
    px__istep_t *s = &net->steps[i];
    px_model_node_t n, bn;
    PX_CHECK(px_model_node(m, s->node, &n));
    if (s->kind == PX__S_FC) {
      memcpy(s->wf, px__param(m, n.w), (size_t)s->c_out * s->c_in * sizeof(float));
      memcpy(s->bf, px__param(m, n.b), (size_t)s->c_out * sizeof(float));
      continue;
    }
    if (s->kind != PX__S_CONV && s->kind != PX__S_BN) continue; /* BN_TRAIN reads the model */
    int has_bn = s->kind == PX__S_BN || s->bn >= 0;
    if (has_bn) PX_CHECK(px_model_node(m, s->kind == PX__S_BN ? s->node : s->bn, &bn));
    size_t per = s->kind == PX__S_CONV ? (size_t)(s->c_in / s->groups) * s->win.kh * s->win.kw : 1;
    const float *w = s->kind == PX__S_CONV ? px__param(m, n.w) : NULL;
    const float *cb = s->kind == PX__S_CONV && s->cb >= 0 ? px__param(m, s->cb) : NULL;
    for (int o = 0; o < s->c_out; o++) {
      double a = 1, b = 0, b0 = cb ? cb[o] : 0.0; /* BN(w x + b0) = a w x + a b0 + b */
      if (has_bn) {
        a = (double)px__param(m, bn.w)[o] /
            sqrt((double)px__buffer(m, bn.rv)[o] + bn.eps);
        b = (double)px__param(m, bn.b)[o] - a * (double)px__buffer(m, bn.rm)[o];
      }
      s->bf[o] = (float)(a * b0 + b);
      if (!w) {
        s->wf[o] = (float)a;
        continue;
      }
      for (size_t j = 0; j < per; j++) s->wf[(size_t)o * per + j] = (float)(a * w[(size_t)o * per + j]);
    }
    if (s->planar && net->bf16) px__p2_pack_weights(s->wf, s->c_in, s->c_out, s->wq);
    if (s->planar && !net->bf16) px__p1_pack_weights(s->wf, s->c_in, s->c_out, s->wq);
    if (s->have_wreo) {
      px__cpu_enter(net->ops);
      void *ptrs[2] = {s->wf, s->wp};
      PX_CHECK(px__exec_run(net->ops, &s->wreo, ptrs));
    }
  }
  return PX_OK;
}

/* ---- running ------------------------------------------------------------------------ */

/* n samples of x (NCHW) into the input slot (NHWC), the rest of the batch zero. */
static void px__pack_input(px__infer_t *net, const float *x, int32_t n, int bf) {
  const size_t hw = (size_t)net->in_h * net->in_w, per = hw * net->in_c;
  float *d = net->slot[net->in_slot];
  uint16_t *h = (uint16_t *)d;
  for (int32_t i = 0; i < n; i++)
    for (int c = 0; c < net->in_c; c++)
      for (size_t p = 0; p < hw; p++) {
        float v = x[i * per + c * hw + p];
        if (bf)
          h[i * per + p * net->in_c + c] = px__to_bf16(v);
        else
          d[i * per + p * net->in_c + c] = v;
      }
  size_t rest = (size_t)(net->batch - n) * per;
  if (bf)
    memset(h + (size_t)n * per, 0, rest * sizeof *h);
  else
    memset(d + (size_t)n * per, 0, rest * sizeof *d);
}

/* Training-mode batch norm on NHWC, as the training engine's (cpu_bn.c):
 * normalised by the batch mean and biased variance over N*H*W, the running
 * mean and the unbiased running variance moved by the layer's momentum (written
 * into the model's buffers). */
static void px__bn_train(px__infer_t *net, const px__istep_t *s, const float *x, float *y) {
  const size_t P = (size_t)net->batch * s->h * s->w, C = (size_t)s->c_in;
  const float *scale = px__param(net->m, s->pw), *shift = px__param(net->m, s->pb);
  float *rm = (float *)px__buffer(net->m, s->rm), *rv = (float *)px__buffer(net->m, s->rv);
  double *mean = net->stat, *var = net->stat + C;
  memset(net->stat, 0, 2 * C * sizeof *net->stat);
  for (size_t p = 0; p < P; p++)
    for (size_t c = 0; c < C; c++) mean[c] += x[p * C + c];
  for (size_t c = 0; c < C; c++) mean[c] /= (double)P;
  for (size_t p = 0; p < P; p++)
    for (size_t c = 0; c < C; c++) {
      double d = x[p * C + c] - mean[c];
      var[c] += d * d;
    }
  const float m = net->calib_m > 0.0f ? net->calib_m : s->momentum;
  const float unbias = (float)((double)P / (double)(P - 1));
  for (size_t c = 0; c < C; c++) {
    var[c] /= (double)P;
    rm[c] = (1.0f - m) * rm[c] + m * (float)mean[c];
    rv[c] = (1.0f - m) * rv[c] + m * (float)var[c] * unbias;
    /* y = a x + b */
    double a = scale[c] / sqrt(var[c] + s->eps);
    var[c] = a;
    mean[c] = shift[c] - a * mean[c];
  }
  for (size_t p = 0; p < P; p++)
    for (size_t c = 0; c < C; c++) {
      float v = (float)(var[c] * x[p * C + c] + mean[c]);
      y[p * C + c] = s->relu && v < 0 ? 0 : v;
    }
}

/* A window of the pooling step at output (oy, ox) of sample b, channel c:
 * the maximum over the pixels inside the image, or the sum over them
 * divided by the window's positions inside the padded image (the padding
 * counted as zeros, PyTorch's default; a ceil_mode window's part past the
 * end padding not counted) or, with exclude_pad, inside the image. */
static float px__pool_at(const px__istep_t *s, const float *x, size_t b, int oy, int ox, size_t c) {
  const size_t C = (size_t)s->c_in;
  const px_window_t *w = &s->win;
  float acc = s->maxpool ? -INFINITY : 0.0f;
  int nin = 0, npad = 0;
  for (int ky = 0; ky < w->kh; ky++) {
    int iy = oy * w->stride_h - w->pad_t + ky * w->dil_h;
    if (iy >= s->h + w->pad_b) continue;
    for (int kx = 0; kx < w->kw; kx++) {
      int ix = ox * w->stride_w - w->pad_l + kx * w->dil_w;
      if (ix >= s->w + w->pad_r) continue;
      npad++;
      if (iy < 0 || iy >= s->h || ix < 0 || ix >= s->w) continue;
      nin++;
      float v = x[((b * s->h + iy) * s->w + ix) * C + c];
      acc = s->maxpool ? fmaxf(acc, v) : acc + v;
    }
  }
  return s->maxpool ? acc : acc / (float)(w->exclude_pad ? nin : npad);
}

/* The imported graphs' operators on NHWC (plain loops, both paths): the
 * squeeze-and-excitation product of a map and its per-channel gate
 * [batch][c], the join of two maps on channels, windowed pooling. */
static void px__run_graph_op(px__infer_t *net, const px__istep_t *s, const float *x, float *y) {
  const size_t B = (size_t)net->batch, hw = (size_t)s->h * s->w, C = (size_t)s->c_in;
  const float *x2 = s->sin2 >= 0 ? net->slot[s->sin2] : NULL;
  switch (s->kind) {
    case PX__S_MUL:
      for (size_t b = 0; b < B; b++)
        for (size_t p = 0; p < hw; p++)
          for (size_t c = 0; c < C; c++)
            y[(b * hw + p) * C + c] = x[(b * hw + p) * C + c] * x2[b * C + c];
      break;
    case PX__S_CONCAT: {
      const size_t C2 = (size_t)s->c_out - C;
      for (size_t q = 0; q < B * hw; q++) {
        memcpy(y + q * (size_t)s->c_out, x + q * C, C * sizeof *y);
        memcpy(y + q * (size_t)s->c_out + C, x2 + q * C2, C2 * sizeof *y);
      }
      break;
    }
    case PX__S_POOL:
      for (size_t b = 0; b < B; b++)
        for (int oy = 0; oy < s->oh; oy++)
          for (int ox = 0; ox < s->ow; ox++)
            for (size_t c = 0; c < C; c++)
              y[((b * s->oh + oy) * s->ow + ox) * C + c] = px__pool_at(s, x, b, oy, ox, c);
      break;
    default: break;
  }
}

/* LayerNorm over channels on NHWC: each pixel's c values are contiguous
 * (as px__ln_forward computes it: the mean, then the variance about it). */
static void px__run_ln(px__infer_t *net, const px__istep_t *s, const float *x, float *y) {
  const size_t npix = (size_t)net->batch * s->h * s->w, C = (size_t)s->c_in;
  const float *g = px__param(net->m, s->pw), *b = px__param(net->m, s->pb);
  for (size_t q = 0; q < npix; q++) {
    const float *xq = x + q * C;
    float *yq = y + q * C, mu = 0.0f, var = 0.0f;
    for (size_t c = 0; c < C; c++) mu += xq[c];
    mu /= (float)C;
    for (size_t c = 0; c < C; c++) var += (xq[c] - mu) * (xq[c] - mu);
    const float rs = 1.0f / sqrtf(var / (float)C + (float)s->eps);
    for (size_t c = 0; c < C; c++) yq[c] = (xq[c] - mu) * rs * g[c] + b[c];
  }
}

/* The steps that are not convolutions (plain loops, shared by both paths). */
static void px__run_other(px__infer_t *net, const px__istep_t *s, int bf) {
  const float *x = net->slot[s->sin];
  float *y = net->slot[s->sout];
  const size_t B = (size_t)net->batch, hw = (size_t)s->h * s->w, C = (size_t)s->c_in;
  switch (s->kind) {
    case PX__S_BN:
      for (size_t p = 0; p < B * hw; p++)
        for (size_t c = 0; c < C; c++) {
          float v = x[p * C + c] * s->wf[c] + s->bf[c];
          y[p * C + c] = s->relu && v < 0 ? 0 : v;
        }
      break;
    case PX__S_BN_TRAIN: px__bn_train(net, s, x, y); break;
    case PX__S_ADD: {
      const float *x2 = net->slot[s->sin2];
      for (size_t i = 0; i < B * hw * C; i++) {
        float v = x[i] + x2[i];
        y[i] = s->relu && v < 0 ? 0 : v;
      }
      break;
    }
    case PX__S_GAP: /* pixel by pixel, channels innermost (vectorised); each channel's sum in
                       pixel order */
      for (size_t b = 0; b < B; b++) {
        float *yb = y + b * C;
        memset(yb, 0, C * sizeof *yb);
        for (size_t p = 0; p < hw; p++) {
          if (bf && s->xbf) {
            const uint16_t *xh = (const uint16_t *)x + (b * hw + p) * C;
            for (size_t c = 0; c < C; c++) yb[c] += px__from_bf16(xh[c]);
          } else {
            const float *xf = x + (b * hw + p) * C;
            for (size_t c = 0; c < C; c++) yb[c] += xf[c];
          }
        }
        for (size_t c = 0; c < C; c++) yb[c] /= (float)hw;
      }
      break;
    case PX__S_FC:
      for (size_t b = 0; b < B; b++)
        for (int o = 0; o < s->c_out; o++) {
          float acc = s->bf[o];
          for (size_t i = 0; i < C; i++) acc += s->wf[(size_t)o * C + i] * x[b * C + i];
          y[b * (size_t)s->c_out + o] = acc;
        }
      break;
    case PX__S_ACT: px__act_forward(y, x, B * hw * C, (px__act_t)s->act, s->alpha); break;
    case PX__S_LN: px__run_ln(net, s, x, y); break;
    default: px__run_graph_op(net, s, x, y); break;
  }
}

/* One value through an activation (px__act_t, -1: none), as
 * px__act_forward computes it. */
static float px__act1(float v, int act, float alpha) {
  float r = v;
  if (act >= 0) px__act_forward(&r, &v, 1, (px__act_t)act, alpha);
  return r;
}

/* Plain direct convolution on NHWC with the step's folding and fusions. */
static void px__conv_ref(px__infer_t *net, const px__istep_t *s) {
  const float *x = net->slot[s->sin];
  float *y = net->slot[s->sout];
  const px_window_t *w = &s->win;
  const int KH = w->kh, KW = w->kw, cpg = s->c_in / s->groups, opg = s->c_out / s->groups;
  for (int b = 0; b < net->batch; b++)
    for (int oy = 0; oy < s->oh; oy++)
      for (int ox = 0; ox < s->ow; ox++)
        for (int o = 0; o < s->c_out; o++) {
          double acc = s->bf[o];
          const int c0 = o / opg * cpg; /* the group's first input channel */
          for (int ky = 0; ky < KH; ky++) {
            int iy = oy * w->stride_h - w->pad_t + ky * w->dil_h;
            if (iy < 0 || iy >= s->h) continue;
            for (int kx = 0; kx < KW; kx++) {
              int ix = ox * w->stride_w - w->pad_l + kx * w->dil_w;
              if (ix < 0 || ix >= s->w) continue;
              const float *xp = x + (((size_t)b * s->h + iy) * s->w + ix) * s->c_in + c0;
              for (int c = 0; c < cpg; c++)
                acc += (double)xp[c] * s->wf[(((size_t)o * cpg + c) * KH + ky) * KW + kx];
            }
          }
          size_t yi = (((size_t)b * s->oh + oy) * s->ow + ox) * s->c_out + o;
          float v = (float)acc;
          if (s->sum) v = px__act1(v, s->act_mid, s->alpha_mid) + y[yi];
          y[yi] = px__act1(v, s->act, s->alpha);
        }
}

/* n samples of x (NCHW) into the input slot in the net's planar layout. */
static void px__planar_input(px__infer_t *net, const float *x, int32_t n) {
  if (net->bf16)
    px__p2_from_nchw(x, n, net->batch, net->in_c, net->in_h, net->in_w,
                     (uint32_t *)net->slot[net->in_slot]);
  else
    px__p1_from_nchw(x, n, net->batch, net->in_c, net->in_h, net->in_w, net->slot[net->in_slot]);
}

/* A planar convolution, or a PLOUT (planar -> NHWC) or PLIN step, in the net's precision. */
static void px__planar_run(px__infer_t *net, const px__istep_t *s) {
  void *x = net->slot[s->sin], *y = net->slot[s->sout];
  const int mid = s->sum && s->act_mid >= 0, last = s->act >= 0;
  if (s->kind == PX__S_PLOUT && net->bf16) {
    px__p2_to_nhwc(x, net->batch, s->c_in, s->h, s->w, y);
  } else if (s->kind == PX__S_PLOUT) {
    px__p1_to_nhwc(x, net->batch, s->c_in, s->h, s->w, y);
  } else if (s->kind == PX__S_PLIN && net->bf16) {
    px__p2_from_nhwc(x, net->batch, s->c_in, s->h, s->w, y);
  } else if (s->kind == PX__S_PLIN) {
    px__p1_from_nhwc(x, net->batch, s->c_in, s->h, s->w, y);
  } else if (net->bf16) {
    px__p2_conv_t pc = {.x = x, .y = y, .wq = s->wq, .bias = s->bf, .batch = net->batch,
                        .c_in = s->c_in, .c_out = s->c_out, .h = s->h, .w = s->w, .sum = s->sum,
                        .relu_mid = mid, .relu = last};
    px__p2_conv3x3(&pc);
  } else {
    px__p1_conv_t pc = {.x = x, .y = y, .wq = s->wq, .bias = s->bf, .batch = net->batch,
                        .c_in = s->c_in, .c_out = s->c_out, .h = s->h, .w = s->w, .sum = s->sum,
                        .relu_mid = mid, .relu = last};
    px__p1_conv3x3(&pc);
  }
}

static px_status_t px__run(px__infer_t *net, const float *x, int32_t n, float *logits, int ref) {
  PX_REQUIRE(n >= 1, "inference on %d samples", n);
  const size_t per = (size_t)net->in_c * net->in_h * net->in_w;
  const int bf = net->bf16 && !ref; /* the reference runs a bf16 net's steps in f32 */
  if (!ref) px__cpu_enter(net->ops);
  for (int32_t done = 0; done < n; done += net->batch) {
    int32_t c = n - done < net->batch ? n - done : net->batch;
    if (!ref && net->in_planar)
      px__planar_input(net, x + (size_t)done * per, c);
    else
      px__pack_input(net, x + (size_t)done * per, c, bf && net->in_bf);
    for (int i = 0; i < net->nsteps; i++) {
      px__istep_t *s = &net->steps[i];
      const int layout = s->kind == PX__S_PLOUT || s->kind == PX__S_PLIN;
      if (layout && ref) { /* the reference keeps everything in NHWC f32 */
        memcpy(net->slot[s->sout], net->slot[s->sin],
               (size_t)net->batch * s->h * s->w * s->c_in * sizeof(float));
      } else if ((s->planar && !ref) || layout) {
        px__planar_run(net, s);
      } else if (s->kind == PX__S_BN_TRAIN && !ref && !s->plain_bn) {
        PX_CHECK(px__bn_train_run(net, s));
      } else if (s->kind != PX__S_CONV) {
        px__run_other(net, s, bf);
      } else if (ref) {
        px__conv_ref(net, s);
      } else {
        void *ptrs[4] = {net->slot[s->sin], s->wp, s->bf, net->slot[s->sout]};
        PX_CHECK(px__exec_run(net->ops, &s->fwd, ptrs));
      }
    }
    memcpy(logits + (size_t)done * net->classes, net->slot[net->out_slot],
           (size_t)c * net->classes * sizeof(float));
  }
  return PX_OK;
}

static int px__argmax(const float *z, int k) {
  int best = 0;
  for (int j = 1; j < k; j++)
    if (z[j] > z[best]) best = j;
  return best;
}

float px__infer_margin_bound(const float *z, int k) {
  float mag = 0;
  for (int j = 0; j < k; j++) mag = fmaxf(mag, fabsf(z[j]));
  return PX__INFER_MARGIN_REL * mag + PX__INFER_MARGIN_ABS;
}

/* Whether a bf16 net's logits z may rank its first two classes otherwise
 * than f32 would: their margin is below the bound. */
static int px__close_call(const float *z, int k) {
  int best = px__argmax(z, k);
  float second = -INFINITY;
  for (int j = 0; j < k; j++)
    if (j != best && z[j] > second) second = z[j];
  return z[best] - second < px__infer_margin_bound(z, k);
}

/* Reruns the pending samples in f32 and puts their logits in place. */
static px_status_t px__flush_exact(px__infer_t *net, int32_t np, float *logits) {
  const int K = net->classes;
  PX_CHECK(px__run(net->exact, net->gather, np, net->exact->logits, 0));
  for (int32_t j = 0; j < np; j++)
    memcpy(logits + (size_t)net->pend[j] * K, net->exact->logits + (size_t)j * K,
           (size_t)K * sizeof(float));
  net->rechecked += np;
  return PX_OK;
}

/* The logits of n samples; a bf16 net with its f32 twin reruns the close calls. */
static px_status_t px__logits(px__infer_t *net, const float *x, int32_t n, float *logits) {
  PX_REQUIRE(!net->npend, "inference: a pass of px__infer_eval has samples waiting for their rerun");
  PX_CHECK(px__run(net, x, n, logits, 0));
  if (!net->exact) return PX_OK;
  const int K = net->classes;
  const size_t per = (size_t)net->in_c * net->in_h * net->in_w;
  int32_t np = 0;
  for (int32_t i = 0; i < n; i++) {
    if (!px__close_call(logits + (size_t)i * K, K)) continue;
    memcpy(net->gather + (size_t)np * per, x + (size_t)i * per, per * sizeof(float));
    net->pend[np++] = i;
    if (np == net->exact->batch) {
      PX_CHECK(px__flush_exact(net, np, logits));
      np = 0;
    }
  }
  return np ? px__flush_exact(net, np, logits) : PX_OK;
}

void px__infer_calib_momentum(px__infer_t *net, float momentum) { net->calib_m = momentum; }

px_status_t px__infer_calibrate(px__infer_t *net, const float *x) {
  PX_REQUIRE(net->train_bn, "px__infer_calibrate: a net built for inference");
  float *junk = net->logits;
  return px__run(net, x, net->batch, junk, 0);
}

px_status_t px__infer_logits(px__infer_t *net, const float *x, int32_t n, float *logits) {
  return px__logits(net, x, n, logits);
}

px_status_t px__infer_logits_ref(px__infer_t *net, const float *x, int32_t n, float *logits) {
  return px__run(net, x, n, logits, 1);
}

px_status_t px__infer_compare(px__infer_t *net, px_model_t *dense, const float *x, int32_t n,
                              int64_t *differ) {
  const int K = net->classes;
  const size_t per = (size_t)net->in_c * net->in_h * net->in_w;
  int32_t step = px_model_config(dense)->batch < net->batch ? px_model_config(dense)->batch
                                                              : net->batch;
  for (int32_t done = 0; done < n; done += step) {
    int32_t c = n - done < step ? n - done : step;
    PX_CHECK(px__logits(net, x + (size_t)done * per, c, net->logits));
    PX_CHECK(px_model_logits(dense, x + (size_t)done * per, c, net->logits2));
    for (int32_t i = 0; i < c; i++)
      *differ += px__argmax(net->logits + (size_t)i * K, K) !=
                 px__argmax(net->logits2 + (size_t)i * K, K);
  }
  return PX_OK;
}

/* One sample's loss and whether it is right, from its logits z. */
static void px__score(const float *z, int K, int32_t label, double *loss_sum, int64_t *correct) {
  int best = px__argmax(z, K);
  double mx = z[best], se = 0;
  for (int k = 0; k < K; k++) se += exp((double)z[k] - mx);
  *loss_sum += mx + log(se) - z[label];
  *correct += best == label;
}

/* px__infer_eval's gathered close calls rerun in f32 and scored. */
static px_status_t px__eval_flush(px__infer_t *net, double *loss_sum, int64_t *correct) {
  const int K = net->classes;
  const int32_t np = net->npend;
  net->npend = 0;
  PX_CHECK(px__run(net->exact, net->gather, np, net->exact->logits, 0));
  for (int32_t j = 0; j < np; j++)
    px__score(net->exact->logits + (size_t)j * K, K, net->pend[j], loss_sum, correct);
  net->rechecked += np;
  return PX_OK;
}

/* A bf16 net with its f32 twin scores the clear calls at once and gathers
 * the close ones over calls: the twin reruns them a full chunk at a time,
 * and the rest when called with n = 0 (px_trainer_evaluate_with's end of
 * the test set). Rerun batch by batch, the quickstart's model's 8 or so
 * close calls in a batch of 64 left the twin's chunks of 8 partly empty:
 * the reruns took 0.7 s of a 2.8 s evaluation, 0.35 s gathered. */
px_status_t px__infer_eval(px__infer_t *net, const float *x, const int32_t *y, int32_t n,
                           double *loss_sum, int64_t *correct) {
  const int K = net->classes;
  const size_t per = (size_t)net->in_c * net->in_h * net->in_w;
  for (int32_t i = 0; i < n; i++)
    PX_REQUIRE(y[i] >= 0 && y[i] < K, "label %d of sample %d is outside [0, %d)", y[i], i, K);
  if (n == 0) return net->npend ? px__eval_flush(net, loss_sum, correct) : PX_OK;
  for (int32_t done = 0; done < n; done += net->batch) {
    int32_t c = n - done < net->batch ? n - done : net->batch;
    const float *xc = x + (size_t)done * per;
    PX_CHECK(px__run(net, xc, c, net->logits, 0));
    for (int32_t i = 0; i < c; i++) {
      const float *z = net->logits + (size_t)i * K;
      if (!net->exact || !px__close_call(z, K)) {
        px__score(z, K, y[done + i], loss_sum, correct);
        continue;
      }
      memcpy(net->gather + (size_t)net->npend * per, xc + (size_t)i * per, per * sizeof(float));
      net->pend[net->npend++] = y[done + i];
      if (net->npend == net->exact->batch) PX_CHECK(px__eval_flush(net, loss_sum, correct));
    }
  }
  return PX_OK;
}
