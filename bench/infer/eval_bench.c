/* What an H-SADMM evaluation of the consensus costs, the dense way (the
 * dense-shaped model through the training engine: BN calibration on 20
 * training batches, then the test set) against the compact way (the
 * compact model calibrated, then evaluated on the inference engine),
 * on one rank holding the whole Fashion-MNIST test set (10,000 images) at
 * the quickstart's batch of 64.
 *   px_bench_eval MODEL.safetensors|MODEL.onnx|random DATA_DIR [THREADS] [REPEATS] [CHUNK]
 * MODEL: a final model (the quickstart's model.safetensors, or an imported
 * model's, whose metadata names its ONNX file), "random": resnet20
 * initialised with seed 1, or an ONNX file taking 1x32x32 images (its own
 * initial weights, e.g. tests/onnx_import_nets.py's mobilenet); the last two
 * with their coupled channels projected at keep 0.5 as H-SADMM does (resnet20:
 * density 0.387). CHUNK overrides the engine's
 * chunk (bf16: the batch of 64, f32: the cache-sized batch, as
 * compact_eval.c chooses); the precision (default auto: bf16 with the f32
 * rerun of close calls where the CPU has AMX) picks the compact net's; the
 * bf16 error report (unchecked bf16 against f32 logits, the margin bound's
 * safety) is printed whatever it is. Prints the disagreements between the compact and the
 * dense predictions on the model as given (before any calibration), each
 * phase's best CPU time over REPEATS (process CPU time, which a loaded
 * machine does not inflate; the wall times follow), and RESULT compact_eval_speedup (dense /
 * compact seconds of evaluation alone) and compact_eval_total_speedup
 * (calibration and evaluation). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "export/compact_int.h"
#include "infer/infer_int.h"
#include "prunex/nn.h"
#include "prunex/prune.h"
#include "bench_project.h"
#include "../px_bench_util.h"

#define CALIBRATE 20

/* Process CPU time: on a shared, loaded machine the wall clock measures the
 * other tenants; with one thread this is the work done (wall times are
 * printed too). */
static int die(const char *what) { return pxb_fail("px_bench_eval", what); }

typedef struct {
  px__infer_t *net;
  px_model_t *dense;
  int64_t differ;
} ctx_t;

static px_status_t eval_compact(void *c, const float *x, const int32_t *y, int32_t n,
                                double *loss_sum, int64_t *correct) {
  return px__infer_eval(((ctx_t *)c)->net, x, y, n, loss_sum, correct);
}

static px_status_t compare(void *c, const float *x, const int32_t *y, int32_t n,
                           double *loss_sum, int64_t *correct) {
  (void)y;
  (void)loss_sum;
  (void)correct;
  ctx_t *k = c;
  return px__infer_compare(k->net, k->dense, x, n, &k->differ);
}

/* Multiply-adds per image of the convolutions (grouped: c_in / groups
 * per filter) and the FC. */
static double macs(const px_model_t *m) {
  double total = 0;
  for (int k = 0; k < px_model_num_nodes(m); k++) {
    px_model_node_t n;
    int h, w;
    px_model_node(m, k, &n);
    if (n.kind == PX_NODE_CONV && px_model_act_area(m, n.out, &h, &w) == 0)
      total += (double)n.c_out * (n.c_in / (n.groups > 1 ? n.groups : 1)) * n.win.kh * n.win.kw *
               h * w;
    else if (n.kind == PX_NODE_FC)
      total += (double)n.c_out * n.c_in;
  }
  return total;
}

static px_status_t calibrate(void *c, const float *x) { return px__infer_calibrate(c, x); }
static void calibrate_momentum(void *c, float momentum) { px__infer_calib_momentum(c, momentum); }

/* bf16 (unchecked) against f32 logits, per image: the largest difference
 * e, relative to the largest f32 logit's magnitude, the predictions that
 * differ, and the smallest ratio of the engine's margin bound to 2 e (the
 * check is safe while it stays above 1: a margin above 2 e cannot flip). */
typedef struct {
  px__infer_t *raw, *f32;
  float *zb, *zf;
  double max_abs, max_rel, min_safety;
  int64_t differ, close, n;
  FILE *dump; /* PXB_BF16_DUMP: per image margin, difference, largest |logit| */
} bf_ctx_t;

static int argmax(const float *z, int k) {
  int b = 0;
  for (int j = 1; j < k; j++)
    if (z[j] > z[b]) b = j;
  return b;
}

