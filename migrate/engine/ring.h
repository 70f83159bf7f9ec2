/*
 * A same-host migration stream's shared-memory ring (internal). The receiver owns it:
 * shared memory of a header page and `slots` chunk-sized slots, allocated in full when
 * made, and offered to the sender in one message; the sender maps the offer. Both are
 * done by the memfd stream mechanism (transports/stream_memfd.c, the same permission as
 * the reads of transports/stream_cma.c); this file keeps the ring's protocol. Chunk q of
 * the stream (counted from 0 in the order the sender posts) goes in slot q % slots. The
 * sender checksums each piece of the chunk and copies it in while it is in its cache; the
 * receiver copies it out and checksums what it wrote, then records slot q % slots free
 * again: done[q % slots] = q / slots + 1. The sender writes chunk q only once
 * done[q % slots] >= q / slots, so it may run up to `slots` chunks ahead. Counters only
 * grow and only the receiver writes them, so no lock is taken.
 */
#ifndef WEFT_MIGRATE_RING_H
#define WEFT_MIGRATE_RING_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "transports/stream.h"
#include "util/assert.h"

#define WEFT_RING_HDR 4096        /* the counters, a cache line each */
#define WEFT_RING_MAX_SLOTS 64    /* WEFT_RING_HDR / 64 */
#define WEFT_RING_BYTES (4u << 20) /* a ring's slots take at most about this much */
#define WEFT_RING_SHARE 16        /* ... and at most this fraction of their stream */
#define WEFT_RING_MIN_SLOTS 8     /* shorter streams (< 128 chunks) do without */
#define WEFT_RING_MAX_TOTAL (16u << 20) /* streams whose 8 slots take more do without */
/* Rings a process makes (and maps) at most, busy or kept: idle ones are freed for a new
 * one, and past that a stream goes without (16 rings of 4 MiB, however many same-host
 * peers send to this rank). */
#define WEFT_RING_BUDGET (64u << 20)
/* After a ring moved (the sender put a chunk in, the receiver got one's header), the
 * member's idle waits yield for this long instead of sleeping (ctx->spin_until_ns): its
 * peer's next step is microseconds away and wakes nobody. A sleep of up to 250 us on
 * either side would leave the other with a full or an empty ring. */
#define WEFT_RING_SPIN_NS 200000

struct weft_ctx;

typedef struct weft_mig_ring {
    weft_tl_stream_region_t mem; /* base NULL: none; fd: the owner's, -1 on the sender */
    weft_tl_stream_offer_t own;  /* the owner's offer of it; zero on the sender */
    size_t chunk;
    uint32_t slots;
    uint64_t id; /* its number in the owner process */
} weft_mig_ring_t;

/* The offer message: the memory's offer (owner pid, its descriptor, length), slots (0
 * when there is no ring), and the ring's number in its owner (a sender that mapped that
 * ring before maps it no more). Five 64-bit words. */
typedef struct weft_mig_offer {
    weft_tl_stream_offer_t mem;
    uint64_t slots, id;
} weft_mig_offer_t;

/*
 * Whether a stream of @p nchunks chunks of at most @p slot bytes goes through a ring: at
 * least WEFT_RING_MIN_SLOTS * WEFT_RING_SHARE chunks, and WEFT_RING_MIN_SLOTS slots of at
 * most WEFT_RING_MAX_TOTAL. Computed alike by both members from facts they share.
 */
bool weft__ring_fits(size_t slot, uint32_t nchunks);
/*
 * The receiver's choice of slots for such a stream: a WEFT_RING_SHARE-th of its chunks,
 * at least WEFT_RING_MIN_SLOTS and @p window + 1 (the chunks the receiver works on at
 * once, and one the sender fills meanwhile; with no slack the two take turns), at most
 * WEFT_RING_MAX_SLOTS and about WEFT_RING_BYTES where the minimum allows. Making and
 * mapping a ring costs about 1 ms per MiB here (the kernel allocates and zeroes its
 * pages in both processes), against some 55 us of work saved per MiB moved through it:
 * a ring pays for itself over about 20 times its size, and it is kept for the next
 * migration.
 */
