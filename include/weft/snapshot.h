/**
 * @file snapshot.h
 * @brief In-memory snapshots of sharded training state on peer members ("buddies"), and
 *        restoring a lost member's state from them after a repair.
 *
 * After a training step each member starts a snapshot of its shard of the state (the
 * packed buffer of a layout: parameters, optimizer state) and an opaque blob (RNG state,
 * data-loader position, step counter). The snapshot copies the shard, in the background
 * through the migration engine, into a buffer of the member itself and of
 * @c redundancy buddies (the next members in group rank order, on another host first).
 * Each copy is double-buffered: a snapshot in progress never overwrites the newest
 * complete one. A snapshot of step s is committed when its
 * migration completes, which every member learns at the same time (the migration's
 * closing agreement); data of the next snapshot lands only after every member has passed
 * that point, so the buffer of the previous step is intact until then. With a memory
 * budget (weft_snapshot_params_t.buddy_mem_bytes), buddies' copies beyond it are kept in
 * the SSD tier only, and a step commits once those files are durable too.
 *
 * After weft_group_repair(), the survivors call weft_snapshot_restore(): they agree on the
 * newest step every survivor has committed, and one migration takes every region of a
 * target layout (a re-cut over the survivors) from the survivors' copies of that step.
 * Regions whose every copy died are reported, never left stale silently. When the failure
 * came before the survivors changed their state since that step, weft_snapshot_restore_live()
 * takes their regions from their live buffers instead (in place where the target keeps
 * them), and only the lost members' shards move.
 *
 * A snapshot object belongs to one group at one membership: after a restore, free it and
 * create one for the new layout. Members admitted since (by weft_group_grow(), or by the
 * weft_group_repair() that removed the dead) take part with weft_snapshot_restore_join()
 * and receive their share of the target directly.
 */
#ifndef WEFT_SNAPSHOT_H
#define WEFT_SNAPSHOT_H

#include <stddef.h>
#include <stdint.h>

#include "weft/core.h"
#include "weft/export.h"
#include "weft/migrate.h"
#include "weft/status.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct weft_snapshot weft_snapshot_t; /**< Snapshots of one layout on one group. */

/** @brief Optional parameters of weft_snapshot_create(). Zero-initialise, then set @c size. */
typedef struct weft_snapshot_params {
    size_t size; /**< sizeof(weft_snapshot_params_t). */
    /** Buddies holding a copy of each member's shard besides the member itself (0: 1;
     * at most group size - 1). */
    int redundancy;
    /** Host of each member id (host_of[id], ids 0..num_members-1): buddies on another
     * host than the member are chosen first. NULL: the hosts the members are on, as the
     * library knows them (those that may share memory), so that losing a whole host
     * loses no shard whose buddy is elsewhere. */
    const int *host_of;
    int num_members; /**< Entries in host_of. */
    /** A directory for the SSD tier, or NULL for none. After each committed step, every
     * member writes what it holds of it (its own shard, its buddies' copies, the blobs)
     * to <ssd_dir>/member-<id>, in the background, through io_uring, chunks named by
     * their hash so that unchanged chunks are not written again; the snapshot's request
     * completes when that write ends. A restore reads from these directories what no
     * surviving memory copy holds (one host, or a shared filesystem). A failed write does
     * not fail the snapshot (its memory copies are committed): weft_snapshot_stats()
     * tells it. Each member directory is created 0700 (ssd_dir too, if missing); one that
     * exists must be a real directory of the calling user's with no permission for group
     * or others, else weft_snapshot_create() fails with WEFT_ERR_INVALID_ARG saying why.
     * Files are 0600, never reached through a symbolic link, and carry a MAC under a key
     * derived from the job token: only members of the same job restore them (a job
     * without a store: only the same process). */
    const char *ssd_dir;
    /** Bytes of buddies' copies this member keeps in memory, its two copy buffers
     * together (0: no limit). A buddy's region that does not fit whole is *spilled*: this
     * member receives it during the snapshot into a buffer that lives only until the
     * snapshot ends, and keeps it in its SSD directory only. With a budget, every member
     * writes its step to its directory before the snapshot's closing agreement, and the
     * step commits only once every copy, in memory or spilled, is complete on every
     * member: a spilled write that fails fails the snapshot everywhere (the previous step
     * stays committed). A restore has each buddy read the spilled copies it needs from
     * its own directory and send them. Own regions and blobs are never spilled. Requires
     * @c ssd_dir (else WEFT_ERR_INVALID_ARG); every member must pass the same value. */
    size_t buddy_mem_bytes;
} weft_snapshot_params_t;

