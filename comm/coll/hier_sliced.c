/*
 * Sliced allreduce over hosts, for groups that span several hosts with the same number
 * of ranks L >= 2 on each, over messages (such a group has no shared segment).
 *
 * The leader allreduce of hier.c sends every vector to one rank per host, so one rank
 * of each host uses the network and the three stages run one after the other. Here
 * every rank takes part in each stage, on a slice of its own:
 *
 *   A. reduce-scatter among the L ranks of the host (a ring over the host's transport):
 *      local rank l ends with slice l of the vector reduced over its host;
 *   B. allreduce of slice l among the H ranks with local index l, one per host (a ring
 *      whose every link crosses hosts): L rings at once, each moving 2(H-1)/H of a
 *      slice, so the host pair's traffic goes over L connections instead of one;
 *   C. allgather among the L ranks of the host.
 *
 * The vector is cut in segments of WEFT_COLL_HIER_SEGMENT bytes that go through the
 * three stages in order, up to WEFT_SLICED_DEPTH segments at once: while one segment
 * crosses the network, the next is reduced inside the host and the previous gathered.
 * Each (stage, segment mod depth) has its tag step, so rings among the same ranks that
 * run at once never match each other's messages; a segment reuses its step only after
 * the segment depth places before it has finished on this rank, when every message of
 * the earlier one has been received here and posted by its sender before its next.
 *
 * Slice l of a segment is reduced over the host on one rank, then by the one ring B
 * every rank of its column runs, and copied by C: every rank ends with the same bits.
 */
#include <stdlib.h>
#include <string.h>

#include "comm/coll/coll.h"

enum { STAGE_HOST_RS = 0, STAGE_HOSTS_AR, STAGE_HOST_AG, STAGE_END };

typedef struct seg {
    int stage;        /* STAGE_* of its ring */
    bool live;        /* the ring is set up */
    weft_ring_t ring; /* of the current stage */
} seg_t;

typedef struct sliced {
    weft_host_grid_t grid;
    const int *local; /* [L] group ranks on this host, in rank order (a row of grid.at) */
    int *column;      /* [H] group ranks with this local index, one per host, by host */
    size_t seg_elems, nseg;
    size_t first, next; /* segments below first are done; below next are started */
    seg_t win[WEFT_SLICED_DEPTH];
} sliced_t;

/*
 * Local index and host index of every rank into @p lidx and @p hidx ([size] each), from
 * the host table (each rank's host named by its lowest rank); false unless every host
 * has the same number (>= 2) of ranks.
 */
static bool layout(const int *host, int size, int *nlocal, int *nhosts, int *lidx, int *hidx)
{
    /* First hidx counts each host's ranks, in its leader's place (host[r] <= r). */
    memset(hidx, 0, (size_t)size * sizeof(*hidx));
    for (int r = 0; r < size; r++) {
        if (host[r] < 0 || host[r] > r) {
            return false;
        }
        lidx[r] = hidx[host[r]]++;
    }
    /* Then the hosts are numbered in their leaders' order; a leader comes before its
     * host's other ranks, so their host's number is known when they are reached. */
    int H = 0, L = -1;
    for (int r = 0; r < size; r++) {
        if (host[r] != r) {
            hidx[r] = hidx[host[r]];
            continue;
        }
        if (L >= 0 && hidx[r] != L) {
            return false;
        }
        L = hidx[r];
        hidx[r] = H++;
    }
    *nlocal = L;
    *nhosts = H;
    return L >= 2 && H >= 2;
}

bool weft__coll_sliced_fits(weft_coll_t *c, size_t bytes)
{
    if (c->a.kind != WEFT_COLL_ALLREDUCE || c->shm != NULL || bytes == 0 ||
        bytes <= c->ctx->cfg.coll_hier_max || c->ctx->cfg.coll_hier_segment == 0) {
        return false;
    }
    /* The group's table, computed once per epoch: no work here for each allreduce. */
    int nhosts;
    return weft__group_host_table(c->g, &nhosts) != NULL && nhosts >= 2 &&
           weft__group_host_ranks(c->g) >= 2;
}

static void sliced_fini(weft_coll_t *c)
{
    sliced_t *S = c->alg;
    if (S == NULL) {
        return;
    }
    for (int i = 0; i < WEFT_SLICED_DEPTH; i++) {
        if (S->win[i].live) {
            weft__ring_fini(&S->win[i].ring);
        }
    }
    free(S->grid.at);
    free(S->column);
    free(S);
    c->alg = NULL;
}

/* Neighbours of index @p i in @p ranks[n]. */
static weft_ring_pos_t ring_pos(const int *ranks, int n, int i, bool remote)
{
    weft_ring_pos_t pos = {i, n, ranks[(i + n - 1) % n], ranks[(i + 1) % n], remote};
    return pos;
}

