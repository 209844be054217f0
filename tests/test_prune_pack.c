/* Shrink/expand: the packed buffer holds exactly W[K_out][K_in][kh][kw] of
 * every conv parameter and every dense parameter whole, in plan order;
 * expand(shrink(x)) is x on the active elements and zero elsewhere; buckets
 * split the stream at any point (a layer larger than a bucket, hundreds of
 * tiny layers, everything pruned, nothing pruned) and per-bucket work equals
 * whole-model work; a frozen plan allocates nothing. */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "prunex/prune.h"
#include "prunex/prune_internal.h"
#include "px_test_util.h"

/* A model for the tests: parameters, their tensors and masks. */
typedef struct {
  int n;
  px_param_desc_t *desc;
  float **x;      /* source tensors */
  float **y;      /* expand targets */
  uint8_t **mask; /* conv only */
} model_t;

static size_t numel_of(const px_param_desc_t *d) {
  return d->kind == PX_PARAM_CONV ? px_conv_numel(d->shape) : d->numel;
}

static void model_init(model_t *m, const px_param_desc_t *desc, int n, px_prune_keep_t keep,
                       uint64_t seed) {
  px_test_rng_t rng;
  px_test_rng_seed(&rng, seed);
  m->n = n;
  m->desc = malloc(n * sizeof *m->desc);
  memcpy(m->desc, desc, n * sizeof *desc);
  m->x = calloc(n, sizeof *m->x);
  m->y = calloc(n, sizeof *m->y);
  m->mask = calloc(n, sizeof *m->mask);
  for (int i = 0; i < n; i++) {
    size_t ne = numel_of(&desc[i]);
    m->x[i] = malloc(ne * sizeof(float));
    m->y[i] = malloc(ne * sizeof(float));
    px_test_fill_normal(&rng, m->x[i], ne);
    if (desc[i].kind == PX_PARAM_CONV) {
      m->mask[i] = malloc(px_prune_mask_size(desc[i].shape));
      /* project a copy to get a realistic mask; x itself stays dense so
       * that masked-but-packed positions carry nonzero values */
      float *tmp = malloc(ne * sizeof(float));
      memcpy(tmp, m->x[i], ne * sizeof(float));
      assert_int_equal(px_prune_project(tmp, desc[i].shape, &keep, m->mask[i], NULL, 0), PX_OK);
      free(tmp);
    }
  }
}

static void model_free(model_t *m) {
  for (int i = 0; i < m->n; i++) {
    free(m->x[i]);
    free(m->y[i]);
    free(m->mask[i]);
  }
  free(m->x);
  free(m->y);
  free(m->mask);
  free(m->desc);
}

/* Naive reference packing, straight from the definition. Returns floats. */
static size_t ref_pack(const model_t *m, float *out) {
  size_t k = 0;
  for (int i = 0; i < m->n; i++) {
    const px_param_desc_t *d = &m->desc[i];
    if (d->kind == PX_PARAM_DENSE) {
      if (out) memcpy(out + k, m->x[i], d->numel * sizeof(float));
      k += d->numel;
      continue;
    }
    px_conv_shape_t s = d->shape;
    int32_t *ko = malloc(s.c_out * sizeof *ko), *ki = malloc(s.c_in * sizeof *ki), no, ni;
    px_prune_index_sets(m->mask[i], s, ko, &no, ki, &ni);
    size_t khw = (size_t)s.kh * s.kw;
    for (int a = 0; a < no; a++)
      for (int b = 0; b < ni; b++)
        for (size_t j = 0; j < khw; j++, k++)
          if (out) out[k] = m->x[i][((size_t)ko[a] * s.c_in + ki[b]) * khw + j];
    free(ko);
    free(ki);
  }
  return k;
}

/* Checks y == x on active elements and 0 elsewhere, for every parameter. */
static void check_expanded(const model_t *m) {
  for (int i = 0; i < m->n; i++) {
    const px_param_desc_t *d = &m->desc[i];
    if (d->kind == PX_PARAM_DENSE) {
      assert_memory_equal(m->y[i], m->x[i], d->numel * sizeof(float));
      continue;
    }
    px_conv_shape_t s = d->shape;
    size_t ne = px_conv_numel(s);
    float *want = malloc(ne * sizeof(float));
    memcpy(want, m->x[i], ne * sizeof(float));
    px_prune_apply_mask(want, s, m->mask[i]);
    /* apply_mask keeps elements whose filter/channel bits are set even when
     * the channel has no active position at all; those are outside K_in and
     * must read zero too */
    int32_t no, ni;
    px_prune_index_sets(m->mask[i], s, NULL, &no, NULL, &ni);
    if (no == 0) memset(want, 0, ne * sizeof(float));
    assert_memory_equal(m->y[i], want, ne * sizeof(float));
    free(want);
  }
}

