/* The part of prunex/comm.h internal to libpxcore, its programs and its tests
 * (not installed, not exported: docs/architecture.md, "libpxcore"). */
#ifndef PRUNEX_COMM_INTERNAL_H
#define PRUNEX_COMM_INTERNAL_H

#include "prunex/comm.h"

#ifdef __cplusplus
extern "C" {
#endif

/* The group of that kind, owned by the communicator; NULL when this rank is
 * not a member (inter on a non-leader). */
px_group_t *px_comm_group(px_comm_t *c, px_group_kind_t kind);
px_group_kind_t px_group_kind(const px_group_t *g);
int px_group_rank(const px_group_t *g);
int px_group_size(const px_group_t *g);
/* World rank of group rank i (0 <= i < size). */
int px_group_world_rank(const px_group_t *g, int i);
/* 1 when the group has an NCCL communicator, so that its collectives take
 * device buffers (the communicator was created with opts.nccl = 1); 0 when
 * only host memory can be passed (NULL gives 0). */
int px_group_nccl(const px_group_t *g);

/* ---- collectives -----------------------------------------------------------
 * Buffers are host memory, or device memory when the group has an NCCL
 * communicator. Counts are in elements. All fail with PX_ERR_INVALID for bad
 * arguments (checked locally), PX_ERR_MISMATCH when ranks disagree,
 * PX_ERR_PEER / PX_ERR_TIMEOUT when a peer failed, PX_ERR_STATE (or the
 * original status) when the communicator is already broken. */

/* recv[i] = op over ranks of send[i], i < count. send == recv is in place. */
px_status_t px_comm_allreduce(px_group_t *g, const void *send, void *recv, size_t count,
                              px_comm_dtype_t dt, px_comm_op_t op);

/* buf[count] of group rank root is copied to every member. */
px_status_t px_comm_broadcast(px_group_t *g, void *buf, size_t count, px_comm_dtype_t dt,
                              int root);

/* recv[size * count] = the send[count] blocks of ranks 0..size-1 in order.
 * send may be recv + rank * count (in place). */
px_status_t px_comm_allgather(px_group_t *g, const void *send, void *recv, size_t count,
                              px_comm_dtype_t dt);

px_status_t px_comm_barrier(px_group_t *g);

/* Like allgather with counts[i] elements from rank i (counts identical on all
 * ranks, zeros allowed); block i starts at element sum(counts[0..i)). */
px_status_t px_comm_allgatherv(px_group_t *g, const void *send, void *recv,
                               const size_t *counts, px_comm_dtype_t dt);

/* In-place allreduce of n tensors bufs[i][counts[i]], packed into buckets of
 * opts.bucket_bytes (a tensor larger than a bucket is reduced in place, one
 * bucket-sized slice at a time). The bucket is allocated on first use and
 * kept: steady-state calls allocate nothing. */
px_status_t px_comm_allreduce_list(px_group_t *g, void *const *bufs, const size_t *counts,
                                   int n, px_comm_dtype_t dt, px_comm_op_t op);

/* ---- non-blocking forms ----------------------------------------------------
 * Same arguments plus *req (owned by the caller until px_comm_wait). Buffers
 * (and counts / bufs arrays) must stay valid and untouched until the
 * request completes. Operations run in call order on the progress thread. */

px_status_t px_comm_iallreduce(px_group_t *g, const void *send, void *recv, size_t count,
                               px_comm_dtype_t dt, px_comm_op_t op, px_comm_req_t **req);
px_status_t px_comm_ibroadcast(px_group_t *g, void *buf, size_t count, px_comm_dtype_t dt,
                               int root, px_comm_req_t **req);
px_status_t px_comm_iallgather(px_group_t *g, const void *send, void *recv, size_t count,
                               px_comm_dtype_t dt, px_comm_req_t **req);
px_status_t px_comm_iallgatherv(px_group_t *g, const void *send, void *recv,
                                const size_t *counts, px_comm_dtype_t dt,
                                px_comm_req_t **req);
px_status_t px_comm_ibarrier(px_group_t *g, px_comm_req_t **req);
px_status_t px_comm_iallreduce_list(px_group_t *g, void *const *bufs, const size_t *counts,
                                    int n, px_comm_dtype_t dt, px_comm_op_t op,
                                    px_comm_req_t **req);

/* *done = 1 when the request has completed (successfully or not); never
 * blocks. The request stays valid until px_comm_wait. */
px_status_t px_comm_test(px_comm_req_t *req, int *done);

/* Waits for the request (bounded by the communicator's timeout), frees it and
 * returns the operation's status. */
px_status_t px_comm_wait(px_comm_req_t *req);

void px_comm_traffic_reset(px_comm_t *c);
/* Bytes sent plus received on one tier so far (px_comm_traffic's sum): what
 * phase timers take before and after a phase. Cannot fail. */
uint64_t px_comm_tier_bytes(const px_comm_t *c, px_comm_tier_t tier);

/* Bytes per element of a dtype (4, 8, 1); 0 for an unknown one. */
size_t px_comm_dtype_size(px_comm_dtype_t dt);

/* ---- elastic membership (comm/elastic.c) --------------------------
 * With opts.lost_ms set, a peer that is gone (process dead: UCX's keepalive
 * every lost_ms / 8) or silent for lost_ms inside a collective breaks the
 * communicator with PX_ERR_PEER on every survivor, the message and
 * px_comm_lost naming it; survivors then agree on the members (the round's
 * decision from the coordinator, or px_comm_survivors without one) and
 * call px_comm_rebuild at the round boundary. */

/* The world rank this communicator lost (the first one noticed here or named
 * by the peer that broke it; one whose endpoint failed wins over one that
 * was only silent), -1 when none is known; *node gets its node id or -1,
 * *gone 1 when its endpoint failed (the process is gone), 0 when it was
 * silent for lost_ms (stopped, or a survivor waiting itself on the lost
 * one). node and gone may be NULL. Cannot fail. */
int px_comm_lost(const px_comm_t *c, int *node, int *gone);
/* The membership epoch: 0 for px_comm_create's, px_comm_rebuild's epoch. */
int px_comm_epoch(const px_comm_t *c);
/* The bound opts.lost_ms it was created with (0: off). */
int px_comm_lost_ms(const px_comm_t *c);
/* The rank that rank `rank` of c had in the communicator c was rebuilt from
 * (rank itself for a communicator made by px_comm_create; -1 out of range). */
int px_comm_prev_rank(const px_comm_t *c, int rank);
/* Node id of a rank of c (-1 out of range). */
int px_comm_node_of(const px_comm_t *c, int rank);

/* The survivors' agreement when no coordinator names the members: puts
 * "<prefix>/alive/<epoch>/<rank>" (with the rank c lost), then reads the
 * others' keys for up to wait_ms, not waiting for the ranks of a node some
 * survivor saw gone (endpoint failed; a silent one is waited for). Fenced:
 * PX_ERR_STATE when epoch was formed already (this rank came too late, e.g.
 * it was stopped). nodes[cap] gets the node ids every rank of which
 * answered, ascending, *n their count. Not collective over the data plane
 * (c may be broken); ranks that answer within the wait of some survivors
 * but not of others give different lists, which px_comm_rebuild then
 * refuses on every rank (PX_ERR_MISMATCH). epoch must exceed c's. Fails
 * with the store's errors, PX_ERR_INVALID or PX_ERR_NOMEM. */
px_status_t px_comm_survivors(px_comm_t *c, px_kv_t *kv, int epoch, int wait_ms, int *nodes,
                              int cap, int *n);

/* Collective over the ranks of the member nodes nodes[nnodes] (node ids of
 * old, any order): at a round boundary, replaces old by a communicator over
 * those nodes' ranks, in epoch `epoch` (> old's: a stale decision is
 * refused). Ranks are renumbered 0..n-1 in their old order (px_comm_prev_rank
 * maps back), node ids and each node's leader stay, the options are old's,
 * the UCX endpoints are new (addresses through kv under the first prefix +
 * "/e<epoch>"). A bad or stale list fails with PX_ERR_INVALID and leaves
 * old as it was and *out untouched (so px_comm_rebuild(c, ..., &c) keeps
 * c); past that check old is destroyed whatever happens (after its pending
 * operations, healthy or broken), nothing of it in flight. A rank whose
 * node is not a member, or that comes after the epoch was formed without
 * it (fenced: it was stopped or cut off), gets PX_ERR_STATE and *out NULL
 * (it leaves the job). Fails with PX_ERR_MISMATCH (the members
 * were given different lists), PX_ERR_TIMEOUT / PX_ERR_PEER (a member did
 * not come), PX_ERR_BACKEND. Allocates: call at boundaries only. The
 * caller owns *out. */
px_status_t px_comm_rebuild(px_comm_t *old, const int *nodes, int nnodes, int epoch, px_kv_t *kv,
                            px_comm_t **out);
/* Nodes join at a rebuild: px_comm_rebuild_join is px_comm_rebuild where
 * nodes[] may also name node ids that old does not have (px_comm_rebuild
 * refuses them: PX_ERR_INVALID). Then it numbers the new world in node order instead (a kept
 * node's ranks in their old order, then each joining node with as many
 * ranks as every node of old has, its first rank its leader; old's nodes
 * must have the same rank count: PX_ERR_INVALID) and every kept rank puts
 * that plan under "<first prefix>/e<epoch>/plan" for the joining ranks;
 * their px_comm_prev_rank is -1.
 *
 * A joining rank (no old communicator: a node that comes back, a spare)
 * meets them there: the local-th rank (0-based) of node `node` reads the
 * plan of epoch (waiting up to wait_ms for the kept ranks to reach the
 * boundary) and creates its communicator directly in that epoch, with
 * opts (the job's first key prefix; the same timeout and lost_ms as the
 * others). Collective with the kept ranks' px_comm_rebuild. Fails with
 * PX_ERR_STATE (fenced: the epoch was formed without it; or the plan has
 * no such joining rank), PX_ERR_TIMEOUT (no plan within wait_ms),
 * PX_ERR_FORMAT (a malformed plan), and px_comm_rebuild's errors. The caller
 * owns *out. */
px_status_t px_comm_rebuild_join(px_comm_t *old, const int *nodes, int nnodes, int epoch,
                                 px_kv_t *kv, px_comm_t **out);
px_status_t px_comm_join(px_kv_t *kv, const px_comm_opts_t *opts, int node, int local, int epoch,
                         int wait_ms, px_comm_t **out);

#ifdef __cplusplus
}
#endif

#endif