static px_status_t bf_compare(void *c, const float *x, const int32_t *y, int32_t n,
                              double *loss_sum, int64_t *correct) {
  (void)y;
  (void)loss_sum;
  (void)correct;
  bf_ctx_t *k = c;
  if (!n) return PX_OK; /* the end of the test set */
  if (px__infer_logits(k->raw, x, n, k->zb) < 0 || px__infer_logits(k->f32, x, n, k->zf) < 0)
    return PX_ERR_BACKEND;
  for (int32_t i = 0; i < n; i++) {
    const float *zb = k->zb + (size_t)i * 10, *zf = k->zf + (size_t)i * 10;
    double e = 0, mag = 1e-30;
    for (int j = 0; j < 10; j++) {
      e = fmax(e, fabs((double)zb[j] - zf[j]));
      mag = fmax(mag, fabs((double)zf[j]));
    }
    int b = argmax(zb, 10);
    float second = -1e30f;
    for (int j = 0; j < 10; j++)
      if (j != b && zb[j] > second) second = zb[j];
    double bound = px__infer_margin_bound(zb, 10);
    k->close += zb[b] - second < bound;
    k->max_abs = fmax(k->max_abs, e);
    k->max_rel = fmax(k->max_rel, e / mag);
    if (e > 0) k->min_safety = fmin(k->min_safety, bound / (2 * e));
    k->differ += b != argmax(zf, 10);
    k->n++;
    if (k->dump) fprintf(k->dump, "%g %g %g\n", (double)(zb[b] - second), e, mag);
  }
  return PX_OK;
}

/* The bf16 error figures over the test set (batch b nets of cm). */
static int bf16_report(px_trainer_t *t, px_model_t *cm, int32_t b) {
  bf_ctx_t k = {0};
  k.min_safety = 1e30;
  if (getenv("PXB_BF16_DUMP")) k.dump = fopen(getenv("PXB_BF16_DUMP"), "w");
  k.zb = malloc(64 * 10 * sizeof(float));
  k.zf = malloc(64 * 10 * sizeof(float));
  px_eval_stats_t e;
  if (!k.zb || !k.zf || px__infer_create(cm, b, 0, PX__INFER_BF16_RAW, &k.raw) < 0 ||
      px__infer_create(cm, b, 0, PX__INFER_F32, &k.f32) < 0 || px__infer_load(k.raw) < 0 ||
      px__infer_load(k.f32) < 0 || px_trainer_evaluate_with(t, bf_compare, &k, &e) < 0)
    return die("bf16 comparison");
  printf("bf16 unchecked vs f32 over %lld images: largest logit difference %.4f (%.4f of the "
         "largest logit), predictions differ on %lld, %lld below the margin bound (%.2f%%), "
         "bound / (2 x difference) at least %.2f\n",
         (long long)k.n, k.max_abs, k.max_rel, (long long)k.differ, (long long)k.close,
         100.0 * (double)k.close / (double)k.n, k.min_safety);
  printf("RESULT bf16_unchecked_disagreements %lld of %lld\n", (long long)k.differ,
         (long long)k.n);
  printf("RESULT bf16_margin_safety %.2f ratio\n", k.min_safety);
  if (k.dump) fclose(k.dump);
  px__infer_destroy(k.raw);
  px__infer_destroy(k.f32);
  free(k.zb);
  free(k.zf);
  return 0;
}

static px__infer_prec_t parse_prec(const char *s) {
  return !strcmp(s, "f32") ? PX__INFER_F32 : !strcmp(s, "bf16") ? PX__INFER_BF16
         : !strcmp(s, "raw") ? PX__INFER_BF16_RAW : PX__INFER_AUTO;
}


