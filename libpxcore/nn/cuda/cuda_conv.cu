/* 2-D convolution on cuDNN: forward, backward data and backward filter,
 * plus the bias through cudnnAddTensor / cudnnConvolutionBackwardBias (on bf16
 * activations two small kernels of this file). The
 * three directions run on cuDNN's graph API by default (cuda_conv_graph.cu:
 * planned at creation for the tensors the legacy descriptors describe,
 * chosen by the same rules; on an H200 it ran ResNet-50 in bf16 2.4-2.9x
 * faster than the legacy API, docs/performance.md); with PX_CUDNN_API=legacy,
 * or for a shape the graph API has no usable engine for (a warning says
 * so), on the legacy convolution API described here. The bias and the
 * weight conversion below are the same for both.
 *
 * The algorithm of each direction is chosen once, at creation: by timing
 * every algorithm (cudnnFind*Algorithm, what PyTorch's cudnn.benchmark does,
 * twice: see px__find_ranked; the default, remembered per shape in the
 * context so that a model's
 * repeated shapes are timed once) or, with PX_CUDNN_BENCHMARK=0, from
 * cuDNN's heuristics (cudnnGet*Algorithm_v7): the fastest (first) candidate
 * that succeeds, whose math type the context allows and whose workspace
 * fits the per-algorithm limit; with PX_CUDNN_DETERMINISTIC=1, the
 * heuristics' first candidate that cuDNN marks deterministic (the same
 * algorithms, hence the same bits, on every run). Each
 * direction has its own convolution descriptor carrying the math type of its
 * algorithm (TF32 allowed: the one cuDNN suggests; forbidden: CUDNN_FMA_MATH,
 * plain f32). The workspace is the context's shared one, grown here to the
 * largest of the three, so the calls allocate nothing.
 *
 * Formats. The input may be plain f32 NCHW or channels-last (NHWC) in f32 or
 * bf16 (px_cuda_ops_int.h); the output has the input's format. Weights and
 * their gradients are always the caller's plain f32 OIHW tensors: for an
 * NHWC input the op converts them at this one point, into the context's
 * shared weight-copy buffer, to cuDNN's KRSC filter in the activations'
 * dtype before the forward and the backward-data call, and the KRSC
 * gradient back to f32 OIHW after the backward-filter call (a few
 * microseconds a layer, no allocation). bf16 convolutions accumulate in f32
 * on tensor cores. Grouped and depthwise convolutions (an imported graph's
 * Conv with group > 1) are cuDNN's group count on the same descriptors. */
#include <stddef.h>
#include <string.h>

#include "nn/cuda/px_cuda_ops_int.h"
#include "prunex/ops_internal.h"

typedef struct px__cuda_conv2d {
  px__ops_head_t head; /* first, the contract second: the dispatcher reads both */
  px__wlayer_t wl;     /* x [N, C_in, H, W], y [N, C_out, OH, OW],
                          w [C_out, C_in / groups, KH, KW], b [C_out] */
  px__cuda_ops_t *ops;
  px_conv2d_params_t p;
  int tf32;
  int nhwc;            /* channels-last input and output: KRSC weight copies */
  int bf16;            /* bf16 activations (and weight copies) */
  size_t w_numel;      /* C_out * C_in / groups * KH * KW */
  cudnnTensorDescriptor_t x_desc, y_desc, b_desc; /* b_desc: [1, C_out, 1, 1] */
  cudnnFilterDescriptor_t w_desc;
  cudnnConvolutionDescriptor_t fwd_desc, bwd_data_desc, bwd_filter_desc;
  cudnnConvolutionFwdAlgo_t fwd_algo;
  cudnnConvolutionBwdDataAlgo_t bwd_data_algo;
  cudnnConvolutionBwdFilterAlgo_t bwd_filter_algo;
  size_t fwd_ws, bwd_data_ws, bwd_filter_ws; /* workspace bytes of each algorithm */
  int fwd_math, bwd_data_math, bwd_filter_math; /* cudnnMathType_t of each */
  int graph;           /* PX_CUDNN_API=graph: gcall runs the three directions */
  px__conv_graph_call_t gcall[PX__CONV_DIRS]; /* forward, backward data, backward filter */
} px__cuda_conv2d_t;
static_assert(offsetof(px__cuda_conv2d_t, wl) == offsetof(px__wlayer_op_t, wl),
              "the dispatcher reads the contract at px__wlayer_op_t's offset");

static px__cuda_conv2d_t *px__op(px_conv2d_t *op) { return (px__cuda_conv2d_t *)op; }

