/* The CPU backend context (oneDNN engine, stream, scratchpad, thread count),
 * the interned layouts that tensors point to, the execution helpers every
 * op file uses, the reorder op, and the backend's function table.
 *
 * The public entry points of ops.h live in nn/ops_dispatch.c; they reach the
 * px__cpu_* functions of nn/cpu/ through px__cpu_backend, the table every
 * CPU context and op object points to from its first member. */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE /* RTLD_DEFAULT */
#endif
#include <assert.h>
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <dnnl_debug.h>

#include "nn/cpu/px_cpu_int.h"
#include "prunex/ops_internal.h"

/* ---- status conversion -------------------------------------------------- */

px_status_t px__dnnl_status(dnnl_status_t s, const char *what) {
  if (s == dnnl_success) return PX_OK;
  px_status_t st = PX_ERR_BACKEND;
  if (s == dnnl_out_of_memory) st = PX_ERR_NOMEM;
  if (s == dnnl_invalid_arguments) st = PX_ERR_INVALID;
  return px_set_error(st, "oneDNN: %s failed: %s", what, dnnl_status2str(s));
}

/* ---- threads ------------------------------------------------------------- */

/* oneDNN is built on the OpenMP runtime and sizes its parallel regions by
 * omp_get_max_threads() of the calling thread. The library is not compiled
 * with -fopenmp, so the setter is looked up in the runtime oneDNN already
 * loaded rather than linked directly. */
void px__cpu_enter(px_ops_t *ops) {
  if (ops->nthreads > 0 && ops->omp_set_num_threads) ops->omp_set_num_threads(ops->nthreads);
}

px_status_t px__cpu_require(const px_ops_t *ops, const char *what) {
  if (!ops) return px_set_error(PX_ERR_INVALID, "%s: ops context is NULL", what);
  if (ops->head.be != &px__cpu_backend) /* the dispatcher routes by this pointer */
    return px_set_error(PX_ERR_INTERNAL, "%s: not a CPU ops context", what);
  return PX_OK;
}

/* ---- context ------------------------------------------------------------- */


px_status_t px__cpu_ops_create(px_device_t dev, int nthreads, px_ops_t **out) {
  PX_REQUIRE(out != NULL, "px_ops_create: out is NULL");
  *out = NULL;
  PX_REQUIRE(dev.kind == PX_DEVICE_CPU, "px_ops_create: device kind %d is not the CPU", (int)dev.kind);
  px_status_t st = PX_OK;
  px_ops_t *ops = px_calloc(1, sizeof *ops, "px_ops");
  if (!ops) return PX_ERR_NOMEM;
  ops->head.be = &px__cpu_backend;
  ops->device = dev;
  ops->nthreads = nthreads;
  ops->omp_set_num_threads = (px__omp_set_fn)dlsym(RTLD_DEFAULT, "omp_set_num_threads");
  if (nthreads > 0 && !ops->omp_set_num_threads)
    px_log(PX_LOG_WARN, "OpenMP runtime not found: the thread count %d is not applied", nthreads);
  px__cpu_enter(ops);
  PX_DNNL_GOTO(dnnl_engine_create(&ops->engine, dnnl_cpu, 0), st, fail);
  PX_DNNL_GOTO(dnnl_stream_create(&ops->stream, ops->engine, dnnl_stream_default_flags), st, fail);
  PX_DNNL_GOTO(dnnl_primitive_attr_create(&ops->attr), st, fail);
  PX_DNNL_GOTO(dnnl_primitive_attr_set_scratchpad_mode(ops->attr, dnnl_scratchpad_mode_user), st,
               fail);
  {
    const dnnl_version_t *v = dnnl_version();
    typedef int (*omp_max_fn)(void);
    omp_max_fn omp_max = (omp_max_fn)dlsym(RTLD_DEFAULT, "omp_get_max_threads");
    ops->default_threads = omp_max ? omp_max() : 1;
    int threads = nthreads > 0 ? nthreads : (omp_max ? omp_max() : 0);
    const char *wino = getenv("PX_CPU_WINOGRAD");
    if (wino && *wino && strcmp(wino, "0") && strcmp(wino, "1")) {
      st = px_set_error(PX_ERR_INVALID, "PX_CPU_WINOGRAD='%s': expected 0 (direct convolutions "
                        "only) or 1 (Winograd where it is faster, the default)", wino);
      goto fail;
    }
    ops->winograd = !(wino && !strcmp(wino, "0"));
    const char *cl = getenv("PX_CPU_CHANNELS_LAST");
    ops->cl_fallback = !(cl && !strcmp(cl, "0"));
    snprintf(ops->desc, sizeof ops->desc, "oneDNN %d.%d.%d (cpu, %s, %d threads%s)", v->major,
             v->minor, v->patch, dnnl_cpu_isa2str(dnnl_get_effective_cpu_isa()), threads,
             ops->winograd ? "" : ", no Winograd");
  }
  *out = ops;
  return PX_OK;
fail:
  px__cpu_ops_destroy(ops);
  return st;
}

