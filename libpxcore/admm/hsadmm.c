/* H-SADMM synchronisation on a rank's parameter tensors (steps 2-6 of
 * docs/architecture.md, "H-SADMM (one outer iteration)").
 *
 * State families, each one allocation of `total` floats laid out like the
 * parameters: u (scaled intra dual), zi (node consensus) and zi_prev, v
 * (scaled inter dual), z (global consensus) and z_prev, s (scratch: the intra
 * sum, then z_i + v). Every rank of a node computes z_i and v itself from
 * bit-identical inputs (the intra allreduce result and the broadcast z), so
 * only the leader talks to other nodes and nothing but z and the masks is
 * broadcast inside the node.
 *
 * This is the core of the four rooms of hsadmm_int.h: the exchange and z
 * from it live in hsadmm_exchange.c, the quantized exchange in
 * hsadmm_quant.c, the overlapped one in hsadmm_overlap.c, the lossless
 * coded one in hsadmm_code.c.
 *
 * The families live where the state ops table of hsadmm_state.h keeps
 * them: host memory for px_hsadmm_create; for px__hsadmm_create_on (the
 * device-state round) the table's memory, with the pack
 * and the projection run there too (hsadmm_dev.c) and the collectives over
 * the families staged through the host where the group cannot read them.
 * The masks and the pack plan's layout stay on the host either way. */
#include <assert.h>
#include <math.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

#include "admm/admm_int.h"
#include "admm/hsadmm_int.h"
#include "prunex/comm_internal.h"
#include "prunex/hsadmm_internal.h"
#include "prunex/prune_internal.h"
#include "prunex/quantize.h"
#include "px_check.h"
#include "px_clock.h"

/* Per-layer sums of the residual allreduce: hsadmm_state.h's order. */
enum {
  R_INTRA = PX__R_INTRA, S_INTRA = PX__S_INTRA, THETA = PX__THETA, U_SQ = PX__U_SQ,
  R_INTER = PX__R_INTER, S_INTER = PX__S_INTER, ZI_SQ = PX__ZI_SQ, Z_SQ = PX__Z_SQ,
  V_SQ = PX__V_SQ, NSUMS = PX__NSUMS
};

/* The arguments of px_hsadmm_create. */
static px_status_t px__hsadmm_validate(px_comm_t *comm, const px_hsadmm_param_t *params,
                                       int nparams, const px_hsadmm_config_t *cfg) {
  PX_REQUIRE(comm && nparams > 0 && params, "H-SADMM needs a communicator and parameters");
  PX_REQUIRE(cfg->rho1 > 0 && cfg->rho2 > 0, "admm.rho1 = %g, admm.rho2 = %g: must be > 0",
             cfg->rho1, cfg->rho2);
  PX_REQUIRE(cfg->lambda >= 0, "weight decay %g: must be >= 0", cfg->lambda);
  PX_CHECK(px_prune_keep_validate(&cfg->keep));
  for (int i = 0; i < nparams; i++) {
    PX_REQUIRE(params[i].theta && params[i].numel > 0, "H-SADMM parameter %d (%s) is empty", i,
               params[i].name ? params[i].name : "?");
    if (params[i].prunable) {
      PX_CHECK(px_conv_shape_validate(params[i].shape));
      PX_REQUIRE(px_conv_numel(params[i].shape) == params[i].numel,
                 "H-SADMM parameter %s: shape does not match its %zu elements", params[i].name,
                 params[i].numel);
    }
  }
  return PX_OK;
}