int main(int argc, char **argv) {
  if (argc < 3) {
    fprintf(stderr, "usage: px_bench_eval MODEL.safetensors|random DATA_DIR [THREADS] [REPEATS] [CHUNK] "
                    "[f32|bf16|raw|auto]\n");
    return 2;
  }
  int threads = argc > 3 ? atoi(argv[3]) : 1, repeats = argc > 4 ? atoi(argv[4]) : 3;
  int chunk = argc > 5 ? atoi(argv[5]) : 0;
  px__infer_prec_t prec = parse_prec(argc > 6 ? argv[6] : "auto");
  px_train_config_t tc;
  px_train_config_default(&tc);
  tc.data_dir = argv[2];
  tc.batch = 64;
  tc.threads = threads;
  tc.augment = 1;
  size_t len = strlen(argv[1]);
  int onnx = len > 5 && !strcmp(argv[1] + len - 5, ".onnx");
  px_model_config_t fc;
  int32_t widths[512];
  if (onnx) tc.onnx = argv[1];
  else if (strcmp(argv[1], "random") && px_model_file_config(argv[1], &fc, widths, 512) == PX_OK)
    tc.onnx = fc.onnx; /* an imported model's file: its graph */
  px_trainer_t *t;
  if (px_trainer_create(&tc, &t) < 0) return die("trainer");
  px_model_t *dense = px_trainer_model(t);
  if (!strcmp(argv[1], "random") || onnx) {
    if (px_bench_project_coupled(dense, 0.5) < 0) return die("projection");
  } else if (px_model_load(dense, NULL, argv[1]) < 0) {
    return die(argv[1]);
  }
  size_t nz = 0, numel = px_model_numel(dense);
  const float *w = px_model_flat_params(dense)->data;
  for (size_t i = 0; i < numel; i++) nz += w[i] != 0.0f;
  /* the compact model and its net, built once */
  double t0 = pxb_cpu_s();
  px__compact_t *plan;
  px_model_t *cm;
  ctx_t k = {NULL, dense, 0};
  if (px__compact_plan(dense, 0, &plan) < 0 ||
      px__compact_build(plan, dense, px_model_ops(dense), 1, &cm) < 0)
    return die("compact");
  int bf = prec == PX__INFER_BF16 || prec == PX__INFER_BF16_RAW ||
           (prec == PX__INFER_AUTO && px__infer_bf16_fast());
  /* as the strategies' compact evaluation chooses (compact_eval.c) */
  int32_t b = chunk > 0 ? chunk : bf ? tc.batch : px__infer_cache_batch(cm, tc.batch);
  px__infer_t *cal;
  if (px__infer_create(cm, b, 0, prec, &k.net) < 0 || px__infer_load(k.net) < 0 ||
      px__infer_create(cm, tc.batch, 1, PX__INFER_F32, &cal) < 0)
    return die("net");
  double t_build = pxb_cpu_s() - t0;
  px_eval_stats_t ed, ek;
  if (px_trainer_evaluate_with(t, compare, &k, &ed) < 0) return die("compare");
  int64_t rechecked = px__infer_rechecked(k.net);
  if (bf16_report(t, cm, b)) return 1;
  /* evaluation alone, the model as given */
  double dense_eval = 1e30, compact_eval = 1e30, dense_cal = 1e30, compact_cal = 1e30;
  double wd = 1e30, wk = 1e30;
  for (int r = 0; r < repeats; r++) {
    double w0 = px__now();
    t0 = pxb_cpu_s();
    if (px_trainer_evaluate(t, &ed) < 0) return die("dense evaluation");
    double a = pxb_cpu_s() - t0, wa = px__now() - w0;
    w0 = px__now();
    t0 = pxb_cpu_s();
    if (px__compact_update(plan, dense) < 0 || px__compact_fill(plan, dense, cm) < 0 ||
        px__infer_load(k.net) < 0 || px_trainer_evaluate_with(t, eval_compact, &k, &ek) < 0)
      return die("compact evaluation");
    double c = pxb_cpu_s() - t0, wc = px__now() - w0;
    if (a < dense_eval) dense_eval = a;
    if (c < compact_eval) compact_eval = c;
    if (wa < wd) wd = wa;
    if (wc < wk) wk = wc;
  }
  /* calibration (changes the statistics: after the comparisons) */
  for (int r = 0; r < repeats; r++) {
    t0 = pxb_cpu_s();
    if (px_trainer_calibrate_bn(t, CALIBRATE) < 0) return die("dense calibration");
    double a = pxb_cpu_s() - t0;
    t0 = pxb_cpu_s();
    if (px__infer_load(cal) < 0 ||
        px_trainer_calibrate_with(t, calibrate, calibrate_momentum, cal, CALIBRATE) < 0)
      return die("compact calibration");
    double c = pxb_cpu_s() - t0;
    if (a < dense_cal) dense_cal = a;
    if (c < compact_cal) compact_cal = c;
  }
  printf("model %s: %zu parameters, density %.4f, compact %zu parameters; engine chunk %d, %d "
         "thread(s); compact model and net built in %.3f s\n",
         argv[1], numel, (double)nz / (double)numel, px_model_numel(cm), b, threads, t_build);
  printf("multiply-adds per image: dense %.2f M, compact %.2f M (%.3f)\n", macs(dense) / 1e6,
         macs(cm) / 1e6, macs(cm) / macs(dense));
  printf("test set %lld images: accuracy dense %.4f, compact %.4f; predictions differ on %lld\n",
         (long long)ed.samples, ed.accuracy, ek.accuracy, (long long)k.differ);
  int np2, nconv = px__infer_convs(k.net, &np2);
  printf("compact convolutions in %s (%d of %d on the planar kernel); %lld of the %lld "
         "images rerun in f32 (margin below the bound)\n", px__infer_is_bf16(k.net) ? "bf16" : "f32",
         np2, nconv, (long long)rechecked, (long long)ed.samples);
  printf("evaluation   dense %.3f s  compact %.3f s  (%.2fx)   wall: %.3f s, %.3f s\n",
         dense_eval, compact_eval, dense_eval / compact_eval, wd, wk);
  printf("calibration  dense %.3f s  compact %.3f s  (%.2fx, %d batches of %d)\n", dense_cal,
         compact_cal, dense_cal / compact_cal, CALIBRATE, tc.batch);
  printf("both         dense %.3f s  compact %.3f s  (%.2fx)\n", dense_eval + dense_cal,
         compact_eval + compact_cal, (dense_eval + dense_cal) / (compact_eval + compact_cal));
  printf("RESULT compact_eval_disagreements %lld of %lld\n", (long long)k.differ,
         (long long)ed.samples);
  printf("RESULT compact_eval_speedup %.2f ratio\n", dense_eval / compact_eval);
  printf("RESULT compact_eval_total_speedup %.2f ratio\n",
         (dense_eval + dense_cal) / (compact_eval + compact_cal));
  px__infer_destroy(k.net);
  px__infer_destroy(cal);
  px_model_destroy(cm);
  px__compact_destroy(plan);
  px_trainer_destroy(t);
  return 0;
}
