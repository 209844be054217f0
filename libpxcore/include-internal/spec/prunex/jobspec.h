/* Job specs: the YAML a user writes (the .yaml files in examples/), parsed into the
 * prunex.v1.JobSpec message that travels to the coordinator and the workers,
 * checked so that a bad spec is refused before it is submitted, and written
 * back as canonical YAML for records and `pxctl status --json`.
 *
 * ---- the schema -------------------------------------------------------------
 * A spec is one YAML mapping. Keys are the proto field names
 * (proto/prunex.proto, JobSpec and its sub-messages). Every key is optional
 * and every field has the default shown; a key whose value is empty, `~` or
 * `null` takes its default, and so does a section left empty (`prune:`).
 * Unknown keys, duplicate keys and values of the wrong type are errors.
 *
 *   name: STRING            file name without .yaml ("job" without a file);
 *                           1..128 bytes, no '/' or control characters
 *   strategy: hsadmm        hsadmm | hsadmm-flat | ddp | topk
 *   output_dir: ""          "": the program running the job chooses
 *   priority: 100           1..1000, the job's own priority factor; a user
 *                           may lower it, only an admin may raise it
 *   time_limit_s: 0         >= 0 wall-clock seconds the job may run (0: the
 *                           coordinator's default limit, or none)
 *   model:
 *     name: resnet20        px_model_arch_list(): resnet20 resnet32 resnet56
 *                           resnet18 resnet34 resnet50 resnet101 resnet152 wrn50_2
 *     in_channels: 0        0: from the data set, else must match it
 *     num_classes: 0        0: from the data set, else must match it (>= 2)
 *     onnx: ""              an imported model's ONNX file (name is then "onnx"); a
 *                           relative path is made absolute against the spec file's
 *                           directory; a parsed file is read and checked at once
 *     onnx_sha256: ""       the file's SHA-256 (64 hex digits): computed where the
 *                           file is parsed, checked when given; a worker whose file
 *                           differs fails the job (required with onnx on the wire)
 *   dataset:
 *     name: fashion-mnist   fashion-mnist | cifar10 | synthetic
 *     path: ""              "": the data set's default directory
 *                           (fashion-mnist: /usr/share/datasets/fashion-mnist;
 *                           cifar10 has none and needs a path)
 *     augment: true         random crop + horizontal flip of training images
 *     crop_padding: 4       0..32 pixels
 *     flip: true
 *   cluster:
 *     nodes: 1              M >= 1
 *     workers_per_node: 1   P in 1..4096 (M * P <= 2^20)
 *     device: auto          auto | cpu | cuda
 *     threads_per_worker: 0 0: cores / P
 *   train:
 *     epochs: 1             >= 1: passes over the training set (the budget)
 *     batch_size: 128       >= 1, per worker
 *     lr: 0.1               > 0, peak learning rate
 *     momentum: 0.9         [0, 1)
 *     nesterov: false       needs momentum > 0
 *     weight_decay: 5e-4    >= 0
 *     local_epochs: 1       >= 0: H-SADMM local epochs per outer iteration
 *     local_steps: 0        >= 0: local SGD steps per outer iteration; when
 *                           > 0 it wins over local_epochs. hsadmm and
 *                           hsadmm-flat need one of the two > 0, and
 *                           local_epochs <= epochs when it is the one used
 *     seed: 1               any unsigned 64-bit integer
 *     lr_schedule: cosine   constant | cosine | step
 *     precision: fp32       fp32 | bf16: bf16 activations and convolutions
 *                           with f32 weights, optimiser state, BN statistics
 *                           and loss (on the CPU: bf16 convolutions on
 *                           AVX512-BF16/AMX, f32 activations between them;
 *                           a worker whose CPU lacks bf16 fails naming it)
 *   prune:                  fractions of groups kept, in [0, 1]; 1: off
 *     filter_keep: 1.0
 *     channel_keep: 1.0
 *     shape_keep: 1.0
 *     skip_layers: []       parameter names never pruned, e.g. [conv1.weight]
 *     nm_n: 0, nm_m: 0      N:M along input channels (e.g. 2, 4): of every nm_m
 *                           consecutive input channels of a filter at one kernel
 *                           position at most nm_n stay; 1 <= nm_n <= nm_m <= 64,
 *                           both 0: off
 *     uncoupled_channel_keep: 0  [0, 1], the input channels of convs not
 *                           coupled with a producer (readers of the image, a
 *                           residual stream, a concatenation); 0: channel_keep
 *     ramp_iterations: 0    >= 0, hsadmm: the fractions fall from 1 to theirs
 *                           over these outer iterations (cubic); the masks
 *                           freeze no earlier; 0: the target from the start
 *   admm:
 *     rho1: 1e-3            > 0, initial intra-node penalty
 *     rho2: 1e-3            > 0, initial inter-node penalty
 *     max_iterations: (derived)  >= 1. Absent: the outer iterations that
 *                           spend train.epochs of data:
 *                           ceil(epochs / local_epochs) when local_steps is 0,
 *                           else ceil(epochs * S / local_steps) with S the
 *                           steps per epoch of one worker,
 *                           floor(floor(n / (M * P)) / batch_size) (at least
 *                           1), n = 60000 (fashion-mnist), 50000 (cifar10),
 *                           10 * batch_size (synthetic)
 *     adaptive_rho: true    residual balancing (Boyd 3.4.1)
 *     mu: 10                > 1
 *     tau: 2                > 1
 *     rho_max: 1e4          > 0 and >= rho1, rho2
 *     freeze_on_stable: 3   >= 0 (0: never)
 *     freeze_iteration: 0   >= 0 (0: never)
 *     eps_abs: 1e-4         >= 0
 *     eps_rel: 1e-3         >= 0
 *     stop_on_converged: false  true: residuals within eps_abs/eps_rel end the job;
 *                           false: they freeze the masks, the whole budget runs
 *     rho1_ramp: 1          1..10: rho1's factor per iteration until the masks
 *                           freeze, taken back out at the freeze (1: none)
 *     final_prox: keep      keep | decay | release: the local steps' proximal pull
 *                           once the masks are frozen
 *     weight_decay_in: local  local | consensus: train.weight_decay in each local
 *                           step (as DDP) or in the z update
 *   comm:
 *     bucket_bytes: 32MiB   a positive multiple of 4, at most 1 GiB; an
 *                           integer or a size with a unit: B, KB, MB, GB
 *                           (powers of 1000), KiB, MiB, GiB (powers of 1024),
 *                           e.g. 33554432, 32MiB, 4KB, 0.5 MiB
 *     timeout_ms: 60000     >= 1, collective timeout
 *     backend: auto         auto | ucx | nccl (nccl needs device auto or cuda)
 *     topk_ratio: 0.01      (0, 1], topk: fraction of gradient entries sent
 *     quantize: none        none | 8 | 4, hsadmm only: the node leaders'
 *                           packed exchange as block-scaled integers
 *                           (quantize.h, px_hsadmm_set_quantize)
 *     overlap: false        hsadmm with quantize none: the leaders' exchange
 *                           of a round runs during the next local phase,
 *                           which starts from the z of the round before
 *                           plus the node's last step
 *                           (px_hsadmm_set_overlap; changes the math)
 *     compress: none        none | lossless, hsadmm with quantize none and
 *                           overlap false: each leader's packed payload
 *                           coded against its last round's, the same bits
 *                           arriving (lossless.h, px_hsadmm_set_compress)
 *   recovery:
 *     checkpoint_every: 0   >= 0: every rank writes its whole state every N
 *                           iterations and at the end (0: never)
 *     max_restarts: 0       0..1000: after a failed rank or a lost node the
 *                           job is placed again and resumes from the newest
 *                           checkpoint every rank can read
 *     keep: 2               1..16: checkpoints kept per rank
 *   notify:
 *     url: ""               http:// or https://: the coordinator POSTs the job
 *                           as JSON there when it enters one of `states`
 *     states: end           comma-separated states (pending, scheduled, running,
 *                           succeeded, failed, cancelled, timeout) or end
 *   elastic:
 *     min_nodes: 0          0 (with max_nodes 0: not elastic) or 1..cluster.nodes,
 *                           strategy hsadmm: a lost node is dropped at the next
 *                           round boundary while min_nodes remain
 *     max_nodes: 0          0 (cluster.nodes) or >= cluster.nodes
 *
 * Booleans are true/false/yes/no/on/off (any case). Integers are decimal.
 *
 * ---- errors -----------------------------------------------------------------
 * Every error sets px_last_error() to "FILE:LINE:COLUMN: FIELD: what is
 * wrong", e.g.
 *   examples/bad.yaml:7:3: train.batch_size: expected a positive integer, got 'abc'
 *   examples/bad.yaml:12:1: unknown key 'trian' at top level (did you mean 'train'?)
 * at the offending key: the list item for list entries, libyaml's report
 * for syntax errors, and for a rule across fields the first of its fields
 * written in the file (else its section). A missing or unreadable file
 * gives PX_ERR_IO naming the path; everything else PX_ERR_INVALID.
 *
 * ---- memory -----------------------------------------------------------------
 * Specs returned here are built with malloc, protobuf-c's default allocator,
 * exactly like a JobSpec from prunex__v1__job_spec__unpack(NULL, ...), so
 * px_jobspec_free and protobuf_c_message_free_unpacked(&spec->base, NULL)
 * free either kind (they are not counted by px_mem_stats; the YAML text
 * px_jobspec_to_yaml returns is, and goes back with px_free). The functions are thread-safe (no shared state besides
 * the calling thread's last error). */
