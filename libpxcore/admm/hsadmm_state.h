/* H-SADMM's state families and the arithmetic of a round on them, written
 * once for host and device memory.
 *
 * The families (u, z_i and z_i's previous value, v, z and its previous
 * value, s) and the per-layer residual sums live where a "state ops" table
 * says: px__hss_host_ops keeps them in host memory and runs hsadmm.c's
 * loops (the CPU reference, bit for bit what the round always computed);
 * px__hss_cuda_ops keeps them in device memory and runs the launchers of
 * prunex/cuda_kernels.h (each the bitwise twin of a loop here, except the
 * squared norms, which are deterministic but summed in another order). The
 * phase functions px__hss_* below are the round's elementwise phases and
 * its residuals; hsadmm.c calls them with the host table, and
 * tests/test_gpu_round.c runs them with both tables on the same random data.
 *
 * Everything a round allocates is allocated by px__hss_create: the phases
 * allocate nothing. Nothing here is seen outside admm/ (and the tests). */
#ifndef PX_HSADMM_STATE_H
#define PX_HSADMM_STATE_H

#include <stddef.h>
#include <stdint.h>

#include "prunex/cuda_kernels.h"
#include "prunex/prune.h"
#include "prunex/prune_internal.h"
#include "prunex/px.h"

struct px__hss_block;

/* Per-layer sums of the residual allreduce, in this order. */
enum {
  PX__R_INTRA, PX__S_INTRA, PX__THETA, PX__U_SQ,               /* every rank: N blocks */
  PX__R_INTER, PX__S_INTER, PX__ZI_SQ, PX__Z_SQ, PX__V_SQ,     /* leaders: M blocks */
  PX__NSUMS
};

/* Where the state lives and how its arithmetic runs. Every buffer argument
 * is memory of the table's side ("state memory"), except `host`. The
 * arithmetic is that of cuda_kernels.h's launchers of the same names; a
 * launch may be asynchronous: results are ready after sync (download
 * waits too). */
typedef struct px__hss_ops {
  const char *name;   /* "host" or "cuda" */
  int device;         /* 1: state memory is device memory */
  /* zeroed state memory, freed by release (NULL for 0 bytes) */
  px_status_t (*alloc)(size_t bytes, const char *name, void **out);
  void (*release)(void *p);
  px_status_t (*copy)(void *dst, const void *src, size_t bytes);
  px_status_t (*zero)(void *dst, size_t bytes);
  px_status_t (*upload)(void *dst, const void *host, size_t bytes);
  px_status_t (*download)(void *host, const void *src, size_t bytes);
  px_status_t (*sync)(void);
  px_status_t (*add)(float *out, const float *a, const float *b, size_t n);
  px_status_t (*scale)(float *x, float f, size_t n);
  px_status_t (*zi_update)(float *zi, const float *s, const float *z, const float *v,
                           double rho1, double rho2, double lambda, int num_nodes,
                           int ranks_per_node, size_t n);
  px_status_t (*z_flat)(float *z, const float *s, double rho1, double lambda, int num_ranks,
                        size_t n);
  px_status_t (*dual)(float *x, const float *a, const float *b, size_t n);
  px_status_t (*rescale)(float *x, double rho_old, double rho_new, size_t n);
  /* *out = ||a - b||^2 (b NULL: ||a||^2) in double; out is state memory, ws
   * the state's scratch */
  px_status_t (*sqdiff)(double *out, const float *a, const float *b, size_t n, void *ws);
  /* One parameter's block of the packed buffer (px__hss_block_t): gather
   * into packed, scatter back into the whole tensor w (zeros elsewhere), as
   * the pack plan does (cuda_kernels.h's px_cuda_pack_shrink / _expand) */
  px_status_t (*shrink)(float *packed, const float *w, const struct px__hss_block *b);
  px_status_t (*expand)(float *w, const float *packed, const struct px__hss_block *b);
  /* norms[G] = the squared group norms of kind of the conv weight w, in
   * project.c's order; add (channel kind only): onto the norms already
   * there, as a coupled group sums its consumer's channels onto its
   * producer's filters (px_prune_project_coupled) */
  px_status_t (*norms)(double *norms, const float *w, px_conv_shape_t s, px_prune_group_t kind,
                       int add);
  /* zeroes w outside the given mask parts (NULL: all kept), and outside a
   * mask laid out by L (host descriptor) */
  px_status_t (*apply)(float *w, const uint8_t *filter, const uint8_t *channel,
                       const uint8_t *shape, px_conv_shape_t s);
  px_status_t (*apply_layout)(float *w, const uint8_t *mask, const px_prune_layout_t *L);
} px__hss_ops_t;

