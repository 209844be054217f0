/* The survivors' roll call of an elastic job. A member node can be silent
 * without being lost to the coordinator: a worker stopped (SIGSTOP, a
 * debugger, swapping) or cut off from its peers while its agent still
 * heartbeats, for less than the agent's watchdog. Its peers notice it at
 * the data plane's lost_ms and repeat their report of the last boundary,
 * marked roll_call, until the coordinator names the next epoch; nothing else
 * would name one, and they would give up (comm.timeout_ms) and fail.
 *
 * So the first roll-call report of a boundary opens a call; a node counts
 * as present once every one of its ranks has answered it. A quarter of
 * comm.timeout_ms after the call opened (half the lost_ms after which the
 * survivors notice, so they all have, and well within the comm.timeout_ms
 * they wait), a member node not present is lost (membership.c: dropped at
 * this boundary, its late reports fenced), provided some node is present.
 * Which peer each survivor blamed does not matter: a rank waiting on a rank
 * that waits on the silent one blames the wrong node, but answers.
 *
 * The calls live in memory (a restarted pxcoordd opens a new one at the
 * survivors' next repeat), at most COORD_ROLLCALLS of them, the oldest
 * forgotten first. */
#include "rollcall.h"

#include <stdio.h>
#include <string.h>

#include "db/db_core.h"
#include "db/membership.h"
#include "flow.h"
#include "prunex/check.h"

#define COORD_ROLLCALLS 64
#define COORD_ROLLCALL_NODES 256
#define COORD_ROLLCALL_FORGET_MS (10 * 60 * 1000)

struct coord_rollcall {
  coord_rollcall_t *next;
  char job_id[64];
  int attempt, iteration;
  int64_t opened_ms;
  int n;                                /* nodes with an answer */
  int node_index[COORD_ROLLCALL_NODES]; /* their placement indexes */
  int answers[COORD_ROLLCALL_NODES];    /* the ranks of each that answered (bits) */
};

/* The open call of the job at that boundary, a new one when there is none
 * (NULL: out of memory); forgets stale calls and the oldest past the cap. */
static coord_rollcall_t *coord_rollcall_get(coord_t *c, const char *job_id, int attempt,
                                            int iteration, int64_t now) {
  int count = 0;
  for (coord_rollcall_t **p = &c->rollcalls; *p;) {
    coord_rollcall_t *r = *p;
    if (!strcmp(r->job_id, job_id) && r->attempt == attempt && r->iteration == iteration)
      return r;
    if (!strcmp(r->job_id, job_id) || now - r->opened_ms > COORD_ROLLCALL_FORGET_MS ||
        ++count >= COORD_ROLLCALLS) {
      *p = r->next; /* another boundary of the job, stale, or past the cap */
      px_free(r);
      continue;
    }
    p = &r->next;
  }
  coord_rollcall_t *r = px_calloc(1, sizeof *r, "coordd.rollcall");
  if (!r) return NULL;
  snprintf(r->job_id, sizeof r->job_id, "%s", job_id);
  r->attempt = attempt;
  r->iteration = iteration;
  r->opened_ms = now;
  r->next = c->rollcalls;
  c->rollcalls = r;
  return r;
}

/* Rank local (of the node at placement index idx) answered. */
static void coord_rollcall_answer(coord_rollcall_t *r, int idx, int local) {
  int i = 0;
  while (i < r->n && r->node_index[i] != idx) i++;
  if (i == r->n) {
    if (r->n == COORD_ROLLCALL_NODES) return;
    r->node_index[r->n++] = idx;
  }
  if (local >= 0 && local < 31) r->answers[i] |= 1 << local;
}

static int coord_rollcall_present(const coord_rollcall_t *r, int idx, int ranks) {
  int all = ranks >= 31 ? 0x7fffffff : (1 << ranks) - 1;
  for (int i = 0; i < r->n; i++)
    if (r->node_index[i] == idx) return (r->answers[i] & all) == all;
  return 0;
}

/* Loses the members of the epoch in force that did not answer, once the
 * call has waited long enough and some member did. */
static px_status_t coord_rollcall_close(coord_t *c, coord_arena_t *a, const char *job_id,
                                        int state, const coord_rollcall_t *r, int ranks,
                                        int wait_ms, coord_effects_t *fx) {
  coord_db_epoch_t e;
  int found = 0;
  PX_CHECK(coord_db_epoch_at(c, a, job_id, r->attempt, r->iteration + 1, &e, &found));
  if (!found) return PX_OK;
  char **ids = NULL;
  int32_t *idx = NULL;
  size_t n = 0, present = 0;
  PX_CHECK(coord_db_epoch_members(a, &e, &ids, &idx, &n));
  for (size_t i = 0; i < n; i++) present += coord_rollcall_present(r, idx[i], ranks);
  if (present == 0 || present == n) return PX_OK;
  for (size_t i = 0; i < n; i++) {
    if (coord_rollcall_present(r, idx[i], ranks)) continue;
    coord_db_node_t node;
    int known = 0;
    PX_CHECK(coord_db_node_get(c, ids[i], 0, &known, &node));
    char reason[512], note[256];
    snprintf(reason, sizeof reason, "node %s (%s) silent: its ranks did not answer the "
             "survivors' roll call after iteration %d within %d ms (a stopped or cut-off worker)",
             known ? node.name : "?", ids[i], r->iteration, wait_ms);
    int dropped = 0;
    PX_CHECK(coord_membership_lose(c, a, job_id, state, ids[i], reason, fx, &dropped, note,
                                   sizeof note));
    if (!dropped)
      px_log(PX_LOG_INFO, "job %s: roll call after iteration %d: node %s silent, not dropped%s",
             job_id, r->iteration, ids[i], note);
  }
  return PX_OK;
}

px_status_t coord_rollcall_note(coord_t *c, coord_arena_t *a,
                                const Prunex__V1__IterationReport *rep,
                                const Prunex__V1__JobSpec *spec, int state, coord_effects_t *fx) {
  int min_nodes = 0;
  if (!rep->roll_call || !coord_spec_elastic(spec, &min_nodes)) return PX_OK;
  int attempt = 1, preemptions = 0, found = 0, idx = 0;
  PX_CHECK(coord_db_job_attempts(c, rep->job_id, &attempt, &preemptions));
  char node_id[128];
  PX_CHECK(coord_db_rank_place(c, rep->job_id, rep->rank, &found, &idx, node_id,
                               sizeof node_id));
  if (!found || !node_id[0]) return PX_OK; /* fenced before it gets here */
  int64_t now = coord_now_ms();
  coord_rollcall_t *r = coord_rollcall_get(c, rep->job_id, attempt, rep->iteration, now);
  if (!r) return PX_ERR_NOMEM;
  int ranks = spec->cluster && spec->cluster->workers_per_node > 0
                  ? spec->cluster->workers_per_node : 1;
  coord_rollcall_answer(r, idx, rep->rank % ranks); /* ranks are numbered node by node */
  int timeout = spec->comm && spec->comm->timeout_ms > 0 ? spec->comm->timeout_ms : 60000;
  if (now - r->opened_ms < timeout / 4) return PX_OK;
  return coord_rollcall_close(c, a, rep->job_id, state, r, ranks, timeout / 4, fx);
}

void coord_rollcalls_forget(coord_t *c) {
  while (c->rollcalls) {
    coord_rollcall_t *r = c->rollcalls;
    c->rollcalls = r->next;
    px_free(r);
  }
}
