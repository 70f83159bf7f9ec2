/*
 * Alltoall, alltoallv and barrier.
 *
 * Alltoall: the exchange phase checks agreement (count, dtype), then every pair exchanges
 * its block directly: all receives are posted straight into the output, then the sends,
 * in the order r+1, r+2, ... so that no rank is hit by everyone at once.
 *
 * Alltoallv: the exchange phase checks the dtype; then each pair swaps its counts (what I
 * send you, what I expect from you) and compares both directions, so the two ranks of a
 * pair that disagree both see it and skip their data exchange: they return
 * WEFT_ERR_MISMATCH while the other pairs complete normally.
 *
 * Barrier: the exchange phase alone (every rank hears, transitively, from every rank).
 */
#include <stdlib.h>
#include <string.h>

#include "comm/coll/coll.h"

typedef struct a2a {
    weft_req_t **reqs; /* [2 * size]: receive from j at 2j, send to j at 2j+1 */
    uint64_t *mine;    /* alltoallv: [2 * size] (sendcounts[j], recvcounts[j]) */
    uint64_t *theirs;  /* alltoallv: [2 * size] what rank j said */
    bool *skip;        /* alltoallv: pair j disagrees */
    int stage;         /* alltoallv: 0 counts, 1 data, 2 done; alltoall: 1, 2 */
    bool posted;
    int bad_pairs;
} a2a_t;

static void a2a_fini(weft_coll_t *c)
{
    a2a_t *A = c->alg;
    if (A == NULL) {
        return;
    }
    weft__coll_children_drop(A->reqs, 2 * (size_t)c->size);
    free(A->reqs);
    free(A->mine);
    free(A->theirs);
    free(A->skip);
    free(A);
    c->alg = NULL;
}

static void block_of(const weft_coll_t *c, int j, bool send, const uint8_t **ptr, size_t *bytes)
{
    const weft_coll_args_t *a = &c->a;
    const uint8_t *base = send ? (const uint8_t *)a->sendbuf : (const uint8_t *)a->recvbuf;
    if (a->kind == WEFT_COLL_ALLTOALL) {
        *bytes = a->count * c->elem;
        *ptr = base + (size_t)j * *bytes;
    } else {
        *bytes = (send ? a->sendcounts[j] : a->recvcounts[j]) * c->elem;
        *ptr = base + (send ? a->sdispls[j] : a->rdispls[j]) * c->elem;
    }
}

static weft_status_t post_data(weft_coll_t *c, a2a_t *A)
{
    uint32_t tag = weft__tag_coll_payload(c->seq, WEFT_COLL_STEP_PAIRS);
    int n = c->size, r = c->rank;
    const uint8_t *p;
    size_t bytes;
    weft_status_t st;
    for (int i = 1; i < n; i++) {
        int j = (r - i + n) % n;
        block_of(c, j, false, &p, &bytes);
        if (bytes == 0 || (A->skip != NULL && A->skip[j])) {
            continue;
        }
        st = weft__irecv(c->g, j, (uint8_t *)p, bytes, WEFT_TAG_COLL, tag, &A->reqs[2 * j]);
        if (st < 0) {
            return st;
        }
    }
    for (int i = 1; i < n; i++) {
        int j = (r + i) % n;
        block_of(c, j, true, &p, &bytes);
        if (bytes == 0 || (A->skip != NULL && A->skip[j])) {
            continue;
        }
        st = weft__isend(c->g, j, p, bytes, WEFT_TAG_COLL, tag, &A->reqs[2 * j + 1]);
        if (st < 0) {
            return st;
        }
    }
    const uint8_t *src, *dst;
    size_t sbytes, rbytes;
    block_of(c, r, true, &src, &sbytes);
    block_of(c, r, false, &dst, &rbytes);
    if (sbytes == rbytes && sbytes > 0) {
        memmove((uint8_t *)dst, src, sbytes);
    }
    return WEFT_OK;
}

static weft_status_t post_counts(weft_coll_t *c, a2a_t *A)
{
    uint32_t tag = weft__tag_coll_payload(c->seq, WEFT_COLL_STEP_COUNTS);
    int n = c->size, r = c->rank;
    for (int i = 1; i < n; i++) {
        int j = (r - i + n) % n;
        weft_status_t st = weft__irecv(c->g, j, &A->theirs[2 * j], 2 * sizeof(uint64_t),
                                       WEFT_TAG_COLL, tag, &A->reqs[2 * j]);
        if (st < 0) {
            return st;
        }
    }
    for (int i = 1; i < n; i++) {
        int j = (r + i) % n;
        A->mine[2 * j] = c->a.sendcounts[j];
        A->mine[2 * j + 1] = c->a.recvcounts[j];
        weft_status_t st = weft__isend(c->g, j, &A->mine[2 * j], 2 * sizeof(uint64_t),
                                       WEFT_TAG_COLL, tag, &A->reqs[2 * j + 1]);
        if (st < 0) {
            return st;
        }
    }
    return WEFT_OK;
}

/* Both directions of every pair: what j sends me must be what I expect, and vice versa. */
static void compare_counts(weft_coll_t *c, a2a_t *A)
{
    const weft_coll_args_t *a = &c->a;
    for (int j = 0; j < c->size; j++) {
        bool bad;
        if (j == c->rank) {
            bad = a->sendcounts[j] != a->recvcounts[j];
        } else {
            bad = A->theirs[2 * j] != a->recvcounts[j] || A->theirs[2 * j + 1] != a->sendcounts[j];
        }
        if (bad) {
            A->skip[j] = true;
            A->bad_pairs++;
            weft__coll_set_mismatch(
                c,
                "rank %d sends %llu and expects %llu elements; this rank "
                "expects %zu and sends %zu",
                j, (unsigned long long)(j == c->rank ? a->sendcounts[j] : A->theirs[2 * j]),
                (unsigned long long)(j == c->rank ? a->recvcounts[j] : A->theirs[2 * j + 1]),
                a->recvcounts[j], a->sendcounts[j]);
        }
    }
}

