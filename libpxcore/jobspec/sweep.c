/* Sweeps: a spec's `sweep:` names fields and the values each
 * takes, and stands for one job per combination. The rules live here once,
 * for the parser (which reports them at file positions), SubmitJob's check
 * of a spec from the wire, and the coordinator's expansion, so a sweep
 * expands the same way wherever it is read. Values are kept as the text
 * the spec wrote and parsed by the very function that parses the field
 * itself (px__js_scalar). */
#include <stdio.h>
#include <string.h>

#include "jobspec/jobspec_int.h"
#include "prunex/jobspec.h"
#include "px_check.h"

_Static_assert(PX_JOBSPEC_SWEEP_AXES == sizeof ((px__js_where_t *)0)->sweep /
                                            sizeof ((px__js_where_t *)0)->sweep[0],
               "px__js_where_t.sweep holds one mark per axis");

int px__js_sweepable(int fi) {
  switch (px__js_fields[fi].kind) {
    case PX__JS_INT:
    case PX__JS_SIZE:
    case PX__JS_DOUBLE:
    case PX__JS_BOOL:
    case PX__JS_CHOICE:
    case PX__JS_STRATEGY:
    case PX__JS_MODEL: return 1;
    default: return 0;
  }
}

/* The mark of axis i (NULL past the marks or on the wire). */
static const px__js_mark_t *px__js_sweep_mark(const px__js_where_t *w, size_t i) {
  return w && i < PX_JOBSPEC_SWEEP_AXES && w->sweep[i].line ? &w->sweep[i] : NULL;
}

/* One axis: a known, sweepable field not swept twice, 1..SWEEP_MAX values,
 * each short, valid text, legal and given once. */
static px_status_t px__js_check_axis(const Prunex__V1__JobSpec *spec, size_t i,
                                     const px__js_where_t *w) {
  const Prunex__V1__SweepAxis *ax = spec->sweep[i];
  const px__js_mark_t *m = px__js_sweep_mark(w, i);
  const char *name = ax && ax->field ? ax->field : "";
  if (!px_text_ok(name) || strlen(name) > 64)
    return px__js_fail(PX_ERR_INVALID, w, m, "sweep[%zu]: not a field name", i);
  int fi = px__js_find(name);
  if (fi < 0)
    return px__js_fail(PX_ERR_INVALID, w, m,
                       "sweep.%s: no such field (a sweep names SECTION.FIELD, e.g. train.lr)",
                       name);
  if (!px__js_sweepable(fi))
    return px__js_fail(PX_ERR_INVALID, w, m,
                       "sweep.%s: only numeric and enum fields may be swept, not text or lists",
                       name);
  for (size_t k = 0; k < i; k++)
    if (spec->sweep[k] && spec->sweep[k]->field && !strcmp(spec->sweep[k]->field, name))
      return px__js_fail(PX_ERR_INVALID, w, m, "sweep.%s: swept twice", name);
  if (ax->n_values == 0 || ax->n_values > PX_JOBSPEC_SWEEP_MAX)
    return px__js_fail(PX_ERR_INVALID, w, m, "sweep.%s: expected a list of 1 to %d values, got %zu",
                       name, PX_JOBSPEC_SWEEP_MAX, ax->n_values);
  char exp[256], hint[96];
  for (size_t v = 0; v < ax->n_values; v++) {
    const char *text = ax->values[v] ? ax->values[v] : "";
    if (strlen(text) > PX_JOBSPEC_SWEEP_VALUE_MAX || !px_text_ok(text))
      return px__js_fail(PX_ERR_INVALID, w, m,
                         "sweep.%s[%zu]: not a value (at most %d bytes of text)", name, v,
                         PX_JOBSPEC_SWEEP_VALUE_MAX);
    px__js_value_t val;
    if (!px__js_scalar(fi, text, &val, hint, sizeof hint))
      return px__js_fail(PX_ERR_INVALID, w, m, "sweep.%s[%zu]: expected %s, got '%s'%s", name, v,
                         px__js_expected(fi, exp, sizeof exp), text, hint);
  }
  /* repeats: sorted order is not needed for at most SWEEP_MAX short values,
   * but a quadratic scan of 1000 would be 500,000 compares: hash instead */
  uint32_t seen[2048] = {0};
  for (size_t v = 0; v < ax->n_values; v++) {
    uint32_t h = 2166136261u;
    for (const char *p = ax->values[v]; *p; p++) h = (h ^ (unsigned char)*p) * 16777619u;
    for (uint32_t s = h & 2047u;; s = (s + 1) & 2047u) {
      if (!seen[s]) {
        seen[s] = (uint32_t)v + 1;
        break;
      }
      if (!strcmp(ax->values[seen[s] - 1], ax->values[v]))
        return px__js_fail(PX_ERR_INVALID, w, m, "sweep.%s[%zu]: '%s' is listed twice", name, v,
                           ax->values[v]);
    }
  }
  return PX_OK;
}

px_status_t px__js_check_sweep(const Prunex__V1__JobSpec *spec, const px__js_where_t *w,
                               size_t *count) {
  if (count) *count = 1;
  if (spec->n_sweep == 0) return PX_OK;
  if (spec->n_sweep > PX_JOBSPEC_SWEEP_AXES)
    return px__js_fail(PX_ERR_INVALID, w, px__js_sweep_mark(w, PX_JOBSPEC_SWEEP_AXES),
                       "sweep: %zu fields, at most %d may be swept", spec->n_sweep,
                       PX_JOBSPEC_SWEEP_AXES);
  size_t n = 1;
  for (size_t i = 0; i < spec->n_sweep; i++) {
    PX_CHECK(px__js_check_axis(spec, i, w));
    n *= spec->sweep[i]->n_values; /* each <= SWEEP_MAX and n <= SWEEP_MAX: no overflow */
    if (n > PX_JOBSPEC_SWEEP_MAX)
      return px__js_fail(PX_ERR_INVALID, w, px__js_sweep_mark(w, i),
                         "sweep: more than %d combinations (at sweep.%s); split the sweep",
                         PX_JOBSPEC_SWEEP_MAX, spec->sweep[i]->field);
  }
  if (count) *count = n;
  return PX_OK;
}

px_status_t px_jobspec_sweep_count(const Prunex__V1__JobSpec *spec, size_t *count) {
  PX_REQUIRE(spec && count, "px_jobspec_sweep_count: NULL argument");
  px__js_where_t w;
  memset(&w, 0, sizeof w);
  w.prefix = "spec.";
  return px__js_check_sweep(spec, &w, count);
}
