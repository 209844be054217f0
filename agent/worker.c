/* pxworker: one training process per device
 * (docs/architecture.md, "Processes").
 *
 * Started by pxagent with its place in the job (rank, local rank, node),
 * it reads the job spec the agent wrote (packed prunex.v1.JobSpec), builds
 * from it (with the configurations jobspec.h produces) the trainer for its
 * data shard on the device cluster.device names (the node's device
 * --device-index for a GPU), meets the other ranks through the
 * coordinator's rendezvous store, picks the data plane from comm.backend
 * (px_comm_choose_backend; auto: NCCL when every rank has a GPU of its own,
 * which the ranks learn from each other through the store; else UCX),
 * creates the communicator (ranks are placed node by node: node_of_rank[r] =
 * r / P) and runs the job's strategy (px_strategy_run). Rank 0 reports every
 * iteration (each layer as prunex/report.h defines it) to the coordinator and
 * applies its ControlDecision (penalties, freeze, stop, cancel). Every rank
 * records each iteration in the node-local metrics file (metrics.h). At the
 * end rank 0 saves the final model (the consensus z) as safetensors and
 * prints a one-line summary.
 *
 * An elastic job (spec.elastic) survives a lost node: the survivors get the
 * coordinator's next membership epoch (pxw_members), run the broken round
 * again over it, and whichever rank is rank 0 of the communicator then
 * reports, saves and summarises; a rank left out exits 0 (docs/
 * architecture.md, "Elastic membership").
 *
 * Exit status: 0 success, 1 runtime failure (the error on stderr; a failed
 * peer makes every rank fail within the collective timeout), 2 bad flags,
 * 3 the job was cancelled (rank 0 learned it from the coordinator). */
#include <errno.h>
#include <stddef.h>
#include <fcntl.h>
#include <inttypes.h>
#include <math.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <unistd.h>

#include <grpc/grpc.h>

#include "metrics.h"
#include "outbox.h"
#include "prunex/comm.h"
#include "prunex/comm_internal.h"
#include "prunex/cuda.h"
#include "prunex/jobspec.h"
#include "prunex/jobspec_translate.h"
#include "prunex/report.h"
#include "prunex/nn.h"
#include "prunex/rpc.h"
#include "prunex/settings.h"
#include "prunex/strategy.h"
#include "prunex/check.h"
#include "prunex/text.h"
#include "util.h"

#define PXW_EXIT_CANCELLED 3
#define PXW_MAX_SPEC_BYTES (4u << 20)
/* At the end of the run, how long rank 0 (its model saved, its trainer
 * freed) waits for the coordinator to take what it kept: as long as the
 * agent keeps trying its exit reports. */
#define PXW_FLUSH_AT_END_MS (10 * 60 * 1000)

typedef struct {
  const char *coordinator, *job, *spec_path, *work_dir, *metrics_db, *leaders, *data_root,
      *cache_root;
  int rank, local_rank, world, node_index, num_nodes, threads;
  int device_index;            /* the node's device for this rank (default: the local rank) */
  int join_epoch;              /* > 0: joins the running attempt in this membership epoch */
  int log_level;               /* px_log_level_t; -1: not set */
  const char *ca;              /* --ca FILE, or NULL */
  px_settings_t *settings;     /* keeps the strings above */
} pxw_args_t;

typedef struct {
  pxw_args_t a;
  Prunex__V1__JobSpec *spec;
  px_device_t device;          /* where the trainer runs (cluster.device, --device-index) */
  pxa_metrics_t *metrics;      /* NULL when the file cannot be opened (a warning) */
  pxa_outbox_t out;            /* rank 0's reports, and what an outage keeps */
  int timeout_ms;              /* collective timeout: bounds the report retries */
  int cancelled;               /* rank 0: the coordinator said so */
  char stop_reason[128];
  /* the report of one iteration, reused every iteration: layers sized on
   * the first one */
  Prunex__V1__LayerMetrics *lm;
  Prunex__V1__LayerMetrics **lp;
  int nlm;
  /* the last iteration as recorded, for the final figures (below) */
  Prunex__V1__IterationReport last;
  char ck_note[512];           /* the reports' checkpoint_problem */
  Prunex__V1__PhaseTimes last_ph;
  uint64_t last_rank_intra, last_rank_inter;
  int have_last;
  int attempt;                 /* $PRUNEX_ATTEMPT: 1, 2, ... */
  char checkpoint_dir[4200];   /* <work-dir>/jobs/<job>/checkpoints */
  char progress_path[4200];    /* <work-dir>/jobs/<job>/rank-R.progress while training */
  int training;
  /* Elastic jobs (spec.elastic): the store the communicator met through,
   * open for the whole run (a rebuild meets there again); the
   * communicator's epoch e is the coordinator's membership epoch e + 1 */
  int elastic;
  px_kv_t *kv;
  int lead;                    /* rank 0 of the communicator the run ended on */
} pxw_t;

static int pxw_readable_check(const char *v, char *why, size_t cap) {
  if (access(v, R_OK) == 0) return 0;
  snprintf(why, cap, "cannot read the file");
  return -1;
}

#define F(field) offsetof(pxw_args_t, field), sizeof(((pxw_args_t *)0)->field)
#define REQ PX_SETTING_REQUIRED
#define PXW_STR(name, flags, field, def, arg, help) \
  {name, PX_SETTING_STRREF, flags, F(field), 0, 0, NULL, def, arg, help, NULL, NULL, NULL}
#define PXW_INT(name, field, lo, arg, help) \
  {name, PX_SETTING_INT, REQ, F(field), lo, 1 << 20, NULL, NULL, arg, help, NULL, NULL, NULL}

static const char *const pxw_levels[] = {"error", "warn", "info", "debug", NULL};

/* pxworker's settings (prunex/settings.h): flags only. pxagent starts it
 * with them (workers.c); deploy/man/pxworker.8 lists the same ones. */