#ifndef PRUNEX_JOBSPEC_H
#define PRUNEX_JOBSPEC_H

#include <stddef.h>
#include <stdint.h>

#include "prunex.pb-c.h"
#include "prunex/admm.h"
#include "prunex/arch.h"
#include "prunex/image.h"
#include "prunex/px.h"
#include "prunex/strategy_table.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Reads, parses and validates the spec in the file at path. On success the
 * caller owns *out (px_jobspec_free); on failure *out is NULL and nothing is
 * allocated. Fails with PX_ERR_IO (cannot open or read path, named in the
 * message), PX_ERR_INVALID (syntax, schema or semantic error, the message
 * names file, line, column and field; also a file over 1 MiB or a NULL
 * argument), PX_ERR_NOMEM. */
px_status_t px_jobspec_parse_file(const char *path, Prunex__V1__JobSpec **out);

/* The same for len bytes at text (need not be NUL-terminated);
 * name_for_errors is the file name the messages carry and the source of the
 * default job name (NULL: "<string>" in messages, "job" as the name). */
px_status_t px_jobspec_parse_string(const char *text, size_t len,
                                           const char *name_for_errors, Prunex__V1__JobSpec **out);

/* The fields a parse saw written (a value other than empty, `~` or `null`),
 * one bit per field of the schema: a default the parser filled in, or
 * derived (admm.max_iterations), is not given. Ask with px_jobspec_given. */
