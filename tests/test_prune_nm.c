/* The sparsity-set descriptor and the N:M set it was built to admit: the
 * layout of a mask (parts, offsets, sizes; without N:M exactly the old
 * filter | channel | shape mask), the N:M projection against its plain
 * reference on random data (ties, NaN, a c_in that M does not divide), the
 * N:M rule on every block, the composite projection, masking and density
 * through the layout, the per-element packing (index-free, exactly the
 * active elements, any bucket size, expand(shrink(x)) = x masked), the
 * whole-list projection with coupling, the freeze of the N:M part, and the
 * job spec's prune.nm_n / nm_m. */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "prunex/jobspec.h"
#include "prunex/prune.h"
#include "prunex/prune_internal.h"
#include "px_test_util.h"

/* Random values with ties (a coarse grid) and, when nan is set, some NaN. */
static void fill_ties(px_test_rng_t *rng, float *x, size_t n, int nan) {
  for (size_t i = 0; i < n; i++) {
    double u = px_test_rng_uniform(rng);
    x[i] = (float)(floor(px_test_rng_normal(rng) * 4.0) / 4.0);
    if (u < 0.05) x[i] = -x[i];
    if (nan && u > 0.97) x[i] = NAN;
  }
}

static int same_floats(const float *a, const float *b, size_t n) {
  for (size_t i = 0; i < n; i++) {
    if (isnan(a[i]) != isnan(b[i])) return 0;
    if (!isnan(a[i]) && a[i] != b[i]) return 0;
  }
  return 1;
}

/* Nonzero (or NaN) elements of every block W[o, bM..bM+M-1, h, w] are at
 * most n; returns the largest count seen. */
static int max_block_count(const float *w, const uint8_t *mask_or_null, px_conv_shape_t s,
                           int m) {
  size_t khw = (size_t)s.kh * s.kw, row = (size_t)s.c_in * khw;
  int worst = 0;
  for (int o = 0; o < s.c_out; o++)
    for (size_t j = 0; j < khw; j++)
      for (int b = 0; b < s.c_in; b += m) {
        int cnt = 0;
        for (int c = b; c < b + m && c < s.c_in; c++) {
          size_t at = (size_t)o * row + (size_t)c * khw + j;
          cnt += mask_or_null ? mask_or_null[at] != 0 : w[at] != 0.0f;
        }
        if (cnt > worst) worst = cnt;
      }
  return worst;
}

static void test_nm_projection_matches_reference(void **state) {
  (void)state;
  const px_conv_shape_t shapes[] = {{8, 16, 3, 3}, {5, 10, 1, 1}, {3, 7, 3, 1}, {4, 4, 2, 2},
                                    {2, 1, 1, 1}};
  const int nm[][2] = {{2, 4}, {1, 4}, {1, 3}, {3, 8}, {4, 4}, {1, 1}, {2, 5}};
  px_test_rng_t rng;
  px_test_rng_seed(&rng, 101);
  for (size_t si = 0; si < sizeof shapes / sizeof shapes[0]; si++) {
    for (size_t k = 0; k < sizeof nm / sizeof nm[0]; k++) {
      px_conv_shape_t s = shapes[si];
      size_t ne = px_conv_numel(s);
      float *a = malloc(ne * 4), *b = malloc(ne * 4);
      uint8_t *ma = malloc(ne), *mb = malloc(ne);
      fill_ties(&rng, a, ne, k % 2);
      memcpy(b, a, ne * 4);
      assert_int_equal(px_prune_project_nm(a, s, nm[k][0], nm[k][1], ma), PX_OK);
      assert_int_equal(px_prune_project_nm_ref(b, s, nm[k][0], nm[k][1], mb), PX_OK);
      assert_true(same_floats(a, b, ne));
      assert_memory_equal(ma, mb, ne);
      assert_true(max_block_count(a, ma, s, nm[k][1]) <= nm[k][0]);
      /* without a mask buffer: the same tensor */
      fill_ties(&rng, a, ne, 0);
      memcpy(b, a, ne * 4);
      assert_int_equal(px_prune_project_nm(a, s, nm[k][0], nm[k][1], NULL), PX_OK);
      assert_int_equal(px_prune_project_nm_ref(b, s, nm[k][0], nm[k][1], NULL), PX_OK);
      assert_true(same_floats(a, b, ne));
      free(a), free(b), free(ma), free(mb);
    }
  }
}

