/* Model checkpoints as safetensors files: parameters, BN running statistics
 * and (optionally) the optimiser's momentum, under PyTorch's names, so a
 * checkpoint opens directly in PyTorch or NumPy. Tensors go through host
 * staging (px_tensor_copy_to_host / _from_host), so the same code serves
 * every device. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "prunex/nn.h"
#include "prunex/safetensors.h"
#include "px_check.h"

#define PX__MOM_PREFIX "optimizer.momentum."

typedef struct {
  char *name;
  px_tensor_t *t;
} px__ck_entry_t;

/* The tensors of a checkpoint, in file order. names are allocated. */
static px_status_t px__entries(const px_model_t *m, px_sgd_t *sgd, px__ck_entry_t **out, int *n) {
  int np = px_model_num_params(m), nb = px_model_num_buffers(m);
  int total = np + nb + (sgd ? np : 0);
  px__ck_entry_t *e = px_calloc((size_t)total, sizeof *e, "checkpoint.entries");
  if (!e) return PX_ERR_NOMEM;
  int k = 0;
  for (int i = 0; i < np; i++) e[k++] = (px__ck_entry_t){(char *)px_model_param(m, i)->name, px_model_param(m, i)->value};
  for (int i = 0; i < nb; i++) e[k++] = (px__ck_entry_t){(char *)px_model_buffer(m, i)->name, px_model_buffer(m, i)->value};
  for (int i = 0; sgd && i < np; i++) {
    const char *pn = px_model_param(m, i)->name;
    size_t len = strlen(PX__MOM_PREFIX) + strlen(pn) + 1;
    char *nm = px_malloc(len, "checkpoint.name");
    if (!nm) {
      for (int j = np + nb; j < k; j++) px_free(e[j].name);
      px_free(e);
      return PX_ERR_NOMEM;
    }
    snprintf(nm, len, "%s%s", PX__MOM_PREFIX, pn);
    e[k++] = (px__ck_entry_t){nm, px_sgd_momentum(sgd, i)};
  }
  *out = e;
  *n = k;
  return PX_OK;
}

static void px__entries_free(const px_model_t *m, px__ck_entry_t *e, int n) {
  int owned_from = px_model_num_params(m) + px_model_num_buffers(m);
  for (int i = owned_from; i < n; i++) px_free(e[i].name);
  px_free(e);
}

/* "16,8,16,...": the conv widths of a compact model. Caller frees. */
static char *px__widths_string(const int32_t *w, int n) {
  size_t cap = (size_t)n * 12 + 1;
  char *s = px_malloc(cap, "checkpoint.widths");
  if (!s) return NULL;
  size_t len = 0;
  s[0] = '\0';
  for (int i = 0; i < n; i++)
    len += (size_t)snprintf(s + len, cap - len, "%s%d", i ? "," : "", (int)w[i]);
  return s;
}

px_status_t px_model_save(const px_model_t *m, px_sgd_t *sgd, const char *path,
                          const char *const *extra_kv, int nextra) {
  PX_REQUIRE(path && path[0], "checkpoint path is empty");
  px__ck_entry_t *e;
  int n;
  PX_CHECK(px__entries(m, sgd, &e, &n));
  size_t total = 0;
  for (int i = 0; i < n; i++) total += px_tensor_plain_bytes(e[i].t);
  px_status_t st = PX_OK;
  char *host = px_malloc(total ? total : 1, "checkpoint.host");
  px_st_tensor_t *list = px_calloc((size_t)n, sizeof *list, "checkpoint.list");
  const char **kv = px_calloc((size_t)(12 + 2 * nextra), sizeof *kv, "checkpoint.meta");
  const px_model_config_t *c = px_model_config(m);
  char *widths = c->widths ? px__widths_string(c->widths, c->nwidths) : NULL;
  if (!host || !list || !kv || (c->widths && !widths)) {
    st = PX_ERR_NOMEM;
    goto done;
  }
  size_t off = 0;
  for (int i = 0; i < n; i++) {
    size_t bytes = px_tensor_plain_bytes(e[i].t);
    PX_CHECK_GOTO(px_tensor_copy_to_host(e[i].t, host + off, bytes), st, done);
    list[i].name = e[i].name;
    list[i].dtype = PX_ST_F32;
    list[i].ndim = e[i].t->ndim;
    for (int d = 0; d < e[i].t->ndim; d++) list[i].shape[d] = e[i].t->dims[d];
    list[i].data = host + off;
    off += bytes;
  }
  char in_c[16], classes[16];
  snprintf(in_c, sizeof in_c, "%d", c->in_channels);
  snprintf(classes, sizeof classes, "%d", c->num_classes);
  int nk = 0;
  kv[nk++] = "format";
  kv[nk++] = "prunex-checkpoint-v1";
  kv[nk++] = "arch";
  kv[nk++] = c->arch;
  kv[nk++] = "in_channels";
  kv[nk++] = in_c;
  kv[nk++] = "num_classes";
  kv[nk++] = classes;
  if (widths) {
    kv[nk++] = "widths";
    kv[nk++] = widths;
  }
  if (c->onnx) { /* an imported model: its graph comes from the file */
    kv[nk++] = "onnx";
    kv[nk++] = c->onnx;
  }
  for (int i = 0; i < 2 * nextra; i++) kv[nk++] = extra_kv[i];
  st = px_safetensors_save(path, list, n, kv, nk / 2);
done:
  PX_FREE_ALL(widths, kv, list, host);
  px__entries_free(m, e, n);
  return st;
}

