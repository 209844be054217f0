/* A field's value from its text (px__js_scalar): integers, sizes, numbers,
 * booleans and the names of the schema's choices, with a suggestion for a
 * near miss. The parser reads a spec's fields with it and the sweep its
 * values, so a swept value is read exactly as the field itself. */
#include <ctype.h>
#include <errno.h>
#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "jobspec/jobspec_int.h"
#include "prunex/arch.h"
#include "prunex/jobspec.h"
#include "prunex/strategy_table.h"
#include "px_check.h"

/* ---- scalars ----------------------------------------------------------------- */

static int px__js_int(const char *s, int is_unsigned, px__js_value_t *v) {
  const char *p = s;
  if (*p == '+' || (*p == '-' && !is_unsigned)) p++;
  if (!*p) return 0;
  for (const char *q = p; *q; q++)
    if (!isdigit((unsigned char)*q)) return 0;
  errno = 0;
  char *end;
  if (is_unsigned) {
    unsigned long long u = strtoull(s, &end, 10);
    if (errno || *end) return 0;
    v->u = u;
    v->is_unsigned = 1;
  } else {
    long long i = strtoll(s, &end, 10);
    if (errno || *end) return 0;
    v->i = i;
  }
  return 1;
}

static int px__js_double(const char *s, double *out) {
  /* decimal notation only: no hex floats, inf or nan words */
  if (!*s) return 0;
  for (const char *q = s; *q; q++)
    if (!strchr("0123456789+-.eE", *q)) return 0;
  errno = 0;
  char *end;
  double d = strtod(s, &end);
  if (end == s || *end || errno == ERANGE || !isfinite(d)) return 0;
  *out = d;
  return 1;
}

static int px__js_bool(const char *s, int64_t *out) {
  static const char *const yes[] = {"true", "yes", "on"}, *const no[] = {"false", "no", "off"};
  for (int i = 0; i < 3; i++) {
    if (!strcasecmp(s, yes[i])) return (*out = 1), 1;
    if (!strcasecmp(s, no[i])) return (*out = 0), 1;
  }
  return 0;
}

/* "33554432", "32MiB", "4 KB", "0.5GiB": a whole number of bytes. */
static int px__js_size(const char *s, int64_t *out) {
  size_t i = 0, digits = 0;
  while (isdigit((unsigned char)s[i])) i++, digits++;
  if (s[i] == '.') {
    i++;
    while (isdigit((unsigned char)s[i])) i++, digits++;
  }
  if (!digits || i > 24) return 0;
  char num[32];
  memcpy(num, s, i);
  num[i] = '\0';
  double x = strtod(num, NULL);
  const char *u = s + i;
  while (*u == ' ') u++;
  static const struct {
    const char *unit;
    double mult;
  } units[] = {{"", 1},         {"B", 1},          {"KB", 1e3},          {"MB", 1e6},
               {"GB", 1e9},     {"KiB", 1024.0},   {"MiB", 1048576.0},   {"GiB", 1073741824.0}};
  for (size_t k = 0; k < sizeof units / sizeof units[0]; k++) {
    if (strcasecmp(u, units[k].unit) != 0) continue;
    if (!units[k].unit[0] && u != s + i) return 0; /* "32 " */
    x *= units[k].mult;
    if (x > 9007199254740992.0 || x != floor(x)) return 0;
    *out = (int64_t)x;
    return 1;
  }
  return 0;
}

/* ---- suggestions --------------------------------------------------------------- */

static int px__js_close(const char *typed, const char *known) {
  size_t n = strlen(known);
  int limit = n >= 9 ? 3 : n >= 6 ? 2 : 1;
  return px__js_distance(typed, known) <= limit;
}

/* " (did you mean 'x'?)" for the closest of the '|' or ' ' separated words. */
void px__js_suggest_word(const char *typed, const char *words, char sep, char *buf,
                         size_t cap) {
  buf[0] = '\0';
  int best = 1 << 20;
  char word[64], pick[64] = "";
  for (const char *p = words; *p;) {
    const char *e = strchr(p, sep);
    size_t n = e ? (size_t)(e - p) : strlen(p);
    if (n < sizeof word) {
      memcpy(word, p, n);
      word[n] = '\0';
      int d = px__js_distance(typed, word);
      if (d < best && px__js_close(typed, word)) {
        best = d;
        memcpy(pick, word, n + 1);
      }
    }
    if (!e) break;
    p = e + 1;
  }
  if (pick[0]) snprintf(buf, cap, " (did you mean '%s'?)", pick);
}

int px__js_scalar(int fi, const char *text, px__js_value_t *v, char *hint, size_t hcap) {
  const px__js_field_t *f = &px__js_fields[fi];
  const ProtobufCFieldDescriptor *fd = px__js_fd(fi);
  memset(v, 0, sizeof *v);
  if (hcap) hint[0] = '\0';
  if (!fd) return 0;
  int ok = 1;
  switch (f->kind) {
    case PX__JS_INT: ok = px__js_int(text, fd->type == PROTOBUF_C_TYPE_UINT64, v); break;
    case PX__JS_SIZE: ok = px__js_size(text, &v->i); break;
    case PX__JS_DOUBLE: ok = px__js_double(text, &v->d); break;
    case PX__JS_BOOL: ok = px__js_bool(text, &v->i); break;
    case PX__JS_STRATEGY: {
      char names[128];
      v->i = (int64_t)px_strategy_lookup(text);
      if (!v->i && hcap)
        px__js_suggest_word(text, px_strategy_names(names, sizeof names, " "), ' ', hint, hcap);
      break;
    }
    case PX__JS_CHOICE:
      v->s = text;
      if (!px__js_value_ok(fi, v) && hcap)
        px__js_suggest_word(text, f->choices, '|', hint, hcap);
      break;
    case PX__JS_MODEL:
      v->s = text;
      if (!px__js_value_ok(fi, v) && hcap)
        px__js_suggest_word(text, px_model_arch_list(), ' ', hint, hcap);
      break;
    default: v->s = text; break;
  }
  return ok && px__js_value_ok(fi, v);
}
