/* The strategy's iteration record (px_iteration_t, px_admm_layer_report_t)
 * to the wire's report and back to the control policy's struct, driven by
 * the report tables' src_offset (prunex/report.h). */
#include <assert.h>
#include <string.h>

#include "prunex/report.h"

/* Copies the fields of table t that src has between the proto message (or
 * its PhaseTimes) and the strategy's struct, one way or the other. Both
 * sides of a field have the same size (test_report checks it). */
static void px__report_copy(px_report_table_t t, void *proto, void *phases, void *src,
                            int to_proto) {
  for (int i = 0; i < px_report_count(t); i++) {
    const px_report_field_t *f = px_report_field(t, i);
    if (f->src_offset < 0) continue;
    char *p = (char *)((f->where & PX_REPORT_PHASE) ? phases : proto) + f->proto_offset;
    char *s = (char *)src + f->src_offset;
    size_t n = f->type == PX_REPORT_I32 || f->type == PX_REPORT_BOOL ? sizeof(int32_t)
                                                                      : sizeof(int64_t);
    assert(f->type != PX_REPORT_TEXT);
    if (to_proto) memcpy(p, s, n);
    else memcpy(s, p, n);
  }
}

void px_report_from_iteration(const px_iteration_t *it, Prunex__V1__IterationReport *rep,
                              Prunex__V1__PhaseTimes *ph) {
  *rep = (Prunex__V1__IterationReport)PRUNEX__V1__ITERATION_REPORT__INIT;
  *ph = (Prunex__V1__PhaseTimes)PRUNEX__V1__PHASE_TIMES__INIT;
  px__report_copy(PX_REPORT_ITERATION, rep, ph, (void *)it, 1);
  rep->frozen = it->frozen != 0;
  rep->phases = ph;
}

void px_layer_metrics_from_iteration(const px_iteration_t *it, int l,
                                     Prunex__V1__LayerMetrics *m) {
  assert(it && it->layers && l >= 0 && l < it->nlayers);
  *m = (Prunex__V1__LayerMetrics)PRUNEX__V1__LAYER_METRICS__INIT;
  m->layer = l;
  m->name = (char *)(it->layer_names && it->layer_names[l] ? it->layer_names[l] : "");
  m->density = it->layer_density ? it->layer_density[l] : -1.0;
  px__report_copy(PX_REPORT_LAYER, m, NULL, (void *)&it->layers[l], 1);
}

void px_layer_metrics_to_admm(const Prunex__V1__LayerMetrics *m, px_admm_layer_report_t *out) {
  memset(out, 0, sizeof *out);
  px__report_copy(PX_REPORT_LAYER, (void *)m, NULL, out, 0);
}
