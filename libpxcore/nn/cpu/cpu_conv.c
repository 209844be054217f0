/* 2-D convolution on oneDNN: forward, backward-data and backward-weights
 * primitives created once per layer shape and reused every step.
 *
 * Layouts: the source keeps the layout of the tensor the layer receives
 * (blocked from a previous layer, plain NCHW at the network input, where
 * oneDNN has dedicated first-layer kernels); the destination and the weights
 * are dnnl_format_tag_any so oneDNN picks its blocked formats. Gradients of
 * activations use their activation's descriptor, so the backward primitives
 * read and write the same layouts as the forward. The caller's weights and
 * weight gradients stay plain OIHW; each call converts them through the
 * context's weight buffer (weights are small next to activations, and this is
 * what keeps the optimiser and pruning working on plain arrays). This file
 * makes the descriptors; the executables, conversions, argument checks and
 * calls are those of every layer with weights (cpu_wlayer.c). */
#include <stddef.h>
#include <string.h>

#include "nn/cpu/px_cpu_int.h"
#include "prunex/ops_internal.h"

struct px_conv2d {
  px__ops_head_t head; /* first, the contract second: the dispatcher reads both */
  px__cpu_wlayer_t l; /* x: [N, C_in, H, W] in the input's layout; y: [N, C_out, OH, OW] in
                         oneDNN's; w: [C_out, C_in/groups, KH, KW] plain; b: [C_out] */
  px_ops_t *ops;
  px_conv2d_params_t p;
};
_Static_assert(offsetof(struct px_conv2d, l.wl) == offsetof(px__wlayer_op_t, wl),
               "the dispatcher reads the contract at px__wlayer_op_t's offset");

void px__cpu_conv2d_destroy(px_conv2d_t *op) {
  if (!op) return;
  px__cpu_wlayer_destroy(&op->l);
  if (op->ops) px__cpu_op_died(op->ops);
  px_free(op);
}

/* The output sizes of p on x_spec (both 0 when the window does not fit),
 * and oneDNN's geometry: strides, begin and end padding, dilation (d - 1). */
typedef struct {
  int64_t oh, ow;
  dnnl_dims_t strides, pad_l, pad_r, dil;
} px__conv_geom_t;

static px__conv_geom_t px__conv_geom(const px_tensor_t *x_spec, const px_conv2d_params_t *p) {
  const int64_t dh = p->dil_h > 1 ? p->dil_h : 1, dw = p->dil_w > 1 ? p->dil_w : 1;
  const int64_t pb = (int64_t)p->pad_h + p->pad_h_extra, pr = (int64_t)p->pad_w + p->pad_w_extra;
  const px__axis_t ah = {x_spec->dims[2], p->kh, p->stride_h, p->pad_h, pb, dh, 0};
  const px__axis_t aw = {x_spec->dims[3], p->kw, p->stride_w, p->pad_w, pr, dw, 0};
  px__conv_geom_t g = {px__axis_out(&ah), px__axis_out(&aw), {p->stride_h, p->stride_w},
                       {p->pad_h, p->pad_w}, {pb, pr}, {dh - 1, dw - 1}};
  if (g.oh <= 0 || g.ow <= 0) g.oh = g.ow = 0;
  return g;
}

/* The weights' plain and primitive-chosen descriptors. Grouped: oneDNN's
 * weights are [g, c_out/g, c_in/g, kh, kw], the same bytes as the plain
 * [c_out, c_in/g, kh, kw] the caller holds. */
static px_status_t px__weight_mds(const px_conv2d_params_t *p, int64_t c_in, int64_t g,
                                  dnnl_data_type_t dt, dnnl_memory_desc_t *plain,
                                  dnnl_memory_desc_t *any) {
  dnnl_dims_t wd = {p->c_out, c_in, p->kh, p->kw}, gwd = {g, p->c_out / g, c_in / g, p->kh, p->kw};
  const int64_t wdims[4] = {p->c_out, c_in / g, p->kh, p->kw};
  if (g > 1) PX_DNNL(dnnl_memory_desc_init_by_tag(plain, 5, gwd, dnnl_f32, dnnl_goihw));
  else PX_CHECK(px__cpu_plain_md(plain, 4, wdims, PX_DTYPE_F32));
  PX_DNNL(dnnl_memory_desc_init_by_tag(any, g > 1 ? 5 : 4, g > 1 ? gwd : wd, dt,
                                       dnnl_format_tag_any));
  return PX_OK;
}