static const px_setting_t pxw_settings[] = {
    PXW_STR("coordinator", REQ, coordinator, NULL, "HOST:PORT",
            "the coordinator (rendezvous, control decisions)"),
    PXW_STR("job", REQ, job, NULL, "ID", "the job's id"),
    PXW_INT("rank", rank, 0, "R", "global rank, 0 <= R < W (ranks are placed node by node)"),
    PXW_INT("local_rank", local_rank, 0, "L", "rank within the node, R mod (W / M)"),
    PXW_INT("world_size", world, 1, "W", "all ranks of the job (M nodes x P workers)"),
    PXW_INT("node_index", node_index, 0, "I", "this node's index in the job, R / (W / M)"),
    PXW_INT("num_nodes", num_nodes, 1, "M", "nodes of the job"),
    PXW_STR("spec", REQ, spec_path, NULL, "FILE", "the job spec, a packed prunex.v1.JobSpec"),
    {"device_index", PX_SETTING_INT, 0, F(device_index), 0, 1 << 20, NULL, NULL, "D",
     "the node's device for this rank: the GPU when cluster.device is cuda (or auto and a GPU "
     "is found) (default: the local rank)", NULL, NULL, NULL},
    {"threads", PX_SETTING_INT, 0, F(threads), 1, 1 << 20, NULL, NULL, "T", "compute threads "
     "(default: cluster.threads_per_worker, else max(1, cores / P))", NULL, NULL, NULL},
    PXW_STR("work_dir", 0, work_dir, ".", "DIR", "the agent's work directory; the model goes to "
            "output_dir, else DIR/jobs/ID"),
    PXW_STR("metrics_db", 0, metrics_db, NULL, "PATH",
            "node-local metrics file (default DIR/metrics.db)"),
    PXW_STR("leaders", 0, leaders, NULL, "LIST", "global rank of each node's leader, by node "
            "index, separated by commas (default: local rank 0 of each node)"),
    PXW_STR("data_root", 0, data_root, NULL, "DIR", "no file of an image folder (dataset.path) "
            "is read from outside DIR, through links neither (default: the folder itself); "
            "pxagent passes the root it allowed dataset.path under"),
    PXW_STR("cache_root", 0, cache_root, NULL, "DIR", "dataset.cache_dir is made and written "
            "beneath DIR only, through links neither (default: the --data-root); pxagent passes "
            "the root it allowed the field under"),
    {"join_epoch", PX_SETTING_INT, 0, F(join_epoch), 1, 1 << 20, NULL, NULL, "E",
     "elastic jobs: this node joins the running attempt in the coordinator's membership "
     "epoch E (pxagent passes it from the assignment): its ranks meet the others at that "
     "round boundary and take the state from a kept rank", NULL, NULL, NULL},
    {"log_level", PX_SETTING_ENUM, 0, F(log_level), 0, 0, pxw_levels, NULL, "L",
     "error, warn, info or debug (default: PX_LOG_LEVEL, info)", NULL, NULL, NULL},
    {"ca", PX_SETTING_STRREF, 0, F(ca), 0, 0, NULL, NULL, "FILE", "PEM CA bundle: TLS to the "
     "coordinator (default $PRUNEX_CA). The rank's secret, which the coordinator's calls need "
     "when it has tokens, is $PRUNEX_TOKEN (set by pxagent; never on the command line)", NULL,
     pxw_readable_check, NULL},
};

static const px_settings_spec_t pxw_spec = {
    .program = "pxworker",
    .synopsis = "--coordinator HOST:PORT --job ID --rank R --local-rank L\n"
                "                --world-size W --node-index I --num-nodes M --spec FILE "
                "[OPTIONS]",
    .about = "One PruneX training process (one per device), normally started by pxagent.",
    .epilogue = "Exit status: 0 success, 1 failure (the error on stderr), 2 bad flags,\n"
                "3 the job was cancelled.",
    .table = pxw_settings,
    .n = sizeof pxw_settings / sizeof pxw_settings[0],
};

static int pxw_bad_usage(const char *msg) {
  fprintf(stderr, "pxworker: %s\n(run pxworker --help for the flags)\n", msg);
  return 2;
}

static px_status_t pxw_parse_leaders(const pxw_args_t *a, int *leader);

/* Returns -1 to go on, else the exit status; a->settings is set either way
 * (pxw_args_free). */
static int pxw_parse_args(int argc, char **argv, pxw_args_t *a) {
  memset(a, 0, sizeof *a);
  if (px_settings_create(&pxw_spec, a, &a->settings) != PX_OK ||
      px_settings_defaults(a->settings) != PX_OK)
    return pxw_bad_usage(px_last_error());
  int rc = px_settings_parse_args(a->settings, argc, argv);
  if (rc >= 0) return rc;
  if (a->ca) setenv("PRUNEX_CA", a->ca, 1); /* the RPC client reads it */
  char msg[160];
  if (a->world % a->num_nodes != 0) {
    snprintf(msg, sizeof msg, "--world-size %d is not a multiple of --num-nodes %d", a->world,
             a->num_nodes);
    return pxw_bad_usage(msg);
  }
  int P = a->world / a->num_nodes;
  if (a->rank >= a->world || a->node_index >= a->num_nodes || a->rank / P != a->node_index ||
      a->local_rank != a->rank % P) {
    snprintf(msg, sizeof msg,
             "rank %d, local rank %d, node %d do not fit %d nodes x %d workers (ranks are "
             "placed node by node)",
             a->rank, a->local_rank, a->node_index, a->num_nodes, P);
    return pxw_bad_usage(msg);
  }
  if (!px_settings_given(a->settings, "device_index")) a->device_index = a->local_rank;
  if (a->leaders) {
    int *l = px_calloc((size_t)a->num_nodes, sizeof *l, "worker.leaders");
    px_status_t st = l ? pxw_parse_leaders(a, l) : PX_ERR_NOMEM;
    px_free(l);
    if (st != PX_OK) return pxw_bad_usage(px_last_error());
  }
  return -1;
}

/* Parses "--leaders": one global rank per node, each on its node. */
static px_status_t pxw_parse_leaders(const pxw_args_t *a, int *leader) {
  int P = a->world / a->num_nodes;
  for (int i = 0; i < a->num_nodes; i++) leader[i] = i * P;
  if (!a->leaders || !a->leaders[0]) return PX_OK;
  const char *s = a->leaders;
  for (int i = 0; i < a->num_nodes; i++) {
    char *end;
    long v = strtol(s, &end, 10);
    if (end == s || v < (long)i * P || v >= (long)(i + 1) * P)
      return px_set_error(PX_ERR_INVALID,
                          "--leaders '%s': entry %d must be a rank of node %d (%d..%d)",
                          a->leaders, i, i, i * P, (i + 1) * P - 1);
    leader[i] = (int)v;
    s = end;
    if (i + 1 < a->num_nodes) {
      if (*s != ',')
        return px_set_error(PX_ERR_INVALID, "--leaders '%s': expected %d ranks", a->leaders,
                            a->num_nodes);
      s++;
    }
  }
  if (*s) return px_set_error(PX_ERR_INVALID, "--leaders '%s': expected %d ranks", a->leaders,
                              a->num_nodes);
  return PX_OK;
}

