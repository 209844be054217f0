/* Rank 0's reports to the coordinator, and what an outage keeps (outbox.h). */
#include <stdio.h>
#include <string.h>

#include "outbox.h"
#include "util.h"

/* Rank 0 waits this long at most for the coordinator's decision before it
 * decides alone (an outage); a shorter outage is ridden out in place. */
#define PXA_REPORT_BUDGET_MS 10000
/* Reports kept while the coordinator is unreachable; beyond this the
 * oldest are dropped (the node-local metrics file keeps every iteration). */
#define PXA_KEPT_MAX_BYTES (64u << 20)

/* An iteration report rank 0 could not deliver, packed. */
struct pxa_kept {
  pxa_kept_t *next;
  int iteration;
  size_t len;
  uint8_t data[];
};

void pxa_outbox_init(pxa_outbox_t *o, const char *coordinator, const char *job, int timeout_ms) {
  memset(o, 0, sizeof *o);
  o->coordinator = coordinator;
  o->job = job;
  o->timeout_ms = timeout_ms;
  o->tail = &o->head;
}

static px_status_t pxa_outbox_channel(pxa_outbox_t *o) {
  if (o->ch) return PX_OK;
  return px_rpc_channel_create(o->coordinator, &o->ch);
}

static void pxa_outbox_drop_channel(pxa_outbox_t *o) {
  px_rpc_channel_destroy(o->ch);
  o->ch = NULL;
}

/* ReportIteration, retried (on a fresh channel, so gRPC's own reconnect
 * backoff does not delay us) while the coordinator is unreachable, for at
 * most PXA_REPORT_BUDGET_MS (and three quarters of the collective timeout:
 * the other ranks wait for the decision that long before they give up). */
static px_status_t pxa_outbox_report(pxa_outbox_t *o, const Prunex__V1__IterationReport *rep,
                                     Prunex__V1__ControlDecision **dec) {
  int64_t budget = (int64_t)o->timeout_ms * 3 / 4;
  if (budget > PXA_REPORT_BUDGET_MS) budget = PXA_REPORT_BUDGET_MS;
  int64_t end = pxa_now_ms() + budget;
  int64_t pause = 100;
  for (;;) {
    px_status_t st = pxa_outbox_channel(o);
    if (st == PX_OK) {
      int64_t left = end - pxa_now_ms();
      int deadline = left > 10000 ? 10000 : left > 500 ? (int)left : 500;
      st = px_rpc_report_iteration(o->ch, rep, deadline, dec);
      if (st == PX_OK) return PX_OK;
      if (!px_rpc_last_retryable()) return st;
    }
    if (pxa_now_ms() + pause >= end) return st;
    px_log(PX_LOG_WARN, "job %s: iteration %d: report failed (%s); retrying", o->job,
           rep->iteration, px_last_error());
    pxa_outbox_drop_channel(o);
    pxa_sleep_ms(pause);
    pause = pause * 2 > 2000 ? 2000 : pause * 2;
  }
}

/* Keeps an undelivered report (packed) for later; the oldest go when the
 * kept bytes pass PXA_KEPT_MAX_BYTES. */
static void pxa_outbox_keep(pxa_outbox_t *o, const Prunex__V1__IterationReport *rep) {
  size_t len = prunex__v1__iteration_report__get_packed_size(rep);
  pxa_kept_t *k = px_malloc(sizeof *k + len, "worker.report.kept");
  if (!k) {
    px_log(PX_LOG_WARN, "job %s: iteration %d: out of memory: its report is dropped", o->job,
           rep->iteration);
    return;
  }
  k->next = NULL;
  k->iteration = rep->iteration;
  k->len = len;
  prunex__v1__iteration_report__pack(rep, k->data);
  *o->tail = k;
  o->tail = &k->next;
  o->n++;
  o->bytes += len;
  while (o->bytes > PXA_KEPT_MAX_BYTES && o->head && o->head->next) {
    pxa_kept_t *old = o->head;
    o->head = old->next;
    o->n--;
    o->bytes -= old->len;
    px_log(PX_LOG_WARN, "job %s: report of iteration %d dropped (over %u MiB kept)", o->job,
           old->iteration, PXA_KEPT_MAX_BYTES >> 20);
    px_free(old);
  }
}

