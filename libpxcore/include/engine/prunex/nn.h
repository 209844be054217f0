/* PruneX training engine: models (the ResNet family and WRN-50-2), SGD with
 * the ADMM proximal hook, and the local training loop that pxtrain and
 * pxworker share.
 *
 * A model is a fixed graph of op objects (ops.h) built for one batch size and
 * input shape. Its tensors come in families, one allocation each (so a family
 * is one buffer to clear, copy or exchange): parameters (plain f32,
 * contiguous in one arena, so the whole model is also one flat vector for
 * collectives), gradients (same layout), BN running statistics, and the
 * step's working memory: activations (kept in the backend's layouts from
 * layer to layer) and activation gradients in one arena, where tensors whose
 * lifetimes in the step do not overlap share bytes (an activation's ends with
 * the last backward that reads it). Nothing is allocated per step.
 *
 * Devices. Everything lives on the device of the px_ops_t the model is
 * built on. On CUDA every family is device memory: the `data` pointers of
 * the tensors below (parameters, gradients, the flat views, BN statistics,
 * momentum buffers) are device pointers that the host must not dereference;
 * move values with px_tensor_copy_to_host / px_tensor_copy_from_host. Code
 * that reads px_model_flat_params(m)->data as a host float* (the training
 * strategies today) therefore works on CPU models only. Input batches are
 * always host memory: the model copies them to its device. */
#ifndef PRUNEX_NN_H
#define PRUNEX_NN_H

#include <stddef.h>
#include <stdint.h>

#include "prunex/arch.h"
#include "prunex/ops.h"
#include "prunex/px.h"
#include "prunex/tensor.h"

