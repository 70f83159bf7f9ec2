/*
 * Allgather.
 *
 * Small (size*count elements fit in WEFT_COLL_SMALL_MAX): recursive doubling carrying the
 * blocks in the exchange messages. Before step k a rank of the first pof2 holds the
 * blocks of its aligned group of 2^k ranks plus the blocks of those ranks' folded
 * partners (the extra ranks pof2..P-1): two contiguous ranges, packed back to back.
 *
 * Large: the exchange phase checks agreement, then the allgather half of the pipelined
 * ring; chunks are received straight into the output and forwarded from there. Over
 * hosts that hold the same number (>= 2) of ranks, across hosts then within each host
 * instead (allgather_hosts.c).
 */
#include <stdlib.h>
#include <string.h>

#include "comm/coll/coll.h"

/* Blocks held by @p x before step k: [a0, a1) and [b0, b1). */
static void held_ranges(const weft_coll_t *c, int x, int k, int *a0, int *a1, int *b0, int *b1)
{
    int span = 1 << k;
    int base = x & ~(span - 1);
    *a0 = base;
    *a1 = base + span;
    *b0 = *b1 = 0;
    if (base < c->rd.rem) {
        *b0 = c->rd.pof2 + base;
        *b1 = c->rd.pof2 + (base + span < c->rd.rem ? base + span : c->rd.rem);
    }
}

static uint8_t *gathered(const weft_coll_t *c)
{
    return c->scratch;
}

static size_t blk_bytes(const weft_coll_t *c)
{
    return c->a.count * c->elem;
}

static size_t ag_pack(weft_coll_t *c, enum weft_rd_stage stage, int peer, uint8_t *dst)
{
    (void)peer;
    size_t bb = blk_bytes(c);
    uint8_t *gb = gathered(c);
    if (stage == WEFT_RD_FOLD_IN) {
        memcpy(dst, gb + (size_t)c->rank * bb, bb);
        return bb;
    }
    if (stage == WEFT_RD_FOLD_OUT) {
        memcpy(dst, gb, bb * (size_t)c->size);
        return bb * (size_t)c->size;
    }
    int a0, a1, b0, b1;
    held_ranges(c, c->rank, c->rd.pos - 1, &a0, &a1, &b0, &b1);
    size_t na = (size_t)(a1 - a0) * bb, nb = (size_t)(b1 - b0) * bb;
    memcpy(dst, gb + (size_t)a0 * bb, na);
    memcpy(dst + na, gb + (size_t)b0 * bb, nb);
    return na + nb;
}

static size_t ag_expect(weft_coll_t *c, enum weft_rd_stage stage, int peer)
{
    size_t bb = blk_bytes(c);
    if (stage == WEFT_RD_FOLD_IN) {
        return bb;
    }
    if (stage == WEFT_RD_FOLD_OUT) {
        return bb * (size_t)c->size;
    }
    int a0, a1, b0, b1;
    held_ranges(c, peer, c->rd.pos - 1, &a0, &a1, &b0, &b1);
    return (size_t)(a1 - a0 + b1 - b0) * bb;
}

static bool ag_unpack(weft_coll_t *c, enum weft_rd_stage stage, int peer, const uint8_t *src,
                      size_t len)
{
    size_t bb = blk_bytes(c);
    uint8_t *gb = gathered(c);
    if (len != ag_expect(c, stage, peer)) {
        return false;
    }
    if (stage == WEFT_RD_FOLD_IN) {
        memcpy(gb + (size_t)peer * bb, src, bb);
    } else if (stage == WEFT_RD_FOLD_OUT) {
        memcpy(gb, src, len);
    } else {
        int a0, a1, b0, b1;
        held_ranges(c, peer, c->rd.pos - 1, &a0, &a1, &b0, &b1);
        size_t na = (size_t)(a1 - a0) * bb;
        memcpy(gb + (size_t)a0 * bb, src, na);
        memcpy(gb + (size_t)b0 * bb, src + na, (size_t)(b1 - b0) * bb);
    }
    return true;
}

