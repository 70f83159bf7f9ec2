/* After a membership change: what survivors hold, the flat re-cut, and batch shares. */
#include <stdlib.h>
#include <string.h>

#include "comm/ctx.h"
#include "migrate/layout.h"
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
        st = weft_layout_keep(old, g->members, g->size, &kept);
    }
    if (st == WEFT_OK) {
        st = weft_layout_keep(old, NULL, 0, &nl);
    }
    if (st == WEFT_OK) {
        st = weft_layout_flat(nl, tensors, old->ntensors, g->members, g->size);
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
    if (share == NULL || width < 1 || rank < 0 || rank >= width || global < (uint64_t)width) {
        return weft__error_noctx(WEFT_ERR_INVALID_ARG,
                                 "weft_batch_share: a batch of %llu over %d members (rank %d): "
                                 "every member needs at least one sample",
                                 (unsigned long long)global, width, rank);
    }
    uint64_t w = (uint64_t)width, r = (uint64_t)rank;
    uint64_t base = global / w, extra = global % w;
    memset(share, 0, sizeof(*share));
    share->samples = base + (r < extra);
    share->first = r * base + (r < extra ? r : extra);
    uint64_t m = max_micro == 0 || max_micro > share->samples ? share->samples : max_micro;
    share->micro_size = m;
    share->micro_batches = (share->samples + m - 1) / m;
    share->last_micro = share->samples - (share->micro_batches - 1) * m;
    share->grad_scale = 1.0 / (double)global;
    return WEFT_OK;
}
