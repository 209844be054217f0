/* pxctl export: the compact model (and ONNX) of a job's final model or of a
 * checkpoint file. For a JOB the coordinator is asked for the job summary's
 * model_path (the file is read on this machine: run it where the job's
 * output is, as pxctl logs does); the work itself is px_export_file, run by
 * pxtrain (pxctl_engine.c). With --tensorboard DIR, the job's iteration and
 * layer figures as a TensorBoard event file (pxctl_tensorboard.c), from the
 * coordinator or, for a `pxctl run`'s directory or --db, offline. */
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "pxctl.h"

#define PXCTL_EXPORT_DEADLINE_MS 10000

static int pxctl_is_file_arg(const char *a) {
  size_t n = strlen(a), x = strlen(".safetensors");
  return (n > x && !strcmp(a + n - x, ".safetensors")) || strchr(a, '/') || access(a, R_OK) == 0;
}

/* What --tensorboard wrote, for the report. */
typedef struct {
  char file[4096];
  size_t events, scalars;
} pxctl_export_tb_t;

/* --tensorboard DIR: job o->pos[0]'s iterations into a new event file. */
static int pxctl_export_tensorboard(pxctl_opts_t *o, pxctl_export_tb_t *t) {
  px_rpc_channel_t *ch = pxctl_connect(o);
  if (!ch) return PXCTL_EXIT_FAIL;
  Prunex__V1__Job *job = NULL;
  int rc;
  if (px_rpc_get_job(ch, o->pos[0], PXCTL_EXPORT_DEADLINE_MS, &job) != PX_OK) {
    rc = pxctl_rpc_fail(ch, o->pos[0]);
  } else {
    pxctl_tb_t *tb = NULL;
    rc = pxctl_tb_open(o->tensorboard, job->job_id, &tb);
    if (!rc) {
      rc = pxctl_tb_sync(tb, ch, 1);
      snprintf(t->file, sizeof t->file, "%s", pxctl_tb_file(tb));
      pxctl_tb_counts(tb, &t->events, &t->scalars);
      int crc = pxctl_tb_close(tb);
      if (!rc) rc = crc;
    }
  }
  px_rpc_message_free(job);
  px_rpc_channel_destroy(ch);
  return rc;
}

static void pxctl_export_tb_json(pxctl_json_t *j, const pxctl_export_tb_t *t) {
  if (!t->file[0]) return;
  pxctl_json_kv_string(j, "tensorboard_file", t->file);
  pxctl_json_kv_uint(j, "tensorboard_events", t->events);
  pxctl_json_kv_uint(j, "tensorboard_scalars", t->scalars);
}

static void pxctl_export_tb_print(const pxctl_export_tb_t *t) {
  if (t->file[0])
    printf("tensorboard %s (%zu iteration%s, %zu scalars)\n", t->file, t->events,
           t->events == 1 ? "" : "s", t->scalars);
}

