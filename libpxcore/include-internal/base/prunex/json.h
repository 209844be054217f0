/* JSON, written and read with json-c (Debian's libjson-c-dev): the one JSON
 * library of the programs (pxctl --json, pxcoordd's HTTP API, the tests).
 * What this adds to json-c is what every writer here must do the same way:
 * numbers in the shortest form that reads back to the same double, strings
 * that are valid UTF-8 whatever bytes they came from, compact output, and
 * a parse bounded in size and depth for input from elsewhere.
 *
 * The objects are json-c's (struct json_object, json_object_put frees a
 * tree); a NULL object is JSON null, as json-c itself treats it. Callers
 * that build or walk trees include <json-c/json.h> and link json-c. */
#ifndef PRUNEX_JSON_H
#define PRUNEX_JSON_H

#include <stddef.h>

#include "prunex/px.h"
#include "prunex/text.h"

#ifdef __cplusplus
extern "C" {
#endif

struct json_object;

/* A number serialised as the shortest %g form that reads back to v
 * (0.8631, not 0.86309999999999998); NULL (null) when v is not finite or
 * on allocation failure. Owned by the caller (or the container it is
 * added to). */
struct json_object *px_json_double(double v);

/* A string of s[0..n), each byte that is not part of valid UTF-8 replaced
 * by U+FFFD (NUL bytes are kept: json-c writes them as \u0000); NULL s
 * gives NULL (null). Owned by the caller. */
struct json_object *px_json_string(const char *s, size_t n);

/* Appends o compactly (no spaces, "/" not escaped) to b; b->oom as
 * px_buf_put sets it. */
void px_json_put(px_buf_t *b, struct json_object *o);

/* Parses s[0..n) (n at most max_bytes, nesting at most 64 deep) into *out
 * (the caller's: json_object_put), with json-c's strict mode and UTF-8
 * check. Fails with PX_ERR_INVALID naming what (the byte offset and
 * json-c's reason; trailing bytes after the document other than white
 * space, NaN and Infinity are errors; json-c's strict mode still takes
 * single-quoted strings), PX_ERR_NOMEM. A JSON null document
 * gives *out == NULL with PX_OK. Linear in n. */
px_status_t px_json_parse(const char *s, size_t n, size_t max_bytes,
                                 struct json_object **out);

#ifdef __cplusplus
}
#endif

#endif
