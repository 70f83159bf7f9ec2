/*
 * Reductions: allreduce, reduce and reduce_scatter.
 *
 * Small (the reduced vector, size*count elements for reduce_scatter, fits in
 * WEFT_COLL_SMALL_MAX): recursive doubling with the running result in the exchange
 * messages themselves: log2(P) (+2 with the fold) latency steps, nothing else. Both
 * partners of a step compute a (op) b in the same operand order, so every rank ends with
 * bitwise the same result.
 *
 * Large: the exchange phase checks agreement, then a pipelined ring: reduce-scatter
 * (+ allgather for allreduce, + a gather of the blocks to the root for reduce). Each
 * rank moves 2(P-1)/P of the vector for allreduce, the bandwidth optimum.
 */
#include <stdlib.h>
#include <string.h>

#include "comm/coll/coll.h"

/* ---- small: recursive doubling carrying the data ---- */

static size_t small_elems(const weft_coll_t *c)
{
    return c->a.kind == WEFT_COLL_REDUCE_SCATTER ? c->a.count * (size_t)c->size : c->a.count;
}

static size_t small_pack(weft_coll_t *c, enum weft_rd_stage stage, int peer, uint8_t *dst)
{
    (void)stage;
    (void)peer;
    (void)dst; /* the running result already lives in the payload area */
    return small_elems(c) * c->elem;
}

static size_t small_expect(weft_coll_t *c, enum weft_rd_stage stage, int peer)
{
    (void)stage;
    (void)peer;
    return small_elems(c) * c->elem;
}

static bool small_unpack(weft_coll_t *c, enum weft_rd_stage stage, int peer, const uint8_t *src,
                         size_t len)
{
    (void)peer;
    size_t n = small_elems(c);
    if (len != n * c->elem) {
        return false;
    }
    uint8_t *acc = c->rd.sbuf + WEFT_COLL_HDR_SIZE;
    if (stage == WEFT_RD_FOLD_OUT) {
        memcpy(acc, src, len);
    } else {
        weft__reducer_apply(&c->red, acc, src, n);
    }
    return true;
}

static void small_finish(weft_coll_t *c)
{
    const uint8_t *acc = c->rd.sbuf + WEFT_COLL_HDR_SIZE;
    size_t bytes = c->a.count * c->elem;
    if (bytes == 0) {
        return;
    }
    switch (c->a.kind) {
    case WEFT_COLL_ALLREDUCE:
        memcpy(c->a.recvbuf, acc, bytes);
        break;
    case WEFT_COLL_REDUCE:
        if (c->rank == c->a.root) {
            memcpy(c->a.recvbuf, acc, bytes);
        }
        break;
    case WEFT_COLL_REDUCE_SCATTER:
        memcpy(c->a.recvbuf, acc + (size_t)c->rank * bytes, bytes);
        break;
    default:
        break;
    }
}

static const weft_rd_ops_t small_ops = {
    .pack = small_pack,
    .expect = small_expect,
    .unpack = small_unpack,
    .finish = small_finish,
};

static weft_status_t setup_small(weft_coll_t *c)
{
    size_t bytes = small_elems(c) * c->elem;
    weft_status_t st = weft__rd_init(c, &small_ops, bytes);
    if (st == WEFT_OK && bytes > 0) {
        memcpy(c->rd.sbuf + WEFT_COLL_HDR_SIZE, c->a.sendbuf, bytes);
    }
    return st;
}

/* ---- large: ring ---- */

typedef struct red_large {
    weft_ring_t ring;
    bool ring_done;
    uint8_t *block;      /* reduce, non-root: my reduced block before it goes to the root */
    weft_req_t **gather; /* reduce: the root's receives (size), or my one send */
    bool gather_posted;
} red_large_t;

static void large_fini(weft_coll_t *c)
{
    red_large_t *L = c->alg;
    if (L == NULL) {
        return;
    }
    weft__ring_fini(&L->ring);
    weft__coll_children_drop(L->gather, (size_t)c->size);
    free(L->gather);
    free(L->block);
    free(L);
    c->alg = NULL;
}

