/*
 * The planner. For each new region R of each destination d:
 *   1. what d already held of R (its old regions) is a local copy;
 *   2. the rest of R is cut by the old regions of every other member into pieces, each
 *      knowing every member that holds it;
 * then remote pieces are cut into slabs of at most balance_bytes, sorted largest first,
 * and each goes to the holder that has sent least so far (a same-host holder first, when
 * hosts are known); finally pieces with the same source, destination and regions that
 * sit side by side are merged back into one transfer.
 */
#include <stdlib.h>
#include <string.h>

#include "comm/core.h"
#include "migrate/layout/box.h"
#include "migrate/layout/layout.h"
#include "migrate/layout/plan.h"
#include "util/array.h"

#define DEFAULT_BALANCE_BYTES (1u << 20)

typedef struct piece {
    weft_box_t box;
    int tensor, nd, dst, dst_region; /* dst_region: index into the new layout's regions */
    int hoff, nh;                    /* holders: old region indices, pool[hoff .. hoff + nh) */
    size_t bytes;
    int src_region; /* chosen: index into the old layout's regions */
} piece_t;

typedef struct builder {
    const weft_layout_t *old, *new;
    const weft_plan_params_t *p;
    piece_t *pieces; /* remote pieces of every destination */
    size_t npieces, cap_pieces;
    int *pool;
    size_t npool, cap_pool;
    weft__xfer_t *xfers;
    size_t nxfers, cap_xfers;
    weft__xfer_t *missing; /* pieces nobody holds (allow_missing), src = -1 */
    size_t nmissing, cap_missing;
    size_t lower_bound;
} builder_t;

static bool add_xfer(builder_t *b, int src_region, int dst_region, const weft_box_t *box)
{
    if (!weft__array_reserve((void **)&b->xfers, &b->cap_xfers, b->nxfers + 1, sizeof(*b->xfers))) {
        return false;
    }
    const weft__lregion_t *s = &b->old->regions[src_region];
    const weft__lregion_t *d = &b->new->regions[dst_region];
    const weft__ltensor_t *t = &b->old->tensors[d->tensor];
    weft__xfer_t *x = &b->xfers[b->nxfers++];
    memset(x, 0, sizeof(*x));
    x->t.src = s->member;
    x->t.dst = d->member;
    x->t.tensor = d->tensor;
    x->t.src_region = s->index;
    x->t.dst_region = d->index;
    x->ndims = t->ndims;
    for (int k = 0; k < t->ndims; k++) {
        x->t.box.offset[k] = box->offset[k];
        x->t.box.extent[k] = box->extent[k];
    }
    x->t.bytes = (size_t)weft__box_volume(box, t->ndims) * t->elem;
    x->elem = t->elem;
    x->src_box = s->space;
    x->src_packed = s->space_offset;
    x->src_buf = s->buf;
    x->dst_box = d->box;
    /* A destination region of buffer 1 (a snapshot's spilled copies) sits at its space
     * offset there. */
    x->dst_packed = d->buf == 1 ? d->space_offset : d->packed_offset;
    x->dst_buf = d->buf;
    return true;
}

/* A piece of new region @p dst_region that no member of the old layout holds. */
static bool add_missing(builder_t *b, int dst_region, const weft_box_t *box)
{
    if (!weft__array_reserve((void **)&b->missing, &b->cap_missing, b->nmissing + 1,
                             sizeof(*b->missing))) {
        return false;
    }
    const weft__lregion_t *d = &b->new->regions[dst_region];
    const weft__ltensor_t *t = &b->new->tensors[d->tensor];
    weft__xfer_t *x = &b->missing[b->nmissing++];
    memset(x, 0, sizeof(*x));
    x->t.src = -1;
    x->t.src_region = -1;
    x->t.dst = d->member;
    x->t.tensor = d->tensor;
    x->t.dst_region = d->index;
    x->t.box = *box;
    x->t.bytes = (size_t)weft__box_volume(box, t->ndims) * t->elem;
    x->ndims = t->ndims;
    x->elem = t->elem;
    x->dst_box = d->box;
    x->dst_packed = d->packed_offset;
    return true;
}

