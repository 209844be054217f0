/* The model's memory plan: the bytes of one training
 * step's working memory (px_model_activation_bytes: activations, their
 * gradients, BN statistics and workspaces) under the earlier separate plan
 * (PX_MEM_PLAN=separate), the shared one (the default in fp32) and the
 * shared one with the BN outputs recomputed in the backward
 * (PX_MEM_PLAN=recompute, the default for bf16 on CUDA), for ResNets on
 * 3x32x32 inputs, 10 classes, on the CPU engine; with --time, the training
 * step time of the three plans on one thread, alternating runs.
 *
 *   px_bench_mem_plan [--batch N] [--models a,b,...] [--time MODEL]
 *                     [--steps N] [--rounds N]
 *
 * The plan is backend-independent code (nn/model.c, nn/mem_plan.c): a CUDA
 * model gets the same layout, in its own formats' sizes. Prints a row per
 * model, then RESULT lines. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "prunex/data.h"
#include "prunex/nn.h"
#include "../px_bench_util.h"

static const char *PROG = "px_bench_mem_plan";

/* The working memory of arch at batch under plan (a PX_MEM_PLAN value). */
static int plan_bytes(const char *arch, int batch, const char *plan, size_t *out) {
  setenv("PX_MEM_PLAN", plan, 1);
  px_ops_t *ops = NULL;
  px_model_t *m = NULL;
  px_model_config_t mc = {arch, 3, 10, batch, 32, 32, NULL, 0, PX_PRECISION_FP32, NULL};
  int rc = px_ops_create(px_device_cpu(), 1, &ops) < 0 || px_model_create(ops, &mc, &m) < 0;
  if (!rc) *out = px_model_activation_bytes(m);
  px_model_destroy(m);
  px_ops_destroy(ops);
  return rc ? pxb_fail(PROG, arch) : 0;
}

/* Median seconds per training step of arch under plan: steps timed steps
 * after two untimed ones, on one thread. */
static int step_time(const char *arch, int batch, const char *plan, int steps, double *out) {
  setenv("PX_MEM_PLAN", plan, 1);
  px_ops_t *ops = NULL;
  px_model_t *m = NULL;
  px_sgd_t *sgd = NULL;
  px_model_config_t mc = {arch, 3, 10, batch, 32, 32, NULL, 0, PX_PRECISION_FP32, NULL};
  px_sgd_config_t sc = {0.05, 0.9, 5e-4, 0};
  px_synth_config_t syn;
  px_synth_config_default(&syn);
  float *x = malloc((size_t)batch * 3 * 32 * 32 * sizeof *x);
  int32_t *y = malloc((size_t)batch * sizeof *y);
  double *t = malloc((size_t)steps * sizeof *t);
  int rc = !x || !y || !t || px_ops_create(px_device_cpu(), 1, &ops) < 0 ||
           px_model_create(ops, &mc, &m) < 0 || px_model_init_params(m, 1) < 0 ||
           px_sgd_create(m, &sc, &sgd) < 0;
  for (int s = 0; s < steps + 2 && !rc; s++) {
    float loss;
    int64_t correct;
    double t0 = px__now();
    rc = px_synth_batch(&syn, s % 4, batch, x, y) < 0 ||
         px_model_train_step(m, x, y, &loss, &correct) < 0 || px_sgd_step(sgd) < 0;
    if (s >= 2) t[s - 2] = px__now() - t0;
  }
  if (!rc) {
    qsort(t, (size_t)steps, sizeof *t, pxb_cmp_double);
    *out = t[steps / 2];
  }
  px_sgd_destroy(sgd);
  px_model_destroy(m);
  px_ops_destroy(ops);
  free(x);
  free(y);
  free(t);
  return rc ? pxb_fail(PROG, "training step") : 0;
}

enum { NPLANS = 3 };
static const char *const plans[NPLANS] = {"separate", "shared", "recompute"};

static int timing(const char *arch, int batch, int steps, int rounds) {
  double best[NPLANS] = {1e30, 1e30, 1e30};
  for (int r = 0; r < rounds; r++)
    for (int p = 0; p < NPLANS; p++) {
      double s;
      if (step_time(arch, batch, plans[p], steps, &s)) return 1;
      printf("%s batch %d, 1 thread, %s plan, round %d: %.1f ms/step (median of %d)\n", arch,
             batch, plans[p], r + 1, 1e3 * s, steps);
      if (s < best[p]) best[p] = s;
    }
  for (int p = 0; p < NPLANS; p++)
    printf("RESULT %s_step_ms_%s %.1f ms\n", arch, plans[p], 1e3 * best[p]);
  printf("RESULT %s_step_shared_vs_separate %.3f ratio\n", arch, best[1] / best[0]);
  printf("RESULT %s_step_recompute_vs_shared %.3f ratio\n", arch, best[2] / best[1]);
  return 0;
}

int main(int argc, char **argv) {
  int batch = 128, steps = 10, rounds = 3;
  char models[256] = "resnet20,resnet18,resnet50";
  const char *time_arch = NULL;
  for (int i = 1; i + 1 < argc; i += 2) {
    if (!strcmp(argv[i], "--batch")) batch = atoi(argv[i + 1]);
    else if (!strcmp(argv[i], "--models")) snprintf(models, sizeof models, "%s", argv[i + 1]);
    else if (!strcmp(argv[i], "--time")) time_arch = argv[i + 1];
    else if (!strcmp(argv[i], "--steps")) steps = atoi(argv[i + 1]);
    else if (!strcmp(argv[i], "--rounds")) rounds = atoi(argv[i + 1]);
    else {
      fprintf(stderr, "%s: unknown option '%s'\n", PROG, argv[i]);
      return 2;
    }
  }
  if (argc % 2 == 0 || batch < 1 || steps < 1 || rounds < 1) {
    fprintf(stderr, "usage: %s [--batch N] [--models a,b] [--time MODEL] [--steps N] [--rounds N]\n",
            PROG);
    return 2;
  }
  if (time_arch) return timing(time_arch, batch, steps, rounds);
  for (char *save = NULL, *arch = strtok_r(models, ",", &save); arch;
       arch = strtok_r(NULL, ",", &save)) {
    size_t b[NPLANS];
    for (int p = 0; p < NPLANS; p++)
      if (plan_bytes(arch, batch, plans[p], &b[p])) return 1;
    printf("%-10s batch %d, 32x32: separate %8.1f MB, shared %8.1f MB (%.1f%% less), "
           "recompute %8.1f MB (%.1f%% less than shared)\n",
           arch, batch, b[0] / 1e6, b[1] / 1e6, 100.0 * (1.0 - (double)b[1] / (double)b[0]),
           b[2] / 1e6, 100.0 * (1.0 - (double)b[2] / (double)b[1]));
    for (int p = 0; p < NPLANS; p++)
      printf("RESULT %s_act_mb_%s %.1f MB\n", arch, plans[p], b[p] / 1e6);
  }
  return 0;
}