typedef struct {
  uint64_t bits[2];
} px_jobspec_given_t;

/* px_jobspec_parse_file that also hands back what a client submits with
 * the spec, read once: the file's bytes in *text (NUL-terminated, the
 * caller's: px_free; NULL: not wanted) and the fields it wrote in *given
 * (NULL: not wanted). On failure *text is NULL and *given empty. */
px_status_t px_jobspec_parse_file_ex(const char *path, Prunex__V1__JobSpec **out,
                                            char **text, px_jobspec_given_t *given);

/* px_jobspec_parse_string with the fields written in *given (may be NULL). */
px_status_t px_jobspec_parse_string_ex(const char *text, size_t len,
                                              const char *name_for_errors,
                                              Prunex__V1__JobSpec **out,
                                              px_jobspec_given_t *given);

/* 1 when the parse that filled given saw the field at path ("name",
 * "admm.max_iterations": section.key as in the schema above) written, 0
 * when not, -1 when path names no field of the schema (or an argument is
 * NULL). Cannot fail otherwise; sets no error. */
int px_jobspec_given(const px_jobspec_given_t *given, const char *path);

/* Frees a spec from this module or from protobuf-c's unpack with the
 * default allocator (sections, strings, lists included). NULL is a no-op. */
void px_jobspec_free(Prunex__V1__JobSpec *spec);

