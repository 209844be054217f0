/* Built by install_consumer.sh against an installed PruneX, through
 * pkg-config only: uses the pruning API and a generated proto type. */
#include <prunex.pb-c.h>
#include <prunex/prune.h>
#include <stdio.h>

int main(void) {
  Prunex__V1__JobSpec spec = PRUNEX__V1__JOB_SPEC__INIT;
  spec.strategy = PRUNEX__V1__STRATEGY__STRATEGY_HSADMM;
  if (protobuf_c_message_get_packed_size(&spec.base) == 0) return 1;
  printf("ok 0.3*10->%zu\n", px_prune_keep_count(0.3, 10));
  return 0;
}