/* 2:4 on a hand-made block keeps the two largest magnitudes, the lower
 * channel on a tie, and never a NaN over a number. */
static void test_nm_keeps_largest_magnitudes(void **state) {
  (void)state;
  px_conv_shape_t s = {1, 8, 1, 1};
  float w[8] = {0.5f, -3.0f, 2.0f, 1.0f, NAN, 1.0f, 1.0f, 0.25f};
  uint8_t m[8];
  assert_int_equal(px_prune_project_nm(w, s, 2, 4, m), PX_OK);
  const uint8_t want[8] = {0, 1, 1, 0, 0, 1, 1, 0};
  assert_memory_equal(m, want, 8);
  assert_true(w[0] == 0.0f && w[1] == -3.0f && w[2] == 2.0f && w[3] == 0.0f);
  assert_true(w[4] == 0.0f && w[5] == 1.0f && w[6] == 1.0f && w[7] == 0.0f);
}

static void test_layout_parts(void **state) {
  (void)state;
  px_conv_shape_t s = {6, 4, 3, 3};
  px_prune_layout_t L;
  assert_int_equal(px_prune_layout_init(&L, s, NULL), PX_OK);
  assert_int_equal(L.size, px_prune_mask_size(s));
  assert_int_equal(L.off[PX_PRUNE_PART_CHANNEL], 6);
  assert_int_equal(L.off[PX_PRUNE_PART_SHAPE], 10);
  assert_false(px_prune_layout_per_element(&L));
  uint8_t buf[1];
  assert_null(px_prune_part(&L, buf, PX_PRUNE_PART_NM));
  px_prune_keep_t k = {1, 1, 1, 2, 4, 0};
  assert_int_equal(px_prune_layout_init(&L, s, &k), PX_OK);
  assert_true(px_prune_layout_per_element(&L));
  assert_int_equal(L.off[PX_PRUNE_PART_NM], px_prune_mask_size(s));
  assert_int_equal(L.size, px_prune_mask_size(s) + px_conv_numel(s));
  /* bad N:M */
  const int32_t bad[][2] = {{3, 2}, {0, 4}, {2, 0}, {65, 65}, {-1, 4}};
  for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
    px_prune_keep_t b = {1, 1, 1, bad[i][0], bad[i][1], 0};
    assert_int_equal(px_prune_keep_validate(&b), PX_ERR_INVALID);
    assert_int_equal(px_prune_layout_init(&L, s, &b), PX_ERR_INVALID);
  }
}

/* The composite projection of a layout is the structured projection and
 * then N:M; masking the original tensor with its mask gives the projected
 * tensor (projections only zero); the density counts the active elements. */
static void test_layout_project_apply_density(void **state) {
  (void)state;
  px_conv_shape_t s = {12, 10, 3, 3};
  px_prune_keep_t k = {0.75, 0.6, 0.7, 2, 4, 0};
  px_prune_layout_t L;
  assert_int_equal(px_prune_layout_init(&L, s, &k), PX_OK);
  size_t ne = px_conv_numel(s);
  px_test_rng_t rng;
  px_test_rng_seed(&rng, 7);
  float *x = malloc(ne * 4), *a = malloc(ne * 4), *b = malloc(ne * 4);
  uint8_t *mask = malloc(L.size), *mref = malloc(L.size);
  px_test_fill_normal(&rng, x, ne);
  memcpy(a, x, ne * 4);
  memcpy(b, x, ne * 4);
  assert_int_equal(px_prune_layout_project(&L, a, &k, mask, NULL, 0), PX_OK);
  assert_int_equal(px_prune_project(b, s, &k, mref, NULL, 0), PX_OK);
  assert_int_equal(px_prune_project_nm(b, s, 2, 4, mref + px_prune_mask_size(s)), PX_OK);
  assert_memory_equal(a, b, ne * 4);
  assert_memory_equal(mask, mref, L.size);
  memcpy(b, x, ne * 4);
  px_prune_layout_apply(&L, b, mask);
  assert_memory_equal(a, b, ne * 4);
  size_t active = 0, nonzero = 0;
  for (int o = 0; o < s.c_out; o++)
    for (size_t j = 0; j < ne / (size_t)s.c_out; j++) {
      active += (size_t)px_prune_layout_active(&L, mask, o, j);
      nonzero += a[(size_t)o * (ne / (size_t)s.c_out) + j] != 0.0f;
    }
  assert_int_equal(active, nonzero); /* normal data: no kept zero */
  assert_true(fabs(px_prune_layout_density(&L, mask) - (double)active / (double)ne) < 1e-12);
  assert_true(max_block_count(a, NULL, s, 4) <= 2);
  free(x), free(a), free(b), free(mask), free(mref);
}