void px__cpu_ops_destroy(px_ops_t *ops) {
  if (!ops) return;
  if (ops->live_ops != 0)
    px_log(PX_LOG_WARN, "px_ops_destroy: %lld op objects were not destroyed first",
           (long long)ops->live_ops);
  for (size_t i = 0; i < ops->nlayouts; i++) {
    px__cpu_layout_t *l = ops->layouts[i];
    if (l->have_to_plain) px__exec_destroy(&l->to_plain);
    if (l->have_from_plain) px__exec_destroy(&l->from_plain);
    px_free(l);
  }
  px_free(ops->layouts);
  px_free(ops->scratch);
  px_free(ops->wscratch);
  px_free(ops->lpscratch);
  if (ops->attr) dnnl_primitive_attr_destroy(ops->attr);
  if (ops->stream) dnnl_stream_destroy(ops->stream);
  if (ops->engine) dnnl_engine_destroy(ops->engine);
  px_free(ops);
}

px_device_t px__cpu_ops_device(const px_ops_t *ops) { return ops->device; }
int px__cpu_ops_threads(const px_ops_t *ops) { return ops->nthreads; }
size_t px__cpu_ops_scratchpad_bytes(const px_ops_t *ops) { return ops->scratch_bytes; }
const char *px__cpu_ops_describe(const px_ops_t *ops) { return ops->desc; }

px_status_t px__cpu_ops_sync(px_ops_t *ops) {
  PX_CHECK(px__cpu_require(ops, "px_ops_sync"));
  PX_DNNL(dnnl_stream_wait(ops->stream));
  return PX_OK;
}

/* The CPU keeps f32 activations; oneDNN chooses each op's layout itself.
 * bf16 precision is a property of the convolutions instead: the model asks
 * for its activation format before it creates its layers, so the request
 * sets whether the convolutions created next compute in bf16 (f32 in and
 * out, converted at their edges; cpu_conv.c). Needs a CPU with bf16
 * instructions (AVX512-BF16 or AMX): elsewhere oneDNN would emulate them far
 * slower than f32. */
px_status_t px__cpu_ops_act_format(px_ops_t *ops, px_precision_t precision, px_tensor_t *spec) {
  const dnnl_cpu_isa_t isa = dnnl_get_effective_cpu_isa();
  if (precision == PX_PRECISION_BF16) {
    if ((isa & dnnl_cpu_isa_avx512_core_bf16) != dnnl_cpu_isa_avx512_core_bf16) /* ISA bit sets */
      return px_set_error(PX_ERR_INVALID, "bf16 precision on the CPU needs AVX512-BF16 or AMX; "
                          "this CPU has %s: use precision fp32", dnnl_cpu_isa2str(isa));
  }
  ops->conv_bf16 = precision == PX_PRECISION_BF16;
  /* AMX's kernels want channels-last; without AMX, channels-last bf16 convolutions run oneDNN's
     reference code (an AMD EPYC Zen 5: 9.6 s for a ResNet-20 step at batch 16), blocked ones
     its AVX512-BF16 kernels */
  ops->conv_bf16_cl = ops->conv_bf16 &&
                      (isa & dnnl_cpu_isa_avx512_core_amx) == dnnl_cpu_isa_avx512_core_amx;
  if (!ops->conv_nhwc || !spec || spec->ndim != 4) return PX_OK;
  /* channels-last convolutions (conv_nhwc): the model's input in their layout too, which
     oneDNN's stem kernels need (a plain source with a channels-last output runs its reference
     code) */
  dnnl_memory_desc_t md;
  dnnl_dims_t d = {spec->dims[0], spec->dims[1], spec->dims[2], spec->dims[3]};
  PX_DNNL(dnnl_memory_desc_init_by_tag(&md, 4, d, dnnl_f32, dnnl_acdb));
  return px__cpu_spec_of(ops, &md, spec);
}

