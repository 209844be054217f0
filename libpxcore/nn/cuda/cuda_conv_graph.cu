/* 2-D convolution on cuDNN's graph (backend) API, cuda_conv.cu's default
 * path since an H200 measured it (docs/performance.md: ResNet-50 in bf16
 * 2.4-2.9x the legacy API's speed, 1.6-1.9x PyTorch's autocast);
 * PX_CUDNN_API=legacy goes back to the legacy API, and a shape with no
 * usable engine here falls back to it with a warning.
 *
 * Why: the legacy API picks among a fixed enum of algorithms, and on an
 * H200 its bf16 NHWC backward-filter choice ran cuDNN's algorithm-0 kernels
 * (31 of ResNet-50's 46 ms per step) where PyTorch, on the graph API through
 * cudnn-frontend, runs none. The graph API offers the engines of cuDNN's
 * heuristics instead, which include the sm90 NHWC engines.
 *
 * Per shape and direction, at creation: the x, w and y tensors (the legacy
 * descriptors' dims, memory order and dtype), the convolution (f32 compute,
 * groups through w's channel count), a one-operation graph, the engine
 * configurations of heuristics mode A (mode FALLBACK when none of those is
 * usable), each finalized into an execution plan. A plan is skipped when it
 * does not finalize, when its workspace exceeds the per-algorithm limit of
 * the legacy path (PX_CUDNN_WORKSPACE_MB), when its engine is marked
 * nondeterministic and the context wants determinism, and, for f32 data,
 * when it converts its inputs down, reduces in reduced precision or runs on
 * tensor cores (TF32) where the context forbids TF32 (PyTorch's filter). The
 * first usable plan wins, or with PX_CUDNN_BENCHMARK (the default) the
 * fastest: each is run once to warm up and then timed ops->find_runs times
 * (cudaEvent), least time kept, on scratch buffers freed afterwards. Plans are
 * remembered per shape and direction in the context with every descriptor
 * they were built from, so a model's repeated shapes are planned once. */
#include <stdint.h>
#include <string.h>
#include <time.h>

#include "nn/cuda/px_cuda_ops_int.h"

typedef cudnnBackendDescriptor_t px__bd_t;

enum { PX__CONV_KEY = 16, PX__MAX_CFGS = 64 };
enum { PX__UID_X = 'x', PX__UID_W = 'w', PX__UID_Y = 'y' };

/* One chosen plan of one shape and direction, owned by the context: every
 * descriptor it was built from stays alive with it. */
typedef struct px__conv_plan {
  int64_t key[PX__CONV_KEY];
  px__bd_t x, w, y, conv, op, graph, cfg, plan;
  int64_t align[3]; /* byte alignment x, w, y were declared with (their pointers must have it) */
  int64_t engine; /* global index of the chosen engine */
  size_t ws;      /* its workspace bytes */
  struct px__conv_plan *next;
} px__conv_plan_t;

/* Device buffers and events of the timing (benchmark mode), at creation only. */
typedef struct {
  void *x, *w, *y, *ws;
  size_t ws_bytes;
  cudaEvent_t t0, t1;
} px__plan_scratch_t;

static const char *const px__dir_name[PX__CONV_DIRS] = {"forward", "backward-data",
                                                        "backward-filter"};

static cudnnStatus_t px__set(px__bd_t d, cudnnBackendAttributeName_t a,
                             cudnnBackendAttributeType_t t, int64_t n, const void *v) {
  return cudnnBackendSetAttribute(d, a, t, n, v);
}

static void px__bd_free(px__bd_t *d) {
  if (*d) cudnnBackendDestroyDescriptor(*d);
  *d = NULL;
}

static void px__plan_free(px__conv_plan_t *p) {
  if (!p) return;
  /* users before what they use */
  px__bd_t *all[] = {&p->plan, &p->cfg, &p->graph, &p->op, &p->conv, &p->y, &p->w, &p->x};
  for (size_t i = 0; i < sizeof all / sizeof *all; i++) px__bd_free(all[i]);
  px_free(p);
}