/* The per-parameter arrays of the handle. */
static px_status_t px__hsadmm_alloc_arrays(px_hsadmm_t *h, int nparams) {
  h->params = px_malloc((size_t)nparams * sizeof *h->params, "hsadmm.params");
  h->theta = px_calloc((size_t)nparams, sizeof *h->theta, "hsadmm.theta");
  h->mask_ptrs = px_calloc((size_t)nparams, sizeof *h->mask_ptrs, "hsadmm.mask_ptrs");
  h->rho1 = px_malloc((size_t)nparams * sizeof(double), "hsadmm.rho1");
  h->rho2 = px_malloc((size_t)nparams * sizeof(double), "hsadmm.rho2");
  h->sums = px_calloc((size_t)nparams * NSUMS + 4, sizeof(double), "hsadmm.sums");
  h->layers = px_calloc((size_t)nparams, sizeof *h->layers, "hsadmm.layers");
  h->decision_buf = px_calloc(2 + 2 * (size_t)nparams, sizeof(double), "hsadmm.decision");
  h->src_ptrs = px_calloc((size_t)nparams, sizeof(float *), "hsadmm.ptrs");
  h->dst_ptrs = px_calloc((size_t)nparams, sizeof(float *), "hsadmm.ptrs");
  if (!h->src_ptrs || !h->dst_ptrs || !h->params || !h->theta || !h->mask_ptrs ||
      !h->rho1 || !h->rho2 || !h->sums || !h->layers || !h->decision_buf)
    return PX_ERR_NOMEM;
  return PX_OK;
}

/* The sparsity set of the prunable tensors (it owns their mask layouts and
 * the coupling of producers with consumers). */
static px_status_t px__hsadmm_sparsity(px_hsadmm_t *h) {
  int n = h->n;
  px_sparsity_param_t *sp = px_calloc((size_t)n, sizeof *sp, "hsadmm.sparsity");
  const char **names = px_calloc((size_t)n, sizeof *names, "hsadmm.sparsity");
  px_status_t st = PX_ERR_NOMEM;
  if (sp && names) {
    for (int i = 0; i < n; i++) {
      const px_hsadmm_param_t *p = &h->params[i];
      names[i] = p->name;
      sp[i].prunable = p->prunable;
      sp[i].shape = p->shape;
      sp[i].consumer = !p->has_consumer ? -1 : p->consumer >= 0 ? p->consumer : INT32_MAX;
      sp[i].follower = p->follower;
    }
    st = px_sparsity_create(sp, names, n, &h->cfg.keep, &h->sp);
  }
  px_free(sp);
  px_free((void *)names);
  return st;
}

/* Offsets of every tensor in the state families and of every mask, the
 * initial penalties and the pack plan. */
static px_status_t px__hsadmm_layout(px_hsadmm_t *h) {
  const px_hsadmm_param_t *params = h->params;
  int nparams = h->n;
  PX_CHECK(px__hsadmm_sparsity(h));
  px_param_desc_t *desc = px_calloc((size_t)nparams, sizeof *desc, "hsadmm.desc");
  if (!desc) return PX_ERR_NOMEM;
  for (int i = 0; i < nparams; i++) {
    h->rho1[i] = h->cfg.rho1;
    h->rho2[i] = h->cfg.rho2;
    desc[i].name = params[i].name;
    if (params[i].prunable) {
      desc[i].kind = PX_PARAM_CONV;
      desc[i].shape = params[i].shape;
      desc[i].layout = px_sparsity_layout(h->sp, i);
    } else {
      desc[i].kind = PX_PARAM_DENSE;
      desc[i].numel = params[i].numel;
    }
  }
  h->mtotal = px_sparsity_mask_bytes(h->sp);
  px_status_t st = px_pack_plan_create(desc, nparams, h->cfg.bucket_bytes, &h->plan);
  px_free(desc);
  return st;
}

/* The state families (kept by ops) and the masks (all groups kept). */
static px_status_t px__hsadmm_alloc_state(px_hsadmm_t *h, const px__hss_ops_t *ops) {
  size_t *numel = px_malloc((size_t)h->n * sizeof *numel, "hsadmm.numel");
  if (!numel) return PX_ERR_NOMEM;
  for (int i = 0; i < h->n; i++) {
    numel[i] = h->params[i].numel;
    h->theta[i] = h->params[i].theta;
  }
  px_status_t st = px__hss_create(&h->st, ops, h->n, numel);
  px_free(numel);
  PX_CHECK(st);
  size_t mt = h->mtotal ? h->mtotal : 1;
  h->mask_node = px_malloc(mt, "hsadmm.mask");
  h->mask_union = px_malloc(mt, "hsadmm.mask");
  h->mask_prev = px_malloc(mt, "hsadmm.mask");
  h->mask_z = px_malloc(mt, "hsadmm.mask");
  if (!h->mask_node || !h->mask_union || !h->mask_prev || !h->mask_z)
    return PX_ERR_NOMEM;
  memset(h->mask_node, 1, mt);
  memset(h->mask_union, 1, mt);
  memset(h->mask_prev, 1, mt);
  memset(h->mask_z, 1, mt);
  for (int i = 0; i < h->n; i++) {
    if (h->params[i].prunable)
      h->mask_ptrs[i] = h->mask_union + px_sparsity_mask_offset(h->sp, i);
    h->src_ptrs[i] = h->st.s + h->st.off[i];
    h->dst_ptrs[i] = h->st.z + h->st.off[i];
  }
  if (!h->dev) return PX_OK;
  h->stage = px_malloc(h->st.total * sizeof(float), "hsadmm.stage");
  if (!h->stage) return PX_ERR_NOMEM;
  PX_CHECK(px__hss_dev_create(&h->dv, &h->st, h->sp));
  return px__hss_pack_set(&h->dv, &h->st, h->plan, h->sp, h->mask_union);
}

