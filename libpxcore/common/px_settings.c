/* The settings tables of prunex/settings.h: one parser for a program's
 * flags, config file (through px_conf.c), environment variables and --help,
 * and the SIGHUP comparison, all driven by the entries' types, bounds and
 * offsets, so that a setting is declared once. */
#include <ctype.h>
#include <errno.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "px_check.h"
#include "prunex/conf.h"
#include "prunex/settings.h"

typedef struct px__settings_copy {
  struct px__settings_copy *next;
  char text[];
} px__settings_copy_t;

struct px_settings {
  const px_settings_spec_t *spec;
  void *obj;
  uint64_t given;               /* bit i: table[i] was set (not its default) */
  px__settings_copy_t *copies;  /* STRREF and CUSTOM values kept for the handle's life */
};

static const char *const px__settings_bool_names[] = {"on", "off", "true", "false", "yes",
                                                      "no", "1", "0", NULL};

px_status_t px_settings_create(const px_settings_spec_t *spec, void *obj, px_settings_t **out) {
  PX_REQUIRE(spec && obj && out && spec->n <= PX_SETTINGS_MAX,
             "px_settings_create: a spec of at most %d settings and an object", PX_SETTINGS_MAX);
  px_settings_t *s = px_calloc(1, sizeof *s, "settings");
  if (!s) return PX_ERR_NOMEM;
  s->spec = spec;
  s->obj = obj;
  *out = s;
  return PX_OK;
}

void px_settings_destroy(px_settings_t *s) {
  if (!s) return;
  while (s->copies) {
    px__settings_copy_t *c = s->copies;
    s->copies = c->next;
    px_free(c);
  }
  px_free(s);
}

/* A copy of value that lives as long as s; NULL when out of memory. */
static const char *px__settings_keep(px_settings_t *s, const char *value) {
  size_t n = strlen(value) + 1;
  px__settings_copy_t *c = px_malloc(sizeof *c + n, "settings.value");
  if (!c) return NULL;
  memcpy(c->text, value, n);
  c->next = s->copies;
  s->copies = c;
  return c->text;
}

/* The entry for key (underscores): an exact name first, then a PREFIX
 * entry whose name starts key and leaves a suffix. -1 when none. */
static int px__settings_find(const px_settings_spec_t *spec, const char *key) {
  for (size_t i = 0; i < spec->n; i++)
    if (!(spec->table[i].flags & PX_SETTING_PREFIX) && !strcmp(spec->table[i].name, key))
      return (int)i;
  for (size_t i = 0; i < spec->n; i++) {
    const px_setting_t *e = &spec->table[i];
    size_t n = strlen(e->name);
    if ((e->flags & PX_SETTING_PREFIX) && !strncmp(e->name, key, n) && key[n]) return (int)i;
  }
  return -1;
}

/* "a, b or c" of an ENUM's values (or BOOL's), into buf. */
static void px__settings_list(const char *const *values, char *buf, size_t cap) {
  size_t used = 0;
  buf[0] = '\0';
  for (int i = 0; values[i] && used < cap; i++) {
    const char *sep = i == 0 ? "" : values[i + 1] ? ", " : " or ";
    int m = snprintf(buf + used, cap - used, "%s%s", sep, values[i]);
    if (m < 0) break;
    used += (size_t)m;
  }
}

/* An integer or number in the entry's bounds into the field; 0, else -1
 * with what is expected in why. */
static int px__settings_number(const px_setting_t *e, void *field, const char *v, char *why,
                               size_t cap) {
  char *end = NULL;
  errno = 0;
  int integral = e->type == PX_SETTING_INT;
  double d = 0;
  long long ll = 0;
  if (integral) ll = strtoll(v, &end, 10), d = (double)ll;
  else d = strtod(v, &end);
  if (errno != 0 || end == v || *end != '\0' || isspace((unsigned char)v[0]) || !isfinite(d) ||
      d < e->min || d > e->max) {
    snprintf(why, cap, "expected %s in [%.15g, %.15g]", integral ? "an integer" : "a number",
             e->min, e->max);
    return -1;
  }
  if (!integral) *(double *)field = d;
  else if (e->size == sizeof(int64_t)) *(int64_t *)field = (int64_t)ll;
  else *(int *)field = (int)ll;
  return 0;
}

