/* Checks shared by the ONNX import tests (px_test_onnx.h). */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "prunex/export.h"
#include "prunex/hsadmm.h"
#include "prunex/prune_internal.h"
#include "prunex/strategy.h"
#include "px_test_onnx.h"
#include "px_test_util.h"

/* One line of grads.txt: ours and PyTorch float32's largest difference from
 * the float64 gradient, and that gradient's largest value. */
static void grad_diffs(const px_model_t *m, const char *dir, const char *net, const char *name,
                       size_t numel, const char *file, const char *file64, double out[3]) {
  int i = 0;
  while (i < px_model_num_params(m) && strcmp(px_model_param(m, i)->name, name)) i++;
  if (i == px_model_num_params(m)) fail_msg("%s: no parameter %s in the import", net, name);
  const px_tensor_t *g = px_model_param(m, i)->grad;
  assert_int_equal(px_tensor_numel(g), numel);
  float *ref = malloc(numel * sizeof *ref), *ours = malloc(numel * sizeof *ours);
  double *ref64 = malloc(numel * sizeof *ref64);
  assert_int_equal(px_test_read_bytes(dir, file, ref, numel * sizeof *ref), numel * sizeof *ref);
  assert_int_equal(px_test_read_bytes(dir, file64, ref64, numel * sizeof *ref64),
                   numel * sizeof *ref64);
  assert_int_equal(px_tensor_copy_to_host(g, ours, numel * sizeof *ours), PX_OK);
  /* relative to the largest, with a floor for a gradient that vanishes
   * (a BN shift right before another conv and BN: only rounding is left) */
  double gmax = 1e-3, d = 0, dt = 0;
  for (size_t j = 0; j < numel; j++) {
    gmax = fmax(gmax, fabs(ref64[j]));
    d = fmax(d, fabs((double)ours[j] - ref64[j]));
    dt = fmax(dt, fabs((double)ref[j] - ref64[j]));
  }
  out[0] = d;
  out[1] = dt;
  out[2] = gmax;
  free(ref);
  free(ref64);
  free(ours);
}

static void check_grads(const px_model_t *m, const px_model_t *cpu, const char *dir,
                        const char *net, double tol, double factor, double *worst_out,
                        double *worst_torch_out) {
  char line[512], name[256], file[64], file64[64], p[512];
  size_t numel;
  snprintf(p, sizeof p, "%s/grads.txt", dir);
  FILE *f = fopen(p, "r");
  assert_non_null(f);
  int nparams = 0, nbad = 0;
  double worst = 0, worst_torch = 0;
  char bad[512] = "";
  while (fgets(line, sizeof line, f) &&
         sscanf(line, "%255s %zu %63s %63s", name, &numel, file, file64) == 4) {
    double r[3];
    grad_diffs(m, dir, net, name, numel, file, file64, r);
    double d = r[0], dt = r[1], gmax = r[2], dc = -1;
    if (cpu) {
      double rc[3];
      grad_diffs(cpu, dir, net, name, numel, file, file64, rc);
      dc = rc[0];
    }
    if (getenv("PX_TEST_GRAD_TABLE"))
      print_message("  %-32s ours %.2e  torch f32 %.2e  (of the largest, %.2e, float64)\n", name,
                    d / gmax, dt / gmax, gmax);
    worst = fmax(worst, d / gmax);
    worst_torch = fmax(worst_torch, dt / gmax);
    if (d > tol * gmax && (factor == 0 || d > factor * dt) && (dc < 0 || d > factor * dc) &&
        !nbad++)
      snprintf(bad, sizeof bad, "gradient of %s differs from float64's by %.3e (largest %.3e; "
               "PyTorch float32 by %.3e%s)", name, d, gmax, dt, cpu ? ", see below" : "");
    if (cpu && d > tol * gmax && d > factor * dt && d > factor * dc)
      print_message("%s: our CPU engine's %s differs from float64's by %.3e\n", net, name, dc);
    nparams++;
  }
  fclose(f);
  if (nbad) fail_msg("%s: %d of %d gradients too far; the first: %s", net, nbad, nparams, bad);
  print_message("%s: %d parameter gradients within %.2e of float64's (relative to the largest; "
                "PyTorch float32 within %.2e)\n", net, nparams, worst, worst_torch);
  assert_int_equal(nparams, px_model_num_params(m));
  if (worst_out) *worst_out = worst;
  if (worst_torch_out) *worst_torch_out = worst_torch;
}

void px_test_onnx_check_grads(const px_model_t *m, const char *dir, const char *net, double tol,
                              double factor, double *worst_out, double *worst_torch_out) {
  check_grads(m, NULL, dir, net, tol, factor, worst_out, worst_torch_out);
}

void px_test_onnx_check_grads_vs(const px_model_t *m, const px_model_t *cpu, const char *dir,
                                 const char *net, double tol, double factor) {
  check_grads(m, cpu, dir, net, tol, factor, NULL, NULL);
}