/* z = z_i = z_prev = z_i_prev = the ranks' mean initial model. */
static px_status_t px__hsadmm_start(px_hsadmm_t *h) {
  const px__hss_ops_t *ops = h->st.ops;
  for (int i = 0; i < h->n; i++)
    PX_CHECK(ops->copy(h->st.z + h->st.off[i], h->params[i].theta, h->params[i].numel * 4));
  PX_CHECK(px__hsadmm_state_allreduce(h, h->world, h->st.z, h->st.total, PX_COMM_AVG));
  PX_CHECK(px__hss_copy(&h->st, h->st.zi, h->st.z));
  PX_CHECK(px__hss_copy(&h->st, h->st.zi_prev, h->st.z));
  return px__hss_copy(&h->st, h->st.z_prev, h->st.z);
}

px_status_t px_hsadmm_create(px_comm_t *comm, const px_hsadmm_param_t *params, int nparams,
                             const px_hsadmm_config_t *cfg, px_hsadmm_t **out) {
  return px__hsadmm_create_on(comm, params, nparams, cfg, NULL, out);
}

px_status_t px_hsadmm_create_joining(px_comm_t *comm, const px_hsadmm_param_t *params,
                                     int nparams, const px_hsadmm_config_t *cfg,
                                     px_hsadmm_t **out) {
  return px__hsadmm_create_joining(comm, params, nparams, cfg, NULL, 1, out);
}

px_status_t px__hsadmm_create_on(px_comm_t *comm, const px_hsadmm_param_t *params, int nparams,
                                 const px_hsadmm_config_t *cfg, const px__hss_ops_t *ops,
                                 px_hsadmm_t **out) {
  return px__hsadmm_create_joining(comm, params, nparams, cfg, ops, 0, out);
}

px_status_t px__hsadmm_create_joining(px_comm_t *comm, const px_hsadmm_param_t *params,
                                      int nparams, const px_hsadmm_config_t *cfg,
                                      const px__hss_ops_t *ops, int joining, px_hsadmm_t **out) {
  *out = NULL;
  PX_CHECK(px__hsadmm_validate(comm, params, nparams, cfg));
  px_hsadmm_t *h = px_calloc(1, sizeof *h, "hsadmm");
  if (!h) return PX_ERR_NOMEM;
  px_status_t st = PX_OK;
  h->comm = comm;
  h->cfg = *cfg;
  h->n = nparams;
  h->dev = ops != NULL;
  h->lc.scale = 1.0;
  h->world = px_comm_group(comm, PX_GROUP_WORLD);
  h->intra = px_comm_group(comm, PX_GROUP_INTRA);
  h->inter = px_comm_group(comm, PX_GROUP_INTER);
  h->N = px_group_size(h->world);
  h->P = px_group_size(h->intra);
  h->M = px_comm_nnodes(comm);
  if (!cfg->flat && h->P * h->M != h->N) {
    st = px_set_error(PX_ERR_INVALID, "H-SADMM needs the same number of ranks on every node "
                      "(%d ranks on %d nodes, %d here)", h->N, h->M, h->P);
    goto fail;
  }
  PX_CHECK_GOTO(px__hsadmm_alloc_arrays(h, nparams), st, fail);
  memcpy(h->params, params, (size_t)nparams * sizeof *params);
  PX_CHECK_GOTO(px__hsadmm_layout(h), st, fail);
  PX_CHECK_GOTO(px__hsadmm_alloc_state(h, ops ? ops : &px__hss_host_ops), st, fail);
  /* every rank starts from the same consensus whatever its initialisation
   * (a joining rank gets the running job's from px_hsadmm_join) */
  if (!joining) PX_CHECK_GOTO(px__hsadmm_start(h), st, fail);
  h->round.layers = h->layers;
  h->round.nlayers = nparams;
  *out = h;
  return PX_OK;
fail:
  px_hsadmm_destroy(h);
  return st;
}

