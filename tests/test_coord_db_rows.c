/* The coordinator data layer's shared loops (coordinatord/db/db_core.h), on
 * the real schema: coord_db_list appends each column to its arena array
 * (text copied, integers typed), coord_db_rows fills an array of structs
 * and drops the rows its fill refuses, coord_db_objects an array of
 * pointers; every one leaves no read open and reports a bad statement.
 * The scheduler's running-job snapshot (db/sched.c, on those loops) counts
 * the nodes a job holds: an elastic job grown or shrunk, num_nodes before
 * any is placed; an attempt's node-seconds follow its membership epochs. */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "../coordinatord/arena.c"
#include "../coordinatord/db/db_core.c"
#include "../coordinatord/db/sched.c"
#include "../coordinatord/db/schema.c"
#include "coord_harness.h"

typedef struct {
  char dir[256];
  char path[320];
  coord_t c;
  coord_arena_t a;
} fixture_t;

static int setup(void **state) {
  fixture_t *f = calloc(1, sizeof *f);
  assert_non_null(f);
  assert_int_equal(pxt_mkdtemp(f->dir, sizeof f->dir), 0);
  snprintf(f->path, sizeof f->path, "%s/coord.db", f->dir);
  px_store_options_t o = coord_db_options(0, 1, 2000);
  if (px_store_open(f->path, &o, &f->c.db) != PX_OK) fail_msg("%s", px_last_error());
  /* three nodes in registration order, the second with a long name */
  for (int i = 1; i <= 3; i++) {
    char id[16], name[64];
    snprintf(id, sizeof id, "node-%04d", i);
    snprintf(name, sizeof name, i == 2 ? "a-rather-long-node-name-%d" : "n%d", i);
    assert_int_equal(px_store_run_args(f->c.db,
                                       "INSERT INTO nodes (node_id, name, hostname, state,"
                                       " registered_unix_ms, last_heartbeat_unix_ms)"
                                       " VALUES (?1, ?2, 'h', ?3, ?4, ?4)",
                                       PX_STORE_ARGS(PX_ARG_TEXT(id), PX_ARG_TEXT(name),
                                                     PX_ARG_INT(i == 3 ? NS_LOST : NS_READY),
                                                     PX_ARG_INT(1000 * (int64_t)i))),
                     PX_OK);
  }
  coord_arena_init(&f->a);
  *state = f;
  return 0;
}

static int teardown(void **state) {
  fixture_t *f = *state;
  coord_arena_free(&f->a);
  px_store_close(f->c.db);
  pxt_rmtree(f->dir);
  free(f);
  return 0;
}

static void test_list_appends_each_column_typed(void **state) {
  fixture_t *f = *state;
  char **ids = NULL, **names = NULL;
  int *states = NULL;
  int64_t *beats = NULL;
  size_t n = 0;
  assert_int_equal(coord_db_list(&f->c, &f->a,
                                 "SELECT node_id, name, state, last_heartbeat_unix_ms FROM nodes"
                                 " WHERE last_heartbeat_unix_ms > ?1 ORDER BY id",
                                 PX_STORE_ARGS(PX_ARG_INT(0)),
                                 COORD_LIST_COLS(COORD_LIST_TEXT(&ids), COORD_LIST_TEXT(&names),
                                                 COORD_LIST_I32(&states), COORD_LIST_INT(&beats)),
                                 &n),
                   PX_OK);
  assert_int_equal(n, 3);
  assert_string_equal(ids[0], "node-0001");
  assert_string_equal(names[1], "a-rather-long-node-name-2");
  assert_int_equal(states[2], NS_LOST);
  assert_int_equal(beats[2], 3000);
  /* appends: a second query adds after the rows already there */
  assert_int_equal(coord_db_ids(&f->c, &f->a, "SELECT node_id FROM nodes WHERE name = ?1", "n3",
                                &ids, &n),
                   PX_OK);
  assert_int_equal(n, 4);
  assert_string_equal(ids[0], "node-0001");
  assert_string_equal(ids[3], "node-0003");
  /* a bad statement fails with the store's message, naming the file */
  n = 0;
  assert_int_equal(coord_db_list(&f->c, &f->a, "SELEKT 1", NULL, 0,
                                 COORD_LIST_COLS(COORD_LIST_TEXT(&ids)), &n),
                   PX_ERR_INVALID);
  assert_non_null(strstr(px_last_error(), f->path));
}

typedef struct {
  char *id;
  int state;
} node_row_t;

