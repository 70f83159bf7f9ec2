/*
 * Same-host migration rings kept between migrations (migrate/engine/ring.h): one list per
 * context, under its lock, with at most one idle ring per peer and direction, and at
 * most WEFT_RING_BUDGET bytes of rings made here (and as many mapped).
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "comm/core.h"
#include "comm/fault.h"
#include "migrate/engine/ring.h"

typedef struct ring_entry {
    weft_mig_ring_t ring; /* first: a stream's pointer is the entry's */
    struct ring_entry *next;
    int member;
    bool owner;   /* made here (this member receives), or mapped (it sends) */
    bool busy;    /* a stream has it */
    uint64_t pid; /* mapped: the owner's */
} ring_entry_t;

struct weft_mig_rings {
    ring_entry_t *head;
    size_t bytes[2]; /* of the rings listed: [0] mapped, [1] made here */
};

static void entry_free(struct weft_mig_rings *rs, ring_entry_t *e)
{
    rs->bytes[e->owner] -= e->ring.mem.len;
    weft__ring_free(&e->ring);
    free(e);
}

/* The bytes of rings kept per direction: WEFT_RING_BUDGET, unless a test lowered it. */
static size_t ring_budget(weft_ctx_t *ctx)
{
    size_t b = weft__ctx_faults(ctx)->ring_budget;
    return b != 0 ? b : WEFT_RING_BUDGET;
}

/* Room for a ring of @p len bytes in direction @p owner within @p budget, made by freeing
 * idle rings (of any peer) where needed; false when the busy ones fill it. */
static bool make_room(struct weft_mig_rings *rs, bool owner, size_t len, size_t budget)
{
    for (ring_entry_t **pp = &rs->head; *pp != NULL && rs->bytes[owner] + len > budget;) {
        ring_entry_t *e = *pp;
        if (!e->busy && e->owner == owner) {
            *pp = e->next;
            entry_free(rs, e);
            continue;
        }
        pp = &e->next;
    }
    return rs->bytes[owner] + len <= budget;
}

/* The key of the context's ring cache (weft__ctx_ext). */
static const char rings_key;

static void rings_free(weft_ctx_t *ctx, void *value)
{
    (void)ctx;
    struct weft_mig_rings *rs = value;
    for (ring_entry_t *e = rs->head, *next; e != NULL; e = next) {
        next = e->next;
        entry_free(rs, e); /* a stream holding one was freed with its request */
    }
    free(rs);
}

/* The context's ring cache, made on first use; NULL when out of memory. */
static struct weft_mig_rings *rings(weft_ctx_t *ctx)
{
    struct weft_mig_rings *rs = weft__ctx_ext(ctx, &rings_key);
    if (rs == NULL && (rs = calloc(1, sizeof(*rs))) != NULL &&
        weft__ctx_ext_set(ctx, &rings_key, rs, rings_free) != WEFT_OK) {
        free(rs);
        rs = NULL;
    }
    return rs;
}

/* Free the idle entries of failed peers; of the idle entries of @p member in direction
 * @p owner, return the first, unlinked, when @p fits says it fits, and free the rest. */
static ring_entry_t *sweep(weft_ctx_t *ctx, struct weft_mig_rings *rs, int member, bool owner,
                           bool (*fits)(const ring_entry_t *e, const void *arg), const void *arg)
{
    ring_entry_t *found = NULL;
    for (ring_entry_t **pp = &rs->head; *pp != NULL;) {
        ring_entry_t *e = *pp;
        bool dead = weft__peer_status(ctx, e->member) != WEFT_OK;
        bool mine = !e->busy && e->member == member && e->owner == owner;
        if (!e->busy && (dead || (mine && found != NULL))) {
            *pp = e->next;
            entry_free(rs, e);
            continue;
        }
        if (mine && found == NULL) {
            *pp = e->next;
            if (fits(e, arg)) {
                found = e;
                rs->bytes[owner] -= e->ring.mem.len; /* counted again when linked */
            } else {
                entry_free(rs, e); /* another geometry or ring: not used again */
            }
            continue;
        }
        pp = &e->next;
    }
    return found;
}