int px__cpu_ops_channels_last(px_ops_t *ops, int on) {
  const int was = ops->conv_nhwc;
  if (on >= 0) ops->conv_nhwc = on && ops->cl_fallback;
  return was;
}

/* oneDNN computes in f32 whatever is asked: nothing to switch. */
px_status_t px__cpu_ops_set_tf32(px_ops_t *ops, int allow) {
  (void)ops;
  (void)allow;
  return PX_OK;
}

px_status_t px__cpu_ops_upload(px_ops_t *ops, int n, px_tensor_t *const *dst,
                                      const void *const *src) {
  (void)ops;
  for (int i = 0; i < n; i++)
    PX_CHECK(px_tensor_copy_from_host(dst[i], src[i], px_tensor_plain_bytes(dst[i])));
  return PX_OK;
}

void px__cpu_op_born(px_ops_t *ops) { ops->live_ops++; }
void px__cpu_op_died(px_ops_t *ops) { ops->live_ops--; }

void *px__cpu_op_new(px_ops_t *ops, size_t size, const char *name) {
  px__ops_head_t *head = px_calloc(1, size, name);
  if (!head) return NULL;
  head->be = &px__cpu_backend;
  px__cpu_op_born(ops);
  return head;
}

px_status_t px__cpu_reserve_scratch(px_ops_t *ops, size_t bytes) {
  if (bytes <= ops->scratch_bytes) return PX_OK;
  /* Growing frees the old block: every exec rebinds its scratchpad handle on
   * its next run because it compares the pointer it last bound. */
  void *p = px_malloc_aligned(bytes, "ops scratchpad");
  if (!p) return PX_ERR_NOMEM;
  px_free(ops->scratch);
  ops->scratch = p;
  ops->scratch_bytes = bytes;
  return PX_OK;
}

/* ---- descriptors and layouts ---------------------------------------------- */

static dnnl_data_type_t px__dnnl_dt(px_dtype_t dt) {
  switch (dt) {
    case PX_DTYPE_F32: return dnnl_f32;
    case PX_DTYPE_U8: return dnnl_u8;
    case PX_DTYPE_I32: return dnnl_s32;
    case PX_DTYPE_BF16: return dnnl_bf16;
  }
  return dnnl_data_type_undef;
}

static int px__px_dt(dnnl_data_type_t dt, px_dtype_t *out) {
  switch (dt) {
    case dnnl_f32: *out = PX_DTYPE_F32; return 1;
    case dnnl_u8: *out = PX_DTYPE_U8; return 1;
    case dnnl_s32: *out = PX_DTYPE_I32; return 1;
    default: return 0;
  }
}

px_status_t px__cpu_plain_md(dnnl_memory_desc_t *md, int ndim, const int64_t *dims,
                             px_dtype_t dtype) {
  static const dnnl_format_tag_t tags[] = {dnnl_a, dnnl_ab, dnnl_abc, dnnl_abcd};
  PX_REQUIRE(ndim >= 1 && ndim <= 4, "plain descriptor of %d dims", ndim);
  dnnl_dims_t d;
  for (int i = 0; i < ndim; i++) d[i] = dims[i];
  PX_DNNL(dnnl_memory_desc_init_by_tag(md, ndim, d, px__dnnl_dt(dtype), tags[ndim - 1]));
  return PX_OK;
}

/* oneDNN-style tag of a blocked md ("aBcd16b" is nChw16c): dims from the
 * outermost to the innermost stride, upper case when blocked, then the
 * inner blocks. */
