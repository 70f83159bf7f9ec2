/*
 * Medium reductions (allreduce, reduce, reduce_scatter between WEFT_COLL_SMALL_MAX and
 * WEFT_COLL_RING_MIN bytes): recursive doubling on the user's buffers.
 *
 * Below WEFT_COLL_SMALL_MAX the data rides in the exchange messages, which costs a copy
 * into and out of the message buffers; that is nothing for a few kilobytes but a large
 * part of the time for hundreds. Here the exchange phase carries headers only, then the
 * running result lives in the output buffer itself (a scratch vector only where the
 * output cannot hold it: reduce off the root, out-of-place reduce_scatter) and each step
 * sends it as it is and receives the partner's into one temporary vector. The ring would
 * move less data, but takes 2(P-1) latency steps against log2(P) here; measured on
 * shared-memory hosts the ring only wins above a few hundred kilobytes.
 *
 * The schedule is the exchange phase's (fold of the ranks above the largest power of two,
 * then log2 steps, then the result handed back), so every rank computes a (op) b in the
 * same order and all ranks end with bitwise the same result.
 */
#include <stdlib.h>
#include <string.h>

#include "comm/coll.h"

typedef struct rdd {
    uint8_t *acc;     /* running result: the output, or scratch */
    uint8_t *tmp;     /* the partner's vector */
    uint8_t *scratch; /* owned memory behind acc/tmp */
    size_t n, bytes;
    int pof2, rem, nsteps, pos;
    bool started, posted;
    weft_req_t *sreq, *rreq;
} rdd_t;

static void rdd_fini(weft_coll_t *c)
{
    rdd_t *D = c->alg;
    if (D != NULL) {
        weft__coll_child_drop(&D->sreq);
        weft__coll_child_drop(&D->rreq);
        free(D->scratch);
        free(D);
        c->alg = NULL;
    }
}

/* Peers at the current position, as in the exchange phase (coll_rd.c). */
static void rdd_roles(const weft_coll_t *c, const rdd_t *D, int *to, int *from, int *step)
{
    int r = c->rank;
    *to = *from = -1;
    if (D->pos == 0) {
        *step = WEFT_COLL_STEP_DRD_FOLD_IN;
        if (r >= D->pof2) {
            *to = r - D->pof2;
        } else if (r < D->rem) {
            *from = r + D->pof2;
        }
    } else if (D->pos <= D->nsteps) {
        *step = WEFT_COLL_STEP_DRD(D->pos - 1);
        if (r < D->pof2) {
            *to = *from = r ^ (1 << (D->pos - 1));
        }
    } else {
        *step = WEFT_COLL_STEP_DRD_FOLD_OUT;
        if (r >= D->pof2) {
            *from = r - D->pof2;
        } else if (r < D->rem) {
            *to = r + D->pof2;
        }
    }
}

/* The input as a whole vector (reduce_scatter in place: the output holds it). */
static const void *input_of(const weft_coll_t *c)
{
    return c->a.sendbuf;
}

static void rdd_finish(weft_coll_t *c, rdd_t *D)
{
    if (c->a.kind != WEFT_COLL_REDUCE_SCATTER) {
        return; /* allreduce and the root of reduce accumulated in the output */
    }
    size_t blk = c->a.count * c->elem;
    if (blk > 0) {
        memmove(c->a.recvbuf, D->acc + (size_t)c->rank * blk, blk);
    }
}

static weft_status_t rdd_data(weft_coll_t *c)
{
    rdd_t *D = c->alg;
    if (!D->started) {
        /* Only now that every rank agreed may the output be written. */
        if (D->bytes > 0 && (const void *)D->acc != input_of(c)) {
            memcpy(D->acc, input_of(c), D->bytes);
        }
        D->started = true;
    }
    while (D->pos <= D->nsteps + 1) {
        int to, from, step;
        rdd_roles(c, D, &to, &from, &step);
        if (to < 0 && from < 0) {
            D->pos++;
            continue;
        }
        bool fold_out = D->pos > D->nsteps;
        weft_status_t st;
        if (!D->posted) {
            uint32_t tag = weft__tag_coll_payload(c->seq, (uint32_t)step);
            if (from >= 0) {
                st = weft__irecv(c->g, from, fold_out ? D->acc : D->tmp, D->bytes, WEFT_TAG_COLL,
                                 tag, &D->rreq);
                if (st < 0) {
                    return st;
                }
            }
            if (to >= 0) {
                st = weft__isend(c->g, to, D->acc, D->bytes, WEFT_TAG_COLL, tag, &D->sreq);
                if (st < 0) {
                    return st;
                }
            }
            D->posted = true;
        }
        weft_status_t rs = weft__coll_child_test(&D->rreq, NULL);
        weft_status_t ss = weft__coll_child_test(&D->sreq, NULL);
        if (rs < 0) {
            return rs;
        }
        if (ss < 0) {
            return ss;
        }
        if (rs == WEFT_INPROGRESS || ss == WEFT_INPROGRESS) {
            return WEFT_INPROGRESS;
        }
        if (from >= 0 && !fold_out) {
            weft__reducer_apply(&c->red, D->acc, D->tmp, D->n); /* acc (op) partner */
        }
        D->posted = false;
        D->pos++;
    }
    rdd_finish(c, D);
    return WEFT_OK;
}

weft_status_t weft__coll_setup_rdd(weft_coll_t *c)
{
    rdd_t *D = calloc(1, sizeof(*D));
    if (D == NULL) {
        return weft__error(c->ctx, WEFT_ERR_NO_MEMORY, "%s: no memory", c->a.name);
    }
    c->alg = D;
    c->fini = rdd_fini;
    c->data = rdd_data;
    const weft_coll_args_t *a = &c->a;
    bool rs = a->kind == WEFT_COLL_REDUCE_SCATTER;
    D->n = rs ? a->count * (size_t)c->size : a->count;
    D->bytes = D->n * c->elem;
    D->pof2 = 1;
    while (D->pof2 <= c->size / 2) {
        D->pof2 *= 2;
        D->nsteps++;
    }
    D->rem = c->size - D->pof2;
    /* The output holds the running result where it is large enough and ours to write. */
    bool out_ok = (a->kind == WEFT_COLL_ALLREDUCE) ||
                  (a->kind == WEFT_COLL_REDUCE && c->rank == a->root) ||
                  (rs && a->sendbuf == a->recvbuf);
    size_t vec = (D->bytes + 63) & ~(size_t)63;
    D->scratch = weft__coll_alloc(c, out_ok ? vec : 2 * vec);
    if (D->scratch == NULL) {
        return WEFT_ERR_NO_MEMORY;
    }
    D->tmp = D->scratch;
    D->acc = out_ok ? a->recvbuf : D->scratch + vec;
    return weft__rd_init(c, NULL, 0);
}