static px_status_t px__meta_check(const px_safetensors_t *f, const char *path, const char *key,
                                  const char *want) {
  const char *got = px_safetensors_meta(f, key);
  if (got && strcmp(got, want) != 0)
    return px_set_error(PX_ERR_MISMATCH, "%s: checkpoint has %s '%s', the model has '%s'", path,
                        key, got, want);
  return PX_OK;
}

px_status_t px_model_load(px_model_t *m, px_sgd_t *sgd, const char *path) {
  px_safetensors_t *f;
  PX_CHECK(px_safetensors_open(path, &f));
  const px_model_config_t *c = px_model_config(m);
  char in_c[16], classes[16];
  snprintf(in_c, sizeof in_c, "%d", c->in_channels);
  snprintf(classes, sizeof classes, "%d", c->num_classes);
  px__ck_entry_t *e = NULL;
  int n = 0;
  float *host = NULL;
  px_status_t st;
  PX_CHECK_GOTO(px__meta_check(f, path, "arch", c->arch), st, done);
  PX_CHECK_GOTO(px__meta_check(f, path, "in_channels", in_c), st, done);
  PX_CHECK_GOTO(px__meta_check(f, path, "num_classes", classes), st, done);
  {
    /* a compact file loads only into a model of its widths (and a dense one
     * only into a dense model); the shapes below then name any tensor that
     * disagrees with its width */
    const char *fw = px_safetensors_meta(f, "widths");
    char *mw = c->widths ? px__widths_string(c->widths, c->nwidths) : NULL;
    if (c->widths && !mw) {
      st = PX_ERR_NOMEM;
      goto done;
    }
    if (!fw != !mw) {
      st = px_set_error(PX_ERR_MISMATCH, "%s: the file is a %s model, the model is %s", path,
                        fw ? "compact" : "dense", mw ? "compact" : "dense");
      px_free(mw);
      goto done;
    }
    px_free(mw);
  }
  /* momentum is optional in the file: load it only when present */
  px_st_info_t probe;
  char probe_name[200] = "";
  if (px_model_num_params(m) > 0)
    snprintf(probe_name, sizeof probe_name, "%s%s", PX__MOM_PREFIX, px_model_param(m, 0)->name);
  int with_mom = sgd && probe_name[0] && px_safetensors_find(f, probe_name, &probe) == PX_OK;
  PX_CHECK_GOTO(px__entries(m, with_mom ? sgd : NULL, &e, &n), st, done);
  size_t maxb = 4;
  for (int i = 0; i < n; i++)
    if (px_tensor_plain_bytes(e[i].t) > maxb) maxb = px_tensor_plain_bytes(e[i].t);
  host = px_malloc(maxb, "checkpoint.host");
  if (!host) {
    st = PX_ERR_NOMEM;
    goto done;
  }
  for (int i = 0; i < n; i++) {
    px_st_info_t info;
    if (px_safetensors_find(f, e[i].name, &info) != PX_OK) {
      st = px_set_error(PX_ERR_MISMATCH, "%s: tensor '%s' is missing", path, e[i].name);
      goto done;
    }
    const px_tensor_t *t = e[i].t;
    int same = info.dtype == PX_ST_F32 && info.ndim == t->ndim;
    for (int d = 0; same && d < t->ndim; d++) same = info.shape[d] == t->dims[d];
    if (!same) {
      char want[96] = "", got[96] = "";
      for (int d = 0; d < t->ndim; d++)
        snprintf(want + strlen(want), sizeof want - strlen(want), "%s%lld", d ? ", " : "",
                 (long long)t->dims[d]);
      for (int d = 0; d < info.ndim && d < PX_ST_MAX_DIMS; d++)
        snprintf(got + strlen(got), sizeof got - strlen(got), "%s%lld", d ? ", " : "",
                 (long long)info.shape[d]);
      st = px_set_error(PX_ERR_MISMATCH, "%s: tensor '%s' is %s [%s], the model needs F32 [%s]",
                        path, e[i].name, px_st_dtype_name(info.dtype), got, want);
      goto done;
    }
    size_t bytes = px_tensor_plain_bytes(t);
    PX_CHECK_GOTO(px_safetensors_read(f, e[i].name, host, bytes), st, done);
    PX_CHECK_GOTO(px_tensor_copy_from_host(e[i].t, host, bytes), st, done);
  }
  st = PX_OK;
done:
  px_free(host);
  if (e) px__entries_free(m, e, n);
  px_safetensors_close(f);
  return st;
}