static void px__md_name(const dnnl_memory_desc_t *md, char *buf, size_t len) {
  if (md->format_kind != dnnl_blocked) {
    snprintf(buf, len, "%s", dnnl_fmt_kind2str(md->format_kind));
    return;
  }
  const dnnl_blocking_desc_t *bd = &md->format_desc.blocking;
  int order[DNNL_MAX_NDIMS];
  int nd = md->ndims;
  for (int i = 0; i < nd; i++) order[i] = i;
  for (int i = 1; i < nd; i++) /* stable insertion sort by decreasing stride */
    for (int j = i; j > 0 && bd->strides[order[j]] > bd->strides[order[j - 1]]; j--) {
      int t = order[j];
      order[j] = order[j - 1];
      order[j - 1] = t;
    }
  size_t k = 0;
  for (int i = 0; i < nd && k + 1 < len; i++) {
    int dim = order[i], blocked = 0;
    for (int b = 0; b < bd->inner_nblks; b++)
      if (bd->inner_idxs[b] == dim) blocked = 1;
    buf[k++] = (char)((blocked ? 'A' : 'a') + dim);
  }
  buf[k] = '\0';
  for (int b = 0; b < bd->inner_nblks && k + 1 < len; b++) {
    int n = snprintf(buf + k, len - k, "%lld%c", (long long)bd->inner_blks[b],
                     (char)('a' + bd->inner_idxs[b]));
    if (n < 0 || (size_t)n >= len - k) break;
    k += (size_t)n;
  }
}

static px_status_t px__layout_to_plain(const px_layout_t *layout, void *dst, const void *src);
static px_status_t px__layout_from_plain(const px_layout_t *layout, void *dst, const void *src);

static const px__layout_vtbl_t px__cpu_layout_vt = {px__layout_to_plain, px__layout_from_plain};

static px_status_t px__cpu_intern(px_ops_t *ops, const dnnl_memory_desc_t *md, px_dtype_t dtype,
                                  const px_layout_t **out) {
  for (size_t i = 0; i < ops->nlayouts; i++)
    if (dnnl_memory_desc_equal(&ops->layouts[i]->md, md)) {
      *out = &ops->layouts[i]->base;
      return PX_OK;
    }
  if (ops->nlayouts == ops->cap_layouts) {
    size_t cap = ops->cap_layouts ? 2 * ops->cap_layouts : 16;
    void *p = px_realloc(ops->layouts, cap * sizeof *ops->layouts, "ops layouts");
    if (!p) return PX_ERR_NOMEM;
    ops->layouts = p;
    ops->cap_layouts = cap;
  }
  px__cpu_layout_t *l = px_calloc(1, sizeof *l, "ops layout");
  if (!l) return PX_ERR_NOMEM;
  l->base.vt = &px__cpu_layout_vt;
  l->base.device = ops->device;
  l->base.dtype = dtype;
  l->base.ndim = md->ndims;
  for (int i = 0; i < PX_TENSOR_MAX_DIMS; i++) l->base.dims[i] = i < md->ndims ? md->dims[i] : 1;
  l->base.nbytes = dnnl_memory_desc_get_size(md);
  px__md_name(md, l->base.name, sizeof l->base.name);
  l->ops = ops;
  l->md = *md;
  px_status_t st = px__cpu_plain_md(&l->plain_md, md->ndims, l->base.dims, dtype);
  if (st < 0) {
    px_free(l);
    return st;
  }
  ops->layouts[ops->nlayouts++] = l;
  *out = &l->base;
  return PX_OK;
}