/* The memory descriptors of one of a layer's three convolutions: source
 * (or its gradient), weights (or their gradient), bias, destination (or its
 * gradient). */
typedef struct {
  const dnnl_memory_desc_t *x, *w, *b, *y;
  const px__conv_geom_t *g;
} px__conv_mds_t;

static dnnl_status_t px__conv_desc(int k, dnnl_alg_kind_t alg, const px__conv_mds_t *m,
                                   dnnl_convolution_desc_t *cd) {
  const px__conv_geom_t *g = m->g;
  if (k == PX__WL_FWD)
    return dnnl_dilated_convolution_forward_desc_init(cd, dnnl_forward_training, alg, m->x, m->w,
                                                      m->b, m->y, g->strides, g->dil, g->pad_l,
                                                      g->pad_r);
  if (k == PX__WL_BWD_D)
    return dnnl_dilated_convolution_backward_data_desc_init(cd, alg, m->x, m->w, m->y, g->strides,
                                                            g->dil, g->pad_l, g->pad_r);
  return dnnl_dilated_convolution_backward_weights_desc_init(cd, alg, m->x, m->w, m->b, m->y,
                                                             g->strides, g->dil, g->pad_l,
                                                             g->pad_r);
}

/* pd[k] (the backward ones hinted by pd[PX__WL_FWD]): oneDNN's Winograd
 * kernels where bit k of wino asks for them and oneDNN has them for these
 * shapes and layouts, its direct ones otherwise. */
static px_status_t px__conv_pd(px_ops_t *ops, dnnl_primitive_desc_t pd[PX__WL_NPD], int k, int wino,
                               const px__conv_mds_t *m, const char *what) {
  const_dnnl_primitive_desc_t hint = k == PX__WL_FWD ? NULL : pd[PX__WL_FWD];
  dnnl_convolution_desc_t cd;
  if ((wino >> k & 1) && px__conv_desc(k, dnnl_convolution_winograd, m, &cd) == dnnl_success &&
      dnnl_primitive_desc_create(&pd[k], (const_dnnl_op_desc_t)&cd, ops->attr, ops->engine,
                                 hint) == dnnl_success) {
    ops->wino_pds++;
    return PX_OK;
  }
  pd[k] = NULL;
  PX_DNNL(px__conv_desc(k, dnnl_convolution_direct, m, &cd));
  return px__cpu_pd_create(ops, &pd[k], &cd, NULL, hint, what);
}

/* Which of an f32 layer's convolutions go to Winograd F(4x4, 3x3) (bit k:
 * pd[k]): the dense 3x3 ones with stride 1 and padding 1 with 32 or more
 * input and output channels, forward and backward data, and with 64 or more
 * the backward weights, where oneDNN 2.6's jit_wino_4x3 (AVX-512) beats its
 * direct kernels at batch 128 (docs/performance.md: 1.3-2.9x on ResNet-18's
 * layers; slower at 16 channels, and at 32 for the weights). Off with
 * PX_CPU_WINOGRAD=0 (ops->winograd): its transforms round differently from
 * the direct sums (tests/test_ops_conv.c bounds the difference). */
static int px__conv_wino(const px_ops_t *ops, const px_conv2d_params_t *p, int64_t c_in,
                         int64_t g) {
  if (!ops->winograd || g > 1 || p->kh != 3 || p->kw != 3 || p->stride_h != 1 ||
      p->stride_w != 1 || p->pad_h != 1 || p->pad_w != 1 || p->pad_h_extra || p->pad_w_extra ||
      p->dil_h > 1 || p->dil_w > 1)
    return 0;
  int w = 0;
  if (c_in >= 32 && p->c_out >= 32) w |= 1 << PX__WL_FWD | 1 << PX__WL_BWD_D;
  if (c_in >= 64 && p->c_out >= 64) w |= 1 << PX__WL_BWD_W;
  return w;
}

/* The backward-data and backward-weights descriptors after the forward's:
 * dx (input gradient) and w_d (weights) for the first, x_w (source) and dw
 * (weight gradient) for the second, dy (output gradient) for both; Winograd
 * where wino asks (px__conv_wino). */