/* The ONNX path of the last imported model's file read on this thread. */
static __thread char px__file_onnx[4096];

px_status_t px_model_file_config(const char *path, px_model_config_t *cfg, int32_t *widths,
                                 int cap) {
  PX_REQUIRE(path && cfg, "px_model_file_config: NULL argument");
  px_safetensors_t *f;
  PX_CHECK(px_safetensors_open(path, &f));
  px_status_t st = PX_OK;
  const char *arch = px_safetensors_meta(f, "arch"), *in_c = px_safetensors_meta(f, "in_channels");
  const char *cls = px_safetensors_meta(f, "num_classes"), *w = px_safetensors_meta(f, "widths");
  if (!arch || !in_c || !cls) {
    st = px_set_error(PX_ERR_FORMAT, "%s: no PruneX model metadata (arch, in_channels, num_classes)",
                      path);
    goto done;
  }
  const char *known = px_model_arch_name(arch), *onnx = px_safetensors_meta(f, "onnx");
  cfg->onnx = NULL;
  if (!strcmp(arch, "onnx") && onnx && onnx[0] && strlen(onnx) < sizeof px__file_onnx) {
    snprintf(px__file_onnx, sizeof px__file_onnx, "%s", onnx);
    cfg->onnx = px__file_onnx;
    known = "onnx";
  }
  if (!known) {
    st = px_set_error(PX_ERR_FORMAT, "%s: arch '%s' is not a known architecture", path, arch);
    goto done;
  }
  cfg->arch = known; /* static: the handle's strings die with it */
  cfg->in_channels = atoi(in_c);
  cfg->num_classes = atoi(cls);
  cfg->widths = NULL;
  cfg->nwidths = 0;
  cfg->precision = PX_PRECISION_FP32; /* a file holds f32 weights; how to run them is the caller's */
  if (w) {
    int n = 0;
    for (const char *p = w; *p;) {
      char *end;
      long v = strtol(p, &end, 10);
      if (end == p || v < 1 || v > (1 << 20) || (*end && *end != ',')) {
        st = px_set_error(PX_ERR_FORMAT, "%s: metadata widths '%.60s' is not a list of positive "
                          "integers", path, w);
        goto done;
      }
      if (n >= cap) {
        st = px_set_error(PX_ERR_INVALID, "%s: %d or more widths, room for %d", path, n + 1, cap);
        goto done;
      }
      widths[n++] = (int32_t)v;
      p = *end ? end + 1 : end;
    }
    cfg->widths = widths;
    cfg->nwidths = n;
  }
done:
  px_safetensors_close(f);
  return st;
}
