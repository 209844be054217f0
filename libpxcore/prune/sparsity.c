/* The sparsity set of a parameter list: one mask layout per prunable
 * parameter, the offsets of their masks in one buffer, the coupling of a
 * producer's filters with its consumer's channels, and the projection of the
 * whole list in its fixed order. H-SADMM and the strategies hold one of
 * these and ask it for every mask offset and size, so a new set changes the
 * layouts (layout.c) and nothing in them. */
#include <stdint.h>
#include <string.h>

#include "prunex/prune.h"
#include "prunex/prune_internal.h"
#include "px_check.h"

struct px_sparsity {
  int n;
  px_prune_keep_t keep;
  px_sparsity_param_t *params;  /* [n] */
  px_prune_layout_t *layouts;   /* [n], zero for dense parameters */
  size_t *moff;                 /* [n], SIZE_MAX for dense parameters */
  uint8_t *is_consumer;         /* [n] 1: channels chosen with a producer's filters */
  size_t mtotal;
  int exact_freeze;             /* px_sparsity_set_exact_freeze */
  void *ws;
  size_t ws_bytes;
};

/* Marks the consumers of coupled producers, checking each pair, then each
 * follower against its group's consumer. */
static px_status_t px__sparsity_coupling(px_sparsity_t *sp, const char *const *names) {
  const px_sparsity_param_t *p = sp->params;
  for (int i = 0; i < sp->n; i++) {
    if (!p[i].prunable || p[i].consumer < 0 || p[i].follower) continue;
    int32_t c = p[i].consumer;
    if (c >= sp->n || c == i || !p[c].prunable || p[c].shape.c_in != p[i].shape.c_out ||
        sp->is_consumer[c])
      return px_set_error(PX_ERR_INVALID,
                          "H-SADMM parameter %s: consumer %d is not a prunable conv with %d "
                          "input channels read by this one alone",
                          names && names[i] ? names[i] : "?", (int)c, (int)p[i].shape.c_out);
    sp->is_consumer[c] = 1;
  }
  for (int i = 0; i < sp->n; i++) {
    if (!p[i].prunable || !p[i].follower) continue;
    int32_t c = p[i].consumer;
    if (c < 0 || c >= sp->n || !sp->is_consumer[c] || p[c].shape.c_in != p[i].shape.c_out)
      return px_set_error(PX_ERR_INVALID,
                          "H-SADMM parameter %s: follows %d, which is not a coupled consumer "
                          "with %d input channels", names && names[i] ? names[i] : "?", (int)c,
                          (int)p[i].shape.c_out);
  }
  return PX_OK;
}

px_status_t px_sparsity_create(const px_sparsity_param_t *params, const char *const *names,
                               int n, const px_prune_keep_t *keep, px_sparsity_t **out) {
  PX_REQUIRE(out && keep && n >= 0 && (n == 0 || params), "px_sparsity_create: bad arguments");
  *out = NULL;
  PX_CHECK(px_prune_keep_validate(keep));
  px_sparsity_t *sp = px_calloc(1, sizeof *sp, "prune.sparsity");
  if (!sp) return PX_ERR_NOMEM;
  px_status_t st = PX_OK;
  size_t cnt = n ? (size_t)n : 1;
  sp->n = n;
  sp->keep = *keep;
  sp->params = px_malloc(cnt * sizeof *sp->params, "prune.sparsity");
  sp->layouts = px_calloc(cnt, sizeof *sp->layouts, "prune.sparsity");
  sp->moff = px_malloc(cnt * sizeof *sp->moff, "prune.sparsity");
  sp->is_consumer = px_calloc(cnt, 1, "prune.sparsity");
  if (!sp->params || !sp->layouts || !sp->moff || !sp->is_consumer) {
    st = PX_ERR_NOMEM;
    goto done;
  }
  if (n) memcpy(sp->params, params, (size_t)n * sizeof *params);
  for (int i = 0; i < n; i++) {
    sp->moff[i] = SIZE_MAX;
    if (!params[i].prunable) continue;
    /* a follower has no N:M part: its filters are its group's, every element kept */
    PX_CHECK_GOTO(px_prune_layout_init(&sp->layouts[i], params[i].shape,
                                       params[i].follower ? NULL : keep),
                  st, done);
    sp->moff[i] = sp->mtotal;
    sp->mtotal += sp->layouts[i].size;
    size_t w = px_prune_workspace_size(params[i].shape);
    if (w > sp->ws_bytes) sp->ws_bytes = w;
  }
  PX_CHECK_GOTO(px__sparsity_coupling(sp, names), st, done);
  if (sp->ws_bytes) {
    sp->ws = px_malloc(sp->ws_bytes, "prune.workspace");
    if (!sp->ws) {
      st = PX_ERR_NOMEM;
      goto done;
    }
  }
done:
  return PX_CREATED(st, sp, out, px_sparsity_destroy);
}

