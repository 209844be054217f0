/* pxctl: the user's command line for a PruneX cluster
 * (docs/architecture.md, "Processes").
 *
 * This file declares the commands and their options, one table of options
 * per command (pxctl_args.h), from which both getopt_long's parse and the
 * command's --help are made; it applies what the parse finds and hands
 * over to the command. Options may come before or after the command and
 * between its arguments, as --opt VALUE or --opt=VALUE; "--" ends them.
 * Each command lives in its own file (pxctl.h lists them) and imports the
 * client module (pxctl_client.c). Every command accepts --help; every
 * query command --json (and --field).
 * Exit status: 0 success, 1 failure, 2 bad usage or a bad job spec. */
#include <assert.h>
#include <ctype.h>
#include <errno.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "prunex/strategy.h"
#include "pxctl.h"
#include "pxctl_args.h"

/* The options' ids (pxctl_arg_t.id), what pxctl_apply switches on. */
enum {
  OPT_COORD = PXCTL_ARG_ID0,
  OPT_JSON,
  OPT_STATE,
  OPT_LIMIT,
  OPT_LAYERS,
  OPT_FROM,
  OPT_ALL_RANKS,
  OPT_RANK,
  OPT_FOLLOW,
  OPT_WORK_DIR,
  OPT_KEEP,
  OPT_OUTPUT,
  OPT_REASON,
  OPT_CA,
  OPT_NODES,
  OPT_WPN,
  OPT_CSV,
  OPT_OUT,
  OPT_DB,
  OPT_HTTP,
  OPT_ONNX,
  OPT_USER,
  OPT_SINCE,
  OPT_FIELD,
  OPT_SWEEP,
  OPT_ME,
  OPT_AFTER,
  OPT_TENSORBOARD,
  OPT_HELP,
  OPT_VERSION,
};

/* The options most commands share. --ca goes wherever --coordinator does;
 * --field (unlisted, main help) and --help wherever --json is and everywhere
 * (pxctl_cmd_args adds them). */
#define ARG_COORD                                                                          \
  {"coordinator", 0, "HOST:PORT", OPT_COORD,                                              \
   "the coordinator (default: $PRUNEX_COORDINATOR, else\n" PXCTL_DEFAULT_COORDINATOR ")"}
#define CA_HELP                                                                            \
  "PEM CA bundle: TLS, verifying the coordinator (default\n$PRUNEX_CA; unset: plain text)"
#define ARG_CA {"ca", 0, "FILE", OPT_CA, CA_HELP}
#define ARG_JSON(help) {"json", 0, NULL, OPT_JSON, help}
#define ARG_DB                                                                             \
  {"db", 0, "FILE", OPT_DB,                                                               \
   "read JOB from this coordinator database file (a copy,\n"                                \
   "a backup) instead of asking a coordinator"}
#define ARG_TB                                                                             \
  {"tensorboard", 0, "DIR", OPT_TENSORBOARD,                                              \
   "write the job's iteration and per-layer figures into a\n"                             \
   "TensorBoard event file in DIR (created) as they are\n"                                \
   "reported: an iteration once the next one is, the rest\n"                              \
   "when the job ends (tags: docs/user-guide.md)"}
#define ARG_ALL_RANKS                                                                      \
  {"all-ranks", 0, NULL, OPT_ALL_RANKS, "every rank's report, not one per iteration"}
#define JOB_JSON "the job, as `status --json`"

static const pxctl_arg_t pxctl_field_arg = {"field", 0, "NAME", OPT_FIELD, NULL};
static const pxctl_arg_t pxctl_help_arg = {"help", 'h', NULL, OPT_HELP, "this help"};

/* Before a command (and the main help's list): what every command that asks
 * the coordinator takes. */
static const pxctl_arg_t pxctl_global_args[] = {
    ARG_COORD,
    ARG_CA,
    ARG_JSON("one JSON document (object or array) on stdout"),
    {"field", 0, "NAME", OPT_FIELD,
     "NAME of each object the JSON lists (or of its one\nobject), one per line: for scripts"},
    {"help", 'h', NULL, OPT_HELP, "this help; `pxctl COMMAND --help` for a command's"},
    {"version", 0, NULL, OPT_VERSION, ""},
};