void px_hsadmm_destroy(px_hsadmm_t *h) {
  if (!h) return;
  px__hso_free(h);
  px__hsq_free(h);
  px__hsc_free(h);
  px__hse_free(h);
  px_pack_plan_destroy(h->plan);
  px_sparsity_destroy(h->sp);
  px__hss_dev_free(&h->dv, &h->st);
  px__hss_free(&h->st);
  PX_FREE_ALL(h->stage, h->mask_node, h->mask_union, h->mask_prev, h->mask_z, h->params,
              (void *)h->theta, (void *)h->mask_ptrs, h->rho1,
              h->rho2, h->sums, h->layers, h->decision_buf, h->src_ptrs, h->dst_ptrs, h);
}

void px_hsadmm_prox(const px_hsadmm_t *h, int i, const float **z, const float **u, float *rho1) {
  *z = (h->cfg.flat ? h->st.z : h->st.zi) + h->st.off[i];
  *u = h->st.u + h->st.off[i];
  *rho1 = (float)h->rho1[i];
}

const float *px_hsadmm_z(const px_hsadmm_t *h, int i) { return h->st.z + h->st.off[i]; }
const uint8_t *px_hsadmm_mask(const px_hsadmm_t *h, int i) { return h->mask_ptrs[i]; }
int px_hsadmm_frozen(const px_hsadmm_t *h) { return h->frozen; }
double px_hsadmm_density(const px_hsadmm_t *h, int i) {
  return px_sparsity_density(h->sp, i, h->frozen ? h->mask_union : h->mask_z);
}
const px_sparsity_t *px_hsadmm_sparsity(const px_hsadmm_t *h) { return h->sp; }
double px_hsadmm_rho1(const px_hsadmm_t *h, int i) { return h->rho1[i]; }
double px_hsadmm_rho2(const px_hsadmm_t *h, int i) { return h->rho2[i]; }
void px_hsadmm_duals(const px_hsadmm_t *h, int i, const float **u, const float **v) {
  *u = h->st.u + h->st.off[i];
  *v = h->st.v + h->st.off[i];
}
static px_status_t px__sum_theta_u(px_hsadmm_t *h, px_group_t *g) {
  PX_CHECK(px__hss_theta_u(&h->st, h->theta));
  return px__hsadmm_state_allreduce(h, g, h->st.s, h->st.total, PX_COMM_SUM);
}

/* Flat ablation: z = Pi(rho * sum(theta + u) / (lambda + N rho)). */
static px_status_t px__sync_flat(px_hsadmm_t *h) {
  double t0 = px__now();
  PX_CHECK(px__sum_theta_u(h, h->world));
  double t1 = px__now();
  PX_CHECK(px__hss_z_flat(&h->st, h->rho1, h->cfg.lambda, h->N));
  PX_CHECK(px__hsadmm_project(h, h->st.z, h->mask_node));
  /* every rank projected the same sum: the masks agree without a reduction */
  if (!h->frozen && h->mtotal) {
    memcpy(h->mask_union, h->mask_node, h->mtotal);
    memcpy(h->mask_z, h->mask_node, h->mtotal);
  }
  double t2 = px__now();
  h->round.intra_s = t1 - t0;
  h->round.projection_s = t2 - t1;
  h->round.inter_s = h->round.broadcast_s = 0;
  PX_CHECK(px__hss_copy(&h->st, h->st.zi_prev, h->st.zi));
  return px__hss_copy(&h->st, h->st.zi, h->st.z);
}