px_status_t px__cpu_spec_of(px_ops_t *ops, const dnnl_memory_desc_t *md, px_tensor_t *spec) {
  px_dtype_t dt;
  if (!px__px_dt(md->data_type, &dt))
    return px_set_error(PX_ERR_INTERNAL, "oneDNN chose an unsupported data type %s",
                        dnnl_dt2str(md->data_type));
  if (md->ndims < 1 || md->ndims > PX_TENSOR_MAX_DIMS)
    return px_set_error(PX_ERR_INTERNAL, "oneDNN descriptor of %d dims", md->ndims);
  int64_t dims[PX_TENSOR_MAX_DIMS];
  for (int i = 0; i < md->ndims; i++) dims[i] = md->dims[i];
  PX_CHECK(px_tensor_init(spec, ops->device, dt, md->ndims, dims));
  dnnl_memory_desc_t plain;
  PX_CHECK(px__cpu_plain_md(&plain, md->ndims, dims, dt));
  if (dnnl_memory_desc_equal(&plain, md)) return PX_OK;
  PX_CHECK(px__cpu_intern(ops, md, dt, &spec->layout));
  spec->nbytes = spec->layout->nbytes;
  return PX_OK;
}

px_status_t px__cpu_md_of(px_ops_t *ops, const px_tensor_t *spec, dnnl_memory_desc_t *md) {
  PX_REQUIRE(px_device_equal(spec->device, ops->device), "tensor is on another device than the ops");
  if (!spec->layout) return px__cpu_plain_md(md, spec->ndim, spec->dims, spec->dtype);
  const px__cpu_layout_t *l = (const px__cpu_layout_t *)spec->layout;
  PX_REQUIRE(spec->layout->vt == &px__cpu_layout_vt && l->ops == ops,
             "tensor layout %s belongs to another ops context", spec->layout->name);
  PX_REQUIRE(spec->layout->ndim == spec->ndim && spec->layout->dtype == spec->dtype,
             "tensor shape does not match its layout %s", spec->layout->name);
  for (int i = 0; i < spec->ndim; i++)
    PX_REQUIRE(spec->layout->dims[i] == spec->dims[i], "tensor shape does not match its layout %s",
               spec->layout->name);
  *md = l->md;
  return PX_OK;
}

px_status_t px__cpu_check_input(px_ops_t *ops, const px_tensor_t *x, int min_ndim, int max_ndim,
                                const char *what) {
  PX_CHECK(px__cpu_require(ops, what));
  PX_REQUIRE(x != NULL, "%s: input spec is NULL", what);
  PX_REQUIRE(px_device_equal(x->device, ops->device), "%s: input is on another device", what);
  PX_REQUIRE(x->dtype == PX_DTYPE_F32, "%s: input must be f32", what);
  PX_REQUIRE(x->ndim >= min_ndim && x->ndim <= max_ndim, "%s: input has %d dims, wants %d..%d",
             what, (int)x->ndim, min_ndim, max_ndim);
  return PX_OK;
}

/* ---- primitives ------------------------------------------------------------ */

px_status_t px__cpu_pd_create(px_ops_t *ops, dnnl_primitive_desc_t *pd, const void *op_desc,
                              const_dnnl_primitive_attr_t attr, const_dnnl_primitive_desc_t hint,
                              const char *what) {
  dnnl_status_t s =
      dnnl_primitive_desc_create(pd, (const_dnnl_op_desc_t)op_desc, attr ? attr : ops->attr,
                                 ops->engine, hint);
  if (s == dnnl_success) return PX_OK;
  *pd = NULL;
  return px_set_error(s == dnnl_unimplemented ? PX_ERR_INVALID : PX_ERR_BACKEND,
                      "oneDNN: no %s primitive for these shapes: %s", what, dnnl_status2str(s));
}

int px__cpu_pd_is_ref(const_dnnl_primitive_desc_t pd, char ref[PX__REF_NAME]) {
  const char *impl = NULL;
  if (ref) ref[0] = '\0';
  if (!pd || dnnl_primitive_desc_query(pd, dnnl_query_impl_info_str, 0, &impl) != dnnl_success ||
      !impl || strncmp(impl, "ref", 3))
    return 0;
  if (ref) snprintf(ref, PX__REF_NAME, "%s", impl);
  return 1;
}

void px__cpu_note_ref(px_ops_t *ops, const_dnnl_primitive_desc_t pd, char ref[PX__REF_NAME]) {
  if (px__cpu_pd_is_ref(pd, ref)) ops->ref_pds++;
}

