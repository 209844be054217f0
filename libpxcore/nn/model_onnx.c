/* An imported ONNX graph (arch/onnx_import.c) lowered onto the model's
 * nodes through the layer functions of model_build.c. */
#include <stdio.h>

#include "nn/model_int.h"
#include "px_check.h"

/* Parameter i takes the name the file gives it (a layer scale's
 * "features.1.layer_scale", which is no module's ".weight"). */
static px_status_t px__rename(px_model_t *m, int i, const char *name) {
  char *nm = px__strdup(name, "model.name");
  if (!nm) return PX_ERR_NOMEM;
  px_free(m->pnames[i]);
  m->pnames[i] = nm;
  return PX_OK;
}

/* Whether graph g (with the compact widths m->widths, if any) trains faster
 * on channels-last maps on the CPU (px__ops_channels_last). oneDNN 2.6's
 * blocked layouts (16 channels on AVX-512; 8 on AVX2 divide 16) pad a
 * channel count that is not a multiple of 16, and the layer after a padded
 * map read it plain, where oneDNN has gemm convolutions only (slow for
 * depthwise and 1 x 1 ones); its depthwise and narrow-group kernels, and
 * the plain f32 graph operators (Mul, Concat, the channel shuffle,
 * LayerNorm), are also faster between channels-last maps. Networks of whole
 * blocks without those (ResNet, VGG, RegNetX: groups of 16) stay blocked,
 * where oneDNN's direct kernels are faster (vgg11_bn 2.2x, wide_resnet50_2
 * 1.2x; docs/performance.md, "The model zoo"). A classifier conv's classes
 * do not count. */
static int px__onnx_wants_cl(const px_model_t *m) {
  const px__onnx_graph_t *g = m->graph;
  for (int k = 0, conv = 0; k < g->nlayers; k++) {
    const px__onnx_layer_t *L = &g->layers[k];
    switch (L->kind) {
      case PX__OL_MUL:
      case PX__OL_CONCAT:
      case PX__OL_LN:
      case PX__OL_SHUFFLE:
      case PX__OL_SLICE: return 1;
      case PX__OL_CONV: {
        const int c_in = L->in < 0 ? g->in_c : g->layers[L->in].c_out;
        const int c_out = m->widths && conv < m->cfg.nwidths ? m->widths[conv] : L->c_out;
        conv++;
        if ((L->groups > 1 && (c_in / L->groups) % 16) || (!L->logits && c_out % 16)) return 1;
        break;
      }
      default: break;
    }
  }
  return 0;
}

/* An imported graph (arch/onnx_import.c) through the same layer functions as
 * the built-in architectures: the layers map one to one onto nodes; on the
 * CPU in f32 channels-last where px__onnx_wants_cl says so. */