/* One value into entry e's field (key is the whole key); 0, else -1 with
 * what is wrong in why. */
static int px__settings_store(px_settings_t *s, const px_setting_t *e, const char *key,
                              const char *v, char *why, size_t cap) {
  void *field = (char *)s->obj + e->offset;
  switch (e->type) {
    case PX_SETTING_BOOL:
      for (int i = 0; px__settings_bool_names[i]; i++)
        if (!strcmp(v, px__settings_bool_names[i])) {
          *(int *)field = i % 2 == 0;
          return 0;
        }
      snprintf(why, cap, "expected on or off (true/false, yes/no, 1/0)");
      return -1;
    case PX_SETTING_INT:
    case PX_SETTING_NUMBER:
      return px__settings_number(e, field, v, why, cap);
    case PX_SETTING_ENUM:
      for (int i = 0; e->values[i]; i++)
        if (!strcmp(v, e->values[i])) {
          *(int *)field = i;
          return 0;
        }
      char list[256];
      px__settings_list(e->values, list, sizeof list);
      snprintf(why, cap, "expected %s", list);
      return -1;
    case PX_SETTING_STRING:
    case PX_SETTING_STRREF:
      if (!v[0]) return snprintf(why, cap, "expected a value, not an empty one"), -1;
      if (e->type == PX_SETTING_STRING && strlen(v) >= e->size)
        return snprintf(why, cap, "expected at most %zu bytes", e->size - 1), -1;
      if (e->check && e->check(v, why, cap) != 0) return -1;
      if (e->type == PX_SETTING_STRING) {
        memcpy(field, v, strlen(v) + 1);
      } else {
        const char *kept = px__settings_keep(s, v);
        if (!kept) return snprintf(why, cap, "out of memory"), -1;
        *(const char **)field = kept;
      }
      return 0;
    case PX_SETTING_CUSTOM: {
      const char *kept = px__settings_keep(s, v);
      if (!kept) return snprintf(why, cap, "out of memory"), -1;
      return e->set(s->obj, key, kept, why, cap);
    }
  }
  return snprintf(why, cap, "a setting of unknown type %d", (int)e->type), -1;
}

/* Entry index i set from where (file, variable or flag). */
static px_status_t px__settings_set_at(px_settings_t *s, int i, const char *key,
                                       const char *value, const char *where) {
  const px_setting_t *e = &s->spec->table[i];
  char why[512];
  if (px__settings_store(s, e, key, value, why, sizeof why) != 0)
    return px_set_error(PX_ERR_INVALID, "%s: %s = '%.200s': %s", where, key, value, why);
  s->given |= UINT64_C(1) << i;
  return PX_OK;
}

/* key with dashes as underscores up to the first '.' (a user's name after
 * it keeps its dashes); -1 when it does not fit. */
static int px__settings_key(const char *in, char *key, size_t cap) {
  if (snprintf(key, cap, "%s", in) >= (int)cap) return -1;
  for (char *p = key; *p && *p != '.'; p++)
    if (*p == '-') *p = '_';
  return 0;
}

px_status_t px_settings_set(px_settings_t *s, const char *key_in, const char *value,
                            const char *where) {
  char key[256];
  PX_REQUIRE(px__settings_key(key_in, key, sizeof key) == 0, "%s: setting name too long", where);
  int i = px__settings_find(s->spec, key);
  PX_REQUIRE(i >= 0, "%s: unknown setting '%s'", where, key_in);
  return px__settings_set_at(s, i, key, value, where);
}

