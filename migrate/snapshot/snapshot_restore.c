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

#include "comm/fault.h"
#include "migrate/engine/engine.h"
#include "migrate/layout/layout.h"
#include "migrate/layout/plan.h"
#include "migrate/snapshot/snapshot.h"
#include "util/sized.h"
#include "weft/group.h"

weft_status_t weft__snap_target(const weft_snapshot_t *s, const weft_layout_t *target,
                                weft_layout_t **out)
{
    const weft_group_t *g = s->g;
    weft_layout_t *t;
    weft_status_t st = weft_layout_keep(target, weft__group_members(g), weft__group_size(g), &t);
    uint64_t shape[1] = {8 + s->blob_bytes};
    for (int i = 0; i < s->n && st == WEFT_OK; i++) {
        char name[WEFT_LAYOUT_NAME_MAX + 1];
        snprintf(name, sizeof(name), WEFT_SNAP_BLOB_PREFIX "%d", s->members[i]);
        int idx;
        st = weft_layout_add_tensor(t, name, WEFT_U8, 1, shape, &idx);
        if (st == WEFT_OK) {
            st = weft_layout_replicate(t, idx, weft__group_members(g), weft__group_size(g));
        }
    }
    /* A member admitted since receives the blobs straight into its snapshot object's
     * blob array (buffer 1), its state into the caller's buffer: no copy afterwards. */
    for (int r = 0; r < weft__group_size(g) && st == WEFT_OK; r++) {
        const weft__lmember_t *m = weft__layout_member(t, weft__group_members(g)[r]);
        if (weft__snap_index(s, weft__group_members(g)[r]) >= 0 || m == NULL) {
            continue;
        }
        for (int i = 0; i < s->n; i++) {
            weft__lregion_t *reg = &t->regions[m->regions[m->nregions - s->n + i]];
            reg->buf = 1;
            reg->space_offset = (size_t)i * (8 + s->blob_bytes);
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
    int me = weft__group_members(snap->g)[weft__group_rank(snap->g)];
    return weft_layout_packed_bytes(target, me) + (size_t)snap->n * (8 + snap->blob_bytes);
}

/* The survivors' part of copies as a restore's source, each region where it lies
 * (buffer 1: spilled, read back into the restore's spill buffer). A spilled region is
 * left out when its owner lives (it holds its shard in memory) or when its holder, of
 * group rank r, could not read its spilled copies (@p bad[r], NULL: none). With @p live,
 * every survivor's state regions come from its live buffer (buffer 2) instead, and the
 * copies add only the shards of members that are gone (and the blobs). */
static weft_status_t restore_source(const weft_snapshot_t *s, const int *bad, bool live,
                                    weft_layout_t **out)
{
    const weft_layout_t *c = s->copies;
    weft_layout_t *k;
    weft_status_t st = weft_layout_create(&k);
    for (int t = 0; t < c->ntensors && st == WEFT_OK; t++) {
        const weft__ltensor_t *x = &c->tensors[t];
        st = weft_layout_add_tensor(k, x->name, x->dtype, x->ndims, x->shape, NULL);
    }
    for (int i = 0; live && i < s->src->nregions && st == WEFT_OK; i++) {
        const weft__lregion_t *r = &s->src->regions[i];
        int rank;
        if (r->tensor >= s->nstate || weft_group_rank_of(s->g, r->member, &rank) != WEFT_OK) {
            continue;
        }
        if ((st = weft_layout_add_region(k, r->member, r->tensor, &r->box)) == WEFT_OK) {
            weft__lregion_t *n = &k->regions[k->nregions - 1];
            n->buf = 2;
            n->space_offset = r->space_offset;
        }
    }
    for (int i = 0; i < c->nregions && st == WEFT_OK; i++) {
        const weft__lregion_t *r = &c->regions[i];
        int rank, orank;
        bool owner_lives = weft_group_rank_of(s->g, s->owner[i], &orank) == WEFT_OK;
        if (weft_group_rank_of(s->g, r->member, &rank) != WEFT_OK ||
            (r->buf == 1 && (owner_lives || (bad != NULL && bad[rank]))) ||
            (live && r->tensor < s->nstate && owner_lives)) {
            continue;
        }
        int first = k->nregions;
        st = live ? weft__snap_add_part(k, r->member, r->tensor, &r->box)
                  : weft_layout_add_region(k, r->member, r->tensor, &r->box);
        for (int j = first; j < k->nregions && st == WEFT_OK; j++) {
            k->regions[j].buf = r->buf;
            k->regions[j].space = r->space;
            k->regions[j].space_offset = r->space_offset;
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
    bool live;     /* every holder's live buffer holds the step (weft_snapshot_restore_live) */
} agreed_t;

/* The step to restore: the newest every member holding the snapshot committed; and this
 * member's parity. A member whose arguments were refused (@p refused) makes every member
 * fail alike. Members that joined since (@p s->plan == NULL) count for nothing. */
static weft_status_t agree_step(weft_snapshot_t *s, bool refused, agreed_t *a)
{
    weft_group_t *g = s->g;
    bool holder = s->plan != NULL;
    /* MIN of: the committed step (-1 for none), its negation (for the MAX), "my arguments
     * are fine", the rank of a holder, minus "I joined since", minus "I spill", minus "my
     * live buffer is not given". */
    int64_t mine[7] = {holder ? (s->have_committed ? (int64_t)s->committed : -1) : INT64_MAX,
                       holder ? (s->have_committed ? -(int64_t)s->committed : 1) : INT64_MAX,
                       refused ? 0 : 1,
                       holder ? weft__group_rank(g) : INT64_MAX,
                       holder ? 0 : -1,
                       holder && s->spill_mode ? -1 : 0,
                       holder && s->live == NULL ? -1 : 0};
    int64_t all[7];
    weft_status_t st = weft_allreduce(g, mine, all, 7, WEFT_I64, WEFT_MIN);
    if (st != WEFT_OK) {
        return st;
    }
    if (refused) {
        return WEFT_ERR_INVALID_ARG;
    }
    if (all[2] == 0) {
        return weft__error(weft__group_ctx(g), WEFT_ERR_INVALID_ARG,
                           "weft_snapshot_restore: another member's arguments were refused");
    }
    if (all[3] == INT64_MAX) {
        return weft__error(weft__group_ctx(g), WEFT_ERR_INVALID_ARG,
                           "weft_snapshot_restore: no member holds the snapshot");
    }
    if (all[0] < 0) {
        return weft__error(weft__group_ctx(g), WEFT_ERR_INVALID_ARG,
                           "weft_snapshot_restore: a member has no committed snapshot");
    }
    if (-all[1] - all[0] > 1) {
        return weft__error(weft__group_ctx(g), WEFT_ERR_PROTOCOL,
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
    /* Live buffers hold the committed step: of use only when every holder's does, and
     * every holder committed the same step. */
    a->live = all[6] == 0 && all[0] == -all[1];
    return WEFT_OK;
}

/* With spilled copies: each holder reads those of members that are gone from its own
 * directory into *@p spill; then every member learns whose reads failed (an allreduce
 * over group ranks): *@p bad gets a flag per group rank when some read failed, else
 * NULL. */
static weft_status_t read_spilled(weft_snapshot_t *s, const agreed_t *a, uint8_t **spill, int **bad)
{
    weft_group_t *g = s->g;
    int *flags = calloc(2 * (size_t)weft__group_size(g), sizeof(int));
    if (flags == NULL) {
        return weft__error(weft__group_ctx(g), WEFT_ERR_NO_MEMORY,
                           "weft_snapshot_restore: out of memory");
    }
    if (s->plan != NULL && s->spill_mode) {
        flags[weft__group_rank(g)] = !weft__snap_ssd_read_spill(s, a->step, spill);
    }
    weft_status_t st = weft_allreduce(g, flags, flags + weft__group_size(g), weft__group_size(g),
                                      WEFT_I32, WEFT_MAX);
    bool any = false;
    for (int r = 0; r < weft__group_size(g) && st == WEFT_OK; r++) {
        any |= flags[weft__group_size(g) + r] != 0;
    }
    if (st == WEFT_OK && any) {
        memmove(flags, flags + weft__group_size(g), (size_t)weft__group_size(g) * sizeof(int));
        *bad = flags;
    } else {
        free(flags);
    }
    return st;
}

/* Whether transfer @p x restores in place: from this member's live buffer into the same
 * memory of @p new_buf (the migration then copies nothing). */
static bool in_place(const weft_snapshot_t *s, const weft__xfer_t *x, const uint8_t *new_buf)
{
    int me = weft__group_members(s->g)[weft__group_rank(s->g)];
    return s->live != NULL && x->t.src == me && x->t.dst == me && x->src_buf == 2 &&
           x->dst_buf == 0 && s->live + x->src_packed == new_buf + x->dst_packed &&
           memcmp(&x->src_box, &x->dst_box, sizeof(x->dst_box)) == 0;
}

/* Whether a write into @p new_buf hits this member's live buffer, other than a region
 * restored in place. */
static bool writes_into_live(const weft_snapshot_t *s, const uint8_t *new_buf)
{
    int me = weft__group_members(s->g)[weft__group_rank(s->g)];
    const weft__lmember_t *m = weft__layout_member(s->src, me);
    size_t live_bytes = 0;
    for (int k = 0; m != NULL && k < m->nregions; k++) {
        const weft__lregion_t *r = &s->src->regions[m->regions[k]];
        if (r->tensor < s->nstate && r->space_offset + r->bytes > live_bytes) {
            live_bytes = r->space_offset + r->bytes;
        }
    }
    const weft_plan_t *p = s->restore_plan;
    for (size_t i = 0; i < p->nxfers + p->nmissing; i++) {
        const weft__xfer_t *x = i < p->nxfers ? &p->xfers[i] : &p->missing[i - p->nxfers];
        size_t len = x->elem;
        for (int d = 0; d < x->ndims; d++) {
            len *= x->dst_box.extent[d];
        }
        const uint8_t *d = new_buf + x->dst_packed;
        if (x->t.dst == me && d < s->live + live_bytes && s->live < d + len &&
            !(i < p->nxfers && in_place(s, x, new_buf))) {
            return true;
        }
    }
    return false;
}

/* After the agreement: the holders make the plan again from the live buffers or without
 * the spilled copies that could not be read (@p bad), and every member learns whether
 * every holder could (an allreduce), so nobody waits for a member that gave up. */
static weft_status_t replan(weft_snapshot_t *s, const weft_layout_t *target, const int *bad,
                            bool live, void *new_buf)
{
    weft_group_t *g = s->g;
    weft_status_t st = WEFT_OK;
    if (s->plan != NULL) {
        weft_layout_t *src = NULL, *t = NULL;
        weft_plan_t *plan = NULL;
        weft_plan_params_t pp = {.size = sizeof(pp), .allow_missing = 1};
        if ((st = restore_source(s, bad, live, &src)) == WEFT_OK &&
            (st = weft__snap_target(s, target, &t)) == WEFT_OK &&
            (st = weft_plan_create(src, t, &pp, &plan)) == WEFT_OK) {
            weft_plan_free(s->restore_plan);
            s->restore_plan = plan;
        }
        weft_layout_free(src);
        weft_layout_free(t);
        if (st == WEFT_OK && live && writes_into_live(s, new_buf)) {
            st = weft__error(weft__group_ctx(g), WEFT_ERR_INVALID_ARG,
                             "weft_snapshot_restore_live: new_buf overlaps the live buffer "
                             "where the target does not keep the live regions in place");
        }
    }
    int64_t ok = st == WEFT_OK, all = 0;
    weft_status_t ast = weft_allreduce(g, &ok, &all, 1, WEFT_I64, WEFT_MIN);
    if (st == WEFT_OK && ast == WEFT_OK && all == 0) {
        st = weft__error(weft__group_ctx(g), WEFT_ERR_INVALID_ARG,
                         "weft_snapshot_restore: another member could not plan the restore");
    }
    return st != WEFT_OK ? st : ast;
}

/* With members that joined since: the lowest holder sends them what they cannot compute
 * (the snapshot's members and blob size, and the plan), in two broadcasts every member
 * takes part in. A joiner builds its snapshot object's restore fields from them. */
/* This member cannot hold the shared plan: it revokes the group, so the others fail in
 * the broadcast or the migration at once instead of waiting for it to their timeout. */
static weft_status_t share_failed(weft_group_t *g)
{
    (void)weft_group_revoke(g);
    return weft__error(weft__group_ctx(g), WEFT_ERR_NO_MEMORY,
                       "weft_snapshot_restore: out of memory for the plan shared with newcomers "
                       "(the group is revoked)");
}

static weft_status_t share_plan(weft_snapshot_t *s, const agreed_t *a)
{
    weft_group_t *g = s->g;
    const weft_plan_t *pl = s->restore_plan;
    bool root = weft__group_rank(g) == a->root;
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
    /* snap_share_fail (comm/fault.h): the test of a holder that cannot share. */
    bool refuse = root && weft__ctx_faults(weft__group_ctx(g))->snap_share_fail;
    uint8_t *payload = refuse ? NULL : malloc(len > 0 ? len : 1);
    if (payload == NULL) {
        return share_failed(g);
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
            return share_failed(g);
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
    free(s->blob_ok);
    if (s->blobs == NULL) { /* a joiner's received them there already */
        s->blobs = malloc((size_t)s->n * each);
    }
    s->blob_ok = calloc((size_t)s->n, sizeof(bool));
    if (s->blobs == NULL || s->blob_ok == NULL) {
        return WEFT_ERR_NO_MEMORY;
    }
    int me = weft__group_members(s->g)[weft__group_rank(s->g)];
    const weft__lmember_t *m = weft__layout_member(t, me);
    int first = m->nregions - s->n; /* the blobs come last */
    for (int i = 0; i < s->n; i++) {
        const weft__lregion_t *r = &t->regions[m->regions[first + i]];
        if (r->buf != 1) {
            memcpy(s->blobs + (size_t)i * each, buf + r->packed_offset, each);
        }
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

/* Whether the caller's @p info (may be NULL) has every field of the struct. */
static bool restored_size_ok(const weft_snapshot_restored_t *info)
{
    return info == NULL || info->size >= WEFT__SIZED_MIN(weft_snapshot_restored_t, bytes_from_ssd);
}

/* The restore, for a member holding the snapshot and for one that joined since
 * (snap->plan == NULL: it learns the plan from the lowest holder). */
static weft_status_t restore(weft_snapshot_t *snap, const weft_layout_t *target, void *new_buf,
                             size_t new_bytes, weft_snapshot_restored_t *info)
{
    weft_group_t *g = snap->g;
    weft_ctx_t *ctx = weft__group_ctx(g);
    bool holder = snap->plan != NULL;
    int me = weft__group_members(g)[weft__group_rank(g)];
    weft_layout_t *t = NULL, *src = NULL;
    /* Refused arguments of any member, this one included, fail the agreement below on
     * every member: nobody is left waiting. */
    weft_status_t st = restored_size_ok(info)
                           ? WEFT_OK
                           : weft__error_noctx(WEFT_ERR_INVALID_ARG,
                                               "info->size is %zu, set it to "
                                               "sizeof(weft_snapshot_restored_t)",
                                               info->size);
    if (holder && st == WEFT_OK) {
        weft_plan_free(snap->restore_plan);
        snap->restore_plan = NULL;
        st = weft__snap_target(snap, target, &t);
        if (st == WEFT_OK) {
            st = restore_source(snap, NULL, false, &src);
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
    int *bad = NULL;
    weft_status_t ast = agree_step(snap, st != WEFT_OK, &a);
    if (st == WEFT_OK && ast == WEFT_OK && a.spill) {
        ast = read_spilled(snap, &a, &spill, &bad);
    }
    if (st == WEFT_OK && ast == WEFT_OK && (a.live || bad != NULL)) {
        ast = replan(snap, target, bad, a.live, new_buf);
    }
    free(bad);
    if (st == WEFT_OK && ast == WEFT_OK && a.joiners) {
        ast = share_plan(snap, &a);
    }
    if (st == WEFT_OK && ast == WEFT_OK && !holder) {
        /* A joiner: its state into the caller's buffer, the blobs into the object. */
        if ((ast = weft__snap_target(snap, target, &t)) == WEFT_OK) {
            free(snap->blobs);
            if ((snap->blobs = malloc((size_t)snap->n * (8 + snap->blob_bytes) + 1)) == NULL) {
                ast = weft__error(ctx, WEFT_ERR_NO_MEMORY, "weft_snapshot_restore: out of memory");
            }
        }
    }
    if (st != WEFT_OK || ast != WEFT_OK) {
        free(spill);
        weft_layout_free(t);
        return st != WEFT_OK ? st : ast;
    }
    weft_migrate_params_t mp = {.size = sizeof(mp), .resume_buf = spill};
    weft__mig_ext_t ext = {.old_buf2 = a.live ? snap->live : NULL,
                           .new_buf1 = holder ? NULL : snap->blobs};
    weft_req_t *req = NULL;
    st = weft__migrate_start_ext(g, snap->restore_plan, holder ? snap->buf[a.parity] : NULL,
                                 new_buf, &mp, 0, &ext, &req);
    st = weft__blocking(st, req);
    if (st == WEFT_OK) {
        free(spill);
    } else {
        weft__retire(ctx, spill); /* cancelled sends may still read it */
    }
    snap->stats.restore_in_place_bytes = 0;
    for (size_t i = 0; holder && a.live && i < snap->restore_plan->nxfers; i++) {
        const weft__xfer_t *x = &snap->restore_plan->xfers[i];
        if (in_place(snap, x, new_buf)) {
            snap->stats.restore_in_place_bytes += x->t.bytes;
        }
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
            weft_plan_stats_t all = {.size = sizeof(all)};
            weft_plan_stats(snap->restore_plan, -1, &all);
            weft_snapshot_restored_t r = {
                .size = sizeof(r),
                .step = a.step,
                .bytes_moved = all.bytes_in,
                .bytes_local = all.bytes_local,
                .bytes_from_ssd = (size_t)total[0],
                .bytes_missing = all.bytes_missing - (size_t)total[0],
            };
            weft__sized_copy(info, &r, sizeof(r));
        }
    }
    free(got);
    weft_layout_free(t);
    return st;
}

weft_status_t weft_snapshot_restore(weft_snapshot_t *snap, const weft_layout_t *target,
                                    void *new_buf, size_t new_bytes, weft_snapshot_restored_t *info)
{
    return weft_snapshot_restore_live(snap, target, NULL, new_buf, new_bytes, info);
}

weft_status_t weft_snapshot_restore_live(weft_snapshot_t *snap, const weft_layout_t *target,
                                         const void *live_buf, void *new_buf, size_t new_bytes,
                                         weft_snapshot_restored_t *info)
{
    WEFT_API_LOCK(snap != NULL ? weft__group_ctx(snap->g) : NULL);
    if (snap == NULL || target == NULL || new_buf == NULL) {
        return WEFT_ERR_INVALID_ARG;
    }
    if (snap->plan == NULL) {
        return weft__error(weft__group_ctx(snap->g), WEFT_ERR_INVALID_ARG,
                           "weft_snapshot_restore: this object only received a restore "
                           "(weft_snapshot_restore_join); free it");
    }
    if (snap->pending != NULL) {
        return weft__error(weft__group_ctx(snap->g), WEFT_ERR_INVALID_ARG,
                           "weft_snapshot_restore: free the request of the snapshot in flight "
                           "first");
    }
    snap->live = live_buf;
    weft_status_t st = restore(snap, target, new_buf, new_bytes, info);
    snap->live = NULL;
    return st;
}

weft_status_t weft_snapshot_restore_join(weft_group_t *g, const weft_layout_t *target,
                                         void *new_buf, size_t new_bytes, weft_snapshot_t **snap,
                                         weft_snapshot_restored_t *info)
{
    WEFT_API_LOCK(g != NULL ? weft__group_ctx(g) : NULL);
    if (g == NULL || target == NULL || snap == NULL) {
        return WEFT_ERR_INVALID_ARG;
    }
    weft_snapshot_t *s = calloc(1, sizeof(*s));
    if (s == NULL) {
        return weft__error(weft__group_ctx(g), WEFT_ERR_NO_MEMORY,
                           "weft_snapshot_restore_join: out of memory");
    }
    s->g = g;
    s->nstate = target->ntensors;
    size_t state = weft_layout_packed_bytes(target, weft__group_members(g)[weft__group_rank(g)]);
    weft_status_t st = WEFT_OK;
    if (new_bytes < state || (new_buf == NULL && state > 0)) {
        st = weft__error(weft__group_ctx(g), WEFT_ERR_INVALID_ARG,
                         "weft_snapshot_restore_join: new_buf has %zu bytes, the target needs "
                         "%zu",
                         new_buf == NULL ? 0 : new_bytes, state);
        agreed_t a; /* refused: the others learn it in the agreement, nobody waits */
        (void)agree_step(s, true, &a);
        weft_snapshot_free(s);
        return st;
    }
    st = restore(s, target, new_buf, new_bytes, info);
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
