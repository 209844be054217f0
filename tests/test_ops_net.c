/* A small residual network built from the ops the way the training engine
 * will build ResNets: op objects created once from chained specs (so the
 * activations stay in the backend's blocked layout from layer to layer),
 * tensors in one arena per family, a full forward and backward per step.
 * Proves that the chained ops compute the same loss and parameter gradients
 * as the reference ops chained on plain arrays, and that a training step
 * allocates nothing once the first has run.
 *
 *   x -> conv1 -> bn1+relu = a1 -> conv2 -> bn2 -> (+ a1, relu) = a3
 *     -> maxpool 2x2 -> global avgpool -> fc -> softmax cross-entropy */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "nn/cpu/px_ref.h"
#include "prunex/ops.h"
#include "prunex/ops_internal.h"
#include "prunex/tensor_internal.h"
#include "px_test_util.h"
#include "ops_test_util.h"

#define assert_ok(call)                                                                   \
  do {                                                                                    \
    px_status_t st_ = (call);                                                             \
    if (st_ != PX_OK) fail_msg("%s: %s (%s)", #call, px_status_name(st_), px_last_error()); \
  } while (0)

enum { N = 8, C_IN = 3, H = 8, W = 8, C = 16, K = 10 };

typedef struct {
  px_tensor_t w1, w2, s1, b1, s2, b2, fw, fb; /* conv [C,C_IN,3,3], [C,C,3,3]; bn [C]; fc [K,C], [K] */
} params_t;

typedef struct {
  px_tensor_t rm1, rv1, rm2, rv2; /* running statistics [C] */
} buffers_t;

typedef struct {
  px_tensor_t x;        /* [N, C_IN, H, W] plain input */
  px_tensor_t c1, a1;   /* [N, C, H, W] blocked: conv1 out, bn1+relu out */
  px_tensor_t m1, v1, ws1;
  px_tensor_t c2, z2;   /* conv2 out, bn2 out */
  px_tensor_t m2, v2;
  px_tensor_t a3;       /* relu(z2 + a1) */
  px_tensor_t p, pws;   /* maxpool out [N, C, H/2, W/2], its workspace */
  px_tensor_t g;        /* global pool out [N, C, 1, 1] */
  px_tensor_t logits;   /* [N, K] plain */
  px_tensor_t labels;   /* [N] i32 */
  /* gradients of activations share their activation's spec */
  px_tensor_t dlogits, dg, dp, da3, dz2, dc2, da1, dc1;
} acts_t;

typedef struct {
  px_ops_t *ops;
  px_conv2d_t *conv1, *conv2;
  px_batchnorm_t *bn1, *bn2;
  px_add_t *add, *acc;
  px_pool2d_t *pool, *gap;
  px_fc_t *fc;
  params_t par, grad;
  buffers_t buf;
  acts_t act;
  px_arena_t par_arena, grad_arena, buf_arena, act_arena;
} net_t;

static void spec_of(px_tensor_t *dst, const px_tensor_t *src) {
  *dst = *src;
  dst->data = NULL;
  dst->flags = 0;
}

static void net_create(net_t *n) {
  memset(n, 0, sizeof *n);
  assert_ok(px_ops_create(px_device_cpu(), 2, &n->ops));
  px_ops_t *ops = n->ops;
  acts_t *a = &n->act;
  assert_ok(px_tensor_init4(&a->x, px_device_cpu(), N, C_IN, H, W));

  px_conv2d_params_t cp = {.c_out = C, .kh = 3, .kw = 3, .stride_h = 1, .stride_w = 1,
                           .pad_h = 1, .pad_w = 1};
  px_batchnorm_params_t bp = {.eps = 1e-5f, .momentum = 0.1f, .fuse_relu = 1};
  assert_ok(px_conv2d_create(ops, &a->x, &cp, &n->conv1));
  px_conv2d_y_spec(n->conv1, &a->c1);
  assert_ok(px_batchnorm_create(ops, &a->c1, &bp, &n->bn1));
  px_batchnorm_y_spec(n->bn1, &a->a1);
  px_batchnorm_ws_spec(n->bn1, &a->ws1);
  px_batchnorm_c_spec(n->bn1, &a->m1);
  spec_of(&a->v1, &a->m1);
  assert_ok(px_conv2d_create(ops, &a->a1, &cp, &n->conv2));
  px_conv2d_y_spec(n->conv2, &a->c2);
  bp.fuse_relu = 0;
  assert_ok(px_batchnorm_create(ops, &a->c2, &bp, &n->bn2));
  px_batchnorm_y_spec(n->bn2, &a->z2);
  spec_of(&a->m2, &a->m1);
  spec_of(&a->v2, &a->m1);
  assert_int_equal(px_tensor_same_spec(&a->z2, &a->a1), 1); /* the residual needs one layout */
  assert_ok(px_add_create(ops, &a->z2, 1, &n->add));
  assert_ok(px_add_create(ops, &a->a1, 0, &n->acc));
  px_add_y_spec(n->add, &a->a3);
  px_pool2d_params_t pp = {PX_POOL_MAX, 2, 2, 2, 2, 0, 0, 0, 0, 0, 0, 0};
  assert_ok(px_pool2d_create(ops, &a->a3, &pp, &n->pool));
  px_pool2d_y_spec(n->pool, &a->p);
  px_pool2d_ws_spec(n->pool, &a->pws);
  assert_ok(px_global_avgpool_create(ops, &a->p, &n->gap));
  px_pool2d_y_spec(n->gap, &a->g);
  px_fc_params_t fp = {K, 1};
  assert_ok(px_fc_create(ops, &a->g, &fp, &n->fc));
  px_fc_y_spec(n->fc, &a->logits);
  const int64_t ld[1] = {N};
  assert_ok(px_tensor_init(&a->labels, px_device_cpu(), PX_DTYPE_I32, 1, ld));
  spec_of(&a->dlogits, &a->logits);
  spec_of(&a->dg, &a->g);
  spec_of(&a->dp, &a->p);
  spec_of(&a->da3, &a->a3);
  spec_of(&a->dz2, &a->z2);
  spec_of(&a->dc2, &a->c2);
  spec_of(&a->da1, &a->a1);
  spec_of(&a->dc1, &a->c1);
  print_message("activation layouts: c1 %s, a1 %s, p %s, g %s\n", px_layout_name(a->c1.layout),
                px_layout_name(a->a1.layout), px_layout_name(a->p.layout),
                px_layout_name(a->g.layout));

  /* parameters and their gradients: plain, one arena each, packed flat */
  params_t *ps[2] = {&n->par, &n->grad};
  px_arena_t *pa[2] = {&n->par_arena, &n->grad_arena};
  for (int i = 0; i < 2; i++) {
    px_conv2d_w_spec(n->conv1, &ps[i]->w1);
    px_conv2d_w_spec(n->conv2, &ps[i]->w2);
    px_batchnorm_c_spec(n->bn1, &ps[i]->s1);
    spec_of(&ps[i]->b1, &ps[i]->s1);
    spec_of(&ps[i]->s2, &ps[i]->s1);
    spec_of(&ps[i]->b2, &ps[i]->s1);
    px_fc_w_spec(n->fc, &ps[i]->fw);
    px_fc_b_spec(n->fc, &ps[i]->fb);
    px_tensor_t *fam[] = {&ps[i]->w1, &ps[i]->w2, &ps[i]->s1, &ps[i]->b1,
                          &ps[i]->s2, &ps[i]->b2, &ps[i]->fw, &ps[i]->fb};
    assert_ok(px_arena_alloc(pa[i], px_device_cpu(), fam, 8, 4, i ? "grads" : "params"));
  }
  px_batchnorm_c_spec(n->bn1, &n->buf.rm1);
  spec_of(&n->buf.rv1, &n->buf.rm1);
  spec_of(&n->buf.rm2, &n->buf.rm1);
  spec_of(&n->buf.rv2, &n->buf.rm1);
  px_tensor_t *bf[] = {&n->buf.rm1, &n->buf.rv1, &n->buf.rm2, &n->buf.rv2};
  assert_ok(px_arena_alloc(&n->buf_arena, px_device_cpu(), bf, 4, 4, "buffers"));
  px_tensor_t *af[] = {&a->x,  &a->c1, &a->a1, &a->m1, &a->v1, &a->ws1, &a->c2,
                       &a->z2, &a->m2, &a->v2, &a->a3, &a->p,  &a->pws, &a->g,
                       &a->logits, &a->labels, &a->dlogits, &a->dg, &a->dp, &a->da3,
                       &a->dz2, &a->dc2, &a->da1, &a->dc1};
  assert_ok(px_arena_alloc(&n->act_arena, px_device_cpu(), af, sizeof af / sizeof *af, 64,
                           "activations"));
}

static void net_destroy(net_t *n) {
  px_conv2d_destroy(n->conv1);
  px_conv2d_destroy(n->conv2);
  px_batchnorm_destroy(n->bn1);
  px_batchnorm_destroy(n->bn2);
  px_add_destroy(n->add);
  px_add_destroy(n->acc);
  px_pool2d_destroy(n->pool);
  px_pool2d_destroy(n->gap);
  px_fc_destroy(n->fc);
  px_arena_free(&n->par_arena);
  px_arena_free(&n->grad_arena);
  px_arena_free(&n->buf_arena);
  px_arena_free(&n->act_arena);
  px_ops_destroy(n->ops);
}

/* One training step: forward, loss, backward into n->grad. */
static void net_step(net_t *n, float *loss, int64_t *correct) {
  params_t *p = &n->par, *g = &n->grad;
  buffers_t *b = &n->buf;
  acts_t *a = &n->act;
  /* ---- forward ---- */
  assert_ok(px_conv2d_forward(n->conv1, &a->c1, &a->x, &p->w1, NULL));
  assert_ok(px_batchnorm_forward_train(n->bn1, &a->a1, &a->m1, &a->v1, &a->ws1, &a->c1, &p->s1,
                                       &p->b1, &b->rm1, &b->rv1));
  assert_ok(px_conv2d_forward(n->conv2, &a->c2, &a->a1, &p->w2, NULL));
  assert_ok(px_batchnorm_forward_train(n->bn2, &a->z2, &a->m2, &a->v2, NULL, &a->c2, &p->s2,
                                       &p->b2, &b->rm2, &b->rv2));
  assert_ok(px_add_forward(n->add, &a->a3, &a->z2, &a->a1));
  assert_ok(px_pool2d_forward(n->pool, &a->p, &a->pws, &a->a3));
  assert_ok(px_pool2d_forward(n->gap, &a->g, NULL, &a->p));
  assert_ok(px_fc_forward(n->fc, &a->logits, &a->g, &p->fw, &p->fb));
  assert_ok(px_softmax_ce(n->ops, &a->dlogits, loss, correct, &a->logits, &a->labels));
  /* ---- backward ---- */
  assert_ok(px_fc_backward_weights(n->fc, &g->fw, &g->fb, &a->g, &a->dlogits));
  assert_ok(px_fc_backward_data(n->fc, &a->dg, &a->dlogits, &p->fw));
  assert_ok(px_pool2d_backward(n->gap, &a->dp, &a->dg, NULL));
  assert_ok(px_pool2d_backward(n->pool, &a->da3, &a->dp, &a->pws));
  assert_ok(px_add_backward(n->add, &a->da3, &a->da3, &a->a3)); /* routed to z2 and a1 */
  assert_ok(px_batchnorm_backward(n->bn2, &a->dz2, &g->s2, &g->b2, &a->da3, &a->c2, &p->s2, &p->b2,
                                  &a->m2, &a->v2, NULL));
  assert_ok(px_conv2d_backward_weights(n->conv2, &g->w2, NULL, &a->a1, &a->dz2));
  assert_ok(px_conv2d_backward_data(n->conv2, &a->da1, &a->dz2, &p->w2));
  assert_ok(px_add_forward(n->acc, &a->da1, &a->da1, &a->da3)); /* the shortcut's share */
  assert_ok(px_batchnorm_backward(n->bn1, &a->dc1, &g->s1, &g->b1, &a->da1, &a->c1, &p->s1, &p->b1,
                                  &a->m1, &a->v1, &a->ws1));
  assert_ok(px_conv2d_backward_weights(n->conv1, &g->w1, NULL, &a->x, &a->dc1));
}

/* Host copies of the inputs and parameters, filled at random. */
typedef struct {
  float x[N * C_IN * H * W];
  int32_t labels[N];
  float w1[C * C_IN * 9], w2[C * C * 9], s1[C], b1[C], s2[C], b2[C], fw[K * C], fb[K];
} host_t;

static void net_fill(net_t *n, host_t *h, uint64_t seed) {
  px_test_rng_t rng;
  px_test_rng_seed(&rng, seed);
  px_test_fill_normal(&rng, h->x, sizeof h->x / 4);
  for (int i = 0; i < N; i++) h->labels[i] = (int32_t)(px_test_rng_u64(&rng) % K);
  px_test_fill_normal(&rng, h->w1, sizeof h->w1 / 4);
  px_test_fill_normal(&rng, h->w2, sizeof h->w2 / 4);
  for (int i = 0; i < C * C * 9; i++) h->w2[i] *= 0.2f;
  for (int i = 0; i < C; i++) {
    h->s1[i] = 1.0f + 0.3f * (float)px_test_rng_normal(&rng);
    h->b1[i] = 0.3f * (float)px_test_rng_normal(&rng);
    h->s2[i] = 1.0f + 0.3f * (float)px_test_rng_normal(&rng);
    h->b2[i] = 0.3f * (float)px_test_rng_normal(&rng);
  }
  px_test_fill_normal(&rng, h->fw, sizeof h->fw / 4);
  for (int i = 0; i < K * C; i++) h->fw[i] *= 0.3f;
  px_test_fill_normal(&rng, h->fb, sizeof h->fb / 4);
  assert_ok(px_tensor_copy_from_host(&n->act.x, h->x, sizeof h->x));
  assert_ok(px_tensor_copy_from_host(&n->act.labels, h->labels, sizeof h->labels));
  assert_ok(px_tensor_copy_from_host(&n->par.w1, h->w1, sizeof h->w1));
  assert_ok(px_tensor_copy_from_host(&n->par.w2, h->w2, sizeof h->w2));
  assert_ok(px_tensor_copy_from_host(&n->par.s1, h->s1, sizeof h->s1));
  assert_ok(px_tensor_copy_from_host(&n->par.b1, h->b1, sizeof h->b1));
  assert_ok(px_tensor_copy_from_host(&n->par.s2, h->s2, sizeof h->s2));
  assert_ok(px_tensor_copy_from_host(&n->par.b2, h->b2, sizeof h->b2));
  assert_ok(px_tensor_copy_from_host(&n->par.fw, h->fw, sizeof h->fw));
  assert_ok(px_tensor_copy_from_host(&n->par.fb, h->fb, sizeof h->fb));
  float ones[C];
  for (int i = 0; i < C; i++) ones[i] = 1.0f;
  assert_ok(px_tensor_copy_from_host(&n->buf.rv1, ones, sizeof ones));
  assert_ok(px_tensor_copy_from_host(&n->buf.rv2, ones, sizeof ones));
}


static void residual_net_matches_reference_chain(void **state) {
  (void)state;
  net_t n;
  net_create(&n);
  static host_t h;
  net_fill(&n, &h, 900);
  float loss;
  int64_t correct;
  net_step(&n, &loss, &correct);

  /* the same network, reference ops on plain arrays */
  enum { A = N * C * H * W, P = N * C * (H / 2) * (W / 2) };
  static float c1[A], a1[A], c2[A], z2[A], a3[A], p[P], g[N * C], logits[N * K], dl[N * K];
  static float dg[N * C], dp[P], da3[A], dz2[A], da1[A], dsh[A], dc1[A];
  float m1[C], v1[C], m2[C], v2[C], rm[C] = {0}, rv[C];
  float gw1[C * C_IN * 9], gw2[C * C * 9], gs1[C], gb1[C], gs2[C], gb2[C], gfw[K * C], gfb[K];
  for (int i = 0; i < C; i++) rv[i] = 1.0f;
  px__ref_conv_t s1 = {.n = N, .c_in = C_IN, .h = H, .w = W, .c_out = C, .kh = 3, .kw = 3,
                       .sh = 1, .sw = 1, .ph = 1, .pw = 1};
  px__ref_conv_shape(&s1);
  px__ref_conv_t s2 = s1;
  s2.c_in = C;
  px__ref_pool_t sp = {.mode = PX_POOL_MAX, .n = N, .c = C, .h = H, .w = W, .kh = 2, .kw = 2,
                       .sh = 2, .sw = 2};
  px__ref_pool_shape(&sp);
  px__ref_pool_t sg = {.mode = PX_POOL_AVG, .n = N, .c = C, .h = H / 2, .w = W / 2, .kh = H / 2,
                       .kw = W / 2, .sh = 1, .sw = 1};
  px__ref_pool_shape(&sg);
  px__ref_conv2d_forward(c1, h.x, h.w1, NULL, &s1);
  px__ref_batchnorm_forward_train(a1, m1, v1, c1, h.s1, h.b1, rm, rv, N, C, H, W, 1e-5f, 0.1f, 1);
  px__ref_conv2d_forward(c2, a1, h.w2, NULL, &s2);
  px__ref_batchnorm_forward_train(z2, m2, v2, c2, h.s2, h.b2, rm, rv, N, C, H, W, 1e-5f, 0.1f, 0);
  px__ref_add(a3, z2, a1, A, 1);
  px__ref_pool2d_forward(p, a3, &sp);
  px__ref_pool2d_forward(g, p, &sg);
  px__ref_fc_forward(logits, g, h.fw, h.fb, N, C, K);
  double rloss;
  int64_t rcorrect;
  px__ref_softmax_ce(dl, &rloss, &rcorrect, logits, h.labels, N, K);
  px__ref_fc_backward_weights(gfw, gfb, g, dl, N, C, K);
  px__ref_fc_backward_data(dg, dl, h.fw, N, C, K);
  px__ref_pool2d_backward(dp, dg, p, &sg);
  px__ref_pool2d_backward(da3, dp, a3, &sp);
  px__ref_relu_backward(da3, da3, a3, A);
  px__ref_batchnorm_backward(dz2, gs2, gb2, da3, c2, h.s2, h.b2, m2, v2, N, C, H, W, 1e-5f, 0);
  px__ref_conv2d_backward_weights(gw2, NULL, a1, dz2, &s2);
  px__ref_conv2d_backward_data(dsh, dz2, h.w2, &s2);
  px__ref_add(da1, dsh, da3, A, 0);
  px__ref_batchnorm_backward(dc1, gs1, gb1, da1, c1, h.s1, h.b1, m1, v1, N, C, H, W, 1e-5f, 1);
  px__ref_conv2d_backward_weights(gw1, NULL, h.x, dc1, &s1);

  print_message("loss %.6f (reference %.6f), correct %lld (reference %lld)\n", loss, rloss,
                (long long)correct, (long long)rcorrect);
  assert_float_equal(loss, rloss, 1e-4 * fmax(1.0, rloss));
  assert_int_equal(correct, rcorrect);
  float got[C * C * 9];
  assert_ok(px_tensor_copy_to_host(&n.grad.fw, got, sizeof gfw));
  expect_close("fw", got, gfw, K * C, 1e-3);
  assert_ok(px_tensor_copy_to_host(&n.grad.fb, got, sizeof gfb));
  expect_close("fb", got, gfb, K, 1e-3);
  assert_ok(px_tensor_copy_to_host(&n.grad.s2, got, sizeof gs2));
  expect_close("s2", got, gs2, C, 1e-3);
  assert_ok(px_tensor_copy_to_host(&n.grad.b2, got, sizeof gb2));
  expect_close("b2", got, gb2, C, 1e-3);
  assert_ok(px_tensor_copy_to_host(&n.grad.w2, got, sizeof gw2));
  expect_close("w2", got, gw2, C * C * 9, 1e-3);
  assert_ok(px_tensor_copy_to_host(&n.grad.s1, got, sizeof gs1));
  expect_close("s1", got, gs1, C, 1e-3);
  assert_ok(px_tensor_copy_to_host(&n.grad.b1, got, sizeof gb1));
  expect_close("b1", got, gb1, C, 1e-3);
  assert_ok(px_tensor_copy_to_host(&n.grad.w1, got, sizeof gw1));
  expect_close("w1", got, gw1, C * C_IN * 9, 1e-3);
  net_destroy(&n);
}

static void training_step_allocates_nothing_after_the_first(void **state) {
  (void)state;
  net_t n;
  net_create(&n);
  static host_t h;
  net_fill(&n, &h, 901);
  float loss;
  int64_t correct;
  net_step(&n, &loss, &correct); /* the first step may create what is created lazily */
  px_mem_stats_t before, after;
  px_mem_stats(&before);
  for (int i = 0; i < 5; i++) {
    assert_ok(px_tensor_copy_from_host(&n.act.x, h.x, sizeof h.x)); /* a new batch */
    net_step(&n, &loss, &correct);
  }
  px_mem_stats(&after);
  print_message("5 steps: %llu allocations, %llu frees; scratchpad %zu bytes\n",
                (unsigned long long)(after.allocs - before.allocs),
                (unsigned long long)(after.frees - before.frees), px_ops_scratchpad_bytes(n.ops));
  assert_int_equal(after.allocs, before.allocs);
  assert_int_equal(after.frees, before.frees);
  assert_int_equal(after.live_bytes, before.live_bytes);
  net_destroy(&n);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(residual_net_matches_reference_chain),
      cmocka_unit_test(training_step_allocates_nothing_after_the_first),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