void px__cpu_warn_ref(px_ops_t *ops, char ref[PX__REF_NAME], const char *what) {
  if (!ref[0]) return;
  if (!ops->ref_warned)
    px_log(PX_LOG_WARN, "oneDNN runs the %s on its reference code (%s): far slower than its "
           "vector kernels", what, ref);
  ops->ref_warned = 1;
  ref[0] = '\0';
}

int px__cpu_ops_ref_pds(const px_ops_t *ops) { return ops->ref_pds; }
int px__cpu_ops_ref_bwd_d_pds(const px_ops_t *ops) { return ops->ref_bwd_d_pds; }
int px__cpu_ops_wino_pds(const px_ops_t *ops) { return ops->wino_pds; }

const dnnl_memory_desc_t *px__cpu_pd_md(const_dnnl_primitive_desc_t pd, int arg) {
  return dnnl_primitive_desc_query_md(pd, dnnl_query_exec_arg_md, arg);
}

static px_status_t px__exec_add_arg(px_ops_t *ops, px__exec_t *ex, int arg,
                                    const dnnl_memory_desc_t *md) {
  if (ex->nargs == PX__EXEC_MAX_ARGS)
    return px_set_error(PX_ERR_INTERNAL, "too many primitive arguments");
  dnnl_memory_t m = NULL;
  PX_DNNL(dnnl_memory_create(&m, md, ops->engine, DNNL_MEMORY_NONE));
  ex->args[ex->nargs].arg = arg;
  ex->args[ex->nargs].memory = m;
  ex->handles[ex->nargs] = NULL;
  ex->nargs++;
  return PX_OK;
}

static px_status_t px__exec_finish(px_ops_t *ops, px__exec_t *ex, const_dnnl_primitive_desc_t pd) {
  const dnnl_memory_desc_t *smd = dnnl_primitive_desc_query_md(pd, dnnl_query_scratchpad_md, 0);
  size_t sbytes = smd ? dnnl_memory_desc_get_size(smd) : 0;
  if (sbytes > 0) {
    PX_CHECK(px__cpu_reserve_scratch(ops, sbytes));
    ex->scratch_idx = ex->nargs;
    PX_CHECK(px__exec_add_arg(ops, ex, DNNL_ARG_SCRATCHPAD, smd));
  }
  PX_DNNL(dnnl_primitive_create(&ex->prim, pd));
  return PX_OK;
}

px_status_t px__exec_create(px_ops_t *ops, px__exec_t *ex, const_dnnl_primitive_desc_t pd,
                            const int *arg_ids, int n) {
  memset(ex, 0, sizeof *ex);
  ex->scratch_idx = -1;
  px_status_t st = PX_OK;
  for (int i = 0; i < n; i++) {
    const dnnl_memory_desc_t *md = px__cpu_pd_md(pd, arg_ids[i]);
    if (!md || md->ndims == 0) {
      st = px_set_error(PX_ERR_INTERNAL, "primitive has no argument %d", arg_ids[i]);
      goto fail;
    }
    PX_CHECK_GOTO(px__exec_add_arg(ops, ex, arg_ids[i], md), st, fail);
  }
  ex->nuser = n;
  PX_CHECK_GOTO(px__exec_finish(ops, ex, pd), st, fail);
  return PX_OK;
fail:
  px__exec_destroy(ex);
  return st;
}

px_status_t px__exec_create_reorder(px_ops_t *ops, px__exec_t *ex, const dnnl_memory_desc_t *src_md,
                                    const dnnl_memory_desc_t *dst_md) {
  memset(ex, 0, sizeof *ex);
  ex->scratch_idx = -1;
  dnnl_primitive_desc_t pd = NULL;
  px_status_t st = PX_OK;
  px__cpu_enter(ops);
  PX_DNNL_GOTO(dnnl_reorder_primitive_desc_create(&pd, src_md, ops->engine, dst_md, ops->engine,
                                                  ops->attr),
               st, fail);
  PX_CHECK_GOTO(px__exec_add_arg(ops, ex, DNNL_ARG_FROM, src_md), st, fail);
  PX_CHECK_GOTO(px__exec_add_arg(ops, ex, DNNL_ARG_TO, dst_md), st, fail);
  ex->nuser = 2;
  PX_CHECK_GOTO(px__exec_finish(ops, ex, pd), st, fail);
  dnnl_primitive_desc_destroy(pd);
  return PX_OK;
fail:
  if (pd) dnnl_primitive_desc_destroy(pd);
  px__exec_destroy(ex);
  return st;
}