static bool push_piece(builder_t *b, const piece_t *pc)
{
    if (!weft__array_reserve((void **)&b->pieces, &b->cap_pieces, b->npieces + 1,
                             sizeof(*b->pieces))) {
        return false;
    }
    b->pieces[b->npieces++] = *pc;
    return true;
}

/* Cut the pieces [first, npieces) by old region @p o held by another member. */
static bool refine(builder_t *b, size_t first, int o)
{
    const weft__lregion_t *r = &b->old->regions[o];
    int nd = b->old->tensors[r->tensor].ndims;
    size_t end = b->npieces;
    for (size_t i = first; i < end; i++) {
        weft_box_t in, rest[2 * WEFT_LAYOUT_MAX_DIMS];
        if (!weft__box_intersect(&b->pieces[i].box, &r->box, nd, &in)) {
            continue;
        }
        if (!weft__array_reserve((void **)&b->pool, &b->cap_pool,
                                 b->npool + (size_t)b->pieces[i].nh + 1, sizeof(int))) {
            return false;
        }
        piece_t pc = b->pieces[i];
        int nrest = weft__box_subtract(&pc.box, &r->box, nd, rest);
        /* The intersection replaces the piece, with one more holder. */
        memcpy(&b->pool[b->npool], &b->pool[pc.hoff], (size_t)pc.nh * sizeof(int));
        b->pool[b->npool + (size_t)pc.nh] = o;
        b->pieces[i].box = in;
        b->pieces[i].hoff = (int)b->npool;
        b->pieces[i].nh = pc.nh + 1;
        b->npool += (size_t)pc.nh + 1;
        for (int k = 0; k < nrest; k++) { /* the rest keeps its holders */
            pc.box = rest[k];
            if (!push_piece(b, &pc)) {
                return false;
            }
        }
    }
    return true;
}

/* Remove @p box from the pieces [first, npieces): what is left of them replaces them. */
static bool cut_out(builder_t *b, size_t first, const weft_box_t *box, int nd)
{
    size_t end = b->npieces;
    for (size_t i = first; i < end; i++) {
        weft_box_t rest[2 * WEFT_LAYOUT_MAX_DIMS];
        piece_t pc = b->pieces[i];
        int nrest = weft__box_subtract(&pc.box, box, nd, rest);
        for (int j = 0; j < nrest; j++) {
            pc.box = rest[j];
            if (!push_piece(b, &pc)) {
                return false;
            }
        }
    }
    size_t left = b->npieces - end;
    memmove(&b->pieces[first], &b->pieces[end], left * sizeof(*b->pieces));
    b->npieces = first + left;
    return true;
}

/* Local copies and remote pieces of new region @p nr. */
static weft_status_t plan_region(builder_t *b, int nr)
{
    const weft__lregion_t *R = &b->new->regions[nr];
    const weft__ltensor_t *t = &b->new->tensors[R->tensor];
    int nd = t->ndims;
    const weft__lmember_t *mine = weft__layout_member(b->old, R->member);
    size_t first = b->npieces;
    piece_t pc = {.box = R->box,
                  .tensor = R->tensor,
                  .nd = nd,
                  .dst = R->member,
                  .dst_region = nr,
                  .hoff = 0,
                  .nh = 0,
                  .src_region = -1};
    if (!push_piece(b, &pc)) {
        return WEFT_ERR_NO_MEMORY;
    }
    /* What the destination held already: a local copy, and no longer needed. */
    for (int k = 0; mine != NULL && k < mine->nregions; k++) {
        int o = mine->regions[k];
        const weft__lregion_t *O = &b->old->regions[o];
        weft_box_t in;
        if (O->tensor != R->tensor || !weft__box_intersect(&O->box, &R->box, nd, &in)) {
            continue;
        }
        if (!add_xfer(b, o, nr, &in)) {
            return WEFT_ERR_NO_MEMORY;
        }
        if (!cut_out(b, first, &O->box, nd)) {
            return WEFT_ERR_NO_MEMORY;
        }
    }
    for (size_t i = first; i < b->npieces; i++) {
        b->lower_bound += (size_t)weft__box_volume(&b->pieces[i].box, nd) * t->elem;
    }
    /* The rest, cut by every other member's old regions of this tensor. */
    for (int o = 0; o < b->old->nregions && b->npieces > first; o++) {
        const weft__lregion_t *O = &b->old->regions[o];
        if (O->tensor == R->tensor && O->member != R->member &&
            weft__box_intersect(&O->box, &R->box, nd, NULL) && !refine(b, first, o)) {
            return WEFT_ERR_NO_MEMORY;
        }
    }
    size_t keep = first;
    for (size_t i = first; i < b->npieces; i++) {
        piece_t *pc = &b->pieces[i];
        pc->bytes = (size_t)weft__box_volume(&pc->box, nd) * t->elem;
        if (pc->nh > 0) {
            b->pieces[keep++] = *pc;
            continue;
        }
        if (b->p == NULL || !b->p->allow_missing) {
            char text[256];
            weft__box_format(&pc->box, nd, text, sizeof(text));
            return weft__error_noctx(WEFT_ERR_INVALID_ARG,
                                     "tensor %s region %s is held by no member of the old layout",
                                     t->name, text);
        }
        if (!add_missing(b, nr, &pc->box)) {
            return WEFT_ERR_NO_MEMORY;
        }
        b->lower_bound -= pc->bytes; /* it cannot move: not part of the bound */
    }
    b->npieces = keep;
    return WEFT_OK;
}