void px__cuda_conv_plan_cache_free(px__cuda_ops_t *ops) {
  while (ops->plans) {
    px__conv_plan_t *p = ops->plans;
    ops->plans = p->next;
    px__plan_free(p);
  }
}

/* ---- the graph of one direction ---------------------------------------------------- */

/* A finalized 4-D tensor descriptor: dims d (N, C, H, W order) stored plain
 * (NCHW) or channels-last (N, H, W, C), at addresses aligned to `align` bytes. */
static px_status_t px__tensor(px__bd_t *t, int64_t uid, const int64_t *d, int nhwc,
                              cudnnDataType_t dt, int64_t align) {
  int64_t st[4];
  if (nhwc) {
    st[1] = 1;
    st[3] = d[1];
    st[2] = d[3] * d[1];
    st[0] = d[2] * st[2];
  } else {
    st[3] = 1;
    st[2] = d[3];
    st[1] = d[2] * d[3];
    st[0] = d[1] * st[1];
  }
  PX_CUDNN(cudnnBackendCreateDescriptor(CUDNN_BACKEND_TENSOR_DESCRIPTOR, t));
  PX_CUDNN(px__set(*t, CUDNN_ATTR_TENSOR_DATA_TYPE, CUDNN_TYPE_DATA_TYPE, 1, &dt));
  PX_CUDNN(px__set(*t, CUDNN_ATTR_TENSOR_DIMENSIONS, CUDNN_TYPE_INT64, 4, d));
  PX_CUDNN(px__set(*t, CUDNN_ATTR_TENSOR_STRIDES, CUDNN_TYPE_INT64, 4, st));
  PX_CUDNN(px__set(*t, CUDNN_ATTR_TENSOR_UNIQUE_ID, CUDNN_TYPE_INT64, 1, &uid));
  PX_CUDNN(px__set(*t, CUDNN_ATTR_TENSOR_BYTE_ALIGNMENT, CUDNN_TYPE_INT64, 1, &align));
  PX_CUDNN(cudnnBackendFinalize(*t));
  return PX_OK;
}

static px_status_t px__conv_desc(px__bd_t *c, const px__conv_shape_t *s) {
  const cudnnDataType_t comp = CUDNN_DATA_FLOAT; /* f32 accumulation also for bf16 data */
  const cudnnConvolutionMode_t mode = CUDNN_CROSS_CORRELATION;
  const int64_t nd = 2, dil[2] = {1, 1};
  PX_CUDNN(cudnnBackendCreateDescriptor(CUDNN_BACKEND_CONVOLUTION_DESCRIPTOR, c));
  PX_CUDNN(px__set(*c, CUDNN_ATTR_CONVOLUTION_COMP_TYPE, CUDNN_TYPE_DATA_TYPE, 1, &comp));
  PX_CUDNN(px__set(*c, CUDNN_ATTR_CONVOLUTION_CONV_MODE, CUDNN_TYPE_CONVOLUTION_MODE, 1, &mode));
  PX_CUDNN(px__set(*c, CUDNN_ATTR_CONVOLUTION_SPATIAL_DIMS, CUDNN_TYPE_INT64, 1, &nd));
  PX_CUDNN(px__set(*c, CUDNN_ATTR_CONVOLUTION_DILATIONS, CUDNN_TYPE_INT64, 2, dil));
  PX_CUDNN(px__set(*c, CUDNN_ATTR_CONVOLUTION_FILTER_STRIDES, CUDNN_TYPE_INT64, 2, s->stride));
  /* symmetric padding, so the output is the legacy one: floor((H + 2p - K) / s) + 1 */
  PX_CUDNN(px__set(*c, CUDNN_ATTR_CONVOLUTION_PRE_PADDINGS, CUDNN_TYPE_INT64, 2, s->pad));
  PX_CUDNN(px__set(*c, CUDNN_ATTR_CONVOLUTION_POST_PADDINGS, CUDNN_TYPE_INT64, 2, s->pad));
  PX_CUDNN(cudnnBackendFinalize(*c));
  return PX_OK;
}

