/* The export of a checkpoint file, as pxctl export and pxtrain --export run
 * it: load the dense model on the CPU (batch 1: only inference happens),
 * compact it, write the compact safetensors and optionally the ONNX file,
 * and report the sizes. */
#include <errno.h>
#include <stdlib.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>

#include "prunex/data.h"
#include "prunex/export.h"
#include "prunex/safetensors.h"
#include "px_check.h"

static uint64_t px__file_size(const char *path) {
  struct stat sb;
  return stat(path, &sb) == 0 ? (uint64_t)sb.st_size : 0;
}

/* The input contract a folder-trained model's file carries
 * (px_trainer_input_meta) into oi; its strings point into f. oi is left
 * as it is for a file without one. */
static void px__file_contract(const px_safetensors_t *f, px_onnx_info_t *oi) {
  const char *ds = px_safetensors_meta(f, "input_dataset");
  if (!ds || !px_safetensors_meta(f, "input_mean")) return;
  const char *rs = px_safetensors_meta(f, "input_resize"), *cs = px_safetensors_meta(f, "input_crop");
  oi->dataset = ds;
  oi->input_size = px_safetensors_meta(f, "input_size");
  oi->mean = px_safetensors_meta(f, "input_mean");
  oi->std = px_safetensors_meta(f, "input_std");
  oi->classes = px_safetensors_meta(f, "classes");
  oi->resize = rs ? atoi(rs) : 0;
  oi->crop = cs ? atoi(cs) : 0;
}

/* Loads a dense checkpoint on ops for batch 1, at the file's input size
 * (metadata "input_size", a folder-trained model's) or at 32x32 (the size
 * Fashion-MNIST and CIFAR-10 models train at). */
static px_status_t px__load_dense(const char *path, px_ops_t *ops, px_model_t **out) {
  px_model_config_t cfg;
  int32_t w[512];
  PX_CHECK(px_model_file_config(path, &cfg, w, 512));
  if (cfg.widths)
    return px_set_error(PX_ERR_INVALID, "%s is already a compact model (metadata widths)", path);
  cfg.batch = 1;
  cfg.height = cfg.width = 32;
  px_safetensors_t *f;
  PX_CHECK(px_safetensors_open(path, &f));
  const char *size = px_safetensors_meta(f, "input_size");
  int c, h, wd, used = 0;
  if (size && (sscanf(size, "%dx%dx%d%n", &c, &h, &wd, &used) != 3 || size[used] || h < 1 ||
               wd < 1 || h > PX_IMAGE_MAX_SIZE || wd > PX_IMAGE_MAX_SIZE)) {
    px_safetensors_close(f);
    return px_set_error(PX_ERR_FORMAT, "%s: metadata input_size '%s': expected CxHxW, sides 1..%d",
                        path, size, PX_IMAGE_MAX_SIZE);
  }
  if (size) {
    cfg.height = h;
    cfg.width = wd;
  }
  px_safetensors_close(f);
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

/* The figures of m and its compact model cm that a report carries. */
static void px__report_counts(const px_model_t *m, const px_model_t *cm, px_export_report_t *rep) {
  snprintf(rep->arch, sizeof rep->arch, "%s", px_model_config(cm)->arch);
  rep->dense_params = px_model_numel(m);
  rep->compact_params = px_model_numel(cm);
  rep->dense_macs = px_model_macs(m);
  rep->compact_macs = px_model_macs(cm);
}

px_status_t px_export_count(const char *model_path, px_export_report_t *rep) {
  PX_REQUIRE(model_path && rep, "px_export_count: NULL argument");
  memset(rep, 0, sizeof *rep);
  px_ops_t *ops;
  PX_CHECK(px_ops_create(px_device_cpu(), 1, &ops));
  px_model_t *m = NULL, *cm = NULL;
  px_status_t st;
  PX_CHECK_GOTO(px__load_dense(model_path, ops, &m), st, done);
  PX_CHECK_GOTO(px_model_compact(m, ops, 1, &cm), st, done);
  px__report_counts(m, cm, rep);
done:
  px_model_destroy(cm);
  px_model_destroy(m);
  px_ops_destroy(ops);
  return st;
}

/* The compact checkpoint: its source and data set, and a folder's input
 * contract again (so that exporting the compact file's ONNX needs nothing
 * else). */
static px_status_t px__save_compact(const px_model_t *cm, const char *path, const char *base,
                                    const px_onnx_info_t *oi) {
  char rs[16], cs[16];
  snprintf(rs, sizeof rs, "%d", (int)oi->resize);
  snprintf(cs, sizeof cs, "%d", (int)oi->crop);
  const char *kv[18] = {"source", base, "dataset", oi->dataset ? oi->dataset : "unknown"};
  int n = 2;
  if (oi->mean) {
    const char *c[14] = {"input_dataset", "folder",   "input_size", oi->input_size,
                         "input_mean",    oi->mean,   "input_std",  oi->std,
                         "input_resize",  rs,         "input_crop", cs,
                         "classes",       oi->classes ? oi->classes : ""};
    memcpy(kv + 4, c, sizeof c);
    n += 7;
  }
  return px_model_save(cm, NULL, path, kv, n);
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
  px_safetensors_t *f = NULL;
  px_status_t st;
  PX_CHECK_GOTO(px__load_dense(model_path, ops, &m), st, done);
  PX_CHECK_GOTO(px_model_compact(m, ops, 1, &cm), st, done);
  px_onnx_info_t oi = {.dataset = dataset, .source = base};
  PX_CHECK_GOTO(px_safetensors_open(model_path, &f), st, done);
  if (!dataset || !strcmp(dataset, "folder")) px__file_contract(f, &oi);
  if (!oi.dataset) /* PruneX's only one-channel data set is Fashion-MNIST */
    oi.dataset = px_model_config(m)->in_channels == 1 ? "fashion-mnist" : NULL;
  PX_CHECK_GOTO(px__save_compact(cm, rep->compact_path, base, &oi), st, done);
  if (onnx) {
    PX_CHECK_GOTO(px_onnx_save(cm, rep->onnx_path, &oi), st, done);
    rep->onnx_bytes = px__file_size(rep->onnx_path);
  }
  const px_model_config_t *c = px_model_config(cm);
  px__report_counts(m, cm, rep);
  size_t len = 0;
  for (int i = 0; i < c->nwidths && len + 12 < sizeof rep->widths; i++)
    len += (size_t)snprintf(rep->widths + len, sizeof rep->widths - len, "%s%d", i ? "," : "",
                            (int)c->widths[i]);
  rep->dense_bytes = px__file_size(model_path);
  rep->compact_bytes = px__file_size(rep->compact_path);
done:
  px_safetensors_close(f);
  px_model_destroy(cm);
  px_model_destroy(m);
  px_ops_destroy(ops);
  return st;
}
