/* The reports defined once (prunex/report.h): the iteration and layer
 * tables name every field of prunex.v1.IterationReport (with its
 * PhaseTimes) and prunex.v1.LayerMetrics with the proto's offset and type,
 * so a field added to the proto without a line in the table fails here;
 * the strategy's record fills every field it has; and one report with a
 * distinct value in every field goes through the coordinator's store
 * (coordinatord/db/reports.c on the real schema), back out of it, out of
 * the HTTP API (coordinatord/http_api.c on the same file) and out of the
 * CSV writer unchanged, and through the node-local metrics file's schema. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cmocka.h>
#include <json-c/json.h>

#include "../agent/metrics_schema.h"
#include "../coordinatord/arena.c"
#include "../coordinatord/db/reports.c"
#include "../coordinatord/db/epoch_rows.c"
#include "../coordinatord/db/http_read.c"
#include "../coordinatord/http_api.c"
#include "../coordinatord/db/schema.c"
#include "prunex/report.h"

static ProtobufCType want_type(px_report_type_t t) {
  static const ProtobufCType w[] = {
      [PX_REPORT_I32] = PROTOBUF_C_TYPE_INT32, [PX_REPORT_I64] = PROTOBUF_C_TYPE_INT64,
      [PX_REPORT_U64] = PROTOBUF_C_TYPE_UINT64, [PX_REPORT_F64] = PROTOBUF_C_TYPE_DOUBLE,
      [PX_REPORT_BOOL] = PROTOBUF_C_TYPE_BOOL, [PX_REPORT_TEXT] = PROTOBUF_C_TYPE_STRING};
  return w[t];
}

/* Every field of message d is the table's field of that name (same offset
 * and type, flagged phase or not), except the submessages named in skip;
 * returns how many it checked. */
static int check_message(const ProtobufCMessageDescriptor *d, px_report_table_t t, int phase,
                         const char *const *skip) {
  int n = 0;
  for (unsigned i = 0; i < d->n_fields; i++) {
    const ProtobufCFieldDescriptor *fd = &d->fields[i];
    int skipped = 0;
    for (const char *const *s = skip; s && *s; s++) skipped |= !strcmp(*s, fd->name);
    if (skipped) continue;
    const px_report_field_t *f = px_report_find(t, fd->name);
    if (!f) fail_msg("%s.%s has no line in the report table", d->name, fd->name);
    assert_int_equal(fd->offset, f->proto_offset);
    assert_int_equal(fd->type, want_type(f->type));
    assert_int_equal(fd->label, PROTOBUF_C_LABEL_NONE);
    assert_int_equal(!!(f->where & PX_REPORT_PHASE), phase);
    n++;
  }
  return n;
}

static void test_the_tables_are_the_proto_messages(void **state) {
  (void)state;
  /* the submessages have tables of their own; membership_epoch fences the
   * report (the coordinator's job_epochs table keeps the membership) and
   * roll_call marks a survivor's repeat: not figures of the iteration */
  static const char *const sub[] = {"layers", "phases", "membership_epoch", "roll_call", NULL};
  int n = check_message(&prunex__v1__iteration_report__descriptor, PX_REPORT_ITERATION, 0, sub);
  n += check_message(&prunex__v1__phase_times__descriptor, PX_REPORT_ITERATION, 1, NULL);
  assert_int_equal(n, px_report_count(PX_REPORT_ITERATION)); /* and nothing else */
  n = check_message(&prunex__v1__layer_metrics__descriptor, PX_REPORT_LAYER, 0, NULL);
  assert_int_equal(n, px_report_count(PX_REPORT_LAYER));
  /* the layer table is in the proto's order (the stores' column order) */
  for (int i = 0; i < px_report_count(PX_REPORT_LAYER); i++) {
    const char *name = px_report_field(PX_REPORT_LAYER, i)->name;
    const ProtobufCMessageDescriptor *d = &prunex__v1__layer_metrics__descriptor;
    assert_int_equal(protobuf_c_message_descriptor_get_field_by_name(d, name)->id, i + 1);
  }
  assert_null(px_report_field(PX_REPORT_LAYER, -1));
  assert_null(px_report_field(PX_REPORT_ITERATION, px_report_count(PX_REPORT_ITERATION)));
  assert_null(px_report_find(PX_REPORT_LAYER, "no_such_field"));
  /* every byte of the policy's struct is some layer field's */
  size_t covered = 0;
  for (int i = 0; i < px_report_count(PX_REPORT_LAYER); i++)
    if (px_report_field(PX_REPORT_LAYER, i)->src_offset >= 0) covered += 8;
  assert_int_equal(covered, sizeof(px_admm_layer_report_t));
  /* a family's samples are labelled apart; a label names its unit */
  for (int t = 0; t < 2; t++)
    for (int i = 0; i < px_report_count(t); i++) {
      const px_report_field_t *f = px_report_field(t, i);
      assert_true(f->label && f->label[0] && f->unit);
      if (f->metric) assert_non_null(f->metric_help);
      if (f->total) assert_non_null(f->total_help);
    }
}

