/* Rank 0's reports to the coordinator (pxworker): each iteration's report
 * goes out at once and its answer (the control decision) comes back; while
 * the coordinator is unreachable the reports are kept, packed and in order,
 * and delivered when it is back, so the coordinator's history has no hole.
 * Nothing is allocated per report except during an outage. */
#ifndef PX_AGENT_OUTBOX_H
#define PX_AGENT_OUTBOX_H

#include <stddef.h>
#include <stdint.h>

#include "prunex.pb-c.h"
#include "prunex/rpc.h"

typedef struct pxa_kept pxa_kept_t;

typedef struct {
  const char *coordinator, *job; /* borrowed, for the channel and the messages */
  int timeout_ms;                /* collective timeout: bounds the retries of a report */
  px_rpc_channel_t *ch;          /* NULL until the first report, and after a failed one */
  pxa_kept_t *head, **tail;      /* undelivered reports, oldest first */
  size_t n, bytes;
  int64_t outage_since_ms;       /* 0: the coordinator answers */
} pxa_outbox_t;

void pxa_outbox_init(pxa_outbox_t *o, const char *coordinator, const char *job, int timeout_ms);
/* Delivers rep, what was kept first (a quick try: the coordinator answers a
 * report only once it has every earlier one). *dec: the coordinator's answer
 * (px_rpc_message_free), or NULL with *kept = 1 when the coordinator is
 * unreachable: then rep was kept and the caller decides alone. Fails only
 * when the coordinator refused the report (the error says why). */
px_status_t pxa_outbox_deliver(pxa_outbox_t *o, const Prunex__V1__IterationReport *rep,
                               Prunex__V1__ControlDecision **dec, int *kept);
/* A replacement report of the last iteration (its final accuracy): sent
 * when nothing waits, kept otherwise; the answer is history. */
void pxa_outbox_resend(pxa_outbox_t *o, const Prunex__V1__IterationReport *rep);
/* At the end of the run: delivers what is kept for until_ms - now at most,
 * then drops the rest (logged; the node's metrics file has them). */
void pxa_outbox_finish(pxa_outbox_t *o, int64_t until_ms);
/* Frees the kept reports and the channel. */
void pxa_outbox_free(pxa_outbox_t *o);

#endif
