/* PruneX operation backend: the layer operations the training engine is
 * built from (conv, batch norm, ReLU, pooling, fully connected, residual add,
 * softmax cross-entropy), forward and backward, on one device.
 *
 * Two kinds of object:
 *  - px_ops_t: the backend for one device (on the CPU: one oneDNN engine and
 *    stream, the thread count, one shared scratchpad sized to the largest
 *    primitive, and the layout objects tensors point to). Everything created
 *    from it runs on its engine and stream. Use it from one thread at a time.
 *  - per-layer op objects (px_conv2d_t, px_batchnorm_t, ...) created once for
 *    one input spec (shape + layout). Creation picks the implementation and
 *    the layouts, creates and caches every primitive and allocates the
 *    internal buffers it needs (e.g. blocked copies of weights); the forward
 *    and backward calls then allocate nothing and can run every step.
 *
 * Layouts. An op is created from the spec of its input tensor (a px_tensor_t
 * without storage, or a real tensor: only its shape and layout are read) and
 * reports the spec of its output (px_*_y_spec). The backend picks blocked
 * layouts for activations (on AVX-512 CPUs aBcd16b, i.e. nChw16c); chaining ops through
 * these specs keeps activations blocked from layer to layer with no
 * conversion. A gradient has exactly the spec of the activation it belongs
 * to (dx like x, dy like y). Parameters (weights, biases, BN scale/shift,
 * running statistics) are always plain f32 in the caller's tensors, so that
 * the optimiser, pruning and collectives see ordinary row-major arrays; the
 * backend converts weights to its preferred layout internally on each call.
 *
 * Calls. Layer functions take the op, then outputs, then inputs, then
 * weights. Every tensor argument is checked against the op's specs (device,
 * dtype, dims, layout) and a mismatch fails with PX_ERR_INVALID. Gradients
 * are overwritten, not accumulated (use px_add_forward to sum two branches).
 * On the CPU each call has finished when it returns; px_ops_sync exists for
 * backends that run asynchronously.
 *
 * Nothing in this header depends on oneDNN: the CUDA backend (cuDNN for
 * convolution and batch norm, cuBLAS for FC, our own kernels for the rest)
 * implements the same functions for px_ops_create(px_device_cuda(i), ...).
 * On CUDA weights, gradients and statistics are plain (layout NULL) device
 * memory; activations may be channels-last (the layout px_ops_act_format
 * gives, NHWC, in f32 or bf16), and the ops take whichever they are built
 * for. The calls are
 * queued on the context's one stream and return before the work is done
 * (px_softmax_ce, which returns host values, and px_ops_sync wait for it);
 * a tensor written by a call may be read by the next call on the same
 * context, or by px_tensor_copy_to_host, without further synchronisation.
 * Convolutions and FC layers on CUDA may use TF32 tensor cores unless
 * px_ops_set_tf32(ops, 0) forbids it. */
#ifndef PRUNEX_OPS_H
#define PRUNEX_OPS_H

#include <stddef.h>
#include <stdint.h>

#include "prunex/px.h"
#include "prunex/tensor.h"