/**
 * @brief Prepare snapshots of @p state (every member of @p g holds its regions; the
 * layout must cover every tensor) with blobs of at most @p blob_bytes per member. Local:
 * no communication, but every member must pass equal arguments (the first snapshot
 * checks). Allocates this member's two copy buffers (weft_snapshot_bytes()).
 * @return WEFT_OK; WEFT_ERR_INVALID_ARG (a layout naming members outside @p g, leaving a
 *         tensor partly unheld, a tensor named "weft.blob.*", a buddy_mem_bytes without
 *         ssd_dir, or a member directory of ssd_dir that is not the caller's alone);
 *         WEFT_ERR_IO (ssd_dir cannot be created or opened); WEFT_ERR_NO_MEMORY.
 */
WEFT_API weft_status_t weft_snapshot_create(weft_group_t *g, const weft_layout_t *state,
                                            size_t blob_bytes, const weft_snapshot_params_t *params,
                                            weft_snapshot_t **snap);

/** @brief Free @p snap (NULL is a no-op); a snapshot still in flight is cancelled (its
 * request then completes with WEFT_ERR_REVOKED; free it as usual). */
WEFT_API void weft_snapshot_free(weft_snapshot_t *snap);

/** @brief Bytes this member keeps for copies: both buffers together (spilled copies not
 * counted: they take memory only while a snapshot runs). */
WEFT_API size_t weft_snapshot_bytes(const weft_snapshot_t *snap);

/**
 * @brief Start the snapshot of step @p step: this member's packed state buffer
 * @p state_buf and @p blob_len bytes of @p blob (copied at once). Collective over the
 * snapshot's group: every member starts it, with the same @p step. @p state_buf must
 * stay unchanged until the request completes. One snapshot at a time.
 * @param[out] req Completes when the snapshot is committed on every member, or fails
 *                 like a migration (WEFT_ERR_PEER_FAILED, WEFT_ERR_MISMATCH, ...; with
 *                 buddy_mem_bytes, WEFT_ERR_IO when a member could not write its spilled
 *                 copies).
 * @return WEFT_INPROGRESS or WEFT_OK; WEFT_ERR_INVALID_ARG (a snapshot in flight, a blob
 *         longer than blob_bytes, a step not above the last committed one).
 */
WEFT_API weft_status_t weft_snapshot_start(weft_snapshot_t *snap, uint64_t step,
                                           const void *state_buf, const void *blob, size_t blob_len,
                                           weft_req_t **req);

/** @brief The newest step this member has seen committed; WEFT_ERR_INVALID_ARG if none. */
WEFT_API weft_status_t weft_snapshot_committed(const weft_snapshot_t *snap, uint64_t *step);

/** @brief Bytes the new buffer of weft_snapshot_restore() needs for @p target on this
 * member: its packed bytes of @p target, then the members' blobs. */
WEFT_API size_t weft_snapshot_restore_bytes(const weft_snapshot_t *snap,
                                            const weft_layout_t *target);

/** @brief What a restore did. Set @c size before passing it; a NULL pointer is allowed
 * wherever one is taken. */
typedef struct weft_snapshot_restored {
    size_t size;           /**< sizeof(weft_snapshot_restored_t), set by the caller. */
    uint64_t step;         /**< The step restored: the newest every survivor committed. */
    size_t bytes_moved;    /**< Between members, all members together. */
    size_t bytes_local;    /**< Copied within members. */
    size_t bytes_missing;  /**< Of the target, held in no surviving copy (left untouched). */
    size_t bytes_from_ssd; /**< Of those held in no memory copy, read from SSD files. */
} weft_snapshot_restored_t;

/** @brief This member's view of its snapshots (weft_snapshot_stats()). */
typedef struct weft_snapshot_stats {
    size_t size;                /**< sizeof(weft_snapshot_stats_t). */
    int have_committed;         /**< Whether a step was committed in memory. */
    uint64_t committed;         /**< The newest committed step. */
    int have_durable;           /**< Whether a step was written to this member's directory. */
    /** The newest step written there (with buddy_mem_bytes, possibly one whose snapshot
     * then failed on another member: it is written before the closing agreement). */
    uint64_t durable;
    weft_status_t ssd_status;   /**< Of the last SSD write (WEFT_OK if none). */
    char ssd_error[256];        /**< Why it failed, if it did. */
    uint64_t ssd_bytes_written; /**< By the last SSD write: chunk bytes written ... */
    uint64_t ssd_bytes_skipped; /**< ... and not written again (unchanged chunks). */
    double ssd_write_us;        /**< Its duration, from commit to durable. */
    uint64_t spill_bytes;       /**< Of buddies' copies, bytes kept on SSD only, per step. */
    uint64_t spill_read_bytes;  /**< Read back from the spilled files by the last restore. */
    /** Whether the last restore failed to read a spilled copy it needed (a damaged or
     * missing file): its regions were then taken from other copies or the files of the
     * member that died, or counted missing. */
    int spill_read_failed;
    /** Bytes of this member's target that the last restore left in place: restored from
     * its live buffer into the same memory (weft_snapshot_restore_live), not copied. */
    uint64_t restore_in_place_bytes;
} weft_snapshot_stats_t;