/* Per direction: its operation type and the attributes of alpha, beta, the
 * convolution, and the tensors x (dx), w (dw), y (dy). */
static const cudnnBackendDescriptorType_t px__op_type[PX__CONV_DIRS] = {
    CUDNN_BACKEND_OPERATION_CONVOLUTION_FORWARD_DESCRIPTOR,
    CUDNN_BACKEND_OPERATION_CONVOLUTION_BACKWARD_DATA_DESCRIPTOR,
    CUDNN_BACKEND_OPERATION_CONVOLUTION_BACKWARD_FILTER_DESCRIPTOR};
static const cudnnBackendAttributeName_t px__op_attr[PX__CONV_DIRS][6] = {
    {CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_ALPHA, CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_BETA,
     CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_CONV_DESC, CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_X,
     CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_W, CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_Y},
    {CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_DATA_ALPHA,
     CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_DATA_BETA,
     CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_DATA_CONV_DESC,
     CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_DATA_DX, CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_DATA_W,
     CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_DATA_DY},
    {CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_FILTER_ALPHA,
     CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_FILTER_BETA,
     CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_FILTER_CONV_DESC,
     CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_FILTER_X,
     CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_FILTER_DW,
     CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_FILTER_DY}};

/* p's tensors, convolution, operation and finalized operation graph. */
static px_status_t px__graph(px__cuda_ops_t *ops, const px__conv_shape_t *s, int dir,
                             px__conv_plan_t *p) {
  const cudnnDataType_t dt = s->bf16 ? CUDNN_DATA_BFLOAT16 : CUDNN_DATA_FLOAT;
  /* activations: 64-byte aligned arenas or whole blocks; weights: the KRSC
   * copy (256) when NHWC, else the caller's OIHW tensors, which the model's
   * parameter and gradient arenas align to their element only */
  p->align[0] = p->align[2] = 16;
  p->align[1] = s->nhwc ? 16 : 4;
  PX_CHECK(px__tensor(&p->x, PX__UID_X, s->x, s->nhwc, dt, p->align[0]));
  PX_CHECK(px__tensor(&p->w, PX__UID_W, s->w, s->nhwc, dt, p->align[1]));
  PX_CHECK(px__tensor(&p->y, PX__UID_Y, s->y, s->nhwc, dt, p->align[2]));
  PX_CHECK(px__conv_desc(&p->conv, s));
  const float alpha = 1.0f, beta = 0.0f; /* f32 compute: float scalars */
  const cudnnBackendAttributeName_t *a = px__op_attr[dir];
  PX_CUDNN(cudnnBackendCreateDescriptor(px__op_type[dir], &p->op));
  PX_CUDNN(px__set(p->op, a[0], CUDNN_TYPE_FLOAT, 1, &alpha));
  PX_CUDNN(px__set(p->op, a[1], CUDNN_TYPE_FLOAT, 1, &beta));
  PX_CUDNN(px__set(p->op, a[2], CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &p->conv));
  PX_CUDNN(px__set(p->op, a[3], CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &p->x));
  PX_CUDNN(px__set(p->op, a[4], CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &p->w));
  PX_CUDNN(px__set(p->op, a[5], CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &p->y));
  PX_CUDNN(cudnnBackendFinalize(p->op));
  PX_CUDNN(cudnnBackendCreateDescriptor(CUDNN_BACKEND_OPERATIONGRAPH_DESCRIPTOR, &p->graph));
  PX_CUDNN(px__set(p->graph, CUDNN_ATTR_OPERATIONGRAPH_HANDLE, CUDNN_TYPE_HANDLE, 1, &ops->cudnn));
  PX_CUDNN(px__set(p->graph, CUDNN_ATTR_OPERATIONGRAPH_OPS, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1,
                   &p->op));
  PX_CUDNN(cudnnBackendFinalize(p->graph));
  return PX_OK;
}

