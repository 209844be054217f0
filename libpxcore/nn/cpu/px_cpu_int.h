/* Internals of the CPU operation backend (oneDNN 2.6 C API), shared by the
 * files of nn/cpu/. Nothing here is visible above the backend: ops.h keeps
 * the op API free of oneDNN types so that a CUDA backend can implement it.
 *
 * Model of execution: one px_ops_t holds one engine and one stream; every
 * primitive is created with the context's attribute (user scratchpad mode)
 * and runs on that stream with the context's one scratchpad buffer, grown at
 * op creation to the largest size asked for. A px__exec_t bundles a
 * primitive with pre-created memory objects for its arguments, so a call
 * only swaps data handles (when they changed) and executes: no allocation
 * per step. */
#ifndef PX_CPU_INT_H
#define PX_CPU_INT_H

#include <dnnl.h>

#include "nn/px_ops_int.h"
#include "prunex/ops.h"
#include "px_check.h"
#include "tensor/px_tensor_int.h"

#define PX__EXEC_MAX_ARGS 12

/* A primitive with its argument memory objects. The caller's arguments come
 * first, in the order given at creation; the scratchpad (if the primitive
 * needs one) is appended and bound to the context's buffer at run time. */
typedef struct {
  dnnl_primitive_t prim;
  int nargs;  /* entries used in args[] (scratchpad included) */
  int nuser;  /* caller arguments */
  int scratch_idx; /* index of the scratchpad in args[], -1 if none */
  dnnl_exec_arg_t args[PX__EXEC_MAX_ARGS];
  void *handles[PX__EXEC_MAX_ARGS]; /* handle last bound to each memory object */
  int serial; /* 1: runs on the calling thread alone (see PX__SERIAL_BYTES) */
} px__exec_t;

/* Work on at most this many bytes runs on the calling thread alone. oneDNN
 * splits even a 9 KB weight reorder across every thread, and each parallel
 * region ends in a barrier: on a busy machine a thread that has to wait for a
 * descheduled partner loses a time slice there, which costs more than the
 * whole conversion done by one thread (bench/train, docs/performance.md).
 * Results do not depend on it: a conversion moves values and computes
 * nothing. */
#define PX__SERIAL_BYTES ((size_t)1 << 20)

/* A layout chosen by oneDNN, interned per context (one object per distinct
 * memory descriptor). Conversions to and from plain order are created on
 * first use. */
typedef struct {
  struct px_layout base;
  px_ops_t *ops;
  dnnl_memory_desc_t md;
  dnnl_memory_desc_t plain_md;
  px__exec_t to_plain, from_plain;
  int have_to_plain, have_from_plain;
} px__cpu_layout_t;

typedef void (*px__omp_set_fn)(int);

struct px_ops {
  px__ops_head_t head; /* first: the dispatcher reads it */
  px_device_t device;
  int nthreads; /* <= 0: runtime default */
  int default_threads; /* the runtime's count when the context was made */
  px__omp_set_fn omp_set_num_threads;
  dnnl_engine_t engine;
  dnnl_stream_t stream;
  dnnl_primitive_attr_t attr; /* user scratchpad; every primitive is made with it */
  void *scratch;              /* the shared scratchpad */
  size_t scratch_bytes;
  void *wscratch;             /* weights in a primitive's layout: shared by every op,
                                 refilled by each call (ops run one at a time) */
  size_t wscratch_bytes;
  void *lpscratch;            /* an output gradient in bf16 for a bf16 convolution's backward,
                                 or an f32 one's input gradient in its own layout (xcvt):
                                 shared like wscratch */
  size_t lpscratch_bytes;
  int conv_bf16;              /* 1: convolutions created from now on compute in bf16 (set by
                                 px__cpu_ops_act_format from the model's precision) */
  int conv_bf16_cl;           /* 1: conv_bf16 on a CPU with AMX: every convolution writes
                                 channels-last (acdb), the layout of oneDNN 2.6's AMX kernels;
                                 without AMX its bf16 kernels (jit avx512_core_bf16) take the
                                 blocked layouts, and channels-last ones run its reference code
                                 (set by px__cpu_ops_act_format) */
  int winograd;               /* 1: f32 3x3 convolutions may use oneDNN's Winograd kernels where
                                 they are faster (cpu_conv.c px__conv_wino); 0 with
                                 PX_CPU_WINOGRAD=0 */
  int wino_pds;               /* convolutions created on oneDNN's Winograd kernels */
  int cl_fallback;            /* 1: an f32 convolution that oneDNN would run on its reference
                                 code runs channels-last where it has vector kernels there
                                 (cpu_conv.c px__conv_cl_fallback); 0 with
                                 PX_CPU_CHANNELS_LAST=0 */
  int ref_warned;             /* px__cpu_warn_ref has logged its warning */
  int ref_pds;                /* training convolutions on oneDNN's reference code ("ref:"
                                 implementations, far slower than its vector kernels;
                                 px__cpu_note_ref) */
  int ref_bwd_d_pds;          /* convolutions whose backward data is left on oneDNN's
                                 reference code (cpu_conv.c px__conv_dx_fallback found no
                                 vector kernel): counted apart, since a network's first layer
                                 never runs its backward data */
  int conv_nhwc;              /* 1: convolutions created from now on write channels-last (acdb)
                                 outputs, as in a bf16 context with AMX, in f32 (set around the build of a
                                 compact training model, strategy/compact_train.c: oneDNN 2.6 has
                                 fast kernels for 8-channel layers in this layout only) */
  px__cpu_layout_t **layouts;
  size_t nlayouts, cap_layouts;
  int64_t live_ops; /* op objects created and not destroyed */
  char desc[128];
};

