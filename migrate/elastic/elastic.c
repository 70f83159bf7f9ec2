/* After a membership change: what survivors hold, the flat re-cut, and batch shares
 * (weft/elastic.h). */
#include <stdlib.h>
#include <string.h>

#include "comm/core.h"
#include "migrate/layout/box.h"
#include "migrate/layout/layout.h"
#include "util/array.h"
#include "util/sized.h"
#include "weft/elastic.h"
#include "weft/group.h"

weft_status_t weft_layout_keep(const weft_layout_t *l, const int *members, int n,
                               weft_layout_t **out)
{
    if (l == NULL || out == NULL || (members == NULL && n > 0) || n < 0) {
        return weft__error_noctx(WEFT_ERR_INVALID_ARG, "weft_layout_keep: bad argument");
    }
    weft_layout_t *k;
    weft_status_t st = weft_layout_create(&k);
    for (int t = 0; t < l->ntensors && st == WEFT_OK; t++) {
        const weft__ltensor_t *x = &l->tensors[t];
        st = weft_layout_add_tensor(k, x->name, x->dtype, x->ndims, x->shape, NULL);
    }
    /* Regions in the layout's order, which is each member's order too. */
    for (int i = 0; i < l->nregions && st == WEFT_OK; i++) {
        const weft__lregion_t *r = &l->regions[i];
        bool kept = false;
        for (int j = 0; j < n && !kept; j++) {
            kept = members[j] == r->member;
        }
        if (kept) {
            st = weft_layout_add_region(k, r->member, r->tensor, &r->box);
        }
    }
    if (st != WEFT_OK) {
        weft_layout_free(k);
        return st;
    }
    *out = k;
    return WEFT_OK;
}

static bool is_member(const int *members, int n, int id)
{
    for (int j = 0; j < n; j++) {
        if (members[j] == id) {
            return true;
        }
    }
    return false;
}

typedef struct {
    int tensor;
    weft_box_t box;
} piece_t;

typedef struct {
    piece_t *v;
    size_t n, cap;
} pieces_t;

static bool pieces_add(pieces_t *p, int tensor, const weft_box_t *box)
{
    if (!weft__array_reserve((void **)&p->v, &p->cap, p->n + 1, sizeof(piece_t))) {
        return false;
    }
    p->v[p->n].tensor = tensor;
    p->v[p->n++].box = *box;
    return true;
}

/* Take @p cut (of tensor @p t) out of the pieces from @p from on. */
static bool pieces_cut(pieces_t *p, size_t from, int t, const weft_box_t *cut, int nd)
{
    weft_box_t out[2 * WEFT_LAYOUT_MAX_DIMS];
    size_t end = p->n;
    for (size_t i = from; i < end; i++) { /* the result goes after @p end */
        piece_t x = p->v[i];
        if (x.tensor != t || !weft__box_intersect(&x.box, cut, nd, NULL)) {
            if (!pieces_add(p, x.tensor, &x.box)) {
                return false;
            }
            continue;
        }
        int k = weft__box_subtract(&x.box, cut, nd, out);
        for (int j = 0; j < k; j++) {
            if (!pieces_add(p, t, &out[j])) {
                return false;
            }
        }
    }
    memmove(&p->v[from], &p->v[end], (p->n - end) * sizeof(piece_t));
    p->n = from + (p->n - end);
    return true;
}

/* What members that left held and no member of @p members holds: *@p orphans, each part
 * once (a region two leavers held is counted once). */
static bool orphans_of(const weft_layout_t *l, const int *members, int n, pieces_t *orphans)
{
    for (int i = 0; i < l->nregions; i++) {
        const weft__lregion_t *r = &l->regions[i];
        int nd = l->tensors[r->tensor].ndims;
        if (is_member(members, n, r->member)) {
            continue;
        }
        size_t from = orphans->n;
        if (!pieces_add(orphans, r->tensor, &r->box)) {
            return false;
        }
        for (int j = 0; j < l->nregions; j++) { /* held by a member that stays */
            const weft__lregion_t *s = &l->regions[j];
            if (s->tensor == r->tensor && is_member(members, n, s->member) &&
                !pieces_cut(orphans, from, r->tensor, &s->box, nd)) {
                return false;
            }
        }
        for (size_t j = 0; j < from; j++) { /* already an orphan of an earlier leaver */
            piece_t earlier = orphans->v[j];
            if (earlier.tensor == r->tensor &&
                !pieces_cut(orphans, from, r->tensor, &earlier.box, nd)) {
                return false;
            }
        }
    }
    return true;
}