px_status_t px_settings_defaults(px_settings_t *s) {
  for (size_t i = 0; i < s->spec->n; i++) {
    const px_setting_t *e = &s->spec->table[i];
    if (e->type == PX_SETTING_CUSTOM) continue; /* the program's own */
    void *field = (char *)s->obj + e->offset;
    if (e->type == PX_SETTING_STRREF) *(const char **)field = NULL;
    else memset(field, 0, e->size);
    if (e->type == PX_SETTING_ENUM) *(int *)field = -1;
    if (e->def) PX_CHECK(px__settings_set_at(s, (int)i, e->name, e->def, "the default"));
  }
  s->given = 0;
  return PX_OK;
}

static px_status_t px__settings_file_set(void *ctx, const char *key, const char *value,
                                         const char *where) {
  px_settings_t *s = ctx;
  int i = px__settings_find(s->spec, key);
  if (i < 0 || (s->spec->table[i].flags & PX_SETTING_FLAG_ONLY))
    return px_set_error(PX_ERR_INVALID, "%s: unknown setting '%s'", where, key);
  return px__settings_set_at(s, i, key, value, where);
}

px_status_t px_settings_load(px_settings_t *s, const char *path) {
  return px_conf_load(path, px__settings_file_set, s);
}

/* The flag's entry: --name or --name=value (dashes); -1 when none. */
static int px__settings_flag(const px_settings_spec_t *spec, const char *arg, const char **value) {
  char key[256];
  *value = NULL;
  if (strncmp(arg, "--", 2) != 0 || px__settings_key(arg + 2, key, sizeof key) != 0) return -1;
  char *eq = strchr(key, '=');
  if (eq) {
    *eq = '\0';
    *value = strchr(arg, '=') + 1;
  }
  size_t name_len = strcspn(arg + 2, "=.");
  if (memchr(arg + 2, '_', name_len)) return -1; /* "--a_b": flags are spelled with dashes */
  int i = px__settings_find(spec, key);
  if (i < 0 || (spec->table[i].flags & (PX_SETTING_FILE_ONLY | PX_SETTING_PREFIX))) return -1;
  return i;
}

/* The flag's spelling of a name: "--" and dashes, into buf. */
static const char *px__settings_flag_name(const char *name, char *buf, size_t cap) {
  snprintf(buf, cap, "--%s", name);
  for (char *p = buf + 2; *p; p++)
    if (*p == '_') *p = '-';
  return buf;
}

/* The value of flag argv[*i] into *value (the next argument unless it
 * came with '='; a BOOL's only when it is not a flag, else "on");
 * PX_ERR_INVALID when missing. */
static px_status_t px__settings_flag_value(const px_setting_t *e, int argc, char **argv, int *i,
                                           const char **value) {
  if (*value) return PX_OK;
  char flag[160];
  px__settings_flag_name(e->name, flag, sizeof flag);
  if (e->type == PX_SETTING_BOOL) { /* "--flag", or "--flag off" (no program takes operands) */
    *value = *i + 1 < argc && argv[*i + 1][0] != '-' ? argv[++*i] : "on";
    return PX_OK;
  }
  PX_REQUIRE(*i + 1 < argc, "%s needs a value", flag);
  *value = argv[++*i];
  return PX_OK;
}

px_status_t px_settings_apply_args(px_settings_t *s, int argc, char **argv) {
  const px_settings_spec_t *spec = s->spec;
  for (size_t i = 0; i < spec->n; i++) { /* the variables, below the flags */
    const px_setting_t *e = &spec->table[i];
    const char *v = e->env ? getenv(e->env) : NULL;
    char where[160];
    snprintf(where, sizeof where, "$%s", e->env ? e->env : "");
    if (v && v[0]) PX_CHECK(px__settings_set_at(s, (int)i, e->name, v, where));
  }
  for (int a = 1; a < argc; a++) {
    const char *value = NULL;
    int i = px__settings_flag(spec, argv[a], &value);
    PX_REQUIRE(i >= 0, "unknown argument '%s'", argv[a]);
    const px_setting_t *e = &spec->table[i];
    PX_CHECK(px__settings_flag_value(e, argc, argv, &a, &value));
    if (e->flags & PX_SETTING_CONFIG) continue; /* read first */
    char flag[160];
    PX_CHECK(px__settings_set_at(s, i, e->name, value,
                                 px__settings_flag_name(e->name, flag, sizeof flag)));
  }
  for (size_t i = 0; i < spec->n; i++) {
    char flag[160];
    if ((spec->table[i].flags & PX_SETTING_REQUIRED) && !(s->given & (UINT64_C(1) << i)))
      return px_set_error(PX_ERR_INVALID, "%s is required",
                          px__settings_flag_name(spec->table[i].name, flag, sizeof flag));
  }
  return PX_OK;
}