/* Converts a oneDNN status at the boundary: PX_OK, or PX_ERR_BACKEND (or
 * PX_ERR_NOMEM / PX_ERR_INVALID) with a message naming the call. */
px_status_t px__dnnl_status(dnnl_status_t s, const char *what);

#define PX_DNNL(call) PX_CHECK(px__dnnl_status((call), #call))
#define PX_DNNL_GOTO(call, st, label) PX_CHECK_GOTO(px__dnnl_status((call), #call), st, label)

/* Applies the context's thread count to the calling thread. Must precede
 * primitive creation too: oneDNN sizes per-thread scratchpads by it. */
void px__cpu_enter(px_ops_t *ops);

/* Grows the shared scratchpad to at least bytes (creation time only). */
px_status_t px__cpu_reserve_scratch(px_ops_t *ops, size_t bytes);

/* Plain row-major descriptor for ndim dims (tags a, ab, abc, abcd). */
px_status_t px__cpu_plain_md(dnnl_memory_desc_t *md, int ndim, const int64_t *dims,
                             px_dtype_t dtype);

/* Descriptor of a spec: plain, or the md of its layout, which must belong to
 * ops. Fails with PX_ERR_INVALID for a spec of another device or context. */
px_status_t px__cpu_md_of(px_ops_t *ops, const px_tensor_t *spec, dnnl_memory_desc_t *md);

/* Fills *spec (no storage) from md: dims, dtype, storage size and the
 * interned layout (NULL when md is plain). */
px_status_t px__cpu_spec_of(px_ops_t *ops, const dnnl_memory_desc_t *md, px_tensor_t *spec);


/* Validates an input spec for op creation: CPU, f32, ndim in [min, max]. */
px_status_t px__cpu_check_input(px_ops_t *ops, const px_tensor_t *x, int min_ndim, int max_ndim,
                                const char *what);

/* Creates a primitive descriptor from an op descriptor with the context's
 * attribute (or attr when not NULL) and an optional forward hint. */
px_status_t px__cpu_pd_create(px_ops_t *ops, dnnl_primitive_desc_t *pd, const void *op_desc,
                              const_dnnl_primitive_attr_t attr, const_dnnl_primitive_desc_t hint,
                              const char *what);

/* A primitive every training step runs (a convolution's forward or backward
 * weights; a backward data may be created and never run, as the first
 * layer's) that oneDNN implements on its reference code counts in
 * ops->ref_pds (px__cpu_ops_ref_pds: the count), and its implementation's
 * name goes to ref (PX__REF_NAME bytes; "" for a vector kernel): the first
 * such primitive to run is logged as a warning naming what and the
 * implementation (px__cpu_warn_ref, from the layer's call; a model built
 * only to be exported or counted runs none). */
#define PX__REF_NAME 24
void px__cpu_note_ref(px_ops_t *ops, const_dnnl_primitive_desc_t pd, char ref[PX__REF_NAME]);
void px__cpu_warn_ref(px_ops_t *ops, char ref[PX__REF_NAME], const char *what);
int px__cpu_ops_ref_pds(const px_ops_t *ops);
/* Whether pd runs on oneDNN's reference code; its implementation's name to
 * ref when ref is not NULL ("" for a vector kernel). */
int px__cpu_pd_is_ref(const_dnnl_primitive_desc_t pd, char ref[PX__REF_NAME]);
/* Convolutions whose backward data runs on oneDNN's reference code
 * (ops->ref_bwd_d_pds). */
int px__cpu_ops_ref_bwd_d_pds(const px_ops_t *ops);