/* ---- packing ----------------------------------------------------------------------------- */

enum { NP = 5 };

typedef struct {
  px_param_desc_t d[NP];
  px_prune_layout_t L[NP];
  float *x[NP], *y[NP], *z[NP];
  uint8_t *mask[NP];
} pmodel_t;

/* Two N:M convs (one wider than a small bucket), a plain conv, two dense
 * parameters; masks are the OR of two nodes' projections (so rows differ
 * in length). */
static void pmodel_init(pmodel_t *m, uint64_t seed) {
  const px_conv_shape_t sh[NP] = {{16, 12, 3, 3}, {0, 0, 0, 0}, {8, 16, 1, 1}, {6, 8, 3, 3},
                                  {0, 0, 0, 0}};
  const size_t dense[NP] = {0, 17, 0, 0, 5};
  px_prune_keep_t k = {0.75, 0.75, 1, 2, 4, 0}, plain = {0.5, 0.5, 1, 0, 0, 0};
  px_test_rng_t rng;
  px_test_rng_seed(&rng, seed);
  memset(m, 0, sizeof *m);
  for (int i = 0; i < NP; i++) {
    int conv = sh[i].c_out > 0;
    const px_prune_keep_t *ki = i == 3 ? &plain : &k;
    size_t ne = conv ? px_conv_numel(sh[i]) : dense[i];
    m->d[i] = (px_param_desc_t){"p", conv ? PX_PARAM_CONV : PX_PARAM_DENSE, sh[i], dense[i],
                                conv ? &m->L[i] : NULL};
    m->x[i] = malloc(ne * 4);
    m->y[i] = malloc(ne * 4);
    m->z[i] = malloc(ne * 4);
    px_test_fill_normal(&rng, m->x[i], ne);
    if (!conv) continue;
    assert_int_equal(px_prune_layout_init(&m->L[i], sh[i], ki), PX_OK);
    m->mask[i] = malloc(m->L[i].size);
    uint8_t *other = malloc(m->L[i].size);
    float *t = malloc(ne * 4);
    for (int node = 0; node < 2; node++) {
      px_test_fill_normal(&rng, t, ne);
      assert_int_equal(px_prune_layout_project(&m->L[i], t, ki, node ? other : m->mask[i], NULL,
                                               0), PX_OK);
    }
    px_prune_mask_union(m->mask[i], other, m->L[i].size);
    free(other);
    free(t);
  }
}

static void pmodel_free(pmodel_t *m) {
  for (int i = 0; i < NP; i++) free(m->x[i]), free(m->y[i]), free(m->z[i]), free(m->mask[i]);
}

static size_t pmodel_numel(const pmodel_t *m, int i) {
  return m->d[i].kind == PX_PARAM_CONV ? px_conv_numel(m->d[i].shape) : m->d[i].numel;
}

/* What the packed stream must be: for per-element layers the active
 * elements of each kept filter in row order; for the plain conv the dense
 * K_out x K_in block; dense parameters whole. */
static size_t expected_stream(const pmodel_t *m, float *out) {
  size_t q = 0;
  for (int i = 0; i < NP; i++) {
    if (m->d[i].kind == PX_PARAM_DENSE) {
      memcpy(out + q, m->x[i], m->d[i].numel * 4);
      q += m->d[i].numel;
      continue;
    }
    const px_prune_layout_t *L = &m->L[i];
    px_conv_shape_t s = L->shape;
    int32_t ko[64], ki[64], no, ni;
    px_prune_layout_index_sets(L, m->mask[i], ko, &no, ki, &ni);
    size_t khw = (size_t)s.kh * s.kw, row = (size_t)s.c_in * khw;
    for (int32_t r = 0; r < no; r++)
      for (int32_t c = 0; c < ni; c++)
        for (size_t j = 0; j < khw; j++) {
          size_t e = (size_t)ki[c] * khw + j;
          if (px_prune_layout_per_element(L) && !px_prune_layout_active(L, m->mask[i], ko[r], e))
            continue;
          out[q++] = m->x[i][(size_t)ko[r] * row + e];
        }
  }
  return q;
}