/* Sends the kept reports in order, each with a short deadline, until one
 * fails or until_ms; the coordinator's answers to them are history and are
 * dropped. Returns 1 when nothing is kept any more. */
static int pxa_outbox_flush(pxa_outbox_t *o, int64_t until_ms) {
  while (o->head) {
    if (pxa_outbox_channel(o) != PX_OK) return 0;
    pxa_kept_t *k = o->head;
    void *resp = NULL;
    size_t rlen = 0;
    px_status_t st = px_rpc_call_raw(o->ch, PX_RPC_REPORT_ITERATION, k->data, k->len, 2000, &resp,
                                     &rlen);
    px_free(resp);
    if (st != PX_OK && px_rpc_last_retryable()) {
      pxa_outbox_drop_channel(o);
      if (pxa_now_ms() >= until_ms) return 0;
      pxa_sleep_ms(200);
      if (pxa_now_ms() >= until_ms) return 0;
      continue;
    }
    if (st != PX_OK)
      px_log(PX_LOG_WARN, "job %s: the coordinator refused the kept report of iteration %d: %s",
             o->job, k->iteration, px_last_error());
    o->head = k->next;
    if (!o->head) o->tail = &o->head;
    o->n--;
    o->bytes -= k->len;
    px_free(k);
  }
  if (o->outage_since_ms) {
    px_log(PX_LOG_WARN, "job %s: the coordinator is back after %.1f s; every kept report delivered",
           o->job, (double)(pxa_now_ms() - o->outage_since_ms) / 1000.0);
    o->outage_since_ms = 0;
  }
  return 1;
}

px_status_t pxa_outbox_deliver(pxa_outbox_t *o, const Prunex__V1__IterationReport *rep,
                               Prunex__V1__ControlDecision **dec, int *kept) {
  *dec = NULL;
  *kept = 0;
  px_status_t st = PX_ERR_IO;
  if (!o->head || pxa_outbox_flush(o, pxa_now_ms() + 2000)) st = pxa_outbox_report(o, rep, dec);
  if (st == PX_OK) return PX_OK;
  if (!o->head && !px_rpc_last_retryable())
    return px_set_error(st, "job %s: iteration %d: the coordinator at %s refused the report: %s",
                        o->job, rep->iteration, o->coordinator, px_last_error());
  if (!o->outage_since_ms) {
    o->outage_since_ms = pxa_now_ms();
    px_log(PX_LOG_WARN,
           "job %s: iteration %d: the coordinator at %s is unreachable (%s): rank 0 decides"
           " alone with the penalties in force and keeps the reports for later",
           o->job, rep->iteration, o->coordinator, px_last_error());
  }
  pxa_outbox_keep(o, rep);
  *kept = 1;
  return PX_OK;
}

void pxa_outbox_resend(pxa_outbox_t *o, const Prunex__V1__IterationReport *rep) {
  Prunex__V1__ControlDecision *dec = NULL;
  if (!o->head && pxa_outbox_report(o, rep, &dec) == PX_OK) px_rpc_message_free(dec);
  else pxa_outbox_keep(o, rep);
}

void pxa_outbox_finish(pxa_outbox_t *o, int64_t until_ms) {
  if (!o->head) return;
  px_log(PX_LOG_INFO, "job %s: delivering %zu kept report%s", o->job, o->n, o->n == 1 ? "" : "s");
  if (!pxa_outbox_flush(o, until_ms))
    px_log(PX_LOG_WARN, "job %s: %zu report%s did not reach the coordinator (the node's metrics"
           " file has them)", o->job, o->n, o->n == 1 ? "" : "s");
}

void pxa_outbox_free(pxa_outbox_t *o) {
  while (o->head) {
    pxa_kept_t *k = o->head;
    o->head = k->next;
    px_free(k);
  }
  o->tail = &o->head;
  o->n = o->bytes = 0;
  pxa_outbox_drop_channel(o);
}
