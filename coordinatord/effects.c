/* The effects record (effects.h): what a transition makes follow once it
 * is committed. Recording calls nothing; commit.c applies it. */
#include <string.h>

#include "flow.h"

#include "prunex/check.h"

void coord_effects_init(coord_effects_t *fx, coord_arena_t *a) {
  memset(fx, 0, sizeof *fx);
  fx->a = a;
}

static coord_send_t *coord_fx_send(coord_effects_t *fx, const char *job_id, int action) {
  coord_send_t *s = coord_push(fx->a, (void **)&fx->sends, &fx->nsends, &fx->csends, sizeof *s);
  if (!s || !(s->job_id = coord_strdup(fx->a, job_id))) return NULL;
  s->action = action;
  return s;
}

px_status_t coord_fx_push(coord_effects_t *fx, const char *job_id, int action) {
  return coord_fx_send(fx, job_id, action) ? PX_OK : PX_ERR_NOMEM;
}

px_status_t coord_fx_changed(coord_effects_t *fx, const char *job_id) {
  for (size_t i = 0; i < fx->nchanged; i++)
    if (!strcmp(fx->changed[i], job_id)) return PX_OK; /* told once, of its latest state */
  char **slot = coord_push(fx->a, (void **)&fx->changed, &fx->nchanged, &fx->cchanged,
                           sizeof(char *));
  return slot && (*slot = coord_strdup(fx->a, job_id)) ? PX_OK : PX_ERR_NOMEM;
}

void coord_fx_schedule(coord_effects_t *fx) { fx->schedule = 1; }

px_status_t coord_fx_report(coord_effects_t *fx, const char *job_id,
                            const Prunex__V1__IterationReport *r) {
  fx->report_job = job_id;
  fx->report = r;
  return coord_fx_changed(fx, job_id);
}

px_status_t coord_fx_fault(coord_effects_t *fx, const char *job_id, const coord_fault_t *f) {
  coord_send_t *s =
      coord_fx_send(fx, job_id, PRUNEX__V1__ASSIGNMENT_ACTION__ASSIGNMENT_ACTION_CANCEL);
  if (!s) return PX_ERR_NOMEM;
  if (f->restarted) {
    /* its placement is gone: the CANCEL names the attempt, to its nodes */
    s->attempt = f->attempt;
    s->nodes = f->nodes;
    s->nnodes = f->nnodes;
  }
  fx->schedule = 1;
  return coord_fx_changed(fx, job_id);
}

px_status_t coord_fx_cancel_nodes(coord_effects_t *fx, const char *job_id, int attempt,
                                  char **nodes, size_t n) {
  coord_send_t *s =
      coord_fx_send(fx, job_id, PRUNEX__V1__ASSIGNMENT_ACTION__ASSIGNMENT_ACTION_CANCEL);
  if (!s) return PX_ERR_NOMEM;
  s->attempt = attempt;
  s->nodes = nodes;
  s->nnodes = n;
  return PX_OK;
}

px_status_t coord_fx_start_nodes(coord_effects_t *fx, const char *job_id, int join_epoch,
                                 char **nodes, size_t n) {
  coord_send_t *s =
      coord_fx_send(fx, job_id, PRUNEX__V1__ASSIGNMENT_ACTION__ASSIGNMENT_ACTION_START);
  if (!s) return PX_ERR_NOMEM;
  s->join_epoch = join_epoch;
  s->nodes = nodes;
  s->nnodes = n;
  return PX_OK;
}

void coord_effects_clear(coord_effects_t *fx) { coord_effects_init(fx, fx->a); }