static void test_nm_pack_roundtrip(void **state) {
  (void)state;
  const size_t buckets[] = {0, 4, 12, 64, 400, 4096};
  for (size_t bi = 0; bi < sizeof buckets / sizeof buckets[0]; bi++) {
    pmodel_t m;
    pmodel_init(&m, 11 + bi);
    px_pack_plan_t *plan;
    assert_int_equal(px_pack_plan_create(m.d, NP, buckets[bi], &plan), PX_OK);
    assert_int_equal(px_pack_plan_set_masks(plan, (const uint8_t *const *)m.mask), PX_OK);
    float *want = malloc(4096 * 4);
    size_t nw = expected_stream(&m, want);
    assert_int_equal(px_pack_packed_floats(plan), nw);
    px_pack_shrink(plan, (const float *const *)m.x);
    assert_memory_equal(px_pack_buffer(plan), want, nw * 4);
    for (int i = 0; i < NP; i++) memset(m.y[i], 0x7f, pmodel_numel(&m, i) * 4);
    px_pack_expand(plan, m.y);
    for (int i = 0; i < NP; i++) {
      memcpy(m.z[i], m.x[i], pmodel_numel(&m, i) * 4);
      if (m.d[i].kind == PX_PARAM_CONV) px_prune_layout_apply(&m.L[i], m.z[i], m.mask[i]);
      assert_memory_equal(m.y[i], m.z[i], pmodel_numel(&m, i) * 4);
    }
    /* bucket by bucket: the same stream and the same tensors */
    float *whole = malloc(nw * 4 + 4);
    memcpy(whole, px_pack_buffer(plan), nw * 4);
    memset(px_pack_buffer(plan), 0, nw * 4);
    px_pack_plan_freeze(plan);
    for (int b = 0; b < px_pack_num_buckets(plan); b++)
      assert_int_equal(px_pack_shrink_bucket(plan, b, (const float *const *)m.x), PX_OK);
    assert_memory_equal(px_pack_buffer(plan), whole, nw * 4);
    for (int i = 0; i < NP; i++) memset(m.y[i], 0x7f, pmodel_numel(&m, i) * 4);
    for (int b = 0; b < px_pack_num_buckets(plan); b++)
      assert_int_equal(px_pack_expand_bucket(plan, b, m.y), PX_OK);
    for (int i = 0; i < NP; i++) assert_memory_equal(m.y[i], m.z[i], pmodel_numel(&m, i) * 4);
    free(whole);
    free(want);
    px_pack_plan_destroy(plan);
    pmodel_free(&m);
  }
}

/* ---- the set of a parameter list --------------------------------------------------------- */

