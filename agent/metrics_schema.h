/* Schema of the node-local metrics file, as numbered px_store migrations
 * (docs/metrics.md describes every column). Header-only so that the tests
 * can open a metrics file with the very schema the programs write. Never
 * edit a released migration: append a new one.
 *
 * Times are Unix milliseconds; byte counts are payload bytes sent plus
 * received; a negative accuracy or loss means "not evaluated". */
#ifndef PX_AGENT_METRICS_SCHEMA_H
#define PX_AGENT_METRICS_SCHEMA_H

#include "prunex/store.h"

static const char pxa_metrics_schema_v1[] =
    /* One row per rank and run of a job on this node. */
    "CREATE TABLE runs ("
    "  job_id TEXT NOT NULL,"
    "  rank INTEGER NOT NULL,"
    "  local_rank INTEGER NOT NULL,"
    "  node_index INTEGER NOT NULL,"
    "  world_size INTEGER NOT NULL,"
    "  num_nodes INTEGER NOT NULL,"
    "  strategy TEXT NOT NULL DEFAULT '',"
    "  model TEXT NOT NULL DEFAULT '',"
    "  dataset TEXT NOT NULL DEFAULT '',"
    "  pid INTEGER NOT NULL DEFAULT 0,"
    "  started_unix_ms INTEGER NOT NULL,"
    "  finished_unix_ms INTEGER NOT NULL DEFAULT 0,"
    "  status TEXT NOT NULL DEFAULT 'running'," /* running | succeeded | failed | cancelled */
    "  error TEXT NOT NULL DEFAULT '',"
    "  iterations INTEGER NOT NULL DEFAULT 0,"
    "  test_accuracy REAL NOT NULL DEFAULT -1,"
    "  test_loss REAL NOT NULL DEFAULT -1,"
    "  density REAL NOT NULL DEFAULT 1,"
    "  seconds REAL NOT NULL DEFAULT 0,"
    "  sent_intra INTEGER NOT NULL DEFAULT 0,"  /* this rank's own traffic over the run */
    "  recv_intra INTEGER NOT NULL DEFAULT 0,"
    "  sent_inter INTEGER NOT NULL DEFAULT 0,"
    "  recv_inter INTEGER NOT NULL DEFAULT 0,"
    "  model_path TEXT NOT NULL DEFAULT '',"
    "  PRIMARY KEY (job_id, rank));"
    /* One row per rank and outer iteration. */
    "CREATE TABLE iterations ("
    "  job_id TEXT NOT NULL,"
    "  rank INTEGER NOT NULL,"
    "  iteration INTEGER NOT NULL,"
    "  source TEXT NOT NULL,"                   /* local | coordinator */
    "  time_unix_ms INTEGER NOT NULL,"
    "  epoch REAL NOT NULL,"
    "  loss REAL NOT NULL,"
    "  train_accuracy REAL NOT NULL,"
    "  test_accuracy REAL NOT NULL,"
    "  test_loss REAL NOT NULL,"
    "  density REAL NOT NULL,"
    "  mask_drift INTEGER NOT NULL,"
    "  frozen INTEGER NOT NULL,"
    "  bytes_intra INTEGER NOT NULL,"           /* this iteration, all ranks */
    "  bytes_inter INTEGER NOT NULL,"
    "  bytes_inter_dense INTEGER NOT NULL,"
    "  local_s REAL NOT NULL, intra_s REAL NOT NULL, projection_s REAL NOT NULL,"
    "  inter_s REAL NOT NULL, broadcast_s REAL NOT NULL, control_s REAL NOT NULL,"
    "  PRIMARY KEY (job_id, rank, iteration));"
    /* One row per rank, iteration and parameter tensor (H-SADMM only). */
    "CREATE TABLE iteration_layers ("
    "  job_id TEXT NOT NULL,"
    "  rank INTEGER NOT NULL,"
    "  iteration INTEGER NOT NULL,"
    "  layer INTEGER NOT NULL,"
    "  name TEXT NOT NULL DEFAULT '',"
    "  numel INTEGER NOT NULL,"
    "  r_intra REAL NOT NULL, s_intra REAL NOT NULL, r_inter REAL NOT NULL, s_inter REAL NOT NULL,"
    "  rho1 REAL NOT NULL, rho2 REAL NOT NULL, density REAL NOT NULL,"
    "  theta_norm REAL NOT NULL, zi_norm REAL NOT NULL, z_norm REAL NOT NULL,"
    "  u_norm REAL NOT NULL, v_norm REAL NOT NULL,"
    "  PRIMARY KEY (job_id, rank, iteration, layer));";

/* Every rank records its own rows (it used to copy rank 0's from the
 * coordinator): its own traffic of the iteration, next to the job's. */
static const char pxa_metrics_schema_v2[] =
    "ALTER TABLE iterations ADD COLUMN rank_bytes_intra INTEGER NOT NULL DEFAULT 0;"
    "ALTER TABLE iterations ADD COLUMN rank_bytes_inter INTEGER NOT NULL DEFAULT 0;";

static const px_store_migration_t pxa_metrics_migrations[] = {
    {1, pxa_metrics_schema_v1},
    {2, pxa_metrics_schema_v2},
};
#define PXA_METRICS_NMIGRATIONS \
  ((int)(sizeof pxa_metrics_migrations / sizeof pxa_metrics_migrations[0]))

#endif
