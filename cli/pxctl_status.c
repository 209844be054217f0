/* pxctl status: one job (or a sweep) as the coordinator knows it: the
 * spec, progress, placement, attempts, results, events and rank exits. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "prunex/jobspec.h"

#include "pxctl.h"

/* "12 iterations, test accuracy 85.21%, density 0.500, inter-node 1.2 MiB
 * (dense 9.8 MiB: 87.8% less)" */
static void pxctl_results_line(char *buf, size_t cap, const pxctl_summary_t *s) {
  char acc[32], inter[32], dense[32], red[64] = "";
  pxctl_fmt_pct(acc, sizeof acc, s->test_accuracy);
  pxctl_fmt_bytes(inter, sizeof inter, s->inter_bytes);
  pxctl_fmt_bytes(dense, sizeof dense, s->inter_bytes_dense);
  if (s->inter_bytes_dense > 0)
    snprintf(red, sizeof red, ": %.1f%% less",
             100.0 * (1.0 - (double)s->inter_bytes / (double)s->inter_bytes_dense));
  snprintf(buf, cap, "%d iteration%s, test accuracy %s, density %.3f, inter-node %s (dense %s%s)",
           s->iterations, s->iterations == 1 ? "" : "s", acc, s->density, inter, dense, red);
}

/* Node ids -> "name (host)" from ListNodes; best effort. */
static void pxctl_node_label(const Prunex__V1__ListNodesResponse *nodes, const char *id, char *buf,
                             size_t cap) {
  for (size_t i = 0; nodes && i < nodes->n_nodes; i++)
    if (!strcmp(nodes->nodes[i]->node_id, id)) {
      snprintf(buf, cap, "%s (%s, host %s)", nodes->nodes[i]->name, id, nodes->nodes[i]->hostname);
      return;
    }
  snprintf(buf, cap, "%s", id);
}

/* A node's name from ListNodes (its id when unknown). */
static const char *pxctl_node_name(const Prunex__V1__ListNodesResponse *nodes, const char *id) {
  for (size_t i = 0; nodes && i < nodes->n_nodes; i++)
    if (!strcmp(nodes->nodes[i]->node_id, id)) return nodes->nodes[i]->name;
  return id;
}

/* An elastic job's membership: its epochs (the members of each and why
 * it began) and the nodes it does not take back now, with the reason. */
static void pxctl_print_membership(const Prunex__V1__ListNodesResponse *nodes,
                                   const Prunex__V1__Job *job) {
  const Prunex__V1__JobSpec *s = job->spec;
  int elastic = s && s->elastic && s->elastic->min_nodes > 0;
  if (elastic)
    printf("elastic    min %d, max %d nodes\n", s->elastic->min_nodes,
           s->elastic->max_nodes > 0 ? s->elastic->max_nodes : s->cluster ? s->cluster->nodes : 0);
  if (!elastic && job->n_memberships < 2 && job->n_blacklist == 0 && job->n_wanted_back == 0)
    return;
  for (size_t i = 0; i < job->n_memberships; i++) {
    const Prunex__V1__MembershipEpoch *e = job->memberships[i];
    char on[1024] = "";
    size_t used = 0;
    for (size_t k = 0; k < e->n_node_ids && used < sizeof on; k++)
      used += (size_t)snprintf(on + used, sizeof on - used, "%s%s", k ? ", " : "",
                               pxctl_node_name(nodes, e->node_ids[k]));
    printf("epoch %-4d from iteration %d: %zu node%s (%s)%s: %s\n", e->epoch, e->from_iteration,
           e->n_node_ids, e->n_node_ids == 1 ? "" : "s", on,
           i + 1 == job->n_memberships ? ", in force" : "", e->reason);
  }
  for (size_t i = 0; i < job->n_blacklist; i++) {
    const Prunex__V1__BlacklistedNode *b = job->blacklist[i];
    char t1[64];
    pxctl_fmt_time(t1, sizeof t1, b->until_unix_ms);
    printf("%s %s (%s) not taken back until %s: lost %d times, last: %s\n",
           i ? "          " : "blacklist ", b->name, b->node_id, t1, b->failures, b->reason);
  }
  /* nodes it gave to a preemption: it would take them back once free */
  for (size_t i = 0; i < job->n_wanted_back; i++)
    printf("%s %s (%s): given up to a preemption, wanted back when free\n",
           i ? "          " : "wants back", pxctl_node_name(nodes, job->wanted_back[i]),
           job->wanted_back[i]);
}

