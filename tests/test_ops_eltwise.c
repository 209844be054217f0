/* Elementwise ops on the oneDNN backend: ReLU forward/backward (out of
 * place and in place, blocked layouts with padded channels) and the residual
 * add, plain and with its fused ReLU, against the reference; its backward is
 * gradient routing (both inputs get dy, masked by the ReLU), checked against
 * the reference and against finite differences; in-place accumulation of two
 * gradient branches. */
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
#include "px_test_util.h"

#include "ops_test_util.h"

static void relu_matches_reference(void **state) {
  (void)state;
  for (int blocked = 0; blocked <= 1; blocked++) {
    px_ops_t *ops = new_ops();
    px_test_rng_t rng;
    px_test_rng_seed(&rng, 600 + (uint64_t)blocked);
    px_tensor_t xs;
    input_spec(ops, blocked, 3, 21, 5, 7, &xs);
    px_relu_t *relu = NULL;
    assert_ok(px_relu_create(ops, &xs, &relu));
    const size_t n = px_tensor_numel(&xs);
    float *hx = rand_host(&rng, n, 1, 0), *hdy = rand_host(&rng, n, 1, 0);
    float *ry = malloc(n * 4), *rdx = malloc(n * 4);
    px__ref_relu_forward(ry, hx, n);
    px__ref_relu_backward(rdx, hdy, ry, n);
    px_tensor_t x, y, dy, dx;
    make_tensor(&x, &xs, hx);
    make_tensor(&y, &xs, NULL);
    make_tensor(&dy, &xs, hdy);
    make_tensor(&dx, &xs, NULL);
    assert_ok(px_relu_forward(relu, &y, &x));
    assert_ok(px_relu_backward(relu, &dx, &dy, &y));
    float *gy = read_host(&y), *gdx = read_host(&dx);
    /* exact, up to the sign of zero (oneDNN's ReLU gives -0 for negatives) */
    expect_close("relu forward", gy, ry, n, 0.0);
    expect_close("relu backward", gdx, rdx, n, 0.0);
    /* in place: y over x, dx over dy */
    assert_ok(px_relu_forward(relu, &x, &x));
    assert_ok(px_relu_backward(relu, &dy, &dy, &x));
    float *gy2 = read_host(&x), *gdx2 = read_host(&dy);
    expect_close("relu forward in place", gy2, ry, n, 0.0);
    expect_close("relu backward in place", gdx2, rdx, n, 0.0);
    free(hx); free(hdy); free(ry); free(rdx); free(gy); free(gdx); free(gy2); free(gdx2);
    px_tensor_release(&x); px_tensor_release(&y); px_tensor_release(&dy); px_tensor_release(&dx);
    px_relu_destroy(relu);
    px_ops_destroy(ops);
  }
}

static void add_and_its_gradient_routing_match_reference(void **state) {
  (void)state;
  for (int relu = 0; relu <= 1; relu++)
    for (int blocked = 0; blocked <= 1; blocked++) {
      px_ops_t *ops = new_ops();
      px_test_rng_t rng;
      px_test_rng_seed(&rng, 700 + (uint64_t)(2 * relu + blocked));
      px_tensor_t xs;
      input_spec(ops, blocked, 2, 19, 4, 3, &xs);
      px_add_t *add = NULL;
      assert_ok(px_add_create(ops, &xs, relu, &add));
      const size_t n = px_tensor_numel(&xs);
      float *ha = rand_host(&rng, n, 1, 0), *hb = rand_host(&rng, n, 1, 0);
      float *hdy = rand_host(&rng, n, 1, 0);
      float *ry = malloc(n * 4), *rg = malloc(n * 4);
      px__ref_add(ry, ha, hb, n, relu);
      if (relu)
        px__ref_relu_backward(rg, hdy, ry, n);
      else
        memcpy(rg, hdy, n * 4);
      px_tensor_t a, b, y, dy, g;
      make_tensor(&a, &xs, ha);
      make_tensor(&b, &xs, hb);
      make_tensor(&y, &xs, NULL);
      make_tensor(&dy, &xs, hdy);
      make_tensor(&g, &xs, NULL);
      assert_ok(px_add_forward(add, &y, &a, &b));
      assert_ok(px_add_backward(add, &g, &dy, &y));
      float *gy = read_host(&y), *gg = read_host(&g);
      expect_close("add forward", gy, ry, n, 1e-6);
      expect_close("add backward", gg, rg, n, 0.0);

      /* finite differences: dL/da and dL/db are both g (a's shown; b is symmetric) */
      const double eps = 1e-3;
      double worst = 0.0;
      for (size_t i = 0; i < n; i++) {
        if (relu && fabs((double)ha[i] + hb[i]) < 2 * eps) continue; /* at the kink */
        double l[2];
        for (int sgn = 0; sgn < 2; sgn++) {
          float keep = ha[i];
          ha[i] = (float)(keep + (sgn ? -eps : eps));
          assert_ok(px_tensor_copy_from_host(&a, ha, n * 4));
          ha[i] = keep;
          assert_ok(px_add_forward(add, &y, &a, &b));
          float *hy = read_host(&y);
          l[sgn] = 0.0;
          for (size_t j = 0; j < n; j++) l[sgn] += (double)hy[j] * hdy[j];
          free(hy);
        }
        double fd = (l[0] - l[1]) / (2 * eps);
        double e = fabs(fd - gg[i]) / fmax(1.0, fabs(fd));
        if (e > worst) worst = e;
      }
      assert_ok(px_tensor_copy_from_host(&a, ha, n * 4));
      if (worst > 1e-2) fail_msg("add gradient differs from finite differences (%g)", worst);

      /* accumulation of two gradient branches in place: a += b */
      if (!relu) {
        float *rs = malloc(n * 4);
        px__ref_add(rs, ha, hb, n, 0);
        assert_ok(px_add_forward(add, &a, &a, &b));
        float *gs = read_host(&a);
        expect_close("in-place accumulate", gs, rs, n, 1e-6);
        free(rs);
        free(gs);
      }
      free(ha); free(hb); free(hdy); free(ry); free(rg); free(gy); free(gg);
      px_tensor_t *all[] = {&a, &b, &y, &dy, &g};
      for (size_t i = 0; i < sizeof all / sizeof *all; i++) px_tensor_release(all[i]);
      px_add_destroy(add);
      px_ops_destroy(ops);
    }
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(relu_matches_reference),
      cmocka_unit_test(add_and_its_gradient_routing_match_reference),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
