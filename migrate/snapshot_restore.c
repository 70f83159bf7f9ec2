/*
 * Restoring from snapshots after a repair: the survivors agree on the newest step all of
 * them committed (an allreduce of MIN and MAX), each takes the copy buffer of that step
 * (its parity follows from its own last commit), and one migration runs from the
 * survivors' copies to the target plus every member's blob replicated on the survivors.
 */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "migrate/layout.h"
#include "migrate/snapshot.h"

weft_status_t weft__snap_target(const weft_snapshot_t *s, const weft_layout_t *target,
                                weft_layout_t **out)
{
    const weft_group_t *g = s->g;
    weft_layout_t *t;
    weft_status_t st = weft_layout_keep(target, g->members, g->size, &t);
    for (int i = 0; i < s->n && st == WEFT_OK; i++) {
        const weft__ltensor_t *b = &s->src->tensors[s->nstate + i];
        int idx;
        st = weft_layout_add_tensor(t, b->name, b->dtype, b->ndims, b->shape, &idx);
        if (st == WEFT_OK) {
            st = weft_layout_replicate(t, idx, g->members, g->size);
        }
    }
    if (st != WEFT_OK) {
        weft_layout_free(t);
        return st;
    }
    *out = t;
    return WEFT_OK;
}

size_t weft_snapshot_restore_bytes(const weft_snapshot_t *snap, const weft_layout_t *target)
{
    if (snap == NULL || target == NULL) {
        return 0;
    }
    int me = snap->g->members[snap->g->rank];
    return weft_layout_packed_bytes(target, me) + (size_t)snap->n * (8 + snap->blob_bytes);
}

/* The step to restore: the newest every survivor committed; and this member's parity.
 * A member whose arguments were refused (@p refused) makes every member fail alike. */
static weft_status_t agree_step(weft_snapshot_t *s, bool refused, uint64_t *step, int *parity)
{
    weft_group_t *g = s->g;
    /* MIN of the committed steps, and MIN of their negation for the MAX; -1 for none;
     * and MIN of "my arguments are fine". */
    int64_t mine[3] = {s->have_committed ? (int64_t)s->committed : -1,
                       s->have_committed ? -(int64_t)s->committed : 1, refused ? 0 : 1};
    int64_t all[3];
    weft_status_t st = weft_allreduce(g, mine, all, 3, WEFT_I64, WEFT_MIN);
    if (st != WEFT_OK) {
        return st;
    }
    if (refused) {
        return WEFT_ERR_INVALID_ARG;
    }
    if (all[2] == 0) {
        return weft__error(g->ctx, WEFT_ERR_INVALID_ARG,
                           "weft_snapshot_restore: another member's arguments were refused");
    }
    if (all[0] < 0) {
        return weft__error(g->ctx, WEFT_ERR_INVALID_ARG,
                           "weft_snapshot_restore: a member has no committed snapshot");
    }
    if (-all[1] - all[0] > 1) {
        return weft__error(g->ctx, WEFT_ERR_PROTOCOL,
                           "weft_snapshot_restore: members committed steps %" PRId64 " to %" PRId64
                           " (a snapshot started before the previous one "
                           "was committed everywhere)",
                           all[0], -all[1]);
    }
    *step = (uint64_t)all[0];
    *parity = s->committed == *step ? s->committed_parity : 1 - s->committed_parity;
    return WEFT_OK;
}

/* Keep every member's restored blob (the tail of @p buf) for weft_snapshot_blob();
 * @p got[k]: missing piece k was read from SSD files after all. */
static weft_status_t keep_blobs(weft_snapshot_t *s, const weft_layout_t *t, const uint8_t *buf,
                                const bool *got)
{
    size_t each = 8 + s->blob_bytes;
    free(s->blobs);
    free(s->blob_ok);
    s->blobs = malloc((size_t)s->n * each);
    s->blob_ok = calloc((size_t)s->n, sizeof(bool));
    if (s->blobs == NULL || s->blob_ok == NULL) {
        return WEFT_ERR_NO_MEMORY;
    }
    int me = s->g->members[s->g->rank];
    int first = weft_layout_num_regions(t, me) - s->n; /* the blobs come last */
    for (int i = 0; i < s->n; i++) {
        size_t off;
        weft_layout_region(t, me, first + i, NULL, NULL, NULL, &off);
        memcpy(s->blobs + (size_t)i * each, buf + off, each);
        s->blob_ok[i] = true;
    }
    for (size_t k = 0; k < weft_plan_num_missing(s->restore_plan); k++) {
        weft_transfer_t x;
        weft_plan_missing(s->restore_plan, k, &x);
        if (x.dst == me && x.tensor >= s->nstate && !got[k]) {
            s->blob_ok[x.tensor - s->nstate] = false;
        }
    }
    return WEFT_OK;
}

