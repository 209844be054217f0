/* Elastic runs of the strategy loop (px_strategy_elastic_t): a round
 * broken by a lost node is run again over the nodes left, and a decision
 * that shrinks the job is followed at the round boundary, with no restart
 * and no checkpoint reloaded.
 *
 * The loop's part of it. After the local phase the parameters, the BN
 * statistics and the data position are copied (what the round may change
 * on this rank besides the strategy's own state: the sync and the
 * evaluation load the consensus into the model, average and re-estimate
 * the BN statistics, and the calibration reads training batches). When a
 * collective of the round fails with a lost peer, they are put back, the
 * members of the next membership epoch are agreed (the caller's callback,
 * e.g. the coordinator's list, or px_comm_survivors), the communicator is
 * rebuilt over them, everything that held the old one is pointed at the new
 * one (the world group, the checkpoints, the strategy's state rolled back
 * to the round's start), the data shards are spread over the new world,
 * and the round runs again.
 *
 * One window is not covered: a survivor that finished a round's last
 * collective and started the next round while another failed in it. The
 * survivors compare their iterations after the rebuild and fail alike
 * (naming both) when they differ; the job then restarts from its
 * checkpoint, as below min_nodes. */
#include <stdio.h>
#include <string.h>

#include "nn/px_train_int.h"
#include "prunex/comm_internal.h"
#include "px_check.h"
#include "strategy/strategy_int.h"

px_status_t px__elastic_setup(px__strategy_run_t *r, const px__strategy_ops_t *ops) {
  const px_strategy_elastic_t *e = &r->cfg->elastic;
  if (!e->on) return PX_OK;
  PX_REQUIRE(ops->rebind != NULL, "elastic: strategy %s cannot run elastic (hsadmm and "
             "hsadmm-flat can)", px_strategy_name(r->cfg->kind));
  PX_REQUIRE(e->kv != NULL, "elastic: no rendezvous store (px_strategy_elastic_t.kv) to rebuild "
             "the communicator through");
  PX_REQUIRE(px_comm_lost_ms(r->comm) > 0, "elastic: the communicator was created without "
             "px_comm_opts_t.lost_ms (the bound for a lost peer)");
  int nn = px_comm_nnodes(r->comm);
  PX_REQUIRE(e->max_nodes == 0 || (e->max_nodes >= nn && e->max_nodes <= 4096),
             "elastic.max_nodes = %d: must be in %d..4096 (the communicator has %d nodes)",
             (int)e->max_nodes, nn, nn);
  int top = e->max_nodes ? e->max_nodes : nn;
  PX_REQUIRE(e->min_nodes >= 0 && e->min_nodes <= top,
             "elastic.min_nodes = %d: must be in 0..%d (the job's nodes)", (int)e->min_nodes, top);
  PX_REQUIRE(e->wait_ms >= 0, "elastic.wait_ms = %d: must be >= 0", (int)e->wait_ms);
  PX_REQUIRE(e->join_from >= -1 && e->join_from < r->cfg->iterations,
             "elastic.join_from = %d: must be -1 (the kept ranks' boundary) or 0..%d (the "
             "iterations)", (int)e->join_from, r->cfg->iterations - 1);
  PX_REQUIRE(!e->join_from || ops->join, "elastic: strategy %s cannot take joining nodes",
             px_strategy_name(r->cfg->kind));
  r->elastic = 1;
  r->joining = e->join_from != 0;
  r->el_cap = top;
  nn = top;
  size_t nbuf = px_tensor_numel(px_model_flat_buffers(r->m));
  r->el_theta = px_malloc(r->numel * sizeof(float), "strategy.elastic");
  r->el_buf = px_malloc((nbuf ? nbuf : 1) * sizeof(float), "strategy.elastic");
  r->el_nodes = px_malloc((size_t)nn * sizeof(int), "strategy.elastic");
  if (!r->el_theta || !r->el_buf || !r->el_nodes) return PX_ERR_NOMEM;
  r->res->nodes = nn;
  return PX_OK;
}

void px__elastic_teardown(px__strategy_run_t *r) {
  PX_FREE_ALL(r->el_theta, r->el_buf, r->el_nodes);
}

/* A model tensor (on any device) to a host copy and back. */
static px_status_t px__elastic_down(const px_tensor_t *t, float *host) {
  return px_tensor_copy_to_host(t, host, px_tensor_plain_bytes(t));
}

