/* The activations of imported graphs (nn/px_graph_ops.h) on the CPU: each
 * px__act_forward against its definition in double precision, and each
 * px__act_backward against the central difference of that definition, on
 * random inputs away from the kinks; at the kinks, PyTorch's values.
 * (tests/test_gpu_graph.c compares the CUDA kernels with these loops, and
 * the ops table's CPU entries with their bits.) */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

#include <cmocka.h>

#include "nn/px_graph_ops.h"
#include "px_test_util.h"

#define NX 4096

/* act(x) in double, from its definition. */
static double act_ref(int a, double x, double alpha) {
  const double hs = fmin(1.0, fmax(0.0, alpha * x + 0.5));
  switch (a) {
    case PX__ACT_RELU: return x > 0 ? x : 0;
    case PX__ACT_LEAKY: return x > 0 ? x : alpha * x;
    case PX__ACT_RELU6: return fmin(6.0, fmax(0.0, x));
    case PX__ACT_SIGMOID: return 1.0 / (1.0 + exp(-x));
    case PX__ACT_HSIGMOID: return hs;
    case PX__ACT_HSWISH: return x * hs;
    case PX__ACT_SILU: return x / (1.0 + exp(-x));
    case PX__ACT_GELU: return 0.5 * x * (1.0 + erf(x / sqrt(2.0)));
    case PX__ACT_TANH: return tanh(x);
    case PX__ACT_SCALE: return alpha * x;
    case PX__ACT_SHIFT: return x + alpha;
  }
  fail_msg("activation %d", a);
  return 0;
}

/* Whether x is within d of a kink of act (where the difference is not the derivative). */
static int near_kink(int a, double x, double alpha, double d) {
  switch (a) {
    case PX__ACT_RELU:
    case PX__ACT_LEAKY: return fabs(x) < d;
    case PX__ACT_RELU6: return fabs(x) < d || fabs(x - 6) < d;
    case PX__ACT_HSIGMOID:
    case PX__ACT_HSWISH: return fabs(x + 0.5 / alpha) < d || fabs(x - 0.5 / alpha) < d;
    default: return 0;
  }
}

/* Every activation at two slopes (PyTorch's 1/6 for the hard ones, and 0.2,
 * ONNX's default, which LeakyRelu takes as its slope too). */
static void forward_and_backward_match_the_definition(void **state) {
  (void)state;
  px_test_rng_t rng;
  px_test_rng_seed(&rng, 48);
  float *x = malloc(NX * sizeof *x), *y = malloc(NX * sizeof *y), *dy = malloc(NX * sizeof *dy),
        *dx = malloc(NX * sizeof *dx);
  assert_true(x && y && dy && dx);
  for (int i = 0; i < NX; i++) {
    x[i] = 8.0f * px_test_rng_uniform(&rng) - 4.0f; /* past the hard kinks at +-3 and +-2.5 */
    dy[i] = 2.0f * px_test_rng_uniform(&rng) - 1.0f;
  }
  const float alphas[2] = {1.0f / 6.0f, 0.2f};
  for (int a = 0; a < PX__ACT_COUNT; a++) {
    for (int s = 0; s < 2; s++) {
      const float al = alphas[s];
      px__act_forward(y, x, NX, (px__act_t)a, al);
      px__act_backward(dx, dy, x, y, NX, (px__act_t)a, al);
      double ef = 0, eb = 0, h = 1e-4;
      for (int i = 0; i < NX; i++) {
        ef = fmax(ef, fabs(y[i] - act_ref(a, x[i], al)) / (1 + fabs(act_ref(a, x[i], al))));
        if (near_kink(a, x[i], al, 2 * h)) continue;
        double d = (act_ref(a, x[i] + h, al) - act_ref(a, x[i] - h, al)) / (2 * h);
        eb = fmax(eb, fabs(dx[i] - dy[i] * d) / (1 + fabs(d)));
      }
      print_message("%-12s alpha %.4f: forward within %.1e, backward within %.1e\n",
                    px__act_onnx_name((px__act_t)a), al, ef, eb);
      if (ef > 1e-6 || eb > 1e-5)
        fail_msg("%s: forward %g, backward %g off", px__act_onnx_name((px__act_t)a), ef, eb);
    }
  }
  free(x), free(y), free(dy), free(dx);
}

/* PyTorch's derivatives at the kinks of its hard sigmoid and hard swish
 * (x = -3, 3: hardsigmoid_backward 0 at both, hardswish_backward x/3 + 1/2
 * at both), and their values there. */
static void hard_kinks_are_pytorchs(void **state) {
  (void)state;
  const float x[4] = {-3.0f, 3.0f, -3.5f, 3.5f}, one[4] = {1, 1, 1, 1};
  float y[4], dx[4];
  const float sixth = 1.0f / 6.0f;
  px__act_forward(y, x, 4, PX__ACT_HSIGMOID, sixth);
  px__act_backward(dx, one, x, y, 4, PX__ACT_HSIGMOID, sixth);
  const float hs_y[4] = {0, 1, 0, 1}, hs_d[4] = {0, 0, 0, 0};
  for (int i = 0; i < 4; i++) {
    assert_true(y[i] == hs_y[i]);
    assert_true(dx[i] == hs_d[i]);
  }
  px__act_forward(y, x, 4, PX__ACT_HSWISH, sixth);
  px__act_backward(dx, one, x, y, 4, PX__ACT_HSWISH, sixth);
  const float hw_y[4] = {0, 3, 0, 3.5f}, hw_d[4] = {-0.5f, 1.5f, 0, 1};
  for (int i = 0; i < 4; i++) {
    if (y[i] != hw_y[i] || dx[i] != hw_d[i])
      fail_msg("hard swish at %g: %g, %g (PyTorch %g, %g)", x[i], y[i], dx[i], hw_y[i], hw_d[i]);
  }
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(forward_and_backward_match_the_definition),
      cmocka_unit_test(hard_kinks_are_pytorchs),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
