/* Job spec YAML to prunex.v1.JobSpec. libyaml composes the document (so
 * syntax errors come with its positions), then one walk over the top-level
 * mapping and the section mappings fills a spec that starts with every
 * default, refusing unknown and duplicate keys, wrong node types and values
 * out of range at the key they belong to, and finally the cross-field
 * checks run with the position of every key that was written. */
#include <ctype.h>
#include <errno.h>
#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include <yaml.h>

#include "jobspec/jobspec_int.h"
#include "prunex/arch.h"
#include "prunex/image.h"
#include "prunex/jobspec.h"
#include "prunex/strategy_table.h"
#include "px_check.h"

/* A job spec is a few KiB; anything this large is the wrong file. */
#define PX__JS_MAX_FILE (1u << 20)

typedef struct {
  px__js_where_t w;
  yaml_document_t *doc;
  Prunex__V1__JobSpec *spec;
  const char *name;          /* name_for_errors as given (may be NULL) */
  int given[PX__JS_MAX_FIELDS]; /* a non-null value was written */
} px__js_parse_t;

static px__js_mark_t px__js_at(const yaml_node_t *n) {
  return (px__js_mark_t){n->start_mark.line + 1, n->start_mark.column + 1};
}

static const char *px__js_node_kind(const yaml_node_t *n) {
  switch (n->type) {
    case YAML_MAPPING_NODE: return "a mapping";
    case YAML_SEQUENCE_NODE: return "a list";
    default: return "a scalar";
  }
}

/* Empty, ~ and null (plain, not quoted) mean "the default". */
static int px__js_is_null(const yaml_node_t *n) {
  if (n->type != YAML_SCALAR_NODE || n->data.scalar.style != YAML_PLAIN_SCALAR_STYLE) return 0;
  const char *s = (const char *)n->data.scalar.value;
  size_t len = n->data.scalar.length;
  return len == 0 || (len == 1 && s[0] == '~') ||
         (len == 4 && (!memcmp(s, "null", 4) || !memcmp(s, "Null", 4) || !memcmp(s, "NULL", 4)));
}

/* The scalar's text for a message: at most 40 characters, non-printable
 * bytes shown as '?'. */
static const char *px__js_quote(const char *s, char *buf, size_t cap) {
  size_t n = 0, i = 0;
  for (; s[i] && n + 4 < cap && i < 40; i++)
    buf[n++] = (s[i] >= 0x20 && s[i] < 0x7f) || (unsigned char)s[i] >= 0x80 ? s[i] : '?';
  if (s[i] && n + 4 <= cap) {
    memcpy(buf + n, "...", 3);
    n += 3;
  }
  buf[n] = '\0';
  return buf;
}

/* For an unknown key in section sec (PX__JS_TOP: top level): the closest key
 * there, else the same key in another section, else the list of keys. */
static void px__js_suggest_key(int sec, const char *typed, char *buf, size_t cap) {
  char words[512] = "";
  size_t n = 0;
  for (int i = 0; i < px__js_nfields; i++)
    if (px__js_fields[i].section == sec)
      n += (size_t)snprintf(words + n, sizeof words - n, "%s%s", n ? " " : "",
                            px__js_fields[i].key);
  if (sec == PX__JS_TOP)
    for (int s = 0; s < px__js_nsections; s++)
      n += (size_t)snprintf(words + n, sizeof words - n, " %s", px__js_sections[s].key);
  px__js_suggest_word(typed, words, ' ', buf, cap);
  if (buf[0]) return;
  char path[64];
  for (int i = 0; i < px__js_nfields; i++) {
    if (px__js_fields[i].section != sec && !strcmp(px__js_fields[i].key, typed)) {
      if (px__js_fields[i].section == PX__JS_TOP)
        snprintf(buf, cap, " ('%s' is a top-level key, not part of %s)", typed,
                 px__js_sections[sec].key);
      else snprintf(buf, cap, " (did you mean '%s'?)", px__js_path(i, path, sizeof path));
      return;
    }
  }
  if (sec != PX__JS_TOP && px__js_section_find(typed) >= 0) {
    snprintf(buf, cap, " (did you mean the top-level section '%s'?)", typed);
    return;
  }
  snprintf(buf, cap, " (known keys: ");
  for (const char *p = words; *p; p++) {
    size_t len = strlen(buf);
    if (len + 3 >= cap) break;
    if (*p == ' ') snprintf(buf + len, cap - len, ", ");
    else snprintf(buf + len, cap - len, "%c", *p);
  }
  size_t len = strlen(buf);
  if (len + 2 < cap) snprintf(buf + len, cap - len, ")");
}

