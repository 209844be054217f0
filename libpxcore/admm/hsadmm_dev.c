/* The device-state round's pack/expand and projection (hsadmm_state.h),
 * written once over the state ops table.
 *
 * Pack/expand: the pack plan (prune/pack.c) stays the one place that lays
 * out the packed stream; here its layout becomes one block per parameter
 * (where it starts, |K_out| x |K_in| x kh x kw for a conv, whole for a dense
 * tensor) with the index sets and the masks copied to state memory after
 * each px_pack_plan_set_masks, and the table gathers and scatters the
 * blocks (pack.c's run copies, bit for bit: it is a copy).
 *
 * Projection: px_sparsity_project's order (sparsity.c) step by step: per
 * step the table sums the group norms where the state lives (in project.c's
 * order, so they are the CPU's bits), the host downloads those norms alone
 * (a few KB), chooses with project.c's own px_prune_select_groups, writes
 * the choice into the host masks and sends the choice bytes back, and the
 * table zeroes the pruned groups. Every rank holding the same tensor
 * downloads the same norms and so chooses the same groups, ties included.
 * N:M (per-element) layouts have no device form: refused. */
#include <string.h>

#include "admm/hsadmm_state.h"
#include "px_check.h"
#include "prunex/prune_internal.h"

px_status_t px__hss_dev_create(px__hss_dev_t *d, const px__hss_t *st, const px_sparsity_t *sp) {
  const px__hss_ops_t *ops = st->ops;
  memset(d, 0, sizeof *d);
  d->n = st->n;
  d->mbytes = px_sparsity_mask_bytes(sp);
  d->max_groups = 1;
  for (int i = 0; i < st->n; i++) {
    const px_prune_layout_t *L = px_sparsity_layout(sp, i);
    if (!L) continue;
    d->nsets += (size_t)L->shape.c_out + (size_t)L->shape.c_in;
    size_t g = px_prune_group_count(L->shape, PX_PRUNE_GROUP_SHAPE);
    if ((size_t)L->shape.c_out > g) g = (size_t)L->shape.c_out;
    if (g > d->max_groups) d->max_groups = g;
  }
  d->blocks = px_calloc((size_t)(st->n ? st->n : 1), sizeof *d->blocks, "hsadmm.blocks");
  d->h_sets = px_malloc((d->nsets ? d->nsets : 1) * sizeof(int32_t), "hsadmm.sets");
  d->h_norms = px_calloc(d->max_groups, sizeof(double), "hsadmm.norms");
  d->idx = px_malloc(d->max_groups * sizeof(int32_t), "hsadmm.select");
  if (!d->blocks || !d->h_sets || !d->h_norms || !d->idx) return PX_ERR_NOMEM;
  PX_CHECK(ops->alloc(d->nsets * sizeof(int32_t), "hsadmm.sets", (void **)&d->sets));
  PX_CHECK(ops->alloc(d->mbytes, "hsadmm.masks", (void **)&d->masks));
  PX_CHECK(ops->alloc(d->mbytes, "hsadmm.choices", (void **)&d->scratch));
  PX_CHECK(ops->alloc(st->total * sizeof(float), "hsadmm.packed", (void **)&d->packed));
  return ops->alloc(d->max_groups * sizeof(double), "hsadmm.norms", (void **)&d->norms);
}

void px__hss_dev_free(px__hss_dev_t *d, const px__hss_t *st) {
  if (st->ops) {
    void *bufs[] = {d->sets, d->masks, d->scratch, d->packed, d->norms};
    for (size_t b = 0; b < sizeof bufs / sizeof bufs[0]; b++) st->ops->release(bufs[b]);
  }
  PX_FREE_ALL(d->blocks, d->h_sets, d->h_norms, d->idx);
  memset(d, 0, sizeof *d);
}

/* ---- pack / expand ------------------------------------------------------------------- */