/* The engine configurations heuristics `mode` proposes for graph, best
 * first, at most PX__MAX_CFGS: cfgs[0..*n), owned by the caller. */
static px_status_t px__heuristics(px__bd_t graph, cudnnBackendHeurMode_t mode, px__bd_t *cfgs,
                                  int *n) {
  px__bd_t heur = NULL;
  px_status_t st = PX_OK;
  int64_t count = 0, got = 0;
  *n = 0;
  PX_CUDNN_GOTO(cudnnBackendCreateDescriptor(CUDNN_BACKEND_ENGINEHEUR_DESCRIPTOR, &heur), st, out);
  PX_CUDNN_GOTO(px__set(heur, CUDNN_ATTR_ENGINEHEUR_OPERATION_GRAPH,
                        CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &graph),
                st, out);
  PX_CUDNN_GOTO(px__set(heur, CUDNN_ATTR_ENGINEHEUR_MODE, CUDNN_TYPE_HEUR_MODE, 1, &mode), st, out);
  PX_CUDNN_GOTO(cudnnBackendFinalize(heur), st, out);
  /* the count first (no elements asked), then that many configurations */
  PX_CUDNN_GOTO(cudnnBackendGetAttribute(heur, CUDNN_ATTR_ENGINEHEUR_RESULTS,
                                         CUDNN_TYPE_BACKEND_DESCRIPTOR, 0, &count, NULL),
                st, out);
  if (count > PX__MAX_CFGS) count = PX__MAX_CFGS;
  for (; *n < count; (*n)++)
    PX_CUDNN_GOTO(cudnnBackendCreateDescriptor(CUDNN_BACKEND_ENGINECFG_DESCRIPTOR, &cfgs[*n]), st,
                  out);
  if (count > 0)
    PX_CUDNN_GOTO(cudnnBackendGetAttribute(heur, CUDNN_ATTR_ENGINEHEUR_RESULTS,
                                           CUDNN_TYPE_BACKEND_DESCRIPTOR, count, &got, cfgs),
                  st, out);
  while (*n > got) px__bd_free(&cfgs[--(*n)]);
out:
  px__bd_free(&heur);
  return st;
}

/* Why cfg's engine may not run in this context, or NULL; its global index in *engine. */
static const char *px__engine_refused(const px__cuda_ops_t *ops, const px__conv_shape_t *s,
                                      px__bd_t cfg, int64_t *engine) {
  px__bd_t eng = NULL;
  int64_t n = 0, nn = 0;
  cudnnBackendNumericalNote_t notes[CUDNN_NUMERICAL_NOTE_TYPE_COUNT];
  const char *why = NULL;
  *engine = -1;
  if (cudnnBackendCreateDescriptor(CUDNN_BACKEND_ENGINE_DESCRIPTOR, &eng) != CUDNN_STATUS_SUCCESS)
    return "no engine descriptor";
  if (cudnnBackendGetAttribute(cfg, CUDNN_ATTR_ENGINECFG_ENGINE, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1,
                               &n, &eng) != CUDNN_STATUS_SUCCESS ||
      cudnnBackendGetAttribute(eng, CUDNN_ATTR_ENGINE_GLOBAL_INDEX, CUDNN_TYPE_INT64, 1, &n,
                               engine) != CUDNN_STATUS_SUCCESS ||
      cudnnBackendGetAttribute(eng, CUDNN_ATTR_ENGINE_NUMERICAL_NOTE, CUDNN_TYPE_NUMERICAL_NOTE,
                               CUDNN_NUMERICAL_NOTE_TYPE_COUNT, &nn,
                               notes) != CUDNN_STATUS_SUCCESS)
    why = "engine not readable";
  if (nn > CUDNN_NUMERICAL_NOTE_TYPE_COUNT) nn = CUDNN_NUMERICAL_NOTE_TYPE_COUNT;
  for (int64_t i = 0; !why && i < nn; i++) {
    if (notes[i] == CUDNN_NUMERICAL_NOTE_NONDETERMINISTIC && ops->deterministic)
      why = "not deterministic";
    else if (s->bf16)
      continue; /* tensor cores, f32 accumulation: what bf16 asks for */
    else if (notes[i] == CUDNN_NUMERICAL_NOTE_DOWN_CONVERT_INPUTS)
      why = "converts f32 inputs down";
    else if (notes[i] == CUDNN_NUMERICAL_NOTE_REDUCED_PRECISION_REDUCTION)
      why = "reduces in reduced precision";
    else if (notes[i] == CUDNN_NUMERICAL_NOTE_TENSOR_CORE && !s->tf32)
      why = "tensor cores (TF32) not allowed";
  }
  px__bd_free(&eng);
  return why;
}