extern "C" void px__cuda_conv2d_destroy(px_conv2d_t *o) {
  px__cuda_conv2d_t *op = px__op(o);
  if (!op) return;
  if (op->x_desc) cudnnDestroyTensorDescriptor(op->x_desc);
  if (op->y_desc) cudnnDestroyTensorDescriptor(op->y_desc);
  if (op->b_desc) cudnnDestroyTensorDescriptor(op->b_desc);
  if (op->w_desc) cudnnDestroyFilterDescriptor(op->w_desc);
  if (op->fwd_desc) cudnnDestroyConvolutionDescriptor(op->fwd_desc);
  if (op->bwd_data_desc) cudnnDestroyConvolutionDescriptor(op->bwd_data_desc);
  if (op->bwd_filter_desc) cudnnDestroyConvolutionDescriptor(op->bwd_filter_desc);
  px__cuda_conv_graph_release(op->gcall);
  px__cuda_op_free(op->ops, op);
}

/* Math type to run a heuristics candidate with, or -1 to skip it: never
 * the FP16-converting kind; with TF32 the suggested one; without, only
 * candidates not tied to tensor cores, run with CUDNN_FMA_MATH. */
static int px__math_for(int tf32, int bf16, cudnnMathType_t suggested) {
  if (suggested == CUDNN_TENSOR_OP_MATH_ALLOW_CONVERSION) return -1;
  if (tf32 || bf16) return (int)suggested;
  return suggested == CUDNN_TENSOR_OP_MATH ? -1 : (int)CUDNN_FMA_MATH;
}

static px_status_t px__conv_desc(cudnnConvolutionDescriptor_t *d, const px_conv2d_params_t *p,
                                 int tf32, int bf16) {
  PX_CUDNN(cudnnCreateConvolutionDescriptor(d));
  /* f32 accumulation also for bf16 data */
  PX_CUDNN(cudnnSetConvolution2dDescriptor(*d, p->pad_h, p->pad_w, p->stride_h, p->stride_w, 1, 1,
                                           CUDNN_CROSS_CORRELATION, CUDNN_DATA_FLOAT));
  /* a grouped (depthwise) convolution: cuDNN's filter is [C_out, C_in / groups, KH, KW] */
  if (p->groups > 1) PX_CUDNN(cudnnSetConvolutionGroupCount(*d, p->groups));
  PX_CUDNN(cudnnSetConvolutionMathType(*d, bf16   ? CUDNN_TENSOR_OP_MATH
                                           : tf32 ? CUDNN_DEFAULT_MATH
                                                  : CUDNN_FMA_MATH));
  return PX_OK;
}

/* ---- timed algorithms, remembered by shape ------------------------------------------- */

typedef struct px__conv_algo_cache {
  int64_t key[15];
  int fwd, bwd_data, bwd_filter;          /* algorithms */
  int fwd_m, bwd_data_m, bwd_filter_m;    /* their math types */
  size_t fwd_ws, bwd_data_ws, bwd_filter_ws;
  struct px__conv_algo_cache *next;
} px__conv_algo_cache_t;

static void px__algo_key(const px__cuda_conv2d_t *op, int64_t *key) {
  const px_conv2d_params_t *p = &op->p;
  const int64_t *x = op->wl.x_spec.dims;
  const int64_t k[15] = {x[0], x[1], x[2], x[3], p->c_out, p->kh, p->kw, p->stride_h, p->stride_w,
                         p->pad_h, p->pad_w, op->nhwc, op->bf16, op->tf32,
                         p->groups > 1 ? p->groups : 1};
  memcpy(key, k, sizeof k);
}

void px__cuda_conv_algo_cache_free(px__cuda_ops_t *ops) {
  while (ops->algos) {
    px__conv_algo_cache_t *c = ops->algos;
    ops->algos = c->next;
    px_free(c);
  }
}

/* The first candidate of perf[0..n) (cuDNN's order: fastest first) that can
 * run here: found, deterministic when the context asks for it, with a math
 * type px__math_for allows, which desc accepts,
 * and a workspace (ws_size(algo, &bytes)) within the context's limit. Sets
 * *algo, *math and *ws and returns 1; 0 when there is none. One search for
 * the forward, backward-data and backward-filter algorithms. */
template <typename Perf, typename Algo, typename WsSize>
static int px__pick_usable(const px__cuda_conv2d_t *op, cudnnConvolutionDescriptor_t desc,
                           const char *dir, const Perf *perf, int n, WsSize ws_size, Algo *algo,
                           int *math, size_t *ws) {
  /* PX_LOG_LEVEL=debug: every candidate and why it was passed over (which
   * algorithm a layer runs decides most of a step's time) */
  const int say = px_log_get_level() >= PX_LOG_DEBUG;
  const int64_t *x = op->wl.x_spec.dims;
  for (int i = 0; i < n; i++) {
    int m = px__math_for(op->tf32, op->bf16, perf[i].mathType);
    size_t bytes = 0;
    const char *why = NULL;
    if (perf[i].status != CUDNN_STATUS_SUCCESS) why = "failed in the search";
    else if (m < 0) why = "math type not allowed";
    else if (op->ops->deterministic && perf[i].determinism != CUDNN_DETERMINISTIC)
      why = "not deterministic";
    else if (cudnnSetConvolutionMathType(desc, (cudnnMathType_t)m) != CUDNN_STATUS_SUCCESS)
      why = "math type refused";
    else if (ws_size(perf[i].algo, &bytes) != CUDNN_STATUS_SUCCESS) why = "no workspace size";
    else if (bytes > op->ops->ws_algo_limit) why = "workspace over the limit";
    if (say)
      px_log(PX_LOG_DEBUG,
             "conv %s [%lld %lld %lld %lld] -> %d k%dx%d s%d: algo %d math %d %.3f ms ws %zu "
             "det %d: %s",
             dir, (long long)x[0], (long long)x[1], (long long)x[2], (long long)x[3], op->p.c_out,
             op->p.kh, op->p.kw, op->p.stride_h, (int)perf[i].algo, (int)perf[i].mathType,
             (double)perf[i].time, (size_t)perf[i].memory, (int)perf[i].determinism,
             why ? why : "chosen");
    if (why) continue;
    *algo = perf[i].algo;
    *math = m;
    *ws = bytes;
    return 1;
  }
  return 0;
}