static px_status_t px__conv_bwd_pds(px_ops_t *ops, dnnl_primitive_desc_t pd[PX__WL_NPD], int wino,
                                    const dnnl_memory_desc_t *dx, const dnnl_memory_desc_t *w_d,
                                    const dnnl_memory_desc_t *x_w, const dnnl_memory_desc_t *dw,
                                    const dnnl_memory_desc_t *bias, const dnnl_memory_desc_t *dy,
                                    const px__conv_geom_t *geo) {
  const px__conv_mds_t d = {dx, w_d, NULL, dy, geo}, w = {x_w, dw, bias, dy, geo};
  PX_CHECK(px__conv_pd(ops, pd, PX__WL_BWD_D, wino, &d, "convolution backward data"));
  return px__conv_pd(ops, pd, PX__WL_BWD_W, wino, &w, "convolution backward weights");
}

/* bf16 descriptors (px__conv_pds with l->lowp): bf16 source, weights and
 * output gradient in layouts oneDNN picks (its AMX kernels where the CPU has
 * them), f32 output (in y_md, the f32 layer's layout), input gradient (in
 * x's layout) and weight gradient, f32 accumulation. The backward weights
 * reads the forward's bf16 source. */
static px_status_t px__conv_pds_bf16(px_ops_t *ops, const px_conv2d_params_t *p,
                                     const dnnl_memory_desc_t *x_md, const dnnl_memory_desc_t *b_md,
                                     const dnnl_memory_desc_t *y_md, const px__conv_geom_t *geo,
                                     dnnl_primitive_desc_t pd[PX__WL_NPD]) {
  const int64_t g = p->groups > 1 ? p->groups : 1;
  dnnl_memory_desc_t x_any, w_any, w_f32, dy_any, plain;
  PX_DNNL(dnnl_memory_desc_init_by_tag(&x_any, 4, x_md->dims, dnnl_bf16, dnnl_format_tag_any));
  PX_CHECK(px__weight_mds(p, x_md->dims[1], g, dnnl_bf16, &plain, &w_any));
  PX_CHECK(px__weight_mds(p, x_md->dims[1], g, dnnl_f32, &plain, &w_f32));
  PX_DNNL(dnnl_memory_desc_init_by_tag(&dy_any, 4, y_md->dims, dnnl_bf16, dnnl_format_tag_any));
  dnnl_convolution_desc_t cd;
  const px__conv_mds_t f = {&x_any, &w_any, b_md, y_md, geo};
  PX_DNNL(px__conv_desc(PX__WL_FWD, dnnl_convolution_direct, &f, &cd));
  PX_CHECK(px__cpu_pd_create(ops, &pd[PX__WL_FWD], &cd, NULL, NULL, "bf16 convolution forward"));
  const dnnl_memory_desc_t x_lp = *px__cpu_pd_md(pd[PX__WL_FWD], DNNL_ARG_SRC);
  return px__conv_bwd_pds(ops, pd, 0, x_md, &w_any, &x_lp, &w_f32, b_md, &dy_any, geo);
}

/* st, after noting a forward, backward weights or backward data on oneDNN's
 * reference code (warned of when it first runs, px__cpu_wlayer_forward,
 * _backward_weights and _backward_data; the backward data counted apart). */
static px_status_t px__conv_note_ref(px_ops_t *ops, px__cpu_wlayer_t *l, px_status_t st,
                                     dnnl_primitive_desc_t pd[PX__WL_NPD]) {
  if (st == PX_OK) {
    px__cpu_note_ref(ops, pd[PX__WL_FWD], l->ref_fwd);
    px__cpu_note_ref(ops, pd[PX__WL_BWD_W], l->ref_bwd_w);
    if (px__cpu_pd_is_ref(pd[PX__WL_BWD_D], l->ref_bwd_d)) ops->ref_bwd_d_pds++;
  }
  return st;
}

/* A convolution's three descriptors with source x, the destination y
 * (`any` or a layout), direct, into pd. */
