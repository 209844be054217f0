/* The per-layer report, defined once (layer_metrics.h): the field table and
 * the conversions it drives between the strategy's iteration record, the
 * prunex.v1.LayerMetrics message and the iteration_layers columns. Offsets
 * come from offsetof on both structs, so a field the proto or the struct
 * lacks does not compile. */
#include <assert.h>
#include <stdio.h>
#include <string.h>

#include "prunex/layer_metrics.h"
#include "px_check.h"

#define PX__LM(f) offsetof(Prunex__V1__LayerMetrics, f)
#define PX__AD(f) ((ptrdiff_t)offsetof(px_admm_layer_report_t, f))
#define PX__F64(f) {#f, PX_LAYER_FIELD_F64, PX__LM(f), PX__AD(f)}

/* In the proto's order (field numbers 1..15). */
static const px_layer_field_t px__layer_fields[] = {
    {"layer", PX_LAYER_FIELD_I32, PX__LM(layer), -1},
    {"name", PX_LAYER_FIELD_TEXT, PX__LM(name), -1},
    PX__F64(r_intra),
    PX__F64(s_intra),
    PX__F64(r_inter),
    PX__F64(s_inter),
    PX__F64(rho1),
    PX__F64(rho2),
    {"density", PX_LAYER_FIELD_F64, PX__LM(density), -1},
    PX__F64(theta_norm),
    PX__F64(zi_norm),
    PX__F64(z_norm),
    PX__F64(u_norm),
    PX__F64(v_norm),
    {"numel", PX_LAYER_FIELD_I64, PX__LM(numel), PX__AD(numel)},
};
#define PX__NFIELDS ((int)(sizeof px__layer_fields / sizeof px__layer_fields[0]))

int px_layer_field_count(void) { return PX__NFIELDS; }

const px_layer_field_t *px_layer_field_at(int i) {
  return i >= 0 && i < PX__NFIELDS ? &px__layer_fields[i] : NULL;
}

/* Copies the fields the admm struct has, one way or the other. */
static void px__layer_copy_admm(void *proto, void *admm, int to_proto) {
  for (int i = 0; i < PX__NFIELDS; i++) {
    const px_layer_field_t *f = &px__layer_fields[i];
    if (f->admm_offset < 0) continue;
    char *p = (char *)proto + f->proto_offset, *a = (char *)admm + f->admm_offset;
    size_t n = f->kind == PX_LAYER_FIELD_F64 ? sizeof(double) : sizeof(int64_t);
    assert(f->kind == PX_LAYER_FIELD_F64 || f->kind == PX_LAYER_FIELD_I64);
    if (to_proto) memcpy(p, a, n);
    else memcpy(a, p, n);
  }
}

void px_layer_metrics_from_iteration(const px_iteration_t *it, int l,
                                     Prunex__V1__LayerMetrics *m) {
  assert(it && it->layers && l >= 0 && l < it->nlayers);
  *m = (Prunex__V1__LayerMetrics)PRUNEX__V1__LAYER_METRICS__INIT;
  m->layer = l;
  m->name = (char *)(it->layer_names && it->layer_names[l] ? it->layer_names[l] : "");
  m->density = it->layer_density ? it->layer_density[l] : -1.0;
  px__layer_copy_admm(m, (void *)&it->layers[l], 1);
}

void px_layer_metrics_to_admm(const Prunex__V1__LayerMetrics *m, px_admm_layer_report_t *out) {
  memset(out, 0, sizeof *out);
  px__layer_copy_admm((void *)m, out, 0);
}

/* Joins each field's text (its name, or "?N") with ", " into buf. */
static const char *px__layer_join(int params, int first, char *buf, size_t cap) {
  size_t n = 0;
  for (int i = 0; i < PX__NFIELDS; i++) {
    const char *sep = i ? ", " : "";
    int k = params ? snprintf(buf + n, cap - n, "%s?%d", sep, first + i)
                   : snprintf(buf + n, cap - n, "%s%s", sep, px__layer_fields[i].name);
    if (k < 0 || (size_t)k >= cap - n) return NULL;
    n += (size_t)k;
  }
  return buf;
}

const char *px_layer_metrics_columns(char *buf, size_t cap) {
  return cap ? px__layer_join(0, 0, buf, cap) : NULL;
}

const char *px_layer_metrics_params(int first, char *buf, size_t cap) {
  return cap ? px__layer_join(1, first, buf, cap) : NULL;
}

px_status_t px_layer_metrics_bind(px_store_stmt_t *st, int first,
                                  const Prunex__V1__LayerMetrics *m) {
  for (int i = 0; i < PX__NFIELDS; i++) {
    const px_layer_field_t *f = &px__layer_fields[i];
    const char *p = (const char *)m + f->proto_offset;
    switch (f->kind) {
      case PX_LAYER_FIELD_I32:
        PX_CHECK(px_store_bind_int64(st, first + i, *(const int32_t *)p));
        break;
      case PX_LAYER_FIELD_I64:
        PX_CHECK(px_store_bind_int64(st, first + i, *(const int64_t *)p));
        break;
      case PX_LAYER_FIELD_F64:
        PX_CHECK(px_store_bind_double(st, first + i, *(const double *)p));
        break;
      case PX_LAYER_FIELD_TEXT: {
        const char *s = *(char *const *)p;
        PX_CHECK(px_store_bind_text(st, first + i, s ? s : ""));
        break;
      }
    }
  }
  return PX_OK;
}

void px_layer_metrics_read(px_store_stmt_t *st, int first, Prunex__V1__LayerMetrics *m) {
  *m = (Prunex__V1__LayerMetrics)PRUNEX__V1__LAYER_METRICS__INIT;
  for (int i = 0; i < PX__NFIELDS; i++) {
    const px_layer_field_t *f = &px__layer_fields[i];
    char *p = (char *)m + f->proto_offset;
    switch (f->kind) {
      case PX_LAYER_FIELD_I32: *(int32_t *)p = (int32_t)px_store_column_int64(st, first + i); break;
      case PX_LAYER_FIELD_I64: *(int64_t *)p = px_store_column_int64(st, first + i); break;
      case PX_LAYER_FIELD_F64: *(double *)p = px_store_column_double(st, first + i); break;
      case PX_LAYER_FIELD_TEXT: *(const char **)p = px_store_column_text(st, first + i); break;
    }
  }
}
