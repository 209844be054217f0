/* Inference engine for a (compact) CPU model: the model's graph run with
 * oneDNN forward-inference primitives, batch norm folded into the
 * convolution before it, the activation that follows (ReLU, LeakyReLU,
 * ReLU6, sigmoid) and the residual add that reads it fused as post-ops
 * (sum, eltwise), grouped (depthwise) and biased convolutions, the imported
 * graphs' other operators (standalone activations, squeeze-and-excitation
 * gates, concatenations, pooling) in plain loops, activations in NHWC, weights
 * converted to the primitives' layouts once per px__infer_load. No
 * gradients, no training state: the strategies' compact evaluation of a
 * consensus model (strategy/compact_eval.c) and bench/infer use it.
 *
 * A net is built for a batch (px__infer_cache_batch gives the largest whose
 * widest layer fits the L2 cache) and runs any number of samples in chunks
 * of it. px__infer_logits_ref runs the same folded net in plain C loops: the
 * reference the oneDNN path is tested against. */
#ifndef PX_INFER_INT_H
#define PX_INFER_INT_H

#include <stdint.h>

#include "prunex/nn.h"

typedef struct px__infer px__infer_t;

/* The precision of an inference net's convolutions. F32: f32 throughout.
 * BF16: bf16 activations and weights (oneDNN runs them on AMX where the CPU
 * has it) with f32 accumulation, bias and logits; every sample whose two
 * largest logits are closer than the bound (px__infer_margin) is run again
 * in f32, so the predictions are f32's. BF16_RAW: bf16 without that check
 * (tests, benches). AUTO: BF16 where px__infer_bf16_fast, else F32.
 * Calibration nets (train_bn) are always f32. */
typedef enum {
  PX__INFER_F32 = 0,
  PX__INFER_BF16 = 1,
  PX__INFER_BF16_RAW = 2,
  PX__INFER_AUTO = 3
} px__infer_prec_t;

/* Whether bf16 convolutions pay on this CPU: oneDNN's effective ISA has
 * bf16 dot products (avx512_core_bf16: AVX512-BF16, and AMX where the CPU
 * has it), unless PX_INFER_PRECISION=f32 (or bf16, which forces them).
 * Without AMX they still pay: on an AMD EPYC (Zen 5, AVX512-BF16) the
 * quickstart model's compact evaluation took 1.95 s in bf16 against 2.69 s
 * in f32, reruns included (docs/performance.md). Decided once per process
 * and logged at info level. */
int px__infer_bf16_fast(void);

/* Whether the engine runs every node of m's graph: the built-in layer set
 * and the imported graphs' operators (grouped and biased convolutions,
 * standalone activations, max and average pooling, a map times a
 * per-channel gate, concatenations on channels); 0 for a multiplication
 * whose second input is not a [N, C, 1, 1] gate of the first's channels or
 * a concatenation of maps of different sizes. */
int px__infer_takes(const px_model_t *m);

/* Samples per chunk whose widest convolution (input and output
 * activations) fits the L2 cache of one core, at least 1, at most cap,
 * and evened out over a batch of cap. */
int32_t px__infer_cache_batch(const px_model_t *m, int32_t cap);

/* Builds the net of m's graph (a CPU model: its ops context runs the
 * primitives; m must outlive the net) for batch samples per chunk. The
 * weights are not read: px__infer_load before the first run. train_bn 1
 * builds the calibration net instead: batch norms in training mode (batch
 * statistics, m's running statistics updated as the training engine does;
 * nothing folded or fused), for px__infer_calibrate; they run on oneDNN
 * where it has vector (jit) code for the shape, else in plain loops (train_bn
 * 2: plain loops for all, the tests' check of them). prec: the
 * precision of an inference net (see px__infer_prec_t). Caller owns *out
 * (px__infer_destroy). PX_ERR_INVALID for a model not on the CPU or a
 * graph the engine does not take (px__infer_takes), PX_ERR_NOMEM, PX_ERR_BACKEND. */
/* The margin below which a bf16 net reruns a sample in f32: the two
 * largest of its k logits z closer than this may be ranked otherwise in
 * f32 (PX__INFER_MARGIN_REL of the largest magnitude plus
 * PX__INFER_MARGIN_ABS, measured in docs/performance.md). */
float px__infer_margin_bound(const float *z, int k);

px_status_t px__infer_create(px_model_t *m, int32_t batch, int train_bn, px__infer_prec_t prec,
                             px__infer_t **out);
void px__infer_destroy(px__infer_t *net);
int32_t px__infer_batch(const px__infer_t *net);
/* Whether the net runs bf16 convolutions; the samples it ran again in f32
 * (BF16) since its creation. */
int px__infer_is_bf16(const px__infer_t *net);
int64_t px__infer_rechecked(const px__infer_t *net);
/* Of the net's convolutions, how many run on the planar kernels in
 * *planar (p2conv.h: the narrow 3 x 3 ones, bf16 on a CPU with
 * AVX512-BF16, f32 on one with AVX-512). */
int px__infer_convs(const px__infer_t *net, int *planar);

/* Reads the model's current parameters and BN running statistics, folds
 * them (scale / sqrt(var + eps) into the filters, the rest into a bias) and
 * converts the weights for the primitives. Allocates nothing. */
px_status_t px__infer_load(px__infer_t *net);

/* One training-mode forward of a calibration net over exactly its batch of
 * samples x: m's BN running statistics move. Allocates nothing. */
px_status_t px__infer_calibrate(px__infer_t *net, const float *x);
/* The momentum px__infer_calibrate's batch norms move the running statistics
 * by (0: each layer's own): px_trainer_calibrate_with's average. */
void px__infer_calib_momentum(px__infer_t *net, float momentum);

/* Logits [n][classes] of n >= 1 samples x ([n][C][H][W] plain host f32),
 * into the caller's logits. Allocates nothing. */
px_status_t px__infer_logits(px__infer_t *net, const float *x, int32_t n, float *logits);
/* The same with plain C loops (the reference; slow). */
px_status_t px__infer_logits_ref(px__infer_t *net, const float *x, int32_t n, float *logits);

/* Adds the summed cross-entropy and the correct predictions of n samples
 * (labels y in [0, classes)) to *loss_sum and *correct, as
 * px_model_eval_batch does. A bf16 net with the f32 rerun keeps its close
 * calls back until a batch of them is gathered, and adds the rest when
 * called with n = 0 (a px_eval_batch_fn's end of the test set): the sums
 * are complete after that call. px__infer_load drops what a pass cut short
 * left. PX_ERR_INVALID for a label out of range. */
px_status_t px__infer_eval(px__infer_t *net, const float *x, const int32_t *y, int32_t n,
                           double *loss_sum, int64_t *correct);

/* Counts the samples of x (n >= 1) whose predicted class (first largest
 * logit) differs between the net and dense (a model of the same input whose
 * compact twin the net runs), adding them to *differ. Allocates nothing. */
px_status_t px__infer_compare(px__infer_t *net, px_model_t *dense, const float *x, int32_t n,
                              int64_t *differ);

#endif