px_status_t px__exec_run(px_ops_t *ops, px__exec_t *ex, void *const *ptrs) {
  assert(ex->prim);
  /* Rebinding only changed handles matters: oneDNN zero-fills the padded
   * tail of a blocked buffer each time a handle is set. */
  for (int i = 0; i < ex->nargs; i++) {
    void *p = i == ex->scratch_idx ? ops->scratch : ptrs[i]; /* scratchpad is always last */
    if (p != ex->handles[i]) {
      PX_DNNL(dnnl_memory_set_data_handle_v2(ex->args[i].memory, p, ops->stream));
      ex->handles[i] = p;
    }
  }
  const int serial = ex->serial && ops->omp_set_num_threads;
  if (serial) ops->omp_set_num_threads(1);
  dnnl_status_t s = dnnl_primitive_execute(ex->prim, ops->stream, ex->nargs, ex->args);
  if (s == dnnl_success) s = dnnl_stream_wait(ops->stream);
  if (serial) ops->omp_set_num_threads(ops->nthreads > 0 ? ops->nthreads : ops->default_threads);
  return px__dnnl_status(s, "dnnl_primitive_execute");
}

void px__exec_destroy(px__exec_t *ex) {
  if (!ex) return;
  for (int i = 0; i < ex->nargs; i++)
    if (ex->args[i].memory) dnnl_memory_destroy(ex->args[i].memory);
  if (ex->prim) dnnl_primitive_destroy(ex->prim);
  memset(ex, 0, sizeof *ex);
  ex->scratch_idx = -1;
}

px_status_t px__cpu_grow_shared(void **buf, size_t *bytes, size_t need, const char *name) {
  if (need <= *bytes) return PX_OK;
  void *p = px_malloc_aligned(need, name);
  if (!p) return PX_ERR_NOMEM;
  memset(p, 0, need);
  px_free(*buf);
  *buf = p;
  *bytes = need;
  return PX_OK;
}

px_status_t px__wbuf_create(px_ops_t *ops, px__wbuf_t *wb, const dnnl_memory_desc_t *plain_md,
                            const dnnl_memory_desc_t *prim_md, int to_prim) {
  memset(wb, 0, sizeof *wb);
  if (dnnl_memory_desc_equal(plain_md, prim_md)) return PX_OK;
  size_t need = dnnl_memory_desc_get_size(prim_md);
  PX_CHECK(px__cpu_grow_shared(&ops->wscratch, &ops->wscratch_bytes, need, "op weights scratch"));
  wb->needed = 1;
  PX_CHECK(to_prim ? px__exec_create_reorder(ops, &wb->reorder, plain_md, prim_md)
                   : px__exec_create_reorder(ops, &wb->reorder, prim_md, plain_md));
  wb->reorder.serial = need <= PX__SERIAL_BYTES;
  return PX_OK;
}

px_status_t px__wbuf_in(px_ops_t *ops, px__wbuf_t *wb, const px_tensor_t *w, void **out) {
  if (!wb->needed) {
    *out = w->data;
    return PX_OK;
  }
  void *ptrs[2] = {w->data, ops->wscratch};
  PX_CHECK(px__exec_run(ops, &wb->reorder, ptrs));
  *out = ops->wscratch;
  return PX_OK;
}

px_status_t px__wbuf_out(px_ops_t *ops, px__wbuf_t *wb, px_tensor_t *dw) {
  if (!wb->needed) return PX_OK;
  void *ptrs[2] = {ops->wscratch, dw->data};
  return px__exec_run(ops, &wb->reorder, ptrs);
}

void px__wbuf_destroy(px__wbuf_t *wb) {
  if (!wb) return;
  if (wb->needed) px__exec_destroy(&wb->reorder);
  memset(wb, 0, sizeof *wb);
}

/* ---- layout conversions (tensor.c's function table) -------------------------- */