/* --help, -h, --version: 0 after printing; -1 when none is given. */
static int px__settings_help(const px_settings_spec_t *spec, int argc, char **argv) {
  for (int a = 1; a < argc; a++) {
    if (!strcmp(argv[a], "--help") || !strcmp(argv[a], "-h")) {
      px_settings_usage(spec, stdout);
      return 0;
    }
    if (!strcmp(argv[a], "--version")) {
      printf("%s %s\n", spec->program, px_version());
      return 0;
    }
  }
  return -1;
}

/* The CONFIG flag's value: argv's last, else NULL; PX_ERR_INVALID when it
 * has no value. */
static px_status_t px__settings_config_arg(const px_settings_spec_t *spec, int argc, char **argv,
                                           int *entry, const char **path) {
  *path = NULL;
  *entry = -1;
  for (int a = 1; a < argc; a++) {
    const char *value = NULL;
    int i = px__settings_flag(spec, argv[a], &value);
    if (i < 0) continue;
    PX_CHECK(px__settings_flag_value(&spec->table[i], argc, argv, &a, &value));
    if (spec->table[i].flags & PX_SETTING_CONFIG) *path = value, *entry = i;
  }
  return PX_OK;
}

int px_settings_parse_args(px_settings_t *s, int argc, char **argv) {
  const px_settings_spec_t *spec = s->spec;
  int rc = px__settings_help(spec, argc, argv);
  if (rc >= 0) return rc;
  const char *path = NULL;
  int entry = -1;
  px_status_t st = px__settings_config_arg(spec, argc, argv, &entry, &path);
  if (st == PX_OK && path) {
    char flag[160];
    st = px__settings_set_at(s, entry, spec->table[entry].name, path,
                             px__settings_flag_name(spec->table[entry].name, flag, sizeof flag));
    if (st == PX_OK) st = px_settings_load(s, path);
  }
  if (st == PX_OK) st = px_settings_apply_args(s, argc, argv);
  if (st == PX_OK) return -1;
  fprintf(stderr, "%s: %s\n(run %s --help for the flags)\n", spec->program, px_last_error(),
          spec->program);
  return 2;
}

int px_settings_given(const px_settings_t *s, const char *name) {
  for (size_t i = 0; i < s->spec->n; i++)
    if (!strcmp(s->spec->table[i].name, name)) return (s->given >> i) & 1;
  return 0;
}

/* text wrapped at 79 columns, every line but the first indented by
 * indent (the first starts at column *col). */
static void px__settings_wrap(FILE *f, const char *text, int indent, int col) {
  const char *p = text;
  while (*p) {
    while (*p == ' ') p++;
    size_t w = strcspn(p, " \n");
    if (col > indent && col + 1 + (int)w > 79) {
      fprintf(f, "\n%*s", indent, "");
      col = indent;
    } else if (col > indent) {
      fputc(' ', f);
      col++;
    }
    fprintf(f, "%.*s", (int)w, p);
    col += (int)w;
    p += w;
    if (*p == '\n') p++;
  }
  fputc('\n', f);
}