/* A timed ranking of the candidates: cudnnFind run ops->find_runs times
 * (PX_CUDNN_FIND_RUNS, default 2), each (algorithm, math type) keeping its
 * least time over the runs, then sorted by it (successes first, stable).
 * One search is not enough: CUDA loads a kernel's module at its first launch
 * (lazy loading), so a single search charges that load to whichever kernel a
 * process has not run yet. On an H200 that made cuDNN's algorithm-0 kernels,
 * loaded by the first shapes, beat the tensor-core kernels of later shapes
 * and run 31 of resnet50's 46 ms per bf16 step (docs/performance.md). */
template <typename Perf>
static int px__perf_after(const Perf &a, const Perf &b) {
  const int aok = a.status == CUDNN_STATUS_SUCCESS, bok = b.status == CUDNN_STATUS_SUCCESS;
  return aok != bok ? bok : aok && a.time > b.time;
}

template <typename Perf, int N, typename Find>
static px_status_t px__find_ranked(int runs, Find find, Perf (&perf)[N], int *n) {
  PX_CUDNN(find(N, n, perf));
  for (int r = 1; r < runs; r++) {
    Perf again[N];
    int m = 0;
    PX_CUDNN(find(N, &m, again));
    for (int j = 0; j < m; j++)
      for (int i = 0; i < *n; i++) {
        if (perf[i].algo != again[j].algo || perf[i].mathType != again[j].mathType) continue;
        if (again[j].status == CUDNN_STATUS_SUCCESS &&
            (perf[i].status != CUDNN_STATUS_SUCCESS || again[j].time < perf[i].time))
          perf[i] = again[j];
        break;
      }
  }
  for (int i = 1; i < *n; i++) {
    Perf key = perf[i];
    int j = i - 1;
    for (; j >= 0 && px__perf_after(perf[j], key); j--) perf[j + 1] = perf[j];
    perf[j + 1] = key;
  }
  return PX_OK;
}

static px_status_t px__pick_fwd(px__cuda_conv2d_t *op) {
  cudnnHandle_t h = op->ops->cudnn;
  /* both math types of every algorithm */
  cudnnConvolutionFwdAlgoPerf_t perf[2 * CUDNN_CONVOLUTION_FWD_ALGO_COUNT];
  int n = 0;
  if (op->ops->benchmark) {
    auto find = [&](int cap, int *got, cudnnConvolutionFwdAlgoPerf_t *out) {
      return cudnnFindConvolutionForwardAlgorithm(h, op->x_desc, op->w_desc, op->fwd_desc,
                                                  op->y_desc, cap, got, out);
    };
    PX_CHECK(px__find_ranked(op->ops->find_runs, find, perf, &n));
  } else
    PX_CUDNN(cudnnGetConvolutionForwardAlgorithm_v7(
        h, op->x_desc, op->w_desc, op->fwd_desc, op->y_desc,
        2 * CUDNN_CONVOLUTION_FWD_ALGO_COUNT, &n, perf));
  auto ws_size = [&](cudnnConvolutionFwdAlgo_t a, size_t *ws) {
    return cudnnGetConvolutionForwardWorkspaceSize(h, op->x_desc, op->w_desc, op->fwd_desc,
                                                   op->y_desc, a, ws);
  };
  if (px__pick_usable(op, op->fwd_desc, "forward", perf, n, ws_size, &op->fwd_algo,
                      &op->fwd_math, &op->fwd_ws))
    return PX_OK;
  return px_set_error(PX_ERR_BACKEND, "cuDNN offers no usable forward algorithm for this convolution");
}

