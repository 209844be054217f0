/* Job specs: every example under examples/ parses and validates; a minimal
 * spec gets every documented default; each class of mistake is refused with
 * PX_ERR_INVALID and a message naming the file, the line and the field;
 * canonical YAML parses back to an equal spec; sizes take units; a missing
 * file is PX_ERR_IO; specs from the wire are validated and completed; the
 * schema table and the proto agree; and no error path leaks. */
#include <glob.h>
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <time.h>

#include <cmocka.h>

#include "jobspec/jobspec_int.h"
#include "prunex/jobspec.h"
#include "px_test_util.h"

static Prunex__V1__JobSpec *parse_ok(const char *yaml) {
  Prunex__V1__JobSpec *s = NULL;
  px_status_t st = px_jobspec_parse_string(yaml, strlen(yaml), "ok.yaml", &s);
  if (st != PX_OK) fprintf(stderr, "unexpected error: %s\n", px_last_error());
  assert_int_equal(st, PX_OK);
  assert_non_null(s);
  return s;
}

/* Parses yaml as "bad.yaml" and expects PX_ERR_INVALID with a message that
 * starts "bad.yaml:LINE:" and contains every string of the NULL-ended list. */
static void expect_error(const char *yaml, size_t line, ...) {
  Prunex__V1__JobSpec *s = (Prunex__V1__JobSpec *)1;
  px_status_t st = px_jobspec_parse_string(yaml, strlen(yaml), "bad.yaml", &s);
  const char *msg = px_last_error();
  char prefix[64];
  snprintf(prefix, sizeof prefix, "bad.yaml:%zu:", line);
  if (st != PX_ERR_INVALID || strncmp(msg, prefix, strlen(prefix)) != 0)
    fprintf(stderr, "spec:\n%s\nstatus %d, message: %s\nwanted prefix %s\n", yaml, st, msg,
            prefix);
  assert_int_equal(st, PX_ERR_INVALID);
  assert_null(s);
  assert_memory_equal(msg, prefix, strlen(prefix));
  va_list ap;
  va_start(ap, line);
  for (const char *want; (want = va_arg(ap, const char *));) {
    if (!strstr(msg, want)) fprintf(stderr, "message '%s' lacks '%s'\n", msg, want);
    assert_non_null(strstr(msg, want));
  }
  va_end(ap);
}

static size_t packed(const Prunex__V1__JobSpec *s, uint8_t **out) {
  size_t n = protobuf_c_message_get_packed_size(&s->base);
  *out = malloc(n ? n : 1);
  assert_non_null(*out);
  assert_int_equal(protobuf_c_message_pack(&s->base, *out), n);
  return n;
}

static void assert_specs_equal(const Prunex__V1__JobSpec *a, const Prunex__V1__JobSpec *b) {
  uint8_t *pa, *pb;
  size_t na = packed(a, &pa), nb = packed(b, &pb);
  assert_int_equal(na, nb);
  assert_memory_equal(pa, pb, na);
  free(pa);
  free(pb);
}

/* ---- examples and defaults ----------------------------------------------------- */

static void test_every_example_parses_and_validates(void **state) {
  (void)state;
  glob_t g;
  assert_int_equal(glob(PX_SOURCE_DIR "/examples/*.yaml", 0, NULL, &g), 0);
  assert_true(g.gl_pathc >= 5);
  for (size_t i = 0; i < g.gl_pathc; i++) {
    if (px_test_skip_example(g.gl_pathv[i])) continue;
    Prunex__V1__JobSpec *s = NULL;
    px_status_t st = px_jobspec_parse_file(g.gl_pathv[i], &s);
    if (st != PX_OK) fprintf(stderr, "%s\n", px_last_error());
    assert_int_equal(st, PX_OK);
    assert_int_equal(px_jobspec_validate(s), PX_OK);
    px_jobspec_free(s);
  }
  globfree(&g);
}

static void test_quickstart_is_the_small_hsadmm_job(void **state) {
  (void)state;
  Prunex__V1__JobSpec *s = NULL;
  assert_int_equal(px_jobspec_parse_file(PX_SOURCE_DIR "/examples/quickstart.yaml", &s), PX_OK);
  assert_string_equal(s->name, "quickstart");
  assert_int_equal(s->strategy, PRUNEX__V1__STRATEGY__STRATEGY_HSADMM);
  assert_string_equal(s->model->name, "resnet20");
  assert_string_equal(s->dataset->name, "fashion-mnist");
  assert_int_equal(s->cluster->nodes, 2);
  assert_int_equal(s->cluster->workers_per_node, 2);
  assert_string_equal(s->cluster->device, "cpu");
  assert_float_equal(s->prune->channel_keep, 0.45, 0);
  assert_float_equal(s->prune->uncoupled_channel_keep, 1.0, 0);
  /* two passes over the data: 60000 / 4 workers / batch 64 = 234 steps per
   * epoch, in outer iterations of one local step, the leaders' exchange
   * quantized to 8 bits */
  assert_int_equal(s->train->epochs, 2);
  assert_int_equal(s->train->batch_size, 64);
  assert_int_equal(s->train->local_steps, 1);
  assert_int_equal(s->train->eval_every, 120);
  assert_int_equal(s->admm->max_iterations, 468);
  assert_false(s->admm->adaptive_rho);
  /* one local step a round: the node consensus keeps rho2 / (2 rho1 + rho2)
   * of the last z, 0.05% (test_strategy_final) */
  assert_float_equal(s->admm->rho1, 0.01, 0);
  assert_float_equal(s->admm->rho2, 1e-5, 0);
  assert_string_equal(s->comm->quantize, "8");
  /* twice the default 5e-4 (docs/performance.md, "Accuracy over seeds") */
  assert_float_equal(s->train->weight_decay, 1e-3, 0);
  int epochs = s->train->epochs;
  double lr = s->train->lr;
  double weight_decay = s->train->weight_decay;
  px_jobspec_free(s);

  const char *others[] = {"ddp", "topk", "hsadmm-flat"};
  for (int i = 0; i < 3; i++) {
    char path[512];
    snprintf(path, sizeof path, "%s/examples/%s.yaml", PX_SOURCE_DIR, others[i]);
    assert_int_equal(px_jobspec_parse_file(path, &s), PX_OK);
    assert_string_equal(px_jobspec_strategy_name(s->strategy), others[i]);
    assert_string_equal(s->model->name, "resnet20");
    assert_string_equal(s->dataset->name, "fashion-mnist");
    assert_int_equal(s->cluster->nodes * s->cluster->workers_per_node, 4);
    /* the same budget, so that the figures compare like for like */
    assert_int_equal(s->train->epochs, epochs);
    assert_float_equal(s->train->lr, lr, 0);
    assert_float_equal(s->train->weight_decay, weight_decay, 0);
    px_jobspec_free(s);
  }
  assert_int_equal(px_jobspec_parse_file(PX_SOURCE_DIR "/examples/resnet18-cifar10.yaml", &s),
                   PX_OK);
  assert_string_equal(s->cluster->device, "cuda");
  assert_int_equal(s->cluster->nodes, 4);
  assert_int_equal(s->cluster->workers_per_node, 8);
  px_jobspec_free(s);
}

