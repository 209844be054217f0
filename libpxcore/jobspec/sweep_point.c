/* One combination of a spec's sweep as a spec of its own
 * (px_jobspec_sweep_point): the coordinator's expansion, each point
 * checked as a submitted spec is. The sweep's rules are sweep.c's. */
#include <stdio.h>
#include <string.h>

#include "jobspec/jobspec_int.h"
#include "prunex/jobspec.h"
#include "px_check.h"

/* A deep copy of spec without its sweep (protobuf-c's allocator). */
static px_status_t px__js_copy_unswept(const Prunex__V1__JobSpec *spec,
                                       Prunex__V1__JobSpec **out) {
  Prunex__V1__JobSpec shallow = *spec;
  shallow.n_sweep = 0;
  shallow.sweep = NULL;
  size_t n = protobuf_c_message_get_packed_size(&shallow.base);
  uint8_t *buf = px_malloc(n ? n : 1, "jobspec.sweep_copy");
  if (!buf) return PX_ERR_NOMEM;
  protobuf_c_message_pack(&shallow.base, buf);
  *out = prunex__v1__job_spec__unpack(NULL, n, buf);
  px_free(buf);
  if (!*out)
    return px_set_error(PX_ERR_INVALID, "spec: cannot be read back once packed (a malformed "
                                        "message)");
  return PX_OK;
}

px_status_t px_jobspec_sweep_point(const Prunex__V1__JobSpec *spec, size_t k,
                                   Prunex__V1__JobSpec **out, char *label, size_t cap) {
  PX_REQUIRE(spec && out, "px_jobspec_sweep_point: NULL argument");
  *out = NULL;
  if (label && cap) label[0] = '\0';
  size_t count;
  PX_CHECK(px_jobspec_sweep_count(spec, &count));
  PX_REQUIRE(k < count, "px_jobspec_sweep_point: combination %zu of %zu", k, count);
  Prunex__V1__JobSpec *p = NULL;
  PX_CHECK(px__js_copy_unswept(spec, &p));
  px_status_t st = px_jobspec_fill_defaults(p);
  char lab[PX_JOBSPEC_SWEEP_AXES * (64 + PX_JOBSPEC_SWEEP_VALUE_MAX + 3) + 1] = "";
  size_t used = 0;
  /* the index in mixed radix, the last axis fastest */
  size_t rest = k, stride = count;
  for (size_t i = 0; st == PX_OK && i < spec->n_sweep; i++) {
    const Prunex__V1__SweepAxis *ax = spec->sweep[i];
    stride /= ax->n_values;
    const char *text = ax->values[rest / stride];
    rest %= stride;
    int fi = px__js_find(ax->field);
    px__js_value_t v;
    px__js_scalar(fi, text, &v, NULL, 0); /* legal: px_jobspec_sweep_count checked it */
    st = px__js_set(px__js_msg(p, fi), fi, &v);
    used += (size_t)snprintf(lab + used, sizeof lab - used, "%s%s=%s", i ? ", " : "", ax->field,
                             text);
  }
  if (st == PX_OK && px_jobspec_check_submitted(p) != PX_OK) {
    char why[512];
    snprintf(why, sizeof why, "%s", px_last_error());
    st = px_set_error(PX_ERR_INVALID, "spec.sweep: the combination %s: %s", lab, why);
  }
  if (st != PX_OK) {
    px_jobspec_free(p);
    return st;
  }
  if (label && cap) snprintf(label, cap, "%s", lab);
  *out = p;
  return PX_OK;
}