static px_status_t px__conv_try(px_ops_t *ops, const dnnl_memory_desc_t *x,
                                const dnnl_memory_desc_t *y, const px__conv_mds_t *m,
                                dnnl_primitive_desc_t pd[PX__WL_NPD]) {
  const px__conv_mds_t f = {x, m->w, m->b, y, m->g};
  PX_CHECK(px__conv_pd(ops, pd, PX__WL_FWD, 0, &f, "convolution forward"));
  const dnnl_memory_desc_t y_md = *px__cpu_pd_md(pd[PX__WL_FWD], DNNL_ARG_DST);
  return px__conv_bwd_pds(ops, pd, 0, x, m->w, x, m->w, m->b, &y_md, m->g);
}

/* How many of pd's forward and backward weights run on the reference code
 * (the backward data counts apart: a network's first layer, whose blocked
 * kernels on a 3-channel plain input have no vector backward data, never
 * runs it), and whether its backward data does. */
static int px__pds_ref(dnnl_primitive_desc_t const pd[PX__WL_NPD], int *bwd_d) {
  *bwd_d = px__cpu_pd_is_ref(pd[PX__WL_BWD_D], NULL);
  return px__cpu_pd_is_ref(pd[PX__WL_FWD], NULL) + px__cpu_pd_is_ref(pd[PX__WL_BWD_W], NULL);
}

/* Where pd (made on source x_md) has a forward or backward weights on
 * oneDNN's reference code: all three channels-last with the source
 * converted (l->xcvt), when that leaves fewer and no new backward data
 * there (oneDNN 2.6 on AVX2 has no blocked kernel for ResNeXt's 4-channel
 * groups, nor for the weight gradient of a 3 x 3 convolution on a 2 x 2
 * map, dense or grouped, or of a one-channel stem such as Fashion-MNIST's,
 * 2,000 times slower there than the other layers' kernels; channels-last it
 * has). Off with
 * PX_CPU_CHANNELS_LAST=0 (ops->cl_fallback). y_spec from pd's forward.
 * m: the weights, bias, geometry (x, y unused). */
static px_status_t px__conv_cl_fallback(px_ops_t *ops, px__cpu_wlayer_t *l,
                                        const dnnl_memory_desc_t *x_md, const int64_t *ydims,
                                        const px__conv_mds_t *m,
                                        dnnl_primitive_desc_t pd[PX__WL_NPD]) {
  dnnl_memory_desc_t x_cl, y_cl;
  PX_DNNL(dnnl_memory_desc_init_by_tag(&x_cl, 4, x_md->dims, dnnl_f32, dnnl_acdb));
  PX_DNNL(dnnl_memory_desc_init_by_tag(&y_cl, 4, ydims, dnnl_f32, dnnl_acdb));
  int bwd_d, bwd_d_cl;
  const int nref = px__pds_ref(pd, &bwd_d);
  /* a one-channel plain source is channels-last already, the same bytes
     (oneDNN calls the two equal): described as such, it needs no conversion */
  const int same = dnnl_memory_desc_equal(x_md, &x_cl);
  if (nref > 0 && ops->cl_fallback) {
    dnnl_primitive_desc_t alt[PX__WL_NPD] = {NULL, NULL, NULL};
    px_status_t st = px__conv_try(ops, &x_cl, &y_cl, m, alt);
    int take = st == PX_OK && px__pds_ref(alt, &bwd_d_cl) < nref && bwd_d_cl <= bwd_d;
    for (int i = 0; i < PX__WL_NPD; i++) {
      dnnl_primitive_desc_t *drop = take ? &pd[i] : &alt[i];
      if (*drop) dnnl_primitive_desc_destroy(*drop);
      if (take) pd[i] = alt[i];
    }
    l->xcvt = take && !same;
  }
  return px__cpu_spec_of(ops, px__cpu_pd_md(pd[PX__WL_FWD], DNNL_ARG_DST), &l->wl.y_spec);
}

/* Where pd's backward data alone runs on oneDNN's reference code: the same
 * primitive with the input gradient channels-last, or in the layout oneDNN
 * picks, converted back into x's layout after it (l->dxcvt). oneDNN 2.6 has
 * no vector backward data for a 2- or 3-channel plain input under a blocked
 * output gradient (a compact model's conv2 after a 2-channel conv1: 3.5 s a
 * batch of 256 on its reference code, 700 times its other layers); the
 * forward and backward weights keep x's layout. Off with
 * PX_CPU_CHANNELS_LAST=0, as px__conv_cl_fallback. m: the weights and the
 * geometry. */