static weft_status_t a2a_data(weft_coll_t *c)
{
    a2a_t *A = c->alg;
    weft_status_t st;
    while (A->stage < 2) {
        if (!A->posted) {
            st = A->stage == 0 ? post_counts(c, A) : post_data(c, A);
            if (st != WEFT_OK) {
                return st;
            }
            A->posted = true;
        }
        st = weft__coll_children_test(A->reqs, 2 * (size_t)c->size);
        if (st != WEFT_OK) {
            return st;
        }
        if (A->stage == 0) {
            compare_counts(c, A);
        }
        A->stage++;
        A->posted = false;
    }
    if (A->bad_pairs > 0) {
        return weft__error(c->ctx, WEFT_ERR_MISMATCH, "alltoallv #%u: %d pair(s) disagree: %s",
                           c->seq, A->bad_pairs, c->why);
    }
    return WEFT_OK;
}

weft_status_t weft__coll_setup_alltoall(weft_coll_t *c)
{
    a2a_t *A = calloc(1, sizeof(*A));
    if (A == NULL) {
        return weft__error(c->ctx, WEFT_ERR_NO_MEMORY, "%s: no memory", c->a.name);
    }
    c->alg = A;
    c->fini = a2a_fini;
    c->data = a2a_data;
    size_t n = (size_t)c->size;
    A->reqs = calloc(2 * n, sizeof(*A->reqs));
    A->stage = 1;
    if (c->a.kind == WEFT_COLL_ALLTOALLV) {
        A->stage = 0;
        A->mine = calloc(2 * n, sizeof(uint64_t));
        A->theirs = calloc(2 * n, sizeof(uint64_t));
        A->skip = calloc(n, sizeof(bool));
        if (A->mine == NULL || A->theirs == NULL || A->skip == NULL) {
            return weft__error(c->ctx, WEFT_ERR_NO_MEMORY, "alltoallv: no memory");
        }
    }
    if (A->reqs == NULL) {
        return weft__error(c->ctx, WEFT_ERR_NO_MEMORY, "%s: no memory", c->a.name);
    }
    return weft__rd_init(c, NULL, 0);
}

weft_status_t weft_ialltoall(weft_group_t *g, const void *sendbuf, void *recvbuf, size_t count,
                             weft_dtype_t dtype, weft_req_t **req)
{
    WEFT_API_LOCK(g != NULL ? g->ctx : NULL);
    weft_coll_args_t a =
        weft__coll_args(WEFT_COLL_ALLTOALL, "alltoall", sendbuf, recvbuf, count, dtype, -1, -1);
    return weft__coll_start(g, &a, req);
}

weft_status_t weft_alltoall(weft_group_t *g, const void *sendbuf, void *recvbuf, size_t count,
                            weft_dtype_t dtype)
{
    WEFT_API_LOCK(g != NULL ? g->ctx : NULL);
    weft_coll_args_t a =
        weft__coll_args(WEFT_COLL_ALLTOALL, "alltoall", sendbuf, recvbuf, count, dtype, -1, -1);
    return weft__coll_run(g, &a);
}

static weft_coll_args_t alltoallv_args(const void *sendbuf, const size_t *sendcounts,
                                       const size_t *sdispls, void *recvbuf,
                                       const size_t *recvcounts, const size_t *rdispls,
                                       weft_dtype_t dtype)
{
    weft_coll_args_t a =
        weft__coll_args(WEFT_COLL_ALLTOALLV, "alltoallv", sendbuf, recvbuf, 0, dtype, -1, -1);
    a.sendcounts = sendcounts;
    a.sdispls = sdispls;
    a.recvcounts = recvcounts;
    a.rdispls = rdispls;
    return a;
}

weft_status_t weft_ialltoallv(weft_group_t *g, const void *sendbuf, const size_t *sendcounts,
                              const size_t *sdispls, void *recvbuf, const size_t *recvcounts,
                              const size_t *rdispls, weft_dtype_t dtype, weft_req_t **req)
{
    WEFT_API_LOCK(g != NULL ? g->ctx : NULL);
    weft_coll_args_t a =
        alltoallv_args(sendbuf, sendcounts, sdispls, recvbuf, recvcounts, rdispls, dtype);
    return weft__coll_start(g, &a, req);
}

weft_status_t weft_alltoallv(weft_group_t *g, const void *sendbuf, const size_t *sendcounts,
                             const size_t *sdispls, void *recvbuf, const size_t *recvcounts,
                             const size_t *rdispls, weft_dtype_t dtype)
{
    WEFT_API_LOCK(g != NULL ? g->ctx : NULL);
    weft_coll_args_t a =
        alltoallv_args(sendbuf, sendcounts, sdispls, recvbuf, recvcounts, rdispls, dtype);
    return weft__coll_run(g, &a);
}

weft_status_t weft_ibarrier(weft_group_t *g, weft_req_t **req)
{
    WEFT_API_LOCK(g != NULL ? g->ctx : NULL);
    weft_coll_args_t a = weft__coll_args(WEFT_COLL_BARRIER, "barrier", NULL, NULL, 0, 0, -1, -1);
    return weft__coll_start(g, &a, req);
}

weft_status_t weft_barrier(weft_group_t *g)
{
    WEFT_API_LOCK(g != NULL ? g->ctx : NULL);
    weft_coll_args_t a = weft__coll_args(WEFT_COLL_BARRIER, "barrier", NULL, NULL, 0, 0, -1, -1);
    return weft__coll_run(g, &a);
}