weft_status_t weft_layout_absorb(const weft_layout_t *l, const int *members, int n,
                                 weft_layout_t **out)
{
    if (l == NULL || out == NULL || members == NULL || n < 1) {
        return weft__error_noctx(WEFT_ERR_INVALID_ARG,
                                 "weft_layout_absorb: NULL argument or no members");
    }
    for (int i = 0; i < n; i++) {
        if (is_member(members, i, members[i])) {
            return weft__error_noctx(WEFT_ERR_INVALID_ARG,
                                     "weft_layout_absorb: member %d listed twice", members[i]);
        }
    }
    pieces_t orphans = {0};
    weft_layout_t *k = NULL;
    weft_status_t st =
        orphans_of(l, members, n, &orphans) ? weft_layout_create(&k) : WEFT_ERR_NO_MEMORY;
    for (int t = 0; t < l->ntensors && st == WEFT_OK; t++) {
        const weft__ltensor_t *x = &l->tensors[t];
        st = weft_layout_add_tensor(k, x->name, x->dtype, x->ndims, x->shape, NULL);
    }
    for (int m = 0; m < n && st == WEFT_OK; m++) {
        for (int i = 0; i < l->nregions && st == WEFT_OK; i++) { /* its own, in its order */
            if (l->regions[i].member == members[m]) {
                st =
                    weft_layout_add_region(k, members[m], l->regions[i].tensor, &l->regions[i].box);
            }
        }
        for (size_t i = 0; i < orphans.n && st == WEFT_OK; i++) { /* its n-th, by rows */
            weft_box_t b = orphans.v[i].box;
            uint64_t e = b.extent[0], lo = e * (uint64_t)m / (uint64_t)n,
                     hi = e * (uint64_t)(m + 1) / (uint64_t)n;
            b.offset[0] += lo;
            b.extent[0] = hi - lo;
            if (b.extent[0] > 0) {
                st = weft_layout_add_region(k, members[m], orphans.v[i].tensor, &b);
            }
        }
    }
    free(orphans.v);
    if (st != WEFT_OK) {
        weft_layout_free(k);
        return st == WEFT_ERR_NO_MEMORY ? weft__error_noctx(st, "weft_layout_absorb: out of memory")
                                        : st;
    }
    *out = k;
    return WEFT_OK;
}

weft_status_t weft_migrate_replan_flat(const weft_layout_t *old, const weft_group_t *g,
                                       weft_layout_t **new_layout, weft_plan_t **plan)
{
    if (old == NULL || g == NULL || new_layout == NULL || plan == NULL || old->ntensors < 1) {
        return weft__error_noctx(WEFT_ERR_INVALID_ARG,
                                 "weft_migrate_replan_flat: NULL argument or empty layout");
    }
    int *tensors = malloc((size_t)old->ntensors * sizeof(int));
    weft_layout_t *nl = NULL, *kept = NULL;
    weft_status_t st = tensors != NULL ? WEFT_OK : WEFT_ERR_NO_MEMORY;
    for (int t = 0; t < old->ntensors && st == WEFT_OK; t++) {
        tensors[t] = t;
    }
    /* What the members of @p g hold, and the same tensors with nobody holding them yet. */
    if (st == WEFT_OK) {
        st = weft_layout_keep(old, weft__group_members(g), weft__group_size(g), &kept);
    }
    if (st == WEFT_OK) {
        st = weft_layout_keep(old, NULL, 0, &nl);
    }
    if (st == WEFT_OK) {
        st = weft_layout_flat(nl, tensors, old->ntensors, weft__group_members(g),
                              weft__group_size(g));
    }
    weft_plan_params_t pp = {.size = sizeof(pp), .allow_missing = 1};
    weft_plan_t *p = NULL;
    if (st == WEFT_OK) {
        st = weft_plan_create(kept, nl, &pp, &p);
    }
    free(tensors);
    weft_layout_free(kept);
    if (st != WEFT_OK) {
        weft_layout_free(nl);
        return st == WEFT_ERR_NO_MEMORY
                   ? weft__error_noctx(st, "weft_migrate_replan_flat: out of memory")
                   : st;
    }
    *new_layout = nl;
    *plan = p;
    return WEFT_OK;
}

weft_status_t weft_batch_share(uint64_t global, int width, int rank, uint64_t max_micro,
                               weft_batch_share_t *share)
{
    if (share == NULL || share->size < WEFT__SIZED_MIN(weft_batch_share_t, grad_scale)) {
        return weft__error_noctx(WEFT_ERR_INVALID_ARG,
                                 "weft_batch_share: share is NULL or its size is not "
                                 "sizeof(weft_batch_share_t)");
    }
    if (width < 1 || rank < 0 || rank >= width || global < (uint64_t)width) {
        return weft__error_noctx(WEFT_ERR_INVALID_ARG,
                                 "weft_batch_share: a batch of %llu over %d members (rank %d): "
                                 "every member needs at least one sample",
                                 (unsigned long long)global, width, rank);
    }
    uint64_t w = (uint64_t)width, r = (uint64_t)rank;
    uint64_t base = global / w, extra = global % w;
    weft_batch_share_t s = {.size = sizeof(s)};
    s.samples = base + (r < extra);
    s.first = r * base + (r < extra ? r : extra);
    uint64_t m = max_micro == 0 || max_micro > s.samples ? s.samples : max_micro;
    s.micro_size = m;
    s.micro_batches = (s.samples + m - 1) / m;
    s.last_micro = s.samples - (s.micro_batches - 1) * m;
    s.grad_scale = 1.0 / (double)global;
    weft__sized_copy(share, &s, sizeof(s));
    return WEFT_OK;
}
