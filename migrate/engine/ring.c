/*
 * Same-host migration rings (migrate/engine/ring.h): shared memory made and offered by the
 * receiver, mapped by the sender, both through transports/stream_memfd.c.
 */
#include <errno.h>
#include <string.h>

/* The streaming state's layout (stable since xxHash 0.8.0), for a state on the stack. */
#define XXH_STATIC_LINKING_ONLY
#include "migrate/engine/ring.h"
#include "migrate/engine/xxh.h"

#define PIECE (16u << 10) /* checksummed and copied while in the first-level cache */


bool weft__ring_fits(size_t slot, uint32_t nchunks)
{
    return slot > 0 && nchunks / WEFT_RING_SHARE >= WEFT_RING_MIN_SLOTS &&
           WEFT_RING_MIN_SLOTS * slot <= WEFT_RING_MAX_TOTAL;
}

uint32_t weft__ring_slots(size_t slot, uint32_t nchunks, size_t window)
{
    size_t least = window + 1 > WEFT_RING_MIN_SLOTS ? window + 1 : WEFT_RING_MIN_SLOTS;
    least = least > WEFT_RING_MAX_SLOTS ? WEFT_RING_MAX_SLOTS : least;
    size_t most = WEFT_RING_BYTES / slot;
    most = most > WEFT_RING_MAX_SLOTS ? WEFT_RING_MAX_SLOTS : most;
    size_t n = nchunks / WEFT_RING_SHARE;
    n = n < most ? n : most;
    return (uint32_t)(n > least ? n : least);
}

static size_t ring_len(size_t chunk, uint32_t slots)
{
    return WEFT_RING_HDR + (size_t)slots * chunk;
}

static void ring_clear(weft_mig_ring_t *r)
{
    memset(r, 0, sizeof(*r));
    r->mem.fd = -1;
}

bool weft__ring_make(weft_mig_ring_t *r, size_t chunk, uint32_t slots, weft_mig_offer_t *offer)
{
    memset(offer, 0, sizeof(*offer));
    ring_clear(r);
    if (weft__tl_stream_memfd.shm->create(ring_len(chunk, slots), &r->mem, &r->own) != WEFT_OK) {
        return false; /* errno says why */
    }
    r->chunk = chunk;
    r->slots = slots;
    static _Atomic uint64_t next_id = 1;
    r->id = next_id++;
    offer->mem = r->own;
    offer->slots = slots;
    offer->id = r->id;
    return true;
}

bool weft__ring_map(weft_mig_ring_t *r, const weft_mig_offer_t *offer, size_t chunk)
{
    ring_clear(r);
    if (offer->slots < 2 || offer->slots > WEFT_RING_MAX_SLOTS ||
        offer->mem.len != ring_len(chunk, (uint32_t)offer->slots)) {
        errno = EINVAL;
        return false;
    }
    if (weft__tl_stream_memfd.shm->map(&offer->mem, &r->mem) != WEFT_OK) {
        return false; /* errno says why */
    }
    r->chunk = chunk;
    r->slots = (uint32_t)offer->slots;
    r->id = offer->id;
    return true;
}

void weft__ring_free(weft_mig_ring_t *r)
{
    weft__tl_stream_memfd.shm->unmap(&r->mem);
    ring_clear(r);
}

uint64_t weft__hash_copy(void *dst, const void *src, size_t n, bool after)
{
    XXH3_state_t st;
    XXH3_64bits_reset(&st);
    uint8_t *d = dst;
    const uint8_t *s = src;
    for (size_t o = 0; o < n; o += PIECE) {
        size_t k = n - o < PIECE ? n - o : PIECE;
        if (!after) {
            XXH3_64bits_update(&st, s + o, k);
        }
        memcpy(d + o, s + o, k);
        if (after) {
            XXH3_64bits_update(&st, d + o, k);
        }
    }
    return XXH3_64bits_digest(&st);
}