static px_status_t px__pick_bwd_data(px__cuda_conv2d_t *op) {
  cudnnHandle_t h = op->ops->cudnn;
  cudnnConvolutionBwdDataAlgoPerf_t perf[2 * CUDNN_CONVOLUTION_BWD_DATA_ALGO_COUNT];
  int n = 0;
  if (op->ops->benchmark) {
    auto find = [&](int cap, int *got, cudnnConvolutionBwdDataAlgoPerf_t *out) {
      return cudnnFindConvolutionBackwardDataAlgorithm(h, op->w_desc, op->y_desc,
                                                       op->bwd_data_desc, op->x_desc, cap, got,
                                                       out);
    };
    PX_CHECK(px__find_ranked(op->ops->find_runs, find, perf, &n));
  } else
    PX_CUDNN(cudnnGetConvolutionBackwardDataAlgorithm_v7(
        h, op->w_desc, op->y_desc, op->bwd_data_desc, op->x_desc,
        2 * CUDNN_CONVOLUTION_BWD_DATA_ALGO_COUNT, &n, perf));
  auto ws_size = [&](cudnnConvolutionBwdDataAlgo_t a, size_t *ws) {
    return cudnnGetConvolutionBackwardDataWorkspaceSize(h, op->w_desc, op->y_desc,
                                                        op->bwd_data_desc, op->x_desc, a, ws);
  };
  if (px__pick_usable(op, op->bwd_data_desc, "backward-data", perf, n, ws_size,
                      &op->bwd_data_algo, &op->bwd_data_math, &op->bwd_data_ws))
    return PX_OK;
  return px_set_error(PX_ERR_BACKEND,
                      "cuDNN offers no usable backward-data algorithm for this convolution");
}

static px_status_t px__pick_bwd_filter(px__cuda_conv2d_t *op) {
  cudnnHandle_t h = op->ops->cudnn;
  cudnnConvolutionBwdFilterAlgoPerf_t perf[2 * CUDNN_CONVOLUTION_BWD_FILTER_ALGO_COUNT];
  int n = 0;
  if (op->ops->benchmark) {
    auto find = [&](int cap, int *got, cudnnConvolutionBwdFilterAlgoPerf_t *out) {
      return cudnnFindConvolutionBackwardFilterAlgorithm(h, op->x_desc, op->y_desc,
                                                         op->bwd_filter_desc, op->w_desc, cap, got,
                                                         out);
    };
    PX_CHECK(px__find_ranked(op->ops->find_runs, find, perf, &n));
  } else
    PX_CUDNN(cudnnGetConvolutionBackwardFilterAlgorithm_v7(
        h, op->x_desc, op->y_desc, op->bwd_filter_desc, op->w_desc,
        2 * CUDNN_CONVOLUTION_BWD_FILTER_ALGO_COUNT, &n, perf));
  auto ws_size = [&](cudnnConvolutionBwdFilterAlgo_t a, size_t *ws) {
    return cudnnGetConvolutionBackwardFilterWorkspaceSize(h, op->x_desc, op->y_desc,
                                                          op->bwd_filter_desc, op->w_desc, a, ws);
  };
  if (px__pick_usable(op, op->bwd_filter_desc, "backward-filter", perf, n, ws_size,
                      &op->bwd_filter_algo, &op->bwd_filter_math, &op->bwd_filter_ws))
    return PX_OK;
  return px_set_error(PX_ERR_BACKEND,
                      "cuDNN offers no usable backward-filter algorithm for this convolution");
}

static int64_t px__out_dim(int64_t in, int32_t k, int32_t s, int32_t pad) {
  int64_t span = in + 2 * (int64_t)pad - k;
  return span < 0 ? 0 : span / s + 1;
}

/* The three algorithms: from the context's cache for a shape timed before,
 * else picked (and, when timed, remembered). */
static px_status_t px__pick_all(px__cuda_conv2d_t *op) {
  px__cuda_ops_t *ops = op->ops;
  int64_t key[15];
  px__algo_key(op, key);
  if (ops->benchmark)
    for (px__conv_algo_cache_t *c = ops->algos; c; c = c->next) {
      if (memcmp(c->key, key, sizeof key)) continue;
      op->fwd_algo = (cudnnConvolutionFwdAlgo_t)c->fwd;
      op->bwd_data_algo = (cudnnConvolutionBwdDataAlgo_t)c->bwd_data;
      op->bwd_filter_algo = (cudnnConvolutionBwdFilterAlgo_t)c->bwd_filter;
      op->fwd_ws = c->fwd_ws;
      op->bwd_data_ws = c->bwd_data_ws;
      op->bwd_filter_ws = c->bwd_filter_ws;
      PX_CUDNN(cudnnSetConvolutionMathType(op->fwd_desc, (cudnnMathType_t)c->fwd_m));
      PX_CUDNN(cudnnSetConvolutionMathType(op->bwd_data_desc, (cudnnMathType_t)c->bwd_data_m));
      PX_CUDNN(cudnnSetConvolutionMathType(op->bwd_filter_desc, (cudnnMathType_t)c->bwd_filter_m));
      return PX_OK;
    }
  PX_CHECK(px__pick_fwd(op));
  PX_CHECK(px__pick_bwd_data(op));
  PX_CHECK(px__pick_bwd_filter(op));
  if (!ops->benchmark) return PX_OK;
  px__conv_algo_cache_t *c = (px__conv_algo_cache_t *)px_calloc(1, sizeof *c, "conv algorithms");
  if (!c) return PX_ERR_NOMEM;
  memcpy(c->key, key, sizeof key);
  c->fwd = (int)op->fwd_algo;
  c->bwd_data = (int)op->bwd_data_algo;
  c->bwd_filter = (int)op->bwd_filter_algo;
  c->fwd_m = op->fwd_math;
  c->bwd_data_m = op->bwd_data_math;
  c->bwd_filter_m = op->bwd_filter_math;
  c->fwd_ws = op->fwd_ws;
  c->bwd_data_ws = op->bwd_data_ws;
  c->bwd_filter_ws = op->bwd_filter_ws;
  c->next = ops->algos;
  ops->algos = c;
  return PX_OK;
}

