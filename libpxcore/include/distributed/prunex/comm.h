/* PruneX data plane: the one collective API of the
 * system, on three groups of ranks.
 *
 * A communicator (px_comm_t) is created by every rank of a job from its rank,
 * the world size, the rank-to-node map that the coordinator assigned and a
 * rendezvous store (px_kv_t, kv.h) through which the ranks exchange their UCX
 * worker addresses (and NCCL unique ids). It exposes up to three groups:
 *
 *   world  all ranks, in rank order;
 *   intra  the ranks of this rank's node, in rank order;
 *   inter  the node leaders (one per node, in node-id order); only a leader
 *          has it: px_comm_group answers NULL on the other ranks.
 *
 * Collectives: allreduce (sum, average, max on f32, f64, u8), broadcast,
 * allgather, allgatherv and barrier, in blocking and non-blocking forms, and a
 * fused helper that reduces a list of tensors through buckets. Host memory
 * goes over UCX (tag API; UCX picks shared memory within a host and TCP
 * across hosts) with our own algorithms on top: recursive doubling for small
 * messages, ring reduce-scatter + allgather for large ones, a pipelined
 * binary tree for broadcast. Device memory goes through NCCL (one
 * communicator per group) when the communicator was created with
 * opts.nccl = 1 and libpxcore was built with CUDA.
 *
 * Rules every rank must follow (as with MPI): the collectives of a group are
 * called in the same order by all its members, with the same count, dtype,
 * op and root. A mismatch in size, dtype, op or root is detected (never a
 * silent wrong reduction): every rank fails with PX_ERR_MISMATCH, in that
 * call or, if its own part had already completed, in its next one. Only a
 * disagreement that stops every message (e.g. no rank believing it is the
 * root of a broadcast) ends as PX_ERR_TIMEOUT instead. Calls on one
 * communicator come from one thread at a time; non-blocking operations are
 * carried out, in call order, by a progress thread of the communicator, and
 * a blocking call made while some are pending runs after them.
 *
 * Failure: every wait of the data plane has a deadline. When a peer dies or
 * stops answering, the call fails with PX_ERR_PEER or PX_ERR_TIMEOUT within
 * opts.timeout_ms (default 60 s) of the last progress, on every surviving
 * rank (the rank that notices tells the others). A dead process is usually
 * noticed much sooner: the endpoints use UCX's peer failure handling, with
 * the shared-memory transports' error handling switched on and a keepalive
 * interval of timeout_ms / 8. From then on the communicator is broken: every
 * later call fails at once with the same status; destroy it and build a new
 * one (with a new key prefix).
 *
 * Elastic jobs set opts.lost_ms, a few times a normal round: a peer whose
 * process is gone (keepalive every lost_ms / 8) or that sends nothing for
 * lost_ms inside a collective is lost, and every survivor fails with
 * PX_ERR_PEER naming the rank and node. The survivors then rebuild the
 * groups over the nodes left at the round boundary (px_comm_rebuild in
 * comm_internal.h) and go on; nothing waits for timeout_ms.
 *
 * UCX settings the communicator chooses unless the environment sets them:
 * UCX_MM_ERROR_HANDLING=y (without it UCX would fall back to TCP within a
 * host), UCX_KEEPALIVE_INTERVAL=timeout_ms/8, UCX_RNDV_THRESH=64k (shared
 * memory with failure handling has no zero-copy path, so a rendezvous only
 * costs a round trip).
 *
 * Traffic: every call adds the payload bytes this rank passed to its send
 * calls and received in its receive calls to counters per tier: intra when
 * the peer is on this rank's node, inter otherwise (px_comm_traffic). */
#ifndef PRUNEX_COMM_H
#define PRUNEX_COMM_H

#include <stddef.h>
#include <stdint.h>

#include "prunex/kv.h"
#include "prunex/px.h"
#include "prunex/tensor.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct px_comm px_comm_t;
typedef struct px_group px_group_t;
typedef struct px_comm_req px_comm_req_t;

typedef enum { PX_COMM_F32 = 0, PX_COMM_F64 = 1, PX_COMM_U8 = 2 } px_comm_dtype_t;

/* SUM of u8 wraps modulo 256. AVG is SUM divided by the group size, for f32
 * and f64 only. MAX of u8 0/1 masks is their OR. Every rank receives
 * bit-identical results (each element is reduced in one fixed order). */
typedef enum { PX_COMM_SUM = 0, PX_COMM_AVG = 1, PX_COMM_MAX = 2 } px_comm_op_t;

typedef enum { PX_GROUP_WORLD = 0, PX_GROUP_INTRA = 1, PX_GROUP_INTER = 2 } px_group_kind_t;

typedef enum { PX_TIER_INTRA = 0, PX_TIER_INTER = 1 } px_comm_tier_t;

/* Algorithm choice, for tuning and tests; AUTO picks by message size. */
typedef enum {
  PX_COMM_ALGO_AUTO = 0,
  PX_COMM_ALGO_RD = 1,     /* allreduce: recursive doubling */
  PX_COMM_ALGO_RING = 2,   /* allreduce: ring reduce-scatter + allgather; allgather: ring */
  PX_COMM_ALGO_DIRECT = 3, /* allgather: every rank sends its block to every other */
} px_comm_algo_t;

#define PX_COMM_DEFAULT_TIMEOUT_MS 60000
#define PX_COMM_DEFAULT_BUCKET_BYTES ((size_t)32 << 20)
#define PX_COMM_DEFAULT_KEY_PREFIX "px/comm"