static const pxctl_arg_t submit_args[] = {
    {"nodes", 0, "M", OPT_NODES, "run on M nodes instead of the spec's cluster.nodes"},
    {"workers-per-node", 0, "P", OPT_WPN,
     "P workers per node instead of cluster.workers_per_node\n"
     "(with either, an admm.max_iterations the spec does not\n"
     "give is derived again for the new cluster; the Slurm\n"
     "script passes the allocation's node count)"},
    {"after", 0, "JOB[:ok|any]", OPT_AFTER,
     "wait until JOB has ended: ok (the default) when it\n"
     "SUCCEEDED, any in any end state (sbatch --dependency=\n"
     "afterok/afterany); repeat for several. A job whose ok\n"
     "dependency ended otherwise is CANCELLED, its reason\n"
     "\"dependency never satisfied: ...\""},
    ARG_COORD,
    ARG_CA,
    ARG_JSON("one JSON object"),
};
static const pxctl_arg_t status_args[] = {ARG_DB, ARG_COORD, ARG_CA, ARG_JSON("one JSON object")};
static const pxctl_arg_t list_args[] = {
    {"state", 0, "S", OPT_STATE,
     "only jobs in state S (pending, scheduled, running,\nsucceeded, failed, cancelled)"},
    {"limit", 0, "N", OPT_LIMIT, "the newest N jobs (0: all, fetched a page at a time)"},
    {"sweep", 0, "SWEEP", OPT_SWEEP,
     "only that sweep's jobs, with their values, then the\nsweep's summary (as `status SWEEP`)"},
    {"user", 0, "NAME", OPT_USER, "only NAME's jobs (USER column: who submitted each)"},
    {"me", 0, NULL, OPT_ME, "only the jobs of the token's user"},
    ARG_COORD,
    ARG_CA,
    ARG_JSON("an array of the objects `status --json` prints"),
};
static const pxctl_arg_t acct_args[] = {
    {"user", 0, "NAME", OPT_USER, "only NAME's jobs"},
    {"since", 0, "WHEN", OPT_SINCE,
     "only jobs submitted since WHEN: YYYY-MM-DD[THH:MM[:SS]]\n"
     "(UTC) or a duration back from now (90m, 12h, 7d)"},
    {"state", 0, "S", OPT_STATE, "only jobs in state S (pending, ..., cancelled)"},
    {"limit", 0, "N", OPT_LIMIT,
     "at most N rows (default 1000, at most 5000; the totals\nstill cover every matching job)"},
    ARG_COORD,
    ARG_CA,
    ARG_JSON("{\"records\": [AcctRecord], \"totals\": [AcctUserTotal],\n"
             "\"truncated\"} (proto field names)"),
    {"csv", 0, NULL, OPT_CSV,
     "the records as CSV with a header line: job_id, user,\n"
     "name, nodes, devices, submit, start, end (ISO 8601 UTC,\n"
     "empty when not yet), node_seconds, state, attempts, reason"},
};
static const pxctl_arg_t cancel_args[] = {
    {"reason", 0, "TEXT", OPT_REASON, "recorded with the state change"},
    ARG_COORD,
    ARG_CA,
    ARG_JSON("the cancelled job, as `status --json` (a sweep:\n"
             "{\"sweep_id\", \"cancelled\": [JOB, ...]})"),
};
/* hold, release and update */
static const pxctl_arg_t job_args[] = {ARG_COORD, ARG_CA, ARG_JSON(JOB_JSON)};
static const pxctl_arg_t delete_args[] = {ARG_COORD, ARG_CA,
                                          ARG_JSON("{\"job_id\", \"deleted\": true}")};
static const pxctl_arg_t nodes_args[] = {
    {"state", 0, "S", OPT_STATE, "only nodes in state S (ready, busy, lost)"},
    ARG_COORD,
    ARG_CA,
    ARG_JSON("an array of Node objects (proto field names)"),
};
static const pxctl_arg_t metrics_args[] = {
    {"layers", 0, NULL, OPT_LAYERS, "per-layer residuals (r/s intra, r/s inter) and rho1/rho2"},
    {"from", 0, "N", OPT_FROM, "start at iteration N"},
    {"limit", 0, "N", OPT_LIMIT, "at most N rows (0: all)"},
    ARG_ALL_RANKS,
    ARG_DB,
    ARG_COORD,
    ARG_CA,
    ARG_JSON("{\"job_id\", \"iterations\": [IterationReport objects]}\n"
             "(null where a figure was not measured)"),
    {"csv", 0, NULL, OPT_CSV,
     "CSV with a header line: iteration, rank, time_unix_ms,\n"
     "epoch, loss, train_accuracy, test_accuracy, density,\n"
     "mask_drift, mask_groups, frozen, bytes_intra,\n"
     "bytes_inter, bytes_inter_dense, local_s, intra_s,\n"
     "projection_s, inter_s, broadcast_s, control_s\n"
     "(empty where not measured); with --layers one row per\n"
     "iteration and layer: iteration, rank, layer, name,\n"
     "r_intra, s_intra, r_inter, s_inter, rho1, rho2, density"},
};
static const pxctl_arg_t plot_args[] = {
    {"out", 0, "DIR", OPT_OUT, "where the files go (created; required)"},
    {"db", 0, "FILE", OPT_DB, "read this coordinator database instead of asking\na coordinator"},
    ARG_COORD,
    ARG_CA,
    ARG_JSON("{\"out\", \"files\": [paths]}"),
};
static const pxctl_arg_t drift_args[] = {
    ARG_ALL_RANKS,
    ARG_DB,
    ARG_COORD,
    ARG_CA,
    ARG_JSON("{\"job_id\", \"frozen\", \"frozen_at_iteration\",\n"
             "\"iterations\": [{\"iteration\", \"rank\", \"mask_drift\",\n"
             "\"density\", \"frozen\"}]}"),
};
static const pxctl_arg_t logs_args[] = {
    {"rank", 0, "R", OPT_RANK, "only rank R (default: every rank)"},
    {"follow", 'f', NULL, OPT_FOLLOW, "keep printing new lines until the job ends (Ctrl-C\nstops)"},
    {"work-dir", 0, "DIR", OPT_WORK_DIR,
     "this host's agent work directory, for the local files\n"
     "(default: $PRUNEX_WORK_DIR, else " PXCTL_DEFAULT_WORK_DIR ")"},
    ARG_DB,
    ARG_COORD,
    ARG_CA,
    ARG_JSON("{\"job_id\", \"source\": \"coordinator\", \"files\": [{\"rank\",\n"
             "\"text\", \"size\", \"start_offset\", \"eof\"}]}, or for local\n"
             "files {\"job_id\", \"dir\", \"files\": [{\"rank\", \"path\",\n"
             "\"text\"}]} (not with --follow)"),
};
static const pxctl_arg_t watch_args[] = {
    ARG_TB, ARG_COORD, ARG_CA, ARG_JSON("no bar; the final job as `status --json`")};