/* ---- the walk ---------------------------------------------------------------------- */

static px_status_t px__js_key(px__js_parse_t *P, const yaml_node_t *k, const char **out) {
  px__js_mark_t m = px__js_at(k);
  if (k->type != YAML_SCALAR_NODE)
    return px__js_fail(PX_ERR_INVALID, &P->w, &m, "a key must be a plain name, got %s",
                       px__js_node_kind(k));
  *out = (const char *)k->data.scalar.value;
  if (strlen(*out) != k->data.scalar.length)
    return px__js_fail(PX_ERR_INVALID, &P->w, &m, "a key contains a NUL character");
  return PX_OK;
}

static px_status_t px__js_list(px__js_parse_t *P, int fi, const yaml_node_t *key,
                               const yaml_node_t *val) {
  char path[64], q[64];
  px__js_mark_t km = px__js_at(key);
  px__js_path(fi, path, sizeof path);
  if (val->type != YAML_SEQUENCE_NODE) {
    if (val->type == YAML_SCALAR_NODE)
      return px__js_fail(PX_ERR_INVALID, &P->w, &km,
                         "%s: expected a list of parameter names (e.g. [conv1.weight]), got '%s'",
                         path, px__js_quote((const char *)val->data.scalar.value, q, sizeof q));
    return px__js_fail(PX_ERR_INVALID, &P->w, &km,
                       "%s: expected a list of parameter names, got %s", path,
                       px__js_node_kind(val));
  }
  size_t n = (size_t)(val->data.sequence.items.top - val->data.sequence.items.start);
  char **items = calloc(n ? n : 1, sizeof *items);
  if (!items) return px_set_error(PX_ERR_NOMEM, "job spec: out of memory");
  px_status_t st = PX_OK;
  size_t got = 0;
  for (; got < n; got++) {
    yaml_node_t *it = yaml_document_get_node(P->doc, val->data.sequence.items.start[got]);
    px__js_mark_t im = px__js_at(it);
    if (it->type != YAML_SCALAR_NODE || px__js_is_null(it)) {
      st = px__js_fail(PX_ERR_INVALID, &P->w, &im,
                       "%s[%zu]: expected a parameter name (e.g. conv1.weight), got %s", path, got,
                       it->type == YAML_SCALAR_NODE ? "nothing" : px__js_node_kind(it));
      break;
    }
    const char *s = (const char *)it->data.scalar.value;
    if (strlen(s) != it->data.scalar.length) {
      st = px__js_fail(PX_ERR_INVALID, &P->w, &im, "%s[%zu]: contains a NUL character", path, got);
      break;
    }
    items[got] = px__js_strndup(s, strlen(s));
    if (!items[got]) {
      st = px_set_error(PX_ERR_NOMEM, "job spec: out of memory");
      break;
    }
    char why[160];
    int bad = px__js_list_bad(items, got + 1, why, sizeof why);
    if (bad >= 0) {
      got++;
      st = px__js_fail(PX_ERR_INVALID, &P->w, &im, "%s[%d]: %s", path, bad, why);
      break;
    }
  }
  if (st != PX_OK) {
    for (size_t i = 0; i < got; i++) free(items[i]);
    free(items);
    return st;
  }
  Prunex__V1__PruneSpec *pr = P->spec->prune; /* the only list of the schema */
  for (size_t i = 0; i < pr->n_skip_layers; i++) free(pr->skip_layers[i]);
  free(pr->skip_layers);
  pr->skip_layers = items;
  pr->n_skip_layers = n;
  P->given[fi] = 1;
  return PX_OK;
}