/* drops the LOST nodes (the filter a fill may apply) */
static px_status_t node_fill(coord_arena_t *a, px_store_stmt_t *st, void *obj, void *arg) {
  int *calls = arg;
  (*calls)++;
  node_row_t *r = obj;
  assert_null(r->id); /* zeroed, also when a dropped row's slot is reused */
  r->state = (int)px_store_column_int64(st, 1);
  if (r->state == NS_LOST) {
    r->id = (char *)"dropped";
    return 1;
  }
  return (r->id = coord_strdup(a, px_store_column_text(st, 0))) ? PX_OK : PX_ERR_NOMEM;
}

static px_status_t node_fill_fails(coord_arena_t *a, px_store_stmt_t *st, void *obj, void *arg) {
  (void)a, (void)st, (void)obj, (void)arg;
  return px_set_error(PX_ERR_FORMAT, "a row that does not parse");
}

static void test_rows_fill_structs_and_drop_refused_rows(void **state) {
  fixture_t *f = *state;
  node_row_t *rows = NULL;
  size_t n = 99;
  int calls = 0;
  /* the LOST node first, so that the next row takes its slot */
  assert_int_equal(coord_db_rows(&f->c, &f->a,
                                 "SELECT node_id, state FROM nodes ORDER BY state DESC, id", NULL,
                                 0, sizeof *rows, &rows, &n, node_fill, &calls),
                   PX_OK);
  assert_int_equal(calls, 3);
  assert_int_equal(n, 2);
  assert_string_equal(rows[0].id, "node-0001");
  assert_string_equal(rows[1].id, "node-0002");
  assert_int_equal(coord_db_rows(&f->c, &f->a, "SELECT node_id, state FROM nodes", NULL, 0,
                                 sizeof *rows, &rows, &n, node_fill_fails, NULL),
                   PX_ERR_FORMAT);
  /* the statement was reset: the writer can change the table at once */
  assert_int_equal(px_store_begin(f->c.db), PX_OK);
  assert_int_equal(px_store_run_args(f->c.db, "DELETE FROM nodes WHERE node_id = ?1",
                                     PX_STORE_ARGS(PX_ARG_TEXT("node-0003"))),
                   PX_OK);
  assert_int_equal(px_store_commit(f->c.db), PX_OK);
}

static px_status_t name_fill(coord_arena_t *a, px_store_stmt_t *st, void *obj, void *arg) {
  (void)arg;
  char **o = obj;
  return (*o = coord_strdup(a, px_store_column_text(st, 0))) ? PX_OK : PX_ERR_NOMEM;
}

static void test_objects_allocate_one_per_row(void **state) {
  fixture_t *f = *state;
  char ***names = NULL; /* pointers to one-pointer objects */
  size_t n = 0;
  assert_int_equal(coord_db_objects(&f->c, &f->a,
                                    "SELECT name FROM nodes WHERE state = ?1 ORDER BY id",
                                    PX_STORE_ARGS(PX_ARG_INT(NS_READY)), sizeof(char *), &names,
                                    &n, name_fill, NULL),
                   PX_OK);
  assert_int_equal(n, 2);
  assert_ptr_not_equal(names[0], names[1]);
  assert_string_equal(*names[0], "n1");
  assert_string_equal(*names[1], "a-rather-long-node-name-2");
}

/* job_id, owner, state, num_nodes, then the node indices it holds (-1 ends) */
static void add_job(fixture_t *f, const char *id, const char *owner, int st, int nodes,
                    const int *held) {
  assert_int_equal(px_store_run_args(f->c.db,
                                     "INSERT INTO jobs (job_id, owner, state, spec, num_nodes,"
                                     " workers_per_node, created_unix_ms, updated_unix_ms,"
                                     " scheduled_unix_ms) VALUES (?1, ?2, ?3, x'', ?4, 1, 5, 5, 7)",
                                     PX_STORE_ARGS(PX_ARG_TEXT(id), PX_ARG_TEXT(owner),
                                                   PX_ARG_INT(st), PX_ARG_INT(nodes))),
                   PX_OK);
  for (int i = 0; held[i] >= 0; i++) {
    char node[16];
    snprintf(node, sizeof node, "node-%04d", held[i] % 3 + 1);
    assert_int_equal(px_store_run_args(f->c.db,
                                       "INSERT INTO job_nodes (job_id, node_index, node_id,"
                                       " leader_rank) VALUES (?1, ?2, ?3, ?4)",
                                       PX_STORE_ARGS(PX_ARG_TEXT(id), PX_ARG_INT(held[i]),
                                                     PX_ARG_TEXT(node), PX_ARG_INT(held[i]))),
                     PX_OK);
  }
}

