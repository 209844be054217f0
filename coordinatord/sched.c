/* The scheduling policy (sched.h): multifactor priority, quotas and
 * backfill behind one reservation, over an in-memory snapshot. Pure: the
 * coordinator (place.c, sched_view.c) and bench/sched call it alike. */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE /* qsort_r */
#endif
#include "sched.h"

#include <assert.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

void coord_sched_policy_defaults(coord_sched_policy_t *p) {
  memset(p, 0, sizeof *p);
  p->weight_job = COORD_SCHED_WEIGHT_JOB;
  p->weight_fairshare = COORD_SCHED_WEIGHT_FAIRSHARE;
  p->weight_age = COORD_SCHED_WEIGHT_AGE;
  p->half_life_s = COORD_SCHED_HALF_LIFE_S;
  p->max_age_s = COORD_SCHED_MAX_AGE_S;
  p->preempt_grace_s = COORD_PREEMPT_GRACE_S;
}

const coord_sched_user_conf_t *coord_sched_user_conf(const coord_sched_policy_t *p,
                                                     const char *user) {
  for (int i = 0; i < p->nusers; i++)
    if (!strcmp(p->users[i].name, user)) return &p->users[i];
  return NULL;
}

int coord_sched_max_running_nodes(const coord_sched_policy_t *p, const char *user) {
  const coord_sched_user_conf_t *u = coord_sched_user_conf(p, user);
  return u && u->max_running_nodes >= 0 ? u->max_running_nodes : p->max_running_nodes;
}

int coord_sched_max_queued_jobs(const coord_sched_policy_t *p, const char *user) {
  const coord_sched_user_conf_t *u = coord_sched_user_conf(p, user);
  return u && u->max_queued_jobs >= 0 ? u->max_queued_jobs : p->max_queued_jobs;
}

int64_t coord_sched_time_limit_ms(const coord_sched_policy_t *p, int32_t spec_time_limit_s) {
  int64_t s = spec_time_limit_s > 0 ? spec_time_limit_s : p->time_limit_default_s;
  return s > 0 ? s * 1000 : 0;
}

double coord_sched_decay(double usage, int64_t then_ms, int64_t now_ms, int64_t half_life_s) {
  if (usage <= 0 || now_ms <= then_ms || half_life_s <= 0) return usage;
  return usage * exp2(-(double)(now_ms - then_ms) / ((double)half_life_s * 1000.0));
}

static int coord_sched_cmp(const void *a, const void *b, void *ctx) {
  const coord_sched_job_t *jobs = ctx;
  const coord_sched_job_t *x = &jobs[*(const size_t *)a], *y = &jobs[*(const size_t *)b];
  if (x->score != y->score) return x->score > y->score ? -1 : 1;
  if (x->submit_ms != y->submit_ms) return x->submit_ms < y->submit_ms ? -1 : 1;
  /* same instant: submission order (the snapshot's) */
  return *(const size_t *)a < *(const size_t *)b ? -1 : 1;
}

/* Nodes of at least P devices: alive (all) and free now. */
static void coord_sched_count(const coord_sched_snapshot_t *s, int P, int *alive, int *free) {
  *alive = *free = 0;
  for (size_t i = 0; i < s->nnodes; i++) {
    if (s->nodes[i].devices < P) continue;
    (*alive)++;
    *free += s->until[i] == 0;
  }
}

/* When M nodes of at least P devices will be free by the time limits: the
 * M-th smallest free time among them (now for free ones). */
static int64_t coord_sched_shadow(const coord_sched_snapshot_t *s, int M, int P) {
  int64_t best = COORD_SCHED_NEVER;
  for (size_t i = 0; i < s->nnodes; i++) {
    if (s->nodes[i].devices < P) continue;
    int64_t v = s->until[i] ? s->until[i] : s->now_ms;
    if (v >= best) continue;
    int n = 0;
    for (size_t k = 0; k < s->nnodes; k++) {
      if (s->nodes[k].devices < P) continue;
      int64_t w = s->until[k] ? s->until[k] : s->now_ms;
      n += w <= v;
    }
    if (n >= M) best = v;
  }
  return best;
}

/* Takes M free nodes of at least P devices (in snapshot order, which is
 * the coordinator's placement order) until `until`. */
static void coord_sched_take(coord_sched_snapshot_t *s, int M, int P, int64_t until) {
  for (size_t i = 0; i < s->nnodes && M > 0; i++) {
    if (s->nodes[i].devices < P || s->until[i] != 0) continue;
    s->until[i] = until;
    M--;
  }
}

