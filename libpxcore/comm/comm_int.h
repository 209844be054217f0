/* Internals of the data plane (libpxcore/comm): the communicator and group
 * structs, the UCX transfer layer the algorithms are written on, the
 * executor that runs operations in call order, and the NCCL backend's
 * internal interface. Not installed. */
#ifndef PX_COMM_INT_H
#define PX_COMM_INT_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>

#include <ucp/api/ucp.h>

#include "prunex/comm.h"
#include "px_check.h"

/* ---- tags ------------------------------------------------------------------
 * 64-bit UCP tag of every data-plane message:
 *   63..62 class (data, abort)   61..60 group kind   59..44 sequence number
 *   43..28 step within the collective   27..16 sender's group rank
 *   15..0  signature of the collective (kind, dtype, op, count, root)
 * Receives match class, group, sequence number and step, never the sender or
 * the signature: every algorithm receives at most one message per step, so
 * the receiver then checks sender, signature and length against its own
 * expectation, which is how mismatched calls (different sizes, dtypes, ops or
 * roots) are detected instead of silently combined, even when they change
 * who talks to whom. */
#define PX__TAG_CLASS_DATA 0ull
#define PX__TAG_CLASS_ABORT 1ull
#define PX__TAG_CLASS_SHIFT 62
#define PX__TAG_GROUP_SHIFT 60
#define PX__TAG_SEQ_SHIFT 44
#define PX__TAG_STEP_SHIFT 28
#define PX__TAG_SRC_SHIFT 16
#define PX__TAG_SIG_MASK 0xFFFFull
#define PX__TAG_SRC_MASK (0xFFFull << PX__TAG_SRC_SHIFT)
#define PX__TAG_MATCH_MASK (~(PX__TAG_SIG_MASK | PX__TAG_SRC_MASK))
#define PX__TAG_CLASS_MASK (3ull << PX__TAG_CLASS_SHIFT)
#define PX__MAX_STEPS 65536u
#define PX__MAX_RANKS 4096

/* transfer slots: one per posted send or receive of the running operation */
#define PX__XFER_MAX 1024

enum { PX__XFER_FREE = 0, PX__XFER_BUSY = 1, PX__XFER_DONE = 2 };

typedef struct {
  void *req;                 /* UCX request while in flight; NULL once completed */
  int state;                 /* PX__XFER_* */
  int is_recv;
  int peer;                  /* world rank of the peer */
  int expect_src;            /* receive: group rank of the expected sender */
  size_t expect;             /* receive: bytes expected */
  ucs_status_t status;
  ucp_tag_recv_info_t info;  /* receive: sender tag and length */
  struct px_comm *c;
} px__xfer_t;

typedef struct {
  struct px_comm *c;
  int rank;          /* world rank of the peer */
  ucp_ep_h ep;
  int failed;        /* the endpoint reported an error */
  ucs_status_t ep_status;
} px__peer_t;

typedef struct {
  int32_t status;
  int32_t origin;
  int32_t lost;      /* the rank the origin found lost (-1: none, e.g. a mismatch) */
  int32_t lost_hard; /* 1: its endpoint failed (gone); 0: it was silent (maybe stopped) */
} px__abort_msg_t;

/* ---- operations ------------------------------------------------------------ */
enum {
  PX__OP_ALLREDUCE = 1,
  PX__OP_BCAST,
  PX__OP_ALLGATHER,
  PX__OP_ALLGATHERV,
  PX__OP_BARRIER,
  PX__OP_LIST,
};

typedef struct {
  int kind;
  px_group_t *g;
  const void *send;
  void *recv;
  size_t count;
  px_comm_dtype_t dt;
  px_comm_op_t op;
  int root;
  const size_t *counts;  /* allgatherv, list */
  void *const *bufs;     /* list */
  int nbufs;
} px__op_t;

struct px_comm_req {
  px__op_t op;
  struct px_comm *c;
  px_status_t status;
  int done;
  struct px_comm_req *next;     /* queue or free list */
  struct px_comm_req *all_next; /* every request of the communicator */
  char errmsg[256];
};

