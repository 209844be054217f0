/* Internal to prune/: the one function that lays out a mask (layout.c), for
 * the classic filter | channel | shape functions of project.c, which never
 * validated their shapes, and the checks of the N:M pair and of a keep
 * fraction (layout.c) that the projections use. */
#ifndef PX_PRUNE_INT_H
#define PX_PRUNE_INT_H

#include "prunex/prune.h"

/* The N:M pair's rule: (0, 0) is off, else 1 <= n <= m <= PX_PRUNE_NM_MAX
 * (PX_ERR_INVALID naming prune.nm_n and prune.nm_m). */
px_status_t px__nm_check(int32_t n, int32_t m);
/* keep in [0, 1], else PX_ERR_INVALID naming prune.<field>. */
px_status_t px__keep_check(const char *field, double keep);
/* Fills L for shape s and N:M n:m (0, 0: no N:M part), without checks. */
void px__prune_layout_set(px_prune_layout_t *L, px_conv_shape_t s, int32_t nm_n, int32_t nm_m);

#endif