/* Distinct values for every field of layer l. */
static px_admm_layer_report_t figures(int l) {
  double b = 10.0 * (l + 1);
  return (px_admm_layer_report_t){.r_intra = b + 0.1, .s_intra = b + 0.2, .r_inter = b + 0.3,
                                  .s_inter = b + 0.4, .rho1 = b + 0.5, .rho2 = b + 0.6,
                                  .theta_norm = b + 0.7, .zi_norm = b + 0.8, .z_norm = b + 0.9,
                                  .u_norm = b + 1.0, .v_norm = b + 1.1,
                                  .numel = ((int64_t)1 << 40) + l};
}

static px_admm_layer_report_t L2[2];
static double density2[2] = {0.25, 1.0};
static const char *names2[2] = {"conv1.weight", "fc \"bias\", b"};

/* An iteration with a distinct value in every field. */
static px_iteration_t iteration(void) {
  L2[0] = figures(0);
  L2[1] = figures(1);
  return (px_iteration_t){
      .iteration = 7, .epoch = 3.5, .loss = 0.625, .train_accuracy = 0.8125,
      .test_accuracy = 0.796875, .density = 0.375, .mask_drift = 12, .mask_groups = 1234,
      .bytes_intra = ((uint64_t)1 << 41) + 1, .bytes_inter = 188730472,
      .bytes_inter_dense = ((uint64_t)1 << 42) + 3, .local_s = 1.5, .intra_s = 0.25,
      .projection_s = 0.125, .inter_s = 0.0625, .broadcast_s = 0.03125, .control_s = 0.015625,
      .frozen = 1, .nlayers = 2, .layers = L2, .layer_density = density2, .layer_names = names2};
}

static Prunex__V1__LayerMetrics lm[2];
static Prunex__V1__LayerMetrics *lp[2] = {&lm[0], &lm[1]};
static Prunex__V1__PhaseTimes ph;

static Prunex__V1__IterationReport report(void) {
  px_iteration_t it = iteration();
  Prunex__V1__IterationReport r;
  px_report_from_iteration(&it, &r, &ph);
  for (int l = 0; l < 2; l++) px_layer_metrics_from_iteration(&it, l, &lm[l]);
  r.job_id = "job-000001";
  r.rank = 0;
  r.time_unix_ms = 1764180000123;
  r.layers = lp;
  r.n_layers = 2;
  r.checkpoint_problem = "";
  return r;
}

static void test_the_strategy_record_fills_every_field(void **state) {
  (void)state;
  px_iteration_t it = iteration();
  Prunex__V1__IterationReport r = report();
  for (int i = 0; i < px_report_count(PX_REPORT_ITERATION); i++) {
    const px_report_field_t *f = px_report_field(PX_REPORT_ITERATION, i);
    if (f->src_offset < 0) continue;
    double want = 0;
    const char *p = (const char *)&it + f->src_offset;
    switch (f->type) {
    case PX_REPORT_I32: case PX_REPORT_BOOL: want = *(const int32_t *)p; break;
    case PX_REPORT_I64: want = (double)*(const int64_t *)p; break;
    case PX_REPORT_U64: want = (double)*(const uint64_t *)p; break;
    default: want = *(const double *)p; break;
    }
    if (want == 0) fail_msg("the test gives %s no value", f->name);
    if (px_report_value(f, &r, NULL) != want) fail_msg("%s not copied", f->name);
  }
  assert_true(r.phases == &ph);
  assert_string_equal(lm[1].name, names2[1]);
  assert_true(lm[0].density == 0.25 && lm[1].numel == L2[1].numel);
  px_admm_layer_report_t back;
  px_layer_metrics_to_admm(&lm[1], &back);
  assert_memory_equal(&back, &L2[1], sizeof back);
  it.layer_names = NULL;
  it.layer_density = NULL;
  px_layer_metrics_from_iteration(&it, 1, &lm[1]);
  assert_string_equal(lm[1].name, "");
  assert_true(lm[1].density == -1.0);
}