static weft_status_t gather_post(weft_coll_t *c, red_large_t *L)
{
    uint32_t tag = weft__tag_coll_payload(c->seq, WEFT_COLL_STEP_GATHER);
    size_t count = c->a.count;
    weft_status_t st = WEFT_OK;
    if (c->rank == c->a.root) {
        for (int b = 0; b < c->size && st >= 0; b++) {
            size_t len = weft__coll_blk_len(count, c->size, b);
            if (b == c->rank || len == 0) {
                continue;
            }
            uint8_t *dst =
                (uint8_t *)c->a.recvbuf + weft__coll_blk_off(count, c->size, b) * c->elem;
            st = weft__irecv(c->g, b, dst, len * c->elem, WEFT_TAG_COLL, tag, &L->gather[b]);
        }
    } else {
        size_t len = weft__coll_blk_len(count, c->size, c->rank);
        if (len > 0) {
            st = weft__isend(c->g, c->a.root, L->block, len * c->elem, WEFT_TAG_COLL, tag,
                             &L->gather[c->rank]);
        }
    }
    return st == WEFT_INPROGRESS ? WEFT_OK : st;
}

static weft_status_t large_data(weft_coll_t *c)
{
    red_large_t *L = c->alg;
    if (!L->ring_done) {
        weft_status_t st = weft__ring_progress(c, &L->ring);
        if (st != WEFT_OK) {
            return st;
        }
        L->ring_done = true;
        size_t bytes = c->a.count * c->elem;
        if (c->a.kind == WEFT_COLL_REDUCE_SCATTER && c->a.sendbuf == c->a.recvbuf && c->rank != 0 &&
            bytes > 0) {
            /* In place the result was built where this rank's input block was. */
            memmove(c->a.recvbuf, (uint8_t *)c->a.recvbuf + (size_t)c->rank * bytes, bytes);
        }
    }
    if (c->a.kind != WEFT_COLL_REDUCE) {
        return WEFT_OK;
    }
    if (!L->gather_posted) {
        weft_status_t st = gather_post(c, L);
        if (st != WEFT_OK) {
            return st;
        }
        L->gather_posted = true;
    }
    return weft__coll_children_test(L->gather, (size_t)c->size);
}

static weft_status_t setup_large(weft_coll_t *c)
{
    red_large_t *L = calloc(1, sizeof(*L));
    if (L == NULL) {
        return weft__error(c->ctx, WEFT_ERR_NO_MEMORY, "%s: no memory", c->a.name);
    }
    c->alg = L;
    c->fini = large_fini;
    c->data = large_data;
    const weft_coll_args_t *a = &c->a;
    size_t count = a->count, elem = c->elem;
    uint8_t *recv = a->recvbuf;
    weft_status_t st;
    switch (a->kind) {
    case WEFT_COLL_ALLREDUCE:
        st = weft__ring_init(c, &L->ring, true, true, a->sendbuf, recv,
                             recv + weft__coll_blk_off(count, c->size, c->rank) * elem, NULL, count,
                             0);
        break;
    case WEFT_COLL_REDUCE_SCATTER: {
        bool inplace = a->sendbuf == a->recvbuf;
        st = weft__ring_init(c, &L->ring, true, false, a->sendbuf, NULL,
                             inplace ? recv + (size_t)c->rank * count * elem : recv, NULL,
                             count * (size_t)c->size, count);
        break;
    }
    default: { /* reduce */
        uint8_t *mine;
        size_t off = weft__coll_blk_off(count, c->size, c->rank);
        L->gather = calloc((size_t)c->size, sizeof(*L->gather));
        if (L->gather == NULL) {
            return weft__error(c->ctx, WEFT_ERR_NO_MEMORY, "reduce: no memory");
        }
        if (c->rank == a->root) {
            mine = recv + off * elem;
        } else {
            L->block = weft__coll_alloc(c, weft__coll_blk_len(count, c->size, c->rank) * elem);
            if (L->block == NULL) {
                return WEFT_ERR_NO_MEMORY;
            }
            mine = L->block;
        }
        st = weft__ring_init(c, &L->ring, true, false, a->sendbuf, NULL, mine, NULL, count, 0);
        break;
    }
    }
    if (st != WEFT_OK) {
        return st;
    }
    return weft__rd_init(c, NULL, 0);
}

