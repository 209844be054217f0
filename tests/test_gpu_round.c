/* One H-SADMM round's arithmetic (admm/hsadmm_state.h) both ways on random
 * data: the state ops table with host buffers against the loops the round
 * ran before the table existed (bit for bit, sums included, allocating
 * nothing), and the CUDA table with device buffers against the host table
 * (bit for bit on every family; the residual sums close and bitwise
 * repeatable). The round's collectives, projection and packing are not
 * part of it: the intra sum is taken as if one rank, the packed buffer is
 * the whole s. Hierarchical (leader and not) and flat rounds, and a penalty
 * change rescaling the scaled duals.
 *
 *
 * The device-state round's pack/expand and projection (hsadmm_dev.c) on a
 * sparsity set with a coupled producer/consumer pair, a follower between
 * them, a plain conv with tied filters and a dense tensor: with the host
 * table they give px_pack_shrink / px_pack_expand's buffers and tensors
 * and px_sparsity_project's weights and masks bit for bit; with the CUDA
 * table the same bits (the group norms are summed in project.c's order on
 * the device, and the choice is made on the host from them).
 *
 * Without a GPU (or without CUDA compiled in) the CUDA half skips, saying
 * why, and the CUDA table's set-up must fail with a clear message. */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "admm/hsadmm_state.h"
#include "prunex/cuda.h"
#include "prunex/prune_internal.h"
#include "px_test_util.h"

enum { NT = 3, NFAM = 7 };
static const size_t k_numel[NT] = {1031, 37, 4099};
static const double k_rho1[NT] = {0.5, 1.25, 2.0}, k_rho2[NT] = {0.75, 0.3, 1.5};
#define LAMBDA 1e-3
#define M_NODES 3
#define P_RANKS 2

/* A round's inputs and outputs on the host: the seven families in
 * hsadmm_state.h's order, theta, and the sums. */
typedef struct {
  size_t off[NT], total;
  float *fam[NFAM]; /* u, zi, zi_prev, v, z, z_prev, s */
  float *theta;
  double sums[NT * PX__NSUMS];
} world_t;

enum { U, ZI, ZIP, V, Z, ZP, S };

static void world_init(world_t *w, uint64_t seed) {
  memset(w, 0, sizeof *w);
  for (int i = 0; i < NT; i++) {
    w->off[i] = w->total;
    w->total += k_numel[i];
  }
  px_test_rng_t r;
  px_test_rng_seed(&r, seed);
  for (int f = 0; f < NFAM; f++) {
    w->fam[f] = malloc(w->total * sizeof(float));
    assert_non_null(w->fam[f]);
    px_test_fill_normal(&r, w->fam[f], w->total);
  }
  w->theta = malloc(w->total * sizeof(float));
  assert_non_null(w->theta);
  px_test_fill_normal(&r, w->theta, w->total);
  w->theta[5] = 0.0f; /* a few exact zeros and ties */
  w->fam[U][5] = -0.0f;
  w->fam[ZI][7] = w->fam[Z][7];
}

static void world_free(world_t *w) {
  for (int f = 0; f < NFAM; f++) free(w->fam[f]);
  free(w->theta);
}

static float **fam_ptrs(px__hss_t *st, float **p) {
  p[U] = st->u, p[ZI] = st->zi, p[ZIP] = st->zi_prev, p[V] = st->v;
  p[Z] = st->z, p[ZP] = st->z_prev, p[S] = st->s;
  return p;
}

/* ---- the reference: hsadmm.c's loops before the table --------------------------- */

static double ref_sqdiff(const float *a, const float *b, size_t n) {
  double acc = 0;
  for (size_t j = 0; j < n; j++) {
    double d = (double)a[j] - b[j];
    acc += d * d;
  }
  return acc;
}

static double ref_sq(const float *a, size_t n) {
  double acc = 0;
  for (size_t j = 0; j < n; j++) acc += (double)a[j] * a[j];
  return acc;
}