/* ---- spec ---------------------------------------------------------------------- */

/* cluster.nodes, or an elastic job's larger max_nodes. */
static int pxw_spec_max_nodes(const Prunex__V1__JobSpec *s) {
  return s->elastic && s->elastic->max_nodes > s->cluster->nodes ? s->elastic->max_nodes
                                                                 : s->cluster->nodes;
}

static px_status_t pxw_load_spec(const pxw_args_t *a, Prunex__V1__JobSpec **out) {
  *out = NULL;
  uint8_t *data;
  size_t len;
  px_status_t st = pxa_read_file(a->spec_path, PXW_MAX_SPEC_BYTES, &data, &len);
  if (st != PX_OK) return st;
  Prunex__V1__JobSpec *spec = prunex__v1__job_spec__unpack(NULL, len, data);
  px_free(data);
  if (!spec)
    return px_set_error(PX_ERR_FORMAT, "%s: not a packed prunex.v1.JobSpec", a->spec_path);
  /* The spec crossed a trust boundary again (the coordinator's store, the
   * agent's file): the check SubmitJob ran on it (px_jobspec_check_submitted,
   * which judges its completed copy with every rule of the schema), then
   * the documented defaults for the fields a client left at proto zero. */
  if ((st = px_jobspec_check_submitted(spec)) != PX_OK ||
      (st = px_jobspec_fill_defaults(spec)) != PX_OK) {
    px_jobspec_free(spec);
    return st;
  }
  /* an elastic job grown past cluster.nodes (up to elastic.max_nodes) numbers
   * a joining node's ranks past the first attempt's */
  int most = pxw_spec_max_nodes(spec);
  if (spec->cluster->workers_per_node * a->num_nodes != a->world ||
      a->num_nodes < spec->cluster->nodes || a->num_nodes > most) {
    st = px_set_error(PX_ERR_INVALID,
                      "job spec asks for %d nodes (at most %d) x %d workers, but this rank was "
                      "placed in %d nodes x %d",
                      spec->cluster->nodes, most, spec->cluster->workers_per_node, a->num_nodes,
                      a->world / a->num_nodes);
    px_jobspec_free(spec);
    return st;
  }
  *out = spec;
  return PX_OK;
}

/* The trainer's configuration: the spec's (px_jobspec_train_config), with
 * this rank's place and device, and its threads (--threads, else
 * cluster.threads_per_worker, else the node's cores shared by its P ranks). */
static void pxw_train_config(const pxw_t *w, px_train_config_t *c) {
  px_jobspec_train_config(w->spec, c);
  c->rank = w->a.rank;
  c->world_size = w->a.world;
  c->device = w->device;
  c->data_root = w->a.data_root;
  c->cache_root = w->a.cache_root;
  int P = w->a.world / w->a.num_nodes;
  if (w->a.threads > 0) c->threads = w->a.threads;
  else if (w->spec->cluster->threads_per_worker <= 0)
    c->threads = pxa_cpu_count() / P > 1 ? pxa_cpu_count() / P : 1;
}

/* The strategy's configuration: the spec's (px_jobspec_strategy_config),
 * with the checkpoints in the job's directory on this node, which the
 * attempts of the job share. */
static px_status_t pxw_strategy_config(const pxw_t *w, px_trainer_t *t, px_strategy_config_t *c) {
  PX_CHECK(px_jobspec_strategy_config(w->spec, px_trainer_steps_per_epoch(t), c));
  if (c->checkpoint_every > 0) c->checkpoint_dir = w->checkpoint_dir;
  return PX_OK;
}

/* ---- device and data plane ------------------------------------------------------ */

/* Where this rank trains, from cluster.device: cpu; cuda, the GPU of the
 * rank's device index, which must exist (the error names the field); auto,
 * that GPU when there is one, else the CPU. */
static px_status_t pxw_resolve_device(pxw_t *w) {
  const char *want = w->spec->cluster->device;
  int idx = w->a.device_index, n = 0;
  w->device = px_device_cpu();
  if (!strcmp(want, "cpu")) return PX_OK;
  px_status_t st = px_cuda_device_count(&n);
  if (!strcmp(want, "auto")) {
    if (st == PX_OK && idx < n) w->device = px_device_cuda(idx);
    else if (st != PX_OK && px_cuda_built())
      px_log(PX_LOG_WARN, "rank %d: cluster.device auto: %s; training on the CPU", w->a.rank,
             px_last_error());
    return PX_OK;
  }
  if (!px_cuda_built())
    return px_set_error(PX_ERR_NOT_BUILT,
                        "cluster.device is cuda, but this pxworker was built without CUDA "
                        "(PX_WITH_CUDA=OFF); use cluster.device cpu or auto");
  if (st != PX_OK) {
    char why[512];
    snprintf(why, sizeof why, "%s", px_last_error());
    return px_set_error(st, "cluster.device is cuda, but CUDA cannot list the GPUs: %s", why);
  }
  if (idx >= n)
    return px_set_error(PX_ERR_NO_DEVICE,
                        "cluster.device is cuda, but this rank's GPU %d does not exist on this "
                        "host (%d GPU%s visible)",
                        idx, n, n == 1 ? "" : "s");
  w->device = px_device_cuda(idx);
  return PX_OK;
}

/* The trainer on the resolved device; a CUDA failure names cluster.device. */
static px_status_t pxw_trainer_create(pxw_t *w, px_trainer_t **out) {
  px_train_config_t tc;
  pxw_train_config(w, &tc);
  px_status_t st = px_trainer_create(&tc, out);
  if (st == PX_OK) {
    const px_model_t *m = px_trainer_model(*out);
    px_log(PX_LOG_INFO, "job %s: rank %d: model %s, %zu parameters", w->a.job, w->a.rank,
           px_model_config(m)->arch, px_model_numel(m));
    /* an imported graph's layers that pruning leaves dense, and why (one line) */
    if (px_model_left_dense(m)[0])
      px_log(PX_LOG_INFO, "job %s: rank %d: left dense: %s", w->a.job, w->a.rank,
             px_model_left_dense(m));
  }
  if (st == PX_OK || w->device.kind != PX_DEVICE_CUDA) return st;
  char why[512];
  snprintf(why, sizeof why, "%s", px_last_error());
  return px_set_error(st, "cluster.device %s: cannot train on GPU %d: %s",
                      w->spec->cluster->device, (int)w->device.index, why);
}

