/* Internal to prune/: the one function that lays out a mask (layout.c), for
 * the classic filter | channel | shape functions of project.c, which never
 * validated their shapes. */
#ifndef PX_PRUNE_INT_H
#define PX_PRUNE_INT_H

#include "prunex/prune.h"

/* Fills L for shape s and N:M n:m (0, 0: no N:M part), without checks. */
void px__prune_layout_set(px_prune_layout_t *L, px_conv_shape_t s, int32_t nm_n, int32_t nm_m);

#endif