static void ref_residuals(world_t *w, int flat, int leader) {
  float **F = w->fam;
  const float *target = flat ? F[Z] : F[ZI];
  memset(w->sums, 0, sizeof w->sums);
  for (int i = 0; i < NT; i++) {
    size_t o = w->off[i], n = k_numel[i];
    const float *th = w->theta + o;
    float *u = F[U] + o;
    double *Sm = w->sums + (size_t)i * PX__NSUMS;
    Sm[PX__R_INTRA] = ref_sqdiff(th, target + o, n);
    for (size_t j = 0; j < n; j++) u[j] += th[j] - target[o + j];
    double ds = ref_sqdiff(target + o, (flat ? F[ZP] : F[ZIP]) + o, n);
    Sm[PX__S_INTRA] = k_rho1[i] * k_rho1[i] * ds;
    Sm[PX__THETA] = ref_sq(th, n);
    Sm[PX__U_SQ] = ref_sq(u, n);
    if (leader) {
      Sm[PX__R_INTER] = ref_sqdiff(F[ZI] + o, F[Z] + o, n);
      Sm[PX__S_INTER] = k_rho2[i] * k_rho2[i] * ref_sqdiff(F[Z] + o, F[ZP] + o, n);
      Sm[PX__ZI_SQ] = ref_sq(F[ZI] + o, n);
      Sm[PX__Z_SQ] = ref_sq(F[Z] + o, n);
      Sm[PX__V_SQ] = ref_sq(F[V] + o, n);
    }
  }
}

/* Penalties change for tensor 1 (rho1) and 2 (rho2): the scaled duals follow. */
static void ref_rescale(world_t *w) {
  float f1 = (float)(k_rho1[1] / 0.8), f2 = (float)(k_rho2[2] / 3.0);
  for (size_t j = 0; j < k_numel[1]; j++) w->fam[U][w->off[1] + j] *= f1;
  for (size_t j = 0; j < k_numel[2]; j++) w->fam[V][w->off[2] + j] *= f2;
}

static void ref_round(world_t *w, int flat, int leader) {
  float **F = w->fam;
  size_t T = w->total;
  for (size_t j = 0; j < T; j++) F[S][j] = w->theta[j] + F[U][j];
  if (flat) {
    memcpy(F[ZP], F[Z], T * sizeof(float));
    for (int i = 0; i < NT; i++) {
      float scale = (float)(k_rho1[i] / (LAMBDA + M_NODES * P_RANKS * k_rho1[i]));
      for (size_t j = 0; j < k_numel[i]; j++) F[Z][w->off[i] + j] = scale * F[S][w->off[i] + j];
    }
    memcpy(F[ZIP], F[ZI], T * sizeof(float));
    memcpy(F[ZI], F[Z], T * sizeof(float));
  } else {
    memcpy(F[ZIP], F[ZI], T * sizeof(float));
    for (int i = 0; i < NT; i++) {
      double den = LAMBDA / M_NODES + P_RANKS * k_rho1[i] + k_rho2[i];
      float a = (float)(k_rho1[i] / den), b = (float)(k_rho2[i] / den);
      for (size_t j = 0, o = w->off[i]; j < k_numel[i]; j++)
        F[ZI][o + j] = a * F[S][o + j] + b * (F[Z][o + j] - F[V][o + j]);
    }
    for (size_t j = 0; j < T; j++) F[S][j] = F[ZI][j] + F[V][j];
    float inv = 1.0f / (float)M_NODES;
    for (size_t j = 0; j < T; j++) F[S][j] *= inv;
    memcpy(F[ZP], F[Z], T * sizeof(float));
    memcpy(F[Z], F[S], T * sizeof(float)); /* the expansion of the mean */
    for (size_t j = 0; j < T; j++) F[V][j] += F[ZI][j] - F[Z][j];
  }
  ref_residuals(w, flat, leader);
  ref_rescale(w);
}

/* ---- the same round through the table -------------------------------------------- */