static px_status_t px__layout_to_plain(const px_layout_t *layout, void *dst, const void *src) {
  px__cpu_layout_t *l = (px__cpu_layout_t *)layout; /* caches its primitive: see px_tensor_int.h */
  px__cpu_enter(l->ops);
  if (!l->have_to_plain) {
    PX_CHECK(px__exec_create_reorder(l->ops, &l->to_plain, &l->md, &l->plain_md));
    l->have_to_plain = 1;
  }
  void *ptrs[2] = {(void *)src, dst};
  return px__exec_run(l->ops, &l->to_plain, ptrs);
}

static px_status_t px__layout_from_plain(const px_layout_t *layout, void *dst, const void *src) {
  px__cpu_layout_t *l = (px__cpu_layout_t *)layout;
  px__cpu_enter(l->ops);
  if (!l->have_from_plain) {
    PX_CHECK(px__exec_create_reorder(l->ops, &l->from_plain, &l->plain_md, &l->md));
    l->have_from_plain = 1;
  }
  void *ptrs[2] = {(void *)src, dst};
  return px__exec_run(l->ops, &l->from_plain, ptrs);
}

/* ---- public reorder op ----------------------------------------------------------- */

struct px_reorder {
  px__ops_head_t head; /* first: the dispatcher reads it */
  px_ops_t *ops;
  px_tensor_t src_spec, dst_spec;
  px__exec_t ex;
};

px_status_t px__cpu_reorder_create(px_ops_t *ops, const px_tensor_t *dst_spec,
                                          const px_tensor_t *src_spec, px_reorder_t **out) {
  PX_REQUIRE(out && dst_spec && src_spec, "px_reorder_create: NULL argument");
  *out = NULL;
  PX_CHECK(px__cpu_require(ops, "px_reorder_create"));
  PX_REQUIRE(src_spec->dtype == dst_spec->dtype && src_spec->ndim == dst_spec->ndim,
             "px_reorder_create: src and dst differ in dtype or rank");
  for (int i = 0; i < src_spec->ndim; i++)
    PX_REQUIRE(src_spec->dims[i] == dst_spec->dims[i], "px_reorder_create: dims differ");
  dnnl_memory_desc_t smd, dmd;
  PX_CHECK(px__cpu_md_of(ops, src_spec, &smd));
  PX_CHECK(px__cpu_md_of(ops, dst_spec, &dmd));
  px_reorder_t *r = px_calloc(1, sizeof *r, "px_reorder");
  if (!r) return PX_ERR_NOMEM;
  r->head.be = &px__cpu_backend;
  r->ops = ops;
  r->src_spec = *src_spec;
  r->dst_spec = *dst_spec;
  r->src_spec.data = r->dst_spec.data = NULL;
  r->src_spec.flags = r->dst_spec.flags = 0;
  px_status_t st = px__exec_create_reorder(ops, &r->ex, &smd, &dmd);
  if (st < 0) {
    px_free(r);
    return st;
  }
  px__cpu_op_born(ops);
  *out = r;
  return PX_OK;
}

void px__cpu_reorder_destroy(px_reorder_t *op) {
  if (!op) return;
  px__exec_destroy(&op->ex);
  px__cpu_op_died(op->ops);
  px_free(op);
}

px_status_t px__cpu_reorder_execute(px_reorder_t *op, px_tensor_t *dst,
                                           const px_tensor_t *src) {
  PX_CHECK(px__ops_check_tensor(src, &op->src_spec, "reorder src"));
  PX_CHECK(px__ops_check_tensor(dst, &op->dst_spec, "reorder dst"));
  px__cpu_enter(op->ops);
  void *ptrs[2] = {src->data, dst->data};
  return px__exec_run(op->ops, &op->ex, ptrs);
}

/* ---- the backend's function table ------------------------------------------------- */

#define PX__CPU_ENTRY(ret, name, params) .name = px__cpu_##name,
const px__ops_backend_t px__cpu_backend = {.name = "cpu", PX__OPS_ENTRY_POINTS(PX__CPU_ENTRY)};
#undef PX__CPU_ENTRY
