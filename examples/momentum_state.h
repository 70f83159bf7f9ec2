/*
 * The example trainer's state, and its ZeRO-1 momentum: where the momentum lives (a weft
 * layout over the members) and how it moves when the members change (a plan, run by
 * weft_migrate).
 *
 * The momentum m of the DIM parameters is cut into equal flat partitions over the
 * members in group rank order (weft_layout_flat), and member i also keeps a copy of
 * partition i+1 (mod n), its ring neighbour's, so that no single death loses a
 * partition. A member keeps what it holds back to back in one buffer, its packed buffer:
 * its own partition, then the neighbour's.
 */
#ifndef WEFT_EXAMPLE_MOMENTUM_STATE_H
#define WEFT_EXAMPLE_MOMENTUM_STATE_H

#include <stdint.h>

#include <weft/weft.h>

#include "toy_problem.h"

#define MAX_MEMBERS BATCH /* each member needs a sample */

/* What a member holds at the start of a step. */
typedef struct state {
    int32_t version; /* commits (steps and migrations) that made it */
    int32_t step;
    int nmembers;             /* 0: nothing (a joiner) */
    int members[MAX_MEMBERS]; /* the momentum is laid out over these ids, in rank order */
    int nparts;               /* partitions held: its own, then its neighbour's */
    uint64_t lo[2], len[2];   /* as ranges of w; m holds them back to back */
    float *w;                 /* DIM parameters, and room for the allgather's padding */
    float *m;                 /* its packed buffer of the momentum layout */
} state_t;

/* Free the buffers of @p s and clear it (it then holds nothing). */
void state_free(state_t *s);

/* The state of a member of the job from its start: w = m = 0, the momentum laid out over
 * the members of @p g. */
weft_status_t state_start(weft_group_t *g, state_t *s);

/* One step's update, elementwise: m = BETA m + grad on both partitions @p cur holds (so
 * the neighbour's copy stays equal to the original), and w -= LR m on its own partition.
 * @p next gets new buffers; w outside its own partition is copied from @p cur. */
weft_status_t state_update(const state_t *cur, const float *grad, state_t *next);

/*
 * Migrate the momentum of @p cur, laid out over @p prev (the previous membership), to the
 * members of @p g now, into @p next (w is copied). A joiner's @p cur holds nothing.
 * Collective over @p g; every member computes the same plan from @p prev and the group.
 * @return WEFT_OK; the errors of weft_migrate (WEFT_ERR_PEER_FAILED, WEFT_ERR_REVOKED...);
 *         WEFT_ERR_UNSUPPORTED with *lost = 1 when a partition has no live holder (rank 0
 *         prints which).
 */
weft_status_t state_migrate(weft_group_t *g, const state_t *cur, const int *prev, int nprev,
                            state_t *next, int *lost);

#endif