static void table_round(px__hss_t *st, const float *const *theta, double *sums, int flat,
                        int leader) {
  assert_int_equal(px__hss_theta_u(st, theta), PX_OK);
  if (flat) {
    assert_int_equal(px__hss_z_flat(st, k_rho1, LAMBDA, M_NODES * P_RANKS), PX_OK);
    assert_int_equal(px__hss_copy(st, st->zi_prev, st->zi), PX_OK);
    assert_int_equal(px__hss_copy(st, st->zi, st->z), PX_OK);
  } else {
    assert_int_equal(px__hss_zi(st, k_rho1, k_rho2, LAMBDA, M_NODES, P_RANKS), PX_OK);
    assert_int_equal(px__hss_pack_source(st), PX_OK);
    assert_int_equal(px__hss_scale(st, st->s, 1.0f / (float)M_NODES, st->total), PX_OK);
    assert_int_equal(px__hss_copy(st, st->z_prev, st->z), PX_OK);
    assert_int_equal(px__hss_copy(st, st->z, st->s), PX_OK);
    assert_int_equal(px__hss_dual_v(st), PX_OK);
  }
  assert_int_equal(px__hss_residuals(st, theta, flat, leader, k_rho1, k_rho2, sums), PX_OK);
  assert_int_equal(px__hss_rescale(st, st->u, 1, k_rho1[1], 0.8), PX_OK);
  assert_int_equal(px__hss_rescale(st, st->v, 2, k_rho2[2], 3.0), PX_OK);
}

/* Runs the round with ops on w's inputs (uploaded to the table's side) and
 * leaves its families and sums in out (host). */
static void run_table(const px__hss_ops_t *ops, const world_t *w, world_t *out, int flat,
                      int leader) {
  px__hss_t st;
  assert_int_equal(px__hss_create(&st, ops, NT, k_numel), PX_OK);
  float *p[NFAM];
  fam_ptrs(&st, p);
  size_t fb = w->total * sizeof(float);
  for (int f = 0; f < NFAM; f++) assert_int_equal(ops->upload(p[f], w->fam[f], fb), PX_OK);
  float *dtheta = NULL;
  assert_int_equal(ops->alloc(fb, "test.theta", (void **)&dtheta), PX_OK);
  assert_int_equal(ops->upload(dtheta, w->theta, fb), PX_OK);
  const float *theta[NT];
  for (int i = 0; i < NT; i++) theta[i] = dtheta + w->off[i];

  px_mem_stats_t m0, m1;
  px_mem_stats(&m0);
  table_round(&st, theta, out->sums, flat, leader);
  px_mem_stats(&m1);
  assert_int_equal(m1.allocs, m0.allocs); /* a round allocates nothing */

  assert_int_equal(ops->sync(), PX_OK);
  for (int f = 0; f < NFAM; f++) assert_int_equal(ops->download(out->fam[f], p[f], fb), PX_OK);
  ops->release(dtheta);
  px__hss_free(&st);
}

static void assert_families_equal(const world_t *got, const world_t *want, const char *what) {
  static const char *names[NFAM] = {"u", "z_i", "z_i prev", "v", "z", "z prev", "s"};
  for (int f = 0; f < NFAM; f++)
    for (size_t j = 0; j < want->total; j++)
      if (memcmp(&got->fam[f][j], &want->fam[f][j], sizeof(float))) {
        fail_msg("%s: %s[%zu] = %.9g, reference %.9g", what, names[f], j, got->fam[f][j],
                 want->fam[f][j]);
      }
}

/* ---- host half --------------------------------------------------------------------- */

static void check_host(int flat, int leader, uint64_t seed) {
  world_t ref, got;
  world_init(&ref, seed);
  world_init(&got, seed + 1); /* outputs only: overwritten */
  run_table(&px__hss_host_ops, &ref, &got, flat, leader);
  ref_round(&ref, flat, leader);
  assert_families_equal(&got, &ref, "host table");
  assert_memory_equal(got.sums, ref.sums, sizeof ref.sums);
  world_free(&ref);
  world_free(&got);
}

static void test_host_table_is_the_cpu_round_leader(void **state) {
  (void)state;
  check_host(0, 1, 11);
}

static void test_host_table_is_the_cpu_round_member(void **state) {
  (void)state;
  check_host(0, 0, 12);
}

static void test_host_table_is_the_cpu_round_flat(void **state) {
  (void)state;
  check_host(1, 0, 13);
}

/* ---- CUDA half --------------------------------------------------------------------- */

