/**
 * @file elastic.h
 * @brief What every elastic trainer needs after a membership change: which generation of
 *        snapshots to restore from, and each member's share of the global batch.
 *
 * A trainer that survives failures takes snapshots (weft/snapshot.h) of its state. A
 * snapshot object belongs to one group at one membership, so after each membership
 * change the members restore from one object, then make a new one over the members now
 * and take its first snapshot: each such object is a *generation*, named by an id the
 * application picks, equal on every member holding it and rising from one generation to
 * the next (the world group's epoch when it was made, for instance). A generation is
 * *committed* on a member once a snapshot of it committed there
 * (weft_snapshot_committed()); the initial state (id WEFT_GEN_START, no snapshot object)
 * counts as committed on every member that starts with it.
 *
 * The first snapshot of a generation commits on every member at once, except when the
 * member that closes it dies then: some members may hold the generation committed and
 * others uncommitted. Restoring from it would give the members different steps, so the
 * generation to restore from is the newest that some member holds committed and *no*
 * member holds uncommitted; a member therefore keeps the generations it restored from and
 * those it made since until a step commits in its newest one.
 * weft_elastic_choose_gen() makes that choice, collectively, the same on every member;
 * the members holding it then restore from its object with weft_elastic_restore_gen()
 * (which repairs its group, checks that the world did not change meanwhile, builds the
 * caller's target layout over the survivors, allocates the buffer and calls
 * weft_snapshot_restore()), and those admitted since receive their state from them (or
 * take part with weft_snapshot_restore_join()). examples/snapshot_gens.c is such a
 * trainer.
 *
 * Thread safety: as for the context (one thread at a time per context);
 * weft_batch_share() takes no context and is thread-safe.
 */
#ifndef WEFT_ELASTIC_H
#define WEFT_ELASTIC_H

#include <stddef.h>
#include <stdint.h>

#include "weft/core.h"
#include "weft/export.h"
#include "weft/snapshot.h"
#include "weft/status.h"