static px_status_t px__elastic_up(const px_tensor_t *t, const float *host) {
  px_tensor_t v = *t; /* a view: the model's tensors are handed out const */
  return px_tensor_copy_from_host(&v, host, px_tensor_plain_bytes(t));
}

px_status_t px__elastic_save(px__strategy_run_t *r) {
  const px_tensor_t *bn = px_model_flat_buffers(r->m);
  PX_CHECK(px__elastic_down(px_model_flat_params(r->m), r->el_theta));
  if (px_tensor_numel(bn) > 0) PX_CHECK(px__elastic_down(bn, r->el_buf));
  px_trainer_position(r->t, r->el_pos);
  return PX_OK;
}

/* The model and the data stream back to the local phase's end. */
static px_status_t px__elastic_undo(px__strategy_run_t *r) {
  const px_tensor_t *bn = px_model_flat_buffers(r->m);
  PX_CHECK(px__elastic_up(px_model_flat_params(r->m), r->el_theta));
  if (px_tensor_numel(bn) > 0) PX_CHECK(px__elastic_up(bn, r->el_buf));
  return px_trainer_set_position(r->t, r->el_pos);
}

/* The members of epoch after a loss of node lost (gone: known dead):
 * the caller's callback or the survivors' agreement. */
static px_status_t px__elastic_members(px__strategy_run_t *r, int epoch, int lost, int gone,
                                       int *n) {
  const px_strategy_elastic_t *e = &r->cfg->elastic;
  int cap = r->el_cap;
  *n = 0;
  if (e->members) {
    PX_CHECK(e->members(e->members_ctx, epoch, lost, gone, r->el_nodes, cap, n));
    PX_REQUIRE(*n >= 0 && *n <= cap, "elastic: the member list of epoch %d has %d nodes (0..%d)",
               epoch + e->epoch_offset, *n, cap);
    return PX_OK;
  }
  int wait = e->wait_ms ? e->wait_ms : 2 * px_comm_lost_ms(r->comm);
  return px_comm_survivors(r->comm, e->kv, epoch, wait, r->el_nodes, cap, n);
}

/* Every member: the same iteration, and its strategy state rebound
 * (failed: why not, NULL when it was). */
static px_status_t px__elastic_agree(px__strategy_run_t *r, int it, const char *failed,
                                     int lost) {
  double v[3] = {failed ? 1 : 0, it, -it};
  if (it < 0) v[1] = v[2] = -1e9; /* a joining rank that takes the others' iteration */
  PX_CHECK(px_comm_allreduce(r->world, v, v, 3, PX_COMM_F64, PX_COMM_MAX));
  if (v[0] > 0)
    return px_set_error(PX_ERR_STATE, "elastic: a survivor of node %d's loss could not rebind "
                        "its state%s%s", lost, failed ? ": " : "", failed ? failed : "");
  if (v[1] != -v[2])
    return px_set_error(PX_ERR_STATE, "elastic: the survivors of node %d's loss were in "
                        "different rounds (iterations %d to %d): restart from the checkpoint",
                        lost, (int)-v[2], (int)v[1]);
  return PX_OK;
}

/* Everything that held the old communicator onto c (the old one is
 * destroyed), the strategy rebound (rollback: to its round's start), the
 * data shards spread over the new world. */
static px_status_t px__elastic_adopt(px__strategy_run_t *r, const px__strategy_ops_t *ops,
                                     void *priv, px_comm_t *c, int rollback, int it, int lost) {
  r->comm = r->res->comm = c;
  /* the round's bytes from here: c counts from 0, below the old one */
  r->bytes0[0] = px_comm_tier_bytes(c, PX_TIER_INTRA);
  r->bytes0[1] = px_comm_tier_bytes(c, PX_TIER_INTER);
  r->world = px_comm_group(c, PX_GROUP_WORLD);
  /* the round's traffic from here counts on c (the old one's counters are gone) */
  r->bytes0[0] = px_comm_tier_bytes(c, PX_TIER_INTRA);
  r->bytes0[1] = px_comm_tier_bytes(c, PX_TIER_INTER);
  r->direct = r->cuda && px_group_nccl(r->world);
  px_status_t rs = r->rs ? px__resume_rebind(r->rs, c) : PX_OK;
  r->res->epoch = px_comm_epoch(c);
  r->res->nodes = px_comm_nnodes(c);
  px_status_t st = rs != PX_OK ? rs : ops->rebind(r, priv, rollback);
  char why[256] = "";
  if (st != PX_OK) snprintf(why, sizeof why, "%s", px_last_error());
  PX_CHECK(px__elastic_agree(r, it, st == PX_OK ? NULL : why, lost));
  PX_CHECK(px_trainer_reshard(r->t, px_comm_rank(c), px_comm_size(c)));
  px_log(px_comm_rank(c) == 0 ? PX_LOG_INFO : PX_LOG_DEBUG,
         "membership epoch %d from iteration %d: %d nodes, %d ranks (this one now rank %d)",
         px_comm_epoch(c) + r->cfg->elastic.epoch_offset, it, px_comm_nnodes(c),
         px_comm_size(c), px_comm_rank(c));
  return PX_OK;
}