static void check_cuda(int flat, int leader, uint64_t seed) {
  if (!px_test_gpu_ready("the device round")) skip();
  world_t in, host, dev, again;
  world_init(&in, seed);
  world_init(&host, seed + 1);
  world_init(&dev, seed + 2);
  world_init(&again, seed + 3);
  run_table(&px__hss_host_ops, &in, &host, flat, leader);
  run_table(&px__hss_cuda_ops, &in, &dev, flat, leader);
  run_table(&px__hss_cuda_ops, &in, &again, flat, leader);
  assert_families_equal(&dev, &host, "CUDA table");
  /* the device sums another order: close to the CPU's, and the same bits every time */
  for (int k = 0; k < NT * PX__NSUMS; k++) {
    double a = dev.sums[k], b = host.sums[k];
    if (fabs(a - b) > 1e-12 * fmax(1.0, fabs(b)))
      fail_msg("sum %d (layer %d, entry %d): device %.17g, host %.17g", k, k / PX__NSUMS,
               k % PX__NSUMS, a, b);
  }
  assert_memory_equal(dev.sums, again.sums, sizeof dev.sums);
  world_free(&in);
  world_free(&host);
  world_free(&dev);
  world_free(&again);
}

static void test_cuda_table_matches_host_leader(void **state) {
  (void)state;
  check_cuda(0, 1, 21);
}

static void test_cuda_table_matches_host_member(void **state) {
  (void)state;
  check_cuda(0, 0, 22);
}

static void test_cuda_table_matches_host_flat(void **state) {
  (void)state;
  check_cuda(1, 0, 23);
}

/* ---- pack/expand and projection of the device-state round ---------------------------- */

enum { NP = 5 };
/* producer A, its batch norm's scale (a follower), consumer B, a dense
 * tensor, and a plain conv C with two tied filters */
static const px_sparsity_param_t k_sp[NP] = {
    {1, {8, 3, 3, 3}, 2, 0},
    {1, {8, 1, 1, 1}, 2, 1},
    {1, {6, 8, 3, 3}, -1, 0},
    {0, {0, 0, 0, 0}, -1, 0},
    {1, {5, 6, 1, 1}, -1, 0},
};
static const size_t k_dense = 37;

typedef struct {
  px_sparsity_t *sp;
  px_pack_plan_t *plan;
  size_t numel[NP], off[NP], total;
} set_t;

static void set_init_u(set_t *f, double filter_keep, double channel_keep, double shape_keep,
                       double uncoupled_keep) {
  memset(f, 0, sizeof *f);
  px_prune_keep_t keep = {filter_keep, channel_keep, shape_keep, 0, 0, uncoupled_keep};
  assert_int_equal(px_sparsity_create(k_sp, NULL, NP, &keep, &f->sp), PX_OK);
  px_param_desc_t desc[NP];
  memset(desc, 0, sizeof desc);
  for (int i = 0; i < NP; i++) {
    f->numel[i] = k_sp[i].prunable ? px_conv_numel(k_sp[i].shape) : k_dense;
    f->off[i] = f->total;
    f->total += f->numel[i];
    desc[i].kind = k_sp[i].prunable ? PX_PARAM_CONV : PX_PARAM_DENSE;
    desc[i].shape = k_sp[i].shape;
    desc[i].numel = f->numel[i];
    desc[i].layout = px_sparsity_layout(f->sp, i);
  }
  assert_int_equal(px_pack_plan_create(desc, NP, 64, &f->plan), PX_OK); /* small buckets */
}

static void set_init(set_t *f, double filter_keep, double channel_keep, double shape_keep) {
  set_init_u(f, filter_keep, channel_keep, shape_keep, 0.0);
}

static void set_free(set_t *f) {
  px_pack_plan_destroy(f->plan);
  px_sparsity_destroy(f->sp);
}

/* Random weights with ties: C's filters 1 and 3 equal, A's filter 5 zero. */
static float *set_weights(const set_t *f, uint64_t seed) {
  float *w = malloc(f->total * sizeof(float));
  assert_non_null(w);
  px_test_rng_t r;
  px_test_rng_seed(&r, seed);
  px_test_fill_normal(&r, w, f->total);
  float *c = w + f->off[4];
  memcpy(c + 3 * 6, c + 1 * 6, 6 * sizeof(float));
  memset(w + f->off[0] + 5 * 27, 0, 27 * sizeof(float));
  return w;
}

