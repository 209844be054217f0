/* The part of prunex/hsadmm.h internal to libpxcore, its programs and its tests
 * (not installed, not exported: docs/architecture.md, "libpxcore"). */
#ifndef PRUNEX_HSADMM_INTERNAL_H
#define PRUNEX_HSADMM_INTERNAL_H

#include "prunex/hsadmm.h"

#ifdef __cplusplus
extern "C" {
#endif

/* comm.quantize: with bits 8 or 4, each leader sends its packed z_i (its
 * change from z, with error feedback; the leaders track the sum of the v_i
 * themselves, so v_i is not sent) as block-scaled integers with stochastic rounding and error feedback
 * (quantize.h) in an allgather of bytes over the leaders, instead of the
 * f32 allreduce, and every leader decodes and sums the payloads in node
 * order, so z stays bit-identical on every rank; intra-node exchanges and
 * masks stay exact. seed keys the rounding (with the iteration, the rank and
 * the bucket), so a rerun sends the same bytes. bits 0 is the exact
 * exchange. Call on every rank before the first px_hsadmm_sync (it
 * allocates the buffers then; syncs allocate nothing). Fails with
 * PX_ERR_INVALID for other widths or in flat mode, PX_ERR_STATE after a
 * sync, PX_ERR_NOMEM. */
px_status_t px_hsadmm_set_quantize(px_hsadmm_t *h, int bits, uint64_t seed);

/* comm.compress lossless (strategy hsadmm, exact exchange, host state):
 * each leader codes its packed z_i + v_i against its own payload of the
 * round before, as every leader holds it (lossless.h), and the leaders
 * allgather the payloads instead of the f32 allreduce; every leader decodes
 * each payload against its copy of that leader's last one and sums them in
 * node order. The same floats arrive, so with two nodes z is bit for bit
 * what the plain exchange gives (the sum of two is the same in any order);
 * with more, the order of the sum may differ from the allreduce's, the same
 * on every leader. Each leader keeps every leader's last payload in
 * parameter layout (M * total floats); they restart at zero on a resume,
 * on every leader alike. A payload that does not decode to its sender's
 * floats (a checksum in it) fails the round with PX_ERR_FORMAT naming the
 * sending node. Call on every rank before the first px_hsadmm_sync (it
 * allocates then; syncs allocate nothing). Fails with PX_ERR_INVALID in
 * flat, quantized or overlapped mode or with the device state,
 * PX_ERR_STATE after a sync, PX_ERR_NOMEM. */
px_status_t px_hsadmm_set_compress(px_hsadmm_t *h, int lossless);

/* comm.overlap (strategy hsadmm, exact exchange only): the leaders' exchange
 * of a round is packed by px_hsadmm_sync but sent by px_hsadmm_overlap_start,
 * which the caller calls on every rank when the next local phase begins
 * (after the round's last collective); it then runs on the communicator's
 * progress thread while the workers train, and the next px_hsadmm_sync
 * takes its z first. This changes the math in one place: the next local
 * phase starts from the z of the round before moved by the node's last step
 * (px_hsadmm_restart_point; the proximal targets
 * z_i and u are exact); the round's inter residuals are reported with that
 * z too. px_hsadmm_set_drain(h, 1) before a sync makes that round exchange
 * at once (a round that is evaluated, checkpointed or last: z is read);
 * px_hsadmm_decide drains itself before a stop, a freeze or a change of rho;
 * px_hsadmm_overlap_drain takes a pending z at once (collective over the
 * node). Set on every rank before the first sync. Fails with PX_ERR_INVALID
 * in flat or quantized mode, PX_ERR_STATE after a sync, PX_ERR_NOMEM. */
px_status_t px_hsadmm_set_overlap(px_hsadmm_t *h, int on);

/* prune.mac_keep: at the freeze every part of the masks becomes z's own
 * projection (mask_z, the same on every rank) instead of the OR of the
 * nodes' masks, which keeps more groups wherever the nodes chose
 * differently and would take the compact model over the budget the keep
 * was chosen for. Set on every rank alike (a rank joining an elastic job
 * too) before the freeze. */
void px_hsadmm_set_exact_freeze(px_hsadmm_t *h, int on);
/* prune.ramp_iterations: round t < K projects with
 * px_prune_keep_ramp(cfg.keep, t, K), falling from everything kept to
 * cfg.keep, and the masks freeze no earlier than round K (a freeze the
 * controller decides before waits for it). Set on every rank alike before
 * the first sync; 0: off. PX_ERR_INVALID for K < 0 or comm.overlap. */
px_status_t px_hsadmm_set_keep_ramp(px_hsadmm_t *h, int K);
void px_hsadmm_set_drain(px_hsadmm_t *h, int drain);
px_status_t px_hsadmm_overlap_start(px_hsadmm_t *h);
px_status_t px_hsadmm_overlap_drain(px_hsadmm_t *h);
/* Where parameter i's next local phase starts (numel floats into dst): z;
 * while an exchange is pending, z^(k-1) + z_i^k - z_i^(k-1), the last z
 * moved by this node's latest step (the same on every rank of a node). */
void px_hsadmm_restart_point(const px_hsadmm_t *h, int i, float *dst);
/* 1 while a round's exchange is packed or in flight and its z not taken. */
int px_hsadmm_pending(const px_hsadmm_t *h);

/* The proximal target of parameter i for the local phase: z_i (z in flat
 * mode), u and the current rho1. Pointers stay valid for the handle's life. */
void px_hsadmm_prox(const px_hsadmm_t *h, int i, const float **z, const float **u,
                    float *rho1);

int px_hsadmm_frozen(const px_hsadmm_t *h);

double px_hsadmm_rho1(const px_hsadmm_t *h, int i);
/* The scaled duals of parameter i: u (this rank) and v (this node). */
void px_hsadmm_duals(const px_hsadmm_t *h, int i, const float **u, const float **v);
double px_hsadmm_rho2(const px_hsadmm_t *h, int i);

px_status_t px_hsadmm_local_control(void *ctx, const px_hsadmm_round_t *round,
                                    px_hsadmm_decision_t *decision);

/* ---- elastic runs -------------------------------------------------
 * on: every px_hsadmm_sync first copies the state it may change (u, z_i, v,
 * z and their previous values, the masks, the penalties, the freeze flag,
 * the round number) into a copy allocated here once (six families of state
 * memory), so that a round broken by a lost node can be run again from where
 * it began. Not with comm.overlap, comm.quantize or comm.compress (their
 * state spans rounds or is sized by the node count): PX_ERR_INVALID. */
px_status_t px_hsadmm_set_elastic(px_hsadmm_t *h, int on);

/* After px_comm_rebuild (on every member rank): the handle runs on comm from
 * here on, its consensus, mask OR and penalties over comm's nodes. rollback
 * 1: the last round failed, so the state goes back to the start of its
 * sync (which the caller runs again, with the same theta, then decides);
 * 0: a boundary between complete rounds (a shrink by decision). Each rank
 * keeps its own u, each node its z_i and v, every rank z, the masks, the
 * penalties and the round number: no checkpoint, no restart. When a node
 * of the old membership is not in comm, the next sync first re-centres
 * the node duals over the members (v_i minus their mean: collective).
 * Fails with
 * PX_ERR_INVALID (ranks per node differ, the handle is not elastic when
 * rollback is asked) or PX_ERR_STATE (the broken round froze the masks on
 * this rank). The old communicator's groups must not be used again. */
px_status_t px_hsadmm_rebind(px_hsadmm_t *h, px_comm_t *comm, int rollback);

/* Nodes joined at a boundary (after px_hsadmm_rebind on the kept ranks,
 * px__hsadmm_create_joining on the joining ones; collective over the new
 * world): rank root (a kept rank) sends z and its previous value, the
 * masks, the penalties, the freeze flag and the round number; a joining
 * rank (joining 1) takes them, its node's z_i restarts at z and its duals
 * at zero (as a node without state after a checkpoint), and it runs the
 * next round with the others. The kept ranks keep their state (what they
 * receive goes to the elastic copy's memory). Fails with PX_ERR_INVALID
 * (not elastic, a joining root) and the data plane's errors. */
px_status_t px_hsadmm_join(px_hsadmm_t *h, int root, int joining);
/* px_hsadmm_create for a rank that joins a running job over comm (its
 * px_comm_join communicator): no collective, the state zero until
 * px_hsadmm_join (after px_hsadmm_set_elastic) fills it. */
px_status_t px_hsadmm_create_joining(px_comm_t *comm, const px_hsadmm_param_t *params,
                                     int nparams, const px_hsadmm_config_t *cfg,
                                     px_hsadmm_t **out);
/* The decision carries member lists of up to max_nodes nodes (the job's
 * elastic.max_nodes; default and at least the communicator's node count at
 * px_hsadmm_set_elastic): every rank must set the same. Allocates (set-up
 * only); PX_ERR_INVALID when not elastic. */
px_status_t px_hsadmm_set_elastic_max(px_hsadmm_t *h, int max_nodes);

/* The membership change the last px_hsadmm_decide carried (the controller's
 * px_hsadmm_decision_t.epoch and members, the same on every rank): returns
 * the new epoch and sets *nodes (valid until the next decide) and *n; 0
 * when it named none. px_hsadmm_rebind and a new round clear it. */
int px_hsadmm_next_members(const px_hsadmm_t *h, const int32_t **nodes, int *n);

#ifdef __cplusplus
}
#endif

#endif