static void link_busy(struct weft_mig_rings *rs, ring_entry_t *e, int member, bool owner)
{
    rs->bytes[owner] += e->ring.mem.len;
    e->member = member;
    e->owner = owner;
    e->busy = true;
    e->next = rs->head;
    rs->head = e;
}

typedef struct {
    size_t chunk;
    uint32_t slots;
} geometry_t;

static bool fits_geometry(const ring_entry_t *e, const void *arg)
{
    const geometry_t *g = arg;
    return e->ring.chunk == g->chunk && e->ring.slots == g->slots;
}

weft_mig_ring_t *weft__ring_take_owned(weft_ctx_t *ctx, int member, size_t chunk, uint32_t slots,
                                       weft_mig_offer_t *offer)
{
    memset(offer, 0, sizeof(*offer));
    struct weft_mig_rings *rs = rings(ctx);
    if (rs == NULL) {
        errno = ENOMEM;
        return NULL;
    }
    geometry_t g = {chunk, slots};
    ring_entry_t *e = sweep(ctx, rs, member, true, fits_geometry, &g);
    if (e != NULL) {
        memset(e->ring.mem.base, 0, WEFT_RING_HDR); /* counters from 0, as a new ring's */
        offer->mem = e->ring.own;
        offer->slots = e->ring.slots;
        offer->id = e->ring.id;
    } else {
        if (!make_room(rs, true, WEFT_RING_HDR + (size_t)slots * chunk, ring_budget(ctx))) {
            errno = ENOBUFS; /* rings of streams in flight fill the budget */
            return NULL;
        }
        if ((e = calloc(1, sizeof(*e))) == NULL) {
            errno = ENOMEM;
            return NULL;
        }
        if (!weft__ring_make(&e->ring, chunk, slots, offer)) {
            int err = errno;
            free(e);
            errno = err;
            return NULL;
        }
        atomic_fetch_add(&weft__ctx_faults(ctx)->counts.rings_made, 1);
    }
    link_busy(rs, e, member, true);
    return &e->ring;
}

static bool fits_offer(const ring_entry_t *e, const void *arg)
{
    const weft_mig_offer_t *o = arg;
    return e->pid == o->mem.pid && e->ring.id == o->id && e->ring.mem.len == o->mem.len &&
           e->ring.slots == o->slots;
}

weft_mig_ring_t *weft__ring_take_mapped(weft_ctx_t *ctx, int member, const weft_mig_offer_t *offer,
                                        size_t chunk)
{
    struct weft_mig_rings *rs = rings(ctx);
    if (rs == NULL) {
        errno = ENOMEM;
        return NULL;
    }
    ring_entry_t *e = sweep(ctx, rs, member, false, fits_offer, offer);
    if (e != NULL && e->ring.chunk != chunk) {
        weft__ring_free(&e->ring); /* unlinked and uncounted by sweep() */
        free(e);
        e = NULL;
    }
    if (e == NULL) {
        if (!make_room(rs, false, offer->mem.len, ring_budget(ctx))) {
            errno = ENOBUFS;
            return NULL;
        }
        if ((e = calloc(1, sizeof(*e))) == NULL) {
            errno = ENOMEM;
            return NULL;
        }
        if (!weft__ring_map(&e->ring, offer, chunk)) {
            int err = errno;
            free(e);
            errno = err;
            return NULL;
        }
        e->pid = offer->mem.pid;
        atomic_fetch_add(&weft__ctx_faults(ctx)->counts.rings_mapped, 1);
    }
    link_busy(rs, e, member, false);
    return &e->ring;
}

void weft__ring_give_back(weft_ctx_t *ctx, weft_mig_ring_t *r, bool keep)
{
    if (r == NULL) {
        return;
    }
    ring_entry_t *e = (ring_entry_t *)r;
    struct weft_mig_rings *rs = weft__ctx_ext(ctx, &rings_key);
    if (keep) {
        e->busy = false; /* the next take keeps at most one idle per peer and direction */
        return;
    }
    for (ring_entry_t **pp = &rs->head; *pp != NULL; pp = &(*pp)->next) {
        if (*pp == e) {
            *pp = e->next;
            break;
        }
    }
    entry_free(rs, e);
}
