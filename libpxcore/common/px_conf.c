/* The settings-file reader of px_conf.h: `key = value` lines or a YAML
 * mapping of scalars (libyaml), with FILE:LINE in every error. */
#include <ctype.h>
#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <yaml.h>

#include "px_check.h"
#include "prunex/conf.h"

static char *px__conf_trim(char *s) {
  while (isspace((unsigned char)*s)) s++;
  size_t n = strlen(s);
  while (n && isspace((unsigned char)s[n - 1])) s[--n] = '\0';
  return s;
}

static px_status_t px__conf_apply(px_conf_set_fn set, void *ctx, const char *key_in,
                                  const char *value, const char *where) {
  char key[128];
  PX_REQUIRE(strlen(key_in) < sizeof key, "%s: setting name too long", where);
  snprintf(key, sizeof key, "%s", key_in);
  for (char *p = key; *p && *p != '.'; p++) /* a user's name after a dot keeps its dashes */
    if (*p == '-') *p = '_';
  return set(ctx, key, value, where);
}

static px_status_t px__conf_kv(const char *path, FILE *f, px_conf_set_fn set, void *ctx) {
  char line[8192];
  int lineno = 0;
  while (fgets(line, sizeof line, f)) {
    lineno++;
    char where[4200];
    snprintf(where, sizeof where, "%s:%d", path, lineno);
    char *hash = strchr(line, '#');
    if (hash) *hash = '\0';
    char *s = px__conf_trim(line);
    if (!*s) continue;
    char *eq = strchr(s, '=');
    PX_REQUIRE(eq, "%s: expected 'key = value'", where);
    *eq = '\0';
    char *key = px__conf_trim(s), *val = px__conf_trim(eq + 1);
    size_t n = strlen(val);
    if (n >= 2 && ((val[0] == '"' && val[n - 1] == '"') || (val[0] == '\'' && val[n - 1] == '\''))) {
      val[n - 1] = '\0';
      val++;
    }
    PX_CHECK(px__conf_apply(set, ctx, key, val, where));
  }
  PX_REQUIRE(!ferror(f), "%s: read error", path);
  return PX_OK;
}

static px_status_t px__conf_yaml(const char *path, FILE *f, px_conf_set_fn set, void *ctx) {
  yaml_parser_t parser;
  yaml_document_t doc;
  if (!yaml_parser_initialize(&parser)) return px_set_error(PX_ERR_NOMEM, "%s: yaml", path);
  yaml_parser_set_input_file(&parser, f);
  px_status_t st = PX_OK;
  if (!yaml_parser_load(&parser, &doc)) {
    st = px_set_error(PX_ERR_INVALID, "%s:%zu: YAML error: %s", path,
                      (size_t)parser.problem_mark.line + 1,
                      parser.problem ? parser.problem : "unknown");
    yaml_parser_delete(&parser);
    return st;
  }
  yaml_node_t *root = yaml_document_get_root_node(&doc);
  if (root && root->type == YAML_MAPPING_NODE) {
    for (yaml_node_pair_t *p = root->data.mapping.pairs.start; p < root->data.mapping.pairs.top;
         p++) {
      yaml_node_t *k = yaml_document_get_node(&doc, p->key);
      yaml_node_t *v = yaml_document_get_node(&doc, p->value);
      char where[4200];
      snprintf(where, sizeof where, "%s:%zu", path, (size_t)k->start_mark.line + 1);
      if (k->type != YAML_SCALAR_NODE || v->type != YAML_SCALAR_NODE) {
        st = px_set_error(PX_ERR_INVALID, "%s: expected 'key: value' with plain values", where);
        break;
      }
      st = px__conf_apply(set, ctx, (const char *)k->data.scalar.value,
                          (const char *)v->data.scalar.value, where);
      if (st != PX_OK) break;
    }
  } else if (root) {
    st = px_set_error(PX_ERR_INVALID, "%s: expected a mapping of settings", path);
  }
  yaml_document_delete(&doc);
  yaml_parser_delete(&parser);
  return st;
}

px_status_t px_conf_load(const char *path, px_conf_set_fn set, void *ctx) {
  FILE *f = fopen(path, "r");
  if (!f) return px_set_error(PX_ERR_IO, "%s: cannot open config file: %s", path, strerror(errno));
  int kv = 0;
  char line[8192];
  while (fgets(line, sizeof line, f)) {
    char *hash = strchr(line, '#');
    if (hash) *hash = '\0';
    char *s = px__conf_trim(line);
    if (!*s || !strcmp(s, "---")) continue;
    char *eq = strchr(s, '='), *colon = strchr(s, ':');
    kv = eq && (!colon || eq < colon);
    break;
  }
  rewind(f);
  px_status_t st = kv ? px__conf_kv(path, f, set, ctx) : px__conf_yaml(path, f, set, ctx);
  fclose(f);
  return st;
}
