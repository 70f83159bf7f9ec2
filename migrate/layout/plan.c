/* Plans: made from two layouts, read back, summarised, digested and printed. */
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>

#include "comm/core.h"
#include "migrate/layout/box.h"
#include "migrate/layout/layout.h"
#include "migrate/layout/plan.h"
#include "migrate/engine/xxh.h"
#include "util/sized.h"

/* The digest covers every field that decides what moves where. */
static uint64_t digest(const weft_plan_t *plan)
{
    XXH3_state_t *s = XXH3_createState();
    if (s == NULL) {
        return 0;
    }
    XXH3_64bits_reset(s);
    for (size_t i = 0; i < plan->nxfers; i++) {
        const weft__xfer_t *x = &plan->xfers[i];
        uint64_t bufs = (uint64_t)x->src_buf | (uint64_t)x->dst_buf << 8;
        uint64_t f[7 + 2 * WEFT_LAYOUT_MAX_DIMS] = {(uint64_t)x->t.src,
                                                    (uint64_t)x->t.dst,
                                                    (uint64_t)x->t.tensor,
                                                    (uint64_t)x->t.src_region,
                                                    (uint64_t)x->t.dst_region,
                                                    (uint64_t)x->elem,
                                                    bufs};
        for (int d = 0; d < x->ndims; d++) {
            f[7 + 2 * d] = x->t.box.offset[d];
            f[8 + 2 * d] = x->t.box.extent[d];
        }
        XXH3_64bits_update(s, f, sizeof(f));
    }
    for (size_t i = 0; i < plan->nmissing; i++) {
        const weft__xfer_t *x = &plan->missing[i];
        uint64_t f[3 + 2 * WEFT_LAYOUT_MAX_DIMS] = {(uint64_t)x->t.dst, (uint64_t)x->t.tensor,
                                                    (uint64_t)x->t.dst_region};
        for (int d = 0; d < x->ndims; d++) {
            f[3 + 2 * d] = x->t.box.offset[d];
            f[4 + 2 * d] = x->t.box.extent[d];
        }
        XXH3_64bits_update(s, f, sizeof(f));
    }
    uint64_t h = XXH3_64bits_digest(s);
    XXH3_freeState(s);
    return h;
}

weft_status_t weft_plan_create(const weft_layout_t *old_layout, const weft_layout_t *new_layout,
                               const weft_plan_params_t *params, weft_plan_t **plan)
{
    if (old_layout == NULL || new_layout == NULL || plan == NULL) {
        return weft__error_noctx(WEFT_ERR_INVALID_ARG, "weft_plan_create: NULL argument");
    }
    if (params != NULL && params->size < sizeof(size_t)) {
        return weft__error_noctx(WEFT_ERR_INVALID_ARG, "weft_plan_create: params->size is not set");
    }
    weft_plan_params_t p;
    memset(&p, 0, sizeof(p));
    if (params != NULL) {
        memcpy(&p, params, params->size < sizeof(p) ? params->size : sizeof(p));
    }
    if (p.host_of != NULL && p.num_members < 0) {
        return weft__error_noctx(WEFT_ERR_INVALID_ARG, "weft_plan_create: num_members < 0");
    }
    weft_status_t st = weft__layout_same_tensors(old_layout, new_layout);
    if (st == WEFT_OK && !p.allow_missing) {
        st = weft_layout_check_complete(old_layout);
    }
    if (st != WEFT_OK) {
        char why[512];
        snprintf(why, sizeof(why), "%s", weft_last_error(NULL));
        return weft__error_noctx(st, "weft_plan_create: old layout: %s", why);
    }
    weft_plan_t *pl = calloc(1, sizeof(*pl));
    if (pl == NULL) {
        return weft__error_noctx(WEFT_ERR_NO_MEMORY, "weft_plan_create: out of memory");
    }
    if ((st = weft__plan_build(pl, old_layout, new_layout, &p)) != WEFT_OK) {
        free(pl);
        return st;
    }
    pl->digest = digest(pl);
    *plan = pl;
    return WEFT_OK;
}

void weft_plan_free(weft_plan_t *plan)
{
    if (plan != NULL) {
        free(plan->xfers);
        free(plan->missing);
        free(plan);
    }
}

size_t weft_plan_num_transfers(const weft_plan_t *plan)
{
    return plan != NULL ? plan->nxfers : 0;
}

weft_status_t weft_plan_transfer(const weft_plan_t *plan, size_t i, weft_transfer_t *t)
{
    if (plan == NULL || t == NULL || i >= plan->nxfers) {
        return weft__error_noctx(WEFT_ERR_INVALID_ARG, "weft_plan_transfer: no transfer %zu", i);
    }
    *t = plan->xfers[i].t;
    return WEFT_OK;
}