uint32_t weft__ring_slots(size_t slot, uint32_t nchunks, size_t window);

/* The receiver: make @p r and fill @p offer (slots 0 and errno set when it cannot). */
bool weft__ring_make(weft_mig_ring_t *r, size_t chunk, uint32_t slots, weft_mig_offer_t *offer);
/* The sender: map the ring of @p offer for chunks of @p chunk bytes; false (errno) when
 * there is none or it cannot, and the stream goes without. */
bool weft__ring_map(weft_mig_ring_t *r, const weft_mig_offer_t *offer, size_t chunk);
void weft__ring_free(weft_mig_ring_t *r);
/* Rings made and mapped are counted, and the budget lowered by tests, in the context's
 * fault table (comm/fault.h: counts.rings_made, rings_mapped; ring_budget). */

/*
 * Rings kept between migrations, per context (migrate/engine/ring_cache.c; the context's lock
 * held). A 4 MiB ring costs about 4 ms to make, map and free (as much as
 * moving 40 MiB), so each member keeps one idle ring per same-host peer and direction:
 *  - the receiver takes its idle ring for @p member when the geometry fits (its counters
 *    reset: the sender's writes of the ring's last stream were all consumed before that
 *    stream's verdict), or makes one, and fills @p offer;
 *  - the sender takes its mapping of the offered ring (same owner pid and ring id), or
 *    maps it;
 *  - either gives it back when its stream ends: kept only when the stream finished (no
 *    write of the other side can still come), else freed. Rings of failed peers are
 *    freed when next looked at, and all of them at weft_finalize.
 * NULL (errno set) when there is none.
 */
weft_mig_ring_t *weft__ring_take_owned(struct weft_ctx *ctx, int member, size_t chunk,
                                       uint32_t slots, weft_mig_offer_t *offer);
weft_mig_ring_t *weft__ring_take_mapped(struct weft_ctx *ctx, int member,
                                        const weft_mig_offer_t *offer, size_t chunk);
void weft__ring_give_back(struct weft_ctx *ctx, weft_mig_ring_t *r, bool keep);

static inline uint8_t *weft__ring_slot(const weft_mig_ring_t *r, uint64_t q)
{
    WEFT_ASSERT(r->slots > 0 && r->mem.base != NULL);
    return (uint8_t *)r->mem.base + WEFT_RING_HDR + (size_t)(q % r->slots) * r->chunk;
}
static inline uint64_t *weft__ring_done(const weft_mig_ring_t *r, uint64_t q)
{
    return (uint64_t *)((uint8_t *)r->mem.base + (size_t)(q % r->slots) * 64);
}
/* The sender may write chunk q. */
static inline bool weft__ring_free_for(const weft_mig_ring_t *r, uint64_t q)
{
    return q < r->slots ||
           __atomic_load_n(weft__ring_done(r, q), __ATOMIC_ACQUIRE) >= q / r->slots;
}
/* The receiver is finished with chunk q. */
static inline void weft__ring_release(const weft_mig_ring_t *r, uint64_t q)
{
    /* Only the receiver writes it, one pass of the slot at a time. */
    WEFT_ASSERT(__atomic_load_n(weft__ring_done(r, q), __ATOMIC_RELAXED) == q / r->slots);
    __atomic_store_n(weft__ring_done(r, q), q / r->slots + 1, __ATOMIC_RELEASE);
}

/* Checksum (XXH3-64) @p n bytes of @p src piece by piece, copying each piece to @p dst
 * right after (the sender), or copy each piece and checksum the copy (the receiver,
 * @p after). Either way the bytes are read from memory once. */
uint64_t weft__hash_copy(void *dst, const void *src, size_t n, bool after);

#endif