static void test_minimal_spec_gets_every_default(void **state) {
  (void)state;
  Prunex__V1__JobSpec *s = NULL;
  assert_int_equal(px_jobspec_parse_string("{}", 2, "specs/minimal.yaml", &s), PX_OK);
  assert_string_equal(s->name, "minimal");
  assert_int_equal(s->strategy, PRUNEX__V1__STRATEGY__STRATEGY_HSADMM);
  assert_string_equal(s->output_dir, "");
  assert_string_equal(s->model->name, "resnet20");
  assert_int_equal(s->model->in_channels, 0);
  assert_int_equal(s->model->num_classes, 0);
  assert_string_equal(s->dataset->name, "fashion-mnist");
  assert_string_equal(s->dataset->path, "");
  assert_true(s->dataset->augment);
  assert_int_equal(s->dataset->crop_padding, 4);
  assert_true(s->dataset->flip);
  assert_int_equal(s->cluster->nodes, 1);
  assert_int_equal(s->cluster->workers_per_node, 1);
  assert_string_equal(s->cluster->device, "auto");
  assert_int_equal(s->cluster->threads_per_worker, 0);
  assert_int_equal(s->train->epochs, 1);
  assert_int_equal(s->train->batch_size, 128);
  assert_float_equal(s->train->lr, 0.1, 0);
  assert_float_equal(s->train->momentum, 0.9, 0);
  assert_false(s->train->nesterov);
  assert_float_equal(s->train->weight_decay, 5e-4, 0);
  assert_int_equal(s->train->local_epochs, 1);
  assert_int_equal(s->train->local_steps, 0);
  assert_int_equal(s->train->seed, 1);
  assert_string_equal(s->train->lr_schedule, "cosine");
  assert_float_equal(s->prune->filter_keep, 1.0, 0);
  assert_float_equal(s->prune->channel_keep, 1.0, 0);
  assert_float_equal(s->prune->shape_keep, 1.0, 0);
  assert_int_equal(s->prune->n_skip_layers, 0);
  assert_float_equal(s->admm->rho1, 1e-3, 0);
  assert_float_equal(s->admm->rho2, 1e-3, 0);
  assert_int_equal(s->admm->max_iterations, 1); /* epochs / local_epochs */
  assert_true(s->admm->adaptive_rho);
  assert_float_equal(s->admm->mu, 10, 0);
  assert_float_equal(s->admm->tau, 2, 0);
  assert_float_equal(s->admm->rho_max, 1e4, 0);
  assert_int_equal(s->admm->freeze_on_stable, 3);
  assert_int_equal(s->admm->freeze_iteration, 0);
  assert_float_equal(s->admm->eps_abs, 1e-4, 0);
  assert_float_equal(s->admm->eps_rel, 1e-3, 0);
  assert_int_equal(s->comm->bucket_bytes, 32 << 20);
  assert_int_equal(s->comm->timeout_ms, 60000);
  assert_string_equal(s->comm->backend, "auto");
  assert_float_equal(s->comm->topk_ratio, 0.01, 0);
  px_jobspec_free(s);

  /* without a file name the job is called "job"; empty values and empty
   * sections take their defaults too */
  s = parse_ok("name: ~\ntrain:\nprune: null\ncluster:\n  nodes:\n");
  px_jobspec_free(s);
  assert_int_equal(px_jobspec_parse_string("strategy: ddp\n", 14, NULL, &s), PX_OK);
  assert_string_equal(s->name, "job");
  assert_int_equal(s->strategy, PRUNEX__V1__STRATEGY__STRATEGY_DDP);
  assert_int_equal(s->cluster->nodes, 1);
  px_jobspec_free(s);
}

static void test_max_iterations_follows_the_data_budget(void **state) {
  (void)state;
  Prunex__V1__JobSpec *s = parse_ok("train: {epochs: 5, local_epochs: 2}\n");
  assert_int_equal(s->admm->max_iterations, 3); /* ceil(5 / 2) */
  px_jobspec_free(s);
  /* cifar10: 50000 / (2 x 4) / 100 = 62 steps per epoch, x 3 / 50 -> 4 */
  s = parse_ok("dataset: {name: cifar10, path: /data}\ncluster: {nodes: 2, workers_per_node: 4}\n"
               "train: {epochs: 3, batch_size: 100, local_steps: 50}\n");
  assert_int_equal(s->admm->max_iterations, 4);
  px_jobspec_free(s);
  s = parse_ok("train: {epochs: 5, local_epochs: 2}\nadmm: {max_iterations: 7}\n");
  assert_int_equal(s->admm->max_iterations, 7);
  px_jobspec_free(s);
}

