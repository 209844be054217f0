/* The coordinator database schema, as numbered migrations (px_store applies
 * the missing ones in order, each in one transaction, and refuses a database
 * whose schema_version is newer than the last one here). Never edit a
 * released migration: append a new one.
 *
 * States are the numeric values of prunex.v1.JobState / NodeState; times
 * are Unix milliseconds. docs/ describe the tables for people who query
 * them directly. */
#include "../coord.h"

static const char coord_schema_v1[] =
    /* Nodes, in registration order (id). A node is found again by its name. */
    "CREATE TABLE nodes ("
    "  id INTEGER PRIMARY KEY AUTOINCREMENT,"
    "  node_id TEXT NOT NULL UNIQUE,"
    "  name TEXT NOT NULL UNIQUE,"
    "  hostname TEXT NOT NULL DEFAULT '',"
    "  state INTEGER NOT NULL,"
    "  job_id TEXT NOT NULL DEFAULT '',"          /* the job holding the node, '' when idle */
    "  addresses TEXT NOT NULL DEFAULT '',"       /* data-plane addresses, one per line */
    "  agent_version TEXT NOT NULL DEFAULT '',"
    "  pid INTEGER NOT NULL DEFAULT 0,"
    "  registered_unix_ms INTEGER NOT NULL,"
    "  last_heartbeat_unix_ms INTEGER NOT NULL);"
    "CREATE TABLE node_devices ("
    "  node_id TEXT NOT NULL REFERENCES nodes(node_id),"
    "  position INTEGER NOT NULL,"                /* order as registered: local rank order */
    "  device_index INTEGER NOT NULL,"
    "  kind INTEGER NOT NULL,"
    "  name TEXT NOT NULL DEFAULT '',"
    "  memory_bytes INTEGER NOT NULL DEFAULT 0,"
    "  healthy INTEGER NOT NULL,"
    "  PRIMARY KEY (node_id, position));"
    "CREATE TABLE node_events ("
    "  id INTEGER PRIMARY KEY AUTOINCREMENT,"
    "  node_id TEXT NOT NULL REFERENCES nodes(node_id),"
    "  time_unix_ms INTEGER NOT NULL,"
    "  from_state INTEGER NOT NULL,"
    "  to_state INTEGER NOT NULL,"
    "  reason TEXT NOT NULL DEFAULT '');"
    /* Jobs, in submission order (id): the FIFO queue. */
    "CREATE TABLE jobs ("
    "  id INTEGER PRIMARY KEY AUTOINCREMENT,"
    "  job_id TEXT NOT NULL UNIQUE,"
    "  name TEXT NOT NULL DEFAULT '',"
    "  state INTEGER NOT NULL,"
    "  spec BLOB NOT NULL,"                       /* packed prunex.v1.JobSpec */
    "  spec_yaml TEXT NOT NULL DEFAULT '',"
    "  reason TEXT NOT NULL DEFAULT '',"
    "  num_nodes INTEGER NOT NULL,"
    "  workers_per_node INTEGER NOT NULL,"
    "  created_unix_ms INTEGER NOT NULL,"
    "  updated_unix_ms INTEGER NOT NULL,"
    "  scheduled_unix_ms INTEGER NOT NULL DEFAULT 0,"
    "  finished_unix_ms INTEGER NOT NULL DEFAULT 0,"
    "  iteration INTEGER NOT NULL DEFAULT -1,"    /* latest reported */
    "  admm_stable_iterations INTEGER NOT NULL DEFAULT 0,"  /* px_admm_policy_state_t */
    "  admm_frozen INTEGER NOT NULL DEFAULT 0);"
    "CREATE INDEX jobs_state ON jobs(state, id);"
    "CREATE TABLE job_events ("
    "  id INTEGER PRIMARY KEY AUTOINCREMENT,"
    "  job_id TEXT NOT NULL REFERENCES jobs(job_id),"
    "  time_unix_ms INTEGER NOT NULL,"
    "  from_state INTEGER NOT NULL,"
    "  to_state INTEGER NOT NULL,"
    "  reason TEXT NOT NULL DEFAULT '');"
    "CREATE INDEX job_events_job ON job_events(job_id, id);"
    /* Placement: node i of a job gets global ranks i*P .. i*P+P-1. */
    "CREATE TABLE job_nodes ("
    "  job_id TEXT NOT NULL REFERENCES jobs(job_id),"
    "  node_index INTEGER NOT NULL,"
    "  node_id TEXT NOT NULL REFERENCES nodes(node_id),"
    "  leader_rank INTEGER NOT NULL,"
    "  PRIMARY KEY (job_id, node_index));"
    "CREATE INDEX job_nodes_node ON job_nodes(node_id);"
    "CREATE TABLE job_ranks ("
    "  job_id TEXT NOT NULL REFERENCES jobs(job_id),"
    "  rank INTEGER NOT NULL,"
    "  node_index INTEGER NOT NULL,"
    "  local_rank INTEGER NOT NULL,"
    "  device_index INTEGER NOT NULL,"
    "  is_leader INTEGER NOT NULL,"
    "  PRIMARY KEY (job_id, rank));"
    "CREATE TABLE rank_exits ("
    "  job_id TEXT NOT NULL REFERENCES jobs(job_id),"
    "  rank INTEGER NOT NULL,"
    "  node_id TEXT NOT NULL DEFAULT '',"
    "  exit_code INTEGER NOT NULL,"
    "  signal INTEGER NOT NULL,"
    "  reason TEXT NOT NULL DEFAULT '',"
    "  time_unix_ms INTEGER NOT NULL,"
    "  PRIMARY KEY (job_id, rank));"
    /* Job-scoped rendezvous keys. */
    "CREATE TABLE kv ("
    "  job_id TEXT NOT NULL REFERENCES jobs(job_id),"
    "  key TEXT NOT NULL,"
    "  value BLOB NOT NULL,"
    "  updated_unix_ms INTEGER NOT NULL,"
    "  PRIMARY KEY (job_id, key));"
    /* Metrics: one row per reported iteration and rank, and its layers. */
    "CREATE TABLE iterations ("
    "  job_id TEXT NOT NULL REFERENCES jobs(job_id),"
    "  iteration INTEGER NOT NULL,"
    "  rank INTEGER NOT NULL,"
    "  time_unix_ms INTEGER NOT NULL,"
    "  epoch REAL NOT NULL,"
    "  loss REAL NOT NULL,"
    "  train_accuracy REAL NOT NULL,"
    "  test_accuracy REAL NOT NULL,"
    "  density REAL NOT NULL,"
    "  mask_drift INTEGER NOT NULL,"
    "  bytes_intra INTEGER NOT NULL,"
    "  bytes_inter INTEGER NOT NULL,"
    "  bytes_inter_dense INTEGER NOT NULL,"
    "  frozen INTEGER NOT NULL,"
    "  has_phases INTEGER NOT NULL,"
    "  local_s REAL NOT NULL, intra_s REAL NOT NULL, projection_s REAL NOT NULL,"
    "  inter_s REAL NOT NULL, broadcast_s REAL NOT NULL, control_s REAL NOT NULL,"
    "  PRIMARY KEY (job_id, iteration, rank));"
    "CREATE TABLE iteration_layers ("
    "  job_id TEXT NOT NULL,"
    "  iteration INTEGER NOT NULL,"
    "  rank INTEGER NOT NULL,"
    "  layer INTEGER NOT NULL,"
    "  name TEXT NOT NULL DEFAULT '',"
    "  r_intra REAL NOT NULL, s_intra REAL NOT NULL, r_inter REAL NOT NULL, s_inter REAL NOT NULL,"
    "  rho1 REAL NOT NULL, rho2 REAL NOT NULL, density REAL NOT NULL,"
    "  theta_norm REAL NOT NULL, zi_norm REAL NOT NULL, z_norm REAL NOT NULL,"
    "  u_norm REAL NOT NULL, v_norm REAL NOT NULL, numel INTEGER NOT NULL,"
    "  PRIMARY KEY (job_id, iteration, rank, layer),"
    "  FOREIGN KEY (job_id, iteration, rank) REFERENCES iterations(job_id, iteration, rank)"
    "    ON DELETE CASCADE);"
    /* Control: the penalties decided for the next iteration, per layer, and
     * every decision returned (a retried report gets the same answer). */
    "CREATE TABLE job_penalties ("
    "  job_id TEXT NOT NULL REFERENCES jobs(job_id),"
    "  layer INTEGER NOT NULL,"
    "  rho1 REAL NOT NULL,"
    "  rho2 REAL NOT NULL,"
    "  PRIMARY KEY (job_id, layer));"
    "CREATE TABLE decisions ("
    "  job_id TEXT NOT NULL REFERENCES jobs(job_id),"
    "  iteration INTEGER NOT NULL,"
    "  decision BLOB NOT NULL,"                   /* packed prunex.v1.ControlDecision */
    "  time_unix_ms INTEGER NOT NULL,"
    "  PRIMARY KEY (job_id, iteration));";