static void test_the_sql_fragments(void **state) {
  (void)state;
  char buf[512];
  assert_string_equal(px_report_columns(PX_REPORT_LAYER, PX_REPORT_COORD, NULL, buf, sizeof buf),
                      "layer, name, r_intra, s_intra, r_inter, s_inter, rho1, rho2, density, "
                      "theta_norm, zi_norm, z_norm, u_norm, v_norm, numel");
  assert_string_equal(px_report_columns(PX_REPORT_LAYER, PX_REPORT_CSV, "l.", buf, sizeof buf),
                      "l.layer, l.name, l.r_intra, l.s_intra, l.r_inter, l.s_inter, l.rho1, "
                      "l.rho2, l.density");
  assert_string_equal(px_report_params(PX_REPORT_LAYER, PX_REPORT_AGENT, 4, buf, sizeof buf),
                      "?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12, ?13, ?14, ?15, ?16, ?17, ?18");
  assert_null(px_report_columns(PX_REPORT_LAYER, PX_REPORT_COORD, NULL, buf, 20)); /* not cut */
  assert_null(px_report_params(PX_REPORT_ITERATION, PX_REPORT_COORD, 1, buf, 0));
  assert_string_equal(
      px_report_insert_sql(PX_REPORT_LAYER, PX_REPORT_CSV, "t", "a, b", 2, buf, sizeof buf),
      "INSERT OR REPLACE INTO t (a, b, layer, name, r_intra, s_intra, r_inter, s_inter, rho1, "
      "rho2, density) VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11)");
  assert_null(px_report_insert_sql(PX_REPORT_LAYER, PX_REPORT_CSV, "t", "a", 1, buf, 40));
}

static px_store_t *fresh_db(const char *schema, const px_store_migration_t *mig, int n,
                            char *dir, char *path) {
  assert_non_null(mkdtemp(dir));
  sprintf(path, "%s/db.sqlite", dir);
  px_store_options_t o = {.schema = schema, .migrations = mig, .nmigrations = n, .create = 1};
  px_store_t *db = NULL;
  if (px_store_open(path, &o, &db) != PX_OK) fail_msg("%s", px_last_error());
  assert_int_equal(px_store_exec(db, "PRAGMA foreign_keys = OFF"), PX_OK);
  return db;
}

static void remove_dir(const char *dir) {
  char cmd[128];
  snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
  assert_int_equal(system(cmd), 0);
}

/* Every field of table t with flag `where` reads back from b as a had it. */
static void assert_same(px_report_table_t t, unsigned where, const void *a, const void *b) {
  for (int i = 0; i < px_report_count(t); i++) {
    const px_report_field_t *f = px_report_field(t, i);
    if ((f->where & where) != where) continue;
    if (f->type == PX_REPORT_TEXT) {
      assert_string_equal(*(char *const *)((const char *)a + f->proto_offset),
                          *(char *const *)((const char *)b + f->proto_offset));
    } else if (px_report_value(f, a, NULL) != px_report_value(f, b, NULL)) {
      fail_msg("%s: %.17g stored, %.17g read back", f->name, px_report_value(f, a, NULL),
               px_report_value(f, b, NULL));
    }
  }
}

/* The JSON of one object against the report: every key the table gives
 * JSON, with the value (phases nested). */
static void assert_json(px_report_table_t t, struct json_object *o, const void *msg) {
  int keys = 0;
  for (int i = 0; i < px_report_count(t); i++) {
    const px_report_field_t *f = px_report_field(t, i);
    if (!(f->where & PX_REPORT_JSON)) continue;
    struct json_object *in = o, *v = NULL;
    if (f->where & PX_REPORT_PHASE) assert_true(json_object_object_get_ex(o, "phases", &in));
    if (!json_object_object_get_ex(in, f->name, &v)) fail_msg("no key %s", f->name);
    keys++;
    if (f->type == PX_REPORT_TEXT)
      assert_string_equal(json_object_get_string(v),
                          *(char *const *)((const char *)msg + f->proto_offset));
    else if (json_object_get_double(v) != px_report_value(f, msg, NULL))
      fail_msg("%s: JSON %s", f->name, json_object_to_json_string(v));
  }
  assert_true(keys > 5);
}