static const pxctl_arg_t run_args[] = {
    {"work-dir", 0, "DIR", OPT_WORK_DIR,
     "where the run directory (database, logs, agent work\n"
     "directories) is made (default: $TMPDIR, else /tmp)"},
    {"keep", 0, NULL, OPT_KEEP, "keep the run directory afterwards"},
    {"output", 0, "DIR", OPT_OUTPUT,
     "the job's output_dir (default: the spec's, else\n"
     "RUN_DIR/output, which is kept when the job succeeds)"},
    {"http", 0, "HOST:PORT", OPT_HTTP,
     "the private pxcoordd also serves HTTP: the live\n"
     "dashboard at /, Prometheus /metrics (port 0: free)"},
    ARG_TB,
    ARG_JSON("progress on stderr; the last stdout line is one\n"
             "object: job_id, name, state, reason, iterations,\n"
             "test_accuracy, density, inter_bytes, inter_bytes_dense,\n"
             "inter_reduction, intra_bytes, wall_s, total_s,\n"
             "model_path, metrics_dir, run_dir, summary_source;\n"
             "after a successful job also dense_params,\n"
             "dense_bytes, compact_params, compact_bytes,\n"
             "dense_macs, compact_macs (multiply-accumulates per\n"
             "image), compact_path (the compact model pxctl run\n"
             "writes beside the final one)"),
};
static const pxctl_arg_t export_args[] = {
    {"out", 0, "DIR", OPT_OUT, "the output directory of the model (created if needed)"},
    {"onnx", 0, NULL, OPT_ONNX, "also write the ONNX model"},
    {"tensorboard", 0, "DIR", OPT_TENSORBOARD,
     "write the TensorBoard event file into DIR (created;\n--out or --tensorboard is required)"},
    {"db", 0, "FILE", OPT_DB, "(with --tensorboard) read JOB from this coordinator\ndatabase file"},
    ARG_COORD,
    {"ca", 0, "FILE", OPT_CA, CA_HELP "\n(asked only for a JOB)"},
    ARG_JSON("{\"source\", \"arch\", \"dense_params\", \"compact_params\",\n"
             "\"dense_bytes\", \"compact_bytes\", \"dense_macs\",\n"
             "\"compact_macs\", \"compact_path\",\n"
             "\"onnx_path\", \"onnx_bytes\", \"widths\"}; --tensorboard\n"
             "adds \"tensorboard_file\", \"tensorboard_events\" and\n"
             "\"tensorboard_scalars\" (alone: with \"job_id\")"),
};

typedef struct {
  const char *name;
  const char *synopsis;
  const char *summary;
  const char *details;      /* what it does, before its options ("" or paragraphs) */
  const pxctl_arg_t *args;  /* its options, in the order its help lists them */
  size_t nargs;
  const char *epilog;       /* after its options */
  int npos;                 /* positional arguments it takes */
  int (*fn)(pxctl_opts_t *);
} pxctl_cmd_t;
#define ARGS(table) table, sizeof table / sizeof table[0]

/* The commands that read a finished run without a coordinator (pxctl_offline.c). */
#define OFFLINE_HELP                                                                       \
  "JOB may also be the directory a `pxctl run` left, read without a coordinator:\n"        \
  "its output directory (OUTPUT/metrics/coordinator.db) or its run directory\n"            \
  "(coordinator.db; kept with --keep, or left by a run that was killed). A JOB with\n"     \
  "a '/' is always such a path. pxctl starts a private read-only pxcoordd on a copy\n"     \
  "of the database, so the output is the same as the live coordinator's.\n\n"