static void test_values_in_every_notation(void **state) {
  (void)state;
  Prunex__V1__JobSpec *s = parse_ok(
      "name: 'odd \"name\" \\ here'\n"
      "train:\n"
      "  lr: 1e-2\n"
      "  nesterov: Yes\n"
      "  seed: 18446744073709551615\n"
      "  batch_size: \"32\"\n"
      "dataset: {augment: off, flip: FALSE}\n"
      "prune:\n"
      "  skip_layers:\n"
      "    - conv1.weight\n"
      "    - fc.weight\n");
  assert_string_equal(s->name, "odd \"name\" \\ here");
  assert_float_equal(s->train->lr, 0.01, 0);
  assert_true(s->train->nesterov);
  assert_true(s->train->seed == UINT64_MAX);
  assert_int_equal(s->train->batch_size, 32);
  assert_false(s->dataset->augment);
  assert_false(s->dataset->flip);
  assert_int_equal(s->prune->n_skip_layers, 2);
  assert_string_equal(s->prune->skip_layers[1], "fc.weight");
  px_jobspec_free(s);
}

/* ---- errors ----------------------------------------------------------------------- */

static void test_bad_value_names_file_line_and_field(void **state) {
  (void)state;
  expect_error("model:\n  name: resnet20\ntrain:\n  epochs: 2\n  batch_size: abc\n", 5,
               "bad.yaml:5:3: train.batch_size: expected a positive integer, got 'abc'", NULL);
  expect_error("train:\n  local_epochs: 0.5\n", 2, "train.local_epochs", "got '0.5'", NULL);
  expect_error("train:\n  nesterov: maybe\n", 2, "train.nesterov: expected true or false", NULL);
  expect_error("train:\n  seed: -1\n", 2, "train.seed", NULL);
  expect_error("train:\n  lr: .inf\n", 2, "train.lr", NULL);
  expect_error("train:\n  epochs: 99999999999\n", 2, "train.epochs", NULL);
}

static void test_unknown_key_suggests_the_closest(void **state) {
  (void)state;
  expect_error("name: x\n\ntrian:\n  epochs: 1\n", 3,
               "bad.yaml:3:1: unknown key 'trian' at top level (did you mean 'train'?)", NULL);
  expect_error("train:\n  epochs: 1\n  bach_size: 3\n", 3,
               "unknown key 'bach_size' in train (did you mean 'batch_size'?)", NULL);
  expect_error("batch_size: 3\n", 1, "(did you mean 'train.batch_size'?)", NULL);
  expect_error("comm:\n  zzz: 1\n", 2, "unknown key 'zzz' in comm (known keys: bucket_bytes,",
               NULL);
}

static void test_duplicate_keys_are_refused(void **state) {
  (void)state;
  expect_error("train:\n  lr: 0.1\nmodel: {}\ntrain:\n  lr: 0.2\n", 4,
               "duplicate key 'train' (first at line 1)", NULL);
  expect_error("train:\n  lr: 0.1\n  epochs: 2\n  lr: 0.2\n", 4,
               "duplicate key 'train.lr' (first at line 2)", NULL);
  expect_error("name: a\nname: b\n", 2, "duplicate key 'name'", NULL);
}

static void test_wrong_node_types_are_refused(void **state) {
  (void)state;
  expect_error("name: x\ntrain:\n  - epochs\n  - 2\n", 2, "train: expected a mapping", "a list",
               NULL);
  expect_error("cluster: 4\n", 1, "cluster: expected a mapping", "got '4'", NULL);
  expect_error("train:\n  lr: {value: 1}\n", 2, "train.lr: expected a number > 0, got a mapping",
               NULL);
  expect_error("prune:\n  skip_layers: conv1.weight\n", 2, "prune.skip_layers: expected a list",
               NULL);
  expect_error("prune:\n  skip_layers:\n    - conv1.weight\n    - [a]\n", 4,
               "prune.skip_layers[1]", NULL);
  expect_error("prune:\n  skip_layers: [conv1.weight, conv1.weight]\n", 2,
               "prune.skip_layers[1]: 'conv1.weight' is listed twice", NULL);
  expect_error("- a\n- b\n", 1, "expected a mapping at top level", NULL);
  expect_error("? [a, b]\n: 1\n", 1, "a key must be a plain name", NULL);
}

static void test_yaml_syntax_errors_carry_libyaml_position(void **state) {
  (void)state;
  expect_error("name: x\ntrain:\n  lr: [0.1, 0.2\nmodel: {}\n", 4, "YAML syntax error",
               "did not find expected ',' or ']'", "line 3, column 7", NULL);
  expect_error("train:\n  lr: 0.1\n epochs: 2\n", 3, "YAML syntax error", NULL);
  expect_error("name: \"unterminated\n", 2, "YAML syntax error", NULL);
  expect_error("name: x\nmodel: {name: \xff}\n", 2, "YAML syntax error", "0xFF", NULL);
  expect_error("name: x\n---\nname: y\n", 2, "second YAML document", NULL);
  expect_error("name: *nowhere\n", 1, "YAML syntax error", NULL);
  /* empty input has no line to point at */
  Prunex__V1__JobSpec *s = NULL;
  assert_int_equal(px_jobspec_parse_string("", 0, "bad.yaml", &s), PX_ERR_INVALID);
  assert_null(s);
  assert_non_null(strstr(px_last_error(), "bad.yaml: the job spec is empty"));
  expect_error("# only a comment\n---\n", 2, "the job spec is empty", NULL);
}

