/* The HTTP side's reads: the queries behind /api/v1 and
 * /metrics, run on the HTTP thread against its own read-only store
 * (coord_db_http_open), never against c->db (http.h says why).
 *
 * Each object the JSON API lists is described once by a field table (its
 * key, the SQL expression that yields it, how the value is read): the
 * SELECT list is made from the table here and http_api.c reads a row back
 * by the same table, so a key can never be paired with another key's
 * column. Rows reach the caller one at a time through a px_store_row_fn
 * (prunex/store.h; the statement is reset when the rows end, so no read
 * stays open). Every function returns PX_OK or a negative status whose
 * message (px_last_error) names the file and the statement. */
#ifndef PX_COORD_DB_HTTP_READ_H
#define PX_COORD_DB_HTTP_READ_H

#include "prunex/report.h"
#include "prunex/store.h"

/* How a column becomes a value. Every kind is null for SQL NULL. */
typedef enum {
  HF_TEXT,        /* a string */
  HF_TEXT_SET,    /* a string, null when empty */
  HF_INT,         /* an integer */
  HF_INT_POS,     /* an integer, null unless > 0 */
  HF_INT_NN,      /* an integer, null when negative */
  HF_NUM,         /* a number (null when not finite) */
  HF_NUM_NN,      /* a number, null when negative (the "not measured" -1) */
  HF_BOOL,        /* true for nonzero */
  HF_JOB_STATE,   /* a JobState as its name */
  HF_NODE_STATE,  /* a NodeState as its name */
  HF_SPEC,        /* the JobSpec blob: strategy, model, dataset, max_iterations,
                     max_restarts */
  HF_GROUP,       /* a flag: when nonzero, the next `group` fields nested under
                     key, else null */
  HF_HIDDEN,      /* selected, not written (the paging cursor) */
} coord_hf_kind_t;

typedef struct {
  const char *key;
  const char *sql;
  coord_hf_kind_t kind;
  int group;      /* HF_GROUP: how many fields follow inside it */
} coord_hfield_t;

/* The objects of the JSON API: a job as /api/v1/jobs lists it (its row id
 * first, hidden: the cursor), the totals /api/v1/jobs/JOB adds over rank
 * 0's iterations, a node (row id first, hidden). */
typedef enum { COORD_HTTP_JOB, COORD_HTTP_JOB_TOTALS, COORD_HTTP_NODE } coord_http_obj_t;
const coord_hfield_t *coord_db_http_fields(coord_http_obj_t obj, int *n);

/* The iteration and layer objects: the report table's PX_REPORT_JSON
 * fields (prunex/report.h), the column named as the key; a layer starts
 * with its iteration, and an iteration's phase times nest under "phases"
 * (HF_GROUP on has_phases). Fills out[] (COORD_HTTP_REPORT_MAX entries);
 * returns the count. */
#define COORD_HTTP_REPORT_MAX 48
int coord_db_http_report_fields(px_report_table_t t, coord_hfield_t *out);

/* Opens db_path read-only (the coordinator's schema at its newest version;
 * *out owned by the caller: px_store_close). */
px_status_t coord_db_http_open(const char *db_path, px_store_t **out);

/* Finds a job by id, or by name when no job has that id: *count is how
 * many jobs matched (0, 1, or 2 for "several"), the first one's id into
 * job_id (cap bytes). */
px_status_t coord_db_http_resolve_job(px_store_t *db, const char *ref, char *job_id, size_t cap,
                                      int *count);

/* The listings, limit rows each (the caller asks for one more to know
 * whether a next page exists), fn called per row with the columns of the
 * object's fields in order: jobs with row id below before, newest first;
 * nodes with row id above after, by registration; one job (its fields
 * then its totals; no row when unknown); a job's rank 0 iterations after
 * `after`, and its rank 0 layers after (iteration, layer), both read by
 * the n fields of t (coord_db_http_report_fields). */
px_status_t coord_db_http_jobs(px_store_t *db, int64_t before, int limit, px_store_row_fn fn,
                               void *arg);
px_status_t coord_db_http_nodes(px_store_t *db, int64_t after, int limit, px_store_row_fn fn,
                                void *arg);
px_status_t coord_db_http_job(px_store_t *db, const char *job_id, px_store_row_fn fn, void *arg);
px_status_t coord_db_http_iterations(px_store_t *db, const coord_hfield_t *t, int n,
                                     const char *job_id, int64_t after, int limit,
                                     px_store_row_fn fn, void *arg);
px_status_t coord_db_http_layers(px_store_t *db, const coord_hfield_t *t, int n,
                                 const char *job_id, int64_t iteration, int64_t layer, int limit,
                                 px_store_row_fn fn, void *arg);

/* /metrics. One read transaction (begin ... end), so that every figure
 * comes from the same snapshot; end never fails. */
px_status_t coord_db_http_snapshot_begin(px_store_t *db);
void coord_db_http_snapshot_end(px_store_t *db);
/* Nodes (nodes 1) or jobs by state: count[s] for s in 0..n-1 (others 0). */
px_status_t coord_db_http_state_counts(px_store_t *db, int nodes, long long *count, int n);

/* A per-job sample of /metrics: of report column `column`, the value of
 * rank 0's latest iteration (LATEST), the latest value that was measured
 * (LATEST_MEASURED: >= 0), the mean over the latest iteration's layers
 * (LAYER_MEAN), or the sum over the job's iterations (TOTAL). */
typedef enum {
  COORD_SAMPLE_LATEST,
  COORD_SAMPLE_LATEST_MEASURED,
  COORD_SAMPLE_LAYER_MEAN,
  COORD_SAMPLE_TOTAL,
} coord_sample_how_t;
typedef struct {
  const char *column;
  coord_sample_how_t how;
} coord_db_sample_t;
/* The jobs in state `state`, then those that ended (an end state) at or
 * after ended_since_ms (INT64_MAX: none), each by submission; fn called
 * per job with the columns job_id, name, spec (blob), the latest iteration
 * (NULL when none was reported), its has_phases, the n samples' values
 * (NULL when there is none), then the job's state and finished_unix_ms. */
px_status_t coord_db_http_job_samples(px_store_t *db, int state, int64_t ended_since_ms,
                                      const coord_db_sample_t *s, int n, px_store_row_fn fn,
                                      void *arg);

#endif