/* ---- choosing a plan ---------------------------------------------------------------- */

/* A finalized variant pack of ptr[0..3) (x, w, y) and workspace ws. */
static cudnnStatus_t px__pack_new(px__bd_t *vp, void *const *ptr, void *ws) {
  static const int64_t uids[3] = {PX__UID_X, PX__UID_W, PX__UID_Y};
  cudnnStatus_t s = cudnnBackendCreateDescriptor(CUDNN_BACKEND_VARIANT_PACK_DESCRIPTOR, vp);
  if (s == CUDNN_STATUS_SUCCESS)
    s = px__set(*vp, CUDNN_ATTR_VARIANT_PACK_UNIQUE_IDS, CUDNN_TYPE_INT64, 3, uids);
  if (s == CUDNN_STATUS_SUCCESS)
    s = px__set(*vp, CUDNN_ATTR_VARIANT_PACK_DATA_POINTERS, CUDNN_TYPE_VOID_PTR, 3, ptr);
  if (s == CUDNN_STATUS_SUCCESS)
    s = px__set(*vp, CUDNN_ATTR_VARIANT_PACK_WORKSPACE, CUDNN_TYPE_VOID_PTR, 1, &ws);
  if (s == CUDNN_STATUS_SUCCESS) s = cudnnBackendFinalize(*vp);
  if (s != CUDNN_STATUS_SUCCESS) px__bd_free(vp);
  return s;
}

/* Times plan on the scratch buffers: once to warm up, then the least of
 * ops->find_runs runs, in *ms. Why it cannot run, or NULL. */
static const char *px__time_plan(px__cuda_ops_t *ops, px__plan_scratch_t *sc, px__bd_t plan,
                                 size_t ws, float *ms) {
  if (ws > sc->ws_bytes) {
    px__cuda_mem_free(sc->ws);
    sc->ws = NULL;
    sc->ws_bytes = 0;
    if (px__cuda_mem_alloc(ops->device.index, ws, "conv plan timing workspace", &sc->ws) != PX_OK)
      return "no memory for its workspace";
    sc->ws_bytes = ws;
  }
  void *ptr[3] = {sc->x, sc->w, sc->y};
  px__bd_t vp = NULL;
  if (px__pack_new(&vp, ptr, sc->ws) != CUDNN_STATUS_SUCCESS) return "variant pack refused";
  const char *why = NULL;
  *ms = -1.0f;
  if (cudnnBackendExecute(ops->cudnn, plan, vp) != CUDNN_STATUS_SUCCESS) why = "failed to run";
  for (int r = 0; !why && r < ops->find_runs; r++) {
    float t = 0;
    if (cudaEventRecord(sc->t0, ops->stream) != cudaSuccess ||
        cudnnBackendExecute(ops->cudnn, plan, vp) != CUDNN_STATUS_SUCCESS ||
        cudaEventRecord(sc->t1, ops->stream) != cudaSuccess ||
        cudaEventSynchronize(sc->t1) != cudaSuccess ||
        cudaEventElapsedTime(&t, sc->t0, sc->t1) != cudaSuccess)
      why = "failed to run";
    else if (*ms < 0 || t < *ms)
      *ms = t;
  }
  px__bd_free(&vp);
  return why;
}

