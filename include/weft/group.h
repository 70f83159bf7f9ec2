/**
 * @file group.h
 * @brief Editable groups: survive a dead member, admit new ones, split, all in place.
 *
 * A member has a stable id (its world rank at start, or an id assigned when it joined,
 * never reused) and a group rank (its position among the active members; survivors keep
 * their relative order). Every membership edit raises the group's epoch. Messages carry
 * (group id, epoch): a message of an old epoch never matches an operation of a new one.
 *
 * Failure: once any member learns that another has died (weftrun's notice, a transport
 * error, a missed heartbeat), the group is revoked: every operation in flight or started
 * later on it returns WEFT_ERR_PEER_FAILED or WEFT_ERR_REVOKED on every survivor. The
 * survivors then call weft_group_repair(); the handle stays valid and works at the new
 * epoch. Each edit is decided once, by an atomic operation on the rendezvous store, so
 * no two members can end up with different memberships, and the member that decides it
 * revokes the old epoch, so nobody stays waiting there for members that moved on.
 *
 * The recovery loop, which also holds for failures during recovery:
 *
 *     for (;;) {
 *         st = weft_group_repair(g, &info);            // agree on who is gone
 *         if (st != WEFT_OK) break;                     // REVOKED: we were declared dead
 *         if (want_width) st = weft_group_grow(g, width - size, wait_ms, &info);
 *         if (st == WEFT_OK) st = resynchronise(g);     // first collective of the epoch
 *         if (st != WEFT_ERR_PEER_FAILED && st != WEFT_ERR_REVOKED) break;
 *     }
 *
 * Make the resynchronisation (parameters and step from one rank) the first operation
 * after every edit, including edits made by weft_group_grow: members then never stand in
 * different operations of one epoch.
 *
 * Abandoned collectives: a member that leaves a collective before it finished there (its
 * wait returned WEFT_ERR_TIMEOUT and the request was freed, a blocking call timed out, or
 * the request was freed in flight) revokes the epoch for every member, as a failure does:
 * the others' operations of that epoch in flight and later return WEFT_ERR_REVOKED (a
 * member that arrives late fails the collective rather than complete it), and the
 * recovery loop above moves every member to one new epoch. Being slow is not a failure:
 * that repair keeps every live member, the one that timed out included. Completion is
 * not uniform: a member whose part had ended just before keeps its result and sees the
 * revocation at its next operation. A timed-out weft_wait that keeps its request (to
 * wait again) abandons nothing.
 *
 * Thread safety: as for the context (one thread at a time per context).
 */
#ifndef WEFT_GROUP_H
#define WEFT_GROUP_H

#include "weft/export.h"
#include "weft/core.h"