static void fill_nan(model_t *m) {
  for (int i = 0; i < m->n; i++)
    for (size_t j = 0; j < numel_of(&m->desc[i]); j++) m->y[i][j] = NAN;
}

/* The full battery on one model and bucket size. */
static void check_plan(const px_param_desc_t *desc, int n, px_prune_keep_t keep,
                       size_t bucket_bytes, uint64_t seed) {
  model_t m;
  model_init(&m, desc, n, keep, seed);
  px_pack_plan_t *plan = NULL;
  assert_int_equal(px_pack_plan_create(m.desc, n, bucket_bytes, &plan), PX_OK);
  assert_int_equal(px_pack_plan_set_masks(plan, (const uint8_t *const *)m.mask), PX_OK);

  size_t want_floats = ref_pack(&m, NULL);
  assert_int_equal(px_pack_packed_floats(plan), want_floats);
  assert_int_equal(px_pack_packed_bytes(plan), want_floats * sizeof(float));
  size_t dense = 0;
  for (int i = 0; i < n; i++) dense += numel_of(&desc[i]);
  assert_int_equal(px_pack_dense_bytes(plan), dense * sizeof(float));

  size_t bf = bucket_bytes / sizeof(float);
  int nb = px_pack_num_buckets(plan);
  assert_int_equal(nb, (int)((want_floats + bf - 1) / bf));
  size_t total = 0;
  for (int b = 0; b < nb; b++) {
    size_t nf;
    float *p = px_pack_bucket(plan, b, &nf);
    assert_non_null(p);
    assert_true(nf > 0 && nf <= bf);
    assert_ptr_equal(p, px_pack_buffer(plan) + total); /* contiguous */
    total += nf;
  }
  assert_int_equal(total, want_floats);

  /* whole-model shrink equals the reference packing */
  float *ref = malloc((want_floats + 1) * sizeof(float));
  ref_pack(&m, ref);
  px_pack_shrink(plan, (const float *const *)m.x);
  if (want_floats) assert_memory_equal(px_pack_buffer(plan), ref, want_floats * sizeof(float));

  /* expand writes every element: x on active ones, zero elsewhere */
  fill_nan(&m);
  px_pack_expand(plan, m.y);
  check_expanded(&m);

  /* per bucket: shrink into a cleared buffer, expand into NaN-filled tensors */
  if (want_floats) memset(px_pack_buffer(plan), 0xff, want_floats * sizeof(float));
  for (int b = nb - 1; b >= 0; b--) /* order must not matter */
    assert_int_equal(px_pack_shrink_bucket(plan, b, (const float *const *)m.x), PX_OK);
  if (want_floats) assert_memory_equal(px_pack_buffer(plan), ref, want_floats * sizeof(float));
  if (nb > 0) {
    fill_nan(&m);
    for (int b = 0; b < nb; b++) assert_int_equal(px_pack_expand_bucket(plan, b, m.y), PX_OK);
    check_expanded(&m);
  }
  /* each bucket touches only its own part of the buffer, and expanding the
   * buckets one at a time writes every element of the model exactly once */
  size_t written = 0;
  for (int b = 0; b < nb; b++) {
    memset(px_pack_buffer(plan), 0xff, want_floats * sizeof(float));
    assert_int_equal(px_pack_shrink_bucket(plan, b, (const float *const *)m.x), PX_OK);
    size_t nf, lo = (size_t)b * bf;
    px_pack_bucket(plan, b, &nf);
    for (size_t q = 0; q < want_floats; q++) {
      uint32_t bits;
      memcpy(&bits, px_pack_buffer(plan) + q, 4);
      if (q >= lo && q < lo + nf) assert_true(px_pack_buffer(plan)[q] == ref[q]);
      else assert_true(bits == 0xffffffffu);
    }
    px_pack_shrink(plan, (const float *const *)m.x);
    fill_nan(&m);
    assert_int_equal(px_pack_expand_bucket(plan, b, m.y), PX_OK);
    for (int i = 0; i < n; i++)
      for (size_t j = 0; j < numel_of(&desc[i]); j++) written += !isnan(m.y[i][j]);
  }
  if (nb > 0) assert_int_equal(written, dense);
  assert_int_equal(px_pack_shrink_bucket(plan, nb, (const float *const *)m.x), PX_ERR_INVALID);
  assert_int_equal(px_pack_expand_bucket(plan, -1, m.y), PX_ERR_INVALID);

  free(ref);
  px_pack_plan_destroy(plan);
  model_free(&m);
}