/* cfg finalized into *plan with its workspace in *ws, or why not. */
static const char *px__finalize_plan(px__cuda_ops_t *ops, px__bd_t cfg, px__bd_t *plan,
                                     size_t *ws) {
  int64_t n = 0, bytes = 0;
  const char *why = NULL;
  if (cudnnBackendCreateDescriptor(CUDNN_BACKEND_EXECUTION_PLAN_DESCRIPTOR, plan) !=
      CUDNN_STATUS_SUCCESS)
    return "no plan descriptor";
  if (px__set(*plan, CUDNN_ATTR_EXECUTION_PLAN_HANDLE, CUDNN_TYPE_HANDLE, 1, &ops->cudnn) !=
          CUDNN_STATUS_SUCCESS ||
      px__set(*plan, CUDNN_ATTR_EXECUTION_PLAN_ENGINE_CONFIG, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1,
              &cfg) != CUDNN_STATUS_SUCCESS ||
      cudnnBackendFinalize(*plan) != CUDNN_STATUS_SUCCESS)
    why = "does not finalize";
  else if (cudnnBackendGetAttribute(*plan, CUDNN_ATTR_EXECUTION_PLAN_WORKSPACE_SIZE,
                                    CUDNN_TYPE_INT64, 1, &n, &bytes) != CUDNN_STATUS_SUCCESS ||
           bytes < 0)
    why = "no workspace size";
  else if ((uint64_t)bytes > ops->ws_algo_limit)
    why = "workspace over the limit";
  *ws = why ? 0 : (size_t)bytes;
  if (why) px__bd_free(plan);
  return why;
}

/* The best usable one of cfgs[0..n) into p (p->cfg, p->plan, p->engine,
 * p->ws; the chosen cfg moves to p, the caller frees the rest). 1 when one
 * was found. PX_LOG_LEVEL=debug: each candidate and why it was passed over. */
static int px__choose(px__cuda_ops_t *ops, const px__conv_shape_t *s, int dir,
                      px__plan_scratch_t *sc, px__bd_t *cfgs, int n, px__conv_plan_t *p) {
  const int say = px_log_get_level() >= PX_LOG_DEBUG;
  int best = -1;
  float best_ms = 0;
  for (int i = 0; i < n; i++) {
    int64_t engine = -1;
    px__bd_t plan = NULL;
    size_t ws = 0;
    float ms = -1.0f;
    const char *why = px__engine_refused(ops, s, cfgs[i], &engine);
    if (!why) why = px__finalize_plan(ops, cfgs[i], &plan, &ws);
    if (!why && ops->benchmark) why = px__time_plan(ops, sc, plan, ws, &ms);
    const int better = !why && (best < 0 || ms < best_ms);
    if (say)
      px_log(PX_LOG_DEBUG,
             "conv graph %s [%lld %lld %lld %lld] -> %lld k%lldx%lld s%lld: engine %lld %.3f ms "
             "ws %zu: %s",
             px__dir_name[dir], (long long)s->x[0], (long long)s->x[1], (long long)s->x[2],
             (long long)s->x[3], (long long)s->w[0], (long long)s->w[2], (long long)s->w[3],
             (long long)s->stride[0], (long long)engine, (double)ms, ws,
             why ? why : better ? "best so far" : "slower");
    if (!better) {
      px__bd_free(&plan);
      continue;
    }
    px__bd_free(&p->plan);
    p->plan = plan;
    p->engine = engine;
    p->ws = ws;
    best = i;
    best_ms = ms;
    if (!ops->benchmark) break; /* heuristics' order: the first usable */
  }
  if (best < 0) return 0;
  p->cfg = cfgs[best];
  cfgs[best] = NULL;
  if (say)
    px_log(PX_LOG_DEBUG, "conv graph %s: engine %lld chosen (%.3f ms, ws %zu)", px__dir_name[dir],
           (long long)p->engine, (double)best_ms, p->ws);
  return 1;
}