/* The device-state projection with ops of w (host) into out and masks. */
static void state_project(const set_t *f, const px__hss_ops_t *ops, const float *w, float *out,
                          uint8_t *masks) {
  px__hss_t st;
  px__hss_dev_t dv;
  assert_int_equal(px__hss_create(&st, ops, NP, f->numel), PX_OK);
  assert_int_equal(px__hss_dev_create(&dv, &st, f->sp), PX_OK);
  assert_int_equal(ops->upload(st.z, w, f->total * sizeof(float)), PX_OK);
  px_mem_stats_t m0, m1;
  px_mem_stats(&m0);
  assert_int_equal(px__hss_project(&st, &dv, f->sp, st.z, masks), PX_OK);
  px_mem_stats(&m1);
  assert_int_equal(m1.allocs, m0.allocs);
  assert_int_equal(ops->download(out, st.z, f->total * sizeof(float)), PX_OK);
  px__hss_dev_free(&dv, &st);
  px__hss_free(&st);
}

/* uk: prune.uncoupled_channel_keep (0: ck), the channels of A and C */
static void check_projection(const px__hss_ops_t *ops, double fk, double ck, double sk,
                             double uk, uint64_t seed) {
  set_t f;
  set_init_u(&f, fk, ck, sk, uk);
  size_t mb = px_sparsity_mask_bytes(f.sp);
  float *w = set_weights(&f, seed), *want = malloc(f.total * 4), *got = malloc(f.total * 4);
  uint8_t *mwant = malloc(mb), *mgot = malloc(mb);
  assert_true(want && got && mwant && mgot);
  memcpy(want, w, f.total * 4);
  memset(mwant, 7, mb);
  memset(mgot, 9, mb);
  assert_int_equal(px_sparsity_project(f.sp, want, f.off, mwant), PX_OK);
  state_project(&f, ops, w, got, mgot);
  for (size_t j = 0; j < f.total; j++)
    if (memcmp(&got[j], &want[j], 4))
      fail_msg("%s projection: w[%zu] = %.9g, px_sparsity_project %.9g", ops->name, j, got[j],
               want[j]);
  assert_memory_equal(mgot, mwant, mb);
  /* something was pruned in each kind asked for, so the test can fail */
  size_t zeros = 0;
  for (size_t j = 0; j < f.total; j++) zeros += want[j] == 0.0f;
  assert_true(zeros > 27);
  free(w), free(want), free(got), free(mwant), free(mgot);
  set_free(&f);
}

/* Random masks (a projection's), then the block pack/expand against the
 * plan's. */
static void check_pack(const px__hss_ops_t *ops, uint64_t seed) {
  set_t f;
  set_init(&f, 0.75, 0.5, 0.3); /* shape groups pruned inside kept channels */
  size_t mb = px_sparsity_mask_bytes(f.sp), fb = f.total * sizeof(float);
  float *w = set_weights(&f, seed), *x = set_weights(&f, seed + 1);
  uint8_t *masks = malloc(mb);
  assert_non_null(masks);
  assert_int_equal(px_sparsity_project(f.sp, w, f.off, masks), PX_OK);
  const uint8_t *mptr[NP] = {0};
  float *xp[NP], *hp[NP];
  float *host = malloc(fb), *got = malloc(fb), *packed = malloc(fb);
  assert_true(host && got && packed);
  for (int i = 0; i < NP; i++) {
    if (k_sp[i].prunable) mptr[i] = masks + px_sparsity_mask_offset(f.sp, i);
    xp[i] = x + f.off[i];
    hp[i] = host + f.off[i];
  }
  assert_int_equal(px_pack_plan_set_masks(f.plan, mptr), PX_OK);
  size_t nf = px_pack_packed_floats(f.plan);
  assert_true(nf > 0 && nf < f.total / 2);
  px_pack_shrink(f.plan, (const float *const *)xp);

  px__hss_t st;
  px__hss_dev_t dv;
  assert_int_equal(px__hss_create(&st, ops, NP, f.numel), PX_OK);
  assert_int_equal(px__hss_dev_create(&dv, &st, f.sp), PX_OK);
  assert_int_equal(px__hss_pack_set(&dv, &st, f.plan, f.sp, masks), PX_OK);
  assert_int_equal(ops->upload(st.s, x, fb), PX_OK);
  assert_int_equal(px__hss_shrink(&st, &dv, st.s), PX_OK);
  assert_int_equal(ops->download(packed, dv.packed, nf * 4), PX_OK);
  assert_memory_equal(packed, px_pack_buffer(f.plan), nf * 4);

  /* expand a random packed buffer over garbage on both sides */
  px_test_rng_t r;
  px_test_rng_seed(&r, seed + 2);
  px_test_fill_normal(&r, px_pack_buffer(f.plan), nf);
  memset(host, 0x7f, fb);
  px_pack_expand(f.plan, hp);
  assert_int_equal(ops->upload(st.z, w, fb), PX_OK); /* garbage to overwrite */
  assert_int_equal(ops->upload(dv.packed, px_pack_buffer(f.plan), nf * 4), PX_OK);
  assert_int_equal(px__hss_expand(&st, &dv, st.z), PX_OK);
  assert_int_equal(ops->download(got, st.z, fb), PX_OK);
  assert_memory_equal(got, host, fb);
  px__hss_dev_free(&dv, &st);
  px__hss_free(&st);
  free(w), free(x), free(masks), free(host), free(got), free(packed);
  set_free(&f);
}