void coord_sched_decide(const coord_sched_policy_t *p, coord_sched_snapshot_t *s) {
  assert(p && s);
  /* fair share: 2^(-U/S), U and S the user's fractions of usage and shares */
  double total_usage = 0, total_share = 0;
  for (size_t u = 0; u < s->nusers; u++) {
    const coord_sched_user_conf_t *c = coord_sched_user_conf(p, s->users[u].name);
    s->users[u].share = c && c->share > 0 ? c->share : 1.0;
    total_share += s->users[u].share;
    total_usage += s->users[u].usage > 0 ? s->users[u].usage : 0;
    s->user_nodes[u] = s->users[u].running_nodes;
  }
  for (size_t u = 0; u < s->nusers; u++) {
    coord_sched_user_t *us = &s->users[u];
    us->share /= total_share;
    double frac = total_usage > 0 && us->usage > 0 ? us->usage / total_usage : 0;
    us->fairshare = exp2(-frac / us->share);
  }
  double wsum = p->weight_job + p->weight_fairshare + p->weight_age;
  if (wsum <= 0) wsum = 1;
  for (size_t i = 0; i < s->njobs; i++) {
    coord_sched_job_t *j = &s->jobs[i];
    j->f_job = (double)j->priority / COORD_PRIORITY_MAX;
    j->f_fairshare = s->users[j->user].fairshare;
    double age = (double)(s->now_ms - j->submit_ms) / 1000.0;
    j->f_age = p->max_age_s > 0 && age > 0 ? age / (double)p->max_age_s : 0;
    if (j->f_age > 1) j->f_age = 1;
    j->score = (p->weight_job * j->f_job + p->weight_fairshare * j->f_fairshare +
                p->weight_age * j->f_age) / wsum;
    j->start = j->backfill = 0;
    j->wait = COORD_WAIT_NONE;
    j->wait_a = j->wait_b = 0;
    j->shadow_ms = 0;
    s->order[i] = i;
  }
  qsort_r(s->order, s->njobs, sizeof *s->order, coord_sched_cmp, s->jobs);
  for (size_t i = 0; i < s->nnodes; i++) s->until[i] = s->nodes[i].free_at_ms;

  int reserved = 0;             /* a job holds the reservation */
  int64_t shadow = 0;
  for (size_t r = 0; r < s->njobs; r++) {
    coord_sched_job_t *j = &s->jobs[s->order[r]];
    j->ahead = (int64_t)r;
    if (j->blocked) {
      j->wait = COORD_WAIT_BLOCKED;
      continue; /* held or waiting for other jobs: blocks nobody */
    }
    int alive, free;
    coord_sched_count(s, j->per_node, &alive, &free);
    if (alive < j->nodes) {
      j->wait = COORD_WAIT_NEVER;
      j->wait_a = alive;
      continue; /* does not block the jobs behind it */
    }
    int quota = coord_sched_max_running_nodes(p, s->users[j->user].name);
    if (quota > 0 && s->user_nodes[j->user] + j->nodes > quota) {
      j->wait = COORD_WAIT_QUOTA;
      j->wait_a = s->user_nodes[j->user];
      j->wait_b = quota;
      continue;
    }
    if (free >= j->nodes) {
      int64_t end = j->time_limit_ms > 0 ? s->now_ms + j->time_limit_ms : COORD_SCHED_NEVER;
      if (reserved && !(j->time_limit_ms > 0 && end <= shadow)) {
        j->wait = COORD_WAIT_PRIORITY;
        continue;
      }
      j->start = 1;
      j->backfill = reserved;
      coord_sched_take(s, j->nodes, j->per_node, end);
      s->user_nodes[j->user] += j->nodes;
      continue;
    }
    if (!reserved) {
      reserved = 1;
      shadow = coord_sched_shadow(s, j->nodes, j->per_node);
      j->wait = COORD_WAIT_NODES;
      j->wait_a = free;
      j->wait_b = alive;
      j->shadow_ms = shadow;
      continue;
    }
    j->wait = COORD_WAIT_PRIORITY;
  }
}

void coord_sched_reason(const coord_sched_job_t *j, int live, char *buf, size_t cap) {
  int M = j->nodes, P = j->per_node;
  char head[64] = "";
  if (live) snprintf(head, sizeof head, "priority %.2f, ", j->score);
  switch (j->wait) {
    case COORD_WAIT_NEVER:
      snprintf(buf, cap,
               "cannot fit now: needs %d node%s x %d device%s; %d node%s with %d or more devices"
               " registered and alive",
               M, M == 1 ? "" : "s", P, P == 1 ? "" : "s", j->wait_a, j->wait_a == 1 ? "" : "s",
               P);
      return;
    case COORD_WAIT_QUOTA:
      snprintf(buf, cap, "user quota: %d of %d nodes in use (needs %d more)", j->wait_a,
               j->wait_b, M);
      return;
    case COORD_WAIT_NODES:
      snprintf(buf, cap,
               "%sfirst in line; waiting for nodes: needs %d node%s x %d device%s; %d of %d free",
               head, M, M == 1 ? "" : "s", P, P == 1 ? "" : "s", j->wait_a, j->wait_b);
      return;
    case COORD_WAIT_BLOCKED:
      snprintf(buf, cap, "held, or waiting for other jobs");
      return;
    case COORD_WAIT_PRIORITY:
      if (live)
        snprintf(buf, cap, "%s%lld job%s ahead", head, (long long)j->ahead,
                 j->ahead == 1 ? "" : "s");
      else snprintf(buf, cap, "waiting behind jobs of higher priority");
      return;
    default:
      snprintf(buf, cap, "%sstarts now%s", head,
               j->backfill ? " (backfilled: its time limit ends before the first job's start)"
                           : "");
  }
}
