/* The local phase's SGD step after the freeze
 * (prune.compact_training): resnet20 on Fashion-MNIST as a quickstart worker
 * runs it (a quarter shard, batch 64, one thread), with frozen masks that
 * keep half of every conv's input channels (the even ones; the stem keeps
 * its image), stepped three ways, alternating, from the same start:
 *   dense      the masked dense model (compact_training: false);
 *   compact16  the compact model in oneDNN's blocked layouts, each channel
 *              group widened to a multiple of 16 (PX_COMPACT_CHANNELS=16);
 *   compact    the compact model in channels-last layers, groups of 1, 2,
 *              4, 8 or a multiple of 16 channels (the default).
 * The compact ones include the gather and scatter a local phase does
 * (strategy/compact_train.c). Prints the median seconds per step of each
 * over the rounds, then RESULT lines (compact / dense, lower is better).
 *
 *   px_bench_compact [--steps N] [--rounds N] [--batch N] [--threads N]
 *                    [--data-dir DIR]
 *
 * Not a test: seconds per configuration. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "prunex/nn.h"
#include "strategy/strategy_int.h"
#include "../px_bench_util.h"

static const char *PROG = "px_bench_compact";

typedef struct {
  px__ctrain_t *ct;
  const float *keep;
} hook_t;

static px_status_t mask_hook(void *ctx, px_model_t *m) {
  hook_t *h = ctx;
  if (h->ct && px__ctrain_is(h->ct, m)) {
    px__ctrain_mask(h->ct);
    return PX_OK;
  }
  float *w = px_model_flat_params(m)->data, *g = px_model_flat_grads(m)->data;
  for (size_t j = 0; j < px_model_numel(m); j++)
    if (h->keep[j] == 0.0f) w[j] = g[j] = 0.0f;
  return PX_OK;
}

static const float *prox_z;

static void prox_of(void *ctx, int i, const float **z, const float **u, float *rho) {
  px__strategy_run_t *r = ctx;
  size_t off = (size_t)((const float *)px_model_param(r->m, i)->value->data -
                        (const float *)px_model_flat_params(r->m)->data);
  *z = prox_z + off;
  *u = NULL;
  *rho = 0.01f;
}

/* The masks: every conv but the stem keeps its even input channels. */
static float *half_masks(px_model_t *m) {
  size_t n = px_model_numel(m), off = 0;
  float *keep = malloc(n * sizeof *keep);
  if (!keep) return NULL;
  for (int i = 0; i < px_model_num_params(m); i++) {
    const px_tensor_t *v = px_model_param(m, i)->value;
    int conv = px_model_param(m, i)->kind == PX_WEIGHT_CONV && v->dims[1] > 3;
    size_t kk = conv ? (size_t)(v->dims[2] * v->dims[3]) : 1;
    for (size_t j = 0; j < px_tensor_numel(v); j++)
      keep[off + j] = conv && (j / kk) % (size_t)v->dims[1] % 2 ? 0.0f : 1.0f;
    off += px_tensor_numel(v);
  }
  float *w = px_model_flat_params(m)->data;
  for (size_t j = 0; j < n; j++) w[j] *= keep[j];
  return keep;
}

/* Seconds per step of steps steps: the dense model (ct NULL) or ct's. */
static int timed(px_trainer_t *t, px__strategy_run_t *r, px__ctrain_t *ct, int steps, double *out) {
  px_epoch_stats_t es;
  double t0 = px__now();
  if (ct && px__ctrain_enter(ct, r, prox_of, r) != PX_OK) return -1;
  int rc = px_trainer_steps(t, steps, &es) != PX_OK;
  if (ct) px__ctrain_leave(ct, r);
  *out = (px__now() - t0) / steps;
  return rc ? -1 : 0;
}

static int build(px__strategy_run_t *r, const float *keep, const char *channels,
                 px__ctrain_t **out) {
  if (channels) setenv("PX_COMPACT_CHANNELS", channels, 1);
  else unsetenv("PX_COMPACT_CHANNELS");
  return px__ctrain_build(r, keep, out) == PX_OK ? 0 : -1;
}