static void test_out_of_range_values_are_refused(void **state) {
  (void)state;
  expect_error("prune:\n  channel_keep: 1.5\n", 2,
               "prune.channel_keep: expected a number in (0, 1]", "got '1.5'", NULL);
  /* keeping nothing is no setting: a job that prunes every group */
  expect_error("prune:\n  channel_keep: 0\n", 2,
               "prune.channel_keep: expected a number in (0, 1]", "got '0'", NULL);
  expect_error("prune:\n  filter_keep: 0.0\n", 2,
               "prune.filter_keep: expected a number in (0, 1]", NULL);
  expect_error("prune:\n  shape_keep: 0\n", 2,
               "prune.shape_keep: expected a number in (0, 1]", NULL);
  expect_error("prune:\n  filter_keep: -0.1\n", 2, "prune.filter_keep", NULL);
  expect_error("train:\n  lr: -0.1\n", 2, "train.lr: expected a number > 0, got '-0.1'", NULL);
  expect_error("train:\n  lr: 0\n", 2, "train.lr", NULL);
  expect_error("train:\n  momentum: 1\n", 2, "train.momentum: expected a number in [0, 1)", NULL);
  expect_error("cluster:\n  nodes: 0\n", 2, "cluster.nodes: expected a positive integer, got '0'",
               NULL);
  expect_error("cluster:\n  workers_per_node: -2\n", 2, "cluster.workers_per_node", NULL);
  expect_error("model:\n  name: resnet21\n", 2, "model.name: expected one of resnet20, resnet32",
               "wrn50_2", "(did you mean 'resnet20'?)", NULL);
  expect_error("dataset:\n  name: mnist\n", 2,
               "dataset.name: expected one of fashion-mnist, cifar10, synthetic, folder, got 'mnist'",
               NULL);
  expect_error("strategy: hsadmm_flat\n", 1,
               "strategy: expected one of hsadmm, hsadmm-flat, ddp, topk",
               "(did you mean 'hsadmm-flat'?)", NULL);
  expect_error("cluster:\n  device: gpu\n", 2, "cluster.device: expected one of auto, cpu, cuda",
               NULL);
  expect_error("comm:\n  backend: mpi\n", 2, "comm.backend: expected one of auto, ucx, nccl", NULL);
  expect_error("comm:\n  topk_ratio: 0\n", 2, "comm.topk_ratio: expected a number in (0, 1]", NULL);
  expect_error("comm:\n  topk_ratio: 1.01\n", 2, "comm.topk_ratio", NULL);
  expect_error("comm:\n  bucket_bytes: 6\n", 2, "comm.bucket_bytes", "multiple of 4", NULL);
  expect_error("comm:\n  bucket_bytes: 0\n", 2, "comm.bucket_bytes", NULL);
  expect_error("comm:\n  bucket_bytes: 2GiB\n", 2, "comm.bucket_bytes", "got '2GiB'", NULL);
  expect_error("admm:\n  mu: 1\n", 2, "admm.mu: expected a number > 1", NULL);
  expect_error("admm:\n  max_iterations: 0\n", 2, "admm.max_iterations", NULL);
  expect_error("admm:\n  rho1_ramp: 0.9\n", 2, "admm.rho1_ramp", "[1, 10]", NULL);
  expect_error("prune:\n  uncoupled_channel_keep: 1.5\n", 2, "prune.uncoupled_channel_keep",
               "[0, 1]", NULL);
  expect_error("prune:\n  mac_keep: -0.5\n", 2, "prune.mac_keep", "[0, 1]", NULL);
  expect_error("dataset:\n  crop_padding: 40\n", 2,
               "dataset.crop_padding: expected an integer in [0, 32]", NULL);
  expect_error("model:\n  num_classes: 1\n", 2, "model.num_classes: expected 0 or an integer >= 2",
               NULL);
  expect_error("name: a/b\n", 1, "name: expected a name", NULL);
}

static void test_cross_field_rules_are_refused(void **state) {
  (void)state;
  expect_error("strategy: hsadmm\ntrain:\n  epochs: 2\n  local_epochs: 0\n", 4,
               "train.local_epochs: local_epochs and local_steps are both 0", "hsadmm", NULL);
  expect_error("strategy: hsadmm-flat\ntrain:\n  local_steps: 0\n  local_epochs: 0\n", 4,
               "train.local_epochs", NULL);
  Prunex__V1__JobSpec *s = parse_ok("strategy: ddp\ntrain:\n  local_epochs: 0\n");
  px_jobspec_free(s);
  expect_error("train:\n  epochs: 2\n  local_epochs: 3\n", 3,
               "train.local_epochs: 3 local epochs per outer iteration exceed train.epochs (2)",
               NULL);
  expect_error("cluster:\n  device: cpu\ncomm:\n  backend: nccl\n", 4,
               "comm.backend: nccl", "cpu", NULL);
  expect_error("admm:\n  rho1: 10\n  rho_max: 5\n", 3, "admm.rho_max: 5 is below", "rho1", NULL);
  expect_error("train:\n  momentum: 0\n  nesterov: true\n", 3, "train.nesterov", NULL);
  expect_error("model:\n  in_channels: 3\n", 2, "model.in_channels: 3",
               "fashion-mnist has 1 channel", NULL);
  expect_error("model:\n  num_classes: 100\ndataset:\n  name: cifar10\n  path: /d\n", 2,
               "model.num_classes: 100", NULL);
  expect_error("name: c\ndataset:\n  name: cifar10\n", 3, "dataset.path: cifar10", NULL);
  expect_error("cluster:\n  nodes: 2048\n  workers_per_node: 1024\n", 3,
               "cluster.workers_per_node: 2048 nodes x 1024 workers", NULL);
  /* a MAC budget chooses the channel keep: not both (the budget's line) */
  expect_error("prune:\n  mac_keep: 0.5\n  channel_keep: 0.45\n", 2,
               "prune.mac_keep: 0.5 chooses the channel keep itself", "(it is 0.45)", NULL);
  /* the keep's ramp: H-SADMM's, and not with an exchange that lands late */
  expect_error("strategy: ddp\nprune:\n  ramp_iterations: 50\n", 3,
               "prune.ramp_iterations: ramps H-SADMM's projection", "strategy ddp", NULL);
  expect_error("prune:\n  ramp_iterations: 50\ncomm:\n  overlap: true\n", 2,
               "prune.ramp_iterations: 50 needs comm.overlap false", NULL);
  expect_error("prune:\n  ramp_iterations: -1\n", 2, "prune.ramp_iterations", NULL);
  Prunex__V1__JobSpec *r = parse_ok("strategy: hsadmm-flat\nprune:\n  ramp_iterations: 50\n");
  assert_int_equal(r->prune->ramp_iterations, 50);
  px_jobspec_free(r);
}

