/* The per-layer report defined once (prunex/layer_metrics.h): the field
 * table names every field of prunex.v1.LayerMetrics, in the proto's order,
 * with its type; every field of px_admm_layer_report_t is in it; both
 * iteration_layers schemas (the coordinator's database, the node-local
 * metrics file, each at its newest migration) have a column for every
 * field; an iteration's layer goes to the wire and back to the policy's
 * struct unchanged; and a layer bound into either table reads back equal. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cmocka.h>

#include "../agent/metrics_schema.h"
#include "../coordinatord/db/schema.c"
#include "prunex/layer_metrics.h"

static void test_the_table_is_the_proto_message(void **state) {
  (void)state;
  const ProtobufCMessageDescriptor *d = &prunex__v1__layer_metrics__descriptor;
  assert_int_equal(px_layer_field_count(), (int)d->n_fields);
  for (int i = 0; i < px_layer_field_count(); i++) {
    const px_layer_field_t *f = px_layer_field_at(i);
    const ProtobufCFieldDescriptor *fd = protobuf_c_message_descriptor_get_field_by_name(d, f->name);
    if (!fd) fail_msg("field %s is not in prunex.v1.LayerMetrics", f->name);
    assert_int_equal(fd->id, i + 1); /* the proto's order */
    assert_int_equal(fd->offset, f->proto_offset);
    static const ProtobufCType want[] = {
        [PX_LAYER_FIELD_I32] = PROTOBUF_C_TYPE_INT32, [PX_LAYER_FIELD_I64] = PROTOBUF_C_TYPE_INT64,
        [PX_LAYER_FIELD_F64] = PROTOBUF_C_TYPE_DOUBLE, [PX_LAYER_FIELD_TEXT] = PROTOBUF_C_TYPE_STRING};
    assert_int_equal(fd->type, want[f->kind]);
  }
  assert_null(px_layer_field_at(-1));
  assert_null(px_layer_field_at(px_layer_field_count()));
  /* every byte of the policy's struct is some field's: r/s x intra/inter,
   * rho1, rho2, five norms (doubles) and numel */
  size_t covered = 0;
  for (int i = 0; i < px_layer_field_count(); i++) {
    const px_layer_field_t *f = px_layer_field_at(i);
    if (f->admm_offset >= 0) covered += f->kind == PX_LAYER_FIELD_F64 ? sizeof(double) : 8;
  }
  assert_int_equal(covered, sizeof(px_admm_layer_report_t));
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

static void test_an_iteration_goes_to_the_wire_and_back(void **state) {
  (void)state;
  px_admm_layer_report_t L[2] = {figures(0), figures(1)};
  double density[2] = {0.25, 1.0};
  const char *names[2] = {"conv1.weight", "fc.bias"};
  px_iteration_t it;
  memset(&it, 0, sizeof it);
  it.nlayers = 2;
  it.layers = L;
  it.layer_density = density;
  it.layer_names = names;
  for (int l = 0; l < 2; l++) {
    Prunex__V1__LayerMetrics m;
    px_layer_metrics_from_iteration(&it, l, &m);
    assert_int_equal(m.layer, l);
    assert_string_equal(m.name, names[l]);
    assert_true(m.density == density[l]);
    assert_true(m.r_intra == L[l].r_intra && m.s_inter == L[l].s_inter);
    assert_true(m.rho2 == L[l].rho2 && m.v_norm == L[l].v_norm);
    assert_int_equal(m.numel, L[l].numel);
    px_admm_layer_report_t back;
    px_layer_metrics_to_admm(&m, &back);
    assert_memory_equal(&back, &L[l], sizeof back);
  }
  /* no names, no densities: "" and -1 */
  it.layer_names = NULL;
  it.layer_density = NULL;
  Prunex__V1__LayerMetrics m;
  px_layer_metrics_from_iteration(&it, 1, &m);
  assert_string_equal(m.name, "");
  assert_true(m.density == -1.0);
}

