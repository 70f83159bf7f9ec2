/* The example trainer's sharded state and its migration (see sharded_state.h). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "sharded_state.h"

static void keep(retired_t *r, void *p, size_t mem_bytes, int mem)
{
    if (p == NULL) {
        return;
    }
    if (r->n == r->cap) {
        int cap = r->cap > 0 ? 2 * r->cap : 16;
        retired_buf_t *bufs = realloc(r->bufs, (size_t)cap * sizeof(*bufs));
        if (bufs == NULL) {
            return; /* kept for ever: what retiring is for anyway */
        }
        r->bufs = bufs;
        r->cap = cap;
    }
    r->bufs[r->n++] = (retired_buf_t){.p = p, .mem_bytes = mem_bytes, .mem = mem};
}

void retire(retired_t *r, void *p)
{
    keep(r, p, 0, 0);
}

void retire_mem(retired_t *r, void *p, size_t bytes)
{
    keep(r, p, bytes, 1);
}

void retired_free(retired_t *r)
{
    for (int i = 0; i < r->n; i++) {
        if (r->bufs[i].mem) {
            weft_mem_free(r->bufs[i].p, r->bufs[i].mem_bytes);
        } else {
            free(r->bufs[i].p);
        }
    }
    free(r->bufs);
    memset(r, 0, sizeof(*r));
}

weft_status_t state_layout(const int *members, int n, weft_layout_t **out)
{
    weft_layout_t *l;
    weft_status_t st = weft_layout_create(&l);
    if (st != WEFT_OK) {
        return st;
    }
    uint64_t shape[1] = {DIM};
    int w, m;
    st = weft_layout_add_tensor(l, "w", WEFT_F32, 1, shape, &w);
    if (st == WEFT_OK) {
        st = weft_layout_add_tensor(l, "momentum", WEFT_F32, 1, shape, &m);
    }
    if (st == WEFT_OK) { /* each on its own: the same partitions of both */
        st = weft_layout_flat(l, &w, 1, members, n);
    }
    if (st == WEFT_OK) {
        st = weft_layout_flat(l, &m, 1, members, n);
    }
    if (st != WEFT_OK) {
        weft_layout_free(l);
        return st;
    }
    *out = l;
    return WEFT_OK;
}

weft_status_t state_alloc(state_t *s, const int *members, int n, int me, int32_t step)
{
    memset(s, 0, sizeof(*s));
    weft_layout_t *l;
    weft_status_t st = state_layout(members, n, &l);
    if (st != WEFT_OK) {
        return st;
    }
    weft_box_t w_box, m_box;
    size_t m_off = 0;
    if (weft_layout_num_regions(l, me) != 2 ||
        weft_layout_region(l, me, 0, NULL, &w_box, NULL, NULL) != WEFT_OK ||
        weft_layout_region(l, me, 1, NULL, &m_box, NULL, &m_off) != WEFT_OK ||
        w_box.offset[0] != m_box.offset[0] || m_off != w_box.extent[0] * sizeof(float)) {
        weft_layout_free(l);
        fprintf(stderr, "trainer: member %d: not the shard layout this trainer expects\n", me);
        return WEFT_ERR_INVALID_ARG;
    }
    weft_layout_free(l);
    s->step = step;
    s->n = n;
    memcpy(s->members, members, (size_t)n * sizeof(int));
    for (int r = 0; r < n; r++) {
        s->rank = members[r] == me ? r : s->rank;
    }
    s->lo = w_box.offset[0];
    s->len = w_box.extent[0];
    s->w = calloc(DIM + MAX_MEMBERS, sizeof(float));
    s->shard = calloc(2 * s->len + 1, sizeof(float));
    if (s->w == NULL || s->shard == NULL) {
        state_free(s);
        return WEFT_ERR_NO_MEMORY;
    }
    return WEFT_OK;
}

void state_free(state_t *s)
{
    free(s->w);
    free(s->shard);
    memset(s, 0, sizeof(*s));
}