/* p planned for direction dir of s: graph, heuristics A, else FALLBACK. */
static px_status_t px__plan_dir(px__cuda_ops_t *ops, const px__conv_shape_t *s, int dir,
                                px__plan_scratch_t *sc, px__conv_plan_t *p) {
  PX_CHECK(px__graph(ops, s, dir, p));
  const cudnnBackendHeurMode_t modes[2] = {CUDNN_HEUR_MODE_A, CUDNN_HEUR_MODE_FALLBACK};
  px_status_t st = PX_OK;
  int tried = 0, found = 0;
  for (int m = 0; m < 2 && !found && st == PX_OK; m++) {
    px__bd_t cfgs[PX__MAX_CFGS] = {};
    int n = 0;
    st = px__heuristics(p->graph, modes[m], cfgs, &n);
    if (st == PX_OK) found = px__choose(ops, s, dir, sc, cfgs, n, p);
    tried += n;
    for (int i = 0; i < n; i++) px__bd_free(&cfgs[i]);
  }
  PX_CHECK(st);
  if (!found)
    return px_set_error(PX_ERR_BACKEND,
                        "cuDNN's graph API offers no usable %s engine for this convolution (%d "
                        "tried; PX_LOG_LEVEL=debug lists them)",
                        px__dir_name[dir], tried);
  return PX_OK;
}

/* ---- the cache and the calls ---------------------------------------------------------- */

static void px__plan_key(const px__conv_shape_t *s, int dir, int64_t *key) {
  const int64_t k[PX__CONV_KEY] = {s->x[0], s->x[1], s->x[2], s->x[3], s->w[0], s->w[1],
                                   s->w[2], s->w[3], s->stride[0], s->stride[1], s->pad[0],
                                   s->pad[1], s->nhwc, s->bf16, s->tf32, dir};
  memcpy(key, k, sizeof k);
}

static size_t px__numel(const int64_t *d) { return (size_t)(d[0] * d[1] * d[2] * d[3]); }

/* Zeroed scratch tensors of s and the timing events (benchmark mode only). */
static px_status_t px__scratch_init(px__cuda_ops_t *ops, const px__conv_shape_t *s,
                                    px__plan_scratch_t *sc) {
  const size_t es = s->bf16 ? 2 : 4;
  const int64_t *dims[3] = {s->x, s->w, s->y};
  void **bufs[3] = {&sc->x, &sc->w, &sc->y};
  for (int i = 0; i < 3; i++) {
    const size_t bytes = px__numel(dims[i]) * es;
    PX_CHECK(px__cuda_mem_alloc(ops->device.index, bytes, "conv plan timing", bufs[i]));
    PX_CUDA(cudaMemsetAsync(*bufs[i], 0, bytes, ops->stream));
  }
  PX_CUDA(cudaEventCreate(&sc->t0));
  PX_CUDA(cudaEventCreate(&sc->t1));
  return PX_OK;
}

static void px__scratch_free(px__cuda_ops_t *ops, px__plan_scratch_t *sc) {
  cudaStreamSynchronize(ops->stream); /* the timed runs are done with them */
  void *const bufs[4] = {sc->x, sc->w, sc->y, sc->ws};
  for (int i = 0; i < 4; i++) px__cuda_mem_free(bufs[i]);
  if (sc->t0) cudaEventDestroy(sc->t0);
  if (sc->t1) cudaEventDestroy(sc->t1);
}

