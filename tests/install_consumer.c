/* Built by install_consumer.sh against an installed PruneX, through
 * pkg-config only: uses the pruning API and a generated proto type, and
 * includes every installed header (the public ones include no internal
 * one, so they compile from an install alone). */
#include <prunex.pb-c.h>
#include <prunex/admm.h>
#include <prunex/check.h>
#include <prunex/comm.h>
#include <prunex/cuda.h>
#include <prunex/data.h>
#include <prunex/export.h>
#include <prunex/hsadmm.h>
#include <prunex/kv.h>
#include <prunex/nn.h>
#include <prunex/ops.h>
#include <prunex/prune.h>
#include <prunex/px.h>
#include <prunex/strategy.h>
#include <prunex/tensor.h>
#include <stdio.h>

int main(void) {
  Prunex__V1__JobSpec spec = PRUNEX__V1__JOB_SPEC__INIT;
  spec.strategy = PRUNEX__V1__STRATEGY__STRATEGY_HSADMM;
  if (protobuf_c_message_get_packed_size(&spec.base) == 0) return 1;
  printf("ok 0.3*10->%zu\n", px_prune_keep_count(0.3, 10));
  return 0;
}