static void test_host_blocks_are_the_pack_plan(void **state) {
  (void)state;
  check_pack(&px__hss_host_ops, 31);
}

static void test_host_projection_is_px_sparsity_project(void **state) {
  (void)state;
  check_projection(&px__hss_host_ops, 0.75, 0.5, 0.3, 0, 41);
  check_projection(&px__hss_host_ops, 0.0, 1.0, 0.5, 0, 42); /* nothing and everything kept */
  check_projection(&px__hss_host_ops, 1.0, 0.3, 1.0, 0, 43);
  check_projection(&px__hss_host_ops, 1.0, 0.5, 1.0, 1.0, 44); /* uncoupled channels all kept */
  check_projection(&px__hss_host_ops, 0.75, 0.5, 1.0, 0.4, 45);
}

static void test_cuda_blocks_are_the_pack_plan(void **state) {
  (void)state;
  if (!px_test_gpu_ready("the device pack")) skip();
  check_pack(&px__hss_cuda_ops, 51);
}

static void test_cuda_projection_is_px_sparsity_project(void **state) {
  (void)state;
  if (!px_test_gpu_ready("the device projection")) skip();
  check_projection(&px__hss_cuda_ops, 0.75, 0.5, 0.3, 0, 61);
  check_projection(&px__hss_cuda_ops, 0.0, 1.0, 0.5, 0, 62);
  check_projection(&px__hss_cuda_ops, 1.0, 0.3, 1.0, 0, 63);
  check_projection(&px__hss_cuda_ops, 1.0, 0.5, 1.0, 1.0, 64);
  check_projection(&px__hss_cuda_ops, 0.75, 0.5, 1.0, 0.4, 65);
}

/* Where the device state cannot be had, it says why: without CUDA compiled
 * in, PX_ERR_NOT_BUILT naming it; with CUDA but no GPU, an error and a
 * message. With a GPU it is made (the tests above use it). No skip: on a
 * GPU machine this program's verdict must be its CUDA tests'. */
static void test_cuda_table_refused_without_cuda(void **state) {
  (void)state;
  px__hss_t st;
  memset(&st, 0, sizeof st);
  px_status_t rc = px__hss_create(&st, &px__hss_cuda_ops, NT, k_numel);
  int n = 0;
  if (!px_cuda_built()) {
    assert_int_equal(rc, PX_ERR_NOT_BUILT);
    assert_non_null(strstr(px_last_error(), "without CUDA"));
  } else if (px_cuda_device_count(&n) != PX_OK || n == 0) {
    printf("CUDA built, no GPU: %s\n", px_last_error());
    assert_true(rc < 0);
    assert_true(px_last_error()[0] != '\0');
  } else {
    assert_int_equal(rc, PX_OK);
  }
  px__hss_free(&st);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_host_table_is_the_cpu_round_leader),
      cmocka_unit_test(test_host_table_is_the_cpu_round_member),
      cmocka_unit_test(test_host_table_is_the_cpu_round_flat),
      cmocka_unit_test(test_cuda_table_matches_host_leader),
      cmocka_unit_test(test_cuda_table_matches_host_member),
      cmocka_unit_test(test_cuda_table_matches_host_flat),
      cmocka_unit_test(test_host_blocks_are_the_pack_plan),
      cmocka_unit_test(test_host_projection_is_px_sparsity_project),
      cmocka_unit_test(test_cuda_blocks_are_the_pack_plan),
      cmocka_unit_test(test_cuda_projection_is_px_sparsity_project),
      cmocka_unit_test(test_cuda_table_refused_without_cuda),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
