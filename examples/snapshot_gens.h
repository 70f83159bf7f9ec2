/*
 * The example trainer's snapshots, in generations.
 *
 * A generation is a weft snapshot object of the state layout over the world group's
 * members at one membership. It lives on its own subgroup, split off the world when it
 * is made: a restore is collective over the snapshot's group, and the world may already
 * hold members that the snapshot does not know (weft_group_repair admits the processes
 * waiting to join), while the subgroup never does. After every committed step a member
 * starts a snapshot of its shard and of a blob (the step counter and the data position)
 * in the current generation; at most one is in flight, and the next step waits for it.
 *
 * After a membership change the members restore from one generation, then make a new
 * one and take its first snapshot. Which generation: weft_elastic_choose_gen()
 * (weft/elastic.h) chooses it, the newest that some member holds committed and none
 * holds uncommitted. Its first snapshot is committed on every member at once, except
 * when the member that closes it dies then; so a member keeps the generations it
 * restored from, and those it made since, until a step commits in its current one
 * (every member had committed that one before the step could run). The initial state
 * (step 0, all zeros) is generation WEFT_GEN_START, which every first member holds
 * without a copy.
 */
#ifndef WEFT_EXAMPLE_SNAPSHOT_GENS_H
#define WEFT_EXAMPLE_SNAPSHOT_GENS_H

#include <stdint.h>

#include <weft/weft.h>

#include "sharded_state.h"

/* Generations a member may hold between two committed steps. */
#define GEN_MAX WEFT_ELASTIC_MAX_GENS

typedef struct gen {
    int32_t id;                  /* the world epoch when it was made, or WEFT_GEN_START */
    weft_group_t *sub;           /* its members, split off the world then */
    weft_snapshot_t *snap;       /* NULL for WEFT_GEN_START */
    int members[MAX_MEMBERS], n; /* at creation, in rank order */
} gen_t;

typedef struct gens {
    gen_t held[GEN_MAX]; /* oldest first */
    int n;
    int cur;         /* index of the generation snapshots are taken in; -1: none */
    weft_req_t *req; /* the snapshot in flight, of step req_step */
    int32_t req_step;
    void *req_buf;  /* the shard it reads */
    int redundancy; /* buddies holding a copy of each shard */
} gens_t;

/* Choose, with every member of @p world, the generation to restore from: the
 * generations this member holds, to weft_elastic_choose_gen(). Collective over @p world. */
weft_status_t gens_choose(const gens_t *g, weft_group_t *world, weft_gen_choice_t *choice);

/* No generation yet; a member of the job from its start (@p first) holds WEFT_GEN_START.
 * Local. */
void gens_init(gens_t *g, int redundancy, int first);

/* Free the generations older than @p id; the newer ones stay (a member that holds one
 * uncommitted must go on saying so). Local. */
void gens_drop_older(gens_t *g, int32_t id);

/* A step committed in the current generation: every member has committed its first
 * snapshot, so no other generation is needed any more. Local. */
void gens_step_committed(gens_t *g);

/* Free everything, a snapshot in flight included (see gens_cancel). Local. */
void gens_free(gens_t *g, state_t *owner, retired_t *r);

/* Start the snapshot of @p s in the current generation (collective over its subgroup).
 * @p s->shard must stay unchanged until gens_wait(). */
weft_status_t gens_take(gens_t *g, const state_t *s);

/* Wait for the snapshot in flight, if any. On failure the shard it read, which
 * @p owner holds, goes to @p r (a failed migration may still read it) and
 * @p owner->shard becomes NULL. */
weft_status_t gens_wait(gens_t *g, state_t *owner, retired_t *r);

/* Give up the snapshot in flight, if any, as gens_wait does on failure (unless it
 * completed meanwhile). Local. */
void gens_cancel(gens_t *g, state_t *owner, retired_t *r);

/* When this member leaves an operation on a failure: make every member blocked on the
 * subgroup of one of its generations fail too (catch up with the subgroup's edits, then
 * revoke it), since they may be waiting for this member there. */
void gens_revoke(gens_t *g);

/* What a restore gave this member. */
typedef struct restored {
    int32_t step;
    int src[MAX_MEMBERS], n_src; /* the survivors; buf is laid out over them */
    void *buf;    /* this member's packed buffer of that layout, then blobs (weft_mem_alloc) */
    size_t bytes; /* of buf: weft_mem_free(buf, bytes) */
    size_t moved, local; /* bytes, all members together */
    size_t missing;      /* bytes of the state that no surviving copy held */
} restored_t;

/*
 * Restore from generation @p id, which this member holds committed, through
 * weft_elastic_restore_gen (weft/elastic.h): it revokes and repairs the generation's
 * subgroup (every member of it then starts from a fresh epoch), checks that @p world was
 * not edited meanwhile (WEFT_ERR_REVOKED: start the recovery over), and restores to the
 * state layout over the survivors (state_layout, the part this trainer gives it); then
 * the blobs are checked. Parts whose every copy died are counted in out->missing, and the
 * subgroup's rank 0 says which. Collective over the subgroup. out->buf (weft_mem_alloc,
 * out->bytes) is the caller's to free with weft_mem_free (or to retire_mem, if a
 * migration from it fails); on failure it is NULL, and the library keeps the buffer a
 * failed restore may still write into.
 */
weft_status_t gens_restore(gens_t *g, int32_t id, weft_group_t *world, restored_t *out);

/*
 * Make a new generation over the members of @p world (split, create) and take its
 * first snapshot, of @p s, waiting for it; while waiting, check every few milliseconds
 * that @p world was not revoked (WEFT_ERR_REVOKED then: a member that left this recovery
 * will never take part in the snapshot). On success it is the current generation; on
 * failure it is kept, uncommitted, for the next recovery's reports, and s->shard goes to
 * @p r as in gens_wait. Collective over @p world.
 */
weft_status_t gens_make(gens_t *g, weft_group_t *world, state_t *s, retired_t *r);

#endif