/* The totals of weft_plan_stats(), into a whole struct. */
static void plan_totals(const weft_plan_t *plan, int member, weft_plan_stats_t *stats)
{
    /* Transfers are sorted by source: one pass finds every sender's total. */
    size_t run = 0;
    for (size_t i = 0; i < plan->nxfers; i++) {
        const weft_transfer_t *t = &plan->xfers[i].t;
        bool local = t->src == t->dst;
        if (i > 0 && plan->xfers[i - 1].t.src != t->src) {
            run = 0;
        }
        if (!local) {
            run += t->bytes;
            stats->max_bytes_out = run > stats->max_bytes_out ? run : stats->max_bytes_out;
        }
        if (local && (member < 0 || t->src == member)) {
            stats->bytes_local += t->bytes;
        }
        if (!local && (member < 0 || t->src == member)) {
            stats->bytes_out += t->bytes;
            stats->transfers_out++;
        }
        if (!local && (member < 0 || t->dst == member)) {
            stats->bytes_in += t->bytes;
            stats->transfers_in++;
        }
    }
    if (member >= 0) {
        stats->max_bytes_out = 0;
    }
    for (size_t i = 0; i < plan->nmissing; i++) {
        if (member < 0 || plan->missing[i].t.dst == member) {
            stats->bytes_missing += plan->missing[i].t.bytes;
        }
    }
    stats->bytes_lower_bound = plan->lower_bound;
}

weft_status_t weft_plan_stats(const weft_plan_t *plan, int member, weft_plan_stats_t *stats)
{
    if (plan == NULL || stats == NULL) {
        return weft__error_noctx(WEFT_ERR_INVALID_ARG, "weft_plan_stats: NULL argument");
    }
    if (stats->size < WEFT__SIZED_MIN(weft_plan_stats_t, bytes_missing)) {
        return weft__error_noctx(WEFT_ERR_INVALID_ARG,
                                 "weft_plan_stats: stats->size is %zu, set it to "
                                 "sizeof(weft_plan_stats_t)",
                                 stats->size);
    }
    weft_plan_stats_t all = {.size = sizeof(all)};
    plan_totals(plan, member, &all);
    weft__sized_copy(stats, &all, sizeof(all));
    return WEFT_OK;
}

size_t weft_plan_num_missing(const weft_plan_t *plan)
{
    return plan != NULL ? plan->nmissing : 0;
}

weft_status_t weft_plan_missing(const weft_plan_t *plan, size_t i, weft_transfer_t *t)
{
    if (plan == NULL || t == NULL || i >= plan->nmissing) {
        return weft__error_noctx(WEFT_ERR_INVALID_ARG, "weft_plan_missing: no entry %zu", i);
    }
    *t = plan->missing[i].t;
    return WEFT_OK;
}

uint64_t weft_plan_digest(const weft_plan_t *plan)
{
    return plan != NULL ? plan->digest : 0;
}

weft_status_t weft_plan_print(const weft_plan_t *plan, FILE *out)
{
    if (plan == NULL || out == NULL) {
        return weft__error_noctx(WEFT_ERR_INVALID_ARG, "weft_plan_print: NULL argument");
    }
    weft_plan_stats_t all = {.size = sizeof(all)};
    weft_plan_stats(plan, -1, &all);
    fprintf(out, "# plan %016" PRIx64 ": %zu transfers, %zu B to move (lower bound %zu B), "
                 "%zu B copied locally, most sent by one member %zu B, %zu B held by nobody\n",
            plan->digest, plan->nxfers, all.bytes_in, all.bytes_lower_bound, all.bytes_local,
            all.max_bytes_out, all.bytes_missing);
    fprintf(out, "# %8s %14s %14s %14s %8s %8s\n", "member", "bytes_out", "bytes_in",
            "bytes_local", "n_out", "n_in");
    /* Every member that sends or receives, in id order. */
    int prev = -1;
    for (;;) {
        int next = -1;
        for (size_t i = 0; i < plan->nxfers; i++) {
            const weft_transfer_t *t = &plan->xfers[i].t;
            int a = t->src < t->dst ? t->src : t->dst, b = t->src < t->dst ? t->dst : t->src;
            int c = a > prev ? a : b > prev ? b : -1;
            if (c >= 0 && (next < 0 || c < next)) {
                next = c;
            }
        }
        if (next < 0) {
            break;
        }
        weft_plan_stats_t s = {.size = sizeof(s)};
        weft_plan_stats(plan, next, &s);
        fprintf(out, "  %8d %14zu %14zu %14zu %8zu %8zu\n", next, s.bytes_out, s.bytes_in,
                s.bytes_local, s.transfers_out, s.transfers_in);
        prev = next;
    }
    return ferror(out) ? WEFT_ERR_IO : WEFT_OK;
}