static void pxw_log_device(const pxw_t *w) {
  char name[256] = "", bus[64] = "";
  if (w->device.kind != PX_DEVICE_CUDA) {
    px_log(PX_LOG_INFO, "job %s: rank %d trains on cpu (cluster.device %s)", w->a.job, w->a.rank,
           w->spec->cluster->device);
    return;
  }
  px_cuda_device_info(w->device.index, name, sizeof name, NULL);
  px_cuda_device_bus_id(w->device.index, bus, sizeof bus);
  px_log(PX_LOG_INFO, "job %s: rank %d trains on cuda:%d (%s, PCI %s; cluster.device %s)",
         w->a.job, w->a.rank, (int)w->device.index, name, bus, w->spec->cluster->device);
}

/* The data plane from comm.backend (px_comm_choose_backend), chosen with
 * the other ranks under job/<id>/devices. */
static px_status_t pxw_choose_backend(const pxw_t *w, px_kv_t *kv, px_comm_opts_t *co) {
  char prefix[300], why[512];
  snprintf(prefix, sizeof prefix, "job/%s/devices", w->a.job);
  px_comm_backend_query_t q = {
      .backend = w->spec->comm->backend,
      .cluster_device = w->spec->cluster->device,
      .device = w->device,
      .rank = w->a.rank,
      .world = w->a.world,
      .key_prefix = prefix,
      .timeout_ms = w->timeout_ms,
  };
  PX_CHECK(px_comm_choose_backend(&q, kv, co, why, sizeof why));
  px_log(PX_LOG_INFO, "job %s: rank %d: data plane %s (comm.backend %s%s%s)", w->a.job, w->a.rank,
         co->nccl ? "nccl" : "ucx", q.backend, why[0] ? ": " : "", why);
  return PX_OK;
}

/* ---- rank 0: report and decide ------------------------------------------------- */

/* Fills rep (and ph, which it points to) from the iteration: the figures
 * rank 0 reports and every rank records. The layer array is the worker's,
 * allocated on the first call. */
static px_status_t pxw_fill_report(pxw_t *w, const px_iteration_t *it,
                                   Prunex__V1__IterationReport *rep, Prunex__V1__PhaseTimes *ph) {
  int nl = it->layers ? it->nlayers : 0;
  if (nl > w->nlm) {
    px_free(w->lm);
    px_free(w->lp);
    w->lm = px_calloc((size_t)nl, sizeof *w->lm, "worker.report.layers");
    w->lp = px_calloc((size_t)nl, sizeof *w->lp, "worker.report.layers");
    w->nlm = w->lm && w->lp ? nl : 0;
    if (!w->nlm) return PX_ERR_NOMEM;
  }
  for (int l = 0; l < nl; l++) {
    px_layer_metrics_from_iteration(it, l, &w->lm[l]);
    w->lp[l] = &w->lm[l];
  }
  px_report_from_iteration(it, rep, ph);
  rep->job_id = (char *)w->a.job;
  rep->rank = w->a.rank;
  rep->n_layers = (size_t)nl;
  rep->layers = nl ? w->lp : NULL;
  rep->time_unix_ms = pxa_unix_ms();
  if (w->elastic) rep->membership_epoch = it->member_epoch + 1; /* the coordinator's */
  /* the job's status says it while it runs unprotected */
  w->ck_note[0] = '\0';
  if (it->checkpoint_problem && it->checkpoint_problem[0]) {
    char since[32];
    snprintf(since, sizeof since, "iteration %d", it->checkpoint_complete);
    snprintf(w->ck_note, sizeof w->ck_note, "no usable checkpoint since %s: %s",
             it->checkpoint_complete >= 0 ? since : "the start", it->checkpoint_problem);
  }
  rep->checkpoint_problem = w->ck_note;
  return PX_OK;
}

/* The decision rank 0 takes alone while the coordinator is unreachable:
 * the penalties in force stay (d comes filled with them), no freeze, and
 * the job stops where its spec says (admm.max_iterations). Every rank gets
 * it through the usual broadcast, so all ranks agree. */
static void pxw_decide_alone(pxw_t *w, const px_iteration_t *it, px_hsadmm_decision_t *d) {
  px_admm_policy_t p;
  px_admm_policy_defaults(&p);
  int max = w->spec->admm && w->spec->admm->max_iterations > 0 ? w->spec->admm->max_iterations
                                                                 : p.max_iterations;
  if (max > 0 && it->iteration + 1 >= max) {
    d->stop = 1;
    snprintf(d->reason, sizeof d->reason, "max_iterations");
    snprintf(w->stop_reason, sizeof w->stop_reason, "max_iterations (decided by rank 0 while the"
             " coordinator was unreachable)");
  }
}

/* The most nodes the job may have: cluster.nodes, or an elastic job's
 * max_nodes (the same on every rank). */
static int pxw_max_nodes(const pxw_t *w) {
  int most = pxw_spec_max_nodes(w->spec);
  return most > w->a.num_nodes ? most : w->a.num_nodes;
}

/* The node ids of a decision's members (their indexes in the placement, as
 * node_of_rank numbers the nodes) into nodes[0..cap); -1: one is not a
 * node of the job. */
static int pxw_member_nodes(const pxw_t *w, const Prunex__V1__ControlDecision *dec, int *nodes,
                            int cap) {
  if (dec->n_member_node_indexes > (size_t)cap) return -1;
  for (size_t i = 0; i < dec->n_member_node_indexes; i++) {
    int v = dec->member_node_indexes[i];
    if (v < 0 || v >= pxw_max_nodes(w)) return -1;
    nodes[i] = v;
  }
  return (int)dec->n_member_node_indexes;
}

/* Elastic: a decision naming a membership epoch after the one this round
 * ran over (the coordinator dropped a node) shrinks the job to its members
 * at this boundary (the communicator's numbering: the coordinator's - 1). */
