/* Small helpers shared by the cmocka tests: a seeded random generator so
 * that every test is reproducible, and float comparisons. */
#ifndef PX_TEST_UTIL_H
#define PX_TEST_UTIL_H

#include <stddef.h>
#include <stdint.h>

#include "prunex/data.h"
#include "prunex/nn.h"
#include "prunex/ops.h"

/* xorshift64* generator; seed 0 is replaced by a fixed constant. */
typedef struct {
  uint64_t s;
} px_test_rng_t;

void px_test_rng_seed(px_test_rng_t *r, uint64_t seed);
uint64_t px_test_rng_u64(px_test_rng_t *r);
/* Uniform in [0, 1). */
double px_test_rng_uniform(px_test_rng_t *r);
/* Standard normal (Box-Muller). */
double px_test_rng_normal(px_test_rng_t *r);
/* Fills x[n] with N(0, 1) samples. */
void px_test_fill_normal(px_test_rng_t *r, float *x, size_t n);

/* Writes the first ntrain training and ntest test images of the installed
 * Fashion-MNIST (/usr/share/datasets/fashion-mnist) into dir as plain IDX
 * files, a small real data set for training tests. Returns 1 when written, 0
 * when the data set is not installed, -1 on failure. */
int px_test_write_fmnist_subset(const char *dir, int ntrain, int ntest);

/* The strategy tests' data set: a fresh directory /tmp/<tag>_XXXXXX, named
 * in dir[cap], holding the first 512 training and 128 test images. Returns 0
 * (also when Fashion-MNIST is not installed: dir is left empty and the tests
 * skip), -1 on failure. */
int px_test_fmnist_fixture(char *dir, size_t cap, const char *tag);
/* The same with the first ntrain training and ntest test images. */
int px_test_fmnist_fixture_n(char *dir, size_t cap, const char *tag, int ntrain, int ntest);

/* The strategy tests' trainer for one rank of size: the defaults, then the
 * data of dir, batch 16, one thread, one epoch, lr 0.05, no augmentation and
 * seed 1 + rank (every rank starts from another model: the strategies must
 * make them agree). */
void px_test_rank_train_config(px_train_config_t *tc, const char *dir, int rank, int size);

/* Our engine's view of a model a runtime is compared with: m's logits
 * [n][classes] on the first n images of ds, fed as the training loader feeds
 * them (padded, normalised with ds's mean/std), written as float32 to
 * logits_path. Returns the fraction of them m classifies right, or -1 on a
 * failure (printed). */
double px_test_write_logits(px_model_t *m, const px_dataset_t *ds, int n, const char *logits_path);
/* The same with the given per-channel mean/std (an image folder's val split
 * is normalised with its training split's). */
double px_test_write_logits_norm(px_model_t *m, const px_dataset_t *ds, int n, const float *mean,
                                 const float *std, const char *logits_path);

/* examples/imported-model.yaml names examples/resnet20.onnx, which
 * examples/export_onnx.py writes (python3-torch): 1 when path is that spec
 * and the file cannot be made here (the caller skips the spec, saying
 * so), else 0 (written on first use, atomically, gitignored). */
int px_test_skip_example(const char *path);

/* The node_modules folder of the npm install of onnxruntime-node
 * (scripts/bootstrap: $PX_NPM_PREFIX, else $XDG_CACHE_HOME/prunex/npm or
 * ~/.cache/prunex/npm) into buf, for NODE_PATH and tests/onnx_ort.js; NULL
 * (printed) when it or node is not installed. */
const char *px_test_ort_modules(char *buf, size_t cap);

/* Parses a YAML job spec (px_jobspec_parse_string, which fills the
 * defaults and validates): with needle NULL, 1 when it is accepted; else 1
 * when it is refused with an error that contains needle (the error is
 * printed). 0 otherwise. */
int px_test_spec_outcome(const char *yaml, const char *needle);

/* The losses of the first and the last of a run of training steps, and the
 * first step's flat f32 weight gradients [numel] (the caller frees grads). */