extern const px__hss_ops_t px__hss_host_ops;
extern const px__hss_ops_t px__hss_cuda_ops;

typedef struct {
  const px__hss_ops_t *ops;
  int n;                /* tensors */
  size_t *off;          /* [n] host: offset of each tensor in the families */
  size_t *numel;        /* [n] host */
  size_t total;
  float *u, *zi, *zi_prev, *v, *z, *z_prev, *s; /* [total] each, state memory */
  double *dsums;        /* [n * PX__NSUMS] state memory: the round's raw sums */
  void *ws;             /* scratch of the squared norms, state memory (device only) */
} px__hss_t;

/* Lays out n tensors of numel[i] elements and allocates every family
 * (zeroed) with ops. On failure st holds what was allocated: px__hss_free
 * frees it. PX_ERR_NOT_BUILT for the CUDA table in a build without CUDA. */
px_status_t px__hss_create(px__hss_t *st, const px__hss_ops_t *ops, int n, const size_t *numel);
void px__hss_free(px__hss_t *st);

/* dst = src, both families of st (total floats). */
px_status_t px__hss_copy(const px__hss_t *st, float *dst, const float *src);

/* s = theta + u per tensor (theta[i]: tensor i in state memory), before
 * the intra sum. */
px_status_t px__hss_theta_u(px__hss_t *st, const float *const *theta);

/* z_i_prev = z_i; z_i = (rho1 s + rho2 (z - v)) / (lambda/M + P rho1 +
 * rho2) per tensor, before the projection (step 2 of docs/architecture.md,
 * "H-SADMM (one outer iteration)"). */
px_status_t px__hss_zi(px__hss_t *st, const double *rho1, const double *rho2, double lambda,
                       int num_nodes, int ranks_per_node);

/* Flat ablation: z_prev = z; z = rho1 s / (lambda + N rho1) per tensor. */
px_status_t px__hss_z_flat(px__hss_t *st, const double *rho1, double lambda, int num_ranks);

/* x *= f over n floats of state memory (the mean of the packed sum). */
px_status_t px__hss_scale(const px__hss_t *st, float *x, float f, size_t n);

/* s = z_i + v: what a leader packs for the exact exchange. */
px_status_t px__hss_pack_source(px__hss_t *st);

/* v += z_i - z (step 5, inter dual). */
px_status_t px__hss_dual_v(px__hss_t *st);

/* Step 5 on every rank and the round's residual sums: u += theta - target
 * (target z_i, or z for the flat ablation), and into sums[n * PX__NSUMS]
 * (host) each layer's ||theta - target||^2, rho1^2 ||target -
 * target_prev||^2, ||theta||^2, ||u||^2 and, on a leader, ||z_i - z||^2,
 * rho2^2 ||z - z_prev||^2, ||z_i||^2, ||z||^2, ||v||^2 (0 elsewhere).
 * Waits for the state's arithmetic (the sums come back to the host). */
px_status_t px__hss_residuals(px__hss_t *st, const float *const *theta, int flat, int leader,
                              const double *rho1, const double *rho2, double *sums);