static double median(double *v, int n) {
  qsort(v, (size_t)n, sizeof *v, pxb_cmp_double);
  return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

int main(int argc, char **argv) {
  int steps = 10, rounds = 3, batch = 64, threads = 1;
  const char *data = NULL;
  for (int i = 1; i < argc; i++) {
    const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
    if (!v) return fprintf(stderr, "%s: %s needs a value\n", PROG, a), 2;
    if (!strcmp(a, "--steps")) steps = atoi(v);
    else if (!strcmp(a, "--rounds")) rounds = atoi(v);
    else if (!strcmp(a, "--batch")) batch = atoi(v);
    else if (!strcmp(a, "--threads")) threads = atoi(v);
    else if (!strcmp(a, "--data-dir")) data = v;
    else return fprintf(stderr, "%s: unknown option %s\n", PROG, a), 2;
    i++;
  }
  if (steps < 1 || rounds < 1 || rounds > 64 || batch < 1 || threads < 1)
    return fprintf(stderr, "%s: steps, rounds (at most 64), batch and threads must be >= 1\n",
                   PROG), 2;
  px_train_config_t tc;
  px_train_config_default(&tc);
  tc.data_dir = data;
  tc.batch = batch;
  tc.threads = threads;
  tc.epochs = 2;
  tc.lr = 0.05;
  tc.weight_decay = 0;
  tc.rank = 0;
  tc.world_size = 4;
  px_trainer_t *t = NULL;
  if (px_trainer_create(&tc, &t) != PX_OK) return pxb_fail(PROG, "the trainer");
  px_model_t *m = px_trainer_model(t);
  float *keep = half_masks(m);
  size_t n = px_model_numel(m);
  float *z = malloc(n * sizeof *z);
  if (!keep || !z) return pxb_fail(PROG, "memory");
  memcpy(z, px_model_flat_params(m)->data, n * sizeof *z);
  prox_z = z;
  px_strategy_config_t cfg = {0};
  px__strategy_run_t r = {.t = t, .m = m, .sgd = px_trainer_sgd(t), .cfg = &cfg,
                          .np = px_model_num_params(m), .numel = n};
  hook_t h = {NULL, keep};
  px_trainer_set_grad_hook(t, mask_hook, &h);
  px__ctrain_t *c16 = NULL, *ccl = NULL;
  if (build(&r, keep, "16", &c16) || build(&r, keep, NULL, &ccl))
    return pxb_fail(PROG, "the compact models");
  printf("%s: resnet20, batch %d, %d thread(s), %d steps x %d rounds; compact parameters: "
         "%lld (16-channel groups), %lld (channels-last) of %zu\n", PROG, batch, threads, steps,
         rounds, (long long)px__ctrain_numel(c16), (long long)px__ctrain_numel(ccl), n);
  double d[64], a[64], b[64], w;
  h.ct = c16; /* a warm-up step of each */
  if (timed(t, &r, NULL, 1, &w) || timed(t, &r, c16, 1, &w)) return pxb_fail(PROG, "a step");
  h.ct = ccl;
  if (timed(t, &r, ccl, 1, &w)) return pxb_fail(PROG, "a step");
  for (int k = 0; k < rounds; k++) {
    h.ct = NULL;
    int rc = timed(t, &r, NULL, steps, &d[k]);
    h.ct = c16;
    rc = rc || timed(t, &r, c16, steps, &a[k]);
    h.ct = ccl;
    rc = rc || timed(t, &r, ccl, steps, &b[k]);
    if (rc) return pxb_fail(PROG, "a step");
    printf("round %d: dense %.1f ms, compact16 %.1f ms, compact %.1f ms a step\n", k + 1,
           d[k] * 1e3, a[k] * 1e3, b[k] * 1e3);
  }
  double md = median(d, rounds), ma = median(a, rounds), mb = median(b, rounds);
  printf("median: dense %.1f ms, compact16 %.1f ms, compact %.1f ms a step\n", md * 1e3,
         ma * 1e3, mb * 1e3);
  printf("RESULT compact16_vs_dense %.3f ratio\nRESULT compact_vs_dense %.3f ratio\n", ma / md,
         mb / md);
  px_trainer_set_grad_hook(t, NULL, NULL);
  px__ctrain_destroy(c16);
  px__ctrain_destroy(ccl);
  px_trainer_destroy(t);
  free(keep);
  free(z);
  return 0;
}
