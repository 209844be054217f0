/* The agents that went away: a node whose agent closed its assignment
 * stream is listed here until the agent opens a new one, or until the
 * recovery sweep (recovery.c) declares the node LOST after agent_grace_ms.
 * The list lives in memory only: after a restart every node is LOST until
 * heard from anyway. It sits below everything that reads it (placement,
 * releasing nodes, the scheduler's snapshot, the sweeps) and calls nothing
 * of the daemon's. */
#include <stdio.h>
#include <string.h>

#include "flow.h"

struct coord_gone {
  coord_gone_t *next;
  int64_t since_ms;
  char node_id[128];
};

static coord_gone_t **coord_gone_find(coord_t *c, const char *node_id) {
  for (coord_gone_t **p = &c->gone; *p; p = &(*p)->next)
    if (!strcmp((*p)->node_id, node_id)) return p;
  return NULL;
}

int64_t coord_agent_gone_since(const coord_t *c, const char *node_id) {
  for (const coord_gone_t *g = c->gone; g; g = g->next)
    if (!strcmp(g->node_id, node_id)) return g->since_ms;
  return 0;
}

int coord_agent_is_gone(const coord_t *c, const char *node_id) {
  return coord_agent_gone_since(c, node_id) != 0;
}

void coord_agent_gone(coord_t *c, const char *node_id) {
  if (c->stopping || coord_gone_find(c, node_id)) return;
  /* An agent that reconnected before its old stream was noticed closed
   * still has a stream open. */
  for (const coord_watch_t *w = c->node_watches; w; w = w->next)
    if (!strcmp(w->id, node_id)) return;
  coord_gone_t *g = px_calloc(1, sizeof *g, "coordd.gone");
  if (!g) return; /* the heartbeat timeout still catches the node */
  g->since_ms = coord_now_ms();
  snprintf(g->node_id, sizeof g->node_id, "%s", node_id);
  g->next = c->gone;
  c->gone = g;
  px_log(PX_LOG_INFO, "node %s: its agent closed the assignment stream", node_id);
}

void coord_agent_back(coord_t *c, const char *node_id) {
  coord_gone_t **p = coord_gone_find(c, node_id);
  if (!p) return;
  coord_gone_t *g = *p;
  *p = g->next;
  px_free(g);
}

void coord_agents_forget(coord_t *c) {
  while (c->gone) coord_agent_back(c, c->gone->node_id);
}

px_status_t coord_agents_gone_before(coord_t *c, coord_arena_t *a, int64_t before, char ***ids,
                                     size_t *n) {
  size_t cap = 0;
  for (const coord_gone_t *g = c->gone; g; g = g->next) {
    if (g->since_ms > before) continue;
    char **slot = coord_push(a, (void **)ids, n, &cap, sizeof(char *));
    if (!slot || !(*slot = coord_strdup(a, g->node_id))) return PX_ERR_NOMEM;
  }
  return PX_OK;
}