/* Cut remote pieces larger than @p limit bytes into slabs along their first dimension
 * of extent above 1, so that no sender ends up with one large piece too many. */
static bool slab(builder_t *b, size_t limit)
{
    size_t n = b->npieces;
    for (size_t i = 0; i < n; i++) {
        if (b->pieces[i].bytes <= limit) {
            continue;
        }
        piece_t pc = b->pieces[i];
        int nd = pc.nd, d = 0;
        while (d < nd - 1 && pc.box.extent[d] == 1) {
            d++;
        }
        size_t unit = pc.bytes / pc.box.extent[d]; /* bytes of one step along d */
        uint64_t rows = unit >= limit ? 1 : limit / unit;
        if (rows >= pc.box.extent[d]) {
            continue;
        }
        uint64_t lo = pc.box.offset[d], hi = lo + pc.box.extent[d];
        b->pieces[i].box.extent[d] = rows;
        b->pieces[i].bytes = rows * unit;
        for (uint64_t at = lo + rows; at < hi; at += rows) {
            pc.box.offset[d] = at;
            pc.box.extent[d] = hi - at < rows ? hi - at : rows;
            pc.bytes = pc.box.extent[d] * unit;
            if (!push_piece(b, &pc)) {
                return false;
            }
        }
    }
    return true;
}

static int cmp_piece(const void *pa, const void *pb)
{
    const piece_t *a = pa, *b = pb;
    if (a->bytes != b->bytes) {
        return a->bytes > b->bytes ? -1 : 1; /* largest first */
    }
    if (a->tensor != b->tensor) {
        return a->tensor < b->tensor ? -1 : 1;
    }
    if (a->dst_region != b->dst_region) {
        return a->dst_region < b->dst_region ? -1 : 1;
    }
    return weft__box_cmp(&a->box, &b->box, a->nd);
}

static int host_of(const weft_plan_params_t *p, int member)
{
    if (p == NULL || p->host_of == NULL || member < 0 || member >= p->num_members) {
        return -1;
    }
    return p->host_of[member];
}

/* Greedy choice of sources, largest piece first: the least-loaded holder on the
 * destination's host if one holds it, else the least-loaded holder; ties to the lower
 * member id. */
static weft_status_t choose_sources(builder_t *b)
{
    size_t *load = calloc((size_t)b->old->nmembers + 1, sizeof(*load));
    if (load == NULL) {
        return WEFT_ERR_NO_MEMORY;
    }
    for (size_t i = 0; i < b->npieces; i++) {
        piece_t *pc = &b->pieces[i];
        int dhost = host_of(b->p, pc->dst);
        int best = -1, best_m = 0;
        bool best_near = false;
        for (int h = 0; h < pc->nh; h++) {
            int o = b->pool[pc->hoff + h];
            int id = b->old->regions[o].member;
            int m = (int)(weft__layout_member(b->old, id) - b->old->members);
            bool near = dhost >= 0 && host_of(b->p, id) == dhost;
            bool better = best < 0 || (near && !best_near) ||
                          (near == best_near &&
                           (load[m] < load[best_m] ||
                            (load[m] == load[best_m] && id < b->old->regions[best].member)));
            if (better) {
                best = o;
                best_m = m;
                best_near = near;
            }
        }
        pc->src_region = best;
        load[best_m] += pc->bytes;
    }
    free(load);
    return WEFT_OK;
}

