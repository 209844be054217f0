/* Shared test helpers: reproducible random numbers and float comparison. */
#include "px_test_util.h"

#include <fnmatch.h>
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cmocka.h>

#include "prunex/cuda.h"
#include "prunex/data.h"
#include "prunex/jobspec.h"

uint64_t px_test_fnv64(const void *p, size_t n) {
  const unsigned char *c = p;
  uint64_t h = 1469598103934665603ull;
  for (size_t i = 0; i < n; i++) h = (h ^ c[i]) * 1099511628211ull;
  return h;
}

/* CUDA devices a child process sees (0 when none or the probe failed). */
static int px_test_probe_gpus(void) {
  pid_t pid = fork();
  if (pid < 0) return 0;
  if (pid == 0) {
    int n = 0;
    _exit(px_cuda_device_count(&n) == PX_OK && n > 0 ? (n > 100 ? 100 : n) : 0);
  }
  int ws = 0;
  if (waitpid(pid, &ws, 0) != pid || !WIFEXITED(ws)) return 0;
  return WEXITSTATUS(ws);
}

int px_test_gpu_ready(const char *what) {
  static int gpus = -1;
  if (!px_cuda_built()) {
    printf("libpxcore was built without CUDA: %s skipped\n", what);
    return 0;
  }
  if (gpus < 0) gpus = px_test_probe_gpus();
  if (gpus == 0) printf("no CUDA device on this machine: %s skipped\n", what);
  return gpus > 0;
}

void px_test_rng_seed(px_test_rng_t *r, uint64_t seed) {
  r->s = seed ? seed : 0x9E3779B97F4A7C15ull;
}

uint64_t px_test_rng_u64(px_test_rng_t *r) {
  r->s ^= r->s >> 12;
  r->s ^= r->s << 25;
  r->s ^= r->s >> 27;
  return r->s * 0x2545F4914F6CDD1Dull;
}

double px_test_rng_uniform(px_test_rng_t *r) {
  return (double)(px_test_rng_u64(r) >> 11) * (1.0 / 9007199254740992.0);
}

double px_test_rng_normal(px_test_rng_t *r) {
  double u1 = px_test_rng_uniform(r), u2 = px_test_rng_uniform(r);
  if (u1 < 1e-300) u1 = 1e-300;
  return sqrt(-2.0 * log(u1)) * cos(6.283185307179586 * u2);
}

void px_test_fill_normal(px_test_rng_t *r, float *x, size_t n) {
  for (size_t i = 0; i < n; i++) x[i] = (float)px_test_rng_normal(r);
}

double px_test_rel_l2(const float *a, const float *b, size_t n) {
  double num = 0, den = 0;
  for (size_t i = 0; i < n; i++) {
    num += ((double)a[i] - b[i]) * ((double)a[i] - b[i]);
    den += (double)b[i] * b[i];
  }
  return den > 0 ? sqrt(num / den) : sqrt(num);
}

double px_test_cosine(const float *a, const float *b, size_t n) {
  double dot = 0, na = 0, nb = 0;
  for (size_t i = 0; i < n; i++) {
    dot += (double)a[i] * b[i];
    na += (double)a[i] * a[i];
    nb += (double)b[i] * b[i];
  }
  return na > 0 && nb > 0 ? dot / sqrt(na * nb) : 0.0;
}

double px_test_max_rel_err(const float *a, const float *b, size_t n) {
  double worst = 0.0;
  for (size_t i = 0; i < n; i++) {
    double d = fabs((double)a[i] - (double)b[i]);
    double m = fabs((double)b[i]);
    double e = d / (m > 1.0 ? m : 1.0);
    if (e > worst || isnan(e)) worst = isnan(e) ? INFINITY : e;
  }
  return worst;
}

static void px__be32(uint8_t *p, uint32_t v) {
  p[0] = (uint8_t)(v >> 24);
  p[1] = (uint8_t)(v >> 16);
  p[2] = (uint8_t)(v >> 8);
  p[3] = (uint8_t)v;
}

/* The first n samples of a split as IDX files (the loader pads 28x28 to
 * 32x32; undo that here). */