/* A ResNet-like parameter list: conv + BN scale/shift, ending in an FC. */
static int resnet_like(px_param_desc_t *d, int max, int width) {
  int n = 0, cin = 3;
  int widths[] = {width, width, 2 * width, 2 * width, 4 * width};
  for (int l = 0; l < 5 && n + 3 <= max; l++) {
    d[n++] = (px_param_desc_t){"conv", PX_PARAM_CONV, {widths[l], cin, 3, 3}, 0, NULL};
    d[n++] = (px_param_desc_t){"bn.weight", PX_PARAM_DENSE, {0, 0, 0, 0}, (size_t)widths[l], NULL};
    d[n++] = (px_param_desc_t){"bn.bias", PX_PARAM_DENSE, {0, 0, 0, 0}, (size_t)widths[l], NULL};
    cin = widths[l];
  }
  d[n++] = (px_param_desc_t){"fc.weight", PX_PARAM_DENSE, {0, 0, 0, 0}, (size_t)cin * 10, NULL};
  return n;
}

static void test_roundtrip_on_resnet_like_model(void **state) {
  (void)state;
  px_param_desc_t d[32];
  int n = resnet_like(d, 31, 16);
  check_plan(d, n, (px_prune_keep_t){1, 0.5, 1, 0, 0, 0}, PX_PACK_DEFAULT_BUCKET_BYTES, 1);
  check_plan(d, n, (px_prune_keep_t){0.75, 0.5, 1, 0, 0, 0}, 4096, 2);
  check_plan(d, n, (px_prune_keep_t){0.5, 0.75, 0.7, 0, 0, 0}, 1000, 3); /* shape pruning inside blocks */
}

static void test_layer_larger_than_a_bucket(void **state) {
  (void)state;
  px_param_desc_t d[2] = {
      {"big", PX_PARAM_CONV, {64, 32, 3, 3}, 0, NULL},
      {"bias", PX_PARAM_DENSE, {0, 0, 0, 0}, 7, NULL},
  };
  /* buckets of 1, 3 and 37 floats: every boundary lands mid-row */
  check_plan(d, 2, (px_prune_keep_t){0.5, 0.5, 1, 0, 0, 0}, 4, 4);
  check_plan(d, 2, (px_prune_keep_t){0.5, 0.5, 0.5, 0, 0, 0}, 12, 5);
  check_plan(d, 2, (px_prune_keep_t){1, 0.3, 1, 0, 0, 0}, 148, 6);
}

static void test_hundreds_of_tiny_layers(void **state) {
  (void)state;
  enum { N = 400 };
  px_param_desc_t d[N];
  for (int i = 0; i < N; i++)
    d[i] = i % 3 == 2 ? (px_param_desc_t){"b", PX_PARAM_DENSE, {0, 0, 0, 0}, 1 + (size_t)i % 4, NULL}
                      : (px_param_desc_t){"c", PX_PARAM_CONV, {1 + i % 3, 1 + i % 4, 1, 1 + i % 2}, 0, NULL};
  check_plan(d, N, (px_prune_keep_t){0.5, 0.5, 1, 0, 0, 0}, 64, 7);
  check_plan(d, N, (px_prune_keep_t){1, 1, 1, 0, 0, 0}, 4, 8);
  check_plan(d, N, (px_prune_keep_t){0.6, 0.4, 0.5, 0, 0, 0}, PX_PACK_DEFAULT_BUCKET_BYTES, 9);
}

static void test_everything_pruned(void **state) {
  (void)state;
  px_param_desc_t d[3] = {
      {"a", PX_PARAM_CONV, {8, 4, 3, 3}, 0, NULL},
      {"b", PX_PARAM_CONV, {4, 8, 1, 1}, 0, NULL},
      {"c", PX_PARAM_CONV, {2, 4, 3, 3}, 0, NULL},
  };
  check_plan(d, 3, (px_prune_keep_t){0, 1, 1, 0, 0, 0}, 64, 10); /* no buckets at all */
  check_plan(d, 3, (px_prune_keep_t){1, 0, 1, 0, 0, 0}, 64, 11);
  check_plan(d, 3, (px_prune_keep_t){1, 1, 0, 0, 0, 0}, 64, 12);

  /* with nothing packed there are no buckets, and expand zeroes everything */
  model_t m;
  model_init(&m, d, 3, (px_prune_keep_t){0, 0, 0, 0, 0, 0}, 13);
  px_pack_plan_t *plan;
  assert_int_equal(px_pack_plan_create(m.desc, 3, 64, &plan), PX_OK);
  assert_int_equal(px_pack_plan_set_masks(plan, (const uint8_t *const *)m.mask), PX_OK);
  assert_int_equal(px_pack_num_buckets(plan), 0);
  assert_int_equal(px_pack_packed_bytes(plan), 0);
  fill_nan(&m);
  px_pack_expand(plan, m.y);
  for (int i = 0; i < 3; i++)
    for (size_t j = 0; j < numel_of(&d[i]); j++) assert_true(m.y[i][j] == 0.0f);
  px_pack_plan_destroy(plan);
  model_free(&m);
}