/* Convolutions (forward, backward data or backward weights) this context
 * created on oneDNN's Winograd kernels (cpu_conv.c px__conv_wino). */
int px__cpu_ops_wino_pds(const px_ops_t *ops);

/* Descriptor the primitive wants for an execution argument (DNNL_ARG_*). */
const dnnl_memory_desc_t *px__cpu_pd_md(const_dnnl_primitive_desc_t pd, int arg);

/* Creates the primitive of pd and a memory object per argument in arg_ids
 * (descriptors queried from pd), plus the scratchpad. Does not keep pd. */
px_status_t px__exec_create(px_ops_t *ops, px__exec_t *ex, const_dnnl_primitive_desc_t pd,
                            const int *arg_ids, int n);
/* Reorder from src_md to dst_md (arguments FROM, TO). */
px_status_t px__exec_create_reorder(px_ops_t *ops, px__exec_t *ex, const dnnl_memory_desc_t *src_md,
                                    const dnnl_memory_desc_t *dst_md);
/* Binds ptrs[0..nuser) (in creation order) and the scratchpad, executes and
 * waits. Allocates nothing. */
px_status_t px__exec_run(px_ops_t *ops, px__exec_t *ex, void *const *ptrs);
void px__exec_destroy(px__exec_t *ex);

/* Grows a context-wide buffer shared by the ops (*buf of *bytes, zeroed) to
 * at least need bytes; at op creation only, never while ops run (the old
 * block is freed: execs rebind on their next run). */
px_status_t px__cpu_grow_shared(void **buf, size_t *bytes, size_t need, const char *name);

/* Weights in the layout a primitive wants, converted from (or to) the
 * caller's plain weights on every call into the context's shared weight
 * scratch (ops->wscratch, sized to the largest), so a model holds one such
 * buffer rather than three per layer. When the layouts are equal nothing is
 * converted and the caller's memory is used directly. */
typedef struct {
  int needed;
  px__exec_t reorder;
} px__wbuf_t;

/* to_prim: 1 converts plain -> primitive layout (weights in), 0 converts
 * primitive layout -> plain (weight gradients out). */
px_status_t px__wbuf_create(px_ops_t *ops, px__wbuf_t *wb, const dnnl_memory_desc_t *plain_md,
                            const dnnl_memory_desc_t *prim_md, int to_prim);
void px__wbuf_destroy(px__wbuf_t *wb);
/* Weights w (plain) in the primitive's layout: w's own memory when the
 * layouts agree, else the buffer after a conversion. */
px_status_t px__wbuf_in(px_ops_t *ops, px__wbuf_t *wb, const px_tensor_t *w, void **out);
/* Where the primitive should write a weight gradient destined for dw. */
static inline void *px__wbuf_target(const px_ops_t *ops, const px__wbuf_t *wb,
                                    const px_tensor_t *dw) {
  return wb->needed ? ops->wscratch : dw->data;
}
/* Converts the gradient the primitive wrote (px__wbuf_target) into dw. */
px_status_t px__wbuf_out(px_ops_t *ops, px__wbuf_t *wb, px_tensor_t *dw);

/* Registers and unregisters an op object with its context (leak check). */
void px__cpu_op_born(px_ops_t *ops);
void px__cpu_op_died(px_ops_t *ops);

/* A zeroed op object of size bytes whose first member is a px__ops_head_t,
 * bound to the CPU backend and registered with ops (px__cpu_op_born); the
 * caller sets its ops pointer and frees it with px_free after
 * px__cpu_op_died. NULL when out of memory (nothing registered). */
void *px__cpu_op_new(px_ops_t *ops, size_t size, const char *name);

/* ---- layers with weights (cpu_wlayer.c) --------------------------------------------
 * Convolution and inner product differ only in their primitive descriptors;
 * the executables, the weight conversions, the argument checks and the calls
 * are this one shared part, which each op embeds. */

enum { PX__WL_FWD, PX__WL_BWD_D, PX__WL_BWD_W, PX__WL_NPD }; /* the descriptors, in order */