void px_sparsity_destroy(px_sparsity_t *sp) {
  if (!sp) return;
  PX_FREE_ALL(sp->params, sp->layouts, sp->moff, sp->is_consumer, sp->ws, sp);
}

size_t px_sparsity_mask_bytes(const px_sparsity_t *sp) { return sp->mtotal; }
size_t px_sparsity_mask_offset(const px_sparsity_t *sp, int i) { return sp->moff[i]; }
const px_prune_layout_t *px_sparsity_layout(const px_sparsity_t *sp, int i) {
  return sp->params[i].prunable ? &sp->layouts[i] : NULL;
}

const px_sparsity_param_t *px_sparsity_param(const px_sparsity_t *sp, int i) {
  return &sp->params[i];
}
int px_sparsity_is_consumer(const px_sparsity_t *sp, int i) { return sp->is_consumer[i]; }
const px_prune_keep_t *px_sparsity_keep(const px_sparsity_t *sp) { return &sp->keep; }

void px_sparsity_follower_mask(const px_sparsity_t *sp, int i, uint8_t *masks) {
  const px_sparsity_param_t *p = &sp->params[i];
  const px_prune_layout_t *L = &sp->layouts[i], *Q = &sp->layouts[p->consumer];
  uint8_t *m = masks + sp->moff[i];
  memset(m, 1, L->size);
  memcpy(px_prune_part(L, m, PX_PRUNE_PART_FILTER),
         px_prune_part(Q, masks + sp->moff[p->consumer], PX_PRUNE_PART_CHANNEL),
         L->len[PX_PRUNE_PART_FILTER]);
}

/* A follower's mask: its group's (the consumer's channel part) as its
 * filter part, everything else kept; the tensor is zeroed outside it. */
static void px__sparsity_follow(const px_sparsity_t *sp, float *base, const size_t *off,
                                uint8_t *masks) {
  for (int i = 0; i < sp->n; i++) {
    const px_sparsity_param_t *p = &sp->params[i];
    if (!p->prunable || !p->follower) continue;
    px_sparsity_follower_mask(sp, i, masks);
    px_prune_layout_apply(&sp->layouts[i], base + off[i], masks + sp->moff[i]);
  }
}

/* The composite order is filter, channel, shape, N:M for every layer,
 * except that the channels of a coupled consumer are chosen after its
 * producer's own steps, together with the producer's filters, and that a
 * follower takes its group's choice. */