static const pxctl_cmd_t pxctl_cmds[] = {
    {"submit", "SPEC.yaml", "validate a job spec and submit it; prints the job id",
     "Parses and validates SPEC.yaml on this machine first: a bad spec is refused\n"
     "with FILE:LINE:COLUMN and what is wrong (exit 2), and nothing is submitted.\n"
     "Prints the new job's id (--json: {\"job_id\",\"name\",\"spec_file\"}). A spec\n"
     "with sweep: makes one job per combination under one sweep id: prints the sweep\n"
     "id, then the jobs' ids one a line (--json adds \"sweep_id\" and \"job_ids\").\n\n",
     ARGS(submit_args), "", 1, pxctl_cmd_submit},
    {"status", "JOB|SWEEP", "a job's state, placement, progress, summary and history",
     "--json prints the Job message of proto/prunex.proto as one object keyed by the\n"
     "proto field names (job_id, name, state, spec, spec_yaml, reason, ..., summary).\n"
     "A sweep id (sweep-...): its jobs by state, the best test accuracy, the lowest\n"
     "density and the fewest inter-node bytes among them, and one line per job\n"
     "(--json: {\"sweep_id\", \"jobs\", \"states\", \"best_accuracy\", ...}).\n\n" OFFLINE_HELP,
     ARGS(status_args), "", 1, pxctl_cmd_status},
    {"list", "", "jobs, newest first",
     "Pending jobs also show their place in the queue: PRIORITY (0 to 1, the weighted\n"
     "mean of the job's own priority, its user's fair share and its age: the three\n"
     "factors under JOB/FAIR/AGE) and AHEAD (pending jobs before it); `status` says\n"
     "why one waits.\n\n",
     ARGS(list_args), "", 0, pxctl_cmd_list},
    {"acct", "", "accounting: who used what, like sacct (kept past job retention)",
     "One row per job, newest first: user, name, nodes and devices, submit, start and\n"
     "end times, node-seconds (over every attempt; a running one up to now), state,\n"
     "attempts and exit reason; then per-user totals over every matching job.\n\n",
     ARGS(acct_args), "", 0, pxctl_cmd_acct},
    {"cancel", "JOB|SWEEP", "cancel a pending or running job, or a sweep's unfinished jobs", "",
     ARGS(cancel_args), "", 1, pxctl_cmd_cancel},
    {"hold", "JOB", "keep a pending job from starting (owner or admin; scontrol hold)",
     "The job stays PENDING and is passed over by the scheduler; its reason says who\n"
     "holds it. A job an admin holds is released by an admin only.\n\n",
     ARGS(job_args), "", 1, pxctl_cmd_hold},
    {"release", "JOB", "let a held job be scheduled again (scontrol release)", "",
     ARGS(job_args), "", 1, pxctl_cmd_release},
    {"update", "JOB FIELD=VALUE...", "change a job's priority or time limit (scontrol update)",
     "Fields: priority=N (1 to 1000; users may set 1 to 100, the default, only admins\n"
     "more) and time_limit=S (seconds, or with a unit: 90m, 2h, 1d; users up to the\n"
     "cluster's time_limit_max_s, admins beyond). A pending job's priority and time\n"
     "limit; a running job's time limit (its priority then counts for preemption).\n\n",
     ARGS(job_args), "", 3, pxctl_cmd_update},
    {"delete", "JOB", "remove a finished job and its metrics (owner or admin)",
     "Removes the job, its events, metrics and rank exits from the coordinator. Only\n"
     "finished jobs (cancel a running one first); only its owner or an admin.\n\n",
     ARGS(delete_args), "", 1, pxctl_cmd_delete},
    {"nodes", "", "the registered nodes, their state and devices", "", ARGS(nodes_args), "", 0,
     pxctl_cmd_nodes},
    {"metrics", "JOB", "per-iteration figures of a job",
     "One row per outer iteration: epoch, loss, train and test accuracy, density,\n"
     "mask drift, intra- and inter-node bytes (the job-level report of the lowest\n"
     "rank that reported). Each membership change of an elastic job is a line\n"
     "among the rows, before the first iteration of its epoch (\"-- membership\n"
     "epoch 2 from iteration 7 (lost): out n2; nodes n1, n3: why\"); --json adds\n"
     "\"memberships\" (every epoch, with its kind and nodes in and out).\n\n" OFFLINE_HELP,
     ARGS(metrics_args), "", 1, pxctl_cmd_metrics},
    {"plot", "JOB [JOB ...]", "figures of one job, or several overlaid, as PNG and SVG",
     "Draws with gnuplot (Debian's gnuplot-nox) into --out DIR, each figure as\n"
     "NAME.png (1200x800) and NAME.svg: accuracy-time, accuracy-bytes (test accuracy\n"
     "against wall time and cumulative inter-node bytes; several jobs are overlaid,\n"
     "e.g. hsadmm against ddp), message-size (inter-node bytes per iteration beside\n"
     "the dense figure), drift, density, phases-ID (time per phase per iteration),\n"
     "and for an H-SADMM job residuals-ID (the four residual norms) and rho-ID (rho1,\n"
     "rho2): the median and bands over the layers, and the 3 largest by name.\n"
     "Quantities that start at 0 are drawn from 0.\n"
     "Each JOB is a job id or an unambiguous name, read from the coordinator (or\n"
     "with --db from a coordinator database file), or the output directory of a\n"
     "`pxctl run` (which keeps its metrics in OUTPUT/metrics/coordinator.db), or a\n"
     "run directory kept with --keep (each read through a private read-only\n"
     "pxcoordd, as `pxctl status DIR`). Up to 8. The data goes to DIR/data/*.tsv and\n"
     "the script to DIR/plot.gp (`gnuplot DIR/plot.gp` redraws).\n\n",
     ARGS(plot_args), "", 8, pxctl_cmd_plot},
    {"drift", "JOB", "mask drift and density per iteration, and when the masks froze",
     OFFLINE_HELP, ARGS(drift_args), "", 1, pxctl_cmd_drift},
    {"logs", "JOB", "a job's per-rank logs, from any host (through the coordinator)",
     "The agents upload every rank's log (WORK_DIR/jobs/JOB/rank-R.log on the node\n"
     "that ran it) to the coordinator every few seconds and when the rank ends; the\n"
     "coordinator keeps the last MiB of each rank, and this prints it. When the\n"
     "coordinator holds nothing for the job (or cannot be asked), the files of this\n"
     "host's agent are read instead. A run's directory as JOB (see `status`) is read\n"
     "from its database's log store (the agents of `pxctl run` upload every rank's\n"
     "log before they stop), else from the files of its node-0 when it is a kept run\n"
     "directory.\n\n",
     ARGS(logs_args), "", 1, pxctl_cmd_logs},
    {"watch", "JOB", "live progress until the job ends",
     "Follows the job with WatchJob and draws a progress bar. A coordinator that\n"
     "restarts or cannot be reached is waited for (reconnecting, up to 15 minutes).\n"
     "Exit status 0 when the job SUCCEEDED, 1 when it failed or was cancelled (or\n"
     "the coordinator stayed away, or --tensorboard could not write).\n\n",
     ARGS(watch_args), "", 1, pxctl_cmd_watch},
    {"run", "SPEC.yaml", "run a job on this machine (private coordinator and agents)",
     "The embedded mode: validates SPEC.yaml, starts a private pxcoordd on a free\n"
     "loopback port and one pxagent per cluster.nodes (node-0, node-1, ...; each with\n"
     "cluster.workers_per_node CPU workers and max(1, cores / (nodes * workers))\n"
     "threads per worker), waits until they are READY, submits, shows the progress,\n"
     "prints a summary (state, iterations, test accuracy, density, inter-node bytes\n"
     "against dense synchronisation, wall time, model path, dense and compact model\n"
     "sizes: the compact model is written beside the final one) and tears everything\n"
     "down, also on Ctrl-C (the job is cancelled first). Exit status 0 when the job\n"
     "SUCCEEDED, 1 when not (or --tensorboard could not write), 2 for a bad spec,\n"
     "130 (143) after SIGINT (SIGTERM).\n"
     "pxcoordd and pxagent are looked for in $PRUNEX_BIN_DIR, next to pxctl, in the\n"
     "build tree (../coordinatord, ../agent) and on PATH.\n\n",
     ARGS(run_args),
     "The metrics databases are kept in OUTPUT/metrics (coordinator.db and each\n"
     "node's metrics.db) whenever the output directory is: `pxctl status OUTPUT`,\n"
     "`pxctl metrics OUTPUT`, `drift`, `logs` and `plot` read them afterwards.\n",
     1, pxctl_cmd_run},
    {"export", "JOB|MODEL.safetensors", "the compact (physically pruned) model, and ONNX",
     "Removes the pruned filters and input channels from every convolution of a\n"
     "PruneX model (the final model of job JOB, whose path the coordinator's job\n"
     "summary gives, or a .safetensors checkpoint on this machine) and writes\n"
     "DIR/<name>.compact.safetensors (loadable with pxtrain --load) and, with --onnx,\n"
     "DIR/<name>.onnx (opset 13; the input is the raw pixels in [0, 1] at the data\n"
     "set's own size, e.g. N x 1 x 28 x 28 for Fashion-MNIST: the graph pads and\n"
     "normalises them as the training loader does; the output is the logits; see\n"
     "docs/user-guide.md). Prints the parameter counts, file sizes and\n"
     "multiply-accumulates per image (what pruning tables call FLOPs), dense and\n"
     "compact.\n"
     "With --tensorboard DIR, the job's iteration and per-layer figures (those of\n"
     "`pxctl metrics --layers`) as a TensorBoard event file in DIR (one scalar per\n"
     "figure, the iteration as the step; tags: docs/user-guide.md), for\n"
     "`tensorboard --logdir` beside other runs. JOB may then also be the directory\n"
     "a `pxctl run` left, or a job of --db FILE, read offline (see `pxctl status`).\n"
     "For a running job, `pxctl watch JOB --tensorboard DIR` writes as it goes.\n\n",
     ARGS(export_args), "", 1, pxctl_cmd_export},
};
#define PXCTL_NCMDS ((int)(sizeof pxctl_cmds / sizeof pxctl_cmds[0]))