/* v2: where a rank saved the final model (the job summary's model_path). */
static const char coord_schema_v2[] =
    "ALTER TABLE rank_exits ADD COLUMN model_path TEXT NOT NULL DEFAULT '';";

/* v3: job owners, per-rank secrets, indexes for paging and
 * retention, and the spec's text in a table of its own: SQLite rewrites a
 * whole row on every UPDATE, and jobs rows are updated on every state change
 * and every iteration, which with a 1 MiB spec_yaml in the row cost a
 * megabyte each. */
static const char coord_schema_v3[] =
    "CREATE TABLE job_spec_yaml ("
    "  job_id TEXT PRIMARY KEY REFERENCES jobs(job_id),"
    "  spec_yaml TEXT NOT NULL);"
    "INSERT INTO job_spec_yaml SELECT job_id, spec_yaml FROM jobs WHERE spec_yaml != '';"
    "UPDATE jobs SET spec_yaml = '' WHERE spec_yaml != '';"
    /* where each node lets output_dir be, one absolute directory a line */
    "ALTER TABLE nodes ADD COLUMN output_roots TEXT NOT NULL DEFAULT '';"
    "ALTER TABLE jobs ADD COLUMN owner TEXT NOT NULL DEFAULT '';"
    "ALTER TABLE job_ranks ADD COLUMN secret TEXT NOT NULL DEFAULT '';"
    "CREATE INDEX job_ranks_secret ON job_ranks(secret);"
    "CREATE INDEX jobs_finished ON jobs(finished_unix_ms);"
    "CREATE INDEX rank_exits_job ON rank_exits(job_id);";