static px_status_t px__js_field(px__js_parse_t *P, int fi, const yaml_node_t *key,
                                const yaml_node_t *val) {
  const px__js_field_t *f = &px__js_fields[fi];
  char path[64], exp[256], q[64], hint[96] = "";
  px__js_mark_t km = px__js_at(key);
  px__js_path(fi, path, sizeof path);
  if (px__js_is_null(val)) return PX_OK;
  if (f->kind == PX__JS_STRLIST) return px__js_list(P, fi, key, val);
  if (val->type != YAML_SCALAR_NODE)
    return px__js_fail(PX_ERR_INVALID, &P->w, &km, "%s: expected %s, got %s", path,
                       px__js_expected(fi, exp, sizeof exp), px__js_node_kind(val));
  const char *text = (const char *)val->data.scalar.value;
  if (strlen(text) != val->data.scalar.length)
    return px__js_fail(PX_ERR_INVALID, &P->w, &km, "%s: the value contains a NUL character", path);
  if (!px__js_fd(fi)) return px_set_error(PX_ERR_INTERNAL, "job spec: %s is not in the proto", path);
  px__js_value_t v;
  if (!px__js_scalar(fi, text, &v, hint, sizeof hint))
    return px__js_fail(PX_ERR_INVALID, &P->w, &km, "%s: expected %s, got '%s'%s", path,
                       px__js_expected(fi, exp, sizeof exp), px__js_quote(text, q, sizeof q),
                       hint);
  PX_CHECK(px__js_set(px__js_msg(P->spec, fi), fi, &v));
  P->given[fi] = 1;
  return PX_OK;
}

static px_status_t px__js_duplicate(px__js_parse_t *P, const yaml_node_t *k, const char *what,
                                    const px__js_mark_t *first) {
  px__js_mark_t m = px__js_at(k);
  return px__js_fail(PX_ERR_INVALID, &P->w, &m, "duplicate key '%s' (first at line %zu)", what,
                     first->line);
}

/* The member k: v of section s (PX__JS_TOP or a section, skey its name or
 * NULL at top level), name the text of k: an unknown key (with a hint) or one
 * given twice is an error; else records where it stands and parses v. */
static px_status_t px__js_member(px__js_parse_t *P, int s, const char *skey, const yaml_node_t *k,
                                 const char *name, const yaml_node_t *v) {
  int fi = -1;
  for (int i = 0; i < px__js_nfields; i++)
    if (px__js_fields[i].section == s && !strcmp(px__js_fields[i].key, name)) fi = i;
  if (fi < 0) {
    char hint[384], q[64];
    px__js_mark_t m = px__js_at(k);
    px__js_suggest_key(s, name, hint, sizeof hint);
    return px__js_fail(PX_ERR_INVALID, &P->w, &m, "unknown key '%s' %s%s%s",
                       px__js_quote(name, q, sizeof q), skey ? "in " : "at top level",
                       skey ? skey : "", hint);
  }
  char path[64];
  if (P->w.field[fi].line)
    return px__js_duplicate(P, k, px__js_path(fi, path, sizeof path), &P->w.field[fi]);
  P->w.field[fi] = px__js_at(k);
  return px__js_field(P, fi, k, v);
}

static px_status_t px__js_section(px__js_parse_t *P, int s, const yaml_node_t *key,
                                  const yaml_node_t *val) {
  const char *skey = px__js_sections[s].key;
  if (px__js_is_null(val)) return PX_OK;
  if (val->type != YAML_MAPPING_NODE) {
    px__js_mark_t km = px__js_at(key);
    char q[64];
    if (val->type == YAML_SCALAR_NODE)
      return px__js_fail(PX_ERR_INVALID, &P->w, &km,
                         "%s: expected a mapping of %s settings, got '%s'", skey, skey,
                         px__js_quote((const char *)val->data.scalar.value, q, sizeof q));
    return px__js_fail(PX_ERR_INVALID, &P->w, &km, "%s: expected a mapping of %s settings, got %s",
                       skey, skey, px__js_node_kind(val));
  }
  for (yaml_node_pair_t *p = val->data.mapping.pairs.start; p < val->data.mapping.pairs.top; p++) {
    yaml_node_t *k = yaml_document_get_node(P->doc, p->key);
    yaml_node_t *v = yaml_document_get_node(P->doc, p->value);
    const char *name = NULL;
    PX_CHECK(px__js_key(P, k, &name));
    PX_CHECK(px__js_member(P, s, skey, k, name, v));
  }
  return PX_OK;
}