static void pxctl_main_help(FILE *f) {
  fprintf(f,
          "usage: pxctl [--coordinator HOST:PORT] [--json] COMMAND [ARGS] [OPTIONS]\n"
          "\n"
          "The PruneX command line: submit training jobs to a pxcoordd coordinator,\n"
          "follow them and read their metrics, or run one on this machine.\n"
          "\n"
          "Commands:\n");
  for (int i = 0; i < PXCTL_NCMDS; i++) {
    char head[64];
    snprintf(head, sizeof head, "%s %s", pxctl_cmds[i].name, pxctl_cmds[i].synopsis);
    fprintf(f, "  %-18s %s\n", head, pxctl_cmds[i].summary);
  }
  fprintf(f,
          "\nstatus, metrics, drift, logs and plot also read a finished `pxctl run` without a\n"
          "coordinator: give its output (or run) directory as JOB (`pxctl status --help`).\n");
  fprintf(f, "\nStrategies (the spec's `strategy:`):\n");
  for (int i = 0; i < px_strategy_count(); i++) {
    const px_strategy_info_t *s = px_strategy_at(i);
    fprintf(f, "  %-18s %s%s\n", s->name, s->description, s->is_default ? " (default)" : "");
  }
  fprintf(f,
          "\n"
          "Options of every command that asks the coordinator:\n");
  pxctl_args_print_help(f, pxctl_global_args,
                        sizeof pxctl_global_args / sizeof pxctl_global_args[0]);
  fprintf(f,
          "\n"
          "Credentials (a coordinator with tokens): the token is $PRUNEX_TOKEN, else the\n"
          "first line of $XDG_CONFIG_HOME/prunex/token (~/.config/prunex/token), which\n"
          "must not be readable by others (chmod 600). See docs/security.md.\n"
          "\n"
          "Exit status: 0 success; 1 failure (coordinator unreachable or refusing, no such\n"
          "job, for watch and run: the job did not succeed); 2 bad usage or a bad spec.\n");
}

static void pxctl_cmd_help(const pxctl_cmd_t *c, FILE *f) {
  fprintf(f, "usage: pxctl %s%s%s [OPTIONS]\n\n%c%s.\n\n%s", c->name, c->synopsis[0] ? " " : "",
          c->synopsis, toupper((unsigned char)c->summary[0]), c->summary + 1, c->details);
  pxctl_args_print_help(f, c->args, c->nargs);
  fputs(c->epilog, f);
  pxctl_args_print_help(f, &pxctl_help_arg, 1);
}