/* Whether node is among the n members in r->el_nodes. */
static int px__elastic_member(const px__strategy_run_t *r, int n, int node) {
  for (int i = 0; i < n; i++)
    if (r->el_nodes[i] == node) return 1;
  return 0;
}

/* Records the loss of node in iteration it's round. */
static void px__elastic_note(px__strategy_run_t *r, int node, int it) {
  px_strategy_result_t *res = r->res;
  if (res->nlost < (int)(sizeof res->lost / sizeof res->lost[0])) {
    res->lost[res->nlost] = node;
    res->lost_at[res->nlost] = it;
  }
  res->nlost++;
  r->it.lost_node = node;
}

px_status_t px__elastic_recover(px__strategy_run_t *r, const px__strategy_ops_t *ops, void *priv,
                                px_status_t st, int it) {
  if (!r->elastic || st != PX_ERR_PEER || !r->comm) return st;
  char why[512];
  snprintf(why, sizeof why, "%s", px_last_error());
  int node = -1, gone = 0;
  if (px_comm_lost(r->comm, &node, &gone) < 0) return px_set_error(st, "%s", why);
  int epoch = px_comm_epoch(r->comm) + 1, n = 0, me = px_comm_node(r->comm);
  int min = r->cfg->elastic.min_nodes ? r->cfg->elastic.min_nodes : 1;
  px_log(PX_LOG_WARN, "iteration %d: node %d lost (%s): %s", it, node, gone ? "gone" : "silent",
         why);
  PX_CHECK(px__elastic_members(r, epoch, node, gone, &n));
  if (n < min)
    return px_set_error(PX_ERR_PEER, "node %d lost in iteration %d: %d nodes left, fewer than "
                        "elastic.min_nodes = %d (%s)", node, it, n, min, why);
  if (!px__elastic_member(r, n, me))
    return px_set_error(PX_ERR_STATE, "node %d lost in iteration %d: this rank's node %d is not "
                        "a member of epoch %d", node, it, me,
                        epoch + r->cfg->elastic.epoch_offset);
  PX_CHECK(px__elastic_undo(r));
  px_comm_t *c = r->comm; /* left as it is when the old one was not destroyed */
  px_status_t rb = px_comm_rebuild(r->comm, r->el_nodes, n, epoch, r->cfg->elastic.kv, &c);
  if (c != r->comm) r->comm = r->res->comm = NULL; /* destroyed */
  PX_CHECK(rb);
  px__elastic_note(r, node, it);
  return px__elastic_adopt(r, ops, priv, c, 1, it, node);
}

/* The lowest kept rank of c (one that was in the epoch before: the
 * sender of the state), and how many nodes joined at c's epoch (their
 * ranks are new, and in node order: px_comm_rebuild). */
static int px__elastic_joined(const px_comm_t *c, int *root) {
  int joined = 0;
  *root = -1;
  for (int k = 0; k < px_comm_size(c); k++) {
    if (px_comm_prev_rank(c, k) >= 0) {
      if (*root < 0) *root = k;
    } else if (k == 0 || px_comm_node_of(c, k - 1) != px_comm_node_of(c, k)) {
      joined++;
    }
  }
  return joined;
}

/* The state joining ranks start from, from root (a kept rank) over the
 * new world: the data stream's position, the run's last test figures and
 * local steps, the BN statistics (el_buf stages them: the round is over,
 * the copy is not needed until the next local phase), the strategy's. */