static void pxw_follow_membership(pxw_t *w, const px_iteration_t *it,
                                  const Prunex__V1__ControlDecision *dec,
                                  px_hsadmm_decision_t *d) {
  if (!w->elastic || dec->membership_epoch - 1 <= it->member_epoch || !d->members) return;
  int n = pxw_member_nodes(w, dec, d->members, d->members_cap);
  if (n <= 0) {
    px_log(PX_LOG_WARN, "job %s: membership epoch %d: %zu member indexes do not fit the job's %d "
           "nodes: not followed", w->a.job, dec->membership_epoch, dec->n_member_node_indexes,
           pxw_max_nodes(w));
    return;
  }
  d->epoch = dec->membership_epoch - 1;
  d->nmembers = n;
  px_log(PX_LOG_INFO, "job %s: membership epoch %d from iteration %d: %d node%s", w->a.job,
         dec->membership_epoch, dec->membership_from_iteration, n, n == 1 ? "" : "s");
}

/* The elastic run's members callback (px_strategy_members_fn): the
 * coordinator's member list once it has dropped the lost node. The rank
 * repeats the report of the last iteration it recorded (the round boundary
 * the broken round started from); the coordinator answers with the stored
 * decision and the membership from the next iteration, making the next
 * epoch there when it has dropped a node since. Asked again every 200 ms
 * until that epoch comes, for the collective timeout at most. */
static px_status_t pxw_members(void *ctx, int epoch, int lost_node, int gone, int *nodes, int cap,
                               int *n) {
  pxw_t *w = ctx;
  *n = 0;
  if (!w->have_last)
    return px_set_error(PX_ERR_PEER, "job %s: node %d lost in the first round: no round boundary "
                        "to drop it at (the attempt restarts)", w->a.job, lost_node);
  px_rpc_channel_t *ch = NULL;
  PX_CHECK(px_rpc_channel_create(w->a.coordinator, &ch));
  Prunex__V1__IterationReport rep = w->last;
  rep.membership_epoch = epoch; /* the coordinator's in force: the communicator's + 1 */
  rep.roll_call = 1;            /* answers the survivors' roll call (a silent node is lost) */
  int64_t until = pxa_now_ms() + w->timeout_ms;
  px_status_t st = PX_OK;
  for (;;) {
    Prunex__V1__ControlDecision *dec = NULL;
    st = px_rpc_report_iteration(ch, &rep, 10000, &dec);
    if (st == PX_OK && dec->membership_epoch >= epoch + 1) {
      *n = pxw_member_nodes(w, dec, nodes, cap);
      if (*n < 0) st = px_set_error(PX_ERR_FORMAT, "job %s: membership epoch %d names a node "
                                    "outside the job's %d", w->a.job, dec->membership_epoch,
                                    pxw_max_nodes(w));
      px_rpc_message_free(dec);
      break;
    }
    if (dec) px_rpc_message_free(dec);
    if (pxa_now_ms() >= until) {
      st = px_set_error(PX_ERR_PEER, "job %s: node %d lost (%s), but the coordinator named no "
                        "membership epoch after %d within %d ms%s%s", w->a.job, lost_node,
                        gone ? "gone" : "silent", epoch, w->timeout_ms, st ? ": " : "",
                        st ? px_last_error() : "");
      break;
    }
    usleep(200 * 1000);
  }
  px_rpc_channel_destroy(ch);
  if (st == PX_OK)
    px_log(PX_LOG_INFO, "job %s: rank %d: node %d lost: membership epoch %d has %d node%s",
           w->a.job, w->a.rank, lost_node, epoch + 1, *n, *n == 1 ? "" : "s");
  return st;
}

/* Rank 0: reports the iteration to the coordinator and applies its decision. */
static px_status_t pxw_control(void *ctx, const px_iteration_t *it, px_hsadmm_decision_t *d) {
  pxw_t *w = ctx;
  Prunex__V1__IterationReport rep;
  Prunex__V1__PhaseTimes ph;
  PX_CHECK(pxw_fill_report(w, it, &rep, &ph));
  Prunex__V1__ControlDecision *dec = NULL;
  int kept;
  PX_CHECK(pxa_outbox_deliver(&w->out, &rep, &dec, &kept));
  if (kept) { /* the coordinator is unreachable */
    pxw_decide_alone(w, it, d);
    return PX_OK;
  }
  int nl = it->layers ? it->nlayers : 0;
  for (size_t i = 0; i < dec->n_layers; i++) {
    const Prunex__V1__LayerPenalty *p = dec->layers[i];
    if (p->layer < 0 || p->layer >= nl) continue;
    if (p->rho1 > 0) d->rho1[p->layer] = p->rho1;
    if (p->rho2 > 0) d->rho2[p->layer] = p->rho2;
  }
  if (dec->freeze) d->freeze = 1;
  pxw_follow_membership(w, it, dec, d);
  if (dec->stop || dec->cancelled) {
    const char *why = dec->cancelled ? "cancelled" : dec->stop_reason;
    /* preempted: a checkpoint here, then exit; the job's next
     * attempt resumes from it */
    d->stop = !dec->cancelled && why && !strcmp(why, "preempted") ? PX_HSADMM_SUSPEND
                                                                  : PX_HSADMM_STOP;
    snprintf(d->reason, sizeof d->reason, "%s", why && why[0] ? why : "coordinator");
    snprintf(w->stop_reason, sizeof w->stop_reason, "%s", d->reason);
  }
  if (dec->cancelled) w->cancelled = 1;
  px_rpc_message_free(dec);
  return PX_OK;
}

/* Fault injection for the tests of the agent's stall watchdog:
 * PRUNEX_FAULT_STALL=NAME:RANK:ITERATION makes rank RANK of a job named NAME
 * block for good, using no CPU, after that iteration (pause() until a
 * signal ends it), as a deadlocked rank would. */
static void pxw_fault_stall(const pxw_t *w, int iteration) {
  const char *f = getenv("PRUNEX_FAULT_STALL");
  char name[128];
  int rank, at;
  if (!f || sscanf(f, "%127[^:]:%d:%d", name, &rank, &at) != 3) return;
  if (strcmp(name, w->spec->name) != 0 || rank != w->a.rank || at != iteration) return;
  px_log(PX_LOG_WARN, "job %s: rank %d: PRUNEX_FAULT_STALL: blocking for good after iteration %d",
         w->a.job, w->a.rank, iteration);
  for (;;) pause();
}

/* Every rank: records the iteration in the node-local metrics file, with its
 * own traffic and phase times (rank 0's control time includes the report's
 * round trip). A failing write is a warning, not the end of the job. */
