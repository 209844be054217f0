/* prunex/json.h: the JSON writer and reader (json-c) that pxctl --json,
 * pxcoordd's HTTP API and the tests share: numbers in their shortest exact
 * form, strings always valid UTF-8, compact output, and a strict, bounded
 * parse. */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>
#include <json-c/json.h>

#include "prunex/json.h"

/* o written compactly (and freed) into a static string. */
static const char *written(struct json_object *o) {
  static char out[4096];
  px_buf_t b = {0};
  px_json_put(&b, o);
  assert_false(b.oom);
  snprintf(out, sizeof out, "%s", b.p ? b.p : "");
  px_buf_free(&b);
  json_object_put(o);
  return out;
}

static void numbers_are_the_shortest_form_that_reads_back(void **state) {
  (void)state;
  assert_string_equal(written(px_json_double(0.8631)), "0.8631");
  assert_string_equal(written(px_json_double(0.3871866295264624)), "0.3871866295264624");
  assert_string_equal(written(px_json_double(0.1 + 0.2)), "0.30000000000000004");
  assert_string_equal(written(px_json_double(188730472.0)), "188730472");
  assert_string_equal(written(px_json_double(-2.5e-300)), "-2.5e-300");
  assert_null(px_json_double(NAN));
  assert_null(px_json_double(INFINITY));
  assert_string_equal(written(NULL), "null");
  /* the tree's double is the value itself */
  struct json_object *o = px_json_double(1.0 / 3.0);
  assert_true(json_object_get_double(o) == 1.0 / 3.0);
  json_object_put(o);
}

static void strings_are_valid_utf8_and_escaped(void **state) {
  (void)state;
  /* quotes, backslash, control characters escaped; "/" and UTF-8 kept */
  const char in[] = "a\"b\\c\td/\xc3\xa9\x01";
  assert_string_equal(written(px_json_string(in, sizeof in - 1)),
                      "\"a\\\"b\\\\c\\td/\xc3\xa9\\u0001\"");
  /* a bad byte and a cut sequence become U+FFFD each; a NUL is kept */
  const char bad[] = "x\xff" "y\0z\xe2\x82";
  assert_string_equal(written(px_json_string(bad, sizeof bad - 1)),
                      "\"x\xef\xbf\xbdy\\u0000z\xef\xbf\xbd\xef\xbf\xbd\"");
  assert_null(px_json_string(NULL, 3));
  /* an object keeps its keys in insertion order, no spaces */
  struct json_object *o = json_object_new_object();
  json_object_object_add(o, "b", json_object_new_int(1));
  json_object_object_add(o, "a", NULL);
  json_object_object_add(o, "c", json_object_new_array());
  assert_string_equal(written(o), "{\"b\":1,\"a\":null,\"c\":[]}");
}

static px_status_t parse(const char *s, struct json_object **o) {
  return px_json_parse(s, strlen(s), 1 << 20, o);
}

static void parse_is_strict_and_bounded(void **state) {
  (void)state;
  struct json_object *o = NULL;
  assert_int_equal(parse(" {\"a\":[1,2.5,\"x\",null,true]}\n", &o), PX_OK);
  assert_int_equal(json_object_array_length(json_object_object_get(o, "a")), 5);
  json_object_put(o);
  assert_int_equal(parse("12", &o), PX_OK); /* a number that ends the input */
  assert_int_equal(json_object_get_int(o), 12);
  json_object_put(o);
  assert_int_equal(parse("null", &o), PX_OK);
  assert_null(o);
  static const char *const bad[] = {"{\"a\":1} x", "{\"a\":1,}", "[1,", "",
                                    "\"\xff\"", "NaN", "[1,-Infinity]", "{\"a\":01}"};
  for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
    o = (struct json_object *)1;
    if (parse(bad[i], &o) != PX_ERR_INVALID) fail_msg("accepted: %s", bad[i]);
    assert_null(o);
  }
  assert_int_equal(parse("{\"a\":1} x", &o), PX_ERR_INVALID);
  assert_non_null(strstr(px_last_error(), "byte 8"));
  /* nesting past 64 levels, and a document over the size bound */
  char deep[200];
  memset(deep, '[', 100);
  memset(deep + 100, ']', 100);
  assert_int_equal(px_json_parse(deep, 200, 1 << 20, &o), PX_ERR_INVALID);
  assert_int_equal(px_json_parse("[1,2,3]", 7, 6, &o), PX_ERR_INVALID);
  assert_non_null(strstr(px_last_error(), "at most 6"));
  /* NUL bytes after the document are text, not white space */
  assert_int_equal(px_json_parse("[1]\n\0\0", 6, 1 << 20, &o), PX_ERR_INVALID);
  assert_non_null(strstr(px_last_error(), "text after the document"));
  assert_int_equal(px_json_parse("[1]\n\0", 4, 1 << 20, &o), PX_OK);
  json_object_put(o);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(numbers_are_the_shortest_form_that_reads_back),
      cmocka_unit_test(strings_are_valid_utf8_and_escaped),
      cmocka_unit_test(parse_is_strict_and_bounded),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