/* Options. All-zero means defaults, so `px_comm_opts_t o = {0};` is valid. */
typedef struct {
  int timeout_ms;            /* failure deadline after the last progress; 0: 60000 */
  size_t bucket_bytes;       /* bucket of px_comm_allreduce_list; 0: 32 MiB */
  const char *key_prefix;    /* rendezvous keys start with it; NULL: "px/comm".
                                Use a new prefix for each communicator of a job. */
  const int *leader_of_node; /* world rank of each node's leader, indexed by node id
                                (max node id + 1 entries); NULL: lowest rank of the node */
  int nccl;                  /* 1: also create NCCL communicators (device memory) */
  int cuda_device;           /* CUDA device of this rank when nccl = 1 */
  px_comm_algo_t allreduce_algo; /* AUTO, RD or RING */
  px_comm_algo_t allgather_algo; /* AUTO, RING or DIRECT */
  size_t small_bytes;        /* AUTO: allreduce up to this size uses RD, allgather
                                up to this total uses DIRECT; 0: tuned default */
  int lost_ms;               /* elastic jobs: a peer that sends nothing for this long
                                inside a collective, or whose process is gone, is lost
                                (PX_ERR_PEER naming it, px_comm_lost); also sets UCX's
                                keepalive to lost_ms / 8. A few times a normal round;
                                0: off (timeout_ms alone) */
} px_comm_opts_t;

/* Fills *o with the defaults spelled out (same effect as zeroing it). */
PX_API void px_comm_opts_default(px_comm_opts_t *o);

/* ---- choosing the data plane (a job spec's comm.backend) ------------------- */

typedef struct {
  const char *backend;        /* comm.backend: "auto", "ucx" or "nccl" */
  const char *cluster_device; /* cluster.device: "cpu" rules NCCL out without a look */
  px_device_t device;         /* where this rank trains */
  int rank, world;
  const char *key_prefix;     /* rendezvous keys: <prefix>/<rank> says where each rank
                                 trains, <prefix>/verdict is rank 0's choice */
  int timeout_ms;             /* how long a rank waits for the others' keys */
} px_comm_backend_query_t;

/* Chooses the data plane of a job, with every rank of it: ucx (host
 * memory; a GPU model is staged through it), nccl (device memory: every
 * rank needs a GPU of its own, NCCL runs one rank per GPU), auto (nccl when
 * every rank has one, else ucx). Unless cluster.device is cpu or the
 * backend ucx, every rank puts where it trains under the prefix, rank 0
 * reads them all and puts the verdict, the others read it: every rank
 * gets the same answer. Sets opts->nccl and opts->cuda_device (the rank's
 * GPU with nccl) and writes to why[cap] what rules NCCL out ("" when
 * nothing does, or the backend is ucx). kv is borrowed for the call. Fails
 * with PX_ERR_INVALID (bad query; comm.backend nccl where NCCL cannot
 * serve, saying why), the store's error (a rank that does not answer
 * within timeout_ms is named) or PX_ERR_NOMEM. Without CUDA every rank
 * trains on the CPU and the answer is ucx. */
PX_API px_status_t px_comm_choose_backend(const px_comm_backend_query_t *q, px_kv_t *kv,
                                          px_comm_opts_t *opts, char *why, size_t cap);

/* Collective over all world_size ranks: creates this rank's communicator.
 * node_of_rank[world_size] gives each rank's node id (0 <= id < world_size,
 * any ids, not necessarily dense). kv is borrowed for the call only. Waits up
 * to timeout_ms for the other ranks (PX_ERR_TIMEOUT), fails with
 * PX_ERR_INVALID for bad arguments, PX_ERR_BACKEND when UCX (or NCCL) fails,
 * PX_ERR_NOT_BUILT when nccl = 1 without CUDA. *out is owned by the caller
 * (px_comm_destroy). */
PX_API px_status_t px_comm_create(int rank, int world_size, const int *node_of_rank, px_kv_t *kv,
                                  const px_comm_opts_t *opts, px_comm_t **out);

/* Waits for pending non-blocking operations, then frees everything; every
 * group and request of the communicator becomes invalid. Not collective, but
 * a healthy communicator flushes its last messages so that peers still
 * finishing their last collective are not disturbed. NULL is a no-op. */
PX_API void px_comm_destroy(px_comm_t *c);

/* Breaks the communicator on purpose: this rank and (best effort, right
 * away) every peer fail their current and later calls with st (a negative
 * status, e.g. PX_ERR_PEER; peers see PX_ERR_PEER). For shutting down a job
 * whose rank gave up. The one call that may come from another thread while
 * a call on c is in progress: that call then fails promptly. */
PX_API void px_comm_abort(px_comm_t *c, px_status_t st);

PX_API int px_comm_rank(const px_comm_t *c);
PX_API int px_comm_size(const px_comm_t *c);
PX_API int px_comm_node(const px_comm_t *c);    /* node id of this rank */
PX_API int px_comm_nnodes(const px_comm_t *c);  /* number of distinct nodes */
/* PX_OK while healthy, else the status that broke it. */
PX_API px_status_t px_comm_status(const px_comm_t *c);
/* 1 when this libpxcore can run NCCL communicators (built with CUDA). */
PX_API int px_comm_nccl_built(void);

/* ---- traffic ---------------------------------------------------------------
 * Payload bytes this rank passed to send calls and received, per tier,
 * since creation or the last reset, over all groups. NCCL operations add
 * the bytes NCCL's ring algorithm moves per rank (NCCL does not report its
 * own wire bytes). */
typedef struct {
  uint64_t sent[2]; /* indexed by px_comm_tier_t */
  uint64_t recv[2];
} px_comm_traffic_t;

PX_API void px_comm_traffic(const px_comm_t *c, px_comm_traffic_t *out);

#ifdef __cplusplus
}
#endif
#endif