static px_status_t px__elastic_send(px__strategy_run_t *r, const px__strategy_ops_t *ops,
                                    void *priv, int root, int *first) {
  int me = px_comm_rank(r->comm);
  int64_t pos[4];
  px__trainer_stream(r->t, pos);
  double v[8] = {pos[0], pos[1], pos[2], pos[3], r->res->test_loss, r->res->test_accuracy,
                 (double)r->steps, *first};
  PX_CHECK(px_comm_broadcast(r->world, v, 8, PX_COMM_F64, root));
  const px_tensor_t *bn = px_model_flat_buffers(r->m);
  size_t nbuf = px_tensor_numel(bn);
  if (nbuf > 0) {
    if (me == root) PX_CHECK(px__elastic_down(bn, r->el_buf));
    PX_CHECK(px_comm_broadcast(r->world, r->el_buf, nbuf, PX_COMM_F32, root));
    if (r->joining) PX_CHECK(px__elastic_up(bn, r->el_buf));
  }
  if (r->joining) {
    for (int k = 0; k < 4; k++) pos[k] = (int64_t)v[k];
    PX_CHECK(px__trainer_follow(r->t, pos, me, px_comm_size(r->comm)));
    r->res->test_loss = v[4];
    r->res->test_accuracy = v[5];
    r->steps = (int64_t)v[6];
    if (*first >= 0 && *first != (int)v[7])
      return px_set_error(PX_ERR_STATE, "elastic: this rank joins before iteration %d, the kept "
                          "ranks are before iteration %d", *first, (int)v[7]);
    *first = (int)v[7];
  }
  return ops->join(r, priv, root);
}

px_status_t px__elastic_enter(px__strategy_run_t *r, const px__strategy_ops_t *ops, void *priv,
                              int *first) {
  int root;
  PX_REQUIRE(px__elastic_joined(r->comm, &root) && root >= 0 &&
                 px_comm_prev_rank(r->comm, px_comm_rank(r->comm)) < 0,
             "elastic.join_from: the communicator (epoch %d) is not one this rank joined "
             "(px_comm_join)", px_comm_epoch(r->comm));
  PX_CHECK(px__elastic_agree(r, *first, NULL, -1));
  PX_CHECK(px__elastic_send(r, ops, priv, root, first));
  PX_REQUIRE(*first > 0 && *first < r->cfg->iterations, "elastic: joined before iteration %d "
             "of %d", *first, r->cfg->iterations);
  r->res->epoch = px_comm_epoch(r->comm);
  r->res->nodes = px_comm_nnodes(r->comm);
  r->res->joins = 1;
  px_log(PX_LOG_INFO, "joined membership epoch %d before iteration %d: %d nodes, %d ranks (this "
         "one rank %d, state from rank %d)", px_comm_epoch(r->comm) + r->cfg->elastic.epoch_offset,
         *first,
         px_comm_nnodes(r->comm), px_comm_size(r->comm), px_comm_rank(r->comm), root);
  return PX_OK;
}

px_status_t px__elastic_follow(px__strategy_run_t *r, const px__strategy_ops_t *ops, void *priv,
                               int it) {
  const int32_t *nodes;
  int n;
  int epoch = ops->next_members(r, priv, &nodes, &n);
  if (!epoch) return PX_OK;
  for (int i = 0; i < n; i++) r->el_nodes[i] = nodes[i];
  int me = px_comm_node(r->comm), before = px_comm_nnodes(r->comm);
  px_comm_t *c = r->comm; /* left as it is when the old one was not destroyed */
  px_status_t st = px_comm_rebuild_join(r->comm, r->el_nodes, n, epoch, r->cfg->elastic.kv, &c);
  /* a bad list: the communicator is as it was (a new one may be where the
   * old one was freed: only a failure with c unchanged kept the old one) */
  if (st != PX_OK && c == r->comm) return st;
  if (st != PX_OK) r->comm = r->res->comm = NULL;
  if (st == PX_ERR_STATE && !px__elastic_member(r, n, me)) { /* left out by the decision */
    px_log(PX_LOG_INFO, "node %d is not a member of epoch %d from iteration %d: leaving", me,
           epoch + r->cfg->elastic.epoch_offset, it + 1);
    r->left = r->res->left = 1;
    return PX_OK;
  }
  PX_CHECK(st);
  int root, joined = px__elastic_joined(c, &root);
  PX_CHECK(px__elastic_adopt(r, ops, priv, c, 0, it + 1, -1));
  if (n - joined < before) r->res->shrinks++; /* nodes of the epoch before were left out */
  if (!joined) return PX_OK;
  r->res->joins++;
  int next = it + 1;
  return px__elastic_send(r, ops, priv, root, &next);
}