px_status_t px_sparsity_project(px_sparsity_t *sp, float *base, const size_t *off,
                                uint8_t *masks) {
  const px_prune_keep_t *k = &sp->keep;
  for (int i = 0; i < sp->n; i++) {
    if (!sp->params[i].prunable || sp->params[i].follower) continue;
    const px_prune_layout_t *L = &sp->layouts[i];
    float *x = base + off[i];
    uint8_t *m = masks + sp->moff[i];
    PX_CHECK(px_prune_project_filter(x, L->shape, k->filter_keep,
                                     px_prune_part(L, m, PX_PRUNE_PART_FILTER), sp->ws,
                                     sp->ws_bytes));
    if (sp->is_consumer[i]) continue; /* its channels are chosen with its producer below */
    PX_CHECK(px_prune_project_channel(x, L->shape, px_prune_uncoupled_keep(k),
                                      px_prune_part(L, m, PX_PRUNE_PART_CHANNEL), sp->ws,
                                      sp->ws_bytes));
  }
  for (int i = 0; i < sp->n; i++) {
    const px_sparsity_param_t *p = &sp->params[i];
    if (!p->prunable || p->consumer < 0 || p->follower) continue;
    const px_prune_layout_t *L = &sp->layouts[i], *Q = &sp->layouts[p->consumer];
    PX_CHECK(px_prune_project_coupled(
        base + off[i], L->shape, base + off[p->consumer], Q->shape, k->channel_keep,
        px_prune_part(L, masks + sp->moff[i], PX_PRUNE_PART_FILTER),
        px_prune_part(Q, masks + sp->moff[p->consumer], PX_PRUNE_PART_CHANNEL), sp->ws,
        sp->ws_bytes));
  }
  px__sparsity_follow(sp, base, off, masks);
  for (int i = 0; i < sp->n; i++) {
    if (!sp->params[i].prunable || sp->params[i].follower) continue;
    const px_prune_layout_t *L = &sp->layouts[i];
    uint8_t *m = masks + sp->moff[i];
    PX_CHECK(px_prune_project_shape(base + off[i], L->shape, k->shape_keep,
                                    px_prune_part(L, m, PX_PRUNE_PART_SHAPE), sp->ws,
                                    sp->ws_bytes));
    if (px_prune_layout_per_element(L))
      PX_CHECK(px_prune_project_nm(base + off[i], L->shape, L->nm_n, L->nm_m,
                                   px_prune_part(L, m, PX_PRUNE_PART_NM)));
  }
  return PX_OK;
}

void px_sparsity_apply(const px_sparsity_t *sp, float *base, const size_t *off,
                       const uint8_t *masks) {
  for (int i = 0; i < sp->n; i++)
    if (sp->params[i].prunable)
      px_prune_layout_apply(&sp->layouts[i], base + off[i], masks + sp->moff[i]);
}

double px_sparsity_density(const px_sparsity_t *sp, int i, const uint8_t *masks) {
  if (!sp->params[i].prunable) return 1.0;
  return px_prune_layout_density(&sp->layouts[i], masks + sp->moff[i]);
}

px_status_t px_sparsity_set_keep(px_sparsity_t *sp, const px_prune_keep_t *keep) {
  PX_CHECK(px_prune_keep_validate(keep));
  PX_REQUIRE(keep->nm_n == sp->keep.nm_n && keep->nm_m == sp->keep.nm_m,
             "px_sparsity_set_keep: N:M %d:%d is not the set's %d:%d", (int)keep->nm_n,
             (int)keep->nm_m, (int)sp->keep.nm_n, (int)sp->keep.nm_m);
  sp->keep = *keep;
  return PX_OK;
}

void px_sparsity_set_exact_freeze(px_sparsity_t *sp, int on) { sp->exact_freeze = on ? 1 : 0; }

int px_sparsity_freeze_masks(const px_sparsity_t *sp, uint8_t *masks_union,
                             const uint8_t *masks_z) {
  int changed = 0;
  if (sp->exact_freeze && sp->mtotal && memcmp(masks_union, masks_z, sp->mtotal)) {
    memcpy(masks_union, masks_z, sp->mtotal); /* a set-wide rule: z's own groups */
    changed = 1;
  }
  for (int i = 0; i < sp->n; i++) {
    const px_prune_layout_t *L = &sp->layouts[i];
    if (!sp->params[i].prunable || !px_prune_layout_per_element(L)) continue;
    memcpy(px_prune_part(L, masks_union + sp->moff[i], PX_PRUNE_PART_NM),
           px_prune_part(L, masks_z + sp->moff[i], PX_PRUNE_PART_NM), L->len[PX_PRUNE_PART_NM]);
    changed = 1;
  }
  return changed;
}