/* Semantic checks of a complete spec, the ones parsing applies: every
 * section present, every field in range, names known, and the cross-field
 * rules of the schema above. For specs that arrive over the wire; the
 * message reads "job spec: FIELD: ...". Returns PX_OK or PX_ERR_INVALID; the
 * spec is not changed. A spec from a client that leaves fields at their
 * proto zero fails here: call px_jobspec_fill_defaults first. */
px_status_t px_jobspec_validate(const Prunex__V1__JobSpec *spec);

/* notify.states as a bit mask of prunex.v1.JobState values (bit s for state s;
 * "" or "end": SUCCEEDED, FAILED, CANCELLED, TIMEOUT). 0, or the 1-based
 * position of the first unknown word (-1 when on is over 256 bytes). */
int px_jobspec_notify_states(const char *states, unsigned *mask);
/* 1 when url is "" or an http:// or https:// URL of at most 1024 bytes
 * without blanks or control characters. */
int px_jobspec_notify_url_ok(const char *url);

/* The checks of a valid spec that need the data on this machine, run by
 * pxctl before it submits (the coordinator may not see the data): an image
 * folder's layout (px_folder_check: both splits, no empty class) and
 * model.num_classes against its classes. Other data sets pass. Fails with
 * the folder check's error (the message names the directory), or
 * PX_ERR_INVALID ("spec.model.num_classes: ..."). */
px_status_t px_jobspec_check_data(const Prunex__V1__JobSpec *spec);

/* Completes a spec that may have come from a client that did not use this
 * parser: adds every missing section with all its defaults, and within the
 * sections present replaces each proto-zero value that is not a legal
 * setting (nodes 0, lr 0, device "", strategy unspecified, max_iterations 0,
 * ...) by its default. Zeros that are legal settings stay as they are,
 * including booleans (augment, flip, adaptive_rho false) and keeps (a keep of
 * 0 prunes every group), which proto3 cannot tell from "unset". The spec
 * must own its memory the way protobuf-c's unpack builds it (malloc'd
 * strings and sections, as from prunex__v1__job_spec__unpack(NULL, ...)):
 * replaced strings are freed, added ones malloc'd. Fails with PX_ERR_NOMEM
 * (the spec is then partly filled but still valid to free) or
 * PX_ERR_INVALID (NULL). */
px_status_t px_jobspec_fill_defaults(Prunex__V1__JobSpec *spec);

/* When spec's admm.max_iterations is the one its data set and shape derive
 * (left out of the spec, or given equal), writes how it was derived into
 * buf, e.g. "23 iterations, derived: 2 epochs of 5880 training images over
 * 2 nodes x 1 worker, batch 128, 4 local steps per iteration", and returns
 * 1; else writes "" and returns 0. For pxctl submit and status. */
int px_jobspec_budget_text(const Prunex__V1__JobSpec *spec, char *buf, size_t cap);

/* Writes spec as canonical YAML: every key of the schema in a fixed order,
 * strings double-quoted, numbers in their shortest exact form, sizes in
 * bytes, no comments. Parsing the text gives back an equal spec for any
 * spec that px_jobspec_validate accepts; sections absent from spec are
 * written with the proto zero values. The caller owns *out (px_free).
 * Fails with PX_ERR_INVALID (NULL argument) or PX_ERR_NOMEM. */
px_status_t px_jobspec_to_yaml(const Prunex__V1__JobSpec *spec, char **out);