/* The user's token when PRUNEX_TOKEN is not set: the first line of
 * $XDG_CONFIG_HOME/prunex/token (else ~/.config/prunex/token), a file
 * only its owner may read. Put in PRUNEX_TOKEN for the RPC client. Returns
 * 0, or -1 after saying why the file cannot be used. */
static int pxctl_load_token(void) {
  const char *env = getenv("PRUNEX_TOKEN");
  if (env && env[0]) return 0;
  char path[4096];
  const char *xdg = getenv("XDG_CONFIG_HOME"), *home = getenv("HOME");
  if (xdg && xdg[0]) snprintf(path, sizeof path, "%s/prunex/token", xdg);
  else if (home && home[0]) snprintf(path, sizeof path, "%s/.config/prunex/token", home);
  else return 0;
  FILE *f = fopen(path, "r");
  if (!f) return 0; /* no file: no token, as without PRUNEX_TOKEN */
  struct stat sb;
  if (fstat(fileno(f), &sb) == 0 && (sb.st_mode & (S_IRWXG | S_IRWXO))) {
    fclose(f);
    pxctl_fail("%s: readable by other users (mode %03o): run chmod 600 %s", path,
               (unsigned)(sb.st_mode & 0777), path);
    return -1;
  }
  char line[4200] = "";
  if (!fgets(line, sizeof line, f)) line[0] = '\0';
  fclose(f);
  size_t n = strlen(line);
  while (n && (line[n - 1] == '\n' || line[n - 1] == '\r' || line[n - 1] == ' ')) line[--n] = '\0';
  if (!n) {
    pxctl_fail("%s: empty (expected the token on the first line)", path);
    return -1;
  }
  setenv("PRUNEX_TOKEN", line, 1);
  memset(line, 0, sizeof line);
  return 0;
}

static int pxctl_parse_count(pxctl_opts_t *o, const char *opt, const char *v, int *out) {
  char *end;
  errno = 0;
  long n = strtol(v, &end, 10);
  if (errno || end == v || *end || n < 0 || n > 1000000000)
    return pxctl_usage_error(o, "%s '%s': expected a non-negative integer", opt, v);
  *out = (int)n;
  return 0;
}

/* An option that names a path: *dst = v, or the usage error "OPT needs
 * WHAT" for an empty value. */
static int pxctl_set_path(pxctl_opts_t *o, const char **dst, const char *v, const char *opt,
                          const char *what) {
  if (!v[0]) return pxctl_usage_error(o, "%s needs %s", opt, what);
  *dst = v;
  return 0;
}

/* --after JOB[:ok|any], into o->after. */
static int pxctl_parse_after(pxctl_opts_t *o, const char *v) {
  size_t n = strcspn(v, ":");
  const char *kind = v + n;
  if (n == 0 || n > 63 || (kind[0] && strcmp(kind, ":ok") != 0 && strcmp(kind, ":any") != 0))
    return pxctl_usage_error(o, "--after '%s': expected JOB, JOB:ok or JOB:any", v);
  if (o->nafter >= PXCTL_AFTER_MAX)
    return pxctl_usage_error(o, "--after: at most %d dependencies", PXCTL_AFTER_MAX);
  o->after[o->nafter++] = v;
  return 0;
}

/* Applies one option with its value (NULL for flags): 0, or the exit
 * status after saying what is wrong with the value. */