typedef struct {
  float first, last;
  float *grads;
  size_t numel;
} px_test_steps_t;

/* `steps` ResNet-20 training steps on ops (batch images of 3 x 32 x 32 from
 * the synthetic set's batches s % 4, parameters from seed 1, SGD lr 0.05
 * momentum 0.9 after each step) in precision prec; the model is made and
 * destroyed here, ops is the caller's. Returns 0, or -1 on a failure
 * (printed); prints the first and last loss. */
int px_test_resnet20_steps(px_ops_t *ops, int batch, px_precision_t prec, int steps,
                           px_test_steps_t *out);

/* ||a - b|| / ||b|| in the L2 norm (||a - b|| when b is all zero): how far
 * a step's gradients or logits are from a reference's. */
double px_test_rel_l2(const float *a, const float *b, size_t n);

/* a . b / (||a|| ||b||): whether a step's gradients point where a
 * reference's do (0 when either is all zero). */
double px_test_cosine(const float *a, const float *b, size_t n);

/* Largest |a[i] - b[i]| / max(1, |b[i]|). */
double px_test_max_rel_err(const float *a, const float *b, size_t n);

/* 64-bit FNV-1a of n bytes: compares buffers across ranks in one word. */
uint64_t px_test_fnv64(const void *p, size_t n);

/* The whole file (NUL-terminated, *len without the NUL), or NULL when it
 * cannot be read. The caller frees it. */
char *px_test_read_file(const char *path, size_t *len);

/* Reads at most bytes of dir/name into buf; the count read (0 when the file
 * cannot be opened). The callers compare it with what they expect. */
size_t px_test_read_bytes(const char *dir, const char *name, void *buf, size_t bytes);

/* Runs a shell command line and keeps what it writes to stdout (at most
 * cap - 1 bytes, NUL-terminated; "2>&1" in cmd for stderr too); its exit
 * status, or -1 when it could not be run or did not exit. */
int px_test_capture(const char *cmd, char *out, size_t cap);

/* The Python the tests run: $PX_TEST_PYTHON when set (the GPU machine's
 * python3, which has PyTorch; scripts/gpu-kit sets it), else Debian's
 * /usr/bin/python3 with the packages scripts/bootstrap installs. */
const char *px_test_python(void);

/* 1 when px_test_python() imports every module of the comma-separated list
 * (e.g. "torch, onnx, numpy"); otherwise prints which packages the test
 * needs (scripts/bootstrap installs them) and returns 0: the caller skips. */
int px_test_python_has(const char *modules);

/* Runs a Python command line (what would follow "python3 " in a shell: a
 * script with its arguments, "-c CODE ..." or "-m MODULE ...", optionally
 * with ">/dev/null", "2>/dev/null" or "2>&1" at the end) and returns its
 * exit status (0: success; -1 when Python could not be run). All of a test
 * program's calls go to one px_test_python() process (tests/px_py_server.py)
 * that runs each as a fresh process would (this directory and environment,
 * the random generators as at start), so that PyTorch and ONNX are imported
 * once per program, not once per call. */
int px_test_py(const char *line);

/* 1 when this libpxcore has CUDA and the machine a CUDA device; otherwise
 * prints why ("...: <what> skipped") and returns 0, and the caller skips.
 * The device count is taken in a child process, once per test program:
 * CUDA does not survive fork, so the parent stays free to fork ranks. */
int px_test_gpu_ready(const char *what);

/* PX_TEST_FILTER: glob patterns separated by '|'. The tests whose names
 * match one of them move to the front of tests and their count is returned
 * (n without the variable); run the first that many, e.g.
 * _cmocka_run_group_tests(name, tests, px_test_select(tests, n), ...). The
 * sanitizer build runs parts of long tests this way (tests/CMakeLists.txt). */
struct CMUnitTest;
size_t px_test_select(struct CMUnitTest *tests, size_t n);

#endif