static struct json_object *http_get(px_store_t *db, int layers) {
  coord_hbuf_t b = COORD_HBUF_INIT;
  coord_http_page_t pg = {NULL, NULL};
  int status = layers ? coord_http_layers(db, "job-000001", &pg, &b)
                      : coord_http_iterations(db, "job-000001", &pg, &b);
  assert_int_equal(status, 200);
  struct json_object *doc = NULL;
  assert_int_equal(px_json_parse(b.p, b.len, b.len + 1, &doc), PX_OK);
  px_buf_free(&b);
  struct json_object *arr = NULL, *fields = NULL;
  assert_true(json_object_object_get_ex(doc, layers ? "layers" : "iterations", &arr));
  assert_true(json_object_object_get_ex(doc, "fields", &fields));
  assert_true(json_object_array_length(fields) > 5);
  return doc;
}

static void test_a_report_goes_through_store_api_and_csv(void **state) {
  (void)state;
  char dir[] = "/tmp/pxreport-XXXXXX", path[64];
  px_store_t *db = fresh_db("coordinator", coord_migrations, coord_nmigrations, dir, path);
  Prunex__V1__IterationReport r = report();
  assert_int_equal(px_store_exec(db, "INSERT INTO jobs (job_id, state, spec, num_nodes,"
                                     " workers_per_node, created_unix_ms, updated_unix_ms)"
                                     " VALUES ('job-000001', 3, x'', 1, 1, 1, 1)"),
                   PX_OK);
  if (coord_db_reports_put(db, &r, 1) != PX_OK) fail_msg("%s", px_last_error());
  coord_arena_t a;
  coord_arena_init(&a);
  Prunex__V1__GetIterationsResponse resp = PRUNEX__V1__GET_ITERATIONS_RESPONSE__INIT;
  assert_int_equal(coord_db_reports_list(db, &a, "job-000001", 0, 0, 1, &resp), PX_OK);
  assert_int_equal(resp.n_iterations, 1);
  const Prunex__V1__IterationReport *back = resp.iterations[0];
  assert_non_null(back->phases);
  assert_same(PX_REPORT_ITERATION, PX_REPORT_COORD, &r, back);
  assert_same(PX_REPORT_ITERATION, PX_REPORT_CSV, &r, back); /* the keys too */
  assert_int_equal(back->n_layers, 2);
  for (int l = 0; l < 2; l++)
    assert_same(PX_REPORT_LAYER, PX_REPORT_COORD, &lm[l], back->layers[l]);
  /* the HTTP API, on the same file */
  px_store_t *h = NULL;
  if (coord_db_http_open(path, &h) != PX_OK) fail_msg("%s", px_last_error());
  struct json_object *doc = http_get(h, 0), *arr, *o;
  json_object_object_get_ex(doc, "iterations", &arr);
  assert_int_equal(json_object_array_length(arr), 1);
  assert_json(PX_REPORT_ITERATION, json_object_array_get_idx(arr, 0), back);
  json_object_put(doc);
  doc = http_get(h, 1);
  json_object_object_get_ex(doc, "layers", &arr);
  assert_int_equal(json_object_array_length(arr), 2);
  for (int l = 0; l < 2; l++) {
    o = json_object_array_get_idx(arr, l);
    assert_json(PX_REPORT_LAYER, o, &lm[l]);
    struct json_object *it = NULL;
    assert_true(json_object_object_get_ex(o, "iteration", &it));
    assert_int_equal(json_object_get_int(it), 7);
  }
  json_object_put(doc);
  px_store_close(h);
  /* the CSV of what came back: one value per header name, each equal */
  char *csv = NULL;
  size_t len = 0;
  FILE *f = open_memstream(&csv, &len);
  px_report_csv_header(PX_REPORT_ITERATION, 0, f);
  fputc('\n', f);
  px_report_csv_row(PX_REPORT_ITERATION, 0, back, f);
  fclose(f);
  char *row = strchr(csv, '\n') + 1, *hs = csv, *vs = row;
  row[-1] = '\0';
  int cols = 0;
  for (char *h1 = strsep(&hs, ","), *v1 = strsep(&vs, ","); h1 && v1;
       h1 = strsep(&hs, ","), v1 = strsep(&vs, ","), cols++) {
    const px_report_field_t *fd = px_report_find(PX_REPORT_ITERATION, h1);
    assert_non_null(fd);
    if (strtod(v1, NULL) != px_report_value(fd, &r, NULL)) fail_msg("CSV %s = %s", h1, v1);
  }
  assert_int_equal(cols, 20);
  free(csv);
  coord_arena_free(&a);
  px_store_close(db);
  remove_dir(dir);
}

