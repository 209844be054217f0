/* The spec translated once: px_jobspec_check_submitted refuses a
 * spec as a client submitted it with a message naming the field from the
 * spec down, lets proto zeros take their defaults, and applies the rules of
 * px_jobspec_validate on a completed copy without changing the spec; the
 * producers give the trainer's, the strategy's, the data plane's and the
 * control policy's configurations from one spec. */
#include <glob.h>
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "prunex/jobspec.h"
#include "prunex/jobspec_translate.h"
#include "px_test_util.h"

/* A spec as a minimal client fills it: the required fields, the rest at
 * their proto zeros (sections present but empty, or absent). */
typedef struct {
  Prunex__V1__JobSpec spec;
  Prunex__V1__ModelSpec model;
  Prunex__V1__DatasetSpec dataset;
  Prunex__V1__ClusterSpec cluster;
  Prunex__V1__TrainSpec train;
  Prunex__V1__PruneSpec prune;
  Prunex__V1__AdmmSpec admm;
  Prunex__V1__CommSpec comm;
} wire_t;

static void wire_init(wire_t *w) {
  *w = (wire_t){.spec = PRUNEX__V1__JOB_SPEC__INIT,
                .model = PRUNEX__V1__MODEL_SPEC__INIT,
                .dataset = PRUNEX__V1__DATASET_SPEC__INIT,
                .cluster = PRUNEX__V1__CLUSTER_SPEC__INIT,
                .train = PRUNEX__V1__TRAIN_SPEC__INIT,
                .prune = PRUNEX__V1__PRUNE_SPEC__INIT,
                .admm = PRUNEX__V1__ADMM_SPEC__INIT,
                .comm = PRUNEX__V1__COMM_SPEC__INIT};
  w->spec.name = "wire";
  w->spec.strategy = PRUNEX__V1__STRATEGY__STRATEGY_HSADMM;
  w->model.name = "resnet20";
  w->dataset.name = "synthetic";
  w->cluster.nodes = 2;
  w->cluster.workers_per_node = 2;
  w->cluster.device = "cpu";
  w->spec.model = &w->model;
  w->spec.dataset = &w->dataset;
  w->spec.cluster = &w->cluster;
  w->spec.train = &w->train;
  w->spec.prune = &w->prune;
  w->spec.admm = &w->admm;
  w->spec.comm = &w->comm;
}

/* Refused with PX_ERR_INVALID and a message that starts with start. */
static void expect_refused(const wire_t *w, const char *start) {
  px_status_t st = px_jobspec_check_submitted(w ? &w->spec : NULL);
  const char *msg = px_last_error();
  if (st != PX_ERR_INVALID || strncmp(msg, start, strlen(start)) != 0)
    fail_msg("status %d, message '%s', wanted a message starting '%s'", st, msg, start);
}

static void test_a_minimal_client_spec_passes_and_is_not_changed(void **state) {
  (void)state;
  wire_t w;
  wire_init(&w);
  assert_int_equal(px_jobspec_check_submitted(&w.spec), PX_OK);
  /* the defaults went into a copy only */
  assert_int_equal(w.train.batch_size, 0);
  assert_true(w.admm.rho1 == 0.0);
  assert_string_equal(w.comm.backend, "");
  w.spec.train = NULL; /* absent sections take their defaults too */
  w.spec.comm = NULL;
  w.spec.admm = NULL;
  assert_int_equal(px_jobspec_check_submitted(&w.spec), PX_OK);
}

static void test_required_fields_are_named_when_missing(void **state) {
  (void)state;
  wire_t w;
  expect_refused(NULL, "spec: required"); /* wire_t NULL: spec NULL */
  wire_init(&w);
  w.cluster.nodes = 0;
  expect_refused(&w, "spec.cluster.nodes: required, expected a positive integer");
  wire_init(&w);
  w.cluster.workers_per_node = 0;
  expect_refused(&w, "spec.cluster.workers_per_node: required");
  wire_init(&w);
  w.spec.cluster = NULL;
  expect_refused(&w, "spec.cluster.nodes: required (section cluster is missing)");
  wire_init(&w);
  w.spec.strategy = PRUNEX__V1__STRATEGY__STRATEGY_UNSPECIFIED;
  expect_refused(&w, "spec.strategy: required, expected one of hsadmm");
  wire_init(&w);
  w.model.name = "";
  expect_refused(&w, "spec.model.name: required");
  wire_init(&w);
  w.spec.dataset = NULL;
  expect_refused(&w, "spec.dataset.name: required (section dataset is missing)");
}