weft_status_t weft__coll_setup_reduction(weft_coll_t *c)
{
    size_t bytes = small_elems(c) * c->elem;
    if (weft__coll_is_small(c, bytes)) {
        return setup_small(c);
    }
    if (weft__coll_sliced_fits(c, bytes)) {
        return weft__coll_setup_sliced(c); /* hier_sliced.c: over hosts of equal size */
    }
    if (weft__coll_hier_fits(c, bytes)) {
        return weft__coll_setup_hier(c); /* hier.c: over several hosts */
    }
    return setup_large(c);
}

/* ---- public calls ---- */

weft_status_t weft_iallreduce(weft_group_t *g, const void *sendbuf, void *recvbuf, size_t count,
                              weft_dtype_t dtype, weft_op_t op, weft_req_t **req)
{
    WEFT_API_LOCK(g != NULL ? g->ctx : NULL);
    weft_coll_args_t a =
        weft__coll_args(WEFT_COLL_ALLREDUCE, "allreduce", sendbuf, recvbuf, count, dtype, op, -1);
    return weft__coll_start(g, &a, req);
}

weft_status_t weft_allreduce(weft_group_t *g, const void *sendbuf, void *recvbuf, size_t count,
                             weft_dtype_t dtype, weft_op_t op)
{
    WEFT_API_LOCK(g != NULL ? g->ctx : NULL);
    weft_coll_args_t a =
        weft__coll_args(WEFT_COLL_ALLREDUCE, "allreduce", sendbuf, recvbuf, count, dtype, op, -1);
    return weft__coll_run(g, &a);
}

weft_status_t weft_ireduce_scatter(weft_group_t *g, const void *sendbuf, void *recvbuf,
                                   size_t count, weft_dtype_t dtype, weft_op_t op, weft_req_t **req)
{
    WEFT_API_LOCK(g != NULL ? g->ctx : NULL);
    weft_coll_args_t a = weft__coll_args(WEFT_COLL_REDUCE_SCATTER, "reduce_scatter", sendbuf,
                                         recvbuf, count, dtype, op, -1);
    return weft__coll_start(g, &a, req);
}

weft_status_t weft_reduce_scatter(weft_group_t *g, const void *sendbuf, void *recvbuf, size_t count,
                                  weft_dtype_t dtype, weft_op_t op)
{
    WEFT_API_LOCK(g != NULL ? g->ctx : NULL);
    weft_coll_args_t a = weft__coll_args(WEFT_COLL_REDUCE_SCATTER, "reduce_scatter", sendbuf,
                                         recvbuf, count, dtype, op, -1);
    return weft__coll_run(g, &a);
}

weft_status_t weft_ireduce(weft_group_t *g, const void *sendbuf, void *recvbuf, size_t count,
                           weft_dtype_t dtype, weft_op_t op, int root, weft_req_t **req)
{
    WEFT_API_LOCK(g != NULL ? g->ctx : NULL);
    weft_coll_args_t a =
        weft__coll_args(WEFT_COLL_REDUCE, "reduce", sendbuf, recvbuf, count, dtype, op, root);
    return weft__coll_start(g, &a, req);
}

weft_status_t weft_reduce(weft_group_t *g, const void *sendbuf, void *recvbuf, size_t count,
                          weft_dtype_t dtype, weft_op_t op, int root)
{
    WEFT_API_LOCK(g != NULL ? g->ctx : NULL);
    weft_coll_args_t a =
        weft__coll_args(WEFT_COLL_REDUCE, "reduce", sendbuf, recvbuf, count, dtype, op, root);
    return weft__coll_run(g, &a);
}