static int cmp_xfer(const void *pa, const void *pb)
{
    const weft__xfer_t *a = pa, *b = pb;
    const int ka[] = {a->t.src, a->t.dst, a->t.tensor, a->t.dst_region, a->t.src_region};
    const int kb[] = {b->t.src, b->t.dst, b->t.tensor, b->t.dst_region, b->t.src_region};
    for (size_t i = 0; i < sizeof(ka) / sizeof(ka[0]); i++) {
        if (ka[i] != kb[i]) {
            return ka[i] < kb[i] ? -1 : 1;
        }
    }
    return weft__box_cmp(&a->t.box, &b->t.box, a->ndims);
}

static bool same_route(const weft__xfer_t *a, const weft__xfer_t *b)
{
    return a->t.src == b->t.src && a->t.dst == b->t.dst && a->t.tensor == b->t.tensor &&
           a->t.dst_region == b->t.dst_region && a->t.src_region == b->t.src_region;
}

/* Sort transfers and merge neighbours on one route that are side by side. */
static void merge_xfers(weft__xfer_t *xs, size_t *n)
{
    bool merged = true;
    while (merged) {
        merged = false;
        if (*n > 1) {
            qsort(xs, *n, sizeof(*xs), cmp_xfer);
        }
        size_t out = 0;
        for (size_t i = 0; i < *n; i++) {
            weft_box_t u;
            if (out > 0 && same_route(&xs[out - 1], &xs[i]) &&
                weft__box_merge(&xs[out - 1].t.box, &xs[i].t.box, xs[i].ndims, &u)) {
                xs[out - 1].t.box = u;
                xs[out - 1].t.bytes += xs[i].t.bytes;
                merged = true;
                continue;
            }
            xs[out++] = xs[i];
        }
        *n = out;
    }
}

weft_status_t weft__plan_build(weft_plan_t *plan, const weft_layout_t *old_layout,
                               const weft_layout_t *new_layout, const weft_plan_params_t *p)
{
    builder_t b = {.old = old_layout, .new = new_layout, .p = p};
    weft_status_t st = WEFT_OK;
    for (int nr = 0; nr < new_layout->nregions && st == WEFT_OK; nr++) {
        st = plan_region(&b, nr);
    }
    size_t limit = p != NULL && p->balance_bytes != 0 ? p->balance_bytes : DEFAULT_BALANCE_BYTES;
    if (st == WEFT_OK && !slab(&b, limit)) {
        st = WEFT_ERR_NO_MEMORY;
    }
    if (st == WEFT_OK) {
        if (b.npieces > 1) {
            qsort(b.pieces, b.npieces, sizeof(*b.pieces), cmp_piece);
        }
        st = choose_sources(&b);
    }
    for (size_t i = 0; i < b.npieces && st == WEFT_OK; i++) {
        if (!add_xfer(&b, b.pieces[i].src_region, b.pieces[i].dst_region, &b.pieces[i].box)) {
            st = WEFT_ERR_NO_MEMORY;
        }
    }
    free(b.pieces);
    free(b.pool);
    if (st != WEFT_OK) {
        free(b.xfers);
        free(b.missing);
        return st == WEFT_ERR_NO_MEMORY ? weft__error_noctx(st, "weft_plan_create: out of memory")
                                        : st;
    }
    merge_xfers(b.xfers, &b.nxfers);
    merge_xfers(b.missing, &b.nmissing);
    plan->xfers = b.xfers;
    plan->nxfers = b.nxfers;
    plan->missing = b.missing;
    plan->nmissing = b.nmissing;
    plan->lower_bound = b.lower_bound;
    return WEFT_OK;
}