/* v4 (recovery): when each placed node was first seen running its ranks
 * (0: not yet), for the placement timeout. */
static const char coord_schema_v4[] =
    "ALTER TABLE job_nodes ADD COLUMN started_unix_ms INTEGER NOT NULL DEFAULT 0;";
/* v5: rank logs uploaded by the agents (logs.c). rank_logs holds one row
 * per rank (size uploaded so far, where the kept tail starts, whether the
 * rank's log is complete); rank_log_chunks the kept bytes, in upload order,
 * oldest dropped once a rank holds more than COORD_LOG_TAIL_BYTES. */
static const char coord_schema_v5[] =
    "CREATE TABLE rank_logs ("
    "  job_id TEXT NOT NULL REFERENCES jobs(job_id),"
    "  rank INTEGER NOT NULL,"
    "  node_id TEXT NOT NULL DEFAULT '',"
    "  size INTEGER NOT NULL DEFAULT 0,"
    "  start_offset INTEGER NOT NULL DEFAULT 0,"
    "  eof INTEGER NOT NULL DEFAULT 0,"
    "  updated_unix_ms INTEGER NOT NULL,"
    "  PRIMARY KEY (job_id, rank));"
    "CREATE TABLE rank_log_chunks ("
    "  job_id TEXT NOT NULL,"
    "  rank INTEGER NOT NULL,"
    "  pos INTEGER NOT NULL,"
    "  data BLOB NOT NULL,"
    "  PRIMARY KEY (job_id, rank, pos));";