static void test_running_jobs_count_the_nodes_they_hold(void **state) {
  fixture_t *f = *state;
  add_job(f, "job-grown", "alice", JS_RUNNING, 2, (const int[]){0, 1, 2, -1});
  add_job(f, "job-shrunk", "bob", JS_RUNNING, 3, (const int[]){0, 2, -1});
  add_job(f, "job-placing", "carol", JS_SCHEDULED, 2, (const int[]){-1});
  add_job(f, "job-waiting", "dave", JS_PENDING, 4, (const int[]){-1});
  coord_db_sched_use_t *u = NULL;
  size_t n = 0;
  assert_int_equal(coord_db_sched_running(&f->c, &f->a, &u, &n), PX_OK);
  assert_int_equal(n, 3);
  const char *want_user[] = {"alice", "bob", "carol"};
  const double want_nodes[] = {3, 2, 2};
  for (int k = 0; k < 3; k++) {
    size_t i = 0;
    while (i < n && strcmp(u[i].user, want_user[k])) i++;
    assert_true(i < n);
    assert_true(u[i].value == want_nodes[k]);
    assert_int_equal(u[i].ms, 7);
  }
}

/* an epoch of job-grown's attempt: its time and member node ids */
static void add_epoch(fixture_t *f, int attempt, int epoch, int64_t ms, const char *ids) {
  assert_int_equal(px_store_run_args(f->c.db,
                                     "INSERT INTO job_epochs (job_id, attempt, epoch,"
                                     " from_iteration, node_ids, node_indexes, reason,"
                                     " time_unix_ms) VALUES ('job-grown', ?1, ?2, 0, ?3, '', 'r',"
                                     " ?4)",
                                     PX_STORE_ARGS(PX_ARG_INT(attempt), PX_ARG_INT(epoch),
                                                   PX_ARG_TEXT(ids), PX_ARG_INT(ms))),
                   PX_OK);
}

static void test_an_attempt_is_charged_the_nodes_of_each_epoch(void **state) {
  fixture_t *f = *state;
  add_job(f, "job-grown", "alice", JS_RUNNING, 2, (const int[]){0, 1, 2, -1});
  add_job(f, "job-fixed", "bob", JS_RUNNING, 3, (const int[]){0, 1, 2, -1});
  /* placed at 7 ms with 2 nodes; from 3,007 ms 1 node, from 5,007 ms 3 */
  add_epoch(f, 1, 1, 7, "node-0001\nnode-0002");
  add_epoch(f, 1, 2, 3007, "node-0002");
  add_epoch(f, 1, 3, 5007, "node-0002\nnode-0001\nnode-0003");
  add_epoch(f, 0, 1, 7, "node-0001"); /* another attempt's: not this one's */
  char owner[64];
  int found = 0;
  double ns = -1;
  assert_int_equal(coord_db_sched_attempt(&f->c, "job-grown", 10007, &found, owner, sizeof owner,
                                          &ns),
                   PX_OK);
  assert_true(found);
  assert_string_equal(owner, "alice");
  assert_true(fabs(ns - (2 * 3 + 1 * 2 + 3 * 5)) < 1e-9);
  /* before the second epoch began, and a job with no epochs: its num_nodes */
  assert_int_equal(coord_db_sched_attempt(&f->c, "job-grown", 2007, &found, owner, sizeof owner,
                                          &ns),
                   PX_OK);
  assert_true(fabs(ns - 2 * 2) < 1e-9);
  assert_int_equal(coord_db_sched_attempt(&f->c, "job-fixed", 4007, &found, owner, sizeof owner,
                                          &ns),
                   PX_OK);
  assert_true(fabs(ns - 3 * 4) < 1e-9);
  assert_int_equal(coord_db_sched_attempt(&f->c, "job-none", 4007, &found, owner, sizeof owner,
                                          &ns),
                   PX_OK);
  assert_false(found);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test_setup_teardown(test_list_appends_each_column_typed, setup, teardown),
      cmocka_unit_test_setup_teardown(test_rows_fill_structs_and_drop_refused_rows, setup,
                                      teardown),
      cmocka_unit_test_setup_teardown(test_objects_allocate_one_per_row, setup, teardown),
      cmocka_unit_test_setup_teardown(test_running_jobs_count_the_nodes_they_hold, setup,
                                      teardown),
      cmocka_unit_test_setup_teardown(test_an_attempt_is_charged_the_nodes_of_each_epoch, setup,
                                      teardown),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