struct px_group {
  struct px_comm *c;
  px_group_kind_t kind;
  int rank, size;
  int *world;           /* [size] world rank of each group rank */
  size_t *blk_off;      /* [size + 1] scratch: block offsets in elements */
  size_t *blk_len;      /* [size] scratch: block lengths in elements */
  uint16_t seq;         /* sequence number of the next collective */
  struct px__nccl *nccl; /* the group's NCCL communicator, or NULL */
};

struct px_comm {
  int rank, size, node, nnodes;
  int *node_of;                 /* [size] node id of each rank */
  int node_span;                /* max node id + 1 */
  int *leader_of;               /* [node_span] leader of each node id, -1 for no node */
  int timeout_ms;
  int lost_ms;                  /* elastic bound (0: off) */
  int lost_rank;                /* the rank this communicator lost, -1 while none is known */
  int lost_hard;                /* 1: its endpoint failed (the process is gone); 0: silent */
  int epoch;                    /* membership epoch (0: as created; px_comm_rebuild's) */
  int *prev_rank;               /* [size] rank in the communicator this one was rebuilt
                                   from; NULL for one made by px_comm_create */
  char prefix[208];             /* rendezvous key prefix */
  char base[208];               /* the first communicator's prefix: a rebuilt one's
                                   is base + "/e<epoch>" */
  size_t bucket_bytes;
  px_comm_algo_t allreduce_algo, allgather_algo;
  size_t small_bytes;
  int use_nccl;
  int cuda_device;

  px_group_t groups[3];
  int has_group[3];

  /* UCX */
  ucp_context_h ctx;
  ucp_worker_h worker;
  px__peer_t *peers;            /* [size] */
  int peer_errors;              /* number of endpoints that reported an error */

  px__xfer_t *xf;               /* [PX__XFER_MAX] */
  int *xf_free;                 /* stack of free slot indices */
  int xf_nfree;
  uint64_t completions;         /* transfers completed (progress detector) */
  double last_activity_ms;

  px__xfer_t abort_in;          /* the receive for abort notices from peers */
  px__abort_msg_t abort_msg;
  px__xfer_t *abort_out;        /* [size] */
  px__abort_msg_t abort_out_msg;

  atomic_int failed;            /* 0 or the status that broke the communicator */
  atomic_int abort_req;         /* px_comm_abort asked for this status */
  char failmsg[256];

  /* scratch, grown on demand and kept */
  void *tmp;
  size_t tmp_cap;
  void *bucket;
  size_t bucket_cap;

  /* traffic */
  _Atomic uint64_t sent[2], recvd[2];

  /* executor */
  pthread_mutex_t mu;
  pthread_cond_t cv;
  pthread_t thread;
  int thread_started;
  int stop;
  px_comm_req_t *qhead, *qtail;
  int pending;                  /* queued + running non-blocking operations */
  int exec_busy;                /* a thread is driving the worker (see comm.c) */
  px_comm_req_t *free_reqs;
  px_comm_req_t *all_reqs;      /* freed by destroy, waited for or not */
};

/* The context of one running collective: its group, tag prefix and
 * signature. Built by px__run_begin, one per collective. */
typedef struct {
  struct px_comm *c;
  px_group_t *g;
  uint64_t tagbase;
  uint64_t sig;
} px__coll_t;

/* ---- reduce.c ---- */
void px__reduce(void *dst, const void *a, const void *b, size_t n, px_comm_dtype_t dt,
                px_comm_op_t op);
void px__avg_finish(void *buf, size_t n, px_comm_dtype_t dt, int group_size);

/* ---- comm.c: creation without the public range checks on node ids (any id
 * in 0..PX__MAX_RANKS-1: a rebuilt communicator keeps the job's node ids) ---- */
px_status_t px__comm_create(int rank, int world_size, const int *node_of_rank, px_kv_t *kv,
                            const px_comm_opts_t *opts, px_comm_t **out);