static int px__write_idx(const px_dataset_t *ds, const char *dir, const char *prefix, int n) {
  const uint8_t *img = px_dataset_images(ds), *lab = px_dataset_labels(ds);
  size_t ib = 16 + (size_t)n * 784, lb = 8 + (size_t)n;
  uint8_t *a = malloc(ib), *b = malloc(lb);
  int ok = a && b;
  if (ok) {
    px__be32(a, 0x803);
    px__be32(a + 4, (uint32_t)n);
    px__be32(a + 8, 28);
    px__be32(a + 12, 28);
    px__be32(b, 0x801);
    px__be32(b + 4, (uint32_t)n);
    for (int i = 0; i < n; i++) {
      for (int r = 0; r < 28; r++)
        memcpy(a + 16 + (size_t)i * 784 + r * 28, img + (size_t)i * 1024 + (r + 2) * 32 + 2, 28);
      b[8 + i] = lab[i];
    }
    char p1[512], p2[512];
    snprintf(p1, sizeof p1, "%s/%s-images-idx3-ubyte", dir, prefix);
    snprintf(p2, sizeof p2, "%s/%s-labels-idx1-ubyte", dir, prefix);
    ok = px_data_write_file(p1, a, ib) == PX_OK && px_data_write_file(p2, b, lb) == PX_OK;
  }
  free(a);
  free(b);
  return ok;
}

int px_test_write_fmnist_subset(const char *dir, int ntrain, int ntest) {
  const char *src = "/usr/share/datasets/fashion-mnist";
  if (access(src, R_OK) != 0) return 0;
  px_dataset_t *tr = NULL, *te = NULL;
  int ok = px_dataset_load_fashion_mnist(src, PX_SPLIT_TRAIN, &tr) == PX_OK &&
           px_dataset_load_fashion_mnist(src, PX_SPLIT_TEST, &te) == PX_OK &&
           px__write_idx(tr, dir, "train", ntrain) && px__write_idx(te, dir, "t10k", ntest);
  px_dataset_destroy(tr);
  px_dataset_destroy(te);
  return ok ? 1 : -1;
}

int px_test_fmnist_fixture_n(char *dir, size_t cap, const char *tag, int ntrain, int ntest) {
  dir[0] = 0;
  if (access("/usr/share/datasets/fashion-mnist", R_OK) != 0) return 0;
  snprintf(dir, cap, "/tmp/%s_XXXXXX", tag);
  if (!mkdtemp(dir)) return -1;
  return px_test_write_fmnist_subset(dir, ntrain, ntest) == 1 ? 0 : -1;
}

int px_test_fmnist_fixture(char *dir, size_t cap, const char *tag) {
  return px_test_fmnist_fixture_n(dir, cap, tag, 512, 128);
}

void px_test_rank_train_config(px_train_config_t *tc, const char *dir, int rank, int size) {
  px_train_config_default(tc);
  tc->data_dir = dir;
  tc->batch = 16;
  tc->threads = 1;
  tc->epochs = 1;
  tc->lr = 0.05;
  tc->augment = 0;
  tc->rank = rank;
  tc->world_size = size;
  tc->seed = 1 + (uint64_t)rank;
}

int px_test_spec_outcome(const char *yaml, const char *needle) {
  Prunex__V1__JobSpec *spec = NULL;
  px_status_t st = px_jobspec_parse_string(yaml, strlen(yaml), "test.yaml", &spec);
  int ok = needle ? st != PX_OK && strstr(px_last_error(), needle) != NULL : st == PX_OK;
  if (needle) printf("%s\n", px_last_error());
  px_jobspec_free(spec);
  return ok;
}

char *px_test_read_file(const char *path, size_t *len) {
  FILE *f = fopen(path, "rb");
  if (!f) return NULL;
  char *b = NULL;
  long n = -1;
  if (fseek(f, 0, SEEK_END) == 0) n = ftell(f);
  if (n >= 0 && fseek(f, 0, SEEK_SET) == 0) b = malloc((size_t)n + 1);
  if (b && fread(b, 1, (size_t)n, f) != (size_t)n) {
    free(b);
    b = NULL;
  }
  fclose(f);
  if (b) {
    b[n] = '\0';
    *len = (size_t)n;
  }
  return b;
}

size_t px_test_read_bytes(const char *dir, const char *name, void *buf, size_t bytes) {
  char p[512];
  snprintf(p, sizeof p, "%s/%s", dir, name);
  FILE *f = fopen(p, "rb");
  if (!f) return 0;
  size_t n = fread(buf, 1, bytes, f);
  fclose(f);
  return n;
}

