/* One per-layer report (DESIGN.md section 7): the figures of one parameter
 * tensor for one outer iteration, defined once for every place that holds
 * them.
 *
 *   the strategy     px_iteration_t: layers[l] (px_admm_layer_report_t:
 *                    residuals, penalties, norms, numel), layer_density[l],
 *                    layer_names[l]
 *   the wire         prunex.v1.LayerMetrics (worker -> coordinator,
 *                    GetIterations)
 *   the stores       the iteration_layers tables of the coordinator's
 *                    database and of the node-local metrics file: one column
 *                    per field, named as the proto field
 *
 * The field table (px_layer_field_at) names each field once, with its type,
 * its place in the proto message and, where the strategy's struct has it,
 * its place there; the conversions and the SQL below are driven by it, so a
 * new figure is one line in the table, one proto field and one column in
 * each schema (a migration: released ones are never edited). test_layer_metrics
 * checks that the table, the proto and both schemas agree. */
#ifndef PRUNEX_LAYER_METRICS_H
#define PRUNEX_LAYER_METRICS_H

#include <stddef.h>
#include <stdint.h>

#include "prunex.pb-c.h"
#include "prunex/admm.h"
#include "prunex/px.h"
#include "prunex/store.h"
#include "prunex/strategy.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef enum {
  PX_LAYER_FIELD_I32 = 0, /* int32: layer */
  PX_LAYER_FIELD_I64 = 1, /* int64: numel */
  PX_LAYER_FIELD_F64 = 2, /* double: residuals, penalties, density, norms */
  PX_LAYER_FIELD_TEXT = 3 /* string: name */
} px_layer_field_kind_t;

typedef struct {
  const char *name;           /* the proto field and the SQLite column */
  px_layer_field_kind_t kind;
  size_t proto_offset;        /* in Prunex__V1__LayerMetrics */
  ptrdiff_t admm_offset;      /* in px_admm_layer_report_t; -1: not there (layer, name,
                                 density: px_iteration_t holds them beside it) */
} px_layer_field_t;

/* Fields of the table, and field i (NULL when out of range). */
PX_API int px_layer_field_count(void);
PX_API const px_layer_field_t *px_layer_field_at(int i);

/* Layer l of an iteration as the wire carries it: the layer index, its
 * name (it->layer_names[l], "" without names; borrowed from it), its
 * density (it->layer_density[l], -1 without densities) and every figure of
 * it->layers[l] (it->layers must not be NULL). *out is initialised first.
 * Cannot fail. */
PX_API void px_layer_metrics_from_iteration(const px_iteration_t *it, int l,
                                            Prunex__V1__LayerMetrics *out);

/* The figures the control policy reads (px_admm_decide) from a reported
 * layer: every field px_admm_layer_report_t has. Cannot fail. */
PX_API void px_layer_metrics_to_admm(const Prunex__V1__LayerMetrics *m,
                                     px_admm_layer_report_t *out);

/* "layer, name, r_intra, ...": the columns in the table's order, into
 * buf[cap]; returns buf, or NULL when cap is too small. */
PX_API const char *px_layer_metrics_columns(char *buf, size_t cap);

/* "?first, ?first+1, ...": one parameter per column, into buf[cap];
 * returns buf, or NULL when cap is too small. */
PX_API const char *px_layer_metrics_params(int first, char *buf, size_t cap);

/* Binds m's fields to the parameters first, first + 1, ... of st, in the
 * table's order (with px_layer_metrics_params(first)). Fails with the
 * store's error. */
PX_API px_status_t px_layer_metrics_bind(px_store_stmt_t *st, int first,
                                         const Prunex__V1__LayerMetrics *m);

/* Reads the result columns first, first + 1, ... of st's current row (a
 * SELECT of px_layer_metrics_columns) into *out, initialised first. The
 * name is borrowed from st: valid until st steps or is reset; copy it.
 * Cannot fail. */
PX_API void px_layer_metrics_read(px_store_stmt_t *st, int first, Prunex__V1__LayerMetrics *out);

#ifdef __cplusplus
}
#endif
#endif
