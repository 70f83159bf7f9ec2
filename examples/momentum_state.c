/* The example trainer's state and its ZeRO-1 momentum (see momentum_state.h). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "momentum_state.h"

void state_free(state_t *s)
{
    free(s->w);
    free(s->m);
    memset(s, 0, sizeof(*s));
}

/*
 * The momentum's layout over @p members (ids in group rank order): member i holds flat
 * partition i, then a copy of partition i+1 (mod n). Every member computes it from the
 * list alone, so the layout of a past membership needs no message. With
 * DIM >= MAX_MEMBERS^2 no partition is empty.
 */
static weft_status_t momentum_layout(const int *members, int n, weft_layout_t **out)
{
    weft_layout_t *l;
    weft_status_t st = weft_layout_create(&l);
    if (st != WEFT_OK) {
        return st;
    }
    uint64_t shape[1] = {DIM};
    int m;
    st = weft_layout_add_tensor(l, "momentum", WEFT_F32, 1, shape, &m);
    if (st == WEFT_OK) {
        st = weft_layout_flat(l, &m, 1, members, n);
    }
    if (st == WEFT_OK && n > 1) {
        int left[MAX_MEMBERS]; /* partition i goes to member i - 1 too */
        for (int i = 0; i < n; i++) {
            left[i] = members[(i + n - 1) % n];
        }
        st = weft_layout_flat(l, &m, 1, left, n);
    }
    if (st != WEFT_OK) {
        weft_layout_free(l);
        return st;
    }
    *out = l;
    return WEFT_OK;
}

/* Lay @p s out as @p l says over @p members: the ranges of w that member @p me holds, in
 * the order of its packed buffer, and zeroed buffers. */
static weft_status_t state_lay_out(state_t *s, const weft_layout_t *l, const int *members, int n,
                                   int me)
{
    s->nmembers = n;
    memcpy(s->members, members, (size_t)n * sizeof(int));
    s->nparts = weft_layout_num_regions(l, me);
    memset(s->lo, 0, sizeof(s->lo));
    memset(s->len, 0, sizeof(s->len));
    for (int k = 0; k < s->nparts; k++) {
        weft_box_t box;
        weft_layout_region(l, me, k, NULL, &box, NULL, NULL);
        s->lo[k] = box.offset[0];
        s->len[k] = box.extent[0];
    }
    s->w = calloc(DIM + MAX_MEMBERS, sizeof(float));
    s->m = calloc(weft_layout_packed_bytes(l, me) / sizeof(float) + 1, sizeof(float));
    return s->w != NULL && s->m != NULL ? WEFT_OK : WEFT_ERR_NO_MEMORY;
}

/* The group's member ids in rank order, and this member's rank. */
static int group_members(weft_group_t *g, int *ids, int *rank)
{
    int size;
    weft_group_size(g, &size);
    weft_group_rank(g, rank);
    for (int r = 0; r < size && r < MAX_MEMBERS; r++) {
        weft_group_member_id(g, r, &ids[r]);
    }
    return size;
}

weft_status_t state_start(weft_group_t *g, state_t *s)
{
    int ids[MAX_MEMBERS], rank;
    int size = group_members(g, ids, &rank);
    if (size > MAX_MEMBERS) {
        fprintf(stderr, "trainer: at most %d ranks (a batch of %d)\n", MAX_MEMBERS, BATCH);
        return WEFT_ERR_INVALID_ARG;
    }
    weft_layout_t *l;
    weft_status_t st = momentum_layout(ids, size, &l);
    if (st == WEFT_OK) {
        st = state_lay_out(s, l, ids, size, ids[rank]);
        weft_layout_free(l);
    }
    return st;
}

weft_status_t state_update(const state_t *cur, const float *grad, state_t *next)
{
    *next = *cur;
    next->w = calloc(DIM + MAX_MEMBERS, sizeof(float));
    next->m = malloc((cur->len[0] + cur->len[1] + 1) * sizeof(float));
    if (next->w == NULL || next->m == NULL) {
        state_free(next);
        return WEFT_ERR_NO_MEMORY;
    }
    memcpy(next->w, cur->w, DIM * sizeof(float));
    const float *m0 = cur->m;
    float *m1 = next->m;
    for (int k = 0; k < cur->nparts; k++) {
        const float *g = grad + cur->lo[k];
        for (uint64_t i = 0; i < cur->len[k]; i++) {
            m1[i] = BETA * m0[i] + g[i];
        }
        for (uint64_t i = 0; k == 0 && i < cur->len[0]; i++) {
            next->w[cur->lo[0] + i] -= LR * m1[i];
        }
        m0 += cur->len[k];
        m1 += cur->len[k];
    }
    return WEFT_OK;
}