static void test_bad_values_name_the_field_and_the_value(void **state) {
  (void)state;
  wire_t w;
  wire_init(&w);
  w.cluster.nodes = -3;
  expect_refused(&w, "spec.cluster.nodes: expected a positive integer, got -3");
  wire_init(&w);
  w.cluster.workers_per_node = 5000;
  expect_refused(&w, "spec.cluster.workers_per_node: expected an integer in [1, 4096], got 5000");
  wire_init(&w);
  w.cluster.device = "tpu";
  expect_refused(&w, "spec.cluster.device: expected one of auto, cpu, cuda, got 'tpu'");
  wire_init(&w);
  w.train.lr = NAN;
  expect_refused(&w, "spec.train.lr: expected a number > 0, got nan");
  wire_init(&w);
  w.train.momentum = 1.0;
  expect_refused(&w, "spec.train.momentum: expected a number in [0, 1), got 1");
  wire_init(&w);
  w.prune.filter_keep = 1.5;
  expect_refused(&w, "spec.prune.filter_keep: expected a number in (0, 1], got 1.5");
  wire_init(&w);
  w.admm.rho1 = -1;
  expect_refused(&w, "spec.admm.rho1: expected a number > 0, got -1");
  wire_init(&w);
  w.admm.mu = 0.5;
  expect_refused(&w, "spec.admm.mu: expected a number > 1, got 0.5");
  wire_init(&w);
  w.comm.bucket_bytes = 6;
  expect_refused(&w, "spec.comm.bucket_bytes: expected a size in bytes that is a positive "
                     "multiple of 4");
  wire_init(&w);
  w.comm.topk_ratio = -0.1;
  expect_refused(&w, "spec.comm.topk_ratio: expected a number in (0, 1], got -0.1");
  wire_init(&w);
  w.model.name = "resnet999";
  expect_refused(&w, "spec.model.name: expected one of resnet20");
}

static void test_text_must_be_utf8(void **state) {
  (void)state;
  wire_t w;
  wire_init(&w);
  w.spec.name = "bad-\xff-name";
  expect_refused(&w, "spec.name: not valid UTF-8");
  wire_init(&w);
  w.dataset.path = "/data/\xc3";
  expect_refused(&w, "spec.dataset.path: not valid UTF-8");
  wire_init(&w);
  char *skip[] = {"conv1", "fc\xfe"};
  w.prune.skip_layers = skip;
  w.prune.n_skip_layers = 2;
  expect_refused(&w, "spec.prune.skip_layers[1]: not valid UTF-8");
}

static void test_cross_field_rules_apply_after_the_defaults(void **state) {
  (void)state;
  wire_t w;
  wire_init(&w);
  w.dataset.name = "cifar10";
  expect_refused(&w, "spec.dataset.path: cifar10 has no default location");
  wire_init(&w);
  w.comm.backend = "nccl";
  expect_refused(&w, "spec.comm.backend: nccl moves device memory");
  wire_init(&w);
  w.train.nesterov = 1; /* momentum 0 is a legal setting: it stays, and the rule applies */
  expect_refused(&w, "spec.train.nesterov: Nesterov momentum needs train.momentum > 0");
  wire_init(&w);
  w.admm.rho1 = 5;
  w.admm.rho_max = 2;
  expect_refused(&w, "spec.admm.rho_max: 2 is below the initial penalty admm.rho1 (5)");
  wire_init(&w);
  w.cluster.nodes = 2048;
  w.cluster.workers_per_node = 1024;
  expect_refused(&w, "spec.cluster.workers_per_node: 2048 nodes x 1024 workers");
  wire_init(&w);
  w.train.precision = "fp16";
  expect_refused(&w, "spec.train.precision");
}