/* v6: how many group-mask bits there are, so that drift reads "N of M". */
static const char coord_schema_v6[] =
    "ALTER TABLE iterations ADD COLUMN mask_groups INTEGER NOT NULL DEFAULT 0;";

/* v7: automatic restarts. jobs.attempt is the attempt running
 * now (1 before any restart); prefer_nodes the nodes the next placement
 * tries first (the previous attempt's, one a line, '\n' around each; a
 * line "-ID" is a node it tries last); job_attempts one row per attempt that ended in a fault, for jobs with
 * max_restarts > 0 (node_ids one a line). */
static const char coord_schema_v7[] =
    "ALTER TABLE jobs ADD COLUMN attempt INTEGER NOT NULL DEFAULT 1;"
    "ALTER TABLE jobs ADD COLUMN prefer_nodes TEXT NOT NULL DEFAULT '';"
    "CREATE TABLE job_attempts ("
    "  job_id TEXT NOT NULL REFERENCES jobs(job_id),"
    "  attempt INTEGER NOT NULL,"
    "  cause TEXT NOT NULL DEFAULT '',"
    "  node_ids TEXT NOT NULL DEFAULT '',"
    "  ended_unix_ms INTEGER NOT NULL,"
    "  PRIMARY KEY (job_id, attempt));";

/* v8: rank secrets are no longer stored; a rank keeps the salt
 * its secret is derived from (auth.c) and the secret's SHA-256, which is
 * what a presented secret is looked up by. Secrets stored in clear before
 * are hashed at start (coord_rank_secrets_upgrade). */
static const char coord_schema_v8[] =
    "ALTER TABLE job_ranks ADD COLUMN secret_salt TEXT NOT NULL DEFAULT '';"
    "ALTER TABLE job_ranks ADD COLUMN secret_hash TEXT NOT NULL DEFAULT '';"
    "DROP INDEX job_ranks_secret;"
    "CREATE INDEX job_ranks_secret_hash ON job_ranks(secret_hash);";

/* v9: what the latest iteration report said of the job's
 * checkpoints ("" : usable), for its status while it runs. */
static const char coord_schema_v9[] =
    "ALTER TABLE jobs ADD COLUMN checkpoint_problem TEXT NOT NULL DEFAULT '';";

/* v10: where each node reads data sets from, one absolute
 * directory a line ("" : an older agent that did not say). */
static const char coord_schema_v10[] =
    "ALTER TABLE nodes ADD COLUMN data_roots TEXT NOT NULL DEFAULT '';";

/* v11: the scheduling policy and accounting. jobs.priority (1..1000)
 * and jobs.time_limit_ms (0: none) are the spec's, fixed at submission;
 * jobs.stop_requested_unix_ms is when the coordinator asked the attempt to
 * stop at its time limit (0: not asked); notify_url and notify_mask are
 * the spec's notify (bit s: state s), notified_state the last state whose
 * notifications were queued;
 * sched_usage holds each user's decayed node-seconds as of updated_unix_ms
 * (sched_db.c decays it on read); acct keeps one compact row per job that
 * outlives the job's rows (retention) for `pxctl acct`. */