/* Scaled dual of tensor i after its penalty changed (x is u or v). */
px_status_t px__hss_rescale(const px__hss_t *st, float *x, int i, double rho_old,
                            double rho_new);

/* ---- the device-state round: pack/expand and projection -----------------------
 * With state memory on the device the round packs and projects there too:
 * the pack plan's layout (host) becomes one block descriptor per parameter
 * with its index sets copied to state memory, and the projection runs as a
 * small-transfer hybrid: the group norms are summed on the device in
 * project.c's order (bitwise the CPU's), only the norms come down, the host
 * chooses with px_prune_select_groups (so every rank decides identically,
 * ties included), and the choice goes up and zeroes on the device. Run
 * with the host table the same code gives the host round's bits (tested
 * against px_pack_shrink / px_pack_expand and px_sparsity_project). */

/* One parameter's block of the packed buffer. */
typedef struct px__hss_block {
  size_t off, numel;          /* the tensor in the families */
  size_t packed_off, packed_len;
  int conv;                   /* 0: dense, travels whole */
  px_conv_shape_t shape;      /* conv */
  int32_t n_out, n_in;        /* conv: |K_out|, |K_in| */
  const int32_t *k_out, *k_in;   /* conv: state memory, ascending */
  const uint8_t *shape_mask;  /* conv: state memory, the shape part of its mask */
} px__hss_block_t;

typedef struct {
  int n;
  px__hss_block_t *blocks;    /* [n] host */
  int32_t *h_sets;            /* [nsets] host staging of the index sets */
  int32_t *sets;              /* [nsets] state memory: each conv's k_out, then k_in */
  size_t nsets;
  uint8_t *masks;             /* [mbytes] state memory: the plan's (union) masks */
  uint8_t *scratch;           /* [mbytes] state memory: the projection's choices */
  size_t mbytes;
  float *packed;              /* [total] state memory: the packed buffer */
  double *norms;              /* [max_groups] state memory */
  double *h_norms;            /* [max_groups] host */
  int32_t *idx;               /* [max_groups] host: px_prune_select_groups's scratch */
  size_t max_groups;
} px__hss_dev_t;

/* Allocates d for the state st and the prunable parameters of sp (every
 * buffer, once). On failure d holds what was allocated: px__hss_dev_free
 * frees it. */
px_status_t px__hss_dev_create(px__hss_dev_t *d, const px__hss_t *st, const px_sparsity_t *sp);
void px__hss_dev_free(px__hss_dev_t *d, const px__hss_t *st);

/* The plan's current layout and its masks (host, px_sparsity_mask_bytes,
 * the masks the plan was set from) into d. PX_ERR_INVALID when a parameter
 * packs element by element (N:M: no block form). Run after every
 * px_pack_plan_set_masks. */
px_status_t px__hss_pack_set(px__hss_dev_t *d, const px__hss_t *st, const px_pack_plan_t *plan,
                             const px_sparsity_t *sp, const uint8_t *masks);
/* d->packed = the blocks of the family src; dst = the family expanded from
 * d->packed (zeros outside the blocks). */
px_status_t px__hss_shrink(const px__hss_t *st, px__hss_dev_t *d, const float *src);
px_status_t px__hss_expand(const px__hss_t *st, px__hss_dev_t *d, float *dst);

/* px_sparsity_project on the family fam (state memory), the masks written
 * to masks (host, px_sparsity_mask_bytes). PX_ERR_INVALID for N:M. */
px_status_t px__hss_project(const px__hss_t *st, px__hss_dev_t *d, const px_sparsity_t *sp,
                            float *fam, uint8_t *masks);
/* px_sparsity_apply of d->masks (the plan's masks: after the freeze, the
 * union) on the family fam. */
px_status_t px__hss_apply(const px__hss_t *st, px__hss_dev_t *d, const px_sparsity_t *sp,
                          float *fam);

#endif