/* 2-3. intra: s_i = SUM (theta + u); z~_i = (rho1 s_i + rho2 (z - v)) /
 * (lambda/M + P rho1 + rho2), then projected: z_i and the node masks. */
static px_status_t px__hier_node(px_hsadmm_t *h) {
  double t0 = px__now();
  PX_CHECK(px__sum_theta_u(h, h->intra));
  double t1 = px__now();
  PX_CHECK(px__hss_zi(&h->st, h->rho1, h->rho2, h->cfg.lambda, h->M, h->P));
  PX_CHECK(px__hsadmm_project(h, h->st.zi, h->mask_node));
  h->round.intra_s = t1 - t0;
  h->round.projection_s = px__now() - t1;
  return PX_OK;
}

/* 4, first half (leaders): the union of the masks and z_i + v_i in s (z_i
 * + error feedback - z when quantized); the
 * exact exchange also packs every bucket now (the quantized one packs
 * bucket by bucket as it sends). Records whether z is to be projected. */
static px_status_t px__hier_pack(px_hsadmm_t *h) {
  h->project_z = !h->frozen && h->mtotal;
  if (!h->inter) return PX_OK;
  if (!h->frozen && h->mtotal) {
    PX_CHECK(px_comm_allreduce(h->inter, h->mask_node, h->mask_union, h->mtotal, PX_COMM_U8,
                               PX_COMM_MAX));
    PX_CHECK(px__hsadmm_set_masks(h));
  }
  PX_CHECK(px__hss_pack_source(&h->st));
  if (h->dev) { /* packed where the state is; down for the exchange unless NCCL reads it */
    PX_CHECK(px__hss_shrink(&h->st, &h->dv, h->st.s));
    if (px_group_nccl(h->inter)) return PX_OK;
    return h->st.ops->download(px_pack_buffer(h->plan), h->dv.packed,
                               px_pack_packed_bytes(h->plan));
  }
  if (h->q.bits) { /* z_i + error feedback - z: v_i stays home (hsadmm_quant.c) */
    px__hsq_source(h);
    return PX_OK;
  }
  for (int b = 0; b < px_pack_num_buckets(h->plan); b++)
    PX_CHECK(px_pack_shrink_bucket(h->plan, b, (const float *const *)h->src_ptrs));
  return PX_OK;
}

static px_status_t px__sync_hier(px_hsadmm_t *h, uint64_t *inter_value_bytes) {
  /* comm.overlap: the exchange of the previous round, in flight since the
   * local phase began, lands first: this round's z_i needs its z and v */
  double tw = px__now();
  PX_CHECK(px__hso_land(h, inter_value_bytes));
  double waited = px__now() - tw;
  PX_CHECK(px__hier_node(h));
  double t2 = px__now();
  PX_CHECK(px__hier_pack(h));
  if (px__hso_defer(h)) { /* sent during the next local phase */
    h->round.inter_s = waited + (px__now() - t2);
    return PX_OK;
  }
  PX_CHECK(px__hsadmm_exchange(h, inter_value_bytes));
  h->round.inter_s = waited + (px__now() - t2);
  return px__hsadmm_finish(h);
}