/* The graph-API plans of the three directions (cuda_conv_graph.cu), for
 * the tensors the legacy descriptors describe. */
static px_status_t px__plan_graph(px__cuda_conv2d_t *op) {
  const px_tensor_t *x = &op->wl.x_spec, *y = &op->wl.y_spec, *w = &op->wl.w_spec;
  px__conv_shape_t s;
  memset(&s, 0, sizeof s);
  memcpy(s.x, x->dims, sizeof s.x);
  memcpy(s.w, w->dims, sizeof s.w);
  memcpy(s.y, y->dims, sizeof s.y);
  s.stride[0] = op->p.stride_h;
  s.stride[1] = op->p.stride_w;
  s.pad[0] = op->p.pad_h;
  s.pad[1] = op->p.pad_w;
  s.nhwc = op->nhwc;
  s.bf16 = op->bf16;
  s.tf32 = op->tf32;
  PX_CHECK(px__cuda_conv_graph_plan(op->ops, &s, op->gcall));
  op->graph = 1;
  op->fwd_ws = op->gcall[PX__CONV_FWD].ws;
  op->bwd_data_ws = op->gcall[PX__CONV_BWD_DATA].ws;
  op->bwd_filter_ws = op->gcall[PX__CONV_BWD_FILTER].ws;
  return PX_OK;
}

/* The three directions planned on the context's API, and the shared
 * workspace and weight-copy buffer grown for them. */
static px_status_t px__plan_and_reserve(px__cuda_conv2d_t *op) {
  px__cuda_ops_t *ops = op->ops;
  px_status_t st = ops->graph_api ? px__plan_graph(op) : px__pick_all(op);
  if (st == PX_ERR_BACKEND && ops->graph_api) {
    /* no usable graph-API engine for this shape: the legacy API for it */
    const px_tensor_t *x = &op->wl.x_spec;
    px_log(PX_LOG_WARN,
           "conv %lldx%lldx%lldx%lld -> %d, kernel %dx%d, stride %d: %s; this convolution runs on "
           "cuDNN's legacy API",
           (long long)x->dims[0], (long long)x->dims[1], (long long)x->dims[2],
           (long long)x->dims[3], op->p.c_out, op->p.kh, op->p.kw, op->p.stride_h, px_last_error());
    st = px__pick_all(op);
  }
  PX_CHECK(st);
  size_t need = op->fwd_ws;
  if (op->bwd_data_ws > need) need = op->bwd_data_ws;
  if (op->bwd_filter_ws > need) need = op->bwd_filter_ws;
  PX_CHECK(px__cuda_reserve_ws(ops, need));
  /* KRSC copies: the weights and, behind them, their gradient */
  if (op->nhwc)
    PX_CHECK(px__cuda_reserve_wt(ops, 2 * op->w_numel * px_dtype_size(op->wl.x_spec.dtype) + 256));
  return PX_OK;
}

