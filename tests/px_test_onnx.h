/* Checks shared by the ONNX import tests (test_onnx_import, test_onnx_zoo)
 * against the references tests/onnx_import_nets.py writes, and the MAC
 * budget's (test_mac_budget too); they fail the running cmocka test on a
 * mismatch. */
#ifndef PX_TEST_ONNX_H
#define PX_TEST_ONNX_H

#include <stddef.h>
#include <stdint.h>

#include "prunex/nn.h"
#include "prunex/prune.h"

/* m's gradients after one training step against dir/grads.txt (each
 * parameter's gradient in PyTorch's float64 step and float32 step), per
 * parameter the largest difference relative to the float64 gradient's
 * largest value (at least 1e-3: a gradient that vanishes leaves only
 * rounding). A parameter fails when ours is over tol and over factor times
 * PyTorch float32's (factor 0: over tol alone). Every parameter of m must be
 * listed. *worst and *worst_torch (may be NULL) get the largest of ours and
 * of PyTorch float32's. PX_TEST_GRAD_TABLE=1 prints them per parameter. */
void px_test_onnx_check_grads(const px_model_t *m, const char *dir, const char *net, double tol,
                              double factor, double *worst, double *worst_torch);
/* The same with a second yardstick: a parameter of m (the CUDA engine's
 * step) also passes within `factor` times the distance of the same
 * parameter of `cpu` (the CPU engine's step on the same batch) from the
 * float64 gradient: as accurate as our CPU engine is. */
void px_test_onnx_check_grads_vs(const px_model_t *m, const px_model_t *cpu, const char *dir,
                                 const char *net, double tol, double factor);

/* The sparsity set of m's parameters as H-SADMM builds it
 * (px_strategy_hsadmm_params: the coupling and its followers from the
 * graph) at channel keep `keep`; sp and off get [np] entries (off: each
 * parameter's offset in the flat parameters). */
px_sparsity_t *px_test_onnx_sparsity(px_model_t *m, double keep, px_sparsity_param_t *sp,
                                     size_t *off);
/* The same with every keep of k. */
px_sparsity_t *px_test_onnx_sparsity_keep(px_model_t *m, const px_prune_keep_t *k,
                                          px_sparsity_param_t *sp, size_t *off);

/* prune.mac_keep on m (a CPU model; its weights are pruned): the channel
 * keep px_strategy_mac_keep chooses is returned and its count into
 * *macs_out (may be NULL). Checked: the count is within the budget and the
 * next channel any group keeps is over it; masks projected at that keep
 * (uncoupled convs at `uncoupled`, 0: the channel keep) give a compact
 * model (px_model_compact for `batch` samples) of exactly that count when
 * uncoupled is 1, at most it otherwise. */
double px_test_mac_budget(px_ops_t *ops, px_model_t *m, int32_t batch, double mac_keep,
                          double uncoupled, uint64_t *macs_out);

/* The packed floats of m's parameters by masks (px_sparsity's, as
 * px_sparsity_project writes them), the followers packed by theirs or
 * (dense_followers) sent whole: H-SADMM's packed exchange. The plan into
 * *out when out is not NULL (the caller destroys it). */
size_t px_test_onnx_packed_floats(px_model_t *m, const px_sparsity_t *set,
                                  const px_sparsity_param_t *sp, const uint8_t *masks,
                                  int dense_followers, px_pack_plan_t **out);

#endif