px_status_t px__build_onnx(px_model_t *m) {
  const px__onnx_graph_t *g = m->graph;
  int *act = px_malloc((size_t)g->nlayers * sizeof *act, "model.onnx_acts");
  if (!act) return PX_ERR_NOMEM;
  px_status_t st = PX_OK;
  int x, cl_was = -1;
  if (px__on_cpu(m) && m->cfg.precision == PX_PRECISION_FP32 && px__onnx_wants_cl(m))
    cl_was = px__ops_channels_last(m->ops, 1);
  PX_CHECK_GOTO(px__input(m, &x), st, done);
  for (int k = 0; k < g->nlayers; k++) {
    const px__onnx_layer_t *L = &g->layers[k];
    int in = L->in < 0 ? x : act[L->in], in2 = L->in2 < 0 ? x : act[L->in2];
    switch (L->kind) {
      case PX__OL_CONV: {
        /* grouped convs and those on a 1 x 1 map (squeeze-and-excitation)
         * stay dense: see PX_WEIGHT_CONV_FIXED */
        int fixed = L->groups > 1 || L->logits || m->acts[in].dims[2] * m->acts[in].dims[3] == 1;
        /* a compact depthwise conv keeps one group per kept channel */
        int groups = m->widths && L->groups > 1 && L->groups == L->c_out ? (int)m->acts[in].dims[1]
                                                                          : L->groups;
        PX_CHECK_GOTO(px__conv_win(m, in, L->c_out, &L->win, groups,
                                 L->b.n > 0, fixed ? PX_WEIGHT_CONV_FIXED : PX_WEIGHT_CONV,
                                 L->prefix, &act[k]),
                      st, done);
        if (L->wname) PX_CHECK_GOTO(px__rename(m, m->nodes[m->nnodes - 1].w, L->wname), st, done);
        break;
      }
      case PX__OL_ACT:
        PX_CHECK_GOTO(px__act_node(m, in, (px__act_t)L->act, L->alpha, &act[k]), st, done);
        break;
      case PX__OL_MUL: /* (a compact model's channels are its inputs') */
        PX_CHECK_GOTO(px__graph_node(m, PX__MUL, in, in2, (int)m->acts[in].dims[1], &act[k]), st,
                      done);
        break;
      case PX__OL_CONCAT:
        PX_CHECK_GOTO(px__graph_node(m, PX__CONCAT, in, in2,
                                     (int)(m->acts[in].dims[1] + m->acts[in2].dims[1]), &act[k]),
                      st, done);
        break;
      case PX__OL_BN:
        PX_CHECK_GOTO(px__bn_as(m, in, L->relu, L->eps, L->momentum, L->prefix, &act[k]), st,
                      done);
        break;
      case PX__OL_ADD:
        PX_CHECK_GOTO(px__add(m, in, in2, L->relu, &act[k]), st, done);
        break;
      case PX__OL_LN:
        PX_CHECK_GOTO(px__ln_node(m, in, L->eps, L->prefix, &act[k]), st, done);
        break;
      case PX__OL_SHUFFLE:
      case PX__OL_SLICE:
        PX_CHECK_GOTO(px__chan_node(m, L, in, &act[k]), st, done);
        break;
      case PX__OL_GAP: PX_CHECK_GOTO(px__gap(m, in, &act[k]), st, done); break;
      case PX__OL_MAXPOOL:
      case PX__OL_AVGPOOL:
        PX_CHECK_GOTO(px__pool(m, in, L->kind == PX__OL_MAXPOOL ? PX_POOL_MAX : PX_POOL_AVG,
                               &L->win, &act[k]),
                      st, done);
        break;
      case PX__OL_FC:
        /* the last gives the logits (px__open_onnx checked its classes); one
         * before it, features for the next (kept whole by compaction) */
        PX_CHECK_GOTO(px__fc(m, in, L->c_out, L->prefix, &act[k]), st, done);
        break;
    }
  }
  /* a classifier of convolutions ends in a global pooling: its map, plain
   * [N, classes, 1, 1], is the logits (px__logits_2d) */
  if (g->layers[g->nlayers - 1].kind != PX__OL_FC)
    PX_CHECK_GOTO(px__plain(m, act[g->nlayers - 1], &x), st, done);
done:
  if (cl_was >= 0) px__ops_channels_last(m->ops, cl_was);
  px_free(act);
  return st;
}

/* Reads cfg->onnx into m->graph and checks it against the configuration. */
px_status_t px__open_onnx(px_model_t *m, const px_model_config_t *cfg,
                          const char *sha256) {
  if (!(m->onnx = px__strdup(cfg->onnx, "model.onnx"))) return PX_ERR_NOMEM;
  m->cfg.onnx = m->onnx;
  snprintf(m->arch, sizeof m->arch, "onnx");
  PX_CHECK(px__onnx_load(m->onnx, sha256, &m->graph));
  const px__onnx_graph_t *g = m->graph;
  if (g->in_c != cfg->in_channels || g->in_h != cfg->height || g->in_w != cfg->width)
    return px_set_error(PX_ERR_INVALID, "%s: the graph takes %dx%dx%d inputs, the data are "
                        "%dx%dx%d (channels x height x width)", m->onnx, g->in_c, g->in_h, g->in_w,
                        cfg->in_channels, cfg->height, cfg->width);
  if (g->classes != cfg->num_classes)
    return px_set_error(PX_ERR_INVALID, "%s: the graph gives %d logits, the data set has %d "
                        "classes", m->onnx, g->classes, cfg->num_classes);
  return PX_OK;
}
