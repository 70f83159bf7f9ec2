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
 * the members holding it then call weft_snapshot_restore() on its object (after repairing
 * its group), and those admitted since weft_snapshot_restore_join() or receive their
 * state from them. examples/snapshot_gens.c is such a trainer.
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
