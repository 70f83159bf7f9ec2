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
#include "migrate/plan.h"
#include "migrate/snapshot.h"
#include "weft/group.h"

weft_status_t weft__snap_target(const weft_snapshot_t *s, const weft_layout_t *target,
                                weft_layout_t **out)
{
    const weft_group_t *g = s->g;
    weft_layout_t *t;
    weft_status_t st = weft_layout_keep(target, g->members, g->size, &t);
    uint64_t shape[1] = {8 + s->blob_bytes};
    for (int i = 0; i < s->n && st == WEFT_OK; i++) {
        char name[WEFT_LAYOUT_NAME_MAX + 1];
        snprintf(name, sizeof(name), WEFT_SNAP_BLOB_PREFIX "%d", s->members[i]);
        int idx;
        st = weft_layout_add_tensor(t, name, WEFT_U8, 1, shape, &idx);
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

/* The survivors' part of copies as a restore's source, each region where it lies
 * (buffer 1: spilled, read back into the restore's spill buffer). A spilled region is
 * left out when its owner lives (it holds its shard in memory) or when its holder, of
 * group rank r, could not read its spilled copies (@p bad[r], NULL: none). */
static weft_status_t restore_source(const weft_snapshot_t *s, const int *bad, weft_layout_t **out)
{
    const weft_layout_t *c = s->copies;
    weft_layout_t *k;
    weft_status_t st = weft_layout_create(&k);
    for (int t = 0; t < c->ntensors && st == WEFT_OK; t++) {
        const weft__ltensor_t *x = &c->tensors[t];
        st = weft_layout_add_tensor(k, x->name, x->dtype, x->ndims, x->shape, NULL);
    }
    for (int i = 0; i < c->nregions && st == WEFT_OK; i++) {
        const weft__lregion_t *r = &c->regions[i];
        int rank, orank;
        if (weft_group_rank_of(s->g, r->member, &rank) != WEFT_OK ||
            (r->buf == 1 && (weft_group_rank_of(s->g, s->owner[i], &orank) == WEFT_OK ||
                             (bad != NULL && bad[rank])))) {
            continue;
        }
        st = weft_layout_add_region(k, r->member, r->tensor, &r->box);
        if (st == WEFT_OK) {
            weft__lregion_t *n = &k->regions[k->nregions - 1];
            n->buf = r->buf;
            n->space = r->space;
            n->space_offset = r->buf == 1 ? r->space_offset : n->space_offset;
        }
    }
    if (st != WEFT_OK) {
        weft_layout_free(k);
        return st;
    }
    *out = k;
    return WEFT_OK;
}

/* What the members agree on before a restore. */
typedef struct agreed {
    uint64_t step; /* the newest step every holder committed */
    int parity;    /* of this member's copy buffer holding it */
    int root;      /* the lowest group rank holding the snapshot */
    bool joiners;  /* some members hold none (admitted since): they get the plan */
    bool spill;    /* the holders spilled buddies' copies (buddy_mem_bytes) */
} agreed_t;

/* The step to restore: the newest every member holding the snapshot committed; and this
 * member's parity. A member whose arguments were refused (@p refused) makes every member
 * fail alike. Members that joined since (@p s->plan == NULL) count for nothing. */
static weft_status_t agree_step(weft_snapshot_t *s, bool refused, agreed_t *a)
{
    weft_group_t *g = s->g;
    bool holder = s->plan != NULL;
    /* MIN of: the committed step (-1 for none), its negation (for the MAX), "my arguments
     * are fine", the rank of a holder, minus "I joined since", minus "I spill". */
    int64_t mine[6] = {holder ? (s->have_committed ? (int64_t)s->committed : -1) : INT64_MAX,
                       holder ? (s->have_committed ? -(int64_t)s->committed : 1) : INT64_MAX,
                       refused ? 0 : 1,
                       holder ? g->rank : INT64_MAX,
                       holder ? 0 : -1,
                       holder && s->spill_mode ? -1 : 0};
    int64_t all[6];
    weft_status_t st = weft_allreduce(g, mine, all, 6, WEFT_I64, WEFT_MIN);
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
    if (all[3] == INT64_MAX) {
        return weft__error(g->ctx, WEFT_ERR_INVALID_ARG,
                           "weft_snapshot_restore: no member holds the snapshot");
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
    a->step = (uint64_t)all[0];
    a->parity = !holder || s->committed == a->step ? s->committed_parity : 1 - s->committed_parity;
    a->root = (int)all[3];
    a->joiners = all[4] < 0;
    a->spill = all[5] < 0;
    return WEFT_OK;
}

/* With spilled copies: each holder reads those of members that are gone from its own
 * directory into *@p spill; then every member learns whose reads failed (an allreduce
 * over group ranks) and leaves their spilled regions out of the plan, which the holders
 * make again if so. */
static weft_status_t read_spilled(weft_snapshot_t *s, const agreed_t *a, uint8_t **spill)
{
    weft_group_t *g = s->g;
    bool holder = s->plan != NULL;
    int *bad = calloc(2 * (size_t)g->size, sizeof(int));
    if (bad == NULL) {
        return weft__error(g->ctx, WEFT_ERR_NO_MEMORY, "weft_snapshot_restore: out of memory");
    }
    if (holder && s->spill_mode) {
        bad[g->rank] = !weft__snap_ssd_read_spill(s, a->step, spill);
    }
    weft_status_t st = weft_allreduce(g, bad, bad + g->size, g->size, WEFT_I32, WEFT_MAX);
    bool any = false;
    for (int r = 0; r < g->size && st == WEFT_OK; r++) {
        any |= bad[g->size + r] != 0;
    }
    if (st == WEFT_OK && any && holder) {
        weft_layout_t *src = NULL, *t = NULL;
        weft_plan_t *plan = NULL;
        weft_plan_params_t pp = {.size = sizeof(pp), .allow_missing = 1};
        if ((st = restore_source(s, bad + g->size, &src)) == WEFT_OK &&
            (st = weft__snap_target(s, s->restore_target, &t)) == WEFT_OK &&
            (st = weft_plan_create(src, t, &pp, &plan)) == WEFT_OK) {
            weft_plan_free(s->restore_plan);
            s->restore_plan = plan;
        }
        weft_layout_free(src);
        weft_layout_free(t);
    }
    free(bad);
    return st;
}

/* With members that joined since: the lowest holder sends them what they cannot compute
 * (the snapshot's members and blob size, and the plan), in two broadcasts every member
 * takes part in. A joiner builds its snapshot object's restore fields from them. */
static weft_status_t share_plan(weft_snapshot_t *s, const agreed_t *a)
{
    weft_group_t *g = s->g;
    const weft_plan_t *pl = s->restore_plan;
    bool root = g->rank == a->root;
    int64_t head[6] = {0};
    if (root) {
        head[0] = s->n;
        head[1] = (int64_t)s->blob_bytes;
        head[2] = (int64_t)pl->nxfers;
        head[3] = (int64_t)pl->nmissing;
        head[4] = (int64_t)pl->lower_bound;
        head[5] = (int64_t)pl->digest;
    }
    weft_status_t st = weft_broadcast(g, head, 6, WEFT_I64, a->root);
    if (st != WEFT_OK) {
        return st;
    }
    size_t nm = (size_t)head[0] * sizeof(int), nx = (size_t)head[2] * sizeof(weft__xfer_t),
           nmiss = (size_t)head[3] * sizeof(weft__xfer_t), len = nm + nx + nmiss;
    uint8_t *payload = malloc(len > 0 ? len : 1);
    if (payload == NULL) {
        return WEFT_ERR_NO_MEMORY; /* the others then fail in the broadcast's timeout */
    }
    if (root) {
        memcpy(payload, s->members, nm);
        if (nx > 0) {
            memcpy(payload + nm, pl->xfers, nx);
        }
        if (nmiss > 0) {
            memcpy(payload + nm + nx, pl->missing, nmiss);
        }
    }
    st = weft_broadcast(g, payload, len, WEFT_U8, a->root);
    if (st == WEFT_OK && s->plan == NULL) { /* a joiner */
        weft_plan_t *p = calloc(1, sizeof(*p));
        int *members = malloc(nm > 0 ? nm : 1);
        if (p == NULL || members == NULL || (p->xfers = malloc(nx > 0 ? nx : 1)) == NULL ||
            (p->missing = malloc(nmiss > 0 ? nmiss : 1)) == NULL) {
            weft_plan_free(p);
            free(members);
            free(payload);
            return WEFT_ERR_NO_MEMORY;
        }
        memcpy(members, payload, nm);
        memcpy(p->xfers, payload + nm, nx);
        memcpy(p->missing, payload + nm + nx, nmiss);
        p->nxfers = (size_t)head[2];
        p->nmissing = (size_t)head[3];
        p->lower_bound = (size_t)head[4];
        p->digest = (uint64_t)head[5];
        free(s->members);
        s->members = members;
        s->n = (int)head[0];
        s->blob_bytes = (size_t)head[1];
        s->restore_plan = p;
    }
    free(payload);
    return st;
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

/* The restore, for a member holding the snapshot and for one that joined since
 * (snap->plan == NULL: it learns the plan from the lowest holder). */
static weft_status_t restore(weft_snapshot_t *snap, const weft_layout_t *target, void *new_buf,
                             size_t new_bytes, weft_snapshot_restored_t *info)
{
    weft_group_t *g = snap->g;
    weft_ctx_t *ctx = g->ctx;
    bool holder = snap->plan != NULL;
    int me = g->members[g->rank];
    weft_layout_t *t = NULL, *src = NULL;
    weft_status_t st = WEFT_OK;
    if (holder) {
        weft_plan_free(snap->restore_plan);
        snap->restore_plan = NULL;
        st = weft__snap_target(snap, target, &t);
        if (st == WEFT_OK) {
            st = restore_source(snap, NULL, &src);
        }
        if (st == WEFT_OK) {
            weft_plan_params_t pp = {.size = sizeof(pp), .allow_missing = 1};
            st = weft_plan_create(src, t, &pp, &snap->restore_plan);
        }
        if (st == WEFT_OK && new_bytes < weft_layout_packed_bytes(t, me)) {
            st = weft__error_noctx(WEFT_ERR_INVALID_ARG,
                                   "new_buf has %zu bytes, the target and the blobs need %zu",
                                   new_bytes, weft_layout_packed_bytes(t, me));
        }
        weft_layout_free(src);
    }
    snap->restored = false;
    if (st != WEFT_OK) {
        char why[512];
        snprintf(why, sizeof(why), "%s", weft_last_error(NULL));
        (void)weft__error(ctx, st, "weft_snapshot_restore: %s", why);
    }
    /* The agreement tells the others when this member's arguments were refused. */
    agreed_t a;
    uint8_t *spill = NULL;
    weft_status_t ast = agree_step(snap, st != WEFT_OK, &a);
    if (st == WEFT_OK && ast == WEFT_OK && a.spill) {
        snap->restore_target = target;
        ast = read_spilled(snap, &a, &spill);
        snap->restore_target = NULL;
    }
    if (st == WEFT_OK && ast == WEFT_OK && a.joiners) {
        ast = share_plan(snap, &a);
    }
    if (st == WEFT_OK && ast == WEFT_OK && !holder) {
        /* A joiner restores into a buffer of its own, now that it knows the blobs. */
        if ((ast = weft__snap_target(snap, target, &t)) == WEFT_OK) {
            new_bytes = weft_layout_packed_bytes(t, me);
            free(snap->join_buf);
            if ((snap->join_buf = malloc(new_bytes > 0 ? new_bytes : 1)) == NULL) {
                ast = weft__error(ctx, WEFT_ERR_NO_MEMORY, "weft_snapshot_restore: out of memory");
            }
            new_buf = snap->join_buf;
        }
    }
    if (st != WEFT_OK || ast != WEFT_OK) {
        free(spill);
        weft_layout_free(t);
        return st != WEFT_OK ? st : ast;
    }
    weft_migrate_params_t mp = {.size = sizeof(mp), .resume_buf = spill};
    st = weft_migrate(g, snap->restore_plan, holder ? snap->buf[a.parity] : NULL, new_buf, &mp);
    if (st == WEFT_OK) {
        free(spill);
    } else {
        weft__retire(ctx, spill); /* cancelled sends may still read it */
    }
    /* What no memory copy held: from the SSD directories, where they have it. */
    size_t nmiss = weft_plan_num_missing(snap->restore_plan);
    bool *got = calloc(nmiss + 1, sizeof(bool));
    int64_t from_ssd[1] = {0}, total[1] = {0};
    if (st == WEFT_OK && got == NULL) {
        st = weft__error(ctx, WEFT_ERR_NO_MEMORY, "weft_snapshot_restore: out of memory");
    }
    if (st == WEFT_OK) {
        from_ssd[0] = (int64_t)weft__snap_ssd_fill(snap, t, a.step, new_buf, got);
        st = weft_allreduce(g, from_ssd, total, 1, WEFT_I64, WEFT_SUM);
    }
    if (st == WEFT_OK && (st = keep_blobs(snap, t, new_buf, got)) == WEFT_OK) {
        snap->restored = true;
        if (info != NULL) {
            weft_plan_stats_t all;
            weft_plan_stats(snap->restore_plan, -1, &all);
            info->step = a.step;
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

weft_status_t weft_snapshot_restore(weft_snapshot_t *snap, const weft_layout_t *target,
                                    void *new_buf, size_t new_bytes, weft_snapshot_restored_t *info)
{
    WEFT_API_LOCK(snap != NULL ? snap->g->ctx : NULL);
    if (snap == NULL || target == NULL || new_buf == NULL) {
        return WEFT_ERR_INVALID_ARG;
    }
    if (snap->plan == NULL) {
        return weft__error(snap->g->ctx, WEFT_ERR_INVALID_ARG,
                           "weft_snapshot_restore: this object only received a restore "
                           "(weft_snapshot_restore_join); free it");
    }
    if (snap->pending != NULL) {
        return weft__error(snap->g->ctx, WEFT_ERR_INVALID_ARG,
                           "weft_snapshot_restore: free the request of the snapshot in flight "
                           "first");
    }
    return restore(snap, target, new_buf, new_bytes, info);
}

weft_status_t weft_snapshot_restore_join(weft_group_t *g, const weft_layout_t *target,
                                         void *new_buf, size_t new_bytes, weft_snapshot_t **snap,
                                         weft_snapshot_restored_t *info)
{
    WEFT_API_LOCK(g != NULL ? g->ctx : NULL);
    if (g == NULL || target == NULL || snap == NULL) {
        return WEFT_ERR_INVALID_ARG;
    }
    weft_snapshot_t *s = calloc(1, sizeof(*s));
    if (s == NULL) {
        return weft__error(g->ctx, WEFT_ERR_NO_MEMORY, "weft_snapshot_restore_join: out of memory");
    }
    s->g = g;
    s->nstate = target->ntensors;
    size_t state = weft_layout_packed_bytes(target, g->members[g->rank]);
    weft_status_t st = WEFT_OK;
    if (new_bytes < state || (new_buf == NULL && state > 0)) {
        st = weft__error(g->ctx, WEFT_ERR_INVALID_ARG,
                         "weft_snapshot_restore_join: new_buf has %zu bytes, the target needs "
                         "%zu",
                         new_buf == NULL ? 0 : new_bytes, state);
        agreed_t a; /* refused: the others learn it in the agreement, nobody waits */
        (void)agree_step(s, true, &a);
        weft_snapshot_free(s);
        return st;
    }
    st = restore(s, target, NULL, 0, info);
    if (st == WEFT_OK && state > 0) {
        memcpy(new_buf, s->join_buf, state); /* the blobs stay in the object */
    }
    free(s->join_buf);
    s->join_buf = NULL;
    if (st != WEFT_OK) {
        weft_snapshot_free(s);
        return st;
    }
    *snap = s;
    return WEFT_OK;
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