/* `sweep:` is a mapping of field paths to lists of scalars, kept
 * as text in spec->sweep; their rules are checked with the spec's
 * (px__js_check_sweep), at the positions recorded here. */
static px_status_t px__js_sweep_axis(px__js_parse_t *P, const yaml_node_t *k,
                                     const yaml_node_t *v, Prunex__V1__SweepAxis *ax) {
  px__js_mark_t km = px__js_at(k);
  const char *name = NULL;
  PX_CHECK(px__js_key(P, k, &name));
  ax->field = px__js_strndup(name, strlen(name));
  if (!ax->field) return px_set_error(PX_ERR_NOMEM, "job spec: out of memory");
  if (v->type != YAML_SEQUENCE_NODE)
    return px__js_fail(PX_ERR_INVALID, &P->w, &km,
                       "sweep.%s: expected a list of values (e.g. [0.3, 0.5]), got %s", name,
                       v->type == YAML_SCALAR_NODE ? "one value" : px__js_node_kind(v));
  size_t n = (size_t)(v->data.sequence.items.top - v->data.sequence.items.start);
  if (n > PX_JOBSPEC_SWEEP_MAX)
    return px__js_fail(PX_ERR_INVALID, &P->w, &km, "sweep.%s: %zu values, at most %d", name, n,
                       PX_JOBSPEC_SWEEP_MAX);
  ax->values = calloc(n ? n : 1, sizeof *ax->values);
  if (!ax->values) return px_set_error(PX_ERR_NOMEM, "job spec: out of memory");
  for (size_t i = 0; i < n; i++) {
    yaml_node_t *it = yaml_document_get_node(P->doc, v->data.sequence.items.start[i]);
    px__js_mark_t im = px__js_at(it);
    if (it->type != YAML_SCALAR_NODE || px__js_is_null(it) ||
        strlen((const char *)it->data.scalar.value) != it->data.scalar.length)
      return px__js_fail(PX_ERR_INVALID, &P->w, &im, "sweep.%s[%zu]: expected a value, got %s",
                         name, i, it->type == YAML_SCALAR_NODE ? "nothing" : px__js_node_kind(it));
    const char *text = (const char *)it->data.scalar.value;
    ax->values[i] = px__js_strndup(text, strlen(text));
    if (!ax->values[i]) return px_set_error(PX_ERR_NOMEM, "job spec: out of memory");
    ax->n_values = i + 1;
  }
  return PX_OK;
}

static px_status_t px__js_sweep(px__js_parse_t *P, const yaml_node_t *key,
                                const yaml_node_t *val) {
  px__js_mark_t km = px__js_at(key);
  if (px__js_is_null(val)) return PX_OK;
  if (val->type != YAML_MAPPING_NODE)
    return px__js_fail(PX_ERR_INVALID, &P->w, &km,
                       "sweep: expected a mapping of fields to lists of values (e.g. train.lr: "
                       "[0.05, 0.1]), got %s",
                       px__js_node_kind(val));
  size_t n = (size_t)(val->data.mapping.pairs.top - val->data.mapping.pairs.start);
  if (n > PX_JOBSPEC_SWEEP_AXES)
    return px__js_fail(PX_ERR_INVALID, &P->w, &km, "sweep: %zu fields, at most %d may be swept",
                       n, PX_JOBSPEC_SWEEP_AXES);
  Prunex__V1__JobSpec *spec = P->spec;
  spec->sweep = calloc(n ? n : 1, sizeof *spec->sweep);
  if (!spec->sweep) return px_set_error(PX_ERR_NOMEM, "job spec: out of memory");
  for (size_t i = 0; i < n; i++) {
    yaml_node_pair_t *p = &val->data.mapping.pairs.start[i];
    Prunex__V1__SweepAxis *ax = malloc(sizeof *ax);
    if (!ax) return px_set_error(PX_ERR_NOMEM, "job spec: out of memory");
    prunex__v1__sweep_axis__init(ax);
    spec->sweep[spec->n_sweep++] = ax;
    const yaml_node_t *k = yaml_document_get_node(P->doc, p->key);
    P->w.sweep[i] = px__js_at(k);
    PX_CHECK(px__js_sweep_axis(P, k, yaml_document_get_node(P->doc, p->value), ax));
  }
  return PX_OK;
}

