/* Multiply-accumulates of one image's forward pass: what published pruning
 * tables quote as "FLOPs" (convolutions and fully connected layers; batch
 * norm, activations, pools and additions are left out, as those tables
 * do). Read from the graph through the public accessors, so a compact model
 * (px_model_compact) counts what its narrower layers compute, and a dense
 * one what it would compute with fewer channels (px_model_macs_kept). */
#include "prunex/nn.h"

uint64_t px_model_macs_kept(const px_model_t *m, const int32_t *out_kept,
                            const int32_t *in_kept) {
  uint64_t macs = 0;
  int n = px_model_num_nodes(m);
  for (int k = 0; k < n; k++) {
    px_model_node_t nd;
    if (px_model_node(m, k, &nd) != PX_OK) return 0;
    if (nd.kind == PX_NODE_FC) { /* on a pooled vector, or a C x H x W map flattened */
      int h = 1, w = 1;
      if (px_model_act_area(m, nd.in, &h, &w) != 0) h = w = 1;
      macs += (uint64_t)nd.c_in * (uint64_t)h * (uint64_t)w * (uint64_t)nd.c_out;
    } else if (nd.kind == PX_NODE_CONV) {
      int h, w;
      if (px_model_act_area(m, nd.out, &h, &w) != 0) return 0;
      int kh = nd.win.kh > 0 ? nd.win.kh : nd.kernel, kw = nd.win.kw > 0 ? nd.win.kw : nd.kernel;
      int g = nd.groups > 0 ? nd.groups : 1;
      /* a depthwise 1 x 1 conv is a per-channel scale (an imported layer
       * scale): left out, as batch norm's scale is */
      if (kh == 1 && kw == 1 && g == nd.c_in && nd.c_in == nd.c_out) continue;
      uint64_t co = (uint64_t)(out_kept && out_kept[k] >= 0 ? out_kept[k] : nd.c_out);
      /* a grouped conv's filters read c_in / g channels each, whatever is kept */
      uint64_t ci = (uint64_t)(g > 1 || !in_kept || in_kept[k] < 0 ? nd.c_in / g : in_kept[k]);
      macs += co * ci * (uint64_t)kh * (uint64_t)kw * (uint64_t)h * (uint64_t)w;
    }
  }
  return macs;
}

uint64_t px_model_macs(const px_model_t *m) { return px_model_macs_kept(m, NULL, NULL); }