px_status_t px_hsadmm_sync(px_hsadmm_t *h, px_hsadmm_round_t **round) {
  uint64_t intra0 = px_comm_tier_bytes(h->comm, PX_TIER_INTRA);
  uint64_t inter0 = px_comm_tier_bytes(h->comm, PX_TIER_INTER);
  uint64_t value_bytes = 0;
  if (h->el.on) { /* elastic: the round can be run again (from before the re-centring) */
    PX_CHECK(px__hse_snapshot(h));
    PX_CHECK(px__hse_recenter(h));
  }
  if (h->keep_ramp > 0 && !h->frozen) { /* the ramp's fractions for this round */
    px_prune_keep_t k;
    px_prune_keep_ramp(&h->cfg.keep, h->iteration, h->keep_ramp, &k);
    PX_CHECK(px_sparsity_set_keep(h->sp, &k));
  }
  if (h->cfg.flat) PX_CHECK(px__sync_flat(h));
  else PX_CHECK(px__sync_hier(h, &value_bytes));

  /* 5. u += theta - z_i, and the residuals */
  int leader = h->cfg.flat ? 0 : h->inter != NULL;
  memset(h->sums, 0, ((size_t)h->n * NSUMS + 4) * sizeof(double));
  PX_CHECK(px__hss_residuals(&h->st, h->theta, h->cfg.flat, leader, h->rho1, h->rho2, h->sums));
  /* the traffic of this sync, summed over ranks (exact in doubles) */
  double *T = h->sums + (size_t)h->n * NSUMS;
  T[0] = (double)(px_comm_tier_bytes(h->comm, PX_TIER_INTRA) - intra0);
  T[1] = (double)(px_comm_tier_bytes(h->comm, PX_TIER_INTER) - inter0);
  /* dense inter phase: the value allreduce scaled to every parameter (the
   * algorithms move bytes in proportion to the count) */
  size_t packed = px_pack_packed_floats(h->plan);
  T[2] = h->cfg.flat ? T[1]
         : packed ? (double)value_bytes * h->lc.scale * (double)h->st.total / (double)packed
                  : 0.0;
  PX_CHECK(px_comm_allreduce(h->world, h->sums, h->sums, (size_t)h->n * NSUMS + 4, PX_COMM_F64,
                             PX_COMM_SUM));
  for (int i = 0; i < h->n; i++) {
    const double *S = h->sums + (size_t)i * NSUMS;
    px_admm_layer_report_t *L = &h->layers[i];
    L->r_intra = sqrt(S[R_INTRA]);
    L->s_intra = sqrt(S[S_INTRA]);
    L->r_inter = sqrt(S[R_INTER]);
    L->s_inter = sqrt(S[S_INTER]);
    L->rho1 = h->rho1[i];
    L->rho2 = h->rho2[i];
    L->theta_norm = sqrt(S[THETA]);
    L->zi_norm = sqrt(S[ZI_SQ]);
    L->z_norm = sqrt(S[Z_SQ]);
    L->u_norm = sqrt(S[U_SQ]);
    L->v_norm = sqrt(S[V_SQ]);
    L->numel = (int64_t)h->params[i].numel;
  }
  h->round.iteration = h->iteration++;
  h->round.bytes_intra = (uint64_t)T[0];
  h->round.bytes_inter = (uint64_t)T[1];
  h->round.bytes_inter_dense = (uint64_t)llround(T[2]);
  h->round.packed_bytes = px_pack_packed_bytes(h->plan);
  if (h->q.bits) h->round.packed_bytes = px__hsq_payload_bytes(h);
  h->round.dense_bytes = h->st.total * sizeof(float);
  h->round.mask_drift = h->mtotal ? (int64_t)px_prune_mask_drift(h->mask_union, h->mask_prev, h->mtotal) : 0;
  h->round.mask_groups = (int64_t)h->mtotal;
  if (h->mtotal) memcpy(h->mask_prev, h->mask_union, h->mtotal);
  double kept = 0, all = 0;
  for (int i = 0; i < h->n; i++)
    if (h->params[i].prunable) {
      kept += px_hsadmm_density(h, i) * (double)h->params[i].numel;
      all += (double)h->params[i].numel;
    }
  h->round.density = all > 0 ? kept / all : 1.0;
  h->round.frozen = h->frozen;
  *round = &h->round;
  return PX_OK;
}

typedef struct {
  px_hsadmm_t *h;
  px_hsadmm_control_fn control;
  void *ctx;
} px__hsadmm_ask_t;

/* Rank 0: the controller's decision into the broadcast buffer
 * [stop, freeze, rho1[n], rho2[n]] (elastic runs: then [epoch, nmembers,
 * members[cap]], hsadmm_elastic.c). */
static px_status_t px__hsadmm_fill(void *ctx, double *buf) {
  px__hsadmm_ask_t *a = ctx;
  px_hsadmm_t *h = a->h;
  int n = h->n;
  px_hsadmm_decision_t d = {buf + 2, buf + 2 + n, h->frozen, 0, "", 0, 0, 0, NULL};
  for (int i = 0; i < n; i++) {
    d.rho1[i] = h->rho1[i];
    d.rho2[i] = h->rho2[i];
  }
  px__hse_offer(h, &d);
  PX_REQUIRE(a->control != NULL, "rank 0 has no controller");
  PX_CHECK(a->control(a->ctx, &h->round, &d));
  buf[0] = px__decide_stop_code(d.stop);
  buf[1] = d.freeze ? 1 : 0;
  return px__hse_pack(h, &d, buf + 2 + 2 * n);
}