static void test_error_in_a_real_file_names_its_path(void **state) {
  (void)state;
  char path[] = "/tmp/px_jobspec_XXXXXX.yaml";
  int fd = mkstemps(path, 5);
  assert_true(fd >= 0);
  const char *text = "name: t\nmodel:\n  name: resnet20\ntrain:\n  lr: fast\n";
  assert_int_equal(write(fd, text, strlen(text)), (ssize_t)strlen(text));
  close(fd);
  Prunex__V1__JobSpec *s = (Prunex__V1__JobSpec *)1;
  assert_int_equal(px_jobspec_parse_file(path, &s), PX_ERR_INVALID);
  assert_null(s);
  char want[128];
  snprintf(want, sizeof want, "%s:5:3: train.lr: expected a number > 0, got 'fast'", path);
  assert_string_equal(px_last_error(), want);
  unlink(path);
}

static void test_missing_file_is_an_io_error(void **state) {
  (void)state;
  Prunex__V1__JobSpec *s = (Prunex__V1__JobSpec *)1;
  assert_int_equal(px_jobspec_parse_file("/nonexistent/dir/job.yaml", &s), PX_ERR_IO);
  assert_null(s);
  assert_non_null(strstr(px_last_error(), "/nonexistent/dir/job.yaml"));
  assert_int_equal(px_jobspec_parse_file("/tmp", &s), PX_ERR_IO); /* a directory */
  assert_non_null(strstr(px_last_error(), "/tmp"));
}

/* The parser says which fields the text wrote (what pxctl submit asks
 * instead of searching the text): a value written is given; a default, a
 * derived value, an empty or null value, a key in a comment or a sweep is
 * not. */
static void test_parser_says_which_fields_were_given(void **state) {
  (void)state;
  const char *text = "# admm.max_iterations is derived here\n"
                     "name: g\ntrain: {lr: 0.05, momentum: ~}\nadmm:\n  rho1:\n"
                     "prune: {skip_layers: [conv1.weight]}\n"
                     "sweep: {admm.max_iterations: [2, 3]}\n";
  Prunex__V1__JobSpec *s = NULL;
  px_jobspec_given_t g;
  memset(&g, 0xff, sizeof g);
  assert_int_equal(px_jobspec_parse_string_ex(text, strlen(text), "g.yaml", &s, &g), PX_OK);
  assert_int_equal(px_jobspec_given(&g, "name"), 1);
  assert_int_equal(px_jobspec_given(&g, "train.lr"), 1);
  assert_int_equal(px_jobspec_given(&g, "prune.skip_layers"), 1);
  assert_int_equal(px_jobspec_given(&g, "train.momentum"), 0);  /* ~: the default */
  assert_int_equal(px_jobspec_given(&g, "admm.rho1"), 0);       /* empty: the default */
  assert_int_equal(px_jobspec_given(&g, "admm.max_iterations"), 0); /* derived */
  assert_true(s->admm->max_iterations > 0);
  assert_int_equal(px_jobspec_given(&g, "train.batch_size"), 0);
  assert_int_equal(px_jobspec_given(&g, "train.no_such_field"), -1);
  assert_int_equal(px_jobspec_given(&g, "train"), -1); /* a section, not a field */
  assert_int_equal(px_jobspec_given(NULL, "name"), -1);
  px_jobspec_free(s);
  const char *fixed = "admm: {max_iterations: 7}\n";
  assert_int_equal(px_jobspec_parse_string_ex(fixed, strlen(fixed), NULL, &s, &g), PX_OK);
  assert_int_equal(px_jobspec_given(&g, "admm.max_iterations"), 1);
  assert_int_equal(px_jobspec_given(&g, "name"), 0); /* the default name */
  assert_int_equal(s->admm->max_iterations, 7);
  px_jobspec_free(s);
  /* a refused spec gives nothing */
  assert_int_equal(px_jobspec_parse_string_ex("train: {lr: -1}\n", 16, NULL, &s, &g),
                   PX_ERR_INVALID);
  assert_null(s);
  assert_int_equal(px_jobspec_given(&g, "train.lr"), 0);
}

/* parse_file_ex reads the file once: the text it hands back is the file's
 * bytes, and the spec is the one parse_file gives. */