/* The plan lists pieces of the new layout that no member holds: say which, and who held
 * them in the old layout over @p prev. */
static void report_missing(const weft_plan_t *plan, const weft_layout_t *old, const int *prev,
                           int nprev)
{
    for (size_t i = 0; i < weft_plan_num_missing(plan); i++) {
        weft_transfer_t x;
        weft_plan_missing(plan, i, &x);
        uint64_t lo = x.box.offset[0], hi = lo + x.box.extent[0];
        char line[256 + 12 * MAX_MEMBERS];
        int len = snprintf(line, 256,
                           "trainer: momentum[%llu, %llu), which member %d needs, "
                           "was held only by members that are gone:",
                           (unsigned long long)lo, (unsigned long long)hi, x.dst);
        for (int j = 0; j < nprev; j++) {
            for (int k = 0; k < weft_layout_num_regions(old, prev[j]); k++) {
                weft_box_t b;
                weft_layout_region(old, prev[j], k, NULL, &b, NULL, NULL);
                if (b.offset[0] < hi && lo < b.offset[0] + b.extent[0]) {
                    len += snprintf(line + len, sizeof(line) - (size_t)len, " %d", prev[j]);
                }
            }
        }
        fprintf(stderr, "%s\n", line); /* one write: ranks print at once */
    }
}

static void print_ids(const char *what, const int *ids, int n)
{
    printf("%s", what);
    for (int i = 0; i < n; i++) {
        printf(" %d", ids[i]);
    }
}

/*
 * The plan is made from what the members of @p g hold of the old layout
 * (weft_layout_keep: the dead hold nothing, nor do joiners) to the layout over them,
 * with allow_missing: a piece nobody holds is listed instead of refused.
 */
weft_status_t state_migrate(weft_group_t *g, const state_t *cur, const int *prev, int nprev,
                            state_t *next, int *lost)
{
    int now[MAX_MEMBERS], rank;
    int size = group_members(g, now, &rank);
    if (size > MAX_MEMBERS) {
        fprintf(stderr, "trainer: at most %d ranks (a batch of %d)\n", MAX_MEMBERS, BATCH);
        return WEFT_ERR_INVALID_ARG;
    }
    weft_layout_t *old = NULL, *held = NULL, *new_layout = NULL;
    weft_plan_t *plan = NULL;
    weft_status_t st = momentum_layout(prev, nprev, &old);
    if (st == WEFT_OK) {
        st = weft_layout_keep(old, now, size, &held);
    }
    if (st == WEFT_OK) {
        st = momentum_layout(now, size, &new_layout);
    }
    weft_plan_params_t pp = {.size = sizeof(pp), .allow_missing = 1};
    if (st == WEFT_OK) {
        st = weft_plan_create(held, new_layout, &pp, &plan);
    }
    if (st == WEFT_OK && weft_plan_num_missing(plan) > 0) {
        if (rank == 0) {
            report_missing(plan, old, prev, nprev);
        }
        *lost = 1;
        st = WEFT_ERR_UNSUPPORTED;
    }
    state_t s = *cur;
    s.w = s.m = NULL;
    if (st == WEFT_OK) {
        st = state_lay_out(&s, new_layout, now, size, now[rank]);
    }
    if (st == WEFT_OK) {
        st = weft_migrate(g, plan, cur->m, s.m, NULL);
    }
    if (st == WEFT_OK) {
        weft_plan_stats_t ps;
        weft_plan_stats(plan, -1, &ps);
        if (rank == 0 && (nprev != size || memcmp(prev, now, (size_t)size * sizeof(int)))) {
            printf("step %d: momentum migrated", cur->step);
            print_ids(" from members", prev, nprev);
            print_ids(" to", now, size);
            printf(": %zu bytes received (lower bound %zu), %zu kept in place\n", ps.bytes_in,
                   ps.bytes_lower_bound, ps.bytes_local);
        }
        memcpy(s.w, cur->w, DIM * sizeof(float));
        *next = s;
    } else {
        state_free(&s);
    }
    weft_plan_free(plan);
    weft_layout_free(new_layout);
    weft_layout_free(held);
    weft_layout_free(old);
    return st;
}
