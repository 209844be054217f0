/* A JobSpec as canonical YAML: the schema's keys in the table's order, every
 * value written out (so a record shows the defaults the job really ran
 * with), strings double-quoted and escaped, doubles in the shortest form
 * that reads back to the same bits. Written by hand rather than with
 * libyaml's emitter because the layout is fixed and small, and so that the
 * output stays stable across libyaml versions. */
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "jobspec/jobspec_int.h"
#include "prunex/jobspec.h"
#include "prunex/strategy_table.h"
#include "px_check.h"

typedef struct {
  char *buf;
  size_t len, cap;
  px_status_t st;
} px__js_out_t;

static void px__js_put(px__js_out_t *o, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void px__js_put(px__js_out_t *o, const char *fmt, ...) {
  if (o->st != PX_OK) return;
  for (;;) {
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(o->buf + o->len, o->cap - o->len, fmt, ap);
    va_end(ap);
    if (n < 0) {
      o->st = px_set_error(PX_ERR_INTERNAL, "job spec: cannot format YAML");
      return;
    }
    if ((size_t)n < o->cap - o->len) {
      o->len += (size_t)n;
      return;
    }
    size_t ncap = o->cap * 2 + (size_t)n;
    char *nb = px_realloc(o->buf, ncap, "jobspec.yaml");
    if (!nb) {
      o->st = PX_ERR_NOMEM;
      return;
    }
    o->buf = nb;
    o->cap = ncap;
  }
}

static void px__js_put_string(px__js_out_t *o, const char *s) {
  px__js_put(o, "\"");
  for (const unsigned char *p = (const unsigned char *)(s ? s : ""); *p; p++) {
    switch (*p) {
      case '"': px__js_put(o, "\\\""); break;
      case '\\': px__js_put(o, "\\\\"); break;
      case '\n': px__js_put(o, "\\n"); break;
      case '\t': px__js_put(o, "\\t"); break;
      case '\r': px__js_put(o, "\\r"); break;
      default:
        if (*p < 0x20 || *p == 0x7f) px__js_put(o, "\\x%02X", *p);
        else px__js_put(o, "%c", *p);
    }
  }
  px__js_put(o, "\"");
}

/* The fewest significant digits that read back as exactly d, in plain
 * notation for magnitudes from 1e-4 to 1e15 (10000, not 1e+04). */
static void px__js_put_double(px__js_out_t *o, double d) {
  char num[40];
  int prec = 1;
  for (; prec < 17; prec++) {
    snprintf(num, sizeof num, "%.*g", prec, d);
    if (strtod(num, NULL) == d) break;
  }
  double mag = fabs(d);
  if (mag >= 1.0 && mag < 1e15) {
    int digits = (int)floor(log10(mag)) + 1;
    if (digits > prec) prec = digits;
  }
  snprintf(num, sizeof num, "%.*g", prec, d);
  px__js_put(o, "%s", num);
}

px_status_t px_jobspec_to_yaml(const Prunex__V1__JobSpec *spec, char **out) {
  PX_REQUIRE(out, "px_jobspec_to_yaml: NULL out");
  *out = NULL;
  PX_REQUIRE(spec, "px_jobspec_to_yaml: NULL spec");
  px__js_out_t o = {.cap = 2048, .st = PX_OK};
  o.buf = px_malloc(o.cap, "jobspec.yaml");
  if (!o.buf) return PX_ERR_NOMEM;
  o.buf[0] = '\0';
  int section = PX__JS_TOP;
  for (int i = 0; i < px__js_nfields; i++) {
    const px__js_field_t *f = &px__js_fields[i];
    const ProtobufCFieldDescriptor *fd = px__js_fd(i);
    if (!fd) {
      o.st = px_set_error(PX_ERR_INTERNAL, "job spec: %s is not in the proto", f->key);
      break;
    }
    if (f->section != section) {
      section = f->section;
      px__js_put(&o, "%s:\n", px__js_sections[section].key);
    }
    px__js_put(&o, "%s%s: ", section == PX__JS_TOP ? "" : "  ", f->key);
    const void *msg = px__js_msg(spec, i);
    px__js_value_t v;
    px__js_get(msg, i, &v);
    switch (f->kind) {
      case PX__JS_INT:
      case PX__JS_SIZE:
        if (v.is_unsigned) px__js_put(&o, "%llu", (unsigned long long)v.u);
        else px__js_put(&o, "%lld", (long long)v.i);
        break;
      case PX__JS_DOUBLE: px__js_put_double(&o, v.d); break;
      case PX__JS_BOOL: px__js_put(&o, "%s", v.i ? "true" : "false"); break;
      case PX__JS_STRATEGY:
        if (px_strategy_info((px_strategy_kind_t)v.i))
          px__js_put(&o, "%s", px_jobspec_strategy_name((Prunex__V1__Strategy)v.i));
        else px__js_put(&o, "%lld", (long long)v.i);
        break;
      case PX__JS_STRLIST: {
        size_t n = msg ? *(const size_t *)((const char *)msg + fd->quantifier_offset) : 0;
        char *const *items = msg ? *(char *const *const *)((const char *)msg + fd->offset) : NULL;
        px__js_put(&o, "[");
        for (size_t k = 0; k < n; k++) {
          if (k) px__js_put(&o, ", ");
          px__js_put_string(&o, items[k]);
        }
        px__js_put(&o, "]");
        break;
      }
      default: px__js_put_string(&o, v.s); break;
    }
    px__js_put(&o, "\n");
  }
  /* a sweep's values as the text they were given in */
  for (size_t i = 0; o.st == PX_OK && i < spec->n_sweep; i++) {
    const Prunex__V1__SweepAxis *ax = spec->sweep[i];
    if (i == 0) px__js_put(&o, "sweep:\n");
    px__js_put(&o, "  %s: [", ax->field);
    for (size_t k = 0; k < ax->n_values; k++) {
      if (k) px__js_put(&o, ", ");
      px__js_put_string(&o, ax->values[k]);
    }
    px__js_put(&o, "]\n");
  }
  if (o.st != PX_OK) {
    px_free(o.buf);
    return o.st;
  }
  *out = o.buf;
  return PX_OK;
}
