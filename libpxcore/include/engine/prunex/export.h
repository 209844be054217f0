/* Deployment export of a pruned model: the physically compacted network
 * (pruned filters and input channels removed), saved as a compact
 * safetensors checkpoint that PruneX (and PyTorch, from the metadata) loads,
 * and as an ONNX model for other runtimes.
 *
 * Masks are not stored in PruneX checkpoints; they are derived from the
 * weights, which is exact: a channel is removed only when nothing reads it,
 * i.e. every convolution (and the FC) that reads the activation has all-zero
 * weights for it. Channels are decided per "channel group": the activations
 * joined by per-channel ops (batch norm, ReLU, residual add, pooling) share
 * one channel index, so a residual stream keeps a channel while any reader
 * of any tensor of the stream uses it, and loses it in every producing conv,
 * batch norm and reader at once. A channel whose producing filter is zero
 * but whose (constant) batch-norm output is still read is either removed by
 * folding the constant into the running mean of the batch norm after each
 * reader, when every reader is a 1x1 convolution without padding followed
 * by a batch norm (exact), or kept (a 3x3 reader with zero padding sees the
 * constant differently at the border). The compact model computes the same
 * logits as the masked dense one, up to float rounding.
 *
 * The ONNX file (opset 13, IR version 7) has one input "input" and one
 * output "logits" [N, classes]. For a data set PruneX knows, the graph starts
 * with the training loader's preprocessing (Pad with 0 to the training size,
 * Sub mean, Div std), so "input" is float32 [N, C, h, w] raw pixels in
 * [0, 1] at the data set's own size (Fashion-MNIST: 1 x 28 x 28, padded by
 * the graph to 32 x 32 and normalised as (x - 0.2860)/0.3530; CIFAR-10:
 * 3 x 32 x 32); for another data set it is the normalised [N, C, H, W]
 * tensor. Its metadata_props say which ("prunex.input", "prunex.input_size",
 * "prunex.input_layout", "prunex.input_range", "prunex.pad", "prunex.mean",
 * "prunex.std", "prunex.preprocessing"), the class names of a known data
 * set ("prunex.classes") and the writer ("prunex.version"); the graph
 * input's doc_string repeats "prunex.input". A model trained on an image
 * folder carries its input contract in its file (px_trainer_input_meta):
 * its ONNX input is C x S x S raw pixels in [0, 1] of an image whose shorter
 * side was scaled to S and centre-cropped to S x S ("prunex.resize",
 * "prunex.crop"), normalised in the graph with the training split's mean
 * and std, and "prunex.classes" names the folder's classes.
 *
 * Everything here runs on the host: the dense model may live on any device
 * (its values are copied to the host); the compact model is built on the
 * ops context the caller gives. */
#ifndef PRUNEX_EXPORT_H
#define PRUNEX_EXPORT_H

#include <stddef.h>
#include <stdint.h>

#include "prunex/nn.h"
#include "prunex/px.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Builds the compact twin of `dense` on ops for `batch` samples (same input
 * size), with the weights, batch-norm parameters and running statistics of
 * the kept channels. Caller owns *out (px_model_destroy); the compact model's
 * config carries its widths (px_model_save writes them as metadata
 * "widths"). Imported graphs compact too (CPU engine): activations and
 * depthwise convs pass channels through, an SE multiply ties its gate's
 * channels to the trunk's, a concat's output channel c is input k's
 * channel c - offset_k; a grouped (not depthwise) conv keeps all of its
 * input and output channels. A model on another engine with such nodes
 * gets a same-shape copy (its pruned weights zero). dense is not modified. Fails with PX_ERR_NOMEM, or
 * the errors of px_model_create and tensor copies. */
PX_API px_status_t px_model_compact(const px_model_t *dense, px_ops_t *ops, int32_t batch,
                                    px_model_t **out);

/* What px_onnx_save writes in metadata_props besides the input and output
 * descriptions; every field may be NULL. */
typedef struct {
  const char *dataset;     /* e.g. "fashion-mnist": selects the preprocessing in the graph
                              (fashion-mnist, cifar10; any other: none) */
  const char *source;      /* the file the model came from */
  /* An image folder's input contract, as the model file's metadata has it
   * (px_trainer_input_meta); all NULL/0 for another data set. With mean set,
   * the graph normalises its raw input as it does for a known data set. */
  const char *input_size;  /* "CxHxW": the stored (resized, cropped) image, H == W */
  const char *mean, *std;  /* per channel, comma-separated, pixel/255 units */
  const char *classes;     /* label order, comma-separated (px_folder_class_names) */
  int32_t resize, crop;    /* the shorter side scaled to resize, then the centre crop x crop */
} px_onnx_info_t;

/* Writes m (dense or compact, any device) as an ONNX model to path
 * (atomically: temporary file + rename). The batch dimension is symbolic
 * ("N"). Fails with PX_ERR_INVALID when info->dataset's images cannot feed
 * m (channels, or a size that does not pad evenly to m's; nothing is
 * written), PX_ERR_IO naming the path, PX_ERR_NOMEM. */
PX_API px_status_t px_onnx_save(const px_model_t *m, const char *path, const px_onnx_info_t *info);

/* Result of px_export_file. */
typedef struct {
  char compact_path[1024];  /* DIR/<stem>.compact.safetensors */
  char onnx_path[1024];     /* DIR/<stem>.onnx, "" when not asked */
  size_t dense_params;      /* parameter elements of the dense model */
  size_t compact_params;    /* ... of the compact model */
  uint64_t dense_bytes;     /* file sizes */
  uint64_t compact_bytes;
  uint64_t onnx_bytes;
  uint64_t dense_macs;      /* multiply-accumulates per image (px_model_macs) of the dense */
  uint64_t compact_macs;    /* ... and of the compact model */
  char arch[32];
  char widths[2048];        /* the compact widths, comma-separated (truncated if long) */
} px_export_report_t;

/* The whole export of a checkpoint file (pxctl export, pxtrain --export):
 * loads `model_path` (a dense PruneX checkpoint) on the CPU, compacts it,
 * writes DIR/<stem>.compact.safetensors (stem: the file name without
 * ".safetensors") and, with onnx != 0, DIR/<stem>.onnx; creates out_dir if
 * needed. Fills *rep. dataset (may be NULL) names the data set the model was
 * trained on, for the ONNX input description (NULL: the file's own input
 * contract when it has one (a folder-trained model, metadata
 * "input_dataset"), else "fashion-mnist" for a one-channel model, else
 * unknown). The model is loaded at the file's "input_size" when it has one,
 * else at 32 x 32. Fails with the loading,
 * compaction or writing error (naming the file). */
PX_API px_status_t px_export_file(const char *model_path, const char *out_dir, int onnx,
                                  const char *dataset, px_export_report_t *rep);

/* What a checkpoint's compact model would be, without writing anything
 * (for job summaries): fills rep's arch, dense_params, compact_params,
 * dense_macs and compact_macs (the rest zero). */
PX_API px_status_t px_export_count(const char *model_path, px_export_report_t *rep);

#ifdef __cplusplus
}
#endif
#endif