px_status_t px_hsadmm_decide(px_hsadmm_t *h, px_hsadmm_control_fn control, void *ctx, int *stop) {
  double *buf = h->decision_buf;
  int n = h->n, end = 0;
  px__hsadmm_ask_t ask = {h, control, ctx};
  PX_CHECK(px__decide_broadcast(h->world, buf, 2 + 2 * (size_t)n + px__hse_tail(h),
                                px__hsadmm_fill, &ask, &end));
  px__hse_unpack(h, buf + 2 + 2 * n); /* elastic: a membership change */
  /* comm.overlap: a stop, a rescaled v or a freeze (the plan's masks are
   * set as the exchange lands) needs the round's own z first */
  /* a ramp's masks freeze once a round projected with its last keep */
  int freeze = buf[1] > 0 && !h->frozen && h->iteration > h->keep_ramp;
  int change = freeze;
  for (int i = 0; i < n; i++) change |= buf[2 + i] != h->rho1[i] || buf[2 + n + i] != h->rho2[i];
  if (px_hsadmm_pending(h) && (end || change)) PX_CHECK(px_hsadmm_overlap_drain(h));
  for (int i = 0; i < n; i++) {
    double r1 = buf[2 + i], r2 = buf[2 + n + i];
    if (!(r1 > 0) || !(r2 > 0))
      return px_set_error(PX_ERR_INVALID, "controller gave penalties %g, %g for %s", r1, r2,
                          h->params[i].name);
    /* scaled duals follow the penalty so that rho * u is unchanged */
    if (r1 != h->rho1[i]) {
      PX_CHECK(px__hss_rescale(&h->st, h->st.u, i, h->rho1[i], r1));
      h->rho1[i] = r1;
    }
    if (r2 != h->rho2[i]) {
      PX_CHECK(px__hss_rescale(&h->st, h->st.v, i, h->rho2[i], r2));
      h->rho2[i] = r2;
    }
  }
  if (freeze) {
    if (px_sparsity_freeze_masks(h->sp, h->mask_union, h->mask_z)) /* N:M, a budget: prune.h */
      PX_CHECK(px__hsadmm_set_masks(h));
    else if (h->dev) /* the frozen projection applies the union where the state is */
      PX_CHECK(px__hss_pack_set(&h->dv, &h->st, h->plan, h->sp, h->mask_union));
    h->frozen = 1; /* only once the plan has the masks it freezes */
    px_pack_plan_freeze(h->plan);
  }
  *stop = end;
  return PX_OK;
}

px_status_t px_hsadmm_set_keep_ramp(px_hsadmm_t *h, int K) {
  PX_REQUIRE(K >= 0, "prune.ramp_iterations = %d: must be >= 0", K);
  PX_REQUIRE(K == 0 || !h->ov.enabled,
             "prune.ramp_iterations needs comm.overlap false (an exchange lands a round late)");
  h->keep_ramp = K;
  return PX_OK;
}

void px_hsadmm_set_exact_freeze(px_hsadmm_t *h, int on) {
  px_sparsity_set_exact_freeze(h->sp, on);
}

px_status_t px_hsadmm_local_control(void *ctx, const px_hsadmm_round_t *round,
                                    px_hsadmm_decision_t *d) {
  px_hsadmm_local_ctl_t *c = ctx;
  PX_REQUIRE(round->nlayers <= c->max_layers, "controller scratch for %d layers, %d needed",
             c->max_layers, round->nlayers);
  px_admm_decision_t g;
  PX_CHECK(px_admm_decide(&c->policy, &c->state, round->iteration, round->mask_drift,
                          c->num_nodes, c->workers_per_node, round->layers, round->nlayers,
                          c->scratch, &g));
  for (int i = 0; i < round->nlayers; i++) {
    d->rho1[i] = c->scratch[i].rho1;
    d->rho2[i] = c->scratch[i].rho2;
  }
  d->freeze = g.freeze;
  d->stop = g.stop;
  snprintf(d->reason, sizeof d->reason, "%s", g.stop_reason);
  return PX_OK;
}

