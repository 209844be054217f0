/* The job spec translated into the configurations the programs run
 * (libpxcore/strategy/jobspec_translate.c): the trainer's, the strategy's
 * and the data plane's. Apart from jobspec.h, whose parsing and checks are
 * spec-layer code that pxctl links, because these need the engine's and the
 * data plane's defaults (the distributed layer, libpxcore/LAYERS). */
#ifndef PRUNEX_JOBSPEC_TRANSLATE_H
#define PRUNEX_JOBSPEC_TRANSLATE_H

#include <stdint.h>

#include "prunex.pb-c.h"
#include "prunex/comm.h"
#include "prunex/jobspec.h"
#include "prunex/nn.h"
#include "prunex/px.h"
#include "prunex/strategy.h"

#ifdef __cplusplus
extern "C" {
#endif

/* The producers below take a complete spec (px_jobspec_fill_defaults, then
 * px_jobspec_validate passed): every section present. Strings in the
 * configurations point into spec, which must outlive them. */

/* The trainer's configuration (px_train_config_default, then model, data
 * set, optimiser, schedule, seed, augmentation, and threads when
 * cluster.threads_per_worker > 0). What depends on the rank's place (rank,
 * world_size, device, and threads when the spec leaves them to the
 * machine) is the caller's. Cannot fail. */
void px_jobspec_train_config(const Prunex__V1__JobSpec *spec, px_train_config_t *out);

/* The strategy's configuration: kind, iterations (admm.max_iterations),
 * local steps (train.local_steps, else train.local_epochs times
 * steps_per_epoch, px_trainer_steps_per_epoch of the rank's trainer),
 * penalties, prune keeps and skip_layers, topk_ratio, bucket_bytes,
 * quantize bits, seed, eval_every, checkpoint_every and keep, elastic.on and
 * min_nodes (spec.elastic; the store and the members callback are the
 * caller's). Zeroes *out
 * first: the callbacks (observe), checkpoint_dir and the test switches are
 * the caller's. Fails with PX_ERR_INVALID when the local steps of an
 * iteration exceed INT32_MAX or comm.quantize or comm.compress is unknown. */
px_status_t px_jobspec_strategy_config(const Prunex__V1__JobSpec *spec,
                                              int64_t steps_per_epoch, px_strategy_config_t *out);

/* The data plane's options: px_comm_opts_default, then comm.timeout_ms and
 * comm.bucket_bytes; an elastic job (spec.elastic) gets lost_ms =
 * timeout_ms / 2. The rendezvous keys, the leaders and the backend
 * (px_comm_choose_backend with comm.backend) are the caller's. */
void px_jobspec_comm_opts(const Prunex__V1__JobSpec *spec, px_comm_opts_t *out);

#ifdef __cplusplus
}
#endif
#endif