/**
 * @brief Fill @p stats.
 * @param[in,out] stats Its @c size set to sizeof(weft_snapshot_stats_t) first; the fields
 *                      that fit are filled, @c size is left as it was.
 * @return WEFT_OK; WEFT_ERR_INVALID_ARG for a NULL argument or a @c size smaller than
 *         the struct (zero included).
 */
WEFT_API weft_status_t weft_snapshot_stats(const weft_snapshot_t *snap,
                                           weft_snapshot_stats_t *stats);

/**
 * @brief After weft_group_repair() of the snapshot's group: restore @p target (a layout
 * of the same tensors over the survivors, e.g. a flat re-cut) from the survivors' copies
 * of the newest step they all committed. Collective over the group; blocking.
 *
 * @p new_buf receives this member's packed buffer of @p target, followed by every
 * member's blob (read them with weft_snapshot_blob()); it has
 * weft_snapshot_restore_bytes() bytes. Parts of @p target that no surviving copy holds
 * (every holder died) are left untouched and counted in @c bytes_missing; list them
 * with weft_plan_missing() on weft_snapshot_restore_plan().
 * @param[in,out] info May be NULL; else its @c size set to sizeof(weft_snapshot_restored_t),
 *                     and filled on success.
 * @return WEFT_OK; WEFT_ERR_INVALID_ARG (no step committed by every survivor, a target
 *         with other tensors, a buffer too small, an @p info whose @c size is smaller than
 *         the struct, zero included: on every member when one member's are refused), or
 *         a migration's errors.
 */
WEFT_API weft_status_t weft_snapshot_restore(weft_snapshot_t *snap, const weft_layout_t *target,
                                             void *new_buf, size_t new_bytes,
                                             weft_snapshot_restored_t *info);

/**
 * @brief weft_snapshot_restore() when the failure came before this member changed its
 * state since the last committed snapshot (the usual case: the gradient allreduce of the
 * next step failed before the optimizer wrote): @p live_buf, its packed buffer of the
 * snapshot's state layout, still holds that step. If every surviving holder passes its
 * live buffer and all committed the same step, the survivors' regions are taken from
 * the live buffers (a transfer whose source and destination are the same memory is not
 * copied: with @p new_buf == @p live_buf and a target that keeps each survivor's regions
 * first, at the same offsets, they stay in place) and only the shards of the members
 * that are gone come from their buddies' copies. Otherwise (a member passed NULL, or the
 * committed steps differ) it restores from the copies as weft_snapshot_restore() does.
 * @p live_buf must not change during the call; @p new_buf may overlap it only where the
 * target keeps live regions in place. Members admitted since call
 * weft_snapshot_restore_join() as usual.
 * @return WEFT_OK; the errors of weft_snapshot_restore(); WEFT_ERR_INVALID_ARG on every
 *         member when a member's @p new_buf overlaps its live buffer elsewhere.
 */
WEFT_API weft_status_t weft_snapshot_restore_live(weft_snapshot_t *snap,
                                                  const weft_layout_t *target, const void *live_buf,
                                                  void *new_buf, size_t new_bytes,
                                                  weft_snapshot_restored_t *info);

/**
 * @brief The part of weft_snapshot_restore() that a member admitted since the snapshot's
 * group was made (by weft_group_grow(), or by the weft_group_repair() that removed the
 * dead) plays: it holds no copy, takes part in the same collective, and receives its
 * share of @p target (the same layout the holders pass) into @p new_buf
 * (weft_layout_packed_bytes(target, its member id) bytes). The holders call
 * weft_snapshot_restore() at the same time; the lowest of them sends such members the
 * plan. On success *@p snap is an object that only answers weft_snapshot_blob() and
 * weft_snapshot_restore_plan() (free it with weft_snapshot_free()).
 * @return WEFT_OK; the errors of weft_snapshot_restore().
 */
WEFT_API weft_status_t weft_snapshot_restore_join(weft_group_t *g, const weft_layout_t *target,
                                                  void *new_buf, size_t new_bytes,
                                                  weft_snapshot_t **snap,
                                                  weft_snapshot_restored_t *info);

/** @brief After a restore: the blob member @p member stored with the restored step
 * (copied into @p out, at most @p cap bytes; *len gets its length).
 * @return WEFT_OK; WEFT_ERR_INVALID_ARG if no restore happened, @p member had no blob in
 *         the snapshot, or its blob is missing (every copy died). */
WEFT_API weft_status_t weft_snapshot_blob(const weft_snapshot_t *snap, int member, void *out,
                                          size_t cap, size_t *len);

/** @brief After a restore: the plan it ran, for weft_plan_missing() and
 * weft_plan_stats(); NULL before. Owned by @p snap. */
WEFT_API const weft_plan_t *weft_snapshot_restore_plan(const weft_snapshot_t *snap);

#ifdef __cplusplus
}
#endif

#endif