/* ---- checkpoints ------------------------------------------------------------------ */

px_status_t px__hsadmm_state_copy(const px_hsadmm_t *h, void *dst, const void *src,
                                  size_t bytes) {
  return h->st.ops->copy(dst, src, bytes);
}

int px__hsadmm_on_state(const px_hsadmm_t *h) { return h->dev; }

int px__hsadmm_state_items(px_hsadmm_t *h, px__state_item_t *items) {
  assert(!h->dev); /* the strategy checkpoints host state only */
  size_t fb = h->st.total * sizeof(float), db = (size_t)h->n * sizeof(double);
  const px__state_item_t t[] = {
      {"hsadmm.z", PX__ITEM_GLOBAL, PX_ST_F32, h->st.z, fb},
      {"hsadmm.z_prev", PX__ITEM_GLOBAL, PX_ST_F32, h->st.z_prev, fb},
      {"hsadmm.rho1", PX__ITEM_GLOBAL, PX_ST_F64, h->rho1, db},
      {"hsadmm.rho2", PX__ITEM_GLOBAL, PX_ST_F64, h->rho2, db},
      {"hsadmm.frozen", PX__ITEM_GLOBAL, PX_ST_I32, &h->frozen, sizeof h->frozen},
      {"hsadmm.iteration", PX__ITEM_GLOBAL, PX_ST_I32, &h->iteration, sizeof h->iteration},
      {"hsadmm.mask_union", PX__ITEM_GLOBAL, PX_ST_U8, h->mask_union, h->mtotal},
      {"hsadmm.mask_prev", PX__ITEM_GLOBAL, PX_ST_U8, h->mask_prev, h->mtotal},
      {"hsadmm.mask_z", PX__ITEM_GLOBAL, PX_ST_U8, h->mask_z, h->mtotal},
      {"hsadmm.zi", PX__ITEM_NODE, PX_ST_F32, h->st.zi, fb},
      {"hsadmm.zi_prev", PX__ITEM_NODE, PX_ST_F32, h->st.zi_prev, fb},
      {"hsadmm.v", PX__ITEM_NODE, PX_ST_F32, h->st.v, fb},
      {"hsadmm.mask_node", PX__ITEM_NODE, PX_ST_U8, h->mask_node, h->mtotal},
      {"hsadmm.u", PX__ITEM_RANK, PX_ST_F32, h->st.u, fb},
  };
  int n = (int)(sizeof t / sizeof t[0]);
  memcpy(items, t, sizeof t);
  /* a quantizing leader's error feedback and tracked sum: its own (never
   * broadcast); a new leader starts them at zero */
  if (h->q.err)
    items[n++] = (px__state_item_t){"hsadmm.quant_error", PX__ITEM_RANK, PX_ST_F32, h->q.err, fb};
  if (h->q.vsum)
    items[n++] = (px__state_item_t){"hsadmm.quant_vsum", PX__ITEM_RANK, PX_ST_F32, h->q.vsum, fb};
  return n;
}

px_status_t px__hsadmm_state_resumed(px_hsadmm_t *h, int node_fresh, int rank_fresh) {
  size_t fb = h->st.total * sizeof(float);
  if (node_fresh) { /* a node without state: its consensus restarts at z */
    memcpy(h->st.zi, h->st.z, fb);
    memcpy(h->st.zi_prev, h->st.z, fb);
    memset(h->st.v, 0, fb);
    if (h->mtotal) memcpy(h->mask_node, h->mask_union, h->mtotal);
  }
  if (rank_fresh) memset(h->st.u, 0, fb);
  if (h->q.bits && !h->cfg.flat) PX_CHECK(px__hsq_resumed(h, node_fresh || rank_fresh));
  px__hsc_resumed(h);
  if (h->mtotal) PX_CHECK(px__hsadmm_set_masks(h));
  if (h->frozen) px_pack_plan_freeze(h->plan);
  return PX_OK;
}