/* Bytes protobuf-c unpacks but cannot read back once repacked (a field
 * number 0 under a non-canonical tag, found by fuzzing the coordinator):
 * refused, as such a spec could never be stored. */
static void test_a_spec_that_does_not_repack_is_refused(void **state) {
  (void)state;
  wire_t w;
  wire_init(&w);
  uint8_t buf[1024];
  size_t n = protobuf_c_message_get_packed_size(&w.spec.base);
  assert_true(n + 3 < sizeof buf);
  protobuf_c_message_pack(&w.spec.base, buf);
  memcpy(buf + n, "\x82\x00\x00", 3);
  Prunex__V1__JobSpec *s = prunex__v1__job_spec__unpack(NULL, n + 3, buf);
  assert_non_null(s);
  assert_int_equal(px_jobspec_check_submitted(s), PX_ERR_INVALID);
  assert_non_null(strstr(px_last_error(), "spec: cannot be read back once packed"));
  px_jobspec_free(s);
}

/* Every example the project ships passes as it would be submitted. */
static void test_examples_pass_as_submitted(void **state) {
  (void)state;
  glob_t g;
  assert_int_equal(glob(PX_SOURCE_DIR "/examples/*.yaml", 0, NULL, &g), 0);
  assert_true(g.gl_pathc > 0);
  for (size_t i = 0; i < g.gl_pathc; i++) {
    if (px_test_skip_example(g.gl_pathv[i])) continue;
    Prunex__V1__JobSpec *s = NULL;
    if (px_jobspec_parse_file(g.gl_pathv[i], &s) != PX_OK) fail_msg("%s", px_last_error());
    if (px_jobspec_check_submitted(s) != PX_OK)
      fail_msg("%s: %s", g.gl_pathv[i], px_last_error());
    px_jobspec_free(s);
  }
  globfree(&g);
}

static Prunex__V1__JobSpec *parse(const char *yaml) {
  Prunex__V1__JobSpec *s = NULL;
  if (px_jobspec_parse_string(yaml, strlen(yaml), "t.yaml", &s) != PX_OK)
    fail_msg("%s", px_last_error());
  return s;
}