/* Every combination of the sweep is a spec a rank could run. */
static px_status_t px__js_sweep_points(px__js_parse_t *P) {
  size_t n = 1;
  PX_CHECK(px__js_check_sweep(P->spec, &P->w, &n));
  for (size_t k = 0; P->spec->n_sweep && k < n; k++) {
    Prunex__V1__JobSpec *pt = NULL;
    if (px_jobspec_sweep_point(P->spec, k, &pt, NULL, 0) != PX_OK) {
      char why[512];
      snprintf(why, sizeof why, "%s", px_last_error());
      return px__js_fail(PX_ERR_INVALID, &P->w, &P->w.sweep[0], "%s", why);
    }
    px_jobspec_free(pt);
  }
  return PX_OK;
}

static px_status_t px__js_top(px__js_parse_t *P, const yaml_node_t *root) {
  px__js_mark_t rm = px__js_at(root);
  /* an empty document: point at its start ("---"), not past it */
  px__js_mark_t dm = {P->doc->start_mark.line + 1, P->doc->start_mark.column + 1};
  if (px__js_is_null(root))
    return px__js_fail(PX_ERR_INVALID, &P->w, &dm,
                       "the job spec is empty (expected a mapping with model, dataset, cluster, "
                       "strategy, train, ...; {} takes every default)");
  if (root->type != YAML_MAPPING_NODE)
    return px__js_fail(PX_ERR_INVALID, &P->w, &rm,
                       "expected a mapping at top level (model:, dataset:, ...), got %s",
                       px__js_node_kind(root));
  for (yaml_node_pair_t *p = root->data.mapping.pairs.start; p < root->data.mapping.pairs.top;
       p++) {
    yaml_node_t *k = yaml_document_get_node(P->doc, p->key);
    yaml_node_t *v = yaml_document_get_node(P->doc, p->value);
    const char *name = NULL;
    PX_CHECK(px__js_key(P, k, &name));
    if (!strcmp(name, "sweep")) {
      if (P->w.sweep_key.line) return px__js_duplicate(P, k, name, &P->w.sweep_key);
      P->w.sweep_key = px__js_at(k);
      PX_CHECK(px__js_sweep(P, k, v));
      continue;
    }
    int s = px__js_section_find(name);
    if (s >= 0) {
      if (P->w.section[s].line) return px__js_duplicate(P, k, name, &P->w.section[s]);
      P->w.section[s] = px__js_at(k);
      PX_CHECK(px__js_section(P, s, k, v));
      continue;
    }
    PX_CHECK(px__js_member(P, PX__JS_TOP, NULL, k, name, v));
  }
  return PX_OK;
}

/* The default job name: the file's name without directory and .yaml/.yml,
 * when that is a plain name; else "job". */
static px_status_t px__js_default_name(px__js_parse_t *P) {
  char stem[129] = "job";
  if (P->name) {
    const char *b = strrchr(P->name, '/');
    b = b ? b + 1 : P->name;
    size_t n = strlen(b);
    if (n > 5 && !strcmp(b + n - 5, ".yaml")) n -= 5;
    else if (n > 4 && !strcmp(b + n - 4, ".yml")) n -= 4;
    int plain = n >= 1 && n < sizeof stem;
    for (size_t i = 0; plain && i < n; i++)
      plain = isalnum((unsigned char)b[i]) || b[i] == '-' || b[i] == '_' || b[i] == '.';
    if (plain) {
      memcpy(stem, b, n);
      stem[n] = '\0';
    }
  }
  px__js_value_t v = {.s = stem};
  return px__js_set(P->spec, px__js_find("name"), &v);
}

/* model.onnx: a relative path is the spec file's neighbour, made absolute
 * here (the workers run elsewhere); model.name defaults to "onnx". */
