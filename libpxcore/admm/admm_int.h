/* Internal pieces of admm/ that strategy/ shares: the decide-and-broadcast
 * protocol of the control phase (step 6 of docs/architecture.md, "H-SADMM
 * (one outer iteration)"), written once for H-SADMM (px_hsadmm_decide) and
 * the baselines (strategy.c), and the list of H-SADMM's state a checkpoint
 * holds (strategy/px_resume.h writes and reads the files; admm/ knows nothing
 * of them). */
#ifndef PX_ADMM_INT_H
#define PX_ADMM_INT_H

#include <stddef.h>
#include <stdint.h>

#include "prunex/comm.h"
#include "prunex/hsadmm.h"
#include "prunex/px.h"
#include "prunex/safetensors.h"

/* Rank 0's side of a decision: fills buf[1..n) and sets buf[0] to the
 * decision's stop (px__decide_stop_code: 0 go on, 1 stop, 2 suspend). An
 * error is broadcast as buf[0] = -1 so that the other ranks stop rather
 * than wait. */
typedef px_status_t (*px__decide_fill_fn)(void *ctx, double *buf);

/* buf[0] for a px_hsadmm_decision_t.stop (any other non-zero: stop). */
static inline double px__decide_stop_code(int stop) {
  return stop == PX_HSADMM_SUSPEND ? PX_HSADMM_SUSPEND : stop ? PX_HSADMM_STOP : PX_HSADMM_GO;
}

/* Rank 0 calls fill, then buf[0..n) is broadcast over world (rank 0's
 * decision on every rank). *stop is set from buf[0] (PX_HSADMM_GO, _STOP or
 * _SUSPEND). Fails on every rank
 * when rank 0's fill failed (rank 0 with fill's error, the others with
 * PX_ERR_PEER) or the data plane failed. */
px_status_t px__decide_broadcast(px_group_t *world, double *buf, size_t n,
                                 px__decide_fill_fn fill, void *ctx, int *stop);

/* px_hsadmm_create with H-SADMM's state (z, z_i, u, v and the round's
 * scratch) kept by the state ops table ops (admm/hsadmm_state.h) and the
 * round run there, packing and projecting included:
 * px__hss_cuda_ops for a model on the GPU, params[i].theta then being
 * device memory; px__hss_host_ops runs the same code on host memory, with
 * the host round's results bit for bit (tests). NULL: px_hsadmm_create.
 * Then px_hsadmm_z, _prox and _duals return state memory; comm.quantize,
 * comm.overlap, checkpoints (px__hsadmm_state_items) and N:M masks are
 * refused (PX_ERR_INVALID), the masks stay on the host. */
struct px__hss_ops;
px_status_t px__hsadmm_create_on(px_comm_t *comm, const px_hsadmm_param_t *params, int nparams,
                                 const px_hsadmm_config_t *cfg, const struct px__hss_ops *ops,
                                 px_hsadmm_t **out);
/* The same, for a rank that joins a running job (joining 1): no collective
 * (the kept ranks are mid-run); its state stays zero until px_hsadmm_join
 * fills it. */
px_status_t px__hsadmm_create_joining(px_comm_t *comm, const px_hsadmm_param_t *params,
                                      int nparams, const px_hsadmm_config_t *cfg,
                                      const struct px__hss_ops *ops, int joining,
                                      px_hsadmm_t **out);
/* dst = src, bytes of the state's memory (the device-state consensus into
 * the model, and back), queued after the round's work. */
px_status_t px__hsadmm_state_copy(const px_hsadmm_t *h, void *dst, const void *src,
                                  size_t bytes);
/* 1 when h runs the device-state round. */
int px__hsadmm_on_state(const px_hsadmm_t *h);

/* Which ranks hold the same bits of a checkpoint item: every rank, the
 * ranks of a node, or one rank (the values of strategy/px_resume.h's
 * px_rs_scope_t). */
typedef enum { PX__ITEM_GLOBAL = 0, PX__ITEM_NODE = 1, PX__ITEM_RANK = 2 } px__item_scope_t;

typedef struct {
  const char *name;         /* static */
  px__item_scope_t scope;
  px_st_dtype_t dtype;
  void *data;               /* the handle's own buffer, restored in place */
  size_t bytes;
} px__state_item_t;

#define PX__HSADMM_MAX_ITEMS 16

/* H-SADMM's state for a checkpoint: fills items[PX__HSADMM_MAX_ITEMS] and
 * returns how many. The buffers stay the handle's. Cannot fail. */
int px__hsadmm_state_items(px_hsadmm_t *h, px__state_item_t *items);
/* After a load: restarts the node state (node_fresh) and the rank's dual
 * (rank_fresh) that were not restored, and rebuilds the pack plan from the
 * masks. Collective over the world with comm.quantize. */
px_status_t px__hsadmm_state_resumed(px_hsadmm_t *h, int node_fresh, int rank_fresh);

#endif