static void test_the_producers_translate_every_field(void **state) {
  (void)state;
  Prunex__V1__JobSpec *s = parse(
      "strategy: hsadmm\nmodel: {name: resnet32}\n"
      "dataset: {name: synthetic, augment: false}\n"
      "cluster: {nodes: 2, workers_per_node: 3, threads_per_worker: 5, device: cuda}\n"
      "train: {epochs: 4, batch_size: 32, lr: 0.05, momentum: 0.8, nesterov: true,"
      " weight_decay: 1e-4, local_epochs: 2, seed: 77, lr_schedule: step, eval_every: 3,"
      " precision: bf16}\n"
      "prune: {filter_keep: 0.5, channel_keep: 0.75, shape_keep: 0.9, nm_n: 2, nm_m: 4,"
      " skip_layers: [conv1], uncoupled_channel_keep: 1}\n"
      "admm: {rho1: 0.01, rho2: 0.02, max_iterations: 9, mu: 5, tau: 3, rho_max: 100,"
      " freeze_on_stable: 0, eps_abs: 0, eps_rel: 0}\n"
      "comm: {bucket_bytes: 4KiB, timeout_ms: 1234, topk_ratio: 0.5, quantize: 8}\n"
      "recovery: {checkpoint_every: 2, keep: 3}\n");
  px_train_config_t tc;
  px_jobspec_train_config(s, &tc);
  assert_string_equal(tc.arch, "resnet32");
  assert_string_equal(tc.dataset, "synthetic");
  assert_null(tc.data_dir);
  assert_int_equal(tc.batch, 32);
  assert_int_equal(tc.epochs, 4);
  assert_true(tc.lr == 0.05 && tc.momentum == 0.8 && tc.weight_decay == 1e-4);
  assert_int_equal(tc.nesterov, 1);
  assert_string_equal(tc.lr_schedule, "step");
  assert_int_equal(tc.seed, 77);
  assert_int_equal(tc.augment, 0);
  assert_int_equal(tc.threads, 5);
  assert_int_equal(tc.precision, PX_PRECISION_BF16);

  px_strategy_config_t sc;
  assert_int_equal(px_jobspec_strategy_config(s, 50, &sc), PX_OK);
  assert_int_equal(sc.kind, PX_STRATEGY_HSADMM);
  assert_int_equal(sc.iterations, 9);
  assert_int_equal(sc.local_steps, 100); /* 2 local epochs of 50 steps */
  assert_true(sc.rho1 == 0.01 && sc.rho2 == 0.02);
  assert_true(sc.keep.filter_keep == 0.5 && sc.keep.channel_keep == 0.75 &&
              sc.keep.shape_keep == 0.9 && sc.keep.uncoupled_keep == 1.0);
  assert_int_equal(sc.keep.nm_n, 2);
  assert_int_equal(sc.keep.nm_m, 4);
  assert_int_equal(sc.nskip, 1);
  assert_string_equal(sc.skip_layers[0], "conv1");
  assert_true(sc.topk_ratio == 0.5);
  assert_int_equal(sc.bucket_bytes, 4096);
  assert_int_equal(sc.quantize_bits, 8);
  assert_int_equal(sc.overlap, 0);
  assert_int_equal(sc.seed, 77);
  assert_int_equal(sc.eval_every, 3);
  assert_int_equal(sc.checkpoint_every, 2);
  assert_int_equal(sc.checkpoint_keep, 3);
  assert_null(sc.checkpoint_dir); /* the caller's */
  assert_null(sc.observe);
  /* an iteration of more steps than an int holds is refused, naming the field */
  assert_int_equal(px_jobspec_strategy_config(s, INT64_C(3) << 31, &sc), PX_ERR_INVALID);
  assert_non_null(strstr(px_last_error(), "train.local_epochs"));

  px_comm_opts_t co;
  px_jobspec_comm_opts(s, &co);
  assert_int_equal(co.timeout_ms, 1234);
  assert_int_equal(co.bucket_bytes, 4096);
  assert_int_equal(co.nccl, 0);

  px_admm_policy_t p;
  px_jobspec_admm_policy(s, &p);
  assert_true(p.mu == 5 && p.tau == 3 && p.rho_max == 100);
  assert_int_equal(p.max_iterations, 9);
  assert_int_equal(p.freeze_on_stable, 0);
  assert_int_equal(p.adaptive_rho, 1);
  /* eps 0 in the spec is the proto zero: the policy's defaults stay */
  px_admm_policy_t d;
  px_admm_policy_defaults(&d);
  assert_true(p.eps_abs == d.eps_abs && p.eps_rel == d.eps_rel);
  px_jobspec_free(s);

  /* comm.overlap (exact exchange only) reaches the strategy */
  s = parse("strategy: hsadmm\nmodel: {name: resnet20}\ndataset: {name: synthetic}\n"
            "cluster: {nodes: 2, workers_per_node: 1}\ncomm: {overlap: true}\n");
  assert_int_equal(px_jobspec_strategy_config(s, 50, &sc), PX_OK);
  assert_int_equal(sc.overlap, 1);
  assert_int_equal(sc.quantize_bits, 0);
  assert_int_equal(sc.compress, 0);
  px_jobspec_free(s);

  /* comm.compress lossless reaches the strategy */
  s = parse("strategy: hsadmm\nmodel: {name: resnet20}\ndataset: {name: synthetic}\n"
            "cluster: {nodes: 2, workers_per_node: 1}\ncomm: {compress: lossless}\n");
  assert_int_equal(px_jobspec_strategy_config(s, 50, &sc), PX_OK);
  assert_int_equal(sc.compress, 1);
  assert_int_equal(sc.overlap, 0);
  px_jobspec_free(s);

  /* admm.rho1_ramp reaches the policy (absent: 1, no ramp) */
  s = parse("strategy: hsadmm\nmodel: {name: resnet20}\ndataset: {name: synthetic}\n"
            "cluster: {nodes: 2, workers_per_node: 1}\nadmm: {rho1_ramp: 1.2}\n");
  px_jobspec_admm_policy(s, &p);
  assert_true(p.rho1_ramp == 1.2);
  /* prune.uncoupled_channel_keep absent: 0, channel_keep's */
  assert_int_equal(px_jobspec_strategy_config(s, 50, &sc), PX_OK);
  assert_true(sc.keep.uncoupled_keep == 0.0);
  assert_true(px_prune_uncoupled_keep(&sc.keep) == sc.keep.channel_keep);
  assert_true(sc.mac_keep == 0.0); /* no budget */
  assert_int_equal(sc.keep_ramp, 0); /* prune.ramp_iterations absent: no ramp */
  px_jobspec_free(s);
  /* prune.mac_keep reaches the strategy, which chooses the channel keep */
  s = parse("strategy: hsadmm\nmodel: {name: resnet20}\ndataset: {name: synthetic}\n"
            "cluster: {nodes: 2, workers_per_node: 1}\nprune: {mac_keep: 0.5, ramp_iterations: 30}\n");
  assert_int_equal(px_jobspec_strategy_config(s, 50, &sc), PX_OK);
  assert_true(sc.mac_keep == 0.5 && sc.keep.channel_keep == 1.0);
  assert_int_equal(sc.keep_ramp, 30);
  px_jobspec_free(s);

  px_jobspec_admm_policy(NULL, &p); /* no spec: the defaults */
  assert_true(p.mu == d.mu && p.max_iterations == d.max_iterations);
  assert_true(p.rho1_ramp == 1.0);
}

