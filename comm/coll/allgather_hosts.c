/*
 * Allgather over hosts of equal size (L >= 2 ranks on each of H >= 2 hosts), over messages
 * (such a group has no shared segment), past the latency path.
 *
 * The ring passes every block P - 1 times around a cycle whose links cross hosts at H
 * places, so a block may cross a host boundary more than once, and each of its P - 1
 * steps waits for the one before. Here:
 *
 *   A. every rank sends its block to the ranks of its local index on the other hosts (its
 *      column) and receives theirs: each block crosses to each other host once, and a
 *      host pair's traffic goes over L connections at once;
 *   B. every rank forwards its column's H blocks to the other ranks of its host: its own
 *      first, then the others in host order after its own host, each chunk as soon as it
 *      (and every chunk before it in that order) has arrived.
 *
 * Every message lands in the receiver's output. Blocks travel in chunks (at least
 * WEFT_COLL_NET_CHUNK, at most AGH_CHUNKS of them per block), so a rank forwards the first
 * chunks of a block within its host while the rest still cross the network.
 *
 * The messages of stage B from one sender share one tag step and are matched in the
 * order they were sent (as every data phase relies on): the receiver posts its receives
 * from each local peer in that peer's order, which depends only on the host indices.
 */
#include <stdlib.h>
#include <string.h>

#include "comm/coll/coll.h"

#define AGH_CHUNKS 16 /* chunks of a block at most: bounds the requests in flight */

typedef struct ag_hosts {
    weft_host_grid_t grid;
    size_t chunk, nch; /* bytes of a chunk, chunks of a block (>= 1) */
    /* Chunk j from this rank's column on host h at 2(h*nch + j); the one sent to it, +1. */
    weft_req_t **cross;
    /* Unit u = k*nch + j (chunk j of the k-th block a rank forwards) from local rank l at
     * 2(l*H*nch + u); the one sent to it, +1. */
    weft_req_t **local;
    size_t forwarded; /* units of this rank's column forwarded, in order */
    bool posted;
} ag_hosts_t;

static size_t blk_bytes(const weft_coll_t *c)
{
    return c->a.count * c->elem;
}

static uint8_t *blk(const weft_coll_t *c, int rank)
{
    return (uint8_t *)c->a.recvbuf + (size_t)rank * blk_bytes(c);
}

static size_t chunk_len(const weft_coll_t *c, const ag_hosts_t *A, size_t j)
{
    size_t off = j * A->chunk, bb = blk_bytes(c);
    return bb - off < A->chunk ? bb - off : A->chunk;
}

static size_t units(const ag_hosts_t *A)
{
    return (size_t)A->grid.nhosts * A->nch;
}

static size_t n_cross(const ag_hosts_t *A)
{
    return 2 * units(A);
}

static size_t n_local(const ag_hosts_t *A)
{
    return 2 * (size_t)A->grid.nlocal * units(A);
}

/* The k-th block any rank of this host forwards in stage B comes from host (hidx + k) % H. */
static int fwd_host(const ag_hosts_t *A, size_t k)
{
    return (A->grid.hidx + (int)k) % A->grid.nhosts;
}

bool weft__coll_allgather_hosts_fits(weft_coll_t *c)
{
    int nhosts;
    return c->shm == NULL && weft__group_host_table(c->g, &nhosts) != NULL && nhosts >= 2 &&
           weft__group_host_ranks(c->g) >= 2;
}

static void agh_fini(weft_coll_t *c)
{
    ag_hosts_t *A = c->alg;
    if (A == NULL) {
        return;
    }
    weft__coll_children_drop(A->cross, n_cross(A));
    weft__coll_children_drop(A->local, n_local(A));
    free(A->cross);
    free(A->local);
    free(A->grid.at);
    free(A);
    c->alg = NULL;
}

