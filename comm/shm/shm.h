/*
 * Intra-node collectives through a shared-memory segment per group (internal).
 *
 * When every member of a group runs on one host, each member maps a control segment
 * that all members of the group's epoch share, on its first collective of the epoch
 * (comm/shm/shm_seg.c); from then on every collective of the group exchanges its header
 * through it instead of messages, and small ones carry their data in it. The first large
 * collective maps a second, data segment for the chunks (comm/coll/shm.c). Both are
 * allocated in full when created (posix_fallocate), so a small /dev/shm gives a clear
 * error at creation, which every member sees, never a SIGBUS later. Layout, for P ranks:
 *
 *   control:  header        one cache line: magic, status, geometry, members attached
 *             ctl[P]        4 cache lines per rank, each a counter only that rank
 *                           writes: slot_done, staged, reduced, copied
 *             slot[P][D]    a line of sequence number and header, then small_max bytes
 *   data:     header
 *             stage[P][NB]  chunk bytes each: inputs staged for the peers
 *             res[P][NB]    chunk bytes each: reduced sub-blocks for the peers
 *
 * Collective i (numbered per segment, in issue order) uses slot i % D of every rank (D,
 * the depth: 128, or fewer so that there are at most 512 slots in all, and at least 2;
 * about 2 MiB with 4 KiB slots); a rank writes it once every peer has finished reading
 * its slot of collective i - D (slot_done) and it has itself checked the peers' headers
 * of collective i - D. A small broadcast does not wait for the peers' headers
 * (comm/coll/shm.c): the root returns once its data is posted, so it can run up to D
 * broadcasts ahead of the slowest reader, and the headers are checked afterwards, as
 * they arrive (verified); slot_done is how far that check got.
 *
 * Chunks of large collectives are numbered across collectives; chunk g uses
 * stage and res buffer g % NB, and the three counters say how far each rank got:
 * a rank stages chunk g once every peer has copied chunk g - NB, reduces once every peer
 * staged g, and copies once every peer reduced g. Counters only grow, so a value read is
 * never stale in a way that matters, and no lock is taken.
 */
#ifndef WEFT_SHM_H
#define WEFT_SHM_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "weft/status.h"
#include "util/assert.h"

struct weft_ctx;
struct weft_group;

#define WEFT_SHM_MAX_RANKS 256 /* larger groups collect over messages */
#define WEFT_SHM_NB 2          /* chunk buffers per rank (double buffering) */
#define WEFT_SHM_CTL_BYTES 256 /* four counters, a cache line each */
#define WEFT_SHM_SLOT_HDR 40   /* sequence (8) + collective header (32) */
#define WEFT_SHM_DEPTH 128 /* slots per rank at most: WEFT_SHM_SLOTS / ranks, at least 2 */
#define WEFT_SHM_SLOTS 512     /* slots in all */

enum weft_shm_ctr { WEFT_SHM_SLOT_DONE = 0, WEFT_SHM_STAGED = 1, WEFT_SHM_REDUCED = 2,
                    WEFT_SHM_COPIED = 3 };

/* One mapped segment. */
typedef struct weft_shm_region {
    uint8_t *base;
    size_t len;
    bool unlinked; /* the name is gone (every member attached) */
    char name[80];
} weft_shm_region_t;

typedef struct weft_shm {
    weft_shm_region_t ctl, data;
    int data_state; /* 0: not mapped yet; 1: mapped; -1: could not be made (all know) */
    int rank, size;
    uint32_t epoch;    /* of the group it serves */
    size_t small_max;  /* data bytes of a slot */
    size_t chunk;      /* bytes of a stage or res buffer */
    size_t slot_bytes; /* WEFT_SHM_SLOT_HDR + small_max, rounded up to a cache line */
    uint64_t depth;    /* slots per rank: a power of two */
    size_t slots_off;         /* in ctl */
    size_t stage_off, res_off; /* in data */
    uint64_t issued;     /* collectives numbered so far on this segment */
    uint64_t turn;       /* the collective this rank may run now (they run in order) */
    uint64_t chunk_next; /* chunks numbered so far */
    bool broken;         /* a collective was abandoned half way */
    /* The next epoch's control segment, made and mapped ahead of time (comm/shm/shm_seg.c,
     * spare_prepare): base NULL until mapped; taken over by the next epoch's state. */
    weft_shm_region_t next;
    bool next_done; /* mapped, or given up for this epoch */
    bool next_made; /* this member created it: it removes the name if nobody uses it */
    /* The peers' headers of collectives below this were compared with this rank's; its
     * slot_done counter. Only small broadcasts leave it behind turn. */
    uint64_t verified;
    uint64_t peers_done; /* the least slot_done of the peers, as last read */
    bool late;          /* that comparison found a disagreement not reported yet */
    char late_why[272]; /* what it found */
} weft_shm_t;