static px_status_t px__js_onnx_path(px__js_parse_t *P) {
  int fo = px__js_find("model.onnx"), fn = px__js_find("model.name");
  const char *o = P->spec->model->onnx;
  if (!P->given[fo] || !o[0]) return PX_OK;
  if (!P->given[fn]) {
    px__js_value_t v = {.s = "onnx"};
    PX_CHECK(px__js_set(P->spec->model, fn, &v));
  }
  if (o[0] == '/') return PX_OK;
  char joined[4096], full[PATH_MAX];
  const char *slash = P->name ? strrchr(P->name, '/') : NULL;
  int n = slash ? snprintf(joined, sizeof joined, "%.*s/%s", (int)(slash - P->name), P->name, o)
                : snprintf(joined, sizeof joined, "%s", o);
  if (n < 0 || (size_t)n >= sizeof joined || !realpath(joined, full))
    return px__js_fail(PX_ERR_INVALID, &P->w, &P->w.field[fo],
                       "model.onnx: '%.200s' (relative to the spec's directory): %s", o,
                       n < 0 || (size_t)n >= sizeof joined ? "too long" : strerror(errno));
  px__js_value_t v = {.s = full};
  return px__js_set(P->spec->model, fo, &v);
}

/* A folder job on an imported model: dataset.image_size and dataset.channels
 * left out of the spec are the graph's input (a square one, a side the cache
 * takes; 1 or 3 channels), so that a 224 x 224 network needs no size said
 * twice. A file that cannot be read is left to px__js_check_onnx to report. */
static px_status_t px__js_onnx_input(px__js_parse_t *P) {
  const Prunex__V1__JobSpec *s = P->spec;
  int fs = px__js_find("dataset.image_size"), fc = px__js_find("dataset.channels");
  px_model_onnx_info_t info;
  if (!s->model->onnx || !s->model->onnx[0] || strcmp(s->dataset->name, "folder") ||
      (P->given[fs] && P->given[fc]) || px_model_onnx_check(s->model->onnx, &info) != PX_OK)
    return PX_OK;
  px__js_value_t v = {0};
  if (!P->given[fs] && info.height == info.width && info.height >= 8 &&
      info.height <= PX_IMAGE_MAX_SIZE) {
    v.i = info.height;
    PX_CHECK(px__js_set(s->dataset, fs, &v));
  }
  if (!P->given[fc] && (info.in_channels == 1 || info.in_channels == 3)) {
    v.i = info.in_channels;
    PX_CHECK(px__js_set(s->dataset, fc, &v));
  }
  return PX_OK;
}

static px_status_t px__js_yaml_error(px__js_parse_t *P, const yaml_parser_t *yp, const char *text,
                                     size_t len) {
  if (yp->error == YAML_MEMORY_ERROR)
    return px_set_error(PX_ERR_NOMEM, "%s: out of memory parsing YAML", P->w.file);
  px__js_mark_t m = {yp->problem_mark.line + 1, yp->problem_mark.column + 1};
  char extra[160] = "";
  if (yp->error == YAML_READER_ERROR) {
    /* the reader reports a byte offset, not a mark */
    m = (px__js_mark_t){1, 1};
    for (size_t i = 0; i < yp->problem_offset && i < len; i++) {
      if (text[i] == '\n') m.line++, m.col = 1;
      else m.col++;
    }
    if (yp->problem_value != -1) snprintf(extra, sizeof extra, " (byte 0x%02X)", yp->problem_value);
  } else if (yp->problem_mark.index < len && text[yp->problem_mark.index] == '\t') {
    snprintf(extra, sizeof extra, " (a tab: YAML indents with spaces only)");
  } else if (yp->context) {
    snprintf(extra, sizeof extra, " (%s at line %zu, column %zu)", yp->context,
             yp->context_mark.line + 1, yp->context_mark.column + 1);
  }
  return px__js_fail(PX_ERR_INVALID, &P->w, &m, "YAML syntax error: %s%s",
                     yp->problem ? yp->problem : "malformed input", extra);
}

/* libyaml's scanner checks every open flow level for stale simple keys at
 * each token, so deeply nested flow collections ("[[[[...") cost time
 * quadratic in their depth (100 KB of '[' took 11.6 s). No job spec nests
 * deeper than a few levels: one linear pass refuses more than
 * PX__JS_MAX_DEPTH open '[' / '{' (outside quotes and comments), naming
 * where, before libyaml sees the text. */
#define PX__JS_MAX_DEPTH 32