/* spec.elastic: the strategy's elastic.on and min_nodes, the data plane's
 * lost_ms (half the collective timeout); a job without it: neither. */
static void test_elastic_maps_to_the_strategy_and_the_data_plane(void **state) {
  (void)state;
  Prunex__V1__JobSpec *s = parse("strategy: hsadmm\ncluster: {nodes: 3}\n"
                                 "elastic: {min_nodes: 2, max_nodes: 3}\n"
                                 "comm: {timeout_ms: 8000}\n");
  px_strategy_config_t sc;
  assert_int_equal(px_jobspec_strategy_config(s, 100, &sc), PX_OK);
  assert_int_equal(sc.elastic.on, 1);
  assert_int_equal(sc.elastic.min_nodes, 2);
  assert_null(sc.elastic.kv);
  assert_null(sc.elastic.members);
  px_comm_opts_t co;
  px_jobspec_comm_opts(s, &co);
  assert_int_equal(co.lost_ms, 4000);
  px_jobspec_free(s);
  s = parse("strategy: hsadmm\ncluster: {nodes: 3}\n");
  assert_int_equal(px_jobspec_strategy_config(s, 100, &sc), PX_OK);
  assert_int_equal(sc.elastic.on, 0);
  px_jobspec_comm_opts(s, &co);
  assert_int_equal(co.lost_ms, 0);
  px_jobspec_free(s);
}

static void test_local_steps_win_and_baselines_need_none(void **state) {
  (void)state;
  Prunex__V1__JobSpec *s = parse("strategy: ddp\ntrain: {local_steps: 7, local_epochs: 3}\n");
  px_strategy_config_t sc;
  assert_int_equal(px_jobspec_strategy_config(s, 1000, &sc), PX_OK);
  assert_int_equal(sc.kind, PX_STRATEGY_DDP);
  assert_int_equal(sc.local_steps, 7);
  assert_int_equal(sc.checkpoint_every, 0);
  assert_int_equal(sc.quantize_bits, 0);
  px_jobspec_free(s);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_a_minimal_client_spec_passes_and_is_not_changed),
      cmocka_unit_test(test_required_fields_are_named_when_missing),
      cmocka_unit_test(test_bad_values_name_the_field_and_the_value),
      cmocka_unit_test(test_text_must_be_utf8),
      cmocka_unit_test(test_cross_field_rules_apply_after_the_defaults),
      cmocka_unit_test(test_a_spec_that_does_not_repack_is_refused),
      cmocka_unit_test(test_examples_pass_as_submitted),
      cmocka_unit_test(test_the_producers_translate_every_field),
      cmocka_unit_test(test_local_steps_win_and_baselines_need_none),
      cmocka_unit_test(test_elastic_maps_to_the_strategy_and_the_data_plane),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