/* The context's plan of (s, dir), planned and remembered when new. */
static px_status_t px__plan_get(px__cuda_ops_t *ops, const px__conv_shape_t *s, int dir,
                                px__plan_scratch_t *sc, int *have_scratch,
                                const px__conv_plan_t **out) {
  int64_t key[PX__CONV_KEY];
  px__plan_key(s, dir, key);
  for (px__conv_plan_t *c = ops->plans; c; c = c->next)
    if (!memcmp(c->key, key, sizeof key)) {
      *out = c;
      return PX_OK;
    }
  if (ops->benchmark && !*have_scratch) {
    *have_scratch = 1;
    PX_CHECK(px__scratch_init(ops, s, sc));
  }
  px__conv_plan_t *p = (px__conv_plan_t *)px_calloc(1, sizeof *p, "conv graph plan");
  if (!p) return PX_ERR_NOMEM;
  memcpy(p->key, key, sizeof key);
  struct timespec t0, t1;
  clock_gettime(CLOCK_MONOTONIC, &t0);
  px_status_t st = px__plan_dir(ops, s, dir, sc, p);
  clock_gettime(CLOCK_MONOTONIC, &t1);
  /* heuristics, finalizations (some engines compile at run time) and timing */
  px_log(PX_LOG_DEBUG, "conv graph %s: planned in %.1f ms", px__dir_name[dir],
         (double)(t1.tv_sec - t0.tv_sec) * 1e3 + (double)(t1.tv_nsec - t0.tv_nsec) * 1e-6);
  if (st != PX_OK) {
    px__plan_free(p);
    return st;
  }
  p->next = ops->plans;
  ops->plans = p;
  *out = p;
  return PX_OK;
}

px_status_t px__cuda_conv_graph_plan(px__cuda_ops_t *ops, const px__conv_shape_t *s,
                                     px__conv_graph_call_t *calls) {
  px__plan_scratch_t sc;
  memset(&sc, 0, sizeof sc);
  int have_scratch = 0;
  px_status_t st = PX_OK;
  for (int d = 0; d < PX__CONV_DIRS && st == PX_OK; d++) {
    st = px__plan_get(ops, s, d, &sc, &have_scratch, &calls[d].plan);
    if (st == PX_OK) calls[d].ws = calls[d].plan->ws;
  }
  if (have_scratch) px__scratch_free(ops, &sc);
  return st;
}

px_status_t px__cuda_conv_graph_run(px__cuda_ops_t *ops, px__conv_graph_call_t *c, const void *x,
                                    const void *w, const void *y) {
  void *const ptr[4] = {(void *)x, (void *)w, (void *)y, ops->ws};
  if (!c->pack || memcmp(ptr, c->ptr, sizeof ptr)) {
    /* new pointers: a new pack (a finalized descriptor takes no new attributes) */
    static const char *const name[3] = {"x", "w", "y"};
    for (int i = 0; i < 3; i++)
      PX_REQUIRE((uintptr_t)ptr[i] % (uintptr_t)c->plan->align[i] == 0,
                 "conv (cuDNN graph API): %s at %p is not %lld-byte aligned, as its plan needs",
                 name[i], ptr[i], (long long)c->plan->align[i]);
    px__bd_free(&c->pack);
    memset(c->ptr, 0, sizeof c->ptr);
    PX_CUDNN(px__pack_new(&c->pack, ptr, ops->ws));
    memcpy(c->ptr, ptr, sizeof ptr);
  }
  PX_CUDNN(cudnnBackendExecute(ops->cudnn, c->plan->plan, c->pack));
  return PX_OK;
}

void px__cuda_conv_graph_release(px__conv_graph_call_t *calls) {
  for (int d = 0; d < PX__CONV_DIRS; d++) px__bd_free(&calls[d].pack);
}