static const char coord_schema_v11[] =
    "ALTER TABLE jobs ADD COLUMN priority INTEGER NOT NULL DEFAULT 100;"
    "ALTER TABLE jobs ADD COLUMN time_limit_ms INTEGER NOT NULL DEFAULT 0;"
    "ALTER TABLE jobs ADD COLUMN stop_requested_unix_ms INTEGER NOT NULL DEFAULT 0;"
    "ALTER TABLE jobs ADD COLUMN notify_url TEXT NOT NULL DEFAULT '';"
    "ALTER TABLE jobs ADD COLUMN notify_mask INTEGER NOT NULL DEFAULT 0;"
    "ALTER TABLE jobs ADD COLUMN notified_state INTEGER NOT NULL DEFAULT 0;"
    "CREATE INDEX jobs_owner_state ON jobs(owner, state);"
    "CREATE TABLE sched_usage ("
    "  user TEXT PRIMARY KEY,"
    "  usage REAL NOT NULL,"
    "  updated_unix_ms INTEGER NOT NULL);"
    "CREATE TABLE acct ("
    "  id INTEGER PRIMARY KEY,"                  /* the job's jobs.id */
    "  job_id TEXT NOT NULL UNIQUE,"
    "  owner TEXT NOT NULL DEFAULT '',"
    "  name TEXT NOT NULL DEFAULT '',"
    "  num_nodes INTEGER NOT NULL,"
    "  devices INTEGER NOT NULL,"               /* nodes x workers per node */
    "  submit_unix_ms INTEGER NOT NULL,"
    "  start_unix_ms INTEGER NOT NULL DEFAULT 0,"  /* first placement */
    "  end_unix_ms INTEGER NOT NULL DEFAULT 0,"
    "  node_seconds REAL NOT NULL DEFAULT 0,"     /* over every attempt */
    "  state INTEGER NOT NULL,"
    "  reason TEXT NOT NULL DEFAULT '',"
    "  attempts INTEGER NOT NULL DEFAULT 0);"
    "CREATE INDEX acct_submit ON acct(submit_unix_ms);";

/* v12: sweeps and preemption. One row per sweep (its owner, the
 * name and text of the spec it came from, how many jobs it made); each of
 * its jobs names it in jobs.sweep_id ('' : none) with its values in
 * jobs.sweep_point. jobs.preemptions counts the job's attempts that ended
 * preempted. */
static const char coord_schema_v12[] =
    "CREATE TABLE sweeps ("
    "  id INTEGER PRIMARY KEY,"
    "  sweep_id TEXT NOT NULL UNIQUE,"
    "  owner TEXT NOT NULL DEFAULT '',"
    "  name TEXT NOT NULL DEFAULT '',"
    "  spec_yaml TEXT NOT NULL DEFAULT '',"
    "  jobs INTEGER NOT NULL,"
    "  created_unix_ms INTEGER NOT NULL);"
    "ALTER TABLE jobs ADD COLUMN sweep_id TEXT NOT NULL DEFAULT '';"
    "ALTER TABLE jobs ADD COLUMN sweep_point TEXT NOT NULL DEFAULT '';"
    "CREATE INDEX jobs_sweep ON jobs(sweep_id, id);"
    /* preemption: attempts that ended preempted (they use no restart) */
    "ALTER TABLE jobs ADD COLUMN preemptions INTEGER NOT NULL DEFAULT 0;";

/* v13: graceful preemption. One row per running job asked to
 * stop for a waiting one (preempt.c): the waiting job, who asked ("JOB
 * (priority P)"), when, and how far it got: 0 asked, 1 its ranks wrote
 * their checkpoint and exited (at stop_iteration), 2 not asked (its
 * attempt is cancelled when the others have stopped). The rows go when the
 * jobs are queued again or end. */
static const char coord_schema_v13[] =
    "CREATE TABLE preempt_stops ("
    "  job_id TEXT PRIMARY KEY REFERENCES jobs(job_id),"
    "  waiter TEXT NOT NULL,"
    "  asked_by TEXT NOT NULL,"
    "  asked_unix_ms INTEGER NOT NULL,"
    "  stopped INTEGER NOT NULL DEFAULT 0,"
    "  stop_iteration INTEGER NOT NULL DEFAULT -1);";

