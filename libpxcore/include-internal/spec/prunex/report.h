/* The reports, defined once (docs/metrics.md): one field table for the
 * iteration (prunex.v1.IterationReport with its PhaseTimes) and one for the
 * per-layer figures (prunex.v1.LayerMetrics). Each field is one line: its
 * name (the proto field, the SQL column, the CSV header and the JSON key
 * are all this name), its type and unit, a label for people, where it
 * appears (the coordinator's and the node-local tables, the CSV of `pxctl
 * metrics`, the HTTP API), when it counts as "not measured", its place in
 * the proto message and in the strategy's record, and its Prometheus family
 * where the coordinator exposes it.
 *
 * Everything that spells a report is generated from the tables: the
 * worker's report (px_report_from_iteration), the SQL column lists, binds
 * and reads of both stores, the CSV, the HTTP API's objects and its
 * `fields` description (which the dashboard reads its labels from), and
 * the coordinator's /metrics families. A new figure is one line here, one
 * proto field and one column in each schema (a migration); test_report
 * fails until all of them agree.
 *
 * The tables are constant: nothing here allocates, and the functions are
 * safe on any thread. */
#ifndef PRUNEX_REPORT_H
#define PRUNEX_REPORT_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "prunex.pb-c.h"
#include "prunex/admm.h"
#include "prunex/px.h"
#include "prunex/store.h"
#include "prunex/strategy_table.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef enum {
  PX_REPORT_ITERATION = 0, /* prunex.v1.IterationReport (phases: its PhaseTimes) */
  PX_REPORT_LAYER = 1      /* prunex.v1.LayerMetrics */
} px_report_table_t;

typedef enum {
  PX_REPORT_I32 = 0,  /* int32 */
  PX_REPORT_I64 = 1,  /* int64 */
  PX_REPORT_U64 = 2,  /* uint64 (stored as SQLite's int64) */
  PX_REPORT_F64 = 3,  /* double */
  PX_REPORT_BOOL = 4, /* protobuf_c_boolean (0/1 in SQL and CSV) */
  PX_REPORT_TEXT = 5  /* string */
} px_report_type_t;

/* Where a field appears (a mask of these). */
#define PX_REPORT_COORD 0x01u  /* a column of the coordinator's table */
#define PX_REPORT_AGENT 0x02u  /* a column of the node-local metrics file's table */
#define PX_REPORT_CSV 0x04u    /* a column of `pxctl metrics --csv` */
#define PX_REPORT_JSON 0x08u   /* a key of the HTTP API's objects */
#define PX_REPORT_PHASE 0x10u  /* a field of IterationReport.phases (a PhaseTimes); the
                                  HTTP API nests these under "phases" */
#define PX_REPORT_EVALUATED 0x20u /* measured on some iterations only: /metrics shows
                                     the latest measured value */
#define PX_REPORT_PLOT 0x40u   /* a layer figure the dashboard and `pxctl plot` draw,
                                  one line per layer */

typedef enum {
  PX_REPORT_ALWAYS = 0,   /* every value is a measurement */
  PX_REPORT_NONNEG = 1,   /* negative: not measured (null in JSON, empty in CSV) */
  PX_REPORT_POSITIVE = 2  /* zero or negative: none (null, empty) */
} px_report_presence_t;

typedef struct {
  const char *name;        /* proto field, SQL column, CSV header, JSON key */
  px_report_type_t type;
  const char *unit;        /* "" for plain numbers */
  const char *label;       /* for people: the dashboard's legend */
  unsigned where;          /* PX_REPORT_COORD | ... */
  px_report_presence_t presence;
  size_t proto_offset;     /* in the table's message (PhaseTimes for PX_REPORT_PHASE) */
  ptrdiff_t src_offset;    /* in px_iteration_t (iteration table) or px_admm_layer_report_t
                              (layer table); -1: not there */
  /* Prometheus (the coordinator's /metrics), NULL where not exposed: the
   * family of the latest value (iteration table: rank 0's latest iteration;
   * layer table: the mean over its layers), its help, and the sample's
   * extra label ("phase=\"local\""; NULL: none). Fields that share a family
   * follow each other in the table. */
  const char *metric, *metric_help, *metric_label;
  /* A counter summed over the job's iterations (iteration table), NULL: none. */
  const char *total, *total_help;
} px_report_field_t;