static void test_nothing_pruned_packs_everything(void **state) {
  (void)state;
  px_param_desc_t d[32];
  int n = resnet_like(d, 31, 8);
  check_plan(d, n, (px_prune_keep_t){1, 1, 1, 0, 0, 0}, 256, 14);
  /* a fresh plan (no masks set) is the dense layout */
  px_pack_plan_t *plan;
  assert_int_equal(px_pack_plan_create(d, n, 0, &plan), PX_OK);
  assert_int_equal(px_pack_packed_bytes(plan), px_pack_dense_bytes(plan));
  assert_int_equal(px_pack_bucket_bytes(plan), PX_PACK_DEFAULT_BUCKET_BYTES);
  px_pack_plan_destroy(plan);
}

static void test_frozen_plan_allocates_nothing(void **state) {
  (void)state;
  px_param_desc_t d[32];
  int n = resnet_like(d, 31, 16);
  model_t m;
  model_init(&m, d, n, (px_prune_keep_t){1, 0.5, 1, 0, 0, 0}, 15);
  px_pack_plan_t *plan;
  assert_int_equal(px_pack_plan_create(m.desc, n, 2048, &plan), PX_OK);
  assert_int_equal(px_pack_plan_set_masks(plan, (const uint8_t *const *)m.mask), PX_OK);
  px_pack_plan_freeze(plan);
  assert_true(px_pack_plan_is_frozen(plan));
  size_t packed = px_pack_packed_bytes(plan);

  px_mem_stats_t before, after;
  px_mem_stats(&before);
  for (int it = 0; it < 50; it++) {
    px_pack_shrink(plan, (const float *const *)m.x);
    px_pack_expand(plan, m.y);
    for (int b = 0; b < px_pack_num_buckets(plan); b++) {
      assert_int_equal(px_pack_shrink_bucket(plan, b, (const float *const *)m.x), PX_OK);
      assert_int_equal(px_pack_expand_bucket(plan, b, m.y), PX_OK);
    }
  }
  px_mem_stats(&after);
  assert_int_equal(after.allocs, before.allocs);
  assert_int_equal(after.live_bytes, before.live_bytes);
  check_expanded(&m);

  /* the layout can no longer change */
  for (int i = 0; i < n; i++)
    if (m.mask[i]) memset(m.mask[i], 1, px_prune_mask_size(d[i].shape));
  assert_int_equal(px_pack_plan_set_masks(plan, (const uint8_t *const *)m.mask), PX_ERR_STATE);
  assert_int_equal(px_pack_packed_bytes(plan), packed);
  px_pack_plan_destroy(plan);
  model_free(&m);
}

static void test_bad_plans_are_rejected(void **state) {
  (void)state;
  px_pack_plan_t *plan = (px_pack_plan_t *)0x1;
  px_param_desc_t d[2] = {
      {"layer1.conv", PX_PARAM_CONV, {8, 0, 3, 3}, 0, NULL},
      {"fc", PX_PARAM_DENSE, {0, 0, 0, 0}, 4, NULL},
  };
  assert_int_equal(px_pack_plan_create(d, 2, 0, &plan), PX_ERR_INVALID);
  assert_null(plan);
  assert_non_null(strstr(px_last_error(), "layer1.conv"));
  d[0].shape.c_in = 2;
  assert_int_equal(px_pack_plan_create(d, 2, 6, &plan), PX_ERR_INVALID);
  assert_non_null(strstr(px_last_error(), "multiple of 4"));
  d[1].numel = 0;
  assert_int_equal(px_pack_plan_create(d, 2, 0, &plan), PX_ERR_INVALID);
  d[1].numel = 4;
  assert_int_equal(px_pack_plan_create(d, 2, 0, &plan), PX_OK);
  const uint8_t *masks[2] = {NULL, NULL};
  assert_int_equal(px_pack_plan_set_masks(plan, masks), PX_ERR_INVALID);
  assert_non_null(strstr(px_last_error(), "layer1.conv"));
  px_pack_plan_destroy(plan);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_roundtrip_on_resnet_like_model),
      cmocka_unit_test(test_layer_larger_than_a_bucket),
      cmocka_unit_test(test_hundreds_of_tiny_layers),
      cmocka_unit_test(test_everything_pruned),
      cmocka_unit_test(test_nothing_pruned_packs_everything),
      cmocka_unit_test(test_frozen_plan_allocates_nothing),
      cmocka_unit_test(test_bad_plans_are_rejected),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