static void test_parse_file_hands_back_the_text_it_read(void **state) {
  (void)state;
  char path[] = "/tmp/px_jobspec_XXXXXX.yaml";
  int fd = mkstemps(path, 5);
  assert_true(fd >= 0);
  const char *text = "name: once\ncluster: {nodes: 2}\nadmm: {max_iterations: 4}"; /* no \n */
  assert_int_equal(write(fd, text, strlen(text)), (ssize_t)strlen(text));
  close(fd);
  Prunex__V1__JobSpec *s = NULL, *t = NULL;
  char *got = NULL;
  px_jobspec_given_t g;
  assert_int_equal(px_jobspec_parse_file_ex(path, &s, &got, &g), PX_OK);
  assert_string_equal(got, text);
  assert_int_equal(px_jobspec_given(&g, "cluster.nodes"), 1);
  assert_int_equal(px_jobspec_given(&g, "cluster.workers_per_node"), 0);
  assert_int_equal(px_jobspec_parse_file(path, &t), PX_OK);
  assert_true(protobuf_c_message_get_packed_size(&s->base) ==
              protobuf_c_message_get_packed_size(&t->base));
  assert_string_equal(s->name, "once");
  assert_int_equal(t->admm->max_iterations, 4);
  px_jobspec_free(s);
  px_jobspec_free(t);
  px_free(got);
  /* a file refused: no text, nothing given */
  got = (char *)1;
  assert_int_equal(px_jobspec_parse_file_ex("/nonexistent/j.yaml", &s, &got, &g), PX_ERR_IO);
  assert_null(s);
  assert_null(got);
  assert_int_equal(px_jobspec_given(&g, "cluster.nodes"), 0);
  unlink(path);
}

/* ---- sizes, round trip, the wire ----------------------------------------------------- */

static void test_bucket_bytes_accepts_units(void **state) {
  (void)state;
  static const struct {
    const char *text;
    int64_t bytes;
  } ok[] = {{"33554432", 33554432}, {"32MiB", 33554432},     {"32 MiB", 33554432},
            {"32MB", 32000000},     {"4KB", 4000},           {"4KiB", 4096},
            {"1GiB", 1073741824},   {"0.5 MiB", 524288},     {"64B", 64},
            {"16mib", 16777216},    {"1GB", 1000000000}};
  for (size_t i = 0; i < sizeof ok / sizeof ok[0]; i++) {
    char yaml[96];
    snprintf(yaml, sizeof yaml, "comm:\n  bucket_bytes: %s\n", ok[i].text);
    Prunex__V1__JobSpec *s = parse_ok(yaml);
    assert_int_equal(s->comm->bucket_bytes, ok[i].bytes);
    px_jobspec_free(s);
  }
  const char *bad[] = {"32XB", "1.3B", "-4", "MiB", "32 ", "1e3", "4 K", "0x100"};
  for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
    char yaml[96];
    snprintf(yaml, sizeof yaml, "name: x\ncomm:\n  bucket_bytes: '%s'\n", bad[i]);
    expect_error(yaml, 3, "comm.bucket_bytes: expected a size in bytes", NULL);
  }
}

static void round_trip(const Prunex__V1__JobSpec *s) {
  char *yaml = NULL, *again = NULL;
  assert_int_equal(px_jobspec_to_yaml(s, &yaml), PX_OK);
  Prunex__V1__JobSpec *back = NULL;
  px_status_t st = px_jobspec_parse_string(yaml, strlen(yaml), "canonical.yaml", &back);
  if (st != PX_OK) fprintf(stderr, "%s\n%s\n", yaml, px_last_error());
  assert_int_equal(st, PX_OK);
  assert_specs_equal(s, back);
  assert_int_equal(px_jobspec_to_yaml(back, &again), PX_OK);
  assert_string_equal(yaml, again); /* canonical: a fixed point */
  px_free(yaml);
  px_free(again);
  px_jobspec_free(back);
}

static void test_canonical_yaml_parses_back_equal(void **state) {
  (void)state;
  glob_t g;
  assert_int_equal(glob(PX_SOURCE_DIR "/examples/*.yaml", 0, NULL, &g), 0);
  for (size_t i = 0; i < g.gl_pathc; i++) {
    if (px_test_skip_example(g.gl_pathv[i])) continue;
    Prunex__V1__JobSpec *s = NULL;
    assert_int_equal(px_jobspec_parse_file(g.gl_pathv[i], &s), PX_OK);
    round_trip(s);
    px_jobspec_free(s);
  }
  globfree(&g);
  /* awkward values: escapes, UTF-8, doubles that need 17 digits, extremes */
  Prunex__V1__JobSpec *s = parse_ok(
      "name: \"sp ace \\\"q\\\" back\\\\slash caf\\u00e9 #x: y\"\n"
      "output_dir: \"/runs/a b: c\"\n"
      "strategy: topk\n"
      "train: {lr: 0.30000000000000004, weight_decay: 0, seed: 18446744073709551615}\n"
      "prune: {skip_layers: ['a\"b', 'c:d', '- e']}\n"
      "admm: {rho1: 1.5e-300, rho_max: 1e300, eps_abs: 0, max_iterations: 2147483647}\n"
      "comm: {bucket_bytes: 1GiB, topk_ratio: 1}\n");
  round_trip(s);
  px_jobspec_free(s);
}