int group_members(weft_group_t *g, int *ids)
{
    int size;
    weft_group_size(g, &size);
    for (int r = 0; r < size && r < MAX_MEMBERS; r++) {
        weft_group_member_id(g, r, &ids[r]);
    }
    return size;
}

weft_status_t state_step(const state_t *cur, const float *grad, state_t *next)
{
    *next = *cur;
    next->w = malloc((DIM + MAX_MEMBERS) * sizeof(float));
    next->shard = malloc((2 * cur->len + 1) * sizeof(float));
    if (next->w == NULL || next->shard == NULL) {
        state_free(next);
        return WEFT_ERR_NO_MEMORY;
    }
    memcpy(next->w, cur->w, (DIM + MAX_MEMBERS) * sizeof(float));
    memcpy(next->shard, cur->shard, 2 * cur->len * sizeof(float));
    toy_update(next->shard, next->shard + cur->len, grad, cur->len);
    next->step = cur->step + 1;
    return WEFT_OK;
}

weft_status_t state_gather_w(weft_group_t *g, state_t *s)
{
    /* Partition r starts at r * per; the last ones may be shorter, and the allgather
     * sends their padding too. */
    size_t per = (DIM + (size_t)s->n - 1) / (size_t)s->n;
    memcpy(s->w + s->lo, s->shard, s->len * sizeof(float));
    return weft_allgather(g, s->w + (size_t)s->rank * per, s->w, per, WEFT_F32);
}

static void print_ids(const char *what, const int *ids, int n)
{
    printf("%s", what);
    for (int i = 0; i < n; i++) {
        printf(" %d", ids[i]);
    }
}

weft_status_t state_move(weft_group_t *g, const int *src, int n_src, const void *src_buf,
                         int32_t step, state_t *next, retired_t *r)
{
    int now[MAX_MEMBERS], rank;
    int size = group_members(g, now);
    weft_group_rank(g, &rank);
    if (size > MAX_MEMBERS) {
        fprintf(stderr, "trainer: at most %d ranks (%d blocks in a batch)\n", MAX_MEMBERS, BLOCKS);
        return WEFT_ERR_INVALID_ARG;
    }
    weft_layout_t *old = NULL, *held = NULL, *new_layout = NULL;
    weft_plan_t *plan = NULL;
    weft_status_t st = state_layout(src, n_src, &old);
    if (st == WEFT_OK) {
        st = weft_layout_keep(old, now, size, &held);
    }
    if (st == WEFT_OK) {
        st = state_layout(now, size, &new_layout);
    }
    if (st == WEFT_OK) {
        st = weft_plan_create(held, new_layout, NULL, &plan); /* refuses a piece nobody has */
    }
    if (st == WEFT_OK) {
        st = state_alloc(next, now, size, now[rank], step);
    }
    if (st == WEFT_OK) {
        st = weft_migrate(g, plan, src_buf, next->shard, NULL);
        if (st != WEFT_OK) {
            retire(r, next->shard); /* a failed migration may still write into it */
            next->shard = NULL;
        }
    }
    if (st == WEFT_OK) {
        st = state_gather_w(g, next);
    }
    if (st == WEFT_OK && rank == 0 &&
        (n_src != size || memcmp(src, now, (size_t)size * sizeof(int)) != 0)) {
        weft_plan_stats_t ps = {.size = sizeof(ps)};
        weft_plan_stats(plan, -1, &ps);
        printf("step %d: state moved", step);
        print_ids(" from members", src, n_src);
        print_ids(" to", now, size);
        printf(": %zu bytes received (lower bound %zu), %zu kept in place\n", ps.bytes_in,
               ps.bytes_lower_bound, ps.bytes_local);
    }
    if (st != WEFT_OK) {
        state_free(next);
    }
    weft_plan_free(plan);
    weft_layout_free(new_layout);
    weft_layout_free(held);
    weft_layout_free(old);
    return st;
}