#ifdef __cplusplus
extern "C" {
#endif

/* ---- backend context ----------------------------------------------------- */

typedef struct px_ops px_ops_t;

/* Creates the backend for dev. nthreads is the number of CPU threads the
 * ops use (<= 0: the runtime default, OMP_NUM_THREADS or all cores); it is
 * applied to the calling thread before each call (the GPU ignores it).
 * Caller owns *out (free with px_ops_destroy). Fails with PX_ERR_NOT_BUILT
 * for a device whose backend is not compiled in, PX_ERR_NO_DEVICE for a GPU
 * that is not there, PX_ERR_BACKEND, PX_ERR_NOMEM. */
PX_API px_status_t px_ops_create(px_device_t dev, int nthreads, px_ops_t **out);

/* Destroys the context. Every op object created from it must have been
 * destroyed first; layouts it owns (and so tensor layout pointers) dangle. */
PX_API void px_ops_destroy(px_ops_t *ops);

PX_API px_device_t px_ops_device(const px_ops_t *ops);
PX_API int px_ops_threads(const px_ops_t *ops);

/* Waits until every call issued on the context has completed. */
PX_API px_status_t px_ops_sync(px_ops_t *ops);

/* Bytes of the shared scratchpad (the largest any primitive asked for). */
PX_API size_t px_ops_scratchpad_bytes(const px_ops_t *ops);

/* Backend description, e.g. "oneDNN 2.6.3 (cpu, avx512_core_bf16, 2 threads)"
 * or "cuDNN 9.19.0, cuBLAS 13.0 (cuda:0 NVIDIA H100, TF32 on)". Owned by the
 * context. */
PX_API const char *px_ops_describe(const px_ops_t *ops);

/* Allows (1) or forbids (0) TF32 tensor-core math in the convolutions and
 * FC layers created from this context after the call (ops already created
 * keep the math they were created with: their algorithms are chosen once).
 * TF32 keeps f32 range with a 10-bit mantissa in the products, which is
 * what PyTorch does by default for cuDNN convolutions; tests forbid it to
 * compare with the CPU at f32 tolerances. On CUDA it is on by default unless
 * the environment variable PX_CUDA_TF32=0; the CPU backend computes in f32
 * and ignores the setting (its own faster math that rounds differently,
 * Winograd for the 3x3 convolutions of 32 channels or more on AVX-512, is
 * on unless PX_CPU_WINOGRAD=0 when the context is created; px_ops_describe
 * then ends in ", no Winograd"). Cannot fail on a valid context. */
PX_API px_status_t px_ops_set_tf32(px_ops_t *ops, int allow);

/* Precision of a model's activations: fp32, or bf16 (bf16 activations and
 * convolution inputs with f32 accumulation; weights, gradients, optimiser
 * state, BN statistics and the loss stay f32). */
typedef enum { PX_PRECISION_FP32 = 0, PX_PRECISION_BF16 = 1 } px_precision_t;

/* The activation format the backend computes best in, for a model of the
 * given precision: *spec (a plain f32 [N, C, H, W] activation spec) gets the
 * layout and dtype the model should convert its input to before the first
 * convolution; ops created for such a spec produce the same format, and
 * global average pooling gives plain f32 again. On the CPU the spec stays
 * as it is (oneDNN picks its layouts per op); on CUDA it becomes NHWC
 * (cuDNN's channels-last, on tensor cores) in f32 or bf16, or stays plain
 * f32 NCHW for fp32 when the environment says PX_CUDA_LAYOUT=nchw. Fails
 * with PX_ERR_INVALID for bf16 on the CPU (the CUDA engine's only). */
PX_API px_status_t px_ops_act_format(px_ops_t *ops, px_precision_t precision, px_tensor_t *spec);

/* ---- convolution ------------------------------------------------------------
 * y[n, co, oh, ow] = b[co] + sum_{ci,i,j} x[n, ci, oh*s - p + i*d, ow*s - p + j*d] * w[co, ci, i, j]
 * with zero padding; OH = (H + pad_h + pad_b - d*(kh - 1) - 1) / stride_h + 1 (floor), where
 * pad_b = pad_h + pad_h_extra is the bottom padding (the same for W: pad_w, pad_r). */

typedef struct {
  int32_t c_out;              /* output channels */
  int32_t kh, kw;             /* kernel size */
  int32_t stride_h, stride_w; /* >= 1 */
  int32_t pad_h, pad_w;       /* symmetric zero padding, >= 0 */
  int32_t bias;               /* 1: add a bias [c_out] */
  int32_t groups;             /* 0 or 1: dense; g > 1: grouped (C_in and c_out divisible by g;
                                 g = C_in = c_out is depthwise; oneDNN on the CPU, cuDNN's
                                 group count on CUDA) */
  int32_t pad_h_extra, pad_w_extra; /* asymmetric padding: bottom (right) padding minus top
                                 (left) padding; 0 (the default): symmetric. The bottom
                                 padding pad_h + pad_h_extra must be >= 0 */
  int32_t dil_h, dil_w;       /* dilation; 0 (the default) or 1: none */
} px_conv2d_params_t;

typedef struct px_conv2d px_conv2d_t;

/* ---- batch normalisation ----------------------------------------------------
 * PyTorch BatchNorm2d semantics: training normalises with the batch mean and
 * biased batch variance over (N, H, W) and updates
 *   running_mean = (1 - momentum) * running_mean + momentum * mean
 *   running_var  = (1 - momentum) * running_var  + momentum * var * m / (m - 1)
 * (m = N*H*W, unbiased); inference normalises with the running statistics.
 * y = scale * (x - mean) / sqrt(var + eps) + shift, followed by ReLU when
 * fuse_relu is set (one pass; the backward then takes dL/d(relu output)). */

typedef struct {
  float eps;         /* 1e-5 in PyTorch */
  float momentum;    /* 0.1 in PyTorch */
  int32_t fuse_relu; /* 1: y = relu(bn(x)) */
} px_batchnorm_params_t;

typedef struct px_batchnorm px_batchnorm_t;

/* ---- ReLU ------------------------------------------------------------------ */

typedef struct px_relu px_relu_t;

/* ---- pooling ------------------------------------------------------------------
 * Output size as for convolution (floor), or with ceil_mode PyTorch's: rounded
 * up, less one when the last window would start past the input and its top
 * (left) padding. Max pooling ignores padded positions; PX_POOL_AVG divides
 * by the window's positions inside the padded input [-pad_h, H + pad_b)
 * (PyTorch's count_include_pad=True, its default: kh*kw but at a ceil_mode
 * window that runs past the padding), PX_POOL_AVG_EXCLUDE_PAD by the number
 * of real inputs. */

typedef enum { PX_POOL_MAX = 0, PX_POOL_AVG = 1, PX_POOL_AVG_EXCLUDE_PAD = 2 } px_pool_mode_t;

typedef struct {
  px_pool_mode_t mode;
  int32_t kh, kw;
  int32_t stride_h, stride_w;
  int32_t pad_h, pad_w;             /* top and left zero padding */
  int32_t pad_h_extra, pad_w_extra; /* bottom (right) padding minus top (left); 0: symmetric */
  int32_t ceil_mode;                /* 1: output size rounded up (see above) */
  int32_t dil_h, dil_w;             /* PX_POOL_MAX: dilation; 0 or 1: none */
} px_pool2d_params_t;

typedef struct px_pool2d px_pool2d_t;

/* ---- fully connected (inner product) -------------------------------------------
 * y[n, o] = b[o] + sum_i x[n, i] * w[o, i], where x [N, C] or [N, C, H, W]
 * is flattened in (c, h, w) order whatever its layout: a FC can take the
 * blocked output of global average pooling directly. */

typedef struct {
  int32_t out_features;
  int32_t bias; /* 1: add a bias [out_features] */
} px_fc_params_t;

typedef struct px_fc px_fc_t;

/* ---- elementwise add (residual connections, gradient accumulation) -------------
 * y = a + b, or y = relu(a + b) when created with relu (the end of a ResNet
 * basic block). The backward is gradient routing: both inputs receive the
 * same gradient g = dy (times (y > 0) with relu). Two gradient branches that
 * meet at a fork are summed with px_add_forward of an op without relu. */

typedef struct px_add px_add_t;

/* ---- layout conversion ------------------------------------------------------------- */

typedef struct px_reorder px_reorder_t;

#ifdef __cplusplus
}
#endif
#endif