/* ---- sweeps ---------------------------------------------------------------------
 * A spec may carry `sweep:`, a mapping of field paths to lists of values:
 *   sweep:
 *     prune.channel_keep: [0.3, 0.5, 0.7]
 *     train.lr: [0.05, 0.1]
 * Only numeric and enum fields (numbers, sizes, booleans, choices, the
 * strategy, the model) may be swept; every value must be legal for its
 * field. The sweep stands for one job per combination of the values (the
 * product of the lists' lengths, at most PX_JOBSPEC_SWEEP_MAX); the
 * coordinator submits them together (all or none). */
#define PX_JOBSPEC_SWEEP_MAX 1000      /* combinations of one sweep */
#define PX_JOBSPEC_SWEEP_AXES 16       /* fields of one sweep */
#define PX_JOBSPEC_SWEEP_VALUE_MAX 64  /* bytes of one value's text */

/* Checks spec->sweep on its own (fields, values, the number of
 * combinations) and sets *count to the number of combinations (1 without a
 * sweep). PX_ERR_INVALID with "spec.sweep.FIELD...: ..." messages (the
 * parser reports the same rules with file positions). */
px_status_t px_jobspec_sweep_count(const Prunex__V1__JobSpec *spec, size_t *count);

/* Combination k (0 <= k < count; the last field varies fastest) of a spec
 * with a sweep: a copy of spec with its defaults filled in
 * (px_jobspec_fill_defaults), no sweep, and each swept field set to its
 * value; the copy is then checked as a submission
 * (px_jobspec_check_submitted), so a combination no rank could run fails
 * with PX_ERR_INVALID naming it. label (may be NULL) receives
 * "prune.channel_keep=0.3, train.lr=0.05". Derived fields are not derived
 * again (a sweep of train.epochs keeps admm.max_iterations; sweep that
 * too). The caller owns *out (px_jobspec_free). PX_ERR_INVALID,
 * PX_ERR_NOMEM. */
px_status_t px_jobspec_sweep_point(const Prunex__V1__JobSpec *spec, size_t k,
                                          Prunex__V1__JobSpec **out, char *label, size_t cap);

/* ---- the spec translated once ------------------------------------------------
 * What the coordinator and the worker know of a spec comes from here (and
 * from jobspec_translate.h, the configurations they run): they keep no
 * rules of their own. */

/* Checks a spec as a client submitted it (SubmitJob), before any default is
 * filled in, so that a spec no rank could run is refused at submission:
 * every string valid UTF-8 text without control characters; the fields a
 * job cannot do without set (strategy, model.name, dataset.name,
 * cluster.nodes, cluster.workers_per_node: their proto zero is refused, not
 * defaulted); every other field either its proto zero (which takes the
 * default, see px_jobspec_fill_defaults) or a legal value; then, on a copy
 * with the defaults filled in, every rule of px_jobspec_validate and the
 * control policy's (px_admm_policy_validate). The message names the field
 * from the spec down: "spec.cluster.nodes: required, expected a positive
 * integer", "spec.admm.mu: expected a number > 1, got 0.5". Returns PX_OK,
 * PX_ERR_INVALID (also for a NULL spec: "spec: required") or PX_ERR_NOMEM;
 * spec is not changed. */
px_status_t px_jobspec_check_submitted(const Prunex__V1__JobSpec *spec);

/* The coordinator's H-SADMM control policy (admm.h) from a spec as
 * submitted or completed: proto zeros of mu, tau, rho_max, max_iterations,
 * eps_abs and eps_rel take the policy's defaults; freeze_on_stable and
 * freeze_iteration 0 mean never. A NULL spec or admm section gives the
 * defaults. Cannot fail (px_admm_policy_validate judges the result). */
void px_jobspec_admm_policy(const Prunex__V1__JobSpec *spec, px_admm_policy_t *out);

/* "hsadmm", "hsadmm-flat", "ddp", "topk", or "unspecified" for any other
 * value; a static string. */
const char *px_jobspec_strategy_name(Prunex__V1__Strategy s);

#ifdef __cplusplus
}
#endif
#endif