static void test_wire_specs_are_validated_and_completed(void **state) {
  (void)state;
  /* a parsed spec survives the wire and still validates */
  Prunex__V1__JobSpec *s = NULL;
  assert_int_equal(px_jobspec_parse_file(PX_SOURCE_DIR "/examples/quickstart.yaml", &s), PX_OK);
  uint8_t *buf;
  size_t n = packed(s, &buf);
  Prunex__V1__JobSpec *w = prunex__v1__job_spec__unpack(NULL, n, buf);
  free(buf);
  assert_non_null(w);
  assert_int_equal(px_jobspec_validate(w), PX_OK);
  w->train->batch_size = 0;
  assert_int_equal(px_jobspec_validate(w), PX_ERR_INVALID);
  assert_string_equal(px_last_error(),
                      "job spec: train.batch_size: expected a positive integer, got 0");
  w->train->batch_size = 64;
  free(w->cluster->device);
  w->cluster->device = strdup("tpu");
  assert_int_equal(px_jobspec_validate(w), PX_ERR_INVALID);
  assert_non_null(
      strstr(px_last_error(), "cluster.device: expected one of auto, cpu, cuda, got 'tpu'"));
  prunex__v1__job_spec__free_unpacked(w, NULL); /* the other way to free works too */
  px_jobspec_free(s);

  /* an empty message: every section missing */
  Prunex__V1__JobSpec *bare = prunex__v1__job_spec__unpack(NULL, 0, (const uint8_t *)"");
  assert_non_null(bare);
  assert_int_equal(px_jobspec_validate(bare), PX_ERR_INVALID);
  assert_non_null(strstr(px_last_error(), "section 'model' is missing"));
  assert_int_equal(px_jobspec_fill_defaults(bare), PX_OK);
  assert_int_equal(px_jobspec_validate(bare), PX_OK);
  Prunex__V1__JobSpec *def = NULL;
  assert_int_equal(px_jobspec_parse_string("name: job\n", 10, NULL, &def), PX_OK);
  /* parsing counts the training images where it sees them, the wire cannot */
  assert_true(def->dataset->train_samples == 0 || def->dataset->train_samples == 60000);
  bare->dataset->train_samples = def->dataset->train_samples;
  assert_specs_equal(bare, def);
  px_jobspec_free(def);
  px_jobspec_free(bare);

  /* a partial section: illegal zeros are filled, legal ones kept */
  Prunex__V1__JobSpec part = PRUNEX__V1__JOB_SPEC__INIT;
  Prunex__V1__ClusterSpec cl = PRUNEX__V1__CLUSTER_SPEC__INIT;
  Prunex__V1__DatasetSpec ds = PRUNEX__V1__DATASET_SPEC__INIT;
  Prunex__V1__TrainSpec tr = PRUNEX__V1__TRAIN_SPEC__INIT;
  cl.nodes = 3;
  tr.epochs = 2;
  part.cluster = &cl;
  part.dataset = &ds;
  part.train = &tr;
  n = packed(&part, &buf);
  w = prunex__v1__job_spec__unpack(NULL, n, buf);
  free(buf);
  assert_int_equal(px_jobspec_fill_defaults(w), PX_OK);
  assert_int_equal(w->cluster->nodes, 3);
  assert_int_equal(w->cluster->workers_per_node, 1);
  assert_string_equal(w->cluster->device, "auto");
  assert_string_equal(w->dataset->name, "fashion-mnist");
  assert_false(w->dataset->augment);          /* proto3 cannot tell unset from false */
  assert_int_equal(w->dataset->crop_padding, 0); /* a legal zero */
  /* local_epochs and local_steps both zero is no setting: the parser's
   * defaults (1 local epoch), so the 2 epochs give 2 outer iterations */
  assert_int_equal(w->train->local_epochs, 1);
  assert_int_equal(w->train->local_steps, 0);
  assert_int_equal(w->admm->max_iterations, 2);
  assert_true(w->prune->filter_keep == 1.0);  /* absent section: full defaults */
  assert_int_equal(w->strategy, PRUNEX__V1__STRATEGY__STRATEGY_HSADMM);
  assert_string_equal(w->name, "job");
  assert_int_equal(px_jobspec_validate(w), PX_OK);
  px_jobspec_free(w);
}

static void test_absent_sections_write_proto_zeros(void **state) {
  (void)state;
  Prunex__V1__JobSpec bare = PRUNEX__V1__JOB_SPEC__INIT;
  char *yaml = NULL;
  assert_int_equal(px_jobspec_to_yaml(&bare, &yaml), PX_OK);
  assert_non_null(strstr(yaml, "strategy: 0\n"));
  assert_non_null(strstr(yaml, "cluster:\n  nodes: 0\n"));
  assert_non_null(strstr(yaml, "  skip_layers: []\n"));
  px_free(yaml);
  assert_int_equal(px_jobspec_to_yaml(NULL, &yaml), PX_ERR_INVALID);
  assert_int_equal(px_jobspec_validate(NULL), PX_ERR_INVALID);
  assert_string_equal(px_jobspec_strategy_name(PRUNEX__V1__STRATEGY__STRATEGY_HSADMM_FLAT),
                      "hsadmm-flat");
  assert_string_equal(px_jobspec_strategy_name((Prunex__V1__Strategy)9), "unspecified");
}

/* ---- the table against the proto, and leaks -------------------------------------------- */

static void check_message_covered(const ProtobufCMessageDescriptor *d, int section) {
  for (unsigned k = 0; k < d->n_fields; k++) {
    const ProtobufCFieldDescriptor *fd = &d->fields[k];
    /* the sweep is not a field of the schema: it names them (sweep.c) */
    if (section == PX__JS_TOP && !strcmp(fd->name, "sweep")) continue;
    if (section == PX__JS_TOP && fd->type == PROTOBUF_C_TYPE_MESSAGE) {
      int s = px__js_section_find(fd->name);
      if (s < 0) fprintf(stderr, "JobSpec.%s has no section in the schema\n", fd->name);
      assert_true(s >= 0);
      assert_ptr_equal(px__js_sections[s].desc, fd->descriptor);
      check_message_covered(fd->descriptor, s);
      continue;
    }
    int found = 0;
    for (int i = 0; i < px__js_nfields; i++)
      found |= px__js_fields[i].section == section && !strcmp(px__js_fields[i].key, fd->name);
    if (!found) fprintf(stderr, "%s.%s has no line in the schema table\n", d->short_name, fd->name);
    assert_true(found);
  }
}