typedef struct {
  px__wlayer_t wl;  /* first: the argument contract, specs and bias (nn/px_ops_int.h) */
  px__exec_t fwd;   /* SRC, WEIGHTS, DST, [BIAS] */
  px__exec_t bwd_d; /* DIFF_DST, WEIGHTS, DIFF_SRC */
  px__exec_t bwd_w; /* SRC, DIFF_DST, DIFF_WEIGHTS, [DIFF_BIAS] */
  px__wbuf_t w_fwd; /* plain weights -> forward layout */
  px__wbuf_t w_bwd; /* plain weights -> backward-data layout */
  px__wbuf_t dw;    /* weight gradient layout -> plain */
  int serial;       /* set by the descriptors' maker: the three primitives run on the calling
                       thread alone (data and weights within PX__SERIAL_BYTES) */
  /* bf16 compute (set by the descriptors' maker): the primitives take bf16 sources, weights
     and output gradients and give f32 outputs and gradients. The caller's f32 x and dy are
     converted first; the forward's bf16 x is kept for the backward weights of the same step. */
  int lowp;
  px__exec_t x_cvt;    /* x (f32, its layout) -> x_lp */
  px__exec_t dy_cvt_d; /* dy (f32, y's layout) -> ops->lpscratch, backward-data layout */
  px__exec_t dy_cvt_w; /* dy (f32, y's layout) -> ops->lpscratch, backward-weights layout */
  void *x_lp;          /* [N, C_in, H, W] bf16 in the primitives' source layout */
  const void *x_lp_of; /* the x->data that x_lp holds, NULL before the first forward */
  char ref_fwd[PX__REF_NAME], ref_bwd_w[PX__REF_NAME]; /* px__cpu_note_ref: the reference
                                                          implementations, "" for none */
  char ref_bwd_d[PX__REF_NAME]; /* the same for the backward data, warned of when it runs */
  /* f32 primitives on another source layout than x's (set by the descriptors' maker: a grouped
     convolution on a blocked input that oneDNN has vector kernels for only channels-last): x
     is converted into x_lp as a bf16 layer's is (x_cvt), and the input gradient, written in
     that layout into ops->lpscratch, converted back into dx's (dx_cvt) */
  int xcvt;
  px__exec_t dx_cvt;
  /* f32 backward data alone in another layout than x's (cpu_conv.c px__conv_dx_fallback: a 2- or
     3-channel plain input, whose backward data oneDNN 2.6 has only reference code for on its
     blocked output gradients): written into ops->lpscratch and converted back into dx's layout
     by dx_cvt; the scratch grows to dx_bytes at the first backward data, so a network's first
     layer, which never runs one, holds none */
  int dxcvt;
  size_t dx_bytes;
} px__cpu_wlayer_t;

/* What makes one kind of layer: from its parameters, the forward,
 * backward-data and backward-weights descriptors (in pd, which the caller
 * destroys, also on failure), the weights' plain descriptor, and the output,
 * weight and bias specs in l->wl (and l->serial where the layer is small). */
typedef px_status_t (*px__cpu_wlayer_pds_fn)(px_ops_t *ops, px__cpu_wlayer_t *l, const void *params,
                                             dnnl_primitive_desc_t pd[PX__WL_NPD],
                                             dnnl_memory_desc_t *w_plain);

/* Completes l (px__wlayer_init done): its descriptors from pds(params), then
 * the executables and weight conversions (bias arguments bound when
 * l->wl.bias). Keeps no descriptor; on failure px__cpu_wlayer_destroy
 * releases what was made. */
px_status_t px__cpu_wlayer_create(px_ops_t *ops, px__cpu_wlayer_t *l, px__cpu_wlayer_pds_fn pds,
                                  const void *params);
void px__cpu_wlayer_destroy(px__cpu_wlayer_t *l);
/* The three calls of ops.h's conv2d / fc API with their argument checks;
 * allocate nothing. */
px_status_t px__cpu_wlayer_forward(px_ops_t *ops, px__cpu_wlayer_t *l, px_tensor_t *y,
                                   const px_tensor_t *x, const px_tensor_t *w,
                                   const px_tensor_t *b);
px_status_t px__cpu_wlayer_backward_data(px_ops_t *ops, px__cpu_wlayer_t *l, px_tensor_t *dx,
                                         const px_tensor_t *dy, const px_tensor_t *w);
px_status_t px__cpu_wlayer_backward_weights(px_ops_t *ops, px__cpu_wlayer_t *l, px_tensor_t *dw,
                                            px_tensor_t *db, const px_tensor_t *x,
                                            const px_tensor_t *dy);

/* Fails unless ops is a CPU context (PX_ERR_INVALID for NULL). */
px_status_t px__cpu_require(const px_ops_t *ops, const char *what);

/* ---- the backend's entry points (px__cpu_backend, cpu_ops.c) ------------------
 * Each has the contract of the ops.h function of the same name without the
 * px__cpu_ prefix; the dispatcher (nn/ops_dispatch.c) calls them. */

extern const px__ops_backend_t px__cpu_backend;

#define PX__CPU_DECL(ret, name, params) ret px__cpu_##name params;
PX__OPS_ENTRY_POINTS(PX__CPU_DECL)
#undef PX__CPU_DECL

#endif