/* One entry's line(s) of --help. */
static void px__settings_usage_entry(const px_setting_t *e, FILE *f) {
  char head[200], flag[160];
  if (e->flags & (PX_SETTING_FILE_ONLY | PX_SETTING_PREFIX))
    snprintf(head, sizeof head, "  %s%s = %s", e->name, e->flags & PX_SETTING_PREFIX ? "NAME" : "",
             e->arg ? e->arg : "VALUE");
  else
    snprintf(head, sizeof head, "  %s%s%s", px__settings_flag_name(e->name, flag, sizeof flag),
             e->arg ? " " : "", e->arg ? e->arg : "");
  char text[2048];
  int n = snprintf(text, sizeof text, "%s", e->help ? e->help : "");
  if (e->def && n >= 0 && (size_t)n < sizeof text)
    n += snprintf(text + n, sizeof text - (size_t)n, " (default %s)", e->def);
  if (e->env && n >= 0 && (size_t)n < sizeof text)
    n += snprintf(text + n, sizeof text - (size_t)n, " [$%s]", e->env);
  if ((e->flags & PX_SETTING_RELOAD) && n >= 0 && (size_t)n < sizeof text)
    snprintf(text + n, sizeof text - (size_t)n, " [re-read on SIGHUP]");
  fputs(head, f);
  int col = (int)strlen(head);
  if (col >= 26) {
    fputc('\n', f);
    col = 0;
  }
  fprintf(f, "%*s", 27 - col, "");
  px__settings_wrap(f, text, 27, 27);
}

void px_settings_usage(const px_settings_spec_t *spec, FILE *f) {
  fprintf(f, "usage: %s %s\n\n", spec->program, spec->synopsis ? spec->synopsis : "[OPTIONS]");
  if (spec->about) fprintf(f, "%s\n\n", spec->about);
  int files = 0, file_only = 0;
  for (size_t i = 0; i < spec->n; i++) {
    files |= !!(spec->table[i].flags & PX_SETTING_CONFIG);
    file_only |= !!(spec->table[i].flags & (PX_SETTING_FILE_ONLY | PX_SETTING_PREFIX));
  }
  fprintf(f, "Options%s:\n",
          files ? " (each is also a config-file key, with underscores, unless flag only)" : "");
  for (size_t i = 0; i < spec->n; i++)
    if (!(spec->table[i].flags & (PX_SETTING_FILE_ONLY | PX_SETTING_PREFIX)))
      px__settings_usage_entry(&spec->table[i], f);
  fprintf(f, "  --help, --version\n");
  if (file_only) {
    fprintf(f, "\nConfig-file keys without a flag:\n");
    for (size_t i = 0; i < spec->n; i++)
      if (spec->table[i].flags & (PX_SETTING_FILE_ONLY | PX_SETTING_PREFIX))
        px__settings_usage_entry(&spec->table[i], f);
  }
  if (spec->epilogue) fprintf(f, "\n%s\n", spec->epilogue);
}

/* 1 when entry e's field differs between a and b. */
static int px__settings_differs(const px_setting_t *e, const void *a, const void *b) {
  const char *fa = (const char *)a + e->offset, *fb = (const char *)b + e->offset;
  if (e->type == PX_SETTING_STRING) return strncmp(fa, fb, e->size) != 0;
  if (e->type == PX_SETTING_STRREF) {
    const char *sa = *(const char *const *)fa, *sb = *(const char *const *)fb;
    return (sa == NULL) != (sb == NULL) || (sa && strcmp(sa, sb) != 0);
  }
  return memcmp(fa, fb, e->size) != 0;
}

int px_settings_reload(const px_settings_spec_t *spec, void *running, const void *fresh,
                       char *changed, size_t cap) {
  int restart = 0;
  size_t used = 0;
  if (cap) changed[0] = '\0';
  for (size_t i = 0; i < spec->n; i++) {
    const px_setting_t *e = &spec->table[i];
    if ((e->flags & PX_SETTING_CONFIG) || !px__settings_differs(e, running, fresh)) continue;
    if (e->flags & PX_SETTING_RELOAD) {
      memcpy((char *)running + e->offset, (const char *)fresh + e->offset, e->size);
      continue;
    }
    restart++;
    if (used < cap) {
      int m = snprintf(changed + used, cap - used, "%s%s", used ? ", " : "", e->name);
      used = m < 0 ? cap : used + (size_t)m;
    }
  }
  return restart;
}