int px_test_capture(const char *cmd, char *out, size_t cap) {
  FILE *p = popen(cmd, "r");
  if (!p) return -1;
  size_t k = fread(out, 1, cap - 1, p);
  out[k] = '\0';
  int st = pclose(p);
  return WIFEXITED(st) ? WEXITSTATUS(st) : -1;
}

const char *px_test_python(void) {
  const char *py = getenv("PX_TEST_PYTHON");
  return py && *py ? py : "/usr/bin/python3";
}

int px_test_python_has(const char *modules) {
  char cmd[1024];
  snprintf(cmd, sizeof cmd, "-c 'import %s' >/dev/null 2>&1", modules);
  if (px_test_py(cmd) == 0) return 1;
  printf("needs the Python modules %s (python3-torch, python3-onnx, python3-numpy, "
         "python3-opencv: scripts/bootstrap)\n", modules);
  return 0;
}

int px_test_skip_example(const char *path) {
  static int have = -1, have_mb = -1;
  /* its iteration budget is derived from the folder's image count */
  if ((strstr(path, "/image-folder.yaml") || strstr(path, "/mobilenet-folder.yaml")) &&
      access("/tmp/fmnist-folder/train", R_OK) != 0) {
    fprintf(stderr, "%s: skipped (no /tmp/fmnist-folder: examples/make_fmnist_folder.py)\n", path);
    return 1;
  }
  if (strstr(path, "/mobilenet-folder.yaml")) { /* its model, exported as the spec says */
    if (have_mb < 0) {
      char cmd[1024];
      snprintf(cmd, sizeof cmd,
               "f=%s/examples/mobilenet_v2.onnx; /usr/bin/python3 %s/tests/onnx_zoo.py export "
               "mobilenet_v2 13 $f.%d.tmp 32 10 >/dev/null 2>&1 && mv $f.%d.tmp $f",
               PX_SOURCE_DIR, PX_SOURCE_DIR, (int)getpid(), (int)getpid());
      have_mb = access(PX_SOURCE_DIR "/examples/mobilenet_v2.onnx", R_OK) == 0 || system(cmd) == 0;
    }
    if (!have_mb) fprintf(stderr, "%s: skipped (python3-torchvision cannot write mobilenet_v2.onnx)\n", path);
    return !have_mb;
  }
  if (!strstr(path, "/imported-model.yaml")) return 0;
  if (have < 0)
    have = access(PX_SOURCE_DIR "/examples/resnet20.onnx", R_OK) == 0 ||
           system("/usr/bin/python3 " PX_SOURCE_DIR "/examples/export_onnx.py >/dev/null 2>&1") == 0;
  if (!have) fprintf(stderr, "%s: skipped (python3-torch cannot write resnet20.onnx)\n", path);
  return !have;
}

const char *px_test_ort_modules(char *buf, size_t cap) {
  const char *p = getenv("PX_NPM_PREFIX");
  const char *home = getenv("HOME");
  if (p && p[0]) snprintf(buf, cap, "%s/node_modules", p);
  else if (getenv("XDG_CACHE_HOME"))
    snprintf(buf, cap, "%s/prunex/npm/node_modules", getenv("XDG_CACHE_HOME"));
  else snprintf(buf, cap, "%s/.cache/prunex/npm/node_modules", home ? home : "");
  char pkg[600];
  snprintf(pkg, sizeof pkg, "%s/onnxruntime-node/package.json", buf);
  if (access(pkg, R_OK) == 0 && system("node --version >/dev/null 2>&1") == 0) return buf;
  printf("needs node and onnxruntime-node in %s (scripts/bootstrap)\n", buf);
  return NULL;
}

double px_test_write_logits(px_model_t *m, const px_dataset_t *ds, int n, const char *logits_path) {
  const px_dataset_info_t *info = px_dataset_info(ds);
  return px_test_write_logits_norm(m, ds, n, info->mean, info->std, logits_path);
}