#ifdef __cplusplus
extern "C" {
#endif

/** @brief No generation (weft_gen_choice_t.id when no member holds one it may restore). */
#define WEFT_GEN_NONE INT32_MIN
/** @brief The initial state: a generation without a snapshot object, committed. */
#define WEFT_GEN_START (-1)
/** @brief Most generations one member may pass to weft_elastic_choose_gen(). */
#define WEFT_ELASTIC_MAX_GENS 16

/** @brief A generation a member holds (weft_elastic_choose_gen()). */
typedef struct weft_snapshot_gen {
    /** Its id: WEFT_GEN_START, or a value >= 0 equal on every member holding it, newer
     * generations having larger ids. */
    int32_t id;
    /** Its snapshots; NULL for WEFT_GEN_START only. Committed when
     * weft_snapshot_committed() finds a step. */
    const weft_snapshot_t *snap;
} weft_snapshot_gen_t;

/** @brief The generation weft_elastic_choose_gen() chose. Set @c size before the call. */
typedef struct weft_gen_choice {
    size_t size; /**< sizeof(weft_gen_choice_t), set by the caller. */
    int32_t id;  /**< The generation to restore from, or WEFT_GEN_NONE. */
    /** Its index in this member's @c gens when this member holds it committed, else -1
     * (this member then receives its state from those that hold it). */
    int index;
    int root;    /**< Lowest group rank holding it committed; -1 with WEFT_GEN_NONE. */
    int holders; /**< Members holding it committed; 0 with WEFT_GEN_NONE. */
} weft_gen_choice_t;

/**
 * @brief Choose, with every member of @p g, the generation to restore from: the newest
 * that some member holds committed and no member holds uncommitted. Collective over @p g
 * (one allgather): call it as the first operation after every membership edit; every
 * member gets the same choice (id, root, holders).
 *
 * A member refused for its own arguments still takes part, so that the others do not
 * wait: then every member returns WEFT_ERR_INVALID_ARG, and weft_last_error() names the
 * refused member's group rank.
 * @param[in]  g      The group the members are in now (e.g. the world after a repair).
 * @param[in]  gens   The generations this member holds, any order; NULL when @p n is 0.
 * @param[in]  n      0 .. WEFT_ELASTIC_MAX_GENS (0: a member that holds none, a joiner).
 * @param[in,out] choice Its @c size set to sizeof(weft_gen_choice_t); filled on success.
 * @return WEFT_OK (with id WEFT_GEN_NONE when no generation can be restored: the state is
 *         lost); WEFT_ERR_INVALID_ARG on every member when one passed a NULL @p choice,
 *         a @c size smaller than the struct, @p n out of range, an id below
 *         WEFT_GEN_START or twice, or a NULL snapshot for an id other than
 *         WEFT_GEN_START (on this member only when @p g is NULL);
 *         WEFT_ERR_PEER_FAILED, WEFT_ERR_REVOKED, WEFT_ERR_TIMEOUT as for a collective
 *         (start the recovery over); WEFT_ERR_NO_MEMORY.
 */
WEFT_API weft_status_t weft_elastic_choose_gen(weft_group_t *g, const weft_snapshot_gen_t *gens,
                                               int n, weft_gen_choice_t *choice);

/**
 * @brief The layout to restore a generation to (weft_elastic_restore_gen()): the
 * caller's part of the restore, typically its state layout re-cut over @p members.
 * @param[in]  arg     The pointer given to weft_elastic_restore_gen().
 * @param[in]  members The stable ids of the generation group's surviving members, in
 *                     group rank order, the same on every member.
 * @param[in]  n       How many (at least 1).
 * @param[out] target  A new layout of the snapshot's tensors over @p members (from
 *                     weft_layout_create()); weft_elastic_restore_gen() frees it.
 * @return WEFT_OK, or any error, which weft_elastic_restore_gen() then returns on every
 *         member.
 */
typedef weft_status_t (*weft_elastic_target_fn)(void *arg, const int *members, int n,
                                                weft_layout_t **target);

/**
 * @brief Restore the generation weft_elastic_choose_gen() chose, on a member holding it
 * committed: what every elastic trainer does with its snapshot object after a
 * membership change. Collective over @p gen_group (the members of the generation that
 * are alive); blocking. Members admitted to the world since do not call it: they receive
 * their state afterwards from the restored members (as in examples/snapshot_gens.c).
 * @p gen_group must therefore be a group no process joins, a subgroup made by
 * weft_group_split() when the generation was made: a repair of the world may admit
 * processes waiting to join, which would not take part.
 *
 * In order, on every member of @p gen_group: revoke and repair @p gen_group (every member
 * starts from a fresh epoch there, without the members that died); check that @p world
 * was not edited meanwhile (weft_group_repair() on it, which applies an edit another
 * member decided, and leaves a healthy group alone); call @p target with the surviving
 * members; allocate the buffer (weft_mem_alloc(): zeroed, huge pages from 2 MiB) of
 * weft_snapshot_restore_bytes() bytes; agree, in one allgather over @p gen_group, that
 * every member got so far; then weft_snapshot_restore() into the buffer. A member
 * refused for its own arguments, or whose @p target or allocation failed, or which saw
 * @p world edited, still takes part until that allgather, so that no member waits for
 * it: every member then returns the same status (that of the lowest group rank that
 * failed), and weft_last_error() names that rank. Completion is not uniform (as for any
 * collective, weft/group.h): a member may still be finishing the call when another
 * returns, and the revocation that starts a next call on @p gen_group would fail its call
 * with WEFT_ERR_REVOKED. The same holds for whatever came before on @p gen_group (the
 * snapshots that made the generation): call it, and call it again, only after an
 * operation on another group that every member takes part in (the recovery loop's repair
 * of the world and weft_elastic_choose_gen() are such).
 *
 * @p target is called exactly once on every member whose arguments are accepted and
 * whose repair and check of @p world succeeded, and never when the call returns before.
 * It runs on this thread with the context's lock held: it may call weft's local
 * functions (layouts), not communicate.
 *
 * The buffer: on success *@p buf is this member's packed buffer of the target layout,
 * followed by every member's blob (read them with weft_snapshot_blob() on @p snap, and
 * the plan with weft_snapshot_restore_plan()); the caller owns it and frees it with
 * weft_mem_free(*buf, *bytes). On failure *@p buf and *@p bytes are left as they were:
 * a buffer allocated for a restore that failed is kept by the library, since a
 * migration that failed on a peer may still write into it for a while, until
 * weft_finalize() frees it (one buffer per failed restore; the caller never sees it).
 * @p snap must then be restored again or freed, as after a failed weft_snapshot_restore().
 *
 * @param[in]  snap      The generation's snapshot object, made on @p gen_group; this
 *                       member holds a step committed in it. The request of its last
 *                       snapshot freed (see WEFT_ERR_INVALID_ARG below).
 * @param[in]  gen_group The group @p snap was made on, split off the world when the
 *                       generation was made; revoked and repaired here.
 * @param[in]  world     The group the members are in now, on which the generation was
 *                       chosen; only repaired (a no-op when healthy) to see its epoch.
 * @param[in]  target    Builds the target layout over the surviving members.
 * @param[in]  arg       Passed to @p target.
 * @param[out] buf       Set on success: the buffer restored into (see above).
 * @param[out] bytes     Set on success: its size.
 * @param[in,out] info   May be NULL; else its @c size set to
 *                       sizeof(weft_snapshot_restored_t), and filled on success (the step
 *                       restored, the bytes moved, copied locally, missing, from SSD).
 * @return WEFT_OK (parts whose every copy died are counted in info->bytes_missing, left
 *         zero in the buffer); WEFT_ERR_INVALID_ARG on every member when one passed a
 *         NULL @p snap, @p world, @p target, @p buf or @p bytes, an @p info whose @c size
 *         is smaller than the struct (zero included), or a @p target that gave no layout,
 *         or when weft_snapshot_restore() refuses (no step committed by every survivor,
 *         a layout of other tensors); on this member only when @p gen_group is NULL, or
 *         when the request of a snapshot of @p snap is not freed yet
 *         (weft_snapshot_restore() refuses that before its agreement: the other members
 *         then wait in the restore until WEFT_ERR_TIMEOUT, so free that request first, as
 *         the recovery does); WEFT_ERR_REVOKED on every member when one saw @p world
 *         edited (a member died or was admitted since the generation was chosen: start
 *         the recovery over, repair @p world and choose again), or on this member when
 *         the others declared it failed; WEFT_ERR_NO_MEMORY on every member when one
 *         could not allocate the buffer (on this member alone when it could not allocate
 *         the few bytes it needs before the repair); an error @p target returned, on
 *         every member; WEFT_ERR_PEER_FAILED, WEFT_ERR_TIMEOUT, WEFT_ERR_IO as for a
 *         repair or a collective, and a migration's errors (WEFT_ERR_MISMATCH, ...) from
 *         the restore: start the recovery over.
 */
WEFT_API weft_status_t weft_elastic_restore_gen(weft_snapshot_t *snap, weft_group_t *gen_group,
                                                weft_group_t *world, weft_elastic_target_fn target,
                                                void *arg, void **buf, size_t *bytes,
                                                weft_snapshot_restored_t *info);

/** @brief This member's share of a global batch (weft_batch_share()). Set @c size
 * before the call. */
typedef struct weft_batch_share {
    size_t size;            /**< sizeof(weft_batch_share_t), set by the caller. */
    uint64_t first;         /**< Index of its first sample in the global batch. */
    uint64_t samples;       /**< How many samples it processes. */
    uint64_t micro_batches; /**< How many micro-batches of at most max_micro samples. */
    uint64_t micro_size;    /**< Samples in each micro-batch but perhaps the last. */
    uint64_t last_micro;    /**< Samples in the last micro-batch. */
    /** Multiply the sum of per-sample losses by this before the gradient allreduce
     * (1 / global batch): the sum over members is then the mean over the global batch,
     * whatever the width. */
    double grad_scale;
} weft_batch_share_t;

/**
 * @brief Split a global batch of @p global samples over @p width data-parallel members:
 * member @p rank gets floor(global / width) samples, one more for the first
 * global % width members, contiguous and in rank order, cut into micro-batches of at
 * most @p max_micro (0: one micro-batch). The global batch and the gradient scale stay
 * exactly the same at every width. Local, no context; thread-safe.
 * @param[in,out] share Its @c size set to sizeof(weft_batch_share_t); the fields that fit
 *                      are filled on success, @c size is left as it was.
 * @return WEFT_OK; WEFT_ERR_INVALID_ARG if global < width, width < 1, rank out of range,
 *         @p share NULL or its @c size smaller than the struct (zero included).
 */
WEFT_API weft_status_t weft_batch_share(uint64_t global, int width, int rank, uint64_t max_micro,
                                        weft_batch_share_t *share);

#ifdef __cplusplus
}
#endif

#endif