#ifdef __cplusplus
extern "C" {
#endif

/* ---- models ---------------------------------------------------------------- */

typedef enum {
  PX_WEIGHT_CONV = 0,     /* conv weight [c_out, c_in, kh, kw]: what pruning acts on */
  PX_WEIGHT_BN_SCALE = 1, /* [c] */
  PX_WEIGHT_BN_SHIFT = 2, /* [c] */
  PX_WEIGHT_FC = 3,       /* [out, in] */
  PX_WEIGHT_FC_BIAS = 4,  /* [out] */
  PX_WEIGHT_CONV_BIAS = 5,  /* conv bias [c_out] (imported graphs) */
  PX_WEIGHT_CONV_FIXED = 6, /* conv weight [c_out, c_in / groups, kh, kw] left out of pruning
                               (imported graphs): a grouped or depthwise conv, or one on a
                               1 x 1 input (a squeeze-and-excitation squeeze or expand); an
                               imported layer scale (ConvNeXt's [C, 1, 1] Mul) is a depthwise
                               1 x 1 conv of this kind, its weight [c, 1, 1, 1] */
  PX_WEIGHT_LN_SCALE = 7,   /* LayerNorm over channels (imported graphs): scale [c] */
  PX_WEIGHT_LN_SHIFT = 8,   /* its shift [c] */
} px_weight_kind_t;

typedef struct {
  const char *name;       /* PyTorch-style, e.g. "layer1.0.conv1.weight"; owned by the model */
  px_weight_kind_t kind;
  px_tensor_t *value;     /* plain f32 view into the parameter arena (device memory on CUDA) */
  px_tensor_t *grad;      /* same spec, view into the gradient arena */
} px_model_param_t;

typedef struct {
  const char *name;       /* "bn1.running_mean" / "bn1.running_var" */
  px_tensor_t *value;     /* plain f32 [c] */
} px_model_buffer_t;

typedef struct {
  const char *arch;       /* resnet20|resnet32|resnet56|resnet18|resnet34|resnet50|resnet101|
                             resnet152|wrn50_2 */
  int32_t in_channels;    /* >= 1 */
  int32_t num_classes;    /* >= 2 */
  int32_t batch;          /* samples per step (fixed: ops are built for it) */
  int32_t height, width;  /* input size, e.g. 32 x 32 */
  /* A compact (physically pruned) model: the output channels of every
   * convolution in build order (stem conv1, then per block conv1, conv2
   * [, conv3] [, downsample.0]), nwidths of them; NULL (the default of a
   * zero-initialised config) builds the dense architecture. Copied by
   * px_model_create; the model's config then points at its own copy. The
   * block structure (which blocks have a downsample) is the dense one. */
  const int32_t *widths;
  int32_t nwidths;
  /* Activation precision (px_precision_t of ops.h): PX_PRECISION_FP32 (0,
   * the default) or PX_PRECISION_BF16 (CUDA: bf16 activations; CPU: bf16
   * convolutions on AVX512-BF16/AMX with f32 activations between them; f32
   * weights, gradients, BN statistics and loss on both). */
  int32_t precision;
  /* An imported model: the path of an ONNX file (arch/onnx_import.c says which
   * operators it may hold); arch is then ignored and reads "onnx" in the
   * model's config. NULL (the default) builds arch. Copied by px_model_create.
   * The file's input must be [N, in_channels, height, width] and its output
   * [N, num_classes]; px_model_init_params starts from the file's weights. */
  const char *onnx;
} px_model_config_t;

typedef struct px_model px_model_t;

/* Builds the model on ops' device: creates every op and allocates every
 * family. Parameters are zero until px_model_init_params. The model borrows
 * ops, which must outlive it. Caller owns *out (px_model_destroy). Fails with
 * PX_ERR_INVALID (unknown arch, bad sizes; the message names the field),
 * PX_ERR_NOMEM, PX_ERR_BACKEND. */
PX_API px_status_t px_model_create(px_ops_t *ops, const px_model_config_t *cfg, px_model_t **out);
PX_API void px_model_destroy(px_model_t *m);

PX_API const px_model_config_t *px_model_config(const px_model_t *m);
PX_API px_ops_t *px_model_ops(const px_model_t *m);

/* PyTorch's initialisation for these models: conv weights Kaiming normal
 * (fan_out, ReLU gain), BN scale 1 and shift 0, running mean 0 and var 1, FC
 * weight and bias uniform in +-1/sqrt(fan_in); deterministic in seed. */
PX_API px_status_t px_model_init_params(px_model_t *m, uint64_t seed);

PX_API int px_model_num_params(const px_model_t *m);
PX_API const px_model_param_t *px_model_param(const px_model_t *m, int i);
/* Channel coupling for structured pruning: when conv weight i's output
 * channels are read by one node only, a batch norm (ReLU fused or not), whose
 * output is read by one conv only, returns that conv's parameter index: its
 * input channel c sees filter c of parameter i and nothing else, so the two
 * can be pruned together (a pruned channel removes the producing filter
 * too). In an imported graph the chain may pass through standalone
 * activations (ReLU6, ...), further batch norms and depthwise convs (a
 * MobileNetV2 block's expansion conv is coupled to its projection conv
 * across the depthwise conv). -1 when i is not a conv weight or its output
 * feeds a residual add, a pooling, a concat, an SE multiply, several
 * readers, ... */
PX_API int px_model_channel_consumer(const px_model_t *m, int i);
/* The tensors that ride along with a coupled group: when parameter i is the
 * weight or bias of a depthwise conv, or the scale or shift of a batch norm
 * after one, on the chain from a producer conv to the consumer
 * px_model_channel_consumer gives it, returns that consumer: channel c of
 * i is dead exactly when the consumer drops channel c, so i is masked and
 * packed with the group (px_sparsity_param_t.follower). -1 otherwise (the
 * producer's own batch norm included: it stays dense, as in the built-in
 * models, which have no followers). */
PX_API int px_model_channel_follower(const px_model_t *m, int i);
PX_API int px_model_num_buffers(const px_model_t *m);
/* The layers whose filters an imported graph leaves dense, and why, as one
 * line for the job log: "stage2.0.branch2.5 (feeds a channel shuffle),
 * stage3.1.branch2.5 (feeds a channel split), ..." (convs whose output
 * channels a ShuffleNet's channel shuffle or split reads: compaction keeps
 * them all); "" when none. Owned by m, valid while it lives. Cannot fail. */
PX_API const char *px_model_left_dense(const px_model_t *m);

/* The graph, for exporters (compaction, ONNX): nodes in forward order. */
/* REORDER: a layout conversion (the identity on values) that a compact
 * model may need before a residual add. MAXPOOL, AVGPOOL (imported graphs):
 * a windowed pooling (the window win; AVGPOOL divides by the window's
 * positions inside the padded input, PyTorch's default count_include_pad,
 * or with win.exclude_pad by its real inputs). */
/* ACT, MUL, CONCAT (imported graphs): a standalone activation (act: 0 ReLU,
 * 1 LeakyReLU of slope alpha, 2 ReLU6, 3 sigmoid, 4 hard sigmoid
 * clamp(alpha x + 0.5, 0, 1), 5 hard swish x times that, 6 SiLU, 7 GELU
 * (exact), 8 tanh, 9 alpha x, 10 x + alpha); in times a
 * per-channel gate in2 [N, C, 1, 1] (squeeze-and-excitation); in and in2
 * joined on channels (in first). */
typedef enum {
  PX_NODE_CONV, PX_NODE_BN, PX_NODE_ADD, PX_NODE_GAP, PX_NODE_FC, PX_NODE_REORDER,
  PX_NODE_MAXPOOL, PX_NODE_AVGPOOL, PX_NODE_ACT, PX_NODE_MUL, PX_NODE_CONCAT,
  PX_NODE_LN, /* (imported graphs) LayerNorm over the channels of each pixel (ConvNeXt's;
                an ONNX LayerNormalization on the last axis of the NHWC view): w, b
                the scale and shift [c], eps */
  PX_NODE_SHUFFLE, /* (imported graphs) ShuffleNet's channel shuffle of `groups` g: output
                      channel i * g + j is input channel j * (c / g) + i */
  PX_NODE_SLICE    /* (imported graphs) channels [pad, pad + c_out) of in (a Split's or
                      Slice's part) */
} px_node_kind_t;
typedef struct {
  px_node_kind_t kind;
  int in, in2, out;        /* activation indices (0: the input images, the last: the
                              logits); in2 is the ADD's second input, else -1 */
  int w, b;                /* parameter indices (CONV: w; BN, LN: scale, shift; FC: weight,
                              bias), -1 if none */
  int rm, rv;              /* BN: running mean / var buffer indices, else -1 */
  int relu;                /* BN, ADD: a ReLU follows (fused) */
  int kernel, stride, pad; /* CONV, MAXPOOL, AVGPOOL: win.kh, win.stride_h, win.pad_t (the
                              whole window for a square, symmetric one; see win) */
  int c_in, c_out;         /* channels (FC: features) of input and output */
  int groups;              /* CONV: 1 dense, > 1 grouped (c_in == groups: depthwise) */
  int act;                 /* ACT: the activation (see above) */
  float alpha;             /* ACT: its parameter (see above) */
  float momentum;          /* BN: PyTorch's momentum of the running statistics (0.1 in the
                              built-in models) */
  double eps;              /* BN, LN: epsilon, the float the layer computes with as the decimal
                              it was written as (1e-5 exactly for the built-in models' 1e-5f;
                              an imported graph's own) (no padding before it: the struct
                              compares bytewise) */
  px_window_t win;         /* CONV, MAXPOOL, AVGPOOL: the window (12 ints: no padding after
                              eps nor at the end) */
} px_model_node_t;
/* 1 when every node of m is of the built-in layer set (dense convs without
 * bias, BN, ADD, pools, FC); 0 when the graph has ACT, MUL, CONCAT nodes or
 * grouped or biased convs. Compaction (px_model_compact) takes those graphs
 * on the CPU engine only; the strategies' compact evaluation (a CPU model)
 * runs both kinds. */
PX_API int px_model_compactable(const px_model_t *m);
PX_API int px_model_num_nodes(const px_model_t *m);
/* Fills *out for node k; PX_ERR_INVALID when k is out of range. */
PX_API px_status_t px_model_node(const px_model_t *m, int k, px_model_node_t *out);
PX_API int px_model_num_acts(const px_model_t *m);
/* Channels of activation a (features for the pooled vector), -1 out of range. */
PX_API int px_model_act_channels(const px_model_t *m, int a);
/* Height and width of activation a when it is a 4-D map (0), else -1 (the
 * logits, an FC's input). */
PX_API int px_model_act_area(const px_model_t *m, int a, int *h, int *w);
PX_API const px_model_buffer_t *px_model_buffer(const px_model_t *m, int i);
/* Total parameter elements (e.g. 272,474 for resnet20, 3 in, 10 classes). */
PX_API size_t px_model_numel(const px_model_t *m);
/* The parameters and gradients as single flat f32 tensors [numel] (views of
 * the arenas: parameter i starts where parameter i-1 ends). On a CUDA model
 * their data are device pointers (see the file comment). */
PX_API const px_tensor_t *px_model_flat_params(const px_model_t *m);
PX_API const px_tensor_t *px_model_flat_grads(const px_model_t *m);
/* The BN running statistics as one flat f32 tensor (buffer i starts where
 * buffer i-1 ends), for averaging across ranks. */
PX_API const px_tensor_t *px_model_flat_buffers(const px_model_t *m);
/* Bytes of each family, for memory reports. */
PX_API size_t px_model_memory_bytes(const px_model_t *m);
/* Of those, the bytes of one training step's working memory: the
 * activations, their gradients, the BN batch statistics, workspaces and the
 * labels (what the memory plan lays out; PX_MEM_PLAN=separate, for tests
 * and benches only, gives the older plan's figure). */
PX_API size_t px_model_activation_bytes(const px_model_t *m);
/* Multiply-accumulates of one image's forward pass through the convolutions
 * and fully connected layers (what pruning papers quote as FLOPs; 40.5 M
 * for resnet20 on 1 x 32 x 32): of the dense model, or of a compact one
 * (px_model_compact). 0 when the graph cannot be read. */
PX_API uint64_t px_model_macs(const px_model_t *m);
/* The same count with some convs narrower: node k (px_model_node) computes
 * out_kept[k] output and in_kept[k] input channels where those are >= 0
 * (either array may be NULL: all kept). A grouped conv counts c_in / groups
 * inputs per filter whatever in_kept says. */
PX_API uint64_t px_model_macs_kept(const px_model_t *m, const int32_t *out_kept,
                                   const int32_t *in_kept);

/* One training step's forward and backward on a full batch: x is
 * [batch][in_channels][height][width] plain host f32, y [batch] labels.
 * Leaves every gradient set (overwritten, not accumulated) and updates the
 * BN running statistics. Writes the mean loss and the number of correct
 * predictions. Allocates nothing (on CUDA the first call sizes the pinned
 * staging buffer of the ops context). On CUDA the backward pass is still
 * running on the device when this returns; the next call on the same
 * ops context (px_sgd_step, a tensor copy, px_ops_sync) is ordered after it. */
PX_API px_status_t px_model_train_step(px_model_t *m, const float *x, const int32_t *y, float *loss,
                                       int64_t *correct);

/* Called by px_model_train_step's backward pass each time parameter i's
 * gradient is complete, in backward (reverse layer) order, every parameter
 * once per step: a data-parallel strategy starts reducing a bucket of
 * gradients as soon as all of its parameters are ready (PyTorch DDP's
 * overlap). Host models only: on CUDA the gradient is still being computed
 * on the device when it is called. An error fails the step. */
typedef px_status_t (*px_grad_ready_fn)(void *ctx, px_model_t *m, int param);
/* Sets (fn non-NULL) or clears the callback; ctx is borrowed. */
PX_API void px_model_set_grad_ready(px_model_t *m, px_grad_ready_fn fn, void *ctx);

/* Forward pass in training mode without loss or backward: only the BN
 * running statistics change. Used to recalibrate them for a model whose
 * weights did not produce them (a pruned consensus model). */
PX_API px_status_t px_model_forward_train(px_model_t *m, const float *x);

/* Inference on n <= batch samples (as px_model_eval_batch) writing the logits
 * [n][num_classes] to the caller's host buffer. */
PX_API px_status_t px_model_logits(px_model_t *m, const float *x, int32_t n, float *logits);

/* Inference on n <= batch samples (BN uses running statistics; a short batch
 * is zero-padded and only its first n rows count). Adds the summed loss and
 * the number of correct predictions to *loss_sum and *correct. */
PX_API px_status_t px_model_eval_batch(px_model_t *m, const float *x, const int32_t *y, int32_t n,
                                       double *loss_sum, int64_t *correct);

/* ---- SGD ------------------------------------------------------------------- */

typedef struct {
  double lr;
  double momentum;      /* 0: plain SGD */
  double weight_decay;  /* L2, applied to every parameter as PyTorch does */
  int32_t nesterov;
} px_sgd_config_t;

typedef struct px_sgd px_sgd_t;

/* Creates the optimiser for m's parameters (momentum buffers in one arena on
 * m's device). Caller owns *out. Fails with PX_ERR_INVALID naming the field
 * (lr <= 0, momentum not in [0, 1), weight_decay < 0, nesterov without
 * momentum), PX_ERR_NOMEM. */
PX_API px_status_t px_sgd_create(px_model_t *m, const px_sgd_config_t *cfg, px_sgd_t **out);
PX_API void px_sgd_destroy(px_sgd_t *s);
PX_API void px_sgd_set_lr(px_sgd_t *s, double lr);
PX_API double px_sgd_lr(const px_sgd_t *s);
/* Weight decay in use, and a new one (H-SADMM moves it into the z update). */
PX_API double px_sgd_weight_decay(const px_sgd_t *s);
PX_API void px_sgd_set_weight_decay(px_sgd_t *s, double wd);

/* ADMM proximal hook for parameter i: from the next step on, the update uses
 * grad + rho * (theta - z + u). z and u are f32 arrays with the parameter's
 * numel on the model's device (device pointers on CUDA: a host pointer
 * fails with PX_ERR_INVALID), borrowed until cleared with rho = 0 (then z
 * and u may be NULL). u may be NULL (taken as zero). */
PX_API px_status_t px_sgd_set_prox(px_sgd_t *s, int i, const float *z, const float *u, float rho);

/* One update of every parameter from its gradient, in one pass per tensor:
 *   g = grad + wd * theta (+ rho * (theta - z + u));  buf = momentum * buf + g;
 *   theta -= lr * (nesterov ? g + momentum * buf : buf)
 * (PyTorch's SGD, dampening 0). Allocates nothing. On CUDA it is one fused
 * kernel over all parameters, queued on the model's ops stream (returns
 * before it has run). */
PX_API px_status_t px_sgd_step(px_sgd_t *s);

/* The momentum buffer of parameter i (plain f32, spec of the parameter), for
 * checkpoints. */
PX_API px_tensor_t *px_sgd_momentum(px_sgd_t *s, int i);


/* ---- checkpoints -------------------------------------------------------------
 * safetensors files (readable by PyTorch's and NumPy's safetensors loaders):
 * every parameter and BN running statistic under its PyTorch name, plus, when
 * an optimiser is given, its momentum buffers as "optimizer.momentum.<name>";
 * metadata "format" = "prunex-checkpoint-v1", "arch", "in_channels",
 * "num_classes", "widths" (compact), "onnx" (an imported model's ONNX file) and any
 * extra key/value pairs. */

/* Writes the checkpoint atomically. sgd may be NULL. extra_kv holds nextra
 * key/value pairs (may be NULL). Fails with PX_ERR_IO naming the path. */
PX_API px_status_t px_model_save(const px_model_t *m, px_sgd_t *sgd, const char *path,
                                 const char *const *extra_kv, int nextra);

/* Loads a checkpoint into m (and sgd's momentum when sgd is not NULL and the
 * file has it). The architecture, every tensor's presence, dtype and shape
 * must match; errors name the file and the tensor. On failure m may be
 * partly overwritten. */
PX_API px_status_t px_model_load(px_model_t *m, px_sgd_t *sgd, const char *path);

/* Reads a checkpoint's model metadata into cfg: arch (a static string),
 * in_channels, num_classes and, for a compact model (metadata "widths"),
 * widths (written to the caller's widths[0..cap), cfg->widths pointing at
 * it) and nwidths; cfg->widths NULL for a dense file; precision fp32. batch,
 * height and width are left to the caller. An imported model's file (arch "onnx", metadata
 * "onnx") sets cfg->onnx to its ONNX path, held in a per-thread buffer valid until this
 * thread's next call; NULL otherwise. Fails with PX_ERR_IO / PX_ERR_FORMAT naming the
 * file (no or bad metadata), PX_ERR_INVALID (more widths than cap). */
PX_API px_status_t px_model_file_config(const char *path, px_model_config_t *cfg, int32_t *widths,
                                        int cap);

/* ---- local training loop (pxtrain, pxworker) ------------------------------------- */

typedef struct {
  const char *arch;          /* model name (px_model_arch_list) */
  const char *dataset;       /* fashion-mnist | cifar10 | synthetic | folder */
  const char *data_dir;      /* NULL: the data set's default directory */
  int32_t batch;             /* per rank */
  int32_t threads;           /* compute threads (<= 0: runtime default) */
  int32_t epochs;            /* for the learning-rate schedule */
  double lr, momentum, weight_decay;
  int32_t nesterov;
  const char *lr_schedule;   /* constant | cosine | step (x0.1 at 50% and 75%) */
  uint64_t seed;             /* initialisation, shuffling, augmentation */
  int32_t augment;           /* random crop (padding 4) + horizontal flip */
  int32_t rank, world_size;  /* data shard of this process */
  int32_t synthetic_samples; /* synthetic data set size (0: 10 batches) */
  px_device_t device;        /* where the model trains: the CPU (the default, all
                                zero) or px_device_cuda(i) */
  const int32_t *widths;     /* a compact model's conv widths (px_model_config_t), read
                                only by px_trainer_create; NULL: dense */
  int32_t nwidths;
  int32_t precision;         /* px_precision_t: fp32 (0, the default) or bf16 (CUDA) */
  /* dataset "folder" (data.h, image folders): data_dir is the folder */
  int32_t image_size;        /* stored and trained size (0: 32) */
  int32_t image_channels;    /* 1 or 3 (0: 3) */
  float min_scale;           /* random-resized crop's smallest area fraction (0: 0.35) */
  const char *cache_dir;     /* NULL: beside the data (px_folder_config_t) */
  const char *data_root;     /* NULL: the folder itself; no file is read from outside it
                                (px_folder_config_t.root) */
  const char *cache_root;    /* NULL: data_root; cache_dir is made beneath it
                                (px_folder_config_t.cache_root) */
  double max_skipped;        /* share of a split's images that may be left out (0: 0.01) */
  const char *onnx;          /* an imported model's ONNX file (px_model_config_t.onnx),
                                read only by px_trainer_create; NULL: arch */
  const char *onnx_sha256;   /* its SHA-256 as submitted (64 lowercase hex digits; NULL or
                                "": unchecked): a file that differs fails px_trainer_create
                                (PX_ERR_INVALID, "... changed since the job was submitted") */
  /* dataset "folder" too large to cache decoded (px_folder_config_t.cache_budget):
   * streamed */
  int64_t cache_budget;      /* bytes of decoded images a split may cache (0: a quarter
                                of the memory); a larger split is streamed */
  int32_t loader_threads;    /* decoding threads of a streamed split (0: threads, at most
                                8; else the online CPUs, at most 8) */
  int32_t loader_prefetch;   /* streamed training batches prepared ahead (0: 2) */
} px_train_config_t;

/* Defaults: resnet20 on fashion-mnist, batch 128, lr 0.1, momentum 0.9,
 * weight decay 5e-4, cosine schedule over 15 epochs, augmentation on,
 * seed 1, rank 0 of 1, on the CPU. */
PX_API void px_train_config_default(px_train_config_t *c);

typedef struct {
  int64_t epoch;
  int64_t steps;             /* optimiser steps in the epoch */
  int64_t samples;
  double loss;               /* mean training loss */
  double accuracy;           /* training accuracy (augmented batches) */
  double seconds;
  double images_per_sec;
  double data_wait_seconds;  /* time spent waiting for the input pipeline */
} px_epoch_stats_t;

typedef struct {
  int64_t samples;
  double loss, accuracy;
  double seconds;
} px_eval_stats_t;

/* Called after every step with the step index in the epoch, the number of
 * steps and the running mean loss; return non-zero to stop the epoch. */
typedef int (*px_step_cb_t)(void *ctx, int64_t step, int64_t steps, double loss, double acc);

typedef struct px_trainer px_trainer_t;

/* Loads the data sets, creates the backend on cfg->device, the model
 * (initialised from the seed), the optimiser and the loaders. Caller owns
 * *out. Fails with the data set's or model's error (naming the file or
 * field), or for a CUDA device with PX_ERR_NOT_BUILT (no CUDA in this build)
 * or PX_ERR_NO_DEVICE. */
PX_API px_status_t px_trainer_create(const px_train_config_t *cfg, px_trainer_t **out);
PX_API void px_trainer_destroy(px_trainer_t *t);

PX_API px_model_t *px_trainer_model(px_trainer_t *t);
PX_API px_sgd_t *px_trainer_sgd(px_trainer_t *t);
/* The input contract of t's data set, as checkpoint metadata pairs written
 * into kv (2 * cap strings): for an image folder "input_dataset" "folder",
 * "input_size" "CxSxS", "input_resize" S (the shorter side is scaled to S),
 * "input_crop" S (then the centre S x S is cut), "input_mean" and
 * "input_std" (the training split's, per channel, pixel/255 units, "%.9g"
 * comma-separated) and "classes" (px_folder_class_names); what
 * px_export_file reads to put the preprocessing into the ONNX graph. Returns
 * the number of pairs: 7, or 0 for another data set (their contract is
 * built in) or cap < 7. The strings live as long as t. Cannot fail. */
PX_API int px_trainer_input_meta(px_trainer_t *t, const char **kv, int cap);
/* Steps per epoch and the learning rate the schedule gives at a global step. */
PX_API int64_t px_trainer_steps_per_epoch(const px_trainer_t *t);
PX_API double px_trainer_lr_at(const px_trainer_t *t, int64_t global_step);

/* Trains one epoch (epoch selects the shuffle and the schedule position).
 * cb may be NULL. A stop requested by cb ends the epoch early (PX_OK). */
PX_API px_status_t px_trainer_epoch(px_trainer_t *t, int64_t epoch, px_step_cb_t cb, void *ctx,
                                    px_epoch_stats_t *out);

/* Runs n optimiser steps from where the last call stopped, crossing epoch
 * boundaries as needed (a new epoch reshuffles). *out covers these steps
 * (its epoch is the epoch the last step belonged to). For strategies that
 * synchronise every few steps. */
PX_API px_status_t px_trainer_steps(px_trainer_t *t, int64_t n, px_epoch_stats_t *out);

/* Called by px_trainer_steps after every backward pass, before the
 * optimiser step: how data-parallel strategies reduce the gradients. A
 * negative return stops the steps with that status. NULL removes it. */
typedef px_status_t (*px_grad_hook_t)(void *ctx, px_model_t *m);
PX_API void px_trainer_set_grad_hook(px_trainer_t *t, px_grad_hook_t hook, void *ctx);

/* Re-estimates the BN running statistics of the current weights from n
 * training batches (forward passes in training mode, no update of the
 * weights): the batches px_trainer_steps takes next (from where its stream
 * stands, wrapping to the epoch's start), after which the stream is back
 * where it was, so calibrating changes nothing that is trained. */
PX_API px_status_t px_trainer_calibrate_bn(px_trainer_t *t, int64_t n);
/* The same batches handed to fn instead (x: a full batch, [batch][C][H][W]
 * host f32), which runs its own training-mode forward (the compact
 * evaluation's calibration), the stream likewise left where it was. */
typedef px_status_t (*px_train_batch_fn)(void *ctx, const float *x);
/* Sets the momentum of every batch norm fn's forwards update (momentum 0:
 * each layer's own again). */
typedef void (*px_bn_momentum_fn)(void *ctx, float momentum);
/* Both take the cumulative average of the n batches' statistics (the k-th
 * batch moves them by 1/k, as PyTorch's update_bn), whatever the layers'
 * momentum: 20 batches at torchvision MobileNetV3's 0.01 would move them
 * 18% of the way. mom (NULL: the layers' momentum) sets it for fn. */
PX_API px_status_t px_trainer_calibrate_with(px_trainer_t *t, px_train_batch_fn fn,
                                             px_bn_momentum_fn mom, void *ctx, int64_t n);
/* The momentum of m's batch norms (0: each layer's own), for the above. */
PX_API void px_model_set_bn_momentum(px_model_t *m, float momentum);

/* Steps over which the learning-rate schedule runs (default epochs x steps
 * per epoch), and the number of steps taken so far. */
PX_API void px_trainer_set_schedule_steps(px_trainer_t *t, int64_t total);
PX_API int64_t px_trainer_global_step(const px_trainer_t *t);
/* Where the trainer stands in its data and schedule: {optimiser steps taken,
 * epoch of the training stream in progress (-1: none), batches of it
 * consumed}. px_trainer_set_position puts a trainer there (a resumed job:
 * the same batches, augmentations and learning rates follow). */
PX_API void px_trainer_position(const px_trainer_t *t, int64_t pos[3]);
PX_API px_status_t px_trainer_set_position(px_trainer_t *t, const int64_t pos[3]);

/* Elastic jobs: this rank is rank of world_size after a membership change.
 * The test set's shard changes at once (the next evaluation covers the
 * whole test set over the new world); the training shard from the next
 * epoch of the px_trainer_steps stream (at once when none is in progress),
 * so the lost ranks' samples are spread over the survivors
 * (px_loader_reshard); epochs go on being numbered from where they were,
 * with the new steps per epoch. Fails with PX_ERR_INVALID for a rank
 * outside 0..world_size-1 (or, at that epoch, a shard under one batch).
 * Allocates nothing. */
PX_API px_status_t px_trainer_reshard(px_trainer_t *t, int32_t rank, int32_t world_size);

/* Loss and accuracy of the current model on this rank's shard of the test
 * set (all of it for world size 1). */
PX_API px_status_t px_trainer_evaluate(px_trainer_t *t, px_eval_stats_t *out);
/* The same with another evaluator: fn gets each test batch (n <= the
 * trainer's batch samples, x [n][C][H][W] host f32, y [n] labels) and adds
 * its summed loss and correct predictions as px_model_eval_batch does; once
 * the test set is done, fn is called once more with n = 0 (x and y NULL), so
 * that an evaluator that defers some samples (the compact evaluation's f32
 * reruns, gathered over batches) adds them then. */
typedef px_status_t (*px_eval_batch_fn)(void *ctx, const float *x, const int32_t *y, int32_t n,
                                        double *loss_sum, int64_t *correct);
PX_API px_status_t px_trainer_evaluate_with(px_trainer_t *t, px_eval_batch_fn fn, void *ctx,
                                            px_eval_stats_t *out);

#ifdef __cplusplus
}
#endif
#endif