#ifdef __cplusplus
extern "C" {
#endif

/** @brief Epoch of @p g: 0 at creation, +1 per membership edit. */
WEFT_API weft_status_t weft_group_epoch(const weft_group_t *g, uint32_t *epoch);

/** @brief Stable member id of group rank @p rank. */
WEFT_API weft_status_t weft_group_member_id(const weft_group_t *g, int rank, int *id);

/** @brief Group rank of the member with stable id @p id, or WEFT_ERR_INVALID_ARG if it is
 * not an active member. */
WEFT_API weft_status_t weft_group_rank_of(const weft_group_t *g, int id, int *rank);

/** @brief Most stable ids weft_edit_info_t lists in @c removed and in @c added. */
#define WEFT_EDIT_INFO_MAX_LISTED 64
/** @brief Most old group ranks weft_edit_info_t maps in @c rank_map. */
#define WEFT_EDIT_INFO_MAX_RANKS 1024

/**
 * @brief What an edit did. Zero-initialise, set @c size, pass to repair/grow.
 *
 * Past the limits: @c n_removed and @c n_added count every member that left or was
 * admitted, but only the first WEFT_EDIT_INFO_MAX_LISTED of each have their ids listed
 * (read min(n, WEFT_EDIT_INFO_MAX_LISTED) entries); @c rank_map covers the first
 * WEFT_EDIT_INFO_MAX_RANKS old ranks only (weft_group_rank_of() answers for the others).
 */
typedef struct weft_edit_info {
    size_t size;          /**< sizeof(weft_edit_info_t), set by the caller. */
    uint32_t old_epoch;   /**< Epoch before the edit. */
    uint32_t new_epoch;   /**< Epoch after it. */
    int old_size;         /**< Members before. */
    int new_size;         /**< Members after. */
    int n_removed;        /**< Members that left (failed), all of them. */
    /** Their stable ids, the first WEFT_EDIT_INFO_MAX_LISTED. */
    int removed[WEFT_EDIT_INFO_MAX_LISTED];
    int n_added;          /**< Members admitted, all of them. */
    /** Their stable ids, the first WEFT_EDIT_INFO_MAX_LISTED. */
    int added[WEFT_EDIT_INFO_MAX_LISTED];
    /** Old group rank -> new group rank (-1 if removed), for the first
     * WEFT_EDIT_INFO_MAX_RANKS old ranks. */
    int rank_map[WEFT_EDIT_INFO_MAX_RANKS];
    int n_subgroups_revoked; /**< Subgroups left revoked because they lost a member. */
} weft_edit_info_t;

/**
 * @brief Shrink @p g to its surviving members, in place.
 *
 * Called by survivors after an operation returned WEFT_ERR_PEER_FAILED/WEFT_ERR_REVOKED.
 * The survivors agree on exactly which members are gone; ranks are compacted in their
 * old order; connections between survivors are kept. If the group is healthy it is left
 * as is (info->new_epoch == info->old_epoch), unless another member already decided an
 * edit, which this call then applies. Members waiting to join are admitted too.
 * Subgroups (weft_group_split) that lost a member stay revoked and are repaired on their
 * own; the others keep working.
 *
 * A member is removed only once the store holds its failure notice: its lease fired
 * (it died) or lapsed (it hangs), its launcher reported it, or a member's report was
 * taken, which the store does only once the member's lease renewals are late
 * (docs/decisions/0030-one-word-evicts-nobody.md). A member that lost contact with a
 * peer the store still sees alive therefore waits for its notice, up to
 * WEFT_FAILURE_TIMEOUT_MS and two renewal periods more, then fails with
 * WEFT_ERR_TIMEOUT and removes nobody.
 * @param[out] info May be NULL.
 * @return WEFT_OK; WEFT_ERR_REVOKED if this member itself was declared failed by the
 *         others (it must leave): it learns so from their decision, or from its own
 *         failure notice in the store (the decisions it did not apply may be deleted
 *         by then); WEFT_ERR_TIMEOUT (a member this one cannot reach is alive to the
 *         store, or the store is slow); WEFT_ERR_PROTOCOL when another member wrote a
 *         decision that removes a member without a failure notice (a member that lied:
 *         nobody applies it, and the group stays at its epoch); WEFT_ERR_IO (store
 *         unreachable).
 */
WEFT_API weft_status_t weft_group_repair(weft_group_t *g, weft_edit_info_t *info);

/**
 * @brief Admit members waiting in weft_group_join() on this group, appended after the
 * existing ranks. Only connections to the newcomers are made.
 *
 * An agreement like repair: the first member to propose decides, and every member that
 * calls grow (or repair) applies that decision, whatever it was waiting for. Members
 * therefore need not agree beforehand on @p min_new. If a member has failed, the edit
 * removes it too (without waiting for joiners). When nobody is waiting and nobody failed,
 * no edit is made and the group stays at its epoch; if another member admits someone
 * meanwhile, this member's next operation fails with WEFT_ERR_REVOKED and its
 * weft_group_repair() applies the admission. After any edit, resynchronise the members
 * (see the recovery loop in examples/elastic_trainer.c).
 * @param[in]  min_new   Wait until at least this many joiners are pending (0: take those
 *                       present now, possibly none).
 * @param[in]  timeout_ms How long to wait for them; when it passes, those present are
 *                       admitted (possibly none: no edit). Not an error.
 * @param[out] info May be NULL; n_added says how many were admitted.
 * @return WEFT_OK; WEFT_ERR_REVOKED if this member was declared failed by the others;
 *         WEFT_ERR_IO (store unreachable).
 */
WEFT_API weft_status_t weft_group_grow(weft_group_t *g, int min_new, uint64_t timeout_ms,
                                       weft_edit_info_t *info);

/**
 * @brief Number of processes waiting in weft_group_join() to be admitted to @p g.
 * Lets a trainer decide when to call weft_group_grow(). One store round trip.
 */
WEFT_API weft_status_t weft_group_pending_joiners(const weft_group_t *g, int *n);

/**
 * @brief Join the group called @p name ("world" for the world group) as a new member.
 *
 * For a process started after the job (by `weftrun --elastic --replace`, or by hand with
 * WEFT_STORE, WEFT_JOB_TOKEN and WEFT_JOIN=1). Waits until the members admit it at
 * their next weft_group_grow() or weft_group_repair().
 * @param[out] g The group, owned by @p ctx.
 * @return WEFT_OK, WEFT_ERR_TIMEOUT, WEFT_ERR_INVALID_ARG (unknown name),
 *         WEFT_ERR_REVOKED when the group finished (its members left together through
 *         weft_finalize) before admitting this process: there is nothing left to join;
 *         or when this process was declared failed before it arrived (the members went
 *         on without it); WEFT_ERR_PEER_FAILED when every member failed.
 */
WEFT_API weft_status_t weft_group_join(weft_ctx_t *ctx, const char *name, uint64_t timeout_ms,
                                       weft_group_t **g);

/**
 * @brief Split @p parent: members with equal @p color form a subgroup, ordered by
 * (@p key, parent rank). Collective over @p parent. A negative color gives *sub = NULL.
 * Subgroups are revoked along with their parent when they lose a member.
 *
 * A process can hold up to 4095 subgroups at once (besides the world): every message
 * names its group in 12 bits, so no two groups of a process share them. Free the
 * subgroups you no longer need; a split creates and frees as many as you like over a job.
 * @return WEFT_OK; WEFT_ERR_NO_MEMORY on every member alike when the members of
 *         @p parent already hold so many groups that no id is left for a new one;
 *         errors of the collective and of the store.
 */
WEFT_API weft_status_t weft_group_split(weft_group_t *parent, int color, int key,
                                        weft_group_t **sub);

/** @brief Destroy a subgroup created by weft_group_split (not the world group). */
WEFT_API weft_status_t weft_group_free(weft_group_t *g);

/**
 * @brief Revoke @p g on every member: all operations in flight and later fail with
 * WEFT_ERR_REVOKED until weft_group_repair(). For a member that decides, on its own,
 * that the group cannot go on (e.g. a peer is hung).
 */
WEFT_API weft_status_t weft_group_revoke(weft_group_t *g);

#ifdef __cplusplus
}
#endif
#endif