double px_test_write_logits_norm(px_model_t *m, const px_dataset_t *ds, int n, const float *mean,
                                 const float *std, const char *logits_path) {
  const px_dataset_info_t *info = px_dataset_info(ds);
  const int B = px_model_config(m)->batch, K = px_model_config(m)->num_classes;
  const size_t per = (size_t)info->channels * info->height * info->width;
  float *x = malloc((size_t)B * per * sizeof *x), *logits = malloc((size_t)n * K * sizeof *logits);
  int32_t *y = malloc((size_t)B * sizeof *y);
  uint32_t *idx = malloc((size_t)B * sizeof *idx);
  int64_t correct = 0;
  int ok = x && logits && y && idx && n <= info->n;
  for (int i = 0; ok && i < n; i += B) {
    int k = n - i < B ? n - i : B;
    for (int j = 0; j < k; j++) idx[j] = (uint32_t)(i + j);
    ok = px_data_fill_batch(ds, idx, k, NULL, mean, std, 0, 0, x, y) == PX_OK &&
         px_model_logits(m, x, k, logits + (size_t)i * K) == PX_OK;
    for (int j = 0; ok && j < k; j++) {
      const float *l = logits + (size_t)(i + j) * K;
      int best = 0;
      for (int c = 1; c < K; c++) best = l[c] > l[best] ? c : best;
      correct += best == y[j];
    }
  }
  if (ok) {
    FILE *f = fopen(logits_path, "wb");
    ok = f && fwrite(logits, sizeof *logits, (size_t)n * K, f) == (size_t)n * K;
    ok = f && fclose(f) == 0 && ok;
  }
  if (!ok) printf("px_test_write_logits %s: %s\n", logits_path, px_last_error());
  free(x);
  free(logits);
  free(y);
  free(idx);
  return ok ? (double)correct / n : -1;
}

int px_test_resnet20_steps(px_ops_t *ops, int batch, px_precision_t prec, int steps,
                           px_test_steps_t *out) {
  memset(out, 0, sizeof *out);
  px_model_config_t mc = {"resnet20", 3, 10, batch, 32, 32, NULL, 0, prec, NULL};
  px_model_t *m = NULL;
  px_sgd_t *sgd = NULL;
  px_sgd_config_t sc = {0.05, 0.9, 0.0, 0};
  px_synth_config_t syn;
  px_synth_config_default(&syn);
  float *x = malloc((size_t)batch * 3 * 32 * 32 * sizeof *x);
  int32_t *y = malloc((size_t)batch * sizeof *y);
  px_status_t st = x && y ? PX_OK : PX_ERR_NOMEM;
  if (st == PX_OK) st = px_model_create(ops, &mc, &m);
  if (st == PX_OK) st = px_model_init_params(m, 1);
  if (st == PX_OK) st = px_sgd_create(m, &sc, &sgd);
  if (st == PX_OK) out->numel = px_model_numel(m);
  for (int s = 0; s < steps && st == PX_OK; s++) {
    int64_t correct;
    st = px_synth_batch(&syn, s % 4, batch, x, y);
    if (st == PX_OK) st = px_model_train_step(m, x, y, &out->last, &correct);
    if (st == PX_OK && s == 0) {
      out->first = out->last;
      out->grads = malloc(out->numel * sizeof(float));
      st = out->grads ? px_tensor_copy_to_host(px_model_flat_grads(m), out->grads,
                                               out->numel * sizeof(float))
                      : PX_ERR_NOMEM;
    }
    if (st == PX_OK) st = px_sgd_step(sgd);
  }
  if (st == PX_OK)
    printf("%s: loss %.4f after %d steps (first %.4f)\n", prec ? "bf16" : "fp32", out->last,
           steps, out->first);
  else
    printf("resnet20 steps: %s\n", px_last_error());
  free(x);
  free(y);
  px_sgd_destroy(sgd);
  px_model_destroy(m);
  return st == PX_OK ? 0 : -1;
}

/* PX_TEST_FILTER: glob patterns separated by '|'; the tests whose names
 * match one of them move to the front, and their count is returned (all
 * of them without the variable). */
size_t px_test_select(struct CMUnitTest *tests, size_t n) {
  const char *f = getenv("PX_TEST_FILTER");
  if (!f || !f[0]) return n;
  size_t kept = 0;
  for (size_t i = 0; i < n; i++) {
    char pats[1024];
    snprintf(pats, sizeof pats, "%s", f);
    int match = 0;
    for (char *save = NULL, *p = strtok_r(pats, "|", &save); p && !match;
         p = strtok_r(NULL, "|", &save))
      match = fnmatch(p, tests[i].name, 0) == 0;
    if (match) {
      struct CMUnitTest t = tests[kept];
      tests[kept++] = tests[i];
      tests[i] = t;
    }
  }
  return kept;
}