extern "C" px_status_t px__cuda_conv2d_create(px_ops_t *o, const px_tensor_t *x_spec,
                                              const px_conv2d_params_t *p, px_conv2d_t **out) {
  px__cuda_ops_t *ops = px__cuda_ctx(o);
  PX_REQUIRE(out && p, "px_conv2d_create: NULL argument");
  *out = NULL;
  PX_CHECK(px__cuda_check_act(ops, x_spec, 4, 4, "px_conv2d_create"));
  PX_REQUIRE(p->c_out > 0 && p->kh > 0 && p->kw > 0 && p->stride_h > 0 && p->stride_w > 0 &&
                 p->pad_h >= 0 && p->pad_w >= 0,
             "px_conv2d_create: bad parameters (c_out %d, kernel %dx%d, stride %dx%d, pad %dx%d)",
             p->c_out, p->kh, p->kw, p->stride_h, p->stride_w, p->pad_h, p->pad_w);
  /* not yet on CUDA: the legacy descriptors take symmetric padding only; the CPU
     engine runs these windows */
  PX_REQUIRE(!p->pad_h_extra && !p->pad_w_extra && p->dil_h <= 1 && p->dil_w <= 1,
             "px_conv2d_create: asymmetric padding (%+d, %+d at the end) or dilation (%dx%d) is "
             "not supported on the CUDA engine yet", p->pad_h_extra, p->pad_w_extra, p->dil_h,
             p->dil_w);
  const int64_t g = p->groups > 1 ? p->groups : 1;
  PX_REQUIRE(p->groups >= 0 && x_spec->dims[1] % g == 0 && p->c_out % g == 0,
             "px_conv2d_create: %lld input and %d output channels in %lld groups",
             (long long)x_spec->dims[1], p->c_out, (long long)g);
  /* c_in: the input channels each filter reads (all of them unless grouped) */
  const int64_t n = x_spec->dims[0], c_in = x_spec->dims[1] / g;
  const int64_t oh = px__out_dim(x_spec->dims[2], p->kh, p->stride_h, p->pad_h);
  const int64_t ow = px__out_dim(x_spec->dims[3], p->kw, p->stride_w, p->pad_w);
  PX_REQUIRE(oh > 0 && ow > 0, "px_conv2d_create: kernel larger than the padded input");
  PX_CHECK(px__cuda_enter(ops));

  px_status_t st = PX_OK;
  px__cuda_conv2d_t *op = (px__cuda_conv2d_t *)px__cuda_op_new(ops, sizeof *op, "cuda conv2d");
  if (!op) return PX_ERR_NOMEM;
  op->ops = ops;
  op->p = *p;
  op->tf32 = ops->tf32;
  op->nhwc = px__cuda_nhwc(x_spec);
  op->bf16 = x_spec->dtype == PX_DTYPE_BF16;
  op->w_numel = (size_t)p->c_out * (size_t)c_in * (size_t)p->kh * (size_t)p->kw;
  px__wlayer_init(&op->wl, "conv2d", "conv", p->bias, x_spec);
  {
    const int64_t yd[4] = {n, p->c_out, oh, ow}, wd[4] = {p->c_out, c_in, p->kh, p->kw};
    const int64_t bd[1] = {p->c_out};
    PX_CHECK_GOTO(px__cuda_spec_like(ops, x_spec, yd, &op->wl.y_spec), st, fail);
    PX_CHECK_GOTO(px__cuda_spec(ops, PX_DTYPE_F32, 4, wd, &op->wl.w_spec), st, fail);
    PX_CHECK_GOTO(px__cuda_spec(ops, PX_DTYPE_F32, 1, bd, &op->wl.b_spec), st, fail);
  }
  PX_CUDNN_GOTO(cudnnCreateTensorDescriptor(&op->x_desc), st, fail);
  PX_CUDNN_GOTO(cudnnCreateTensorDescriptor(&op->y_desc), st, fail);
  PX_CUDNN_GOTO(cudnnCreateTensorDescriptor(&op->b_desc), st, fail);
  PX_CUDNN_GOTO(cudnnCreateFilterDescriptor(&op->w_desc), st, fail);
  PX_CHECK_GOTO(px__cuda_act_desc(op->x_desc, &op->wl.x_spec), st, fail);
  PX_CHECK_GOTO(px__cuda_act_desc(op->y_desc, &op->wl.y_spec), st, fail);
  PX_CHECK_GOTO(px__cuda_tensor_desc(op->b_desc, 1, p->c_out, 1, 1), st, fail);
  PX_CUDNN_GOTO(cudnnSetFilter4dDescriptor(op->w_desc, px__cudnn_dtype(x_spec),
                                           op->nhwc ? CUDNN_TENSOR_NHWC : CUDNN_TENSOR_NCHW,
                                           p->c_out, (int)c_in, p->kh, p->kw),
                st, fail);
  PX_CHECK_GOTO(px__conv_desc(&op->fwd_desc, p, op->tf32, op->bf16), st, fail);
  PX_CHECK_GOTO(px__conv_desc(&op->bwd_data_desc, p, op->tf32, op->bf16), st, fail);
  PX_CHECK_GOTO(px__conv_desc(&op->bwd_filter_desc, p, op->tf32, op->bf16), st, fail);
  {
    /* cuDNN must agree on the output shape (floor, as ops.h says) */
    int cn, cc, ch, cw;
    PX_CUDNN_GOTO(cudnnGetConvolution2dForwardOutputDim(op->fwd_desc, op->x_desc, op->w_desc, &cn,
                                                        &cc, &ch, &cw),
                  st, fail);
    if (cn != n || cc != p->c_out || ch != oh || cw != ow) {
      st = px_set_error(PX_ERR_INTERNAL, "cuDNN computes a %dx%d output, expected %lldx%lld", ch, cw,
                        (long long)oh, (long long)ow);
      goto fail;
    }
  }
  PX_CHECK_GOTO(px__plan_and_reserve(op), st, fail);
  *out = (px_conv2d_t *)op;
  return PX_OK;
fail:
  px__cuda_conv2d_destroy((px_conv2d_t *)op);
  return st;
}

/* ---- the one conversion point of the weights --------------------------------------- */