px_status_t px__hss_pack_set(px__hss_dev_t *d, const px__hss_t *st, const px_pack_plan_t *plan,
                             const px_sparsity_t *sp, const uint8_t *masks) {
  size_t cur = 0;
  for (int i = 0; i < d->n; i++) {
    px__hss_block_t *b = &d->blocks[i];
    memset(b, 0, sizeof *b);
    b->off = st->off[i];
    b->numel = st->numel[i];
    if (px_pack_param_block(plan, i, &b->packed_off, &b->packed_len))
      return px_set_error(PX_ERR_INVALID, "H-SADMM device state: parameter %d packs element by "
                          "element (prune.nm_n/nm_m), which has no device block", i);
    const px_prune_layout_t *L = px_sparsity_layout(sp, i);
    if (!L) continue;
    const int32_t *ko, *ki;
    b->conv = 1;
    b->shape = L->shape;
    px_pack_param_sets(plan, i, &ko, &b->n_out, &ki, &b->n_in);
    memcpy(d->h_sets + cur, ko, (size_t)b->n_out * sizeof(int32_t));
    b->k_out = d->sets + cur;
    cur += (size_t)b->n_out;
    memcpy(d->h_sets + cur, ki, (size_t)b->n_in * sizeof(int32_t));
    b->k_in = d->sets + cur;
    cur += (size_t)b->n_in;
    b->shape_mask = px_prune_part(L, d->masks + px_sparsity_mask_offset(sp, i),
                                  PX_PRUNE_PART_SHAPE);
  }
  PX_CHECK(st->ops->upload(d->sets, d->h_sets, cur * sizeof(int32_t)));
  return st->ops->upload(d->masks, masks, d->mbytes);
}

px_status_t px__hss_shrink(const px__hss_t *st, px__hss_dev_t *d, const float *src) {
  for (int i = 0; i < d->n; i++) {
    const px__hss_block_t *b = &d->blocks[i];
    PX_CHECK(st->ops->shrink(d->packed + b->packed_off, src + b->off, b));
  }
  return PX_OK;
}

px_status_t px__hss_expand(const px__hss_t *st, px__hss_dev_t *d, float *dst) {
  for (int i = 0; i < d->n; i++) {
    const px__hss_block_t *b = &d->blocks[i];
    PX_CHECK(st->ops->expand(dst + b->off, d->packed + b->packed_off, b));
  }
  return PX_OK;
}

/* ---- projection ---------------------------------------------------------------------- */

/* Whether a choice of alpha among G groups reads the norms at all. */
static int px__ranked(size_t G, size_t alpha) { return alpha > 0 && alpha < G; }

/* The choice of alpha among G groups from d->norms (summed by the caller
 * when ranked) into dec (host) and its copy ddec (state memory). */
static px_status_t px__choose(const px__hss_t *st, px__hss_dev_t *d, size_t G, size_t alpha,
                              uint8_t *dec, uint8_t *ddec) {
  if (px__ranked(G, alpha))
    PX_CHECK(st->ops->download(d->h_norms, d->norms, G * sizeof(double)));
  px_prune_select_groups(d->h_norms, G, alpha, d->idx, dec);
  return st->ops->upload(ddec, dec, G);
}

/* px_prune_project_filter / _channel / _shape of x: the kind's part of the
 * mask into dec (host), its copy ddec. */
static px_status_t px__project_kind(const px__hss_t *st, px__hss_dev_t *d, float *x,
                                    px_conv_shape_t s, px_prune_group_t kind, double keep,
                                    uint8_t *dec, uint8_t *ddec) {
  size_t G = px_prune_group_count(s, kind), alpha = px_prune_keep_count(keep, G);
  if (px__ranked(G, alpha)) PX_CHECK(st->ops->norms(d->norms, x, s, kind, 0));
  PX_CHECK(px__choose(st, d, G, alpha, dec, ddec));
  if (alpha >= G) return PX_OK;
  return st->ops->apply(x, kind == PX_PRUNE_GROUP_FILTER ? ddec : NULL,
                        kind == PX_PRUNE_GROUP_CHANNEL ? ddec : NULL,
                        kind == PX_PRUNE_GROUP_SHAPE ? ddec : NULL, s);
}

/* px_prune_project_coupled of producer i and its consumer. */
static px_status_t px__project_coupled(const px__hss_t *st, px__hss_dev_t *d,
                                       const px_sparsity_t *sp, int i, float *fam,
                                       uint8_t *masks) {
  int c = px_sparsity_param(sp, i)->consumer;
  const px_prune_layout_t *Lp = px_sparsity_layout(sp, i), *Lc = px_sparsity_layout(sp, c);
  float *prod = fam + st->off[i], *cons = fam + st->off[c];
  size_t mc = px_sparsity_mask_offset(sp, c);
  uint8_t *pf = px_prune_part(Lp, masks + px_sparsity_mask_offset(sp, i), PX_PRUNE_PART_FILTER);
  uint8_t *cc = px_prune_part(Lc, masks + mc, PX_PRUNE_PART_CHANNEL);
  uint8_t *dcc = px_prune_part(Lc, d->scratch + mc, PX_PRUNE_PART_CHANNEL);
  size_t C = (size_t)Lc->shape.c_in;
  size_t alpha = px_prune_keep_count(px_sparsity_keep(sp)->channel_keep, C);
  if (px__ranked(C, alpha)) { /* the producer's filter norm, then the consumer's channel sums */
    PX_CHECK(st->ops->norms(d->norms, prod, Lp->shape, PX_PRUNE_GROUP_FILTER, 0));
    PX_CHECK(st->ops->norms(d->norms, cons, Lc->shape, PX_PRUNE_GROUP_CHANNEL, 1));
  }
  PX_CHECK(px__choose(st, d, C, alpha, cc, dcc));
  for (size_t k = 0; k < C; k++)
    if (!cc[k]) pf[k] = 0;
  if (alpha >= C) return PX_OK;
  PX_CHECK(st->ops->apply(prod, dcc, NULL, NULL, Lp->shape)); /* filter c goes with channel c */
  return st->ops->apply(cons, NULL, dcc, NULL, Lc->shape);
}