/* The job's nodes, and where and how its earlier attempts ended. */
static void pxctl_print_placement(px_rpc_channel_t *ch, const Prunex__V1__Job *job) {
  char t1[64];
  Prunex__V1__ListNodesResponse *nodes = NULL;
  if (job->n_node_ids > 0 || job->n_attempts > 0 || job->n_memberships > 0) {
    Prunex__V1__ListNodesRequest req = PRUNEX__V1__LIST_NODES_REQUEST__INIT;
    if (px_rpc_list_nodes(ch, &req, PXCTL_DEADLINE_MS, &nodes) != PX_OK) nodes = NULL;
  }
  for (size_t i = 0; i < job->n_node_ids; i++) {
    char label[512];
    pxctl_node_label(nodes, job->node_ids[i], label, sizeof label);
    printf("%s %zu     %s\n", i == 0 ? "node" : "    ", i, label);
  }
  pxctl_print_membership(nodes, job);
  for (size_t i = 0; i < job->n_attempts; i++) {
    const Prunex__V1__JobAttempt *a = job->attempts[i];
    char on[1024] = "";
    size_t used = 0;
    for (size_t k = 0; k < a->n_node_ids && used < sizeof on; k++) {
      char label[512];
      pxctl_node_label(nodes, a->node_ids[k], label, sizeof label);
      used += (size_t)snprintf(on + used, sizeof on - used, "%s%s", k ? ", " : "", label);
    }
    size_t cut = strcspn(a->cause, "\n");
    pxctl_fmt_time(t1, sizeof t1, a->ended_unix_ms);
    printf("attempt %d  ended %s on %s: %.*s\n", a->attempt, t1, on[0] ? on : "no node",
           (int)(cut > 600 ? 600 : cut), a->cause);
  }
  px_rpc_message_free(nodes);
}

/* The job's events, and the ranks that ended other than cleanly. */
static void pxctl_print_history(const Prunex__V1__Job *job) {
  char t1[64];
  if (job->n_events > 0) {
    printf("events\n");
    static const char *const h[] = {"TIME", "FROM", "TO", "REASON"};
    pxctl_table_t *t = pxctl_table_create(4, h);
    for (size_t i = 0; i < job->n_events; i++) {
      const Prunex__V1__JobEvent *e = job->events[i];
      pxctl_fmt_time(t1, sizeof t1, e->time_unix_ms);
      pxctl_table_cell(t, "%s", t1);
      pxctl_table_cell(t, "%s", e->from_state ? px_rpc_job_state_name(e->from_state) : "-");
      pxctl_table_cell(t, "%s", px_rpc_job_state_name(e->to_state));
      pxctl_table_cell(t, "%s", e->reason);
    }
    pxctl_table_print(t, stdout, 2);
  }
  /* Ranks that ended other than cleanly: who failed, and why. */
  size_t bad = 0;
  for (size_t i = 0; i < job->n_rank_exits; i++)
    bad += job->rank_exits[i]->exit_code != 0 || job->rank_exits[i]->signal != 0;
  if (bad > 0) {
    printf("rank exits (%zu of %zu not clean)\n", bad, job->n_rank_exits);
    static const char *const h[] = {"RANK", "NODE", "EXIT", "REASON"};
    pxctl_table_t *t = pxctl_table_create(4, h);
    for (size_t i = 0; i < job->n_rank_exits; i++) {
      const Prunex__V1__RankExit *e = job->rank_exits[i];
      if (e->exit_code == 0 && e->signal == 0) continue;
      pxctl_table_cell(t, "%d", e->rank);
      pxctl_table_cell(t, "%s", e->node_id);
      if (e->signal) pxctl_table_cell(t, "signal %d", e->signal);
      else if (e->exit_code < 0) pxctl_table_cell(t, e->exit_code == -1 ? "none (lost)" : "none (hung)");
      else pxctl_table_cell(t, "code %d", e->exit_code);
      pxctl_table_cell(t, "%s", e->reason);
    }
    pxctl_table_print(t, stdout, 2);
  }
}

/* Who owns the job, and its queue controls: priority, time
 * limit, who holds it, the jobs it waits for and their states. */
static void pxctl_print_queue(const Prunex__V1__Job *job) {
  printf("owner      %s\n", job->owner[0] ? job->owner : "- (no tokens: anonymous)");
  char limit[32] = "none";
  if (job->time_limit_ms > 0) pxctl_fmt_duration(limit, sizeof limit, job->time_limit_ms / 1e3);
  if (job->priority > 0) printf("queue      priority %d, time limit %s\n", job->priority, limit);
  if (job->held_by[0]) printf("held       by %s\n", job->held_by);
  for (size_t i = 0; i < job->n_after; i++) {
    const Prunex__V1__JobDependency *d = job->after[i];
    int any = d->kind == PRUNEX__V1__DEPENDENCY_KIND__DEPENDENCY_KIND_ANY;
    printf("%s %s:%s (%s)\n", i ? "          " : "after     ", d->job_id, any ? "any" : "ok",
           d->state ? px_rpc_job_state_name(d->state) : "unknown");
  }
}