/* out[k][rs][c] = w[k][c][rs]: f32 OIHW to KRSC in T. */
template <typename T>
__global__ static void px__w_to_krsc(T *__restrict__ out, const float *__restrict__ w, int64_t k,
                                     int64_t c, int64_t rs) {
  const int64_t total = k * c * rs;
  for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < total;
       i += (int64_t)gridDim.x * blockDim.x) {
    const int64_t ci = i % c, r = (i / c) % rs, ko = i / (c * rs);
    px__st(out + i, w[(ko * c + ci) * rs + r]);
  }
}

/* dw[k][c][rs] = in[k][rs][c]: KRSC in T back to f32 OIHW. */
template <typename T>
__global__ static void px__w_from_krsc(float *__restrict__ dw, const T *__restrict__ in, int64_t k,
                                       int64_t c, int64_t rs) {
  const int64_t total = k * c * rs;
  for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < total;
       i += (int64_t)gridDim.x * blockDim.x) {
    const int64_t r = i % rs, ci = (i / rs) % c, ko = i / (c * rs);
    dw[i] = px__ld(in + (ko * rs + r) * c + ci);
  }
}

/* The weights cuDNN reads: w itself (NCHW) or its KRSC copy. */
static px_status_t px__weights_in(px__cuda_conv2d_t *op, const px_tensor_t *w, const void **out) {
  *out = w->data;
  if (!op->nhwc) return PX_OK;
  px__cuda_ops_t *ops = op->ops;
  const int64_t k = op->wl.w_spec.dims[0], c = op->wl.w_spec.dims[1];
  const int64_t rs = op->wl.w_spec.dims[2] * op->wl.w_spec.dims[3];
  const unsigned blocks = px__cuda_blocks(op->w_numel);
  if (op->bf16)
    px__w_to_krsc<<<blocks, PX__CUDA_THREADS, 0, ops->stream>>>(
        (__nv_bfloat16 *)ops->wt, (const float *)w->data, k, c, rs);
  else
    px__w_to_krsc<<<blocks, PX__CUDA_THREADS, 0, ops->stream>>>((float *)ops->wt,
                                                               (const float *)w->data, k, c, rs);
  PX_CUDA_LAUNCHED("conv weights to KRSC");
  *out = ops->wt;
  return PX_OK;
}

/* Where cuDNN writes the weight gradient: dw itself, or behind the KRSC copy. */
static void *px__dw_out(px__cuda_conv2d_t *op, px_tensor_t *dw) {
  if (!op->nhwc) return dw->data;
  const size_t es = op->bf16 ? 2 : 4;
  const size_t off = (op->w_numel * es + 255) / 256 * 256;
  return (char *)op->ops->wt + off;
}

static px_status_t px__dw_back(px__cuda_conv2d_t *op, px_tensor_t *dw, const void *krsc) {
  if (!op->nhwc) return PX_OK;
  const int64_t k = op->wl.w_spec.dims[0], c = op->wl.w_spec.dims[1];
  const int64_t rs = op->wl.w_spec.dims[2] * op->wl.w_spec.dims[3];
  const unsigned blocks = px__cuda_blocks(op->w_numel);
  cudaStream_t s = op->ops->stream;
  if (op->bf16)
    px__w_from_krsc<<<blocks, PX__CUDA_THREADS, 0, s>>>((float *)dw->data,
                                                       (const __nv_bfloat16 *)krsc, k, c, rs);
  else
    px__w_from_krsc<<<blocks, PX__CUDA_THREADS, 0, s>>>((float *)dw->data, (const float *)krsc, k,
                                                       c, rs);
  PX_CUDA_LAUNCHED("conv weight gradient from KRSC");
  return PX_OK;
}

/* The bias on bf16 activations (channels-last; cudnnAddTensor and
 * cudnnConvolutionBackwardBias take no f32 bias beside bf16 data: an
 * imported ConvNeXt's 1 x 1 convolutions). Forward: y += b[channel], in f32
 * and rounded once. */
__global__ static void px__bias_add_bf16(__nv_bfloat16 *y, const float *__restrict__ b, int64_t n,
                                         int64_t c) {
  for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < n;
       i += (int64_t)gridDim.x * blockDim.x)
    y[i] = __float2bfloat16(__bfloat162float(y[i]) + b[i % c]);
}

enum { PX__BIAS_SUM_THREADS = 256 };

/* db[ch] = the sum of dy over every pixel: block ch sums fixed strided
 * slices of the pixels, then a fixed tree (as LayerNorm's shift gradient:
 * the same sums in the same order every run, no atomics). */
__global__ static void px__bias_grad_bf16(float *db, const __nv_bfloat16 *__restrict__ dy,
                                          int64_t npix, int64_t c) {
  __shared__ float part[PX__BIAS_SUM_THREADS];
  const int64_t ch = blockIdx.x;
  float s = 0.0f;
  for (int64_t q = threadIdx.x; q < npix; q += PX__BIAS_SUM_THREADS)
    s += __bfloat162float(dy[q * c + ch]);
  part[threadIdx.x] = s;
  __syncthreads();
  for (int w = PX__BIAS_SUM_THREADS / 2; w > 0; w /= 2) {
    if (threadIdx.x < w) part[threadIdx.x] += part[threadIdx.x + w];
    __syncthreads();
  }
  if (threadIdx.x == 0) db[ch] = part[0];
}