/* Set up segment @p k's ring for its stage. */
static weft_status_t stage_init(weft_coll_t *c, sliced_t *S, size_t k)
{
    seg_t *s = &S->win[k % WEFT_SLICED_DEPTH];
    size_t e = c->elem, off = k * S->seg_elems;
    size_t n = c->a.count - off < S->seg_elems ? c->a.count - off : S->seg_elems;
    size_t sl_off = weft__coll_blk_off(n, S->grid.nlocal, S->grid.lidx);
    size_t sl_len = weft__coll_blk_len(n, S->grid.nlocal, S->grid.lidx);
    uint8_t *seg = (uint8_t *)c->a.recvbuf + off * e, *slice = seg + sl_off * e;
    weft_ring_pos_t pos;
    weft_status_t st;
    switch (s->stage) {
    case STAGE_HOST_RS:
        pos = ring_pos(S->local, S->grid.nlocal, S->grid.lidx, false);
        st =
            weft__ring_init_among(c, &s->ring, &pos, true, false,
                                  (const uint8_t *)c->a.sendbuf + off * e, NULL, slice, NULL, n, 0);
        break;
    case STAGE_HOSTS_AR:
        pos = ring_pos(S->column, S->grid.nhosts, S->grid.hidx, true);
        st = weft__ring_init_among(
            c, &s->ring, &pos, true, true, slice, slice,
            slice + weft__coll_blk_off(sl_len, S->grid.nhosts, S->grid.hidx) * e, NULL, sl_len, 0);
        break;
    default:
        pos = ring_pos(S->local, S->grid.nlocal, S->grid.lidx, false);
        st = weft__ring_init_among(c, &s->ring, &pos, false, true, NULL, seg, NULL, slice, n, 0);
        break;
    }
    s->live = true; /* fini frees whatever init got to */
    s->ring.step = WEFT_COLL_STEP_SLICED(s->stage, (uint32_t)(k % WEFT_SLICED_DEPTH));
    return st;
}

static weft_status_t sliced_data(weft_coll_t *c)
{
    sliced_t *S = c->alg;
    bool moved = true;
    while (moved) {
        moved = false;
        while (S->next < S->nseg && S->next < S->first + WEFT_SLICED_DEPTH) {
            seg_t *s = &S->win[S->next % WEFT_SLICED_DEPTH];
            s->stage = STAGE_HOST_RS;
            weft_status_t st = stage_init(c, S, S->next++);
            if (st != WEFT_OK) {
                return st;
            }
        }
        for (size_t k = S->first; k < S->next; k++) {
            seg_t *s = &S->win[k % WEFT_SLICED_DEPTH];
            if (s->stage == STAGE_END) {
                continue;
            }
            weft_status_t st = weft__ring_progress(c, &s->ring);
            if (st == WEFT_INPROGRESS) {
                continue;
            }
            if (st != WEFT_OK) {
                return st;
            }
            weft__ring_fini(&s->ring);
            s->live = false;
            moved = true;
            if (++s->stage != STAGE_END && (st = stage_init(c, S, k)) != WEFT_OK) {
                return st;
            }
        }
        while (S->first < S->next && S->win[S->first % WEFT_SLICED_DEPTH].stage == STAGE_END) {
            S->first++;
            moved = true;
        }
    }
    return S->first == S->nseg ? WEFT_OK : WEFT_INPROGRESS;
}

weft_status_t weft__coll_host_grid(weft_coll_t *c, weft_host_grid_t *grid)
{
    int nhosts;
    const int *host = weft__group_host_table(c->g, &nhosts);
    int *idx = malloc((size_t)c->size * 2 * sizeof(int));
    grid->at = malloc((size_t)c->size * sizeof(int));
    if (host == NULL || idx == NULL || grid->at == NULL) {
        free(idx);
        free(grid->at);
        grid->at = NULL;
        return weft__error(c->ctx, WEFT_ERR_NO_MEMORY, "%s: no memory", c->a.name);
    }
    int *lidx = idx, *hidx = idx + c->size;
    if (!layout(host, c->size, &grid->nlocal, &grid->nhosts, lidx, hidx)) {
        free(idx);
        free(grid->at);
        grid->at = NULL;
        return weft__error(c->ctx, WEFT_ERR_UNSUPPORTED, "%s: hosts of unequal size", c->a.name);
    }
    grid->lidx = lidx[c->rank];
    grid->hidx = hidx[c->rank];
    for (int r = 0; r < c->size; r++) {
        grid->at[hidx[r] * grid->nlocal + lidx[r]] = r;
    }
    free(idx);
    return WEFT_OK;
}

weft_status_t weft__coll_setup_sliced(weft_coll_t *c)
{
    sliced_t *S = calloc(1, sizeof(*S));
    if (S == NULL) {
        return weft__error(c->ctx, WEFT_ERR_NO_MEMORY, "%s: no memory", c->a.name);
    }
    c->alg = S;
    c->fini = sliced_fini;
    c->data = sliced_data;
    weft_status_t st = weft__coll_host_grid(c, &S->grid);
    if (st != WEFT_OK) {
        return st;
    }
    const weft_host_grid_t *g = &S->grid;
    S->local = g->at + (size_t)g->hidx * (size_t)g->nlocal;
    S->column = malloc((size_t)g->nhosts * sizeof(int));
    if (S->column == NULL) {
        return weft__error(c->ctx, WEFT_ERR_NO_MEMORY, "%s: no memory", c->a.name);
    }
    for (int h = 0; h < g->nhosts; h++) {
        S->column[h] = weft__grid_rank(g, h, g->lidx);
    }
    /* Segments of whole elements, the same on every rank (they agree on count). */
    size_t seg = c->ctx->cfg.coll_hier_segment / c->elem;
    S->seg_elems = seg > 0 ? seg : 1;
    S->nseg = (c->a.count + S->seg_elems - 1) / S->seg_elems;
    return weft__rd_init(c, NULL, 0);
}
