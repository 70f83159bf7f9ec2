/*
 * Resuming a failed migration: every survivor lists the chunks of the failed plan it
 * received and checked (neighbouring chunks of one transfer merged), the survivors
 * allgather the lists, and each builds the same source layout: its regions of the old
 * layout (buffer 0) plus the received pieces (buffer 1, addressed inside the failed
 * plan's new regions). The plan to the target is made from that layout.
 */
#include <stdlib.h>
#include <string.h>

#include "comm/core.h"
#include "migrate/layout/box.h"
#include "migrate/engine/engine.h"
#include "migrate/layout/layout.h"
#include "migrate/layout/plan.h"
#include "util/array.h"
#include "weft/group.h"

/* A received piece as the survivors exchange it (neighbouring chunks of one destination
 * region merged). */
typedef struct piece_rec {
    int32_t tensor;
    int32_t pad;
    uint64_t space_offset;
    weft_box_t box;
    weft_box_t space;
} piece_rec_t;

typedef struct pieces {
    piece_rec_t *v;
    size_t n, cap;
} pieces_t;

static bool collect(void *arg, const weft__xfer_t *x, const weft_box_t *box)
{
    pieces_t *p = arg;
    if (p->n > 0) {
        piece_rec_t *last = &p->v[p->n - 1];
        weft_box_t u;
        if (last->tensor == x->t.tensor && last->space_offset == x->dst_packed &&
            weft__box_equal(&last->space, &x->dst_box, x->ndims) &&
            weft__box_merge(&last->box, box, x->ndims, &u)) {
            last->box = u;
            return true;
        }
    }
    if (!weft__array_reserve((void **)&p->v, &p->cap, p->n + 1, sizeof(*p->v))) {
        return false;
    }
    piece_rec_t *r = &p->v[p->n++];
    memset(r, 0, sizeof(*r));
    r->tensor = x->t.tensor;
    r->space_offset = x->dst_packed;
    r->box = *box;
    r->space = x->dst_box;
    return true;
}

/* Whether @p old holds, for every transfer of the failed plan from a member of @p g,
 * the region the plan reads from. */
static bool old_matches(const weft_layout_t *old, const weft_plan_t *plan, const weft_group_t *g)
{
    for (size_t i = 0; i < plan->nxfers; i++) {
        const weft__xfer_t *x = &plan->xfers[i];
        if (x->src_buf != 0 || x->t.tensor >= old->ntensors) {
            return false;
        }
        int rank;
        if (weft_group_rank_of(g, x->t.src, &rank) != WEFT_OK) {
            continue;
        }
        const weft__lmember_t *m = weft__layout_member(old, x->t.src);
        if (m == NULL || x->t.src_region >= m->nregions) {
            return false;
        }
        const weft__lregion_t *r = &old->regions[m->regions[x->t.src_region]];
        if (r->tensor != x->t.tensor || r->packed_offset != x->src_packed ||
            !weft__box_contains(&r->box, &x->t.box, x->ndims)) {
            return false;
        }
    }
    return true;
}

/* The survivors' holdings: their old regions, then the pieces each received. */
static weft_status_t source_layout(const weft_layout_t *old, const weft_group_t *g,
                                   const int64_t *counts, int64_t most, const piece_rec_t *all,
                                   weft_layout_t **out)
{
    weft_layout_t *s;
    weft_status_t st = weft_layout_keep(old, weft__group_members(g), weft__group_size(g), &s);
    for (int r = 0; r < weft__group_size(g) && st == WEFT_OK; r++) {
        for (int64_t k = 0; k < counts[r] && st == WEFT_OK; k++) {
            const piece_rec_t *p = &all[r * most + k];
            st = weft_layout_add_region(s, weft__group_members(g)[r], p->tensor, &p->box);
            if (st == WEFT_OK) {
                weft__lregion_t *reg = &s->regions[s->nregions - 1];
                reg->buf = 1;
                reg->space = p->space;
                reg->space_offset = p->space_offset;
            }
        }
    }
    if (st != WEFT_OK) {
        weft_layout_free(s);
        return st;
    }
    *out = s;
    return WEFT_OK;
}

