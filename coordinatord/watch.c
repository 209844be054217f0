/* The open streams: WatchJob (a job's updates, ended when it finishes) and
 * WatchAssignments (what a node must start and stop). A job's change is told
 * here (coord_job_changed, after the commit: effects.h); a node's stream that
 * ends counts as its agent gone (gone.c). */
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "flow.h"
#include "notify_policy.h"

void coord_job_changed(coord_t *c, const char *job_id, const Prunex__V1__IterationReport *latest) {
  coord_notify_job(c, job_id); /* a state change: its notifications */
  int any = 0;
  for (coord_watch_t *w = c->job_watches; w; w = w->next) any |= !strcmp(w->id, job_id);
  if (!any) return;
  coord_arena_t a;
  coord_arena_init(&a);
  Prunex__V1__Job *job;
  if (coord_job_load(c, &a, job_id, &job) != PX_OK || !job) {
    px_log(PX_LOG_ERROR, "job %s: cannot load for its watchers: %s", job_id, px_last_error());
    coord_arena_free(&a);
    return;
  }
  Prunex__V1__JobUpdate up = PRUNEX__V1__JOB_UPDATE__INIT;
  up.job = job;
  up.latest = (Prunex__V1__IterationReport *)latest;
  int end = coord_job_terminal(job->state);
  /* first the watchers who may see the whole job, then the others with
   * its notify URL's secrets hidden */
  for (int pass = 0; pass < 2; pass++) {
    if (pass == 1 && coord_job_redact(&a, &(coord_identity_t){.role = COORD_ROLE_NODE}, job) !=
                         PX_OK) {
      px_log(PX_LOG_ERROR, "job %s: cannot tell its watchers: %s", job_id, px_last_error());
      break;
    }
    coord_watch_t *w = c->job_watches, *next;
    for (; w; w = next) {
      next = w->next;
      if (strcmp(w->id, job_id) != 0 || coord_job_visible(&w->who, job->owner) != !pass)
        continue;
      px_rpc_srv_send(w->call, &up.base);
      if (end) coord_watch_close(c, w);
    }
  }
  coord_arena_free(&a);
}

void coord_send_to_node(coord_t *c, const char *node_id, const Prunex__V1__Assignment *as) {
  int sent = 0;
  for (coord_watch_t *w = c->node_watches; w; w = w->next) {
    if (strcmp(w->id, node_id) != 0) continue;
    if (px_rpc_srv_send(w->call, &as->base) == PX_OK) sent++;
  }
  px_log(PX_LOG_INFO, "job %s: %s assignment (attempt %d) for node %s (%d stream%s)",
         as->job_id,
         as->action == PRUNEX__V1__ASSIGNMENT_ACTION__ASSIGNMENT_ACTION_START ? "START" : "CANCEL",
         as->attempt, node_id, sent, sent == 1 ? "" : "s");
}

static void coord_watch_unlink(coord_watch_t **list, coord_watch_t *w) {
  for (coord_watch_t **p = list; *p; p = &(*p)->next) {
    if (*p == w) {
      *p = w->next;
      return;
    }
  }
}

static void coord_watch_cancelled(px_rpc_srv_call_t *call, void *arg) {
  coord_watch_t *w = arg;
  coord_watch_unlink(w->is_job ? &w->c->job_watches : &w->c->node_watches, w);
  /* The client left: for an assignment stream, the node's agent. */
  if (!w->is_job) coord_agent_gone(w->c, w->id);
  px_rpc_srv_finish(call, PX_RPC_CANCELLED, "watch ended");
  px_free(w);
}

coord_watch_t *coord_watch_open(coord_t *c, px_rpc_srv_call_t *call, const char *id, int is_job) {
  coord_watch_t *w = px_calloc(1, sizeof *w, "coordd.watch");
  if (!w) return NULL;
  w->c = c;
  w->call = call;
  w->is_job = is_job;
  w->who = c->who; /* the caller coord_authorize identified for this call */
  snprintf(w->id, sizeof w->id, "%s", id);
  coord_watch_t **list = is_job ? &c->job_watches : &c->node_watches;
  w->next = *list;
  *list = w;
  px_rpc_srv_on_cancel(call, coord_watch_cancelled, w);
  return w;
}

void coord_watch_close(coord_t *c, coord_watch_t *w) {
  coord_watch_unlink(w->is_job ? &c->job_watches : &c->node_watches, w);
  px_rpc_srv_finish(w->call, PX_RPC_OK, NULL);
  px_free(w);
}

void coord_watch_end(coord_t *c, coord_watch_t *w, px_rpc_code_t code, const char *fmt, ...) {
  char msg[512];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(msg, sizeof msg, fmt, ap);
  va_end(ap);
  coord_watch_unlink(w->is_job ? &c->job_watches : &c->node_watches, w);
  if (!w->is_job) coord_agent_gone(c, w->id);
  px_rpc_srv_finish(w->call, code, "%s", msg);
  px_free(w);
}