static px_status_t px__js_check_depth(px__js_parse_t *P, const char *text, size_t len) {
  px__js_mark_t m = {1, 1};
  int depth = 0;
  char quote = 0;
  for (size_t i = 0; i < len; i++, m.col++) {
    char ch = text[i];
    if (ch == '\n') {
      m.line++;
      m.col = 0;
      if (quote == 0) continue;
    }
    if (quote) {
      if (quote == '"' && ch == '\\' && i + 1 < len) i++, m.col++;
      else if (ch == quote) {
        if (quote == '\'' && i + 1 < len && text[i + 1] == '\'') i++, m.col++; /* '' */
        else quote = 0;
      }
      continue;
    }
    if (ch == '#' && (i == 0 || text[i - 1] == ' ' || text[i - 1] == '\t' || text[i - 1] == '\n')) {
      while (i + 1 < len && text[i + 1] != '\n') i++, m.col++;
      continue;
    }
    /* a quote opens a scalar only where one can start (not inside a plain
     * scalar such as it's) */
    if ((ch == '"' || ch == '\'') &&
        (i == 0 || strchr(" \t\n[{,:-", text[i - 1]) != NULL)) {
      quote = ch;
      continue;
    }
    if (ch == '[' || ch == '{') {
      if (++depth > PX__JS_MAX_DEPTH)
        return px__js_fail(PX_ERR_INVALID, &P->w, &m,
                           "nested more than %d levels deep: no job spec needs that",
                           PX__JS_MAX_DEPTH);
    } else if ((ch == ']' || ch == '}') && depth > 0) {
      depth--;
    }
  }
  return PX_OK;
}

px_status_t px_jobspec_parse_string(const char *text, size_t len, const char *name_for_errors,
                                    Prunex__V1__JobSpec **out) {
  return px_jobspec_parse_string_ex(text, len, name_for_errors, out, NULL);
}

/* given[] of the parse as the public bit set. */
static void px__js_given_bits(const px__js_parse_t *P, px_jobspec_given_t *given) {
  _Static_assert(PX__JS_MAX_FIELDS <= 64 * sizeof given->bits / sizeof given->bits[0],
                 "px_jobspec_given_t holds a bit per field");
  memset(given, 0, sizeof *given);
  for (int i = 0; i < px__js_nfields; i++)
    if (P->given[i]) given->bits[i / 64] |= UINT64_C(1) << (i % 64);
}

int px_jobspec_given(const px_jobspec_given_t *given, const char *path) {
  int fi = given && path ? px__js_find(path) : -1;
  if (fi < 0) return -1;
  return (given->bits[fi / 64] >> (fi % 64)) & 1 ? 1 : 0;
}