static px_status_t pxw_observe(void *ctx, const px_iteration_t *it) {
  pxw_t *w = ctx;
  if (!w->training) { /* the agent's watchdog watches a training rank for stalls */
    int fd = open(w->progress_path, O_WRONLY | O_CREAT | O_CLOEXEC, 0644);
    if (fd >= 0) close(fd);
    w->training = 1;
  }
  pxw_fault_stall(w, it->iteration);
  PX_CHECK(pxw_fill_report(w, it, &w->last, &w->last_ph));
  w->last.phases = &w->last_ph;
  w->last_rank_intra = it->rank_bytes_intra;
  w->last_rank_inter = it->rank_bytes_inter;
  w->have_last = 1;
  /* Progress in the rank's log (which the agent uploads to the coordinator
   * for `pxctl logs`): one line per outer iteration. */
  const Prunex__V1__IterationReport *r = &w->last;
  char test[32] = "";
  if (r->test_accuracy >= 0) snprintf(test, sizeof test, ", test acc %.2f%%", 100 * r->test_accuracy);
  px_log(PX_LOG_INFO,
         "job %s: rank %d: iteration %d (epoch %.2f): loss %.4f, train acc %.2f%%%s, density %.3f, "
         "drift %lld%s, %llu B intra, %llu B inter",
         w->a.job, w->a.rank, r->iteration, r->epoch, r->loss, 100 * r->train_accuracy, test,
         r->density, (long long)r->mask_drift, r->frozen ? " (frozen)" : "",
         (unsigned long long)it->rank_bytes_intra, (unsigned long long)it->rank_bytes_inter);
  if (w->metrics && pxa_metrics_record(w->metrics, w->a.rank, &w->last, it->test_loss,
                                       it->rank_bytes_intra, it->rank_bytes_inter) != PX_OK)
    px_log(PX_LOG_WARN, "job %s: rank %d: metrics: %s", w->a.job, w->a.rank, px_last_error());
  return PX_OK;
}

/* When the controller stops a job at an iteration that was not tested, the
 * strategy tests the final model after the loop: the last iteration's record
 * (here and, from rank 0, at the coordinator, which takes a repeated report
 * of an iteration as a replacement and answers with its stored decision) then
 * gets that accuracy, so that every summary shows the model the job returns. */
static void pxw_record_final(pxw_t *w, const px_strategy_result_t *res) {
  if (!w->have_last || res->test_accuracy < 0 || w->last.test_accuracy >= 0) return;
  w->last.test_accuracy = res->test_accuracy;
  w->last.time_unix_ms = pxa_unix_ms();
  if (w->metrics && pxa_metrics_record(w->metrics, w->a.rank, &w->last, res->test_loss,
                                       w->last_rank_intra, w->last_rank_inter) != PX_OK)
    px_log(PX_LOG_WARN, "job %s: rank %d: metrics: %s", w->a.job, w->a.rank, px_last_error());
  if (w->lead) pxa_outbox_resend(&w->out, &w->last);
}

/* ---- the run ------------------------------------------------------------------------ */

static void pxw_fmt_bytes(uint64_t b, char *buf, size_t cap) {
  if (b >= (1ull << 30)) snprintf(buf, cap, "%.2f GiB", (double)b / (double)(1ull << 30));
  else if (b >= (1ull << 20)) snprintf(buf, cap, "%.2f MiB", (double)b / (double)(1ull << 20));
  else if (b >= 1024) snprintf(buf, cap, "%.1f KiB", (double)b / 1024.0);
  else snprintf(buf, cap, "%" PRIu64 " B", b);
}

static px_status_t pxw_save_model(pxw_t *w, px_trainer_t *t, const px_strategy_result_t *res,
                                  char *path, size_t cap) {
  char dir[4096];
  if (w->spec->output_dir[0]) snprintf(dir, sizeof dir, "%s", w->spec->output_dir);
  else snprintf(dir, sizeof dir, "%s/jobs/%s", w->a.work_dir, w->a.job);
  px_status_t st = px_mkdirs(dir, 0755);
  if (st != PX_OK) return st;
  if (snprintf(path, cap, "%s/model.safetensors", dir) >= (int)cap)
    return px_set_error(PX_ERR_INVALID, "%s: output path too long", dir);
  char iters[32], acc[32], dens[32];
  snprintf(iters, sizeof iters, "%d", res->iterations);
  snprintf(acc, sizeof acc, "%.6f", res->test_accuracy);
  snprintf(dens, sizeof dens, "%.6f", res->density);
  const char *extra[24] = {"job_id",        w->a.job,
                           "strategy",      px_strategy_name((px_strategy_kind_t)w->spec->strategy),
                           "iterations",    iters,
                           "test_accuracy", acc,
                           "density",       dens};
  int n = 5 + px_trainer_input_meta(t, extra + 10, 7); /* a folder's input contract */
  return px_model_save(px_trainer_model(t), NULL, path, extra, n);
}

/* A run that succeeded without a usable checkpoint since iteration N (a
 * rank could not write: a full disk): rank 0 leaves the reason in
 * <work-dir>/jobs/<job>/rank-0.note, which its agent reports as the exit's
 * reason and the coordinator adds to the job's. Best effort. */
static void pxw_write_note(const pxw_t *w, const px_strategy_result_t *res) {
  char path[4200], note[512], since[32];
  snprintf(path, sizeof path, "%s/jobs/%s/rank-%d.note", w->a.work_dir, w->a.job, w->a.rank);
  snprintf(since, sizeof since, "iteration %d", res->checkpoint_complete);
  int n = snprintf(note, sizeof note, "no usable checkpoint since %s: %s",
                   res->checkpoint_complete >= 0 ? since : "the start", res->checkpoint_problem);
  if (n < 0) return;
  fprintf(stderr, "pxworker: rank %d: job %s: %s\n", w->a.rank, w->a.job, note);
  if (px_file_write_atomic(path, note, strlen(note), 0644, 0) != PX_OK)
    px_log(PX_LOG_WARN, "rank %d: %s", w->a.rank, px_last_error());
}

/* The run's settings from the spec and the environment; the node's
 * metrics file (a warning without it: metrics are a record, not the job). */