weft_status_t weft_snapshot_restore(weft_snapshot_t *snap, const weft_layout_t *target,
                                    void *new_buf, size_t new_bytes, weft_snapshot_restored_t *info)
{
    WEFT_API_LOCK(snap != NULL ? snap->g->ctx : NULL);
    if (snap == NULL || target == NULL || new_buf == NULL) {
        return WEFT_ERR_INVALID_ARG;
    }
    weft_group_t *g = snap->g;
    weft_ctx_t *ctx = g->ctx;
    if (snap->pending != NULL) {
        return weft__error(ctx, WEFT_ERR_INVALID_ARG,
                           "weft_snapshot_restore: free the request of the snapshot in flight "
                           "first");
    }
    weft_layout_t *t = NULL, *src = NULL;
    weft_status_t st = weft__snap_target(snap, target, &t);
    if (st == WEFT_OK) {
        st = weft_layout_keep(snap->copies, g->members, g->size, &src);
    }
    weft_plan_free(snap->restore_plan);
    snap->restore_plan = NULL;
    snap->restored = false;
    if (st == WEFT_OK) {
        weft_plan_params_t pp = {.size = sizeof(pp), .allow_missing = 1};
        st = weft_plan_create(src, t, &pp, &snap->restore_plan);
    }
    int me = g->members[g->rank];
    if (st == WEFT_OK && new_bytes < weft_layout_packed_bytes(t, me)) {
        st = weft__error_noctx(WEFT_ERR_INVALID_ARG,
                               "new_buf has %zu bytes, the target and the blobs need %zu",
                               new_bytes, weft_layout_packed_bytes(t, me));
    }
    weft_layout_free(src);
    if (st != WEFT_OK) {
        char why[512];
        snprintf(why, sizeof(why), "%s", weft_last_error(NULL));
        (void)weft__error(ctx, st, "weft_snapshot_restore: %s", why);
    }
    /* The agreement tells the others when this member's arguments were refused. */
    uint64_t step = 0;
    int parity = 0;
    weft_status_t ast = agree_step(snap, st != WEFT_OK, &step, &parity);
    if (st != WEFT_OK || ast != WEFT_OK) {
        weft_layout_free(t);
        return st != WEFT_OK ? st : ast;
    }
    st = weft_migrate(g, snap->restore_plan, snap->buf[parity], new_buf, NULL);
    /* What no memory copy held: from the SSD directories, where they have it. */
    size_t nmiss = weft_plan_num_missing(snap->restore_plan);
    bool *got = calloc(nmiss + 1, sizeof(bool));
    int64_t from_ssd[1] = {0}, total[1] = {0};
    if (st == WEFT_OK && got == NULL) {
        st = weft__error(ctx, WEFT_ERR_NO_MEMORY, "weft_snapshot_restore: out of memory");
    }
    if (st == WEFT_OK) {
        from_ssd[0] = (int64_t)weft__snap_ssd_fill(snap, t, step, new_buf, got);
        st = weft_allreduce(g, from_ssd, total, 1, WEFT_I64, WEFT_SUM);
    }
    if (st == WEFT_OK && (st = keep_blobs(snap, t, new_buf, got)) == WEFT_OK) {
        snap->restored = true;
        if (info != NULL) {
            weft_plan_stats_t all;
            weft_plan_stats(snap->restore_plan, -1, &all);
            info->step = step;
            info->bytes_moved = all.bytes_in;
            info->bytes_local = all.bytes_local;
            info->bytes_from_ssd = (size_t)total[0];
            info->bytes_missing = all.bytes_missing - (size_t)total[0];
        }
    }
    free(got);
    weft_layout_free(t);
    return st;
}

weft_status_t weft_snapshot_blob(const weft_snapshot_t *snap, int member, void *out, size_t cap,
                                 size_t *len)
{
    int i = snap != NULL ? weft__snap_index(snap, member) : -1;
    if (i < 0 || !snap->restored || !snap->blob_ok[i] || len == NULL || (out == NULL && cap > 0)) {
        return weft__error_noctx(WEFT_ERR_INVALID_ARG,
                                 "weft_snapshot_blob: no restored blob of member %d", member);
    }
    const uint8_t *b = snap->blobs + (size_t)i * (8 + snap->blob_bytes);
    uint64_t n;
    memcpy(&n, b, 8);
    *len = (size_t)n;
    memcpy(out, b + 8, n < cap ? n : cap);
    return WEFT_OK;
}

const weft_plan_t *weft_snapshot_restore_plan(const weft_snapshot_t *snap)
{
    return snap != NULL ? snap->restore_plan : NULL;
}
