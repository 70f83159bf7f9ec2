/*
 * The example trainer's state, sharded ZeRO-1 style, and how it moves between
 * memberships.
 *
 * The state layout (a weft layout) has two tensors of DIM floats, "w" (the parameters)
 * and "momentum", each cut into flat partitions over the members in group rank order
 * (weft_layout_flat: partition r starts at r * ceil(DIM / n)). A member updates its
 * partition of both, then an allgather of the w partitions gives every member the whole
 * w. Its packed buffer of the layout, its shard, is its w partition then its momentum
 * partition: the bytes a snapshot must keep for the state to be restored exactly.
 */
#ifndef WEFT_EXAMPLE_SHARDED_STATE_H
#define WEFT_EXAMPLE_SHARDED_STATE_H

#include <stddef.h>
#include <stdint.h>

#include <weft/weft.h>

#include "toy_problem.h"

#define MAX_MEMBERS BLOCKS /* each member needs a block of the batch (weft_batch_share) */

/* What a member holds at the start of a step. */
typedef struct state {
    int32_t step;             /* steps done */
    int n;                    /* members the state is laid out over; 0: holds nothing */
    int members[MAX_MEMBERS]; /* their ids, in group rank order */
    int rank;                 /* this member's place among them */
    uint64_t lo, len;         /* its partition, the same range of w and of the momentum */
    float *w;                 /* all DIM parameters, and room for the allgather's padding */
    float *shard;             /* its packed buffer: w[lo, lo + len), then momentum[lo, ...) */
} state_t;

/* A buffer that a failed operation may still read. */
typedef struct retired_buf {
    void *p;
    size_t mem_bytes; /* from weft_mem_alloc, of that many bytes, when mem is set */
    int mem;
} retired_buf_t;

/* Buffers that a failed operation may still read: freed at the very end. */
typedef struct retired {
    retired_buf_t *bufs;
    int n, cap;
} retired_t;

/* Keep @p p, from malloc, until retired_free. */
void retire(retired_t *r, void *p);
/* Keep @p p, from weft_mem_alloc (@p bytes), until retired_free. */
void retire_mem(retired_t *r, void *p, size_t bytes);
void retired_free(retired_t *r);

/* The state layout over @p members (ids in group rank order). */
weft_status_t state_layout(const int *members, int n, weft_layout_t **out);

/* The state of step @p step laid out over @p members, this member being @p me: its
 * partition, and buffers (zeros). */
weft_status_t state_alloc(state_t *s, const int *members, int n, int me, int32_t step);

/* Free the buffers of @p s and clear it (it then holds nothing). */
void state_free(state_t *s);

/* The member ids of @p g in rank order (at most MAX_MEMBERS; the size is returned). */
int group_members(weft_group_t *g, int *ids);

/*
 * One step's update of this member's partition: @p next gets new buffers, the shard of
 * @p cur updated with @p grad, the gradient of the partition (toy_update), and a copy
 * of its w. The new w comes with state_gather_w().
 */
weft_status_t state_step(const state_t *cur, const float *grad, state_t *next);

/* The whole w on every member of @p g (laid out over them): an allgather of the
 * partitions. Collective over @p g. */
weft_status_t state_gather_w(weft_group_t *g, state_t *s);

/*
 * The state of step @p step, laid out over @p src (@p n_src member ids), moved to the
 * members of @p g now (every one of @p src must be among them): one migration of the
 * shards (this member's packed buffer of the layout over @p src is @p src_buf, NULL if
 * it holds none), then state_gather_w. Collective over @p g; every member builds the
 * same plan from @p src and the group. Rank 0 prints what moved when the members
 * changed. On failure the buffers go to @p r (a failed migration may still read them).
 */
weft_status_t state_move(weft_group_t *g, const int *src, int n_src, const void *src_buf,
                         int32_t step, state_t *next, retired_t *r);

#endif