/* --out DIR: the compact model (and ONNX); the report adds t's lines. */
static int pxctl_export_model(pxctl_opts_t *o, const pxctl_export_tb_t *t) {
  const char *arg = o->pos[0];
  char model[4096], dataset[64] = "";
  if (pxctl_is_file_arg(arg)) {
    snprintf(model, sizeof model, "%s", arg);
  } else {
    px_rpc_channel_t *ch = pxctl_connect(o);
    if (!ch) return PXCTL_EXIT_FAIL;
    Prunex__V1__Job *job = NULL;
    if (px_rpc_get_job(ch, arg, PXCTL_EXPORT_DEADLINE_MS, &job) != PX_OK) {
      int rc = pxctl_rpc_fail(ch, arg);
      px_rpc_channel_destroy(ch);
      return rc;
    }
    model[0] = '\0';
    if (job->summary && job->summary->model_path && job->summary->model_path[0])
      snprintf(model, sizeof model, "%s", job->summary->model_path);
    if (job->spec && job->spec->dataset && job->spec->dataset->name)
      snprintf(dataset, sizeof dataset, "%s", job->spec->dataset->name);
    px_rpc_message_free(job);
    px_rpc_channel_destroy(ch);
    if (!model[0])
      return pxctl_fail("job %s has no final model yet (its summary names none)", arg);
  }
  px_export_report_t r;
  if (pxctl_engine_export(model, o->out, o->onnx, dataset[0] ? dataset : NULL, &r) < 0)
    return pxctl_fail("export %s: %s", model, px_last_error());
  if (o->json) {
    pxctl_json_t j;
    pxctl_json_init(&j, stdout);
    pxctl_json_begin_object(&j);
    pxctl_json_kv_string(&j, "source", model);
    pxctl_json_kv_string(&j, "arch", r.arch);
    pxctl_json_kv_uint(&j, "dense_params", r.dense_params);
    pxctl_json_kv_uint(&j, "compact_params", r.compact_params);
    pxctl_json_kv_uint(&j, "dense_bytes", r.dense_bytes);
    pxctl_json_kv_uint(&j, "compact_bytes", r.compact_bytes);
    pxctl_json_kv_uint(&j, "dense_macs", r.dense_macs);
    pxctl_json_kv_uint(&j, "compact_macs", r.compact_macs);
    pxctl_json_kv_string(&j, "compact_path", r.compact_path);
    pxctl_json_kv_string(&j, "onnx_path", r.onnx_path[0] ? r.onnx_path : NULL);
    pxctl_json_kv_uint(&j, "onnx_bytes", r.onnx_bytes);
    pxctl_json_kv_string(&j, "widths", r.widths);
    pxctl_export_tb_json(&j, t);
    pxctl_json_end_object(&j);
    pxctl_json_finish(&j);
    return PXCTL_EXIT_OK;
  }
  printf("model    %s (%s)\n", model, r.arch);
  printf("params   %zu dense, %zu compact (%.1f%%)\n", r.dense_params, r.compact_params,
         100.0 * (double)r.compact_params / (double)r.dense_params);
  printf("size     %.2f MB dense, %.2f MB compact\n", r.dense_bytes / 1e6, r.compact_bytes / 1e6);
  char macs[96];
  pxctl_fmt_macs(macs, sizeof macs, r.dense_macs, r.compact_macs);
  printf("MACs     %s\n", macs);
  printf("widths   %s\n", r.widths);
  printf("compact  %s\n", r.compact_path);
  if (r.onnx_path[0]) printf("onnx     %s (%.2f MB)\n", r.onnx_path, r.onnx_bytes / 1e6);
  pxctl_export_tb_print(t);
  return PXCTL_EXIT_OK;
}

int pxctl_cmd_export(pxctl_opts_t *o) {
  if (!o->out && !o->tensorboard)
    return pxctl_usage_error(o, "--out DIR or --tensorboard DIR is required");
  if (o->db && !o->tensorboard)
    return pxctl_usage_error(o, "--db reads a job's figures: it goes with --tensorboard DIR");
  pxctl_export_tb_t t;
  memset(&t, 0, sizeof t);
  int rc = o->tensorboard ? pxctl_export_tensorboard(o, &t) : 0;
  if (rc || o->out) return rc ? rc : pxctl_export_model(o, &t);
  if (o->json) {
    pxctl_json_t j;
    pxctl_json_init(&j, stdout);
    pxctl_json_begin_object(&j);
    pxctl_json_kv_string(&j, "job_id", o->pos[0]);
    pxctl_export_tb_json(&j, &t);
    pxctl_json_end_object(&j);
    pxctl_json_finish(&j);
  } else {
    pxctl_export_tb_print(&t);
  }
  return PXCTL_EXIT_OK;
}

void pxctl_print_model_sizes(const char *model_path) {
  px_export_report_t r;
  struct stat sb;
  if (access(model_path, R_OK) != 0 || stat(model_path, &sb) != 0) return;
  if (pxctl_engine_count(model_path, &r) != PX_OK) return;
  size_t dp = r.dense_params, cp = r.compact_params;
  char compact[4096];
  snprintf(compact, sizeof compact, "%s", model_path);
  size_t n = strlen(compact), x = strlen(".safetensors");
  if (n > x && !strcmp(compact + n - x, ".safetensors")) compact[n - x] = '\0';
  snprintf(compact + strlen(compact), sizeof compact - strlen(compact), ".compact.safetensors");
  struct stat cb;
  int have = stat(compact, &cb) == 0;
  printf("model size %zu parameters, %.2f MB dense; %zu parameters (%.1f%%) compact", dp,
         (double)sb.st_size / 1e6, cp, 100.0 * (double)cp / (double)dp);
  if (have) printf(", %.2f MB (%s)", (double)cb.st_size / 1e6, compact);
  char macs[96];
  pxctl_fmt_macs(macs, sizeof macs, r.dense_macs, r.compact_macs);
  printf("\nMACs       %s\n", macs);
}