px_sparsity_t *px_test_onnx_sparsity(px_model_t *m, double keep, px_sparsity_param_t *sp,
                                     size_t *off) {
  px_prune_keep_t k = {1.0, keep, 1.0, 0, 0, 0};
  return px_test_onnx_sparsity_keep(m, &k, sp, off);
}

px_sparsity_t *px_test_onnx_sparsity_keep(px_model_t *m, const px_prune_keep_t *k,
                                          px_sparsity_param_t *sp, size_t *off) {
  int np = px_model_num_params(m);
  px_hsadmm_param_t *hp = calloc((size_t)np, sizeof *hp);
  px_strategy_hsadmm_params(m, NULL, 0, hp);
  const float *base = px_model_flat_params(m)->data;
  for (int i = 0; i < np; i++) {
    off[i] = (size_t)((const float *)px_model_param(m, i)->value->data - base);
    sp[i] = (px_sparsity_param_t){hp[i].prunable, hp[i].shape,
                                  hp[i].has_consumer ? hp[i].consumer : -1, hp[i].follower};
  }
  free(hp);
  px_sparsity_t *set;
  assert_int_equal(px_sparsity_create(sp, NULL, np, k, &set), PX_OK);
  return set;
}

double px_test_mac_budget(px_ops_t *ops, px_model_t *m, int32_t batch, double mac_keep,
                          double uncoupled, uint64_t *macs_out) {
  int np = px_model_num_params(m);
  px_hsadmm_param_t *hp = calloc((size_t)np, sizeof *hp);
  px_strategy_hsadmm_params(m, NULL, 0, hp);
  double keep = 0;
  uint64_t macs = 0, dense = px_model_macs(m);
  if (px_strategy_mac_keep(m, hp, mac_keep, &keep, &macs) != PX_OK)
    fail_msg("mac_keep %g: %s", mac_keep, px_last_error());
  assert_true((double)macs <= mac_keep * (double)dense);
  assert_true(px_strategy_coupled_macs(m, hp, keep) == macs);
  /* the next channel any group would keep is over the budget */
  if (keep < 1.0) assert_true((double)px_strategy_coupled_macs(m, hp, keep + 1e-6) >
                              mac_keep * (double)dense);
  free(hp);
  /* the masks projected at that keep, and the compact model they give */
  px_sparsity_param_t *sp = calloc((size_t)np, sizeof *sp);
  size_t *off = calloc((size_t)np, sizeof *off);
  px_prune_keep_t k = {1.0, keep, 1.0, 0, 0, uncoupled};
  px_sparsity_t *set = px_test_onnx_sparsity_keep(m, &k, sp, off);
  uint8_t *masks = calloc(px_sparsity_mask_bytes(set) + 1, 1);
  assert_int_equal(px_sparsity_project(set, px_model_flat_params(m)->data, off, masks), PX_OK);
  px_model_t *cm = NULL;
  if (px_model_compact(m, ops, batch, &cm) != PX_OK) fail_msg("compact: %s", px_last_error());
  uint64_t cmacs = px_model_macs(cm);
  print_message("mac_keep %g (uncoupled keep %g): channel keep %.6g, %llu of %llu MACs counted, "
                "%llu compact\n", mac_keep, uncoupled, keep, (unsigned long long)macs,
                (unsigned long long)dense, (unsigned long long)cmacs);
  /* exact where every uncoupled conv keeps its inputs; a bound elsewhere */
  if (uncoupled >= 1.0) assert_true(cmacs == macs);
  else assert_true(cmacs <= macs);
  px_model_destroy(cm);
  px_sparsity_destroy(set);
  free(masks);
  free(off);
  free(sp);
  if (macs_out) *macs_out = macs;
  return keep;
}

size_t px_test_onnx_packed_floats(px_model_t *m, const px_sparsity_t *set,
                                  const px_sparsity_param_t *sp, const uint8_t *masks,
                                  int dense_followers, px_pack_plan_t **out) {
  int np = px_model_num_params(m);
  px_param_desc_t *desc = calloc((size_t)np, sizeof *desc);
  const uint8_t **mp = calloc((size_t)np, sizeof *mp);
  for (int i = 0; i < np; i++) {
    int packed = sp[i].prunable && !(sp[i].follower && dense_followers);
    desc[i] = (px_param_desc_t){px_model_param(m, i)->name, packed ? PX_PARAM_CONV : PX_PARAM_DENSE,
                                sp[i].shape, px_tensor_numel(px_model_param(m, i)->value),
                                packed ? px_sparsity_layout(set, i) : NULL};
    mp[i] = packed ? masks + px_sparsity_mask_offset(set, i) : NULL;
  }
  px_pack_plan_t *plan;
  assert_int_equal(px_pack_plan_create(desc, np, 0, &plan), PX_OK);
  assert_int_equal(px_pack_plan_set_masks(plan, mp), PX_OK);
  px_pack_plan_freeze(plan);
  free((void *)mp);
  free(desc);
  size_t n = px_pack_packed_floats(plan);
  if (out) *out = plan;
  else px_pack_plan_destroy(plan);
  return n;
}
