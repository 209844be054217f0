/* PruneX strategies as a job spec and a report know them, without the
 * engine: the table of strategies (names, descriptions, which run H-SADMM;
 * libpxcore/policy/strategy_info.c) and one iteration's record, which the
 * strategies fill and the report tables read. Running a strategy is
 * strategy.h's, which includes this header. */
#ifndef PRUNEX_STRATEGY_TABLE_H
#define PRUNEX_STRATEGY_TABLE_H

#include <stddef.h>
#include <stdint.h>

#include "prunex/admm.h"
#include "prunex/px.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Values match prunex.v1.Strategy. */
typedef enum {
  PX_STRATEGY_HSADMM = 1,
  PX_STRATEGY_HSADMM_FLAT = 2,
  PX_STRATEGY_DDP = 3,
  PX_STRATEGY_TOPK = 4,
} px_strategy_kind_t;

/* The table of strategies: what the job spec accepts, what pxctl's help,
 * the coordinator and the docs list. One entry per strategy, in kind order;
 * adding a strategy adds an entry to the table (policy/strategy_info.c, engine-free
 * data that pxctl reads too) and its operations (its file in strategy/, one
 * line in strategy.c's table). */
typedef struct {
  px_strategy_kind_t kind;
  const char *name;         /* as in the job spec: "hsadmm", "hsadmm-flat", "ddp", "topk" */
  const char *description;  /* one line, for help texts */
  int admm;                 /* 1: trains with H-SADMM rounds (admm.* and prune.* apply, and
                               an iteration needs local steps); 0: a baseline */
  int is_default;           /* 1: the job spec's default strategy */
} px_strategy_info_t;

/* Entries of the table, and entry i of it (NULL when out of range). */
PX_API int px_strategy_count(void);
PX_API const px_strategy_info_t *px_strategy_at(int i);
/* The entry of a kind, or NULL when k is no strategy. */
PX_API const px_strategy_info_t *px_strategy_info(px_strategy_kind_t k);
/* The kind named name, or 0 when there is none. */
PX_API px_strategy_kind_t px_strategy_lookup(const char *name);
/* The names joined by sep into buf (truncated to cap, always terminated);
 * returns buf. */
PX_API char *px_strategy_names(char *buf, size_t cap, const char *sep);

/* The entry's name, or "unknown" (static strings). */
PX_API const char *px_strategy_name(px_strategy_kind_t k);

typedef struct px_iteration px_iteration_t;

/* One iteration's record (docs/metrics.md); what rank 0 reports. */
struct px_iteration {
  int32_t iteration;
  double epoch;             /* epochs of data seen per rank so far */
  double loss, train_accuracy;
  double test_accuracy;     /* of the consensus model; negative when not evaluated */
  double test_loss;
  double density;           /* kept fraction of the prunable weights (1 without pruning) */
  int64_t mask_drift;
  int64_t mask_groups;      /* group-mask bits in all (0 without masks): drift is "of" these */
  uint64_t bytes_intra, bytes_inter, bytes_inter_dense; /* this iteration, all ranks */
  uint64_t rank_bytes_intra, rank_bytes_inter; /* this iteration, this rank's own (sent +
                                                  received) */
  int32_t nlayers;
  const px_admm_layer_report_t *layers; /* [nlayers] (hsadmm; NULL otherwise) */
  const double *layer_density;          /* [nlayers] kept fraction of each tensor of z (1 for
                                           tensors that are not pruned); hsadmm only */
  const char *const *layer_names;       /* [nlayers] */
  double local_s, intra_s, projection_s, inter_s, broadcast_s, control_s;
  int32_t frozen;
  int32_t last;             /* no iteration follows (the limit was reached) */
  /* Checkpoints: the newest iteration every rank's checkpoint
   * holds (-1: none, or no checkpoints), and "" or why the later ones are
   * unusable ("iteration M: rank R: ERROR"; valid during the callback). */
  int32_t checkpoint_complete;
  const char *checkpoint_problem;
  /* Elastic runs: the membership epoch and member nodes this iteration's
   * round ran over, and the node lost in it (its round was run again
   * without it; -1: none). An iteration run again is observed (and rank 0's
   * controller asked) again, with the figures of the second run. */
  int32_t member_epoch;
  int32_t member_nodes;
  int32_t lost_node;
};

#ifdef __cplusplus
}
#endif
#endif