static void pxctl_print_job(px_rpc_channel_t *ch, const Prunex__V1__Job *job) {
  char t1[64], t2[64];
  printf("job        %s  %s\n", job->job_id, job->name);
  if (job->sweep_id[0]) printf("sweep      %s: %s\n", job->sweep_id, job->sweep_point);
  /* Since the change into the current state (its newest event), not the
   * last update: a running job is updated by every iteration. */
  int64_t since = 0;
  for (size_t i = 0; i < job->n_events; i++)
    if ((int)job->events[i]->to_state == (int)job->state) since = job->events[i]->time_unix_ms;
  pxctl_fmt_age(t1, sizeof t1, since ? since : job->created_unix_ms);
  printf("state      %s (since %s)%s%s\n", px_rpc_job_state_name(job->state), t1,
         job->reason[0] ? ": " : "", job->reason);
  pxctl_print_queue(job);
  const Prunex__V1__JobSpec *s = job->spec;
  if (s) {
    printf("spec       %s, %s on %s, %d node%s x %d worker%s (%s)\n",
           px_jobspec_strategy_name(s->strategy), s->model ? s->model->name : "?",
           s->dataset ? s->dataset->name : "?", s->cluster ? s->cluster->nodes : 0,
           s->cluster && s->cluster->nodes == 1 ? "" : "s",
           s->cluster ? s->cluster->workers_per_node : 0,
           s->cluster && s->cluster->workers_per_node == 1 ? "" : "s",
           s->cluster && s->cluster->device[0] ? s->cluster->device : "auto");
    if (s->train)
      printf("training   batch %d per worker, precision %s\n", s->train->batch_size,
             s->train->precision[0] ? s->train->precision : "fp32");
    if (s->prune) {
      char kept[64]; /* a MAC budget chooses the channel keep when the job starts */
      if (s->prune->mac_keep > 0)
        snprintf(kept, sizeof kept, "within %.3g of the dense MACs", s->prune->mac_keep);
      else snprintf(kept, sizeof kept, "%.3g", s->prune->channel_keep);
      printf("pruning    keep filters %.3g, channels %s, shapes %.3g%s\n", s->prune->filter_keep,
             kept, s->prune->shape_keep,
             s->prune->compact_training ? "; the compact model trains after the freeze" : "");
    }
    if (s->prune && s->prune->uncoupled_channel_keep > 0)
      printf("           uncoupled convs keep %.3g of their input channels\n",
             s->prune->uncoupled_channel_keep);
    if (s->prune && s->prune->nm_m > 0)
      printf("           N:M %d:%d along input channels\n", s->prune->nm_n, s->prune->nm_m);
    if (s->prune && s->prune->ramp_iterations > 0)
      printf("           the keeps fall from 1 over the first %d iterations, the masks "
             "freezing no earlier\n", s->prune->ramp_iterations);
  }
  int max = pxctl_job_max_iterations(job);
  if (max > 0) printf("progress   %d of %d iterations\n", pxctl_job_done_iterations(job), max);
  else printf("progress   %d iterations\n", pxctl_job_done_iterations(job));
  char budget[400];
  if (px_jobspec_budget_text(s, budget, sizeof budget)) printf("budget     %s\n", budget);
  /* Automatic restarts: which attempt, and how the earlier ones
   * ended. */
  int restarts = s && s->recovery ? s->recovery->max_restarts : 0;
  int attempt = job->attempt > 0 ? job->attempt : 1;
  if (restarts > 0 || attempt > 1)
    printf("attempt    %d of %d (%d restart%s allowed)\n", attempt, 1 + restarts, restarts,
           restarts == 1 ? "" : "s");
  /* a job running without a usable checkpoint (a full disk) says so */
  if (job->checkpoint_problem[0]) printf("checkpoint %s\n", job->checkpoint_problem);
  pxctl_print_placement(ch, job);
  pxctl_fmt_time(t1, sizeof t1, job->created_unix_ms);
  pxctl_fmt_age(t2, sizeof t2, job->created_unix_ms);
  printf("created    %s (%s)\n", t1, t2);
  if (job->summary && pxctl_job_done_iterations(job) > 0) {
    pxctl_summary_t sum;
    memset(&sum, 0, sizeof sum);
    sum.iterations = job->summary->iterations;
    sum.test_accuracy = job->summary->test_accuracy;
    sum.density = job->summary->density;
    sum.inter_bytes = job->summary->inter_bytes;
    sum.inter_bytes_dense = job->summary->inter_bytes_dense;
    char line[512], wall[32];
    pxctl_results_line(line, sizeof line, &sum);
    pxctl_fmt_duration(wall, sizeof wall, job->summary->wall_s);
    printf("%s    %s, wall %s\n", pxctl_job_finished(job->state) ? "results" : "so far ", line, wall);
    if (job->summary->model_path[0]) {
      printf("model      %s\n", job->summary->model_path);
      pxctl_print_model_sizes(job->summary->model_path);
    }
  }
  pxctl_print_history(job);
}

static int pxctl_job_status(pxctl_opts_t *o, px_rpc_channel_t *ch) {
  Prunex__V1__Job *job = NULL;
  int rc = PXCTL_EXIT_OK;
  if (px_rpc_get_job_ex(ch, o->pos[0], 1, PXCTL_DEADLINE_MS, &job) != PX_OK) {
    rc = pxctl_rpc_fail(ch, o->pos[0]);
  } else if (o->json) {
    pxctl_json_print_job(job);
  } else {
    pxctl_print_job(ch, job);
  }
  px_rpc_message_free(job);
  return rc;
}

int pxctl_cmd_status(pxctl_opts_t *o) {
  return pxctl_with_channel(o, pxctl_is_sweep_id(o->pos[0]) ? pxctl_sweep_status : pxctl_job_status);
}