static inline uint64_t *weft__shm_ctr(const weft_shm_t *s, int rank, enum weft_shm_ctr k)
{
    return (uint64_t *)(s->ctl.base + 64 + (size_t)rank * WEFT_SHM_CTL_BYTES + (size_t)k * 64);
}
static inline uint8_t *weft__shm_slot(const weft_shm_t *s, int rank, uint64_t idx)
{
    return s->ctl.base + s->slots_off +
           ((size_t)rank * s->depth + (size_t)(idx & (s->depth - 1))) * s->slot_bytes;
}
static inline uint8_t *weft__shm_stage(const weft_shm_t *s, int rank, uint64_t chunk)
{
    return s->data.base + s->stage_off +
           ((size_t)rank * WEFT_SHM_NB + chunk % WEFT_SHM_NB) * s->chunk;
}
static inline uint8_t *weft__shm_res(const weft_shm_t *s, int rank, uint64_t chunk)
{
    return s->data.base + s->res_off + ((size_t)rank * WEFT_SHM_NB + chunk % WEFT_SHM_NB) * s->chunk;
}
static inline uint64_t weft__shm_load(const uint64_t *p)
{
    return __atomic_load_n(p, __ATOMIC_ACQUIRE);
}
static inline void weft__shm_store(uint64_t *p, uint64_t v)
{
    /* Counters, sequence numbers and the magic only grow, and only their owner writes. */
    WEFT_ASSERT(v >= __atomic_load_n(p, __ATOMIC_RELAXED));
    __atomic_store_n(p, v, __ATOMIC_RELEASE);
}

/*
 * Make sure @p g's shared-memory state fits its current epoch: on the first call of an
 * epoch, map the epoch's segment (whichever member comes first creates it; no message is
 * exchanged, so nonblocking collectives stay nonblocking), or go without when not every
 * member shares this host, WEFT_COLL_SHM=off, or the group is larger than
 * WEFT_SHM_MAX_RANKS. Every member decides the same from the same facts, so settings
 * must be equal on all ranks. Afterwards g->shm is the segment or NULL. Fails (and the
 * collective with it) when the segment cannot be created or mapped: the other members
 * would use it, so this rank cannot fall back alone.
 */
weft_status_t weft__shm_ensure(struct weft_group *g);
/* A collective of @p g's epoch @p epoch was abandoned by this member: mark its segment (if
 * that epoch collects through one) so that every member's next step on it fails. */
void weft__shm_mark_abandoned(struct weft_group *g, uint32_t epoch);
/* The group rank of the member that abandoned a collective on @p s, or -1. */
int weft__shm_abandoned(const weft_shm_t *s);
/* Unmap @p g's segments (group destruction). */
void weft__shm_release(struct weft_group *g);
/*
 * Map @p g's data segment if that was not tried yet this epoch. WEFT_OK with
 * s->data_state 1 (mapped) or -1 (it could not be made, and every member learns the same
 * from its creator: large collectives then move their data with messages); an error when
 * this rank alone failed.
 */
weft_status_t weft__shm_data(struct weft_group *g);

/*
 * weft_init, once the store address, token and namespace are known: derive the names of
 * the context's segments (comm/shm/shm_job.h); on local rank 0, remove what jobs that no
 * longer run left in /dev/shm. ctx->shm_job.lock_fd must be -1 already.
 */
weft_status_t weft__shm_ctx_init(struct weft_ctx *ctx);
/* weft_finalize, after the groups: release the job lock; the last of the job's processes
 * on this host to do so removes the job's names. */
void weft__shm_ctx_fini(struct weft_ctx *ctx);

/*
 * Whether the segment open on @p fd is this user's alone: a regular file owned by the
 * effective user that nobody else may read or write. Another local user who guessed a
 * segment's name and made it first would otherwise be handed the collectives' data (and
 * could write into it). False with the reason in @p why (may be NULL).
 */
bool weft__shm_fd_private(int fd, char *why, size_t why_len);

#endif