static int pxctl_apply_value(pxctl_opts_t *o, const pxctl_arg_t *opt, const char *v) {
  switch (opt->id) {
    case OPT_COORD:
      if (!v[0] || !strrchr(v, ':'))
        return pxctl_usage_error(o, "--coordinator '%s': expected HOST:PORT", v);
      o->coordinator = v;
      return 0;
    case OPT_JSON: o->json = 1; return 0;
    case OPT_FIELD: /* the JSON, read back one field per line (pxctl_json.c) */
      if (!v[0]) return pxctl_usage_error(o, "--field needs a field name");
      o->json = 1;
      pxctl_json_set_field(v);
      return 0;
    case OPT_STATE: {
      int s = !strcmp(o->cmd, "nodes") ? pxctl_parse_node_state(v) : pxctl_parse_job_state(v);
      if (!s)
        return pxctl_usage_error(o, "--state '%s': expected one of %s", v,
                                 !strcmp(o->cmd, "nodes")
                                     ? "ready, busy, lost"
                                     : "pending, scheduled, running, succeeded, failed, cancelled, timeout");
      o->state = s;
      return 0;
    }
    case OPT_LIMIT: return pxctl_parse_count(o, "--limit", v, &o->limit);
    case OPT_USER:
      if (!v[0]) return pxctl_usage_error(o, "--user needs a user name");
      o->user = v;
      return 0;
    case OPT_ME: o->me = 1; return 0;
    case OPT_AFTER: return pxctl_parse_after(o, v);
    case OPT_SWEEP:
      if (strncmp(v, "sweep-", 6) != 0 || strlen(v) > 63)
        return pxctl_usage_error(o, "--sweep '%s': expected a sweep id (sweep-NNNNNN)", v);
      o->sweep = v;
      return 0;
    case OPT_SINCE:
      if (pxctl_parse_since(v, &o->since_unix_ms) != 0)
        return pxctl_usage_error(o, "--since '%s': expected YYYY-MM-DD[THH:MM[:SS]] (UTC) or a"
                                    " duration such as 90m, 12h, 7d", v);
      return 0;
    case OPT_FROM: return pxctl_parse_count(o, "--from", v, &o->from);
    case OPT_RANK: return pxctl_parse_count(o, "--rank", v, &o->rank);
    case OPT_LAYERS: o->layers = 1; return 0;
    case OPT_ALL_RANKS: o->all_ranks = 1; return 0;
    case OPT_FOLLOW: o->follow = 1; return 0;
    case OPT_KEEP: o->keep = 1; return 0;
    case OPT_ONNX: o->onnx = 1; return 0;
    case OPT_WORK_DIR: return pxctl_set_path(o, &o->work_dir, v, "--work-dir", "a directory");
    case OPT_OUTPUT: return pxctl_set_path(o, &o->output, v, "--output", "a directory");
    case OPT_REASON: o->reason = v; return 0;
    case OPT_CA:
      if (!v[0]) return pxctl_usage_error(o, "--ca needs a file");
      /* Through the environment, which the RPC client reads (PRUNEX_CA). */
      setenv("PRUNEX_CA", v, 1);
      return 0;
    case OPT_NODES:
    case OPT_WPN: {
      const char *name = opt->id == OPT_NODES ? "--nodes" : "--workers-per-node";
      int *dst = opt->id == OPT_NODES ? &o->nodes : &o->workers_per_node;
      if (pxctl_parse_count(o, name, v, dst)) return PXCTL_EXIT_USAGE;
      if (*dst < 1) return pxctl_usage_error(o, "%s '%s': expected at least 1", name, v);
      return 0;
    }
    case OPT_CSV: o->csv = 1; return 0;
    case OPT_HTTP:
      if (!v[0] || !strrchr(v, ':'))
        return pxctl_usage_error(o, "--http '%s': expected HOST:PORT", v);
      o->http = v;
      return 0;
    case OPT_OUT: return pxctl_set_path(o, &o->out, v, "--out", "a directory");
    case OPT_DB: return pxctl_set_path(o, &o->db, v, "--db", "a file");
    case OPT_TENSORBOARD:
      return pxctl_set_path(o, &o->tensorboard, v, "--tensorboard", "a directory");
  }
  return 0;
}

/* What a parse of the command line works on (pxctl_args_t.ctx). */
typedef struct {
  pxctl_opts_t *o;
  const pxctl_cmd_t *cmd; /* NULL while the command is looked for */
  int help;               /* --help or -h before the command */
} pxctl_parse_t;

/* pxctl_args_t.apply: an option of the command; before the command, only
 * its flags come here, and only --help and --version count there. */
static int pxctl_on_option(void *ctx, const pxctl_arg_t *a, const char *v) {
  pxctl_parse_t *p = ctx;
  if (!p->cmd) {
    if (a->id == OPT_HELP) p->help = 1;
    if (a->id != OPT_VERSION) return -1;
    printf("pxctl %s\n", px_version());
    return PXCTL_EXIT_OK;
  }
  if (a->id == OPT_HELP) {
    pxctl_cmd_help(p->cmd, stdout);
    return PXCTL_EXIT_OK;
  }
  int rc = pxctl_apply_value(p->o, a, v);
  return rc ? rc : -1;
}

/* pxctl_args_t.positional: the command's arguments, as many as it takes. */
static int pxctl_on_positional(void *ctx, const char *arg) {
  pxctl_parse_t *p = ctx;
  pxctl_opts_t *o = p->o;
  if (o->npos >= p->cmd->npos)
    return p->cmd->npos ? pxctl_usage_error(o, "unexpected argument '%s' (%s takes %s)", arg,
                                            p->cmd->name, p->cmd->synopsis)
                        : pxctl_usage_error(o, "unexpected argument '%s' (%s takes none)", arg,
                                            p->cmd->name);
  o->pos[o->npos++] = arg;
  return -1;
}

/* Appends a to the n options of known unless one of that name is there
 * (which must then take a value as a does). */
static void pxctl_add_arg(pxctl_arg_t *known, size_t *n, const pxctl_arg_t *a) {
  for (size_t i = 0; i < *n; i++) {
    if (strcmp(known[i].name, a->name) != 0) continue;
    assert(!known[i].arg == !a->arg && known[i].short_name == a->short_name);
    return;
  }
  assert(*n < PXCTL_ARGS_MAX);
  known[(*n)++] = *a;
}

/* Every option of pxctl once (the global ones, then each command's): what
 * may stand before the command, and what "does not apply" elsewhere. */
static size_t pxctl_known_args(pxctl_arg_t *known) {
  size_t n = 0;
  for (size_t i = 0; i < sizeof pxctl_global_args / sizeof pxctl_global_args[0]; i++)
    pxctl_add_arg(known, &n, &pxctl_global_args[i]);
  for (int c = 0; c < PXCTL_NCMDS; c++)
    for (size_t i = 0; i < pxctl_cmds[c].nargs; i++)
      pxctl_add_arg(known, &n, &pxctl_cmds[c].args[i]);
  return n;
}

/* The options cmd takes: its table, --field wherever --json is, --help. */
static size_t pxctl_cmd_args(const pxctl_cmd_t *cmd, pxctl_arg_t *args) {
  size_t n = 0;
  for (size_t i = 0; i < cmd->nargs; i++) pxctl_add_arg(args, &n, &cmd->args[i]);
  if (pxctl_args_find(cmd->args, cmd->nargs, OPT_JSON)) pxctl_add_arg(args, &n, &pxctl_field_arg);
  pxctl_add_arg(args, &n, &pxctl_help_arg);
  return n;
}

