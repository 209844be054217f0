/* The table of strategies as data (prunex/strategy.h): names, one-line
 * descriptions, which are H-SADMM and which is the default. Engine-free on
 * purpose (the spec layer, libpxcore/LAYERS): pxctl checks a spec's strategy and lists them in its help from this table
 * without the engine, and the engine's table of operations (strategy.c)
 * holds one entry per kind listed here, checked by px_strategy_run and the
 * strategy tests. */
#include <stdio.h>
#include <string.h>

#include "prunex/strategy_table.h"

static const px_strategy_info_t px__strategy_infos[] = {
    {PX_STRATEGY_HSADMM, "hsadmm",
     "H-SADMM: local steps, node consensus, pruned and packed exchange between node leaders", 1,
     1},
    {PX_STRATEGY_HSADMM_FLAT, "hsadmm-flat",
     "the flat ablation: one consensus group over all ranks, dense buffers", 1, 0},
    {PX_STRATEGY_DDP, "ddp",
     "dense data-parallel SGD: gradients averaged over all ranks every step", 0, 0},
    {PX_STRATEGY_TOPK, "topk",
     "Top-K gradient sparsification: the largest entries of each tensor, with error feedback",
     0, 0},
};
#define PX__NSTRATEGIES ((int)(sizeof px__strategy_infos / sizeof px__strategy_infos[0]))

int px_strategy_count(void) { return PX__NSTRATEGIES; }

const px_strategy_info_t *px_strategy_at(int i) {
  return i >= 0 && i < PX__NSTRATEGIES ? &px__strategy_infos[i] : NULL;
}

const px_strategy_info_t *px_strategy_info(px_strategy_kind_t k) {
  for (int i = 0; i < PX__NSTRATEGIES; i++)
    if (px__strategy_infos[i].kind == k) return &px__strategy_infos[i];
  return NULL;
}

px_strategy_kind_t px_strategy_lookup(const char *name) {
  for (int i = 0; name && i < PX__NSTRATEGIES; i++)
    if (!strcmp(px__strategy_infos[i].name, name)) return px__strategy_infos[i].kind;
  return (px_strategy_kind_t)0;
}

char *px_strategy_names(char *buf, size_t cap, const char *sep) {
  size_t len = 0;
  if (cap) buf[0] = 0;
  for (int i = 0; i < PX__NSTRATEGIES && len < cap; i++) {
    int n = snprintf(buf + len, cap - len, "%s%s", i ? sep : "", px__strategy_infos[i].name);
    if (n < 0) break;
    len += (size_t)n;
  }
  return buf;
}

const char *px_strategy_name(px_strategy_kind_t k) {
  const px_strategy_info_t *i = px_strategy_info(k);
  return i ? i->name : "unknown";
}
