/* Sweeps in job specs: `sweep:` parses into the spec's axes;
 * each combination is the base spec with its values set (the last field
 * fastest) and a label naming them; the canonical YAML carries the sweep
 * back; bad sweeps (unknown or text fields, bad values, repeats, too many
 * combinations, a combination no rank could run) are refused with the
 * file, line and field; the wire check applies the same rules. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "prunex/jobspec.h"
#include "px_test_util.h"

#define BASE                                                                                 \
  "name: swp\nmodel: {name: resnet20}\ndataset: {name: synthetic}\n"                         \
  "cluster: {nodes: 1, workers_per_node: 1, device: cpu}\nstrategy: hsadmm\n"

static Prunex__V1__JobSpec *parse_ok(const char *yaml) {
  Prunex__V1__JobSpec *s = NULL;
  px_status_t st = px_jobspec_parse_string(yaml, strlen(yaml), "ok.yaml", &s);
  if (st != PX_OK) fprintf(stderr, "unexpected error: %s\n", px_last_error());
  assert_int_equal(st, PX_OK);
  return s;
}

/* Refused as "bad.yaml:LINE:" with want in the message. */
static void expect_error(const char *yaml, int line, const char *want) {
  Prunex__V1__JobSpec *s = NULL;
  px_status_t st = px_jobspec_parse_string(yaml, strlen(yaml), "bad.yaml", &s);
  char prefix[32];
  snprintf(prefix, sizeof prefix, "bad.yaml:%d:", line);
  const char *msg = px_last_error();
  if (st != PX_ERR_INVALID || strncmp(msg, prefix, strlen(prefix)) || !strstr(msg, want))
    fprintf(stderr, "status %d, message '%s'; wanted %s ... %s\n", st, msg, prefix, want);
  assert_int_equal(st, PX_ERR_INVALID);
  assert_null(s);
  assert_memory_equal(msg, prefix, strlen(prefix));
  assert_non_null(strstr(msg, want));
}

static void test_sweep_points_in_order(void **state) {
  (void)state;
  Prunex__V1__JobSpec *s = parse_ok(BASE "sweep:\n  prune.channel_keep: [0.3, 0.5, 0.7]\n"
                                         "  train.lr: [0.05, 0.1]\n  strategy: [hsadmm, ddp]\n");
  size_t n = 0;
  assert_int_equal(px_jobspec_sweep_count(s, &n), PX_OK);
  assert_int_equal(n, 12);
  static const double keep[] = {0.3, 0.5, 0.7}, lr[] = {0.05, 0.1};
  for (size_t k = 0; k < n; k++) {
    Prunex__V1__JobSpec *p = NULL;
    char label[256];
    assert_int_equal(px_jobspec_sweep_point(s, k, &p, label, sizeof label), PX_OK);
    assert_int_equal(p->n_sweep, 0);
    assert_true(p->prune->channel_keep == keep[k / 4]);
    assert_true(p->train->lr == lr[(k / 2) % 2]);
    assert_int_equal(p->strategy, k % 2 ? PRUNEX__V1__STRATEGY__STRATEGY_DDP
                                        : PRUNEX__V1__STRATEGY__STRATEGY_HSADMM);
    char want[256];
    snprintf(want, sizeof want, "prune.channel_keep=%s, train.lr=%s, strategy=%s",
             k / 4 == 0 ? "0.3" : k / 4 == 1 ? "0.5" : "0.7", (k / 2) % 2 ? "0.1" : "0.05",
             k % 2 ? "ddp" : "hsadmm");
    assert_string_equal(label, want);
    /* the rest is the base spec's */
    assert_string_equal(p->model->name, "resnet20");
    assert_int_equal(p->cluster->nodes, 1);
    assert_int_equal(px_jobspec_validate(p), PX_OK);
    px_jobspec_free(p);
  }
  Prunex__V1__JobSpec *p = NULL;
  assert_int_equal(px_jobspec_sweep_point(s, n, &p, NULL, 0), PX_ERR_INVALID);
  assert_null(p);
  px_jobspec_free(s);
}

