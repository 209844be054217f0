/* JSON through json-c (prunex/json.h): the number form, the UTF-8 rule,
 * the compact writer and the bounded parse that pxctl and pxcoordd share,
 * so that both spell a document the same way. */
#include <json-c/json.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "prunex/json.h"
#include "px_check.h"

#define PX_JSON_MAX_DEPTH 64

struct json_object *px_json_double(double v) {
  if (!isfinite(v)) return NULL;
  char buf[40];
  for (int prec = 1; prec <= 17; prec++) {
    snprintf(buf, sizeof buf, "%.*g", prec, v);
    if (strtod(buf, NULL) == v) break;
  }
  /* the string form is what json-c writes; the double is what readers of
   * the tree see (json_object_get_double) */
  return json_object_new_double_s(v, buf);
}

struct json_object *px_json_string(const char *s, size_t n) {
  if (!s) return NULL;
  size_t i = 0;
  while (i < n) {
    size_t k = px_utf8_seq(s + i, n - i);
    if (!k) break;
    i += k;
  }
  if (i == n) return json_object_new_string_len(s, (int)n);
  /* invalid bytes: a cleaned copy, each such byte 3 bytes of U+FFFD */
  px_buf_t b = {0};
  px_buf_put(&b, s, i);
  while (i < n) {
    size_t k = px_utf8_seq(s + i, n - i);
    if (k) px_buf_put(&b, s + i, k);
    else px_buf_put(&b, "\xef\xbf\xbd", 3);
    i += k ? k : 1;
  }
  struct json_object *o = b.oom ? NULL : json_object_new_string_len(b.p, (int)b.len);
  px_buf_free(&b);
  return o;
}

void px_json_put(px_buf_t *b, struct json_object *o) {
  size_t len = 0;
  const char *s = json_object_to_json_string_length(
      o, JSON_C_TO_STRING_PLAIN | JSON_C_TO_STRING_NOSLASHESCAPE, &len);
  if (!s) {
    b->oom = 1;
    return;
  }
  px_buf_put(b, s, len);
}

/* 1 when every number of o is finite: json-c reads NaN and Infinity even
 * in its strict mode, and JSON has neither. Depth is bounded by the parse. */
static int px_json_finite(struct json_object *o) {
  switch (json_object_get_type(o)) {
  case json_type_double: return isfinite(json_object_get_double(o));
  case json_type_array: {
    size_t n = json_object_array_length(o);
    for (size_t i = 0; i < n; i++)
      if (!px_json_finite(json_object_array_get_idx(o, i))) return 0;
    return 1;
  }
  case json_type_object: {
    json_object_object_foreach(o, k, v) {
      (void)k;
      if (!px_json_finite(v)) return 0;
    }
    return 1;
  }
  default: return 1;
  }
}

px_status_t px_json_parse(const char *s, size_t n, size_t max_bytes, struct json_object **out) {
  *out = NULL;
  if (n > max_bytes || n > (size_t)INT32_MAX)
    return px_set_error(PX_ERR_INVALID, "JSON document of %zu bytes: at most %zu allowed", n,
                        max_bytes);
  struct json_tokener *tok = json_tokener_new_ex(PX_JSON_MAX_DEPTH);
  if (!tok) return px_set_error(PX_ERR_NOMEM, "JSON parser: out of memory");
  json_tokener_set_flags(tok, JSON_TOKENER_STRICT | JSON_TOKENER_VALIDATE_UTF8);
  struct json_object *o = json_tokener_parse_ex(tok, s, (int)n);
  enum json_tokener_error err = json_tokener_get_error(tok);
  size_t at = json_tokener_get_parse_end(tok); /* of the last chunk parsed */
  if (err == json_tokener_continue) { /* a number may go on: say the input ended */
    o = json_tokener_parse_ex(tok, "", 1);
    err = json_tokener_get_error(tok);
    at = n;
  }
  json_tokener_free(tok);
  if (at > n) at = n;
  if (err == json_tokener_continue)
    return px_set_error(PX_ERR_INVALID, "JSON ends early (after %zu bytes)", n);
  if (err != json_tokener_success)
    return px_set_error(PX_ERR_INVALID, "JSON at byte %zu: %s", at,
                        json_tokener_error_desc(err));
  /* (strchr would match the NUL that ends its set: a NUL is text, not space) */
  while (at < n && s[at] && strchr(" \t\r\n", s[at])) at++;
  if (at < n) {
    json_object_put(o);
    return px_set_error(PX_ERR_INVALID, "JSON at byte %zu: text after the document", at);
  }
  if (!px_json_finite(o)) {
    json_object_put(o);
    return px_set_error(PX_ERR_INVALID, "JSON holds NaN or Infinity, which JSON does not have");
  }
  *out = o;
  return PX_OK;
}