static void test_sparsity_set_projects_and_freezes(void **state) {
  (void)state;
  /* conv0 -> conv1 coupled, a dense bias, conv3 alone */
  const px_sparsity_param_t p[4] = {{1, {8, 3, 3, 3}, 1, 0}, {1, {8, 8, 3, 3}, -1, 0},
                                    {0, {0, 0, 0, 0}, -1, 0}, {1, {4, 8, 1, 1}, -1, 0}};
  const size_t numel[4] = {216, 576, 8, 32};
  px_prune_keep_t k = {1, 0.5, 1, 2, 4, 0};
  px_sparsity_t *sp;
  assert_int_equal(px_sparsity_create(p, NULL, 4, &k, &sp), PX_OK);
  size_t off[4], total = 0;
  for (int i = 0; i < 4; i++) off[i] = total, total += numel[i];
  float *x = malloc(total * 4), *y = malloc(total * 4);
  px_test_rng_t rng;
  px_test_rng_seed(&rng, 3);
  px_test_fill_normal(&rng, x, total);
  memcpy(y, x, total * 4);
  size_t mb = px_sparsity_mask_bytes(sp);
  uint8_t *mask = malloc(mb), *mz = malloc(mb);
  assert_int_equal(px_sparsity_project(sp, x, off, mask), PX_OK);
  assert_int_equal(px_sparsity_mask_offset(sp, 2), SIZE_MAX);
  assert_null(px_sparsity_layout(sp, 2));
  assert_memory_equal(x + off[2], y + off[2], 8 * 4); /* dense: untouched */
  for (int i = 0; i < 4; i++) {
    const px_prune_layout_t *L = px_sparsity_layout(sp, i);
    if (!L) continue;
    assert_true(max_block_count(x + off[i], NULL, L->shape, 4) <= 2);
    /* masking the input reproduces the projection */
    float *t = malloc(numel[i] * 4);
    memcpy(t, y + off[i], numel[i] * 4);
    px_prune_layout_apply(L, t, mask + px_sparsity_mask_offset(sp, i));
    assert_memory_equal(t, x + off[i], numel[i] * 4);
    free(t);
  }
  /* coupling: conv1 keeps 4 of 8 channels, and conv0 the same 4 filters */
  const px_prune_layout_t *L0 = px_sparsity_layout(sp, 0), *L1 = px_sparsity_layout(sp, 1);
  const uint8_t *f0 = px_prune_part(L0, mask + px_sparsity_mask_offset(sp, 0), PX_PRUNE_PART_FILTER);
  const uint8_t *c1 = px_prune_part(L1, mask + px_sparsity_mask_offset(sp, 1), PX_PRUNE_PART_CHANNEL);
  int kept = 0;
  for (int c = 0; c < 8; c++) kept += c1[c], assert_int_equal(f0[c], c1[c]);
  assert_int_equal(kept, 4);
  /* the freeze takes z's N:M part into the union, the other parts stay */
  memcpy(mz, mask, mb);
  memset(mask, 1, mb);
  assert_int_equal(px_sparsity_freeze_masks(sp, mask, mz), 1);
  for (int i = 0; i < 4; i++) {
    const px_prune_layout_t *L = px_sparsity_layout(sp, i);
    if (!L) continue;
    const uint8_t *u = mask + px_sparsity_mask_offset(sp, i);
    assert_memory_equal(px_prune_part(L, u, PX_PRUNE_PART_NM),
                        px_prune_part(L, mz + px_sparsity_mask_offset(sp, i), PX_PRUNE_PART_NM),
                        L->len[PX_PRUNE_PART_NM]);
    for (size_t j = 0; j < L->off[PX_PRUNE_PART_NM]; j++) assert_int_equal(u[j], 1);
  }
  /* a bad coupling */
  px_sparsity_t *bad;
  px_sparsity_param_t q[2] = {{1, {8, 3, 3, 3}, 1, 0}, {1, {8, 5, 3, 3}, -1, 0}};
  assert_int_equal(px_sparsity_create(q, NULL, 2, &k, &bad), PX_ERR_INVALID);
  /* without N:M nothing is frozen specially */
  px_prune_keep_t plain = {1, 0.5, 1, 0, 0, 0};
  px_sparsity_t *sp2;
  assert_int_equal(px_sparsity_create(p, NULL, 4, &plain, &sp2), PX_OK);
  assert_int_equal(px_sparsity_freeze_masks(sp2, mask, mz), 0);
  /* ... unless the rule spans the set (a MAC budget): all of z's masks */
  px_sparsity_set_exact_freeze(sp2, 1);
  assert_int_equal(px_sparsity_freeze_masks(sp2, mask, mz), 1);
  assert_memory_equal(mask, mz, px_sparsity_mask_bytes(sp2));
  assert_int_equal(px_sparsity_freeze_masks(sp2, mask, mz), 0); /* nothing left to change */
  px_sparsity_destroy(sp2);
  free(x), free(y), free(mask), free(mz);
  px_sparsity_destroy(sp);
}

/* ---- the job spec ------------------------------------------------------------------------ */

static px_status_t parse(const char *yaml, Prunex__V1__JobSpec **spec) {
  return px_jobspec_parse_string(yaml, strlen(yaml), "nm.yaml", spec);
}

