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

/* Without CUDA compiled in, the device state cannot be set up, and says why. */
static void test_cuda_table_refused_without_cuda(void **state) {
  (void)state;
  if (px_cuda_built()) {
    printf("libpxcore has CUDA: the refusal of a build without it is not checked\n");
    skip();
  }
  px__hss_t st;
  assert_int_equal(px__hss_create(&st, &px__hss_cuda_ops, NT, k_numel), PX_ERR_NOT_BUILT);
  assert_non_null(strstr(px_last_error(), "without CUDA"));
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
      cmocka_unit_test(test_cuda_table_refused_without_cuda),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