/* The command named on the line into p->cmd, its word's index into *cmd_at;
 * -1, or the exit status of a line answered here (--version, --help
 * without a command, no or an unknown command). */
static int pxctl_find_command(pxctl_parse_t *p, const pxctl_arg_t *known, size_t nknown,
                              int argc, char **argv, int *cmd_at) {
  pxctl_args_t a = {known, nknown, known, nknown, NULL, pxctl_on_option, NULL, p};
  int rc = pxctl_args_command(&a, argc, argv, cmd_at);
  if (rc >= 0) return rc;
  if (!*cmd_at) {
    if (p->help) {
      pxctl_main_help(stdout);
      return PXCTL_EXIT_OK;
    }
    pxctl_main_help(stderr);
    return pxctl_usage_error(NULL, "no command given");
  }
  for (int i = 0; i < PXCTL_NCMDS; i++)
    if (!strcmp(argv[*cmd_at], pxctl_cmds[i].name)) p->cmd = &pxctl_cmds[i];
  if (!p->cmd) {
    if (p->help) {
      pxctl_main_help(stdout);
      return PXCTL_EXIT_OK;
    }
    return pxctl_usage_error(NULL, "unknown command '%s'", argv[*cmd_at]);
  }
  p->o->cmd = p->cmd->name;
  if (p->help) {
    pxctl_cmd_help(p->cmd, stdout);
    return PXCTL_EXIT_OK;
  }
  return -1;
}

/* Every word but the command's, before and after it: options checked
 * against the command's table and applied, positional arguments into
 * o->pos. -1, or the exit status of a line answered here (a usage error,
 * --help). */
static int pxctl_parse_options(pxctl_parse_t *p, const pxctl_arg_t *known, size_t nknown,
                               int argc, char **argv, int cmd_at) {
  pxctl_arg_t args[PXCTL_ARGS_MAX];
  size_t nargs = pxctl_cmd_args(p->cmd, args);
  char **words = calloc((size_t)argc, sizeof *words);
  if (!words) return pxctl_fail("out of memory");
  int n = 0;
  for (int i = 0; i < argc; i++)
    if (i != cmd_at) words[n++] = argv[i];
  pxctl_args_t a = {args, nargs, known, nknown, p->cmd->name, pxctl_on_option,
                    pxctl_on_positional, p};
  pxctl_args_error_t e;
  int rc = pxctl_args_parse(&a, n, words, &e);
  free(words);
  if (rc != PXCTL_ARGS_BAD) return rc;
  int own_coordinator = e.elsewhere && e.elsewhere->id == OPT_COORD && !strcmp(p->cmd->name, "run");
  return pxctl_usage_error(p->o, "%s%s", e.msg,
                           own_coordinator ? " (run starts its own private coordinator)" : "");
}

int main(int argc, char **argv) {
  signal(SIGPIPE, SIG_IGN);
  pxctl_opts_t o;
  memset(&o, 0, sizeof o);
  o.rank = -1;
  const char *env = getenv("PRUNEX_COORDINATOR");
  o.coordinator = env && env[0] ? env : PXCTL_DEFAULT_COORDINATOR;

  pxctl_arg_t known[PXCTL_ARGS_MAX];
  size_t nknown = pxctl_known_args(known);
  pxctl_parse_t p = {&o, NULL, 0};
  int cmd_at, rc = pxctl_find_command(&p, known, nknown, argc, argv, &cmd_at);
  if (rc >= 0) return rc;
  const pxctl_cmd_t *cmd = p.cmd;
  if ((rc = pxctl_parse_options(&p, known, nknown, argc, argv, cmd_at)) >= 0) return rc;
  if (o.npos < cmd->npos &&
      !(o.npos >= 1 && !strcmp(cmd->name, "plot")) && !(o.npos >= 2 && !strcmp(cmd->name, "update")))
    return pxctl_usage_error(&o, "missing %s", cmd->synopsis);
  if (strcmp(cmd->name, "run") != 0 && pxctl_load_token() != 0) return PXCTL_EXIT_FAIL;
  /* A finished run's directory (or --db) instead of a coordinator; plot
   * reads each of its JOBs on its own (pxctl_plot.c). */
  pxctl_offline_t *off = NULL;
  int is_plot = !strcmp(cmd->name, "plot");
  /* export reads a run offline for --tensorboard only (its MODEL argument
   * is a file path otherwise) */
  int offline = pxctl_args_find(cmd->args, cmd->nargs, OPT_DB) && !is_plot &&
                (strcmp(cmd->name, "export") || o.tensorboard);
  if (offline && (rc = pxctl_offline_begin(&o, &off)) >= 0) return rc;
  /* Commands taking JOB also take a job's name, where only one job has it. */
  rc = 0;
  int npos = !strcmp(cmd->name, "update") ? 1 : o.npos; /* update's others are FIELD=VALUE */
  if (!strncmp(cmd->synopsis, "JOB", 3) && !is_plot)
    for (int i = 0; i < npos && !rc; i++)
      if (!pxctl_is_sweep_id(o.pos[i])) rc = pxctl_resolve_job(&o, &o.pos[i]);
  if (!rc) rc = cmd->fn(&o);
  pxctl_offline_close(off);
  return rc;
}
