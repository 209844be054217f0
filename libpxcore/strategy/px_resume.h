/* Checkpoints a resumed job starts from, inside libpxcore.
 *
 * A strategy lists the buffers of its state once, each with the set of
 * ranks that share it: GLOBAL (the same bits on every rank: H-SADMM's z and
 * masks, the penalties, DDP's model, the data position), NODE (the same on
 * every rank of a node: z_i, v_i) or RANK (a rank's own: theta, u,
 * momentum, Top-K's residuals). px__resume_save writes every rank's file
 * <dir>/ckpt-<iteration>-r<rank>.safetensors atomically (temporary file,
 * fsync, rename) with a checksum of its contents; once every rank has
 * written (one allreduce), each deletes its files beyond the newest `keep`,
 * so that the newest checkpoint every rank holds always survives. When some
 * rank could not write (a full disk), every rank learns which and why (one
 * allgather) and still keeps at most `keep` files plus the newest complete
 * checkpoint: a rank that cannot write never makes the others' disks fill.
 *
 * px__resume_load, on a new attempt: every rank lists the checkpoints it can
 * read whole (a truncated or corrupt file is named and skipped), the lists
 * go round in one allreduce, and all ranks pick the same iteration: the
 * newest one held by every rank that holds any. A rank without it (a new
 * node took a lost node's place, or its files are gone) gets the GLOBAL
 * state by broadcast from the lowest rank that has it and the NODE state
 * from a node mate that has it; with no such mate its node state, and its
 * RANK state, are "fresh" and the strategy restarts them from the global
 * state (H-SADMM: z_i = z, v_i = u = 0, theta = z, no momentum).
 *
 * Everything is allocated at set-up or at the first save (the snapshot the
 * writer thread reads); later saves allocate only the file header inside
 * px_safetensors_save and the thread, once per checkpoint. */
#ifndef PX_RESUME_H
#define PX_RESUME_H

#include "prunex/comm.h"
#include "prunex/safetensors.h"
#include "prunex/tensor.h"

typedef enum { PX_RS_GLOBAL = 0, PX_RS_NODE = 1, PX_RS_RANK = 2 } px_rs_scope_t;

typedef struct px_resume px__resume_t;

/* keep: files kept per rank (>= 1). dir is created when missing. */
px_status_t px__resume_create(px_comm_t *comm, const char *dir, int keep, px__resume_t **out);
void px__resume_destroy(px__resume_t *rs);
/* Elastic runs: the checkpoints go on over comm (rebuilt over fewer or
 * more nodes: px_comm_rebuild), as its rank of its world, from the next
 * save on. Fails with PX_ERR_NOMEM (a larger world's lists; rs as it was). */
px_status_t px__resume_rebind(px__resume_t *rs, px_comm_t *comm);

/* A host buffer of `bytes` bytes (dtype names its elements in the file). */
px_status_t px__resume_add(px__resume_t *rs, const char *name, px_rs_scope_t scope,
                           px_st_dtype_t dtype, void *data, size_t bytes);
/* A tensor on any device, staged through a host copy made here. */
px_status_t px__resume_add_tensor(px__resume_t *rs, const char *name, px_rs_scope_t scope,
                                  px_tensor_t *t);

/* Collective. Snapshots this rank's state after `iteration` (the last one
 * finished) and writes it in a background thread; first it waits for the
 * previous write and settles it (all ranks agree it landed, then older
 * files beyond keep go). *bytes and *seconds: the checkpoint's size and
 * how long the call held training up. A rank that cannot write logs why;
 * the job goes on (see px__resume_complete). */
px_status_t px__resume_save(px__resume_t *rs, int iteration, uint64_t *bytes, double *seconds);
/* Collective: waits for and settles the last write (at the end of a run). */
px_status_t px__resume_finish(px__resume_t *rs, double *seconds);
/* The newest iteration whose checkpoint every rank holds (-1: none yet);
 * problem (cap bytes): "" when the last save landed everywhere, else why
 * the later ones are not usable ("iteration N: rank R: ERROR"). */
int px__resume_complete(const px__resume_t *rs, char *problem, size_t cap);

/* Collective. *iteration: the iteration resumed from, -1 when there is
 * none (start afresh; nothing was read). *node_fresh / *rank_fresh: this
 * rank's NODE / RANK buffers were not restored. */
px_status_t px__resume_load(px__resume_t *rs, int *iteration, int *node_fresh, int *rank_fresh);

#endif
