/*
 * Same-host migration rings kept between migrations (migrate/ring.h): one list per
 * context, under its lock, with at most one idle ring per peer and direction.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "comm/ctx.h"
#include "migrate/ring.h"

typedef struct ring_entry {
    weft_mig_ring_t ring; /* first: a stream's pointer is the entry's */
    struct ring_entry *next;
    int member;
    bool owner; /* made here (this member receives), or mapped (it sends) */
    bool busy;  /* a stream has it */
    uint64_t pid; /* mapped: the owner's */
} ring_entry_t;

struct weft_mig_rings {
    ring_entry_t *head;
};

static void entry_free(ring_entry_t *e)
{
    weft__ring_free(&e->ring);
    free(e);
}

static void rings_free(weft_ctx_t *ctx)
{
    if (ctx->mig_rings == NULL) {
        return;
    }
    for (ring_entry_t *e = ctx->mig_rings->head, *next; e != NULL; e = next) {
        next = e->next;
        entry_free(e); /* a stream still holding one has been freed with its request */
    }
    free(ctx->mig_rings);
    ctx->mig_rings = NULL;
}

static struct weft_mig_rings *rings(weft_ctx_t *ctx)
{
    if (ctx->mig_rings == NULL && (ctx->mig_rings = calloc(1, sizeof(*ctx->mig_rings))) != NULL) {
        ctx->mig_rings_free = rings_free;
    }
    return ctx->mig_rings;
}

/* Free the idle entries of failed peers; of the idle entries of @p member in direction
 * @p owner, return the first, unlinked, when @p fits says it fits, and free the rest. */
static ring_entry_t *sweep(weft_ctx_t *ctx, struct weft_mig_rings *rs, int member, bool owner,
                           bool (*fits)(const ring_entry_t *e, const void *arg), const void *arg)
{
    ring_entry_t *found = NULL;
    for (ring_entry_t **pp = &rs->head; *pp != NULL;) {
        ring_entry_t *e = *pp;
        bool dead = e->member < ctx->npeers && ctx->peers[e->member].failed != WEFT_OK;
        bool mine = !e->busy && e->member == member && e->owner == owner;
        if (!e->busy && (dead || (mine && found != NULL))) {
            *pp = e->next;
            entry_free(e);
            continue;
        }
        if (mine && found == NULL) {
            *pp = e->next;
            if (fits(e, arg)) {
                found = e;
            } else {
                entry_free(e); /* another geometry or ring: not used again */
            }
            continue;
        }
        pp = &e->next;
    }
    return found;
}

static void link_busy(struct weft_mig_rings *rs, ring_entry_t *e, int member, bool owner)
{
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
        memset(e->ring.base, 0, WEFT_RING_HDR); /* counters from 0, as a new ring's */
        offer->pid = (uint64_t)getpid();
        offer->fd = (uint64_t)e->ring.fd;
        offer->len = e->ring.len;
        offer->slots = e->ring.slots;
        offer->id = e->ring.id;
    } else {
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
    }
    link_busy(rs, e, member, true);
    return &e->ring;
}

static bool fits_offer(const ring_entry_t *e, const void *arg)
{
    const weft_mig_offer_t *o = arg;
    return e->pid == o->pid && e->ring.id == o->id && e->ring.len == o->len &&
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
        entry_free(e);
        e = NULL;
    }
    if (e == NULL) {
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
        e->pid = offer->pid;
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
    struct weft_mig_rings *rs = ctx->mig_rings;
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
    entry_free(e);
}
