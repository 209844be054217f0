/* The coordinator's SQL for iteration reports (the iterations and
 * iteration_layers tables): named queries whose column lists, binds and
 * reads come from the report tables (prunex/report.h). */
#ifndef PX_COORD_DB_REPORTS_H
#define PX_COORD_DB_REPORTS_H

#include "../coord.h"
#include "prunex/report.h"

/* Stores report r (its row and its layers, replacing an earlier report of
 * the same job and iteration, from any rank); a report without a time gets now_ms.
 * The caller holds the transaction. Fails with the store's error. */
px_status_t coord_db_reports_put(px_store_t *db, const Prunex__V1__IterationReport *r,
                                 int64_t now_ms);

/* The reports of job_id from iteration `from` on, ordered by iteration and
 * rank, at most limit (0: all), with their layers when include_layers, into
 * resp (arrays and strings in a). Fails with the store's error or
 * PX_ERR_NOMEM. */
px_status_t coord_db_reports_list(px_store_t *db, coord_arena_t *a, const char *job_id, int from,
                                  int limit, int include_layers,
                                  Prunex__V1__GetIterationsResponse *resp);

#endif
