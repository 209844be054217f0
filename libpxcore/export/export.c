/* The export of a checkpoint file, as pxctl export and pxtrain --export run
 * it: load the dense model on the CPU (batch 1: only inference happens),
 * compact it, write the compact safetensors and optionally the ONNX file,
 * and report the sizes. */
#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>

#include "prunex/export.h"
#include "px_check.h"

static uint64_t px__file_size(const char *path) {
  struct stat sb;
  return stat(path, &sb) == 0 ? (uint64_t)sb.st_size : 0;
}

/* Loads a dense checkpoint on ops for batch 1 (32x32 inputs: the size every
 * PruneX data set is trained at). */
static px_status_t px__load_dense(const char *path, px_ops_t *ops, px_model_t **out) {
  px_model_config_t cfg;
  int32_t w[512];
  PX_CHECK(px_model_file_config(path, &cfg, w, 512));
  if (cfg.widths)
    return px_set_error(PX_ERR_INVALID, "%s is already a compact model (metadata widths)", path);
  cfg.batch = 1;
  cfg.height = cfg.width = 32;
  px_model_t *m;
  PX_CHECK(px_model_create(ops, &cfg, &m));
  px_status_t st = px_model_load(m, NULL, path);
  if (st < 0) {
    px_model_destroy(m);
    return st;
  }
  *out = m;
  return PX_OK;
}

px_status_t px_export_count(const char *model_path, size_t *dense_params,
                            size_t *compact_params) {
  PX_REQUIRE(model_path && dense_params && compact_params, "px_export_count: NULL argument");
  px_ops_t *ops;
  PX_CHECK(px_ops_create(px_device_cpu(), 1, &ops));
  px_model_t *m = NULL, *cm = NULL;
  px_status_t st;
  PX_CHECK_GOTO(px__load_dense(model_path, ops, &m), st, done);
  PX_CHECK_GOTO(px_model_compact(m, ops, 1, &cm), st, done);
  *dense_params = px_model_numel(m);
  *compact_params = px_model_numel(cm);
done:
  px_model_destroy(cm);
  px_model_destroy(m);
  px_ops_destroy(ops);
  return st;
}

px_status_t px_export_file(const char *model_path, const char *out_dir, int onnx,
                           const char *dataset, px_export_report_t *rep) {
  PX_REQUIRE(model_path && out_dir && out_dir[0] && rep, "px_export_file: bad argument");
  memset(rep, 0, sizeof *rep);
  if (mkdir(out_dir, 0777) != 0 && errno != EEXIST)
    return px_set_error(PX_ERR_IO, "%s: cannot create the directory: %s", out_dir,
                        strerror(errno));
  const char *base = strrchr(model_path, '/');
  base = base ? base + 1 : model_path;
  char stem[512];
  snprintf(stem, sizeof stem, "%s", base);
  size_t sl = strlen(stem), xl = strlen(".safetensors");
  if (sl > xl && !strcmp(stem + sl - xl, ".safetensors")) stem[sl - xl] = '\0';
  snprintf(rep->compact_path, sizeof rep->compact_path, "%s/%s.compact.safetensors", out_dir,
           stem);
  if (onnx) snprintf(rep->onnx_path, sizeof rep->onnx_path, "%s/%s.onnx", out_dir, stem);
  px_ops_t *ops;
  PX_CHECK(px_ops_create(px_device_cpu(), 0, &ops));
  px_model_t *m = NULL, *cm = NULL;
  px_status_t st;
  PX_CHECK_GOTO(px__load_dense(model_path, ops, &m), st, done);
  PX_CHECK_GOTO(px_model_compact(m, ops, 1, &cm), st, done);
  if (!dataset) /* PruneX's only one-channel data set is Fashion-MNIST */
    dataset = px_model_config(m)->in_channels == 1 ? "fashion-mnist" : NULL;
  const char *kv[4] = {"source", base, "dataset", dataset ? dataset : "unknown"};
  PX_CHECK_GOTO(px_model_save(cm, NULL, rep->compact_path, kv, 2), st, done);
  if (onnx) {
    px_onnx_info_t oi = {dataset, base};
    PX_CHECK_GOTO(px_onnx_save(cm, rep->onnx_path, &oi), st, done);
    rep->onnx_bytes = px__file_size(rep->onnx_path);
  }
  const px_model_config_t *c = px_model_config(cm);
  snprintf(rep->arch, sizeof rep->arch, "%s", c->arch);
  size_t len = 0;
  for (int i = 0; i < c->nwidths && len + 12 < sizeof rep->widths; i++)
    len += (size_t)snprintf(rep->widths + len, sizeof rep->widths - len, "%s%d", i ? "," : "",
                            (int)c->widths[i]);
  rep->dense_params = px_model_numel(m);
  rep->compact_params = px_model_numel(cm);
  rep->dense_bytes = px__file_size(model_path);
  rep->compact_bytes = px__file_size(rep->compact_path);
done:
  px_model_destroy(cm);
  px_model_destroy(m);
  px_ops_destroy(ops);
  return st;
}
