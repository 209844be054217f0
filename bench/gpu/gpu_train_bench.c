/* GPU training throughput of the PruneX engine: a model of the ResNet family
 * on a CUDA ops context, trained with SGD (momentum 0.9, weight decay 5e-4)
 * on a few pre-made random batches of 3x32x32 inputs, 10 classes, copied from
 * page-locked host memory every step as in real training (the trainer's
 * loader batches on a GPU are page-locked too). `--model-onnx FILE` trains an
 * imported network instead, at the file's own input size and classes (the
 * ImageNet-size bench, bench/gpu/imagenet.sh: torchvision's ResNet-50 at
 * 3x224x224, 1000 classes), and prints its multiply-accumulates per image
 * (RESULT macs_per_image) for the model FLOPs utilisation. Times `--steps` steps after
 * `--warmup` untimed ones (the device is synchronised at both ends) and prints
 * RESULT images_per_sec and the GPU memory peak (every device block the
 * engine held at once, cuDNN workspaces included), with the blocks it was
 * made of by name. `--precision bf16` trains
 * with bf16 activations (PX_CUDA_LAYOUT=nchw: fp32 in the old NCHW layout).
 * With PX_BENCH_CUDA_PROFILE=1 the timed steps are bracketed by
 * cudaProfilerStart/Stop, so `ncu --profile-from-start off` (Nsight Compute)
 * times only their kernels, not cuDNN's algorithm search in the warm-up.
 * `--check` only reports
 * whether a GPU can be used (exit 0) or why not (exit 1). bench/gpu/run.sh
 * runs it beside PyTorch. */
#include <dlfcn.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "prunex/cuda.h"
#include "prunex/data.h"
#include "prunex/nn.h"
#include "../px_bench_util.h"

static int fail(const char *what) { return pxb_fail("px_bench_gpu_train", what); }

/* cudaProfilerStart or cudaProfilerStop of the CUDA runtime libpxcore loaded,
 * when PX_BENCH_CUDA_PROFILE=1 (looked up: the driver does not link CUDA). */
static void profiler(const char *fn) {
  const char *e = getenv("PX_BENCH_CUDA_PROFILE");
  if (!e || strcmp(e, "1")) return;
  int (*f)(void) = (int (*)(void))dlsym(RTLD_DEFAULT, fn);
  if (!f || f() != 0) fprintf(stderr, "px_bench_gpu_train: %s unavailable or failed\n", fn);
}

static int parse_int(const char *s, int lo, int hi, int *out) {
  char *end;
  errno = 0;
  long v = strtol(s, &end, 10);
  if (errno || *end || end == s || v < lo || v > hi) return -1;
  *out = (int)v;
  return 0;
}

static void usage(FILE *f) {
  fprintf(f, "usage: px_bench_gpu_train [--model NAME | --model-onnx FILE] [--batch N]\n"
             "                          [--steps N] [--warmup N] [--tf32 0|1]\n"
             "                          [--precision fp32|bf16] [--device N] [--check]\n");
}

/* 0 when device `dev` is usable, else prints why and returns 1. */
static int check_gpu(int dev) {
  int n = 0;
  px_status_t st = px_cuda_device_count(&n);
  if (st == PX_ERR_NOT_BUILT) {
    fprintf(stderr, "px_bench_gpu_train: libpxcore was built without CUDA (PX_WITH_CUDA=OFF)\n");
    return 1;
  }
  if (st < 0) return fail("CUDA");
  if (n == 0) {
    fprintf(stderr, "px_bench_gpu_train: no CUDA GPU on this machine\n");
    return 1;
  }
  if (dev >= n) {
    fprintf(stderr, "px_bench_gpu_train: CUDA device %d does not exist (%d present)\n", dev, n);
    return 1;
  }
  return 0;
}