/* The last steps: followers take their group's choice, then the shape
 * projection of every other prunable tensor. */
static px_status_t px__project_last(const px__hss_t *st, px__hss_dev_t *d,
                                    const px_sparsity_t *sp, float *fam, uint8_t *masks) {
  for (int i = 0; i < d->n; i++) {
    const px_sparsity_param_t *p = px_sparsity_param(sp, i);
    if (!p->prunable || !p->follower) continue;
    const px_prune_layout_t *L = px_sparsity_layout(sp, i);
    size_t mo = px_sparsity_mask_offset(sp, i);
    px_sparsity_follower_mask(sp, i, masks);
    PX_CHECK(st->ops->upload(d->scratch + mo, masks + mo, L->size));
    PX_CHECK(st->ops->apply_layout(fam + st->off[i], d->scratch + mo, L));
  }
  const px_prune_keep_t *k = px_sparsity_keep(sp);
  for (int i = 0; i < d->n; i++) {
    const px_sparsity_param_t *p = px_sparsity_param(sp, i);
    if (!p->prunable || p->follower) continue;
    const px_prune_layout_t *L = px_sparsity_layout(sp, i);
    size_t mo = px_sparsity_mask_offset(sp, i);
    PX_CHECK(px__project_kind(st, d, fam + st->off[i], L->shape, PX_PRUNE_GROUP_SHAPE,
                              k->shape_keep, px_prune_part(L, masks + mo, PX_PRUNE_PART_SHAPE),
                              px_prune_part(L, d->scratch + mo, PX_PRUNE_PART_SHAPE)));
  }
  return PX_OK;
}

px_status_t px__hss_project(const px__hss_t *st, px__hss_dev_t *d, const px_sparsity_t *sp,
                            float *fam, uint8_t *masks) {
  const px_prune_keep_t *k = px_sparsity_keep(sp);
  for (int i = 0; i < d->n; i++) { /* filters, and the channels of all but consumers */
    const px_sparsity_param_t *p = px_sparsity_param(sp, i);
    if (!p->prunable || p->follower) continue;
    const px_prune_layout_t *L = px_sparsity_layout(sp, i);
    if (px_prune_layout_per_element(L))
      return px_set_error(PX_ERR_INVALID, "H-SADMM device state: parameter %d has an N:M "
                          "mask, which the device projection does not make", i);
    size_t mo = px_sparsity_mask_offset(sp, i);
    float *x = fam + st->off[i];
    PX_CHECK(px__project_kind(st, d, x, L->shape, PX_PRUNE_GROUP_FILTER, k->filter_keep,
                              px_prune_part(L, masks + mo, PX_PRUNE_PART_FILTER),
                              px_prune_part(L, d->scratch + mo, PX_PRUNE_PART_FILTER)));
    if (px_sparsity_is_consumer(sp, i)) continue; /* chosen with its producer below */
    PX_CHECK(px__project_kind(st, d, x, L->shape, PX_PRUNE_GROUP_CHANNEL,
                              px_prune_uncoupled_keep(k),
                              px_prune_part(L, masks + mo, PX_PRUNE_PART_CHANNEL),
                              px_prune_part(L, d->scratch + mo, PX_PRUNE_PART_CHANNEL)));
  }
  for (int i = 0; i < d->n; i++) {
    const px_sparsity_param_t *p = px_sparsity_param(sp, i);
    if (p->prunable && p->consumer >= 0 && !p->follower)
      PX_CHECK(px__project_coupled(st, d, sp, i, fam, masks));
  }
  return px__project_last(st, d, sp, fam, masks);
}

px_status_t px__hss_apply(const px__hss_t *st, px__hss_dev_t *d, const px_sparsity_t *sp,
                          float *fam) {
  for (int i = 0; i < d->n; i++) {
    const px_prune_layout_t *L = px_sparsity_layout(sp, i);
    if (L)
      PX_CHECK(st->ops->apply_layout(fam + st->off[i],
                                     d->masks + px_sparsity_mask_offset(sp, i), L));
  }
  return PX_OK;
}