static void test_the_sql_fragments(void **state) {
  (void)state;
  char buf[512];
  assert_string_equal(px_layer_metrics_columns(buf, sizeof buf),
                      "layer, name, r_intra, s_intra, r_inter, s_inter, rho1, rho2, density, "
                      "theta_norm, zi_norm, z_norm, u_norm, v_norm, numel");
  assert_string_equal(px_layer_metrics_params(4, buf, sizeof buf),
                      "?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12, ?13, ?14, ?15, ?16, ?17, ?18");
  assert_null(px_layer_metrics_columns(buf, 20)); /* too small: NULL, not cut */
  assert_null(px_layer_metrics_params(1, buf, 0));
}

/* Opens a fresh database at the newest migration of a schema, stores one
 * layer in its iteration_layers through the table, and reads it back. */
static void round_trip(const char *schema, const px_store_migration_t *mig, int n,
                       const char *keys) {
  char dir[] = "/tmp/pxlayers-XXXXXX", path[64], cols[512], params[512], sql[1200];
  assert_non_null(mkdtemp(dir));
  snprintf(path, sizeof path, "%s/db.sqlite", dir);
  px_store_options_t o = {.schema = schema, .migrations = mig, .nmigrations = n, .create = 1};
  px_store_t *db = NULL;
  if (px_store_open(path, &o, &db) != PX_OK) fail_msg("%s", px_last_error());
  assert_int_equal(px_store_exec(db, "PRAGMA foreign_keys = OFF"), PX_OK);
  px_admm_layer_report_t L[4] = {figures(0), figures(1), figures(2), figures(3)};
  double density[4] = {1, 1, 1, 0.375};
  const char *names[4] = {"a", "b", "c", "layer3.conv2.weight"}, *name = names[3];
  px_iteration_t it;
  memset(&it, 0, sizeof it);
  it.nlayers = 4;
  it.layers = L;
  it.layer_density = density;
  it.layer_names = names;
  Prunex__V1__LayerMetrics m, back;
  px_layer_metrics_from_iteration(&it, 3, &m);
  snprintf(sql, sizeof sql, "INSERT INTO iteration_layers (%s, %s) VALUES (?1, ?2, ?3, %s)", keys,
           px_layer_metrics_columns(cols, sizeof cols),
           px_layer_metrics_params(4, params, sizeof params));
  px_store_stmt_t *st;
  assert_int_equal(px_store_stmt(db, sql, &st), PX_OK);
  assert_int_equal(px_store_bind_text(st, 1, "job-1"), PX_OK);
  assert_int_equal(px_store_bind_int64(st, 2, 0), PX_OK);
  assert_int_equal(px_store_bind_int64(st, 3, 0), PX_OK);
  assert_int_equal(px_layer_metrics_bind(st, 4, &m), PX_OK);
  if (px_store_run(st) != PX_OK) fail_msg("%s", px_last_error());
  snprintf(sql, sizeof sql, "SELECT %s FROM iteration_layers", cols);
  assert_int_equal(px_store_stmt(db, sql, &st), PX_OK);
  assert_int_equal(px_store_step(st), 1);
  px_layer_metrics_read(st, 0, &back);
  assert_string_equal(back.name, name);
  back.name = m.name; /* the rest byte for byte */
  assert_memory_equal(&back, &m, sizeof m);
  px_store_reset(st);
  px_store_close(db);
  char cmd[128];
  snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
  assert_int_equal(system(cmd), 0);
}

static void test_both_schemas_store_every_field(void **state) {
  (void)state;
  round_trip("coordinator", coord_migrations, coord_nmigrations, "job_id, iteration, rank");
  round_trip("agent-metrics", pxa_metrics_migrations, PXA_METRICS_NMIGRATIONS,
             "job_id, rank, iteration");
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_the_table_is_the_proto_message),
      cmocka_unit_test(test_an_iteration_goes_to_the_wire_and_back),
      cmocka_unit_test(test_the_sql_fragments),
      cmocka_unit_test(test_both_schemas_store_every_field),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