extern "C" px_status_t px__cuda_conv2d_forward(px_conv2d_t *o, px_tensor_t *y, const px_tensor_t *x,
                                               const px_tensor_t *w, const px_tensor_t *b) {
  px__cuda_conv2d_t *op = px__op(o);
  PX_CHECK(px__wlayer_check_forward(&op->wl, y, x, w, b));
  px__cuda_ops_t *ops = op->ops;
  const float one = 1.0f, zero = 0.0f;
  const void *wd;
  PX_CHECK(px__cuda_enter(ops));
  PX_CHECK(px__weights_in(op, w, &wd));
  if (op->graph)
    PX_CHECK(px__cuda_conv_graph_run(ops, &op->gcall[PX__CONV_FWD], x->data, wd, y->data));
  else
    PX_CUDNN(cudnnConvolutionForward(ops->cudnn, &one, op->x_desc, x->data, op->w_desc, wd,
                                     op->fwd_desc, op->fwd_algo, ops->ws, op->fwd_ws, &zero,
                                     op->y_desc, y->data));
  if (b && op->bf16) {
    const int64_t n = (int64_t)px_tensor_numel(y);
    px__bias_add_bf16<<<px__cuda_blocks((size_t)n), PX__CUDA_THREADS, 0, ops->stream>>>(
        (__nv_bfloat16 *)y->data, (const float *)b->data, n, op->wl.w_spec.dims[0]);
    PX_CUDA_LAUNCHED("conv bias (bf16)");
  } else if (b) {
    PX_CUDNN(cudnnAddTensor(ops->cudnn, &one, op->b_desc, b->data, &one, op->y_desc, y->data));
  }
  return PX_OK;
}

extern "C" px_status_t px__cuda_conv2d_backward_data(px_conv2d_t *o, px_tensor_t *dx,
                                                     const px_tensor_t *dy, const px_tensor_t *w) {
  px__cuda_conv2d_t *op = px__op(o);
  PX_CHECK(px__wlayer_check_backward_data(&op->wl, dx, dy, w));
  px__cuda_ops_t *ops = op->ops;
  const float one = 1.0f, zero = 0.0f;
  const void *wd;
  PX_CHECK(px__cuda_enter(ops));
  PX_CHECK(px__weights_in(op, w, &wd));
  if (op->graph)
    PX_CHECK(px__cuda_conv_graph_run(ops, &op->gcall[PX__CONV_BWD_DATA], dx->data, wd, dy->data));
  else
    PX_CUDNN(cudnnConvolutionBackwardData(ops->cudnn, &one, op->w_desc, wd, op->y_desc, dy->data,
                                          op->bwd_data_desc, op->bwd_data_algo, ops->ws,
                                          op->bwd_data_ws, &zero, op->x_desc, dx->data));
  return PX_OK;
}

extern "C" px_status_t px__cuda_conv2d_backward_weights(px_conv2d_t *o, px_tensor_t *dw,
                                                        px_tensor_t *db, const px_tensor_t *x,
                                                        const px_tensor_t *dy) {
  px__cuda_conv2d_t *op = px__op(o);
  PX_CHECK(px__wlayer_check_backward_weights(&op->wl, dw, db, x, dy));
  px__cuda_ops_t *ops = op->ops;
  const float one = 1.0f, zero = 0.0f;
  void *dwd = px__dw_out(op, dw);
  PX_CHECK(px__cuda_enter(ops));
  if (op->graph)
    PX_CHECK(px__cuda_conv_graph_run(ops, &op->gcall[PX__CONV_BWD_FILTER], x->data, dwd, dy->data));
  else
    PX_CUDNN(cudnnConvolutionBackwardFilter(ops->cudnn, &one, op->x_desc, x->data, op->y_desc,
                                            dy->data, op->bwd_filter_desc, op->bwd_filter_algo,
                                            ops->ws, op->bwd_filter_ws, &zero, op->w_desc, dwd));
  PX_CHECK(px__dw_back(op, dw, dwd));
  if (db && op->bf16) {
    const int64_t c = op->wl.w_spec.dims[0];
    px__bias_grad_bf16<<<(unsigned)c, PX__BIAS_SUM_THREADS, 0, ops->stream>>>(
        (float *)db->data, (const __nv_bfloat16 *)dy->data, (int64_t)px_tensor_numel(dy) / c, c);
    PX_CUDA_LAUNCHED("conv bias gradient (bf16)");
  } else if (db) {
    PX_CUDNN(cudnnConvolutionBackwardBias(ops->cudnn, &one, op->y_desc, dy->data, &zero, op->b_desc,
                                          db->data));
  }
  return PX_OK;
}