px_status_t px_jobspec_parse_string_ex(const char *text, size_t len, const char *name_for_errors,
                                       Prunex__V1__JobSpec **out, px_jobspec_given_t *given) {
  PX_REQUIRE(out, "px_jobspec_parse_string: NULL out");
  *out = NULL;
  if (given) memset(given, 0, sizeof *given);
  PX_REQUIRE(text || len == 0, "px_jobspec_parse_string: NULL text");
  if (!text) text = "";
  px__js_parse_t P;
  memset(&P, 0, sizeof P);
  P.w.file = name_for_errors ? name_for_errors : "<string>";
  P.name = name_for_errors;
  if (len > PX__JS_MAX_FILE)
    return px__js_fail(PX_ERR_INVALID, &P.w, NULL,
                       "%zu bytes is larger than a job spec may be (1 MiB)", len);

  PX_CHECK(px__js_check_depth(&P, text, len));

  yaml_parser_t yp;
  yaml_document_t doc, extra;
  int have_doc = 0;
  px_status_t st = PX_OK;
  if (!yaml_parser_initialize(&yp))
    return px_set_error(PX_ERR_NOMEM, "%s: cannot create a YAML parser", P.w.file);
  yaml_parser_set_input_string(&yp, (const unsigned char *)text, len);
  if (!yaml_parser_load(&yp, &doc)) {
    st = px__js_yaml_error(&P, &yp, text, len);
    goto done;
  }
  have_doc = 1;
  P.doc = &doc;
  yaml_node_t *root = yaml_document_get_root_node(&doc);
  if (!root) {
    st = px__js_fail(PX_ERR_INVALID, &P.w, NULL,
                     "the job spec is empty (expected a mapping with model, dataset, cluster, "
                     "strategy, train, ...; {} takes every default)");
    goto done;
  }
  /* One document only: a second one is almost surely a pasting mistake (a
   * trailing empty document, "---" at the end, is tolerated). */
  if (!yaml_parser_load(&yp, &extra)) {
    st = px__js_yaml_error(&P, &yp, text, len);
    goto done;
  }
  yaml_node_t *second = yaml_document_get_root_node(&extra);
  if (second && !px__js_is_null(second)) {
    px__js_mark_t m = {extra.start_mark.line + 1, extra.start_mark.column + 1};
    yaml_document_delete(&extra);
    st = px__js_fail(PX_ERR_INVALID, &P.w, &m,
                     "a second YAML document: a job spec is one mapping (remove the '---')");
    goto done;
  }
  yaml_document_delete(&extra);

  PX_CHECK_GOTO(px__js_new_default(&P.spec), st, done);
  PX_CHECK_GOTO(px__js_top(&P, root), st, done);
  if (!P.given[px__js_find("name")]) PX_CHECK_GOTO(px__js_default_name(&P), st, done);
  PX_CHECK_GOTO(px__js_onnx_path(&P), st, done);
  PX_CHECK_GOTO(px__js_onnx_input(&P), st, done);
  if (!P.given[px__js_find("dataset.train_samples")]) {
    int64_t n = px__js_count_train(P.spec);
    P.spec->dataset->train_samples = n > INT32_MAX ? INT32_MAX : (int32_t)n;
  }
  if (!P.given[px__js_find("admm.max_iterations")] &&
      !(P.spec->admm->max_iterations = px__js_derive_max_iterations(P.spec))) {
    char where[600];
    snprintf(where, sizeof where, "%s: ", P.w.file ? P.w.file : "job spec");
    st = px__js_underived(P.spec, where);
    goto done;
  }
  PX_CHECK_GOTO(px__js_check(P.spec, &P.w), st, done);
  if (P.w.onnx_sha256[0] && !P.spec->model->onnx_sha256[0]) { /* the file read: its sum */
    px__js_value_t v = {.s = P.w.onnx_sha256};
    PX_CHECK_GOTO(px__js_set(P.spec->model, px__js_find("model.onnx_sha256"), &v), st, done);
  }
  PX_CHECK_GOTO(px__js_sweep_points(&P), st, done);
  if (given) px__js_given_bits(&P, given);
  *out = P.spec;
  P.spec = NULL;

done:
  if (have_doc) yaml_document_delete(&doc);
  yaml_parser_delete(&yp);
  px_jobspec_free(P.spec);
  return st;
}

px_status_t px_jobspec_parse_file(const char *path, Prunex__V1__JobSpec **out) {
  return px_jobspec_parse_file_ex(path, out, NULL, NULL);
}

px_status_t px_jobspec_parse_file_ex(const char *path, Prunex__V1__JobSpec **out, char **text,
                                     px_jobspec_given_t *given) {
  PX_REQUIRE(out, "px_jobspec_parse_file: NULL out");
  *out = NULL;
  if (text) *text = NULL;
  if (given) memset(given, 0, sizeof *given);
  PX_REQUIRE(path, "px_jobspec_parse_file: NULL path");
  FILE *f = fopen(path, "rb");
  if (!f) return px_set_error(PX_ERR_IO, "%s: cannot open the job spec: %s", path, strerror(errno));
  char *buf = NULL;
  size_t len = 0;
  px_status_t st = PX_OK;
  for (;;) {
    char *nb = px_realloc(buf, len + 65536 + 1, "jobspec.file");
    if (!nb) {
      st = PX_ERR_NOMEM;
      break;
    }
    buf = nb;
    size_t got = fread(buf + len, 1, 65536, f);
    len += got;
    if (got < 65536) {
      if (ferror(f)) st = px_set_error(PX_ERR_IO, "%s: cannot read the job spec: %s", path,
                                       strerror(errno));
      break;
    }
    if (len > PX__JS_MAX_FILE) {
      st = px_set_error(PX_ERR_INVALID, "%s: larger than a job spec may be (1 MiB)", path);
      break;
    }
  }
  fclose(f);
  if (st == PX_OK) st = px_jobspec_parse_string_ex(buf, len, path, out, given);
  if (st == PX_OK && text) {
    buf[len] = '\0'; /* room for it: every read leaves one byte over */
    *text = buf;
    return PX_OK;
  }
  px_free(buf);
  return st;
}