static px_status_t px__conv_dx_fallback(px_ops_t *ops, px__cpu_wlayer_t *l,
                                        const px__conv_mds_t *m,
                                        dnnl_primitive_desc_t pd[PX__WL_NPD]) {
  if (!ops->cl_fallback || l->lowp || l->xcvt || !px__cpu_pd_is_ref(pd[PX__WL_BWD_D], NULL))
    return PX_OK;
  const dnnl_memory_desc_t x_md = *px__cpu_pd_md(pd[PX__WL_BWD_D], DNNL_ARG_DIFF_SRC);
  const dnnl_memory_desc_t dy = *px__cpu_pd_md(pd[PX__WL_BWD_D], DNNL_ARG_DIFF_DST);
  const dnnl_format_tag_t tags[] = {dnnl_acdb, dnnl_format_tag_any};
  for (size_t i = 0; i < sizeof tags / sizeof *tags; i++) {
    dnnl_memory_desc_t dx;
    dnnl_convolution_desc_t cd;
    dnnl_primitive_desc_t alt = NULL;
    PX_DNNL(dnnl_memory_desc_init_by_tag(&dx, 4, x_md.dims, dnnl_f32, tags[i]));
    const px__conv_mds_t d = {&dx, m->w, NULL, &dy, m->g};
    if (px__conv_desc(PX__WL_BWD_D, dnnl_convolution_direct, &d, &cd) != dnnl_success ||
        dnnl_primitive_desc_create(&alt, (const_dnnl_op_desc_t)&cd, ops->attr, ops->engine,
                                   pd[PX__WL_FWD]) != dnnl_success)
      continue;
    if (px__cpu_pd_is_ref(alt, NULL)) {
      dnnl_primitive_desc_destroy(alt);
      continue;
    }
    dnnl_primitive_desc_destroy(pd[PX__WL_BWD_D]);
    pd[PX__WL_BWD_D] = alt;
    l->dxcvt = 1;
    l->dx_bytes = dnnl_memory_desc_get_size(px__cpu_pd_md(alt, DNNL_ARG_DIFF_SRC));
    return PX_OK;
  }
  return PX_OK;
}

/* A grouped convolution, not depthwise (ResNeXt's, RegNetY's). oneDNN 2.6
 * has vector kernels (jit, or gemm per group) for it on a plain or
 * channels-last source only with the destination alike (given `any` there,
 * its reference code takes the layer), and on its blocked layout only where
 * each group's channels fill whole blocks. So: the source as it comes with
 * the destination like it (`any` after a blocked source), then
 * px__conv_cl_fallback. */
static px_status_t px__conv_grouped_pds(px_ops_t *ops, px__cpu_wlayer_t *l,
                                        const dnnl_memory_desc_t *x_md, const int64_t *ydims,
                                        const px__conv_mds_t *m,
                                        dnnl_primitive_desc_t pd[PX__WL_NPD]) {
  dnnl_memory_desc_t plain, x_cl, y;
  PX_DNNL(dnnl_memory_desc_init_by_tag(&plain, 4, x_md->dims, dnnl_f32, dnnl_abcd));
  PX_DNNL(dnnl_memory_desc_init_by_tag(&x_cl, 4, x_md->dims, dnnl_f32, dnnl_acdb));
  dnnl_format_tag_t ytag = dnnl_memory_desc_equal(x_md, &plain)  ? dnnl_abcd
                           : dnnl_memory_desc_equal(x_md, &x_cl) ? dnnl_acdb
                                                                  : dnnl_format_tag_any;
  PX_DNNL(dnnl_memory_desc_init_by_tag(&y, 4, ydims, dnnl_f32, ytag));
  PX_CHECK(px__conv_try(ops, x_md, &y, m, pd));
  return px__conv_cl_fallback(ops, l, x_md, ydims, m, pd);
}

/* The convolution's descriptors and specs (px__cpu_wlayer_pds_fn): y_spec
 * from the destination oneDNN chose; dx uses the layout of x, dy that of y. */