/* Fields of table t, and its field i (NULL when out of range). */
int px_report_count(px_report_table_t t);
const px_report_field_t *px_report_field(px_report_table_t t, int i);
/* The field of t called name, or NULL. */
const px_report_field_t *px_report_find(px_report_table_t t, const char *name);

/* Field f's value in msg (an IterationReport or LayerMetrics as f's table
 * says; a phase field reads msg->phases, 0 without phases) as a double;
 * *present (may be NULL) says whether it was measured (presence rule, and
 * a phase field of a report without phases is not). Text fields read 0. */
double px_report_value(const px_report_field_t *f, const void *msg, int *present);

/* The names of the fields of t that have every flag of `where`, joined by
 * ", " (each prefixed with prefix, e.g. "i."; NULL: none), into buf[cap];
 * returns buf, or NULL when cap is too small. */
const char *px_report_columns(px_report_table_t t, unsigned where, const char *prefix,
                                     char *buf, size_t cap);
/* "?first, ?first+1, ...": one parameter per such field; buf or NULL. */
const char *px_report_params(px_report_table_t t, unsigned where, int first, char *buf,
                                    size_t cap);

/* "INSERT OR REPLACE INTO table (head, <the columns>) VALUES (?1, ...,
 * ?nhead, <their parameters>)": head names the caller's nhead columns
 * (keys and its own), bound first; the table's fields that have every flag
 * of `where` follow (px_report_bind(..., nhead + 1, ...)). Into buf[cap];
 * returns buf, or NULL when cap is too small. */
const char *px_report_insert_sql(px_report_table_t t, unsigned where, const char *table,
                                        const char *head, int nhead, char *buf, size_t cap);

/* Binds msg's fields that have every flag of `where`, in the table's order,
 * to the parameters first, first + 1, ... of st (phase fields: 0 when msg
 * has no phases). Fails with the store's error. */
px_status_t px_report_bind(px_report_table_t t, unsigned where, px_store_stmt_t *st,
                                  int first, const void *msg);

/* Reads the result columns first, first + 1, ... of st's current row (a
 * SELECT of px_report_columns(t, where)) into msg, which the caller has
 * initialised. Phase fields go to *phases, and only when phases is not
 * NULL (the caller sets msg->phases). Text is borrowed from st: valid until
 * st steps or is reset. Cannot fail. */
void px_report_read(px_report_table_t t, unsigned where, px_store_stmt_t *st, int first,
                           void *msg, Prunex__V1__PhaseTimes *phases);

/* CSV (RFC 4180; text quoted, quotes doubled; a value not measured is
 * empty): the names of t's PX_REPORT_CSV fields, and msg's values, each
 * preceded by a comma except the very first when lead is 0. */
void px_report_csv_header(px_report_table_t t, int lead, FILE *f);
void px_report_csv_row(px_report_table_t t, int lead, const void *msg, FILE *f);

/* The iteration as the wire carries it: every field of the table that the
 * strategy's record has, and the phase times into *ph (rep->phases = ph).
 * job_id, rank, time_unix_ms, the layers and checkpoint_problem are the
 * caller's. *rep and *ph are initialised first. Cannot fail. */
void px_report_from_iteration(const px_iteration_t *it, Prunex__V1__IterationReport *rep,
                                     Prunex__V1__PhaseTimes *ph);

/* Layer l of an iteration as the wire carries it: the layer index, its
 * name (it->layer_names[l], "" without names; borrowed from it), its
 * density (it->layer_density[l], -1 without densities) and every figure of
 * it->layers[l] (it->layers must not be NULL). *out is initialised first.
 * Cannot fail. */
void px_layer_metrics_from_iteration(const px_iteration_t *it, int l,
                                            Prunex__V1__LayerMetrics *out);

/* The figures the control policy reads (px_admm_decide) from a reported
 * layer: every field px_admm_layer_report_t has. Cannot fail. */
void px_layer_metrics_to_admm(const Prunex__V1__LayerMetrics *m,
                                     px_admm_layer_report_t *out);

#ifdef __cplusplus
}
#endif
#endif