static void test_nm_jobspec(void **state) {
  (void)state;
  Prunex__V1__JobSpec *spec = NULL;
  assert_int_equal(parse("prune:\n  nm_n: 2\n  nm_m: 4\n", &spec), PX_OK);
  assert_int_equal(spec->prune->nm_n, 2);
  assert_int_equal(spec->prune->nm_m, 4);
  px_jobspec_free(spec);
  assert_int_equal(parse("prune:\n  channel_keep: 0.5\n", &spec), PX_OK);
  assert_int_equal(spec->prune->nm_n, 0);
  assert_int_equal(spec->prune->nm_m, 0);
  px_jobspec_free(spec);
  const char *bad[] = {"prune:\n  nm_n: 2\n", "prune:\n  nm_n: 4\n  nm_m: 2\n",
                       "prune:\n  nm_n: 2\n  nm_m: 65\n", "prune:\n  nm_n: -1\n  nm_m: 4\n"};
  const char *field[] = {"prune.nm_m", "prune.nm_n", "prune.nm_m", "prune.nm_n"};
  for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
    spec = NULL;
    assert_int_equal(parse(bad[i], &spec), PX_ERR_INVALID);
    assert_null(spec);
    assert_non_null(strstr(px_last_error(), field[i])); /* the field at fault is named */
  }
}

/* prune.uncoupled_channel_keep: conv0 -> conv1 coupled at channel_keep 0.5,
 * conv0 (reading the input) and conv2 (reading conv1's map beside others)
 * uncoupled. Their input channels keep their own fraction, the pair still
 * channel_keep's; 0 is channel_keep's; a fraction out of [0, 1] is refused
 * naming the field. */
static int kept_channels(const px_sparsity_t *sp, const uint8_t *mask, int i) {
  const px_prune_layout_t *L = px_sparsity_layout(sp, i);
  const uint8_t *c = px_prune_part(L, mask + px_sparsity_mask_offset(sp, i), PX_PRUNE_PART_CHANNEL);
  int n = 0;
  for (size_t j = 0; j < L->len[PX_PRUNE_PART_CHANNEL]; j++) n += c[j];
  return n;
}

static void test_uncoupled_channels_keep_their_own_fraction(void **state) {
  (void)state;
  const px_sparsity_param_t p[3] = {
      {1, {8, 6, 3, 3}, 1, 0}, {1, {8, 8, 3, 3}, -1, 0}, {1, {4, 8, 1, 1}, -1, 0}};
  const size_t numel[3] = {432, 576, 32};
  size_t off[3] = {0, 432, 1008}, total = 1040;
  const double uk[4] = {1.0, 0.25, 0.0, 0.5};
  const int want0[4] = {6, 2, 3, 3}, want2[4] = {8, 2, 4, 4};
  for (int t = 0; t < 4; t++) {
    px_prune_keep_t k = {1, 0.5, 1, 0, 0, uk[t]};
    px_sparsity_t *sp;
    assert_int_equal(px_sparsity_create(p, NULL, 3, &k, &sp), PX_OK);
    float *x = malloc(total * 4);
    uint8_t *mask = malloc(px_sparsity_mask_bytes(sp));
    px_test_rng_t rng;
    px_test_rng_seed(&rng, 40 + (uint64_t)t);
    px_test_fill_normal(&rng, x, total);
    assert_int_equal(px_sparsity_project(sp, x, off, mask), PX_OK);
    assert_int_equal(kept_channels(sp, mask, 0), want0[t]);
    assert_int_equal(kept_channels(sp, mask, 1), 4); /* the coupled pair: channel_keep */
    assert_int_equal(kept_channels(sp, mask, 2), want2[t]);
    size_t zeros = 0; /* conv0's 6 - want0 channels are zero in all 8 filters... */
    for (size_t j = 0; j < numel[0]; j++) zeros += x[j] == 0.0f;
    /* ...and so are its 4 filters pruned with conv1's channels */
    assert_int_equal(zeros, (size_t)(4 * 54 + 4 * (6 - want0[t]) * 9));
    free(x), free(mask);
    px_sparsity_destroy(sp);
  }
  px_prune_keep_t bad = {1, 0.5, 1, 0, 0, 1.5};
  px_sparsity_t *sp = NULL;
  assert_int_equal(px_sparsity_create(p, NULL, 3, &bad, &sp), PX_ERR_INVALID);
  assert_null(sp);
  assert_non_null(strstr(px_last_error(), "uncoupled_channel_keep"));
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_nm_projection_matches_reference),
      cmocka_unit_test(test_nm_keeps_largest_magnitudes),
      cmocka_unit_test(test_layout_parts),
      cmocka_unit_test(test_layout_project_apply_density),
      cmocka_unit_test(test_nm_pack_roundtrip),
      cmocka_unit_test(test_sparsity_set_projects_and_freezes),
      cmocka_unit_test(test_uncoupled_channels_keep_their_own_fraction),
      cmocka_unit_test(test_nm_jobspec),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
