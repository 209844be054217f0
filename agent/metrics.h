/* The node-local metrics file (docs/metrics.md): one SQLite database per
 * node, <work-dir>/metrics.db by default, written by every pxworker of the
 * node (one row per rank and iteration, one per rank, iteration and layer,
 * one per rank and run) and created by pxagent before it starts any worker,
 * so that the workers of a node never race to create the schema.
 *
 * Shared by pxagent and pxworker (compiled into both). A handle is used by
 * one thread at a time, like the px_store_t under it; several processes may
 * write the same file (WAL, busy timeout). */
#ifndef PX_AGENT_METRICS_H
#define PX_AGENT_METRICS_H

#include <stdint.h>

#include "prunex.pb-c.h"
#include "prunex/px.h"
#include "prunex/store.h"

/* Schema name recorded in the file ("agent-metrics"). */
#define PXA_METRICS_SCHEMA "agent-metrics"

typedef struct pxa_metrics pxa_metrics_t;

/* Opens (creating it and its directory's file when missing) and migrates the
 * metrics file at path; retries for a few seconds while another process holds
 * it busy or is creating the schema. The caller owns *out
 * (pxa_metrics_close). Fails with the store's error naming the file. */
px_status_t pxa_metrics_open(const char *path, pxa_metrics_t **out);
void pxa_metrics_close(pxa_metrics_t *m);
px_store_t *pxa_metrics_store(pxa_metrics_t *m);

/* One rank's run of a job: recorded when the worker starts. */
typedef struct {
  const char *job_id;
  int rank, local_rank, node_index, world_size, num_nodes;
  const char *strategy, *model, *dataset;
  int pid;
} pxa_run_info_t;

px_status_t pxa_metrics_run_start(pxa_metrics_t *m, const pxa_run_info_t *info);

/* The end of that run: status is "succeeded", "failed" or "cancelled". */
typedef struct {
  const char *status;
  const char *error;        /* "" on success */
  int iterations;
  double test_accuracy, test_loss, density, seconds;
  uint64_t sent_intra, recv_intra, sent_inter, recv_inter; /* this rank's own traffic */
  const char *model_path;   /* "" when this rank saved no model */
} pxa_run_end_t;

/* The model path that run recorded at its end into buf ("" when none or no
 * such run). */
px_status_t pxa_metrics_model_path(pxa_metrics_t *m, const char *job_id, int rank, char *buf,
                                   size_t cap);

px_status_t pxa_metrics_run_end(pxa_metrics_t *m, const char *job_id, int rank,
                                const pxa_run_end_t *end);

/* Records one iteration of rank `rank` (replacing an earlier record of the
 * same iteration) with its layers, in one transaction. r carries the job's
 * figures as the coordinator gets them (its own rank field is ignored);
 * test_loss is not in the report and comes separately (negative: not
 * evaluated); rank_bytes_* are this rank's own traffic in the iteration. */
px_status_t pxa_metrics_record(pxa_metrics_t *m, int rank, const Prunex__V1__IterationReport *r,
                               double test_loss, uint64_t rank_bytes_intra,
                               uint64_t rank_bytes_inter);

#endif
