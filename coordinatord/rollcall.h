/* The survivors' roll call of an elastic job (rollcall.c): a member node
 * whose ranks do not answer while the others ask for the next epoch is
 * lost at that boundary. */
#ifndef PX_COORD_ROLLCALL_H
#define PX_COORD_ROLLCALL_H

#include "coord.h"
#include "effects.h"

/* A report repeated by a survivor of a lost peer (rep->roll_call) answers
 * the call of its boundary; a quarter of comm.timeout_ms after the first
 * answer, the member nodes whose ranks did not all answer are lost
 * (coord_membership_lose; effects in fx), when some node did. Reports of
 * other jobs or without roll_call: nothing. In the caller's transaction. */
px_status_t coord_rollcall_note(coord_t *c, coord_arena_t *a,
                                const Prunex__V1__IterationReport *rep,
                                const Prunex__V1__JobSpec *spec, int state, coord_effects_t *fx);
/* Frees the open calls (at shutdown). */
void coord_rollcalls_forget(coord_t *c);

#endif
