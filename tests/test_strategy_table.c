/* The table of strategies (strategy.h): every kind has one entry with a
 * name the job spec accepts, names and kinds round-trip, and the lists the
 * job spec and the coordinator print come from it. The table is engine-free
 * data (policy/strategy_info.c, in the client part too); the engine's operations
 * (strategy.c) are checked against it: one set per entry, none besides.
 * The architecture names (arch/arch.c) are one table in the same way. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include <cmocka.h>

#include "prunex/jobspec.h"
#include "prunex/nn.h"
#include "prunex/strategy.h"
#include "strategy/strategy_int.h"

static void names_and_kinds_round_trip(void **state) {
  (void)state;
  assert_int_equal(px_strategy_count(), 4);
  int defaults = 0;
  for (int i = 0; i < px_strategy_count(); i++) {
    const px_strategy_info_t *s = px_strategy_at(i);
    assert_non_null(s);
    assert_ptr_equal(px_strategy_info(s->kind), s);
    assert_int_equal(px_strategy_lookup(s->name), s->kind);
    assert_string_equal(px_strategy_name(s->kind), s->name);
    assert_string_equal(px_jobspec_strategy_name((Prunex__V1__Strategy)s->kind), s->name);
    assert_true(strlen(s->description) > 0);
    defaults += s->is_default;
  }
  assert_int_equal(defaults, 1);
  assert_null(px_strategy_at(px_strategy_count()));
  assert_null(px_strategy_info((px_strategy_kind_t)0));
  assert_int_equal(px_strategy_lookup("powersgd"), 0);
  assert_string_equal(px_strategy_name((px_strategy_kind_t)99), "unknown");
}

static void admm_flag_marks_the_hsadmm_strategies(void **state) {
  (void)state;
  assert_true(px_strategy_info(PX_STRATEGY_HSADMM)->admm);
  assert_true(px_strategy_info(PX_STRATEGY_HSADMM_FLAT)->admm);
  assert_false(px_strategy_info(PX_STRATEGY_DDP)->admm);
  assert_false(px_strategy_info(PX_STRATEGY_TOPK)->admm);
}

static void names_join_and_truncate(void **state) {
  (void)state;
  char buf[128];
  assert_string_equal(px_strategy_names(buf, sizeof buf, ", "), "hsadmm, hsadmm-flat, ddp, topk");
  assert_string_equal(px_strategy_names(buf, sizeof buf, " "), "hsadmm hsadmm-flat ddp topk");
  char small[8];
  px_strategy_names(small, sizeof small, ", ");
  assert_string_equal(small, "hsadmm,");
}

static void every_entry_has_operations_and_no_other_kind_does(void **state) {
  (void)state;
  for (int i = 0; i < px_strategy_count(); i++) {
    const px__strategy_ops_t *ops = px__strategy_ops(px_strategy_at(i)->kind);
    assert_non_null(ops);
    assert_int_equal(ops->kind, px_strategy_at(i)->kind);
    assert_non_null(ops->create);
  }
  for (int k = -2; k < 64; k++)
    assert_true((px__strategy_ops((px_strategy_kind_t)k) != NULL) ==
                (px_strategy_info((px_strategy_kind_t)k) != NULL));
}

static void arch_list_is_the_table(void **state) {
  (void)state;
  char list[256];
  snprintf(list, sizeof list, "%s", px_model_arch_list());
  assert_string_equal(list, "resnet20 resnet32 resnet56 resnet18 resnet34 resnet50 resnet101 "
                            "resnet152 wrn50_2");
  int n = 0;
  for (char *save, *t = strtok_r(list, " ", &save); t; t = strtok_r(NULL, " ", &save), n++) {
    assert_true(px_model_arch_known(t));
    assert_string_equal(px_model_arch_name(t), t);
  }
  assert_int_equal(n, 9);
  assert_false(px_model_arch_known("resnet21"));
  assert_false(px_model_arch_known(NULL));
  assert_ptr_equal(px_model_arch_list(), px_model_arch_list());
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(names_and_kinds_round_trip),
      cmocka_unit_test(admm_flag_marks_the_hsadmm_strategies),
      cmocka_unit_test(names_join_and_truncate),
      cmocka_unit_test(every_entry_has_operations_and_no_other_kind_does),
      cmocka_unit_test(arch_list_is_the_table),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
