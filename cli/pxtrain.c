/* pxtrain: single-process training of one model on one data set with the
 * PruneX engine (the same loop every pxworker runs between
 * synchronisations), with a progress bar, per-epoch figures and
 * safetensors checkpoints; `--bench` times training steps on random inputs
 * and prints `RESULT images_per_sec`. `--device` picks the CPU or a GPU
 * (`auto`: the first GPU when there is one). */
#include <errno.h>
#include <getopt.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/resource.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "prunex/check.h"
#include "prunex/cuda.h"
#include "prunex/data.h"
#include "prunex/export.h"
#include "prunex/nn.h"

static void usage(FILE *f) {
  fprintf(f,
          "usage: pxtrain [options]\n"
          "  --model NAME        %s (default resnet20)\n"
          "  --model-onnx FILE   an imported model: a CNN exported to ONNX (checked before\n"
          "                      anything runs; docs/user-guide.md lists the operators)\n"
          "  --dataset NAME      fashion-mnist | cifar10 | synthetic | folder (default fashion-mnist)\n"
          "  --data-dir DIR      data set directory (fashion-mnist: /usr/share/datasets/fashion-mnist;\n"
          "                      folder: DIR/train/CLASS/*.jpg|*.png and DIR/val/CLASS/...)\n"
          "  --image-size N      folder: images decoded to N x N (default 32); --bench: the\n"
          "                      input size, N or HxW (default: an imported model's own, else\n"
          "                      32)\n"
          "  --channels N        folder: 1 (grey) or 3 (R, G, B; default); --bench: the input\n"
          "                      channels of a built-in model (an imported one has its own)\n"
          "  --cache-budget-mb N folder: MiB of decoded images a split may cache (default a\n"
          "                      quarter of the memory); a larger split is decoded every\n"
          "                      epoch by the loader threads (streamed)\n"
          "  --loader-threads N  folder, streamed: decoding threads (default --threads, at\n"
          "                      most 8)\n"
          "  --prefetch N        folder, streamed: training batches prepared ahead (default 2)\n"
          "  --max-skipped X     folder: share of a split's images that may be corrupt and\n"
          "                      left out, (0, 1] (default 0.01)\n"
          "  --epochs N          epochs (default 15)\n"
          "  --batch N           batch size (default 128)\n"
          "  --lr X              peak learning rate (default 0.1)\n"
          "  --momentum X        (default 0.9)\n"
          "  --weight-decay X    (default 5e-4)\n"
          "  --nesterov          Nesterov momentum\n"
          "  --schedule S        constant | cosine | step (default cosine)\n"
          "  --no-augment        no random crop / flip\n"
          "  --threads N         compute threads (default: all cores)\n"
          "  --device D          cpu | cuda | cuda:N | auto (auto: the first GPU if there is one;\n"
          "                      default cpu)\n"
          "  --precision P       fp32 | bf16 (bf16 convolutions with f32 weights; on the CPU\n"
          "                      needs AVX512-BF16 or AMX;\n"
          "                      default fp32)\n"
          "  --seed N            initialisation and shuffling seed (default 1)\n"
          "  --save FILE         write the final model (safetensors)\n"
          "  --load FILE         start from a checkpoint (a compact one builds the model at\n"
          "                      the file's widths; --model defaults to the file's arch)\n"
          "  --export FILE       write FILE's compact model (pruned filters and channels\n"
          "                      removed) to --out DIR as <name>.compact.safetensors, and\n"
          "                      with --onnx also <name>.onnx; prints the sizes and exits\n"
          "  --out DIR           --export: the output directory (created if needed)\n"
          "  --onnx              --export: also write the ONNX model\n"
          "  --report            --export: print the result as `key value` lines, a\n"
          "                      failure as `error MESSAGE` (for programs: pxctl)\n"
          "  --count FILE        print FILE's dense and compact parameter counts as\n"
          "                      `key value` lines, writing nothing, and exit\n"
          "  --eval-only         evaluate (the loaded model) and exit\n"
          "  --no-progress       no progress bar\n"
          "  --bench             time training steps on random inputs of the model's shape\n"
          "                      (an imported model's input and classes; else 3x32x32, 10)\n"
          "  --steps N           --bench: timed steps (default 20)\n"
          "  --warmup N          --bench: untimed steps first (default 3)\n"
          "  -h, --help\n"
          "  --version\n",
          px_model_arch_list());
}