static void test_sweep_yaml_round_trip(void **state) {
  (void)state;
  Prunex__V1__JobSpec *s = parse_ok(BASE "sweep:\n  train.batch_size: [16, 32]\n"
                                         "  comm.bucket_bytes: [1MiB, 4MiB]\n");
  char *yaml = NULL;
  assert_int_equal(px_jobspec_to_yaml(s, &yaml), PX_OK);
  assert_non_null(strstr(yaml, "sweep:\n  train.batch_size: [\"16\", \"32\"]\n"));
  Prunex__V1__JobSpec *back = parse_ok(yaml);
  assert_int_equal(back->n_sweep, 2);
  assert_string_equal(back->sweep[1]->field, "comm.bucket_bytes");
  assert_string_equal(back->sweep[1]->values[1], "4MiB");
  Prunex__V1__JobSpec *p = NULL;
  assert_int_equal(px_jobspec_sweep_point(back, 3, &p, NULL, 0), PX_OK);
  assert_int_equal(p->comm->bucket_bytes, 4 << 20);
  assert_int_equal(p->train->batch_size, 32);
  px_jobspec_free(p);
  px_jobspec_free(back);
  px_free(yaml);
  px_jobspec_free(s);
}

static void test_sweep_refusals(void **state) {
  (void)state;
  expect_error(BASE "sweep:\n  train.lrr: [0.1]\n", 7, "sweep.train.lrr: no such field");
  expect_error(BASE "sweep:\n  output_dir: [a, b]\n", 7, "only numeric and enum fields");
  expect_error(BASE "sweep:\n  train.lr: 0.1\n", 7, "expected a list of values");
  expect_error(BASE "sweep:\n  train.lr: []\n", 7, "expected a list of 1 to 1000 values");
  expect_error(BASE "sweep:\n  train.lr: [0.1, -1]\n", 7, "sweep.train.lr[1]: expected");
  expect_error(BASE "sweep:\n  train.lr: [0.1, 0.1]\n", 7, "'0.1' is listed twice");
  expect_error(BASE "sweep:\n  strategy: [hsadm]\n", 7, "did you mean 'hsadmm'?");
  expect_error(BASE "sweep: [train.lr]\n", 6, "sweep: expected a mapping");
  expect_error(BASE "sweep:\n  train.lr: [0.1]\nsweep:\n  train.lr: [0.2]\n", 8,
               "duplicate key 'sweep'");
  /* a combination that breaks a cross-field rule names its values */
  expect_error(BASE "train: {momentum: 0.9, nesterov: true}\n"
                    "sweep:\n  train.momentum: [0.9, 0]\n",
               8, "the combination train.momentum=0: spec.train.nesterov");
  /* 11 x 10 x 10 = 1100 combinations */
  char big[4096];
  int n = snprintf(big, sizeof big, BASE "sweep:\n  train.seed: [");
  for (int i = 0; i < 11; i++) n += snprintf(big + n, sizeof big - (size_t)n, "%s%d", i ? "," : "", i + 1);
  n += snprintf(big + n, sizeof big - (size_t)n, "]\n  train.batch_size: [");
  for (int i = 0; i < 10; i++) n += snprintf(big + n, sizeof big - (size_t)n, "%s%d", i ? "," : "", i + 1);
  n += snprintf(big + n, sizeof big - (size_t)n, "]\n  train.epochs: [");
  for (int i = 0; i < 10; i++) n += snprintf(big + n, sizeof big - (size_t)n, "%s%d", i ? "," : "", i + 1);
  snprintf(big + n, sizeof big - (size_t)n, "]\n");
  expect_error(big, 9, "more than 1000 combinations (at sweep.train.epochs)");
}

/* A spec from the wire: the same rules, named from spec. */
static void test_sweep_wire(void **state) {
  (void)state;
  Prunex__V1__JobSpec *s = parse_ok(BASE "sweep:\n  train.lr: [0.05, 0.1]\n");
  assert_int_equal(px_jobspec_check_submitted(s), PX_OK);
  free(s->sweep[0]->values[1]);
  s->sweep[0]->values[1] = strdup("fast");
  assert_int_equal(px_jobspec_check_submitted(s), PX_ERR_INVALID);
  assert_non_null(strstr(px_last_error(), "spec.sweep.train.lr[1]: expected"));
  size_t n = 0;
  assert_int_equal(px_jobspec_sweep_count(s, &n), PX_ERR_INVALID);
  free(s->sweep[0]->field);
  s->sweep[0]->field = strdup("name");
  assert_int_equal(px_jobspec_check_submitted(s), PX_ERR_INVALID);
  assert_non_null(strstr(px_last_error(), "spec.sweep.name: only numeric and enum"));
  px_jobspec_free(s);
  /* no sweep: one combination */
  s = parse_ok(BASE);
  assert_int_equal(px_jobspec_sweep_count(s, &n), PX_OK);
  assert_int_equal(n, 1);
  px_jobspec_free(s);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_sweep_points_in_order),
      cmocka_unit_test(test_sweep_yaml_round_trip),
      cmocka_unit_test(test_sweep_refusals),
      cmocka_unit_test(test_sweep_wire),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