int main(int argc, char **argv) {
  const char *arch = "resnet18", *onnx = NULL;
  int batch = 128, steps = 30, warmup = 5, tf32 = 1, dev = 0, check_only = 0, bf16 = 0;
  for (int i = 1; i < argc; i++) {
    const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
    int bad = 0;
    if (!strcmp(a, "--check")) {
      check_only = 1;
      continue;
    }
    if (!strcmp(a, "-h") || !strcmp(a, "--help")) {
      usage(stdout);
      return 0;
    }
    if (!v) bad = 1;
    else if (!strcmp(a, "--model")) arch = v;
    else if (!strcmp(a, "--model-onnx")) onnx = v;
    else if (!strcmp(a, "--batch")) bad = parse_int(v, 1, 1 << 16, &batch);
    else if (!strcmp(a, "--steps")) bad = parse_int(v, 1, 1000000, &steps);
    else if (!strcmp(a, "--warmup")) bad = parse_int(v, 0, 1000000, &warmup);
    else if (!strcmp(a, "--tf32")) bad = parse_int(v, 0, 1, &tf32);
    else if (!strcmp(a, "--device")) bad = parse_int(v, 0, 1023, &dev);
    else if (!strcmp(a, "--precision")) {
      bad = strcmp(v, "fp32") && strcmp(v, "bf16");
      bf16 = !strcmp(v, "bf16");
    }
    else bad = 1;
    if (bad) {
      fprintf(stderr, "px_bench_gpu_train: bad argument '%s'\n", a);
      usage(stderr);
      return 2;
    }
    i++;
  }
  if (!onnx && !px_model_arch_known(arch)) {
    fprintf(stderr, "px_bench_gpu_train: unknown model '%s' (%s)\n", arch, px_model_arch_list());
    return 2;
  }
  if (check_gpu(dev)) return 1;
  if (check_only) {
    char name[128];
    uint64_t mem = 0;
    if (px_cuda_device_info(dev, name, sizeof name, &mem) < 0) return fail("device info");
    printf("cuda:%d %s, %.1f GiB\n", dev, name, mem / 1073741824.0);
    return 0;
  }

  px_ops_t *ops = NULL;
  px_model_t *m = NULL;
  px_sgd_t *sgd = NULL;
  if (px_ops_create(px_device_cuda(dev), 0, &ops) < 0) return fail("ops");
  if (px_ops_set_tf32(ops, tf32) < 0) return fail("tf32");
  px_model_onnx_info_t info = {.in_channels = 3, .height = 32, .width = 32, .num_classes = 10};
  if (onnx && px_model_onnx_check(onnx, &info) < 0) return fail(onnx);
  px_model_config_t mc = {onnx ? "" : arch, info.in_channels, info.num_classes, batch,
                          info.height, info.width, NULL, 0,
                          bf16 ? PX_PRECISION_BF16 : PX_PRECISION_FP32, onnx};
  px_sgd_config_t sc = {0.1, 0.9, 5e-4, 0};
  if (px_model_create(ops, &mc, &m) < 0 || px_model_init_params(m, 1) < 0 ||
      px_sgd_create(m, &sc, &sgd) < 0)
    return fail("model");

  enum { NBATCH = 4 };
  const size_t per = (size_t)info.in_channels * info.height * info.width;
  /* page-locked, as the trainer's loader batches on a GPU: copied by DMA */
  float *x = px_cuda_host_alloc(dev, NBATCH * (size_t)batch * per * sizeof *x);
  int32_t *y = malloc(NBATCH * (size_t)batch * sizeof *y);
  if (!x || !y) {
    fprintf(stderr, "px_bench_gpu_train: out of host memory\n");
    return 1;
  }
  px_synth_config_t syn;
  px_synth_config_default(&syn);
  syn.channels = info.in_channels;
  syn.height = info.height;
  syn.width = info.width;
  syn.num_classes = info.num_classes;
  for (int b = 0; b < NBATCH; b++)
    if (px_synth_batch(&syn, b, batch, x + (size_t)b * batch * per, y + (size_t)b * batch) < 0)
      return fail("synthetic batch");

  printf("px_bench_gpu_train: %s, %dx%dx%d inputs, %d classes, batch %d, %s, %s, %zu parameters\n",
         onnx ? onnx : arch, info.in_channels, info.height, info.width, info.num_classes, batch,
         bf16 ? "bf16" : "fp32", px_ops_describe(ops), px_model_numel(m));
  printf("RESULT macs_per_image %llu\n", (unsigned long long)px_model_macs(m));
  /* the memory plan's arena, to set beside px_bench_mem_plan's CPU figures */
  const char *plan = getenv("PX_MEM_PLAN");
  printf("working memory %.1f MB (activations, their gradients, BN statistics; PX_MEM_PLAN %s)\n",
         px_model_activation_bytes(m) / 1e6, plan && *plan ? plan : "unset: the default");
  double t0 = 0, loss_last = 0;
  for (int s = 0; s < warmup + steps; s++) {
    if (s == warmup) {
      if (px_ops_sync(ops) < 0) return fail("sync");
      profiler("cudaProfilerStart");
      t0 = px__now();
    }
    const int b = s % NBATCH;
    float loss;
    int64_t correct;
    if (px_model_train_step(m, x + (size_t)b * batch * per, y + (size_t)b * batch, &loss,
                            &correct) < 0 ||
        px_sgd_step(sgd) < 0)
      return fail("training step");
    loss_last = loss;
  }
  if (px_ops_sync(ops) < 0) return fail("sync");
  const double el = px__now() - t0;
  profiler("cudaProfilerStop");
  px_cuda_mem_stats_t ms;
  px_cuda_mem_stats(&ms);
  printf("%d steps in %.3f s (%.2f ms/step), last loss %.4f\n", steps, el, 1e3 * el / steps,
         loss_last);
  printf("RESULT images_per_sec %.1f img/s\n", steps * (double)batch / el);
  printf("RESULT gpu_peak_mb %.1f MB\n", ms.peak_bytes / 1e6);
  /* what the peak was made of, so a peak above PyTorch's says where */
  px_cuda_mem_use_t use[8];
  const int nuse = px_cuda_mem_peak_uses(use, 8);
  printf("gpu peak by name:");
  for (int i = 0; i < nuse; i++)
    printf("%s %s %.1f MB (%d block%s)", i ? "," : "", use[i].name, use[i].bytes / 1e6,
           use[i].blocks, use[i].blocks == 1 ? "" : "s");
  printf("\n");
  px_cuda_host_free(x);
  free(y);
  px_sgd_destroy(sgd);
  px_model_destroy(m);
  px_ops_destroy(ops);
  return 0;
}