static int bad_arg(const char *opt, const char *val, const char *why) {
  fprintf(stderr, "pxtrain: %s '%s': %s\n", opt, val, why);
  usage(stderr);
  return 2;
}

static int parse_int(const char *opt, const char *s, long lo, long hi, int *out) {
  char *end;
  errno = 0;
  long v = strtol(s, &end, 10);
  if (errno || *end || end == s || v < lo || v > hi) return bad_arg(opt, s, "not a valid integer in range");
  *out = (int)v;
  return 0;
}

static int parse_double(const char *opt, const char *s, double lo, double hi, double *out) {
  char *end;
  errno = 0;
  double v = strtod(s, &end);
  if (errno || *end || end == s || !(v >= lo && v <= hi)) return bad_arg(opt, s, "not a valid number in range");
  *out = v;
  return 0;
}

/* "cpu", "cuda", "cuda:N" or "auto" (*is_auto set; resolved later). */
static int parse_device(const char *s, px_device_t *dev, int *is_auto) {
  *is_auto = 0;
  if (!strcmp(s, "cpu")) {
    *dev = px_device_cpu();
    return 0;
  }
  if (!strcmp(s, "auto")) {
    *is_auto = 1;
    *dev = px_device_cpu();
    return 0;
  }
  if (!strcmp(s, "cuda")) {
    *dev = px_device_cuda(0);
    return 0;
  }
  if (!strncmp(s, "cuda:", 5)) {
    char *end;
    errno = 0;
    long v = strtol(s + 5, &end, 10);
    if (!errno && end != s + 5 && !*end && v >= 0 && v < 1024) {
      *dev = px_device_cuda((int32_t)v);
      return 0;
    }
  }
  return bad_arg("--device", s, "expected cpu, cuda, cuda:N or auto");
}

/* Resolves --device auto and checks that a requested GPU exists, so that a
 * missing one is one clear line rather than an error deep in the set-up.
 * Returns 0 or the exit status (1: the device is not available). */
static int settle_device(px_device_t *dev, int is_auto) {
  int n = 0;
  px_status_t st = px_cuda_device_count(&n);
  if (is_auto) {
    *dev = st == PX_OK && n > 0 ? px_device_cuda(0) : px_device_cpu();
    return 0;
  }
  if (dev->kind != PX_DEVICE_CUDA) return 0;
  if (st == PX_ERR_NOT_BUILT) {
    fprintf(stderr, "pxtrain: --device cuda: this pxtrain was built without CUDA support\n");
    return 1;
  }
  if (st < 0) {
    fprintf(stderr, "pxtrain: --device cuda: %s\n", px_last_error());
    return 1;
  }
  if (n == 0) {
    fprintf(stderr, "pxtrain: --device cuda: no CUDA device on this machine\n");
    return 1;
  }
  if (dev->index >= n) {
    fprintf(stderr, "pxtrain: --device cuda:%d: this machine has %d CUDA device%s\n",
            (int)dev->index, n, n == 1 ? "" : "s");
    return 1;
  }
  return 0;
}

