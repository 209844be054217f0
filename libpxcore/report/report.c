/* The report tables (prunex/report.h) and what they drive: the SQL column
 * lists, binds and reads, the CSV, values by field. Offsets come from
 * offsetof on the proto's structs and the strategy's, so a field that a
 * struct lacks does not compile; test_report checks the tables against the
 * proto's descriptors and both schemas. */
#include <assert.h>
#include <stdio.h>
#include <string.h>

#include "prunex/report.h"
#include "px_check.h"

#define IR(f) offsetof(Prunex__V1__IterationReport, f)
#define PH(f) offsetof(Prunex__V1__PhaseTimes, f)
#define IT(f) ((ptrdiff_t)offsetof(px_iteration_t, f))
#define LM(f) offsetof(Prunex__V1__LayerMetrics, f)
#define AD(f) ((ptrdiff_t)offsetof(px_admm_layer_report_t, f))

#define STORED (PX_REPORT_COORD | PX_REPORT_AGENT)
#define SHOWN (PX_REPORT_CSV | PX_REPORT_JSON)
#define PHASE_FIELD(f, lbl)                                                                    \
  {#f "_s", PX_REPORT_F64, "s", lbl, STORED | SHOWN | PX_REPORT_PHASE, PX_REPORT_ALWAYS,       \
   PH(f##_s), IT(f##_s), "prunex_job_phase_seconds",                                         \
   "Rank 0's time in each phase of the latest iteration.", "phase=\"" lbl "\"",             \
   "prunex_job_phase_seconds_total", "Rank 0's time in each phase, summed over the job's "  \
   "iterations."}

/* In the order of `pxctl metrics --csv`'s columns. iteration and rank are
 * the rows' keys: the stores bind them beside the table's columns. */
static const px_report_field_t px__iteration_fields[] = {
    {"job_id", PX_REPORT_TEXT, "", "job", 0, PX_REPORT_ALWAYS, IR(job_id), -1, NULL, NULL, NULL,
     NULL, NULL},
    {"iteration", PX_REPORT_I32, "", "iteration", SHOWN, PX_REPORT_ALWAYS, IR(iteration),
     IT(iteration), "prunex_job_iteration",
     "Latest iteration reported by a running job (counted from 0).", NULL, NULL, NULL},
    {"rank", PX_REPORT_I32, "", "rank", PX_REPORT_CSV, PX_REPORT_ALWAYS, IR(rank), -1, NULL,
     NULL, NULL, NULL, NULL},
    {"time_unix_ms", PX_REPORT_I64, "ms", "time", STORED | SHOWN, PX_REPORT_ALWAYS,
     IR(time_unix_ms), -1, NULL, NULL, NULL, NULL, NULL},
    {"epoch", PX_REPORT_F64, "", "epoch", STORED | SHOWN, PX_REPORT_ALWAYS, IR(epoch), IT(epoch),
     NULL, NULL, NULL, NULL, NULL},
    {"loss", PX_REPORT_F64, "", "training loss", STORED | SHOWN, PX_REPORT_NONNEG, IR(loss),
     IT(loss), "prunex_job_loss", "Mean training loss of the job's latest iteration.", NULL,
     NULL, NULL},
    {"train_accuracy", PX_REPORT_F64, "fraction", "train accuracy", STORED | SHOWN,
     PX_REPORT_NONNEG, IR(train_accuracy), IT(train_accuracy), "prunex_job_train_accuracy",
     "Training accuracy (0..1) of the job's latest iteration.", NULL, NULL, NULL},
    {"test_accuracy", PX_REPORT_F64, "fraction", "test accuracy",
     STORED | SHOWN | PX_REPORT_EVALUATED, PX_REPORT_NONNEG, IR(test_accuracy),
     IT(test_accuracy), "prunex_job_test_accuracy",
     "Test accuracy (0..1) of the consensus model at its latest evaluation.", NULL, NULL, NULL},
    {"density", PX_REPORT_F64, "fraction", "density", STORED | SHOWN, PX_REPORT_NONNEG,
     IR(density), IT(density), "prunex_job_density",
     "Kept fraction of the prunable weights at the latest iteration.", NULL, NULL, NULL},
    {"mask_drift", PX_REPORT_I64, "bits", "mask drift (bits)", STORED | SHOWN, PX_REPORT_ALWAYS,
     IR(mask_drift), IT(mask_drift), "prunex_job_mask_drift",
     "Group-mask bits that changed in the latest iteration.", NULL, NULL, NULL},
    {"mask_groups", PX_REPORT_I64, "bits", "group-mask bits", PX_REPORT_COORD | SHOWN,
     PX_REPORT_POSITIVE, IR(mask_groups), IT(mask_groups), "prunex_job_mask_groups",
     "Group-mask bits in all (the drift is out of these).", NULL, NULL, NULL},
    {"frozen", PX_REPORT_BOOL, "", "masks frozen", STORED | SHOWN, PX_REPORT_ALWAYS, IR(frozen),
     IT(frozen), NULL, NULL, NULL, NULL, NULL},
    {"bytes_intra", PX_REPORT_U64, "bytes", "intra-node bytes", STORED | SHOWN, PX_REPORT_ALWAYS,
     IR(bytes_intra), IT(bytes_intra), NULL, NULL, NULL, "prunex_job_intra_bytes_total",
     "Intra-node bytes (sent plus received, all ranks) of the job so far."},
    {"bytes_inter", PX_REPORT_U64, "bytes", "sent + received", STORED | SHOWN, PX_REPORT_ALWAYS,
     IR(bytes_inter), IT(bytes_inter), NULL, NULL, NULL, "prunex_job_inter_bytes_total",
     "Inter-node bytes (sent plus received, all ranks) of the job so far."},
    {"bytes_inter_dense", PX_REPORT_U64, "bytes", "dense equivalent", STORED | SHOWN,
     PX_REPORT_ALWAYS, IR(bytes_inter_dense), IT(bytes_inter_dense), NULL, NULL, NULL,
     "prunex_job_inter_dense_bytes_total",
     "Inter-node bytes the job would have moved with dense buffers."},
    PHASE_FIELD(local, "local"),
    PHASE_FIELD(intra, "intra"),
    PHASE_FIELD(projection, "projection"),
    PHASE_FIELD(inter, "inter"),
    PHASE_FIELD(broadcast, "broadcast"),
    PHASE_FIELD(control, "control"),
    /* kept with the job (the coordinator's jobs row), not per iteration */
    {"checkpoint_problem", PX_REPORT_TEXT, "", "checkpoint problem", 0, PX_REPORT_ALWAYS,
     IR(checkpoint_problem), -1, NULL, NULL, NULL, NULL, NULL},
};

#define LF(f, lbl, where) \
  {#f, PX_REPORT_F64, "", lbl, STORED | (where), PX_REPORT_ALWAYS, LM(f), AD(f), NULL, NULL, \
   NULL, NULL, NULL}
#define RHO(f, lbl, level)                                                                   \
  {#f, PX_REPORT_F64, "", lbl, STORED | SHOWN | PX_REPORT_PLOT, PX_REPORT_ALWAYS, LM(f),    \
   AD(f), "prunex_job_rho",                                                                  \
   "Mean over layers of the ADMM penalty in force at the latest iteration, per consensus "   \
   "level (intra: rho1, inter: rho2).",                                                      \
   "level=\"" level "\"", NULL, NULL}

/* In the proto's order (field numbers 1..15). */
static const px_report_field_t px__layer_fields[] = {
    {"layer", PX_REPORT_I32, "", "layer", STORED | SHOWN, PX_REPORT_ALWAYS, LM(layer), -1, NULL,
     NULL, NULL, NULL, NULL},
    {"name", PX_REPORT_TEXT, "", "parameter", STORED | SHOWN, PX_REPORT_ALWAYS, LM(name), -1,
     NULL, NULL, NULL, NULL, NULL},
    LF(r_intra, "Intra primal residual", SHOWN | PX_REPORT_PLOT),
    LF(s_intra, "Intra dual residual", SHOWN | PX_REPORT_PLOT),
    LF(r_inter, "Inter primal residual", SHOWN | PX_REPORT_PLOT),
    LF(s_inter, "Inter dual residual", SHOWN | PX_REPORT_PLOT),
    RHO(rho1, "rho1 (intra penalty)", "intra"),
    RHO(rho2, "rho2 (inter penalty)", "inter"),
    {"density", PX_REPORT_F64, "fraction", "density", STORED | SHOWN, PX_REPORT_NONNEG,
     LM(density), -1, NULL, NULL, NULL, NULL, NULL},
    LF(theta_norm, "||theta||", 0),
    LF(zi_norm, "||z_i||", 0),
    LF(z_norm, "||z||", 0),
    LF(u_norm, "||u||", 0),
    LF(v_norm, "||v||", 0),
    {"numel", PX_REPORT_I64, "", "elements", STORED | PX_REPORT_JSON, PX_REPORT_ALWAYS, LM(numel),
     AD(numel), NULL, NULL, NULL, NULL, NULL},
};

#define NFIELDS(a) ((int)(sizeof(a) / sizeof((a)[0])))

int px_report_count(px_report_table_t t) {
  return t == PX_REPORT_ITERATION ? NFIELDS(px__iteration_fields) : NFIELDS(px__layer_fields);
}

const px_report_field_t *px_report_field(px_report_table_t t, int i) {
  if (i < 0 || i >= px_report_count(t)) return NULL;
  return t == PX_REPORT_ITERATION ? &px__iteration_fields[i] : &px__layer_fields[i];
}

const px_report_field_t *px_report_find(px_report_table_t t, const char *name) {
  for (int i = 0; i < px_report_count(t); i++)
    if (!strcmp(px_report_field(t, i)->name, name)) return px_report_field(t, i);
  return NULL;
}

/* Where f's value lives in msg: NULL for a phase field of a report
 * without phases. */
static const char *px__report_at(const px_report_field_t *f, const void *msg) {
  if (f->where & PX_REPORT_PHASE) {
    const Prunex__V1__PhaseTimes *ph = ((const Prunex__V1__IterationReport *)msg)->phases;
    return ph ? (const char *)ph + f->proto_offset : NULL;
  }
  return (const char *)msg + f->proto_offset;
}

double px_report_value(const px_report_field_t *f, const void *msg, int *present) {
  const char *p = px__report_at(f, msg);
  double v = 0.0;
  if (p) {
    switch (f->type) {
    case PX_REPORT_I32: v = *(const int32_t *)p; break;
    case PX_REPORT_I64: v = (double)*(const int64_t *)p; break;
    case PX_REPORT_U64: v = (double)*(const uint64_t *)p; break;
    case PX_REPORT_F64: v = *(const double *)p; break;
    case PX_REPORT_BOOL: v = *(const protobuf_c_boolean *)p ? 1.0 : 0.0; break;
    case PX_REPORT_TEXT: break;
    }
  }
  if (present)
    *present = p && (f->presence == PX_REPORT_ALWAYS ||
                     (f->presence == PX_REPORT_NONNEG && v >= 0) ||
                     (f->presence == PX_REPORT_POSITIVE && v > 0));
  return v;
}

/* Joins the text of each field with every flag of where (its name with
 * prefix, or "?N") with ", " into buf. */
static const char *px__report_join(px_report_table_t t, unsigned where, const char *prefix,
                                   int first, char *buf, size_t cap) {
  size_t n = 0;
  int k = 0;
  if (!cap) return NULL;
  buf[0] = '\0';
  for (int i = 0; i < px_report_count(t); i++) {
    const px_report_field_t *f = px_report_field(t, i);
    if ((f->where & where) != where) continue;
    const char *sep = k ? ", " : "";
    int w = prefix ? snprintf(buf + n, cap - n, "%s%s%s", sep, prefix, f->name)
                   : snprintf(buf + n, cap - n, "%s?%d", sep, first + k);
    if (w < 0 || (size_t)w >= cap - n) return NULL;
    n += (size_t)w;
    k++;
  }
  return buf;
}

const char *px_report_columns(px_report_table_t t, unsigned where, const char *prefix, char *buf,
                              size_t cap) {
  return px__report_join(t, where, prefix ? prefix : "", 0, buf, cap);
}

const char *px_report_params(px_report_table_t t, unsigned where, int first, char *buf,
                             size_t cap) {
  return px__report_join(t, where, NULL, first, buf, cap);
}

const char *px_report_insert_sql(px_report_table_t t, unsigned where, const char *table,
                                 const char *head, int nhead, char *buf, size_t cap) {
  char cols[1024], params[512], first[256];
  size_t n = 0;
  first[0] = '\0';
  for (int i = 1; i <= nhead && n < sizeof first; i++)
    n += (size_t)snprintf(first + n, sizeof first - n, "?%d, ", i);
  if (n >= sizeof first || !px_report_columns(t, where, NULL, cols, sizeof cols) ||
      !px_report_params(t, where, nhead + 1, params, sizeof params))
    return NULL;
  int w = snprintf(buf, cap, "INSERT OR REPLACE INTO %s (%s, %s) VALUES (%s%s)", table, head, cols,
                   first, params);
  return w >= 0 && (size_t)w < cap ? buf : NULL;
}

px_status_t px_report_bind(px_report_table_t t, unsigned where, px_store_stmt_t *st, int first,
                           const void *msg) {
  int k = first;
  for (int i = 0; i < px_report_count(t); i++) {
    const px_report_field_t *f = px_report_field(t, i);
    if ((f->where & where) != where) continue;
    const char *p = px__report_at(f, msg);
    if (f->type == PX_REPORT_TEXT) {
      const char *s = p ? *(char *const *)p : NULL;
      PX_CHECK(px_store_bind_text(st, k++, s ? s : ""));
    } else if (f->type == PX_REPORT_F64) {
      PX_CHECK(px_store_bind_double(st, k++, p ? *(const double *)p : 0.0));
    } else {
      int64_t v = 0;
      if (p && f->type == PX_REPORT_I32) v = *(const int32_t *)p;
      else if (p && f->type == PX_REPORT_BOOL) v = *(const protobuf_c_boolean *)p ? 1 : 0;
      else if (p) memcpy(&v, p, sizeof v); /* int64, uint64 */
      PX_CHECK(px_store_bind_int64(st, k++, v));
    }
  }
  return PX_OK;
}

void px_report_read(px_report_table_t t, unsigned where, px_store_stmt_t *st, int first,
                    void *msg, Prunex__V1__PhaseTimes *phases) {
  int c = first;
  for (int i = 0; i < px_report_count(t); i++) {
    const px_report_field_t *f = px_report_field(t, i);
    if ((f->where & where) != where) continue;
    int col = c++;
    char *p = (f->where & PX_REPORT_PHASE) ? (phases ? (char *)phases + f->proto_offset : NULL)
                                           : (char *)msg + f->proto_offset;
    if (!p) continue;
    switch (f->type) {
    case PX_REPORT_I32: *(int32_t *)p = (int32_t)px_store_column_int64(st, col); break;
    case PX_REPORT_I64: *(int64_t *)p = px_store_column_int64(st, col); break;
    case PX_REPORT_U64: *(uint64_t *)p = (uint64_t)px_store_column_int64(st, col); break;
    case PX_REPORT_F64: *(double *)p = px_store_column_double(st, col); break;
    case PX_REPORT_BOOL: *(protobuf_c_boolean *)p = px_store_column_int64(st, col) != 0; break;
    case PX_REPORT_TEXT: *(const char **)p = px_store_column_text(st, col); break;
    }
  }
}

/* ---- CSV ------------------------------------------------------------------------ */

static void px__csv_text(FILE *f, const char *s) {
  fputc('"', f);
  for (const char *p = s ? s : ""; *p; p++) {
    if (*p == '"') fputc('"', f);
    fputc(*p, f);
  }
  fputc('"', f);
}

void px_report_csv_header(px_report_table_t t, int lead, FILE *f) {
  for (int i = 0; i < px_report_count(t); i++) {
    const px_report_field_t *fd = px_report_field(t, i);
    if (!(fd->where & PX_REPORT_CSV)) continue;
    fprintf(f, "%s%s", lead ? "," : "", fd->name);
    lead = 1;
  }
}

void px_report_csv_row(px_report_table_t t, int lead, const void *msg, FILE *f) {
  for (int i = 0; i < px_report_count(t); i++) {
    const px_report_field_t *fd = px_report_field(t, i);
    if (!(fd->where & PX_REPORT_CSV)) continue;
    if (lead) fputc(',', f);
    lead = 1;
    const char *p = px__report_at(fd, msg);
    int present;
    double v = px_report_value(fd, msg, &present);
    if (!present) continue;
    switch (fd->type) {
    case PX_REPORT_TEXT: px__csv_text(f, *(char *const *)p); break;
    case PX_REPORT_F64: fprintf(f, "%.9g", v); break;
    case PX_REPORT_U64: fprintf(f, "%llu", (unsigned long long)*(const uint64_t *)p); break;
    case PX_REPORT_I64: fprintf(f, "%lld", (long long)*(const int64_t *)p); break;
    default: fprintf(f, "%d", (int)v); break; /* int32, bool */
    }
  }
}