static px_status_t pxw_prepare(pxw_t *w, px_comm_opts_t *co) {
  const pxw_args_t *a = &w->a;
  PX_CHECK(pxw_load_spec(a, &w->spec));
  px_jobspec_comm_opts(w->spec, co);
  w->timeout_ms = co->timeout_ms;
  pxa_outbox_init(&w->out, a->coordinator, a->job, w->timeout_ms);
  const char *att = getenv("PRUNEX_ATTEMPT");
  w->attempt = att && atoi(att) > 0 ? atoi(att) : 1;
  snprintf(w->checkpoint_dir, sizeof w->checkpoint_dir, "%s/jobs/%s/checkpoints", a->work_dir,
           a->job);
  snprintf(w->progress_path, sizeof w->progress_path, "%s/jobs/%s/rank-%d.progress", a->work_dir,
           a->job, a->rank);
  if (w->attempt > 1)
    px_log(PX_LOG_INFO, "job %s: rank %d: attempt %d", a->job, a->rank, w->attempt);
  char mpath[4200];
  if (a->metrics_db) snprintf(mpath, sizeof mpath, "%s", a->metrics_db);
  else snprintf(mpath, sizeof mpath, "%s/metrics.db", a->work_dir);
  if (pxa_metrics_open(mpath, &w->metrics) != PX_OK) {
    px_log(PX_LOG_WARN, "rank %d: no metrics file: %s", a->rank, px_last_error());
    w->metrics = NULL;
    return PX_OK;
  }
  pxa_run_info_t info = {a->job,
                         a->rank,
                         a->local_rank,
                         a->node_index,
                         a->world,
                         a->num_nodes,
                         px_strategy_name((px_strategy_kind_t)w->spec->strategy),
                         w->spec->model->name,
                         w->spec->dataset->name,
                         (int)getpid()};
  if (pxa_metrics_run_start(w->metrics, &info) != PX_OK)
    px_log(PX_LOG_WARN, "rank %d: metrics: %s", a->rank, px_last_error());
  return PX_OK;
}

/* A joining node's rank (--join-epoch): its communicator made directly in
 * that epoch (the communicator's numbering: the coordinator's - 1) through
 * the job's prefix, once the kept ranks reach the boundary (at most the
 * collective timeout twice: the boundary comes within a round). UCX only:
 * the kept ranks' data plane was chosen without it. */
static px_status_t pxw_join(pxw_t *w, px_kv_t *kv, px_comm_opts_t *co, px_comm_t **comm) {
  const pxw_args_t *a = &w->a;
  PX_REQUIRE(w->elastic, "job %s: --join-epoch %d, but the job is not elastic", a->job,
             a->join_epoch);
  PX_REQUIRE(w->device.kind != PX_DEVICE_CUDA, "job %s: a node joins a running job on the CPU "
             "data plane only (UCX); this rank runs on a GPU", a->job);
  co->nccl = 0;
  co->leader_of_node = NULL;
  px_log(PX_LOG_INFO, "job %s: rank %d (node %d): joining in membership epoch %d", a->job,
         a->rank, a->node_index, a->join_epoch);
  return px_comm_join(kv, co, a->node_index, a->local_rank, a->join_epoch - 1,
                      2 * w->timeout_ms, comm);
}

/* The rendezvous through the coordinator and the communicator: ranks are
 * placed node by node. */
static px_status_t pxw_meet(pxw_t *w, px_comm_opts_t *co, px_comm_t **comm) {
  const pxw_args_t *a = &w->a;
  px_status_t st = PX_OK;
  px_kv_t *kv = NULL;
  int P = a->world / a->num_nodes;
  int *node_of_rank = px_calloc((size_t)a->world, sizeof(int), "worker.node_of_rank");
  int *leaders = px_calloc((size_t)a->num_nodes, sizeof(int), "worker.leaders");
  if (!node_of_rank || !leaders) {
    st = PX_ERR_NOMEM;
    goto out;
  }
  for (int r = 0; r < a->world; r++) node_of_rank[r] = r / P;
  PX_CHECK_GOTO(pxw_parse_leaders(a, leaders), st, out);
  PX_CHECK_GOTO(px_kv_open_coordinator(a->coordinator, a->job, &kv), st, out);
  char prefix[300];
  /* each attempt meets under its own keys: nothing of an earlier one's
   * rendezvous can be mistaken for this one's */
  if (w->attempt > 1) snprintf(prefix, sizeof prefix, "job/%s/a%d/comm", a->job, w->attempt);
  else snprintf(prefix, sizeof prefix, "job/%s/comm", a->job);
  co->key_prefix = prefix;
  co->leader_of_node = leaders;
  px_log(PX_LOG_INFO, "job %s: rank %d of %d (node %d of %d): meeting the other ranks", a->job,
         a->rank, a->world, a->node_index, a->num_nodes);
  if (a->join_epoch > 0) { /* the others meet it at their next round boundary */
    PX_CHECK_GOTO(pxw_join(w, kv, co, comm), st, out);
    goto out;
  }
  PX_CHECK_GOTO(pxw_choose_backend(w, kv, co), st, out);
  PX_CHECK_GOTO(px_comm_create(a->rank, a->world, node_of_rank, kv, co, comm), st, out);
out:
  co->key_prefix = NULL;
  co->leader_of_node = NULL;
  if (st == PX_OK && w->elastic) w->kv = kv; /* a rebuild meets there again */
  else px_kv_destroy(kv); /* only needed to meet */
  px_free(node_of_rank);
  px_free(leaders);
  return st;
}

/* After a run that ended well: rank 0 saves the model, notes a checkpoint
 * problem and prints the summary line. Returns the exit status. */
static px_status_t pxw_conclude(pxw_t *w, px_trainer_t *trainer, px_strategy_kind_t kind,
                                const px_strategy_result_t *res, char *model_path, size_t cap,
                                int *rc) {
  const pxw_args_t *a = &w->a;
  if (w->cancelled) {
    fprintf(stderr, "pxworker: rank %d: job %s was cancelled\n", a->rank, a->job);
    *rc = PXW_EXIT_CANCELLED;
    return PX_OK;
  }
  *rc = 0;
  if (res->left) { /* the coordinator dropped this node: nothing to save */
    fprintf(stderr, "pxworker: rank %d: job %s: this node left the job (membership epoch %d)\n",
            a->rank, a->job, res->epoch + 1);
    return PX_OK;
  }
  if (w->lead) PX_CHECK(pxw_save_model(w, trainer, res, model_path, cap));
  if (w->lead && res->checkpoint_problem[0]) pxw_write_note(w, res);
  if (!w->lead) return PX_OK;
  char inter[32], dense[32];
  pxw_fmt_bytes(res->bytes_inter, inter, sizeof inter);
  pxw_fmt_bytes(res->bytes_inter_dense, dense, sizeof dense);
  printf("job %s: %s %s, %d iteration%s (%s), test accuracy %.2f%%, density %.3f, "
         "inter-node %s (dense %s), %.1f s, model %s\n",
         a->job, px_strategy_name(kind), w->spec->model->name,
         res->iterations, res->iterations == 1 ? "" : "s",
         w->stop_reason[0] ? w->stop_reason : res->stop_reason, 100.0 * res->test_accuracy,
         res->density, inter, dense, res->seconds, model_path);
  fflush(stdout);
  return PX_OK;
}