static px_status_t px__conv_pds(px_ops_t *ops, px__cpu_wlayer_t *l, const void *params,
                                dnnl_primitive_desc_t pd[PX__WL_NPD], dnnl_memory_desc_t *w_plain) {
  const px_conv2d_params_t *p = params;
  const px_tensor_t *x_spec = &l->wl.x_spec;
  const int64_t n = x_spec->dims[0], c_in = x_spec->dims[1], g = p->groups > 1 ? p->groups : 1;
  const px__conv_geom_t geo = px__conv_geom(x_spec, p);
  const int64_t wdims[4] = {p->c_out, c_in / g, p->kh, p->kw}, bdims[1] = {p->c_out};
  PX_CHECK(px_tensor_init(&l->wl.w_spec, ops->device, PX_DTYPE_F32, 4, wdims));
  PX_CHECK(px_tensor_init(&l->wl.b_spec, ops->device, PX_DTYPE_F32, 1, bdims));
  dnnl_memory_desc_t x_md, w_any, b_md, y_any;
  dnnl_dims_t ydims = {n, p->c_out, geo.oh, geo.ow};
  PX_CHECK(px__cpu_md_of(ops, x_spec, &x_md));
  /* a one-channel plain input is also channels-last, the same bytes: so described, it reaches
     oneDNN's channels-last stem kernels (with the plain description, its reference code) */
  if (ops->conv_nhwc && !x_spec->layout && c_in == 1) {
    dnnl_dims_t xd = {n, 1, x_spec->dims[2], x_spec->dims[3]};
    PX_DNNL(dnnl_memory_desc_init_by_tag(&x_md, 4, xd, dnnl_f32, dnnl_acdb));
  }
  PX_CHECK(px__weight_mds(p, c_in, g, dnnl_f32, w_plain, &w_any));
  PX_CHECK(px__cpu_plain_md(&b_md, 1, bdims, PX_DTYPE_F32));
  /* bf16 context on AMX (conv_bf16_cl): channels-last outputs for every convolution (f32 ones
     too), the layout of oneDNN's AMX kernels, so that residual adds meet one layout (without
     AMX the layouts oneDNN picks: its AVX512-BF16 kernels are blocked); the same in f32 where the
     context asks for it (conv_nhwc: a compact model's 8-channel layers, which oneDNN's blocked
     layouts send to its reference code); and after a channels-last source (a grouped
     convolution's, px__conv_grouped_pds), since oneDNN 2.6 takes one with `any` for the
     destination on its reference code (a 1 x 1 map's plain layout is also channels-last:
     there `any`, as before) */
  dnnl_memory_desc_t x_cl, x_plain;
  PX_DNNL(dnnl_memory_desc_init_by_tag(&x_cl, 4, x_md.dims, dnnl_f32, dnnl_acdb));
  PX_DNNL(dnnl_memory_desc_init_by_tag(&x_plain, 4, x_md.dims, dnnl_f32, dnnl_abcd));
  const int cl = ops->conv_bf16_cl || ops->conv_nhwc ||
                 (dnnl_memory_desc_equal(&x_md, &x_cl) && !dnnl_memory_desc_equal(&x_md, &x_plain));
  PX_DNNL(dnnl_memory_desc_init_by_tag(&y_any, 4, ydims, dnnl_f32,
                                       cl ? dnnl_acdb : dnnl_format_tag_any));
  const dnnl_memory_desc_t *bias = p->bias ? &b_md : NULL;
  if (g > 1 && !(g == c_in && g == p->c_out) && !ops->conv_bf16_cl && !ops->conv_nhwc) {
    const px__conv_mds_t gm = {NULL, &w_any, bias, NULL, &geo};
    return px__conv_note_ref(ops, l, px__conv_grouped_pds(ops, l, &x_md, ydims, &gm, pd), pd);
  }
  /* bf16 where the context asks for it: dense layers (oneDNN 2.6 has no AMX kernel for
     grouped ones), and not the channels-last layers of a compact model without AMX (there
     oneDNN 2.6 runs channels-last bf16 on its reference code: they stay f32) */
  l->lowp = ops->conv_bf16 && g == 1 && (ops->conv_bf16_cl || !ops->conv_nhwc);

  const int wino = l->lowp ? 0 : px__conv_wino(ops, p, c_in, g);
  const px__conv_mds_t f = {&x_md, &w_any, bias, &y_any, &geo};
  PX_CHECK(px__conv_pd(ops, pd, PX__WL_FWD, wino, &f, "convolution forward"));
  const dnnl_memory_desc_t y_md = *px__cpu_pd_md(pd[PX__WL_FWD], DNNL_ARG_DST);
  PX_CHECK(px__cpu_spec_of(ops, &y_md, &l->wl.y_spec));
  if (l->lowp) {
    dnnl_primitive_desc_destroy(pd[PX__WL_FWD]);
    pd[PX__WL_FWD] = NULL;
    return px__conv_note_ref(ops, l, px__conv_pds_bf16(ops, p, &x_md, bias, &y_md, &geo, pd),
                             pd);
  }
  PX_CHECK(px__conv_bwd_pds(ops, pd, wino, &x_md, &w_any, &x_md, &w_any, bias, &y_md, &geo));
  const px__conv_mds_t gm = {NULL, &w_any, bias, NULL, &geo};
  px_status_t st = px__conv_cl_fallback(ops, l, &x_md, ydims, &gm, pd);
  if (st == PX_OK) st = px__conv_dx_fallback(ops, l, &gm, pd);
  return px__conv_note_ref(ops, l, st, pd);
}