static void test_schema_table_matches_the_proto(void **state) {
  (void)state;
  check_message_covered(&prunex__v1__job_spec__descriptor, PX__JS_TOP);
  for (int i = 0; i < px__js_nfields; i++) {
    const px__js_field_t *f = &px__js_fields[i];
    const ProtobufCFieldDescriptor *fd = px__js_fd(i);
    assert_non_null(fd);
    char path[64];
    assert_int_equal(px__js_find(px__js_path(i, path, sizeof path)), i);
    switch (f->kind) {
      case PX__JS_INT:
        assert_true(fd->type == PROTOBUF_C_TYPE_INT32 || fd->type == PROTOBUF_C_TYPE_UINT64);
        break;
      case PX__JS_SIZE: assert_int_equal(fd->type, PROTOBUF_C_TYPE_INT64); break;
      case PX__JS_DOUBLE: assert_int_equal(fd->type, PROTOBUF_C_TYPE_DOUBLE); break;
      case PX__JS_BOOL: assert_int_equal(fd->type, PROTOBUF_C_TYPE_BOOL); break;
      case PX__JS_STRATEGY: assert_int_equal(fd->type, PROTOBUF_C_TYPE_ENUM); break;
      case PX__JS_STRLIST:
        assert_int_equal(fd->type, PROTOBUF_C_TYPE_STRING);
        assert_int_equal(fd->label, PROTOBUF_C_LABEL_REPEATED);
        break;
      default:
        assert_int_equal(fd->type, PROTOBUF_C_TYPE_STRING);
        assert_int_not_equal(fd->label, PROTOBUF_C_LABEL_REPEATED);
    }
    /* every default is legal on its own */
    px__js_value_t v = {0};
    if (f->kind == PX__JS_DOUBLE) v.d = f->def;
    else if (f->kind == PX__JS_STRING || f->kind == PX__JS_CHOICE || f->kind == PX__JS_MODEL)
      v.s = f->def_str;
    else v.i = (f->flags & PX__JS_DERIVED) ? (int64_t)f->lo : (int64_t)f->def;
    assert_true(px__js_value_ok(i, &v));
  }
}

static void test_error_paths_do_not_leak(void **state) {
  (void)state;
  static const char *const bad[] = {
      "train:\n  batch_size: abc\n",
      "prune:\n  skip_layers: [a, b, a]\n",
      "prune:\n  skip_layers: [a, [b]]\n",
      "name: x\ncomm: {backend: nccl}\ncluster: {device: cpu}\n",
      "train: [\n",
      "a: 1\n---\nb: 2\n",
      "model: {name: x}\n",
  };
  px_mem_stats_t before, after;
  px_mem_stats(&before);
  for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
    Prunex__V1__JobSpec *s = NULL;
    assert_int_equal(px_jobspec_parse_string(bad[i], strlen(bad[i]), "bad.yaml", &s),
                     PX_ERR_INVALID);
    assert_null(s);
  }
  Prunex__V1__JobSpec *s = NULL;
  assert_int_equal(px_jobspec_parse_file("/nonexistent.yaml", &s), PX_ERR_IO);
  px_mem_stats(&after);
  assert_int_equal(before.live_bytes, after.live_bytes); /* ASan checks malloc'd memory */
}

/* libyaml is quadratic in flow nesting (100 KB of '[' took 11.6 s): more
 * than 32 open levels are refused at once, naming line and column; quoted
 * brackets and comments do not count, and ordinary nesting still parses. */
static void test_deep_nesting_is_refused_in_linear_time(void **state) {
  (void)state;
  size_t n = 1 << 20; /* the most a spec may be */
  char *deep = malloc(n + 1);
  assert_non_null(deep);
  const char *head = "model:\n  name: ";
  size_t h = strlen(head);
  memcpy(deep, head, h);
  memset(deep + h, '[', n - h);
  deep[n] = '\0';
  clock_t c0 = clock();
  expect_error(deep, 2, "bad.yaml:2:41:", "nested more than 32 levels", NULL);
  assert_true((double)(clock() - c0) / CLOCKS_PER_SEC < 0.5);
  free(deep);
  /* brackets in quotes and comments are text */
  Prunex__V1__JobSpec *s =
      parse_ok("name: \"[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[\"  # {{{{{{{{{{{{{{{{{{{{{{{{{{{{{{{{{{{{{{\n"
               "train: {epochs: 1}\n");
  assert_string_equal(s->name, "[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[");
  px_jobspec_free(s);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_every_example_parses_and_validates),
      cmocka_unit_test(test_quickstart_is_the_small_hsadmm_job),
      cmocka_unit_test(test_minimal_spec_gets_every_default),
      cmocka_unit_test(test_max_iterations_follows_the_data_budget),
      cmocka_unit_test(test_values_in_every_notation),
      cmocka_unit_test(test_bad_value_names_file_line_and_field),
      cmocka_unit_test(test_unknown_key_suggests_the_closest),
      cmocka_unit_test(test_duplicate_keys_are_refused),
      cmocka_unit_test(test_wrong_node_types_are_refused),
      cmocka_unit_test(test_yaml_syntax_errors_carry_libyaml_position),
      cmocka_unit_test(test_out_of_range_values_are_refused),
      cmocka_unit_test(test_cross_field_rules_are_refused),
      cmocka_unit_test(test_error_in_a_real_file_names_its_path),
      cmocka_unit_test(test_missing_file_is_an_io_error),
      cmocka_unit_test(test_parser_says_which_fields_were_given),
      cmocka_unit_test(test_parse_file_hands_back_the_text_it_read),
      cmocka_unit_test(test_bucket_bytes_accepts_units),
      cmocka_unit_test(test_canonical_yaml_parses_back_equal),
      cmocka_unit_test(test_wire_specs_are_validated_and_completed),
      cmocka_unit_test(test_absent_sections_write_proto_zeros),
      cmocka_unit_test(test_schema_table_matches_the_proto),
      cmocka_unit_test(test_error_paths_do_not_leak),
      cmocka_unit_test(test_deep_nesting_is_refused_in_linear_time),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