/* The rank's end in the node's metrics file. */
static void pxw_record_end(pxw_t *w, px_comm_t *comm, const px_strategy_result_t *res, int rc,
                           const char *model_path) {
  if (!w->metrics) return;
  px_comm_traffic_t tr;
  memset(&tr, 0, sizeof tr);
  if (comm) px_comm_traffic(comm, &tr);
  char err[512];
  snprintf(err, sizeof err, "%s", rc == 1 ? px_last_error() : "");
  pxa_run_end_t end = {
      .status = rc == 0 ? "succeeded" : rc == PXW_EXIT_CANCELLED ? "cancelled" : "failed",
      .error = err,
      .iterations = res->iterations,
      .test_accuracy = res->iterations > 0 ? res->test_accuracy : -1.0,
      .test_loss = res->iterations > 0 ? res->test_loss : -1.0,
      .density = res->iterations > 0 ? res->density : 1.0,
      .seconds = res->seconds,
      .sent_intra = tr.sent[PX_TIER_INTRA],
      .recv_intra = tr.recv[PX_TIER_INTRA],
      .sent_inter = tr.sent[PX_TIER_INTER],
      .recv_inter = tr.recv[PX_TIER_INTER],
      .model_path = model_path,
  };
  if (pxa_metrics_run_end(w->metrics, w->a.job, w->a.rank, &end) != PX_OK)
    px_log(PX_LOG_WARN, "rank %d: metrics: %s", w->a.rank, px_last_error());
}

static int pxw_run(pxw_t *w) {
  const pxw_args_t *a = &w->a;
  px_status_t st;
  px_trainer_t *trainer = NULL;
  px_comm_t *comm = NULL;
  int rc = 1;
  char model_path[4200] = "";
  px_strategy_result_t res;
  memset(&res, 0, sizeof res);
  px_comm_opts_t co;
  if (pxw_prepare(w, &co) != PX_OK) {
    fprintf(stderr, "pxworker: rank %d: %s\n", a->rank, px_last_error());
    return 1;
  }
  PX_CHECK_GOTO(pxw_resolve_device(w), st, fail);
  pxw_log_device(w);
  PX_CHECK_GOTO(pxw_trainer_create(w, &trainer), st, fail);
  px_strategy_config_t sc;
  PX_CHECK_GOTO(pxw_strategy_config(w, trainer, &sc), st, fail);
  w->elastic = sc.elastic.on;
  PX_CHECK_GOTO(pxw_meet(w, &co, &comm), st, fail);
  sc.observe = pxw_observe;
  sc.observe_ctx = w;
  if (w->elastic) { /* any rank may become rank 0: every one passes the controller */
    sc.elastic.join_from = a->join_epoch > 0 ? -1 : 0; /* -1: the kept ranks' boundary */
    sc.elastic.max_nodes = pxw_max_nodes(w); /* the same on every rank: joins up to it */
    sc.elastic.kv = w->kv;
    sc.elastic.members = pxw_members;
    sc.elastic.members_ctx = w;
    sc.elastic.epoch_offset = 1; /* the logs number epochs as the coordinator does */
  }
  st = px_strategy_run(trainer, comm, &sc, a->rank == 0 || w->elastic ? pxw_control : NULL, w,
                       &res);
  if (w->elastic) comm = res.comm; /* the one the run ended on (NULL: none) */
  w->lead = comm && px_comm_rank(comm) == 0;
  if (w->training) unlink(w->progress_path); /* what follows may wait (final reports) */
  if (st != PX_OK) goto fail;
  if (!w->cancelled) pxw_record_final(w, &res);
  PX_CHECK_GOTO(pxw_conclude(w, trainer, sc.kind, &res, model_path, sizeof model_path, &rc), st, fail);
  goto done;

fail:
  fprintf(stderr, "pxworker: rank %d: job %s: %s\n", a->rank, a->job, px_last_error());
  rc = 1;
done:
  pxw_record_end(w, comm, &res, rc, model_path);
  px_comm_destroy(comm);
  px_kv_destroy(w->kv);
  w->kv = NULL;
  px_trainer_destroy(trainer);
  return rc;
}

int main(int argc, char **argv) {
  signal(SIGPIPE, SIG_IGN);
  pxw_t w;
  memset(&w, 0, sizeof w);
  int rc = pxw_parse_args(argc, argv, &w.a);
  if (rc >= 0) {
    px_settings_destroy(w.a.settings);
    return rc;
  }
  /* Info by default: the rank's log is where its progress is read. */
  if (w.a.log_level >= 0) px_log_set_level((px_log_level_t)w.a.log_level);
  else if (!getenv("PX_LOG_LEVEL")) px_log_set_level(PX_LOG_INFO);
  /* Started by an agent: die with it rather than train for nobody. */
  const char *agent = getenv("PX_AGENT_PID");
  if (agent && agent[0]) {
    prctl(PR_SET_PDEATHSIG, SIGKILL);
    if ((long)getppid() != strtol(agent, NULL, 10)) {
      fprintf(stderr, "pxworker: rank %d: the agent (pid %s) is gone\n", w.a.rank, agent);
      return 1;
    }
  }
  grpc_init(); /* one reference for the run: channels come and go on retries */
  rc = pxw_run(&w);
  /* what an outage kept, once the model is saved and the trainer freed */
  pxa_outbox_finish(&w.out, pxa_now_ms() + PXW_FLUSH_AT_END_MS);
  pxa_outbox_free(&w.out);
  pxa_metrics_close(w.metrics);
  px_free(w.lm);
  px_free(w.lp);
  px_jobspec_free(w.spec);
  px_settings_destroy(w.a.settings);
  grpc_shutdown();
  return rc;
}