static double now_s(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

typedef struct {
  int enabled;
  int tty;
  double t0;
  int64_t epoch;
} progress_t;

static int on_step(void *ctx, int64_t step, int64_t steps, double loss, double acc) {
  progress_t *p = ctx;
  if (!p->enabled) return 0;
  int every = p->tty ? 1 : (int)(steps / 10 > 0 ? steps / 10 : 1);
  if (step % every && step != steps) return 0;
  double el = now_s() - p->t0;
  int width = 30, fill = (int)(width * step / steps);
  char bar[64];
  for (int i = 0; i < width; i++) bar[i] = i < fill ? '#' : '.';
  bar[width] = '\0';
  fprintf(stderr, "%sepoch %lld [%s] %lld/%lld loss %.4f acc %.2f%% %.0f s%s",
          p->tty ? "\r" : "", (long long)p->epoch + 1, bar, (long long)step, (long long)steps,
          loss, 100 * acc, el, p->tty ? "" : "\n");
  if (p->tty && step == steps) fputc('\n', stderr);
  fflush(stderr);
  return 0;
}

/* What --bench feeds: an imported model's own input and classes (the
 * file's), else 3x32x32 and 10 classes; --image-size (h, w > 0) and, for a
 * built-in model, --channels override. A size an imported graph does not
 * take is refused by px_model_create, naming both. */
static px_status_t bench_shape(const px_train_config_t *c, int h, int w,
                               px_synth_config_t *syn) {
  px_synth_config_default(syn);
  syn->seed = c->seed;
  if (c->onnx) {
    px_model_onnx_info_t info;
    PX_CHECK(px_model_onnx_check(c->onnx, &info));
    syn->channels = info.in_channels;
    syn->height = info.height;
    syn->width = info.width;
    syn->num_classes = info.num_classes;
  } else if (c->image_channels > 0) {
    syn->channels = c->image_channels;
  }
  if (h > 0) {
    syn->height = h;
    syn->width = w;
  }
  return PX_OK;
}

static int run_bench(const px_train_config_t *c, int steps, int warmup, int h, int w) {
  px_ops_t *ops;
  px_synth_config_t syn;
  if (bench_shape(c, h, w, &syn) < 0 || px_ops_create(c->device, c->threads, &ops) < 0) {
    fprintf(stderr, "pxtrain: %s\n", px_last_error());
    return 1;
  }
  px_model_config_t mc = {c->arch,  syn.channels, syn.num_classes, c->batch, syn.height,
                          syn.width, NULL,        0,               c->precision, c->onnx};
  px_model_t *m;
  px_sgd_t *sgd;
  px_sgd_config_t sc = {c->lr, c->momentum, c->weight_decay, c->nesterov};
  if (px_model_create(ops, &mc, &m) < 0 || px_model_init_params(m, c->seed) < 0 ||
      px_sgd_create(m, &sc, &sgd) < 0) {
    fprintf(stderr, "pxtrain: %s\n", px_last_error());
    return 1;
  }
  size_t per = (size_t)syn.channels * syn.height * syn.width;
  float *x = malloc((size_t)c->batch * per * sizeof(float));
  int32_t *y = malloc((size_t)c->batch * sizeof(int32_t));
  if (!x || !y) return 1;
  printf("pxtrain --bench: %s, %dx%dx%d inputs, batch %d, %s, %zu parameters, %.1f MB of model "
         "memory\n", c->arch, syn.channels, syn.height, syn.width, c->batch, px_ops_describe(ops),
         px_model_numel(m), px_model_memory_bytes(m) / 1e6);
  if (px_model_left_dense(m)[0]) printf("pxtrain --bench: left dense: %s\n", px_model_left_dense(m));
  double t0 = 0, loss_last = 0;
  for (int s = 0; s < warmup + steps; s++) {
    if (s == warmup) {
      if (px_ops_sync(ops) < 0) { /* a GPU may still run the warm-up's last step */
        fprintf(stderr, "pxtrain: %s\n", px_last_error());
        return 1;
      }
      t0 = now_s();
    }
    float loss;
    int64_t correct;
    if (px_synth_batch(&syn, s, c->batch, x, y) < 0 ||
        px_model_train_step(m, x, y, &loss, &correct) < 0 || px_sgd_step(sgd) < 0) {
      fprintf(stderr, "pxtrain: step %d: %s\n", s, px_last_error());
      return 1;
    }
    loss_last = loss;
  }
  if (px_ops_sync(ops) < 0) {
    fprintf(stderr, "pxtrain: %s\n", px_last_error());
    return 1;
  }
  double el = now_s() - t0;
  double ips = steps * (double)c->batch / el;
  printf("%d steps in %.2f s, last loss %.4f\n", steps, el, loss_last);
  struct rusage ru;
  getrusage(RUSAGE_SELF, &ru);
  printf("RESULT images_per_sec %.1f img/s\n", ips);
  printf("RESULT peak_rss_mb %.1f MB\n", ru.ru_maxrss / 1024.0);
  if (c->device.kind == PX_DEVICE_CUDA) {
    px_cuda_mem_stats_t ms;
    px_cuda_mem_stats(&ms);
    printf("RESULT gpu_peak_mb %.1f MB\n", ms.peak_bytes / 1e6);
  }
  free(x);
  free(y);
  px_sgd_destroy(sgd);
  px_model_destroy(m);
  px_ops_destroy(ops);
  return 0;
}

/* --export ... --report and --count: what pxctl, which links the client
 * part alone (no engine), reads back (cli/pxctl_engine.c). */
static int report_error(void) {
  printf("error %s\n", px_last_error());
  return 1;
}

static int run_export_report(const char *path, const char *dir, int onnx, const char *dataset) {
  px_export_report_t r;
  if (px_export_file(path, dir, onnx, dataset, &r) < 0) return report_error();
  printf("arch %s\ndense_params %zu\ncompact_params %zu\n", r.arch, r.dense_params,
         r.compact_params);
  printf("dense_macs %llu\ncompact_macs %llu\n", (unsigned long long)r.dense_macs,
         (unsigned long long)r.compact_macs);
  printf("dense_bytes %llu\ncompact_bytes %llu\nonnx_bytes %llu\n",
         (unsigned long long)r.dense_bytes, (unsigned long long)r.compact_bytes,
         (unsigned long long)r.onnx_bytes);
  printf("widths %s\ncompact_path %s\nonnx_path %s\n", r.widths, r.compact_path, r.onnx_path);
  return 0;
}

static int run_count(const char *path) {
  px_export_report_t r;
  if (px_export_count(path, &r) < 0) return report_error();
  printf("arch %s\ndense_params %zu\ncompact_params %zu\n", r.arch, r.dense_params,
         r.compact_params);
  printf("dense_macs %llu\ncompact_macs %llu\n", (unsigned long long)r.dense_macs,
         (unsigned long long)r.compact_macs);
  return 0;
}

static int run_export(const char *path, const char *dir, int onnx, const char *dataset) {
  px_export_report_t r;
  if (px_export_file(path, dir, onnx, dataset, &r) < 0) {
    fprintf(stderr, "pxtrain: %s\n", px_last_error());
    return 1;
  }
  printf("pxtrain: %s, %zu -> %zu parameters (%.1f%%), %.2f -> %.2f MB\n", r.arch,
         r.dense_params, r.compact_params, 100.0 * r.compact_params / r.dense_params,
         r.dense_bytes / 1e6, r.compact_bytes / 1e6);
  printf("widths  %s\n", r.widths);
  printf("MACs    %.2f M -> %.2f M per image (%.1f%%)\n", r.dense_macs / 1e6,
         r.compact_macs / 1e6, r.dense_macs ? 100.0 * r.compact_macs / r.dense_macs : 0.0);
  printf("compact %s\n", r.compact_path);
  if (onnx) printf("onnx    %s (%.2f MB)\n", r.onnx_path, r.onnx_bytes / 1e6);
  return 0;
}

/* pxtrain's command line. */
typedef struct {
  px_train_config_t c;
  const char *save, *load, *export_path, *out_dir, *count_path;
  int onnx, report, model_given, dataset_given;
  int bench, steps, warmup, eval_only, progress, device_auto;
  int image_h, image_w; /* --image-size as given (0: not given) */
} pxtrain_args_t;

enum { O_MODEL = 256, O_DATASET, O_DATADIR, O_EPOCHS, O_BATCH, O_LR, O_MOM, O_WD, O_NEST,
       O_SCHED, O_NOAUG, O_THREADS, O_SEED, O_SAVE, O_LOAD, O_EVAL, O_NOPROG, O_BENCH, O_STEPS,
       O_WARMUP, O_DEVICE, O_EXPORT, O_OUT, O_ONNX, O_PRECISION, O_VERSION, O_IMGSIZE,
       O_CHANNELS, O_MODEL_ONNX, O_REPORT, O_COUNT, O_CACHE_MB, O_LOADERS, O_PREFETCH,
       O_MAX_SKIPPED };
static const struct option pxtrain_opts[] = {
    {"model", required_argument, 0, O_MODEL},
    {"dataset", required_argument, 0, O_DATASET},
    {"data-dir", required_argument, 0, O_DATADIR},
    {"epochs", required_argument, 0, O_EPOCHS},
    {"batch", required_argument, 0, O_BATCH},
    {"lr", required_argument, 0, O_LR},
    {"momentum", required_argument, 0, O_MOM},
    {"weight-decay", required_argument, 0, O_WD},
    {"nesterov", no_argument, 0, O_NEST},
    {"schedule", required_argument, 0, O_SCHED},
    {"no-augment", no_argument, 0, O_NOAUG},
    {"threads", required_argument, 0, O_THREADS},
    {"seed", required_argument, 0, O_SEED},
    {"save", required_argument, 0, O_SAVE},
    {"load", required_argument, 0, O_LOAD},
    {"eval-only", no_argument, 0, O_EVAL},
    {"no-progress", no_argument, 0, O_NOPROG},
    {"bench", no_argument, 0, O_BENCH},
    {"steps", required_argument, 0, O_STEPS},
    {"warmup", required_argument, 0, O_WARMUP},
    {"device", required_argument, 0, O_DEVICE},
    {"precision", required_argument, 0, O_PRECISION},
    {"export", required_argument, 0, O_EXPORT},
    {"out", required_argument, 0, O_OUT},
    {"onnx", no_argument, 0, O_ONNX},
    {"report", no_argument, 0, O_REPORT},
    {"count", required_argument, 0, O_COUNT},
    {"model-onnx", required_argument, 0, O_MODEL_ONNX},
    {"image-size", required_argument, 0, O_IMGSIZE},
    {"channels", required_argument, 0, O_CHANNELS},
    {"cache-budget-mb", required_argument, 0, O_CACHE_MB},
    {"loader-threads", required_argument, 0, O_LOADERS},
    {"prefetch", required_argument, 0, O_PREFETCH},
    {"max-skipped", required_argument, 0, O_MAX_SKIPPED},
    {"help", no_argument, 0, 'h'},
    {"version", no_argument, 0, O_VERSION},
    {0, 0, 0, 0},
};

/* --image-size N or HxW, each side 8 to PX_IMAGE_MAX_SIZE: 0 or the exit
 * status of a bad value. */
static int parse_image_size(const char *s, int *h, int *w) {
  char side[32];
  const char *x = strchr(s, 'x');
  if (!x) {
    if (parse_int("--image-size", s, 8, PX_IMAGE_MAX_SIZE, h)) return 2;
    *w = *h;
    return 0;
  }
  if ((size_t)(x - s) >= sizeof side) return bad_arg("--image-size", s, "expected N or HxW");
  snprintf(side, sizeof side, "%.*s", (int)(x - s), s);
  if (parse_int("--image-size", side, 8, PX_IMAGE_MAX_SIZE, h) ||
      parse_int("--image-size", x + 1, 8, PX_IMAGE_MAX_SIZE, w))
    return 2;
  return 0;
}

/* An option of the model or the data: 0, 1 when it is not one, or the
 * exit status of a bad value. */
static int parse_data_option(pxtrain_args_t *a, int o) {
  int rc;
  switch (o) {
    case O_MODEL:
      if (!px_model_arch_known(optarg)) return bad_arg("--model", optarg, "unknown architecture");
      a->c.arch = optarg;
      a->model_given = 1;
      break;
    case O_MODEL_ONNX:
      if (px_model_onnx_check(optarg, NULL) < 0) {
        fprintf(stderr, "pxtrain: --model-onnx: %s\n", px_last_error());
        return 2;
      }
      a->c.onnx = optarg;
      a->c.arch = "onnx";
      a->model_given = 1;
      break;
    case O_DATASET:
      if (strcmp(optarg, "fashion-mnist") && strcmp(optarg, "cifar10") &&
          strcmp(optarg, "synthetic") && strcmp(optarg, "folder"))
        return bad_arg("--dataset", optarg, "expected fashion-mnist, cifar10, synthetic or folder");
      a->c.dataset = optarg;
      a->dataset_given = 1;
      break;
    case O_DATADIR: a->c.data_dir = optarg; break;
    case O_IMGSIZE:
      if ((rc = parse_image_size(optarg, &a->image_h, &a->image_w))) return rc;
      a->c.image_size = a->image_h;
      break;
    case O_CHANNELS:
      if ((rc = parse_int("--channels", optarg, 1, 3, &a->c.image_channels))) return rc;
      if (a->c.image_channels == 2) return bad_arg("--channels", optarg, "expected 1 or 3");
      break;
    default: return 1;
  }
  return 0;
}

/* An option of training, benchmarking or export: 0, 1 when it is not one,
 * or the exit status of a bad value (or of --help and --version, answered
 * here as -1 after printing). */
static int parse_run_option(pxtrain_args_t *a, int o) {
  int rc, seed_i;
  switch (o) {
    case O_EPOCHS:
      if ((rc = parse_int("--epochs", optarg, 1, 100000, &a->c.epochs))) return rc;
      break;
    case O_BATCH:
      if ((rc = parse_int("--batch", optarg, 1, 1 << 20, &a->c.batch))) return rc;
      break;
    case O_LR:
      if ((rc = parse_double("--lr", optarg, 1e-12, 1e6, &a->c.lr))) return rc;
      break;
    case O_MOM:
      if ((rc = parse_double("--momentum", optarg, 0, 0.999999, &a->c.momentum))) return rc;
      break;
    case O_WD:
      if ((rc = parse_double("--weight-decay", optarg, 0, 1, &a->c.weight_decay))) return rc;
      break;
    case O_NEST: a->c.nesterov = 1; break;
    case O_SCHED:
      if (strcmp(optarg, "constant") && strcmp(optarg, "cosine") && strcmp(optarg, "step"))
        return bad_arg("--schedule", optarg, "expected constant, cosine or step");
      a->c.lr_schedule = optarg;
      break;
    case O_NOAUG: a->c.augment = 0; break;
    case O_THREADS:
      if ((rc = parse_int("--threads", optarg, 1, 1024, &a->c.threads))) return rc;
      break;
    case O_SEED:
      if ((rc = parse_int("--seed", optarg, 0, 2147483647, &seed_i))) return rc;
      a->c.seed = (uint64_t)seed_i;
      break;
    case O_SAVE: a->save = optarg; break;
    case O_LOAD: a->load = optarg; break;
    case O_EVAL: a->eval_only = 1; break;
    case O_NOPROG: a->progress = 0; break;
    case O_BENCH: a->bench = 1; break;
    case O_STEPS:
      if ((rc = parse_int("--steps", optarg, 1, 1000000, &a->steps))) return rc;
      break;
    case O_WARMUP:
      if ((rc = parse_int("--warmup", optarg, 0, 1000000, &a->warmup))) return rc;
      break;
    case O_DEVICE:
      if ((rc = parse_device(optarg, &a->c.device, &a->device_auto))) return rc;
      break;
    case O_PRECISION:
      if (!strcmp(optarg, "fp32"))
        a->c.precision = PX_PRECISION_FP32;
      else if (!strcmp(optarg, "bf16"))
        a->c.precision = PX_PRECISION_BF16;
      else
        return bad_arg("--precision", optarg, "expected fp32 or bf16");
      break;
    case O_EXPORT: a->export_path = optarg; break;
    case O_OUT: a->out_dir = optarg; break;
    case O_ONNX: a->onnx = 1; break;
    case O_REPORT: a->report = 1; break;
    case O_COUNT: a->count_path = optarg; break;
    case O_CACHE_MB: { /* MiB, as the spec's dataset.cache_budget_mb */
      int mb;
      if ((rc = parse_int("--cache-budget-mb", optarg, 1, 2147483647, &mb))) return rc;
      a->c.cache_budget = (int64_t)mb << 20;
      break;
    }
    case O_LOADERS:
      if ((rc = parse_int("--loader-threads", optarg, 1, 256, &a->c.loader_threads))) return rc;
      break;
    case O_PREFETCH:
      if ((rc = parse_int("--prefetch", optarg, 1, 16, &a->c.loader_prefetch))) return rc;
      break;
    case O_MAX_SKIPPED:
      if ((rc = parse_double("--max-skipped", optarg, 1e-9, 1, &a->c.max_skipped))) return rc;
      break;
    case 'h': usage(stdout); return -1;
    case O_VERSION: printf("pxtrain %s\n", px_version()); return -1;
    default: return 1;
  }
  return 0;
}

/* The whole command line into *a. -1 to run, else the exit status. */
static int parse_args(int argc, char **argv, pxtrain_args_t *a) {
  memset(a, 0, sizeof *a);
  px_train_config_default(&a->c);
  a->steps = 20;
  a->warmup = 3;
  a->progress = 1;
  int o;
  opterr = 0;
  while ((o = getopt_long(argc, argv, "h", pxtrain_opts, NULL)) != -1) {
    int rc = parse_data_option(a, o);
    if (rc == 1) rc = parse_run_option(a, o);
    if (rc == -1) return 0; /* --help, --version */
    if (rc == 1) {
      fprintf(stderr, "pxtrain: unknown or incomplete option '%s'\n", argv[optind - 1]);
      usage(stderr);
      return 2;
    }
    if (rc) return rc;
  }
  if (optind < argc) {
    fprintf(stderr, "pxtrain: unexpected argument '%s'\n", argv[optind]);
    usage(stderr);
    return 2;
  }
  if (a->c.nesterov && a->c.momentum == 0) {
    fprintf(stderr, "pxtrain: --nesterov needs a momentum > 0\n");
    return 2;
  }
  if (a->image_h != a->image_w && !a->bench) {
    fprintf(stderr, "pxtrain: --image-size %dx%d: only --bench takes a size that is not square "
                    "(a folder's images are decoded N x N)\n", a->image_h, a->image_w);
    return 2;
  }
  if (a->count_path) return run_count(a->count_path);
  if (a->export_path || a->out_dir || a->onnx || a->report) {
    if (!a->export_path || !a->out_dir) {
      fprintf(stderr, "pxtrain: --export FILE and --out DIR go together (--onnx and --report "
                      "with them)\n");
      return 2;
    }
    /* without --dataset the export infers it from the model (see export.h) */
    const char *ds = a->dataset_given ? a->c.dataset : NULL;
    return a->report ? run_export_report(a->export_path, a->out_dir, a->onnx, ds)
                     : run_export(a->export_path, a->out_dir, a->onnx, ds);
  }
  return -1;
}

/* --eval-only: the test set once. The exit status. */
static int run_eval_only(px_trainer_t *t) {
  px_eval_stats_t ev;
  if (px_trainer_evaluate(t, &ev) < 0) {
    fprintf(stderr, "pxtrain: %s\n", px_last_error());
    return 1;
  }
  printf("test loss %.4f, test accuracy %.2f%% (%lld samples)\n", ev.loss, 100 * ev.accuracy,
         (long long)ev.samples);
  return 0;
}

/* The epochs, each tested, then the final figures and --save. The exit
 * status. */
static int run_training(const pxtrain_args_t *a, px_trainer_t *t) {
  const px_train_config_t *cfg = &a->c;
  px_model_t *m = px_trainer_model(t);
  int status = 0;
  px_eval_stats_t ev;
  progress_t pr = {a->progress, isatty(2), 0, 0};
  double start = now_s(), best = 0;
  for (int e = 0; e < cfg->epochs; e++) {
    px_epoch_stats_t es;
    pr.t0 = now_s();
    pr.epoch = e;
    if (px_trainer_epoch(t, e, on_step, &pr, &es) < 0 || px_trainer_evaluate(t, &ev) < 0) {
      fprintf(stderr, "pxtrain: epoch %d: %s\n", e + 1, px_last_error());
      status = 1;
      break;
    }
    if (ev.accuracy > best) best = ev.accuracy;
    printf(
        "epoch %2d/%d  loss %.4f  train acc %.2f%%  test loss %.4f  test acc %.2f%%  "
        "%.0f img/s  %.1f s\n",
        e + 1, cfg->epochs, es.loss, 100 * es.accuracy, ev.loss, 100 * ev.accuracy,
        es.images_per_sec, es.seconds + ev.seconds);
    fflush(stdout);
  }
  if (!status) {
    printf("done: final test accuracy %.2f%% (best %.2f%%) in %.1f s\n", 100 * ev.accuracy,
           100 * best, now_s() - start);
    if (a->save) {
      const char *kv[14]; /* a folder's input contract, for the ONNX export */
      int nkv = px_trainer_input_meta(t, kv, 7);
      if (px_model_save(m, px_trainer_sgd(t), a->save, kv, nkv) < 0) {
        fprintf(stderr, "pxtrain: %s\n", px_last_error());
        status = 1;
      } else {
        printf("saved %s\n", a->save);
      }
    }
  }
  return status;
}

int main(int argc, char **argv) {
  pxtrain_args_t a;
  int rc = parse_args(argc, argv, &a);
  if (rc >= 0) return rc;
  px_train_config_t *cfg = &a.c;
  if ((rc = settle_device(&cfg->device, a.device_auto))) return rc;
  if (a.bench) return run_bench(cfg, a.steps, a.warmup, a.image_h, a.image_w);
  int32_t widths[512];
  if (a.load) { /* a compact checkpoint builds the model at its widths */
    px_model_config_t fc;
    if (px_model_file_config(a.load, &fc, widths, 512) < 0) {
      fprintf(stderr, "pxtrain: %s\n", px_last_error());
      return 1;
    }
    if (!a.model_given) {
      cfg->arch = fc.arch;
      cfg->onnx = fc.onnx;
    }
    cfg->widths = fc.widths;
    cfg->nwidths = fc.nwidths;
  }
  px_trainer_t *t;
  if (px_trainer_create(cfg, &t) < 0) {
    fprintf(stderr, "pxtrain: %s\n", px_last_error());
    return 1;
  }
  px_model_t *m = px_trainer_model(t);
  if (a.load && px_model_load(m, px_trainer_sgd(t), a.load) < 0) {
    fprintf(stderr, "pxtrain: %s\n", px_last_error());
    px_trainer_destroy(t);
    return 1;
  }
  if (a.eval_only) /* no training happens: no training settings */
    printf("pxtrain: evaluating %s%s%s%s on the %s test set, %zu parameters, batch %d, %s\n",
           cfg->arch, cfg->widths ? " (compact)" : "",
           a.load ? " from " : " (untrained: no --load)", a.load ? a.load : "", cfg->dataset,
           px_model_numel(m), cfg->batch, px_ops_describe(px_model_ops(m)));
  else
    printf("pxtrain: %s%s on %s, %zu parameters, batch %d, %d epochs, lr %g (%s), %s\n", cfg->arch,
           cfg->widths ? " (compact)" : "", cfg->dataset, px_model_numel(m), cfg->batch,
           cfg->epochs, cfg->lr, cfg->lr_schedule, px_ops_describe(px_model_ops(m)));
  if (px_model_left_dense(m)[0]) printf("pxtrain: left dense: %s\n", px_model_left_dense(m));
  int status = a.eval_only ? run_eval_only(t) : run_training(&a, t);
  px_trainer_destroy(t);
  return status;
}
