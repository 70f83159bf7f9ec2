/**
 * @file migrate.h
 * @brief Parameter migration: where sharded tensors live (layouts), and the fewest
 *        rank-to-rank transfers that take them from one layout to another (plans).
 *
 * A layout names tensors (name, dtype, global shape) and, for each member of a group,
 * the n-dimensional boxes of each tensor it holds. Members are stable member ids
 * (weft_group_member_id()), so a layout stays meaningful across repair and grow.
 * Layouts and plans are values computed locally, without communication: every rank
 * builds the same old and new layout and gets the same plan.
 *
 * A member keeps the regions it holds back to back in one buffer, in the order they
 * were added to the layout (its "packed buffer"); each region is stored row-major.
 * A flat ZeRO partition (weft_layout_flat()) is then exactly the member's flat shard.
 *
 * Calls here take no context: on error, weft_last_error(NULL) gives the detail (which
 * tensor, which region) for the calling thread.
 */
#ifndef WEFT_MIGRATE_H
#define WEFT_MIGRATE_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "weft/coll.h"
#include "weft/core.h"
#include "weft/export.h"
#include "weft/status.h"

#ifdef __cplusplus
extern "C" {
#endif

/** @brief Most dimensions a tensor of a layout may have. */
#define WEFT_LAYOUT_MAX_DIMS 8
/** @brief Longest tensor name, without its terminating NUL. */
#define WEFT_LAYOUT_NAME_MAX 127

typedef struct weft_layout weft_layout_t; /**< Tensors and who holds which part. */
typedef struct weft_plan weft_plan_t;     /**< Transfers from one layout to another. */

/** @brief An n-dimensional box of a tensor, in elements; dimensions past the tensor's
 * are ignored. */
typedef struct weft_box {
    uint64_t offset[WEFT_LAYOUT_MAX_DIMS];
    uint64_t extent[WEFT_LAYOUT_MAX_DIMS];
} weft_box_t;

/** @brief A tensor of a layout, as weft_layout_tensor() describes it. */
typedef struct weft_tensor_info {
    const char *name;                     /**< Owned by the layout. */
    weft_dtype_t dtype;
    int ndims;
    uint64_t shape[WEFT_LAYOUT_MAX_DIMS];
    size_t bytes;                         /**< Of the whole tensor. */
} weft_tensor_info_t;

/* ------------------------------------------------------------------------------------ */
/** @name Layouts */
/** @{ */

/** @brief An empty layout. */
WEFT_API weft_status_t weft_layout_create(weft_layout_t **layout);
/** @brief Free @p layout (NULL is a no-op). Plans made from it stay valid. */
WEFT_API void weft_layout_free(weft_layout_t *layout);

/**
 * @brief Add a tensor.
 * @param[in]  name  Unique within the layout, 1..WEFT_LAYOUT_NAME_MAX characters.
 * @param[in]  dtype Any built-in type (not WEFT_DTYPE_USER).
 * @param[in]  ndims 1..WEFT_LAYOUT_MAX_DIMS; every dimension of @p shape at least 1.
 * @param[out] index The tensor's index (tensors are numbered in the order added); may be NULL.
 * @return WEFT_OK; WEFT_ERR_INVALID_ARG (duplicate name, bad shape or dtype).
 */
WEFT_API weft_status_t weft_layout_add_tensor(weft_layout_t *layout, const char *name, weft_dtype_t dtype,
                                     int ndims, const uint64_t *shape, int *index);

/**
 * @brief Say that member @p member holds @p box of tensor @p tensor. The region is
 * appended to the member's packed buffer.
 * @return WEFT_OK; WEFT_ERR_INVALID_ARG if the box is empty, outside the tensor, or
 *         overlaps a box of the same tensor the member already holds.
 */
WEFT_API weft_status_t weft_layout_add_region(weft_layout_t *layout, int member, int tensor,
                                     const weft_box_t *box);

/**
 * @brief Even block sharding of @p tensor along dimension @p dim over @p members (in
 * that order): each holds a slab of ceil(shape[dim] / n) rows rounded up to @p align
 * (0 or 1: no rounding), the last ones less or nothing, the same rule as
 * weft_vocab_shard_range(). A member whose slab is empty holds no region.
 */
WEFT_API weft_status_t weft_layout_shard(weft_layout_t *layout, int tensor, int dim, const int *members,
                                int n);

/**
 * @brief Flat (ZeRO / FSDP) partitions: tensors @p tensors, flattened row-major and
 * concatenated in that order, cut into @p n equal ranges of ceil(total / n) elements
 * (the last shorter or empty), range i to @p members[i]. Each range becomes the boxes
 * that tile it, so a member's packed buffer is its flat range.
 */
WEFT_API weft_status_t weft_layout_flat(weft_layout_t *layout, const int *tensors, int ntensors,
                               const int *members, int n);

/** @brief All of @p tensor on @p member (a pipeline stage holding a layer). */
WEFT_API weft_status_t weft_layout_whole(weft_layout_t *layout, int tensor, int member);

/** @brief All of @p tensor on every one of @p members (replication). */
WEFT_API weft_status_t weft_layout_replicate(weft_layout_t *layout, int tensor, const int *members, int n);

/**
 * @brief Copy box @p box of a tensor with @p ndims dimensions and elements of @p elem
 * bytes from @p src, which holds @p src_box row-major, into @p dst, which holds
 * @p dst_box; @p box must lie inside both (e.g. to restore a missing piece of a plan into
 * a packed buffer: @p dst = the buffer plus the region's packed offset).
 * @return WEFT_OK; WEFT_ERR_INVALID_ARG for NULL pointers, a box outside either, or a
 *         box whose bytes (volume times @p elem) or whose end in some dimension do not
 *         fit in 64 bits.
 */
WEFT_API weft_status_t weft_box_copy(void *dst, const weft_box_t *dst_box, const void *src,
                   const weft_box_t *src_box, const weft_box_t *box, int ndims, size_t elem);

/** @brief Number of tensors. */
WEFT_API int weft_layout_num_tensors(const weft_layout_t *layout);
/** @brief Describe tensor @p index. */
WEFT_API weft_status_t weft_layout_tensor(const weft_layout_t *layout, int index, weft_tensor_info_t *info);
/** @brief Index of the tensor called @p name, or WEFT_ERR_INVALID_ARG. */
WEFT_API weft_status_t weft_layout_find(const weft_layout_t *layout, const char *name, int *index);

/** @brief Number of regions @p member holds (0 for a member the layout never names). */
WEFT_API int weft_layout_num_regions(const weft_layout_t *layout, int member);
/**
 * @brief Region @p k of @p member: its tensor, box, and where it starts in the member's
 * packed buffer. Any output may be NULL.
 */
WEFT_API weft_status_t weft_layout_region(const weft_layout_t *layout, int member, int k, int *tensor,
                                 weft_box_t *box, size_t *bytes, size_t *packed_offset);
/** @brief Bytes of @p member's packed buffer. */
WEFT_API size_t weft_layout_packed_bytes(const weft_layout_t *layout, int member);

/**
 * @brief Check that every element of every tensor is held by some member (what an old
 * layout must satisfy for a plan to be made from it).
 * @return WEFT_OK, or WEFT_ERR_INVALID_ARG naming the first tensor and a region nobody holds.
 */
WEFT_API weft_status_t weft_layout_check_complete(const weft_layout_t *layout);

/** @} */

/* ------------------------------------------------------------------------------------ */
/** @name Plans */
/** @{ */

/** @brief Optional parameters of weft_plan_create(). Zero-initialise, then set @c size. */
typedef struct weft_plan_params {
    size_t size;          /**< sizeof(weft_plan_params_t). */
    /** Host of each member id (host_of[id], ids 0..num_members-1), or NULL: among several
     * holders of a region a same-host source is preferred. */
    const int *host_of;
    int num_members;      /**< Entries in host_of. */
    /** Remote pieces are cut into slabs of at most this many bytes before sources are
     * chosen (0: 1 MiB); a smaller value balances senders more finely. */
    size_t balance_bytes;
    /** Nonzero: parts of the new layout that no member of the old one holds (their
     * holders died) are listed by weft_plan_missing() instead of refused; the engine
     * leaves them untouched for the caller to restore. */
    int allow_missing;
} weft_plan_params_t;

/** @brief One transfer of a plan. When src == dst it is a local copy. */
typedef struct weft_transfer {
    int src;            /**< Member that sends (holds it in the old layout). */
    int dst;            /**< Member that receives (holds it in the new layout). */
    int tensor;
    int src_region;     /**< Index among src's regions of the old layout. */
    int dst_region;     /**< Index among dst's regions of the new layout. */
    weft_box_t box;     /**< In tensor coordinates; inside both regions. */
    size_t bytes;
} weft_transfer_t;

/** @brief What a plan moves, for one member or (member = -1) for all. Set @c size
 * before weft_plan_stats(). */
typedef struct weft_plan_stats {
    size_t size;           /**< sizeof(weft_plan_stats_t), set by the caller. */
    size_t bytes_out;      /**< Sent to other members. */
    size_t bytes_in;       /**< Received from other members. */
    size_t bytes_local;    /**< Copied within a member. */
    size_t transfers_out;  /**< Remote transfers sent. */
    size_t transfers_in;   /**< Remote transfers received. */
    /** Bytes that must move: for each member, the bytes of its new regions it did not
     * hold in the old layout. A plan's bytes_in (member -1) always equals it. */
    size_t bytes_lower_bound;
    size_t max_bytes_out;  /**< Largest bytes_out of any member (member -1 only). */
    size_t bytes_missing;  /**< Of its new regions, held by nobody (allow_missing). */
} weft_plan_stats_t;

/**
 * @brief The transfers from @p old_layout to @p new_layout: every byte of a member's new
 * regions arrives exactly once, a byte it already held is a local copy, and among several
 * holders the source is chosen greedily to keep the most any member sends low.
 *
 * Deterministic: equal layouts and parameters give equal plans on every rank.
 * @return WEFT_OK; WEFT_ERR_INVALID_ARG if the layouts name different tensors (name,
 *         dtype or shape), or the old layout leaves part of a tensor unheld.
 */
WEFT_API weft_status_t weft_plan_create(const weft_layout_t *old_layout, const weft_layout_t *new_layout,
                               const weft_plan_params_t *params, weft_plan_t **plan);
/** @brief Free @p plan (NULL is a no-op). */
WEFT_API void weft_plan_free(weft_plan_t *plan);

/** @brief Number of transfers (local copies included). */
WEFT_API size_t weft_plan_num_transfers(const weft_plan_t *plan);
/** @brief Transfer @p i, in the plan's order (by source, destination, tensor, box). */
WEFT_API weft_status_t weft_plan_transfer(const weft_plan_t *plan, size_t i, weft_transfer_t *t);
/**
 * @brief Totals for @p member, or for the whole plan with @p member = -1.
 * @param[in,out] stats Its @c size set to sizeof(weft_plan_stats_t); the fields that fit
 *                      in @c size are filled, @c size is left as it was.
 * @return WEFT_OK; WEFT_ERR_INVALID_ARG for a NULL argument or a @c size smaller than
 *         this struct (zero included).
 */
WEFT_API weft_status_t weft_plan_stats(const weft_plan_t *plan, int member, weft_plan_stats_t *stats);
/** @brief Number of pieces of the new layout that nobody holds (allow_missing plans). */
WEFT_API size_t weft_plan_num_missing(const weft_plan_t *plan);
/** @brief Missing piece @p i: @c src and @c src_region are -1; @c dst, @c dst_region,
 * @c tensor and @c box say what the destination must restore by other means. */
WEFT_API weft_status_t weft_plan_missing(const weft_plan_t *plan, size_t i, weft_transfer_t *t);
/** @brief A 64-bit digest of the plan (xxHash); ranks that built different plans get
 * different digests. */
WEFT_API uint64_t weft_plan_digest(const weft_plan_t *plan);
/** @brief Print per-member bytes in/out and transfer counts, and the lower bound. */
WEFT_API weft_status_t weft_plan_print(const weft_plan_t *plan, FILE *out);

/** @} */

/* ------------------------------------------------------------------------------------ */
/** @name After a membership change */
/** @{ */

/**
 * @brief A copy of @p layout that keeps only the regions of @p members (the survivors of
 * a repair), in their order, so their packed buffers are unchanged.
 */
WEFT_API weft_status_t weft_layout_keep(const weft_layout_t *layout, const int *members, int n,
                               weft_layout_t **out);

/**
 * @brief The re-cut after a repair that moves the least: each of @p members keeps every
 * region it holds in @p layout, first and in its order (so its packed buffer begins as
 * before), then gets an n-th, cut along the first dimension, of each part that only
 * members not in @p members held (counted once where several of them held it), appended
 * in the order of @p layout's regions. Unlike the even re-cut of
 * weft_migrate_replan_flat, nothing a member holds moves: only the leavers' parts do,
 * and a restore from live buffers (weft_snapshot_restore_live) into it leaves every
 * survivor's own shard in place. Shares are even over the leavers' bytes, not over the
 * whole (a member that held more keeps more). Computed locally, identically on every
 * member.
 * @param[in] members Member ids, each once; ids that hold nothing (newcomers) get their
 *            share of the leavers' parts only.
 * @return WEFT_OK, WEFT_ERR_INVALID_ARG (NULL argument, no members, an id twice) or
 *         WEFT_ERR_NO_MEMORY.
 */
WEFT_API weft_status_t weft_layout_absorb(const weft_layout_t *layout, const int *members, int n,
                                 weft_layout_t **out);

/**
 * @brief The flat (ZeRO) re-cut after a repair or a grow: a new layout with every tensor
 * of @p old, flat over the members of @p g in group rank order, and the plan to it from
 * what members of @p g hold in @p old. Regions whose every holder left are listed by
 * weft_plan_missing(). Computed locally, identically on every member.
 */
WEFT_API weft_status_t weft_migrate_replan_flat(const weft_layout_t *old, const weft_group_t *g,
                                       weft_layout_t **new_layout, weft_plan_t **plan);

/** @} */

/* ------------------------------------------------------------------------------------ */
/** @name Running a plan */
/** @{ */

/** @brief Optional parameters of weft_imigrate(). Zero-initialise, then set @c size. */
typedef struct weft_migrate_params {
    size_t size;           /**< sizeof(weft_migrate_params_t). */
    /** Priority of each tensor (by index), higher moves first; NULL: all equal. Must be
     * equal on all members. */
    const int *priority;
    int num_priorities;    /**< Entries in @c priority. */
    /** Bytes of chunks staged in memory at once (chunks that are not contiguous in the
     * source or destination region); 0: 64 MiB. At least one chunk is always allowed.
     * Chunks that go through NCCL use instead, per peer and direction, WEFT_MIGRATE_WINDOW
     * pinned host buffers of the largest chunk (and as many device buffers where chunks
     * are not contiguous). */
    size_t max_staged_bytes;
    /** With a plan from weft_migrate_resume(): the new buffer of the failed migration
     * (what this member had received before it failed), read by transfers whose source
     * is a piece received then. NULL otherwise. */
    const void *resume_buf;
} weft_migrate_params_t;

/**
 * @brief Start running @p plan on group @p g: this member sends what it holds of the old
 * layout and receives what the new one gives it. Collective over @p g: every member
 * starts the same plan, in the same order relative to other migrations and collectives.
 *
 * Data moves in chunks of WEFT_MIGRATE_CHUNK bytes, WEFT_MIGRATE_WINDOW at a time per
 * pair of members, each checked with an xxHash checksum; a chunk that arrives corrupted
 * is sent again once, and a second corruption fails the migration. Local copies (data a
 * member keeps) are chunked too. The migration ends with one small agreement, so every
 * member gets the same result, unless a member dies during that agreement: then some
 * members may already have returned WEFT_OK while the others get WEFT_ERR_PEER_FAILED
 * (no protocol can close that window). After a repair, agree on what was committed
 * before using the new buffers (examples/elastic_trainer.c restores every member from
 * its snapshots after a membership change instead).
 *
 * @param[in]  old_buf This member's packed buffer of the old layout
 *                     (weft_layout_packed_bytes(); NULL if it holds nothing). Any buffer
 *                     may be CUDA device memory: its chunks are then staged in host
 *                     memory, except where every member's chunks to and from other members
 *                     are device memory and the group's transport selection sends CUDA
 *                     buffers through NCCL: then they go GPU to GPU with NCCL
 *                     point-to-point on a stream of weft's own, so finish the GPU work
 *                     that writes @p old_buf before the start, and start GPU work on
 *                     @p new_buf only after completion.
 * @param[out] new_buf Its packed buffer of the new layout; must not overlap @p old_buf.
 *                     Both stay in use until the request completes. If it fails, sends of
 *                     the failed attempt may still read @p old_buf for a while: keep it
 *                     unchanged and allocated until a later migration on the repaired
 *                     group has completed (every survivor has repaired by then and dropped
 *                     what the failed attempt sent), or until weft_finalize().
 * @param[in]  params  Optional (NULL for defaults).
 * @param[out] req     Wait for it with weft_wait() / weft_test(); NULL if done inline.
 * @return WEFT_INPROGRESS or WEFT_OK; WEFT_ERR_INVALID_ARG if the plan names a member not
 *         in @p g; at completion WEFT_ERR_MISMATCH if members started different plans (or
 *         chunk sizes or priorities), WEFT_ERR_TRANSPORT if a chunk arrived corrupted
 *         twice, WEFT_ERR_PEER_FAILED / WEFT_ERR_REVOKED if a member failed.
 */
WEFT_API weft_status_t weft_imigrate(weft_group_t *g, const weft_plan_t *plan,
                                     const void *old_buf, void *new_buf,
                                     const weft_migrate_params_t *params, weft_req_t **req);

/**
 * @brief After migration @p failed failed and @p g was repaired: the plan that takes the
 * survivors to @p target from what they hold now, which is their regions of @p old (the
 * failed plan's old layout, in their old buffers) and every chunk of the failed plan's
 * new layout they had received from another member and checked (in its new buffer).
 * Bytes that arrived before the failure are not sent again. Collective over @p g: the
 * survivors exchange which chunks they received (one allgather), so every member gets
 * the same plan. Parts of @p target that no survivor holds are listed by
 * weft_plan_missing() (the plan is made with allow_missing).
 *
 * Run it with weft_imigrate(g, plan, old_buf, target_buf, params) and
 * params->resume_buf = the failed migration's new buffer; the target buffer must overlap
 * neither. In the plan's transfers, @c src_region counts the source's regions of @p old
 * first, then the pieces it received, in the order the exchange lists them.
 * @p failed stays valid (free it with weft_req_free() after this call); a migration
 * started with weft_migrate() cannot be resumed, since its request is gone.
 *
 * @param[in]  failed  The request of the failed migration (completed, not freed).
 * @param[in]  params  Optional plan parameters (host_of, balance_bytes); allow_missing is
 *                     always on.
 * @return WEFT_OK; WEFT_ERR_INVALID_ARG if @p failed is not a completed migration request,
 *         or @p old does not match its plan; the errors of a collective on @p g.
 */
WEFT_API weft_status_t weft_migrate_resume(weft_group_t *g, weft_req_t *failed,
                                           const weft_layout_t *old,
                                           const weft_layout_t *target,
                                           const weft_plan_params_t *params, weft_plan_t **plan);

/** @brief weft_imigrate() and wait for it (the context's default timeout). */
WEFT_API weft_status_t weft_migrate(weft_group_t *g, const weft_plan_t *plan, const void *old_buf,
                           void *new_buf, const weft_migrate_params_t *params);

/** @} */

#ifdef __cplusplus
}
#endif

#endif