weft_status_t weft_migrate_resume(weft_group_t *g, weft_req_t *failed, const weft_layout_t *old,
                                  const weft_layout_t *target, const weft_plan_params_t *params,
                                  weft_plan_t **plan)
{
    WEFT_API_LOCK(g != NULL ? weft__group_ctx(g) : NULL);
    if (g == NULL || plan == NULL) {
        return WEFT_ERR_INVALID_ARG;
    }
    weft_ctx_t *ctx = weft__group_ctx(g);
    pieces_t mine = {0};
    const char *why = NULL;
    if (failed == NULL || old == NULL || target == NULL) {
        why = "NULL argument";
    } else if (!weft__mig_is(failed) || weft__req_status(failed) == WEFT_INPROGRESS) {
        why = "the request is not a completed migration";
    } else if (!old_matches(old, weft__mig_plan(failed), g)) {
        why = "the old layout is not the failed plan's";
    } else if (!weft__mig_received(failed, collect, &mine)) {
        free(mine.v);
        return weft__error(ctx, WEFT_ERR_NO_MEMORY, "weft_migrate_resume: out of memory");
    }
    /* Everyone takes part in the exchange, so a refused member fails every member. */
    int64_t count = why != NULL ? -1 : (int64_t)mine.n;
    int64_t *counts = calloc((size_t)weft__group_size(g), sizeof(*counts));
    if (counts == NULL) {
        free(mine.v);
        return weft__error(ctx, WEFT_ERR_NO_MEMORY, "weft_migrate_resume: out of memory");
    }
    weft_status_t st = weft_allgather(g, &count, counts, 1, WEFT_I64);
    int64_t most = 0;
    bool refused = false;
    for (int r = 0; r < weft__group_size(g) && st == WEFT_OK; r++) {
        refused |= counts[r] < 0;
        most = counts[r] > most ? counts[r] : most;
    }
    piece_rec_t *all = NULL;
    if (st == WEFT_OK && !refused && most > 0) {
        size_t row = (size_t)most * sizeof(piece_rec_t);
        piece_rec_t *send = calloc(1, row);
        all = calloc((size_t)weft__group_size(g), row);
        if (send == NULL || all == NULL) {
            st = WEFT_ERR_NO_MEMORY;
        } else {
            if (mine.n > 0) {
                memcpy(send, mine.v, mine.n * sizeof(piece_rec_t));
            }
            st = weft_allgather(g, send, all, row, WEFT_U8);
        }
        free(send);
    }
    free(mine.v);
    weft_layout_t *src = NULL;
    if (st == WEFT_OK && !refused) {
        st = source_layout(old, g, counts, most, all, &src);
        if (st != WEFT_OK) {
            why = weft_last_error(NULL);
        }
    }
    free(all);
    free(counts);
    if (st == WEFT_OK && refused) {
        st = WEFT_ERR_INVALID_ARG;
        why = why != NULL ? why : "another member's arguments were refused";
    }
    if (st == WEFT_OK) {
        weft_plan_params_t p;
        memset(&p, 0, sizeof(p));
        if (params != NULL && params->size >= sizeof(size_t)) {
            memcpy(&p, params, params->size < sizeof(p) ? params->size : sizeof(p));
        }
        p.size = sizeof(p);
        p.allow_missing = 1;
        if ((st = weft_plan_create(src, target, &p, plan)) != WEFT_OK) {
            why = weft_last_error(NULL);
        }
    }
    weft_layout_free(src);
    if (st == WEFT_ERR_NO_MEMORY && why == NULL) {
        why = "out of memory";
    }
    return st == WEFT_OK || why == NULL ? st : weft__error(ctx, st, "weft_migrate_resume: %s", why);
}