static void ag_finish(weft_coll_t *c)
{
    size_t total = blk_bytes(c) * (size_t)c->size;
    if (total > 0) {
        memcpy(c->a.recvbuf, gathered(c), total);
    }
}

static const weft_rd_ops_t ag_small_ops = {
    .pack = ag_pack,
    .expect = ag_expect,
    .unpack = ag_unpack,
    .finish = ag_finish,
};

/* My own block as given: in place it already sits in the output. */
static const uint8_t *own_block(const weft_coll_t *c)
{
    uint8_t *mine = (uint8_t *)c->a.recvbuf + (size_t)c->rank * blk_bytes(c);
    return c->a.sendbuf == c->a.recvbuf ? mine : c->a.sendbuf;
}

typedef struct ag_large {
    weft_ring_t ring;
    bool copied;
} ag_large_t;

static void ag_large_fini(weft_coll_t *c)
{
    ag_large_t *L = c->alg;
    if (L != NULL) {
        weft__ring_fini(&L->ring);
        free(L);
        c->alg = NULL;
    }
}

static weft_status_t ag_large_data(weft_coll_t *c)
{
    ag_large_t *L = c->alg;
    weft_status_t st = weft__ring_progress(c, &L->ring);
    if (!L->copied && st >= 0) {
        /* After the first sends are posted, so the copy overlaps them. */
        uint8_t *mine = (uint8_t *)c->a.recvbuf + (size_t)c->rank * blk_bytes(c);
        const uint8_t *own = own_block(c);
        if (own != mine && blk_bytes(c) > 0) {
            memcpy(mine, own, blk_bytes(c));
        }
        L->copied = true;
    }
    return st;
}

weft_status_t weft__coll_setup_allgather(weft_coll_t *c)
{
    size_t total = blk_bytes(c) * (size_t)c->size;
    if (weft__coll_is_small(c, total)) {
        c->scratch = weft__coll_alloc(c, total);
        if (c->scratch == NULL) {
            return WEFT_ERR_NO_MEMORY;
        }
        if (total > 0) {
            memcpy(c->scratch + (size_t)c->rank * blk_bytes(c), own_block(c), blk_bytes(c));
        }
        return weft__rd_init(c, &ag_small_ops, total);
    }
    if (weft__coll_allgather_hosts_fits(c)) {
        return weft__coll_setup_allgather_hosts(c); /* allgather_hosts.c */
    }
    ag_large_t *L = calloc(1, sizeof(*L));
    if (L == NULL) {
        return weft__error(c->ctx, WEFT_ERR_NO_MEMORY, "allgather: no memory");
    }
    c->alg = L;
    c->fini = ag_large_fini;
    c->data = ag_large_data;
    weft_status_t st = weft__ring_init(c, &L->ring, false, true, NULL, c->a.recvbuf, NULL,
                                       own_block(c), c->a.count * (size_t)c->size, c->a.count);
    if (st != WEFT_OK) {
        return st;
    }
    return weft__rd_init(c, NULL, 0);
}

weft_status_t weft_iallgather(weft_group_t *g, const void *sendbuf, void *recvbuf, size_t count,
                              weft_dtype_t dtype, weft_req_t **req)
{
    WEFT_API_LOCK(g != NULL ? g->ctx : NULL);
    weft_coll_args_t a =
        weft__coll_args(WEFT_COLL_ALLGATHER, "allgather", sendbuf, recvbuf, count, dtype, -1, -1);
    return weft__coll_start(g, &a, req);
}

weft_status_t weft_allgather(weft_group_t *g, const void *sendbuf, void *recvbuf, size_t count,
                             weft_dtype_t dtype)
{
    WEFT_API_LOCK(g != NULL ? g->ctx : NULL);
    weft_coll_args_t a =
        weft__coll_args(WEFT_COLL_ALLGATHER, "allgather", sendbuf, recvbuf, count, dtype, -1, -1);
    return weft__coll_run(g, &a);
}
