/* The check of a spec as a client submitted it (what SubmitJob refuses,
 * before any default is filled in; every point of a sweep is checked so
 * while parsing) and the coordinator's control policy of a spec. Spec-layer
 * code (pxctl links it): it needs only the schema table and
 * policy/admm_policy.c, spec-layer code too; the engine's configurations
 * are strategy/jobspec_translate.c's. */
#include <stdio.h>
#include <string.h>

#include "jobspec/jobspec_int.h"
#include "prunex/admm.h"
#include "prunex/jobspec.h"
#include "px_check.h"

/* ---- a submitted spec ------------------------------------------------------------- */

#define PX__JS_WIRE "spec."

/* The entries of a string list field: each valid UTF-8 text (the other
 * rules of lists are the schema's, checked on the completed copy). */
static px_status_t px__js_wire_list(const void *msg, int fi, const char *path) {
  const ProtobufCFieldDescriptor *fd = px__js_fd(fi);
  size_t n = *(const size_t *)((const char *)msg + fd->quantifier_offset);
  char *const *items = *(char *const *const *)((const char *)msg + fd->offset);
  for (size_t i = 0; i < n; i++)
    if (items[i] && !px_text_ok(items[i]))
      return px_set_error(PX_ERR_INVALID,
                          PX__JS_WIRE "%s[%zu]: not valid UTF-8 text (or holds control "
                                      "characters)",
                          path, i);
  return PX_OK;
}

/* One field as submitted: text is valid UTF-8, a required field is set,
 * and a value other than the proto zero (which takes the default) is legal
 * on its own. */
static px_status_t px__js_wire_field(const Prunex__V1__JobSpec *spec, int fi) {
  const px__js_field_t *f = &px__js_fields[fi];
  char path[64], exp[256], got[96];
  px__js_path(fi, path, sizeof path);
  const void *msg = px__js_msg(spec, fi);
  if (!msg) {
    if (!(f->flags & PX__JS_REQUIRED)) return PX_OK;
    return px_set_error(PX_ERR_INVALID, PX__JS_WIRE "%s: required (section %s is missing)", path,
                        px__js_sections[f->section].key);
  }
  if (f->kind == PX__JS_STRLIST) return px__js_wire_list(msg, fi, path);
  px__js_value_t v;
  px__js_get(msg, fi, &v);
  int text = f->kind == PX__JS_STRING || f->kind == PX__JS_CHOICE || f->kind == PX__JS_MODEL;
  if (text && v.s && !px_text_ok(v.s))
    return px_set_error(PX_ERR_INVALID,
                        PX__JS_WIRE "%s: not valid UTF-8 text (or holds control characters)",
                        path);
  if (px__js_is_zero(fi, &v)) {
    if (!(f->flags & PX__JS_REQUIRED)) return PX_OK; /* unset: the default */
    return px_set_error(PX_ERR_INVALID, PX__JS_WIRE "%s: required, expected %s", path,
                        px__js_expected(fi, exp, sizeof exp));
  }
  if (px__js_value_ok(fi, &v)) return PX_OK;
  px__js_show(fi, &v, got, sizeof got);
  return px_set_error(PX_ERR_INVALID, PX__JS_WIRE "%s: expected %s, got %s", path,
                      px__js_expected(fi, exp, sizeof exp), got);
}

/* The cross-field rules (and the derived defaults) on a completed copy:
 * the spec is stored as the client sent it. */
static px_status_t px__js_wire_complete(const Prunex__V1__JobSpec *spec) {
  size_t n = protobuf_c_message_get_packed_size(&spec->base);
  uint8_t *buf = px_malloc(n ? n : 1, "jobspec.submitted_copy");
  if (!buf) return PX_ERR_NOMEM;
  protobuf_c_message_pack(&spec->base, buf);
  Prunex__V1__JobSpec *copy = prunex__v1__job_spec__unpack(NULL, n, buf);
  px_free(buf);
  /* protobuf-c unpacks some bytes (a field number 0 under a non-canonical
   * tag) whose repacked form it cannot read: such a spec could never be
   * stored and read back (the fuzz case of test_coord_recovery) */
  if (!copy)
    return px_set_error(PX_ERR_INVALID, "spec: cannot be read back once packed (a malformed "
                                        "message)");
  px_status_t st = px_jobspec_fill_defaults(copy);
  if (st == PX_OK) {
    px__js_where_t w;
    memset(&w, 0, sizeof w);
    w.prefix = PX__JS_WIRE;
    st = px__js_check(copy, &w);
  }
  px_jobspec_free(copy);
  return st;
}

px_status_t px_jobspec_check_submitted(const Prunex__V1__JobSpec *spec) {
  if (!spec) return px_set_error(PX_ERR_INVALID, "spec: required");
  for (int i = 0; i < px__js_nfields; i++) PX_CHECK(px__js_wire_field(spec, i));
  PX_CHECK(px__js_wire_complete(spec));
  const Prunex__V1__ModelSpec *m = spec->model;
  if (m->onnx && m->onnx[0] && (!m->onnx_sha256 || !m->onnx_sha256[0]))
    return px_set_error(PX_ERR_INVALID, PX__JS_WIRE "model.onnx_sha256: required with "
                        "model.onnx: the SHA-256 of the file as submitted, so that a job trains "
                        "the file it was given (pxctl computes it from the file)");
  px_admm_policy_t pol;
  px_jobspec_admm_policy(spec, &pol);
  if (px_admm_policy_validate(&pol) != PX_OK) {
    char why[512];
    snprintf(why, sizeof why, "%s", px_last_error());
    return px_set_error(PX_ERR_INVALID, PX__JS_WIRE "%s", why);
  }
  return PX_OK;
}

void px_jobspec_admm_policy(const Prunex__V1__JobSpec *spec, px_admm_policy_t *p) {
  px_admm_policy_defaults(p);
  const Prunex__V1__AdmmSpec *a = spec ? spec->admm : NULL;
  if (!a) return;
  p->adaptive_rho = a->adaptive_rho ? 1 : 0;
  if (a->mu != 0.0) p->mu = a->mu;
  if (a->tau != 0.0) p->tau = a->tau;
  if (a->rho_max != 0.0) p->rho_max = a->rho_max;
  p->freeze_on_stable = a->freeze_on_stable; /* 0: never (proto) */
  p->freeze_iteration = a->freeze_iteration; /* 0: never (proto) */
  if (a->max_iterations != 0) p->max_iterations = a->max_iterations;
  if (a->eps_abs != 0.0) p->eps_abs = a->eps_abs;
  if (a->eps_rel != 0.0) p->eps_rel = a->eps_rel;
  p->stop_on_converged = a->stop_on_converged ? 1 : 0;
  if (a->rho1_ramp > 1.0) p->rho1_ramp = a->rho1_ramp;
}