px_status_t px__cpu_conv2d_create(px_ops_t *ops, const px_tensor_t *x_spec, const px_conv2d_params_t *p,
                                  px_conv2d_t **out) {
  PX_REQUIRE(out && p, "px_conv2d_create: NULL argument");
  *out = NULL;
  PX_CHECK(px__cpu_check_input(ops, x_spec, 4, 4, "px_conv2d_create"));
  PX_REQUIRE(p->c_out > 0 && p->kh > 0 && p->kw > 0 && p->stride_h > 0 && p->stride_w > 0 &&
                 p->pad_h >= 0 && p->pad_w >= 0 && p->pad_h + p->pad_h_extra >= 0 &&
                 p->pad_w + p->pad_w_extra >= 0 && p->dil_h >= 0 && p->dil_w >= 0,
             "px_conv2d_create: bad parameters (c_out %d, kernel %dx%d, stride %dx%d, pad %dx%d "
             "(+%dx%d at the end), dilation %dx%d)",
             p->c_out, p->kh, p->kw, p->stride_h, p->stride_w, p->pad_h, p->pad_w, p->pad_h_extra,
             p->pad_w_extra, p->dil_h, p->dil_w);
  const int64_t c_in = x_spec->dims[1], g = p->groups > 1 ? p->groups : 1;
  PX_REQUIRE(p->groups >= 0 && c_in % g == 0 && p->c_out % g == 0,
             "px_conv2d_create: %lld input and %d output channels in %lld groups",
             (long long)c_in, p->c_out, (long long)g);
  PX_REQUIRE(px__conv_geom(x_spec, p).oh > 0,
             "px_conv2d_create: kernel larger than the padded input");

  px__cpu_enter(ops);
  px_conv2d_t *op = px__cpu_op_new(ops, sizeof *op, "px_conv2d");
  if (!op) return PX_ERR_NOMEM;
  op->ops = ops;
  op->p = *p;
  px__wlayer_init(&op->l.wl, "conv2d", "conv", p->bias, x_spec);
  px_status_t st = px__cpu_wlayer_create(ops, &op->l, px__conv_pds, p);
  if (st != PX_OK) {
    px__cpu_conv2d_destroy(op);
    return st;
  }
  *out = op;
  return PX_OK;
}

px_status_t px__cpu_conv2d_forward(px_conv2d_t *op, px_tensor_t *y, const px_tensor_t *x,
                                   const px_tensor_t *w, const px_tensor_t *b) {
  return px__cpu_wlayer_forward(op->ops, &op->l, y, x, w, b);
}

px_status_t px__cpu_conv2d_backward_data(px_conv2d_t *op, px_tensor_t *dx, const px_tensor_t *dy,
                                         const px_tensor_t *w) {
  return px__cpu_wlayer_backward_data(op->ops, &op->l, dx, dy, w);
}

px_status_t px__cpu_conv2d_backward_weights(px_conv2d_t *op, px_tensor_t *dw, px_tensor_t *db,
                                            const px_tensor_t *x, const px_tensor_t *dy) {
  return px__cpu_wlayer_backward_weights(op->ops, &op->l, dw, db, x, dy);
}