/* The node-local file's tables hold every field the table gives them. */
static void test_the_metrics_file_stores_every_field(void **state) {
  (void)state;
  char dir[] = "/tmp/pxreport-XXXXXX", path[64], cols[1024], params[512], sql[2000];
  px_store_t *db = fresh_db("agent-metrics", pxa_metrics_migrations, PXA_METRICS_NMIGRATIONS, dir,
                            path);
  Prunex__V1__IterationReport r = report(), back = PRUNEX__V1__ITERATION_REPORT__INIT;
  Prunex__V1__PhaseTimes bph = PRUNEX__V1__PHASE_TIMES__INIT;
  snprintf(sql, sizeof sql,
           "INSERT INTO iterations (job_id, rank, iteration, source, test_loss, %s) VALUES"
           " ('j', 0, 7, 'local', -1, %s)",
           px_report_columns(PX_REPORT_ITERATION, PX_REPORT_AGENT, NULL, cols, sizeof cols),
           px_report_params(PX_REPORT_ITERATION, PX_REPORT_AGENT, 1, params, sizeof params));
  px_store_stmt_t *st;
  assert_int_equal(px_store_stmt(db, sql, &st), PX_OK);
  assert_int_equal(px_report_bind(PX_REPORT_ITERATION, PX_REPORT_AGENT, st, 1, &r), PX_OK);
  if (px_store_run(st) != PX_OK) fail_msg("%s", px_last_error());
  snprintf(sql, sizeof sql, "SELECT %s FROM iterations", cols);
  assert_int_equal(px_store_stmt(db, sql, &st), PX_OK);
  assert_int_equal(px_store_step(st), 1);
  back.phases = &bph;
  px_report_read(PX_REPORT_ITERATION, PX_REPORT_AGENT, st, 0, &back, &bph);
  px_store_reset(st);
  assert_same(PX_REPORT_ITERATION, PX_REPORT_AGENT, &r, &back);
  snprintf(sql, sizeof sql,
           "INSERT INTO iteration_layers (job_id, rank, iteration, %s) VALUES ('j', 0, 7, %s)",
           px_report_columns(PX_REPORT_LAYER, PX_REPORT_AGENT, NULL, cols, sizeof cols),
           px_report_params(PX_REPORT_LAYER, PX_REPORT_AGENT, 1, params, sizeof params));
  assert_int_equal(px_store_stmt(db, sql, &st), PX_OK);
  assert_int_equal(px_report_bind(PX_REPORT_LAYER, PX_REPORT_AGENT, st, 1, &lm[1]), PX_OK);
  if (px_store_run(st) != PX_OK) fail_msg("%s", px_last_error());
  snprintf(sql, sizeof sql, "SELECT %s FROM iteration_layers", cols);
  assert_int_equal(px_store_stmt(db, sql, &st), PX_OK);
  assert_int_equal(px_store_step(st), 1);
  Prunex__V1__LayerMetrics lb = PRUNEX__V1__LAYER_METRICS__INIT;
  px_report_read(PX_REPORT_LAYER, PX_REPORT_AGENT, st, 0, &lb, NULL);
  assert_same(PX_REPORT_LAYER, PX_REPORT_AGENT, &lm[1], &lb);
  px_store_reset(st);
  px_store_close(db);
  remove_dir(dir);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_the_tables_are_the_proto_messages),
      cmocka_unit_test(test_the_strategy_record_fills_every_field),
      cmocka_unit_test(test_the_sql_fragments),
      cmocka_unit_test(test_a_report_goes_through_store_api_and_csv),
      cmocka_unit_test(test_the_metrics_file_stores_every_field),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