/* ---- ucx.c: transport ---- */
px_status_t px__ucx_init(struct px_comm *c, px_kv_t *kv, const char *prefix);
void px__ucx_fini(struct px_comm *c);
/* Starts a collective on g: takes the next sequence number. */
void px__run_begin(px__coll_t *r, px_group_t *g, int kind, uint64_t a, uint64_t b, uint64_t d);
/* Post a send / receive to group rank gpeer; answer a slot index >= 0 or a
 * negative status (the communicator is then broken). */
int px__send(px__coll_t *r, int gpeer, const void *buf, size_t bytes, uint32_t step);
int px__recv(px__coll_t *r, int gpeer, void *buf, size_t bytes, uint32_t step);
/* Waits for slots, checks them (receives: length and signature) and frees
 * them. On failure the communicator is broken and every slot is released. */
px_status_t px__wait(px__coll_t *r, int slot);
px_status_t px__waitall(px__coll_t *r, const int *slots, int n);
/* Breaks the communicator with st (first failure wins), tells the peers, and
 * drains every transfer in flight. Returns the communicator's status with
 * the message set on this thread. */
px_status_t px__fail(struct px_comm *c, px_status_t st, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
/* Checks, before an operation starts, for a failure noticed meanwhile
 * (abort notice from a peer, px_comm_abort). */
px_status_t px__check_health(struct px_comm *c);
void *px__scratch(struct px_comm *c, size_t bytes);
/* Records world rank r as the peer this communicator lost (hard: its
 * endpoint failed; 0: it was silent for lost_ms), unless it is already
 * broken or one is known (the first wins, a hard one over a silent one). */
void px__suspect(struct px_comm *c, int r, int hard);
static inline px_comm_tier_t px__tier(const struct px_comm *c, int world_peer) {
  return c->node_of[world_peer] == c->node ? PX_TIER_INTRA : PX_TIER_INTER;
}

/* ---- algo.c: host algorithms ---- */
px_status_t px__allreduce(px_group_t *g, const void *send, void *recv, size_t count,
                          px_comm_dtype_t dt, px_comm_op_t op);
px_status_t px__bcast(px_group_t *g, void *buf, size_t count, px_comm_dtype_t dt, int root);
px_status_t px__allgatherv(px_group_t *g, const void *send, void *recv, const size_t *counts,
                           size_t equal_count, px_comm_dtype_t dt, int is_v);
px_status_t px__barrier(px_group_t *g);
/* A small u8-max allreduce of a signature that fails with PX_ERR_MISMATCH on
 * every rank unless all ranks passed the same bytes (guards NCCL calls,
 * which cannot detect mismatches themselves). */
px_status_t px__agree(px_group_t *g, int kind, uint64_t a, uint64_t b, uint64_t d);
uint64_t px__hash3(uint64_t a, uint64_t b, uint64_t d);

/* ---- NCCL backend (cuda/nccl.c, or nccl_stub.c without CUDA) ---- */
typedef struct px__nccl px__nccl_t;
int px__nccl_built(void);
/* Creates the NCCL communicator of g: group rank 0 makes the unique id and
 * puts it under key; the others get it. */
px_status_t px__nccl_create(px_group_t *g, int device, px_kv_t *kv, const char *key,
                            int timeout_ms, px__nccl_t **out);
void px__nccl_destroy(px__nccl_t *n, int abort);
/* 1 when p is device memory (and NCCL is built). */
int px__nccl_is_device_ptr(const void *p);
px_status_t px__nccl_allreduce(px__nccl_t *n, const void *send, void *recv, size_t count,
                               px_comm_dtype_t dt, px_comm_op_t op, int timeout_ms);
px_status_t px__nccl_bcast(px__nccl_t *n, void *buf, size_t count, px_comm_dtype_t dt, int root,
                           int timeout_ms);
px_status_t px__nccl_allgatherv(px__nccl_t *n, const void *send, void *recv,
                                const size_t *counts, const size_t *offs, px_comm_dtype_t dt,
                                int timeout_ms);

#endif