/* Stage A, and the receives of stage B: everything that waits for nothing. */
static weft_status_t agh_post(weft_coll_t *c, ag_hosts_t *A)
{
    uint32_t tag_x = weft__tag_coll_payload(c->seq, WEFT_COLL_STEP_AG_HOSTS);
    uint32_t tag_l = weft__tag_coll_payload(c->seq, WEFT_COLL_STEP_AG_LOCAL);
    const uint8_t *own = c->a.sendbuf == c->a.recvbuf ? blk(c, c->rank) : c->a.sendbuf;
    weft_status_t st = WEFT_OK;
    for (int h = 0; h < A->grid.nhosts && st >= 0; h++) {
        int peer = weft__grid_rank(&A->grid, h, A->grid.lidx);
        for (size_t j = 0; j < A->nch && h != A->grid.hidx && st >= 0; j++) {
            size_t off = j * A->chunk, len = chunk_len(c, A, j), i = 2 * (h * A->nch + j);
            st = weft__irecv(c->g, peer, blk(c, peer) + off, len, WEFT_TAG_COLL, tag_x,
                             &A->cross[i]);
            if (st >= 0) {
                st =
                    weft__isend(c->g, peer, own + off, len, WEFT_TAG_COLL, tag_x, &A->cross[i + 1]);
            }
        }
    }
    for (int l = 0; l < A->grid.nlocal && st >= 0; l++) {
        int peer = weft__grid_rank(&A->grid, A->grid.hidx, l);
        for (size_t u = 0; u < units(A) && l != A->grid.lidx && st >= 0; u++) {
            size_t k = u / A->nch, j = u % A->nch;
            int src = weft__grid_rank(&A->grid, fwd_host(A, k), l);
            st = weft__irecv(c->g, peer, blk(c, src) + j * A->chunk, chunk_len(c, A, j),
                             WEFT_TAG_COLL, tag_l, &A->local[2 * ((size_t)l * units(A) + u)]);
        }
    }
    if (st >= 0 && own != blk(c, c->rank)) {
        memcpy(blk(c, c->rank), own, blk_bytes(c)); /* after the sends: it overlaps them */
    }
    return st < 0 ? st : WEFT_OK;
}

/* Stage B's sends: the units of this rank's column that have arrived, in order. */
static weft_status_t agh_forward(weft_coll_t *c, ag_hosts_t *A)
{
    uint32_t tag_l = weft__tag_coll_payload(c->seq, WEFT_COLL_STEP_AG_LOCAL);
    while (A->forwarded < units(A)) {
        size_t u = A->forwarded, k = u / A->nch, j = u % A->nch;
        int h = fwd_host(A, k);
        if (k > 0) {
            weft_status_t st = weft__coll_child_test(&A->cross[2 * (h * A->nch + j)], NULL);
            if (st != WEFT_OK) {
                return st; /* not here yet, or an error */
            }
        }
        const uint8_t *src = blk(c, weft__grid_rank(&A->grid, h, A->grid.lidx)) + j * A->chunk;
        for (int l = 0; l < A->grid.nlocal; l++) {
            if (l == A->grid.lidx) {
                continue;
            }
            weft_status_t st = weft__isend(c->g, weft__grid_rank(&A->grid, A->grid.hidx, l), src,
                                           chunk_len(c, A, j), WEFT_TAG_COLL, tag_l,
                                           &A->local[2 * ((size_t)l * units(A) + u) + 1]);
            if (st < 0) {
                return st;
            }
        }
        A->forwarded++;
    }
    return WEFT_OK;
}

static weft_status_t agh_data(weft_coll_t *c)
{
    ag_hosts_t *A = c->alg;
    if (!A->posted) {
        weft_status_t st = agh_post(c, A);
        if (st != WEFT_OK) {
            return st;
        }
        A->posted = true;
    }
    weft_status_t st = agh_forward(c, A);
    if (st < 0) {
        return st;
    }
    weft_status_t a = weft__coll_children_test(A->cross, n_cross(A));
    weft_status_t b = weft__coll_children_test(A->local, n_local(A));
    if (a < 0 || b < 0) {
        return a < 0 ? a : b;
    }
    bool sent = A->forwarded == units(A);
    return sent && a == WEFT_OK && b == WEFT_OK ? WEFT_OK : WEFT_INPROGRESS;
}

weft_status_t weft__coll_setup_allgather_hosts(weft_coll_t *c)
{
    ag_hosts_t *A = calloc(1, sizeof(*A));
    if (A == NULL) {
        return weft__error(c->ctx, WEFT_ERR_NO_MEMORY, "%s: no memory", c->a.name);
    }
    c->alg = A;
    c->fini = agh_fini;
    c->data = agh_data;
    weft_status_t st = weft__coll_host_grid(c, &A->grid);
    if (st != WEFT_OK) {
        return st;
    }
    /* Chunks of whole elements, the same on every rank (they agree on count). */
    size_t bb = blk_bytes(c), chunk = c->ctx->cfg.coll_net_chunk;
    if (chunk < (bb + AGH_CHUNKS - 1) / AGH_CHUNKS) {
        chunk = (bb + AGH_CHUNKS - 1) / AGH_CHUNKS;
    }
    chunk = (chunk + c->elem - 1) / c->elem * c->elem;
    A->chunk = chunk > 0 ? chunk : c->elem;
    A->nch = bb > 0 ? (bb + A->chunk - 1) / A->chunk : 1;
    A->cross = calloc(n_cross(A), sizeof(*A->cross));
    A->local = calloc(n_local(A), sizeof(*A->local));
    if (A->cross == NULL || A->local == NULL) {
        return weft__error(c->ctx, WEFT_ERR_NO_MEMORY, "%s: no memory", c->a.name);
    }
    return weft__rd_init(c, NULL, 0);
}