/* v14: queue controls. jobs.held_by is who holds a PENDING job
 * ('' : not held; held_admin 1 when an admin did: only an admin releases
 * it); jobs.depends the jobs it waits for, one "JOB:ok" or "JOB:any" a
 * line ('' : none). Their states are read from acct, which outlives the
 * jobs' rows. */
static const char coord_schema_v14[] =
    "ALTER TABLE jobs ADD COLUMN held_by TEXT NOT NULL DEFAULT '';"
    "ALTER TABLE jobs ADD COLUMN held_admin INTEGER NOT NULL DEFAULT 0;"
    "ALTER TABLE jobs ADD COLUMN depends TEXT NOT NULL DEFAULT '';";

/* v15: membership (elastic jobs, membership.c). job_epochs: each epoch of
 * an attempt, the member nodes (ids one a line, their placement indexes
 * comma-separated, both in node order) from from_iteration on, why it
 * began; epoch 1 is the attempt's placement. job_epoch_drops: member nodes
 * lost since the newest epoch, dropped from the next one at the next round
 * boundary (the rows go then). job_blacklist: nodes an elastic job lost,
 * counted per job; until_unix_ms > now: not taken back by the job. */
static const char coord_schema_v15[] =
    "CREATE TABLE job_epochs ("
    "  job_id TEXT NOT NULL REFERENCES jobs(job_id),"
    "  attempt INTEGER NOT NULL,"
    "  epoch INTEGER NOT NULL,"
    "  from_iteration INTEGER NOT NULL,"
    "  node_ids TEXT NOT NULL,"
    "  node_indexes TEXT NOT NULL,"
    "  reason TEXT NOT NULL,"
    "  time_unix_ms INTEGER NOT NULL,"
    "  PRIMARY KEY (job_id, attempt, epoch));"
    "CREATE TABLE job_epoch_drops ("
    "  job_id TEXT NOT NULL REFERENCES jobs(job_id),"
    "  attempt INTEGER NOT NULL,"
    "  node_id TEXT NOT NULL,"
    "  reason TEXT NOT NULL,"
    "  time_unix_ms INTEGER NOT NULL,"
    "  PRIMARY KEY (job_id, attempt, node_id));"
    "CREATE TABLE job_blacklist ("
    "  job_id TEXT NOT NULL REFERENCES jobs(job_id),"
    "  node_id TEXT NOT NULL,"
    "  failures INTEGER NOT NULL,"
    "  last_unix_ms INTEGER NOT NULL,"
    "  until_unix_ms INTEGER NOT NULL,"
    "  reason TEXT NOT NULL,"
    "  PRIMARY KEY (job_id, node_id));";

const px_store_migration_t coord_migrations[] = {
    {1, coord_schema_v1},
    {2, coord_schema_v2},
    {3, coord_schema_v3},
    {4, coord_schema_v4},
    {5, coord_schema_v5},
    {6, coord_schema_v6},
    {7, coord_schema_v7},
    {8, coord_schema_v8},
    {9, coord_schema_v9},
    {10, coord_schema_v10},
    {11, coord_schema_v11},
    {12, coord_schema_v12},
    {13, coord_schema_v13},
    {14, coord_schema_v14},
    {15, coord_schema_v15},
};
const int coord_nmigrations = (int)(sizeof coord_migrations / sizeof coord_migrations[0]);

px_store_options_t coord_db_options(int read_only, int create, int busy_timeout_ms) {
  px_store_options_t opt = {
      .schema = "coordinator",
      .migrations = coord_migrations,
      .nmigrations = coord_nmigrations,
      .busy_timeout_ms = busy_timeout_ms,
      .quick_check = !read_only,
      .create = !read_only && create,
      .read_only = read_only,
  };
  return opt;
}
